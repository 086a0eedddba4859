/* SPDX-License-Identifier: Apache-2.0 */
/*
 * timers.c - a keyed subtask's timers: event-time and processing-time
 * timers, at most one per key and time (weir_timer_register of an existing
 * timer does nothing), fired in time order.
 *
 * Per domain, in memory: a bucket per time holding its timers in the order
 * they were registered (so timers of one time fire in that order), a
 * binary min-heap of the buckets by time with a map from time to bucket
 * beside it, and a hash set over (time, key) of every live timer for the
 * one-per-key-and-time rule and for weir_timer_delete. Each timer is one
 * allocation holding its key (16-byte aligned, like any key a context
 * hands out). Window timers come by the thousand per time: registering
 * one is a set probe and an append, firing one a read from the front of
 * the earliest bucket and a set erase; the heap moves only when a time is
 * new or done. A deleted timer leaves the set at once and its bucket
 * lazily: marked, dropped when it reaches the front, or all together when
 * the deleted outnumber the live. A watermark that reaches no timer costs
 * one look at the earliest bucket.
 *
 * Firing. Event-time timers fire when a watermark passes them (task.c's
 * advance). Processing-time timers are items of the subtask's mailbox like
 * everything else it does: one runtime callback timer (weir_timer_start)
 * stays armed at the earliest of them and posts IT_TIMER when it is due;
 * the subtask fires what came due when it takes the item and arms the
 * next. Registering an earlier one re-arms; a deleted earliest one leaves
 * the armed timer early, which then fires nothing and arms the next. The
 * callback runs on the subtask's own thread (the runtime keeps the task
 * that started a timer on its thread), so ptimer needs no lock. On a
 * backend whose reads may answer later, the state a window's due timers
 * read is fetched in rounds before they fire (prefetch, below).
 *
 * Checkpoints. Timers belong to key groups like any keyed state, so a
 * rescaled restore must move them with their groups. A snapshot of the
 * subtask's state backend takes them as entries of their groups
 * (weir_state_capture_with, sorted here), under their own prefix
 *
 *   [0xFF event | 0xFE processing][time u64][key length u32][key] -> ""
 *
 * (times order-preserving, integers big-endian; the tags sort after the
 * first byte of every state entry, its state name's length, keyed.c); a
 * restore takes them back out of the backend
 * into the buckets. So the snapshot file holds them in the backend's own
 * format, and a restore of any range of groups brings exactly the timers
 * of that range.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "stream/stream_int.h"

#define TAG_EVENT 0xFFu
#define TAG_PROC  0xFEu

_Static_assert(offsetof(weir__timer, key) % 16 == 0, "timer keys are 16-byte aligned");

static uint64_t timer_hash(int64_t when, const void *key, size_t klen)
{
    uint64_t h = weir_key_hash(key, klen) ^ ((uint64_t)when * 0x9E3779B97F4A7C15ull);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
}

/* Linear probing, deleting without tombstones: an entry at j whose home
 * slot is `home` may move back to the emptied slot i unless home lies in
 * (i, j], cyclically. */
static int may_move(size_t i, size_t j, size_t home)
{
    return (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j);
}

/* ---- timer memory: timers with keys of up to 16 bytes are recycled ----------------------- */
/* (A watermark fires a window's timers by the thousand, and as many come
 * back before the next one: up to as many spare as live, and 4096.) */
#define SMALL_KEY 16
#define SPARE_MIN 4096

static weir__timer *timer_alloc(weir__timers *t, size_t klen)
{
    if (klen <= SMALL_KEY && t->spare) {
        weir__timer *x = t->spare;
        memcpy(&t->spare, x->key, sizeof(t->spare));
        t->nspare--;
        return x;
    }
    return weir__malloc(sizeof(weir__timer) + (klen <= SMALL_KEY ? SMALL_KEY : klen));
}

static void timer_free(weir__timers *t, weir__timer *x)
{
    if (x->klen > SMALL_KEY || (t->nspare >= SPARE_MIN && t->nspare >= t->live)) {
        weir__free(x);
        return;
    }
    memcpy(x->key, &t->spare, sizeof(t->spare));
    t->spare = x;
    t->nspare++;
}

