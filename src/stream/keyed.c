/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keyed.c - what a keyed operator's functions reach through their context:
 * value, map and list state of the current key (optionally under a
 * namespace such as a window), and the walk over a state's keys
 * (weir_keys_iterate). Timers are timers.c.
 *
 * Layout in the subtask's state backend (weir/state.h), per key group:
 *
 *   state   [name length u8][name][key length u32][key][namespace]  -> value
 *
 * A state is identified by its name itself, not by a number: a number
 * handed out in the order a subtask first touches its states would differ
 * between runs (and between the subtasks whose groups a rescaled restore
 * merges), so a restore would read one state's entries as another's. A
 * hash of the name would be as stable but could collide; a table from
 * names to numbers kept with the snapshot would have to be merged and
 * renumbered on a rescale. The name costs its length in every key, which
 * for the usual short names is what a 64-bit hash would cost, and makes
 * two states the same exactly when their names are. Names are 1 to
 * WEIR_STATE_NAME_MAX bytes, so the first byte never reaches the tags
 * timers.c gives timers at checkpoints (0xFE, 0xFF). Integers are
 * big-endian. Because each length precedes its bytes, the prefix
 * [name length][name][key length][key] holds exactly one key's entries of
 * one state (all its windows, say), never another state or key that
 * begins with the same bytes.
 *
 * Prefetch rounds (below): before a batch of due timers fires, timers.c
 * has the state their on_timer will read announced (weir__ns_prefetch)
 * and asked for in one round; weir__ns_get serves the fetched values until
 * the round ends or the key is written (weir__ns_put, weir__ns_del).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "stream/controller.h"
#include "stream/stream_int.h"

_Static_assert(WEIR_STATE_NAME_MAX < 0xFE, "a state's first key byte never is a timer tag");

static int reserve(weir_ctx *ctx, size_t need)
{
    if (need <= ctx->keycap)
        return 0;
    uint8_t *kb = weir__realloc(ctx->keybuf, need);
    if (!kb)
        return -ENOMEM;
    ctx->keybuf = kb;
    ctx->keycap = need;
    return 0;
}

/* [name length][name][key length][key][ns] into ctx->keybuf; 0 or a
 * negative errno. */
int weir__state_key(weir_ctx *ctx, const char *name, const void *ns, size_t nslen, size_t *klen)
{
    if (!ctx->backend || !ctx->rc || !name)
        return -EINVAL; /* keyed state needs a current key */
    size_t nl = strlen(name);
    if (nl == 0 || nl > WEIR_STATE_NAME_MAX)
        return weir_fail(ctx, -EINVAL, "keyed state name \"%.32s%s\" is %zu bytes (1 to %d)", name,
                         nl > 32 ? "..." : "", nl, WEIR_STATE_NAME_MAX);
    size_t need = 1 + nl + 4 + ctx->rc->klen + nslen;
    if (reserve(ctx, need) < 0)
        return -ENOMEM;
    uint8_t *p = ctx->keybuf;
    *p++ = (uint8_t)nl;
    memcpy(p, name, nl);
    p += nl;
    weir__put_be32(p, (uint32_t)ctx->rc->klen);
    p += 4;
    if (ctx->rc->klen)
        memcpy(p, ctx->rc->key, ctx->rc->klen);
    if (nslen)
        memcpy(p + ctx->rc->klen, ns, nslen);
    *klen = need;
    return 0;
}

/* ---- prefetch rounds (stream_int.h; timers.c starts them) ---------------------------------
 * A round is one allocation: its keys' entries, an index over them (open
 * addressing, at most half full: entries are never removed, a dropped one
 * only forgets its value) and the keys' bytes. The answers may come from
 * any thread, also after the subtask gave the round up (a cancel while it
 * waited): each read in flight holds a reference to the round, so the
 * last answer frees it. An answer writes its entry, then counts the
 * reads left down; the one that counts the last sends on the round's
 * oneshot, which the subtask's fiber waits on: every entry it reads after
 * the wait was written before (the counter's and the oneshot's ordering). */
enum { PF_NONE, PF_PENDING, PF_READY };

typedef struct pf_ent {
    struct weir__prefetch *r;
    uint64_t hash;
    size_t koff, klen;
    int kg;
    int scan;  /* a scan's prefetch (weir__ns_prefetch_scan): the key is its prefix */
    int state; /* PF_*; READY: err 0 (val, vlen) or -ENOENT */
    int err;
    size_t vlen;
    uint8_t *val;
} pf_ent;

