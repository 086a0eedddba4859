/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.c - the metrics registry and its Prometheus text rendering
 * (weir/metrics.h).
 *
 * Layout. A registry keeps its families in an array sorted by name (binary
 * search at registration, already in order for rendering) under one mutex.
 * A family keeps its children twice: in a chained hash table keyed by the
 * label-value tuple, for lookup, and in an array sorted by label values, for
 * rendering, both under the family's mutex. Lock order: registry, then
 * family. Nothing is removed before weir_metrics_free, which is what lets a
 * caller keep a child pointer and update it without any lock.
 *
 * A child is one cache-line-aligned block whose first words are the values
 * updated on the hot path, so that two busy children never share a line:
 *   counter:   w0 = whole increments (uint64), w1 = fractional part (double bits)
 *   gauge:     w0 = the value (double bits)
 *   histogram: w0 = the sum (double bits), bk[0..nbounds] = per-bucket counts
 *              (not cumulative; bk[nbounds] is +Inf)
 * Every update is a relaxed atomic read-modify-write: a metric orders
 * nothing else in memory, and each word on its own never loses an update.
 * A counter keeps whole increments apart from fractional ones so that the
 * common weir_counter_inc is one fetch-add (no CAS loop) and stays exact
 * past 2^53.
 *
 * Public child types (weir_counter, weir_gauge, weir_histogram) are never
 * defined: the pointers handed out are struct mchild pointers, converted
 * back on entry.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weir/metrics.h"

#define CACHE_LINE 64

typedef struct mchild {
    _Atomic uint64_t w0;
    _Atomic uint64_t w1;
    weir_metric_family *fam;
    struct mchild *next; /* hash chain */
    uint64_t hash;
    char **values; /* fam->nlabels strings, one allocation with the pointers */
    _Atomic uint64_t bk[];
} mchild;

struct weir_metric_family {
    char *name;
    char *help;
    weir_metric_type type;
    size_t nlabels;
    char **labels;
    size_t nbounds;
    double *bounds;
    size_t max_children;

    pthread_mutex_t lock;
    mchild **table; /* hash buckets, tcap a power of two */
    size_t tcap;
    mchild **sorted; /* by label values */
    size_t n, scap;
};

struct weir_metrics {
    pthread_mutex_t lock;
    weir_metric_family **fams; /* sorted by name */
    size_t n, cap;
    size_t max_children;
};

static const double default_buckets[] = {.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10};

