/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_base.c - the base layer (src/base/): the growable buffer (growth,
 * the sticky error), the allocator's failure countdown (which allocation
 * fails, what it counts), the intrusive list, the big-endian codec, atomic
 * file publication (a failure leaves the old file and no temporary) and
 * bounded whole-file reads, and the error table behind weir_strerror.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/afile.h"
#include "base/alloc.h"
#include "base/be.h"
#include "base/buf.h"
#include "base/intern.h"
#include "base/list.h"
#include "test.h"
#include "weir/error.h"
#include "weir/rt.h"

/* ---- buf ------------------------------------------------------------------------------ */
TEST(interned_strings_outlive_their_source)
{
    char *s = strdup("count");
    const char *a = weir__intern(s, "x");
    CHECK(a != s);
    CHECK_STR(a, "count");
    strcpy(s, "other");
    free(s); /* the interned copy is the process's */
    CHECK_STR(a, "count");
    CHECK(weir__intern("count", "x") == a); /* one copy per string */
    CHECK(weir__intern("count2", "x") != a);
    static const char fallback[] = "fallback";
    CHECK(weir__intern(NULL, fallback) == fallback);
    char longer[WEIR__INTERN_LEN + 50];
    memset(longer, 'a', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    CHECK_EQ(strlen(weir__intern(longer, "x")), (size_t)WEIR__INTERN_LEN); /* cut */
}

TEST(buf_grows_and_keeps_bytes)
{
    weir__buf b = {0};
    for (int i = 0; i < 1000; i++) {
        weir__buf_put_u8(&b, (uint8_t)i);
        CHECK_LE(b.len, b.cap);
    }
    CHECK_EQ(b.len, 1000);
    CHECK_EQ(b.err, 0);
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(b.p[i], (uint8_t)i);
    weir__buf_put_be32(&b, 0x01020304u);
    weir__buf_put_be64(&b, UINT64_C(0x1122334455667788));
    CHECK_EQ(b.len, 1012);
    CHECK(memcmp(b.p + 1000, "\x01\x02\x03\x04\x11\x22\x33\x44\x55\x66\x77\x88", 12) == 0);
    /* A large put grows past the doubling in one step. */
    static uint8_t big[100000];
    memset(big, 0xab, sizeof(big));
    weir__buf_put(&b, big, sizeof(big));
    CHECK_EQ(b.len, 1012 + sizeof(big));
    CHECK_GE(b.cap, b.len);
    CHECK_EQ(b.p[b.len - 1], 0xab);
    size_t n;
    uint8_t *p = weir__buf_take(&b, &n);
    CHECK(p != NULL);
    CHECK_EQ(n, 1012 + sizeof(big));
    CHECK(b.p == NULL && b.len == 0 && b.cap == 0 && b.err == 0);
    CHECK_EQ(p[999], (uint8_t)999);
    weir__free(p);
    /* Taken, it is empty and usable again. */
    weir__buf_put(&b, "x", 1);
    CHECK_EQ(b.len, 1);
    weir__buf_free(&b);
    CHECK(b.p == NULL && b.len == 0 && b.cap == 0);
    weir__buf_free(&b); /* safe on an empty one */
}

TEST(buf_reserve_makes_room_without_writing)
{
    weir__buf b = {0};
    CHECK_EQ(weir__buf_reserve(&b, 500), 0);
    CHECK_GE(b.cap, 500);
    CHECK_EQ(b.len, 0);
    /* Room already there: no allocation, so a countdown at 0 cannot fail it. */
    weir__alloc_fail_after(0);
    CHECK_EQ(weir__buf_reserve(&b, 500), 0);
    weir__buf_put(&b, "abc", 3);
    CHECK_EQ(weir__alloc_fail_after(-1), 0);
    CHECK_EQ(b.err, 0);
    CHECK_EQ(b.len, 3);
    /* A size that cannot be had fails cleanly, without wrapping. */
    CHECK_EQ(weir__buf_reserve(&b, SIZE_MAX), -ENOMEM);
    CHECK_EQ(b.err, -ENOMEM);
    weir__buf_free(&b);
    CHECK_EQ(b.err, 0);
}

TEST(buf_error_sticks)
{
    weir__buf b = {0};
    weir__buf_put(&b, "head", 4);
    CHECK_EQ(b.err, 0);
    size_t cap = b.cap;
    /* Fail the growth: the bytes so far stay, the put does nothing. */
    uint8_t big[256] = {1};
    weir__alloc_fail_after(0);
    weir__buf_put(&b, big, sizeof(big));
    CHECK_EQ(weir__alloc_fail_after(-1), 1);
    CHECK_EQ(b.err, -ENOMEM);
    CHECK_EQ(b.len, 4);
    CHECK_EQ(b.cap, cap);
    CHECK(memcmp(b.p, "head", 4) == 0);
    /* Allocation works again, but the error stays and later puts are no-ops. */
    weir__buf_put_u8(&b, 7);
    weir__buf_put_be32(&b, 7);
    weir__buf_put_be64(&b, 7);
    CHECK_EQ(b.len, 4);
    CHECK_EQ(weir__buf_reserve(&b, 1), -ENOMEM);
    /* take frees the bytes of a failed buffer and gives nothing. */
    size_t n = 99;
    CHECK(weir__buf_take(&b, &n) == NULL);
    CHECK_EQ(n, 0);
    CHECK(b.p == NULL && b.err == 0);
}

TEST(buf_first_allocation_failure)
{
    weir__buf b = {0};
    weir__alloc_fail_after(0);
    weir__buf_put_u8(&b, 1);
    weir__alloc_fail_after(-1);
    CHECK_EQ(b.err, -ENOMEM);
    CHECK(b.p == NULL && b.len == 0);
    weir__buf_free(&b);
    weir__buf_put_u8(&b, 1); /* cleared by free */
    CHECK_EQ(b.err, 0);
    CHECK_EQ(b.len, 1);
    weir__buf_free(&b);
}

/* ---- allocator countdown -------------------------------------------------------------- */
TEST(alloc_countdown_counts_attempts)
{
    /* Off: nothing is counted. */
    weir__alloc_fail_after(-1);
    void *p = weir__malloc(8);
    weir__free(p);
    CHECK_EQ(weir__alloc_fail_after(LONG_MAX), 0);
    /* On and far away: every kind of allocation counts, none fails. */
    void *a = weir__malloc(8), *c = weir__calloc(2, 8);
    a = weir__realloc(a, 64);
    char *s = weir__strdup("weir");
    CHECK(a && c && s);
    CHECK_STR(s, "weir");
    weir__free(NULL); /* frees are not allocations */
    CHECK_EQ(weir__alloc_fail_after(-1), 4);
    weir__free(a);
    weir__free(c);
    weir__free(s);
    CHECK_EQ(weir__alloc_fail_after(-1), 0);
}

TEST(alloc_countdown_fails_nth_and_after)
{
    weir__alloc_fail_after(2);
    void *a = weir__malloc(8);
    void *b = weir__calloc(1, 8);
    CHECK(a != NULL && b != NULL);
    errno = 0;
    CHECK(weir__malloc(8) == NULL);
    CHECK_EQ(errno, ENOMEM);
    /* Every later one fails too, realloc leaving its block alone. */
    CHECK(weir__calloc(1, 8) == NULL);
    CHECK(weir__realloc(a, 4096) == NULL);
    CHECK(weir__strdup("x") == NULL);
    CHECK_EQ(weir__alloc_fail_after(-1), 6);
    memset(a, 1, 8); /* still ours */
    weir__free(a);
    weir__free(b);
    /* And off again: allocations succeed. */
    a = weir__malloc(8);
    CHECK(a != NULL);
    weir__free(a);
}

TEST(alloc_countdown_zero_fails_next)
{
    weir__alloc_fail_after(0);
    CHECK(weir__realloc(NULL, 8) == NULL);
    CHECK_EQ(weir__alloc_fail_after(-1), 1);
}

/* ---- list ----------------------------------------------------------------------------- */
typedef struct item {
    int v;
    weir__list node;
} item;

/* The values of the list, in order, into out; returns how many. */
static int list_values(weir__list *h, int *out)
{
    int n = 0;
    weir__list *it;
    weir__list_foreach (it, h)
        out[n++] = weir__container_of(it, item, node)->v;
    return n;
}

TEST(list_ops)
{
    weir__list h;
    weir__list_init(&h);
    CHECK(weir__list_empty(&h));
    CHECK(weir__list_first(&h) == NULL);
    CHECK(weir__list_last(&h) == NULL);
    CHECK(weir__list_pop(&h) == NULL);
    item it[5];
    for (int i = 0; i < 5; i++) {
        it[i].v = i;
        weir__list_init(&it[i].node);
        CHECK(!weir__list_linked(&it[i].node));
    }
    weir__list_push_back(&h, &it[1].node);
    weir__list_push_back(&h, &it[2].node);
    weir__list_push_front(&h, &it[0].node);
    weir__list_push_back(&h, &it[3].node);
    int v[8];
    CHECK_EQ(list_values(&h, v), 4);
    CHECK(v[0] == 0 && v[1] == 1 && v[2] == 2 && v[3] == 3);
    CHECK(weir__list_linked(&it[2].node));
    CHECK(weir__container_of(weir__list_first(&h), item, node) == &it[0]);
    CHECK(weir__container_of(weir__list_last(&h), item, node) == &it[3]);
    /* Remove from the middle; removing again is a no-op. */
    weir__list_remove(&it[2].node);
    CHECK(!weir__list_linked(&it[2].node));
    weir__list_remove(&it[2].node);
    CHECK_EQ(list_values(&h, v), 3);
    CHECK(v[0] == 0 && v[1] == 1 && v[2] == 3);
    /* Insert before a node. */
    weir__list_insert_before(&it[3].node, &it[2].node);
    CHECK_EQ(list_values(&h, v), 4);
    CHECK_EQ(v[2], 2);
    /* Pop takes from the front. */
    CHECK(weir__list_pop(&h) == &it[0].node);
    CHECK(!weir__list_linked(&it[0].node));
    CHECK_EQ(list_values(&h, v), 3);
    CHECK_EQ(v[0], 1);
    /* Splice moves a whole list to the end of another. */
    weir__list other;
    weir__list_init(&other);
    weir__list_splice(&other, &h); /* into an empty one */
    CHECK(weir__list_empty(&h));
    CHECK_EQ(list_values(&other, v), 3);
    weir__list_push_back(&h, &it[0].node);
    weir__list_push_back(&h, &it[4].node);
    weir__list_splice(&other, &h);
    weir__list_splice(&other, &h); /* an empty source: nothing */
    CHECK(weir__list_empty(&h));
    CHECK_EQ(list_values(&other, v), 5);
    CHECK(v[0] == 1 && v[1] == 2 && v[2] == 3 && v[3] == 0 && v[4] == 4);
    /* foreach_safe lets the body remove the node it is on. */
    weir__list *n, *tmp;
    int seen = 0;
    weir__list_foreach_safe (n, tmp, &other) {
        if (weir__container_of(n, item, node)->v % 2 == 0)
            weir__list_remove(n);
        seen++;
    }
    CHECK_EQ(seen, 5);
    CHECK_EQ(list_values(&other, v), 2);
    CHECK(v[0] == 1 && v[1] == 3);
    weir__list_foreach_safe (n, tmp, &other)
        weir__list_remove(n);
    CHECK(weir__list_empty(&other));
}

/* ---- big-endian codec ----------------------------------------------------------------- */
TEST(env_refs_stand_for_their_variable_and_never_show_it)
{
    char out[32], why[160];
    CHECK_EQ(weir_env_ref("plain value", out, sizeof(out), why, sizeof(why)), 11);
    CHECK_STR(out, "plain value");
    setenv("WEIR_TEST_ENV_REF", "s3cr3t", 1);
    CHECK_EQ(weir_env_ref("env://WEIR_TEST_ENV_REF", out, sizeof(out), why, sizeof(why)), 6);
    CHECK_STR(out, "s3cr3t");
    CHECK_EQ(weir_env_ref("env://WEIR_TEST_ENV_REF", out, 4, why, sizeof(why)), -ENOSPC);
    CHECK(strstr(why, "s3cr3t") == NULL);
    setenv("WEIR_TEST_ENV_REF", "bad\nvalue", 1);
    CHECK_EQ(weir_env_ref("env://WEIR_TEST_ENV_REF", out, sizeof(out), why, sizeof(why)), -EINVAL);
    CHECK_HAS(why, "$WEIR_TEST_ENV_REF holds a control character");
    setenv("WEIR_TEST_ENV_REF", "", 1);
    CHECK_EQ(weir_env_ref("env://WEIR_TEST_ENV_REF", out, sizeof(out), why, sizeof(why)), -ENOENT);
    CHECK_HAS(why, "$WEIR_TEST_ENV_REF is empty");
    unsetenv("WEIR_TEST_ENV_REF");
    CHECK_EQ(weir_env_ref("env://WEIR_TEST_ENV_REF", out, sizeof(out), why, sizeof(why)), -ENOENT);
    CHECK_HAS(why, "$WEIR_TEST_ENV_REF is not set");
    const char *bad[] = {"env://", "env://1A", "env://A-B", "env://A B"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        CHECK_EQ(weir_env_ref(bad[i], out, sizeof(out), why, sizeof(why)), -EINVAL);
        CHECK_HAS(why, "does not name an environment variable");
    }
    CHECK_EQ(weir_env_ref(NULL, out, sizeof(out), NULL, 0), -EINVAL);
}

TEST(be_round_trips)
{
    uint8_t b[9];
    weir__put_be16(b + 1, 0xa1b2);
    CHECK(b[1] == 0xa1 && b[2] == 0xb2);
    CHECK_EQ(weir__get_be16(b + 1), 0xa1b2);
    weir__put_be32(b + 1, 0x8badf00du); /* odd offset: unaligned */
    CHECK(memcmp(b + 1, "\x8b\xad\xf0\x0d", 4) == 0);
    CHECK_EQ(weir__get_be32(b + 1), 0x8badf00du);
    weir__put_be64(b + 1, UINT64_C(0xfedcba9876543210));
    CHECK(memcmp(b + 1, "\xfe\xdc\xba\x98\x76\x54\x32\x10", 8) == 0);
    CHECK(weir__get_be64(b + 1) == UINT64_C(0xfedcba9876543210));
    /* Edges and a spread of values: high bits must not sign-extend. */
    uint64_t x = 1;
    for (int i = 0; i < 200; i++, x = x * UINT64_C(6364136223846793005) + 1442695040888963407u) {
        weir__put_be64(b, x);
        CHECK(weir__get_be64(b) == x);
        weir__put_be32(b, (uint32_t)x);
        CHECK_EQ(weir__get_be32(b), (uint32_t)x);
        weir__put_be16(b, (uint16_t)x);
        CHECK_EQ(weir__get_be16(b), (uint16_t)x);
    }
    weir__put_be64(b, UINT64_MAX);
    CHECK(weir__get_be64(b) == UINT64_MAX);
    weir__put_be32(b, 0);
    CHECK_EQ(weir__get_be32(b), 0);
    /* The trace file's little-endian stores. */
    weir__put_le32(b + 1, 0x8badf00du);
    CHECK(memcmp(b + 1, "\x0d\xf0\xad\x8b", 4) == 0);
    weir__put_le64(b + 1, UINT64_C(0xfedcba9876543210));
    CHECK(memcmp(b + 1, "\x10\x32\x54\x76\x98\xba\xdc\xfe", 8) == 0);
    /* Byte order sorts as the number does (stream keys rely on it). */
    uint8_t lo[8], hi[8];
    weir__put_be64(lo, 255);
    weir__put_be64(hi, 256);
    CHECK_LT(memcmp(lo, hi, 8), 0);
}

/* ---- files ---------------------------------------------------------------------------- */
static char *tmp_dir(void)
{
    static char dir[64];
    snprintf(dir, sizeof(dir), "/tmp/weir_base_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    return dir;
}

static int file_exists(const char *dir, const char *name)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void check_content(const char *dir, const char *name, const char *want)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    uint8_t *buf;
    size_t n;
    CHECK_EQ(weir__file_read_all(p, 1 << 20, &buf, &n), 0);
    CHECK_EQ(n, strlen(want));
    CHECK(memcmp(buf, want, n) == 0);
    weir__free(buf);
}

static void rm_tree(const char *dir, const char *const *names, int n)
{
    char p[256];
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        unlink(p);
        rmdir(p);
    }
    CHECK_EQ(rmdir(dir), 0);
}

