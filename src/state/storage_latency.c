/* SPDX-License-Identifier: Apache-2.0 */
/*
 * storage_latency.c - a store that adds a round trip's latency to another
 * (storage.h): "latency://MS/URI" waits MS milliseconds before each call
 * of the store URI names, "latency://MIN-MAX/URI" a uniformly random time
 * in [MIN, MAX] ms (fractions allowed: "latency://0.5/mem://x").
 *
 * For tests and benchmarks: a local directory or the in-memory store made
 * to answer as a remote object store would, so what overlaps remote reads
 * (the async execution controller, read coalescing) can be measured and
 * its failure to overlap seen. The wait is a sleep of the blocking pool's
 * thread that runs the call, before the call itself.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "state/storage.h"

/* Latencies up to a minute. */
#define MAX_NS (60 * 1000000000LL)

typedef struct lat_store {
    weir__storage base;
    weir__storage *inner;
    int64_t min_ns, max_ns;
    _Atomic uint64_t rng;
} lat_store;

/* A non-negative number of milliseconds at *p (digits, an optional
 * fraction) as nanoseconds; *p moves past it. -1: none, or out of range. */
static int64_t parse_ms(const char **p)
{
    const char *s = *p;
    int64_t ns = 0, scale = 1000000;
    int digits = 0;
    for (; *s >= '0' && *s <= '9'; s++, digits++)
        if ((ns = ns * 10 + (*s - '0') * scale) > MAX_NS)
            return -1;
    if (*s == '.')
        for (s++; *s >= '0' && *s <= '9'; s++, digits++)
            if ((scale /= 10) > 0)
                ns += (*s - '0') * scale;
    if (!digits || ns > MAX_NS) /* the fraction may still pass the bound */
        return -1;
    *p = s;
    return ns;
}

static int lat_open(const char *where, weir__storage **out)
{
    const char *p = where;
    int64_t lo = parse_ms(&p), hi = lo;
    if (lo >= 0 && *p == '-') {
        p++;
        hi = parse_ms(&p);
    }
    if (lo < 0 || hi < lo || *p != '/' || !p[1])
        return -EINVAL; /* "MS/URI" or "MIN-MAX/URI" */
    lat_store *l = weir__calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    int e = weir__storage_open(p + 1, &l->inner);
    if (e) {
        weir__free(l);
        return e;
    }
    l->min_ns = lo;
    l->max_ns = hi;
    atomic_init(&l->rng, (uint64_t)(uintptr_t)l | 1);
    *out = &l->base;
    return 0;
}

/* One round trip's wait. */
static weir__storage *trip(weir__storage *s)
{
    lat_store *l = (lat_store *)s;
    int64_t ns = l->min_ns;
    if (l->max_ns > l->min_ns) {
        uint64_t x = atomic_fetch_add_explicit(&l->rng, 0x9E3779B97F4A7C15u, memory_order_relaxed);
        x ^= x >> 31;
        x *= 0xBF58476D1CE4E5B9u;
        x ^= x >> 29;
        ns += (int64_t)(x % (uint64_t)(l->max_ns - l->min_ns + 1));
    }
    struct timespec ts = {ns / 1000000000, ns % 1000000000};
    while (ns > 0 && nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
    return l->inner;
}

static int lat_put(weir__storage *s, const char *name, const void *buf, size_t len)
{
    weir__storage *in = trip(s);
    return in->ops->put(in, name, buf, len);
}

static int lat_get(weir__storage *s, const char *name, size_t max, uint8_t **buf, size_t *len)
{
    weir__storage *in = trip(s);
    return in->ops->get(in, name, max, buf, len);
}

static int lat_list(weir__storage *s, const char *prefix, weir__names *out)
{
    weir__storage *in = trip(s);
    return in->ops->list(in, prefix, out);
}

static int lat_del(weir__storage *s, const char *name)
{
    weir__storage *in = trip(s);
    return in->ops->del(in, name);
}

static int lat_get_range(weir__storage *s, const char *name, uint64_t off, size_t len, uint8_t *buf,
                         size_t *got)
{
    return weir__storage_range_now(trip(s), name, off, len, buf, got);
}

static void lat_free(weir__storage *s)
{
    weir__storage_close(((lat_store *)s)->inner);
    weir__free(s);
}

const weir__storage_ops weir__storage_latency_ops = {
    "latency", lat_open, lat_put, lat_get, lat_list, lat_del, lat_free, lat_get_range,
};
