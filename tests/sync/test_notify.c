/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_notify.c - notify (one, all, the stored permit, deadlines,
 * cancellation, the chosen-then-cancelled waiter, stackless waits, a
 * cross-thread lost-wake-up stress), notify_wait_unlock as a condition
 * variable (including the re-lock after timeout and cancellation), the
 * waitgroup and the barrier.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "test.h"
#include "weir/sync.h"

/* Run fn(arg) as a fiber on a fresh loop until every task ended; its
 * result. With `sync`, wait there before freeing the loop: a task on
 * another thread may still be inside a wake of one of this loop's tasks
 * (weir_task_wake touches the loop after queueing the task; see
 * run_pair). */
static intptr_t run_loop(weir_task_fn fn, void *arg, pthread_barrier_t *sync)
{
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    weir_task *t = weir_task_spawn(fn, arg, &(weir_spawn_opts){.name = "main", .loop = l});
    CHECK(t != NULL);
    CHECK_EQ(weir_loop_run(l), 0);
    intptr_t r = 0;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    if (sync)
        pthread_barrier_wait(sync);
    weir_loop_free(l);
    return r;
}

static intptr_t run_main(weir_task_fn fn, void *arg)
{
    return run_loop(fn, arg, NULL);
}

struct pair_side {
    weir_task_fn fn;
    pthread_barrier_t *sync;
};

static void *pair_thread(void *p)
{
    struct pair_side *side = p;
    CHECK_EQ(run_loop(side->fn, NULL, side->sync), 0);
    return NULL;
}

/* Run a and b as the main tasks of two loops on two threads. Neither loop
 * is freed before both have finished running: the last cross-thread wake
 * of each side must be over before the loop it targets goes away. */
static void run_pair(weir_task_fn a, weir_task_fn b)
{
    pthread_barrier_t sync;
    pthread_barrier_init(&sync, NULL, 2);
    struct pair_side side = {b, &sync};
    pthread_t th;
    pthread_create(&th, NULL, pair_thread, &side);
    CHECK_EQ(run_loop(a, NULL, &sync), 0);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&sync);
}

static intptr_t join_ok(weir_task *t)
{
    intptr_t r = 0;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    return r;
}

/* ---- notify ---------------------------------------------------------------------- */
static weir_notify *N;
static int woken[16], nwoken;

static intptr_t waiter(void *arg)
{
    int r = weir_notify_wait(N, WEIR_FOREVER);
    woken[nwoken++] = (int)(intptr_t)arg;
    return r;
}

static intptr_t one_main(void *arg)
{
    (void)arg;
    weir_task *t[3];
    for (int i = 0; i < 3; i++)
        t[i] = weir_task_spawn(waiter, (void *)(intptr_t)i, NULL);
    weir_time_sleep(WEIR_MSEC); /* all three are queued */
    for (int i = 0; i < 3; i++) {
        weir_notify_one(N);
        weir_time_sleep(WEIR_MSEC);
        CHECK_EQ(nwoken, i + 1); /* one at a time */
    }
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(join_ok(t[i]), 0);
        CHECK_EQ(woken[i], i); /* FIFO */
    }
    return 0;
}

TEST(notify_one_wakes_one_fifo)
{
    N = weir_notify_new();
    nwoken = 0;
    run_main(one_main, NULL);
    weir_notify_free(N);
}

static intptr_t all_main(void *arg)
{
    (void)arg;
    weir_task *t[5];
    for (int i = 0; i < 5; i++)
        t[i] = weir_task_spawn(waiter, (void *)(intptr_t)i, NULL);
    weir_time_sleep(WEIR_MSEC);
    weir_notify_all(N);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(join_ok(t[i]), 0);
    CHECK_EQ(nwoken, 5);
    /* notify_all stores nothing: a later wait waits. */
    weir_notify_all(N);
    CHECK_EQ(weir_notify_wait(N, weir_time_after_ms(5)), -ETIMEDOUT);
    return 0;
}

