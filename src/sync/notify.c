/* SPDX-License-Identifier: Apache-2.0 */
/*
 * notify.c - weir_notify: wake one or all waiting tasks, and the
 * condition-variable form weir_notify_wait_unlock() over a weir_mutex.
 *
 * A notify is a FIFO wait queue plus one stored permit. notify_one() pops
 * the oldest waiter, or, when nobody waits, stores the permit (at most one:
 * permits do not accumulate), so a notify that races ahead of the wait it
 * is meant for is not lost. notify_all() completes every waiter queued at
 * that moment and stores nothing. A wait that can be satisfied at once (a
 * permit is stored) is not a suspension: it consumes the permit and returns
 * 0 even with a cancel pending or a deadline already past, like an
 * uncontended weir_mutex_lock.
 *
 * Cancellation follows the protocol of sync_int.h. A waiter still queued
 * when its deadline passes or its task is cancelled is unlinked and returns
 * -ETIMEDOUT / -ECANCELED. A waiter that notify_one() or notify_all() had
 * already popped returns 0: the notification was delivered to it and is not
 * lost; its task's cancellation shows at its next suspension. (The other
 * choice, passing the permit on, would need the canceller to tell a popped
 * op from a completed one; "the chosen waiter returns 0" needs nothing.)
 *
 * weir_notify_wait_unlock() queues the wait *before* releasing the mutex, so
 * a notifier that takes the mutex after us, changes the predicate and
 * notifies always finds us queued: the classic condition-variable argument.
 * Re-taking the mutex afterwards must succeed even when the wait ended by
 * cancellation or timeout (the caller's unlock would otherwise be a bug on
 * every error path), so the re-lock ignores both (weir__mutex_lock_shielded).
 */
#include <assert.h>
#include <stdlib.h>

#include "sync/sync_int.h"

struct weir_notify {
    weir__spin lock; /* guards everything below */
    weir__waitq q;   /* waiters, oldest first; op->arg is 1 while queued */
    int permit;      /* notify_one() found nobody: the next wait returns at once */
};

static void notify_cancel(weir_op *o);
static const weir__op_vt notify_vt = {.cancel = notify_cancel};

static int in_fiber(void)
{
    weir_task *t = weir__task_current();
    return t && t->kind == WEIR__TASK_FIBER;
}

weir_notify *weir_notify_new(void)
{
    weir_notify *n = calloc(1, sizeof(*n));
    if (!n) {
        errno = ENOMEM;
        return NULL;
    }
    weir__spin_init(&n->lock);
    weir__waitq_init(&n->q);
    return n;
}

void weir_notify_free(weir_notify *n)
{
    if (!n)
        return;
    assert(weir__waitq_empty(&n->q) && "weir_notify_free with waiting tasks");
    free(n);
}

/* Take the permit if one is stored. Under the lock. */
static int take_permit(weir_notify *n)
{
    if (!n->permit)
        return 0;
    n->permit = 0;
    return 1;
}

int weir_notify_wait_start(weir_sync_op *op, weir_notify *n, int64_t deadline)
{
    if (!op)
        return -EINVAL;
    if (!n) {
        weir__sync_ready(op, -EINVAL);
        return -EINVAL;
    }
    /* Fast path: a stored permit is consumed without becoming a wait. */
    weir__spin_lock(&n->lock);
    int got = take_permit(n);
    weir__spin_unlock(&n->lock);
    if (got) {
        weir__sync_ready(op, 0);
        return 0;
    }
    int r = weir__sync_begin(op, &notify_vt, n, deadline);
    if (r != 0)
        return r < 0 ? r : 0; /* 1: already complete (cancelled or past deadline) */
    weir__spin_lock(&n->lock);
    got = take_permit(n); /* a notify_one may have slipped in since the fast path */
    if (!got) {
        op->arg = 1;
        weir__waitq_push(&n->q, op);
    }
    weir__spin_unlock(&n->lock);
    if (got)
        weir__sync_done_local(op, 0);
    return 0;
}

int weir_notify_wait(weir_notify *n, int64_t deadline)
{
    if (!in_fiber()) /* the op would outlive this frame in a stackless task */
        return -EINVAL;
    weir_sync_op op;
    int r = weir_notify_wait_start(&op, n, deadline);
    return r < 0 ? r : (int)weir_op_wait(&op.op);
}

void weir_notify_one(weir_notify *n)
{
    if (!n)
        return;
    weir__spin_lock(&n->lock);
    weir_sync_op *op = weir__waitq_pop(&n->q);
    if (op)
        op->arg = 0; /* popped: its cancel now leaves it to us */
    else
        n->permit = 1;
    weir__spin_unlock(&n->lock);
    if (op)
        weir__sync_done(op, 0);
}

void weir_notify_all(weir_notify *n)
{
    if (!n)
        return;
    /* Detach the whole queue under the lock, complete outside it: the
     * completions take other locks (the waiters' loops' remote queues). */
    weir__spin_lock(&n->lock);
    weir__taken list;
    weir__taken_init(&list);
    weir__list *it;
    weir__list_foreach (it, &n->q.ops)
        weir__waitq_op(it)->arg = 0;
    weir__waitq_take_all(&n->q, &list);
    weir__spin_unlock(&n->lock);
    weir_sync_op *op;
    while ((op = weir__taken_pop(&list))) /* taken first: after done, op may be gone */
        weir__sync_done(op, 0);
}

/* Runs on the waiter's loop thread (weir__op_vt contract). */
static void notify_cancel(weir_op *o)
{
    weir_sync_op *op = (weir_sync_op *)(void *)o;
    weir_notify *n = op->obj;
    weir__spin_lock(&n->lock);
    int mine = op->arg != 0;
    if (mine) {
        weir__waitq_remove(&n->q, op);
        op->arg = 0;
    }
    weir__spin_unlock(&n->lock);
    if (mine)
        weir__sync_done_local(op, -ECANCELED);
    /* else: a notifier popped it and completes it with 0 (see the top). */
}

int weir_notify_wait_unlock(weir_notify *n, weir_mutex *m, int64_t deadline)
{
    if (!n || !m || !in_fiber())
        return -EINVAL; /* the mutex is left as it was */
    weir_sync_op op;
    int r = weir_notify_wait_start(&op, n, deadline);
    if (r < 0)
        return r;
    weir_mutex_unlock(m);
    r = (int)weir_op_wait(&op.op);
    /* Always return holding the mutex, also on timeout and cancellation:
     * the re-lock ignores both. */
    int lr = weir__mutex_lock_shielded(m);
    assert(lr == 0);
    (void)lr;
    return r;
}
