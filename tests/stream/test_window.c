/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_window.c - event time on the runner (weir/stream.h): event-time
 * timers firing in time order across keys, processing-time timers,
 * tumbling / hopping / session windows against hand counts, out-of-order
 * records merging sessions, allowed lateness re-firing a window, the late
 * side output, and idle inputs leaving the watermark minimum.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "test_rt.h"
#include "weir/rt.h"
#include "weir/state.h"
#include "weir/stream.h"

/* Every job here runs on a two-thread runtime. */
static intptr_t on_runtime(weir_task_fn fn, void *arg)
{
    return test_run_on_rt(2, fn, arg);
}

/* An event: key, value, timestamp. */
typedef struct ev {
    int64_t key, value, ts;
} ev;

/* A scripted source: one event per next() call, so the watermark (bound
 * `ooo`) moves after every event. */
typedef struct script {
    const ev *evs;
    int n;
    int64_t sleep_ms_at_end; /* keep running this long after the last event */
    int64_t sleep_ms_each;   /* pause before each event */
} script;

typedef struct script_state {
    const script *sc;
    int i;
} script_state;

static int script_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    script_state *s = calloc(1, sizeof(*s));
    s->sc = arg;
    *state = s;
    return 0;
}

static int script_next(weir_ctx *ctx, void *state)
{
    script_state *s = state;
    if (s->i < s->sc->n) {
        if (s->sc->sleep_ms_each)
            weir_time_sleep(s->sc->sleep_ms_each * WEIR_MSEC);
        const ev *e = &s->sc->evs[s->i++];
        return weir_emit(ctx, e, sizeof(*e), e->ts);
    }
    /* After the last event has gone out (flushed when next() returned). */
    if (s->sc->sleep_ms_at_end)
        weir_time_sleep(s->sc->sleep_ms_at_end * WEIR_MSEC);
    return 1;
}

static weir_source_def script_def(int64_t ooo)
{
    return (weir_source_def){
        .open = script_open, .next = script_next, .close = free, .max_out_of_orderness = ooo};
}

static int ev_key(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = &((const ev *)in->data)->key;
    *len = sizeof(int64_t);
    return 0;
}

/* Fold: sum the values (an ev whose value accumulates). */
static int sum_values(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    static __thread ev r;
    (void)arg;
    memcpy(&r, acc->data, sizeof(r));
    r.value += ((const ev *)in->data)->value;
    *out = (weir_rec){&r, sizeof(r), in->ts};
    return 0;
}

typedef struct wres {
    int64_t start, end, key, sum, ts;
} wres;

static int get_results(weir_collector *c, wres *out, int max)
{
    int n = (int)weir_collector_count(c);
    CHECK_LE(n, max);
    for (int i = 0; i < n; i++) {
        const weir_rec *r = weir_collector_get(c, i);
        CHECK_EQ(r->len, sizeof(weir_window_result) + sizeof(ev));
        weir_window_result h;
        ev e;
        memcpy(&h, r->data, sizeof(h));
        memcpy(&e, (const uint8_t *)r->data + sizeof(h), sizeof(e));
        out[i] = (wres){h.start, h.end, e.key, e.value, r->ts};
        CHECK_EQ(r->ts, h.end - 1);
    }
    return n;
}

static const wres *find(const wres *r, int n, int64_t key, int64_t start, int nth)
{
    for (int i = 0; i < n; i++)
        if (r[i].key == key && r[i].start == start && nth-- == 0)
            return &r[i];
    return NULL;
}

/* ---- tumbling and hopping ------------------------------------------------------------------ */
static ev many[1000];

static intptr_t fixed_main(void *arg)
{
    int hopping = (int)(intptr_t)arg;
    for (int i = 0; i < 1000; i++)
        many[i] = (ev){i % 3, 1, i};
    script sc = {many, 1000, 0, 0};
    weir_source_def sd = script_def(0);
    weir_job *j = weir_job_new("fixed");
    weir_collector *c = weir_collector_new();
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "events", &sd, &sc), 1);
    s = weir_stream_key_by(s, ev_key, NULL);
    weir_window w = hopping ? (weir_window){.kind = WEIR_WINDOW_HOPPING, .size = 100, .slide = 50}
                            : (weir_window){.kind = WEIR_WINDOW_TUMBLING, .size = 100};
    s = weir_stream_parallelism(weir_stream_window(s, "w", &w, sum_values, NULL), 2);
    CHECK(s != NULL);
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    int e = weir_job_run(j, NULL);
    if (e)
        fprintf(stderr, "%s\n", weir_job_error(j));
    CHECK_EQ(e, 0);
    static wres r[200];
    int n = get_results(c, r, 200);
    int windows = 0;
    for (int64_t start = hopping ? -50 : 0; start < 1000; start += hopping ? 50 : 100) {
        for (int64_t k = 0; k < 3; k++) {
            int64_t want = 0;
            for (int64_t t = start < 0 ? 0 : start; t < start + 100 && t < 1000; t++)
                want += t % 3 == k;
            const wres *x = find(r, n, k, start, 0);
            CHECK(x != NULL);
            CHECK_EQ(x->sum, want);
            CHECK_EQ(x->end, start + 100);
            CHECK(find(r, n, k, start, 1) == NULL); /* fired once */
            windows++;
        }
    }
    CHECK_EQ(n, windows);
    weir_collector_free(c);
    weir_job_free(j);
    return 0;
}

TEST(tumbling_windows)
{
    CHECK_EQ(on_runtime(fixed_main, (void *)0), 0);
}

TEST(hopping_windows)
{
    CHECK_EQ(on_runtime(fixed_main, (void *)1), 0);
}

