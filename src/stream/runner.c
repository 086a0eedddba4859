/* SPDX-License-Identifier: Apache-2.0 */
/*
 * runner.c - running a job on one machine (weir/stream.h).
 *
 * Plan. Operators are created in topological order (an operator can only
 * read streams that exist), so one pass assigns chains: an operator joins
 * its input's chain when that input is its only one, a forward edge, from
 * an operator with no other reader and the same parallelism. Each chain
 * runs as `parallelism` subtasks, fibers pinned round robin to the
 * runtime's threads, spawned in one scope: the first failure cancels the
 * rest, and weir_job_run() returns when every subtask has ended.
 *
 * Data. Inside a chain weir_emit() calls the next operator's process()
 * directly. At a chain's tail it routes the record (forward, hash by key
 * group, rebalance, broadcast) into the open batch of the channel to the
 * chosen subtask. A batch goes out when full, and every open batch is
 * flushed when the subtask is about to wait for input (or after each call
 * of a source's next()), so records never sit in a half-full batch while
 * the pipeline idles.
 *
 * Channels and credits. A channel joins one producer subtask to one
 * consumer subtask. The consumer has one delivery queue (an unbounded
 * weir_chan) that all its channels push into, so one wait covers every
 * input; what bounds memory is each channel's credits (a weir_sem of
 * opts.credits): a producer takes a credit before it sends a batch and the
 * consumer gives it back after processing it. Watermarks and end-of-input
 * ride the same queues without credits (a producer sends at most one
 * watermark per advance), after the channel's open batch, so each
 * channel's items arrive in order.
 *
 * Watermarks. A source's watermark is its largest timestamp minus its
 * bound minus one (source_watermark), advanced after each next(). A consumer keeps each input's
 * watermark; its own is the minimum over inputs that have not ended and
 * are not idle (silent longer than opts.idle_timeout_ms, when set). An
 * advance calls on_watermark() down the chain, then goes out on every
 * channel. At the end of all inputs the watermark becomes
 * WEIR_WATERMARK_MAX, finish() runs down the chain, and end-of-input goes
 * out.
 *
 * Teardown. Batches still queued when subtasks stop (after a failure or a
 * cancel) are freed once every subtask has been joined: the run owns the
 * queues and channels, not the subtasks. Nothing is freed before every
 * task of the run has ended, whatever the caller's cancellation state: the
 * subtasks are joined through their scope, and the checkpoint coordinator,
 * which must outlive them (it is cancelled once they have ended), through
 * a scope of its own. A scope's join waits for its children even when the
 * joining task is cancelled; a plain weir_task_join() would return
 * -ECANCELED at once in a cancelled caller (weir_job_run's task, when the
 * job is cancelled), leaving the coordinator running on the freed run and
 * its handle leaked.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "stream/stream_int.h"
#include "weir/sync.h"

#define SUBTASK_STACK (256u << 10)

static void metrics_push(subtask *st);

static batch *batch_new(size_t need)
{
    size_t cap = need > WEIR_BATCH_BYTES ? (need + 7) & ~(size_t)7 : WEIR_BATCH_BYTES;
    batch *b = weir__malloc(sizeof(batch) + cap);
    if (b) {
        b->n = b->used = 0;
        b->cap = (uint32_t)cap;
    }
    return b;
}

/* ---- errors ------------------------------------------------------------------------------- */
void weir__stream_fail(weir_job *j, int err, const char *fmt, ...)
{
    pthread_mutex_lock(&j->lock);
    if (!j->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->error, sizeof(j->error), fmt, ap);
        va_end(ap);
        j->err = err;
    }
    pthread_mutex_unlock(&j->lock);
}

int weir_fail(weir_ctx *ctx, int err, const char *fmt, ...)
{
    if (err >= 0)
        err = -EINVAL;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    weir__stream_fail(ctx->st->r->j, err, "operator \"%s\" (subtask %d): %s", ctx->op->name,
                      ctx->st->index, msg);
    return err;
}

/* A user function's error without a weir_fail message gets one. */
static int op_error(weir_ctx *ctx, int e, const char *what)
{
    if (e < 0 && e != -ECANCELED)
        weir__stream_fail(ctx->st->r->j, e, "operator \"%s\" (subtask %d): %s failed: %s",
                          ctx->op->name, ctx->st->index, what, weir_strerror(e));
    return e;
}

/* ---- context calls ------------------------------------------------------------------------ */
int weir_ctx_subtask(const weir_ctx *ctx)
{
    return ctx->st->index;
}

int weir_ctx_parallelism(const weir_ctx *ctx)
{
    return ctx->st->par;
}

int64_t weir_ctx_watermark(const weir_ctx *ctx)
{
    return ctx->st->wm;
}

int weir_ctx_input(const weir_ctx *ctx)
{
    return ctx->side;
}

struct weir_metrics *weir_ctx_metrics(const weir_ctx *ctx)
{
    return ctx->st->r->o.metrics;
}

const void *weir_ctx_key(const weir_ctx *ctx, size_t *len)
{
    int k = ctx->backend && ctx->has_key;
    if (len)
        *len = k ? ctx->key_len : 0;
    return k ? ctx->key : NULL;
}

