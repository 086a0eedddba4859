/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_placement.c - task placement (cluster/placement.h) on plans the
 * real planner makes: each instance whole on one worker, round robin from
 * the (i mod nw)-th worker in sorted id order and cyclically on when it is
 * full; the same placement whatever order the workers are given in; an
 * instance larger than any worker's room split over free slots in sorted
 * order while the others stay whole; chains of different parallelism
 * grouped by index; too little room refused naming need and free, with
 * nothing placed; bad arguments; every allocation failure. And the trap
 * the old greedy first-fit fell into: in plan (chain-major) order it
 * scatters every pipeline, reproduced on the cluster the design notes
 * measured (3 workers, parallelism 12: 16 of 24 forward channels remote)
 * against 0 placed by instance.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cluster/placement.h"
#include "stream/plan.h"
#include "test.h"

static int gen_next(weir_ctx *ctx, void *state)
{
    (void)ctx;
    (void)state;
    return 1;
}

static const weir_source_def gen_def = {.next = gen_next, .max_out_of_orderness = -1};

static int pass(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    return weir_emit(ctx, in->data, in->len, in->ts);
}

/* Three chains joined by forward edges only, each of parallelism par:
 * [src a] -> [b] -> [c out]. A side output is a forward edge that does not
 * chain, so the pipeline stays linear (as a query's source -> bridge ->
 * projection). */
static weir__plan *pipeline(int par)
{
    weir_job *j = weir_job_new("pipeline");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, NULL), par);
    s = weir_stream_map(s, "a", pass, NULL);
    s = weir_stream_map(weir_stream_side(s), "b", pass, NULL);
    s = weir_stream_map(weir_stream_side(s), "c", pass, NULL);
    CHECK_EQ(weir_stream_print(s, "out"), 0);
    CHECK_STR(weir_job_error(j), "");
    weir__plan *p;
    char why[256];
    CHECK_EQ(weir__plan_make(j, par, 4, &p, why, sizeof(why)), 0);
    weir_job_free(j);
    CHECK_EQ(p->nchains, 3u);
    CHECK_EQ(p->nsubtasks, 3u * (uint32_t)par);
    CHECK_EQ(p->nchannels, 2u * (uint32_t)par);
    for (uint32_t i = 0; i < p->nchannels; i++)
        CHECK_EQ(p->channels[i].from_sub, p->channels[i].to_sub); /* forward */
    return p;
}

/* [src] (parallelism 1) -> rebalance -> [m out] (parallelism par). */
static weir__plan *fan_out(int par)
{
    weir_job *j = weir_job_new("fan_out");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, NULL), 1);
    s = weir_stream_parallelism(weir_stream_map(weir_stream_rebalance(s), "m", pass, NULL), par);
    CHECK_EQ(weir_stream_print(s, "out"), 0);
    weir__plan *p;
    char why[256];
    CHECK_EQ(weir__plan_make(j, par, 4, &p, why, sizeof(why)), 0);
    weir_job_free(j);
    CHECK_EQ(p->nchains, 2u);
    CHECK_EQ(p->chains[0].par, 1u);
    CHECK_EQ(p->chains[1].par, (uint32_t)par);
    return p;
}

/* The worker id subtask (chain c, sub s) went to. */
static const char *at(const weir__plan *p, const weir__place_worker *w, const uint32_t *out,
                      uint32_t c, uint32_t s)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < c; i++)
        k += p->chains[i].par;
    CHECK_LT(s, p->chains[c].par);
    return w[out[k + s]].id;
}

/* Placement is within every worker's room, and returns 0. */
static void place_ok(const weir__plan *p, const weir__place_worker *w, size_t nw, uint32_t *out)
{
    char msg[256] = "x";
    CHECK_EQ(weir__place(p, w, nw, out, msg, sizeof(msg)), 0);
    CHECK_STR(msg, "");
    for (size_t i = 0; i < nw; i++) {
        uint32_t used = 0;
        for (uint32_t k = 0; k < p->nsubtasks; k++)
            used += out[k] == i;
        CHECK_LE(used, w[i].free_slots);
    }
}

