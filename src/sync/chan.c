/* SPDX-License-Identifier: Apache-2.0 */
/*
 * chan.c - MPMC channels (rendezvous, bounded, unbounded) and select.
 *
 * A channel is one spinlock over a ring buffer of fixed-size items and two
 * FIFO wait queues, senders and receivers (sync_int.h's protocol). Outside
 * of select's transient stale entries (below) the queues obey:
 *
 *   receivers waiting  =>  ring empty, no sender waiting
 *   senders waiting    =>  ring full (len == capacity; always for capacity 0)
 *
 * so every operation is decided by one look under the lock: a send hands
 * its item straight to the oldest waiting receiver (copying into that
 * receiver's buffer and completing it), else appends to the ring, else
 * waits; a receive takes the ring's oldest item and refills the freed slot
 * from the oldest waiting sender (completing it), or on a rendezvous
 * channel copies straight out of that sender's item, else waits. The
 * uncontended send or receive is a single lock section without allocation
 * (an unbounded channel's ring only allocates when it doubles).
 *
 * A queued op carries which queue it is on in op->arg (Q_SEND / Q_RECV, 0
 * once unqueued), written under the channel lock, so that cancellation is
 * "unlink if still queued" in O(1).
 *
 * Select. A select op (the parent) owns one part op per channel case; the
 * parent is the group: parent->arg is its state word, 0 while waiting and,
 * once decided, 1 + the index of the winning case or SEL_CANCELLED. It is
 * decided exactly once, by CAS, by whoever gets there first: a satisfier
 * that pops one of the parts (a plain send/recv, another select, close), or
 * the parent's cancel (deadline, task cancel, or a TIMER case's time). A
 * satisfier that pops a part whose group is already decided drops it (the
 * part is stale: its select is being torn down) and looks at the next
 * waiter, so a decided select never takes or gives an item. The decider
 * then unlinks every other part (one channel lock at a time, after it
 * released its own) and only then completes the parent, so the caller's
 * parts may be discarded as soon as the op is done (as wait-any in rt/io_ops.c).
 *
 * Registration follows Go's selectgo: the select locks all its channels (in
 * address order, so two selects cannot deadlock), checks the cases for one
 * that is ready *in case order* (deterministic priority, like Tokio's
 * `biased;` select - not randomised as Go does), and if none is, queues all
 * its parts before unlocking. Nobody can see the group while it is being
 * registered, so the select never has to claim its own group against a
 * racing satisfier; a counterpart it meets that belongs to another select
 * is claimed by that group's CAS.
 *
 * TIMER cases use the parent op's own deadline timer: it is armed at the
 * earlier of the deadline and the earliest TIMER case; when it fires and
 * that case's time has come, the select completes with the timer case's
 * index (a due timer case wins over a deadline that passed at the same
 * time), otherwise with -ETIMEDOUT. A TIMER case whose time has already
 * come is "ready" in the in-order check.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "sync/sync_int.h"

enum { Q_NONE = 0, Q_SEND = 1, Q_RECV = 2 };

#define SEL_CANCELLED UINTPTR_MAX

struct weir_chan {
    weir__spin lock;
    _Atomic long refs;
    size_t item_size;
    size_t cap;       /* 0 rendezvous, N bounded, WEIR_CHAN_UNBOUNDED */
    size_t head, len; /* ring: oldest item, items buffered */
    size_t slots;     /* ring size in items (== cap when bounded) */
    unsigned char *ring;
    int closed;
    weir__waitq sendq, recvq;
    unsigned char inline_ring[]; /* bounded channels: the ring lives here */
};

/* ---- helpers ----------------------------------------------------------------- */
static inline void copy_item(void *dst, const void *src, size_t n)
{
    if (n) /* item_size 0 (signal channel): buffers may be NULL */
        memcpy(dst, src, n);
}

static inline void q_push(weir__waitq *q, weir_sync_op *op, uintptr_t which)
{
    weir__waitq_push(q, op);
    op->arg = which;
}

static inline void q_remove(weir__waitq *q, weir_sync_op *op)
{
    weir__waitq_remove(q, op);
    op->arg = Q_NONE;
}

