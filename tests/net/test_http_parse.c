/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_http_parse.c - the HTTP/1.1 parser and serializer (weir/http.h).
 *
 * Most tests go through drive(), which feeds a byte string in pieces of a
 * given size and records every message the parser produced (start line,
 * header and trailer fields, body, keep-alive, where each message ended).
 * Every case is run whole and split at every size from 1 byte up, and the
 * records must be identical: feeding one byte at a time gives the same
 * messages, the same errors and the same reasons as feeding everything at
 * once.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "test.h"
#include "weir/http.h"

#define MAXMSG 8

typedef struct rec {
    char method[32], target[128], reason[64];
    int status, minor, keep_alive, body_kind;
    uint64_t content_length;
    char fields[1024]; /* "name=value|" for each header field, at HEAD */
    char fields_at_done[1024];
    char trailers[512];
    char body[8192];
    size_t body_len;
    size_t end; /* stream offset just after the message */
} rec;

typedef struct run {
    int err, status;
    const char *why;
    int eof; /* weir_http_parser_eof() result, when asked */
    rec m[MAXMSG];
    int n;       /* complete messages */
    int heads;   /* HEAD events */
    size_t used; /* bytes consumed in all */
} run;

static void cat_str(char *dst, size_t cap, weir_http_str s)
{
    size_t l = strlen(dst);
    if (s.len >= cap - l)
        TEST__FAIL("record overflow");
    memcpy(dst + l, s.p, s.len);
    dst[l + s.len] = 0;
}

static void fmt_fields(char *dst, size_t cap, const weir_http_header *f, size_t n)
{
    dst[0] = 0;
    for (size_t i = 0; i < n; i++) {
        cat_str(dst, cap, f[i].name);
        cat_str(dst, cap, (weir_http_str){"=", 1});
        cat_str(dst, cap, f[i].value);
        cat_str(dst, cap, (weir_http_str){"|", 1});
    }
}

/* Feed data[0..len) in pieces of `step` bytes (0: all at once). */
static void drive(int kind, const char *data, size_t len, size_t step, const weir_http_limits *lim,
                  int no_body, int eof, run *o)
{
    memset(o, 0, sizeof(*o));
    weir_http_parser p;
    CHECK_EQ(weir_http_parser_init(&p, kind, lim), 0);
    if (no_body)
        weir_http_parser_no_body(&p);
    size_t off = 0;
    if (step == 0)
        step = len ? len : 1;
    int failed = 0;
    while (!failed) {
        size_t piece = len - off < step ? len - off : step;
        const char *b = data + off;
        size_t left = piece;
        for (;;) {
            weir_http_event ev;
            ssize_t n = weir_http_parse(&p, b, left, &ev);
            if (n < 0) {
                o->err = (int)n;
                o->why = weir_http_parser_reason(&p);
                CHECK_EQ(weir_http_parser_error(&p), n);
                /* final: a second call says the same */
                CHECK_EQ(weir_http_parse(&p, "x", 1, &ev), n);
                failed = 1;
                break;
            }
            CHECK_LE((size_t)n, left);
            b += n;
            left -= n;
            o->used += (size_t)n;
            if (ev.kind == WEIR_HTTP_NEED_MORE) {
                CHECK_EQ(left, 0);
                break;
            }
            CHECK_LT(o->n, MAXMSG);
            rec *m = &o->m[o->n];
            switch (ev.kind) {
            case WEIR_HTTP_HEAD:
                o->heads++;
                if (p.method.p)
                    cat_str(m->method, sizeof(m->method), p.method);
                if (p.target.p)
                    cat_str(m->target, sizeof(m->target), p.target);
                if (p.reason.p)
                    cat_str(m->reason, sizeof(m->reason), p.reason);
                m->status = p.status;
                m->minor = p.version_minor;
                m->keep_alive = p.keep_alive;
                m->body_kind = p.body;
                m->content_length = p.content_length;
                fmt_fields(m->fields, sizeof(m->fields), p.headers, p.nheaders);
                break;
            case WEIR_HTTP_BODY:
                CHECK((const char *)ev.data >= data + off &&
                      (const char *)ev.data + ev.len <= data + off + piece);
                CHECK_LE(m->body_len + ev.len, sizeof(m->body));
                memcpy(m->body + m->body_len, ev.data, ev.len);
                m->body_len += ev.len;
                CHECK_EQ(p.body_bytes, m->body_len);
                break;
            case WEIR_HTTP_DONE:
                fmt_fields(m->fields_at_done, sizeof(m->fields_at_done), p.headers, p.nheaders);
                fmt_fields(m->trailers, sizeof(m->trailers), p.trailers, p.ntrailers);
                m->end = o->used;
                o->n++;
                if (no_body)
                    weir_http_parser_no_body(&p);
                break;
            default:
                TEST__FAIL("bad event %d", ev.kind);
            }
        }
        off += piece;
        if (off >= len)
            break;
    }
    if (eof && !failed) {
        o->eof = weir_http_parser_eof(&p);
        if (o->eof == 1) {
            rec *m = &o->m[o->n];
            fmt_fields(m->fields_at_done, sizeof(m->fields_at_done), p.headers, p.nheaders);
            m->end = o->used;
            o->n++;
        } else if (o->eof < 0) {
            o->err = o->eof;
            o->why = weir_http_parser_reason(&p);
        }
    }
    o->status = o->err ? weir_http_error_status(o->err) : 0;
    weir_http_parser_close(&p);
}

