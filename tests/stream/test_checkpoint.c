/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_checkpoint.c - checkpoints and restore (weir/stream.h): aligned
 * barriers on a running keyed job, COMPLETED markers and retention, the
 * exactly-once file sink, restoring keyed state into another parallelism,
 * a damaged checkpoint refused with a clear error, and the crash test: a
 * job SIGKILLed several times at random moments and restored each time
 * writes exactly the lines an uninterrupted run writes - none lost, none
 * repeated.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../state/redis_server.h"
#include "../state/s3_server.h"
#include "state/state_int.h"
#include "test.h"
#include "test_rt.h"
#include "count_ops.h"
#include "weir/rt.h"
#include "weir/stream.h"

/* ---- the job: counter -> key_by(v % 13) -> count -> "k=K n=N" -> file sink ------------------ */
typedef struct job_cfg {
    int64_t n; /* records per source subtask */
    int src_par, count_par;
    int64_t sleep_us; /* per 100 records */
    const char *ckpt, *out;
    int64_t interval_ms;
    int restore;
    int timers; /* the timer job (below) instead of the count */
    /* The rescale recipe instead: count at the job's parallelism (job_par),
     * its lines through a rebalance into the sink, fixed at sink_par when
     * not 0. */
    int job_par, sink_par;
    const char *state; /* the state backend's URI (NULL: memory) */
    const char *pool;  /* its pool's directory: checked after each kill */
} job_cfg;

typedef struct ctr {
    const job_cfg *cfg;
    int64_t next;
} ctr;

static int ctr_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    ctr *c = calloc(1, sizeof(*c));
    c->cfg = arg;
    *state = c;
    return 0;
}

static int ctr_next(weir_ctx *ctx, void *state)
{
    ctr *c = state;
    for (int i = 0; i < 100 && c->next < c->cfg->n; i++) {
        int64_t v = c->next++ * c->cfg->src_par + weir_ctx_subtask(ctx);
        int e = weir_emit(ctx, &v, sizeof(v), v);
        if (e)
            return e;
    }
    if (c->cfg->sleep_us)
        weir_time_sleep(c->cfg->sleep_us * 1000);
    return c->next >= c->cfg->n;
}

static int ctr_snapshot(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    ctr *c = state;
    *buf = malloc(sizeof(int64_t));
    memcpy(*buf, &c->next, sizeof(int64_t));
    *len = sizeof(int64_t);
    return 0;
}

static int ctr_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    ctr *c = state;
    if (len != sizeof(int64_t))
        return weir_fail(ctx, -EBADMSG, "position of %zu bytes", len);
    memcpy(&c->next, buf, sizeof(int64_t));
    return 0;
}

typedef struct run_result {
    int err;
    char error[256];
    weir_ckpt_stats ck;
} run_result;

typedef struct run_arg {
    job_cfg cfg;
    run_result res;
} run_arg;

/* ---- the timer job: counter -> key_by(v) -> a timer at v + 500 -> "k=V t=T" -> file sink -- */
static int key8(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = in->data;
    *len = 8;
    return 0;
}

/* Each record's key asks for an event-time timer 500 later, and for one
 * at 400 that it deletes again (a deleted timer must stay deleted across a
 * restore). */
static int delay_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    int e = weir_timer_register(ctx, WEIR_TIME_EVENT, in->ts + 500);
    if (!e)
        e = weir_timer_register(ctx, WEIR_TIME_EVENT, in->ts + 400);
    if (!e)
        e = weir_timer_delete(ctx, WEIR_TIME_EVENT, in->ts + 400);
    return e;
}

static int delay_fired(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    (void)state, (void)domain;
    size_t kl;
    int64_t k;
    memcpy(&k, weir_ctx_key(ctx, &kl), sizeof(k));
    char line[64];
    int n = snprintf(line, sizeof(line), "k=%lld t=%lld", (long long)k, (long long)when);
    return weir_emit(ctx, line, (size_t)n, when);
}

static int pass(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    return weir_emit(ctx, in->data, in->len, in->ts);
}

