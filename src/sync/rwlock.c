/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rwlock.c - the task reader-writer lock: many readers or one writer,
 * FIFO among waiters, with a writer-preferring (default) or a
 * reader-preferring policy.
 *
 * One atomic word holds the state, so that uncontended locking and
 * unlocking (read or write) are each a single CAS and never touch the
 * spinlock:
 *
 *     bit 0      W_HELD   a writer holds the lock
 *     bit 1      QUEUED   the wait queue is not empty (changed only under
 *                         the spinlock, together with the queue)
 *     bits 2..   readers  the number of readers holding the lock
 *
 * Who may enter at once:
 *   writer   only when the word is 0 (no holder and nobody queued: no
 *            barging past waiters).
 *   reader   never while W_HELD; with prefer_writers also never while
 *            QUEUED - a waiting writer then stops new readers, so writers
 *            cannot starve. Without it readers enter past waiting writers,
 *            so with that policy readers wait only while a writer holds.
 *
 * Who is granted when the lock frees up (grant(), under the spinlock):
 *   prefer_writers  the queue head in order: a writer alone once the
 *                   readers are gone, or the run of consecutive readers at
 *                   the head (they stop at the next queued writer).
 *   reader-pref     every queued reader (each would have entered had it
 *                   arrived now); the head writer once no reader holds.
 * grant() runs after every change that can free the lock or unblock the
 * head: write unlock, the last read unlock while QUEUED, and the removal of
 * a cancelled waiter - so a cancelled writer that blocked readers behind it
 * lets them in.
 *
 * Cancellation follows sync_int.h; a waiter granted before its cancel
 * landed holds the lock and its wait returns 0.
 */
#include <assert.h>
#include <stdlib.h>

#include "sync/sync_int.h"

enum { RW_W_HELD = 1u, RW_QUEUED = 2u, RW_READER = 4u };
enum { MODE_READ = 0, MODE_WRITE = 1 }; /* weir_sync_op.arg */

struct weir_rwlock {
    _Atomic unsigned long state;
    weir__spin lock; /* guards q and changes of RW_QUEUED */
    int prefer_writers;
    weir__waitq q;
};

static void rw_cancel(weir_op *o);
static const weir__op_vt rw_vt = {.cancel = rw_cancel};

weir_rwlock *weir_rwlock_new(int prefer_writers)
{
    weir_rwlock *rw = aligned_alloc(64, (sizeof(*rw) + 63) & ~(size_t)63);
    if (!rw) {
        errno = ENOMEM;
        return NULL;
    }
    atomic_init(&rw->state, 0);
    weir__spin_init(&rw->lock);
    rw->prefer_writers = prefer_writers != 0;
    weir__waitq_init(&rw->q);
    return rw;
}

void weir_rwlock_free(weir_rwlock *rw)
{
    if (!rw)
        return;
    assert(weir__waitq_empty(&rw->q) && "weir_rwlock_free with waiting tasks");
    free(rw);
}

/* ---- fast paths ------------------------------------------------------------- */
static int read_blocked(const weir_rwlock *rw, unsigned long s)
{
    return (s & RW_W_HELD) || (rw->prefer_writers && (s & RW_QUEUED));
}

static int try_read_fast(weir_rwlock *rw)
{
    /* relaxed: the CAS below orders */
    unsigned long s = atomic_load_explicit(&rw->state, memory_order_relaxed);
    while (!read_blocked(rw, s)) {
        /* acquire: readers see the last writer's critical section */
        if (atomic_compare_exchange_weak_explicit(&rw->state, &s, s + RW_READER,
                                                  memory_order_acquire, memory_order_relaxed))
            return 1;
    }
    return 0;
}

static int try_write_fast(weir_rwlock *rw)
{
    unsigned long s = 0;
    /* acquire: the writer sees every earlier holder's critical section */
    return atomic_compare_exchange_strong_explicit(&rw->state, &s, RW_W_HELD, memory_order_acquire,
                                                   memory_order_relaxed);
}

int weir_rwlock_try_read(weir_rwlock *rw)
{
    if (!rw)
        return -EINVAL;
    return try_read_fast(rw) ? 0 : -EBUSY;
}

int weir_rwlock_try_write(weir_rwlock *rw)
{
    if (!rw)
        return -EINVAL;
    return try_write_fast(rw) ? 0 : -EBUSY;
}

