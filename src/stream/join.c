/* SPDX-License-Identifier: Apache-2.0 */
/*
 * join.c - joins of two keyed streams (weir_stream_interval_join,
 * weir_stream_window_join), as keyed operators over the union of the two
 * inputs (input 0 left, input 1 right) on namespaced keyed state and
 * event-time timers.
 *
 * Interval join. Each record is buffered under the state "j" with the
 * namespace [side][ts][seq] (ordered: a side's records by time), matched
 * against the other side's buffered records of the key, and dropped by a
 * timer once no partner can still come: a left record at ts pairs with
 * right records in [ts + lower, ts + upper], and a right record arriving
 * at the watermark is not late, so the left record can go once the
 * watermark is past ts + upper; a right record (partners in [ts - upper,
 * ts - lower]) once it is past ts - lower. A record whose
 * timestamp is already below the watermark when it arrives is late: side
 * output.
 *
 * Window join. Records are buffered per window under the namespace
 * [end][start][side][seq]; when the window fires (event-time timer at
 * end - 1) every left record is paired with every right record of that
 * window and key, in arrival order, and the window's records are dropped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
    int64_t lo, hi;  /* interval: ts range; window: (unused) */
    uint8_t win[16]; /* window: [end][start] to collect */
    int window;
    int drop_upto; /* interval cleanup: collect every entry of side with ts <= hi */
} hits;

static int add_hit(hits *h, int64_t ts, const void *val, size_t vlen, const void *ns, size_t nslen)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 8;
        hit *v = realloc(h->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        h->v = v;
        h->cap = cap;
    }
    hit *x = &h->v[h->n];
    x->data = malloc(vlen ? vlen : 1);
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
        free(h->v[i].data);
    free(h->v);
}

/* ---- interval join --------------------------------------------------------------------------- */
static int interval_scan(void *arg, const void *nsv, size_t nslen, const void *val, size_t vlen)
{
    hits *h = arg;
    const uint8_t *ns = nsv;
    if (nslen != 17)
        return -EBADMSG;
    if (ns[0] != h->side)
        return ns[0] > h->side; /* past the side: stop */
    int64_t ts = weir__get_time(ns + 1);
    if (ts > h->hi)
        return 1; /* ordered by time: nothing further matches */
    if (!h->drop_upto && ts < h->lo)
        return 0;
    return add_hit(h, ts, val, vlen, ns, nslen);
}

static int interval_process(weir_ctx *ctx, join *jn, const weir_rec *in)
{
    int side = weir_ctx_input(ctx);
    if (side != 0 && side != 1)
        return weir_fail(ctx, -EINVAL, "a join has two inputs");
    int64_t wm = weir_ctx_watermark(ctx);
    if (in->ts < wm)
        return weir_emit_side(ctx, in->data, in->len, in->ts);
    /* Buffer it, with a timer to drop it once no partner can come. */
    uint8_t ns[17];
    ns[0] = (uint8_t)side;
    weir__put_time(ns + 1, in->ts);
    weir__put_be64(ns + 9, ++ctx->seq);
    int e = weir__ns_put(ctx, "j", ns, 17, in->data, in->len);
    /* A right record at wm is not late, so a left record may go only once
     * ts + upper < wm (and a right one once ts - lower < wm). */
    int64_t expire =
        side == 0 ? weir__sat_add(in->ts, jn->upper) : weir__sat_add(in->ts, neg(jn->lower));
    expire = weir__sat_add(expire, 1);
    if (!e && expire != INT64_MAX)
        e = weir_timer_register(ctx, WEIR_TIME_EVENT, expire);
    if (e)
        return e;
    /* Partners on the other side. */
    hits h = {.side = 1 - side};
    if (side == 0) {
        h.lo = weir__sat_add(in->ts, jn->lower);
        h.hi = weir__sat_add(in->ts, jn->upper);
    } else {
        h.lo = weir__sat_add(in->ts, neg(jn->upper));
        h.hi = weir__sat_add(in->ts, neg(jn->lower));
    }
    e = weir__ns_scan(ctx, "j", interval_scan, &h);
    if (e > 0)
        e = 0;
    for (size_t i = 0; !e && i < h.n; i++) {
        weir_rec other = {h.v[i].data, h.v[i].len, h.v[i].ts};
        e = side == 0 ? jn->fn(ctx, in, &other, jn->arg) : jn->fn(ctx, &other, in, jn->arg);
    }
    free_hits(&h);
    return e;
}

/* Drop what can no longer pair: left records with ts + upper <= wm, right
 * records with ts - lower <= wm. */
static int interval_timer(weir_ctx *ctx, join *jn, int64_t when)
{
    (void)when;
    int64_t wm = weir_ctx_watermark(ctx);
    int e = 0;
    for (int side = 0; side < 2 && !e; side++) {
        hits h = {.side = side, .drop_upto = 1};
        h.hi = weir__sat_add(
            side == 0 ? weir__sat_add(wm, neg(jn->upper)) : weir__sat_add(wm, jn->lower), -1);
        e = weir__ns_scan(ctx, "j", interval_scan, &h);
        if (e > 0)
            e = 0;
        for (size_t i = 0; !e && i < h.n; i++)
            e = weir__ns_del(ctx, "j", h.v[i].ns, h.v[i].nslen);
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
    int c = memcmp(ns, h->win, 16);
    if (c < 0)
        return 0;
    if (c > 0)
        return 1; /* ordered by window end: past it */
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
        int e = weir__ns_put(ctx, "j", ns, 33, in->data, in->len);
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
    int e = weir__ns_scan(ctx, "j", window_scan, &h);
    if (e > 0)
        e = 0;
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
        e = weir__ns_del(ctx, "j", h.v[i].ns, h.v[i].nslen);
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
    join *state = malloc(sizeof(*state));
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
        free(state);
        return NULL;
    }
    out->owned = state;
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
