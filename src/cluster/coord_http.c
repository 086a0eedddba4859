/* SPDX-License-Identifier: Apache-2.0 */
/*
 * coord_http.c - the coordinator's HTTP API (docs/cluster.md, "HTTP"), on
 * weir's HTTP server with jansson:
 *
 *   GET /api/v1/health     {"status": "ok", "role": "coordinator", ...}
 *   GET /api/v1/workers    every worker session: id, host, slots, used,
 *                          state (alive / lost), the cause of a loss
 *   GET /api/v1/jobs       every job the coordinator remembers
 *   GET /api/v1/jobs/ID    one job (docs/api.md): state, its plan (operators,
 *                          edges), per operator and subtask the records in
 *                          and out per second, backpressure, watermark and
 *                          its lag (cluster/job_view.h), each subtask's
 *                          worker, the checkpoint history, restarts with
 *                          their causes, errors
 *   GET /api/v1/jobs/ID/events  the same as Server-Sent Events, once a second,
 *                          until the job ends
 *   POST /api/v1/jobs      submit: a multipart upload of the plugin and its
 *                          arguments, the settings in the query
 *   DELETE /api/v1/jobs/ID cancel
 *   GET /api/v1/config     the settings in effect: liveness timeouts, the
 *                          outbound bounds, admission, HA
 *   GET /metrics           Prometheus text: workers lost by cause,
 *                          malformed frames, version refusals, restarts,
 *                          jobs submitted and ended by state, checkpoint
 *                          durations, plugin bytes shipped, ships
 *                          deduplicated, cache hits, workers and jobs now
 *
 * Every handler copies what it shows under the coordinator's mutex and
 * builds the JSON outside it. The bearer token of weir's HTTP server
 * (WEIR_AUTH_TOKEN, read by the server itself) applies to every route, the
 * health check included: the server checks it before routing.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cluster/console.h"
#include "cluster/coord_int.h"
#include "cluster/proto.h"
#include "stream/plan.h"
#include "weir/rt.h"
#include "weir/stream.h"

static int send_json(weir_http_res *res, int status, json_t *v)
{
    if (!v)
        return weir_http_res_error(res, 500, "out of memory");
    int e = weir_http_res_json(res, status, v);
    json_decref(v);
    return e;
}

static int h_health(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req;
    coord *c = arg;
    int workers, jobs;
    pthread_mutex_lock(&c->mu);
    weir__coord_count_locked(c, &workers, &jobs);
    int stopping = c->stopping;
    pthread_mutex_unlock(&c->mu);
    return send_json(res, stopping ? 503 : 200,
                     json_pack("{s:s, s:s, s:i, s:i}", "status", stopping ? "stopping" : "ok",
                               "role", "coordinator", "workers", workers, "jobs_running", jobs));
}

/* Set once at start and read only: no lock. */
static int h_config(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req;
    coord *c = arg;
    weir__outbox_limits d = weir__outbox_limits_default();
    const weir__coord_opts *o = &c->o;
    json_t *v = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:i, s:o}", "heartbeat_timeout_ms",
        (json_int_t)c->hb_ms, "heartbeat_interval_ms", (json_int_t)WEIR_CLUSTER_HEARTBEAT_MS,
        "watchdog_interval_ms", (json_int_t)c->wd_ms, "outbound_stall_timeout_ms",
        (json_int_t)(c->stall_ms > 0 ? c->stall_ms : 0), "restart_drain_timeout_ms",
        (json_int_t)c->drain_ms, "max_outbound_control_frames",
        (json_int_t)(o->max_outbound_control_frames ? o->max_outbound_control_frames
                                                    : d.max_control_frames),
        "max_outbound_control_bytes",
        (json_int_t)(o->max_outbound_control_bytes ? o->max_outbound_control_bytes
                                                   : d.max_control_bytes),
        "max_outbound_bulk_bytes",
        (json_int_t)(o->max_outbound_bulk_bytes ? o->max_outbound_bulk_bytes : d.max_deploy_bytes),
        "max_pending_connections", (int)c->adm_cap, "max_restarts", o->max_restarts, "ha_dir",
        o->ha_dir ? json_string(o->ha_dir) : json_null());
    return send_json(res, 200, v);
}