#define PF_SLOTS (2 * WEIR__PREFETCH_MAX)
_Static_assert((PF_SLOTS & (PF_SLOTS - 1)) == 0, "the index's size is a power of two");
_Static_assert(WEIR__PREFETCH_MAX < UINT16_MAX, "an index slot holds an entry's number");

struct weir__prefetch {
    _Atomic long refs;    /* the subtask's, and one per read in flight */
    _Atomic long pending; /* reads not answered, and the subtask's while it issues them */
    weir_oneshot *done;   /* sent by the answer that leaves none pending */
    int gathering, ready;
    size_t n;
    uint8_t *keys; /* the entries' keys */
    size_t klen, kcap;
    uint16_t slot[PF_SLOTS]; /* entry number + 1, 0: empty */
    pf_ent ent[WEIR__PREFETCH_MAX];
    weir_state_read reads[WEIR__PREFETCH_MAX];
};

static const uint8_t pf_empty[1];

static uint64_t pf_hash(int kg, const void *key, size_t klen)
{
    return weir_key_hash(key, klen) ^ ((uint64_t)(unsigned)kg * 0x9E3779B97F4A7C15ull);
}

/* The slot of (kg, key) - a read's, or scan: a scan's - or the empty one
 * where it would go. */
static size_t pf_find(const weir__prefetch *r, int kg, uint64_t h, const void *key, size_t klen,
                      int scan)
{
    for (size_t i = (size_t)h & (PF_SLOTS - 1);; i = (i + 1) & (PF_SLOTS - 1)) {
        if (!r->slot[i])
            return i;
        const pf_ent *x = &r->ent[r->slot[i] - 1];
        if (x->hash == h && x->kg == kg && x->klen == klen && x->scan == scan &&
            (klen == 0 || memcmp(r->keys + x->koff, key, klen) == 0))
            return i;
    }
}

static pf_ent *pf_lookup(weir__prefetch *r, int kg, const void *key, size_t klen)
{
    size_t i = pf_find(r, kg, pf_hash(kg, key, klen), key, klen, 0);
    return r->slot[i] ? &r->ent[r->slot[i] - 1] : NULL;
}

static void pf_unref(weir__prefetch *r)
{
    if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (size_t i = 0; i < r->n; i++)
        weir__free(r->ent[i].val);
    weir__free(r->keys);
    weir__free(r);
}

/* An answer (or a value at hand): kept if it is one (a value or none);
 * a failed read is left to the plain read, which reports it. */
static void pf_fill(pf_ent *x, int err, const void *val, size_t vlen)
{
    x->state = PF_NONE;
    if (err && err != -ENOENT)
        return;
    if (!err && vlen) {
        if (!(x->val = weir__malloc(vlen)))
            return;
        memcpy(x->val, val, vlen);
    }
    x->err = err;
    x->vlen = err ? 0 : vlen;
    x->state = PF_READY;
}

/* A read's answer, from any thread. */
static void pf_answer(void *arg, int err, const void *val, size_t vlen)
{
    pf_ent *x = arg;
    weir__prefetch *r = x->r;
    pf_fill(x, err, val, vlen);
    if (atomic_fetch_sub_explicit(&r->pending, 1, memory_order_acq_rel) == 1)
        weir_oneshot_send(r->done, 0); /* -EPIPE if the subtask gave up: nothing to do */
    pf_unref(r);
}

/* n reads counted in flight that were not started after all. */
static void pf_unstarted(weir__prefetch *r, long n)
{
    atomic_fetch_sub_explicit(&r->pending, n, memory_order_relaxed);
    atomic_fetch_sub_explicit(&r->refs, n, memory_order_relaxed);
}

int weir__prefetch_begin(subtask *st)
{
    weir__prefetch_end(st);
    weir__prefetch *r = weir__calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    atomic_init(&r->refs, 1);
    atomic_init(&r->pending, 0);
    r->gathering = 1;
    st->pf = r;
    return 0;
}

/* Add ctx->keybuf[0..kl) to the gathering round r: 0 (added, or in it
 * already), 1 (the round is full) or -ENOMEM. */
