/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_plugin_elf.c - libFuzzer target for the job plugin identity reader
 * (src/job/plugin_elf.c): the input is the whole file, as untrusted as a
 * plugin path handed to `weir run`. Beyond memory safety (ASan, UBSan) the
 * target aborts when an invariant breaks: a success hands out three
 * non-empty, NUL-terminated, printable strings; a refusal says why (a
 * non-empty message) and is -ENOEXEC.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/plugin_elf.h"

static void check_str(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    if (n == 0 || n == cap)
        abort();
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly size bytes, so ASan sees any read past the file. */
    unsigned char *file = malloc(size ? size : 1);
    if (!file)
        return 0;
    if (size)
        memcpy(file, data, size);
    weir__plugin_note note;
    char msg[512];
    int e = weir__plugin_elf_identity(file, size, &note, msg, sizeof(msg));
    if (e == 0) {
        check_str(note.fingerprint, sizeof(note.fingerprint));
        check_str(note.target, sizeof(note.target));
        check_str(note.toolchain, sizeof(note.toolchain));
    } else if (e != -ENOEXEC || strnlen(msg, sizeof(msg)) == 0) {
        abort();
    }
    free(file);
    return 0;
}
