/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_timer.c - sleep, deadlines, intervals, callback timers, and one
 * million concurrent timers held by stackless tasks.
 */
#include <errno.h>
#include <stdlib.h>

#include "test.h"
#include "weir/rt.h"

static weir_loop *L;
static weir_spawn_opts on_loop(const char *name)
{
    return (weir_spawn_opts){.name = name, .loop = L};
}

static intptr_t sleeper(void *arg)
{
    int64_t ns = (intptr_t)arg;
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_time_sleep(ns), 0);
    CHECK_GE(weir_time_now() - t0, ns); /* never early */
    return 0;
}

TEST(sleep_never_early)
{
    L = weir_loop_new(NULL);
    int64_t durations[] = {0, 1000, 500 * 1000, WEIR_MSEC, 3 * WEIR_MSEC, 20 * WEIR_MSEC};
    weir_task *t[6];
    for (int i = 0; i < 6; i++) {
        weir_spawn_opts o = on_loop("sleeper");
        t[i] = weir_task_spawn(sleeper, (void *)(intptr_t)durations[i], &o);
    }
    CHECK_EQ(weir_loop_run(L), 0);
    for (int i = 0; i < 6; i++)
        CHECK_EQ(weir_task_join(t[i], NULL, WEIR_FOREVER), 0);
    weir_loop_free(L);
}

/* Timers fire in deadline order: fibers spawned in shuffled order with
 * distinct deadlines wake up sorted. */
static int woke[64], nwoke;
static int64_t base;
static intptr_t order_sleeper(void *arg)
{
    int k = (int)(intptr_t)arg;
    CHECK_EQ(weir_time_sleep_until(base + (int64_t)(k + 1) * 2 * WEIR_MSEC), 0);
    woke[nwoke++] = k;
    return 0;
}

TEST(timers_fire_in_deadline_order)
{
    L = weir_loop_new(NULL);
    int ks[40];
    for (int i = 0; i < 40; i++)
        ks[i] = i;
    srand(7);
    for (int i = 39; i > 0; i--) {
        int j = rand() % (i + 1), tmp = ks[i];
        ks[i] = ks[j];
        ks[j] = tmp;
    }
    nwoke = 0;
    base = weir_time_now() + 5 * WEIR_MSEC;
    for (int i = 0; i < 40; i++) {
        weir_spawn_opts o = on_loop("order");
        weir_task_detach(weir_task_spawn(order_sleeper, (void *)(intptr_t)ks[i], &o));
    }
    CHECK_EQ(weir_loop_run(L), 0);
    CHECK_EQ(nwoke, 40);
    for (int i = 0; i < 40; i++)
        CHECK_EQ(woke[i], i);
    weir_loop_free(L);
}

/* Deadlines on suspensions: the task deadline caps a sleep and a join. */
static intptr_t long_job(void *arg)
{
    (void)arg;
    weir_time_sleep(50 * WEIR_MSEC);
    return 11;
}