static int pf_add(weir__prefetch *r, weir_ctx *ctx, size_t kl, int scan)
{
    int kg = ctx->rc->kg;
    uint64_t h = pf_hash(kg, ctx->keybuf, kl) ^ (uint64_t)scan;
    size_t i = pf_find(r, kg, h, ctx->keybuf, kl, scan);
    if (r->slot[i])
        return 0; /* in the round already */
    if (r->n == WEIR__PREFETCH_MAX)
        return 1;
    if (r->klen + kl > r->kcap) {
        size_t cap = r->kcap ? r->kcap * 2 : 8192;
        while (cap < r->klen + kl)
            cap *= 2;
        uint8_t *k = weir__realloc(r->keys, cap);
        if (!k)
            return -ENOMEM;
        r->keys = k;
        r->kcap = cap;
    }
    memcpy(r->keys + r->klen, ctx->keybuf, kl);
    r->ent[r->n] = (pf_ent){.r = r, .hash = h, .koff = r->klen, .klen = kl, .kg = kg, .scan = scan};
    r->klen += kl;
    r->slot[i] = (uint16_t)++r->n;
    return 0;
}

int weir__ns_prefetch(weir_ctx *ctx, const char *state, const void *ns, size_t nslen)
{
    weir__prefetch *r = ctx->st ? ctx->st->pf : NULL;
    if (!r || !r->gathering)
        return 0;
    size_t kl;
    int e = weir__state_key(ctx, state, ns, nslen, &kl);
    return e < 0 ? e : pf_add(r, ctx, kl, 0);
}

int weir__ns_prefetch_scan(weir_ctx *ctx, const char *state, const void *ns, size_t nslen)
{
    weir__prefetch *r = ctx->st ? ctx->st->pf : NULL;
    if (!r || !r->gathering || !ctx->backend->ops->scan_prefetch)
        return 0;
    size_t kl;
    int e = weir__state_key(ctx, state, ns, nslen, &kl);
    return e < 0 ? e : pf_add(r, ctx, kl, 1);
}

int weir__prefetch_wait(subtask *st)
{
    weir__prefetch *r = st->pf;
    if (!r || !r->gathering)
        return 0;
    r->gathering = 0;
    r->ready = 1;
    weir_state_backend *b = st->backend;
    size_t m = 0, nscan = 0;
    for (size_t i = 0; i < r->n; i++) {
        pf_ent *x = &r->ent[i];
        const uint8_t *key = r->keys + x->koff;
        if (x->scan) { /* asked for below, one each */
            nscan++;
            continue;
        }
        if (b->ops->get_now) { /* what the hot tier holds needs no round trip */
            const void *v = NULL;
            size_t vl = 0;
            int e = b->ops->get_now(b, x->kg, key, x->klen, &v, &vl);
            if (e != -EWOULDBLOCK) {
                pf_fill(x, e, v, vl);
                continue;
            }
        }
        x->state = PF_PENDING;
        r->reads[m++] = (weir_state_read){x->kg, key, x->klen, x};
    }
    if ((!m && !nscan) || !(r->done = weir_oneshot_new())) {
        for (size_t i = 0; i < m; i++) /* (no memory: the plain reads then) */
            ((pf_ent *)r->reads[i].arg)->state = PF_NONE;
        return 0;
    }
    atomic_store_explicit(&r->pending, (long)(m + nscan) + 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->refs, (long)(m + nscan), memory_order_relaxed);
    for (size_t i = 0; nscan && i < r->n; i++) {
        pf_ent *x = &r->ent[i];
        if (!x->scan)
            continue;
        /* The scan itself finds what was fetched (the backend keeps it):
         * the answer only counts. Not started, or nothing to fetch: the
         * scan reads as it would. */
        x->state = PF_PENDING;
        int e = b->ops->scan_prefetch(b, x->kg, r->keys + x->koff, x->klen, pf_answer, x);
        if (e == -EINPROGRESS)
            continue;
        x->state = PF_NONE;
        pf_unstarted(r, 1);
    }
    if (b->ops->get_batch) {
        if (b->ops->get_batch(b, r->reads, m, pf_answer) < 0) { /* none started */
            for (size_t i = 0; i < m; i++)
                ((pf_ent *)r->reads[i].arg)->state = PF_NONE;
            pf_unstarted(r, (long)m);
        }
    } else {
        for (size_t i = 0; i < m; i++) {
            const weir_state_read *q = &r->reads[i];
            int e = weir_state_get_async(b, q->kg, q->key, q->klen, pf_answer, q->arg);
            if (e == -EINPROGRESS)
                continue;
            /* Answered at once, without a view: the plain read gets it as fast. */
            ((pf_ent *)q->arg)->state = PF_NONE;
            pf_unstarted(r, 1);
        }
    }
    int e = 0;
    if (atomic_fetch_sub_explicit(&r->pending, 1, memory_order_acq_rel) == 1) {
        weir_oneshot_close_tx(r->done); /* every answer came before this: none sent */
    } else {
        intptr_t v;
        e = weir_oneshot_recv(r->done, &v, WEIR_FOREVER);
    }
    weir_oneshot_close_rx(r->done);
    if (e < 0) { /* cancelled: the answers still to come free the round */
        st->pf = NULL;
        pf_unref(r);
    }
    return e;
}

