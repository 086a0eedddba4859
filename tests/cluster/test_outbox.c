/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_outbox.c - a worker session's outbox (src/cluster/outbox.h) on
 * socketpairs: frames arrive in the order posted, large ones in chunks;
 * posting never waits on a peer that does not read; the class bounds
 * refuse with -ENOBUFS and give the overflow verdict (a bound of 0 refuses
 * everything, deploys are counted apart from control frames); a peer that
 * stops reading gives the stall verdict (an injected clock, and a short
 * stall_ms on the real clock), one that reads slowly but steadily, or has
 * read everything, never does; a peer that went away gives "write
 * failed"; abort discards, shuts the socket down and ends the writer; free
 * with frames queued while other threads post; every allocation failure
 * over new and post.
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/alloc.h"
#include "cluster/outbox.h"
#include "test.h"
#include "test_rt.h"
#include "weir/io.h"
#include "weir/rt.h"
#include "weir/sync.h"

static void pair(int sv[2])
{
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static void close_pair(int sv[2])
{
    weir_io_close(sv[0]);
    weir_io_close(sv[1]);
}

/* Frame i: len bytes, each (i * 31 + k) & 0xff. */
static unsigned char *make_frame(unsigned i, size_t len)
{
    unsigned char *p = malloc(len);
    CHECK(p != NULL);
    for (size_t k = 0; k < len; k++)
        p[k] = (unsigned char)((i * 31u + k) & 0xffu);
    return p;
}

static size_t frame_len(unsigned i)
{
    /* small, medium, and some past the 64 KiB chunk */
    return (i % 7 == 3) ? (200u << 10) + i : 16u + (i * 97u) % 5000u;
}

static weir__outbox_stats stats(weir__outbox *ob)
{
    weir__outbox_stats s;
    weir__outbox_stats_get(ob, &s);
    return s;
}

/* Wait (polling every 2 ms, 20 s at most) until pred(ob) holds. */
static void wait_for(weir__outbox *ob, int (*pred)(weir__outbox *), const char *what)
{
    int64_t deadline = weir_time_after_ms(20000);
    while (!pred(ob)) {
        if (weir_time_now() > deadline)
            TEST__FAIL("timed out waiting for %s", what);
        CHECK_EQ(weir_time_sleep(2 * WEIR_MSEC), 0);
    }
}

static int writer_done(weir__outbox *ob)
{
    return stats(ob).writer_done;
}

static int some_written(weir__outbox *ob)
{
    return stats(ob).bytes_written > 0;
}

static int nothing_pending(weir__outbox *ob)
{
    return stats(ob).frames_pending == 0;
}

/* ---- order ------------------------------------------------------------------------------ */
enum { ORDER_N = 60 };

struct reader {
    int fd;
    unsigned n;
    int ok;
};

static intptr_t read_frames(void *arg)
{
    struct reader *r = arg;
    for (unsigned i = 0; i < r->n; i++) {
        size_t len = frame_len(i);
        unsigned char *want = make_frame(i, len), *got = malloc(len);
        CHECK(got != NULL);
        size_t off = 0;
        while (off < len) {
            ssize_t n = weir_io_read(r->fd, got + off, len - off, weir_time_after_ms(20000));
            CHECK_GT(n, 0);
            off += (size_t)n;
        }
        CHECK(memcmp(want, got, len) == 0);
        free(want);
        free(got);
    }
    r->ok = 1;
    return 0;
}

static intptr_t order_main(void *arg)
{
    (void)arg;
    int sv[2];
    pair(sv);
    weir__outbox *ob = weir__outbox_new(sv[0], NULL, NULL);
    CHECK(ob != NULL);
    struct reader r = {.fd = sv[1], .n = ORDER_N};
    weir_task *t = test_spawn(read_frames, &r);
    uint64_t bytes = 0;
    for (unsigned i = 0; i < ORDER_N; i++) {
        size_t len = frame_len(i);
        unsigned char *f = make_frame(i, len);
        CHECK_EQ(
            weir__outbox_post(ob, f, len, i % 5 == 0 ? WEIR__OUTBOX_DEPLOY : WEIR__OUTBOX_CONTROL),
            0);
        free(f); /* the outbox holds its own copy */
        bytes += len;
        if (i % 9 == 0)
            CHECK_EQ(weir_time_sleep(0), 0);
    }
    intptr_t v = -1;
    CHECK_EQ(weir_task_join(t, &v, WEIR_FOREVER), 0);
    CHECK(r.ok);
    wait_for(ob, nothing_pending, "every frame written");
    weir__outbox_stats s = stats(ob);
    CHECK_EQ(s.frames_posted, (uint64_t)ORDER_N);
    CHECK_EQ(s.frames_written, (uint64_t)ORDER_N);
    CHECK_EQ(s.bytes_posted, bytes);
    CHECK_EQ(s.bytes_written, bytes);
    CHECK_EQ(s.frames_discarded, 0u);
    /* nothing pending: never a stall, however late the check */
    CHECK_EQ(weir__outbox_check(ob, weir_time_now() + 3600 * WEIR_SEC), WEIR__OUTBOX_OK);
    weir__outbox_free(ob);
    close_pair(sv);
    return 0;
}

TEST(order_preserved)
{
    CHECK_EQ(test_run_main(order_main, NULL), 0);
}

/* ---- posting never waits ----------------------------------------------------------------- */
static intptr_t nowait_main(void *arg)
{
    (void)arg;
    int sv[2];
    pair(sv);
    weir__outbox *ob = weir__outbox_new(sv[0], NULL, NULL);
    CHECK(ob != NULL);
    size_t len = 256u << 10;
    unsigned char *f = make_frame(1, len);
    /* let the writer fill the socket buffer with a first frame */
    CHECK_EQ(weir__outbox_post(ob, f, len, WEIR__OUTBOX_DEPLOY), 0);
    wait_for(ob, some_written, "the writer to start");
    /* 32 MiB more: far past any socket buffer; each post returns at once
     * (the peer never reads, so a post that waited would never return) */
    int64_t t0 = weir_time_now();
    for (int i = 0; i < 128; i++)
        CHECK_EQ(weir__outbox_post(ob, f, len, WEIR__OUTBOX_DEPLOY), 0);
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(weir__outbox_post(ob, f, 100, WEIR__OUTBOX_CONTROL), 0);
    CHECK_LT(weir_time_now() - t0, 5 * WEIR_SEC);
    weir__outbox_stats s = stats(ob);
    CHECK_EQ(s.frames_posted, 1129u);
    CHECK_GT(s.frames_pending, 0u);
    CHECK_LT(s.bytes_written, s.bytes_posted);
    free(f);
    /* freed with frames queued: nothing leaks (ASan), the writer is joined */
    weir__outbox_free(ob);
    close_pair(sv);
    return 0;
}

TEST(post_never_waits_on_a_peer_that_does_not_read)
{
    CHECK_EQ(test_run_main(nowait_main, NULL), 0);
}

/* ---- bounds ------------------------------------------------------------------------------ */
/* The posts below run without yielding on a one-loop runtime, so the
 * writer takes nothing off the queue in between: the bounds are exact. */
static intptr_t bounds_main(void *arg)
{
    (void)arg;
    unsigned char f[600];
    memset(f, 7, sizeof f);
    char text[WEIR__OUTBOX_VERDICT_MAX];
    weir__outbox_limits lim = weir__outbox_limits_default();
    lim.max_control_frames = 3;
    lim.max_control_bytes = 1000;
    lim.max_deploy_bytes = 1500;

    /* the frame count */
    int sv[2];
    pair(sv);
    weir__outbox *ob = weir__outbox_new(sv[0], NULL, &lim);
    CHECK(ob != NULL);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(weir__outbox_post(ob, f, 10, WEIR__OUTBOX_CONTROL), 0);
    /* deploys are counted apart */
    CHECK_EQ(weir__outbox_post(ob, f, 600, WEIR__OUTBOX_DEPLOY), 0);
    CHECK_EQ(weir__outbox_verdict(ob, NULL, 0), WEIR__OUTBOX_OK);
    CHECK_EQ(weir__outbox_post(ob, f, 10, WEIR__OUTBOX_CONTROL), -ENOBUFS);
    CHECK_EQ(weir__outbox_verdict(ob, text, sizeof text), WEIR__OUTBOX_OVERFLOW);
    CHECK(strstr(text, "overflow") && strstr(text, "3 control frames"));
    weir__outbox_stats s = stats(ob);
    CHECK(s.stopped);
    CHECK_EQ(s.frames_posted, 4u);
    CHECK_EQ(s.frames_discarded, 4u); /* the writer had not started one */
    /* stopped: refused, the verdict stays */
    CHECK_EQ(weir__outbox_post(ob, f, 10, WEIR__OUTBOX_CONTROL), -EPIPE);
    CHECK_EQ(weir__outbox_check(ob, weir_time_now() + 3600 * WEIR_SEC), WEIR__OUTBOX_OVERFLOW);
    wait_for(ob, writer_done, "the writer to end");
    /* the socket was shut down: the peer meets the end of the stream */
    char c;
    CHECK_EQ(weir_io_read(sv[1], &c, 1, weir_time_after_ms(20000)), 0);
    weir__outbox_free(ob);
    close_pair(sv);

    /* the control bytes */
    pair(sv);
    CHECK((ob = weir__outbox_new(sv[0], NULL, &lim)) != NULL);
    CHECK_EQ(weir__outbox_post(ob, f, 600, WEIR__OUTBOX_CONTROL), 0);
    CHECK_EQ(weir__outbox_post(ob, f, 400, WEIR__OUTBOX_CONTROL), 0); /* exactly 1000 */
    CHECK_EQ(weir__outbox_post(ob, f, 1, WEIR__OUTBOX_CONTROL), -ENOBUFS);
    CHECK_EQ(weir__outbox_verdict(ob, text, sizeof text), WEIR__OUTBOX_OVERFLOW);
    CHECK(strstr(text, "1000 control bytes"));
    weir__outbox_free(ob);
    close_pair(sv);

    /* the deploy bytes, a single frame past the bound included */
    pair(sv);
    CHECK((ob = weir__outbox_new(sv[0], NULL, &lim)) != NULL);
    CHECK_EQ(weir__outbox_post(ob, f, 600, WEIR__OUTBOX_DEPLOY), 0);
    CHECK_EQ(weir__outbox_post(ob, f, 600, WEIR__OUTBOX_DEPLOY), 0);
    CHECK_EQ(weir__outbox_post(ob, f, 301, WEIR__OUTBOX_DEPLOY), -ENOBUFS);
    CHECK_EQ(weir__outbox_verdict(ob, text, sizeof text), WEIR__OUTBOX_OVERFLOW);
    CHECK(strstr(text, "1500 deploy bytes"));
    weir__outbox_free(ob);
    close_pair(sv);

    /* a bound of 0 refuses every frame of its class; bad arguments */
    lim.max_deploy_bytes = 0;
    pair(sv);
    CHECK((ob = weir__outbox_new(sv[0], NULL, &lim)) != NULL);
    CHECK_EQ(weir__outbox_post(ob, f, 0, WEIR__OUTBOX_CONTROL), -EINVAL);
    CHECK_EQ(weir__outbox_post(ob, f, 1, 7), -EINVAL);
    CHECK_EQ(weir__outbox_post(ob, NULL, 1, WEIR__OUTBOX_CONTROL), -EINVAL);
    CHECK_EQ(weir__outbox_post(ob, f, 1, WEIR__OUTBOX_CONTROL), 0);
    CHECK_EQ(weir__outbox_post(ob, f, 1, WEIR__OUTBOX_DEPLOY), -ENOBUFS);
    CHECK_EQ(weir__outbox_verdict(ob, NULL, 0), WEIR__OUTBOX_OVERFLOW);
    weir__outbox_free(ob);
    close_pair(sv);

    errno = 0;
    CHECK(weir__outbox_new(-1, NULL, NULL) == NULL);
    CHECK_EQ(errno, EINVAL);
    return 0;
}

TEST(bounds_refuse_with_enobufs_and_the_overflow_verdict)
{
    CHECK_EQ(test_run_main(bounds_main, NULL), 0);
}

/* ---- stall ------------------------------------------------------------------------------- */
static _Atomic int64_t fake_now;

static int64_t fake_clock(void *arg)
{
    (void)arg;
    return atomic_load(&fake_now);
}

static intptr_t stall_fake_main(void *arg)
{
    (void)arg;
    int sv[2];
    pair(sv);
    atomic_store(&fake_now, 1000 * WEIR_SEC);
    weir__outbox_limits lim = weir__outbox_limits_default();
    lim.clock = fake_clock;
    weir__outbox *ob = weir__outbox_new(sv[0], NULL, &lim);
    CHECK(ob != NULL);
    /* nothing pending: no verdict */
    CHECK_EQ(weir__outbox_check(ob, 2000 * WEIR_SEC), WEIR__OUTBOX_OK);
    size_t len = 8u << 20;
    unsigned char *f = make_frame(2, len);
    CHECK_EQ(weir__outbox_post(ob, f, len, WEIR__OUTBOX_DEPLOY), 0);
    free(f);
    wait_for(ob, some_written, "the writer to start");
    /* the peer reads nothing: the progress stamps stay at the fake now */
    int64_t t = 1000 * WEIR_SEC;
    CHECK_EQ(weir__outbox_check(ob, t + 9999 * WEIR_MSEC), WEIR__OUTBOX_OK);
    CHECK_EQ(weir__outbox_check(ob, t + 10000 * WEIR_MSEC), WEIR__OUTBOX_STALLED);
    char text[WEIR__OUTBOX_VERDICT_MAX];
    CHECK_EQ(weir__outbox_verdict(ob, text, sizeof text), WEIR__OUTBOX_STALLED);
    CHECK(strstr(text, "no outbound progress for 10000 ms with 1 frames pending") != NULL);
    /* the verdict does not stop the outbox: the node aborts it */
    CHECK(!stats(ob).stopped);
    weir__outbox_abort(ob);
    wait_for(ob, writer_done, "the writer to end");
    CHECK_EQ(stats(ob).frames_discarded, 1u);
    CHECK_EQ(weir__outbox_verdict(ob, NULL, 0), WEIR__OUTBOX_STALLED);
    weir__outbox_free(ob);
    close_pair(sv);
    return 0;
}

TEST(stall_verdict_on_an_injected_clock)
{
    CHECK_EQ(test_run_main(stall_fake_main, NULL), 0);
}

static int stalled(weir__outbox *ob)
{
    return weir__outbox_check(ob, weir_time_now()) == WEIR__OUTBOX_STALLED;
}

static intptr_t stall_real_main(void *arg)
{
    (void)arg;
    int sv[2];
    pair(sv);
    weir__outbox_limits lim = weir__outbox_limits_default();
    lim.stall_ms = 50;
    weir__outbox *ob = weir__outbox_new(sv[0], NULL, &lim);
    CHECK(ob != NULL);
    size_t len = 8u << 20;
    unsigned char *f = make_frame(3, len);
    CHECK_EQ(weir__outbox_post(ob, f, len, WEIR__OUTBOX_DEPLOY), 0);
    CHECK_EQ(weir__outbox_post(ob, f, 10, WEIR__OUTBOX_CONTROL), 0);
    free(f);
    wait_for(ob, stalled, "the stall verdict");
    weir__outbox_stats s = stats(ob);
    CHECK_EQ(s.frames_pending, 2u);
    CHECK_GT(s.bytes_written, 0u);
    CHECK_LT(s.bytes_written, (uint64_t)len);
    weir__outbox_free(ob);
    close_pair(sv);
    return 0;
}

TEST(stall_verdict_when_the_peer_stops_reading)
{
    CHECK_EQ(test_run_main(stall_real_main, NULL), 0);
}

/* A peer that reads slowly but steadily is never stalled, however long the
 * whole frame takes: progress is each chunk the socket takes. */
struct slow {
    int fd;
    size_t len;
    atomic_int done;
};

static intptr_t slow_reader(void *arg)
{
    struct slow *r = arg;
    static unsigned char buf[16 << 10];
    size_t got = 0;
    while (got < r->len) {
        ssize_t n = weir_io_read(r->fd, buf, sizeof buf, weir_time_after_ms(20000));
        CHECK_GT(n, 0);
        got += (size_t)n;
        CHECK_EQ(weir_time_sleep(4 * WEIR_MSEC), 0);
    }
    atomic_store(&r->done, 1);
    return 0;
}

static intptr_t slow_main(void *arg)
{
    (void)arg;
    int sv[2];
    pair(sv);
    weir__outbox_limits lim = weir__outbox_limits_default();
    lim.stall_ms = 2000; /* a margin for a starved machine: reads come every ~4 ms */
    weir__outbox *ob = weir__outbox_new(sv[0], NULL, &lim);
    CHECK(ob != NULL);
    struct slow r = {.fd = sv[1], .len = 16u << 20};
    unsigned char *f = make_frame(5, r.len);
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir__outbox_post(ob, f, r.len, WEIR__OUTBOX_DEPLOY), 0);
    free(f);
    weir_task *t = test_spawn(slow_reader, &r);
    while (!atomic_load(&r.done)) {
        CHECK_EQ(weir__outbox_check(ob, weir_time_now()), WEIR__OUTBOX_OK);
        CHECK_EQ(weir_time_sleep(10 * WEIR_MSEC), 0);
    }
    /* 1024 reads of 16 KiB, each followed by 4 ms: over 4 s, past stall_ms */
    CHECK_GT(weir_time_now() - t0, lim.stall_ms * WEIR_MSEC);
    intptr_t v;
    CHECK_EQ(weir_task_join(t, &v, WEIR_FOREVER), 0);
    wait_for(ob, nothing_pending, "the frame written");
    CHECK_EQ(weir__outbox_check(ob, weir_time_now()), WEIR__OUTBOX_OK);
    weir__outbox_free(ob);
    close_pair(sv);
    return 0;
}

