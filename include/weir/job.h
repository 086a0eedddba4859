/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/job.h - jobs as plugins: registering a job in a shared library, and
 * loading one behind the ABI gate.
 *
 * A job is a shared library (a "plugin") whose define function builds the
 * job's graph with the weir/stream.h API. The library registers it once, at
 * file scope:
 *
 *     static int define(weir_job *j, int argc, char **argv)
 *     {
 *         weir_stream *s = weir_job_source(j, "lines", &lines_def, NULL);
 *         ...
 *         return 0;
 *     }
 *     WEIR_REGISTER_JOB("word-count", "1.0", define);
 *
 * The macro emits the plugin's identity twice: as an ELF note in the file
 * (.note.weir.job) and as the handshake functions the loader looks up by
 * name (the weir_plugin_* prototypes below). The identity is that of the
 * headers the plugin was compiled against (ABI fingerprint and version),
 * its target (OS and CPU) and its toolchain (compiler family and sanitizer
 * instrumentation); the macro also emits the job entry itself.
 * weir_plugin_open() reads the note from the file, without loading it, and
 * refuses the plugin unless all four match the running weir; only then
 * does it dlopen the file (which runs the plugin's constructors) and check
 * the handshake again, in memory. A plugin compiled against
 * other headers could lay out a weir struct differently, and one built with
 * another sanitizer calls into a runtime that is not there.
 *
 * The same plugin is loaded by every process that touches the job (today
 * the weir command; later a submitter, a coordinator and workers). Each
 * calls the define function on a fresh job, and operators are named by the
 * define function in the order it adds them, so a deterministic define
 * function gives identical operator names everywhere.
 *
 * Symbols. A plugin does not link libweir: its weir_* calls bind, at dlopen,
 * to the one libweir of the process loading it (which exports all of it; see
 * docs/jobs.md), so the job's operators run on the host's runtime. Build
 * plugins with weir_add_job() (CMake) or `pkg-config --cflags weir`.
 *
 * Lifetime. A plugin that passed the gate stays mapped until the process
 * exits: a job built from it holds pointers to its functions and constants,
 * and nothing can prove they are all gone. weir_plugin_close() frees the
 * handle only. A plugin refused by the gate was never loaded: none of its
 * code, constructors included, has run.
 */
#ifndef WEIR_JOB_H
#define WEIR_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "stream.h"
#include <weir/abi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Build the job's graph on j from the job arguments (argv[0] is the plugin's
 * path). 0, or a negative errno: the job is not run. Graph errors recorded
 * in j (weir_job_error) fail the build too. */
typedef int (*weir_job_define_fn)(weir_job *j, int argc, char **argv);

/* What WEIR_REGISTER_JOB registers (weir_plugin_job() returns it). */
typedef struct weir_job_entry {
    const char *name;    /* the job's name (weir_job_new) */
    const char *version; /* the job's own version, free text */
    weir_job_define_fn define;
} weir_job_entry;

/* ---- identity: what the gate compares ------------------------------------------------- */

/* The target, "<os>-<cpu>": linux-x86_64, linux-aarch64... */
#if defined(__linux__)
#define WEIR__ABI_OS "linux"
#else
#define WEIR__ABI_OS "unknown"
#endif
#if defined(__x86_64__)
#define WEIR__ABI_CPU "x86_64"
#elif defined(__aarch64__)
#define WEIR__ABI_CPU "aarch64"
#elif defined(__riscv) && __riscv_xlen == 64
#define WEIR__ABI_CPU "riscv64"
#else
#define WEIR__ABI_CPU "unknown"
#endif
#define WEIR_ABI_TARGET WEIR__ABI_OS "-" WEIR__ABI_CPU

/* The toolchain, "<compiler family>/<instrumentation>": gcc/none,
 * clang/asan, clang/tsan... Composed per translation unit, so a plugin
 * reports how it was itself compiled. */
