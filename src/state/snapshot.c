/* SPDX-License-Identifier: Apache-2.0 */
/*
 * snapshot.c - key groups, the backend calls, and the snapshot file format
 * shared by every backend (weir/state.h).
 *
 * Format (integers big-endian):
 *
 *   "WEIRSNP1"  u32 version (2)  u32 ngroups  u32 first_kg  u32 end_kg
 *   u64 checkpoint id
 *   per group, ascending:  u32 kg  u64 count  count x (u32 klen, key, u32 vlen, value)
 *   u64 XXH64 (seed 0) of every byte before it
 *
 * A reader checks the whole image before anything is restored: the
 * checksum, then every length against the bytes left (a count is refused
 * when even its smallest encoding, 8 bytes per entry, cannot fit), groups
 * inside the header's range and ascending, keys and values within the
 * caps. A damaged file is -EBADMSG with a reason, never a partial restore.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/afile.h"
#include "base/alloc.h"
#include "rt/rt_int.h"
#include "state/state_int.h"
#include "state/storage.h"

#define MAGIC "WEIRSNP1"
/* The version covers what the keys mean as well as the framing: 2 is the
 * stream layer's keyed state named by its state's name (stream/keyed.c);
 * under 1 a state was numbered in the order a subtask first touched it,
 * and reading those keys now would mistake one state for another, so a
 * version-1 file is refused. */
#define VERSION     2u
#define HEADER_LEN  (8 + 4 * 4 + 8)
#define TRAILER_LEN 8

/* ---- key groups ----------------------------------------------------------------------- */
uint64_t weir_key_hash(const void *key, size_t len)
{
    return XXH3_64bits(key, len);
}

int weir_key_group(uint64_t hash, int ngroups)
{
    return ngroups > 0 ? (int)(hash % (uint64_t)ngroups) : 0;
}

int weir_key_group_owner(int kg, int parallelism, int ngroups)
{
    return (int)((int64_t)kg * parallelism / ngroups);
}

int weir_key_group_range(int subtask, int parallelism, int ngroups, int *first, int *end)
{
    if (ngroups < 1 || parallelism < 1 || parallelism > ngroups || subtask < 0 ||
        subtask >= parallelism || !first || !end)
        return -EINVAL;
    /* The groups g with g * p / n == subtask: from ceil(s*n/p) to ceil((s+1)*n/p). */
    *first = (int)(((int64_t)subtask * ngroups + parallelism - 1) / parallelism);
    *end = (int)(((int64_t)(subtask + 1) * ngroups + parallelism - 1) / parallelism);
    return 0;
}

/* ---- the calls ------------------------------------------------------------------------- */
static int check(weir_state_backend *b, int kg, const void *key, size_t klen)
{
    if (!b || kg < b->first_kg || kg >= b->end_kg || (!key && klen))
        return -EINVAL;
    return klen > WEIR_STATE_MAX_KEY ? -E2BIG : 0;
}

int weir_state_get(weir_state_backend *b, int kg, const void *key, size_t klen, const void **val,
                   size_t *vlen)
{
    int e = check(b, kg, key, klen);
    if (e || !val || !vlen)
        return e ? e : -EINVAL;
    return b->ops->get(b, kg, key, klen, val, vlen);
}

int weir_state_put(weir_state_backend *b, int kg, const void *key, size_t klen, const void *val,
                   size_t vlen)
{
    int e = check(b, kg, key, klen);
    if (e || (!val && vlen))
        return e ? e : -EINVAL;
    if (vlen > WEIR_STATE_MAX_VALUE)
        return -E2BIG;
    return b->ops->put(b, kg, key, klen, val, vlen);
}

int weir_state_delete(weir_state_backend *b, int kg, const void *key, size_t klen)
{
    int e = check(b, kg, key, klen);
    return e ? e : b->ops->del(b, kg, key, klen);
}

int weir_state_scan(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                    weir_state_scan_fn fn, void *arg)
{
    int e = check(b, kg, prefix, plen);
    if (e || !fn)
        return e ? e : -EINVAL;
    return b->ops->scan(b, kg, prefix, plen, fn, arg);
}

/* A backend without a seek: its prefix walk, the keys below from skipped. */
typedef struct from_skip {
    const void *from;
    size_t flen;
    weir_state_scan_fn fn;
    void *arg;
} from_skip;