static void same_run(const run *a, const run *b, size_t step)
{
    if (a->err != b->err || a->why != b->why || a->n != b->n || a->heads != b->heads ||
        a->eof != b->eof || (!a->err && a->used != b->used) ||
        memcmp(a->m, b->m, sizeof(a->m)) != 0)
        TEST__FAIL("split at %zu differs from one shot: err %d/%d (%s / %s) n %d/%d", step, a->err,
                   b->err, a->why ? a->why : "", b->why ? b->why : "", a->n, b->n);
}

/* drive() one shot, then at every split size: all must agree. */
static void drive_all(int kind, const char *s, const weir_http_limits *lim, int no_body, int eof,
                      run *o)
{
    size_t len = strlen(s);
    drive(kind, s, len, 0, lim, no_body, eof, o);
    static run r; /* big: keep it off the stack */
    for (size_t step = 1; step <= len; step++) {
        drive(kind, s, len, step, lim, no_body, eof, &r);
        same_run(o, &r, step);
    }
}

static void req(const char *s, run *o)
{
    drive_all(WEIR_HTTP_REQUEST, s, NULL, 0, 0, o);
}

static void resp(const char *s, int eof, run *o)
{
    drive_all(WEIR_HTTP_RESPONSE, s, NULL, 0, eof, o);
}

static run R;

/* ---- golden requests ---------------------------------------------------------------------- */

TEST(request_get)
{
    req("GET /index.html?q=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n"
        "X-Empty:\r\nX-Pad: \t padded value \t\r\n\r\n",
        &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.n, 1);
    CHECK_STR(R.m[0].method, "GET");
    CHECK_STR(R.m[0].target, "/index.html?q=1");
    CHECK_EQ(R.m[0].minor, 1);
    CHECK_EQ(R.m[0].keep_alive, 1);
    CHECK_EQ(R.m[0].body_kind, WEIR_HTTP_BODY_NONE);
    CHECK_STR(R.m[0].fields, "Host=example.com|Accept=*/*|X-Empty=|X-Pad=padded value|");
    CHECK_STR(R.m[0].fields_at_done, R.m[0].fields);
    CHECK_EQ(R.m[0].body_len, 0);
    CHECK_EQ(R.m[0].end, strlen("GET /index.html?q=1 HTTP/1.1\r\nHost: example.com\r\n"
                                "Accept: */*\r\nX-Empty:\r\nX-Pad: \t padded value \t\r\n\r\n"));
}

TEST(request_post_content_length)
{
    req("POST /submit HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello world", &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.n, 1);
    CHECK_STR(R.m[0].method, "POST");
    CHECK_EQ(R.m[0].body_kind, WEIR_HTTP_BODY_LENGTH);
    CHECK_EQ(R.m[0].content_length, 11);
    CHECK_EQ(R.m[0].body_len, 11);
    CHECK(memcmp(R.m[0].body, "hello world", 11) == 0);
}

TEST(request_http10_and_forms)
{
    req("GET / HTTP/1.0\r\n\r\n", &R); /* no Host needed in 1.0 */
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.m[0].minor, 0);
    CHECK_EQ(R.m[0].keep_alive, 0);
    req("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", &R);
    CHECK_EQ(R.err, 0);
    CHECK_STR(R.m[0].target, "*");
    req("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", &R);
    CHECK_EQ(R.err, 0);
    CHECK_STR(R.m[0].target, "example.com:443");
    req("GET http://x.org/a HTTP/1.1\r\nHost: x.org\r\n\r\n", &R);
    CHECK_STR(R.m[0].target, "http://x.org/a");
    /* empty lines before a request line are skipped (RFC 9112 2.2) */
    req("\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.n, 1);
    CHECK_STR(R.m[0].method, "GET");
}

TEST(header_lookup_case_insensitive)
{
    const char *s = "GET / HTTP/1.1\r\nHost: h\r\nX-Dup: one\r\ncontent-TYPE: text/plain\r\n"
                    "x-dup: two\r\n\r\n";
    weir_http_parser p;
    weir_http_event ev;
    CHECK_EQ(weir_http_parser_init(&p, WEIR_HTTP_REQUEST, NULL), 0);
    ssize_t n = weir_http_parse(&p, s, strlen(s), &ev);
    CHECK_EQ(n, (ssize_t)strlen(s));
    CHECK_EQ(ev.kind, WEIR_HTTP_HEAD);
    const weir_http_str *v = weir_http_header_get(&p, "Content-Type");
    CHECK(v && v->len == 10 && memcmp(v->p, "text/plain", 10) == 0);
    CHECK(weir_http_header_get(&p, "content-length") == NULL);
    ssize_t i = weir_http_find(p.headers, p.nheaders, "X-DUP", 0);
    CHECK_EQ(i, 1);
    i = weir_http_find(p.headers, p.nheaders, "x-dup", (size_t)i + 1);
    CHECK_EQ(i, 3);
    CHECK(p.headers[3].value.len == 3 && memcmp(p.headers[3].value.p, "two", 3) == 0);
    CHECK_EQ(weir_http_find(p.headers, p.nheaders, "x-dup", 4), -1);
    CHECK_EQ(weir_http_parse(&p, NULL, 0, &ev), 0);
    CHECK_EQ(ev.kind, WEIR_HTTP_DONE);
    weir_http_parser_close(&p);
}

/* ---- golden responses --------------------------------------------------------------------- */

