/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_stream_alloc.c - every allocation of the stream engine failing in
 * turn (base/alloc.h's countdown): building a job graph, planning it,
 * deploying it (subtasks, channels, state backends), and running it (batches,
 * keyed state, timers, windows). Each failure ends in an error - a NULL
 * stream, a refused build, or a run that returns -ENOMEM with the job's
 * error set - never a crash, and nothing leaks (the ASan build's leak check).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "stream/count_ops.h"
#include "test.h"
#include "test_rt.h"

#define N 300

static int gen_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    int64_t *next = calloc(1, sizeof(*next));
    if (!next)
        return -ENOMEM;
    *state = next;
    return 0;
}

static int gen_next(weir_ctx *ctx, void *state)
{
    int64_t *next = state;
    for (int i = 0; i < 64 && *next < N; i++, (*next)++) {
        int e = weir_emit(ctx, next, 8, *next);
        if (e)
            return e;
    }
    return *next >= N;
}

static const weir_source_def gen_def = {
    .open = gen_open, .next = gen_next, .close = free, .max_out_of_orderness = 0};

/* src -> to_one -> key_by -> count (reduce) -> to_line -> collect, and the
 * keyed stream also into a tumbling window -> collect. */
static int build(weir_job **out, weir_collector *c)
{
    weir_job *j = weir_job_new("alloc");
    *out = j;
    if (!j)
        return -ENOMEM;
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, NULL), 1);
    s = weir_stream_map(s, "to_one", to_one, NULL);
    weir_stream *k = weir_stream_key_by(s, key16, NULL);
    weir_stream *r = weir_stream_reduce(k, "count", count16, NULL);
    r = weir_stream_map(r, "to_line", to_line, NULL);
    int e = weir_stream_collect(r, "out", c);
    weir_window w = {.kind = WEIR_WINDOW_TUMBLING, .size = 50};
    weir_stream *win = weir_stream_window(k, "win", &w, count16, NULL);
    int e2 = weir_stream_collect(win, "wout", c);
    if (e || e2 || weir_job_error(j)[0])
        return -ENOMEM;
    return 0;
}

typedef struct outcome {
    int built, ran;
    size_t records;
    char error[256];
} outcome;

static intptr_t attempt(void *arg)
{
    outcome *o = arg;
    weir_collector *c = weir_collector_new();
    if (!c)
        return 0;
    weir_job *j;
    o->built = build(&j, c) == 0;
    if (j && o->built) {
        o->ran = weir_job_run(j, &(weir_run_opts){.parallelism = 2});
        snprintf(o->error, sizeof(o->error), "%s", weir_job_error(j));
        o->records = weir_collector_count(c);
    }
    weir_job_free(j);
    weir_collector_free(c);
    return 0;
}

TEST(every_allocation_of_a_job_fails_in_turn)
{
    outcome ok = {0};
    weir__alloc_fail_after(LONG_MAX);
    CHECK_EQ(test_run_on_rt(2, attempt, &ok), 0);
    long total = weir__alloc_fail_after(-1);
    CHECK(ok.built);
    CHECK_EQ(ok.ran, 0);
    CHECK_GT(total, 50);
    printf("a run makes %ld engine allocations\n", total);
    int failed_runs = 0;
    for (long n = 0; n < total + 10; n++) {
        outcome o = {0};
        weir__alloc_fail_after(n);
        intptr_t r = test_run_on_rt(2, attempt, &o);
        weir__alloc_fail_after(-1);
        CHECK_EQ(r, 0);
        if (!o.built)
            continue; /* refused while building: the graph's error */
        if (o.ran == 0)
            continue; /* the failure hit an allocation the run did not need (more threads, fewer
                         batches) */
        failed_runs++;
        CHECK(o.ran < 0);
        CHECK(o.error[0] != '\0'); /* the job says what failed */
    }
    printf("%d runs failed with an error, the rest while building or not at all\n", failed_runs);
    CHECK_GT(failed_runs, total / 2);
}

TEST_MAIN()
