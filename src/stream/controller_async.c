/* SPDX-License-Identifier: Apache-2.0 */
/*
 * controller_async.c - the async execution controller on a keyed subtask
 * (controller.h): async_exec.h's rules, records copied while they wait,
 * and read completions brought back to the subtask's thread.
 *
 * A keyed head whose state backend has asynchronous reads (get_async)
 * gets this controller. Each record it admits is copied (the record, its
 * key, the input it came on) and handed to the rules; when they start it,
 * process() runs in the copy's context. A read through weir__ctl_get that
 * the backend cannot answer at once leaves the record waiting: its
 * continuation runs later, in the same context, and the record finishes
 * when a continuation returns without reading again.
 *
 * Completions may come from any thread (a backend's I/O threads, the
 * blocking pool). Each carries a copy of its value into the controller's
 * inbox (a channel) and, unless one is on its way, posts one IT_CALL to
 * the subtask's mailbox; the subtask runs the inbox when that item comes
 * up, or at once when it waits for a record to finish (a watermark, a
 * barrier, the end of input, the in-flight cap). A completion after the
 * controller was freed (the run ended first) only frees itself: each read
 * in flight, and the posted mail, holds a reference to the controller's
 * shell (its lock, its closed flag), which outlives the run.
 *
 * Deadline-aware ordering (WEIR_READS_DEADLINE_ORDER, without
 * coalescing): the answers that are in the inbox together are taken out
 * at once (up to ORDER_MAX) and resumed lowest order key first, equal
 * keys in order of arrival. Every one belongs to a distinct key (the key
 * gate) and the watermark rules count finished records, not their order,
 * so the reordering cannot move a record across a watermark.
 *
 * Memory per record in flight: one allocation of sizeof(held) (112 bytes
 * on x86-64) plus its key and record bytes; a read in flight adds one of
 * sizeof(wait) (80), which holds an answered value of up to 24 bytes (a
 * larger one is copied beside it). No stack: a record waiting is data.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "state/async_exec.h"
#include "stream/controller.h"
#include "stream/stream_int.h"
#include "weir/sync.h"

typedef struct actl actl;

/* A record held: its copy and its context. */
typedef struct held {
    weir__aec_rec a; /* first: the rules' view */
    weir__rctx rc;
    weir_rec rec;
    int side;
    int reads;       /* in flight */
    uint8_t bytes[]; /* key, then record */
} held;

/* One read in flight. */
typedef struct wait {
    actl *c;
    held *h;
    weir__cont_fn cont;
    void *arg;
    int64_t order; /* weir_ctx_read_order's when it was issued */
    int err;
    size_t vlen;
    uint8_t *val; /* the answer's copy: small, or allocated */
    _Alignas(8) uint8_t small[24];
} wait;

/* Reads gathered for one get_batch at most. */
#define BATCH_MAX 128
/* Answers ordered together at most (deadline-aware ordering). */
#define ORDER_MAX 256

struct actl {
    weir__controller base;
    subtask *st;
    weir__aec *aec;
    weir_chan *inbox;     /* wait *, answered */
    held *cur;            /* the record running now, NULL between records */
    weir__mail mail;      /* "the inbox has answers" */
    pthread_mutex_t lock; /* closed and posted */
    int closed, posted;
    int lost; /* an answer could not be queued (out of memory) */
    _Atomic long refs;
    /* Reads gathered for the backend's get_batch (NULL: it has none). */
    weir_state_read *batch;
    size_t nbatch;
    int order; /* deadline-aware ordering: answers ready together resume lowest order first */
};

static void unref(actl *c)
{
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_mutex_destroy(&c->lock);
    weir_chan_unref(c->inbox);
    weir__free(c);
}

static void wait_free(wait *w)
{
    actl *c = w->c;
    if (w->val != w->small)
        weir__free(w->val);
    weir__free(w);
    unref(c);
}

