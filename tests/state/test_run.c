/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_run.c - the sorted-run format (state/run.h): random runs of several
 * groups written and read back (every put found with its value, every
 * tombstone as one, the blocks walked end to end in order, the sections
 * tiling the blob), the bloom filter's false positives on absent keys,
 * range queries against a brute-force answer, the writer refusing keys out
 * of order and staying refused, every single-byte corruption and every
 * truncation of a meta section and of a block refused, damage behind a
 * valid checksum refused by the structural checks, and every allocation
 * failure of the writer and the meta parser answered with -ENOMEM.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/be.h"
#include "state/run.h"
#include "state/state_int.h"
#include "test.h"
#include "weir/state.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

typedef struct ent {
    int kg;
    uint8_t key[24];
    size_t klen;
    uint8_t *val;
    size_t vlen;
    int tomb;
} ent;

static int ent_cmp(const void *a, const void *b)
{
    const ent *x = a, *y = b;
    if (x->kg != y->kg)
        return x->kg < y->kg ? -1 : 1;
    return weir__key_cmp(x->key, x->klen, y->key, y->klen);
}

static void rand_key(uint8_t *k, size_t *klen, size_t max)
{
    *klen = rnd() % (max + 1);
    for (size_t i = 0; i < *klen; i++)
        k[i] = (uint8_t)("abcdefgh\x00\xff"[rnd() % 10]);
}

/* Random entries over groups 0 (many, with the empty key), 2 (one entry),
 * 3 and 9, sorted, duplicates dropped. One value bigger than a block. */
static ent *make_entries(size_t *n)
{
    static const int kgs[] = {0, 2, 3, 9};
    static const size_t counts[] = {3000, 1, 400, 1500};
    size_t total = 0;
    for (int g = 0; g < 4; g++)
        total += counts[g] + 1;
    ent *e = calloc(total, sizeof(*e));
    CHECK(e != NULL);
    size_t k = 0;
    for (int g = 0; g < 4; g++)
        for (size_t i = 0; i < counts[g]; i++) {
            ent *x = &e[k++];
            x->kg = kgs[g];
            rand_key(x->key, &x->klen, sizeof(x->key));
            x->tomb = rnd() % 10 == 0;
            if (!x->tomb) {
                x->vlen = rnd() % 4 == 0 ? 0 : rnd() % 100;
                x->val = malloc(x->vlen + 1);
                for (size_t j = 0; j < x->vlen; j++)
                    x->val[j] = (uint8_t)rnd();
            }
        }
    ent *big = &e[k++];
    big->kg = 3;
    memcpy(big->key, "big", 3);
    big->klen = 3;
    big->vlen = 3 * WEIR__RUN_BLOCK + 17;
    big->val = malloc(big->vlen);
    for (size_t j = 0; j < big->vlen; j++)
        big->val[j] = (uint8_t)(j * 7);
    e[k].kg = 0; /* the empty key */
    e[k].val = malloc(1);
    e[k].vlen = 1;
    e[k++].val[0] = 'E';
    qsort(e, k, sizeof(*e), ent_cmp);
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        if (m && ent_cmp(&e[m - 1], &e[i]) == 0) {
            free(e[i].val);
            continue;
        }
        e[m++] = e[i];
    }
    *n = m;
    return e;
}

static void free_entries(ent *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(e[i].val);
    free(e);
}

static void write_run(const ent *e, size_t n, uint8_t **buf, size_t *len, weir__run_group **g,
                      size_t *ng)
{
    weir__run_writer *w = weir__run_writer_new();
    CHECK(w != NULL);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(weir__run_add(w, e[i].kg, e[i].key, e[i].klen, e[i].val, e[i].vlen, e[i].tomb), 0);
    CHECK_EQ(weir__run_finish(w, buf, len, g, ng), 0);
    weir__run_writer_free(w);
}

static int key_eq(const void *a, size_t an, const void *b, size_t bn)
{
    return weir__key_cmp(a, an, b, bn) == 0;
}

/* Is (kg, key) among e[0..n)? */
static int present(const ent *e, size_t n, int kg, const uint8_t *key, size_t klen)
{
    ent probe = {.kg = kg, .klen = klen};
    memcpy(probe.key, key, klen);
    return bsearch(&probe, e, n, sizeof(*e), ent_cmp) != NULL;
}