/* ---- buckets: the timers of one time, and a heap of them by time ----------------------------- */
static void bheap_up(weir__timers *t, size_t i)
{
    weir__tbucket *b = t->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (t->heap[parent]->when <= b->when)
            break;
        t->heap[i] = t->heap[parent];
        i = parent;
    }
    t->heap[i] = b;
}

static void bheap_down(weir__timers *t, size_t i)
{
    weir__tbucket *b = t->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= t->nb)
            break;
        if (c + 1 < t->nb && t->heap[c + 1]->when < t->heap[c]->when)
            c++;
        if (t->heap[c]->when >= b->when)
            break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    t->heap[i] = b;
}

static size_t bmap_home(const weir__timers *t, int64_t when)
{
    uint64_t h = (uint64_t)when * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 32)) & (t->bmcap - 1);
}

/* The map slot of `when`'s bucket, or the empty slot where it would go. */
static size_t bmap_find(const weir__timers *t, int64_t when)
{
    size_t mask = t->bmcap - 1, i = bmap_home(t, when);
    while (t->bmap[i] && t->bmap[i]->when != when)
        i = (i + 1) & mask;
    return i;
}

static void bmap_erase(weir__timers *t, size_t i)
{
    size_t mask = t->bmcap - 1;
    t->bmap[i] = NULL;
    for (size_t j = (i + 1) & mask; t->bmap[j]; j = (j + 1) & mask) {
        if (may_move(i, j, bmap_home(t, t->bmap[j]->when))) {
            t->bmap[i] = t->bmap[j];
            t->bmap[j] = NULL;
            i = j;
        }
    }
}

static void bucket_free(weir__timers *t, weir__tbucket *b)
{
    if (t->last == b)
        t->last = NULL;
    weir__free(b->v);
    weir__free(b);
}

/* The bucket of `when`, made (in the map and the heap) if it is new. */
static weir__tbucket *bucket_of(weir__timers *t, int64_t when)
{
    if (t->last && t->last->when == when)
        return t->last;
    if ((t->nb + 1) * 2 > t->bmcap) {
        size_t cap = t->bmcap ? t->bmcap * 2 : 64;
        weir__tbucket **m = weir__calloc(cap, sizeof(*m));
        if (!m)
            return NULL;
        weir__free(t->bmap);
        t->bmap = m;
        t->bmcap = cap;
        for (size_t i = 0; i < t->nb; i++)
            t->bmap[bmap_find(t, t->heap[i]->when)] = t->heap[i];
    }
    size_t i = bmap_find(t, when);
    if (!t->bmap[i]) {
        if (t->nb == t->bcap) {
            size_t cap = t->bcap ? t->bcap * 2 : 16;
            weir__tbucket **h = weir__realloc(t->heap, cap * sizeof(*h));
            if (!h)
                return NULL;
            t->heap = h;
            t->bcap = cap;
        }
        weir__tbucket *b = weir__calloc(1, sizeof(*b));
        if (!b)
            return NULL;
        b->when = when;
        t->bmap[i] = b;
        t->heap[t->nb++] = b;
        bheap_up(t, t->nb - 1);
    }
    return t->last = t->bmap[i];
}

static int bucket_push(weir__tbucket *b, weir__timer *x)
{
    if (b->n == b->cap) {
        if (b->head > b->n / 2) { /* mostly fired already: move down, keep the memory */
            memmove(b->v, b->v + b->head, (b->n - b->head) * sizeof(*b->v));
            b->n -= b->head;
            b->head = 0;
        } else {
            size_t cap = b->cap ? b->cap * 2 : 4;
            weir__timer **v = weir__realloc(b->v, cap * sizeof(*v));
            if (!v)
                return -ENOMEM;
            b->v = v;
            b->cap = cap;
        }
    }
    b->v[b->n++] = x;
    return 0;
}

/* Deleted timers stay in their buckets, marked, until they reach the front
 * or outnumber the live ones: then every bucket is filtered at once. */
