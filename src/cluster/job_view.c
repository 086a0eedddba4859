/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job_view.c - what the coordinator shows of one job (job_view.h).
 */
#include "cluster/job_view.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/wall.h"
#include "stream/plan.h"
#include "stream/stream_int.h"
#include "weir/rt.h"

/* A report older than this has no rate to show: its worker went quiet. */
#define STALE_NS (3 * WEIR_SEC)

int weir__jv_attempt_begin(weir__job_view *v, const weir__plan *p)
{
    weir__free(v->fig);
    weir__free(v->base);
    v->fig = NULL;
    v->base = NULL;
    v->nops = 0;
    size_t n = 0;
    for (uint32_t i = 0; i < p->nops; i++)
        n += p->ops[i].par;
    v->base = weir__calloc(p->nops ? p->nops : 1, sizeof(*v->base));
    v->fig = weir__calloc(n ? n : 1, sizeof(*v->fig));
    if (!v->base || !v->fig) {
        weir__free(v->base);
        weir__free(v->fig);
        v->base = NULL;
        v->fig = NULL;
        return -ENOMEM;
    }
    for (uint32_t i = 1; i < p->nops; i++)
        v->base[i] = v->base[i - 1] + p->ops[i - 1].par;
    for (size_t k = 0; k < n; k++)
        v->fig[k].wm = WEIR_WATERMARK_MIN;
    v->nops = p->nops;
    return 0;
}

void weir__jv_attempt_end(weir__job_view *v, const weir_job *cur, uint32_t attempt)
{
    weir_ckpt_info h[WEIR_CKPT_HISTORY];
    int n = cur ? weir_job_ckpt_history(cur, h, WEIR_CKPT_HISTORY) : 0;
    for (int k = 0; k < n; k++) {
        if (h[k].state == WEIR_CKPT_IN_PROGRESS) {
            h[k].state = WEIR_CKPT_ABORTED;
            snprintf(h[k].reason, sizeof(h[k].reason), "its attempt ended first");
        }
        v->ck[v->nck++ % WEIR_CKPT_HISTORY] = (weir__jv_ckpt){h[k], attempt};
    }
    weir__free(v->fig);
    weir__free(v->base);
    v->fig = NULL;
    v->base = NULL;
    v->nops = 0;
}

void weir__jv_report(weir__job_view *v, const weir__plan *p, const weir__cl_subtask_stats *s,
                     int (*placed)(void *arg, uint32_t chain, uint32_t sub), void *arg, int64_t now)
{
    if (!v->fig || !p || v->nops != p->nops)
        return;
    for (uint32_t k = 0; k < s->ops.n; k++) {
        const weir__cl_op_figures *r = &s->ops.v[k];
        if (r->op >= p->nops || r->sub >= p->ops[r->op].par ||
            !placed(arg, p->ops[r->op].chain, r->sub))
            continue;
        weir__jv_fig *f = &v->fig[v->base[r->op] + r->sub];
        double dt = f->at ? (double)(now - f->at) / 1e9 : 0;
        if (dt >= 0.2) { /* a second report: rates (counts only grow within an attempt) */
            f->in_rate = r->records_in >= f->in ? (double)(r->records_in - f->in) / dt : 0;
            f->out_rate = r->records_out >= f->out ? (double)(r->records_out - f->out) / dt : 0;
            double bp = r->backpressure_ns >= f->bp_ns
                            ? (double)(r->backpressure_ns - f->bp_ns) / 1e9 / dt
                            : 0;
            f->bp_share = bp < 0 ? 0 : bp > 1 ? 1 : bp;
        } else if (f->at) {
            continue; /* too close to the last: keep that one's base */
        }
        f->in = r->records_in;
        f->out = r->records_out;
        f->bp_ns = r->backpressure_ns;
        f->wm = r->watermark;
        f->at = now;
    }
}

void weir__jv_restart_add(weir__job_view *v, uint32_t attempt, const char *cause)
{
    weir__jv_restart *r = &v->rs[v->nrs++ % WEIR__JV_KEEP];
    r->attempt = attempt;
    r->at_ms = weir__wall_ms();
    snprintf(r->cause, sizeof(r->cause), "%s", cause ? cause : "");
}

void weir__jv_error_add(weir__job_view *v, uint32_t attempt, int64_t chain, int64_t sub,
                        const char *op, const char *worker, const char *message)
{
    weir__jv_error *e = &v->er[v->ner++ % WEIR__JV_KEEP];
    snprintf(e->op, sizeof(e->op), "%s", op ? op : "");
    e->attempt = attempt;
    e->at_ms = weir__wall_ms();
    e->chain = chain;
    e->sub = sub;
    snprintf(e->worker, sizeof(e->worker), "%s", worker ? worker : "");
    snprintf(e->message, sizeof(e->message), "%s", message ? message : "");
}

