/* SPDX-License-Identifier: Apache-2.0 */
/*
 * generator.c - the Nexmark event generator and its weir source (see
 * nexmark.h). The id arithmetic follows Apache Beam's reference generator
 * (GeneratorConfig, PersonGenerator, AuctionGenerator, BidGenerator):
 *
 *   - of every 50 event numbers, offset 0 is a person, 1-3 auctions, 4-49
 *     bids; person and auction ids are their ordinal among persons /
 *     auctions plus 1000;
 *   - an auction's seller is, with probability 3/4, a "hot" seller (the
 *     first of the latest batch of 100 persons), else a random one of the
 *     latest 1000 persons (+ up to 10 not yet registered: the reference's
 *     person id lead);
 *   - a bid is, with probability 1/2, for a hot auction (the first of the
 *     latest batch of 100 auctions), else for one of the latest 100 (+ a
 *     lead of 10); its bidder is, with probability 3/4, a hot bidder (the
 *     second of the latest batch of 100 persons), else a random recent one;
 *   - prices are 10^(6u) * 100 (u uniform in [0, 1)); an auction expires
 *     after 1 + a random length below twice the event time in which 100
 *     more auctions are made (so about 100 auctions are open at a time);
 *   - `extra` pads each record to its kind's average size +-20%.
 *
 * Randomness: event n draws from a splitmix64 stream seeded with (seed, n),
 * as the reference seeds java.util.Random with the event id: events are
 * independent of each other, so a split source and the tests' reference
 * loops make the same events.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nexmark.h"

#define PROP_PERSON        1
#define PROP_AUCTION       3
#define PROP_TOTAL         50
#define ACTIVE_PEOPLE      1000
#define IN_FLIGHT_AUCTIONS 100
#define PERSON_ID_LEAD     10
#define AUCTION_ID_LEAD    10
#define HOT_RATIO_AUCTIONS 2 /* P(hot auction) = 1 - 1/2 */
#define HOT_RATIO_SELLERS  4
#define HOT_RATIO_BIDDERS  4
#define HOT_BATCH          100 /* hot ids are the first of a batch of 100 */
#define AVG_PERSON         200
#define AVG_AUCTION        500
#define AVG_BID            100

typedef struct rng {
    uint64_t s;
} rng;

static inline uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Uniform in [0, n) (n > 0): the multiply-shift reduction. */
static inline int64_t rng_below(rng *r, int64_t n)
{
    __extension__ typedef unsigned __int128 u128;
    return (int64_t)(((u128)rng_next(r) * (uint64_t)n) >> 64);
}

static const char *const first_names[] = {"Peter", "Paul",  "Luke",  "John",   "Saul",  "Vicky",
                                          "Kate",  "Julie", "Sarah", "Deiter", "Walter"};
static const char *const last_names[] = {"Shultz", "Abrams", "Spencer", "White", "Bartels",
                                         "Walton", "Smith",  "Jones",   "Noris"};
static const char *const us_cities[] = {"Phoenix",  "Los Angeles", "San Francisco", "Boise",
                                        "Portland", "Bend",        "Redmond",       "Seattle",
                                        "Kent",     "Cheyenne"};
static const char *const us_states[] = {"AZ", "CA", "ID", "OR", "WA", "WY"};
static const char *const hot_channels[] = {"Google", "Facebook", "Baidu", "Apple"};
/* The description vocabulary (word count): drawn with a skew towards the
 * first words. */
static const char *const words[64] = {
    "the",     "auction",  "item",    "rare",    "vintage", "new",       "used",   "mint",
    "classic", "antique",  "modern",  "gold",    "silver",  "bronze",    "wooden", "glass",
    "signed",  "original", "limited", "edition", "set",     "collector", "box",    "sealed",
    "lot",     "pair",     "large",   "small",   "red",     "blue",      "green",  "black",
    "white",   "lamp",     "chair",   "table",   "clock",   "watch",     "ring",   "coin",
    "stamp",   "book",     "map",     "print",   "poster",  "vase",      "bowl",   "plate",
    "camera",  "radio",    "guitar",  "piano",   "bike",    "car",       "toy",    "doll",
    "card",    "comic",    "record",  "film",    "shirt",   "jacket",    "shoe",   "hat"};

