/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/net.h - TCP sockets for tasks, and the length-prefixed frames the
 * cluster protocol is made of.
 *
 * Sockets. weir_net_listen() makes a listening socket on a host (an IPv4 or
 * IPv6 literal, a name, or NULL for every interface) and a port (0 picks a
 * free one; weir_net_local_port() tells which). weir_net_accept() and
 * weir_net_connect() wait on the loop's I/O backend (weir/io.h) up to an
 * absolute deadline. Host names are resolved by getaddrinfo(3) on the
 * blocking pool, never on a scheduler thread, and a connect tries each
 * address in the resolver's order until one answers; a numeric address
 * skips the pool. weir_net_close_graceful() half-closes, lets the peer
 * finish, then closes.
 *
 * Frames. A frame on the wire is a 4-byte big-endian payload length followed
 * by the payload, whose first byte says what kind of message it is. Inside a
 * payload integers are big-endian and strings and byte strings are a u32
 * length followed by the bytes. Three pieces handle them:
 *
 *   - weir_frame_builder encodes: put the fields, finish, send the bytes.
 *   - weir_frame_reader decodes one payload. It never reads past the end:
 *     a field that is not all there makes the call (and every later one)
 *     return -EBADMSG, so a decoder can read all its fields and check once.
 *     Element counts are refused when their smallest possible encoding does
 *     not fit in what is left, so a peer cannot make a decoder allocate for
 *     elements it never sent. weir_frame_at_end() lets a decoder give
 *     fields added at the end of a message ("additive tails") a default when
 *     an older peer did not send them.
 *   - weir_frame_parser cuts a byte stream into frames. It refuses a length
 *     over its cap from the 4 header bytes alone (256 MiB by default, 64 KiB
 *     for a connection's first frame, which arrives before the peer has said
 *     who it is) and takes the payload in chunks of at most 64 KiB, growing
 *     its buffer as bytes arrive: a header that claims 200 MiB costs 64 KiB
 *     until the peer actually sends more. It never asks for a byte past the
 *     end of the frame it is reading, so the stream stays positioned at a
 *     frame boundary. The fiber call weir_frame_read() drives it from a
 *     socket; a stackless task drives it with weir_frame_parser_space() +
 *     weir_io_recv_start() + weir_frame_parser_commit(); a byte buffer
 *     (tests, fuzzing, a TLS layer) goes in through weir_frame_parser_feed().
 *
 * Writing: weir_frame_write() and weir_frame_send() put a whole frame on the
 * socket with one sendmsg(2) where the socket has room, continuing after a
 * short write until the frame is out or the deadline passes. They use
 * MSG_NOSIGNAL: a peer that went away is -EPIPE, never SIGPIPE.
 *
 * Errors follow weir's convention: a count or 0 on success, a negative errno
 * on failure (-ETIMEDOUT past the deadline, -ECANCELED when the task was
 * cancelled). The codes this module adds meaning to:
 *
 *   -EINVAL       a bad argument: port outside 0..65535, NULL or empty host,
 *                 a call that must run in a fiber made from elsewhere
 *   WEIR_ERESOLVE the resolver does not know the host name (weir/error.h)
 *   WEIR_ENOADDR  the host name exists but has no address of a usable family
 *   -EAGAIN       temporary resolver failure (try again later)
 *   -EMSGSIZE     a frame longer than the cap, or a string longer than the
 *                 caller's bound
 *   -EBADMSG      a malformed frame: zero length, a field cut short, a count
 *                 or length past the end of the payload, a NUL inside a
 *                 string read as a C string
 *   -ECONNRESET   the peer closed the connection in the middle of a frame
 *
 * weir_net_strerror() gives the text for these and for any other code (it
 * falls back to weir_strerror()).
 *
 * Which calls need a fiber: every call that waits (accept, connect, resolve,
 * graceful close, frame read and write). Listening and the option helpers
 * never wait and work anywhere. Builder, reader and parser are plain data
 * structures with no runtime dependency. See docs/net.md for a guide.
 */
#ifndef WEIR_NET_H
#define WEIR_NET_H

#include "io.h"
#include "rt.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- addresses and resolution --------------------------------------------------------- */

