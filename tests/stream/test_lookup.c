/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_lookup.c - the async lookup operator (weir_stream_lookup) against a
 * real HTTP service on the test's runtime (weir's HTTP server), answering
 * after pseudo-random delays so that answers come back out of order.
 *
 * Each source subtask emits records {sub, seq, epoch} in steps of STEP
 * records, all of one step with timestamp = epoch = step number, so the
 * watermark after step k is k - 1. The sink checks, for each result, that
 * it is not late (epoch > the subtask's watermark: it did not cross a
 * watermark that came after its record) and not early (the watermark of
 * the step before its own already passed); per source subtask the order
 * (ordered mode: input order), and every record exactly once.
 */
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "test_rt.h"
#include "weir/http.h"
#include "weir/stream.h"

#define STEP   40
#define MAXREC 4000

/* ---- the service --------------------------------------------------------------------------- */
static _Atomic int s_cur, s_max;
static _Atomic long s_requests;
static _Atomic int s_tries[2 * MAXREC]; /* /flaky: attempts per id */

static long param_n(weir_http_req *req)
{
    const weir_http_str *p = weir_http_req_param(req, "n");
    char buf[32];
    size_t n = p && p->len < sizeof(buf) ? p->len : 0;
    memcpy(buf, p ? p->p : "", n);
    buf[n] = '\0';
    return strtol(buf, NULL, 10);
}

/* A delay of 0..2 ms drawn from the id (and the try), so that neighbours differ. */
static int64_t delay_of(long id)
{
    uint64_t h = (uint64_t)id * 0x9e3779b97f4a7c15ull;
    return (int64_t)((h >> 40) % 2000) * 1000;
}

static int answer(weir_http_req *req, weir_http_res *res, long id, int status)
{
    (void)req;
    int c = atomic_fetch_add(&s_cur, 1) + 1;
    int m = atomic_load(&s_max);
    while (c > m && !atomic_compare_exchange_weak(&s_max, &m, c))
        ;
    atomic_fetch_add(&s_requests, 1);
    weir_time_sleep(delay_of(id));
    atomic_fetch_sub(&s_cur, 1);
    if (status != 200)
        return weir_http_res_error(res, status, "try again");
    char body[32];
    snprintf(body, sizeof(body), "%ld", id * 3);
    return weir_http_res_text(res, 200, body);
}

static int h_value(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    return answer(req, res, param_n(req), 200);
}

/* The value only with the token the test set (WEIR_TEST_LOOKUP_TOKEN) and
 * the literal header beside it; 401 otherwise. */
static int h_auth(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    const weir_http_str *a = weir_http_req_header(req, "Authorization");
    const weir_http_str *t = weir_http_req_header(req, "X-Trace");
    if (!a || a->len != 14 || memcmp(a->p, "Bearer s3cr3t!", 14) != 0 || !t || t->len != 3 ||
        memcmp(t->p, "job", 3) != 0)
        return weir_http_res_error(res, 401, "no token");
    return answer(req, res, param_n(req), 200);
}

/* Every odd try of an id is a 503. */
static int h_flaky(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    long id = param_n(req);
    int t = id >= 0 && id < 2 * MAXREC ? atomic_fetch_add(&s_tries[id], 1) : 0;
    return answer(req, res, id, t % 2 == 0 ? 503 : 200);
}

/* POST: the id is the body, which must come as text/plain. */
static int h_post(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    const weir_http_str *ct = weir_http_req_header(req, "Content-Type");
    if (!ct || ct->len != 10 || memcmp(ct->p, "text/plain", 10) != 0 || req->body_len == 0 ||
        req->body_len > 20)
        return weir_http_res_error(res, 400, "want a text/plain id");
    char buf[24];
    memcpy(buf, req->body, req->body_len);
    buf[req->body_len] = '\0';
    return answer(req, res, strtol(buf, NULL, 10), 200);
}

/* Answers after 20 s, or when cancelled (the server's stop). */
static int h_slow(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req, (void)arg;
    atomic_fetch_add(&s_cur, 1);
    atomic_fetch_add(&s_requests, 1);
    weir_time_sleep(20 * WEIR_SEC);
    atomic_fetch_sub(&s_cur, 1);
    return weir_http_res_text(res, 200, "0");
}

static void service_reset(void)
{
    atomic_store(&s_cur, 0);
    atomic_store(&s_max, 0);
    atomic_store(&s_requests, 0);
    for (int i = 0; i < 2 * MAXREC; i++)
        atomic_store(&s_tries[i], 0);
}