TEST(response_content_length)
{
    resp("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer: weir\r\n\r\nabcde", 0, &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.n, 1);
    CHECK_EQ(R.m[0].status, 200);
    CHECK_STR(R.m[0].reason, "OK");
    CHECK_EQ(R.m[0].keep_alive, 1);
    CHECK_EQ(R.m[0].body_len, 5);
    resp("HTTP/1.1 404 Not Found Here\r\nContent-Length: 0\r\n\r\n", 0, &R);
    CHECK_EQ(R.m[0].status, 404);
    CHECK_STR(R.m[0].reason, "Not Found Here");
    resp("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", 0, &R); /* reason and its SP omitted */
    CHECK_EQ(R.err, 0);
    CHECK_STR(R.m[0].reason, "");
    resp("HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n", 0, &R);
    CHECK_EQ(R.err, 0);
}

TEST(response_close_delimited)
{
    resp("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end", 1, &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.eof, 1);
    CHECK_EQ(R.n, 1);
    CHECK_EQ(R.m[0].body_kind, WEIR_HTTP_BODY_CLOSE);
    CHECK_EQ(R.m[0].keep_alive, 0);
    CHECK_EQ(R.m[0].body_len, 13);
    /* without the close the message never completes */
    resp("HTTP/1.1 200 OK\r\n\r\nmore", 0, &R);
    CHECK_EQ(R.n, 0);
    CHECK_EQ(R.heads, 1);
}

