/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire.c - the TCP channel's frames (wire.h, docs/wire.md): batches and
 * control items to bytes and back, and the batch allocator the runner and
 * the decoder share.
 *
 * The decoder reads untrusted bytes. It checks in this order, so the first
 * thing wrong is the one named: the frame's size against the cap, the
 * kind, then for a batch its two header words against their caps, that the
 * record headers are all there, each record's length and key group, that the
 * lengths add up to the header's data bytes, and that exactly those bytes
 * follow. Only then does it allocate, so a refusal owns nothing. Sums are
 * 64-bit: 1024 lengths of up to 2^32 - 1 cannot overflow them.
 */
#include "stream/wire.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/be.h"
#include "weir/net.h"

_Static_assert(WEIR__WIRE_MAX_DATA % 8 == 0, "the data cap keeps records aligned");
_Static_assert(WEIR__WIRE_MAX_FRAME <= WEIR_FRAME_MAX, "a batch fits weir's frame cap");
_Static_assert(WEIR__WIRE_MAX_DATA + 8u * WEIR_BATCH_RECORDS < UINT32_MAX,
               "a decoded batch's padded size fits its u32 cap");

static size_t align8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* ---- batches in memory ---------------------------------------------------------------------- */
batch *weir__batch_new(size_t need)
{
    if (need > UINT32_MAX - 7) {
        errno = ENOMEM;
        return NULL;
    }
    size_t cap = need > WEIR_BATCH_BYTES ? align8(need) : WEIR_BATCH_BYTES;
    batch *b = weir__malloc(sizeof(batch) + cap);
    if (b) {
        b->n = b->used = 0;
        b->cap = (uint32_t)cap;
    }
    return b;
}

void weir__batch_free(batch *b)
{
    weir__free(b);
}

/* ---- encoding ------------------------------------------------------------------------------- */
static uint64_t batch_data(const batch *b)
{
    uint64_t data = 0;
    for (uint32_t i = 0; i < b->n; i++)
        data += b->len[i];
    return data;
}

size_t weir__wire_batch_size(const batch *b)
{
    assert(b->n <= WEIR_BATCH_RECORDS);
    return WEIR_FRAME_HEADER + WEIR__WIRE_BATCH_HEAD + (size_t)b->n * WEIR__WIRE_REC_HEADER +
           (size_t)batch_data(b);
}

void weir__wire_batch_encode(const batch *b, uint8_t *out)
{
    uint32_t n = b->n;
    assert(n <= WEIR_BATCH_RECORDS);
    uint8_t *h = out + WEIR_FRAME_HEADER + WEIR__WIRE_BATCH_HEAD;
    uint8_t *d = h + (size_t)n * WEIR__WIRE_REC_HEADER;
    uint32_t data = 0;
    /* One copy per record, even when they lie back to back in memory: one
     * large memcpy from an aligned batch into the odd offset where the
     * records start on the wire measured slower (bench/wire.c). */
    for (uint32_t i = 0; i < n; i++, h += WEIR__WIRE_REC_HEADER) {
        weir__put_be64(h, (uint64_t)b->ts[i]);
        weir__put_be32(h + 8, b->len[i]);
        h[12] = b->kg[i];
        memcpy(d, b->data + b->off[i], b->len[i]);
        d += b->len[i];
        data += b->len[i];
    }
    assert(data <= WEIR__WIRE_MAX_DATA);
    weir__put_be32(out, WEIR__WIRE_BATCH_HEAD + n * WEIR__WIRE_REC_HEADER + data);
    out[4] = WEIR__WIRE_BATCH;
    weir__put_be32(out + 5, n);
    weir__put_be32(out + 9, data);
}

/* The 4 length bytes and the kind of a fixed-size frame of `size` bytes;
 * returns where its fields go. */
static uint8_t *start(uint8_t *out, size_t size, uint8_t kind)
{
    weir__put_be32(out, (uint32_t)(size - WEIR_FRAME_HEADER));
    out[4] = kind;
    return out + 5;
}

size_t weir__wire_encode_hello(uint8_t *out, const weir__wire_hello *h)
{
    uint8_t *p = start(out, WEIR__WIRE_HELLO_SIZE, WEIR__WIRE_HELLO);
    p[0] = WEIR__WIRE_VERSION;
    weir__put_be64(p + 1, h->job);
    weir__put_be32(p + 9, h->channel);
    weir__put_be32(p + 13, h->producer);
    weir__put_be32(p + 17, h->consumer);
    weir__put_be32(p + 21, h->input);
    weir__put_be32(p + 25, h->credits);
    return WEIR__WIRE_HELLO_SIZE;
}

size_t weir__wire_encode_watermark(uint8_t *out, int64_t wm)
{
    weir__put_be64(start(out, WEIR__WIRE_WATERMARK_SIZE, WEIR__WIRE_WATERMARK), (uint64_t)wm);
    return WEIR__WIRE_WATERMARK_SIZE;
}

