/* SPDX-License-Identifier: Apache-2.0 */
/*
 * window.c - event-time windows (weir_stream_window): tumbling, hopping and
 * session windows with allowed lateness and a late side output, built as a
 * keyed operator on namespaced keyed state and event-time timers.
 *
 * State, per key: one entry per open window under the state WEIR__STATE_WINDOWS, its
 * namespace [end][start] (big-endian, sign flipped: ordered by end), its
 * value the folded bytes. Timers, per window: end - 1 (fire) and, with
 * allowed lateness, end - 1 + lateness (drop the state). A record that
 * lands in a window already fired (but within its lateness) fires that
 * window again at once.
 *
 * Hopping windows whose size is a whole number of slides keep their state
 * per slide instead (panes, the slicing of other engines): a record folds
 * into one pane, not into size / slide windows, and a window that fires
 * folds its panes in time order (so fn must be associative, as for
 * sessions). A key's panes are one entry, state WEIR__STATE_PANES without a namespace:
 * [start i64][length u32][folded bytes] per pane, in start order, so a
 * firing window reads one entry however many panes it spans. Timers: each
 * window's fire time, registered when a pane of it is made, and per pane
 * the drop time of the last window holding it (start + size - 1 +
 * lateness), when the pane leaves the entry. Records within 2^62 ns of the
 * ends of the time range, where window arithmetic would saturate, take the
 * per-window path above; a firing window folds both. A record reads its
 * key's panes entry through the controller (weir__ns_get_async, a
 * pane_read step), as a fixed window's record reads its windows: on a
 * backend whose reads answer later the record waits for it as data while
 * the subtask goes on with other keys. Timers: win_timer_reads tells
 * timers.c which entries a timer's firing reads (the window's value, or
 * the key's panes), so that a batch of due timers reads them in one
 * prefetch round instead of one round trip per key.
 *
 * Sessions: a record makes [ts, ts + gap); every stored session of the key
 * overlapping it is folded in (in start order) and removed with its
 * timers, and the merged session is stored with new timers. The scan of
 * the key's sessions brings their values too (no read after it); on a
 * backend whose scans may wait, the record asks for it through the
 * controller (weir__ctl_scan) and waits for it as data.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "stream/controller.h"
#include "stream/stream_int.h"

typedef struct win {
    weir_window w;
    weir_reduce_fn fn;
    void *arg;
    int panes; /* hopping windows kept per slide (see the top) */
} win;

/* Records with timestamps in [PANE_LO, PANE_HI] go to panes: none of their
 * windows reaches the ends of the time range, so no arithmetic saturates. */
#define PANE_LO (INT64_MIN / 2)
#define PANE_HI (INT64_MAX / 2)

/* A window reaching past [PANE_LO, PANE_HI]: it may have whole-window
 * state (besides panes) in pane mode. */
static int past_panes(int64_t start, int64_t end)
{
    return start < PANE_LO || end - 1 > PANE_HI;
}

/* Window arithmetic near the ends of the time range, without overflow. */
__extension__ typedef __int128 i128;

typedef struct span {
    int64_t start, end;
} span;

static int64_t floor_mod(int64_t a, int64_t m)
{
    int64_t r = a % m;
    return r < 0 ? r + m : r;
}

static void ns_of(span s, uint8_t ns[16])
{
    weir__put_time(ns, s.end);
    weir__put_time(ns + 8, s.start);
}

static span span_of(const uint8_t *ns)
{
    return (span){weir__get_time(ns + 8), weir__get_time(ns)};
}

/* Emit [start][end][bytes] at end - 1. */
static int emit_result(weir_ctx *ctx, span s, const void *val, size_t len)
{
    uint8_t small[512];
    size_t n = sizeof(weir_window_result) + len;
    uint8_t *buf = n <= sizeof(small) ? small : weir__malloc(n);
    if (!buf)
        return -ENOMEM;
    weir_window_result h = {s.start, s.end};
    memcpy(buf, &h, sizeof(h));
    if (len)
        memcpy(buf + sizeof(h), val, len);
    int e = weir_emit(ctx, buf, n, s.end - 1);
    if (buf != small)
        weir__free(buf);
    return e;
}

