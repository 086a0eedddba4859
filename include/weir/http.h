/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/http.h - HTTP/1.1: a message parser and serializer, a client
 * connection pool and a server.
 *
 * The client pool (section "client" below: weir_http_client) and the server
 * (section "server": weir_http_server) are built on two pieces, neither of
 * which touches a socket:
 *
 *   - weir_http_parser reads one side of a connection: requests (a server)
 *     or responses (a client). It is fed byte slices of any size, one byte at
 *     a time if that is how they arrive, and hands back one event per call:
 *     the head is complete (start line + header fields), a slice of body, the
 *     message is complete. Each call says how many bytes it consumed, so a
 *     caller with several pipelined messages in one buffer starts the next
 *     message where the last one stopped.
 *   - weir_http_buf + weir_http_put_*() write requests and responses: start
 *     line, header fields (validated, so a value cannot smuggle in a CRLF),
 *     and a body framed by Content-Length or as chunks.
 *
 * Nothing here trusts the peer. Every line, the number of header fields,
 * the bytes of the head and the body size have caps (weir_http_limits, with
 * safe defaults); the parser's memory grows with the bytes of the head that
 * have arrived, never with a number the peer sent, and body bytes are not
 * copied at all: they are handed out as slices of the caller's input.
 * Ambiguous framing, which lets a proxy and a server disagree on where a
 * message ends (request smuggling), is refused: Content-Length together with
 * Transfer-Encoding in a request, Content-Length values that disagree, a
 * Transfer-Encoding whose last coding is not chunked, obs-fold, bare CR, NUL
 * and bare LF line ends (weir requires CRLF everywhere: see docs/http.md).
 *
 * Errors are a negative errno, final for the parser (every later call
 * returns it), with a short reason (weir_http_parser_reason) and the status
 * a server should answer (weir_http_error_status):
 *
 *   -EBADMSG          400  malformed message or ambiguous framing
 *   -ENAMETOOLONG     414  request line (or status line) over its cap
 *   -E2BIG            431  a header/trailer line, the field count or the
 *                          head's total bytes over their caps
 *   -EMSGSIZE         413  body (Content-Length or chunks) over max_body
 *   -EOPNOTSUPP       501  a transfer coding other than chunked
 *   -EPROTONOSUPPORT  505  an HTTP version other than 1.0 and 1.1
 *   -ECONNRESET       400  the stream ended inside a message (parser_eof)
 *   -ENOMEM           500  out of memory
 *
 * and -EINVAL for a bad argument (a NULL pointer with a length, limits that
 * make no sense), which changes nothing. The parser and the serializer are
 * plain data structures: no runtime, no thread-safety of their own (one
 * parser per connection, used by one task at a time). Guide: docs/http.md.
 */
#ifndef WEIR_HTTP_H
#define WEIR_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A byte string that is not NUL-terminated. */
typedef struct weir_http_str {
    const char *p;
    size_t len;
} weir_http_str;

/* One header (or trailer) field: name and value, the value without the
 * whitespace around it. */
typedef struct weir_http_header {
    weir_http_str name, value;
} weir_http_header;

/* ---- parser --------------------------------------------------------------------------- */

/* Which side the parser reads. */
enum { WEIR_HTTP_REQUEST = 1, WEIR_HTTP_RESPONSE = 2 };

/* Caps. A field left 0 takes the default shown. */
#define WEIR_HTTP_MAX_START_LINE   (8u << 10)  /* request/status line, CRLF excluded: 8 KiB */
#define WEIR_HTTP_MAX_HEADER_LINE  (8u << 10)  /* one field line (or chunk-size line): 8 KiB */
#define WEIR_HTTP_MAX_HEADERS      100u        /* fields in the head, and again in trailers */
#define WEIR_HTTP_MAX_HEADER_BYTES (64u << 10) /* start line + field lines (+ trailers) */
#define WEIR_HTTP_MAX_BODY         (16u << 20) /* body bytes: 16 MiB */

typedef struct weir_http_limits {
    size_t max_start_line;   /* -ENAMETOOLONG (414) beyond */
    size_t max_header_line;  /* -E2BIG (431) beyond */
    size_t max_headers;      /* -E2BIG (431) beyond; trailers have their own count */
    size_t max_header_bytes; /* -E2BIG (431) beyond; every head line with its CRLF, and
                                the trailer lines of the same message */
    uint64_t max_body;       /* -EMSGSIZE (413) beyond; UINT64_MAX: no cap */
} weir_http_limits;

/* What a call to weir_http_parse() produced. */
enum {
    WEIR_HTTP_NEED_MORE = 0, /* every byte given was consumed; feed more */
    WEIR_HTTP_HEAD,          /* start line and header fields are complete */
    WEIR_HTTP_BODY,          /* ev->data / ev->len: body bytes (a slice of the input) */
    WEIR_HTTP_DONE,          /* the message is complete (trailers included) */
};

typedef struct weir_http_event {
    int kind;            /* WEIR_HTTP_* above */
    const uint8_t *data; /* BODY only: points into the data given to this call */
    size_t len;
} weir_http_event;

/* How the body of the current message is delimited (known from HEAD on). */
enum {
    WEIR_HTTP_BODY_NONE = 0, /* no body */
    WEIR_HTTP_BODY_LENGTH,   /* Content-Length bytes */
    WEIR_HTTP_BODY_CHUNKED,  /* Transfer-Encoding: chunked */
    WEIR_HTTP_BODY_CLOSE,    /* responses only: until the connection closes */
};

/*
 * The message fields are read-only for the caller and valid from the HEAD
 * event until the parser starts the next message (the first weir_http_parse()
 * call after DONE) or is closed. The strings point into the parser's own copy
 * of the head, not into the caller's input: the input may be reused as soon
 * as a call returns. Fields past `priv` are private.
 */
