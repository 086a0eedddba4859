/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nexmark.c - Nexmark on weir (examples/nexmark): q0, q1, q2, q5, q7 and q8
 * over the generator's events, at parallelism 1 and 2, without and with
 * checkpoints, beside the same query as a hand-written single-threaded C
 * loop over the same generator (impl=loop: the practical limit on one core).
 *
 * Exactly what is measured:
 *
 *   - each configuration runs in a child process of its own (so that peak
 *     RSS is its own): a weir_rt of `parallelism` scheduler threads; one
 *     task builds the job - the nexmark_source (parallelism p: subtask i
 *     makes events i, i+p, ...), the query, and a sink that counts its
 *     records - and runs it with weir_run_opts.parallelism = p. The clock
 *     covers weir_job_run() alone: generation, the query, the sink.
 *   - events_per_s = events / that time; events_per_s_per_core = that / p;
 *     cpu_s = the process's user + system time over the run; rss_mb = peak
 *     RSS (getrusage ru_maxrss) of the child.
 *   - ckpt=1: checkpoints every second (checkpoint_interval_ms = 1000) into
 *     a fresh mkdtemp directory; ckpts = checkpoints completed, ckpt_ms =
 *     the last one's duration (trigger to COMPLETED marker,
 *     weir_job_ckpt_stats last_duration_ns).
 *   - impl=loop: one thread generates every event 0..N-1 in order with the
 *     same generator (as weir's source does) and computes the query with
 *     plain C (hash maps of its own, windows closed as event time passes
 *     them); out= counts its results, to be compared with weir's out=.
 *
 * Event time: 100,000 events per second, so the 10 s tumbling windows of
 * q7 / q8 hold 1M events and q5's 10 s hopping windows slide every 2 s.
 * q5 and q7 also run with local pre-aggregation (query=q5-local and
 * q7-local: nexmark_opts.local; their loop lines are the plain loops).
 * Events: 50M for q0-q2 and q7-local, 20M for q7 and q8, 8M for q5 and
 * q5-local: a few seconds each (80 s of event time or more: the windows'
 * state in its steady size), so that checkpoints every second happen
 * (BENCH_QUICK=1: a fifth; NEXMARK_EVENTS overrides them all;
 * NEXMARK_PARALLELISM=1 or 2 runs only that parallelism, for profiling;
 * NEXMARK_OPSTATS=1 prints each operator's records and backpressure time;
 * NEXMARK_PROCESSES=2 runs only the processes=2 lines, NEXMARK_CREDITS=N
 * gives their TCP channels N credits instead of the default,
 * WEIR__TCP_MIN_CREDITS, and NEXMARK_TLS=DIR puts them on mutual TLS with
 * DIR/cert.pem, DIR/key.pem and DIR/ca.pem, their lines then saying
 * tls=1; the certificate must name IP:127.0.0.1).
 *
 *   bench=nexmark impl=weir query=q5 parallelism=2 processes=1 events=... events_per_s=...
 *       events_per_s_per_core=... cpu_s=... rss_mb=... ckpt=0|1 ckpts=...
 *       ckpt_ms=... out=...
 *   bench=nexmark impl=loop query=q5 events=... events_per_s=... rss_mb=... out=...
 *   bench=nexmark impl=weir query=q5 parallelism=2 processes=2 events=... events_per_s=...
 *       events_per_s_per_core=... cpu_s=... wire_records=... wire_bytes=...
 *       bytes_per_record=... out=...
 *
 * processes=2 (q0 and q5, NEXMARK_PARALLELISM unset or 2): the same job at
 * parallelism 2 with each subtask in a process of its own (subtask s of
 * every operator in process s, one scheduler thread each), the channels
 * between them over loopback TCP (src/stream/channel_tcp.c). The clock is
 * the slower process's weir run; cpu_s adds both; wire_records and
 * wire_bytes count what the TCP channels sent (frames included).
 *
 * NEXMARK_STATE=1 runs, instead, the queries (default q5, q7 and q8) at
 * parallelism 2 (NEXMARK_PARALLELISM to change it) with checkpoints every
 * second (NEXMARK_CKPT_MS to change it: the hot tier evicts only what a
 * checkpoint made durable, so a run of a second needs shorter intervals
 * to read cold) on three state backends: the in-memory one (state=memory); the
 * remote-read backend over a directory whose every call is 1 ms late
 * (remote:latency://1/file://..., the pool inside the run's checkpoint
 * directory), its hot tier a tenth of the query's state (state=remote
 * hot=0.1 latency_ms=1); and the same backend read synchronously, without
 * the async execution controller (state=remote-sync). The state's size
 * comes from a sizing run first (state=sizing: the in-memory backend
 * counting its live entries as the hot tier does; the peak of their sum).
 * For profiling, NEXMARK_STATE_RUNS=remote (a comma list of memory, remote,
 * remote-sync) runs only those, and NEXMARK_HOT_PERMILLE=N makes the hot
 * tier N/1000 of the state (default 100; 0: unbounded, no read is cold):
 *
 *   bench=nexmark impl=weir query=q5 state=remote hot=0.1 latency_ms=1 events_per_s=...
 *       parallelism=2 events=... cpu_s=... rss_mb=... ckpts=... ckpt_ms=... out=...
 *
 *   nexmark [QUERY...]   (default: q0 q1 q2 q5 q5-local q7 q7-local q8)
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "stream/channel_tcp.h"
#include "stream/plan.h"
#include "weir/net.h"
#include "weir/rt.h"
#include "weir/stream.h"
#include "weir/tls.h"