/* Emit the window s if it is stored (a timer of a key with no window due
 * finds nothing). */
static int fire_window(weir_ctx *ctx, span s)
{
    uint8_t ns[16];
    ns_of(s, ns);
    const void *v;
    size_t vlen;
    int e = weir__ns_get(ctx, WEIR__STATE_WINDOWS, ns, 16, &v, &vlen);
    if (e == -ENOENT)
        return 0;
    return e ? e : emit_result(ctx, s, v, vlen);
}

/* Drop a window's state. (A session merged into another keeps its timers:
 * a timer is one per key and time, and another session of the key may
 * need the same time; a timer with no window due finds nothing to do.) */
static int drop_window(weir_ctx *ctx, span s)
{
    uint8_t ns[16];
    ns_of(s, ns);
    return weir__ns_del(ctx, WEIR__STATE_WINDOWS, ns, 16);
}

static int fire_panes(weir_ctx *ctx, const win *w, span s);

/* Fold in into the window's value v (e 0; e -ENOENT: none, in itself)
 * and store it. The window's state key is in ctx->keybuf (kl bytes) or,
 * kl 0, composed here. The window's timers are registered when it is made
 * (or always, `timers`: a merged session is a new window under a value
 * already stored). */
static int fold_read(weir_ctx *ctx, win *w, span s, const weir_rec *in, int e, const void *v,
                     size_t vlen, size_t kl, int *fired_again, int timers)
{
    if (!kl) {
        uint8_t ns[16];
        ns_of(s, ns);
        int ke = weir__state_key(ctx, WEIR__STATE_WINDOWS, ns, 16, &kl);
        if (ke)
            return ke;
    }
    weir_rec out = *in;
    /* A new window needs its timers. So does any window after a restore:
     * the watermark starts over from the minimum there, and a window that
     * fired before the checkpoint (kept by its lateness) has no fire timer
     * any more, though it has not "fired" for this run. Registering an
     * existing timer again is an in-place overwrite. */
    if (e == -ENOENT || weir_ctx_restored(ctx))
        timers = 1;
    if (e == 0) {
        weir_rec acc = {v, vlen, s.end - 1};
        if ((e = w->fn(&acc, in, &out, w->arg)) < 0)
            return e;
    } else if (e != -ENOENT) {
        return e;
    }
    /* out may point into the stored value: then copy it before the put. */
    _Alignas(16) uint8_t small[512];
    const uint8_t *o = out.data;
    uint8_t *copy = NULL;
    if (e == 0 && out.len && o >= (const uint8_t *)v && o < (const uint8_t *)v + vlen) {
        if (!(copy = out.len <= sizeof(small) ? small : weir__malloc(out.len)))
            return -ENOMEM;
        memcpy(copy, o, out.len);
        o = copy;
    }
    e = weir_state_put(ctx->backend, ctx->rc->kg, ctx->keybuf, kl, o, out.len);
    weir__ns_forget(ctx, ctx->keybuf, kl);
    int64_t wm = weir_ctx_watermark(ctx);
    if (!e && s.end - 1 <= wm) { /* already fired: a late update fires again */
        e = w->panes ? fire_panes(ctx, w, s) : emit_result(ctx, s, o, out.len);
        *fired_again = 1;
    }
    if (copy != small)
        weir__free(copy);
    if (e || !timers)
        return e;
    if (s.end - 1 > wm && (e = weir_timer_register(ctx, WEIR_TIME_EVENT, s.end - 1)) < 0)
        return e;
    int64_t drop = weir__sat_add(s.end - 1, w->w.allowed_lateness);
    if (w->w.allowed_lateness > 0 && drop != INT64_MAX) /* else: kept to the end of input */
        e = weir_timer_register(ctx, WEIR_TIME_EVENT, drop);
    return e;
}

static int late_for(const win *w, span s, int64_t wm)
{
    return weir__sat_add(s.end - 1, w->w.allowed_lateness) <= wm;
}

