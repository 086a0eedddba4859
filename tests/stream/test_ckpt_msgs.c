/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ckpt_msgs.c - checkpoints by messages (stream/ckpt_link.h,
 * ckpt_coord.c, manifest.h): every completed checkpoint has a manifest
 * naming each subtask's state and source position with their sizes and
 * key groups, and a restore reads what it names; a damaged or missing
 * manifest refuses the restore with a clear error; a checkpoint not done
 * within checkpoint_timeout_ms is abandoned - the sinks' abort() hooks see
 * it - and the next one completes; the manifest decoder refuses malformed
 * text naming what was wrong.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "stream/count_ops.h"
#include "stream/manifest.h"
#include "stream/ckpt_files.h"
#include "test.h"
#include "test_rt.h"
#include "weir/state.h"

/* ---- a positioned source: 0..n-1 per subtask ---------------------------------------------- */
static _Atomic int64_t limit; /* records per subtask; < 0: until stop */
static _Atomic int stop;

static int src_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = calloc(1, sizeof(int64_t));
    return 0;
}

static int src_next(weir_ctx *ctx, void *state)
{
    int64_t *next = state, n = atomic_load(&limit);
    for (int i = 0; i < 64 && (n < 0 || *next < n); i++, (*next)++) {
        int e = weir_emit(ctx, next, 8, *next);
        if (e)
            return e;
    }
    if (n < 0) {
        weir_time_sleep(WEIR_MSEC); /* paced: checkpoints come between */
        return atomic_load(&stop);
    }
    return *next >= n;
}

static int src_snapshot(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    *buf = malloc(8);
    memcpy(*buf, state, 8);
    *len = 8;
    return 0;
}

static int src_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    (void)ctx;
    if (len != 8)
        return -EINVAL;
    memcpy(state, buf, 8);
    return 0;
}

static const weir_source_def src_def = {.open = src_open,
                                        .next = src_next,
                                        .close = free,
                                        .snapshot = src_snapshot,
                                        .restore = src_restore};

/* ---- a sink with two-phase hooks ---------------------------------------------------------- */
static _Atomic uint64_t slow_id; /* the first pre_commit sleeps past the timeout */
static _Atomic uint64_t aborted; /* the abort() hook's latest id */
static _Atomic uint64_t first_aborted;
static _Atomic uint64_t committed; /* the latest commit() */

static int sink_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx, (void)state, (void)in;
    return 0;
}

static int sink_pre_commit(weir_ctx *ctx, void *state, uint64_t id)
{
    (void)ctx, (void)state;
    uint64_t none = 0;
    if (atomic_compare_exchange_strong(&slow_id, &none, id))
        weir_time_sleep(1500 * WEIR_MSEC); /* the timeout is 100 ms */
    return 0;
}

static int sink_commit(weir_ctx *ctx, void *state, uint64_t id)
{
    (void)ctx, (void)state;
    atomic_store(&committed, id);
    if (atomic_load(&aborted))
        atomic_store(&stop, 1); /* seen both: the job may end */
    return 0;
}

static int sink_abort(weir_ctx *ctx, void *state, uint64_t id)
{
    (void)ctx, (void)state;
    atomic_store(&aborted, id);
    uint64_t none = 0;
    atomic_compare_exchange_strong(&first_aborted, &none, id);
    return 0;
}

typedef struct cfg {
    const char *dir;
    int restore, par, retain;
    int64_t interval_ms, timeout_ms;
    char error[256];
    weir_ckpt_stats stats;
    uint64_t src_out; /* records the source emitted */
} cfg;

/* src -> to_one -> key_by -> count -> to_line -> sink */
static intptr_t run_job(void *arg)
{
    cfg *c = arg;
    weir_job *j = weir_job_new("msgs");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &src_def, NULL), 2);
    s = weir_stream_map(s, "to_one", to_one, NULL);
    s = weir_stream_reduce(weir_stream_key_by(s, key16, NULL), "count", count16, NULL);
    s = weir_stream_map(s, "to_line", to_line, NULL);
    CHECK_EQ(weir_stream_sink(s, "sink",
                              &(weir_op_def){.process = sink_process,
                                             .pre_commit = sink_pre_commit,
                                             .commit = sink_commit,
                                             .abort = sink_abort},
                              NULL),
             0);
    int e = weir_job_run(j, &(weir_run_opts){.parallelism = c->par,
                                             .checkpoint_dir = c->dir,
                                             .checkpoint_interval_ms = c->interval_ms,
                                             .checkpoint_timeout_ms = c->timeout_ms,
                                             .restore = c->restore,
                                             .retain = c->retain});
    snprintf(c->error, sizeof(c->error), "%s", weir_job_error(j));
    weir_job_ckpt_stats(j, &c->stats);
    weir_op_stats os;
    CHECK_EQ(weir_job_op_stats(j, "src", &os), 0);
    c->src_out = os.records_out;
    weir_job_free(j);
    return e;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    uint8_t *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

static void spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK_EQ(fwrite(p, 1, n, f), n);
    fclose(f);
}