TEST(file_write_atomic_publishes)
{
    char *dir = tmp_dir();
    CHECK_EQ(weir__file_write_atomic(dir, "f", "first", 5), 0);
    check_content(dir, "f", "first");
    CHECK(!file_exists(dir, ".f.tmp"));
    CHECK_EQ(weir__file_write_atomic(dir, "f", "second!", 7), 0);
    check_content(dir, "f", "second!");
    CHECK_EQ(weir__file_write_atomic(dir, "empty", "", 0), 0);
    check_content(dir, "empty", "");
    CHECK(!file_exists(dir, ".f.tmp") && !file_exists(dir, ".empty.tmp"));
    CHECK_EQ(weir__fsync_dir(dir), 0);
    const char *names[] = {"f", "empty"};
    rm_tree(dir, names, 2);
    CHECK_EQ(weir__fsync_dir("/nonexistent/weir"), -ENOENT);
    CHECK_EQ(weir__file_write_atomic("/nonexistent/weir", "f", "x", 1), -ENOENT);
}

TEST(file_write_atomic_failed_write_keeps_old_file)
{
    char *dir = tmp_dir();
    CHECK_EQ(weir__file_write_atomic(dir, "f", "old", 3), 0);
    /* A file-size limit makes the write itself fail part way (EFBIG),
     * after the temporary file has been made and partly written. */
    struct rlimit old, lim;
    CHECK_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 16;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
    char big[100];
    memset(big, 'n', sizeof(big));
    int e = weir__file_write_atomic(dir, "f", big, sizeof(big));
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    CHECK_EQ(e, -EFBIG);
    check_content(dir, "f", "old");
    CHECK(!file_exists(dir, ".f.tmp"));
    const char *names[] = {"f"};
    rm_tree(dir, names, 1);
}

