/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/metrics.h - a metrics registry: counters, gauges and histograms with
 * labels, rendered in the Prometheus text exposition format (version 0.0.4)
 * for a `GET /metrics` handler to send.
 *
 * The pieces. A *registry* (weir_metrics) holds metric *families*
 * (weir_metric_family), each registered once by name, help text, type and
 * label names. A family has one *child* per tuple of label values: a
 * weir_counter, weir_gauge or weir_histogram, created on first lookup and
 * kept until the registry is freed. A family without labels has exactly
 * one child, created at registration. The process-wide default registry
 * (weir_metrics_default) is the one documented global: libraries register
 * there so that one scrape sees them all; tests and embedders can make
 * their own with weir_metrics_new.
 *
 *     weir_metric_family *req;
 *     weir_metrics_register(NULL, &(weir_metric_def){
 *         .name = "http_requests_total", .help = "Requests served.",
 *         .type = WEIR_METRIC_COUNTER,
 *         .labels = WEIR_LABELS("method", "code"), .nlabels = 2}, &req, NULL);
 *     weir_counter *ok = weir_metric_counter(req, WEIR_LABELS("GET", "200"));
 *     weir_counter_inc(ok);                        (hot path: no lock)
 *
 * Threads. Updates (weir_counter_add, weir_gauge_set, weir_histogram_observe
 * ...) take no lock and never suspend: one relaxed atomic read-modify-write
 * per word touched (doubles are added by compare-and-swap on their bit
 * pattern), so concurrent updates from any threads or tasks are never lost.
 * Registration and child lookup take a mutex (a pthread mutex, not a task
 * lock: nothing inside suspends); callers on a hot path look the child up
 * once and keep the pointer. Rendering takes the registry's and each
 * family's mutex in turn, so it excludes registration and child creation
 * for a moment but never blocks an update.
 *
 * Rendering. Families come out sorted by name, children by their label
 * values (byte order, first label first), each family as `# HELP` (omitted
 * when the help text is empty), `# TYPE` and its samples; a labelled family
 * that has no child yet is left out. Label values are escaped (\\, \",
 * \n), help text too (\\, \n). Numbers: integral values print as integers
 * (`1000000`, not `1e+06`; a counter fed only whole increments prints its
 * exact uint64), others as the shortest decimal that reads back as the same
 * double, and NaN, +Inf, -Inf as the format spells them.
 *
 * Histograms. Buckets are cumulative as Prometheus wants them: `le` is an
 * inclusive upper bound (an observation equal to a bound counts in that
 * bucket), `le="+Inf"` counts everything, then `_sum` and `_count`.
 * Consistency under concurrent observes: each child keeps one counter per
 * bucket (not cumulative) and a sum; a render reads the bucket counters
 * once each and derives both the cumulative buckets and `_count` from those
 * reads, so within one render the buckets never decrease and
 * `le="+Inf"` == `_count`, always. `_sum` is read separately and may count
 * an observation or two more or fewer than `_count` while observes are in
 * flight (each observe updates its bucket, then the sum). Across the
 * children of one family, and across families, a render is not a snapshot.
 *
 * Ownership. The registry owns families and children; their pointers stay
 * valid until weir_metrics_free (never, for the default registry). Names,
 * help, label names, label values and buckets passed in are copied.
 *
 * Errors. Functions return 0 or a negative errno; functions returning a
 * pointer return NULL and set errno. weir_metrics_register also hands back
 * a static sentence saying what was wrong, for configuration loaders that
 * report to a user (weir_metric_def_check gives the same for a definition
 * on its own).
 */
#ifndef WEIR_METRICS_H
#define WEIR_METRICS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Content-Type of what weir_metrics_render produces. */
#define WEIR_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Children per family unless the registry or the definition says otherwise.
 * Label values often come from input (paths, peers); a bound turns a label
 * that explodes into an error instead of unbounded memory. */
#define WEIR_METRICS_MAX_CHILDREN_DEFAULT 10000
#define WEIR_METRICS_MAX_LABELS           16  /* label names per family */
#define WEIR_METRICS_MAX_BUCKETS          256 /* finite bucket bounds per histogram */

