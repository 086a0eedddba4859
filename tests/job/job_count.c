/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job_count.c - the job plugin the tests load (tests/job/test_job.c): the
 * numbers 0..N-1 spread over the source's subtasks, doubled, summed by one
 * sink that prints "count <n> sum <s>" at the end of input. Built several
 * times by CMake, some copies claiming another ABI identity.
 *
 * Job arguments (after JOB.so): a number N (default 1000), and words that
 * make it misbehave: "fail" (an operator fails at record 10), "badgraph"
 * (define builds an invalid graph: reduce without key_by), "definefail" (define returns an error),
 * "nosink" (no sink), "nondet" (an operator named after how many times
 * define ran: a job that is not deterministic), "linger" (the source stays open 1.5 s after its
 * last record, so `weir run --progress` draws its line).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/job.h"

typedef struct src_state {
    int64_t n, next;
    int64_t linger_until; /* "linger": stay open this long after the last record */
} src_state;

static int64_t linger_ms;

static int src_open(weir_ctx *ctx, void *arg, void **state)
{
    src_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->n = *(const int64_t *)arg;
    s->next = weir_ctx_subtask(ctx);
    s->linger_until = weir_time_now() + linger_ms * 1000000;
    if (linger_ms) { /* the tests wait for this before they signal weir */
        fputs("lingering\n", stderr);
        fflush(stderr);
    }
    *state = s;
    return 0;
}

static int src_next(weir_ctx *ctx, void *state)
{
    src_state *s = state;
    for (int i = 0; i < 256 && s->next < s->n; i++) {
        int e = weir_emit(ctx, &s->next, sizeof(s->next), s->next);
        if (e)
            return e;
        s->next += weir_ctx_parallelism(ctx);
    }
    if (s->next >= s->n && weir_time_now() < s->linger_until) {
        weir_time_sleep(50 * 1000000);
        return 0;
    }
    return s->next >= s->n;
}

static int src_snapshot(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    if (!(*buf = malloc(sizeof(int64_t))))
        return -ENOMEM;
    memcpy(*buf, &((src_state *)state)->next, sizeof(int64_t));
    *len = sizeof(int64_t);
    return 0;
}

static int src_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    (void)ctx;
    if (len != sizeof(int64_t))
        return -EINVAL;
    memcpy(&((src_state *)state)->next, buf, len);
    return 0;
}

static const weir_source_def numbers = {.open = src_open,
                                        .next = src_next,
                                        .close = free,
                                        .max_out_of_orderness = 0,
                                        .snapshot = src_snapshot,
                                        .restore = src_restore};

static int times2(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    const int *fail = arg;
    int64_t v;
    memcpy(&v, in->data, sizeof(v));
    if (*fail && v == 10)
        return weir_fail(ctx, -EIO, "boom at record %" PRId64, v);
    v *= 2;
    return weir_emit(ctx, &v, sizeof(v), in->ts);
}

static int add(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    (void)acc;
    (void)arg;
    *out = *in;
    return 0;
}

typedef struct total {
    int64_t count, sum;
} total;

static int total_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    (void)arg;
    return (*state = calloc(1, sizeof(total))) ? 0 : -ENOMEM;
}

static int total_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx;
    total *t = state;
    int64_t v;
    memcpy(&v, in->data, sizeof(v));
    t->count++;
    t->sum += v;
    return 0;
}

static int total_finish(weir_ctx *ctx, void *state)
{
    (void)ctx;
    total *t = state;
    printf("count %" PRId64 " sum %" PRId64 "\n", t->count, t->sum);
    fflush(stdout);
    return 0;
}

static const weir_op_def total_def = {
    .open = total_open, .process = total_process, .finish = total_finish, .close = free};

/* Per process, but a job defined twice gets the same arguments. */
static int64_t n_records;
static int fail_at_10;

static int define(weir_job *j, int argc, char **argv)
{
    int badgraph = 0, nosink = 0, nondet = 0;
    static int defined; /* how many times define ran in this process */
    defined++;
    n_records = 1000;
    fail_at_10 = 0;
    linger_ms = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "fail") == 0)
            fail_at_10 = 1;
        else if (strcmp(argv[i], "badgraph") == 0)
            badgraph = 1;
        else if (strcmp(argv[i], "nondet") == 0)
            nondet = 1;
        else if (strcmp(argv[i], "linger") == 0)
            linger_ms = 1500;
        else if (strcmp(argv[i], "nosink") == 0)
            nosink = 1;
        else if (strcmp(argv[i], "definefail") == 0)
            return -EINVAL;
        else
            n_records = strtoll(argv[i], NULL, 10);
    }
    weir_stream *s = weir_job_source(j, "numbers", &numbers, &n_records);
    char name[32];
    snprintf(name, sizeof(name), "times2-%d", defined);
    s = weir_stream_map(s, nondet ? name : "times2", times2, &fail_at_10);
    if (badgraph) /* a keyed operator without key_by */
        s = weir_stream_reduce(s, "sum", add, NULL);
    if (nosink)
        return 0;
    s = weir_stream_rebalance(s);
    if (weir_stream_sink(s, "total", &total_def, NULL) < 0 && !badgraph)
        return -EINVAL;
    return 0;
}

WEIR_REGISTER_JOB("count", "1.0", define);
