/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_http.c - libFuzzer target for the HTTP/1.1 parser (weir/http.h).
 *
 * Input layout: byte 0 picks the side (request or response), the limits
 * (defaults or tiny ones, so every cap is reached), whether the response
 * answers a HEAD, and whether the stream ends with an EOF; byte 1 seeds the
 * sizes of the pieces the rest is fed in; the rest is the byte stream.
 *
 * The stream is parsed twice: in one piece, and in pieces of fuzzer-chosen
 * sizes, each copied to an allocation of exactly its size so ASan sees any
 * read past what was fed. Beyond memory safety the target aborts when an
 * invariant breaks:
 *
 *   - a call consumes at most what it was fed, and NEED_MORE means it
 *     consumed all of it;
 *   - body slices lie inside the piece fed; header slices lie inside the
 *     parser's own buffer; names are tokens, values hold no CR, LF or NUL
 *     and no surrounding whitespace; body bytes never pass max_body;
 *   - errors are in the documented set, stick, and map to a status;
 *   - both runs give the same messages, body bytes and error;
 *   - every head the parser accepts, the serializer accepts, and parsing
 *     the serialized head gives the same start line and fields.
 *
 * Build and run: `make test-fuzz` (see fuzz/run.sh and docs/http.md).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(msg)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_http: invariant broken: %s (line %d)\n", msg, __LINE__);             \
        abort();                                                                                   \
    } while (0)
#define ENSURE(cond)                                                                               \
    do {                                                                                           \
        if (!(cond))                                                                               \
            FAIL(#cond);                                                                           \
    } while (0)

/* What one run saw, compared between the two runs. */
typedef struct summary {
    int err;
    int heads, dones, eof;
    uint64_t body_bytes;
    uint64_t body_hash;
    uint64_t head_hash;
} summary;

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static int documented(int err)
{
    return err == -EBADMSG || err == -ENAMETOOLONG || err == -E2BIG || err == -EMSGSIZE ||
           err == -EOPNOTSUPP || err == -EPROTONOSUPPORT || err == -ECONNRESET || err == -ENOMEM;
}

static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static void check_str_in(weir_http_str s, const weir_http_parser *p)
{
    ENSURE(s.p != NULL);
    ENSURE(s.p >= p->priv.buf && s.p + s.len <= p->priv.buf + p->priv.len);
}

static void check_fields(const weir_http_parser *p, const weir_http_header *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        check_str_in(f[i].name, p);
        check_str_in(f[i].value, p);
        ENSURE(f[i].name.len > 0);
        for (size_t k = 0; k < f[i].name.len; k++)
            ENSURE(is_tchar((unsigned char)f[i].name.p[k]));
        const char *v = f[i].value.p;
        size_t vl = f[i].value.len;
        for (size_t k = 0; k < vl; k++)
            ENSURE(v[k] != '\r' && v[k] != '\n' && v[k] != '\0');
        if (vl)
            ENSURE(v[0] != ' ' && v[0] != '\t' && v[vl - 1] != ' ' && v[vl - 1] != '\t');
    }
}

/* Serialize the head just parsed and parse it again: same start line and
 * fields. */