static intptr_t run_main(void *arg)
{
    run_arg *ra = arg;
    job_cfg *cfg = &ra->cfg;
    weir_job *j = weir_job_new("ckpt-test");
    weir_source_def sd = {.open = ctr_open,
                          .next = ctr_next,
                          .close = free,
                          .max_out_of_orderness = 0,
                          .snapshot = ctr_snapshot,
                          .restore = ctr_restore};
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "counter", &sd, cfg), cfg->src_par);
    if (cfg->timers) {
        static const weir_op_def delay = {.process = delay_process, .on_timer = delay_fired};
        s = weir_stream_key_by(s, key8, NULL);
        s = weir_stream_parallelism(weir_stream_process(s, "delay", &delay, NULL), cfg->count_par);
        s = weir_stream_rebalance(s);
        s = weir_stream_parallelism(weir_stream_map(s, "line", pass, NULL), cfg->src_par);
    } else if (cfg->job_par) {
        s = weir_stream_map(s, "one", to_one, NULL);
        s = weir_stream_key_by(s, key16, NULL);
        s = weir_stream_map(weir_stream_reduce(s, "count", count16, NULL), "line", to_line, NULL);
        s = weir_stream_rebalance(s);
    } else {
        s = weir_stream_map(s, "one", to_one, NULL);
        s = weir_stream_key_by(s, key16, NULL);
        s = weir_stream_parallelism(weir_stream_reduce(s, "count", count16, NULL), cfg->count_par);
        /* The sink keeps the sources' parallelism (an exactly-once sink's
         * files are per subtask), so the keyed count can be rescaled alone. */
        s = weir_stream_rebalance(s);
        s = weir_stream_parallelism(weir_stream_map(s, "line", to_line, NULL), cfg->src_par);
    }
    CHECK_EQ(weir_stream_file_sink(s, "out", cfg->out), 0);
    if (cfg->sink_par)
        CHECK_EQ(weir_job_sink_parallelism(j, "out", cfg->sink_par), 0);
    weir_run_opts o = {.parallelism = cfg->job_par,
                       .checkpoint_dir = cfg->ckpt,
                       .checkpoint_interval_ms = cfg->interval_ms,
                       .restore = cfg->restore,
                       .state_backend = cfg->state};
    ra->res.err = weir_job_run(j, &o);
    snprintf(ra->res.error, sizeof(ra->res.error), "%s", weir_job_error(j));
    weir_job_ckpt_stats(j, &ra->res.ck);
    /* The history agrees: the latest completed ones, each with its bytes
     * and times, ids rising; the operators' subtasks add up to them. */
    weir_ckpt_info h[WEIR_CKPT_HISTORY];
    int nh = weir_job_ckpt_history(j, h, WEIR_CKPT_HISTORY);
    uint64_t done = 0;
    for (int k = 0; k < nh; k++) {
        CHECK(k == 0 || h[k].id > h[k - 1].id);
        CHECK_GT(h[k].trigger_ms, 0);
        if (h[k].state != WEIR_CKPT_COMPLETED)
            continue;
        done++;
        if (!h[k].final) /* a final one saves no state: nothing runs after it */
            CHECK_GT(h[k].bytes, 0u);
        CHECK_GE(h[k].end_ms, h[k].trigger_ms);
        CHECK_GE(h[k].duration_ns, 0);
    }
    CHECK_EQ(done, ra->res.ck.completed < WEIR_CKPT_HISTORY ? ra->res.ck.completed : done);
    if (ra->res.ck.latest)
        CHECK(nh > 0);
    for (int i = 0; i < weir_job_ops(j); i++) {
        weir_op_stats all, one;
        uint64_t in = 0;
        CHECK_EQ(weir_job_op_stats(j, weir_job_op_name(j, i), &all), 0);
        for (int k = 0; weir_job_op_subtask_stats(j, i, k, &one) == 0; k++)
            in += one.records_in;
        CHECK_EQ(in, all.records_in);
    }
    weir_job_free(j);
    return 0;
}

static run_result run_job(const job_cfg *cfg)
{
    run_arg ra = {.cfg = *cfg};
    test_run_on_rt(2, run_main, &ra);
    return ra.res;
}

/* ---- reading the output ------------------------------------------------------------------- */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every committed line under dir, sorted; *n lines. Checks nothing
 * uncommitted is left when `clean`. */
static char **read_output(const char *dir, size_t *n, int clean)
{
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    size_t cap = 1024, cnt = 0;
    char **lines = malloc(cap * sizeof(*lines));
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') {
            /* .lock: the run's directory lock (dirlock.c), not output */
            if (clean && strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
                strcmp(de->d_name, ".lock"))
                TEST__FAIL("uncommitted file left: %s", de->d_name);
            continue;
        }
        if (strncmp(de->d_name, "part-", 5) != 0)
            continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "r");
        CHECK(f != NULL);
        char line[128];
        while (fgets(line, sizeof(line), f)) {
            line[strcspn(line, "\n")] = '\0';
            if (cnt == cap)
                lines = realloc(lines, (cap *= 2) * sizeof(*lines));
            lines[cnt++] = strdup(line);
        }
        fclose(f);
    }
    closedir(d);
    qsort(lines, cnt, sizeof(*lines), cmp_str);
    *n = cnt;
    return lines;
}

static void free_lines(char **l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(l[i]);
    free(l);
}

/* The lines an exact run writes: per key k, "k=K n=1".."k=K n=count(k)". */
static char **reference(int64_t n_per_src, int src_par, size_t *n)
{
    int64_t per_key[13] = {0};
    for (int64_t i = 0; i < n_per_src * src_par; i++)
        per_key[i % 13]++;
    size_t total = 0;
    for (int k = 0; k < 13; k++)
        total += (size_t)per_key[k];
    char **lines = malloc(total * sizeof(*lines));
    size_t c = 0;
    for (int k = 0; k < 13; k++)
        for (int64_t i = 1; i <= per_key[k]; i++) {
            char line[64];
            snprintf(line, sizeof(line), "k=%d n=%lld", k, (long long)i);
            lines[c++] = strdup(line);
        }
    qsort(lines, total, sizeof(*lines), cmp_str);
    *n = total;
    return lines;
}