/* The bytes themselves, built here from run.h's text: a reader elsewhere
 * (another version, another language) must get the same answers. */
static uint8_t *put(uint8_t *p, const void *b, size_t n)
{
    memcpy(p, b, n);
    return p + n;
}

TEST(format_is_what_run_h_says)
{
    weir__run_writer *w = weir__run_writer_new();
    CHECK_EQ(weir__run_add(w, 3, "a", 1, "xy", 2, 0), 0);
    CHECK_EQ(weir__run_add(w, 3, "b", 1, "ignored", 7, 1), 0);
    CHECK_EQ(weir__run_add(w, 3, "cc", 2, "", 0, 0), 0);
    uint8_t *buf;
    size_t len, ng;
    weir__run_group *g;
    CHECK_EQ(weir__run_finish(w, &buf, &len, &g, &ng), 0);
    weir__run_writer_free(w);

    uint8_t want[256], *q = want;
    /* The block: three entries, 33 payload bytes. */
    q += 4;
    q = put(q, "\0\0\0\0\1\0\0\0\2axy", 12);
    q = put(q, "\1\0\0\0\1\0\0\0\0b", 10);
    q = put(q, "\0\0\0\0\2\0\0\0\0cc", 11);
    weir__put_be32(want, 33);
    weir__put_be64(q, XXH64(want + 4, 33, 0));
    q += 8;
    size_t meta_off = (size_t)(q - want);
    CHECK_EQ(meta_off, 45);
    uint8_t *m = q;
    q += 4;
    weir__put_be32(q, 3), q += 4; /* kg */
    weir__put_be64(q, 3), q += 8; /* entries */
    weir__put_be32(q, 8), q += 4; /* bloom bytes: 30 bits, at least 64 */
    *q++ = 7;                     /* hashes */
    uint8_t *bloom = q;
    memset(bloom, 0, 8), q += 8;
    static const char *keys[] = {"a", "b", "cc"};
    for (int i = 0; i < 3; i++) {
        uint64_t h = XXH3_64bits(keys[i], strlen(keys[i]));
        uint64_t h1 = h & 0xffffffffu, h2 = (h >> 32) | 1;
        for (uint64_t j = 0; j < 7; j++) {
            uint64_t bit = (h1 + j * h2) % 64;
            bloom[bit / 8] |= (uint8_t)(1u << (bit % 8));
        }
    }
    weir__put_be32(q, 1), q += 4; /* nblocks */
    weir__put_be64(q, 0), q += 8; /* block 0: offset, length, first key */
    weir__put_be32(q, 45), q += 4;
    weir__put_be32(q, 1), q += 4;
    *q++ = 'a';
    weir__put_be32(q, 2), q += 4; /* last key */
    q = put(q, "cc", 2);
    size_t mp = (size_t)(q - m - 4);
    weir__put_be32(m, (uint32_t)mp);
    weir__put_be64(q, XXH64(m + 4, mp, 0));
    q += 8;
    size_t want_len = (size_t)(q - want);

    CHECK_EQ(len, want_len);
    CHECK(memcmp(buf, want, len) == 0);
    CHECK_EQ(ng, 1);
    CHECK_EQ(g[0].kg, 3);
    CHECK_EQ(g[0].meta_off, meta_off);
    CHECK_EQ(g[0].meta_len, want_len - meta_off);
    CHECK_EQ(g[0].entries, 3);
    CHECK(key_eq(g[0].first, g[0].first_len, "a", 1));
    CHECK(key_eq(g[0].last, g[0].last_len, "cc", 2));
    weir__run_groups_free(g, ng);
    weir__free(buf);
}

