/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_join.c - joins and richer keyed state (weir/stream.h): interval
 * join and window join against a nested-loop reference (also on the remote
 * backend, where an interval join's probes wait for their scans as data),
 * late records of a join, keyed aggregate with a result function, map and
 * list state.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "commit_ids.h"
#include "scan_spy.h"
#include "test_rt.h"
#include "weir/rt.h"
#include "weir/state.h"
#include "weir/stream.h"

/* Every job here runs on a two-thread runtime. */
static intptr_t on_runtime(weir_task_fn fn, void *arg)
{
    return test_run_on_rt(2, fn, arg);
}

typedef struct ev {
    int64_t key, id, ts;
} ev;

/* A source of n events of one side: key = id % keys, ts spread with jitter
 * (out of order within the bound). */
typedef struct side_cfg {
    int64_t n, keys, step, jitter, seed;
    int64_t shift; /* every timestamp this much earlier: the side lags in event time */
    int mod_keys;  /* key = id % keys (else a hash of the id) */
    /* Halfway, wait (emitting nothing) until the highest checkpoint id
     * committed, *wait_for, is 2 above *pause_base - what it was when the
     * first source began to wait, shared so that neither source ends while
     * the other still waits (30 s at most). */
    _Atomic long *wait_for, *pause_base;
} side_cfg;

static ev make_ev(const side_cfg *c, int64_t i)
{
    uint64_t x = (uint64_t)(i * 2654435761u + (uint64_t)c->seed);
    x ^= x >> 13;
    return (ev){c->mod_keys ? i % c->keys : (int64_t)((x >> 20) % (uint64_t)c->keys), i,
                i * c->step - c->shift + (int64_t)(x % (uint64_t)(c->jitter + 1))};
}

typedef struct side_state {
    const side_cfg *c;
    int64_t i;
    int64_t give_up; /* the halfway wait's deadline (0: not begun) */
} side_state;

static int side_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    side_state *s = calloc(1, sizeof(*s));
    s->c = arg;
    *state = s;
    return 0;
}

