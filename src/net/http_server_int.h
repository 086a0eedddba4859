/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_server_int.h - the HTTP server's shared state (weir/http.h,
 * "server"), private to src/net: the server object, its routes, a
 * connection and the response it is writing. http_server.c owns them (the
 * connection's loop, routing, the plain answers, stop); http_stream.c
 * writes streamed answers over a connection; http_auth.c is the token
 * check, with its cookie and access_token link. One connection is used by
 * its own fiber only; what the stop reads of it (busy, streaming) is under
 * the server's lock.
 */
#ifndef WEIR_NET_HTTP_SERVER_INT_H
#define WEIR_NET_HTTP_SERVER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/list.h"
#include "weir/http.h"
#include "weir/metrics.h"
#include "weir/net.h"
#include "weir/rt.h"
#include "weir/sync.h"

#define WEIR__HTTP_NMETHODS 8 /* method_names in http_server.c: GET ... PATCH, other */

#define RBUF_SIZE     (16u << 10)
#define FILE_CHUNK    (64u << 10)
#define OUT_KEEP      (64u << 10) /* answers buffered before a flush; buffer kept between */
#define MAX_LISTENERS 64

/* ---- routes --------------------------------------------------------------------------- */
enum { SEG_LIT, SEG_PARAM, SEG_WILD };
enum { ROUTE_HANDLER, ROUTE_STATIC, ROUTE_METRICS };

typedef struct seg {
    int kind;
    const char *s; /* literal text or parameter name (NUL-terminated, in route->text) */
    size_t len;
} seg;

typedef struct route {
    struct route *next;
    int kind, flags;
    char *method; /* NULL: any */
    char *text;   /* the pattern, cut into segments in place */
    seg *segs;
    size_t nseg;
    weir_http_handler h;
    void *arg;
    int dirfd;              /* ROUTE_STATIC */
    struct weir_metrics *m; /* ROUTE_METRICS */
    uint64_t max_body;      /* the route's body cap (weir_http_route_max_body), or 0 */
} route;

struct weir_http_server {
    weir_http_server_opts o;
    weir_http_limits plim; /* the parsers': o.limits, max_body the largest of any route */
    char *host;
    char *token;
    size_t token_len;
    int token_cookie_ok; /* the token is a valid cookie value (RFC 6265 cookie-octets) */
    route *routes, **tail;
    int started;          /* under lock */
    _Atomic int stopping; /* written under lock; read anywhere */
    _Atomic long refs;    /* the owner's, each accept loop's, each connection's */
    int nlisten;
    struct acceptor {
        weir_http_server *s;
        int lfd;
    } acc[MAX_LISTENERS];
    weir_task *acceptors[MAX_LISTENERS];
    int port;
    pthread_mutex_t lock;
    weir__list conns; /* of conn.node; under lock */
    weir_waitgroup *wg;
    _Atomic uint64_t accepted, open, rejected, requests, errors, timeouts;
    _Atomic int rejecting; /* 503 answers being sent */
    weir_counter *m_req[WEIR__HTTP_NMETHODS];
    weir_counter *m_resp[5];
    weir_histogram *m_dur;
    weir_gauge *m_conns;
};

struct weir_http_res {
    struct conn *c;
    weir_http_buf hdr; /* the handler's header fields, serialized */
    int done;          /* an answer was given */
    int status;
    int head_only; /* HEAD request: head without the body */
    int close;     /* answer with Connection: close and close */
    int file_fd;   /* a static file to stream after the head, or -1 */
    uint64_t file_size;
    int stream;     /* STREAM_*: a streamed answer (weir_http_res_stream_start) */
    int chunked;    /* the streamed body is chunked (HTTP/1.1), else close-delimited */
    int stream_err; /* the write that broke the stream (later calls return it) */
};

/* A streamed answer's state: the head went out, then the body is written
 * as the handler goes, until its end (written by the handler or for it). */
enum { STREAM_NONE, STREAM_OPEN, STREAM_ENDED };

typedef struct conn {
    weir__list node; /* on s->conns while its loop serves */
    weir_http_server *s;
    int fd;
    int busy;      /* under s->lock */
    int streaming; /* under s->lock: a streamed answer is open (stop shuts its reads) */
    int linger;    /* close gracefully: the client may still be sending */
    weir_task *task;
    char peer[WEIR_NET_ADDRSTRLEN];
    weir_http_parser p;
    uint8_t rbuf[RBUF_SIZE];
    uint8_t *body;
    size_t blen, bcap;
    weir_http_buf out;
    weir_http_res res;
    const route *rt; /* the route chosen at HEAD */
    weir_http_req req;
    int early_status; /* an answer decided at HEAD (401, 404, 405, 417...) */
    const char *early_msg;
    int auth_invalid;  /* the 401 is for a wrong token (not a missing one) */
    int auth_redirect; /* a valid access_token in the query: 303 to set the cookie */
    char allow[96];
    int64_t t0;
} conn;

/* http_stream.c: the handler of a streamed answer returned handler_rc: end
 * the body for it (or not, after an error) and mark the connection done. */
void weir__http_stream_finish(conn *c, int handler_rc);
/* http_server.c: write c->out now, under the write deadline (0 or the send's
 * error; the buffer is emptied either way); the status line and the fields
 * of every answer, into c->out (the body framing is the caller's). */
int weir__http_flush(conn *c);
void weir__http_put_head(conn *c, weir_http_res *r, int status, const char *ctype);

/* http_auth.c: NULL when the request carries the configured token (or none
 * is configured), else the 401's message (c->auth_redirect set: a 303 to
 * set the cookie instead); and that 303's fields, into c->res.hdr (0 or
 * -ENOMEM). */
const char *weir__http_auth_refusal(conn *c, int *invalid);
int weir__http_put_redirect(conn *c);

#endif /* WEIR_NET_HTTP_SERVER_INT_H */
