/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_blocking.c - the blocking pool: results and errors come back to the
 * awaiting task, jobs run in parallel up to the thread cap, a full queue
 * holds submitters back, cancellation and deadlines end the wait at once
 * whatever state the job is in (but not a shielded run's), stackless tasks
 * can await jobs, and freeing the loop with jobs still running joins the
 * workers without leaking.
 * With a discard function (the _ex forms) every start ends in exactly one of
 * fn(arg) and discard(arg): the tests give each job a heap argument that
 * whichever runs frees (ASan sees a double free, LSan a leak) and count both
 * per job - refusals, cancels and timeouts in the queue, jobs still queued
 * or waiting for a slot when the loop is freed, jobs a stackless task left
 * behind (dropped by the pool's free), and a runtime freed mid-churn.
 *
 * The pool reads WEIR_BLOCKING_THREADS / WEIR_BLOCKING_QUEUE when it is
 * created (on a loop's first job), so each test sets them before its loop
 * does any blocking work. Jobs that must stay running while the test looks
 * at the pool wait on a gate the test opens.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
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
    /* They overlapped (the count of jobs running at once, not the time
     * taken, which a busy machine stretches). */
    CHECK_GE(took, 50 * WEIR_MSEC);
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

/* weir__blocking_run_shielded (rt_int.h): a cancel does not end the wait
 * while the job runs - the fiber goes on only once the job has returned,
 * with its result - and off the runtime the job runs inline. */
struct shielded_args {
    atomic_int returned;
    int finished_then; /* `finished` when the wait returned */
    int64_t r;
};

static intptr_t shielded_fiber(void *p)
{
    struct shielded_args *a = p;
    a->r = weir__blocking_run_shielded(gated, (void *)7);
    a->finished_then = atomic_load(&finished);
    atomic_store(&a->returned, 1);
    return 0;
}

TEST(shielded_run_outlasts_a_cancel)
{
    pool_env(NULL, NULL);
    jobs_reset();
    weir_loop *l = weir_loop_new(NULL);
    struct shielded_args a = {0};
    weir_task *t = weir_task_spawn(shielded_fiber, &a, &(weir_spawn_opts){.loop = l});
    CHECK(t != NULL);
    poll_until(l, &started, 1);
    CHECK_EQ(weir_task_cancel(t), 0);
    int64_t until = weir_time_now() + 50 * WEIR_MSEC;
    while (weir_time_now() < until)
        CHECK_GE(weir_loop_poll(l, 1), 0);
    CHECK_EQ(atomic_load(&a.returned), 0); /* still waiting for the job */
    atomic_store(&gate_open, 1);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(atomic_load(&a.returned), 1);
    CHECK_EQ(a.r, 7);
    CHECK_EQ(a.finished_then, 1);
    weir_task_join(t, NULL, WEIR_FOREVER);
    weir_loop_free(l);
    /* Not a task: inline. */
    CHECK_EQ(weir__blocking_run_shielded(add_one, (void *)1), 2);
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

/* ---- discard ----------------------------------------------------------------------- */
/* A job argument on the heap, freed by whichever of fn and discard gets it;
 * each job has a slot counting both. */
enum { OWNED_MAX = 1 << 15 };
static atomic_int owned_ran[OWNED_MAX], owned_discarded[OWNED_MAX];
static atomic_int owned_next, owned_discards, discards_elsewhere;
static pthread_t discard_thread; /* where discards are expected (the test's thread) */

typedef struct owned {
    int slot;
    intptr_t value;
} owned;

static void owned_reset(void)
{
    int n = atomic_load(&owned_next);
    for (int i = 0; i < n && i < OWNED_MAX; i++) {
        atomic_store(&owned_ran[i], 0);
        atomic_store(&owned_discarded[i], 0);
    }
    atomic_store(&owned_next, 0);
    atomic_store(&owned_discards, 0);
    atomic_store(&discards_elsewhere, 0);
    discard_thread = pthread_self();
}

/* NULL once every slot is used (the churn test then stops submitting). */
static owned *owned_new(intptr_t value)
{
    int slot = atomic_fetch_add(&owned_next, 1);
    if (slot >= OWNED_MAX) {
        atomic_fetch_sub(&owned_next, 1);
        return NULL;
    }
    owned *o = malloc(sizeof(*o));
    CHECK(o != NULL);
    o->slot = slot;
    o->value = value;
    return o;
}

static intptr_t owned_run(void *arg)
{
    owned *o = arg;
    atomic_fetch_add(&owned_ran[o->slot], 1);
    intptr_t v = o->value + 1;
    free(o);
    return v;
}

static void owned_discard(void *arg)
{
    owned *o = arg;
    if (!pthread_equal(pthread_self(), discard_thread))
        atomic_fetch_add(&discards_elsewhere, 1);
    atomic_fetch_add(&owned_discarded[o->slot], 1);
    atomic_fetch_add(&owned_discards, 1);
    free(o);
}

/* Holds its thread until o->value jobs have been discarded: the jobs behind
 * it cannot reach a thread before they are dropped. */
static intptr_t owned_hold(void *arg)
{
    owned *o = arg;
    atomic_fetch_add(&started, 1);
    int64_t give_up = weir_time_now() + 10 * WEIR_SEC;
    while (atomic_load(&owned_discards) < o->value && weir_time_now() < give_up)
        sleep_ms(1);
    return owned_run(o);
}

/* Every one of the first n jobs went exactly one way; how many were dropped. */
static int owned_check(int n)
{
    int dropped = 0;
    for (int i = 0; i < n; i++) {
        int ran = atomic_load(&owned_ran[i]), disc = atomic_load(&owned_discarded[i]);
        if (ran + disc != 1)
            TEST__FAIL("job %d: ran %d, discarded %d", i, ran, disc);
        dropped += disc;
    }
    return dropped;
}

/* A fiber that runs one owned job through weir_blocking_run_ex. */
struct ex_args {
    weir_blocking_fn fn;
    intptr_t value;
    int64_t deadline_ms; /* < 0: none */
    int slot;
    int64_t result;
    int discarded_at_return; /* the slot's discard count when the wait returned */
};

static intptr_t ex_fiber(void *p)
{
    struct ex_args *a = p;
    owned *o = owned_new(a->value);
    CHECK(o != NULL);
    a->slot = o->slot;
    a->result = weir_blocking_run_ex(a->fn, o, owned_discard, weir_time_after_ms(a->deadline_ms));
    a->discarded_at_return = atomic_load(&owned_discarded[a->slot]);
    return 0;
}

static weir_task *spawn_ex(weir_loop *l, struct ex_args *a)
{
    weir_task *t = weir_task_spawn(ex_fiber, a, &(weir_spawn_opts){.name = "ex", .loop = l});
    CHECK(t != NULL);
    return t;
}

/* A job that runs gets fn and never discard; the argument is freed once. */
TEST(discard_not_called_for_a_job_that_ran)
{
    pool_env(NULL, NULL);
    jobs_reset();
    owned_reset();
    weir_loop *l = weir_loop_new(NULL);
    struct ex_args a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (struct ex_args){owned_run, 10 * i, -1, -1, 0, 0};
        weir_task_detach(spawn_ex(l, &a[i]));
    }
    CHECK_EQ(weir_loop_run(l), 0);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(a[i].result, 10 * i + 1);
        CHECK_EQ(atomic_load(&owned_ran[a[i].slot]), 1);
    }
    weir_loop_free(l);
    CHECK_EQ(owned_check(4), 0);
}

/* Refused at start - bad arguments, outside a task, a stackless caller of the
 * fiber form, a task already cancelled, a deadline already past: fn never
 * runs and discard is called once, before the call returns. */
static intptr_t refusals_fiber(void *p)
{
    (void)p;
    weir_op op;
    int base = atomic_load(&owned_discards);
    owned *o = owned_new(0);
    CHECK_EQ(weir_blocking_start_ex(&op, NULL, o, owned_discard, WEIR_FOREVER), -EINVAL);
    CHECK_EQ(atomic_load(&owned_discards), base + 1);
    CHECK_EQ(weir_op_wait(&op), -EINVAL); /* never started */
    CHECK_EQ(weir_blocking_start_ex(NULL, owned_run, owned_new(0), owned_discard, WEIR_FOREVER),
             -EINVAL);
    CHECK_EQ(atomic_load(&owned_discards), base + 2);
    CHECK_EQ(weir_blocking_run_ex(NULL, owned_new(0), owned_discard, WEIR_FOREVER), -EINVAL);
    CHECK_EQ(atomic_load(&owned_discards), base + 3);
    /* A deadline already past: done at once, never queued. */
    CHECK_EQ(weir_blocking_run_ex(owned_run, owned_new(0), owned_discard, weir_time_now() - 1),
             -ETIMEDOUT);
    CHECK_EQ(atomic_load(&owned_discards), base + 4);
    CHECK_EQ(
        weir_blocking_start_ex(&op, owned_run, owned_new(0), owned_discard, weir_time_now() - 1),
        0);
    CHECK_EQ(atomic_load(&owned_discards), base + 5); /* before the op is even awaited */
    CHECK_EQ(weir_op_wait(&op), -ETIMEDOUT);
    /* Cancelled already. */
    weir_task_cancel(weir_task_current());
    CHECK_EQ(weir_blocking_run_ex(owned_run, owned_new(0), owned_discard, WEIR_FOREVER),
             -ECANCELED);
    CHECK_EQ(atomic_load(&owned_discards), base + 6);
    return 0;
}

struct sl_refusal {
    weir_co co;
};

static int sl_refusal_poll(void *p, intptr_t *out)
{
    struct sl_refusal *f = p;
    WEIR_BEGIN(&f->co);
    /* The fiber form from a stackless task. */
    CHECK_EQ(weir_blocking_run_ex(owned_run, owned_new(0), owned_discard, WEIR_FOREVER), -EINVAL);
    WEIR_RETURN(&f->co, out, 0);
    WEIR_END(&f->co);
}

TEST(discard_on_refusal)
{
    pool_env(NULL, NULL);
    jobs_reset();
    owned_reset();
    /* Outside any task. */
    weir_op op;
    CHECK_EQ(weir_blocking_run_ex(owned_run, owned_new(0), owned_discard, WEIR_FOREVER), -EINVAL);
    CHECK_EQ(weir_blocking_start_ex(&op, owned_run, owned_new(0), owned_discard, WEIR_FOREVER),
             -EINVAL);
    CHECK_EQ(atomic_load(&owned_discards), 2);
    weir_loop *l = weir_loop_new(NULL);
    weir_task *t = weir_task_spawn(refusals_fiber, NULL, &(weir_spawn_opts){.loop = l});
    struct sl_refusal f = {0};
    weir_task *s = weir_task_spawn_stackless(sl_refusal_poll, &f, &(weir_spawn_opts){.loop = l});
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), -ECANCELED); /* it cancelled itself */
    CHECK_EQ(join(s), 0);
    weir_loop_free(l);
    CHECK_EQ(owned_check(atomic_load(&owned_next)), 9);
    CHECK_EQ(atomic_load(&discards_elsewhere), 0);
    /* NULL discard behaves as weir_blocking_start: nothing to call. */
    CHECK_EQ(weir_blocking_start_ex(&op, add_one, NULL, NULL, WEIR_FOREVER), -EINVAL);
}