TEST(round_trip_several_groups)
{
    size_t n, len, ng;
    ent *e = make_entries(&n);
    uint8_t *buf;
    weir__run_group *g;
    write_run(e, n, &buf, &len, &g, &ng);
    CHECK_EQ(ng, 4);
    size_t at = 0, gi = 0, bigs = 0;
    uint64_t pos = 0; /* the sections tile the blob */
    char why[200];
    for (size_t s = 0; s < n; gi++) {
        size_t t = s;
        while (t < n && e[t].kg == e[s].kg)
            t++;
        CHECK(gi < ng);
        CHECK_EQ(g[gi].kg, e[s].kg);
        CHECK_EQ(g[gi].entries, t - s);
        CHECK(key_eq(g[gi].first, g[gi].first_len, e[s].key, e[s].klen));
        CHECK(key_eq(g[gi].last, g[gi].last_len, e[t - 1].key, e[t - 1].klen));
        CHECK(g[gi].meta_off + g[gi].meta_len <= len);
        weir__run_meta *m;
        CHECK_EQ(weir__run_meta_parse(buf + g[gi].meta_off, g[gi].meta_len, e[s].kg + 1, &m, why,
                                      sizeof(why)),
                 -EBADMSG);
        CHECK_HAS(why, "key group");
        CHECK_EQ(weir__run_meta_parse(buf + g[gi].meta_off, g[gi].meta_len, e[s].kg, &m, why,
                                      sizeof(why)),
                 0);
        CHECK_EQ(why[0], '\0');
        CHECK_EQ(weir__run_meta_entries(m), t - s);
        CHECK_GT(weir__run_meta_size(m), 0);
        /* Walk every block in order: exactly the group's entries. */
        uint32_t nb = weir__run_meta_nblocks(m);
        CHECK_GE(nb, 1);
        at = s;
        for (uint32_t i = 0; i < nb; i++) {
            uint64_t off;
            uint32_t bl;
            weir__run_meta_nth(m, i, &off, &bl);
            CHECK_EQ(off, pos);
            CHECK(off + bl <= len);
            pos += bl;
            weir__run_block b;
            CHECK_EQ(weir__run_block_open(&b, buf + off, bl, why, sizeof(why)), 0);
            const uint8_t *k, *v;
            size_t kl, vl, cnt = 0;
            int tomb;
            while (weir__run_block_next(&b, &k, &kl, &v, &vl, &tomb)) {
                CHECK(at < t);
                CHECK(key_eq(k, kl, e[at].key, e[at].klen));
                CHECK_EQ(tomb, e[at].tomb);
                CHECK_EQ(vl, e[at].vlen);
                CHECK(vl == 0 || memcmp(v, e[at].val, vl) == 0);
                at++, cnt++;
            }
            CHECK_GE(cnt, 1);
            if (bl - WEIR__RUN_SECTION > WEIR__RUN_BLOCK) {
                CHECK_EQ(cnt, 1); /* only a lone large entry makes a large block */
                bigs++;
            }
        }
        CHECK_EQ(at, t);
        CHECK_EQ(pos, g[gi].meta_off);
        pos += g[gi].meta_len;
        /* Every key found through the index. */
        for (size_t i = s; i < t; i++) {
            uint64_t off;
            uint32_t bl;
            CHECK_EQ(weir__run_meta_maybe(m, e[i].key, e[i].klen), 1);
            CHECK_EQ(weir__run_meta_block(m, e[i].key, e[i].klen, &off, &bl), 0);
            weir__run_block b;
            CHECK_EQ(weir__run_block_open(&b, buf + off, bl, why, sizeof(why)), 0);
            const uint8_t *v;
            size_t vl;
            int r = weir__run_block_find(&b, e[i].key, e[i].klen, &v, &vl);
            CHECK_EQ(r, e[i].tomb ? 1 : 0);
            if (!e[i].tomb) {
                CHECK_EQ(vl, e[i].vlen);
                CHECK(vl == 0 || memcmp(v, e[i].val, vl) == 0);
            }
        }
        /* Absent keys: never found; few bloom false positives. */
        size_t absent = 0, fp = 0;
        while (absent < 10000) {
            uint8_t k[24];
            size_t kl;
            rand_key(k, &kl, sizeof(k));
            if (present(e, n, e[s].kg, k, kl))
                continue;
            absent++;
            fp += (size_t)weir__run_meta_maybe(m, k, kl);
            uint64_t off;
            uint32_t bl;
            if (weir__run_meta_block(m, k, kl, &off, &bl) == 0) {
                weir__run_block b;
                const uint8_t *v;
                size_t vl;
                CHECK_EQ(weir__run_block_open(&b, buf + off, bl, why, sizeof(why)), 0);
                CHECK_EQ(weir__run_block_find(&b, k, kl, &v, &vl), -ENOENT);
            }
        }
        if (t - s >= 100) { /* the rate over a filter of a handful of entries means little */
            printf("  group %d: %zu entries, %u blocks, %zu/10000 bloom false positives\n", e[s].kg,
                   t - s, nb, fp);
            CHECK_LT(fp, 300);
        }
        /* Past the last key and (but for the group with the empty key)
         * before the first: no block. */
        uint64_t off;
        uint32_t bl;
        uint8_t past[32];
        memcpy(past, e[t - 1].key, e[t - 1].klen);
        past[e[t - 1].klen] = 0;
        CHECK_EQ(weir__run_meta_block(m, past, e[t - 1].klen + 1, &off, &bl), -ENOENT);
        if (e[s].klen) {
            CHECK_EQ(weir__run_meta_block(m, e[s].key, e[s].klen - 1, &off, &bl), -ENOENT);
            CHECK_EQ(weir__run_meta_block(m, "", 0, &off, &bl), -ENOENT);
        }
        weir__run_meta_free(m);
        s = t;
    }
    CHECK_EQ(gi, ng);
    CHECK_EQ(pos, len);
    CHECK_GE(bigs, 1);
    weir__run_groups_free(g, ng);
    weir__free(buf);
    free_entries(e, n);
}