TEST(a_slow_but_steady_peer_is_never_stalled)
{
    CHECK_EQ(test_run_main(slow_main, NULL), 0);
}

/* ---- write failure ------------------------------------------------------------------------ */
static int failed(weir__outbox *ob)
{
    return weir__outbox_verdict(ob, NULL, 0) == WEIR__OUTBOX_WRITE_FAILED;
}

static intptr_t write_fail_main(void *arg)
{
    (void)arg;
    int sv[2];
    pair(sv);
    weir__outbox *ob = weir__outbox_new(sv[0], NULL, NULL);
    CHECK(ob != NULL);
    weir_io_close(sv[1]); /* the peer went away */
    unsigned char f[64] = {1};
    CHECK_EQ(weir__outbox_post(ob, f, sizeof f, WEIR__OUTBOX_CONTROL), 0);
    wait_for(ob, failed, "the write failed verdict");
    char text[WEIR__OUTBOX_VERDICT_MAX];
    weir__outbox_verdict(ob, text, sizeof text);
    CHECK(strncmp(text, "write failed: ", 14) == 0);
    wait_for(ob, writer_done, "the writer to end");
    weir__outbox_stats s = stats(ob);
    CHECK(s.stopped);
    CHECK_EQ(s.frames_discarded, 1u);
    CHECK_EQ(weir__outbox_post(ob, f, sizeof f, WEIR__OUTBOX_CONTROL), -EPIPE);
    weir__outbox_free(ob);
    weir_io_close(sv[0]);
    return 0;
}

