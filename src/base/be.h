/* SPDX-License-Identifier: Apache-2.0 */
/*
 * be.h - big-endian integer codecs, the one copy every layer uses: frame
 * headers (net), snapshot files (state), byte keys that sort numerically
 * (stream). Unaligned access is fine: the bytes are composed one by one,
 * which compilers turn into a load and a bswap.
 *
 * The runtime's trace file (rt/trace.c, docs/runtime.md) is the one
 * little-endian format, written on the hot path in the host order of the
 * hosts weir runs on; its two stores live here too, so no layer keeps a
 * private byte-order copy.
 */
#ifndef WEIR_BASE_BE_H
#define WEIR_BASE_BE_H

#include <stdint.h>

static inline void weir__put_be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8), p[1] = (uint8_t)v;
}

static inline void weir__put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

static inline void weir__put_be64(uint8_t *p, uint64_t v)
{
    weir__put_be32(p, (uint32_t)(v >> 32));
    weir__put_be32(p + 4, (uint32_t)v);
}

static inline uint16_t weir__get_be16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t weir__get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t weir__get_be64(const uint8_t *p)
{
    return (uint64_t)weir__get_be32(p) << 32 | weir__get_be32(p + 4);
}

static inline void weir__put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16),
    p[3] = (uint8_t)(v >> 24);
}

static inline void weir__put_le64(uint8_t *p, uint64_t v)
{
    weir__put_le32(p, (uint32_t)v);
    weir__put_le32(p + 4, (uint32_t)(v >> 32));
}

#endif