#include "../examples/nexmark/generator.c"
#include "../examples/nexmark/queries.c"

#define RATE 100000

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static double rss_mb(void)
{
    return (double)bench_peak_rss_kb() / 1024.0;
}

/* ---- weir ----------------------------------------------------------------------------------- */
typedef int (*query_fn)(weir_job *, weir_stream *, weir_stream **, const nexmark_opts *);

/* The queries and their events (BENCH_QUICK: a fifth). q5 and q7 run as
 * specified (every bid into a keyed window) and with local
 * pre-aggregation (nexmark_opts.local). */
static const struct {
    const char *name;
    query_fn fn;
    int local;
    int64_t events;
} queries[] = {{"q0", nexmark_q0, 0, 50000000},       {"q1", nexmark_q1, 0, 50000000},
               {"q2", nexmark_q2, 0, 50000000},       {"q5", nexmark_q5, 0, 8000000},
               {"q5-local", nexmark_q5, 1, 8000000},  {"q7", nexmark_q7, 0, 20000000},
               {"q7-local", nexmark_q7, 1, 50000000}, {"q8", nexmark_q8, 0, 20000000}};

typedef struct count_sink {
    int64_t n;
    _Atomic int64_t *total;
} count_sink;

static int count_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    count_sink *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->total = arg;
    *state = s;
    return 0;
}

static int count_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx, (void)in;
    ((count_sink *)state)->n++;
    return 0;
}

static void count_close(void *state)
{
    count_sink *s = state;
    atomic_fetch_add(s->total, s->n);
    free(s);
}

typedef struct run_cfg {
    query_fn q;
    nexmark_opts o;
    nexmark_cfg gen;
    int parallelism, ckpt;
    /* The state backend (NEXMARK_STATE): a URI whose "%s" is the run's
     * checkpoint directory (NULL: memory), and its line's label. */
    const char *state, *label;
    /* results */
    int err;
    double secs, cpu;
    _Atomic int64_t out;
    weir_ckpt_stats st;
    char error[256];
} run_cfg;

static intptr_t run_main(void *arg)
{
    run_cfg *rc = arg;
    weir_job *j = weir_job_new("nexmark");
    weir_stream *ev = weir_job_source(j, "events", &nexmark_source, &rc->gen), *out = NULL;
    static const weir_op_def sink = {
        .open = count_open, .process = count_process, .close = count_close};
    char dir[] = "/tmp/weir-nexmark-bench-XXXXXX";
    weir_run_opts o = {.parallelism = rc->parallelism};
    if (rc->ckpt) {
        if (!mkdtemp(dir)) {
            rc->err = -errno;
            weir_job_free(j);
            return 0;
        }
        o.checkpoint_dir = dir;
        /* NEXMARK_CKPT_MS: another interval (a short run on the remote
         * backend needs several checkpoints before its hot tier evicts). */
        long ms = bench_parse_long(getenv("NEXMARK_CKPT_MS"), 1000);
        o.checkpoint_interval_ms = ms > 0 ? ms : 1000;
    }
    char uri[512];
    if (rc->state) {
        snprintf(uri, sizeof(uri), rc->state, dir);
        o.state_backend = uri;
    }
    rc->err = rc->q(j, ev, &out, &rc->o);
    if (!rc->err)
        rc->err = weir_stream_sink(out, "count", &sink, &rc->out);
    if (!rc->err) {
        double c0 = cpu_s(), t0 = now_s();
        rc->err = weir_job_run(j, &o);
        rc->secs = now_s() - t0;
        rc->cpu = cpu_s() - c0;
    }
    snprintf(rc->error, sizeof(rc->error), "%s", weir_job_error(j));
    weir_job_ckpt_stats(j, &rc->st);
    if (getenv("NEXMARK_OPSTATS")) { /* per-operator counters to stderr */
        static const char *const ops[] = {"events",
                                          "q0.pass",
                                          "q1.convert",
                                          "q2.select",
                                          "q5.bids",
                                          "q5.local",
                                          "q5.count",
                                          "q5.max",
                                          "q7.bids",
                                          "q7.local",
                                          "q7.max",
                                          "q7.top",
                                          "q8.persons+auctions",
                                          "q8.join",
                                          "count"};
        for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
            weir_op_stats os;
            if (weir_job_op_stats(j, ops[i], &os) == 0)
                fprintf(stderr, "  op=%s in=%llu out=%llu backpressure_ms=%.1f\n", ops[i],
                        (unsigned long long)os.records_in, (unsigned long long)os.records_out,
                        (double)os.backpressure_ns / 1e6);
        }
    }
    weir_job_free(j);
    if (rc->ckpt) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "nexmark: could not remove %s\n", dir);
    }
    return 0;
}