/* ---- the job ----------------------------------------------------------------------------- */
typedef struct rec {
    int64_t sub, seq, epoch, val;
} rec;

typedef struct cfg {
    int port;
    const char *route; /* "v", "flaky" */
    int n;             /* records per source subtask */
    int par;
    weir_lookup_def def;
    const char *ckpt; /* checkpoints into it, a file sink in ckpt/out */
    int restore;
    int fail_at; /* the source fails there once a checkpoint completed */
    int keyed;   /* key_by seq before the lookup */
    int cancel;  /* cancel the job once `cancel` lookups are at the service */
    /* Results. */
    int result;
    char error[512];
    _Atomic int late, early, misordered, inversions, bad_value, dups, errors;
    _Atomic int err_refused, err_again, err_other, attempts_max, wrong_key;
    _Atomic int seen[2][MAXREC];
    weir_ckpt_stats stats;
} cfg;

typedef struct gen {
    cfg *c;
    int sub;
    int64_t i;
} gen;

static int gen_open(weir_ctx *ctx, void *arg, void **state)
{
    gen *g = calloc(1, sizeof(*g));
    g->c = arg;
    g->sub = weir_ctx_subtask(ctx);
    *state = g;
    return 0;
}

static int gen_next(weir_ctx *ctx, void *state)
{
    gen *g = state;
    cfg *c = g->c;
    if (c->fail_at && g->i >= c->fail_at) {
        /* Fail once a checkpoint completed (a condition, not a sleep). */
        int64_t give_up = weir_time_after_ms(30000);
        while (weir_ctx_completed(ctx) == 0) {
            CHECK(weir_time_now() < give_up);
            if (weir_time_sleep(WEIR_MSEC) < 0)
                return -ECANCELED;
        }
        return -EIO;
    }
    for (int k = 0; k < STEP && g->i < c->n; k++, g->i++) {
        rec r = {g->sub, g->i, g->i / STEP, 0};
        int e = weir_emit(ctx, &r, sizeof(r), r.epoch);
        if (e)
            return e;
    }
    return g->i >= c->n;
}

static int gen_snapshot(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    gen *g = state;
    *buf = malloc(sizeof(g->i));
    memcpy(*buf, &g->i, sizeof(g->i));
    *len = sizeof(g->i);
    return 0;
}

static int gen_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    (void)ctx;
    gen *g = state;
    CHECK_EQ(len, sizeof(g->i));
    memcpy(&g->i, buf, len);
    return 0;
}

static int lk_request(weir_ctx *ctx, const weir_rec *in, weir_lookup_req *req, void *arg)
{
    (void)ctx;
    cfg *c = arg;
    const rec *r = in->data;
    if (!strcmp(c->route, "post")) { /* the id in the body, in buf after the URL */
        int n = snprintf(req->buf, sizeof(req->buf), "http://127.0.0.1:%d/post", c->port);
        char *body = req->buf + n + 1;
        req->body_len = (size_t)snprintf(body, sizeof(req->buf) - (size_t)n - 1, "%ld",
                                         (long)(r->sub * MAXREC + r->seq));
        req->body = body;
        req->method = "POST";
        req->content_type = "text/plain";
        req->url = req->buf;
        return 0;
    }
    snprintf(req->buf, sizeof(req->buf), "http://127.0.0.1:%d/%s/%ld", c->port, c->route,
             (long)(r->sub * MAXREC + r->seq));
    req->url = req->buf;
    return 0;
}

static int lk_result(weir_ctx *ctx, const weir_rec *in, const weir_lookup_resp *resp, void *arg)
{
    cfg *c = arg;
    rec r = *(const rec *)in->data;
    int a = atomic_load(&c->attempts_max);
    while (resp->attempts > a &&
           !atomic_compare_exchange_weak(&c->attempts_max, &a, resp->attempts))
        ;
    if (resp->err) {
        atomic_fetch_add(&c->errors, 1);
        atomic_fetch_add(resp->err == -ECONNREFUSED ? &c->err_refused
                         : resp->err == -EAGAIN     ? &c->err_again
                                                    : &c->err_other,
                         1);
        return 0;
    }
    if (resp->status != 200 || strtol(resp->body, NULL, 10) != (r.sub * MAXREC + r.seq) * 3)
        atomic_fetch_add(&c->bad_value, 1);
    size_t kl;
    const void *k = weir_ctx_key(ctx, &kl);
    if (c->keyed && (kl != 8 || memcmp(k, &r.seq, 8) != 0))
        atomic_fetch_add(&c->wrong_key, 1);
    r.val = strtol(resp->body, NULL, 10);
    return weir_emit(ctx, &r, sizeof(r), in->ts);
}