/* A socket address of any family, with its length. */
typedef struct weir_net_addr {
    struct sockaddr_storage ss;
    socklen_t len;
} weir_net_addr;

/* Room for any address weir_net_addr_format() writes, NUL included:
 * "[ipv6%scope]:65535". */
#define WEIR_NET_ADDRSTRLEN 96
/* Most addresses weir_net_resolve() returns, and a connect tries. */
#define WEIR_NET_RESOLVE_MAX 16

/*
 * Resolve host and port to at most `max` TCP addresses, in the order the
 * resolver gives them (RFC 6724 preference: usually IPv6 first). Returns
 * how many were stored (>= 1) or a negative errno. A numeric host (dotted
 * quad, IPv6 literal, with or without [brackets] and a %scope) is parsed on
 * the spot; a name is resolved on the blocking pool, so the call needs a
 * fiber. On a thread with no weir loop (a plain program thread) names are
 * resolved by that thread itself.
 *
 * The resolver's own timeouts (resolv.conf) can exceed `deadline`: the
 * call then returns -ETIMEDOUT while the lookup finishes in the background.
 */
int weir_net_resolve(const char *host, int port, weir_net_addr *out, int max, int64_t deadline);

/* "127.0.0.1:80", "[::1]:80", "[fe80::1%eth0]:80" into buf; returns the
 * length written, -ENOSPC when cap is too small, -EAFNOSUPPORT for a family
 * other than IPv4/IPv6. */
int weir_net_addr_format(const weir_net_addr *a, char *buf, size_t cap);
/* The port of an IPv4/IPv6 address, or -EAFNOSUPPORT. */
int weir_net_addr_port(const weir_net_addr *a);

/* The address a socket is bound to, and the one it is connected to. */
int weir_net_local_addr(int fd, weir_net_addr *out);
int weir_net_peer_addr(int fd, weir_net_addr *out);
/* The port a socket is bound to (after listening on port 0), or -errno. */
int weir_net_local_port(int fd);

/* ---- listen, accept, connect ---------------------------------------------------------- */

typedef struct weir_listen_opts {
    int backlog;   /* pending connections the kernel queues; 0 = SOMAXCONN */
    int reuseport; /* SO_REUSEPORT: several listeners share the port */
    int v6only;    /* an IPv6 listener refuses IPv4 (default: "::" takes both) */
} weir_listen_opts;

/*
 * A listening TCP socket (close-on-exec, SO_REUSEADDR set) bound to host
 * and port; returns its fd or a negative errno. host NULL or "" means every
 * interface: "::" taking IPv4 too, or 0.0.0.0 on a machine without IPv6.
 * A host name is resolved (see weir_net_resolve) and the first of its
 * addresses that can be bound is used. port 0 picks a free port:
 * weir_net_local_port() tells which. opts may be NULL.
 *
 * Close it with weir_io_close() once it has been used with weir I/O.
 */
int weir_net_listen(const char *host, int port, const weir_listen_opts *opts);

/*
 * Wait for a connection on the listening socket lfd; returns the new
 * socket (non-blocking, close-on-exec) and its peer address in *peer
 * (may be NULL). A connection the peer reset before it was accepted is
 * skipped, not reported. -EMFILE / -ENFILE / -ENOBUFS / -ENOMEM leave the
 * connection in the backlog: an accept loop should wait a little before
 * trying again rather than spin. Fibers only.
 */
int weir_net_accept(int lfd, weir_net_addr *peer, int64_t deadline);

/*
 * Connect to host:port and return the connected socket (close-on-exec), or
 * a negative errno. The host is resolved as by weir_net_resolve(); each
 * address is tried in turn until one connects, all of them within the one
 * deadline. When every address fails, the error is the first address's
 * (usually the most telling: -ECONNREFUSED, -ENETUNREACH...), or
 * -ETIMEDOUT / -ECANCELED when the deadline or a cancellation ended the
 * attempts. Fibers only.
 */
