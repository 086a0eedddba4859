/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spawn_join.c - spawn + join of 1M tiny tasks on one thread, fibers and
 * stackless. The main fiber spawns a batch of tasks (each returns its
 * argument + 1), then joins the batch in order; repeated until 1M tasks ran.
 * Prints ns per task (median of BENCH_RUNS runs) and peak RSS.
 *
 *   spawn_join [tasks] [batch]      defaults: 1000000, 1000
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

static int run(int stackless)
{
    weir_task **h = malloc((size_t)batch * sizeof(*h));
    struct tiny_frame *frames = malloc((size_t)batch * sizeof(*frames));
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
            weir_task_join(h[i], &r, WEIR_FOREVER);
            sum += r;
        }
    }
    free(h);
    free(frames);
    return sum > 0 ? 0 : -EINVAL;
}

static int bench_main(int argc, char **argv)
{
    if (argc > 1)
        ntasks = atol(argv[1]);
    if (argc > 2)
        batch = atol(argv[2]);
    if (ntasks <= 0 || batch <= 0 || ntasks % batch) {
        fprintf(stderr, "usage: spawn_join [tasks] [batch dividing tasks]\n");
        return 2;
    }
    int runs = bench_runs(5);
    for (int stackless = 1; stackless >= 0; stackless--) {
        double v[100];
        run(stackless); /* warm-up: stacks and allocator caches */
        for (int r = 0; r < runs; r++) {
            int64_t t0 = weir_time_now();
            if (run(stackless) < 0)
                return 1;
            v[r] = (double)(weir_time_now() - t0) / (double)ntasks;
        }
        printf("bench=spawn_join impl=%s kind=%s tasks=%ld batch=%ld ns_per_task=%.1f "
               "peak_rss_kb=%ld runs=%d\n",
               bench_impl(), stackless ? "stackless" : "fiber", ntasks, batch,
               bench_median(v, runs), bench_peak_rss_kb(), runs);
    }
    return 0;
}

int main(int argc, char **argv)
{
    return weir_main(bench_main, argc, argv);
}