/* Brute force: block i spans [fk_i, fk_{i+1}) (the last [fk_i, last]); it
 * may hold a key of [lo, hi) when the smallest key of both, max(fk_i, lo),
 * is inside both. */
static int block_may(uint8_t **fk, size_t *fkl, uint32_t i, uint32_t nb, const uint8_t *last,
                     size_t lastl, const uint8_t *lo, size_t lol, const uint8_t *hi, size_t hil)
{
    const uint8_t *m = fk[i];
    size_t ml = fkl[i];
    if (weir__key_cmp(lo, lol, m, ml) > 0)
        m = lo, ml = lol;
    if (hi && weir__key_cmp(m, ml, hi, hil) >= 0)
        return 0;
    if (i + 1 < nb)
        return weir__key_cmp(m, ml, fk[i + 1], fkl[i + 1]) < 0;
    return weir__key_cmp(m, ml, last, lastl) <= 0;
}

TEST(range_against_brute_force)
{
    size_t n, len, ng;
    ent *e = make_entries(&n);
    uint8_t *buf;
    weir__run_group *g;
    write_run(e, n, &buf, &len, &g, &ng);
    size_t s = 0;
    for (size_t gi = 0; gi < ng; gi++) {
        size_t t = s;
        while (t < n && e[t].kg == g[gi].kg)
            t++;
        weir__run_meta *m;
        CHECK_EQ(weir__run_meta_parse(buf + g[gi].meta_off, g[gi].meta_len, g[gi].kg, &m, NULL, 0),
                 0);
        uint32_t nb = weir__run_meta_nblocks(m);
        uint8_t **fk = calloc(nb, sizeof(*fk));
        size_t *fkl = calloc(nb, sizeof(*fkl));
        size_t *bstart = calloc(nb + 1, sizeof(*bstart)); /* entry index of each block */
        size_t at = s;
        for (uint32_t i = 0; i < nb; i++) {
            uint64_t off;
            uint32_t bl;
            weir__run_meta_nth(m, i, &off, &bl);
            weir__run_block b;
            CHECK_EQ(weir__run_block_open(&b, buf + off, bl, NULL, 0), 0);
            const uint8_t *k, *v;
            size_t kl, vl;
            int tomb;
            bstart[i] = at;
            CHECK(weir__run_block_next(&b, &k, &kl, &v, &vl, &tomb));
            fk[i] = (uint8_t *)k, fkl[i] = kl;
            at++;
            while (weir__run_block_next(&b, &k, &kl, &v, &vl, &tomb))
                at++;
        }
        bstart[nb] = at;
        CHECK_EQ(at, t);
        for (int q = 0; q < 3000; q++) {
            uint8_t lo[32], hi[32];
            size_t lol, hil;
            /* From the group's keys (exact, or just past), or random. */
            if (rnd() % 2) {
                const ent *x = &e[s + rnd() % (t - s)];
                memcpy(lo, x->key, x->klen), lol = x->klen;
                if (rnd() % 2)
                    lo[lol++] = 0;
            } else {
                rand_key(lo, &lol, 24);
            }
            if (rnd() % 2) {
                const ent *x = &e[s + rnd() % (t - s)];
                memcpy(hi, x->key, x->klen), hil = x->klen;
            } else {
                rand_key(hi, &hil, 24);
            }
            int unbounded = rnd() % 8 == 0;
            const uint8_t *hp = unbounded ? NULL : hi;
            uint32_t first, end;
            weir__run_meta_range(m, lo, lol, hp, hil, &first, &end);
            CHECK_LE(first, end);
            CHECK_LE(end, nb);
            uint32_t want_first = 0, want_end = 0;
            int seen = 0;
            for (uint32_t i = 0; i < nb; i++)
                if (block_may(fk, fkl, i, nb, g[gi].last, g[gi].last_len, lo, lol, hp, hil)) {
                    if (!seen)
                        want_first = i, seen = 1;
                    CHECK(!seen || want_end == 0 || want_end == i); /* contiguous */
                    want_end = i + 1;
                }
            if (!seen)
                CHECK_EQ(end - first, 0);
            else {
                CHECK_EQ(first, want_first);
                CHECK_EQ(end, want_end);
            }
            /* And the point of it: every key in [lo, hi) lies in those blocks. */
            for (uint32_t i = 0; i < nb; i++)
                for (size_t j = bstart[i]; j < bstart[i + 1]; j++) {
                    int in = weir__key_cmp(e[j].key, e[j].klen, lo, lol) >= 0 &&
                             (!hp || weir__key_cmp(e[j].key, e[j].klen, hi, hil) < 0);
                    if (in)
                        CHECK(i >= first && i < end);
                }
        }
        /* The edges. */
        uint32_t first, end;
        weir__run_meta_range(m, NULL, 0, NULL, 0, &first, &end);
        CHECK_EQ(first, 0);
        CHECK_EQ(end, nb);
        weir__run_meta_range(m, g[gi].last, g[gi].last_len, NULL, 0, &first, &end);
        CHECK_EQ(first, nb - 1);
        CHECK_EQ(end, nb);
        weir__run_meta_range(m, NULL, 0, g[gi].first, g[gi].first_len, &first, &end);
        CHECK_EQ(end - first, 0);
        free(fk);
        free(fkl);
        free(bstart);
        weir__run_meta_free(m);
        s = t;
    }
    weir__run_groups_free(g, ng);
    weir__free(buf);
    free_entries(e, n);
}

