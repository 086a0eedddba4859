/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_async_ctl.c - the async execution controller on real jobs
 * (src/stream/controller_async.c): a keyed operator whose state reads go
 * to a backend that answers later, from a thread of its own, in a random
 * order.
 *
 * The "delay:" backend is the in-memory one plus get_async: each read
 * takes the value at once (on the subtask's thread) and answers it 0-200
 * us later from its thread, picking a pending read at random. "never:"
 * answers nothing until it is freed, and then hands its reads to the test,
 * which answers them after weir_job_run returned.
 *
 * The operator counts each key's records through an asynchronous read
 * (each record checks that the count it reads is its own sequence number
 * in its key: per-key order) and each key's 100-wide windows in map
 * state; event-time timers emit the windows. Checked: every record runs
 * once, in its key's order, on its subtask's thread; every window fires
 * with all its records (no watermark overtook a record still waiting);
 * the output equals the in-memory backend's; checkpoints complete and
 * their barriers wait for the records in flight; a record failing fails
 * the job naming the operator; with reads that never answer, the records
 * in flight stop at the cap, the job cancels, and the late answers are
 * harmless. A q5-shaped window job (hopping windows kept as panes) gives
 * the in-memory backend's output on every backend here and on the remote
 * one; its due timers read their state in prefetch rounds (timers.c),
 * and a cancel during a round that never answers ends the job.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "state/async_exec.h"
#include "stream/controller.h"
#include "stream/stream_int.h"
#include "test.h"
#include "commit_ids.h"
#include "scan_spy.h"
#include "test_rt.h"
#include "weir/rt.h"
#include "weir/state.h"
#include "weir/stream.h"

/* ---- the delay backend ------------------------------------------------------------------- */
typedef struct dreq {
    weir_state_get_cb cb;
    void *arg;
    int err;
    size_t vlen;
    uint8_t *val;
} dreq;

typedef struct dback {
    weir_state_backend base;
    weir_state_backend *mem;
    int never;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    dreq **q;
    size_t n, cap;
    int stop;
    pthread_t th;
    uint64_t rng;
} dback;

static _Atomic long d_async;   /* reads answered later */
static _Atomic long d_pending; /* reads not answered yet, every backend */
static _Atomic long d_max_pending;

/* never: reads handed over at free, answered by the test */
static pthread_mutex_t late_mu = PTHREAD_MUTEX_INITIALIZER;
static dreq **late;
static size_t nlate, late_cap;

static void answer_req(dreq *r, int err)
{
    atomic_fetch_sub(&d_pending, 1);
    r->cb(r->arg, err ? err : r->err, r->err || err ? NULL : r->val, r->vlen);
    free(r->val);
    free(r);
}

static void hold_late(dreq *r)
{
    pthread_mutex_lock(&late_mu);
    if (nlate == late_cap) {
        late_cap = late_cap ? late_cap * 2 : 1024;
        CHECK((late = realloc(late, late_cap * sizeof(*late))) != NULL);
    }
    late[nlate++] = r;
    pthread_mutex_unlock(&late_mu);
}

static void *d_thread(void *arg)
{
    dback *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->stop && d->n == 0)
            pthread_cond_wait(&d->cv, &d->mu);
        if (d->stop)
            break;
        d->rng = d->rng * 6364136223846793005u + 1442695040888963407u;
        unsigned us = (unsigned)(d->rng >> 33) % 200;
        pthread_mutex_unlock(&d->mu);
        if (us)
            usleep(us);
        pthread_mutex_lock(&d->mu);
        if (d->n == 0)
            continue;
        size_t i = (size_t)(d->rng >> 20) % d->n;
        dreq *r = d->q[i];
        d->q[i] = d->q[--d->n];
        pthread_mutex_unlock(&d->mu);
        answer_req(r, 0);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static weir_state_backend *mem(weir_state_backend *b)
{
    return ((dback *)b)->mem;
}

/* Synchronous reads of a window's panes entries (state "\x01p": the key
 * begins [2]["\x01p"]), and reads held from the d_hang_after-th get_async
 * on (0: none): never answered by the backend, handed to the test. */
static _Atomic long d_pane_gets, d_hang_after, d_held;
static void hold_late(dreq *r);

static int d_get(weir_state_backend *b, int kg, const void *key, size_t klen, const void **val,
                 size_t *vlen)
{
    if (klen >= 3 && ((const uint8_t *)key)[0] == 2 &&
        memcmp((const uint8_t *)key + 1, WEIR__STATE_PANES, 2) == 0)
        atomic_fetch_add(&d_pane_gets, 1);
    return mem(b)->ops->get(mem(b), kg, key, klen, val, vlen);
}

static int d_put(weir_state_backend *b, int kg, const void *key, size_t klen, const void *val,
                 size_t vlen)
{
    return mem(b)->ops->put(mem(b), kg, key, klen, val, vlen);
}

static int d_del(weir_state_backend *b, int kg, const void *key, size_t klen)
{
    return mem(b)->ops->del(mem(b), kg, key, klen);
}

static int d_scan(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                  weir_state_scan_fn fn, void *arg)
{
    return mem(b)->ops->scan(mem(b), kg, prefix, plen, fn, arg);
}

static int d_get_async(weir_state_backend *b, int kg, const void *key, size_t klen,
                       weir_state_get_cb cb, void *arg)
{
    dback *d = (dback *)b;
    dreq *r = calloc(1, sizeof(*r));
    CHECK(r != NULL);
    const void *v;
    size_t vl = 0;
    r->cb = cb;
    r->arg = arg;
    r->err = mem(b)->ops->get(mem(b), kg, key, klen, &v, &vl);
    if (!r->err && vl) {
        CHECK((r->val = malloc(vl)) != NULL);
        memcpy(r->val, v, vl);
    }
    r->vlen = r->err ? 0 : vl;
    long p = atomic_fetch_add(&d_pending, 1) + 1;
    for (long m = atomic_load(&d_max_pending); p > m;)
        if (atomic_compare_exchange_weak(&d_max_pending, &m, p))
            break;
    long nth = atomic_fetch_add(&d_async, 1) + 1, hang = atomic_load(&d_hang_after);
    if (hang && nth > hang) {
        hold_late(r);
        atomic_fetch_add(&d_held, 1);
        return -EINPROGRESS;
    }
    pthread_mutex_lock(&d->mu);
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 64;
        CHECK((d->q = realloc(d->q, d->cap * sizeof(*d->q))) != NULL);
    }
    d->q[d->n++] = r;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
    return -EINPROGRESS;
}

/* Reads in batches: each read queued as get_async queues it. */
static _Atomic long d_batches, d_batched, d_max_batch;
static _Atomic long d_big_batches; /* of more than 128 reads (more than the controller gathers) */
/* From the batch of this number on (0: never), get_batch refuses with
 * -EIO: no read started, no callback. */
static _Atomic long d_batch_fail_at;
static int d_get_batch(weir_state_backend *b, const weir_state_read *reads, size_t n,
                       weir_state_get_cb cb)
{
    long nb = atomic_fetch_add(&d_batches, 1) + 1;
    long fail_at = atomic_load(&d_batch_fail_at);
    if (fail_at && nb >= fail_at)
        return -EIO;
    atomic_fetch_add(&d_batched, (long)n);
    if (n > 128)
        atomic_fetch_add(&d_big_batches, 1);
    for (long m = atomic_load(&d_max_batch); (long)n > m;)
        if (atomic_compare_exchange_weak(&d_max_batch, &m, (long)n))
            break;
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(d_get_async(b, reads[i].kg, reads[i].key, reads[i].klen, cb, reads[i].arg),
                 -EINPROGRESS);
    return 0;
}

static int d_capture(weir_state_backend *b, uint64_t id, const weir_state_entry *extra, size_t n,
                     weir_state_snapshot **out)
{
    return mem(b)->ops->capture(mem(b), id, extra, n, out);
}

