/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench.h - helpers shared by weir's benchmark programs: run counts, the
 * median of a few runs, peak RSS, and the impl= label (weir-uring /
 * weir-epoll, from the loop's backend), and for the multi-threaded runtime
 * the thread count and the scheduler counters summed over its threads.
 * Every benchmark prints lines of key=value pairs starting with
 * `bench=NAME impl=IMPL`.
 */
#ifndef WEIR_BENCH_H
#define WEIR_BENCH_H

#include <errno.h>
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

/* A positive integer argument or environment value: `s` parsed whole, or
 * `dflt` when s is NULL; -1 when s is not a positive integer. */
static inline long bench_parse_long(const char *s, long dflt)
{
    if (!s)
        return dflt;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return errno || end == s || *end || v <= 0 ? -1 : v;
}

/* Scheduler threads of a multi-threaded benchmark: $WEIR_THREADS (what
 * weir_rt_new would use for threads=0), else `dflt` - not the online cores,
 * so that a run on a bigger machine measures the same thing. */
static inline int bench_threads(int dflt)
{
    long n = bench_parse_long(getenv("WEIR_THREADS"), dflt);
    return n > 0 && n <= 256 ? (int)n : dflt;
}

/* "weir-uring" or "weir-epoll" for the loops of a runtime (any thread). */
static inline const char *bench_impl_rt(weir_rt *rt)
{
    static char buf[32];
    weir_loop *l = weir_rt_loop(rt, 0);
    snprintf(buf, sizeof(buf), "weir-%s", l ? weir_loop_backend(l) : "none");
    return buf;
}

/* The scheduler counters of rt summed over its threads, and thread i's
 * polls in polls[i] (when polls is not NULL). Call from outside the runtime
 * once the measured work is done (its threads idle), so the figures are
 * final. */
static inline void bench_rt_stats(weir_rt *rt, weir_loop_stats *sum, uint64_t *polls)
{
    memset(sum, 0, sizeof(*sum));
    for (int i = 0; i < weir_rt_threads(rt); i++) {
        weir_loop_stats st;
        if (weir_loop_stats_get(weir_rt_loop(rt, i), &st) < 0)
            continue;
        sum->polls += st.polls;
        sum->parks += st.parks;
        sum->steals += st.steals;
        sum->injected += st.injected;
        sum->lifo_polls += st.lifo_polls;
        sum->remote_wakes += st.remote_wakes;
        if (polls)
            polls[i] = st.polls;
    }
}

/* "p0/p1/..." for the per-thread polls of bench_rt_stats. */
static inline const char *bench_fmt_polls(const uint64_t *polls, int n)
{
    static char buf[256];
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < n && off < sizeof(buf); i++) {
        int k = snprintf(buf + off, sizeof(buf) - off, "%s%llu", i ? "/" : "",
                         (unsigned long long)polls[i]);
        if (k < 0)
            break;
        off += (size_t)k;
    }
    return buf;
}

#endif