/* ---- helpers ------------------------------------------------------------------------------- */
static uint64_t d2u(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double u2d(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* *w += v for a double stored as its bit pattern. Relaxed: see the top. */
static void atomic_add_double(_Atomic uint64_t *w, double v)
{
    uint64_t old = atomic_load_explicit(w, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(w, &old, d2u(u2d(old) + v), memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

/* The readers take const handles; C11's atomic_load is declared on
 * non-const objects, so the const is dropped here (loads do not write). */
static uint64_t load_relaxed(const _Atomic uint64_t *w)
{
    return atomic_load_explicit((_Atomic uint64_t *)w, memory_order_relaxed);
}

static char *dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static bool valid_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        size_t n;
        uint32_t cp;
        if (c < 0x80) {
            p++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1, cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2, cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3, cp = c & 0x07;
        } else {
            return false;
        }
        for (size_t i = 1; i <= n; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return false; /* also stops at the NUL */
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        /* overlong forms, UTF-16 surrogates, beyond U+10FFFF */
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
            return false;
        p += n + 1;
    }
    return true;
}

static bool name_char(char c, bool first, bool colon)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')
        return true;
    if (colon && c == ':')
        return true;
    return !first && c >= '0' && c <= '9';
}

/* Metric names allow ':', label names do not. */
static bool valid_name(const char *s, bool colon)
{
    if (!s || !*s)
        return false;
    for (size_t i = 0; s[i]; i++)
        if (!name_char(s[i], i == 0, colon))
            return false;
    return true;
}

static bool reserved(const char *s)
{
    return s[0] == '_' && s[1] == '_';
}

/* The finite bounds of a definition: defaults for NULL, a trailing +Inf
 * dropped. Assumes a checked definition. */
static const double *def_bounds(const weir_metric_def *d, size_t *n)
{
    if (d->type != WEIR_METRIC_HISTOGRAM) {
        *n = 0;
        return NULL;
    }
    if (!d->buckets) {
        *n = sizeof default_buckets / sizeof default_buckets[0];
        return default_buckets;
    }
    *n = d->nbuckets;
    if (*n > 0 && isinf(d->buckets[*n - 1]) && d->buckets[*n - 1] > 0)
        (*n)--;
    return d->buckets;
}

/* ---- definitions ----------------------------------------------------------------------------- */
const char *weir_metric_def_check(const weir_metric_def *d)
{
    if (!d)
        return "metrics: the definition is NULL";
    if (!valid_name(d->name, true))
        return "metrics: metric name must match [a-zA-Z_:][a-zA-Z0-9_:]*";
    if (reserved(d->name))
        return "metrics: metric names starting with \"__\" are reserved";
    if (!d->help)
        return "metrics: help must not be NULL (it may be empty)";
    if (!valid_utf8(d->help))
        return "metrics: help is not valid UTF-8";
    if (d->type != WEIR_METRIC_COUNTER && d->type != WEIR_METRIC_GAUGE &&
        d->type != WEIR_METRIC_HISTOGRAM)
        return "metrics: type must be WEIR_METRIC_COUNTER, _GAUGE or _HISTOGRAM";
    if (d->nlabels > WEIR_METRICS_MAX_LABELS)
        return "metrics: too many label names (at most WEIR_METRICS_MAX_LABELS, 16)";
    if (d->nlabels > 0 && !d->labels)
        return "metrics: labels is NULL but nlabels is not 0";
    for (size_t i = 0; i < d->nlabels; i++) {
        const char *l = d->labels[i];
        if (!valid_name(l, false))
            return "metrics: label name must match [a-zA-Z_][a-zA-Z0-9_]*";
        if (reserved(l))
            return "metrics: label names starting with \"__\" are reserved";
        if (d->type == WEIR_METRIC_HISTOGRAM && strcmp(l, "le") == 0)
            return "metrics: \"le\" is reserved for a histogram's bucket bound";
        for (size_t j = 0; j < i; j++)
            if (strcmp(l, d->labels[j]) == 0)
                return "metrics: a label name appears twice";
    }
    if (d->type != WEIR_METRIC_HISTOGRAM) {
        if (d->buckets || d->nbuckets)
            return "metrics: buckets are for histograms only";
        return NULL;
    }
    if (!d->buckets) {
        if (d->nbuckets)
            return "metrics: buckets is NULL but nbuckets is not 0";
        return NULL;
    }
    if (d->nbuckets == 0)
        return "metrics: nbuckets is 0 (pass buckets = NULL for the defaults)";
    size_t n;
    const double *b = def_bounds(d, &n);
    if (n > WEIR_METRICS_MAX_BUCKETS)
        return "metrics: too many buckets (at most WEIR_METRICS_MAX_BUCKETS, 256)";
    for (size_t i = 0; i < n; i++) {
        if (isnan(b[i]) || (isinf(b[i]) && b[i] > 0))
            return "metrics: a bucket bound is NaN, or +Inf before the last";
        if (i > 0 && !(b[i] > b[i - 1]))
            return "metrics: bucket bounds must be strictly increasing";
    }
    return NULL;
}

int weir_metrics_buckets_exponential(double start, double factor, size_t n, double *out)
{
    if (!out || n < 1 || n > WEIR_METRICS_MAX_BUCKETS || !(start > 0) || !isfinite(start) ||
        !(factor > 1) || !isfinite(factor))
        return -EINVAL;
    double v = start;
    for (size_t i = 0; i < n; i++, v *= factor) {
        if (!isfinite(v))
            return -EINVAL;
        out[i] = v;
    }
    return 0;
}

int weir_metrics_buckets_linear(double start, double width, size_t n, double *out)
{
    if (!out || n < 1 || n > WEIR_METRICS_MAX_BUCKETS || !isfinite(start) || !(width > 0) ||
        !isfinite(width))
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        /* start + i*width rather than a running sum: no drift. */
        out[i] = start + (double)i * width;
        if (!isfinite(out[i]) || (i > 0 && !(out[i] > out[i - 1])))
            return -EINVAL;
    }
    return 0;
}

/* ---- registry ------------------------------------------------------------------------------ */
static weir_metrics *default_reg;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static int default_err;

static void default_init(void)
{
    default_reg = weir_metrics_new(NULL);
    if (!default_reg)
        default_err = errno;
}

weir_metrics *weir_metrics_default(void)
{
    pthread_once(&default_once, default_init);
    if (!default_reg)
        errno = default_err ? default_err : ENOMEM;
    return default_reg;
}

/* NULL = the default registry. */
static weir_metrics *reg_of(weir_metrics *m)
{
    return m ? m : weir_metrics_default();
}

weir_metrics *weir_metrics_new(const weir_metrics_opts *opts)
{
    weir_metrics *m = calloc(1, sizeof *m);
    if (!m) {
        errno = ENOMEM;
        return NULL;
    }
    int rc = pthread_mutex_init(&m->lock, NULL);
    if (rc != 0) {
        free(m);
        errno = rc;
        return NULL;
    }
    m->max_children =
        opts && opts->max_children ? opts->max_children : WEIR_METRICS_MAX_CHILDREN_DEFAULT;
    return m;
}

static void family_free(weir_metric_family *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++) {
        free(f->sorted[i]->values);
        free(f->sorted[i]);
    }
    free(f->sorted);
    free(f->table);
    for (size_t i = 0; i < f->nlabels && f->labels; i++)
        free(f->labels[i]);
    free(f->labels);
    free(f->bounds);
    free(f->help);
    free(f->name);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

void weir_metrics_free(weir_metrics *m)
{
    if (!m || m == default_reg)
        return;
    for (size_t i = 0; i < m->n; i++)
        family_free(m->fams[i]);
    free(m->fams);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* Index of the family named `name`, or where it would go (*found false).
 * Under m->lock. */
static size_t fam_find(weir_metrics *m, const char *name, size_t len, bool *found)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *mn = m->fams[mid]->name;
        int c = strncmp(mn, name, len);
        if (c == 0 && mn[len] != '\0')
            c = 1; /* mn is longer: it sorts after */
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

static weir_metric_family *fam_get(weir_metrics *m, const char *name, size_t len)
{
    bool found;
    size_t i = fam_find(m, name, len, &found);
    return found ? m->fams[i] : NULL;
}

static const char *const hist_suffixes[] = {"_bucket", "_sum", "_count"};

/* Would `name` share a series name with a histogram, or a histogram named
 * `name` with another family? Under m->lock. */
static bool series_clash(weir_metrics *m, const char *name, weir_metric_type type)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < 3; i++) {
        size_t sl = strlen(hist_suffixes[i]);
        /* name = <histogram> + suffix */
        if (len > sl && strcmp(name + len - sl, hist_suffixes[i]) == 0) {
            weir_metric_family *h = fam_get(m, name, len - sl);
            if (h && h->type == WEIR_METRIC_HISTOGRAM)
                return true;
        }
        /* name is a histogram, <name> + suffix is taken */
        if (type == WEIR_METRIC_HISTOGRAM) {
            char buf[256];
            if (len + sl < sizeof buf) {
                memcpy(buf, name, len);
                memcpy(buf + len, hist_suffixes[i], sl + 1);
                if (fam_get(m, buf, len + sl))
                    return true;
            } else {
                /* Rare: a long name. */
                char *b = malloc(len + sl + 1);
                if (!b)
                    return false; /* allocation of the family will fail too */
                memcpy(b, name, len);
                memcpy(b + len, hist_suffixes[i], sl + 1);
                bool t = fam_get(m, b, len + sl) != NULL;
                free(b);
                if (t)
                    return true;
            }
        }
    }
    return false;
}

/* Why an existing family differs from a definition, or NULL if it is the
 * same one. */
static const char *fam_differs(const weir_metric_family *f, const weir_metric_def *d)
{
    if (f->type != d->type)
        return "metrics: the name is already registered with another type";
    if (f->nlabels != d->nlabels)
        return "metrics: the name is already registered with other label names";
    for (size_t i = 0; i < f->nlabels; i++)
        if (strcmp(f->labels[i], d->labels[i]) != 0)
            return "metrics: the name is already registered with other label names";
    if (strcmp(f->help, d->help) != 0)
        return "metrics: the name is already registered with another help text";
    size_t nb;
    const double *b = def_bounds(d, &nb);
    if (nb != f->nbounds || (nb && memcmp(b, f->bounds, nb * sizeof *b) != 0))
        return "metrics: the name is already registered with other buckets";
    return NULL;
}

static mchild *child_alloc(weir_metric_family *f)
{
    size_t nbk = f->type == WEIR_METRIC_HISTOGRAM ? f->nbounds + 1 : 0;
    size_t sz = sizeof(mchild) + nbk * sizeof(_Atomic uint64_t);
    sz = (sz + CACHE_LINE - 1) & ~(size_t)(CACHE_LINE - 1); /* aligned_alloc wants a multiple */
    mchild *c = aligned_alloc(CACHE_LINE, sz);
    if (!c)
        return NULL;
    memset(c, 0, sz);
    atomic_init(&c->w0, f->type == WEIR_METRIC_COUNTER ? 0 : d2u(0.0));
    atomic_init(&c->w1, d2u(0.0));
    for (size_t i = 0; i < nbk; i++)
        atomic_init(&c->bk[i], 0);
    c->fam = f;
    return c;
}

static weir_metric_family *family_new(const weir_metric_def *d, size_t max_children)
{
    weir_metric_family *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    if (pthread_mutex_init(&f->lock, NULL) != 0) {
        free(f);
        return NULL;
    }
    f->type = d->type;
    f->max_children = d->max_children ? d->max_children : max_children;
    f->name = dupstr(d->name);
    f->help = dupstr(d->help);
    if (!f->name || !f->help)
        goto fail;
    f->nlabels = d->nlabels;
    if (d->nlabels) {
        f->labels = calloc(d->nlabels, sizeof *f->labels);
        if (!f->labels)
            goto fail;
        for (size_t i = 0; i < d->nlabels; i++)
            if (!(f->labels[i] = dupstr(d->labels[i])))
                goto fail;
    }
    size_t nb;
    const double *b = def_bounds(d, &nb);
    f->nbounds = nb;
    if (nb) {
        f->bounds = malloc(nb * sizeof *b);
        if (!f->bounds)
            goto fail;
        memcpy(f->bounds, b, nb * sizeof *b);
    }
    if (d->nlabels == 0) {
        /* The only child exists from the start, so the metric shows 0
         * before its first update. */
        f->sorted = malloc(sizeof *f->sorted);
        mchild *c = f->sorted ? child_alloc(f) : NULL;
        if (!c)
            goto fail;
        f->sorted[0] = c;
        f->n = f->scap = 1;
    }
    return f;
fail:
    family_free(f);
    return NULL;
}

int weir_metrics_register(weir_metrics *m, const weir_metric_def *def, weir_metric_family **out,
                          const char **why)
{
    const char *msg = weir_metric_def_check(def);
    if (msg) {
        if (why)
            *why = msg;
        return -EINVAL;
    }
    if (!(m = reg_of(m))) {
        if (why)
            *why = "metrics: out of memory";
        return -ENOMEM;
    }
    int rc = 0;
    pthread_mutex_lock(&m->lock);
    bool found;
    size_t at = fam_find(m, def->name, strlen(def->name), &found);
    if (found) {
        weir_metric_family *f = m->fams[at];
        if ((msg = fam_differs(f, def))) {
            rc = -EEXIST;
        } else if (out) {
            *out = f;
        }
        goto done;
    }
    if (series_clash(m, def->name, def->type)) {
        msg = "metrics: the name collides with a histogram's _bucket, _sum or _count series";
        rc = -EEXIST;
        goto done;
    }
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 16;
        weir_metric_family **nf = realloc(m->fams, cap * sizeof *nf);
        if (!nf) {
            rc = -ENOMEM;
            msg = "metrics: out of memory";
            goto done;
        }
        m->fams = nf;
        m->cap = cap;
    }
    weir_metric_family *f = family_new(def, m->max_children);
    if (!f) {
        rc = -ENOMEM;
        msg = "metrics: out of memory";
        goto done;
    }
    memmove(&m->fams[at + 1], &m->fams[at], (m->n - at) * sizeof *m->fams);
    m->fams[at] = f;
    m->n++;
    if (out)
        *out = f;
done:
    pthread_mutex_unlock(&m->lock);
    if (rc && why)
        *why = msg;
    return rc;
}

