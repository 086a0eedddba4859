/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin_elf.h - reading a job plugin's identity from its ELF file, without
 * loading it (src/job/plugin_elf.c; docs/jobs.md, "The ABI gate").
 */
#ifndef WEIR_JOB_PLUGIN_ELF_H
#define WEIR_JOB_PLUGIN_ELF_H

#include <stddef.h>

/* The identity a plugin's weir note carries (WEIR_REGISTER_JOB), copied
 * out of the file: printable ASCII, NUL-terminated. */
typedef struct weir__plugin_note {
    int version;
    char fingerprint[129];
    char target[65];
    char toolchain[65];
} weir__plugin_note;

/*
 * Find and decode the weir note in the bytes of an ELF file (size bytes,
 * untrusted: every offset and size is checked against the file). 0 with
 * *out, else -ENOEXEC and msg (msglen bytes, may be NULL/0) says what is
 * wrong: not ELF, another ELF class or byte order, not a shared object,
 * another machine, damaged program headers or notes, no weir note.
 */
int weir__plugin_elf_identity(const unsigned char *file, size_t size, weir__plugin_note *out,
                              char *msg, size_t msglen);

#endif