/* ---- sessions ---------------------------------------------------------------------------- */
static intptr_t session_main(void *arg)
{
    (void)arg;
    /* key 1: 0, 40, then 20 bridges them (out of order, within the bound);
     * key 2: 0, 10, 20 one session; 200 a second one. */
    static const ev evs[] = {{1, 1, 0},  {2, 1, 0},  {1, 1, 40},  {2, 1, 10},
                             {1, 1, 20}, {2, 1, 20}, {2, 1, 200}, {1, 1, 300}};
    script sc = {evs, 8, 0, 0};
    weir_source_def sd = script_def(30);
    weir_job *j = weir_job_new("sessions");
    weir_collector *c = weir_collector_new();
    weir_stream *s = weir_job_source(j, "events", &sd, &sc);
    s = weir_stream_key_by(s, ev_key, NULL);
    weir_window w = {.kind = WEIR_WINDOW_SESSION, .gap = 25};
    s = weir_stream_window(s, "sess", &w, sum_values, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    wres r[16];
    int n = get_results(c, r, 16);
    CHECK_EQ(n, 4);
    const wres *x = find(r, n, 1, 0, 0);
    CHECK(x != NULL);
    CHECK_EQ(x->end, 65); /* [0,25) + [20,45) + [40,65) merged */
    CHECK_EQ(x->sum, 3);
    x = find(r, n, 1, 300, 0);
    CHECK(x && x->sum == 1 && x->end == 325);
    x = find(r, n, 2, 0, 0);
    CHECK(x && x->sum == 3 && x->end == 45);
    x = find(r, n, 2, 200, 0);
    CHECK(x && x->sum == 1);
    weir_collector_free(c);
    weir_job_free(j);
    return 0;
}

TEST(session_windows_merge)
{
    CHECK_EQ(on_runtime(session_main, NULL), 0);
}

/* A merge must not take timers another session of the key needs: with gap
 * 3 and lateness 5, merging [10,13) into [10,14) leaves its drop time 17,
 * which is [15,18)'s fire time. */
static intptr_t session_timers_main(void *arg)
{
    (void)arg;
    static const ev evs[] = {{1, 100, 10}, {1, 10, 15}, {1, 1, 11}};
    script sc = {evs, 3, 0, 0};
    weir_source_def sd = script_def(5);
    weir_job *j = weir_job_new("sessions-timers");
    weir_collector *c = weir_collector_new();
    weir_stream *s = weir_stream_key_by(weir_job_source(j, "events", &sd, &sc), ev_key, NULL);
    weir_window w = {.kind = WEIR_WINDOW_SESSION, .gap = 3, .allowed_lateness = 5};
    s = weir_stream_window(s, "sess", &w, sum_values, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    wres r[8];
    int n = get_results(c, r, 8);
    const wres *a = find(r, n, 1, 10, 0), *b = find(r, n, 1, 15, 0);
    CHECK(a && a->end == 14 && a->sum == 101);
    CHECK(b && b->end == 18 && b->sum == 10);
    weir_collector_free(c);
    weir_job_free(j);
    return 0;
}

TEST(session_merge_keeps_other_sessions_timers)
{
    CHECK_EQ(on_runtime(session_timers_main, NULL), 0);
}

/* ---- lateness ---------------------------------------------------------------------------- */
static intptr_t late_main(void *arg)
{
    int64_t lateness = (int64_t)(intptr_t)arg;
    /* Window [0,100) closes when 99 is passed (bound 0): 150 passes it; then
     * 5 arrives (late by 145), then 160 arrives and 7 (late by 153 > lateness
     * 150? no: 99 + 150 = 249 > 160: within) ... see the checks. */
    static const ev evs[] = {{1, 1, 10}, {1, 1, 150}, {1, 1, 5}, {1, 1, 260}, {1, 1, 7}};
    script sc = {evs, 5, 0, 0};
    weir_source_def sd = script_def(0);
    weir_job *j = weir_job_new("late");
    weir_collector *c = weir_collector_new(), *late = weir_collector_new();
    weir_stream *s = weir_job_source(j, "events", &sd, &sc);
    s = weir_stream_key_by(s, ev_key, NULL);
    weir_window w = {.kind = WEIR_WINDOW_TUMBLING, .size = 100, .allowed_lateness = lateness};
    weir_stream *win = weir_stream_window(s, "w", &w, sum_values, NULL);
    CHECK_EQ(weir_stream_collect(win, "out", c), 0);
    CHECK_EQ(weir_stream_collect(weir_stream_side(win), "late", late), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    wres r[16];
    int n = get_results(c, r, 16);
    const wres *first = find(r, n, 1, 0, 0), *second = find(r, n, 1, 0, 1);
    CHECK(first != NULL);
    CHECK_EQ(first->sum, 1); /* fired at watermark 150 with the record at 10 */
    if (lateness == 0) {
        /* 5 and 7 are too late: side output, the window is gone. */
        CHECK(second == NULL);
        CHECK_EQ(weir_collector_count(late), 2);
        CHECK_EQ(((const ev *)weir_collector_get(late, 0)->data)->ts, 5);
    } else {
        /* 150 of lateness: 5 (watermark 150 <= 99 + 150) refires [0,100)
         * with sum 2; 7 comes at watermark 260 > 249: too late. */
        CHECK(second != NULL);
        CHECK_EQ(second->sum, 2);
        CHECK(find(r, n, 1, 0, 2) == NULL);
        CHECK_EQ(weir_collector_count(late), 1);
        CHECK_EQ(((const ev *)weir_collector_get(late, 0)->data)->ts, 7);
    }
    CHECK(find(r, n, 1, 100, 0) && find(r, n, 1, 100, 0)->sum == 1);
    CHECK(find(r, n, 1, 200, 0) && find(r, n, 1, 200, 0)->sum == 1);
    weir_collector_free(c);
    weir_collector_free(late);
    weir_job_free(j);
    return 0;
}

TEST(late_records_go_to_the_side_output)
{
    CHECK_EQ(on_runtime(late_main, (void *)0), 0);
}

TEST(allowed_lateness_refires)
{
    CHECK_EQ(on_runtime(late_main, (void *)150), 0);
}

/* The watermark's boundary (bound 100, one record per next()): after 950
 * and 1099 the watermark is 1099 - 100 - 1 = 998, so 999 (exactly the bound
 * behind, on the last instant of [0, 1000)) is on time; after 1100 it is
 * 999, and 999 (bound + 1 behind) is late. arg: kind | late << 4. Sessions
 * use gap 1 so that 999's session [999, 1000) ends on that instant too. */
static intptr_t boundary_main(void *arg)
{
    int kind = (int)(intptr_t)arg & 15, behind = (int)(intptr_t)arg >> 4;
    ev evs[] = {{1, 1, 950}, {1, 1, behind ? 1100 : 1099}, {1, 1, 999}, {1, 1, 2500}};
    script sc = {evs, 4, 0, 0};
    weir_source_def sd = script_def(100);
    weir_job *j = weir_job_new("boundary");
    weir_collector *c = weir_collector_new(), *late = weir_collector_new();
    weir_stream *s = weir_stream_key_by(weir_job_source(j, "events", &sd, &sc), ev_key, NULL);
    weir_window w = {.kind = kind, .size = 1000, .slide = 500, .gap = 1};
    weir_stream *win = weir_stream_window(s, "w", &w, sum_values, NULL);
    CHECK_EQ(weir_stream_collect(win, "out", c), 0);
    CHECK_EQ(weir_stream_collect(weir_stream_side(win), "late", late), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    wres r[16];
    int n = get_results(c, r, 16);
    if (kind == WEIR_WINDOW_SESSION) {
        const wres *x = find(r, n, 1, 999, 0);
        CHECK_EQ(x != NULL, !behind);
    } else {
        const wres *x = find(r, n, 1, 0, 0);
        CHECK(x != NULL);
        CHECK_EQ(x->sum, behind ? 1 : 2);
        CHECK(find(r, n, 1, 0, 1) == NULL);
    }
    /* Hopping: 999 is also in [500, 1500) (with 950 and 1099/1100), not
     * fired, so it is not late for all its windows. */
    int late_n = kind == WEIR_WINDOW_HOPPING ? 0 : behind;
    if (kind == WEIR_WINDOW_HOPPING)
        CHECK(find(r, n, 1, 500, 0) && find(r, n, 1, 500, 0)->sum == 3);
    CHECK_EQ(weir_collector_count(late), (size_t)late_n);
    if (late_n)
        CHECK_EQ(weir_collector_get(late, 0)->ts, 999);
    weir_collector_free(c);
    weir_collector_free(late);
    weir_job_free(j);
    return 0;
}

TEST(watermark_boundary_tumbling)
{
    CHECK_EQ(on_runtime(boundary_main, (void *)(intptr_t)WEIR_WINDOW_TUMBLING), 0);
    CHECK_EQ(on_runtime(boundary_main, (void *)(intptr_t)(WEIR_WINDOW_TUMBLING | 16)), 0);
}

TEST(watermark_boundary_hopping)
{
    CHECK_EQ(on_runtime(boundary_main, (void *)(intptr_t)WEIR_WINDOW_HOPPING), 0);
    CHECK_EQ(on_runtime(boundary_main, (void *)(intptr_t)(WEIR_WINDOW_HOPPING | 16)), 0);
}

TEST(watermark_boundary_session)
{
    CHECK_EQ(on_runtime(boundary_main, (void *)(intptr_t)WEIR_WINDOW_SESSION), 0);
    CHECK_EQ(on_runtime(boundary_main, (void *)(intptr_t)(WEIR_WINDOW_SESSION | 16)), 0);
}

/* Hopping windows keep their state per slide (pane): a pane must outlive
 * every window holding it, up to the last one's lateness. size 100, slide
 * 50, bound 0: [0,100) and [-50,50) hold 10; 150 fires them; 5 is late for
 * both; 210 passes [-50,50)'s lateness (49 + 150) but not [0,100)'s (249),
 * so 8 refires only [0,100), from the pane [0,50) that still holds 10 and
 * 5; at 260 both are gone and 7 goes to the side output. */
static intptr_t hopping_late_main(void *arg)
{
    int64_t lateness = (int64_t)(intptr_t)arg;
    static const ev evs[] = {{1, 1, 10}, {1, 1, 150}, {1, 1, 5}, {1, 1, 210},
                             {1, 1, 8},  {1, 1, 260}, {1, 1, 7}};
    script sc = {evs, 7, 0, 0};
    weir_source_def sd = script_def(0);
    weir_job *j = weir_job_new("hopping-late");
    weir_collector *c = weir_collector_new(), *late = weir_collector_new();
    weir_stream *s = weir_job_source(j, "events", &sd, &sc);
    s = weir_stream_key_by(s, ev_key, NULL);
    weir_window w = {
        .kind = WEIR_WINDOW_HOPPING, .size = 100, .slide = 50, .allowed_lateness = lateness};
    weir_stream *win = weir_stream_window(s, "w", &w, sum_values, NULL);
    CHECK_EQ(weir_stream_collect(win, "out", c), 0);
    CHECK_EQ(weir_stream_collect(weir_stream_side(win), "late", late), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    wres r[32];
    int n = get_results(c, r, 32);
    /* (start, the sums of its firings in order) */
    struct {
        int64_t start;
        int64_t sums[3];
    } want[] = {{-50, {1, 2, 0}}, {0, {1, 2, 3}},   {100, {1, 0, 0}},
                {150, {2, 0, 0}}, {200, {2, 0, 0}}, {250, {1, 0, 0}}};
    int total = 0;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        int k = 0;
        for (; k < 3 && want[i].sums[k]; k++) {
            if (lateness == 0 && k > 0)
                break; /* no refiring without lateness */
            const wres *x = find(r, n, 1, want[i].start, k);
            CHECK(x != NULL);
            CHECK_EQ(x->sum, want[i].sums[k]);
            CHECK_EQ(x->end, want[i].start + 100);
        }
        CHECK(find(r, n, 1, want[i].start, k) == NULL);
        total += k;
    }
    CHECK_EQ(n, total);
    CHECK_EQ(weir_collector_count(late), lateness == 0 ? 3 : 1);
    CHECK_EQ(((const ev *)weir_collector_get(late, weir_collector_count(late) - 1)->data)->ts, 7);
    weir_collector_free(c);
    weir_collector_free(late);
    weir_job_free(j);
    return 0;
}

TEST(hopping_panes_late_records)
{
    CHECK_EQ(on_runtime(hopping_late_main, (void *)0), 0);
}

TEST(hopping_panes_outlive_their_windows)
{
    CHECK_EQ(on_runtime(hopping_late_main, (void *)150), 0);
}

/* ---- the ends of the time range ---------------------------------------------------------- */
/* Records at both ends of the int64 time range and around the pane-mode
 * bounds (INT64_MIN / 2, INT64_MAX / 2), in order: a window reaching past an
 * end is cut short there (its start or end saturates), and every window
 * fires exactly once with the sum of its records - checked against a model
 * that enumerates windows in 128 bits. Modes: hopping (panes), tumbling,
 * hopping with lateness. */
__extension__ typedef __int128 i128;
#define EXT_MAX 200
static ev ext_evs[EXT_MAX];

typedef struct ext_win {
    int64_t start, end, sum;
    int seen;
} ext_win;
static ext_win ext_want[EXT_MAX * 4];

static int cmp_ts(const void *a, const void *b)
{
    const ev *x = a, *y = b;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

static intptr_t ends_main(void *arg)
{
    int mode = (int)(intptr_t)arg;
    int64_t size = mode == 1 ? 10 : 30, slide = 10, lateness = mode == 2 ? 15 : 0;
    int n = 0, nwant = 0;
    for (int i = 0; i < 6; i++)
        ext_evs[n++].ts = INT64_MIN + i * 7;
    for (int i = -25; i <= 25; i += 3)
        ext_evs[n++].ts = INT64_MIN / 2 + i;
    for (int i = 0; i <= 50; i += 4)
        ext_evs[n++].ts = i;
    for (int i = -25; i <= 25; i += 3)
        ext_evs[n++].ts = INT64_MAX / 2 + i;
    for (int i = 1; i <= 6; i++)
        ext_evs[n++].ts = INT64_MAX - i * 5;
    qsort(ext_evs, (size_t)n, sizeof(ev), cmp_ts);
    for (int i = 0; i < n; i++) {
        ext_evs[i].key = 1;
        ext_evs[i].value = 1 + i % 3;
        i128 ts = ext_evs[i].ts, r = ((ts % slide) + slide) % slide;
        for (i128 st = ts - r; st + size > ts; st -= slide) {
            int64_t a = st < INT64_MIN ? INT64_MIN : (int64_t)st;
            int64_t b = st + size > INT64_MAX ? INT64_MAX : (int64_t)(st + size);
            int k = 0;
            while (k < nwant && !(ext_want[k].start == a && ext_want[k].end == b))
                k++;
            if (k == nwant)
                ext_want[nwant++] = (ext_win){a, b, 0, 0};
            ext_want[k].sum += ext_evs[i].value;
        }
    }
    script sc = {ext_evs, n, 0, 0};
    weir_source_def sd = script_def(0);
    weir_job *j = weir_job_new("ends");
    weir_collector *c = weir_collector_new(), *side = weir_collector_new();
    weir_stream *s = weir_stream_key_by(weir_job_source(j, "events", &sd, &sc), ev_key, NULL);
    weir_window w = {.kind = mode == 1 ? WEIR_WINDOW_TUMBLING : WEIR_WINDOW_HOPPING,
                     .size = size,
                     .slide = mode == 1 ? 0 : slide,
                     .allowed_lateness = lateness};
    weir_stream *o = weir_stream_window(s, "w", &w, sum_values, NULL);
    CHECK_EQ(weir_stream_collect(o, "out", c), 0);
    CHECK_EQ(weir_stream_collect(weir_stream_side(o), "late", side), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    CHECK_EQ(weir_collector_count(side), 0);
    int got = (int)weir_collector_count(c);
    for (int i = 0; i < got; i++) {
        const weir_rec *r = weir_collector_get(c, i);
        weir_window_result h;
        ev x;
        memcpy(&h, r->data, sizeof(h));
        memcpy(&x, (const uint8_t *)r->data + sizeof(h), sizeof(x));
        int k = 0;
        while (k < nwant && !(ext_want[k].start == h.start && ext_want[k].end == h.end))
            k++;
        if (k == nwant || ext_want[k].seen || ext_want[k].sum != x.value)
            fprintf(stderr, "window [%lld, %lld) sum %lld: %s\n", (long long)h.start,
                    (long long)h.end, (long long)x.value,
                    k == nwant         ? "unexpected"
                    : ext_want[k].seen ? "again"
                                       : "wrong sum");
        CHECK(k < nwant);
        CHECK_EQ(ext_want[k].seen, 0);
        CHECK_EQ(ext_want[k].sum, x.value);
        ext_want[k].seen = 1;
    }
    CHECK_EQ(got, nwant);
    weir_collector_free(c);
    weir_collector_free(side);
    weir_job_free(j);
    return 0;
}

TEST(windows_at_the_ends_of_time)
{
    for (intptr_t mode = 0; mode < 3; mode++)
        CHECK_EQ(on_runtime(ends_main, (void *)mode), 0);
}

/* ---- timers ------------------------------------------------------------------------------ */
typedef struct tlog {
    int64_t times[64];
    int64_t keys[64];
    int n;
    int proc;
} tlog;

static int timer_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    const ev *e = in->data;
    /* Each event asks for a timer at its value (event time), twice: the
     * second registration changes nothing. */
    int r = weir_timer_register(ctx, WEIR_TIME_EVENT, e->value);
    if (!r)
        r = weir_timer_register(ctx, WEIR_TIME_EVENT, e->value);
    if (!r && e->key == 9) /* and one processing-time timer, 20 ms out */
        r = weir_timer_register(ctx, WEIR_TIME_PROCESSING, weir_time_now() + 20 * WEIR_MSEC);
    return r;
}

static int timer_fired(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    tlog *t = state;
    size_t kl;
    int64_t key;
    memcpy(&key, weir_ctx_key(ctx, &kl), sizeof(key)); /* keys promise no alignment */
    const int64_t *k = &key;
    CHECK_EQ(kl, 8);
    if (domain == WEIR_TIME_PROCESSING) {
        CHECK_EQ(*k, 9);
        t->proc++;
        return 0;
    }
    CHECK_LE(when, weir_ctx_watermark(ctx)); /* fires once the watermark passed */
    t->times[t->n] = when;
    t->keys[t->n++] = *k;
    return 0;
}

static intptr_t timers_main(void *arg)
{
    (void)arg;
    /* Keys 1..5 ask for timers at times out of order. */
    static const ev evs[] = {{3, 50, 1}, {1, 30, 2}, {5, 10, 3},  {2, 40, 4},
                             {4, 20, 5}, {1, 35, 6}, {9, 1000, 7}};
    script sc = {evs, 7, 60, 0};
    weir_source_def sd = script_def(0);
    weir_job *j = weir_job_new("timers");
    tlog t = {0};
    weir_op_def def = {.process = timer_process, .on_timer = timer_fired};
    weir_stream *s = weir_job_source(j, "events", &sd, &sc);
    s = weir_stream_key_by(s, ev_key, NULL);
    CHECK_EQ(weir_stream_sink(s, "timers", &def, &t), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0); /* parallelism 1: one log */
    int64_t want_t[] = {10, 20, 30, 35, 40, 50, 1000};
    int64_t want_k[] = {5, 4, 1, 1, 2, 3, 9};
    CHECK_EQ(t.n, 7);
    for (int i = 0; i < 7; i++) {
        CHECK_EQ(t.times[i], want_t[i]);
        CHECK_EQ(t.keys[i], want_k[i]);
    }
    CHECK_EQ(t.proc, 1);
    weir_job_free(j);
    return 0;
}

TEST(timers_fire_in_time_order)
{
    CHECK_EQ(on_runtime(timers_main, NULL), 0);
}

/* Many timers over many keys, with repeats and deletes: each event of key
 * k (value v) registers an even time after its own, once more (a no-op),
 * and an odd one that it deletes at once. Exactly the even times fire,
 * once each, in time order, and with their own key. */
#define MANY_EVENTS 4000
#define MANY_KEYS   50

typedef struct many_log {
    int64_t last;
    int fired, bad;
    uint8_t seen[MANY_KEYS][MANY_EVENTS * 4 + 32]; /* times are < ts + 4 * MANY_EVENTS */
} many_log;

static ev many_evs[MANY_EVENTS];

static int many_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    const ev *e = in->data;
    int r = weir_timer_register(ctx, WEIR_TIME_EVENT, e->value);
    if (!r)
        r = weir_timer_register(ctx, WEIR_TIME_EVENT, e->value);
    if (!r)
        r = weir_timer_register(ctx, WEIR_TIME_EVENT, e->value + 1);
    if (!r)
        r = weir_timer_delete(ctx, WEIR_TIME_EVENT, e->value + 1);
    if (!r) /* deleting what is not there is no error */
        r = weir_timer_delete(ctx, WEIR_TIME_EVENT, e->value + 3);
    /* Ten more odd ones, deleted: deleted timers soon outnumber the live
     * ones, and the timers are compacted now and then. */
    for (int64_t d = 5; !r && d < 25; d += 2)
        r = weir_timer_register(ctx, WEIR_TIME_EVENT, e->value + d);
    for (int64_t d = 5; !r && d < 25; d += 2)
        r = weir_timer_delete(ctx, WEIR_TIME_EVENT, e->value + d);
    return r;
}

static int many_fired(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    many_log *l = state;
    size_t kl;
    int64_t k;
    memcpy(&k, weir_ctx_key(ctx, &kl), sizeof(k));
    if (domain != WEIR_TIME_EVENT || when < l->last || when % 2 || k < 0 || k >= MANY_KEYS ||
        when >= MANY_EVENTS * 4 + 32 || l->seen[k][when]++)
        l->bad++;
    l->last = when;
    l->fired++;
    return 0;
}

static intptr_t many_timers_main(void *arg)
{
    (void)arg;
    static many_log l;
    static uint8_t want[MANY_KEYS][MANY_EVENTS * 4 + 32];
    memset(&l, 0, sizeof(l));
    memset(want, 0, sizeof(want));
    unsigned seed = 12345;
    int expect = 0;
    for (int i = 0; i < MANY_EVENTS; i++) {
        int64_t key = rand_r(&seed) % MANY_KEYS;
        int64_t when = (i + 1 + rand_r(&seed) % (3 * MANY_EVENTS)) & ~(int64_t)1;
        when += when <= i ? 2 : 0; /* after the event's own time */
        many_evs[i] = (ev){key, when, i};
        expect += !want[key][when]++;
    }
    script sc = {many_evs, MANY_EVENTS, 0, 0};
    weir_source_def sd = script_def(0);
    weir_job *j = weir_job_new("many-timers");
    weir_op_def def = {.process = many_process, .on_timer = many_fired};
    weir_stream *s = weir_job_source(j, "events", &sd, &sc);
    s = weir_stream_key_by(s, ev_key, NULL);
    CHECK_EQ(weir_stream_sink(s, "timers", &def, &l), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0); /* parallelism 1: one log */
    CHECK_EQ(l.bad, 0);
    CHECK_EQ(l.fired, expect);
    for (int k = 0; k < MANY_KEYS; k++)
        for (int t = 0; t < MANY_EVENTS * 4 + 32; t++)
            CHECK_EQ(!!l.seen[k][t], !!want[k][t]);
    weir_job_free(j);
    return 0;
}

TEST(many_timers_with_repeats_and_deletes)
{
    CHECK_EQ(on_runtime(many_timers_main, NULL), 0);
}

/* A timer's key must fit a state key with the timer's 13 bytes: longer
 * keys are refused at once (not at the next checkpoint). */
static int big_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = calloc(1, sizeof(int));
    return 0;
}

static int big_next(weir_ctx *ctx, void *state)
{
    int *done = state;
    if (*done)
        return 1;
    *done = 1;
    static uint8_t rec[WEIR_STATE_MAX_KEY];
    int e = weir_emit(ctx, rec, sizeof(rec), 1); /* the key: all of it */
    return e ? e : weir_emit(ctx, rec, WEIR_STATE_MAX_KEY - 13, 2);
}

static int whole_key(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = in->data;
    *len = in->len;
    return 0;
}

static int big_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    int e = weir_timer_register(ctx, WEIR_TIME_EVENT, 100);
    CHECK_EQ(e, in->len > WEIR_STATE_MAX_KEY - 13 ? -E2BIG : 0);
    return 0;
}

static intptr_t big_key_main(void *arg)
{
    (void)arg;
    weir_job *j = weir_job_new("big-keys");
    weir_source_def sd = {.open = big_open, .next = big_next, .close = free};
    weir_op_def def = {.process = big_process};
    weir_stream *s = weir_stream_key_by(weir_job_source(j, "events", &sd, NULL), whole_key, NULL);
    CHECK_EQ(weir_stream_sink(s, "timers", &def, NULL), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    weir_job_free(j);
    return 0;
}

TEST(timer_keys_too_long_are_refused)
{
    CHECK_EQ(on_runtime(big_key_main, NULL), 0);
}

/* ---- idle inputs -------------------------------------------------------------------------- */
typedef struct wm_seen {
    _Atomic int64_t max_before_end;
} wm_seen;

static int wm_proc(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx, (void)state, (void)in;
    return 0;
}

static int wm_hook(weir_ctx *ctx, void *state, int64_t wm)
{
    wm_seen *w = state;
    /* Outside a record there is no current key: no keyed state, no timers. */
    const void *v;
    size_t n;
    CHECK(weir_ctx_key(ctx, &n) == NULL);
    CHECK_EQ(n, 0);
    CHECK_EQ(weir_value_get(ctx, "x", &v, &n), -EINVAL);
    CHECK_EQ(weir_timer_register(ctx, WEIR_TIME_EVENT, 5), -EINVAL);
    if (wm != WEIR_WATERMARK_MAX && wm > w->max_before_end)
        w->max_before_end = wm;
    return 0;
}

static intptr_t idle_main(void *arg)
{
    int64_t idle_ms = (int64_t)(intptr_t)arg;
    /* "quiet" sends ts 0..9 and then nothing for 600 ms; "busy" sends
     * ts 1000..1099, one every 4 ms. Without idleness the union's
     * watermark waits for quiet (<= 9); with a 50 ms idle timeout quiet
     * leaves the minimum and the watermark follows busy past 1000. */
    static ev a[10], b[100];
    for (int i = 0; i < 10; i++)
        a[i] = (ev){1, 1, i};
    for (int i = 0; i < 100; i++)
        b[i] = (ev){2, 1, 1000 + i};
    script sa = {a, 10, 600, 0}, sb = {b, 100, 0, 4};
    weir_source_def sd = script_def(0);
    weir_job *j = weir_job_new("idle");
    wm_seen w = {WEIR_WATERMARK_MIN};
    weir_op_def def = {.process = wm_proc, .on_watermark = wm_hook};
    weir_stream *parts[2] = {weir_job_source(j, "quiet", &sd, &sa),
                             weir_job_source(j, "busy", &sd, &sb)};
    weir_stream *both[2] = {weir_stream_key_by(parts[0], ev_key, NULL),
                            weir_stream_key_by(parts[1], ev_key, NULL)};
    weir_stream *s = weir_stream_union(both, 2); /* keyed: the hook checks keyed calls */
    CHECK_EQ(weir_stream_sink(s, "wm", &def, &w), 0);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.idle_timeout_ms = idle_ms}), 0);
    if (idle_ms)
        CHECK_GE(w.max_before_end, 1000);
    else
        CHECK_LE(w.max_before_end, 9);
    weir_job_free(j);
    return 0;
}

