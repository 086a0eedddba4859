/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_mutex.c - the lock-like primitives of weir/sync.h: mutex, rwlock and
 * semaphore. Exclusion, the mutex's normal mode (barging, a woken waiter
 * that loses re-queues at the front) and starvation mode (FIFO hand-off,
 * no starvation, also across threads), try-variants,
 * deadlines and cancellation (and that the primitive still works after
 * them), stackless waiters through WEIR_AWAIT, and contention between two
 * loops on two threads with exact counting.
 *
 * Single-loop tests are deterministic: a task that must be queued before
 * the next step gets there through settle(), a few yields of the driving
 * fiber (a spawned or woken task runs before a yielding one resumes).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "test.h"
#include "test_rt.h"
#include "sync/sync_int.h"
#include "weir/sync.h"

/* ---- helpers ---------------------------------------------------------------- */
static void settle(void)
{
    for (int i = 0; i < 8; i++)
        CHECK_EQ(weir_task_yield(), 0);
}

static intptr_t join(weir_task *t)
{
    intptr_t r = -1;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    return r;
}

/* Loops on several threads are all done before any of them is freed: a
 * task's last wake of a task on another loop may still be inside that
 * loop's wake path (eventfd write) after the woken task has finished, and
 * a ring unmapped by one thread and mapped again by another at the same
 * address (liburing maps without libc) reads as a race to TSan. */
static pthread_barrier_t xt_bar;

static void xt_free_loop(weir_loop *l)
{
    pthread_barrier_wait(&xt_bar);
    weir_loop_free(l);
}

/* ---- mutex: exclusion --------------------------------------------------------- */
static weir_mutex *gm;
static long counter;
static int inside;
static int order[64], norder;

static intptr_t incrementer(void *arg)
{
    int n = (int)(intptr_t)arg;
    for (int i = 0; i < n; i++) {
        CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
        CHECK_EQ(inside, 0);
        inside = 1;
        long v = counter;
        CHECK_EQ(weir_task_yield(), 0); /* others run, and queue */
        counter = v + 1;
        inside = 0;
        weir_mutex_unlock(gm);
    }
    return 0;
}

static intptr_t exclusion_main(void *arg)
{
    (void)arg;
    weir_task *t[16];
    for (int i = 0; i < 16; i++)
        t[i] = test_spawn(incrementer, (void *)200);
    for (int i = 0; i < 16; i++)
        CHECK_EQ(join(t[i]), 0);
    CHECK_EQ(counter, 16 * 200);
    return 0;
}

TEST(mutex_exclusion)
{
    gm = weir_mutex_new();
    CHECK(gm != NULL);
    counter = 0;
    CHECK_EQ(test_run_main(exclusion_main, NULL), 0);
    CHECK_EQ(weir_mutex_trylock(gm), 0);
    weir_mutex_unlock(gm);
    weir_mutex_free(gm);
}

/* ---- mutex: normal mode (barging) and starvation mode (FIFO hand-off) ------------ */
static intptr_t record_locker(void *arg)
{
    CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
    order[norder++] = (int)(intptr_t)arg;
    weir_mutex_unlock(gm);
    return 0;
}

/* record_locker as a stackless task. */
struct sl_record {
    weir_co co;
    int id;
    weir_sync_op op;
    int64_t res;
};

static int sl_record_poll(void *p, intptr_t *out)
{
    struct sl_record *f = p;
    WEIR_BEGIN(&f->co);
    CHECK_EQ(weir_mutex_lock_start(&f->op, gm, WEIR_FOREVER), 0);
    WEIR_AWAIT(&f->co, &f->op, f->res);
    CHECK_EQ(f->res, 0);
    order[norder++] = f->id;
    weir_mutex_unlock(gm);
    WEIR_RETURN(&f->co, out, 0);
    WEIR_END(&f->co);
}

/* Normal mode: unlock releases the lock and wakes the oldest waiter to
 * compete; a running task (here trylock) may take it first, and the waiter
 * that lost goes back to the front of the queue, not behind the others. */
static intptr_t barging_main(void *arg)
{
    (void)arg;
    CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
    weir_task *t[3];
    for (int i = 0; i < 3; i++) {
        t[i] = test_spawn(record_locker, (void *)(intptr_t)i);
        settle(); /* t[i] queues before t[i + 1] */
    }
    norder = 0;
    weir_mutex_unlock(gm);               /* wakes t[0], which has not run yet */
    CHECK_EQ(weir_mutex_trylock(gm), 0); /* barging: allowed in normal mode */
    settle();                            /* t[0] lost: queued again, at the front */
    CHECK_EQ(norder, 0);
    CHECK_EQ(weir_mutex_lock(gm, weir_time_now() - 1), -ETIMEDOUT); /* held */
    weir_mutex_unlock(gm);
    for (int i = 0; i < 3; i++)
        join(t[i]);
    CHECK_EQ(norder, 3);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(order[i], i);
    CHECK_EQ(weir_mutex_trylock(gm), 0);
    weir_mutex_unlock(gm);
    return 0;
}

TEST(mutex_normal_mode_barging)
{
    /* On a loaded machine t[0] may have waited 1 ms by the time of the
     * unlock, which would hand it the lock (starvation mode): this test is
     * about normal mode. */
    int64_t starve = weir__mutex_starve_ns;
    weir__mutex_starve_ns = 60 * WEIR_SEC;
    gm = weir_mutex_new();
    CHECK_EQ(test_run_main(barging_main, NULL), 0);
    weir_mutex_free(gm);
    weir__mutex_starve_ns = starve;
}

/* Starvation mode, forced by holding the lock for longer than the 1 ms
 * threshold while ten waiters queue: unlock hands the lock to the oldest
 * waiter directly, trylock and lock cannot barge (lock queues behind all
 * ten), the hand-offs go in FIFO order, and the mode ends with the last
 * waiter. */
