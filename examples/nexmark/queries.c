/* SPDX-License-Identifier: Apache-2.0 */
/*
 * queries.c - the Nexmark queries as weir jobs (see nexmark.h for what each
 * computes and docs/nexmark.md for how each is built). Every query reads
 * the generator's stream of nexmark_event records; joins are keyed process
 * operators over a union of the two sides, holding each side in keyed value
 * state, and the windowed ones use weir's windows or event-time timers.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "nexmark.h"

#define EV(r) ((const nexmark_event *)(r)->data)

static int64_t win_ns(const nexmark_opts *o)
{
    return o && o->window_ns > 0 ? o->window_ns : 10 * (int64_t)1000000000;
}

static int64_t slide_ns(const nexmark_opts *o)
{
    return o && o->slide_ns > 0 ? o->slide_ns : 2 * (int64_t)1000000000;
}

static int64_t floor_to(int64_t t, int64_t size)
{
    int64_t r = t % size;
    return t - (r < 0 ? r + size : r);
}

static int done(weir_job *j, weir_stream *s, weir_stream **out)
{
    *out = s;
    const char *err = weir_job_error(j);
    return s && (!err || !*err) ? 0 : -EINVAL;
}

static int key_i64(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    /* Records whose first 8 bytes are the key (the q* outputs and window
     * results, keyed by window start). */
    (void)arg;
    *key = in->data;
    *len = sizeof(int64_t);
    return 0;
}

static int64_t ctx_key_i64(weir_ctx *ctx)
{
    size_t len;
    const void *k = weir_ctx_key(ctx, &len);
    int64_t v = 0;
    if (k && len == sizeof(v))
        memcpy(&v, k, sizeof(v));
    return v;
}

/* Append bytes to a value state holding an array. */
static int state_append(weir_ctx *ctx, const char *name, const void *item, size_t len)
{
    const void *v;
    size_t vlen = 0;
    int e = weir_value_get(ctx, name, &v, &vlen);
    if (e == -ENOENT)
        return weir_value_put(ctx, name, item, len);
    if (e)
        return e;
    uint8_t small[1024];
    uint8_t *buf = vlen + len <= sizeof(small) ? small : malloc(vlen + len);
    if (!buf)
        return -ENOMEM;
    memcpy(buf, v, vlen);
    memcpy(buf + vlen, item, len);
    e = weir_value_put(ctx, name, buf, vlen + len);
    if (buf != small)
        free(buf);
    return e;
}

/* An open-addressing map int64 -> int64 (key INT64_MIN: empty): the local
 * pre-aggregation of q5 / q7 and the benchmark's hand-written loops. */
typedef struct nx_map {
    int64_t *k, *v;
    size_t cap, n; /* cap: a power of two */
} nx_map;

static int nx_map_init(nx_map *m, size_t cap)
{
    m->cap = cap;
    m->n = 0;
    m->k = malloc(cap * sizeof(int64_t));
    m->v = malloc(cap * sizeof(int64_t));
    if (!m->k || !m->v) {
        free(m->k);
        free(m->v);
        m->k = m->v = NULL;
        m->cap = 0;
        return -ENOMEM;
    }
    for (size_t i = 0; i < cap; i++)
        m->k[i] = INT64_MIN;
    return 0;
}

static void nx_map_free(nx_map *m)
{
    free(m->k);
    free(m->v);
}

static void nx_map_clear(nx_map *m)
{
    if (m->n)
        for (size_t i = 0; i < m->cap; i++)
            m->k[i] = INT64_MIN;
    m->n = 0;
}

