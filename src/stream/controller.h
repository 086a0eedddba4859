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
 * controller (seed 000: per-key gate, in-flight cap, epochs) plugs in
 * here with its own ops.
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
    void (*free)(weir__controller *c); /* NULL: nothing to free */
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

#endif
