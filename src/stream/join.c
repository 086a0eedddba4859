/* SPDX-License-Identifier: Apache-2.0 */
/*
 * join.c - joins of two keyed streams (weir_stream_interval_join,
 * weir_stream_window_join), as keyed operators over the union of the two
 * inputs (input 0 left, input 1 right) on namespaced keyed state and
 * event-time timers.
 *
 * Interval join. Each record is buffered under the state WEIR__STATE_JOIN with the
 * namespace [side][ts][seq]: the backend keeps a side's records ordered by
 * time (an out-of-order record is inserted in its place, one search). A
 * record with ts above the watermark (on time) is matched against the
 * other side's records of the key in its interval - a left record at ts
 * pairs with right records in [ts + lower, ts + upper] - by a seek to the
 * interval's start and a walk that stops past its end, so a record costs
 * O(log n + matches) however far one input lags behind the other. A left
 * record goes once the watermark reaches ts + upper (every right partner
 * would be late from then on), a right one once it reaches ts - lower: an
 * event-time timer, which drops the side's expired prefix and stops at its
 * first live entry. A record at or below the watermark when it arrives is
 * late: side output. On a backend whose scans may wait (the remote one),
 * the match runs as a continuation: the record asks for the other side's
 * entries of its key to be fetched (weir__ctl_scan) and waits as data
 * while the subtask goes on; the key gate keeps a key's records in order,
 * so each pair is still found once, by the later of its two records. The
 * timers' scans are fetched in the timers' prefetch rounds
 * (join_timer_reads).
 *
 * Window join. Records are buffered per window under the namespace
 * [end][start][side][seq]; when the window fires (event-time timer at
 * end - 1) every left record is paired with every right record of that
 * window and key, in arrival order, and the window's records are dropped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "stream/controller.h"
#include "stream/stream_int.h"

typedef struct join {
    int kind; /* 0 interval, 1 window */
    int64_t lower, upper;
    weir_window w;
    weir_join_fn fn;
    void *arg;
} join;

static int64_t neg(int64_t v)
{
    return v == INT64_MIN ? INT64_MAX : -v;
}

/* A copy of the buffered entries a scan found (the scan's views die with
 * the next state call, and fn may emit). */
typedef struct hit {
    int64_t ts;
    uint8_t *data;
    size_t len;
    uint8_t ns[33];
    size_t nslen;
} hit;

typedef struct hits {
    hit *v;
    size_t n, cap;
    int side;        /* interval: the side to collect */
    int64_t lo, hi;  /* interval: ts range (the scan seeks to lo); window: (unused) */
    uint8_t win[16]; /* window: [end][start] to collect */
    int window;
    int drop_upto; /* interval cleanup: the namespaces only, not the values */
} hits;

static int add_hit(hits *h, int64_t ts, const void *val, size_t vlen, const void *ns, size_t nslen)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 8;
        hit *v = weir__realloc(h->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        h->v = v;
        h->cap = cap;
    }
    hit *x = &h->v[h->n];
    x->data = weir__malloc(vlen ? vlen : 1);
    if (!x->data)
        return -ENOMEM;
    if (vlen)
        memcpy(x->data, val, vlen);
    x->len = vlen;
    x->ts = ts;
    x->nslen = nslen < sizeof(x->ns) ? nslen : sizeof(x->ns);
    memcpy(x->ns, ns, x->nslen);
    h->n++;
    return 0;
}

static void free_hits(hits *h)
{
    for (size_t i = 0; i < h->n; i++)
        weir__free(h->v[i].data);
    weir__free(h->v);
}

/* ---- interval join --------------------------------------------------------------------------- */
/* The buffered entries of the current key in the join state whose namespace
 * starts with the first plen bytes of from, from the first one >= from on:
 * one seek in the backend, then the walk (fn sees the namespace only). */
typedef struct from_scan {
    size_t skip; /* the state key's bytes before the namespace */
    int (*fn)(void *arg, const void *ns, size_t nslen, const void *val, size_t vlen);
    void *arg;
} from_scan;

static int from_scan_fn(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
    from_scan *f = arg;
    return f->fn(f->arg, (const uint8_t *)key + f->skip, klen - f->skip, val, vlen);
}