static void compact(weir__timers *t)
{
    size_t k = 0;
    for (size_t i = 0; i < t->nb; i++) {
        weir__tbucket *b = t->heap[i];
        size_t m = 0;
        for (size_t j = b->head; j < b->n; j++) {
            if (b->v[j]->dead)
                timer_free(t, b->v[j]);
            else
                b->v[m++] = b->v[j];
        }
        b->head = 0;
        b->n = m;
        if (m) {
            t->heap[k++] = b;
        } else {
            bmap_erase(t, bmap_find(t, b->when));
            bucket_free(t, b);
        }
    }
    t->nb = k;
    for (size_t i = t->nb / 2; i-- > 0;)
        bheap_down(t, i);
    t->dead = 0;
}

/* The first live timer of the earliest bucket (emptied buckets and deleted
 * timers in front go on the way), or NULL. */
static weir__timer *top(weir__timers *t)
{
    while (t->nb) {
        weir__tbucket *b = t->heap[0];
        while (b->head < b->n && b->v[b->head]->dead) {
            timer_free(t, b->v[b->head++]);
            t->dead--;
        }
        if (b->head < b->n)
            return b->v[b->head];
        bmap_erase(t, bmap_find(t, b->when));
        t->heap[0] = t->heap[--t->nb];
        if (t->nb)
            bheap_down(t, 0);
        bucket_free(t, b);
    }
    return NULL;
}

/* ---- the set (open addressing, linear probing, at most half full) -----------------------------
 */
static size_t set_find(const weir__timers *t, uint64_t h, int64_t when, const void *key,
                       size_t klen)
{
    size_t mask = t->scap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        const weir__tslot *sl = &t->set[i];
        if (!sl->x || (sl->hash == h && sl->x->when == when && sl->x->klen == klen &&
                       (klen == 0 || memcmp(sl->x->key, key, klen) == 0)))
            return i;
    }
}

/* The slot of a timer that is in the set (found by identity, not key). */
static size_t set_slot(const weir__timers *t, const weir__timer *x)
{
    size_t mask = t->scap - 1, i = (size_t)x->hash & mask;
    while (t->set[i].x != x)
        i = (i + 1) & mask;
    return i;
}

static void set_insert(weir__timers *t, weir__timer *x)
{
    size_t mask = t->scap - 1, i = (size_t)x->hash & mask;
    while (t->set[i].x)
        i = (i + 1) & mask;
    t->set[i] = (weir__tslot){x->hash, x};
}

/* Empty slot i, moving later entries of its probe run back (no tombstones). */
static void set_erase(weir__timers *t, size_t i)
{
    size_t mask = t->scap - 1;
    t->set[i].x = NULL;
    for (size_t j = (i + 1) & mask; t->set[j].x; j = (j + 1) & mask) {
        if (may_move(i, j, (size_t)t->set[j].hash & mask)) {
            t->set[i] = t->set[j];
            t->set[j].x = NULL;
            i = j;
        }
    }
}

static int set_grow(weir__timers *t)
{
    if ((t->live + 1) * 2 <= t->scap)
        return 0;
    size_t cap = t->scap ? t->scap * 2 : 128;
    weir__tslot *s = weir__calloc(cap, sizeof(*s));
    if (!s)
        return -ENOMEM;
    weir__free(t->set);
    t->set = s;
    t->scap = cap;
    for (size_t i = 0; i < t->nb; i++)
        for (size_t j = t->heap[i]->head; j < t->heap[i]->n; j++)
            if (!t->heap[i]->v[j]->dead)
                set_insert(t, t->heap[i]->v[j]);
    return 0;
}

static int timer_add(weir__timers *t, int kg, const void *key, size_t klen, int64_t when)
{
    if (set_grow(t) < 0)
        return -ENOMEM;
    uint64_t h = timer_hash(when, key, klen);
    size_t i = set_find(t, h, when, key, klen);
    if (t->set[i].x)
        return 0; /* one per key and time */
    weir__tbucket *b = bucket_of(t, when);
    weir__timer *x = b ? timer_alloc(t, klen) : NULL;
    if (!x)
        return -ENOMEM;
    *x = (weir__timer){.when = when, .hash = h, .klen = (uint32_t)klen, .kg = kg};
    if (klen)
        memcpy(x->key, key, klen);
    if (bucket_push(b, x) < 0) {
        timer_free(t, x);
        return -ENOMEM;
    }
    t->set[i] = (weir__tslot){h, x};
    t->live++;
    return 0;
}

