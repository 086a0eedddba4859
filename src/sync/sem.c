/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sem.c - the counting semaphore for tasks: FIFO, all-or-nothing requests,
 * no overtaking.
 *
 * acquire(n) takes n permits at once or waits; it never holds a partial
 * amount, so a waiter that is cancelled or times out has nothing to give
 * back. Waiters are served strictly in order: while a large request waits
 * at the head, smaller ones behind it (and new arrivals) wait too, even if
 * enough permits for them are free - otherwise a stream of small requests
 * could starve a large one forever. release(n) then grants as many waiters
 * from the head as the permits cover, stopping at the first that does not
 * fit.
 *
 * One atomic word holds (permits << 1) | QUEUED, where QUEUED mirrors "the
 * wait queue is not empty" and changes only under the spinlock, with the
 * queue. Uncontended acquire and release are one CAS each; with waiters
 * both go through the spinlock, which is where granting happens.
 */
#include <assert.h>
#include <limits.h>
#include <stdlib.h>

#include "sync/sync_int.h"

#define S_QUEUED 1L
#define S_ONE    2L
/* Permits fit in the word beside the flag. */
#define SEM_MAX (LONG_MAX / S_ONE)

struct weir_sem {
    _Atomic long state; /* permits * S_ONE | S_QUEUED */
    weir__spin lock;    /* guards q and changes of S_QUEUED */
    weir__waitq q;      /* waiters; op->arg = permits wanted */
};

static void sem_cancel(weir_op *o);
static const weir__op_vt sem_vt = {.cancel = sem_cancel};

weir_sem *weir_sem_new(long permits)
{
    if (permits < 0 || permits > SEM_MAX) {
        errno = EINVAL;
        return NULL;
    }
    weir_sem *s = aligned_alloc(64, (sizeof(*s) + 63) & ~(size_t)63);
    if (!s) {
        errno = ENOMEM;
        return NULL;
    }
    atomic_init(&s->state, permits * S_ONE);
    weir__spin_init(&s->lock);
    weir__waitq_init(&s->q);
    return s;
}

void weir_sem_free(weir_sem *s)
{
    if (!s)
        return;
    assert(weir__waitq_empty(&s->q) && "weir_sem_free with waiting tasks");
    free(s);
}

long weir_sem_available(weir_sem *s)
{
    /* relaxed: a snapshot for information */
    return s ? atomic_load_explicit(&s->state, memory_order_relaxed) / S_ONE : 0;
}

/* Take n permits if nobody waits and enough are free. */
static int try_fast(weir_sem *s, long n)
{
    long v = atomic_load_explicit(&s->state, memory_order_relaxed);
    while (!(v & S_QUEUED) && v / S_ONE >= n) {
        /* acquire: the taker sees what the releaser wrote before release */
        if (atomic_compare_exchange_weak_explicit(&s->state, &v, v - n * S_ONE,
                                                  memory_order_acquire, memory_order_relaxed))
            return 1;
    }
    return 0;
}

int weir_sem_try_acquire(weir_sem *s, long n)
{
    if (!s || n <= 0)
        return -EINVAL;
    return try_fast(s, n) ? 0 : -EAGAIN;
}

/* Under the spinlock: grant waiters from the head while the permits cover
 * them; the granted ops are taken onto *done (off the queue, so
 * weir__waitq_linked() reports them taken) for completion after the unlock. */
static void grant(weir_sem *s, weir__taken *done)
{
    /* Without QUEUED the queue is empty and the fast paths own the word;
     * with it they keep off, so the word is stable while we hold the
     * spinlock and a plain store may rewrite it. Grantees see the data
     * through their op completion; the acquire here and the release store
     * below carry the releasers' writes on to later fast-path takers of
     * the permits left over (a plain store ends a release sequence). */
    long v = atomic_load_explicit(&s->state, memory_order_acquire);
    if (!(v & S_QUEUED))
        return;
    long avail = v / S_ONE;
    weir_sync_op *op;
    while ((op = weir__waitq_first(&s->q)) && (long)op->arg <= avail) {
        avail -= (long)op->arg;
        weir__waitq_take(&s->q, op, done);
    }
    atomic_store_explicit(&s->state, avail * S_ONE | (weir__waitq_empty(&s->q) ? 0 : S_QUEUED),
                          memory_order_release);
}