static int d_restore(weir_state_backend *b, const uint8_t *img, size_t len, char *why, size_t cap)
{
    return mem(b)->ops->restore(mem(b), img, len, why, cap);
}

static int d_restore_checked(weir_state_backend *b, const uint8_t *img, size_t len, char *why,
                             size_t cap)
{
    return mem(b)->ops->restore_checked(mem(b), img, len, why, cap);
}

static size_t d_entries(weir_state_backend *b, int kg)
{
    return mem(b)->ops->entries(mem(b), kg);
}

static int d_scan_from(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                       const void *from, size_t flen, weir_state_scan_fn fn, void *arg)
{
    return weir_state_scan_from(mem(b), kg, prefix, plen, from, flen, fn, arg);
}

static void d_free(weir_state_backend *b)
{
    dback *d = (dback *)b;
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->th, NULL);
    /* Reads still pending are answered: now (-ECANCELED), or by the test
     * after the run (never:). */
    for (size_t i = 0; i < d->n; i++) {
        if (d->never) {
            hold_late(d->q[i]);
        } else {
            answer_req(d->q[i], -ECANCELED);
        }
    }
    free(d->q);
    weir_state_backend_free(d->mem);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}

static const weir_state_backend_ops d_ops = {.name = "delay",
                                             .get = d_get,
                                             .put = d_put,
                                             .del = d_del,
                                             .scan = d_scan,
                                             .get_async = d_get_async,
                                             .capture = d_capture,
                                             .restore = d_restore,
                                             .entries = d_entries,
                                             .free = d_free,
                                             .scan_from = d_scan_from,
                                             .restore_checked = d_restore_checked};

static const weir_state_backend_ops d_batch_ops = {.name = "batch",
                                                   .get = d_get,
                                                   .put = d_put,
                                                   .del = d_del,
                                                   .scan = d_scan,
                                                   .get_async = d_get_async,
                                                   .capture = d_capture,
                                                   .restore = d_restore,
                                                   .entries = d_entries,
                                                   .free = d_free,
                                                   .scan_from = d_scan_from,
                                                   .restore_checked = d_restore_checked,
                                                   .get_batch = d_get_batch};

static weir_state_backend *d_make(void *arg, const char *uri, int ngroups, int first, int end)
{
    (void)uri;
    dback *d = calloc(1, sizeof(*d));
    CHECK(d != NULL);
    CHECK((d->mem = weir_state_memory_new(ngroups, first, end)) != NULL);
    d->base = (weir_state_backend){arg ? &d_batch_ops : &d_ops, ngroups, first, end};
    d->rng = (uint64_t)first * 7919 + 1;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    CHECK_EQ(pthread_create(&d->th, NULL, d_thread, d), 0);
    return &d->base;
}

static void *idle_thread(void *arg)
{
    dback *d = arg;
    pthread_mutex_lock(&d->mu);
    while (!d->stop)
        pthread_cond_wait(&d->cv, &d->mu);
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static weir_state_backend *never_make(void *arg, const char *uri, int ngroups, int first, int end)
{
    (void)arg, (void)uri;
    dback *d = calloc(1, sizeof(*d));
    CHECK(d != NULL);
    CHECK((d->mem = weir_state_memory_new(ngroups, first, end)) != NULL);
    d->base = (weir_state_backend){&d_ops, ngroups, first, end};
    d->never = 1;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    CHECK_EQ(pthread_create(&d->th, NULL, idle_thread, d), 0);
    return &d->base;
}

static void register_backends(void)
{
    static int done;
    if (done++)
        return;
    CHECK_EQ(weir_state_backend_register("delay", d_make, NULL), 0);
    CHECK_EQ(weir_state_backend_register("batch", d_make, (void *)1), 0);
    CHECK_EQ(weir_state_backend_register("never", never_make, NULL), 0);
}

/* ---- the job ----------------------------------------------------------------------------- */
#define KEYS 16
#define STEP 64 /* records per next(): the records of one epoch */
#define WIN  100

typedef struct ev {
    int64_t key, seq, ts;
} ev;

typedef struct gen {
    int n;       /* records in all */
    int forever; /* never end, every key new, no watermarks (the cap test) */
} gen;

typedef struct gen_state {
    const gen *g;
    int i;
    int64_t seq[KEYS];
} gen_state;

static int gen_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    gen_state *s = calloc(1, sizeof(*s));
    s->g = arg;
    *state = s;
    return 0;
}

static int gen_next(weir_ctx *ctx, void *state)
{
    gen_state *s = state;
    for (int k = 0; k < STEP && (s->g->forever || s->i < s->g->n); k++, s->i++) {
        ev e = {s->i, 0, 0};
        if (!s->g->forever)
            e = (ev){(s->i * 7) % KEYS, s->seq[(s->i * 7) % KEYS]++, s->i / 8};
        int r = weir_emit(ctx, &e, sizeof(e), e.ts);
        if (r)
            return r;
    }
    return !s->g->forever && s->i >= s->g->n;
}

static int ev_key(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = &((const ev *)in->data)->key;
    *len = sizeof(int64_t);
    return 0;
}

typedef struct op_state {
    pthread_t th;
    int64_t fail_key, fail_seq; /* the record that fails (-1: none) */
    int64_t fail_err;           /* with this error (0: -EIO) */
    int64_t fail_at_once;       /* in process(), before its read (else in the read's answer) */
} op_state;

static _Atomic int wrong_thread, wrong_order;

static int count_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    op_state *s = calloc(1, sizeof(*s));
    s->th = pthread_self();
    s->fail_key = arg ? ((const int64_t *)arg)[0] : -1;
    s->fail_seq = arg ? ((const int64_t *)arg)[1] : -1;
    s->fail_err = arg && ((const int64_t *)arg)[2] ? ((const int64_t *)arg)[2] : -EIO;
    s->fail_at_once = arg ? ((const int64_t *)arg)[3] : 0;
    *state = s;
    return 0;
}

static void count_close(void *state)
{
    free(state);
}

static int counted(weir_ctx *ctx, void *state, const weir_rec *in, int err, const void *val,
                   size_t vlen, void *arg)
{
    (void)arg;
    op_state *s = state;
    const ev *e = in->data;
    if (!pthread_equal(s->th, pthread_self()))
        atomic_store(&wrong_thread, 1);
    if (err && err != -ENOENT)
        return err;
    int64_t n = 0;
    if (!err) {
        CHECK_EQ(vlen, 8);
        memcpy(&n, val, 8);
    }
    if (n != e->seq) /* the records of a key, in their order */
        atomic_store(&wrong_order, 1);
    if (e->key == s->fail_key && e->seq == s->fail_seq)
        return (int)s->fail_err;
    n++;
    int r = weir__ns_put(ctx, "n", NULL, 0, &n, 8);
    if (r)
        return r;
    /* The record's window, counted in map state (a plain read). */
    int64_t win = e->ts - e->ts % WIN, c = 0;
    const void *v;
    size_t l;
    if (weir_map_get(ctx, "w", &win, 8, &v, &l) == 0)
        memcpy(&c, v, 8);
    c++;
    if ((r = weir_map_put(ctx, "w", &win, 8, &c, 8)))
        return r;
    int64_t out[2] = {e->key, e->seq};
    if ((r = weir_emit(ctx, out, sizeof(out), e->ts)))
        return r;
    return weir_timer_register(ctx, WEIR_TIME_EVENT, win + WIN - 1);
}

/* The failing record's reads, when it makes two (fail_at_once 2): the
 * first answer fails it; the other must never run (its record is gone). */
static _Atomic int two_reads_answered;
static int fail_cont(weir_ctx *ctx, void *state, const weir_rec *in, int err, const void *val,
                     size_t vlen, void *arg)
{
    (void)ctx, (void)err, (void)val, (void)vlen, (void)arg;
    op_state *s = state;
    const ev *e = in->data; /* the record's copy: freed once it failed */
    CHECK(e->key == s->fail_key && e->seq == s->fail_seq);
    atomic_fetch_add(&two_reads_answered, 1);
    return (int)s->fail_err;
}