TEST(response_without_body)
{
    /* 204 and 304 have no body even with a Content-Length */
    resp("HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n",
         0, &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.n, 2);
    CHECK_EQ(R.m[1].status, 304);
    CHECK_EQ(R.m[1].body_kind, WEIR_HTTP_BODY_NONE);
    CHECK_EQ(R.m[1].keep_alive, 1);
    /* 1xx then the final response */
    resp("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0, &R);
    CHECK_EQ(R.n, 2);
    CHECK_EQ(R.m[0].status, 100);
    CHECK_EQ(R.m[1].body_len, 2);
    /* 101: the connection leaves HTTP */
    resp("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", 0, &R);
    CHECK_EQ(R.n, 1);
    CHECK_EQ(R.m[0].keep_alive, 0);
    /* the answer to HEAD: the caller says so; both responses have none */
    drive_all(WEIR_HTTP_RESPONSE,
              "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"
              "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
              NULL, 1, 0, &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.n, 2);
    CHECK_EQ(R.m[0].body_kind, WEIR_HTTP_BODY_NONE);
    CHECK_EQ(R.m[0].content_length, 1000);
    CHECK_EQ(R.m[1].body_len, 0);
}

TEST(response_te_and_cl_uses_chunked_and_closes)
{
    resp("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n"
         "3\r\nabc\r\n0\r\n\r\n",
         0, &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.n, 1);
    CHECK_EQ(R.m[0].body_kind, WEIR_HTTP_BODY_CHUNKED);
    CHECK_EQ(R.m[0].body_len, 3);
    CHECK_EQ(R.m[0].keep_alive, 0);
}

/* ---- chunked ------------------------------------------------------------------------------ */

TEST(chunked_with_extensions_and_trailers)
{
    req("POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        "5;name=value;flag\r\nhello\r\n"
        "1A ; x=\"quoted; ok\"\r\nabcdefghijklmnopqrstuvwxyz\r\n"
        "000\r\nChecksum: abc\r\nX-Trailer: two words \r\n\r\n",
        &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.n, 1);
    CHECK_EQ(R.m[0].body_kind, WEIR_HTTP_BODY_CHUNKED);
    CHECK_EQ(R.m[0].body_len, 31);
    CHECK(memcmp(R.m[0].body, "helloabcdefghijklmnopqrstuvwxyz", 31) == 0);
    CHECK_STR(R.m[0].trailers, "Checksum=abc|X-Trailer=two words|");
    /* the head's slices survive the trailers moving the buffer */
    CHECK_STR(R.m[0].fields_at_done, R.m[0].fields);
    CHECK_STR(R.m[0].fields, "Host=h|Transfer-Encoding=chunked|");
}

TEST(chunked_trailers_move_the_head_buffer)
{
    /* many trailer bytes: the head buffer grows several times after HEAD */
    static char s[8192];
    strcpy(s, "POST / HTTP/1.1\r\nHost: h\r\nX-A: first\r\nTransfer-Encoding: chunked\r\n\r\n"
              "1\r\nz\r\n0\r\n");
    for (int i = 0; i < 40; i++)
        strcat(s,
               "X-Long-Trailer: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    strcat(s, "\r\n");
    weir_http_parser p;
    weir_http_event ev;
    CHECK_EQ(weir_http_parser_init(&p, WEIR_HTTP_REQUEST, NULL), 0);
    const char *b = s;
    size_t left = strlen(s);
    int done = 0;
    while (!done) {
        ssize_t n = weir_http_parse(&p, b, left, &ev);
        CHECK_GE(n, 0);
        b += n, left -= (size_t)n;
        done = ev.kind == WEIR_HTTP_DONE;
        CHECK(ev.kind != WEIR_HTTP_NEED_MORE);
    }
    CHECK_EQ(p.ntrailers, 40);
    const weir_http_str *v = weir_http_header_get(&p, "x-a");
    CHECK(v && v->len == 5 && memcmp(v->p, "first", 5) == 0);
    CHECK(p.method.len == 4 && memcmp(p.method.p, "POST", 4) == 0);
    CHECK_EQ(left, 0);
    weir_http_parser_close(&p);
}

TEST(chunked_errors)
{
    const char *head = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
    struct {
        const char *body;
        int err;
    } cases[] = {
        {"x\r\n", -EBADMSG},                        /* not hex */
        {";ext\r\n", -EBADMSG},                     /* no size */
        {"5 junk\r\nhello\r\n0\r\n\r\n", -EBADMSG}, /* junk after size */
        {"5\r\nhelloXX0\r\n\r\n", -EBADMSG},        /* no CRLF after data */
        {"5\r\nhello\n0\r\n\r\n", -EBADMSG},        /* LF alone after data */
        {"5\n", -EBADMSG},                          /* bare LF */
        {"5;a\rb\r\n", -EBADMSG},                   /* bare CR in an extension */
        {"10000000000000000\r\n", -EBADMSG},        /* 17 hex digits: overflow */
        {"FFFFFFFFFFFFFFFF\r\n", -EMSGSIZE},        /* fits, but over max_body */
        {"1000001\r\n", -EMSGSIZE},                 /* 16 MiB + 1 */
        {"0\r\nBad Trailer: x\r\n\r\n", -EBADMSG},
        {"0\r\n folded\r\n\r\n", -EBADMSG},
    };
    char s[512];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(s, sizeof(s), "%s%s", head, cases[i].body);
        req(s, &R);
        if (R.err != cases[i].err)
            TEST__FAIL("case %zu: err %d want %d (%s)", i, R.err, cases[i].err, R.why);
    }
    /* the sum of chunks is capped too */
    weir_http_limits lim = {.max_body = 8};
    drive_all(WEIR_HTTP_REQUEST,
              "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
              "5\r\nhello\r\n4\r\nabcd\r\n0\r\n\r\n",
              &lim, 0, 0, &R);
    CHECK_EQ(R.err, -EMSGSIZE);
    CHECK_EQ(R.status, 413);
    /* exactly at the cap is fine */
    drive_all(WEIR_HTTP_REQUEST,
              "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
              "5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n",
              &lim, 0, 0, &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.m[0].body_len, 8);
}

/* ---- pipelining and keep-alive ------------------------------------------------------------ */

TEST(pipelined_requests)
{
    const char *a = "GET /a HTTP/1.1\r\nHost: h\r\n\r\n";
    const char *b = "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nxyz";
    const char *c = "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "2\r\nhi\r\n0\r\n\r\n";
    char s[512];
    snprintf(s, sizeof(s), "%s%s%sGET /partial", a, b, c);
    req(s, &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.n, 3);
    CHECK_STR(R.m[0].target, "/a");
    CHECK_STR(R.m[1].target, "/b");
    CHECK_STR(R.m[2].target, "/c");
    CHECK_EQ(R.m[0].end, strlen(a));
    CHECK_EQ(R.m[1].end, strlen(a) + strlen(b));
    CHECK_EQ(R.m[2].end, strlen(a) + strlen(b) + strlen(c));
    CHECK_EQ(R.used, strlen(s)); /* the partial fourth is buffered */

    /* the caller may stop at DONE and resume from the bytes it gives back */
    weir_http_parser p;
    weir_http_event ev;
    CHECK_EQ(weir_http_parser_init(&p, WEIR_HTTP_REQUEST, NULL), 0);
    snprintf(s, sizeof(s), "%s%s", a, b);
    ssize_t n = weir_http_parse(&p, s, strlen(s), &ev);
    CHECK_EQ(n, (ssize_t)strlen(a));
    CHECK_EQ(ev.kind, WEIR_HTTP_HEAD);
    n = weir_http_parse(&p, s + strlen(a), strlen(b), &ev);
    CHECK_EQ(n, 0);
    CHECK_EQ(ev.kind, WEIR_HTTP_DONE);
    n = weir_http_parse(&p, s + strlen(a), strlen(b), &ev);
    CHECK_EQ(n, (ssize_t)strlen(b) - 3);
    CHECK_EQ(ev.kind, WEIR_HTTP_HEAD);
    CHECK(p.target.len == 2 && memcmp(p.target.p, "/b", 2) == 0);
    weir_http_parser_close(&p);
}

TEST(keep_alive_decisions)
{
    struct {
        const char *s;
        int ka;
    } cases[] = {
        {"GET / HTTP/1.1\r\nHost: h\r\n\r\n", 1},
        {"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: h\r\nConnection: Keep-Alive, CLOSE\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\n\r\n", 1},
        {"GET / HTTP/1.0\r\n\r\n", 0},
        {"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 1},
        {"GET / HTTP/1.0\r\nConnection: foo,  Keep-Alive \r\n\r\n", 1},
        {"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        req(cases[i].s, &R);
        CHECK_EQ(R.err, 0);
        if (R.m[0].keep_alive != cases[i].ka)
            TEST__FAIL("case %zu: keep_alive %d want %d", i, R.m[0].keep_alive, cases[i].ka);
    }
    resp("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", 0, &R);
    CHECK_EQ(R.m[0].keep_alive, 0);
    resp("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", 0, &R);
    CHECK_EQ(R.m[0].keep_alive, 1);
    resp("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 0, &R);
    CHECK_EQ(R.m[0].keep_alive, 0);
}

/* ---- errors and their statuses ------------------------------------------------------------ */

typedef struct err_case {
    const char *s;
    int err, status;
} err_case;

static void check_errors(int kind, const err_case *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        drive_all(kind, c[i].s, NULL, 0, 0, &R);
        if (R.err != c[i].err || R.status != c[i].status)
            TEST__FAIL("case %zu (%s): err %d status %d (%s), want %d %d", i, c[i].s, R.err,
                       R.status, R.why ? R.why : "", c[i].err, c[i].status);
        CHECK(R.why && R.why[0]);
    }
}

TEST(request_errors)
{
    static const err_case c[] = {
        {"GET  / HTTP/1.1\r\n\r\n", -EBADMSG, 400},
        {"GET / HTTP/1.1 \r\n\r\n", -EBADMSG, 400},
        {"GET /\r\n\r\n", -EBADMSG, 400},
        {"G(T / HTTP/1.1\r\n\r\n", -EBADMSG, 400},
        {"GET /a b HTTP/1.1\r\n\r\n", -EBADMSG, 400},
        {"GET /\x7f HTTP/1.1\r\n\r\n", -EBADMSG, 400},
        {"GET / HTTP/1.1\n", -EBADMSG, 400},                /* bare LF */
        {"GET / HTTP/1.1\r\nHost: h\n\r\n", -EBADMSG, 400}, /* bare LF in the head */
        {"GET / HTTP/1.1\r\nHost: h\r\n\n", -EBADMSG, 400}, /* bare LF ending it */
        {"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", -EBADMSG, 400},
        {"GET / HTTP/1.1\r\nHost: h\r\nX: \x01\r\n\r\n", -EBADMSG, 400},
        {"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", -EBADMSG, 400}, /* obs-fold */
        {"GET / HTTP/1.1\r\n Host: h\r\n\r\n", -EBADMSG, 400},
        {"GET / HTTP/1.1\r\nHost : h\r\n\r\n", -EBADMSG, 400}, /* space before colon */
        {"GET / HTTP/1.1\r\nHost h\r\n\r\n", -EBADMSG, 400},
        {"GET / HTTP/1.1\r\n: h\r\n\r\n", -EBADMSG, 400},
        {"GET / HTTP/1.1\r\n\r\n", -EBADMSG, 400}, /* 1.1 without Host */
        {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", -EBADMSG, 400},
        {"GET / HTTP/2.0\r\n\r\n", -EPROTONOSUPPORT, 505},
        {"GET / HTTP/1.2\r\n\r\n", -EPROTONOSUPPORT, 505},
        {"GET / HTTP/0.9\r\n\r\n", -EPROTONOSUPPORT, 505},
        {"GET / HTTP/1.10\r\n\r\n", -EBADMSG, 400},
        {"GET / http/1.1\r\n\r\n", -EBADMSG, 400},
        /* Content-Length */
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1x\r\n\r\n", -EBADMSG, 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\n", -EBADMSG, 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", -EBADMSG, 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n", -EBADMSG, 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1 2\r\n\r\n", -EBADMSG, 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 18446744073709551616\r\n\r\n", -EBADMSG,
         400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 18446744073709551615\r\n\r\n", -EMSGSIZE,
         413},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 16777217\r\n\r\n", -EMSGSIZE, 413},
        /* smuggling */
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", -EBADMSG,
         400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1, 2\r\n\r\n", -EBADMSG, 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1,\r\n\r\n", -EBADMSG, 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
         -EBADMSG, 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
         -EBADMSG, 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", -EBADMSG, 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n"
         "\r\n",
         -EBADMSG, 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", -EBADMSG,
         400},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n\r\n", -EBADMSG, 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \"chunked\"\r\n\r\n", -EBADMSG, 400},
        {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", -EBADMSG, 400},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", -EOPNOTSUPP,
         501},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n", -EOPNOTSUPP, 501},
        {"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\n", -EOPNOTSUPP, 501},
    };
    check_errors(WEIR_HTTP_REQUEST, c, sizeof(c) / sizeof(c[0]));

    /* identical duplicates are one length (RFC 9110 8.6) */
    req("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nContent-Length: 2, 2\r\n\r\nok", &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.m[0].body_len, 2);
    /* case and whitespace do not hide chunked */
    req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:  ChUnKeD \r\n\r\n0\r\n\r\n", &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.m[0].body_kind, WEIR_HTTP_BODY_CHUNKED);
}

TEST(request_nul_byte)
{
    /* strings with NULs inside cannot go through drive_all's strlen */
    static const char s[] = "GET / HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n";
    for (size_t step = 0; step < sizeof(s); step++) {
        drive(WEIR_HTTP_REQUEST, s, sizeof(s) - 1, step, NULL, 0, 0, &R);
        CHECK_EQ(R.err, -EBADMSG);
        CHECK_STR(R.why, "NUL byte");
    }
    static const char t[] = "GET /\0 HTTP/1.1\r\n\r\n";
    drive(WEIR_HTTP_REQUEST, t, sizeof(t) - 1, 0, NULL, 0, 0, &R);
    CHECK_EQ(R.err, -EBADMSG);
}

TEST(response_errors)
{
    static const err_case c[] = {
        {"HTTP/1.1 20 OK\r\n\r\n", -EBADMSG, 400},
        {"HTTP/1.1 2000 OK\r\n\r\n", -EBADMSG, 400},
        {"HTTP/1.1 099 Low\r\n\r\n", -EBADMSG, 400},
        {"HTTP/1.1 abc OK\r\n\r\n", -EBADMSG, 400},
        {"HTTP/1.1  200 OK\r\n\r\n", -EBADMSG, 400},
        {"HTTP/3.0 200 OK\r\n\r\n", -EPROTONOSUPPORT, 505},
        {"HTTP/1.1 200 O\x01K\r\n\r\n", -EBADMSG, 400},
        {"\r\nHTTP/1.1 200 OK\r\n\r\n", -EBADMSG, 400},
        {"ICY 200 OK\r\n\r\n", -EBADMSG, 400},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", -EOPNOTSUPP, 501},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", -EBADMSG, 400},
        {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", -EBADMSG, 400},
        {"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", -EMSGSIZE, 413},
    };
    check_errors(WEIR_HTTP_RESPONSE, c, sizeof(c) / sizeof(c[0]));
}

TEST(eof_handling)
{
    resp("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", 1, &R);
    CHECK_EQ(R.err, -ECONNRESET);
    CHECK_EQ(R.n, 0);
    resp("HTTP/1.1 200 OK\r\nContent-", 1, &R);
    CHECK_EQ(R.err, -ECONNRESET);
    resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", 1, &R);
    CHECK_EQ(R.err, -ECONNRESET);
    resp("HTTP/1.1 204 No Content\r\n\r\n", 1, &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.eof, 0); /* clean close at a boundary */
    CHECK_EQ(R.n, 1);
    drive_all(WEIR_HTTP_REQUEST, "\r\n", NULL, 0, 1, &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.eof, 0);
    drive_all(WEIR_HTTP_REQUEST, "", NULL, 0, 1, &R);
    CHECK_EQ(R.eof, 0);
    /* close-delimited body over the cap */
    weir_http_limits lim = {.max_body = 4};
    drive_all(WEIR_HTTP_RESPONSE, "HTTP/1.1 200 OK\r\n\r\nabcde", &lim, 0, 1, &R);
    CHECK_EQ(R.err, -EMSGSIZE);
    drive_all(WEIR_HTTP_RESPONSE, "HTTP/1.1 200 OK\r\n\r\nabcd", &lim, 0, 1, &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.eof, 1);
}

/* ---- limits ------------------------------------------------------------------------------- */

static void fill(char *dst, char c, size_t n)
{
    memset(dst, c, n);
    dst[n] = 0;
}

TEST(limit_start_line)
{
    weir_http_limits lim = {.max_start_line = 32};
    char s[256], t[64];
    fill(t, 'a', 32 - strlen("GET / HTTP/1.1")); /* target "/" + pad: exactly 32 */
    snprintf(s, sizeof(s), "GET /%s HTTP/1.1\r\nHost: h\r\n\r\n", t);
    CHECK_EQ(strchr(s, '\r') - s, 32);
    drive_all(WEIR_HTTP_REQUEST, s, &lim, 0, 0, &R);
    CHECK_EQ(R.err, 0);
    snprintf(s, sizeof(s), "GET /%sb HTTP/1.1\r\nHost: h\r\n\r\n", t);
    drive_all(WEIR_HTTP_REQUEST, s, &lim, 0, 0, &R);
    CHECK_EQ(R.err, -ENAMETOOLONG);
    CHECK_EQ(R.status, 414);
    /* refused before the line ends: a peer that never sends LF */
    fill(s, 'a', 100);
    drive(WEIR_HTTP_REQUEST, s, 100, 1, &lim, 0, 0, &R);
    CHECK_EQ(R.err, -ENAMETOOLONG);
    CHECK_LE(R.used, 34);
    drive_all(WEIR_HTTP_RESPONSE, "HTTP/1.1 200 a very long reason phrase here\r\n\r\n", &lim, 0, 0,
              &R);
    CHECK_EQ(R.err, -ENAMETOOLONG);
}

TEST(limit_header_line)
{
    weir_http_limits lim = {.max_header_line = 16};
    drive_all(WEIR_HTTP_REQUEST, "GET / HTTP/1.1\r\nHost: h\r\nX: 0123456789abc\r\n\r\n", &lim, 0,
              0, &R);
    CHECK_EQ(R.err, 0); /* "X: 0123456789abc" is 16 */
    drive_all(WEIR_HTTP_REQUEST, "GET / HTTP/1.1\r\nHost: h\r\nX: 0123456789abcd\r\n\r\n", &lim, 0,
              0, &R);
    CHECK_EQ(R.err, -E2BIG);
    CHECK_EQ(R.status, 431);
    /* trailers obey it too */
    drive_all(WEIR_HTTP_REQUEST,
              "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
              "0\r\nX: 0123456789abcdefghijklmn\r\n\r\n",
              &(weir_http_limits){.max_header_line = 26}, 0, 0, &R);
    CHECK_EQ(R.err, -E2BIG);
    /* and chunk-size lines, as a malformed body */
    drive_all(WEIR_HTTP_REQUEST,
              "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
              "1;aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\nx\r\n0\r\n\r\n",
              &(weir_http_limits){.max_header_line = 26}, 0, 0, &R);
    CHECK_EQ(R.err, -EBADMSG);
    CHECK_STR(R.why, "chunk size line too long");
}

TEST(limit_header_count)
{
    weir_http_limits lim = {.max_headers = 3};
    drive_all(WEIR_HTTP_REQUEST, "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n\r\n", &lim, 0, 0,
              &R);
    CHECK_EQ(R.err, 0);
    drive_all(WEIR_HTTP_REQUEST, "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", &lim,
              0, 0, &R);
    CHECK_EQ(R.err, -E2BIG);
    CHECK_EQ(R.status, 431);
    CHECK_STR(R.why, "too many header fields");
    /* trailers have their own count */
    drive_all(WEIR_HTTP_REQUEST,
              "POST / HTTP/1.1\r\nHost: h\r\nA: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
              "0\r\nT: 1\r\nU: 2\r\nV: 3\r\n\r\n",
              &lim, 0, 0, &R);
    CHECK_EQ(R.err, 0);
    drive_all(WEIR_HTTP_REQUEST,
              "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
              "0\r\nT: 1\r\nU: 2\r\nV: 3\r\nW: 4\r\n\r\n",
              &lim, 0, 0, &R);
    CHECK_EQ(R.err, -E2BIG);
    CHECK_STR(R.why, "too many trailer fields");
}

TEST(limit_header_bytes)
{
    const char *s = "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\n\r\n";
    weir_http_limits lim = {.max_header_bytes = strlen(s)};
    drive_all(WEIR_HTTP_REQUEST, s, &lim, 0, 0, &R);
    CHECK_EQ(R.err, 0);
    lim.max_header_bytes--;
    drive_all(WEIR_HTTP_REQUEST, s, &lim, 0, 0, &R);
    CHECK_EQ(R.err, -E2BIG);
    CHECK_EQ(R.status, 431);
    /* empty lines before the request count: an endless CRLF stream ends */
    static char crlf[400];
    for (int i = 0; i < 199; i++)
        memcpy(crlf + 2 * i, "\r\n", 2);
    lim.max_header_bytes = 100;
    drive_all(WEIR_HTTP_REQUEST, crlf, &lim, 0, 0, &R);
    CHECK_EQ(R.err, -E2BIG);
    /* trailers count against the same total */
    const char *t = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "0\r\nT: 1\r\n\r\n";
    lim.max_header_bytes = strlen(t) - 3 /* "0\r\n" */;
    drive_all(WEIR_HTTP_REQUEST, t, &lim, 0, 0, &R);
    CHECK_EQ(R.err, 0);
    lim.max_header_bytes--;
    drive_all(WEIR_HTTP_REQUEST, t, &lim, 0, 0, &R);
    CHECK_EQ(R.err, -E2BIG);
}

TEST(limit_body)
{
    weir_http_limits lim = {.max_body = 5};
    drive_all(WEIR_HTTP_REQUEST, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nabcde",
              &lim, 0, 0, &R);
    CHECK_EQ(R.err, 0);
    drive_all(WEIR_HTTP_REQUEST, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 6\r\n\r\n", &lim, 0,
              0, &R);
    CHECK_EQ(R.err, -EMSGSIZE);
    CHECK_EQ(R.status, 413);
    CHECK_EQ(R.heads, 0); /* refused at the head, before any body */
    CHECK_EQ(weir_http_error_status(-ENOMEM), 500);
    CHECK_EQ(weir_http_error_status(-ECONNRESET), 400);
}

TEST(limit_body_per_message)
{
    /* A cap set at HEAD holds for that message only: a chunked body past
     * it fails, a declared length past it fails at once, and the next
     * message has the limits' cap again. */
    weir_http_limits lim = {.max_body = 100};
    weir_http_parser p;
    weir_http_event ev;
    CHECK_EQ(weir_http_parser_init(&p, WEIR_HTTP_REQUEST, &lim), 0);
    const char *m = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "6\r\nabcdef\r\n0\r\n\r\n";
    ssize_t n = weir_http_parse(&p, m, strlen(m), &ev);
    CHECK_EQ(ev.kind, WEIR_HTTP_HEAD);
    CHECK_EQ(weir_http_parser_body_cap(&p, 5), 0);
    CHECK_EQ(weir_http_parse(&p, m + n, strlen(m) - (size_t)n, &ev), -EMSGSIZE);
    CHECK_EQ(weir_http_parser_body_cap(&p, 50), -EMSGSIZE); /* final */
    weir_http_parser_close(&p);

    CHECK_EQ(weir_http_parser_init(&p, WEIR_HTTP_REQUEST, &lim), 0);
    m = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 6\r\n\r\nabcdef";
    n = weir_http_parse(&p, m, strlen(m), &ev);
    CHECK_EQ(ev.kind, WEIR_HTTP_HEAD);
    CHECK_EQ(weir_http_parser_body_cap(&p, 5), -EMSGSIZE);
    CHECK_EQ(weir_http_parser_error(&p), -EMSGSIZE);
    weir_http_parser_close(&p);

    CHECK_EQ(weir_http_parser_init(&p, WEIR_HTTP_REQUEST, &lim), 0);
    m = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 6\r\n\r\nabcdef"
        "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        "7\r\nabcdefg\r\n0\r\n\r\n";
    size_t off = 0, len = strlen(m);
    int done = 0;
    n = weir_http_parse(&p, m, len, &ev);
    CHECK_EQ(ev.kind, WEIR_HTTP_HEAD);
    CHECK_EQ(weir_http_parser_body_cap(&p, 6), 0); /* exactly the length */
    off += (size_t)n;
    while (done < 2) {
        n = weir_http_parse(&p, m + off, len - off, &ev);
        CHECK_GE(n, 0);
        off += (size_t)n;
        if (ev.kind == WEIR_HTTP_DONE)
            done++;
        CHECK(ev.kind != WEIR_HTTP_NEED_MORE || done == 2);
    }
    CHECK_EQ(p.body_bytes, 7); /* the second message had 100 again, not 6 */
    CHECK_EQ(weir_http_parser_body_cap(NULL, 1), -EINVAL);
    weir_http_parser_close(&p);
}

TEST(limits_invalid)
{
    weir_http_parser p;
    CHECK_EQ(weir_http_parser_init(&p, 3, NULL), -EINVAL);
    CHECK_EQ(weir_http_parser_init(&p, WEIR_HTTP_REQUEST,
                                   &(weir_http_limits){.max_start_line = SIZE_MAX}),
             -EINVAL);
    weir_http_event ev;
    CHECK_EQ(weir_http_parser_init(&p, WEIR_HTTP_REQUEST, NULL), 0);
    CHECK_EQ(weir_http_parse(&p, NULL, 1, &ev), -EINVAL);
    CHECK_EQ(weir_http_parser_error(&p), 0);
    weir_http_parser_close(&p);
}

TEST(memory_tracks_arrival)
{
    weir_http_parser p;
    weir_http_event ev;
    CHECK_EQ(weir_http_parser_init(&p, WEIR_HTTP_REQUEST, NULL), 0);
    CHECK_EQ(weir_http_parser_memory(&p), 0);
    const char *h = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 16000000\r\n\r\n";
    CHECK_EQ(weir_http_parse(&p, h, strlen(h), &ev), (ssize_t)strlen(h));
    CHECK_EQ(ev.kind, WEIR_HTTP_HEAD);
    size_t mem = weir_http_parser_memory(&p);
    CHECK_LE(mem, 1024);
    static char body[65536];
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(weir_http_parse(&p, body, sizeof(body), &ev), (ssize_t)sizeof(body));
        CHECK_EQ(ev.kind, WEIR_HTTP_BODY);
        CHECK(ev.data == (const uint8_t *)body); /* a slice, not a copy */
    }
    CHECK_EQ(weir_http_parser_memory(&p), mem);
    weir_http_parser_close(&p);
}