static intptr_t starvation_fifo_main(void *arg)
{
    (void)arg;
    CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
    weir_task *t[10];
    for (int i = 0; i < 10; i++) {
        t[i] = test_spawn(record_locker, (void *)(intptr_t)i);
        settle(); /* t[i] queues before t[i + 1] */
    }
    CHECK_EQ(weir_mutex_trylock(gm), -EBUSY);
    CHECK_EQ(weir_time_sleep(3 * WEIR_MSEC), 0); /* every waiter now starves */
    norder = 0;
    weir_mutex_unlock(gm);
    /* The lock went to t[0] although it has not run yet: we cannot barge. */
    CHECK_EQ(weir_mutex_trylock(gm), -EBUSY);
    CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0); /* queues behind all ten */
    CHECK_EQ(norder, 10);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(order[i], i);
    weir_mutex_unlock(gm);
    CHECK_EQ(weir_mutex_trylock(gm), 0); /* back in normal mode, free */
    weir_mutex_unlock(gm);
    for (int i = 0; i < 10; i++)
        join(t[i]);

    /* Starvation mode with waiters that compete (fibers) and waiters that
     * cannot (stackless: always handed the lock): still FIFO. */
    CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
    weir_task *u[4];
    struct sl_record sr[4];
    for (int i = 0; i < 4; i++) {
        if (i % 2) {
            sr[i] = (struct sl_record){.id = i + 20};
            u[i] = weir_task_spawn_stackless(sl_record_poll, &sr[i], NULL);
            CHECK(u[i] != NULL);
        } else {
            u[i] = test_spawn(record_locker, (void *)(intptr_t)(i + 20));
        }
        settle();
    }
    CHECK_EQ(weir_time_sleep(3 * WEIR_MSEC), 0);
    norder = 0;
    weir_mutex_unlock(gm);
    CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
    CHECK_EQ(norder, 4);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(order[i], i + 20);
    weir_mutex_unlock(gm);
    for (int i = 0; i < 4; i++)
        join(u[i]);
    return 0;
}

TEST(mutex_starvation_fifo_handoff)
{
    gm = weir_mutex_new();
    CHECK_EQ(test_run_main(starvation_fifo_main, NULL), 0);
    weir_mutex_free(gm);
}

/* A task re-locking in a loop cannot starve a waiter: the re-locker yields
 * while holding the lock, so the woken waiter usually finds it taken again
 * (barging) and re-queues, until it has waited 1 ms and starvation mode
 * hands the lock over. */
#define STARVE_BOUND_NS (50 * WEIR_MSEC) /* generous: the threshold is 1 ms */
static int patient_done;
static long relock_rounds;
static int64_t patient_max_wait;

static intptr_t relocker(void *arg)
{
    (void)arg;
    int64_t give_up = weir_time_now() + 30 * WEIR_SEC;
    while (!patient_done && weir_time_now() < give_up) {
        CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
        relock_rounds++;
        CHECK_EQ(weir_task_yield(), 0); /* the woken waiter runs, and loses */
        weir_mutex_unlock(gm);
    }
    return 0;
}

static intptr_t patient(void *arg)
{
    (void)arg;
    /* Every wait is bounded; and the re-locker must be seen barging in some
     * of them, or the test did not exercise starvation mode. One wait need
     * not see it: on a loaded machine (TSan, two cores) the re-locker's
     * thread can be off-CPU for the whole wait, so the patient is simply
     * handed a free lock. Hundreds of waits without one barge would mean
     * the mutex never barges at all. */
    int barged = 0;
    for (int i = 0; i < 400 && barged < 5; i++) {
        settle(); /* the re-locker holds the lock again, usually */
        long rounds = relock_rounds;
        int64_t t0 = weir_time_now();
        CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
        int64_t w = weir_time_now() - t0;
        if (w > patient_max_wait)
            patient_max_wait = w;
        if (relock_rounds - rounds >= 1)
            barged++;
        weir_mutex_unlock(gm);
    }
    CHECK_GE(barged, 1);
    patient_done = 1;
    return 0;
}

static intptr_t starve_main(void *arg)
{
    (void)arg;
    patient_done = 0;
    relock_rounds = 0;
    patient_max_wait = 0;
    weir_task *a = test_spawn(relocker, NULL);
    settle();
    weir_task *b = test_spawn(patient, NULL);
    CHECK_EQ(join(b), 0);
    CHECK_EQ(join(a), 0);
    CHECK_LT(patient_max_wait, STARVE_BOUND_NS);
    return 0;
}

TEST(mutex_no_starvation)
{
    gm = weir_mutex_new();
    CHECK_EQ(test_run_main(starve_main, NULL), 0);
    weir_mutex_free(gm);
}

TEST(mutex_trylock_outside_tasks)
{
    weir_mutex *m = weir_mutex_new();
    CHECK_EQ(weir_mutex_trylock(m), 0);
    CHECK_EQ(weir_mutex_trylock(m), -EBUSY);
    /* Contended and outside a task: nothing to suspend. */
    CHECK_EQ(weir_mutex_lock(m, WEIR_FOREVER), -EINVAL);
    weir_mutex_unlock(m);
    CHECK_EQ(weir_mutex_lock(m, WEIR_FOREVER), 0); /* free: taken at once */
    weir_mutex_unlock(m);
    CHECK_EQ(weir_mutex_trylock(NULL), -EINVAL);
    CHECK_EQ(weir_mutex_lock(NULL, WEIR_FOREVER), -EINVAL);
    weir_mutex_free(m);
}

/* ---- mutex: deadline and cancellation ------------------------------------------------ */
static intptr_t timed_locker(void *arg)
{
    int64_t t0 = weir_time_now();
    int r = weir_mutex_lock(gm, weir_time_after_ms((intptr_t)arg));
    if (r == 0) {
        weir_mutex_unlock(gm);
        return 0;
    }
    CHECK_GE(weir_time_now() - t0, (intptr_t)arg * WEIR_MSEC);
    return r;
}

