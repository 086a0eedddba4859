/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scaling.c - does CPU-bound work spread over the runtime's threads? A
 * fan-out of many small compute tasks on 1 and on T threads (T = 2 by
 * default), and the speedup between the two.
 *
 * Exactly what is measured, so that peers can do the same:
 *
 *   - the work of task i (0 <= i < N) is work(i, ITERS), with
 *
 *         uint64 work(uint64 seed, long iters):
 *             x = seed * 0x9E3779B97F4A7C15 + 1          (wrapping)
 *             repeat iters times:
 *                 x ^= x << 13; x ^= x >> 7; x ^= x << 17  (xorshift64)
 *             return x
 *
 *     a serial dependency chain the compiler can neither vectorise nor
 *     remove (the result is returned and summed). N = 200,000 tasks,
 *     ITERS = 2000: about 3.5 us of work per task, 0.7 s per run on one
 *     core of the 2-core VM.
 *   - a runtime of `threads` scheduler threads (weir_rt_new; Tokio
 *     multi_thread with worker_threads(threads), also for threads=1; Go
 *     GOMAXPROCS=threads) runs one "main" task, spawned from outside (weir:
 *     a fiber with .rt = rt; Tokio: tokio::spawn, awaited by block_on; Go:
 *     the main goroutine).
 *   - main does 1 untimed warm-up run, then `runs` timed runs (BENCH_RUNS,
 *     default 5). A run: spawn all N tasks from main with default options
 *     (weir: stackless tasks, NULL opts, so they go to main's thread's queue
 *     and the other threads steal them; Tokio: tokio::spawn; Go: `go`),
 *     keeping the N join handles; then join them in spawn order, adding up
 *     the results (wrapping) into a checksum. Go joins with a WaitGroup
 *     (each goroutine stores its result in a slice).
 *   - the clock runs in main from the first spawn to the last join;
 *     wall_ms is the median over the runs, us_per_task = wall / N.
 *   - threads=1 runs first, then threads=T on a new runtime; the T line
 *     also prints speedup = median wall(threads=1) / median wall(threads=T).
 *   - checksum is the sum of all N results in hex: the same in every
 *     implementation, proof that they did the same work.
 *
 * The scheduler counters of each runtime follow (summed over its threads,
 * warm-up included; see spawn_join_mt.c).
 *
 *   bench=scaling impl=weir-uring threads=2 tasks=200000 iters=2000
 *       wall_ms=... us_per_task=... speedup=... checksum=... runs=5 ...
 *
 *   scaling [threads [tasks [iters]]]
 *       defaults: $WEIR_THREADS or 2, 200000 (BENCH_QUICK=1: 50000), 2000
 */
#include <errno.h>

#include "bench.h"

static long ntasks = 200000, iters = 2000;

static uint64_t work(uint64_t seed, long n)
{
    uint64_t x = seed * UINT64_C(0x9E3779B97F4A7C15) + 1;
    for (long i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

struct work_frame {
    uint64_t seed;
};

static int work_poll(void *p, intptr_t *out)
{
    *out = (intptr_t)work(((struct work_frame *)p)->seed, iters);
    return WEIR_READY;
}

/* One run from inside the runtime: 0 or a negative errno. */
static int run(weir_task **h, struct work_frame *frames, uint64_t *checksum)
{
    weir_spawn_opts o = {.name = "work"};
    for (long i = 0; i < ntasks; i++) {
        frames[i].seed = (uint64_t)i;
        if (!(h[i] = weir_task_spawn_stackless(work_poll, &frames[i], &o)))
            return -errno;
    }
    uint64_t sum = 0;
    int err = 0;
    for (long i = 0; i < ntasks; i++) {
        intptr_t r;
        int e = weir_task_join(h[i], &r, WEIR_FOREVER);
        if (e < 0 && !err)
            err = e; /* keep joining: the frames must outlive the tasks */
        sum += (uint64_t)r;
    }
    *checksum = sum;
    return err;
}

struct job {
    int runs;
    double ms[100];
    uint64_t checksum;
};

static intptr_t main_fiber(void *arg)
{
    struct job *j = arg;
    weir_task **h = malloc((size_t)ntasks * sizeof(*h));
    struct work_frame *frames = malloc((size_t)ntasks * sizeof(*frames));
    int err = h && frames ? 0 : -ENOMEM;
    if (!err)
        err = run(h, frames, &j->checksum); /* warm-up */
    for (int r = 0; r < j->runs && !err; r++) {
        uint64_t sum;
        int64_t t0 = weir_time_now();
        err = run(h, frames, &sum);
        j->ms[r] = (double)(weir_time_now() - t0) / 1e6;
        if (!err && sum != j->checksum)
            err = -EINVAL;
    }
    free(h);
    free(frames);
    return err;
}

/* Median wall in ms for `threads`, printed; -1 on failure. */
static double measure(int threads, int runs, double base_ms)
{
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = threads});
    if (!rt) {
        fprintf(stderr, "scaling: weir_rt_new: %s\n", strerror(errno));
        return -1;
    }
    struct job j = {.runs = runs};
    weir_task *m = weir_task_spawn(main_fiber, &j, &(weir_spawn_opts){.name = "main", .rt = rt});
    intptr_t rc = -EINVAL;
    int jr = m ? weir_task_join(m, &rc, WEIR_FOREVER) : -errno;
    if (jr < 0 || rc != 0) {
        fprintf(stderr, "scaling: threads=%d failed: %s\n", threads,
                weir_strerror(jr < 0 ? jr : (int)rc));
        weir_rt_free(rt);
        return -1;
    }
    weir_loop_stats sum;
    uint64_t polls[256];
    bench_rt_stats(rt, &sum, polls);
    double ms = bench_median(j.ms, runs);
    char speedup[32] = "";
    if (base_ms > 0)
        snprintf(speedup, sizeof(speedup), " speedup=%.2f", base_ms / ms);
    printf("bench=scaling impl=%s threads=%d tasks=%ld iters=%ld wall_ms=%.1f us_per_task=%.3f%s "
           "checksum=%016llx runs=%d polls=%s steals=%llu injected=%llu parks=%llu\n",
           bench_impl_rt(rt), threads, ntasks, iters, ms, ms * 1e3 / (double)ntasks, speedup,
           (unsigned long long)j.checksum, runs, bench_fmt_polls(polls, threads),
           (unsigned long long)sum.steals, (unsigned long long)sum.injected,
           (unsigned long long)sum.parks);
    fflush(stdout);
    weir_rt_free(rt);
    return ms;
}

int main(int argc, char **argv)
{
    const char *q = getenv("BENCH_QUICK");
    if (q && strcmp(q, "1") == 0)
        ntasks = 50000;
    long threads = bench_threads(2);
    if (argc > 1)
        threads = bench_parse_long(argv[1], threads);
    if (argc > 2)
        ntasks = bench_parse_long(argv[2], ntasks);
    if (argc > 3)
        iters = bench_parse_long(argv[3], iters);
    if (threads <= 0 || threads > 256 || ntasks <= 0 || iters <= 0) {
        fprintf(stderr, "usage: scaling [threads (1-256) [tasks [iters]]]\n");
        return 2;
    }
    int runs = bench_runs(5);
    double base = measure(1, runs, 0);
    if (base < 0)
        return 1;
    if (threads > 1 && measure((int)threads, runs, base) < 0)
        return 1;
    return 0;
}
