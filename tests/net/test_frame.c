/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_frame.c - frames (weir/net.h): the builder and the bounds-checked
 * reader (round trip, an underrun at every field, count and string
 * bounds, sticky errors, additive tails), the stream parser (byte at a
 * time, caps on the header alone, the first frame's cap, memory that
 * follows the bytes that arrived, EOF inside a frame), and frames on
 * sockets (oversize headers leave the body unread, bodies trickling in,
 * reads that time out and resume, peers that close mid-frame, short
 * writes, write deadlines, a stackless reader, a framed echo over TCP on
 * the multi-threaded runtime).
 *
 * Payloads under test are copied into buffers of their exact size, so that
 * ASan reports any read past the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"
#include "test_rt.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/rt.h"

static int64_t after_ms(int64_t ms)
{
    return weir_time_after_ms(ms);
}

static intptr_t join(weir_task *t)
{
    intptr_t v = -1;
    CHECK_EQ(weir_task_join(t, &v, WEIR_FOREVER), 0);
    return v;
}

static uint8_t *dup_exact(const void *p, size_t n)
{
    uint8_t *q = malloc(n ? n : 1);
    CHECK(q != NULL);
    if (n)
        memcpy(q, p, n);
    return q;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* ---- builder and reader --------------------------------------------------------------- */
enum { KIND_SAMPLE = 42 };

/* A message with one field of every type. */
static void build_sample(weir_frame_builder *b)
{
    CHECK_EQ(weir_frame_builder_init(b, KIND_SAMPLE), 0);
    CHECK_EQ(weir_frame_put_u8(b, 0xab), 0);
    CHECK_EQ(weir_frame_put_u16(b, 0x1234), 0);
    CHECK_EQ(weir_frame_put_u32(b, 0xdeadbeef), 0);
    CHECK_EQ(weir_frame_put_u64(b, UINT64_C(0x0102030405060708)), 0);
    CHECK_EQ(weir_frame_put_str(b, "worker-7"), 0);
    CHECK_EQ(weir_frame_put_str(b, ""), 0);
    CHECK_EQ(weir_frame_put_bytes(b, "\0\1\2", 3), 0);
    CHECK_EQ(weir_frame_put_u32(b, 3), 0); /* a count of 3 u16 items */
    for (uint16_t i = 0; i < 3; i++)
        CHECK_EQ(weir_frame_put_u16(b, (uint16_t)(100 + i)), 0);
    CHECK_EQ(weir_frame_put_raw(b, "RAW!", 4), 0);
}

/* Decode the sample; returns the first error (0 if it all decoded) and
 * checks every value that decoded. */
static int decode_sample(const uint8_t *p, size_t n)
{
    weir_frame_reader r;
    weir_frame_reader_init(&r, p, n);
    uint8_t kind, u8;
    uint16_t u16;
    uint32_t u32, count;
    uint64_t u64;
    char name[16], empty[4];
    const uint8_t *bytes;
    size_t blen;
    char raw[4];
    int first = 0;
#define STEP(call, ok)                                                                             \
    do {                                                                                           \
        int e_ = (call);                                                                           \
        CHECK_LE(r.pos, r.len);                                                                    \
        if (e_ == 0) {                                                                             \
            CHECK_EQ(first, 0); /* no success after a failure */                                   \
            CHECK(ok);                                                                             \
        } else {                                                                                   \
            if (!first)                                                                            \
                first = e_;                                                                        \
            CHECK_EQ(e_, first); /* sticky */                                                      \
        }                                                                                          \
    } while (0)
    STEP(weir_frame_get_u8(&r, &kind), kind == KIND_SAMPLE);
    STEP(weir_frame_get_u8(&r, &u8), u8 == 0xab);
    if (first)
        CHECK_EQ(u8, 0);
    STEP(weir_frame_get_u16(&r, &u16), u16 == 0x1234);
    if (first)
        CHECK_EQ(u16, 0);
    STEP(weir_frame_get_u32(&r, &u32), u32 == 0xdeadbeef);
    if (first)
        CHECK_EQ(u32, 0);
    STEP(weir_frame_get_u64(&r, &u64), u64 == UINT64_C(0x0102030405060708));
    if (first)
        CHECK_EQ(u64, 0);
    STEP(weir_frame_get_str(&r, name, sizeof(name)), strcmp(name, "worker-7") == 0);
    if (first)
        CHECK_STR(name, "");
    STEP(weir_frame_get_str(&r, empty, sizeof(empty)), empty[0] == '\0');
    STEP(weir_frame_get_bytes(&r, &bytes, &blen), blen == 3 && memcmp(bytes, "\0\1\2", 3) == 0);
    if (first)
        CHECK(bytes == NULL && blen == 0);
    STEP(weir_frame_get_count(&r, 2, &count), count == 3);
    if (first)
        CHECK_EQ(count, 0);
    for (uint32_t i = 0; i < 3; i++)
        STEP(weir_frame_get_u16(&r, &u16), u16 == 100 + i);
    STEP(weir_frame_get_raw(&r, raw, 4), memcmp(raw, "RAW!", 4) == 0);
    if (!first)
        CHECK(weir_frame_at_end(&r));
    CHECK_EQ(weir_frame_reader_error(&r), first);
#undef STEP
    return first;
}

TEST(builder_reader_round_trip)
{
    weir_frame_builder b;
    build_sample(&b);
    const uint8_t *f;
    size_t n;
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &n), 0);
    CHECK_GT(n, WEIR_FRAME_HEADER);
    /* Header: big-endian payload length; then the kind. */
    uint32_t len = (uint32_t)f[0] << 24 | (uint32_t)f[1] << 16 | (uint32_t)f[2] << 8 | f[3];
    CHECK_EQ(len, n - WEIR_FRAME_HEADER);
    CHECK_EQ(f[4], KIND_SAMPLE);
    /* u16 0x1234 is stored big-endian right after kind and u8 */
    CHECK_EQ(f[6], 0x12);
    CHECK_EQ(f[7], 0x34);
    uint8_t *payload = dup_exact(f + WEIR_FRAME_HEADER, n - WEIR_FRAME_HEADER);
    CHECK_EQ(decode_sample(payload, n - WEIR_FRAME_HEADER), 0);
    free(payload);
    weir_frame_builder_close(&b);
}

/* Every truncation of the payload fails cleanly at the field it cuts,
 * with -EBADMSG, and never reads past the end. */
TEST(reader_underrun_at_every_field)
{
    weir_frame_builder b;
    build_sample(&b);
    const uint8_t *f;
    size_t n;
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &n), 0);
    size_t plen = n - WEIR_FRAME_HEADER;
    for (size_t cut = 0; cut < plen; cut++) {
        uint8_t *p = dup_exact(f + WEIR_FRAME_HEADER, cut);
        CHECK_EQ(decode_sample(p, cut), -EBADMSG);
        free(p);
    }
    weir_frame_builder_close(&b);
    /* A NULL payload reads as empty. */
    weir_frame_reader r;
    weir_frame_reader_init(&r, NULL, 10);
    uint8_t v = 1;
    CHECK(weir_frame_at_end(&r));
    CHECK_EQ(weir_frame_get_u8(&r, &v), -EBADMSG);
    CHECK_EQ(v, 0);
}

/* A failed get consumes nothing, and the error sticks even for a get that
 * would fit. */
