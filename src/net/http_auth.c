/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_auth.c - the HTTP server's token check (weir/http.h, "server",
 * Authentication): made once a request's head is complete, before it is
 * routed. The token may come in the Authorization field (which decides
 * when present), in the weir_token cookie, or, for a GET, in the
 * access_token query parameter, which is answered 303 to the same target
 * without it, setting the cookie: the two ways a browser has, since it
 * cannot add a field to a page load or an EventSource. Every comparison
 * takes a time that depends on the token's length only; nothing here logs
 * or echoes what a client sent.
 */
#include <errno.h>
#include <string.h>

#include "http_server_int.h"

#define STR_(x) #x
#define STR(x)  STR_(x)

static int str_eq(weir_http_str a, const char *lit)
{
    size_t n = strlen(lit);
    return a.len == n && memcmp(a.p, lit, n) == 0;
}

static int lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* Compare a (sent by the client) with the secret b in time that depends on
 * b's length only: neither where they differ nor a's length shows. */
static int ct_equal(const char *a, size_t an, const char *b, size_t bn)
{
    unsigned char d = an != bn;
    for (size_t i = 0; i < bn; i++)
        d |= (unsigned char)((i < an ? a[i] : 0) ^ b[i]);
    return d == 0;
}

/* The query parameter named access_token in q[0..n): its raw value in *v;
 * the count of such parameters (names compared decoded). */
static int find_access_token(const char *q, size_t n, weir_http_str *v)
{
    const char *end = q + n;
    int found = 0;
    while (q && q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *pe = amp ? amp : end;
        const char *eq = memchr(q, '=', (size_t)(pe - q));
        const char *ke = eq ? eq : pe;
        char key[16];
        ssize_t kn = weir_http_pct_decode(q, (size_t)(ke - q), key, sizeof(key), 1);
        if (kn == 12 && memcmp(key, "access_token", 12) == 0) {
            if (!found++)
                *v = eq ? (weir_http_str){eq + 1, (size_t)(pe - eq - 1)} : (weir_http_str){pe, 0};
        }
        q = amp ? amp + 1 : end;
    }
    return found;
}

/* Is v (raw, percent-encoded) the token? Decoded without '+' as space (a
 * token holds no space, and a '+' sent as it is stays one). */
static int access_token_ok(weir_http_server *s, weir_http_str v)
{
    char tok[WEIR_HTTP_MAX_TOKEN + 1];
    if (v.len > WEIR_HTTP_MAX_AUTH_FIELD)
        return 0;
    ssize_t n = weir_http_pct_decode(v.p, v.len, tok, sizeof(tok), 0);
    /* A value too long or badly escaped is compared as empty: the same
     * time as any wrong token. */
    return ct_equal(tok, n < 0 ? 0 : (size_t)n, s->token, s->token_len) && n >= 0;
}

/* The weir_token cookie among the Cookie field's "a=1; b=2" pairs: 1 with
 * its value in *v (quotes removed), 0 when none, -1 when there are two. */
static int find_cookie(const weir_http_str *f, weir_http_str *v)
{
    const char *p = f->p, *end = f->p + f->len;
    int found = 0;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *pe = semi ? semi : end;
        const char *eq = memchr(p, '=', (size_t)(pe - p));
        if (eq && eq - p == 10 && memcmp(p, "weir_token", 10) == 0) {
            if (found++)
                return -1;
            const char *a = eq + 1, *b = pe;
            while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
                b--;
            if (b - a >= 2 && a[0] == '"' && b[-1] == '"')
                a++, b--;
            *v = (weir_http_str){a, (size_t)(b - a)};
        }
        p = semi ? semi + 1 : end;
    }
    return found;
}

/* Does the request carry the token? NULL when it does (or no token is
 * configured), else why not: the 401's message, which names what is wrong
 * but never what the token is. No route is exempt and the answer does not
 * depend on routing: without the token an existing path and an unknown
 * one get the same 401, whatever the method, so nobody without the token
 * can probe which routes exist. OPTIONS is no exception: the 204 the
 * server answers itself lists the path's methods, and a CORS preflight
 * gains nothing from it (the server sends no Access-Control-* fields, so a
 * browser refuses the cross-origin request either way). *invalid: a
 * bearer token was presented and is wrong (error="invalid_token").
 *
 * Three ways to carry it, for a browser cannot set Authorization on a page
 * load or an EventSource: the Authorization field, which decides when
 * present; else the weir_token cookie; and a GET whose query holds
 * access_token=<token>, which is answered 303 to the same target without
 * it, setting the cookie (c->auth_redirect), so the token leaves the
 * address bar and the history. Every comparison is constant-time. */