/* The old behaviour, faithfully: one subtask at a time in plan order, each
 * to the first worker (sorted order, so only the order of subtasks
 * differs) with a slot left. */
static void naive(const weir__plan *p, const weir__place_worker *sorted, size_t nw, uint32_t *out)
{
    uint32_t room[16];
    CHECK_LE(nw, 16u);
    for (size_t i = 0; i < nw; i++)
        room[i] = sorted[i].free_slots;
    for (uint32_t k = 0; k < p->nsubtasks; k++) {
        size_t i = 0;
        while (i < nw && room[i] == 0)
            i++;
        CHECK_LT(i, nw);
        room[i]--;
        out[k] = (uint32_t)i;
    }
}

/* Instance i (sub i of every chain) is on one worker. */
static int whole(const weir__plan *p, const weir__place_worker *w, const uint32_t *out, uint32_t i)
{
    for (uint32_t c = 1; c < p->nchains; c++)
        if (strcmp(at(p, w, out, c, i), at(p, w, out, 0, i)) != 0)
            return 0;
    return 1;
}

TEST(instances_go_whole_round_robin_in_sorted_id_order)
{
    weir__plan *p = pipeline(4);
    /* Given out of order: a, b, c is the order visited. */
    weir__place_worker w[] = {{"w-c", 10}, {"w-a", 10}, {"w-b", 10}};
    uint32_t out[12];
    place_ok(p, w, 3, out);
    const char *want[] = {"w-a", "w-b", "w-c", "w-a"};
    for (uint32_t i = 0; i < 4; i++)
        for (uint32_t c = 0; c < 3; c++)
            CHECK_STR(at(p, w, out, c, i), want[i]);
    CHECK_EQ(weir__place_count_remote(p, out), 0);
    /* Every order of the same workers, and a second call, place alike. */
    static const int perm[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                   {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int q = 0; q < 6; q++)
        for (int again = 0; again < 2; again++) {
            weir__place_worker v[3];
            uint32_t o2[12];
            for (int i = 0; i < 3; i++)
                v[i] = w[perm[q][i]];
            place_ok(p, v, 3, o2);
            for (uint32_t k = 0; k < 12; k++)
                CHECK_STR(v[o2[k]].id, w[out[k]].id);
        }
    weir__plan_free(p);
}

TEST(a_full_worker_passes_the_instance_on_cyclically)
{
    weir__plan *p = pipeline(3);
    /* Instance 0 from a: a (3 left). 1 from b: b has 2, c takes it (0
     * left). 2 from c: full, b has 2, wraps to a. */
    weir__place_worker w[] = {{"b", 2}, {"a", 6}, {"c", 3}};
    uint32_t out[9];
    place_ok(p, w, 3, out);
    const char *want[] = {"a", "c", "a"};
    for (uint32_t i = 0; i < 3; i++) {
        CHECK(whole(p, w, out, i));
        CHECK_STR(at(p, w, out, 0, i), want[i]);
    }
    CHECK_EQ(weir__place_count_remote(p, out), 0);
    weir__plan_free(p);
}

TEST(an_instance_no_worker_has_room_for_is_split_in_sorted_order)
{
    /* Two instances of 3 over three workers of 2: each is split, filling
     * the free slots of a, then b, then c. */
    weir__plan *p = pipeline(2);
    weir__place_worker w[] = {{"c", 2}, {"b", 2}, {"a", 2}};
    uint32_t out[6];
    place_ok(p, w, 3, out);
    CHECK_STR(at(p, w, out, 0, 0), "a");
    CHECK_STR(at(p, w, out, 1, 0), "a");
    CHECK_STR(at(p, w, out, 2, 0), "b");
    CHECK_STR(at(p, w, out, 0, 1), "b");
    CHECK_STR(at(p, w, out, 1, 1), "c");
    CHECK_STR(at(p, w, out, 2, 1), "c");
    /* Chain 1 -> 2 of instance 0 crosses a -> b, chain 0 -> 1 of instance
     * 1 crosses b -> c. */
    CHECK_EQ(weir__place_count_remote(p, out), 2);
    weir__plan_free(p);

    /* Only the instance too large is split; the later ones stay whole. */
    p = fan_out(3); /* instance 0: src and m0; 1, 2: m1, m2 */
    weir__place_worker v[] = {{"d", 1}, {"c", 1}, {"b", 1}, {"a", 1}};
    uint32_t o2[4];
    place_ok(p, v, 4, o2);
    CHECK_STR(at(p, v, o2, 0, 0), "a");
    CHECK_STR(at(p, v, o2, 1, 0), "b");
    CHECK_STR(at(p, v, o2, 1, 1), "c"); /* from b (full) on to c */
    CHECK_STR(at(p, v, o2, 1, 2), "d");
    weir__plan_free(p);
}

TEST(chains_of_different_parallelism_group_by_index)
{
    weir__plan *p = fan_out(4);
    CHECK_EQ(p->nsubtasks, 5u);
    weir__place_worker w[] = {{"y", 8}, {"x", 8}};
    uint32_t out[5];
    place_ok(p, w, 2, out);
    /* Instance 0 has two subtasks (src, m0), 1-3 one each. */
    CHECK_STR(at(p, w, out, 0, 0), "x");
    const char *want[] = {"x", "y", "x", "y"};
    for (uint32_t i = 0; i < 4; i++)
        CHECK_STR(at(p, w, out, 1, i), want[i]);
    /* A rebalance reaches every subtask: src -> m1, m3 cross wherever. */
    CHECK_EQ(weir__place_count_remote(p, out), 2);
    weir__plan_free(p);
}

TEST(too_little_room_is_refused_naming_need_and_free)
{
    weir__plan *p = pipeline(4);
    weir__place_worker w[] = {{"b", 4}, {"a", 3}, {"c", 4}};
    uint32_t out[12];
    memset(out, 0xab, sizeof(out));
    char msg[256];
    CHECK_EQ(weir__place(p, w, 3, out, msg, sizeof(msg)), -ENOSPC);
    CHECK_STR(msg, "the job needs 12 slots, the cluster has 11 free (worker a: 3, worker b: 4, "
                   "worker c: 4)");
    for (uint32_t k = 0; k < 12; k++)
        CHECK_EQ(out[k], 0xababababu); /* nothing placed */
    /* A short buffer is cut, still terminated; none at all is fine. */
    char small[20];
    CHECK_EQ(weir__place(p, w, 3, out, small, sizeof(small)), -ENOSPC);
    CHECK_STR(small, "the job needs 12 sl");
    CHECK_EQ(weir__place(p, w, 3, out, NULL, 0), -ENOSPC);
    weir__place_worker none[] = {{"a", 0}};
    CHECK_EQ(weir__place(p, none, 1, out, msg, sizeof(msg)), -ENOSPC);
    CHECK_STR(msg, "the job needs 12 slots, the cluster has 0 free (worker a: 0)");
    /* Exactly enough is enough. */
    w[1].free_slots = 4;
    place_ok(p, w, 3, out);
    weir__plan_free(p);
}

TEST(bad_arguments)
{
    weir__plan *p = pipeline(2);
    weir__place_worker w[] = {{"a", 4}, {"b", 4}};
    uint32_t out[6];
    char msg[256];
    CHECK_EQ(weir__place(p, w, 0, out, msg, sizeof(msg)), -EINVAL);
    CHECK_HAS(msg, "no workers");
    CHECK_EQ(weir__place(p, NULL, 2, out, msg, sizeof(msg)), -EINVAL);
    CHECK_EQ(weir__place(NULL, w, 2, out, msg, sizeof(msg)), -EINVAL);
    CHECK_EQ(weir__place(p, w, 2, NULL, msg, sizeof(msg)), -EINVAL);
    weir__place_worker twice[] = {{"b", 4}, {"a", 4}, {"b", 4}};
    CHECK_EQ(weir__place(p, twice, 3, out, msg, sizeof(msg)), -EINVAL);
    CHECK_HAS(msg, "\"b\" is given twice");
    weir__place_worker noid[] = {{"a", 4}, {NULL, 4}};
    CHECK_EQ(weir__place(p, noid, 2, out, msg, sizeof(msg)), -EINVAL);
    CHECK_HAS(msg, "worker 1 has no id");
    CHECK_EQ(weir__place_count_remote(NULL, out), -EINVAL);
    CHECK_EQ(weir__place_count_remote(p, NULL), -EINVAL);
    weir__plan_free(p);
}

TEST(every_allocation_failure_is_an_error)
{
    weir__plan *p = pipeline(4);
    weir__place_worker w[] = {{"c", 4}, {"a", 4}, {"b", 4}};
    uint32_t want[12], out[12];
    place_ok(p, w, 3, want);
    int failures = 0, done = 0;
    for (long n = 0; !done && n < 100; n++) {
        memset(out, 0xab, sizeof(out));
        char msg[256];
        weir__alloc_fail_after(n);
        int rc = weir__place(p, w, 3, out, msg, sizeof(msg));
        weir__alloc_fail_after(-1);
        if (rc == 0) {
            done = 1;
            CHECK(memcmp(out, want, sizeof(out)) == 0);
        } else {
            CHECK_EQ(rc, -ENOMEM);
            CHECK_HAS(msg, "out of memory");
            for (uint32_t k = 0; k < 12; k++)
                CHECK_EQ(out[k], 0xababababu);
            failures++;
        }
    }
    CHECK(done);
    CHECK_GE(failures, 1);
    weir__alloc_fail_after(0);
    int rc = weir__place_count_remote(p, want);
    weir__alloc_fail_after(-1);
    CHECK_EQ(rc, -ENOMEM);
    weir__plan_free(p);
}

/* The design notes' trap: first-fit in plan order is operator-major, so
 * it fills a worker with one chain before the next and scatters every
 * instance; placing by instance does not. */
TEST(first_fit_in_plan_order_scatters_instances_placement_does_not)
{
    weir__place_worker w[] = {{"a", 16}, {"b", 16}, {"c", 16}};
    uint32_t old[36], out[36];

    /* The measured cluster: 3 workers, parallelism 12, three forward-
     * chained stages, 24 forward channels. Then 16 went over TCP, 8 were
     * local; by instance every one is local. */
    weir__plan *p = pipeline(12);
    naive(p, w, 3, old);
    CHECK_EQ(weir__place_count_remote(p, old), 16);
    int split = 0;
    for (uint32_t i = 0; i < 12; i++)
        split += !whole(p, w, old, i);
    CHECK_EQ(split, 12);
    place_ok(p, w, 3, out);
    CHECK_EQ(weir__place_count_remote(p, out), 0);
    for (uint32_t i = 0; i < 12; i++)
        CHECK(whole(p, w, out, i));
    weir__plan_free(p);

    /* 3 chains x parallelism 4 over 3 workers of 4 slots: first fit puts
     * one chain on each worker, every channel remote. Instances of 3 in
     * slots of 4 cannot all be whole (two do not fit one worker, and 4
     * instances > 3 workers): three are, the fourth is split a, b, c. */
    p = pipeline(4);
    for (int i = 0; i < 3; i++)
        w[i].free_slots = 4;
    naive(p, w, 3, old);
    CHECK_EQ(weir__place_count_remote(p, old), 8);
    for (uint32_t i = 0; i < 4; i++)
        CHECK(!whole(p, w, old, i));
    place_ok(p, w, 3, out);
    for (uint32_t i = 0; i < 3; i++)
        CHECK(whole(p, w, out, i));
    CHECK_EQ(weir__place_count_remote(p, out), 2);
    /* With room for two instances on a worker all four are whole and
     * nothing is remote; first fit still sends 4 of 8 over TCP. */
    for (int i = 0; i < 3; i++)
        w[i].free_slots = 6;
    naive(p, w, 3, old);
    CHECK_EQ(weir__place_count_remote(p, old), 4);
    place_ok(p, w, 3, out);
    CHECK_EQ(weir__place_count_remote(p, out), 0);
    weir__plan_free(p);
}

TEST_MAIN()