typedef struct weir_http_parser {
    int kind;                   /* WEIR_HTTP_REQUEST or WEIR_HTTP_RESPONSE */
    int version_minor;          /* 0 (HTTP/1.0) or 1 (HTTP/1.1) */
    weir_http_str method;       /* requests: "GET", ... (any token; case-sensitive) */
    weir_http_str target;       /* requests: the request-target as sent */
    int status;                 /* responses: 100..999 */
    weir_http_str reason;       /* responses: the reason phrase, maybe empty */
    weir_http_header *headers;  /* header fields in arrival order */
    size_t nheaders;            /*   ... how many */
    weir_http_header *trailers; /* chunked trailer fields (from DONE on) */
    size_t ntrailers;           /*   ... how many */
    int body;                   /* WEIR_HTTP_BODY_* */
    uint64_t content_length;    /* BODY_LENGTH: the declared length */
    uint64_t body_bytes;        /* body bytes delivered so far */
    /* After this message the connection may carry another one (1) or must
     * be closed (0): HTTP/1.1 unless "Connection: close"; HTTP/1.0 only
     * with "Connection: keep-alive"; never after a body delimited by close,
     * a response with both Transfer-Encoding and Content-Length, or 101. */
    int keep_alive;

    struct {
        weir_http_limits lim;
        int state, err;
        const char *why;
        char *buf;                /* the head's lines, then the trailers' */
        size_t len, cap, line;    /* bytes in buf, allocated, start of the current line */
        weir_http_header *fields; /* headers, then trailers */
        size_t fcap;
        size_t head_bytes;     /* head (and trailer) bytes so far, against max_header_bytes */
        uint64_t left;         /* body or chunk bytes still to come */
        int crlf;              /* bytes of the CRLF after chunk data seen */
        int no_body;           /* the caller's weir_http_parser_no_body() */
        uint64_t msg_max_body; /* this message's body cap (weir_http_parser_body_cap), or 0 */
        int cl_seen, te_lines, te_codings, te_chunked, te_last_chunked, te_other;
        int conn_close, conn_ka, hosts;
    } priv;
} weir_http_parser;

/* kind is WEIR_HTTP_REQUEST or WEIR_HTTP_RESPONSE; lim may be NULL
 * (defaults). 0 or -EINVAL. Allocates nothing until bytes arrive. */
int weir_http_parser_init(weir_http_parser *p, int kind, const weir_http_limits *lim);
/* Free what the parser holds; every string it gave out goes stale. */
void weir_http_parser_close(weir_http_parser *p);

/*
 * Feed len bytes (data may be NULL when len is 0). Returns how many bytes
 * were consumed (0..len), with one event in *ev, or a negative errno (final,
 * see the table above). The event is
 * NEED_MORE only when every byte was consumed. A typical loop:
 *
 *     for (;;) {
 *         ssize_t n = weir_http_parse(&p, buf, len, &ev);
 *         if (n < 0) { reply weir_http_error_status(n) and close }
 *         buf += n, len -= n;
 *         if (ev.kind == WEIR_HTTP_NEED_MORE) break;   (read more)
 *         ... HEAD: look at p.method, p.headers; BODY: use ev.data/ev.len;
 *             DONE: the message is complete, the next starts at buf ...
 *     }
 *
 * After HEAD and after the last BODY, call again even with no new bytes: a
 * message without a body gives HEAD then DONE. A DONE leaves the bytes after
 * the message unconsumed; the next call starts the next message (and drops
 * the previous one's fields). Empty lines before a request line are skipped
 * (RFC 9112 2.2).
 */
ssize_t weir_http_parse(weir_http_parser *p, const void *data, size_t len, weir_http_event *ev);

/*
 * The peer closed the stream. Returns 1 when that completed a message (a
 * response body delimited by close, or a message whose DONE is still to be
 * collected: report it as DONE), 0 at a message boundary (a clean close,
 * possibly after empty lines), or a negative errno: -ECONNRESET inside a
 * message (final), or the parser's earlier final error.
 */
int weir_http_parser_eof(weir_http_parser *p);

/*
 * Responses only: the response to come answers a HEAD request (or a CONNECT
 * the caller treats alike), so it has no body whatever its header fields
 * say. Call it before that response's HEAD event; it applies to one
 * response (the flag is cleared when it completes). 1xx, 204 and 304
 * responses never have a body and need no call.
 */
void weir_http_parser_no_body(weir_http_parser *p);

/*
 * From the HEAD event to the end of the message: cap its body at max_body
 * instead of limits.max_body (a server choosing the cap by route;
 * UINT64_MAX: none; 0: the limits' again). The next message has
 * limits.max_body. The check of a Content-Length at the end of the head
 * uses limits.max_body, so a caller lowering or raising caps per message
 * gives the parser the largest one. 0, or -EMSGSIZE (final, as any error)
 * when the declared length or the body so far is over the new cap; -EINVAL
 * for a NULL parser.
 */
int weir_http_parser_body_cap(weir_http_parser *p, uint64_t max_body);

/* The final error (0 if none), and its reason ("" if none); the reason is a
 * static string. */
int weir_http_parser_error(const weir_http_parser *p);
const char *weir_http_parser_reason(const weir_http_parser *p);
/* Bytes the parser holds (its head buffer and field array). */
size_t weir_http_parser_memory(const weir_http_parser *p);

/* The status a server answers to a request that failed with err (table
 * above); 400 for any code not in it. */
int weir_http_error_status(int err);

/*
 * Case-insensitive lookup of a field name among fields[from..n): returns
 * its index or -1. Repeat with from = index + 1 for the next field of the
 * same name.
 */
ssize_t weir_http_find(const weir_http_header *fields, size_t n, const char *name, size_t from);
/* The first header field named `name` (case-insensitive), or NULL. */
const weir_http_str *weir_http_header_get(const weir_http_parser *p, const char *name);

/* ---- serializer ----------------------------------------------------------------------- */

/*
 * A growable output buffer. The put functions append and return 0 or a
 * negative errno: -EINVAL for something that cannot be written safely (a
 * method or field name that is not a token, a CR, LF or NUL in a target,
 * value or reason, a version other than 0/1, a status outside 100..999),
 * -ENOMEM. The first error sticks (later puts return it and append
 * nothing), so a writer may put everything and check once. The bytes are
 * b->p[0..b->len), owned by the buffer: free with weir_http_buf_close().
 *
 * A message is: a start line, header fields, then one of
 *   weir_http_put_end()                    no body
 *   weir_http_put_content(data, n)         Content-Length: n, blank line, body
 *   weir_http_put_chunked()                Transfer-Encoding: chunked, blank line,
 *     weir_http_put_chunk(data, n) ...     then chunks (n == 0 writes nothing)
 *     weir_http_put_last_chunk(tr, ntr)    the last chunk and the trailers
 */