TEST(file_write_atomic_failed_rename_leaves_no_temp)
{
    char *dir = tmp_dir();
    /* The name is taken by a directory that is not empty: the rename fails. */
    char sub[256];
    snprintf(sub, sizeof(sub), "%s/d", dir);
    CHECK_EQ(mkdir(sub, 0755), 0);
    CHECK_EQ(weir__file_write_atomic(sub, "inner", "x", 1), 0);
    int e = weir__file_write_atomic(dir, "d", "new", 3);
    CHECK(e == -EISDIR || e == -ENOTEMPTY || e == -EEXIST);
    CHECK(!file_exists(dir, ".d.tmp"));
    check_content(sub, "inner", "x");
    const char *inner[] = {"inner"};
    rm_tree(sub, inner, 1);
    /* A name past PATH_MAX is refused before anything is made. */
    char name[5000];
    memset(name, 'a', sizeof(name) - 1);
    name[sizeof(name) - 1] = 0;
    CHECK_EQ(weir__file_write_atomic(dir, name, "x", 1), -ENAMETOOLONG);
    CHECK_EQ(rmdir(dir), 0);
}

TEST(file_read_all_bounds)
{
    char *dir = tmp_dir();
    char big[100];
    for (int i = 0; i < 100; i++)
        big[i] = (char)i;
    CHECK_EQ(weir__file_write_atomic(dir, "f", big, sizeof(big)), 0);
    char p[256];
    snprintf(p, sizeof(p), "%s/f", dir);
    uint8_t *buf = NULL;
    size_t n = 0;
    CHECK_EQ(weir__file_read_all(p, 99, &buf, &n), -EFBIG);
    CHECK(buf == NULL);
    CHECK_EQ(weir__file_read_all(p, 100, &buf, &n), 0);
    CHECK_EQ(n, 100);
    CHECK(memcmp(buf, big, 100) == 0);
    weir__free(buf);
    /* Its allocation failing is an error, not a crash or a leak. */
    buf = NULL;
    weir__alloc_fail_after(0);
    CHECK_EQ(weir__file_read_all(p, 100, &buf, &n), -ENOMEM);
    weir__alloc_fail_after(-1);
    CHECK(buf == NULL);
    snprintf(p, sizeof(p), "%s/missing", dir);
    CHECK_EQ(weir__file_read_all(p, 100, &buf, &n), -ENOENT);
    const char *names[] = {"f"};
    rm_tree(dir, names, 1);
    /* A file whose size is not known up front (procfs reports 0) is read
     * by growing, and still bounded. */
    CHECK_EQ(weir__file_read_all("/proc/self/status", 1 << 20, &buf, &n), 0);
    CHECK_GT(n, 0);
    weir__free(buf);
    CHECK_EQ(weir__file_read_all("/proc/self/status", 8, &buf, &n), -EFBIG);
}

