/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memory.c - the in-memory state backend (weir/state.h).
 *
 * One skip list per key group the backend holds, ordered by the bytes of
 * the keys (memcmp, then the shorter key first), so a prefix scan is a
 * search for the prefix and a walk until the first key without it. Nodes
 * carry their key inline after their towers of next and previous pointers
 * (a delete unlinks without a search), and a small value after the key
 * until it outgrows that room; a larger value is a separate allocation,
 * replaced on put, so a node never moves. Levels are drawn
 * with p = 1/4 (expected 1.33 pointers per node and direction) up to 20.
 *
 * Point operations go through a hash index beside the list (open
 * addressing, linear probing, the key's XXH3 hash kept with each slot):
 * get, and put of a key that exists, cost one probe sequence; a put of the
 * key the last get found, none. A value that fits the old one's memory
 * (and fills at least half of it) overwrites it in place.
 *
 * The list is kept lazily: a new key waits in its group's pending array
 * (reachable through the index only) until the group is scanned or
 * captured; then the pending keys are sorted and linked in, one search
 * each when they are few against the list, one merging walk when they are
 * many. Keys deleted while pending (a window's state, a join's buffered
 * record) never touch the list. (Measured on the Nexmark window queries,
 * where searching the list on every insert and delete was a quarter of
 * the time.)
 *
 * Snapshots: capture serializes every group in key order into the snapshot
 * file image (snapshot.c), a full copy taken on the owning task, which
 * yields (weir_task_yield) every few thousand entries so a large state
 * does not keep the other tasks of its thread waiting; restore
 * checks the whole file first (restore_checked: the engine has checked it
 * on the blocking pool), then replaces each group of the backend's range
 * that the file holds, yielding as capture does. (Copy-on-write captures, which make capture
 * O(1) and move the copying off the barrier, are a later optimisation
 * behind the same interface.)
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "state/state_int.h"
#include "weir/rt.h"

#define MAX_LEVEL 20
#define ALIGN16(n) (((n) + 15) & ~(size_t)15)
/* Entries a capture serializes between yields (see mem_capture): 2048
 * entries of 1 KiB take a few milliseconds, well under the watchdog's
 * threshold even on a loaded machine (8192 took 20-40 ms on two busy
 * cores: tests/stream/test_ckpt_blocking.c). */
#define CAPTURE_STEP 2048

typedef struct node {
    uint8_t *val;  /* in the node after the key (small values, at first), or allocated */
    uint64_t hash; /* the key's */
    uint32_t klen, vlen;
    uint32_t vcap; /* bytes at val */
    int level;
    uint8_t linked; /* in the list; else pending at pend[pos] */
    uint8_t inl;    /* val is inside the node */
    size_t pos;
    struct node *link[]; /* next[level], prev[level] (NULL: the head), the key, a small value */
} node;

typedef struct slot {
    uint64_t hash;
    node *n; /* NULL: empty */
} slot;

typedef struct group {
    node *head[MAX_LEVEL]; /* the head's tower */
    int level;
    size_t count;  /* entries, pending ones included */
    size_t linked; /* entries in the list */
    node **pend;   /* keys not linked yet, in insertion order */
    size_t npend, pcap;
    slot *index; /* power-of-two size, at most 3/4 full */
    size_t icap;
} group;

typedef struct mem_backend {
    weir_state_backend base;
    size_t meta; /* bytes of the owner's meta per entry (weir__mem_new_meta), 0: none */
    uint64_t rng;
    group *groups; /* [end_kg - first_kg] */
    node *last;    /* the node the last get found (a put of its key follows, often) */
    node *made;    /* the node the last put made */
    int last_kg;
} mem_backend;

#define NEXT(n, i) ((n)->link[(i)])
#define PREV(n, i) ((n)->link[(n)->level + (i)])

static const uint8_t *key_of(const node *n)
{
    return (const uint8_t *)&n->link[2 * n->level];
}

#define cmp weir__key_cmp

/* Where a node's meta begins (the node's pointer, then the owner's
 * bytes): after its key, 16-byte aligned; its inline value follows. */
static size_t meta_at(const node *n)
{
    return ALIGN16(sizeof(node) + 2 * (size_t)n->level * sizeof(node *) + n->klen);
}

static void *meta_of(const node *n)
{
    return (uint8_t *)n + meta_at(n) + sizeof(node *);
}

static group *group_of(mem_backend *m, int kg)
{
    return &m->groups[kg - m->base.first_kg];
}

static int random_level(mem_backend *m)
{
    m->rng ^= m->rng << 13; /* xorshift64 */
    m->rng ^= m->rng >> 7;
    m->rng ^= m->rng << 17;
    uint64_t r = m->rng;
    int level = 1;
    while (level < MAX_LEVEL && (r & 3) == 0) {
        level++;
        r >>= 2;
    }
    return level;
}

/* The first linked node with key >= the given key. pred[i] (when not
 * NULL) is the last node before it on level i (NULL: the head). */
static node *find_ge(group *g, const uint8_t *key, size_t klen, node **pred)
{
    node *x = NULL; /* the head */
    for (int i = g->level - 1; i >= 0; i--) {
        node *nx = x ? NEXT(x, i) : g->head[i];
        while (nx && cmp(key_of(nx), nx->klen, key, klen) < 0) {
            x = nx;
            nx = NEXT(x, i);
        }
        if (pred)
            pred[i] = x;
    }
    return x ? NEXT(x, 0) : g->head[0];
}

/* Link n after pred[i] on each of its levels. */
static void link_after(group *g, node *n, node **pred)
{
    for (int i = g->level; i < n->level; i++)
        pred[i] = NULL;
    if (n->level > g->level)
        g->level = n->level;
    for (int i = 0; i < n->level; i++) {
        node **from = pred[i] ? &NEXT(pred[i], i) : &g->head[i];
        NEXT(n, i) = *from;
        PREV(n, i) = pred[i];
        if (*from)
            PREV(*from, i) = n;
        *from = n;
    }
    n->linked = 1;
    g->linked++;
}

static void unlink_node(group *g, node *n)
{
    for (int i = 0; i < n->level; i++) {
        node *p = PREV(n, i), *nx = NEXT(n, i);
        if (p)
            NEXT(p, i) = nx;
        else
            g->head[i] = nx;
        if (nx)
            PREV(nx, i) = p;
    }
    while (g->level > 0 && !g->head[g->level - 1])
        g->level--;
    g->linked--;
}

static int by_key(const void *a, const void *b)
{
    const node *x = *(node *const *)a, *y = *(node *const *)b;
    return cmp(key_of(x), x->klen, key_of(y), y->klen);
}

/* Link every pending key of the group into the list. */
static void flush(group *g)
{
    if (!g->npend)
        return;
    qsort(g->pend, g->npend, sizeof(node *), by_key);
    node *pred[MAX_LEVEL];
    if (g->npend * 8 < g->linked) { /* few: a search each */
        for (size_t k = 0; k < g->npend; k++) {
            find_ge(g, key_of(g->pend[k]), g->pend[k]->klen, pred);
            link_after(g, g->pend[k], pred);
        }
    } else { /* many: one walk, each search going on from the last one's place */
        for (int i = 0; i < MAX_LEVEL; i++)
            pred[i] = NULL;
        for (size_t k = 0; k < g->npend; k++) {
            node *n = g->pend[k];
            for (int i = g->level - 1; i >= 0; i--) {
                node *nx = pred[i] ? NEXT(pred[i], i) : g->head[i];
                while (nx && cmp(key_of(nx), nx->klen, key_of(n), n->klen) < 0) {
                    pred[i] = nx;
                    nx = NEXT(nx, i);
                }
            }
            link_after(g, n, pred);
            /* n is now the last node before the next key on its levels */
            for (int i = 0; i < n->level; i++)
                pred[i] = n;
        }
    }
    g->npend = 0;
}

/* ---- the hash index ------------------------------------------------------------------------ */
static uint64_t hash_of(const void *key, size_t klen)
{
    return weir_key_hash(key, klen);
}

/* The slot holding key, or the empty slot where it would go. */
static slot *index_find(group *g, const void *key, size_t klen, uint64_t h)
{
    size_t mask = g->icap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        slot *sl = &g->index[i];
        if (!sl->n || (sl->hash == h && sl->n->klen == klen &&
                       (klen == 0 || memcmp(key_of(sl->n), key, klen) == 0)))
            return sl;
    }
}