/* A compound literal for label names or values:
 * weir_metric_counter(f, WEIR_LABELS("GET", "200")). */
#define WEIR_LABELS(...) ((const char *const[]){__VA_ARGS__})

typedef enum weir_metric_type {
    WEIR_METRIC_COUNTER = 1,   /* only goes up (until the process restarts) */
    WEIR_METRIC_GAUGE = 2,     /* goes up and down; set to a value */
    WEIR_METRIC_HISTOGRAM = 3, /* observations counted into buckets, with a sum */
} weir_metric_type;

typedef struct weir_metrics weir_metrics;
typedef struct weir_metric_family weir_metric_family;
typedef struct weir_counter weir_counter;
typedef struct weir_gauge weir_gauge;
typedef struct weir_histogram weir_histogram;

/* ---- registry ------------------------------------------------------------------------------ */
typedef struct weir_metrics_opts {
    /* Children per family, for families whose definition says 0.
     * 0 = WEIR_METRICS_MAX_CHILDREN_DEFAULT (10000). */
    size_t max_children;
} weir_metrics_opts;

/* opts may be NULL (defaults). NULL with errno ENOMEM (or a pthread error). */
weir_metrics *weir_metrics_new(const weir_metrics_opts *opts);
/* Frees the registry, its families and children. No other call on it, its
 * families or children may run or follow. NULL is a no-op; the default
 * registry is never freed (passing it is a no-op too). */
void weir_metrics_free(weir_metrics *m);
/* The process-wide registry, created on first use (default options) and
 * never freed. NULL with errno ENOMEM if that first creation failed. Every
 * function below taking a weir_metrics * also accepts NULL for it. */
weir_metrics *weir_metrics_default(void);

/* ---- families ------------------------------------------------------------------------------ */
typedef struct weir_metric_def {
    /* [a-zA-Z_:][a-zA-Z0-9_:]*, not starting with "__" (reserved). Counter
     * names conventionally end in _total, durations in _seconds. */
    const char *name;
    /* Non-NULL, may be empty; UTF-8. */
    const char *help;
    weir_metric_type type;
    /* nlabels names, each [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__",
     * no two alike, "le" not allowed on a histogram (it names the bucket).
     * The order given is the order of the values at lookup and on output. */
    const char *const *labels;
    size_t nlabels;
    /* Histograms only (NULL for the others). Upper bounds, strictly
     * increasing and not NaN; a last bound of +Inf is accepted and dropped
     * (the +Inf bucket is always there). NULL = the Prometheus defaults,
     * in seconds: .005 .01 .025 .05 .1 .25 .5 1 2.5 5 10; see also
     * weir_metrics_buckets_exponential / _linear. */
    const double *buckets;
    size_t nbuckets;
    /* Children allowed; 0 = the registry's default. */
    size_t max_children;
} weir_metric_def;

/* NULL when the definition is valid, else a static sentence naming what is
 * wrong ("metrics: label name must match [a-zA-Z_][a-zA-Z0-9_]*"...). */
const char *weir_metric_def_check(const weir_metric_def *def);

/*
 * Register a family, or find the one already registered under that name.
 * 0 with *out set (out may be NULL); on failure *out is left alone and, if
 * why is not NULL, *why points to a static sentence:
 *   -EINVAL  the definition is invalid (weir_metric_def_check's sentence);
 *   -EEXIST  the name is taken by a different definition: another type,
 *            other label names (or order), another help text or other
 *            buckets; or it collides with the _bucket / _sum / _count
 *            series of a histogram (a counter "x_count" beside a histogram
 *            "x", either way round). An identical definition is not an
 *            error: it returns the existing family (max_children aside:
 *            the first registration's bound stays);
 *   -ENOMEM.
 */
int weir_metrics_register(weir_metrics *m, const weir_metric_def *def, weir_metric_family **out,
                          const char **why);

/*
 * The child for a tuple of label values: `values` holds one string per
 * label name, in the family's order (NULL when it has none); any UTF-8,
 * copied. The first lookup of a tuple creates the child (value 0); later
 * ones return the same pointer, valid as long as the registry. NULL with
 * errno:
 *   EINVAL  the family is of another type, values is NULL for a labelled
 *           family, a value is NULL or not valid UTF-8;
 *   ENOSPC  the family already has max_children children (existing tuples
 *           are still found);
 *   ENOMEM.
 */
