/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ckpt_final.c - a bounded job with checkpoints ends through one
 * job-wide final checkpoint (stream/ckpt_link.h): a subtask whose input
 * ended pre-commits its tail under the final id and waits; once every
 * subtask got there, the checkpoint completes (manifest marked final,
 * COMPLETED marker) and only then do the two-phase sinks commit and the
 * job end. A job that fails after one subtask ended commits none of that
 * subtask's tail; a restore from a final checkpoint commits what it left
 * pending and runs nothing; without checkpoints a two-phase sink commits
 * in finish().
 */
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stream/manifest.h"
#include "test.h"
#include "test_rt.h"
#include "weir/stream.h"

/* ---- the job: src (2 subtasks) -> forward -> sink (2 subtasks) ------------------------------ */
enum { FAST_N = 1000, SLOW_TAIL = 50 };

static _Atomic int fail_slow;        /* subtask 1 fails instead of ending */
static _Atomic int slow_forever;     /* subtask 1 never ends (until cancelled) */
static _Atomic uint64_t seq;         /* orders the hooks' events */
static _Atomic uint64_t fast_final;  /* sink 0's final pre_commit id, once it ran */
static _Atomic uint64_t slow_finish; /* seq of sink 1's finish() */

typedef struct sink_side {
    uint64_t received, pending, committed; /* records: in, not pre-committed, committed */
    uint64_t precommitted[64];             /* records pre-committed per checkpoint slot */
    uint64_t ids[64];
    int nids;
    uint64_t finish_seq, final_pre_commit, final_commit, final_commit_seq;
    int final_flag;       /* weir_ctx_final_checkpoint() in finish() */
    int pre_after_finish; /* pre_commit() calls after finish() */
    int committed_finish; /* without checkpoints: finish() committed */
} sink_side;
static sink_side sides[2];

static int src_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = calloc(2, sizeof(int64_t)); /* the next value; subtask 1: its tail so far */
    return *state ? 0 : -ENOMEM;
}

static int src_next(weir_ctx *ctx, void *state)
{
    int64_t *n = state;
    if (weir_ctx_subtask(ctx) == 0) {
        for (int i = 0; i < 100 && *n < FAST_N; i++, (*n)++)
            if (weir_emit(ctx, n, 8, *n) < 0)
                return -EIO;
        return *n >= FAST_N;
    }
    /* Subtask 1 runs on (paced) until subtask 0's sink took its part of
     * the final checkpoint, and a tail after that: the final cannot
     * complete before this subtask has ended too. */
    weir_time_sleep(WEIR_MSEC);
    if (weir_emit(ctx, n, 8, *n) < 0)
        return -EIO;
    (*n)++;
    if (!atomic_load(&fast_final) || ++n[1] < SLOW_TAIL || atomic_load(&slow_forever))
        return 0;
    if (atomic_load(&fail_slow))
        return weir_fail(ctx, -EIO, "the slow source failed on purpose");
    return 1;
}

static const weir_source_def src_def = {.open = src_open, .next = src_next, .close = free};

static int sink_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state, (void)in;
    sink_side *s = &sides[weir_ctx_subtask(ctx)];
    s->received++;
    s->pending++;
    return 0;
}

static int sink_finish(weir_ctx *ctx, void *state)
{
    (void)state;
    int i = weir_ctx_subtask(ctx);
    sink_side *s = &sides[i];
    s->finish_seq = atomic_fetch_add(&seq, 1) + 1;
    s->final_flag = weir_ctx_final_checkpoint(ctx);
    if (i == 1)
        atomic_store(&slow_finish, s->finish_seq);
    if (!s->final_flag) { /* no checkpoint will follow: the rest is committed now */
        s->committed += s->pending;
        s->pending = 0;
        s->committed_finish = 1;
    }
    return 0;
}

static int sink_pre_commit(weir_ctx *ctx, void *state, uint64_t id)
{
    (void)state;
    int i = weir_ctx_subtask(ctx);
    sink_side *s = &sides[i];
    CHECK_LT(s->nids, 64);
    s->ids[s->nids] = id;
    s->precommitted[s->nids++] = s->pending;
    s->pending = 0;
    if (s->finish_seq) {
        /* The end of input went out: nothing more may be emitted. */
        CHECK_EQ(weir_emit(ctx, "x", 1, 0), -EPIPE);
        s->pre_after_finish++;
        s->final_pre_commit = id;
        if (i == 0)
            atomic_store(&fast_final, id);
    }
    return 0;
}

