/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dirlock.c - a run holds its checkpoint directory and its file sinks'
 * output directories (src/stream/dirlock.c): a second run in the same
 * process on either is refused at once with -EBUSY and a message naming
 * the directory and the holder's pid, and the first run's output is
 * intact; the lock goes with the run (after success and after failure);
 * two file sinks of one job in one directory are refused; a sink writing
 * into the checkpoint directory is fine. The refusal across processes and
 * a SIGKILLed holder are tested through `weir run` in tests/job/test_job.c.
 */
#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "test_rt.h"
#include "weir/rt.h"
#include "weir/stream.h"

/* ---- the job: numbers -> "v=N" lines -> file sink(s) ----------------------------------------- */
typedef struct job_cfg {
    int64_t n;                     /* records per source subtask */
    _Atomic int *gate;             /* non-NULL: after its records the source waits until *gate */
    int fail;                      /* the source fails after its records */
    const char *ckpt, *out, *out2; /* out2: a second file sink, NULL for none */
    int restore;
    /* results */
    int err;
    char error[256];
} job_cfg;

typedef struct src {
    const job_cfg *cfg;
    int64_t next;
} src;

static int src_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    src *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->cfg = arg;
    *state = s;
    return 0;
}

static int src_next(weir_ctx *ctx, void *state)
{
    src *s = state;
    for (int i = 0; i < 100 && s->next < s->cfg->n; i++) {
        int64_t v = s->next++ * weir_ctx_parallelism(ctx) + weir_ctx_subtask(ctx);
        char line[32];
        int len = snprintf(line, sizeof(line), "v=%lld", (long long)v);
        int e = weir_emit(ctx, line, (size_t)len, v);
        if (e)
            return e;
    }
    if (s->next < s->cfg->n)
        return 0;
    if (s->cfg->fail)
        return weir_fail(ctx, -EIO, "failing on purpose");
    if (s->cfg->gate && !atomic_load(s->cfg->gate)) {
        weir_time_sleep(WEIR_MSEC); /* checkpoints go on meanwhile */
        return 0;
    }
    return 1;
}

static int src_snapshot(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    *buf = malloc(sizeof(int64_t));
    if (!*buf)
        return -ENOMEM;
    memcpy(*buf, &((src *)state)->next, sizeof(int64_t));
    *len = sizeof(int64_t);
    return 0;
}

static int src_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    if (len != sizeof(int64_t))
        return weir_fail(ctx, -EBADMSG, "position of %zu bytes", len);
    memcpy(&((src *)state)->next, buf, len);
    return 0;
}

static intptr_t job_main(void *arg)
{
    job_cfg *cfg = arg;
    weir_job *j = weir_job_new("dirlock-test");
    static const weir_source_def sd = {.open = src_open,
                                       .next = src_next,
                                       .close = free,
                                       .snapshot = src_snapshot,
                                       .restore = src_restore};
    weir_stream *s = weir_job_source(j, "numbers", &sd, cfg);
    CHECK_EQ(weir_stream_file_sink(s, "out", cfg->out), 0);
    if (cfg->out2)
        CHECK_EQ(weir_stream_file_sink(s, "out2", cfg->out2), 0);
    weir_run_opts o = {.parallelism = 2,
                       .checkpoint_dir = cfg->ckpt,
                       .checkpoint_interval_ms = cfg->ckpt ? 5 : 0,
                       .restore = cfg->restore};
    cfg->err = weir_job_run(j, &o);
    snprintf(cfg->error, sizeof(cfg->error), "%s", weir_job_error(j));
    weir_job_free(j);
    return 0;
}

/* ---- helpers ------------------------------------------------------------------------------ */
static char *tmpdir(void)
{
    char t[] = "/tmp/weir-dirlock-XXXXXX";
    CHECK(mkdtemp(t) != NULL);
    return strdup(t);
}

static char *sub(const char *base, const char *name)
{
    char *p = malloc(strlen(base) + strlen(name) + 2);
    sprintf(p, "%s/%s", base, name);
    return p;
}