weir_counter *weir_metric_counter(weir_metric_family *f, const char *const *values);
weir_gauge *weir_metric_gauge(weir_metric_family *f, const char *const *values);
weir_histogram *weir_metric_histogram(weir_metric_family *f, const char *const *values);
/* Children created so far. */
size_t weir_metric_children(weir_metric_family *f);

/* Shortcuts for families without labels: register (or find) and return the
 * only child. NULL with errno as for weir_metrics_register (EINVAL, EEXIST,
 * ENOMEM). buckets NULL = the defaults. */
weir_counter *weir_metrics_counter(weir_metrics *m, const char *name, const char *help);
weir_gauge *weir_metrics_gauge(weir_metrics *m, const char *name, const char *help);
weir_histogram *weir_metrics_histogram(weir_metrics *m, const char *name, const char *help,
                                       const double *buckets, size_t nbuckets);

/* ---- updates: lock-free, from any thread -------------------------------------------------- */
void weir_counter_inc(weir_counter *c);
void weir_counter_add(weir_counter *c, uint64_t n);
/* -EINVAL (and no change) for a negative or NaN v: counters only go up. */
int weir_counter_add_double(weir_counter *c, double v);
/* Whole increments plus fractional ones, as a double. */
double weir_counter_value(const weir_counter *c);

void weir_gauge_set(weir_gauge *g, double v);
void weir_gauge_add(weir_gauge *g, double v);
void weir_gauge_sub(weir_gauge *g, double v);
void weir_gauge_inc(weir_gauge *g);
void weir_gauge_dec(weir_gauge *g);
double weir_gauge_value(const weir_gauge *g);

/* Counts v in the first bucket whose bound is >= v (+Inf if none) and adds
 * it to the sum. NaN is counted in +Inf and makes the sum NaN, as the
 * Prometheus client libraries do. */
void weir_histogram_observe(weir_histogram *h, double v);
/* Observations so far (the sum of every bucket), and their sum. */
uint64_t weir_histogram_count(const weir_histogram *h);
double weir_histogram_sum(const weir_histogram *h);

/* ---- bucket helpers ------------------------------------------------------------------------ */
/* Fill out[0..n) with start, start*factor, start*factor^2... (start > 0,
 * factor > 1) or start, start+width... (width > 0). 0, or -EINVAL for bad
 * arguments or n outside 1..WEIR_METRICS_MAX_BUCKETS. For latencies taken
 * with weir_time_now (ns), e.g. exponential(1000, 4, 12): 1 us .. ~4.2 s in
 * nanoseconds, or observe seconds (ns / 1e9) with the default buckets. */
int weir_metrics_buckets_exponential(double start, double factor, size_t n, double *out);
int weir_metrics_buckets_linear(double start, double width, size_t n, double *out);

/* ---- rendering ----------------------------------------------------------------------------- */
/* A growable string. Zero-initialise it; render appends to it, reallocating
 * data as needed (data stays NUL-terminated, len excludes the NUL). Reuse it
 * across scrapes (set len = 0) to keep the allocation; free data with
 * weir_metrics_buf_free (or free()). */
typedef struct weir_metrics_buf {
    char *data;
    size_t len;
    size_t cap;
} weir_metrics_buf;

void weir_metrics_buf_free(weir_metrics_buf *b);

/* Append the whole registry in the text format. 0, or -ENOMEM (then len is
 * back where it was). */
int weir_metrics_render(weir_metrics *m, weir_metrics_buf *out);
/* Render and write(2) it all to fd (partial writes and EINTR resumed).
 * 0, or -ENOMEM / the write's -errno (-EAGAIN from a non-blocking fd: a
 * task serving a socket should render and send with weir_io_send). Plain
 * blocking write: from a scheduler thread it blocks the thread. */
int weir_metrics_write_fd(weir_metrics *m, int fd);

#ifdef __cplusplus
}
#endif
#endif /* WEIR_METRICS_H */