static int sink_commit(weir_ctx *ctx, void *state, uint64_t id)
{
    (void)state;
    sink_side *s = &sides[weir_ctx_subtask(ctx)];
    /* Everything pre-committed up to id becomes visible. */
    for (int k = 0; k < s->nids; k++)
        if (s->ids[k] && s->ids[k] <= id) {
            s->committed += s->precommitted[k];
            s->ids[k] = 0;
        }
    if (s->final_pre_commit && id >= s->final_pre_commit) {
        s->final_commit = id;
        s->final_commit_seq = atomic_fetch_add(&seq, 1) + 1;
    }
    return 0;
}

typedef struct job_cfg {
    const char *ckpt; /* NULL: no checkpoints */
    int err;
    char error[256];
    weir_ckpt_stats stats;
} job_cfg;

static intptr_t run_main(void *arg)
{
    job_cfg *c = arg;
    weir_job *j = weir_job_new("final");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &src_def, NULL), 2);
    CHECK_EQ(weir_stream_sink(s, "sink",
                              &(weir_op_def){.process = sink_process,
                                             .finish = sink_finish,
                                             .pre_commit = sink_pre_commit,
                                             .commit = sink_commit},
                              NULL),
             0);
    c->err = weir_job_run(j, &(weir_run_opts){.parallelism = 2,
                                              .checkpoint_dir = c->ckpt,
                                              .checkpoint_interval_ms = c->ckpt ? 20 : 0});
    snprintf(c->error, sizeof(c->error), "%s", weir_job_error(j));
    weir_job_ckpt_stats(j, &c->stats);
    weir_job_free(j);
    return 0;
}

static void reset(int fail)
{
    memset(sides, 0, sizeof(sides));
    atomic_store(&seq, 0);
    atomic_store(&fast_final, 0);
    atomic_store(&slow_finish, 0);
    atomic_store(&fail_slow, fail);
    atomic_store(&slow_forever, 0);
}

