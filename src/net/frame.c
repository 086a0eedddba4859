/* SPDX-License-Identifier: Apache-2.0 */
/*
 * frame.c - length-prefixed frames (weir/net.h): the builder, the
 * bounds-checked reader, the stream parser and frame I/O on sockets.
 *
 * Nothing here trusts the peer. The reader compares every field against the
 * bytes left before touching them, with the subtraction on the side that
 * cannot overflow (`n > len - pos`, never `pos + n > len`). The parser never
 * sizes an allocation by a number the peer sent alone: it refuses a length
 * over the cap on the four header bytes, then grows its buffer by at most
 * one 64 KiB chunk beyond what has arrived (doubling, for a linear total
 * cost of copies, but never past the declared length), so a header that
 * claims 200 MiB and is followed by nothing costs 64 KiB. It also never
 * offers room past the end of the current frame, which keeps a socket
 * positioned at a frame boundary: after a refused header the body is still
 * unread in the socket, and after a frame the next one is untouched.
 *
 * Reads go through weir_io_recv() (either backend). Writes use sendmsg(2)
 * with MSG_DONTWAIT | MSG_NOSIGNAL and wait for POLLOUT through
 * weir_io_poll() when the socket is full: weir_io_writev() would be one
 * submission too, but writev(2) cannot take MSG_NOSIGNAL, and a peer that
 * went away must cost an -EPIPE, never a SIGPIPE that kills the process.
 */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "base/be.h"
#include "base/buf.h"
#include "net/frame_int.h"
#include "rt/rt_int.h"
#include "weir/io.h"
#include "weir/net.h"

/* Frames of up to 4 GiB are sized in size_t without overflow checks on the
 * additions below (header + payload, length + bytes). */
_Static_assert(SIZE_MAX > UINT32_MAX, "frame sizes need a 64-bit size_t");

void weir_frame_free(weir_frame *f)
{
    if (!f)
        return;
    free(f->data);
    f->data = NULL;
    f->len = 0;
}

/* ---- builder -------------------------------------------------------------------------- */
/* Most bytes a builder holds: the header plus a payload whose length still
 * fits the u32 length field. */
#define BUILDER_MAX ((size_t)UINT32_MAX + WEIR_FRAME_HEADER)

static int builder_fail(weir_frame_builder *b, int err)
{
    if (!b->buf.err)
        b->buf.err = err;
    return b->buf.err;
}

/* Make room for n more bytes; 0 or the (sticky) error. The frame's own
 * limit comes first: the buffer would grow past what the length field says. */
static int builder_reserve(weir_frame_builder *b, size_t n)
{
    if (b->buf.err)
        return b->buf.err;
    if (n > BUILDER_MAX - b->buf.len)
        return builder_fail(b, -EMSGSIZE);
    return weir__buf_reserve(&b->buf, n);
}

static int builder_append(weir_frame_builder *b, const void *p, size_t n)
{
    int r = builder_reserve(b, n);
    if (r < 0)
        return r;
    weir__buf_put(&b->buf, p, n);
    return b->buf.err;
}

int weir_frame_builder_init(weir_frame_builder *b, uint8_t kind)
{
    if (!b)
        return -EINVAL;
    memset(b, 0, sizeof(*b));
    weir_frame_builder_reset(b, kind);
    return b->buf.err;
}

void weir_frame_builder_reset(weir_frame_builder *b, uint8_t kind)
{
    b->buf.len = 0;
    b->buf.err = 0;
    uint8_t head[WEIR_FRAME_HEADER + 1] = {0, 0, 0, 0, kind};
    builder_append(b, head, sizeof(head));
}

void weir_frame_builder_close(weir_frame_builder *b)
{
    if (!b)
        return;
    weir__buf_free(&b->buf);
}

int weir_frame_put_u8(weir_frame_builder *b, uint8_t v)
{
    return builder_append(b, &v, 1);
}

int weir_frame_put_u16(weir_frame_builder *b, uint16_t v)
{
    uint8_t p[2];
    weir__put_be16(p, v);
    return builder_append(b, p, sizeof(p));
}

