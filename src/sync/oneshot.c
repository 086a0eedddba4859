/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oneshot.c - one value from one sender to one receiver.
 *
 * A oneshot is a spinlock, a state word and at most one waiting receive op.
 * It starts with two references, one per end; send() or close_tx() gives
 * back the sender's, close_rx() the receiver's, and the second one frees
 * it. The value is written under the lock before the waiter's completion,
 * whose release publishes it, so a receiver that saw its op done (or took
 * the lock in try_recv) reads it without further ordering.
 *
 * A send is one lock section plus, when the receiver already waits, one
 * wake; a receive that finds the value is one lock section. The waiting
 * receive follows sync_int.h's protocol: whoever unqueues the op completes
 * it.
 */
#include <assert.h>
#include <stdlib.h>

#include "sync/sync_int.h"

enum {
    OS_SENT = 1,      /* value stored */
    OS_TX_CLOSED = 2, /* sender gone (after sending or not) */
    OS_RX_CLOSED = 4, /* receiver gone */
};

struct weir_oneshot {
    weir__spin lock;
    _Atomic int refs;
    int state;            /* OS_*, under lock */
    intptr_t value;       /* written once under lock, before OS_SENT */
    weir_sync_op *waiter; /* the receive op parked on it, or NULL */
};

weir_oneshot *weir_oneshot_new(void)
{
    weir_oneshot *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    weir__spin_init(&o->lock);
    atomic_init(&o->refs, 2);
    return o;
}

static void unref(weir_oneshot *o)
{
    /* acq_rel: the end dropping the last reference sees the other end's
     * last use of the object before freeing it. */
    if (atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) == 1) {
        assert(!o->waiter);
        free(o);
    }
}

/* Sender side: store (or not) and mark the sender gone; completes a waiting
 * receiver. Returns -EPIPE when the receiver was already gone. */
static int tx_finish(weir_oneshot *o, int send, intptr_t value)
{
    weir__spin_lock(&o->lock);
    int st = o->state;
    if (st & OS_TX_CLOSED) { /* a second send/close_tx: a programming error */
        weir__spin_unlock(&o->lock);
        assert(!"oneshot sender used twice");
        return -EINVAL;
    }
    int ok = send && !(st & OS_RX_CLOSED);
    if (ok) {
        o->value = value;
        o->state |= OS_SENT;
    }
    o->state |= OS_TX_CLOSED;
    weir_sync_op *w = o->waiter;
    o->waiter = NULL;
    weir__spin_unlock(&o->lock);
    if (w)
        weir__sync_done(w, ok ? 0 : -EPIPE);
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
    weir__spin_lock(&o->lock);
    int mine = o->waiter == so;
    if (mine)
        o->waiter = NULL;
    weir__spin_unlock(&o->lock);
    if (mine) /* else the sender took it and completes it */
        weir__sync_done(so, -ECANCELED);
}

static const weir__op_vt oneshot_vt = {oneshot_cancel};

/* Whether a receive completes without waiting, and with what. Under lock. */
static int oneshot_decided(const weir_oneshot *o, int64_t *res)
{
    if (o->state & OS_SENT)
        *res = 0;
    else if (o->state & OS_TX_CLOSED)
        *res = -EPIPE;
    else if (o->waiter)
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
     * and cancellation. Otherwise begin, then look again under the lock. */
    int64_t res;
    weir__spin_lock(&o->lock);
    int decided = oneshot_decided(o, &res);
    weir__spin_unlock(&o->lock);
    if (decided) {
        weir__sync_ready(op, res);
        return 0;
    }
    int r = weir__sync_begin(op, &oneshot_vt, o, deadline);
    if (r != 0)
        return r < 0 ? r : 0;
    weir__spin_lock(&o->lock);
    if (!oneshot_decided(o, &res)) {
        o->waiter = op;
        weir__spin_unlock(&o->lock);
        return 0;
    }
    weir__spin_unlock(&o->lock);
    weir__sync_done_local(op, res);
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
    weir__spin_lock(&o->lock);
    int st = o->state;
    intptr_t v = o->value;
    weir__spin_unlock(&o->lock);
    if (st & OS_SENT) {
        if (value)
            *value = v;
        return 0;
    }
    return st & OS_TX_CLOSED ? -EPIPE : -EAGAIN;
}

void weir_oneshot_close_rx(weir_oneshot *o)
{
    if (!o)
        return;
    weir__spin_lock(&o->lock);
    /* A receive still waiting would be left with a freed object. */
    assert(!o->waiter);
    o->state |= OS_RX_CLOSED;
    weir__spin_unlock(&o->lock);
    unref(o);
}

intptr_t weir_oneshot_value(const weir_oneshot *o)
{
    return o ? o->value : 0;
}
