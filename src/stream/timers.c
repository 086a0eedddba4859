/* SPDX-License-Identifier: Apache-2.0 */
/*
 * timers.c - a keyed subtask's timers: event-time and processing-time
 * timers, at most one per key and time (weir_timer_register of an existing
 * timer does nothing), fired in time order.
 *
 * Per domain, in memory: a binary min-heap ordered by (time, registration
 * number), so timers of one time fire in the order they were registered,
 * and a hash set over (time, key) beside it for the one-per-key-and-time
 * rule and for weir_timer_delete. Each timer is one allocation holding its
 * key (16-byte aligned, like any key a context hands out); the heap holds
 * (time, number, timer) and the set (hash, timer) inline, so sifting and
 * probing read no timer but the one sought. A deleted timer leaves the set
 * at once and the heap lazily: marked, dropped when it reaches the top, or
 * all together when the deleted outnumber the live. Registering, deleting
 * and firing cost O(log n) integer comparisons; a watermark that reaches
 * no timer costs one look at the heap's top.
 *
 * Checkpoints. Timers belong to key groups like any keyed state, so a
 * rescaled restore must move them with their groups. At a snapshot they are
 * written into the subtask's state backend under their own prefix
 *
 *   [0xFF event | 0xFE processing][time u64][key length u32][key] -> ""
 *
 * (times order-preserving, integers big-endian; the tags sort after every
 * state index of keyed.c), the backend is captured, and they are deleted
 * again; a restore takes them back out of the backend into the heaps. So
 * the snapshot file holds them in the backend's own format and restore of
 * any range of groups brings exactly the timers of that range.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- the heap (entries inline: sifting never touches a timer) ---------------------------- */
static int before(const weir__theap *a, const weir__theap *b)
{
    return a->when < b->when || (a->when == b->when && a->seq < b->seq);
}

static void sift_up(weir__timers *t, size_t i)
{
    weir__theap x = t->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(&x, &t->heap[parent]))
            break;
        t->heap[i] = t->heap[parent];
        i = parent;
    }
    t->heap[i] = x;
}

static void sift_down(weir__timers *t, size_t i)
{
    weir__theap x = t->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= t->n)
            break;
        if (c + 1 < t->n && before(&t->heap[c + 1], &t->heap[c]))
            c++;
        if (!before(&t->heap[c], &x))
            break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    t->heap[i] = x;
}

static void heap_pop(weir__timers *t)
{
    t->heap[0] = t->heap[--t->n];
    if (t->n)
        sift_down(t, 0);
}

/* Deleted timers stay in the heap, marked, until they reach its top or
 * outnumber the live ones: then the heap is rebuilt without them. */
static void compact(weir__timers *t)
{
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (t->heap[i].x->dead)
            free(t->heap[i].x);
        else
            t->heap[k++] = t->heap[i];
    }
    t->n = k;
    for (size_t i = t->n / 2; i-- > 0;)
        sift_down(t, i);
}

/* Drop deleted timers from the top; the first live one, or NULL. */
static weir__timer *top(weir__timers *t)
{
    while (t->n && t->heap[0].x->dead) {
        free(t->heap[0].x);
        heap_pop(t);
    }
    return t->n ? t->heap[0].x : NULL;
}

/* ---- the set (open addressing, linear probing, at most half full) ----------------------------- */
static size_t set_find(const weir__timers *t, uint64_t h, int64_t when, const void *key, size_t klen)
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
        size_t home = (size_t)t->set[j].hash & mask;
        /* Move j to i when its home is not within (i, j] (cyclically). */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            t->set[i] = t->set[j];
            t->set[j].x = NULL;
            i = j;
        }
    }
}

