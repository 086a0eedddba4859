/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_resil.c - weir/resil.h: the circuit breaker's transitions on a fake
 * clock (threshold, cooldown, single probe, lost probe, late reports), its
 * single probe under contention from tasks on two scheduler threads and its
 * counters under plain threads; retry schedules with a seeded generator
 * (every delay within [0, min(max, initial * mult^k)], reproducible),
 * weir_retry_run on a fake clock and sleep (attempts, predicate, deadline,
 * cancellation), then for real: a fiber suspended in its backoff while
 * another task runs, a stackless retry loop, cancellation and deadlines
 * during the backoff; the PID controller's terms, step response, clamping,
 * anti-windup against a naive integrator, and option checks.
 *
 * Everything that is timed runs on fake time, except the few real-sleep
 * tests, which pick their seed so that each delay is known in advance.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

#include "test.h"
#include "test_rt.h"
#include "weir/resil.h"
#include "weir/sync.h"

/* ---- fake clock ------------------------------------------------------------------------------ */
typedef struct fake_clock {
    _Atomic int64_t now;
} fake_clock;

static int64_t fake_now(void *arg)
{
    return atomic_load_explicit(&((fake_clock *)arg)->now, memory_order_acquire);
}

static void fake_advance(fake_clock *c, int64_t ns)
{
    atomic_fetch_add_explicit(&c->now, ns, memory_order_acq_rel);
}

static weir_breaker *breaker_on(fake_clock *c, int threshold, int64_t cooldown)
{
    weir_breaker_opts o = {
        .failure_threshold = threshold, .cooldown_ns = cooldown, .clock = fake_now, .clock_arg = c};
    weir_breaker *b = weir_breaker_new(&o);
    CHECK(b != NULL);
    return b;
}

static weir_breaker_stats stats_of(weir_breaker *b)
{
    weir_breaker_stats st;
    weir_breaker_stats_get(b, &st);
    return st;
}

/* ---- breaker: single thread, fake clock ------------------------------------------------------ */
TEST(breaker_defaults_threshold_5_cooldown_30s)
{
    fake_clock c = {1000};
    weir_breaker *b = breaker_on(&c, 0, 0);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(weir_breaker_allow(b), 0);
        weir_breaker_failure(b);
    }
    CHECK_EQ(weir_breaker_state_get(b), WEIR_BREAKER_CLOSED);
    CHECK_EQ(stats_of(b).consecutive_failures, 4);
    CHECK_EQ(weir_breaker_allow(b), 0);
    weir_breaker_failure(b); /* the fifth in a row */
    CHECK_EQ(weir_breaker_state_get(b), WEIR_BREAKER_OPEN);
    CHECK_EQ(weir_breaker_allow(b), -EAGAIN);
    fake_advance(&c, 30 * WEIR_SEC - 1);
    CHECK_EQ(weir_breaker_allow(b), -EAGAIN);
    CHECK_EQ(weir_breaker_state_get(b), WEIR_BREAKER_OPEN);
    fake_advance(&c, 1); /* exactly the cooldown */
    CHECK_EQ(weir_breaker_allow(b), 0);
    CHECK_EQ(weir_breaker_state_get(b), WEIR_BREAKER_HALF_OPEN);
    weir_breaker_stats st = stats_of(b);
    CHECK_EQ(st.allowed, 6);
    CHECK_EQ(st.rejected, 2);
    CHECK_EQ(st.failures, 5);
    CHECK_EQ(st.closed_to_open, 1);
    CHECK_EQ(st.open_to_half_open, 1);
    CHECK_EQ(st.probes, 1);
    weir_breaker_free(b);
}

TEST(breaker_success_resets_consecutive_failures)
{
    fake_clock c = {0};
    weir_breaker *b = breaker_on(&c, 3, WEIR_SEC);
    for (int round = 0; round < 10; round++) {
        weir_breaker_failure(b);
        weir_breaker_failure(b);
        weir_breaker_success(b);
    }
    CHECK_EQ(weir_breaker_state_get(b), WEIR_BREAKER_CLOSED);
    CHECK_EQ(stats_of(b).consecutive_failures, 0);
    weir_breaker_failure(b);
    weir_breaker_failure(b);
    weir_breaker_failure(b);
    CHECK_EQ(weir_breaker_state_get(b), WEIR_BREAKER_OPEN);
    weir_breaker_free(b);
}

TEST(breaker_half_open_admits_one_probe_and_closes_on_success)
{
    fake_clock c = {0};
    weir_breaker *b = breaker_on(&c, 2, WEIR_SEC);
    weir_breaker_failure(b);
    weir_breaker_failure(b);
    fake_advance(&c, WEIR_SEC);
    CHECK_EQ(weir_breaker_allow(b), 0); /* the probe */
    for (int i = 0; i < 5; i++)
        CHECK_EQ(weir_breaker_allow(b), -EAGAIN); /* others, while it is out */
    fake_advance(&c, WEIR_SEC / 2);
    CHECK_EQ(weir_breaker_allow(b), -EAGAIN);
    weir_breaker_success(b);
    CHECK_EQ(weir_breaker_state_get(b), WEIR_BREAKER_CLOSED);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(weir_breaker_allow(b), 0);
    weir_breaker_stats st = stats_of(b);
    CHECK_EQ(st.closed_to_open, 1);
    CHECK_EQ(st.open_to_half_open, 1);
    CHECK_EQ(st.half_open_to_closed, 1);
    CHECK_EQ(st.half_open_to_open, 0);
    CHECK_EQ(st.probes, 1);
    CHECK_EQ(st.rejected, 6);
    CHECK_EQ(st.allowed, 6);
    /* Closed again: it takes the full threshold to trip once more. */
    weir_breaker_failure(b);
    CHECK_EQ(weir_breaker_state_get(b), WEIR_BREAKER_CLOSED);
    weir_breaker_failure(b);
    CHECK_EQ(weir_breaker_state_get(b), WEIR_BREAKER_OPEN);
    weir_breaker_free(b);
}