void weir__prefetch_end(subtask *st)
{
    weir__prefetch *r = st->pf;
    if (!r)
        return;
    st->pf = NULL;
    pf_unref(r);
}

void weir__ns_forget(weir_ctx *ctx, const void *key, size_t klen)
{
    weir__prefetch *r = ctx->st ? ctx->st->pf : NULL;
    if (!r || !r->ready)
        return;
    pf_ent *x = pf_lookup(r, ctx->rc->kg, key, klen);
    if (x && x->state == PF_READY) {
        weir__free(x->val);
        x->val = NULL;
        x->state = PF_NONE;
    }
}

int weir__ns_get(weir_ctx *ctx, const char *state, const void *ns, size_t nslen, const void **val,
                 size_t *len)
{
    size_t kl;
    int e = weir__state_key(ctx, state, ns, nslen, &kl);
    if (e < 0)
        return e;
    weir__prefetch *r = ctx->st ? ctx->st->pf : NULL;
    if (r && r->ready) {
        const pf_ent *x = pf_lookup(r, ctx->rc->kg, ctx->keybuf, kl);
        if (x && x->state == PF_READY) { /* fetched by the round, not written since */
            if (x->err)
                return x->err;
            *val = x->val ? x->val : pf_empty;
            *len = x->vlen;
            return 0;
        }
    }
    return weir_state_get(ctx->backend, ctx->rc->kg, ctx->keybuf, kl, val, len);
}

int weir__ns_get_async(weir_ctx *ctx, const weir_rec *in, const char *state, const void *ns,
                       size_t nslen, weir__cont_fn cont, void *arg)
{
    size_t kl;
    int e = weir__state_key(ctx, state, ns, nslen, &kl);
    return e < 0 ? e : weir__ctl_get(ctx, in, ctx->rc->kg, ctx->keybuf, kl, cont, arg);
}

int weir__ns_put(weir_ctx *ctx, const char *state, const void *ns, size_t nslen, const void *val,
                 size_t len)
{
    size_t kl;
    int e = weir__state_key(ctx, state, ns, nslen, &kl);
    if (e < 0)
        return e;
    e = weir_state_put(ctx->backend, ctx->rc->kg, ctx->keybuf, kl, val, len);
    weir__ns_forget(ctx, ctx->keybuf, kl); /* after: val may be the round's view */
    return e;
}

int weir__ns_del(weir_ctx *ctx, const char *state, const void *ns, size_t nslen)
{
    size_t kl;
    int e = weir__state_key(ctx, state, ns, nslen, &kl);
    if (e < 0)
        return e;
    e = weir_state_delete(ctx->backend, ctx->rc->kg, ctx->keybuf, kl);
    weir__ns_forget(ctx, ctx->keybuf, kl);
    return e == -ENOENT ? 0 : e;
}

typedef struct ns_scan {
    size_t skip;
    int (*fn)(void *arg, const void *ns, size_t nslen, const void *val, size_t vlen);
    void *arg;
} ns_scan;

static int ns_scan_fn(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
    ns_scan *s = arg;
    return s->fn(s->arg, (const uint8_t *)key + s->skip, klen - s->skip, val, vlen);
}

