/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire.c - the TCP channel's batch frame (src/stream/wire.h): encode and
 * decode time per record of full batches (WEIR_BATCH_RECORDS records of
 * WIRE_RECORD bytes, default 64: a full WEIR_BATCH_BYTES batch). Decoding
 * includes the validation and the allocation of the batch, as a consumer
 * pays them.
 *
 * Beside weir's layout (one 13-byte header per record: i64 ts, u32 len,
 * u8 key group, then the records) it measures the alternative it was
 * chosen over, the same fields in columns as the in-memory batch holds
 * them, encoded and decoded with the same checks (impl=weir-columns), so
 * the choice stays measured. Prints
 *   bench=wire impl=weir op=encode ns_per_record=... record_bytes=64 runs=5
 * per layout and operation (median of the runs).
 */
#include <time.h>

#include "base/be.h"
#include "bench.h"
#include "stream/wire.h"

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* ---- the column layout, for comparison ------------------------------------------------------
 * All timestamps, then all lengths, then all key groups, then the records:
 * the in-memory batch's arrays. The byte swaps are explicit (a swap and an
 * unaligned copy per element): be.h's byte-by-byte composition, fine for
 * one value, is vectorized by gcc -O3 over a column into byte stores and
 * would make this layout look worse than it is. */
static inline void st64(uint8_t *p, uint64_t v)
{
    v = __builtin_bswap64(v);
    memcpy(p, &v, 8);
}

static inline void st32(uint8_t *p, uint32_t v)
{
    v = __builtin_bswap32(v);
    memcpy(p, &v, 4);
}

static inline uint64_t ld64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

static inline uint32_t ld32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return __builtin_bswap32(v);
}

static void cols_encode(const batch *b, uint8_t *out)
{
    uint32_t n = b->n;
    uint8_t *pt = out + 4 + WEIR__WIRE_BATCH_HEAD;
    uint8_t *pl = pt + (size_t)n * 8, *pk = pl + (size_t)n * 4, *pd = pk + n;
    for (uint32_t i = 0; i < n; i++)
        st64(pt + (size_t)i * 8, (uint64_t)b->ts[i]);
    uint32_t data = 0;
    for (uint32_t i = 0; i < n; i++) {
        st32(pl + (size_t)i * 4, b->len[i]);
        data += b->len[i];
    }
    memcpy(pk, b->kg, n);
    for (uint32_t i = 0; i < n; i++) {
        memcpy(pd, b->data + b->off[i], b->len[i]);
        pd += b->len[i];
    }
    weir__put_be32(out, WEIR__WIRE_BATCH_HEAD + n * WEIR__WIRE_REC_HEADER + data);
    out[4] = WEIR__WIRE_BATCH;
    weir__put_be32(out + 5, n);
    weir__put_be32(out + 9, data);
}

static batch *cols_decode(const uint8_t *p, size_t len)
{
    if (len < WEIR__WIRE_BATCH_HEAD)
        return NULL;
    uint32_t n = weir__get_be32(p + 1), data = weir__get_be32(p + 5);
    if (n > WEIR_BATCH_RECORDS || data > WEIR__WIRE_MAX_DATA ||
        len != WEIR__WIRE_BATCH_HEAD + (size_t)n * WEIR__WIRE_REC_HEADER + data)
        return NULL;
    const uint8_t *pt = p + WEIR__WIRE_BATCH_HEAD;
    const uint8_t *pl = pt + (size_t)n * 8, *pk = pl + (size_t)n * 4, *pd = pk + n;
    uint64_t sum = 0, need = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t l = ld32(pl + (size_t)i * 4);
        if (l > WEIR_MAX_RECORD)
            return NULL;
        need = ((need + 7) & ~(uint64_t)7) + l;
        sum += l;
    }
    for (uint32_t i = 0; i < n; i++)
        if (pk[i] >= WEIR_KEY_GROUPS && pk[i] != NO_KG)
            return NULL;
    if (sum != data)
        return NULL;
    batch *b = weir__batch_new((size_t)need);
    if (!b)
        return NULL;
    for (uint32_t i = 0; i < n; i++)
        b->ts[i] = (int64_t)ld64(pt + (size_t)i * 8);
    memcpy(b->kg, pk, n);
    uint32_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t l = ld32(pl + (size_t)i * 4);
        at = (at + 7) & ~(uint32_t)7;
        b->len[i] = l;
        b->off[i] = at;
        memcpy(b->data + at, pd, l);
        pd += l;
        at += l;
    }
    b->n = n;
    b->used = at;
    return b;
}

