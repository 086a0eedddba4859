/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_wire.c - the TCP channel's frames (stream/wire.h): every kind
 * encodes, passes weir's frame parser and decodes to what went in, and
 * re-encodes to the same bytes; every malformed frame is refused with a
 * message that says what was wrong, and nothing leaks (run under ASan).
 * Malformed inputs are copied into buffers of exactly their length, so a
 * read past the end is an ASan report, not a silent pass.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/be.h"
#include "stream/wire.h"
#include "test.h"
#include "weir/net.h"

/* The runner's append (task.c): records 8-byte aligned in data. */
static void add(batch *b, const void *data, size_t len, int64_t ts, int kg)
{
    size_t at = ((size_t)b->used + 7) & ~(size_t)7;
    CHECK(b->n < WEIR_BATCH_RECORDS);
    CHECK_LE(at + len, b->cap);
    b->ts[b->n] = ts;
    b->off[b->n] = (uint32_t)at;
    b->len[b->n] = (uint32_t)len;
    b->kg[b->n] = (uint8_t)kg;
    if (len)
        memcpy(b->data + at, data, len);
    b->used = (uint32_t)(at + len);
    b->n++;
}

/* b's frame, in a malloc'd buffer of exactly *size bytes. */
static uint8_t *encode(const batch *b, size_t *size)
{
    *size = weir__wire_batch_size(b);
    uint8_t *f = malloc(*size);
    CHECK(f);
    weir__wire_batch_encode(b, f);
    CHECK_EQ(weir__get_be32(f), *size - WEIR_FRAME_HEADER);
    CHECK_EQ(f[4], WEIR__WIRE_BATCH);
    return f;
}

/* Decode a payload from a private copy of exactly len bytes. */
static int decode(const uint8_t *body, size_t len, weir__wire_msg *m, char *why, size_t cap)
{
    uint8_t *copy = malloc(len ? len : 1);
    CHECK(copy);
    if (len)
        memcpy(copy, body, len);
    int e = weir__wire_decode(copy, len, m, why, cap);
    free(copy);
    return e;
}

/* A payload must be refused with err and a message containing text. */
static void refused(const uint8_t *body, size_t len, int err, const char *text)
{
    weir__wire_msg m;
    char why[256];
    int e = decode(body, len, &m, why, sizeof(why));
    if (e != err)
        fprintf(stderr, "payload of %zu bytes: got %d (%s)\n", len, e, why);
    CHECK_EQ(e, err);
    CHECK_HAS(why, text);
    CHECK_EQ(m.kind, 0);
}

/* The frame goes through weir's frame parser, as it would off a socket. */
static void parse(const uint8_t *frame, size_t size, weir_frame *out)
{
    weir_frame_parser p;
    weir_frame_limits lim = {WEIR__WIRE_MAX_FRAME, WEIR__WIRE_MAX_FRAME};
    CHECK_EQ(weir_frame_parser_init(&p, &lim), 0);
    size_t used = 0;
    CHECK_EQ(weir_frame_parser_feed(&p, frame, size, &used, out), 1);
    CHECK_EQ(used, size);
    weir_frame_parser_close(&p);
}

/* Round trip: encode, parse, decode, compare, re-encode to the same bytes.
 * Returns the frame's size. */
static size_t round_trip(const batch *b)
{
    size_t size;
    uint8_t *f = encode(b, &size);
    weir_frame fr;
    parse(f, size, &fr);
    weir__wire_msg m;
    char why[256];
    int e = weir__wire_decode(fr.data, fr.len, &m, why, sizeof(why));
    if (e)
        fprintf(stderr, "decode: %s\n", why);
    CHECK_EQ(e, 0);
    CHECK_EQ(m.kind, WEIR__WIRE_BATCH);
    batch *d = m.u.b;
    CHECK_EQ(d->n, b->n);
    CHECK_GE(d->cap, WEIR_BATCH_BYTES);
    CHECK_LE(d->used, d->cap);
    for (uint32_t i = 0; i < b->n; i++) {
        CHECK_EQ(d->ts[i], b->ts[i]);
        CHECK_EQ(d->len[i], b->len[i]);
        CHECK_EQ(d->kg[i], b->kg[i]);
        CHECK_EQ(d->off[i] % 8, 0);
        CHECK_LE((size_t)d->off[i] + d->len[i], d->used);
        if (i)
            CHECK_GE(d->off[i], (size_t)d->off[i - 1] + d->len[i - 1]);
        CHECK(memcmp(d->data + d->off[i], b->data + b->off[i], b->len[i]) == 0);
    }
    size_t size2;
    uint8_t *f2 = encode(d, &size2);
    CHECK_EQ(size2, size);
    CHECK(memcmp(f, f2, size) == 0);
    free(f2);
    weir__wire_msg_free(&m);
    CHECK_EQ(m.kind, 0);
    weir_frame_free(&fr);
    free(f);
    return size;
}