static intptr_t deadline_main(void *arg)
{
    (void)arg;
    CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
    weir_task *a = test_spawn(record_locker, (void *)1);
    settle();
    weir_task *b = test_spawn(timed_locker, (void *)20); /* queued between a and c */
    settle();
    weir_task *c = test_spawn(record_locker, (void *)3);
    settle();
    CHECK_EQ(join(b), -ETIMEDOUT);
    /* A deadline already past fails at once when the lock is held... */
    CHECK_EQ(weir_mutex_lock(gm, weir_time_now() - 1), -ETIMEDOUT);
    norder = 0;
    weir_mutex_unlock(gm);
    join(a);
    join(c);
    CHECK_EQ(norder, 2);
    CHECK_EQ(order[0], 1);
    CHECK_EQ(order[1], 3);
    /* ...and does not matter when it is free. */
    CHECK_EQ(weir_mutex_lock(gm, weir_time_now() - 1), 0);
    weir_mutex_unlock(gm);
    return 0;
}

TEST(mutex_deadline)
{
    gm = weir_mutex_new();
    CHECK_EQ(test_run_main(deadline_main, NULL), 0);
    weir_mutex_free(gm);
}

static intptr_t cancel_main(void *arg)
{
    (void)arg;
    CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
    weir_task *a = test_spawn(record_locker, (void *)1);
    settle();
    weir_task *b = test_spawn(timed_locker, (void *)-1); /* no deadline */
    settle();
    weir_task *c = test_spawn(record_locker, (void *)3);
    settle();
    CHECK_EQ(weir_task_cancel(b), 0);
    intptr_t r = 0;
    CHECK_EQ(weir_task_join(b, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, -ECANCELED);
    norder = 0;
    weir_mutex_unlock(gm);
    join(a);
    join(c);
    CHECK_EQ(norder, 2);
    CHECK_EQ(order[0], 1);
    CHECK_EQ(order[1], 3);
    CHECK_EQ(weir_mutex_trylock(gm), 0);
    weir_mutex_unlock(gm);
    return 0;
}

TEST(mutex_cancel)
{
    gm = weir_mutex_new();
    CHECK_EQ(test_run_main(cancel_main, NULL), 0);
    weir_mutex_free(gm);
}

/* Cancelled after the lock was handed over: the wait reports 0 and the task
 * owns the lock; the cancel shows at its next suspension. */
static intptr_t granted_then_cancelled(void *arg)
{
    (void)arg;
    CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
    CHECK(weir_task_cancelled());
    CHECK_EQ(weir_task_yield(), -ECANCELED);
    weir_mutex_unlock(gm);
    return 7;
}

static intptr_t cancel_after_grant_main(void *arg)
{
    (void)arg;
    CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
    weir_task *w = test_spawn(granted_then_cancelled, NULL);
    settle();
    weir_mutex_unlock(gm); /* hands over to w, which has not run yet */
    CHECK_EQ(weir_task_cancel(w), 0);
    intptr_t r = 0;
    CHECK_EQ(weir_task_join(w, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, 7);
    CHECK_EQ(weir_mutex_trylock(gm), 0);
    weir_mutex_unlock(gm);
    return 0;
}

TEST(mutex_cancel_after_grant)
{
    gm = weir_mutex_new();
    CHECK_EQ(test_run_main(cancel_after_grant_main, NULL), 0);
    weir_mutex_free(gm);
}

/* ---- mutex: stackless lockers ------------------------------------------------------- */
struct sl_locker {
    weir_co co;
    weir_mutex *m;
    int i, n;
    long v;
    int64_t deadline_ms; /* < 0: none */
    weir_sync_op op;
    int64_t res;
};

static int sl_locker_poll(void *p, intptr_t *out)
{
    struct sl_locker *f = p;
    WEIR_BEGIN(&f->co);
    for (f->i = 0; f->i < f->n; f->i++) {
        CHECK_EQ(weir_mutex_lock_start(&f->op, f->m, weir_time_after_ms(f->deadline_ms)), 0);
        WEIR_AWAIT(&f->co, &f->op, f->res);
        if (f->res != 0)
            WEIR_RETURN(&f->co, out, f->res);
        CHECK_EQ(inside, 0);
        inside = 1;
        f->v = counter;
        WEIR_YIELD(&f->co);
        counter = f->v + 1;
        inside = 0;
        weir_mutex_unlock(f->m);
    }
    WEIR_RETURN(&f->co, out, 0);
    WEIR_END(&f->co);
}

static intptr_t stackless_main(void *arg)
{
    (void)arg;
    struct sl_locker f[6];
    weir_task *t[10];
    for (int i = 0; i < 6; i++) {
        f[i] = (struct sl_locker){.m = gm, .n = 100, .deadline_ms = -1};
        t[i] = weir_task_spawn_stackless(sl_locker_poll, &f[i], NULL);
        CHECK(t[i] != NULL);
    }
    for (int i = 6; i < 10; i++)
        t[i] = test_spawn(incrementer, (void *)100); /* fibers in the same queue */
    for (int i = 0; i < 10; i++)
        CHECK_EQ(join(t[i]), 0);
    CHECK_EQ(counter, 1000);

    /* Deadline and cancellation of stackless waiters. */
    CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
    struct sl_locker d = {.m = gm, .n = 1, .deadline_ms = 10};
    struct sl_locker c = {.m = gm, .n = 1, .deadline_ms = -1};
    weir_task *td = weir_task_spawn_stackless(sl_locker_poll, &d, NULL);
    weir_task *tc = weir_task_spawn_stackless(sl_locker_poll, &c, NULL);
    settle();
    CHECK_EQ(weir_task_cancel(tc), 0);
    intptr_t r = 0;
    CHECK_EQ(weir_task_join(tc, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, -ECANCELED);
    CHECK_EQ(join(td), -ETIMEDOUT);
    weir_mutex_unlock(gm);
    /* A free lock completes the op at once. */
    struct sl_locker ok = {.m = gm, .n = 3, .deadline_ms = -1};
    CHECK_EQ(join(weir_task_spawn_stackless(sl_locker_poll, &ok, NULL)), 0);
    CHECK_EQ(counter, 1003);
    return 0;
}

TEST(mutex_stackless)
{
    gm = weir_mutex_new();
    counter = 0;
    inside = 0;
    CHECK_EQ(test_run_main(stackless_main, NULL), 0);
    weir_mutex_free(gm);
}

/* ---- mutex: two loops on two threads --------------------------------------------------- */
#ifdef WEIR_TSAN
#define XT_ITERS 3000
#else
#define XT_ITERS 20000
#endif

static long xt_counter; /* plain: the mutex must order every access */
static _Atomic int xt_go;

static intptr_t xt_worker(void *arg)
{
    int yield_every = (int)(intptr_t)arg;
    while (!atomic_load_explicit(&xt_go, memory_order_acquire))
        CHECK_EQ(weir_task_yield(), 0);
    for (int i = 0; i < XT_ITERS; i++) {
        CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
        long v = xt_counter;
        if (yield_every && i % yield_every == 0)
            CHECK_EQ(weir_task_yield(), 0); /* suspended while holding it */
        xt_counter = v + 1;
        weir_mutex_unlock(gm);
    }
    return 0;
}

static struct sl_locker xt_sl[2];

/* Two fibers and one stackless task per loop. */
static void xt_loop(int side)
{
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    weir_spawn_opts o = {.loop = l};
    weir_task *a = weir_task_spawn(xt_worker, (void *)0, &o);
    weir_task *b = weir_task_spawn(xt_worker, (void *)7, &o);
    xt_sl[side] = (struct sl_locker){.m = gm, .n = XT_ITERS, .deadline_ms = -1};
    weir_task *c = weir_task_spawn_stackless(sl_locker_poll, &xt_sl[side], &o);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(join(a), 0);
    CHECK_EQ(join(b), 0);
    CHECK_EQ(join(c), 0);
    xt_free_loop(l);
}

static void *xt_thread(void *arg)
{
    xt_loop((int)(intptr_t)arg);
    return NULL;
}

TEST(mutex_cross_thread)
{
    gm = weir_mutex_new();
    xt_counter = 0;
    counter = 0; /* the stackless lockers count here, under the same mutex */
    inside = 0;
    atomic_store(&xt_go, 0);
    pthread_barrier_init(&xt_bar, NULL, 2);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, xt_thread, (void *)1), 0);
    atomic_store_explicit(&xt_go, 1, memory_order_release);
    xt_loop(0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(xt_counter, 4 * XT_ITERS);
    CHECK_EQ(counter, 2 * XT_ITERS);
    pthread_barrier_destroy(&xt_bar);
    weir_mutex_free(gm);
}

/* Deadlines racing hand-offs across threads: every lock that reports 0 is
 * held (exact count), every other returns -ETIMEDOUT, and nothing hangs. */
static _Atomic long xt_ok, xt_timeouts;
static intptr_t xt_impatient(void *arg)
{
    (void)arg;
    for (int i = 0; i < XT_ITERS / 4; i++) {
        int r = weir_mutex_lock(gm, weir_time_now() + (i % 5) * 20000);
        if (r == -ETIMEDOUT) {
            atomic_fetch_add(&xt_timeouts, 1);
            continue;
        }
        CHECK_EQ(r, 0);
        long v = xt_counter;
        if (i % 3 == 0)
            weir_time_sleep(30000);
        xt_counter = v + 1;
        weir_mutex_unlock(gm);
        atomic_fetch_add(&xt_ok, 1);
    }
    return 0;
}

static void *xt_impatient_thread(void *arg)
{
    (void)arg;
    weir_loop *l = weir_loop_new(NULL);
    weir_spawn_opts o = {.loop = l};
    weir_task *t[3];
    for (int i = 0; i < 3; i++)
        t[i] = weir_task_spawn(xt_impatient, NULL, &o);
    CHECK_EQ(weir_loop_run(l), 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(join(t[i]), 0);
    xt_free_loop(l);
    return NULL;
}

TEST(mutex_cross_thread_deadlines)
{
    gm = weir_mutex_new();
    xt_counter = 0;
    atomic_store(&xt_ok, 0);
    atomic_store(&xt_timeouts, 0);
    pthread_barrier_init(&xt_bar, NULL, 2);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, xt_impatient_thread, NULL), 0);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_join(th[i], NULL), 0);
    CHECK_EQ(xt_counter, atomic_load(&xt_ok));
    CHECK_EQ(atomic_load(&xt_ok) + atomic_load(&xt_timeouts), 6 * (XT_ITERS / 4));
    pthread_barrier_destroy(&xt_bar);
    CHECK_EQ(weir_mutex_trylock(gm), 0);
    weir_mutex_unlock(gm);
    weir_mutex_free(gm);
}

