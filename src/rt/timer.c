/* SPDX-License-Identifier: Apache-2.0 */
/*
 * timer.c - everything that waits for a time: op deadlines, sleep,
 * intervals and callback timers, all on the loop's timer wheel.
 *
 * A wheel node does not know what it belongs to, so its spare word (`pad`)
 * tags the owner: an op (its deadline or, for sleep and interval ops, its
 * due time) or a callback timer. The loop calls weir__timers_expire() each
 * turn; the backend is asked to wait no longer than weir__wheel_next().
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "rt/rt_int.h"

enum { NODE_OP = 0, NODE_CALLBACK = 1 };

/* a + b for b >= 0, saturating at WEIR_FOREVER. */
static int64_t add_sat(int64_t a, int64_t b)
{
    return b > WEIR_FOREVER - a ? WEIR_FOREVER : a + b;
}

int64_t weir_time_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * WEIR_SEC + ts.tv_nsec;
}

int64_t weir_time_after_ms(int64_t ms)
{
    if (ms < 0)
        return WEIR_FOREVER;
    int64_t now = weir_time_now();
    if (ms > (WEIR_FOREVER - now) / WEIR_MSEC)
        return WEIR_FOREVER;
    return now + ms * WEIR_MSEC;
}

void weir__timer_arm(weir_loop *l, weir_timer_node *n, int64_t deadline)
{
    assert(!weir__wheel_armed(n));
    n->deadline = deadline;
    weir__wheel_add(&l->wheel, n);
}

void weir__timer_disarm(weir_loop *l, weir_timer_node *n)
{
    if (weir__wheel_armed(n))
        weir__wheel_del(&l->wheel, n);
}

/* ---- callback timers ------------------------------------------------------------- */
struct weir_timer {
    weir_timer_node node;
    struct weir_timer *prev, *next; /* the loop's cb_timers */
    weir_loop *loop;
    weir_task *owner; /* the task that started it (a reference), or NULL */
    int64_t period;
    void (*cb)(void *);
    void *arg;
};

weir_timer *weir_timer_start(int64_t delay_ns, int64_t period_ns, void (*cb)(void *), void *arg)
{
    weir_loop *l = weir__loop_current();
    if (!l || !cb || delay_ns < 0 || period_ns < 0) {
        errno = EINVAL;
        return NULL;
    }
    weir_timer *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->loop = l;
    t->period = period_ns;
    t->cb = cb;
    t->arg = arg;
    t->node.pad = NODE_CALLBACK;
    if (l->current) {
        /* The timer is on this thread's wheel: in a runtime the task that
         * started it stays on this thread until it fires or is cancelled,
         * so that its weir_timer_cancel() runs here (sched.c). */
        t->owner = weir_task_ref(l->current);
        weir__task_anchor(t->owner, 1);
    }
    t->next = l->cb_timers;
    if (t->next)
        t->next->prev = t;
    l->cb_timers = t;
    int64_t now = weir_time_now();
    weir__timer_arm(l, &t->node, delay_ns > WEIR_FOREVER - now ? WEIR_FOREVER : now + delay_ns);
    return t;
}

static void timer_release(weir_timer *t)
{
    weir_loop *l = t->loop;
    weir__timer_disarm(l, &t->node);
    if (t->prev)
        t->prev->next = t->next;
    else
        l->cb_timers = t->next;
    if (t->next)
        t->next->prev = t->prev;
    if (t->owner) {
        weir__task_anchor(t->owner, -1);
        weir_task_unref(t->owner);
    }
    free(t);
}

int weir_timer_cancel(weir_timer *t)
{
    if (!t)
        return -EINVAL;
    if (t->loop != weir__loop_current())
        return -EPERM; /* the wheel belongs to another thread */
    timer_release(t);
    return 0;
}

void weir__timers_free_all(weir_loop *l)
{
    while (l->cb_timers)
        timer_release(l->cb_timers);
}

static void callback_fire(weir_loop *l, weir_timer *t)
{
    if (t->period > 0) {
        /* setInterval: re-arm first (relative to the due time, skipping
         * missed periods) so that the callback may cancel it. */
        int64_t now = weir_time_now(), due = add_sat(t->node.deadline, t->period);
        if (due <= now) /* skip the missed periods: the next due time after now */
            due = add_sat(now, t->period - (now - due) % t->period);
        weir__timer_arm(l, &t->node, due);
        t->cb(t->arg);
        return;
    }
    void (*cb)(void *) = t->cb;
    void *arg = t->arg;
    timer_release(t);
    cb(arg);
}