static inline size_t nx_map_slot(const nx_map *m, int64_t k)
{
    uint64_t h = (uint64_t)k * UINT64_C(0x9e3779b97f4a7c15);
    size_t i = (size_t)(h >> 20) & (m->cap - 1);
    while (m->k[i] != INT64_MIN && m->k[i] != k)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static int nx_map_grow(nx_map *m);

/* The value of k (created as 0); NULL when out of memory. */
static inline int64_t *nx_map_at(nx_map *m, int64_t k)
{
    if ((m->n + 1) * 2 > m->cap && nx_map_grow(m) < 0)
        return NULL;
    size_t i = nx_map_slot(m, k);
    if (m->k[i] == INT64_MIN) {
        m->k[i] = k;
        m->v[i] = 0;
        m->n++;
    }
    return &m->v[i];
}

static inline int64_t *nx_map_find(nx_map *m, int64_t k)
{
    size_t i = nx_map_slot(m, k);
    return m->k[i] == INT64_MIN ? NULL : &m->v[i];
}

static int nx_map_grow(nx_map *m)
{
    nx_map old = *m;
    if (nx_map_init(m, old.cap ? old.cap * 2 : 64) < 0) {
        *m = old;
        return -ENOMEM;
    }
    for (size_t i = 0; i < old.cap; i++)
        if (old.k[i] != INT64_MIN)
            *nx_map_at(m, old.k[i]) = old.v[i];
    nx_map_free(&old);
    return 0;
}

/* ---- q0: pass-through --------------------------------------------------------------------- */
static int q0_map(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    return weir_emit(ctx, in->data, in->len, in->ts);
}

int nexmark_q0(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o)
{
    (void)o;
    return done(j, weir_stream_map(events, "q0.pass", q0_map, NULL), out);
}

/* ---- q1: currency conversion ------------------------------------------------------------------
 */
static int q1_convert(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    if (EV(in)->kind != NEXMARK_BID)
        return 0;
    nexmark_event e;
    memcpy(&e, in->data, in->len);
    e.bid.price = e.bid.price * 908 / 1000;
    return weir_emit(ctx, &e, in->len, in->ts);
}

int nexmark_q1(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o)
{
    (void)o;
    return done(j, weir_stream_flat_map(events, "q1.convert", q1_convert, NULL), out);
}

/* ---- q2: selection ----------------------------------------------------------------------------
 */
static int q2_select(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    const nexmark_event *e = EV(in);
    if (e->kind != NEXMARK_BID || e->bid.auction % 123 != 0)
        return 0;
    nexmark_q2_out r = {e->bid.auction, e->bid.price};
    return weir_emit(ctx, &r, sizeof(r), in->ts);
}

int nexmark_q2(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o)
{
    (void)o;
    return done(j, weir_stream_flat_map(events, "q2.select", q2_select, NULL), out);
}

/* ---- q3: local item suggestion (an unbounded join) ----------------------------------------- */
static int q3_person(const weir_rec *in, void *arg)
{
    (void)arg;
    const nexmark_event *e = EV(in);
    if (e->kind != NEXMARK_PERSON)
        return 0;
    const char *s = e->person.state;
    return !strcmp(s, "OR") || !strcmp(s, "ID") || !strcmp(s, "CA");
}

static int q3_auction(const weir_rec *in, void *arg)
{
    (void)arg;
    const nexmark_event *e = EV(in);
    return e->kind == NEXMARK_AUCTION && e->auction.category == 10;
}

/* Persons by id, auctions by seller; q8's too. */
static int key_person(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    const nexmark_event *e = EV(in);
    *key = e->kind == NEXMARK_PERSON ? &e->person.id : &e->auction.seller;
    *len = sizeof(int64_t);
    return 0;
}

/* State "p": the person's nexmark_q3_out (auction unset) once it came;
 * "a": the ids of its auctions that came before it. */
static int q3_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    const nexmark_event *e = EV(in);
    const void *v;
    size_t len;
    if (e->kind == NEXMARK_PERSON) {
        nexmark_q3_out r = {0};
        memcpy(r.name, e->person.name, sizeof(r.name));
        memcpy(r.city, e->person.city, sizeof(r.city));
        memcpy(r.state, e->person.state, sizeof(r.state));
        int err = weir_value_put(ctx, "p", &r, sizeof(r));
        if (err || weir_value_get(ctx, "a", &v, &len))
            return err;
        int64_t *ids = malloc(len ? len : 1);
        if (!ids)
            return -ENOMEM;
        memcpy(ids, v, len);
        for (size_t i = 0; !err && i < len / sizeof(int64_t); i++) {
            r.auction = ids[i];
            err = weir_emit(ctx, &r, sizeof(r), in->ts);
        }
        free(ids);
        return err ? err : weir_value_clear(ctx, "a");
    }
    int err = weir_value_get(ctx, "p", &v, &len);
    if (err == -ENOENT)
        return state_append(ctx, "a", &e->auction.id, sizeof(int64_t));
    if (err)
        return err;
    nexmark_q3_out r;
    memcpy(&r, v, sizeof(r));
    r.auction = e->auction.id;
    return weir_emit(ctx, &r, sizeof(r), in->ts);
}

