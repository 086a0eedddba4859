/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job_view.h - what the coordinator shows of one job (docs/api.md): the
 * live figures of its running attempt per operator and subtask, from the
 * workers' SubtaskStats (records in and out, their rates, backpressure,
 * watermark); its checkpoint history across attempts; its restarts with
 * their causes; its errors. The coordinator keeps one per job, under its
 * mutex (every call here is made with it held), and the HTTP API renders
 * it as JSON (coord_http.c) for GET /api/v1/jobs/ID, its event stream and
 * `weir job ID`.
 *
 * Figures are what the workers counted since the attempt started; rates
 * come from two reports of the same subtask (about a second apart): the
 * records per second between them and the share of that time its subtask
 * waited for credits (backpressure, 0..1). A report of another attempt,
 * for an operator or subtask the plan does not have, or from a worker that
 * does not run that subtask, is ignored: a worker is a peer, and what it
 * says must fit the plan. The histories are rings: the latest
 * WEIR__JV_KEEP restarts and errors, and WEIR_CKPT_HISTORY checkpoints.
 */
#ifndef WEIR_CLUSTER_JOB_VIEW_H
#define WEIR_CLUSTER_JOB_VIEW_H

#include <stdint.h>

#include "cluster/proto.h"
#include "weir/stream.h"

struct weir__plan;
struct json_t;

#define WEIR__JV_KEEP 32 /* restarts and errors kept */

/* One operator in one subtask: the latest report and the rates between it
 * and the one before. */
typedef struct weir__jv_fig {
    uint64_t in, out, bp_ns;
    int64_t wm;
    int64_t at; /* weir_time_now() of the report; 0: none yet */
    double in_rate, out_rate, bp_share;
} weir__jv_fig;

typedef struct weir__jv_restart {
    uint32_t attempt; /* the attempt it started */
    int64_t at_ms;    /* wall clock */
    char cause[512];
} weir__jv_restart;

typedef struct weir__jv_error {
    uint32_t attempt;
    int64_t at_ms;
    int64_t chain, sub; /* -1: the job's own (define, plan, place, checkpoints) */
    char op[201];       /* the first operator of the chain */
    char worker[WEIR_CLUSTER_REGISTER_STR_MAX + 1];
    char message[1024];
} weir__jv_error;

typedef struct weir__jv_ckpt {
    weir_ckpt_info i;
    uint32_t attempt;
} weir__jv_ckpt;

typedef struct weir__job_view {
    /* the running attempt's figures: fig[base[op] + sub] (NULL between) */
    weir__jv_fig *fig;
    uint32_t *base;
    uint32_t nops;
    /* checkpoints of the attempts that ended, restarts, errors: rings */
    weir__jv_ckpt ck[WEIR_CKPT_HISTORY];
    uint64_t nck;
    weir__jv_restart rs[WEIR__JV_KEEP];
    uint64_t nrs;
    weir__jv_error er[WEIR__JV_KEEP];
    uint64_t ner;
} weir__job_view;

/* An attempt planned as p starts: its figures (all zero). 0 or -ENOMEM
 * (the view then shows no figures for it). */
int weir__jv_attempt_begin(weir__job_view *v, const struct weir__plan *p);
/* The attempt ends: the checkpoints of cur (its run's job, NULL: none)
 * join the history, those still in progress as abandoned; its figures go. */
void weir__jv_attempt_end(weir__job_view *v, const weir_job *cur, uint32_t attempt);
/* A worker's report for the running attempt, planned as p; placed(chain,
 * sub) says whether that worker runs the subtask. now: weir_time_now(). */
void weir__jv_report(weir__job_view *v, const struct weir__plan *p, const weir__cl_subtask_stats *s,
                     int (*placed)(void *arg, uint32_t chain, uint32_t sub), void *arg,
                     int64_t now);
void weir__jv_restart_add(weir__job_view *v, uint32_t attempt, const char *cause);
void weir__jv_error_add(weir__job_view *v, uint32_t attempt, int64_t chain, int64_t sub,
                        const char *op, const char *worker, const char *message);
void weir__jv_free(weir__job_view *v);

/* The view as JSON members of o (docs/api.md): "operators" (with p and
 * worker_of, while an attempt runs: p non-NULL), "checkpoints.history"
 * (into the object ck, with cur's checkpoints of the running attempt),
 * "restart_history" and "errors". worker_of(arg, chain, sub) names the
 * worker of a subtask. now_ms: the wall clock. */
void weir__jv_json(const weir__job_view *v, struct json_t *o, struct json_t *ck,
                   const struct weir__plan *p, const weir_job *cur, uint32_t attempt,
                   const char *(*worker_of)(void *arg, uint32_t chain, uint32_t sub), void *arg,
                   int64_t now, int64_t now_ms);

#endif
