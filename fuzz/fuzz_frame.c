/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_frame.c - libFuzzer target for the frame decoder (weir/net.h): the
 * stream parser fed from a byte buffer, and the bounds-checked reader run
 * over every frame it produces.
 *
 * Input layout: byte 0 picks the parser's limits, byte 1 seeds the sizes of
 * the pieces the rest is fed in (so one input exercises many splits of the
 * same stream), and the rest is the byte stream as a peer would send it.
 *
 * Each frame's payload is decoded by a small interpreter that takes its
 * schema from the payload itself: after the kind byte, each field is an
 * opcode byte saying which get_* comes next. Every field decoded is
 * re-encoded with the builder, and the re-encoding must equal the bytes the
 * reader consumed: decode then encode is the identity, on whole frames and
 * on the prefix before a decoding error alike. Beyond memory safety (ASan,
 * UBSan) the target aborts when an invariant breaks:
 *
 *   - the parser only ever hands out frames of 1..cap bytes, and never
 *     holds more memory than about twice what arrived plus two chunks;
 *   - it takes no byte past the end of a frame;
 *   - a reader error sticks and consumes nothing; the position never
 *     passes the end; a count is never larger than the bytes left;
 *   - decode + re-encode reproduces the consumed bytes exactly.
 *
 * Build and run: `make test-fuzz` (see fuzz/run.sh and docs/net.md).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/net.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(msg)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_frame: invariant broken: %s (line %d)\n", msg, __LINE__);            \
        abort();                                                                                   \
    } while (0)