/* ---- panes (hopping windows per slide) ---------------------------------------------------- */
/* A running fold of values into one (the first value as it is). */
typedef struct acc {
    uint8_t *p;
    size_t len, cap;
    int have;
    _Alignas(16) uint8_t small[256];
} acc;

static int acc_add(acc *a, const win *w, const void *v, size_t vlen, int64_t ts)
{
    weir_rec out = {v, vlen, ts};
    if (a->have) {
        weir_rec ra = {a->p, a->len, ts}, in = {v, vlen, ts};
        int e = w->fn(&ra, &in, &out, w->arg);
        if (e < 0)
            return e;
    }
    if (!a->p) {
        a->p = a->small;
        a->cap = sizeof(a->small);
    }
    if (out.len > a->cap) { /* out may point into a->p: copy before freeing it */
        uint8_t *n = weir__malloc(out.len);
        if (!n)
            return -ENOMEM;
        memcpy(n, out.data, out.len);
        if (a->p != a->small)
            weir__free(a->p);
        a->p = n;
        a->cap = out.len;
    } else if (out.len) {
        memmove(a->p, out.data, out.len);
    }
    a->len = out.len;
    a->have = 1;
    return 0;
}

static void acc_free(acc *a)
{
    if (a->p != a->small)
        weir__free(a->p);
}

/* A key's panes entry: [start i64][len u32][pad u32][bytes, padded to 16]
 * per pane, by start: each pane's bytes 16-byte aligned, as a value of its
 * own would be. */
#define PANE_HDR  16
#define PADDED(n) (((n) + 15) & ~(size_t)15)

typedef struct pane_at {
    size_t off, len; /* the pane's entry (header, padding included), or where it would go (len 0) */
    size_t blen;     /* its bytes */
    int found;
} pane_at;

/* Find the pane starting at `start`; -EBADMSG for a damaged entry. */
static int pane_find(const uint8_t *v, size_t vlen, int64_t start, pane_at *at)
{
    size_t off = 0;
    while (off < vlen) {
        int64_t ps;
        uint32_t len;
        if (vlen - off < PANE_HDR)
            return -EBADMSG;
        memcpy(&ps, v + off, 8);
        memcpy(&len, v + off + 8, 4);
        if (PADDED(len) > vlen - off - PANE_HDR)
            return -EBADMSG;
        if (ps >= start) {
            *at = (pane_at){off, ps == start ? PANE_HDR + PADDED(len) : 0, len, ps == start};
            return 0;
        }
        off += PANE_HDR + PADDED(len);
    }
    *at = (pane_at){off, 0, 0, 0};
    return 0;
}

/* Store v with the pane at `at` replaced by (start, bytes) (bytes NULL: removed). */
static int pane_store(weir_ctx *ctx, const uint8_t *v, size_t vlen, pane_at at, int64_t start,
                      const void *bytes, size_t blen)
{
    size_t add = bytes ? PANE_HDR + PADDED(blen) : 0, n = vlen - at.len + add;
    if (n == 0)
        return weir__ns_del(ctx, WEIR__STATE_PANES, NULL, 0);
    _Alignas(16) uint8_t small[512];
    uint8_t *buf = n <= sizeof(small) ? small : weir__malloc(n);
    if (!buf)
        return -ENOMEM;
    if (at.off)
        memcpy(buf, v, at.off);
    if (bytes) {
        uint32_t l[2] = {(uint32_t)blen, 0};
        memcpy(buf + at.off, &start, 8);
        memcpy(buf + at.off + 8, l, 8);
        if (blen)
            memcpy(buf + at.off + PANE_HDR, bytes, blen);
        memset(buf + at.off + PANE_HDR + blen, 0, PADDED(blen) - blen);
    }
    if (vlen > at.off + at.len)
        memcpy(buf + at.off + add, v + at.off + at.len, vlen - at.off - at.len);
    int e = weir__ns_put(ctx, WEIR__STATE_PANES, NULL, 0, buf, n);
    if (buf != small)
        weir__free(buf);
    return e;
}

