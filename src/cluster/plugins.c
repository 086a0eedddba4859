/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugins.c - plugins by content (plugins.h): references made from files,
 * the content-addressed cache, the per-connection shipped set and the
 * counters.
 *
 * A reference's ABI identity comes from the plugin's ELF note
 * (job/plugin_elf.c), parsed from the bytes already read for the hash, so
 * naming a plugin never runs any of its code.
 *
 * The cache trusts its own names: a file is published under <hex>.so only
 * after its bytes were hashed to that hex, and atomically, so lookups stat
 * and do not rehash. The loader (weir_plugin_open) gates what it loads
 * anyway.
 */
#include "cluster/plugins.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/afile.h"
#include "base/alloc.h"
#include "job/plugin_elf.h"

static _Atomic uint64_t st_bytes_shipped, st_ships_deduped, st_cache_hits;

void weir__plugin_stats_read(weir__plugin_stats *out)
{
    out->bytes_shipped = atomic_load_explicit(&st_bytes_shipped, memory_order_relaxed);
    out->ships_deduped = atomic_load_explicit(&st_ships_deduped, memory_order_relaxed);
    out->cache_hits = atomic_load_explicit(&st_cache_hits, memory_order_relaxed);
}

static void say(char *msg, size_t msglen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(char *msg, size_t msglen, const char *fmt, ...)
{
    if (!msg || !msglen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
}

static void clear_msg(char *msg, size_t msglen)
{
    if (msg && msglen)
        msg[0] = '\0';
}

/* ---- references ----------------------------------------------------------------------- */

void weir__plugin_ref_clear(weir__cl_plugin_ref *ref)
{
    if (!ref)
        return;
    weir__free(ref->abi.fingerprint);
    weir__free(ref->abi.target);
    weir__free(ref->abi.toolchain);
    memset(ref, 0, sizeof(*ref));
}

int weir__plugin_ref_from_bytes(const uint8_t *buf, size_t n, const char *name,
                                weir__cl_plugin_ref *ref, char *msg, size_t msglen)
{
    clear_msg(msg, msglen);
    memset(ref, 0, sizeof(*ref));
    if (n == 0) {
        say(msg, msglen, "%s: an empty file, not a weir job plugin", name);
        return -ENOEXEC;
    }
    if (n > WEIR_CLUSTER_PLUGIN_SIZE_MAX) {
        say(msg, msglen, "%s: larger than the %u bytes a plugin may have (it ships in one frame)",
            name, WEIR_CLUSTER_PLUGIN_SIZE_MAX);
        return -EFBIG;
    }
    weir__plugin_note note;
    char why[512] = "";
    int e = weir__plugin_elf_identity(buf, n, &note, why, sizeof(why));
    if (e < 0) {
        say(msg, msglen, "%s: not a weir job plugin: %s", name, why);
        return e;
    }
    /* The note's strings are bounded by the note parser, but the protocol's
     * limit is its own: hold the reference to it here, not at encode. */
    if (strlen(note.fingerprint) > WEIR_CLUSTER_ABI_STR_MAX ||
        strlen(note.target) > WEIR_CLUSTER_ABI_STR_MAX ||
        strlen(note.toolchain) > WEIR_CLUSTER_ABI_STR_MAX || note.version < 0) {
        say(msg, msglen, "%s: its ABI identity does not fit the protocol's %u-byte strings", name,
            WEIR_CLUSTER_ABI_STR_MAX);
        return -ENOEXEC;
    }
    e = weir__sha256(buf, n, ref->sha256);
    if (e < 0) {
        say(msg, msglen, "%s: SHA-256 failed", name);
        return e;
    }
    ref->size = n;
    ref->abi.version = (uint32_t)note.version;
    ref->abi.fingerprint = weir__strdup(note.fingerprint);
    ref->abi.target = weir__strdup(note.target);
    ref->abi.toolchain = weir__strdup(note.toolchain);
    if (!ref->abi.fingerprint || !ref->abi.target || !ref->abi.toolchain) {
        weir__plugin_ref_clear(ref);
        return -ENOMEM;
    }
    return 0;
}

int weir__plugin_ref_from_file(const char *path, weir__cl_plugin_ref *ref, uint8_t **bytes,
                               size_t *len, char *msg, size_t msglen)
{
    clear_msg(msg, msglen);
    if (!path || !*path || !ref || (bytes && !len))
        return -EINVAL;
    memset(ref, 0, sizeof(*ref));
    if (bytes)
        *bytes = NULL, *len = 0;
    uint8_t *buf = NULL;
    size_t n = 0;
    int e = weir__file_read_all(path, WEIR_CLUSTER_PLUGIN_SIZE_MAX, &buf, &n);
    if (e == -EFBIG) /* the same sentence */
        return weir__plugin_ref_from_bytes(NULL, WEIR_CLUSTER_PLUGIN_SIZE_MAX + (size_t)1, path,
                                           ref, msg, msglen);
    if (e < 0) {
        say(msg, msglen, "%s: %s", path, strerror(-e));
        return e;
    }
    e = weir__plugin_ref_from_bytes(buf, n, path, ref, msg, msglen);
    if (e < 0) {
        weir__free(buf);
        return e;
    }
    if (bytes)
        *bytes = buf, *len = n;
    else
        weir__free(buf);
    return 0;
}

int weir__plugin_ref_abi_check(const weir__cl_plugin_ref *ref, const weir_abi_id *host, char *msg,
                               size_t msglen)
{
    clear_msg(msg, msglen);
    if (!ref)
        return -EINVAL;
    if (!host)
        host = weir_abi_self();
    weir_abi_id id = {.fingerprint = ref->abi.fingerprint,
                      .version = ref->abi.version > INT32_MAX ? -1 : (int)ref->abi.version,
                      .target = ref->abi.target,
                      .toolchain = ref->abi.toolchain};
    char why[1024];
    int e = weir_abi_check(host, &id, why, sizeof(why));
    if (e == 0)
        return 0;
    char hex[WEIR__SHA256_HEX_SIZE];
    say(msg, msglen, "plugin %s refused before any bytes shipped: %s",
        weir__sha256_hex(ref->sha256, hex), why);
    return e;
}

/* ---- the cache ------------------------------------------------------------------------ */

struct weir__plugin_cache {
    char *dir;
    pthread_mutex_t put_lock; /* one put at a time: they share temp names */
};

int weir__plugin_cache_open(const char *dir, weir__plugin_cache **out, char *msg, size_t msglen)
{
    clear_msg(msg, msglen);
    if (!dir || !*dir || !out)
        return -EINVAL;
    *out = NULL;
    /* <dir>/.<hex>.so.tmp must fit afile's 4096-byte paths. */
    if (strlen(dir) > 4096 - (WEIR__SHA256_HEX_LEN + 16)) {
        say(msg, msglen, "plugin cache %.64s...: path too long", dir);
        return -ENAMETOOLONG;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        int e = -errno;
        say(msg, msglen, "plugin cache %s: cannot create: %s", dir, strerror(errno));
        return e;
    }
    struct stat st;
    if (stat(dir, &st) != 0) {
        int e = -errno;
        say(msg, msglen, "plugin cache %s: %s", dir, strerror(errno));
        return e;
    }
    if (!S_ISDIR(st.st_mode)) {
        say(msg, msglen, "plugin cache %s: not a directory", dir);
        return -ENOTDIR;
    }
    weir__plugin_cache *c = weir__calloc(1, sizeof(*c));
    if (!c || !(c->dir = weir__strdup(dir))) {
        weir__free(c);
        return -ENOMEM;
    }
    pthread_mutex_init(&c->put_lock, NULL);
    *out = c;
    return 0;
}

void weir__plugin_cache_free(weir__plugin_cache *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->put_lock);
    weir__free(c->dir);
    weir__free(c);
}

const char *weir__plugin_cache_dir(const weir__plugin_cache *c)
{
    return c->dir;
}

/* "<hex>.so" */
#define NAME_SIZE (WEIR__SHA256_HEX_LEN + 4)
static void entry_name(const uint8_t h[WEIR__SHA256_SIZE], char name[NAME_SIZE])
{
    char hex[WEIR__SHA256_HEX_SIZE];
    snprintf(name, NAME_SIZE, "%s.so", weir__sha256_hex(h, hex));
}

/* The entry's size, or -errno (-ENOENT: not cached). */
static int64_t entry_size(const weir__plugin_cache *c, const uint8_t h[WEIR__SHA256_SIZE])
{
    char name[NAME_SIZE], path[4096];
    entry_name(h, name);
    snprintf(path, sizeof(path), "%s/%s", c->dir, name);
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -ENOENT;
    return (int64_t)st.st_size;
}

int weir__plugin_cache_put(weir__plugin_cache *c, const uint8_t *bytes, size_t len,
                           const uint8_t sha256[WEIR__SHA256_SIZE], char *msg, size_t msglen)
{
    clear_msg(msg, msglen);
    if (!c || !sha256 || (!bytes && len))
        return -EINVAL;
    char want[WEIR__SHA256_HEX_SIZE], got[WEIR__SHA256_HEX_SIZE];
    weir__sha256_hex(sha256, want);
    if (len == 0 || len > WEIR_CLUSTER_PLUGIN_SIZE_MAX) {
        say(msg, msglen, "plugin %s: %zu bytes, outside 1..%u", want, len,
            WEIR_CLUSTER_PLUGIN_SIZE_MAX);
        return -EMSGSIZE;
    }
    uint8_t h[WEIR__SHA256_SIZE];
    int e = weir__sha256(bytes, len, h);
    if (e < 0) {
        say(msg, msglen, "plugin %s: SHA-256 failed", want);
        return e;
    }
    if (memcmp(h, sha256, WEIR__SHA256_SIZE) != 0) {
        say(msg, msglen,
            "plugin refused: its %zu bytes hash to %s, not %s as claimed (damaged or not the "
            "plugin named)",
            len, weir__sha256_hex(h, got), want);
        return -EBADMSG;
    }
    char name[NAME_SIZE];
    entry_name(h, name);
    pthread_mutex_lock(&c->put_lock);
    int64_t have = entry_size(c, h);
    if (have == (int64_t)len) {
        pthread_mutex_unlock(&c->put_lock);
        return 0;
    }
    /* Absent (or, impossibly for its own names, the wrong size: replace it). */
    e = weir__file_write_atomic(c->dir, name, bytes, len);
    pthread_mutex_unlock(&c->put_lock);
    if (e < 0)
        say(msg, msglen, "plugin %s: cannot write into the cache %s: %s", want, c->dir,
            strerror(-e));
    return e;
}

int weir__plugin_cache_lookup(weir__plugin_cache *c, const uint8_t sha256[WEIR__SHA256_SIZE],
                              char **path)
{
    if (!c || !sha256 || !path)
        return -EINVAL;
    *path = NULL;
    int64_t have = entry_size(c, sha256);
    if (have < 0)
        return (int)have;
    char name[NAME_SIZE];
    entry_name(sha256, name);
    size_t n = strlen(c->dir) + 1 + strlen(name) + 1;
    char *p = weir__malloc(n);
    if (!p)
        return -ENOMEM;
    snprintf(p, n, "%s/%s", c->dir, name);
    *path = p;
    return 0;
}

int weir__plugin_cache_missing(weir__plugin_cache *c, const weir__cl_plugin_ref *refs, size_t n,
                               weir__cl_hash **missing, size_t *nmissing, char *msg, size_t msglen)
{
    clear_msg(msg, msglen);
    if (!c || (!refs && n) || !missing || !nmissing)
        return -EINVAL;
    *missing = NULL, *nmissing = 0;
    if (n == 0)
        return 0;
    weir__cl_hash *out = NULL;
    size_t k = 0;
    uint64_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        int dup = 0;
        for (size_t j = 0; j < i && !dup; j++)
            dup = memcmp(refs[j].sha256, refs[i].sha256, WEIR__SHA256_SIZE) == 0;
        if (dup)
            continue;
        int64_t have = entry_size(c, refs[i].sha256);
        char hex[WEIR__SHA256_HEX_SIZE];
        if (have >= 0 && (uint64_t)have != refs[i].size) {
            weir__free(out);
            say(msg, msglen,
                "plugin %s: the reference says %llu bytes, the cached plugin of that hash has "
                "%lld",
                weir__sha256_hex(refs[i].sha256, hex), (unsigned long long)refs[i].size,
                (long long)have);
            return -EBADMSG;
        }
        if (have >= 0) {
            hits++;
            continue;
        }
        if (have != -ENOENT) {
            weir__free(out);
            say(msg, msglen, "plugin %s: cannot look it up in the cache %s: %s",
                weir__sha256_hex(refs[i].sha256, hex), c->dir, strerror((int)-have));
            return (int)have;
        }
        if (!out && !(out = weir__malloc(n * sizeof(*out))))
            return -ENOMEM;
        memcpy(out[k++].b, refs[i].sha256, WEIR__SHA256_SIZE);
    }
    atomic_fetch_add_explicit(&st_cache_hits, hits, memory_order_relaxed);
    *missing = out, *nmissing = k;
    return 0;
}