/* ---- sending ------------------------------------------------------------------------------ */
/* Send the channel's open batch, spending a credit (waiting for one). */
static int flush_channel(subtask *st, channel *ch)
{
    batch *b = ch->open;
    if (!b || b->n == 0)
        return 0;
    ch->open = NULL;
    int e = ch->ops->send_batch(ch, b, &st->bp_ns);
    if (e)
        ch->open = b; /* freed with the channel */
    return e;
}

int weir__stream_flush_all(subtask *st)
{
    for (int i = 0; i < st->nouts; i++) {
        output *o = &st->outs[i];
        for (int t = 0; t < o->par; t++)
            if (o->targets[t]) {
                int e = flush_channel(st, o->targets[t]);
                if (e)
                    return e;
            }
    }
    return 0;
}

static int append(subtask *st, channel *ch, const void *data, size_t len, int64_t ts, int kg)
{
    batch *b = ch->open;
    size_t at = b ? ((size_t)b->used + 7) & ~(size_t)7 : 0;
    if (b && (b->n == WEIR_BATCH_RECORDS || at + len > b->cap)) {
        int e = flush_channel(st, ch);
        if (e)
            return e;
        b = NULL;
    }
    if (!b) {
        if (!(b = ch->open = batch_new(len)))
            return -ENOMEM;
        at = 0;
    }
    b->ts[b->n] = ts;
    b->off[b->n] = (uint32_t)at;
    b->len[b->n] = (uint32_t)len;
    b->kg[b->n] = (uint8_t)kg;
    if (len)
        memcpy(b->data + at, data, len);
    b->used = (uint32_t)(at + len);
    b->n++;
    return 0;
}

/* A record leaving the chain from operator `from` (its main output, tag 0,
 * or its side output, tag 1): to each output reading it, by its edge. */
static int route(subtask *st, sop *from, int tag, const void *data, size_t len, int64_t ts)
{
    for (int i = 0; i < st->nouts; i++) {
        output *o = &st->outs[i];
        int e = 0;
        if (o->from != from || o->tag != tag)
            continue;
        switch (o->edge) {
        case EDGE_FORWARD:
            e = append(st, o->targets[st->index], data, len, ts, NO_KG);
            break;
        case EDGE_HASH: {
            const void *k;
            size_t kl;
            weir_rec r = {data, len, ts};
            if ((e = o->key(&r, o->key_arg, &k, &kl)) < 0)
                return weir__stream_fail(st->r->j, e,
                                         "key function of the edge out of \"%s\" "
                                         "failed: %s",
                                         st->ops[st->nops - 1]->name, weir_strerror(e)),
                       e;
            int kg = weir_key_group(weir_key_hash(k, kl), WEIR_KEY_GROUPS);
            e = append(st, o->targets[weir_key_group_owner(kg, o->par, WEIR_KEY_GROUPS)], data, len,
                       ts, kg);
            break;
        }
        case EDGE_REBALANCE:
            e = append(st, o->targets[o->rr++ % (uint32_t)o->par], data, len, ts, NO_KG);
            break;
        default: /* broadcast */
            for (int t = 0; t < o->par && !e; t++)
                e = append(st, o->targets[t], data, len, ts, NO_KG);
        }
        if (e)
            return e;
    }
    return 0;
}

int weir_emit(weir_ctx *ctx, const void *data, size_t len, int64_t ts)
{
    if (len > WEIR_MAX_RECORD)
        return -E2BIG;
    if (!data && len)
        return -EINVAL;
    subtask *st = ctx->st;
    ctx->out++;
    if (st->source && ctx == st->ctx && ts > st->max_ts)
        st->max_ts = ts;
    weir_ctx *n = ctx->next;
    if (n) {
        n->in++;
        weir_rec r = {data, len, ts};
        int e = n->op->def.process(n, n->state, &r);
        return e < 0 ? op_error(n, e, "process") : e;
    }
    return route(st, ctx->op, 0, data, len, ts);
}

int weir_emit_side(weir_ctx *ctx, const void *data, size_t len, int64_t ts)
{
    if (len > WEIR_MAX_RECORD)
        return -E2BIG;
    if (!data && len)
        return -EINVAL;
    return route(ctx->st, ctx->op, 1, data, len, ts);
}

/* Control to every channel out, after its open batch. */
int weir__stream_broadcast(subtask *st, int kind, int64_t wm)
{
    for (int i = 0; i < st->nouts; i++) {
        output *o = &st->outs[i];
        for (int t = 0; t < o->par; t++) {
            channel *ch = o->targets[t];
            if (!ch)
                continue;
            int e = flush_channel(st, ch);
            if (!e)
                e = ch->ops->send_ctl(ch, kind, wm);
            if (e)
                return e;
        }
    }
    return 0;
}

