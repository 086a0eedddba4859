/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_nexmark.c - Nexmark on weir (examples/nexmark): the generator
 * (proportions, sizes, determinism, ids referring to recent ones, a split
 * source making the same events) and each query - q0-q5, q7, q8 and word
 * count - against a plain C loop over the same generated events, at
 * parallelism 1 and 2 on a two-thread runtime; and the source's position
 * restored from a checkpoint. NEXMARK_TEST_EVENTS overrides the size.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "test_rt.h"
#include "weir/rt.h"
#include "weir/stream.h"

#include "../../examples/nexmark/generator.c"
#include "../../examples/nexmark/queries.c"

/* Every job here runs on a two-thread runtime. */
static intptr_t on_runtime(weir_task_fn fn, void *arg)
{
    return test_run_on_rt(2, fn, arg);
}

static int64_t test_events(void)
{
    const char *e = getenv("NEXMARK_TEST_EVENTS");
    return e && atoll(e) > 0 ? atoll(e) : 200000;
}

/* 2000 events per second of event time: 200k events span 100 s, ten 10 s
 * windows, fifty hopping ones. */
static nexmark_cfg test_cfg(void)
{
    return (nexmark_cfg){.seed = 42, .events = test_events(), .rate = 2000, .per_call = 256};
}

static uint64_t fnv(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * UINT64_C(0x100000001b3);
    return h;
}

/* ---- running a query ------------------------------------------------------------------------ */
typedef int (*query_fn)(weir_job *, weir_stream *, weir_stream **, const nexmark_opts *);

typedef struct sum_sink {
    _Atomic uint64_t count, sum;
} sum_sink;

static int sum_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx;
    sum_sink *s = state;
    atomic_fetch_add(&s->count, 1);
    atomic_fetch_add(&s->sum, fnv(in->data, in->len));
    return 0;
}

static int sum_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    *state = arg;
    return 0;
}

typedef struct run_arg {
    query_fn q;
    nexmark_cfg cfg;
    int parallelism;
    const nexmark_opts *o;
    const char *ckpt_dir; /* checkpoints every 10 ms there */
    weir_collector *c;    /* or */
    sum_sink *sum;
} run_arg;

static intptr_t run_main(void *arg)
{
    run_arg *ra = arg;
    weir_job *j = weir_job_new("nexmark");
    CHECK(j != NULL);
    weir_stream *ev = weir_job_source(j, "events", &nexmark_source, &ra->cfg), *out = NULL;
    int qe = ra->q(j, ev, &out, ra->o);
    if (qe)
        fprintf(stderr, "nexmark: %s\n", weir_job_error(j));
    CHECK_EQ(qe, 0);
    static const weir_op_def sum_def = {.open = sum_open, .process = sum_process};
    if (ra->c)
        CHECK_EQ(weir_stream_collect(out, "out", ra->c), 0);
    else
        CHECK_EQ(weir_stream_sink(out, "sum", &sum_def, ra->sum), 0);
    int e = weir_job_run(j, &(weir_run_opts){.parallelism = ra->parallelism,
                                             .checkpoint_dir = ra->ckpt_dir,
                                             .checkpoint_interval_ms = ra->ckpt_dir ? 10 : 0});
    if (e)
        fprintf(stderr, "nexmark: %s\n", weir_job_error(j));
    CHECK_EQ(e, 0);
    weir_job_free(j);
    return 0;
}

static void run_collect(query_fn q, int p, weir_collector *c)
{
    run_arg ra = {.q = q, .cfg = test_cfg(), .parallelism = p, .c = c};
    CHECK_EQ(on_runtime(run_main, &ra), 0);
}

/* Configurations of the pre-aggregating queries: plain at parallelism 1
 * and 2, local pre-aggregation at 1 and 2, and local at 2 with checkpoints
 * every 10 ms (partial results flushed at the barriers). */
enum { NVARIANTS = 5 };
static const nexmark_opts local_opts = {.local = 1};