int weir__ns_scan(weir_ctx *ctx, const char *state,
                  int (*fn)(void *arg, const void *ns, size_t nslen, const void *val, size_t vlen),
                  void *arg)
{
    size_t kl;
    int e = weir__state_key(ctx, state, NULL, 0, &kl);
    if (e < 0)
        return e;
    ns_scan s = {kl, fn, arg};
    return weir_state_scan(ctx->backend, ctx->rc->kg, ctx->keybuf, kl, ns_scan_fn, &s);
}

/* A user's state name: weir's own operators (windows, joins, reduce) keep
 * their state under names that begin with a control character
 * (WEIR__STATE_*), so no user function handed the same context can read
 * or overwrite theirs. */
static int user_name(weir_ctx *ctx, const char *name)
{
    if (name && (unsigned char)name[0] > 0 && (unsigned char)name[0] < 0x20)
        return weir_fail(ctx, -EINVAL,
                         "keyed state names beginning with a control character are weir's own");
    return 0;
}

int weir_value_get(weir_ctx *ctx, const char *state, const void **val, size_t *len)
{
    if (user_name(ctx, state))
        return -EINVAL;
    return weir__ns_get(ctx, state, NULL, 0, val, len);
}

int weir_value_get_async(weir_ctx *ctx, const weir_rec *in, const char *state, weir_state_cont fn,
                         void *arg)
{
    if (!ctx || !in || !fn || user_name(ctx, state))
        return -EINVAL;
    return weir__ns_get_async(ctx, in, state, NULL, 0, fn, arg);
}

int weir_map_get_async(weir_ctx *ctx, const weir_rec *in, const char *state, const void *ukey,
                       size_t uklen, weir_state_cont fn, void *arg)
{
    if (!ctx || !in || !fn || (!ukey && uklen) || user_name(ctx, state))
        return -EINVAL;
    return weir__ns_get_async(ctx, in, state, ukey, uklen, fn, arg);
}

int weir_value_put(weir_ctx *ctx, const char *state, const void *val, size_t len)
{
    if (user_name(ctx, state))
        return -EINVAL;
    return weir__ns_put(ctx, state, NULL, 0, val, len);
}

int weir_value_clear(weir_ctx *ctx, const char *state)
{
    if (user_name(ctx, state))
        return -EINVAL;
    return weir__ns_del(ctx, state, NULL, 0);
}

/* ---- map and list state ------------------------------------------------------------------ */
int weir_map_get(weir_ctx *ctx, const char *state, const void *ukey, size_t uklen, const void **val,
                 size_t *len)
{
    if (user_name(ctx, state))
        return -EINVAL;
    return weir__ns_get(ctx, state, ukey, uklen, val, len);
}

int weir_map_put(weir_ctx *ctx, const char *state, const void *ukey, size_t uklen, const void *val,
                 size_t len)
{
    if (user_name(ctx, state))
        return -EINVAL;
    return weir__ns_put(ctx, state, ukey, uklen, val, len);
}

int weir_map_delete(weir_ctx *ctx, const char *state, const void *ukey, size_t uklen)
{
    if (user_name(ctx, state))
        return -EINVAL;
    return weir__ns_del(ctx, state, ukey, uklen);
}

int weir_map_iterate(weir_ctx *ctx, const char *state, weir_entry_fn fn, void *arg)
{
    if (user_name(ctx, state))
        return -EINVAL;
    if (!fn)
        return -EINVAL;
    return weir__ns_scan(ctx, state, fn, arg);
}

/* List entries: the namespace is a position, a per-subtask sequence number
 * (big-endian), so iteration is append order. */
int weir_list_add(weir_ctx *ctx, const char *state, const void *val, size_t len)
{
    if (user_name(ctx, state))
        return -EINVAL;
    uint8_t pos[8];
    weir__put_be64(pos, ++ctx->seq);
    return weir__ns_put(ctx, state, pos, 8, val, len);
}

int weir_list_iterate(weir_ctx *ctx, const char *state, weir_entry_fn fn, void *arg)
{
    return weir_map_iterate(ctx, state, fn, arg);
}

typedef struct collect_ns {
    uint8_t (*ns)[8];
    size_t n, cap;
} collect_ns;