TEST(idle_inputs_leave_the_minimum)
{
    CHECK_EQ(on_runtime(idle_main, (void *)0), 0);
    CHECK_EQ(on_runtime(idle_main, (void *)50), 0);
}

/* A source that says it is idle: its IT_IDLE crosses a hop (an operator
 * whose only input is idle is idle itself) and the consumer leaves it out
 * of the minimum with no silence timeout of its own (run option 0); when
 * the source emits again it counts again. */
static _Atomic int64_t sink_wm = WEIR_WATERMARK_MIN;   /* the sink's, while quiet is idle */
static _Atomic int64_t sink_last = WEIR_WATERMARK_MIN; /* the sink's, before the end */
static _Atomic int quiet_resumed, busy_done, busy_max;

typedef struct quiet_state {
    int phase; /* 0: ts 0..9; 1: idle (polling); 2: emitted ts 2000 */
    int64_t give_up;
} quiet_state;

static int quiet_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    quiet_state *q = calloc(1, sizeof(*q));
    q->give_up = weir_time_after_ms(10000);
    *state = q;
    return 0;
}

static int quiet_next(weir_ctx *ctx, void *state)
{
    quiet_state *q = state;
    if (q->phase == 0) {
        for (int i = 0; i < 10; i++) {
            ev e = {1, 1, i};
            CHECK_EQ(weir_emit(ctx, &e, sizeof(e), i), 0);
        }
        q->phase = 1;
        return 0;
    }
    if (q->phase == 1) {
        /* Poll (as a source of a quiet partition does) until the sink's
         * watermark has followed busy past 1050 or busy ended. */
        if (atomic_load(&sink_wm) < 1050 && !atomic_load(&busy_done) &&
            weir_time_now() < q->give_up)
            return weir_time_sleep(2 * WEIR_MSEC) < 0 ? -ECANCELED : 0;
        atomic_store(&quiet_resumed, 1);
        ev e = {1, 1, 2000};
        CHECK_EQ(weir_emit(ctx, &e, sizeof(e), 2000), 0);
        q->phase = 2;
        return 0;
    }
    /* Stay (active) until the sink's watermark has followed it to 1999:
     * ended, it would leave the minimum anyway. */
    if (atomic_load(&sink_last) < 1999 && weir_time_now() < q->give_up)
        return weir_time_sleep(2 * WEIR_MSEC) < 0 ? -ECANCELED : 0;
    return 1;
}

