/* SPDX-License-Identifier: Apache-2.0 */
/*
 * commit_ids.h - which checkpoints a job has committed, for tests that
 * wait for one (test_join.c, test_async_ctl.c): commit_ids_pass() puts a
 * pass-through operator on a stream whose commit hook raises
 * committed_id to the highest checkpoint id committed.
 */
#ifndef WEIR_TESTS_COMMIT_IDS_H
#define WEIR_TESTS_COMMIT_IDS_H

#include <stdatomic.h>
#include <stdint.h>

#include "weir/stream.h"

static _Atomic long committed_id;

static int commit_ids_on(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    return weir_emit(ctx, in->data, in->len, in->ts);
}

static int commit_ids_commit(weir_ctx *ctx, void *state, uint64_t id)
{
    (void)ctx, (void)state;
    long v = atomic_load(&committed_id);
    while ((long)id > v && !atomic_compare_exchange_weak(&committed_id, &v, (long)id))
        ;
    return 0;
}

/* s, passed on through an operator named "commits" that counts. */
static weir_stream *commit_ids_pass(weir_stream *s)
{
    static const weir_op_def pass = {.process = commit_ids_on, .commit = commit_ids_commit};
    return weir_stream_process(s, "commits", &pass, NULL);
}

#endif