static int timer_del(weir__timers *t, const void *key, size_t klen, int64_t when)
{
    if (!t->live)
        return -ENOENT;
    size_t i = set_find(t, timer_hash(when, key, klen), when, key, klen);
    weir__timer *x = t->set[i].x;
    if (!x)
        return -ENOENT;
    set_erase(t, i);
    x->dead = 1;
    t->live--;
    if (++t->dead > t->live + 64)
        compact(t);
    return 0;
}

/* Take the earliest live timer out (the caller frees it). */
static weir__timer *pop(weir__timers *t)
{
    weir__timer *x = top(t);
    weir__tbucket *b = t->heap[0];
    /* The timers of a bucket were registered in no order of memory: fetch
     * the ones a few places on (and their set slots) ahead of need. */
    if (b->head + 16 < b->n)
        __builtin_prefetch(b->v[b->head + 16]);
    if (b->head + 8 < b->n)
        __builtin_prefetch(&t->set[(size_t)b->v[b->head + 8]->hash & (t->scap - 1)]);
    b->head++;
    set_erase(t, set_slot(t, x));
    t->live--;
    return x;
}

void weir__timers_free(weir__timers *t)
{
    for (size_t i = 0; i < t->nb; i++) {
        weir__tbucket *b = t->heap[i];
        for (size_t j = b->head; j < b->n; j++)
            weir__free(b->v[j]);
        weir__free(b->v);
        weir__free(b);
    }
    while (t->spare) {
        weir__timer *x = t->spare;
        memcpy(&t->spare, x->key, sizeof(t->spare));
        weir__free(x);
    }
    weir__free(t->heap);
    weir__free(t->bmap);
    weir__free(t->set);
    *t = (weir__timers){0};
}

/* ---- the API -------------------------------------------------------------------------------- */
static int check(const weir_ctx *ctx, int domain)
{
    return ctx && ctx->backend && ctx->rc &&
           (domain == WEIR_TIME_EVENT || domain == WEIR_TIME_PROCESSING);
}

int weir_timer_register(weir_ctx *ctx, int domain, int64_t when)
{
    if (!check(ctx, domain) || when == INT64_MAX)
        return -EINVAL;
    const weir__rctx *rc = ctx->rc;
    if (13 + rc->klen > WEIR_STATE_MAX_KEY)
        return -E2BIG; /* its checkpoint entry could not be stored */
    subtask *st = ctx->st;
    int e = timer_add(&st->timers[domain], rc->kg, rc->key, rc->klen, when);
    if (e >= 0 && domain == WEIR_TIME_PROCESSING && (!st->ptimer || when < st->ptimer_at)) {
        int a = weir__timers_arm(st);
        if (a < 0)
            return a;
    }
    return e;
}

int weir_timer_delete(weir_ctx *ctx, int domain, int64_t when)
{
    if (!check(ctx, domain))
        return -EINVAL;
    int e = timer_del(&ctx->st->timers[domain], ctx->rc->key, ctx->rc->klen, when);
    return e == -ENOENT ? 0 : e;
}

/* ---- prefetch: the state the next timers will read, in one round ------------------------------
 * On a backend whose reads may answer later, an operator that says which
 * state its on_timer reads (sop.timer_reads: windows) has the reads of
 * its next due timers - up to WEIR__PREFETCH_MAX timers and as many keys,
 * in the order they will fire - asked for together before they fire
 * (keyed.c's round), instead of one read on the subtask's thread per key
 * as each fires. The timers are only looked at, not taken: whatever their
 * callbacks register or delete fires as it would without the round, whose
 * values are served only while no write changed them. */

/* Bucket heap entries visited in time order, at most this many a round. */
#define PF_BUCKETS 512

/* A min-heap of bucket heap positions by time (the frontier of a walk of
 * the bucket heap in time order). */
typedef struct frontier {
    size_t v[2 * PF_BUCKETS + 2];
    size_t n;
} frontier;