/* The subtask's watermark moves to wm: down the chain, then out. */
static int advance(subtask *st, int64_t wm)
{
    if (wm <= st->wm)
        return 0;
    int e = weir__stream_drain(st);
    if (e)
        return e;
    st->wm = wm;
    /* Keyed: the event-time timers the watermark passed fire first (in
     * time order), then the hooks, then the watermark goes downstream. */
    e = weir__timers_fire(st, WEIR_TIME_EVENT, wm);
    if (e < 0)
        return op_error(&st->ctx[0], e, "on_timer");
    for (int i = 0; i < st->nops; i++) {
        weir_ctx *c = &st->ctx[i];
        if (c->op->def.on_watermark) {
            int e = c->op->def.on_watermark(c, c->state, wm);
            if (e < 0)
                return op_error(c, e, "on_watermark");
        }
    }
    return weir__stream_broadcast(st, IT_WATERMARK, wm);
}

/* ---- the subtask -------------------------------------------------------------------------- */
static int finish_chain(subtask *st)
{
    int e = weir__stream_drain(st);
    if (!e)
        e = advance(st, WEIR_WATERMARK_MAX);
    for (int i = 0; i < st->nops && !e; i++) {
        weir_ctx *c = &st->ctx[i];
        if (c->op->def.finish && (e = c->op->def.finish(c, c->state)) < 0)
            e = op_error(c, e, "finish");
        /* Event-time timers the head's finish() registered (per key, from
         * weir_keys_iterate, say) are past the final watermark already:
         * they fire now, before the rest of the chain finishes. */
        if (!e && i == 0 && (e = weir__timers_fire(st, WEIR_TIME_EVENT, WEIR_WATERMARK_MAX)) < 0)
            e = op_error(c, e, "on_timer");
    }
    if (!e)
        e = weir__stream_flush_all(st);
    if (!e)
        e = weir__stream_broadcast(st, IT_EOI, 0);
    return e;
}

/* A source's watermark: the largest timestamp it emitted minus its bound,
 * minus one. A record within the bound of the largest (ts >= max - bound)
 * is on time, so the watermark is the latest time that no on-time record
 * can still carry: every consumer counts ts <= watermark as passed (a
 * window [start, end) fires once end - 1 <= watermark, a timer at t once
 * t <= watermark, a record with ts <= watermark is late). Near INT64_MIN
 * (nothing emitted, or max - bound - 1 below the least time) it stays at
 * WEIR_WATERMARK_MIN. */
static int64_t source_watermark(int64_t max_ts, int64_t bound)
{
    /* INT64_MIN + 1 + bound cannot overflow for 0 <= bound <= INT64_MAX. */
    return max_ts >= INT64_MIN + 1 + bound ? max_ts - bound - 1 : WEIR_WATERMARK_MIN;
}

static int run_source(subtask *st)
{
    sop *src = st->ops[0];
    weir_ctx *c = &st->ctx[0];
    for (;;) {
        int r = src->src.next(c, c->state);
        if (r < 0)
            return op_error(c, r, "next");
        int e = weir__stream_flush_all(st);
        st->max_seen = st->max_ts;
        metrics_push(st);
        if (!e && src->src.max_out_of_orderness >= 0)
            e = advance(st, source_watermark(st->max_ts, src->src.max_out_of_orderness));
        if (e)
            return e;
        if (r == 1)
            return finish_chain(st);
        uint64_t req = atomic_load_explicit(&st->barrier_req, memory_order_acquire);
        if (req > st->last_barrier && (e = weir__ckpt_barrier(st, req)) < 0)
            return e;
        weir__ckpt_maybe_commit(st);
        /* Let the other subtasks pinned to this thread run (a source that
         * never waits would otherwise keep its thread to itself). */
        if ((e = weir_task_yield()) < 0)
            return e;
    }
}

/* The minimum watermark over inputs that count. */
static void recompute(subtask *st, int64_t now, int64_t idle_ns, int64_t *out, int *any)
{
    int64_t m = INT64_MAX;
    int counted = 0;
    for (int i = 0; i < st->nins; i++) {
        in_state *in = &st->ins[i];
        if (in->eoi)
            continue;
        in->idle = idle_ns > 0 && !in->blocked && now - in->last > idle_ns;
        if (in->idle)
            continue;
        counted++;
        if (in->wm < m)
            m = in->wm;
    }
    *out = m;
    *any = counted;
}

static int process_batch(subtask *st, in_state *in, batch *b)
{
    weir_ctx *c = &st->ctx[0];
    sop *head = st->ops[0];
    int e = 0;
    c->side = in->side;
    for (uint32_t i = 0; i < b->n && !e; i++) {
        weir_rec r = {b->data + b->off[i], b->len[i], b->ts[i]};
        c->in++;
        if (r.ts > st->max_seen)
            st->max_seen = r.ts;
        if (st->backend) {
            const void *k;
            size_t kl;
            if ((e = in->key(&r, in->key_arg, &k, &kl)) < 0) {
                weir__stream_fail(st->r->j, e, "key function into \"%s\" failed: %s", head->name,
                                  weir_strerror(e));
                break;
            }
            c->key = k;
            c->key_len = kl;
            c->has_key = 1;
            c->kg = b->kg[i] != NO_KG ? b->kg[i]
                                      : weir_key_group(weir_key_hash(k, kl), WEIR_KEY_GROUPS);
        }
        if (head->def.admit) {
            int a = head->def.admit(c, c->state, &r);
            if (a < 0) {
                e = op_error(c, a, "admit");
                break;
            }
            if (a == 1)
                continue; /* the controller runs it later */
        }
        if ((e = head->def.process(c, c->state, &r)) < 0)
            e = op_error(c, e, "process");
    }
    /* The key pointed into the batch, which is about to go: no current key
     * outside a record (on_watermark, finish). */
    c->key = NULL;
    c->key_len = 0;
    c->has_key = 0;
    return e;
}