static int run_weir_state(const char *name, query_fn q, int local, int64_t events, int p, int ckpt,
                          const char *state, const char *label)
{
    run_cfg rc = {.q = q,
                  .o = {.local = local},
                  .gen = {.seed = 1, .events = events, .rate = RATE, .per_call = 512},
                  .parallelism = p,
                  .ckpt = ckpt,
                  .state = state,
                  .label = label};
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = p});
    if (!rt) {
        fprintf(stderr, "nexmark: weir_rt_new: %s\n", strerror(errno));
        return 1;
    }
    weir_task *t =
        weir_task_spawn(run_main, &rc, &(weir_spawn_opts){.rt = rt, .stack_size = 256 * 1024});
    if (!t || weir_task_join(t, NULL, WEIR_FOREVER) != 0) {
        fprintf(stderr, "nexmark: the job's task failed\n");
        return 1;
    }
    const char *impl = bench_impl_rt(rt);
    (void)impl;
    weir_rt_free(rt);
    if (rc.err) {
        printf("bench=nexmark impl=weir query=%s parallelism=%d ckpt=%d failed=%d\n", name, p, ckpt,
               rc.err);
        fprintf(stderr, "nexmark %s: %s\n", name, rc.error);
        return 1;
    }
    double eps = (double)events / rc.secs;
    if (label) {
        printf("bench=nexmark impl=weir query=%s %s events_per_s=%.0f parallelism=%d events=%lld "
               "cpu_s=%.2f rss_mb=%.1f ckpts=%llu ckpt_ms=%.1f out=%lld\n",
               name, label, eps, p, (long long)events, rc.cpu, rss_mb(),
               (unsigned long long)rc.st.completed, (double)rc.st.last_duration_ns / 1e6,
               (long long)rc.out);
        return 0;
    }
    printf(
        "bench=nexmark impl=weir query=%s parallelism=%d processes=1 events=%lld events_per_s=%.0f "
        "events_per_s_per_core=%.0f cpu_s=%.2f rss_mb=%.1f ckpt=%d ckpts=%llu ckpt_ms=%.1f "
        "out=%lld\n",
        name, p, (long long)events, eps, eps / p, rc.cpu, rss_mb(), ckpt,
        (unsigned long long)rc.st.completed, (double)rc.st.last_duration_ns / 1e6,
        (long long)rc.out);
    return 0;
}

static int run_weir(const char *name, query_fn q, int local, int64_t events, int p, int ckpt)
{
    return run_weir_state(name, q, local, events, p, ckpt, NULL, NULL);
}

/* ---- state on the remote backend (NEXMARK_STATE=1) ---------------------------------------- */
/* The size of a query's state, to give the remote backend's hot tier a
 * tenth of it: a sizing run on "nxsize:", the in-memory backend counting
 * each live entry as the hot tier does (key and value bytes, and 96 for
 * the entry), the peak over the run of the sum over every backend (every
 * keyed operator's subtasks). The remote runs' hot_max_bytes is a tenth of
 * that peak divided among the backends. */
typedef struct sized {
    weir_state_backend base;
    weir_state_backend *in;
} sized;

static _Atomic int64_t *size_now, *size_peak, *size_backends; /* shared with the parent */