static void read_manifest_of(const char *dir, uint64_t id, weir__manifest *m)
{
    char path[256], why[256] = "";
    snprintf(path, sizeof(path), "%s/chk-%llu/MANIFEST.json", dir, (unsigned long long)id);
    size_t len;
    uint8_t *text = slurp(path, &len);
    CHECK(text != NULL);
    if (weir__manifest_decode(text, len, m, why, sizeof(why)) != 0)
        fprintf(stderr, "%s: %s\n", path, why);
    free(text);
    CHECK_EQ(m->id, id);
}

/* The largest id of a COMPLETED marker in dir below `below`, or 0. */
static uint64_t completed_below(const char *dir, uint64_t below)
{
    uint64_t best = 0;
    for (uint64_t id = 1; id < below; id++) {
        char path[256];
        snprintf(path, sizeof(path), "%s/COMPLETED-%llu", dir, (unsigned long long)id);
        if (access(path, F_OK) == 0)
            best = id;
    }
    return best;
}

TEST(a_completed_checkpoint_has_a_manifest_a_restore_reads)
{
    char dir[] = "/tmp/weir-msgs-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    atomic_store(&limit, -1);
    atomic_store(&stop, 0);
    atomic_store(&slow_id, UINT64_MAX); /* no slow pre-commit */
    atomic_store(&aborted, 1);          /* the first commit ends the job */
    atomic_store(&committed, 0);
    cfg c = {.dir = dir, .par = 2, .interval_ms = 50, .retain = 2};
    CHECK_EQ(test_run_on_rt(2, run_job, &c), 0);
    CHECK_GE(c.stats.completed, 2u); /* one at least, and the final one */
    /* The job ended through its final checkpoint: the latest, marked
     * final, with no state or position; the sink's commit() saw it. */
    uint64_t fin = c.stats.latest;
    CHECK_EQ(atomic_load(&committed), fin);
    weir__manifest m;
    read_manifest_of(dir, fin, &m);
    CHECK(m.final);
    CHECK_EQ(m.nsubs, 4u);
    for (uint32_t i = 0; i < m.nsubs; i++)
        CHECK(m.subs[i].state == NULL && m.subs[i].position == NULL);
    weir__manifest_clear(&m);
    /* The regular one before it (retain 2 kept it). */
    uint64_t id = completed_below(dir, fin);
    CHECK_GT(id, 0u);
    read_manifest_of(dir, id, &m);
    CHECK(!m.final);
    CHECK_STR(m.job, "msgs");
    CHECK_EQ(m.nops, 5u);
    CHECK_EQ(m.nsubs, 4u); /* [src to_one] x2, [count to_line sink] x2 */
    int src = weir__manifest_find(&m, "src"), count = weir__manifest_find(&m, "count");
    CHECK(m.ops[src].fixed);                             /* a source with a position */
    CHECK(!m.ops[count].fixed);                          /* keyed state: may rescale */
    CHECK(m.ops[weir__manifest_find(&m, "sink")].fixed); /* two-phase */
    uint32_t groups = 0;
    for (uint32_t i = 0; i < m.nsubs; i++) {
        weir__manifest_sub *s = &m.subs[i];
        char want[128];
        if ((int)s->op == src) {
            snprintf(want, sizeof(want), "chk-%llu/src.%u.src", (unsigned long long)id, s->sub);
            CHECK_STR(s->position, want);
            CHECK(s->state == NULL);
            CHECK_EQ(s->bytes, 8u);
        } else {
            CHECK_EQ((int)s->op, count);
            snprintf(want, sizeof(want), "chk-%llu/count.%u.state", (unsigned long long)id, s->sub);
            CHECK_STR(s->state, want);
            CHECK(s->position == NULL);
            CHECK_GT(s->bytes, 0u);
            groups += s->kg_end - s->kg_first;
        }
    }
    CHECK_EQ(groups, (uint32_t)WEIR_KEY_GROUPS);
    weir__manifest_clear(&m);
    /* A restore from the final checkpoint runs nothing: the job had ended. */
    atomic_store(&limit, 5000);
    cfg r = {.dir = dir, .par = 2, .restore = 1};
    CHECK_EQ(test_run_on_rt(2, run_job, &r), 0);
    CHECK_EQ(r.stats.restored, fin);
    CHECK_EQ(r.src_out, 0u);
    /* Without it, the regular one is the restore point, and a restore
     * reads its manifest (a bounded run from the positions). */
    char path[256], cmd[300];
    test_drop_checkpoint(dir, fin);
    cfg r2 = {.dir = dir, .par = 2, .restore = 1, .interval_ms = 1000000, .retain = 2};
    CHECK_EQ(test_run_on_rt(2, run_job, &r2), 0);
    CHECK_EQ(r2.stats.restored, id);
    CHECK_GT(r2.src_out, 0u);
    /* That run ended through a final checkpoint of its own, after the
     * restored one; remove it too, to damage the regular one's manifest. */
    CHECK_GT(r2.stats.latest, id);
    test_drop_checkpoint(dir, r2.stats.latest);
    snprintf(path, sizeof(path), "%s/chk-%llu/MANIFEST.json", dir, (unsigned long long)id);
    size_t len;
    uint8_t *text = slurp(path, &len);
    CHECK(text != NULL);
    /* Cut short, the manifest refuses the restore, saying so. */
    spit(path, text, len / 2);
    cfg bad = {.dir = dir, .par = 2, .restore = 1};
    CHECK(test_run_on_rt(2, run_job, &bad) < 0);
    CHECK_HAS(bad.error, "MANIFEST.json: manifest: ");
    /* Without one (a checkpoint of an older weir) it is refused too. */
    unlink(path);
    CHECK(test_run_on_rt(2, run_job, &bad) < 0);
    CHECK_HAS(bad.error, "has none");
    free(text);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

TEST(a_checkpoint_past_its_timeout_is_aborted_and_the_next_completes)
{
    char dir[] = "/tmp/weir-msgs-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    atomic_store(&limit, -1);
    atomic_store(&stop, 0);
    atomic_store(&slow_id, 0);
    atomic_store(&aborted, 0);
    atomic_store(&first_aborted, 0);
    atomic_store(&committed, 0);
    cfg c = {.dir = dir, .par = 1, .interval_ms = 20, .timeout_ms = 100};
    CHECK_EQ(test_run_on_rt(2, run_job, &c), 0);
    uint64_t slow = atomic_load(&slow_id);
    CHECK_GT(slow, 0u);
    /* Its abort() hook saw it first (later ones may time out too while the
     * sink sleeps). */
    CHECK_EQ(atomic_load(&first_aborted), slow);
    CHECK_GT(atomic_load(&committed), slow); /* a later one completed */
    CHECK_GE(c.stats.aborted, 1u);
    char path[256];
    snprintf(path, sizeof(path), "%s/COMPLETED-%llu", dir, (unsigned long long)slow);
    CHECK(access(path, F_OK) != 0); /* never completed */
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

static void refused(const char *text, const char *needle)
{
    weir__manifest m;
    char why[256] = "";
    CHECK_EQ(weir__manifest_decode(text, strlen(text), &m, why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, needle);
}

TEST(the_manifest_decoder_refuses_what_does_not_hold_together)
{
    const char *ok = "{\"weir_manifest\":1,\"checkpoint\":3,\"job\":\"j\","
                     "\"operators\":[{\"name\":\"a\",\"parallelism\":2,\"fixed\":false}],"
                     "\"subtasks\":[{\"operator\":\"a\",\"subtask\":1,\"key_groups\":[64,128],"
                     "\"state\":\"chk-3/a.1.state\",\"bytes\":10,\"position\":null}]}";
    weir__manifest m;
    char why[256];
    CHECK_EQ(weir__manifest_decode(ok, strlen(ok), &m, why, sizeof(why)), 0);
    CHECK_EQ(m.subs[0].kg_first, 64u);
    weir__manifest_clear(&m);
    refused("{\"weir_manifest\":1,\"checkpoint\":3,\"job\":\"j\",\"final\":1,"
            "\"operators\":[{\"name\":\"a\",\"parallelism\":2,\"fixed\":false}],"
            "\"subtasks\":[]}",
            "\"final\" is not true or false");
    refused("{", "line 1");
    refused("[]", "not a weir manifest");
    refused("{\"weir_manifest\":2,\"checkpoint\":3,\"job\":\"j\",\"operators\":[],\"subtasks\":[]}",
            "version 2");
    refused("{\"weir_manifest\":1,\"checkpoint\":3,\"job\":\"j\",\"operators\":[],\"subtasks\":[]}",
            "0 operators");
    refused("{\"weir_manifest\":1,\"checkpoint\":3,\"job\":\"j\","
            "\"operators\":[{\"name\":\"a\",\"parallelism\":2,\"fixed\":false}],"
            "\"subtasks\":[{\"operator\":\"a\",\"subtask\":2,\"key_groups\":[0,1],"
            "\"state\":null,\"bytes\":0,\"position\":null}]}",
            "has no subtask 2");
    refused("{\"weir_manifest\":1,\"checkpoint\":3,\"job\":\"j\","
            "\"operators\":[{\"name\":\"a\",\"parallelism\":2,\"fixed\":false}],"
            "\"subtasks\":[{\"operator\":\"a\",\"subtask\":0,\"key_groups\":[0,129],"
            "\"state\":null,\"bytes\":0,\"position\":null}]}",
            "key groups [0, 129)");
    refused("{\"weir_manifest\":1,\"checkpoint\":3,\"job\":\"j\","
            "\"operators\":[{\"name\":\"a\",\"parallelism\":2,\"fixed\":false}],"
            "\"subtasks\":[{\"operator\":\"a\",\"subtask\":0,\"key_groups\":[0,1],"
            "\"state\":\"../etc/passwd\",\"bytes\":0,\"position\":null}]}",
            "not a storage name");
    refused("{\"weir_manifest\":1,\"checkpoint\":3,\"job\":\"j\","
            "\"operators\":[{\"name\":\"a\",\"parallelism\":2,\"fixed\":false},"
            "{\"name\":\"a\",\"parallelism\":1,\"fixed\":false}],\"subtasks\":[]}",
            "appears twice");
}

TEST_MAIN()