static int quiet_hop(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    return weir_emit(ctx, in->data, in->len, in->ts);
}

typedef struct busy_state {
    int i;
} busy_state;

static int busy_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = calloc(1, sizeof(busy_state));
    return 0;
}

static int busy_next(weir_ctx *ctx, void *state)
{
    busy_state *b = state;
    /* ts 1000.., one every 2 ms, until quiet resumed (or busy_max records). */
    if (atomic_load(&quiet_resumed) || b->i == atomic_load(&busy_max)) {
        atomic_store(&busy_done, 1);
        return 1;
    }
    ev e = {2, 1, 1000 + b->i};
    CHECK_EQ(weir_emit(ctx, &e, sizeof(e), 1000 + b->i), 0);
    b->i++;
    return weir_time_sleep(2 * WEIR_MSEC) < 0 ? -ECANCELED : 0;
}

static int idle_hook(weir_ctx *ctx, void *state, int64_t wm)
{
    wm_seen *w = state;
    (void)ctx;
    if (!atomic_load(&quiet_resumed) && wm > atomic_load(&sink_wm))
        atomic_store(&sink_wm, wm);
    if (wm != WEIR_WATERMARK_MAX && wm > w->max_before_end) {
        w->max_before_end = wm;
        atomic_store(&sink_last, wm);
    }
    return 0;
}