/* One thread, a one-slot queue: H runs and holds the thread until two jobs
 * were discarded, Q is queued, W waits for a slot. A cancel drops Q and a
 * timeout drops W: each is discarded once, on the loop thread, before its
 * wait returns, and never runs; H runs and is not discarded. */
TEST(discard_on_cancel_and_timeout_in_queue)
{
    pool_env("1", "1");
    jobs_reset();
    owned_reset();
    weir_loop *l = weir_loop_new(NULL);
    struct ex_args h = {owned_hold, 2, -1, -1, 0, 0};
    struct ex_args q = {owned_run, 10, -1, -1, 0, 0};
    struct ex_args w = {owned_run, 20, 500, -1, 0, 0};
    weir_task *th = spawn_ex(l, &h), *tq = spawn_ex(l, &q), *tw = spawn_ex(l, &w);
    poll_until(l, &started, 1);
    struct weir__pool *p = l->pool;
    CHECK_EQ(weir__pool_queued(p), 1);
    CHECK_EQ(weir__pool_waiting(p), 1);
    CHECK_EQ(weir_task_cancel(tq), 0);
    CHECK_EQ(weir_loop_run(l), 0); /* W times out; H then sees two discards */
    CHECK_EQ(join(th), 0);
    CHECK_EQ(weir_task_join(tq, NULL, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(join(tw), 0);
    CHECK_EQ(h.result, 3);
    CHECK_EQ(q.result, -ECANCELED);
    CHECK_EQ(w.result, -ETIMEDOUT);
    CHECK_EQ(q.discarded_at_return, 1);
    CHECK_EQ(w.discarded_at_return, 1);
    CHECK_EQ(h.discarded_at_return, 0);
    weir_loop_free(l);
    CHECK_EQ(owned_check(3), 2);
    CHECK_EQ(atomic_load(&owned_ran[h.slot]), 1);
    CHECK_EQ(atomic_load(&discards_elsewhere), 0);
    pool_env(NULL, NULL);
}

/* A cancelled wait on a running job: no discard; fn finishes in the
 * background and frees the argument itself. */
TEST(discard_not_called_for_a_detached_job)
{
    pool_env(NULL, NULL);
    jobs_reset();
    owned_reset();
    weir_loop *l = weir_loop_new(NULL);
    struct ex_args h = {owned_hold, 1, -1, -1, 0, 0}; /* returns after 10 s at most */
    weir_task *t = spawn_ex(l, &h);
    poll_until(l, &started, 1);
    CHECK_EQ(weir_task_cancel(t), 0);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(h.result, -ECANCELED);
    CHECK_EQ(h.discarded_at_return, 0);
    /* Let it go: a discard somewhere else releases the holder. */
    owned *o = owned_new(0);
    owned_discard(o);
    weir_loop_free(l); /* joins the worker, so the job has returned */
    CHECK_EQ(atomic_load(&owned_ran[h.slot]), 1);
    CHECK_EQ(atomic_load(&owned_discarded[h.slot]), 0);
    CHECK_EQ(owned_check(2), 1);
}

/* Freeing the loop with a job running, one queued and one waiting for a slot:
 * the cancels that shutdown sends drop the queued and the waiting one (each
 * discarded once, on the thread freeing the loop, never run), the running
 * one is detached and runs to its end without a discard. */
TEST(discard_queued_jobs_at_loop_free)
{
    pool_env("1", "1");
    jobs_reset();
    owned_reset();
    weir_loop *l = weir_loop_new(NULL);
    static struct ex_args h, q, w;
    h = (struct ex_args){owned_hold, 2, -1, -1, 0, 0};
    q = (struct ex_args){owned_run, 10, -1, -1, 0, 0};
    w = (struct ex_args){owned_run, 20, -1, -1, 0, 0};
    weir_task_detach(spawn_ex(l, &h));
    weir_task_detach(spawn_ex(l, &q));
    weir_task_detach(spawn_ex(l, &w));
    poll_until(l, &started, 1);
    CHECK_EQ(weir__pool_queued(l->pool), 1);
    CHECK_EQ(weir__pool_waiting(l->pool), 1);
    weir_loop_free(l);
    CHECK_EQ(q.result, -ECANCELED);
    CHECK_EQ(w.result, -ECANCELED);
    /* The holder's job ends as soon as the two discards happen, and the
     * free cancels the tasks one by one: its waiter may see the job's
     * result (3) before its own cancel arrives. Either way the job ran. */
    CHECK(h.result == -ECANCELED || h.result == 3);
    CHECK_EQ(q.discarded_at_return, 1);
    CHECK_EQ(w.discarded_at_return, 1);
    CHECK_EQ(owned_check(3), 2);
    CHECK_EQ(atomic_load(&owned_ran[h.slot]), 1); /* joined by the free */
    CHECK_EQ(atomic_load(&owned_ran[q.slot]), 0);
    CHECK_EQ(atomic_load(&owned_ran[w.slot]), 0);
    CHECK_EQ(atomic_load(&discards_elsewhere), 0);
    pool_env(NULL, NULL);
}

/* A stackless task that starts a job and returns without collecting it
 * leaves the job queued: the pool's free drops it, calls its discard once
 * (on the freeing thread, before joining the workers - the running job here
 * waits for that discard), and never runs it or touches its op. */
struct sl_abandon {
    weir_co co;
    weir_op op;
    int slot;
};

static int sl_abandon_poll(void *p, intptr_t *out)
{
    struct sl_abandon *f = p;
    WEIR_BEGIN(&f->co);
    owned *o = owned_new(30);
    f->slot = o->slot;
    CHECK_EQ(weir_blocking_start_ex(&f->op, owned_run, o, owned_discard, WEIR_FOREVER), 0);
    WEIR_RETURN(&f->co, out, 0); /* the op is left behind */
    WEIR_END(&f->co);
}

TEST(discard_abandoned_job_at_pool_free)
{
    pool_env("1", NULL);
    jobs_reset();
    owned_reset();
    weir_loop *l = weir_loop_new(NULL);
    static struct ex_args h;
    h = (struct ex_args){owned_hold, 1, -1, -1, 0, 0};
    weir_task_detach(spawn_ex(l, &h));
    poll_until(l, &started, 1);
    static struct sl_abandon f;
    f = (struct sl_abandon){0};
    weir_task *s = weir_task_spawn_stackless(sl_abandon_poll, &f, &(weir_spawn_opts){.loop = l});
    CHECK(s != NULL);
    for (int i = 0; i < 10 && weir__pool_queued(l->pool) == 0; i++)
        CHECK_GE(weir_loop_poll(l, 0), 0);
    CHECK_EQ(join(s), 0);
    CHECK_EQ(weir__pool_queued(l->pool), 1);
    CHECK_EQ(atomic_load(&owned_discards), 0);
    weir_loop_free(l);
    CHECK_EQ(atomic_load(&owned_discarded[f.slot]), 1);
    CHECK_EQ(atomic_load(&owned_ran[f.slot]), 0);
    CHECK_EQ(atomic_load(&owned_ran[h.slot]), 1);
    CHECK_EQ(owned_check(2), 1);
    CHECK_EQ(atomic_load(&discards_elsewhere), 0);
    pool_env(NULL, NULL);
}

/* Churn on a two-thread runtime: jobs with short deadlines race the workers
 * that take them (a timeout drops a queued job or detaches a running one),
 * and the runtime is freed while jobs are queued, running and starting.
 * Every job started went exactly one way. */
static intptr_t churn_job(void *arg)
{
    owned *o = arg;
    if (o->value & 1)
        sched_yield();
    return owned_run(o);
}

static intptr_t discard_churn_fiber(void *p)
{
    unsigned seed = (unsigned)(uintptr_t)p;
    while (!weir_task_cancelled()) {
        seed = seed * 1103515245u + 12345u;
        owned *o = owned_new((intptr_t)(seed >> 16));
        if (!o)
            break;
        int64_t deadline = (seed >> 8) % 4 ? WEIR_FOREVER : weir_time_now() + (seed >> 12) % 50000;
        int64_t r = weir_blocking_run_ex(churn_job, o, owned_discard, deadline);
        if (r == -ECANCELED)
            break;
    }
    return 0;
}

TEST(discard_churn_runtime_free)
{
    enum { N = 24 };
    pool_env("2", "4");
    jobs_reset();
    owned_reset();
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = 2});
    CHECK(rt != NULL);
    for (int i = 0; i < N; i++) {
        weir_task *t = weir_task_spawn(discard_churn_fiber, (void *)(uintptr_t)(i * 7919 + 1),
                                       &(weir_spawn_opts){.rt = rt});
        CHECK(t != NULL);
        weir_task_detach(t);
    }
    int64_t until = weir_time_now() + 150 * WEIR_MSEC;
    while (weir_time_now() < until && atomic_load(&owned_next) < OWNED_MAX / 2)
        sleep_ms(1);
    weir_rt_free(rt);
    int n = atomic_load(&owned_next);
    int dropped = owned_check(n);
    printf("    %d jobs: %d ran, %d discarded\n", n, n - dropped, dropped);
    CHECK_GT(n, 0);
    pool_env(NULL, NULL);
}

TEST_MAIN()