TEST(reader_errors_stick)
{
    uint8_t p[3] = {1, 2, 3};
    uint8_t *q = dup_exact(p, sizeof(p));
    weir_frame_reader r;
    weir_frame_reader_init(&r, q, sizeof(p));
    uint32_t v32 = 7;
    CHECK_EQ(weir_frame_get_u32(&r, &v32), -EBADMSG);
    CHECK_EQ(v32, 0);
    CHECK_EQ(weir_frame_remaining(&r), 3);
    uint8_t v8 = 9;
    CHECK_EQ(weir_frame_get_u8(&r, &v8), -EBADMSG);
    CHECK_EQ(v8, 0);
    CHECK_EQ(weir_frame_reader_error(&r), -EBADMSG);
    free(q);
}

/* A count is refused when its smallest encoding does not fit in what is
 * left, so it can size an allocation safely. */
TEST(reader_count_bound)
{
    uint8_t buf[4 + 16];
    memset(buf, 0, sizeof(buf));
    struct {
        uint32_t count;
        size_t min;
        int ok;
    } cases[] = {
        {16, 1, 1},       {17, 1, 0}, {8, 2, 1},          {9, 2, 0},
        {2, 8, 1},        {3, 8, 0},  {16, 0, 1},         {17, 0, 0},
        {0, 1000, 1},     {1, 17, 0}, {UINT32_MAX, 1, 0}, {UINT32_MAX, SIZE_MAX, 0},
        {1, SIZE_MAX, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        put_be32(buf, cases[i].count);
        uint8_t *q = dup_exact(buf, sizeof(buf));
        weir_frame_reader r;
        weir_frame_reader_init(&r, q, sizeof(buf));
        uint32_t n = 99;
        int e = weir_frame_get_count(&r, cases[i].min, &n);
        if (cases[i].ok) {
            CHECK_EQ(e, 0);
            CHECK_EQ(n, cases[i].count);
            CHECK_EQ(weir_frame_remaining(&r), 16);
        } else {
            CHECK_EQ(e, -EBADMSG);
            CHECK_EQ(n, 0);
            CHECK_EQ(weir_frame_remaining(&r), sizeof(buf)); /* nothing consumed */
        }
        free(q);
    }
    /* A count cut short */
    uint8_t two[2] = {0, 0};
    weir_frame_reader r;
    weir_frame_reader_init(&r, two, 2);
    uint32_t n;
    CHECK_EQ(weir_frame_get_count(&r, 1, &n), -EBADMSG);
}

/* Strings and byte strings whose length runs past the end; bounds on C
 * strings; NUL bytes. */
TEST(reader_string_bounds)
{
    uint8_t buf[4 + 10];
    memset(buf, 'x', sizeof(buf));
    /* length 100, 10 bytes follow */
    put_be32(buf, 100);
    uint8_t *q = dup_exact(buf, sizeof(buf));
    weir_frame_reader r;
    const uint8_t *p;
    size_t n;
    char s[256];
    weir_frame_reader_init(&r, q, sizeof(buf));
    CHECK_EQ(weir_frame_get_bytes(&r, &p, &n), -EBADMSG);
    CHECK(p == NULL);
    CHECK_EQ(n, 0);
    CHECK_EQ(weir_frame_remaining(&r), sizeof(buf));
    weir_frame_reader_init(&r, q, sizeof(buf));
    CHECK_EQ(weir_frame_get_str(&r, s, sizeof(s)), -EBADMSG);
    CHECK_STR(s, "");
    char *d = (char *)1;
    weir_frame_reader_init(&r, q, sizeof(buf));
    CHECK_EQ(weir_frame_get_strdup(&r, 1000, &d), -EBADMSG);
    CHECK(d == NULL);
    /* length UINT32_MAX */
    put_be32(q, UINT32_MAX);
    weir_frame_reader_init(&r, q, sizeof(buf));
    CHECK_EQ(weir_frame_get_bytes(&r, &p, &n), -EBADMSG);
    free(q);

    /* 255 bytes fit a 256-byte buffer; 256 do not. */
    weir_frame_builder b;
    char big[257];
    memset(big, 'w', sizeof(big));
    big[255] = '\0';
    CHECK_EQ(weir_frame_builder_init(&b, 1), 0);
    CHECK_EQ(weir_frame_put_str(&b, big), 0);
    big[255] = 'w';
    big[256] = '\0';
    CHECK_EQ(weir_frame_put_str(&b, big), 0);
    CHECK_EQ(weir_frame_put_bytes(&b, "a\0b", 3), 0);
    CHECK_EQ(weir_frame_put_str(&b, "tail"), 0);
    const uint8_t *f;
    size_t fl;
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &fl), 0);
    q = dup_exact(f + 5, fl - 5); /* skip header and kind */
    weir_frame_reader_init(&r, q, fl - 5);
    CHECK_EQ(weir_frame_get_str(&r, s, sizeof(s)), 0);
    CHECK_EQ(strlen(s), 255);
    size_t before = weir_frame_remaining(&r);
    CHECK_EQ(weir_frame_get_str(&r, s, sizeof(s)), -EMSGSIZE);
    CHECK_EQ(weir_frame_remaining(&r), before);
    /* strdup with its own bound */
    weir_frame_reader_init(&r, q, fl - 5);
    CHECK_EQ(weir_frame_get_strdup(&r, 255, &d), 0);
    CHECK_EQ(strlen(d), 255);
    free(d);
    CHECK_EQ(weir_frame_get_strdup(&r, 255, &d), -EMSGSIZE);
    CHECK(d == NULL);
    /* A NUL inside: fine as bytes, refused as a C string. */
    weir_frame_reader_init(&r, q, fl - 5);
    CHECK_EQ(weir_frame_get_bytes(&r, &p, &n), 0);
    CHECK_EQ(weir_frame_get_bytes(&r, &p, &n), 0);
    before = weir_frame_remaining(&r);
    CHECK_EQ(weir_frame_get_str(&r, s, sizeof(s)), -EBADMSG);
    CHECK_EQ(weir_frame_remaining(&r), before);
    weir_frame_reader_init(&r, q, fl - 5);
    CHECK_EQ(weir_frame_get_bytes(&r, &p, &n), 0);
    CHECK_EQ(weir_frame_get_bytes(&r, &p, &n), 0);
    CHECK_EQ(weir_frame_get_strdup(&r, 100, &d), -EBADMSG);
    weir_frame_reader_init(&r, q, fl - 5);
    CHECK_EQ(weir_frame_get_bytes(&r, &p, &n), 0);
    CHECK_EQ(weir_frame_get_bytes(&r, &p, &n), 0);
    CHECK_EQ(weir_frame_get_bytes(&r, &p, &n), 0);
    CHECK_EQ(n, 3);
    CHECK(memcmp(p, "a\0b", 3) == 0);
    CHECK_EQ(weir_frame_get_str(&r, s, 5), 0);
    CHECK_STR(s, "tail");
    CHECK(weir_frame_at_end(&r));
    /* A zero-sized buffer is a caller error. */
    weir_frame_reader_init(&r, q, fl - 5);
    CHECK_EQ(weir_frame_get_str(&r, s, 0), -EINVAL);
    free(q);
    weir_frame_builder_close(&b);
}

/* Additive tails: a newer decoder reads an older, shorter message and gives
 * the missing trailing fields their defaults. */
static int decode_register(const uint8_t *p, size_t n, uint32_t *slots, uint16_t *http_port)
{
    weir_frame_reader r;
    weir_frame_reader_init(&r, p, n);
    uint8_t kind;
    char id[64];
    weir_frame_get_u8(&r, &kind);
    weir_frame_get_str(&r, id, sizeof(id));
    *slots = 1;
    *http_port = 0;
    if (!weir_frame_at_end(&r))
        weir_frame_get_u32(&r, slots);
    if (!weir_frame_at_end(&r))
        weir_frame_get_u16(&r, http_port);
    return weir_frame_reader_error(&r);
}