int weir__plugin_cache_accept(weir__plugin_cache *c, const weir__cl_deploy_plugin *p, char **path,
                              char *msg, size_t msglen)
{
    clear_msg(msg, msglen);
    if (!c || !p)
        return -EINVAL;
    if (path)
        *path = NULL;
    char hex[WEIR__SHA256_HEX_SIZE];
    weir__sha256_hex(p->sha256, hex);
    if (p->bytes.p) {
        if (p->bytes.n != p->size) {
            say(msg, msglen, "plugin %s: %u bytes shipped, the reference says %llu", hex,
                p->bytes.n, (unsigned long long)p->size);
            return -EBADMSG;
        }
        int e = weir__plugin_cache_put(c, p->bytes.p, p->bytes.n, p->sha256, msg, msglen);
        if (e < 0)
            return e;
    }
    char *got = NULL;
    int e = weir__plugin_cache_lookup(c, p->sha256, &got);
    if (e == -ENOENT)
        say(msg, msglen,
            "plugin %s (%llu bytes) was sent as a reference, but this node's cache %s does not "
            "hold it (the sender believed it was shipped here): refusing to run without it",
            hex, (unsigned long long)p->size, c->dir);
    else if (e < 0 && e != -ENOMEM)
        say(msg, msglen, "plugin %s: cannot look it up in the cache %s: %s", hex, c->dir,
            strerror(-e));
    if (e < 0)
        return e;
    if (path)
        *path = got;
    else
        weir__free(got);
    return 0;
}