TEST(breaker_probe_failure_reopens_and_restarts_cooldown)
{
    fake_clock c = {0};
    weir_breaker *b = breaker_on(&c, 1, 100);
    weir_breaker_failure(b); /* opens at t=0 */
    fake_advance(&c, 100);
    CHECK_EQ(weir_breaker_allow(b), 0);
    fake_advance(&c, 40);
    weir_breaker_failure(b); /* probe failed at t=140: cooldown from here */
    CHECK_EQ(weir_breaker_state_get(b), WEIR_BREAKER_OPEN);
    fake_advance(&c, 99);
    CHECK_EQ(weir_breaker_allow(b), -EAGAIN);
    fake_advance(&c, 1);
    CHECK_EQ(weir_breaker_allow(b), 0);
    CHECK_EQ(weir_breaker_allow(b), -EAGAIN);
    weir_breaker_stats st = stats_of(b);
    CHECK_EQ(st.closed_to_open, 1);
    CHECK_EQ(st.half_open_to_open, 1);
    CHECK_EQ(st.open_to_half_open, 2);
    CHECK_EQ(st.state, WEIR_BREAKER_HALF_OPEN);
    weir_breaker_free(b);
}

TEST(breaker_reports_while_open_change_nothing)
{
    fake_clock c = {0};
    weir_breaker *b = breaker_on(&c, 1, 100);
    weir_breaker_failure(b);
    weir_breaker_success(b); /* a call admitted before the trip answers late */
    weir_breaker_failure(b);
    CHECK_EQ(weir_breaker_state_get(b), WEIR_BREAKER_OPEN);
    weir_breaker_stats st = stats_of(b);
    CHECK_EQ(st.ignored, 2);
    CHECK_EQ(st.closed_to_open, 1);
    /* The late failure did not restart the cooldown. */
    fake_advance(&c, 100);
    CHECK_EQ(weir_breaker_allow(b), 0);
    weir_breaker_free(b);
}

TEST(breaker_lost_probe_is_replaced_after_a_cooldown)
{
    fake_clock c = {0};
    weir_breaker *b = breaker_on(&c, 1, 100);
    weir_breaker_failure(b);
    fake_advance(&c, 100);
    CHECK_EQ(weir_breaker_allow(b), 0); /* this probe never reports */
    fake_advance(&c, 99);
    CHECK_EQ(weir_breaker_allow(b), -EAGAIN);
    fake_advance(&c, 1);
    CHECK_EQ(weir_breaker_allow(b), 0); /* a second probe */
    CHECK_EQ(weir_breaker_allow(b), -EAGAIN);
    weir_breaker_success(b);
    CHECK_EQ(weir_breaker_state_get(b), WEIR_BREAKER_CLOSED);
    weir_breaker_stats st = stats_of(b);
    CHECK_EQ(st.probes, 2);
    CHECK_EQ(st.open_to_half_open, 1);
    weir_breaker_free(b);
}

TEST(breaker_bad_options)
{
    weir_breaker_opts o = {.failure_threshold = -1};
    CHECK(weir_breaker_opts_check(&o) != NULL);
    errno = 0;
    CHECK(weir_breaker_new(&o) == NULL);
    CHECK_EQ(errno, EINVAL);
    o = (weir_breaker_opts){.cooldown_ns = -5};
    CHECK(weir_breaker_opts_check(&o) != NULL);
    errno = 0;
    CHECK(weir_breaker_new(&o) == NULL);
    CHECK_EQ(errno, EINVAL);
    CHECK(weir_breaker_opts_check(NULL) == NULL);
    /* NULL options: defaults on the real clock. */
    weir_breaker *b = weir_breaker_new(NULL);
    CHECK(b != NULL);
    for (int i = 0; i < 5; i++)
        weir_breaker_failure(b);
    CHECK_EQ(weir_breaker_allow(b), -EAGAIN); /* 30 s will not pass in this test */
    weir_breaker_free(b);
    weir_breaker_free(NULL);
    CHECK_STR(weir_breaker_state_name(WEIR_BREAKER_CLOSED), "closed");
    CHECK_STR(weir_breaker_state_name(WEIR_BREAKER_OPEN), "open");
    CHECK_STR(weir_breaker_state_name(WEIR_BREAKER_HALF_OPEN), "half-open");
    CHECK_STR(weir_breaker_state_name((weir_breaker_state)7), "?");
}

/* ---- breaker: one probe among tasks on two scheduler threads ----------------------------------
 * Eight fibers, four pinned to each thread of a 2-thread runtime, meet at
 * a barrier each round; the last to arrive moves the fake clock past the
 * cooldown; after a second barrier all eight ask at once. Exactly one is
 * admitted; it reports (failure, or success in the last round) only after
 * everyone has asked, so the others met a probe that was still out. */
enum { XT_TASKS = 8, XT_ROUNDS = 200 };
static struct {
    weir_breaker *b;
    weir_barrier *bar;
    fake_clock clock;
    _Atomic int admitted;
} xt;

static intptr_t xt_contender(void *arg)
{
    (void)arg;
    for (int round = 0; round < XT_ROUNDS; round++) {
        if (weir_barrier_wait(xt.bar, WEIR_FOREVER) == 1)
            fake_advance(&xt.clock, WEIR_SEC);
        CHECK_GE(weir_barrier_wait(xt.bar, WEIR_FOREVER), 0);
        int mine = weir_breaker_allow(xt.b) == 0;
        if (mine)
            atomic_fetch_add(&xt.admitted, 1);
        CHECK_GE(weir_barrier_wait(xt.bar, WEIR_FOREVER), 0);
        CHECK_EQ(atomic_load(&xt.admitted), round + 1);
        if (mine) {
            if (round == XT_ROUNDS - 1)
                weir_breaker_success(xt.b);
            else
                weir_breaker_failure(xt.b);
        }
    }
    return 0;
}