static int index_grow(group *g)
{
    size_t cap = g->icap ? g->icap * 2 : 16;
    slot *old = g->index, *nw = weir__calloc(cap, sizeof(slot));
    if (!nw)
        return -ENOMEM;
    size_t ocap = g->icap;
    g->index = nw;
    g->icap = cap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].n) {
            size_t j = (size_t)old[i].hash & (cap - 1);
            while (nw[j].n)
                j = (j + 1) & (cap - 1);
            nw[j] = old[i];
        }
    weir__free(old);
    return 0;
}

/* Remove the slot, shifting later members of its probe run back. */
static void index_remove(group *g, slot *sl)
{
    size_t mask = g->icap - 1, i = (size_t)(sl - g->index);
    for (size_t j = (i + 1) & mask; g->index[j].n; j = (j + 1) & mask) {
        size_t home = (size_t)g->index[j].hash & mask;
        /* j's entry may move to i if its home is not in (i, j]. */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            g->index[i] = g->index[j];
            i = j;
        }
    }
    g->index[i].n = NULL;
}

/* The node of the key the last get found, if this is its key. */
static node *is_last(const mem_backend *m, int kg, const void *key, size_t klen)
{
    node *n = m->last;
    if (n && m->last_kg == kg && n->klen == klen &&
        (klen == 0 || memcmp(key_of(n), key, klen) == 0))
        return n;
    return NULL;
}

