/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_mailbox.c - a subtask's mailbox (stream_int.h, weir__subtask_post):
 * work posted from another thread (a completion) runs on the subtask's own
 * thread, in a source between two calls of next() and in an operator
 * between its inputs' items; work still queued when the run ends is
 * dropped, not run and not leaked.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "stream/stream_int.h"
#include "test.h"
#include "test_rt.h"

typedef struct probe {
    weir__mail mail;
    _Atomic int ran, dropped, on_own_thread;
    pthread_t thread; /* the subtask's, noted by its operator */
    _Atomic int ready;
    subtask *st;
} probe;

static probe at_src, at_sink;

static void probe_fn(subtask *st, weir__mail *m)
{
    probe *p = (probe *)m;
    atomic_store(&p->on_own_thread, pthread_equal(pthread_self(), p->thread) && st == p->st);
    atomic_store(&p->ran, 1);
}

static void probe_drop(weir__mail *m)
{
    atomic_fetch_add(&((probe *)m)->dropped, 1);
}

static int src_next(weir_ctx *ctx, void *state)
{
    (void)state;
    if (!atomic_load(&at_src.ready)) {
        at_src.thread = pthread_self();
        at_src.st = ctx->st;
        atomic_store(&at_src.ready, 1);
    }
    int64_t v = 1;
    int e = weir_emit(ctx, &v, 8, 0);
    /* Unbounded until the posted work ran here. */
    return e ? e : atomic_load(&at_src.ran);
}

static int sink_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)arg;
    (void)state;
    at_sink.thread = pthread_self();
    at_sink.st = ctx->st;
    atomic_store(&at_sink.ready, 1);
    return 0;
}

static int sink_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx, (void)state, (void)in;
    return 0;
}

static void *poster(void *arg)
{
    (void)arg;
    while (!atomic_load(&at_sink.ready) || !atomic_load(&at_src.ready))
        sched_yield();
    /* The sink's first: it is ahead of the end of input the source sends
     * once its own work ran. */
    CHECK_EQ(weir__subtask_post(at_sink.st, (item){IT_CALL, 0, {.mail = &at_sink.mail}, 0}), 0);
    CHECK_EQ(weir__subtask_post(at_src.st, (item){IT_CALL, 0, {.mail = &at_src.mail}, 0}), 0);
    return NULL;
}

static intptr_t run_job(void *arg)
{
    (void)arg;
    weir_job *j = weir_job_new("mailbox");
    weir_stream *s = weir_job_source(j, "src", &(weir_source_def){.next = src_next}, NULL);
    s = weir_stream_rebalance(s);
    CHECK_EQ(weir_stream_sink(s, "sink", &(weir_op_def){.open = sink_open, .process = sink_process},
                              NULL),
             0);
    pthread_t t;
    pthread_create(&t, NULL, poster, NULL);
    int e = weir_job_run(j, NULL);
    pthread_join(t, NULL);
    weir_job_free(j);
    return e;
}

TEST(posted_work_runs_on_the_subtasks_thread)
{
    at_src.mail = (weir__mail){probe_fn, probe_drop};
    at_sink.mail = (weir__mail){probe_fn, probe_drop};
    CHECK_EQ(test_run_on_rt(2, run_job, NULL), 0);
    CHECK_EQ(atomic_load(&at_src.ran), 1);
    CHECK_EQ(atomic_load(&at_src.on_own_thread), 1);
    CHECK_EQ(atomic_load(&at_sink.ran), 1);
    CHECK_EQ(atomic_load(&at_sink.on_own_thread), 1);
    CHECK_EQ(atomic_load(&at_src.dropped) + atomic_load(&at_sink.dropped), 0);
}

/* ---- queued when the run ends: dropped ---- */
static probe late;
static _Atomic int posted_late;

static int late_next(weir_ctx *ctx, void *state)
{
    (void)state;
    if (!atomic_exchange(&posted_late, 1)) {
        late.thread = pthread_self();
        /* To itself: a source that ends now never looks at its mailbox
         * again, so the work is still queued at the end of the run. */
        CHECK_EQ(weir__subtask_post(ctx->st, (item){IT_CALL, 0, {.mail = &late.mail}, 0}), 0);
    }
    return 1;
}

static intptr_t run_late(void *arg)
{
    (void)arg;
    weir_job *j = weir_job_new("late");
    weir_stream *s = weir_job_source(j, "src", &(weir_source_def){.next = late_next}, NULL);
    CHECK_EQ(weir_stream_print(s, "p"), 0);
    int e = weir_job_run(j, NULL);
    weir_job_free(j);
    return e;
}

TEST(work_queued_when_the_run_ends_is_dropped)
{
    late.mail = (weir__mail){probe_fn, probe_drop};
    CHECK_EQ(test_run_on_rt(2, run_late, NULL), 0);
    CHECK_EQ(atomic_load(&late.ran), 0);
    CHECK_EQ(atomic_load(&late.dropped), 1);
}

TEST_MAIN()
