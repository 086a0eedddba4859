/* SPDX-License-Identifier: Apache-2.0 */
/*
 * waitgroup.c - weir_waitgroup: wait until a counter drops to zero (Go's
 * sync.WaitGroup, for tasks).
 *
 * add(n) moves the counter by n (n may be negative; done() is add(-1)).
 * When it reaches zero every queued waiter completes with 0; a wait that
 * finds it at zero returns 0 at once, without suspending (so also with a
 * cancel pending). Going below zero is a programming error: an assert in
 * the tested build; without asserts the counter is clamped at zero and the
 * error logged. Waiting and counting may happen on any tasks and threads.
 *
 * Cancellation follows sync_int.h: a waiter still queued ends with
 * -ECANCELED / -ETIMEDOUT; one already released by the counter reaching
 * zero returns 0.
 */
#include <assert.h>
#include <stdlib.h>

#include "sync/sync_int.h"

struct weir_waitgroup {
    weir__spin lock; /* guards everything below */
    long count;
    weir__waitq q; /* waiters; op->arg is 1 while queued */
};

static void wg_cancel(weir_op *o);
static const weir__op_vt wg_vt = {.cancel = wg_cancel};

weir_waitgroup *weir_waitgroup_new(void)
{
    weir_waitgroup *wg = calloc(1, sizeof(*wg));
    if (!wg) {
        errno = ENOMEM;
        return NULL;
    }
    weir__spin_init(&wg->lock);
    weir__waitq_init(&wg->q);
    return wg;
}

void weir_waitgroup_free(weir_waitgroup *wg)
{
    if (!wg)
        return;
    assert(weir__waitq_empty(&wg->q) && "weir_waitgroup_free with waiting tasks");
    free(wg);
}

void weir_waitgroup_add(weir_waitgroup *wg, long n)
{
    if (!wg || n == 0)
        return;
    weir__taken list;
    weir__taken_init(&list);
    int underflow = 0;
    weir__spin_lock(&wg->lock);
    wg->count += n;
    if (wg->count < 0) {
        underflow = 1;
        wg->count = 0;
    }
    if (wg->count == 0) {
        /* Release every waiter; complete them outside the lock. */
        weir__list *it;
        weir__list_foreach (it, &wg->q.ops)
            weir__waitq_op(it)->arg = 0;
        weir__waitq_take_all(&wg->q, &list);
    }
    weir__spin_unlock(&wg->lock);
    if (underflow) {
        weir__log(WEIR__LOG_ERROR, "sync.waitgroup", "counter went below zero (add %ld)", n);
        assert(!"weir_waitgroup counter below zero");
    }
    weir_sync_op *op;
    while ((op = weir__taken_pop(&list))) /* taken first: after done, op may be gone */
        weir__sync_done(op, 0);
}

void weir_waitgroup_done(weir_waitgroup *wg)
{
    weir_waitgroup_add(wg, -1);
}

int weir_waitgroup_wait_start(weir_sync_op *op, weir_waitgroup *wg, int64_t deadline)
{
    if (!op)
        return -EINVAL;
    if (!wg) {
        weir__sync_ready(op, -EINVAL);
        return -EINVAL;
    }
    weir__spin_lock(&wg->lock);
    int zero = wg->count == 0;
    weir__spin_unlock(&wg->lock);
    if (zero) {
        weir__sync_ready(op, 0);
        return 0;
    }
    int r = weir__sync_begin(op, &wg_vt, wg, deadline);
    if (r != 0)
        return r < 0 ? r : 0; /* 1: already complete (cancelled or past deadline) */
    weir__spin_lock(&wg->lock);
    zero = wg->count == 0; /* it may have dropped since the first look */
    if (!zero) {
        op->arg = 1;
        weir__waitq_push(&wg->q, op);
    }
    weir__spin_unlock(&wg->lock);
    if (zero)
        weir__sync_done_local(op, 0);
    return 0;
}

int weir_waitgroup_wait(weir_waitgroup *wg, int64_t deadline)
{
    weir_task *t = weir__task_current();
    if (!t || t->kind != WEIR__TASK_FIBER)
        return -EINVAL;
    weir_sync_op op;
    int r = weir_waitgroup_wait_start(&op, wg, deadline);
    return r < 0 ? r : (int)weir_op_wait(&op.op);
}

/* Runs on the waiter's loop thread (weir__op_vt contract). */
static void wg_cancel(weir_op *o)
{
    weir_sync_op *op = (weir_sync_op *)(void *)o;
    weir_waitgroup *wg = op->obj;
    weir__spin_lock(&wg->lock);
    int mine = op->arg != 0;
    if (mine) {
        weir__waitq_remove(&wg->q, op);
        op->arg = 0;
    }
    weir__spin_unlock(&wg->lock);
    if (mine)
        weir__sync_done_local(op, -ECANCELED);
    /* else: add() released it and completes it with 0. */
}