int nexmark_q3(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o)
{
    (void)o;
    static const weir_op_def def = {.process = q3_process};
    /* Each side is partitioned by the join key, then the two meet. */
    weir_stream *sides[2] = {
        weir_stream_key_by(weir_stream_filter(events, "q3.persons", q3_person, NULL), key_person,
                           NULL),
        weir_stream_key_by(weir_stream_filter(events, "q3.auctions", q3_auction, NULL), key_person,
                           NULL)};
    weir_stream *s = weir_stream_union(sides, 2);
    return done(j, weir_stream_process(s, "q3.join", &def, NULL), out);
}

/* ---- q4: average winning price per category ---------------------------------------------------
 */
static int q4_side(const weir_rec *in, void *arg)
{
    (void)arg;
    return EV(in)->kind != NEXMARK_PERSON;
}

static int key_auction(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    const nexmark_event *e = EV(in);
    *key = e->kind == NEXMARK_AUCTION ? &e->auction.id : &e->bid.auction;
    *len = sizeof(int64_t);
    return 0;
}

typedef struct q4_auction {
    int64_t date_time, expires, category, closed;
} q4_auction;
typedef struct q4_early {
    int64_t price, date_time;
} q4_early;

/* State "a": the auction (closed once its expiry fired: later bids are
 * dropped); "best": the highest price in [date_time, expires) so far;
 * "early": bids that came before their auction (a parallel source, or the
 * generator's lead ids), folded in when it comes. */
static int q4_bid(weir_ctx *ctx, const q4_auction *a, int64_t price, int64_t t)
{
    if (t < a->date_time || t >= a->expires)
        return 0;
    const void *v;
    size_t len;
    int e = weir_value_get(ctx, "best", &v, &len);
    if (e && e != -ENOENT)
        return e;
    int64_t best;
    if (!e) {
        memcpy(&best, v, sizeof(best));
        if (best >= price)
            return 0;
    }
    return weir_value_put(ctx, "best", &price, sizeof(price));
}

static int q4_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    const nexmark_event *e = EV(in);
    const void *v;
    size_t len;
    int err = weir_value_get(ctx, "a", &v, &len);
    if (err && err != -ENOENT)
        return err;
    if (e->kind == NEXMARK_BID) {
        if (err == -ENOENT) {
            q4_early b = {e->bid.price, e->bid.date_time};
            return state_append(ctx, "early", &b, sizeof(b));
        }
        q4_auction a;
        memcpy(&a, v, sizeof(a));
        return a.closed ? 0 : q4_bid(ctx, &a, e->bid.price, e->bid.date_time);
    }
    q4_auction a = {e->auction.date_time, e->auction.expires, e->auction.category, 0};
    if ((err = weir_value_put(ctx, "a", &a, sizeof(a))) ||
        (err = weir_timer_register(ctx, WEIR_TIME_EVENT, a.expires)))
        return err;
    err = weir_value_get(ctx, "early", &v, &len);
    if (err == -ENOENT)
        return 0;
    if (err)
        return err;
    size_t n = len / sizeof(q4_early);
    q4_early *early = malloc(len ? len : 1);
    if (!early)
        return -ENOMEM;
    memcpy(early, v, len);
    for (size_t i = 0; i < n && !err; i++)
        err = q4_bid(ctx, &a, early[i].price, early[i].date_time);
    free(early);
    return err ? err : weir_value_clear(ctx, "early");
}