typedef struct weir_http_buf {
    char *p;
    size_t len, cap;
    int err;
} weir_http_buf;

/* An empty buffer (no allocation yet). */
void weir_http_buf_init(weir_http_buf *b);
/* Free the bytes; the buffer is empty again and may be reused. */
void weir_http_buf_close(weir_http_buf *b);
/* Drop the bytes and the sticky error, keeping the allocation. */
void weir_http_buf_reset(weir_http_buf *b);

/* "METHOD target HTTP/1.<minor>". */
int weir_http_put_request_line(weir_http_buf *b, const char *method, const char *target,
                               int version_minor);
/* "HTTP/1.<minor> status reason"; reason NULL uses weir_http_status_text(). */
int weir_http_put_status_line(weir_http_buf *b, int version_minor, int status, const char *reason);
/* "name: value". */
int weir_http_put_header(weir_http_buf *b, const char *name, const char *value);
int weir_http_put_header_n(weir_http_buf *b, const char *name, size_t nlen, const char *value,
                           size_t vlen);
int weir_http_put_end(weir_http_buf *b);
int weir_http_put_content(weir_http_buf *b, const void *data, size_t n);
int weir_http_put_chunked(weir_http_buf *b);
int weir_http_put_chunk(weir_http_buf *b, const void *data, size_t n);
int weir_http_put_last_chunk(weir_http_buf *b, const weir_http_header *trailers, size_t n);
/* Bytes as they are, unchecked: for something already serialized (a header
 * block kept from earlier puts, a body written without framing). */
int weir_http_put_raw(weir_http_buf *b, const void *data, size_t n);

/* The standard reason phrase of a status ("Not Found"), or "" if unknown. */
const char *weir_http_status_text(int status);

/* ---- client --------------------------------------------------------------------------- */
/*
 * weir_http_client sends HTTP/1.1 requests over a pool of keep-alive
 * connections, one pool per scheme://host:port. It is shared freely by
 * tasks on every thread of a runtime: the pools are guarded by a lock that
 * is never held across a suspension, and a request over a pool's cap waits
 * on a FIFO weir_sem (weir/sync.h), so connections are handed to waiters
 * oldest first.
 *
 * A request (weir_http_client_do) goes: parse the URL; take a permit of the
 * pool (at most max_conns connections per host:port, counting the idle
 * ones; over the cap the request waits, or fails with -EBUSY at once when
 * the client was made with fast_fail); take the most recently used idle
 * connection, closing any idle past idle_ms, or connect a new one; send the
 * request; read the whole response into a weir_http_client_resp. A request
 * made by a task that is already cancelled fails with -ECANCELED before it
 * takes a connection. The connection goes back to the pool only when the
 * request was sent whole, the response was read to its end, both sides
 * allowed keep-alive and no byte is left over; after any error, a timeout or
 * a cancellation it is closed, never reused.
 *
 * Idle connections are checked before reuse (weir_http_transport.idle_check):
 * one the server has closed, or one holding bytes nobody asked for (a
 * "body" sent late after a HEAD or a 204, padding, a 408 sent before
 * closing), is closed unused and the next idle one or a new one is taken,
 * so such bytes are never read as the response to a later request. Idle
 * connections past idle_ms are closed by the next request to any host (at
 * most one sweep per idle_ms/2), and a pool with no connection and no
 * request left is freed, so following many hosts does not keep sockets or
 * memory.
 *
 * A pooled connection the server closes just after the check (a race), or
 * on a transport without one, shows as EOF, -ECONNRESET or -EPIPE before
 * the first byte of the response. Such a request is sent once more on a fresh
 * connection when it can be replayed: an idempotent method (GET, HEAD, PUT,
 * DELETE, OPTIONS, TRACE, or any request carrying an Idempotency-Key
 * header) whose body, if any, is a buffer. A streamed body (body_fn) and a
 * POST are never sent twice: they fail with -ECONNRESET (or -EPIPE when the
 * send failed).
 *
 * A server may answer before reading the whole body (413 Content Too Large
 * with Connection: close) and close the connection, which fails the send of
 * the body with -EPIPE or -ECONNRESET: the client then still reads, and a
 * complete response that arrived is returned (status 413, rc 0; the
 * connection is closed). Only when no response byte arrived is the send's
 * error reported (and a pooled connection treated as stale).
 *
 * The deadline of a request is absolute and covers everything: the wait for
 * a permit, name resolution, connect, sending, and the whole response.
 *
 * Transports. http:// uses the built-in plain TCP transport
 * (weir_net_connect, then weir_io_recv/send). https:// uses the transport
 * given in weir_http_client_opts.https: weir's own is made by
 * weir_http_tls_transport_init over a TLS client context (weir/tls.h),
 * and checks the URL's host against the server's certificate. A client
 * without one fails https:// requests with -EPROTONOSUPPORT, and
 * resp->error says why. A failed handshake is -EPROTO (or the socket's
 * errno) with the TLS layer's message in resp->error ("TLS to HOST:PORT:
 * the certificate names ..."). A transport's functions run in the
 * requesting fiber and may suspend.
 *
 * Errors, besides those of weir/net.h, weir/io.h and the parser (table at
 * the top of this header, for the response):
 *
 *   -EINVAL           a malformed URL (no http:// or https://, an empty or
 *                     invalid host, a userinfo part "user@", a bad port, a
 *                     control character, space or non-ASCII byte in the
 *                     path), a bad request field (a method that is not a
 *                     token, both body and body_fn, a NULL body with a
 *                     length, a Content-Length, Transfer-Encoding or invalid
 *                     header field given by the caller), or a call from
 *                     outside a fiber
 *   -EPROTONOSUPPORT  a scheme other than http and https, or https:// with
 *                     no transport configured
 *   -EBUSY            fast_fail: the pool of that host:port is at its cap
 *   -ETIMEDOUT        the deadline passed (waiting, connecting, sending or
 *                     reading)
 *   -ECANCELED        the task was cancelled (before the request, or while
 *                     it ran)
 *   -EMSGSIZE         the response body is over max_response (the
 *                     connection is closed)
 *   -EBADMSG          besides the parser's: more than 5 interim (1xx)
 *                     responses before the final one
 *   -ECONNRESET       the server closed the connection before the response
 *                     was complete
 *
 * On failure resp->error holds a short text of what went wrong.
 */
