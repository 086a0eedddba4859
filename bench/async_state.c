/* SPDX-License-Identifier: Apache-2.0 */
/*
 * async_state.c - what the async execution controller buys when state
 * reads take a round trip: a keyed count (one value-state read and one put
 * per record, weir_value_get_async) over a state backend whose reads take
 * LATENCY_MS each, read two ways:
 *
 *   mode=sync   the backend has no get_async: its get() sleeps the latency
 *               on the subtask's thread (a remote tier read synchronously,
 *               one record at a time);
 *   mode=async  the backend answers get_async the latency later from a
 *               thread of its own (answers in issue order), so the
 *               controller keeps up to 6000 records of distinct keys
 *               waiting at once;
 *   mode=memory the in-memory backend, no latency (the ceiling).
 *
 * and the real thing, with checkpoints every 200 ms (ckpt=1): mode=remote
 * is the remote-read backend (state/remote.c) over a directory pool that
 * answers each call LATENCY_MS later, its hot tier a tenth of the state
 * (every key comes round again only after all the others, so reads past
 * the first pass are cold); mode=remote-sync the same backend read
 * without the controller (reads=sync); mode=memory-ckpt the in-memory
 * backend with the same checkpoints, the ceiling they compare with. These
 * three are timed instead: the source runs for ASYNC_STATE_SECS seconds
 * (default 5; secs=) and events_per_s is its rate over all but the first
 * ASYNC_STATE_WARMUP seconds (default 1: the first pass over the keys, whose reads find nothing,
 * and the first checkpoints: after them the state is durable and the hot tier evicts down to its
 * budget, so the rate is the steady one).
 *
 * Each is its own weir_job_run on a 2-thread runtime at parallelism 1 (one
 * keyed subtask: the overlap is the controller's, not more subtasks'), a
 * source of EVENTS records over KEYS keys (record i has key i % KEYS), one
 * watermark per 1024 records (an epoch of the controller). events_per_s =
 * events / the run's wall time; median of BENCH_RUNS runs (default 3).
 *
 *   bench=async_state impl=weir mode=async latency_ms=1 keys=100000 events=... events_per_s=...
 *   bench=async_state impl=weir mode=remote state=remote hot=0.1 ckpt=1 latency_ms=1 keys=...
 *       events=... events_per_s=...
 *
 *   async_state [LATENCY_MS [KEYS]]   (default 1 and 100000; ASYNC_STATE_EVENTS
 *                                      sets the async and memory runs' events,
 *                                      default 400000; the sync run takes 1/100)
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "weir/rt.h"
#include "weir/state.h"
#include "weir/stream.h"

static int64_t latency_ns;
static long wm_every = 1;              /* source steps (of 1024 records) per watermark */
static int64_t warmup_ns = 1000000000; /* timed runs: what the rate leaves out */

/* ---- a backend with a round trip per read -------------------------------------------------- */
typedef struct req {
    struct req *next;
    int64_t due;
    weir_state_get_cb cb;
    void *arg;
    int err;
    size_t len;
    uint8_t val[16];
} req;