TEST(writer_refuses_disorder_and_stays_refused)
{
    uint8_t *buf;
    size_t len, ng;
    weir__run_group *g;
    weir__run_writer *w = weir__run_writer_new();
    CHECK_EQ(weir__run_finish(w, &buf, &len, &g, &ng), 0); /* empty run */
    CHECK_EQ(len, 0);
    CHECK_EQ(ng, 0);
    CHECK_EQ(weir__run_add(w, 0, "a", 1, "1", 1, 0), -EINVAL); /* spent */
    weir__free(buf);
    weir__run_groups_free(g, ng);
    weir__run_writer_free(w);

    struct {
        int kg1;
        const char *k1;
        int kg2;
        const char *k2;
        int err;
    } cases[] = {
        {1, "b", 1, "a", -EINVAL}, {1, "b", 1, "b", -EINVAL},  {1, "abc", 1, "ab", -EINVAL},
        {2, "a", 1, "z", -EINVAL}, {1, "a", -1, "b", -EINVAL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        w = weir__run_writer_new();
        CHECK_EQ(weir__run_add(w, cases[i].kg1, cases[i].k1, strlen(cases[i].k1), "v", 1, 0), 0);
        CHECK_EQ(weir__run_add(w, cases[i].kg2, cases[i].k2, strlen(cases[i].k2), "v", 1, 0),
                 cases[i].err);
        /* Sticky: even an entry in order is refused, and so is finishing. */
        CHECK_EQ(weir__run_add(w, 50, "zzz", 3, "v", 1, 0), cases[i].err);
        CHECK_EQ(weir__run_finish(w, &buf, &len, &g, &ng), cases[i].err);
        CHECK(buf == NULL && g == NULL);
        weir__run_writer_free(w);
    }
    /* In order, a longer key after its prefix and a larger group: fine. */
    w = weir__run_writer_new();
    CHECK_EQ(weir__run_add(w, 1, "ab", 2, "v", 1, 0), 0);
    CHECK_EQ(weir__run_add(w, 1, "abc", 3, NULL, 0, 1), 0);
    CHECK_EQ(weir__run_add(w, 4, "a", 1, "", 0, 0), 0);
    /* Too large. */
    uint8_t *big = calloc(1, WEIR_STATE_MAX_KEY + 1);
    memset(big, 'z', WEIR_STATE_MAX_KEY + 1);
    CHECK_EQ(weir__run_add(w, 4, big, WEIR_STATE_MAX_KEY + 1, "v", 1, 0), -E2BIG);
    CHECK_EQ(weir__run_add(w, 5, "a", 1, "v", 1, 0), -E2BIG);
    weir__run_writer_free(w);
    w = weir__run_writer_new();
    CHECK_EQ(weir__run_add(w, 4, big, WEIR_STATE_MAX_KEY, "v", 1, 0), 0); /* the cap itself */
    CHECK_EQ(weir__run_add(w, 4, "zz", 2, NULL, 1, 0), -EINVAL);          /* no value bytes */
    weir__run_writer_free(w);
    free(big);
}

/* A small run of one group: 40 entries over a few blocks. */
static void small_run(uint8_t **buf, size_t *len, weir__run_group **g, size_t *ng)
{
    weir__run_writer *w = weir__run_writer_new();
    char key[16], val[600];
    memset(val, 'v', sizeof(val));
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof(key), "key%03d", i);
        CHECK_EQ(weir__run_add(w, 6, key, strlen(key), val, 10 + (size_t)i * 14, i % 5 == 3), 0);
    }
    CHECK_EQ(weir__run_finish(w, buf, len, g, ng), 0);
    CHECK_EQ(*ng, 1);
    weir__run_writer_free(w);
}