static int skip_below(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
    from_skip *f = arg;
    if (weir__key_cmp(key, klen, f->from, f->flen) < 0)
        return 0;
    return f->fn(f->arg, key, klen, val, vlen);
}

int weir_state_scan_from(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                         const void *from, size_t flen, weir_state_scan_fn fn, void *arg)
{
    int e = check(b, kg, prefix, plen);
    if (!e)
        e = check(b, kg, from, flen);
    if (e || !fn)
        return e ? e : -EINVAL;
    if (b->ops->scan_from)
        return b->ops->scan_from(b, kg, prefix, plen, from, flen, fn, arg);
    from_skip f = {from, flen, fn, arg};
    return b->ops->scan(b, kg, prefix, plen, skip_below, &f);
}

int weir_state_get_async(weir_state_backend *b, int kg, const void *key, size_t klen,
                         weir_state_get_cb cb, void *arg)
{
    int e = check(b, kg, key, klen);
    if (e || !cb)
        return e ? e : -EINVAL;
    if (b->ops->get_async)
        return b->ops->get_async(b, kg, key, klen, cb, arg);
    const void *v;
    size_t n;
    return b->ops->get(b, kg, key, klen, &v, &n);
}

int weir_state_get_many_async(weir_state_backend *b, int kg, const void *const *keys,
                              const size_t *klens, size_t n, weir_state_get_cb cb,
                              void *const *args)
{
    if (!keys || !klens || !cb || (n && !args))
        return -EINVAL;
    int pending = 0;
    for (size_t i = 0; i < n; i++) {
        const void *v = NULL;
        size_t vl = 0;
        int e = check(b, kg, keys[i], klens[i]);
        if (!e && b->ops->get_async)
            e = b->ops->get_async(b, kg, keys[i], klens[i], cb, args[i]);
        else if (!e)
            e = b->ops->get(b, kg, keys[i], klens[i], &v, &vl);
        if (e == -EINPROGRESS)
            pending++;
        else if (b->ops->get_async && e == 0) {
            /* An async backend that answered at once gave no view here:
             * read it for the callback. */
            e = b->ops->get(b, kg, keys[i], klens[i], &v, &vl);
            cb(args[i], e, e ? NULL : v, e ? 0 : vl);
        } else {
            cb(args[i], e, e ? NULL : v, e ? 0 : vl);
        }
    }
    return pending;
}

int weir_state_scan_prefetch(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                             weir_state_get_cb cb, void *arg)
{
    int e = check(b, kg, prefix, plen);
    if (e || !cb)
        return e ? e : -EINVAL;
    return b->ops->scan_prefetch ? b->ops->scan_prefetch(b, kg, prefix, plen, cb, arg) : 0;
}

size_t weir_state_entries(weir_state_backend *b, int kg)
{
    if (!b || kg < b->first_kg || kg >= b->end_kg)
        return 0;
    return b->ops->entries(b, kg);
}

void weir_state_backend_free(weir_state_backend *b)
{
    if (b)
        b->ops->free(b);
}

int weir_state_capture(weir_state_backend *b, uint64_t checkpoint_id, weir_state_snapshot **out)
{
    return weir_state_capture_with(b, checkpoint_id, NULL, 0, out);
}

int weir__key_cmp(const void *a, size_t an, const void *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0; /* (an empty key may come as NULL) */
    if (c)
        return c;
    return an < bn ? -1 : an > bn;
}

int weir_state_capture_with(weir_state_backend *b, uint64_t checkpoint_id,
                            const weir_state_entry *extra, size_t n, weir_state_snapshot **out)
{
    if (!b || !out || (n && !extra))
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        const weir_state_entry *x = &extra[i];
        if (x->kg < b->first_kg || x->kg >= b->end_kg || (x->klen && !x->key) ||
            (x->vlen && !x->val) || x->klen > WEIR_STATE_MAX_KEY || x->vlen > WEIR_STATE_MAX_VALUE)
            return -EINVAL;
        if (i && (x[-1].kg > x->kg || (x[-1].kg == x->kg &&
                                       weir__key_cmp(x[-1].key, x[-1].klen, x->key, x->klen) >= 0)))
            return -EINVAL; /* not sorted, or a key twice */
    }
    return b->ops->capture(b, checkpoint_id, extra, n, out);
}

static void why_clear(char *why, size_t cap)
{
    if (why && cap)
        why[0] = '\0';
}