#if defined(__clang__)
#define WEIR__ABI_CC "clang"
#elif defined(__GNUC__)
#define WEIR__ABI_CC "gcc"
#else
#define WEIR__ABI_CC "cc"
#endif
#if defined(__SANITIZE_ADDRESS__)
#define WEIR__ABI_SAN "asan"
#elif defined(__SANITIZE_THREAD__)
#define WEIR__ABI_SAN "tsan"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEIR__ABI_SAN "asan"
#elif __has_feature(thread_sanitizer)
#define WEIR__ABI_SAN "tsan"
#endif
#endif
#ifndef WEIR__ABI_SAN
#define WEIR__ABI_SAN "none"
#endif
#define WEIR_ABI_TOOLCHAIN WEIR__ABI_CC "/" WEIR__ABI_SAN

/* The identity of one side of the gate. */
typedef struct weir_abi_id {
    const char *fingerprint; /* SHA-256 of the public headers, hex */
    int version;             /* WEIR_ABI_VERSION */
    const char *target;      /* WEIR_ABI_TARGET */
    const char *toolchain;   /* WEIR_ABI_TOOLCHAIN */
} weir_abi_id;

/* This weir's own identity (the loader's side). */
const weir_abi_id *weir_abi_self(void);

/* The gate itself, pure: 0 when a plugin with identity `plugin` may load
 * into `host`, else WEIR_EABI (weir/error.h) and msg says every field that differs, with
 * both values. msg may be NULL. */
int weir_abi_check(const weir_abi_id *host, const weir_abi_id *plugin, char *msg, size_t msglen);

/* ---- registering a job ---------------------------------------------------------------- */

/* The handshake functions a plugin exports (WEIR_REGISTER_JOB defines them;
 * the host never does). */
const char *weir_plugin_abi_fingerprint(void);
int weir_plugin_abi_version(void);
const char *weir_plugin_target(void);
const char *weir_plugin_toolchain(void);
const weir_job_entry *weir_plugin_job(void);

/* Test builds override what a plugin claims, to exercise the gate. */
#ifdef WEIR_ABI_FINGERPRINT_OVERRIDE
#define WEIR__PLUGIN_FINGERPRINT WEIR_ABI_FINGERPRINT_OVERRIDE
#else
#define WEIR__PLUGIN_FINGERPRINT WEIR_ABI_FINGERPRINT
#endif
#ifdef WEIR_ABI_TARGET_OVERRIDE
#define WEIR__PLUGIN_TARGET WEIR_ABI_TARGET_OVERRIDE
#else
#define WEIR__PLUGIN_TARGET WEIR_ABI_TARGET
#endif
#ifdef WEIR_ABI_TOOLCHAIN_OVERRIDE
#define WEIR__PLUGIN_TOOLCHAIN WEIR_ABI_TOOLCHAIN_OVERRIDE
#else
#define WEIR__PLUGIN_TOOLCHAIN WEIR_ABI_TOOLCHAIN
#endif

#define WEIR__PLUGIN_EXPORT __attribute__((visibility("default"), used))

/* The identity note: an ELF note (section .note.weir.job, so the linker puts
 * it in a PT_NOTE segment) named "weir", whose desc is the ABI version as a
 * 32-bit integer, then the fingerprint, target and toolchain as
 * NUL-terminated strings, zero-padded to 4 bytes. The loader reads it from
 * the file before dlopen, so a refused plugin's code (its constructors
 * included) never runs. */
#define WEIR__PLUGIN_NOTE_NAME "weir"
#define WEIR__PLUGIN_NOTE_TYPE 0x574a4f42u /* "WJOB" */
#define WEIR__PLUGIN_NOTE_STRS                                                                     \
    WEIR__PLUGIN_FINGERPRINT "\0" WEIR__PLUGIN_TARGET "\0" WEIR__PLUGIN_TOOLCHAIN
#define WEIR__PLUGIN_NOTE_STRS_SIZE ((sizeof(WEIR__PLUGIN_NOTE_STRS) + 3) & ~(size_t)3)

/* Register the plugin's job: name and version are string literals,
 * define_fn a weir_job_define_fn. Once per plugin, at file scope, followed
 * by a semicolon. */
