/* SPDX-License-Identifier: Apache-2.0 */
/*
 * task.c - a subtask: the loop that runs one chain's operators over its
 * mailbox, and what its operators call (weir_emit, the context calls).
 *
 * Data. Inside a chain weir_emit() calls the next operator's process()
 * directly. At a chain's tail it routes the record (forward, hash by key
 * group, rebalance, broadcast) into the open batch of the channel to the
 * chosen subtask. A batch goes out when full, and every open batch is
 * flushed when the subtask is about to wait for input (or after each call
 * of a source's next()), so records never sit in a half-full batch while
 * the pipeline idles.
 *
 * The mailbox. A consumer has one queue (an unbounded weir_chan, `inq`)
 * that all its channels deliver into and that everyone else posts to
 * (weir__subtask_post): batches, control items (watermark, barrier, end of
 * input, idle), due processing-time timers, checkpoint notices and
 * completions. One wait covers them all, and all of them run on the
 * subtask's own thread. What bounds memory is each channel's credits
 * (channel.h): a producer takes a credit before it sends a batch and the
 * consumer gives it back after processing it. Control items ride without
 * credits (a producer sends at most one per advance), after the channel's
 * open batch, so each channel's items arrive in order. A source has a
 * mailbox too, for what is posted to it, and looks at it between two calls
 * of its next().
 *
 * A record's context. Each record of a keyed chain carries its own
 * context (weir__rctx: key, key group, timestamp), computed from the
 * input's key function and checked against the subtask's key-group range,
 * and goes to the controller seam (controller.h) or straight to the head's
 * process(): there is no single current key per subtask.
 *
 * Watermarks. A source's watermark is its largest timestamp minus its
 * bound minus one (source_watermark), advanced after each next(). A
 * consumer keeps each input's watermark; its own is the minimum over
 * inputs that have not ended and are not idle. An advance calls
 * on_watermark() down the chain, then goes out on every channel. At the
 * end of all inputs the watermark becomes WEIR_WATERMARK_MAX, finish()
 * runs down the chain, and end-of-input goes out; with checkpoints the
 * subtask then takes part in the job's final checkpoint before it ends
 * (end_with_final).
 *
 * Idleness. A source whose next() calls emitted nothing for its idle
 * timeout (weir_source_def.idle_timeout_ms, else the run's) sends IDLE 1 on
 * all its channels, and IDLE 0 after its next records; a consumer leaves
 * such an input out of its minimum until IDLE 0 or a watermark arrives on
 * it (not a batch: an idle subtask may emit from a timer while its
 * watermark stands still). A subtask whose open
 * inputs are all idle is idle itself and says so downstream, and active
 * again once one of them is. With the run's idle_timeout_ms a consumer
 * also counts an input silent that long as idle: the producer may be a
 * source waiting inside next(), which cannot say anything.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "stream/ckpt_link.h"
#include "stream/controller.h"
#include "stream/stream_int.h"
#include "weir/sync.h"

static void metrics_push(subtask *st);

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
    int k = ctx->backend && ctx->rc;
    if (len)
        *len = k ? ctx->rc->klen : 0;
    return k ? ctx->rc->key : NULL;
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

int weir__stream_push_all(subtask *st)
{
    for (int i = 0; st->held && i < st->nouts; i++) {
        output *o = &st->outs[i];
        for (int t = 0; t < o->par; t++) {
            channel *ch = o->targets[t];
            int e = ch && ch->ops->push ? ch->ops->push(ch) : 0;
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
        if (!(b = ch->open = weir__batch_new(len)))
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
    if (st->at_end) /* the final checkpoint's pre_commit: its end of input went out */
        return -EPIPE;
    ctx->out++;
    if (st->source && ctx == st->ctx && ts > st->max_ts)
        st->max_ts = ts;
    weir_ctx *n = ctx->next;
    if (n) {
        n->in++;
        weir_rec r = {data, len, ts};
        int e = n->op->def.process(n, n->state, &r);
        return e < 0 ? weir__op_error(n, e, "process") : e;
    }
    return route(st, ctx->op, 0, data, len, ts);
}

