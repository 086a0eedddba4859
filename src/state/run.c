/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run.c - the sorted run's writer and checked readers (the format is
 * described in run.h).
 *
 * The writer appends to one growing buffer: a group's entries go into the
 * current block's payload, and the block is framed before an entry that
 * would take it past WEIR__RUN_BLOCK; at the group's end its meta section follows (the bloom
 * filter, built from the key hashes kept meanwhile, and the block index).
 * The readers check before they use: a section's length against the bytes
 * given, its checksum, every length inside it against what is left.
 */
#include "state/run.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/be.h"
#include "base/buf.h"
#include "state/state_int.h"
#include "weir/state.h"

#define BLOOM_BITS_PER_KEY 10
#define BLOOM_HASHES       7

/* ---- the writer ---------------------------------------------------------------------------------
 */
typedef struct bidx {
    uint64_t off;
    uint32_t len;
    uint32_t klen;
    size_t kat; /* the first key's bytes in keys */
} bidx;

struct weir__run_writer {
    weir__buf out;
    int err;
    int kg;          /* the current group, -1 before the first entry */
    weir__buf block; /* the current block's payload */
    weir__buf keys;  /* the current group's block first keys */
    bidx *idx;       /* the current group's blocks */
    size_t nidx, idxcap;
    uint64_t *hashes; /* the current group's key hashes, for its bloom filter */
    size_t nh, hcap;
    weir__buf last;  /* the previous key */
    weir__buf first; /* the group's first key */
    weir__run_group *groups;
    size_t ngroups, gcap;
};

weir__run_writer *weir__run_writer_new(void)
{
    weir__run_writer *w = weir__calloc(1, sizeof(*w));
    if (w)
        w->kg = -1;
    return w;
}

/* Frame the payload p/n as a section at the end of out. */
static int put_section(weir__buf *out, const uint8_t *p, size_t n)
{
    if (n > UINT32_MAX)
        return -E2BIG;
    weir__buf_put_be32(out, (uint32_t)n);
    weir__buf_put(out, p, n);
    weir__buf_put_be64(out, XXH64(p, n, 0));
    return out->err;
}

static int flush_block(weir__run_writer *w)
{
    if (!w->block.len)
        return 0;
    /* The block's index slot was made when its first entry came. */
    w->idx[w->nidx].off = w->out.len;
    w->idx[w->nidx].len = (uint32_t)(w->block.len + WEIR__RUN_SECTION);
    int e = put_section(&w->out, w->block.p, w->block.len);
    if (e)
        return e;
    w->nidx++;
    w->block.len = 0;
    return 0;
}

static uint32_t bloom_bytes(size_t entries)
{
    uint64_t bits = (uint64_t)entries * BLOOM_BITS_PER_KEY;
    if (bits < 64)
        bits = 64;
    return (uint32_t)((bits + 7) / 8);
}

static void bloom_set(uint8_t *bits, uint64_t nbits, uint64_t h, int k)
{
    uint64_t h1 = (uint32_t)h, h2 = (h >> 32) | 1;
    for (int i = 0; i < k; i++) {
        uint64_t b = (h1 + (uint64_t)i * h2) % nbits;
        bits[b / 8] |= (uint8_t)(1u << (b % 8));
    }
}