TEST(reader_additive_tail)
{
    weir_frame_builder b;
    const uint8_t *f;
    size_t n;
    uint32_t slots;
    uint16_t port;
    /* v1: id only */
    CHECK_EQ(weir_frame_builder_init(&b, 1), 0);
    weir_frame_put_str(&b, "w1");
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &n), 0);
    CHECK_EQ(decode_register(f + 4, n - 4, &slots, &port), 0);
    CHECK_EQ(slots, 1);
    CHECK_EQ(port, 0);
    /* v2: + slots */
    weir_frame_builder_reset(&b, 1);
    weir_frame_put_str(&b, "w1");
    weir_frame_put_u32(&b, 8);
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &n), 0);
    CHECK_EQ(decode_register(f + 4, n - 4, &slots, &port), 0);
    CHECK_EQ(slots, 8);
    CHECK_EQ(port, 0);
    /* v3: + http port, and a v4 field this decoder ignores */
    weir_frame_builder_reset(&b, 1);
    weir_frame_put_str(&b, "w1");
    weir_frame_put_u32(&b, 8);
    weir_frame_put_u16(&b, 8081);
    weir_frame_put_u64(&b, 77);
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &n), 0);
    CHECK_EQ(decode_register(f + 4, n - 4, &slots, &port), 0);
    CHECK_EQ(slots, 8);
    CHECK_EQ(port, 8081);
    weir_frame_builder_close(&b);
}

TEST(builder_errors_and_ownership)
{
    weir_frame_builder b;
    const uint8_t *f;
    size_t n;
    /* An error sticks until finish reports it. */
    CHECK_EQ(weir_frame_builder_init(&b, 3), 0);
    CHECK_EQ(weir_frame_put_str(&b, NULL), -EINVAL);
    CHECK_EQ(weir_frame_put_u8(&b, 1), -EINVAL);
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &n), -EINVAL);
    CHECK(f == NULL);
    CHECK_EQ(n, 0);
    CHECK(weir_frame_builder_take(&b, &n) == NULL);
    /* More than a u32 can count: refused before any allocation. */
    weir_frame_builder_reset(&b, 3);
    CHECK_EQ(weir_frame_put_bytes(&b, "x", (size_t)UINT32_MAX + 1), -EMSGSIZE);
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &n), -EMSGSIZE);
    weir_frame_builder_reset(&b, 3);
    CHECK_EQ(weir_frame_put_raw(&b, "x", SIZE_MAX - 2), -EMSGSIZE);
    weir_frame_builder_reset(&b, 3);
    CHECK_EQ(weir_frame_put_raw(&b, NULL, 1), -EINVAL);
    /* Reset clears the error and reuses the buffer. */
    weir_frame_builder_reset(&b, 9);
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &n), 0);
    CHECK_EQ(n, 5);
    CHECK_EQ(f[3], 1);
    CHECK_EQ(f[4], 9);
    /* Take hands the buffer over; the builder is empty afterwards. */
    CHECK_EQ(weir_frame_put_u16(&b, 0x0102), 0);
    uint8_t *own = weir_frame_builder_take(&b, &n);
    CHECK(own != NULL);
    CHECK_EQ(n, 7);
    CHECK_EQ(own[3], 3);
    CHECK_EQ(own[5], 1);
    CHECK_EQ(own[6], 2);
    free(own);
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &n), -EINVAL);
    weir_frame_builder_close(&b); /* harmless on an empty builder */
    /* A large frame grows the buffer correctly. */
    CHECK_EQ(weir_frame_builder_init(&b, 4), 0);
    for (uint32_t i = 0; i < 100000; i++)
        CHECK_EQ(weir_frame_put_u32(&b, i), 0);
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &n), 0);
    CHECK_EQ(n, 4 + 1 + 400000);
    weir_frame_reader r;
    weir_frame_reader_init(&r, f + 5, n - 5);
    for (uint32_t i = 0; i < 100000; i++) {
        uint32_t v;
        CHECK_EQ(weir_frame_get_u32(&r, &v), 0);
        CHECK_EQ(v, i);
    }
    CHECK(weir_frame_at_end(&r));
    weir_frame_builder_close(&b);
}

/* ---- the parser on byte buffers ------------------------------------------------------- */
/* Three frames back to back: the sample, a 1-byte frame, a 200 KiB one. */
static uint8_t *three_frames(size_t *len, size_t lens[3])
{
    weir_frame_builder b;
    const uint8_t *f;
    size_t n;
    build_sample(&b);
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &n), 0);
    uint8_t *out = malloc(n + 5 + 4 + 1 + 200 * 1024 + 64);
    CHECK(out != NULL);
    memcpy(out, f, n);
    size_t off = n;
    lens[0] = n - 4;
    weir_frame_builder_reset(&b, 7);
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &n), 0);
    memcpy(out + off, f, n);
    off += n;
    lens[1] = 1;
    weir_frame_builder_reset(&b, 8);
    for (uint32_t i = 0; i < 200 * 1024 - 1; i++)
        weir_frame_put_u8(&b, (uint8_t)(i * 7));
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &n), 0);
    memcpy(out + off, f, n);
    off += n;
    lens[2] = 200 * 1024;
    weir_frame_builder_close(&b);
    *len = off;
    return out;
}

static void check_three(weir_frame got[3], const size_t lens[3])
{
    for (int i = 0; i < 3; i++)
        CHECK_EQ(got[i].len, lens[i]);
    CHECK_EQ(decode_sample(got[0].data, got[0].len), 0);
    CHECK_EQ(weir_frame_kind(&got[1]), 7);
    CHECK_EQ(weir_frame_kind(&got[2]), 8);
    for (uint32_t i = 0; i < 200 * 1024 - 1; i++)
        CHECK_EQ(got[2].data[1 + i], (uint8_t)(i * 7));
}

/* Feed the stream in pieces of `step` bytes (0: pseudo-random sizes). */
static void feed_in_steps(size_t step)
{
    size_t len, lens[3];
    uint8_t *s = three_frames(&len, lens);
    weir_frame_limits lim = {.max_frame = 1 << 20};
    weir_frame_parser p;
    CHECK_EQ(weir_frame_parser_init(&p, &lim), 0);
    weir_frame got[3];
    int nf = 0;
    size_t off = 0;
    uint32_t rnd = 12345;
    while (off < len) {
        size_t k = step;
        if (!k) {
            rnd = rnd * 1103515245 + 12345;
            k = 1 + (rnd >> 8) % 70000;
        }
        if (k > len - off)
            k = len - off;
        size_t pos = 0;
        while (pos < k) {
            size_t used = 0;
            weir_frame fr;
            int r = weir_frame_parser_feed(&p, s + off + pos, k - pos, &used, &fr);
            CHECK_GE(r, 0);
            CHECK_LE(used, k - pos);
            pos += used;
            if (r == 1) {
                CHECK_LT(nf, 3);
                got[nf++] = fr;
            } else {
                CHECK_EQ(pos, k); /* 0: everything taken */
            }
        }
        off += k;
    }
    CHECK_EQ(nf, 3);
    CHECK_EQ(weir_frame_parser_eof(&p), 0);
    CHECK_EQ(weir_frame_parser_memory(&p), 0);
    check_three(got, lens);
    for (int i = 0; i < 3; i++)
        weir_frame_free(&got[i]);
    weir_frame_parser_close(&p);
    free(s);
}

