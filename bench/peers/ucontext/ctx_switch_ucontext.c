/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctx_switch_ucontext.c - ctx_switch peer: plain glibc swapcontext(3) doing
 * the same ping-pong as bench/ctx_switch.c: two fibers on 64 KiB mmap'd
 * stacks switch to each other N times, median of R runs, printed as
 *   bench=ctx_switch impl=ucontext ns_per_op=... runs=5
 * Each swapcontext makes an rt_sigprocmask syscall, which is what the
 * assembly switch avoids.
 *
 * Build (bench/peers/fcontext/build.sh does this):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -o ctx_switch_ucontext ctx_switch_ucontext.c
 * Usage: ctx_switch_ucontext [switches=10000000] [runs=5]
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>

#define STACK_SIZE ((size_t)64 * 1024)
#define MAX_RUNS   101

static ucontext_t main_uc, a_uc, b_uc;
static long remaining;

static void ping_pong(ucontext_t *self, ucontext_t *peer)
{
    for (;;) {
        while (remaining > 0) {
            remaining--;
            swapcontext(self, peer);
        }
        swapcontext(self, &main_uc);
    }
}

static void fiber_a(void)
{
    ping_pong(&a_uc, &b_uc);
}

static void fiber_b(void)
{
    ping_pong(&b_uc, &a_uc);
}

static void make(ucontext_t *uc, void *stack, void (*fn)(void))
{
    getcontext(uc);
    uc->uc_stack.ss_sp = stack;
    uc->uc_stack.ss_size = STACK_SIZE;
    uc->uc_link = NULL;
    makecontext(uc, fn, 0);
}

static void *map_stack(void)
{
    void *p = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return p;
}

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long parse_arg(const char *s, long dflt, long max)
{
    char *end;
    long v;

    if (!s) return dflt;
    v = strtol(s, &end, 10);
    if (*end != '\0' || v <= 0 || v > max) {
        fprintf(stderr, "ctx_switch_ucontext: bad argument '%s'\n", s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    long switches = parse_arg(argc > 1 ? argv[1] : NULL, 10000000, 1L << 40);
    long runs = parse_arg(argc > 2 ? argv[2] : NULL, 5, MAX_RUNS);
    double ns[MAX_RUNS];
    void *sa = map_stack(), *sb = map_stack();

    for (long r = -1; r < runs; r++) { /* r == -1: untimed warm-up */
        double t0;

        make(&a_uc, sa, fiber_a);
        make(&b_uc, sb, fiber_b);
        remaining = r < 0 ? switches / 10 + 1 : switches;
        t0 = now_ns();
        swapcontext(&main_uc, &a_uc);
        if (r >= 0) ns[r] = (now_ns() - t0) / (double)switches;
    }
    qsort(ns, (size_t)runs, sizeof(ns[0]), cmp_double);
    printf("bench=ctx_switch impl=ucontext ns_per_op=%.2f runs=%ld\n", ns[runs / 2], runs);
    return 0;
}
