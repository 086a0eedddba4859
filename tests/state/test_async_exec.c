/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_async_exec.c - the async execution controller's rules
 * (src/state/async_exec.h), driven by a model: random scripts of records
 * (a key, a value, 0-3 state reads each), watermarks and barriers, whose
 * reads complete in a random order, interleaved at random with the input.
 * Every seed checks, as it runs:
 *
 * - per-key order: one record of a key runs at a time, and a key's records
 *   start and finish in arrival order;
 * - no watermark overtakes a record: when watermark W is released every
 *   record before it has finished and none after it has started; releases
 *   increase, and the last one is the last watermark given;
 * - the barrier cut: once the controller is idle at a barrier, each key's
 *   sum is the sum over exactly the records before the barrier;
 * - the cap: never more than max_in_flight records held; at the cap a
 *   submit is refused with WEIR__AEC_FULL and nothing changes;
 * - the error path: a record failing makes the error sticky, releases its
 *   key and epoch (the controller still becomes idle), drops the records not
 *   started and releases no more watermarks;
 * - every record is disposed of exactly once, also when the controller is
 *   freed with records waiting.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "state/async_exec.h"
#include "test.h"

#define MAXK  64
#define MAXEV 5000

enum { EV_REC, EV_WM, EV_BARRIER };

typedef struct mrec {
    weir__aec_rec a;
    int idx, key, val, reads, fail;
    int started, finished, disposed;
    char kb[4];
} mrec;

typedef struct model {
    weir__aec *c;
    uint64_t rng;
    size_t cap;
    int nkeys;
    mrec *recs;
    int nrec; /* submitted */
    mrec **wait;
    int nwait;
    int busy[MAXK];
    int last_start[MAXK], last_fin[MAXK];
    int64_t sum[MAXK];
    /* watermarks: value 10 * (n + 1) for the n-th, given after wm_pos[n] records */
    int wm_pos[MAXEV];
    int nwm;
    int64_t last_release;
    int fin_prefix;  /* records [0, fin_prefix) have all finished */
    int max_started; /* the highest index started, -1 */
    int failed;      /* the failing record finished */
} model;

static uint32_t rnd(model *m, uint32_t n)
{
    m->rng ^= m->rng << 13;
    m->rng ^= m->rng >> 7;
    m->rng ^= m->rng << 17;
    return (uint32_t)(m->rng % n);
}

static void finished(model *m, mrec *r)
{
    CHECK(!r->finished);
    CHECK_LT(m->last_fin[r->key], r->idx); /* arrival order per key */
    m->last_fin[r->key] = r->idx;
    r->finished = 1;
    m->busy[r->key] = 0;
    if (!r->fail)
        m->sum[r->key] += r->val;
    else
        m->failed = 1;
    while (m->fin_prefix < m->nrec && m->recs[m->fin_prefix].finished)
        m->fin_prefix++;
}

static int run(void *arg, weir__aec_rec *a)
{
    model *m = arg;
    mrec *r = (mrec *)a;
    CHECK(!r->started);
    CHECK(!m->failed); /* nothing starts after the error */
    CHECK(!m->busy[r->key]);
    CHECK_LT(m->last_start[r->key], r->idx);
    m->busy[r->key] = 1;
    m->last_start[r->key] = r->idx;
    r->started = 1;
    if (r->idx > m->max_started)
        m->max_started = r->idx;
    if (r->reads == 0) {
        finished(m, r);
        return r->fail ? -EIO : 0;
    }
    m->wait[m->nwait++] = r;
    return 1;
}

static int release(void *arg, int64_t wm)
{
    model *m = arg;
    CHECK(!m->failed);
    CHECK_GT(wm, m->last_release);
    CHECK_EQ(wm % 10, 0);
    int n = (int)(wm / 10) - 1; /* the n-th watermark given */
    CHECK_LT(n, m->nwm);
    int pos = m->wm_pos[n];
    CHECK_GE(m->fin_prefix, pos);  /* every record before it finished */
    CHECK_LT(m->max_started, pos); /* none after it started */
    m->last_release = wm;
    return 0;
}