/* Random lowercase text the `extra` fields are copied from. */
#define TEXT_LEN 8192
static char text[TEXT_LEN];

__attribute__((constructor)) static void nexmark_text_init(void)
{
    rng r = {UINT64_C(0x6e65786d61726b)};
    for (int i = 0; i < TEXT_LEN; i++)
        text[i] = (char)('a' + rng_below(&r, 26));
}

int64_t nexmark_ts(const nexmark_cfg *c, int64_t n)
{
    int64_t rate = c->rate > 0 ? c->rate : 1000000;
    /* n * 1e9 / rate without overflow for n up to ~9e9 */
    return c->base_ns + (n / rate) * 1000000000 + (n % rate) * 1000000000 / rate;
}

static int64_t last_person(int64_t n) /* base 0 */
{
    return n / PROP_TOTAL;
}

static int64_t last_auction(int64_t n) /* base 0 */
{
    int64_t epoch = n / PROP_TOTAL, off = n % PROP_TOTAL;
    if (off < PROP_PERSON) {
        epoch--;
        off = PROP_AUCTION - 1;
    } else if (off >= PROP_PERSON + PROP_AUCTION) {
        off = PROP_AUCTION - 1;
    } else {
        off -= PROP_PERSON;
    }
    return epoch * PROP_AUCTION + off;
}

static int64_t next_person(int64_t n, rng *r)
{
    int64_t people = last_person(n) + 1;
    int64_t active = people < ACTIVE_PEOPLE ? people : ACTIVE_PEOPLE;
    return people - active + rng_below(r, active + PERSON_ID_LEAD);
}

static int64_t next_auction(int64_t n, rng *r)
{
    int64_t max = last_auction(n), min = max - IN_FLIGHT_AUCTIONS;
    if (min < 0)
        min = 0;
    return min + rng_below(r, max - min + 1 + AUCTION_ID_LEAD);
}

static int64_t next_price(rng *r)
{
    double u = (double)(rng_next(r) >> 11) * 0x1p-53;
    return llround(exp(u * 13.815510557964274) * 100.0); /* 10^(6u) * 100 */
}

/* Random lowercase letters: 12 from each 64-bit draw. */
static void rand_letters(rng *r, char *dst, int n)
{
    while (n > 0) {
        uint64_t x = rng_next(r);
        for (int i = 0; i < 12 && n > 0; i++, n--, x >>= 5)
            *dst++ = (char)('a' + (x & 31) % 26);
    }
}

/* Pad to `avg` bytes on average (+-20%), as the reference's nextExtra. */
static uint32_t extra(rng *r, char *dst, size_t cap, size_t have, size_t avg)
{
    if (have >= avg)
        return 0;
    int64_t want = (int64_t)(avg - have), delta = (want + 2) / 5;
    int64_t len = want - delta + (delta ? rng_below(r, 2 * delta) : 0);
    if (len > (int64_t)cap)
        len = (int64_t)cap;
    memcpy(dst, text + rng_below(r, TEXT_LEN - (int64_t)cap), (size_t)len);
    return (uint32_t)len;
}

static size_t copy_str(char *dst, size_t cap, const char *s)
{
    size_t l = strlen(s);
    if (l >= cap)
        l = cap - 1;
    memcpy(dst, s, l);
    dst[l] = 0;
    return l;
}

#define HDR offsetof(nexmark_event, person)