#include "net.h"

/* A connection-oriented byte stream for the client. connect() opens a
 * connection to host:port (host as in the URL, without [brackets]) and
 * stores it in *conn; read() returns bytes read (> 0), 0 at EOF, or a
 * negative errno; write() returns bytes written (> 0) or a negative errno;
 * close() releases the connection. close() must not block or wait on the
 * peer (no lingering, no waiting for a TLS close_notify reply): it runs on
 * the request path (expired, refused or broken connections are closed by
 * whichever request finds them) and from weir_http_client_free, which may
 * be outside a fiber. Every call but close() and idle_check() gets the
 * request's absolute deadline. ctx is passed to connect() as it is.
 *
 * idle_check() (optional; NULL: idle connections are reused unchecked)
 * tells whether an idle connection may carry a request, without waiting:
 * 0 when nothing is waiting to be read and the peer has not closed it;
 * -EBADMSG when bytes are waiting that nobody asked for (the connection
 * is closed unused, stat `unasked`); -ECONNRESET or another negative
 * errno when the peer closed or reset it (closed unused, stat `stale`).
 * The TCP transport peeks with recv(MSG_PEEK | MSG_DONTWAIT); the TLS one
 * asks the session (weir_tls_idle_check), since a raw peek would take a
 * TLS 1.3 session ticket that arrives after the handshake for unasked
 * bytes.
 *
 * connect_msg() (optional) is connect() with a message: when set it is
 * called instead, and on failure a non-empty msg[cap] becomes
 * resp->error (the TLS transport's handshake failures say what to fix). */
typedef struct weir_http_transport {
    int (*connect)(void *ctx, const char *host, int port, int64_t deadline, void **conn);
    ssize_t (*read)(void *conn, void *buf, size_t len, int64_t deadline);
    ssize_t (*write)(void *conn, const void *buf, size_t len, int64_t deadline);
    void (*close)(void *conn);
    void *ctx;
    int (*idle_check)(void *conn);
    int (*connect_msg)(void *ctx, const char *host, int port, int64_t deadline, void **conn,
                       char *msg, size_t cap);
} weir_http_transport;

/* The built-in plain TCP transport (what http:// uses). A wrapper such as a
 * TLS layer may call it for the socket underneath. */
extern const weir_http_transport weir_http_tcp_transport;

typedef struct weir_tls_ctx weir_tls_ctx;
/* weir's HTTPS transport into *t: TCP, then a TLS client handshake with
 * ctx (a client context of weir/tls.h: the authority, a client
 * certificate for mutual TLS, no_verify_hostname) under the request's
 * deadline, the URL's host sent as SNI and checked against the server's
 * certificate. Closing frees the session and the socket at once (no
 * close_notify exchange). ctx is borrowed and must outlive every client
 * using t. 0, or -EINVAL for a NULL argument. */
int weir_http_tls_transport_init(weir_http_transport *t, weir_tls_ctx *ctx);

#define WEIR_HTTP_CLIENT_MAX_CONNS    16
#define WEIR_HTTP_CLIENT_MAX_RESPONSE (16u << 20) /* body bytes: 16 MiB */
#define WEIR_HTTP_CLIENT_IDLE_MS      30000

/* Options of a client; a zero field takes the default shown. */
typedef struct weir_http_client_opts {
    int max_conns;           /* connections per host:port, idle ones included: 16 */
    int fast_fail;           /* over the cap: fail with -EBUSY at once instead of waiting */
    size_t max_response;     /* response body bytes: 16 MiB; past it -EMSGSIZE */
    weir_http_limits limits; /* response head caps (max_body is replaced by max_response) */
    int64_t idle_ms;         /* an idle connection older than this is closed, not reused: 30 s */
    /* "Authorization: Bearer <token>" on every request that has no
     * Authorization field of its own, to every host the client is asked to
     * reach: give one only to a client that talks to the services the token
     * is meant for. NULL or "": none. Copied. The environment is never read
     * by the library; a tool that takes its token from there says so:
     * .bearer_token = getenv("WEIR_AUTH_TOKEN"). */
    const char *bearer_token;
    /* The transport for https:// URLs; borrowed, must outlive the client.
     * NULL: https:// requests fail with -EPROTONOSUPPORT. */
    const weir_http_transport *https;
    /* User-Agent field: "weir/<version>"; "": none. Spaces and tabs are
     * fine, other control characters are EINVAL. Copied. */
    const char *user_agent;
} weir_http_client_opts;

typedef struct weir_http_client weir_http_client;

/* A client; opts may be NULL (defaults). NULL with errno set: EINVAL for a
 * negative or out-of-range option, a bearer token holding a space or
 * control character, or a user_agent holding a control character other
 * than tab; ENOMEM. Needs no runtime. */
weir_http_client *weir_http_client_new(const weir_http_client_opts *opts);
/*
 * Close the idle connections and free the client. No request may be in
 * flight (a fiber still inside weir_http_client_do() would use freed
 * memory): join the tasks that use the client first. Call it from a fiber
 * where possible; from elsewhere the TCP transport closes with close(2).
 */
void weir_http_client_free(weir_http_client *c);

/* A streamed request body (sent chunked): write up to cap bytes into buf
 * and return how many (> 0), 0 at the end of the body, or a negative errno
 * to abort the request (the connection is closed). Called in the
 * requesting fiber; it may suspend. */
typedef ssize_t (*weir_http_body_fn)(void *arg, void *buf, size_t cap);