TEST(breaker_single_probe_across_scheduler_threads)
{
    xt.clock.now = 0;
    xt.b = breaker_on(&xt.clock, 1, WEIR_SEC);
    weir_breaker_failure(xt.b);
    xt.bar = weir_barrier_new(XT_TASKS);
    CHECK(xt.bar != NULL);
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = 2});
    CHECK(rt != NULL);
    weir_task *t[XT_TASKS];
    for (int i = 0; i < XT_TASKS; i++) {
        weir_spawn_opts o = {.name = "contender", .loop = weir_rt_loop(rt, i % 2), .pin = 1};
        t[i] = weir_task_spawn(xt_contender, NULL, &o);
        CHECK(t[i] != NULL);
    }
    for (int i = 0; i < XT_TASKS; i++) {
        intptr_t r = -1;
        CHECK_EQ(weir_task_join(t[i], &r, weir_time_after_ms(60000)), 0);
        CHECK_EQ(r, 0);
    }
    weir_rt_free(rt);
    weir_breaker_stats st = stats_of(xt.b);
    CHECK_EQ(st.state, WEIR_BREAKER_CLOSED);
    CHECK_EQ(st.allowed, XT_ROUNDS);
    CHECK_EQ(st.probes, XT_ROUNDS);
    CHECK_EQ(st.rejected, (uint64_t)XT_ROUNDS * (XT_TASKS - 1));
    CHECK_EQ(st.open_to_half_open, XT_ROUNDS);
    CHECK_EQ(st.half_open_to_open, XT_ROUNDS - 1);
    CHECK_EQ(st.half_open_to_closed, 1);
    CHECK_EQ(st.closed_to_open, 1);
    weir_barrier_free(xt.bar);
    weir_breaker_free(xt.b);
}

/* ---- breaker: counters stay consistent under plain threads ----------------------------------- */
enum { PT_THREADS = 4, PT_OPS = 20000 };
static struct {
    weir_breaker *b;
    fake_clock clock;
    _Atomic uint64_t asked, admitted;
} pt;

static void *pt_hammer(void *arg)
{
    uint64_t x = (uint64_t)(uintptr_t)arg * 7919 + 1;
    for (int i = 0; i < PT_OPS; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift: this thread's choices */
        fake_advance(&pt.clock, 3);
        atomic_fetch_add(&pt.asked, 1);
        if (weir_breaker_allow(pt.b) != 0)
            continue;
        atomic_fetch_add(&pt.admitted, 1);
        if (x % 3 == 0)
            weir_breaker_success(pt.b);
        else
            weir_breaker_failure(pt.b);
    }
    return NULL;
}

TEST(breaker_counters_consistent_under_threads)
{
    pt.clock.now = 0;
    pt.b = breaker_on(&pt.clock, 3, 200);
    pthread_t th[PT_THREADS];
    for (int i = 0; i < PT_THREADS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, pt_hammer, (void *)(uintptr_t)i), 0);
    for (int i = 0; i < PT_THREADS; i++)
        CHECK_EQ(pthread_join(th[i], NULL), 0);
    weir_breaker_stats st = stats_of(pt.b);
    CHECK_EQ(st.allowed + st.rejected, atomic_load(&pt.asked));
    CHECK_EQ(st.allowed, atomic_load(&pt.admitted));
    CHECK_EQ(st.successes + st.failures, st.allowed);
    /* Every entry into OPEN is left through HALF_OPEN, and so on. */
    uint64_t into_open = st.closed_to_open + st.half_open_to_open;
    uint64_t out_half = st.half_open_to_closed + st.half_open_to_open;
    CHECK_EQ(into_open - st.open_to_half_open, st.state == WEIR_BREAKER_OPEN);
    CHECK_EQ(st.open_to_half_open - out_half, st.state == WEIR_BREAKER_HALF_OPEN);
    CHECK_GE(st.probes, st.open_to_half_open);
    CHECK_GT(st.closed_to_open, 0);
    CHECK_GT(st.half_open_to_closed, 0);
    CHECK_GT(st.rejected, 0);
    weir_breaker_free(pt.b);
}

/* ---- retry: the schedule ------------------------------------------------------------------- */
/* min(max, initial * mult^k), computed independently (pow) with a 1 ns
 * allowance for the library's repeated multiplication. */
static int64_t cap_of(int64_t initial, double mult, int64_t max, int k)
{
    double c = (double)initial * pow(mult, k);
    return c >= (double)max ? max : (int64_t)c + 1;
}

TEST(retry_delays_within_full_jitter_bounds)
{
    const double mults[] = {2.0, 1.5, 1.0, 3.7};
    for (size_t m = 0; m < sizeof mults / sizeof mults[0]; m++) {
        weir_retry_policy p = {.initial_delay_ns = 50 * WEIR_MSEC,
                               .multiplier = mults[m],
                               .max_delay_ns = 2 * WEIR_SEC,
                               .seed = 42};
        weir_retry r;
        CHECK_EQ(weir_retry_init(&r, &p), 0);
        int64_t biggest = 0;
        for (int k = 0; k < 40; k++) {
            int64_t d = weir_retry_next_delay(&r);
            CHECK_GE(d, 0);
            CHECK_LE(d, cap_of(p.initial_delay_ns, p.multiplier, p.max_delay_ns, k));
            if (d > biggest)
                biggest = d;
        }
        CHECK_GT(biggest, 0);
        if (mults[m] > 1.0) /* the cap has reached 2 s: some draw came near it */
            CHECK_GT(biggest, WEIR_SEC);
    }
}

TEST(retry_seed_reproduces_the_sequence)
{
    weir_retry_policy p = {.seed = 7};
    weir_retry a, b, c;
    CHECK_EQ(weir_retry_init(&a, &p), 0);
    CHECK_EQ(weir_retry_init(&b, &p), 0);
    p.seed = 8;
    CHECK_EQ(weir_retry_init(&c, &p), 0);
    int differ = 0;
    for (int k = 0; k < 20; k++) {
        int64_t da = weir_retry_next_delay(&a), db = weir_retry_next_delay(&b);
        CHECK_EQ(da, db);
        differ += da != weir_retry_next_delay(&c);
    }
    CHECK_GT(differ, 15);
    /* Unseeded states draw differently from each other. */
    weir_retry u1, u2;
    CHECK_EQ(weir_retry_init(&u1, NULL), 0);
    CHECK_EQ(weir_retry_init(&u2, NULL), 0);
    differ = 0;
    for (int k = 0; k < 20; k++)
        differ += weir_retry_next_delay(&u1) != weir_retry_next_delay(&u2);
    CHECK_GT(differ, 15);
}