static int panes_get(weir_ctx *ctx, const uint8_t **v, size_t *vlen)
{
    const void *p;
    int e = weir__ns_get(ctx, WEIR__STATE_PANES, NULL, 0, &p, vlen);
    if (e == -ENOENT) {
        *v = NULL;
        *vlen = 0;
        return 0;
    }
    *v = p;
    return e;
}

/* Fold the window's panes (in time order) and any whole-window value it has
 * (records outside [PANE_LO, PANE_HI] keep those), then emit if anything
 * was there. */
static int fire_panes(weir_ctx *ctx, const win *w, span s)
{
    acc a = {0};
    int e = 0;
    int whole = past_panes(s.start, s.end);
    const uint8_t *pv;
    size_t pvlen;
    for (int pass = 0; pass < 3 && !e; pass++) {
        /* The whole-window value before the panes below PANE_LO, after them above. */
        if (pass != 1) {
            if (whole && (pass == 0) == (s.start < PANE_LO)) {
                uint8_t ns[16];
                const void *v;
                size_t vlen;
                ns_of(s, ns);
                if ((e = weir__ns_get(ctx, WEIR__STATE_WINDOWS, ns, 16, &v, &vlen)) == 0)
                    e = acc_add(&a, w, v, vlen, s.end - 1);
                else if (e == -ENOENT)
                    e = 0;
            }
        } else if (s.end - 1 >= PANE_LO && s.start <= PANE_HI &&
                   (e = panes_get(ctx, &pv, &pvlen)) == 0) {
            pane_at at;
            if ((e = pane_find(pv, pvlen, s.start, &at)) < 0)
                break;
            for (size_t off = at.off; !e && off < pvlen;) {
                int64_t ps;
                uint32_t len;
                if (pvlen - off < PANE_HDR)
                    return acc_free(&a), -EBADMSG;
                memcpy(&ps, pv + off, 8);
                memcpy(&len, pv + off + 8, 4);
                if (PADDED(len) > pvlen - off - PANE_HDR)
                    return acc_free(&a), -EBADMSG; /* a damaged entry */
                if (ps >= s.end)
                    break;
                e = acc_add(&a, w, pv + off + PANE_HDR, len, s.end - 1);
                off += PANE_HDR + PADDED(len);
            }
        }
    }
    if (!e && a.have)
        e = emit_result(ctx, s, a.p, a.len);
    acc_free(&a);
    return e;
}

/* The key's panes entry and the place of the pane starting at `start`. */
static int pane_lookup(weir_ctx *ctx, int64_t start, const uint8_t **v, size_t *vlen, pane_at *at)
{
    int e = panes_get(ctx, v, vlen);
    return e ? e : pane_find(*v, *vlen, start, at);
}

/* Drop the pane starting at `start`, if the key has it. */
static int drop_pane(weir_ctx *ctx, int64_t start)
{
    const uint8_t *v;
    size_t vlen;
    pane_at at;
    int e = pane_lookup(ctx, start, &v, &vlen, &at);
    if (e || !at.found)
        return e;
    return pane_store(ctx, v, vlen, at, start, NULL, 0);
}

/* The key's panes entry came (controller.h: perhaps later): fold the
 * record into its pane. The pane's timers come with the pane: a fire timer
 * for each window holding it, and the drop timer of the pane (when the
 * last of them has passed its lateness). */