static int h_workers(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req;
    coord *c = arg;
    json_t *a = json_array();
    int64_t now = weir_time_now();
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; a && i < c->nws; i++) {
        wsess *w = c->ws[i];
        json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:s, s:I}", "id", w->id, "host", w->host,
                              "slots", (int)w->slots, "used", (int)w->used, "state",
                              w->lost ? "lost" : "alive", "last_seen_ms_ago",
                              (json_int_t)((now - atomic_load(&w->last_seen)) / WEIR_MSEC));
        if (o && w->lost)
            json_object_set_new(o, "cause", json_string(w->cause));
        json_array_append_new(a, o);
    }
    pthread_mutex_unlock(&c->mu);
    return send_json(res, 200, a);
}

/* A job's summary (mu held). */
static json_t *job_summary(const cjob *J)
{
    json_t *o =
        json_pack("{s:I, s:s, s:s, s:i, s:I, s:i}", "id", (json_int_t)J->id, "name", J->name,
                  "state", weir__cl_job_state_name(J->state), "parallelism", (int)J->par,
                  "submitted_ms", (json_int_t)J->submitted_ms, "restarts", (int)J->restarts);
    if (!o)
        return NULL;
    if (J->ended) {
        json_object_set_new(o, "ended_ms", json_integer((json_int_t)J->ended_ms));
        if (J->message[0])
            json_object_set_new(o, "message", json_string(J->message));
    }
    return o;
}

static int h_jobs(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req;
    coord *c = arg;
    json_t *a = json_array();
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; a && i < c->njobs; i++)
        json_array_append_new(a, job_summary(c->jobs[i]));
    pthread_mutex_unlock(&c->mu);
    return send_json(res, 200, a);
}

/* The running attempt's subtasks (mu held). */
static void add_attempt(json_t *o, const cjob *J)
{
    const weir__plan *p = J->plan;
    json_t *subs = json_array();
    for (uint32_t ci = 0; subs && ci < p->nchains; ci++)
        for (uint32_t s = 0; s < p->chains[ci].par; s++) {
            json_t *names = json_array();
            for (uint32_t k = 0; names && k < p->chains[ci].nops; k++)
                json_array_append_new(names, json_string(p->ops[p->chains[ci].ops[k]].name));
            uint32_t w = J->place[J->base[ci] + s];
            json_array_append_new(subs, json_pack("{s:i, s:i, s:o, s:s}", "chain", (int)ci, "index",
                                                  (int)s, "operators", names, "worker",
                                                  w < J->naw ? J->aw[w]->id : "?"));
        }
    json_object_set_new(o, "attempt", json_integer(J->attempt));
    json_object_set_new(o, "subtasks", subs);
}

/* The worker of a subtask of J's running attempt (mu held). */
static const char *worker_of(void *arg, uint32_t chain, uint32_t sub)
{
    const cjob *J = arg;
    if (!J->plan || !J->place || chain >= J->plan->nchains || sub >= J->plan->chains[chain].par)
        return "?";
    uint32_t w = J->place[J->base[chain] + sub];
    return w < J->naw ? J->aw[w]->id : "?";
}

json_t *weir__coord_job_json_locked(const cjob *J)
{
    json_t *o = job_summary(J);
    if (!o)
        return NULL;
    int64_t now_ms = weir__wall_ms();
    json_object_set_new(o, "now_ms", json_integer((json_int_t)now_ms));
    weir_ckpt_stats cs = {0};
    if (J->cur)
        weir_job_ckpt_stats(J->cur, &cs);
    json_t *ck = json_pack("{s:I, s:I, s:I, s:f}", "completed",
                           (json_int_t)(J->ckpt_done_before + cs.completed), "latest",
                           (json_int_t)cs.latest, "restored", (json_int_t)cs.restored,
                           "last_duration_ms", (double)cs.last_duration_ns / 1e6);
    if (!ck) {
        json_decref(o);
        return NULL;
    }
    if (J->interval_ms) {
        json_object_set_new(ck, "interval_ms", json_integer((json_int_t)J->interval_ms));
        json_object_set_new(ck, "dir", json_string(J->checkpoint_dir ? J->checkpoint_dir : ""));
        /* kept where they were before the history came */
        json_object_set_new(o, "checkpoint_dir",
                            json_string(J->checkpoint_dir ? J->checkpoint_dir : ""));
        json_object_set_new(o, "checkpoint_interval_ms", json_integer((json_int_t)J->interval_ms));
    }
    int running = J->plan && J->place && J->base;
    weir__jv_json(&J->view, o, ck, running ? J->plan : NULL, J->cur, J->attempt, worker_of,
                  (void *)J, weir_time_now(), now_ms);
    json_object_set_new(o, "checkpoints", ck);
    if (running)
        add_attempt(o, J);
    else
        json_object_set_new(o, "attempt", json_integer(J->attempt));
    return o;
}

