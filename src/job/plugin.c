/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin.c - loading job plugins (weir/job.h): the ABI gate, dlopen, the
 * handshake, and defining a job from the registration.
 *
 * Order. dlopen runs the plugin's ELF constructors, so the gate decides
 * before it, on the identity note read from the file (plugin_elf.c): a
 * refused plugin has run nothing. After dlopen the handshake functions
 * report the identity again and pass the gate a second time: the file may
 * have been replaced between the read and the load (a rebuild racing the
 * loader), and then the in-memory identity is the one that counts.
 *
 * The gate compares four things between this weir and the plugin: the ABI
 * version (bumped by hand), the fingerprint of the public headers, the
 * target and the toolchain. The version is asked first and alone decides
 * nothing more: a plugin of another ABI version may not even agree on what
 * the other getters return, but they are plain C strings in every version
 * so far, so the message still names every difference.
 *
 * A plugin that passed the gate is never dlclose'd (weir/job.h, "Lifetime");
 * dlopen of the same path again returns the same mapping, so loading a job
 * repeatedly does not grow the process.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "job/plugin_elf.h"
#include "weir/job.h"

struct weir_plugin {
    void *dl;
    char *path;
    const weir_job_entry *entry;
    weir_abi_id abi;
};

static const weir_abi_id self_id = {
    .fingerprint = WEIR_ABI_FINGERPRINT,
    .version = WEIR_ABI_VERSION,
    .target = WEIR_ABI_TARGET,
    .toolchain = WEIR_ABI_TOOLCHAIN,
};

const weir_abi_id *weir_abi_self(void)
{
    return &self_id;
}

/* Append to msg (always terminated; truncated when full). */
static void msg_add(char *msg, size_t msglen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void msg_add(char *msg, size_t msglen, const char *fmt, ...)
{
    if (!msg || !msglen)
        return;
    size_t used = strnlen(msg, msglen - 1);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + used, msglen - used, fmt, ap);
    va_end(ap);
}

static int str_differs(const char *a, const char *b)
{
    return !a || !b || strcmp(a, b) != 0;
}

static const char *or_none(const char *s)
{
    return s ? s : "(none)";
}

int weir_abi_check(const weir_abi_id *host, const weir_abi_id *plugin, char *msg, size_t msglen)
{
    if (msg && msglen)
        msg[0] = '\0';
    if (!host || !plugin)
        return -EINVAL;
    int n = 0;
    if (host->version != plugin->version)
        msg_add(msg, msglen, "%sABI version differs: plugin %d, weir %d", n++ ? "; " : "",
                plugin->version, host->version);
    if (str_differs(host->fingerprint, plugin->fingerprint))
        msg_add(msg, msglen,
                "%sABI fingerprint differs: plugin %s, weir %s (the plugin was compiled against "
                "other weir headers; rebuild it against this weir)",
                n++ ? "; " : "", or_none(plugin->fingerprint), or_none(host->fingerprint));
    if (str_differs(host->target, plugin->target))
        msg_add(msg, msglen, "%starget differs: plugin %s, weir %s", n++ ? "; " : "",
                or_none(plugin->target), or_none(host->target));
    if (str_differs(host->toolchain, plugin->toolchain))
        msg_add(msg, msglen,
                "%stoolchain differs: plugin %s, weir %s (compiler family/sanitizer must match)",
                n++ ? "; " : "", or_none(plugin->toolchain), or_none(host->toolchain));
    return n ? WEIR_EABI : 0;
}

typedef const char *(*str_getter)(void);
typedef int (*int_getter)(void);
typedef const weir_job_entry *(*entry_getter)(void);

/* dlsym into a function pointer (POSIX guarantees the conversion works;
 * memcpy keeps -Wpedantic quiet about object-to-function casts). */
static void *sym(void *dl, const char *name)
{
    dlerror();
    return dlsym(dl, name);
}

/* The gate on the file itself, before anything of it is loaded: read the
 * identity note from the file's bytes and compare it with this weir's.
 * The bytes are read into memory, not mapped: a plugin being rewritten in
 * place (a rebuild's cp) while it is checked would make a read of a
 * mapped page past the new end raise SIGBUS and kill the process. Only
 * the first GATE_READ_MAX bytes are read: the toolchain puts the notes
 * (and the headers that locate them) in the file's first page, and a
 * large plugin (debug info) need not be read whole. */
