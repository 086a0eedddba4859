/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_stream.c - the dataflow API and the runner (weir/stream.h): chained
 * stateless operators, keyed reduce (word count) at parallelism 1-3 against
 * a reference count, rebalance / broadcast / union, keyed value state,
 * watermarks (bounded out-of-orderness, the minimum over inputs, end of
 * input), credit-based backpressure keeping memory bounded behind a slow
 * sink, failures reported with the operator's name, graph errors, and a
 * cancelled run. Everything runs on a two-thread runtime.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "test_rt.h"
#include "weir/metrics.h"
#include "weir/rt.h"
#include "weir/stream.h"

/* Run fn as a fiber on a fresh two-thread runtime and return its result. */
/* Every job here runs on a two-thread runtime. */
static intptr_t on_runtime(weir_task_fn fn, void *arg)
{
    return test_run_on_rt(2, fn, arg);
}

/* ---- a counting source: int64 values 0..n-1, timestamp = value --------------------------- */
typedef struct count_src {
    int64_t n;        /* per subtask; < 0: unbounded */
    int64_t per_call; /* records per next() */
    _Atomic int64_t *emitted;
} count_src;

typedef struct count_state {
    count_src *cfg;
    int64_t next;
} count_state;

static int count_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    count_state *s = calloc(1, sizeof(*s));
    s->cfg = arg;
    *state = s;
    return 0;
}

static int count_next(weir_ctx *ctx, void *state)
{
    count_state *s = state;
    for (int64_t i = 0; i < s->cfg->per_call; i++) {
        if (s->cfg->n >= 0 && s->next >= s->cfg->n)
            return 1;
        int64_t v = s->next++;
        int e = weir_emit(ctx, &v, sizeof(v), v);
        if (e)
            return e;
        if (s->cfg->emitted)
            atomic_fetch_add(s->cfg->emitted, 1);
    }
    return s->cfg->n >= 0 && s->next >= s->cfg->n;
}

static const weir_source_def count_def = {
    .open = count_open, .next = count_next, .close = free, .max_out_of_orderness = 0};

static int64_t rec_i64(const weir_rec *r)
{
    int64_t v;
    CHECK_EQ(r->len, sizeof(v));
    memcpy(&v, r->data, sizeof(v));
    return v;
}

/* ---- stateless chains --------------------------------------------------------------------- */
static int times3(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    int64_t v = rec_i64(in) * 3;
    return weir_emit(ctx, &v, sizeof(v), in->ts);
}

static int is_even(const weir_rec *in, void *arg)
{
    (void)arg;
    return rec_i64(in) % 2 == 0;
}

static int twice(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    int e = weir_emit(ctx, in->data, in->len, in->ts);
    return e ? e : weir_emit(ctx, in->data, in->len, in->ts);
}