TEST(parser_byte_at_a_time)
{
    feed_in_steps(1);
}

TEST(parser_random_splits)
{
    feed_in_steps(0);
}

TEST(parser_whole_buffer)
{
    feed_in_steps(1 << 20);
}

TEST(parser_zero_length_frame)
{
    weir_frame_parser p;
    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    uint8_t z[8] = {0, 0, 0, 0, 0, 0, 0, 1};
    size_t used;
    weir_frame f;
    CHECK_EQ(weir_frame_parser_feed(&p, z, sizeof(z), &used, &f), -EBADMSG);
    CHECK_EQ(used, 4); /* the header, nothing after it */
    CHECK(f.data == NULL);
    /* Final: it stays refused. */
    CHECK_EQ(weir_frame_parser_feed(&p, z + 4, 4, &used, &f), -EBADMSG);
    CHECK_EQ(used, 0);
    void *buf;
    CHECK_EQ(weir_frame_parser_space(&p, &buf), -EBADMSG);
    CHECK_EQ(weir_frame_parser_eof(&p), -EBADMSG);
    weir_frame_parser_close(&p);
}

/* Caps apply on the header alone: a refused length allocates nothing and
 * consumes only the 4 header bytes. */
static void header_only(weir_frame_parser *p, uint32_t len, int want)
{
    uint8_t h[4];
    put_be32(h, len);
    size_t used = 99;
    weir_frame f;
    CHECK_EQ(weir_frame_parser_feed(p, h, 4, &used, &f), want);
    CHECK_EQ(used, 4);
}

TEST(parser_caps)
{
    weir_frame_parser p;
    /* Defaults: 64 KiB for the first frame, 256 MiB after. */
    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    header_only(&p, WEIR_FRAME_FIRST_MAX + 1, -EMSGSIZE);
    CHECK_EQ(weir_frame_parser_memory(&p), 0);
    weir_frame_parser_close(&p);

    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    header_only(&p, UINT32_MAX, -EMSGSIZE);
    weir_frame_parser_close(&p);

    /* Exactly the first-frame cap is accepted... */
    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    header_only(&p, WEIR_FRAME_FIRST_MAX, 0);
    uint8_t *body = calloc(1, WEIR_FRAME_FIRST_MAX);
    CHECK(body != NULL);
    size_t used;
    weir_frame f;
    CHECK_EQ(weir_frame_parser_feed(&p, body, WEIR_FRAME_FIRST_MAX, &used, &f), 1);
    CHECK_EQ(f.len, WEIR_FRAME_FIRST_MAX);
    weir_frame_free(&f);
    free(body);
    /* ...and the frames after it get the full cap: 256 MiB accepted on the
     * header (without allocating it), one byte more refused. */
    header_only(&p, WEIR_FRAME_MAX, 0);
    void *buf;
    CHECK_EQ(weir_frame_parser_space(&p, &buf), WEIR_FRAME_CHUNK);
    CHECK_EQ(weir_frame_parser_memory(&p), WEIR_FRAME_CHUNK);
    weir_frame_parser_close(&p);

    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    header_only(&p, 10, 0);
    uint8_t ten[10] = {5};
    CHECK_EQ(weir_frame_parser_feed(&p, ten, 10, &used, &f), 1);
    weir_frame_free(&f);
    header_only(&p, WEIR_FRAME_MAX + 1, -EMSGSIZE);
    weir_frame_parser_close(&p);

    /* Configured caps; a first cap above max_frame is lowered to it. */
    weir_frame_limits lim = {.max_frame = 100, .max_first = 1000};
    CHECK_EQ(weir_frame_parser_init(&p, &lim), 0);
    header_only(&p, 101, -EMSGSIZE);
    weir_frame_parser_close(&p);
    lim = (weir_frame_limits){.max_frame = 100, .max_first = 10};
    CHECK_EQ(weir_frame_parser_init(&p, &lim), 0);
    header_only(&p, 10, 0);
    CHECK_EQ(weir_frame_parser_feed(&p, ten, 10, &used, &f), 1);
    weir_frame_free(&f);
    header_only(&p, 100, 0);
    weir_frame_parser_close(&p);
}

/* Memory follows the bytes that arrived, not the length the header
 * claimed. */
TEST(parser_memory_tracks_arrival)
{
    weir_frame_parser p;
    weir_frame_limits lim = {.max_first = WEIR_FRAME_MAX};
    CHECK_EQ(weir_frame_parser_init(&p, &lim), 0);
    header_only(&p, 200u << 20, 0); /* claims 200 MiB */
    CHECK_EQ(weir_frame_parser_memory(&p), 0);
    uint8_t *chunk = calloc(1, 4096);
    CHECK(chunk != NULL);
    size_t arrived = 0;
    for (int i = 0; i < 512; i++) { /* 2 MiB */
        size_t used;
        weir_frame f;
        CHECK_EQ(weir_frame_parser_feed(&p, chunk, 4096, &used, &f), 0);
        CHECK_EQ(used, 4096);
        arrived += 4096;
        CHECK_LE(weir_frame_parser_memory(&p), 2 * arrived + 2 * WEIR_FRAME_CHUNK);
    }
    /* The stream ends inside the frame: -ECONNRESET, memory released. */
    CHECK_EQ(weir_frame_parser_eof(&p), -ECONNRESET);
    CHECK_EQ(weir_frame_parser_memory(&p), 0);
    CHECK_EQ(weir_frame_parser_eof(&p), -ECONNRESET);
    free(chunk);
    weir_frame_parser_close(&p);
}

TEST(parser_eof_and_misuse)
{
    weir_frame_parser p;
    weir_frame f;
    size_t used;
    /* EOF at a boundary is clean, in the header or body it is not. */
    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    CHECK_EQ(weir_frame_parser_eof(&p), 0);
    uint8_t two[2] = {0, 0};
    CHECK_EQ(weir_frame_parser_feed(&p, two, 2, &used, &f), 0);
    CHECK_EQ(weir_frame_parser_eof(&p), -ECONNRESET);
    weir_frame_parser_close(&p);

    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    header_only(&p, 5, 0);
    CHECK_EQ(weir_frame_parser_eof(&p), -ECONNRESET);
    weir_frame_parser_close(&p);

    /* Committing more than the space offered is refused, not trusted. */
    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    void *buf;
    CHECK_EQ(weir_frame_parser_space(&p, &buf), 4);
    memset(buf, 0, 4);
    CHECK_EQ(weir_frame_parser_commit(&p, 5, &f), -EINVAL); /* changes nothing */
    CHECK_EQ(weir_frame_parser_commit(&p, 3, &f), 0);
    CHECK_EQ(weir_frame_parser_commit(&p, 1, &f), -EINVAL); /* each offer is used once */
    CHECK_EQ(weir_frame_parser_space(&p, &buf), 1);
    *(uint8_t *)buf = 2;
    CHECK_EQ(weir_frame_parser_commit(&p, 1, &f), 0);
    CHECK_EQ(weir_frame_parser_space(&p, &buf), 2); /* never past the frame */
    weir_frame_parser_close(&p);                    /* frees the half frame */
    CHECK_EQ(weir_frame_parser_init(NULL, NULL), -EINVAL);
}

