/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mutex.c - the task mutex: FIFO hand-off, no barging, usable between tasks
 * on different loops (threads).
 *
 * State lives in one atomic word so that the uncontended lock and unlock are
 * each a single CAS and never touch the spinlock:
 *
 *     0                  unlocked, nobody waits
 *     LOCKED             held, nobody waits
 *     LOCKED | QUEUED    held, the wait queue is not empty
 *
 * QUEUED mirrors "the wait queue is not empty" and only changes under the
 * spinlock, together with the queue. Unlocked-with-waiters never exists:
 * unlock() with waiters pops the oldest one and hands it the lock without
 * clearing LOCKED, so the fast CAS 0 -> LOCKED cannot succeed while anyone
 * waits. That is the no-barging guarantee (and why trylock can never
 * overtake a waiter): a task re-locking in a loop queues behind the waiter
 * it just handed the lock to.
 *
 * Before queueing, a contended locker spins briefly on the word (only while
 * nobody is queued, so it never overtakes a waiter, and only when its loop
 * has nothing else ready to run): with a short critical section on another
 * thread, the holder is usually gone within a few hundred nanoseconds, which
 * is much cheaper than parking the task and having the unlocker wake it
 * across threads.
 *
 * Cancellation follows sync_int.h: a waiter still queued is unlinked and
 * ends with -ECANCELED (or -ETIMEDOUT); a waiter already popped by unlock()
 * owns the lock and its wait returns 0 - the caller must unlock it.
 */
#include <assert.h>
#include <stdlib.h>

#include "sync/sync_int.h"

enum { M_LOCKED = 1u, M_QUEUED = 2u };

/* Spin iterations (each a CPU pause) before queueing; about 1-2 us. */
#define MUTEX_SPIN 100

struct weir_mutex {
    _Atomic unsigned state; /* M_LOCKED | M_QUEUED */
    weir__spin lock;        /* guards q and changes of M_QUEUED */
    /* The loop of the last task given the lock: a hint for spin_acquire()
     * (no point spinning on a holder that waits for our own thread). */
    _Atomic(weir_loop *) owner;
    weir__waitq q;
};

static void mutex_cancel(weir_op *o);
static const weir__op_vt mutex_vt = {.cancel = mutex_cancel};

weir_mutex *weir_mutex_new(void)
{
    weir_mutex *m = aligned_alloc(64, (sizeof(*m) + 63) & ~(size_t)63);
    if (!m) {
        errno = ENOMEM;
        return NULL;
    }
    atomic_init(&m->state, 0);
    atomic_init(&m->owner, NULL);
    weir__spin_init(&m->lock);
    m->q = (weir__waitq){0};
    return m;
}

void weir_mutex_free(weir_mutex *m)
{
    if (!m)
        return;
    assert(m->q.head == NULL && "weir_mutex_free with waiting tasks");
    free(m);
}

static inline int try_fast(weir_mutex *m)
{
    unsigned s = 0;
    /* acquire: the critical section sees the previous holder's writes
     * (published by the release in unlock). */
    return atomic_compare_exchange_strong_explicit(&m->state, &s, M_LOCKED, memory_order_acquire,
                                                   memory_order_relaxed);
}

/* The lock was just taken by a task of loop l (NULL outside the runtime).
 * relaxed: a hint, read by spinners only; nothing is published through it. */
static inline void set_owner(weir_mutex *m, weir_loop *l)
{
    atomic_store_explicit(&m->owner, l, memory_order_relaxed);
}

/* Spin while the lock is held by someone and nobody queues; 1 if we got it.
 * Not when the holder is a task of our own loop: it cannot run (and let go)
 * while we spin - think of a waiter the lock was handed to, not yet run. */
static int spin_acquire(weir_mutex *m, weir_loop *l)
{
    if (l && atomic_load_explicit(&m->owner, memory_order_relaxed) == l)
        return 0;
    for (int i = 0; i < MUTEX_SPIN; i++) {
        /* relaxed: only a hint; the CAS in try_fast does the ordering */
        unsigned s = atomic_load_explicit(&m->state, memory_order_relaxed);
        if (s == 0 && try_fast(m))
            return 1;
        if (s & M_QUEUED)
            return 0; /* others wait already: queue behind them */
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    }
    return 0;
}

int weir_mutex_trylock(weir_mutex *m)
{
    if (!m)
        return -EINVAL;
    if (!try_fast(m))
        return -EBUSY;
    set_owner(m, weir__loop_current());
    return 0;
}

/* try_fast, then spin_acquire; records the owner when it got the lock. */
static int take_now(weir_mutex *m)
{
    weir_loop *l = weir__loop_current();
    if (!try_fast(m) && !spin_acquire(m, l))
        return 0;
    set_owner(m, l);
    return 1;
}

/* The contended path: begin the op, then take the lock or queue, deciding
 * under the spinlock so that an unlock cannot slip between our look at the
 * state and our setting M_QUEUED. */