typedef struct sink {
    cfg *c;
    int64_t last[2];
} sink;

static int sink_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    sink *s = calloc(1, sizeof(*s));
    s->c = arg;
    s->last[0] = s->last[1] = -1;
    *state = s;
    return 0;
}

static int sink_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    sink *s = state;
    cfg *c = s->c;
    const rec *r = in->data;
    int64_t wm = weir_ctx_watermark(ctx);
    if (r->epoch <= wm)
        atomic_fetch_add(&c->late, 1);
    if (!c->keyed && r->epoch >= 2 && wm < r->epoch - 2) /* keyed: two inputs */
        atomic_fetch_add(&c->early, 1);
    if (r->seq < s->last[r->sub]) {
        atomic_fetch_add(&c->inversions, 1);
        if (c->def.ordered)
            atomic_fetch_add(&c->misordered, 1);
    }
    if (r->seq > s->last[r->sub])
        s->last[r->sub] = r->seq;
    if (atomic_fetch_add(&c->seen[r->sub][r->seq], 1) != 0)
        atomic_fetch_add(&c->dups, 1);
    return 0;
}

/* Lines "sub seq val" for the file sink. */
static int to_line(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    const rec *r = in->data;
    char line[64];
    int n = snprintf(line, sizeof(line), "%ld %ld %ld", (long)r->sub, (long)r->seq, (long)r->val);
    return weir_emit(ctx, line, (size_t)n, in->ts);
}

static int seq_key(const weir_rec *r, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = &((const rec *)r->data)->seq;
    *len = 8;
    return 0;
}

static intptr_t job_main(void *arg)
{
    cfg *c = arg;
    weir_job *j = weir_job_new("lookup");
    weir_source_def sd = {.open = gen_open,
                          .next = gen_next,
                          .close = free,
                          .max_out_of_orderness = 0,
                          .snapshot = gen_snapshot,
                          .restore = gen_restore};
    weir_stream *s = weir_job_source(j, "gen", &sd, c);
    if (c->keyed)
        s = weir_stream_key_by(s, seq_key, NULL);
    s = weir_stream_lookup(s, "enrich", &c->def, c);
    char out[512];
    if (c->ckpt) {
        snprintf(out, sizeof(out), "%s/out", c->ckpt);
        s = weir_stream_map(s, "line", to_line, NULL);
        CHECK_EQ(weir_stream_file_sink(s, "files", out), 0);
    } else {
        weir_op_def sk = {.open = sink_open, .process = sink_process, .close = free};
        CHECK_EQ(weir_stream_sink(s, "check", &sk, c), 0);
    }
    c->result = weir_job_run(j, &(weir_run_opts){.parallelism = c->par,
                                                 .checkpoint_dir = c->ckpt,
                                                 .checkpoint_interval_ms = c->ckpt ? 20 : 0,
                                                 .restore = c->restore});
    snprintf(c->error, sizeof(c->error), "%s", weir_job_error(j) ? weir_job_error(j) : "");
    weir_job_ckpt_stats(j, &c->stats);
    weir_job_free(j);
    return 0;
}

/* The service and the job on one runtime; dead: the service is stopped
 * before the job starts (its port refuses connections). */
typedef struct env {
    cfg *c;
    int dead;
} env;

