/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_state_alloc.c - every allocation of the in-memory state backend
 * failing in turn (base/alloc.h's countdown): backend creation, a put of a
 * new key (with and without the index growing), a put that grows a value,
 * a scan, and a capture (plain and with extra entries). Each operation's
 * allocations are counted first (weir__alloc_fail_after(LONG_MAX) ... -1);
 * then for each n the n-th fails, and the call must return -ENOMEM (or
 * NULL with errno ENOMEM), leave the backend as it was (the keys stored
 * before still read back, the key being put is absent or still has its old
 * value), and succeed when retried. Run under ASan, LeakSanitizer checks
 * that no failure path leaks.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "test.h"
#include "weir/state.h"

#define NGROUPS 8

static void key_of(int i, char *k, size_t cap)
{
    snprintf(k, cap, "key-%04d", i);
}

/* A value of n bytes that depends on i, so a read-back checks both. */
static void val_of(int i, size_t n, uint8_t *v)
{
    for (size_t j = 0; j < n; j++)
        v[j] = (uint8_t)(i * 31 + (int)j);
}

static int put_i(weir_state_backend *b, int i, size_t vlen)
{
    char k[32];
    uint8_t v[2048];
    key_of(i, k, sizeof(k));
    val_of(i, vlen, v);
    return weir_state_put(b, i % NGROUPS, k, strlen(k), v, vlen);
}

/* Key i reads back with its vlen-byte value. */
static void check_i(weir_state_backend *b, int i, size_t vlen)
{
    char k[32];
    uint8_t want[2048];
    key_of(i, k, sizeof(k));
    val_of(i, vlen, want);
    const void *got;
    size_t n;
    CHECK_EQ(weir_state_get(b, i % NGROUPS, k, strlen(k), &got, &n), 0);
    CHECK_EQ(n, vlen);
    CHECK(vlen == 0 || memcmp(got, want, vlen) == 0);
}

static void check_absent(weir_state_backend *b, int i)
{
    char k[32];
    key_of(i, k, sizeof(k));
    const void *got;
    size_t n;
    CHECK_EQ(weir_state_get(b, i % NGROUPS, k, strlen(k), &got, &n), -ENOENT);
}

/* A backend holding keys 0..nkeys-1 with vlen-byte values. */
static weir_state_backend *filled(int nkeys, size_t vlen)
{
    weir_state_backend *b = weir_state_memory_new(NGROUPS, 0, NGROUPS);
    CHECK(b != NULL);
    for (int i = 0; i < nkeys; i++)
        CHECK_EQ(put_i(b, i, vlen), 0);
    return b;
}

static void check_filled(weir_state_backend *b, int nkeys, size_t vlen)
{
    for (int i = 0; i < nkeys; i++)
        check_i(b, i, vlen);
}

/* ---- creation ------------------------------------------------------------------------- */
TEST(memory_new_each_allocation_fails)
{
    weir__alloc_fail_after(LONG_MAX);
    weir_state_backend *b = weir_state_memory_new(NGROUPS, 2, 6);
    long count = weir__alloc_fail_after(-1);
    CHECK(b != NULL);
    weir_state_backend_free(b);
    CHECK_GT(count, 0);
    for (long n = 0; n < count; n++) {
        errno = 0;
        weir__alloc_fail_after(n);
        b = weir_state_memory_new(NGROUPS, 2, 6);
        weir__alloc_fail_after(-1);
        CHECK(b == NULL);
        CHECK_EQ(errno, ENOMEM);
    }
}

/* ---- put ------------------------------------------------------------------------------ */
/* A new key into a backend of nkeys keys, value vlen bytes: every failure
 * is -ENOMEM with the key absent and the others intact. Returns how many
 * allocations the put made. */
static long put_new_each_failure(int nkeys, size_t old_vlen, size_t vlen)
{
    weir_state_backend *b = filled(nkeys, old_vlen);
    weir__alloc_fail_after(LONG_MAX);
    CHECK_EQ(put_i(b, nkeys, vlen), 0);
    long count = weir__alloc_fail_after(-1);
    check_i(b, nkeys, vlen);
    weir_state_backend_free(b);
    for (long n = 0; n < count; n++) {
        b = filled(nkeys, old_vlen);
        weir__alloc_fail_after(n);
        int r = put_i(b, nkeys, vlen);
        weir__alloc_fail_after(-1);
        CHECK_EQ(r, -ENOMEM);
        check_absent(b, nkeys);
        check_filled(b, nkeys, old_vlen);
        CHECK_EQ(put_i(b, nkeys, vlen), 0); /* the retry */
        check_i(b, nkeys, vlen);
        check_filled(b, nkeys, old_vlen);
        weir_state_backend_free(b);
    }
    return count;
}

TEST(put_new_key_each_allocation_fails)
{
    /* An empty backend (first index, first pending array), a small value
     * kept in its node and one too large for it (its own allocation). */
    CHECK_GT(put_new_each_failure(0, 8, 8), 0);
    CHECK_GT(put_new_each_failure(0, 8, 300), 1);
    /* Past three quarters of the index: the put grows it first. A wide
     * range of sizes crosses every growth point of the index and of the
     * pending-node array. */
    long most = 0;
    for (int nkeys = 1; nkeys < 40; nkeys++) {
        long c = put_new_each_failure(nkeys, 16, nkeys % 2 ? 300 : 16);
        most = c > most ? c : most;
    }
    CHECK_GE(most, 3); /* some put grew the index and the pending array at once */
}

TEST(put_grow_value_each_allocation_fails)
{
    /* Key 3 holds 8 bytes (inline); the new 400 do not fit and need their
     * own allocation, and growing that one past its room (600) another. */
    size_t sizes[] = {400, 1000};
    weir_state_backend *b = filled(10, 8);
    for (int step = 0; step < 2; step++) {
        size_t old = step ? sizes[0] : 8, vlen = sizes[step];
        weir__alloc_fail_after(LONG_MAX);
        CHECK_EQ(put_i(b, 3, vlen), 0);
        long count = weir__alloc_fail_after(-1);
        CHECK_GT(count, 0);
        check_i(b, 3, vlen);
        /* Back to the old value, then fail every allocation of the grow. */
        CHECK_EQ(put_i(b, 3, old), 0);
        for (long n = 0; n < count; n++) {
            weir__alloc_fail_after(n);
            int r = put_i(b, 3, vlen);
            weir__alloc_fail_after(-1);
            CHECK_EQ(r, -ENOMEM);
            check_i(b, 3, old); /* the old value, untouched */
            check_filled(b, 3, 8);
        }
        CHECK_EQ(put_i(b, 3, vlen), 0);
        check_i(b, 3, vlen);
    }
    weir_state_backend_free(b);
}

/* ---- scan ----------------------------------------------------------------------------- */
static int count_cb(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
    (void)key, (void)klen, (void)val, (void)vlen;
    ++*(int *)arg;
    return 0;
}

TEST(scan_allocates_nothing)
{
    weir_state_backend *b = filled(100, 16);
    /* Keys just put are still pending (unlinked): the scan links them first. */
    int seen = 0;
    weir__alloc_fail_after(LONG_MAX);
    for (int kg = 0; kg < NGROUPS; kg++)
        CHECK_EQ(weir_state_scan(b, kg, "key-", 4, count_cb, &seen), 0);
    long count = weir__alloc_fail_after(-1);
    CHECK_EQ(seen, 100);
    /* Whatever the scan allocates may fail: it still answers, or says so. */
    for (long n = 0; n < count; n++) {
        CHECK_EQ(put_i(b, 100 + (int)n, 16), 0); /* something pending again */
        seen = 0;
        weir__alloc_fail_after(n);
        int r = weir_state_scan(b, (100 + (int)n) % NGROUPS, "key-", 4, count_cb, &seen);
        weir__alloc_fail_after(-1);
        CHECK(r == 0 || r == -ENOMEM);
        check_i(b, 100 + (int)n, 16);
    }
    /* With every allocation failing, a scan of linked keys still works. */
    seen = 0;
    weir__alloc_fail_after(0);
    int r = weir_state_scan(b, 1, NULL, 0, count_cb, &seen);
    long tried = weir__alloc_fail_after(-1);
    if (count == 0) {
        CHECK_EQ(r, 0);
        CHECK_EQ(tried, 0);
        CHECK_GT(seen, 0);
    }
    check_filled(b, 100, 16);
    weir_state_backend_free(b);
}

/* ---- capture -------------------------------------------------------------------------- */
/* Extra entries for groups 1 and 5, sorted, with keys the backend lacks. */
static const char *const extra_keys[] = {"x-a", "x-b", "x-c"};
static const weir_state_entry extras[] = {
    {1, "x-a", 3, "va", 2},
    {1, "x-b", 3, "vb", 2},
    {5, "x-c", 3, "vc", 2},
};

static int capture(weir_state_backend *b, int with, weir_state_snapshot **s)
{
    return with ? weir_state_capture_with(b, 42, extras, 3, s) : weir_state_capture(b, 42, s);
}

static void capture_each_failure(int with)
{
    weir_state_backend *b = filled(300, 40);
    for (int i = 300; i < 310; i++) /* some pending, some linked */
        CHECK_EQ(put_i(b, i, 200), 0);
    weir_state_snapshot *s = NULL;
    weir__alloc_fail_after(LONG_MAX);
    CHECK_EQ(capture(b, with, &s), 0);
    long count = weir__alloc_fail_after(-1);
    CHECK(s != NULL);
    CHECK_GT(count, 0);
    size_t size = weir_state_snapshot_size(s);
    CHECK_GT(size, 300 * 40);
    weir_state_snapshot_free(s);
    for (long n = 0; n < count; n++) {
        s = NULL;
        weir__alloc_fail_after(n);
        int r = capture(b, with, &s);
        weir__alloc_fail_after(-1);
        CHECK_EQ(r, -ENOMEM);
        CHECK(s == NULL);
        check_filled(b, 300, 40);
        for (int i = 300; i < 310; i++)
            check_i(b, i, 200);
    }
    /* Retried, the capture is whole: the same size, and a restore of it
     * gives back every entry. */
    CHECK_EQ(capture(b, with, &s), 0);
    CHECK_EQ(weir_state_snapshot_size(s), size);
    char dir[] = "/tmp/weir_state_alloc_XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/snap", dir);
    CHECK_EQ(weir_state_persist(s, path), 0);
    weir_state_snapshot_free(s);
    weir_state_backend *r = weir_state_memory_new(NGROUPS, 0, NGROUPS);
    CHECK(r != NULL);
    char why[128];
    CHECK_EQ(weir_state_restore(r, path, why, sizeof(why)), 0);
    check_filled(r, 300, 40);
    for (int i = 300; i < 310; i++)
        check_i(r, i, 200);
    for (int i = 0; i < 3; i++) {
        const void *v;
        size_t vl;
        int want = with ? 0 : -ENOENT;
        CHECK_EQ(weir_state_get(r, extras[i].kg, extra_keys[i], 3, &v, &vl), want);
    }
    weir_state_backend_free(r);
    CHECK_EQ(unlink(path), 0);
    CHECK_EQ(rmdir(dir), 0);
    weir_state_backend_free(b);
}

TEST(capture_each_allocation_fails)
{
    capture_each_failure(0);
}

TEST(capture_with_each_allocation_fails)
{
    capture_each_failure(1);
}

TEST_MAIN()