static int exists(const char *dir, const char *fmt, uint64_t id)
{
    char path[512], name[64];
    snprintf(name, sizeof(name), fmt, (unsigned long long)id);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static void rm_rf(const char *dir)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

TEST(a_bounded_job_commits_its_tail_through_one_final_checkpoint)
{
    char dir[] = "/tmp/weir-final-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    reset(0);
    job_cfg c = {.ckpt = dir};
    CHECK_EQ(test_run_on_rt(2, run_main, &c), 0);
    if (c.err)
        fprintf(stderr, "job: %s\n", c.error);
    CHECK_EQ(c.err, 0);
    uint64_t fin = c.stats.latest;
    for (int i = 0; i < 2; i++) {
        sink_side *s = &sides[i];
        CHECK(s->final_flag);
        CHECK_EQ(s->pre_after_finish, 1);    /* one final pre-commit, after finish() */
        CHECK_EQ(s->final_pre_commit, fin);  /* one id for the whole job */
        CHECK_EQ(s->final_commit, fin);      /* committed through it */
        CHECK_EQ(s->committed, s->received); /* the whole tail, nothing twice */
        CHECK_EQ(s->pending, 0u);
        CHECK(!s->committed_finish);
    }
    CHECK_EQ(sides[0].received, (uint64_t)FAST_N);
    CHECK_GE(sides[1].received, (uint64_t)SLOW_TAIL);
    /* The subtask that ended first committed only once the other ended too. */
    CHECK_LT(sides[0].finish_seq, sides[1].finish_seq);
    CHECK_GT(sides[0].final_commit_seq, atomic_load(&slow_finish));
    /* The final checkpoint is durable and says what it is. */
    CHECK(exists(dir, "COMPLETED-%llu", fin));
    char path[512];
    snprintf(path, sizeof(path), "%s/chk-%llu/MANIFEST.json", dir, (unsigned long long)fin);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    char text[8192];
    size_t len = fread(text, 1, sizeof(text), f);
    fclose(f);
    weir__manifest m;
    char why[256] = "";
    CHECK_EQ(weir__manifest_decode(text, len, &m, why, sizeof(why)), 0);
    CHECK(m.final);
    CHECK_EQ(m.id, fin);
    CHECK_EQ(m.nsubs, 2u); /* [src sink] x2: one chain */
    for (uint32_t i = 0; i < m.nsubs; i++)
        CHECK(!m.subs[i].state && !m.subs[i].position);
    weir__manifest_clear(&m);
    rm_rf(dir);
}

TEST(a_job_failing_after_a_subtask_ended_commits_none_of_its_tail)
{
    char dir[] = "/tmp/weir-final-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    reset(1);
    job_cfg c = {.ckpt = dir};
    CHECK_EQ(test_run_on_rt(2, run_main, &c), 0);
    CHECK_EQ(c.err, -EIO);
    CHECK_HAS(c.error, "failed on purpose");
    /* Subtask 0 had pre-committed its tail for the final checkpoint... */
    uint64_t fin = atomic_load(&fast_final);
    CHECK_GT(fin, 0u);
    CHECK_EQ(sides[0].pre_after_finish, 1);
    /* ... which never completed: nothing of it was committed. */
    CHECK_EQ(sides[0].final_commit, 0u);
    CHECK_LT(sides[0].committed, sides[0].received);
    CHECK(!exists(dir, "COMPLETED-%llu", fin));
    CHECK(!exists(dir, "chk-%llu", fin));
    CHECK_LT(c.stats.latest, fin);
    rm_rf(dir);
}

/* A cancel while one subtask waits in the final checkpoint (the other
 * never ends): the run ends, cancelled, within the deadline, and nothing
 * of the final is committed or marked completed. */
static intptr_t cancel_in_final_main(void *arg)
{
    job_cfg *c = arg;
    weir_task *t =
        weir_task_spawn(run_main, c, &(weir_spawn_opts){.name = "job", .stack_size = 256 << 10});
    CHECK(t != NULL);
    int64_t deadline = weir_time_after_ms(30000);
    while (!atomic_load(&fast_final) && weir_time_now() < deadline)
        weir_time_sleep(5 * WEIR_MSEC);
    CHECK_GT(atomic_load(&fast_final), 0u);
    weir_task_cancel(t);
    /* -ECANCELED: it ended, cancelled; -ETIMEDOUT: it hangs. */
    CHECK_EQ(weir_task_join(t, NULL, weir_time_after_ms(30000)), -ECANCELED);
    return 0;
}

TEST(a_cancel_while_a_subtask_waits_in_the_final_checkpoint_ends_the_run)
{
    char dir[] = "/tmp/weir-final-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    reset(0);
    atomic_store(&slow_forever, 1);
    job_cfg c = {.ckpt = dir};
    CHECK_EQ(test_run_on_rt(2, cancel_in_final_main, &c), 0);
    CHECK_EQ(c.err, -ECANCELED);
    uint64_t fin = atomic_load(&fast_final);
    CHECK_EQ(sides[0].pre_after_finish, 1);
    CHECK_EQ(sides[0].final_commit, 0u);
    CHECK(!exists(dir, "COMPLETED-%llu", fin));
    CHECK_LT(c.stats.latest, fin);
    rm_rf(dir);
}

TEST(without_checkpoints_a_two_phase_sink_commits_in_finish)
{
    reset(0);
    atomic_store(&fast_final, 1); /* (no final pre-commit will come to release subtask 1) */
    job_cfg c = {0};
    CHECK_EQ(test_run_on_rt(2, run_main, &c), 0);
    CHECK_EQ(c.err, 0);
    for (int i = 0; i < 2; i++) {
        CHECK(!sides[i].final_flag);
        CHECK(sides[i].committed_finish);
        CHECK_EQ(sides[i].nids, 0);
        CHECK_EQ(sides[i].committed, sides[i].received);
    }
}

/* ---- a restore from the final checkpoint ------------------------------------------------------
 */
static int to_text(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    int64_t v;
    memcpy(&v, in->data, 8);
    char line[32];
    int n = snprintf(line, sizeof(line), "%lld", (long long)v);
    return weir_emit(ctx, line, (size_t)n, in->ts);
}

static int count_src_next(weir_ctx *ctx, void *state)
{
    int64_t *n = state;
    for (int i = 0; i < 200 && *n < 3000; i++, (*n)++)
        if (weir_emit(ctx, n, 8, *n) < 0)
            return -EIO;
    return *n >= 3000;
}

static const weir_source_def count_src = {.open = src_open, .next = count_src_next, .close = free};

typedef struct file_cfg {
    const char *ckpt, *out;
    int restore, err;
    char error[256];
    weir_ckpt_stats stats;
    uint64_t emitted;
} file_cfg;

static intptr_t file_main(void *arg)
{
    file_cfg *c = arg;
    weir_job *j = weir_job_new("final-file");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &count_src, NULL), 2);
    s = weir_stream_map(s, "text", to_text, NULL);
    CHECK_EQ(weir_stream_file_sink(s, "out", c->out), 0);
    c->err = weir_job_run(j, &(weir_run_opts){.parallelism = 2,
                                              .checkpoint_dir = c->ckpt,
                                              .checkpoint_interval_ms = 5,
                                              .restore = c->restore});
    snprintf(c->error, sizeof(c->error), "%s", weir_job_error(j));
    weir_job_ckpt_stats(j, &c->stats);
    weir_op_stats os;
    CHECK_EQ(weir_job_op_stats(j, "src", &os), 0);
    c->emitted = os.records_out;
    weir_job_free(j);
    return 0;
}