static inline weir__waitq *q_of(weir_chan *c, uintptr_t which)
{
    return which == Q_SEND ? &c->sendq : &c->recvq;
}

static inline weir_sync_op *sel_parent(struct weir__select *s)
{
    return (weir_sync_op *)(void *)s;
}

/* Decide a waiter popped by a satisfier. A plain op is always ours to
 * complete; a select part only if its group is still undecided, and the
 * CAS is the one decision (a decided group never reverts). Returns 0 for a
 * stale part, which the caller then simply drops. */
static int claim(weir_sync_op *w, int result)
{
    if (!w->sel)
        return 1;
    weir_sync_op *p = sel_parent(w->sel);
    uintptr_t expect = 0;
    /* acq_rel: exactly one decider; its later writes to the case (result)
     * are published to the select's task by the parent's completion. */
    if (!__atomic_compare_exchange_n(&p->arg, &expect, (uintptr_t)w->sel_index + 1, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return 0;
    ((weir_select_case *)p->obj)[w->sel_index].result = result;
    return 1;
}

static void select_finish(weir_sync_op *parent);

/* After the lock is released: complete a waiter popped and claimed under it. */
static void finish_waiter(weir_sync_op *w, int64_t result)
{
    if (w->sel)
        select_finish(sel_parent(w->sel));
    else
        weir__sync_done(w, result);
}

/* Unbounded channels: double the ring, unwrapping it. Under the lock (it is
 * rare and amortised); -ENOMEM leaves the channel as it was. */
static int ring_grow(weir_chan *c)
{
    size_t n = c->slots ? c->slots * 2 : 8, isz = c->item_size ? c->item_size : 1;
    if (n < c->slots || n > SIZE_MAX / isz)
        return -ENOMEM;
    unsigned char *r = malloc(n * isz);
    if (!r)
        return -ENOMEM;
    size_t first = c->slots - c->head < c->len ? c->slots - c->head : c->len;
    if (c->item_size && c->len) {
        memcpy(r, c->ring + c->head * c->item_size, first * c->item_size);
        memcpy(r + first * c->item_size, c->ring, (c->len - first) * c->item_size);
    }
    free(c->ring);
    c->ring = r;
    c->slots = n;
    c->head = 0;
    return 0;
}

static inline void ring_put(weir_chan *c, const void *item)
{
    size_t i = c->head + c->len;
    if (i >= c->slots)
        i -= c->slots;
    copy_item(c->ring + i * c->item_size, item, c->item_size);
    c->len++;
}

static inline void ring_take(weir_chan *c, void *item)
{
    copy_item(item, c->ring + c->head * c->item_size, c->item_size);
    if (++c->head == c->slots)
        c->head = 0;
    c->len--;
}

/* ---- the two decisions (under c->lock) ------------------------------------------
 * Each returns 1 with *res set when the operation took effect (or failed for
 * good), 0 when the caller has to wait. *wake is a popped, claimed waiter to
 * complete with result 0 once the lock is released. */
static int send_locked(weir_chan *c, const void *item, int *res, weir_sync_op **wake)
{
    if (c->closed) {
        *res = -EPIPE;
        return 1;
    }
    weir_sync_op *r;
    while ((r = weir__waitq_first(&c->recvq))) {
        q_remove(&c->recvq, r);
        if (!claim(r, 0))
            continue; /* stale select part */
        copy_item(r->buf, item, c->item_size);
        *wake = r;
        *res = 0;
        return 1;
    }
    if (c->len < c->cap) {
        if (c->len == c->slots) { /* unbounded only: bounded rings are cap-sized */
            int e = ring_grow(c);
            if (e < 0) {
                *res = e;
                return 1;
            }
        }
        ring_put(c, item);
        *res = 0;
        return 1;
    }
    return 0;
}

static int recv_locked(weir_chan *c, void *item, int *res, weir_sync_op **wake)
{
    weir_sync_op *s;
    if (c->len) {
        ring_take(c, item);
        /* The freed slot goes to the oldest waiting sender, keeping FIFO. */
        while ((s = weir__waitq_first(&c->sendq))) {
            q_remove(&c->sendq, s);
            if (!claim(s, 0))
                continue;
            ring_put(c, s->buf);
            *wake = s;
            break;
        }
        *res = 0;
        return 1;
    }
    /* Empty ring with a live sender waiting: a rendezvous channel. */
    while ((s = weir__waitq_first(&c->sendq))) {
        q_remove(&c->sendq, s);
        if (!claim(s, 0))
            continue;
        copy_item(item, s->buf, c->item_size);
        *wake = s;
        *res = 0;
        return 1;
    }
    if (c->closed) {
        *res = -EPIPE;
        return 1;
    }
    return 0;
}

/* ---- life cycle --------------------------------------------------------------- */
weir_chan *weir_chan_new(size_t item_size, size_t capacity)
{
    size_t inline_bytes = 0;
    if (capacity != WEIR_CHAN_UNBOUNDED) {
        if (item_size && capacity > (SIZE_MAX - sizeof(weir_chan)) / item_size) {
            errno = EINVAL;
            return NULL;
        }
        inline_bytes = capacity * item_size;
    }
    weir_chan *c = calloc(1, sizeof(*c) + inline_bytes);
    if (!c)
        return NULL;
    weir__spin_init(&c->lock);
    weir__waitq_init(&c->sendq);
    weir__waitq_init(&c->recvq);
    atomic_init(&c->refs, 1);
    c->item_size = item_size;
    c->cap = capacity;
    if (capacity != WEIR_CHAN_UNBOUNDED) {
        c->ring = c->inline_ring;
        c->slots = capacity;
    }
    return c;
}

weir_chan *weir_chan_ref(weir_chan *c)
{
    /* relaxed: taking a reference needs one already held; nothing to order */
    if (c)
        atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
    return c;
}

void weir_chan_unref(weir_chan *c)
{
    if (!c)
        return;
    /* acq_rel: the last unref sees every other holder's use of the channel
     * (their release) before it frees it. */
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
        return;
    /* Freeing a channel that ops still wait on is a programming error: those
     * ops borrow it until they are done. */
    assert(weir__waitq_empty(&c->sendq) && weir__waitq_empty(&c->recvq));
    if (c->ring != c->inline_ring)
        free(c->ring);
    free(c);
}

void weir_chan_close(weir_chan *c)
{
    if (!c)
        return;
    weir__taken list;
    weir__taken_init(&list);
    weir_sync_op *w;
    weir__spin_lock(&c->lock);
    if (c->closed) {
        weir__spin_unlock(&c->lock);
        return;
    }
    c->closed = 1;
    /* Every waiter gets -EPIPE: a waiting sender's item was never taken, and
     * receivers only wait on an empty ring. Collect them and complete them
     * after unlocking. */
    for (int k = 0; k < 2; k++) {
        weir__waitq *q = k ? &c->recvq : &c->sendq;
        while ((w = weir__waitq_first(q))) {
            q_remove(q, w);
            if (claim(w, -EPIPE))
                weir__taken_push(&list, w);
        }
    }
    weir__spin_unlock(&c->lock);
    while ((w = weir__taken_pop(&list)))
        finish_waiter(w, -EPIPE); /* w may be gone after this */
}

size_t weir_chan_len(weir_chan *c)
{
    if (!c)
        return 0;
    weir__spin_lock(&c->lock);
    size_t n = c->len;
    weir__spin_unlock(&c->lock);
    return n;
}

/* ---- send / recv ---------------------------------------------------------------- */
static void chan_cancel(weir_op *op)
{
    weir_sync_op *so = (weir_sync_op *)(void *)op;
    weir_chan *c = so->obj;
    weir__spin_lock(&c->lock);
    uintptr_t q = so->arg;
    if (q != Q_NONE)
        q_remove(q_of(c, q), so);
    weir__spin_unlock(&c->lock);
    /* Not queued: a satisfier popped it and completes it (with its result). */
    if (q != Q_NONE)
        weir__sync_done_local(so, -ECANCELED);
}

static const weir__op_vt chan_vt = {chan_cancel};

static int bad_op(weir_sync_op *op)
{
    if (op) {
        op->op.flags = 0;
        op->op.result = -EINVAL;
    }
    return -EINVAL;
}

int weir_chan_send_start(weir_sync_op *op, weir_chan *c, const void *item, int64_t deadline)
{
    if (!op || !c || (!item && c->item_size))
        return bad_op(op);
    weir_sync_op *wake = NULL;
    int res;
    /* Ready now: done without binding the op to the task (no deadline, no
     * cancellation check: only an actual wait observes those). */
    weir__spin_lock(&c->lock);
    if (send_locked(c, item, &res, &wake)) {
        weir__spin_unlock(&c->lock);
        if (wake)
            finish_waiter(wake, 0);
        weir__sync_ready(op, res);
        return 0;
    }
    weir__spin_unlock(&c->lock);
    int r = weir__sync_begin(op, &chan_vt, c, deadline);
    if (r != 0)
        return r < 0 ? r : 0;
    op->buf = (void *)item;
    op->arg = Q_NONE;
    weir__spin_lock(&c->lock);
    if (!send_locked(c, item, &res, &wake)) {
        q_push(&c->sendq, op, Q_SEND);
        weir__spin_unlock(&c->lock);
        return 0;
    }
    weir__spin_unlock(&c->lock);
    if (wake)
        finish_waiter(wake, 0);
    weir__sync_done_local(op, res);
    return 0;
}

int weir_chan_recv_start(weir_sync_op *op, weir_chan *c, void *item, int64_t deadline)
{
    if (!op || !c || (!item && c->item_size))
        return bad_op(op);
    weir_sync_op *wake = NULL;
    int res;
    weir__spin_lock(&c->lock); /* ready now: see weir_chan_send_start */
    if (recv_locked(c, item, &res, &wake)) {
        weir__spin_unlock(&c->lock);
        if (wake)
            finish_waiter(wake, 0);
        weir__sync_ready(op, res);
        return 0;
    }
    weir__spin_unlock(&c->lock);
    int r = weir__sync_begin(op, &chan_vt, c, deadline);
    if (r != 0)
        return r < 0 ? r : 0;
    op->buf = item;
    op->arg = Q_NONE;
    weir__spin_lock(&c->lock);
    if (!recv_locked(c, item, &res, &wake)) {
        q_push(&c->recvq, op, Q_RECV);
        weir__spin_unlock(&c->lock);
        return 0;
    }
    weir__spin_unlock(&c->lock);
    if (wake)
        finish_waiter(wake, 0);
    weir__sync_done_local(op, res);
    return 0;
}

/* Fiber forms. */
int weir_chan_send(weir_chan *c, const void *item, int64_t deadline)
{
    if (weir__stackless_caller())
        return -EINVAL;
    weir_sync_op so;
    int r = weir_chan_send_start(&so, c, item, deadline);
    return r < 0 ? r : (int)weir_op_wait(&so.op);
}

int weir_chan_recv(weir_chan *c, void *item, int64_t deadline)
{
    if (weir__stackless_caller())
        return -EINVAL;
    weir_sync_op so;
    int r = weir_chan_recv_start(&so, c, item, deadline);
    return r < 0 ? r : (int)weir_op_wait(&so.op);
}

int weir_chan_try_send(weir_chan *c, const void *item)
{
    if (!c || (!item && c->item_size))
        return -EINVAL;
    weir_sync_op *wake = NULL;
    int res;
    weir__spin_lock(&c->lock);
    int done = send_locked(c, item, &res, &wake);
    weir__spin_unlock(&c->lock);
    if (wake)
        finish_waiter(wake, 0);
    return done ? res : -EAGAIN;
}

int weir_chan_try_recv(weir_chan *c, void *item)
{
    if (!c || (!item && c->item_size))
        return -EINVAL;
    weir_sync_op *wake = NULL;
    int res;
    weir__spin_lock(&c->lock);
    int done = recv_locked(c, item, &res, &wake);
    weir__spin_unlock(&c->lock);
    if (wake)
        finish_waiter(wake, 0);
    return done ? res : -EAGAIN;
}

/* ---- select ---------------------------------------------------------------------
 * The parent op's fields: obj = cases, buf = parts, arg = state (atomic),
 * sel_index = ncases, pad = index of the earliest TIMER case or -1. */
static int is_chan_case(const weir_select_case *k)
{
    return k->kind == WEIR_SELECT_SEND || k->kind == WEIR_SELECT_RECV;
}

/* The decider's tail: unlink the parts still queued (stale ones may have
 * been dropped by satisfiers already), then complete the parent. */
static void select_finish(weir_sync_op *parent)
{
    weir_select_case *cases = parent->obj;
    weir_sync_op *parts = parent->buf;
    int n = parent->sel_index;
    for (int i = 0; i < n; i++) {
        if (!is_chan_case(&cases[i]))
            continue;
        weir_sync_op *p = &parts[i];
        weir_chan *c = p->obj;
        weir__spin_lock(&c->lock);
        if (p->arg != Q_NONE)
            q_remove(q_of(c, p->arg), p);
        weir__spin_unlock(&c->lock);
    }
    /* acquire: pairs with the deciding CAS (possibly on another thread). */
    uintptr_t st = __atomic_load_n(&parent->arg, __ATOMIC_ACQUIRE);
    int64_t r = st == SEL_CANCELLED ? -ECANCELED : (int64_t)(st - 1);
    weir__sync_done(parent, r);
}

/* Deadline, task cancel, or the earliest TIMER case (loop thread). */
static void select_cancel(weir_op *op)
{
    weir_sync_op *parent = (weir_sync_op *)(void *)op;
    weir_select_case *cases = parent->obj;
    int t = parent->pad;
    uintptr_t want = SEL_CANCELLED;
    if (op->cancel_reason == WEIR__CANCEL_DEADLINE && t >= 0 && weir_time_now() >= cases[t].at)
        want = (uintptr_t)t + 1;
    uintptr_t expect = 0;
    /* acq_rel: the same single decision as claim(); losing means a
     * satisfier decided and will complete the parent. */
    if (!__atomic_compare_exchange_n(&parent->arg, &expect, want, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return;
    if (want != SEL_CANCELLED)
        cases[t].result = 0;
    select_finish(parent);
}

static const weir__op_vt select_vt = {select_cancel};

static int cmp_chan(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (weir_chan *const *)a, y = (uintptr_t) * (weir_chan *const *)b;
    return x < y ? -1 : x > y;
}

/* The first case (in case order) that can complete now, taking effect, or
 * -1. All the cases' channels are locked. */
static int select_ready_locked(weir_select_case *cases, int ncases, int tidx, int *res,
                               weir_sync_op **wake)
{
    int64_t now = tidx >= 0 ? weir_time_now() : 0;
    for (int i = 0; i < ncases; i++) {
        weir_select_case *k = &cases[i];
        if (k->kind == WEIR_SELECT_SEND) {
            if (send_locked(k->chan, k->item, res, wake))
                return i;
        } else if (k->kind == WEIR_SELECT_RECV) {
            if (recv_locked(k->chan, k->item, res, wake))
                return i;
        } else if (k->at <= now) {
            *res = 0;
            return i;
        }
    }
    return -1;
}

int weir_select_start(weir_sync_op *op, weir_sync_op *parts, weir_select_case *cases, int ncases,
                      int64_t deadline)
{
    if (!op || ncases < 0 || ncases > 65536 || (ncases && (!cases || !parts)))
        return bad_op(op);
    int nchan = 0, tidx = -1;
    for (int i = 0; i < ncases; i++) {
        weir_select_case *k = &cases[i];
        if (is_chan_case(k)) {
            if (!k->chan || (!k->item && k->chan->item_size))
                return bad_op(op);
            nchan++;
        } else if (k->kind == WEIR_SELECT_TIMER) {
            if (tidx < 0 || k->at < cases[tidx].at)
                tidx = i;
        } else {
            return bad_op(op);
        }
    }
    /* The distinct channels in address order, locked together. */
    weir_chan *small[16], **locks = small;
    if (nchan > 16 && !(locks = malloc((size_t)nchan * sizeof(*locks)))) {
        op->op.flags = 0;
        op->op.result = -ENOMEM;
        return -ENOMEM;
    }
    int nl = 0;
    for (int i = 0; i < ncases; i++)
        if (is_chan_case(&cases[i]))
            locks[nl++] = cases[i].chan;
    qsort(locks, (size_t)nl, sizeof(*locks), cmp_chan);
    int nd = 0;
    for (int i = 0; i < nl; i++)
        if (nd == 0 || locks[nd - 1] != locks[i])
            locks[nd++] = locks[i];

    int won = -1, res = 0;
    weir_sync_op *wake = NULL;
    /* A case ready now is taken without binding the op to the task: only a
     * wait observes the deadline and cancellation (as send/recv). */
    for (int i = 0; i < nd; i++)
        weir__spin_lock(&locks[i]->lock);
    won = select_ready_locked(cases, ncases, tidx, &res, &wake);
    for (int i = nd - 1; i >= 0; i--)
        weir__spin_unlock(&locks[i]->lock);
    if (won >= 0) {
        if (locks != small)
            free(locks);
        if (wake)
            finish_waiter(wake, 0);
        if (res != -ENOMEM)
            cases[won].result = res;
        weir__sync_ready(op, res == -ENOMEM ? res : won);
        return 0;
    }

    int r = weir__sync_begin(op, &select_vt, NULL, deadline);
    if (r != 0) {
        if (locks != small)
            free(locks);
        return r < 0 ? r : 0;
    }
    op->obj = cases;
    op->buf = parts;
    op->sel_index = ncases;
    op->pad = tidx;
    op->arg = 0;

    for (int i = 0; i < nd; i++)
        weir__spin_lock(&locks[i]->lock);
    won = select_ready_locked(cases, ncases, tidx, &res, &wake); /* again: it may have changed */
    if (won < 0) {
        /* Nothing ready: queue every part before anyone can see them. */
        for (int i = 0; i < ncases; i++) {
            weir_select_case *k = &cases[i];
            weir_sync_op *p = &parts[i];
            p->sel = NULL;
            p->arg = Q_NONE;
            p->obj = NULL;
            if (!is_chan_case(k))
                continue;
            p->op.flags = 0;
            p->op.task = op->op.task;
            p->obj = k->chan;
            p->buf = k->item;
            p->sel = (struct weir__select *)(void *)op;
            p->sel_index = i;
            if (k->kind == WEIR_SELECT_SEND)
                q_push(&k->chan->sendq, p, Q_SEND);
            else
                q_push(&k->chan->recvq, p, Q_RECV);
        }
    }
    for (int i = nd - 1; i >= 0; i--)
        weir__spin_unlock(&locks[i]->lock);
    if (locks != small)
        free(locks);

    if (won >= 0) {
        if (wake)
            finish_waiter(wake, 0);
        if (res == -ENOMEM) {
            weir__sync_done_local(op, res);
        } else {
            cases[won].result = res;
            weir__sync_done_local(op, won);
        }
        return 0;
    }
    /* Waiting. The op's timer covers the deadline; bring it forward to the
     * earliest TIMER case when that comes first (loop thread: the wheel is
     * ours). */
    if (tidx >= 0 && cases[tidx].at < weir__op_deadline(&op->op)) {
        weir_loop *l = op->op.task->loop;
        weir__timer_disarm(l, &op->op.timer);
        weir__timer_arm(l, &op->op.timer, cases[tidx].at);
        weir__op_anchor(&op->op); /* the timer is on this loop's wheel */
    }
    return 0;
}

int weir_select(weir_select_case *cases, int ncases, int64_t deadline)
{
    if (weir__stackless_caller())
        return -EINVAL;
    if (ncases < 0 || ncases > 65536)
        return -EINVAL;
    weir_sync_op small[8], op;
    weir_sync_op *parts = ncases <= 8 ? small : calloc((size_t)ncases, sizeof(*parts));
    if (!parts)
        return -ENOMEM;
    int r = weir_select_start(&op, parts, cases, ncases, deadline);
    int64_t v = r < 0 ? r : weir_op_wait(&op.op);
    if (parts != small)
        free(parts);
    return (int)v;
}
