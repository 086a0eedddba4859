/* SPDX-License-Identifier: Apache-2.0 */
/* ootjob.c - a job built out of tree (tests/integration/install_job.sh):
 * counts N records (job argument, default 100) and prints "ootjob <count>". */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <weir/job.h>

static int64_t n_records = 100;

static int gen_next(weir_ctx *ctx, void *state)
{
    int64_t *next = state;
    while (*next < n_records) {
        int e = weir_emit(ctx, next, sizeof(*next), *next);
        (*next)++;
        if (e)
            return e;
    }
    return 1;
}

static int gen_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    (void)arg;
    return (*state = calloc(1, sizeof(int64_t))) ? 0 : -ENOMEM;
}

static const weir_source_def gen = {
    .open = gen_open, .next = gen_next, .close = free, .max_out_of_orderness = 0};

static int count_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx;
    (void)in;
    ++*(int64_t *)state;
    return 0;
}

static int count_finish(weir_ctx *ctx, void *state)
{
    (void)ctx;
    printf("ootjob %" PRId64 "\n", *(int64_t *)state);
    return 0;
}

static const weir_op_def counter = {
    .open = gen_open, .process = count_process, .finish = count_finish, .close = free};

static int define(weir_job *j, int argc, char **argv)
{
    if (argc > 1)
        n_records = strtoll(argv[1], NULL, 10);
    weir_stream *s = weir_job_source(j, "gen", &gen, NULL);
    return weir_stream_sink(s, "count", &counter, NULL);
}

WEIR_REGISTER_JOB("ootjob", "0.1", define);