static int q4_expired(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    (void)state, (void)domain;
    const void *v;
    size_t len;
    int err = weir_value_get(ctx, "a", &v, &len);
    if (err)
        return err == -ENOENT ? 0 : err;
    q4_auction a;
    memcpy(&a, v, sizeof(a));
    a.closed = 1;
    if ((err = weir_value_put(ctx, "a", &a, sizeof(a))))
        return err;
    if ((err = weir_value_get(ctx, "best", &v, &len)))
        return err == -ENOENT ? 0 : err;
    nexmark_q4_out r = {a.category, 0, 1};
    memcpy(&r.sum, v, sizeof(r.sum));
    if ((err = weir_value_clear(ctx, "best")))
        return err;
    return weir_emit(ctx, &r, sizeof(r), when);
}

static int q4_avg(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    (void)arg;
    static __thread nexmark_q4_out r;
    memcpy(&r, in->data, sizeof(r));
    if (acc) {
        nexmark_q4_out a;
        memcpy(&a, acc->data, sizeof(a));
        r.sum += a.sum;
        r.count += a.count;
    }
    *out = (weir_rec){&r, sizeof(r), in->ts};
    return 0;
}

int nexmark_q4(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o)
{
    (void)o;
    static const weir_op_def def = {.process = q4_process, .on_timer = q4_expired};
    weir_stream *s = weir_stream_filter(events, "q4.auctions+bids", q4_side, NULL);
    s = weir_stream_key_by(s, key_auction, NULL);
    s = weir_stream_process(s, "q4.winning", &def, NULL);
    s = weir_stream_key_by(s, key_i64, NULL);
    return done(j, weir_stream_reduce(s, "q4.average", q4_avg, NULL), out);
}

/* ---- q5: hot items ----------------------------------------------------------------------------
 */
typedef struct q5_count {
    int64_t auction, count;
} q5_count;

static int q5_project(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    const nexmark_event *e = EV(in);
    if (e->kind != NEXMARK_BID)
        return 0;
    q5_count c = {e->bid.auction, 1};
    return weir_emit(ctx, &c, sizeof(c), in->ts);
}

static int q5_add(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    (void)arg;
    static __thread q5_count r;
    q5_count c;
    memcpy(&r, acc ? acc->data : in->data, sizeof(r));
    memcpy(&c, in->data, sizeof(c));
    if (acc)
        r.count += c.count;
    *out = (weir_rec){&r, sizeof(r), in->ts};
    return 0;
}

/* Keyed by window start: state "m" holds the highest count and the
 * auctions that have it; the timer at the window's end - 1 (the results'
 * timestamp, fired once every count of the window came) emits them. */
typedef struct q5_max {
    int64_t count, n;
} q5_max;

static int q5_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    weir_window_result h;
    q5_count c;
    memcpy(&h, in->data, sizeof(h));
    memcpy(&c, (const uint8_t *)in->data + sizeof(h), sizeof(c));
    const void *v;
    size_t len;
    int err = weir_value_get(ctx, "m", &v, &len);
    if (err == -ENOENT) { /* the window's first result: its timer (once, not per record) */
        q5_max m[2] = {{c.count, 1}, {c.auction, 0}};
        err = weir_value_put(ctx, "m", m, sizeof(q5_max) + sizeof(int64_t));
        return err ? err : weir_timer_register(ctx, WEIR_TIME_EVENT, in->ts);
    }
    if (err)
        return err;
    q5_max m;
    memcpy(&m, v, sizeof(m));
    if (c.count < m.count)
        return 0;
    if (c.count > m.count) {
        q5_max nm[2] = {{c.count, 1}, {c.auction, 0}};
        return weir_value_put(ctx, "m", nm, sizeof(q5_max) + sizeof(int64_t));
    }
    uint8_t small[1024];
    uint8_t *buf = len + 8 <= sizeof(small) ? small : malloc(len + 8);
    if (!buf)
        return -ENOMEM;
    memcpy(buf, v, len);
    m.n++;
    memcpy(buf, &m, sizeof(m));
    memcpy(buf + len, &c.auction, sizeof(int64_t));
    err = weir_value_put(ctx, "m", buf, len + 8);
    if (buf != small)
        free(buf);
    return err;
}