const char *weir__http_auth_refusal(conn *c, int *invalid)
{
    weir_http_server *s = c->s;
    *invalid = 0;
    if (!s->token)
        return NULL;
    weir_http_str v;
    int nq =
        str_eq(c->p.method, "GET") ? find_access_token(c->req.query.p, c->req.query.len, &v) : 0;
    if (nq > 1)
        return "more than one access_token parameter";
    if (nq == 1) {
        if (!access_token_ok(s, v)) {
            *invalid = 1;
            return "wrong access_token";
        }
        if (!s->token_cookie_ok)
            return "the token cannot be carried in a cookie (it holds '\"', ',', ';' or '\\')";
        c->auth_redirect = 1;
        return "see the target without access_token"; /* the 303 (not an error) */
    }
    ssize_t i = weir_http_find(c->p.headers, c->p.nheaders, "authorization", 0);
    if (i < 0) {
        ssize_t k = weir_http_find(c->p.headers, c->p.nheaders, "cookie", 0);
        if (k < 0)
            return "missing bearer token (Authorization: Bearer <token>)";
        if (weir_http_find(c->p.headers, c->p.nheaders, "cookie", (size_t)k + 1) >= 0)
            return "more than one Cookie field";
        const weir_http_str *f = &c->p.headers[k].value;
        if (f->len > WEIR_HTTP_MAX_COOKIE_FIELD)
            return "Cookie field longer than " STR(WEIR_HTTP_MAX_COOKIE_FIELD) " bytes";
        int nc = find_cookie(f, &v);
        if (nc < 0)
            return "more than one weir_token cookie";
        if (nc == 0)
            return "missing bearer token (Authorization: Bearer <token>)";
        if (!ct_equal(v.p, v.len, s->token, s->token_len)) {
            *invalid = 1;
            return "wrong weir_token cookie";
        }
        return NULL;
    }
    /* Two fields: which one counts is where a proxy and we could disagree. */
    if (weir_http_find(c->p.headers, c->p.nheaders, "authorization", (size_t)i + 1) >= 0)
        return "more than one Authorization field";
    const weir_http_str *a = &c->p.headers[i].value;
    if (a->len > WEIR_HTTP_MAX_AUTH_FIELD) {
        *invalid = 1;
        return "wrong bearer token";
    }
    static const char scheme[] = "bearer ";
    if (a->len < 7)
        return "Authorization is not \"Bearer <token>\"";
    for (size_t k = 0; k < 7; k++)
        if (lower(a->p[k]) != scheme[k])
            return "Authorization is not \"Bearer <token>\"";
    size_t off = 7;
    while (off < a->len && a->p[off] == ' ')
        off++;
    if (!ct_equal(a->p + off, a->len - off, s->token, s->token_len)) {
        *invalid = 1;
        return "wrong bearer token";
    }
    return NULL;
}

/* The 303 for a valid access_token: Location is the same path and query
 * without the access_token parameters (the others kept as sent, in order),
 * and the cookie is set. Into r->hdr; 0 or -ENOMEM. */
int weir__http_put_redirect(conn *c)
{
    weir_http_res *r = &c->res;
    const weir_http_req *q = &c->req;
    weir_http_buf loc;
    weir_http_buf_init(&loc);
    weir_http_put_raw(&loc, q->path.p, q->path.len);
    const char *p = q->query.p, *end = q->query.p + q->query.len;
    int first = 1;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *pe = amp ? amp : end;
        weir_http_str v;
        if (pe > p && find_access_token(p, (size_t)(pe - p), &v) == 0) {
            weir_http_put_raw(&loc, first ? "?" : "&", 1);
            weir_http_put_raw(&loc, p, (size_t)(pe - p));
            first = 0;
        }
        p = amp ? amp + 1 : end;
    }
    weir_http_put_header_n(&r->hdr, "Location", 8, loc.p, loc.len);
    weir_http_buf_close(&loc);
    weir_http_put_raw(&r->hdr, "Set-Cookie: weir_token=", 23);
    weir_http_put_raw(&r->hdr, c->s->token, c->s->token_len);
    weir_http_put_raw(&r->hdr, "; Path=/; HttpOnly; SameSite=Strict\r\n", 37);
    weir_http_put_raw(&r->hdr, "Cache-Control: no-store\r\nReferrer-Policy: no-referrer\r\n", 55);
    return r->hdr.err;
}