static intptr_t chain_main(void *arg)
{
    (void)arg;
    weir_job *j = weir_job_new("chain");
    count_src cfg = {.n = 10000, .per_call = 333};
    weir_collector *c = weir_collector_new();
    weir_stream *s = weir_job_source(j, "numbers", &count_def, &cfg);
    s = weir_stream_map(s, "times3", times3, NULL);
    s = weir_stream_filter(s, "even", is_even, NULL);
    s = weir_stream_flat_map(s, "twice", twice, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    /* 0, 6, 12, ... each twice, in order (one chain, one subtask). */
    CHECK_EQ(weir_collector_count(c), 10000);
    for (size_t i = 0; i < weir_collector_count(c); i++) {
        const weir_rec *r = weir_collector_get(c, i);
        CHECK_EQ(rec_i64(r), (int64_t)(i / 2) * 6);
        CHECK_EQ(r->ts, (int64_t)(i / 2) * 2);
    }
    weir_op_stats st;
    CHECK_EQ(weir_job_op_stats(j, "even", &st), 0);
    CHECK_EQ(st.records_in, 10000);
    CHECK_EQ(st.records_out, 5000);
    CHECK_EQ(st.watermark, WEIR_WATERMARK_MAX);
    CHECK_EQ(weir_job_op_stats(j, "nope", &st), -ENOENT);
    /* Its one subtask's share is the whole; there is no second. */
    CHECK_STR(weir_job_op_name(j, 2), "even");
    CHECK_EQ(weir_job_op_subtask_stats(j, 2, 0, &st), 0);
    CHECK_EQ(st.records_in, 10000);
    CHECK_EQ(st.records_out, 5000);
    CHECK_EQ(weir_job_op_subtask_stats(j, 2, 1, &st), -ERANGE);
    CHECK_EQ(weir_job_op_subtask_stats(j, 9, 0, &st), -ENOENT);
    CHECK_EQ(weir_job_op_subtask_stats(j, -1, 0, &st), -ENOENT);
    CHECK_EQ(weir_job_op_subtask_stats(NULL, 2, 0, &st), -EINVAL);
    weir_collector_free(c);
    weir_job_free(j);
    return 0;
}

TEST(chained_stateless_operators)
{
    CHECK_EQ(on_runtime(chain_main, NULL), 0);
}

/* ---- word count --------------------------------------------------------------------------- */
static const char *const words[] = {"weir",      "stream", "key",    "group", "batch", "credit",
                                    "watermark", "timer",  "window", "state", "fiber", "ring"};
#define NWORDS (sizeof(words) / sizeof(words[0]))

typedef struct line_state {
    int64_t line, lines;
    uint64_t x;
} line_state;

static int lines_open(weir_ctx *ctx, void *arg, void **state)
{
    line_state *s = calloc(1, sizeof(*s));
    s->lines = *(int64_t *)arg;
    s->x = 0x9e3779b97f4a7c15ull * (uint64_t)(weir_ctx_subtask(ctx) + 1);
    *state = s;
    return 0;
}

/* Deterministic lines of 1-8 words per subtask seed. */
static int lines_next(weir_ctx *ctx, void *state)
{
    line_state *s = state;
    for (int k = 0; k < 100 && s->line < s->lines; k++, s->line++) {
        char buf[256];
        size_t n = 0;
        s->x ^= s->x << 13, s->x ^= s->x >> 7, s->x ^= s->x << 17;
        int nw = 1 + (int)(s->x % 8);
        for (int w = 0; w < nw; w++) {
            s->x ^= s->x << 13, s->x ^= s->x >> 7, s->x ^= s->x << 17;
            n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s", w ? " " : "",
                                  words[s->x % NWORDS]);
        }
        int e = weir_emit(ctx, buf, n, s->line);
        if (e)
            return e;
    }
    return s->line >= s->lines;
}

static const weir_source_def lines_def = {
    .open = lines_open, .next = lines_next, .close = free, .max_out_of_orderness = 0};

/* The same lines, counted by hand. */
static void reference_counts(int64_t lines, int subtasks, uint64_t *counts)
{
    memset(counts, 0, NWORDS * sizeof(*counts));
    for (int sub = 0; sub < subtasks; sub++) {
        uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(sub + 1);
        for (int64_t l = 0; l < lines; l++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int nw = 1 + (int)(x % 8);
            for (int w = 0; w < nw; w++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                counts[x % NWORDS]++;
            }
        }
    }
}

/* A word count record: u64 count, then the word. */
static int split(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    const char *p = in->data, *end = p + in->len;
    while (p < end) {
        const char *sp = memchr(p, ' ', (size_t)(end - p));
        size_t n = (size_t)((sp ? sp : end) - p);
        uint8_t rec[64];
        uint64_t one = 1;
        memcpy(rec, &one, 8);
        memcpy(rec + 8, p, n);
        int e = weir_emit(ctx, rec, 8 + n, in->ts);
        if (e)
            return e;
        p += n + 1;
    }
    return 0;
}

static int word_key(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = (const uint8_t *)in->data + 8;
    *len = in->len - 8;
    return 0;
}

static int add_counts(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    static __thread uint8_t buf[64];
    (void)arg;
    uint64_t a, b;
    memcpy(&a, acc->data, 8);
    memcpy(&b, in->data, 8);
    a += b;
    memcpy(buf, &a, 8);
    memcpy(buf + 8, (const uint8_t *)in->data + 8, in->len - 8);
    *out = (weir_rec){buf, in->len, in->ts};
    return 0;
}

