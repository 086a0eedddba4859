/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_storage_redis.c - the Redis store (state/storage_redis.c) against
 * a real redis-server that each test starts itself on a free loopback
 * port (append-only log fsynced on every write, as the store's durability
 * needs), polled with PING until it answers: put / get / list / delete /
 * prefix delete and ranged reads with the other stores' semantics, a
 * get's bound, names full of glob characters, two prefixes that do not
 * see each other, a password read from the environment (and a wrong or
 * missing one refused), calls from a fiber, 16 threads at once sharing round
 * trips (the fiber wrote batches of more than one command), the server
 * killed with SIGKILL and started again on its data (the blobs are there,
 * the store connects again), a server that is down (every call fails in
 * bounded time), a fake server speaking nonsense (errors, no crash, no
 * allocation it asked for), and the remote-read state backend on the
 * store: puts, checkpoints, crashes, lazy restores and reads against the
 * memory backend.
 *
 * redis-server missing fails the tests (scripts/deps.sh installs it).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "state/storage.h"
#include "redis_server.h"
#include "store_checks.h"
#include "test.h"
#include "test_rt.h"
#include "weir/rt.h"
#include "weir/state.h"

/* ---- the largest allocation, watched --------------------------------------------------------- */
/* weir's allocations all go through these (the C library's, with the
 * largest request noted while watching): a malicious server must not
 * make the store allocate what its lengths claim. */
static _Atomic int watching;
static _Atomic size_t biggest;

static void note(size_t n)
{
    if (!atomic_load_explicit(&watching, memory_order_relaxed))
        return;
    size_t b = atomic_load(&biggest);
    while (n > b && !atomic_compare_exchange_weak(&biggest, &b, n))
        ;
}

static void *w_malloc(size_t n)
{
    note(n);
    return malloc(n);
}

static void *w_calloc(size_t n, size_t size)
{
    note(size && n > SIZE_MAX / size ? SIZE_MAX : n * size);
    return calloc(n, size);
}

static void *w_realloc(void *p, size_t n)
{
    note(n);
    return realloc(p, n);
}

static const weir_allocator watched = {w_malloc, w_calloc, w_realloc, free};

__attribute__((constructor)) static void watch_allocations(void)
{
    weir_set_allocator(&watched);
}

static weir__storage *open_store(int port, const char *opts)
{
    char uri[256];
    snprintf(uri, sizeof(uri), "redis://127.0.0.1:%d%s", port, opts);
    weir__storage *st;
    int e = weir__storage_open(uri, &st);
    if (e)
        TEST__FAIL("open %s: %d", uri, e);
    return st;
}