TEST(notify_all_wakes_current_waiters_only)
{
    N = weir_notify_new();
    nwoken = 0;
    run_main(all_main, NULL);
    weir_notify_free(N);
}

static intptr_t self_cancelled_waits(void *arg)
{
    (void)arg;
    weir_task_cancel(weir_task_current());
    CHECK_EQ(weir_notify_wait(N, WEIR_FOREVER), 0);
    CHECK_EQ(weir_notify_wait(N, WEIR_FOREVER), -ECANCELED);
    return 0;
}

static intptr_t permit_main(void *arg)
{
    (void)arg;
    weir_notify_one(N);
    weir_notify_one(N); /* permits do not accumulate */
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_notify_wait(N, WEIR_FOREVER), 0); /* at once */
    CHECK_LT(weir_time_now() - t0, WEIR_SEC);
    CHECK_EQ(weir_notify_wait(N, weir_time_after_ms(5)), -ETIMEDOUT);
    CHECK_GE(weir_time_now() - t0, 5 * WEIR_MSEC);
    /* A stored permit is consumed even by a cancelled task: no suspension. */
    weir_notify_one(N);
    weir_task *t = weir_task_spawn(self_cancelled_waits, NULL, NULL);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), -ECANCELED);
    return 0;
}

TEST(notify_stored_permit)
{
    N = weir_notify_new();
    run_main(permit_main, NULL);
    weir_notify_free(N);
}

static int cleaned;
static void on_cleanup(void *arg)
{
    (void)arg;
    cleaned++;
}

static intptr_t cancellable_waiter(void *arg)
{
    (void)arg;
    weir_task_defer(on_cleanup, NULL);
    return weir_notify_wait(N, WEIR_FOREVER);
}

static intptr_t cancel_main(void *arg)
{
    (void)arg;
    /* Cancelled while queued: -ECANCELED, and it leaves the queue, so a
     * notify_one afterwards finds nobody and stores the permit. */
    weir_task *t = weir_task_spawn(cancellable_waiter, NULL, NULL);
    weir_time_sleep(WEIR_MSEC);
    weir_task_cancel(t);
    intptr_t r;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, -ECANCELED);
    CHECK_EQ(cleaned, 1);
    weir_notify_one(N);
    CHECK_EQ(weir_notify_wait(N, weir_time_after_ms(1000)), 0); /* the permit */

    /* Chosen by notify_one, then cancelled before it ran: the notification
     * is delivered (0), not lost; the cancel shows at the next suspension. */
    t = weir_task_spawn(waiter, NULL, NULL);
    nwoken = 0;
    weir_time_sleep(WEIR_MSEC);
    weir_notify_one(N);
    weir_task_cancel(t);
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, 0);
    CHECK_EQ(nwoken, 1);
    /* ... and no permit was left behind either. */
    CHECK_EQ(weir_notify_wait(N, weir_time_after_ms(2)), -ETIMEDOUT);

    /* Deadline. */
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_notify_wait(N, weir_time_after_ms(5)), -ETIMEDOUT);
    CHECK_GE(weir_time_now() - t0, 5 * WEIR_MSEC);
    /* The task deadline applies too. */
    weir_task_set_deadline(weir_time_after_ms(3));
    CHECK_EQ(weir_notify_wait(N, WEIR_FOREVER), -ETIMEDOUT);
    weir_task_set_deadline(WEIR_FOREVER);
    return 0;
}

TEST(notify_deadline_and_cancel)
{
    N = weir_notify_new();
    cleaned = 0;
    run_main(cancel_main, NULL);
    weir_notify_free(N);
}

/* Stackless: WEIR_AWAIT on a notify op. */
struct sl_wait {
    weir_co co;
    weir_sync_op op;
    int64_t res;
};