static int count_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    op_state *s = state;
    const ev *e = in->data;
    if (s->fail_at_once == 2 && e->key == s->fail_key && e->seq == s->fail_seq) {
        int r = weir__ns_get_async(ctx, in, "n", NULL, 0, fail_cont, NULL);
        return r ? r : weir__ns_get_async(ctx, in, "x", NULL, 0, fail_cont, NULL);
    }
    if (s->fail_at_once == 1 && e->key == s->fail_key && e->seq == s->fail_seq)
        return (int)s->fail_err;
    return weir_value_get_async(ctx, in, "n", counted, NULL);
}

/* A window's count, read with the async call from a timer: outside
 * process() its continuation runs before the call returns. */
static int window_read(weir_ctx *ctx, void *state, const weir_rec *in, int err, const void *val,
                       size_t len, void *arg)
{
    (void)state;
    int64_t win = in->ts - (WIN - 1), c = 0, key;
    if (err && err != -ENOENT)
        return err;
    if (!err) {
        CHECK_EQ(len, 8);
        memcpy(&c, val, 8);
    }
    memcpy(&key, weir_ctx_key(ctx, NULL), 8);
    int64_t out[3] = {key, win, c};
    int r = weir_map_delete(ctx, "w", &win, 8);
    if (!r)
        r = weir_emit(ctx, out, sizeof(out), in->ts);
    *(int *)arg = 1;
    return r;
}

static int count_timer(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    (void)state, (void)domain;
    int64_t win = when - (WIN - 1);
    weir_rec at = {NULL, 0, when};
    int ran = 0;
    int r = weir_map_get_async(ctx, &at, "w", &win, 8, window_read, &ran);
    CHECK(ran);
    return r;
}

typedef struct run_args {
    const char *backend;
    int n, forever, par;
    const char *ckpt;
    int64_t *fail; /* {key, seq} or NULL */
    weir_collector *out;
    int result;
    char error[256];
    weir_ckpt_stats stats;
} run_args;

static intptr_t run_job(void *arg)
{
    run_args *a = arg;
    gen g = {a->n, a->forever};
    weir_job *j = weir_job_new("async");
    weir_source_def sd = {.open = gen_open,
                          .next = gen_next,
                          .close = free,
                          .max_out_of_orderness = a->forever ? -1 : 0};
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "gen", &sd, &g), 1);
    s = weir_stream_key_by(s, ev_key, NULL);
    weir_op_def def = {.open = count_open,
                       .process = count_process,
                       .on_timer = count_timer,
                       .close = count_close};
    s = weir_stream_process(s, "count", &def, a->fail);
    CHECK_EQ(weir_stream_collect(s, "out", a->out), 0);
    a->result = weir_job_run(j, &(weir_run_opts){.parallelism = a->par,
                                                 .state_backend = a->backend,
                                                 .checkpoint_dir = a->ckpt,
                                                 .checkpoint_interval_ms = a->ckpt ? 20 : 0});
    snprintf(a->error, sizeof(a->error), "%s", weir_job_error(j));
    weir_job_ckpt_stats(j, &a->stats);
    weir_job_free(j);
    return 0;
}

static int cmp_rec(const void *x, const void *y)
{
    const weir_rec *a = *(const weir_rec *const *)x, *b = *(const weir_rec *const *)y;
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    return memcmp(a->data, b->data, a->len);
}