static void size_add(int64_t d)
{
    int64_t v = atomic_fetch_add(size_now, d) + d, p = atomic_load(size_peak);
    while (v > p && !atomic_compare_exchange_weak(size_peak, &p, v))
        ;
}
static int64_t size_of(weir_state_backend *in, int kg, const void *key, size_t klen)
{
    const void *v;
    size_t vl;
    return weir_state_get(in, kg, key, klen, &v, &vl) == 0 ? (int64_t)(klen + vl + 96) : 0;
}
static int sz_get(weir_state_backend *b, int kg, const void *key, size_t klen, const void **val,
                  size_t *vlen)
{
    return weir_state_get(((sized *)b)->in, kg, key, klen, val, vlen);
}
static int sz_put(weir_state_backend *b, int kg, const void *key, size_t klen, const void *val,
                  size_t vlen)
{
    weir_state_backend *in = ((sized *)b)->in;
    int64_t old = size_of(in, kg, key, klen);
    int e = weir_state_put(in, kg, key, klen, val, vlen);
    if (!e)
        size_add((int64_t)(klen + vlen + 96) - old);
    return e;
}
static int sz_del(weir_state_backend *b, int kg, const void *key, size_t klen)
{
    weir_state_backend *in = ((sized *)b)->in;
    int64_t old = size_of(in, kg, key, klen);
    int e = weir_state_delete(in, kg, key, klen);
    if (!e)
        size_add(-old);
    return e;
}
static int sz_scan(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                   weir_state_scan_fn fn, void *arg)
{
    return weir_state_scan(((sized *)b)->in, kg, prefix, plen, fn, arg);
}
static size_t sz_entries(weir_state_backend *b, int kg)
{
    return weir_state_entries(((sized *)b)->in, kg);
}
static int sz_capture(weir_state_backend *b, uint64_t id, const weir_state_entry *extra, size_t n,
                      weir_state_snapshot **out)
{
    return weir_state_capture_with(((sized *)b)->in, id, extra, n, out);
}
static void sz_free(weir_state_backend *b)
{
    weir_state_backend_free(((sized *)b)->in);
    free(b);
}
static const weir_state_backend_ops sized_ops = {.name = "nxsize",
                                                 .get = sz_get,
                                                 .put = sz_put,
                                                 .del = sz_del,
                                                 .scan = sz_scan,
                                                 .capture = sz_capture,
                                                 .entries = sz_entries,
                                                 .free = sz_free};
static weir_state_backend *sized_new(void *arg, const char *uri, int ngroups, int first, int end)
{
    (void)arg, (void)uri;
    sized *s = calloc(1, sizeof(*s));
    if (!s || !(s->in = weir_state_memory_new(ngroups, first, end))) {
        free(s);
        return NULL;
    }
    s->base = (weir_state_backend){&sized_ops, ngroups, first, end};
    atomic_fetch_add(size_backends, 1);
    return &s->base;
}

typedef struct state_job {
    const char *name;
    query_fn q;
    int64_t events;
    int p;
    const char *state, *label;
} state_job;
static int state_job_run(void *arg)
{
    state_job *sj = arg;
    return run_weir_state(sj->name, sj->q, 0, sj->events, sj->p, sj->state ? 1 : 0, sj->state,
                          sj->label);
}

static int in_child(int (*fn)(void *), void *arg);

/* Whether word w is one of the comma list l. */
static int in_list(const char *l, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = l; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, w, n) && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

/* q at parallelism p: its state's size, then the lines state=memory,
 * state=remote (hot tier a tenth, pool a directory with 1 ms round trips,
 * checkpoints every second) and state=remote-sync (the same read without
 * the controller). */