/* ---- granting (under the spinlock) ------------------------------------------ */
/* Ops granted under the spinlock, completed after it is released. Taken
 * off the queue, so weir__waitq_linked() (which the waiter's cancel may run
 * meanwhile) already reports them as taken. Order does not matter: they all
 * hold the lock at once or there is just one. */
typedef weir__taken granted;

static void grant_op(weir_rwlock *rw, weir_sync_op *op, granted *g)
{
    weir__waitq_take(&rw->q, op, g);
}

/* Let in whoever the policy allows now; the ops granted are moved to g.
 * Also clears QUEUED when the queue is (or became) empty. */
static void grant(weir_rwlock *rw, granted *g)
{
    /* relaxed: grants below are CAS / RMW; the data is published to each
     * grantee by its op completion (release DONE / acquire). */
    unsigned long s = atomic_load_explicit(&rw->state, memory_order_relaxed);
    if (!(s & RW_W_HELD)) {
        if (!rw->prefer_writers) {
            for (weir_sync_op *op = weir__waitq_first(&rw->q), *next; op; op = next) {
                next = weir__waitq_next(&rw->q, op); /* before grant_op unlinks op */
                if (op->arg == MODE_READ) {
                    /* relaxed RMW: a reader count, see above */
                    atomic_fetch_add_explicit(&rw->state, RW_READER, memory_order_relaxed);
                    grant_op(rw, op, g);
                }
            }
        }
        weir_sync_op *op;
        while ((op = weir__waitq_first(&rw->q))) {
            if (op->arg == MODE_READ) {
                atomic_fetch_add_explicit(&rw->state, RW_READER, memory_order_relaxed);
                grant_op(rw, op, g);
                continue;
            }
            /* A writer: only once no reader holds. Fast readers may still
             * enter (reader-preferring policy), hence a CAS from "no
             * readers"; the one that got in will grant when it leaves. */
            s = atomic_load_explicit(&rw->state, memory_order_relaxed);
            while (!(s & ~(unsigned long)RW_QUEUED)) {
                /* acquire: orders the writer after the readers' release
                 * decrements, which it then publishes through its op */
                if (atomic_compare_exchange_weak_explicit(&rw->state, &s, s | RW_W_HELD,
                                                          memory_order_acquire,
                                                          memory_order_relaxed)) {
                    grant_op(rw, op, g);
                    break;
                }
            }
            break;
        }
    }
    if (weir__waitq_empty(&rw->q))
        atomic_fetch_and_explicit(&rw->state, ~(unsigned long)RW_QUEUED, memory_order_relaxed);
}

static void complete_granted(granted *g)
{
    weir_sync_op *op;
    while ((op = weir__taken_pop(g))) /* taken first: after done, op may be gone */
        weir__sync_done(op, 0);
}

/* ---- waiting ------------------------------------------------------------------ */
static int lock_slow(weir_sync_op *op, weir_rwlock *rw, int mode, int64_t deadline)
{
    int r = weir__sync_begin(op, &rw_vt, rw, deadline);
    if (r != 0)
        return r < 0 ? r : 0;
    op->arg = (uintptr_t)mode;
    weir__spin_lock(&rw->lock);
    unsigned long s = atomic_load_explicit(&rw->state, memory_order_relaxed);
    for (;;) {
        int can = mode == MODE_WRITE ? s == 0 : !read_blocked(rw, s);
        if (can) {
            unsigned long want = mode == MODE_WRITE ? RW_W_HELD : s + RW_READER;
            /* acquire: as in the fast paths */
            if (atomic_compare_exchange_weak_explicit(&rw->state, &s, want, memory_order_acquire,
                                                      memory_order_relaxed))
                break;
            continue;
        }
        if (s & RW_QUEUED) {
            /* Whoever frees the lock now must take the spinlock and grant */
            weir__waitq_push(&rw->q, op);
            weir__spin_unlock(&rw->lock);
            return 0;
        }
        /* relaxed: setting QUEUED makes the fast unlocks fail over to the
         * slow path (they CAS from states without QUEUED); if a holder left
         * meanwhile the CAS fails and we look again. */
        if (atomic_compare_exchange_weak_explicit(&rw->state, &s, s | RW_QUEUED,
                                                  memory_order_relaxed, memory_order_relaxed))
            s |= RW_QUEUED;
    }
    weir__spin_unlock(&rw->lock);
    weir__sync_done_local(op, 0);
    return 0;
}

