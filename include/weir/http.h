/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/http.h - HTTP/1.1: an incremental message parser and a serializer.
 *
 * This header will grow the HTTP client pool and the HTTP server (issue 4);
 * for now it holds the two pieces both are built on, neither of which
 * touches a socket:
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
        size_t head_bytes; /* head (and trailer) bytes so far, against max_header_bytes */
        uint64_t left;     /* body or chunk bytes still to come */
        int crlf;          /* bytes of the CRLF after chunk data seen */
        int no_body;       /* the caller's weir_http_parser_no_body() */
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

/* The standard reason phrase of a status ("Not Found"), or "" if unknown. */
const char *weir_http_status_text(int status);

/* ---- client --------------------------------------------------------------------------- */
/* ---- end client ----------------------------------------------------------------------- */

/* ---- server --------------------------------------------------------------------------- */
/* ---- end server ----------------------------------------------------------------------- */

#ifdef __cplusplus
}
#endif
#endif /* WEIR_HTTP_H */
