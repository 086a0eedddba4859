/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lookup_job.c - stream enrichment with the async lookup operator
 * (weir_stream_lookup, docs/stream.md "Async lookups") as a job plugin.
 *
 *     lookup_service PORTFILE &          (examples/lookup_service.c)
 *     weir run build/release/examples/lookup_job.so [--parallelism N] -- \
 *         http://127.0.0.1:$(cat PORTFILE) [COUNT] [ordered]
 *
 * A source emits the user ids 0..COUNT-1 (default 1000) as "click" records;
 * the lookup operator asks the service for each user (GET BASE/user/<id>),
 * up to 32 lookups in flight per subtask, retried up to 3 times with
 * backoff, behind a circuit breaker; each answer becomes one line
 * "<id> <answer>" (a lookup that finally failed: "<id> unknown <error>",
 * the result function's choice - the job goes on). With "ordered" the
 * lines of each subtask come in input order, else as answers come.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/base.h"
#include "weir/job.h"

typedef struct cfg {
    const char *base;
    int64_t count;
} cfg;

static cfg conf;

/* ---- source: user ids ---------------------------------------------------------------- */
typedef struct ids {
    int64_t next;
} ids;

static int ids_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    ids *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    *state = s;
    return 0;
}

static int ids_next(weir_ctx *ctx, void *state)
{
    ids *s = state;
    for (int i = 0; i < 64 && s->next < conf.count; i++, s->next++) {
        int e = weir_emit(ctx, &s->next, sizeof(s->next), s->next);
        if (e)
            return e;
    }
    return s->next >= conf.count;
}

static const weir_source_def ids_def = {
    .open = ids_open, .next = ids_next, .close = free, .max_out_of_orderness = 0};

/* ---- the lookup ------------------------------------------------------------------------ */
static int user_request(weir_ctx *ctx, const weir_rec *in, weir_lookup_req *req, void *arg)
{
    (void)ctx;
    const cfg *c = arg;
    int64_t id;
    memcpy(&id, in->data, sizeof(id));
    snprintf(req->buf, sizeof(req->buf), "%s/user/%" PRId64, c->base, id);
    req->url = req->buf;
    return 0;
}

static int user_result(weir_ctx *ctx, const weir_rec *in, const weir_lookup_resp *resp, void *arg)
{
    (void)arg;
    int64_t id;
    memcpy(&id, in->data, sizeof(id));
    char line[256];
    int n = resp->err || resp->status != 200
                ? snprintf(line, sizeof(line), "%" PRId64 " unknown %s", id,
                           resp->err ? weir_strerror(resp->err) : "not found")
                : snprintf(line, sizeof(line), "%" PRId64 " %s", id, resp->body);
    return weir_emit(ctx, line, (size_t)n, in->ts);
}

static int print_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx, (void)state;
    printf("%.*s\n", (int)in->len, (const char *)in->data);
    return 0;
}

static const weir_op_def print_def = {.process = print_process};

static int define(weir_job *j, int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "lookup: BASE_URL [COUNT] [ordered]\n");
        return -EINVAL;
    }
    conf.base = argv[1];
    conf.count = argc > 2 ? strtoll(argv[2], NULL, 10) : 1000;
    weir_lookup_def def = {
        .request = user_request,
        .result = user_result,
        .ordered = argc > 3 && strcmp(argv[3], "ordered") == 0,
        .capacity = 32,
        .timeout_ms = 2000,
        .retry = {.max_attempts = 3, .initial_delay_ns = 10 * WEIR_MSEC},
        .breaker = {.failure_threshold = 20, .cooldown_ns = WEIR_SEC},
    };
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "clicks", &ids_def, NULL), 1);
    s = weir_stream_rebalance(s);
    s = weir_stream_lookup(s, "users", &def, &conf);
    return weir_stream_sink(s, "print", &print_def, NULL) < 0 ? -EINVAL : 0;
}

WEIR_REGISTER_JOB("lookup", "1.0", define);