static int side_next(weir_ctx *ctx, void *state)
{
    side_state *s = state;
    int64_t end = s->c->n;
    if (s->c->wait_for && s->i <= s->c->n / 2 &&
        (atomic_load(s->c->pause_base) < 0 ||
         atomic_load(s->c->wait_for) < atomic_load(s->c->pause_base) + 2) &&
        (!s->give_up || weir_time_now() < s->give_up)) {
        end = s->c->n / 2;
        if (s->i == end) {
            long none = -1;
            atomic_compare_exchange_strong(s->c->pause_base, &none, atomic_load(s->c->wait_for));
            if (!s->give_up)
                s->give_up = weir_time_after_ms(30000);
            weir_time_sleep(WEIR_MSEC); /* a checkpoint must be able to pass meanwhile */
            return 0;
        }
    }
    for (int k = 0; k < 64 && s->i < end; k++) {
        ev e = make_ev(s->c, s->i++);
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
    *len = 8;
    return 0;
}

/* A pair as a record: left id, right id. */
static int pair(weir_ctx *ctx, const weir_rec *l, const weir_rec *r, void *arg)
{
    (void)arg;
    const ev *a = l->data, *b = r->data;
    CHECK_EQ(a->key, b->key);
    int64_t p[2] = {a->id, b->id};
    return weir_emit(ctx, p, sizeof(p), l->ts > r->ts ? l->ts : r->ts);
}

static int cmp_pair(const void *x, const void *y)
{
    const int64_t *a = x, *b = y;
    return a[0] != b[0] ? (a[0] < b[0] ? -1 : 1) : (a[1] < b[1] ? -1 : a[1] > b[1]);
}

static int64_t (*collect_pairs(weir_collector *c, size_t *n))[2]
{
    *n = weir_collector_count(c);
    int64_t(*p)[2] = malloc((*n ? *n : 1) * sizeof(*p));
    for (size_t i = 0; i < *n; i++)
        memcpy(p[i], weir_collector_get(c, i)->data, sizeof(p[i]));
    qsort(p, *n, sizeof(*p), cmp_pair);
    return p;
}

typedef struct join_case {
    int window; /* 0 interval, 1 tumbling window join */
    int64_t lower, upper, size;
    int par;
    int64_t lag_left, lag_right; /* event time the side's records run behind */
    const char *backend;         /* NULL: memory; else checkpoints every 5 ms */
    _Atomic long *wait_for;      /* the sources' halfway wait (side_cfg) */
} join_case;

static _Atomic long join_pause_base;

static intptr_t join_main(void *arg)
{
    join_case *jc = arg;
    side_cfg L = {.n = 3000, .keys = 3, .step = 10, .jitter = 30, .seed = 1};
    side_cfg R = {.n = 2000, .keys = 3, .step = 15, .jitter = 30, .seed = 7};
    L.shift = jc->lag_left;
    R.shift = jc->lag_right;
    L.wait_for = R.wait_for = jc->wait_for;
    atomic_store(&join_pause_base, -1);
    L.pause_base = R.pause_base = &join_pause_base;
    weir_source_def sd = {
        .open = side_open, .next = side_next, .close = free, .max_out_of_orderness = 30};
    weir_job *j = weir_job_new("join");
    weir_stream *l = weir_stream_parallelism(weir_job_source(j, "left", &sd, &L), 1);
    weir_stream *r = weir_stream_parallelism(weir_job_source(j, "right", &sd, &R), 1);
    l = weir_stream_key_by(l, ev_key, NULL);
    r = weir_stream_key_by(r, ev_key, NULL);
    weir_stream *out;
    if (jc->window) {
        weir_window w = {.kind = WEIR_WINDOW_TUMBLING, .size = jc->size};
        out = weir_stream_window_join(l, r, "wjoin", &w, pair, NULL);
    } else {
        out = weir_stream_interval_join(l, r, "ijoin", jc->lower, jc->upper, pair, NULL);
    }
    CHECK(out != NULL);
    out = weir_stream_parallelism(out, jc->par);
    weir_collector *c = weir_collector_new(), *late = weir_collector_new();
    CHECK_EQ(weir_stream_collect(weir_stream_side(out), "late", late), 0);
    if (jc->backend)
        out = commit_ids_pass(out);
    CHECK_EQ(weir_stream_collect(out, "out", c), 0);
    char dir[] = "/tmp/weir-test-join-XXXXXX";
    weir_run_opts o = {0};
    if (jc->backend) {
        CHECK(mkdtemp(dir) != NULL);
        o = (weir_run_opts){
            .state_backend = jc->backend, .checkpoint_dir = dir, .checkpoint_interval_ms = 5};
    }
    int e = weir_job_run(j, &o);
    if (e)
        fprintf(stderr, "%s\n", weir_job_error(j));
    CHECK_EQ(e, 0);
    if (jc->backend) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        CHECK_EQ(system(cmd), 0);
    }
    /* Reference: a nested loop over both sides. (The bound covers the
     * jitter, so no record is late.) */
    CHECK_EQ(weir_collector_count(late), 0);
    size_t cap = 1 << 16, n = 0;
    int64_t(*want)[2] = malloc(cap * sizeof(*want));
    for (int64_t i = 0; i < L.n; i++) {
        ev a = make_ev(&L, i);
        for (int64_t k = 0; k < R.n; k++) {
            ev b = make_ev(&R, k);
            if (a.key != b.key)
                continue;
            int match = jc->window ? (a.ts - (a.ts % jc->size)) == (b.ts - (b.ts % jc->size))
                                   : b.ts >= a.ts + jc->lower && b.ts <= a.ts + jc->upper;
            if (!match)
                continue;
            if (n == cap)
                want = realloc(want, (cap *= 2) * sizeof(*want));
            want[n][0] = a.id;
            want[n++][1] = b.id;
        }
    }
    qsort(want, n, sizeof(*want), cmp_pair);
    size_t got_n;
    int64_t(*got)[2] = collect_pairs(c, &got_n);
    CHECK_GT(n, 20);
    CHECK_EQ(got_n, n);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ(got[i][0], want[i][0]);
        CHECK_EQ(got[i][1], want[i][1]);
    }
    free(want);
    free(got);
    weir_collector_free(c);
    weir_collector_free(late);
    weir_job_free(j);
    return 0;
}