static void dispose(void *arg, weir__aec_rec *a)
{
    (void)arg;
    mrec *r = (mrec *)a;
    CHECK_EQ(r->disposed, 0);
    r->disposed = 1;
}

static const weir__aec_hooks hooks = {run, release, dispose};

/* Complete one read of a random waiting record. */
static void complete_one(model *m)
{
    int i = (int)rnd(m, (uint32_t)m->nwait);
    mrec *r = m->wait[i];
    if (--r->reads > 0)
        return; /* a further read: it goes on waiting */
    m->wait[i] = m->wait[--m->nwait];
    finished(m, r);
    int e = weir__aec_finish(m->c, &r->a, r->fail ? -EIO : 0);
    if (m->failed)
        CHECK_EQ(e, -EIO);
    else
        CHECK_EQ(e, 0);
}

static void check_cap(model *m)
{
    CHECK_LE(weir__aec_in_flight(m->c), m->cap);
    CHECK_EQ(weir__aec_waiting(m->c), (size_t)m->nwait);
}

/* One seed: events of the script, reads completing among them. fail_at:
 * the index of the record that fails (-1: none); free_at: the event at
 * which the controller is freed with what it holds (-1: at the end). */
static void run_seed(uint64_t seed, int fail_at, int free_at)
{
    static const size_t caps[] = {1, 2, 7, 64, WEIR__AEC_MAX_IN_FLIGHT};
    static const int keys[] = {1, 4, 16, 64};
    model m = {.rng = seed * 2654435761u + 1, .max_started = -1};
    m.cap = caps[rnd(&m, 5)];
    m.nkeys = keys[rnd(&m, 4)];
    int nev = 500 + (int)rnd(&m, MAXEV - 500);
    CHECK((m.recs = calloc((size_t)nev, sizeof(mrec))) != NULL);
    CHECK((m.wait = calloc((size_t)nev, sizeof(mrec *))) != NULL);
    for (int k = 0; k < MAXK; k++)
        m.last_start[k] = m.last_fin[k] = -1;
    int64_t ref[MAXK] = {0}; /* sums over the records given so far */
    CHECK((m.c = weir__aec_new(&hooks, &m, m.cap)) != NULL);
    int ev = 0, kind = -1;
    while (ev < nev) {
        if (ev == free_at)
            break;
        check_cap(&m);
        if (kind < 0) {
            uint32_t x = rnd(&m, 100);
            kind = x < 80 ? EV_REC : x < 96 ? EV_WM : EV_BARRIER;
        }
        /* A read completes now and then, and whenever the cap is reached. */
        int at_cap = weir__aec_in_flight(m.c) >= m.cap;
        if (m.nwait && (at_cap || rnd(&m, 3) == 0)) {
            complete_one(&m);
            continue;
        }
        if (kind == EV_REC) {
            mrec *r = &m.recs[m.nrec];
            *r = (mrec){.idx = m.nrec,
                        .key = (int)rnd(&m, (uint32_t)m.nkeys),
                        .val = 1 + (int)rnd(&m, 1000),
                        .reads = (int)rnd(&m, 4),
                        .fail = m.nrec == fail_at};
            memcpy(r->kb, &r->key, sizeof(r->kb));
            r->a.key = r->kb;
            r->a.klen = sizeof(r->kb);
            size_t before = weir__aec_in_flight(m.c);
            m.nrec++; /* visible to the hooks */
            int e = weir__aec_submit(m.c, &r->a);
            if (e == WEIR__AEC_FULL) {
                /* At the cap: nothing changed, the record is not taken. */
                CHECK_EQ(before, m.cap);
                CHECK_EQ(weir__aec_in_flight(m.c), m.cap);
                CHECK(!r->started && !r->disposed);
                m.nrec--;
                CHECK(m.nwait > 0); /* something can finish: no deadlock */
                continue;
            }
            if (m.failed) {
                CHECK_EQ(e, -EIO);
            } else {
                CHECK_EQ(e, 0);
                ref[r->key] += r->val;
            }
        } else if (kind == EV_WM) {
            m.wm_pos[m.nwm] = m.nrec;
            m.nwm++;
            int e = weir__aec_watermark(m.c, 10 * (int64_t)m.nwm);
            CHECK_EQ(e, m.failed ? -EIO : 0);
        } else {
            /* A barrier: run until idle, then the cut is exact. */
            while (!weir__aec_idle(m.c)) {
                CHECK(m.nwait > 0); /* else it could never become idle */
                complete_one(&m);
            }
            if (!m.failed) {
                for (int k = 0; k < m.nkeys; k++)
                    CHECK_EQ(m.sum[k], ref[k]);
                if (m.nwm)
                    CHECK_EQ(m.last_release, 10 * (int64_t)m.nwm);
            }
        }
        kind = -1;
        ev++;
    }
    if (ev == free_at) {
        weir__aec_free(m.c); /* with what it holds */
    } else {
        while (m.nwait)
            complete_one(&m);
        CHECK(weir__aec_idle(m.c));
        CHECK_EQ(weir__aec_in_flight(m.c), 0);
        CHECK_EQ(weir__aec_error(m.c), fail_at >= 0 && fail_at < m.nrec ? -EIO : 0);
        if (!m.failed) {
            for (int k = 0; k < m.nkeys; k++)
                CHECK_EQ(m.sum[k], ref[k]);
            for (int i = 0; i < m.nrec; i++)
                CHECK(m.recs[i].finished);
            if (m.nwm)
                CHECK_EQ(m.last_release, 10 * (int64_t)m.nwm);
        }
        weir__aec_free(m.c);
    }
    for (int i = 0; i < m.nrec; i++)
        CHECK_EQ(m.recs[i].disposed, 1);
    free(m.recs);
    free(m.wait);
}