static intptr_t env_main(void *arg)
{
    env *v = arg;
    weir_http_server *srv = weir_http_server_new(&(weir_http_server_opts){.port = 0});
    CHECK(srv != NULL);
    CHECK_EQ(weir_http_route(srv, "GET", "/v/:n", h_value, NULL, 0), 0);
    CHECK_EQ(weir_http_route(srv, "GET", "/flaky/:n", h_flaky, NULL, 0), 0);
    CHECK_EQ(weir_http_route(srv, "GET", "/slow/:n", h_slow, NULL, 0), 0);
    CHECK_EQ(weir_http_route(srv, "POST", "/post", h_post, NULL, 0), 0);
    CHECK_EQ(weir_http_route(srv, "GET", "/auth/:n", h_auth, NULL, 0), 0);
    CHECK_EQ(weir_http_server_start(srv), 0);
    v->c->port = weir_http_server_port(srv);
    CHECK_GT(v->c->port, 0);
    if (v->dead)
        CHECK_EQ(weir_http_server_stop(srv, weir_time_after_ms(5000)), 0);
    if (v->c->cancel) {
        weir_task *t = weir_task_spawn(job_main, v->c, NULL);
        CHECK(t != NULL);
        int64_t give_up = weir_time_after_ms(10000);
        while (atomic_load(&s_cur) < v->c->cancel) {
            CHECK(weir_time_now() < give_up);
            weir_time_sleep(WEIR_MSEC);
        }
        CHECK_EQ(weir_task_cancel(t), 0);
        int j = weir_task_join(t, NULL, WEIR_FOREVER);
        CHECK(j == 0 || j == -ECANCELED);
        /* The handlers still sleep: cut short (or ended with their connections). */
        int st = weir_http_server_stop(srv, weir_time_after_ms(100));
        CHECK(st == 0 || st == -ETIMEDOUT);
    } else {
        job_main(v->c);
    }
    if (!v->dead && !v->c->cancel)
        CHECK_EQ(weir_http_server_stop(srv, weir_time_after_ms(5000)), 0);
    weir_http_server_free(srv);
    return 0;
}

static cfg *run(cfg *c, int dead)
{
    env v = {c, dead};
    CHECK_EQ(test_run_on_rt(2, env_main, &v), 0);
    return c;
}

static cfg *new_cfg(int n, int par, int ordered, int capacity)
{
    cfg *c = calloc(1, sizeof(*c));
    c->route = "v";
    c->n = n;
    c->par = par;
    c->def = (weir_lookup_def){
        .request = lk_request, .result = lk_result, .ordered = ordered, .capacity = capacity};
    return c;
}

static void check_all_once(cfg *c)
{
    for (int s = 0; s < c->par; s++)
        for (int i = 0; i < c->n; i++)
            if (atomic_load(&c->seen[s][i]) != 1)
                TEST__FAIL("record %d/%d seen %d times", s, i, atomic_load(&c->seen[s][i]));
    CHECK_EQ(atomic_load(&c->dups), 0);
    CHECK_EQ(atomic_load(&c->bad_value), 0);
    CHECK_EQ(atomic_load(&c->late), 0);
    CHECK_EQ(atomic_load(&c->early), 0);
}

/* ---- tests ------------------------------------------------------------------------------- */
TEST(ordered_results_leave_in_input_order_and_never_cross_a_watermark)
{
    service_reset();
    cfg *c = run(new_cfg(2000, 2, 1, 16), 0);
    if (c->result)
        TEST__FAIL("run: %d %s", c->result, c->error);
    check_all_once(c);
    CHECK_EQ(atomic_load(&c->misordered), 0);
    CHECK_EQ(atomic_load(&c->errors), 0);
    CHECK_GT(atomic_load(&s_max), 1); /* lookups overlapped */
    free(c);
}

TEST(unordered_results_come_once_each_as_answered_and_never_cross_a_watermark)
{
    service_reset();
    cfg *c = run(new_cfg(2000, 2, 0, 16), 0);
    if (c->result)
        TEST__FAIL("run: %d %s", c->result, c->error);
    check_all_once(c);
    CHECK_GT(atomic_load(&c->inversions), 0); /* answers did come out of order */
    CHECK_EQ(atomic_load(&c->errors), 0);
    free(c);
}

TEST(the_capacity_bounds_the_lookups_in_flight)
{
    for (int ordered = 0; ordered < 2; ordered++) {
        service_reset();
        cfg *c = run(new_cfg(600, 1, ordered, 5), 0);
        if (c->result)
            TEST__FAIL("run: %d %s", c->result, c->error);
        check_all_once(c);
        CHECK_LE(atomic_load(&s_max), 5);
        CHECK_GE(atomic_load(&s_max), 2);
        CHECK_EQ(atomic_load(&s_requests), 600);
        free(c);
    }
}

TEST(lookups_go_on_while_a_watermark_waits_for_the_records_before_it)
{
    for (int ordered = 0; ordered < 2; ordered++) {
        service_reset();
        cfg *c = run(new_cfg(2000, 1, ordered, 100), 0);
        if (c->result)
            TEST__FAIL("run: %d %s", c->result, c->error);
        check_all_once(c);
        CHECK_EQ(atomic_load(&c->misordered), 0);
        /* More in flight than one watermark's step holds. */
        CHECK_GT(atomic_load(&s_max), STEP);
        CHECK_LE(atomic_load(&s_max), 100);
        free(c);
    }
}