/* The collected records, sorted: a canonical text to compare runs by. */
static char *canon(weir_collector *c)
{
    size_t n = weir_collector_count(c);
    const weir_rec **v = calloc(n ? n : 1, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = weir_collector_get(c, i);
    qsort(v, n, sizeof(*v), cmp_rec);
    size_t cap = n * 64 + 1, len = 0;
    char *s = malloc(cap);
    s[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        const int64_t *x = v[i]->data;
        len += (size_t)(v[i]->len == 16
                            ? snprintf(s + len, cap - len, "r %ld %ld\n", (long)x[0], (long)x[1])
                            : snprintf(s + len, cap - len, "w %ld %ld %ld\n", (long)x[0],
                                       (long)x[1], (long)x[2]));
    }
    free(v);
    return s;
}

/* Every record once, every window whole. */
static void check_output(weir_collector *c, int n)
{
    int64_t per_key[KEYS] = {0}, wins = 0, in_wins = 0;
    static int64_t want[KEYS][1000];
    memset(want, 0, sizeof(want));
    for (int i = 0; i < n; i++)
        want[(i * 7) % KEYS][(i / 8) / WIN]++;
    for (size_t i = 0; i < weir_collector_count(c); i++) {
        const weir_rec *r = weir_collector_get(c, i);
        const int64_t *x = r->data;
        if (r->len == 16) {
            per_key[x[0]]++;
        } else {
            CHECK_EQ(r->len, 24);
            CHECK_EQ(x[2], want[x[0]][x[1] / WIN]); /* the whole window */
            wins++;
            in_wins += x[2];
        }
    }
    int64_t total = 0;
    for (int k = 0; k < KEYS; k++)
        total += per_key[k];
    CHECK_EQ(total, n);
    CHECK_EQ(in_wins, n);
    CHECK_GT(wins, 0);
}

static void run_on_rt(run_args *a)
{
    CHECK_EQ(test_run_on_rt(2, run_job, a), 0);
}

TEST(records_wait_for_reads_in_key_order_and_no_watermark_overtakes_them)
{
    register_backends();
    const int n = 20000;
    atomic_store(&d_async, 0);
    atomic_store(&d_max_pending, 0);
    run_args a = {.backend = "delay:", .n = n, .par = 2, .out = weir_collector_new()};
    run_on_rt(&a);
    if (a.result)
        TEST__FAIL("run: %d %s", a.result, a.error);
    CHECK_EQ(atomic_load(&wrong_order), 0);
    CHECK_EQ(atomic_load(&wrong_thread), 0);
    CHECK_EQ(atomic_load(&d_async), n);       /* every read answered later */
    CHECK_GT(atomic_load(&d_max_pending), 2); /* and several at once */
    CHECK_EQ(atomic_load(&d_pending), 0);
    check_output(a.out, n);
    /* The same job with instant reads gives the same output. */
    run_args m = {.backend = "memory:", .n = n, .par = 2, .out = weir_collector_new()};
    run_on_rt(&m);
    CHECK_EQ(m.result, 0);
    char *x = canon(a.out), *y = canon(m.out);
    CHECK_STR(x, y);
    free(x);
    free(y);
    weir_collector_free(a.out);
    weir_collector_free(m.out);
}

TEST(checkpoint_barriers_wait_for_the_records_in_flight)
{
    register_backends();
    char dir[] = "/tmp/weir-async-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const int n = 30000;
    run_args a = {.backend = "delay:", .n = n, .par = 2, .ckpt = dir, .out = weir_collector_new()};
    run_on_rt(&a);
    if (a.result)
        TEST__FAIL("run: %d %s", a.result, a.error);
    CHECK_GT(a.stats.completed, 1);
    CHECK_EQ(atomic_load(&wrong_order), 0);
    check_output(a.out, n);
    weir_collector_free(a.out);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

TEST(a_failing_record_fails_the_job_naming_its_operator)
{
    register_backends();
    int64_t fail[4] = {3, 50, 0, 0};
    run_args a = {
        .backend = "delay:", .n = 20000, .par = 2, .fail = fail, .out = weir_collector_new()};
    run_on_rt(&a);
    CHECK_EQ(a.result, -EIO);
    CHECK_HAS(a.error, "\"count\"");
    CHECK_EQ(atomic_load(&d_pending), 0); /* the reads in flight were answered at free */
    weir_collector_free(a.out);
}

/* A record that fails at once in process(), with an error that the
 * controller's own "not taken" answers once shared (-ENOMEM at the
 * allocation, -EAGAIN at the cap): the record was taken and disposed of,
 * and must not be freed or submitted again. */
TEST(a_record_failing_at_once_with_enomem_or_eagain_is_disposed_of_once)
{
    register_backends();
    static const int64_t errs[] = {-ENOMEM, -EAGAIN, -EIO};
    for (int i = 0; i < 3; i++) {
        int64_t fail[4] = {5, 0, errs[i], 1}; /* its key's first: it runs in submit */
        run_args a = {
            .backend = "delay:", .n = 20000, .par = 1, .fail = fail, .out = weir_collector_new()};
        run_on_rt(&a);
        CHECK_EQ(a.result, (int)errs[i]);
        CHECK_HAS(a.error, "\"count\"");
        CHECK_EQ(atomic_load(&d_pending), 0);
        weir_collector_free(a.out);
    }
}

/* A record with two reads in flight fails at the first answer: the
 * second answer, which comes later, must not run (the record was disposed
 * of; under ASan a use after free otherwise). */
TEST(a_record_failing_with_a_read_still_in_flight_never_sees_its_answer)
{
    register_backends();
    int64_t fail[4] = {2, 30, -EIO, 2};
    atomic_store(&two_reads_answered, 0);
    run_args a = {
        .backend = "delay:", .n = 20000, .par = 1, .fail = fail, .out = weir_collector_new()};
    run_on_rt(&a);
    CHECK_EQ(a.result, -EIO);
    CHECK_HAS(a.error, "\"count\"");
    CHECK_EQ(atomic_load(&two_reads_answered), 1);
    CHECK_EQ(atomic_load(&d_pending), 0);
    weir_collector_free(a.out);
}

/* ---- weir_ctx_process inside a record --------------------------------------------------
 * A record of key 0 runs another record, of key 99, through
 * weir_ctx_process from its process(). That record's read must answer in
 * that record's context (its key, its bytes), not in the outer one's. */
static _Atomic int nested_ran, nested_wrong;

static int nested_cont(weir_ctx *ctx, void *state, const weir_rec *in, int err, const void *val,
                       size_t vlen, void *arg)
{
    (void)state, (void)err, (void)val, (void)vlen, (void)arg;
    const ev *e = in->data;
    int64_t key;
    memcpy(&key, weir_ctx_key(ctx, NULL), 8);
    if (e->key != 99 || key != 99)
        atomic_store(&nested_wrong, 1);
    atomic_fetch_add(&nested_ran, 1);
    return 0;
}

static int outer_cont(weir_ctx *ctx, void *state, const weir_rec *in, int err, const void *val,
                      size_t vlen, void *arg)
{
    (void)state, (void)err, (void)val, (void)vlen, (void)arg;
    const ev *e = in->data;
    int64_t key;
    memcpy(&key, weir_ctx_key(ctx, NULL), 8);
    if (e->key != key)
        atomic_store(&nested_wrong, 1);
    return 0;
}

static int nested_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    const ev *e = in->data;
    if (e->key == 99)
        return weir__ns_get_async(ctx, in, "n", NULL, 0, nested_cont, NULL);
    if (e->key == 0) {
        ev x = {99, e->seq, e->ts};
        int64_t k = 99;
        weir_rec r = {&x, sizeof(x), e->ts};
        int rc = weir_ctx_process(ctx, &k, sizeof(k), &r);
        if (rc < 0)
            return rc;
    }
    return weir__ns_get_async(ctx, in, "n", NULL, 0, outer_cont, NULL);
}

static intptr_t nested_job(void *arg)
{
    run_args *a = arg;
    gen g = {a->n, 0};
    weir_job *j = weir_job_new("async-nested");
    weir_source_def sd = {
        .open = gen_open, .next = gen_next, .close = free, .max_out_of_orderness = 0};
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "gen", &sd, &g), 1);
    s = weir_stream_key_by(s, ev_key, NULL);
    weir_op_def def = {.process = nested_process};
    CHECK_EQ(weir_stream_sink(s, "nested", &def, NULL), 0);
    a->result = weir_job_run(j, &(weir_run_opts){.parallelism = 1, .state_backend = a->backend});
    snprintf(a->error, sizeof(a->error), "%s", weir_job_error(j));
    weir_job_free(j);
    return 0;
}

TEST(a_record_run_with_weir_ctx_process_inside_another_reads_in_its_own_context)
{
    register_backends();
    atomic_store(&nested_ran, 0);
    atomic_store(&nested_wrong, 0);
    run_args a = {.backend = "delay:", .n = 2000};
    CHECK_EQ(test_run_on_rt(2, nested_job, &a), 0);
    if (a.result)
        TEST__FAIL("run: %d %s", a.result, a.error);
    CHECK_EQ(atomic_load(&nested_ran), 2000 / KEYS + (2000 % KEYS > 0)); /* key 0's records */
    CHECK_EQ(atomic_load(&nested_wrong), 0);
    CHECK_EQ(atomic_load(&d_pending), 0);
}

/* ---- an input going idle with a watermark held ------------------------------------------
 * Source a feeds the async count and then goes idle (its idle timeout);
 * source b runs on, its timestamps far later. A sink reading both sees
 * a's side go idle, so its watermark follows b's. The watermark the count
 * still held when its input went idle must go out before its IDLE, not
 * after: a watermark after IDLE makes the input active again, and the
 * sink's watermark then stands at a's forever. */
#define B_TS 1000000
static _Atomic int b_done, a_emitted;
static _Atomic int64_t sink_last, b_last; /* the sink's last watermark, b's last timestamp */

static int idle_next(weir_ctx *ctx, void *state)
{
    gen_state *s = state;
    if (s->i < s->g->n) {
        int r = gen_next(ctx, state);
        return r == 1 ? 0 : r; /* not the end: it goes idle */
    }
    atomic_store(&a_emitted, 1);
    if (atomic_load(&b_done))
        return 1;
    weir_time_sleep(WEIR_MSEC); /* idle: nothing emitted */
    return 0;
}

/* b runs on until a's records have all been answered (the count released
 * every watermark it held), then 300 steps more. */
static int b_next(weir_ctx *ctx, void *state)
{
    int *k = state; /* k[0]: steps, k[1]: steps since a's reads were all answered */
    if (atomic_load(&a_emitted) && atomic_load(&d_pending) == 0)
        k[1]++;
    if (k[1] >= 300 || k[0] >= 20000) {
        atomic_store(&b_done, 1);
        return 1;
    }
    int64_t out[2] = {-1, k[0]}, ts = B_TS + 10 * (int64_t)k[0]++;
    int r = weir_emit(ctx, out, sizeof(out), ts);
    if (r)
        return r;
    atomic_store(&b_last, ts);
    weir_time_sleep(WEIR_MSEC);
    return 0;
}

static int b_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = calloc(2, sizeof(int));
    return 0;
}

static int sink_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx, (void)state, (void)in;
    return 0;
}

static int sink_wm(weir_ctx *ctx, void *state, int64_t wm)
{
    (void)ctx, (void)state;
    if (wm != WEIR_WATERMARK_MAX)
        atomic_store(&sink_last, wm);
    return 0;
}