static intptr_t said_idle_main(void *arg)
{
    int64_t idle_ms = (int64_t)(intptr_t)arg;
    atomic_store(&sink_wm, WEIR_WATERMARK_MIN);
    atomic_store(&sink_last, WEIR_WATERMARK_MIN);
    atomic_store(&quiet_resumed, 0);
    atomic_store(&busy_done, 0);
    atomic_store(&busy_max, idle_ms ? 5000 : 100);
    weir_source_def qd = {.open = quiet_open,
                          .next = quiet_next,
                          .close = free,
                          .max_out_of_orderness = 0,
                          .idle_timeout_ms = idle_ms};
    weir_source_def bd = {.open = busy_open, .next = busy_next, .close = free};
    weir_job *j = weir_job_new("said-idle");
    wm_seen w = {WEIR_WATERMARK_MIN};
    weir_op_def def = {.process = wm_proc, .on_watermark = idle_hook};
    weir_stream *q = weir_stream_key_by(weir_job_source(j, "quiet", &qd, NULL), ev_key, NULL);
    q = weir_stream_map(q, "hop", quiet_hop, NULL); /* a chain of its own: the hop */
    weir_stream *both[2] = {
        weir_stream_key_by(q, ev_key, NULL),
        weir_stream_key_by(weir_job_source(j, "busy", &bd, NULL), ev_key, NULL)};
    CHECK_EQ(weir_stream_sink(weir_stream_union(both, 2), "wm", &def, &w), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0); /* no idle_timeout_ms: no silence counts */
    if (idle_ms)
        CHECK_GE(atomic_load(&sink_wm), 1050); /* quiet left the minimum */
    else
        CHECK_LE(atomic_load(&sink_wm), 9); /* quiet held it back */
    CHECK_GE(w.max_before_end, 1999);       /* active again: its watermark counts */
    weir_job_free(j);
    return 0;
}