static void complete_granted(weir__taken *done)
{
    weir_sync_op *op;
    while ((op = weir__taken_pop(done))) /* taken first: after done, op may be gone */
        weir__sync_done(op, 0);
}

static int acquire_slow(weir_sync_op *op, weir_sem *s, long n, int64_t deadline)
{
    int r = weir__sync_begin(op, &sem_vt, s, deadline);
    if (r != 0)
        return r < 0 ? r : 0;
    op->arg = (uintptr_t)n;
    weir__spin_lock(&s->lock);
    long v = atomic_load_explicit(&s->state, memory_order_relaxed);
    for (;;) {
        if (!(v & S_QUEUED) && v / S_ONE >= n) {
            /* acquire: as in try_fast */
            if (atomic_compare_exchange_weak_explicit(&s->state, &v, v - n * S_ONE,
                                                      memory_order_acquire, memory_order_relaxed))
                break;
        } else if (v & S_QUEUED) {
            weir__waitq_push(&s->q, op);
            weir__spin_unlock(&s->lock);
            return 0;
        } else if (atomic_compare_exchange_weak_explicit(
                       &s->state, &v, v | S_QUEUED, memory_order_relaxed, memory_order_relaxed)) {
            /* relaxed: from here fast releases fail over to the spinlock
             * and grant() sees us; a release that slipped in before made
             * the CAS fail and we look again. */
            v |= S_QUEUED;
        }
    }
    weir__spin_unlock(&s->lock);
    weir__sync_done_local(op, 0);
    return 0;
}

int weir_sem_acquire_start(weir_sync_op *op, weir_sem *s, long n, int64_t deadline)
{
    if (!op)
        return -EINVAL;
    if (!s || n <= 0 || n > SEM_MAX) {
        weir__sync_ready(op, -EINVAL);
        return -EINVAL;
    }
    /* Permits free at once are taken even past the deadline or with a
     * cancel pending, as for the mutex. */
    if (try_fast(s, n)) {
        weir__sync_ready(op, 0);
        return 0;
    }
    return acquire_slow(op, s, n, deadline);
}

int weir_sem_acquire(weir_sem *s, long n, int64_t deadline)
{
    if (weir__stackless_caller())
        return -EINVAL;
    if (!s || n <= 0 || n > SEM_MAX)
        return -EINVAL;
    if (try_fast(s, n))
        return 0;
    weir_sync_op op;
    int r = acquire_slow(&op, s, n, deadline);
    return r < 0 ? r : (int)weir_op_wait(&op.op);
}

void weir_sem_release(weir_sem *s, long n)
{
    /* A programming error, like unlocking an unlocked mutex: caught in
     * debug builds, ignored otherwise (void API, nothing to report to). */
    if (!s || n <= 0 || n > SEM_MAX) {
        assert(n > 0 && n <= SEM_MAX && "weir_sem_release of a bad permit count");
        return;
    }
    long v = atomic_load_explicit(&s->state, memory_order_relaxed);
    assert(v / S_ONE <= SEM_MAX - n && "weir_sem_release overflows the permit count");
    while (!(v & S_QUEUED)) {
        /* release: pairs with the next taker's acquire */
        if (atomic_compare_exchange_weak_explicit(&s->state, &v, v + n * S_ONE,
                                                  memory_order_release, memory_order_relaxed))
            return;
    }
    weir__spin_lock(&s->lock);
    /* release: for takers that later use the fast path on these permits */
    atomic_fetch_add_explicit(&s->state, n * S_ONE, memory_order_release);
    weir__taken g;
    weir__taken_init(&g);
    grant(s, &g);
    weir__spin_unlock(&s->lock);
    complete_granted(&g);
}

/* Runs on the waiter's loop thread (weir__op_vt contract). */
static void sem_cancel(weir_op *o)
{
    weir_sync_op *op = (weir_sync_op *)(void *)o;
    weir_sem *s = op->obj;
    weir__taken g;
    weir__taken_init(&g);
    weir__spin_lock(&s->lock);
    int mine = weir__waitq_linked(&s->q, op);
    if (mine) {
        /* Nothing to give back (requests are all-or-nothing), but a large
         * request leaving the head may let smaller ones behind it in. */
        weir__waitq_remove(&s->q, op);
        grant(s, &g);
    }
    weir__spin_unlock(&s->lock);
    if (mine)
        weir__sync_done_local(op, -ECANCELED);
    complete_granted(&g);
}
