/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op.c - the leaf-operation life cycle shared by every kind of op.
 *
 *   begin   (the task)    bind the op to the current task, apply the task's
 *                         deadline, refuse at once if the task is cancelled,
 *                         arm the deadline timer;
 *   done    (the source)  publish the result, wake the waiter;
 *   cancel  (deadline timer or a cancel request) ask the source to finish
 *                         early - the op is still done only through `done`;
 *   finish  (the task)    disarm the timer, turn a cancelled result into
 *                         -ETIMEDOUT / -ECANCELED, release the op.
 *
 * Fibers reach finish through weir_op_wait (parking in between); stackless
 * tasks through weir_op_poll (returning PENDING in between).
 */
#include <errno.h>
#include <string.h>

#include "io/backend.h"
#include "rt/rt_int.h"
#include "weir/io.h"

static void op_set(weir_op *op, uint32_t bits)
{
    __atomic_fetch_or(&op->flags, bits, __ATOMIC_RELEASE);
}

int weir__op_begin(weir_op *op, int kind, int64_t deadline)
{
    return weir__op_begin_ex(op, kind, deadline, 0);
}

/* Whether an op of this kind holds a resource of the loop that starts it
 * (see weir__op_anchor). Joins and sync ops do not: they are completed from
 * any thread and cancelled through thread-safe paths; only their deadline
 * timer, when they have one, binds them. */
static int kind_bound_to_loop(int kind)
{
    return kind != WEIR__OP_JOIN && kind != WEIR__OP_CUSTOM;
}

int weir__op_begin_ex(weir_op *op, int kind, int64_t deadline, int shielded)
{
    weir_loop *l = weir__loop_current();
    weir_task *t = l ? l->current : NULL;
    if (!op)
        return -EINVAL;
    if (!t) {
        /* Not in a task: leave the op inactive with the error as its result,
         * so that a later wait/poll reports it instead of hanging. */
        op->flags = 0;
        op->result = -EINVAL;
        return -EINVAL;
    }
    op->task = t;
    op->result = 0;
    op->kind = (uint8_t)kind;
    op->cancel_reason = WEIR__CANCEL_NONE;
    op->backend = 0;
    op->timer.slot = 0;
    op->timer.pad = 0;
    op->flags = WEIR__OP_ACTIVE;
    if (shielded) {
        /* Neither the task's deadline nor its cancellation applies: the op
         * ends only when its source completes it. */
        op->flags |= WEIR__OP_UNCANCELLABLE;
        op->timer.deadline = WEIR_FOREVER;
        if (kind_bound_to_loop(kind))
            weir__op_anchor(op);
        return 0;
    }
    int64_t td = weir__task_deadline(t);
    if (td < deadline)
        deadline = td;
    op->timer.deadline = deadline; /* kept even when no timer is armed */
    if (weir__task_cancel_requested(t)) {
        op->cancel_reason = WEIR__CANCEL_TASK;
        op->result = -ECANCELED;
        op->flags |= WEIR__OP_DONE;
        return 1;
    }
    int armed = 0;
    if (deadline != WEIR_FOREVER) {
        if (deadline <= weir_time_now()) {
            op->cancel_reason = WEIR__CANCEL_DEADLINE;
            op->result = -ECANCELED;
            op->flags |= WEIR__OP_DONE;
            return 1;
        }
        weir__timer_arm(l, &op->timer, deadline);
        armed = 1;
    }
    if (armed || kind_bound_to_loop(kind))
        weir__op_anchor(op);
    return 0;
}

void weir__op_done(weir_op *op, int64_t result)
{
    if (weir__op_flags(op) & WEIR__OP_PART) {
        op->result = result;
        op_set(op, WEIR__OP_DONE);
        weir__op_any_part_done(op);
        return;
    }
    weir_task *t = op->task;
    op->result = result;
    if (weir__op_flags(op) & WEIR__OP_REMOTE) {
        /* The waiter may see DONE, finish and free its task before we wake
         * it: hold a reference across the publication. */
        weir_task_ref(t);
        op_set(op, WEIR__OP_DONE);
        weir_task_wake(t);
        weir_task_unref(t);
        return;
    }
    uint32_t f = __atomic_fetch_or(&op->flags, WEIR__OP_DONE, __ATOMIC_RELEASE);
    if (f & WEIR__OP_WAITING)
        weir_task_wake(t);
}

void weir__op_cancel(weir_op *op, int reason)
{
    uint32_t f = weir__op_flags(op);
    if (!(f & WEIR__OP_ACTIVE) || (f & (WEIR__OP_DONE | WEIR__OP_CANCELLING)) ||
        (f & WEIR__OP_UNCANCELLABLE))
        return;
    op_set(op, WEIR__OP_CANCELLING);
    op->cancel_reason = (uint8_t)reason;
    weir_loop *l = op->task ? op->task->loop : weir__loop_current();
    switch (op->kind) {
    case WEIR__OP_SLEEP:
    case WEIR__OP_INTERVAL:
        weir__op_done(op, -ECANCELED);
        break;
    case WEIR__OP_JOIN:
        weir__op_join_cancel(op);
        break;
    case WEIR__OP_BLOCKING:
        weir__op_blocking_cancel(op);
        break;
    case WEIR__OP_ANY:
        weir__op_any_cancel(op);
        break;
    case WEIR__OP_CUSTOM:
        ((const weir__op_vt *)op->u.ptr)->cancel(op);
        break;
    case WEIR__OP_IO:
        /* The backend ends the request through its done callback. */
        l->be->cancel(l->be_state, &weir__io_of(op)->u.req);
        break;
    default:
        break;
    }
}