TEST(a_source_that_says_it_is_idle_leaves_the_minimum_across_a_hop)
{
    CHECK_EQ(on_runtime(said_idle_main, (void *)50), 0);
    CHECK_EQ(on_runtime(said_idle_main, (void *)0), 0);
}

/* An idle hop whose processing-time timer emits a record: its consumer
 * keeps leaving it out (a batch is not a watermark), so the sink's
 * watermark goes on following busy instead of sticking at the hop's. */
static _Atomic int64_t wm_at_fire = WEIR_WATERMARK_MIN;
static _Atomic int hop_fired;

static int timer_hop(weir_ctx *ctx, void *state, const weir_rec *in)
{
    int *armed = state;
    if (!*armed) {
        *armed = 1;
        int r = weir_timer_register(ctx, WEIR_TIME_PROCESSING, weir_time_now() + 100 * WEIR_MSEC);
        if (r < 0)
            return r;
    }
    return weir_emit(ctx, in->data, in->len, in->ts);
}

static int timer_hop_fired(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    (void)state, (void)domain, (void)when;
    atomic_store(&wm_at_fire, atomic_load(&sink_wm));
    atomic_store(&hop_fired, 1);
    ev e = {1, 99, 9};
    return weir_emit(ctx, &e, sizeof(e), 9);
}