typedef struct weir_http_client_req {
    const char *method; /* any token; NULL = "GET". HEAD reads no body */
    const char *url;    /* http://host[:port][/path][?query]; a #fragment is dropped */
    /* Extra header fields, sent in order. Host (replaces the URL's) and
     * Authorization (replaces the bearer token) may be given; Connection:
     * close makes the connection one-off. Content-Length and
     * Transfer-Encoding may not: the client frames the body itself. */
    const weir_http_header *headers;
    size_t nheaders;
    /* A body buffer, sent with Content-Length (POST and PUT without one send
     * "Content-Length: 0"), or a streamed body sent chunked; not both.
     * Borrowed for the call. */
    const void *body;
    size_t body_len;
    weir_http_body_fn body_fn;
    void *body_arg;
    int64_t deadline; /* absolute (weir_time_after_ms); 0 = WEIR_FOREVER */
    /* A response body taken as it arrives, for streams (Server-Sent
     * Events, a watch): when set and the final status is 2xx, each piece
     * of the body goes to on_body(on_body_arg, data, len) instead of into
     * resp->body (left empty), and max_response does not cap it (except a
     * Content-Length over it, refused at the head). on_body
     * returns 0 to read on, 1 to stop (the call returns 0 with the status
     * and the headers; the connection is closed, not pooled), or a
     * negative errno that the call then returns. Another status's body is
     * read whole as usual. Called in the requesting fiber; it may suspend.
     * The deadline still bounds the whole exchange (-ETIMEDOUT). */
    int (*on_body)(void *arg, const void *data, size_t len);
    void *on_body_arg;
} weir_http_client_req;

/*
 * A response, owned by the caller once weir_http_client_do() filled it:
 * free it with weir_http_client_resp_free(). Header names and values are
 * copies, each also NUL-terminated (p[len] == '\0'); the body is malloc'd
 * and NUL-terminated (body[body_len] == '\0', body never NULL after
 * success), convenient for text. Fields past `priv` are private.
 */
typedef struct weir_http_client_resp {
    int status;                /* 100..999 */
    int version_minor;         /* 0 (HTTP/1.0) or 1 (HTTP/1.1) */
    weir_http_header *headers; /* in arrival order */
    size_t nheaders;
    weir_http_header *trailers; /* chunked trailer fields */
    size_t ntrailers;
    char *body;
    size_t body_len;
    /* After a failure: a short text of the cause ("" on success): static,
     * or the transport's message held in this struct (valid while it is). */
    const char *error;
    struct {
        void *fields; /* one block: the arrays and the strings */
        char why[512];
    } priv;
} weir_http_client_resp;

/*
 * Send the request and read the whole response into *resp (always
 * initialised: after a failure it holds nothing to free, but freeing it is
 * harmless). Returns 0 for any complete response, whatever its status, or a
 * negative errno (see above). Fibers only: -EINVAL from elsewhere.
 */
int weir_http_client_do(weir_http_client *c, const weir_http_client_req *req,
                        weir_http_client_resp *resp);
/* GET url; deadline absolute (0 = none). */
int weir_http_get(weir_http_client *c, const char *url, int64_t deadline,
                  weir_http_client_resp *resp);
/* POST body[0..len) to url with a Content-Type (NULL: none). */
int weir_http_post(weir_http_client *c, const char *url, const char *content_type, const void *body,
                   size_t len, int64_t deadline, weir_http_client_resp *resp);

/* Free what a response holds and zero it; safe on a zeroed response. */
void weir_http_client_resp_free(weir_http_client_resp *resp);
/* The value of the first header field named `name` (case-insensitive),
 * NUL-terminated, or NULL. Valid until the response is freed. */
const char *weir_http_client_resp_header(const weir_http_client_resp *resp, const char *name);

/* Counters summed over every host:port, for monitoring and tests. */
typedef struct weir_http_client_stats {
    uint64_t requests;    /* requests that got a complete response */
    uint64_t opened;      /* connections opened */
    uint64_t reused;      /* requests sent on a pooled connection */
    uint64_t waits;       /* requests that waited for a connection (over the cap) */
    uint64_t fast_fails;  /* requests refused with -EBUSY */
    uint64_t retries;     /* requests sent again after a stale pooled connection */
    uint64_t expired;     /* idle connections closed past idle_ms */
    uint64_t stale;       /* idle connections found closed by the server, closed unused */
    uint64_t unasked;     /* idle connections holding bytes nobody asked for, closed unused */
    uint64_t open_now;    /* connections open now, idle or in use */
    uint64_t idle_now;    /* connections idle in the pools now */
    uint64_t waiting_now; /* requests queued for a connection now */
    uint64_t pools_now;   /* host:port pools now (one is freed once unused and empty) */
} weir_http_client_stats;
/* Fill *st; works from any thread. 0 or -EINVAL. */
int weir_http_client_stats_get(weir_http_client *c, weir_http_client_stats *st);
/* ---- end client ----------------------------------------------------------------------- */