size_t weir__wire_encode_barrier(uint8_t *out, uint64_t id, uint8_t kind)
{
    uint8_t *p = start(out, WEIR__WIRE_BARRIER_SIZE, WEIR__WIRE_BARRIER);
    weir__put_be64(p, id);
    p[8] = kind;
    return WEIR__WIRE_BARRIER_SIZE;
}

size_t weir__wire_encode_end(uint8_t *out)
{
    start(out, WEIR__WIRE_END_SIZE, WEIR__WIRE_END);
    return WEIR__WIRE_END_SIZE;
}

size_t weir__wire_encode_idle(uint8_t *out, int idle)
{
    *start(out, WEIR__WIRE_IDLE_SIZE, WEIR__WIRE_IDLE) = idle ? 1 : 0;
    return WEIR__WIRE_IDLE_SIZE;
}

size_t weir__wire_encode_credit(uint8_t *out, uint32_t n)
{
    weir__put_be32(start(out, WEIR__WIRE_CREDIT_SIZE, WEIR__WIRE_CREDIT), n);
    return WEIR__WIRE_CREDIT_SIZE;
}

/* ---- decoding ------------------------------------------------------------------------------- */
__attribute__((format(printf, 4, 5))) static int refuse(int err, char *why, size_t cap,
                                                        const char *fmt, ...)
{
    if (cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return err;
}

/* Body (after the kind) of exactly `want` bytes, or a refusal naming what. */
static int fixed(const char *what, size_t got, size_t want, char *why, size_t cap)
{
    if (got < want)
        return refuse(-EBADMSG, why, cap, "%s: cut short (%zu of %zu body bytes)", what, got, want);
    if (got > want)
        return refuse(-EBADMSG, why, cap, "%s: %zu trailing bytes after the %zu-byte body", what,
                      got - want, want);
    return 0;
}

static int decode_batch(const uint8_t *p, size_t len, weir__wire_msg *out, char *why, size_t cap)
{
    if (len < WEIR__WIRE_BATCH_HEAD - 1)
        return refuse(-EBADMSG, why, cap, "batch: header cut short (%zu of %u bytes)", len,
                      WEIR__WIRE_BATCH_HEAD - 1);
    uint32_t n = weir__get_be32(p), data = weir__get_be32(p + 4);
    if (n > WEIR_BATCH_RECORDS)
        return refuse(-EMSGSIZE, why, cap, "batch: count %u exceeds the %u-record cap", n,
                      WEIR_BATCH_RECORDS);
    if (data > WEIR__WIRE_MAX_DATA)
        return refuse(-EMSGSIZE, why, cap, "batch: %u data bytes exceed the %u-byte cap", data,
                      WEIR__WIRE_MAX_DATA);
    size_t rest = len - (WEIR__WIRE_BATCH_HEAD - 1);
    size_t heads = (size_t)n * WEIR__WIRE_REC_HEADER;
    if (rest < heads)
        return refuse(-EBADMSG, why, cap,
                      "batch: record headers cut short (%zu of %zu bytes for %u records)", rest,
                      heads, n);
    const uint8_t *hdr = p + WEIR__WIRE_BATCH_HEAD - 1;

    /* need: the bytes the records take in memory, each 8-byte aligned. */
    uint64_t sum = 0, need = 0;
    const uint8_t *h = hdr;
    for (uint32_t i = 0; i < n; i++, h += WEIR__WIRE_REC_HEADER) {
        uint32_t l = weir__get_be32(h + 8);
        if (l > WEIR_MAX_RECORD)
            return refuse(-EMSGSIZE, why, cap,
                          "batch: record %u length %u exceeds the %u-byte record cap", i, l,
                          WEIR_MAX_RECORD);
        if (h[12] >= WEIR_KEY_GROUPS && h[12] != NO_KG)
            return refuse(-EBADMSG, why, cap,
                          "batch: record %u key group %u is neither below %d nor 255 (none)", i,
                          h[12], WEIR_KEY_GROUPS);
        need = align8((size_t)need) + l;
        sum += l;
    }
    if (sum != data)
        return refuse(-EBADMSG, why, cap,
                      "batch: record lengths sum to %llu bytes, the header says %u",
                      (unsigned long long)sum, data);
    size_t left = rest - heads;
    if (left < data)
        return refuse(-EBADMSG, why, cap, "batch: record bytes cut short (%zu of %u)", left, data);
    if (left > data)
        return refuse(-EBADMSG, why, cap, "batch: %zu trailing bytes after the records",
                      left - data);

    batch *b = weir__batch_new((size_t)need);
    if (!b)
        return refuse(-ENOMEM, why, cap, "batch: no memory for %u records of %u bytes", n, data);
    const uint8_t *d = hdr + heads;
    uint32_t at = 0;
    h = hdr;
    for (uint32_t i = 0; i < n; i++, h += WEIR__WIRE_REC_HEADER) {
        uint32_t l = weir__get_be32(h + 8);
        at = (uint32_t)align8(at);
        b->ts[i] = (int64_t)weir__get_be64(h);
        b->len[i] = l;
        b->kg[i] = h[12];
        b->off[i] = at;
        memcpy(b->data + at, d, l);
        d += l;
        at += l;
    }
    assert(at == need);
    b->n = n;
    b->used = at;
    out->kind = WEIR__WIRE_BATCH;
    out->u.b = b;
    return 0;
}

int weir__wire_decode(const uint8_t *body, size_t len, weir__wire_msg *out, char *why, size_t cap)
{
    memset(out, 0, sizeof(*out));
    if (cap)
        why[0] = '\0';
    if (len == 0)
        return refuse(-EBADMSG, why, cap, "empty frame (no kind byte)");
    if (len > WEIR__WIRE_MAX_FRAME)
        return refuse(-EMSGSIZE, why, cap, "frame of %zu bytes exceeds the %u-byte cap", len,
                      WEIR__WIRE_MAX_FRAME);
    const uint8_t *p = body + 1;
    size_t n = len - 1;
    int e;
    switch (body[0]) {
    case WEIR__WIRE_BATCH:
        return decode_batch(p, n, out, why, cap);
    case WEIR__WIRE_HELLO:
        if ((e = fixed("hello", n, WEIR__WIRE_HELLO_SIZE - 5, why, cap)))
            return e;
        if (p[0] != WEIR__WIRE_VERSION)
            return refuse(-EBADMSG, why, cap, "hello: wire version %u, this weir speaks %u", p[0],
                          WEIR__WIRE_VERSION);
        out->u.hello = (weir__wire_hello){
            .job = weir__get_be64(p + 1),
            .channel = weir__get_be32(p + 9),
            .producer = weir__get_be32(p + 13),
            .consumer = weir__get_be32(p + 17),
            .input = weir__get_be32(p + 21),
            .credits = weir__get_be32(p + 25),
        };
        if (out->u.hello.credits == 0)
            return refuse(-EBADMSG, why, cap,
                          "hello: zero credits (the producer could never send)");
        break;
    case WEIR__WIRE_WATERMARK:
        if ((e = fixed("watermark", n, WEIR__WIRE_WATERMARK_SIZE - 5, why, cap)))
            return e;
        out->u.wm = (int64_t)weir__get_be64(p);
        break;
    case WEIR__WIRE_BARRIER:
        if ((e = fixed("barrier", n, WEIR__WIRE_BARRIER_SIZE - 5, why, cap)))
            return e;
        if (p[8] != WEIR__WIRE_BARRIER_ALIGNED)
            return refuse(-EBADMSG, why, cap, "barrier: unknown barrier kind %u", p[8]);
        out->u.barrier.id = weir__get_be64(p);
        out->u.barrier.kind = p[8];
        break;
    case WEIR__WIRE_END:
        if ((e = fixed("end", n, WEIR__WIRE_END_SIZE - 5, why, cap)))
            return e;
        break;
    case WEIR__WIRE_IDLE:
        if ((e = fixed("idle", n, WEIR__WIRE_IDLE_SIZE - 5, why, cap)))
            return e;
        if (p[0] > 1)
            return refuse(-EBADMSG, why, cap, "idle: value %u is neither 0 (active) nor 1 (idle)",
                          p[0]);
        out->u.idle = p[0];
        break;
    case WEIR__WIRE_CREDIT:
        if ((e = fixed("credit", n, WEIR__WIRE_CREDIT_SIZE - 5, why, cap)))
            return e;
        if (!(out->u.credits = weir__get_be32(p)))
            return refuse(-EBADMSG, why, cap, "credit: zero credits returned");
        break;
    default:
        return refuse(-EBADMSG, why, cap, "unknown frame kind %u", body[0]);
    }
    out->kind = body[0];
    return 0;
}

void weir__wire_msg_free(weir__wire_msg *m)
{
    if (m->kind == WEIR__WIRE_BATCH)
        weir__batch_free(m->u.b);
    memset(m, 0, sizeof(*m));
}

int weir__wire_hello_check(const weir__wire_hello *got, const weir__wire_hello *want, char *why,
                           size_t cap)
{
    if (cap)
        why[0] = '\0';
    if (got->job != want->job)
        return refuse(-EBADMSG, why, cap, "hello: job %016llx, expected %016llx (another plan)",
                      (unsigned long long)got->job, (unsigned long long)want->job);
    static const struct {
        const char *name;
        size_t at;
    } f[] = {
        {"channel", offsetof(weir__wire_hello, channel)},
        {"producer subtask", offsetof(weir__wire_hello, producer)},
        {"consumer subtask", offsetof(weir__wire_hello, consumer)},
        {"consumer input", offsetof(weir__wire_hello, input)},
        {"credits", offsetof(weir__wire_hello, credits)},
    };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        uint32_t g, w;
        memcpy(&g, (const char *)got + f[i].at, sizeof(g));
        memcpy(&w, (const char *)want + f[i].at, sizeof(w));
        if (g != w)
            return refuse(-EBADMSG, why, cap, "hello: %s %u, expected %u", f[i].name, g, w);
    }
    return 0;
}