static void check_exact(const char *out, int64_t n_per_src, int src_par)
{
    size_t got_n, want_n;
    char **got = read_output(out, &got_n, 1), **want = reference(n_per_src, src_par, &want_n);
    if (got_n != want_n)
        fprintf(stderr, "output has %zu lines, want %zu\n", got_n, want_n);
    CHECK_EQ(got_n, want_n);
    for (size_t i = 0; i < got_n; i++) {
        if (strcmp(got[i], want[i]) != 0)
            fprintf(stderr, "line %zu: \"%s\", want \"%s\"\n", i, got[i], want[i]);
        CHECK_STR(got[i], want[i]);
    }
    free_lines(got, got_n);
    free_lines(want, want_n);
}

static char base[64];

static void dirs(char *ckpt, char *out, const char *tag)
{
    sprintf(ckpt, "%s/%s-ckpt", base, tag);
    sprintf(out, "%s/%s-out", base, tag);
}

static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

static void setup(void)
{
    if (!base[0]) {
        strcpy(base, "/tmp/weir-ckpt-XXXXXX");
        CHECK(mkdtemp(base) != NULL);
    }
}

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    CHECK_EQ(system(cmd), 0);
    base[0] = '\0';
}

/* The newest COMPLETED-<id> in dir (0: none). */
static uint64_t latest_completed(const char *dir)
{
    DIR *d = opendir(dir);
    uint64_t best = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        unsigned long long id;
        char end;
        if (sscanf(de->d_name, "COMPLETED-%llu%c", &id, &end) == 1 && id > best)
            best = id;
    }
    if (d)
        closedir(d);
    return best;
}

/* Wait (30 s at most) until child pid has completed a checkpoint past
 * `after` in ckpt, or has ended; then SIGKILL it, extra_ms later. 1 if the
 * kill struck it still running. */
static int kill_after_checkpoint(pid_t pid, const char *ckpt, uint64_t after, int extra_ms)
{
    int64_t give_up = weir_time_now() + 30 * WEIR_SEC;
    int st;
    while (latest_completed(ckpt) <= after) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return 0; /* ended before: nothing to kill */
        CHECK_LT(weir_time_now(), give_up);
        usleep(1000);
    }
    if (extra_ms)
        usleep((useconds_t)extra_ms * 1000);
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st);
}

/* Run fn(arg) on a two-thread runtime in a child and SIGKILL it once it has
 * completed checkpoint min_id (or a later one) into ckpt. 1 if the kill
 * struck it still running. */
static int run_killed(intptr_t (*fn)(void *), void *arg, const char *ckpt, uint64_t min_id)
{
    pid_t pid = fork();
    CHECK_GE(pid, 0);
    if (pid == 0) {
        test_run_on_rt(2, fn, arg);
        _exit(0);
    }
    return kill_after_checkpoint(pid, ckpt, min_id - 1, 0);
}

static void check_pool(const char *ckpt, const char *pool, int exact);

/* Run the job `rounds` times, each in a child restoring from the last
 * one's checkpoints (the first starts fresh), SIGKILLing all but the last
 * once it completed a checkpoint of its own and up to spread_ms more; the
 * last must finish cleanly. count_par (if not NULL) is the keyed
 * operator's parallelism per round. Returns how many kills struck a
 * running job. */
static int crash_rounds(const job_cfg *cfg, int rounds, int spread_ms, const int *count_par)
{
    unsigned seed = (unsigned)getpid();
    int kills = 0;
    for (int round = 0; round < rounds; round++) {
        uint64_t before = latest_completed(cfg->ckpt);
        pid_t pid = fork();
        CHECK_GE(pid, 0);
        if (pid == 0) {
            job_cfg c = *cfg;
            c.restore = round > 0;
            if (count_par)
                c.count_par = count_par[round];
            run_result r = run_job(&c);
            if (r.err)
                fprintf(stderr, "child: %s\n", r.error);
            _exit(r.err ? 1 : 0);
        }
        int st;
        if (round < rounds - 1) {
            kills += kill_after_checkpoint(pid, cfg->ckpt, before, rand_r(&seed) % spread_ms);
            if (cfg->pool) /* what the next round restores from is all there */
                check_pool(cfg->ckpt, cfg->pool, 0);
        } else {
            waitpid(pid, &st, 0);
            CHECK(WIFEXITED(st));
            CHECK_EQ(WEXITSTATUS(st), 0);
        }
    }
    return kills;
}