int weir_net_connect(const char *host, int port, int64_t deadline);
/* Connect to one address. Fibers only. */
int weir_net_connect_addr(const weir_net_addr *addr, int64_t deadline);
/* Connect to the first of addrs[0..n) that accepts, in order, all within
 * the deadline; errors as weir_net_connect(). For addresses resolved once
 * and kept. Fibers only. */
int weir_net_connect_addrs(const weir_net_addr *addrs, int n, int64_t deadline);

/* ---- socket options ------------------------------------------------------------------- */

/* TCP_NODELAY on (1) or off (0): send small writes at once instead of
 * coalescing them (Nagle). Request/response protocols want it on. */
int weir_net_set_nodelay(int fd, int on);
/*
 * TCP keep-alive: after idle_s seconds without traffic probe the peer every
 * interval_s seconds, and drop the connection after `count` unanswered
 * probes. idle_s 0 turns keep-alive off; interval_s or count 0 keep the
 * system default. Negative values are -EINVAL.
 */
int weir_net_set_keepalive(int fd, int idle_s, int interval_s, int count);

/* ---- graceful close ------------------------------------------------------------------- */

/*
 * Close a connection so that the peer reads everything sent before it:
 * shut the sending side down (the peer sees EOF), read and discard what
 * the peer still sends until it closes its side or the deadline passes,
 * then close the socket. Closing at once with unread bytes in the receive
 * buffer would make the kernel send a reset, which can destroy data the
 * peer has not read yet.
 *
 * Returns 0 when the peer closed in time, -ETIMEDOUT when it did not (the
 * socket is closed anyway), or the error that ended the drain. The fd is
 * closed in every case. Fibers only (-EINVAL, and the fd is still closed).
 */
int weir_net_close_graceful(int fd, int64_t deadline);

/* Text for any code this module (or weir) returns. */
const char *weir_net_strerror(int err);

/* ---- frames ------------------------------------------------------------------------
 * Sizes are payload bytes (kind byte included, the 4 length bytes not). */
#define WEIR_FRAME_HEADER    4u
#define WEIR_FRAME_MAX       (256u << 20) /* default cap: 256 MiB */
#define WEIR_FRAME_FIRST_MAX (64u << 10)  /* default cap of a connection's first frame */
#define WEIR_FRAME_CHUNK     (64u << 10)  /* most payload bytes read at once */

/* A received frame: the payload, data[0] being the message kind. The
 * caller owns data (malloc'd) and frees it with weir_frame_free(). */
typedef struct weir_frame {
    uint8_t *data;
    size_t len; /* >= 1 */
} weir_frame;

static inline uint8_t weir_frame_kind(const weir_frame *f)
{
    return f->data[0];
}
/* free(f->data) and zero *f; safe on a zeroed frame. */
void weir_frame_free(weir_frame *f);

/* ---- builder ----
 * A growable buffer holding one frame: 4 length bytes, the kind, the fields
 * put so far. The put functions return 0 or a negative errno (-ENOMEM, or
 * -EMSGSIZE past 4 GiB of payload), and the first error also sticks: it is
 * what weir_frame_builder_finish() returns, so an encoder may put all its
 * fields and check once. Fields are private; read the frame through
 * weir_frame_builder_finish(). */
#ifndef WEIR__BUF_DEFINED
#define WEIR__BUF_DEFINED
struct weir__buf { /* weir's growable byte buffer (private) */
    uint8_t *p;
    size_t len, cap;
    int err;
};
#endif
typedef struct weir_frame_builder {
    struct weir__buf buf;
} weir_frame_builder;

/* Start a frame of the given kind. 0 or -ENOMEM (then sticky as above). */
int weir_frame_builder_init(weir_frame_builder *b, uint8_t kind);
/* Free the buffer (unless it was taken). The builder may be init'ed again. */
void weir_frame_builder_close(weir_frame_builder *b);
/* Start another frame in the same buffer (no new allocation). */
void weir_frame_builder_reset(weir_frame_builder *b, uint8_t kind);