TEST(a_post_sends_its_body_and_content_type)
{
    service_reset();
    cfg *c = new_cfg(500, 2, 0, 8);
    c->route = "post";
    run(c, 0);
    if (c->result)
        TEST__FAIL("run: %d %s", c->result, c->error);
    check_all_once(c);
    CHECK_EQ(atomic_load(&c->errors), 0);
    free(c);
}

TEST(keyed_input_gets_its_key_back_in_the_result)
{
    service_reset();
    cfg *c = new_cfg(1000, 2, 1, 8);
    c->keyed = 1;
    run(c, 0);
    if (c->result)
        TEST__FAIL("run: %d %s", c->result, c->error);
    check_all_once(c);
    CHECK_EQ(atomic_load(&c->misordered), 0);
    CHECK_EQ(atomic_load(&c->wrong_key), 0);
    free(c);
}

TEST(a_job_cancelled_with_lookups_in_flight_ends_and_leaks_nothing)
{
    service_reset();
    cfg *c = new_cfg(1000, 2, 0, 6);
    c->route = "slow";
    c->cancel = 12; /* both subtasks at capacity */
    run(c, 0);
    CHECK_EQ(c->result, -ECANCELED);
    CHECK_EQ(atomic_load(&s_requests), 12);
    free(c);
}

TEST(a_503_is_retried_with_backoff)
{
    service_reset();
    cfg *c = new_cfg(500, 2, 1, 8);
    c->route = "flaky";
    c->def.retry = (weir_retry_policy){.max_attempts = 3, .initial_delay_ns = WEIR_MSEC};
    c->def.breaker.failure_threshold = 1000000;
    run(c, 0);
    if (c->result)
        TEST__FAIL("run: %d %s", c->result, c->error);
    check_all_once(c);
    CHECK_EQ(atomic_load(&c->errors), 0);
    CHECK_EQ(atomic_load(&c->attempts_max), 2);
    CHECK_EQ(atomic_load(&s_requests), 2 * 500 * 2);
    free(c);
}

TEST(without_retries_a_503_reaches_the_result_as_an_error)
{
    service_reset();
    cfg *c = new_cfg(100, 1, 0, 8);
    c->route = "flaky";
    c->def.no_breaker = 1;
    run(c, 0);
    CHECK_EQ(c->result, 0);
    CHECK_EQ(atomic_load(&c->errors), 100);
    CHECK_EQ(atomic_load(&c->err_other), 100); /* -EREMOTEIO */
    free(c);
}

TEST(the_breaker_opens_on_a_dead_service)
{
    service_reset();
    cfg *c = new_cfg(50, 1, 1, 1); /* one at a time: the count is exact */
    c->def.breaker = (weir_breaker_opts){.failure_threshold = 3, .cooldown_ns = 60 * WEIR_SEC};
    run(c, 1);
    CHECK_EQ(c->result, 0);
    CHECK_EQ(atomic_load(&c->errors), 50);
    CHECK_EQ(atomic_load(&c->err_refused), 3);
    CHECK_EQ(atomic_load(&c->err_again), 47);
    free(c);
}

TEST(with_fail_on_error_a_failed_lookup_fails_the_job_naming_it)
{
    service_reset();
    cfg *c = new_cfg(50, 2, 0, 4);
    c->def.fail_on_error = 1;
    c->def.retry = (weir_retry_policy){.max_attempts = 2, .initial_delay_ns = WEIR_MSEC};
    run(c, 1);
    CHECK_EQ(c->result, -ECONNREFUSED);
    CHECK_HAS(c->error, "\"enrich\"");
    CHECK_HAS(c->error, "lookup GET http://127.0.0.1:");
    CHECK_HAS(c->error, "after 2 attempts");
    CHECK_EQ(atomic_load(&c->errors), 0);
    free(c);
}

static const weir_lookup_header auth_headers[] = {
    {"Authorization", "env://WEIR_TEST_LOOKUP_TOKEN"},
    {"X-Trace", "job"},
};

