/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_blocking.c - the blocking pool: results and errors come back to the
 * awaiting task, jobs run in parallel up to the thread cap, a full queue
 * holds submitters back, cancellation and deadlines end the wait at once
 * whatever state the job is in, stackless tasks can await jobs, and freeing
 * the loop with jobs still running joins the workers without leaking.
 *
 * The pool reads WEIR_BLOCKING_THREADS / WEIR_BLOCKING_QUEUE when it is
 * created (on a loop's first job), so each test sets them before its loop
 * does any blocking work. Jobs that must stay running while the test looks
 * at the pool wait on a gate the test opens.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "rt/rt_int.h"
#include "test.h"
#include "weir/rt.h"

/* Test hooks defined in src/rt/blocking.c. */
extern size_t weir__pool_queued(struct weir__pool *p);
extern size_t weir__pool_waiting(struct weir__pool *p);
extern size_t weir__pool_peak_queued(struct weir__pool *p);
extern unsigned weir__pool_threads(struct weir__pool *p);

static void pool_env(const char *threads, const char *queue)
{
    if (threads)
        setenv("WEIR_BLOCKING_THREADS", threads, 1);
    else
        unsetenv("WEIR_BLOCKING_THREADS");
    if (queue)
        setenv("WEIR_BLOCKING_QUEUE", queue, 1);
    else
        unsetenv("WEIR_BLOCKING_QUEUE");
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Turn the loop until *flag reaches want (jobs run on other threads, so the
 * loop alone cannot tell when they started). */
static void poll_until(weir_loop *l, atomic_int *flag, int want)
{
    int64_t give_up = weir_time_now() + 10 * WEIR_SEC;
    while (atomic_load(flag) < want) {
        CHECK_GE(weir_loop_poll(l, 1), 0);
        CHECK_LT(weir_time_now(), give_up);
    }
}

/* Wait, outside the loop, for a detached job to return. */
static void wait_for(atomic_int *flag, int want)
{
    int64_t give_up = weir_time_now() + 10 * WEIR_SEC;
    while (atomic_load(flag) < want) {
        sleep_ms(1);
        CHECK_LT(weir_time_now(), give_up);
    }
}

static intptr_t join(weir_task *t)
{
    intptr_t r = 0;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    return r;
}

/* ---- jobs --------------------------------------------------------------------------- */
/* Counters shared by the jobs of one test; reset by jobs_reset(). */
static atomic_int gate_open, started, finished, ran_ungated;
static atomic_int cur_running, max_running;
static atomic_size_t max_queued_seen;
static struct weir__pool *_Atomic cur_pool;

static void jobs_reset(void)
{
    atomic_store(&gate_open, 0);
    atomic_store(&started, 0);
    atomic_store(&finished, 0);
    atomic_store(&ran_ungated, 0);
    atomic_store(&cur_running, 0);
    atomic_store(&max_running, 0);
    atomic_store(&max_queued_seen, 0);
    atomic_store(&cur_pool, NULL);
}

static void running_enter(void)
{
    int c = atomic_fetch_add(&cur_running, 1) + 1;
    int m = atomic_load(&max_running);
    while (c > m && !atomic_compare_exchange_weak(&max_running, &m, c))
        ;
}

static intptr_t add_one(void *arg)
{
    atomic_fetch_add(&ran_ungated, 1);
    return (intptr_t)arg + 1;
}

static intptr_t fail_eio(void *arg)
{
    (void)arg;
    return -EIO;
}

/* Sleeps arg milliseconds, counting how many jobs run at once. */
static intptr_t sleeper(void *arg)
{
    atomic_fetch_add(&started, 1);
    running_enter();
    sleep_ms((int)(intptr_t)arg);
    atomic_fetch_sub(&cur_running, 1);
    atomic_fetch_add(&finished, 1);
    return (intptr_t)arg;
}

/* Blocks until the test opens the gate; returns arg. Also samples the pool's
 * queue depth from inside the job. */
static intptr_t gated(void *arg)
{
    atomic_fetch_add(&started, 1);
    running_enter();
    struct weir__pool *p = atomic_load(&cur_pool);
    if (p) {
        size_t q = weir__pool_queued(p);
        size_t m = atomic_load(&max_queued_seen);
        while (q > m && !atomic_compare_exchange_weak(&max_queued_seen, &m, q))
            ;
    }
    while (!atomic_load(&gate_open))
        sleep_ms(1);
    atomic_fetch_sub(&cur_running, 1);
    atomic_fetch_add(&finished, 1);
    return (intptr_t)arg;
}

/* What the job sees of its thread: name and signal mask. */
static intptr_t inspect_thread(void *arg)
{
    pthread_t *loop_thread = arg;
    char name[32] = "";
    pthread_getname_np(pthread_self(), name, sizeof(name));
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, NULL, &mask);
    int ok = !pthread_equal(pthread_self(), *loop_thread) && strcmp(name, "weir-blocking") == 0 &&
             sigismember(&mask, SIGINT) == 1 && sigismember(&mask, SIGTERM) == 1 &&
             sigismember(&mask, SIGUSR1) == 1;
    return ok ? 1 : -1;
}

/* ---- fibers --------------------------------------------------------------------------- */
struct run_args {
    weir_blocking_fn fn;
    void *arg;
    int64_t deadline_ms; /* < 0: none */
    int64_t took;        /* ns the wait took */
};

static intptr_t run_fiber(void *p)
{
    struct run_args *a = p;
    int64_t t0 = weir_time_now();
    int64_t r = weir_blocking_run(a->fn, a->arg, weir_time_after_ms(a->deadline_ms));
    a->took = weir_time_now() - t0;
    return (intptr_t)r;
}

static weir_task *spawn_run(weir_loop *l, struct run_args *a)
{
    weir_task *t = weir_task_spawn(run_fiber, a, &(weir_spawn_opts){.name = "runner", .loop = l});
    CHECK(t != NULL);
    return t;
}

/* ---- tests -------------------------------------------------------------------------- */
TEST(result_propagation)
{
    pool_env(NULL, NULL);
    jobs_reset();
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    struct run_args a = {add_one, (void *)41, -1, 0};
    pthread_t self = pthread_self();
    struct run_args b = {inspect_thread, &self, -1, 0};
    weir_task *ta = spawn_run(l, &a), *tb = spawn_run(l, &b);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(join(ta), 42);
    CHECK_EQ(join(tb), 1); /* another thread, named, all signals blocked */
    weir_loop_free(l);
}

TEST(error_propagation)
{
    pool_env(NULL, NULL);
    weir_loop *l = weir_loop_new(NULL);
    struct run_args a = {fail_eio, NULL, -1, 0};
    weir_task *t = spawn_run(l, &a);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(join(t), -EIO);
    weir_loop_free(l);
}

static intptr_t bad_args_fiber(void *p)
{
    (void)p;
    weir_op op;
    CHECK_EQ(weir_blocking_start(&op, NULL, NULL, WEIR_FOREVER), -EINVAL);
    CHECK_EQ(weir_op_wait(&op), -EINVAL); /* the op was never started */
    CHECK_EQ(weir_blocking_start(NULL, add_one, NULL, WEIR_FOREVER), -EINVAL);
    CHECK_EQ(weir_blocking_run(NULL, NULL, WEIR_FOREVER), -EINVAL);
    return 0;
}

TEST(bad_arguments)
{
    pool_env(NULL, NULL);
    jobs_reset();
    CHECK_EQ(weir_blocking_run(add_one, NULL, WEIR_FOREVER), -EINVAL); /* not in a task */
    weir_op op;
    CHECK_EQ(weir_blocking_start(&op, add_one, NULL, WEIR_FOREVER), -EINVAL);
    weir_loop *l = weir_loop_new(NULL);
    weir_task *t = weir_task_spawn(bad_args_fiber, NULL, &(weir_spawn_opts){.loop = l});
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(join(t), 0);
    CHECK_EQ(atomic_load(&ran_ungated), 0);
    CHECK(l->pool == NULL); /* nothing started one */
    weir_loop_free(l);
}

TEST(jobs_overlap)
{
    pool_env(NULL, NULL); /* 8 threads */
    jobs_reset();
    weir_loop *l = weir_loop_new(NULL);
    struct run_args a[8];
    weir_task *t[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (struct run_args){sleeper, (void *)50, -1, 0};
        t[i] = spawn_run(l, &a[i]);
    }
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_loop_run(l), 0);
    int64_t took = weir_time_now() - t0;
    for (int i = 0; i < 8; i++)
        CHECK_EQ(join(t[i]), 50);
    /* One after another would take 400 ms; leave room for a busy machine. */
    CHECK_LT(took, 300 * WEIR_MSEC);
    CHECK_GE(atomic_load(&max_running), 2);
    CHECK_LE(atomic_load(&max_running), 8);
    weir_loop_free(l);
}

