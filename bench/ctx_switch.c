/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctx_switch.c - cost of one fiber context switch (weir side).
 *
 * Two fibers, made on stacks from the weir stack pool, ping-pong with
 * weir__ctx_switch on one thread: a -> b -> a -> ... for N switches, then
 * the last one returns to the thread's context. The figure is wall time / N,
 * median of R runs, printed as
 *   bench=ctx_switch impl=weir-asm ns_per_op=4.1 runs=5
 * (impl=weir-ucontext when built with WEIR_CONTEXT=ucontext).
 *
 * Usage: ctx_switch [switches=10000000] [runs=5]
 *
 * Peers, same shape of output and same ping-pong between two fibers:
 *   bench/peers/fcontext/ctx_switch_fcontext.cpp   impl=boost-fcontext
 *   bench/peers/ucontext/ctx_switch_ucontext.c     impl=ucontext
 * built by bench/peers/fcontext/build.sh OUTDIR.
 */
#include "bench.h"
#include "rt/ctx.h"
#include "rt/stack.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(WEIR_CONTEXT_UCONTEXT) && WEIR_CONTEXT_UCONTEXT
#define IMPL "weir-ucontext"
#else
#define IMPL "weir-asm"
#endif

#define MAX_RUNS 101

static weir__ctx main_ctx, a_ctx, b_ctx;
static long remaining;

/* Each loop iteration is one switch; whoever sees the count run out goes
 * back to main. Both fibers run this one function, as in the peers: the
 * return address of every switch is then the same instruction, which the
 * return predictor gets right, so the figure is the switch itself rather than
 * a branch mispredict (a scheduler pays that one, whatever the switch). */
__attribute__((noinline)) static void ping_pong(weir__ctx *self, weir__ctx *peer)
{
    for (;;) {
        while (remaining > 0) {
            remaining--;
            weir__ctx_switch(self, peer);
        }
        weir__ctx_switch(self, &main_ctx);
    }
}

static void fiber_a(void *arg)
{
    (void)arg;
    ping_pong(&a_ctx, &b_ctx);
}

static void fiber_b(void *arg)
{
    (void)arg;
    ping_pong(&b_ctx, &a_ctx);
}

static double now_ns(void)
{
    return (double)weir_time_now();
}

static long parse_arg(const char *s, long dflt, long max)
{
    char *end;
    long v;

    if (!s) return dflt;
    v = strtol(s, &end, 10);
    if (*end != '\0' || v <= 0 || v > max) {
        fprintf(stderr, "ctx_switch: bad argument '%s'\n", s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    long switches = parse_arg(argc > 1 ? argv[1] : NULL, 10000000, 1L << 40);
    long runs = parse_arg(argc > 2 ? argv[2] : NULL, 5, MAX_RUNS);
    double ns[MAX_RUNS];
    weir__stack_pool pool;
    weir__stack *sa, *sb;

    weir__stack_pool_init(&pool);
    sa = weir__stack_get(&pool, 0);
    sb = weir__stack_get(&pool, 0);
    if (!sa || !sb || weir__ctx_thread_init(&main_ctx) != 0) {
        perror("ctx_switch: setup");
        return 1;
    }

    /* Fresh fibers per run: a run ends with both parked in the outer loop,
     * so they could be reused, but making them is cheap and keeps runs
     * independent. One untimed warm-up run faults the stacks in. */
    for (long r = -1; r < runs; r++) {
        double t0;

        weir__ctx_make(&a_ctx, sa->lo, sa->size, fiber_a, NULL);
        weir__ctx_make(&b_ctx, sb->lo, sb->size, fiber_b, NULL);
        remaining = r < 0 ? switches / 10 + 1 : switches;
        t0 = now_ns();
        weir__ctx_switch(&main_ctx, &a_ctx);
        if (r >= 0) ns[r] = (now_ns() - t0) / (double)switches;
    }
    printf("bench=ctx_switch impl=%s ns_per_op=%.2f runs=%ld\n", IMPL,
           bench_median(ns, (int)runs), runs);

    weir__ctx_thread_fini(&main_ctx);
    weir__stack_put(&pool, sa);
    weir__stack_put(&pool, sb);
    weir__stack_pool_fini(&pool);
    return 0;
}