TEST(headers_go_with_every_request_their_secrets_read_from_the_environment)
{
    service_reset();
    setenv("WEIR_TEST_LOOKUP_TOKEN", "Bearer s3cr3t!", 1);
    cfg *c = new_cfg(200, 2, 1, 8);
    c->route = "auth";
    c->def.headers = auth_headers;
    c->def.nheaders = 2;
    run(c, 0);
    CHECK_EQ(c->result, 0);
    check_all_once(c);
    CHECK_EQ(atomic_load(&c->errors), 0);
    free(c);
    /* Unset where the operator runs: the job fails naming the variable,
     * never showing a value. */
    unsetenv("WEIR_TEST_LOOKUP_TOKEN");
    service_reset();
    c = new_cfg(20, 1, 1, 8);
    c->route = "auth";
    c->def.headers = auth_headers;
    c->def.nheaders = 2;
    run(c, 0);
    CHECK_EQ(c->result, -ENOENT);
    CHECK_HAS(c->error, "header Authorization: $WEIR_TEST_LOOKUP_TOKEN is not set");
    free(c);
}

TEST(a_bad_definition_is_refused_when_the_graph_is_built)
{
    weir_job *j = weir_job_new("bad");
    weir_source_def sd = {.next = gen_next};
    weir_stream *s = weir_job_source(j, "gen", &sd, NULL);
    weir_lookup_def d = {.request = lk_request, .result = lk_result, .capacity = -1};
    CHECK(weir_stream_lookup(s, "x", &d, NULL) == NULL);
    CHECK_HAS(weir_job_error(j), "capacity");
    weir_job_free(j);
    j = weir_job_new("bad2");
    s = weir_job_source(j, "gen", &sd, NULL);
    d = (weir_lookup_def){.request = lk_request, .result = lk_result};
    d.retry.multiplier = 0.5;
    CHECK(weir_stream_lookup(s, "x", &d, NULL) == NULL);
    weir_job_free(j);
    /* Headers: one the client writes itself, a name that is not a token,
     * a value with CR LF, an env:// that names no variable, too many. */
    static const weir_lookup_header bad[][1] = {{{"Content-Length", "3"}},
                                                {{"Bad Name", "x"}},
                                                {{"X-A", "a\r\nX-Evil: 1"}},
                                                {{"X-A", "env://1ABC"}},
                                                {{"X-A", NULL}}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        j = weir_job_new("bad3");
        s = weir_job_source(j, "gen", &sd, NULL);
        d = (weir_lookup_def){
            .request = lk_request, .result = lk_result, .headers = bad[i], .nheaders = 1};
        CHECK(weir_stream_lookup(s, "x", &d, NULL) == NULL);
        CHECK_HAS(weir_job_error(j), "header");
        weir_job_free(j);
    }
    j = weir_job_new("bad4");
    s = weir_job_source(j, "gen", &sd, NULL);
    d = (weir_lookup_def){.request = lk_request,
                          .result = lk_result,
                          .headers = auth_headers,
                          .nheaders = WEIR_LOOKUP_MAX_HEADERS + 1};
    CHECK(weir_stream_lookup(s, "x", &d, NULL) == NULL);
    CHECK_HAS(weir_job_error(j), "headers");
    weir_job_free(j);
}

/* Committed lines of the file sink: each (sub, seq) with its value. */
static void check_files(const char *dir, int par, int n)
{
    static int count[2][MAXREC];
    memset(count, 0, sizeof(count));
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, "part-", 5) != 0)
            continue;
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "r");
        CHECK(f != NULL);
        long sub, seq, val;
        while (fscanf(f, "%ld %ld %ld", &sub, &seq, &val) == 3) {
            CHECK(sub >= 0 && sub < par && seq >= 0 && seq < n);
            CHECK_EQ(val, (sub * MAXREC + seq) * 3);
            count[sub][seq]++;
        }
        fclose(f);
    }
    closedir(d);
    for (int s = 0; s < par; s++)
        for (int i = 0; i < n; i++)
            if (count[s][i] != 1)
                TEST__FAIL("record %d/%d committed %d times", s, i, count[s][i]);
}

TEST(a_restore_from_a_checkpoint_taken_mid_stream_gives_every_result_once)
{
    char dir[] = "/tmp/weir-lookup-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    service_reset();
    cfg *a = new_cfg(3000, 2, 0, 16);
    a->ckpt = dir;
    a->fail_at = 1500;
    run(a, 0);
    CHECK_EQ(a->result, -EIO);
    CHECK_GT(a->stats.completed, 0);
    cfg *b = new_cfg(3000, 2, 0, 16);
    b->ckpt = dir;
    b->restore = 1;
    run(b, 0);
    if (b->result)
        TEST__FAIL("restored run: %d %s", b->result, b->error);
    CHECK_GT(b->stats.restored, 0);
    char out[512];
    snprintf(out, sizeof(out), "%s/out", dir);
    check_files(out, 2, 3000);
    free(a);
    free(b);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

TEST_MAIN()
