/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_state.c - keyed state (weir/state.h): key hashing and key-group
 * ranges, the in-memory backend (point ops, ordered prefix scans, bounds,
 * a randomized comparison against a plain model), snapshots (capture
 * isolation, persist + restore, restore into other ranges as a rescale
 * does, damaged and foreign files refused whole), and the asynchronous read
 * seam.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "test.h"
#include "weir/state.h"

/* ---- key groups ----------------------------------------------------------------------- */
TEST(key_hash_is_stable)
{
    /* XXH3-64 of "" and "weir" with seed 0: fixed forever (state depends on it). */
    CHECK(weir_key_hash("", 0) == UINT64_C(0x2d06800538d394c2));
    CHECK(weir_key_hash("weir", 4) == weir_key_hash("weir", 4));
    CHECK(weir_key_hash("weir", 4) != weir_key_hash("Weir", 4));
    CHECK_EQ(weir_key_group(UINT64_C(130), 128), 2);
    /* Keys spread over the groups. */
    int seen[WEIR_KEY_GROUPS] = {0};
    for (int i = 0; i < 10000; i++) {
        char k[16];
        int n = snprintf(k, sizeof(k), "key-%d", i);
        seen[weir_key_group(weir_key_hash(k, (size_t)n), WEIR_KEY_GROUPS)]++;
    }
    for (int g = 0; g < WEIR_KEY_GROUPS; g++) {
        CHECK_GT(seen[g], 40); /* expected 78 */
        CHECK_LT(seen[g], 130);
    }
}

TEST(key_group_ranges_partition_the_groups)
{
    for (int ng = 1; ng <= 130; ng += (ng < 10 ? 1 : 7)) {
        for (int p = 1; p <= ng; p++) {
            int next = 0;
            for (int s = 0; s < p; s++) {
                int first, end;
                CHECK_EQ(weir_key_group_range(s, p, ng, &first, &end), 0);
                CHECK_EQ(first, next); /* contiguous, in order, nothing skipped */
                CHECK_GE(end, first);
                for (int kg = first; kg < end; kg++)
                    CHECK_EQ(weir_key_group_owner(kg, p, ng), s);
                next = end;
            }
            CHECK_EQ(next, ng);
        }
    }
    int f, e;
    CHECK_EQ(weir_key_group_range(0, 0, 128, &f, &e), -EINVAL);
    CHECK_EQ(weir_key_group_range(0, 129, 128, &f, &e), -EINVAL);
    CHECK_EQ(weir_key_group_range(2, 2, 128, &f, &e), -EINVAL);
    CHECK_EQ(weir_key_group_range(-1, 2, 128, &f, &e), -EINVAL);
    CHECK_EQ(weir_key_group_range(0, 2, 128, &f, &e), 0);
    CHECK_EQ(f, 0);
    CHECK_EQ(e, 64);
}

/* ---- point operations and scans ----------------------------------------------------------- */
static int get_str(weir_state_backend *b, int kg, const char *k, char *out, size_t cap)
{
    const void *v;
    size_t n;
    int e = weir_state_get(b, kg, k, strlen(k), &v, &n);
    if (e)
        return e;
    CHECK_LT(n, cap);
    memcpy(out, v, n);
    out[n] = '\0';
    return 0;
}

static int put_str(weir_state_backend *b, int kg, const char *k, const char *v)
{
    return weir_state_put(b, kg, k, strlen(k), v, strlen(v));
}

typedef struct collect {
    char keys[64][32];
    int n;
    int stop_after;
} collect;

static int collect_fn(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
    (void)val, (void)vlen;
    collect *c = arg;
    CHECK_LT(klen, 32);
    memcpy(c->keys[c->n], key, klen);
    c->keys[c->n][klen] = '\0';
    c->n++;
    return c->stop_after && c->n == c->stop_after ? 7 : 0;
}

