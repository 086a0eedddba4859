/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oneshot.c - one value from one sender to one receiver.
 *
 * Lock-free: one atomic state word carries SENT, TX_CLOSED, RX_CLOSED and
 * WAITING (a receive op is parked on `waiter`). The object starts with two
 * references, one per end; send() or close_tx() gives back the sender's,
 * close_rx() the receiver's, and the second one frees it.
 *
 *   send       writes `value`, then one fetch_or of SENT|TX_CLOSED (release:
 *              publishes the value). If that found WAITING, the sender owns
 *              the parked receive and completes it.
 *   receive    reads the state (acquire); decided (sent, closed, or another
 *              receiver waiting) completes at once. Otherwise it installs
 *              its op in `waiter` (a CAS from NULL: one receiver only) and
 *              sets WAITING with one fetch_or; if that found the sender
 *              already done, it completes its own op.
 *   cancel     one fetch_and clearing WAITING: if it found WAITING set and
 *              the sender not yet done, the cancel owns the op; otherwise
 *              the sender saw WAITING first and completes it.
 *
 * So each parked receive is completed exactly once, decided by the order
 * of two read-modify-writes on the same word (sync_int.h's "whoever
 * unqueues it completes it"). A send costs one RMW plus the reference
 * drop; a receive that finds the value costs none.
 */
#include <assert.h>
#include <stdlib.h>

#include "sync/sync_int.h"

enum {
    OS_SENT = 1,      /* value stored */
    OS_TX_CLOSED = 2, /* sender gone (after sending or not) */
    OS_RX_CLOSED = 4, /* receiver gone */
    OS_WAITING = 8,   /* a receive op is parked in `waiter` */
};

struct weir_oneshot {
    _Atomic int state; /* OS_* */
    _Atomic int refs;
    intptr_t value;                  /* written once, before SENT is published */
    _Atomic(weir_sync_op *) waiter; /* the receive op parked on it, or NULL */
};

weir_oneshot *weir_oneshot_new(void)
{
    weir_oneshot *o = malloc(sizeof(*o));
    if (!o)
        return NULL;
    atomic_init(&o->state, 0);
    atomic_init(&o->refs, 2);
    o->value = 0;
    atomic_init(&o->waiter, NULL);
    return o;
}

static void unref(weir_oneshot *o)
{
    /* acq_rel: the end dropping the last reference sees the other end's
     * last use of the object before freeing it. */
    if (atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) == 1)
        free(o);
}

/* Sender side: store (or not) and mark the sender gone; completes a parked
 * receiver. Returns -EPIPE when the receiver was already gone. */
static int tx_finish(weir_oneshot *o, int send, intptr_t value)
{
    if (atomic_load_explicit(&o->state, memory_order_relaxed) & OS_TX_CLOSED) {
        assert(!"oneshot sender used twice"); /* a programming error */
        return -EINVAL;
    }
    if (send)
        o->value = value; /* published by the release below */
    int prev = atomic_fetch_or_explicit(&o->state, OS_TX_CLOSED | (send ? OS_SENT : 0),
                                        memory_order_acq_rel);
    int ok = send && !(prev & OS_RX_CLOSED);
    if (prev & OS_WAITING) {
        /* We saw WAITING before any cancel cleared it: the op is ours. */
        weir_sync_op *w = atomic_exchange_explicit(&o->waiter, NULL, memory_order_acquire);
        weir__sync_done(w, send ? 0 : -EPIPE);
    }
    unref(o); /* may free o */
    return send && !ok ? -EPIPE : 0;
}

int weir_oneshot_send(weir_oneshot *o, intptr_t value)
{
    if (!o)
        return -EINVAL;
    return tx_finish(o, 1, value);
}

void weir_oneshot_close_tx(weir_oneshot *o)
{
    if (o)
        tx_finish(o, 0, 0);
}

static void oneshot_cancel(weir_op *op)
{
    weir_sync_op *so = (weir_sync_op *)(void *)op;
    weir_oneshot *o = so->obj;
    int prev = atomic_fetch_and_explicit(&o->state, ~OS_WAITING, memory_order_acq_rel);
    if ((prev & OS_WAITING) && !(prev & OS_TX_CLOSED)) {
        atomic_store_explicit(&o->waiter, NULL, memory_order_relaxed);
        weir__sync_done(so, -ECANCELED);
    }
    /* else the sender saw WAITING first and completes the op */
}

static const weir__op_vt oneshot_vt = {oneshot_cancel};

/* Whether a receive completes without waiting, and with what. */
static int oneshot_decided(int st, int64_t *res)
{
    if (st & OS_SENT)
        *res = 0;
    else if (st & OS_TX_CLOSED)
        *res = -EPIPE;
    else if (st & OS_WAITING)
        *res = -EBUSY; /* one receiver only */
    else
        return 0;
    return 1;
}

int weir_oneshot_recv_start(weir_sync_op *op, weir_oneshot *o, int64_t deadline)
{
    if (!op || !o) {
        if (op) {
            op->op.flags = 0;
            op->op.result = -EINVAL;
        }
        return -EINVAL;
    }
    /* Decided already (sent, closed, or a second receiver): report it
     * without binding the op to the task - only a wait observes deadlines
     * and cancellation. */
    int64_t res;
    if (oneshot_decided(atomic_load_explicit(&o->state, memory_order_acquire), &res)) {
        weir__sync_ready(op, res);
        return 0;
    }
    int r = weir__sync_begin(op, &oneshot_vt, o, deadline);
    if (r != 0)
        return r < 0 ? r : 0;
    weir_sync_op *none = NULL;
    if (!atomic_compare_exchange_strong_explicit(&o->waiter, &none, op, memory_order_release,
                                                 memory_order_relaxed)) {
        weir__sync_done_local(op, -EBUSY); /* another receive is parked */
        return 0;
    }
    int prev = atomic_fetch_or_explicit(&o->state, OS_WAITING, memory_order_acq_rel);
    if (prev & OS_TX_CLOSED) {
        /* The sender finished before it could see us: complete our own op
         * (nobody else will). */
        atomic_fetch_and_explicit(&o->state, ~OS_WAITING, memory_order_relaxed);
        atomic_store_explicit(&o->waiter, NULL, memory_order_relaxed);
        weir__sync_done_local(op, (prev & OS_SENT) ? 0 : -EPIPE);
    }
    return 0;
}

int weir_oneshot_recv(weir_oneshot *o, intptr_t *value, int64_t deadline)
{
    if (weir__stackless_caller())
        return -EINVAL;
    weir_sync_op op;
    int r = weir_oneshot_recv_start(&op, o, deadline);
    if (r < 0)
        return r;
    r = (int)weir_op_wait(&op.op);
    if (r == 0 && value)
        *value = o->value; /* published by the op's completion */
    return r;
}

int weir_oneshot_try_recv(weir_oneshot *o, intptr_t *value)
{
    if (!o)
        return -EINVAL;
    int st = atomic_load_explicit(&o->state, memory_order_acquire);
    if (st & OS_SENT) {
        if (value)
            *value = o->value;
        return 0;
    }
    return st & OS_TX_CLOSED ? -EPIPE : -EAGAIN;
}

void weir_oneshot_close_rx(weir_oneshot *o)
{
    if (!o)
        return;
    /* A receive still parked would be left with a freed object. */
    assert(!atomic_load_explicit(&o->waiter, memory_order_relaxed));
    atomic_fetch_or_explicit(&o->state, OS_RX_CLOSED, memory_order_release);
    unref(o);
}

intptr_t weir_oneshot_value(const weir_oneshot *o)
{
    return o ? o->value : 0;
}