int weir_frame_put_u8(weir_frame_builder *b, uint8_t v);
int weir_frame_put_u16(weir_frame_builder *b, uint16_t v);
int weir_frame_put_u32(weir_frame_builder *b, uint32_t v);
int weir_frame_put_u64(weir_frame_builder *b, uint64_t v);
/* u32 length + bytes. -EMSGSIZE above UINT32_MAX bytes. */
int weir_frame_put_bytes(weir_frame_builder *b, const void *p, size_t n);
/* u32 length + the string's bytes (no NUL). NULL is -EINVAL. */
int weir_frame_put_str(weir_frame_builder *b, const char *s);
/* The bytes as they are, no length: for something already encoded. */
int weir_frame_put_raw(weir_frame_builder *b, const void *p, size_t n);

/*
 * Fill in the length and give the frame's bytes (header included) in
 * *frame / *len, ready for weir_frame_write(). Returns 0 or the builder's
 * first error (*frame is then NULL). The bytes belong to the builder: they
 * stay valid until the next put, reset, take or close.
 */
int weir_frame_builder_finish(weir_frame_builder *b, const uint8_t **frame, size_t *len);
/* Like finish, but hand the buffer over: the caller frees it with free()
 * (or with the free of the allocator given to weir_set_allocator); the
 * builder is left empty (init it again to reuse it). NULL on error. */
uint8_t *weir_frame_builder_take(weir_frame_builder *b, size_t *len);

/* ---- reader ----
 * Reads fields from a payload (usually a weir_frame's data/len, the first
 * get being the kind). Borrowed: the bytes must outlive the reader and
 * every view it returned. Every get returns 0 or a negative errno; a failed
 * get stores 0 / NULL in its outputs and consumes nothing, and its error
 * sticks: every later get returns it too. */
typedef struct weir_frame_reader {
    const uint8_t *p;
    size_t len, pos;
    int err;
} weir_frame_reader;

void weir_frame_reader_init(weir_frame_reader *r, const void *data, size_t len);

int weir_frame_get_u8(weir_frame_reader *r, uint8_t *v);
int weir_frame_get_u16(weir_frame_reader *r, uint16_t *v);
int weir_frame_get_u32(weir_frame_reader *r, uint32_t *v);
int weir_frame_get_u64(weir_frame_reader *r, uint64_t *v);
/* n bytes as they are (the counterpart of put_raw), copied into dst. */
int weir_frame_get_raw(weir_frame_reader *r, void *dst, size_t n);
/* A u32-length byte string, as a view into the payload (not copied, not
 * NUL-terminated). */
int weir_frame_get_bytes(weir_frame_reader *r, const uint8_t **p, size_t *n);
/* A string copied into buf as a C string. -EMSGSIZE when it needs more than
 * cap bytes with its NUL (so cap bounds what a peer may send: 256 takes at
 * most 255 bytes), -EBADMSG when it holds a NUL byte. */
int weir_frame_get_str(weir_frame_reader *r, char *buf, size_t cap);
/* A string copied into a malloc'd C string (*out, freed by the caller), at
 * most max bytes long (-EMSGSIZE beyond); -EBADMSG for a NUL inside. */
int weir_frame_get_strdup(weir_frame_reader *r, size_t max, char **out);
/*
 * A u32 element count, checked against what is left: each element takes at
 * least min_item_size bytes on the wire (0 counts as 1), so a count whose
 * smallest encoding is longer than the rest of the payload is -EBADMSG. The
 * count is then safe to size an allocation with: count * sizeof(element)
 * is at most remaining * sizeof(element) / min_item_size.
 */
int weir_frame_get_count(weir_frame_reader *r, size_t min_item_size, uint32_t *n);

/* Nothing left to read (1) or more (0). For additive tails:
 *     uint32_t slots = 1;                    (default for older peers)
 *     if (!weir_frame_at_end(&r)) weir_frame_get_u32(&r, &slots);       */
int weir_frame_at_end(const weir_frame_reader *r);
size_t weir_frame_remaining(const weir_frame_reader *r);
/* The sticky error, 0 if every get so far succeeded. */
int weir_frame_reader_error(const weir_frame_reader *r);

/* ---- parser ----
 * Cuts a byte stream into frames. Per connection: it remembers a frame
 * half received across calls (a read that timed out resumes where it
 * stopped) and whether the first frame is still to come. A refused header,
 * a zero-length frame or EOF inside a frame is final: every later call
 * returns that error, and the connection should be dropped. */