/* ---- serializer --------------------------------------------------------------------------- */

TEST(serialize_round_trip)
{
    weir_http_buf b;
    weir_http_buf_init(&b);
    weir_http_put_request_line(&b, "PUT", "/k/v?x=1", 1);
    weir_http_put_header(&b, "Host", "store:8080");
    weir_http_put_header_n(&b, "X-Bin", 5, "a\x80z", 3);
    weir_http_put_content(&b, "payload", 7);
    weir_http_put_request_line(&b, "POST", "/stream", 1);
    weir_http_put_header(&b, "Host", "store");
    weir_http_put_chunked(&b);
    static char big[3000];
    memset(big, 'q', sizeof(big));
    weir_http_put_chunk(&b, "abc", 3);
    weir_http_put_chunk(&b, "", 0); /* writes nothing */
    weir_http_put_chunk(&b, big, sizeof(big));
    weir_http_header tr[] = {{{"Digest", 6}, {"sha-256=x", 9}}};
    weir_http_put_last_chunk(&b, tr, 1);
    weir_http_put_request_line(&b, "GET", "/", 0);
    CHECK_EQ(weir_http_put_end(&b), 0);
    char *s = strndup(b.p, b.len);
    req(s, &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.n, 3);
    CHECK_STR(R.m[0].fields, "Host=store:8080|X-Bin=a\x80z|Content-Length=7|");
    CHECK(R.m[0].body_len == 7 && memcmp(R.m[0].body, "payload", 7) == 0);
    CHECK_EQ(R.m[1].body_len, 3003);
    CHECK(memcmp(R.m[1].body, "abc", 3) == 0 && memcmp(R.m[1].body + 3, big, sizeof(big)) == 0);
    CHECK_STR(R.m[1].trailers, "Digest=sha-256=x|");
    CHECK_EQ(R.m[2].minor, 0);
    free(s);

    weir_http_buf_reset(&b);
    weir_http_put_status_line(&b, 1, 404, NULL);
    weir_http_put_content(&b, "nope", 4);
    weir_http_put_status_line(&b, 1, 299, "Custom Thing");
    weir_http_put_header(&b, "Connection", "close");
    weir_http_put_chunked(&b);
    weir_http_put_chunk(&b, "x", 1);
    CHECK_EQ(weir_http_put_last_chunk(&b, NULL, 0), 0);
    s = strndup(b.p, b.len);
    resp(s, 0, &R);
    CHECK_EQ(R.err, 0);
    CHECK_EQ(R.n, 2);
    CHECK_STR(R.m[0].reason, "Not Found");
    CHECK_EQ(R.m[0].body_len, 4);
    CHECK_STR(R.m[1].reason, "Custom Thing");
    CHECK_EQ(R.m[1].keep_alive, 0);
    CHECK_EQ(R.m[1].body_len, 1);
    free(s);
    weir_http_buf_close(&b);
}