TEST(interval_join_matches_nested_loop)
{
    join_case a = {.lower = -20, .upper = 40, .par = 1};
    CHECK_EQ(on_runtime(join_main, &a), 0);
    join_case b = {.lower = 0, .upper = 0, .par = 2}; /* equal timestamps only */
    CHECK_EQ(on_runtime(join_main, &b), 0);
    join_case c = {.lower = 5, .upper = 90, .par = 3};
    CHECK_EQ(on_runtime(join_main, &c), 0);
    /* Partners far back in time: a record's interval starts deep inside the
     * other side's buffer (the seek, not the walk from its start, finds it). */
    join_case d = {.lower = -3000, .upper = -2900, .par = 2};
    CHECK_EQ(on_runtime(join_main, &d), 0);
    join_case e = {.lower = 2900, .upper = 3000, .par = 1};
    CHECK_EQ(on_runtime(join_main, &e), 0);
}

/* One input far behind the other in event time (the join's watermark
 * follows the lagging one, so the leading side's buffer holds thousands of
 * records a probe must skip past), records out of order within the
 * bound: still exactly the nested loop's pairs. */
TEST(interval_join_with_a_lagging_input)
{
    join_case a = {.lower = -20, .upper = 40, .par = 1, .lag_right = 12000};
    CHECK_EQ(on_runtime(join_main, &a), 0);
    join_case b = {.lower = -35, .upper = -3, .par = 2, .lag_left = 9000};
    CHECK_EQ(on_runtime(join_main, &b), 0);
    join_case c = {.lower = 0, .upper = 3, .par = 1, .lag_left = 20000};
    CHECK_EQ(on_runtime(join_main, &c), 0);
}

/* ---- on the remote backend ----------------------------------------------------------------- */
/* The same pairs with the state on the remote backend, a pool that
 * answers up to 0.2 ms late and checkpoints all along: with a hot tier
 * that holds everything (nothing was evicted, so no probe needs the pool),
 * and with one far smaller than the buffers of an input that lags (their
 * runs are what the probes' scans fetch): probes waited for their scans
 * as data (most found their key's side at hand: what a scan fetched
 * serves the scans after it until a checkpoint writes a newer run). */
TEST(interval_join_on_the_remote_backend_matches_nested_loop)
{
    spy_register();
    atomic_store(&spy_later, 0);
    join_case a = {.lower = -20,
                   .upper = 40,
                   .par = 2,
                   .backend = "spyscan:remote:latency://0-0.2/mem://join-remote?hot_max_bytes=0"};
    CHECK_EQ(on_runtime(join_main, &a), 0);
    CHECK_EQ(atomic_load(&spy_later), 0);
    atomic_store(&committed_id, 0);
    join_case b = {.lower = -35,
                   .upper = -3,
                   .par = 1,
                   .lag_left = 9000,
                   .backend =
                       "spyscan:remote:latency://0-0.2/mem://join-remote-lag?hot_max_bytes=4096",
                   .wait_for = &committed_id}; /* the second half meets runs in the pool */
    CHECK_EQ(on_runtime(join_main, &b), 0);
    long later = atomic_load(&spy_later);
    printf("  %ld probes waited for their scans\n", later);
    CHECK_GT(later, 0);
}

TEST(window_join_matches_nested_loop)
{
    join_case a = {.window = 1, .size = 100, .par = 2};
    CHECK_EQ(on_runtime(join_main, &a), 0);
}