/* ---- the shipped set ------------------------------------------------------------------ */

#define SHIPPED_HARD_MAX ((size_t)1 << 20)

void weir__plugin_shipped_init(weir__plugin_shipped *s, size_t max)
{
    memset(s, 0, sizeof(*s));
    s->max = max == 0 ? WEIR__PLUGIN_SHIPPED_MAX : max > SHIPPED_HARD_MAX ? SHIPPED_HARD_MAX : max;
}

void weir__plugin_shipped_clear(weir__plugin_shipped *s)
{
    weir__free(s->slot);
    weir__free(s->used);
    s->slot = NULL, s->used = NULL, s->n = 0, s->cap = 0;
}

/* The first probe: a SHA-256 is uniform, so its first bytes are a hash. */
static size_t probe0(const uint8_t h[WEIR__SHA256_SIZE], size_t cap)
{
    uint64_t v;
    memcpy(&v, h, sizeof(v));
    return (size_t)v & (cap - 1);
}

/* The slot holding h, or the empty one where it would go. */
static size_t find(const weir__plugin_shipped *s, const uint8_t h[WEIR__SHA256_SIZE])
{
    size_t i = probe0(h, s->cap);
    while (s->used[i] && memcmp(s->slot[i], h, WEIR__SHA256_SIZE) != 0)
        i = (i + 1) & (s->cap - 1);
    return i;
}