TEST(serialize_refuses_injection)
{
    weir_http_buf b;
    weir_http_buf_init(&b);
    CHECK_EQ(weir_http_put_header(&b, "X", "a\r\nEvil: 1"), -EINVAL);
    CHECK_EQ(weir_http_put_end(&b), -EINVAL); /* sticky */
    CHECK_EQ(b.len, 0);
    weir_http_buf_reset(&b);
    CHECK_EQ(weir_http_put_header(&b, "Bad Name", "v"), -EINVAL);
    weir_http_buf_reset(&b);
    CHECK_EQ(weir_http_put_header(&b, "X", " padded"), -EINVAL);
    weir_http_buf_reset(&b);
    CHECK_EQ(weir_http_put_request_line(&b, "GET", "/a b", 1), -EINVAL);
    weir_http_buf_reset(&b);
    CHECK_EQ(weir_http_put_request_line(&b, "GET", "/", 2), -EINVAL);
    weir_http_buf_reset(&b);
    CHECK_EQ(weir_http_put_request_line(&b, "G T", "/", 1), -EINVAL);
    weir_http_buf_reset(&b);
    CHECK_EQ(weir_http_put_status_line(&b, 1, 99, NULL), -EINVAL);
    weir_http_buf_reset(&b);
    CHECK_EQ(weir_http_put_status_line(&b, 1, 200, "O\nK"), -EINVAL);
    weir_http_buf_reset(&b);
    CHECK_EQ(weir_http_put_status_line(&b, 1, 200, NULL), 0);
    CHECK_EQ(b.len, strlen("HTTP/1.1 200 OK\r\n"));
    CHECK(memcmp(b.p, "HTTP/1.1 200 OK\r\n", b.len) == 0);
    weir_http_buf_close(&b);
}

TEST_MAIN()