int weir_frame_put_u32(weir_frame_builder *b, uint32_t v)
{
    uint8_t p[4];
    weir__put_be32(p, v);
    return builder_append(b, p, sizeof(p));
}

int weir_frame_put_u64(weir_frame_builder *b, uint64_t v)
{
    uint8_t p[8];
    weir__put_be64(p, v);
    return builder_append(b, p, sizeof(p));
}

int weir_frame_put_bytes(weir_frame_builder *b, const void *p, size_t n)
{
    if (n > UINT32_MAX)
        return builder_fail(b, -EMSGSIZE);
    if (n && !p)
        return builder_fail(b, -EINVAL);
    /* Reserve both parts first so a failure leaves no half-written field. */
    int r = builder_reserve(b, 4 + n);
    if (r < 0)
        return r;
    weir_frame_put_u32(b, (uint32_t)n);
    return builder_append(b, p, n);
}

int weir_frame_put_str(weir_frame_builder *b, const char *s)
{
    if (!s)
        return builder_fail(b, -EINVAL);
    return weir_frame_put_bytes(b, s, strlen(s));
}

int weir_frame_put_raw(weir_frame_builder *b, const void *p, size_t n)
{
    if (n && !p)
        return builder_fail(b, -EINVAL);
    return builder_append(b, p, n);
}

int weir_frame_builder_finish(weir_frame_builder *b, const uint8_t **frame, size_t *len)
{
    if (frame)
        *frame = NULL;
    if (len)
        *len = 0;
    if (!b || !b->buf.p)
        return b && b->buf.err ? b->buf.err : -EINVAL;
    if (b->buf.err)
        return b->buf.err;
    /* The builder caps len at BUILDER_MAX, so the payload fits in u32. */
    weir__put_be32(b->buf.p, (uint32_t)(b->buf.len - WEIR_FRAME_HEADER));
    if (frame)
        *frame = b->buf.p;
    if (len)
        *len = b->buf.len;
    return 0;
}

uint8_t *weir_frame_builder_take(weir_frame_builder *b, size_t *len)
{
    if (weir_frame_builder_finish(b, NULL, NULL) < 0) {
        if (len)
            *len = 0;
        return NULL;
    }
    return weir__buf_take(&b->buf, len);
}

/* ---- reader --------------------------------------------------------------------------- */
void weir_frame_reader_init(weir_frame_reader *r, const void *data, size_t len)
{
    r->p = data;
    r->len = data ? len : 0;
    r->pos = 0;
    r->err = 0;
}

/* The next n bytes, or NULL with the error set (sticky). Consumes them. */
static const uint8_t *reader_take(weir_frame_reader *r, size_t n)
{
    if (r->err)
        return NULL;
    /* pos <= len always holds, so len - pos cannot wrap. */
    if (n > r->len - r->pos) {
        r->err = -EBADMSG;
        return NULL;
    }
    const uint8_t *q = r->p + r->pos;
    r->pos += n;
    return q;
}

static int reader_fail(weir_frame_reader *r, int err)
{
    if (!r->err)
        r->err = err;
    return r->err;
}

int weir_frame_get_u8(weir_frame_reader *r, uint8_t *v)
{
    const uint8_t *q = reader_take(r, 1);
    *v = q ? q[0] : 0;
    return q ? 0 : r->err;
}

int weir_frame_get_u16(weir_frame_reader *r, uint16_t *v)
{
    const uint8_t *q = reader_take(r, 2);
    *v = q ? weir__get_be16(q) : 0;
    return q ? 0 : r->err;
}

int weir_frame_get_u32(weir_frame_reader *r, uint32_t *v)
{
    const uint8_t *q = reader_take(r, 4);
    *v = q ? weir__get_be32(q) : 0;
    return q ? 0 : r->err;
}

int weir_frame_get_u64(weir_frame_reader *r, uint64_t *v)
{
    const uint8_t *q = reader_take(r, 8);
    *v = q ? weir__get_be64(q) : 0;
    return q ? 0 : r->err;
}