static void fr_push(frontier *f, const weir__timers *t, size_t i)
{
    size_t k = f->n++;
    while (k > 0 && t->heap[f->v[(k - 1) / 2]]->when > t->heap[i]->when) {
        f->v[k] = f->v[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    f->v[k] = i;
}

static size_t fr_pop(frontier *f, const weir__timers *t)
{
    size_t top = f->v[0], last = f->v[--f->n], k = 0;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= f->n)
            break;
        if (c + 1 < f->n && t->heap[f->v[c + 1]]->when < t->heap[f->v[c]]->when)
            c++;
        if (t->heap[f->v[c]]->when >= t->heap[last]->when)
            break;
        f->v[k] = f->v[c];
        k = c;
    }
    if (f->n)
        f->v[k] = last;
    return top;
}

/* Gather and wait for the reads of the due timers from the earliest on;
 * *count: how many timers the round covers (their reads all in it). */
static int prefetch(subtask *st, int domain, int64_t upto, unsigned *count)
{
    weir__timers *t = &st->timers[domain];
    weir_ctx *c = &st->ctx[0];
    *count = 0;
    int e = weir__prefetch_begin(st);
    if (e < 0)
        return e;
    frontier *f = weir__malloc(sizeof(*f));
    if (!f) {
        weir__prefetch_end(st);
        return -ENOMEM;
    }
    f->n = 0;
    if (t->nb && t->heap[0]->when <= upto)
        fr_push(f, t, 0);
    unsigned n = 0;
    int full = 0;
    for (int visited = 0; !e && !full && f->n && visited < PF_BUCKETS; visited++) {
        size_t i = fr_pop(f, t);
        for (size_t k = 2 * i + 1; k <= 2 * i + 2; k++)
            if (k < t->nb && t->heap[k]->when <= upto)
                fr_push(f, t, k);
        const weir__tbucket *b = t->heap[i];
        for (size_t j = b->head; j < b->n && n < WEIR__PREFETCH_MAX; j++) {
            const weir__timer *x = b->v[j];
            if (x->dead)
                continue;
            weir__rctx rc = {x->key, x->klen, x->kg, x->when};
            c->rc = &rc;
            e = c->op->timer_reads(c, c->state, domain, x->when);
            c->rc = NULL;
            if (e) { /* 1: the round is full; the timer reads for itself */
                full = 1;
                e = e < 0 ? e : 0;
                break;
            }
            n++;
        }
        full |= n == WEIR__PREFETCH_MAX;
    }
    weir__free(f);
    if (!e)
        e = weir__prefetch_wait(st);
    if (e < 0) {
        weir__prefetch_end(st);
        return e;
    }
    *count = n;
    return 0;
}

/* Fire every timer of the domain at or before `upto`, in time order. */
int weir__timers_fire(subtask *st, int domain, int64_t upto)
{
    weir__timers *t = &st->timers[domain];
    weir_ctx *c = &st->ctx[0];
    weir__timer *next;
    int pf = c->op->timer_reads && st->backend && st->backend->ops->get_async;
    unsigned round = 0; /* timers the current prefetch round covers, not fired yet */
    int e = 0;
    for (unsigned fired = 0; (next = top(t)) != NULL && next->when <= upto; fired++) {
        /* A watermark can close many windows: let the other subtasks of
         * this thread run now and then. */
        if (fired % 256 == 255) {
            if ((e = weir_task_yield()) < 0)
                break;
            if (!(next = top(t)) || next->when > upto)
                break;
        }
        if (pf && !round) {
            if ((e = prefetch(st, domain, upto, &round)) < 0)
                break;
            if (!(next = top(t)) || next->when > upto) /* (the wait let nothing else run) */
                break;
        }
        weir__timer *x = pop(t);
        weir__rctx rc = {x->key, x->klen, x->kg, x->when};
        c->rc = &rc;
        e = c->op->def.on_timer ? c->op->def.on_timer(c, c->state, domain, x->when) : 0;
        c->rc = NULL;
        timer_free(t, x);
        if (e < 0)
            break;
        if (round && --round == 0)
            weir__prefetch_end(st);
    }
    weir__prefetch_end(st);
    return e < 0 ? e : 0;
}

/* The earliest timer of the domain (INT64_MAX: none). */
int64_t weir__timers_next(subtask *st, int domain)
{
    weir__timer *x = top(&st->timers[domain]);
    return x ? x->when : INT64_MAX;
}