/* Across a restore, with another parallelism: the sources stop halfway
 * once two checkpoints have completed after they got there (so the latest
 * holds both buffers at that point) and fail the run; a second run restores
 * at another parallelism and finishes. Pairs of a buffered record from
 * before the checkpoint and one sent after can come only from the restored
 * buffers: the two runs' pairs together must be the nested loop's, none
 * missing, none extra. */
static weir_job *_Atomic ck_job;

typedef struct ck_state {
    side_state s;
    uint64_t at;  /* checkpoints completed when the source reached the stop */
    int stopping; /* at the stop, waiting for the checkpoints */
    int64_t deadline;
} ck_state;

static int ck_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    ck_state *s = calloc(1, sizeof(*s));
    s->s.c = arg;
    *state = s;
    return 0;
}

static int ck_next(weir_ctx *ctx, void *state)
{
    ck_state *s = state;
    int64_t stop = s->s.c->n / 2;
    if (!weir_ctx_restored(ctx) && s->s.i >= stop) {
        weir_ckpt_stats st;
        weir_job_ckpt_stats(atomic_load(&ck_job), &st);
        if (!s->stopping) {
            s->stopping = 1;
            s->at = st.completed;
            s->deadline = weir_time_now() + 20 * WEIR_SEC;
        }
        if (st.completed >= s->at + 2)
            /* -ECANCELED from a run nobody cancelled fails it (it once hung it) */
            return weir_fail(ctx, -ECANCELED, "stopped after a checkpoint");
        CHECK_LT(weir_time_now(), s->deadline);
        weir_time_sleep(WEIR_MSEC); /* barriers pass between calls */
        return 0;
    }
    for (int k = 0; k < 16 && s->s.i < s->s.c->n && (weir_ctx_restored(ctx) || s->s.i < stop);
         k++) {
        ev e = make_ev(s->s.c, s->s.i++);
        int r = weir_emit(ctx, &e, sizeof(e), e.ts);
        if (r)
            return r;
    }
    return s->s.i >= s->s.c->n;
}

static int ck_snap(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    *buf = malloc(8);
    memcpy(*buf, &((ck_state *)state)->s.i, 8);
    *len = 8;
    return 0;
}

static int ck_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    (void)ctx;
    CHECK_EQ(len, 8);
    memcpy(&((ck_state *)state)->s.i, buf, 8);
    return 0;
}

static int ck_run(const side_cfg *L, const side_cfg *R, const char *dir, int par, int restore,
                  weir_collector *c)
{
    weir_source_def sd = {.open = ck_open,
                          .next = ck_next,
                          .close = free,
                          .snapshot = ck_snap,
                          .restore = ck_restore,
                          .max_out_of_orderness = 30};
    weir_job *j = weir_job_new("join-restore");
    /* The sources save their positions: they keep their parallelism (2);
     * the join takes the run's. */
    weir_stream *l = weir_stream_key_by(
        weir_stream_parallelism(weir_job_source(j, "left", &sd, (void *)L), 2), ev_key, NULL);
    weir_stream *r = weir_stream_key_by(
        weir_stream_parallelism(weir_job_source(j, "right", &sd, (void *)R), 2), ev_key, NULL);
    weir_stream *out = weir_stream_interval_join(l, r, "ijoin", -20, 40, pair, NULL);
    CHECK_EQ(weir_stream_collect(out, "out", c), 0);
    atomic_store(&ck_job, j);
    weir_run_opts o = {.parallelism = par,
                       .checkpoint_dir = dir,
                       .checkpoint_interval_ms = 10,
                       .restore = restore};
    int e = weir_job_run(j, &o);
    if (e && restore)
        fprintf(stderr, "%s\n", weir_job_error(j));
    atomic_store(&ck_job, NULL);
    weir_job_free(j);
    return e;
}