static int q5_fire(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    (void)state, (void)domain;
    const void *v;
    size_t len;
    int err = weir_value_get(ctx, "m", &v, &len);
    if (err)
        return err == -ENOENT ? 0 : err;
    int64_t start = ctx_key_i64(ctx);
    q5_max m;
    memcpy(&m, v, sizeof(m));
    int64_t *ids = malloc(len);
    if (!ids)
        return -ENOMEM;
    memcpy(ids, v, len);
    for (int64_t i = 0; i < m.n && !err; i++) {
        nexmark_q5_out r = {start, ids[2 + i], m.count};
        err = weir_emit(ctx, &r, sizeof(r), when);
    }
    free(ids);
    return err ? err : weir_value_clear(ctx, "m");
}

/* The higher price wins; at equal prices the earlier bid. */
static int q7_better(const nexmark_q7_out *a, const nexmark_q7_out *b)
{
    return a->price > b->price || (a->price == b->price && a->date_time < b->date_time);
}

/*
 * Local pre-aggregation (nexmark_opts.local): a non-keyed operator chained
 * to each source subtask sums its own bids per auction over a pane of one
 * slide (q5) or keeps its highest bid of a window (q7), and emits the
 * partial results, stamped with the pane's / window's last instant, when
 * its input leaves the pane, when the watermark passes it, at a
 * checkpoint's barrier (pre_commit: a partial result in flight is never
 * only in the operator's memory) and at the end. The keyed stage after it
 * sees one record per auction and pane (q5) or per subtask and window
 * (q7) instead of one per bid - the local-global aggregation of other
 * engines. Its input must come in timestamp order (the source's does); a
 * bid of an older pane passes on unaggregated.
 */
typedef struct local_agg {
    int q7;
    int64_t size, pane;  /* pane: index of the open pane (size units), INT64_MIN: none */
    nx_map counts;       /* q5: auction -> bids */
    nexmark_q7_out best; /* q7: price 0 = none */
} local_agg;

static int local_open(weir_ctx *ctx, void *arg, void **state, int q7)
{
    (void)ctx;
    local_agg *l = calloc(1, sizeof(*l));
    if (!l || (!q7 && nx_map_init(&l->counts, 1024) < 0)) {
        free(l);
        return -ENOMEM;
    }
    l->q7 = q7;
    l->size = q7 ? win_ns(arg) : slide_ns(arg);
    l->pane = INT64_MIN;
    *state = l;
    return 0;
}

static int local_open_q5(weir_ctx *ctx, void *arg, void **state)
{
    return local_open(ctx, arg, state, 0);
}

static int local_open_q7(weir_ctx *ctx, void *arg, void **state)
{
    return local_open(ctx, arg, state, 1);
}

static void local_close(void *state)
{
    local_agg *l = state;
    nx_map_free(&l->counts);
    free(l);
}

static int q7_emit(weir_ctx *ctx, const nexmark_q7_out *b, int64_t size)
{
    struct {
        weir_window_result h;
        nexmark_q7_out b;
    } r = {{b->start, b->start + size}, *b};
    return weir_emit(ctx, &r, sizeof(r), b->start + size - 1);
}