static int ns_scan_from(weir_ctx *ctx, const uint8_t *from, size_t flen, size_t plen,
                        int (*fn)(void *arg, const void *ns, size_t nslen, const void *val,
                                  size_t vlen),
                        void *arg)
{
    size_t kl;
    int e = weir__state_key(ctx, WEIR__STATE_JOIN, from, flen, &kl);
    if (e < 0)
        return e;
    from_scan f = {kl - flen, fn, arg};
    return weir_state_scan_from(ctx->backend, ctx->rc->kg, ctx->keybuf, kl - flen + plen,
                                ctx->keybuf, kl, from_scan_fn, &f);
}

/* Entries of one side from h->lo on (the scan seeks there), up to h->hi. */
static int interval_scan(void *arg, const void *nsv, size_t nslen, const void *val, size_t vlen)
{
    hits *h = arg;
    const uint8_t *ns = nsv;
    if (nslen != 17)
        return -EBADMSG;
    int64_t ts = weir__get_time(ns + 1);
    if (ts > h->hi)
        return 1; /* ordered by time: nothing further matches */
    /* Cleanup needs the namespaces only. */
    return add_hit(h, ts, val, h->drop_upto ? 0 : vlen, ns, nslen);
}

/* The side's buffered entries with lo <= ts <= hi, in time order. */
static int interval_range(weir_ctx *ctx, hits *h)
{
    uint8_t from[9];
    from[0] = (uint8_t)h->side;
    weir__put_time(from + 1, h->lo);
    int e = ns_scan_from(ctx, from, sizeof(from), 1, interval_scan, h);
    return e > 0 ? 0 : e;
}

static int interval_match(weir_ctx *ctx, void *state, const weir_rec *in, int err, const void *val,
                          size_t vlen, void *arg);

static int interval_process(weir_ctx *ctx, join *jn, const weir_rec *in)
{
    int side = weir_ctx_input(ctx);
    if (side != 0 && side != 1)
        return weir_fail(ctx, -EINVAL, "a join has two inputs");
    /* At or below the watermark: late (no partner on time could pair with
     * it after the timers below dropped them). */
    int64_t wm = weir_ctx_watermark(ctx);
    if (in->ts <= wm)
        return weir_emit_side(ctx, in->data, in->len, in->ts);
    /* Buffer it, with a timer to drop it once no partner can come. */
    uint8_t ns[17];
    ns[0] = (uint8_t)side;
    weir__put_time(ns + 1, in->ts);
    weir__put_be64(ns + 9, ++ctx->seq);
    int e = weir__ns_put(ctx, WEIR__STATE_JOIN, ns, 17, in->data, in->len);
    /* A right partner of a left record has ts <= ts + upper, late once the
     * watermark reaches that: the left record goes then (a right one once
     * the watermark reaches ts - lower). Saturated: kept to the end. */
    int64_t expire =
        side == 0 ? weir__sat_add(in->ts, jn->upper) : weir__sat_add(in->ts, neg(jn->lower));
    if (!e && expire != INT64_MAX)
        e = weir_timer_register(ctx, WEIR_TIME_EVENT, expire);
    if (e)
        return e;
    /* Partners on the other side, once its entries of the key are at hand:
     * the prefix interval_range's scan reads. */
    uint8_t other = (uint8_t)(1 - side);
    size_t kl;
    if ((e = weir__state_key(ctx, WEIR__STATE_JOIN, &other, 1, &kl)) < 0)
        return e;
    return weir__ctl_scan(ctx, in, ctx->rc->kg, ctx->keybuf, kl, interval_match, NULL);
}

/* The partners of in (its own entry is buffered), through jn->fn. */
static int interval_match(weir_ctx *ctx, void *state, const weir_rec *in, int err, const void *val,
                          size_t vlen, void *arg)
{
    (void)err; /* a failed prefetch only means the scan below reads itself */
    (void)val;
    (void)vlen;
    (void)arg;
    join *jn = state;
    int side = weir_ctx_input(ctx);
    int e = 0;
    hits h = {.side = 1 - side};
    if (side == 0) {
        h.lo = weir__sat_add(in->ts, jn->lower);
        h.hi = weir__sat_add(in->ts, jn->upper);
    } else {
        h.lo = weir__sat_add(in->ts, neg(jn->upper));
        h.hi = weir__sat_add(in->ts, neg(jn->lower));
    }
    e = interval_range(ctx, &h);
    for (size_t i = 0; !e && i < h.n; i++) {
        weir_rec other = {h.v[i].data, h.v[i].len, h.v[i].ts};
        e = side == 0 ? jn->fn(ctx, in, &other, jn->arg) : jn->fn(ctx, &other, in, jn->arg);
    }
    free_hits(&h);
    return e;
}