/* ---- measuring ------------------------------------------------------------------------------ */
typedef struct layout {
    const char *impl;
    size_t (*size)(const batch *b);
    void (*encode)(const batch *b, uint8_t *out);
    batch *(*decode)(const uint8_t *body, size_t len);
} layout;

static batch *weir_decode(const uint8_t *body, size_t len)
{
    weir__wire_msg m;
    char why[128];
    if (weir__wire_decode(body, len, &m, why, sizeof(why)) || m.kind != WEIR__WIRE_BATCH) {
        fprintf(stderr, "wire: decode: %s\n", why);
        exit(1);
    }
    return m.u.b;
}

static volatile uint64_t sink;

static void measure(const layout *ly, const batch *b, uint32_t rec, int runs, int iters)
{
    size_t size = ly->size(b);
    uint8_t *f = malloc(size);
    if (!f)
        exit(1);
    double enc[100], dec[100];
    for (int r = 0; r < runs; r++) {
        double t0 = now_ns();
        for (int i = 0; i < iters; i++) {
            ly->encode(b, f);
            sink += f[size - 1];
        }
        double t1 = now_ns();
        for (int i = 0; i < iters; i++) {
            batch *d = ly->decode(f + 4, size - 4);
            if (!d) {
                fprintf(stderr, "wire: %s refused its own frame\n", ly->impl);
                exit(1);
            }
            sink += d->data[d->off[d->n - 1]];
            weir__batch_free(d);
        }
        double t2 = now_ns();
        enc[r] = (t1 - t0) / ((double)iters * b->n);
        dec[r] = (t2 - t1) / ((double)iters * b->n);
    }
    printf("bench=wire impl=%s op=encode ns_per_record=%.2f record_bytes=%u records=%u runs=%d\n",
           ly->impl, bench_median(enc, runs), rec, b->n, runs);
    printf("bench=wire impl=%s op=decode ns_per_record=%.2f record_bytes=%u records=%u runs=%d\n",
           ly->impl, bench_median(dec, runs), rec, b->n, runs);
    free(f);
}

int main(void)
{
    long rec = bench_parse_long(getenv("WIRE_RECORD"), 64);
    if (rec <= 0 || rec > 4096) {
        fprintf(stderr, "wire: WIRE_RECORD must be 1..4096\n");
        return 2;
    }
    int runs = bench_runs(5);
    int iters = getenv("BENCH_QUICK") ? 500 : 5000;
    batch *b = weir__batch_new((size_t)WEIR_BATCH_RECORDS * (((size_t)rec + 7) & ~(size_t)7));
    if (!b)
        return 1;
    uint8_t buf[4096];
    for (uint32_t i = 0; i < WEIR_BATCH_RECORDS; i++) {
        for (long k = 0; k < rec; k++)
            buf[k] = (uint8_t)(i + (uint32_t)k);
        uint32_t at = (b->used + 7) & ~(uint32_t)7;
        b->ts[i] = 1700000000000 + i;
        b->off[i] = at;
        b->len[i] = (uint32_t)rec;
        b->kg[i] = i % 2 ? (uint8_t)(i % WEIR_KEY_GROUPS) : NO_KG;
        memcpy(b->data + at, buf, (size_t)rec);
        b->used = at + (uint32_t)rec;
        b->n++;
    }
    const layout layouts[] = {
        {"weir", weir__wire_batch_size, weir__wire_batch_encode, weir_decode},
        {"weir-columns", weir__wire_batch_size, cols_encode, cols_decode},
    };
    for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
        measure(&layouts[i], b, (uint32_t)rec, runs, iters);
    weir__batch_free(b);
    return 0;
}