/* ---- sleep ------------------------------------------------------------------------ */
/* A sleep op's timer fires at min(due, task deadline). */
int weir_time_sleep_start(weir_op *op, int64_t due)
{
    int r = weir__op_begin(op, WEIR__OP_SLEEP, WEIR_FOREVER);
    if (r != 0)
        return r < 0 ? r : 0;
    weir_loop *l = op->task->loop;
    op->u.due = due;
    int64_t dl = weir__op_deadline(op);
    int64_t fire_at = due < dl ? due : dl;
    if (fire_at <= weir_time_now()) {
        weir__op_done(op, due <= dl ? 0 : -ETIMEDOUT);
        return 0;
    }
    /* begin may have armed the task deadline already: one node, one slot. */
    weir__timer_disarm(l, &op->timer);
    if (fire_at != WEIR_FOREVER)
        weir__timer_arm(l, &op->timer, fire_at);
    return 0;
}

int weir_time_sleep_until(int64_t deadline)
{
    if (weir__stackless_caller())
        return -EINVAL;
    weir_op op;
    int r = weir_time_sleep_start(&op, deadline);
    return r < 0 ? r : (int)weir_op_wait(&op);
}

int weir_time_sleep(int64_t ns)
{
    int64_t now = weir_time_now();
    return weir_time_sleep_until(ns > WEIR_FOREVER - now ? WEIR_FOREVER : now + (ns < 0 ? 0 : ns));
}

/* ---- intervals ---------------------------------------------------------------------- */
/*
 * An interval may be cancelled or freed from any thread while a task on
 * another thread waits on it. The waiter's op is anchored to its loop
 * (op.c), and only that loop touches the op's timer; so a cancel does not
 * complete the op itself: it sets `cancelled` and wakes the waiting task,
 * whose op_check() then cancels the op on its own thread. `lock` guards
 * `waiter`; `refs` (the user's, plus one per waiting op) keeps the interval
 * alive until the last waiter has let go of it.
 */
struct weir_interval {
    int64_t period;
    int64_t next_tick;
    int64_t last_tick;
    weir__spin lock;
    _Atomic int cancelled;
    _Atomic int refs;
    weir_op *waiter;
};

static void interval_unref(weir_interval *iv)
{
    if (atomic_fetch_sub_explicit(&iv->refs, 1, memory_order_acq_rel) == 1)
        free(iv);
}

weir_interval *weir_interval_new(int64_t period_ns)
{
    if (period_ns <= 0) {
        errno = EINVAL;
        return NULL;
    }
    weir_interval *iv = calloc(1, sizeof(*iv));
    if (!iv)
        return NULL;
    iv->period = period_ns;
    weir__spin_init(&iv->lock);
    atomic_init(&iv->refs, 1);
    iv->last_tick = weir_time_now();
    iv->next_tick = add_sat(iv->last_tick, period_ns);
    return iv;
}

/* Ticks elapsed at `now` since the last one returned; advances the interval. */
static int64_t interval_take(weir_interval *iv, int64_t now)
{
    int64_t n = (now - iv->last_tick) / iv->period;
    if (n < 1)
        n = 1;
    /* n * period <= now - last_tick, so this cannot overflow. */
    iv->last_tick = n == 1 ? add_sat(iv->last_tick, iv->period) : iv->last_tick + n * iv->period;
    iv->next_tick = add_sat(iv->last_tick, iv->period);
    return n;
}

int weir_interval_next_start(weir_interval *iv, weir_op *op)
{
    if (!iv)
        return -EINVAL;
    op->u.ptr = NULL; /* finish reads it on every path */
    int r = weir__op_begin(op, WEIR__OP_INTERVAL, WEIR_FOREVER);
    if (r != 0)
        return r < 0 ? r : 0;
    atomic_fetch_add_explicit(&iv->refs, 1, memory_order_relaxed);
    op->u.ptr = iv; /* holds that reference until finish */
    if (atomic_load_explicit(&iv->cancelled, memory_order_acquire)) {
        weir__op_done(op, -ECANCELED);
        return 0;
    }
    /* The ticks themselves are the waiter's business (one waiter at a
     * time, on the waiter's thread); the lock covers `waiter` only. */
    int64_t now = weir_time_now();
    if (iv->next_tick <= now) {
        weir__op_done(op, interval_take(iv, now));
        return 0;
    }
    weir__spin_lock(&iv->lock);
    iv->waiter = op;
    weir__spin_unlock(&iv->lock);
    int64_t dl = weir__op_deadline(op);
    int64_t fire_at = iv->next_tick < dl ? iv->next_tick : dl;
    weir__timer_disarm(op->task->loop, &op->timer); /* see sleep_start */
    weir__timer_arm(op->task->loop, &op->timer, fire_at);
    return 0;
}

