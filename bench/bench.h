/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench.h - helpers shared by weir's benchmark programs: run counts, the
 * median of a few runs, peak RSS, and the impl= label (weir-uring /
 * weir-epoll, from the loop's backend). Every benchmark prints lines of
 * key=value pairs starting with `bench=NAME impl=IMPL`.
 */
#ifndef WEIR_BENCH_H
#define WEIR_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "weir/rt.h"

static inline int bench_runs(int dflt)
{
    const char *e = getenv("BENCH_RUNS");
    int n = e ? atoi(e) : 0;
    const char *q = getenv("BENCH_QUICK");
    if (n <= 0 && q && strcmp(q, "1") == 0)
        n = 3;
    return n > 0 && n < 100 ? n : dflt;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static inline long bench_peak_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* "weir-uring" or "weir-epoll" for the loop of the calling thread. */
static inline const char *bench_impl(void)
{
    static char buf[32];
    weir_loop *l = weir_loop_current();
    snprintf(buf, sizeof(buf), "weir-%s", l ? weir_loop_backend(l) : "none");
    return buf;
}

#endif
