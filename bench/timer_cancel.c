/* SPDX-License-Identifier: Apache-2.0 */
/*
 * timer_cancel.c - the loop's timer wheel against a binary min-heap on the
 * workload timers mostly see in a server: timeouts armed and then cancelled.
 *
 * Per implementation and run: insert N timers (default 1M) with random
 * deadlines in 0..1000 ms, cancel them all in random order; then insert them
 * again (untimed) and expire them all as an event loop woken every 1 ms
 * would, from 0 to 1000 ms. Each op is reported as the median over the runs
 * of (time / N), one line per implementation and op:
 *
 *   bench=timer_cancel impl=weir-wheel op=insert ns_per_op=3.1 n=1000000 runs=5
 *
 * Usage: timer_cancel [N [RUNS]]. The heap's array is reserved beforehand so
 * that its figures exclude reallocation (the wheel never allocates).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"
#include "rt/timer_heap.h"
#include "rt/timer_wheel.h"

#define MS      INT64_C(1000000)
#define SPAN_MS 1000
#define MAXRUNS 64

enum { OP_INSERT, OP_CANCEL, OP_EXPIRE, NOPS };
static const char *const op_names[NOPS] = {"insert", "cancel", "expire"};

static uint64_t rng = 0x243f6a8885a308d3u;

static uint64_t rnd(void) /* splitmix64 */
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Wall clock in ns as a double (the timings are subtractions of two). */
static double now_ns(void)
{
    return (double)weir_time_now();
}

/* The fire callbacks only count, so that the figures are the structure's. */
static void wheel_fire(weir_timer_node *n, void *ctx)
{
    (void)n;
    ++*(size_t *)ctx;
}

static void heap_fire(weir__theap_node *n, void *ctx)
{
    (void)n;
    ++*(size_t *)ctx;
}

/* One run of the wheel; per-op ns into out[]. Returns 0 on a miscount. */
static int run_wheel(size_t n, const int64_t *deadline, const size_t *perm, double *out)
{
    weir__wheel *w = malloc(sizeof(*w));
    weir_timer_node *t = calloc(n, sizeof(*t));
    if (!w || !t) return 0;
    weir__wheel_init(w, 0);
    for (size_t i = 0; i < n; i++)
        t[i].deadline = deadline[i];

    double t0 = now_ns();
    for (size_t i = 0; i < n; i++)
        weir__wheel_add(w, &t[i]);
    double t1 = now_ns();
    for (size_t i = 0; i < n; i++)
        weir__wheel_del(w, &t[perm[i]]);
    double t2 = now_ns();
    out[OP_INSERT] = (t1 - t0) / (double)n;
    out[OP_CANCEL] = (t2 - t1) / (double)n;

    for (size_t i = 0; i < n; i++)
        weir__wheel_add(w, &t[i]);
    size_t fired = 0;
    t0 = now_ns();
    for (int64_t ms = 0; ms <= SPAN_MS; ms++)
        weir__wheel_expire(w, ms * MS, wheel_fire, &fired);
    t1 = now_ns();
    out[OP_EXPIRE] = (t1 - t0) / (double)n;
    int ok = fired == n && w->count == 0;
    free(t);
    free(w);
    return ok;
}

static int run_heap(size_t n, const int64_t *deadline, const size_t *perm, double *out)
{
    weir__theap h;
    weir__theap_init(&h);
    weir__theap_node *t = calloc(n, sizeof(*t));
    if (!t || weir__theap_reserve(&h, n) < 0) return 0;
    for (size_t i = 0; i < n; i++)
        t[i].deadline = deadline[i];

    double t0 = now_ns();
    for (size_t i = 0; i < n; i++)
        weir__theap_add(&h, &t[i]);
    double t1 = now_ns();
    for (size_t i = 0; i < n; i++)
        weir__theap_del(&h, &t[perm[i]]);
    double t2 = now_ns();
    out[OP_INSERT] = (t1 - t0) / (double)n;
    out[OP_CANCEL] = (t2 - t1) / (double)n;

    for (size_t i = 0; i < n; i++)
        weir__theap_add(&h, &t[i]);
    size_t fired = 0;
    t0 = now_ns();
    for (int64_t ms = 0; ms <= SPAN_MS; ms++)
        weir__theap_expire(&h, ms * MS, heap_fire, &fired);
    t1 = now_ns();
    out[OP_EXPIRE] = (t1 - t0) / (double)n;
    int ok = fired == n && h.len == 0;
    free(t);
    weir__theap_free(&h);
    return ok;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 1000000;
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    if (n == 0 || runs < 1 || runs > MAXRUNS) {
        fprintf(stderr, "usage: timer_cancel [N [RUNS (1..%d)]]\n", MAXRUNS);
        return 2;
    }
    int64_t *deadline = malloc(n * sizeof(*deadline));
    size_t *perm = malloc(n * sizeof(*perm));
    if (!deadline || !perm) {
        fprintf(stderr, "timer_cancel: out of memory\n");
        return 1;
    }

    static const struct {
        const char *name;
        int (*run)(size_t, const int64_t *, const size_t *, double *);
    } impls[] = {{"weir-wheel", run_wheel}, {"binary-heap", run_heap}};
    enum { NIMPL = sizeof(impls) / sizeof(impls[0]) };
    static double res[NIMPL][NOPS][MAXRUNS];

    for (int r = 0; r < runs; r++) {
        /* Fresh deadlines and cancel order per run, the same for both. */
        for (size_t i = 0; i < n; i++) {
            deadline[i] = (int64_t)(rnd() % (uint64_t)(SPAN_MS * MS + 1));
            perm[i] = i;
        }
        for (size_t i = n; i > 1; i--) {
            size_t j = (size_t)(rnd() % i), x = perm[i - 1];
            perm[i - 1] = perm[j];
            perm[j] = x;
        }
        for (int k = 0; k < NIMPL; k++) {
            double out[NOPS];
            if (!impls[k].run(n, deadline, perm, out)) {
                fprintf(stderr, "timer_cancel: %s failed (allocation or miscount)\n",
                        impls[k].name);
                return 1;
            }
            for (int op = 0; op < NOPS; op++)
                res[k][op][r] = out[op];
        }
    }
    for (int k = 0; k < NIMPL; k++)
        for (int op = 0; op < NOPS; op++)
            printf("bench=timer_cancel impl=%s op=%s ns_per_op=%.1f n=%zu runs=%d\n", impls[k].name,
                   op_names[op], bench_median(res[k][op], runs), n, runs);
    free(perm);
    free(deadline);
    return 0;
}