int64_t weir_interval_next(weir_interval *iv)
{
    if (weir__stackless_caller())
        return -EINVAL;
    weir_op op;
    int r = weir_interval_next_start(iv, &op);
    if (r < 0)
        return r;
    return weir_op_wait(&op);
}

void weir__interval_detach(weir_op *op)
{
    weir_interval *iv = op->u.ptr;
    if (!iv)
        return;
    weir__spin_lock(&iv->lock);
    if (iv->waiter == op)
        iv->waiter = NULL;
    weir__spin_unlock(&iv->lock);
    op->u.ptr = NULL;
    interval_unref(iv);
}

int weir__interval_cancelled(const weir_op *op)
{
    const weir_interval *iv = op->u.ptr;
    return iv && atomic_load_explicit(&((weir_interval *)iv)->cancelled, memory_order_acquire);
}

void weir_interval_cancel(weir_interval *iv)
{
    if (!iv)
        return;
    atomic_store_explicit(&iv->cancelled, 1, memory_order_release);
    weir__spin_lock(&iv->lock);
    weir_op *op = iv->waiter;
    weir_loop *cur = weir__loop_current();
    if (op && cur && __atomic_load_n(&op->task->loop, __ATOMIC_RELAXED) == cur) {
        /* On the waiter's own thread (its op is anchored here): end the wait
         * now, and release the op's hold on the interval, as the op may be
         * abandoned with its task. */
        iv->waiter = NULL;
        op->u.ptr = NULL;
        weir__spin_unlock(&iv->lock);
        weir__timer_disarm(cur, &op->timer);
        if (!(weir__op_flags(op) & WEIR__OP_DONE))
            weir__op_done(op, -ECANCELED);
        interval_unref(iv);
        return;
    }
    weir_task *t = op ? weir_task_ref(op->task) : NULL;
    weir__spin_unlock(&iv->lock);
    if (t) {
        /* Its op_check() sees `cancelled` and ends the wait, on its thread. */
        weir_task_wake(t);
        weir_task_unref(t);
    }
}

void weir_interval_free(weir_interval *iv)
{
    if (iv) {
        weir_interval_cancel(iv);
        interval_unref(iv);
    }
}

/* ---- expiry ----------------------------------------------------------------------- */
static void fire(weir_timer_node *n, void *ctx)
{
    weir_loop *l = ctx;
    if (n->pad == NODE_CALLBACK) {
        callback_fire(l, WEIR__CONTAINER_OF(n, weir_timer, node));
        return;
    }
    weir_op *op = WEIR__CONTAINER_OF(n, weir_op, timer);
    if (weir__op_flags(op) & WEIR__OP_DONE)
        return;
    int64_t now = weir_time_now();
    if (op->kind == WEIR__OP_SLEEP) {
        weir__op_done(op, op->u.due <= now ? 0 : -ETIMEDOUT);
    } else if (op->kind == WEIR__OP_INTERVAL) {
        weir_interval *iv = op->u.ptr; /* referenced by the op */
        weir__spin_lock(&iv->lock);
        if (iv->waiter == op)
            iv->waiter = NULL;
        weir__spin_unlock(&iv->lock);
        if (atomic_load_explicit(&iv->cancelled, memory_order_acquire))
            weir__op_done(op, -ECANCELED);
        else if (iv->next_tick <= now)
            weir__op_done(op, interval_take(iv, now));
        else
            weir__op_done(op, -ETIMEDOUT); /* the task deadline came first */
    } else {
        weir__op_cancel(op, WEIR__CANCEL_DEADLINE);
    }
}

size_t weir__timers_expire(weir_loop *l)
{
    if (l->wheel.count == 0)
        return 0;
    return weir__wheel_expire(&l->wheel, weir_time_now(), fire, l);
}
