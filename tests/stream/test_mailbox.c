/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_mailbox.c - a subtask's mailbox (stream_int.h, weir__subtask_post):
 * work posted from another thread (a completion) runs on the subtask's own
 * thread, in a source between two calls of next() and in an operator
 * between its inputs' items; work still queued when the run ends is
 * dropped, not run and not leaked. Processing-time timers are mailbox
 * items too: they fire when due while batches keep the subtask busy, in
 * time order, on its own thread, re-armed by an earlier registration (and
 * from inside on_timer), never after they were deleted.
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

static int probe_fn(subtask *st, weir__mail *m)
{
    probe *p = (probe *)m;
    atomic_store(&p->on_own_thread, pthread_equal(pthread_self(), p->thread) && st == p->st);
    atomic_store(&p->ran, 1);
    return 0;
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

/* ---- processing-time timers ---- */
#define NT 40
enum { K_DELETED = 1000, K_FLOOD = 2000 };
static _Atomic int fired, not_rearmed, fired_deleted, fired_late, fired_off_thread,
    fired_out_of_order;
static _Atomic int flooding; /* the source was still sending when the last one fired */
static pthread_t sink_thread;
static int64_t last_when, latest_when;

typedef struct tsrc {
    int phase;
    int64_t give_up;
} tsrc;

static int tsrc_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    tsrc *t = calloc(1, sizeof(*t));
    t->give_up = weir_time_after_ms(20000);
    *state = t;
    return 0;
}

static int tsrc_next(weir_ctx *ctx, void *state)
{
    tsrc *t = state;
    int64_t k;
    if (t->phase == 0) {
        /* Keys NT-1 .. 0 each ask for a timer (value: ms from now) in
         * descending order, so each one is earlier than every one before:
         * each registration re-arms. Then K_DELETED's, registered and
         * deleted (it is the earliest when deleted). */
        for (k = NT - 1; k >= 0; k--) {
            int64_t rec[2] = {k, 5 + k * 50};
            CHECK_EQ(weir_emit(ctx, rec, sizeof(rec), 0), 0);
        }
        int64_t del[2] = {K_DELETED, 1};
        CHECK_EQ(weir_emit(ctx, del, sizeof(del), 0), 0);
        CHECK_EQ(weir_emit(ctx, del, sizeof(del), 0), 0); /* the second deletes */
        t->phase = 1;
        return 0;
    }
    /* Then a flood with no wait between batches, until every timer fired
     * (and the one on_timer adds), or give up. */
    if (atomic_load(&fired) < NT + 1 && weir_time_now() < t->give_up) {
        for (int i = 0; i < 64; i++) {
            int64_t rec[2] = {K_FLOOD, -1};
            CHECK_EQ(weir_emit(ctx, rec, sizeof(rec), 0), 0);
        }
        return 0;
    }
    atomic_store(&flooding, atomic_load(&fired) == NT + 1);
    return 1;
}

static int tkey(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = in->data;
    *len = 8;
    return 0;
}

static int tsink_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    int64_t rec[2];
    memcpy(rec, in->data, sizeof(rec));
    sink_thread = pthread_self();
    if (rec[0] == K_FLOOD)
        return 0;
    if (rec[0] == K_DELETED) {
        static int seen;
        if (seen++)
            return weir_timer_delete(ctx, WEIR_TIME_PROCESSING, last_when);
    }
    int64_t when = weir_time_now() + rec[1] * WEIR_MSEC;
    if (rec[0] == K_DELETED)
        last_when = when;
    if (rec[0] == NT - 1)
        latest_when = when; /* the first registered, the latest due */
    return weir_timer_register(ctx, WEIR_TIME_PROCESSING, when);
}

static int tsink_timer(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    (void)state;
    static int64_t prev;
    static int again;
    size_t kl;
    int64_t key;
    memcpy(&key, weir_ctx_key(ctx, &kl), sizeof(key));
    CHECK_EQ(domain, WEIR_TIME_PROCESSING);
    if (key == K_DELETED)
        atomic_fetch_add(&fired_deleted, 1);
    if (weir_time_now() < when)
        atomic_fetch_add(&fired_late, 1); /* early, in fact */
    if (!pthread_equal(pthread_self(), sink_thread))
        atomic_fetch_add(&fired_off_thread, 1);
    if (when < prev)
        atomic_fetch_add(&fired_out_of_order, 1);
    prev = when;
    /* Key 0's, the earliest, registered last: it fires long before the
     * first one registered is due only if its registration re-armed. */
    if (key == 0 && !again && weir_time_now() >= latest_when)
        atomic_fetch_add(&not_rearmed, 1);
    /* Key 0's registers one more, from inside on_timer. */
    if (key == 0 && !again++)
        CHECK_EQ(weir_timer_register(ctx, WEIR_TIME_PROCESSING, weir_time_now() + WEIR_MSEC), 0);
    atomic_fetch_add(&fired, 1);
    return 0;
}

static intptr_t run_timers(void *arg)
{
    (void)arg;
    weir_job *j = weir_job_new("proc-timers");
    weir_source_def sd = {.open = tsrc_open, .next = tsrc_next, .close = free};
    weir_stream *s = weir_stream_key_by(weir_job_source(j, "src", &sd, NULL), tkey, NULL);
    CHECK_EQ(weir_stream_sink(s, "sink",
                              &(weir_op_def){.process = tsink_process, .on_timer = tsink_timer},
                              NULL),
             0);
    int e = weir_job_run(j, NULL);
    weir_job_free(j);
    return e;
}

TEST(processing_time_timers_are_mailbox_items)
{
    CHECK_EQ(test_run_on_rt(1, run_timers, NULL), 0);
    CHECK_EQ(atomic_load(&fired), NT + 1);
    CHECK_EQ(atomic_load(&flooding), 1); /* they fired while batches kept coming */
    CHECK_EQ(atomic_load(&not_rearmed), 0);
    CHECK_EQ(atomic_load(&fired_deleted), 0);
    CHECK_EQ(atomic_load(&fired_late), 0);
    CHECK_EQ(atomic_load(&fired_off_thread), 0);
    CHECK_EQ(atomic_load(&fired_out_of_order), 0);
}

TEST_MAIN()