/* The armed timer is due: it freed itself; the subtask fires on its item. */
static void proc_due(void *arg)
{
    subtask *st = arg;
    st->ptimer = NULL;
    weir__subtask_post(st, (item){.kind = IT_TIMER});
}

int weir__timers_arm(subtask *st)
{
    int64_t next = weir__timers_next(st, WEIR_TIME_PROCESSING);
    if (st->ptimer && st->ptimer_at <= next)
        return 0; /* it fires early enough */
    weir__timers_disarm(st);
    if (next == INT64_MAX)
        return 0;
    int64_t now = weir_time_now(); /* (next - now cannot overflow once next > now) */
    if (!(st->ptimer = weir_timer_start(next > now ? next - now : 0, 0, proc_due, st)))
        return -ENOMEM;
    st->ptimer_at = next;
    return 0;
}

void weir__timers_disarm(subtask *st)
{
    if (st->ptimer)
        weir_timer_cancel(st->ptimer);
    st->ptimer = NULL;
}

/* ---- checkpoints ---------------------------------------------------------------------------- */
static uint8_t tag_of(int domain)
{
    return domain == WEIR_TIME_EVENT ? TAG_EVENT : TAG_PROC;
}

/* A timer's place in the snapshot, compared inline (a sort that followed
 * the pointers would miss the cache at every step). */
typedef struct sorted {
    uint32_t kg_tag; /* group, then tag */
    uint32_t klen;
    int64_t when;
    uint64_t prefix; /* the key's first 8 bytes, big-endian, zero-padded */
    const weir__timer *x;
} sorted;

/* Byte order of the timers' entries: group, tag, time, key length, key. */
static int by_entry(const void *pa, const void *pb)
{
    const sorted *a = pa, *b = pb;
    if (a->kg_tag != b->kg_tag)
        return a->kg_tag < b->kg_tag ? -1 : 1;
    if (a->when != b->when)
        return a->when < b->when ? -1 : 1;
    if (a->klen != b->klen)
        return a->klen < b->klen ? -1 : 1;
    if (a->prefix != b->prefix)
        return a->prefix < b->prefix ? -1 : 1;
    return a->klen > 8 ? memcmp(a->x->key + 8, b->x->key + 8, a->klen - 8) : 0;
}

/* A checkpoint's capture walks every timer and every entry: with 100k
 * timers that is tens of milliseconds, too long to keep the thread from
 * the other subtasks pinned to it. So it yields every CAPTURE_STEP timers.
 * That is safe: only this subtask's fiber touches its timers and backend,
 * and it does nothing else until the capture returns. */
#define CAPTURE_STEP 8192

static int capture_step(size_t *since, size_t done)
{
    if ((*since += done) < CAPTURE_STEP)
        return 0;
    *since = 0;
    return weir_task_yield() == -ECANCELED ? -ECANCELED : 0;
}

/* Capture the backend with every timer as an entry of its group. The sort
 * is by group and tag first (a counting pass, 2 slots per group), then within
 * each slot, so it can yield between slots. */
