/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cancel.c - cancellation at each kind of suspension (sleep, join,
 * yield, interval, stackless await), cleanup handlers on cancelled tasks,
 * and wake-ups: idempotence, and a stress test of a wake from another thread
 * racing with the task parking (a lost wake-up hangs the test).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "test.h"
#include "weir/rt.h"

static weir_loop *L;
static int cleaned;
static void on_cleanup(void *arg)
{
    (void)arg;
    cleaned++;
}

static intptr_t sleeps_forever(void *arg)
{
    (void)arg;
    weir_task_defer(on_cleanup, NULL);
    int r = weir_time_sleep(3600 * WEIR_SEC);
    CHECK_EQ(weir_task_cancelled(), 1);
    /* Every later suspension fails too. */
    CHECK_EQ(weir_time_sleep(WEIR_MSEC), -ECANCELED);
    CHECK_EQ(weir_task_yield(), -ECANCELED);
    return r;
}

static intptr_t joins_forever(void *arg)
{
    weir_task_defer(on_cleanup, NULL);
    return weir_task_join(arg, NULL, WEIR_FOREVER);
}

static intptr_t yields_forever(void *arg)
{
    (void)arg;
    weir_task_defer(on_cleanup, NULL);
    int r;
    while ((r = weir_task_yield()) == 0)
        ;
    return r;
}

static intptr_t ticks_forever(void *arg)
{
    (void)arg;
    weir_task_defer(on_cleanup, NULL);
    weir_interval *iv = weir_interval_new(WEIR_SEC);
    int64_t r = weir_interval_next(iv);
    weir_interval_free(iv);
    return (intptr_t)r;
}

struct sl_frame {
    weir_co co;
    weir_op op;
    int64_t res;
};
static int sl_sleeps(void *p, intptr_t *out)
{
    struct sl_frame *f = p;
    WEIR_BEGIN(&f->co);
    weir_task_defer(on_cleanup, NULL);
    weir_time_sleep_start(&f->op, weir_time_after_ms(3600 * 1000));
    WEIR_AWAIT(&f->co, &f->op, f->res);
    WEIR_RETURN(&f->co, out, f->res);
    WEIR_END(&f->co);
}

static intptr_t canceller(void *arg)
{
    weir_task **victims = arg;
    weir_time_sleep(2 * WEIR_MSEC); /* let every victim suspend first */
    for (int i = 0; victims[i]; i++)
        CHECK_EQ(weir_task_cancel(victims[i]), 0);
    return 0;
}

