/* SPDX-License-Identifier: Apache-2.0 */
/*
 * join.c - the interval join with one input lagging in event time: a left
 * and a right source of JOIN_EVENTS records each (16 keys, timestamps one
 * unit apart, right = left - lag), joined on [0, 10], bound 10. The
 * watermark follows the lagging side, so the left side's buffer holds
 * about lag records (lag / 16 per key); a record's cost must not grow with
 * it. Prints `bench=join impl=weir kind=interval lag=<ms>
 * events_per_s=<n>` (both inputs' records per second, median of the runs).
 */
#include <time.h>

#include "bench.h"
#include "weir/stream.h"

typedef struct ev {
    int64_t key, ts;
} ev;

typedef struct src_cfg {
    int64_t n, lag;
} src_cfg;

typedef struct src_state {
    const src_cfg *c;
    int64_t i;
} src_state;

static int src_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    src_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->c = arg;
    *state = s;
    return 0;
}

static int src_next(weir_ctx *ctx, void *state)
{
    src_state *s = state;
    for (int k = 0; k < 256 && s->i < s->c->n; k++, s->i++) {
        ev e = {s->i % 16, s->i - s->c->lag};
        int r = weir_emit(ctx, &e, sizeof(e), e.ts);
        if (r)
            return r;
    }
    return s->i >= s->c->n;
}

static int ev_key(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = &((const ev *)in->data)->key;
    *len = sizeof(int64_t);
    return 0;
}

static int pair(weir_ctx *ctx, const weir_rec *l, const weir_rec *r, void *arg)
{
    (void)ctx, (void)l, (void)r;
    ++*(int64_t *)arg;
    return 0;
}

typedef struct run {
    int64_t n, lag, pairs;
    double secs;
    int err;
} run;

static intptr_t run_main(void *arg)
{
    run *rn = arg;
    src_cfg L = {rn->n, 0}, R = {rn->n, rn->lag};
    weir_source_def sd = {
        .open = src_open, .next = src_next, .close = free, .max_out_of_orderness = 10};
    weir_job *j = weir_job_new("join-bench");
    weir_stream *l = weir_stream_key_by(weir_job_source(j, "left", &sd, &L), ev_key, NULL);
    weir_stream *r = weir_stream_key_by(weir_job_source(j, "right", &sd, &R), ev_key, NULL);
    weir_stream *out = weir_stream_interval_join(l, r, "ij", 0, 10, pair, &rn->pairs);
    out = weir_stream_parallelism(out, 1);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    rn->err = out ? weir_job_run(j, NULL) : -EINVAL;
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (rn->err)
        fprintf(stderr, "join: %s\n", weir_job_error(j));
    rn->secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    weir_job_free(j);
    return 0;
}

int main(void)
{
    int64_t n = bench_parse_long(getenv("JOIN_EVENTS"), 100000);
    int runs = bench_runs(3);
    static const int64_t lags[] = {0, 20000};
    for (size_t k = 0; k < sizeof(lags) / sizeof(lags[0]); k++) {
        double v[100];
        for (int i = 0; i < runs; i++) {
            run rn = {.n = n, .lag = lags[k]};
            weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = 2});
            if (!rt)
                return 1;
            weir_task *t = weir_task_spawn(run_main, &rn,
                                           &(weir_spawn_opts){.rt = rt, .stack_size = 256 * 1024});
            if (!t || weir_task_join(t, NULL, WEIR_FOREVER) != 0 || rn.err)
                return 1;
            weir_rt_free(rt);
            v[i] = 2.0 * (double)n / rn.secs;
        }
        printf("bench=join impl=weir kind=interval lag=%lld events_per_s=%.0f\n",
               (long long)lags[k], bench_median(v, runs));
        fflush(stdout);
    }
    return 0;
}