static int pane_read(weir_ctx *ctx, void *state, const weir_rec *in, int e, const void *pv,
                     size_t pvlen, void *arg)
{
    (void)arg;
    win *w = state;
    int64_t size = w->w.size, slide = w->w.slide;
    int64_t wm = weir_ctx_watermark(ctx);
    int64_t last = in->ts - floor_mod(in->ts, slide);
    const uint8_t *v = NULL;
    size_t vlen = 0;
    if (e == 0) {
        v = pv;
        vlen = pvlen;
    } else if (e != -ENOENT) {
        return e;
    }
    pane_at at;
    if ((e = pane_find(v, vlen, last, &at)) < 0)
        return e;
    int fresh = !at.found || weir_ctx_restored(ctx);
    weir_rec out = *in;
    if (at.found) {
        weir_rec a = {v + at.off + PANE_HDR, at.blen, in->ts};
        if ((e = w->fn(&a, in, &out, w->arg)) < 0)
            return e;
    }
    /* (out may point into the stored entry: pane_store copies first) */
    if ((e = pane_store(ctx, v, vlen, at, last, out.data, out.len)) < 0)
        return e;
    for (int64_t start = last; !e && start > last - size; start -= slide) {
        span s = {start, start + size};
        if (late_for(w, s, wm))
            break; /* and every earlier one */
        if (s.end - 1 <= wm)
            e = fire_panes(ctx, w, s); /* already fired: a late update fires again */
        else if (fresh)
            e = weir_timer_register(ctx, WEIR_TIME_EVENT, s.end - 1);
    }
    int64_t drop = weir__sat_add(last + size - 1, w->w.allowed_lateness);
    if (!e && fresh && w->w.allowed_lateness > 0 && drop != INT64_MAX)
        e = weir_timer_register(ctx, WEIR_TIME_EVENT, drop);
    return e;
}

/* A record of [PANE_LO, PANE_HI]: fold it into its pane, once the key's
 * panes entry is read - under the async controller a read of a cold key
 * leaves the record waiting (a pane_read step) while the subtask goes on
 * with other keys; otherwise pane_read runs before this returns. */
static int process_pane(weir_ctx *ctx, win *w, const weir_rec *in)
{
    int64_t wm = weir_ctx_watermark(ctx);
    int64_t last = in->ts - floor_mod(in->ts, w->w.slide);
    if (late_for(w, (span){last, last + w->w.size}, wm)) /* the latest window: all are late */
        return weir_emit_side(ctx, in->data, in->len, in->ts);
    return weir__ns_get_async(ctx, in, WEIR__STATE_PANES, NULL, 0, pane_read, NULL);
}

/* ---- tumbling and hopping ------------------------------------------------------------------ */
/* The i-th window [start, start + size) holding ts, latest first, in 128
 * bits: near the ends of the time range a window is cut short at
 * INT64_MIN or INT64_MAX (its span saturates). 0: there is no i-th. */
static int fixed_span(const win *w, int64_t ts, int64_t i, span *s)
{
    int64_t size = w->w.size, slide = weir__window_step(&w->w);
    i128 start = (i128)ts - floor_mod(ts, slide) - (i128)i * slide;
    if (start + size <= ts)
        return 0;
    *s = (span){start < INT64_MIN ? INT64_MIN : (int64_t)start,
                start + size > INT64_MAX ? INT64_MAX : (int64_t)(start + size)};
    return 1;
}

/* Window i's value came (controller.h: perhaps later). */
static int fixed_read(weir_ctx *ctx, void *state, const weir_rec *in, int e, const void *v,
                      size_t vlen, void *arg)
{
    span s;
    int again = 0;
    if (!fixed_span(state, in->ts, (int64_t)(intptr_t)arg, &s))
        return -EPROTO;
    return fold_read(ctx, state, s, in, e, v, vlen, ctx->read_kl, &again, 0);
}

/* The record folds into each of its windows not late yet, each through a
 * read of its own: independent entries, so under the async controller the
 * reads are in flight together and each window's fold runs as its read
 * answers. */
static int process_fixed(weir_ctx *ctx, win *w, const weir_rec *in)
{
    if (w->panes && in->ts >= PANE_LO && in->ts <= PANE_HI)
        return process_pane(ctx, w, in);
    int64_t wm = weir_ctx_watermark(ctx);
    int any = 0;
    span s;
    for (int64_t i = 0; fixed_span(w, in->ts, i, &s); i++) {
        if (late_for(w, s, wm))
            continue;
        any = 1;
        uint8_t ns[16];
        ns_of(s, ns);
        int e = weir__ns_get_async(ctx, in, WEIR__STATE_WINDOWS, ns, 16, fixed_read,
                                   (void *)(intptr_t)i);
        if (e)
            return e;
    }
    return any ? 0 : weir_emit_side(ctx, in->data, in->len, in->ts);
}

/* ---- sessions ------------------------------------------------------------------------------ */
/* A stored session met by the scan: its span and a copy of its value (the
 * scan's views die with the next state call). */