/* Exercise a parsed meta: nothing out of bounds (ASan watches). */
static void poke_meta(weir__run_meta *m)
{
    uint64_t off;
    uint32_t len, first, end;
    weir__run_meta_maybe(m, "key007", 6);
    weir__run_meta_block(m, "key007", 6, &off, &len);
    weir__run_meta_range(m, "key001", 6, "key030", 6, &first, &end);
    for (uint32_t i = first; i < end; i++)
        weir__run_meta_nth(m, i, &off, &len);
}

static void reseal(uint8_t *s, size_t len)
{
    weir__put_be64(s + len - 8, XXH64(s + 4, len - WEIR__RUN_SECTION, 0));
}

TEST(corruption_and_truncation_are_refused)
{
    uint8_t *buf;
    size_t len, ng;
    weir__run_group *g;
    small_run(&buf, &len, &g, &ng);
    char why[200];
    weir__run_meta *m;
    CHECK_EQ(weir__run_meta_parse(buf + g->meta_off, g->meta_len, 6, &m, why, sizeof(why)), 0);
    CHECK_GE(weir__run_meta_nblocks(m), 3);
    uint64_t boff;
    uint32_t blen;
    weir__run_meta_nth(m, 1, &boff, &blen);
    weir__run_meta_free(m);
    struct {
        const char *what;
        uint64_t off;
        uint32_t len;
    } sec[] = {{"meta", g->meta_off, g->meta_len}, {"block", boff, blen}};
    for (int si = 0; si < 2; si++) {
        uint8_t *s = malloc(sec[si].len + 1);
        size_t sl = sec[si].len;
        memcpy(s, buf + sec[si].off, sl);
        for (int mask = 0; mask < 2; mask++)
            for (size_t i = 0; i < sl; i++) {
                uint8_t keep = s[i];
                s[i] ^= mask ? 0xff : 0x01;
                why[0] = '\0';
                weir__run_block b;
                int e = si == 0 ? weir__run_meta_parse(s, sl, 6, &m, why, sizeof(why))
                                : weir__run_block_open(&b, s, sl, why, sizeof(why));
                if (e != -EBADMSG)
                    fprintf(stderr, "%s: byte %zu ^ %d accepted\n", sec[si].what, i, mask);
                CHECK_EQ(e, -EBADMSG);
                CHECK_HAS(why, sec[si].what);
                s[i] = keep;
            }
        /* Every truncation, and a byte too many. */
        for (size_t l = 0; l <= sl + 1; l++) {
            if (l == sl)
                continue;
            weir__run_block b;
            int e = si == 0 ? weir__run_meta_parse(s, l, 6, &m, why, sizeof(why))
                            : weir__run_block_open(&b, s, l, why, sizeof(why));
            CHECK_EQ(e, -EBADMSG);
        }
        /* Damage behind a valid checksum: never out of bounds; whatever is
         * accepted answers queries in bounds. */
        for (size_t i = 4; i < sl - 8; i++)
            for (int mask = 0; mask < 3; mask++) {
                uint8_t keep = s[i];
                s[i] ^= mask == 0 ? 0x01 : mask == 1 ? 0x80 : 0xff;
                reseal(s, sl);
                weir__run_block b;
                if (si == 0) {
                    if (weir__run_meta_parse(s, sl, 6, &m, why, sizeof(why)) == 0) {
                        poke_meta(m);
                        weir__run_meta_free(m);
                    }
                } else if (weir__run_block_open(&b, s, sl, why, sizeof(why)) == 0) {
                    const uint8_t *k, *v;
                    size_t kl, vl;
                    int tomb;
                    while (weir__run_block_next(&b, &k, &kl, &v, &vl, &tomb))
                        ;
                    weir__run_block_find(&b, "key010", 6, &v, &vl);
                }
                s[i] = keep;
                reseal(s, sl);
            }
        free(s);
    }
    weir__run_groups_free(g, ng);
    weir__free(buf);
}