static intptr_t deadline_user(void *arg)
{
    (void)arg;
    int64_t t0 = weir_time_now();
    int64_t old = weir_task_set_deadline(t0 + 5 * WEIR_MSEC);
    CHECK_EQ(old, WEIR_FOREVER);
    CHECK_EQ(weir_time_sleep(60 * WEIR_SEC), -ETIMEDOUT);
    int64_t took = weir_time_now() - t0;
    CHECK_GE(took, 5 * WEIR_MSEC);
    CHECK_LT(took, 30 * WEIR_SEC); /* the deadline ended it, not the 60 s sleep */
    /* Past the deadline every suspension fails at once. */
    CHECK_EQ(weir_time_sleep(WEIR_MSEC), -ETIMEDOUT);
    weir_task_set_deadline(WEIR_FOREVER);
    /* A sleep shorter than the deadline completes normally. */
    weir_task_set_deadline(weir_time_now() + WEIR_SEC);
    CHECK_EQ(weir_time_sleep(WEIR_MSEC), 0);
    weir_task_set_deadline(WEIR_FOREVER);
    /* Join with a deadline: the joiner times out, the handle survives. */
    weir_task *j = weir_task_spawn(long_job, NULL, NULL);
    CHECK_EQ(weir_task_join(j, NULL, weir_time_after_ms(5)), -ETIMEDOUT);
    intptr_t r;
    CHECK_EQ(weir_task_join(j, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, 11);
    /* Sleeping until a past instant returns at once with success. */
    CHECK_EQ(weir_time_sleep_until(weir_time_now() - WEIR_SEC), 0);
    return 0;
}

TEST(deadlines_on_suspensions)
{
    L = weir_loop_new(NULL);
    weir_spawn_opts o = on_loop("deadline");
    weir_task *t = weir_task_spawn(deadline_user, NULL, &o);
    CHECK_EQ(weir_loop_run(L), 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    weir_loop_free(L);
}

/* Intervals: regular ticks; a late waiter skips missed ticks; cancel. */
static intptr_t interval_user(void *arg)
{
    (void)arg;
    weir_interval *iv = weir_interval_new(5 * WEIR_MSEC);
    CHECK(iv != NULL);
    int64_t t0 = weir_time_now(), ticks = 0;
    /* Each wait reports at least one tick (more only when this thread was
     * held up past a period, as on a loaded machine). */
    for (int i = 0; i < 4; i++) {
        int64_t got = weir_interval_next(iv);
        CHECK_GE(got, 1);
        ticks += got;
    }
    CHECK_GE(ticks, 4);
    CHECK_GE(weir_time_now() - t0, 20 * WEIR_MSEC);
    /* Be late by ~3.5 periods: one call reports the missed ticks. */
    int64_t spin_until = weir_time_now() + 17 * WEIR_MSEC;
    while (weir_time_now() < spin_until)
        ;
    int64_t n = weir_interval_next(iv);
    CHECK_GE(n, 3);
    CHECK_LE(n, 12);
    weir_interval_cancel(iv);
    CHECK_EQ(weir_interval_next(iv), -ECANCELED);
    weir_interval_free(iv);
    CHECK(weir_interval_new(0) == NULL);
    return 0;
}

TEST(interval_ticks_skip_and_cancel)
{
    L = weir_loop_new(NULL);
    weir_spawn_opts o = on_loop("interval");
    weir_task *t = weir_task_spawn(interval_user, NULL, &o);
    CHECK_EQ(weir_loop_run(L), 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    weir_loop_free(L);
}

/* An interval waiter cancelled from another task. */
static weir_interval *shared_iv;
static intptr_t interval_waiter(void *arg)
{
    (void)arg;
    return (intptr_t)weir_interval_next(shared_iv);
}

static intptr_t interval_canceller(void *arg)
{
    (void)arg;
    weir_time_sleep(2 * WEIR_MSEC);
    weir_interval_cancel(shared_iv);
    return 0;
}

TEST(interval_cancel_wakes_waiter)
{
    L = weir_loop_new(NULL);
    shared_iv = weir_interval_new(WEIR_SEC);
    weir_spawn_opts o = on_loop("iv");
    weir_task *w = weir_task_spawn(interval_waiter, NULL, &o);
    weir_task_detach(weir_task_spawn(interval_canceller, NULL, &o));
    CHECK_EQ(weir_loop_run(L), 0);
    intptr_t r;
    CHECK_EQ(weir_task_join(w, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, -ECANCELED);
    weir_interval_free(shared_iv);
    weir_loop_free(L);
}

/* Callback timers: setTimeout / setInterval / cancel. */
static int fired_once, fired_iv, inside_start;
static weir_timer *iv_timer;
static void once_cb(void *arg)
{
    CHECK(!inside_start);
    CHECK_EQ(weir_loop_poll(weir_loop_current(), 0), -EPERM); /* no re-entry */
    fired_once += (int)(intptr_t)arg;
}
static void iv_cb(void *arg)
{
    (void)arg;
    if (++fired_iv == 3)
        weir_timer_cancel(iv_timer); /* cancelling from its own callback */
}
static void never_cb(void *arg)
{
    (void)arg;
    CHECK(!"cancelled timer fired");
}

static intptr_t timer_user(void *arg)
{
    (void)arg;
    inside_start = 1;
    CHECK(weir_timer_start(0, 0, once_cb, (void *)5) != NULL); /* due now, not run inside */
    inside_start = 0;
    iv_timer = weir_timer_start(WEIR_MSEC, 2 * WEIR_MSEC, iv_cb, NULL);
    weir_timer *never = weir_timer_start(3 * WEIR_MSEC, 0, never_cb, NULL);
    weir_timer_cancel(never);
    CHECK(weir_timer_start(-1, 0, once_cb, NULL) == NULL);
    weir_time_sleep(30 * WEIR_MSEC);
    CHECK_EQ(fired_once, 5);
    CHECK_EQ(fired_iv, 3);
    return 0;
}

TEST(callback_timers)
{
    L = weir_loop_new(NULL);
    weir_spawn_opts o = on_loop("timers");
    weir_task *t = weir_task_spawn(timer_user, NULL, &o);
    CHECK_EQ(weir_loop_run(L), 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    weir_loop_free(L);
}

/* One million concurrent timers, each held by a stackless task. */
struct tframe {
    weir_co co;
    weir_op op;
    int64_t due;
    int64_t res;
};
static int64_t fired_late_max, fired_count;

static int tpoll(void *p, intptr_t *out)
{
    struct tframe *f = p;
    WEIR_BEGIN(&f->co);
    weir_time_sleep_start(&f->op, f->due);
    WEIR_AWAIT(&f->co, &f->op, f->res);
    {
        int64_t late = weir_time_now() - f->due;
        CHECK_GE(late, 0);
        if (late > fired_late_max)
            fired_late_max = late;
        fired_count++;
    }
    WEIR_RETURN(&f->co, out, f->res);
    WEIR_END(&f->co);
}

TEST(one_million_timers)
{
    enum { N = 1000000 };
    L = weir_loop_new(NULL);
    struct tframe *frames = calloc(N, sizeof(*frames));
    CHECK(frames != NULL);
    int64_t now = weir_time_now();
    srand(1);
    fired_count = 0;
    for (int i = 0; i < N; i++) {
        frames[i].due = now + (int64_t)(rand() % 1000) * WEIR_MSEC;
        weir_spawn_opts o = on_loop("timer");
        weir_task *t = weir_task_spawn_stackless(tpoll, &frames[i], &o);
        CHECK(t != NULL);
        weir_task_detach(t);
    }
    CHECK_EQ(weir_loop_run(L), 0);
    CHECK_EQ(fired_count, N);
    for (int i = 0; i < N; i++)
        CHECK_EQ(frames[i].res, 0);
    free(frames);
    weir_loop_free(L);
}

/* Freeing an interval while a task waits on it: the waiter gets
 * -ECANCELED and never touches the freed interval (ASan checks). */
static weir_interval *doomed;
static intptr_t doomed_waiter(void *arg)
{
    (void)arg;
    return (intptr_t)weir_interval_next(doomed);
}

static intptr_t doomed_freer(void *arg)
{
    (void)arg;
    weir_time_sleep(WEIR_MSEC);
    weir_interval_free(doomed);
    doomed = NULL;
    return 0;
}

TEST(interval_freed_under_waiter)
{
    L = weir_loop_new(NULL);
    doomed = weir_interval_new(WEIR_SEC);
    weir_spawn_opts o = on_loop("iv");
    weir_task *w = weir_task_spawn(doomed_waiter, NULL, &o);
    weir_task_detach(weir_task_spawn(doomed_freer, NULL, &o));
    CHECK_EQ(weir_loop_run(L), 0);
    intptr_t r = 0;
    CHECK_EQ(weir_task_join(w, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, -ECANCELED);
    weir_loop_free(L);
}

/* Huge periods saturate instead of overflowing into "due now". */
static int huge_fired;
static void huge_cb(void *arg)
{
    (void)arg;
    huge_fired++;
}

static intptr_t huge_user(void *arg)
{
    (void)arg;
    weir_interval *iv = weir_interval_new(WEIR_FOREVER);
    CHECK(iv != NULL);
    CHECK_EQ(weir_interval_next_start(iv, &(weir_op){0}), 0); /* armed far away */
    weir_interval_free(iv);
    weir_timer *t = weir_timer_start(0, WEIR_FOREVER, huge_cb, NULL);
    weir_time_sleep(5 * WEIR_MSEC);
    CHECK_EQ(huge_fired, 1); /* once, not in a busy loop */
    weir_timer_cancel(t);
    /* One left armed is freed with the loop. */
    CHECK(weir_timer_start(WEIR_SEC, 0, huge_cb, NULL) != NULL);
    return 0;
}

TEST(huge_periods_saturate)
{
    L = weir_loop_new(NULL);
    weir_spawn_opts o = on_loop("huge");
    weir_task *t = weir_task_spawn(huge_user, NULL, &o);
    CHECK_EQ(weir_loop_run(L), 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    weir_loop_free(L);
}

TEST_MAIN()