typedef struct sess {
    span s;
    uint8_t *val;
    size_t vlen;
} sess;

typedef struct sessions {
    sess *v;
    int n, cap;
    span probe;
} sessions;

static int collect_overlap(void *arg, const void *ns, size_t nslen, const void *val, size_t vlen)
{
    sessions *ss = arg;
    if (nslen != 16)
        return -EBADMSG;
    span s = span_of(ns);
    if (s.start < ss->probe.end && ss->probe.start < s.end) {
        if (ss->n == ss->cap) {
            int cap = ss->cap ? ss->cap * 2 : 8;
            sess *p = weir__realloc(ss->v, (size_t)cap * sizeof(*p));
            if (!p)
                return -ENOMEM;
            ss->v = p;
            ss->cap = cap;
        }
        uint8_t *copy = weir__malloc(vlen ? vlen : 1);
        if (!copy)
            return -ENOMEM;
        if (vlen)
            memcpy(copy, val, vlen);
        ss->v[ss->n++] = (sess){s, copy, vlen};
    }
    return 0;
}

static void sessions_free(sessions *ss)
{
    for (int i = 0; i < ss->n; i++)
        weir__free(ss->v[i].val);
    weir__free(ss->v);
}

static int cmp_start(const void *a, const void *b)
{
    const sess *x = a, *y = b;
    return x->s.start < y->s.start ? -1 : x->s.start > y->s.start;
}

/* The record's session, once the key's stored sessions are at hand: the
 * ones it overlaps merged into one, with it. */
static int session_merge(weir_ctx *ctx, void *state, const weir_rec *in, int err, const void *val,
                         size_t vlen, void *arg)
{
    (void)err; /* a failed prefetch only means the scan below reads itself */
    (void)val;
    (void)vlen;
    (void)arg;
    win *w = state;
    int64_t wm = weir_ctx_watermark(ctx);
    span merged = {in->ts, weir__sat_add(in->ts, w->w.gap)};
    sessions ss = {.probe = merged};
    int e = weir__ns_scan(ctx, WEIR__STATE_WINDOWS, collect_overlap, &ss);
    for (int i = 0; !e && i < ss.n; i++) {
        if (ss.v[i].s.start < merged.start)
            merged.start = ss.v[i].s.start;
        if (ss.v[i].s.end > merged.end)
            merged.end = ss.v[i].s.end;
    }
    if (!e && late_for(w, merged, wm)) {
        sessions_free(&ss);
        return weir_emit_side(ctx, in->data, in->len, in->ts);
    }
    /* Fold the old sessions (in start order) into one value under the
     * merged span, then the record. */
    if (ss.n > 1)
        qsort(ss.v, (size_t)ss.n, sizeof(sess), cmp_start);
    uint8_t *acc = NULL;
    size_t acc_len = 0;
    int have = 0;
    for (int i = 0; !e && i < ss.n; i++) {
        weir_rec part = {ss.v[i].val, ss.v[i].vlen, ss.v[i].s.end - 1}, out = part;
        if (have) {
            weir_rec a = {acc, acc_len, merged.end - 1};
            if ((e = w->fn(&a, &part, &out, w->arg)) < 0)
                break;
        }
        uint8_t *copy = weir__malloc(out.len ? out.len : 1);
        if (!copy) {
            e = -ENOMEM;
            break;
        }
        if (out.len)
            memcpy(copy, out.data, out.len);
        weir__free(acc);
        acc = copy;
        acc_len = out.len;
        have = 1;
        e = drop_window(ctx, ss.v[i].s);
    }
    sessions_free(&ss);
    /* The merged value is at hand: no read of it. (Without old sessions
     * the merged one is new: a stored session with its span would have
     * overlapped the record.) */
    int again = 0;
    if (!e)
        e = fold_read(ctx, w, merged, in, have ? 0 : -ENOENT, acc, acc_len, 0, &again, 1);
    weir__free(acc);
    return e;
}

/* A record of a session window: on a backend whose scans may wait, the
 * scan of the key's sessions is fetched first and the record waits for it
 * as data (weir__ctl_scan); at once otherwise. */