static intptr_t join_restore_main(void *arg)
{
    (void)arg;
    side_cfg L = {.n = 3000, .keys = 5, .step = 10, .jitter = 30, .seed = 1, .shift = 4000};
    side_cfg R = {.n = 2000, .keys = 5, .step = 15, .jitter = 30, .seed = 7};
    char dir[] = "/tmp/weir-test-join-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    weir_collector *c1 = weir_collector_new(), *c2 = weir_collector_new();
    CHECK_NE(ck_run(&L, &R, dir, 2, 0, c1), 0); /* stopped */
    CHECK_EQ(ck_run(&L, &R, dir, 3, 1, c2), 0);
    size_t n1, n2;
    int64_t(*p1)[2] = collect_pairs(c1, &n1), (*p2)[2] = collect_pairs(c2, &n2);
    int64_t(*got)[2] = malloc((n1 + n2 + 1) * sizeof(*got));
    memcpy(got, p1, n1 * sizeof(*got));
    memcpy(got + n1, p2, n2 * sizeof(*got));
    qsort(got, n1 + n2, sizeof(*got), cmp_pair);
    size_t n = 0; /* distinct */
    for (size_t i = 0; i < n1 + n2; i++)
        if (!n || cmp_pair(got[n - 1], got[i]) != 0)
            memcpy(got[n++], got[i], sizeof(*got));
    size_t want = 0, cut = 0; /* cut: pairs across the stop (one record each side of it) */
    for (int64_t i = 0; i < L.n; i++) {
        ev a = make_ev(&L, i);
        for (int64_t k = 0; k < R.n; k++) {
            ev b = make_ev(&R, k);
            if (a.key != b.key || b.ts < a.ts + -20 || b.ts > a.ts + 40)
                continue;
            int64_t x[2] = {a.id, b.id};
            CHECK(want < n && cmp_pair(got[want], x) == 0);
            want++;
            cut += (i < L.n / 2) != (k < R.n / 2);
        }
    }
    CHECK_EQ(n, want);
    CHECK_GT(cut, 20);
    CHECK_GT(n2, 0);
    free(p1);
    free(p2);
    free(got);
    weir_collector_free(c1);
    weir_collector_free(c2);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
    return 0;
}

TEST(interval_join_buffers_survive_restore_and_rescale)
{
    CHECK_EQ(on_runtime(join_restore_main, NULL), 0);
}

/* Late records of a join go to its side output. */
typedef struct late_src {
    int i;
} late_src;

static int late_next(weir_ctx *ctx, void *state)
{
    int *i = state;
    static const ev evs[] = {{1, 1, 100}, {1, 2, 500}, {1, 3, 10}};
    if (*i >= 3)
        return 1;
    const ev *e = &evs[(*i)++];
    return weir_emit(ctx, e, sizeof(*e), e->ts);
}

static int late_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = calloc(1, sizeof(int));
    return 0;
}

