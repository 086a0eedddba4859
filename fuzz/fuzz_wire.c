/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_wire.c - libFuzzer target for the TCP channel's frame decoder
 * (src/stream/wire.c). The input is one frame's payload (kind byte first),
 * as a peer could send it. Beyond memory safety (ASan, UBSan) the target
 * aborts when an invariant breaks:
 *
 *   - a refusal is -EBADMSG or -EMSGSIZE with a non-empty message, and
 *     hands out nothing (kind 0; LeakSanitizer sees any leak);
 *   - a decoded batch has the runner's layout: at most WEIR_BATCH_RECORDS
 *     records, each 8-byte aligned, in order, inside used <= cap, cap at
 *     least WEIR_BATCH_BYTES, key groups below WEIR_KEY_GROUPS or NO_KG;
 *   - decode then encode is the identity: the message re-encodes to the
 *     4 length bytes followed by exactly the input.
 *
 * Seeds (fuzz/corpus/wire/) are valid payloads of every kind. Run with
 * fuzz/run.sh (`make test-fuzz`).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/be.h"
#include "stream/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ENSURE(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_wire: invariant broken: %s (line %d)\n", #cond, __LINE__);       \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void check_batch(const batch *b)
{
    ENSURE(b->n <= WEIR_BATCH_RECORDS);
    ENSURE(b->cap >= WEIR_BATCH_BYTES);
    ENSURE(b->used <= b->cap);
    uint64_t end = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        ENSURE(b->off[i] % 8 == 0);
        ENSURE(b->off[i] >= end);
        ENSURE(b->len[i] <= WEIR_MAX_RECORD);
        end = (uint64_t)b->off[i] + b->len[i];
        ENSURE(end <= b->used);
        ENSURE(b->kg[i] < WEIR_KEY_GROUPS || b->kg[i] == NO_KG);
    }
    ENSURE(end == b->used);
}

/* The frame m encodes to, in a malloc'd buffer (*n bytes). */
static uint8_t *encode(const weir__wire_msg *m, size_t *n)
{
    if (m->kind == WEIR__WIRE_BATCH) {
        *n = weir__wire_batch_size(m->u.b);
        uint8_t *f = malloc(*n);
        ENSURE(f);
        weir__wire_batch_encode(m->u.b, f);
        return f;
    }
    uint8_t *f = malloc(WEIR__WIRE_CTRL_MAX);
    ENSURE(f);
    switch (m->kind) {
    case WEIR__WIRE_HELLO:
        *n = weir__wire_encode_hello(f, &m->u.hello);
        break;
    case WEIR__WIRE_WATERMARK:
        *n = weir__wire_encode_watermark(f, m->u.wm);
        break;
    case WEIR__WIRE_BARRIER:
        *n = weir__wire_encode_barrier(f, m->u.barrier.id, m->u.barrier.kind);
        break;
    case WEIR__WIRE_END:
        *n = weir__wire_encode_end(f);
        break;
    case WEIR__WIRE_IDLE:
        *n = weir__wire_encode_idle(f, m->u.idle);
        break;
    case WEIR__WIRE_CREDIT:
        *n = weir__wire_encode_credit(f, m->u.credits);
        break;
    default:
        ENSURE(!"a decoded message of an unknown kind");
    }
    ENSURE(*n <= WEIR__WIRE_CTRL_MAX);
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly size bytes, so ASan sees any read past the end. */
    uint8_t *body = calloc(1, size ? size : 1);
    ENSURE(body);
    if (size)
        memcpy(body, data, size);
    weir__wire_msg m;
    char why[256];
    int e = weir__wire_decode(body, size, &m, why, sizeof(why));
    if (e) {
        ENSURE(e == -EBADMSG || e == -EMSGSIZE);
        ENSURE(why[0] != '\0');
        ENSURE(m.kind == 0);
    } else {
        ENSURE(size >= 1 && m.kind == body[0]);
        if (m.kind == WEIR__WIRE_BATCH)
            check_batch(m.u.b);
        size_t n;
        uint8_t *f = encode(&m, &n);
        ENSURE(n == size + 4);
        ENSURE(weir__get_be32(f) == size);
        ENSURE(memcmp(f + 4, body, size) == 0);
        free(f);
        weir__wire_msg_free(&m);
        ENSURE(m.kind == 0);
    }
    free(body);
    return 0;
}