/* ---- running records --------------------------------------------------------------------- */
/* Run fn in h's context: the operator sees h's key, time and input. */
static void enter(actl *c, held *h, weir__rctx **prev_rc, int *prev_side)
{
    weir_ctx *ctx = &c->st->ctx[0];
    *prev_rc = ctx->rc;
    *prev_side = ctx->side;
    ctx->rc = &h->rc;
    ctx->side = h->side;
    c->cur = h;
}

static void leave(actl *c, weir__rctx *prev_rc, int prev_side)
{
    weir_ctx *ctx = &c->st->ctx[0];
    ctx->rc = prev_rc;
    ctx->side = prev_side;
    c->cur = NULL;
}

static int run_rec(void *arg, weir__aec_rec *a)
{
    actl *c = arg;
    held *h = (held *)a;
    weir__rctx *prc;
    int pside;
    enter(c, h, &prc, &pside);
    weir_ctx *ctx = &c->st->ctx[0];
    ctx->read_order = 0;
    int e = ctx->op->def.process(ctx, ctx->state, &h->rec);
    leave(c, prc, pside);
    if (e < 0)
        return weir__op_error(ctx, e, "process");
    return h->reads ? 1 : 0;
}

static int release_wm(void *arg, int64_t wm)
{
    actl *c = arg;
    return weir__stream_release_wm(c->st, wm);
}

/* A record leaves. A read of it may still be in flight (it failed, or
 * the run ended): that read's answer never runs - no answer runs once
 * the rules have an error, and none after ctl_free - so it does not
 * touch the record. */
static void dispose(void *arg, weir__aec_rec *a)
{
    (void)arg;
    weir__free(a);
}

static const weir__aec_hooks hooks = {run_rec, release_wm, dispose};

/* An answered read: its continuation, in its record's context. */
static int answer(actl *c, wait *w)
{
    held *h = w->h;
    weir_ctx *ctx = &c->st->ctx[0];
    weir__rctx *prc;
    int pside;
    h->reads--;
    enter(c, h, &prc, &pside);
    ctx->read_kl = 0; /* the key it read is long gone from keybuf */
    ctx->read_order = w->order;
    int e = w->cont(ctx, ctx->state, &h->rec, w->err,
                    w->err   ? NULL
                    : w->val ? w->val
                             : w->small,
                    w->err ? 0 : w->vlen, w->arg);
    leave(c, prc, pside);
    wait_free(w);
    if (e < 0)
        e = weir__op_error(ctx, e, "process");
    if (e < 0 || h->reads == 0)
        return weir__aec_finish(c->aec, &h->a, e);
    return 0;
}

static void on_answer(void *arg, int err, const void *val, size_t vlen);

/* An answer was lost (on_answer): the job fails. 0 while none was. */
static int check_lost(actl *c)
{
    pthread_mutex_lock(&c->lock);
    int lost = c->lost;
    pthread_mutex_unlock(&c->lock);
    if (!lost)
        return 0;
    weir__stream_fail(c->st->r->j, -ENOMEM,
                      "\"%s\" subtask %d: the answer of a state read was lost: out of memory",
                      c->st->ops[0]->name, c->st->index);
    return -ENOMEM;
}

/* The reads gathered go to the backend in one get_batch (read
 * coalescing): each record's key is a distinct one (the key gate), and
 * whatever issued them has nothing else to do but wait. */
static void flush_batch(actl *c)
{
    size_t n = c->nbatch;
    if (!n)
        return;
    c->nbatch = 0;
    weir_state_backend *b = c->st->backend;
    int e = b->ops->get_batch(b, c->batch, n, on_answer);
    /* The waits are on_answer's now (unless none started): only the keys,
     * which the backend let go of, are touched. */
    for (size_t i = 0; i < n; i++) {
        weir__free((void *)c->batch[i].key);
        if (e < 0)
            on_answer(c->batch[i].arg, e, NULL, 0);
    }
}

/* Run the answer first and, ordering, every other one in the inbox now:
 * by order key, equal keys as they came (an insertion sort: the runs
 * are short, and it is stable). 0 or the first error (the answers not
 * run then are dropped: the controller has failed, and no answer runs
 * after a failure). */
