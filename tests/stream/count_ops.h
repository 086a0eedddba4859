/* SPDX-License-Identifier: Apache-2.0 */
/*
 * count_ops.h - the operators of the keyed count the checkpoint tests run
 * (test_checkpoint.c, test_stream_cancel.c): int64 values -> [1][v % 13]
 * -> key_by the second 8 bytes -> reduce that adds the first -> "k=K n=N".
 * The first record of a key reaches a reduce as it is, so every record is
 * made [count][key] first and the reduce sees one shape.
 */
#ifndef WEIR_TESTS_COUNT_OPS_H
#define WEIR_TESTS_COUNT_OPS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "weir/stream.h"

#define COUNT_KEYS 13

static int to_one(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    int64_t v;
    memcpy(&v, in->data, 8);
    uint8_t rec[16];
    uint64_t one = 1;
    int64_t k = v % COUNT_KEYS;
    memcpy(rec, &one, 8);
    memcpy(rec + 8, &k, 8);
    return weir_emit(ctx, rec, 16, in->ts);
}

static int count16(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    static __thread uint8_t buf[16];
    (void)arg;
    uint64_t a, b;
    memcpy(&a, acc->data, 8);
    memcpy(&b, in->data, 8);
    a += b;
    memcpy(buf, &a, 8);
    memcpy(buf + 8, (const uint8_t *)in->data + 8, 8);
    *out = (weir_rec){buf, 16, in->ts};
    return 0;
}

static int key16(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = (const uint8_t *)in->data + 8;
    *len = 8;
    return 0;
}

static int to_line(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    uint64_t n;
    int64_t k;
    memcpy(&n, in->data, 8);
    memcpy(&k, (const uint8_t *)in->data + 8, 8);
    char line[64];
    int len = snprintf(line, sizeof(line), "k=%lld n=%llu", (long long)k, (unsigned long long)n);
    return weir_emit(ctx, line, (size_t)len, in->ts);
}

#endif
