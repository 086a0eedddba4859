/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sync_int.h - what every synchronisation primitive shares (private): a
 * short spinlock, an intrusive FIFO wait queue of weir_sync_ops, and the
 * begin / complete / cancel protocol for their ops.
 *
 * The protocol, which every primitive follows:
 *
 *   wait      lock; if the primitive can satisfy the caller at once, do it,
 *             unlock, and complete the op immediately (weir__sync_done);
 *             otherwise queue the op and unlock. The op was begun with
 *             weir__sync_begin, so it is REMOTE: any thread may complete it.
 *   satisfy   (another task, any thread) lock; pop the waiter (it is then no
 *             longer findable), do the transfer (hand over the lock, copy
 *             the item...), unlock; then weir__sync_done(op, result). After
 *             that call the op may be gone (a fiber's stack frame): never
 *             touch it again.
 *   cancel    (the waiter's loop thread, through the op's weir__op_vt) lock;
 *             if the op is still queued, unlink it, undo any partial effect,
 *             unlock and weir__sync_done(op, -ECANCELED); if it is not, a
 *             satisfier popped it and will complete it: do nothing.
 *
 * So each op is completed exactly once, by whoever unqueued it, and the
 * primitive's lock is never held across a completion (completions take
 * other locks: the waiter's loop's remote queue).
 */
#ifndef WEIR_SYNC_INT_H
#define WEIR_SYNC_INT_H

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>

#include "base/list.h"
#include "rt/rt_int.h"
#include "weir/sync.h"

/* ---- wait queue -------------------------------------------------------------- */
/* The waiters of a primitive, oldest first: a base/list.h list of the ops'
 * nodes, under the primitive's lock. An op taken off it (popped by a
 * satisfier, removed by its cancel) may then go on a weir__taken list, to
 * be completed after the unlock; op->queued, not the node, says whether it
 * is still on the queue, so a cancel that runs meanwhile leaves a taken op
 * to whoever took it. */
typedef struct weir__waitq {
    weir__list ops;
    size_t len;
} weir__waitq;

static inline void weir__waitq_init(weir__waitq *q)
{
    weir__list_init(&q->ops);
    q->len = 0;
}

static inline int weir__waitq_empty(const weir__waitq *q)
{
    return weir__list_empty(&q->ops);
}

static inline weir_sync_op *weir__waitq_op(weir__list *n)
{
    return n ? weir__container_of(n, weir_sync_op, node) : NULL;
}

/* The oldest waiter, or NULL. */
static inline weir_sync_op *weir__waitq_first(const weir__waitq *q)
{
    return weir__waitq_op(weir__list_first(&q->ops));
}

/* The waiter after op (which is on q), or NULL. */
static inline weir_sync_op *weir__waitq_next(const weir__waitq *q, const weir_sync_op *op)
{
    return op->node.next == &q->ops ? NULL : weir__waitq_op(op->node.next);
}

static inline void weir__waitq_push(weir__waitq *q, weir_sync_op *op)
{
    weir__list_push_back(&q->ops, &op->node);
    op->queued = 1;
    q->len++;
}

/* At the head: a woken waiter that lost the race goes back first. */
static inline void weir__waitq_push_front(weir__waitq *q, weir_sync_op *op)
{
    weir__list_push_front(&q->ops, &op->node);
    op->queued = 1;
    q->len++;
}

static inline void weir__waitq_remove(weir__waitq *q, weir_sync_op *op)
{
    weir__list_remove(&op->node);
    op->queued = 0;
    q->len--;
}

static inline weir_sync_op *weir__waitq_pop(weir__waitq *q)
{
    weir_sync_op *op = weir__waitq_first(q);
    if (op)
        weir__waitq_remove(q, op);
    return op;
}

/* Whether op is in q, in O(1). Needs q's lock, and op must be in q or in no
 * queue at all (a taken op is in none). */
static inline int weir__waitq_linked(const weir__waitq *q, const weir_sync_op *op)
{
    (void)q;
    return op->queued;
}

/* Ops taken off a wait queue under the lock and completed after it, in the
 * order they were taken. */