int weir_frame_get_raw(weir_frame_reader *r, void *dst, size_t n)
{
    const uint8_t *q = reader_take(r, n);
    if (!q) {
        if (dst && n)
            memset(dst, 0, n);
        return r->err;
    }
    if (n)
        memcpy(dst, q, n);
    return 0;
}

/* A u32 length and the bytes after it, consumed together or not at all. */
static const uint8_t *reader_lenbytes(weir_frame_reader *r, size_t *n)
{
    *n = 0;
    if (r->err)
        return NULL;
    size_t save = r->pos;
    const uint8_t *q = reader_take(r, 4);
    if (!q)
        return NULL;
    uint32_t len = weir__get_be32(q);
    const uint8_t *body = reader_take(r, len);
    if (!body) {
        r->pos = save;
        return NULL;
    }
    *n = len;
    return body;
}

int weir_frame_get_bytes(weir_frame_reader *r, const uint8_t **p, size_t *n)
{
    *p = reader_lenbytes(r, n);
    return r->err;
}

int weir_frame_get_str(weir_frame_reader *r, char *buf, size_t cap)
{
    size_t n;
    if (cap && buf)
        buf[0] = '\0';
    if (!buf || cap == 0)
        return reader_fail(r, -EINVAL);
    if (r->err)
        return r->err;
    size_t save = r->pos;
    const uint8_t *q = reader_lenbytes(r, &n);
    if (!q)
        return r->err;
    if (n >= cap || memchr(q, 0, n)) {
        r->pos = save;
        return reader_fail(r, n >= cap ? -EMSGSIZE : -EBADMSG);
    }
    memcpy(buf, q, n);
    buf[n] = '\0';
    return 0;
}

int weir_frame_get_strdup(weir_frame_reader *r, size_t max, char **out)
{
    size_t n;
    *out = NULL;
    if (r->err)
        return r->err;
    size_t save = r->pos;
    const uint8_t *q = reader_lenbytes(r, &n);
    if (!q)
        return r->err;
    if (n > max || memchr(q, 0, n)) {
        r->pos = save;
        return reader_fail(r, n > max ? -EMSGSIZE : -EBADMSG);
    }
    char *s = malloc(n + 1);
    if (!s) {
        r->pos = save;
        return reader_fail(r, -ENOMEM);
    }
    memcpy(s, q, n);
    s[n] = '\0';
    *out = s;
    return 0;
}

int weir_frame_get_count(weir_frame_reader *r, size_t min_item_size, uint32_t *n)
{
    *n = 0;
    if (r->err)
        return r->err;
    size_t save = r->pos;
    const uint8_t *q = reader_take(r, 4);
    if (!q)
        return r->err;
    uint32_t count = weir__get_be32(q);
    if (min_item_size == 0)
        min_item_size = 1;
    /* count * min_item_size > remaining, without the multiplication. */
    if (count > (r->len - r->pos) / min_item_size) {
        r->pos = save;
        return reader_fail(r, -EBADMSG);
    }
    *n = count;
    return 0;
}

int weir_frame_at_end(const weir_frame_reader *r)
{
    return r->pos >= r->len;
}

size_t weir_frame_remaining(const weir_frame_reader *r)
{
    return r->len - r->pos;
}

int weir_frame_reader_error(const weir_frame_reader *r)
{
    return r->err;
}

/* ---- parser --------------------------------------------------------------------------- */
int weir_frame_parser_init(weir_frame_parser *p, const weir_frame_limits *lim)
{
    if (!p)
        return -EINVAL;
    memset(p, 0, sizeof(*p));
    p->max_frame = lim && lim->max_frame ? lim->max_frame : WEIR_FRAME_MAX;
    p->max_first = lim && lim->max_first ? lim->max_first : WEIR_FRAME_FIRST_MAX;
    if (p->max_first > p->max_frame)
        p->max_first = p->max_frame;
    p->first = 1;
    return 0;
}