static int local_flush(weir_ctx *ctx, local_agg *l)
{
    if (l->pane == INT64_MIN)
        return 0;
    int64_t ts = l->pane * l->size + l->size - 1;
    if (l->q7) {
        int e = l->best.price ? q7_emit(ctx, &l->best, l->size) : 0;
        l->best.price = 0;
        return e;
    }
    for (size_t i = 0; i < l->counts.cap; i++) {
        if (l->counts.k[i] == INT64_MIN)
            continue;
        q5_count c = {l->counts.k[i], l->counts.v[i]};
        int e = weir_emit(ctx, &c, sizeof(c), ts);
        if (e)
            return e;
    }
    nx_map_clear(&l->counts);
    return 0;
}

static int local_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    local_agg *l = state;
    const nexmark_event *e = EV(in);
    if (e->kind != NEXMARK_BID)
        return 0;
    int64_t pane = floor_to(in->ts, l->size) / l->size;
    if (pane != l->pane) {
        if (l->pane != INT64_MIN && pane < l->pane) { /* an older pane: pass it on */
            if (l->q7) {
                nexmark_q7_out b = {pane * l->size, e->bid.auction, e->bid.bidder, e->bid.price,
                                    e->bid.date_time};
                return q7_emit(ctx, &b, l->size);
            }
            q5_count c = {e->bid.auction, 1};
            return weir_emit(ctx, &c, sizeof(c), in->ts);
        }
        int err = local_flush(ctx, l);
        if (err)
            return err;
        l->pane = pane;
    }
    if (l->q7) {
        nexmark_q7_out b = {pane * l->size, e->bid.auction, e->bid.bidder, e->bid.price,
                            e->bid.date_time};
        if (!l->best.price || q7_better(&b, &l->best))
            l->best = b;
        return 0;
    }
    int64_t *n = nx_map_at(&l->counts, e->bid.auction);
    if (!n)
        return -ENOMEM;
    ++*n;
    return 0;
}

static int local_watermark(weir_ctx *ctx, void *state, int64_t wm)
{
    local_agg *l = state;
    if (l->pane != INT64_MIN && l->pane * l->size + l->size - 1 <= wm)
        return local_flush(ctx, l);
    return 0;
}

static int local_finish(weir_ctx *ctx, void *state)
{
    return local_flush(ctx, state);
}

static int local_barrier(weir_ctx *ctx, void *state, uint64_t id)
{
    (void)id;
    return local_flush(ctx, state);
}

int nexmark_q5(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o)
{
    static const weir_op_def def = {.process = q5_process, .on_timer = q5_fire};
    static const weir_op_def local = {.open = local_open_q5,
                                      .process = local_process,
                                      .on_watermark = local_watermark,
                                      .finish = local_finish,
                                      .close = local_close,
                                      .pre_commit = local_barrier};
    weir_window w = {.kind = WEIR_WINDOW_HOPPING, .size = win_ns(o), .slide = slide_ns(o)};
    weir_stream *s = o && o->local ? weir_stream_process(events, "q5.local", &local, (void *)o)
                                   : weir_stream_flat_map(events, "q5.bids", q5_project, NULL);
    s = weir_stream_key_by(s, key_i64, NULL);
    s = weir_stream_window(s, "q5.count", &w, q5_add, NULL);
    s = weir_stream_key_by(s, key_i64, NULL);
    return done(j, weir_stream_process(s, "q5.max", &def, NULL), out);
}

/* ---- q7: highest bid per window ---------------------------------------------------------------
 */
/* Bids as nexmark_q7_out with start = auction (the key of the first stage). */
static int q7_project(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    const nexmark_event *e = EV(in);
    if (e->kind != NEXMARK_BID)
        return 0;
    nexmark_q7_out r = {e->bid.auction, e->bid.auction, e->bid.bidder, e->bid.price,
                        e->bid.date_time};
    return weir_emit(ctx, &r, sizeof(r), in->ts);
}