static int process_session(weir_ctx *ctx, win *w, const weir_rec *in)
{
    (void)w;
    size_t kl;
    int e = weir__state_key(ctx, WEIR__STATE_WINDOWS, NULL, 0, &kl);
    if (e < 0)
        return e;
    return weir__ctl_scan(ctx, in, ctx->rc->kg, ctx->keybuf, kl, session_merge, NULL);
}

/* ---- the operator -------------------------------------------------------------------------- */
static int win_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    *state = arg;
    return 0;
}

static int win_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    win *w = state;
    return w->w.kind == WEIR_WINDOW_SESSION ? process_session(ctx, w, in)
                                            : process_fixed(ctx, w, in);
}

typedef struct due {
    win *w;
    int64_t t;
    span *fire, *drop;
    int nfire, ndrop, cap;
    sessions vals; /* without panes: the fired windows' values, as the scan gave them */
} due;

static int collect_due(void *arg, const void *ns, size_t nslen, const void *val, size_t vlen)
{
    due *d = arg;
    if (nslen != 16)
        return -EBADMSG;
    span s = span_of(ns);
    int fire = s.end - 1 == d->t;
    int drop = weir__sat_add(s.end - 1, d->w->w.allowed_lateness) == d->t;
    if (!fire && !drop)
        return 0;
    if (d->nfire == d->cap || d->ndrop == d->cap) {
        int cap = d->cap ? d->cap * 2 : 4;
        span *f = weir__realloc(d->fire, (size_t)cap * sizeof(span));
        if (f)
            d->fire = f;
        span *g = weir__realloc(d->drop, (size_t)cap * sizeof(span));
        if (g)
            d->drop = g;
        if (!f || !g)
            return -ENOMEM;
        d->cap = cap;
    }
    if (fire && !d->w->panes) { /* its value now: no read when it fires */
        d->vals.probe = s;
        int e = collect_overlap(&d->vals, ns, nslen, val, vlen);
        if (e)
            return e;
    } else if (fire) {
        d->fire[d->nfire++] = s;
    }
    if (drop)
        d->drop[d->ndrop++] = s;
    return 0;
}

/* Tumbling and hopping windows: the window a timer fires or drops is known
 * from its time (start = end - size, on the slide), so no scan. A window
 * cut short at an end of the time range is not: 0. */
static int window_at(const win *w, i128 end, span *out)
{
    int64_t slide = weir__window_step(&w->w);
    i128 start = end - w->w.size;
    if (end >= INT64_MAX || start < INT64_MIN || floor_mod((int64_t)start, slide) != 0)
        return 0;
    *out = (span){(int64_t)start, (int64_t)end};
    return 1;
}

static int fire(weir_ctx *ctx, const win *w, span s)
{
    return w->panes ? fire_panes(ctx, w, s) : fire_window(ctx, s);
}

static int win_timer(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    win *w = state;
    if (domain != WEIR_TIME_EVENT)
        return 0;
    /* Fixed windows: the window to fire and the one (or the pane) to drop
     * are known from the time, unless one of them may be cut short at an
     * end of the time range: then the scan below. */
    i128 fire_end = (i128)when + 1, drop_end = fire_end - w->w.allowed_lateness;
    span s;
    if (w->w.kind != WEIR_WINDOW_SESSION && when < INT64_MAX - 1 &&
        drop_end - w->w.size >= INT64_MIN) {
        int e = window_at(w, fire_end, &s) ? fire(ctx, w, s) : 0;
        if (!e && window_at(w, drop_end, &s)) {
            if (!w->panes || past_panes(s.start, s.end))
                e = drop_window(ctx, s);
            if (!e && w->panes) /* the pane starting with the window */
                e = drop_pane(ctx, s.start);
        }
        return e;
    }
    due d = {.w = w, .t = when};
    int e = weir__ns_scan(ctx, WEIR__STATE_WINDOWS, collect_due, &d);
    for (int i = 0; !e && i < d.vals.n; i++)
        e = emit_result(ctx, d.vals.v[i].s, d.vals.v[i].val, d.vals.v[i].vlen);
    sessions_free(&d.vals);
    for (int i = 0; !e && i < d.nfire; i++)
        e = fire(ctx, w, d.fire[i]);
    for (int i = 0; !e && i < d.ndrop; i++)
        e = drop_window(ctx, d.drop[i]);
    if (!e && w->panes && window_at(w, drop_end, &s))
        e = drop_pane(ctx, s.start);
    weir__free(d.fire);
    weir__free(d.drop);
    return e;
}

