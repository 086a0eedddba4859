/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sequence_job.c - a keyed sequence job for soaks of the cluster (bench/soak):
 * paced counter -> key_by(v % KEYS) -> running count per key -> "k=K n=N"
 * lines -> the exactly-once file sink.
 *
 *     weir run|submit sequence_job.so [flags] -- OUT_DIR N [KEYS] [RECORDS_PER_MS_PER_SUBTASK]
 *
 * The counter emits 0..N-1 (source subtask i of p emits i, i+p, ...) and
 * checkpoints its position. Value v goes to key v % KEYS (default 64); the
 * count is the key's running count, so key K's lines are its sequence
 * numbers "k=K n=1" .. "k=K n=COUNT" with COUNT the number of v < N with
 * v % KEYS == K. A gap in a key's numbers is a lost record, a repeat a
 * duplicated one; the sorted output of a correct run does not depend on
 * timing, parallelism or restarts. Each source subtask emits at most
 * RECORDS_PER_MS_PER_SUBTASK records per millisecond (default 2; 0: as
 * fast as it can), paced against the clock from where it was opened or
 * restored, so a long run has a known length: N / (rate * p) ms.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/job.h"

/* The configuration lives as long as the plugin (define runs before the run). */
static long long total, keys = 64, rate = 2;
static char out_dir[4096];

/* ---- the paced counter ------------------------------------------------------------------ */
typedef struct ctr {
    long long next; /* the next value to emit */
    long long base; /* own records emitted when opened or restored */
    int64_t t0;     /* when opened or restored (ns) */
} ctr;

/* Own records emitted so far (values below next of this subtask's stride). */
static long long ctr_own(weir_ctx *ctx, const ctr *c)
{
    return (c->next - weir_ctx_subtask(ctx)) / weir_ctx_parallelism(ctx);
}

static int ctr_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)arg;
    ctr *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->next = weir_ctx_subtask(ctx);
    c->t0 = weir_time_now();
    *state = c;
    return 0;
}

static int ctr_next(weir_ctx *ctx, void *state)
{
    ctr *c = state;
    long long p = weir_ctx_parallelism(ctx), batch = 1000;
    if (rate > 0) {
        long long due = c->base + (weir_time_now() - c->t0) / WEIR_MSEC * rate;
        long long own = ctr_own(ctx, c);
        batch = due > own ? due - own : 0;
        if (batch > 1000)
            batch = 1000;
    }
    for (long long i = 0; i < batch && c->next < total; i++) {
        long long v = c->next;
        c->next += p;
        int e = weir_emit(ctx, &v, sizeof(v), v);
        if (e)
            return e;
    }
    if (c->next >= total)
        return 1;
    if (rate > 0)
        weir_time_sleep(WEIR_MSEC);
    return 0;
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
    ctr *c = state;
    if (len != sizeof(long long))
        return weir_fail(ctx, -EBADMSG, "position of %zu bytes", len);
    memcpy(&c->next, buf, len);
    c->base = ctr_own(ctx, c);
    c->t0 = weir_time_now();
    return 0;
}

static const weir_source_def counter = {.open = ctr_open,
                                        .next = ctr_next,
                                        .close = free,
                                        .max_out_of_orderness = 0,
                                        .snapshot = ctr_snapshot,
                                        .restore = ctr_restore};

/* ---- keyed running count: records are [count][key] ------------------------------------- */
static int one(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    long long v, rec[2];
    memcpy(&v, in->data, sizeof(v));
    rec[0] = 1;
    rec[1] = v % keys;
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

static int usage(void)
{
    fprintf(stderr, "sequence_job: OUT_DIR N [KEYS] [RECORDS_PER_MS_PER_SUBTASK]\n"
                    "  N > 0 records, KEYS > 0 (default 64), rate >= 0 (default 2; 0: unpaced)\n");
    return -EINVAL;
}

static int define(weir_job *j, int argc, char **argv)
{
    if (argc < 3 || argc > 5)
        return usage();
    char *end;
    total = strtoll(argv[2], &end, 10);
    if (*end || total <= 0)
        return usage();
    if (argc > 3 && ((keys = strtoll(argv[3], &end, 10)) <= 0 || *end))
        return usage();
    if (argc > 4 && ((rate = strtoll(argv[4], &end, 10)) < 0 || *end))
        return usage();
    snprintf(out_dir, sizeof(out_dir), "%s", argv[1]);
    weir_stream *s = weir_job_source(j, "counter", &counter, NULL);
    s = weir_stream_map(s, "one", one, NULL);
    s = weir_stream_key_by(s, key, NULL);
    s = weir_stream_reduce(s, "count", add, NULL);
    s = weir_stream_map(s, "line", line, NULL);
    return weir_stream_file_sink(s, "out", out_dir) < 0 ? -EINVAL : 0;
}

WEIR_REGISTER_JOB("sequence", "1.0", define);