TEST(random_scripts_keep_key_order_epochs_the_cut_and_the_cap)
{
    for (uint64_t seed = 1; seed <= 300; seed++)
        run_seed(seed, -1, -1);
}

TEST(a_failing_record_releases_its_key_and_epoch_and_drops_what_did_not_start)
{
    for (uint64_t seed = 1; seed <= 200; seed++)
        run_seed(seed, (int)(seed * 37 % 400), -1);
}

TEST(freeing_with_records_waiting_disposes_of_each_once)
{
    for (uint64_t seed = 1; seed <= 200; seed++)
        run_seed(seed, seed % 3 ? -1 : (int)(seed % 200), 100 + (int)(seed * 13 % 400));
}

/* The rules on a small script, by hand: a watermark waits for the one
 * record before it, a record after it waits for its release though its
 * key is free, two watermarks with no record between are one. */
static int seen_release[4], nrel;
static int hand_run(void *arg, weir__aec_rec *a)
{
    (void)arg, (void)a;
    return 1; /* every record waits */
}
static int hand_release(void *arg, int64_t wm)
{
    (void)arg;
    seen_release[nrel++] = (int)wm;
    return 0;
}
static void hand_dispose(void *arg, weir__aec_rec *a)
{
    (void)arg, (void)a;
}

