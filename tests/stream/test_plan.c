/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_plan.c - plans (stream/plan.h) and deploy (stream/deploy.h): the
 * chains, parallelism, key-group ranges and channels a job graph plans
 * to; the plan's frame round trip and its decoder refusing every cut and
 * malformed field; binding a plan to the wrong job; a job run from a
 * decoded plan gives the run's output; state backends chosen by URI; a
 * deploy that names the checkpoint to restore gets that one, and one that
 * names a checkpoint that never completed is refused.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stream/count_ops.h"
#include "stream/lines.h"
#include "stream/deploy.h"
#include "stream/plan.h"
#include "test.h"
#include "test_rt.h"
#include "weir/state.h"

typedef struct gen {
    int64_t n;
} gen;

static int gen_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    int64_t *next = calloc(1, sizeof(*next) + sizeof(gen *));
    *state = next;
    memcpy(next + 1, &arg, sizeof(arg));
    return 0;
}

static int gen_next(weir_ctx *ctx, void *state)
{
    int64_t *next = state;
    gen *g;
    memcpy(&g, next + 1, sizeof(g));
    for (int i = 0; i < 256 && *next < g->n; i++, (*next)++) {
        int e = weir_emit(ctx, next, 8, *next);
        if (e)
            return e;
    }
    return *next >= g->n;
}

static const weir_source_def gen_def = {
    .open = gen_open, .next = gen_next, .close = free, .max_out_of_orderness = 0};

/* src (1) -> to_one -> key_by -> count (reduce) -> to_line -> collect */
static weir_job *count_job(const char *name, gen *g, weir_collector *c, const char *reduce)
{
    weir_job *j = weir_job_new(name);
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, g), 1);
    s = weir_stream_map(s, "to_one", to_one, NULL);
    s = weir_stream_reduce(weir_stream_key_by(s, key16, NULL), reduce, count16, NULL);
    s = weir_stream_map(s, "to_line", to_line, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_STR(weir_job_error(j), "");
    return j;
}

static uint8_t *encode(const weir__plan *p, size_t *len)
{
    weir_frame_builder fb;
    CHECK_EQ(weir__plan_encode(p, &fb), 0);
    uint8_t *b = weir_frame_builder_take(&fb, len);
    CHECK(b != NULL);
    return b;
}

TEST(a_job_plans_to_chains_ranges_and_channels)
{
    gen g = {100};
    weir_collector *c = weir_collector_new();
    weir_job *j = count_job("plan", &g, c, "count");
    weir__plan *p;
    char why[256];
    CHECK_EQ(weir__plan_make(j, 3, 4, &p, why, sizeof(why)), 0);
    CHECK_EQ(p->nops, 5u);
    CHECK_EQ(p->nchains, 2u); /* [src to_one] [count to_line out] */
    CHECK_EQ(p->chains[0].nops, 2u);
    CHECK_EQ(p->chains[0].par, 1u);
    CHECK_EQ(p->chains[1].nops, 3u);
    CHECK_EQ(p->chains[1].par, 3u);
    CHECK_EQ(p->ops[4].chain, 1u);
    CHECK_EQ(p->ops[4].pos, 2u);
    CHECK_EQ(p->chains[0].kg_end[0], 0u); /* not keyed */
    uint32_t next = 0;
    for (int s = 0; s < 3; s++) {
        CHECK_EQ(p->chains[1].kg_first[s], next);
        next = p->chains[1].kg_end[s];
    }
    CHECK_EQ(next, (uint32_t)WEIR_KEY_GROUPS);
    CHECK_EQ(p->nchannels, 3u); /* one producer, three consumers */
    CHECK_EQ(p->nsubtasks, 4u);
    for (uint32_t i = 0; i < 3; i++) {
        CHECK_EQ(p->channels[i].id, i);
        CHECK_EQ(p->channels[i].to_sub, i);
        CHECK_EQ(p->channels[i].to_input, 0u);
    }
    weir__plan_free(p);
    /* A forward edge across parallelisms is refused with the names. */
    weir_job *bad = weir_job_new("bad");
    weir_stream *s = weir_stream_parallelism(weir_job_source(bad, "a", &gen_def, &g), 2);
    s = weir_stream_parallelism(weir_stream_map(s, "b", to_one, NULL), 3);
    CHECK_EQ(weir_stream_print(s, "p"), 0);
    CHECK_EQ(weir__plan_make(bad, 1, 4, &p, why, sizeof(why)), -EINVAL);
    CHECK_HAS(why, "forward edge \"a\" -> \"b\" joins parallelism 2 to 3");
    weir_job_free(bad);
    weir_job_free(j);
    weir_collector_free(c);
}