static intptr_t wordcount_main(void *arg)
{
    int par = (int)(intptr_t)arg;
    int64_t lines = 3000;
    weir_job *j = weir_job_new("word-count");
    weir_collector *c = weir_collector_new();
    weir_stream *s = weir_job_source(j, "lines", &lines_def, &lines);
    s = weir_stream_flat_map(s, "split", split, NULL);
    s = weir_stream_key_by(s, word_key, NULL);
    s = weir_stream_reduce(s, "count", add_counts, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    int e = weir_job_run(j, &(weir_run_opts){.parallelism = par});
    if (e)
        fprintf(stderr, "run: %s\n", weir_job_error(j));
    CHECK_EQ(e, 0);
    uint64_t want[NWORDS], seen[NWORDS] = {0};
    reference_counts(lines, par, want);
    uint64_t total = 0;
    for (size_t i = 0; i < NWORDS; i++)
        total += want[i];
    CHECK_EQ(weir_collector_count(c), total); /* one update per word occurrence */
    for (size_t i = 0; i < weir_collector_count(c); i++) {
        const weir_rec *r = weir_collector_get(c, i);
        uint64_t n;
        memcpy(&n, r->data, 8);
        size_t w = 0;
        while (w < NWORDS && (strlen(words[w]) != r->len - 8 ||
                              memcmp(words[w], (const char *)r->data + 8, r->len - 8) != 0))
            w++;
        CHECK_LT(w, NWORDS);
        /* A key's updates come from its one subtask, in order: 1, 2, 3... */
        CHECK_EQ(n, seen[w] + 1);
        seen[w] = n;
    }
    for (size_t w = 0; w < NWORDS; w++)
        CHECK_EQ(seen[w], want[w]);
    weir_collector_free(c);
    weir_job_free(j);
    return 0;
}

TEST(word_count_matches_reference)
{
    for (int par = 1; par <= 3; par++)
        CHECK_EQ(on_runtime(wordcount_main, (void *)(intptr_t)par), 0);
}

/* ---- partitioners and union --------------------------------------------------------------- */
typedef struct per_sub {
    _Atomic uint64_t count[8];
} per_sub;

static int count_per_subtask(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)in;
    per_sub *p = state;
    atomic_fetch_add(&p->count[weir_ctx_subtask(ctx)], 1);
    return 0;
}

static intptr_t partition_main(void *arg)
{
    (void)arg;
    /* rebalance: 1 -> 3, spread evenly. */
    weir_job *j = weir_job_new("rebalance");
    count_src cfg = {.n = 3000, .per_call = 100};
    per_sub ps = {0};
    weir_op_def sink = {.process = count_per_subtask};
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &count_def, &cfg), 1);
    s = weir_stream_rebalance(s);
    s = weir_stream_parallelism(weir_stream_map(s, "id", times3, NULL), 3);
    CHECK_EQ(weir_stream_sink(s, "count", &sink, &ps), 0);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.parallelism = 3}), 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(ps.count[i], 1000);
    weir_job_free(j);

    /* broadcast: every subtask sees every record. */
    j = weir_job_new("broadcast");
    per_sub pb = {0};
    s = weir_stream_parallelism(weir_job_source(j, "src", &count_def, &cfg), 1);
    s = weir_stream_broadcast(s);
    s = weir_stream_parallelism(weir_stream_map(s, "id", times3, NULL), 3);
    CHECK_EQ(weir_stream_sink(s, "count", &sink, &pb), 0);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.parallelism = 3}), 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(pb.count[i], 3000);
    weir_job_free(j);

    /* union of two sources of different sizes. */
    j = weir_job_new("union");
    count_src a = {.n = 500, .per_call = 7}, b = {.n = 1500, .per_call = 1000};
    weir_collector *c = weir_collector_new();
    weir_stream *parts[2] = {weir_job_source(j, "a", &count_def, &a),
                             weir_job_source(j, "b", &count_def, &b)};
    s = weir_stream_union(parts, 2);
    s = weir_stream_map(s, "x3", times3, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    CHECK_EQ(weir_collector_count(c), 2000);
    int64_t sum = 0;
    for (size_t i = 0; i < weir_collector_count(c); i++)
        sum += rec_i64(weir_collector_get(c, i));
    CHECK_EQ(sum, 3 * (499 * 500 / 2 + 1499 * 1500 / 2));
    weir_collector_free(c);
    weir_job_free(j);
    return 0;
}

