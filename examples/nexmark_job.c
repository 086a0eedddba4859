/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nexmark_job.c - the Nexmark queries as one job plugin (docs/nexmark.md).
 *
 *     weir run build/release/examples/nexmark_job.so [--parallelism N]
 *              [--checkpoint-dir D --checkpoint-interval-ms M] -- QUERY [EVENTS]
 *
 * QUERY is q0, q1, q2, q3, q4, q5, q7, q8 or wc (default q5); EVENTS the
 * number of generated events (default 2,000,000). The generator runs at 1M
 * events per second of event time, so 2M events are 2 s of auction-site
 * traffic; the windows are scaled to that: q7 and q8 use 1 s tumbling
 * windows, q5 1 s hopping windows every 200 ms. Anything else (e.g.
 * `-- --help`) prints the usage and fails the job definition. The result
 * records are counted and summarized at the end: how many, and a few of
 * them (the last ones of each subtask), printed by the sink.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/job.h"

#include "nexmark/generator.c"
#include "nexmark/queries.c"

/* The job's configuration lives as long as the plugin (define runs before
 * the run, and the run borrows it). */
static nexmark_cfg cfg;
static nexmark_opts opts;
static char query[8];

/* ---- the summary sink: counts results, keeps the last few per subtask ---------------------- */
typedef struct summary {
    uint64_t n;
    char last[3][160];
    int nlast;
} summary;

static int sum_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = calloc(1, sizeof(summary));
    return *state ? 0 : -ENOMEM;
}

static void describe(const weir_rec *r, char *out, size_t cap)
{
    if (!strcmp(query, "q5")) {
        const nexmark_q5_out *o = r->data;
        snprintf(out, cap, "window at %.1f s: auction %" PRId64 " with %" PRId64 " bids",
                 (double)o->start / 1e9, o->auction, o->count);
    } else if (!strcmp(query, "q7")) {
        const nexmark_q7_out *o = r->data;
        snprintf(out, cap, "window at %.1f s: highest bid %" PRId64 " on auction %" PRId64,
                 (double)o->start / 1e9, o->price, o->auction);
    } else if (!strcmp(query, "q8")) {
        const nexmark_q8_out *o = r->data;
        snprintf(out, cap, "new seller %" PRId64 " (%s) in the window at %.1f s", o->id, o->name,
                 (double)o->start / 1e9);
    } else if (!strcmp(query, "q4")) {
        const nexmark_q4_out *o = r->data;
        snprintf(out, cap, "category %" PRId64 ": average winning bid %" PRId64, o->category,
                 o->count ? o->sum / o->count : 0);
    } else if (!strcmp(query, "q3")) {
        const nexmark_q3_out *o = r->data;
        snprintf(out, cap, "%s of %s, %s sells auction %" PRId64, o->name, o->city, o->state,
                 o->auction);
    } else if (!strcmp(query, "q2")) {
        const nexmark_q2_out *o = r->data;
        snprintf(out, cap, "bid of %" PRId64 " on auction %" PRId64, o->price, o->auction);
    } else if (!strcmp(query, "wc")) {
        const nexmark_wc_out *o = r->data;
        snprintf(out, cap, "\"%.*s\" seen %" PRId64 " times", (int)(r->len - sizeof(*o)),
                 (const char *)r->data + sizeof(*o), o->count);
    } else {
        snprintf(out, cap, "a record of %zu bytes at %.3f s", r->len, (double)r->ts / 1e9);
    }
}

static int sum_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx;
    summary *s = state;
    s->n++;
    describe(in, s->last[s->nlast % 3], sizeof(s->last[0]));
    s->nlast++;
    return 0;
}

static int sum_finish(weir_ctx *ctx, void *state)
{
    summary *s = state;
    printf("nexmark %s, subtask %d: %" PRIu64 " results\n", query, weir_ctx_subtask(ctx), s->n);
    int k = s->nlast < 3 ? s->nlast : 3;
    for (int i = 0; i < k; i++)
        printf("  %s\n", s->last[(s->nlast - k + i) % 3]);
    fflush(stdout);
    return 0;
}

static const weir_op_def summary_def = {
    .open = sum_open, .process = sum_process, .finish = sum_finish, .close = free};

/* ---- the job ----------------------------------------------------------------------------------
 */
static int define(weir_job *j, int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(weir_job *, weir_stream *, weir_stream **, const nexmark_opts *);
    } queries[] = {{"q0", nexmark_q0}, {"q1", nexmark_q1}, {"q2", nexmark_q2},
                   {"q3", nexmark_q3}, {"q4", nexmark_q4}, {"q5", nexmark_q5},
                   {"q7", nexmark_q7}, {"q8", nexmark_q8}, {"wc", nexmark_wc}};
    const char *q = argc > 1 ? argv[1] : "q5";
    long long events = argc > 2 ? atoll(argv[2]) : 2000000;
    int found = -1;
    for (size_t i = 0; i < sizeof(queries) / sizeof(queries[0]); i++)
        if (!strcmp(q, queries[i].name))
            found = (int)i;
    if (found < 0 || events <= 0 || argc > 3) {
        fprintf(stderr, "nexmark: usage: QUERY [EVENTS]  (QUERY: q0 q1 q2 q3 q4 q5 q7 q8 wc, "
                        "default q5; EVENTS > 0, default 2000000 at 1M events/s of event "
                        "time; windows: q7 q8 1 s, q5 1 s every 200 ms)\n");
        return -EINVAL;
    }
    snprintf(query, sizeof(query), "%s", q);
    cfg = (nexmark_cfg){.seed = 42, .events = events, .rate = 1000000};
    /* Windows scaled to the default 2M events at 1M events/s: 1 s windows
     * (q7, q8), q5 hopping 1 s every 200 ms. */
    opts = (nexmark_opts){.window_ns = 1000000000, .slide_ns = 200000000};
    weir_stream *events_s = weir_job_source(j, "events", &nexmark_source, &cfg);
    weir_stream *out = NULL;
    int e = queries[found].fn(j, events_s, &out, &opts);
    if (e)
        return e;
    return weir_stream_sink(out, "summary", &summary_def, NULL) < 0 ? -EINVAL : 0;
}

WEIR_REGISTER_JOB("nexmark", "1.0", define);