int weir_state_restore_image(weir_state_backend *b, const void *img, size_t len, char *why,
                             size_t cap)
{
    why_clear(why, cap);
    if (!b || (!img && len))
        return -EINVAL;
    return b->ops->restore(b, img, len, why, cap);
}

int weir_state_restore(weir_state_backend *b, const char *path, char *why, size_t cap)
{
    why_clear(why, cap);
    if (!b || !path)
        return -EINVAL;
    uint8_t *img;
    size_t len;
    int e = weir__file_read_all(path, WEIR__SNAP_MAX_FILE, &img, &len);
    if (e)
        return e;
    e = b->ops->restore(b, img, len, why, cap);
    weir__free(img);
    return e;
}

/* The whole check of an image (weir__snap_open), as a pool job. */
typedef struct image_check {
    const uint8_t *img;
    size_t len;
    char *why;
    size_t cap;
} image_check;

static intptr_t check_job(void *arg)
{
    image_check *c = arg;
    weir__snap_reader r;
    return weir__snap_open(&r, c->img, c->len, c->why, c->cap);
}

static intptr_t free_job(void *arg)
{
    weir__free(arg);
    return 0;
}

int weir__state_restore_from(weir__storage *st, const char *name, weir_state_backend *b, char *why,
                             size_t cap)
{
    why_clear(why, cap);
    if (!b)
        return -EINVAL;
    uint8_t *img;
    size_t len;
    /* The read on the blocking pool, and the check of the whole image
     * (a checksum and a walk over every entry: tens of milliseconds for
     * a large state) there too; here, on the backend's owner (only it may
     * change the backend), the loading alone. The waits are shielded
     * (weir__blocking_run_shielded): the jobs may use img and why. */
    int e = weir__storage_get(st, name, WEIR__SNAP_MAX_FILE, &img, &len);
    if (e)
        return e;
    if (b->ops->restore_checked) {
        image_check c = {img, len, why, cap};
        e = (int)weir__blocking_run_shielded(check_job, &c);
        if (!e)
            e = b->ops->restore_checked(b, img, len, why, cap);
    } else {
        e = b->ops->restore(b, img, len, why, cap);
    }
    /* Giving a large image's pages back is work of its own. */
    if (weir__blocking_run_shielded(free_job, img) < 0)
        weir__free(img); /* the pool dropped the job unrun */
    return e;
}

/* ---- writing --------------------------------------------------------------------------- */
/* The chunk being filled doubles up to CHUNK_MAX, then is set aside whole
 * and a new one begun: growing one buffer to the size of a large state
 * would copy all of it at each doubling (an allocator without mremap
 * does), on the capturing subtask's thread; a chunk costs one copy of at
 * most CHUNK_MAX / 2 bytes. encode joins the chunks, on the blocking pool. */
#define CHUNK_MAX ((size_t)4 << 20)

static int set_aside(weir_state_snapshot *s)
{
    if (s->nchunks == s->chunks_cap) {
        size_t nc = s->chunks_cap ? s->chunks_cap * 2 : 16;
        weir__snap_chunk *v = weir__realloc(s->chunks, nc * sizeof(*v));
        if (!v)
            return -ENOMEM;
        s->chunks = v;
        s->chunks_cap = nc;
    }
    s->chunks[s->nchunks++] = (weir__snap_chunk){s->buf, s->len};
    s->aside += s->len;
    s->buf = NULL;
    s->len = s->cap = 0;
    return 0;
}

static void put_bytes(weir_state_snapshot *s, const void *p, size_t n)
{
    const uint8_t *q = p;
    while (n && !s->err) {
        if (s->len == s->cap) {
            if (s->cap >= CHUNK_MAX && (s->err = set_aside(s)) != 0)
                return;
            size_t cap = s->cap ? s->cap * 2 : 4096;
            uint8_t *nb = weir__realloc(s->buf, cap);
            if (!nb) {
                s->err = -ENOMEM;
                return;
            }
            s->buf = nb;
            s->cap = cap;
        }
        size_t k = s->cap - s->len < n ? s->cap - s->len : n;
        memcpy(s->buf + s->len, q, k);
        s->len += k;
        q += k;
        n -= k;
    }
}

static void put_u32(weir_state_snapshot *s, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    put_bytes(s, b, 4);
}

static void put_u64(weir_state_snapshot *s, uint64_t v)
{
    put_u32(s, (uint32_t)(v >> 32));
    put_u32(s, (uint32_t)v);
}

