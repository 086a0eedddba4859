/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire.h - the bytes of one TCP channel between a producer subtask and a
 * consumer subtask: batches of records, the control items that ride with
 * them (watermark, barrier, end of input, idle), the handshake that names
 * the channel, and the credits flowing back. channel_tcp.c moves these
 * frames over a weir socket; this module only turns them into bytes and
 * back, so it can be tested and fuzzed without a network. docs/wire.md is
 * the byte-by-byte reference; the summary:
 *
 * Every frame is weir's frame (weir/net.h): a 4-byte big-endian payload
 * length, then the payload, whose first byte is the kind. Integers are
 * big-endian. No kind has optional fields or a tail: a body one byte too
 * long is as malformed as one a byte short, and a decoded frame re-encodes
 * to the same bytes.
 *
 *   HELLO      1  u8 version (1), u64 job (the plan's hash), u32 channel,
 *                 u32 producer subtask, u32 consumer subtask, u32 consumer
 *                 input, u32 credits                 producer -> consumer
 *   BATCH      2  u32 count, u32 data bytes, then count record headers
 *                 (i64 timestamp, u32 length, u8 key group, 0xFF: none),
 *                 then the records' bytes back to back, no padding
 *                                                    producer -> consumer
 *   WATERMARK  3  i64 watermark                      producer -> consumer
 *   BARRIER    4  u64 checkpoint id, u8 kind (0: aligned) producer -> consumer
 *   END        5  (empty: end of input)              producer -> consumer
 *   IDLE       6  u8 1: idle, 0: active again        producer -> consumer
 *   CREDIT     7  u32 n >= 1 batches more may be sent consumer -> producer
 *
 * Why one 13-byte header per record rather than columns (all timestamps,
 * then all lengths, then all key groups, as the in-memory batch keeps
 * them): bench/wire.c measures both, and rows decode faster (the checks
 * and the copy-out are one pass over one region; columns take a pass per
 * column) and encode as fast. Either way the cost is the records' bytes:
 * one copy each, out of the batch (where they are 8-byte aligned) and
 * back into a fresh one. Big-endian like every weir frame: the byte swaps
 * cost nothing next to the copies.
 *
 * Untrusted input. weir__wire_decode() checks every count, length and
 * value against the caps below before it allocates or copies, computes in
 * 64 bits so nothing overflows, and refuses a frame with -EMSGSIZE (a size
 * past a cap) or -EBADMSG (anything else malformed), writing into `why` a
 * sentence that says what was wrong; it then owns nothing. The channel
 * prefixes the channel's name and fails the job with it.
 *
 * Ownership. A decoded BATCH is a heap batch laid out as the runner's
 * (records 8-byte aligned in data, cap >= WEIR_BATCH_BYTES); the caller
 * owns it and frees it with weir__batch_free(), like a local one.
 */
#ifndef WEIR_STREAM_WIRE_H
#define WEIR_STREAM_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "stream/stream_int.h"

#define WEIR__WIRE_VERSION 1

enum {
    WEIR__WIRE_HELLO = 1,
    WEIR__WIRE_BATCH = 2,
    WEIR__WIRE_WATERMARK = 3,
    WEIR__WIRE_BARRIER = 4,
    WEIR__WIRE_END = 5,
    WEIR__WIRE_IDLE = 6,
    WEIR__WIRE_CREDIT = 7,
};

/* BARRIER's kind byte. Only aligned checkpoints exist; other values are
 * refused, so a later kind is a deliberate protocol change. */
#define WEIR__WIRE_BARRIER_ALIGNED 0

/* Bytes one record takes in a BATCH beyond its data: ts, length, group. */
#define WEIR__WIRE_REC_HEADER 13u
/* Payload bytes (kind included) of a BATCH before its columns. */
#define WEIR__WIRE_BATCH_HEAD 9u
/* The most record bytes a batch holds: a batch is WEIR_BATCH_BYTES, or
 * one record too big for that alone (plus empty records, which fit in
 * any batch): at most WEIR_MAX_RECORD. */
#define WEIR__WIRE_MAX_DATA                                                                        \
    (WEIR_MAX_RECORD > WEIR_BATCH_BYTES ? WEIR_MAX_RECORD : WEIR_BATCH_BYTES)
/* The largest legal payload (kind byte included, the 4 length bytes not,
 * as weir_frame_limits.max_frame counts): a full batch of the most data.
 * The channel gives it to its frame parser so an oversized frame is
 * refused from its header alone. */
#define WEIR__WIRE_MAX_FRAME                                                                       \
    (WEIR__WIRE_BATCH_HEAD + WEIR_BATCH_RECORDS * WEIR__WIRE_REC_HEADER + WEIR__WIRE_MAX_DATA)
/* Whole frames (length bytes included) of the fixed-size kinds. */
#define WEIR__WIRE_HELLO_SIZE     (4u + 1 + 1 + 8 + 5 * 4)
#define WEIR__WIRE_WATERMARK_SIZE (4u + 1 + 8)
#define WEIR__WIRE_BARRIER_SIZE   (4u + 1 + 8 + 1)
#define WEIR__WIRE_END_SIZE       (4u + 1)
#define WEIR__WIRE_IDLE_SIZE      (4u + 1 + 1)
#define WEIR__WIRE_CREDIT_SIZE    (4u + 1 + 4)
/* A buffer that holds any control frame or HELLO. */
#define WEIR__WIRE_CTRL_MAX WEIR__WIRE_HELLO_SIZE

/* The channel a connection carries, as the producer announces it and the
 * consumer expects it. */
typedef struct weir__wire_hello {
    uint64_t job;      /* the plan's hash: both ends run the same plan */
    uint32_t channel;  /* the plan's channel id */
    uint32_t producer; /* producer subtask index */
    uint32_t consumer; /* consumer subtask index */
    uint32_t input;    /* the consumer's input the channel feeds */
    uint32_t credits;  /* batches the producer may have in flight */
} weir__wire_hello;

/* A decoded frame. */
typedef struct weir__wire_msg {
    int kind; /* WEIR__WIRE_* */
    union {
        weir__wire_hello hello; /* HELLO */
        batch *b;               /* BATCH: owned by the caller (weir__batch_free) */
        int64_t wm;             /* WATERMARK */
        struct {
            uint64_t id;
            uint8_t kind;
        } barrier;        /* BARRIER */
        int idle;         /* IDLE: 1 idle, 0 active */
        uint32_t credits; /* CREDIT */
    } u;
} weir__wire_msg;

/* The bytes of b's BATCH frame, the 4 length bytes included. b holds at
 * most WEIR_BATCH_RECORDS records of at most WEIR__WIRE_MAX_DATA bytes in
 * all (every batch the runner fills does). */
size_t weir__wire_batch_size(const batch *b);
/* Write b's whole BATCH frame into out (weir__wire_batch_size bytes). */
void weir__wire_batch_encode(const batch *b, uint8_t *out);

/* The fixed-size frames, written whole into out (which holds at least
 * WEIR__WIRE_CTRL_MAX bytes, or the kind's _SIZE); each returns the bytes
 * written. */
size_t weir__wire_encode_hello(uint8_t *out, const weir__wire_hello *h);
size_t weir__wire_encode_watermark(uint8_t *out, int64_t wm);
size_t weir__wire_encode_barrier(uint8_t *out, uint64_t id, uint8_t kind);
size_t weir__wire_encode_end(uint8_t *out);
size_t weir__wire_encode_idle(uint8_t *out, int idle);
size_t weir__wire_encode_credit(uint8_t *out, uint32_t n);

/*
 * Decode one frame's payload (kind byte first, as weir_frame gives it:
 * data/len). 0 and *out filled, or -EMSGSIZE / -EBADMSG with a message in
 * why[cap] (always NUL-terminated when cap > 0) and nothing allocated.
 * -ENOMEM when a batch cannot be allocated.
 */
int weir__wire_decode(const uint8_t *body, size_t len, weir__wire_msg *out, char *why, size_t cap);

/* Compare a received HELLO with the one the consumer expects: 0, or
 * -EBADMSG naming the first field that differs, with both values, in why. */
int weir__wire_hello_check(const weir__wire_hello *got, const weir__wire_hello *want, char *why,
                           size_t cap);

/* Free what a decoded message owns (a BATCH's batch) and zero it. */
void weir__wire_msg_free(weir__wire_msg *m);

#endif
