/* SPDX-License-Identifier: Apache-2.0 */
/*
 * barrier.c - weir_barrier: n tasks meet, then all go on; reusable.
 *
 * A generation is the set of waiters queued since the last release. The
 * n-th arrival releases it: every queued waiter completes with 0 and the
 * arriving task returns 1 at once (it is the generation's single leader,
 * and it never suspends, so it gets 1 even with a cancel pending). The
 * counter then starts over for the next generation, so a task that loops
 * on wait() joins the next one - no generation number is needed, because
 * a released waiter is no longer in the queue.
 *
 * A waiter that times out or is cancelled while queued leaves its
 * generation: it is unlinked and no longer counts towards n, so the
 * generation now needs one more arrival. One already released (popped by
 * the leader) returns 0. A task that is cancelled before it arrives does
 * not arrive at all.
 */
#include <assert.h>
#include <stdlib.h>

#include "sync/sync_int.h"

struct weir_barrier {
    weir__spin lock;  /* guards everything below */
    unsigned n;       /* tasks per generation */
    unsigned arrived; /* queued waiters of the current generation */
    weir__waitq q;    /* them; op->arg is 1 while queued */
};

static void barrier_cancel(weir_op *o);
static const weir__op_vt barrier_vt = {.cancel = barrier_cancel};

weir_barrier *weir_barrier_new(unsigned n)
{
    if (n == 0) {
        errno = EINVAL;
        return NULL;
    }
    weir_barrier *b = calloc(1, sizeof(*b));
    if (!b) {
        errno = ENOMEM;
        return NULL;
    }
    weir__spin_init(&b->lock);
    weir__waitq_init(&b->q);
    b->n = n;
    return b;
}

void weir_barrier_free(weir_barrier *b)
{
    if (!b)
        return;
    assert(weir__waitq_empty(&b->q) && "weir_barrier_free with waiting tasks");
    free(b);
}

/* The caller is the n-th arrival: detach the generation's waiters (to be
 * completed outside the lock) and start the next one. Under the lock. */
static void release_locked(weir_barrier *b, weir__taken *list)
{
    weir__list *n;
    weir__list_foreach (n, &b->q.ops)
        weir__waitq_op(n)->arg = 0;
    weir__waitq_take_all(&b->q, list);
    b->arrived = 0;
}

static void complete_all(weir__taken *list)
{
    weir_sync_op *op;
    while ((op = weir__taken_pop(list))) /* taken first: after done, op may be gone */
        weir__sync_done(op, 0);
}

int weir_barrier_wait_start(weir_sync_op *op, weir_barrier *b, int64_t deadline)
{
    if (!op)
        return -EINVAL;
    if (!b) {
        weir__sync_ready(op, -EINVAL);
        return -EINVAL;
    }
    /* Fast path: the last arrival leads without ever becoming a wait. */
    weir__spin_lock(&b->lock);
    weir__taken list;
    weir__taken_init(&list);
    int lead = b->arrived + 1 == b->n;
    if (lead)
        release_locked(b, &list);
    weir__spin_unlock(&b->lock);
    if (lead) {
        complete_all(&list);
        weir__sync_ready(op, 1);
        return 0;
    }
    int r = weir__sync_begin(op, &barrier_vt, b, deadline);
    if (r != 0)
        return r < 0 ? r : 0; /* 1: cancelled or past deadline: never arrived */
    weir__spin_lock(&b->lock);
    lead = b->arrived + 1 == b->n; /* others may have arrived meanwhile */
    if (lead) {
        release_locked(b, &list);
    } else {
        b->arrived++;
        op->arg = 1;
        weir__waitq_push(&b->q, op);
    }
    weir__spin_unlock(&b->lock);
    if (lead) {
        complete_all(&list);
        weir__sync_done_local(op, 1);
    }
    return 0;
}

int weir_barrier_wait(weir_barrier *b, int64_t deadline)
{
    weir_task *t = weir__task_current();
    if (!t || t->kind != WEIR__TASK_FIBER)
        return -EINVAL;
    weir_sync_op op;
    int r = weir_barrier_wait_start(&op, b, deadline);
    return r < 0 ? r : (int)weir_op_wait(&op.op);
}

/* Runs on the waiter's loop thread (weir__op_vt contract). */
static void barrier_cancel(weir_op *o)
{
    weir_sync_op *op = (weir_sync_op *)(void *)o;
    weir_barrier *b = op->obj;
    weir__spin_lock(&b->lock);
    int mine = op->arg != 0;
    if (mine) {
        weir__waitq_remove(&b->q, op);
        op->arg = 0;
        b->arrived--; /* leaves the generation */
    }
    weir__spin_unlock(&b->lock);
    if (mine)
        weir__sync_done_local(op, -ECANCELED);
    /* else: the leader released it and completes it with 0. */
}
