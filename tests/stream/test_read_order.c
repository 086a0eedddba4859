/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_read_order.c - deadline-aware ordering of async state reads
 * (weir_stream_reads WEIR_READS_DEADLINE_ORDER, weir_ctx_read_order):
 * answers that are ready together resume lowest order key first, equal
 * keys in arrival order; with read coalescing the ordering is inert and a
 * warning says so; bad flags are refused.
 *
 * The backend ("hold:", and "holdb:" with get_batch) keeps every read
 * until N are waiting and then answers them all at once, newest first, on
 * the subtask's own thread inside the last get_async: so all N answers are
 * in the controller's inbox together before any runs, and the order they
 * resume in is the controller's alone.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "test_rt.h"
#include "weir/state.h"
#include "weir/stream.h"

enum { N = 64 };

/* ---- the holding backend ------------------------------------------------------------------ */
typedef struct hreq {
    weir_state_get_cb cb;
    void *arg;
} hreq;

typedef struct hold {
    weir_state_backend base;
    weir_state_backend *mem;
    hreq q[N];
    int n;
} hold;

static weir_state_backend *mem(weir_state_backend *b)
{
    return ((hold *)b)->mem;
}
static int h_get(weir_state_backend *b, int kg, const void *k, size_t kl, const void **v,
                 size_t *vl)
{
    return weir_state_get(mem(b), kg, k, kl, v, vl);
}
static int h_put(weir_state_backend *b, int kg, const void *k, size_t kl, const void *v, size_t vl)
{
    return weir_state_put(mem(b), kg, k, kl, v, vl);
}
static int h_del(weir_state_backend *b, int kg, const void *k, size_t kl)
{
    return weir_state_delete(mem(b), kg, k, kl);
}
static int h_scan(weir_state_backend *b, int kg, const void *p, size_t pl, weir_state_scan_fn fn,
                  void *arg)
{
    return weir_state_scan(mem(b), kg, p, pl, fn, arg);
}
static size_t h_entries(weir_state_backend *b, int kg)
{
    return weir_state_entries(mem(b), kg);
}
static int h_capture(weir_state_backend *b, uint64_t id, const weir_state_entry *x, size_t n,
                     weir_state_snapshot **out)
{
    return weir_state_capture_with(mem(b), id, x, n, out);
}
static void h_free(weir_state_backend *b)
{
    hold *h = (hold *)b;
    for (int i = 0; i < h->n; i++) /* never reached N: the run ended first */
        h->q[i].cb(h->q[i].arg, -ECANCELED, NULL, 0);
    weir_state_backend_free(h->mem);
    free(h);
}

/* Reads held before all are answered: N (hold_n for the get_now test). */
static int hold_n = N;

/* Every read is of a key never written: answered -ENOENT, all hold_n at once. */
static int h_get_async(weir_state_backend *b, int kg, const void *k, size_t kl,
                       weir_state_get_cb cb, void *arg)
{
    (void)kg, (void)k, (void)kl;
    hold *h = (hold *)b;
    CHECK(h->n < hold_n);
    h->q[h->n++] = (hreq){cb, arg};
    if (h->n == hold_n) {
        for (int i = hold_n - 1; i >= 0; i--)
            h->q[i].cb(h->q[i].arg, -ENOENT, NULL, 0);
        h->n = 0;
    }
    return -EINPROGRESS;
}

static int h_get_batch(weir_state_backend *b, const weir_state_read *r, size_t n,
                       weir_state_get_cb cb)
{
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(h_get_async(b, r[i].kg, r[i].key, r[i].klen, cb, r[i].arg), -EINPROGRESS);
    return 0;
}

/* An even key's read is answered without a round trip; an odd one's is not. */
static int h_get_now(weir_state_backend *b, int kg, const void *k, size_t kl, const void **v,
                     size_t *vl)
{
    (void)b, (void)kg, (void)v, (void)vl;
    int64_t key;
    /* the state key ends with the record's key (no namespace) */
    CHECK_GE(kl, sizeof(key));
    memcpy(&key, (const uint8_t *)k + kl - sizeof(key), sizeof(key));
    return key % 2 == 0 ? -ENOENT : -EWOULDBLOCK;
}