TEST(write_error_is_a_verdict)
{
    CHECK_EQ(test_run_main(write_fail_main, NULL), 0);
}

/* ---- abort -------------------------------------------------------------------------------- */
static intptr_t abort_main(void *arg)
{
    (void)arg;
    int sv[2];
    pair(sv);
    weir__outbox *ob = weir__outbox_new(sv[0], NULL, NULL);
    CHECK(ob != NULL);
    size_t len = 1u << 20;
    unsigned char *f = make_frame(4, len);
    for (int i = 0; i < 6; i++)
        CHECK_EQ(weir__outbox_post(ob, f, len, WEIR__OUTBOX_DEPLOY), 0);
    free(f);
    wait_for(ob, some_written, "the writer to start");
    weir__outbox_abort(ob);
    wait_for(ob, writer_done, "the writer to end");
    weir__outbox_stats s = stats(ob);
    CHECK(s.stopped);
    CHECK_EQ(s.frames_pending, 0u);
    CHECK_EQ(s.frames_written + s.frames_discarded, 6u);
    CHECK_GT(s.frames_discarded, 0u);
    CHECK_EQ(weir__outbox_verdict(ob, NULL, 0), WEIR__OUTBOX_OK); /* an abort is no verdict */
    unsigned char c = 0;
    CHECK_EQ(weir__outbox_post(ob, &c, 1, WEIR__OUTBOX_CONTROL), -EPIPE);
    /* the peer reads what reached it, then the end of the stream */
    static unsigned char buf[64 << 10];
    uint64_t got = 0;
    for (;;) {
        ssize_t n = weir_io_read(sv[1], buf, sizeof buf, weir_time_after_ms(20000));
        CHECK_GE(n, 0);
        if (n == 0)
            break;
        got += (uint64_t)n;
    }
    CHECK_EQ(got, s.bytes_written);
    weir__outbox_abort(ob); /* twice is harmless */
    weir__outbox_free(ob);
    close_pair(sv);
    return 0;
}