static size_t gen_person(const nexmark_cfg *c, int64_t n, rng *r, nexmark_event *e)
{
    nexmark_person *p = &e->person;
    memset(p, 0, offsetof(nexmark_person, extra));
    p->id = last_person(n) + NEXMARK_FIRST_PERSON_ID;
    p->date_time = nexmark_ts(c, n);
    size_t l = copy_str(p->name, sizeof(p->name), first_names[rng_below(r, 11)]);
    p->name[l] = ' ';
    copy_str(p->name + l + 1, sizeof(p->name) - l - 1, last_names[rng_below(r, 9)]);
    rand_letters(r, p->email, 7);
    p->email[7] = '@';
    rand_letters(r, p->email + 8, 5);
    memcpy(p->email + 13, ".com", 5);
    uint64_t cc = rng_next(r);
    for (int i = 0, o = 0; i < 16; i++) {
        if (i && i % 4 == 0)
            p->credit_card[o++] = ' ';
        p->credit_card[o++] = (char)('0' + cc % 10);
        cc /= 10;
        if (i == 10)
            cc = rng_next(r);
    }
    copy_str(p->city, sizeof(p->city), us_cities[rng_below(r, 10)]);
    copy_str(p->state, sizeof(p->state), us_states[rng_below(r, 6)]);
    size_t fixed = HDR + offsetof(nexmark_person, extra);
    p->extra_len = extra(r, p->extra, sizeof(p->extra), fixed, AVG_PERSON);
    return fixed + p->extra_len;
}

static size_t gen_auction(const nexmark_cfg *c, int64_t n, rng *r, nexmark_event *e)
{
    nexmark_auction *a = &e->auction;
    memset(a, 0, offsetof(nexmark_auction, extra));
    int64_t ts = nexmark_ts(c, n);
    a->id = last_auction(n) + NEXMARK_FIRST_AUCTION_ID;
    if (rng_below(r, HOT_RATIO_SELLERS) > 0)
        a->seller = last_person(n) / HOT_BATCH * HOT_BATCH;
    else
        a->seller = next_person(n, r);
    a->seller += NEXMARK_FIRST_PERSON_ID;
    a->category = NEXMARK_FIRST_CATEGORY + rng_below(r, NEXMARK_NUM_CATEGORIES);
    a->initial_bid = next_price(r);
    /* The reference's nextAuctionLengthMs: the time in which 100 more
     * auctions are made, doubled, is the longest length. */
    int64_t horizon =
        nexmark_ts(c, n + (int64_t)IN_FLIGHT_AUCTIONS * PROP_TOTAL / PROP_AUCTION) - ts;
    a->expires = ts + 1 + rng_below(r, horizon * 2 > 1 ? horizon * 2 : 1);
    a->date_time = ts;
    rand_letters(r, a->item_name, 20);
    size_t o = 0;
    int nw = 6 + (int)rng_below(r, 9);
    for (int i = 0; i < nw; i++) {
        uint64_t x = rng_next(r);
        const char *w = words[(x & 63) & (((x >> 6) & 63) | ((x >> 12) & 63))];
        size_t wl = strlen(w);
        if (o + wl + 1 >= sizeof(a->description))
            break;
        if (o)
            a->description[o++] = ' ';
        memcpy(a->description + o, w, wl);
        o += wl;
    }
    a->reserve = a->initial_bid + next_price(r);
    size_t fixed = HDR + offsetof(nexmark_auction, extra);
    a->extra_len = extra(r, a->extra, sizeof(a->extra), fixed, AVG_AUCTION);
    return fixed + a->extra_len;
}

static size_t gen_bid(const nexmark_cfg *c, int64_t n, rng *r, nexmark_event *e)
{
    nexmark_bid *b = &e->bid;
    if (rng_below(r, HOT_RATIO_AUCTIONS) > 0)
        b->auction = last_auction(n) / HOT_BATCH * HOT_BATCH;
    else
        b->auction = next_auction(n, r);
    b->auction += NEXMARK_FIRST_AUCTION_ID;
    if (rng_below(r, HOT_RATIO_BIDDERS) > 0)
        b->bidder = last_person(n) / HOT_BATCH * HOT_BATCH + 1;
    else
        b->bidder = next_person(n, r);
    b->bidder += NEXMARK_FIRST_PERSON_ID;
    b->price = next_price(r);
    b->date_time = nexmark_ts(c, n);
    /* Channels: 99 in 100 bids come from a hot one (Google, Facebook,
     * Baidu, Apple), the rest from one of 10000 others. */
    int64_t ch = rng_below(r, 10000 * 4);
    memset(b->channel, 0, sizeof(b->channel) + sizeof(b->url));
    if (ch % 100) {
        copy_str(b->channel, sizeof(b->channel), hot_channels[ch % 4]);
        memcpy(b->url, "https://nexmark.io/item", 24);
    } else {
        int64_t id = ch / 4;
        memcpy(b->channel, "channel-", 8);
        memcpy(b->url, "https://nexmark.io/item?ch=", 27);
        for (int i = 3; i >= 0; i--, id /= 10)
            b->channel[8 + i] = b->url[27 + i] = (char)('0' + id % 10);
    }
    size_t fixed = HDR + offsetof(nexmark_bid, extra);
    b->extra_len = extra(r, b->extra, sizeof(b->extra), fixed, AVG_BID);
    return fixed + b->extra_len;
}