/* The job named by the route's :id (mu held by the caller after), or 0
 * with a 400 answered. */
static uint64_t job_id_param(weir_http_req *req)
{
    const weir_http_str *v = weir_http_req_param(req, "id");
    char buf[32];
    uint64_t id = 0;
    if (v && v->len > 0 && v->len < sizeof(buf)) {
        memcpy(buf, v->p, v->len);
        buf[v->len] = 0;
        char *end;
        id = strtoull(buf, &end, 10);
        if (*end || buf[0] == '-')
            id = 0;
    }
    return id;
}

static int h_job(weir_http_req *req, weir_http_res *res, void *arg)
{
    coord *c = arg;
    uint64_t id = job_id_param(req);
    if (!id)
        return weir_http_res_error(res, 400, "the job id must be a positive number");
    pthread_mutex_lock(&c->mu);
    cjob *J = weir__coord_job_find_locked(c, id);
    json_t *o = J ? weir__coord_job_json_locked(J) : NULL;
    pthread_mutex_unlock(&c->mu);
    if (!J)
        return weir_http_res_error(res, 404, "no such job");
    return send_json(res, 200, o);
}

/* ---- the event stream ------------------------------------------------------------------- */
/* GET /api/v1/jobs/ID/events: the job's detail as an event every second,
 * the first at once; once its end is decided, the last detail and an "end"
 * event, and the stream ends. A job forgotten meanwhile (the coordinator
 * keeps MAX_JOBS_KEPT ended ones) ends it with state "gone". */
static int h_events(weir_http_req *req, weir_http_res *res, void *arg)
{
    coord *c = arg;
    uint64_t id = job_id_param(req);
    if (!id)
        return weir_http_res_error(res, 400, "the job id must be a positive number");
    pthread_mutex_lock(&c->mu);
    int known = weir__coord_job_find_locked(c, id) != NULL;
    pthread_mutex_unlock(&c->mu);
    if (!known)
        return weir_http_res_error(res, 404, "no such job");
    int e = weir_http_res_stream_start(res, 200, "text/event-stream");
    if (e < 0)
        return e;
    if ((e = weir_http_res_stream_write(res, "retry: 1000\n\n", 13)) < 0)
        return 0;
    for (uint64_t seq = 1;; seq++) {
        pthread_mutex_lock(&c->mu);
        cjob *J = weir__coord_job_find_locked(c, id);
        json_t *o = J ? weir__coord_job_json_locked(J) : NULL;
        int ended = !J || J->ended;
        const char *state = J ? weir__cl_job_state_name(J->state) : "gone";
        pthread_mutex_unlock(&c->mu);
        char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (text) {
            char head[64];
            int n = snprintf(head, sizeof(head), "id: %" PRIu64 "\nevent: job\ndata: ", seq);
            e = weir_http_res_stream_write(res, head, (size_t)n);
            if (!e)
                e = weir_http_res_stream_write(res, text, strlen(text));
            if (!e)
                e = weir_http_res_stream_write(res, "\n\n", 2);
            free(text);
            if (e < 0)
                return 0;
        }
        if (ended) {
            char end[96];
            int n = snprintf(end, sizeof(end), "event: end\ndata: {\"state\":\"%s\"}\n\n", state);
            weir_http_res_stream_write(res, end, (size_t)n);
            return 0;
        }
        if (weir_http_res_stream_wait(res, weir_time_after_ms(1000)) < 0)
            return 0; /* the client went, or the server stops */
    }
}

/* ---- submit and cancel -------------------------------------------------------------------- */
static int h_cancel(weir_http_req *req, weir_http_res *res, void *arg)
{
    coord *c = arg;
    uint64_t id = job_id_param(req);
    if (!id)
        return weir_http_res_error(res, 400, "the job id must be a positive number");
    int st = weir__coord_cancel(c, id, "cancelled over the HTTP API");
    if (st == WEIR__CL_CANCEL_UNKNOWN)
        return weir_http_res_error(res, 404, "no such job");
    if (st == WEIR__CL_CANCEL_ENDED)
        return weir_http_res_error(res, 409, "the job has already ended");
    return send_json(res, 202,
                     json_pack("{s:I, s:s}", "id", (json_int_t)id, "status", "cancelling"));
}