/* A batch of records of the given lengths, filled with a pattern. */
static batch *batch_of(const uint32_t *lens, uint32_t n)
{
    size_t need = 0;
    for (uint32_t i = 0; i < n; i++)
        need = ((need + 7) & ~(size_t)7) + lens[i];
    batch *b = weir__batch_new(need);
    CHECK(b);
    uint8_t *rec = malloc(WEIR_MAX_RECORD);
    CHECK(rec);
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t k = 0; k < lens[i] && k < 4096; k++)
            rec[k] = (uint8_t)(i * 31 + k);
        int kg = i % 3 == 0 ? NO_KG : (int)(i % WEIR_KEY_GROUPS);
        add(b, rec, lens[i], (int64_t)i * 1000 - 5000, kg);
    }
    free(rec);
    return b;
}

/* A small batch with unaligned lengths (records padded in memory). */
static batch *small_batch(void)
{
    static const uint32_t lens[] = {3, 0, 8, 13, 1, 64, 7};
    return batch_of(lens, sizeof(lens) / sizeof(lens[0]));
}

TEST(batch_new_is_the_runners_layout)
{
    batch *b = weir__batch_new(10);
    CHECK(b);
    CHECK_EQ(b->n, 0);
    CHECK_EQ(b->used, 0);
    CHECK_EQ(b->cap, WEIR_BATCH_BYTES);
    weir__batch_free(b);
    b = weir__batch_new(WEIR_BATCH_BYTES + 1);
    CHECK(b);
    CHECK_EQ(b->cap, WEIR_BATCH_BYTES + 8);
    weir__batch_free(b);
}

TEST(empty_batch_round_trips)
{
    batch *b = weir__batch_new(0);
    CHECK(b);
    CHECK_EQ(round_trip(b), WEIR_FRAME_HEADER + WEIR__WIRE_BATCH_HEAD);
    weir__batch_free(b);
}

TEST(unaligned_records_round_trip)
{
    batch *b = small_batch();
    round_trip(b);
    weir__batch_free(b);
}

TEST(full_batch_round_trips)
{
    /* 1024 records of 64 bytes fill WEIR_BATCH_BYTES exactly: the one-copy
     * path, and the extreme timestamps. */
    uint32_t lens[WEIR_BATCH_RECORDS];
    for (int i = 0; i < WEIR_BATCH_RECORDS; i++)
        lens[i] = 64;
    batch *b = batch_of(lens, WEIR_BATCH_RECORDS);
    CHECK_EQ(b->used, WEIR_BATCH_BYTES);
    b->ts[0] = INT64_MIN;
    b->ts[1] = INT64_MAX;
    b->kg[2] = WEIR_KEY_GROUPS - 1;
    CHECK_EQ(round_trip(b), WEIR_FRAME_HEADER + WEIR__WIRE_BATCH_HEAD +
                                WEIR_BATCH_RECORDS * (WEIR__WIRE_REC_HEADER + 64));
    weir__batch_free(b);

    /* Full by count with lengths that are not multiples of 8. */
    for (int i = 0; i < WEIR_BATCH_RECORDS; i++)
        lens[i] = (uint32_t)(i % 50);
    b = batch_of(lens, WEIR_BATCH_RECORDS);
    round_trip(b);
    weir__batch_free(b);
}