TEST(thread_cap)
{
    pool_env("2", NULL);
    jobs_reset();
    weir_loop *l = weir_loop_new(NULL);
    struct run_args a[8];
    weir_task *t[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (struct run_args){sleeper, (void *)20, -1, 0};
        t[i] = spawn_run(l, &a[i]);
    }
    CHECK_EQ(weir_loop_run(l), 0);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(join(t[i]), 20);
    CHECK_EQ(atomic_load(&max_running), 2);
    CHECK_EQ(weir__pool_threads(l->pool), 2);
    weir_loop_free(l);
    pool_env(NULL, NULL);
}

TEST(backpressure)
{
    enum { N = 50 };
    pool_env("2", "4");
    jobs_reset();
    weir_loop *l = weir_loop_new(NULL);
    static struct run_args a[N];
    weir_task *t[N];
    for (int i = 0; i < N; i++) {
        a[i] = (struct run_args){gated, (void *)(intptr_t)i, -1, 0};
        t[i] = spawn_run(l, &a[i]);
    }
    /* One turn starts all 50 fibers, hence all 50 jobs. */
    CHECK_GE(weir_loop_poll(l, 0), N);
    struct weir__pool *p = l->pool;
    CHECK(p != NULL);
    atomic_store(&cur_pool, p);
    /* At most 2 run and 4 queue: the rest wait for a slot, and the queue
     * stays full while they do. */
    CHECK_EQ(weir__pool_queued(p), 4);
    CHECK_GE(weir__pool_waiting(p), N - 4 - 2);
    poll_until(l, &started, 2);
    CHECK_EQ(weir__pool_queued(p), 4);
    CHECK_EQ(weir__pool_waiting(p), N - 4 - 2);
    atomic_store(&gate_open, 1);
    CHECK_EQ(weir_loop_run(l), 0);
    for (int i = 0; i < N; i++)
        CHECK_EQ(join(t[i]), i);
    CHECK_EQ(atomic_load(&finished), N);
    CHECK_LE(atomic_load(&max_queued_seen), 4);
    CHECK_EQ(weir__pool_peak_queued(p), 4);
    CHECK_EQ(weir__pool_queued(p), 0);
    CHECK_EQ(weir__pool_waiting(p), 0);
    CHECK_LE(atomic_load(&max_running), 2);
    weir_loop_free(l);
    pool_env(NULL, NULL);
}

