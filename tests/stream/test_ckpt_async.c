/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ckpt_async.c - a subtask goes on with its records while its
 * snapshot is written: the barrier captures the state and forwards, the
 * puts run on the blocking pool (checkpoint.c's persister), and the ACK
 * goes out as mail once they are durable. The keyed operator holds a
 * 32 MiB state; after each barrier (its pre_commit) it counts the records
 * it processes before its state file for that checkpoint exists. A
 * subtask that waited for its puts at the barrier would count none. Every
 * checkpoint still completes with its whole state, and a run restored
 * from the last one gets every key back. A source that waits inside
 * next() for a checkpoint to complete gets it: its own ACK does not wait
 * for it to come out of next(). Snapshots slower to write than barriers
 * come (every checkpoint abandoned at a 1 ms timeout) do not pile up: a
 * queued one that a later barrier overtook is dropped unwritten.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stream/stream_int.h"
#include "stream/ckpt_files.h"
#include "test.h"
#include "test_rt.h"
#include "weir/rt.h"
#include "weir/stream.h"

#define KEYS      32768
#define VALUE_LEN 1024 /* KEYS x VALUE_LEN: a 32 MiB state */

static char ckpt_dir[256];
static _Atomic int64_t while_writing; /* records processed while a state file was not there */
static _Atomic int keys_back;         /* a restored run: keys whose value came back */
static _Atomic int backlog_mode;      /* gen ends once a snapshot was dropped */
static uint64_t backlog_from;
static int gen_keys = KEYS; /* the backlog test's state is 2 MiB: every barrier copies it */

typedef struct gen {
    int64_t next;
    int64_t give_up;
} gen;

static int gen_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    gen *g = calloc(1, sizeof(gen));
    if (!g)
        return -ENOMEM;
    g->give_up = weir_time_after_ms(30000);
    *state = g;
    return 0;
}

/* Every key once, then key 0 over and over, until records were seen
 * while a state file was being written and a checkpoint completed after
 * that (or give up). */
static int gen_next(weir_ctx *ctx, void *state)
{
    gen *g = state;
    static uint64_t seen_at;
    for (int i = 0; i < 256; i++) {
        int64_t v = g->next < gen_keys ? g->next++ : 0;
        int e = weir_emit(ctx, &v, sizeof(v), v);
        if (e)
            return e;
    }
    if (g->next < gen_keys)
        return 0;
    if (atomic_load(&backlog_mode))
        return weir__ckpt_stale_dropped() > backlog_from || weir_time_now() > g->give_up;
    if (atomic_load(&while_writing) > 0 && !seen_at)
        seen_at = weir_ctx_completed(ctx) + 1;
    if ((seen_at && weir_ctx_completed(ctx) > seen_at) || weir_time_now() > g->give_up)
        return 1;
    return 0;
}

static int key8(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = in->data;
    *len = 8;
    return 0;
}

typedef struct holder {
    uint64_t writing; /* the checkpoint whose state file is awaited, 0: none */
    char path[512];
    unsigned n;
} holder;

static int hold_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = calloc(1, sizeof(holder));
    return *state ? 0 : -ENOMEM;
}

static int hold(weir_ctx *ctx, void *state, const weir_rec *in)
{
    holder *h = state;
    int64_t k;
    memcpy(&k, in->data, sizeof(k));
    if (h->writing && ++h->n % 64 == 0) {
        struct stat sb;
        if (stat(h->path, &sb) == 0)
            h->writing = 0; /* durable now */
        else
            atomic_fetch_add(&while_writing, 1);
    }
    if (weir_ctx_restored(ctx) && k != 0) {
        const void *v;
        size_t n;
        if (weir_value_get(ctx, "blob", &v, &n) == 0 && n == VALUE_LEN &&
            ((const uint8_t *)v)[VALUE_LEN - 1] == (uint8_t)(k & 0xff))
            atomic_fetch_add(&keys_back, 1);
    }
    uint8_t v[VALUE_LEN];
    memset(v, (int)(k & 0xff), sizeof(v));
    return weir_value_put(ctx, "blob", v, sizeof(v));
}

