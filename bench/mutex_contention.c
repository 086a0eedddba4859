/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mutex_contention.c - throughput of weir_mutex under contention, for
 * comparison with Go's sync.Mutex and Tokio's tokio::sync::Mutex.
 *
 * What one run does (peers must do exactly this):
 *
 *   - one shared counter (a plain 64-bit integer) guarded by one mutex;
 *   - 4 tasks in total, all started before the clock starts and released
 *     together; each runs this loop ITERS times (default 100000):
 *
 *         for i in 0..ITERS:
 *             lock(m); counter += 1; unlock(m)
 *             if (i + 1) % 64 == 0: yield            (outside the lock)
 *
 *     The yield (weir_task_yield; Go runtime.Gosched(); Tokio
 *     tokio::task::yield_now().await) gives the other task on the same
 *     thread a turn regularly, as a real service would; nothing else
 *     suspends except lock() itself when the mutex is taken.
 *   - threads=2: two event loops on two OS threads, 2 tasks on each
 *     (Go: GOMAXPROCS=2 with 4 goroutines; Tokio: multi_thread runtime with
 *     worker_threads(2) and 4 spawned tasks). threads=1: one loop running
 *     all 4 tasks (Go: GOMAXPROCS=1; Tokio: current_thread runtime).
 *   - the clock runs from the release of the tasks until the last one has
 *     finished; the run checks counter == 4 * ITERS.
 *
 *   ops      = 4 * ITERS lock/unlock pairs
 *   ops_per_s = ops / seconds,  ns_per_op = seconds * 1e9 / ops
 *
 * Each configuration runs BENCH_RUNS times (default 5) and the median is
 * printed, one line per thread count:
 *
 *   bench=mutex_contention impl=weir-uring threads=2 tasks=4 iters=100000
 *       yield_every=64 ops_per_s=... ns_per_op=... runs=5
 *
 * weir's mutex works like Go's: unlock normally releases the lock and wakes
 * one waiter to compete (running tasks may barge), and only a waiter that
 * waited over 1 ms gets strict hand-off; Tokio's mutex always hands off in
 * FIFO order, so under contention each of its hand-offs to a task parked on
 * another thread costs a cross-thread wake.
 *
 *   mutex_contention [iters]
 */
#include <pthread.h>
#include <stdatomic.h>

#include "bench.h"
#include "weir/sync.h"

#define TASKS       4
#define YIELD_EVERY 64

static long iters = 100000;
static weir_mutex *mu;
static long counter;   /* guarded by mu */
static _Atomic int go; /* released: the tasks start (acquire/release pair) */
/* threads=2: `ready` once both loops have their tasks; `done` once both
 * loops have run dry - a task's last wake of a task on the other loop may
 * still be inside that loop's wake path, so neither loop is freed before. */
static pthread_barrier_t ready, done;

static intptr_t worker(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&go, memory_order_acquire))
        weir_task_yield();
    for (long i = 0; i < iters; i++) {
        weir_mutex_lock(mu, WEIR_FOREVER);
        counter++;
        weir_mutex_unlock(mu);
        if ((i + 1) % YIELD_EVERY == 0)
            weir_task_yield();
    }
    return 0;
}

/* One loop with `ntasks` workers; the caller's thread runs it. */
static void run_loop(int ntasks)
{
    weir_loop *l = weir_loop_new(NULL);
    if (!l) {
        perror("weir_loop_new");
        exit(1);
    }
    weir_task *t[TASKS];
    for (int i = 0; i < ntasks; i++)
        t[i] = weir_task_spawn(worker, NULL, &(weir_spawn_opts){.name = "worker", .loop = l});
    pthread_barrier_wait(&ready);
    weir_loop_run(l);
    for (int i = 0; i < ntasks; i++)
        weir_task_join(t[i], NULL, WEIR_FOREVER);
    pthread_barrier_wait(&done);
    weir_loop_free(l);
}

static void *second_thread(void *arg)
{
    run_loop((int)(intptr_t)arg);
    return NULL;
}

/* Seconds for one run with `threads` loops (1 or 2). */
static double one_run(int threads)
{
    counter = 0;
    atomic_store(&go, 0);
    pthread_t th;
    if (threads == 2) {
        pthread_barrier_init(&ready, NULL, 2); /* this thread and the second */
        pthread_barrier_init(&done, NULL, 2);
        pthread_create(&th, NULL, second_thread, (void *)(intptr_t)(TASKS / 2));
    }
    /* The loops' tasks spin on `go` with yields until released; this
     * thread releases them once both loops exist, then runs its own. */
    weir_loop *l = weir_loop_new(NULL);
    if (!l) {
        perror("weir_loop_new");
        exit(1);
    }
    int mine = threads == 2 ? TASKS / 2 : TASKS;
    weir_task *t[TASKS];
    for (int i = 0; i < mine; i++)
        t[i] = weir_task_spawn(worker, NULL, &(weir_spawn_opts){.name = "worker", .loop = l});
    if (threads == 2)
        pthread_barrier_wait(&ready); /* the other loop is populated */
    int64_t t0 = weir_time_now();
    atomic_store_explicit(&go, 1, memory_order_release);
    weir_loop_run(l);
    for (int i = 0; i < mine; i++)
        weir_task_join(t[i], NULL, WEIR_FOREVER);
    if (threads == 2)
        pthread_barrier_wait(&done);
    double secs = (double)(weir_time_now() - t0) / 1e9;
    if (threads == 2) {
        pthread_join(th, NULL);
        pthread_barrier_destroy(&ready);
        pthread_barrier_destroy(&done);
    }
    weir_loop_free(l);
    if (counter != TASKS * iters) {
        fprintf(stderr, "mutex_contention: counter %ld, expected %ld\n", counter, TASKS * iters);
        exit(1);
    }
    return secs;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        iters = atol(argv[1]);
    if (iters <= 0) {
        fprintf(stderr, "usage: mutex_contention [iters]\n");
        return 2;
    }
    mu = weir_mutex_new();
    int runs = bench_runs(5);
    char impl[32];
    {
        /* The label needs a loop on this thread: make one just to ask. */
        weir_loop *l = weir_loop_new(NULL);
        snprintf(impl, sizeof(impl), "%s", bench_impl());
        weir_loop_free(l);
    }
    static const int variants[] = {2, 1};
    for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
        int threads = variants[v];
        double secs[100];
        for (int r = 0; r < runs; r++)
            secs[r] = one_run(threads);
        double med = bench_median(secs, runs);
        double ops = (double)TASKS * (double)iters;
        printf("bench=mutex_contention impl=%s threads=%d tasks=%d iters=%ld yield_every=%d "
               "ops_per_s=%.0f ns_per_op=%.1f runs=%d\n",
               impl, threads, TASKS, iters, YIELD_EVERY, ops / med, med * 1e9 / ops, runs);
    }
    weir_mutex_free(mu);
    return 0;
}