TEST(largest_batch_round_trips_and_one_byte_more_is_refused)
{
    /* One record of the largest size, then empty records to the count cap:
     * the largest legal frame, exactly WEIR__WIRE_MAX_FRAME. */
    uint32_t lens[WEIR_BATCH_RECORDS] = {WEIR_MAX_RECORD};
    batch *b = batch_of(lens, WEIR_BATCH_RECORDS);
    CHECK_EQ(round_trip(b), WEIR_FRAME_HEADER + WEIR__WIRE_MAX_FRAME);

    size_t size;
    uint8_t *f = encode(b, &size);
    uint8_t *big = malloc(size + 1);
    CHECK(big);
    memcpy(big, f, size);
    big[size] = 0;
    refused(big + 4, size - 4 + 1, -EMSGSIZE, "exceeds the");
    free(big);
    free(f);
    weir__batch_free(b);
}

static weir__wire_msg decode_ok(const uint8_t *frame, size_t size, int kind)
{
    CHECK_EQ(weir__get_be32(frame), size - WEIR_FRAME_HEADER);
    weir_frame fr;
    parse(frame, size, &fr);
    weir__wire_msg m;
    char why[256];
    int e = weir__wire_decode(fr.data, fr.len, &m, why, sizeof(why));
    if (e)
        fprintf(stderr, "decode: %s\n", why);
    CHECK_EQ(e, 0);
    CHECK_EQ(m.kind, kind);
    weir_frame_free(&fr);
    return m;
}

TEST(control_kinds_round_trip)
{
    uint8_t f[WEIR__WIRE_CTRL_MAX], g[WEIR__WIRE_CTRL_MAX];
    weir__wire_hello h = {UINT64_MAX - 1, 7, 0, UINT32_MAX, 2, 8};
    size_t n = weir__wire_encode_hello(f, &h);
    CHECK_EQ(n, WEIR__WIRE_HELLO_SIZE);
    weir__wire_msg m = decode_ok(f, n, WEIR__WIRE_HELLO);
    char why[256];
    CHECK_EQ(weir__wire_hello_check(&m.u.hello, &h, why, sizeof(why)), 0);
    CHECK(m.u.hello.job == h.job);
    CHECK_EQ(m.u.hello.consumer, UINT32_MAX);
    CHECK_EQ(weir__wire_encode_hello(g, &m.u.hello), n);
    CHECK(memcmp(f, g, n) == 0);

    int64_t wms[] = {INT64_MIN, -1, 0, 1234567890123, INT64_MAX};
    for (size_t i = 0; i < sizeof(wms) / sizeof(wms[0]); i++) {
        n = weir__wire_encode_watermark(f, wms[i]);
        CHECK_EQ(n, WEIR__WIRE_WATERMARK_SIZE);
        m = decode_ok(f, n, WEIR__WIRE_WATERMARK);
        CHECK_EQ(m.u.wm, wms[i]);
    }

    n = weir__wire_encode_barrier(f, UINT64_MAX, WEIR__WIRE_BARRIER_ALIGNED);
    CHECK_EQ(n, WEIR__WIRE_BARRIER_SIZE);
    m = decode_ok(f, n, WEIR__WIRE_BARRIER);
    CHECK(m.u.barrier.id == UINT64_MAX);
    CHECK_EQ(m.u.barrier.kind, WEIR__WIRE_BARRIER_ALIGNED);

    n = weir__wire_encode_end(f);
    CHECK_EQ(n, WEIR__WIRE_END_SIZE);
    decode_ok(f, n, WEIR__WIRE_END);

    for (int idle = 0; idle <= 1; idle++) {
        n = weir__wire_encode_idle(f, idle);
        CHECK_EQ(n, WEIR__WIRE_IDLE_SIZE);
        m = decode_ok(f, n, WEIR__WIRE_IDLE);
        CHECK_EQ(m.u.idle, idle);
    }

    uint32_t credits[] = {1, 8, UINT32_MAX};
    for (size_t i = 0; i < sizeof(credits) / sizeof(credits[0]); i++) {
        n = weir__wire_encode_credit(f, credits[i]);
        CHECK_EQ(n, WEIR__WIRE_CREDIT_SIZE);
        m = decode_ok(f, n, WEIR__WIRE_CREDIT);
        CHECK_EQ(m.u.credits, credits[i]);
    }
}