/* The barrier reached the operator (its state is captured by now). */
static int hold_pre_commit(weir_ctx *ctx, void *state, uint64_t id)
{
    holder *h = state;
    h->writing = id;
    snprintf(h->path, sizeof(h->path), "%s/chk-%" PRIu64 "/hold.%d.state", ckpt_dir, id,
             weir_ctx_subtask(ctx));
    return 0;
}

typedef struct result {
    int err, restore;
    char error[256];
    weir_ckpt_stats ck;
} result;

static intptr_t run_main(void *arg)
{
    result *res = arg;
    weir_job *j = weir_job_new("ckpt-async");
    weir_source_def sd = {.open = gen_open, .next = gen_next, .close = free};
    weir_stream *s = weir_stream_key_by(weir_job_source(j, "gen", &sd, NULL), key8, NULL);
    static const weir_op_def def = {
        .open = hold_open, .process = hold, .close = free, .pre_commit = hold_pre_commit};
    CHECK_EQ(weir_stream_sink(s, "hold", &def, NULL), 0);
    weir_run_opts o = {.checkpoint_dir = ckpt_dir,
                       .checkpoint_interval_ms = 50,
                       .restore = res->restore,
                       .retain = 2};
    res->err = weir_job_run(j, &o);
    snprintf(res->error, sizeof(res->error), "%s", weir_job_error(j));
    weir_job_ckpt_stats(j, &res->ck);
    weir_job_free(j);
    return 0;
}

TEST(records_go_on_while_the_snapshot_is_written)
{
    snprintf(ckpt_dir, sizeof(ckpt_dir), "/tmp/weir-ckpt-async-%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", ckpt_dir);
    CHECK_EQ(system(cmd), 0);
    result res = {0};
    test_run_on_rt(2, run_main, &res);
    if (res.err)
        fprintf(stderr, "job: %s\n", res.error);
    CHECK_EQ(res.err, 0);
    printf("%lld samples of records processed while a state file was written; %llu "
           "checkpoints completed, %llu aborted\n",
           (long long)atomic_load(&while_writing), (unsigned long long)res.ck.completed,
           (unsigned long long)res.ck.aborted);
    CHECK_GT(atomic_load(&while_writing), 0);
    CHECK_GE(res.ck.completed, 2);
    /* The job ended through its final checkpoint, the latest (a restore
     * from it runs nothing): without it, the regular one before it
     * (retain 2) is the restore point. */
    test_drop_checkpoint(ckpt_dir, res.ck.latest);
    /* A restored run: the keys' values are the checkpoint's. */
    atomic_store(&while_writing, 0);
    result again = {.restore = 1};
    test_run_on_rt(2, run_main, &again);
    if (again.err)
        fprintf(stderr, "restored job: %s\n", again.error);
    CHECK_EQ(again.err, 0);
    CHECK_GE(again.ck.restored, 1);
    CHECK_EQ(atomic_load(&keys_back), KEYS - 1);
    CHECK_EQ(system(cmd), 0);
}

/* ---- a source that waits inside next() ---- */
typedef struct waiter {
    int64_t n;
    int snapped;        /* a barrier took its position since the last wait */
    uint64_t completed; /* the latest completed checkpoint then */
} waiter;

static _Atomic int waits_done, gave_up;

static int waiter_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = calloc(1, sizeof(waiter));
    return *state ? 0 : -ENOMEM;
}

/* Emit a record; after a barrier took the position, wait inside next()
 * (as a socket source waits for data) until that checkpoint completed,
 * which needs this subtask's own ACK; three times. */
static int waiter_next(weir_ctx *ctx, void *state)
{
    waiter *w = state;
    int e = weir_emit(ctx, &w->n, sizeof(w->n), w->n);
    w->n++;
    if (e || !w->snapped)
        return e ? e : weir_time_sleep(WEIR_MSEC) < 0 ? -ECANCELED : 0;
    w->snapped = 0;
    int64_t give_up = weir_time_after_ms(10000);
    while (weir_ctx_completed(ctx) <= w->completed) {
        if (weir_time_now() > give_up) {
            atomic_store(&gave_up, 1);
            return 1;
        }
        if (weir_time_sleep(WEIR_MSEC) < 0)
            return -ECANCELED;
    }
    return atomic_fetch_add(&waits_done, 1) + 1 >= 3;
}