static intptr_t idle_job(void *arg)
{
    run_args *a = arg;
    gen g = {a->n, 0};
    weir_job *j = weir_job_new("async-idle");
    weir_source_def ad = {.open = gen_open,
                          .next = idle_next,
                          .close = free,
                          .max_out_of_orderness = 0,
                          .idle_timeout_ms = 5};
    weir_source_def bd = {.open = b_open, .next = b_next, .close = free, .max_out_of_orderness = 0};
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "a", &ad, &g), 1);
    s = weir_stream_key_by(s, ev_key, NULL);
    weir_op_def def = {.open = count_open,
                       .process = count_process,
                       .on_timer = count_timer,
                       .close = count_close};
    s = weir_stream_parallelism(weir_stream_process(s, "count", &def, NULL), 1);
    weir_stream *b = weir_stream_parallelism(weir_job_source(j, "b", &bd, NULL), 1);
    weir_stream *both[2] = {weir_stream_rebalance(s), weir_stream_rebalance(b)};
    weir_op_def sd = {.process = sink_process, .on_watermark = sink_wm};
    CHECK_EQ(weir_stream_sink(weir_stream_union(both, 2), "sink", &sd, NULL), 0);
    a->result = weir_job_run(j, &(weir_run_opts){.parallelism = 1, .state_backend = a->backend});
    snprintf(a->error, sizeof(a->error), "%s", weir_job_error(j));
    weir_job_free(j);
    return 0;
}

TEST(an_input_going_idle_sends_its_held_watermark_before_its_idle)
{
    register_backends();
    static const char *const backends[] = {"memory:", "delay:"}; /* the first: the reference */
    for (int i = 0; i < 2; i++) {
        atomic_store(&b_done, 0);
        atomic_store(&a_emitted, 0);
        atomic_store(&sink_last, 0);
        run_args a = {.backend = backends[i], .n = 8000};
        CHECK_EQ(test_run_on_rt(2, idle_job, &a), 0);
        if (a.result)
            TEST__FAIL("run on %s: %d %s", backends[i], a.result, a.error);
        /* The sink's watermark followed b's to its end (100 steps' slack). */
        int64_t lag = atomic_load(&b_last) - atomic_load(&sink_last);
        if (lag > 1000)
            TEST__FAIL("on %s: the sink's watermark stood %ld below b's", backends[i], (long)lag);
        CHECK_EQ(atomic_load(&d_pending), 0);
    }
}

/* ---- reads that never answer: the cap ----------------------------------------------------- */
static intptr_t cap_main(void *arg)
{
    run_args *a = arg;
    weir_task *t = weir_task_spawn(run_job, a, NULL);
    CHECK(t != NULL);
    /* The reads in flight reach the cap, then the subtask stops taking
     * input (the source is unbounded). */
    int64_t give_up = weir_time_after_ms(30000);
    while (atomic_load(&d_pending) < WEIR__AEC_MAX_IN_FLIGHT) {
        CHECK(weir_time_now() < give_up);
        weir_time_sleep(WEIR_MSEC);
    }
    /* The source runs on; a while later the count has not moved. */
    for (int i = 0; i < 50; i++)
        weir_time_sleep(WEIR_MSEC);
    CHECK_EQ(atomic_load(&d_pending), WEIR__AEC_MAX_IN_FLIGHT);
    CHECK_EQ(weir_task_cancel(t), 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), -ECANCELED); /* it ran to its end */
    return 0;
}

TEST(with_reads_that_never_answer_the_records_in_flight_stop_at_the_cap)
{
    register_backends();
    atomic_store(&d_pending, 0);
    atomic_store(&d_max_pending, 0);
    run_args a = {.backend = "never:", .forever = 1, .par = 1, .out = weir_collector_new()};
    CHECK_EQ(test_run_on_rt(2, cap_main, &a), 0);
    CHECK_EQ(a.result, -ECANCELED);
    CHECK_EQ(atomic_load(&d_max_pending), WEIR__AEC_MAX_IN_FLIGHT);
    /* The run is over: its reads answer now, and nothing happens. */
    CHECK_EQ(nlate, WEIR__AEC_MAX_IN_FLIGHT);
    for (size_t i = 0; i < nlate; i++)
        answer_req(late[i], 0);
    free(late);
    late = NULL;
    nlate = late_cap = 0;
    CHECK_EQ(weir_collector_count(a.out), 0);
    weir_collector_free(a.out);
}

/* ---- the built-in keyed operators on reads that answer later ------------------------------ */
/* reduce, aggregate, tumbling and hopping windows (lateness, late records
 * to the side) over out-of-order input: the "delay:" backend gives what
 * the in-memory one gives. */
enum { OPS_REDUCE, OPS_AGG, OPS_TUMBLING, OPS_HOPPING };

typedef struct oo_state {
    int i, n;
} oo_state;

static int oo_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    oo_state *s = calloc(1, sizeof(*s));
    s->n = (int)(intptr_t)arg;
    *state = s;
    return 0;
}

/* Times run forward with a jitter of 0-39 against a bound of 10: some
 * records are late, some beyond their window's lateness. */
static int oo_next(weir_ctx *ctx, void *state)
{
    oo_state *s = state;
    for (int k = 0; k < STEP && s->i < s->n; k++, s->i++) {
        uint32_t h = (uint32_t)s->i * 2654435761u;
        ev e = {(s->i * 5) % KEYS, s->i % 97, s->i / 4 + (int64_t)(h >> 26) % 40};
        int r = weir_emit(ctx, &e, sizeof(e), e.ts);
        if (r)
            return r;
    }
    return s->i >= s->n;
}

static _Thread_local ev sum_out;
static int sum_ev(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    (void)arg;
    const ev *a = acc->data, *b = in->data;
    sum_out = (ev){b->key, a->seq + b->seq, b->ts};
    *out = (weir_rec){&sum_out, sizeof(sum_out), in->ts};
    return 0;
}

static _Thread_local int64_t agg_out[2];
static int agg_add(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    (void)arg;
    int64_t a[2] = {0, 0};
    if (acc)
        memcpy(a, acc->data, sizeof(a));
    agg_out[0] = a[0] + ((const ev *)in->data)->seq;
    agg_out[1] = a[1] + 1;
    *out = (weir_rec){agg_out, sizeof(agg_out), in->ts};
    return 0;
}

static intptr_t run_ops_job(void *arg)
{
    run_args *a = arg;
    weir_job *j = weir_job_new("async-ops");
    weir_source_def sd = {
        .open = oo_open, .next = oo_next, .close = free, .max_out_of_orderness = 10};
    weir_stream *s =
        weir_stream_parallelism(weir_job_source(j, "gen", &sd, (void *)(intptr_t)a->n), 1);
    s = weir_stream_key_by(s, ev_key, NULL);
    static const weir_agg_def agg = {.add = agg_add};
    weir_window tw = {.kind = WEIR_WINDOW_TUMBLING, .size = 50, .allowed_lateness = 5};
    weir_window hw = {.kind = WEIR_WINDOW_HOPPING, .size = 30, .slide = 20, .allowed_lateness = 10};
    switch (a->forever) { /* the kind of operator */
    case OPS_REDUCE:
        s = weir_stream_reduce(s, "op", sum_ev, NULL);
        break;
    case OPS_AGG:
        s = weir_stream_aggregate(s, "op", &agg, NULL);
        break;
    default:
        s = weir_stream_window(s, "op", a->forever == OPS_TUMBLING ? &tw : &hw, sum_ev, NULL);
        CHECK_EQ(weir_stream_collect(weir_stream_side(s), "late", a->out), 0);
    }
    CHECK_EQ(weir_stream_collect(s, "out", a->out), 0);
    a->result =
        weir_job_run(j, &(weir_run_opts){.parallelism = a->par, .state_backend = a->backend});
    snprintf(a->error, sizeof(a->error), "%s", weir_job_error(j));
    weir_job_free(j);
    return 0;
}

/* Sorted records as hex lines. */
static char *canon_bytes(weir_collector *c)
{
    size_t n = weir_collector_count(c);
    const weir_rec **v = calloc(n ? n : 1, sizeof(*v));
    size_t cap = 1;
    for (size_t i = 0; i < n; i++) {
        v[i] = weir_collector_get(c, i);
        cap += v[i]->len * 2 + 1;
    }
    qsort(v, n, sizeof(*v), cmp_rec);
    char *s = malloc(cap), *p = s;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < v[i]->len; k++)
            p += sprintf(p, "%02x", ((const uint8_t *)v[i]->data)[k]);
        *p++ = '\n';
    }
    *p = '\0';
    free(v);
    return s;
}