TEST(the_plan_frame_round_trips_and_every_cut_is_refused)
{
    gen g = {100};
    weir_collector *c = weir_collector_new();
    weir_job *j = count_job("frames", &g, c, "count");
    weir__plan *p, *q;
    char why[256];
    CHECK_EQ(weir__plan_make(j, 2, 3, &p, why, sizeof(why)), 0);
    size_t len, len2;
    uint8_t *b = encode(p, &len);
    CHECK_EQ(weir__plan_decode(b + 4, len - 4, &q, why, sizeof(why)), 0);
    /* WEIR_PLAN_SEED=FILE writes the payload: fuzz/corpus/plan's seed. */
    const char *seed = getenv("WEIR_PLAN_SEED");
    FILE *f = seed ? fopen(seed, "wb") : NULL;
    if (f) {
        fwrite(b + 4, 1, len - 4, f);
        fclose(f);
    }
    uint8_t *b2 = encode(q, &len2);
    CHECK_EQ(len2, len);
    CHECK(memcmp(b, b2, len) == 0);
    CHECK_EQ(q->nchannels, p->nchannels);
    CHECK_EQ(q->credits, 3u);
    CHECK_STR(q->job, "frames");
    weir__plan_free(q);
    /* Every cut short frame is refused, naming a reason. */
    for (size_t cut = 0; cut < len - 4; cut++) {
        why[0] = '\0';
        CHECK_EQ(weir__plan_decode(b + 4, cut, &q, why, sizeof(why)), -EBADMSG);
        CHECK(q == NULL);
        CHECK(why[0] != '\0');
    }
    /* A byte more is refused too. */
    uint8_t *longer = malloc(len + 1);
    memcpy(longer, b, len);
    longer[len] = 0;
    CHECK_EQ(weir__plan_decode(longer + 4, len - 3, &q, why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, "after its end");
    /* Any single byte changed: refused cleanly or a plan that still holds
     * together (a name's letter); never a crash or a leak (ASan). */
    for (size_t i = 4; i < len; i++)
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(longer, b, len);
            longer[i] ^= (uint8_t)(1u << bit);
            int e = weir__plan_decode(longer + 4, len - 4, &q, why, sizeof(why));
            CHECK(e == 0 || e == -EBADMSG);
            weir__plan_free(e == 0 ? q : NULL);
        }
    free(longer);
    weir__plan_free(p);
    free(b);
    free(b2);
    weir_job_free(j);
    weir_collector_free(c);
}