/* The submit's query parameters. */
static const char *const submit_params[] = {
    "parallelism", "checkpoint_dir",  "checkpoint_interval_ms", "max_restarts",
    "restore",     "idle_timeout_ms", "state_backend",
};

/* A query parameter past the ones known, named in why: 1, or 0. */
static int unknown_param(const weir_http_req *req, char *why, size_t cap)
{
    const char *q = req->query.p, *end = q + req->query.len;
    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *stop = amp ? amp : end;
        const char *eq = memchr(q, '=', (size_t)(stop - q));
        size_t n = (size_t)((eq ? eq : stop) - q);
        int known = n == 0;
        for (size_t i = 0; !known && i < sizeof(submit_params) / sizeof(*submit_params); i++)
            known = strlen(submit_params[i]) == n && memcmp(submit_params[i], q, n) == 0;
        if (!known) {
            snprintf(why, cap,
                     "unknown query parameter \"%.*s\" (known: parallelism, "
                     "checkpoint_dir, checkpoint_interval_ms, max_restarts, restore, "
                     "idle_timeout_ms, state_backend)",
                     (int)(n > 64 ? 64 : n), q);
            return 1;
        }
        q = stop + 1;
    }
    return 0;
}

/* Query parameter name as a number in [lo, hi] into *v (absent: *v kept).
 * 0, or -1 with why naming it. */
static int num_param(const weir_http_req *req, const char *name, int64_t lo, int64_t hi, int64_t *v,
                     char *why, size_t cap)
{
    char buf[32];
    ssize_t n = weir_http_req_query(req, name, buf, sizeof(buf));
    if (n == -ENOENT)
        return 0;
    char *end = NULL;
    errno = 0;
    long long x = n > 0 ? strtoll(buf, &end, 10) : 0;
    if (n <= 0 || *end || errno || x < lo || x > hi) {
        snprintf(why, cap, "query parameter %s: %s is not a number in %" PRId64 "..%" PRId64, name,
                 n > 0 ? buf : "the value", lo, hi);
        return -1;
    }
    *v = x;
    return 0;
}

/* Query parameter name as a string of at most cap - 1 bytes (absent: 0,
 * buf empty). 0, or -1 with why. */
static int str_param(const weir_http_req *req, const char *name, char *buf, size_t bcap, char *why,
                     size_t cap)
{
    ssize_t n = weir_http_req_query(req, name, buf, bcap);
    if (n == -ENOENT) {
        buf[0] = 0;
        return 0;
    }
    if (n <= 0) {
        snprintf(why, cap, "query parameter %s: %s", name,
                 n == 0         ? "empty"
                 : n == -ENOSPC ? "too long"
                                : "malformed %-escapes");
        return -1;
    }
    return 0;
}

#define ARGS_MAX WEIR_CLUSTER_ARGS_MAX
/* An upload's bytes, plugin and fields: read whole into memory before the
 * handler runs, so bounded well below a plugin's protocol limit (weir
 * submit ships larger ones). */
#define UPLOAD_MAX (64u << 20)

static int submit(coord *c, weir_http_req *req, weir_http_res *res, char *why, size_t wcap,
                  char *dir, char *backend, size_t pcap, weir_http_part *parts, size_t nparts,
                  char **args);

/* POST /api/v1/jobs: a multipart/form-data upload of the plugin (field
 * "plugin") and its arguments (fields "arg", in order), the settings in the
 * query. 201 {"id": N}; 400 naming what is wrong (a setting, a field, the
 * plugin); 413 past the upload's cap; 503 while the coordinator stops. */
static int h_submit(weir_http_req *req, weir_http_res *res, void *arg)
{
    coord *c = arg;
    /* The connection's fiber has a small stack: the large pieces live on
     * the heap. */
    struct submit_bufs {
        char why[WEIR_CLUSTER_MESSAGE_MAX];
        char dir[WEIR_CLUSTER_PATH_MAX + 1], backend[WEIR_CLUSTER_PATH_MAX + 1];
        weir_http_part parts[ARGS_MAX + 2];
        char *args[ARGS_MAX + 2];
    } *b = calloc(1, sizeof(*b));
    if (!b)
        return weir_http_res_error(res, 500, "out of memory");
    int rc = submit(c, req, res, b->why, sizeof(b->why), b->dir, b->backend, sizeof(b->dir),
                    b->parts, sizeof(b->parts) / sizeof(*b->parts), b->args);
    free(b);
    return rc;
}