int weir_ctx_process(weir_ctx *ctx, const void *key, size_t len, const weir_rec *in)
{
    if (!ctx || !in || (!key && len))
        return -EINVAL;
    const void *pk = ctx->key;
    size_t pl = ctx->key_len;
    int ph = ctx->has_key, pg = ctx->kg;
    if (ctx->backend) {
        ctx->key = key;
        ctx->key_len = len;
        ctx->has_key = 1;
        ctx->kg = weir_key_group(weir_key_hash(key, len), WEIR_KEY_GROUPS);
        if (ctx->kg < ctx->backend->first_kg || ctx->kg >= ctx->backend->end_kg) {
            ctx->key = pk, ctx->key_len = pl, ctx->has_key = ph, ctx->kg = pg;
            return -EINVAL;
        }
    }
    int e = ctx->op->def.process(ctx, ctx->state, in);
    ctx->key = pk, ctx->key_len = pl, ctx->has_key = ph, ctx->kg = pg;
    return e < 0 ? op_error(ctx, e, "process") : e;
}

/* The head's controller (if any) finishes what it holds. */
int weir__stream_drain(subtask *st)
{
    weir_ctx *c = &st->ctx[0];
    if (st->source || !c->op->def.drain)
        return 0;
    int e = c->op->def.drain(c, c->state);
    return e < 0 ? op_error(c, e, "drain") : 0;
}

/* Every input still open has delivered the barrier: snapshot, forward,
 * and release the held-back items (in input order, each input's in order). */
static int try_align(subtask *st)
{
    int open = 0;
    uint64_t id = 0;
    for (int i = 0; i < st->nins; i++) {
        open += !st->ins[i].eoi;
        if (st->ins[i].blocked)
            id = st->ins[i].blocked;
    }
    if (st->arrived < open)
        return 0;
    int e = weir__ckpt_barrier(st, id);
    st->arrived = 0;
    for (int i = 0; i < st->nins; i++) {
        in_state *in = &st->ins[i];
        in->blocked = 0;
        item it;
        while (!e && weir__itemq_pop(&in->stash, &it) == 0)
            e = weir__itemq_push(&st->replay, it);
    }
    return e;
}

static int run_operator(subtask *st)
{
    int64_t idle_ns = st->r->o.idle_timeout_ms > 0 ? st->r->o.idle_timeout_ms * WEIR_MSEC : 0;
    int open = st->nins;
    for (int i = 0; i < st->nins; i++)
        st->ins[i].last = weir_time_now();
    unsigned turn = 0;
    while (open > 0) {
        item it;
        int e;
        /* Now and then while input keeps coming without a wait: yield, and
         * fire processing-time timers that came due. */
        if (++turn % 16 == 0) {
            if ((e = weir_task_yield()) < 0)
                return e;
            if (st->backend && weir__timers_next(st, WEIR_TIME_PROCESSING) <= weir_time_now() &&
                (e = weir__timers_fire(st, WEIR_TIME_PROCESSING, weir_time_now())) < 0)
                return op_error(&st->ctx[0], e, "on_timer");
        }
        /* Items held back during an alignment go first, then the queue. */
        e = weir__itemq_pop(&st->replay, &it);
        if (e == -EAGAIN)
            e = weir_chan_try_recv(st->inq, &it);
        if (e == -EAGAIN) {
            if ((e = weir__stream_flush_all(st)) < 0)
                return e;
            int64_t deadline =
                idle_ns ? weir_time_after_ms(st->r->o.idle_timeout_ms) : WEIR_FOREVER;
            int64_t proc = weir__timers_next(st, WEIR_TIME_PROCESSING);
            if (proc < deadline)
                deadline = proc;
            e = weir_chan_recv(st->inq, &it, deadline);
            if (e == -ETIMEDOUT) {
                int64_t now = weir_time_now(), m;
                int any;
                if (proc <= now && (e = weir__timers_fire(st, WEIR_TIME_PROCESSING, now)) < 0)
                    return op_error(&st->ctx[0], e, "on_timer");
                recompute(st, now, idle_ns, &m, &any);
                if (any && m != INT64_MAX && (e = advance(st, m)) < 0)
                    return e;
                continue;
            }
        }
        if (e)
            return e;
        if (it.kind == IT_NOTIFY) {
            weir__ckpt_maybe_commit(st);
            continue;
        }
        in_state *in = &st->ins[it.input];
        if (in->blocked) {              /* aligned already: hold it until the snapshot */
            in->last = weir_time_now(); /* it is not idle: it is held back */
            if ((e = weir__itemq_push(&in->stash, it)) < 0)
                return e;
            continue;
        }
        in->last = weir_time_now();
        if (it.kind == IT_BARRIER) {
            in->blocked = (uint64_t)it.wm;
            st->arrived++;
            if ((e = try_align(st)) < 0)
                return e;
            continue;
        }
        if (it.kind == IT_BATCH) {
            e = process_batch(st, in, it.b);
            weir__free(it.b);
            in->ch->ops->credit(in->ch);
            metrics_push(st);
            if (e)
                return e;
            continue;
        }
        if (it.kind == IT_WATERMARK) {
            if (it.wm > in->wm)
                in->wm = it.wm;
        } else {
            in->eoi = 1;
            open--;
            /* An input that ended sends no more barriers: stop waiting. */
            if (st->arrived && (e = try_align(st)) < 0)
                return e;
        }
        if (open > 0) {
            int64_t m;
            int any;
            recompute(st, in->last, idle_ns, &m, &any);
            if (any && m != INT64_MAX && (e = advance(st, m)) < 0)
                return e;
        }
    }
    return finish_chain(st);
}