#define ENSURE(cond)                                                                               \
    do {                                                                                           \
        if (!(cond))                                                                               \
            FAIL(#cond);                                                                           \
    } while (0)

/* After a failed get: the error is the reader's, sticks, and moved nothing. */
static void check_failed(weir_frame_reader *r, int err, size_t pos_before)
{
    ENSURE(err < 0);
    ENSURE(weir_frame_reader_error(r) == err);
    ENSURE(r->pos == pos_before);
    uint8_t v = 1;
    ENSURE(weir_frame_get_u8(r, &v) == err);
    ENSURE(v == 0);
    ENSURE(r->pos == pos_before);
}

/* Decode one payload by its own opcodes; re-encode as we go; compare. */
static void decode_payload(const uint8_t *payload, size_t len)
{
    /* An exact-size copy, so that ASan sees any read past the end. */
    uint8_t *p = malloc(len);
    if (!p)
        return;
    memcpy(p, payload, len);
    weir_frame_reader r;
    weir_frame_reader_init(&r, p, len);
    uint8_t kind;
    ENSURE(weir_frame_get_u8(&r, &kind) == 0); /* a frame has at least its kind */
    weir_frame_builder b;
    if (weir_frame_builder_init(&b, kind) < 0) {
        free(p);
        return;
    }
    int err = 0;
    while (!err && !weir_frame_at_end(&r)) {
        size_t before = r.pos;
        uint8_t op;
        if ((err = weir_frame_get_u8(&r, &op)) < 0)
            break;
        weir_frame_put_u8(&b, op);
        before = r.pos;
        switch (op % 10) {
        case 0: {
            uint8_t v;
            if (!(err = weir_frame_get_u8(&r, &v)))
                weir_frame_put_u8(&b, v);
            break;
        }
        case 1: {
            uint16_t v;
            if (!(err = weir_frame_get_u16(&r, &v)))
                weir_frame_put_u16(&b, v);
            break;
        }
        case 2: {
            uint32_t v;
            if (!(err = weir_frame_get_u32(&r, &v)))
                weir_frame_put_u32(&b, v);
            break;
        }
        case 3: {
            uint64_t v;
            if (!(err = weir_frame_get_u64(&r, &v)))
                weir_frame_put_u64(&b, v);
            break;
        }
        case 4: {
            const uint8_t *v;
            size_t n;
            if (!(err = weir_frame_get_bytes(&r, &v, &n))) {
                ENSURE(v >= p && n <= len && v + n <= p + len);
                weir_frame_put_bytes(&b, v, n);
            } else {
                ENSURE(v == NULL && n == 0);
            }
            break;
        }
        case 5: {
            /* A C string in a small buffer: the cap comes from the opcode. */
            char s[64];
            size_t cap = 1 + (op >> 4) * 4;
            if (!(err = weir_frame_get_str(&r, s, cap))) {
                ENSURE(strlen(s) < cap);
                weir_frame_put_str(&b, s);
            } else {
                ENSURE(s[0] == '\0');
            }
            break;
        }
        case 6: {
            char *s;
            if (!(err = weir_frame_get_strdup(&r, (size_t)op * 4, &s))) {
                ENSURE(strlen(s) <= (size_t)op * 4);
                weir_frame_put_str(&b, s);
                free(s);
            } else {
                ENSURE(s == NULL);
            }
            break;
        }
        case 7: {
            /* A list of u16 items, or of (u8 + bytes) records. */
            uint32_t n;
            size_t min = op & 0x10 ? 5 : 2;
            if ((err = weir_frame_get_count(&r, min, &n)) < 0) {
                ENSURE(n == 0);
                break;
            }
            ENSURE((uint64_t)n * min <= weir_frame_remaining(&r));
            weir_frame_put_u32(&b, n);
            for (uint32_t i = 0; i < n && !err; i++) {
                size_t ib = r.pos;
                if (min == 2) {
                    uint16_t v;
                    if (!(err = weir_frame_get_u16(&r, &v)))
                        weir_frame_put_u16(&b, v);
                } else {
                    uint8_t t;
                    const uint8_t *v;
                    size_t vl;
                    if (!(err = weir_frame_get_u8(&r, &t)))
                        weir_frame_put_u8(&b, t);
                    else
                        break;
                    ib = r.pos;
                    if (!(err = weir_frame_get_bytes(&r, &v, &vl)))
                        weir_frame_put_bytes(&b, v, vl);
                }
                if (err)
                    check_failed(&r, err, ib);
            }
            before = r.pos;
            break;
        }
        case 8: {
            uint8_t raw[16];
            size_t n = op >> 4;
            if (!(err = weir_frame_get_raw(&r, raw, n)))
                weir_frame_put_raw(&b, raw, n);
            break;
        }
        default: {
            /* An additive tail: an optional u32 with a default. */
            uint32_t v = 7;
            if (!weir_frame_at_end(&r) && !(err = weir_frame_get_u32(&r, &v)))
                weir_frame_put_u32(&b, v);
            break;
        }
        }
        if (err)
            check_failed(&r, err, before);
        ENSURE(r.pos <= r.len);
    }
    /* The fields decoded, encoded again, are the bytes consumed. */
    const uint8_t *f;
    size_t flen;
    if (weir_frame_builder_finish(&b, &f, &flen) == 0) {
        ENSURE(flen == WEIR_FRAME_HEADER + r.pos);
        ENSURE(memcmp(f + WEIR_FRAME_HEADER, p, r.pos) == 0);
        if (!err)
            ENSURE(r.pos == len);
    }
    weir_frame_builder_close(&b);
    free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint8_t ctl = data[0];
    uint32_t rnd = data[1] * 2654435761u + 1;
    data += 2;
    size -= 2;

    /* Limits: small caps so that the fuzzer reaches them, or the defaults. */
    static const uint32_t caps[4] = {0, 64, 1000, 70000};
    weir_frame_limits lim = {.max_frame = caps[ctl & 3], .max_first = caps[(ctl >> 2) & 3]};
    weir_frame_parser p;
    ENSURE(weir_frame_parser_init(&p, &lim) == 0);
    uint32_t max_frame = lim.max_frame ? lim.max_frame : WEIR_FRAME_MAX;
    uint32_t max_first = lim.max_first ? lim.max_first : WEIR_FRAME_FIRST_MAX;
    if (max_first > max_frame)
        max_first = max_frame;

    size_t off = 0, in_frame = 0;
    int frames = 0, err = 0;
    while (off < size && !err) {
        /* Piece sizes: whole input, single bytes, or pseudo-random. */
        size_t k;
        switch ((ctl >> 4) & 3) {
        case 0:
            k = size - off;
            break;
        case 1:
            k = 1;
            break;
        default:
            rnd ^= rnd << 13;
            rnd ^= rnd >> 17;
            rnd ^= rnd << 5;
            k = 1 + rnd % 97;
            break;
        }
        if (k > size - off)
            k = size - off;
        size_t used = 0;
        weir_frame fr;
        int r = weir_frame_parser_feed(&p, data + off, k, &used, &fr);
        ENSURE(used <= k);
        off += used;
        in_frame += used;
        ENSURE(weir_frame_parser_memory(&p) <= 2 * in_frame + 2 * WEIR_FRAME_CHUNK);
        if (r < 0) {
            ENSURE(r == -EMSGSIZE || r == -EBADMSG);
            ENSURE(fr.data == NULL);
            ENSURE(weir_frame_parser_memory(&p) == 0);
            /* Final: it stays refused and takes nothing more. */
            ENSURE(weir_frame_parser_feed(&p, data + off, size - off, &used, &fr) == r);
            ENSURE(used == 0);
            err = r;
            break;
        }
        if (r == 1) {
            uint32_t cap = frames == 0 ? max_first : max_frame;
            ENSURE(fr.data != NULL && fr.len >= 1 && fr.len <= cap);
            ENSURE(in_frame == WEIR_FRAME_HEADER + fr.len); /* nothing past its end */
            ENSURE(memcmp(fr.data, data + off - fr.len, fr.len) == 0);
            decode_payload(fr.data, fr.len);
            weir_frame_free(&fr);
            frames++;
            in_frame = 0;
        } else {
            ENSURE(used == k);
        }
    }
    int e = weir_frame_parser_eof(&p);
    if (err)
        ENSURE(e == err);
    else if (in_frame == 0)
        ENSURE(e == 0);
    else
        ENSURE(e == -ECONNRESET);
    ENSURE(weir_frame_parser_memory(&p) == 0);
    weir_frame_parser_close(&p);

    /* The whole input as one payload, too: the reader alone, on bytes the
     * parser never vetted. */
    if (size > 0)
        decode_payload(data, size);
    return 0;
}