static int mem_get(weir_state_backend *b, int kg, const void *key, size_t klen, const void **val,
                   size_t *vlen)
{
    mem_backend *m = (mem_backend *)b;
    group *g = group_of(m, kg);
    node *n = is_last(m, kg, key, klen);
    if (!n) {
        if (!g->icap)
            return -ENOENT;
        slot *sl = index_find(g, key, klen, hash_of(key, klen));
        if (!(n = sl->n))
            return -ENOENT;
        m->last = n;
        m->last_kg = kg;
    }
    *val = n->val;
    *vlen = n->vlen;
    return 0;
}

/* A new value goes where the old one is when it fits and fills at least
 * half of it (a value that shrinks and grows again, a key's list of
 * panes, keeps its allocation). */
static int fits(const node *n, size_t vlen)
{
    return vlen <= n->vcap && vlen * 2 >= n->vcap;
}

static void free_node(node *n)
{
    if (!n->inl)
        weir__free(n->val);
    weir__free(n);
}

/* Values up to this size start inside their node (one cache miss less to
 * reach them), 16-byte aligned after the key. */
#define INLINE_MAX 128

static int mem_put(weir_state_backend *b, int kg, const void *key, size_t klen, const void *val,
                   size_t vlen)
{
    mem_backend *m = (mem_backend *)b;
    group *g = group_of(m, kg);
    /* Read-modify-write (a reduce, a window's fold): the key the last get
     * found, without hashing and probing again. */
    node *last = is_last(m, kg, key, klen);
    if (last && fits(last, vlen)) {
        if (vlen)
            memmove(last->val, val, vlen);
        last->vlen = (uint32_t)vlen;
        return 0;
    }
    if ((g->count + 1) * 4 > g->icap * 3 && index_grow(g) < 0)
        return -ENOMEM;
    uint64_t h = hash_of(key, klen);
    slot *sl = index_find(g, key, klen, h);
    node *n = sl->n;
    if (n && fits(n, vlen)) { /* in place (val may be its own view) */
        if (vlen)
            memmove(n->val, val, vlen);
        n->vlen = (uint32_t)vlen;
        return 0;
    }
    if (n) { /* a new allocation (room to grow by half when it grows) */
        size_t cap = vlen > n->vlen ? vlen + vlen / 2 : vlen;
        uint8_t *v = weir__malloc(cap ? cap : 1);
        if (!v)
            return -ENOMEM;
        if (vlen)
            memcpy(v, val, vlen);
        if (!n->inl)
            weir__free(n->val);
        n->val = v;
        n->inl = 0;
        n->vlen = (uint32_t)vlen;
        n->vcap = (uint32_t)cap;
        return 0;
    }
    if (g->npend == g->pcap) {
        size_t cap = g->pcap ? g->pcap * 2 : 16;
        node **p = weir__realloc(g->pend, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        g->pend = p;
        g->pcap = cap;
    }
    int level = random_level(m);
    size_t head = ALIGN16(sizeof(node) + 2 * (size_t)level * sizeof(node *) + klen);
    size_t metab = m->meta ? ALIGN16(sizeof(node *) + m->meta) : 0;
    head += metab;
    size_t icap = vlen <= INLINE_MAX ? ALIGN16(vlen ? vlen : 1) : 0;
    n = weir__malloc(head + icap);
    uint8_t *v = n && !icap ? weir__malloc(vlen) : NULL;
    if (!n || (!icap && !v)) {
        weir__free(n);
        return -ENOMEM;
    }
    n->inl = icap != 0;
    n->val = icap ? (uint8_t *)n + head : v;
    if (vlen)
        memcpy(n->val, val, vlen);
    n->vlen = (uint32_t)vlen;
    n->vcap = (uint32_t)(icap ? icap : vlen);
    n->klen = (uint32_t)klen;
    n->level = level;
    n->linked = 0;
    n->pos = g->npend;
    g->pend[g->npend++] = n;
    if (klen)
        memcpy((uint8_t *)&n->link[2 * level], key, klen);
    n->hash = h;
    sl->hash = h;
    sl->n = n;
    g->count++;
    if (metab) {
        uint8_t *mp = (uint8_t *)n + meta_at(n);
        memcpy(mp, &n, sizeof(n)); /* the node, for weir__mem_meta_key */
        memset(mp + sizeof(node *), 0, metab - sizeof(node *));
    }
    m->made = n;
    return 0;
}

static int mem_del(weir_state_backend *b, int kg, const void *key, size_t klen)
{
    mem_backend *m = (mem_backend *)b;
    group *g = group_of(m, kg);
    if (!g->icap)
        return -ENOENT;
    node *n = is_last(m, kg, key, klen);
    slot *sl;
    if (n) { /* its slot, by identity */
        size_t mask = g->icap - 1, i = (size_t)n->hash & mask;
        while (g->index[i].n != n)
            i = (i + 1) & mask;
        sl = &g->index[i];
        m->last = NULL;
    } else {
        sl = index_find(g, key, klen, hash_of(key, klen));
        if (!(n = sl->n))
            return -ENOENT;
        if (m->last == n)
            m->last = NULL;
    }
    index_remove(g, sl);
    if (n->linked) {
        unlink_node(g, n);
    } else { /* out of the pending array: the last one takes its place */
        node *last = g->pend[--g->npend];
        g->pend[n->pos] = last;
        last->pos = n->pos;
    }
    g->count--;
    free_node(n);
    return 0;
}

/* A seek to the larger of prefix and from (the first key with the prefix
 * at or after from), then a walk until the first key without the prefix. */
static int scan_walk(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                     const void *from, size_t flen, weir_state_scan_fn fn,
                     weir__mem_scan_meta_fn mfn, void *arg)
{
    group *g = group_of((mem_backend *)b, kg);
    flush(g);
    int later = cmp(from, flen, prefix, plen) > 0;
    for (node *n = later ? find_ge(g, from, flen, NULL) : find_ge(g, prefix, plen, NULL); n;
         n = NEXT(n, 0)) {
        if (n->klen < plen || (plen && memcmp(key_of(n), prefix, plen) != 0))
            break;
        int r = mfn ? mfn(arg, key_of(n), n->klen, n->val, n->vlen, meta_of(n))
                    : fn(arg, key_of(n), n->klen, n->val, n->vlen);
        if (r)
            return r;
    }
    return 0;
}

static int mem_scan_from(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                         const void *from, size_t flen, weir_state_scan_fn fn, void *arg)
{
    return scan_walk(b, kg, prefix, plen, from, flen, fn, NULL, arg);
}

static int mem_scan(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                    weir_state_scan_fn fn, void *arg)
{
    return mem_scan_from(b, kg, prefix, plen, prefix, plen, fn, arg);
}

static size_t mem_entries(weir_state_backend *b, int kg)
{
    return group_of((mem_backend *)b, kg)->count;
}

static void group_clear(group *g)
{
    for (size_t k = 0; k < g->npend; k++)
        free_node(g->pend[k]);
    node *n = g->head[0];
    while (n) {
        node *next = NEXT(n, 0);
        free_node(n);
        n = next;
    }
    weir__free(g->pend);
    weir__free(g->index);
    memset(g, 0, sizeof(*g));
}

/* Each group's list merged with the extra entries of the group (both in
 * key order; a key in both is refused). */
static int mem_capture(weir_state_backend *b, uint64_t id, const weir_state_entry *extra, size_t nx,
                       weir_state_snapshot **out)
{
    mem_backend *m = (mem_backend *)b;
    weir_state_snapshot *s = weir__malloc(sizeof(*s));
    if (!s)
        return -ENOMEM;
    weir__snap_init(s, id, b->ngroups, b->first_kg, b->end_kg);
    size_t x = 0, since = 0;
    for (int kg = b->first_kg; kg < b->end_kg && !s->err; kg++) {
        /* Many entries take tens of milliseconds: let the other tasks of
         * the thread run between groups (the backend's owner is the one
         * waiting for this capture, so nothing changes meanwhile). */
        if (since >= CAPTURE_STEP) {
            since = 0;
            if (weir_task_yield() == -ECANCELED) {
                s->err = -ECANCELED;
                break;
            }
        }
        group *g = group_of(m, kg);
        size_t xe = x;
        while (xe < nx && extra[xe].kg == kg)
            xe++;
        if (!g->count && x == xe)
            continue;
        flush(g);
        since += g->count + (xe - x);
        weir__snap_group(s, kg, g->count + (xe - x));
        node *n = g->head[0];
        while (n || x < xe) {
            int c = !n ? 1 : x == xe ? -1 : cmp(key_of(n), n->klen, extra[x].key, extra[x].klen);
            if (c == 0) {
                s->err = -EINVAL; /* the extra key is the backend's too */
                break;
            }
            if (c < 0) {
                weir__snap_entry(s, key_of(n), n->klen, n->val, n->vlen);
                n = NEXT(n, 0);
            } else {
                weir__snap_entry(s, extra[x].key, extra[x].klen, extra[x].val, extra[x].vlen);
                x++;
            }
        }
    }
    if (s->err) {
        int e = s->err;
        weir_state_snapshot_free(s);
        return e;
    }
    *out = s;
    return 0;
}

/* Load a checked image: every group of our range the file covers is
 * replaced (emptied when the file holds no entries for it). */
static int mem_load(weir_state_backend *b, weir__snap_reader *r, char *why, size_t cap)
{
    mem_backend *m = (mem_backend *)b;
    if (r->ngroups != b->ngroups) {
        weir__state_fail(why, cap, "snapshot has %d key groups, the backend %d", r->ngroups,
                         b->ngroups);
        return -EINVAL;
    }
    int lo = r->first_kg > b->first_kg ? r->first_kg : b->first_kg;
    int hi = r->end_kg < b->end_kg ? r->end_kg : b->end_kg;
    m->last = NULL;
    for (int kg = lo; kg < hi; kg++)
        group_clear(group_of(m, kg));
    int kg, e = 0;
    uint64_t count;
    size_t since = 0;
    while (!e && weir__snap_next_group(r, &kg, &count)) {
        int mine = kg >= b->first_kg && kg < b->end_kg;
        for (uint64_t i = 0; i < count; i++) {
            const uint8_t *k, *v;
            size_t kl, vl;
            weir__snap_next_entry(r, &k, &kl, &v, &vl);
            if (mine && !e)
                e = mem_put(b, kg, k, kl, v, vl);
            /* As a capture does: the owner is waiting for this restore, so
             * the other tasks of its thread may run meanwhile. A cancel
             * does not stop it halfway (the result is ignored). */
            if (++since == CAPTURE_STEP) {
                since = 0;
                weir_task_yield();
            }
        }
    }
    return e;
}

static int mem_restore(weir_state_backend *b, const uint8_t *img, size_t len, char *why, size_t cap)
{
    weir__snap_reader r;
    int e = weir__snap_open(&r, img, len, why, cap);
    if (e)
        return e;
    weir_task_yield(); /* the check was a pass over the whole image */
    return mem_load(b, &r, why, cap);
}

/* The engine checked the image on the blocking pool (weir__state_restore_from). */
static int mem_restore_checked(weir_state_backend *b, const uint8_t *img, size_t len, char *why,
                               size_t cap)
{
    weir__snap_reader r;
    weir__snap_open_checked(&r, img, len);
    return mem_load(b, &r, why, cap);
}

static void mem_free(weir_state_backend *b)
{
    mem_backend *m = (mem_backend *)b;
    for (int kg = b->first_kg; kg < b->end_kg; kg++)
        group_clear(group_of(m, kg));
    weir__free(m->groups);
    weir__free(m);
}

static const weir_state_backend_ops mem_ops = {
    .name = "memory",
    .get = mem_get,
    .put = mem_put,
    .del = mem_del,
    .scan = mem_scan,
    .get_async = NULL,
    .capture = mem_capture,
    .restore = mem_restore,
    .entries = mem_entries,
    .free = mem_free,
    .scan_from = mem_scan_from,
    .restore_checked = mem_restore_checked,
};

weir_state_backend *weir_state_memory_new(int ngroups, int first_kg, int end_kg)
{
    if (ngroups < 1 || first_kg < 0 || first_kg > end_kg || end_kg > ngroups) {
        errno = EINVAL;
        return NULL;
    }
    mem_backend *m = weir__calloc(1, sizeof(*m));
    size_t n = (size_t)(end_kg - first_kg);
    group *groups = weir__calloc(n ? n : 1, sizeof(group));
    if (!m || !groups) {
        weir__free(m);
        weir__free(groups);
        errno = ENOMEM;
        return NULL;
    }
    m->base = (weir_state_backend){&mem_ops, ngroups, first_kg, end_kg};
    m->groups = groups;
    m->rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)m;
    return &m->base;
}