static int sl_waiter(void *p, intptr_t *out)
{
    struct sl_wait *f = p;
    WEIR_BEGIN(&f->co);
    weir_notify_wait_start(&f->op, N, WEIR_FOREVER);
    WEIR_AWAIT(&f->co, &f->op, f->res);
    CHECK_EQ(f->res, 0);
    weir_notify_wait_start(&f->op, N, weir_time_after_ms(2));
    WEIR_AWAIT(&f->co, &f->op, f->res);
    WEIR_RETURN(&f->co, out, f->res);
    WEIR_END(&f->co);
}

static intptr_t sl_main(void *arg)
{
    struct sl_wait *f = arg;
    weir_task *t = weir_task_spawn_stackless(sl_waiter, f, NULL);
    weir_time_sleep(WEIR_MSEC);
    weir_notify_one(N);
    CHECK_EQ(join_ok(t), -ETIMEDOUT);
    return 0;
}

TEST(notify_stackless)
{
    N = weir_notify_new();
    struct sl_wait f = {0};
    run_main(sl_main, &f);
    CHECK_EQ(weir_notify_wait(N, WEIR_FOREVER), -EINVAL); /* outside the runtime */
    weir_notify_free(N);
}

/* Two loops on two threads play ping-pong through two notifies: every
 * round crosses threads twice, racing each wake with the waiter parking.
 * A lost wake-up shows as a 10 s timeout (a failed check), not a hang. */
#define PINGPONG_ROUNDS 50000
static weir_notify *ping, *pong;

static intptr_t pinger(void *arg)
{
    (void)arg;
    for (int i = 0; i < PINGPONG_ROUNDS; i++) {
        weir_notify_one(ping);
        CHECK_EQ(weir_notify_wait(pong, weir_time_after_ms(10000)), 0);
    }
    return 0;
}

static intptr_t ponger(void *arg)
{
    (void)arg;
    for (int i = 0; i < PINGPONG_ROUNDS; i++) {
        CHECK_EQ(weir_notify_wait(ping, weir_time_after_ms(10000)), 0);
        weir_notify_one(pong);
    }
    return 0;
}

TEST(notify_cross_thread_stress)
{
    ping = weir_notify_new();
    pong = weir_notify_new();
    run_pair(pinger, ponger);
    weir_notify_free(ping);
    weir_notify_free(pong);
}

/* ---- notify_wait_unlock: a condition variable ----------------------------------- */
#define QCAP       4
#define NITEMS     20000
#define NCONSUMERS 3
static weir_mutex *M;
static weir_notify *not_empty, *not_full;
static int queue[QCAP], qhead, qlen;
static long consumed_sum;
static int consumed_n;

static intptr_t producer(void *arg)
{
    (void)arg;
    for (int i = 1; i <= NITEMS + NCONSUMERS; i++) {
        int item = i <= NITEMS ? i : -1; /* -1: one stop sign per consumer */
        CHECK_EQ(weir_mutex_lock(M, WEIR_FOREVER), 0);
        while (qlen == QCAP)
            CHECK_EQ(weir_notify_wait_unlock(not_full, M, WEIR_FOREVER), 0);
        queue[(qhead + qlen++) % QCAP] = item;
        weir_mutex_unlock(M);
        weir_notify_one(not_empty);
    }
    return 0;
}

static intptr_t consumer(void *arg)
{
    (void)arg;
    for (;;) {
        CHECK_EQ(weir_mutex_lock(M, WEIR_FOREVER), 0);
        while (qlen == 0)
            CHECK_EQ(weir_notify_wait_unlock(not_empty, M, WEIR_FOREVER), 0);
        int item = queue[qhead];
        qhead = (qhead + 1) % QCAP;
        qlen--;
        if (item > 0) {
            consumed_sum += item;
            consumed_n++;
        }
        weir_mutex_unlock(M);
        weir_notify_one(not_full);
        if (item < 0)
            return 0;
    }
}