void weir__jv_free(weir__job_view *v)
{
    weir__free(v->fig);
    weir__free(v->base);
    v->fig = NULL;
    v->base = NULL;
}

/* ---- JSON --------------------------------------------------------------------------------------
 */
static const char *kind_name(int kind)
{
    return kind == OP_SOURCE ? "source" : kind == OP_SINK ? "sink" : "operator";
}

static const char *edge_name(int edge)
{
    return edge == EDGE_HASH        ? "hash"
           : edge == EDGE_REBALANCE ? "rebalance"
           : edge == EDGE_BROADCAST ? "broadcast"
                                    : "forward";
}

/* A watermark as Unix milliseconds, if it reads as wall-clock time in
 * milliseconds, microseconds or nanoseconds (within ten years of now):
 * event time is in whatever unit the job chose, and only wall-clock time
 * has a lag behind the wall clock. 1 with *ms, else 0. */
static int wm_wall_ms(int64_t wm, int64_t now_ms, int64_t *ms)
{
    if (wm == WEIR_WATERMARK_MIN || wm == WEIR_WATERMARK_MAX || wm <= 0)
        return 0;
    const int64_t ten_years = 10LL * 365 * 24 * 3600 * 1000;
    const int64_t div[] = {1, 1000, 1000000};
    for (int i = 0; i < 3; i++) {
        int64_t v = wm / div[i];
        if (v > now_ms - ten_years && v < now_ms + ten_years) {
            *ms = v;
            return 1;
        }
    }
    return 0;
}

static json_t *wm_json(int64_t wm)
{
    if (wm == WEIR_WATERMARK_MIN)
        return json_null();
    if (wm == WEIR_WATERMARK_MAX)
        return json_string("end");
    return json_integer((json_int_t)wm);
}

static json_t *lag_json(int64_t wm, int64_t now_ms)
{
    int64_t ms;
    return wm_wall_ms(wm, now_ms, &ms) ? json_integer((json_int_t)(now_ms - ms)) : json_null();
}

/* The figures' members of o. */
static void put_figures(json_t *o, uint64_t in, uint64_t out, double rin, double rout, double bp,
                        int64_t wm, int64_t now_ms)
{
    json_object_set_new(o, "records_in", json_integer((json_int_t)in));
    json_object_set_new(o, "records_out", json_integer((json_int_t)out));
    json_object_set_new(o, "records_in_per_s", json_real(rin));
    json_object_set_new(o, "records_out_per_s", json_real(rout));
    json_object_set_new(o, "backpressure", json_real(bp));
    json_object_set_new(o, "watermark", wm_json(wm));
    json_object_set_new(o, "watermark_lag_ms", lag_json(wm, now_ms));
}

static json_t *plan_json(const weir__plan *p)
{
    json_t *ops = json_array(), *edges = json_array();
    for (uint32_t i = 0; ops && edges && i < p->nops; i++) {
        const weir__plan_op *op = &p->ops[i];
        json_array_append_new(ops,
                              json_pack("{s:i, s:s, s:s, s:i, s:i, s:b}", "id", (int)i, "name",
                                        op->name, "kind", kind_name(op->kind), "parallelism",
                                        (int)op->par, "chain", (int)op->chain, "keyed", op->keyed));
        for (uint32_t k = 0; k < op->ninputs; k++)
            json_array_append_new(edges, json_pack("{s:i, s:i, s:s, s:b}", "from",
                                                   (int)op->inputs[k].from, "to", (int)i,
                                                   "partition", edge_name(op->inputs[k].edge),
                                                   "side_output", op->inputs[k].tag != 0));
    }
    return json_pack("{s:o, s:o}", "operators", ops ? ops : json_array(), "edges",
                     edges ? edges : json_array());
}

static json_t *operators_json(const weir__job_view *v, const weir__plan *p,
                              const char *(*worker_of)(void *, uint32_t, uint32_t), void *arg,
                              int64_t now, int64_t now_ms)
{
    json_t *a = json_array();
    for (uint32_t i = 0; a && v->fig && i < p->nops; i++) {
        const weir__plan_op *op = &p->ops[i];
        json_t *o = json_pack("{s:i, s:s}", "id", (int)i, "name", op->name);
        json_t *subs = json_array();
        uint64_t in = 0, out = 0;
        double rin = 0, rout = 0, bp = 0;
        int64_t wm = WEIR_WATERMARK_MAX;
        for (uint32_t s = 0; o && subs && s < op->par; s++) {
            const weir__jv_fig *f = &v->fig[v->base[i] + s];
            int live = f->at && now - f->at <= STALE_NS;
            double fr_in = live ? f->in_rate : 0, fr_out = live ? f->out_rate : 0,
                   fbp = live ? f->bp_share : 0;
            in += f->in;
            out += f->out;
            rin += fr_in;
            rout += fr_out;
            if (fbp > bp)
                bp = fbp;
            if (f->wm < wm)
                wm = f->wm;
            json_t *so =
                json_pack("{s:i, s:s}", "index", (int)s, "worker", worker_of(arg, op->chain, s));
            if (so)
                put_figures(so, f->in, f->out, fr_in, fr_out, fbp, f->wm, now_ms);
            json_array_append_new(subs, so);
        }
        if (o) {
            put_figures(o, in, out, rin, rout, bp, op->par ? wm : WEIR_WATERMARK_MIN, now_ms);
            json_object_set_new(o, "subtasks", subs ? subs : json_array());
        } else {
            json_decref(subs);
        }
        json_array_append_new(a, o);
    }
    return a ? a : json_array();
}