/* ---- the hot tier's hooks (state_int.h) ---------------------------------------------------- */
weir_state_backend *weir__mem_new_meta(int ngroups, int first_kg, int end_kg, size_t meta)
{
    weir_state_backend *b = weir_state_memory_new(ngroups, first_kg, end_kg);
    if (b)
        ((mem_backend *)b)->meta = meta;
    return b;
}

int weir__mem_get_meta(weir_state_backend *b, int kg, const void *key, size_t klen,
                       const void **val, size_t *vlen, void **meta)
{
    int e = mem_get(b, kg, key, klen, val, vlen);
    if (!e)
        *meta = meta_of(((mem_backend *)b)->last);
    return e;
}

int weir__mem_put_meta(weir_state_backend *b, int kg, const void *key, size_t klen,
                       const void *val, size_t vlen, void **meta, int *created)
{
    mem_backend *m = (mem_backend *)b;
    m->made = NULL;
    int e = mem_put(b, kg, key, klen, val, vlen);
    if (e)
        return e;
    *created = m->made != NULL;
    if (m->made) {
        *meta = meta_of(m->made);
        return 0;
    }
    const void *v;
    size_t vl;
    return weir__mem_get_meta(b, kg, key, klen, &v, &vl, meta);
}

void weir__mem_meta_key(const void *meta, const void **key, size_t *klen)
{
    node *n;
    memcpy(&n, (const uint8_t *)meta - sizeof(node *), sizeof(n));
    *key = key_of(n);
    *klen = n->klen;
}

int weir__mem_scan_meta(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                        weir__mem_scan_meta_fn fn, void *arg)
{
    return scan_walk(b, kg, prefix, plen, prefix, plen, NULL, fn, arg);
}