TEST(rebalance_broadcast_union)
{
    CHECK_EQ(on_runtime(partition_main, NULL), 0);
}

/* ---- keyed value state ---------------------------------------------------------------------- */
static int mod_key(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    static __thread int64_t k;
    k = rec_i64(in) % 10;
    *key = &k;
    *len = sizeof(k);
    return 0;
}

/* Emits a value only the first time its key is seen (dedupe by key). */
static int first_of_key(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    const void *v;
    size_t n;
    int e = weir_value_get(ctx, "seen", &v, &n);
    if (e == 0)
        return 0;
    if (e != -ENOENT)
        return e;
    size_t kl;
    const void *k = weir_ctx_key(ctx, &kl);
    CHECK_EQ(kl, 8);
    CHECK_EQ(*(const int64_t *)k, rec_i64(in) % 10);
    if ((e = weir_value_put(ctx, "seen", "y", 1)) != 0)
        return e;
    return weir_emit(ctx, in->data, in->len, in->ts);
}

static intptr_t keyed_state_main(void *arg)
{
    (void)arg;
    weir_job *j = weir_job_new("dedupe");
    count_src cfg = {.n = 1000, .per_call = 50};
    weir_collector *c = weir_collector_new();
    weir_op_def dedupe = {.process = first_of_key};
    weir_stream *s = weir_job_source(j, "src", &count_def, &cfg);
    s = weir_stream_key_by(s, mod_key, NULL);
    s = weir_stream_process(s, "first", &dedupe, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.parallelism = 2}), 0);
    /* Two sources (parallelism 2) of 0..999: keys 0..9, each first seen once. */
    CHECK_EQ(weir_collector_count(c), 10);
    weir_collector_free(c);
    weir_job_free(j);
    return 0;
}

TEST(keyed_value_state)
{
    CHECK_EQ(on_runtime(keyed_state_main, NULL), 0);
}

/* ---- watermarks ------------------------------------------------------------------------- */
typedef struct wm_log {
    int64_t last_wm;
    int advances;
    int late; /* records older than the watermark already seen */
    int max_seen;
} wm_log;

static int wm_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    wm_log *w = state;
    if (in->ts < weir_ctx_watermark(ctx))
        w->late++;
    return weir_emit(ctx, in->data, in->len, in->ts);
}

static int wm_advance(weir_ctx *ctx, void *state, int64_t wm)
{
    (void)ctx;
    wm_log *w = state;
    CHECK_GT(wm, w->last_wm); /* strictly increasing */
    w->last_wm = wm;
    w->advances++;
    w->max_seen += wm == WEIR_WATERMARK_MAX;
    return 0;
}

/* Out-of-order source: blocks of 10 in reverse (ts 9..0, 19..10, ...). */
static int ooo_next(weir_ctx *ctx, void *state)
{
    count_state *s = state;
    for (int k = 0; k < 10 && s->next < s->cfg->n; k++) {
        int64_t base = s->next / 10 * 10, v = base + 9 - s->next % 10;
        s->next++;
        int e = weir_emit(ctx, &v, sizeof(v), v);
        if (e)
            return e;
    }
    return s->next >= s->cfg->n;
}