/* The group's last block, then its meta section and descriptor. */
static int end_group(weir__run_writer *w)
{
    if (w->kg < 0)
        return 0;
    int e = flush_block(w);
    if (e)
        return e;
    if (w->ngroups == w->gcap) {
        size_t cap = w->gcap ? w->gcap * 2 : 16;
        weir__run_group *v = weir__realloc(w->groups, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        w->groups = v;
        w->gcap = cap;
    }
    weir__run_group *g = &w->groups[w->ngroups];
    *g = (weir__run_group){.kg = w->kg, .entries = w->nh};
    g->first = weir__malloc(w->first.len ? w->first.len : 1);
    g->last = weir__malloc(w->last.len ? w->last.len : 1);
    if (!g->first || !g->last) {
        weir__free(g->first);
        weir__free(g->last);
        return -ENOMEM;
    }
    if (w->first.len) /* an empty key has no bytes (and maybe no buffer) */
        memcpy(g->first, w->first.p, w->first.len);
    if (w->last.len)
        memcpy(g->last, w->last.p, w->last.len);
    g->first_len = (uint32_t)w->first.len;
    g->last_len = (uint32_t)w->last.len;
    w->ngroups++;
    /* The meta payload. */
    weir__buf m = {0};
    uint32_t bb = bloom_bytes(w->nh);
    e = weir__buf_reserve(&m,
                          4 + 8 + 4 + 1 + bb + 4 + w->nidx * 16 + w->keys.len + 4 + w->last.len);
    if (!e) {
        weir__buf_put_be32(&m, (uint32_t)w->kg);
        weir__buf_put_be64(&m, w->nh);
        weir__buf_put_be32(&m, bb);
        uint8_t k = BLOOM_HASHES;
        weir__buf_put(&m, &k, 1);
        uint8_t *bits = m.p + m.len;
        memset(bits, 0, bb);
        m.len += bb;
        for (size_t i = 0; i < w->nh; i++)
            bloom_set(bits, (uint64_t)bb * 8, w->hashes[i], BLOOM_HASHES);
        weir__buf_put_be32(&m, (uint32_t)w->nidx);
        for (size_t i = 0; i < w->nidx; i++) {
            weir__buf_put_be64(&m, w->idx[i].off);
            weir__buf_put_be32(&m, w->idx[i].len);
            weir__buf_put_be32(&m, w->idx[i].klen);
            if (w->idx[i].klen) /* (no key bytes at all: keys.p may be NULL) */
                weir__buf_put(&m, w->keys.p + w->idx[i].kat, w->idx[i].klen);
        }
        weir__buf_put_be32(&m, (uint32_t)w->last.len);
        weir__buf_put(&m, w->last.p, w->last.len);
        g->meta_off = w->out.len;
        g->meta_len = (uint32_t)(m.len + WEIR__RUN_SECTION);
        e = put_section(&w->out, m.p, m.len);
    }
    weir__free(m.p);
    w->nidx = 0;
    w->nh = 0;
    w->keys.len = 0;
    w->first.len = 0;
    return e;
}

int weir__run_add(weir__run_writer *w, int kg, const void *key, size_t klen, const void *val,
                  size_t vlen, int tombstone)
{
    if (w->err)
        return w->err;
    if (tombstone)
        vlen = 0;
    int e = 0;
    if (kg < 0 || kg < w->kg || (!key && klen) || (!val && vlen))
        e = -EINVAL;
    else if (klen > WEIR_STATE_MAX_KEY || vlen > WEIR_STATE_MAX_VALUE)
        e = -E2BIG;
    else if (kg == w->kg && weir__key_cmp(w->last.p, w->last.len, key, klen) >= 0)
        e = -EINVAL; /* not after the previous key */
    if (!e && kg != w->kg) {
        e = end_group(w);
        w->kg = kg;
    }
    /* Cut before an entry that would take the block past its target: a
     * block is at most WEIR__RUN_BLOCK bytes unless one entry is larger. */
    if (!e && w->block.len && w->block.len + 9 + klen + vlen > WEIR__RUN_BLOCK)
        e = flush_block(w);
    if (!e && w->block.len == 0) { /* a new block: its first key for the index */
        if (w->nidx == w->idxcap) {
            size_t cap = w->idxcap ? w->idxcap * 2 : 16;
            bidx *v = weir__realloc(w->idx, cap * sizeof(*v));
            if (!v)
                e = -ENOMEM;
            else
                w->idx = v, w->idxcap = cap;
        }
        if (!e) {
            w->idx[w->nidx].klen = (uint32_t)klen;
            w->idx[w->nidx].kat = w->keys.len;
            weir__buf_put(&w->keys, key, klen);
            e = w->keys.err;
        }
    }
    if (!e && w->nh == w->hcap) {
        size_t cap = w->hcap ? w->hcap * 2 : 256;
        uint64_t *v = weir__realloc(w->hashes, cap * sizeof(*v));
        if (!v)
            e = -ENOMEM;
        else
            w->hashes = v, w->hcap = cap;
    }
    if (!e) {
        uint8_t h[9] = {(uint8_t)(tombstone ? 1 : 0)};
        weir__put_be32(h + 1, (uint32_t)klen);
        weir__put_be32(h + 5, (uint32_t)vlen);
        weir__buf_put(&w->block, h, 9);
        weir__buf_put(&w->block, key, klen);
        weir__buf_put(&w->block, val, vlen);
        e = w->block.err;
    }
    if (!e && w->first.len == 0 && w->nh == 0) {
        weir__buf_put(&w->first, key, klen);
        e = w->first.err;
    }
    if (!e) {
        w->hashes[w->nh++] = weir_key_hash(key, klen);
        w->last.len = 0;
        weir__buf_put(&w->last, key, klen);
        e = w->last.err;
    }
    if (e)
        w->err = e;
    return e;
}

int weir__run_finish(weir__run_writer *w, uint8_t **out, size_t *len, weir__run_group **groups,
                     size_t *ngroups)
{
    *out = NULL, *groups = NULL, *len = *ngroups = 0;
    int e = w->err ? w->err : end_group(w);
    if (e) {
        w->err = e;
        return e;
    }
    *out = w->out.p ? w->out.p : weir__malloc(1);
    if (!*out)
        return w->err = -ENOMEM;
    *len = w->out.len;
    *groups = w->groups;
    *ngroups = w->ngroups;
    w->out = (weir__buf){0};
    w->groups = NULL;
    w->ngroups = w->gcap = 0;
    w->err = -EINVAL; /* spent */
    return 0;
}

void weir__run_groups_free(weir__run_group *g, size_t n)
{
    for (size_t i = 0; g && i < n; i++) {
        weir__free(g[i].first);
        weir__free(g[i].last);
    }
    weir__free(g);
}

void weir__run_writer_free(weir__run_writer *w)
{
    if (!w)
        return;
    weir__free(w->out.p);
    weir__free(w->block.p);
    weir__free(w->keys.p);
    weir__free(w->idx);
    weir__free(w->hashes);
    weir__free(w->last.p);
    weir__free(w->first.p);
    weir__run_groups_free(w->groups, w->ngroups);
    weir__free(w);
}

/* ---- reading ------------------------------------------------------------------------------------
 */
/* A section's payload, checked: 0 with *payload / *plen, or -EBADMSG. */
static int open_section(const uint8_t *p, size_t len, const uint8_t **payload, size_t *plen,
                        const char *what, char *why, size_t cap)
{
    if (why && cap)
        why[0] = '\0';
    if (len < WEIR__RUN_SECTION)
        return weir__state_fail(why, cap, "a run's %s of %zu bytes is shorter than its framing",
                                what, len);
    uint32_t n = weir__get_be32(p);
    if ((size_t)n != len - WEIR__RUN_SECTION)
        return weir__state_fail(why, cap, "a run's %s says %u bytes, %zu were read", what, n,
                                len - WEIR__RUN_SECTION);
    if (XXH64(p + 4, n, 0) != weir__get_be64(p + 4 + n))
        return weir__state_fail(why, cap, "a run's %s fails its checksum", what);
    *payload = p + 4;
    *plen = n;
    return 0;
}

typedef struct mblk {
    uint64_t off;
    uint32_t len;
    uint32_t klen;
    const uint8_t *key; /* into m->raw */
} mblk;

struct weir__run_meta {
    uint8_t *raw; /* the payload, copied */
    size_t rawlen;
    int kg;
    uint64_t entries;
    const uint8_t *bloom;
    uint32_t bloom_bytes;
    uint8_t hashes;
    mblk *blocks;
    uint32_t nblocks;
    const uint8_t *last;
    uint32_t llen;
};

int weir__run_meta_parse(const uint8_t *p, size_t len, int kg, weir__run_meta **out, char *why,
                         size_t cap)
{
    const uint8_t *pl;
    size_t n;
    int e = open_section(p, len, &pl, &n, "meta section", why, cap);
    if (e)
        return e;
    weir__run_meta *m = weir__calloc(1, sizeof(*m));
    if (!m || !(m->raw = weir__malloc(n ? n : 1))) {
        weir__free(m);
        return -ENOMEM;
    }
    memcpy(m->raw, pl, n);
    m->rawlen = n;
    weir__rd r = {m->raw, n, 0, 0};
    uint32_t gkg = weir__rd_be32(&r);
    m->entries = weir__rd_be64(&r);
    m->bloom_bytes = weir__rd_be32(&r);
    const uint8_t *h = weir__rd_take(&r, 1);
    m->hashes = h ? *h : 0;
    char bad[160] = "";
    if (r.bad)
        snprintf(bad, sizeof(bad), "cut short in its header");
    else if ((int64_t)gkg != kg)
        snprintf(bad, sizeof(bad), "it is the index of key group %u", gkg);
    else if (m->hashes < 1 || m->hashes > 16)
        snprintf(bad, sizeof(bad), "a bloom filter of %d probes", m->hashes);
    else if (!m->bloom_bytes || m->bloom_bytes > n - r.pos)
        snprintf(bad, sizeof(bad), "a bloom filter of %u bytes in %zu", m->bloom_bytes, n - r.pos);
    else if (!m->entries)
        snprintf(bad, sizeof(bad), "no entries");
    if (!*bad) {
        m->bloom = weir__rd_take(&r, m->bloom_bytes);
        m->nblocks = weir__rd_be32(&r);
        /* Each block takes 16 bytes of the index at least: a count that
         * cannot fit is refused before anything is allocated for it. */
        if (r.bad || m->nblocks == 0 || m->nblocks > (n - r.pos) / 16)
            snprintf(bad, sizeof(bad), "%u blocks that cannot fit in its %zu bytes", m->nblocks, n);
        else if (m->nblocks > m->entries)
            snprintf(bad, sizeof(bad), "%u blocks for %llu entries", m->nblocks,
                     (unsigned long long)m->entries);
    }
    if (!*bad && !(m->blocks = weir__malloc(m->nblocks * sizeof(mblk)))) {
        weir__run_meta_free(m);
        return -ENOMEM;
    }
    for (uint32_t i = 0; !*bad && i < m->nblocks; i++) {
        mblk *b = &m->blocks[i];
        b->off = weir__rd_be64(&r);
        b->len = weir__rd_be32(&r);
        b->klen = weir__rd_be32(&r);
        b->key = b->klen <= WEIR_STATE_MAX_KEY ? weir__rd_take(&r, b->klen) : NULL;
        const mblk *pb = i ? &m->blocks[i - 1] : NULL;
        if (r.bad || !b->key)
            snprintf(bad, sizeof(bad), "block %u's first key of %u bytes is cut short", i, b->klen);
        else if (b->len < WEIR__RUN_SECTION + 9 || b->off > UINT64_MAX - b->len)
            snprintf(bad, sizeof(bad), "block %u is a bad section (%u bytes at %llu)", i, b->len,
                     (unsigned long long)b->off);
        else if (pb && b->off < pb->off + pb->len)
            snprintf(bad, sizeof(bad), "block %u overlaps the one before", i);
        else if (pb && weir__key_cmp(pb->key, pb->klen, b->key, b->klen) >= 0)
            snprintf(bad, sizeof(bad), "block %u's first key not after block %u's", i, i - 1);
    }
    if (!*bad) {
        m->llen = weir__rd_be32(&r);
        m->last = m->llen <= WEIR_STATE_MAX_KEY ? weir__rd_take(&r, m->llen) : NULL;
        if (r.bad || !m->last)
            snprintf(bad, sizeof(bad), "its last key of %u bytes is cut short", m->llen);
        else if (r.pos != r.len)
            snprintf(bad, sizeof(bad), "%zu bytes after its last key", r.len - r.pos);
        else if (weir__key_cmp(m->blocks[m->nblocks - 1].key, m->blocks[m->nblocks - 1].klen,
                               m->last, m->llen) > 0)
            snprintf(bad, sizeof(bad), "its last key before its last block's first key");
    }
    if (*bad) {
        weir__run_meta_free(m);
        return weir__state_fail(why, cap, "a run's meta section of key group %d: %s", kg, bad);
    }
    m->kg = kg;
    *out = m;
    return 0;
}

void weir__run_meta_free(weir__run_meta *m)
{
    if (!m)
        return;
    weir__free(m->raw);
    weir__free(m->blocks);
    weir__free(m);
}

size_t weir__run_meta_size(const weir__run_meta *m)
{
    return sizeof(*m) + m->rawlen + m->nblocks * sizeof(mblk);
}

uint64_t weir__run_meta_entries(const weir__run_meta *m)
{
    return m->entries;
}

int weir__run_meta_maybe(const weir__run_meta *m, const void *key, size_t klen)
{
    uint64_t h = weir_key_hash(key, klen), nbits = (uint64_t)m->bloom_bytes * 8;
    uint64_t h1 = (uint32_t)h, h2 = (h >> 32) | 1;
    for (int i = 0; i < m->hashes; i++) {
        uint64_t b = (h1 + (uint64_t)i * h2) % nbits;
        if (!(m->bloom[b / 8] & (1u << (b % 8))))
            return 0;
    }
    return 1;
}

/* The last block whose first key <= key (-1: none). */
static int64_t block_at(const weir__run_meta *m, const void *key, size_t klen)
{
    int64_t lo = 0, hi = (int64_t)m->nblocks - 1, found = -1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (weir__key_cmp(m->blocks[mid].key, m->blocks[mid].klen, key, klen) <= 0) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

int weir__run_meta_block(const weir__run_meta *m, const void *key, size_t klen, uint64_t *off,
                         uint32_t *len)
{
    int64_t i = block_at(m, key, klen);
    if (i < 0 || weir__key_cmp(key, klen, m->last, m->llen) > 0)
        return -ENOENT;
    *off = m->blocks[i].off;
    *len = m->blocks[i].len;
    return 0;
}

void weir__run_meta_range(const weir__run_meta *m, const void *lo, size_t lolen, const void *hi,
                          size_t hilen, uint32_t *first, uint32_t *end)
{
    *first = *end = 0;
    if (weir__key_cmp(lo, lolen, m->last, m->llen) > 0)
        return;
    if (hi && (weir__key_cmp(hi, hilen, m->blocks[0].key, m->blocks[0].klen) <= 0 ||
               weir__key_cmp(lo, lolen, hi, hilen) >= 0))
        return; /* before the first block, or [lo, hi) is empty */
    int64_t a = block_at(m, lo, lolen);
    if (a < 0)
        a = 0;
    int64_t b = (int64_t)m->nblocks; /* past the last block whose first key < hi */
    if (hi) {
        b = 0;
        int64_t l = 0, h = (int64_t)m->nblocks - 1;
        while (l <= h) {
            int64_t mid = l + (h - l) / 2;
            if (weir__key_cmp(m->blocks[mid].key, m->blocks[mid].klen, hi, hilen) < 0) {
                b = mid + 1;
                l = mid + 1;
            } else {
                h = mid - 1;
            }
        }
    }
    if (b > a) {
        *first = (uint32_t)a;
        *end = (uint32_t)b;
    }
}

uint32_t weir__run_meta_nblocks(const weir__run_meta *m)
{
    return m->nblocks;
}

void weir__run_meta_nth(const weir__run_meta *m, uint32_t i, uint64_t *off, uint32_t *len)
{
    *off = m->blocks[i].off;
    *len = m->blocks[i].len;
}

int weir__run_block_open(weir__run_block *b, const uint8_t *p, size_t len, char *why, size_t cap)
{
    const uint8_t *pl;
    size_t n;
    int e = open_section(p, len, &pl, &n, "block", why, cap);
    if (e)
        return e;
    /* Every entry within bounds, keys ascending. */
    size_t pos = 0;
    const uint8_t *prev = NULL;
    size_t prevlen = 0;
    while (pos < n) {
        if (n - pos < 9)
            return weir__state_fail(why, cap, "a run's block is cut short in an entry header");
        uint8_t flags = pl[pos];
        uint32_t kl = weir__get_be32(pl + pos + 1), vl = weir__get_be32(pl + pos + 5);
        if (flags > 1)
            return weir__state_fail(why, cap, "a run's block has an entry of flags %u", flags);
        if (flags && vl)
            return weir__state_fail(why, cap, "a run's block has a tombstone with a value");
        if (kl > n - pos - 9 || vl > n - pos - 9 - kl)
            return weir__state_fail(why, cap, "a run's block is cut short in an entry");
        const uint8_t *k = pl + pos + 9;
        if (prev && weir__key_cmp(prev, prevlen, k, kl) >= 0)
            return weir__state_fail(why, cap, "a run's block has a key not after the one before");
        prev = k;
        prevlen = kl;
        pos += 9 + (size_t)kl + vl;
    }
    if (!n)
        return weir__state_fail(why, cap, "a run's block has no entries");
    *b = (weir__run_block){pl, n, 0};
    return 0;
}

int weir__run_block_next(weir__run_block *b, const uint8_t **key, size_t *klen, const uint8_t **val,
                         size_t *vlen, int *tombstone)
{
    if (b->pos >= b->len)
        return 0;
    const uint8_t *e = b->p + b->pos;
    uint32_t kl = weir__get_be32(e + 1), vl = weir__get_be32(e + 5);
    *tombstone = e[0] & 1;
    *key = e + 9;
    *klen = kl;
    *val = e + 9 + kl;
    *vlen = vl;
    b->pos += 9 + (size_t)kl + vl;
    return 1;
}

int weir__run_block_find(const weir__run_block *b, const void *key, size_t klen,
                         const uint8_t **val, size_t *vlen)
{
    weir__run_block it = *b;
    it.pos = 0;
    const uint8_t *k, *v;
    size_t kl, vl;
    int tomb;
    while (weir__run_block_next(&it, &k, &kl, &v, &vl, &tomb)) {
        int c = weir__key_cmp(k, kl, key, klen);
        if (c > 0)
            break;
        if (c == 0) {
            if (tomb)
                return 1;
            *val = v;
            *vlen = vl;
            return 0;
        }
    }
    return -ENOENT;
}