static const weir_state_backend_ops hold_ops = {.name = "hold",
                                                .get = h_get,
                                                .put = h_put,
                                                .del = h_del,
                                                .scan = h_scan,
                                                .get_async = h_get_async,
                                                .capture = h_capture,
                                                .entries = h_entries,
                                                .free = h_free};
static weir_state_backend_ops holdb_ops, holdn_ops;

static weir_state_backend *h_make(void *arg, const char *uri, int ngroups, int first, int end)
{
    (void)uri;
    hold *h = calloc(1, sizeof(*h));
    CHECK(h != NULL);
    CHECK((h->mem = weir_state_memory_new(ngroups, first, end)) != NULL);
    h->base = (weir_state_backend){arg == (void *)2 ? &holdn_ops
                                   : arg            ? &holdb_ops
                                                    : &hold_ops,
                                   ngroups, first, end};
    return &h->base;
}

static void register_backends(void)
{
    static int done;
    if (done++)
        return;
    holdb_ops = hold_ops;
    holdb_ops.name = "holdb";
    holdb_ops.get_batch = h_get_batch;
    CHECK_EQ(weir_state_backend_register("hold", h_make, NULL), 0);
    CHECK_EQ(weir_state_backend_register("holdb", h_make, (void *)1), 0);
    holdn_ops = holdb_ops;
    holdn_ops.name = "holdn";
    holdn_ops.get_now = h_get_now;
    CHECK_EQ(weir_state_backend_register("holdn", h_make, (void *)2), 0);
}

/* ---- the job ---------------------------------------------------------------------------- */
/* N records, keys 0..N-1 (distinct: the key gate holds none back), all at
 * time 0 (no watermark between them). */
static int src_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = calloc(1, sizeof(int));
    return *state ? 0 : -ENOMEM;
}
static int src_next(weir_ctx *ctx, void *state)
{
    (void)state;
    for (int64_t k = 0; k < N; k++) {
        int r = weir_emit(ctx, &k, sizeof(k), 0);
        if (r)
            return r;
    }
    return 1;
}
static int key_of(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = in->data;
    *len = sizeof(int64_t);
    return 0;
}

/* A record's order key: a scramble of its key, some equal ((k * 37) % 16). */
static int64_t order_of(int64_t k)
{
    return (k * 37) % 16;
}

static int64_t resumed[N];
static int nresumed;

static int cont(weir_ctx *ctx, void *state, const weir_rec *in, int err, const void *val,
                size_t len, void *arg)
{
    (void)ctx, (void)state, (void)val, (void)len, (void)arg;
    CHECK_EQ(err, -ENOENT);
    CHECK(nresumed < N);
    memcpy(&resumed[nresumed++], in->data, sizeof(int64_t));
    return 0;
}

static int proc(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    int64_t k;
    memcpy(&k, in->data, sizeof(k));
    weir_ctx_read_order(ctx, order_of(k));
    return weir_value_get_async(ctx, in, "v", cont, NULL);
}

static int drop(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx, (void)state, (void)in;
    return 0;
}

typedef struct run_args {
    const char *backend;
    int flags;
    int result;
    char error[256];
} run_args;

static intptr_t run_job(void *arg)
{
    run_args *a = arg;
    weir_job *j = weir_job_new("order");
    weir_source_def sd = {.open = src_open, .next = src_next, .close = free};
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &sd, NULL), 1);
    s = weir_stream_key_by(s, key_of, NULL);
    s = weir_stream_process(s, "reader", &(weir_op_def){.process = proc}, NULL);
    CHECK(weir_stream_reads(s, a->flags) == s);
    CHECK_EQ(weir_stream_sink(s, "none", &(weir_op_def){.process = drop}, NULL), 0);
    nresumed = 0;
    a->result = weir_job_run(j, &(weir_run_opts){.parallelism = 1, .state_backend = a->backend});
    snprintf(a->error, sizeof(a->error), "%s", weir_job_error(j));
    weir_job_free(j);
    return 0;
}

static void run(const char *backend, int flags)
{
    run_args a = {backend, flags, 0, ""};
    CHECK_EQ(test_run_on_rt(2, run_job, &a), 0);
    if (a.result)
        TEST__FAIL("run on %s: %d %s", backend, a.result, a.error);
    CHECK_EQ(nresumed, N);
}