/* ---- tests --------------------------------------------------------------------------------- */
TEST(checkpoints_complete_and_are_pruned)
{
    setup();
    char ckpt[128], out[128];
    dirs(ckpt, out, "run");
    job_cfg cfg = {.n = 20000,
                   .src_par = 2,
                   .count_par = 2,
                   .sleep_us = 1000,
                   .ckpt = ckpt,
                   .out = out,
                   .interval_ms = 20};
    run_result r = run_job(&cfg);
    if (r.err)
        fprintf(stderr, "%s\n", r.error);
    CHECK_EQ(r.err, 0);
    CHECK_GE(r.ck.completed, 3);                    /* ~200 ms of input, a checkpoint every 20 ms */
    CHECK_EQ(count_entries(ckpt, "COMPLETED-"), 1); /* retain 1 */
    CHECK_EQ(count_entries(ckpt, "chk-"), 1);
    check_exact(out, cfg.n, cfg.src_par);
    /* Committed during the run, not only at the end: several parts. */
    CHECK_GT(count_entries(out, "part-"), 4);
    /* A fresh run into the same directory numbers its checkpoints after
     * the earlier run's, so the latest marker is always the newest. */
    char out2[160];
    snprintf(out2, sizeof(out2), "%s-2", out);
    job_cfg again = cfg;
    again.out = out2;
    again.n = 4000;
    run_result r2 = run_job(&again);
    CHECK_EQ(r2.err, 0);
    CHECK_GE(r2.ck.completed, 1);
    CHECK_GT(r2.ck.latest, r.ck.latest);
    CHECK_EQ(count_entries(ckpt, "COMPLETED-"), 1);
    cleanup();
}

TEST(restore_into_another_parallelism)
{
    setup();
    char ckpt[128], out[128];
    dirs(ckpt, out, "rescale");
    /* A first run killed after some checkpoints, then a restore with the
     * count operator on 3 subtasks instead of 2. */
    run_arg first = {.cfg = {.n = 20000,
                             .src_par = 2,
                             .count_par = 2,
                             .sleep_us = 1000,
                             .ckpt = ckpt,
                             .out = out,
                             .interval_ms = 20}};
    CHECK(run_killed(run_main, &first, ckpt, 1));
    CHECK_GE(count_entries(ckpt, "COMPLETED-"), 1);
    /* A source that saves positions cannot change its parallelism. */
    job_cfg wrong = {.n = 20000,
                     .src_par = 3,
                     .count_par = 3,
                     .ckpt = ckpt,
                     .out = out,
                     .interval_ms = 20,
                     .restore = 1};
    run_result rw = run_job(&wrong);
    CHECK_EQ(rw.err, -EINVAL);
    CHECK(strstr(rw.error, "\"counter\" ran on 2 subtasks") != NULL);
    /* Output a crashed run committed at its end of input, after the restored
     * checkpoint, goes (its records come again from the rewound source). */
    char fake[256];
    snprintf(fake, sizeof(fake), "%s/part-0-999999", out);
    FILE *ff = fopen(fake, "w");
    CHECK(ff != NULL);
    fputs("k=0 n=424242\n", ff);
    fclose(ff);
    job_cfg cfg = {.n = 20000,
                   .src_par = 2,
                   .count_par = 3,
                   .sleep_us = 0,
                   .ckpt = ckpt,
                   .out = out,
                   .interval_ms = 20,
                   .restore = 1};
    run_result r = run_job(&cfg);
    if (r.err)
        fprintf(stderr, "%s\n", r.error);
    CHECK_EQ(r.err, 0);
    CHECK_GT(r.ck.restored, 0);
    check_exact(out, cfg.n, cfg.src_par); /* (the fake part file is gone) */
    cleanup();
}

/* docs/stream.md's recipe: a sink behind a rebalance, its parallelism
 * fixed, lets the job's parallelism change on a restore (2 -> 3). */
TEST(sink_with_its_own_parallelism_survives_a_rescale)
{
    setup();
    char ckpt[128], out[128];
    dirs(ckpt, out, "sinkpar");
    run_arg first = {.cfg = {.n = 20000,
                             .src_par = 1,
                             .job_par = 2,
                             .sink_par = 1,
                             .sleep_us = 1000,
                             .ckpt = ckpt,
                             .out = out,
                             .interval_ms = 20}};
    CHECK(run_killed(run_main, &first, ckpt, 1));
    /* Without its own parallelism the sink follows the job's: refused. */
    job_cfg loose = first.cfg;
    loose.job_par = 3;
    loose.sink_par = 0;
    loose.restore = 1;
    run_result rl = run_job(&loose);
    CHECK_EQ(rl.err, -EINVAL);
    CHECK(strstr(rl.error, "\"out\" ran on 1 subtasks") != NULL);
    job_cfg cfg = loose;
    cfg.sink_par = 1;
    cfg.sleep_us = 0;
    run_result r = run_job(&cfg);
    if (r.err)
        fprintf(stderr, "%s\n", r.error);
    CHECK_EQ(r.err, 0);
    CHECK_GT(r.ck.restored, 0);
    check_exact(out, cfg.n, cfg.src_par);
    cleanup();
}

TEST(sink_parallelism_is_checked)
{
    weir_job *j = weir_job_new("bad-sink-par");
    weir_collector *c = weir_collector_new();
    weir_stream *s = weir_job_source_file(j, "src", "/dev/null", NULL);
    CHECK_EQ(weir_stream_collect(s, "sink", c), 0);
    CHECK_EQ(weir_job_sink_parallelism(j, "sink", 0), -EINVAL);
    CHECK(strstr(weir_job_error(j), "sink \"sink\": parallelism 0") != NULL);
    weir_job_free(j);
    j = weir_job_new("bad-sink-name");
    s = weir_job_source_file(j, "src", "/dev/null", NULL);
    CHECK_EQ(weir_stream_collect(s, "sink", c), 0);
    CHECK_EQ(weir_job_sink_parallelism(j, "src", 2), -EINVAL);
    CHECK(strstr(weir_job_error(j), "\"src\" is not a sink") != NULL);
    weir_job_free(j);
    j = weir_job_new("no-sink");
    CHECK_EQ(weir_job_sink_parallelism(j, "nope", 2), -EINVAL);
    CHECK(strstr(weir_job_error(j), "no sink named \"nope\"") != NULL);
    weir_job_free(j);
    weir_collector_free(c);
}