static intptr_t consumers_main(void *arg)
{
    (void)arg;
    weir_task *t[NCONSUMERS];
    for (int i = 0; i < NCONSUMERS; i++)
        t[i] = weir_task_spawn(consumer, NULL, NULL);
    for (int i = 0; i < NCONSUMERS; i++)
        CHECK_EQ(join_ok(t[i]), 0);
    return 0;
}

TEST(wait_unlock_condition_variable)
{
    M = weir_mutex_new();
    not_empty = weir_notify_new();
    not_full = weir_notify_new();
    qhead = qlen = 0;
    consumed_sum = consumed_n = 0;
    run_pair(consumers_main, producer);
    CHECK_EQ(consumed_n, NITEMS);
    CHECK_EQ(consumed_sum, (long)NITEMS * (NITEMS + 1) / 2);
    CHECK_EQ(qlen, 0);
    weir_notify_free(not_empty);
    weir_notify_free(not_full);
    weir_mutex_free(M);
}

/* The mutex comes back even when the wait ends by cancellation or timeout,
 * and even when taking it back means waiting for another holder. */
static int holder_released;

static intptr_t relock_victim(void *arg)
{
    int by_deadline = (int)(intptr_t)arg;
    CHECK_EQ(weir_mutex_lock(M, WEIR_FOREVER), 0);
    if (by_deadline)
        weir_task_set_deadline(weir_time_after_ms(3));
    int r = weir_notify_wait_unlock(N, M, WEIR_FOREVER);
    CHECK_EQ(holder_released, 1);            /* it waited for the holder */
    CHECK_EQ(weir_mutex_trylock(M), -EBUSY); /* and holds the mutex now */
    weir_mutex_unlock(M);
    return r;
}

static intptr_t relock_main(void *arg)
{
    for (int by_deadline = 0; by_deadline < 2; by_deadline++) {
        holder_released = 0;
        weir_task *v = weir_task_spawn(relock_victim, (void *)(intptr_t)by_deadline, NULL);
        weir_time_sleep(WEIR_MSEC); /* the victim waits; the mutex is free */
        CHECK_EQ(weir_mutex_lock(M, WEIR_FOREVER), 0);
        if (!by_deadline)
            weir_task_cancel(v);
        weir_time_sleep(10 * WEIR_MSEC); /* the victim's wait ends; it queues for M */
        holder_released = 1;
        weir_mutex_unlock(M);
        intptr_t r;
        int jr = weir_task_join(v, &r, WEIR_FOREVER);
        CHECK_EQ(jr, by_deadline ? 0 : -ECANCELED);
        CHECK_EQ(r, by_deadline ? -ETIMEDOUT : -ECANCELED);
    }
    (void)arg;
    /* Misuse is refused without touching the mutex. */
    CHECK_EQ(weir_notify_wait_unlock(NULL, M, WEIR_FOREVER), -EINVAL);
    return 0;
}

TEST(wait_unlock_relocks_after_cancel_and_timeout)
{
    M = weir_mutex_new();
    N = weir_notify_new();
    run_main(relock_main, NULL);
    weir_notify_free(N);
    weir_mutex_free(M);
}

/* ---- waitgroup ---------------------------------------------------------------------- */
static weir_waitgroup *WG;
static _Atomic int finished;

static intptr_t worker(void *arg)
{
    weir_time_sleep((intptr_t)arg % 3 * WEIR_MSEC);
    atomic_fetch_add(&finished, 1);
    weir_waitgroup_done(WG);
    return 0;
}

static intptr_t wg_main(void *arg)
{
    (void)arg;
    CHECK_EQ(weir_waitgroup_wait(WG, WEIR_FOREVER), 0); /* zero: at once */
    weir_waitgroup_add(WG, 100);
    for (int i = 0; i < 100; i++)
        weir_task_detach(weir_task_spawn(worker, (void *)(intptr_t)i, NULL));
    /* Several waiters, one of them with a deadline that passes first. */
    CHECK_EQ(weir_waitgroup_wait(WG, weir_time_now()), -ETIMEDOUT);
    CHECK_EQ(weir_waitgroup_wait(WG, WEIR_FOREVER), 0);
    CHECK_EQ(atomic_load(&finished), 100);
    /* Negative adds. */
    weir_waitgroup_add(WG, 5);
    weir_waitgroup_add(WG, -4);
    CHECK_EQ(weir_waitgroup_wait(WG, weir_time_after_ms(2)), -ETIMEDOUT);
    weir_waitgroup_add(WG, -1);
    CHECK_EQ(weir_waitgroup_wait(WG, WEIR_FOREVER), 0);
    return 0;
}