int weir__timers_capture(subtask *st, uint64_t id, weir_state_snapshot **out)
{
    size_t n = st->timers[0].live + st->timers[1].live, bytes = 0, since = 0;
    if (!n)
        return weir_state_capture(st->backend, id, out);
    sorted *raw = weir__malloc(n * sizeof(*raw)), *v = weir__malloc(n * sizeof(*v));
    weir_state_entry *ents = weir__malloc(n * sizeof(*ents));
    enum { SLOTS = 2 * WEIR_KEY_GROUPS };
    size_t start[SLOTS + 1] = {0};
    int e = raw && v && ents ? 0 : -ENOMEM;
    size_t k = 0;
    for (int d = 0; !e && d < 2; d++)
        for (size_t i = 0; !e && i < st->timers[d].nb; i++) {
            const weir__tbucket *b = st->timers[d].heap[i];
            for (size_t j = b->head; j < b->n && !e; j++) {
                const weir__timer *x = b->v[j];
                if (x->dead)
                    continue;
                uint8_t pre[8] = {0};
                memcpy(pre, x->key, x->klen < 8 ? x->klen : 8);
                raw[k++] = (sorted){(uint32_t)x->kg << 8 | tag_of(d), x->klen, x->when,
                                    weir__get_be64(pre), x};
                bytes += 13 + (size_t)x->klen;
                e = capture_step(&since, 1);
            }
        }
        /* Slot of a timer: its group, then its tag (0xFE before 0xFF). */
#define SLOT(kt) (((kt) >> 8) * 2 + ((kt)&1u))
    for (size_t i = 0; !e && i < n; i++)
        start[SLOT(raw[i].kg_tag) + 1]++;
    for (int i = 0; !e && i < SLOTS; i++)
        start[i + 1] += start[i];
    size_t fill[SLOTS];
    memcpy(fill, start, sizeof(fill));
    for (size_t i = 0; !e && i < n; i++)
        v[fill[SLOT(raw[i].kg_tag)]++] = raw[i];
#undef SLOT
    for (int i = 0; !e && i < SLOTS; i++) {
        size_t len = start[i + 1] - start[i];
        if (len < 2)
            continue;
        qsort(v + start[i], len, sizeof(*v), by_entry);
        e = capture_step(&since, len);
    }
    uint8_t *buf = e ? NULL : weir__malloc(bytes), *p = buf;
    if (!e && !buf)
        e = -ENOMEM;
    for (size_t i = 0; !e && i < n; i++) {
        const weir__timer *x = v[i].x;
        p[0] = (uint8_t)v[i].kg_tag;
        weir__put_time(p + 1, x->when);
        weir__put_be32(p + 9, x->klen);
        if (x->klen)
            memcpy(p + 13, x->key, x->klen);
        ents[i] = (weir_state_entry){x->kg, p, 13 + (size_t)x->klen, "", 0};
        p += 13 + (size_t)x->klen;
        if ((i & (CAPTURE_STEP - 1)) == CAPTURE_STEP - 1)
            e = capture_step(&since, CAPTURE_STEP);
    }
    if (!e)
        e = weir_state_capture_with(st->backend, id, ents, n, out);
    weir__free(buf);
    weir__free(ents);
    weir__free(v);
    weir__free(raw);
    return e;
}

typedef struct load {
    weir__timers *t;
    int kg;
    uint8_t **keys; /* the entries read, deleted after the scan */
    size_t *lens;
    size_t n, cap;
} load;

static int load_fn(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
    (void)val, (void)vlen;
    load *l = arg;
    const uint8_t *k = key;
    if (klen < 13 || weir__get_be32(k + 9) != klen - 13 || weir__get_time(k + 1) == INT64_MAX)
        return -EBADMSG; /* (no timer is ever at INT64_MAX) */
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        uint8_t **ks = weir__realloc(l->keys, cap * sizeof(*ks));
        if (ks)
            l->keys = ks;
        size_t *ls = weir__realloc(l->lens, cap * sizeof(*ls));
        if (ls)
            l->lens = ls;
        if (!ks || !ls)
            return -ENOMEM;
        l->cap = cap;
    }
    uint8_t *copy = weir__malloc(klen);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, key, klen);
    l->keys[l->n] = copy;
    l->lens[l->n++] = klen;
    return timer_add(l->t, l->kg, k + 13, klen - 13, weir__get_time(k + 1));
}

/* After a restore: move the timers the backend now holds into the heaps. */
int weir__timers_load(subtask *st)
{
    int e = 0;
    for (int d = 0; d < 2 && !e; d++) {
        uint8_t tag = tag_of(d);
        for (int kg = st->backend->first_kg; kg < st->backend->end_kg && !e; kg++) {
            /* A group's first scan sorts the keys a restore left pending:
             * over every group of a large state that is tens of
             * milliseconds, so let the thread's other tasks run between. */
            if ((e = weir_task_yield()) < 0)
                break;
            load l = {&st->timers[d], kg, NULL, NULL, 0, 0};
            e = weir_state_scan(st->backend, kg, &tag, 1, load_fn, &l);
            for (size_t i = 0; i < l.n; i++) {
                if (!e)
                    e = weir_state_delete(st->backend, kg, l.keys[i], l.lens[i]);
                weir__free(l.keys[i]);
            }
            weir__free(l.keys);
            weir__free(l.lens);
        }
    }
    return e;
}