/* Drop what can no longer pair: left records with ts + upper <= wm, right
 * records with ts - lower <= wm - each side's expired prefix, the walk
 * stopping at its first live entry. */
static int interval_timer(weir_ctx *ctx, join *jn, int64_t when)
{
    (void)when;
    int64_t wm = weir_ctx_watermark(ctx);
    int e = 0;
    for (int side = 0; side < 2 && !e; side++) {
        hits h = {.side = side, .drop_upto = 1, .lo = INT64_MIN};
        h.hi = side == 0 ? weir__sat_add(wm, neg(jn->upper)) : weir__sat_add(wm, jn->lower);
        e = interval_range(ctx, &h);
        for (size_t i = 0; !e && i < h.n; i++)
            e = weir__ns_del(ctx, WEIR__STATE_JOIN, h.v[i].ns, h.v[i].nslen);
        free_hits(&h);
    }
    return e;
}

/* ---- window join ------------------------------------------------------------------------------
 */
static int window_scan(void *arg, const void *nsv, size_t nslen, const void *val, size_t vlen)
{
    hits *h = arg;
    const uint8_t *ns = nsv;
    if (nslen != 33)
        return -EBADMSG;
    return add_hit(h, 0, val, vlen, ns, nslen);
}

static int window_process(weir_ctx *ctx, join *jn, const weir_rec *in)
{
    int side = weir_ctx_input(ctx);
    if (side != 0 && side != 1)
        return weir_fail(ctx, -EINVAL, "a join has two inputs");
    int64_t size = jn->w.size;
    int64_t slide = weir__window_step(&jn->w);
    int64_t wm = weir_ctx_watermark(ctx);
    int64_t r = in->ts % slide;
    int64_t last = in->ts - (r < 0 ? r + slide : r);
    int any = 0;
    int more = 1; /* 0 at the earliest window there can be */
    for (int64_t start = last; more && weir__sat_add(start, size) > in->ts;
         start -= more ? slide : 0) {
        int64_t end = weir__sat_add(start, size);
        more = start >= INT64_MIN + slide;
        if (end - 1 <= wm)
            continue; /* that window has fired */
        any = 1;
        uint8_t ns[33];
        weir__put_time(ns, end);
        weir__put_time(ns + 8, start);
        ns[16] = (uint8_t)side;
        weir__put_be64(ns + 17, ++ctx->seq);
        weir__put_time(ns + 25, in->ts);
        int e = weir__ns_put(ctx, WEIR__STATE_JOIN, ns, 33, in->data, in->len);
        if (!e)
            e = weir_timer_register(ctx, WEIR_TIME_EVENT, end - 1);
        if (e)
            return e;
    }
    return any ? 0 : weir_emit_side(ctx, in->data, in->len, in->ts);
}

static int window_timer(weir_ctx *ctx, join *jn, int64_t when)
{
    int64_t size = jn->w.size;
    int64_t slide = weir__window_step(&jn->w);
    /* Every window of this key ending at when + 1 (one per start). */
    int64_t end = when + 1;
    (void)slide;
    hits h = {.window = 1};
    weir__put_time(h.win, end);
    weir__put_time(h.win + 8, end - size);
    /* The window's entries: a seek to [end][start], a walk of its own. */
    int e = ns_scan_from(ctx, h.win, 16, 16, window_scan, &h);
    for (size_t i = 0; !e && i < h.n; i++) {
        if (h.v[i].ns[16] != 0)
            continue;
        for (size_t k = 0; !e && k < h.n; k++) {
            if (h.v[k].ns[16] != 1)
                continue;
            weir_rec l = {h.v[i].data, h.v[i].len, weir__get_time(h.v[i].ns + 25)};
            weir_rec rr = {h.v[k].data, h.v[k].len, weir__get_time(h.v[k].ns + 25)};
            e = jn->fn(ctx, &l, &rr, jn->arg);
        }
    }
    for (size_t i = 0; !e && i < h.n; i++)
        e = weir__ns_del(ctx, WEIR__STATE_JOIN, h.v[i].ns, h.v[i].nslen);
    free_hits(&h);
    return e;
}