/* ---- frames on sockets ---------------------------------------------------------------- */
static void spair(int sv[2])
{
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

/* Bytes waiting unread in fd, read without waiting. */
static ssize_t drain_now(int fd, void *buf, size_t cap)
{
    return recv(fd, buf, cap, MSG_DONTWAIT);
}

static intptr_t socket_round_trip_main(void *arg)
{
    (void)arg;
    int sv[2];
    spair(sv);
    weir_frame_builder b;
    build_sample(&b);
    const uint8_t *f;
    size_t n;
    CHECK_EQ(weir_frame_builder_finish(&b, &f, &n), 0);
    CHECK_EQ(weir_frame_write(sv[0], f, n, after_ms(5000)), 0);
    CHECK_EQ(weir_frame_send(sv[0], 9, "hello", 5, after_ms(5000)), 0);
    CHECK_EQ(weir_frame_send(sv[0], 10, NULL, 0, after_ms(5000)), 0);
    weir_frame_builder_close(&b);

    weir_frame_parser p;
    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    weir_frame fr;
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), (ssize_t)(n - 4));
    CHECK_EQ(decode_sample(fr.data, fr.len), 0);
    weir_frame_free(&fr);
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), 6);
    CHECK_EQ(weir_frame_kind(&fr), 9);
    CHECK(memcmp(fr.data + 1, "hello", 5) == 0);
    weir_frame_free(&fr);
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), 1);
    CHECK_EQ(weir_frame_kind(&fr), 10);
    weir_frame_free(&fr);
    /* Closed at a boundary: 0, and again 0. */
    CHECK_EQ(weir_io_close(sv[0]), 0);
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), 0);
    CHECK(fr.data == NULL);
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), 0);
    weir_frame_parser_close(&p);
    CHECK_EQ(weir_io_close(sv[1]), 0);
    return 0;
}

TEST(socket_round_trip)
{
    CHECK_EQ(test_run_main(socket_round_trip_main, NULL), 0);
}

/* A header over the cap is refused on its 4 bytes: the body stays unread
 * in the socket, and the parser allocated nothing. */
static intptr_t oversize_main(void *arg)
{
    (void)arg;
    int sv[2];
    spair(sv);
    weir_frame_parser p;
    weir_frame_limits lim = {.max_first = WEIR_FRAME_MAX};
    weir_frame fr;
    uint8_t h[4 + 100];
    memset(h, 0x5a, sizeof(h));

    /* The first frame's cap (64 KiB). */
    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    put_be32(h, WEIR_FRAME_FIRST_MAX + 1);
    CHECK_EQ(send(sv[0], h, sizeof(h), 0), (ssize_t)sizeof(h));
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), -EMSGSIZE);
    CHECK(fr.data == NULL);
    CHECK_EQ(weir_frame_parser_memory(&p), 0);
    uint8_t rest[256];
    CHECK_EQ(drain_now(sv[1], rest, sizeof(rest)), 100);
    CHECK_EQ(rest[0], 0x5a);
    /* Final: the next read fails the same way without touching the socket. */
    CHECK_EQ(send(sv[0], "more", 4, 0), 4);
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), -EMSGSIZE);
    CHECK_EQ(drain_now(sv[1], rest, sizeof(rest)), 4);
    weir_frame_parser_close(&p);

    /* The general cap (256 MiB), after a good frame; 4 GiB claimed. */
    CHECK_EQ(weir_frame_parser_init(&p, &lim), 0);
    CHECK_EQ(weir_frame_send(sv[0], 1, "ok", 2, after_ms(5000)), 0);
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), 3);
    weir_frame_free(&fr);
    put_be32(h, WEIR_FRAME_MAX + 1);
    CHECK_EQ(send(sv[0], h, sizeof(h), 0), (ssize_t)sizeof(h));
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), -EMSGSIZE);
    CHECK_EQ(weir_frame_parser_memory(&p), 0);
    CHECK_EQ(drain_now(sv[1], rest, sizeof(rest)), 100);
    weir_frame_parser_close(&p);

    CHECK_EQ(weir_frame_parser_init(&p, &lim), 0);
    put_be32(h, UINT32_MAX);
    CHECK_EQ(send(sv[0], h, sizeof(h), 0), (ssize_t)sizeof(h));
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), -EMSGSIZE);
    CHECK_EQ(drain_now(sv[1], rest, sizeof(rest)), 100);
    weir_frame_parser_close(&p);

    /* Zero length: no kind byte, not a message. */
    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    put_be32(h, 0);
    CHECK_EQ(send(sv[0], h, 4 + 3, 0), 7);
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), -EBADMSG);
    CHECK_EQ(drain_now(sv[1], rest, sizeof(rest)), 3);
    weir_frame_parser_close(&p);

    CHECK_EQ(weir_io_close(sv[0]), 0);
    CHECK_EQ(weir_io_close(sv[1]), 0);
    return 0;
}

TEST(socket_oversize_header_leaves_body_unread)
{
    CHECK_EQ(test_run_main(oversize_main, NULL), 0);
}

/* A task that writes one frame of `len` body bytes. With `piece` 0 it uses
 * weir_frame_send; otherwise it writes the framed bytes by hand, `piece`
 * at a time with a pause between, stopping after `cut` bytes when cut is
 * set, and closing its socket when close_after is. */
struct writer {
    int fd;
    uint8_t kind;
    const uint8_t *body;
    size_t len;
    size_t piece;
    int pause_ms;
    size_t cut;
    int close_after;
    int result;
};

static intptr_t writer_main(void *arg)
{
    struct writer *w = arg;
    if (!w->piece) {
        w->result = weir_frame_send(w->fd, w->kind, w->body, w->len, after_ms(10000));
    } else {
        size_t total = 5 + w->len;
        uint8_t *s = malloc(total);
        CHECK(s != NULL);
        put_be32(s, (uint32_t)(w->len + 1));
        s[4] = w->kind;
        memcpy(s + 5, w->body, w->len);
        size_t end = w->cut ? w->cut : total;
        for (size_t off = 0; off < end;) {
            size_t k = end - off < w->piece ? end - off : w->piece;
            ssize_t r = weir_io_send(w->fd, s + off, k, 0, after_ms(10000));
            CHECK_GT(r, 0);
            off += (size_t)r;
            if (w->pause_ms)
                weir_time_sleep(w->pause_ms * WEIR_MSEC);
        }
        free(s);
        w->result = 0;
    }
    if (w->close_after)
        CHECK_EQ(weir_io_close(w->fd), 0);
    return 0;
}

static uint8_t *pattern(size_t len, unsigned seed)
{
    uint8_t *b = malloc(len ? len : 1);
    CHECK(b != NULL);
    for (size_t i = 0; i < len; i++)
        b[i] = (uint8_t)(i * 31 + seed + (i >> 12));
    return b;
}

static void check_frame(const weir_frame *fr, uint8_t kind, const uint8_t *body, size_t len)
{
    CHECK_EQ(fr->len, len + 1);
    CHECK_EQ(weir_frame_kind(fr), kind);
    CHECK(memcmp(fr->data + 1, body, len) == 0);
}