/* A checkpoint of a large keyed state lets the other tasks of its thread
 * run while it captures: on a one-thread runtime a ticker fiber counts its
 * turns, and the keyed sink notes the count at the barrier's drain (just
 * before the capture) and at its pre_commit (just after). 40k keys with a
 * value and a timer each: the capture must have yielded a few times. */
static _Atomic long ticks;
static _Atomic int ticker_stop;

static intptr_t ticker(void *arg)
{
    (void)arg;
    while (!atomic_load(&ticker_stop)) {
        atomic_fetch_add(&ticks, 1);
        weir_task_yield();
    }
    return 0;
}

typedef struct big_src {
    int64_t next;
} big_src;

static int big_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = calloc(1, sizeof(big_src));
    return 0;
}

static int big_next(weir_ctx *ctx, void *state)
{
    big_src *b = state;
    for (int i = 0; i < 1000 && b->next < 40000; i++, b->next++) {
        int e = weir_emit(ctx, &b->next, sizeof(b->next), b->next);
        if (e)
            return e;
    }
    /* Every key is in: end once a checkpoint holding them completed. */
    return b->next == 40000 && weir_ctx_completed(ctx) > 0 ? 1 : 0;
}

typedef struct big_sink {
    long at_drain, most; /* ticks at the last drain; most turns within a barrier */
} big_sink;

static int big_sink_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    *state = arg;
    return 0;
}

static int big_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    int e = weir_value_put(ctx, "v", in->data, in->len);
    return e ? e : weir_timer_register(ctx, WEIR_TIME_EVENT, in->ts + 1);
}

static int big_drain(weir_ctx *ctx, void *state)
{
    (void)ctx;
    ((big_sink *)state)->at_drain = atomic_load(&ticks);
    return 0;
}

static int big_pre_commit(weir_ctx *ctx, void *state, uint64_t id)
{
    (void)ctx, (void)id;
    big_sink *b = state;
    long turns = atomic_load(&ticks) - b->at_drain;
    if (turns > b->most)
        b->most = turns;
    return 0;
}

static intptr_t big_main(void *arg)
{
    big_sink *bs = arg;
    weir_task *t = test_spawn(ticker, NULL);
    weir_job *j = weir_job_new("big-state");
    weir_source_def sd = {
        .open = big_open, .next = big_next, .close = free, .max_out_of_orderness = -1};
    weir_op_def od = {.open = big_sink_open,
                      .process = big_process,
                      .drain = big_drain,
                      .pre_commit = big_pre_commit};
    weir_stream *s = weir_stream_key_by(weir_job_source(j, "src", &sd, NULL), key8, NULL);
    CHECK_EQ(weir_stream_sink(s, "keep", &od, bs), 0);
    char ckpt[128], out[128];
    dirs(ckpt, out, "big");
    int e = weir_job_run(j, &(weir_run_opts){.checkpoint_dir = ckpt, .checkpoint_interval_ms = 10});
    if (e)
        fprintf(stderr, "%s\n", weir_job_error(j));
    CHECK_EQ(e, 0);
    weir_job_free(j);
    atomic_store(&ticker_stop, 1);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    return 0;
}

TEST(capture_of_a_large_state_yields)
{
    setup();
    big_sink bs = {0};
    CHECK_EQ(test_run_on_rt(1, big_main, &bs), 0);
    CHECK_GE(bs.most, 4); /* 80k entries, a yield every 8192 */
    cleanup();
}

/* A window that fired before the checkpoint and is kept by its lateness
 * must fire again for a late record after a restore (the restored subtask's
 * watermark starts over). Events 5 and 20 (the window [0,10) fires), a
 * checkpoint, a crash; the restored run gets 6: [0,10) fires with both. */
typedef struct late_src {
    int64_t pos;
    int waits;
} late_src;

static int ls_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = calloc(1, sizeof(late_src));
    return 0;
}

static int ls_next(weir_ctx *ctx, void *state)
{
    late_src *l = state;
    static const int64_t ts[] = {5, 20, 6};
    if (l->pos == 2 && !weir_ctx_restored(ctx) && l->waits++ < 1000) {
        weir_time_sleep(5 * WEIR_MSEC); /* wait (checkpoints go on between calls) for the kill */
        return 0;
    }
    if (l->pos >= 3)
        return 1;
    int64_t rec[2] = {l->pos == 0 ? 1 : l->pos == 1 ? 1000 : 10, 1}; /* value, key */
    int64_t t = ts[l->pos++];
    return weir_emit(ctx, rec, sizeof(rec), t);
}

static int ls_snap(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    *buf = malloc(8);
    memcpy(*buf, &((late_src *)state)->pos, 8);
    *len = 8;
    return 0;
}