static int grow(weir__timers *t)
{
    if (t->n == t->hcap) {
        size_t cap = t->hcap ? t->hcap * 2 : 64;
        weir__theap *h = realloc(t->heap, cap * sizeof(*h));
        if (!h)
            return -ENOMEM;
        t->heap = h;
        t->hcap = cap;
    }
    if ((t->live + 1) * 2 > t->scap) {
        size_t cap = t->scap ? t->scap * 2 : 128;
        weir__tslot *s = calloc(cap, sizeof(*s));
        if (!s)
            return -ENOMEM;
        free(t->set);
        t->set = s;
        t->scap = cap;
        for (size_t i = 0; i < t->n; i++)
            if (!t->heap[i].x->dead)
                set_insert(t, t->heap[i].x);
    }
    return 0;
}

int weir__timer_add(weir__timers *t, int kg, const void *key, size_t klen, int64_t when)
{
    if (grow(t) < 0)
        return -ENOMEM;
    uint64_t h = timer_hash(when, key, klen);
    size_t i = set_find(t, h, when, key, klen);
    if (t->set[i].x)
        return 0; /* one per key and time */
    weir__timer *x = malloc(sizeof(*x) + klen);
    if (!x)
        return -ENOMEM;
    *x = (weir__timer){.when = when, .hash = h, .klen = (uint32_t)klen, .kg = kg};
    if (klen)
        memcpy(x->key, key, klen);
    t->set[i] = (weir__tslot){h, x};
    t->heap[t->n++] = (weir__theap){when, t->seq++, x};
    sift_up(t, t->n - 1);
    t->live++;
    return 0;
}

int weir__timer_del(weir__timers *t, const void *key, size_t klen, int64_t when)
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
    if (t->n > 64 && t->n - t->live > t->live)
        compact(t);
    return 0;
}

/* Take the earliest live timer out (the caller frees it). */
static weir__timer *pop(weir__timers *t)
{
    weir__timer *x = top(t);
    set_erase(t, set_slot(t, x));
    heap_pop(t);
    t->live--;
    return x;
}

void weir__timers_free(weir__timers *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->heap[i].x);
    free(t->heap);
    free(t->set);
    *t = (weir__timers){0};
}

/* ---- the API -------------------------------------------------------------------------------- */
static int check(const weir_ctx *ctx, int domain)
{
    return ctx && ctx->backend && ctx->has_key &&
           (domain == WEIR_TIME_EVENT || domain == WEIR_TIME_PROCESSING);
}

int weir_timer_register(weir_ctx *ctx, int domain, int64_t when)
{
    if (!check(ctx, domain) || when == INT64_MAX)
        return -EINVAL;
    return weir__timer_add(&ctx->st->timers[domain], ctx->kg, ctx->key, ctx->key_len, when);
}

int weir_timer_delete(weir_ctx *ctx, int domain, int64_t when)
{
    if (!check(ctx, domain))
        return -EINVAL;
    int e = weir__timer_del(&ctx->st->timers[domain], ctx->key, ctx->key_len, when);
    return e == -ENOENT ? 0 : e;
}

/* Fire every timer of the domain at or before `upto`, in time order. */
int weir__timers_fire(subtask *st, int domain, int64_t upto)
{
    weir__timers *t = &st->timers[domain];
    weir_ctx *c = &st->ctx[0];
    weir__timer *next;
    for (unsigned fired = 0; (next = top(t)) != NULL && next->when <= upto; fired++) {
        /* A watermark can close many windows: let the other subtasks of
         * this thread run now and then. */
        if (fired % 256 == 255) {
            int y = weir_task_yield();
            if (y < 0)
                return y;
            if (!(next = top(t)) || next->when > upto)
                break;
        }
        weir__timer *x = pop(t);
        c->key = x->key;
        c->key_len = x->klen;
        c->has_key = 1;
        c->kg = x->kg;
        int e = c->op->def.on_timer ? c->op->def.on_timer(c, c->state, domain, x->when) : 0;
        free(x);
        c->key = NULL;
        c->key_len = 0;
        c->has_key = 0;
        if (e < 0)
            return e;
    }
    return 0;
}

/* The earliest timer of the domain (INT64_MAX: none). */
int64_t weir__timers_next(subtask *st, int domain)
{
    weir__timer *x = top(&st->timers[domain]);
    return x ? x->when : INT64_MAX;
}

