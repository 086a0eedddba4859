/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mutex.c - the task mutex, usable between tasks on different loops
 * (threads). Fair like Go's sync.Mutex: barging in normal mode (no lock
 * convoy), FIFO hand-off in starvation mode (no starvation).
 *
 * State lives in one atomic word so that the uncontended lock and unlock are
 * each a single CAS and never touch the spinlock:
 *
 *     M_LOCKED     held
 *     M_QUEUED     the wait queue is not empty
 *     M_STARVING   starvation mode (implies LOCKED and QUEUED)
 *     M_WOKEN      a fiber waiter was popped and woken to compete for the
 *                  lock and has not yet taken it or queued again
 *
 * QUEUED and STARVING change only under the spinlock, together with the
 * queue. WOKEN is set only by the holder's unlock (under the spinlock) and
 * cleared only by the woken waiter. Invariant: QUEUED implies LOCKED or
 * WOKEN - somebody (the holder's unlock, or the woken waiter) will come back
 * for the queue.
 *
 * Normal mode. unlock() with waiters clears LOCKED and pops the oldest
 * waiter. A fiber waiter (weir_mutex_lock) is woken to *compete*: its op
 * completes with WEIR__MUTEX_RETRY, a code private to this file, and the
 * fiber loop in lock_fiber() then tries to take the lock; a running task
 * may have taken it first (barging: try_fast succeeds on a released lock
 * even with waiters queued), in which case the waiter queues again at the
 * FRONT, keeping its original enqueue time. While WOKEN is set, unlock()
 * wakes nobody else: one waiter at a time pays for a cross-thread wake, and
 * the lock is never held by a task that is not running - that is what
 * removes the convoy (the old strict hand-off made every acquisition under
 * cross-thread contention wait for a remote wake).
 *
 * A stackless waiter (weir_mutex_lock_start + WEIR_AWAIT) cannot compete:
 * no code of ours runs on its thread between the completion of its op and
 * the caller seeing the result, and the result must mean "you own it". So
 * when the oldest waiter is stackless, unlock() hands it the lock directly
 * (LOCKED stays set), as in starvation mode. Stackless waiters thus never
 * starve either, but each hand-off to one still costs a wake while the lock
 * is held.
 *
 * Starvation mode. Entered when the oldest waiter has waited longer than
 * weir__mutex_starve_ns: by unlock() when it pops such a waiter, or by a woken
 * fiber that lost the race and queues again. In it, unlock() hands the lock
 * to the oldest waiter without clearing LOCKED, newcomers (and trylock) do
 * not barge and do not spin, they queue at the back. It ends at a hand-off
 * whose waiter was the last one or waited less than weir__mutex_starve_ns, or
 * when cancellations empty the queue.
 *
 * trylock: in normal mode it may take a released lock even with waiters
 * queued (like lock's fast path); in starvation mode it fails while anyone
 * waits.
 *
 * Before queueing, a contended locker spins briefly on the word (only when
 * its loop has nothing else ready to run and not in starvation mode): with a
 * short critical section on another thread, the holder is usually gone
 * within a few hundred nanoseconds, which is much cheaper than parking.
 *
 * Cancellation follows sync_int.h: a waiter still queued is unlinked and
 * ends with -ECANCELED (or -ETIMEDOUT); a waiter already popped by unlock()
 * is completed by it: with 0 (it owns the lock - the caller must unlock
 * it), or, for a fiber, with RETRY, after which the fiber takes the lock if
 * it is free at once (not a suspension, so it succeeds even though
 * cancelled) and otherwise reports the cancel when it would queue again.
 *
 * Wait times are kept in the op's `arg` (the enqueue time, in ns) and
 * compared by wrapping difference, so a 32-bit uintptr_t only misjudges a
 * wait longer than 2 s (it may read as short).
 */
#include <assert.h>
#include <stdlib.h>

#include "sync/sync_int.h"

enum { M_LOCKED = 1u, M_QUEUED = 2u, M_STARVING = 4u, M_WOKEN = 8u };

/* A waiter that waited this long switches the mutex to starvation mode
 * (Go's starvationThresholdNs). A variable only so that a test of normal
 * mode can raise it: on a loaded machine a waiter may otherwise wait 1 ms
 * between two steps of the test. */
int64_t weir__mutex_starve_ns = 1 * WEIR_MSEC;

/* Spin iterations (each a CPU pause) before queueing; about 1-2 us. */
#define MUTEX_SPIN 100

/* The result of a fiber waiter's op when unlock() woke it to compete for
 * the lock rather than handing it over. Positive: never a user-visible
 * result (lock_fiber loops on it). */
#define WEIR__MUTEX_RETRY 1

struct weir_mutex {
    _Atomic unsigned state; /* M_* */
    weir__spin lock;        /* guards q and changes of M_QUEUED, M_STARVING */
    /* The loop of the last task that took the lock: a hint for
     * spin_acquire() (no point spinning on a holder that waits for our own
     * thread). */
    _Atomic(weir_loop *) owner;
    weir__waitq q;
};

static void mutex_cancel(weir_op *o);
/* Two tables with the same cancel: the table tells unlock() whether the
 * waiter can compete (a fiber in lock_fiber) or must be handed the lock. */
static const weir__op_vt mutex_vt = {.cancel = mutex_cancel};
static const weir__op_vt mutex_retry_vt = {.cancel = mutex_cancel};

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
    weir__waitq_init(&m->q);
    return m;
}

void weir_mutex_free(weir_mutex *m)
{
    if (!m)
        return;
    assert(weir__waitq_empty(&m->q) && "weir_mutex_free with waiting tasks");
    free(m);
}

/* Take the lock if it is free and not reserved for a waiter: the single
 * CAS of the uncontended case, then barging on a lock released with
 * waiters queued or one woken (normal mode only). */
static inline int try_fast(weir_mutex *m)
{
    unsigned s = 0;
    /* acquire: the critical section sees the previous holder's writes
     * (published by the release in unlock). */
    if (atomic_compare_exchange_strong_explicit(&m->state, &s, M_LOCKED, memory_order_acquire,
                                                memory_order_relaxed))
        return 1;
    while (!(s & (M_LOCKED | M_STARVING))) {
        /* acquire: as above */
        if (atomic_compare_exchange_weak_explicit(&m->state, &s, s | M_LOCKED, memory_order_acquire,
                                                  memory_order_relaxed))
            return 1;
    }
    return 0;
}

/* try_fast for the woken waiter: taking the lock also gives back WOKEN. */
static inline int try_woken(weir_mutex *m)
{
    /* relaxed: the CAS below does the ordering */
    unsigned s = atomic_load_explicit(&m->state, memory_order_relaxed);
    while (!(s & (M_LOCKED | M_STARVING))) {
        /* acquire: pairs with the releasing unlock, as in try_fast */
        if (atomic_compare_exchange_weak_explicit(&m->state, &s, (s | M_LOCKED) & ~M_WOKEN,
                                                  memory_order_acquire, memory_order_relaxed))
            return 1;
    }
    return 0;
}

/* The lock was just taken by a task of loop l (NULL outside the runtime).
 * relaxed: a hint, read by spinners only; nothing is published through it. */
static inline void set_owner(weir_mutex *m, weir_loop *l)
{
    atomic_store_explicit(&m->owner, l, memory_order_relaxed);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spin while the lock is held, in normal mode; 1 if we got it (woken: as
 * the woken waiter). Not when the holder is a task of our own loop: it
 * cannot run (and let go) while we spin - think of a stackless waiter the
 * lock was handed to, not yet run. */
static int spin_acquire(weir_mutex *m, weir_loop *l, int woken)
{
    /* relaxed: a hint (set_owner) */
    if (l && atomic_load_explicit(&m->owner, memory_order_relaxed) == l)
        return 0;
    for (int i = 0; i < MUTEX_SPIN; i++) {
        /* relaxed: only a hint; the CAS in try_fast/try_woken orders */
        unsigned s = atomic_load_explicit(&m->state, memory_order_relaxed);
        if (s & M_STARVING)
            return 0; /* hand-off only: queue */
        if (!(s & M_LOCKED) && (woken ? try_woken(m) : try_fast(m)))
            return 1;
        cpu_relax();
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
    if (!try_fast(m) && !spin_acquire(m, l, 0))
        return 0;
    set_owner(m, l);
    return 1;
}

/* Signed difference: unlock() reads the clock before taking the spinlock,
 * so a waiter queued meanwhile has an enqueue time after `now`. */
static inline int waited_long(const weir_sync_op *op, int64_t now)
{
    return (intptr_t)((uintptr_t)now - op->arg) >= (intptr_t)weir__mutex_starve_ns;
}

/* The woken waiter leaves without the lock and without queueing again
 * (cancelled, deadline passed). It must give WOKEN back, and if the lock is
 * free with waiters queued nobody else would wake them: it then takes the
 * lock and unlocks it, which wakes the next one. */
static void woken_give_up(weir_mutex *m)
{
    weir__spin_lock(&m->lock);
    /* relaxed: the CASes below order */
    unsigned s = atomic_load_explicit(&m->state, memory_order_relaxed);
    int relay;
    for (;;) {
        relay = !(s & M_LOCKED) && (s & M_QUEUED);
        unsigned ns = relay ? (s & ~M_WOKEN) | M_LOCKED : s & ~M_WOKEN;
        /* acquire: when relaying we hold the lock until our unlock, whose
         * release then orders as any holder's */
        if (atomic_compare_exchange_weak_explicit(&m->state, &s, ns, memory_order_acquire,
                                                  memory_order_relaxed))
            break;
    }
    weir__spin_unlock(&m->lock);
    if (relay)
        weir_mutex_unlock(m);
}

/* The contended path: begin the op, then take the lock or queue, deciding
 * under the spinlock and by CAS on the whole word, so that an unlock cannot
 * slip between our look at the state and our queueing. woken: we hold
 * M_WOKEN and queue again at the front; since: when the wait began. */
static int lock_slow(weir_sync_op *op, weir_mutex *m, int64_t deadline, int shielded,
                     const weir__op_vt *vt, int64_t since, int woken)
{
    int r = weir__sync_begin_ex(op, vt, m, deadline, shielded);
    if (r != 0) {
        /* 1: already complete (cancelled or past deadline) */
        if (woken)
            woken_give_up(m);
        return r < 0 ? r : 0;
    }
    op->arg = (uintptr_t)since;
    int starve = woken && waited_long(op, weir_time_now());
    weir__spin_lock(&m->lock);
    /* relaxed: the successful CASes below carry the ordering */
    unsigned s = atomic_load_explicit(&m->state, memory_order_relaxed);
    for (;;) {
        if (!(s & (M_LOCKED | M_STARVING))) {
            /* Free in normal mode: take it. acquire: pairs with the
             * releasing unlock, as in try_fast. */
            unsigned ns = (s | M_LOCKED) & ~(woken ? M_WOKEN : 0u);
            if (atomic_compare_exchange_weak_explicit(&m->state, &s, ns, memory_order_acquire,
                                                      memory_order_relaxed))
                break;
        } else {
            /* Held: queue. The CAS checks that it is still held as we set
             * QUEUED (and give back WOKEN): the holder's unlock then sees
             * QUEUED without WOKEN, takes the spinlock and finds us.
             * relaxed: no data is published; the queue is ordered by the
             * spinlock. */
            unsigned ns = s | M_QUEUED | (starve ? M_STARVING : 0u);
            if (woken)
                ns &= ~M_WOKEN;
            if (atomic_compare_exchange_weak_explicit(&m->state, &s, ns, memory_order_relaxed,
                                                      memory_order_relaxed)) {
                if (woken)
                    weir__waitq_push_front(&m->q, op);
                else
                    weir__waitq_push(&m->q, op);
                weir__spin_unlock(&m->lock);
                return 0;
            }
        }
    }
    weir__spin_unlock(&m->lock);
    set_owner(m, __atomic_load_n(&op->op.task->loop, __ATOMIC_RELAXED));
    weir__sync_done_local(op, 0);
    return 0;
}

/* The fiber form: wait, and when woken to compete, compete - take the lock
 * if it is free (spinning briefly), else queue again at the front. */
static int lock_fiber(weir_mutex *m, int64_t deadline, int shielded)
{
    if (weir__stackless_caller())
        return -EINVAL;
    if (take_now(m))
        return 0;
    weir_sync_op op;
    int64_t since = weir_time_now();
    int woken = 0;
    for (;;) {
        int r = lock_slow(&op, m, deadline, shielded, &mutex_retry_vt, since, woken);
        if (r < 0)
            return r;
        r = (int)weir_op_wait(&op.op);
        if (r != WEIR__MUTEX_RETRY)
            return r;
        weir_loop *l = weir__loop_current();
        if (try_woken(m) || spin_acquire(m, l, 1)) {
            set_owner(m, l);
            return 0;
        }
        woken = 1;
    }
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
    return lock_slow(op, m, deadline, 0, &mutex_vt, weir_time_now(), 0);
}

int weir__mutex_lock_shielded(weir_mutex *m)
{
    return lock_fiber(m, WEIR_FOREVER, 1);
}

int weir_mutex_lock(weir_mutex *m, int64_t deadline)
{
    if (!m)
        return -EINVAL;
    return lock_fiber(m, deadline, 0);
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
retry:
    for (;;) {
        if (!(s & M_LOCKED)) {
            assert(!"weir_mutex_unlock of an unlocked mutex");
            return;
        }
        if ((s & (M_QUEUED | M_STARVING)) == M_QUEUED && !(s & M_WOKEN))
            break; /* somebody to wake: under the spinlock */
        if (s & M_STARVING)
            break; /* hand-off: under the spinlock */
        /* Nobody queued, or a woken waiter will come back for the queue:
         * just release. release: as in the fast unlock. */
        if (atomic_compare_exchange_weak_explicit(&m->state, &s, s & ~M_LOCKED,
                                                  memory_order_release, memory_order_relaxed))
            return;
    }
    int64_t now = weir_time_now();
    weir__spin_lock(&m->lock);
    /* While we hold LOCKED and the spinlock the word is stable: bargers and
     * the woken waiter need LOCKED clear, everyone else takes the spinlock.
     * relaxed: the stores below order. */
    s = atomic_load_explicit(&m->state, memory_order_relaxed);
    weir_sync_op *op = NULL;
    int grant = 0;
    if ((s & M_QUEUED) && ((s & M_STARVING) || !(s & M_WOKEN))) {
        op = weir__waitq_pop(&m->q);
        unsigned more = !weir__waitq_empty(&m->q) ? M_QUEUED : 0u;
        int long_wait = waited_long(op, now);
        if ((s & M_STARVING) || long_wait || op->op.u.ptr != (const void *)&mutex_retry_vt) {
            /* Hand-off: LOCKED stays set for the new owner; starvation mode
             * holds while this waiter waited long and others remain.
             * relaxed: the owner's view of our writes is ordered by the op
             * completion (weir__op_done's release of DONE, its acquire load
             * of it). */
            grant = 1;
            unsigned ns = M_LOCKED | more | (more && long_wait ? M_STARVING : 0u);
            atomic_store_explicit(&m->state, ns, memory_order_relaxed);
        } else {
            /* Wake it to compete. release: as in the fast unlock - a
             * barger or the woken waiter acquires the lock from us. */
            atomic_store_explicit(&m->state, M_WOKEN | more, memory_order_release);
        }
    } else {
        /* The waiters we saw were cancelled meanwhile, or one is woken
         * already: plain release - but only after dropping the spinlock.
         * Once LOCKED is clear another task may lock, unlock and free the
         * mutex, so nothing may touch it after that store. Re-run the top
         * loop, which also catches a waiter that queued meanwhile. relaxed:
         * s is reloaded there. */
        weir__spin_unlock(&m->lock);
        s = atomic_load_explicit(&m->state, memory_order_relaxed);
        goto retry;
    }
    weir__spin_unlock(&m->lock);
    if (op) {
        if (grant)
            set_owner(m, __atomic_load_n(&op->op.task->loop,
                                         __ATOMIC_RELAXED)); /* before done: op may vanish then */
        weir__sync_done(op, grant ? 0 : WEIR__MUTEX_RETRY);
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
         * word under the spinlock we hold, or fails its CAS and takes it.
         * Starvation mode ends with the last waiter. */
        if (weir__waitq_empty(&m->q))
            atomic_fetch_and_explicit(&m->state, ~(M_QUEUED | M_STARVING), memory_order_relaxed);
    }
    weir__spin_unlock(&m->lock);
    if (mine)
        weir__sync_done_local(op, -ECANCELED);
    /* else: unlock() popped it and completes it: with 0 (we own the lock)
     * or, for a fiber, with WEIR__MUTEX_RETRY (lock_fiber competes). */
}