static void rm_rf(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

static int has_completed(const char *dir)
{
    DIR *d = opendir(dir);
    int found = 0;
    struct dirent *de;
    while (d && !found && (de = readdir(d)) != NULL)
        found = strncmp(de->d_name, "COMPLETED-", 10) == 0;
    if (d)
        closedir(d);
    return found;
}

/* Every committed line of dir is v=0 .. v=total-1, each exactly once. */
static void check_output(const char *dir, int64_t total)
{
    unsigned char *seen = calloc((size_t)total, 1);
    int64_t lines = 0;
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "part-", 5) != 0)
            continue;
        char path[512], line[64];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "r");
        CHECK(f != NULL);
        while (fgets(line, sizeof(line), f)) {
            long long v;
            CHECK_EQ(sscanf(line, "v=%lld", &v), 1);
            CHECK(v >= 0 && v < total);
            if (seen[v])
                TEST__FAIL("v=%lld twice in %s", v, dir);
            seen[v] = 1;
            lines++;
        }
        fclose(f);
    }
    closedir(d);
    free(seen);
    CHECK_EQ(lines, total);
}

/* ---- a second run on the directories of a run in progress ---------------------------------- */
typedef struct two_runs {
    int same_ckpt; /* the second run uses the first's checkpoint directory (else its own) */
} two_runs;

static intptr_t second_refused(void *arg)
{
    const two_runs *tr = arg;
    char *base = tmpdir(), *ckpt = sub(base, "ckpt"), *out = sub(base, "out"),
         *ckpt2 = sub(base, "ckpt2");
    _Atomic int gate = 0;
    job_cfg a = {.n = 1000, .gate = &gate, .ckpt = ckpt, .out = out};
    weir_task *ta = test_spawn(job_main, &a);
    /* The first run holds its directories once it runs; a completed
     * checkpoint means it is well under way, with output pending. */
    int64_t deadline = weir_time_now() + 30 * WEIR_SEC;
    while (!has_completed(ckpt) && weir_time_now() < deadline)
        weir_time_sleep(WEIR_MSEC);
    CHECK(has_completed(ckpt));

    /* The same command again, restoring: refused before it touches anything. */
    job_cfg b = {.n = 1000, .ckpt = tr->same_ckpt ? ckpt : ckpt2, .out = out, .restore = 1};
    job_main(&b);
    CHECK_EQ(b.err, -EBUSY);
    char pid[32];
    snprintf(pid, sizeof(pid), "pid %ld", (long)getpid());
    CHECK_HAS(b.error, pid);
    CHECK_HAS(b.error, tr->same_ckpt ? ckpt : out);
    CHECK_HAS(b.error, tr->same_ckpt ? "checkpoint directory" : "output directory of file sink");

    atomic_store(&gate, 1);
    CHECK_EQ(weir_task_join(ta, NULL, WEIR_FOREVER), 0);
    if (a.err)
        TEST__FAIL("first run: %d %s", a.err, a.error);
    check_output(out, 2 * 1000);

    /* The lock went with the first run: a restore now runs (to the end of
     * input at once: the restored positions are at the end). */
    job_cfg c = {.n = 1000, .ckpt = ckpt, .out = out, .restore = 1};
    job_main(&c);
    if (c.err)
        TEST__FAIL("after the first run: %d %s", c.err, c.error);
    rm_rf(base);
    free(base), free(ckpt), free(ckpt2), free(out);
    return 0;
}

TEST(second_run_on_the_checkpoint_dir_is_refused)
{
    two_runs tr = {.same_ckpt = 1};
    test_run_on_rt(2, second_refused, &tr);
}

TEST(second_run_on_the_sink_dir_is_refused)
{
    two_runs tr = {.same_ckpt = 0};
    test_run_on_rt(2, second_refused, &tr);
}