static intptr_t subtask_main(void *arg)
{
    subtask *st = arg;
    int e = 0, opened = 0;
    for (; opened < st->nops; opened++) {
        weir_ctx *c = &st->ctx[opened];
        sop *o = c->op;
        int (*open)(weir_ctx *, void *, void **) = o->kind == OP_SOURCE ? o->src.open : o->def.open;
        c->state = o->arg;
        if (open && (e = open(c, o->arg, &c->state)) < 0) {
            op_error(c, e, "open");
            /* An open() that failed after making its state gets it closed,
             * as one that succeeded would. */
            void (*close)(void *) = o->kind == OP_SOURCE ? o->src.close : o->def.close;
            if (close && c->state && c->state != o->arg)
                close(c->state);
            break;
        }
    }
    if (!e)
        e = weir__ckpt_restore_subtask(st);
    /* Positions of list entries (and join buffers) made from here on sort
     * after every restored one: a restore only ever brings back entries of
     * checkpoints up to the restored id. */
    for (int i = 0; i < st->nops; i++)
        st->ctx[i].seq = (st->r->restored + 1) << 40;
    if (!e)
        e = st->source ? run_source(st) : run_operator(st);
    /* -ECANCELED from an operator of a run nobody cancelled (a function
     * that returned it, or weir_fail with it) is a failure: as a scope
     * child's "cancelled" it would end this subtask without failing the
     * job or ending its output, and the rest would wait for it forever. */
    if (e == -ECANCELED && !weir_task_cancelled()) {
        weir__stream_fail(st->r->j, e, "operator \"%s\" (subtask %d) returned -ECANCELED: %s",
                          st->ctx[0].op->name, st->index, weir_strerror(e));
        e = -EPROTO; /* any failure the scope acts on; the job keeps the error above */
    }
    atomic_store(&st->finished, 1);
    for (int i = opened - 1; i >= 0; i--) {
        weir_ctx *c = &st->ctx[i];
        void (*close)(void *) = c->op->kind == OP_SOURCE ? c->op->src.close : c->op->def.close;
        if (close)
            close(c->state);
    }
    return e;
}

/* ---- planning ----------------------------------------------------------------------------- */
static channel *new_channel(run *r, subtask *to, int credits)
{
    if (r->nchannels == r->chcap) {
        int cap = r->chcap ? r->chcap * 2 : 64;
        channel **c = realloc(r->channels, (size_t)cap * sizeof(*c));
        if (!c)
            return NULL;
        r->channels = c;
        r->chcap = cap;
    }
    channel *ch = weir__channel_local_new(to, credits);
    if (ch) {
        ch->id = (uint32_t)r->nchannels;
        r->channels[r->nchannels++] = ch;
    }
    return ch;
}

/* ---- metrics ------------------------------------------------------------------------------- */
static weir_metric_family *family(run *r, const char *name, const char *help, int type)
{
    weir_metric_def d = {.name = name,
                         .help = help,
                         .type = type,
                         .labels = WEIR_LABELS("operator", "subtask"),
                         .nlabels = 2};
    weir_metric_family *f = NULL;
    const char *why;
    if (weir_metrics_register(r->o.metrics, &d, &f, &why) < 0)
        return NULL;
    return f;
}

static int metrics_child(run *r, weir_ctx *c, int subtask)
{
    char sub[16];
    snprintf(sub, sizeof(sub), "%d", subtask);
    const char *const lv[] = {c->op->name, sub};
    weir_metric_family *fi = family(r, "weir_stream_records_in_total",
                                    "Records an operator's subtask processed", WEIR_METRIC_COUNTER);
    weir_metric_family *fo = family(r, "weir_stream_records_out_total",
                                    "Records an operator's subtask emitted", WEIR_METRIC_COUNTER);
    weir_metric_family *fb =
        family(r, "weir_stream_backpressure_seconds_total",
               "Time a subtask waited for credits to send downstream", WEIR_METRIC_COUNTER);
    weir_metric_family *fw =
        family(r, "weir_stream_watermark", "The subtask's watermark (event-time units)",
               WEIR_METRIC_GAUGE);
    weir_metric_family *fl =
        family(r, "weir_stream_watermark_lag",
               "Largest timestamp seen minus the watermark (event-time units)", WEIR_METRIC_GAUGE);
    if (!fi || !fo || !fb || !fw || !fl)
        return -ENOMEM;
    c->m_in = weir_metric_counter(fi, lv);
    c->m_out = weir_metric_counter(fo, lv);
    c->m_bp = weir_metric_counter(fb, lv);
    c->m_wm = weir_metric_gauge(fw, lv);
    c->m_lag = weir_metric_gauge(fl, lv);
    return c->m_in && c->m_out && c->m_bp && c->m_wm && c->m_lag ? 0 : -ENOMEM;
}