TEST(abort_discards_and_ends_the_writer)
{
    CHECK_EQ(test_run_main(abort_main, NULL), 0);
}

/* ---- free with frames queued, posters on other threads ------------------------------------ */
struct poster {
    weir__outbox *ob;
    atomic_int posted;
};

static intptr_t poster_fn(void *arg)
{
    struct poster *p = arg;
    unsigned char f[3000];
    memset(f, 5, sizeof f);
    for (int i = 0; i < 4000; i++) {
        int rc = weir__outbox_post(p->ob, f, 100 + (size_t)i % 2900, WEIR__OUTBOX_CONTROL);
        if (rc == -EPIPE)
            break;
        CHECK_EQ(rc, 0);
        atomic_fetch_add(&p->posted, 1);
        if (i % 64 == 0)
            weir_time_sleep(0);
    }
    return 0;
}

static intptr_t drain_some(void *arg)
{
    int fd = *(int *)arg;
    static unsigned char buf[16 << 10];
    for (int i = 0; i < 40; i++)
        if (weir_io_read(fd, buf, sizeof buf, weir_time_after_ms(20000)) <= 0)
            break;
    return 0;
}

static intptr_t free_mt_main(void *arg)
{
    (void)arg;
    for (int round = 0; round < 5; round++) {
        int sv[2];
        pair(sv);
        weir__outbox *ob = weir__outbox_new(sv[0], NULL, NULL);
        CHECK(ob != NULL);
        struct poster p = {.ob = ob};
        weir_task *a = test_spawn(poster_fn, &p), *b = test_spawn(poster_fn, &p);
        weir_task *d = test_spawn(drain_some, &sv[1]);
        while (atomic_load(&p.posted) < 500)
            CHECK_EQ(weir_time_sleep(WEIR_MSEC), 0);
        weir__outbox_abort(ob); /* the posters meet -EPIPE */
        intptr_t v;
        CHECK_EQ(weir_task_join(a, &v, WEIR_FOREVER), 0);
        CHECK_EQ(weir_task_join(b, &v, WEIR_FOREVER), 0);
        CHECK_EQ(weir_task_join(d, &v, WEIR_FOREVER), 0);
        weir__outbox_stats s = stats(ob);
        CHECK_EQ(s.frames_posted, (uint64_t)atomic_load(&p.posted));
        weir__outbox_free(ob);
        close_pair(sv);

        /* freed straight away, frames queued and posters still running */
        pair(sv);
        CHECK((ob = weir__outbox_new(sv[0], NULL, NULL)) != NULL);
        struct poster q = {.ob = ob};
        for (int i = 0; i < 200; i++)
            CHECK_EQ(weir__outbox_post(ob, &q, sizeof q, WEIR__OUTBOX_CONTROL), 0);
        weir__outbox_free(ob);
        close_pair(sv);
    }
    return 0;
}