/* ---- checkpoints ---------------------------------------------------------------------------- */
static uint8_t tag_of(int domain)
{
    return domain == WEIR_TIME_EVENT ? TAG_EVENT : TAG_PROC;
}

typedef struct sorted {
    const weir__timer *x;
    uint8_t tag;
} sorted;

/* Byte order of the timers' entries: group, tag, time, key length, key. */
static int by_entry(const void *pa, const void *pb)
{
    const sorted *a = pa, *b = pb;
    if (a->x->kg != b->x->kg)
        return a->x->kg < b->x->kg ? -1 : 1;
    if (a->tag != b->tag)
        return a->tag < b->tag ? -1 : 1;
    if (a->x->when != b->x->when)
        return a->x->when < b->x->when ? -1 : 1;
    if (a->x->klen != b->x->klen)
        return a->x->klen < b->x->klen ? -1 : 1;
    return a->x->klen ? memcmp(a->x->key, b->x->key, a->x->klen) : 0;
}

/* Capture the backend with every timer as an entry of its group. */
int weir__timers_capture(subtask *st, uint64_t id, weir_state_snapshot **out)
{
    size_t n = st->timers[0].live + st->timers[1].live, bytes = 0;
    if (!n)
        return weir_state_capture(st->backend, id, out);
    sorted *v = malloc(n * sizeof(*v));
    weir_state_entry *ents = malloc(n * sizeof(*ents));
    if (!v || !ents) {
        free(v);
        free(ents);
        return -ENOMEM;
    }
    size_t k = 0;
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < st->timers[d].n; i++) {
            const weir__timer *x = st->timers[d].heap[i].x;
            if (x->dead)
                continue;
            v[k++] = (sorted){x, tag_of(d)};
            bytes += 13 + (size_t)x->klen;
        }
    qsort(v, n, sizeof(*v), by_entry);
    uint8_t *buf = malloc(bytes), *p = buf;
    int e = buf ? 0 : -ENOMEM;
    for (size_t i = 0; !e && i < n; i++) {
        const weir__timer *x = v[i].x;
        p[0] = v[i].tag;
        weir__put_time(p + 1, x->when);
        weir__put_be32(p + 9, x->klen);
        if (x->klen)
            memcpy(p + 13, x->key, x->klen);
        ents[i] = (weir_state_entry){x->kg, p, 13 + (size_t)x->klen, "", 0};
        p += 13 + (size_t)x->klen;
    }
    if (!e)
        e = weir_state_capture_with(st->backend, id, ents, n, out);
    free(buf);
    free(ents);
    free(v);
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
    if (klen < 13 || weir__get_be32(k + 9) != klen - 13)
        return -EBADMSG;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        uint8_t **ks = realloc(l->keys, cap * sizeof(*ks));
        if (ks)
            l->keys = ks;
        size_t *ls = realloc(l->lens, cap * sizeof(*ls));
        if (ls)
            l->lens = ls;
        if (!ks || !ls)
            return -ENOMEM;
        l->cap = cap;
    }
    uint8_t *copy = malloc(klen);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, key, klen);
    l->keys[l->n] = copy;
    l->lens[l->n++] = klen;
    return weir__timer_add(l->t, l->kg, k + 13, klen - 13, weir__get_time(k + 1));
}

/* After a restore: move the timers the backend now holds into the heaps. */
int weir__timers_load(subtask *st)
{
    int e = 0;
    for (int d = 0; d < 2 && !e; d++) {
        uint8_t tag = tag_of(d);
        for (int kg = st->backend->first_kg; kg < st->backend->end_kg && !e; kg++) {
            load l = {&st->timers[d], kg, NULL, NULL, 0, 0};
            e = weir_state_scan(st->backend, kg, &tag, 1, load_fn, &l);
            for (size_t i = 0; i < l.n; i++) {
                if (!e)
                    e = weir_state_delete(st->backend, kg, l.keys[i], l.lens[i]);
                free(l.keys[i]);
            }
            free(l.keys);
            free(l.lens);
        }
    }
    return e;
}
