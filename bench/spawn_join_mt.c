/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spawn_join_mt.c - spawn + join of 1M tiny tasks on the multi-threaded
 * runtime (2 scheduler threads by default), stackless and fibers: what a
 * task costs when its spawner's thread and an idle thread share the work.
 *
 * Exactly what is measured, so that peers can do the same:
 *
 *   - a runtime of T scheduler threads (weir_rt_new, threads=T; Tokio
 *     multi_thread with worker_threads(T); Go GOMAXPROCS=T). One task, the
 *     "main" task, is spawned into it from outside (weir: a fiber with
 *     .rt = rt; Tokio: tokio::spawn of the main future, which block_on
 *     awaits; Go: the main goroutine) and does all the work below; the
 *     program's own thread only waits for it.
 *   - main runs 1 untimed warm-up run, then `runs` timed runs (BENCH_RUNS,
 *     default 5). A run: for batch in 0..N/B: spawn B tasks, task i
 *     returning i + 1, from inside the runtime with default options (weir:
 *     NULL opts, so the task goes to the spawning thread's queue, from which
 *     the other threads steal; Tokio: tokio::spawn; Go: `go`), keeping the B
 *     join handles; then join the B handles in spawn order, adding up the
 *     results (checked at the end). N = 1,000,000, B = 1000.
 *   - the clock runs in main from the first spawn to the last join;
 *     ns_per_task = that time / N; the median over the runs is printed.
 *   - peak_rss_mib: the process's peak RSS (getrusage ru_maxrss) after all
 *     runs; the stackless line runs first, so the fiber line's figure is
 *     the maximum of both.
 *
 * Join: weir_task_join (the fiber parks until the task has ended); Tokio:
 * JoinHandle .await; Go has no join handle: its peer prints two lines,
 * join=waitgroup (one sync.WaitGroup per batch, each goroutine stores its
 * result in a slice and calls Done) and join=chan (one `chan int64` of
 * capacity 1 per goroutine, received in spawn order - a join handle).
 *
 * Fibers get 16 KiB stacks (as in spawn_join). Each kind runs on a fresh
 * runtime; the scheduler counters summed over its threads (warm-up
 * included: (runs + 1) * N tasks, plus main) follow the figures:
 * polls=P0/P1 per thread, steals (tasks taken from another thread's queue),
 * injected (taken from the injection queue), lifo_polls (polls of a task
 * from the LIFO slot), parks (waits that could block a thread).
 *
 *   bench=spawn_join_mt impl=weir-uring kind=stackless threads=2 tasks=1000000
 *       batch=1000 ns_per_task=... peak_rss_mib=... runs=5 polls=.../...
 *       steals=... injected=... lifo_polls=... parks=...
 *
 *   spawn_join_mt [threads [tasks [batch [stackless|fiber]]]]
 *       defaults: $WEIR_THREADS or 2, 1000000, 1000 (BENCH_QUICK=1:
 *       200000), both kinds
 */
#include <errno.h>

#include "bench.h"

static long ntasks = 1000000, batch = 1000;

static intptr_t tiny_fiber(void *arg)
{
    return (intptr_t)arg + 1;
}

struct tiny_frame {
    intptr_t arg;
};

static int tiny_poll(void *p, intptr_t *out)
{
    *out = ((struct tiny_frame *)p)->arg + 1;
    return WEIR_READY;
}

/* One run from inside the runtime: 0, or a negative errno. */
static int run(int stackless, weir_task **h, struct tiny_frame *frames)
{
    weir_spawn_opts o = {.name = "tiny", .stack_size = 16 * 1024};
    intptr_t sum = 0;
    for (long done = 0; done < ntasks; done += batch) {
        for (long i = 0; i < batch; i++) {
            frames[i].arg = i;
            h[i] = stackless ? weir_task_spawn_stackless(tiny_poll, &frames[i], &o)
                             : weir_task_spawn(tiny_fiber, (void *)(intptr_t)i, &o);
            if (!h[i])
                return -errno;
        }
        for (long i = 0; i < batch; i++) {
            intptr_t r;
            int err = weir_task_join(h[i], &r, WEIR_FOREVER);
            if (err < 0)
                return err;
            sum += r;
        }
    }
    /* each batch adds 1 + 2 + ... + batch */
    return sum == (ntasks / batch) * (batch * (batch + 1) / 2) ? 0 : -EINVAL;
}

struct job {
    int stackless, runs;
    double ns[100];
};

/* The main task: warm-up, then the timed runs. */
static intptr_t main_fiber(void *arg)
{
    struct job *j = arg;
    weir_task **h = malloc((size_t)batch * sizeof(*h));
    struct tiny_frame *frames = malloc((size_t)batch * sizeof(*frames));
    int err = h && frames ? 0 : -ENOMEM;
    if (!err)
        err = run(j->stackless, h, frames); /* warm-up: stacks, task caches */
    for (int r = 0; r < j->runs && !err; r++) {
        int64_t t0 = weir_time_now();
        err = run(j->stackless, h, frames);
        j->ns[r] = (double)(weir_time_now() - t0) / (double)ntasks;
    }
    free(h);
    free(frames);
    return err;
}

static int measure(int threads, int stackless, int runs)
{
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = threads});
    if (!rt) {
        fprintf(stderr, "spawn_join_mt: weir_rt_new: %s\n", strerror(errno));
        return -1;
    }
    struct job j = {.stackless = stackless, .runs = runs};
    weir_task *m = weir_task_spawn(main_fiber, &j, &(weir_spawn_opts){.name = "main", .rt = rt});
    intptr_t rc = -EINVAL;
    int jr = m ? weir_task_join(m, &rc, WEIR_FOREVER) : -errno;
    if (jr < 0 || rc != 0) {
        fprintf(stderr, "spawn_join_mt: %s run failed: %s\n", stackless ? "stackless" : "fiber",
                weir_strerror(jr < 0 ? jr : (int)rc));
        weir_rt_free(rt);
        return -1;
    }
    weir_loop_stats sum;
    uint64_t polls[256];
    bench_rt_stats(rt, &sum, polls);
    printf("bench=spawn_join_mt impl=%s kind=%s threads=%d tasks=%ld batch=%ld ns_per_task=%.1f "
           "peak_rss_mib=%.1f runs=%d polls=%s steals=%llu injected=%llu lifo_polls=%llu "
           "parks=%llu\n",
           bench_impl_rt(rt), stackless ? "stackless" : "fiber", threads, ntasks, batch,
           bench_median(j.ns, runs), (double)bench_peak_rss_kb() / 1024.0, runs,
           bench_fmt_polls(polls, threads), (unsigned long long)sum.steals,
           (unsigned long long)sum.injected, (unsigned long long)sum.lifo_polls,
           (unsigned long long)sum.parks);
    fflush(stdout);
    weir_rt_free(rt);
    return 0;
}

int main(int argc, char **argv)
{
    const char *q = getenv("BENCH_QUICK");
    if (q && strcmp(q, "1") == 0)
        ntasks = 200000;
    long threads = bench_threads(2);
    if (argc > 1)
        threads = bench_parse_long(argv[1], threads);
    if (argc > 2)
        ntasks = bench_parse_long(argv[2], ntasks);
    if (argc > 3)
        batch = bench_parse_long(argv[3], batch);
    int kinds = 3; /* bit 1: stackless, bit 0: fiber */
    if (argc > 4)
        kinds = strcmp(argv[4], "stackless") == 0 ? 2 : strcmp(argv[4], "fiber") == 0 ? 1 : 0;
    if (threads <= 0 || threads > 256 || ntasks <= 0 || batch <= 0 || ntasks % batch || !kinds) {
        fprintf(stderr, "usage: spawn_join_mt [threads (1-256) [tasks [batch dividing tasks "
                        "[stackless|fiber]]]]\n");
        return 2;
    }
    int runs = bench_runs(5);
    for (int stackless = 1; stackless >= 0; stackless--)
        if ((kinds >> stackless & 1) && measure((int)threads, stackless, runs) < 0)
            return 1;
    return 0;
}