/* A meta section built by hand (resealed), parsed: its reason. */
static void check_meta_refused(uint8_t *s, size_t sl, const char *reason)
{
    char why[200];
    weir__run_meta *m = NULL;
    reseal(s, sl);
    CHECK_EQ(weir__run_meta_parse(s, sl, 6, &m, why, sizeof(why)), -EBADMSG);
    CHECK(m == NULL);
    CHECK_HAS(why, reason);
}

TEST(structure_behind_a_valid_checksum_is_checked)
{
    uint8_t *buf;
    size_t len, ng;
    weir__run_group *g;
    small_run(&buf, &len, &g, &ng);
    size_t sl = g->meta_len;
    uint8_t *s = malloc(sl);
    uint8_t *p = s + 4; /* the payload */
    uint32_t bb = weir__get_be32(buf + g->meta_off + 4 + 12);
    CHECK_EQ(bb, 50);           /* 40 entries: 400 bits */
    uint8_t *nbp = p + 17 + bb; /* past the header and the bloom bits */
#define FRESH() memcpy(s, buf + g->meta_off, sl)
    FRESH(), p[16] = 0, check_meta_refused(s, sl, "bloom");
    FRESH(), p[16] = 17, check_meta_refused(s, sl, "bloom");
    FRESH(), weir__put_be32(p + 12, 0), check_meta_refused(s, sl, "bloom");
    FRESH(), weir__put_be32(p + 12, 0xffffffffu), check_meta_refused(s, sl, "bloom");
    FRESH(), weir__put_be64(p + 4, 0), check_meta_refused(s, sl, "no entries");
    FRESH(), weir__put_be64(p + 4, 2), check_meta_refused(s, sl, "blocks for");
    /* A huge block count is refused before anything is allocated for it. */
    FRESH(), weir__put_be32(nbp, 0xffffffffu), check_meta_refused(s, sl, "cannot fit");
    FRESH(), weir__put_be32(nbp, 0), check_meta_refused(s, sl, "cannot fit");
    FRESH();
    uint32_t nb = weir__get_be32(nbp);
    CHECK_GE(nb, 3);
    /* Block 1's offset before block 0's end; a section shorter than one entry. */
    uint8_t *i0 = nbp + 4, *i1 = i0 + 16 + weir__get_be32(i0 + 12);
    FRESH(), weir__put_be64(i1, weir__get_be64(i0) + 1), check_meta_refused(s, sl, "overlaps");
    FRESH(), weir__put_be32(i1 + 8, 20), check_meta_refused(s, sl, "bad section");
    FRESH(), weir__put_be64(i1, UINT64_MAX - 5), check_meta_refused(s, sl, "bad section");
    /* Block 1's first key equal to block 0's ("key0.." both, same length). */
    FRESH(), memcpy(i1 + 16, i0 + 16, weir__get_be32(i0 + 12));
    check_meta_refused(s, sl, "first key not after");
    FRESH(), weir__put_be32(i1 + 12, 0xfffffff0u), check_meta_refused(s, sl, "first key");
    /* The last key: its length off by one either way; before the last block's first key. */
    uint8_t *lk = p + (sl - 12) - g->last_len - 4;
    FRESH(), weir__put_be32(lk, g->last_len + 1), check_meta_refused(s, sl, "last key");
    FRESH(), weir__put_be32(lk, g->last_len - 1), check_meta_refused(s, sl, "last key");
    FRESH(), lk[4 + 3] = '0', lk[4 + 4] = '0', check_meta_refused(s, sl, "last key before");
    FRESH();
    weir__run_meta *m;
    CHECK_EQ(weir__run_meta_parse(s, sl, 6, &m, NULL, 0), 0); /* untouched: fine */
    weir__run_meta_free(m);
    CHECK_EQ(weir__run_meta_parse(s, sl, -1, &m, NULL, 0), -EBADMSG);
#undef FRESH
    free(s);

    /* Blocks: unknown flags, a tombstone with a value, keys out of order. */
    uint64_t off;
    uint32_t bl;
    CHECK_EQ(weir__run_meta_parse(buf + g->meta_off, g->meta_len, 6, &m, NULL, 0), 0);
    weir__run_meta_nth(m, 0, &off, &bl);
    weir__run_meta_free(m);
    s = malloc(bl);
    p = s + 4;
    char why[200];
    weir__run_block b;
    struct {
        int what;
        const char *reason;
    } bad[] = {{0, "flags"}, {1, "tombstone"}, {2, "not after"}, {3, "cut short"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memcpy(s, buf + off, bl);
        uint32_t kl0 = weir__get_be32(p + 1), vl0 = weir__get_be32(p + 5);
        uint8_t *e1 = p + 9 + kl0 + vl0;
        if (bad[i].what == 0)
            p[0] = 2;
        else if (bad[i].what == 1)
            p[0] = 1; /* entry 0 has a value */
        else if (bad[i].what == 2)
            memcpy(e1 + 9, p + 9, kl0); /* entry 1's key := entry 0's */
        else
            weir__put_be32(e1 + 5, weir__get_be32(e1 + 5) + 1);
        reseal(s, bl);
        CHECK_EQ(weir__run_block_open(&b, s, bl, why, sizeof(why)), -EBADMSG);
        CHECK_HAS(why, bad[i].reason);
    }
    free(s);
    uint8_t empty[12] = {0};
    reseal(empty, sizeof(empty));
    CHECK_EQ(weir__run_block_open(&b, empty, sizeof(empty), why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, "no entries");
    weir__run_groups_free(g, ng);
    weir__free(buf);
}

TEST(every_allocation_failure_is_enomem)
{
    for (long fail = 0;; fail++) {
        weir__alloc_fail_after(fail);
        weir__run_writer *w = weir__run_writer_new();
        int e = w ? 0 : -ENOMEM;
        char key[16], val[300] = {0};
        for (int i = 0; !e && i < 200; i++) {
            snprintf(key, sizeof(key), "k%05d", i);
            e = weir__run_add(w, i / 50, key, strlen(key), val, sizeof(val), 0);
        }
        uint8_t *buf = NULL;
        size_t len, ng = 0;
        weir__run_group *g = NULL;
        if (!e)
            e = weir__run_finish(w, &buf, &len, &g, &ng);
        weir__run_meta *m = NULL;
        if (!e)
            e = weir__run_meta_parse(buf + g[1].meta_off, g[1].meta_len, 1, &m, NULL, 0);
        weir__alloc_fail_after(-1);
        weir__run_meta_free(m);
        weir__run_groups_free(g, ng);
        weir__free(buf);
        weir__run_writer_free(w);
        if (!e) {
            CHECK_GT(fail, 10);
            break;
        }
        CHECK_EQ(e, -ENOMEM);
    }
}

TEST_MAIN()