/* Push the counts gathered since the last push (every batch or source call). */
static void metrics_push(subtask *st)
{
    for (int i = 0; i < st->nops; i++) {
        weir_ctx *c = &st->ctx[i];
        uint64_t din = c->in - c->in_pushed, dout = c->out - c->out_pushed;
        /* The operator's totals, readable during the run (weir_job_op_stats). */
        atomic_fetch_add_explicit(&c->op->records_in, din, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->op->records_out, dout, memory_order_relaxed);
        if (c->op->sub_wm && st->index < c->op->sub_n)
            atomic_store_explicit(&c->op->sub_wm[st->index], st->wm, memory_order_relaxed);
        c->in_pushed = c->in;
        c->out_pushed = c->out;
        if (!c->m_in)
            continue;
        weir_counter_add(c->m_in, din);
        weir_counter_add(c->m_out, dout);
        if (st->wm != WEIR_WATERMARK_MIN && st->wm != WEIR_WATERMARK_MAX) {
            weir_gauge_set(c->m_wm, (double)st->wm);
            if (st->max_seen != INT64_MIN)
                weir_gauge_set(c->m_lag, (double)(st->max_seen - st->wm));
        }
    }
    weir_ctx *tail = &st->ctx[st->nops - 1];
    if (st->bp_ns > st->bp_pushed) {
        uint64_t d = st->bp_ns - st->bp_pushed;
        atomic_fetch_add_explicit(&tail->op->backpressure_ns, d, memory_order_relaxed);
        if (tail->m_bp)
            weir_counter_add_double(tail->m_bp, (double)d / 1e9);
        st->bp_pushed = st->bp_ns;
    }
}