int weir__plugin_shipped_has(const weir__plugin_shipped *s, const uint8_t h[WEIR__SHA256_SIZE])
{
    if (!s->cap)
        return 0;
    return s->used[find(s, h)];
}

int weir__plugin_shipped_add(weir__plugin_shipped *s, const uint8_t h[WEIR__SHA256_SIZE])
{
    if (!s->cap) {
        size_t cap = 2;
        while (cap < 2 * s->max) /* load factor <= 1/2: probes stay short */
            cap <<= 1;
        uint8_t(*slot)[WEIR__SHA256_SIZE] = weir__malloc(cap * sizeof(*slot));
        uint8_t *used = weir__calloc(cap, 1);
        if (!slot || !used) {
            weir__free(slot);
            weir__free(used);
            return -ENOMEM;
        }
        s->slot = slot, s->used = used, s->cap = cap, s->n = 0;
    }
    size_t i = find(s, h);
    if (s->used[i])
        return 0;
    if (s->n == s->max) { /* full: forget everything, start over */
        memset(s->used, 0, s->cap);
        s->n = 0;
        s->resets++;
        i = find(s, h);
    }
    memcpy(s->slot[i], h, WEIR__SHA256_SIZE);
    s->used[i] = 1;
    s->n++;
    return 1;
}

int weir__plugin_shipped_plan(weir__plugin_shipped *s, const uint8_t h[WEIR__SHA256_SIZE],
                              uint64_t size)
{
    if (weir__plugin_shipped_has(s, h)) {
        atomic_fetch_add_explicit(&st_ships_deduped, 1, memory_order_relaxed);
        return 0;
    }
    (void)weir__plugin_shipped_add(s, h); /* -ENOMEM: unrecorded, the bytes go anyway */
    atomic_fetch_add_explicit(&st_bytes_shipped, size, memory_order_relaxed);
    return 1;
}