static json_t *ckpt_json(const weir_ckpt_info *i, uint32_t attempt)
{
    static const char *const state[] = {"in_progress", "completed", "aborted"};
    json_t *o =
        json_pack("{s:I, s:i, s:s, s:I, s:b}", "id", (json_int_t)i->id, "attempt", (int)attempt,
                  "state", i->state >= 0 && i->state <= 2 ? state[i->state] : "?", "trigger_ms",
                  (json_int_t)i->trigger_ms, "final", i->final);
    if (o && i->state != WEIR_CKPT_IN_PROGRESS) {
        json_object_set_new(o, "end_ms", json_integer((json_int_t)i->end_ms));
        json_object_set_new(o, "duration_ms", json_real((double)i->duration_ns / 1e6));
    }
    if (o && i->state == WEIR_CKPT_COMPLETED)
        json_object_set_new(o, "bytes", json_integer((json_int_t)i->bytes));
    if (o && i->state == WEIR_CKPT_ABORTED)
        json_object_set_new(o, "reason", json_string(i->reason));
    return o;
}

void weir__jv_json(const weir__job_view *v, json_t *o, json_t *ck, const weir__plan *p,
                   const weir_job *cur, uint32_t attempt,
                   const char *(*worker_of)(void *arg, uint32_t chain, uint32_t sub), void *arg,
                   int64_t now, int64_t now_ms)
{
    if (p) {
        json_object_set_new(o, "plan", plan_json(p));
        json_object_set_new(o, "operators", operators_json(v, p, worker_of, arg, now, now_ms));
    }
    /* checkpoints: the ended attempts' (oldest first), then the running one's */
    json_t *h = json_array();
    weir_ckpt_info live[WEIR_CKPT_HISTORY];
    int nlive = cur ? weir_job_ckpt_history(cur, live, WEIR_CKPT_HISTORY) : 0;
    uint64_t keep = WEIR_CKPT_HISTORY - (uint64_t)nlive;
    uint64_t have = v->nck < WEIR_CKPT_HISTORY ? v->nck : WEIR_CKPT_HISTORY;
    if (have > keep)
        have = keep;
    for (uint64_t k = v->nck - have; h && k < v->nck; k++) {
        const weir__jv_ckpt *c = &v->ck[k % WEIR_CKPT_HISTORY];
        json_array_append_new(h, ckpt_json(&c->i, c->attempt));
    }
    for (int k = 0; h && k < nlive; k++)
        json_array_append_new(h, ckpt_json(&live[k], attempt));
    json_object_set_new(ck, "history", h ? h : json_array());
    json_t *rs = json_array();
    uint64_t nrs = v->nrs < WEIR__JV_KEEP ? v->nrs : WEIR__JV_KEEP;
    for (uint64_t k = v->nrs - nrs; rs && k < v->nrs; k++) {
        const weir__jv_restart *r = &v->rs[k % WEIR__JV_KEEP];
        json_array_append_new(rs, json_pack("{s:i, s:I, s:s}", "attempt", (int)r->attempt, "at_ms",
                                            (json_int_t)r->at_ms, "cause", r->cause));
    }
    json_object_set_new(o, "restart_history", rs ? rs : json_array());
    json_t *er = json_array();
    uint64_t ner = v->ner < WEIR__JV_KEEP ? v->ner : WEIR__JV_KEEP;
    for (uint64_t k = v->ner - ner; er && k < v->ner; k++) {
        const weir__jv_error *e = &v->er[k % WEIR__JV_KEEP];
        json_t *x = json_pack("{s:I, s:i, s:s}", "at_ms", (json_int_t)e->at_ms, "attempt",
                              (int)e->attempt, "message", e->message);
        if (x && e->chain >= 0) {
            json_object_set_new(x, "operator", json_string(e->op));
            json_object_set_new(x, "chain", json_integer(e->chain));
            json_object_set_new(x, "subtask", json_integer(e->sub));
            json_object_set_new(x, "worker", json_string(e->worker));
        }
        json_array_append_new(er, x);
    }
    json_object_set_new(o, "errors", er ? er : json_array());
}