static void run_variant(query_fn q, int v, weir_collector *c)
{
    char dir[] = "/tmp/weir-nexmark-XXXXXX";
    run_arg ra = {.q = q, .cfg = test_cfg(), .parallelism = 1 + v % 2, .c = c};
    if (v >= 2)
        ra.o = &local_opts;
    if (v == 4) {
        CHECK(mkdtemp(dir) != NULL);
        ra.ckpt_dir = dir;
        ra.cfg.per_call = 16;
    }
    CHECK_EQ(on_runtime(run_main, &ra), 0);
    if (v == 4) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        CHECK_EQ(system(cmd), 0);
    }
}

/* The collected records, each `size` bytes, copied into an array. */
static void *collected(weir_collector *c, size_t size, size_t *n)
{
    *n = weir_collector_count(c);
    uint8_t *v = calloc(*n + 1, size);
    CHECK(v != NULL);
    for (size_t i = 0; i < *n; i++) {
        const weir_rec *r = weir_collector_get(c, i);
        CHECK_EQ(r->len, size);
        memcpy(v + i * size, r->data, size);
    }
    return v;
}

static int cmp_i64s(const void *a, const void *b, size_t n)
{
    const int64_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* ---- the generator ----------------------------------------------------------------------------
 */
TEST(generator_proportions_sizes_and_ids)
{
    nexmark_cfg cfg = {.seed = 7, .rate = 1000000};
    int64_t n = 100000, kinds[4] = {0}, bytes[4] = {0}, hot_bids = 0;
    nexmark_event e, e2;
    for (int64_t i = 0; i < n; i++) {
        size_t len = nexmark_gen(&cfg, i, &e);
        CHECK_EQ(len, nexmark_event_len(&e));
        CHECK_LE(len, sizeof(e));
        CHECK_EQ((int)e.kind, nexmark_kind(i));
        kinds[e.kind]++;
        bytes[e.kind] += (int64_t)len;
        int64_t ts = nexmark_ts(&cfg, i);
        CHECK_EQ(ts, i * 1000);                                     /* 1e9 / rate ns apart */
        int64_t persons = i / 50 + 1, auctions = (i + 49) / 50 * 3; /* made so far, roughly */
        switch (e.kind) {
        case NEXMARK_PERSON:
            CHECK_EQ(e.person.id, i / 50 + NEXMARK_FIRST_PERSON_ID);
            CHECK_EQ(e.person.date_time, ts);
            CHECK(strchr(e.person.email, '@') != NULL);
            CHECK_EQ(strlen(e.person.state), 2);
            break;
        case NEXMARK_AUCTION:
            CHECK_EQ(e.auction.date_time, ts);
            CHECK_GT(e.auction.expires, ts);
            CHECK_GE(e.auction.category, 10);
            CHECK_LT(e.auction.category, 15);
            CHECK_GE(e.auction.reserve, e.auction.initial_bid);
            CHECK_LT(e.auction.seller - NEXMARK_FIRST_PERSON_ID, persons + 10);
            CHECK_GE(e.auction.seller - NEXMARK_FIRST_PERSON_ID, persons - 1000);
            break;
        case NEXMARK_BID:
            CHECK_EQ(e.bid.date_time, ts);
            CHECK_GE(e.bid.price, 100);
            CHECK_LE(e.bid.price, 100000000);
            CHECK_LT(e.bid.auction - NEXMARK_FIRST_AUCTION_ID, auctions + 10);
            CHECK_GE(e.bid.auction - NEXMARK_FIRST_AUCTION_ID, auctions - 200);
            hot_bids += (e.bid.auction - NEXMARK_FIRST_AUCTION_ID) % 100 == 0;
            break;
        default:
            CHECK(0);
        }
        /* Deterministic, and a pure function of (seed, n). */
        CHECK_EQ(nexmark_gen(&cfg, i, &e2), len);
        CHECK_EQ(memcmp(&e, &e2, len), 0);
    }
    CHECK_EQ(kinds[NEXMARK_PERSON], n / 50);
    CHECK_EQ(kinds[NEXMARK_AUCTION], n / 50 * 3);
    CHECK_EQ(kinds[NEXMARK_BID], n / 50 * 46);
    /* Average sizes near the reference's 200 / 500 / 100 bytes. */
    int64_t avg_p = bytes[1] / kinds[1], avg_a = bytes[2] / kinds[2], avg_b = bytes[3] / kinds[3];
    CHECK(avg_p >= 190 && avg_p <= 210);
    CHECK(avg_a >= 480 && avg_a <= 520);
    CHECK(avg_b >= 95 && avg_b <= 105);
    /* About half the bids go to hot auctions. */
    CHECK_GT(hot_bids, kinds[NEXMARK_BID] * 45 / 100);
    /* Another seed, other events. */
    cfg.seed = 8;
    nexmark_gen(&cfg, 10, &e2);
    nexmark_gen(&(nexmark_cfg){.seed = 7, .rate = 1000000}, 10, &e);
    CHECK(e.bid.price != e2.bid.price || e.bid.auction != e2.bid.auction);
}

/* ---- q0 / q1: every event, every bid converted ------------------------------------------------
 */
static void check_sum(query_fn q, int conv)
{
    nexmark_cfg cfg = test_cfg();
    uint64_t want_n = 0, want_sum = 0;
    nexmark_event e;
    for (int64_t i = 0; i < cfg.events; i++) {
        size_t len = nexmark_gen(&cfg, i, &e);
        if (conv) {
            if (e.kind != NEXMARK_BID)
                continue;
            e.bid.price = e.bid.price * 908 / 1000;
        }
        want_n++;
        want_sum += fnv(&e, len);
    }
    for (int p = 1; p <= 2; p++) {
        sum_sink s = {0};
        run_arg ra = {.q = q, .cfg = cfg, .parallelism = p, .sum = &s};
        CHECK_EQ(on_runtime(run_main, &ra), 0);
        CHECK_EQ(s.count, want_n);
        CHECK_EQ(s.sum, want_sum);
    }
}

TEST(q0_pass_through)
{
    check_sum(nexmark_q0, 0);
}

TEST(q1_currency_conversion)
{
    check_sum(nexmark_q1, 1);
}

/* ---- q2 -----------------------------------------------------------------------------------------
 */
static int cmp_q2(const void *a, const void *b)
{
    return cmp_i64s(a, b, 2);
}

TEST(q2_selection)
{
    nexmark_cfg cfg = test_cfg();
    size_t nw = 0;
    nexmark_q2_out *want = calloc((size_t)cfg.events, sizeof(*want));
    nexmark_event e;
    for (int64_t i = 0; i < cfg.events; i++) {
        nexmark_gen(&cfg, i, &e);
        if (e.kind == NEXMARK_BID && e.bid.auction % 123 == 0)
            want[nw++] = (nexmark_q2_out){e.bid.auction, e.bid.price};
    }
    CHECK_GT(nw, 100);
    qsort(want, nw, sizeof(*want), cmp_q2);
    for (int p = 1; p <= 2; p++) {
        weir_collector *c = weir_collector_new();
        run_collect(nexmark_q2, p, c);
        size_t n;
        nexmark_q2_out *got = collected(c, sizeof(*got), &n);
        qsort(got, n, sizeof(*got), cmp_q2);
        CHECK_EQ(n, nw);
        CHECK_EQ(memcmp(got, want, n * sizeof(*got)), 0);
        free(got);
        weir_collector_free(c);
    }
    free(want);
}

/* ---- q3 -----------------------------------------------------------------------------------------
 */
typedef struct q3_row {
    int64_t auction;
    uint64_t person; /* hash of name, city, state */
} q3_row;

static int cmp_q3(const void *a, const void *b)
{
    return cmp_i64s(a, b, 2);
}

static uint64_t q3_hash(const char *name, const char *city, const char *state)
{
    return fnv(name, strlen(name)) * 31 + fnv(city, strlen(city)) * 7 + fnv(state, strlen(state));
}

TEST(q3_local_item_suggestion)
{
    nexmark_cfg cfg = test_cfg();
    size_t np = (size_t)cfg.events / 50 + 20;
    nexmark_person *persons = calloc(np, sizeof(*persons));
    q3_row *want = calloc((size_t)cfg.events / 10 + 1, sizeof(*want));
    nexmark_event e;
    for (int64_t i = 0; i < cfg.events; i++) {
        if (nexmark_kind(i) != NEXMARK_PERSON)
            continue;
        nexmark_gen(&cfg, i, &e);
        persons[e.person.id - NEXMARK_FIRST_PERSON_ID] = e.person;
    }
    size_t nw = 0;
    for (int64_t i = 0; i < cfg.events; i++) {
        if (nexmark_kind(i) != NEXMARK_AUCTION)
            continue;
        nexmark_gen(&cfg, i, &e);
        if (e.auction.category != 10)
            continue;
        int64_t s = e.auction.seller - NEXMARK_FIRST_PERSON_ID;
        CHECK_LT(s, (int64_t)np);
        const nexmark_person *p = &persons[s];
        if (!p->id)
            continue; /* a seller not registered within the input */
        if (strcmp(p->state, "OR") && strcmp(p->state, "ID") && strcmp(p->state, "CA"))
            continue;
        want[nw++] = (q3_row){e.auction.id, q3_hash(p->name, p->city, p->state)};
    }
    CHECK_GT(nw, 100);
    qsort(want, nw, sizeof(*want), cmp_q3);
    for (int p = 1; p <= 2; p++) {
        weir_collector *c = weir_collector_new();
        run_collect(nexmark_q3, p, c);
        size_t n;
        nexmark_q3_out *got = collected(c, sizeof(*got), &n);
        CHECK_EQ(n, nw);
        q3_row *rows = calloc(n + 1, sizeof(*rows));
        for (size_t i = 0; i < n; i++)
            rows[i] = (q3_row){got[i].auction, q3_hash(got[i].name, got[i].city, got[i].state)};
        qsort(rows, n, sizeof(*rows), cmp_q3);
        CHECK_EQ(memcmp(rows, want, n * sizeof(*rows)), 0);
        free(rows);
        free(got);
        weir_collector_free(c);
    }
    free(want);
    free(persons);
}

/* ---- q4 -----------------------------------------------------------------------------------------
 */
typedef struct ref_auction {
    int64_t date_time, expires, category, best;
    int seen;
} ref_auction;

TEST(q4_average_winning_price_per_category)
{
    nexmark_cfg cfg = test_cfg();
    size_t na = (size_t)cfg.events / 50 * 3 + 40;
    ref_auction *a = calloc(na, sizeof(*a));
    nexmark_event e;
    for (int64_t i = 0; i < cfg.events; i++) {
        if (nexmark_kind(i) != NEXMARK_AUCTION)
            continue;
        nexmark_gen(&cfg, i, &e);
        a[e.auction.id - NEXMARK_FIRST_AUCTION_ID] =
            (ref_auction){e.auction.date_time, e.auction.expires, e.auction.category, -1, 1};
    }
    for (int64_t i = 0; i < cfg.events; i++) {
        if (nexmark_kind(i) != NEXMARK_BID)
            continue;
        nexmark_gen(&cfg, i, &e);
        ref_auction *x = &a[e.bid.auction - NEXMARK_FIRST_AUCTION_ID];
        if (x->seen && e.bid.date_time >= x->date_time && e.bid.date_time < x->expires &&
            e.bid.price > x->best)
            x->best = e.bid.price;
    }
    int64_t sum[NEXMARK_NUM_CATEGORIES] = {0}, cnt[NEXMARK_NUM_CATEGORIES] = {0};
    for (size_t i = 0; i < na; i++) {
        if (a[i].seen && a[i].best >= 0) {
            sum[a[i].category - 10] += a[i].best;
            cnt[a[i].category - 10]++;
        }
    }
    for (int p = 1; p <= 2; p++) {
        weir_collector *c = weir_collector_new();
        run_collect(nexmark_q4, p, c);
        size_t n;
        nexmark_q4_out *got = collected(c, sizeof(*got), &n);
        nexmark_q4_out last[NEXMARK_NUM_CATEGORIES] = {0};
        for (size_t i = 0; i < n; i++) {
            int64_t k = got[i].category - 10;
            CHECK(k >= 0 && k < NEXMARK_NUM_CATEGORIES);
            if (got[i].count > last[k].count)
                last[k] = got[i];
        }
        for (int k = 0; k < NEXMARK_NUM_CATEGORIES; k++) {
            CHECK_GT(cnt[k], 10);
            CHECK_EQ(last[k].count, cnt[k]);
            CHECK_EQ(last[k].sum, sum[k]);
        }
        free(got);
        weir_collector_free(c);
    }
    free(a);
}

/* ---- q5 -----------------------------------------------------------------------------------------
 */
static int cmp_q5(const void *a, const void *b)
{
    return cmp_i64s(a, b, 3);
}

TEST(q5_hot_items)
{
    nexmark_cfg cfg = test_cfg();
    const int64_t size = 10 * (int64_t)1000000000, slide = 2 * (int64_t)1000000000;
    const int per = (int)(size / slide);
    /* (start, auction) of every bid in every window, sorted and counted. */
    size_t np = 0;
    int64_t(*pairs)[2] = calloc((size_t)cfg.events * (size_t)per, sizeof(*pairs));
    nexmark_event e;
    for (int64_t i = 0; i < cfg.events; i++) {
        if (nexmark_kind(i) != NEXMARK_BID)
            continue;
        nexmark_gen(&cfg, i, &e);
        int64_t last = floor_to(e.bid.date_time, slide);
        for (int k = 0; k < per; k++) {
            pairs[np][0] = last - k * slide;
            pairs[np++][1] = e.bid.auction;
        }
    }
    qsort(pairs, np, sizeof(*pairs), cmp_q5);
    nexmark_q5_out *want = calloc(np + 1, sizeof(*want));
    size_t nw = 0, i = 0;
    while (i < np) { /* one window */
        size_t w0 = nw;
        int64_t start = pairs[i][0], max = 0;
        while (i < np && pairs[i][0] == start) {
            size_t k = i;
            while (k < np && pairs[k][0] == start && pairs[k][1] == pairs[i][1])
                k++;
            int64_t count = (int64_t)(k - i);
            if (count > max) {
                max = count;
                nw = w0;
            }
            if (count == max)
                want[nw++] = (nexmark_q5_out){start, pairs[i][1], count};
            i = k;
        }
    }
    CHECK_GT(nw, 40);
    for (int v = 0; v < NVARIANTS; v++) {
        weir_collector *c = weir_collector_new();
        run_variant(nexmark_q5, v, c);
        size_t n;
        nexmark_q5_out *got = collected(c, sizeof(*got), &n);
        qsort(got, n, sizeof(*got), cmp_q5);
        CHECK_EQ(n, nw);
        CHECK_EQ(memcmp(got, want, n * sizeof(*got)), 0);
        free(got);
        weir_collector_free(c);
    }
    free(want);
    free(pairs);
}

/* ---- q7 -----------------------------------------------------------------------------------------
 */
TEST(q7_highest_bid)
{
    nexmark_cfg cfg = test_cfg();
    const int64_t size = 10 * (int64_t)1000000000;
    size_t nwin = (size_t)(nexmark_ts(&cfg, cfg.events) / size) + 2;
    nexmark_q7_out *want = calloc(nwin, sizeof(*want));
    nexmark_event e;
    for (int64_t i = 0; i < cfg.events; i++) {
        if (nexmark_kind(i) != NEXMARK_BID)
            continue;
        nexmark_gen(&cfg, i, &e);
        nexmark_q7_out b = {floor_to(e.bid.date_time, size), e.bid.auction, e.bid.bidder,
                            e.bid.price, e.bid.date_time};
        nexmark_q7_out *w = &want[b.start / size];
        if (!w->price || q7_better(&b, w))
            *w = b;
    }
    size_t nw = 0;
    for (size_t k = 0; k < nwin; k++)
        if (want[k].price)
            want[nw++] = want[k];
    CHECK_GE(nw, 5);
    for (int v = 0; v < NVARIANTS; v++) {
        weir_collector *c = weir_collector_new();
        run_variant(nexmark_q7, v, c);
        size_t n;
        nexmark_q7_out *got = collected(c, sizeof(*got), &n);
        qsort(got, n, sizeof(*got), cmp_q5);
        CHECK_EQ(n, nw);
        CHECK_EQ(memcmp(got, want, n * sizeof(*got)), 0);
        free(got);
        weir_collector_free(c);
    }
    free(want);
}

/* ---- q8 -----------------------------------------------------------------------------------------
 */
static int cmp_q8(const void *a, const void *b)
{
    return cmp_i64s(a, b, 2);
}

TEST(q8_new_users)
{
    nexmark_cfg cfg = test_cfg();
    const int64_t size = 10 * (int64_t)1000000000;
    size_t np = (size_t)cfg.events / 50 + 20;
    nexmark_q8_out *persons = calloc(np, sizeof(*persons));
    char *matched = calloc(np, 1);
    nexmark_event e;
    for (int64_t i = 0; i < cfg.events; i++) {
        if (nexmark_kind(i) != NEXMARK_PERSON)
            continue;
        nexmark_gen(&cfg, i, &e);
        nexmark_q8_out *p = &persons[e.person.id - NEXMARK_FIRST_PERSON_ID];
        p->id = e.person.id;
        p->start = floor_to(e.person.date_time, size);
        memcpy(p->name, e.person.name, sizeof(p->name));
    }
    for (int64_t i = 0; i < cfg.events; i++) {
        if (nexmark_kind(i) != NEXMARK_AUCTION)
            continue;
        nexmark_gen(&cfg, i, &e);
        int64_t s = e.auction.seller - NEXMARK_FIRST_PERSON_ID;
        if (persons[s].id && persons[s].start == floor_to(e.auction.date_time, size))
            matched[s] = 1;
    }
    size_t nw = 0;
    for (size_t k = 0; k < np; k++)
        if (matched[k])
            persons[nw++] = persons[k];
    CHECK_GT(nw, 50);
    for (int p = 1; p <= 2; p++) {
        weir_collector *c = weir_collector_new();
        run_collect(nexmark_q8, p, c);
        size_t n;
        nexmark_q8_out *got = collected(c, sizeof(*got), &n);
        qsort(got, n, sizeof(*got), cmp_q8);
        CHECK_EQ(n, nw);
        for (size_t k = 0; k < n; k++) {
            CHECK_EQ(got[k].id, persons[k].id);
            CHECK_EQ(got[k].start, persons[k].start);
            CHECK_EQ(strcmp(got[k].name, persons[k].name), 0);
        }
        free(got);
        weir_collector_free(c);
    }
    free(matched);
    free(persons);
}

/* ---- word count ---------------------------------------------------------------------------------
 */
TEST(word_count)
{
    nexmark_cfg cfg = test_cfg();
    int64_t want[64] = {0};
    nexmark_event e;
    for (int64_t i = 0; i < cfg.events; i++) {
        if (nexmark_kind(i) != NEXMARK_AUCTION)
            continue;
        nexmark_gen(&cfg, i, &e);
        /* strtok over a copy: an independent split */
        char d[sizeof(e.auction.description) + 1] = {0};
        memcpy(d, e.auction.description, sizeof(e.auction.description));
        char *save = NULL;
        for (char *w = strtok_r(d, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
            int k = 0;
            while (k < 64 && strcmp(words[k], w))
                k++;
            CHECK_LT(k, 64);
            want[k]++;
        }
    }
    for (int p = 1; p <= 2; p++) {
        weir_collector *c = weir_collector_new();
        run_collect(nexmark_wc, p, c);
        int64_t got[64] = {0};
        for (size_t i = 0; i < weir_collector_count(c); i++) {
            const weir_rec *r = weir_collector_get(c, i);
            nexmark_wc_out h;
            CHECK_GT(r->len, sizeof(h));
            memcpy(&h, r->data, sizeof(h));
            const char *w = (const char *)r->data + sizeof(h);
            size_t wl = r->len - sizeof(h);
            int k = 0;
            while (k < 64 && (strlen(words[k]) != wl || memcmp(words[k], w, wl)))
                k++;
            CHECK_LT(k, 64);
            if (h.count > got[k])
                got[k] = h.count;
        }
        for (int k = 0; k < 64; k++)
            CHECK_EQ(got[k], want[k]);
        weir_collector_free(c);
    }
}

/* ---- the source's position in a checkpoint ------------------------------------------------- */
/* rate 1e9: a record's timestamp is its event number. The first run's sink
 * fails once a checkpoint completed; the restored run must make exactly the
 * rest of each subtask's share. */
typedef struct ck_sink {
    int fail;
    _Atomic int64_t max_seen;
    _Atomic int64_t count, sum, min[2];
} ck_sink;

static int ck_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    ck_sink *s = state;
    int64_t n = in->ts, m = s->max_seen;
    while (n > m && !atomic_compare_exchange_weak(&s->max_seen, &m, n))
        ;
    int src = (int)(n % 2);
    int64_t lo = s->min[src];
    while (n < lo && !atomic_compare_exchange_weak(&s->min[src], &lo, n))
        ;
    atomic_fetch_add(&s->count, 1);
    atomic_fetch_add(&s->sum, n);
    if (s->fail && weir_ctx_completed(ctx) >= 1)
        return weir_fail(ctx, -EIO, "stop after a checkpoint");
    return 0;
}

typedef struct ck_arg {
    nexmark_cfg cfg;
    ck_sink *sink;
    const char *dir;
    int restore;
    int err;
    weir_ckpt_stats st;
} ck_arg;

static intptr_t ck_main(void *arg)
{
    ck_arg *a = arg;
    weir_job *j = weir_job_new("nexmark-ckpt");
    weir_stream *s = weir_job_source(j, "events", &nexmark_source, &a->cfg);
    static const weir_op_def def = {.open = sum_open, .process = ck_process};
    CHECK_EQ(weir_stream_sink(s, "sink", &def, a->sink), 0);
    a->err = weir_job_run(j, &(weir_run_opts){.parallelism = 2,
                                              .checkpoint_dir = a->dir,
                                              .checkpoint_interval_ms = 10,
                                              .restore = a->restore});
    weir_job_ckpt_stats(j, &a->st);
    weir_job_free(j);
    return 0;
}

TEST(source_position_restored)
{
    char dir[] = "/tmp/weir-nexmark-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    ck_sink first = {.fail = 1, .min = {INT64_MAX, INT64_MAX}};
    ck_arg a = {.cfg = {.seed = 3, .events = -1, .rate = 1000000000, .per_call = 64},
                .sink = &first,
                .dir = dir};
    CHECK_EQ(on_runtime(ck_main, &a), 0);
    CHECK_EQ(a.err, -EIO);
    CHECK_GE(a.st.completed, 1);
    ck_sink second = {.min = {INT64_MAX, INT64_MAX}};
    ck_arg b = {
        .cfg = {.seed = 3, .events = first.max_seen + 20000, .rate = 1000000000, .per_call = 64},
        .sink = &second,
        .dir = dir,
        .restore = 1};
    CHECK_EQ(on_runtime(ck_main, &b), 0);
    CHECK_EQ(b.err, 0);
    CHECK_GT(b.st.restored, 0);
    /* Each subtask resumed at its position k (> 0: not from the start, and
     * at most one past what the first run delivered) and made k, k+2, ...
     * up to the end: count and sum of that arithmetic sequence. */
    int64_t end = b.cfg.events, count = 0, sum = 0;
    for (int i = 0; i < 2; i++) {
        int64_t k = second.min[i];
        CHECK_GT(k, 1);
        CHECK_LE(k, first.max_seen + 2);
        CHECK_EQ(k % 2, i);
        int64_t last = (end - 1 - i) / 2 * 2 + i, m = (last - k) / 2 + 1;
        count += m;
        sum += m * (k + last) / 2;
    }
    CHECK_EQ(second.count, count);
    CHECK_EQ(second.sum, sum);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

TEST_MAIN()