/* ---- server ---------------------------------------------------------------------------
 *
 * An HTTP/1.1 server on the runtime: a fiber per connection, keep-alive and
 * pipelining, routes matched in registration order, handlers that may wait
 * (they run in the connection's fiber), answers sent whole or streamed
 * (weir_http_res_stream_*, for Server-Sent Events). Everything a client sends is
 * bounded: head and body caps (weir_http_limits; the body is read into
 * memory, 1 MiB by default), a deadline for the head once its first byte has
 * arrived (a client trickling a header cannot hold a connection), one for
 * the body, one for a response write and one for an idle keep-alive
 * connection, and a cap on open connections. A request that breaks a rule
 * gets its 4xx/5xx answer (a JSON body {"error": ..., "status": ...}) and
 * the connection is closed.
 *
 * Routes. A pattern is a path whose segments are literals, ":name"
 * parameters (one non-empty segment) or, as the last segment only, "*" (any
 * tail, empty included). weir_http_req_param(req, "name") gives a
 * parameter's raw (still percent-encoded) value and "*" the tail. The first
 * route, in registration order, whose pattern and method match wins. A path
 * that matches only routes of other methods is 405 with an Allow header; a
 * HEAD request is served by the GET route when no HEAD route matches (the
 * body is dropped); no match at all is 404.
 *
 * Authentication. When a bearer token is configured (the option, or the
 * environment variable named by auth_env, WEIR_AUTH_TOKEN by default, read
 * when the server is made) every request must carry "Authorization: Bearer
 * <token>" or gets 401 (with "WWW-Authenticate: Bearer realm="weir"" and a
 * JSON body saying what is missing or wrong, never the token) before it is
 * routed, so before any handler runs, whatever its method and whether or
 * not its path is routed (OPTIONS too: an unauthenticated client gets the
 * same answer for every path, so it cannot probe which routes exist). No
 * route is exempt: the check is the server's, not a route's, and there is
 * no flag to opt out of it. The token is compared in constant time; an
 * Authorization value over WEIR_HTTP_MAX_AUTH_FIELD bytes, or a second
 * Authorization field, is a 401 too.
 *
 * A browser cannot send that field when it loads a page or opens an
 * EventSource, so two more ways carry the same token, checked in the same
 * place (before routing, in constant time, never logged):
 *   - a cookie: a request without an Authorization field passes with
 *     "Cookie: ...; weir_token=<token>; ..." (one Cookie field of at most
 *     WEIR_HTTP_MAX_COOKIE_FIELD bytes, one weir_token cookie in it);
 *   - a link: a GET whose query holds access_token=<token> (percent-decoded,
 *     '+' kept) is answered "303 See Other" to the same path and query
 *     without that parameter, with "Set-Cookie: weir_token=<token>; Path=/;
 *     HttpOnly; SameSite=Strict" and Cache-Control: no-store, so the token
 *     leaves the address bar and the next requests carry the cookie. A
 *     wrong access_token (or two of them) is a 401 like a wrong header,
 *     whatever else the request carries. A token holding '"', ',', ';' or
 *     '\' cannot be a cookie: its valid access_token is a 401 saying so.
 * Unset (or auth_env ""): no auth. A
 * variable set but empty, or a token longer than WEIR_HTTP_MAX_TOKEN or
 * holding a byte outside visible ASCII (0x21..0x7e), is a configuration
 * error: weir_http_server_new() fails with EINVAL, and
 * weir_http_server_auth_problem() says why.
 *
 * Static files. weir_http_route_static() serves a directory under a
 * wildcard pattern: the tail is percent-decoded, "." and ".." segments and
 * NUL bytes are refused, and the file is opened beneath the directory with
 * openat2(RESOLVE_BENEATH), so neither ".." nor a symbolic link can reach
 * outside it. A directory serves its index.html; content types come from
 * the file extension. With WEIR_HTTP_STATIC_SPA a missing path without an
 * extension serves the root's index.html (a single-page application's
 * deep links); a missing asset with an extension stays 404.
 *
 * Metrics. With opts.metrics set the server counts requests by method
 * (weir_http_requests_total), responses by status class
 * (weir_http_responses_total), request durations
 * (weir_http_request_duration_seconds) and open connections
 * (weir_http_connections); weir_http_route_metrics() serves any registry
 * in the Prometheus text format.
 *
 * Threads. A server runs on the runtime of the fiber that starts it: with
 * several scheduler threads each thread gets its own listening socket
 * (SO_REUSEPORT, the kernel spreads connections) and accept loop, so
 * connections start on the thread that accepted them; handlers may run on
 * any thread. Routes are registered before weir_http_server_start() and are
 * read-only afterwards.
 */
struct json_t; /* jansson's value type (<jansson.h>) */
struct weir_metrics;

typedef struct weir_http_server weir_http_server;
typedef struct weir_http_res weir_http_res;

#define WEIR_HTTP_MAX_PARAMS 16 /* ":name" segments (and "*") in one pattern */

/* A parameter captured from the path: name from the pattern, value a slice of
 * the request path (not percent-decoded). */
typedef struct weir_http_param {
    const char *name;
    weir_http_str value;
} weir_http_param;

/* A request as a handler sees it; valid until the handler returns. */
typedef struct weir_http_req {
    weir_http_str method; /* "GET", ... */
    weir_http_str target; /* the request-target as sent */
    weir_http_str path;   /* target up to '?' (not decoded) */
    weir_http_str query;  /* after '?', without it; empty when none */
    int version_minor;    /* 0 or 1 */
    const weir_http_header *headers;
    size_t nheaders;
    const uint8_t *body; /* the whole body (chunked bodies joined) */
    size_t body_len;
    weir_http_param params[WEIR_HTTP_MAX_PARAMS];
    size_t nparams;
    const char *peer; /* "127.0.0.1:50312" */
    weir_http_server *server;
} weir_http_req;

/* A handler answers through res (one of the weir_http_res_send family,
 * after any weir_http_res_header). It returns 0, or a negative errno: when
 * no answer was given that is a 500 naming the error. Returning without an
 * answer is a 500 as well. It runs in the connection's fiber and may wait
 * (I/O, locks, a client request); the request's deadlines do not apply to
 * it. */
typedef int (*weir_http_handler)(weir_http_req *req, weir_http_res *res, void *arg);

/* Route flags. */
enum {
    WEIR_HTTP_STATIC_SPA = 2, /* static: extensionless misses serve index.html */
};

/* Bearer auth bounds: the configured token's bytes, and the Authorization
 * field value a request may send (longer is 401 without a comparison). */
#define WEIR_HTTP_MAX_TOKEN      1024
#define WEIR_HTTP_MAX_AUTH_FIELD 2048
/* The Cookie field value a request may send when it carries the token in
 * the weir_token cookie (longer is 401 without a comparison). */
#define WEIR_HTTP_MAX_COOKIE_FIELD 4096

typedef struct weir_http_server_opts {
    const char *host;             /* NULL: "127.0.0.1" (loopback, the safe default); "::" all */
    int port;                     /* 0: a free port (weir_http_server_port) */
    weir_http_limits limits;      /* request caps; 0 fields take the parser's defaults, but
                                     max_body defaults to WEIR_HTTP_SERVER_MAX_BODY */
    int64_t header_timeout_ms;    /* head complete this long after its first byte: 10 s */
    int64_t body_timeout_ms;      /* body complete this long after the head: 30 s */
    int64_t idle_timeout_ms;      /* keep-alive connection idle before it is closed: 60 s */
    int64_t write_timeout_ms;     /* one response written: 30 s */
    int max_conns;                /* open connections; more are answered 503 and closed: 10000 */
    const char *auth_env;         /* env var holding the bearer token: NULL = "WEIR_AUTH_TOKEN",
                                     "" = none; unset: no auth, set but empty: EINVAL */
    const char *auth_token;       /* a token given directly (wins over auth_env; "": EINVAL) */
    struct weir_metrics *metrics; /* request metrics go here (NULL: none) */
    size_t stack_size;            /* connection fibers: 0 = 64 KiB */
    int listeners;                /* accept loops: 0 = one per scheduler thread */
} weir_http_server_opts;

#define WEIR_HTTP_SERVER_MAX_BODY (1u << 20)