typedef struct lat {
    weir_state_backend base;
    weir_state_backend *mem;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    req *head, *tail;
    int stop;
    pthread_t th;
} lat;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ns(int64_t ns)
{
    struct timespec ts = {ns / 1000000000, ns % 1000000000};
    while (ns > 0 && nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static void *answerer(void *arg)
{
    lat *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && !l->head)
            pthread_cond_wait(&l->cv, &l->mu);
        if (!l->head)
            break;
        req *r = l->head;
        int64_t wait = r->due - now_ns();
        if (wait > 0 && !l->stop) {
            pthread_mutex_unlock(&l->mu);
            sleep_ns(wait);
            pthread_mutex_lock(&l->mu);
            continue;
        }
        if (!(l->head = r->next))
            l->tail = NULL;
        pthread_mutex_unlock(&l->mu);
        r->cb(r->arg, l->stop ? -ECANCELED : r->err, r->err ? NULL : r->val, r->len);
        free(r);
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

#define MEM(b) (((lat *)(b))->mem)
static int l_get(weir_state_backend *b, int kg, const void *k, size_t kl, const void **v,
                 size_t *vl)
{
    return MEM(b)->ops->get(MEM(b), kg, k, kl, v, vl);
}
static int l_get_slow(weir_state_backend *b, int kg, const void *k, size_t kl, const void **v,
                      size_t *vl)
{
    sleep_ns(latency_ns);
    return l_get(b, kg, k, kl, v, vl);
}
static int l_put(weir_state_backend *b, int kg, const void *k, size_t kl, const void *v, size_t vl)
{
    return MEM(b)->ops->put(MEM(b), kg, k, kl, v, vl);
}
static int l_del(weir_state_backend *b, int kg, const void *k, size_t kl)
{
    return MEM(b)->ops->del(MEM(b), kg, k, kl);
}
static int l_scan(weir_state_backend *b, int kg, const void *p, size_t pl, weir_state_scan_fn fn,
                  void *arg)
{
    return MEM(b)->ops->scan(MEM(b), kg, p, pl, fn, arg);
}
static int l_capture(weir_state_backend *b, uint64_t id, const weir_state_entry *x, size_t n,
                     weir_state_snapshot **out)
{
    return MEM(b)->ops->capture(MEM(b), id, x, n, out);
}
static int l_restore(weir_state_backend *b, const uint8_t *img, size_t len, char *why, size_t cap)
{
    return MEM(b)->ops->restore(MEM(b), img, len, why, cap);
}
static size_t l_entries(weir_state_backend *b, int kg)
{
    return MEM(b)->ops->entries(MEM(b), kg);
}

static int l_get_async(weir_state_backend *b, int kg, const void *k, size_t kl,
                       weir_state_get_cb cb, void *arg)
{
    lat *l = (lat *)b;
    req *r = malloc(sizeof(*r));
    if (!r)
        return -ENOMEM;
    const void *v;
    size_t vl = 0;
    r->err = l_get(b, kg, k, kl, &v, &vl);
    if (!r->err && vl > sizeof(r->val)) {
        free(r);
        return -EFBIG;
    }
    if (!r->err)
        memcpy(r->val, v, vl);
    r->len = r->err ? 0 : vl;
    r->cb = cb;
    r->arg = arg;
    r->next = NULL;
    r->due = now_ns() + latency_ns;
    pthread_mutex_lock(&l->mu);
    if (l->tail)
        l->tail->next = r;
    else
        l->head = r;
    l->tail = r;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return -EINPROGRESS;
}

static void l_free(weir_state_backend *b)
{
    lat *l = (lat *)b;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->th, NULL); /* answers what is queued with -ECANCELED */
    weir_state_backend_free(l->mem);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
}

static const weir_state_backend_ops async_ops = {.name = "lat",
                                                 .get = l_get,
                                                 .put = l_put,
                                                 .del = l_del,
                                                 .scan = l_scan,
                                                 .get_async = l_get_async,
                                                 .capture = l_capture,
                                                 .restore = l_restore,
                                                 .entries = l_entries,
                                                 .free = l_free};
static const weir_state_backend_ops sync_ops = {.name = "latsync",
                                                .get = l_get_slow,
                                                .put = l_put,
                                                .del = l_del,
                                                .scan = l_scan,
                                                .capture = l_capture,
                                                .restore = l_restore,
                                                .entries = l_entries,
                                                .free = l_free};

static weir_state_backend *make(void *arg, const char *uri, int ngroups, int first, int end)
{
    (void)uri;
    lat *l = calloc(1, sizeof(*l));
    if (!l || !(l->mem = weir_state_memory_new(ngroups, first, end))) {
        free(l);
        return NULL;
    }
    l->base = (weir_state_backend){arg ? &async_ops : &sync_ops, ngroups, first, end};
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    if (pthread_create(&l->th, NULL, answerer, l) != 0) {
        weir_state_backend_free(l->mem);
        free(l);
        return NULL;
    }
    return &l->base;
}

/* ---- the job ------------------------------------------------------------------------------- */
/* Timed runs (secs > 0): the source ends after secs seconds of wall time,
 * and the rate is that of its last secs - 1 seconds (report). */
typedef struct report {
    long mark_i, end_i;
    int64_t mark_t, end_t;
} report;

typedef struct gen {
    long n, keys, i;
    double secs;
    report *rep;
    int64_t t0;
} gen;

static int gen_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    gen *g = malloc(sizeof(*g));
    *g = *(const gen *)arg;
    *state = g;
    return 0;
}