/* ---- error table ---------------------------------------------------------------------- */
TEST(strerror_weir_codes_have_their_own_text)
{
    CHECK_LT(WEIR_ERROR_END, WEIR_ERROR_BASE);
    for (int c = WEIR_ERROR_BASE; c > WEIR_ERROR_END; c--) {
        const char *t = weir_strerror(c);
        CHECK(t != NULL && *t);
        CHECK(strncmp(t, "unknown error", 13) != 0);
        CHECK(strcmp(t, strerror(-c)) != 0); /* not the C library's "Unknown error" */
        CHECK(weir_strerror(-c) == t);       /* either sign */
        for (int d = WEIR_ERROR_BASE; d > c; d--)
            CHECK(strcmp(t, weir_strerror(d)) != 0);
    }
    CHECK_STR(weir_strerror(WEIR_ERESOLVE), "host name not found");
}

TEST(strerror_errno_and_unknown)
{
    CHECK_STR(weir_strerror(0), "success");
    CHECK_STR(weir_strerror(-ECANCELED), "operation cancelled");
    CHECK_STR(weir_strerror(-ETIMEDOUT), "deadline passed");
    CHECK_STR(weir_strerror(-ENOENT), strerror(ENOENT));
    CHECK_STR(weir_strerror(EINVAL), strerror(EINVAL));
    /* Nobody's code: inside the errno range, just past weir's, and far off. */
    CHECK_STR(weir_strerror(-4000), "unknown error -4000");
    char want[64];
    snprintf(want, sizeof(want), "unknown error %d", WEIR_ERROR_END);
    CHECK_STR(weir_strerror(WEIR_ERROR_END), want);
    CHECK_STR(weir_strerror(INT_MIN), "unknown error -2147483648");
    CHECK_STR(weir_strerror(INT_MAX), "unknown error -2147483647");
}

TEST_MAIN()