typedef struct weir_http_server_stats {
    uint64_t accepted; /* connections accepted */
    uint64_t open;     /* connections open now */
    uint64_t rejected; /* answered 503 over max_conns */
    uint64_t requests; /* requests answered (any status) */
    uint64_t errors;   /* requests refused by the server: 4xx/5xx before a handler */
    uint64_t timeouts; /* connections closed by a header, body or write deadline */
} weir_http_server_stats;

/* A server with no routes; NULL with errno (ENOMEM, EINVAL for bad options,
 * a bad token among them). Needs no runtime until it is started. */
weir_http_server *weir_http_server_new(const weir_http_server_opts *opts);

/* Why weir_http_server_new(opts) would refuse its bearer token (opts NULL:
 * the defaults, so $WEIR_AUTH_TOKEN): a static text to follow the token's
 * source in a message ("set but empty (...)", "longer than 1024 bytes",
 * "holds a byte that is not visible ASCII ..."), never quoting the token;
 * NULL when it is fine or none is configured. For a program to report the
 * problem when it starts, before it makes its server. */
const char *weir_http_server_auth_problem(const weir_http_server_opts *opts);

/* Add a route: method NULL or "*" for any method; flags 0 (none are
 * defined: -EINVAL otherwise). 0, -EINVAL for a malformed pattern (not
 * starting with '/', an empty ":" name, "*" not last, too many
 * parameters), -EBUSY once started. */
int weir_http_route(weir_http_server *s, const char *method, const char *pattern,
                    weir_http_handler h, void *arg, int flags);
/* A route whose request bodies are capped at max_body (> 0) bytes instead
 * of opts.limits.max_body, larger or smaller (an upload route). The route
 * is matched from the head, after the token check and before the body is
 * read: a request routed here may send up to max_body bytes, and a
 * Content-Length over it is 413 before a byte of the body is read (no 100
 * Continue); every other request keeps the server's cap. The body is still
 * read whole into memory: the largest cap of any route bounds what one
 * connection may hold. 0, or as weir_http_route (-EINVAL for max_body 0). */
int weir_http_route_max_body(weir_http_server *s, const char *method, const char *pattern,
                             weir_http_handler h, void *arg, uint64_t max_body);
/* Serve files under dir for GET and HEAD; the pattern ends in "*". The
 * directory is opened now (-ENOENT, -ENOTDIR...). flags: 0 or
 * WEIR_HTTP_STATIC_SPA (-EINVAL for others). */
int weir_http_route_static(weir_http_server *s, const char *pattern, const char *dir, int flags);
/* GET path renders the registry in the Prometheus text format; flags 0. */
int weir_http_route_metrics(weir_http_server *s, const char *path, struct weir_metrics *m,
                            int flags);

/* Listen and start accepting on the caller's runtime. Fibers only. 0 or a
 * negative errno (-EADDRINUSE, ...). */
int weir_http_server_start(weir_http_server *s);
/* The port listened on (after start), or -ENOTCONN. */
int weir_http_server_port(const weir_http_server *s);
/* Stop accepting, close idle connections, let requests in progress finish
 * until the deadline (a streamed answer's weir_http_res_stream_wait returns
 * -ECANCELED at once, so open streams end without waiting for it), then
 * cancel the rest; returns when every connection
 * has ended: 0, or -ETIMEDOUT when some had to be cancelled. Fibers only. */
int weir_http_server_stop(weir_http_server *s, int64_t deadline);
/* Free a server that was never started or has been stopped. */
void weir_http_server_free(weir_http_server *s);
void weir_http_server_stats_get(const weir_http_server *s, weir_http_server_stats *st);

/* The parameter called name ("*" for the wildcard tail), or NULL. */
const weir_http_str *weir_http_req_param(const weir_http_req *r, const char *name);
/* The first header field called name (case-insensitive), or NULL. */
const weir_http_str *weir_http_req_header(const weir_http_req *r, const char *name);
/* The query parameter called name, percent-decoded ('+' as space) into buf
 * as a C string: its length, -ENOENT when absent, -ENOSPC when it needs more
 * than cap bytes, -EBADMSG for bad %-escapes or a NUL. */
ssize_t weir_http_req_query(const weir_http_req *r, const char *name, char *buf, size_t cap);
/* The body parsed as JSON (a new reference the caller decrefs), or NULL
 * with a message in err (may be NULL) when it is not JSON or is nested
 * deeper than WEIR_HTTP_JSON_MAX_DEPTH (the parser recurses per level, on
 * the connection's fiber stack). */
#define WEIR_HTTP_JSON_MAX_DEPTH 64
struct json_t *weir_http_req_json(const weir_http_req *r, char *err, size_t errcap);

/* Percent-decode s[0..n) into out (cap bytes, NUL added): the decoded length,
 * -EBADMSG for a bad escape or a NUL byte, -ENOSPC when out is too small.
 * plus_space: '+' decodes to ' ' (query strings). */
ssize_t weir_http_pct_decode(const char *s, size_t n, char *out, size_t cap, int plus_space);

/* Add a response header field (before the send call). 0 or -EINVAL (not a
 * token, CR/LF in the value, or a field the server writes itself:
 * Content-Length, Transfer-Encoding, Connection), -ENOMEM, -EALREADY after
 * the answer was given. */
int weir_http_res_header(weir_http_res *r, const char *name, const char *value);
/* The answer: status, Content-Type (NULL: none) and body (copied). 0,
 * -EALREADY when one was given, -EINVAL for a status outside 200..999
 * (1xx are not answers), -ENOMEM. */
int weir_http_res_send(weir_http_res *r, int status, const char *content_type, const void *body,
                       size_t n);
/* text/plain; charset=utf-8. */
int weir_http_res_text(weir_http_res *r, int status, const char *text);
/* application/json: v serialized compactly (v is not consumed). */
int weir_http_res_json(weir_http_res *r, int status, const struct json_t *v);
/* application/json {"error": message, "status": status}. */
int weir_http_res_error(weir_http_res *r, int status, const char *message);

