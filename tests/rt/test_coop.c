/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_coop.c - fairness: a task whose operations all complete at once is
 * still made to yield (the cooperative budget), for fibers and stackless
 * tasks; and the loop statistics count what happened.
 */
#include <errno.h>

#include "test.h"
#include "test_rt.h"
#include "weir/rt.h"

enum { HOGS_OPS = 10000 };
static long ticks;  /* advanced by the ticker between the hog's ops */
static int hog_done;

/* Never suspends for real: a sleep until a past instant completes at once. */
static intptr_t hog(void *arg)
{
    (void)arg;
    long seen_min = ticks;
    for (int i = 0; i < HOGS_OPS; i++)
        CHECK_EQ(weir_time_sleep_until(0), 0);
    hog_done = 1;
    return ticks - seen_min; /* how often the ticker ran meanwhile */
}

static intptr_t ticker(void *arg)
{
    (void)arg;
    while (!hog_done) {
        ticks++;
        CHECK_EQ(weir_task_yield(), 0);
    }
    return 0;
}

static intptr_t fiber_main(void *arg)
{
    (void)arg;
    ticks = 0;
    hog_done = 0;
    weir_task *h = test_spawn(hog, NULL);
    weir_task *tk = test_spawn(ticker, NULL);
    intptr_t interleaved = 0;
    CHECK_EQ(weir_task_join(h, &interleaved, WEIR_FOREVER), 0);
    CHECK_EQ(weir_task_join(tk, NULL, WEIR_FOREVER), 0);
    /* One forced yield per WEIR__COOP_BUDGET (128) immediate results. */
    CHECK_GE(interleaved, HOGS_OPS / 128 - 2);
    weir_loop_stats st;
    CHECK_EQ(weir_loop_stats_get(weir_loop_current(), &st), 0);
    CHECK_GE(st.coop_yields, HOGS_OPS / 128 - 2);
    CHECK_GE(st.polls, (uint64_t)interleaved);
    CHECK_GE(st.tasks_alive, 1); /* this one */
    return 0;
}

TEST(fiber_hog_is_made_to_yield)
{
    CHECK_EQ(test_run_main(fiber_main, NULL), 0);
}

struct sl_hog {
    weir_co co;
    weir_op op;
    int i;
    int64_t res;
    long start_ticks;
};

static int sl_hog_poll(void *p, intptr_t *out)
{
    struct sl_hog *f = p;
    WEIR_BEGIN(&f->co);
    f->start_ticks = ticks;
    for (f->i = 0; f->i < HOGS_OPS; f->i++) {
        weir_time_sleep_start(&f->op, 0);
        WEIR_AWAIT(&f->co, &f->op, f->res);
        CHECK_EQ(f->res, 0);
    }
    hog_done = 1;
    WEIR_RETURN(&f->co, out, ticks - f->start_ticks);
    WEIR_END(&f->co);
}

static intptr_t stackless_main(void *arg)
{
    (void)arg;
    ticks = 0;
    hog_done = 0;
    struct sl_hog f = {0};
    weir_task *h = weir_task_spawn_stackless(sl_hog_poll, &f, NULL);
    weir_task *tk = test_spawn(ticker, NULL);
    intptr_t interleaved = 0;
    CHECK_EQ(weir_task_join(h, &interleaved, WEIR_FOREVER), 0);
    CHECK_EQ(weir_task_join(tk, NULL, WEIR_FOREVER), 0);
    CHECK_GE(interleaved, HOGS_OPS / 128 - 2);
    return 0;
}

TEST(stackless_hog_is_made_to_yield)
{
    CHECK_EQ(test_run_main(stackless_main, NULL), 0);
}

TEST(stats_arguments)
{
    weir_loop_stats st;
    CHECK_EQ(weir_loop_stats_get(NULL, &st), -EINVAL);
    weir_loop *l = weir_loop_new(NULL);
    CHECK_EQ(weir_loop_stats_get(l, NULL), -EINVAL);
    CHECK_EQ(weir_loop_stats_get(l, &st), 0);
    CHECK_EQ(st.polls, 0);
    CHECK_EQ(st.tasks_alive, 0);
    weir_loop_free(l);
}

TEST_MAIN()
