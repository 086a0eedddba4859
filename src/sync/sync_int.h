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

#include "rt/rt_int.h"
#include "weir/sync.h"

/* ---- wait queue -------------------------------------------------------------- */
typedef struct weir__waitq {
    weir_sync_op *head, *tail;
    size_t len;
} weir__waitq;

static inline void weir__waitq_push(weir__waitq *q, weir_sync_op *op)
{
    op->next = NULL;
    op->prev = q->tail;
    if (q->tail)
        q->tail->next = op;
    else
        q->head = op;
    q->tail = op;
    q->len++;
}

static inline void weir__waitq_remove(weir__waitq *q, weir_sync_op *op)
{
    if (op->prev)
        op->prev->next = op->next;
    else
        q->head = op->next;
    if (op->next)
        op->next->prev = op->prev;
    else
        q->tail = op->prev;
    op->next = op->prev = NULL;
    q->len--;
}

static inline weir_sync_op *weir__waitq_pop(weir__waitq *q)
{
    weir_sync_op *op = q->head;
    if (op)
        weir__waitq_remove(q, op);
    return op;
}

/* Whether op is in q, in O(1): a popped or removed op has prev == NULL and
 * is not the head (weir__waitq_remove clears its links). Needs q's lock, and
 * op must be in q or in no queue at all. */
static inline int weir__waitq_linked(const weir__waitq *q, const weir_sync_op *op)
{
    return op->prev != NULL || q->head == op;
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
    op->next = op->prev = NULL;
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

#endif