static int ls_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    (void)ctx, (void)len;
    memcpy(&((late_src *)state)->pos, buf, 8);
    return 0;
}

static int sum2(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    static __thread int64_t r[2];
    (void)arg;
    memcpy(r, acc->data, 16);
    r[0] += ((const int64_t *)in->data)[0];
    *out = (weir_rec){r, 16, in->ts};
    return 0;
}

static int to_sum_line(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    weir_window_result h;
    int64_t r[2];
    memcpy(&h, in->data, sizeof(h));
    memcpy(r, (const uint8_t *)in->data + sizeof(h), 16);
    char line[64];
    int n = snprintf(line, sizeof(line), "[%lld,%lld) %lld", (long long)h.start, (long long)h.end,
                     (long long)r[0]);
    return weir_emit(ctx, line, (size_t)n, in->ts);
}

static intptr_t late_restore_main(void *arg)
{
    const job_cfg *cfg = arg;
    weir_job *j = weir_job_new("late-restore");
    weir_source_def sd = {.open = ls_open,
                          .next = ls_next,
                          .close = free,
                          .max_out_of_orderness = 0,
                          .snapshot = ls_snap,
                          .restore = ls_restore};
    weir_stream *s = weir_job_source(j, "src", &sd, NULL);
    s = weir_stream_key_by(s, key16, NULL); /* the key: the second 8 bytes */
    weir_window w = {.kind = WEIR_WINDOW_TUMBLING, .size = 10, .allowed_lateness = 100};
    s = weir_stream_window(s, "win", &w, sum2, NULL);
    s = weir_stream_map(s, "line", to_sum_line, NULL);
    CHECK_EQ(weir_stream_file_sink(s, "out", cfg->out), 0);
    int e = weir_job_run(j, &(weir_run_opts){.checkpoint_dir = cfg->ckpt,
                                             .checkpoint_interval_ms = 20,
                                             .restore = cfg->restore});
    if (e)
        fprintf(stderr, "%s\n", weir_job_error(j));
    weir_job_free(j);
    return e;
}

TEST(late_update_after_restore_fires)
{
    setup();
    char ckpt[128], out[128];
    dirs(ckpt, out, "late");
    job_cfg first = {.ckpt = ckpt, .out = out};
    /* 5 and 20 are in, [0,10) fired, checkpoints taken (the second one
     * comes after the source's first wait, so it holds both records): */
    CHECK(run_killed(late_restore_main, &first, ckpt, 2));
    job_cfg c = {.ckpt = ckpt, .out = out, .restore = 1};
    CHECK_EQ(test_run_on_rt(2, late_restore_main, &c), 0);
    size_t n;
    char **lines = read_output(out, &n, 1);
    int refired = 0, later = 0;
    for (size_t i = 0; i < n; i++) {
        refired += strcmp(lines[i], "[0,10) 11") == 0;
        later += strcmp(lines[i], "[20,30) 1000") == 0;
    }
    CHECK_EQ(refired, 1);
    CHECK_EQ(later, 1);
    free_lines(lines, n);
    cleanup();
}

TEST(crash_and_restore_is_exactly_once)
{
    setup();
    char ckpt[128], out[128];
    dirs(ckpt, out, "crash");
    job_cfg cfg = {.n = 40000,
                   .src_par = 2,
                   .count_par = 2,
                   .sleep_us = 1000,
                   .ckpt = ckpt,
                   .out = out,
                   .interval_ms = 15};
    int kills = crash_rounds(&cfg, 4, 90, NULL);
    CHECK_GE(kills, 1);
    check_exact(out, cfg.n, cfg.src_par);
    cleanup();
}

/* ---- keyed state on the remote-read backend -----------------------------------------------------
 */
/* The runs the latest checkpoint's state handles name (sorted, once each),
 * and the runs in the pool directory. */
static weir__names names_sorted(weir__names n)
{
    if (n.n)
        qsort(n.v, n.n, sizeof(*n.v), cmp_str);
    size_t k = 0;
    for (size_t i = 0; i < n.n; i++) {
        if (k && strcmp(n.v[k - 1], n.v[i]) == 0) {
            free(n.v[i]);
            continue;
        }
        n.v[k++] = n.v[i];
    }
    n.n = k;
    return n;
}

static weir__names referenced_runs(const char *ckpt)
{
    char dir[256];
    snprintf(dir, sizeof(dir), "%s/chk-%llu", ckpt, (unsigned long long)latest_completed(ckpt));
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    weir__names all = {0};
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 6, ".state") != 0)
            continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        static uint8_t img[1 << 20];
        size_t len = fread(img, 1, sizeof(img), f);
        fclose(f);
        weir__names one;
        CHECK_EQ(weir__remote_handle_runs(img, len, &one), 0);
        all.v = realloc(all.v, (all.n + one.n + 1) * sizeof(*all.v));
        for (size_t i = 0; i < one.n; i++)
            all.v[all.n++] = strdup(one.v[i]);
        weir__names_free(&one);
    }
    closedir(d);
    return names_sorted(all);
}