TEST(memory_point_ops_and_scans)
{
    weir_state_backend *b = weir_state_memory_new(128, 10, 20);
    CHECK(b != NULL);
    char out[64];
    CHECK_EQ(get_str(b, 10, "a", out, sizeof(out)), -ENOENT);
    CHECK_EQ(put_str(b, 10, "a", "1"), 0);
    CHECK_EQ(put_str(b, 10, "b", "2"), 0);
    CHECK_EQ(put_str(b, 11, "a", "other group"), 0);
    CHECK_EQ(get_str(b, 10, "a", out, sizeof(out)), 0);
    CHECK_STR(out, "1");
    CHECK_EQ(get_str(b, 11, "a", out, sizeof(out)), 0);
    CHECK_STR(out, "other group");
    CHECK_EQ(put_str(b, 10, "a", "replaced, and longer"), 0);
    CHECK_EQ(get_str(b, 10, "a", out, sizeof(out)), 0);
    CHECK_STR(out, "replaced, and longer");
    CHECK_EQ(weir_state_entries(b, 10), 2);
    CHECK_EQ(weir_state_delete(b, 10, "a", 1), 0);
    CHECK_EQ(weir_state_delete(b, 10, "a", 1), -ENOENT);
    CHECK_EQ(get_str(b, 10, "a", out, sizeof(out)), -ENOENT);
    CHECK_EQ(weir_state_entries(b, 10), 1);
    /* Empty keys and values are values like any other. */
    CHECK_EQ(weir_state_put(b, 12, "", 0, "", 0), 0);
    const void *v;
    size_t n;
    CHECK_EQ(weir_state_get(b, 12, "", 0, &v, &n), 0);
    CHECK_EQ(n, 0);

    /* Ordered prefix scans (map entries of one key, windows of one key). */
    const char *keys[] = {"user/2/x", "user/10/a", "user/1/b",        "user/1/a", "user/1",
                          "user/",    "usea",      "user/1/a/deeper", "v"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        CHECK_EQ(put_str(b, 15, keys[i], "x"), 0);
    collect c = {0};
    CHECK_EQ(weir_state_scan(b, 15, "user/1/", 7, collect_fn, &c), 0);
    CHECK_EQ(c.n, 3);
    CHECK_STR(c.keys[0], "user/1/a");
    CHECK_STR(c.keys[1], "user/1/a/deeper");
    CHECK_STR(c.keys[2], "user/1/b");
    c = (collect){0};
    CHECK_EQ(weir_state_scan(b, 15, NULL, 0, collect_fn, &c), 0); /* everything, in order */
    CHECK_EQ(c.n, 9);
    CHECK_STR(c.keys[0], "usea");
    CHECK_STR(c.keys[1], "user/");
    CHECK_STR(c.keys[2], "user/1");
    CHECK_STR(c.keys[8], "v");
    c = (collect){.stop_after = 2};
    CHECK_EQ(weir_state_scan(b, 15, "user", 4, collect_fn, &c), 7); /* stopped, its value */
    CHECK_EQ(c.n, 2);
    c = (collect){0};
    CHECK_EQ(weir_state_scan(b, 15, "zzz", 3, collect_fn, &c), 0);
    CHECK_EQ(c.n, 0);

    /* From a key on: a seek inside the prefix, the same through the walk of
     * a backend without a seek op. */
    const weir_state_backend_ops *ops = b->ops;
    weir_state_backend_ops no_seek = *ops;
    no_seek.scan_from = NULL;
    for (int pass = 0; pass < 2; pass++) {
        b->ops = pass ? &no_seek : ops;
        c = (collect){0};
        CHECK_EQ(weir_state_scan_from(b, 15, "user/", 5, "user/1/a0", 9, collect_fn, &c), 0);
        CHECK_EQ(c.n, 3); /* user/1/a/deeper < user/1/a0: not visited */
        CHECK_STR(c.keys[0], "user/1/b");
        CHECK_STR(c.keys[1], "user/10/a");
        CHECK_STR(c.keys[2], "user/2/x");
        c = (collect){0}; /* from before the prefix: the whole prefix */
        CHECK_EQ(weir_state_scan_from(b, 15, "user/1/", 7, "a", 1, collect_fn, &c), 0);
        CHECK_EQ(c.n, 3);
        c = (collect){0}; /* from past the prefix: nothing */
        CHECK_EQ(weir_state_scan_from(b, 15, "user/1/", 7, "user/2", 6, collect_fn, &c), 0);
        CHECK_EQ(c.n, 0);
        c = (collect){.stop_after = 1};
        CHECK_EQ(weir_state_scan_from(b, 15, NULL, 0, "user/1", 6, collect_fn, &c), 7);
        CHECK_STR(c.keys[0], "user/1");
    }
    b->ops = ops;

    /* Bounds. */
    CHECK_EQ(put_str(b, 9, "a", "x"), -EINVAL); /* not our group */
    CHECK_EQ(put_str(b, 20, "a", "x"), -EINVAL);
    CHECK_EQ(weir_state_put(b, 10, NULL, 3, "x", 1), -EINVAL);
    CHECK_EQ(weir_state_put(b, 10, "a", 1, NULL, 1), -EINVAL);
    static char big[WEIR_STATE_MAX_KEY + 1];
    CHECK_EQ(weir_state_put(b, 10, big, sizeof(big), "x", 1), -E2BIG);
    CHECK_EQ(weir_state_put(b, 10, "a", 1, big, WEIR_STATE_MAX_VALUE + (size_t)1), -E2BIG);
    CHECK_EQ(weir_state_entries(b, 99), 0);
    weir_state_backend_free(b);
    errno = 0;
    CHECK(weir_state_memory_new(128, 5, 4) == NULL);
    CHECK_EQ(errno, EINVAL);
    CHECK(weir_state_memory_new(128, 0, 129) == NULL);
}

/* A randomized run against a plain model: a small key space, every op
 * checked, then a full ordered scan compared. */
#define MODEL_KEYS 300
static int model_present[MODEL_KEYS];
static int model_value[MODEL_KEYS];

static int model_scan_fn(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
    int *next = arg;
    char k[16];
    CHECK_LT(klen, sizeof(k));
    memcpy(k, key, klen);
    k[klen] = '\0';
    int i = atoi(k + 1);
    /* Keys are "k%03d": the scan must visit present keys in order. */
    while (*next < MODEL_KEYS && !model_present[*next])
        (*next)++;
    CHECK_EQ(i, *next);
    CHECK_EQ(vlen, sizeof(int));
    int v;
    memcpy(&v, val, sizeof(v));
    CHECK_EQ(v, model_value[i]);
    (*next)++;
    return 0;
}

TEST(memory_matches_a_model)
{
    weir_state_backend *b = weir_state_memory_new(128, 0, 1);
    uint64_t x = 88172645463325252ull;
    for (int step = 0; step < 200000; step++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int i = (int)(x % MODEL_KEYS), op = (int)(x >> 32) % 3;
        char k[8];
        snprintf(k, sizeof(k), "k%03d", i);
        if (op == 0) {
            int v = (int)(x >> 40);
            CHECK_EQ(weir_state_put(b, 0, k, 4, &v, sizeof(v)), 0);
            model_present[i] = 1;
            model_value[i] = v;
        } else if (op == 1) {
            CHECK_EQ(weir_state_delete(b, 0, k, 4), model_present[i] ? 0 : -ENOENT);
            model_present[i] = 0;
        } else {
            const void *v;
            size_t n;
            int e = weir_state_get(b, 0, k, 4, &v, &n);
            CHECK_EQ(e, model_present[i] ? 0 : -ENOENT);
            if (!e)
                CHECK_EQ(*(const int *)v, model_value[i]);
        }
        /* Ordered scans now and then, often early and rarely late, so new
         * keys join the list both a few at a time and many at once, and
         * deletes hit both listed and not yet listed keys. */
        if (step % (step < 100000 ? 37 : 4999) == 0) {
            int next = 100;
            CHECK_EQ(weir_state_scan(b, 0, "k1", 2, model_scan_fn, &next), 0);
            while (next < 200)
                CHECK(!model_present[next++]); /* every present k1xx was seen */
        }
    }
    size_t count = 0;
    for (int i = 0; i < MODEL_KEYS; i++)
        count += (size_t)model_present[i];
    CHECK_EQ(weir_state_entries(b, 0), count);
    int next = 0;
    CHECK_EQ(weir_state_scan(b, 0, "k", 1, model_scan_fn, &next), 0);
    weir_state_backend_free(b);
}

/* ---- snapshots ------------------------------------------------------------------------ */
static char dir[64];
static char why[256]; /* a restore's reason for refusing an image */

static void make_dir(void)
{
    strcpy(dir, "/tmp/weir-state-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
}

static void rm_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

/* Fill groups [0, 128) of a full-range backend with keys that land in
 * their hashed group. */
static void fill(weir_state_backend *b, int n)
{
    for (int i = 0; i < n; i++) {
        char k[32], v[32];
        int kl = snprintf(k, sizeof(k), "key-%d", i);
        snprintf(v, sizeof(v), "value-%d", i);
        int kg = weir_key_group(weir_key_hash(k, (size_t)kl), 128);
        if (kg >= b->first_kg && kg < b->end_kg)
            CHECK_EQ(put_str(b, kg, k, v), 0);
    }
}

static int check_all(weir_state_backend *b, int n)
{
    int found = 0;
    for (int i = 0; i < n; i++) {
        char k[32], want[32], got[64];
        int kl = snprintf(k, sizeof(k), "key-%d", i);
        snprintf(want, sizeof(want), "value-%d", i);
        int kg = weir_key_group(weir_key_hash(k, (size_t)kl), 128);
        if (kg < b->first_kg || kg >= b->end_kg)
            continue;
        CHECK_EQ(get_str(b, kg, k, got, sizeof(got)), 0);
        CHECK_STR(got, want);
        found++;
    }
    return found;
}

TEST(snapshot_capture_persist_restore)
{
    make_dir();
    weir_state_backend *b = weir_state_memory_new(128, 0, 128);
    fill(b, 5000);
    weir_state_snapshot *s;
    CHECK_EQ(weir_state_capture(b, 7, &s), 0);
    CHECK_EQ(weir_state_snapshot_id(s), 7);
    CHECK_GT(weir_state_snapshot_size(s), 5000 * 10);
    /* The operator goes on after the barrier: the snapshot does not see it. */
    int kg0 = weir_key_group(weir_key_hash("key-0", 5), 128);
    CHECK_EQ(put_str(b, kg0, "key-0", "changed after capture"), 0);
    CHECK_EQ(put_str(b, 3, "late", "x"), 0);
    char path[128];
    snprintf(path, sizeof(path), "%s/ckpt-7", dir);
    CHECK_EQ(weir_state_persist(s, path), 0);
    weir_state_snapshot_free(s);
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0); /* renamed into place */

    weir_state_backend *r = weir_state_memory_new(128, 0, 128);
    CHECK_EQ(put_str(r, 3, "stale", "replaced by the restore"), 0);
    CHECK_EQ(weir_state_restore(r, path, why, sizeof(why)), 0);
    CHECK_EQ(check_all(r, 5000), 5000);
    char out[64];
    CHECK_EQ(get_str(r, 3, "late", out, sizeof(out)), -ENOENT);
    CHECK_EQ(get_str(r, 3, "stale", out, sizeof(out)), -ENOENT);

    /* Rescale 1 -> 3: each new subtask restores its own range from the
     * one file, and together they hold every key exactly once. */
    int total = 0;
    for (int sub = 0; sub < 3; sub++) {
        int first, end;
        CHECK_EQ(weir_key_group_range(sub, 3, 128, &first, &end), 0);
        weir_state_backend *part = weir_state_memory_new(128, first, end);
        CHECK_EQ(weir_state_restore(part, path, why, sizeof(why)), 0);
        total += check_all(part, 5000);
        size_t entries = 0;
        for (int kg = first; kg < end; kg++)
            entries += weir_state_entries(part, kg);
        CHECK_EQ(entries, (size_t)check_all(part, 5000));
        weir_state_backend_free(part);
    }
    CHECK_EQ(total, 5000);

    /* Rescale 2 -> 1: one backend restores from both halves' files. */
    char half[2][128];
    for (int sub = 0; sub < 2; sub++) {
        int first, end;
        weir_key_group_range(sub, 2, 128, &first, &end);
        weir_state_backend *part = weir_state_memory_new(128, first, end);
        fill(part, 5000);
        CHECK_EQ(weir_state_capture(part, 9, &s), 0);
        snprintf(half[sub], sizeof(half[sub]), "%s/ckpt-9-%d", dir, sub);
        CHECK_EQ(weir_state_persist(s, half[sub]), 0);
        weir_state_snapshot_free(s);
        weir_state_backend_free(part);
    }
    weir_state_backend *whole = weir_state_memory_new(128, 0, 128);
    CHECK_EQ(weir_state_restore(whole, half[0], why, sizeof(why)), 0);
    CHECK_EQ(weir_state_restore(whole, half[1], why, sizeof(why)), 0);
    CHECK_EQ(check_all(whole, 5000), 5000);
    weir_state_backend_free(whole);

    weir_state_backend_free(r);
    weir_state_backend_free(b);
    rm_dir();
}

static int join_fn(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
    char *out = arg;
    size_t n = strlen(out);
    snprintf(out + n, 512 - n, "%.*s=%.*s;", (int)klen, (const char *)key, (int)vlen,
             (const char *)val);
    return 0;
}

/* Entries kept outside a backend go into its snapshot, merged into their
 * groups in key order, and come back with a restore like its own. */
TEST(capture_with_extra_entries)
{
    make_dir();
    weir_state_backend *b = weir_state_memory_new(128, 10, 20);
    CHECK_EQ(put_str(b, 12, "b", "own-b"), 0);
    CHECK_EQ(put_str(b, 12, "d", "own-d"), 0);
    CHECK_EQ(put_str(b, 15, "m", "own-m"), 0);
    weir_state_entry extra[] = {{11, "z", 1, "x-z", 3},
                                {12, "a", 1, "x-a", 3},
                                {12, "c", 1, "x-c", 3},
                                {12, "e", 1, "", 0},
                                {19, "q", 1, "x-q", 3}};
    weir_state_snapshot *s;
    CHECK_EQ(weir_state_capture_with(b, 3, extra, 5, &s), 0);
    char path[128];
    snprintf(path, sizeof(path), "%s/extra", dir);
    CHECK_EQ(weir_state_persist(s, path), 0);
    weir_state_snapshot_free(s);
    CHECK_EQ(weir_state_entries(b, 12), 2); /* the backend itself is unchanged */

    weir_state_backend *r = weir_state_memory_new(128, 10, 20);
    CHECK_EQ(weir_state_restore(r, path, why, sizeof(why)), 0);
    char got[512] = "";
    CHECK_EQ(weir_state_scan(r, 12, NULL, 0, join_fn, got), 0);
    CHECK_STR(got, "a=x-a;b=own-b;c=x-c;d=own-d;e=;");
    char out[16];
    CHECK_EQ(get_str(r, 11, "z", out, sizeof(out)), 0);
    CHECK_STR(out, "x-z");
    CHECK_EQ(get_str(r, 19, "q", out, sizeof(out)), 0);
    CHECK_EQ(get_str(r, 15, "m", out, sizeof(out)), 0);
    weir_state_backend_free(r);

    /* Refused whole: out of order, a key twice, a key the backend has, a
     * group outside the backend's range. */
    weir_state_entry unsorted[] = {{12, "c", 1, "", 0}, {12, "a", 1, "", 0}};
    weir_state_entry twice[] = {{12, "a", 1, "", 0}, {12, "a", 1, "", 0}};
    weir_state_entry clash[] = {{12, "b", 1, "", 0}};
    weir_state_entry outside[] = {{20, "a", 1, "", 0}};
    weir_state_entry groups[] = {{13, "a", 1, "", 0}, {12, "z", 1, "", 0}};
    s = NULL;
    CHECK_EQ(weir_state_capture_with(b, 4, unsorted, 2, &s), -EINVAL);
    CHECK_EQ(weir_state_capture_with(b, 4, twice, 2, &s), -EINVAL);
    CHECK_EQ(weir_state_capture_with(b, 4, clash, 1, &s), -EINVAL);
    CHECK_EQ(weir_state_capture_with(b, 4, outside, 1, &s), -EINVAL);
    CHECK_EQ(weir_state_capture_with(b, 4, groups, 2, &s), -EINVAL);
    CHECK(s == NULL);
    weir_state_backend_free(b);
    rm_dir();
}

static void write_bytes(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK_EQ(fwrite(p, 1, n, f), n);
    fclose(f);
}

TEST(damaged_snapshots_are_refused_whole)
{
    make_dir();
    weir_state_backend *b = weir_state_memory_new(128, 0, 128);
    fill(b, 300);
    weir_state_snapshot *s;
    CHECK_EQ(weir_state_capture(b, 1, &s), 0);
    char path[128];
    snprintf(path, sizeof(path), "%s/good", dir);
    CHECK_EQ(weir_state_persist(s, path), 0);
    weir_state_snapshot_free(s);
    FILE *f = fopen(path, "rb");
    static uint8_t img[1 << 20];
    size_t n = fread(img, 1, sizeof(img), f);
    fclose(f);
    CHECK_GT(n, 100);

    weir_state_backend *r = weir_state_memory_new(128, 0, 128);
    CHECK_EQ(put_str(r, 5, "keep", "me"), 0);
    char bad[160];
    snprintf(bad, sizeof(bad), "%s/bad", dir);
    /* A flipped byte anywhere: the checksum. */
    for (size_t at = 0; at < n; at += n / 37 + 1) {
        img[at] ^= 0x40;
        write_bytes(bad, img, n);
        CHECK_EQ(weir_state_restore(r, bad, why, sizeof(why)), -EBADMSG);
        CHECK(strlen(why) > 0);
        img[at] ^= 0x40;
    }
    /* Cut short at any length. */
    for (size_t len = 0; len < n; len += n / 23 + 1) {
        write_bytes(bad, img, len);
        CHECK_EQ(weir_state_restore(r, bad, why, sizeof(why)), -EBADMSG);
    }
    /* Not a snapshot at all; a missing file; another group count. */
    write_bytes(bad, (const uint8_t *)"hello, this is not a snapshot file", 34);
    CHECK_EQ(weir_state_restore(r, bad, why, sizeof(why)), -EBADMSG);
    CHECK(strstr(why, "not a weir state snapshot") != NULL);
    snprintf(bad, sizeof(bad), "%s/missing", dir);
    CHECK_EQ(weir_state_restore(r, bad, why, sizeof(why)), -ENOENT);
    weir_state_backend *other = weir_state_memory_new(64, 0, 64);
    CHECK_EQ(weir_state_restore(other, path, why, sizeof(why)), -EINVAL);
    CHECK(strstr(why, "key groups") != NULL);
    weir_state_backend_free(other);
    /* Nothing of any failed restore reached the backend. */
    char out[16];
    CHECK_EQ(get_str(r, 5, "keep", out, sizeof(out)), 0);
    CHECK_EQ(weir_state_restore(r, path, why, sizeof(why)), 0);
    CHECK_STR(why, ""); /* a success leaves no reason behind */
    CHECK_EQ(check_all(r, 300), 300);
    weir_state_backend_free(r);
    weir_state_backend_free(b);
    CHECK_EQ(weir_state_persist(NULL, path), -EINVAL);
    rm_dir();
}

/* A checksum-valid file whose lengths lie: built by hand, so the
 * structural checks (not the checksum) must catch it. */
TEST(lying_lengths_are_refused)
{
    make_dir();
    weir_state_backend *b = weir_state_memory_new(4, 0, 4);
    CHECK_EQ(put_str(b, 1, "k", "v"), 0);
    weir_state_snapshot *s;
    CHECK_EQ(weir_state_capture(b, 1, &s), 0);
    char path[128];
    snprintf(path, sizeof(path), "%s/lie", dir);
    CHECK_EQ(weir_state_persist(s, path), 0);
    weir_state_snapshot_free(s);
    FILE *f = fopen(path, "rb");
    uint8_t img[256];
    size_t n = fread(img, 1, sizeof(img), f);
    fclose(f);
    /* header 32 bytes, group 1: u32 kg at 32, u64 count at 36. */
    struct {
        size_t at;
        uint8_t v;
        const char *why;
    } lies[] = {
        {39, 0xff, "more than fit"}, /* count 255 */
        {35, 9, "out of order"},     /* group 9 >= end 4 */
        {47, 0xf0, "exceeds"},       /* key length 0xf0 */
    };
    for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
        uint8_t copy[256];
        memcpy(copy, img, n);
        copy[lies[i].at] = lies[i].v;
        /* Re-seal with a good checksum: XXH64 of the body, big-endian. */
        uint64_t sum = XXH64(copy, n - 8, 0);
        for (int k = 0; k < 8; k++)
            copy[n - 8 + (size_t)k] = (uint8_t)(sum >> (56 - 8 * k));
        char bad[160];
        snprintf(bad, sizeof(bad), "%s/lie-%zu", dir, i);
        write_bytes(bad, copy, n);
        weir_state_backend *r = weir_state_memory_new(4, 0, 4);
        CHECK_EQ(weir_state_restore(r, bad, why, sizeof(why)), -EBADMSG);
        if (!strstr(why, lies[i].why))
            fprintf(stderr, "lie %zu: %s\n", i, why);
        CHECK(strstr(why, lies[i].why) != NULL);
        weir_state_backend_free(r);
    }
    weir_state_backend_free(b);
    rm_dir();
}