static intptr_t watermark_main(void *arg)
{
    (void)arg;
    weir_job *j = weir_job_new("watermarks");
    count_src slow = {.n = 1000, .per_call = 10}, fast = {.n = 5000, .per_call = 1000};
    weir_source_def ooo = {
        .open = count_open, .next = ooo_next, .close = free, .max_out_of_orderness = 9};
    wm_log w = {.last_wm = WEIR_WATERMARK_MIN};
    weir_op_def logger = {.process = wm_process, .on_watermark = wm_advance};
    weir_stream *parts[2] = {weir_job_source(j, "ooo", &ooo, &slow),
                             weir_job_source(j, "fast", &count_def, &fast)};
    weir_stream *s = weir_stream_union(parts, 2);
    s = weir_stream_process(s, "log", &logger, &w);
    weir_collector *c = weir_collector_new();
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    CHECK_EQ(weir_collector_count(c), 6000);
    CHECK_EQ(w.late, 0);     /* bound 9 covers blocks of 10 reversed */
    CHECK_EQ(w.max_seen, 1); /* end of input: once, last */
    CHECK_EQ(w.last_wm, WEIR_WATERMARK_MAX);
    CHECK_GT(w.advances, 2);
    weir_op_stats st;
    CHECK_EQ(weir_job_op_stats(j, "log", &st), 0);
    CHECK_EQ(st.watermark, WEIR_WATERMARK_MAX);
    weir_collector_free(c);
    weir_job_free(j);
    return 0;
}

TEST(watermarks_min_over_inputs_and_end_of_input)
{
    CHECK_EQ(on_runtime(watermark_main, NULL), 0);
}

/* ---- backpressure ------------------------------------------------------------------------- */
static _Atomic int64_t bp_emitted, bp_consumed, bp_max_gap;

static int slow_sink(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx, (void)state, (void)in;
    int64_t consumed = atomic_fetch_add(&bp_consumed, 1) + 1;
    int64_t gap = atomic_load(&bp_emitted) - consumed;
    if (gap > atomic_load(&bp_max_gap))
        atomic_store(&bp_max_gap, gap);
    if (consumed % 1024 == 0)
        weir_time_sleep(2 * WEIR_MSEC); /* a slow consumer */
    return 0;
}

static intptr_t backpressure_main(void *arg)
{
    (void)arg;
    weir_job *j = weir_job_new("backpressure");
    count_src cfg = {.n = 150000, .per_call = 1024, .emitted = &bp_emitted};
    weir_op_def sink = {.process = slow_sink};
    weir_stream *s = weir_job_source(j, "fast", &count_def, &cfg);
    s = weir_stream_rebalance(s); /* a channel between them (no chaining) */
    CHECK_EQ(weir_stream_sink(s, "slow", &sink, NULL), 0);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.credits = 2}), 0);
    CHECK_EQ(bp_consumed, 150000);
    /* In flight at most: 2 credited batches + the one being filled + the one
     * being consumed, 1024 records each. Without credits the fast source
     * would be ~150k ahead. */
    CHECK_LE(bp_max_gap, 4 * 1024 + 1024);
    weir_op_stats st;
    CHECK_EQ(weir_job_op_stats(j, "fast", &st), 0);
    CHECK_GT(st.backpressure_ns, 10 * WEIR_MSEC);
    weir_job_free(j);
    return 0;
}

TEST(credits_bound_memory_behind_a_slow_sink)
{
    CHECK_EQ(on_runtime(backpressure_main, NULL), 0);
}

/* ---- failures ----------------------------------------------------------------------------- */
static int fail_at_500(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    if (rec_i64(in) == 500)
        return weir_fail(ctx, -EDOM, "value %d is not allowed", 500);
    return weir_emit(ctx, in->data, in->len, in->ts);
}

static int fail_plain(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)ctx, (void)arg;
    return rec_i64(in) == 70 ? -EIO : 0;
}