/* Every valid frame of the tests below, for truncation and trailing bytes. */
typedef struct sample {
    const char *name; /* how its refusals begin */
    uint8_t *frame;
    size_t size;
} sample;

static void keep(sample *s, const char *name, const uint8_t *frame, size_t size)
{
    s->name = name;
    s->size = size;
    s->frame = malloc(size);
    CHECK(s->frame);
    memcpy(s->frame, frame, size);
}

static int samples(sample *s)
{
    batch *b = small_batch();
    s[0].name = "batch";
    s[0].frame = encode(b, &s[0].size);
    weir__batch_free(b);
    uint8_t f[WEIR__WIRE_CTRL_MAX];
    weir__wire_hello h = {42, 1, 2, 3, 4, 5};
    keep(&s[1], "hello", f, weir__wire_encode_hello(f, &h));
    keep(&s[2], "watermark", f, weir__wire_encode_watermark(f, -7));
    keep(&s[3], "barrier", f, weir__wire_encode_barrier(f, 9, WEIR__WIRE_BARRIER_ALIGNED));
    keep(&s[4], "end", f, weir__wire_encode_end(f));
    keep(&s[5], "idle", f, weir__wire_encode_idle(f, 1));
    keep(&s[6], "credit", f, weir__wire_encode_credit(f, 3));
    return 7;
}

TEST(truncated_at_every_offset_is_refused)
{
    sample s[8];
    int n = samples(s);
    for (int i = 0; i < n; i++) {
        const uint8_t *body = s[i].frame + WEIR_FRAME_HEADER;
        size_t len = s[i].size - WEIR_FRAME_HEADER;
        refused(body, 0, -EBADMSG, "empty frame");
        char want[64];
        snprintf(want, sizeof(want), "%s: ", s[i].name);
        for (size_t cut = 1; cut < len; cut++) {
            refused(body, cut, -EBADMSG, want);
            refused(body, cut, -EBADMSG, "cut short");
        }
        free(s[i].frame);
    }
}

TEST(trailing_byte_is_refused)
{
    sample s[8];
    int n = samples(s);
    for (int i = 0; i < n; i++) {
        size_t len = s[i].size - WEIR_FRAME_HEADER;
        uint8_t *body = malloc(len + 1);
        CHECK(body);
        memcpy(body, s[i].frame + WEIR_FRAME_HEADER, len);
        body[len] = 0;
        char want[64];
        snprintf(want, sizeof(want), "%s: 1 trailing bytes", s[i].name);
        refused(body, len + 1, -EBADMSG, want);
        free(body);
        free(s[i].frame);
    }
}

/* Offsets in a BATCH payload (kind byte at 0) of record i's header fields. */
#define AT_COUNT  1u
#define AT_DATA   5u
#define AT_LEN(i) (9u + 13u * (i) + 8u)
#define AT_KG(i)  (9u + 13u * (i) + 12u)

TEST(batch_count_and_data_caps)
{
    uint8_t body[9] = {WEIR__WIRE_BATCH};
    weir__put_be32(body + AT_COUNT, WEIR_BATCH_RECORDS + 1);
    refused(body, sizeof(body), -EMSGSIZE, "batch: count 1025 exceeds the 1024-record cap");
    weir__put_be32(body + AT_COUNT, UINT32_MAX);
    refused(body, sizeof(body), -EMSGSIZE, "batch: count 4294967295 exceeds");
    weir__put_be32(body + AT_COUNT, 0);
    weir__put_be32(body + AT_DATA, WEIR__WIRE_MAX_DATA + 1);
    refused(body, sizeof(body), -EMSGSIZE,
            "batch: 16777217 data bytes exceed the 16777216-byte cap");
    /* A count the frame has no room for. */
    weir__put_be32(body + AT_COUNT, 1000);
    weir__put_be32(body + AT_DATA, 0);
    refused(body, sizeof(body), -EBADMSG, "batch: record headers cut short (0 of 13000 bytes");
}