/* A plan with one field changed, re-encoded: decode's error names it. */
static void refused(weir__plan *p, const char *needle)
{
    size_t len;
    uint8_t *b = encode(p, &len);
    weir__plan *q;
    char why[256] = "";
    CHECK_EQ(weir__plan_decode(b + 4, len - 4, &q, why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, needle);
    free(b);
}

TEST(the_decoder_refuses_plans_that_do_not_hold_together)
{
    gen g = {100};
    weir_collector *c = weir_collector_new();
    weir_job *j = count_job("checks", &g, c, "count");
    weir__plan *p;
    char why[256];
    CHECK_EQ(weir__plan_make(j, 2, 4, &p, why, sizeof(why)), 0);
    p->ngroups = 64;
    refused(p, "key groups");
    p->ngroups = WEIR_KEY_GROUPS;
    p->chains[1].kg_end[0]++;
    refused(p, "has key groups");
    p->chains[1].kg_end[0]--;
    p->ops[2].par = 3;
    refused(p, "parallelism"); /* against its chain / forward edge */
    p->ops[2].par = 2;
    p->ops[1].inputs[0].from = 3; /* a later operator */
    refused(p, "input 0 is malformed");
    p->ops[1].inputs[0].from = 0;
    p->ops[3].pos = 0;
    refused(p, "not where its chain says");
    p->ops[3].pos = 1;
    p->credits = 0;
    refused(p, "credits");
    p->credits = 4;
    char *name = p->ops[4].name;
    p->ops[4].name = "src";
    refused(p, "two operators are named \"src\"");
    p->ops[4].name = name;
    weir__plan_free(p);
    weir_job_free(j);
    weir_collector_free(c);
}

static weir_collector *ref_c, *plan_c;

static intptr_t run_both(void *arg)
{
    (void)arg;
    gen g = {5000};
    ref_c = weir_collector_new();
    plan_c = weir_collector_new();
    weir_job *j = count_job("ref", &g, ref_c, "count");
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.parallelism = 2}), 0);
    weir_job_free(j);
    /* The same job planned, shipped as bytes, decoded and bound to a job
     * graph built again (as a worker would from the plugin). */
    weir_job *a = count_job("plan", &g, ref_c, "count");
    weir__plan *p, *q;
    char why[256];
    CHECK_EQ(weir__plan_make(a, 2, 4, &p, why, sizeof(why)), 0);
    size_t len;
    uint8_t *b = encode(p, &len);
    CHECK_EQ(weir__plan_decode(b + 4, len - 4, &q, why, sizeof(why)), 0);
    weir_job *w = count_job("plan", &g, plan_c, "count");
    CHECK_EQ(weir__job_run_plan(w, q, &(weir_run_opts){.parallelism = 2}, NULL), 0);
    /* Another version of the job (a renamed operator) is refused. */
    weir_collector *other_c = weir_collector_new();
    weir_job *other = count_job("plan", &g, other_c, "count2");
    CHECK_EQ(weir__job_run_plan(other, q, NULL, NULL), -EINVAL);
    CHECK_HAS(weir_job_error(other), "another version of the job");
    weir_job_free(other);
    weir_collector_free(other_c);
    weir__plan_free(p);
    weir__plan_free(q);
    free(b);
    weir_job_free(a);
    weir_job_free(w);
    return 0;
}

/* The collector's lines, sorted, joined. */
static char *lines(const weir_collector *c)
{
    char *text = collected(c), *out = sorted(text);
    free(text);
    return out;
}

TEST(a_job_run_from_a_decoded_plan_gives_the_same_output)
{
    CHECK_EQ(test_run_on_rt(2, run_both, NULL), 0);
    CHECK_EQ(weir_collector_count(plan_c), 5000u);
    char *a = lines(ref_c), *b = lines(plan_c);
    CHECK_STR(a, b);
    free(a);
    free(b);
    weir_collector_free(ref_c);
    weir_collector_free(plan_c);
}

static _Atomic int made;

static weir_state_backend *counting(void *arg, const char *uri, int ngroups, int first, int end)
{
    (void)arg;
    if (strcmp(uri, "counting:") != 0) {
        errno = EINVAL;
        return NULL;
    }
    atomic_fetch_add(&made, 1);
    return weir_state_memory_new(ngroups, first, end);
}

static intptr_t run_uri(void *arg)
{
    gen g = {300};
    weir_collector *c = weir_collector_new();
    weir_job *j = count_job("uri", &g, c, "count");
    int e = weir_job_run(j, &(weir_run_opts){.parallelism = 3, .state_backend = arg});
    if (e)
        fprintf(stderr, "error: %s\n", weir_job_error(j));
    else
        CHECK_EQ(weir_collector_count(c), 300u);
    weir_job_free(j);
    weir_collector_free(c);
    return e;
}

TEST(state_backends_are_chosen_by_uri)
{
    CHECK_EQ(weir_state_backend_register("counting", counting, NULL), 0);
    CHECK_EQ(weir_state_backend_register("counting", counting, NULL), -EEXIST);
    CHECK_EQ(weir_state_backend_register("bad:name", counting, NULL), -EINVAL);
    CHECK_EQ(test_run_on_rt(2, run_uri, "counting:"), 0);
    CHECK_EQ(atomic_load(&made), 3); /* one per keyed subtask */
    CHECK_EQ(test_run_on_rt(2, run_uri, "memory:"), 0);
    CHECK_EQ(test_run_on_rt(2, run_uri, NULL), 0);
    CHECK_EQ(test_run_on_rt(2, run_uri, "nosuch:x"), -ENOENT);
    CHECK_EQ(test_run_on_rt(2, run_uri, "counting:extra"), -EINVAL);
    CHECK_EQ(test_run_on_rt(2, run_uri, "noscheme"), -EINVAL);
    weir_state_backend *b;
    CHECK_EQ(weir_state_backend_open("nosuch:x", WEIR_KEY_GROUPS, 0, 1, &b), -ENOENT);
    CHECK(b == NULL);
}