static weir__names pool_runs(const char *pool)
{
    char dir[256];
    snprintf(dir, sizeof(dir), "%s/runs", pool);
    DIR *d = opendir(dir);
    weir__names all = {0};
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        all.v = realloc(all.v, (all.n + 1) * sizeof(*all.v));
        char name[300];
        snprintf(name, sizeof(name), "runs/%s", de->d_name);
        all.v[all.n++] = strdup(name);
    }
    if (d)
        closedir(d);
    return names_sorted(all);
}

static void free_names(weir__names *n)
{
    for (size_t i = 0; i < n->n; i++)
        free(n->v[i]);
    free(n->v);
}

/* Every run the latest checkpoint needs is in the pool; with exact, the
 * pool holds nothing else (what only pruned checkpoints needed is gone). */
static void check_pool(const char *ckpt, const char *pool, int exact)
{
    weir__names want = referenced_runs(ckpt), have = pool_runs(pool);
    CHECK_GT(want.n, 0);
    for (size_t i = 0; i < want.n; i++)
        if (!bsearch(&want.v[i], have.v, have.n, sizeof(*have.v), cmp_str))
            TEST__FAIL("the latest checkpoint needs %s, which the pool lacks", want.v[i]);
    if (exact && have.n != want.n)
        TEST__FAIL("the pool holds %zu runs, the latest checkpoint needs %zu", have.n, want.n);
    free_names(&want);
    free_names(&have);
}

/* The count job with its state in a pool behind a hot tier of 1 KiB (the
 * tier evicts whatever a checkpoint made durable), SIGKILLed at random
 * moments, persists in flight included: after each kill the pool holds
 * every run the latest checkpoint needs, and the rounds write exactly the
 * uninterrupted run's lines. Then a clean run over the same pool: when it
 * ends (its final checkpoint holds no state) every run it wrote is gone
 * again - what no retained checkpoint needs is deleted - and the runs the
 * killed rounds left behind unreferenced are untouched. */
TEST(crash_and_restore_on_remote_state_is_exactly_once)
{
    setup();
    char ckpt[128], out[128], pool[128], uri[256];
    dirs(ckpt, out, "remote");
    snprintf(pool, sizeof(pool), "%s/pool", base);
    snprintf(uri, sizeof(uri), "remote:latency://0-1/file://%s?hot_max_bytes=1024", pool);
    job_cfg cfg = {.n = 30000,
                   .src_par = 2,
                   .count_par = 2,
                   .sleep_us = 1000,
                   .ckpt = ckpt,
                   .out = out,
                   .interval_ms = 15,
                   .state = uri,
                   .pool = pool};
    int kills = crash_rounds(&cfg, 4, 90, NULL);
    CHECK_GE(kills, 1);
    check_exact(out, cfg.n, cfg.src_par);
    weir__names left = pool_runs(pool);
    char out2[160];
    snprintf(out2, sizeof(out2), "%s-2", out);
    job_cfg again = cfg;
    again.out = out2;
    again.n = 20000;
    run_result r = run_job(&again);
    if (r.err)
        fprintf(stderr, "%s\n", r.error);
    CHECK_EQ(r.err, 0);
    CHECK_GE(r.ck.completed, 3);
    check_exact(out2, again.n, again.src_par);
    weir__names now = pool_runs(pool);
    if (now.n != left.n) {
        for (size_t i = 0; i < now.n; i++)
            fprintf(stderr, "now %s\n", now.v[i]);
        for (size_t i = 0; i < left.n; i++)
            fprintf(stderr, "left %s\n", left.v[i]);
        fprintf(stderr, "latest %llu\n", (unsigned long long)latest_completed(ckpt));
    }
    CHECK_EQ(now.n, left.n);
    for (size_t i = 0; i < now.n; i++)
        CHECK_STR(now.v[i], left.v[i]);
    free_names(&left);
    free_names(&now);
    cleanup();
}

/* A job whose state lives in a Redis pool while the server is SIGKILLed
 * and started again on the same port and data, once the job has
 * checkpointed: the pool's store reconnects and sends again what was in
 * flight, so the job goes on - its checkpoints complete again after the
 * restart - and writes exactly the lines of an uninterrupted run. */
typedef struct bg_job {
    job_cfg cfg;
    run_result r;
    _Atomic int done;
} bg_job;

static void *bg_job_main(void *arg)
{
    bg_job *b = arg;
    b->r = run_job(&b->cfg);
    atomic_store(&b->done, 1);
    return NULL;
}

/* The job on the pool uri, its server stopped (SIGKILL) and started again
 * once the job has checkpointed twice. */
static void restart_mid_job(const char *uri, const char *tag, void (*restart)(void *), void *srv)
{
    char ckpt[128], out[128];
    dirs(ckpt, out, tag);
    bg_job b = {.cfg = {.n = 60000,
                        .src_par = 2,
                        .count_par = 2,
                        .sleep_us = 1000,
                        .ckpt = ckpt,
                        .out = out,
                        .interval_ms = 15,
                        .state = uri}};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, bg_job_main, &b), 0);
    int64_t deadline = weir_time_now() + 60 * WEIR_SEC;
    while (latest_completed(ckpt) < 2 && !atomic_load(&b.done)) {
        CHECK_LT(weir_time_now(), deadline);
        usleep(2000);
    }
    CHECK(!atomic_load(&b.done)); /* the restart comes while the job runs */
    uint64_t before = latest_completed(ckpt);
    restart(srv);
    CHECK_EQ(pthread_join(th, NULL), 0);
    if (b.r.err)
        fprintf(stderr, "%s\n", b.r.error);
    CHECK_EQ(b.r.err, 0);
    CHECK_GT(latest_completed(ckpt), before); /* checkpoints went on after it */
    check_exact(out, b.cfg.n, b.cfg.src_par);
}