TEST(record_length_cap)
{
    /* One record claiming one byte more than a record may have; the bytes
     * never come: the cap is checked from the header alone. */
    uint8_t body[9 + 13] = {WEIR__WIRE_BATCH};
    weir__put_be32(body + AT_COUNT, 1);
    weir__put_be32(body + AT_DATA, WEIR_MAX_RECORD);
    weir__put_be32(body + AT_LEN(0), WEIR_MAX_RECORD + 1);
    body[AT_KG(0)] = NO_KG;
    refused(body, sizeof(body), -EMSGSIZE,
            "batch: record 0 length 16777217 exceeds the 16777216-byte record cap");
}

TEST(lengths_that_do_not_sum_to_the_data_are_refused)
{
    batch *b = small_batch(); /* 7 records, 96 bytes */
    size_t size;
    uint8_t *f = encode(b, &size);
    uint8_t *body = f + WEIR_FRAME_HEADER;
    size_t len = size - WEIR_FRAME_HEADER;
    uint32_t n = b->n;
    uint32_t l3 = weir__get_be32(body + AT_LEN(3));
    weir__put_be32(body + AT_LEN(3), l3 + 1);
    refused(body, len, -EBADMSG, "batch: record lengths sum to 97 bytes, the header says 96");
    weir__put_be32(body + AT_LEN(3), l3 - 1);
    refused(body, len, -EBADMSG, "batch: record lengths sum to 95 bytes, the header says 96");
    /* Lengths moved between records: the sum holds, the frame is valid
     * and carries other records (the wire cannot tell; nothing breaks). */
    weir__put_be32(body + AT_LEN(3), l3 + 1);
    weir__put_be32(body + AT_LEN(0), weir__get_be32(body + AT_LEN(0)) - 1);
    weir__wire_msg m;
    char why[256];
    CHECK_EQ(decode(body, len, &m, why, sizeof(why)), 0);
    CHECK_EQ(m.u.b->len[3], l3 + 1);
    weir__wire_msg_free(&m);
    /* The header's data bytes disagreeing with both. */
    weir__put_be32(body + AT_DATA, 200);
    refused(body, len, -EBADMSG, "the header says 200");
    /* Lengths that would overflow 32 bits if summed there. */
    for (uint32_t i = 0; i < n; i++)
        weir__put_be32(body + AT_LEN(i), WEIR_MAX_RECORD);
    weir__put_be32(body + AT_DATA, 0);
    refused(body, len, -EBADMSG, "batch: record lengths sum to 117440512 bytes, the header says 0");
    free(f);
    weir__batch_free(b);
}

TEST(bad_key_group_is_refused)
{
    batch *b = small_batch();
    size_t size;
    uint8_t *f = encode(b, &size);
    uint8_t *body = f + WEIR_FRAME_HEADER;
    size_t len = size - WEIR_FRAME_HEADER;
    int bad[] = {WEIR_KEY_GROUPS, 200, NO_KG - 1};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        uint8_t was = body[AT_KG(2)];
        body[AT_KG(2)] = (uint8_t)bad[k];
        char want[128];
        snprintf(want, sizeof(want),
                 "batch: record 2 key group %d is neither below 128 nor 255 (none)", bad[k]);
        refused(body, len, -EBADMSG, want);
        body[AT_KG(2)] = was;
    }
    /* The edges that are legal. */
    body[AT_KG(2)] = WEIR_KEY_GROUPS - 1;
    body[AT_KG(3)] = NO_KG;
    weir__wire_msg m;
    char why[256];
    CHECK_EQ(decode(body, len, &m, why, sizeof(why)), 0);
    CHECK_EQ(m.u.b->kg[2], WEIR_KEY_GROUPS - 1);
    CHECK_EQ(m.u.b->kg[3], NO_KG);
    weir__wire_msg_free(&m);
    free(f);
    weir__batch_free(b);
}