/* A state larger than a capture's chunk (4 MiB): written in several
 * chunks, encoded into one image, restored byte for byte. */
TEST(large_snapshot_round_trips)
{
    make_dir();
    enum { N = 80, VLEN = 200000 }; /* 16 MB, values crossing chunk boundaries */
    weir_state_backend *b = weir_state_memory_new(8, 0, 8);
    uint8_t *v = malloc(VLEN);
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < VLEN; k++)
            v[k] = (uint8_t)(i * 31 + k);
        char key[16];
        int n = snprintf(key, sizeof(key), "big%03d", i);
        CHECK_EQ(weir_state_put(b, i % 8, key, (size_t)n, v, VLEN), 0);
    }
    weir_state_snapshot *s;
    CHECK_EQ(weir_state_capture(b, 9, &s), 0);
    CHECK_GE(weir_state_snapshot_size(s), (size_t)N * VLEN);
    char path[128];
    snprintf(path, sizeof(path), "%s/big", dir);
    CHECK_EQ(weir_state_persist(s, path), 0);
    const void *img;
    size_t len;
    CHECK_EQ(weir_state_snapshot_encode(s, &img, &len), 0); /* the same image again */
    CHECK_GT(len, (size_t)N * VLEN);
    weir_state_backend *r = weir_state_memory_new(8, 0, 8);
    CHECK_EQ(weir_state_restore_image(r, img, len, why, sizeof(why)), 0);
    weir_state_snapshot_free(s);
    weir_state_backend *f = weir_state_memory_new(8, 0, 8);
    CHECK_EQ(weir_state_restore(f, path, why, sizeof(why)), 0);
    for (int i = 0; i < N; i++) {
        char key[16];
        int n = snprintf(key, sizeof(key), "big%03d", i);
        for (int w = 0; w < 2; w++) {
            const void *got;
            size_t gl;
            CHECK_EQ(weir_state_get(w ? f : r, i % 8, key, (size_t)n, &got, &gl), 0);
            CHECK_EQ(gl, VLEN);
            for (int k = 0; k < VLEN; k += 997)
                CHECK_EQ(((const uint8_t *)got)[k], (uint8_t)(i * 31 + k));
        }
    }
    free(v);
    weir_state_backend_free(f);
    weir_state_backend_free(r);
    weir_state_backend_free(b);
    rm_dir();
}

