/* SPDX-License-Identifier: Apache-2.0 */
/*
 * deploy.h - building the subtasks of a plan (or of part of it) in this
 * process.
 *
 * weir__deploy_build makes, for every subtask of the plan that runs here
 * (d->here), its contexts, input queue, keyed state backend (by the run's
 * state_backend URI, over the plan's key-group range) and metrics, and for
 * every channel with at least one end here the channel, from d->channel
 * (NULL: local channels, which need both ends here). The run owns all of
 * it; weir__deploy_teardown frees it once every task of the run ended.
 * Subtasks that run elsewhere keep an empty slot (here = 0) so that the
 * plan's (chain, subtask) numbers index r->chains[].subs[] everywhere.
 */
#ifndef WEIR_STREAM_DEPLOY_H
#define WEIR_STREAM_DEPLOY_H

#include "stream/plan.h"
#include "stream/stream_int.h"

typedef struct weir__deploy {
    /* 1 when subtask sub of chain runs in this process. NULL: all do. */
    int (*here)(void *arg, uint32_t chain, uint32_t sub);
    /* The channel c; prod / cons are its ends' subtasks when they run here,
     * else NULL (one of them is here). NULL with *err set on failure. */
    weir__channel *(*channel)(void *arg, run *r, const weir__plan_channel *c, subtask *prod,
                              subtask *cons, int *err);
    /* After the build, before any subtask starts (NULL: nothing); 0 or a
     * negative errno, which fails the run. */
    int (*start)(void *arg, run *r);
    /* Once every subtask of the run has ended, before anything is freed:
     * the channels' own tasks end here. */
    void (*stop)(void *arg, run *r);
    /* The checkpoint link (ckpt_link.h) when the run spans processes;
     * NULL: the in-process one. Made after the build. */
    struct weir__ckpt_link *(*link)(void *arg, run *r);
    /* This process runs no checkpoint coordinator: another process's
     * does, and holds the checkpoint and sink directories. */
    int worker;
    /* With opts.restore: the checkpoint to restore, as whoever coordinates
     * the job chose it (a cluster's Deploy carries it), so every process
     * restores the same one; 0: the latest completed one in the
     * checkpoint directory, read here. */
    uint64_t restore_id;
    /* Checkpoints of this run are numbered above it, whatever the
     * directory holds: a cluster numbers a restarted job's checkpoints
     * above every id an earlier attempt used (one it began and never
     * completed included), so a straggler of that attempt can never write
     * into a checkpoint of this one. 0: above the latest completed. */
    uint64_t id_floor;
    /* Each subtask here as it ends (err: 0 or its failure), on its own
     * thread, after its operators closed (NULL: nothing). A cluster's
     * worker reports it to the coordinator at once. */
    void (*ended)(void *arg, subtask *st, int err);
    /* The checkpoint coordinator of this run calls fence before it
     * publishes a completed checkpoint (its manifest and COMPLETED marker)
     * and unfence(token) after: 0 with *token (what unfence lets go; -1:
     * nothing), or, from a coordinator that no longer leads (a cluster's
     * superseded leader), -ESTALE with why: the checkpoint is abandoned
     * instead of completed. NULL: no fence. */
    int (*fence)(void *arg, int *token, char *why, size_t cap);
    void (*unfence)(void *arg, int token);
    void *arg;
} weir__deploy;

/* 0, or a negative errno with the job's error set. On failure what was
 * built is freed by weir__deploy_teardown as after a run. */
int weir__deploy_build(run *r, const weir__plan *p, const weir__deploy *d);
void weir__deploy_teardown(run *r);

/* runner.c: run the subtasks of plan p that d deploys here (d NULL: all,
 * local channels), as weir_job_run does for the whole job. */
int weir__job_run_plan(weir_job *j, const weir__plan *p, const weir_run_opts *opts,
                       const weir__deploy *d);

/* j's error and its message (copied into buf[cap]) read under its lock:
 * what another thread (the checkpoint coordinator) may be setting. */
int weir__job_error_copy(weir_job *j, char *buf, size_t cap);

/*
 * The checkpoint side of a run none of whose subtasks run in this process:
 * what a cluster's coordinator holds for one attempt of a job. begin binds
 * p to j, builds nothing (d->here is ignored: nothing is here), makes the
 * link (d->link, required when opts checkpoint) and prepares the checkpoint
 * directory as weir__job_run_plan does (its locks and the sinks' output
 * directories are held until end; with opts->restore, the restore point is
 * d->restore_id or the latest completed checkpoint). start_checkpoints
 * starts the checkpoint coordinator over the link once the subtasks
 * elsewhere are running (nothing when the options take no checkpoints).
 * finished marks subtask (chain, sub) ended, as a subtask here would be
 * (no checkpoint starts once one has). end stops the coordinator, frees
 * the run and says the highest id it used. 0 or a negative errno with j's error set (begin failed:
 * nothing to end).
 */
int weir__job_coord_begin(weir_job *j, const weir__plan *p, const weir_run_opts *opts,
                          const weir__deploy *d, run **out);
/* The checkpoint the run restores (0: none) and the first id it numbers. */
uint64_t weir__job_coord_restored(const run *r);
uint64_t weir__job_coord_first_id(const run *r);
int weir__job_coord_start_checkpoints(run *r);
void weir__job_coord_finished(run *r, uint32_t chain, uint32_t sub);
/* Returns the highest checkpoint id the run used: the last one its
 * coordinator triggered, or the id it numbered after. */
uint64_t weir__job_coord_end(run *r);

/* What checkpoint directory dir (a storage URI) holds: the latest
 * completed checkpoint's id and the highest id of any checkpoint there,
 * finished or not (0: none). A cluster's new leader reads both before it
 * runs a job again. 0, or a negative errno with why. Must run in a task. */
int weir__ckpt_scan(const char *dir, uint64_t *completed, uint64_t *highest, char *why, size_t cap);

#endif