TEST(reduce_aggregate_and_windows_give_the_same_results_on_reads_that_answer_later)
{
    register_backends();
    static const char *names[] = {"reduce", "aggregate", "tumbling", "hopping"};
    for (int kind = OPS_REDUCE; kind <= OPS_HOPPING; kind++) {
        long async_before = atomic_load(&d_async);
        run_args d = {.backend = "delay:",
                      .n = 12000,
                      .par = 2,
                      .forever = kind,
                      .out = weir_collector_new()};
        run_args m = {.backend = "memory:",
                      .n = 12000,
                      .par = 2,
                      .forever = kind,
                      .out = weir_collector_new()};
        CHECK_EQ(test_run_on_rt(2, run_ops_job, &d), 0);
        CHECK_EQ(test_run_on_rt(2, run_ops_job, &m), 0);
        if (d.result || m.result)
            TEST__FAIL("%s: %d %s / %d %s", names[kind], d.result, d.error, m.result, m.error);
        CHECK_GT(atomic_load(&d_async) - async_before, 6000); /* the reads went async */
        CHECK_GT(weir_collector_count(m.out), 100);
        if (kind >= OPS_TUMBLING) { /* some records were late beyond the lateness */
            size_t late_n = 0;
            for (size_t i = 0; i < weir_collector_count(m.out); i++)
                late_n += weir_collector_get(m.out, i)->len == sizeof(ev);
            CHECK_GT(late_n, 0);
        }
        char *x = canon_bytes(d.out), *y = canon_bytes(m.out);
        if (strcmp(x, y) != 0)
            TEST__FAIL("%s: %zu records on delay:, %zu on memory:, not the same", names[kind],
                       weir_collector_count(d.out), weir_collector_count(m.out));
        free(x);
        free(y);
        weir_collector_free(d.out);
        weir_collector_free(m.out);
    }
}

/* ---- the async calls on a backend that answers at once ------------------------------------ */
static int inline_read(weir_ctx *ctx, void *state, const weir_rec *in, int err, const void *val,
                       size_t len, void *arg)
{
    (void)state, (void)val, (void)len;
    const ev *e = in->data;
    CHECK(err == 0 || err == -ENOENT);
    *(int *)arg = 1;
    int64_t n = e->seq + 1;
    return weir_value_put(ctx, "n", &n, 8);
}

static int inline_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    int ran = 0;
    CHECK_EQ(weir_value_get_async(ctx, in, "n", NULL, NULL), -EINVAL);
    CHECK_EQ(weir_value_get_async(ctx, NULL, "n", inline_read, &ran), -EINVAL);
    int r = weir_value_get_async(ctx, in, "n", inline_read, &ran);
    CHECK(ran); /* before the call returned */
    return r ? r : weir_emit(ctx, in->data, in->len, in->ts);
}

static intptr_t inline_main(void *arg)
{
    (void)arg;
    gen g = {3000, 0};
    weir_job *j = weir_job_new("inline");
    weir_source_def sd = {.open = gen_open, .next = gen_next, .close = free};
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "gen", &sd, &g), 1);
    s = weir_stream_key_by(s, ev_key, NULL);
    s = weir_stream_process(s, "p", &(weir_op_def){.process = inline_process}, NULL);
    weir_collector *c = weir_collector_new();
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.parallelism = 2}), 0);
    CHECK_EQ(weir_collector_count(c), 3000);
    weir_collector_free(c);
    weir_job_free(j);
    return 0;
}

TEST(on_the_memory_backend_an_async_read_answers_before_it_returns)
{
    CHECK_EQ(test_run_on_rt(2, inline_main, NULL), 0);
}

/* A backend with get_batch gets the reads of records waiting together in
 * one call: fewer round trips than reads, the same results. */
TEST(reads_of_records_waiting_together_go_out_in_one_batch)
{
    register_backends();
    const int n = 20000;
    atomic_store(&wrong_order, 0);
    atomic_store(&d_async, 0);
    run_args a = {.backend = "batch:", .n = n, .par = 2, .out = weir_collector_new()};
    run_on_rt(&a);
    if (a.result)
        TEST__FAIL("run: %d %s", a.result, a.error);
    CHECK_EQ(atomic_load(&wrong_order), 0);
    check_output(a.out, n);
    CHECK_EQ(atomic_load(&d_batched), n); /* every read in a batch */
    /* A round of an epoch's keys goes out together (8 keys per subtask);
     * answers coming back one by one start one record each. */
    CHECK_GE(atomic_load(&d_max_batch), 4);
    CHECK_LT(atomic_load(&d_batches), n);
    CHECK_EQ(atomic_load(&d_pending), 0);
    weir_collector_free(a.out);
}

/* A get_batch that refuses (no read started): each of its reads answers
 * with the error, so the records fail the job with it - no record left
 * waiting for an answer that never comes, nothing left over (ASan). */
TEST(a_batch_the_backend_refuses_fails_the_job_with_its_error)
{
    register_backends();
    atomic_store(&d_batches, 0);
    atomic_store(&d_batch_fail_at, 3);
    run_args a = {.backend = "batch:", .n = 20000, .par = 2, .out = weir_collector_new()};
    run_on_rt(&a);
    atomic_store(&d_batch_fail_at, 0);
    CHECK_EQ(a.result, -EIO);
    CHECK_HAS(a.error, "\"count\"");
    CHECK_EQ(atomic_load(&d_pending), 0);
    weir_collector_free(a.out);
}

/* ---- a restore from a checkpoint taken with records in flight ------------------------------
 * The source fails once a checkpoint has completed; the run restored from
 * the latest checkpoint goes on from its position. Each key's count at
 * the end (finish(), from state) is exactly its number of records: the
 * barriers cut the state and the source's position at the same records
 * though reads were in flight. */
typedef struct rgen {
    int i, fail_at;
    int64_t seq[KEYS];
} rgen;

static _Atomic int r_committed;

static int rgen_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    rgen *g = calloc(1, sizeof(*g));
    g->fail_at = (int)(intptr_t)arg;
    *state = g;
    return 0;
}

static int rgen_next(weir_ctx *ctx, void *state)
{
    rgen *g = state;
    if (g->fail_at && g->i >= g->fail_at) {
        /* Fail once a checkpoint completed (the restore has one). */
        int64_t give_up = weir_time_after_ms(30000);
        while (!atomic_load(&r_committed)) {
            CHECK(weir_time_now() < give_up);
            if (weir_time_sleep(WEIR_MSEC) < 0)
                return -ECANCELED;
        }
        return -EIO;
    }
    for (int k = 0; k < STEP && g->i < 30000; k++, g->i++) {
        ev e = {(g->i * 7) % KEYS, g->seq[(g->i * 7) % KEYS]++, g->i / 8};
        int r = weir_emit(ctx, &e, sizeof(e), e.ts);
        if (r)
            return r;
    }
    weir_time_sleep(WEIR_MSEC / 4); /* a few checkpoints along the way */
    return g->i >= 30000;
}

static int rgen_snapshot(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    rgen *g = state;
    *buf = malloc(sizeof(*g));
    memcpy(*buf, g, sizeof(*g));
    *len = sizeof(*g);
    return 0;
}

static int rgen_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    (void)ctx;
    rgen *g = state;
    CHECK_EQ(len, sizeof(*g));
    int fail_at = g->fail_at;
    memcpy(g, buf, len);
    g->fail_at = fail_at;
    return 0;
}

static int final_count(weir_ctx *ctx, const void *key, size_t len, void *arg)
{
    (void)len, (void)arg;
    const void *v;
    size_t l;
    int64_t out[2] = {0, 0};
    memcpy(&out[0], key, 8);
    CHECK_EQ(weir_value_get(ctx, "n", &v, &l), 0);
    memcpy(&out[1], v, 8);
    return weir_emit(ctx, out, sizeof(out), WEIR_WATERMARK_MAX - 1);
}