void weir_frame_parser_close(weir_frame_parser *p)
{
    if (!p)
        return;
    free(p->body);
    p->body = NULL;
    p->have = p->alloc = 0;
    p->space = 0;
}

/* Forget the frame just handed out (its buffer went to the caller). */
static void parser_next(weir_frame_parser *p)
{
    p->body = NULL;
    p->have = p->alloc = 0;
    p->need = 0;
    p->hdr_have = 0;
    p->first = 0;
}

static int parser_fail(weir_frame_parser *p, int err)
{
    if (!p->err)
        p->err = err;
    free(p->body);
    p->body = NULL;
    p->have = p->alloc = 0;
    return p->err;
}

ssize_t weir_frame_parser_space(weir_frame_parser *p, void **buf)
{
    *buf = NULL;
    p->space = 0;
    if (p->err)
        return p->err;
    if (p->hdr_have < WEIR_FRAME_HEADER) {
        *buf = p->hdr + p->hdr_have;
        p->space = WEIR_FRAME_HEADER - p->hdr_have;
        return (ssize_t)p->space;
    }
    /* The header is in and was accepted: read the payload a chunk at a time. */
    size_t left = p->need - p->have;
    size_t chunk = left < WEIR_FRAME_CHUNK ? left : WEIR_FRAME_CHUNK;
    assert(chunk > 0);
    if (p->alloc - p->have < chunk) {
        /* Grow by doubling (linear total copying) but never past the
         * declared length, and never by more than a chunk beyond the bytes
         * that have arrived plus what this read may bring. */
        size_t want = p->have + chunk;
        size_t alloc = p->alloc * 2;
        if (alloc < want)
            alloc = want;
        if (alloc > p->need)
            alloc = p->need;
        uint8_t *nb = realloc(p->body, alloc);
        if (!nb)
            return -ENOMEM; /* not final: the state is unchanged */
        p->body = nb;
        p->alloc = alloc;
    }
    *buf = p->body + p->have;
    p->space = chunk;
    return (ssize_t)chunk;
}

int weir_frame_parser_commit(weir_frame_parser *p, size_t n, weir_frame *out)
{
    out->data = NULL;
    out->len = 0;
    if (p->err)
        return p->err;
    if (n > p->space)
        return -EINVAL;
    p->space = 0;
    if (n == 0)
        return 0;
    if (p->hdr_have < WEIR_FRAME_HEADER) {
        p->hdr_have = (uint8_t)(p->hdr_have + n);
        if (p->hdr_have < WEIR_FRAME_HEADER)
            return 0;
        uint32_t len = weir__get_be32(p->hdr);
        uint32_t cap = p->first ? p->max_first : p->max_frame;
        if (len == 0)
            return parser_fail(p, -EBADMSG); /* no kind byte: not a message */
        if (len > cap)
            return parser_fail(p, -EMSGSIZE);
        p->need = len;
        p->have = 0;
        return 0;
    }
    p->have += n;
    if (p->have < p->need)
        return 0;
    out->data = p->body;
    out->len = p->need;
    parser_next(p);
    return 1;
}

int weir_frame_parser_feed(weir_frame_parser *p, const void *data, size_t len, size_t *used,
                           weir_frame *out)
{
    const uint8_t *src = data;
    size_t off = 0;
    int r = 0;
    out->data = NULL;
    out->len = 0;
    if (p->err) {
        *used = 0;
        return p->err;
    }
    while (off < len) {
        void *dst;
        ssize_t room = weir_frame_parser_space(p, &dst);
        if (room < 0) {
            r = (int)room;
            break;
        }
        size_t n = len - off < (size_t)room ? len - off : (size_t)room;
        memcpy(dst, src + off, n);
        off += n;
        r = weir_frame_parser_commit(p, n, out);
        if (r != 0)
            break;
    }
    *used = off;
    return r;
}

int weir_frame_parser_eof(weir_frame_parser *p)
{
    if (p->err)
        return p->err;
    if (p->hdr_have == 0)
        return 0;
    return parser_fail(p, -ECONNRESET);
}