void weir_op_cancel(weir_op *op)
{
    if (!op)
        return;
    weir_loop *l = weir__loop_current();
    if (l && op->task && __atomic_load_n(&op->task->loop, __ATOMIC_RELAXED) == l &&
        (l->current == op->task || !l->rt)) {
        weir__op_cancel(op, WEIR__CANCEL_TASK);
        return;
    }
    /* From another thread (or another task of a runtime, which may run
     * anywhere): the op's source belongs to the waiter's thread. Flag the
     * request and wake the waiter; its op_check() cancels the op there.
     * The caller guarantees the op is still active (as for any cancel). */
    uint32_t f = weir__op_flags(op);
    if (!(f & WEIR__OP_ACTIVE) || (f & WEIR__OP_DONE))
        return;
    weir_task *t = weir_task_ref(op->task);
    op_set(op, WEIR__OP_CANCEL_REQ);
    weir_task_wake(t);
    weir_task_unref(t);
}

static int64_t op_finish(weir_op *op)
{
    if (op->timer.slot)
        weir__timer_disarm(op->task->loop, &op->timer);
    if (op->kind == WEIR__OP_INTERVAL)
        weir__interval_detach(op);
    if (weir__op_flags(op) & WEIR__OP_ANCHORED)
        weir__task_anchor(op->task, -1);
    int64_t r = op->result;
    if (op->cancel_reason && (r == -ECANCELED || r == -EINTR))
        r = op->cancel_reason == WEIR__CANCEL_DEADLINE ? -ETIMEDOUT : -ECANCELED;
    op->flags = 0;
    return r;
}

/* One step of waiting: 1 when the op is done, 0 when the caller must
 * suspend (WAITING is then set so that `done` wakes the task). */
static int op_check(weir_op *op, weir_task *t)
{
    uint32_t f = weir__op_flags(op);
    if (f & WEIR__OP_DONE)
        return 1;
    if (!(f & WEIR__OP_CANCELLING) &&
        (weir__task_cancel_requested(t) || (f & WEIR__OP_CANCEL_REQ) ||
         (op->kind == WEIR__OP_INTERVAL && weir__interval_cancelled(op)))) {
        /* A cancel of the task, of this op from another thread
         * (weir_op_cancel), or of the interval it waits on: carried out
         * here, on the thread that owns the op. */
        weir__op_cancel(op, WEIR__CANCEL_TASK);
        if (weir__op_flags(op) & WEIR__OP_DONE)
            return 1;
    }
    f = __atomic_fetch_or(&op->flags, WEIR__OP_WAITING, __ATOMIC_ACQ_REL);
    return (f & WEIR__OP_DONE) != 0;
}

/*
 * Cooperative budget. A task whose operations keep completing at once (a
 * channel that always has an item, a socket that always has data) would
 * never give its thread back. Each poll of a task starts with
 * WEIR__COOP_BUDGET units (weir__task_run); every op result handed to the
 * task spends one; once they are spent, the task is made to yield - the op
 * keeps its result for when the task runs again. Returns 1 when the caller
 * must yield.
 */
static int coop_spend(weir_task *t)
{
    weir_loop *l = t->loop; /* the running thread's (weir__task_run) */
    if (WEIR__LIKELY(--l->coop_budget > 0))
        return 0;
    WEIR__STAT_ADD(l->coop_yields, 1);
    return 1;
}

int weir_op_poll(weir_op *op, int64_t *result)
{
    weir_task *t = weir__task_current();
    if (!op || !(weir__op_flags(op) & WEIR__OP_ACTIVE)) {
        /* Completed at once by its *_start call, or never started (the call
         * failed): the result is there. */
        if (t && op && coop_spend(t)) {
            weir_task_wake(t);
            return WEIR_PENDING;
        }
        if (result)
            *result = op ? op->result : -EINVAL;
        return WEIR_READY;
    }
    if (!t || !op_check(op, t))
        return WEIR_PENDING;
    if (coop_spend(t)) {
        weir_task_wake(t); /* done: collected at the next poll */
        return WEIR_PENDING;
    }
    int64_t r = op_finish(op);
    if (result)
        *result = r;
    return WEIR_READY;
}

/* A fiber out of budget: let the others run, then carry on. */
static void coop_yield(weir_task *t)
{
    weir_task_wake(t);
    weir__fiber_park();
}

int64_t weir_op_wait(weir_op *op)
{
    weir_task *t = weir__task_current();
    if (!op || !(weir__op_flags(op) & WEIR__OP_ACTIVE)) {
        int64_t r = op ? op->result : -EINVAL;
        if (t && op && t->kind == WEIR__TASK_FIBER && coop_spend(t))
            coop_yield(t);
        return r;
    }
    if (!t || t->kind != WEIR__TASK_FIBER)
        return -EINVAL;
    int parked = 0;
    while (!op_check(op, t)) {
        weir__fiber_park();
        parked = 1;
    }
    int64_t r = op_finish(op);
    if (!parked && coop_spend(t))
        coop_yield(t);
    return r;
}
