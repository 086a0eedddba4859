/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_job_view.c - what the coordinator shows of a job
 * (cluster/job_view.h), on a plan the real planner makes: rates from two
 * reports a second apart (records per second, backpressure as a share of
 * the time, clipped to 1), a report too close to the last kept as the
 * base, an operator's figures summed over its subtasks with its
 * backpressure the largest and its watermark the lowest; reports that do
 * not fit (an operator or subtask past the plan, a subtask the worker does
 * not run) ignored; a stale report showing no rate; the watermark's lag
 * only for wall-clock time (ms, us or ns) and none for other units; the
 * checkpoint history across attempts, an unfinished one marked abandoned
 * when its attempt ends; the restart and error rings keeping the latest.
 */
#include <jansson.h>
#include <string.h>
#include <time.h>

#include "cluster/job_view.h"
#include "stream/plan.h"
#include "stream/stream_int.h"
#include "test.h"
#include "weir/rt.h"

static int gen_next(weir_ctx *ctx, void *state)
{
    (void)ctx;
    (void)state;
    return 1;
}

static const weir_source_def gen_def = {.next = gen_next, .max_out_of_orderness = -1};

static int pass(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    return weir_emit(ctx, in->data, in->len, in->ts);
}

/* [src] (2) -> rebalance -> [m] (2) -> [out] (2): two chains. */
static weir__plan *plan2(void)
{
    weir_job *j = weir_job_new("view");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, NULL), 2);
    s = weir_stream_map(weir_stream_rebalance(s), "m", pass, NULL);
    CHECK_EQ(weir_stream_print(s, "out"), 0);
    weir__plan *p;
    char why[256];
    CHECK_EQ(weir__plan_make(j, 2, 4, &p, why, sizeof(why)), 0);
    weir_job_free(j);
    CHECK_EQ(p->nops, 3u);
    CHECK_EQ(p->nchains, 2u);
    return p;
}

static int all(void *arg, uint32_t chain, uint32_t sub)
{
    (void)arg, (void)chain, (void)sub;
    return 1;
}

/* Subtask 1 of every chain is elsewhere. */
static int only_sub0(void *arg, uint32_t chain, uint32_t sub)
{
    (void)arg, (void)chain;
    return sub == 0;
}

static const char *worker_of(void *arg, uint32_t chain, uint32_t sub)
{
    (void)arg, (void)chain;
    return sub ? "w2" : "w1";
}

