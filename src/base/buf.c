/* SPDX-License-Identifier: Apache-2.0 */
/*
 * buf.c - the growable byte buffer (buf.h).
 */
#include "base/buf.h"

#include <errno.h>
#include <string.h>

#include "base/alloc.h"
#include "base/be.h"

/* First allocation: small enough for a control frame, large enough that
 * the doubling does not start with a string of tiny reallocs. */
#define BUF_MIN_CAP 64

int weir__buf_reserve(weir__buf *b, size_t extra)
{
    if (b->err)
        return b->err;
    if (extra <= b->cap - b->len)
        return 0;
    if (extra > SIZE_MAX - b->len) {
        b->err = -ENOMEM;
        return b->err;
    }
    size_t want = b->len + extra;
    size_t cap = b->cap ? b->cap : BUF_MIN_CAP;
    while (cap < want)
        cap = cap > SIZE_MAX / 2 ? want : cap * 2;
    uint8_t *np = weir__realloc(b->p, cap);
    if (!np) {
        b->err = -ENOMEM;
        return b->err;
    }
    b->p = np;
    b->cap = cap;
    return 0;
}

void weir__buf_put(weir__buf *b, const void *p, size_t n)
{
    if (weir__buf_reserve(b, n) < 0)
        return;
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}

void weir__buf_put_u8(weir__buf *b, uint8_t v)
{
    weir__buf_put(b, &v, 1);
}

void weir__buf_put_be16(weir__buf *b, uint16_t v)
{
    uint8_t p[2];
    weir__put_be16(p, v);
    weir__buf_put(b, p, sizeof(p));
}

void weir__buf_put_be32(weir__buf *b, uint32_t v)
{
    uint8_t p[4];
    weir__put_be32(p, v);
    weir__buf_put(b, p, sizeof(p));
}

void weir__buf_put_be64(weir__buf *b, uint64_t v)
{
    uint8_t p[8];
    weir__put_be64(p, v);
    weir__buf_put(b, p, sizeof(p));
}

uint8_t *weir__buf_take(weir__buf *b, size_t *len)
{
    uint8_t *p = b->err ? NULL : b->p;
    size_t n = p ? b->len : 0;
    if (!p)
        weir__free(b->p);
    memset(b, 0, sizeof(*b));
    if (len)
        *len = n;
    return p;
}

void weir__buf_free(weir__buf *b)
{
    weir__free(b->p);
    memset(b, 0, sizeof(*b));
}

const uint8_t *weir__rd_take(weir__rd *r, size_t n)
{
    if (r->bad || n > r->len - r->pos) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return p;
}

uint16_t weir__rd_be16(weir__rd *r)
{
    const uint8_t *p = weir__rd_take(r, 2);
    return p ? weir__get_be16(p) : 0;
}

uint32_t weir__rd_be32(weir__rd *r)
{
    const uint8_t *p = weir__rd_take(r, 4);
    return p ? weir__get_be32(p) : 0;
}

uint64_t weir__rd_be64(weir__rd *r)
{
    const uint8_t *p = weir__rd_take(r, 8);
    return p ? weir__get_be64(p) : 0;
}