size_t weir_frame_parser_memory(const weir_frame_parser *p)
{
    return p->alloc;
}

/* ---- frames on a socket --------------------------------------------------------------- */
/* The socket calls wait, so they are for fibers; refuse anything else
 * before touching the socket, even when it would not have had to wait. */
int weir__frame_fiber_caller(void)
{
    return weir__task_current() != NULL && !weir__stackless_caller();
}

static ssize_t recv_fd(void *arg, void *buf, size_t len, int64_t deadline)
{
    return weir_io_recv(*(int *)arg, buf, len, 0, deadline);
}

ssize_t weir_frame_read(int fd, weir_frame_parser *p, weir_frame *out, int64_t deadline)
{
    return weir__frame_read_from(recv_fd, &fd, p, out, deadline);
}

ssize_t weir__frame_read_from(weir__frame_source src, void *arg, weir_frame_parser *p,
                              weir_frame *out, int64_t deadline)
{
    if (!p || !out)
        return -EINVAL;
    out->data = NULL;
    out->len = 0;
    if (!weir__frame_fiber_caller())
        return -EINVAL;
    for (;;) {
        void *buf;
        ssize_t room = weir_frame_parser_space(p, &buf);
        if (room < 0)
            return room;
        /* At most what the frame still needs: a source that buffers (TLS)
         * keeps the rest. */
        ssize_t n = src(arg, buf, (size_t)room, deadline);
        if (n < 0)
            return n; /* the parser keeps what arrived before */
        if (n == 0)
            return weir_frame_parser_eof(p);
        int r = weir_frame_parser_commit(p, (size_t)n, out);
        if (r < 0)
            return r;
        if (r > 0)
            return (ssize_t)out->len;
    }
}

/* Send every byte of iov[0..cnt) (the array is consumed). */
static int send_all(int fd, struct iovec *iov, int cnt, int64_t deadline)
{
    if (!weir__frame_fiber_caller())
        return -EINVAL;
    /* Observe cancellation and the deadline even when the socket has room,
     * as every I/O op does when it starts. */
    if (weir_task_cancelled())
        return -ECANCELED;
    if (deadline != WEIR_FOREVER && deadline <= weir_time_now())
        return -ETIMEDOUT;
    while (cnt > 0) {
        if (iov->iov_len == 0) {
            iov++;
            cnt--;
            continue;
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t n = sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return -errno;
            /* Full: wait for room. An error or hangup also ends the poll;
             * the next sendmsg reports it. */
            int r = weir_io_poll(fd, POLLOUT, deadline);
            if (r < 0)
                return r;
            continue;
        }
        /* A short write: skip what went out and go on with the rest. */
        size_t done = (size_t)n;
        while (cnt > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    return 0;
}

int weir__frame_check(const void *frame, size_t len)
{
    if (!frame || len <= WEIR_FRAME_HEADER || len - WEIR_FRAME_HEADER > UINT32_MAX)
        return -EINVAL;
    return weir__get_be32(frame) == len - WEIR_FRAME_HEADER ? 0 : -EINVAL;
}

int weir_frame_write(int fd, const void *frame, size_t len, int64_t deadline)
{
    if (weir__frame_check(frame, len) < 0)
        return -EINVAL;
    struct iovec iov = {.iov_base = (void *)frame, .iov_len = len};
    return send_all(fd, &iov, 1, deadline);
}

int weir_frame_send(int fd, uint8_t kind, const void *body, size_t len, int64_t deadline)
{
    if (len && !body)
        return -EINVAL;
    if (len > UINT32_MAX - 1)
        return -EMSGSIZE; /* the length field cannot say it */
    uint8_t head[WEIR_FRAME_HEADER + 1];
    weir__put_be32(head, (uint32_t)(len + 1));
    head[WEIR_FRAME_HEADER] = kind;
    struct iovec iov[2] = {{.iov_base = head, .iov_len = sizeof(head)},
                           {.iov_base = (void *)body, .iov_len = len}};
    return send_all(fd, iov, 2, deadline);
}