static int gen_next(weir_ctx *ctx, void *state)
{
    gen *g = state;
    if (g->secs > 0) {
        int64_t t = now_ns();
        if (!g->t0)
            g->t0 = t;
        if (!g->rep->mark_t && t - g->t0 >= warmup_ns)
            g->rep->mark_t = t, g->rep->mark_i = g->i;
        if (t - g->t0 >= (int64_t)(g->secs * 1e9)) {
            g->rep->end_t = t, g->rep->end_i = g->i;
            return 1;
        }
    }
    for (int k = 0; k < 1024 && (g->secs > 0 || g->i < g->n); k++, g->i++) {
        int64_t key = g->i % g->keys;
        int e = weir_emit(ctx, &key, sizeof(key), g->i / (1024 * wm_every));
        if (e)
            return e;
    }
    return g->secs <= 0 && g->i >= g->n;
}

static int key_of(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = in->data;
    *len = sizeof(int64_t);
    return 0;
}

static int counted(weir_ctx *ctx, void *state, const weir_rec *in, int err, const void *v,
                   size_t len, void *arg)
{
    (void)state, (void)in, (void)arg;
    int64_t n = 0;
    if (err == 0 && len == 8)
        memcpy(&n, v, 8);
    else if (err && err != -ENOENT)
        return err;
    n++;
    return weir_value_put(ctx, "n", &n, 8);
}

static int count(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    return weir_value_get_async(ctx, in, "n", counted, NULL);
}

static int drop(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx, (void)state, (void)in;
    return 0;
}

typedef struct job_arg {
    const char *backend;
    gen g;
    double secs;
    int err;
    const char *ckpt; /* checkpoints every 200 ms into it (NULL: none) */
} job_arg;

static intptr_t run_job(void *arg)
{
    job_arg *a = arg;
    weir_job *j = weir_job_new("async_state");
    weir_source_def sd = {.open = gen_open, .next = gen_next, .close = free};
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "gen", &sd, &a->g), 1);
    s = weir_stream_key_by(s, key_of, NULL);
    s = weir_stream_process(s, "count", &(weir_op_def){.process = count}, NULL);
    weir_stream_sink(s, "none", &(weir_op_def){.process = drop}, NULL);
    int64_t t0 = now_ns();
    a->err = weir_job_run(j, &(weir_run_opts){.parallelism = 1,
                                              .state_backend = a->backend,
                                              .checkpoint_dir = a->ckpt,
                                              .checkpoint_interval_ms = a->ckpt ? 200 : 0});
    a->secs = (double)(now_ns() - t0) / 1e9;
    if (a->err)
        fprintf(stderr, "async_state: %s: %s\n", a->backend, weir_job_error(j));
    weir_job_free(j);
    return 0;
}

static double measure(const char *backend, long events, long keys, int ckpt, double secs)
{
    int runs = bench_runs(3);
    double v[100];
    for (int r = 0; r < runs; r++) {
        char dir[] = "/tmp/weir-async-state-XXXXXX", pool[64], uri[512];
        if (ckpt && !mkdtemp(dir))
            exit(1);
        /* A pool of its own per run: "%s" in the backend is the directory. */
        snprintf(pool, sizeof(pool), "%s/pool", dir);
        snprintf(uri, sizeof(uri), backend, pool);
        report rep = {0};
        job_arg a = {uri, {events, keys, 0, secs, &rep, 0}, 0, 0, ckpt ? dir : NULL};
        weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = 2});
        weir_task *t = rt ? weir_task_spawn(run_job, &a,
                                            &(weir_spawn_opts){.rt = rt, .stack_size = 256 * 1024})
                          : NULL;
        if (!t || weir_task_join(t, NULL, WEIR_FOREVER) != 0 || a.err)
            exit(1);
        weir_rt_free(rt);
        v[r] = secs > 0 ? (double)(rep.end_i - rep.mark_i) * 1e9 / (double)(rep.end_t - rep.mark_t)
                        : (double)events / a.secs;
        if (ckpt) {
            char cmd[128];
            snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
            if (system(cmd) != 0)
                fprintf(stderr, "async_state: could not remove %s\n", dir);
        }
    }
    return bench_median(v, runs);
}