/* ---- stderr capture (the warning) ------------------------------------------------------------ */
static FILE *cap_file;
static int cap_saved = -1;

static void capture_begin(void)
{
    fflush(stderr);
    cap_file = tmpfile();
    CHECK(cap_file != NULL);
    cap_saved = dup(2);
    CHECK_GE(cap_saved, 0);
    CHECK_GE(dup2(fileno(cap_file), 2), 0);
}

static char *capture_end(void)
{
    fflush(stderr);
    CHECK_GE(dup2(cap_saved, 2), 0);
    close(cap_saved);
    long n = ftell(cap_file);
    CHECK_GE(n, 0);
    char *buf = calloc(1, (size_t)n + 1);
    CHECK(buf != NULL);
    rewind(cap_file);
    CHECK_EQ(fread(buf, 1, (size_t)n, cap_file), (size_t)n);
    fclose(cap_file);
    fputs(buf, stderr);
    return buf;
}

/* ---- tests ------------------------------------------------------------------------------ */
TEST(answers_ready_together_resume_lowest_order_key_first)
{
    register_backends();
    run("hold:", WEIR_READS_DEADLINE_ORDER);
    /* By order key; equal keys as their answers came: newest first. */
    for (int i = 1; i < N; i++) {
        int64_t a = resumed[i - 1], b = resumed[i];
        CHECK_LE(order_of(a), order_of(b));
        if (order_of(a) == order_of(b))
            CHECK_GT(a, b);
    }
    CHECK_EQ(order_of(resumed[0]), 0);
}

TEST(without_the_flag_answers_resume_as_they_came)
{
    register_backends();
    run("hold:", 0);
    for (int i = 0; i < N; i++)
        CHECK_EQ(resumed[i], N - 1 - i); /* the backend answered newest first */
    run("hold:", WEIR_READS_NO_COALESCE);
    for (int i = 0; i < N; i++)
        CHECK_EQ(resumed[i], N - 1 - i);
}

TEST(with_coalescing_the_ordering_is_inert_and_a_warning_says_so)
{
    register_backends();
    capture_begin();
    run("holdb:", WEIR_READS_DEADLINE_ORDER);
    char *err = capture_end();
    CHECK_HAS(err, "\"reader\": deadline-aware ordering is inert while reads are coalesced");
    free(err);
    for (int i = 0; i < N; i++)
        CHECK_EQ(resumed[i], N - 1 - i);
    /* Coalescing turned off: the ordering works on the batching backend too. */
    capture_begin();
    run("holdb:", WEIR_READS_DEADLINE_ORDER | WEIR_READS_NO_COALESCE);
    err = capture_end();
    CHECK(strstr(err, "inert") == NULL);
    free(err);
    for (int i = 1; i < N; i++)
        CHECK_LE(order_of(resumed[i - 1]), order_of(resumed[i]));
}

/* A backend that answers some reads without a round trip (get_now): those
 * records run at once, in arrival order, and only the others are gathered
 * into the batch and wait for its answers. */
TEST(reads_the_backend_has_at_hand_do_not_wait_for_the_batch)
{
    register_backends();
    hold_n = N / 2;
    run("holdn:", 0);
    hold_n = N;
    for (int i = 0; i < N / 2; i++)
        CHECK_EQ(resumed[i], 2 * i);
    for (int i = 0; i < N / 2; i++)
        CHECK_EQ(resumed[N / 2 + i], N - 1 - 2 * i);
}

TEST(bad_flags_and_streams_are_refused)
{
    weir_job *j = weir_job_new("bad");
    weir_source_def sd = {.open = src_open, .next = src_next, .close = free};
    weir_stream *s = weir_job_source(j, "src", &sd, NULL);
    s = weir_stream_key_by(s, key_of, NULL);
    s = weir_stream_process(s, "reader", &(weir_op_def){.process = proc}, NULL);
    CHECK(weir_stream_reads(s, 4) == NULL);
    CHECK_HAS(weir_job_error(j), "weir_stream_reads: unknown flags");
    weir_job_free(j);
    CHECK(weir_stream_reads(NULL, 0) == NULL);
}

TEST_MAIN()