/* No starvation across threads: a task on one loop re-locking in a tight
 * loop (never suspending while it gets the lock) cannot keep a waiter on
 * another loop out for more than a few ms. */
static _Atomic int xt_patient_done;
static _Atomic long xt_relocks;
static int64_t xt_max_wait; /* written by the patient's thread only */

static intptr_t xt_relocker(void *arg)
{
    (void)arg;
    int64_t give_up = weir_time_now() + 10 * WEIR_SEC;
    while (!atomic_load_explicit(&xt_patient_done, memory_order_relaxed)) {
        CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
        xt_counter++;
        weir_mutex_unlock(gm);
        long n = atomic_fetch_add_explicit(&xt_relocks, 1, memory_order_relaxed) + 1;
        if ((n & 1023) == 0 && weir_time_now() > give_up)
            break;
    }
    return 0;
}

static intptr_t xt_patient(void *arg)
{
    (void)arg;
    while (atomic_load_explicit(&xt_relocks, memory_order_relaxed) < 1000)
        CHECK_EQ(weir_time_sleep(100000), 0); /* the re-locker is going */
    for (int i = 0; i < 20; i++) {
        int64_t t0 = weir_time_now();
        CHECK_EQ(weir_mutex_lock(gm, WEIR_FOREVER), 0);
        int64_t w = weir_time_now() - t0;
        xt_counter++;
        weir_mutex_unlock(gm);
        if (w > xt_max_wait)
            xt_max_wait = w;
        CHECK_EQ(weir_time_sleep(200000), 0);
    }
    atomic_store_explicit(&xt_patient_done, 1, memory_order_relaxed);
    return 0;
}

