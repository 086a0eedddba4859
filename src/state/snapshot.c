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
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "state/state_int.h"

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

int weir_state_restore(weir_state_backend *b, const char *path)
{
    if (!b || !path)
        return -EINVAL;
    return b->ops->restore(b, path);
}

/* ---- writing --------------------------------------------------------------------------- */
static void put_bytes(weir_state_snapshot *s, const void *p, size_t n)
{
    if (s->err)
        return;
    if (n > s->cap - s->len) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap - s->len < n) {
            if (cap > SIZE_MAX / 2) {
                s->err = -ENOMEM;
                return;
            }
            cap *= 2;
        }
        uint8_t *q = realloc(s->buf, cap);
        if (!q) {
            s->err = -ENOMEM;
            return;
        }
        s->buf = q;
        s->cap = cap;
    }
    if (n)
        memcpy(s->buf + s->len, p, n);
    s->len += n;
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
    return s ? s->cap : 0;
}

void weir_state_snapshot_free(weir_state_snapshot *s)
{
    if (!s)
        return;
    free(s->buf);
    free(s);
}

static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *q = p;
    while (n) {
        ssize_t w = write(fd, q, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        q += w;
        n -= (size_t)w;
    }
    return 0;
}

int weir_state_persist(const weir_state_snapshot *s, const char *path)
{
    if (!s || !path || !*path)
        return -EINVAL;
    if (s->err)
        return s->err;
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16), *dir = strdup(path);
    if (!tmp || !dir) {
        free(tmp);
        free(dir);
        return -ENOMEM;
    }
    snprintf(tmp, plen + 16, "%s.tmp", path);
    int e = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        e = -errno;
    } else {
        uint64_t sum = XXH64(s->buf, s->len, 0);
        uint8_t t[8];
        for (int i = 0; i < 8; i++)
            t[i] = (uint8_t)(sum >> (56 - 8 * i));
        e = write_all(fd, s->buf, s->len);
        if (!e)
            e = write_all(fd, t, 8);
        if (!e && fsync(fd) < 0)
            e = -errno;
        if (close(fd) < 0 && !e)
            e = -errno;
        if (!e && rename(tmp, path) < 0)
            e = -errno;
        if (e)
            unlink(tmp);
    }
    if (!e) { /* the rename itself must survive a crash */
        int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            if (fsync(dfd) < 0)
                e = -errno;
            close(dfd);
        }
    }
    free(tmp);
    free(dir);
    return e;
}

/* ---- reading --------------------------------------------------------------------------- */
static __thread char fail_text[256];

int weir__state_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fail_text, sizeof(fail_text), fmt, ap);
    va_end(ap);
    return -EBADMSG;
}

const char *weir_state_strerror(void)
{
    return fail_text;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) << 32 | get_u32(p + 4);
}

int weir__snap_read_file(const char *path, uint8_t **p, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        int e = S_ISREG(st.st_mode) ? -errno : -EINVAL;
        close(fd);
        return e;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return -ENOMEM;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? -errno : weir__state_fail("%s: file shrank while read", path);
            free(buf);
            close(fd);
            return e;
        }
        got += (size_t)r;
    }
    close(fd);
    *p = buf;
    *len = n;
    return 0;
}

int weir__snap_open(weir__snap_reader *r, const uint8_t *p, size_t len)
{
    fail_text[0] = '\0';
    memset(r, 0, sizeof(*r));
    if (len < HEADER_LEN + TRAILER_LEN || memcmp(p, MAGIC, 8) != 0)
        return weir__state_fail("not a weir state snapshot (bad magic or too short)");
    if (get_u32(p + 8) != VERSION)
        return weir__state_fail("snapshot format version %u, this weir reads %u", get_u32(p + 8),
                                VERSION);
    size_t body = len - TRAILER_LEN;
    if (XXH64(p, body, 0) != get_u64(p + body))
        return weir__state_fail("snapshot checksum mismatch (damaged or truncated file)");
    uint32_t ng = get_u32(p + 12), first = get_u32(p + 16), end = get_u32(p + 20);
    if (ng < 1 || ng > (1u << 20) || first > end || end > ng)
        return weir__state_fail("snapshot header: bad key group range [%u, %u) of %u", first, end,
                                ng);
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
            return weir__state_fail("snapshot: group header cut short at byte %zu", pos);
        uint32_t kg = get_u32(p + pos);
        uint64_t count = get_u64(p + pos + 4);
        pos += 12;
        if ((int64_t)kg <= last || kg >= end)
            return weir__state_fail("snapshot: key group %u out of order or outside [%u, %u)", kg,
                                    first, end);
        last = kg;
        if (count > (body - pos) / 8)
            return weir__state_fail("snapshot: group %u claims %llu entries, more than fit", kg,
                                    (unsigned long long)count);
        for (uint64_t i = 0; i < count; i++) {
            for (int part = 0; part < 2; part++) {
                if (body - pos < 4)
                    return weir__state_fail("snapshot: entry cut short in group %u", kg);
                uint32_t n = get_u32(p + pos);
                pos += 4;
                if (n > (part ? WEIR_STATE_MAX_VALUE : WEIR_STATE_MAX_KEY) || n > body - pos)
                    return weir__state_fail("snapshot: %s of %u bytes in group %u exceeds "
                                            "the file or the cap",
                                            part ? "value" : "key", n, kg);
                pos += n;
            }
        }
    }
    r->pos = HEADER_LEN;
    return 0;
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
