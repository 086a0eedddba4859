/* SPDX-License-Identifier: Apache-2.0 */
/*
 * storage_mem.c - a store in the process's memory (storage.h): "mem://NAME".
 *
 * For tests and benchmarks of what sits on a store (the remote-read state
 * tier's pool, checkpoints): the calls of a real store without a disk or a
 * server. Not durable beyond the process. Every open of one NAME reaches
 * the same blobs, and they stay when the last store of the name is closed,
 * so a job can be stopped and started again in one process and find what
 * it wrote (as it would on an object store); the blobs of every name live
 * until the process ends.
 *
 * A sorted array of blobs per name, behind one mutex (the calls come from
 * the blocking pool's threads); a put copies, a get copies out, so no
 * caller's bytes are held past its call.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "state/storage.h"

typedef struct mblob {
    char *name;
    uint8_t *data;
    size_t len;
} mblob;

typedef struct pool {
    struct pool *next;
    char *name;
    pthread_mutex_t mu;
    mblob *v; /* sorted by name */
    size_t n, cap;
} pool;

typedef struct mem_store {
    weir__storage base;
    pool *p;
} mem_store;

/* Every name's blobs, for the process's life. */
static pthread_mutex_t pools_mu = PTHREAD_MUTEX_INITIALIZER;
static pool *pools;

/* Room for one more element of size sz in *v (capacity *cap). */
static int grow(void **v, size_t *cap, size_t sz)
{
    size_t nc = *cap ? *cap * 2 : 16;
    void *nv = weir__realloc(*v, nc * sz);
    if (!nv)
        return 0;
    *v = nv;
    *cap = nc;
    return 1;
}

static pool *pool_of(weir__storage *s)
{
    return ((mem_store *)s)->p;
}

static int mem_open(const char *where, weir__storage **out)
{
    if (strchr(where, '?'))
        return -EINVAL; /* no options: one meant for another layer, or misspelt */
    mem_store *m = weir__calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    pthread_mutex_lock(&pools_mu);
    pool *p = pools;
    while (p && strcmp(p->name, where) != 0)
        p = p->next;
    if (!p && (p = weir__calloc(1, sizeof(*p)))) {
        if ((p->name = weir__strdup(where))) {
            pthread_mutex_init(&p->mu, NULL);
            p->next = pools;
            pools = p;
        } else {
            weir__free(p);
            p = NULL;
        }
    }
    pthread_mutex_unlock(&pools_mu);
    if (!p) {
        weir__free(m);
        return -ENOMEM;
    }
    m->p = p;
    *out = &m->base;
    return 0;
}

/* The index of name, or where it would go (*found 0). */
static size_t find(const pool *p, const char *name, int *found)
{
    size_t lo = 0, hi = p->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(p->v[mid].name, name);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

static int mem_put(weir__storage *s, const char *name, const void *buf, size_t len)
{
    pool *p = pool_of(s);
    uint8_t *data = weir__malloc(len ? len : 1);
    if (!data)
        return -ENOMEM;
    if (len)
        memcpy(data, buf, len);
    pthread_mutex_lock(&p->mu);
    int found;
    size_t i = find(p, name, &found);
    if (found) {
        weir__free(p->v[i].data);
        p->v[i].data = data;
        p->v[i].len = len;
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    char *nm = weir__strdup(name);
    if (!nm || (p->n == p->cap && !grow((void **)&p->v, &p->cap, sizeof(*p->v)))) {
        pthread_mutex_unlock(&p->mu);
        weir__free(nm);
        weir__free(data);
        return -ENOMEM;
    }
    memmove(&p->v[i + 1], &p->v[i], (p->n - i) * sizeof(*p->v));
    p->v[i] = (mblob){nm, data, len};
    p->n++;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

static int mem_get(weir__storage *s, const char *name, size_t max, uint8_t **buf, size_t *len)
{
    pool *p = pool_of(s);
    pthread_mutex_lock(&p->mu);
    int found, e = 0;
    size_t i = find(p, name, &found);
    if (!found)
        e = -ENOENT;
    else if (p->v[i].len > max)
        e = -EFBIG;
    else if (!(*buf = weir__malloc(p->v[i].len ? p->v[i].len : 1)))
        e = -ENOMEM;
    if (!e) {
        memcpy(*buf, p->v[i].data, p->v[i].len);
        *len = p->v[i].len;
    }
    pthread_mutex_unlock(&p->mu);
    return e;
}

static int mem_get_range(weir__storage *s, const char *name, uint64_t off, size_t len, uint8_t *buf,
                         size_t *got)
{
    pool *p = pool_of(s);
    pthread_mutex_lock(&p->mu);
    int found;
    size_t i = find(p, name, &found);
    if (found && off < p->v[i].len) {
        *got = p->v[i].len - off < len ? (size_t)(p->v[i].len - off) : len;
        memcpy(buf, p->v[i].data + off, *got);
    }
    pthread_mutex_unlock(&p->mu);
    return found ? 0 : -ENOENT;
}

/* The names one level under prefix: blobs, and "directories" (the part up
 * to the next '/', with it) once each. Sorted blobs give them in order. */
static int mem_list(weir__storage *s, const char *prefix, weir__names *out)
{
    pool *p = pool_of(s);
    size_t pl = strlen(prefix), cap = 0;
    int found, e = 0;
    out->v = NULL;
    out->n = 0;
    pthread_mutex_lock(&p->mu);
    for (size_t i = find(p, prefix, &found); i < p->n && !e; i++) {
        const char *nm = p->v[i].name;
        if (strncmp(nm, prefix, pl) != 0)
            break;
        const char *slash = strchr(nm + pl, '/');
        size_t n = slash ? (size_t)(slash - nm) + 1 : strlen(nm);
        if (out->n && strlen(out->v[out->n - 1]) == n && memcmp(out->v[out->n - 1], nm, n) == 0)
            continue; /* the same directory again */
        char *c = weir__malloc(n + 1);
        if (!c || (out->n == cap && !grow((void **)&out->v, &cap, sizeof(*out->v)))) {
            weir__free(c);
            e = -ENOMEM;
            break;
        }
        memcpy(c, nm, n);
        c[n] = '\0';
        out->v[out->n++] = c;
    }
    pthread_mutex_unlock(&p->mu);
    if (e)
        weir__names_free(out);
    return e;
}

/* A blob, or every blob under a prefix ending in '/'. */
static int mem_del(weir__storage *s, const char *name)
{
    pool *p = pool_of(s);
    size_t nl = strlen(name);
    int found;
    pthread_mutex_lock(&p->mu);
    size_t i = find(p, name, &found), j = i;
    if (name[nl - 1] == '/')
        while (j < p->n && strncmp(p->v[j].name, name, nl) == 0)
            j++;
    else if (found)
        j = i + 1;
    for (size_t k = i; k < j; k++) {
        weir__free(p->v[k].name);
        weir__free(p->v[k].data);
    }
    memmove(&p->v[i], &p->v[j], (p->n - j) * sizeof(*p->v));
    p->n -= j - i;
    pthread_mutex_unlock(&p->mu);
    return j > i ? 0 : -ENOENT;
}

static void mem_free(weir__storage *s)
{
    weir__free(s); /* the blobs stay with their name */
}

const weir__storage_ops weir__storage_mem_ops = {
    "mem", mem_open, mem_put, mem_get, mem_list, mem_del, mem_free, mem_get_range,
};