static void redis_restart(void *arg)
{
    server_kill(arg);
    server_start(arg);
}

static void s3_restart(void *arg)
{
    s3_server_kill(arg);
    s3_server_start(arg, "ckpt");
}

TEST(a_redis_pool_restarted_mid_job_loses_nothing)
{
    setup();
    server sv = {0};
    server_start(&sv);
    char uri[256];
    snprintf(uri, sizeof(uri), "remote:redis://127.0.0.1:%d?prefix=ck/&hot_max_bytes=1024",
             sv.port);
    restart_mid_job(uri, "redis", redis_restart, &sv);
    server_stop(&sv);
    cleanup();
}

/* The same on an S3 pool (s3rver): its calls go round again within their
 * deadline while the server is away. */
TEST(an_s3_pool_restarted_mid_job_loses_nothing)
{
    setup();
    s3_server_credentials();
    s3_server sv = {0};
    s3_server_up(&sv, "ckpt");
    char uri[256];
    snprintf(uri, sizeof(uri), "remote:s3://ckpt/job?endpoint=127.0.0.1:%d&hot_max_bytes=1024",
             sv.port);
    restart_mid_job(uri, "s3", s3_restart, &sv);
    s3_server_down(&sv);
    cleanup();
}

/* Timers are keyed state: pending ones come back with their key groups
 * after a crash, into another parallelism, and deleted ones stay deleted.
 * Every key's timer fires exactly once over the runs. */
TEST(timers_survive_crashes_and_rescaling)
{
    setup();
    char ckpt[128], out[128];
    dirs(ckpt, out, "timers");
    job_cfg cfg = {.n = 20000,
                   .src_par = 2,
                   .sleep_us = 1000,
                   .ckpt = ckpt,
                   .out = out,
                   .interval_ms = 15,
                   .timers = 1};
    static const int count_par[] = {2, 1, 2}; /* rescaled in between */
    int kills = crash_rounds(&cfg, 3, 60, count_par);
    CHECK_GE(kills, 1);
    size_t n, want_n = (size_t)(cfg.n * cfg.src_par);
    char **got = read_output(out, &n, 1);
    char **want = malloc(want_n * sizeof(*want));
    for (size_t v = 0; v < want_n; v++) {
        char line[64];
        snprintf(line, sizeof(line), "k=%zu t=%zu", v, v + 500);
        want[v] = strdup(line);
    }
    qsort(want, want_n, sizeof(*want), cmp_str);
    CHECK_EQ(n, want_n);
    for (size_t i = 0; i < n; i++)
        CHECK_STR(got[i], want[i]);
    free_lines(got, n);
    free_lines(want, want_n);
    cleanup();
}

TEST(damaged_checkpoint_is_refused)
{
    setup();
    char ckpt[128], out[128];
    dirs(ckpt, out, "damaged");
    run_arg first = {.cfg = {.n = 20000,
                             .src_par = 1,
                             .count_par = 1,
                             .sleep_us = 1000,
                             .ckpt = ckpt,
                             .out = out,
                             .interval_ms = 20}};
    run_killed(run_main, &first, ckpt, 1);
    /* Flip a byte in the count operator's state file of the checkpoint. */
    char cmd[512];
    /* (The latest completed one: a kill during pruning can leave an older
     * checkpoint beside it, and chk-9 sorts after chk-10.) */
    snprintf(cmd, sizeof(cmd),
             "id=$(ls %s | sed -n 's/^COMPLETED-//p' | sort -n | tail -1) && "
             "f=%s/chk-$id/count.0.state && test -f \"$f\" && "
             "printf 'X' | dd of=\"$f\" bs=1 seek=40 conv=notrunc 2>/dev/null",
             ckpt, ckpt);
    CHECK_EQ(system(cmd), 0);
    job_cfg cfg = {.n = 20000,
                   .src_par = 1,
                   .count_par = 1,
                   .ckpt = ckpt,
                   .out = out,
                   .interval_ms = 20,
                   .restore = 1};
    run_result r = run_job(&cfg);
    CHECK_EQ(r.err, -EBADMSG);
    CHECK(strstr(r.error, "count") != NULL);
    CHECK(strstr(r.error, "checksum") != NULL);
    /* Restore without a directory is a clear error. */
    job_cfg bad = {.n = 10, .src_par = 1, .count_par = 1, .out = out, .restore = 1};
    r = run_job(&bad);
    CHECK_EQ(r.err, -EINVAL);
    CHECK(strstr(r.error, "checkpoint_dir") != NULL);
    cleanup();
}

TEST_MAIN()