static int q7_fold(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    (void)arg;
    nexmark_q7_out a, b;
    if (!acc) {
        *out = *in;
        return 0;
    }
    memcpy(&a, acc->data, sizeof(a));
    memcpy(&b, in->data, sizeof(b));
    *out = q7_better(&b, &a) ? *in : *acc;
    return 0;
}

/* Keyed by window start: state "m" holds the window's best bid so far. */
static int q7_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    weir_window_result h;
    nexmark_q7_out b;
    memcpy(&h, in->data, sizeof(h));
    memcpy(&b, (const uint8_t *)in->data + sizeof(h), sizeof(b));
    b.start = h.start;
    const void *v;
    size_t len;
    int err = weir_value_get(ctx, "m", &v, &len);
    if (err == -ENOENT) {
        err = weir_value_put(ctx, "m", &b, sizeof(b));
        return err ? err : weir_timer_register(ctx, WEIR_TIME_EVENT, in->ts);
    }
    if (err)
        return err;
    nexmark_q7_out m;
    memcpy(&m, v, sizeof(m));
    return q7_better(&b, &m) ? weir_value_put(ctx, "m", &b, sizeof(b)) : 0;
}

static int q7_fire(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    (void)state, (void)domain;
    const void *v;
    size_t len;
    int err = weir_value_get(ctx, "m", &v, &len);
    if (err)
        return err == -ENOENT ? 0 : err;
    nexmark_q7_out m;
    memcpy(&m, v, sizeof(m));
    if ((err = weir_value_clear(ctx, "m")))
        return err;
    return weir_emit(ctx, &m, sizeof(m), when);
}

int nexmark_q7(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o)
{
    static const weir_op_def def = {.process = q7_process, .on_timer = q7_fire};
    static const weir_op_def local = {.open = local_open_q7,
                                      .process = local_process,
                                      .on_watermark = local_watermark,
                                      .finish = local_finish,
                                      .close = local_close,
                                      .pre_commit = local_barrier};
    weir_window w = {.kind = WEIR_WINDOW_TUMBLING, .size = win_ns(o)};
    weir_stream *s;
    if (o && o->local) {
        s = weir_stream_process(events, "q7.local", &local, (void *)o);
    } else {
        s = weir_stream_flat_map(events, "q7.bids", q7_project, NULL);
        s = weir_stream_key_by(s, key_i64, NULL);
        s = weir_stream_window(s, "q7.max", &w, q7_fold, NULL);
    }
    s = weir_stream_key_by(s, key_i64, NULL);
    return done(j, weir_stream_process(s, "q7.top", &def, NULL), out);
}

/* ---- q8: monitor new users (a window join) -------------------------------------------------- */
static int q8_side(const weir_rec *in, void *arg)
{
    (void)arg;
    return EV(in)->kind != NEXMARK_BID;
}

typedef struct q8_person {
    int64_t start;
    char name[24];
} q8_person;

/* Keyed by person id / seller. State "p": the person and the window it
 * registered in; "a": the window starts in which it opened auctions (each
 * once). A timer at each window's end - 1 joins that window and drops it. */
static int q8_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    int64_t size = win_ns(state);
    const nexmark_event *e = EV(in);
    int64_t start = floor_to(in->ts, size);
    int err = weir_timer_register(ctx, WEIR_TIME_EVENT, start + size - 1);
    if (err)
        return err;
    if (e->kind == NEXMARK_PERSON) {
        q8_person p = {.start = start};
        memcpy(p.name, e->person.name, sizeof(p.name));
        return weir_value_put(ctx, "p", &p, sizeof(p));
    }
    const void *v;
    size_t len;
    err = weir_value_get(ctx, "a", &v, &len);
    if (err && err != -ENOENT)
        return err;
    for (size_t i = 0; !err && i < len / sizeof(int64_t); i++) {
        int64_t s;
        memcpy(&s, (const int64_t *)v + i, sizeof(s));
        if (s == start)
            return 0;
    }
    return state_append(ctx, "a", &start, sizeof(start));
}

