/* SPDX-License-Identifier: Apache-2.0 */
/*
 * controller.h - the seam between a keyed subtask's mailbox and its head
 * operator, where an execution controller decides when each record runs.
 *
 * The runner hands every record of a keyed head to the subtask's
 * controller with the record's own context (weir__rctx: key, key group,
 * timestamp). The controller runs it at once (weir__ctl_run) or holds it
 * - copying the record and its key - and runs it later on the subtask's
 * thread: after an earlier record of the same key finished, once a state
 * read it waits for completed (a completion item in the mailbox, see
 * weir__subtask_post). Before anything that must see every earlier record
 * done (a watermark and the timers it fires, a barrier's snapshot, the end
 * of input) the runner calls drain(), which returns once nothing is held.
 *
 * A subtask without a controller (ctl NULL: its head has neither admit
 * nor drain) calls process() directly: no indirect call per record. The
 * built-in one, weir__controller_hooks, serves operators that bring their
 * own admit() / drain() hooks (weir_op_def). The async execution
 * controller (seed 000: per-key gate, in-flight cap, epochs; its rules in
 * state/async_exec.h, on a subtask in controller_async.c) plugs in here with its
 * own ops, and takes the watermarks too: it releases each once the
 * records before it are done.
 */
#ifndef WEIR_STREAM_CONTROLLER_H
#define WEIR_STREAM_CONTROLLER_H

#include "weir/stream.h"

struct weir__rctx;
typedef struct weir__controller weir__controller;

typedef struct weir__controller_ops {
    const char *name;
    /* Record r for operator ctx, in context rc (both valid during the
     * call only). 0 (ran or held) or a negative errno. */
    int (*admit)(weir__controller *c, weir_ctx *ctx, struct weir__rctx *rc, const weir_rec *r);
    /* Run everything held; may wait (it runs in the subtask's fiber). */
    int (*drain)(weir__controller *c, weir_ctx *ctx);
    /* Called before the run's structures go (the mailbox, the backend):
     * nothing may reach the subtask after it. NULL: nothing to free. */
    void (*free)(weir__controller *c);
    /* The input's watermark moved to wm: the controller releases it
     * (weir__stream_release_wm) once every record before it finished.
     * NULL: the runner drains, then releases it at once. */
    int (*watermark)(weir__controller *c, weir_ctx *ctx, int64_t wm);
    /* An input batch's records were all admitted: reads the controller
     * gathered for one round trip go out now. NULL: nothing gathered. */
    void (*flush)(weir__controller *c);
} weir__controller_ops;

struct weir__controller {
    const weir__controller_ops *ops;
};

/* process() of ctx's operator on r with rc as its current context (the
 * previous one comes back after). Errors are reported with the
 * operator's name. */
int weir__ctl_run(weir_ctx *ctx, struct weir__rctx *rc, const weir_rec *r);

/* The controller of operators with their own admit / drain hooks. */
extern weir__controller weir__controller_hooks;

/* ---- the async execution controller (controller_async.c) ----
 * Chosen for a keyed head whose state backend has asynchronous reads. */
struct subtask;
weir__controller *weir__controller_async_new(struct subtask *st, size_t max_in_flight);

/* What a record does with a state read's answer: err 0 with the value (a
 * view valid during the call), -ENOENT, or the read's error. It runs in
 * the record's context (weir_ctx_key, its state calls and emits as in
 * process()), on the subtask's thread, and may read again. 0 or a
 * negative errno, which fails the record as process() would. */
typedef weir_state_cont weir__cont_fn;

/* Read key (klen bytes, group kg) of ctx's backend for the record in
 * being processed, then cont. Under the async controller a read the
 * backend cannot answer at once leaves the record waiting: process()
 * returns, the subtask takes other records, and cont runs when the answer
 * is back. Otherwise (an answer at once, no async controller, a timer's
 * context, an operator past the chain's head, a record run through
 * weir_ctx_process inside another) cont runs before this returns, with a
 * plain read's view. 0 or a negative errno (cont's). */
int weir__ctl_get(weir_ctx *ctx, const weir_rec *in, int kg, const void *key, size_t klen,
                  weir__cont_fn cont, void *arg);
/* A scan of (kg, prefix) of ctx's backend for the record being
 * processed, then cont (err 0, no value; or the prefetch's error, which is
 * advisory). Under the async controller a scan the backend would have to
 * wait for (its scan_prefetch is in progress) leaves the record waiting
 * as weir__ctl_get does, and cont - which scans exactly that prefix -
 * then finds the entries fetched. Otherwise cont runs before this
 * returns. 0 or a negative errno (cont's). */
int weir__ctl_scan(weir_ctx *ctx, const weir_rec *in, int kg, const void *prefix, size_t plen,
                   weir__cont_fn cont, void *arg);
/* keyed.c: weir__ctl_get of the current key's entry of state (namespace
 * ns), as weir__ns_get reads it. */
int weir__ns_get_async(weir_ctx *ctx, const weir_rec *in, const char *state, const void *ns,
                       size_t nslen, weir__cont_fn cont, void *arg);

#endif
