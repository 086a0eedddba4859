/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nexmark.h - the Nexmark benchmark on weir: the event generator (persons,
 * auctions and bids of an online auction site) and the queries q0-q5, q7,
 * q8 and a word count, each a function adding its operators to a weir_job.
 *
 * Events. The generator follows the reference one (Apache Beam's
 * NexmarkGenerator): of every 50 events 1 is a person, 3 are auctions and
 * 46 bids; event n is a pure function of (seed, n) - its randomness comes
 * from a generator seeded with both - so any subset of event numbers can be
 * made by anyone: source subtask i of p makes n = i, i + p, i + 2p... and a
 * parallel source yields exactly the events of a single one, and the
 * reference computations in the tests loop over the same numbers. Event n's
 * timestamp is base_ns + n * 1e9 / rate (nanoseconds of event time).
 *
 * Records. An event is a nexmark_event: a kind and a union of fixed structs
 * with inline char arrays, the variable `extra` padding last; the record is
 * the struct up to the end of its extra bytes (nexmark_event_len), so that
 * records average about 200 (person), 500 (auction) and 100 (bid) bytes as
 * in the reference. Strings are NUL-terminated within their arrays; extra is
 * extra_len bytes (not terminated). Read a record's fields in place (records
 * from batches are 8-byte aligned) or memcpy rec->len bytes into a
 * nexmark_event.
 */
#ifndef WEIR_NEXMARK_H
#define WEIR_NEXMARK_H

#include <stddef.h>
#include <stdint.h>

#include "weir/stream.h"

enum { NEXMARK_PERSON = 1, NEXMARK_AUCTION = 2, NEXMARK_BID = 3 };

#define NEXMARK_FIRST_PERSON_ID  1000
#define NEXMARK_FIRST_AUCTION_ID 1000
#define NEXMARK_FIRST_CATEGORY   10
#define NEXMARK_NUM_CATEGORIES   5

typedef struct nexmark_person {
    int64_t id;
    int64_t date_time;
    char name[24];
    char email[32];
    char credit_card[20];
    char city[16];
    char state[4];
    uint32_t extra_len;
    char extra[128];
} nexmark_person;

typedef struct nexmark_auction {
    int64_t id;
    int64_t initial_bid;
    int64_t reserve;
    int64_t date_time;
    int64_t expires;
    int64_t seller;
    int64_t category;
    char item_name[24];
    char description[128]; /* words of a small vocabulary (word count) */
    uint32_t extra_len;
    char extra[400];
} nexmark_auction;

typedef struct nexmark_bid {
    int64_t auction;
    int64_t bidder;
    int64_t price;
    int64_t date_time;
    char channel[16];
    char url[32];
    uint32_t extra_len;
    char extra[28];
} nexmark_bid;

typedef struct nexmark_event {
    uint32_t kind; /* NEXMARK_PERSON, _AUCTION, _BID */
    uint32_t pad_;
    union {
        nexmark_person person;
        nexmark_auction auction;
        nexmark_bid bid;
    };
} nexmark_event;

/* The generator's configuration (the reference's GeneratorConfig). */
typedef struct nexmark_cfg {
    uint64_t seed;
    int64_t events;  /* event numbers 0..events-1; < 0: unbounded */
    int64_t rate;    /* events per second of event time (default 1,000,000) */
    int64_t base_ns; /* timestamp of event 0 */
    int per_call;    /* events a source subtask emits per next() (default 512) */
} nexmark_cfg;

/* Make event n into *e; its timestamp is nexmark_ts(c, n) (also its
 * date_time). Returns the record's length (nexmark_event_len(e)). */
size_t nexmark_gen(const nexmark_cfg *c, int64_t n, nexmark_event *e);
int64_t nexmark_ts(const nexmark_cfg *c, int64_t n);
size_t nexmark_event_len(const nexmark_event *e);
/* The kind of event n, without making it. */
static inline int nexmark_kind(int64_t n)
{
    int64_t off = n % 50;
    return off < 1 ? NEXMARK_PERSON : off < 4 ? NEXMARK_AUCTION : NEXMARK_BID;
}

/* The source: a weir_source_def whose arg is a nexmark_cfg (borrowed). Each
 * subtask makes its share of the event numbers (n = subtask mod
 * parallelism), emits them with their timestamps and a watermark bound of 0
 * (its timestamps only grow), and snapshots its next event number. */
extern const weir_source_def nexmark_source;

/* ---- queries ------------------------------------------------------------------------------ */

/* Options of the queries: window sizes in event time (ns). */
typedef struct nexmark_opts {
    int64_t window_ns; /* q5 hopping size, q7 / q8 tumbling size (10 s) */
    int64_t slide_ns;  /* q5 slide (2 s) */
    /* q5, q7: pre-aggregate per source subtask before the keyed stage (a
     * pane of one slide for q5, the window for q7; see queries.c) */
    int local;
} nexmark_opts;

/* Output records of the queries (fixed structs). */
typedef struct nexmark_q2_out {
    int64_t auction, price;
} nexmark_q2_out;
typedef struct nexmark_q3_out {
    char name[24];
    char city[16];
    char state[4];
    int64_t auction;
} nexmark_q3_out;
typedef struct nexmark_q4_out { /* the running average of one category */
    int64_t category, sum, count;
} nexmark_q4_out;
typedef struct nexmark_q5_out { /* an auction with the most bids of a window */
    int64_t start, auction, count;
} nexmark_q5_out;
typedef struct nexmark_q7_out { /* the highest bid of a window */
    int64_t start, auction, bidder, price, date_time;
} nexmark_q7_out;
typedef struct nexmark_q8_out { /* a person who opened an auction in its first window */
    int64_t id, start;
    char name[24];
} nexmark_q8_out;
typedef struct nexmark_wc_out { /* a word's running count; the word's bytes follow */
    int64_t count;
} nexmark_wc_out;

/*
 * Each query reads `events` (the nexmark_source's stream, every kind) and
 * sets *out to its result stream; 0, or -EINVAL when the graph could not be
 * built (weir_job_error says why). o may be NULL (10 s / 2 s windows); when
 * given it is borrowed and must outlive weir_job_run().
 *
 *   q0  pass-through: every event unchanged (a map)
 *   q1  currency conversion: bids with price * 0.908 (integer: price * 908 / 1000)
 *   q2  selection: nexmark_q2_out of the bids whose auction % 123 == 0
 *   q3  local item suggestion: persons in OR, ID or CA joined with the
 *       auctions of category 10 they sell (a keyed process operator over the
 *       union, keyed by person id / seller)
 *   q4  average price per category of the winning bids (the highest bid of
 *       an auction between its date_time and its expiry, found by an
 *       event-time timer at the expiry), a running nexmark_q4_out
 *   q5  hot items: bids per auction in hopping windows, the auctions with
 *       the most bids per window
 *   q7  the highest bid per tumbling window (ties: the earliest)
 *   q8  new users: persons who opened an auction in the tumbling window in
 *       which they registered (a window join: keyed process + timers)
 *   wc  word count over auction descriptions: a running nexmark_wc_out +
 *       word per word
 */
int nexmark_q0(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o);
int nexmark_q1(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o);
int nexmark_q2(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o);
int nexmark_q3(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o);
int nexmark_q4(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o);
int nexmark_q5(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o);
int nexmark_q7(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o);
int nexmark_q8(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o);
int nexmark_wc(weir_job *j, weir_stream *events, weir_stream **out, const nexmark_opts *o);

#endif /* WEIR_NEXMARK_H */