static int run_state(const char *name, query_fn q, int64_t events, int p)
{
    atomic_store(size_now, 0), atomic_store(size_peak, 0), atomic_store(size_backends, 0);
    state_job sj = {name, q, events, p, "nxsize:", "state=sizing"};
    int status = in_child(state_job_run, &sj);
    int64_t peak = atomic_load(size_peak), nb = atomic_load(size_backends);
    if (status || nb <= 0 || peak <= 0)
        return 1;
    const char *hp = getenv("NEXMARK_HOT_PERMILLE");
    long permille = hp && !strcmp(hp, "0") ? 0 : bench_parse_long(hp, 100);
    if (permille < 0 || permille > 1000) {
        fprintf(stderr, "nexmark: NEXMARK_HOT_PERMILLE must be 0 to 1000, not \"%s\"\n", hp);
        return 1;
    }
    long hot = permille ? (long)(peak * permille / 1000 / nb) : 0;
    char hl[32];
    if (permille)
        snprintf(hl, sizeof(hl), "hot=%g", (double)permille / 1000);
    else
        snprintf(hl, sizeof(hl), "hot=all");
    fprintf(stderr, "nexmark %s: state %.1f MB over %lld backends, hot tier %ld bytes each\n", name,
            (double)peak / 1e6, (long long)nb, hot);
    /* The pool: a directory with 1 ms round trips in the run's checkpoint
     * directory, or NEXMARK_POOL (an S3 bucket, say: bench/nexmark_s3), its
     * '%' doubled for the "%s" of the run's directory. */
    const char *pool = getenv("NEXMARK_POOL");
    char pl[512], remote[700], remote_sync[700], lr[128], ls[128];
    if (pool && *pool) {
        size_t o = 0;
        for (const char *c = pool; *c && o + 2 < sizeof(pl); c++)
            if ((pl[o++] = *c) == '%')
                pl[o++] = '%';
        pl[o] = '\0';
        const char *sep = strchr(pl, '?') ? "&" : "?";
        snprintf(remote, sizeof(remote), "remote:%s%shot_max_bytes=%ld&io_threads=64", pl, sep,
                 hot);
        snprintf(remote_sync, sizeof(remote_sync), "remote:%s%shot_max_bytes=%ld&reads=sync", pl,
                 sep, hot);
        char scheme[16] = "";
        sscanf(pool, "%15[a-z0-9]", scheme);
        snprintf(lr, sizeof(lr), "state=remote %s pool=%s", hl, scheme);
        snprintf(ls, sizeof(ls), "state=remote-sync %s pool=%s", hl, scheme);
    } else {
        snprintf(remote, sizeof(remote),
                 "remote:latency://1/file://%%s/pool?hot_max_bytes=%ld&io_threads=64", hot);
        snprintf(remote_sync, sizeof(remote_sync),
                 "remote:latency://1/file://%%s/pool?hot_max_bytes=%ld&reads=sync", hot);
        snprintf(lr, sizeof(lr), "state=remote %s latency_ms=1", hl);
        snprintf(ls, sizeof(ls), "state=remote-sync %s latency_ms=1", hl);
    }
    state_job runs[] = {{name, q, events, p, "memory:", "state=memory"},
                        {name, q, events, p, remote, lr},
                        {name, q, events, p, remote_sync, ls}};
    const char *only = getenv("NEXMARK_STATE_RUNS"), *modes[] = {"memory", "remote", "remote-sync"};
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        if (only && *only && !in_list(only, modes[i]))
            continue;
        status |= in_child(state_job_run, &runs[i]);
    }
    return status;
}

/* ---- one job over two processes ------------------------------------------------------------ */
/* Each process runs subtask s of every chain where s % 2 is its number,
 * on a runtime of one thread (two processes: the two cores parallelism 2
 * has in one process), with TCP channels between them on loopback. */
typedef struct proc_cfg {
    query_fn q;
    int local;
    nexmark_cfg gen;
    int self, lfd, ports[2];
    /* results */
    int err;
    double secs, cpu;
    _Atomic int64_t out;
    uint64_t wire_bytes, wire_records;
} proc_cfg;

static int place_mod2(void *arg, uint32_t chain, uint32_t sub)
{
    (void)arg, (void)chain;
    return (int)(sub % 2);
}