/* ---- the operator ---------------------------------------------------------------------------- */
static int join_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    *state = arg;
    return 0;
}

static int join_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    join *jn = state;
    return jn->kind == 0 ? interval_process(ctx, jn, in) : window_process(ctx, jn, in);
}

static int join_timer(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    join *jn = state;
    if (domain != WEIR_TIME_EVENT)
        return 0;
    return jn->kind == 0 ? interval_timer(ctx, jn, when) : window_timer(ctx, jn, when);
}

/* The scans join_timer makes for the timer at `when` of the current key,
 * announced for the timers' prefetch round (timers.c): an interval join's
 * two sides (their expired prefixes), a window join's window. 0, 1 (the
 * round is full) or a negative errno. */
static int join_timer_reads(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    join *jn = state;
    if (domain != WEIR_TIME_EVENT)
        return 0;
    if (jn->kind == 0) {
        int e = 0;
        for (uint8_t side = 0; side < 2 && !e; side++)
            e = weir__ns_prefetch_scan(ctx, WEIR__STATE_JOIN, &side, 1);
        return e;
    }
    uint8_t win[16];
    weir__put_time(win, when + 1);
    weir__put_time(win + 8, when + 1 - jn->w.size);
    return weir__ns_prefetch_scan(ctx, WEIR__STATE_JOIN, win, 16);
}

static weir_stream *make_join(weir_stream *left, weir_stream *right, const char *name, join *spec)
{
    if (!left || !right)
        return NULL;
    weir_job *j = left->j;
    if (j->err)
        return NULL;
    const char *why = NULL;
    if (right->j != j)
        why = "both inputs must come from the same job";
    else if (left->edge != EDGE_HASH || right->edge != EDGE_HASH)
        why = "both inputs must be keyed (key_by)";
    else if (!spec->fn)
        why = "needs a join function";
    else if (spec->kind == 0 && spec->lower > spec->upper)
        why = "lower bound above the upper bound";
    else if (spec->kind == 1 &&
             !((spec->w.kind == WEIR_WINDOW_TUMBLING && spec->w.size > 0) ||
               (spec->w.kind == WEIR_WINDOW_HOPPING && spec->w.size > 0 && spec->w.slide > 0)))
        why = "a window join takes a tumbling or hopping window with size (and slide) > 0";
    if (why) {
        weir__stream_fail(j, -EINVAL, "join \"%s\": %s", name ? name : "?", why);
        return NULL;
    }
    join *state = weir__malloc(sizeof(*state));
    if (!state) {
        weir__stream_fail(j, -ENOMEM, "out of memory");
        return NULL;
    }
    *state = *spec;
    weir_stream *both[2] = {left, right};
    weir_stream *u = weir_stream_union(both, 2);
    weir_op_def def = {.open = join_open, .process = join_process, .on_timer = join_timer};
    weir_stream *out = u ? weir_stream_process(u, name, &def, state) : NULL;
    if (!out) {
        weir__free(state);
        return NULL;
    }
    out->owned = state;
    out->from->timer_reads = join_timer_reads;
    return out;
}

weir_stream *weir_stream_interval_join(weir_stream *left, weir_stream *right, const char *name,
                                       int64_t lower, int64_t upper, weir_join_fn fn, void *arg)
{
    join spec = {.kind = 0, .lower = lower, .upper = upper, .fn = fn, .arg = arg};
    return make_join(left, right, name, &spec);
}

weir_stream *weir_stream_window_join(weir_stream *left, weir_stream *right, const char *name,
                                     const weir_window *w, weir_join_fn fn, void *arg)
{
    if (!w) {
        if (left)
            weir__stream_fail(left->j, -EINVAL, "join \"%s\": needs a window", name ? name : "?");
        return NULL;
    }
    join spec = {.kind = 1, .w = *w, .fn = fn, .arg = arg};
    return make_join(left, right, name, &spec);
}