/* The first frame may be exactly 64 KiB; the ones after it may be larger. */
static intptr_t first_cap_main(void *arg)
{
    (void)arg;
    int sv[2];
    spair(sv);
    size_t l1 = WEIR_FRAME_FIRST_MAX - 1, l2 = 300 * 1024;
    uint8_t *b1 = pattern(l1, 1), *b2 = pattern(l2, 2);
    struct writer w1 = {.fd = sv[0], .kind = 1, .body = b1, .len = l1};
    struct writer w2 = {.fd = sv[0], .kind = 2, .body = b2, .len = l2};
    weir_frame_parser p;
    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    weir_frame fr;
    weir_task *t = test_spawn(writer_main, &w1);
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(10000)), (ssize_t)WEIR_FRAME_FIRST_MAX);
    check_frame(&fr, 1, b1, l1);
    weir_frame_free(&fr);
    CHECK_EQ(join(t), 0);
    CHECK_EQ(w1.result, 0);
    t = test_spawn(writer_main, &w2);
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(10000)), (ssize_t)(l2 + 1));
    check_frame(&fr, 2, b2, l2);
    weir_frame_free(&fr);
    CHECK_EQ(join(t), 0);
    CHECK_EQ(w2.result, 0);
    weir_frame_parser_close(&p);
    free(b1);
    free(b2);
    CHECK_EQ(weir_io_close(sv[0]), 0);
    CHECK_EQ(weir_io_close(sv[1]), 0);
    return 0;
}

TEST(socket_first_frame_cap)
{
    CHECK_EQ(test_run_main(first_cap_main, NULL), 0);
}

/* A body trickling in a few KiB at a time is assembled in chunks. */
static intptr_t slow_body_main(void *arg)
{
    (void)arg;
    int sv[2];
    spair(sv);
    size_t len = 300 * 1024;
    uint8_t *body = pattern(len, 3);
    struct writer w = {
        .fd = sv[0], .kind = 5, .body = body, .len = len, .piece = 3000, .pause_ms = 1};
    weir_frame_limits lim = {.max_first = WEIR_FRAME_MAX};
    weir_frame_parser p;
    CHECK_EQ(weir_frame_parser_init(&p, &lim), 0);
    weir_task *t = test_spawn(writer_main, &w);
    weir_frame fr;
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(20000)), (ssize_t)(len + 1));
    check_frame(&fr, 5, body, len);
    weir_frame_free(&fr);
    CHECK_EQ(weir_frame_parser_memory(&p), 0);
    CHECK_EQ(join(t), 0);
    weir_frame_parser_close(&p);
    free(body);
    CHECK_EQ(weir_io_close(sv[0]), 0);
    CHECK_EQ(weir_io_close(sv[1]), 0);
    return 0;
}

TEST(socket_slow_body)
{
    CHECK_EQ(test_run_main(slow_body_main, NULL), 0);
}

/* A read that times out mid-frame keeps what arrived; the next read
 * finishes the same frame. The deadline covers the whole frame. */
static intptr_t timeout_resume_main(void *arg)
{
    (void)arg;
    int sv[2];
    spair(sv);
    size_t len = 100 * 1024;
    uint8_t *body = pattern(len, 4);
    weir_frame_limits lim = {.max_first = WEIR_FRAME_MAX};
    weir_frame_parser p;
    CHECK_EQ(weir_frame_parser_init(&p, &lim), 0);
    weir_frame fr;
    /* Half of it, and nothing more for now. */
    struct writer w = {
        .fd = sv[0], .kind = 6, .body = body, .len = len, .piece = 8192, .cut = 5 + len / 2};
    weir_task *t = test_spawn(writer_main, &w);
    CHECK_EQ(join(t), 0);
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(100)), -ETIMEDOUT);
    CHECK_GE(weir_time_now() - t0, 90 * WEIR_MSEC);
    CHECK(fr.data == NULL);
    CHECK_GE(weir_frame_parser_memory(&p), len / 2);
    CHECK_LE(weir_frame_parser_memory(&p), len + 1);
    /* The rest arrives. */
    uint8_t *all = malloc(5 + len);
    CHECK(all != NULL);
    put_be32(all, (uint32_t)(len + 1));
    all[4] = 6;
    memcpy(all + 5, body, len);
    size_t off = 5 + len / 2;
    while (off < 5 + len) {
        ssize_t r = weir_io_send(sv[0], all + off, 5 + len - off, 0, after_ms(5000));
        if (r == -EAGAIN)
            continue;
        CHECK_GT(r, 0);
        off += (size_t)r;
        if (off < 5 + len) {
            /* The socket buffer is full: take what is there. */
            ssize_t g = weir_frame_read(sv[1], &p, &fr, after_ms(10));
            CHECK(g == -ETIMEDOUT || g > 0);
            if (g > 0)
                break;
        }
    }
    if (!fr.data)
        CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), (ssize_t)(len + 1));
    check_frame(&fr, 6, body, len);
    weir_frame_free(&fr);
    free(all);
    free(body);
    weir_frame_parser_close(&p);
    CHECK_EQ(weir_io_close(sv[0]), 0);
    CHECK_EQ(weir_io_close(sv[1]), 0);
    return 0;
}

TEST(socket_read_timeout_resumes)
{
    CHECK_EQ(test_run_main(timeout_resume_main, NULL), 0);
}

/* A peer that closes inside a frame (in the header or in the body):
 * -ECONNRESET, then the same again. */
static intptr_t close_mid_frame_main(void *arg)
{
    (void)arg;
    size_t cuts[] = {1, 2, 3, 4, 5, 6, 4000};
    size_t len = 10000;
    uint8_t *body = pattern(len, 5);
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
        int sv[2];
        spair(sv);
        struct writer w = {.fd = sv[0],
                           .kind = 7,
                           .body = body,
                           .len = len,
                           .piece = 1000,
                           .cut = cuts[i],
                           .close_after = 1};
        weir_task *t = test_spawn(writer_main, &w);
        weir_frame_parser p;
        CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
        weir_frame fr;
        CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), -ECONNRESET);
        CHECK(fr.data == NULL);
        CHECK_EQ(weir_frame_parser_memory(&p), 0);
        CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), -ECONNRESET);
        CHECK_EQ(join(t), 0);
        weir_frame_parser_close(&p);
        CHECK_EQ(weir_io_close(sv[1]), 0);
    }
    free(body);
    return 0;
}

TEST(socket_peer_closes_mid_frame)
{
    CHECK_EQ(test_run_main(close_mid_frame_main, NULL), 0);
}

/* Small socket buffers force many short writes; the frame arrives whole. */
static intptr_t short_writes_main(void *arg)
{
    (void)arg;
    int sv[2];
    spair(sv);
    int small = 4096;
    CHECK_EQ(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
    CHECK_EQ(setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
    size_t len = 4u << 20;
    uint8_t *body = pattern(len, 6);
    struct writer w = {.fd = sv[0], .kind = 8, .body = body, .len = len};
    weir_task *t = test_spawn(writer_main, &w);
    weir_frame_limits lim = {.max_first = WEIR_FRAME_MAX};
    weir_frame_parser p;
    CHECK_EQ(weir_frame_parser_init(&p, &lim), 0);
    weir_frame fr;
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(30000)), (ssize_t)(len + 1));
    check_frame(&fr, 8, body, len);
    weir_frame_free(&fr);
    CHECK_EQ(join(t), 0);
    CHECK_EQ(w.result, 0);
    weir_frame_parser_close(&p);
    free(body);
    CHECK_EQ(weir_io_close(sv[0]), 0);
    CHECK_EQ(weir_io_close(sv[1]), 0);
    return 0;
}

TEST(socket_short_writes)
{
    CHECK_EQ(test_run_main(short_writes_main, NULL), 0);
}

struct frame_writer {
    int fd;
    const uint8_t *frame;
    size_t len;
    int result;
};

static intptr_t frame_writer_main(void *arg)
{
    struct frame_writer *w = arg;
    w->result = weir_frame_write(w->fd, w->frame, w->len, after_ms(30000));
    return 0;
}