static void *xt_starve_thread(void *arg)
{
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    weir_task *t =
        weir_task_spawn(arg ? xt_patient : xt_relocker, NULL, &(weir_spawn_opts){.loop = l});
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(join(t), 0);
    xt_free_loop(l);
    return NULL;
}

TEST(mutex_cross_thread_no_starvation)
{
    gm = weir_mutex_new();
    xt_counter = 0;
    xt_max_wait = 0;
    atomic_store(&xt_patient_done, 0);
    atomic_store(&xt_relocks, 0);
    pthread_barrier_init(&xt_bar, NULL, 2);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, xt_starve_thread, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_join(th[i], NULL), 0);
    CHECK_EQ(xt_counter, atomic_load(&xt_relocks) + 20);
    CHECK_LT(xt_max_wait, STARVE_BOUND_NS);
    pthread_barrier_destroy(&xt_bar);
    weir_mutex_free(gm);
}

/* ---- rwlock ------------------------------------------------------------------------ */
static weir_rwlock *grw;
static int readers_in, writers_in, max_readers;

static intptr_t reader(void *arg)
{
    CHECK_EQ(weir_rwlock_read(grw, WEIR_FOREVER), 0);
    CHECK_EQ(writers_in, 0);
    readers_in++;
    if (readers_in > max_readers)
        max_readers = readers_in;
    order[norder++] = (int)(intptr_t)arg;
    weir_time_sleep(2 * WEIR_MSEC); /* others overlap meanwhile */
    readers_in--;
    weir_rwlock_unlock_read(grw);
    return 0;
}

static intptr_t writer(void *arg)
{
    CHECK_EQ(weir_rwlock_write(grw, WEIR_FOREVER), 0);
    CHECK_EQ(writers_in, 0);
    CHECK_EQ(readers_in, 0);
    writers_in++;
    order[norder++] = (int)(intptr_t)arg;
    settle();
    writers_in--;
    weir_rwlock_unlock_write(grw);
    return 0;
}

static intptr_t readers_overlap_main(void *arg)
{
    (void)arg;
    weir_task *t[4];
    for (int i = 0; i < 4; i++)
        t[i] = test_spawn(reader, (void *)(intptr_t)i);
    for (int i = 0; i < 4; i++)
        join(t[i]);
    CHECK_EQ(max_readers, 4);
    CHECK_EQ(weir_rwlock_try_write(grw), 0);
    CHECK_EQ(weir_rwlock_try_read(grw), -EBUSY);
    CHECK_EQ(weir_rwlock_try_write(grw), -EBUSY);
    weir_rwlock_unlock_write(grw);
    CHECK_EQ(weir_rwlock_try_read(grw), 0);
    CHECK_EQ(weir_rwlock_try_read(grw), 0);
    CHECK_EQ(weir_rwlock_try_write(grw), -EBUSY);
    weir_rwlock_unlock_read(grw);
    weir_rwlock_unlock_read(grw);
    return 0;
}

TEST(rwlock_readers_overlap)
{
    grw = weir_rwlock_new(1);
    CHECK(grw != NULL);
    max_readers = readers_in = writers_in = norder = 0;
    CHECK_EQ(test_run_main(readers_overlap_main, NULL), 0);
    weir_rwlock_free(grw);
}

/* Readers and writers mixed, with exclusion checked inside each section. */
static intptr_t rw_mixed_main(void *arg)
{
    (void)arg;
    weir_task *t[24];
    for (int i = 0; i < 24; i++)
        t[i] = test_spawn(i % 3 == 0 ? writer : reader, (void *)(intptr_t)i);
    for (int i = 0; i < 24; i++)
        join(t[i]);
    CHECK_EQ(norder, 24);
    CHECK_GT(max_readers, 1);
    return 0;
}

TEST(rwlock_writer_exclusion)
{
    for (int pref = 0; pref <= 1; pref++) {
        grw = weir_rwlock_new(pref);
        max_readers = readers_in = writers_in = norder = 0;
        CHECK_EQ(test_run_main(rw_mixed_main, NULL), 0);
        weir_rwlock_free(grw);
    }
}

/* prefer_writers: a waiting writer stops new readers; write unlock lets in
 * the consecutive readers at the head, not those behind the next writer. */
static intptr_t prefer_writers_main(void *arg)
{
    (void)arg;
    norder = 0;
    CHECK_EQ(weir_rwlock_read(grw, WEIR_FOREVER), 0); /* R0 */
    weir_task *w1 = test_spawn(writer, (void *)10);
    settle();
    CHECK_EQ(weir_rwlock_try_read(grw), -EBUSY); /* blocked by the waiting writer */
    weir_task *r1 = test_spawn(reader, (void *)1);
    weir_task *r2 = test_spawn(reader, (void *)2);
    settle();
    weir_task *w2 = test_spawn(writer, (void *)20);
    settle();
    weir_task *r3 = test_spawn(reader, (void *)3);
    settle();
    CHECK_EQ(norder, 0);
    weir_rwlock_unlock_read(grw); /* w1, then r1 + r2 together, then w2, then r3 */
    join(w1);
    join(r1);
    join(r2);
    join(w2);
    join(r3);
    CHECK_EQ(norder, 5);
    CHECK_EQ(order[0], 10);
    CHECK(order[1] + order[2] == 3); /* 1 and 2, overlapping */
    CHECK_EQ(order[3], 20);
    CHECK_EQ(order[4], 3);
    CHECK_EQ(max_readers, 2);
    return 0;
}