static int waiter_snapshot(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    waiter *w = state;
    if (!(*buf = malloc(sizeof(int64_t))))
        return -ENOMEM;
    memcpy(*buf, &w->n, sizeof(int64_t));
    *len = sizeof(int64_t);
    w->snapped = 1;
    w->completed = weir_ctx_completed(ctx); /* one checkpoint at a time: this one is later */
    return 0;
}

static int waiter_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    (void)ctx;
    if (len != sizeof(int64_t))
        return -EBADMSG;
    memcpy(&((waiter *)state)->n, buf, sizeof(int64_t));
    return 0;
}

static int count_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state, (void)in;
    return weir_value_put(ctx, "n", "x", 1);
}

static intptr_t run_waiter(void *arg)
{
    (void)arg;
    weir_job *j = weir_job_new("ckpt-waiter");
    weir_source_def sd = {.open = waiter_open,
                          .next = waiter_next,
                          .close = free,
                          .snapshot = waiter_snapshot,
                          .restore = waiter_restore};
    weir_stream *s = weir_stream_key_by(weir_job_source(j, "waiter", &sd, NULL), key8, NULL);
    static const weir_op_def def = {.process = count_process};
    CHECK_EQ(weir_stream_sink(s, "count", &def, NULL), 0);
    int e =
        weir_job_run(j, &(weir_run_opts){.checkpoint_dir = ckpt_dir, .checkpoint_interval_ms = 10});
    if (e)
        fprintf(stderr, "job: %s\n", weir_job_error(j));
    weir_job_free(j);
    return e;
}

TEST(a_source_waiting_inside_next_does_not_hold_its_ack_back)
{
    snprintf(ckpt_dir, sizeof(ckpt_dir), "/tmp/weir-ckpt-waiter-%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", ckpt_dir);
    CHECK_EQ(system(cmd), 0);
    CHECK_EQ(test_run_on_rt(2, run_waiter, NULL), 0);
    CHECK_EQ(atomic_load(&waits_done), 3);
    CHECK_EQ(atomic_load(&gave_up), 0);
    CHECK_EQ(system(cmd), 0);
}

/* ---- snapshots slower than barriers ---- */
static intptr_t run_backlog(void *arg)
{
    result *res = arg;
    weir_job *j = weir_job_new("ckpt-backlog");
    weir_source_def sd = {.open = gen_open, .next = gen_next, .close = free};
    weir_stream *s = weir_stream_key_by(weir_job_source(j, "gen", &sd, NULL), key8, NULL);
    static const weir_op_def def = {.open = hold_open, .process = hold, .close = free};
    CHECK_EQ(weir_stream_sink(s, "hold", &def, NULL), 0);
    weir_run_opts o = {
        .checkpoint_dir = ckpt_dir, .checkpoint_interval_ms = 5, .checkpoint_timeout_ms = 1};
    res->err = weir_job_run(j, &o);
    snprintf(res->error, sizeof(res->error), "%s", weir_job_error(j));
    weir_job_ckpt_stats(j, &res->ck);
    weir_job_free(j);
    return 0;
}

TEST(snapshots_overtaken_by_a_later_barrier_are_not_written)
{
    snprintf(ckpt_dir, sizeof(ckpt_dir), "/tmp/weir-ckpt-backlog-%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", ckpt_dir);
    CHECK_EQ(system(cmd), 0);
    uint64_t before = backlog_from = weir__ckpt_stale_dropped();
    gen_keys = KEYS / 16;
    atomic_store(&backlog_mode, 1);
    result res = {0};
    test_run_on_rt(2, run_backlog, &res);
    atomic_store(&backlog_mode, 0);
    gen_keys = KEYS;
    if (res.err)
        fprintf(stderr, "job: %s\n", res.error);
    CHECK_EQ(res.err, 0);
    printf("%llu checkpoints abandoned, %llu snapshots dropped unwritten\n",
           (unsigned long long)res.ck.aborted,
           (unsigned long long)(weir__ckpt_stale_dropped() - before));
    CHECK_GT(res.ck.aborted, 0u);
    CHECK_GT(weir__ckpt_stale_dropped() - before, 0u);
    CHECK_EQ(system(cmd), 0);
}

TEST_MAIN()
