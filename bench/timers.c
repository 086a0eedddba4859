/* SPDX-License-Identifier: Apache-2.0 */
/*
 * timers.c - one million concurrent timers with random deadlines in
 * 0..1000 ms, each held by its own stackless task (the task sleeps until its
 * deadline, then ends); then 100k fibers with 16 KiB stacks doing the same.
 * Reports wall time from the first spawn to the last task's end, and the
 * process's peak RSS. One configuration per process run (peak RSS is
 * per process), chosen by argv[1]: "stackless" (default) or "fiber".
 *
 *   timers [stackless|fiber] [count]
 */
#include "bench.h"

/* 72 bytes: the resume point, the due time as a millisecond offset (it
 * only matters until the sleep starts; the op keeps it after), the op. */
struct tframe {
    weir_co co;
    int32_t due_ms;
    weir_op op;
};
static int64_t t0;

static long fired;

static int tpoll(void *p, intptr_t *out)
{
    struct tframe *f = p;
    int64_t res;
    WEIR_BEGIN(&f->co);
    weir_time_sleep_start(&f->op, t0 + f->due_ms * WEIR_MSEC);
    WEIR_AWAIT(&f->co, &f->op, res);
    fired++;
    WEIR_RETURN(&f->co, out, res);
    WEIR_END(&f->co);
}

static intptr_t tfiber(void *arg)
{
    int r = weir_time_sleep_until((int64_t)(intptr_t)arg);
    fired++;
    return r;
}

static uint64_t rng = 88172645463325252ull;
static int64_t rand_ms(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int64_t)(rng % 1000);
}

static int bench_main(int argc, char **argv)
{
    int fibers = argc > 1 && strcmp(argv[1], "fiber") == 0;
    long n = argc > 2 ? atol(argv[2]) : fibers ? 100000 : 1000000;
    if (n <= 0)
        return 2;
    struct tframe *frames = fibers ? NULL : calloc((size_t)n, sizeof(*frames));
    t0 = weir_time_now();
    weir_spawn_opts o = {.name = "timer", .stack_size = 16 * 1024};
    for (long i = 0; i < n; i++) {
        int64_t ms = rand_ms();
        weir_task *t;
        if (fibers) {
            t = weir_task_spawn(tfiber, (void *)(intptr_t)(t0 + ms * WEIR_MSEC), &o);
        } else {
            frames[i].due_ms = (int32_t)ms;
            t = weir_task_spawn_stackless(tpoll, &frames[i], &o);
        }
        if (!t) {
            perror("timers: spawn");
            return 1;
        }
        weir_task_detach(t);
    }
    int64_t spawned = weir_time_now();
    /* Every deadline is before t0 + 1 s; main's own timer fires after them
     * all, and the tasks they woke run before main resumes. */
    weir_time_sleep_until(t0 + 1000 * WEIR_MSEC);
    while (fired < n)
        weir_time_sleep(WEIR_MSEC);
    double wall = (double)(weir_time_now() - t0) / 1e9;
    printf("bench=timers impl=%s kind=%s timers=%ld wall_s=%.3f spawn_s=%.3f peak_rss_mib=%.1f "
           "runs=1\n",
           bench_impl(), fibers ? "fiber" : "stackless", n, wall,
           (double)(spawned - t0) / 1e9, (double)bench_peak_rss_kb() / 1024.0);
    free(frames);
    return 0;
}

int main(int argc, char **argv)
{
    return weir_main(bench_main, argc, argv);
}