TEST(free_with_frames_queued_on_a_multi_threaded_runtime)
{
    CHECK_EQ(test_run_on_rt(2, free_mt_main, NULL), 0);
}

/* ---- allocation failures ------------------------------------------------------------------ */
static intptr_t alloc_main(void *arg)
{
    (void)arg;
    unsigned char f[100] = {9};
    int done = 0, new_failures = 0, post_failures = 0;
    for (long n = 0; !done && n < 1000; n++) {
        int sv[2];
        pair(sv);
        weir__alloc_fail_after(n);
        errno = 0;
        weir__outbox *ob = weir__outbox_new(sv[0], NULL, NULL);
        if (!ob) {
            weir__alloc_fail_after(-1);
            CHECK_EQ(errno, ENOMEM);
            new_failures++;
            close_pair(sv);
            continue;
        }
        int rc = weir__outbox_post(ob, f, sizeof f, WEIR__OUTBOX_CONTROL);
        weir__alloc_fail_after(-1);
        if (rc == 0) {
            done = 1;
            wait_for(ob, nothing_pending, "the frame written");
        } else {
            CHECK_EQ(rc, -ENOMEM);
            post_failures++;
            char text[WEIR__OUTBOX_VERDICT_MAX];
            CHECK_EQ(weir__outbox_verdict(ob, text, sizeof text), WEIR__OUTBOX_ALLOC);
            CHECK(strstr(text, "allocation") != NULL);
            CHECK(stats(ob).stopped);
            CHECK_EQ(weir__outbox_post(ob, f, sizeof f, WEIR__OUTBOX_CONTROL), -EPIPE);
        }
        weir__outbox_free(ob);
        close_pair(sv);
    }
    CHECK(done);
    CHECK_GE(new_failures, 1);  /* the outbox (sync objects use calloc) */
    CHECK_EQ(post_failures, 1); /* a post allocates once: the copy */
    return 0;
}

TEST(allocation_failures_over_new_and_post)
{
    CHECK_EQ(test_run_main(alloc_main, NULL), 0);
}

TEST_MAIN()