static intptr_t proc_main(void *arg)
{
    proc_cfg *pc = arg;
    weir_job *j = weir_job_new("nexmark");
    weir_stream *ev = weir_job_source(j, "events", &nexmark_source, &pc->gen), *out = NULL;
    static const weir_op_def sink = {
        .open = count_open, .process = count_process, .close = count_close};
    nexmark_opts o = {.local = pc->local};
    pc->err = pc->q(j, ev, &out, &o);
    if (!pc->err)
        pc->err = weir_stream_sink(out, "count", &sink, &pc->out);
    weir__plan *p = NULL;
    char why[256];
    if (!pc->err)
        pc->err = weir__plan_make(j, 2, 4, &p, why, sizeof(why));
    weir_frame_builder fb;
    const uint8_t *bytes = NULL;
    size_t len = 0;
    if (!pc->err && !(pc->err = weir__plan_encode(p, &fb)))
        pc->err = weir_frame_builder_finish(&fb, &bytes, &len);
    weir__tcp_net *n = NULL;
    weir_tls_ctx *tls[2] = {NULL, NULL}; /* NEXMARK_TLS: server, client */
    const char *tls_dir = getenv("NEXMARK_TLS");
    if (!pc->err && tls_dir && *tls_dir) {
        char cert[512], key[512], ca[512], msg[512];
        snprintf(cert, sizeof(cert), "%s/cert.pem", tls_dir);
        snprintf(key, sizeof(key), "%s/key.pem", tls_dir);
        snprintf(ca, sizeof(ca), "%s/ca.pem", tls_dir);
        weir_tls_opts to = {.cert_file = cert, .key_file = key, .ca_file = ca};
        for (int i = 0; i < 2 && !pc->err; i++)
            if (!(tls[i] = weir_tls_ctx_new(i == 0, &to, msg, sizeof(msg)))) {
                fprintf(stderr, "nexmark: NEXMARK_TLS: %s\n", msg);
                pc->err = -EINVAL;
            }
    }
    if (!pc->err) {
        const char *hosts[2] = {"127.0.0.1", "127.0.0.1"};
        n = weir__tcp_new(
            &(weir__tcp_opts){.self = pc->self,
                              .nprocs = 2,
                              .hosts = hosts,
                              .ports = pc->ports,
                              .listen_fd = pc->lfd,
                              .place = place_mod2,
                              .plan_hash = weir__tcp_plan_hash(bytes, len),
                              .credits = (uint32_t)bench_parse_long(getenv("NEXMARK_CREDITS"), 0),
                              .tls_server = tls[0],
                              .tls_client = tls[1]});
        weir_frame_builder_close(&fb);
        pc->err = n ? 0 : -errno;
    }
    if (!pc->err) {
        weir__deploy d;
        weir__tcp_deploy(n, &d);
        double c0 = cpu_s(), t0 = now_s();
        pc->err = weir__job_run_plan(j, p, &(weir_run_opts){.parallelism = 2}, &d);
        pc->secs = now_s() - t0;
        pc->cpu = cpu_s() - c0;
        uint64_t recv;
        weir__tcp_stats(n, &pc->wire_bytes, &recv, &pc->wire_records);
    }
    if (pc->err)
        fprintf(stderr, "nexmark process %d: %s\n", pc->self, weir_job_error(j));
    weir__tcp_free(n);
    weir_tls_ctx_free(tls[0]);
    weir_tls_ctx_free(tls[1]);
    weir__plan_free(p);
    weir_job_free(j);
    return 0;
}

static int run_weir_procs(const char *name, query_fn q, int local, int64_t events)
{
    int lfd[2], ports[2], pipes[2][2];
    for (int i = 0; i < 2; i++) {
        if ((lfd[i] = weir_net_listen("127.0.0.1", 0, NULL)) < 0 || pipe(pipes[i]) < 0)
            return 1;
        ports[i] = weir_net_local_port(lfd[i]);
    }
    pid_t pid[2];
    for (int i = 0; i < 2; i++) {
        fflush(stdout);
        if ((pid[i] = fork()) < 0)
            return 1;
        if (pid[i] == 0) {
            close(lfd[1 - i]);
            proc_cfg pc = {.q = q,
                           .local = local,
                           .gen = {.seed = 1, .events = events, .rate = RATE, .per_call = 512},
                           .self = i,
                           .lfd = lfd[i],
                           .ports = {ports[0], ports[1]}};
            weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = 1});
            weir_task *t =
                rt ? weir_task_spawn(proc_main, &pc,
                                     &(weir_spawn_opts){.rt = rt, .stack_size = 256 << 10})
                   : NULL;
            if (!t || weir_task_join(t, NULL, WEIR_FOREVER) != 0)
                pc.err = -EIO;
            weir_rt_free(rt);
            ssize_t w = write(pipes[i][1], &pc, sizeof(pc));
            _exit(w == (ssize_t)sizeof(pc) && !pc.err ? 0 : 1);
        }
    }
    close(lfd[0]);
    close(lfd[1]);
    proc_cfg r[2] = {0};
    int ok = 1;
    for (int i = 0; i < 2; i++) {
        close(pipes[i][1]);
        ok &= read(pipes[i][0], &r[i], sizeof(r[i])) == (ssize_t)sizeof(r[i]) && !r[i].err;
        close(pipes[i][0]);
        int st;
        ok &= waitpid(pid[i], &st, 0) == pid[i] && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    if (!ok) {
        printf("bench=nexmark impl=weir query=%s parallelism=2 processes=2 failed=1\n", name);
        return 1;
    }
    double secs = r[0].secs > r[1].secs ? r[0].secs : r[1].secs;
    uint64_t bytes = r[0].wire_bytes + r[1].wire_bytes,
             recs = r[0].wire_records + r[1].wire_records;
    double eps = (double)events / secs;
    printf(
        "bench=nexmark impl=weir query=%s parallelism=2 processes=2 events=%lld events_per_s=%.0f "
        "events_per_s_per_core=%.0f cpu_s=%.2f wire_records=%llu wire_bytes=%llu "
        "bytes_per_record=%.1f out=%lld%s\n",
        name, (long long)events, eps, eps / 2, r[0].cpu + r[1].cpu, (unsigned long long)recs,
        (unsigned long long)bytes, recs ? (double)bytes / (double)recs : 0.0,
        (long long)(r[0].out + r[1].out),
        getenv("NEXMARK_TLS") && *getenv("NEXMARK_TLS") ? " tls=1" : "");
    return 0;
}