/* One thread, a one-slot queue: A runs (gated), B is queued, C and D wait for
 * a slot. Cancelling C (waiting) and B (queued) ends their waits at once,
 * their jobs never run, and D moves up into the freed slot. */
TEST(cancel_queued_and_waiting)
{
    pool_env("1", "1");
    jobs_reset();
    weir_loop *l = weir_loop_new(NULL);
    struct run_args a = {gated, (void *)1, -1, 0};
    struct run_args b = {add_one, (void *)10, -1, 0};
    struct run_args c = {add_one, (void *)20, -1, 0};
    struct run_args d = {gated, (void *)4, -1, 0};
    weir_task *ta = spawn_run(l, &a), *tb = spawn_run(l, &b);
    weir_task *tc = spawn_run(l, &c), *td = spawn_run(l, &d);
    poll_until(l, &started, 1);
    struct weir__pool *p = l->pool;
    CHECK_EQ(weir__pool_queued(p), 1);
    CHECK_EQ(weir__pool_waiting(p), 2);

    CHECK_EQ(weir_task_cancel(tc), 0);
    CHECK_GE(weir_loop_poll(l, 0), 1);
    CHECK_EQ(weir__pool_waiting(p), 1);
    CHECK_EQ(weir_task_cancel(tb), 0);
    CHECK_GE(weir_loop_poll(l, 0), 1);
    CHECK_EQ(weir__pool_queued(p), 1); /* D took B's slot */
    CHECK_EQ(weir__pool_waiting(p), 0);
    CHECK_EQ(weir_task_join(tb, NULL, weir_time_after_ms(1000)), -ECANCELED);
    CHECK_EQ(weir_task_join(tc, NULL, weir_time_after_ms(1000)), -ECANCELED);
    CHECK_EQ(b.took < WEIR_SEC, 1);

    atomic_store(&gate_open, 1);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(join(ta), 1);
    CHECK_EQ(join(td), 4);
    CHECK_EQ(atomic_load(&ran_ungated), 0); /* B and C never ran */
    CHECK_EQ(atomic_load(&finished), 2);
    weir_loop_free(l);
    pool_env(NULL, NULL);
}