/* ---- children ------------------------------------------------------------------------------ */
/* FNV-1a over the values, each followed by a 0xff byte (which UTF-8 never
 * contains), so ("ab","c") and ("a","bc") differ. */
static uint64_t values_hash(const char *const *v, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        for (const unsigned char *p = (const unsigned char *)v[i]; *p; p++)
            h = (h ^ *p) * 0x100000001b3ull;
        h = (h ^ 0xff) * 0x100000001b3ull;
    }
    return h;
}

static int values_cmp(char *const *a, const char *const *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int c = strcmp(a[i], b[i]);
        if (c)
            return c;
    }
    return 0;
}

/* One allocation: n pointers, then the strings. */
static char **values_copy(const char *const *v, size_t n)
{
    size_t bytes = n * sizeof(char *);
    for (size_t i = 0; i < n; i++)
        bytes += strlen(v[i]) + 1;
    char **out = malloc(bytes ? bytes : 1);
    if (!out)
        return NULL;
    char *p = (char *)(out + n);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(v[i]) + 1;
        memcpy(p, v[i], l);
        out[i] = p;
        p += l;
    }
    return out;
}

/* Under f->lock. Doubles the table when it is as full as it has buckets. */
static int table_grow(weir_metric_family *f)
{
    size_t cap = f->tcap ? 2 * f->tcap : 16;
    mchild **t = calloc(cap, sizeof *t);
    if (!t)
        return -ENOMEM;
    for (size_t i = 0; i < f->n; i++) {
        mchild *c = f->sorted[i];
        size_t b = c->hash & (cap - 1);
        c->next = t[b];
        t[b] = c;
    }
    free(f->table);
    f->table = t;
    f->tcap = cap;
    return 0;
}