TEST(cancel_each_suspension_kind)
{
    L = weir_loop_new(NULL);
    cleaned = 0;
    weir_spawn_opts o = {.name = "victim", .loop = L};
    weir_task *never = weir_task_spawn(sleeps_forever, NULL, &o); /* joined, never cancelled */
    struct sl_frame f = {0};
    weir_task *v[6] = {
        weir_task_spawn(sleeps_forever, NULL, &o),
        weir_task_spawn(joins_forever, never, &o),
        weir_task_spawn(yields_forever, NULL, &o),
        weir_task_spawn(ticks_forever, NULL, &o),
        weir_task_spawn_stackless(sl_sleeps, &f, &o),
        NULL,
    };
    weir_task_detach(weir_task_spawn(canceller, v, &o));
    /* Run until the five victims ended; then cancel `never` too. */
    for (int done = 0; !done;) {
        CHECK_GE(weir_loop_poll(L, 10), 0);
        done = cleaned == 5;
    }
    for (int i = 0; i < 5; i++) {
        intptr_t r = 0;
        CHECK_EQ(weir_task_join(v[i], &r, WEIR_FOREVER), -ECANCELED);
        CHECK_EQ(r, -ECANCELED);
    }
    weir_task_cancel(never);
    CHECK_EQ(weir_loop_run(L), 0);
    intptr_t r;
    CHECK_EQ(weir_task_join(never, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(cleaned, 6);
    weir_loop_free(L);
}

/* Cancelled before it ever ran: the first suspension fails, cleanup runs. */
TEST(cancel_before_first_run)
{
    L = weir_loop_new(NULL);
    cleaned = 0;
    weir_spawn_opts o = {.loop = L};
    weir_task *t = weir_task_spawn(sleeps_forever, NULL, &o);
    weir_task_cancel(t);
    CHECK_EQ(weir_loop_run(L), 0);
    intptr_t r;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, -ECANCELED);
    CHECK_EQ(cleaned, 1);
    weir_loop_free(L);
}

/* Cancel from another thread. */
static void *foreign_cancel(void *arg)
{
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
    weir_task_cancel(arg);
    return NULL;
}

TEST(cancel_from_foreign_thread)
{
    L = weir_loop_new(NULL);
    cleaned = 0;
    weir_spawn_opts o = {.loop = L};
    weir_task *t = weir_task_spawn(sleeps_forever, NULL, &o);
    pthread_t th;
    pthread_create(&th, NULL, foreign_cancel, t);
    CHECK_EQ(weir_loop_run(L), 0);
    pthread_join(th, NULL);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(cleaned, 1);
    weir_loop_free(L);
}

/* Freeing a loop cancels and drains what is still alive. */
TEST(loop_free_cancels_live_tasks)
{
    L = weir_loop_new(NULL);
    cleaned = 0;
    weir_spawn_opts o = {.loop = L};
    for (int i = 0; i < 10; i++)
        weir_task_detach(weir_task_spawn(sleeps_forever, NULL, &o));
    CHECK_GE(weir_loop_poll(L, 0), 10);
    weir_loop_free(L);
    CHECK_EQ(cleaned, 10);
}

/* ---- wakes ------------------------------------------------------------------------ */
/* A stackless task that only advances when `posted` moved; it never arms an
 * op, so the only thing that can re-poll it is weir_task_wake. */
struct wake_frame {
    _Atomic long posted;
    _Atomic long seen;
    long target;
    long polls;
};

static int wake_poll(void *p, intptr_t *out)
{
    struct wake_frame *f = p;
    f->polls++;
    long v = atomic_load_explicit(&f->posted, memory_order_acquire);
    atomic_store_explicit(&f->seen, v, memory_order_release);
    if (v >= f->target) {
        *out = v;
        return WEIR_READY;
    }
    return WEIR_PENDING;
}

struct waker_args {
    weir_task *t;
    struct wake_frame *f;
};

static void *waker_main(void *p)
{
    struct waker_args *a = p;
    for (long i = 1; i <= a->f->target; i++) {
        atomic_store_explicit(&a->f->posted, i, memory_order_release);
        weir_task_wake(a->t);
        /* Wait until the task saw it, so each wake races with a park. */
        while (atomic_load_explicit(&a->f->seen, memory_order_acquire) < i)
            ;
    }
    return NULL;
}

TEST(wake_from_thread_races_park)
{
    L = weir_loop_new(NULL);
    struct wake_frame f = {.target = 200000};
    weir_spawn_opts o = {.name = "parker", .loop = L};
    weir_task *t = weir_task_spawn_stackless(wake_poll, &f, &o);
    struct waker_args a = {weir_task_ref(t), &f};
    pthread_t th;
    pthread_create(&th, NULL, waker_main, &a);
    CHECK_EQ(weir_loop_run(L), 0); /* a lost wake-up hangs here */
    pthread_join(th, NULL);
    intptr_t r;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, f.target);
    weir_task_unref(a.t);
    weir_loop_free(L);
}

/* Many wakes while already scheduled cost one poll. */
TEST(wake_is_idempotent)
{
    L = weir_loop_new(NULL);
    struct wake_frame f = {.target = 1};
    weir_spawn_opts o = {.loop = L};
    weir_task *t = weir_task_spawn_stackless(wake_poll, &f, &o);
    CHECK_GE(weir_loop_poll(L, 0), 1);
    CHECK_EQ(f.polls, 1);
    for (int i = 0; i < 100; i++)
        weir_task_wake(t);
    CHECK_GE(weir_loop_poll(L, 0), 1);
    CHECK_EQ(f.polls, 2);
    atomic_store(&f.posted, 1);
    weir_task_wake(t);
    CHECK_EQ(weir_loop_run(L), 0);
    CHECK_EQ(f.polls, 3);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    weir_loop_free(L);
}

/* A cancelled task that keeps yielding still lets the others run. */
static int bystander_runs;
static intptr_t stubborn_yielder(void *arg)
{
    (void)arg;
    long n = 0;
    while (bystander_runs < 10 && n < 10000000) {
        CHECK_EQ(weir_task_yield(), -ECANCELED);
        n++;
    }
    return bystander_runs;
}

static intptr_t bystander(void *arg)
{
    (void)arg;
    for (int i = 0; i < 10; i++) {
        bystander_runs++;
        weir_task_yield();
    }
    return 0;
}

TEST(cancelled_yield_still_yields)
{
    L = weir_loop_new(NULL);
    bystander_runs = 0;
    weir_spawn_opts o = {.loop = L};
    weir_task *s = weir_task_spawn(stubborn_yielder, NULL, &o);
    weir_task_cancel(s);
    weir_task *b = weir_task_spawn(bystander, NULL, &o);
    CHECK_EQ(weir_loop_run(L), 0);
    intptr_t r = 0;
    CHECK_EQ(weir_task_join(s, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, 10);
    CHECK_EQ(weir_task_join(b, NULL, WEIR_FOREVER), 0);
    weir_loop_free(L);
}

TEST_MAIN()