/* ---- the lock's end, and what a job may share ---------------------------------------------- */
static intptr_t released_after_failure(void *arg)
{
    (void)arg;
    char *base = tmpdir(), *ckpt = sub(base, "ckpt"), *out = sub(base, "out");
    job_cfg a = {.n = 300, .fail = 1, .ckpt = ckpt, .out = out};
    job_main(&a);
    CHECK_EQ(a.err, -EIO);
    CHECK_HAS(a.error, "failing on purpose");
    job_cfg b = {.n = 300, .ckpt = ckpt, .out = out, .restore = 1};
    job_main(&b);
    if (b.err)
        TEST__FAIL("after a failed run: %d %s", b.err, b.error);
    check_output(out, 2 * 300);
    rm_rf(base);
    free(base), free(ckpt), free(out);
    return 0;
}

TEST(lock_released_after_a_failed_run)
{
    test_run_on_rt(2, released_after_failure, NULL);
}

static intptr_t two_sinks_one_dir(void *arg)
{
    (void)arg;
    char *base = tmpdir(), *out = sub(base, "out"), *alias = sub(base, "./out");
    /* The same directory under another name is the same directory. */
    job_cfg a = {.n = 10, .out = out, .out2 = alias};
    job_main(&a);
    CHECK_EQ(a.err, -EINVAL);
    CHECK_HAS(a.error, "file sinks \"out\" and \"out2\" both write into");
    CHECK_HAS(a.error, alias);
    /* Refused before anything ran: no part file. */
    DIR *d = opendir(out);
    CHECK(d != NULL);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        CHECK(strncmp(de->d_name, "part-", 5) != 0);
    closedir(d);
    rm_rf(base);
    free(base), free(out), free(alias);
    return 0;
}

TEST(two_file_sinks_of_a_job_in_one_dir_are_refused)
{
    test_run_on_rt(2, two_sinks_one_dir, NULL);
}

static intptr_t sink_in_ckpt_dir(void *arg)
{
    (void)arg;
    char *base = tmpdir();
    job_cfg a = {.n = 500, .ckpt = base, .out = base};
    job_main(&a);
    if (a.err)
        TEST__FAIL("%d %s", a.err, a.error);
    check_output(base, 2 * 500);
    rm_rf(base);
    free(base);
    return 0;
}

TEST(a_sink_may_write_into_the_checkpoint_dir)
{
    test_run_on_rt(2, sink_in_ckpt_dir, NULL);
}

/* A run cancelled mid-job (its task cancelled while weir_job_run waits)
 * releases its directories: the restore that follows runs. */
static intptr_t released_after_cancel(void *arg)
{
    (void)arg;
    char *base = tmpdir(), *ckpt = sub(base, "ckpt"), *out = sub(base, "out");
    _Atomic int gate = 0; /* never opened: only the cancel ends the first run */
    job_cfg a = {.n = 300, .gate = &gate, .ckpt = ckpt, .out = out};
    weir_task *ta = test_spawn(job_main, &a);
    int64_t deadline = weir_time_now() + 30 * WEIR_SEC;
    while (!has_completed(ckpt) && weir_time_now() < deadline)
        weir_time_sleep(WEIR_MSEC);
    CHECK(has_completed(ckpt));
    weir_task_cancel(ta);
    int je = weir_task_join(ta, NULL, WEIR_FOREVER); /* after the task has ended */
    CHECK(je == 0 || je == -ECANCELED);
    CHECK_NE(a.err, 0); /* cancelled, not finished */
    job_cfg b = {.n = 300, .ckpt = ckpt, .out = out, .restore = 1};
    job_main(&b);
    if (b.err)
        TEST__FAIL("after a cancelled run: %d %s", b.err, b.error);
    check_output(out, 2 * 300);
    rm_rf(base);
    free(base), free(ckpt), free(out);
    return 0;
}

TEST(lock_released_after_a_cancelled_run)
{
    test_run_on_rt(2, released_after_cancel, NULL);
}

TEST_MAIN()