static mchild *child_get(weir_metric_family *f, weir_metric_type type, const char *const *values)
{
    if (!f || f->type != type) {
        errno = EINVAL;
        return NULL;
    }
    if (f->nlabels == 0)
        return f->sorted[0]; /* immutable after registration */
    if (!values) {
        errno = EINVAL;
        return NULL;
    }
    for (size_t i = 0; i < f->nlabels; i++) {
        if (!values[i] || !valid_utf8(values[i])) {
            errno = EINVAL;
            return NULL;
        }
    }
    uint64_t h = values_hash(values, f->nlabels);
    mchild *c = NULL;
    int err = 0;
    pthread_mutex_lock(&f->lock);
    if (f->tcap) {
        for (c = f->table[h & (f->tcap - 1)]; c; c = c->next)
            if (c->hash == h && values_cmp(c->values, values, f->nlabels) == 0)
                goto done;
    }
    if (f->n >= f->max_children) {
        err = ENOSPC;
        goto done;
    }
    if (f->n >= f->tcap && table_grow(f) < 0) {
        err = ENOMEM;
        goto done;
    }
    if (f->n == f->scap) {
        size_t cap = f->scap ? 2 * f->scap : 16;
        mchild **s = realloc(f->sorted, cap * sizeof *s);
        if (!s) {
            err = ENOMEM;
            goto done;
        }
        f->sorted = s;
        f->scap = cap;
    }
    c = child_alloc(f);
    if (!c || !(c->values = values_copy(values, f->nlabels))) {
        free(c);
        c = NULL;
        err = ENOMEM;
        goto done;
    }
    c->hash = h;
    size_t b = h & (f->tcap - 1);
    c->next = f->table[b];
    f->table[b] = c;
    /* Insert in label-value order: the renderer walks this array. */
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (values_cmp(f->sorted[mid]->values, values, f->nlabels) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(&f->sorted[lo + 1], &f->sorted[lo], (f->n - lo) * sizeof *f->sorted);
    f->sorted[lo] = c;
    f->n++;
done:
    pthread_mutex_unlock(&f->lock);
    if (!c)
        errno = err;
    return c;
}

weir_counter *weir_metric_counter(weir_metric_family *f, const char *const *values)
{
    return (weir_counter *)(void *)child_get(f, WEIR_METRIC_COUNTER, values);
}

weir_gauge *weir_metric_gauge(weir_metric_family *f, const char *const *values)
{
    return (weir_gauge *)(void *)child_get(f, WEIR_METRIC_GAUGE, values);
}

weir_histogram *weir_metric_histogram(weir_metric_family *f, const char *const *values)
{
    return (weir_histogram *)(void *)child_get(f, WEIR_METRIC_HISTOGRAM, values);
}

size_t weir_metric_children(weir_metric_family *f)
{
    pthread_mutex_lock(&f->lock);
    size_t n = f->n;
    pthread_mutex_unlock(&f->lock);
    return n;
}

static mchild *solo(weir_metrics *m, const weir_metric_def *d)
{
    weir_metric_family *f;
    int rc = weir_metrics_register(m, d, &f, NULL);
    if (rc < 0) {
        errno = -rc;
        return NULL;
    }
    return f->sorted[0];
}

weir_counter *weir_metrics_counter(weir_metrics *m, const char *name, const char *help)
{
    weir_metric_def d = {.name = name, .help = help, .type = WEIR_METRIC_COUNTER};
    return (weir_counter *)(void *)solo(m, &d);
}

weir_gauge *weir_metrics_gauge(weir_metrics *m, const char *name, const char *help)
{
    weir_metric_def d = {.name = name, .help = help, .type = WEIR_METRIC_GAUGE};
    return (weir_gauge *)(void *)solo(m, &d);
}

weir_histogram *weir_metrics_histogram(weir_metrics *m, const char *name, const char *help,
                                       const double *buckets, size_t nbuckets)
{
    weir_metric_def d = {.name = name,
                         .help = help,
                         .type = WEIR_METRIC_HISTOGRAM,
                         .buckets = buckets,
                         .nbuckets = nbuckets};
    return (weir_histogram *)(void *)solo(m, &d);
}

/* ---- updates --------------------------------------------------------------------------------- */
#define CHILD(p)  ((mchild *)(void *)(p))
#define CCHILD(p) ((const mchild *)(const void *)(p))

void weir_counter_inc(weir_counter *c)
{
    atomic_fetch_add_explicit(&CHILD(c)->w0, 1, memory_order_relaxed);
}

void weir_counter_add(weir_counter *c, uint64_t n)
{
    atomic_fetch_add_explicit(&CHILD(c)->w0, n, memory_order_relaxed);
}

int weir_counter_add_double(weir_counter *c, double v)
{
    if (!(v >= 0))
        return -EINVAL; /* negative or NaN */
    atomic_add_double(&CHILD(c)->w1, v);
    return 0;
}

static double counter_value(const mchild *c)
{
    return (double)load_relaxed(&c->w0) + u2d(load_relaxed(&c->w1));
}

double weir_counter_value(const weir_counter *c)
{
    return counter_value(CCHILD(c));
}

void weir_gauge_set(weir_gauge *g, double v)
{
    atomic_store_explicit(&CHILD(g)->w0, d2u(v), memory_order_relaxed);
}

void weir_gauge_add(weir_gauge *g, double v)
{
    atomic_add_double(&CHILD(g)->w0, v);
}

void weir_gauge_sub(weir_gauge *g, double v)
{
    atomic_add_double(&CHILD(g)->w0, -v);
}

void weir_gauge_inc(weir_gauge *g)
{
    atomic_add_double(&CHILD(g)->w0, 1.0);
}

void weir_gauge_dec(weir_gauge *g)
{
    atomic_add_double(&CHILD(g)->w0, -1.0);
}

double weir_gauge_value(const weir_gauge *g)
{
    return u2d(load_relaxed(&CCHILD(g)->w0));
}

void weir_histogram_observe(weir_histogram *h, double v)
{
    mchild *c = CHILD(h);
    const weir_metric_family *f = c->fam;
    /* First bound >= v; NaN compares false everywhere and lands in +Inf. */
    size_t lo = 0, hi = f->nbounds;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v <= f->bounds[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    if (isnan(v))
        lo = f->nbounds;
    atomic_fetch_add_explicit(&c->bk[lo], 1, memory_order_relaxed);
    atomic_add_double(&c->w0, v);
}

uint64_t weir_histogram_count(const weir_histogram *h)
{
    const mchild *c = CCHILD(h);
    uint64_t n = 0;
    for (size_t i = 0; i <= c->fam->nbounds; i++)
        n += load_relaxed(&c->bk[i]);
    return n;
}

double weir_histogram_sum(const weir_histogram *h)
{
    return u2d(load_relaxed(&CCHILD(h)->w0));
}

/* ---- rendering ----------------------------------------------------------------------------- */
void weir_metrics_buf_free(weir_metrics_buf *b)
{
    if (!b)
        return;
    free(b->data);
    *b = (weir_metrics_buf){0};
}

/* Appends to a buffer; the first failed allocation sticks in err and makes
 * the rest no-ops. */
typedef struct out {
    weir_metrics_buf *b;
    int err;
} out;

static void put(out *o, const char *s, size_t n)
{
    if (o->err)
        return;
    weir_metrics_buf *b = o->b;
    if (b->cap - b->len <= n || !b->data) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len <= n) {
            if (cap > SIZE_MAX / 2) {
                o->err = -ENOMEM;
                return;
            }
            cap *= 2;
        }
        char *d = realloc(b->data, cap);
        if (!d) {
            o->err = -ENOMEM;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void puts_(out *o, const char *s)
{
    put(o, s, strlen(s));
}

/* Escaped text: \ and newline always, " too inside label values. */
static void put_escaped(out *o, const char *s, bool quote)
{
    const char *run = s;
    for (; *s; s++) {
        const char *esc = NULL;
        if (*s == '\\')
            esc = "\\\\";
        else if (*s == '\n')
            esc = "\\n";
        else if (quote && *s == '"')
            esc = "\\\"";
        if (esc) {
            put(o, run, (size_t)(s - run));
            put(o, esc, 2);
            run = s + 1;
        }
    }
    put(o, run, (size_t)(s - run));
}

/*
 * A double as the text format wants it: NaN, +Inf, -Inf; an integral value
 * below 1e17 in magnitude as plain digits (exact: every such double is an
 * integer glibc prints in full); otherwise the shortest %.Ng (N = 1..17)
 * that reads back as the same double, so 0.1 is "0.1", not
 * "0.10000000000000001". Zero of either sign is "0".
 */
static void fmt_double(char buf[static 32], double v)
{
    if (isnan(v)) {
        strcpy(buf, "NaN");
        return;
    }
    if (isinf(v)) {
        strcpy(buf, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (v == 0) {
        strcpy(buf, "0");
        return;
    }
    if (fabs(v) < 1e17 && v == trunc(v)) {
        snprintf(buf, 32, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, 32, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

/* `{a="x",b="y"` plus `,le="..."` when le is set, then `}`; nothing at all
 * for no labels and no le. */
static void put_labels(out *o, const weir_metric_family *f, const mchild *c, const char *le)
{
    if (f->nlabels == 0 && !le)
        return;
    put(o, "{", 1);
    for (size_t i = 0; i < f->nlabels; i++) {
        if (i)
            put(o, ",", 1);
        puts_(o, f->labels[i]);
        put(o, "=\"", 2);
        put_escaped(o, c->values[i], true);
        put(o, "\"", 1);
    }
    if (le) {
        if (f->nlabels)
            put(o, ",", 1);
        put(o, "le=\"", 4);
        puts_(o, le);
        put(o, "\"", 1);
    }
    put(o, "}", 1);
}

static void put_sample(out *o, const weir_metric_family *f, const char *suffix, const mchild *c,
                       const char *le, const char *value)
{
    puts_(o, f->name);
    if (suffix)
        puts_(o, suffix);
    put_labels(o, f, c, le);
    put(o, " ", 1);
    puts_(o, value);
    put(o, "\n", 1);
}

static void render_child(out *o, const weir_metric_family *f, const mchild *c)
{
    char v[32];
    switch (f->type) {
    case WEIR_METRIC_COUNTER: {
        uint64_t whole = load_relaxed(&c->w0);
        double frac = u2d(load_relaxed(&c->w1));
        if (frac == 0)
            snprintf(v, sizeof v, "%" PRIu64, whole); /* exact, even past 2^53 */
        else
            fmt_double(v, (double)whole + frac);
        put_sample(o, f, NULL, c, NULL, v);
        break;
    }
    case WEIR_METRIC_GAUGE:
        fmt_double(v, u2d(load_relaxed(&c->w0)));
        put_sample(o, f, NULL, c, NULL, v);
        break;
    case WEIR_METRIC_HISTOGRAM: {
        /* Each bucket counter is read once; the cumulative counts and
         * _count all come from these reads (see the header). */
        uint64_t cum = 0;
        char le[32];
        for (size_t i = 0; i <= f->nbounds; i++) {
            cum += load_relaxed(&c->bk[i]);
            if (i < f->nbounds)
                fmt_double(le, f->bounds[i]);
            else
                strcpy(le, "+Inf");
            snprintf(v, sizeof v, "%" PRIu64, cum);
            put_sample(o, f, "_bucket", c, le, v);
        }
        fmt_double(v, u2d(load_relaxed(&c->w0)));
        put_sample(o, f, "_sum", c, NULL, v);
        snprintf(v, sizeof v, "%" PRIu64, cum);
        put_sample(o, f, "_count", c, NULL, v);
        break;
    }
    }
}

static const char *type_name(weir_metric_type t)
{
    switch (t) {
    case WEIR_METRIC_COUNTER:
        return "counter";
    case WEIR_METRIC_GAUGE:
        return "gauge";
    case WEIR_METRIC_HISTOGRAM:
        return "histogram";
    }
    return "untyped";
}

int weir_metrics_render(weir_metrics *m, weir_metrics_buf *buf)
{
    if (!buf)
        return -EINVAL;
    if (!(m = reg_of(m)))
        return -ENOMEM;
    out o = {.b = buf};
    size_t start = buf->len;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n && !o.err; i++) {
        weir_metric_family *f = m->fams[i];
        /* The family's lock keeps new children out of the array while it
         * is walked; updates to existing children go on meanwhile. */
        pthread_mutex_lock(&f->lock);
        if (f->n > 0) {
            if (f->help[0]) {
                puts_(&o, "# HELP ");
                puts_(&o, f->name);
                put(&o, " ", 1);
                put_escaped(&o, f->help, false);
                put(&o, "\n", 1);
            }
            puts_(&o, "# TYPE ");
            puts_(&o, f->name);
            put(&o, " ", 1);
            puts_(&o, type_name(f->type));
            put(&o, "\n", 1);
            for (size_t j = 0; j < f->n; j++)
                render_child(&o, f, f->sorted[j]);
        }
        pthread_mutex_unlock(&f->lock);
    }
    pthread_mutex_unlock(&m->lock);
    if (o.err) {
        buf->len = start;
        if (buf->data)
            buf->data[start] = '\0';
        return o.err;
    }
    if (!buf->data) {
        /* Empty registry into an empty buffer: still hand back a string. */
        put(&o, "", 0);
        if (o.err)
            return o.err;
    }
    return 0;
}

int weir_metrics_write_fd(weir_metrics *m, int fd)
{
    weir_metrics_buf b = {0};
    int rc = weir_metrics_render(m, &b);
    size_t off = 0;
    while (rc == 0 && off < b.len) {
        ssize_t n = write(fd, b.data + off, b.len - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
        } else {
            off += (size_t)n;
        }
    }
    weir_metrics_buf_free(&b);
    return rc;
}