TEST(rwlock_prefer_writers)
{
    grw = weir_rwlock_new(1);
    max_readers = readers_in = writers_in = 0;
    CHECK_EQ(test_run_main(prefer_writers_main, NULL), 0);
    weir_rwlock_free(grw);
}

/* Reader-preferring: readers enter past a waiting writer, and a write
 * unlock lets every queued reader in. */
static intptr_t prefer_readers_main(void *arg)
{
    (void)arg;
    norder = 0;
    CHECK_EQ(weir_rwlock_read(grw, WEIR_FOREVER), 0);
    weir_task *w1 = test_spawn(writer, (void *)10);
    settle();
    CHECK_EQ(weir_rwlock_try_read(grw), 0); /* past the waiting writer */
    weir_rwlock_unlock_read(grw);
    weir_task *r1 = test_spawn(reader, (void *)1);
    settle();
    CHECK_EQ(norder, 1); /* r1 entered at once */
    CHECK_EQ(order[0], 1);
    weir_rwlock_unlock_read(grw);
    /* the last reader out lets w1 in */
    join(r1);
    CHECK_EQ(weir_rwlock_write(grw, WEIR_FOREVER), 0); /* after w1 */
    CHECK_EQ(norder, 2);
    CHECK_EQ(order[1], 10);
    join(w1);
    norder = 0;
    weir_task *r2 = test_spawn(reader, (void *)2);
    settle();
    weir_task *w2 = test_spawn(writer, (void *)20);
    settle();
    weir_task *r3 = test_spawn(reader, (void *)3);
    settle();
    max_readers = 0;
    weir_rwlock_unlock_write(grw); /* r2 and r3 together, then w2 */
    join(r2);
    join(r3);
    join(w2);
    CHECK_EQ(norder, 3);
    CHECK(order[0] + order[1] == 5);
    CHECK_EQ(order[2], 20);
    CHECK_EQ(max_readers, 2);
    return 0;
}

TEST(rwlock_prefer_readers)
{
    grw = weir_rwlock_new(0);
    max_readers = readers_in = writers_in = 0;
    CHECK_EQ(test_run_main(prefer_readers_main, NULL), 0);
    weir_rwlock_free(grw);
}

static intptr_t timed_reader(void *arg)
{
    int r = weir_rwlock_read(grw, weir_time_after_ms((intptr_t)arg));
    if (r == 0)
        weir_rwlock_unlock_read(grw);
    return r;
}

static intptr_t timed_writer(void *arg)
{
    int r = weir_rwlock_write(grw, weir_time_after_ms((intptr_t)arg));
    if (r == 0)
        weir_rwlock_unlock_write(grw);
    return r;
}

/* A queued writer that goes away (cancel, deadline) lets in the readers it
 * was holding back while the lock is still read-held. */