TEST(retry_jitter_spreads_uniformly)
{
    weir_retry_policy p = {
        .initial_delay_ns = 1000, .max_delay_ns = 1000, .multiplier = 1.0, .seed = 99};
    weir_retry r;
    CHECK_EQ(weir_retry_init(&r, &p), 0);
    int64_t sum = 0, lo = 1000, hi = 0;
    int buckets[10] = {0};
    for (int i = 0; i < 20000; i++) {
        int64_t d = weir_retry_next_delay(&r);
        CHECK_GE(d, 0);
        CHECK_LE(d, 1000);
        sum += d;
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
        buckets[d == 1000 ? 9 : d / 100]++;
    }
    CHECK_GE(sum / 20000, 480);
    CHECK_LE(sum / 20000, 520);
    CHECK_LE(lo, 2);
    CHECK_GE(hi, 998);
    for (int i = 0; i < 10; i++) {
        CHECK_GT(buckets[i], 1700);
        CHECK_LT(buckets[i], 2300);
    }
}

TEST(retry_default_policy)
{
    weir_retry r;
    CHECK_EQ(weir_retry_init(&r, NULL), 0);
    /* Caps 50 ms, 100 ms, ... up to 30 s. */
    for (int k = 0; k < 20; k++)
        CHECK_LE(weir_retry_next_delay(&r), cap_of(50 * WEIR_MSEC, 2.0, 30 * WEIR_SEC, k));
    /* One attempt: the first failure is final. */
    CHECK_EQ(weir_retry_init(&r, NULL), 0);
    int64_t until = -1;
    CHECK_EQ(weir_retry_next(&r, -EIO, WEIR_FOREVER, &until), -EIO);
    CHECK_EQ(until, -1);
    CHECK_EQ(weir_retry_attempts(&r), 1);
    CHECK_EQ(weir_retry_last_error(&r), -EIO);
    CHECK_EQ(weir_retry_next(&r, 0, WEIR_FOREVER, &until), -EINVAL);
    CHECK_EQ(weir_retry_next(&r, 5, WEIR_FOREVER, &until), -EINVAL);
    CHECK_EQ(weir_retry_attempts(&r), 1);
}

static int64_t never_called(void *arg, int attempt, int64_t deadline)
{
    (void)arg, (void)attempt, (void)deadline;
    CHECK(!"called");
    return 0;
}

TEST(retry_bad_policy)
{
    const weir_retry_policy bad[] = {
        {.max_attempts = -1},     {.initial_delay_ns = -1}, {.max_delay_ns = -1},
        {.multiplier = 0.5},      {.multiplier = -2.0},     {.multiplier = NAN},
        {.multiplier = INFINITY}, {.multiplier = 0.999999},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *why = weir_retry_policy_check(&bad[i]);
        CHECK(why != NULL);
        CHECK(strncmp(why, "retry: ", 7) == 0);
        weir_retry r;
        CHECK_EQ(weir_retry_init(&r, &bad[i]), -EINVAL);
        CHECK_EQ(weir_retry_run(never_called, NULL, &bad[i], WEIR_FOREVER), -EINVAL);
    }
    CHECK(strstr(weir_retry_policy_check(&bad[3]), "multiplier") != NULL);
    CHECK(strstr(weir_retry_policy_check(&bad[0]), "max_attempts") != NULL);
    CHECK(weir_retry_policy_check(&(weir_retry_policy){.multiplier = 1.0}) == NULL);
    CHECK(weir_retry_policy_check(NULL) == NULL);
    CHECK_EQ(weir_retry_run(NULL, NULL, NULL, WEIR_FOREVER), -EINVAL);
}

/* ---- retry_run on fake time ------------------------------------------------------------------ */
enum { MAXREC = 64 };
typedef struct script {
    fake_clock clock;
    const int *results; /* what attempt i returns (last repeats) */
    int nresults;
    int calls;
    int attempts_seen[MAXREC];
    int64_t deadlines_seen[MAXREC];
    int64_t call_at[MAXREC];
    int sleeps;
    int64_t slept_from[MAXREC], slept_until[MAXREC];
    int pred_calls;
    int pred_err[MAXREC], pred_attempt[MAXREC];
    int cancel_self_on_call; /* 1-based attempt that cancels its own task */
} script;

static int64_t scripted(void *arg, int attempt, int64_t deadline)
{
    script *s = arg;
    int i = s->calls++;
    if (i < MAXREC) {
        s->attempts_seen[i] = attempt;
        s->deadlines_seen[i] = deadline;
        s->call_at[i] = fake_now(&s->clock);
    }
    if (s->cancel_self_on_call == attempt)
        weir_task_cancel(weir_task_current());
    return s->results[i < s->nresults ? i : s->nresults - 1];
}

static int fake_sleep(void *arg, int64_t until)
{
    script *s = arg;
    int64_t now = fake_now(&s->clock);
    CHECK_GE(until, now);
    if (s->sleeps < MAXREC) {
        s->slept_from[s->sleeps] = now;
        s->slept_until[s->sleeps] = until;
    }
    s->sleeps++;
    atomic_store(&s->clock.now, until);
    return 0;
}

static int retry_only_eagain(int err, int attempt, void *arg)
{
    script *s = arg;
    if (s->pred_calls < MAXREC) {
        s->pred_err[s->pred_calls] = err;
        s->pred_attempt[s->pred_calls] = attempt;
    }
    s->pred_calls++;
    return err == -EAGAIN;
}

static weir_retry_policy fake_policy(script *s, int max_attempts)
{
    return (weir_retry_policy){.max_attempts = max_attempts,
                               .initial_delay_ns = 50 * WEIR_MSEC,
                               .multiplier = 2.0,
                               .max_delay_ns = 400 * WEIR_MSEC,
                               .seed = 1234,
                               .clock = fake_now,
                               .clock_arg = &s->clock,
                               .sleep = fake_sleep,
                               .sleep_arg = s};
}

TEST(retry_run_succeeds_after_failures)
{
    static const int res[] = {-ECONNRESET, -ECONNRESET, -ETIMEDOUT, 7};
    script s = {.clock = {5000}, .results = res, .nresults = 4};
    weir_retry_policy p = fake_policy(&s, 10);
    int64_t deadline = 5000 + 3600 * WEIR_SEC;
    CHECK_EQ(weir_retry_run(scripted, &s, &p, deadline), 7);
    CHECK_EQ(s.calls, 4);
    CHECK_EQ(s.sleeps, 3);
    /* The delays are the seeded schedule's, each within its cap, and each
     * attempt starts when its backoff ends. */
    weir_retry twin;
    CHECK_EQ(weir_retry_init(&twin, &p), 0);
    for (int k = 0; k < 3; k++) {
        int64_t d = s.slept_until[k] - s.slept_from[k];
        CHECK_EQ(d, weir_retry_next_delay(&twin));
        CHECK_LE(d, cap_of(50 * WEIR_MSEC, 2.0, 400 * WEIR_MSEC, k));
        CHECK_EQ(s.call_at[k + 1], s.slept_until[k]);
    }
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(s.attempts_seen[i], i + 1);
        CHECK_EQ(s.deadlines_seen[i], deadline);
    }
}