/* ---- hand-written loops -----------------------------------------------------------------------
 */
static int64_t loop_query(const char *q, const nexmark_cfg *c)
{
    const int64_t size = 10 * (int64_t)1000000000, slide = 2 * (int64_t)1000000000;
    const int per = (int)(size / slide);
    nexmark_event e;
    int64_t out = 0, sink = 0;
    if (!strcmp(q, "q0") || !strcmp(q, "q1") || !strcmp(q, "q2")) {
        int kind = q[1] - '0';
        for (int64_t n = 0; n < c->events; n++) {
            size_t len = nexmark_gen(c, n, &e);
            if (kind == 0) {
                sink += (int64_t)len + e.kind; /* touch it, as a sink would */
                out++;
            } else if (e.kind == NEXMARK_BID) {
                if (kind == 1) {
                    e.bid.price = e.bid.price * 908 / 1000;
                    sink += e.bid.price;
                    out++;
                } else if (e.bid.auction % 123 == 0) {
                    sink += e.bid.price;
                    out++;
                }
            }
        }
    } else if (!strcmp(q, "q5")) {
        /* A count map per open window (a ring of size / slide), closed when
         * event time leaves it: the auctions with the most bids. */
        nx_map w[8];
        for (int i = 0; i < per; i++)
            nx_map_init(&w[i], 1024);
        int64_t cur = INT64_MIN;
        for (int64_t n = 0; n <= c->events; n++) {
            int64_t idx;
            if (n < c->events) {
                nexmark_gen(c, n, &e);
                if (e.kind != NEXMARK_BID)
                    continue;
                idx = floor_to(e.bid.date_time, slide) / slide;
            } else {
                idx = cur + per; /* the end closes every window */
            }
            if (cur == INT64_MIN)
                cur = idx;
            for (; cur < idx; cur++) { /* window starting at cur - per + 1 closes */
                nx_map *m = &w[((cur - per + 1) % per + per) % per];
                int64_t max = 0, nmax = 0;
                for (size_t i = 0; i < m->cap; i++) {
                    if (m->k[i] == INT64_MIN)
                        continue;
                    if (m->v[i] > max) {
                        max = m->v[i];
                        nmax = 0;
                    }
                    nmax += m->v[i] == max;
                }
                out += nmax;
                nx_map_clear(m);
            }
            if (n == c->events)
                break;
            for (int k = 0; k < per; k++)
                (*nx_map_at(&w[((idx - k) % per + per) % per], e.bid.auction))++;
        }
        for (int i = 0; i < per; i++)
            nx_map_free(&w[i]);
    } else if (!strcmp(q, "q7")) {
        int64_t win = INT64_MIN;
        nexmark_q7_out best = {0};
        for (int64_t n = 0; n < c->events; n++) {
            nexmark_gen(c, n, &e);
            if (e.kind != NEXMARK_BID)
                continue;
            int64_t start = floor_to(e.bid.date_time, size);
            if (start != win) {
                if (win != INT64_MIN) {
                    sink += best.price;
                    out++;
                }
                win = start;
                best = (nexmark_q7_out){0};
            }
            nexmark_q7_out b = {start, e.bid.auction, e.bid.bidder, e.bid.price, e.bid.date_time};
            if (!best.price || q7_better(&b, &best))
                best = b;
        }
        out += win != INT64_MIN;
        sink += best.price;
    } else if (!strcmp(q, "q8")) {
        /* Per window: the persons who registered in it and the sellers who
         * opened auctions in it; joined when it closes. */
        nx_map persons, sellers;
        nx_map_init(&persons, 1024);
        nx_map_init(&sellers, 1024);
        int64_t win = INT64_MIN;
        for (int64_t n = 0; n <= c->events; n++) {
            int64_t start = 0;
            if (n < c->events) {
                nexmark_gen(c, n, &e); /* every event is input, as weir's source makes them */
                if (e.kind == NEXMARK_BID)
                    continue;
                start = floor_to(nexmark_ts(c, n), size);
            }
            if (n == c->events || start != win) {
                for (size_t i = 0; i < persons.cap; i++)
                    if (persons.k[i] != INT64_MIN && nx_map_find(&sellers, persons.k[i]))
                        out++;
                nx_map_clear(&persons);
                nx_map_clear(&sellers);
                win = start;
            }
            if (n == c->events)
                break;
            if (e.kind == NEXMARK_PERSON)
                *nx_map_at(&persons, e.person.id) = 1;
            else
                *nx_map_at(&sellers, e.auction.seller) = 1;
        }
        nx_map_free(&persons);
        nx_map_free(&sellers);
    }
    if (sink == 42)
        fputc(' ', stderr); /* keep the work */
    return out;
}