int weir_rwlock_read_start(weir_sync_op *op, weir_rwlock *rw, int64_t deadline)
{
    if (!op)
        return -EINVAL;
    if (!rw) {
        weir__sync_ready(op, -EINVAL);
        return -EINVAL;
    }
    /* As for the mutex: a lock available at once is taken even past the
     * deadline or with a cancel pending. */
    if (try_read_fast(rw)) {
        weir__sync_ready(op, 0);
        return 0;
    }
    return lock_slow(op, rw, MODE_READ, deadline);
}

int weir_rwlock_write_start(weir_sync_op *op, weir_rwlock *rw, int64_t deadline)
{
    if (!op)
        return -EINVAL;
    if (!rw) {
        weir__sync_ready(op, -EINVAL);
        return -EINVAL;
    }
    if (try_write_fast(rw)) {
        weir__sync_ready(op, 0);
        return 0;
    }
    return lock_slow(op, rw, MODE_WRITE, deadline);
}

int weir_rwlock_read(weir_rwlock *rw, int64_t deadline)
{
    if (weir__stackless_caller())
        return -EINVAL;
    if (!rw)
        return -EINVAL;
    if (try_read_fast(rw))
        return 0;
    weir_sync_op op;
    int r = lock_slow(&op, rw, MODE_READ, deadline);
    return r < 0 ? r : (int)weir_op_wait(&op.op);
}

int weir_rwlock_write(weir_rwlock *rw, int64_t deadline)
{
    if (weir__stackless_caller())
        return -EINVAL;
    if (!rw)
        return -EINVAL;
    if (try_write_fast(rw))
        return 0;
    weir_sync_op op;
    int r = lock_slow(&op, rw, MODE_WRITE, deadline);
    return r < 0 ? r : (int)weir_op_wait(&op.op);
}

/* ---- unlocking ------------------------------------------------------------------ */
void weir_rwlock_unlock_read(weir_rwlock *rw)
{
    if (!rw)
        return;
    unsigned long s = atomic_load_explicit(&rw->state, memory_order_relaxed);
    for (;;) {
        if (s < RW_READER) {
            assert(!"weir_rwlock_unlock_read without a read lock");
            return;
        }
        if ((s & RW_QUEUED) && s / RW_READER == 1)
            break; /* the last reader out with waiters: grant under the lock */
        /* release: our reads happen before a later writer's acquire */
        if (atomic_compare_exchange_weak_explicit(&rw->state, &s, s - RW_READER,
                                                  memory_order_release, memory_order_relaxed))
            return;
    }
    granted g;
    weir__taken_init(&g);
    weir__spin_lock(&rw->lock);
    /* release: as above; the count may have moved (reader-preferring
     * readers still enter), grant() checks it afresh */
    atomic_fetch_sub_explicit(&rw->state, RW_READER, memory_order_release);
    grant(rw, &g);
    weir__spin_unlock(&rw->lock);
    complete_granted(&g);
}

void weir_rwlock_unlock_write(weir_rwlock *rw)
{
    if (!rw)
        return;
    unsigned long s = RW_W_HELD;
    /* release: publishes the critical section to the next holder's acquire */
    if (atomic_compare_exchange_strong_explicit(&rw->state, &s, 0, memory_order_release,
                                                memory_order_relaxed))
        return;
    if (!(s & RW_W_HELD)) {
        assert(!"weir_rwlock_unlock_write without the write lock");
        return;
    }
    granted g;
    weir__taken_init(&g);
    weir__spin_lock(&rw->lock);
    /* release: as above (for readers let in by a later fast path) */
    atomic_fetch_and_explicit(&rw->state, ~(unsigned long)RW_W_HELD, memory_order_release);
    grant(rw, &g);
    weir__spin_unlock(&rw->lock);
    complete_granted(&g);
}

/* Runs on the waiter's loop thread (weir__op_vt contract). */
static void rw_cancel(weir_op *o)
{
    weir_sync_op *op = (weir_sync_op *)(void *)o;
    weir_rwlock *rw = op->obj;
    granted g;
    weir__taken_init(&g);
    weir__spin_lock(&rw->lock);
    int mine = weir__waitq_linked(&rw->q, op);
    if (mine) {
        weir__waitq_remove(&rw->q, op);
        /* A writer at the head may have held back readers (or, gone, it may
         * leave a writer at the head that can go now): grant afresh. Also
         * clears QUEUED when the queue emptied. */
        grant(rw, &g);
    }
    weir__spin_unlock(&rw->lock);
    if (mine)
        weir__sync_done_local(op, -ECANCELED);
    complete_granted(&g);
}