int weir__snap_init(weir_state_snapshot *s, uint64_t id, int ngroups, int first_kg, int end_kg)
{
    memset(s, 0, sizeof(*s));
    s->id = id;
    put_bytes(s, MAGIC, 8);
    put_u32(s, VERSION);
    put_u32(s, (uint32_t)ngroups);
    put_u32(s, (uint32_t)first_kg);
    put_u32(s, (uint32_t)end_kg);
    put_u64(s, id);
    return s->err;
}

void weir__snap_group(weir_state_snapshot *s, int kg, uint64_t count)
{
    put_u32(s, (uint32_t)kg);
    put_u64(s, count);
}

void weir__snap_entry(weir_state_snapshot *s, const void *key, size_t klen, const void *val,
                      size_t vlen)
{
    put_u32(s, (uint32_t)klen);
    put_bytes(s, key, klen);
    put_u32(s, (uint32_t)vlen);
    put_bytes(s, val, vlen);
}

uint64_t weir_state_snapshot_id(const weir_state_snapshot *s)
{
    return s ? s->id : 0;
}

size_t weir_state_snapshot_size(const weir_state_snapshot *s)
{
    return s ? s->aside + s->cap : 0;
}

void weir_state_snapshot_free(weir_state_snapshot *s)
{
    if (!s)
        return;
    if (s->drop)
        s->drop(s);
    for (size_t i = 0; i < s->nchunks; i++)
        weir__free(s->chunks[i].p);
    weir__free(s->chunks);
    weir__free(s->buf);
    weir__free(s);
}

int weir_state_snapshot_encode(weir_state_snapshot *s, const void **img, size_t *len)
{
    if (!s || !img || !len)
        return -EINVAL;
    if (s->err)
        return s->err;
    if (s->prepare) {
        int (*prepare)(weir_state_snapshot *) = s->prepare;
        s->prepare = NULL;
        if ((s->err = prepare(s)) != 0)
            return s->err;
    }
    if (!s->sealed && s->nchunks) {
        /* One image of the chunks set aside and the last: a copy (the
         * price of never growing one buffer on the capturing thread), here
         * where a large one may take its time. */
        if (s->aside > SIZE_MAX - s->len - TRAILER_LEN)
            return -ENOMEM;
        size_t total = s->aside + s->len;
        uint8_t *one = weir__malloc(total + TRAILER_LEN);
        if (!one)
            return -ENOMEM;
        size_t at = 0;
        for (size_t i = 0; i < s->nchunks; i++) {
            memcpy(one + at, s->chunks[i].p, s->chunks[i].len);
            at += s->chunks[i].len;
            weir__free(s->chunks[i].p);
        }
        memcpy(one + at, s->buf, s->len);
        weir__free(s->chunks);
        weir__free(s->buf);
        s->chunks = NULL;
        s->nchunks = s->chunks_cap = 0;
        s->aside = 0;
        s->buf = one;
        s->len = total;
        s->cap = total + TRAILER_LEN;
    }
    if (!s->sealed) {
        /* The checksum goes on the end of the captured bytes, once: the
         * buffer then is the file image, written without a further copy. */
        uint64_t sum = XXH64(s->buf, s->len, 0);
        put_u64(s, sum);
        if (s->err)
            return s->err;
        s->sealed = 1;
    }
    *img = s->buf;
    *len = s->len;
    return 0;
}

int weir_state_persist(weir_state_snapshot *s, const char *path)
{
    if (!s || !path || !*path)
        return -EINVAL;
    const void *img;
    size_t len;
    int e = weir_state_snapshot_encode(s, &img, &len);
    if (e)
        return e;
    /* dir and name of the path, for the atomic publication beside it. */
    const char *slash = strrchr(path, '/');
    if (slash && !slash[1])
        return -EINVAL; /* a directory, not a file */
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else if ((size_t)(slash - path) >= sizeof(dir))
        return -ENAMETOOLONG;
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    return weir__file_write_atomic(dir, slash ? slash + 1 : path, img, len);
}

/* A storage put of a snapshot: encoded on the blocking pool (the checksum
 * of a large state is real work), freed there once written. */
static int snap_produce(void *owner, const void **buf, size_t *len)
{
    return weir_state_snapshot_encode(owner, buf, len);
}

static void snap_release(void *owner)
{
    weir_state_snapshot_free(owner);
}