static int r_counted(weir_ctx *ctx, void *state, const weir_rec *in, int err, const void *val,
                     size_t len, void *arg)
{
    (void)state, (void)arg;
    const ev *e = in->data;
    int64_t n = 0;
    if (!err)
        memcpy(&n, val, len);
    else if (err != -ENOENT)
        return err;
    if (n != e->seq) /* the count so far is the record's number in its key */
        atomic_store(&wrong_order, 1);
    n++;
    return weir_value_put(ctx, "n", &n, 8);
}

static int r_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    return weir_value_get_async(ctx, in, "n", r_counted, NULL);
}

static int r_finish(weir_ctx *ctx, void *state)
{
    (void)state;
    return weir_keys_iterate(ctx, "n", final_count, NULL);
}

static int r_commit(weir_ctx *ctx, void *state, uint64_t id)
{
    (void)ctx, (void)state, (void)id;
    atomic_store(&r_committed, 1);
    return 0;
}

typedef struct rrun {
    const char *dir;
    int fail_at, restore, result;
    weir_collector *out;
    weir_ckpt_stats stats;
} rrun;

static intptr_t restore_job(void *arg)
{
    rrun *a = arg;
    weir_job *j = weir_job_new("async-restore");
    weir_source_def sd = {.open = rgen_open,
                          .next = rgen_next,
                          .close = free,
                          .snapshot = rgen_snapshot,
                          .restore = rgen_restore};
    weir_stream *s =
        weir_stream_parallelism(weir_job_source(j, "gen", &sd, (void *)(intptr_t)a->fail_at), 1);
    s = weir_stream_key_by(s, ev_key, NULL);
    weir_op_def def = {.process = r_process, .finish = r_finish, .commit = r_commit};
    s = weir_stream_process(s, "count", &def, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", a->out), 0);
    a->result = weir_job_run(j, &(weir_run_opts){.parallelism = 2,
                                                 .state_backend = "delay:",
                                                 .checkpoint_dir = a->dir,
                                                 .checkpoint_interval_ms = 20,
                                                 .restore = a->restore});
    weir_job_ckpt_stats(j, &a->stats);
    weir_job_free(j);
    return 0;
}

TEST(a_restore_from_checkpoints_taken_with_reads_in_flight_counts_every_record_once)
{
    register_backends();
    char dir[] = "/tmp/weir-async-restore-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    atomic_store(&wrong_order, 0);
    atomic_store(&r_committed, 0);
    rrun a = {.dir = dir, .fail_at = 12000, .out = weir_collector_new()};
    CHECK_EQ(test_run_on_rt(2, restore_job, &a), 0);
    CHECK_EQ(a.result, -EIO);
    rrun b = {.dir = dir, .restore = 1, .out = weir_collector_new()};
    CHECK_EQ(test_run_on_rt(2, restore_job, &b), 0);
    CHECK_EQ(b.result, 0);
    CHECK_GT(b.stats.restored, 0);
    CHECK_EQ(atomic_load(&wrong_order), 0);
    int64_t want[KEYS] = {0};
    for (int i = 0; i < 30000; i++)
        want[(i * 7) % KEYS]++;
    int seen = 0;
    for (size_t i = 0; i < weir_collector_count(b.out); i++) {
        const int64_t *o = weir_collector_get(b.out, i)->data;
        CHECK_EQ(o[1], want[o[0]]);
        seen++;
    }
    CHECK_EQ(seen, KEYS);
    weir_collector_free(a.out);
    weir_collector_free(b.out);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

/* ---- window panes and timers on reads that answer later --------------------------------------
 * A Nexmark q5-shaped job: bids of Q5_KEYS auctions, out of order, counted
 * in hopping windows kept as panes (size 4 slides), with lateness and late
 * records to the side. Its records read their panes entries through the
 * controller, its timers' reads go out as prefetch rounds (timers.c): the
 * output is byte for byte the in-memory backend's. */
#define Q5_KEYS 200

typedef struct q5_run {
    const char *backend;
    const char *ckpt; /* checkpoints every 20 ms into it (the remote tier evicts then) */
    int n;            /* records */
    int ordered;      /* every record at time 0 (no late ones, every timer due at the end) */
    int keys;
    int64_t session; /* > 0: session windows of this gap instead */
    /* Halfway, a call of next() that emits nothing (the watermarks a
     * pause brings are then the same in every run compared) and, with
     * wait_for (the highest checkpoint id committed), more until a
     * checkpoint triggered after the pause began has completed. */
    int pause;
    _Atomic long *wait_for;
    weir_collector *out;
    int result;
    char error[256];
} q5_run;

typedef struct q5_src {
    const q5_run *a;
    int i;
    int paused;
    long base;       /* *wait_for when the pause began */
    int64_t give_up; /* its deadline (30 s) */
} q5_src;

static int q5_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    q5_src *s = calloc(1, sizeof(*s));
    s->a = arg;
    *state = s;
    return 0;
}

static int q5_next(weir_ctx *ctx, void *state)
{
    q5_src *s = state;
    int end = s->a->n;
    if (s->a->pause && s->i <= end / 2 &&
        (!s->paused || (s->a->wait_for && atomic_load(s->a->wait_for) < s->base + 2 &&
                        weir_time_now() < s->give_up))) {
        end /= 2;
        if (s->i == end) {
            if (!s->paused && s->a->wait_for) {
                s->base = atomic_load(s->a->wait_for);
                s->give_up = weir_time_after_ms(30000);
            }
            s->paused = 1;
            weir_time_sleep(WEIR_MSEC); /* a checkpoint can pass meanwhile */
            return 0;
        }
    }
    for (int k = 0; k < STEP && s->i < end; k++, s->i++) {
        uint32_t h = (uint32_t)s->i * 2654435761u;
        ev e = {(s->i * 37) % s->a->keys, 1, s->i / 4 + (int64_t)(h >> 26) % 40};
        if (s->a->ordered)
            e.ts = 0;
        int r = weir_emit(ctx, &e, sizeof(e), e.ts);
        if (r)
            return r;
    }
    return s->i >= s->a->n;
}

static intptr_t q5_job(void *arg)
{
    q5_run *a = arg;
    weir_job *j = weir_job_new("async-q5");
    weir_source_def sd = {
        .open = q5_open, .next = q5_next, .close = free, .max_out_of_orderness = 10};
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "bids", &sd, a), 1);
    s = weir_stream_key_by(s, ev_key, NULL);
    weir_window hw = {.kind = WEIR_WINDOW_HOPPING,
                      .size = 40,
                      .slide = 10,
                      .allowed_lateness = a->ordered ? 0 : 10};
    if (a->ordered)
        hw.size = 20;
    weir_window sw = {.kind = WEIR_WINDOW_SESSION, .gap = a->session, .allowed_lateness = 10};
    s = weir_stream_window(s, "count", a->session ? &sw : &hw, sum_ev, NULL);
    CHECK_EQ(weir_stream_collect(weir_stream_side(s), "late", a->out), 0);
    if (a->session)
        s = commit_ids_pass(s);
    CHECK_EQ(weir_stream_collect(s, "out", a->out), 0);
    a->result = weir_job_run(j, &(weir_run_opts){.parallelism = 2,
                                                 .state_backend = a->backend,
                                                 .checkpoint_dir = a->ckpt,
                                                 .checkpoint_interval_ms = a->ckpt ? 20 : 0});
    snprintf(a->error, sizeof(a->error), "%s", weir_job_error(j));
    weir_job_free(j);
    return 0;
}