static int collect_pos(void *arg, const void *ns, size_t nslen, const void *val, size_t vlen)
{
    (void)val, (void)vlen;
    collect_ns *c = arg;
    if (nslen != 8)
        return -EBADMSG;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        uint8_t(*v)[8] = weir__realloc(c->ns, cap * 8);
        if (!v)
            return -ENOMEM;
        c->ns = v;
        c->cap = cap;
    }
    memcpy(c->ns[c->n++], ns, 8);
    return 0;
}

int weir_list_clear(weir_ctx *ctx, const char *state)
{
    if (user_name(ctx, state))
        return -EINVAL;
    collect_ns c = {0};
    int e = weir__ns_scan(ctx, state, collect_pos, &c);
    for (size_t i = 0; !e && i < c.n; i++)
        e = weir__ns_del(ctx, state, c.ns[i], 8);
    weir__free(c.ns);
    return e;
}

/* ---- the keys of a state ------------------------------------------------------------------ */
/* One group's distinct keys of a state, gathered before any is visited (a
 * visit may change state, which a scan must not see). Each key is stored
 * as [u32 length][bytes], padded to 16 bytes like every key a context
 * hands out. */
typedef struct key_walk {
    size_t skip; /* [name length][name] */
    uint8_t *buf;
    size_t len, cap;
    size_t last; /* offset of the last key gathered, or SIZE_MAX */
} key_walk;

#define KEY_AT 16 /* a gathered key's bytes start this far into its slot */

static int gather_key(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
    (void)val, (void)vlen;
    key_walk *w = arg;
    const uint8_t *k = key;
    if (klen < w->skip + 4 || weir__get_be32(k + w->skip) > klen - w->skip - 4)
        return -EBADMSG;
    size_t n = weir__get_be32(k + w->skip);
    const uint8_t *bytes = k + w->skip + 4;
    /* A key's entries (its namespaces) are adjacent in key order. */
    if (w->last != SIZE_MAX && weir__get_be32(w->buf + w->last) == n &&
        (n == 0 || memcmp(w->buf + w->last + KEY_AT, bytes, n) == 0))
        return 0;
    size_t slot = KEY_AT + ((n + 15) & ~(size_t)15);
    if (w->len + slot > w->cap) {
        size_t cap = w->cap ? w->cap : 1024;
        while (cap < w->len + slot)
            cap *= 2;
        uint8_t *b = weir__realloc(w->buf, cap);
        if (!b)
            return -ENOMEM;
        w->buf = b;
        w->cap = cap;
    }
    weir__put_be32(w->buf + w->len, (uint32_t)n);
    if (n)
        memcpy(w->buf + w->len + KEY_AT, bytes, n);
    w->last = w->len;
    w->len += slot;
    return 0;
}

int weir_keys_iterate(weir_ctx *ctx, const char *state, weir_key_visit_fn fn, void *arg)
{
    if (!ctx || !ctx->backend || !state || !fn || user_name(ctx, state))
        return -EINVAL;
    size_t nl = strlen(state);
    if (nl == 0 || nl > WEIR_STATE_NAME_MAX)
        return weir_fail(ctx, -EINVAL, "keyed state name \"%.32s%s\" is %zu bytes (1 to %d)", state,
                         nl > 32 ? "..." : "", nl, WEIR_STATE_NAME_MAX);
    uint8_t prefix[1 + WEIR_STATE_NAME_MAX];
    prefix[0] = (uint8_t)nl;
    memcpy(prefix + 1, state, nl);
    /* The caller's current key (if any) comes back after the walk. */
    weir__rctx *prev = ctx->rc, rc = {.ts = prev ? prev->ts : INT64_MIN};
    key_walk w = {.skip = 1 + nl};
    int e = 0;
    for (int kg = ctx->backend->first_kg; kg < ctx->backend->end_kg && !e; kg++) {
        w.len = 0;
        w.last = SIZE_MAX;
        if ((e = weir_state_scan(ctx->backend, kg, prefix, 1 + nl, gather_key, &w)) != 0)
            break;
        for (size_t off = 0; off < w.len && !e;) {
            size_t n = weir__get_be32(w.buf + off);
            rc.key = w.buf + off + KEY_AT;
            rc.klen = n;
            rc.kg = kg;
            ctx->rc = &rc;
            e = fn(ctx, rc.key, n, arg);
            off += KEY_AT + ((n + 15) & ~(size_t)15);
        }
    }
    ctx->rc = prev;
    weir__free(w.buf);
    return e;
}