static int q8_fire(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    (void)domain;
    int64_t size = win_ns(state), start = when - size + 1;
    const void *v;
    size_t len;
    int err = weir_value_get(ctx, "a", &v, &len);
    if (err && err != -ENOENT)
        return err;
    int opened = 0;
    int64_t keep[16];
    size_t nkeep = 0;
    if (!err && len > sizeof(keep))
        return weir_fail(ctx, -E2BIG, "q8: %zu open windows", len / sizeof(int64_t));
    for (size_t i = 0; !err && i < len / sizeof(int64_t); i++) {
        int64_t s;
        memcpy(&s, (const int64_t *)v + i, sizeof(s));
        if (s == start)
            opened = 1;
        else
            keep[nkeep++] = s;
    }
    if (!err && (err = nkeep ? weir_value_put(ctx, "a", keep, nkeep * sizeof(int64_t))
                             : weir_value_clear(ctx, "a")))
        return err;
    err = weir_value_get(ctx, "p", &v, &len);
    if (err)
        return err == -ENOENT ? 0 : err;
    q8_person p;
    memcpy(&p, v, sizeof(p));
    if (p.start != start)
        return 0;
    if ((err = weir_value_clear(ctx, "p")) || !opened)
        return err;
    nexmark_q8_out r = {.id = ctx_key_i64(ctx), .start = start};
    memcpy(r.name, p.name, sizeof(r.name));
    return weir_emit(ctx, &r, sizeof(r), when);
}

static int q8_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    *state = arg; /* the nexmark_opts (or NULL) */
    return 0;
}

int nexmark_q8(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o)
{
    static const weir_op_def def = {.open = q8_open, .process = q8_process, .on_timer = q8_fire};
    weir_stream *s = weir_stream_filter(events, "q8.persons+auctions", q8_side, NULL);
    s = weir_stream_key_by(s, key_person, NULL);
    return done(j, weir_stream_process(s, "q8.join", &def, (void *)o), out);
}

/* ---- word count over auction descriptions ------------------------------------------------ */
static int wc_split(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    const nexmark_event *e = EV(in);
    if (e->kind != NEXMARK_AUCTION)
        return 0;
    const char *d = e->auction.description, *end = d + strnlen(d, sizeof(e->auction.description));
    while (d < end) {
        const char *w = d;
        while (d < end && *d != ' ')
            d++;
        if (d > w && d - w <= 64) {
            /* [count 1][word]: the reduce's first value is the record itself */
            uint8_t buf[sizeof(nexmark_wc_out) + 64];
            nexmark_wc_out one = {1};
            memcpy(buf, &one, sizeof(one));
            memcpy(buf + sizeof(one), w, (size_t)(d - w));
            int err = weir_emit(ctx, buf, sizeof(one) + (size_t)(d - w), in->ts);
            if (err)
                return err;
        }
        while (d < end && *d == ' ')
            d++;
    }
    return 0;
}

static int key_word(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = (const uint8_t *)in->data + sizeof(nexmark_wc_out);
    *len = in->len - sizeof(nexmark_wc_out);
    return 0;
}

/* Counts add up; the word is the input's (both hold the same). */
static int wc_count(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    (void)arg;
    static __thread uint8_t buf[sizeof(nexmark_wc_out) + 64];
    nexmark_wc_out a = {0}, c;
    if (acc)
        memcpy(&a, acc->data, sizeof(a));
    memcpy(&c, in->data, sizeof(c));
    c.count += a.count;
    size_t n = in->len <= sizeof(buf) ? in->len : sizeof(buf);
    memcpy(buf, in->data, n);
    memcpy(buf, &c, sizeof(c));
    *out = (weir_rec){buf, n, in->ts};
    return 0;
}

int nexmark_wc(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o)
{
    (void)o;
    weir_stream *s = weir_stream_flat_map(events, "wc.split", wc_split, NULL);
    s = weir_stream_key_by(s, key_word, NULL);
    return done(j, weir_stream_reduce(s, "wc.count", wc_count, NULL), out);
}
