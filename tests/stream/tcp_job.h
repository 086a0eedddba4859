/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcp_job.h - the job the TCP channel tests (test_channel_tcp.c,
 * test_channel_tls.c) split between two nets: src (2 subtasks, each N
 * int64 records, or endless when per_sub < 0) -> to_one -> key_by ->
 * count -> to_line -> collect (count_ops.h), and by_subtask, which puts
 * subtask s of every chain in process s % 2, so channels cross both ways.
 */
#ifndef WEIR_TESTS_TCP_JOB_H
#define WEIR_TESTS_TCP_JOB_H

#include <stdint.h>
#include <stdlib.h>

#include "stream/count_ops.h"
#include "stream/lines.h"
#include "test.h"
#include "weir/stream.h"

#define N 20000             /* records per source subtask */
static int64_t per_sub = N; /* < 0: the sources never end (a run ends by its failure) */

static int gen_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)arg;
    int64_t *next = calloc(1, sizeof(*next));
    *next = (int64_t)weir_ctx_subtask(ctx) * N;
    *state = next;
    return 0;
}

static int gen_next(weir_ctx *ctx, void *state)
{
    int64_t *next = state;
    int64_t end = per_sub < 0 ? INT64_MAX : ((int64_t)weir_ctx_subtask(ctx) + 1) * N;
    for (int i = 0; i < 256 && *next < end; i++, (*next)++) {
        int e = weir_emit(ctx, next, 8, *next);
        if (e)
            return e;
    }
    return *next >= end;
}

static const weir_source_def gen_def = {.open = gen_open, .next = gen_next, .close = free};

/* The job, named name, collecting into c. */
static weir_job *count_job(const char *name, weir_collector *c)
{
    weir_job *j = weir_job_new(name);
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, NULL), 2);
    s = weir_stream_map(s, "to_one", to_one, NULL);
    s = weir_stream_reduce(weir_stream_key_by(s, key16, NULL), "count", count16, NULL);
    s = weir_stream_map(s, "to_line", to_line, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    return j;
}

static int by_subtask(void *arg, uint32_t chain, uint32_t sub)
{
    (void)arg, (void)chain;
    return (int)(sub % 2);
}

#endif