static intptr_t write_builder_main(void *arg)
{
    (void)arg;
    int sv[2];
    spair(sv);
    int small = 4096;
    CHECK_EQ(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
    size_t len = 1u << 20;
    uint8_t *body = pattern(len, 7);
    weir_frame_builder b;
    CHECK_EQ(weir_frame_builder_init(&b, 11), 0);
    CHECK_EQ(weir_frame_put_raw(&b, body, len), 0);
    struct frame_writer w = {.fd = sv[0]};
    CHECK_EQ(weir_frame_builder_finish(&b, &w.frame, &w.len), 0);
    weir_task *t = test_spawn(frame_writer_main, &w);
    weir_frame_limits lim = {.max_first = WEIR_FRAME_MAX};
    weir_frame_parser p;
    CHECK_EQ(weir_frame_parser_init(&p, &lim), 0);
    weir_frame fr;
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(30000)), (ssize_t)(len + 1));
    check_frame(&fr, 11, body, len);
    weir_frame_free(&fr);
    CHECK_EQ(join(t), 0);
    CHECK_EQ(w.result, 0);
    weir_frame_builder_close(&b);
    weir_frame_parser_close(&p);
    free(body);
    CHECK_EQ(weir_io_close(sv[0]), 0);
    CHECK_EQ(weir_io_close(sv[1]), 0);
    return 0;
}

TEST(socket_write_builder_frame)
{
    CHECK_EQ(test_run_main(write_builder_main, NULL), 0);
}

/* Writes that cannot finish: a peer that never reads (deadline), a peer
 * that is gone (-EPIPE, and no SIGPIPE: this test leaves SIGPIPE at its
 * default, which would kill the process), and frames that are not frames. */
static intptr_t write_failures_main(void *arg)
{
    (void)arg;
    int sv[2];
    spair(sv);
    size_t len = 8u << 20;
    uint8_t *body = calloc(1, len);
    CHECK(body != NULL);
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_frame_send(sv[0], 1, body, len, after_ms(100)), -ETIMEDOUT);
    CHECK_GE(weir_time_now() - t0, 90 * WEIR_MSEC);
    CHECK_EQ(weir_frame_send(sv[0], 1, body, 10, weir_time_now() - 1), -ETIMEDOUT);
    CHECK_EQ(weir_io_close(sv[1]), 0);
    CHECK_EQ(weir_frame_send(sv[0], 1, body, len, after_ms(5000)), -EPIPE);
    CHECK_EQ(weir_frame_send(sv[0], 1, "x", 1, after_ms(5000)), -EPIPE);
    /* Not frames */
    uint8_t bad[9] = {0, 0, 0, 9, 1, 2, 3, 4, 5}; /* claims 9, holds 5 */
    CHECK_EQ(weir_frame_write(sv[0], bad, sizeof(bad), after_ms(100)), -EINVAL);
    CHECK_EQ(weir_frame_write(sv[0], bad, 4, after_ms(100)), -EINVAL);
    CHECK_EQ(weir_frame_write(sv[0], NULL, 9, after_ms(100)), -EINVAL);
    CHECK_EQ(weir_frame_send(sv[0], 1, NULL, 3, after_ms(100)), -EINVAL);
    CHECK_EQ(weir_frame_send(sv[0], 1, body, (size_t)UINT32_MAX, after_ms(100)), -EMSGSIZE);
    CHECK_EQ(weir_frame_send(-1, 1, "x", 1, after_ms(100)), -EBADF);
    free(body);
    CHECK_EQ(weir_io_close(sv[0]), 0);
    return 0;
}

TEST(socket_write_failures)
{
    CHECK_EQ(test_run_main(write_failures_main, NULL), 0);
}

/* A cancelled reader keeps the half frame; a cancelled writer sends
 * nothing. */
struct cancel_reader {
    int fd;
    weir_frame_parser *p;
    ssize_t result;
};

static intptr_t cancel_reader_main(void *arg)
{
    struct cancel_reader *c = arg;
    weir_frame fr;
    c->result = weir_frame_read(c->fd, c->p, &fr, WEIR_FOREVER);
    return 0;
}

static intptr_t cancel_main(void *arg)
{
    (void)arg;
    int sv[2];
    spair(sv);
    weir_frame_parser p;
    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    uint8_t part[7] = {0, 0, 0, 5, 3, 'a', 'b'};
    CHECK_EQ(send(sv[0], part, sizeof(part), 0), 7);
    struct cancel_reader c = {.fd = sv[1], .p = &p};
    weir_task *t = test_spawn(cancel_reader_main, &c);
    weir_time_sleep(20 * WEIR_MSEC);
    CHECK_EQ(weir_task_cancel(t), 0);
    intptr_t v;
    CHECK_EQ(weir_task_join(t, &v, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(c.result, -ECANCELED);
    CHECK_EQ(send(sv[0], "cd", 2, 0), 2);
    weir_frame fr;
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, after_ms(5000)), 5);
    CHECK(memcmp(fr.data, "\3abcd", 5) == 0);
    weir_frame_free(&fr);
    weir_frame_parser_close(&p);
    CHECK_EQ(weir_io_close(sv[0]), 0);
    CHECK_EQ(weir_io_close(sv[1]), 0);
    return 0;
}

TEST(socket_cancelled_read_resumes)
{
    CHECK_EQ(test_run_main(cancel_main, NULL), 0);
}

/* Outside a fiber the socket calls refuse at once. */
TEST(socket_calls_need_a_fiber)
{
    int sv[2];
    spair(sv);
    weir_frame_parser p;
    CHECK_EQ(weir_frame_parser_init(&p, NULL), 0);
    weir_frame fr;
    CHECK_EQ(weir_frame_read(sv[1], &p, &fr, WEIR_FOREVER), -EINVAL);
    CHECK_EQ(weir_frame_send(sv[0], 1, "x", 1, WEIR_FOREVER), -EINVAL);
    CHECK_EQ(weir_frame_read(sv[1], NULL, &fr, WEIR_FOREVER), -EINVAL);
    weir_frame_parser_close(&p);
    close(sv[0]);
    close(sv[1]);
}

/* ---- a stackless reader --------------------------------------------------------------- */
struct sl_reader {
    weir_co co;
    weir_io_op op;
    weir_frame_parser p;
    int fd;
    int64_t res;
    ssize_t room;
    void *buf;
    int frames;
    size_t bytes;
};

/* Read frames until EOF with the parser's space/commit and recv ops. */
static int sl_reader_poll(void *frame, intptr_t *out)
{
    struct sl_reader *f = frame;
    weir_frame fr;
    WEIR_BEGIN(&f->co);
    for (;;) {
        f->room = weir_frame_parser_space(&f->p, &f->buf);
        if (f->room < 0)
            WEIR_RETURN(&f->co, out, f->room);
        weir_io_recv_start(&f->op, f->fd, f->buf, (size_t)f->room, 0, weir_time_after_ms(5000));
        WEIR_AWAIT(&f->co, &f->op, f->res);
        if (f->res < 0)
            WEIR_RETURN(&f->co, out, f->res);
        if (f->res == 0)
            WEIR_RETURN(&f->co, out, weir_frame_parser_eof(&f->p));
        int r = weir_frame_parser_commit(&f->p, (size_t)f->res, &fr);
        if (r < 0)
            WEIR_RETURN(&f->co, out, r);
        if (r == 1) {
            f->frames++;
            f->bytes += fr.len;
            weir_frame_free(&fr);
        }
    }
    WEIR_END(&f->co);
}

