/* SPDX-License-Identifier: Apache-2.0 */
/*
 * console_job.c - a job with a bottleneck, for the web console's demos and
 * its browser test (docs/console.md): a paced source of numbers stamped
 * with the wall clock -> key_by(v % KEYS) -> "slow", a keyed running count
 * that spends SLOW_US microseconds on every record -> "sink", which drops
 * what it gets.
 *
 *     weir submit console_job.so --parallelism 2 --checkpoint-dir DIR \
 *         --checkpoint-interval-ms 1000 [flags] -- [SLOW_US] [RECORDS_PER_MS_PER_SUBTASK] [KEYS]
 *
 * The source "numbers" emits v = i, i+p, ... from subtask i of p, at most
 * RECORDS_PER_MS_PER_SUBTASK records per millisecond (default 8), each
 * with its event time the wall clock in milliseconds and watermarks 50 ms
 * behind; it runs until the job is cancelled and checkpoints its position.
 * "slow" keeps each key's count in keyed state (checkpointed with it) and
 * pays SLOW_US microseconds per record (default 500) by sleeping, in
 * whole milliseconds as the debt adds up, so it holds its threads no
 * longer than a real remote call would. With the defaults "slow" manages
 * about 2000 records a second per subtask against the 8000 the source
 * offers: the source waits for credits nearly all the time, which the
 * console shows as backpressure on "numbers" (and checkpoints take their
 * barriers through the queue in front of "slow": a few hundred ms).
 * SLOW_US 0: no bottleneck.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weir/job.h"

static long long slow_us = 500, rate = 8, keys = 16;

static int64_t wall_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- the paced source ------------------------------------------------------------------- */
typedef struct src {
    long long next; /* the next value to emit */
    long long base; /* own records emitted when opened or restored */
    int64_t t0;     /* when opened or restored (ns) */
} src;

static long long src_own(weir_ctx *ctx, const src *c)
{
    return (c->next - weir_ctx_subtask(ctx)) / weir_ctx_parallelism(ctx);
}

static int src_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)arg;
    src *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->next = weir_ctx_subtask(ctx);
    c->t0 = weir_time_now();
    *state = c;
    return 0;
}

static int src_next(weir_ctx *ctx, void *state)
{
    src *c = state;
    long long p = weir_ctx_parallelism(ctx);
    long long due = c->base + (weir_time_now() - c->t0) / WEIR_MSEC * rate;
    long long own = src_own(ctx, c);
    /* A few records a call: the engine counts what a call emitted when it
     * returns, so small calls keep the figures smooth under backpressure. */
    long long batch = due > own ? due - own : 0;
    if (batch > 64)
        batch = 64;
    int64_t ts = wall_ms();
    for (long long i = 0; i < batch; i++) {
        long long v = c->next;
        c->next += p;
        int e = weir_emit(ctx, &v, sizeof(v), ts);
        if (e)
            return e;
    }
    weir_time_sleep(WEIR_MSEC);
    return 0;
}

static int src_snapshot(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    *buf = malloc(sizeof(long long));
    if (!*buf)
        return -ENOMEM;
    memcpy(*buf, &((src *)state)->next, sizeof(long long));
    *len = sizeof(long long);
    return 0;
}

static int src_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    src *c = state;
    if (len != sizeof(long long))
        return weir_fail(ctx, -EBADMSG, "position of %zu bytes", len);
    memcpy(&c->next, buf, len);
    c->base = src_own(ctx, c);
    c->t0 = weir_time_now();
    return 0;
}

static const weir_source_def numbers = {.open = src_open,
                                        .next = src_next,
                                        .close = free,
                                        .max_out_of_orderness = 50,
                                        .snapshot = src_snapshot,
                                        .restore = src_restore};

static int key(const weir_rec *in, void *arg, const void **k, size_t *len)
{
    (void)arg;
    static __thread long long kv;
    memcpy(&kv, in->data, sizeof(kv));
    kv %= keys;
    *k = &kv;
    *len = sizeof(kv);
    return 0;
}

/* ---- the slow keyed count: [key][count] out --------------------------------------------- */
typedef struct slow {
    long long debt_us; /* cost not slept yet */
} slow;

static int slow_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    (void)arg;
    *state = calloc(1, sizeof(slow));
    return *state ? 0 : -ENOMEM;
}

static int slow_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    slow *s = state;
    s->debt_us += slow_us;
    if (s->debt_us >= 1000) {
        weir_time_sleep((s->debt_us / 1000) * WEIR_MSEC);
        s->debt_us %= 1000;
    }
    long long v, out[2] = {0, 0};
    memcpy(&v, in->data, sizeof(v));
    const void *val;
    size_t len;
    if (weir_value_get(ctx, "count", &val, &len) == 0 && len == sizeof(long long))
        memcpy(&out[1], val, sizeof(long long));
    out[0] = v % keys;
    out[1]++;
    int e = weir_value_put(ctx, "count", &out[1], sizeof(long long));
    return e ? e : weir_emit(ctx, out, sizeof(out), in->ts);
}

static const weir_op_def slow_def = {.open = slow_open, .process = slow_process, .close = free};

/* ---- the sink: drops what it gets ------------------------------------------------------- */
static int sink_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx;
    (void)state;
    (void)in;
    return 0;
}

static const weir_op_def sink_def = {.process = sink_process};

static int num(const char *s, long long lo, long long *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end || end == s || v < lo)
        return -1;
    *out = v;
    return 0;
}

static int define(weir_job *j, int argc, char **argv)
{
    if (argc > 4 || (argc > 1 && num(argv[1], 0, &slow_us)) ||
        (argc > 2 && num(argv[2], 1, &rate)) || (argc > 3 && num(argv[3], 1, &keys))) {
        fprintf(stderr, "console_job: [SLOW_US >= 0 (default 500)] "
                        "[RECORDS_PER_MS_PER_SUBTASK >= 1 (default 8)] [KEYS >= 1 (default 16)]\n");
        return -EINVAL;
    }
    weir_stream *s = weir_job_source(j, "numbers", &numbers, NULL);
    s = weir_stream_key_by(s, key, NULL);
    s = weir_stream_process(s, "slow", &slow_def, NULL);
    return weir_stream_sink(s, "sink", &sink_def, NULL) < 0 ? -EINVAL : 0;
}

WEIR_REGISTER_JOB("console_job", "1.0", define);
