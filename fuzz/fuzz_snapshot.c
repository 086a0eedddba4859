/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_snapshot.c - libFuzzer target for the snapshot image decoder
 * (weir/state.h: weir_state_restore_image), the bytes a restore reads back
 * from a store and must treat as untrusted.
 *
 * Input: byte 0 picks the restoring backend's key groups (bit 0 set: a
 * part of the 16, from bits 1-4 and 5-6; a rescale restores part of an
 * image) and, with bit 7, has the target append a valid checksum to the
 * rest (else the rest is the whole image): a fuzzer cannot forge XXH64, and
 * without this every mutation past the header would stop at the checksum
 * before the structural checks. Beyond memory safety (ASan, UBSan) the target aborts when an
 * invariant breaks:
 *
 *   - a refused image (-EBADMSG, -EINVAL) changes nothing: the entry the
 *     backend held before is still there, alone, and the refusal says why
 *     in the caller's buffer;
 *   - an accepted image leaves the backend whole: captured and encoded
 *     again, it restores into a fresh backend with the same entries per
 *     group.
 *
 * Build and run: `make test-fuzz` (see fuzz/run.sh).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "weir/state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define GROUPS 16

#define ENSURE(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_snapshot: invariant broken: %s (line %d)\n", #cond, __LINE__);   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static size_t total(weir_state_backend *b)
{
    size_t n = 0;
    for (int kg = b->first_kg; kg < b->end_kg; kg++)
        n += weir_state_entries(b, kg);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int first = data[0] & 1 ? (data[0] >> 1) % GROUPS : 0;
    int end = data[0] & 1 ? first + 1 + (data[0] >> 5) % (GROUPS - first) : GROUPS;
    weir_state_backend *b = weir_state_memory_new(GROUPS, first, end);
    ENSURE(b != NULL);
    ENSURE(weir_state_put(b, first, "keep", 4, "me", 2) == 0);
    const uint8_t *img = data + 1;
    size_t ilen = size - 1;
    uint8_t *sealed = NULL;
    if (data[0] & 0x80) {
        sealed = malloc(ilen + 8);
        ENSURE(sealed != NULL);
        if (ilen)
            memcpy(sealed, img, ilen);
        uint64_t sum = XXH64(img, ilen, 0);
        for (int i = 0; i < 8; i++)
            sealed[ilen + (size_t)i] = (uint8_t)(sum >> (56 - 8 * i));
        img = sealed;
        ilen += 8;
    }
    char why[256];
    int e = weir_state_restore_image(b, img, ilen, why, sizeof(why));
    if (e == -EBADMSG || e == -EINVAL) {
        const void *v;
        size_t vl;
        ENSURE(why[0] != '\0');
        ENSURE(total(b) == 1);
        ENSURE(weir_state_get(b, first, "keep", 4, &v, &vl) == 0 && vl == 2);
    } else if (e == 0) {
        ENSURE(why[0] == '\0');
        weir_state_snapshot *s;
        const void *again;
        size_t len;
        ENSURE(weir_state_capture(b, 1, &s) == 0);
        ENSURE(weir_state_snapshot_encode(s, &again, &len) == 0);
        weir_state_backend *c = weir_state_memory_new(GROUPS, first, end);
        ENSURE(c != NULL);
        ENSURE(weir_state_restore_image(c, again, len, why, sizeof(why)) == 0);
        for (int kg = first; kg < end; kg++)
            ENSURE(weir_state_entries(c, kg) == weir_state_entries(b, kg));
        weir_state_backend_free(c);
        weir_state_snapshot_free(s);
    } else {
        ENSURE(e == -ENOMEM || e == -E2BIG);
    }
    free(sealed);
    weir_state_backend_free(b);
    return 0;
}