/*
 * Streamed answers: a body written over time (Server-Sent Events, a long
 * log), instead of one weir_http_res_send. The handler starts the stream,
 * writes pieces as they come, waits between them with
 * weir_http_res_stream_wait (which watches the client and the server's
 * stop), and ends it:
 *
 *     weir_http_res_stream_start(res, 200, "text/event-stream");
 *     for (;;) {
 *         if ((e = weir_http_res_stream_wait(res, weir_time_after_ms(1000))) < 0)
 *             return 0;   (client gone or server stopping: just return)
 *         n = snprintf(ev, sizeof(ev), "data: %d\n\n", i++);
 *         if ((e = weir_http_res_stream_write(res, ev, n)) < 0)
 *             return 0;
 *     }
 *
 * The body is chunked for an HTTP/1.1 request and delimited by the close
 * for HTTP/1.0; either way the connection closes after a streamed answer
 * (Connection: close). A handler that returns 0 without
 * weir_http_res_stream_end gets the end written for it; one that returns
 * an error after the start has its connection closed without the end (no
 * 500 can follow a head already sent; a chunked client sees a cut body).
 * The request counts once in the stats and metrics, when the handler
 * returns (its duration is the stream's). A HEAD request gets the head
 * only: the writes succeed and send nothing.
 */
/* Write the head now: status (200..999, not 204 or 304), Content-Type (NULL:
 * none), the weir_http_res_header fields given before, Cache-Control:
 * no-cache. 0, -EALREADY when an answer was given, -EINVAL, -ENOMEM, or the
 * write's error (as for weir_http_res_stream_write). */
int weir_http_res_stream_start(weir_http_res *r, int status, const char *content_type);
/* Write p[0..n) now as one chunk (n == 0 writes nothing), under the
 * server's write_timeout_ms. 0; -EPIPE or -ECONNRESET when the client has
 * gone; -ETIMEDOUT when the write stalled past the deadline (a client that
 * stopped reading); -ECANCELED when the fiber is cancelled. After a failed
 * write every later call returns the same error. -EINVAL before a start,
 * -EALREADY after the end. */
int weir_http_res_stream_write(weir_http_res *r, const void *p, size_t n);
/* Wait until deadline (absolute, weir_time_* ns; WEIR_FOREVER) for the
 * handler's next event, watching the connection: 0 at the deadline;
 * -ECONNRESET as soon as the client closes or resets the connection (bytes
 * it sends meanwhile are read and dropped); -ECANCELED when the server is
 * stopping (weir_http_server_stop wakes every waiting stream at once, so
 * open streams do not hold a stop until its deadline) or the fiber is
 * cancelled. Writes still work after -ECANCELED from a stop. */
int weir_http_res_stream_wait(weir_http_res *r, int64_t deadline);
/* Write the body's end (the last chunk; nothing for HTTP/1.0). 0, or the
 * write's error; -EALREADY when already ended. */
int weir_http_res_stream_end(weir_http_res *r);
/* ---- end server ----------------------------------------------------------------------- */

/* ---- multipart ------------------------------------------------------------------------
 *
 * multipart/form-data bodies (RFC 7578, over RFC 2046's multipart syntax):
 * an HTML form's upload, or a client's "curl -F". The body must be whole in
 * memory (the server's weir_http_req body; weir_http_route_max_body for a
 * large upload). One pass, nothing allocated, nothing copied: each part's
 * fields are views into the body (or, for the default content type, a
 * static string), valid as long as the body is, and NOT NUL-terminated.
 *
 * The boundary comes from the Content-Type's boundary parameter, a token or
 * a quoted string, 1 to 70 characters of RFC 2046's set. Line ends are CRLF
 * (a bare LF is refused, as in heads); the first delimiter may open the
 * body, a preamble before it and an epilogue after the closing delimiter
 * are ignored; "--boundary" inside data counts only when it starts a line
 * (after CRLF) and is followed by optional spaces or tabs and CRLF, or by
 * "--". Every part needs Content-Disposition: form-data with a name; its
 * Content-Type is "text/plain" when it has none; other header fields are
 * ignored. A quoted name or filename is taken as sent between its quotes,
 * without unescaping (browsers percent-encode '"', CR and LF in them as
 * %22, %0D and %0A: decode if you need to; a filename is a hint from the
 * client, never a path to use as it is).
 *
 * Refused, with -EBADMSG and a reason naming what was wrong: a Content-Type
 * that is not multipart/form-data, without a boundary, with two, or with
 * one that is empty, longer than 70 or holds a character outside the set;
 * no delimiter; a body that ends before the closing delimiter; a part
 * without Content-Disposition: form-data or without a name (or with either
 * parameter twice, or two such fields, or two Content-Types); a header
 * line over WEIR_HTTP_MULTIPART_MAX_LINE bytes, more than
 * WEIR_HTTP_MULTIPART_MAX_HEADERS header lines in a part, a folded line, a
 * line without "name:", a control character; bare LF or CR line ends. More
 * parts than cap is -E2BIG. -EINVAL for bad arguments.
 */
#define WEIR_HTTP_MULTIPART_MAX_BOUNDARY 70   /* RFC 2046 */
#define WEIR_HTTP_MULTIPART_MAX_LINE     1024 /* one part header line, CRLF excluded */
#define WEIR_HTTP_MULTIPART_MAX_HEADERS  16   /* header lines in one part */

typedef struct weir_http_part {
    weir_http_str name;         /* the form field's name, never empty */
    weir_http_str filename;     /* p NULL: no filename parameter; len 0 with p set: filename="" */
    weir_http_str content_type; /* as sent, or "text/plain" when the part has none */
    const uint8_t *data;        /* the part's bytes, a view into the body */
    size_t len;
} weir_http_part;

/*
 * Parse body[0..len) as multipart/form-data with the given Content-Type
 * value (content_type[0..ctlen), not NUL-terminated; NULL: none). Fills
 * parts[0..*nparts), in body order, and returns 0; or a negative errno
 * (above) with *nparts the parts complete before the problem and, when why
 * is given, a NUL-terminated reason in why[0..whycap) (never the data).
 */
int weir_http_multipart_parse(const char *content_type, size_t ctlen, const uint8_t *body,
                              size_t len, weir_http_part *parts, size_t cap, size_t *nparts,
                              char *why, size_t whycap);
/* The same for a server request: its Content-Type field and its body. */
int weir_http_req_multipart(const weir_http_req *r, weir_http_part *parts, size_t cap,
                            size_t *nparts, char *why, size_t whycap);
/* ---- end multipart -------------------------------------------------------------------- */

#ifdef __cplusplus
}
#endif
#endif /* WEIR_HTTP_H */