int weir__state_persist_to(weir__storage *st, const char *name, weir_state_snapshot *s)
{
    if (!s)
        return -EINVAL;
    weir__blob b = {.produce = snap_produce, .release = snap_release, .owner = s};
    return weir__storage_put_blob(st, name, &b);
}

/* ---- reading --------------------------------------------------------------------------- */
int weir__state_fail(char *why, size_t cap, const char *fmt, ...)
{
    if (why && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return -EBADMSG;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) << 32 | get_u32(p + 4);
}

int weir__snap_open(weir__snap_reader *r, const uint8_t *p, size_t len, char *why, size_t cap)
{
    memset(r, 0, sizeof(*r));
    if (len < HEADER_LEN + TRAILER_LEN || memcmp(p, MAGIC, 8) != 0)
        return weir__state_fail(why, cap, "not a weir state snapshot (bad magic or too short)");
    if (get_u32(p + 8) != VERSION)
        return weir__state_fail(why, cap, "snapshot format version %u, this weir reads %u",
                                get_u32(p + 8), VERSION);
    size_t body = len - TRAILER_LEN;
    if (XXH64(p, body, 0) != get_u64(p + body))
        return weir__state_fail(why, cap, "snapshot checksum mismatch (damaged or truncated file)");
    uint32_t ng = get_u32(p + 12), first = get_u32(p + 16), end = get_u32(p + 20);
    if (ng < 1 || ng > (1u << 20) || first > end || end > ng)
        return weir__state_fail(why, cap, "snapshot header: bad key group range [%u, %u) of %u",
                                first, end, ng);
    r->p = p;
    r->len = body;
    r->ngroups = (int)ng;
    r->first_kg = (int)first;
    r->end_kg = (int)end;
    r->id = get_u64(p + 24);
    /* Walk every group and entry once, checking each length against what
     * is left, so the apply pass can trust the image. */
    size_t pos = HEADER_LEN;
    int64_t last = (int64_t)first - 1;
    while (pos < body) {
        if (body - pos < 12)
            return weir__state_fail(why, cap, "snapshot: group header cut short at byte %zu", pos);
        uint32_t kg = get_u32(p + pos);
        uint64_t count = get_u64(p + pos + 4);
        pos += 12;
        if ((int64_t)kg <= last || kg >= end)
            return weir__state_fail(why, cap,
                                    "snapshot: key group %u out of order or outside [%u, %u)", kg,
                                    first, end);
        last = kg;
        if (count > (body - pos) / 8)
            return weir__state_fail(why, cap,
                                    "snapshot: group %u claims %llu entries, more than fit", kg,
                                    (unsigned long long)count);
        for (uint64_t i = 0; i < count; i++) {
            for (int part = 0; part < 2; part++) {
                if (body - pos < 4)
                    return weir__state_fail(why, cap, "snapshot: entry cut short in group %u", kg);
                uint32_t n = get_u32(p + pos);
                pos += 4;
                if (n > (part ? WEIR_STATE_MAX_VALUE : WEIR_STATE_MAX_KEY) || n > body - pos)
                    return weir__state_fail(why, cap,
                                            "snapshot: %s of %u bytes in group %u exceeds "
                                            "the file or the cap",
                                            part ? "value" : "key", n, kg);
                pos += n;
            }
        }
    }
    r->pos = HEADER_LEN;
    return 0;
}

void weir__snap_open_checked(weir__snap_reader *r, const uint8_t *p, size_t len)
{
    memset(r, 0, sizeof(*r));
    r->p = p;
    r->len = len - TRAILER_LEN;
    r->ngroups = (int)get_u32(p + 12);
    r->first_kg = (int)get_u32(p + 16);
    r->end_kg = (int)get_u32(p + 20);
    r->id = get_u64(p + 24);
    r->pos = HEADER_LEN;
}

int weir__snap_next_group(weir__snap_reader *r, int *kg, uint64_t *count)
{
    if (r->pos >= r->len)
        return 0;
    *kg = (int)get_u32(r->p + r->pos);
    *count = get_u64(r->p + r->pos + 4);
    r->pos += 12;
    return 1;
}

void weir__snap_next_entry(weir__snap_reader *r, const uint8_t **key, size_t *klen,
                           const uint8_t **val, size_t *vlen)
{
    *klen = get_u32(r->p + r->pos);
    *key = r->p + r->pos + 4;
    r->pos += 4 + *klen;
    *vlen = get_u32(r->p + r->pos);
    *val = r->p + r->pos + 4;
    r->pos += 4 + *vlen;
}