static int plan(run *r)
{
    weir_job *j = r->j;
    int def = r->o.parallelism;
    r->chains = calloc((size_t)j->nops, sizeof(chain));
    if (!r->chains)
        return -ENOMEM;
    for (int i = 0; i < j->nops; i++) {
        sop *o = j->ops[i];
        /* Without its own parallelism an operator reading only forward
         * edges takes its input's (so it can chain), else the job's. */
        int fwd = o->ninputs > 0;
        for (int k = 0; k < o->ninputs; k++)
            fwd &= o->inputs[k].edge == EDGE_FORWARD;
        o->par = o->parallelism ? o->parallelism : fwd ? o->inputs[0].from->par : def;
        if (o->kind != OP_SOURCE && o->ninputs == 0)
            return weir__stream_fail(j, -EINVAL, "operator \"%s\" has no input", o->name), -EINVAL;
        for (int k = 0; k < o->ninputs; k++)
            if (o->inputs[k].edge == EDGE_FORWARD && o->inputs[k].from->par != o->par)
                return weir__stream_fail(j, -EINVAL,
                                         "forward edge \"%s\" -> \"%s\" joins parallelism %d "
                                         "to %d: use rebalance or key_by",
                                         o->inputs[k].from->name, o->name, o->inputs[k].from->par,
                                         o->par),
                       -EINVAL;
        sop *up = o->ninputs == 1 ? o->inputs[0].from : NULL;
        if (up && o->inputs[0].edge == EDGE_FORWARD && o->inputs[0].tag == 0 && up->nouts == 1 &&
            up->par == o->par && up->kind != OP_SINK) {
            chain *c = &r->chains[up->chain];
            sop **ops = realloc(c->ops, (size_t)(c->nops + 1) * sizeof(*ops));
            if (!ops)
                return -ENOMEM;
            c->ops = ops;
            o->chain = up->chain;
            o->chain_pos = c->nops;
            c->ops[c->nops++] = o;
        } else {
            chain *c = &r->chains[r->nchains];
            if (!(c->ops = malloc(sizeof(*c->ops))))
                return -ENOMEM;
            c->ops[0] = o;
            c->nops = 1;
            c->par = o->par;
            o->chain = r->nchains++;
            o->chain_pos = 0;
        }
        o->records_in = o->records_out = o->backpressure_ns = 0;
        o->watermark = INT64_MAX;
        free(o->sub_wm);
        if (!(o->sub_wm = malloc((size_t)o->par * sizeof(*o->sub_wm))))
            return -ENOMEM;
        o->sub_n = o->par;
        for (int k = 0; k < o->par; k++)
            o->sub_wm[k] = WEIR_WATERMARK_MIN;
    }
    /* Subtasks and their contexts. */
    for (int ci = 0; ci < r->nchains; ci++) {
        chain *c = &r->chains[ci];
        if (!(c->subs = calloc((size_t)c->par, sizeof(subtask))))
            return -ENOMEM;
        for (int s = 0; s < c->par; s++) {
            subtask *st = &c->subs[s];
            st->r = r;
            st->index = s;
            st->par = c->par;
            st->ops = c->ops;
            st->nops = c->nops;
            st->wm = WEIR_WATERMARK_MIN;
            st->max_ts = INT64_MIN;
            st->source = c->ops[0]->kind == OP_SOURCE;
            if (!(st->ctx = calloc((size_t)c->nops, sizeof(weir_ctx))))
                return -ENOMEM;
            for (int k = 0; k < c->nops; k++) {
                st->ctx[k].st = st;
                st->ctx[k].op = c->ops[k];
                st->ctx[k].next = k + 1 < c->nops ? &st->ctx[k + 1] : NULL;
                if (r->o.metrics && metrics_child(r, &st->ctx[k], s) < 0)
                    return -ENOMEM;
            }
            st->max_seen = INT64_MIN;
            if (!st->source && !(st->inq = weir_chan_new(sizeof(item), WEIR_CHAN_UNBOUNDED)))
                return -ENOMEM;
            if (c->ops[0]->keyed) {
                int first, end;
                weir_key_group_range(s, c->par, WEIR_KEY_GROUPS, &first, &end);
                if (!(st->backend = weir_state_memory_new(WEIR_KEY_GROUPS, first, end)))
                    return -ENOMEM;
                st->ctx[0].backend = st->backend;
            }
        }
    }
    /* Channels: for each chain head's input, producer subtask -> consumer subtask. */
    int credits = r->o.credits;
    for (int ci = 0; ci < r->nchains; ci++) {
        chain *c = &r->chains[ci];
        sop *head = c->ops[0];
        for (int k = 0; k < head->ninputs; k++) {
            sinput *in = &head->inputs[k];
            chain *pc = &r->chains[in->from->chain];
            for (int p = 0; p < pc->par; p++) {
                subtask *prod = &pc->subs[p];
                output *o = NULL;
                output *outs = realloc(prod->outs, (size_t)(prod->nouts + 1) * sizeof(*outs));
                if (!outs)
                    return -ENOMEM;
                prod->outs = outs;
                o = &prod->outs[prod->nouts++];
                *o = (output){in->from,    in->tag, in->edge, in->key,
                              in->key_arg, c->par,  NULL,     (uint32_t)p};
                if (!(o->targets = calloc((size_t)c->par, sizeof(channel *))))
                    return -ENOMEM;
                for (int s = 0; s < c->par; s++) {
                    if (in->edge == EDGE_FORWARD && s != p)
                        continue;
                    subtask *cons = &c->subs[s];
                    channel *ch = new_channel(r, cons, credits);
                    if (!ch)
                        return -ENOMEM;
                    in_state *ins = realloc(cons->ins, (size_t)(cons->nins + 1) * sizeof(*ins));
                    if (!ins)
                        return -ENOMEM;
                    cons->ins = ins;
                    ch->input = cons->nins;
                    ins[cons->nins++] = (in_state){.ch = ch,
                                                   .wm = WEIR_WATERMARK_MIN,
                                                   .key = in->key,
                                                   .key_arg = in->key_arg,
                                                   .side = k};
                    o->targets[s] = ch;
                }
            }
        }
    }
    return 0;
}

static void teardown(run *r)
{
    for (int ci = 0; ci < r->nchains; ci++) {
        chain *c = &r->chains[ci];
        for (int s = 0; c->subs && s < c->par; s++) {
            subtask *st = &c->subs[s];
            if (st->inq) {
                item it;
                while (weir_chan_try_recv(st->inq, &it) == 0)
                    if (it.kind == IT_BATCH)
                        weir__free(it.b);
                weir_chan_unref(st->inq);
            }
            for (int k = 0; k <= st->nins; k++) {
                itemq *q = k < st->nins ? &st->ins[k].stash : &st->replay;
                item it;
                while (weir__itemq_pop(q, &it) == 0)
                    if (it.kind == IT_BATCH)
                        weir__free(it.b);
                free(q->v);
            }
            for (int k = 0; st->ctx && k < st->nops; k++) {
                weir_ctx *x = &st->ctx[k];
                x->op->records_in += x->in - x->in_pushed;
                x->op->records_out += x->out - x->out_pushed;
                if (st->wm < x->op->watermark)
                    x->op->watermark = st->wm;
                free(x->keybuf);
            }
            if (st->nops)
                st->ops[st->nops - 1]->backpressure_ns += st->bp_ns - st->bp_pushed;
            for (int k = 0; k < st->nouts; k++)
                free(st->outs[k].targets);
            weir_state_backend_free(st->backend);
            weir__timers_free(&st->timers[0]);
            weir__timers_free(&st->timers[1]);
            free(st->outs);
            free(st->ins);
            free(st->ctx);
        }
        free(c->subs);
        free(c->ops);
    }
    for (int i = 0; i < r->nchannels; i++)
        r->channels[i]->ops->free(r->channels[i]);
    free(r->channels);
    free(r->chains);
}