/* The output's committed part files: their count, lines, and whether all
 * carry id `id`. */
static void parts(const char *out, uint64_t id, int *nfiles, long *nlines, int *all_id)
{
    *nfiles = 0;
    *nlines = 0;
    *all_id = 1;
    DIR *d = opendir(out);
    CHECK(d != NULL);
    for (struct dirent *de; (de = readdir(d));) {
        int sub;
        unsigned long long fid;
        char extra;
        if (sscanf(de->d_name, "part-%d-%llu%c", &sub, &fid, &extra) != 2)
            continue;
        (*nfiles)++;
        *all_id &= fid == id;
        char path[512], line[64];
        snprintf(path, sizeof(path), "%s/%s", out, de->d_name);
        FILE *f = fopen(path, "r");
        CHECK(f != NULL);
        while (fgets(line, sizeof(line), f))
            (*nlines)++;
        fclose(f);
    }
    closedir(d);
}

TEST(a_restore_from_the_final_checkpoint_commits_what_it_left_pending_and_runs_nothing)
{
    char base[] = "/tmp/weir-final-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char ckpt[96], out[96];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt", base);
    snprintf(out, sizeof(out), "%s/out", base);
    file_cfg c = {.ckpt = ckpt, .out = out};
    CHECK_EQ(test_run_on_rt(2, file_main, &c), 0);
    if (c.err)
        fprintf(stderr, "job: %s\n", c.error);
    CHECK_EQ(c.err, 0);
    uint64_t fin = c.stats.latest;
    int nfiles, all_id;
    long nlines;
    parts(out, fin, &nfiles, &nlines, &all_id);
    CHECK_EQ(nlines, 6000);
    /* The tail of both subtasks went out under the final id. */
    CHECK_GE(nfiles, 2);
    char path[512], pending[512];
    for (int sub = 0; sub < 2; sub++) {
        snprintf(path, sizeof(path), "%s/part-%d-%llu", out, sub, (unsigned long long)fin);
        CHECK(access(path, F_OK) == 0);
        /* A crash between the COMPLETED marker and the commit leaves it
         * pending. */
        snprintf(pending, sizeof(pending), "%s/.part-%d-%llu.pending", out, sub,
                 (unsigned long long)fin);
        CHECK_EQ(rename(path, pending), 0);
    }
    file_cfg r = {.ckpt = ckpt, .out = out, .restore = 1};
    CHECK_EQ(test_run_on_rt(2, file_main, &r), 0);
    if (r.err)
        fprintf(stderr, "restored job: %s\n", r.error);
    CHECK_EQ(r.err, 0);
    CHECK_EQ(r.stats.restored, fin);
    CHECK_EQ(r.emitted, 0u); /* nothing ran again */
    parts(out, fin, &nfiles, &nlines, &all_id);
    CHECK_EQ(nlines, 6000); /* the pending tail is committed, once */
    for (int sub = 0; sub < 2; sub++) {
        snprintf(path, sizeof(path), "%s/part-%d-%llu", out, sub, (unsigned long long)fin);
        CHECK(access(path, F_OK) == 0);
    }
    rm_rf(base);
}

TEST_MAIN()