static void round_trip_head(const weir_http_parser *p)
{
    weir_http_buf b;
    weir_http_buf_init(&b);
    char *m = NULL, *t = NULL, *r = NULL;
    if (p->kind == WEIR_HTTP_REQUEST) {
        m = strndup(p->method.p, p->method.len);
        t = strndup(p->target.p, p->target.len);
        if (!m || !t)
            goto out;
        ENSURE(weir_http_put_request_line(&b, m, t, p->version_minor) == 0);
    } else {
        r = strndup(p->reason.p, p->reason.len);
        if (!r)
            goto out;
        ENSURE(weir_http_put_status_line(&b, p->version_minor, p->status, r) == 0);
    }
    for (size_t i = 0; i < p->nheaders; i++)
        ENSURE(weir_http_put_header_n(&b, p->headers[i].name.p, p->headers[i].name.len,
                                      p->headers[i].value.p, p->headers[i].value.len) == 0);
    if (weir_http_put_end(&b) < 0)
        goto out;
    weir_http_limits big = {1u << 30, 1u << 30, 1u << 20, 1u << 30, UINT64_MAX};
    weir_http_parser q;
    ENSURE(weir_http_parser_init(&q, p->kind, &big) == 0);
    if (p->priv.no_body)
        weir_http_parser_no_body(&q);
    weir_http_event ev;
    ssize_t n = weir_http_parse(&q, b.p, b.len, &ev);
    if (n == -ENOMEM)
        goto closeq;
    ENSURE(n == (ssize_t)b.len);
    ENSURE(ev.kind == WEIR_HTTP_HEAD);
    ENSURE(q.version_minor == p->version_minor && q.status == p->status);
    ENSURE(q.method.len == p->method.len && q.target.len == p->target.len);
    ENSURE(!q.method.len || memcmp(q.method.p, p->method.p, q.method.len) == 0);
    ENSURE(!q.target.len || memcmp(q.target.p, p->target.p, q.target.len) == 0);
    ENSURE(q.nheaders == p->nheaders && q.body == p->body && q.keep_alive == p->keep_alive);
    for (size_t i = 0; i < q.nheaders; i++) {
        ENSURE(q.headers[i].value.len == p->headers[i].value.len);
        ENSURE(!q.headers[i].value.len ||
               memcmp(q.headers[i].value.p, p->headers[i].value.p, q.headers[i].value.len) == 0);
    }
closeq:
    weir_http_parser_close(&q);
out:
    free(m);
    free(t);
    free(r);
    weir_http_buf_close(&b);
}

/* Feed one piece; update the summary. Returns 0, or the final error. */
static int feed(weir_http_parser *p, const uint8_t *piece, size_t len, summary *s, int check_rt,
                int no_body)
{
    const uint8_t *b = piece;
    size_t left = len;
    for (;;) {
        weir_http_event ev;
        ssize_t n = weir_http_parse(p, b, left, &ev);
        if (n < 0) {
            ENSURE(documented((int)n));
            ENSURE(weir_http_parser_error(p) == n);
            ENSURE(weir_http_parser_reason(p)[0] != 0);
            int st = weir_http_error_status((int)n);
            ENSURE(st == 400 || st == 413 || st == 414 || st == 431 || st == 500 || st == 501 ||
                   st == 505);
            ENSURE(weir_http_parse(p, b, left, &ev) == n); /* final */
            return (int)n;
        }
        ENSURE((size_t)n <= left);
        b += n;
        left -= (size_t)n;
        switch (ev.kind) {
        case WEIR_HTTP_NEED_MORE:
            ENSURE(left == 0);
            return 0;
        case WEIR_HTTP_HEAD:
            s->heads++;
            check_fields(p, p->headers, p->nheaders);
            if (p->kind == WEIR_HTTP_REQUEST) {
                check_str_in(p->method, p);
                check_str_in(p->target, p);
                s->head_hash = mix(s->head_hash, p->method.p, p->method.len);
                s->head_hash = mix(s->head_hash, p->target.p, p->target.len);
            } else {
                check_str_in(p->reason, p);
                ENSURE(p->status >= 100 && p->status <= 999);
            }
            ENSURE(p->version_minor == 0 || p->version_minor == 1);
            ENSURE(p->body >= WEIR_HTTP_BODY_NONE && p->body <= WEIR_HTTP_BODY_CLOSE);
            ENSURE(p->body != WEIR_HTTP_BODY_CLOSE || p->kind == WEIR_HTTP_RESPONSE);
            ENSURE(p->body != WEIR_HTTP_BODY_CLOSE || !p->keep_alive);
            ENSURE(p->body != WEIR_HTTP_BODY_LENGTH || p->content_length <= p->priv.lim.max_body);
            s->head_hash = mix(s->head_hash, &p->body, sizeof(p->body));
            s->head_hash = mix(s->head_hash, &p->keep_alive, sizeof(p->keep_alive));
            s->head_hash = mix(s->head_hash, &p->nheaders, sizeof(p->nheaders));
            if (check_rt)
                round_trip_head(p);
            break;
        case WEIR_HTTP_BODY:
            ENSURE(ev.len > 0);
            ENSURE(ev.data >= piece && ev.data + ev.len <= piece + len);
            s->body_bytes += ev.len;
            s->body_hash = mix(s->body_hash, ev.data, ev.len);
            ENSURE(p->body_bytes <= p->priv.lim.max_body);
            ENSURE(p->body != WEIR_HTTP_BODY_LENGTH || p->body_bytes <= p->content_length);
            break;
        case WEIR_HTTP_DONE:
            s->dones++;
            check_fields(p, p->headers, p->nheaders);
            check_fields(p, p->trailers, p->ntrailers);
            ENSURE(p->body != WEIR_HTTP_BODY_LENGTH || p->body_bytes == p->content_length);
            ENSURE(p->ntrailers <= p->priv.lim.max_headers);
            ENSURE(p->nheaders <= p->priv.lim.max_headers);
            if (no_body) /* every response answers a HEAD */
                weir_http_parser_no_body(p);
            break;
        default:
            FAIL("unknown event");
        }
    }
}