#define GATE_READ_MAX (16u << 20)
static int gate_file(const char *path, const char *real, char *msg, size_t msglen)
{
    int fd = open(real, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = -errno;
        msg_add(msg, msglen, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return e;
    }
    if (st.st_size == 0) {
        close(fd);
        msg_add(msg, msglen, "%s: refused: an empty file, not an ELF file", path);
        return -ENOEXEC;
    }
    size_t want = st.st_size > (off_t)GATE_READ_MAX ? GATE_READ_MAX : (size_t)st.st_size, got = 0;
    unsigned char *map = malloc(want);
    if (!map) {
        close(fd);
        return -ENOMEM;
    }
    while (got < want) {
        ssize_t n = pread(fd, map + got, want - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int me = errno;
            close(fd);
            free(map);
            msg_add(msg, msglen, "%s: cannot read: %s", path, strerror(me));
            return -me;
        }
        if (n == 0)
            break; /* shorter now than fstat said: parse what is there */
        got += (size_t)n;
    }
    close(fd);
    weir__plugin_note note;
    char why[768] = "";
    int e = weir__plugin_elf_identity(map, got, &note, why, sizeof(why));
    free(map);
    if (e < 0) {
        msg_add(msg, msglen, "%s: refused: %s", path, why);
        return e;
    }
    weir_abi_id id = {.fingerprint = note.fingerprint,
                      .version = note.version,
                      .target = note.target,
                      .toolchain = note.toolchain};
    if (weir_abi_check(&self_id, &id, why, sizeof(why)) != 0) {
        msg_add(msg, msglen, "%s: refused: %s", path, why);
        return WEIR_EABI;
    }
    return 0;
}

int weir_plugin_open(const char *path, weir_plugin **out, char *msg, size_t msglen)
{
    if (msg && msglen)
        msg[0] = '\0';
    if (!path || !*path || !out)
        return -EINVAL;
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = -errno;
        msg_add(msg, msglen, "%s: %s", path, strerror(errno));
        return e;
    }
    if (!S_ISREG(st.st_mode)) {
        msg_add(msg, msglen, "%s: not a regular file", path);
        return S_ISDIR(st.st_mode) ? -EISDIR : -ENOEXEC;
    }
    char real[PATH_MAX];
    if (!realpath(path, real)) {
        int e = -errno;
        msg_add(msg, msglen, "%s: %s", path, strerror(errno));
        return e;
    }
    int e = gate_file(path, real, msg, msglen);
    if (e < 0)
        return e;
    /* An absolute path: dlopen must not search the library path. */
    void *dl = dlopen(real, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *why = dlerror();
        msg_add(msg, msglen, "%s: cannot load: %s", path, why ? why : "unknown error");
        return -ENOEXEC;
    }
    static const char *const names[] = {"weir_plugin_abi_fingerprint", "weir_plugin_abi_version",
                                        "weir_plugin_target", "weir_plugin_toolchain",
                                        "weir_plugin_job"};
    void *f[5];
    for (int i = 0; i < 5; i++)
        if (!(f[i] = sym(dl, names[i]))) {
            msg_add(msg, msglen,
                    "%s: not a weir job plugin (no %s; a job registers with WEIR_REGISTER_JOB)",
                    path, names[i]);
            dlclose(dl);
            return -ENOEXEC;
        }
    str_getter fp, target, tool;
    int_getter ver;
    entry_getter job;
    memcpy(&fp, &f[0], sizeof(fp));
    memcpy(&ver, &f[1], sizeof(ver));
    memcpy(&target, &f[2], sizeof(target));
    memcpy(&tool, &f[3], sizeof(tool));
    memcpy(&job, &f[4], sizeof(job));
    weir_abi_id id = {
        .fingerprint = fp(), .version = ver(), .target = target(), .toolchain = tool()};
    char why[768] = "";
    if (weir_abi_check(&self_id, &id, why, sizeof(why)) != 0) {
        msg_add(msg, msglen, "%s: refused (changed while it was loaded?): %s", path, why);
        dlclose(dl); /* nothing of the plugin's can be referenced yet */
        return WEIR_EABI;
    }
    const weir_job_entry *entry = job();
    if (!entry || !entry->name || !*entry->name || !entry->define) {
        msg_add(msg, msglen,
                "%s: bad registration (WEIR_REGISTER_JOB needs a name and a define "
                "function)",
                path);
        dlclose(dl);
        return -ENOEXEC;
    }
    weir_plugin *p = calloc(1, sizeof(*p));
    if (!p || !(p->path = strdup(real))) {
        free(p);
        msg_add(msg, msglen, "%s: out of memory", path);
        return -ENOMEM; /* the mapping stays: the gate passed, keep the rule simple */
    }
    p->dl = dl;
    p->entry = entry;
    p->abi = id;
    *out = p;
    return 0;
}

void weir_plugin_close(weir_plugin *p)
{
    if (!p)
        return;
    /* No dlclose: a passed plugin stays mapped (weir/job.h, "Lifetime"). */
    free(p->path);
    free(p);
}

const weir_job_entry *weir_plugin_entry(const weir_plugin *p)
{
    return p ? p->entry : NULL;
}

const weir_abi_id *weir_plugin_abi(const weir_plugin *p)
{
    return p ? &p->abi : NULL;
}

const char *weir_plugin_path(const weir_plugin *p)
{
    return p ? p->path : NULL;
}

int weir_plugin_define(weir_plugin *p, int argc, char **argv, weir_job **out, char *msg,
                       size_t msglen)
{
    if (msg && msglen)
        msg[0] = '\0';
    if (!p || !out || argc < 0 || (argc > 0 && !argv))
        return -EINVAL;
    *out = NULL;
    weir_job *j = weir_job_new(p->entry->name);
    if (!j) {
        int e = -errno;
        msg_add(msg, msglen, "job %s: %s", p->entry->name, strerror(errno));
        return e ? e : -ENOMEM;
    }
    int e = p->entry->define(j, argc, argv);
    const char *gerr = weir_job_error(j); /* "" when the graph is fine */
    if (gerr && !*gerr)
        gerr = NULL;
    if (e < 0 || gerr) {
        if (gerr)
            msg_add(msg, msglen, "job %s: %s", p->entry->name, gerr);
        else
            msg_add(msg, msglen, "job %s: the define function failed: %s", p->entry->name,
                    weir_strerror(e));
        weir_job_free(j);
        return e < 0 ? e : -EINVAL;
    }
    *out = j;
    return 0;
}