/* A cancelled wait on a running job returns at once; the job finishes later
 * in the background, its result dropped, its record freed. */
TEST(cancel_running)
{
    pool_env(NULL, NULL);
    jobs_reset();
    weir_loop *l = weir_loop_new(NULL);
    struct run_args a = {gated, (void *)7, -1, 0};
    weir_task *t = spawn_run(l, &a);
    poll_until(l, &started, 1);
    CHECK_EQ(weir_task_cancel(t), 0);
    CHECK_EQ(weir_loop_run(l), 0); /* the task ends although the job cannot */
    intptr_t r = 0;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, -ECANCELED);
    CHECK_EQ(atomic_load(&finished), 0);
    atomic_store(&gate_open, 1);
    wait_for(&finished, 1);
    weir_loop_free(l);
}

/* A deadline ends the wait with -ETIMEDOUT, for a running job (detached) and
 * for a queued one (dropped); a deadline already past never submits. */
TEST(deadline)
{
    pool_env("1", NULL);
    jobs_reset();
    weir_loop *l = weir_loop_new(NULL);
    struct run_args a = {gated, (void *)1, 20, 0};
    struct run_args b = {add_one, (void *)2, 40, 0};
    struct run_args c = {add_one, (void *)3, 0, 0};
    weir_task *ta = spawn_run(l, &a), *tb = spawn_run(l, &b), *tc = spawn_run(l, &c);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(join(ta), -ETIMEDOUT);
    CHECK_EQ(join(tb), -ETIMEDOUT);
    CHECK_EQ(join(tc), -ETIMEDOUT);
    CHECK_GE(a.took, 20 * WEIR_MSEC);
    CHECK_LT(a.took, 2 * WEIR_SEC);
    CHECK_GE(b.took, 40 * WEIR_MSEC);
    CHECK_LT(b.took, 2 * WEIR_SEC);
    CHECK_EQ(atomic_load(&ran_ungated), 0);
    CHECK_EQ(atomic_load(&finished), 0);
    /* A normally started before its deadline, but on a loaded machine it may
     * still have been queued then: either way the loop's free joins it. */
    atomic_store(&gate_open, 1);
    weir_loop_free(l);
    CHECK_EQ(atomic_load(&finished), atomic_load(&started));
    pool_env(NULL, NULL);
}

/* A task already cancelled when it starts a job gets -ECANCELED without the
 * job being submitted. */
static intptr_t self_cancelling(void *p)
{
    (void)p;
    weir_task_cancel(weir_task_current());
    return (intptr_t)weir_blocking_run(add_one, NULL, WEIR_FOREVER);
}

TEST(cancelled_before_start)
{
    pool_env(NULL, NULL);
    jobs_reset();
    weir_loop *l = weir_loop_new(NULL);
    weir_task *t = weir_task_spawn(self_cancelling, NULL, &(weir_spawn_opts){.loop = l});
    CHECK_EQ(weir_loop_run(l), 0);
    intptr_t r = 0;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, -ECANCELED);
    CHECK_EQ(atomic_load(&ran_ungated), 0);
    weir_loop_free(l);
}