/* ---- the asynchronous read seam ----------------------------------------------------------- */
typedef struct answer {
    int calls, err;
    char val[16];
} answer;

static void on_answer(void *arg, int err, const void *val, size_t vlen)
{
    answer *a = arg;
    a->calls++;
    a->err = err;
    if (!err) {
        memcpy(a->val, val, vlen);
        a->val[vlen] = '\0';
    }
}

TEST(async_reads_answer_at_once_in_memory)
{
    weir_state_backend *b = weir_state_memory_new(128, 0, 128);
    CHECK_EQ(put_str(b, 4, "a", "1"), 0);
    CHECK_EQ(put_str(b, 4, "b", "2"), 0);
    answer a = {0};
    CHECK_EQ(weir_state_get_async(b, 4, "a", 1, on_answer, &a), 0); /* at once: no callback */
    CHECK_EQ(a.calls, 0);
    CHECK_EQ(weir_state_get_async(b, 4, "zz", 2, on_answer, &a), -ENOENT);
    answer many[3] = {{0}};
    const void *keys[] = {"a", "missing", "b"};
    size_t klens[] = {1, 7, 1};
    void *args[] = {&many[0], &many[1], &many[2]};
    CHECK_EQ(weir_state_get_many_async(b, 4, keys, klens, 3, on_answer, args), 0);
    CHECK_EQ(many[0].calls, 1);
    CHECK_STR(many[0].val, "1");
    CHECK_EQ(many[1].err, -ENOENT);
    CHECK_STR(many[2].val, "2");
    weir_state_backend_free(b);
}

TEST_MAIN()
