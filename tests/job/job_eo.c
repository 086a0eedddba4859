/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job_eo.c - a test job for the crash test of `weir run` (test_job.c):
 * counter -> key_by(v % 13) -> running count per key -> "k=K n=N" lines ->
 * the exactly-once file sink.
 *
 *     weir run job_eo.so --checkpoint-dir D --checkpoint-interval-ms M [--restore] -- OUT N
 *
 * The counter emits 0..N-1 (per source subtask: subtask i emits i, i+p...),
 * 100 per call with a 1 ms pause, and checkpoints its position, so a killed
 * run restored from its checkpoint neither loses nor repeats a line.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/job.h"

static long long total;
static char out_dir[4096];

typedef struct ctr {
    long long next;
} ctr;

static int ctr_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)arg;
    ctr *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->next = weir_ctx_subtask(ctx);
    *state = c;
    return 0;
}

static int ctr_next(weir_ctx *ctx, void *state)
{
    ctr *c = state;
    for (int i = 0; i < 100 && c->next < total; i++) {
        long long v = c->next;
        c->next += weir_ctx_parallelism(ctx);
        int e = weir_emit(ctx, &v, sizeof(v), v);
        if (e)
            return e;
    }
    weir_time_sleep(WEIR_MSEC);
    return c->next >= total;
}

static int ctr_snapshot(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    *buf = malloc(sizeof(long long));
    if (!*buf)
        return -ENOMEM;
    memcpy(*buf, &((ctr *)state)->next, sizeof(long long));
    *len = sizeof(long long);
    return 0;
}

static int ctr_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    if (len != sizeof(long long))
        return weir_fail(ctx, -EBADMSG, "position of %zu bytes", len);
    memcpy(&((ctr *)state)->next, buf, len);
    return 0;
}

static const weir_source_def counter = {.open = ctr_open,
                                        .next = ctr_next,
                                        .close = free,
                                        .max_out_of_orderness = 0,
                                        .snapshot = ctr_snapshot,
                                        .restore = ctr_restore};

/* [count][key] */
static int one(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    long long v, rec[2];
    memcpy(&v, in->data, sizeof(v));
    rec[0] = 1;
    rec[1] = v % 13;
    return weir_emit(ctx, rec, sizeof(rec), in->ts);
}

static int key(const weir_rec *in, void *arg, const void **k, size_t *len)
{
    (void)arg;
    *k = (const char *)in->data + sizeof(long long);
    *len = sizeof(long long);
    return 0;
}

static int add(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    static __thread long long r[2];
    (void)arg;
    memcpy(r, acc->data, sizeof(r));
    r[0] += ((const long long *)in->data)[0];
    *out = (weir_rec){r, sizeof(r), in->ts};
    return 0;
}

static int line(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    long long r[2];
    memcpy(r, in->data, sizeof(r));
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "k=%lld n=%lld", r[1], r[0]);
    return weir_emit(ctx, buf, (size_t)n, in->ts);
}

static int define(weir_job *j, int argc, char **argv)
{
    if (argc != 3 || (total = atoll(argv[2])) <= 0) {
        fprintf(stderr, "job_eo: OUT N\n");
        return -EINVAL;
    }
    snprintf(out_dir, sizeof(out_dir), "%s", argv[1]);
    weir_stream *s = weir_job_source(j, "counter", &counter, NULL);
    s = weir_stream_map(s, "one", one, NULL);
    s = weir_stream_key_by(s, key, NULL);
    s = weir_stream_reduce(s, "count", add, NULL);
    s = weir_stream_map(s, "line", line, NULL);
    return weir_stream_file_sink(s, "out", out_dir) < 0 ? -EINVAL : 0;
}

WEIR_REGISTER_JOB("eo", "1.0", define);