/* ---- the restore point a deploy names ---- */
/* Ends once the run has completed three checkpoints (or gives up). */
static int ckpts_next(weir_ctx *ctx, void *state)
{
    int64_t *n = state;
    int64_t v = (*n)++;
    int e = weir_emit(ctx, &v, 8, v);
    if (e)
        return e;
    if (weir_ctx_completed(ctx) >= weir_ctx_restored(ctx) + 3 || *n > 2000000)
        return 1;
    return weir_time_sleep(WEIR_MSEC) < 0 ? -ECANCELED : 0;
}

static int ckpts_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = calloc(1, sizeof(int64_t));
    return *state ? 0 : -ENOMEM;
}

typedef struct restore_case {
    const char *dir;
    int restore;
    uint64_t restore_id;
    int err;
    weir_ckpt_stats ck;
    char error[300];
} restore_case;

static intptr_t run_restore_case(void *arg)
{
    restore_case *rc = arg;
    weir_job *j = weir_job_new("restore-id");
    weir_source_def sd = {.open = ckpts_open, .next = ckpts_next, .close = free};
    weir_stream *s = weir_stream_map(weir_job_source(j, "src", &sd, NULL), "to_one", to_one, NULL);
    s = weir_stream_reduce(weir_stream_key_by(s, key16, NULL), "count", count16, NULL);
    weir_collector *c = weir_collector_new();
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    weir__plan *p;
    char why[256];
    CHECK_EQ(weir__plan_make(j, 1, 4, &p, why, sizeof(why)), 0);
    weir__deploy d = {.restore_id = rc->restore_id};
    weir_run_opts o = {.checkpoint_dir = rc->dir,
                       .checkpoint_interval_ms = 20,
                       .restore = rc->restore,
                       .retain = 10};
    rc->err = weir__job_run_plan(j, p, &o, &d);
    snprintf(rc->error, sizeof(rc->error), "%s", weir_job_error(j));
    weir_job_ckpt_stats(j, &rc->ck);
    weir__plan_free(p);
    weir_job_free(j);
    weir_collector_free(c);
    return 0;
}

TEST(a_deploy_names_the_checkpoint_to_restore)
{
    char dir[128], cmd[200];
    snprintf(dir, sizeof(dir), "/tmp/weir-restore-id-%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
    restore_case first = {.dir = dir};
    test_run_on_rt(2, run_restore_case, &first);
    CHECK_EQ(first.err, 0);
    CHECK_GE(first.ck.latest, 3);
    /* Not the latest: the one the deploy names. */
    restore_case older = {.dir = dir, .restore = 1, .restore_id = first.ck.latest - 1};
    test_run_on_rt(2, run_restore_case, &older);
    CHECK_EQ(older.err, 0);
    CHECK_EQ(older.ck.restored, first.ck.latest - 1);
    CHECK_GT(older.ck.latest, first.ck.latest); /* its own ids come after every one used */
    /* 0: the latest completed. */
    restore_case latest = {.dir = dir, .restore = 1};
    test_run_on_rt(2, run_restore_case, &latest);
    CHECK_EQ(latest.err, 0);
    CHECK_EQ(latest.ck.restored, older.ck.latest);
    /* One that never completed is refused, naming it. */
    restore_case never = {.dir = dir, .restore = 1, .restore_id = 1000000};
    test_run_on_rt(2, run_restore_case, &never);
    CHECK_EQ(never.err, -ENOENT);
    CHECK(strstr(never.error, "checkpoint 1000000") != NULL);
    CHECK(strstr(never.error, "never completed") != NULL);
    CHECK_EQ(system(cmd), 0);
}

TEST_MAIN()