int main(int argc, char **argv)
{
    double ms = argc > 1 ? atof(argv[1]) : 1.0;
    long keys = argc > 2 ? atol(argv[2]) : 100000;
    long events = bench_parse_long(getenv("ASYNC_STATE_EVENTS"), 400000);
    if (ms < 0 || ms > 1000 || keys <= 0 || events <= 0) {
        fprintf(stderr, "async_state: usage: async_state [LATENCY_MS [KEYS]]\n");
        return 2;
    }
    latency_ns = (int64_t)(ms * 1e6);
    /* bench_parse_long's -1 for a malformed or non-positive value would
     * give decreasing timestamps (g->i / -1024): refused instead. */
    if ((wm_every = bench_parse_long(getenv("ASYNC_STATE_WM_EVERY"), 1)) <= 0) {
        fprintf(stderr, "async_state: ASYNC_STATE_WM_EVERY must be a positive integer\n");
        return 2;
    }
    if (weir_state_backend_register("lat", make, (void *)1) ||
        weir_state_backend_register("latsync", make, NULL))
        return 1;
    /* The remote-read backend: its pool a directory answering each call
     * LATENCY_MS later, its hot tier a tenth of the state (a key's count
     * costs about 130 bytes there: key, value, state name and the entry's
     * 96), checkpoints every 200 ms so that what is written becomes
     * durable and evictable. Every key comes round again only after all
     * the others (i % KEYS): the least recently used is always the next
     * one needed, so the reads after the first pass over the keys are
     * cold. reads=sync is the same backend read without the controller. */
    char remote[256], remote_sync[256];
    long hot = keys * 13;
    snprintf(remote, sizeof(remote),
             "remote:latency://%g/file://%%s?hot_max_bytes=%ld&io_threads=64", ms, hot);
    snprintf(remote_sync, sizeof(remote_sync),
             "remote:latency://%g/file://%%s?hot_max_bytes=%ld&reads=sync", ms, hot);
    long few = events / 100 > 0 ? events / 100 : 1;
    long isecs = bench_parse_long(getenv("ASYNC_STATE_SECS"), 5);
    if (isecs < 2) {
        fprintf(stderr, "async_state: ASYNC_STATE_SECS must be an integer of 2 or more\n");
        return 2;
    }
    double secs = (double)isecs;
    long warm = bench_parse_long(getenv("ASYNC_STATE_WARMUP"), 1);
    if (warm < 1 || warm >= isecs) {
        fprintf(stderr, "async_state: ASYNC_STATE_WARMUP must be 1 .. ASYNC_STATE_SECS - 1\n");
        return 2;
    }
    warmup_ns = (int64_t)warm * 1000000000;
    struct {
        const char *mode, *backend;
        long events;
        int ckpt;
        const char *state;
        double secs;
    } m[] = {{"memory", "memory:", events, 0, NULL, 0},
             {"async", "lat:", events, 0, NULL, 0},
             {"sync", "latsync:", few, 0, NULL, 0},
             {"memory-ckpt", "memory:", 0, 1, "memory", secs},
             {"remote", remote, 0, 1, "remote", secs},
             {"remote-sync", remote_sync, 0, 1, "remote", secs}};
    const char *only = getenv("ASYNC_STATE_MODE"); /* one mode (profiling) */
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        if (only && strcmp(only, m[i].mode) != 0)
            continue;
        double eps = measure(m[i].backend, m[i].events, keys, m[i].ckpt, m[i].secs);
        int lat = strcmp(m[i].mode, "memory") && strcmp(m[i].mode, "memory-ckpt");
        printf("bench=async_state impl=weir mode=%s", m[i].mode);
        if (m[i].state)
            printf(" state=%s hot=%s ckpt=1", m[i].state,
                   strcmp(m[i].state, "remote") ? "1" : "0.1");
        printf(" latency_ms=%g keys=%ld", lat ? ms : 0.0, keys);
        if (m[i].secs > 0)
            printf(" secs=%g", m[i].secs);
        else
            printf(" events=%ld", m[i].events);
        printf(" events_per_s=%.0f\n", eps);
        fflush(stdout);
    }
    return 0;
}
