/* SPDX-License-Identifier: Apache-2.0 */
/*
 * buf.h - the one growable byte buffer: frames (net/frame.c), snapshot
 * files, runs and remote-state handles (state) are built in it; and the
 * bounded reader that takes such bytes apart again (weir__rd).
 *
 * A zeroed weir__buf is empty and ready; bytes are appended at the end and
 * the memory grows by doubling, through base/alloc.h, so the allocation
 * failure countdown reaches every encoder built on it. The first failure
 * sticks in err and turns every later put into a no-op: an encoder puts
 * all its fields and checks err once at the end, and a failed encoding
 * never leaves a half-written field followed by later ones.
 *
 * Ownership: the buffer owns p until weir__buf_take hands it to the caller
 * (who weir__free's it) or weir__buf_free releases it; either leaves the
 * buffer empty (zero) again.
 */
#ifndef WEIR_BASE_BUF_H
#define WEIR_BASE_BUF_H

#include <stddef.h>
#include <stdint.h>

/* The definition is shared with weir/net.h, whose frame builder embeds one
 * (a public header cannot include this private one). */
#ifndef WEIR__BUF_DEFINED
#define WEIR__BUF_DEFINED
struct weir__buf {
    uint8_t *p;
    size_t len, cap;
    int err; /* 0, or the first failure (-ENOMEM): sticky */
};
#endif
typedef struct weir__buf weir__buf; /* zero = empty */

/* Room for extra more bytes past len. 0, or -ENOMEM (also set in err), or
 * err if it was already set. */
int weir__buf_reserve(weir__buf *b, size_t extra);
/* Append n bytes. On failure sets b->err; a no-op once err is set. */
void weir__buf_put(weir__buf *b, const void *p, size_t n);
void weir__buf_put_u8(weir__buf *b, uint8_t v);
void weir__buf_put_be16(weir__buf *b, uint16_t v);
void weir__buf_put_be32(weir__buf *b, uint32_t v);
void weir__buf_put_be64(weir__buf *b, uint64_t v);
/* Hand the bytes over: returns p (the caller weir__free's it) and its
 * length in *len (if len), and leaves b empty. If err is set the bytes
 * are freed instead and NULL returned (*len = 0): check err first. An
 * empty buffer gives NULL and 0 too. */
uint8_t *weir__buf_take(weir__buf *b, size_t *len);
/* Free the bytes and leave b empty (err cleared). Safe on a zeroed buffer. */
void weir__buf_free(weir__buf *b);

/* ---- reading ---------------------------------------------------------------------------- */
/* A cursor over untrusted bytes: a take past the end returns NULL (the
 * numbers 0) and sets bad, which sticks, so a decoder takes every field
 * and checks bad once. pos <= len always. */
typedef struct weir__rd {
    const uint8_t *p;
    size_t len, pos;
    int bad;
} weir__rd;

/* The next n bytes (consumed), or NULL with bad set. */
const uint8_t *weir__rd_take(weir__rd *r, size_t n);
uint16_t weir__rd_be16(weir__rd *r);
uint32_t weir__rd_be32(weir__rd *r);
uint64_t weir__rd_be64(weir__rd *r);

#endif