static intptr_t stackless_main(void *arg)
{
    (void)arg;
    int sv[2];
    spair(sv);
    struct sl_reader *f = calloc(1, sizeof(*f));
    CHECK(f != NULL);
    weir_frame_limits lim = {.max_first = WEIR_FRAME_MAX};
    CHECK_EQ(weir_frame_parser_init(&f->p, &lim), 0);
    f->fd = sv[1];
    weir_task *t = weir_task_spawn_stackless(sl_reader_poll, f, NULL);
    CHECK(t != NULL);
    size_t len = 200 * 1024;
    uint8_t *body = pattern(len, 8);
    size_t total = 0;
    for (int i = 0; i < 20; i++) {
        size_t l = (size_t)i * 10000;
        CHECK_EQ(weir_frame_send(sv[0], (uint8_t)i, body, l, after_ms(5000)), 0);
        total += l + 1;
    }
    CHECK_EQ(weir_io_close(sv[0]), 0);
    CHECK_EQ(join(t), 0);
    CHECK_EQ(f->frames, 20);
    CHECK_EQ(f->bytes, total);
    weir_frame_parser_close(&f->p);
    free(f);
    free(body);
    CHECK_EQ(weir_io_close(sv[1]), 0);
    return 0;
}

TEST(stackless_reader)
{
    CHECK_EQ(test_run_main(stackless_main, NULL), 0);
}

/* ---- a framed echo over TCP on the multi-threaded runtime ----------------------------- */
enum { ECHO_CLIENTS = 8, ECHO_ROUNDS = 20, KIND_ECHO = 1, KIND_ECHO_REPLY = 2 };

static intptr_t echo_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    weir_frame_parser p;
    weir_frame_limits lim = {.max_frame = 1 << 20};
    CHECK_EQ(weir_frame_parser_init(&p, &lim), 0);
    weir_frame fr;
    ssize_t n;
    while ((n = weir_frame_read(fd, &p, &fr, after_ms(10000))) > 0) {
        weir_frame_reader r;
        weir_frame_reader_init(&r, fr.data, fr.len);
        uint8_t kind;
        uint32_t seq;
        const uint8_t *msg;
        size_t mlen;
        weir_frame_get_u8(&r, &kind);
        weir_frame_get_u32(&r, &seq);
        weir_frame_get_bytes(&r, &msg, &mlen);
        CHECK_EQ(weir_frame_reader_error(&r), 0);
        CHECK_EQ(kind, KIND_ECHO);
        weir_frame_builder b;
        CHECK_EQ(weir_frame_builder_init(&b, KIND_ECHO_REPLY), 0);
        weir_frame_put_u32(&b, seq);
        weir_frame_put_bytes(&b, msg, mlen);
        const uint8_t *out;
        size_t olen;
        CHECK_EQ(weir_frame_builder_finish(&b, &out, &olen), 0);
        CHECK_EQ(weir_frame_write(fd, out, olen, after_ms(10000)), 0);
        weir_frame_builder_close(&b);
        weir_frame_free(&fr);
    }
    CHECK_EQ(n, 0);
    weir_frame_parser_close(&p);
    CHECK_EQ(weir_net_close_graceful(fd, after_ms(5000)), 0);
    return 0;
}

static intptr_t echo_acceptor(void *arg)
{
    int lfd = *(int *)arg;
    for (int i = 0; i < ECHO_CLIENTS; i++) {
        int c = weir_net_accept(lfd, NULL, after_ms(10000));
        CHECK_GE(c, 0);
        CHECK_EQ(weir_net_set_nodelay(c, 1), 0);
        weir_spawn_opts o = {.name = "echo-conn"};
        weir_task *t = weir_task_spawn(echo_conn, (void *)(intptr_t)c, &o);
        CHECK(t != NULL);
        weir_task_detach(t);
    }
    return 0;
}

struct echo_client {
    int port;
    int id;
};

static intptr_t echo_client_main(void *arg)
{
    struct echo_client *c = arg;
    int fd = weir_net_connect("127.0.0.1", c->port, after_ms(10000));
    CHECK_GE(fd, 0);
    CHECK_EQ(weir_net_set_nodelay(fd, 1), 0);
    weir_frame_parser p;
    weir_frame_limits lim = {.max_first = WEIR_FRAME_MAX};
    CHECK_EQ(weir_frame_parser_init(&p, &lim), 0);
    for (uint32_t seq = 0; seq < ECHO_ROUNDS; seq++) {
        char msg[64];
        int ml = snprintf(msg, sizeof(msg), "client %d says %u", c->id, seq);
        weir_frame_builder b;
        CHECK_EQ(weir_frame_builder_init(&b, KIND_ECHO), 0);
        weir_frame_put_u32(&b, seq);
        weir_frame_put_bytes(&b, msg, (size_t)ml);
        const uint8_t *out;
        size_t olen;
        CHECK_EQ(weir_frame_builder_finish(&b, &out, &olen), 0);
        CHECK_EQ(weir_frame_write(fd, out, olen, after_ms(10000)), 0);
        weir_frame_builder_close(&b);
        weir_frame fr;
        CHECK_GT(weir_frame_read(fd, &p, &fr, after_ms(10000)), 0);
        weir_frame_reader r;
        weir_frame_reader_init(&r, fr.data, fr.len);
        uint8_t kind;
        uint32_t back;
        const uint8_t *m;
        size_t mlen;
        weir_frame_get_u8(&r, &kind);
        weir_frame_get_u32(&r, &back);
        weir_frame_get_bytes(&r, &m, &mlen);
        CHECK_EQ(weir_frame_reader_error(&r), 0);
        CHECK_EQ(kind, KIND_ECHO_REPLY);
        CHECK_EQ(back, seq);
        CHECK_EQ(mlen, (size_t)ml);
        CHECK(memcmp(m, msg, mlen) == 0);
        CHECK(weir_frame_at_end(&r));
        weir_frame_free(&fr);
    }
    weir_frame_parser_close(&p);
    CHECK_EQ(weir_net_close_graceful(fd, after_ms(5000)), 0);
    return 0;
}

TEST(framed_echo_on_multithreaded_runtime)
{
    weir_rt_opts ro = {.threads = 2};
    weir_rt *rt = weir_rt_new(&ro);
    CHECK(rt != NULL);
    int lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(lfd, 0);
    int port = weir_net_local_port(lfd);
    weir_spawn_opts ao = {.name = "acceptor", .rt = rt};
    weir_task *at = weir_task_spawn(echo_acceptor, &lfd, &ao);
    CHECK(at != NULL);
    struct echo_client cl[ECHO_CLIENTS];
    weir_task *ct[ECHO_CLIENTS];
    for (int i = 0; i < ECHO_CLIENTS; i++) {
        cl[i] = (struct echo_client){port, i};
        weir_spawn_opts co = {.name = "client", .rt = rt};
        ct[i] = weir_task_spawn(echo_client_main, &cl[i], &co);
        CHECK(ct[i] != NULL);
    }
    for (int i = 0; i < ECHO_CLIENTS; i++)
        CHECK_EQ(join(ct[i]), 0);
    CHECK_EQ(join(at), 0);
    /* The detached connection tasks end when their client closes. */
    int64_t until = weir_time_now() + 10 * WEIR_SEC;
    while (weir_rt_tasks_alive(rt) > 0 && weir_time_now() < until)
        usleep(1000);
    CHECK_EQ(weir_rt_tasks_alive(rt), 0);
    weir_rt_free(rt);
    CHECK_EQ(close(lfd), 0);
}

TEST_MAIN()