static intptr_t late_join_main(void *arg)
{
    (void)arg;
    weir_source_def sd = {
        .open = late_open, .next = late_next, .close = free, .max_out_of_orderness = 0};
    side_cfg R = {.n = 10, .keys = 1, .step = 50, .jitter = 0, .seed = 3};
    weir_source_def rd = {
        .open = side_open, .next = side_next, .close = free, .max_out_of_orderness = 0};
    weir_job *j = weir_job_new("late-join");
    weir_stream *l = weir_stream_key_by(weir_job_source(j, "left", &sd, NULL), ev_key, NULL);
    weir_stream *r = weir_stream_key_by(weir_job_source(j, "right", &rd, &R), ev_key, NULL);
    weir_stream *out = weir_stream_interval_join(l, r, "ij", 0, 10, pair, NULL);
    weir_collector *c = weir_collector_new(), *late = weir_collector_new();
    CHECK_EQ(weir_stream_collect(out, "out", c), 0);
    CHECK_EQ(weir_stream_collect(weir_stream_side(out), "late", late), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    /* ts 10 arrived after the left watermark reached 500: late, unless the
     * right side (ending at 450) still held the union's watermark below it. */
    size_t nl = weir_collector_count(late);
    CHECK_LE(nl, 1);
    if (nl)
        CHECK_EQ(((const ev *)weir_collector_get(late, 0)->data)->id, 3);
    weir_collector_free(c);
    weir_collector_free(late);
    weir_job_free(j);

    /* Graph errors. */
    j = weir_job_new("bad-join");
    l = weir_job_source(j, "left", &sd, NULL);
    r = weir_stream_key_by(weir_job_source(j, "right", &rd, &R), ev_key, NULL);
    CHECK(weir_stream_interval_join(l, r, "ij", 0, 10, pair, NULL) == NULL);
    CHECK(strstr(weir_job_error(j), "keyed") != NULL);
    weir_job_free(j);
    j = weir_job_new("bad-join");
    l = weir_stream_key_by(weir_job_source(j, "left", &sd, NULL), ev_key, NULL);
    r = weir_stream_key_by(weir_job_source(j, "right", &rd, &R), ev_key, NULL);
    CHECK(weir_stream_interval_join(l, r, "ij", 10, 0, pair, NULL) == NULL);
    CHECK(strstr(weir_job_error(j), "lower bound") != NULL);
    weir_job_free(j);
    return 0;
}

TEST(join_late_records_and_errors)
{
    CHECK_EQ(on_runtime(late_join_main, NULL), 0);
}

/* ---- the watermark boundary ---------------------------------------------------------------- */
/* Bound 100. The left input holds 950 and ends; the right sends `top`,
 * waits until the join's watermark has reached top - 101 (seen by an
 * on_watermark tap after the join), then 999 and 2500. The watermark is
 * max - bound - 1: with top 1099, 999 is exactly the bound behind and on
 * time (it pairs with 950); with top 1100 it is at the watermark: late. */
static _Atomic int64_t tap_wm = INT64_MIN;

typedef struct wait_src {
    const ev *evs;
    int n, wait_before; /* before evs[wait_before]: wait for tap_wm >= wait_wm */
    int64_t wait_wm;
    int i;
} wait_src;

static int wait_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    wait_src *s = malloc(sizeof(*s));
    *s = *(const wait_src *)arg;
    *state = s;
    return 0;
}

static int wait_next(weir_ctx *ctx, void *state)
{
    wait_src *s = state;
    if (s->i >= s->n)
        return 1;
    if (s->i == s->wait_before) {
        int64_t deadline = weir_time_now() + 20 * WEIR_SEC;
        while (atomic_load(&tap_wm) < s->wait_wm) {
            CHECK_LT(weir_time_now(), deadline);
            weir_time_sleep(WEIR_MSEC);
        }
    }
    const ev *e = &s->evs[s->i++];
    return weir_emit(ctx, e, sizeof(*e), e->ts);
}

static int tap_pass(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    return weir_emit(ctx, in->data, in->len, in->ts);
}

static int tap_hook(weir_ctx *ctx, void *state, int64_t wm)
{
    (void)ctx, (void)state;
    atomic_store(&tap_wm, wm);
    return 0;
}

typedef struct boundary_case {
    int window;  /* 0 interval [0, 49], 1 tumbling 1000 */
    int64_t top; /* 1099: on time; 1100: one past the bound */
} boundary_case;