static intptr_t failure_main(void *arg)
{
    (void)arg;
    /* An unbounded source upstream of a failing operator: the failure
     * cancels the source, run returns the error and names the operator. */
    weir_job *j = weir_job_new("fails");
    count_src cfg = {.n = -1, .per_call = 100};
    weir_collector *c = weir_collector_new();
    weir_stream *s = weir_job_source(j, "forever", &count_def, &cfg);
    s = weir_stream_rebalance(s);
    s = weir_stream_map(s, "picky", fail_at_500, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_EQ(weir_job_run(j, NULL), -EDOM);
    CHECK(strstr(weir_job_error(j), "\"picky\"") != NULL);
    CHECK(strstr(weir_job_error(j), "value 500 is not allowed") != NULL);
    weir_collector_free(c);
    weir_job_free(j);

    j = weir_job_new("fails-plain");
    count_src small = {.n = 100, .per_call = 10};
    weir_op_def none = {.process = NULL};
    (void)none;
    s = weir_job_source(j, "src", &count_def, &small);
    s = weir_stream_map(s, "io", fail_plain, NULL);
    weir_collector *c2 = weir_collector_new();
    CHECK_EQ(weir_stream_collect(s, "out", c2), 0);
    CHECK_EQ(weir_job_run(j, NULL), -EIO);
    CHECK(strstr(weir_job_error(j), "operator \"io\"") != NULL);
    CHECK(strstr(weir_job_error(j), "process failed") != NULL);
    weir_collector_free(c2);
    weir_job_free(j);
    return 0;
}

TEST(failures_name_the_operator)
{
    CHECK_EQ(on_runtime(failure_main, NULL), 0);
}

static intptr_t graph_errors_main(void *arg)
{
    (void)arg;
    count_src cfg = {.n = 10, .per_call = 10};
    /* reduce without key_by */
    weir_job *j = weir_job_new("bad");
    weir_stream *s = weir_job_source(j, "src", &count_def, &cfg);
    CHECK(weir_stream_reduce(s, "r", add_counts, NULL) == NULL);
    CHECK(strstr(weir_job_error(j), "key_by first") != NULL);
    CHECK_EQ(weir_job_run(j, NULL), -EINVAL);
    weir_job_free(j);
    /* duplicate names */
    j = weir_job_new("bad");
    s = weir_job_source(j, "src", &count_def, &cfg);
    s = weir_stream_map(s, "m", times3, NULL);
    CHECK(weir_stream_map(s, "m", times3, NULL) == NULL);
    CHECK(strstr(weir_job_error(j), "unique") != NULL);
    /* a later call on a broken job does nothing */
    CHECK(weir_stream_map(s, "other", times3, NULL) == NULL);
    weir_job_free(j);
    /* forward between different parallelism */
    j = weir_job_new("bad");
    s = weir_stream_parallelism(weir_job_source(j, "src", &count_def, &cfg), 1);
    s = weir_stream_parallelism(weir_stream_map(s, "m", times3, NULL), 2);
    weir_collector *c = weir_collector_new();
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.parallelism = 2}), -EINVAL);
    CHECK(strstr(weir_job_error(j), "use rebalance or key_by") != NULL);
    weir_collector_free(c);
    weir_job_free(j);
    /* names become file names: no '/' */
    j = weir_job_new("bad");
    s = weir_job_source(j, "src", &count_def, &cfg);
    CHECK(weir_stream_map(s, "a/b", times3, NULL) == NULL);
    CHECK(strstr(weir_job_error(j), "no '/'") != NULL);
    weir_job_free(j);
    /* bad options, empty job */
    j = weir_job_new("empty");
    CHECK_EQ(weir_job_run(j, NULL), -EINVAL);
    weir_job_free(j);
    j = weir_job_new("opts");
    weir_job_source(j, "src", &count_def, &cfg);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.parallelism = 129}), -EINVAL);
    weir_job_free(j);
    return 0;
}

TEST(graph_errors)
{
    CHECK_EQ(on_runtime(graph_errors_main, NULL), 0);
}

/* ---- cancellation ----------------------------------------------------------------------- */
static intptr_t run_forever(void *arg)
{
    weir_job *j = arg;
    return weir_job_run(j, &(weir_run_opts){.parallelism = 2});
}

