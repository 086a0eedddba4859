/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote.c - the remote-read state backend: a hot tier in memory over a
 * durable pool, "remote:POOL_URI[?hot_max_bytes=N&io_threads=N&
 * block_cache_bytes=N]" (POOL_URI
 * any store of state/storage.h: a directory, "mem://NAME",
 * "latency://MS/URI" around either, "s3://BUCKET/PREFIX?endpoint=H:P";
 * the options after the last '?' that are not the backend's stay with
 * the pool URI).
 *
 * The pool holds runs (state/run.h): each checkpoint writes one, the
 * delta - every key changed since the last checkpoint, as puts and
 * tombstones - so a checkpoint's bytes follow what changed, not the size
 * of the state. Per key group the backend keeps its chain, the runs that
 * hold the group's data, newest first; the checkpoint's image (the
 * handle, what the engine stores beside its manifest) names each group's
 * chain and where in each run the group's bloom filter and block index
 * are, with the group's first and last key there. A restore reads the
 * handle only: nothing of a run is fetched until a read needs it (a
 * group's meta on the first cold read that reaches the run, then one
 * block per read), so a restored or rescaled job takes records again at
 * once, whatever the state's size.
 *
 * The hot tier is an in-memory backend (memory.c, with a meta per entry)
 * under a byte budget, hot_max_bytes (default a quarter of the RAM, at
 * least 64 MiB; 0 = unbounded). Every entry is on exactly one list:
 *
 *   dirty     changed since the last capture (a put, or a delete kept as
 *             a tombstone while the pool may hold the key);
 *   captured  taken by capture c, whose run is not yet in the pool;
 *   clean     its latest change is in the pool (or it was read from it):
 *             the LRU, the only list eviction takes from;
 *   held      restored with the handle (the engine's timers): never
 *             evicted, never in a run, until deleted.
 *
 * So eviction never meets an entry it may not drop and never scans past
 * one: written and deleted keys stay in memory until the run that holds
 * them is durable; then (the next call on the owner after the persist
 * published it) their lists join the LRU and eviction runs again.
 *
 * Reads. A hot hit answers at once. A miss in a group whose chain is
 * empty is -ENOENT at once. Otherwise the read walks the chain newest
 * first, skipping a run whose key range or bloom filter excludes the key,
 * and needs the one block of the run that may hold it: when every run it
 * reaches has its meta in memory and that block in the block cache, the
 * read answers at once on the owner (get, get_now, get_async, get_batch
 * alike), no round trip; else get_async and get_batch hand it to the
 * backend's I/O threads (io_threads, default 16, started at the first
 * cold read), which fetch what is missing with one ranged get each and
 * answer from any thread, as weir/state.h allows; the value (or its
 * absence) is written through to the hot tier as a clean entry (at the
 * owner's next call, from the I/O threads). The synchronous get does the
 * I/O threads' walk on the runtime's blocking pool, the calling fiber
 * waiting.
 *
 * The block cache (block_cache_bytes, default hot_max_bytes: beside the
 * hot tier's budget, not in it; 0 keeps no block, so an unbounded hot
 * tier has none unless asked) holds blocks of runs
 * by (run, offset), the least recently used dropped past its bound. A
 * read that needs a block another read is fetching waits for that fetch
 * (one round trip for all of them; a failed fetch fails each with its
 * error and is not kept). A persist puts in the blocks of the run it
 * writes, and its meta: a key evicted once its run is durable is then
 * read back from memory. (Of a run its merges write, the meta alone: its
 * blocks, older data rewritten, would push out the newest; measured on
 * q5, keeping them cost about a fifth of the rate.)
 *
 * Scans. A scan merges the hot tier with the blocks of each run that
 * meet the prefix, fetched on the blocking pool - or ahead of it on
 * the I/O threads, when scan_prefetch asked for them (see "scans
 * prefetched" below); its blocks do not go through the block cache. A
 * group nothing of which was evicted or restored needs no pool at all
 * (hot_whole).
 *
 * Snapshots. capture (the owner, at the barrier) copies the dirty
 * entries, sorted, into a delta and moves them to a captured list; the
 * persist (the engine's, on the blocking pool: the snapshot's prepare
 * step) writes the delta as a run, prepends it to the chains of its
 * groups, publishes the capture as durable and encodes the handle. A
 * snapshot dropped unwritten (the engine abandons a stale one) or whose
 * write failed leaves its delta to the next capture's run, which merges
 * it in, so every chain covers every change. The engine's timers ride in
 * the handle itself (they are rewritten whole at every checkpoint).
 *
 * Each checkpoint adds one run to each group it touched; past CHAIN_MAX
 * runs a persist merges a group's adjacent pair with the fewest entries
 * (compact), so a cold read looks at about CHAIN_MAX runs at most, skipping
 * runs by range and bloom filter (about 1% false positives). Runs no
 * checkpoint refers to any more are deleted from the pool when the
 * engine prunes checkpoints (weir__remote_gc).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/be.h"
#include "base/buf.h"
#include "base/log.h"
#include "rt/rt_int.h"
#include "state/run.h"
#include "state/state_int.h"
#include "state/storage.h"

#define HANDLE_MAGIC   "WEIRRMT1"
#define HANDLE_VERSION 1u
#define ENTRY_COST     96 /* bytes charged per hot entry beside its key and value */
#define IO_THREADS_MAX 256
#define CHAIN_MAX      8 /* runs per group before two are merged */

/* ---- runs and chains (shared with the I/O threads) ------------------------------------------- */
typedef struct runref {
    _Atomic int refs;
    char *name; /* the run's blob */
    uint64_t meta_off;
    uint32_t meta_len;
    uint64_t entries;
    uint8_t *first, *last;
    uint32_t flen, llen;
    _Atomic(weir__run_meta *) meta; /* set once: by the persist that wrote the run, or the
                                     * first read that needs it */
    uint64_t born;                  /* the capture whose persist wrote it (0: restored) */
} runref;

typedef struct chain {
    runref **v; /* newest first */
    size_t n, cap;
} chain;

/* A read for the I/O threads. */
typedef struct rreq {
    struct rreq *next;
    int kg;
    int scan; /* a scan's prefetch: key is the prefix */
    weir_state_get_cb cb;
    void *arg;
    size_t klen;
    uint8_t key[];
} rreq;

/* A value read from the pool, for the owner to write through. */
typedef struct loaded {
    struct loaded *next;
    int kg, found;
    size_t klen, vlen;
    uint8_t *val;
    uint8_t key[];
} loaded;

/* A block of a run in the block cache: one fetch, shared by every read
 * that wants it while it loads, then kept (ready) while the cache's
 * bound allows. Under sh->bmu. */
typedef struct cblock {
    struct cblock *hnext;         /* the bucket's chain (while in the table) */
    struct cblock *older, *newer; /* the age list (ready and in the table) */
    runref *run;                  /* referenced: the pointer stays unique while the block lives */
    uint64_t off;
    uint32_t len;
    int state; /* 1 loading, 0 ready, else the fetch's error */
    int users; /* reads holding it */
    int in_table;
    pthread_cond_t cv; /* loading -> done */
    uint8_t *data;
} cblock;

#define BLOCK_BUCKETS 4096u

typedef struct rshared {
    _Atomic int refs;
    pthread_mutex_t mu;  /* the chains */
    pthread_mutex_t qmu; /* the queue of reads, the threads */
    pthread_cond_t cv;   /* with qmu: a read queued, or stop */
    weir__storage *pool;
    int first_kg, end_kg;
    chain *chains;                     /* [end_kg - first_kg], under mu */
    _Atomic uint64_t durable;          /* the newest capture whose run is in the pool */
    rreq *head, *tail;                 /* queued reads, under qmu */
    _Atomic(loaded *) done;            /* reads answered, for write-through (a lock-free stack) */
    _Atomic(struct scanned *) scanned; /* scans prefetched, for the owner (likewise) */
    int stop;                          /* under qmu */
    pthread_t *threads;
    int nthreads, want_threads;
    uint64_t nonce;
    _Atomic uint64_t cold_reads, blocks_read, run_bytes, merges, scans_fetched;
    _Atomic uint64_t round_trips; /* ranged gets of the pool (blocks, metas, merges' groups) */
    /* the block cache (see "the block cache" below), under bmu */
    pthread_mutex_t bmu;
    cblock **bt;               /* [BLOCK_BUCKETS] */
    cblock *boldest, *bnewest; /* ready blocks in the table, oldest first */
    size_t bcap, bbytes;       /* bound (0: blocks live only while read) and bytes held */
    uint64_t bhits, bshared, bseeded;
} rshared;

static void runref_unref(runref *r)
{
    if (!r || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
        return;
    weir__run_meta_free(atomic_load_explicit(&r->meta, memory_order_relaxed));
    weir__free(r->name);
    weir__free(r->first);
    weir__free(r->last);
    weir__free(r);
}

static void chain_clear(chain *c)
{
    for (size_t i = 0; i < c->n; i++)
        runref_unref(c->v[i]);
    weir__free(c->v);
    *c = (chain){0};
}

/* Put r at the front of c (c takes the reference). */
static int chain_push_front(chain *c, runref *r)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4;
        runref **v = weir__realloc(c->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        c->v = v;
        c->cap = cap;
    }
    memmove(c->v + 1, c->v, c->n * sizeof(*c->v));
    c->v[0] = r;
    c->n++;
    return 0;
}

static void shared_unref(rshared *sh)
{
    if (atomic_fetch_sub_explicit(&sh->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (int kg = sh->first_kg; kg < sh->end_kg; kg++)
        chain_clear(&sh->chains[kg - sh->first_kg]);
    weir__free(sh->chains);
    for (loaded *l = atomic_load(&sh->done), *n; l; l = n) {
        n = l->next;
        weir__free(l->val);
        weir__free(l);
    }
    for (cblock *c = sh->boldest, *n; c; c = n) { /* nobody reads any more */
        n = c->newer;
        runref_unref(c->run);
        pthread_cond_destroy(&c->cv);
        weir__free(c->data);
        weir__free(c);
    }
    weir__free(sh->bt);
    pthread_mutex_destroy(&sh->bmu);
    weir__storage_close(sh->pool);
    weir__free(sh->threads);
    pthread_mutex_destroy(&sh->mu);
    pthread_mutex_destroy(&sh->qmu);
    pthread_cond_destroy(&sh->cv);
    weir__free(sh);
}

/* ---- the cold read: the chain walked newest first ----------------------------------------------
 */
static int fetch(rshared *sh, const char *name, uint64_t off, uint32_t len, uint8_t **out)
{
    uint8_t *buf = weir__malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    size_t got;
    atomic_fetch_add_explicit(&sh->round_trips, 1, memory_order_relaxed);
    int e = weir__storage_range_now(sh->pool, name, off, len, buf, &got);
    if (!e && got != len)
        e = -EBADMSG; /* the run is shorter than its handle says */
    if (e) {
        weir__free(buf);
        return e;
    }
    *out = buf;
    return 0;
}

/* The run's meta of group kg, loaded once. */
static int meta_of(rshared *sh, runref *r, int kg, weir__run_meta **out)
{
    weir__run_meta *m = atomic_load_explicit(&r->meta, memory_order_acquire);
    if (m) {
        *out = m;
        return 0;
    }
    uint8_t *buf;
    int e = fetch(sh, r->name, r->meta_off, r->meta_len, &buf);
    if (e)
        return e;
    e = weir__run_meta_parse(buf, r->meta_len, kg, &m, NULL, 0);
    weir__free(buf);
    if (e)
        return e;
    weir__run_meta *none = NULL;
    if (!atomic_compare_exchange_strong_explicit(&r->meta, &none, m, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        weir__run_meta_free(m); /* another read loaded it meanwhile */
        m = none;
    }
    *out = m;
    return 0;
}

/* ---- the block cache ---------------------------------------------------------------------------
 * Blocks of runs by (run, offset). A read that wants a block another read
 * is fetching waits for that fetch instead of making its own (one round
 * trip, whatever the number of readers; a failed fetch fails each of them
 * with its error, and the next read fetches again). A fetched block stays,
 * the least recently used dropped past block_cache_bytes (default: the hot
 * tier's budget, beside it; 0: a block lives only while it is read). A
 * persist puts the blocks of the runs it writes in (a key evicted once its
 * run is durable is read back from memory). */
static uint32_t block_bucket(const runref *r, uint64_t off)
{
    uint64_t k[2] = {(uint64_t)(uintptr_t)r, off};
    return (uint32_t)(XXH3_64bits(k, sizeof(k)) % BLOCK_BUCKETS);
}

/* Out of the table and the age list (under bmu). */
static void block_unlink(rshared *sh, cblock *c)
{
    cblock **pp = &sh->bt[block_bucket(c->run, c->off)];
    while (*pp != c)
        pp = &(*pp)->hnext;
    *pp = c->hnext;
    c->in_table = 0;
    if (c->state == 0) {
        if (c->older)
            c->older->newer = c->newer;
        else
            sh->boldest = c->newer;
        if (c->newer)
            c->newer->older = c->older;
        else
            sh->bnewest = c->older;
        c->older = c->newer = NULL;
        sh->bbytes -= c->len;
    }
}

static void block_free(cblock *c)
{
    runref_unref(c->run);
    pthread_cond_destroy(&c->cv);
    weir__free(c->data);
    weir__free(c);
}

/* The newest end of the age list (ready, in the table; under bmu). */
static void block_age_push(rshared *sh, cblock *c)
{
    c->newer = NULL;
    c->older = sh->bnewest;
    if (sh->bnewest)
        sh->bnewest->newer = c;
    else
        sh->boldest = c;
    sh->bnewest = c;
}

/* Drop the oldest ready blocks past the bound (under bmu). */
static void block_trim(rshared *sh)
{
    while (sh->boldest && sh->bbytes > sh->bcap) {
        cblock *c = sh->boldest;
        block_unlink(sh, c);
        if (!c->users)
            block_free(c);
    }
}

static cblock *block_new(runref *r, uint64_t off, uint32_t len)
{
    cblock *c = weir__calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    if (pthread_cond_init(&c->cv, NULL)) {
        weir__free(c);
        return NULL;
    }
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    c->run = r;
    c->off = off;
    c->len = len;
    return c;
}

/* Done with a block block_get gave. */
static void block_put(rshared *sh, cblock *c)
{
    pthread_mutex_lock(&sh->bmu);
    if (!--c->users && !c->in_table)
        block_free(c);
    pthread_mutex_unlock(&sh->bmu);
}

/* Block [off, off + len) of run r: from the cache, from the fetch of it
 * under way, or fetched now. *out to block_put; its data is c->data. */
static int block_get(rshared *sh, runref *r, uint64_t off, uint32_t len, cblock **out)
{
    uint32_t h = block_bucket(r, off);
    pthread_mutex_lock(&sh->bmu);
    cblock *c = sh->bt[h];
    while (c && !(c->run == r && c->off == off))
        c = c->hnext;
    if (c && c->len == len) {
        c->users++;
        if (c->state == 1) {
            sh->bshared++;
            while (c->state == 1)
                pthread_cond_wait(&c->cv, &sh->bmu);
        } else {
            sh->bhits++;
            if (sh->bnewest != c) { /* the most recently used */
                if (c->older)
                    c->older->newer = c->newer;
                else
                    sh->boldest = c->newer;
                c->newer->older = c->older;
                block_age_push(sh, c);
            }
        }
        int e = c->state;
        if (e && !--c->users && !c->in_table)
            block_free(c);
        pthread_mutex_unlock(&sh->bmu);
        if (e)
            return e;
        *out = c;
        return 0;
    }
    if (c) /* another length at that offset: not ours to share (a damaged handle) */
        c = NULL;
    else if ((c = block_new(r, off, len)) != NULL) {
        c->state = 1;
        c->users = 1;
        c->in_table = 1;
        c->hnext = sh->bt[h];
        sh->bt[h] = c;
    }
    pthread_mutex_unlock(&sh->bmu);
    uint8_t *buf = NULL;
    int e = fetch(sh, r->name, off, len, &buf);
    if (!c) { /* not shared: a block of its own */
        if (!e && !(c = block_new(r, off, len)))
            e = -ENOMEM;
        if (e) {
            weir__free(buf);
            return e;
        }
        c->users = 1;
        c->data = buf;
        *out = c;
        return 0;
    }
    pthread_mutex_lock(&sh->bmu);
    c->data = buf;
    c->state = e;
    if (e) { /* every reader waiting fails with e; the next read fetches again */
        block_unlink(sh, c);
    } else {
        block_age_push(sh, c);
        sh->bbytes += len;
    }
    pthread_cond_broadcast(&c->cv);
    if (e && !--c->users)
        block_free(c);
    if (!e)
        block_trim(sh);
    pthread_mutex_unlock(&sh->bmu);
    if (e)
        return e;
    *out = c;
    return 0;
}

/* A block the persist has in memory, put in as fetched (nothing when the
 * cache keeps no blocks, when it has one there, or on ENOMEM). */
static void block_seed(rshared *sh, runref *r, uint64_t off, const uint8_t *p, uint32_t len)
{
    if (!sh->bcap || len > sh->bcap)
        return;
    cblock *c = block_new(r, off, len);
    uint8_t *d = c ? weir__malloc(len ? len : 1) : NULL;
    if (!d) {
        if (c)
            block_free(c);
        return;
    }
    memcpy(d, p, len);
    c->data = d;
    uint32_t h = block_bucket(r, off);
    pthread_mutex_lock(&sh->bmu);
    cblock *o = sh->bt[h];
    while (o && !(o->run == r && o->off == off))
        o = o->hnext;
    if (o) {
        pthread_mutex_unlock(&sh->bmu);
        block_free(c);
        return;
    }
    c->in_table = 1;
    c->hnext = sh->bt[h];
    sh->bt[h] = c;
    block_age_push(sh, c);
    sh->bbytes += len;
    sh->bseeded++;
    block_trim(sh);
    pthread_mutex_unlock(&sh->bmu);
}

/* The meta of group kg of a run just written (buf, its bytes) into r,
 * and with blocks its blocks into the cache: no read of them goes to the
 * pool while they stay. */
static void run_seed(rshared *sh, runref *r, int kg, const uint8_t *buf, size_t len, int blocks)
{
    if (r->meta_off > len || r->meta_len > len - r->meta_off)
        return;
    weir__run_meta *m;
    if (weir__run_meta_parse(buf + r->meta_off, r->meta_len, kg, &m, NULL, 0))
        return;
    atomic_store_explicit(&r->meta, m, memory_order_release); /* nobody else has r yet */
    uint32_t nb = blocks ? weir__run_meta_nblocks(m) : 0;
    for (uint32_t i = 0; i < nb; i++) {
        uint64_t off;
        uint32_t bl;
        weir__run_meta_nth(m, i, &off, &bl);
        if (off <= len && bl <= len - off)
            block_seed(sh, r, off, buf + off, bl);
    }
}

static int in_range(const runref *r, const void *key, size_t klen)
{
    return weir__key_cmp(key, klen, r->first, r->flen) >= 0 &&
           weir__key_cmp(key, klen, r->last, r->llen) <= 0;
}

/* A snapshot of group kg's chain, each run referenced. */
static int chain_copy(rshared *sh, int kg, runref ***v, size_t *n)
{
    pthread_mutex_lock(&sh->mu);
    chain *c = &sh->chains[kg - sh->first_kg];
    *n = c->n;
    *v = c->n ? weir__malloc(c->n * sizeof(**v)) : NULL;
    if (c->n && !*v) {
        pthread_mutex_unlock(&sh->mu);
        return -ENOMEM;
    }
    for (size_t i = 0; i < c->n; i++) {
        (*v)[i] = c->v[i];
        atomic_fetch_add_explicit(&c->v[i]->refs, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&sh->mu);
    return 0;
}

static void chain_copy_free(runref **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        runref_unref(v[i]);
    weir__free(v);
}

static int lookup_once(rshared *sh, int kg, const void *key, size_t klen, uint8_t **val,
                       size_t *vlen, int *stale);

/* 0: found (*val weir__malloc'd, *vlen), -ENOENT: not in the pool (or
 * deleted), else an error. Blocks. A run that vanished from the pool
 * under the read (merged away by a persist, then deleted once no
 * checkpoint needed it) sends the read round again with the chain as it
 * is now; a run the chain still names that the pool no longer has is
 * -EIO (lost data, never an absence). */
static int cold_lookup(rshared *sh, int kg, const void *key, size_t klen, uint8_t **val,
                       size_t *vlen)
{
    for (int round = 0;; round++) {
        int stale = 0;
        int e = lookup_once(sh, kg, key, klen, val, vlen, &stale);
        if (!stale)
            return e;
        if (round == 3)
            return -EIO;
    }
}

/* Is r still in group kg's chain? */
static int in_chain(rshared *sh, int kg, const runref *r)
{
    pthread_mutex_lock(&sh->mu);
    chain *c = &sh->chains[kg - sh->first_kg];
    int in = 0;
    for (size_t i = 0; i < c->n && !in; i++)
        in = c->v[i] == r;
    pthread_mutex_unlock(&sh->mu);
    return in;
}

static int lookup_once(rshared *sh, int kg, const void *key, size_t klen, uint8_t **val,
                       size_t *vlen, int *stale)
{
    runref **v;
    size_t n;
    int e = chain_copy(sh, kg, &v, &n), found = -ENOENT, settled = 0;
    atomic_fetch_add_explicit(&sh->cold_reads, 1, memory_order_relaxed);
    /* The newest run that holds the key settles it: its value, or its
     * tombstone (deleted: the older runs' values are gone). */
    for (size_t i = 0; !e && !settled && i < n; i++) {
        runref *r = v[i];
        weir__run_meta *m;
        uint64_t off;
        uint32_t len;
        cblock *cb = NULL;
        if (in_range(r, key, klen) && !(e = meta_of(sh, r, kg, &m)) &&
            weir__run_meta_maybe(m, key, klen) && !weir__run_meta_block(m, key, klen, &off, &len))
            e = block_get(sh, r, off, len, &cb);
        else if (!e)
            continue;
        if (e == -ENOENT) {
            if (in_chain(sh, kg, r))
                e = -EIO; /* the pool lost a run the chain needs */
            else
                *stale = 1;
        }
        if (e)
            break;
        atomic_fetch_add_explicit(&sh->blocks_read, 1, memory_order_relaxed);
        weir__run_block b;
        const uint8_t *p;
        size_t pl;
        if (!(e = weir__run_block_open(&b, cb->data, len, NULL, 0))) {
            int f = weir__run_block_find(&b, key, klen, &p, &pl);
            settled = f == 0 || f == 1;
            if (f == 0) {
                uint8_t *copy = weir__malloc(pl ? pl : 1);
                if (!copy) {
                    e = -ENOMEM;
                } else {
                    if (pl)
                        memcpy(copy, p, pl);
                    *val = copy;
                    *vlen = pl;
                    found = 0;
                }
            }
        }
        block_put(sh, cb);
    }
    chain_copy_free(v, n);
    return e ? e : found;
}

/* The cold read of key answered from memory alone, when every run it
 * must look at has its meta loaded and the block it needs in the block
 * cache: 0 (found: *val points into *held, to block_put), -ENOENT (not in
 * the pool, or deleted), 1: it needs the pool (the I/O threads). On the
 * owner; no round trip, no wait. */
static int lookup_mem(rshared *sh, int kg, const void *key, size_t klen, const uint8_t **val,
                      size_t *vlen, cblock **held)
{
    int res = -ENOENT;
    *held = NULL;
    pthread_mutex_lock(&sh->mu);
    chain *c = &sh->chains[kg - sh->first_kg];
    for (size_t i = 0; i < c->n; i++) {
        runref *r = c->v[i];
        weir__run_meta *m = atomic_load_explicit(&r->meta, memory_order_acquire);
        uint64_t off;
        uint32_t len;
        if (!in_range(r, key, klen))
            continue;
        if (!m) {
            res = 1;
            break;
        }
        if (!weir__run_meta_maybe(m, key, klen) || weir__run_meta_block(m, key, klen, &off, &len))
            continue;
        pthread_mutex_lock(&sh->bmu);
        cblock *b = sh->bt[block_bucket(r, off)];
        while (b && !(b->run == r && b->off == off))
            b = b->hnext;
        if (b && b->state == 0 && b->len == len) {
            b->users++;
            sh->bhits++;
        } else {
            b = NULL;
        }
        pthread_mutex_unlock(&sh->bmu);
        if (!b) {
            res = 1;
            break;
        }
        atomic_fetch_add_explicit(&sh->blocks_read, 1, memory_order_relaxed);
        weir__run_block rb;
        const uint8_t *p;
        size_t pl;
        int f = weir__run_block_open(&rb, b->data, len, NULL, 0)
                    ? 2
                    : weir__run_block_find(&rb, key, klen, &p, &pl);
        if (f == 0) {
            *val = p;
            *vlen = pl;
            *held = b;
            res = 0;
            break;
        }
        block_put(sh, b);
        if (f == 1)
            break; /* a tombstone: deleted */
        if (f != -ENOENT) {
            res = 1; /* a damaged block: the pool's read says what is wrong */
            break;
        }
    }
    pthread_mutex_unlock(&sh->mu);
    if (res == -ENOENT || res == 0)
        atomic_fetch_add_explicit(&sh->cold_reads, 1, memory_order_relaxed);
    return res;
}

/* Hand the answer to the write-through list. */
static void loaded_push(rshared *sh, int kg, const void *key, size_t klen, int found,
                        const uint8_t *val, size_t vlen)
{
    loaded *l = weir__malloc(sizeof(*l) + klen);
    uint8_t *v = found ? weir__malloc(vlen ? vlen : 1) : NULL;
    if (!l || (found && !v)) {
        weir__free(l);
        weir__free(v);
        return; /* write-through is an optimisation: the next read goes to the pool again */
    }
    *l = (loaded){.kg = kg, .found = found, .klen = klen, .vlen = vlen, .val = v};
    memcpy(l->key, key, klen);
    if (found && vlen)
        memcpy(v, val, vlen);
    l->next = atomic_load_explicit(&sh->done, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&sh->done, &l->next, l, memory_order_release,
                                                  memory_order_relaxed))
        ;
}

static void scan_fetch(rshared *sh, rreq *q);

static void *io_main(void *arg)
{
    rshared *sh = arg;
    pthread_mutex_lock(&sh->qmu);
    for (;;) {
        while (!sh->head && !sh->stop)
            pthread_cond_wait(&sh->cv, &sh->qmu);
        rreq *q = sh->head;
        if (!q)
            break; /* stopped, nothing queued */
        sh->head = q->next;
        if (!sh->head)
            sh->tail = NULL;
        int stop = sh->stop;
        pthread_mutex_unlock(&sh->qmu);
        if (stop) {
            q->cb(q->arg, -ECANCELED, NULL, 0);
        } else if (q->scan) {
            scan_fetch(sh, q);
        } else {
            uint8_t *val = NULL;
            size_t vlen = 0;
            int e = cold_lookup(sh, q->kg, q->key, q->klen, &val, &vlen);
            if (e == 0 || e == -ENOENT)
                loaded_push(sh, q->kg, q->key, q->klen, e == 0, val, vlen);
            q->cb(q->arg, e, e ? NULL : val, vlen);
            weir__free(val);
        }
        weir__free(q);
        pthread_mutex_lock(&sh->qmu);
    }
    pthread_mutex_unlock(&sh->qmu);
    return NULL;
}

/* ---- the backend ------------------------------------------------------------------------------
 */
enum { L_NONE, L_DIRTY, L_CAPT, L_CLEAN, L_HELD };

/* Each hot entry's meta (memory.c keeps it with the entry). */
typedef struct hmeta {
    struct hmeta *prev, *next;
    uint64_t seq; /* L_CAPT: the capture that took it */
    uint32_t bytes;
    int16_t kg;
    uint8_t list;
    uint8_t tomb;    /* deleted: the value is empty, reads answer -ENOENT */
    uint8_t in_pool; /* the pool may hold a value of the key: a delete needs a tombstone */
} hmeta;

/* A capture's entries, until its run is durable. */
typedef struct capt {
    uint64_t seq;
    hmeta head;
} capt;

/* A delta: one capture's changes, sorted; it owns its bytes. */
typedef struct dent {
    int kg;
    uint8_t tomb;
    uint32_t klen, vlen;
    const uint8_t *key, *val;
} dent;

typedef struct delta {
    _Atomic int refs;
    _Atomic int written;
    struct delta *base; /* the previous capture's, while this one is not written */
    uint64_t seq;
    dent *v;
    size_t n;
    uint8_t *bytes;
} delta;

typedef struct remote {
    weir_state_backend base;
    weir_state_backend *hot;
    rshared *sh;
    size_t budget, bytes; /* budget 0: unbounded */
    hmeta dirty, clean, held;
    capt **capts; /* oldest first */
    size_t ncapts, capts_cap;
    uint64_t seq; /* captures taken */
    delta *last;  /* the newest delta (the next one's base) */
    uint64_t evictions;
    uint8_t *cold; /* [group - first_kg]: an entry of it was evicted or restored (hot_whole) */
    /* scans prefetched (scan_prefetch): a table by (group, prefix), oldest first */
    struct scanned **buckets, *oldest, *newest;
    size_t ncache, cache_bytes;
    uint64_t scans_served;
    /* Scans walking now (a scan's callback may read): while one walks,
     * nothing it walks - hot entries, the cache's - is evicted or freed. */
    int scanning;
} remote;

static void list_init(hmeta *h)
{
    h->prev = h->next = h;
}

static void list_unlink(hmeta *m)
{
    m->prev->next = m->next;
    m->next->prev = m->prev;
    m->prev = m->next = NULL;
}

/* At the front (the most recent end). */
static void list_push(hmeta *h, hmeta *m, int list)
{
    m->next = h->next;
    m->prev = h;
    h->next->prev = m;
    h->next = m;
    m->list = (uint8_t)list;
}

static int list_empty(const hmeta *h)
{
    return h->next == h;
}

/* Move every entry of from to the front of to. */
static void list_splice(hmeta *to, hmeta *from, int list)
{
    for (hmeta *m = from->next; m != from; m = m->next)
        m->list = (uint8_t)list;
    if (list_empty(from))
        return;
    hmeta *first = from->next, *last = from->prev;
    last->next = to->next;
    to->next->prev = last;
    to->next = first;
    first->prev = to;
    list_init(from);
}

static void delta_unref(delta *d)
{
    while (d && atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) == 1) {
        delta *b = d->base;
        weir__free(d->v);
        weir__free(d->bytes);
        weir__free(d);
        d = b;
    }
}

static void drop_entry(remote *r, int kg, hmeta *m)
{
    const void *key;
    size_t klen;
    weir__mem_meta_key(m, &key, &klen);
    if (m->prev)
        list_unlink(m);
    r->bytes -= m->bytes;
    weir_state_delete(r->hot, kg, key, klen);
}

static void evict(remote *r)
{
    if (r->scanning)
        return; /* the next call after the scan evicts */
    while (r->budget && r->bytes > r->budget && !list_empty(&r->clean)) {
        hmeta *m = r->clean.prev; /* the least recently used */
        r->cold[m->kg - r->base.first_kg] = 1;
        drop_entry(r, m->kg, m);
        r->evictions++;
    }
}

static hmeta *hot_get(remote *r, int kg, const void *key, size_t klen, const void **val,
                      size_t *vlen)
{
    void *meta;
    if (weir__mem_get_meta(r->hot, kg, key, klen, val, vlen, &meta))
        return NULL;
    return meta;
}

/* Store key -> val in the hot tier; the entry's meta, its charge updated
 * (NULL on -ENOMEM). *created: a new entry. */
static hmeta *hot_put(remote *r, int kg, const void *key, size_t klen, const void *val, size_t vlen,
                      int *created, int *err)
{
    void *meta;
    int e = weir__mem_put_meta(r->hot, kg, key, klen, val, vlen, &meta, created);
    if (e) {
        *err = e;
        return NULL;
    }
    hmeta *m = meta;
    if (*created) {
        m->kg = (int16_t)kg;
        m->list = L_NONE;
    }
    size_t cost = klen + vlen + ENTRY_COST;
    r->bytes += cost - m->bytes;
    m->bytes = (uint32_t)cost;
    return m;
}

/* Does the hot tier hold every entry of group kg, so that a miss is an
 * absence and a scan needs no pool? Yes while nothing of the group was
 * evicted or restored (every change since is still in memory: written
 * entries stay until durable, then until evicted), and when its chain is
 * empty. */
static int hot_whole(remote *r, int kg)
{
    if (!r->cold[kg - r->base.first_kg])
        return 1;
    rshared *sh = r->sh;
    pthread_mutex_lock(&sh->mu);
    int empty = sh->chains[kg - sh->first_kg].n == 0;
    pthread_mutex_unlock(&sh->mu);
    return empty;
}

/* Write a value read from the pool (found 0) or its absence through to
 * the hot tier, as a clean entry. */
static hmeta *write_through(remote *r, int kg, const void *key, size_t klen, int found,
                            const void *val, size_t vlen, int *err)
{
    int created;
    hmeta *m = hot_put(r, kg, key, klen, found ? val : "", found ? vlen : 0, &created, err);
    if (!m)
        return NULL;
    m->tomb = !found; /* known absent: the next read answers at once */
    m->in_pool = (uint8_t)found;
    if (m->prev)
        list_unlink(m);
    list_push(&r->clean, m, L_CLEAN);
    return m;
}

/* What the persists and the I/O threads finished since the last call:
 * captures now durable join the LRU, values read are written through,
 * then eviction runs. On the owner, at the start of every call. */
static void catch_up(remote *r)
{
    rshared *sh = r->sh;
    uint64_t d = atomic_load_explicit(&sh->durable, memory_order_acquire);
    size_t k = 0;
    while (k < r->ncapts && r->capts[k]->seq <= d) {
        capt *c = r->capts[k++];
        for (hmeta *m = c->head.next; m != &c->head; m = m->next)
            m->in_pool = !m->tomb;
        list_splice(&r->clean, &c->head, L_CLEAN);
        weir__free(c);
    }
    if (k) {
        memmove(r->capts, r->capts + k, (r->ncapts - k) * sizeof(*r->capts));
        r->ncapts -= k;
    }
    loaded *l = atomic_load_explicit(&sh->done, memory_order_relaxed)
                    ? atomic_exchange_explicit(&sh->done, NULL, memory_order_acquire)
                    : NULL;
    while (l) {
        loaded *n = l->next;
        const void *v;
        size_t vl;
        int err;
        if (!hot_get(r, l->kg, l->key, l->klen, &v, &vl)) /* nobody wrote it meanwhile */
            write_through(r, l->kg, l->key, l->klen, l->found, l->val, l->vlen, &err);
        weir__free(l->val);
        weir__free(l);
        l = n;
    }
    evict(r);
}

/* Mark m changed since the last capture. */
static void make_dirty(remote *r, hmeta *m)
{
    if (m->list == L_DIRTY)
        return;
    if (m->prev)
        list_unlink(m);
    list_push(&r->dirty, m, L_DIRTY);
}

static void touch(remote *r, hmeta *m)
{
    if (m->list == L_CLEAN && r->clean.next != m) {
        list_unlink(m);
        list_push(&r->clean, m, L_CLEAN);
    }
}

/* A hot hit, a known miss or a read the block cache answers (written
 * through), at once (0 / -ENOENT), or 1: the read must go to the pool. */
static int try_at_once(remote *r, int kg, const void *key, size_t klen, const void **val,
                       size_t *vlen)
{
    hmeta *m = hot_get(r, kg, key, klen, val, vlen);
    if (m) {
        touch(r, m);
        return m->tomb ? -ENOENT : 0;
    }
    if (hot_whole(r, kg))
        return -ENOENT;
    /* the pool's answer, if the blocks it needs are in memory: written
     * through as a read from the I/O threads would be */
    const uint8_t *p = NULL;
    size_t pl = 0;
    cblock *held;
    int e = lookup_mem(r->sh, kg, key, klen, &p, &pl, &held), err;
    if (e > 0)
        return 1;
    m = write_through(r, kg, key, klen, e == 0, p, pl, &err);
    if (held)
        block_put(r->sh, held);
    if (!m)
        return 1; /* ENOMEM: the I/O threads try */
    /* Eviction waits for the next call: the view stays valid until then. */
    return hot_get(r, kg, key, klen, val, vlen) && !m->tomb ? 0 : -ENOENT;
}

/* A synchronous cold read, on the blocking pool (rm_get waiting). */
typedef struct sync_read {
    rshared *sh;
    int kg;
    const void *key;
    size_t klen;
    uint8_t *val;
    size_t vlen;
} sync_read;

static intptr_t sync_job(void *arg)
{
    sync_read *q = arg;
    return cold_lookup(q->sh, q->kg, q->key, q->klen, &q->val, &q->vlen);
}

static int rm_get(weir_state_backend *b, int kg, const void *key, size_t klen, const void **val,
                  size_t *vlen)
{
    remote *r = (remote *)b;
    catch_up(r);
    int e = try_at_once(r, kg, key, klen, val, vlen);
    if (e <= 0)
        return e;
    sync_read q = {r->sh, kg, key, klen, NULL, 0};
    e = (int)weir__blocking_run_shielded(sync_job, &q);
    if (e && e != -ENOENT)
        return e;
    int err = 0;
    hmeta *m = write_through(r, kg, key, klen, e == 0, q.val, q.vlen, &err);
    weir__free(q.val);
    if (!m)
        return err;
    /* Eviction waits for the next call: the view stays valid until then. */
    return hot_get(r, kg, key, klen, val, vlen) && !e ? 0 : -ENOENT;
}

/* ---- asynchronous reads ------------------------------------------------------------------------
 */
static int start_threads(rshared *sh)
{
    if (sh->nthreads)
        return 0;
    sh->threads = weir__calloc((size_t)sh->want_threads, sizeof(pthread_t));
    if (!sh->threads)
        return -ENOMEM;
    for (int i = 0; i < sh->want_threads; i++) {
        int e = pthread_create(&sh->threads[i], NULL, io_main, sh);
        if (e) {
            if (!sh->nthreads)
                return -e;
            break;
        }
        sh->nthreads++;
    }
    return 0;
}

static rreq *req_new(int kg, const void *key, size_t klen, weir_state_get_cb cb, void *arg)
{
    rreq *q = weir__malloc(sizeof(*q) + klen);
    if (!q)
        return NULL;
    *q = (rreq){.kg = kg, .cb = cb, .arg = arg, .klen = klen};
    memcpy(q->key, key, klen);
    return q;
}

/* Queue the reads first..last (linked) for the I/O threads. */
static int enqueue(remote *r, rreq *first, rreq *last)
{
    rshared *sh = r->sh;
    int n = 1;
    for (rreq *q = first; q != last; q = q->next)
        n++;
    pthread_mutex_lock(&sh->qmu);
    int e = start_threads(sh);
    if (!e) {
        if (sh->tail)
            sh->tail->next = first;
        else
            sh->head = first;
        sh->tail = last;
        /* One thread woken per read (a broadcast woke every idle one, all
         * but one of them to find the queue empty again). */
        if (n >= sh->nthreads)
            pthread_cond_broadcast(&sh->cv);
        else
            while (n--)
                pthread_cond_signal(&sh->cv);
    }
    pthread_mutex_unlock(&sh->qmu);
    return e;
}

static int rm_get_async(weir_state_backend *b, int kg, const void *key, size_t klen,
                        weir_state_get_cb cb, void *arg)
{
    remote *r = (remote *)b;
    catch_up(r);
    const void *v;
    size_t vl;
    int e = try_at_once(r, kg, key, klen, &v, &vl);
    if (e <= 0)
        return e;
    rreq *q = req_new(kg, key, klen, cb, arg);
    if (!q)
        return -ENOMEM;
    if ((e = enqueue(r, q, q)) < 0) {
        weir__free(q);
        return e;
    }
    return -EINPROGRESS;
}

static int rm_get_now(weir_state_backend *b, int kg, const void *key, size_t klen, const void **val,
                      size_t *vlen)
{
    remote *r = (remote *)b;
    catch_up(r);
    int e = try_at_once(r, kg, key, klen, val, vlen);
    return e <= 0 ? e : -EWOULDBLOCK;
}

static int rm_get_batch(weir_state_backend *b, const weir_state_read *reads, size_t n,
                        weir_state_get_cb cb)
{
    remote *r = (remote *)b;
    catch_up(r);
    rreq *first = NULL, *last = NULL;
    uint8_t *later = weir__malloc(n ? n : 1); /* 1: read i goes to the pool */
    if (!later)
        return -ENOMEM;
    /* Every read decided and queued first (so a refusal starts none),
     * then the ones known here answered. */
    int e = 0;
    for (size_t i = 0; i < n && !e; i++) {
        const void *v;
        size_t vl;
        later[i] = try_at_once(r, reads[i].kg, reads[i].key, reads[i].klen, &v, &vl) > 0;
        if (!later[i])
            continue;
        rreq *q = req_new(reads[i].kg, reads[i].key, reads[i].klen, cb, reads[i].arg);
        if (!q) {
            e = -ENOMEM;
            break;
        }
        if (last)
            last->next = q;
        else
            first = q;
        last = q;
    }
    if (!e && first)
        e = enqueue(r, first, last);
    if (e < 0) {
        while (first) {
            rreq *nx = first->next;
            weir__free(first);
            first = nx;
        }
        weir__free(later);
        return e;
    }
    for (size_t i = 0; i < n; i++) {
        if (later[i])
            continue;
        const void *v;
        size_t vl;
        hmeta *m = hot_get(r, reads[i].kg, reads[i].key, reads[i].klen, &v, &vl);
        if (m && !m->tomb)
            cb(reads[i].arg, 0, v, vl);
        else
            cb(reads[i].arg, -ENOENT, NULL, 0);
    }
    weir__free(later);
    return 0;
}

/* ---- writes
 * -------------------------------------------------------------------------------------- */
static int rm_put(weir_state_backend *b, int kg, const void *key, size_t klen, const void *val,
                  size_t vlen)
{
    remote *r = (remote *)b;
    catch_up(r);
    int created, e = 0;
    hmeta *m = hot_put(r, kg, key, klen, val, vlen, &created, &e);
    if (!m)
        return e;
    if (created) /* unknown to the hot tier: the pool may hold it, unless it holds nothing */
        m->in_pool = !hot_whole(r, kg);
    m->tomb = 0;
    make_dirty(r, m);
    return 0;
}

static int rm_del(weir_state_backend *b, int kg, const void *key, size_t klen)
{
    remote *r = (remote *)b;
    catch_up(r);
    const void *v;
    size_t vl;
    hmeta *m = hot_get(r, kg, key, klen, &v, &vl);
    if (m && m->tomb)
        return -ENOENT;
    if (m && !m->in_pool && m->list != L_CAPT) {
        drop_entry(r, kg, m); /* never reached the pool: nothing to hide there */
        return 0;
    }
    if (!m && hot_whole(r, kg))
        return -ENOENT;
    /* A tombstone, until a run holds it. A key the hot tier does not hold
     * is not read first: the delete answers 0. */
    int created, e = 0;
    m = hot_put(r, kg, key, klen, "", 0, &created, &e);
    if (!m)
        return e;
    if (created)
        m->in_pool = 1;
    m->tomb = 1;
    make_dirty(r, m);
    return 0;
}

/* ---- scans: the hot tier merged with the runs
 * ---------------------------------------------------- */
typedef struct sent {
    const uint8_t *key, *val;
    size_t klen, vlen;
    int tomb;
} sent;

typedef struct svec {
    sent *v;
    size_t n, cap;
    int err;
} svec;

static void svec_add(svec *s, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen,
                     int tomb)
{
    if (s->err)
        return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        sent *v = weir__realloc(s->v, cap * sizeof(*v));
        if (!v) {
            s->err = -ENOMEM;
            return;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (sent){key, val, klen, vlen, tomb};
}

static int sent_cmp(const void *a, const void *b)
{
    const sent *x = a, *y = b;
    return weir__key_cmp(x->key, x->klen, y->key, y->klen);
}

/* The pool's entries of group kg with the prefix: each run's blocks that
 * meet the prefix, merged newest first (the newest run's entry of a key
 * wins). Blocks on the blocking pool. */
typedef struct pool_scan {
    rshared *sh;
    int kg;
    const uint8_t *prefix;
    size_t plen;
    uint8_t **blocks; /* fetched, owned */
    size_t nblocks, bcap;
    svec out;       /* sorted, one entry per key */
    runref **chain; /* the chain it read (referenced): what it is valid for */
    size_t nchain;
    size_t bytes; /* of the blocks */
} pool_scan;

static int has_prefix(const uint8_t *k, size_t kl, const uint8_t *p, size_t pl)
{
    return kl >= pl && (!pl || memcmp(k, p, pl) == 0);
}

/* The smallest key above every key with the prefix, or none (all 0xFF). */
static int prefix_end(const uint8_t *p, size_t pl, uint8_t *out, size_t *ol)
{
    size_t n = pl;
    while (n && p[n - 1] == 0xFF)
        n--;
    if (!n)
        return 0;
    memcpy(out, p, n);
    out[n - 1]++;
    *ol = n;
    return 1;
}

/* One pass of pool_scan_job: -ENOENT when a run was not in the pool. */
static int pool_scan_once(pool_scan *ps)
{
    runref **v;
    size_t n;
    int e = chain_copy(ps->sh, ps->kg, &v, &n);
    if (!e) {
        ps->chain = v;
        ps->nchain = n;
    }
    uint8_t *hi = e ? NULL : weir__malloc(ps->plen ? ps->plen : 1);
    size_t hl = 0;
    int bounded = hi && prefix_end(ps->prefix, ps->plen, hi, &hl);
    if (!e && !hi)
        e = -ENOMEM;
    svec all = {0};
    for (size_t i = 0; !e && i < n; i++) {
        runref *r = v[i];
        /* the run's range [first, last] against [prefix, hi) */
        if (weir__key_cmp(r->last, r->llen, ps->prefix, ps->plen) < 0 ||
            (bounded && weir__key_cmp(r->first, r->flen, hi, hl) >= 0))
            continue;
        weir__run_meta *m;
        if ((e = meta_of(ps->sh, r, ps->kg, &m)) != 0)
            break;
        uint32_t lo_b, hi_b;
        weir__run_meta_range(m, ps->prefix, ps->plen, bounded ? hi : NULL, hl, &lo_b, &hi_b);
        for (uint32_t bi = lo_b; !e && bi < hi_b; bi++) {
            uint64_t off;
            uint32_t len;
            weir__run_meta_nth(m, bi, &off, &len);
            uint8_t *buf;
            if ((e = fetch(ps->sh, r->name, off, len, &buf)) != 0)
                break;
            atomic_fetch_add_explicit(&ps->sh->blocks_read, 1, memory_order_relaxed);
            ps->bytes += len;
            if (ps->nblocks == ps->bcap) {
                size_t cap = ps->bcap ? ps->bcap * 2 : 16;
                uint8_t **nb = weir__realloc(ps->blocks, cap * sizeof(*nb));
                if (!nb) {
                    weir__free(buf);
                    e = -ENOMEM;
                    break;
                }
                ps->blocks = nb;
                ps->bcap = cap;
            }
            ps->blocks[ps->nblocks++] = buf;
            weir__run_block b;
            if ((e = weir__run_block_open(&b, buf, len, NULL, 0)) != 0)
                break;
            const uint8_t *k, *val;
            size_t kl, vl;
            int tomb;
            while (weir__run_block_next(&b, &k, &kl, &val, &vl, &tomb))
                if (has_prefix(k, kl, ps->prefix, ps->plen))
                    svec_add(&all, k, kl, val, vl, (int)i << 1 | tomb); /* run age, tomb */
        }
    }
    weir__free(hi);
    if (!e)
        e = all.err;
    if (!e && all.n) {
        /* Stable by key then by age: a sort of (key, age). */
        qsort(all.v, all.n, sizeof(sent), sent_cmp);
        /* qsort is not stable: among equal keys keep the newest (lowest age). */
        size_t i = 0;
        while (i < all.n && !ps->out.err) {
            size_t j = i, best = i;
            while (j < all.n && sent_cmp(&all.v[i], &all.v[j]) == 0) {
                if ((all.v[j].tomb >> 1) < (all.v[best].tomb >> 1))
                    best = j;
                j++;
            }
            if (!(all.v[best].tomb & 1))
                svec_add(&ps->out, all.v[best].key, all.v[best].klen, all.v[best].val,
                         all.v[best].vlen, 0);
            i = j;
        }
        e = ps->out.err;
    }
    weir__free(all.v);
    return e;
}

static void pool_scan_reset(pool_scan *ps)
{
    chain_copy_free(ps->chain, ps->nchain);
    ps->chain = NULL;
    ps->nchain = 0;
    weir__free(ps->out.v);
    ps->out = (svec){0};
    for (size_t k = 0; k < ps->nblocks; k++)
        weir__free(ps->blocks[k]);
    weir__free(ps->blocks);
    ps->blocks = NULL;
    ps->nblocks = ps->bcap = 0;
    ps->bytes = 0;
}

/* The pool part of a scan (on the blocking pool or an I/O thread). A run
 * that vanished under it (merged away by a persist, then deleted) sends it
 * round again with the chain as it is now, as cold_lookup does; after a
 * few rounds the pool has lost a run the chain needs: -EIO, never a scan
 * without the pool. */
static intptr_t pool_scan_job(void *arg)
{
    pool_scan *ps = arg;
    int e = -ENOENT;
    for (int round = 0; round < 4 && e == -ENOENT; round++) {
        pool_scan_reset(ps);
        e = pool_scan_once(ps);
    }
    return e == -ENOENT ? -EIO : e;
}

/* ---- scans prefetched ----------------------------------------------------------------------
 * scan_prefetch hands a scan's pool part to the I/O threads; what they
 * fetch comes back to the owner (sh->scanned) and serves the scans of that
 * prefix (rm_scan) while the group's chain is still the one it read: a
 * run prepended or merged since may hold entries that have left the hot
 * tier, so a changed chain makes it stale and the scan reads again. (The
 * hot tier's entries win the merge, so writes since the fetch are seen.)
 * A synchronous scan's pool part is kept the same way. The owner's cache
 * is a hash table by (group, prefix) with an age list, the least recently
 * used dropped past SCAN_CACHE_MAX entries or SCAN_CACHE_BYTES of fetched
 * blocks (which the hot tier's budget does not count). */
typedef struct scanned {
    struct scanned *next;          /* sh->scanned's stack, then the bucket's chain */
    struct scanned *older, *newer; /* the cache's age list */
    uint32_t bucket;
    int kg;
    pool_scan ps;
    uint8_t prefix[];
} scanned;

#define SCAN_CACHE_MAX   16384
#define SCAN_CACHE_BYTES ((size_t)128 << 20)
#define SCAN_BUCKETS     1024u

static void scanned_free(scanned *x)
{
    pool_scan_reset(&x->ps);
    weir__free(x);
}

/* On an I/O thread: the pool part of a scan of q's prefix, handed to the
 * owner, then the answer (its error is advisory: the scan reads again). */
static void scan_fetch(rshared *sh, rreq *q)
{
    scanned *x = weir__malloc(sizeof(*x) + q->klen);
    int e = -ENOMEM;
    if (x) {
        *x = (scanned){.kg = q->kg};
        memcpy(x->prefix, q->key, q->klen);
        x->ps = (pool_scan){.sh = sh, .kg = q->kg, .prefix = x->prefix, .plen = q->klen};
        if ((e = (int)pool_scan_job(&x->ps)) != 0) {
            scanned_free(x);
        } else {
            atomic_fetch_add_explicit(&sh->scans_fetched, 1, memory_order_relaxed);
            x->next = atomic_load_explicit(&sh->scanned, memory_order_relaxed);
            while (!atomic_compare_exchange_weak_explicit(
                &sh->scanned, &x->next, x, memory_order_release, memory_order_relaxed))
                ;
        }
    }
    q->cb(q->arg, e, NULL, 0);
}

static uint32_t scan_bucket(int kg, const void *prefix, size_t plen)
{
    return (uint32_t)(XXH64(prefix, plen, (uint64_t)kg) % SCAN_BUCKETS);
}

/* Take x out of the cache (it is the caller's then). */
static void cache_unlink(remote *r, scanned *x)
{
    scanned **pp = &r->buckets[x->bucket];
    while (*pp != x)
        pp = &(*pp)->next;
    *pp = x->next;
    if (x->older)
        x->older->newer = x->newer;
    else
        r->oldest = x->newer;
    if (x->newer)
        x->newer->older = x->older;
    else
        r->newest = x->older;
    r->ncache--;
    r->cache_bytes -= x->ps.bytes;
}

static int same_scan(const scanned *x, int kg, const void *prefix, size_t plen)
{
    return x->kg == kg && x->ps.plen == plen && (!plen || memcmp(x->prefix, prefix, plen) == 0);
}

/* Put x in the cache as its newest entry (it replaces one of the same
 * scan), the oldest dropped past the bounds. The table exists. */
static void cache_insert(remote *r, scanned *x)
{
    x->bucket = scan_bucket(x->kg, x->prefix, x->ps.plen);
    for (scanned *o = r->buckets[x->bucket], *n; o; o = n) {
        n = o->next;
        if (same_scan(o, x->kg, x->prefix, x->ps.plen)) {
            cache_unlink(r, o);
            scanned_free(o);
        }
    }
    x->next = r->buckets[x->bucket];
    r->buckets[x->bucket] = x;
    x->older = r->newest;
    x->newer = NULL;
    if (r->newest)
        r->newest->newer = x;
    else
        r->oldest = x;
    r->newest = x;
    r->ncache++;
    r->cache_bytes += x->ps.bytes;
    while (r->oldest && (r->ncache > SCAN_CACHE_MAX || r->cache_bytes > SCAN_CACHE_BYTES)) {
        scanned *o = r->oldest;
        cache_unlink(r, o);
        scanned_free(o);
    }
}

/* x, in the cache, becomes its newest entry. */
static void cache_touch(remote *r, scanned *x)
{
    if (r->newest == x)
        return;
    if (x->older)
        x->older->newer = x->newer;
    else
        r->oldest = x->newer;
    x->newer->older = x->older;
    x->older = r->newest;
    x->newer = NULL;
    r->newest->newer = x;
    r->newest = x;
}

static int cache_table(remote *r)
{
    return r->buckets || (r->buckets = weir__calloc(SCAN_BUCKETS, sizeof(*r->buckets))) != NULL;
}

/* On the owner: the scans fetched since the last call join its cache. */
static void scans_take(remote *r)
{
    rshared *sh = r->sh;
    if (r->scanning)
        return; /* they wait on the stack: inserting could free what a scan walks */
    scanned *x = atomic_load_explicit(&sh->scanned, memory_order_relaxed)
                     ? atomic_exchange_explicit(&sh->scanned, NULL, memory_order_acquire)
                     : NULL;
    int table = !x || cache_table(r);
    while (x) {
        scanned *n = x->next;
        if (table)
            cache_insert(r, x);
        else
            scanned_free(x); /* no table: served by no one, read again */
        x = n;
    }
}

static void cache_free(remote *r)
{
    while (r->oldest) {
        scanned *o = r->oldest;
        cache_unlink(r, o);
        scanned_free(o);
    }
    weir__free(r->buckets);
    r->buckets = NULL;
    for (scanned *x = atomic_exchange(&r->sh->scanned, NULL), *n; x; x = n) {
        n = x->next;
        scanned_free(x);
    }
}

/* Is group kg's chain still v[0..n)? */
static int chain_is(rshared *sh, int kg, runref *const *v, size_t n)
{
    pthread_mutex_lock(&sh->mu);
    const chain *c = &sh->chains[kg - sh->first_kg];
    int same = c->n == n;
    for (size_t i = 0; same && i < n; i++)
        same = c->v[i] == v[i];
    pthread_mutex_unlock(&sh->mu);
    return same;
}

/* The cache's entry for (kg, prefix) that is still valid, or NULL. A
 * stale one met is dropped. */
static scanned *scans_find(remote *r, int kg, const void *prefix, size_t plen)
{
    if (!r->ncache)
        return NULL;
    for (scanned *x = r->buckets[scan_bucket(kg, prefix, plen)], *n; x; x = n) {
        n = x->next;
        if (!same_scan(x, kg, prefix, plen))
            continue;
        if (chain_is(r->sh, kg, x->ps.chain, x->ps.nchain))
            return x;
        if (r->scanning)
            continue; /* a scan walking may hold it */
        cache_unlink(r, x);
        scanned_free(x);
    }
    return NULL;
}

static int rm_scan_prefetch(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                            weir_state_get_cb cb, void *arg)
{
    remote *r = (remote *)b;
    catch_up(r);
    scans_take(r);
    if (hot_whole(r, kg) || scans_find(r, kg, prefix, plen))
        return 0; /* the scan would not wait */
    rreq *q = req_new(kg, prefix, plen, cb, arg);
    if (!q)
        return -ENOMEM;
    q->scan = 1;
    int e = enqueue(r, q, q);
    if (e < 0) {
        weir__free(q);
        return e;
    }
    return -EINPROGRESS;
}

typedef struct hot_scan {
    svec v;
} hot_scan;

static int hot_scan_fn(void *arg, const void *key, size_t klen, const void *val, size_t vlen,
                       void *meta)
{
    hot_scan *h = arg;
    svec_add(&h->v, key, klen, val, vlen, ((hmeta *)meta)->tomb);
    return h->v.err;
}

static int rm_scan(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                   weir_state_scan_fn fn, void *arg)
{
    remote *r = (remote *)b;
    catch_up(r);
    scans_take(r);
    hot_scan h = {{0}};
    int e = weir__mem_scan_meta(r->hot, kg, prefix, plen, hot_scan_fn, &h);
    pool_scan ps = {.sh = r->sh, .kg = kg, .prefix = prefix, .plen = plen};
    /* The pool part fetched for this prefix (ahead, or by an earlier
     * scan), if it is still valid. */
    scanned *x = e ? NULL : scans_find(r, kg, prefix, plen);
    if (x) {
        cache_touch(r, x);
        ps.out = x->ps.out;
        r->scans_served++;
    }
    if (!x && !e && !hot_whole(r, kg))
        e = (int)weir__blocking_run_shielded(pool_scan_job, &ps);
    /* Merge: the hot tier's entry of a key wins over the pool's. */
    size_t i = 0, j = 0;
    r->scanning++;
    while (!e && (i < h.v.n || j < ps.out.n)) {
        int c = i == h.v.n ? 1 : j == ps.out.n ? -1 : sent_cmp(&h.v.v[i], &ps.out.v[j]);
        const sent *s = c <= 0 ? &h.v.v[i] : &ps.out.v[j];
        if (c <= 0)
            i++;
        if (c >= 0)
            j++;
        if (!s->tomb)
            e = fn(arg, s->key, s->klen, s->val, s->vlen);
    }
    r->scanning--;
    if (!e)
        e = h.v.err;
    weir__free(h.v.v);
    if (!x && !e && ps.chain && !r->scanning && cache_table(r) &&
        (x = weir__malloc(sizeof(*x) + plen))) {
        /* What this scan read serves the next ones of its prefix too. */
        *x = (scanned){.kg = kg, .ps = ps};
        if (plen)
            memcpy(x->prefix, prefix, plen);
        x->ps.prefix = x->prefix;
        cache_insert(r, x);
    } else if (!x) {
        pool_scan_reset(&ps);
    }
    return e;
}

static size_t rm_entries(weir_state_backend *b, int kg)
{
    remote *r = (remote *)b;
    size_t n = 0;
    rshared *sh = r->sh;
    pthread_mutex_lock(&sh->mu);
    chain *c = &sh->chains[kg - sh->first_kg];
    for (size_t i = 0; i < c->n; i++)
        n += (size_t)c->v[i]->entries;
    pthread_mutex_unlock(&sh->mu);
    return n + weir_state_entries(r->hot, kg);
}

/* ---- snapshots ---------------------------------------------------------------------------------
 */
/* What a remote snapshot carries to its persist. */
typedef struct rsnap {
    rshared *sh;
    delta *d;
    int ngroups, first_kg, end_kg;
    weir_state_entry *extra; /* the timers, in the handle */
    size_t nextra;
    uint8_t *xbytes;
} rsnap;

static int dent_cmp(const void *a, const void *b)
{
    const dent *x = a, *y = b;
    if (x->kg != y->kg)
        return x->kg < y->kg ? -1 : 1;
    return weir__key_cmp(x->key, x->klen, y->key, y->klen);
}

static int hmeta_cmp(const void *a, const void *b)
{
    const hmeta *x = *(hmeta *const *)a, *y = *(hmeta *const *)b;
    if (x->kg != y->kg)
        return x->kg < y->kg ? -1 : 1;
    const void *kx, *ky;
    size_t lx, ly;
    weir__mem_meta_key(x, &kx, &lx);
    weir__mem_meta_key(y, &ky, &ly);
    return weir__key_cmp(kx, lx, ky, ly);
}

static void rsnap_drop(weir_state_snapshot *s)
{
    rsnap *x = s->ext;
    if (!x)
        return;
    delta_unref(x->d);
    shared_unref(x->sh);
    weir__free(x->extra);
    weir__free(x->xbytes);
    weir__free(x);
    s->ext = NULL;
}

static int rsnap_prepare(weir_state_snapshot *s);

/* The delta: every dirty entry, sorted and copied; the entries move to a
 * captured list of this capture's sequence number. */
static int rm_capture(weir_state_backend *b, uint64_t id, const weir_state_entry *extra, size_t nx,
                      weir_state_snapshot **out)
{
    remote *r = (remote *)b;
    catch_up(r);
    size_t n = 0, bytes = 0, xb = 0;
    for (hmeta *m = r->dirty.next; m != &r->dirty; m = m->next) {
        n++;
        bytes += m->bytes - ENTRY_COST;
    }
    for (size_t i = 0; i < nx; i++)
        xb += extra[i].klen + extra[i].vlen;
    weir_state_snapshot *s = weir__calloc(1, sizeof(*s));
    rsnap *x = weir__calloc(1, sizeof(*x));
    delta *d = weir__calloc(1, sizeof(*d));
    hmeta **ms = weir__malloc((n ? n : 1) * sizeof(*ms));
    capt *c = weir__malloc(sizeof(*c));
    if (d) {
        d->v = weir__malloc((n ? n : 1) * sizeof(dent));
        d->bytes = weir__malloc(bytes ? bytes : 1);
    }
    if (x) {
        x->extra = weir__malloc((nx ? nx : 1) * sizeof(*x->extra));
        x->xbytes = weir__malloc(xb ? xb : 1);
    }
    if (!s || !x || !d || !ms || !c || !d->v || !d->bytes || !x->extra || !x->xbytes) {
        weir__free(s);
        if (x) {
            weir__free(x->extra);
            weir__free(x->xbytes);
        }
        weir__free(x);
        if (d) {
            weir__free(d->v);
            weir__free(d->bytes);
        }
        weir__free(d);
        weir__free(ms);
        weir__free(c);
        return -ENOMEM;
    }
    size_t k = 0;
    for (hmeta *m = r->dirty.next; m != &r->dirty; m = m->next)
        ms[k++] = m;
    qsort(ms, n, sizeof(*ms), hmeta_cmp);
    uint8_t *p = d->bytes;
    for (size_t i = 0; i < n; i++) {
        const void *key, *val;
        size_t kl, vl;
        weir__mem_meta_key(ms[i], &key, &kl);
        weir_state_get(r->hot, ms[i]->kg, key, kl, &val, &vl);
        dent *e = &d->v[i];
        *e = (dent){.kg = ms[i]->kg,
                    .tomb = ms[i]->tomb,
                    .klen = (uint32_t)kl,
                    .vlen = (uint32_t)(ms[i]->tomb ? 0 : vl)};
        memcpy(p, key, kl);
        e->key = p;
        p += kl;
        if (e->vlen)
            memcpy(p, val, e->vlen);
        e->val = p;
        p += e->vlen;
    }
    weir__free(ms);
    d->n = n;
    d->seq = ++r->seq;
    atomic_init(&d->refs, 2); /* the snapshot's and the backend's (the next base) */
    d->base = r->last;        /* the last one's backend reference moves here */
    r->last = d;
    c->seq = d->seq;
    list_init(&c->head);
    list_splice(&c->head, &r->dirty, L_CAPT);
    for (hmeta *m = c->head.next; m != &c->head; m = m->next) {
        m->seq = d->seq;
        /* The run will hold its put (this capture's, or a later one's
         * that merges it in): a delete from now on needs a tombstone. */
        if (!m->tomb)
            m->in_pool = 1;
    }
    if (r->ncapts == r->capts_cap) {
        size_t cap = r->capts_cap ? r->capts_cap * 2 : 4;
        capt **v = weir__realloc(r->capts, cap * sizeof(*v));
        if (!v) { /* keep the entries dirty: the next capture takes them again */
            list_splice(&r->dirty, &c->head, L_DIRTY);
            weir__free(c);
            c = NULL;
        } else {
            r->capts = v;
            r->capts_cap = cap;
        }
    }
    if (c)
        r->capts[r->ncapts++] = c;
    uint8_t *xp = x->xbytes;
    for (size_t i = 0; i < nx; i++) {
        x->extra[i] = extra[i];
        memcpy(xp, extra[i].key, extra[i].klen);
        x->extra[i].key = xp;
        xp += extra[i].klen;
        if (extra[i].vlen)
            memcpy(xp, extra[i].val, extra[i].vlen);
        x->extra[i].val = xp;
        xp += extra[i].vlen;
    }
    x->nextra = nx;
    x->sh = r->sh;
    atomic_fetch_add_explicit(&r->sh->refs, 1, memory_order_relaxed);
    x->d = d;
    x->ngroups = b->ngroups;
    x->first_kg = b->first_kg;
    x->end_kg = b->end_kg;
    s->id = id;
    s->ext = x;
    s->prepare = rsnap_prepare;
    s->drop = rsnap_drop;
    *out = s;
    return 0;
}

/* The chain entry of a run just written: group g of blob name (g's
 * first and last keys move into it). NULL on ENOMEM. */
static runref *runref_of(const char *name, weir__run_group *g, uint64_t born)
{
    runref *rr = weir__calloc(1, sizeof(*rr));
    if (!rr || !(rr->name = weir__malloc(strlen(name) + 1))) {
        weir__free(rr);
        return NULL;
    }
    strcpy(rr->name, name);
    atomic_init(&rr->refs, 1);
    rr->meta_off = g->meta_off;
    rr->meta_len = g->meta_len;
    rr->entries = g->entries;
    rr->born = born;
    rr->first = g->first;
    rr->flen = g->first_len;
    rr->last = g->last;
    rr->llen = g->last_len;
    g->first = g->last = NULL;
    return rr;
}

/* ---- compaction: two runs of a group merged into one -------------------------------------------
 */
/* Every entry of group kg in run r: its blocks, fetched with one ranged
 * get (a group's blocks lie together, before its meta). *buf holds the
 * bytes the entries point into. */
static int read_group(rshared *sh, runref *r, int kg, uint8_t **buf, svec *out)
{
    weir__run_meta *m;
    int e = meta_of(sh, r, kg, &m);
    uint32_t nb = e ? 0 : weir__run_meta_nblocks(m);
    *buf = NULL;
    if (e || !nb)
        return e;
    uint64_t lo, last_off;
    uint32_t l0, last_len;
    weir__run_meta_nth(m, 0, &lo, &l0);
    weir__run_meta_nth(m, nb - 1, &last_off, &last_len);
    if (last_off < lo || last_off + last_len - lo > ((uint64_t)1 << 32))
        return -EBADMSG;
    uint32_t span = (uint32_t)(last_off + last_len - lo);
    if ((e = fetch(sh, r->name, lo, span, buf)) != 0)
        return e;
    for (uint32_t i = 0; !e && i < nb; i++) {
        uint64_t off;
        uint32_t len;
        weir__run_meta_nth(m, i, &off, &len);
        if (off < lo || off - lo + len > span) {
            e = -EBADMSG;
            break;
        }
        weir__run_block b;
        if ((e = weir__run_block_open(&b, *buf + (off - lo), len, NULL, 0)) != 0)
            break;
        const uint8_t *k, *v;
        size_t kl, vl;
        int tomb;
        while (weir__run_block_next(&b, &k, &kl, &v, &vl, &tomb))
            svec_add(out, k, kl, v, vl, tomb);
        e = out->err;
    }
    return e;
}

/* Merge the runs at chain positions i and i + 1 of group kg (newer, older)
 * into one run of the group; the oldest run's tombstones go (nothing
 * older is left for them to hide). */
static int merge_pair(rshared *sh, int kg, size_t i, uint64_t seq)
{
    runref **v;
    size_t n;
    int e = chain_copy(sh, kg, &v, &n);
    if (e)
        return e;
    if (i + 1 >= n) {
        chain_copy_free(v, n);
        return 0;
    }
    int oldest = i + 2 == n;
    svec a = {0}, b = {0};
    uint8_t *ab = NULL, *bb = NULL;
    if (!(e = read_group(sh, v[i], kg, &ab, &a)))
        e = read_group(sh, v[i + 1], kg, &bb, &b);
    weir__run_writer *w = e ? NULL : weir__run_writer_new();
    if (!e && !w)
        e = -ENOMEM;
    size_t x = 0, y = 0;
    while (!e && (x < a.n || y < b.n)) {
        int c = x == a.n ? 1 : y == b.n ? -1 : sent_cmp(&a.v[x], &b.v[y]);
        const sent *s = c <= 0 ? &a.v[x] : &b.v[y]; /* the newer run wins a tie */
        if (c <= 0)
            x++;
        if (c >= 0)
            y++;
        if (!(s->tomb && oldest))
            e = weir__run_add(w, kg, s->key, s->klen, s->val, s->vlen, s->tomb);
    }
    uint8_t *buf = NULL;
    size_t len = 0, ng = 0;
    weir__run_group *gs = NULL;
    if (!e)
        e = weir__run_finish(w, &buf, &len, &gs, &ng);
    weir__run_writer_free(w);
    weir__free(a.v);
    weir__free(b.v);
    weir__free(ab);
    weir__free(bb);
    char name[112];
    uint64_t k = atomic_fetch_add(&sh->merges, 1) + 1;
    snprintf(name, sizeof(name), "runs/%016" PRIx64 "-%" PRIu64 "-m%" PRIu64, sh->nonce, seq, k);
    if (!e && ng)
        e = weir__storage_put_now(sh->pool, name, buf, len);
    if (!e && ng)
        atomic_fetch_add_explicit(&sh->run_bytes, len, memory_order_relaxed);
    runref *rr = NULL;
    if (!e && ng) {
        if (!(rr = runref_of(name, &gs[0], seq)))
            e = -ENOMEM;
        else /* its meta only: its blocks, old data rewritten, would push out the newest */
            run_seed(sh, rr, kg, buf, len, 0);
    }
    weir__free(buf);
    weir__run_groups_free(gs, ng);
    if (!e) {
        /* Only persists change chains, one at a time: the pair is still
         * where it was. The merged run takes its place (none at all when
         * everything merged away). */
        pthread_mutex_lock(&sh->mu);
        chain *c = &sh->chains[kg - sh->first_kg];
        if (i + 1 < c->n && c->v[i] == v[i] && c->v[i + 1] == v[i + 1]) {
            runref_unref(c->v[i]);
            runref_unref(c->v[i + 1]);
            if (rr) {
                c->v[i] = rr;
                memmove(c->v + i + 1, c->v + i + 2, (c->n - i - 2) * sizeof(*c->v));
                c->n--;
            } else {
                memmove(c->v + i, c->v + i + 2, (c->n - i - 2) * sizeof(*c->v));
                c->n -= 2;
            }
            rr = NULL;
        }
        pthread_mutex_unlock(&sh->mu);
    }
    runref_unref(rr);
    chain_copy_free(v, n);
    return e;
}

/* While group kg's chain is longer than CHAIN_MAX, merge the adjacent
 * pair with the fewest entries: small recent runs merge often, the large
 * old one rarely, so the bytes rewritten per checkpoint stay near the
 * delta's (a size-tiered policy). A run this persist wrote is never
 * merged in it: only a checkpoint's handle makes a run known to the
 * deletion of unneeded runs (weir__remote_gc), so a run merged away before
 * any handle named it would stay in the pool for ever. */
static int compact(rshared *sh, int kg, uint64_t seq)
{
    for (;;) {
        pthread_mutex_lock(&sh->mu);
        chain *c = &sh->chains[kg - sh->first_kg];
        size_t best = 0, n = c->n;
        uint64_t least = UINT64_MAX;
        for (size_t i = 0; i + 1 < n; i++) {
            if (c->v[i]->born == seq || c->v[i + 1]->born == seq)
                continue;
            uint64_t t = c->v[i]->entries + c->v[i + 1]->entries;
            if (t < least) {
                least = t;
                best = i;
            }
        }
        pthread_mutex_unlock(&sh->mu);
        if (n <= CHAIN_MAX || least == UINT64_MAX)
            return 0;
        int e = merge_pair(sh, kg, best, seq);
        if (e)
            return e;
    }
}

/* Write the delta (with every base not written) as a run, prepend it to
 * the chains, publish it durable, then encode the handle into s. On the
 * blocking pool, persists of one backend in capture order. */
static int rsnap_prepare(weir_state_snapshot *s)
{
    rsnap *x = s->ext;
    rshared *sh = x->sh;
    delta *d = x->d;
    /* The deltas this run must hold: d and each older one not written. */
    size_t nd = 0;
    for (delta *q = d; q && (q == d || !atomic_load(&q->written)); q = q->base)
        nd++;
    delta **ds = weir__malloc(nd * sizeof(*ds));
    size_t *pos = weir__calloc(nd, sizeof(*pos));
    weir__run_writer *w = weir__run_writer_new();
    int e = ds && pos && w ? 0 : -ENOMEM;
    size_t k = 0;
    for (delta *q = d; !e && q && (q == d || !atomic_load(&q->written)); q = q->base)
        ds[k++] = q;
    /* A merge of nd sorted deltas, the newest's entry of a key winning. */
    while (!e) {
        int best = -1;
        for (size_t i = 0; i < nd; i++) {
            if (pos[i] == ds[i]->n)
                continue;
            if (best < 0 || dent_cmp(&ds[i]->v[pos[i]], &ds[best]->v[pos[best]]) < 0)
                best = (int)i;
        }
        if (best < 0)
            break;
        const dent *en = &ds[best]->v[pos[best]];
        for (size_t i = 0; i < nd; i++) /* older entries of the same key */
            if (pos[i] < ds[i]->n && (int)i != best && dent_cmp(&ds[i]->v[pos[i]], en) == 0)
                pos[i]++;
        pos[best]++;
        e = weir__run_add(w, en->kg, en->key, en->klen, en->val, en->vlen, en->tomb);
    }
    weir__free(ds);
    weir__free(pos);
    uint8_t *buf = NULL;
    size_t len = 0, ng = 0;
    weir__run_group *gs = NULL;
    if (!e)
        e = weir__run_finish(w, &buf, &len, &gs, &ng);
    weir__run_writer_free(w);
    char name[96];
    snprintf(name, sizeof(name), "runs/%016" PRIx64 "-%" PRIu64 "-c%" PRIu64, sh->nonce, d->seq,
             s->id);
    if (!e && ng)
        e = weir__storage_put_now(sh->pool, name, buf, len);
    if (!e && ng)
        atomic_fetch_add_explicit(&sh->run_bytes, len, memory_order_relaxed);
    pthread_mutex_lock(&sh->mu);
    for (size_t i = 0; !e && i < ng; i++) {
        runref *rr = runref_of(name, &gs[i], d->seq);
        if (!rr) {
            e = -ENOMEM;
            break;
        }
        run_seed(sh, rr, gs[i].kg, buf, len, 1);
        if (gs[i].kg < sh->first_kg || gs[i].kg >= sh->end_kg ||
            (e = chain_push_front(&sh->chains[gs[i].kg - sh->first_kg], rr)) != 0)
            runref_unref(rr);
        /* (a failure here leaves the chains of the groups before it with
         * the run: it is in the pool, so they stay right) */
    }
    pthread_mutex_unlock(&sh->mu);
    weir__free(buf);
    for (size_t i = 0; !e && i < ng; i++)
        if (gs[i].kg >= sh->first_kg && gs[i].kg < sh->end_kg)
            e = compact(sh, gs[i].kg, d->seq);
    weir__run_groups_free(gs, ng);
    if (e)
        return e;
    for (delta *q = d; q && !atomic_load(&q->written); q = q->base)
        atomic_store(&q->written, 1);
    /* The older deltas are in this run: let them go (only this persist
     * reads d->base; the persists of a backend run one after another). */
    delta *older = d->base;
    d->base = NULL;
    delta_unref(older);
    /* Publish: the owner's next call moves the captured entries to the LRU. */
    uint64_t cur = atomic_load(&sh->durable);
    while (cur < d->seq && !atomic_compare_exchange_weak(&sh->durable, &cur, d->seq))
        ;
    /* The handle, from the chains as they are now (only persists change them):
     * [magic][u32 version][u32 ngroups][u32 first][u32 end]
     * [u64 id], then per group of the range [u32 chain length] and per run
     * (newest first) [u16 name length][name][u64 meta offset][u32 meta
     * length][u64 entries][u32 first length][first][u32 last length][last],
     * then [u32 extras] and per extra [u32 kg][u32 klen][key][u32 vlen][val],
     * then the XXH64 of all before it. */
    weir__buf hb = {0};
    weir__buf_put(&hb, HANDLE_MAGIC, 8);
    weir__buf_put_be32(&hb, HANDLE_VERSION);
    weir__buf_put_be32(&hb, (uint32_t)x->ngroups);
    weir__buf_put_be32(&hb, (uint32_t)x->first_kg);
    weir__buf_put_be32(&hb, (uint32_t)x->end_kg);
    weir__buf_put_be64(&hb, s->id);
    pthread_mutex_lock(&sh->mu);
    for (int kg = x->first_kg; kg < x->end_kg; kg++) {
        chain *c = &sh->chains[kg - sh->first_kg];
        weir__buf_put_be32(&hb, (uint32_t)c->n);
        for (size_t i = 0; i < c->n; i++) {
            runref *rr = c->v[i];
            size_t nl = strlen(rr->name);
            weir__buf_put_be16(&hb, (uint16_t)nl);
            weir__buf_put(&hb, rr->name, nl);
            weir__buf_put_be64(&hb, rr->meta_off);
            weir__buf_put_be32(&hb, rr->meta_len);
            weir__buf_put_be64(&hb, rr->entries);
            weir__buf_put_be32(&hb, rr->flen);
            weir__buf_put(&hb, rr->first, rr->flen);
            weir__buf_put_be32(&hb, rr->llen);
            weir__buf_put(&hb, rr->last, rr->llen);
        }
    }
    pthread_mutex_unlock(&sh->mu);
    weir__buf_put_be32(&hb, (uint32_t)x->nextra);
    for (size_t i = 0; i < x->nextra; i++) {
        weir__buf_put_be32(&hb, (uint32_t)x->extra[i].kg);
        weir__buf_put_be32(&hb, (uint32_t)x->extra[i].klen);
        weir__buf_put(&hb, x->extra[i].key, x->extra[i].klen);
        weir__buf_put_be32(&hb, (uint32_t)x->extra[i].vlen);
        weir__buf_put(&hb, x->extra[i].val, x->extra[i].vlen);
    }
    weir__buf_put_be64(&hb, hb.err ? 0 : XXH64(hb.p, hb.len, 0));
    if (hb.err) {
        weir__free(hb.p);
        return hb.err;
    }
    weir__free(s->buf);
    s->buf = hb.p;
    s->len = hb.len;
    s->cap = hb.cap;
    s->sealed = 1;
    rsnap_drop(s); /* done with the delta: free it now, on this thread */
    return 0;
}

/* ---- restore: the handle only
 * --------------------------------------------------------------------- */
/* 0: img is a whole handle (its magic, room for its header, its
 * checksum); 1: no handle at all; 2: a handle whose checksum fails. */
static int handle_sealed(const uint8_t *img, size_t len)
{
    if (len < 8 + 20 + 8 || memcmp(img, HANDLE_MAGIC, 8) != 0)
        return 1;
    return XXH64(img, len - 8, 0) != weir__get_be64(img + len - 8) ? 2 : 0;
}

/* One run of a group's chain in a handle, its fields checked. */
typedef struct hrun {
    const uint8_t *name, *first, *last;
    uint32_t nl, mlen, fl, ll;
    uint64_t moff, entries;
} hrun;

/* The next run's fields; r->bad set when they are truncated (1) or bad (2). */
static void handle_next_run(weir__rd *r, hrun *h)
{
    h->nl = weir__rd_be16(r);
    h->name = weir__rd_take(r, h->nl);
    h->moff = weir__rd_be64(r);
    h->mlen = weir__rd_be32(r);
    h->entries = weir__rd_be64(r);
    h->fl = weir__rd_be32(r);
    h->first = weir__rd_take(r, h->fl);
    h->ll = weir__rd_be32(r);
    h->last = weir__rd_take(r, h->ll);
    if (!r->bad &&
        (!h->nl || h->nl > WEIR__STORAGE_NAME_MAX || memchr(h->name, 0, h->nl) ||
         h->fl > WEIR_STATE_MAX_KEY || h->ll > WEIR_STATE_MAX_KEY || h->mlen < WEIR__RUN_SECTION ||
         weir__key_cmp(h->first, h->fl, h->last, h->ll) > 0))
        r->bad = 2;
}

/* The handle's framing and header: its checksum, version and groups. */
static int handle_check(const uint8_t *img, size_t len, remote *rm, char *why, size_t cap)
{
    weir_state_backend *b = &rm->base;
    int sealed = handle_sealed(img, len);
    if (sealed == 1)
        return weir__state_fail(why, cap, "not a remote-state handle (%zu bytes, no %s magic)", len,
                                HANDLE_MAGIC);
    if (sealed)
        return weir__state_fail(why, cap, "the remote-state handle's checksum does not match");
    weir__rd r = {img, len - 8, 8, 0};
    uint32_t ver = weir__rd_be32(&r), ng = weir__rd_be32(&r), first = weir__rd_be32(&r),
             end = weir__rd_be32(&r);
    (void)weir__rd_be64(&r);
    if (ver != HANDLE_VERSION)
        return weir__state_fail(why, cap, "remote-state handle version %u (this weir reads %u)",
                                ver, HANDLE_VERSION);
    if ((int)ng != b->ngroups || first > end || end > ng) {
        weir__state_fail(why, cap, "the handle has key groups [%u, %u) of %u, the backend %d",
                         first, end, ng, b->ngroups);
        return -EINVAL;
    }
    return 0;
}

/* Walk the handle's chains and extras: every field checked (apply 0), or
 * taken into the backend's groups (apply 1, after a check). */
static int handle_apply(remote *rm, const uint8_t *img, size_t len, int apply, char *why,
                        size_t cap)
{
    weir_state_backend *b = &rm->base;
    rshared *sh = rm->sh;
    weir__rd r = {img, len - 8, 16, 0}; /* past the magic, version and group count */
    uint32_t first = weir__rd_be32(&r), end = weir__rd_be32(&r);
    (void)weir__rd_be64(&r);
    int e = 0;
    for (uint32_t kg = first; kg < end && !r.bad && !e; kg++) {
        uint32_t n = weir__rd_be32(&r);
        int mine = (int)kg >= b->first_kg && (int)kg < b->end_kg;
        chain fresh = {0};
        for (uint32_t i = 0; i < n && !r.bad && !e; i++) {
            hrun h;
            handle_next_run(&r, &h);
            if (r.bad)
                break;
            if (!apply || !mine)
                continue;
            runref *rr = weir__calloc(1, sizeof(*rr));
            if (rr) {
                rr->name = weir__malloc(h.nl + 1);
                rr->first = weir__malloc(h.fl ? h.fl : 1);
                rr->last = weir__malloc(h.ll ? h.ll : 1);
            }
            if (!rr || !rr->name || !rr->first || !rr->last) {
                if (rr) {
                    weir__free(rr->name);
                    weir__free(rr->first);
                    weir__free(rr->last);
                }
                weir__free(rr);
                e = -ENOMEM;
                break;
            }
            atomic_init(&rr->refs, 1);
            memcpy(rr->name, h.name, h.nl);
            rr->name[h.nl] = '\0';
            memcpy(rr->first, h.first, h.fl);
            memcpy(rr->last, h.last, h.ll);
            rr->flen = h.fl;
            rr->llen = h.ll;
            rr->meta_off = h.moff;
            rr->meta_len = h.mlen;
            rr->entries = h.entries;
            /* oldest last: append */
            if (fresh.n == fresh.cap) {
                size_t c2 = fresh.cap ? fresh.cap * 2 : 4;
                runref **v = weir__realloc(fresh.v, c2 * sizeof(*v));
                if (!v) {
                    runref_unref(rr);
                    e = -ENOMEM;
                    break;
                }
                fresh.v = v;
                fresh.cap = c2;
            }
            fresh.v[fresh.n++] = rr;
        }
        if (apply && mine && !e && !r.bad) {
            pthread_mutex_lock(&sh->mu);
            chain old = sh->chains[kg - sh->first_kg];
            sh->chains[kg - sh->first_kg] = fresh;
            pthread_mutex_unlock(&sh->mu);
            chain_clear(&old);
        } else {
            chain_clear(&fresh);
        }
    }
    uint32_t nx = weir__rd_be32(&r);
    for (uint32_t i = 0; i < nx && !r.bad && !e; i++) {
        uint32_t kg = weir__rd_be32(&r), kl = weir__rd_be32(&r);
        const uint8_t *k = weir__rd_take(&r, kl);
        uint32_t vl = weir__rd_be32(&r);
        const uint8_t *v = weir__rd_take(&r, vl);
        if (r.bad)
            break;
        if (kg < first || kg >= end || kl > WEIR_STATE_MAX_KEY || vl > WEIR_STATE_MAX_VALUE) {
            r.bad = 2;
            break;
        }
        if (!apply || (int)kg < b->first_kg || (int)kg >= b->end_kg)
            continue;
        int created;
        hmeta *m = hot_put(rm, (int)kg, k, kl, v, vl, &created, &e);
        if (m) {
            m->in_pool = 0;
            m->tomb = 0;
            if (m->prev)
                list_unlink(m);
            list_push(&rm->held, m, L_HELD);
        }
    }
    if (!r.bad && r.pos != r.len)
        r.bad = 3;
    if (r.bad)
        return weir__state_fail(why, cap, "the remote-state handle is damaged (%s at byte %zu)",
                                r.bad == 1   ? "truncated"
                                : r.bad == 2 ? "a bad field"
                                             : "trailing bytes",
                                r.pos);
    return e;
}

typedef struct clear_walk {
    hmeta **v;
    size_t n, cap;
    int err;
} clear_walk;

static int clear_fn(void *arg, const void *key, size_t klen, const void *val, size_t vlen,
                    void *meta)
{
    (void)key, (void)klen, (void)val, (void)vlen;
    clear_walk *c = arg;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        hmeta **v = weir__realloc(c->v, cap * sizeof(*v));
        if (!v)
            return c->err = -ENOMEM;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = meta;
    return 0;
}

static int rm_restore(weir_state_backend *b, const uint8_t *img, size_t len, char *why, size_t cap)
{
    remote *r = (remote *)b;
    if (r->seq)
        /* its deltas in flight would write the old state of the groups */
        return weir__state_fail(why, cap, "a remote backend restores before its first checkpoint"),
               -EINVAL;
    int e = handle_check(img, len, r, why, cap);
    if (!e)
        e = handle_apply(r, img, len, 0, why, cap); /* the whole handle checked first */
    if (e)
        return e;
    /* The restored groups start empty in memory. */
    weir__rd rb = {img, len - 8, 8 + 8, 0};
    int first = (int)weir__rd_be32(&rb), end = (int)weir__rd_be32(&rb);
    for (int kg = first > b->first_kg ? first : b->first_kg; kg < end && kg < b->end_kg; kg++) {
        clear_walk c = {0};
        weir__mem_scan_meta(r->hot, kg, "", 0, clear_fn, &c);
        for (size_t i = 0; i < c.n; i++)
            drop_entry(r, kg, c.v[i]);
        weir__free(c.v);
        if (c.err)
            return c.err;
        r->cold[kg - b->first_kg] = 1; /* its entries are in the pool alone */
    }
    return handle_apply(r, img, len, 1, why, cap);
}

/* ---- life
 * ------------------------------------------------------------------------------------------- */
static void rm_free(weir_state_backend *b)
{
    remote *r = (remote *)b;
    rshared *sh = r->sh;
    if (weir__log_level() >= WEIR__LOG_DEBUG) { /* what the tier did, for tuning its budget */
        weir__remote_stat st;
        weir__remote_stats(b, &st);
        weir__log(WEIR__LOG_DEBUG, "state",
                  "remote backend of groups [%d, %d): hot tier %zu of %zu bytes, %" PRIu64
                  " evictions, %" PRIu64 " cold reads, %" PRIu64 " blocks read, %" PRIu64
                  " bytes of runs written, %" PRIu64 " merges, longest chain %" PRIu64 ", %" PRIu64
                  " round trips, block cache %zu bytes: %" PRIu64 " hits, %" PRIu64
                  " shared fetches, %" PRIu64 " blocks put in by persists",
                  b->first_kg, b->end_kg, st.hot_bytes, st.budget, st.evictions, st.cold_reads,
                  st.blocks_read, st.run_bytes, st.merges, st.max_chain, st.round_trips,
                  st.block_bytes, st.block_hits, st.block_shared, st.block_seeded);
    }
    pthread_mutex_lock(&sh->qmu);
    sh->stop = 1; /* queued reads are answered -ECANCELED */
    pthread_cond_broadcast(&sh->cv);
    pthread_mutex_unlock(&sh->qmu);
    for (int i = 0; i < sh->nthreads; i++)
        pthread_join(sh->threads[i], NULL);
    cache_free(r);
    for (size_t i = 0; i < r->ncapts; i++)
        weir__free(r->capts[i]);
    weir__free(r->capts);
    delta_unref(r->last);
    weir_state_backend_free(r->hot);
    shared_unref(sh);
    weir__free(r->cold);
    weir__free(r);
}

static const weir_state_backend_ops remote_ops = {
    .name = "remote",
    .get = rm_get,
    .put = rm_put,
    .del = rm_del,
    .scan = rm_scan,
    .get_async = rm_get_async,
    .capture = rm_capture,
    .restore = rm_restore,
    .entries = rm_entries,
    .free = rm_free,
    .get_batch = rm_get_batch,
    .get_now = rm_get_now,
    .scan_prefetch = rm_scan_prefetch,
};

/* reads=sync: the same backend read synchronously (no get_async: a
 * subtask on it runs without the async execution controller, each cold
 * read waiting on the blocking pool) - for measuring what the controller
 * buys. */
static const weir_state_backend_ops remote_sync_ops = {
    .name = "remote",
    .get = rm_get,
    .put = rm_put,
    .del = rm_del,
    .scan = rm_scan,
    .capture = rm_capture,
    .restore = rm_restore,
    .entries = rm_entries,
    .free = rm_free,
};

static size_t default_budget(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    size_t ram = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : 0;
    size_t q = ram / 4, floor = (size_t)64 << 20;
    return q > floor ? q : floor;
}

/* "key=value" options after '?', '&'-separated. */
static int parse_opts(const char *q, size_t *budget, int *threads, int *sync, long long *bcache)
{
    while (q && *q) {
        const char *amp = strchr(q, '&');
        size_t n = amp ? (size_t)(amp - q) : strlen(q);
        char opt[64];
        if (n >= sizeof(opt))
            return -EINVAL;
        memcpy(opt, q, n);
        opt[n] = '\0';
        char *eq = strchr(opt, '='), *end;
        if (!eq || !eq[1])
            return -EINVAL;
        *eq = '\0';
        if (strcmp(opt, "reads") == 0) {
            if (strcmp(eq + 1, "sync") == 0)
                *sync = 1;
            else if (strcmp(eq + 1, "async") == 0)
                *sync = 0;
            else
                return -EINVAL;
            q = amp ? amp + 1 : NULL;
            continue;
        }
        errno = 0;
        unsigned long long v = strtoull(eq + 1, &end, 10);
        if (errno || *end || eq[1] == '-')
            return -EINVAL;
        if (strcmp(opt, "hot_max_bytes") == 0)
            *budget = (size_t)v;
        else if (strcmp(opt, "block_cache_bytes") == 0)
            *bcache = (long long)(v > (unsigned long long)LLONG_MAX ? LLONG_MAX : v);
        else if (strcmp(opt, "io_threads") == 0 && v >= 1 && v <= IO_THREADS_MAX)
            *threads = (int)v;
        else
            return -EINVAL;
        q = amp ? amp + 1 : NULL;
    }
    return 0;
}

/* Split "remote:POOL_URI?OPTS" into the pool's URI (weir__malloc'd) and
 * the backend's options. OPTS are the parameters after the last '?': the
 * backend's own (hot_max_bytes, io_threads, reads) are taken out, any other
 * stays with the pool URI, whose store takes it or refuses it ("remote:
 * s3://b/p?endpoint=H:P&hot_max_bytes=N" gives the pool
 * "s3://b/p?endpoint=H:P"; a store without options refuses a '?'). */
static int split_uri(const char *uri, char **pool, size_t *budget, int *threads, int *sync,
                     long long *bcache)
{
    const char *p = uri + 7, *q = strrchr(p, '?');
    size_t plen = q ? (size_t)(q - p) : strlen(p);
    if (!plen)
        return -EINVAL;
    char *puri = weir__malloc(strlen(p) + 2), *mine = weir__malloc(strlen(p) + 2);
    if (!puri || !mine) {
        weir__free(puri);
        weir__free(mine);
        return -ENOMEM;
    }
    memcpy(puri, p, plen);
    size_t pl = plen, ml = 0;
    int pool_opts = memchr(puri, '?', plen) != NULL; /* the pool's own query goes on */
    while (q && *q) {
        q++;
        const char *amp = strchr(q, '&');
        size_t n = amp ? (size_t)(amp - q) : strlen(q);
        int own = (n >= 14 && memcmp(q, "hot_max_bytes=", 14) == 0) ||
                  (n >= 11 && memcmp(q, "io_threads=", 11) == 0) ||
                  (n >= 6 && memcmp(q, "reads=", 6) == 0) ||
                  (n >= 18 && memcmp(q, "block_cache_bytes=", 18) == 0);
        if (!n) {
            /* an empty parameter ("x?", "a&&b"): nothing */
        } else if (own) {
            if (ml)
                mine[ml++] = '&';
            memcpy(mine + ml, q, n);
            ml += n;
        } else {
            puri[pl++] = pool_opts++ ? '&' : '?';
            memcpy(puri + pl, q, n);
            pl += n;
        }
        q = amp;
    }
    puri[pl] = '\0';
    mine[ml] = '\0';
    int e = parse_opts(ml ? mine : NULL, budget, threads, sync, bcache) < 0 ? -EINVAL : 0;
    weir__free(mine);
    if (e)
        weir__free(puri);
    else
        *pool = puri;
    return e;
}

int weir__remote_open(const char *uri, int ngroups, int first_kg, int end_kg,
                      weir_state_backend **out)
{
    if (strncmp(uri, "remote:", 7) != 0 || ngroups < 1 || first_kg < 0 || first_kg > end_kg ||
        end_kg > ngroups)
        return -EINVAL;
    size_t budget = default_budget();
    int threads = 16, sync = 0;
    long long bcache = -1; /* -1: the hot tier's budget */
    char *puri;
    int e = split_uri(uri, &puri, &budget, &threads, &sync, &bcache);
    if (e)
        return e;
    weir__storage *st;
    e = weir__storage_open(puri, &st);
    weir__free(puri);
    if (e)
        return e == -EPROTONOSUPPORT ? -EINVAL : e;
    remote *r = weir__calloc(1, sizeof(*r));
    rshared *sh = weir__calloc(1, sizeof(*sh));
    size_t n = (size_t)(end_kg - first_kg);
    if (sh)
        sh->chains = weir__calloc(n ? n : 1, sizeof(chain));
    if (sh)
        sh->bt = weir__calloc(BLOCK_BUCKETS, sizeof(cblock *));
    if (r)
        r->cold = weir__calloc(n ? n : 1, 1);
    weir_state_backend *hot = r && r->cold && sh && sh->chains && sh->bt
                                  ? weir__mem_new_meta(ngroups, first_kg, end_kg, sizeof(hmeta))
                                  : NULL;
    if (!hot) {
        if (r)
            weir__free(r->cold);
        if (sh) {
            weir__free(sh->chains);
            weir__free(sh->bt);
        }
        weir__free(sh);
        weir__free(r);
        weir__storage_close(st);
        return -ENOMEM;
    }
    atomic_init(&sh->refs, 1);
    pthread_mutex_init(&sh->mu, NULL);
    pthread_mutex_init(&sh->qmu, NULL);
    pthread_cond_init(&sh->cv, NULL);
    pthread_mutex_init(&sh->bmu, NULL);
    sh->bcap = bcache >= 0 ? (size_t)bcache : budget;
    sh->pool = st;
    sh->first_kg = first_kg;
    sh->end_kg = end_kg;
    sh->want_threads = threads;
    uint64_t t = (uint64_t)weir_time_now() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)sh;
    sh->nonce = XXH64(&t, sizeof(t), (uint64_t)first_kg);
    r->base =
        (weir_state_backend){sync ? &remote_sync_ops : &remote_ops, ngroups, first_kg, end_kg};
    r->hot = hot;
    r->sh = sh;
    r->budget = budget;
    list_init(&r->dirty);
    list_init(&r->clean);
    list_init(&r->held);
    *out = &r->base;
    return 0;
}

/* Counters, for tests and benchmarks. */
void weir__remote_stats(weir_state_backend *b, weir__remote_stat *st)
{
    remote *r = (remote *)b;
    catch_up(r);
    *st = (weir__remote_stat){
        .hot_bytes = r->bytes,
        .budget = r->budget,
        .evictions = r->evictions,
        .cold_reads = atomic_load(&r->sh->cold_reads),
        .blocks_read = atomic_load(&r->sh->blocks_read),
        .run_bytes = atomic_load(&r->sh->run_bytes),
        .merges = atomic_load(&r->sh->merges),
        .scans_fetched = atomic_load(&r->sh->scans_fetched),
        .scans_served = r->scans_served,
        .round_trips = atomic_load(&r->sh->round_trips),
    };
    pthread_mutex_lock(&r->sh->bmu);
    st->block_hits = r->sh->bhits;
    st->block_shared = r->sh->bshared;
    st->block_seeded = r->sh->bseeded;
    st->block_bytes = r->sh->bbytes;
    pthread_mutex_unlock(&r->sh->bmu);
    pthread_mutex_lock(&r->sh->mu);
    for (int kg = r->sh->first_kg; kg < r->sh->end_kg; kg++)
        if (r->sh->chains[kg - r->sh->first_kg].n > st->max_chain)
            st->max_chain = r->sh->chains[kg - r->sh->first_kg].n;
    pthread_mutex_unlock(&r->sh->mu);
    for (hmeta *m = r->dirty.next; m != &r->dirty; m = m->next)
        st->dirty++;
    for (hmeta *m = r->clean.next; m != &r->clean; m = m->next)
        st->clean++;
}

/* ---- deleting runs no checkpoint refers to
 * ------------------------------------------------------- */
typedef struct nameset {
    char **v;
    size_t n, cap;
    int err;
} nameset;

static void nameset_add(nameset *ns, const uint8_t *name, size_t len)
{
    if (ns->err)
        return;
    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? ns->cap * 2 : 64;
        char **v = weir__realloc(ns->v, cap * sizeof(*v));
        if (!v) {
            ns->err = -ENOMEM;
            return;
        }
        ns->v = v;
        ns->cap = cap;
    }
    char *c = weir__malloc(len + 1);
    if (!c) {
        ns->err = -ENOMEM;
        return;
    }
    memcpy(c, name, len);
    c[len] = '\0';
    ns->v[ns->n++] = c;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void nameset_free(nameset *ns)
{
    for (size_t i = 0; i < ns->n; i++)
        weir__free(ns->v[i]);
    weir__free(ns->v);
}

/* The run names a handle refers to; -EBADMSG for anything that is not a
 * whole, checksummed handle. */
static int handle_runs(const uint8_t *img, size_t len, nameset *out)
{
    if (handle_sealed(img, len))
        return -EBADMSG;
    weir__rd r = {img, len - 8, 16, 0};
    uint32_t first = weir__rd_be32(&r), end = weir__rd_be32(&r);
    (void)weir__rd_be64(&r);
    for (uint32_t kg = first; kg < end && !r.bad; kg++) {
        uint32_t n = weir__rd_be32(&r);
        for (uint32_t i = 0; i < n && !r.bad; i++) {
            hrun h;
            handle_next_run(&r, &h);
            if (!r.bad)
                nameset_add(out, h.name, h.nl);
        }
    }
    return r.bad ? -EBADMSG : out->err;
}

int weir__remote_handle_runs(const uint8_t *img, size_t len, weir__names *out)
{
    nameset ns = {0};
    int e = handle_runs(img, len, &ns);
    if (e) {
        nameset_free(&ns);
        return e;
    }
    *out = (weir__names){ns.v, ns.n};
    return 0;
}

/* Every run the remote-state handles of checkpoint id refer to. */
static int checkpoint_runs(weir__storage *ckpts, uint64_t id, nameset *out)
{
    char dir[64];
    snprintf(dir, sizeof(dir), "chk-%" PRIu64 "/", id);
    weir__names ns;
    int e = weir__storage_list(ckpts, dir, &ns);
    for (size_t i = 0; !e && i < ns.n; i++) {
        size_t l = strlen(ns.v[i]);
        if (l < 6 || strcmp(ns.v[i] + l - 6, ".state") != 0)
            continue;
        uint8_t *img;
        size_t len;
        if ((e = weir__storage_get(ckpts, ns.v[i], (size_t)64 << 20, &img, &len)) != 0)
            break;
        if (len >= 8 && memcmp(img, HANDLE_MAGIC, 8) == 0)
            e = handle_runs(img, len, out);
        weir__free(img);
    }
    weir__names_free(&ns);
    return e;
}

int weir__remote_gc(const char *uri, weir__storage *ckpts, const uint64_t *gone, size_t ngone,
                    const uint64_t *kept, size_t nkept)
{
    if (strncmp(uri, "remote:", 7) != 0)
        return 0;
    nameset g = {0}, k = {0};
    int e = 0;
    for (size_t i = 0; !e && i < ngone; i++)
        if ((e = checkpoint_runs(ckpts, gone[i], &g)) == -ENOENT)
            e = 0; /* nothing of that checkpoint left */
    for (size_t i = 0; !e && i < nkept; i++)
        e = checkpoint_runs(ckpts, kept[i], &k);
    int deleted = 0;
    weir__storage *pool = NULL;
    if (!e && g.n) {
        size_t budget;
        int threads, sync;
        long long bcache;
        char *puri;
        if ((e = split_uri(uri, &puri, &budget, &threads, &sync, &bcache)) == 0) {
            e = weir__storage_open(puri, &pool);
            weir__free(puri);
        }
    }
    if (!e && g.n) {
        qsort(g.v, g.n, sizeof(*g.v), str_cmp);
        if (k.n)
            qsort(k.v, k.n, sizeof(*k.v), str_cmp);
        for (size_t i = 0; i < g.n; i++) {
            if (i && strcmp(g.v[i], g.v[i - 1]) == 0)
                continue;
            if (k.n && bsearch(&g.v[i], k.v, k.n, sizeof(*k.v), str_cmp))
                continue; /* a kept checkpoint still reads it */
            int d = weir__storage_delete(pool, g.v[i]);
            if (d == 0)
                deleted++;
            else if (d != -ENOENT && !e)
                e = d;
        }
    }
    if (pool)
        weir__storage_close(pool);
    nameset_free(&g);
    nameset_free(&k);
    return e ? e : deleted;
}