TEST(waitgroup_many_tasks)
{
    WG = weir_waitgroup_new();
    atomic_store(&finished, 0);
    run_main(wg_main, NULL);
    weir_waitgroup_free(WG);
}

/* Waiters on one loop, workers on another thread's loop; many rounds, so
 * that the last done() races the waiters parking. Round i counts down
 * wgs[i % 2] (the other one is armed for round i + 1 meanwhile); wg_ack
 * counts the waiters that saw round i end. */
#define WG_ROUNDS  2000
#define WG_WORKERS 8
#define WG_WAITERS 3
static weir_waitgroup *wgs[2], *wg_ack;

static intptr_t wg_waiter(void *arg)
{
    (void)arg;
    for (int i = 0; i < WG_ROUNDS; i++) {
        CHECK_EQ(weir_waitgroup_wait(wgs[i % 2], weir_time_after_ms(10000)), 0);
        CHECK_GE(atomic_load(&finished), (i + 1) * WG_WORKERS);
        weir_waitgroup_done(wg_ack);
    }
    return 0;
}

static intptr_t wg_waiters_main(void *arg)
{
    (void)arg;
    weir_task *t[WG_WAITERS];
    for (int i = 0; i < WG_WAITERS; i++)
        t[i] = weir_task_spawn(wg_waiter, NULL, NULL);
    for (int i = 0; i < WG_WAITERS; i++)
        CHECK_EQ(join_ok(t[i]), 0);
    return 0;
}

static intptr_t quick_worker(void *arg)
{
    atomic_fetch_add(&finished, 1);
    weir_waitgroup_done(arg);
    return 0;
}

static intptr_t wg_workers_main(void *arg)
{
    (void)arg;
    for (int i = 0; i < WG_ROUNDS; i++) {
        weir_waitgroup_add(wg_ack, WG_WAITERS);
        if (i + 1 < WG_ROUNDS) /* its waiters of round i - 1 have all acked */
            weir_waitgroup_add(wgs[(i + 1) % 2], WG_WORKERS);
        for (int k = 0; k < WG_WORKERS; k++)
            weir_task_detach(weir_task_spawn(quick_worker, wgs[i % 2], NULL));
        CHECK_EQ(weir_waitgroup_wait(wg_ack, weir_time_after_ms(10000)), 0);
    }
    return 0;
}

TEST(waitgroup_cross_thread)
{
    wgs[0] = weir_waitgroup_new();
    wgs[1] = weir_waitgroup_new();
    wg_ack = weir_waitgroup_new();
    atomic_store(&finished, 0);
    weir_waitgroup_add(wgs[0], WG_WORKERS); /* round 0, armed before anyone runs */
    run_pair(wg_waiters_main, wg_workers_main);
    CHECK_EQ(atomic_load(&finished), WG_ROUNDS * WG_WORKERS);
    weir_waitgroup_free(wgs[0]);
    weir_waitgroup_free(wgs[1]);
    weir_waitgroup_free(wg_ack);
}

/* ---- barrier ---------------------------------------------------------------------------- */
#define BAR_TASKS  4
#define BAR_ROUNDS 200
static weir_barrier *B;
static _Atomic int arrivals, leaders;