/* quiet: ts 0..9, then idle until the sink's watermark is 200 past where
 * it was when the hop's timer emitted (or give up). */
static int quiet2_next(weir_ctx *ctx, void *state)
{
    quiet_state *q = state;
    if (q->phase == 0) {
        for (int i = 0; i < 10; i++) {
            ev e = {1, 1, i};
            CHECK_EQ(weir_emit(ctx, &e, sizeof(e), i), 0);
        }
        q->phase = 1;
        return 0;
    }
    int moved_on = atomic_load(&hop_fired) &&
                   atomic_load(&sink_wm) >= atomic_load(&wm_at_fire) + 200 &&
                   atomic_load(&wm_at_fire) != WEIR_WATERMARK_MIN;
    if (!moved_on && weir_time_now() < q->give_up)
        return weir_time_sleep(2 * WEIR_MSEC) < 0 ? -ECANCELED : 0;
    atomic_store(&quiet_resumed, 1); /* busy ends; the sink's hook stops noting */
    return 1;
}

static intptr_t timer_idle_main(void *arg)
{
    (void)arg;
    atomic_store(&sink_wm, WEIR_WATERMARK_MIN);
    atomic_store(&sink_last, WEIR_WATERMARK_MIN);
    atomic_store(&wm_at_fire, WEIR_WATERMARK_MIN);
    atomic_store(&hop_fired, 0);
    atomic_store(&quiet_resumed, 0);
    atomic_store(&busy_done, 0);
    atomic_store(&busy_max, 5000);
    int armed = 0;
    weir_source_def qd = {.open = quiet_open,
                          .next = quiet2_next,
                          .close = free,
                          .max_out_of_orderness = 0,
                          .idle_timeout_ms = 30};
    weir_source_def bd = {.open = busy_open, .next = busy_next, .close = free};
    weir_job *j = weir_job_new("idle-timer");
    wm_seen w = {WEIR_WATERMARK_MIN};
    weir_op_def hop = {.process = timer_hop, .on_timer = timer_hop_fired};
    weir_op_def def = {.process = wm_proc, .on_watermark = idle_hook};
    weir_stream *q = weir_stream_key_by(weir_job_source(j, "quiet", &qd, NULL), ev_key, NULL);
    q = weir_stream_process(q, "hop", &hop, &armed);
    weir_stream *both[2] = {
        weir_stream_key_by(q, ev_key, NULL),
        weir_stream_key_by(weir_job_source(j, "busy", &bd, NULL), ev_key, NULL)};
    CHECK_EQ(weir_stream_sink(weir_stream_union(both, 2), "wm", &def, &w), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    CHECK(atomic_load(&hop_fired));
    CHECK_GE(atomic_load(&wm_at_fire), 1000); /* the hop was idle when it fired */
    CHECK_GE(atomic_load(&sink_wm), atomic_load(&wm_at_fire) + 200);
    weir_job_free(j);
    return 0;
}

TEST(an_idle_subtask_that_emits_from_a_timer_stays_out_of_the_minimum)
{
    CHECK_EQ(on_runtime(timer_idle_main, NULL), 0);
}

static intptr_t window_errors_main(void *arg)
{
    (void)arg;
    script sc = {many, 1, 0, 0};
    weir_source_def sd = script_def(0);
    weir_job *j = weir_job_new("bad");
    weir_stream *s = weir_job_source(j, "events", &sd, &sc);
    weir_window w = {.kind = WEIR_WINDOW_TUMBLING, .size = 10};
    CHECK(weir_stream_window(s, "w", &w, sum_values, NULL) == NULL); /* not keyed */
    CHECK(strstr(weir_job_error(j), "key_by first") != NULL);
    weir_job_free(j);
    weir_window bad[] = {{.kind = WEIR_WINDOW_TUMBLING, .size = 0},
                         {.kind = WEIR_WINDOW_HOPPING, .size = 10, .slide = 0},
                         {.kind = WEIR_WINDOW_SESSION, .gap = -1},
                         {.kind = 9, .size = 10},
                         {.kind = WEIR_WINDOW_TUMBLING, .size = 10, .allowed_lateness = -1}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        j = weir_job_new("bad");
        s = weir_stream_key_by(weir_job_source(j, "events", &sd, &sc), ev_key, NULL);
        CHECK(weir_stream_window(s, "w", &bad[i], sum_values, NULL) == NULL);
        CHECK_EQ(weir_job_run(j, NULL), -EINVAL);
        weir_job_free(j);
    }
    return 0;
}

TEST(window_errors)
{
    CHECK_EQ(on_runtime(window_errors_main, NULL), 0);
}

/* ---- the async-execution seam ---------------------------------------------------------------- */
/* A controller that holds back every record of key 7 and runs them only
 * when the runner drains it (before a watermark takes effect). Counts per
 * key and 100-wide window, emitted by event-time timers: the held records
 * must be in the counts, because the drain comes before the timers fire. */
typedef struct held {
    ev q[2048];
    int n, drains, admitted_late;
} held;

static int held_admit(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx;
    held *h = state;
    const ev *e = in->data;
    if (e->key != 7)
        return 0;
    CHECK_LT(h->n, 2048);
    h->q[h->n++] = *e;
    return 1;
}

static int held_drain(weir_ctx *ctx, void *state)
{
    held *h = state;
    h->drains++;
    for (int i = 0; i < h->n; i++) {
        weir_rec r = {&h->q[i], sizeof(ev), h->q[i].ts};
        int e = weir_ctx_process(ctx, &h->q[i].key, 8, &r);
        if (e)
            return e;
    }
    h->n = 0;
    return 0;
}

static int held_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    const ev *e = in->data;
    int64_t win = e->ts - e->ts % 100;
    const void *v;
    size_t n;
    int64_t cnt = 0;
    if (weir_map_get(ctx, "n", &win, 8, &v, &n) == 0)
        memcpy(&cnt, v, 8);
    cnt++;
    int r = weir_map_put(ctx, "n", &win, 8, &cnt, 8);
    return r ? r : weir_timer_register(ctx, WEIR_TIME_EVENT, win + 99);
}