TEST(a_watermark_waits_for_the_records_before_it_and_holds_those_after)
{
    static const weir__aec_hooks h = {hand_run, hand_release, hand_dispose};
    weir__aec *c = weir__aec_new(&h, NULL, 0);
    CHECK(c != NULL);
    weir__aec_rec r1 = {.key = "a", .klen = 1}, r2 = {.key = "b", .klen = 1};
    weir__aec_rec r3 = {.key = "a", .klen = 1};
    CHECK_EQ(weir__aec_submit(c, &r1), 0);
    CHECK_EQ(r1.state, WEIR__AEC_RUNNING);
    CHECK_EQ(weir__aec_watermark(c, 5), 0);
    CHECK_EQ(weir__aec_watermark(c, 7), 0); /* replaces 5 */
    CHECK_EQ(nrel, 0);
    CHECK_EQ(weir__aec_submit(c, &r2), 0);
    CHECK_EQ(r2.state, WEIR__AEC_HELD); /* key b is free, but 7 is not out */
    CHECK_EQ(weir__aec_submit(c, &r3), 0);
    CHECK_EQ(weir__aec_in_flight(c), 3);
    CHECK(!weir__aec_idle(c));
    CHECK_EQ(weir__aec_finish(c, &r1, 0), 0);
    CHECK_EQ(nrel, 1);
    CHECK_EQ(seen_release[0], 7);
    CHECK_EQ(r2.state, WEIR__AEC_RUNNING);
    CHECK_EQ(r3.state, WEIR__AEC_RUNNING); /* a again free: r1 finished */
    CHECK_EQ(weir__aec_finish(c, &r3, 0), 0);
    CHECK_EQ(weir__aec_finish(c, &r2, 0), 0);
    CHECK(weir__aec_idle(c));
    CHECK_EQ(weir__aec_watermark(c, 9), 0); /* idle: out at once */
    CHECK_EQ(nrel, 2);
    CHECK_EQ(seen_release[1], 9);
    weir__aec_free(c);
}

/* A record failing at once, inside submit, with -ENOMEM or -EAGAIN: it
 * was taken (and disposed of), which submit's answer must not hide behind
 * its own "not taken" ones. */
static int at_once_err, at_once_disposed;
static int at_once_run(void *arg, weir__aec_rec *a)
{
    (void)arg, (void)a;
    return at_once_err;
}
static void at_once_dispose(void *arg, weir__aec_rec *a)
{
    (void)arg, (void)a;
    at_once_disposed++;
}

TEST(a_record_failing_at_once_with_enomem_or_eagain_was_taken)
{
    static const weir__aec_hooks h = {at_once_run, hand_release, at_once_dispose};
    static const int errs[] = {-ENOMEM, -EAGAIN};
    for (int i = 0; i < 2; i++) {
        at_once_err = errs[i];
        at_once_disposed = 0;
        weir__aec *c = weir__aec_new(&h, NULL, 1);
        CHECK(c != NULL);
        weir__aec_rec r = {.key = "a", .klen = 1}, r2 = {.key = "b", .klen = 1};
        int e = weir__aec_submit(c, &r);
        CHECK_EQ(e, errs[i]);
        CHECK(e != WEIR__AEC_FULL && e != WEIR__AEC_NOMEM);
        CHECK_EQ(at_once_disposed, 1);
        CHECK_EQ(weir__aec_in_flight(c), 0);
        CHECK_EQ(weir__aec_submit(c, &r2), errs[i]); /* disposed unrun */
        CHECK_EQ(at_once_disposed, 2);
        weir__aec_free(c);
        CHECK_EQ(at_once_disposed, 2);
    }
}

/* At the cap: refused, with an answer no record's error can be. */
TEST(at_the_cap_submit_refuses_with_full)
{
    static const weir__aec_hooks h = {hand_run, hand_release, hand_dispose};
    weir__aec *c = weir__aec_new(&h, NULL, 1);
    CHECK(c != NULL);
    weir__aec_rec r1 = {.key = "a", .klen = 1}, r2 = {.key = "b", .klen = 1};
    CHECK_EQ(weir__aec_submit(c, &r1), 0);
    CHECK_EQ(weir__aec_submit(c, &r2), WEIR__AEC_FULL);
    CHECK_EQ(weir__aec_in_flight(c), 1);
    CHECK_EQ(weir__aec_finish(c, &r1, 0), 0);
    CHECK_EQ(weir__aec_submit(c, &r2), 0);
    CHECK_EQ(weir__aec_finish(c, &r2, 0), 0);
    weir__aec_free(c);
}

TEST_MAIN()