static intptr_t boundary_main(void *arg)
{
    const boundary_case *bc = arg;
    atomic_store(&tap_wm, INT64_MIN);
    static const ev left[] = {{1, 1, 950}};
    const ev right[] = {{1, 101, bc->top}, {1, 102, 999}, {1, 103, 2500}};
    wait_src ls = {left, 1, -1, 0, 0}, rs = {right, 3, 1, bc->top - 101, 0};
    weir_source_def sd = {
        .open = wait_open, .next = wait_next, .close = free, .max_out_of_orderness = 100};
    weir_job *j = weir_job_new("join-boundary");
    weir_stream *l = weir_stream_key_by(weir_job_source(j, "left", &sd, &ls), ev_key, NULL);
    weir_stream *r = weir_stream_key_by(weir_job_source(j, "right", &sd, &rs), ev_key, NULL);
    weir_stream *out;
    if (bc->window) {
        weir_window w = {.kind = WEIR_WINDOW_TUMBLING, .size = 1000};
        out = weir_stream_window_join(l, r, "wjoin", &w, pair, NULL);
    } else {
        out = weir_stream_interval_join(l, r, "ijoin", 0, 49, pair, NULL);
    }
    weir_op_def tap = {.process = tap_pass, .on_watermark = tap_hook};
    weir_stream *tapped = weir_stream_process(out, "tap", &tap, NULL);
    weir_collector *c = weir_collector_new(), *late = weir_collector_new();
    CHECK_EQ(weir_stream_collect(tapped, "out", c), 0);
    CHECK_EQ(weir_stream_collect(weir_stream_side(out), "late", late), 0);
    int e = weir_job_run(j, NULL);
    if (e)
        fprintf(stderr, "%s\n", weir_job_error(j));
    CHECK_EQ(e, 0);
    size_t n;
    int64_t(*got)[2] = collect_pairs(c, &n);
    if (bc->top == 1099) {
        CHECK_EQ(n, 1);
        CHECK(n == 1 && got[0][0] == 1 && got[0][1] == 102);
        CHECK_EQ(weir_collector_count(late), 0);
    } else {
        CHECK_EQ(n, 0);
        CHECK_EQ(weir_collector_count(late), 1);
        CHECK_EQ(((const ev *)weir_collector_get(late, 0)->data)->id, 102);
    }
    free(got);
    weir_collector_free(c);
    weir_collector_free(late);
    weir_job_free(j);
    return 0;
}

TEST(watermark_boundary_interval_join)
{
    boundary_case a = {0, 1099}, b = {0, 1100};
    CHECK_EQ(on_runtime(boundary_main, &a), 0);
    CHECK_EQ(on_runtime(boundary_main, &b), 0);
}

TEST(watermark_boundary_window_join)
{
    boundary_case a = {1, 1099}, b = {1, 1100};
    CHECK_EQ(on_runtime(boundary_main, &a), 0);
    CHECK_EQ(on_runtime(boundary_main, &b), 0);
}

/* ---- aggregate, map and list state ---------------------------------------------------------- */
/* Average of ids per key: accumulator {sum, count}; result "key avg". */
typedef struct avg_acc {
    int64_t sum, count;
} avg_acc;

static int avg_add(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    static __thread avg_acc a;
    (void)arg;
    if (acc)
        memcpy(&a, acc->data, sizeof(a));
    else
        a = (avg_acc){0, 0};
    a.sum += ((const ev *)in->data)->id;
    a.count++;
    *out = (weir_rec){&a, sizeof(a), in->ts};
    return 0;
}

static int avg_result(const weir_rec *acc, weir_rec *out, void *arg)
{
    static __thread double avg;
    (void)arg;
    avg_acc a;
    memcpy(&a, acc->data, sizeof(a));
    avg = (double)a.sum / (double)a.count;
    *out = (weir_rec){&avg, sizeof(avg), acc->ts};
    return 0;
}

/* Map state: distinct ids per key (id % 5 as the map key); list state: the
 * ids of the key in arrival order, checked at the end. */
static int map_list_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    const ev *e = in->data;
    int64_t mk = e->id % 5;
    const void *v;
    size_t n;
    int r = weir_map_get(ctx, "m", &mk, 8, &v, &n);
    int64_t cnt = 0;
    if (r == 0)
        memcpy(&cnt, v, 8);
    else if (r != -ENOENT)
        return r;
    cnt++;
    if ((r = weir_map_put(ctx, "m", &mk, 8, &cnt, 8)) != 0)
        return r;
    if ((r = weir_list_add(ctx, "l", &e->id, 8)) != 0)
        return r;
    return 0;
}

static int list_collect(void *arg, const void *ukey, size_t uklen, const void *val, size_t len)
{
    (void)ukey;
    CHECK_EQ(uklen, 8);
    CHECK_EQ(len, 8);
    int64_t **out = arg;
    memcpy(*out, val, 8);
    (*out)++;
    return 0;
}