/* The state win_timer reads for the timer at `when` of the current key,
 * announced for the timers' prefetch round (timers.c): a fixed window's
 * value, or the key's panes entry (and a window's whole value where it
 * reaches past the panes' range). Sessions (and times near the ends of
 * the range) scan the key's windows: that scan is announced. 0, 1 (the
 * round is full) or a negative errno. */
static int win_timer_reads(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    win *w = state;
    if (domain != WEIR_TIME_EVENT)
        return 0;
    i128 fire_end = (i128)when + 1, drop_end = fire_end - w->w.allowed_lateness;
    if (w->w.kind == WEIR_WINDOW_SESSION || when >= INT64_MAX - 1 ||
        drop_end - w->w.size < INT64_MIN) /* the timer scans the key's windows */
        return weir__ns_prefetch_scan(ctx, WEIR__STATE_WINDOWS, NULL, 0);
    span s;
    uint8_t ns[16];
    int e = 0;
    if (!w->panes) {
        if (window_at(w, fire_end, &s)) {
            ns_of(s, ns);
            e = weir__ns_prefetch(ctx, WEIR__STATE_WINDOWS, ns, 16);
        }
        return e;
    }
    int fire = window_at(w, fire_end, &s);
    if (fire && past_panes(s.start, s.end)) {
        ns_of(s, ns);
        e = weir__ns_prefetch(ctx, WEIR__STATE_WINDOWS, ns, 16);
    }
    if (!e && (fire || window_at(w, drop_end, &s)))
        e = weir__ns_prefetch(ctx, WEIR__STATE_PANES, NULL, 0);
    return e;
}

weir_stream *weir_stream_window(weir_stream *s, const char *name, const weir_window *w,
                                weir_reduce_fn fn, void *arg)
{
    if (!s || s->j->err)
        return NULL;
    const char *why = NULL;
    if (s->edge != EDGE_HASH)
        why = "needs a keyed stream: key_by first";
    else if (!w || !fn)
        why = "needs a window and a fold function";
    else if (w->allowed_lateness < 0)
        why = "allowed_lateness must be >= 0";
    else if (w->kind == WEIR_WINDOW_TUMBLING && w->size <= 0)
        why = "a tumbling window needs size > 0";
    else if (w->kind == WEIR_WINDOW_HOPPING && (w->size <= 0 || w->slide <= 0))
        why = "a hopping window needs size > 0 and slide > 0";
    else if (w->kind == WEIR_WINDOW_SESSION && w->gap <= 0)
        why = "a session window needs gap > 0";
    else if (w->kind < WEIR_WINDOW_TUMBLING || w->kind > WEIR_WINDOW_SESSION)
        why = "unknown window kind";
    if (why) {
        weir__stream_fail(s->j, -EINVAL, "window \"%s\": %s", name ? name : "?", why);
        return NULL;
    }
    win *state = weir__malloc(sizeof(*state));
    if (!state) {
        weir__stream_fail(s->j, -ENOMEM, "out of memory");
        return NULL;
    }
    /* Panes when a window is a whole number of slides (2 or more). */
    int panes = w->kind == WEIR_WINDOW_HOPPING && w->size % w->slide == 0 && w->size > w->slide &&
                w->size <= (INT64_C(1) << 60);
    *state = (win){*w, fn, arg, panes};
    weir_op_def def = {.open = win_open, .process = win_process, .on_timer = win_timer};
    weir_stream *out = weir_stream_process(s, name, &def, state);
    if (!out) {
        weir__free(state);
        return NULL;
    }
    out->owned = state;
    out->from->timer_reads = win_timer_reads;
    return out;
}