TEST(retry_run_stops_when_attempts_are_spent)
{
    static const int res[] = {-EIO};
    script s = {.results = res, .nresults = 1};
    weir_retry_policy p = fake_policy(&s, 6);
    CHECK_EQ(weir_retry_run(scripted, &s, &p, WEIR_FOREVER), -EIO);
    CHECK_EQ(s.calls, 6);
    CHECK_EQ(s.sleeps, 5);
    for (int k = 0; k < 5; k++)
        CHECK_LE(s.slept_until[k] - s.slept_from[k],
                 cap_of(50 * WEIR_MSEC, 2.0, 400 * WEIR_MSEC, k));

    /* The default: one attempt, no sleep. */
    script one = {.results = res, .nresults = 1};
    p = fake_policy(&one, 0);
    CHECK_EQ(weir_retry_run(scripted, &one, &p, WEIR_FOREVER), -EIO);
    CHECK_EQ(one.calls, 1);
    CHECK_EQ(one.sleeps, 0);
}

TEST(retry_predicate_stops_retries)
{
    static const int res[] = {-EAGAIN, -EAGAIN, -EPERM, 0};
    script s = {.results = res, .nresults = 4};
    weir_retry_policy p = fake_policy(&s, 10);
    p.should_retry = retry_only_eagain;
    p.should_retry_arg = &s;
    CHECK_EQ(weir_retry_run(scripted, &s, &p, WEIR_FOREVER), -EPERM);
    CHECK_EQ(s.calls, 3);
    CHECK_EQ(s.sleeps, 2);
    CHECK_EQ(s.pred_calls, 3);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(s.pred_err[i], res[i]);
        CHECK_EQ(s.pred_attempt[i], i + 1);
    }
}