static int map_sum(void *arg, const void *ukey, size_t uklen, const void *val, size_t len)
{
    (void)ukey, (void)uklen, (void)len;
    int64_t *total = arg, v;
    memcpy(&v, val, 8);
    *total += v;
    return 0;
}

static int map_list_timer(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    (void)state, (void)domain, (void)when;
    int64_t ids[64], *p = ids, total = 0;
    CHECK_EQ(weir_list_iterate(ctx, "l", list_collect, &p), 0);
    int n = (int)(p - ids);
    CHECK_EQ(n, 20);
    int64_t key;
    memcpy(&key, weir_ctx_key(ctx, NULL), 8);
    for (int i = 0; i < n; i++)
        CHECK_EQ(ids[i], key + 4 * i); /* arrival order */
    CHECK_EQ(weir_map_iterate(ctx, "m", map_sum, &total), 0);
    CHECK_EQ(total, 20);
    CHECK_EQ(weir_list_clear(ctx, "l"), 0);
    p = ids;
    CHECK_EQ(weir_list_iterate(ctx, "l", list_collect, &p), 0);
    CHECK_EQ(p - ids, 0);
    return weir_emit(ctx, &key, 8, when);
}

static int map_list_first(weir_ctx *ctx, void *state, const weir_rec *in)
{
    int r = map_list_process(ctx, state, in);
    if (!r && ((const ev *)in->data)->id < 4)
        r = weir_timer_register(ctx, WEIR_TIME_EVENT, 1000000);
    return r;
}

static intptr_t state_main(void *arg)
{
    (void)arg;
    side_cfg S = {.n = 80, .keys = 4, .step = 1, .jitter = 0, .seed = 0, .mod_keys = 1};
    weir_source_def sd = {
        .open = side_open, .next = side_next, .close = free, .max_out_of_orderness = 0};
    weir_job *j = weir_job_new("state");
    weir_stream *s = weir_stream_key_by(
        weir_stream_parallelism(weir_job_source(j, "src", &sd, &S), 1), ev_key, NULL);
    weir_agg_def ad = {.add = avg_add, .result = avg_result};
    weir_stream *avg = weir_stream_aggregate(s, "avg", &ad, NULL);
    weir_collector *ca = weir_collector_new();
    CHECK_EQ(weir_stream_collect(avg, "avg-out", ca), 0);
    weir_op_def ml = {.process = map_list_first, .on_timer = map_list_timer};
    weir_stream *m = weir_stream_process(
        weir_stream_key_by(weir_stream_parallelism(weir_job_source(j, "src2", &sd, &S), 1), ev_key,
                           NULL),
        "maplist", &ml, NULL);
    weir_collector *cm = weir_collector_new();
    CHECK_EQ(weir_stream_collect(m, "ml-out", cm), 0);
    int e = weir_job_run(j, &(weir_run_opts){.parallelism = 2});
    if (e)
        fprintf(stderr, "%s\n", weir_job_error(j));
    CHECK_EQ(e, 0);
    CHECK_EQ(weir_collector_count(ca), 80);
    /* The last update of each key: average of key, key+4, ... key+76. */
    double last[4] = {0};
    for (size_t i = 0; i < 80; i++) {
        const weir_rec *r = weir_collector_get(ca, i);
        double v;
        memcpy(&v, r->data, 8);
        int64_t k = (int64_t)(r->ts % 4);
        last[k] = v > last[k] ? v : last[k];
    }
    for (int k = 0; k < 4; k++)
        CHECK(last[k] == (double)(k + 38));
    CHECK_EQ(weir_collector_count(cm), 4);
    weir_collector_free(ca);
    weir_collector_free(cm);
    weir_job_free(j);
    return 0;
}

TEST(aggregate_map_and_list_state)
{
    CHECK_EQ(on_runtime(state_main, NULL), 0);
}

TEST_MAIN()