typedef struct weir_frame_limits {
    uint32_t max_frame; /* 0 = WEIR_FRAME_MAX */
    /* Cap of the first frame: 0 = WEIR_FRAME_FIRST_MAX. A client, whose
     * first frame comes from a server it chose, may set it to max_frame. */
    uint32_t max_first;
} weir_frame_limits;

typedef struct weir_frame_parser {
    uint8_t *body;      /* payload so far */
    size_t have, alloc; /* bytes in body, bytes allocated */
    size_t space;       /* what the last space() offered */
    uint32_t need;      /* declared payload length, once the header is in */
    uint32_t max_frame, max_first;
    uint8_t hdr[4];
    uint8_t hdr_have;
    uint8_t first; /* the next frame is the connection's first */
    int err;       /* final error, sticky */
} weir_frame_parser;

/* lim may be NULL (defaults). 0, or -EINVAL. */
int weir_frame_parser_init(weir_frame_parser *p, const weir_frame_limits *lim);
/* Free a frame half received. */
void weir_frame_parser_close(weir_frame_parser *p);

/*
 * Where the next bytes of the stream go: returns how many the parser takes
 * now (> 0, at most WEIR_FRAME_CHUNK, never past the end of the current
 * frame) with *buf pointing at room for them; or a negative errno (the
 * final error; -ENOMEM, after which the call may be repeated). Read at most
 * that many bytes into *buf, then commit what arrived.
 */
ssize_t weir_frame_parser_space(weir_frame_parser *p, void **buf);
/*
 * Account for n bytes written at the last space(): returns 1 when they
 * completed a frame (stored in *out, now the caller's), 0 when more are
 * needed, or a negative errno: -EMSGSIZE for a length over the cap,
 * -EBADMSG for a zero length (both final), -EINVAL for n larger than the
 * space offered (which changes nothing). Each offer is used by one commit.
 */
int weir_frame_parser_commit(weir_frame_parser *p, size_t n, weir_frame *out);
/*
 * Copy bytes from a buffer: stops after the first frame they complete.
 * Returns 1 (a frame in *out; *used bytes were taken, the rest belongs to
 * the next call), 0 (all len bytes taken, no frame yet) or a negative
 * errno (*used bytes were taken before it).
 */
int weir_frame_parser_feed(weir_frame_parser *p, const void *data, size_t len, size_t *used,
                           weir_frame *out);
/*
 * The stream ended: 0 at a frame boundary, -ECONNRESET inside a frame
 * (final), or the final error the parser already had.
 */
int weir_frame_parser_eof(weir_frame_parser *p);
/* Bytes the parser holds for a frame half received (its allocation). */
size_t weir_frame_parser_memory(const weir_frame_parser *p);

/* ---- frames on a socket (fibers) ------------------------------------------------------ */

/*
 * Read the next frame from fd through p. Returns the payload length (> 0)
 * with the frame in *out (the caller's), 0 when the peer closed the
 * connection at a frame boundary, or a negative errno. The deadline covers
 * the whole frame, so a peer trickling a byte at a time cannot hold the
 * reader past it. After -ETIMEDOUT or -ECANCELED the parser keeps what
 * arrived and the next call continues the same frame; nothing past the end
 * of a frame is ever read from the socket.
 */
ssize_t weir_frame_read(int fd, weir_frame_parser *p, weir_frame *out, int64_t deadline);
/*
 * Write a whole frame (header included, as weir_frame_builder_finish()
 * gives it). 0, -EINVAL when the length bytes do not match len (not a
 * frame), or a negative errno. After a failure part of the frame may have
 * been sent: the connection cannot carry another frame and should be
 * closed.
 */
int weir_frame_write(int fd, const void *frame, size_t len, int64_t deadline);
/* Write the frame kind + body (len bytes) without building it: the header
 * and the body go out together. Same results as weir_frame_write(), and
 * -EMSGSIZE for a body the u32 length cannot describe. */
int weir_frame_send(int fd, uint8_t kind, const void *body, size_t len, int64_t deadline);

#ifdef __cplusplus
}
#endif
#endif /* WEIR_NET_H */