TEST(retry_never_retries_a_cancellation)
{
    static const int res[] = {-ECANCELED, 0};
    script s = {.results = res, .nresults = 2};
    weir_retry_policy p = fake_policy(&s, 10);
    p.should_retry = retry_only_eagain;
    p.should_retry_arg = &s;
    CHECK_EQ(weir_retry_run(scripted, &s, &p, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(s.calls, 1);
    CHECK_EQ(s.sleeps, 0);
    CHECK_EQ(s.pred_calls, 0);
}

TEST(retry_run_respects_the_deadline)
{
    static const int res[] = {-EIO};
    script s = {.clock = {WEIR_SEC}, .results = res, .nresults = 1};
    weir_retry_policy p = fake_policy(&s, 1000);
    int64_t deadline = WEIR_SEC + 900 * WEIR_MSEC;
    CHECK_EQ(weir_retry_run(scripted, &s, &p, deadline), -ETIMEDOUT);
    CHECK_GE(s.calls, 2); /* 900 ms holds a few backoffs capped at 50..400 ms */
    CHECK_EQ(s.sleeps, s.calls - 1);
    for (int k = 0; k < s.sleeps; k++)
        CHECK_LT(s.slept_until[k], deadline);
    for (int i = 0; i < s.calls; i++)
        CHECK_LT(s.call_at[i], deadline);
    /* A deadline already past: the first attempt is still made, then stop. */
    script late = {.clock = {WEIR_SEC}, .results = res, .nresults = 1};
    p = fake_policy(&late, 1000);
    CHECK_EQ(weir_retry_run(scripted, &late, &p, 0), -ETIMEDOUT);
    CHECK_EQ(late.calls, 1);
    CHECK_EQ(late.sleeps, 0);
}

/* An attempt during which the task gets cancelled ends the loop with
 * -ECANCELED, whatever the attempt's own error; a success still counts. */
static intptr_t cancelled_in_attempt_main(void *arg)
{
    (void)arg;
    static const int res[] = {-EIO, 0};
    script s = {.results = res, .nresults = 2, .cancel_self_on_call = 1};
    weir_retry_policy p = fake_policy(&s, 10);
    CHECK_EQ(weir_retry_run(scripted, &s, &p, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(s.calls, 1);
    CHECK_EQ(s.sleeps, 0);

    static const int ok[] = {3};
    script s2 = {.results = ok, .nresults = 1, .cancel_self_on_call = 1};
    p = fake_policy(&s2, 10);
    CHECK_EQ(weir_retry_run(scripted, &s2, &p, WEIR_FOREVER), 3);
    return 0;
}

TEST(retry_stops_when_cancelled_in_an_attempt)
{
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    weir_task *t = weir_task_spawn(cancelled_in_attempt_main, NULL,
                                   &(weir_spawn_opts){.name = "main", .loop = l});
    CHECK(t != NULL);
    CHECK_EQ(weir_loop_run(l), 0);
    intptr_t r = -1;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, 0);
    weir_loop_free(l);
}

/* ---- retry on real time: the backoff suspends the task --------------------------------------- */
/* The first seed from `from` whose first n draws under p all lie in
 * [lo, hi]: real-time tests choose their delays this way. */
static uint64_t seed_with(weir_retry_policy p, int n, int64_t lo, int64_t hi)
{
    for (uint64_t seed = 1;; seed++) {
        p.seed = seed;
        weir_retry r;
        CHECK_EQ(weir_retry_init(&r, &p), 0);
        int ok = 1;
        for (int k = 0; k < n && ok; k++) {
            int64_t d = weir_retry_next_delay(&r);
            ok = d >= lo && d <= hi;
        }
        if (ok)
            return seed;
        CHECK_LT(seed, 100000);
    }
}

static struct {
    _Atomic int stop;
    _Atomic int ticks;
} tick;

static intptr_t ticker(void *arg)
{
    (void)arg;
    while (!atomic_load(&tick.stop)) {
        if (weir_time_sleep(WEIR_MSEC) != 0)
            break;
        atomic_fetch_add(&tick.ticks, 1);
    }
    return 0;
}

typedef struct real_attempts {
    int fail_first; /* attempts that fail before one succeeds */
    int calls;
    int64_t at[8];
    int ticks_at[8];
} real_attempts;

static int64_t flaky(void *arg, int attempt, int64_t deadline)
{
    (void)deadline;
    real_attempts *a = arg;
    CHECK_EQ(attempt, a->calls + 1);
    a->at[a->calls] = weir_time_now();
    a->ticks_at[a->calls] = atomic_load(&tick.ticks);
    a->calls++;
    return a->calls <= a->fail_first ? -ECONNREFUSED : 100 + a->calls;
}

static intptr_t suspends_main(void *arg)
{
    (void)arg;
    weir_retry_policy p = {.max_attempts = 5,
                           .initial_delay_ns = 12 * WEIR_MSEC,
                           .multiplier = 1.0,
                           .max_delay_ns = 12 * WEIR_MSEC};
    p.seed = seed_with(p, 3, 6 * WEIR_MSEC, 12 * WEIR_MSEC);
    weir_retry twin;
    CHECK_EQ(weir_retry_init(&twin, &p), 0);
    atomic_store(&tick.stop, 0);
    atomic_store(&tick.ticks, 0);
    weir_task *tk = test_spawn(ticker, NULL);
    real_attempts a = {.fail_first = 3};
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_retry_run(flaky, &a, &p, weir_time_after_ms(10000)), 104);
    CHECK_LT(weir_time_now() - t0, 2 * WEIR_SEC);
    CHECK_EQ(a.calls, 4);
    for (int k = 0; k < 3; k++) {
        int64_t d = weir_retry_next_delay(&twin);
        CHECK_GE(a.at[k + 1] - a.at[k], d); /* timers never fire early */
        /* The ticker ran on this same loop while this fiber slept. */
        CHECK_GT(a.ticks_at[k + 1], a.ticks_at[k]);
    }
    atomic_store(&tick.stop, 1);
    CHECK_EQ(weir_task_join(tk, NULL, WEIR_FOREVER), 0);
    return 0;
}

TEST(retry_backoff_suspends_the_fiber_not_the_thread)
{
    CHECK_EQ(test_run_main(suspends_main, NULL), 0);
}

/* The stackless form: the frame holds the retry state and a sleep op. */
typedef struct retry_frame {
    weir_co co;
    weir_retry r;
    weir_op op;
    int64_t res, until;
    int calls;
    int rc;
} retry_frame;

static int retry_poll(void *p, intptr_t *out)
{
    retry_frame *f = p;
    WEIR_BEGIN(&f->co);
    for (;;) {
        f->calls++;
        f->res = f->calls < 3 ? -EAGAIN : 42; /* the attempt: fails twice */
        if (f->res >= 0)
            WEIR_RETURN(&f->co, out, f->res);
        f->rc = weir_retry_next(&f->r, (int)f->res, weir_time_after_ms(10000), &f->until);
        if (f->rc < 0)
            WEIR_RETURN(&f->co, out, f->rc);
        weir_time_sleep_start(&f->op, f->until);
        WEIR_AWAIT(&f->co, &f->op, f->res);
        if (f->res < 0)
            WEIR_RETURN(&f->co, out, f->res);
    }
    WEIR_END(&f->co);
}

TEST(retry_from_a_stackless_task)
{
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    retry_frame f = {0};
    weir_retry_policy p = {.max_attempts = 5, .initial_delay_ns = 2 * WEIR_MSEC, .seed = 5};
    CHECK_EQ(weir_retry_init(&f.r, &p), 0);
    int64_t t0 = weir_time_now();
    weir_task *t = weir_task_spawn_stackless(retry_poll, &f, &(weir_spawn_opts){.loop = l});
    CHECK(t != NULL);
    CHECK_EQ(weir_loop_run(l), 0);
    intptr_t r = -1;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, 42);
    CHECK_EQ(f.calls, 3);
    CHECK_EQ(weir_retry_attempts(&f.r), 2);
    CHECK_EQ(weir_retry_last_error(&f.r), -EAGAIN);
    CHECK_LT(weir_time_now() - t0, 2 * WEIR_SEC);
    weir_loop_free(l);
}

/* Long backoffs (a seed whose first delay is over 5 s), cut short. */
static weir_retry_policy long_backoff(void)
{
    weir_retry_policy p = {.max_attempts = 3, .initial_delay_ns = 10 * WEIR_SEC};
    p.seed = seed_with(p, 1, 5 * WEIR_SEC, 10 * WEIR_SEC);
    return p;
}

static intptr_t retry_long(void *arg)
{
    real_attempts *a = arg;
    weir_retry_policy p = long_backoff();
    return weir_retry_run(flaky, a, &p, WEIR_FOREVER);
}

static intptr_t cancel_main(void *arg)
{
    (void)arg;
    real_attempts a = {.fail_first = 100};
    int64_t t0 = weir_time_now();
    weir_task *t = test_spawn(retry_long, &a);
    CHECK_EQ(weir_time_sleep(5 * WEIR_MSEC), 0);
    CHECK_EQ(a.calls, 1); /* in its backoff */
    CHECK_EQ(weir_task_cancel(t), 0);
    intptr_t r = 0;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, -ECANCELED);
    CHECK_EQ(a.calls, 1);
    CHECK_LT(weir_time_now() - t0, 2 * WEIR_SEC);
    return 0;
}

TEST(retry_cancelled_during_backoff)
{
    CHECK_EQ(test_run_main(cancel_main, NULL), 0);
}

static intptr_t deadline_main(void *arg)
{
    (void)arg;
    weir_retry_policy p = long_backoff();
    /* The retry's own deadline: no use sleeping past it, so no sleep. */
    real_attempts a = {.fail_first = 100};
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_retry_run(flaky, &a, &p, weir_time_after_ms(4000)), -ETIMEDOUT);
    CHECK_EQ(a.calls, 1);
    /* (A sleep would last until the deadline, 4 s: the backoff is 5-10 s.) */
    CHECK_LT(weir_time_now() - t0, 3 * WEIR_SEC);

    /* A task deadline ends the sleep itself. */
    real_attempts b = {.fail_first = 100};
    t0 = weir_time_now();
    int64_t old = weir_task_set_deadline(weir_time_after_ms(20));
    CHECK_EQ(weir_retry_run(flaky, &b, &p, WEIR_FOREVER), -ETIMEDOUT);
    weir_task_set_deadline(old);
    CHECK_EQ(b.calls, 1);
    CHECK_GE(weir_time_now() - t0, 20 * WEIR_MSEC);
    CHECK_LT(weir_time_now() - t0, 2 * WEIR_SEC);
    return 0;
}