static void report(weir__job_view *v, const weir__plan *p, weir__cl_op_figures *f, uint32_t n,
                   int (*placed)(void *, uint32_t, uint32_t), int64_t now)
{
    weir__cl_subtask_stats s = {.job = 1, .attempt = 0, .ops = {f, n}};
    weir__jv_report(v, p, &s, placed, NULL, now);
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static json_t *render(const weir__job_view *v, const weir__plan *p, int64_t now, int64_t now_ms)
{
    json_t *o = json_object(), *ck = json_object();
    weir__jv_json(v, o, ck, p, NULL, 0, worker_of, NULL, now, now_ms);
    json_object_set_new(o, "checkpoints", ck);
    return o;
}

static double num(const json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

TEST(rates_come_from_two_reports_and_operators_sum_their_subtasks)
{
    weir__plan *p = plan2();
    weir__job_view v = {0};
    CHECK_EQ(weir__jv_attempt_begin(&v, p), 0);
    int64_t t = 1000 * WEIR_SEC, now_ms = wall_ms();
    weir__cl_op_figures f[] = {
        {0, 0, 0, 1000, 0, now_ms - 1500},
        {0, 1, 0, 2000, 0, now_ms - 500},
        {1, 0, 100, 100, 0, WEIR_WATERMARK_MIN},
    };
    report(&v, p, f, 3, all, t);
    /* a second later: 1000 and 3000 more records, subtask 0 waited 0.25 s,
     * subtask 1 2 s (clipped to the whole second) */
    f[0] = (weir__cl_op_figures){0, 0, 0, 2000, WEIR_SEC / 4, now_ms - 1000};
    f[1] = (weir__cl_op_figures){0, 1, 0, 5000, 2 * WEIR_SEC, now_ms};
    report(&v, p, f, 2, all, t + WEIR_SEC);
    /* too close to the last: ignored, the base stays */
    f[0].records_out = 999999;
    report(&v, p, f, 1, all, t + WEIR_SEC + WEIR_MSEC);
    json_t *o = render(&v, p, t + WEIR_SEC + 2 * WEIR_MSEC, now_ms);
    json_t *src = json_array_get(json_object_get(o, "operators"), 0);
    CHECK_STR(json_string_value(json_object_get(src, "name")), "src");
    CHECK_EQ(num(src, "records_out"), 7000.0);
    CHECK_EQ(num(src, "records_out_per_s"), 4000.0);
    CHECK_EQ(num(src, "backpressure"), 1.0);
    json_t *subs = json_object_get(src, "subtasks");
    CHECK_EQ(json_array_size(subs), 2u);
    CHECK_EQ(num(json_array_get(subs, 0), "backpressure"), 0.25);
    CHECK_STR(json_string_value(json_object_get(json_array_get(subs, 1), "worker")), "w2");
    /* the lowest watermark, and its lag behind the wall clock */
    CHECK_EQ(json_integer_value(json_object_get(src, "watermark")), now_ms - 1000);
    CHECK_EQ(json_integer_value(json_object_get(src, "watermark_lag_ms")), 1000);
    /* an operator without a watermark yet: null */
    json_t *m = json_array_get(json_object_get(o, "operators"), 1);
    CHECK(json_is_null(json_object_get(m, "watermark")));
    CHECK(json_is_null(json_object_get(m, "watermark_lag_ms")));
    /* the plan: kinds, chains, the rebalance edge */
    json_t *edges = json_object_get(json_object_get(o, "plan"), "edges");
    CHECK_EQ(json_array_size(edges), 2u);
    CHECK_STR(json_string_value(json_object_get(json_array_get(edges, 0), "partition")),
              "rebalance");
    CHECK_STR(
        json_string_value(json_object_get(
            json_array_get(json_object_get(json_object_get(o, "plan"), "operators"), 2), "kind")),
        "sink");
    json_decref(o);
    /* four seconds on, no report came: figures stay, rates are gone */
    o = render(&v, p, t + 5 * WEIR_SEC, now_ms);
    src = json_array_get(json_object_get(o, "operators"), 0);
    CHECK_EQ(num(src, "records_out"), 7000.0);
    CHECK_EQ(num(src, "records_out_per_s"), 0.0);
    CHECK_EQ(num(src, "backpressure"), 0.0);
    json_decref(o);
    weir__jv_free(&v);
    weir__plan_free(p);
}

TEST(reports_that_do_not_fit_the_plan_are_ignored)
{
    weir__plan *p = plan2();
    weir__job_view v = {0};
    CHECK_EQ(weir__jv_attempt_begin(&v, p), 0);
    weir__cl_op_figures f[] = {
        {3, 0, 5, 5, 0, 0},     /* no operator 3 */
        {0, 2, 5, 5, 0, 0},     /* no subtask 2 */
        {0, 1, 5, 5, 0, 0},     /* not this worker's */
        {0, 0, 7, 7, 0, 0},     /* fits */
        {~0u, ~0u, 1, 1, 1, 1}, /* nothing fits */
    };
    report(&v, p, f, 5, only_sub0, WEIR_SEC);
    json_t *o = render(&v, p, WEIR_SEC, wall_ms());
    json_t *src = json_array_get(json_object_get(o, "operators"), 0);
    CHECK_EQ(num(src, "records_out"), 7.0);
    json_decref(o);
    /* a plan of another shape (a report racing a new attempt): ignored */
    weir__jv_attempt_end(&v, NULL, 0);
    report(&v, p, f + 3, 1, all, 2 * WEIR_SEC); /* no figures between attempts */
    o = render(&v, p, 2 * WEIR_SEC, wall_ms());
    CHECK_EQ(json_array_size(json_object_get(o, "operators")), 0u);
    json_decref(o);
    weir__jv_free(&v);
    weir__plan_free(p);
}

TEST(a_watermark_lags_only_as_wall_clock_time)
{
    weir__plan *p = plan2();
    weir__job_view v = {0};
    CHECK_EQ(weir__jv_attempt_begin(&v, p), 0);
    int64_t now_ms = wall_ms();
    const int64_t wms[] = {(now_ms - 2000) * 1000, (now_ms - 2000) * 1000000, 42,
                           WEIR_WATERMARK_MAX};
    const int64_t want[] = {2000, 2000, -1, -1};
    for (int k = 0; k < 4; k++) {
        weir__cl_op_figures f[] = {{0, 0, 0, 0, 0, wms[k]}, {0, 1, 0, 0, 0, wms[k]}};
        weir__job_view w = {0};
        CHECK_EQ(weir__jv_attempt_begin(&w, p), 0);
        report(&w, p, f, 2, all, WEIR_SEC);
        json_t *o = render(&w, p, WEIR_SEC, now_ms);
        json_t *src = json_array_get(json_object_get(o, "operators"), 0);
        json_t *lag = json_object_get(src, "watermark_lag_ms");
        if (want[k] < 0)
            CHECK(json_is_null(lag));
        else
            CHECK_EQ(json_integer_value(lag), want[k]);
        if (wms[k] == WEIR_WATERMARK_MAX)
            CHECK_STR(json_string_value(json_object_get(src, "watermark")), "end");
        json_decref(o);
        weir__jv_free(&w);
    }
    weir__jv_free(&v);
    weir__plan_free(p);
}

TEST(histories_span_attempts_and_keep_the_latest)
{
    weir__plan *p = plan2();
    weir__job_view v = {0};
    for (int i = 0; i < WEIR__JV_KEEP + 5; i++) {
        char m[32];
        snprintf(m, sizeof(m), "lost %d", i);
        weir__jv_restart_add(&v, (uint32_t)i + 1, m);
        weir__jv_error_add(&v, (uint32_t)i, i % 2 ? 1 : -1, 0, "m", "w1", m);
    }
    json_t *o = render(&v, NULL, 0, wall_ms());
    json_t *rs = json_object_get(o, "restart_history"), *er = json_object_get(o, "errors");
    CHECK_EQ(json_array_size(rs), (size_t)WEIR__JV_KEEP);
    CHECK_STR(json_string_value(json_object_get(json_array_get(rs, 0), "cause")), "lost 5");
    CHECK_STR(json_string_value(json_object_get(json_array_get(rs, WEIR__JV_KEEP - 1), "cause")),
              "lost 36");
    CHECK_EQ(json_array_size(er), (size_t)WEIR__JV_KEEP);
    /* a subtask's error names its operator and worker; the job's own not */
    json_t *e0 = json_array_get(er, 0), *e1 = json_array_get(er, 1);
    CHECK(json_object_get(e0, "operator") != NULL); /* i = 5: odd */
    CHECK_STR(json_string_value(json_object_get(e0, "worker")), "w1");
    CHECK(json_object_get(e1, "operator") == NULL);
    CHECK(json_object_get(o, "operators") == NULL); /* no attempt runs */
    json_decref(o);
    weir__jv_free(&v);
    weir__plan_free(p);
}

TEST(checkpoints_of_ended_attempts_stay_and_an_unfinished_one_is_abandoned)
{
    weir__job_view v = {0};
    /* Two attempts' runs, their histories as the checkpoint coordinator
     * leaves them (stream_int.h): attempt 0 completed 1 and was running 2. */
    weir_job *j = weir_job_new("ck");
    j->hist[0] = (weir_ckpt_info){.id = 1,
                                  .state = WEIR_CKPT_COMPLETED,
                                  .trigger_ms = 10,
                                  .end_ms = 12,
                                  .duration_ns = 2000000,
                                  .bytes = 99};
    j->hist[1] = (weir_ckpt_info){.id = 2, .state = WEIR_CKPT_IN_PROGRESS, .trigger_ms = 20};
    j->nhist = 2;
    weir__jv_attempt_end(&v, j, 0);
    /* attempt 1 runs: its own so far, 3 aborted */
    j->hist[0] = (weir_ckpt_info){
        .id = 3, .state = WEIR_CKPT_ABORTED, .trigger_ms = 30, .end_ms = 40, .reason = "timed out"};
    j->nhist = 1;
    json_t *o = json_object(), *ck = json_object();
    weir__jv_json(&v, o, ck, NULL, j, 1, worker_of, NULL, 0, wall_ms());
    json_t *h = json_object_get(ck, "history");
    CHECK_EQ(json_array_size(h), 3u);
    json_t *c1 = json_array_get(h, 0), *c2 = json_array_get(h, 1), *c3 = json_array_get(h, 2);
    CHECK_STR(json_string_value(json_object_get(c1, "state")), "completed");
    CHECK_EQ(num(c1, "bytes"), 99.0);
    CHECK_EQ(num(c1, "duration_ms"), 2.0);
    CHECK_STR(json_string_value(json_object_get(c2, "state")), "aborted");
    CHECK_STR(json_string_value(json_object_get(c2, "reason")), "its attempt ended first");
    CHECK_EQ(num(c2, "attempt"), 0.0);
    CHECK_STR(json_string_value(json_object_get(c3, "reason")), "timed out");
    CHECK_EQ(num(c3, "attempt"), 1.0);
    json_decref(o);
    json_decref(ck);
    /* many attempts later: the latest WEIR_CKPT_HISTORY, oldest first */
    for (int a = 0; a < 40; a++) {
        j->hist[0] = (weir_ckpt_info){.id = (uint64_t)(10 + 2 * a), .state = WEIR_CKPT_COMPLETED};
        j->hist[1] = (weir_ckpt_info){.id = (uint64_t)(11 + 2 * a), .state = WEIR_CKPT_COMPLETED};
        j->nhist = 2;
        weir__jv_attempt_end(&v, j, (uint32_t)a + 1);
    }
    o = json_object();
    ck = json_object();
    weir__jv_json(&v, o, ck, NULL, NULL, 0, worker_of, NULL, 0, wall_ms());
    h = json_object_get(ck, "history");
    CHECK_EQ(json_array_size(h), (size_t)WEIR_CKPT_HISTORY);
    CHECK_EQ(num(json_array_get(h, WEIR_CKPT_HISTORY - 1), "id"), 89.0);
    CHECK_EQ(num(json_array_get(h, 0), "id"), 26.0);
    json_decref(o);
    json_decref(ck);
    weir_job_free(j);
    weir__jv_free(&v);
}

TEST_MAIN()