static intptr_t bar_member(void *arg)
{
    (void)arg;
    for (int g = 0; g < BAR_ROUNDS; g++) {
        atomic_fetch_add(&arrivals, 1);
        int r = weir_barrier_wait(B, weir_time_after_ms(10000));
        CHECK_GE(r, 0);
        /* Nobody passes generation g before all arrived at it. */
        CHECK_GE(atomic_load(&arrivals), (g + 1) * BAR_TASKS);
        if (r == 1)
            atomic_fetch_add(&leaders, 1);
        if (g % 7 == 0)
            weir_task_yield();
    }
    return 0;
}

static intptr_t bar_main(void *arg)
{
    (void)arg;
    weir_task *t[BAR_TASKS];
    for (int i = 0; i < BAR_TASKS; i++)
        t[i] = weir_task_spawn(bar_member, NULL, NULL);
    for (int i = 0; i < BAR_TASKS; i++)
        CHECK_EQ(join_ok(t[i]), 0);
    return 0;
}

TEST(barrier_generations_single_leader)
{
    B = weir_barrier_new(BAR_TASKS);
    atomic_store(&arrivals, 0);
    atomic_store(&leaders, 0);
    run_main(bar_main, NULL);
    CHECK_EQ(atomic_load(&leaders), BAR_ROUNDS); /* exactly one per generation */
    weir_barrier_free(B);
    CHECK(weir_barrier_new(0) == NULL);
    CHECK_EQ(errno, EINVAL);
}

/* Two members on two threads: every generation crosses threads. */
#define BAR_PAIR_ROUNDS 20000
static intptr_t bar_pair(void *arg)
{
    (void)arg;
    for (int g = 0; g < BAR_PAIR_ROUNDS; g++) {
        int r = weir_barrier_wait(B, weir_time_after_ms(10000));
        CHECK_GE(r, 0);
        if (r == 1)
            atomic_fetch_add(&leaders, 1);
    }
    return 0;
}

TEST(barrier_cross_thread)
{
    B = weir_barrier_new(2);
    atomic_store(&leaders, 0);
    run_pair(bar_pair, bar_pair);
    CHECK_EQ(atomic_load(&leaders), BAR_PAIR_ROUNDS);
    weir_barrier_free(B);
}

static intptr_t bar_wait_for(void *arg)
{
    return weir_barrier_wait(B, (int64_t)(intptr_t)arg);
}

static intptr_t bar_leave_main(void *arg)
{
    (void)arg;
    /* A leaves on timeout and E on cancellation; then B and C are only two
     * of three, and D's arrival completes the generation (D leads). Had A
     * or E still counted, C would have led. */
    weir_task *a = weir_task_spawn(bar_wait_for, (void *)(intptr_t)weir_time_after_ms(3), NULL);
    weir_task *b = weir_task_spawn(bar_wait_for, (void *)(intptr_t)WEIR_FOREVER, NULL);
    weir_time_sleep(10 * WEIR_MSEC);
    CHECK_EQ(join_ok(a), -ETIMEDOUT);
    /* A cancelled waiter leaves too. */
    weir_task *e = weir_task_spawn(bar_wait_for, (void *)(intptr_t)WEIR_FOREVER, NULL);
    weir_time_sleep(WEIR_MSEC);
    weir_task_cancel(e);
    intptr_t r;
    CHECK_EQ(weir_task_join(e, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, -ECANCELED);
    weir_task *c = weir_task_spawn(bar_wait_for, (void *)(intptr_t)WEIR_FOREVER, NULL);
    weir_time_sleep(WEIR_MSEC);
    CHECK_EQ(weir_barrier_wait(B, WEIR_FOREVER), 1); /* D: this task */
    CHECK_EQ(join_ok(b), 0);
    CHECK_EQ(join_ok(c), 0);
    /* The next generation starts empty. */
    CHECK_EQ(weir_barrier_wait(B, weir_time_after_ms(2)), -ETIMEDOUT);
    return 0;
}

TEST(barrier_leave_on_timeout_and_cancel)
{
    B = weir_barrier_new(3);
    run_main(bar_leave_main, NULL);
    weir_barrier_free(B);
}

TEST_MAIN()