static int run_loop(const char *name, int64_t events)
{
    nexmark_cfg c = {.seed = 1, .events = events, .rate = RATE};
    char base[8];
    snprintf(base, sizeof(base), "%.2s", name); /* q5-local: the q5 loop */
    double t0 = now_s();
    int64_t out = loop_query(base, &c);
    double secs = now_s() - t0;
    printf("bench=nexmark impl=loop query=%s events=%lld events_per_s=%.0f rss_mb=%.1f out=%lld\n",
           name, (long long)events, (double)events / secs, rss_mb(), (long long)out);
    return 0;
}

/* Run fn in a child process (its own peak RSS); its exit status. */
static int in_child(int (*fn)(void *), void *arg)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        int r = fn(arg);
        fflush(stdout);
        _exit(r);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0)
        return 1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

typedef struct job {
    const char *name;
    query_fn q;
    int64_t events;
    int local, p, ckpt, loop, procs;
} job;

static int job_run(void *arg)
{
    job *jb = arg;
    return jb->loop    ? run_loop(jb->name, jb->events)
           : jb->procs ? run_weir_procs(jb->name, jb->q, jb->local, jb->events)
                       : run_weir(jb->name, jb->q, jb->local, jb->events, jb->p, jb->ckpt);
}

int main(int argc, char **argv)
{
    const char *quick = getenv("BENCH_QUICK");
    int q = quick && !strcmp(quick, "1");
    long ov = bench_parse_long(getenv("NEXMARK_EVENTS"), 0);
    long only_p = bench_parse_long(getenv("NEXMARK_PARALLELISM"), 0);        /* profiling one */
    long only_procs = bench_parse_long(getenv("NEXMARK_PROCESSES"), 0) == 2; /* only processes=2 */
    int status = 0;
    if (bench_parse_long(getenv("NEXMARK_STATE"), 0) == 1) {
        size_now = mmap(NULL, 3 * sizeof(int64_t), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (size_now == MAP_FAILED || weir_state_backend_register("nxsize", sized_new, NULL))
            return 1;
        size_peak = size_now + 1, size_backends = size_now + 2;
        for (size_t i = 0; i < sizeof(queries) / sizeof(queries[0]); i++) {
            int want = 0;
            for (int a = 1; a < argc; a++)
                want |= !strcmp(argv[a], queries[i].name);
            if (argc == 1)
                want = !strcmp(queries[i].name, "q5") || !strcmp(queries[i].name, "q7") ||
                       !strcmp(queries[i].name, "q8");
            if (!want || queries[i].local)
                continue;
            int64_t events = ov > 0 ? ov : q ? queries[i].events / 5 : queries[i].events;
            status |= run_state(queries[i].name, queries[i].fn, events, only_p > 0 ? only_p : 2);
        }
        return status;
    }
    for (size_t i = 0; i < sizeof(queries) / sizeof(queries[0]); i++) {
        if (argc > 1) {
            int want = 0;
            for (int a = 1; a < argc; a++)
                want |= !strcmp(argv[a], queries[i].name);
            if (!want)
                continue;
        }
        int64_t events = ov > 0 ? ov : q ? queries[i].events / 5 : queries[i].events;
        job jb = {queries[i].name, queries[i].fn, events, queries[i].local, 1, 0, 1, 0};
        if (!only_procs)
            status |= in_child(job_run, &jb);
        jb.loop = 0;
        for (int p = 1; p <= 2 && !only_procs; p++) {
            if (only_p > 0 && p != only_p)
                continue;
            for (int ck = 0; ck <= 1; ck++) {
                jb.p = p;
                jb.ckpt = ck;
                status |= in_child(job_run, &jb);
            }
        }
        /* q0 and q5 at parallelism 2 with each subtask in a process of its
         * own: q0's forward chain stays in its process, q5's shuffle moves
         * every bid over a TCP channel. */
        if ((only_p <= 0 || only_p == 2) && !queries[i].local &&
            (!strcmp(queries[i].name, "q0") || !strcmp(queries[i].name, "q5"))) {
            jb.procs = 1;
            status |= in_child(job_run, &jb);
            jb.procs = 0;
        }
    }
    return status;
}