static int held_timer(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    (void)state, (void)domain;
    int64_t win = when - 99, cnt = 0, key;
    const void *v;
    size_t n;
    if (weir_map_get(ctx, "n", &win, 8, &v, &n) == 0)
        memcpy(&cnt, v, 8);
    memcpy(&key, weir_ctx_key(ctx, NULL), 8);
    int64_t out[3] = {key, win, cnt};
    int r = weir_map_delete(ctx, "n", &win, 8);
    return r ? r : weir_emit(ctx, out, sizeof(out), when);
}

static intptr_t seam_main(void *arg)
{
    (void)arg;
    static ev evs[1000];
    for (int i = 0; i < 1000; i++)
        evs[i] = (ev){i % 10, 1, i};
    script sc = {evs, 1000, 0, 0};
    weir_source_def sd = script_def(0);
    weir_job *j = weir_job_new("seam");
    held h = {.n = 0};
    weir_op_def def = {
        .process = held_process, .on_timer = held_timer, .admit = held_admit, .drain = held_drain};
    weir_stream *s = weir_stream_key_by(weir_job_source(j, "events", &sd, &sc), ev_key, NULL);
    s = weir_stream_process(s, "counted", &def, &h);
    weir_collector *c = weir_collector_new();
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    CHECK_GT(h.drains, 5);
    CHECK_EQ(weir_collector_count(c), 100); /* 10 keys x 10 windows */
    int64_t last_win = -1;
    for (size_t i = 0; i < 100; i++) {
        const int64_t *o = weir_collector_get(c, i)->data;
        CHECK_EQ(o[2], 10); /* every window of every key has its 10 records */
        /* ... and key 7's windows fire with the others, in window order:
         * its held records were drained before each watermark. */
        CHECK_GE(o[1], last_win);
        last_win = o[1];
    }
    weir_collector_free(c);
    weir_job_free(j);
    return 0;
}

TEST(controller_seam_holds_records_until_drained)
{
    CHECK_EQ(on_runtime(seam_main, NULL), 0);
}

TEST_MAIN()