TEST(unknown_kind_and_bad_control_values_are_refused)
{
    uint8_t k0[] = {0}, k8[] = {8, 0, 0, 0, 0}, kff[] = {255};
    refused(k0, sizeof(k0), -EBADMSG, "unknown frame kind 0");
    refused(k8, sizeof(k8), -EBADMSG, "unknown frame kind 8");
    refused(kff, sizeof(kff), -EBADMSG, "unknown frame kind 255");

    uint8_t f[WEIR__WIRE_CTRL_MAX];
    weir__wire_hello h = {1, 2, 3, 4, 5, 6};
    size_t n = weir__wire_encode_hello(f, &h);
    f[5] = 2;
    refused(f + 4, n - 4, -EBADMSG, "hello: wire version 2, this weir speaks 1");
    h.credits = 0;
    n = weir__wire_encode_hello(f, &h);
    refused(f + 4, n - 4, -EBADMSG, "hello: zero credits");

    n = weir__wire_encode_barrier(f, 5, 1);
    refused(f + 4, n - 4, -EBADMSG, "barrier: unknown barrier kind 1");
    n = weir__wire_encode_idle(f, 1);
    f[5] = 2;
    refused(f + 4, n - 4, -EBADMSG, "idle: value 2 is neither 0 (active) nor 1 (idle)");
    n = weir__wire_encode_credit(f, 0);
    refused(f + 4, n - 4, -EBADMSG, "credit: zero credits");
}

TEST(oversized_frame_is_refused_from_its_length)
{
    size_t len = WEIR__WIRE_MAX_FRAME + 1;
    uint8_t *body = calloc(1, len);
    CHECK(body);
    body[0] = WEIR__WIRE_WATERMARK;
    refused(body, len, -EMSGSIZE, "frame of 16790538 bytes exceeds the 16790537-byte cap");
    free(body);
}

TEST(hello_check_names_the_field)
{
    weir__wire_hello want = {0xabcdef, 1, 2, 3, 4, 5};
    weir__wire_hello got = want;
    char why[256];
    CHECK_EQ(weir__wire_hello_check(&got, &want, why, sizeof(why)), 0);
    CHECK_STR(why, "");
    got.job = 0x1234;
    CHECK_EQ(weir__wire_hello_check(&got, &want, why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, "hello: job 0000000000001234, expected 0000000000abcdef");
    struct {
        uint32_t *f;
        const char *text;
    } c[] = {
        {&got.channel, "hello: channel 101, expected 1"},
        {&got.producer, "hello: producer subtask 102, expected 2"},
        {&got.consumer, "hello: consumer subtask 103, expected 3"},
        {&got.input, "hello: consumer input 104, expected 4"},
        {&got.credits, "hello: credits 105, expected 5"},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        got = want;
        *c[i].f += 100;
        CHECK_EQ(weir__wire_hello_check(&got, &want, why, sizeof(why)), -EBADMSG);
        CHECK_STR(why, c[i].text);
    }
}

TEST(out_of_memory_decoding_a_batch_loses_nothing)
{
    batch *b = small_batch();
    size_t size;
    uint8_t *f = encode(b, &size);
    weir__wire_msg m;
    char why[256];
    weir__alloc_fail_after(0);
    int e = weir__wire_decode(f + 4, size - 4, &m, why, sizeof(why));
    weir__alloc_fail_after(-1);
    CHECK_EQ(e, -ENOMEM);
    CHECK_HAS(why, "batch: no memory for 7 records");
    CHECK_EQ(m.kind, 0);
    /* And the same bytes decode once memory is back. */
    CHECK_EQ(weir__wire_decode(f + 4, size - 4, &m, why, sizeof(why)), 0);
    CHECK_EQ(m.u.b->n, 7);
    weir__wire_msg_free(&m);
    free(f);
    weir__batch_free(b);
}

TEST(why_may_be_small_or_absent)
{
    uint8_t k0[] = {0};
    weir__wire_msg m;
    char why[8];
    CHECK_EQ(weir__wire_decode(k0, 1, &m, why, sizeof(why)), -EBADMSG);
    CHECK_STR(why, "unknown");
    CHECK_EQ(weir__wire_decode(k0, 1, &m, NULL, 0), -EBADMSG);
}

TEST_MAIN()