#define WEIR_REGISTER_JOB(name, version, define_fn)                                                \
    static const struct {                                                                          \
        uint32_t n_namesz, n_descsz, n_type;                                                       \
        char n_name[8];                                                                            \
        int32_t n_version;                                                                         \
        char n_strs[WEIR__PLUGIN_NOTE_STRS_SIZE];                                                  \
    } weir__plugin_note __attribute__((section(".note.weir.job"), aligned(4), used)) = {           \
        sizeof(WEIR__PLUGIN_NOTE_NAME),                                                            \
        4 + WEIR__PLUGIN_NOTE_STRS_SIZE,                                                           \
        WEIR__PLUGIN_NOTE_TYPE,                                                                    \
        WEIR__PLUGIN_NOTE_NAME,                                                                    \
        WEIR_ABI_VERSION,                                                                          \
        WEIR__PLUGIN_NOTE_STRS};                                                                   \
    WEIR__PLUGIN_EXPORT const char *weir_plugin_abi_fingerprint(void)                              \
    {                                                                                              \
        return WEIR__PLUGIN_FINGERPRINT;                                                           \
    }                                                                                              \
    WEIR__PLUGIN_EXPORT int weir_plugin_abi_version(void)                                          \
    {                                                                                              \
        return WEIR_ABI_VERSION;                                                                   \
    }                                                                                              \
    WEIR__PLUGIN_EXPORT const char *weir_plugin_target(void)                                       \
    {                                                                                              \
        return WEIR__PLUGIN_TARGET;                                                                \
    }                                                                                              \
    WEIR__PLUGIN_EXPORT const char *weir_plugin_toolchain(void)                                    \
    {                                                                                              \
        return WEIR__PLUGIN_TOOLCHAIN;                                                             \
    }                                                                                              \
    WEIR__PLUGIN_EXPORT const weir_job_entry *weir_plugin_job(void)                                \
    {                                                                                              \
        static const weir_job_entry entry = {name, version, define_fn};                            \
        return &entry;                                                                             \
    }                                                                                              \
    const weir_job_entry *weir_plugin_job(void)

/* ---- loading a job -------------------------------------------------------------------- */

typedef struct weir_plugin weir_plugin;

/*
 * Load the plugin at path (RTLD_NOW | RTLD_LOCAL) and pass it through the
 * gate. 0 with *out, else a negative error code and a message in msg (msglen
 * bytes, may be NULL/0):
 *   -ENOENT   no such file (or not a regular file: -EISDIR / -EACCES...)
 *   -ENOEXEC  refused from the file, before loading: not an ELF file, not
 *             a shared object, another ELF class, byte order or machine,
 *             damaged program headers or notes, no weir identity note (not
 *             a weir job, or one built against an older weir); or not
 *             loadable (the dynamic loader's message: an undefined
 *             symbol...), or no handshake functions
 *   WEIR_EABI refused by the gate (weir/error.h): which of ABI version,
 *             fingerprint, target, toolchain differ, the plugin's value
 *             and weir's
 * The same path may be opened any number of times (one mapping).
 */
int weir_plugin_open(const char *path, weir_plugin **out, char *msg, size_t msglen);
/* Free the handle (the module stays mapped; see above). NULL is a no-op. */
void weir_plugin_close(weir_plugin *p);

/* The registration: valid while the handle is open. */
const weir_job_entry *weir_plugin_entry(const weir_plugin *p);
/* The plugin's identity, as it reported it. */
const weir_abi_id *weir_plugin_abi(const weir_plugin *p);
/* The resolved path it was loaded from. */
const char *weir_plugin_path(const weir_plugin *p);

/*
 * Make a new job named after the registration and call the define function
 * on it with argc/argv. 0 with *out (the caller frees it with
 * weir_job_free, before or after closing the handle), else the define
 * function's error or the graph's (weir_job_error), with the text in msg.
 * Repeatable: every call defines a fresh job.
 */
int weir_plugin_define(weir_plugin *p, int argc, char **argv, weir_job **out, char *msg,
                       size_t msglen);

#ifdef __cplusplus
}
#endif
#endif /* WEIR_JOB_H */