static int answer_ready(actl *c, wait *first)
{
    if (!c->order)
        return answer(c, first);
    wait *v[ORDER_MAX];
    size_t n = 0;
    v[n++] = first;
    while (n < ORDER_MAX && weir_chan_try_recv(c->inbox, &v[n]) == 0)
        n++;
    for (size_t i = 1; i < n; i++) {
        wait *x = v[i];
        size_t j = i;
        for (; j > 0 && v[j - 1]->order > x->order; j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
    int e = 0;
    for (size_t i = 0; i < n; i++) {
        if (e)
            wait_free(v[i]);
        else
            e = answer(c, v[i]);
    }
    return e;
}

/* Wait for one answer and run it (and, ordering, those ready with it). */
static int answer_one(actl *c)
{
    if (weir__aec_waiting(c->aec) == 0) {
        weir__stream_fail(c->st->r->j, -EDEADLK,
                          "\"%s\" subtask %d: records held with no read in flight",
                          c->st->ops[0]->name, c->st->index);
        return -EDEADLK;
    }
    flush_batch(c); /* what waits to be asked, before waiting for it */
    wait *w;
    int e = weir_chan_recv(c->inbox, &w, WEIR_FOREVER);
    if (e == -EPIPE) /* closed: an answer was lost */
        return check_lost(c) ? -ENOMEM : e;
    return e < 0 ? e : answer_ready(c, w);
}

static int run_inbox(subtask *st, weir__mail *m)
{
    (void)st;
    actl *c = (actl *)((char *)m - offsetof(actl, mail));
    pthread_mutex_lock(&c->lock);
    c->posted = 0;
    pthread_mutex_unlock(&c->lock);
    int e = weir__aec_error(c->aec);
    wait *w;
    while (!e && weir_chan_try_recv(c->inbox, &w) == 0)
        e = answer_ready(c, w);
    if (!e)
        e = check_lost(c);
    if (!e)
        flush_batch(c); /* the reads the answers' records issued next */
    unref(c);
    return e;
}

static void drop_inbox(weir__mail *m)
{
    unref((actl *)((char *)m - offsetof(actl, mail)));
}

/* The backend's answer, from any thread. */
static void on_answer(void *arg, int err, const void *val, size_t vlen)
{
    wait *w = arg;
    actl *c = w->c;
    w->err = err;
    if (!err && vlen) {
        if ((w->val = vlen <= sizeof(w->small) ? w->small : weir__malloc(vlen)))
            memcpy(w->val, val, vlen);
        else
            w->err = -ENOMEM;
    }
    w->vlen = vlen;
    pthread_mutex_lock(&c->lock);
    if (c->closed) {
        pthread_mutex_unlock(&c->lock);
        wait_free(w); /* the run is over: nothing waits for it */
        return;
    }
    if (weir_chan_try_send(c->inbox, &w) < 0) {
        /* No memory to queue it: its record would wait forever. The
         * subtask fails instead: a closed inbox ends its waits, and the
         * mail below wakes it if it waits for input. */
        c->lost = 1;
        weir_chan_close(c->inbox);
        wait_free(w);
    }
    if (!c->posted) {
        atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
        if (weir__subtask_post(c->st, (item){.kind = IT_CALL, .mail = &c->mail}) == 0)
            c->posted = 1;
        else
            atomic_fetch_sub_explicit(&c->refs, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&c->lock);
}

static const weir__controller_ops async_ops;

int weir__ctl_get(weir_ctx *ctx, const weir_rec *in, int kg, const void *key, size_t klen,
                  weir__cont_fn cont, void *arg)
{
    subtask *st = ctx->st;
    actl *c = st->ctl && st->ctl->ops == &async_ops ? (actl *)st->ctl : NULL;
    const void *v = NULL;
    size_t vl = 0;
    int e;
    /* Only in the record's own context: a record it runs inside itself
     * (weir_ctx_process) has another key and bytes, which the answer's
     * continuation would not get back - it reads at once. */
    if (c && c->cur && ctx == &st->ctx[0] && ctx->rc == &c->cur->rc) {
        if (c->batch && ctx->backend->ops->get_now) {
            /* A read the backend answers without a round trip runs its
             * continuation now rather than after the batch's answers. */
            e = ctx->backend->ops->get_now(ctx->backend, kg, key, klen, &v, &vl);
            if (e != -EWOULDBLOCK) {
                if (e && e != -ENOENT)
                    return e;
                goto at_once;
            }
        }
        wait *w = weir__calloc(1, sizeof(*w));
        if (!w)
            return -ENOMEM;
        *w = (wait){.c = c, .h = c->cur, .cont = cont, .arg = arg, .order = ctx->read_order};
        if (c->batch) { /* gathered: asked for with the others */
            uint8_t *k = weir__malloc(klen ? klen : 1);
            if (!k) {
                weir__free(w);
                return -ENOMEM;
            }
            memcpy(k, key, klen);
            atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
            c->cur->reads++;
            c->batch[c->nbatch++] = (weir_state_read){kg, k, klen, w};
            if (c->nbatch == BATCH_MAX)
                flush_batch(c);
            return 0;
        }
        atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
        c->cur->reads++;
        e = weir_state_get_async(ctx->backend, kg, key, klen, on_answer, w);
        if (e == -EINPROGRESS)
            return 0; /* on_answer owns w */
        c->cur->reads--;
        wait_free(w);
        if (e && e != -ENOENT)
            return e;
    }
    /* Answered at once (or no controller): the view of a plain read. */
    e = weir_state_get(ctx->backend, kg, key, klen, &v, &vl);
    if (e && e != -ENOENT)
        return e;
at_once:;
    size_t prev = ctx->read_kl;
    ctx->read_kl = key == ctx->keybuf ? klen : 0;
    int r = cont(ctx, ctx->state, in, e, e ? NULL : v, e ? 0 : vl, arg);
    ctx->read_kl = prev;
    return r;
}

int weir__ctl_scan(weir_ctx *ctx, const weir_rec *in, int kg, const void *prefix, size_t plen,
                   weir__cont_fn cont, void *arg)
{
    subtask *st = ctx->st;
    actl *c = st->ctl && st->ctl->ops == &async_ops ? (actl *)st->ctl : NULL;
    /* As weir__ctl_get: only in the record's own context. */
    if (c && c->cur && ctx == &st->ctx[0] && ctx->rc == &c->cur->rc &&
        ctx->backend->ops->scan_prefetch) {
        wait *w = weir__calloc(1, sizeof(*w));
        if (!w)
            return -ENOMEM;
        *w = (wait){.c = c, .h = c->cur, .cont = cont, .arg = arg, .order = ctx->read_order};
        atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
        c->cur->reads++;
        int e = weir_state_scan_prefetch(ctx->backend, kg, prefix, plen, on_answer, w);
        if (e == -EINPROGRESS)
            return 0; /* on_answer owns w */
        c->cur->reads--;
        wait_free(w);
        /* A prefetch that could not start (no memory, say) is no error of
         * the record: its scan reads synchronously. */
    }
    size_t prev = ctx->read_kl;
    ctx->read_kl = 0;
    int r = cont(ctx, ctx->state, in, 0, NULL, 0, arg);
    ctx->read_kl = prev;
    return r;
}

/* ---- the controller's ops ---------------------------------------------------------------- */
static int ctl_admit(weir__controller *base, weir_ctx *ctx, weir__rctx *rc, const weir_rec *r)
{
    actl *c = (actl *)base;
    held *h = weir__malloc(sizeof(*h) + rc->klen + r->len);
    if (!h)
        return weir__op_error(ctx, -ENOMEM, "process");
    memcpy(h->bytes, rc->key, rc->klen);
    memcpy(h->bytes + rc->klen, r->data, r->len);
    h->rc = *rc;
    h->rc.key = h->bytes;
    h->rec = (weir_rec){h->bytes + rc->klen, r->len, r->ts};
    h->side = ctx->side;
    h->reads = 0;
    h->a.key = h->bytes;
    h->a.klen = rc->klen;
    for (;;) {
        int e = weir__aec_submit(c->aec, &h->a);
        if (e == WEIR__AEC_NOMEM) {
            weir__free(h);
            return weir__op_error(ctx, -ENOMEM, "process");
        }
        if (e != WEIR__AEC_FULL)
            return e; /* taken (it may be gone: a record's error is any errno) */
        /* At the cap: wait for a record to finish (backpressure). */
        if ((e = answer_one(c)) < 0) {
            weir__free(h);
            return e;
        }
    }
}

static void ctl_flush(weir__controller *base)
{
    flush_batch((actl *)base);
}

static int ctl_watermark(weir__controller *base, weir_ctx *ctx, int64_t wm)
{
    actl *c = (actl *)base;
    int e = weir__aec_watermark(c->aec, wm);
    flush_batch(c); /* records of the next epoch may have started */
    return e == -ENOMEM ? weir__op_error(ctx, e, "on_watermark") : e;
}

static int ctl_drain(weir__controller *base, weir_ctx *ctx)
{
    (void)ctx;
    actl *c = (actl *)base;
    int e = weir__aec_error(c->aec);
    while (!e && !weir__aec_idle(c->aec))
        e = answer_one(c);
    return e;
}

static void ctl_free(weir__controller *base)
{
    actl *c = (actl *)base;
    pthread_mutex_lock(&c->lock);
    c->closed = 1;
    pthread_mutex_unlock(&c->lock);
    wait *w;
    while (weir_chan_try_recv(c->inbox, &w) == 0)
        wait_free(w);
    for (size_t i = 0; i < c->nbatch; i++) { /* never asked for */
        weir__free((void *)c->batch[i].key);
        wait_free(c->batch[i].arg);
    }
    c->nbatch = 0;
    weir__free(c->batch);
    c->batch = NULL;
    weir__aec_free(c->aec);
    c->aec = NULL;
    unref(c);
}

static const weir__controller_ops async_ops = {.name = "async",
                                               .admit = ctl_admit,
                                               .drain = ctl_drain,
                                               .free = ctl_free,
                                               .watermark = ctl_watermark,
                                               .flush = ctl_flush};

weir__controller *weir__controller_async_new(subtask *st, size_t max_in_flight)
{
    actl *c = weir__calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->base.ops = &async_ops;
    c->st = st;
    c->mail = (weir__mail){run_inbox, drop_inbox};
    atomic_init(&c->refs, 1);
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        weir__free(c);
        return NULL;
    }
    int flags = st->ops[0]->reads;
    if (st->backend->ops->get_batch && !(flags & WEIR_READS_NO_COALESCE) &&
        !(c->batch = weir__malloc(BATCH_MAX * sizeof(*c->batch)))) {
        pthread_mutex_destroy(&c->lock);
        weir__free(c);
        return NULL;
    }
    if (!(c->inbox = weir_chan_new(sizeof(wait *), WEIR_CHAN_UNBOUNDED)) ||
        !(c->aec = weir__aec_new(&hooks, c, max_in_flight))) {
        if (c->inbox)
            weir_chan_unref(c->inbox);
        weir__free(c->batch);
        pthread_mutex_destroy(&c->lock);
        weir__free(c);
        return NULL;
    }
    if (flags & WEIR_READS_DEADLINE_ORDER) {
        c->order = !c->batch;
        if (c->batch && st->index == 0)
            weir__log(WEIR__LOG_WARN, "stream",
                      "\"%s\": deadline-aware ordering is inert while reads are coalesced "
                      "(the state backend batches them): give weir_stream_reads "
                      "WEIR_READS_NO_COALESCE too for the ordering",
                      st->ops[0]->name);
    }
    return &c->base;
}