size_t nexmark_gen(const nexmark_cfg *c, int64_t n, nexmark_event *e)
{
    rng r = {c->seed * UINT64_C(0x2545f4914f6cdd1d) ^ (uint64_t)n * UINT64_C(0x9e3779b97f4a7c15)};
    rng_next(&r);
    e->pad_ = 0;
    switch (nexmark_kind(n)) {
    case NEXMARK_PERSON:
        e->kind = NEXMARK_PERSON;
        return gen_person(c, n, &r, e);
    case NEXMARK_AUCTION:
        e->kind = NEXMARK_AUCTION;
        return gen_auction(c, n, &r, e);
    default:
        e->kind = NEXMARK_BID;
        return gen_bid(c, n, &r, e);
    }
}

size_t nexmark_event_len(const nexmark_event *e)
{
    switch (e->kind) {
    case NEXMARK_PERSON:
        return HDR + offsetof(nexmark_person, extra) + e->person.extra_len;
    case NEXMARK_AUCTION:
        return HDR + offsetof(nexmark_auction, extra) + e->auction.extra_len;
    default:
        return HDR + offsetof(nexmark_bid, extra) + e->bid.extra_len;
    }
}

/* ---- the source --------------------------------------------------------------------------- */
typedef struct nx_src {
    const nexmark_cfg *cfg;
    int64_t next, step;
    nexmark_event ev;
} nx_src;

static int nx_open(weir_ctx *ctx, void *arg, void **state)
{
    nx_src *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->cfg = arg;
    s->next = weir_ctx_subtask(ctx);
    s->step = weir_ctx_parallelism(ctx);
    *state = s;
    return 0;
}

static int nx_next(weir_ctx *ctx, void *state)
{
    nx_src *s = state;
    int64_t end = s->cfg->events, per = s->cfg->per_call > 0 ? s->cfg->per_call : 512;
    for (int64_t i = 0; i < per; i++) {
        if (end >= 0 && s->next >= end)
            return 1;
        size_t len = nexmark_gen(s->cfg, s->next, &s->ev);
        int e = weir_emit(ctx, &s->ev, len, nexmark_ts(s->cfg, s->next));
        if (e)
            return e;
        s->next += s->step;
    }
    return end >= 0 && s->next >= end;
}

static int nx_snapshot(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    nx_src *s = state;
    int64_t *p = malloc(sizeof(*p));
    if (!p)
        return -ENOMEM;
    *p = s->next;
    *buf = p;
    *len = sizeof(*p);
    return 0;
}

static int nx_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    nx_src *s = state;
    int64_t n;
    if (len != sizeof(n))
        return -EINVAL;
    memcpy(&n, buf, sizeof(n));
    /* The position must belong to this subtask's share (same parallelism). */
    if (n < 0 || (n - weir_ctx_subtask(ctx)) % s->step)
        return weir_fail(ctx, -EINVAL, "nexmark: position %lld is not subtask %d's of %lld",
                         (long long)n, weir_ctx_subtask(ctx), (long long)s->step);
    s->next = n;
    return 0;
}

const weir_source_def nexmark_source = {.open = nx_open,
                                        .next = nx_next,
                                        .close = free,
                                        .max_out_of_orderness = 0,
                                        .snapshot = nx_snapshot,
                                        .restore = nx_restore};