int weir_emit_side(weir_ctx *ctx, const void *data, size_t len, int64_t ts)
{
    if (len > WEIR_MAX_RECORD)
        return -E2BIG;
    if (!data && len)
        return -EINVAL;
    if (ctx->st->at_end)
        return -EPIPE;
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

/* The subtask's watermark moves to wm: down the chain, then out. Every
 * record before it has finished (the controller's drain, or its own
 * release of the watermark). */
int weir__stream_release_wm(subtask *st, int64_t wm)
{
    st->wm = wm;
    /* Keyed: the event-time timers the watermark passed fire first (in
     * time order), then the hooks, then the watermark goes downstream. */
    int e = weir__timers_fire(st, WEIR_TIME_EVENT, wm);
    if (e < 0)
        return weir__op_error(&st->ctx[0], e, "on_timer");
    for (int i = 0; i < st->nops; i++) {
        weir_ctx *c = &st->ctx[i];
        if (c->op->def.on_watermark) {
            int e = c->op->def.on_watermark(c, c->state, wm);
            if (e < 0)
                return weir__op_error(c, e, "on_watermark");
        }
    }
    return weir__stream_broadcast(st, IT_WATERMARK, wm);
}

/* The input's watermark moved to wm. A controller that takes watermarks
 * (the async one) releases it when the records before it are done; else
 * the held records run now and it is released at once. */
static int advance(subtask *st, int64_t wm)
{
    if (st->ctl && st->ctl->ops->watermark) {
        if (wm <= st->wm_given)
            return 0;
        st->wm_given = wm;
        return st->ctl->ops->watermark(st->ctl, &st->ctx[0], wm);
    }
    if (wm <= st->wm)
        return 0;
    int e = weir__stream_drain(st);
    return e ? e : weir__stream_release_wm(st, wm);
}

/* ---- the subtask -------------------------------------------------------------------------- */
static int finish_chain(subtask *st)
{
    int e = weir__stream_drain(st);
    if (!e)
        e = advance(st, WEIR_WATERMARK_MAX);
    /* A controller holding the final watermark releases it (only one that
     * takes watermarks: the others' drain ran in advance already). */
    if (!e && st->ctl && st->ctl->ops->watermark)
        e = weir__stream_drain(st);
    for (int i = 0; i < st->nops && !e; i++) {
        weir_ctx *c = &st->ctx[i];
        if (c->op->def.finish && (e = c->op->def.finish(c, c->state)) < 0)
            e = weir__op_error(c, e, "finish");
        /* Event-time timers the head's finish() registered (per key, from
         * weir_keys_iterate, say) are past the final watermark already:
         * they fire now, before the rest of the chain finishes. */
        if (!e && i == 0 && (e = weir__timers_fire(st, WEIR_TIME_EVENT, WEIR_WATERMARK_MAX)) < 0)
            e = weir__op_error(c, e, "on_timer");
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

/* ---- the mailbox -------------------------------------------------------------------------- */
int weir__subtask_post(subtask *st, item it)
{
    if (!st->inq)
        return -EPIPE;
    int e = weir_chan_try_send(st->inq, &it); /* unbounded: never full */
    if (!e)
        atomic_fetch_add_explicit(&st->posted, 1, memory_order_release);
    return e;
}

/* An item someone posted (not one of the inputs'). */
static int handle_posted(subtask *st, const item *it)
{
    atomic_fetch_sub_explicit(&st->posted, 1, memory_order_relaxed);
    switch (it->kind) {
    case IT_NOTIFY:
        weir__ckpt_on_complete(st, (uint64_t)it->wm);
        return 0;
    case IT_ABORT:
        if ((uint64_t)it->wm == WEIR__CK_NO_FINAL ||
            (st->final_id && (uint64_t)it->wm == st->final_id))
            st->final_aborted = 1; /* failed at its end (end_with_final) */
        if ((uint64_t)it->wm != WEIR__CK_NO_FINAL)
            weir__ckpt_on_abort(st, (uint64_t)it->wm);
        return 0;
    case IT_TRIGGER: /* a source: checkpoint wm starts here (not after its end) */
        if (st->source && !st->at_end && (uint64_t)it->wm > st->last_barrier)
            return weir__ckpt_barrier(st, (uint64_t)it->wm);
        return 0;
    case IT_FINAL: /* taken at the end of input (end_with_final) */
        if ((uint64_t)it->wm > st->final_id)
            st->final_id = (uint64_t)it->wm;
        return 0;
    case IT_CALL:
        return it->mail->fn(st, it->mail);
    case IT_TIMER: {
        if (st->at_end) /* timers are over with the input (a late post) */
            return 0;
        /* A timer of a key runs after that key's records before it: the
         * async controller's records in flight finish first. */
        int e = st->ctl && st->ctl->ops->watermark ? weir__stream_drain(st) : 0;
        if (e < 0)
            return e;
        e = weir__timers_fire(st, WEIR_TIME_PROCESSING, weir_time_now());
        if (e < 0)
            return weir__op_error(&st->ctx[0], e, "on_timer");
        return weir__timers_arm(st);
    }
    default: /* IT_FAIL */
        return it->wm < 0 ? (int)it->wm : -EPROTO;
    }
}

/* A source's mail, between two calls of its next(): one relaxed load when
 * there is none. */
static int source_mail(subtask *st)
{
    item it;
    while (atomic_load_explicit(&st->posted, memory_order_acquire) > 0 &&
           weir_chan_try_recv(st->inq, &it) == 0) {
        int e = handle_posted(st, &it);
        if (e < 0)
            return e;
    }
    return 0;
}

/* The subtask tells its consumers it is idle (1: leave me out of your
 * watermark minimum) or active again (0). */
static int set_idle(subtask *st, int idle)
{
    st->out_idle = idle;
    return weir__stream_broadcast(st, IT_IDLE, idle);
}

/* A source emitted (or not) in one call of next(): it is idle once it has
 * emitted nothing for idle_ns, active again when it emits. */
static int source_idleness(subtask *st, int emitted, int64_t idle_ns)
{
    int64_t now = weir_time_now();
    if (emitted) {
        st->last_emit = now;
        return st->out_idle ? set_idle(st, 0) : 0;
    }
    return !st->out_idle && now - st->last_emit > idle_ns ? set_idle(st, 1) : 0;
}

static int run_source(subtask *st)
{
    sop *src = st->ops[0];
    weir_ctx *c = &st->ctx[0];
    int64_t idle_ms =
        src->src.idle_timeout_ms ? src->src.idle_timeout_ms : st->r->o.idle_timeout_ms;
    int64_t idle_ns = idle_ms > 0 ? idle_ms * WEIR_MSEC : 0;
    st->last_emit = weir_time_now();
    for (;;) {
        uint64_t before = c->out;
        int r = src->src.next(c, c->state);
        if (r < 0)
            return weir__op_error(c, r, "next");
        int e = weir__stream_flush_all(st);
        if (!e && idle_ns && r != 1)
            e = source_idleness(st, c->out != before, idle_ns);
        st->max_seen = st->max_ts;
        metrics_push(st);
        if (!e && src->src.max_out_of_orderness >= 0)
            e = advance(st, source_watermark(st->max_ts, src->src.max_out_of_orderness));
        if (!e) /* the end of a step: its batches and watermark go out together */
            e = weir__stream_push_all(st);
        if (e)
            return e;
        if (r == 1)
            return finish_chain(st);
        if ((e = source_mail(st)) < 0)
            return e;
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
        in->idle = in->said_idle || (idle_ns > 0 && !in->blocked && now - in->last > idle_ns);
        if (in->idle)
            continue;
        counted++;
        if (in->wm < m)
            m = in->wm;
    }
    *out = m;
    *any = counted;
}

/* An input's watermark or idleness changed (or time passed): the
 * watermark follows the inputs that count; when none does (every open
 * input idle) the subtask is idle itself, and says so downstream. */
static int inputs_moved(subtask *st, int64_t now, int64_t idle_ns)
{
    int64_t m;
    int any;
    recompute(st, now, idle_ns, &m, &any);
    if (!any) {
        if (st->out_idle)
            return 0;
        /* A watermark a controller still holds goes out first: one after
         * the IDLE would make this subtask active again downstream, its
         * watermark standing still there. */
        int e = st->ctl && st->ctl->ops->watermark ? weir__stream_drain(st) : 0;
        return e ? e : set_idle(st, 1);
    }
    if (st->out_idle) {
        int e = set_idle(st, 0);
        if (e < 0)
            return e;
    }
    return m != INT64_MAX ? advance(st, m) : 0;
}

static int process_batch(subtask *st, in_state *in, batch *b)
{
    weir_ctx *c = &st->ctx[0];
    sop *head = st->ops[0];
    weir__controller *ctl = st->ctl;
    int e = 0;
    c->side = in->side;
    for (uint32_t i = 0; i < b->n && !e; i++) {
        weir_rec r = {b->data + b->off[i], b->len[i], b->ts[i]};
        c->in++;
        if (r.ts > st->max_seen)
            st->max_seen = r.ts;
        if (!st->backend) {
            if (ctl)
                e = ctl->ops->admit(ctl, c, NULL, &r);
            else if ((e = head->def.process(c, c->state, &r)) < 0)
                e = weir__op_error(c, e, "process");
            continue;
        }
        weir__rctx rc = {.ts = r.ts};
        if ((e = in->key(&r, in->key_arg, &rc.key, &rc.klen)) < 0) {
            weir__stream_fail(st->r->j, e, "key function into \"%s\" failed: %s", head->name,
                              weir_strerror(e));
            break;
        }
        /* The group the producer routed by; it must be one of ours (a
         * batch that crossed a network is not trusted to say so). */
        rc.kg = b->kg[i] != NO_KG ? b->kg[i]
                                  : weir_key_group(weir_key_hash(rc.key, rc.klen), WEIR_KEY_GROUPS);
        if (rc.kg < st->backend->first_kg || rc.kg >= st->backend->end_kg) {
            e = -EPROTO;
            weir__stream_fail(st->r->j, e,
                              "\"%s\" subtask %d got a record of key group %d on channel %u; it "
                              "owns groups [%d, %d)",
                              head->name, st->index, rc.kg, in->ch->id, st->backend->first_kg,
                              st->backend->end_kg);
            break;
        }
        e = ctl ? ctl->ops->admit(ctl, c, &rc, &r) : weir__ctl_run(c, &rc, &r);
    }
    if (!e && ctl && ctl->ops->flush)
        ctl->ops->flush(ctl);
    return e;
}

int weir_ctx_process(weir_ctx *ctx, const void *key, size_t len, const weir_rec *in)
{
    if (!ctx || !in || (!key && len))
        return -EINVAL;
    weir__rctx rc = {key, len, 0, in->ts};
    if (ctx->backend) {
        rc.kg = weir_key_group(weir_key_hash(key, len), WEIR_KEY_GROUPS);
        if (rc.kg < ctx->backend->first_kg || rc.kg >= ctx->backend->end_kg)
            return -EINVAL;
    }
    return weir__ctl_run(ctx, ctx->backend ? &rc : ctx->rc, in);
}

/* The head's controller (if any) finishes what it holds. */
int weir__stream_drain(subtask *st)
{
    return st->ctl ? st->ctl->ops->drain(st->ctl, &st->ctx[0]) : 0;
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
        /* Now and then while input keeps coming without a wait: let the
         * other subtasks of this thread run. */
        if (++turn % 16 == 0 &&
            ((e = weir__stream_push_all(st)) < 0 || (e = weir_task_yield()) < 0))
            return e;
        /* Items held back during an alignment go first, then the queue. */
        e = weir__itemq_pop(&st->replay, &it);
        if (e == -EAGAIN)
            e = weir_chan_try_recv(st->inq, &it);
        if (e == -EAGAIN) {
            if ((e = weir__stream_flush_all(st)) < 0)
                return e;
            /* Frames held for a socket (channel.h): let the thread's other
             * tasks run once before they go - input that comes meanwhile is
             * processed first, and its frames go out with them (a watermark
             * held replaced by the next). At most 16 items, as above. */
            if (st->held) {
                if ((e = weir_task_yield()) < 0)
                    return e;
                if ((e = weir_chan_try_recv(st->inq, &it)) == 0)
                    goto got;
            }
            if ((e = weir__stream_push_all(st)) < 0)
                return e;
            int64_t deadline =
                idle_ns ? weir_time_after_ms(st->r->o.idle_timeout_ms) : WEIR_FOREVER;
            e = weir_chan_recv(st->inq, &it, deadline);
            if (e == -ETIMEDOUT) {
                if ((e = inputs_moved(st, weir_time_now(), idle_ns)) < 0)
                    return e;
                continue;
            }
        }
        if (e)
            return e;
    got:
        if (it.kind >= IT_NOTIFY) {
            if ((e = handle_posted(st, &it)) < 0)
                return e;
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
        if (it.kind == IT_IDLE) {
            in->said_idle = it.wm != 0;
            if ((e = inputs_moved(st, in->last, idle_ns)) < 0)
                return e;
            continue;
        }
        /* A watermark says its producer is active; a batch alone does
         * not (an idle subtask may still emit, from a timer, while its
         * watermark stands still). A batch on an input that did not say
         * it was idle may end this subtask's own idleness (an input that
         * was only silent). */
        if (it.kind == IT_WATERMARK)
            in->said_idle = 0;
        else if (it.kind == IT_BATCH && st->out_idle && !in->said_idle &&
                 (e = inputs_moved(st, in->last, idle_ns)) < 0)
            return e;
        if (it.kind == IT_BATCH) {
            e = process_batch(st, in, it.b);
            weir__batch_free(it.b);
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
        if (open > 0 && (e = inputs_moved(st, in->last, idle_ns)) < 0)
            return e;
    }
    return finish_chain(st);
}

/* With checkpoints, a subtask whose input ended takes part in the job's
 * final checkpoint and ends once it completed (its commit hooks ran), so
 * what its two-phase sinks hold since the last checkpoint is committed
 * through a checkpoint before the job completes (ckpt_link.h). It asks for
 * the final's id unless it was told already. Its mailbox still brings
 * completions of earlier checkpoints, its persister's failures and the
 * final's id; its inputs have all ended, and its timers and a source's
 * triggers are over. The final is abandoned only when the job fails. */
static int end_with_final(subtask *st)
{
    st->at_end = 1;
    weir__timers_disarm(st);
    int e = weir__ckpt_request_final(st), taken = 0;
    if (e < 0)
        weir__stream_fail(st->r->j, e, "\"%s\" subtask %d: asking for the final checkpoint: %s",
                          st->ops[0]->name, st->index, weir_strerror(e));
    while (!e) {
        if (st->final_id && !taken) {
            taken = 1;
            if ((e = weir__ckpt_final_barrier(st, st->final_id)) < 0)
                break;
        }
        if (taken && st->committed >= st->final_id)
            return 0;
        if (st->final_aborted || atomic_load(&st->r->no_final)) {
            e = -EIO;
            if (st->final_id)
                weir__stream_fail(st->r->j, e,
                                  "\"%s\" subtask %d: the final checkpoint %llu was abandoned",
                                  st->ops[0]->name, st->index, (unsigned long long)st->final_id);
            else
                weir__stream_fail(st->r->j, e,
                                  "\"%s\" subtask %d: the checkpoint coordinator stopped before "
                                  "the final checkpoint",
                                  st->ops[0]->name, st->index);
            break;
        }
        item it;
        if ((e = weir_chan_recv(st->inq, &it, WEIR_FOREVER)) < 0)
            break;
        if (it.kind < IT_NOTIFY) { /* nothing comes on an input after its end */
            if (it.kind == IT_BATCH)
                weir__batch_free(it.b);
            continue;
        }
        if (it.kind == IT_FAIL) { /* the link to the coordinator broke, say */
            e = it.wm < 0 ? (int)it.wm : -EPROTO;
            weir__stream_fail(st->r->j, e,
                              "\"%s\" subtask %d: waiting for the final checkpoint: %s",
                              st->ops[0]->name, st->index, weir_strerror(e));
            break;
        }
        if ((e = handle_posted(st, &it)) < 0)
            break;
    }
    return e;
}

intptr_t weir__subtask_main(void *arg)
{
    subtask *st = arg;
    int e = 0, opened = 0;
    for (; opened < st->nops; opened++) {
        weir_ctx *c = &st->ctx[opened];
        sop *o = c->op;
        int (*open)(weir_ctx *, void *, void **) = o->kind == OP_SOURCE ? o->src.open : o->def.open;
        c->state = o->arg;
        if (open && (e = open(c, o->arg, &c->state)) < 0) {
            weir__op_error(c, e, "open");
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
    if (!e && st->backend) /* restored processing-time timers */
        e = weir__timers_arm(st);
    /* Restored from the job's final checkpoint: the job had ended, and
     * opening its operators was all there was left (two-phase sinks
     * commit what the checkpoint covered). */
    int ended_before = weir__ckpt_restored_final(st->r);
    if (!e && !ended_before)
        e = st->source ? run_source(st) : run_operator(st);
    if (!e && !ended_before && weir__ckpt_has_final(st->r))
        e = end_with_final(st);
    weir__timers_disarm(st); /* on this thread, before the run can end */
    int pe = weir__ckpt_end_persists(st, !e);
    if (!e)
        e = pe;
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
    if (st->r->ended)
        st->r->ended(st->r->ended_arg, st, e);
    return e;
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
        if (c->op->sub && st->index < c->op->sub_n) {
            weir__sub_figures *f = &c->op->sub[st->index];
            atomic_fetch_add_explicit(&f->in, din, memory_order_relaxed);
            atomic_fetch_add_explicit(&f->out, dout, memory_order_relaxed);
            atomic_store_explicit(&f->wm, st->wm, memory_order_relaxed);
        }
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
        if (tail->op->sub && st->index < tail->op->sub_n)
            atomic_fetch_add_explicit(&tail->op->sub[st->index].bp_ns, d, memory_order_relaxed);
        if (tail->m_bp)
            weir_counter_add_double(tail->m_bp, (double)d / 1e9);
        st->bp_pushed = st->bp_ns;
    }
}