static int submit(coord *c, weir_http_req *req, weir_http_res *res, char *why, size_t wcap,
                  char *dir, char *backend, size_t pcap, weir_http_part *parts, size_t nparts,
                  char **args)
{
    if (unknown_param(req, why, wcap))
        return weir_http_res_error(res, 400, why);
    int64_t par = 0, interval = 0, restarts = -1, restore = 0, idle = 0;
    if (num_param(req, "parallelism", 1, 1024, &par, why, wcap) ||
        num_param(req, "checkpoint_interval_ms", 0, INT64_MAX / 1000000, &interval, why, wcap) ||
        num_param(req, "max_restarts", -1, INT32_MAX, &restarts, why, wcap) ||
        num_param(req, "restore", 0, 1, &restore, why, wcap) ||
        num_param(req, "idle_timeout_ms", 0, (int64_t)WEIR_CLUSTER_IDLE_TIMEOUT_MAX_MS, &idle, why,
                  wcap) ||
        str_param(req, "checkpoint_dir", dir, pcap, why, wcap) ||
        str_param(req, "state_backend", backend, pcap, why, wcap))
        return weir_http_res_error(res, 400, why);
    if (dir[0] && dir[0] != '/')
        return weir_http_res_error(res, 400,
                                   "query parameter checkpoint_dir: not an absolute path (it "
                                   "names a directory on the workers)");
    if ((interval || restore) && !dir[0])
        return weir_http_res_error(res, 400,
                                   interval ? "query parameter checkpoint_interval_ms needs "
                                              "checkpoint_dir"
                                            : "query parameter restore needs checkpoint_dir");
    size_t n = 0;
    char mwhy[256];
    int e = weir_http_req_multipart(req, parts, nparts, &n, mwhy, sizeof(mwhy));
    if (e < 0) {
        snprintf(why, wcap, "the body: %s",
                 e == -E2BIG ? "more fields than a plugin and its 1024 arguments" : mwhy);
        return weir_http_res_error(res, 400, why);
    }
    const weir_http_part *plugin = NULL;
    uint32_t nargs = 0;
    int bad = 0;
    for (size_t i = 0; !bad && i < n; i++) {
        const weir_http_part *p = &parts[i];
        if (p->name.len == 6 && memcmp(p->name.p, "plugin", 6) == 0) {
            bad = plugin != NULL;
            plugin = p;
            if (bad)
                snprintf(why, wcap, "the body: two \"plugin\" fields");
        } else if (p->name.len == 3 && memcmp(p->name.p, "arg", 3) == 0) {
            if (p->len > WEIR_CLUSTER_ARG_MAX || memchr(p->data, 0, p->len)) {
                bad = 1;
                snprintf(why, wcap, "the body: argument %u is %s", nargs + 1,
                         p->len > WEIR_CLUSTER_ARG_MAX ? "longer than 4096 bytes"
                                                       : "holding a NUL byte");
            } else if (!(args[nargs] = strndup((const char *)p->data, p->len))) {
                bad = 2;
            } else {
                nargs++;
            }
        } else {
            bad = 1;
            snprintf(why, wcap, "the body: unknown field \"%.*s\" (known: plugin, arg)",
                     (int)(p->name.len > 64 ? 64 : p->name.len), p->name.p);
        }
    }
    if (!bad && !plugin) {
        bad = 1;
        snprintf(why, wcap, "the body: no \"plugin\" field (the job's .so file)");
    }
    uint64_t id = 0;
    if (!bad) {
        weir__cl_submit_job s = {.parallelism = (uint32_t)par,
                                 .checkpoint_dir = dir,
                                 .checkpoint_interval_ms = (uint64_t)interval,
                                 .args = {args, nargs},
                                 .max_restarts = (int32_t)restarts,
                                 .restore = (uint8_t)restore,
                                 .idle_timeout_ms = (uint64_t)idle,
                                 .state_backend = backend};
        e = weir__coord_submit_upload(c, plugin->data, plugin->len, &s, &id, why, wcap);
    }
    for (uint32_t i = 0; i < nargs; i++)
        free(args[i]);
    if (bad)
        return weir_http_res_error(res, bad == 2 ? 500 : 400, bad == 2 ? "out of memory" : why);
    if (e < 0)
        return weir_http_res_error(res,
                                   e == -EFBIG                 ? 413
                                   : e == -EAGAIN              ? 503
                                   : e == -ENOMEM || e == -EIO ? 500
                                                               : 400,
                                   why);
    return send_json(res, 201, json_pack("{s:I}", "id", (json_int_t)id));
}

