/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_run.c - libFuzzer target for the sorted-run readers (state/run.h:
 * weir__run_meta_parse, weir__run_block_open), the sections a cold read
 * fetches from a pool and must treat as untrusted, and for the writer fed
 * with the fuzzer's entries.
 *
 * Input: byte 0 is a set of flags, the rest the bytes:
 *
 *   - bits 0-1: the key group the meta section is parsed as;
 *   - bit 7: the rest is a payload, which the target frames (length field
 *     and XXH64) into a section: a fuzzer cannot forge the checksum, and
 *     without this every mutation would stop there before the structural
 *     checks; else the rest is the whole section as fetched;
 *   - bit 6: the rest is also a list of entries ([u8 klen][key][u8 vlen]
 *     [value], vlen 255 a tombstone) written into a run (groups from bits
 *     0-1 and 2-3 of each key's first byte), which must read back whole
 *     when the writer accepts them.
 *
 * The rest is parsed both as a meta section and as a block. Beyond memory
 * safety (ASan, UBSan) the target aborts when an invariant breaks: a
 * refusal says why; an accepted meta's blocks are ascending and its
 * lookups agree with its range queries; an accepted block's entries are
 * ascending and each is found, as what it is, by weir__run_block_find.
 *
 * Build and run: `make test-fuzz` (see fuzz/run.sh).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "base/alloc.h"
#include "state/run.h"
#include "state/state_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ENSURE(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_run: invariant broken: %s (line %d)\n", #cond, __LINE__);        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Probe keys: the empty key and a few slices of the input. */
#define NPROBE 6
static void probes(const uint8_t *p, size_t n, const uint8_t **k, size_t *kl)
{
    k[0] = p, kl[0] = 0;
    for (int i = 1; i < NPROBE; i++) {
        size_t at = n ? (size_t)i * 37 % n : 0, len = n ? (size_t)i * 5 % 17 : 0;
        if (len > n - at)
            len = n - at;
        k[i] = p + at, kl[i] = len;
    }
}

static void check_meta(weir__run_meta *m, const uint8_t *p, size_t n)
{
    uint32_t nb = weir__run_meta_nblocks(m);
    ENSURE(nb >= 1);
    ENSURE(weir__run_meta_entries(m) >= nb);
    ENSURE(weir__run_meta_size(m) > 0);
    uint64_t prev_end = 0;
    for (uint32_t i = 0; i < nb; i++) {
        uint64_t off;
        uint32_t len;
        weir__run_meta_nth(m, i, &off, &len);
        ENSURE(len >= WEIR__RUN_SECTION);
        ENSURE(off >= prev_end);
        prev_end = off + len;
    }
    const uint8_t *k[NPROBE];
    size_t kl[NPROBE];
    probes(p, n, k, kl);
    for (int i = 0; i < NPROBE; i++) {
        int maybe = weir__run_meta_maybe(m, k[i], kl[i]);
        ENSURE(maybe == 0 || maybe == 1);
        uint64_t off;
        uint32_t len, first, end;
        int e = weir__run_meta_block(m, k[i], kl[i], &off, &len);
        weir__run_meta_range(m, k[i], kl[i], NULL, 0, &first, &end);
        ENSURE(first <= end && end <= nb);
        if (e == 0) {
            /* The block that would hold the key starts the range from it. */
            uint64_t o2;
            uint32_t l2;
            ENSURE(first < end && end == nb);
            weir__run_meta_nth(m, first, &o2, &l2);
            ENSURE(o2 == off && l2 == len);
        } else {
            ENSURE(e == -ENOENT);
        }
        for (int j = 0; j < NPROBE; j++) {
            weir__run_meta_range(m, k[i], kl[i], k[j], kl[j], &first, &end);
            ENSURE(first <= end && end <= nb);
            if (weir__key_cmp(k[i], kl[i], k[j], kl[j]) >= 0)
                ENSURE(first == end || (first == 0 && end == 0));
        }
    }
}

static void check_block(weir__run_block *b, const uint8_t *p, size_t n)
{
    const uint8_t *key, *val, *pk = NULL;
    size_t klen, vlen, pkl = 0, count = 0;
    int tomb;
    while (weir__run_block_next(b, &key, &klen, &val, &vlen, &tomb)) {
        ENSURE(key >= b->p && key + klen <= b->p + b->len);
        ENSURE(val >= b->p && val + vlen <= b->p + b->len);
        ENSURE(!tomb || vlen == 0);
        if (count++)
            ENSURE(weir__key_cmp(pk, pkl, key, klen) < 0);
        pk = key, pkl = klen;
        const uint8_t *v;
        size_t vl;
        int f = weir__run_block_find(b, key, klen, &v, &vl);
        ENSURE(f == (tomb ? 1 : 0));
        if (!tomb)
            ENSURE(v == val && vl == vlen);
    }
    ENSURE(count >= 1);
    const uint8_t *k[NPROBE];
    size_t kl[NPROBE];
    probes(p, n, k, kl);
    for (int i = 0; i < NPROBE; i++) {
        const uint8_t *v;
        size_t vl;
        int f = weir__run_block_find(b, k[i], kl[i], &v, &vl);
        ENSURE(f == 0 || f == 1 || f == -ENOENT);
    }
}

/* The entries of the input, written into a run and read back. */
static void write_and_read(const uint8_t *p, size_t n)
{
    weir__run_writer *w = weir__run_writer_new();
    ENSURE(w != NULL);
    size_t pos = 0, added = 0;
    int e = 0;
    while (!e && pos < n) {
        size_t kl = p[pos++];
        if (kl > n - pos)
            break;
        const uint8_t *key = p + pos;
        pos += kl;
        if (pos >= n)
            break;
        size_t vl = p[pos++];
        int tomb = vl == 255;
        if (tomb)
            vl = 0;
        if (vl > n - pos)
            break;
        int kg = kl ? key[0] & 15 : 0;
        e = weir__run_add(w, kg, key, kl, p + pos, vl, tomb);
        ENSURE(e == 0 || e == -EINVAL);
        pos += vl;
        added += !e;
    }
    uint8_t *buf;
    size_t len, ng;
    weir__run_group *g;
    int f = weir__run_finish(w, &buf, &len, &g, &ng);
    ENSURE(f == e);
    if (!f) {
        uint64_t total = 0;
        for (size_t i = 0; i < ng; i++) {
            weir__run_meta *m;
            char why[200];
            ENSURE(g[i].meta_off + g[i].meta_len <= len);
            ENSURE(weir__run_meta_parse(buf + g[i].meta_off, g[i].meta_len, g[i].kg, &m, why,
                                        sizeof(why)) == 0);
            total += weir__run_meta_entries(m);
            ENSURE(weir__run_meta_maybe(m, g[i].first, g[i].first_len));
            ENSURE(weir__run_meta_maybe(m, g[i].last, g[i].last_len));
            for (uint32_t j = 0; j < weir__run_meta_nblocks(m); j++) {
                uint64_t off;
                uint32_t bl;
                weir__run_block b;
                weir__run_meta_nth(m, j, &off, &bl);
                ENSURE(off + bl <= len);
                ENSURE(weir__run_block_open(&b, buf + off, bl, why, sizeof(why)) == 0);
                const uint8_t *k, *v;
                size_t kl, vl;
                int tomb;
                while (weir__run_block_next(&b, &k, &kl, &v, &vl, &tomb)) {
                    uint64_t o2;
                    uint32_t l2;
                    ENSURE(weir__run_meta_maybe(m, k, kl));
                    ENSURE(weir__run_meta_block(m, k, kl, &o2, &l2) == 0 && o2 == off);
                }
            }
            weir__run_meta_free(m);
        }
        ENSURE(total == added);
        weir__run_groups_free(g, ng);
        weir__free(buf);
    }
    weir__run_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int kg = data[0] & 3;
    const uint8_t *sec = data + 1;
    size_t slen = size - 1;
    uint8_t *framed = NULL;
    if (data[0] & 0x80) {
        if (slen > UINT32_MAX)
            return 0;
        framed = malloc(slen + WEIR__RUN_SECTION);
        ENSURE(framed != NULL);
        framed[0] = (uint8_t)(slen >> 24), framed[1] = (uint8_t)(slen >> 16);
        framed[2] = (uint8_t)(slen >> 8), framed[3] = (uint8_t)slen;
        if (slen)
            memcpy(framed + 4, sec, slen);
        uint64_t sum = XXH64(sec, slen, 0);
        for (int i = 0; i < 8; i++)
            framed[4 + slen + (size_t)i] = (uint8_t)(sum >> (56 - 8 * i));
        sec = framed;
        slen += WEIR__RUN_SECTION;
    }
    char why[256];
    weir__run_meta *m = NULL;
    why[0] = 'x';
    int e = weir__run_meta_parse(sec, slen, kg, &m, why, sizeof(why));
    if (e == 0) {
        ENSURE(why[0] == '\0' && m != NULL);
        check_meta(m, data + 1, size - 1);
        weir__run_meta_free(m);
    } else {
        ENSURE(e == -EBADMSG || e == -ENOMEM);
        ENSURE(m == NULL);
        if (e == -EBADMSG)
            ENSURE(why[0] != '\0' && why[0] != 'x');
    }
    weir__run_block b;
    why[0] = 'x';
    e = weir__run_block_open(&b, sec, slen, why, sizeof(why));
    if (e == 0) {
        ENSURE(why[0] == '\0');
        check_block(&b, data + 1, size - 1);
    } else {
        ENSURE(e == -EBADMSG && why[0] != '\0' && why[0] != 'x');
    }
    if (data[0] & 0x40)
        write_and_read(data + 1, size - 1);
    free(framed);
    return 0;
}