static int listed(weir__storage *st, const char *prefix, const char *want)
{
    weir__names n;
    CHECK_EQ(weir__storage_list(st, prefix, &n), 0);
    char got[1024] = "";
    for (size_t i = 0; i < n.n; i++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", i ? " " : "", n.v[i]);
    weir__names_free(&n);
    if (strcmp(got, want) != 0)
        fprintf(stderr, "list \"%s\": \"%s\", expected \"%s\"\n", prefix, got, want);
    return strcmp(got, want) == 0;
}

static void put_str(weir__storage *st, const char *name, const char *v)
{
    CHECK_EQ(weir__storage_put(st, name, v, strlen(v)), 0);
}

static void check_get(weir__storage *st, const char *name, const char *want)
{
    uint8_t *b;
    size_t n;
    CHECK_EQ(weir__storage_get(st, name, 1 << 20, &b, &n), 0);
    CHECK_EQ(n, strlen(want));
    CHECK(memcmp(b, want, n) == 0);
    weir__free(b);
}

/* The other stores' ranged-read checks (tests/state/test_storage.c). */

TEST(uris_are_checked)
{
    static const char *bad[] = {
        "redis://",
        "redis://:6379",
        "redis://h:0",
        "redis://h:65536",
        "redis://h:12x",
        "redis://h:1/x",
        "redis://h:1?nope=1",
        "redis://h:1?prefix",
        "redis://h:1?prefix=%zz",
        "redis://h:1?prefix=%00",
        "redis://h:1?password=plain",
        "redis://h:1?password=env://WEIR_TEST_NO_SUCH_VARIABLE",
        "redis://h:1?timeout_ms=0",
        "redis://[::1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        weir__storage *st = NULL;
        int e = weir__storage_open(bad[i], &st);
        if (e != -EINVAL)
            TEST__FAIL("open %s: %d", bad[i], e);
    }
    /* Opening does not connect: a store on no server opens. */
    weir__storage *st;
    CHECK_EQ(weir__storage_open("redis://127.0.0.1:1/3?prefix=a%2Fb/&timeout_ms=100", &st), 0);
    weir__storage_close(st);
    CHECK_EQ(weir__storage_open("redis://[::1]:1", &st), 0);
    weir__storage_close(st);
}

TEST(blobs_lists_deletes_ranges)
{
    server sv = {0};
    server_start(&sv);
    weir__storage *st = open_store(sv.port, "?prefix=t1/"), *other;
    weir__storage_redis_stat rs;
    CHECK_EQ(weir__storage_redis_stats(st, &rs), 0);
    CHECK_EQ(rs.connects, 0); /* lazy */

    uint8_t *b;
    size_t n;
    CHECK_EQ(weir__storage_get(st, "COMPLETED-7", 100, &b, &n), -ENOENT);
    CHECK(listed(st, "", ""));
    put_str(st, "COMPLETED-7", "7");
    put_str(st, "chk-7/MANIFEST.json", "{}");
    put_str(st, "chk-7/count.0.state", "state");
    put_str(st, "chk-7/sub/deep", "deep");
    put_str(st, "chk-8/a", "a");
    CHECK_EQ(weir__storage_put(st, "empty", NULL, 0), 0);
    check_get(st, "chk-7/count.0.state", "state");
    check_get(st, "empty", "");
    put_str(st, "chk-7/count.0.state", "state two"); /* replaced whole */
    check_get(st, "chk-7/count.0.state", "state two");
    CHECK(listed(st, "", "COMPLETED-7 chk-7/ chk-8/ empty"));
    CHECK(listed(st, "chk-7/", "chk-7/MANIFEST.json chk-7/count.0.state chk-7/sub/"));
    CHECK(listed(st, "chk-", "chk-7/ chk-8/"));
    CHECK(listed(st, "COMPLETED-", "COMPLETED-7"));
    CHECK(listed(st, "nothing/", ""));

    /* The bound of a get, enforced from the length the server announces. */
    CHECK_EQ(weir__storage_get(st, "chk-7/count.0.state", 8, &b, &n), -EFBIG);
    CHECK_EQ(weir__storage_get(st, "chk-7/count.0.state", 9, &b, &n), 0);
    weir__free(b);

    /* A prefix is a namespace: another store does not see these. */
    other = open_store(sv.port, "?prefix=t2/");
    CHECK(listed(other, "", ""));
    put_str(other, "COMPLETED-7", "other");
    check_get(st, "COMPLETED-7", "7");
    weir__storage_close(other);

    /* Delete: a blob, a missing one, a prefix, a missing prefix. */
    CHECK_EQ(weir__storage_delete(st, "COMPLETED-7"), 0);
    CHECK_EQ(weir__storage_delete(st, "COMPLETED-7"), -ENOENT);
    CHECK_EQ(weir__storage_delete(st, "chk-7/"), 0);
    CHECK_EQ(weir__storage_delete(st, "chk-7/"), -ENOENT);
    CHECK(listed(st, "", "chk-8/ empty"));
    CHECK_EQ(weir__storage_delete(st, ""), -EINVAL);
    CHECK_EQ(weir__storage_put(st, "../x", "x", 1), -EINVAL);

    /* Glob characters in names and prefixes match only themselves. */
    static const char *names[] = {"g*x", "g?y", "g[ab]/1", "g\\z", "gaby", "g[ab/2", "gq]/3"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        put_str(st, names[i], names[i]);
    CHECK(listed(st, "g*", "g*x"));
    CHECK(listed(st, "g?", "g?y"));
    CHECK(listed(st, "g[ab]", "g[ab]/"));
    CHECK(listed(st, "g[ab", "g[ab/ g[ab]/"));
    CHECK(listed(st, "g\\", "g\\z"));
    CHECK(listed(st, "gq]", "gq]/"));
    CHECK(listed(st, "g", "g*x g?y g[ab/ g[ab]/ g\\z gaby gq]/"));
    CHECK_EQ(weir__storage_delete(st, "g[ab]/"), 0);
    CHECK(listed(st, "g", "g*x g?y g[ab/ g\\z gaby gq]/"));
    check_get(st, "g\\z", "g\\z");
    weir__storage *glob = open_store(sv.port, "?prefix=t%2A/"); /* "t*": not t1/ nor t2/ */
    CHECK(listed(glob, "", ""));
    CHECK_EQ(weir__storage_delete(glob, "chk-8/"), -ENOENT);
    weir__storage_close(glob);
    check_get(st, "chk-8/a", "a");

    check_ranges(st);

    /* A blob of several MiB both ways (short writes, reads into place). */
    size_t big = (3u << 20) + 17;
    uint8_t *v = weir__malloc(big);
    for (size_t i = 0; i < big; i++)
        v[i] = (uint8_t)(i * 131 + (i >> 11));
    CHECK_EQ(weir__storage_put_now(st, "big", v, big), 0);
    CHECK_EQ(weir__storage_get(st, "big", big - 1, &b, &n), -EFBIG);
    CHECK_EQ(weir__storage_get(st, "big", big, &b, &n), 0);
    CHECK_EQ(n, big);
    CHECK(memcmp(b, v, big) == 0);
    weir__free(b);
    uint8_t *r = weir__malloc(1 << 20);
    CHECK_EQ(weir__storage_range_now(st, "big", 12345, 1 << 20, r, &n), 0);
    CHECK_EQ(n, 1 << 20);
    CHECK(memcmp(r, v + 12345, n) == 0);
    weir__free(r);
    weir__free(v);

    /* Every call above on one connection: none broke. */
    CHECK_EQ(weir__storage_redis_stats(st, &rs), 0);
    CHECK_EQ(rs.connects, 1);
    CHECK_EQ(rs.drops, 0);
    weir__storage_close(st);

    /* A database of its own: SELECT on connect. */
    weir__storage *db3 = open_store(sv.port, "/3?prefix=t1/");
    CHECK(listed(db3, "", ""));
    put_str(db3, "x", "in db 3");
    weir__storage_close(db3);
    st = open_store(sv.port, "?prefix=t1/");
    CHECK_EQ(weir__storage_get(st, "x", 100, &b, &n), -ENOENT);
    weir__storage_close(st);
    CHECK_EQ(weir__storage_open("redis://127.0.0.1:1?prefix=x", &st), 0);
    weir__storage_close(st);
    char uri[96];
    snprintf(uri, sizeof(uri), "redis://127.0.0.1:%d/999999", sv.port); /* no such database */
    CHECK_EQ(weir__storage_open(uri, &st), 0);
    CHECK_EQ(weir__storage_get(st, "x", 100, &b, &n), -EINVAL);
    weir__storage_close(st);
    server_stop(&sv);
}

TEST(a_password_from_the_environment)
{
    server sv = {.pass = "s3cret pass"};
    server_start(&sv);
    uint8_t *b;
    size_t n;
    setenv("WEIR_TEST_REDIS_PW", "s3cret pass", 1);
    setenv("WEIR_TEST_REDIS_BAD", "wrong", 1);
    weir__storage *st = open_store(sv.port, "/2?password=env://WEIR_TEST_REDIS_PW&prefix=pw/");
    put_str(st, "a", "b");
    check_get(st, "a", "b");
    weir__storage_close(st);
    st = open_store(sv.port, "/2?password=env://WEIR_TEST_REDIS_BAD&prefix=pw/");
    CHECK_EQ(weir__storage_get(st, "a", 10, &b, &n), -EACCES);
    weir__storage_close(st);
    st = open_store(sv.port, "/2?prefix=pw/"); /* none: the server says NOAUTH */
    CHECK_EQ(weir__storage_get(st, "a", 10, &b, &n), -EACCES);
    weir__storage_close(st);
    server_stop(&sv);
}

/* ---- from a fiber: through the blocking pool ------------------------------------------------- */
static intptr_t fiber_calls(void *arg)
{
    weir__storage *st = arg;
    uint8_t *b;
    size_t n;
    if (weir__storage_put(st, "from-fiber", "hello", 5) != 0)
        return -1;
    if (weir__storage_get(st, "from-fiber", 10, &b, &n) != 0)
        return -2;
    int ok = n == 5 && memcmp(b, "hello", 5) == 0;
    weir__free(b);
    return ok && weir__storage_delete(st, "from-fiber") == 0 ? 0 : -3;
}

TEST(calls_from_a_fiber)
{
    server sv = {0};
    server_start(&sv);
    weir__storage *st = open_store(sv.port, "");
    CHECK_EQ(test_run_main(fiber_calls, st), 0);
    weir__storage_close(st);
    server_stop(&sv);
}

/* ---- many callers, one connection ------------------------------------------------------------ */
enum { THREADS = 16, ROUNDS = 150 };
typedef struct hammer {
    weir__storage *st;
    int id;
    _Atomic int *fails;
} hammer;

static void *hammer_main(void *arg)
{
    hammer *h = arg;
    char name[64];
    uint8_t v[600], got[600];
    for (int i = 0; i < ROUNDS; i++) {
        snprintf(name, sizeof(name), "h/%d/%d", h->id, i % 7);
        size_t vl = (size_t)(i * 37 + h->id) % sizeof(v);
        for (size_t j = 0; j < vl; j++)
            v[j] = (uint8_t)(h->id * 31 + i + j);
        int bad = weir__storage_put_now(h->st, name, v, vl) != 0;
        uint8_t *b = NULL;
        size_t n = 0;
        bad |= weir__storage_get(h->st, name, sizeof(v), &b, &n) != 0;
        bad |= !bad && (n != vl || (vl && memcmp(b, v, vl) != 0));
        weir__free(b);
        bad |= weir__storage_range_now(h->st, name, 5, 100, got, &n) != 0;
        size_t want = vl > 5 ? (vl - 5 < 100 ? vl - 5 : 100) : 0;
        bad |= !bad && (n != want || (n && memcmp(got, v + 5, n) != 0));
        if (i % 7 == 6) {
            snprintf(name, sizeof(name), "h/%d/", h->id);
            bad |= weir__storage_delete_now(h->st, name) != 0;
        }
        if (bad)
            atomic_fetch_add(h->fails, 1);
    }
    snprintf(name, sizeof(name), "h/%d/", h->id);
    if (weir__storage_delete_now(h->st, name) != 0)
        atomic_fetch_add(h->fails, 1);
    return NULL;
}

TEST(sixteen_threads_share_round_trips)
{
    server sv = {0};
    server_start(&sv);
    weir__storage *st = open_store(sv.port, "?prefix=hammer/");
    pthread_t t[THREADS];
    hammer h[THREADS];
    _Atomic int fails = 0;
    for (int i = 0; i < THREADS; i++) {
        h[i] = (hammer){st, i, &fails};
        CHECK_EQ(pthread_create(&t[i], NULL, hammer_main, &h[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(atomic_load(&fails), 0);
    weir__storage_redis_stat rs;
    CHECK_EQ(weir__storage_redis_stats(st, &rs), 0);
    printf("  %" PRIu64 " commands in %" PRIu64 " writes, %" PRIu64
           " of them batches, up to %" PRIu64 " in one\n",
           rs.cmds, rs.writes, rs.batched, rs.max_batch);
    /* One caller alone writes at most two commands at once (a range's
     * EXISTS + GETRANGE), and per round twice as many commands as writes
     * (put, get, range): more in one write, and fewer writes, are callers
     * sharing a round trip. */
    CHECK_GT(rs.batched, 0);
    CHECK_GT(rs.max_batch, 2);
    CHECK_LT(rs.writes * 2, rs.cmds);
    CHECK_EQ(rs.connects, 1);
    CHECK(listed(st, "h/", ""));
    weir__storage_close(st);
    server_stop(&sv);
}

/* ---- the server killed, down, back ----------------------------------------------------------- */
static int64_t ms_since(int64_t t0)
{
    return (weir_time_now() - t0) / WEIR_MSEC;
}

static void *late_get(void *arg)
{
    uint8_t *b = NULL;
    size_t n;
    int e = weir__storage_get(arg, "b02", 100, &b, &n);
    if (!e && (n != 7 || memcmp(b, "value 2", 7) != 0))
        e = -EBADMSG;
    weir__free(b);
    return (void *)(intptr_t)e;
}

TEST(server_killed_and_restarted)
{
    server sv = {0};
    server_start(&sv);
    /* Calls try to connect for 1 s (timeout_ms) before they give up. */
    weir__storage *st = open_store(sv.port, "?prefix=crash/&timeout_ms=1000");
    char name[32], val[32];
    for (int i = 0; i < 50; i++) {
        snprintf(name, sizeof(name), "b%02d", i);
        snprintf(val, sizeof(val), "value %d", i);
        put_str(st, name, val);
    }
    server_kill(&sv); /* SIGKILL: only what the log fsynced survives */
    uint8_t *b;
    size_t n;
    for (int i = 0; i < 4; i++) {
        int64_t t0 = weir_time_now();
        int e = weir__storage_get(st, "b00", 100, &b, &n);
        CHECK_LT(e, 0);
        CHECK_NE(e, -ENOENT);
        CHECK_LT(ms_since(t0), 2500);
    }
    CHECK_LT(weir__storage_put(st, "during", "x", 1), 0);
    server_start(&sv);
    /* A server back within the timeout: the call made while it was down
     * waits for it instead of failing. */
    weir__storage *patient = open_store(sv.port, "?prefix=crash/&timeout_ms=20000");
    check_get(patient, "b01", "value 1"); /* connected */
    server_kill(&sv);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, late_get, patient), 0);
    usleep(100000); /* (only to make it likelier that the get starts while the server is down) */
    server_start(&sv);
    void *res;
    CHECK_EQ(pthread_join(th, &res), 0);
    CHECK_EQ((intptr_t)res, 0);
    weir__storage_close(patient);
    /* The next call connects again (after at most one backoff). */
    check_get(st, "b00", "value 0");
    for (int i = 0; i < 50; i++) {
        snprintf(name, sizeof(name), "b%02d", i);
        snprintf(val, sizeof(val), "value %d", i);
        check_get(st, name, val);
    }
    CHECK_EQ(weir__storage_get(st, "during", 100, &b, &n), -ENOENT);
    /* Killed again with a connection open and idle: the first command
     * after the restart finds it broken and goes round again. */
    server_kill(&sv);
    server_start(&sv);
    check_get(st, "b49", "value 49");
    weir__storage_redis_stat rs;
    CHECK_EQ(weir__storage_redis_stats(st, &rs), 0);
    CHECK_GE(rs.connects, 3);
    CHECK_GE(rs.drops, 2);
    weir__storage_close(st);
    server_stop(&sv);
}

TEST(server_down_fails_in_bounded_time)
{
    weir__storage *st = open_store(free_port(), "?timeout_ms=500");
    uint8_t *b, buf[8];
    size_t n;
    weir__names names;
    int64_t t0 = weir_time_now();
    for (int i = 0; i < 2; i++) {
        int64_t t1 = weir_time_now();
        CHECK_LT(weir__storage_get(st, "x", 10, &b, &n), 0);
        CHECK_LT(weir__storage_put(st, "x", "y", 1), 0);
        CHECK_LT(weir__storage_list(st, "", &names), 0);
        CHECK_LT(weir__storage_delete(st, "x/"), 0);
        CHECK_LT(weir__storage_range_now(st, "x", 0, 8, buf, &n), 0);
        CHECK_LT(ms_since(t1), 5 * 2000);
    }
    printf("  10 calls failed in %" PRId64 " ms\n", ms_since(t0));
    weir__storage_close(st);
}

/* ---- a server that speaks nonsense ----------------------------------------------------------- */
typedef struct evil {
    int lfd;
    pthread_t thread;
    pthread_mutex_t mu;
    const char *reply; /* to each request; NULL: say nothing */
    size_t len;
    int hangup; /* after the reply, close */
    _Atomic int conns;
} evil;

static void *evil_main(void *arg)
{
    evil *ev = arg;
    for (;;) {
        int c = accept(ev->lfd, NULL, NULL);
        if (c < 0)
            break;
        atomic_fetch_add(&ev->conns, 1);
        struct timeval tv = {5, 0};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        char buf[4096];
        int hung = 0;
        while (recv(c, buf, sizeof(buf), 0) > 0) { /* until the store hangs up */
            pthread_mutex_lock(&ev->mu);
            const char *r = ev->reply;
            size_t len = ev->len;
            int hangup = ev->hangup;
            pthread_mutex_unlock(&ev->mu);
            if (r && !hung)
                (void)!send(c, r, len, MSG_NOSIGNAL);
            if (hangup && !hung) {
                shutdown(c, SHUT_WR);
                hung = 1;
            }
        }
        close(c);
    }
    return NULL;
}

static void evil_say_(evil *ev, const char *reply, size_t len, int hangup)
{
    pthread_mutex_lock(&ev->mu);
    ev->reply = reply;
    ev->len = len;
    ev->hangup = hangup;
    pthread_mutex_unlock(&ev->mu);
}

static void evil_say(evil *ev, const char *reply, size_t len)
{
    evil_say_(ev, reply, len, 0);
}

#define SAY(ev, lit) evil_say(ev, lit, sizeof(lit) - 1)

/* The fake server stops answering -LOADING a little later. */
static void *done_loading(void *arg)
{
    usleep(100000);
    SAY((evil *)arg, "$2\r\nok\r\n");
    return NULL;
}

TEST(a_malicious_server_gets_clean_errors)
{
    evil ev = {.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    CHECK_EQ(bind(ev.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    CHECK_EQ(listen(ev.lfd, 16), 0);
    CHECK_EQ(getsockname(ev.lfd, (struct sockaddr *)&a, &al), 0);
    pthread_mutex_init(&ev.mu, NULL);
    CHECK_EQ(pthread_create(&ev.thread, NULL, evil_main, &ev), 0);
    weir__storage *st = open_store(ntohs(a.sin_port), "?timeout_ms=400");
    atomic_store(&biggest, 0);
    atomic_store(&watching, 1);
    uint8_t *b = NULL, buf[16];
    size_t n;
    weir__names names;

    /* Lengths past any bound: refused from the header, nothing allocated. */
    SAY(&ev, "$999999999999\r\n");
    CHECK_EQ(weir__storage_get(st, "x", SIZE_MAX, &b, &n), -EPROTO);
    SAY(&ev, "$4000000000\r\n");
    CHECK_EQ(weir__storage_get(st, "x", SIZE_MAX, &b, &n), -EPROTO);
    SAY(&ev, "$99999999999999999999999\r\n");
    CHECK_EQ(weir__storage_get(st, "x", SIZE_MAX, &b, &n), -EPROTO);
    SAY(&ev, "$-5\r\n");
    CHECK_EQ(weir__storage_get(st, "x", 10, &b, &n), -EPROTO);
    SAY(&ev, "*-5\r\n");
    CHECK_EQ(weir__storage_list(st, "", &names), -EPROTO);
    SAY(&ev, "*2\r\n$1\r\n0\r\n*999999999\r\n");
    CHECK_EQ(weir__storage_list(st, "", &names), -EPROTO);
    SAY(&ev, "*2\r\n$1\r\n0\r\n*1\r\n$999999999999\r\n");
    CHECK_EQ(weir__storage_list(st, "", &names), -EPROTO);
    SAY(&ev, "*2\r\n$3\r\nabc\r\n*0\r\n"); /* a cursor that is no number */
    CHECK_EQ(weir__storage_list(st, "", &names), -EPROTO);
    SAY(&ev, "*3\r\n$1\r\n0\r\n*0\r\n");
    CHECK_EQ(weir__storage_list(st, "", &names), -EPROTO);
    /* A range longer than asked for; the wrong type of reply. */
    SAY(&ev, ":1\r\n$50\r\n01234567890123456789012345678901234567890123456789\r\n");
    CHECK_EQ(weir__storage_range_now(st, "x", 0, 10, buf, &n), -EPROTO);
    SAY(&ev, ":1\r\n");
    CHECK_EQ(weir__storage_put(st, "x", "y", 1), -EPROTO);
    SAY(&ev, "+OK\r\n");
    CHECK_EQ(weir__storage_delete(st, "x"), -EPROTO);
    /* Garbage, an endless line, a bare newline, a bad terminator. */
    SAY(&ev, "hello world\r\n");
    CHECK_EQ(weir__storage_get(st, "x", 10, &b, &n), -EPROTO);
    static char endless[20000];
    memset(endless, '+', sizeof(endless));
    evil_say(&ev, endless, sizeof(endless));
    CHECK_EQ(weir__storage_put(st, "x", "y", 1), -EPROTO);
    SAY(&ev, "+OK\n");
    CHECK_EQ(weir__storage_put(st, "x", "y", 1), -EPROTO);
    SAY(&ev, "$2\r\nabXY");
    CHECK_EQ(weir__storage_get(st, "x", 10, &b, &n), -EPROTO);
    /* Errors the server answers are the command's: the connection stays. */
    SAY(&ev, "-ERR no\r\n");
    CHECK_EQ(weir__storage_get(st, "x", 10, &b, &n), -EIO);
    SAY(&ev, "-NOAUTH Authentication required.\r\n");
    CHECK_EQ(weir__storage_put(st, "x", "y", 1), -EACCES);
    /* A server loading its data answers -LOADING: asked again after a
     * pause until the call's timeout (400 ms), then -EAGAIN... */
    SAY(&ev, "-LOADING Redis is loading the dataset in memory\r\n");
    int64_t t_load = weir_time_now();
    CHECK_EQ(weir__storage_get(st, "x", 10, &b, &n), -EAGAIN);
    CHECK_GE(ms_since(t_load), 300);
    /* ...and a server done loading within it answers the call. */
    weir__storage *patient = open_store(ntohs(a.sin_port), "?timeout_ms=20000");
    pthread_t loader;
    CHECK_EQ(pthread_create(&loader, NULL, done_loading, &ev), 0);
    CHECK_EQ(weir__storage_get(patient, "x", 10, &b, &n), 0);
    CHECK(n == 2 && memcmp(b, "ok", 2) == 0);
    weir__free(b);
    b = NULL;
    CHECK_EQ(pthread_join(loader, NULL), 0);
    weir__storage_close(patient);
    /* Cut short: tried again once on a new connection, then the error. */
    int before = atomic_load(&ev.conns);
    evil_say_(&ev, "$5\r\nab", 6, 1);
    CHECK_EQ(weir__storage_get(st, "x", 10, &b, &n), -ECONNRESET);
    CHECK_GE(atomic_load(&ev.conns) - before, 1);
    /* Silence: the timeout, twice (the retry), then the error. */
    evil_say(&ev, NULL, 0);
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir__storage_get(st, "x", 10, &b, &n), -ETIMEDOUT);
    CHECK_LT(ms_since(t0), 3000);
    atomic_store(&watching, 0);
    printf("  the largest allocation meanwhile: %zu bytes\n", atomic_load(&biggest));
    CHECK_LT(atomic_load(&biggest), 1 << 20);
    /* And a sane answer still works. */
    SAY(&ev, "$3\r\nabc\r\n");
    CHECK_EQ(weir__storage_get(st, "x", 10, &b, &n), 0);
    CHECK_EQ(n, 3);
    CHECK(memcmp(b, "abc", 3) == 0);
    weir__free(b);
    weir__storage_close(st);
    shutdown(ev.lfd, SHUT_RDWR);
    pthread_join(ev.thread, NULL);
    close(ev.lfd);
    pthread_mutex_destroy(&ev.mu);
}

/* ---- the remote-read backend on a Redis pool ------------------------------------------------- */
#define GROUPS 4

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int group_of(const char *k, size_t kl)
{
    return weir_key_group(weir_key_hash(k, kl), GROUPS);
}

static void expect(weir_state_backend *model, weir_state_backend *b, const char *k)
{
    size_t kl = strlen(k);
    int kg = group_of(k, kl);
    const void *v, *mv;
    size_t vl, ml;
    int e = weir_state_get(b, kg, k, kl, &v, &vl);
    int me = weir_state_get(model, kg, k, kl, &mv, &ml);
    if (e != me)
        TEST__FAIL("get %s: %d, the model %d", k, e, me);
    if (!e && (vl != ml || (vl && memcmp(v, mv, vl) != 0)))
        TEST__FAIL("get %s: %zu bytes, the model's %zu", k, vl, ml);
}

static uint8_t *image_of(weir_state_backend *b, uint64_t id, size_t *len)
{
    weir_state_snapshot *s;
    const void *img;
    CHECK_EQ(weir_state_capture(b, id, &s), 0);
    CHECK_EQ(weir_state_snapshot_encode(s, &img, len), 0);
    uint8_t *p = weir__malloc(*len);
    memcpy(p, img, *len);
    weir_state_snapshot_free(s);
    return p;
}

TEST(the_remote_backend_on_a_redis_pool)
{
    server sv = {0};
    server_start(&sv);
    char uri[256];
    /* One query for both: the backend keeps its own options, the pool gets the rest. */
    snprintf(uri, sizeof(uri),
             "remote:redis://127.0.0.1:%d?prefix=job%%2F1/&hot_max_bytes=4096&io_threads=4",
             sv.port);
    weir_state_backend *b = NULL, *model = weir_state_memory_new(GROUPS, 0, GROUPS);
    CHECK_EQ(weir_state_backend_open(uri, GROUPS, 0, GROUPS, &b), 0);
    enum { KEYS = 300, STEPS = 4000 };
    uint8_t *saved = NULL, *saved_model = NULL;
    size_t slen = 0, smlen = 0;
    uint64_t ckpt = 0;
    int crashes = 0;
    uint8_t val[200];
    for (int step = 0; step < STEPS; step++) {
        char k[32];
        snprintf(k, sizeof(k), "k%d/%04d", (int)(rnd() % 3), (int)(rnd() % KEYS));
        size_t kl = strlen(k);
        int kg = group_of(k, kl);
        unsigned op = (unsigned)(rnd() % 100);
        if (op < 45) {
            size_t vl = rnd() % sizeof(val);
            for (size_t j = 0; j < vl; j++)
                val[j] = (uint8_t)(step + j);
            CHECK_EQ(weir_state_put(b, kg, k, kl, val, vl), 0);
            CHECK_EQ(weir_state_put(model, kg, k, kl, val, vl), 0);
        } else if (op < 52) {
            int me = weir_state_delete(model, kg, k, kl);
            int e = weir_state_delete(b, kg, k, kl);
            if (e != me && !(e == 0 && me == -ENOENT))
                TEST__FAIL("delete %s: %d, the model %d", k, e, me);
        } else if (op < 90) {
            expect(model, b, k);
        } else if (op < 97) {
            weir__free(saved);
            weir__free(saved_model);
            saved = image_of(b, ++ckpt, &slen);
            saved_model = image_of(model, ckpt, &smlen);
        } else if (saved) { /* a crash: back to the last checkpoint, lazily */
            crashes++;
            weir_state_backend_free(b);
            weir_state_backend_free(model);
            CHECK_EQ(weir_state_backend_open(uri, GROUPS, 0, GROUPS, &b), 0);
            model = weir_state_memory_new(GROUPS, 0, GROUPS);
            char why[256] = "";
            CHECK_EQ(weir_state_restore_image(b, saved, slen, why, sizeof(why)), 0);
            CHECK_EQ(weir_state_restore_image(model, saved_model, smlen, why, sizeof(why)), 0);
        }
    }
    for (int i = 0; i < KEYS; i++)
        for (int p = 0; p < 3; p++) {
            char k[32];
            snprintf(k, sizeof(k), "k%d/%04d", p, i);
            expect(model, b, k);
        }
    CHECK_GT(ckpt, 0);
    CHECK_GT(crashes, 0);
    weir_state_backend_free(b);
    weir_state_backend_free(model);
    /* The runs are in Redis, under the prefix, and nowhere else. */
    weir__storage *pool = open_store(sv.port, "?prefix=job%2F1/");
    weir__names names;
    CHECK_EQ(weir__storage_list(pool, "", &names), 0);
    CHECK_GT(names.n, 0);
    printf("  %" PRIu64 " checkpoints, %d crashes; the pool holds %zu names, the first \"%s\"\n",
           ckpt, crashes, names.n, names.v[0]);
    weir__names_free(&names);
    weir__storage_close(pool);
    weir__storage *all = open_store(sv.port, "");
    CHECK_EQ(weir__storage_list(all, "", &names), 0);
    CHECK_EQ(names.n, 1);
    CHECK_STR(names.v[0], "job/");
    weir__names_free(&names);
    weir__storage_close(all);
    weir__free(saved);
    weir__free(saved_model);
    server_stop(&sv);
}

TEST_MAIN()