static int lock_slow(weir_sync_op *op, weir_mutex *m, int64_t deadline, int shielded)
{
    int r = weir__sync_begin_ex(op, &mutex_vt, m, deadline, shielded);
    if (r != 0)
        return r < 0 ? r : 0; /* 1: already complete (cancelled or past deadline) */
    weir__spin_lock(&m->lock);
    /* relaxed: the successful CASes below carry the ordering */
    unsigned s = atomic_load_explicit(&m->state, memory_order_relaxed);
    for (;;) {
        if (s == 0) {
            /* acquire: pairs with the releasing unlock, as in try_fast */
            if (atomic_compare_exchange_weak_explicit(&m->state, &s, M_LOCKED, memory_order_acquire,
                                                      memory_order_relaxed))
                break;
        } else if (s & M_QUEUED) {
            /* Stable while we hold the spinlock: unlock cannot clear LOCKED
             * while QUEUED is set, and only spinlock holders clear QUEUED. */
            weir__waitq_push(&m->q, op);
            weir__spin_unlock(&m->lock);
            return 0;
        } else {
            /* relaxed: the holder's fast unlock must now fail (it CASes
             * from exactly LOCKED); it takes the spinlock and sees us. */
            if (atomic_compare_exchange_weak_explicit(&m->state, &s, M_LOCKED | M_QUEUED,
                                                      memory_order_relaxed, memory_order_relaxed))
                s = M_LOCKED | M_QUEUED;
        }
    }
    weir__spin_unlock(&m->lock);
    set_owner(m, op->op.task->loop);
    weir__sync_done_local(op, 0);
    return 0;
}

int weir_mutex_lock_start(weir_sync_op *op, weir_mutex *m, int64_t deadline)
{
    if (!op)
        return -EINVAL;
    if (!m) {
        weir__sync_ready(op, -EINVAL);
        return -EINVAL;
    }
    /* Taking a free lock is not a suspension: like pthread_mutex_timedlock
     * it never fails with a timeout, nor with a pending cancel, when the
     * lock can be taken at once (so cleanup code of a cancelled task can
     * still lock). */
    if (take_now(m)) {
        weir__sync_ready(op, 0);
        return 0;
    }
    return lock_slow(op, m, deadline, 0);
}

int weir__mutex_lock_shielded(weir_mutex *m)
{
    if (take_now(m))
        return 0;
    weir_sync_op op;
    int r = lock_slow(&op, m, WEIR_FOREVER, 1);
    return r < 0 ? r : (int)weir_op_wait(&op.op);
}

int weir_mutex_lock(weir_mutex *m, int64_t deadline)
{
    if (!m)
        return -EINVAL;
    if (take_now(m))
        return 0;
    weir_sync_op op;
    int r = lock_slow(&op, m, deadline, 0);
    return r < 0 ? r : (int)weir_op_wait(&op.op);
}

void weir_mutex_unlock(weir_mutex *m)
{
    if (!m)
        return;
    unsigned s = M_LOCKED;
    /* release: publishes the critical section to the next locker's acquire */
    if (atomic_compare_exchange_strong_explicit(&m->state, &s, 0, memory_order_release,
                                                memory_order_relaxed))
        return;
    if (!(s & M_LOCKED)) {
        assert(!"weir_mutex_unlock of an unlocked mutex");
        return;
    }
    weir__spin_lock(&m->lock);
    weir_sync_op *op = weir__waitq_pop(&m->q);
    if (!op) {
        /* The waiters we saw were cancelled meanwhile (they cleared QUEUED);
         * release: as in the fast unlock. */
        atomic_store_explicit(&m->state, 0, memory_order_release);
    } else if (!m->q.head) {
        /* Hand-off: LOCKED stays set for the new owner. relaxed: the
         * owner's view of our writes is ordered by the op completion
         * (weir__op_done's release of DONE, its acquire load of it). */
        atomic_store_explicit(&m->state, M_LOCKED, memory_order_relaxed);
    }
    weir__spin_unlock(&m->lock);
    if (op) {
        set_owner(m, op->op.task->loop); /* before done: op may vanish then */
        weir__sync_done(op, 0);
    }
}

/* Runs on the waiter's loop thread (weir__op_vt contract). */
static void mutex_cancel(weir_op *o)
{
    weir_sync_op *op = (weir_sync_op *)(void *)o;
    weir_mutex *m = op->obj;
    weir__spin_lock(&m->lock);
    int mine = weir__waitq_linked(&m->q, op);
    if (mine) {
        weir__waitq_remove(&m->q, op);
        /* relaxed: no data is published; the holder's unlock reads the
         * word under the spinlock we hold, or fails its CAS and takes it. */
        if (!m->q.head)
            atomic_fetch_and_explicit(&m->state, ~M_QUEUED, memory_order_relaxed);
    }
    weir__spin_unlock(&m->lock);
    if (mine)
        weir__sync_done_local(op, -ECANCELED);
    /* else: unlock() popped it and completes it with 0 - we own the lock. */
}