/* Stackless: await a job's value, then a job's error. */
struct sl_frame {
    weir_co co;
    weir_op op;
    int64_t res, first;
};

static int sl_poll(void *p, intptr_t *out)
{
    struct sl_frame *f = p;
    WEIR_BEGIN(&f->co);
    CHECK_EQ(weir_blocking_start(&f->op, add_one, (void *)99, WEIR_FOREVER), 0);
    WEIR_AWAIT(&f->co, &f->op, f->res);
    f->first = f->res;
    CHECK_EQ(weir_blocking_run(add_one, NULL, WEIR_FOREVER), -EINVAL); /* fibers only */
    CHECK_EQ(weir_blocking_start(&f->op, fail_eio, NULL, WEIR_FOREVER), 0);
    WEIR_AWAIT(&f->co, &f->op, f->res);
    WEIR_RETURN(&f->co, out, f->first * 1000 + f->res);
    WEIR_END(&f->co);
}

TEST(stackless_await)
{
    pool_env(NULL, NULL);
    jobs_reset();
    weir_loop *l = weir_loop_new(NULL);
    struct sl_frame f = {0};
    weir_task *t = weir_task_spawn_stackless(sl_poll, &f, &(weir_spawn_opts){.loop = l});
    CHECK(t != NULL);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(join(t), 100 * 1000 - EIO);
    weir_loop_free(l);
}

/* Freeing the loop cancels the waiting tasks; the running job is detached
 * and the queued one dropped; the pool then joins its threads, which waits
 * for the running job to return. */
TEST(loop_free_with_running_jobs)
{
    pool_env("1", NULL);
    jobs_reset();
    weir_loop *l = weir_loop_new(NULL);
    struct run_args a = {sleeper, (void *)100, -1, 0};
    struct run_args b = {add_one, (void *)1, -1, 0};
    weir_task_detach(spawn_run(l, &a));
    weir_task_detach(spawn_run(l, &b));
    poll_until(l, &started, 1);
    CHECK_EQ(atomic_load(&finished), 0);
    weir_loop_free(l);
    CHECK_EQ(atomic_load(&finished), 1); /* joined: the job had returned */
    CHECK_EQ(atomic_load(&ran_ungated), 0);
    pool_env(NULL, NULL);
}

/* Many short jobs from many tasks through a small pool, some cancelled on
 * the way: every wait ends, and ASan/TSan see the cross-thread hand-offs. */
static intptr_t churn_fiber(void *p)
{
    intptr_t i = (intptr_t)p, sum = 0;
    for (int k = 0; k < 20; k++) {
        int64_t r = weir_blocking_run(add_one, (void *)(i + k), WEIR_FOREVER);
        if (r == -ECANCELED)
            return -1;
        CHECK_EQ(r, i + k + 1);
        sum += r;
    }
    return sum;
}

TEST(churn_with_cancels)
{
    enum { N = 40 };
    pool_env("3", "8");
    jobs_reset();
    weir_loop *l = weir_loop_new(NULL);
    weir_task *t[N];
    for (int i = 0; i < N; i++)
        t[i] = weir_task_spawn(churn_fiber, (void *)(intptr_t)i, &(weir_spawn_opts){.loop = l});
    for (int n = 0; n < 5; n++)
        CHECK_GE(weir_loop_poll(l, 0), 0);
    for (int i = 0; i < N; i += 3)
        weir_task_cancel(t[i]);
    CHECK_EQ(weir_loop_run(l), 0);
    for (int i = 0; i < N; i++) {
        intptr_t r = 0;
        int rc = weir_task_join(t[i], &r, WEIR_FOREVER);
        if (i % 3 == 0) {
            CHECK(rc == -ECANCELED || rc == 0);
        } else {
            CHECK_EQ(rc, 0);
            CHECK_EQ(r, 20 * i + 190 + 20);
        }
    }
    weir_loop_free(l);
    pool_env(NULL, NULL);
}

TEST_MAIN()