static void run(const uint8_t *stream, size_t len, uint8_t flags, uint8_t seed, int split,
                summary *s)
{
    memset(s, 0, sizeof(*s));
    s->head_hash = s->body_hash = 0xcbf29ce484222325ull;
    int kind = flags & 1 ? WEIR_HTTP_RESPONSE : WEIR_HTTP_REQUEST;
    weir_http_limits tiny = {.max_start_line = 24 + (flags >> 5),
                             .max_header_line = 20 + (flags >> 5),
                             .max_headers = 3,
                             .max_header_bytes = 96,
                             .max_body = 40};
    weir_http_parser p;
    ENSURE(weir_http_parser_init(&p, kind, flags & 2 ? &tiny : NULL) == 0);
    int no_body = (flags & 4) && kind == WEIR_HTTP_RESPONSE;
    if (no_body)
        weir_http_parser_no_body(&p);
    size_t off = 0;
    uint32_t rng = seed * 2654435761u + 1;
    int err = 0;
    while (!err) {
        size_t piece = len - off;
        if (split) {
            rng = rng * 1103515245u + 12345u;
            size_t want = (rng >> 16) % 17; /* 0..16 bytes, empty pieces included */
            if (want < piece)
                piece = want;
        }
        /* An exact-size copy, so that ASan sees any read past the end. */
        uint8_t *buf = malloc(piece ? piece : 1);
        if (!buf)
            break;
        memcpy(buf, stream + off, piece);
        err = feed(&p, buf, piece, s, !split, no_body);
        free(buf);
        off += piece;
        if (off >= len)
            break;
    }
    if (!err && (flags & 8)) {
        s->eof = weir_http_parser_eof(&p);
        ENSURE(s->eof == 0 || s->eof == 1 || documented(s->eof));
        if (s->eof < 0)
            err = s->eof;
    }
    ENSURE(weir_http_parser_memory(&p) <= (size_t)2 * 1024 * 1024);
    s->err = err;
    weir_http_parser_close(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint8_t flags = data[0], seed = data[1];
    summary whole, split;
    run(data + 2, size - 2, flags, seed, 0, &whole);
    run(data + 2, size - 2, flags, seed, 1, &split);
    if (whole.err == -ENOMEM || split.err == -ENOMEM)
        return 0;
    ENSURE(whole.err == split.err);
    ENSURE(whole.heads == split.heads);
    ENSURE(whole.dones == split.dones);
    ENSURE(whole.eof == split.eof);
    ENSURE(whole.head_hash == split.head_hash);
    ENSURE(whole.body_bytes == split.body_bytes);
    ENSURE(whole.body_hash == split.body_hash);
    return 0;
}