typedef struct weir__taken {
    weir__list ops;
} weir__taken;

static inline void weir__taken_init(weir__taken *t)
{
    weir__list_init(&t->ops);
}

/* Put op, already off its queue, on t. */
static inline void weir__taken_push(weir__taken *t, weir_sync_op *op)
{
    weir__list_push_back(&t->ops, &op->node);
}

/* Take op off q onto t. */
static inline void weir__waitq_take(weir__waitq *q, weir_sync_op *op, weir__taken *t)
{
    weir__waitq_remove(q, op);
    weir__taken_push(t, op);
}

/* Take every waiter of q onto t; q is left empty. */
static inline void weir__waitq_take_all(weir__waitq *q, weir__taken *t)
{
    weir__list *n;
    weir__list_foreach (n, &q->ops)
        weir__waitq_op(n)->queued = 0;
    weir__list_splice(&t->ops, &q->ops);
    q->len = 0;
}

/* The next op to complete, or NULL. Pop it before completing it: after
 * the completion the op may be gone (a fiber's stack frame). */
static inline weir_sync_op *weir__taken_pop(weir__taken *t)
{
    return weir__waitq_op(weir__list_pop(&t->ops));
}

/* ---- ops ------------------------------------------------------------------------ */
/* Begin a sync op for the current task. Returns 0 when the caller should go
 * on (queue it or complete it), 1 when it is already complete (the task was
 * cancelled or its deadline passed), or -EINVAL outside a task. */
static inline int weir__sync_begin_ex(weir_sync_op *op, const weir__op_vt *vt, void *obj,
                                      int64_t deadline, int shielded);

static inline int weir__sync_begin(weir_sync_op *op, const weir__op_vt *vt, void *obj,
                                   int64_t deadline)
{
    return weir__sync_begin_ex(op, vt, obj, deadline, 0);
}

/* shielded: see weir__op_begin_ex. */
static inline int weir__sync_begin_ex(weir_sync_op *op, const weir__op_vt *vt, void *obj,
                                      int64_t deadline, int shielded)
{
    op->op.u.ptr = (void *)vt; /* set first: finish/cancel read it on every path */
    weir__list_init(&op->node);
    op->queued = 0;
    op->obj = obj;
    op->sel = NULL;
    op->sel_index = -1;
    int r = weir__op_begin_ex(&op->op, WEIR__OP_CUSTOM, deadline, shielded);
    if (r != 0)
        return r;
    /* Before the op is queued anywhere: a satisfier on another thread must
     * take the task reference that REMOTE completion implies. */
    op->op.flags |= WEIR__OP_REMOTE;
    return 0;
}

static inline void weir__sync_done(weir_sync_op *op, int64_t result)
{
    weir__op_done(&op->op, result);
}

/* Complete an op on its own task's thread (the waiter itself, or its cancel
 * on its loop): the local path of weir__op_done wakes the task only if it
 * parked, where the REMOTE path's unconditional wake would re-schedule the
 * running task for nothing. */
static inline void weir__sync_done_local(weir_sync_op *op, int64_t result)
{
    __atomic_fetch_and(&op->op.flags, ~(uint32_t)WEIR__OP_REMOTE, __ATOMIC_RELAXED);
    weir__op_done(&op->op, result);
}

/* A *_start op satisfied at once, before weir__sync_begin: leave it
 * inactive with its result, so weir_op_poll / weir_op_wait report it
 * without binding a task, a timer or a wake. */
static inline void weir__sync_ready(weir_sync_op *op, int64_t result)
{
    op->op.result = result;
    __atomic_store_n(&op->op.flags, 0, __ATOMIC_RELAXED);
}

/* Lock m from a fiber ignoring the task's cancellation and deadline: for
 * code that must end holding the mutex (weir_notify_wait_unlock). */
int weir__mutex_lock_shielded(weir_mutex *m);

/* How long a mutex waiter waits before the mutex enters starvation mode
 * (1 ms). Tests of normal mode raise it before starting the runtime. */
extern int64_t weir__mutex_starve_ns;

#endif