static intptr_t rw_cancel_main(void *arg)
{
    (void)arg;
    norder = 0;
    for (int round = 0; round < 2; round++) {
        CHECK_EQ(weir_rwlock_read(grw, WEIR_FOREVER), 0);
        weir_task *w = test_spawn(timed_writer, (void *)(intptr_t)(round ? 10 : -1));
        settle();
        weir_task *r = test_spawn(reader, (void *)(intptr_t)round);
        settle();
        CHECK_EQ(norder, round); /* held back by the writer */
        if (round == 0) {
            CHECK_EQ(weir_task_cancel(w), 0);
            intptr_t res = 0;
            CHECK_EQ(weir_task_join(w, &res, WEIR_FOREVER), -ECANCELED);
            CHECK_EQ(res, -ECANCELED);
        } else {
            CHECK_EQ(join(w), -ETIMEDOUT);
        }
        settle();
        CHECK_EQ(norder, round + 1); /* in, while we still hold our read lock */
        CHECK_EQ(readers_in, 1);
        weir_rwlock_unlock_read(grw);
        join(r);
    }
    CHECK_EQ(weir_rwlock_try_write(grw), 0);
    weir_rwlock_unlock_write(grw);
    /* Readers waiting on a writer: cancelled, timed out; the lock works
     * afterwards. */
    CHECK_EQ(weir_rwlock_write(grw, WEIR_FOREVER), 0);
    weir_task *rc = test_spawn(timed_reader, (void *)-1);
    weir_task *rt = test_spawn(timed_reader, (void *)5);
    settle();
    CHECK_EQ(weir_task_cancel(rc), 0);
    CHECK_EQ(weir_task_join(rc, NULL, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(join(rt), -ETIMEDOUT);
    weir_rwlock_unlock_write(grw);
    CHECK_EQ(weir_rwlock_try_read(grw), 0);
    weir_rwlock_unlock_read(grw);
    return 0;
}

TEST(rwlock_cancel_writer_lets_readers_in)
{
    grw = weir_rwlock_new(1);
    max_readers = readers_in = writers_in = 0;
    CHECK_EQ(test_run_main(rw_cancel_main, NULL), 0);
    weir_rwlock_free(grw);
}

/* Stackless read/write lockers. */
struct sl_rw {
    weir_co co;
    int write;
    weir_sync_op op;
    int64_t res;
};

static int sl_rw_poll(void *p, intptr_t *out)
{
    struct sl_rw *f = p;
    WEIR_BEGIN(&f->co);
    if (f->write)
        weir_rwlock_write_start(&f->op, grw, WEIR_FOREVER);
    else
        weir_rwlock_read_start(&f->op, grw, WEIR_FOREVER);
    WEIR_AWAIT(&f->co, &f->op, f->res);
    CHECK_EQ(f->res, 0);
    CHECK_EQ(writers_in, 0);
    if (f->write) {
        CHECK_EQ(readers_in, 0);
        writers_in++;
    } else {
        readers_in++;
    }
    WEIR_YIELD(&f->co);
    if (f->write) {
        writers_in--;
        weir_rwlock_unlock_write(grw);
    } else {
        readers_in--;
        weir_rwlock_unlock_read(grw);
    }
    WEIR_RETURN(&f->co, out, 0);
    WEIR_END(&f->co);
}

static intptr_t rw_stackless_main(void *arg)
{
    (void)arg;
    struct sl_rw f[12];
    weir_task *t[12];
    for (int i = 0; i < 12; i++) {
        f[i] = (struct sl_rw){.write = i % 4 == 1};
        t[i] = weir_task_spawn_stackless(sl_rw_poll, &f[i], NULL);
    }
    for (int i = 0; i < 12; i++)
        CHECK_EQ(join(t[i]), 0);
    return 0;
}

TEST(rwlock_stackless)
{
    grw = weir_rwlock_new(1);
    readers_in = writers_in = 0;
    CHECK_EQ(test_run_main(rw_stackless_main, NULL), 0);
    weir_rwlock_free(grw);
}

/* Two threads: writers keep two fields equal, readers check that they are. */
static long rw_a, rw_b;
static intptr_t xt_rw_worker(void *arg)
{
    int is_writer = (int)(intptr_t)arg;
    for (int i = 0; i < XT_ITERS / 2; i++) {
        if (is_writer) {
            CHECK_EQ(weir_rwlock_write(grw, WEIR_FOREVER), 0);
            rw_a++;
            if (i % 16 == 0)
                CHECK_EQ(weir_task_yield(), 0);
            rw_b++;
            weir_rwlock_unlock_write(grw);
        } else {
            CHECK_EQ(weir_rwlock_read(grw, WEIR_FOREVER), 0);
            long a = rw_a;
            if (i % 16 == 0)
                CHECK_EQ(weir_task_yield(), 0);
            CHECK_EQ(a, rw_b);
            weir_rwlock_unlock_read(grw);
        }
    }
    return 0;
}

static void *xt_rw_thread(void *arg)
{
    (void)arg;
    weir_loop *l = weir_loop_new(NULL);
    weir_spawn_opts o = {.loop = l};
    weir_task *t[3];
    for (int i = 0; i < 3; i++)
        t[i] = weir_task_spawn(xt_rw_worker, (void *)(intptr_t)(i == 0), &o);
    CHECK_EQ(weir_loop_run(l), 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(join(t[i]), 0);
    xt_free_loop(l);
    return NULL;
}

TEST(rwlock_cross_thread)
{
    for (int pref = 0; pref <= 1; pref++) {
        grw = weir_rwlock_new(pref);
        rw_a = rw_b = 0;
        pthread_barrier_init(&xt_bar, NULL, 2);
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            CHECK_EQ(pthread_create(&th[i], NULL, xt_rw_thread, NULL), 0);
        for (int i = 0; i < 2; i++)
            CHECK_EQ(pthread_join(th[i], NULL), 0);
        CHECK_EQ(rw_a, 2 * (XT_ITERS / 2));
        CHECK_EQ(rw_b, rw_a);
        pthread_barrier_destroy(&xt_bar);
        weir_rwlock_free(grw);
    }
}

/* ---- semaphore ------------------------------------------------------------------------ */
static weir_sem *gs;

TEST(sem_permits)
{
    errno = 0;
    CHECK(weir_sem_new(-1) == NULL);
    CHECK_EQ(errno, EINVAL);
    weir_sem *s = weir_sem_new(3);
    CHECK(s != NULL);
    CHECK_EQ(weir_sem_available(s), 3);
    CHECK_EQ(weir_sem_try_acquire(s, 2), 0);
    CHECK_EQ(weir_sem_available(s), 1);
    CHECK_EQ(weir_sem_try_acquire(s, 2), -EAGAIN);
    CHECK_EQ(weir_sem_available(s), 1);
    CHECK_EQ(weir_sem_try_acquire(s, 0), -EINVAL);
    CHECK_EQ(weir_sem_try_acquire(s, -1), -EINVAL);
    CHECK_EQ(weir_sem_acquire(s, 0, WEIR_FOREVER), -EINVAL);
    CHECK_EQ(weir_sem_acquire(s, -3, WEIR_FOREVER), -EINVAL);
    CHECK_EQ(weir_sem_acquire(s, 1, WEIR_FOREVER), 0); /* available: no task needed */
    CHECK_EQ(weir_sem_available(s), 0);
    weir_sem_release(s, 5);
    CHECK_EQ(weir_sem_available(s), 5);
    weir_sync_op op;
    CHECK_EQ(weir_sem_acquire_start(&op, s, 0, WEIR_FOREVER), -EINVAL);
    CHECK_EQ(weir_sem_acquire_start(&op, NULL, 1, WEIR_FOREVER), -EINVAL);
    weir_sem_free(s);
}

static intptr_t sem_taker(void *arg)
{
    long n = (long)(intptr_t)arg;
    int r = weir_sem_acquire(gs, n, WEIR_FOREVER);
    if (r == 0)
        order[norder++] = (int)n;
    return r;
}

static intptr_t sem_fifo_main(void *arg)
{
    (void)arg;
    norder = 0;
    weir_task *big = test_spawn(sem_taker, (void *)5);
    settle();
    weir_task *small = test_spawn(sem_taker, (void *)1);
    settle();
    weir_sem_release(gs, 1);
    settle();
    CHECK_EQ(norder, 0); /* the small request does not overtake the big one */
    CHECK_EQ(weir_sem_available(gs), 1);
    CHECK_EQ(weir_sem_try_acquire(gs, 1), -EAGAIN); /* nor does a try */
    weir_sem_release(gs, 4);
    join(big);
    CHECK_EQ(norder, 1);
    CHECK_EQ(order[0], 5);
    CHECK_EQ(weir_sem_available(gs), 0);
    weir_sem_release(gs, 1);
    join(small);
    CHECK_EQ(norder, 2);
    CHECK_EQ(weir_sem_available(gs), 0);

    /* One release grants several waiters in order, as far as it covers. */
    norder = 0;
    weir_task *t[4];
    long want[4] = {1, 2, 1, 3};
    for (int i = 0; i < 4; i++) {
        t[i] = test_spawn(sem_taker, (void *)(intptr_t)want[i]);
        settle();
    }
    weir_sem_release(gs, 5); /* 1 + 2 + 1 fit; 3 does not (1 left over) */
    settle();
    CHECK_EQ(norder, 3);
    CHECK_EQ(order[0], 1);
    CHECK_EQ(order[1], 2);
    CHECK_EQ(order[2], 1);
    CHECK_EQ(weir_sem_available(gs), 1);
    weir_sem_release(gs, 2);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(join(t[i]), 0);
    CHECK_EQ(order[3], 3);
    CHECK_EQ(weir_sem_available(gs), 0);
    return 0;
}

TEST(sem_fifo_no_overtaking)
{
    gs = weir_sem_new(0);
    CHECK_EQ(test_run_main(sem_fifo_main, NULL), 0);
    weir_sem_free(gs);
}

static intptr_t sem_timed(void *arg)
{
    return weir_sem_acquire(gs, 3, weir_time_after_ms((intptr_t)arg));
}

static intptr_t sem_cancel_main(void *arg)
{
    (void)arg;
    norder = 0;
    /* 1 permit; a request for 3 waits at the head, a request for 1 behind it. */
    weir_task *big = test_spawn(sem_timed, (void *)-1);
    settle();
    weir_task *small = test_spawn(sem_taker, (void *)1);
    settle();
    CHECK_EQ(norder, 0);
    CHECK_EQ(weir_task_cancel(big), 0);
    intptr_t r = 0;
    CHECK_EQ(weir_task_join(big, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, -ECANCELED);
    CHECK_EQ(join(small), 0); /* let in once the big one left */
    CHECK_EQ(weir_sem_available(gs), 0);
    /* Deadline: nothing taken either. */
    weir_sem_release(gs, 2);
    CHECK_EQ(join(test_spawn(sem_timed, (void *)10)), -ETIMEDOUT);
    CHECK_EQ(weir_sem_available(gs), 2);
    weir_sem_release(gs, 1);
    CHECK_EQ(join(test_spawn(sem_timed, (void *)10)), 0);
    CHECK_EQ(weir_sem_available(gs), 0);
    return 0;
}

TEST(sem_cancel_takes_nothing)
{
    gs = weir_sem_new(1);
    CHECK_EQ(test_run_main(sem_cancel_main, NULL), 0);
    weir_sem_free(gs);
}

/* Stackless acquire, and a cross-thread bound: never more than 2 inside. */
struct sl_sem {
    weir_co co;
    int i, n;
    weir_sync_op op;
    int64_t res;
};

static _Atomic int sem_inside;
static int sl_sem_poll(void *p, intptr_t *out)
{
    struct sl_sem *f = p;
    WEIR_BEGIN(&f->co);
    for (f->i = 0; f->i < f->n; f->i++) {
        weir_sem_acquire_start(&f->op, gs, 1, WEIR_FOREVER);
        WEIR_AWAIT(&f->co, &f->op, f->res);
        CHECK_EQ(f->res, 0);
        {
            int in = atomic_fetch_add(&sem_inside, 1) + 1;
            CHECK_LE(in, 2);
        }
        WEIR_YIELD(&f->co);
        atomic_fetch_sub(&sem_inside, 1);
        weir_sem_release(gs, 1);
    }
    WEIR_RETURN(&f->co, out, 0);
    WEIR_END(&f->co);
}

static intptr_t sem_fiber_worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < XT_ITERS / 4; i++) {
        long n = 1 + i % 2;
        CHECK_EQ(weir_sem_acquire(gs, n, WEIR_FOREVER), 0);
        int in = atomic_fetch_add(&sem_inside, (int)n) + (int)n;
        CHECK_LE(in, 2);
        if (i % 8 == 0)
            CHECK_EQ(weir_task_yield(), 0);
        atomic_fetch_sub(&sem_inside, (int)n);
        weir_sem_release(gs, n);
    }
    return 0;
}

static void *xt_sem_thread(void *arg)
{
    (void)arg;
    weir_loop *l = weir_loop_new(NULL);
    weir_spawn_opts o = {.loop = l};
    struct sl_sem f = {.n = XT_ITERS / 4};
    weir_task *a = weir_task_spawn(sem_fiber_worker, NULL, &o);
    weir_task *b = weir_task_spawn(sem_fiber_worker, NULL, &o);
    weir_task *c = weir_task_spawn_stackless(sl_sem_poll, &f, &o);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(join(a), 0);
    CHECK_EQ(join(b), 0);
    CHECK_EQ(join(c), 0);
    xt_free_loop(l);
    return NULL;
}

TEST(sem_cross_thread)
{
    gs = weir_sem_new(2);
    atomic_store(&sem_inside, 0);
    pthread_barrier_init(&xt_bar, NULL, 2);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, xt_sem_thread, NULL), 0);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_join(th[i], NULL), 0);
    CHECK_EQ(weir_sem_available(gs), 2);
    pthread_barrier_destroy(&xt_bar);
    weir_sem_free(gs);
}

TEST_MAIN()