/* The gauges and the process-wide plugin counters, brought up to date
 * before the registry is rendered. */
static int h_metrics(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req;
    coord *c = arg;
    int workers, jobs;
    pthread_mutex_lock(&c->mu);
    weir__coord_count_locked(c, &workers, &jobs);
    weir__plugin_stats now;
    weir__plugin_stats_read(&now);
    weir_counter_add(c->m.bytes_shipped, now.bytes_shipped - c->m.seen.bytes_shipped);
    weir_counter_add(c->m.ships_deduped, now.ships_deduped - c->m.seen.ships_deduped);
    weir_counter_add(c->m.cache_hits, now.cache_hits - c->m.seen.cache_hits);
    c->m.seen = now;
    pthread_mutex_unlock(&c->mu);
    weir_gauge_set(weir_metrics_gauge(c->metrics, "weir_coordinator_workers",
                                      "Worker sessions registered and not lost."),
                   workers);
    weir_gauge_set(weir_metrics_gauge(c->metrics, "weir_coordinator_jobs_running",
                                      "Jobs running or restarting."),
                   jobs);
    weir_metrics_buf b = {0};
    int e = weir_metrics_render(c->metrics, &b);
    if (e == 0)
        e = weir_http_res_send(res, 200, "text/plain; version=0.0.4", b.data, b.len);
    weir_metrics_buf_free(&b);
    return e;
}

int weir__coord_http_start(coord *c, char *msg, size_t cap)
{
    const char *host = c->o.bind_host ? c->o.bind_host : "127.0.0.1";
    const char *why = weir_http_server_auth_problem(NULL);
    if (why) {
        snprintf(msg, cap, "WEIR_AUTH_TOKEN: %s", why);
        return -EINVAL;
    }
    weir_http_server *s =
        weir_http_server_new(&(weir_http_server_opts){.host = host,
                                                      .port = c->o.http_port,
                                                      .listeners = 1,
                                                      /* a submit defines and plans the job on it */
                                                      .stack_size = 256u << 10});
    if (!s) {
        snprintf(msg, cap, "the HTTP server: %s", strerror(errno));
        return -errno;
    }
    int e = 0;
    if ((e = weir_http_route(s, "GET", "/api/v1/health", h_health, c, 0)) ||
        (e = weir_http_route(s, "GET", "/api/v1/config", h_config, c, 0)) ||
        (e = weir_http_route(s, "GET", "/api/v1/workers", h_workers, c, 0)) ||
        (e = weir_http_route(s, "GET", "/api/v1/jobs", h_jobs, c, 0)) ||
        (e = weir_http_route(s, "GET", "/api/v1/jobs/:id", h_job, c, 0)) ||
        (e = weir_http_route(s, "GET", "/api/v1/jobs/:id/events", h_events, c, 0)) ||
        (e = weir_http_route(s, "DELETE", "/api/v1/jobs/:id", h_cancel, c, 0)) ||
        (e = weir_http_route_max_body(s, "POST", "/api/v1/jobs", h_submit, c, UPLOAD_MAX)) ||
        (e = weir_http_route(s, "GET", "/metrics", h_metrics, c, 0))) {
        snprintf(msg, cap, "the HTTP server on %s:%d: %s", host, c->o.http_port, weir_strerror(e));
        weir_http_server_free(s);
        return e;
    }
    /* The console last: every API route above wins over its catch-all. */
    if ((e = weir__console_routes(s, c->o.http_static_dir, msg, cap))) {
        weir_http_server_free(s);
        return e;
    }
    if ((e = weir_http_server_start(s))) {
        snprintf(msg, cap, "the HTTP server on %s:%d: %s", host, c->o.http_port, weir_strerror(e));
        weir_http_server_free(s);
        return e;
    }
    c->http = s;
    if (c->o.on_http)
        c->o.on_http(c->o.arg, host, weir_http_server_port(s));
    return 0;
}

void weir__coord_http_stop(coord *c)
{
    if (!c->http)
        return;
    weir_http_server_stop(c->http, weir_time_after_ms(1000));
    weir_http_server_free(c->http);
    c->http = NULL;
}