static char *q5_output_of(const char *backend, const char *ckpt, int n, int ordered, int keys,
                          int64_t session, _Atomic long *wait_for)
{
    q5_run a = {.backend = backend,
                .ckpt = ckpt,
                .n = n,
                .ordered = ordered,
                .keys = keys,
                .session = session,
                .pause = session > 0,
                .wait_for = wait_for,
                .out = weir_collector_new()};
    CHECK_EQ(test_run_on_rt(2, q5_job, &a), 0);
    if (a.result)
        TEST__FAIL("on %s: %d %s", backend, a.result, a.error);
    CHECK_GT(weir_collector_count(a.out), 100);
    char *x = canon_bytes(a.out);
    weir_collector_free(a.out);
    return x;
}

static char *q5_output(const char *backend, const char *ckpt, int n, int ordered, int keys)
{
    return q5_output_of(backend, ckpt, n, ordered, keys, 0, NULL);
}

/* Session windows (a gap of 15, some merging, some late records) on the
 * remote backend with pool round trips of up to 1 ms and a hot tier of
 * 1 KiB: the memory backend's output, and records waited for their key's
 * sessions as data (the scan fetched ahead) rather than blocking the
 * subtask; the session timers' scans were fetched in their prefetch
 * rounds (without them this job took eight times as long, before scans
 * kept what they fetched for the scans after them). */
TEST(session_windows_give_the_memory_backends_output_with_scans_that_answer_later)
{
    spy_register();
    const int n = 6000;
    char *want = q5_output_of("memory:", NULL, n, 0, Q5_KEYS, 15, NULL);
    char dir[] = "/tmp/weir-async-sess-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    atomic_store(&spy_later, 0);
    atomic_store(&committed_id, 0);
    /* The second half waits for a checkpoint of the first half's state
     * to complete: it surely meets runs in the pool and a hot tier that
     * evicted. */
    char *got = q5_output_of(
        "spyscan:remote:latency://0-1/mem://async-sess?hot_max_bytes=1024&io_threads=16", dir, n, 0,
        Q5_KEYS, 15, &committed_id);
    if (strcmp(got, want) != 0)
        TEST__FAIL("remote: not the memory backend's output");
    long later = atomic_load(&spy_later);
    printf("  %ld records waited for their sessions' scans\n", later);
    CHECK_GT(later, 0);
    free(got);
    free(want);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

TEST(a_q5_shaped_window_job_gives_the_memory_backends_output_on_reads_that_answer_later)
{
    register_backends();
    const int n = 12000;
    char *want = q5_output("memory:", NULL, n, 0, Q5_KEYS);
    CHECK(strstr(want, "\n") != NULL);
    static const char *const backends[] = {"delay:", "batch:"};
    for (int i = 0; i < 2; i++) {
        long async_before = atomic_load(&d_async), batched_before = atomic_load(&d_batched);
        char *got = q5_output(backends[i], NULL, n, 0, Q5_KEYS);
        if (strcmp(got, want) != 0)
            TEST__FAIL("%s: not the memory backend's output", backends[i]);
        /* Every record's pane read went out asynchronously (and the
         * timers' in prefetch rounds). */
        CHECK_GT(atomic_load(&d_async) - async_before, n);
        if (i == 1)
            CHECK_GT(atomic_load(&d_batched) - batched_before, n);
        free(got);
    }
    /* The remote backend, 1 ms pool round trips, a hot tier of 1 KiB that
     * evicts whatever a checkpoint made durable: cold pane reads and cold
     * timer prefetches. */
    char dir[] = "/tmp/weir-async-q5-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *got = q5_output("remote:latency://1/mem://async-q5?hot_max_bytes=1024&io_threads=16", dir,
                          n, 0, Q5_KEYS);
    if (strcmp(got, want) != 0)
        TEST__FAIL("remote: not the memory backend's output");
    free(got);
    free(want);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

/* 300 keys, one record each, all at time 0; windows of 20 sliding by 10,
 * no lateness: each key has a pane [0, 10) and two fire timers (9, 19),
 * all due at the end of input. The 600 timers read each key's panes
 * entry twice (fire, then drop): 1200 plain reads without a prefetch.
 * With it: one round of the 300 keys (512 timers), one of the 88 keys left
 * (the rest of 19's), and no plain read of a panes entry at all. */
TEST(a_batch_of_due_timers_reads_its_state_in_one_prefetch_round)
{
    register_backends();
    const int keys = 300;
    char *want = q5_output("memory:", NULL, keys, 1, keys);
    /* batch: the prefetch is one get_batch; the records' reads are
     * gathered at most 128 a batch, so the batches of more are rounds. */
    atomic_store(&d_batches, 0);
    atomic_store(&d_batched, 0);
    atomic_store(&d_pane_gets, 0);
    atomic_store(&d_big_batches, 0);
    q5_run a = {.backend = "batch:", .n = keys, .ordered = 1, .keys = keys};
    a.out = weir_collector_new();
    CHECK_EQ(test_run_on_rt(2, q5_job, &a), 0);
    if (a.result)
        TEST__FAIL("run: %d %s", a.result, a.error);
    char *got = canon_bytes(a.out);
    CHECK_STR(got, want);
    free(got);
    weir_collector_free(a.out);
    CHECK_EQ(atomic_load(&d_pane_gets), 0); /* every timer's read served by a round */
    /* Two subtasks share the keys: each has its first round with all its
     * keys (over 128, fewer than 512), in one call. */
    CHECK_EQ(atomic_load(&d_big_batches), 2);
    CHECK_EQ(atomic_load(&d_batched), 2 * keys); /* the records' reads, then the rounds' */
    /* delay: (no get_batch): the round's reads go out one get_async each,
     * waited for together: still no plain read. */
    atomic_store(&d_pane_gets, 0);
    got = q5_output("delay:", NULL, keys, 1, keys);
    CHECK_STR(got, want);
    CHECK_EQ(atomic_load(&d_pane_gets), 0);
    free(got);
    free(want);
}

/* The job cancelled while its subtask waits for a prefetch round that
 * never answers: the run ends (promptly: the round's wait observes the
 * cancel), and the round's answers, which come after the run, free it. */
static intptr_t prefetch_cancel_main(void *arg)
{
    q5_run *a = arg;
    weir_task *t = weir_task_spawn(q5_job, a, NULL);
    CHECK(t != NULL);
    int64_t give_up = weir_time_after_ms(30000);
    while (atomic_load(&d_held) < a->keys) { /* the round's reads are out, held */
        CHECK(weir_time_now() < give_up);
        weir_time_sleep(WEIR_MSEC);
    }
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_task_cancel(t), 0);
    CHECK_EQ(weir_task_join(t, NULL, weir_time_after_ms(20000)), -ECANCELED);
    CHECK_LT(weir_time_now() - t0, 20000 * WEIR_MSEC);
    return 0;
}

TEST(a_job_cancelled_during_a_prefetch_round_ends_and_its_late_answers_are_harmless)
{
    register_backends();
    const int keys = 300;
    /* delay: answers the records' 300 reads; every read after them (the
     * prefetch round's) is held. */
    atomic_store(&d_async, 0);
    atomic_store(&d_held, 0);
    atomic_store(&d_hang_after, keys);
    q5_run a = {.backend = "delay:", .n = keys, .ordered = 1, .keys = keys};
    a.out = weir_collector_new();
    CHECK_EQ(test_run_on_rt(2, prefetch_cancel_main, &a), 0);
    atomic_store(&d_hang_after, 0);
    CHECK_EQ(a.result, -ECANCELED);
    CHECK_EQ(atomic_load(&d_held), keys);     /* one round per subtask, all its keys */
    CHECK_EQ(weir_collector_count(a.out), 0); /* no timer fired */
    weir_collector_free(a.out);
    /* The run is over: the held reads answer now, into rounds no subtask
     * waits for (ASan: no use after free, nothing leaked). */
    for (size_t i = 0; i < nlate; i++)
        answer_req(late[i], 0);
    free(late);
    late = NULL;
    nlate = late_cap = 0;
}

TEST_MAIN()