static intptr_t cancel_main(void *arg)
{
    (void)arg;
    weir_job *j = weir_job_new("forever");
    count_src cfg = {.n = -1, .per_call = 100};
    weir_collector *c = weir_collector_new();
    weir_stream *s = weir_job_source(j, "src", &count_def, &cfg);
    s = weir_stream_key_by(s, mod_key, NULL);
    s = weir_stream_filter(s, "none", is_even, NULL);
    s = weir_stream_filter(s, "never", is_even, NULL);
    weir_op_def sink = {.process = count_per_subtask};
    per_sub ps = {0};
    CHECK_EQ(weir_stream_sink(s, "count", &sink, &ps), 0);
    weir_task *t = weir_task_spawn(run_forever, j, &(weir_spawn_opts){.stack_size = 128 << 10});
    weir_time_sleep(100 * WEIR_MSEC);
    CHECK_GT(ps.count[0] + ps.count[1], 0); /* it runs */
    /* Live counters while it runs (a progress line reads them). */
    weir_op_stats live, later;
    CHECK_EQ(weir_job_op_stats(j, "src", &live), 0);
    CHECK_GT(live.records_out, 0);
    weir_time_sleep(20 * WEIR_MSEC);
    CHECK_EQ(weir_job_op_stats(j, "src", &later), 0);
    CHECK_GT(later.records_out, live.records_out);
    CHECK_GT(later.watermark, WEIR_WATERMARK_MIN);
    weir_task_cancel(t);
    intptr_t r = 0;
    weir_task_join(t, &r, WEIR_FOREVER);
    CHECK_EQ(r, -ECANCELED);
    weir_collector_free(c);
    weir_job_free(j);
    return 0;
}

TEST(cancelled_run_ends)
{
    CHECK_EQ(on_runtime(cancel_main, NULL), 0);
}

/* ---- metrics ------------------------------------------------------------------------------ */
static double metric_sum(const char *text, const char *prefix)
{
    double sum = 0;
    size_t pl = strlen(prefix);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, prefix, pl) == 0)
            sum += strtod(strchr(l, ' ') + 1, NULL);
    return sum;
}

/* A user function's own counter, in the run's registry. */
static int count_even_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)arg;
    weir_metrics *m = weir_ctx_metrics(ctx);
    CHECK(m != NULL);
    *state = weir_metrics_counter(m, "test_evens_total", "evens seen by the user function");
    return *state ? 0 : -errno;
}

static int count_even(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx;
    if (rec_i64(in) % 2 == 0)
        weir_counter_inc(state);
    return 0;
}

static intptr_t metrics_main(void *arg)
{
    (void)arg;
    weir_metrics *m = weir_metrics_new(NULL);
    weir_job *j = weir_job_new("metrics");
    count_src cfg = {.n = 5000, .per_call = 100};
    weir_collector *c = weir_collector_new();
    weir_stream *numbers = weir_job_source(j, "numbers", &count_def, &cfg);
    weir_stream *s = weir_stream_rebalance(numbers);
    s = weir_stream_filter(s, "even", is_even, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    weir_op_def evens = {.open = count_even_open, .process = count_even};
    CHECK_EQ(weir_stream_sink(weir_stream_rebalance(numbers), "evens", &evens, NULL), 0);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.parallelism = 2, .metrics = m}), 0);
    weir_metrics_buf b = {0};
    CHECK_EQ(weir_metrics_render(m, &b), 0);
    CHECK(strstr(b.data, "weir_stream_records_in_total{operator=\"even\",subtask=\"1\"}") != NULL);
    CHECK(metric_sum(b.data, "weir_stream_records_out_total{operator=\"numbers\"") == 10000);
    CHECK(metric_sum(b.data, "weir_stream_records_in_total{operator=\"even\"") == 10000);
    CHECK(metric_sum(b.data, "weir_stream_records_out_total{operator=\"even\"") == 5000);
    CHECK(metric_sum(b.data, "weir_stream_records_in_total{operator=\"out\"") == 5000);
    CHECK(strstr(b.data, "weir_stream_watermark{operator=\"even\"") != NULL);
    CHECK(strstr(b.data, "test_evens_total 5000") != NULL); /* the user's own counter */
    weir_metrics_buf_free(&b);
    weir_collector_free(c);
    weir_job_free(j);
    weir_metrics_free(m);
    return 0;
}

TEST(operator_metrics_in_the_registry)
{
    CHECK_EQ(on_runtime(metrics_main, NULL), 0);
}

TEST_MAIN()