TEST(retry_deadline_during_backoff)
{
    CHECK_EQ(test_run_main(deadline_main, NULL), 0);
}

/* ---- PID ------------------------------------------------------------------------------------- */
static weir_pid pid_new(double kp, double ki, double kd, double sp, double lo, double hi)
{
    weir_pid pid;
    weir_pid_opts o = {.kp = kp, .ki = ki, .kd = kd, .setpoint = sp, .out_min = lo, .out_max = hi};
    CHECK(weir_pid_opts_check(&o) == NULL);
    CHECK_EQ(weir_pid_init(&pid, &o), 0);
    return pid;
}

static int pid_same(const weir_pid *a, const weir_pid *b)
{
    return weir_pid_integral(a) == weir_pid_integral(b) &&
           weir_pid_output(a) == weir_pid_output(b) && a->prev_meas == b->prev_meas &&
           a->primed == b->primed && a->o.setpoint == b->o.setpoint;
}

/* test.h compares as int64_t; doubles need their own. */
#define CHECK_DBL(a, op, b)                                                                        \
    do {                                                                                           \
        double d__a = (a), d__b = (b);                                                             \
        if (!(d__a op d__b))                                                                       \
            TEST__FAIL("%s %s %s (%.9g vs %.9g)", #a, #op, #b, d__a, d__b);                        \
    } while (0)

#define CHECK_NEAR(a, b, eps)                                                                      \
    do {                                                                                           \
        double n__a = (a), n__b = (b);                                                             \
        if (!(fabs(n__a - n__b) <= (eps)))                                                         \
            TEST__FAIL("%s ~ %s (%.9g vs %.9g)", #a, #b, n__a, n__b);                              \
    } while (0)

TEST(pid_terms)
{
    double u;
    weir_pid p = pid_new(2.0, 0.0, 0.0, 5.0, -INFINITY, INFINITY);
    CHECK_EQ(weir_pid_update(&p, 3.0, 0.1, &u), 0);
    CHECK_NEAR(u, 4.0, 1e-12);
    CHECK_NEAR(weir_pid_output(&p), 4.0, 1e-12);

    /* I: ki * e * dt accumulates. */
    p = pid_new(0.0, 1.0, 0.0, 1.0, -INFINITY, INFINITY);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(weir_pid_update(&p, 0.0, 0.1, &u), 0);
    CHECK_NEAR(u, 1.0, 1e-12);
    CHECK_NEAR(weir_pid_integral(&p), 1.0, 1e-12);

    /* D on the measurement: none on the first step, -kd * dmeas/dt after. */
    p = pid_new(0.0, 0.0, 1.0, 0.0, -INFINITY, INFINITY);
    CHECK_EQ(weir_pid_update(&p, 1.0, 0.5, &u), 0);
    CHECK_NEAR(u, 0.0, 1e-12);
    CHECK_EQ(weir_pid_update(&p, 3.0, 0.5, &u), 0);
    CHECK_NEAR(u, -4.0, 1e-12);
    /* A setpoint change gives no derivative kick. */
    CHECK_EQ(weir_pid_set_setpoint(&p, 100.0), 0);
    CHECK_EQ(weir_pid_update(&p, 3.0, 0.5, &u), 0);
    CHECK_NEAR(u, 0.0, 1e-12);

    /* Reset forgets the integral and the previous measurement. */
    p = pid_new(0.0, 1.0, 1.0, 1.0, -INFINITY, INFINITY);
    CHECK_EQ(weir_pid_update(&p, 0.0, 1.0, &u), 0);
    CHECK_EQ(weir_pid_update(&p, 0.5, 1.0, &u), 0);
    weir_pid_reset(&p);
    CHECK_NEAR(weir_pid_integral(&p), 0.0, 0.0);
    CHECK_NEAR(weir_pid_output(&p), 0.0, 0.0);
    CHECK_EQ(weir_pid_update(&p, 10.0, 1.0, &u), 0); /* no D from 0.5 -> 10 */
    CHECK_NEAR(u, -9.0, 1e-12);
}

/* A first-order plant: dy/dt = (gain * u - y) / tau, Euler-stepped. */
static double plant(double y, double u, double gain, double tau, double dt)
{
    return y + dt * (gain * u - y) / tau;
}

TEST(pid_step_response_settles_on_the_setpoint)
{
    weir_pid p = pid_new(2.0, 1.5, 0.05, 1.0, 0.0, 10.0);
    double y = 0.0, u = 0.0, peak = 0.0;
    int settled_at = -1;
    for (int i = 0; i < 2000; i++) { /* 20 s in 10 ms steps */
        CHECK_EQ(weir_pid_update(&p, y, 0.01, &u), 0);
        CHECK_DBL(u, >=, 0.0);
        CHECK_DBL(u, <=, 10.0);
        y = plant(y, u, 1.0, 1.0, 0.01);
        peak = y > peak ? y : peak;
        if (fabs(y - 1.0) > 0.02)
            settled_at = -1;
        else if (settled_at < 0)
            settled_at = i;
    }
    CHECK_NEAR(y, 1.0, 1e-3);
    CHECK_DBL(peak, <, 1.25);                    /* modest overshoot */
    CHECK(settled_at >= 0 && settled_at < 1000); /* within 2% by 10 s, and stays */
}

TEST(pid_output_is_clamped)
{
    double u;
    weir_pid p = pid_new(100.0, 0.0, 0.0, 5.0, -1.0, 1.0);
    CHECK_EQ(weir_pid_update(&p, 0.0, 0.1, &u), 0);
    CHECK_NEAR(u, 1.0, 0.0);
    CHECK_EQ(weir_pid_update(&p, 10.0, 0.1, &u), 0);
    CHECK_NEAR(u, -1.0, 0.0);
    CHECK_EQ(weir_pid_update(&p, 5.001, 0.1, &u), 0);
    CHECK_NEAR(u, -0.1, 1e-9);
    /* One-sided limit. */
    p = pid_new(1.0, 0.0, 0.0, 0.0, -INFINITY, 0.5);
    CHECK_EQ(weir_pid_update(&p, -3.0, 0.1, &u), 0);
    CHECK_NEAR(u, 0.5, 0.0);
    CHECK_EQ(weir_pid_update(&p, 1e6, 0.1, &u), 0);
    CHECK_NEAR(u, -1e6, 0.0);
}

/* The plant can reach only 0.5 (actuator limited to 1, gain 0.5) while
 * the setpoint asks for 1: the output sits at its limit for 10 s. Then the
 * setpoint drops below the plant's value. The weir controller leaves
 * saturation at once; a naive integrator (the same PI without anti-windup,
 * output clamped) has banked ki * 0.5 * 10 s and stays pinned for seconds. */
TEST(pid_anti_windup)
{
    const double kp = 1.0, ki = 5.0, dt = 0.01;
    weir_pid p = pid_new(kp, ki, 0.0, 1.0, 0.0, 1.0);
    double y = 0.0, u = 0.0;
    double ny = 0.0, nu = 0.0, naive_i = 0.0;
    for (int i = 0; i < 1000; i++) {
        CHECK_EQ(weir_pid_update(&p, y, dt, &u), 0);
        y = plant(y, u, 0.5, 0.5, dt);
        CHECK_DBL(weir_pid_integral(&p), <=, 1.0);
        naive_i += ki * (1.0 - ny) * dt;
        nu = kp * (1.0 - ny) + naive_i;
        nu = nu < 0.0 ? 0.0 : nu > 1.0 ? 1.0 : nu;
        ny = plant(ny, nu, 0.5, 0.5, dt);
    }
    CHECK_NEAR(u, 1.0, 1e-12); /* on the limit, not a step short of it */
    CHECK_NEAR(y, 0.5, 1e-3);
    CHECK_DBL(naive_i, >, 20.0); /* what windup looks like */

    CHECK_EQ(weir_pid_set_setpoint(&p, 0.2), 0);
    int ours = -1, naive = -1;
    for (int i = 0; i < 5000 && (ours < 0 || naive < 0); i++) {
        CHECK_EQ(weir_pid_update(&p, y, dt, &u), 0);
        y = plant(y, u, 0.5, 0.5, dt);
        if (ours < 0 && u < 1.0)
            ours = i;
        naive_i += ki * (0.2 - ny) * dt;
        nu = kp * (0.2 - ny) + naive_i;
        nu = nu < 0.0 ? 0.0 : nu > 1.0 ? 1.0 : nu;
        ny = plant(ny, nu, 0.5, 0.5, dt);
        if (naive < 0 && nu < 1.0)
            naive = i;
    }
    CHECK_EQ(ours, 0);
    CHECK_GT(naive, 500); /* over 5 s pinned */

    /* The same holds at the lower limit. */
    p = pid_new(kp, ki, 0.0, -1.0, 0.0, 1.0);
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(weir_pid_update(&p, 0.0, dt, &u), 0);
    CHECK_NEAR(u, 0.0, 0.0);
    CHECK_DBL(weir_pid_integral(&p), >=, 0.0);
    CHECK_EQ(weir_pid_set_setpoint(&p, 0.5), 0);
    CHECK_EQ(weir_pid_update(&p, 0.0, dt, &u), 0);
    CHECK_DBL(u, >, 0.0);
}

TEST(pid_bad_options_and_inputs)
{
    const weir_pid_opts ok = {.kp = 1, .ki = 1, .kd = 1, .out_min = -1, .out_max = 1};
    weir_pid_opts bad[9];
    for (int i = 0; i < 9; i++)
        bad[i] = ok;
    bad[0].kp = NAN;
    bad[1].ki = INFINITY;
    bad[2].kd = -INFINITY;
    bad[3].setpoint = NAN;
    bad[4].out_min = bad[4].out_max = 0; /* zeroed limits */
    bad[5].out_min = 2;                  /* min > max */
    bad[6].out_min = NAN;
    bad[7].out_max = NAN;
    bad[8].out_min = bad[8].out_max = INFINITY;
    weir_pid p;
    for (int i = 0; i < 9; i++) {
        const char *why = weir_pid_opts_check(&bad[i]);
        CHECK(why != NULL);
        CHECK(strncmp(why, "pid: ", 5) == 0);
        CHECK_EQ(weir_pid_init(&p, &bad[i]), -EINVAL);
    }
    CHECK(strstr(weir_pid_opts_check(&bad[0]), "gains") != NULL);
    CHECK(weir_pid_opts_check(NULL) != NULL);
    CHECK_EQ(weir_pid_init(&p, NULL), -EINVAL);
    /* Negative gains (reverse acting) and infinite limits are fine. */
    weir_pid_opts rev = {.kp = -1, .ki = -0.5, .out_min = -INFINITY, .out_max = INFINITY};
    CHECK(weir_pid_opts_check(&rev) == NULL);

    /* Bad inputs leave the controller as it was. */
    p = pid_new(1.0, 1.0, 1.0, 1.0, -10.0, 10.0);
    double u = 0.0;
    CHECK_EQ(weir_pid_update(&p, 0.0, 0.1, &u), 0);
    weir_pid before = p;
    double out = 12345.0;
    const double dts[] = {0.0, -0.1, NAN, INFINITY};
    for (int i = 0; i < 4; i++)
        CHECK_EQ(weir_pid_update(&p, 0.5, dts[i], &out), -EINVAL);
    CHECK_EQ(weir_pid_update(&p, NAN, 0.1, &out), -EINVAL);
    CHECK_EQ(weir_pid_update(&p, -INFINITY, 0.1, &out), -EINVAL);
    CHECK_EQ(weir_pid_set_setpoint(&p, NAN), -EINVAL);
    CHECK(pid_same(&before, &p));
    CHECK_NEAR(out, 12345.0, 0.0);
    /* Terms that overflow into NaN are refused too. */
    p = pid_new(1e308, 0.0, -1e308, 0.0, -INFINITY, INFINITY);
    CHECK_EQ(weir_pid_update(&p, 0.0, 1.0, &u), 0);
    before = p;
    CHECK_EQ(weir_pid_update(&p, -1e308, 1e-300, &out), -ERANGE);
    CHECK(pid_same(&before, &p));
}

TEST_MAIN()