int weir_job_run(weir_job *j, const weir_run_opts *opts)
{
    if (!j)
        return -EINVAL;
    if (j->err)
        return j->err;
    if (!weir_task_current())
        return -EINVAL;
    run r = {.j = j, .o = opts ? *opts : (weir_run_opts){0}};
    if (r.o.parallelism == 0)
        r.o.parallelism = 1;
    if (r.o.credits == 0)
        r.o.credits = 4;
    if (r.o.parallelism < 1 || r.o.parallelism > WEIR_KEY_GROUPS || r.o.credits < 1 ||
        r.o.threads < 0) {
        weir__stream_fail(j, -EINVAL, "bad run options (parallelism 1..%d, credits >= 1)",
                          WEIR_KEY_GROUPS);
        return -EINVAL;
    }
    if (j->nops == 0) {
        weir__stream_fail(j, -EINVAL, "the job has no operators");
        return -EINVAL;
    }
    pthread_mutex_lock(&j->lock);
    memset(&j->ckpt, 0, sizeof(j->ckpt));
    pthread_mutex_unlock(&j->lock);
    int e = plan(&r);
    if (!e && (e = weir__ckpt_prepare(&r)) < 0 && !j->err)
        weir__stream_fail(j, e, "checkpoint directory \"%s\": %s",
                          r.o.checkpoint_dir ? r.o.checkpoint_dir : "(none)",
                          e == -EINVAL ? "checkpoints and restore need a checkpoint_dir"
                                       : weir_strerror(e));
    pthread_mutex_lock(&j->lock);
    j->ckpt.restored = r.restored;
    j->running = !e;
    pthread_mutex_unlock(&j->lock);
    if (e) {
        if (!j->err)
            weir__stream_fail(j, e, "planning the job: %s", weir_strerror(e));
        teardown(&r);
        return j->err;
    }
    weir_rt *rt = weir_rt_current();
    int threads = rt ? weir_rt_threads(rt) : 1;
    if (r.o.threads > 0 && r.o.threads < threads)
        threads = r.o.threads;
    for (int ci = 0; ci < r.nchains; ci++)
        r.nsubtasks += r.chains[ci].par;
    weir_scope *sc = weir_scope_new(WEIR_SCOPE_CANCEL_SIBLINGS, WEIR_FOREVER);
    /* The coordinator has a scope of its own (see Teardown at the top). */
    weir_scope *cs = NULL;
    if (sc && r.acks &&
        (!(cs = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER)) ||
         !weir_scope_spawn(cs, weir__ckpt_coordinator, &r,
                           &(weir_spawn_opts){.name = "checkpoints", .stack_size = 128u << 10}))) {
        weir__stream_fail(j, -ENOMEM, "could not start the checkpoint coordinator");
        weir_scope_free(cs); /* no child: no join needed */
        weir_scope_free(sc);
        teardown(&r);
        weir__ckpt_teardown(&r);
        return j->err;
    }
    int next = 0;
    for (int ci = 0; sc && ci < r.nchains; ci++)
        for (int s = 0; s < r.chains[ci].par; s++) {
            weir_spawn_opts so = {.name = r.chains[ci].ops[0]->name,
                                  .stack_size = SUBTASK_STACK,
                                  .pin = 1,
                                  .loop = rt ? weir_rt_loop(rt, next++ % threads) : NULL};
            if (!weir_scope_spawn(sc, subtask_main, &r.chains[ci].subs[s], &so)) {
                weir__stream_fail(j, -ENOMEM, "could not start a subtask: %s", strerror(errno));
                weir_scope_cancel(sc);
                ci = r.nchains;
                break;
            }
        }
    weir_scope_result res = {0};
    e = sc ? weir_scope_join(sc, &res) : -ENOMEM;
    weir_scope_free(sc);
    if (cs) {
        weir_scope_cancel(cs);
        weir_scope_join(cs, NULL);
        weir_scope_free(cs);
    }
    pthread_mutex_lock(&j->lock);
    j->running = 0;
    pthread_mutex_unlock(&j->lock);
    teardown(&r);
    weir__ckpt_teardown(&r);
    if (j->err)
        return j->err;
    if (e && e != -ECANCELED)
        weir__stream_fail(j, e, "subtask \"%s\" failed: %s", res.first_name ? res.first_name : "?",
                          weir_strerror(e));
    return e;
}

int weir_job_op_stats(const weir_job *j, const char *op, weir_op_stats *st)
{
    if (!j || !op || !st)
        return -EINVAL;
    for (int i = 0; i < j->nops; i++)
        if (strcmp(j->ops[i]->name, op) == 0) {
            sop *o = j->ops[i];
            st->records_in = o->records_in;
            st->records_out = o->records_out;
            st->backpressure_ns = o->backpressure_ns;
            /* During a run: the lowest of its subtasks' watermarks now;
             * after it: the lowest they ended with. */
            pthread_mutex_lock((pthread_mutex_t *)&j->lock);
            int running = j->running;
            pthread_mutex_unlock((pthread_mutex_t *)&j->lock);
            int64_t wm = INT64_MAX;
            if (running && o->sub_wm) {
                for (int k = 0; k < o->sub_n; k++) {
                    int64_t w = atomic_load_explicit(&o->sub_wm[k], memory_order_relaxed);
                    if (w < wm)
                        wm = w;
                }
            } else {
                wm = o->watermark;
            }
            st->watermark = wm;
            return 0;
        }
    return -ENOENT;
}
