/* SPDX-License-Identifier: Apache-2.0 */
/*
 * multipart.c - multipart/form-data bodies (weir/http.h, "multipart"):
 * RFC 7578 over the multipart syntax of RFC 2046 section 5.1.
 *
 * The body is already in memory (the server reads it whole, up to the
 * route's cap), so the parser makes one forward pass over it and copies
 * nothing: every part, its name, filename and content type are views into
 * the body or the Content-Type. Nothing the peer sends sizes an allocation
 * (there is none) or a loop beyond the bytes given: delimiters are found
 * with memmem(3), header lines are scanned at most WEIR_HTTP_MULTIPART_MAX_LINE
 * bytes ahead, and a part has at most WEIR_HTTP_MULTIPART_MAX_HEADERS of
 * them. No recursion: a nested multipart/mixed part is an opaque part.
 *
 * Shape of a body (CRLF everywhere; a bare LF is refused, like in heads):
 *
 *     preamble (ignored) CRLF
 *     "--" boundary [spaces/tabs] CRLF
 *     header lines CRLF
 *     CRLF
 *     data
 *     CRLF "--" boundary [spaces/tabs] CRLF ... (the next part)
 *     CRLF "--" boundary "--" epilogue (ignored)
 *
 * The first delimiter may open the body without the CRLF before it. A
 * "--boundary" inside data that is not preceded by CRLF, or is followed by
 * anything but padding and CRLF or "--", is data.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h> /* memmem: _GNU_SOURCE, set for the whole build */
#include <strings.h>

#include "weir/http.h"

/* The result's reason, formatted into why[0..whycap) when given. */
static int refuse(char *why, size_t whycap, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(char *why, size_t whycap, int err, const char *fmt, ...)
{
    if (why && whycap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whycap, fmt, ap);
        va_end(ap);
    }
    return err;
}

static int is_ows(int c)
{
    return c == ' ' || c == '\t';
}

/* RFC 9110 tchar. */
static int is_tchar(int c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* RFC 2046 bcharsnospace, and the space allowed but not last. */
static int is_bchar(int c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("'()+_,-./:=? ", c));
}

static int ieq(const char *p, size_t n, const char *lit)
{
    return n == strlen(lit) && strncasecmp(p, lit, n) == 0;
}

/* A cursor over a header value: "type; a=b; c="d"". */
typedef struct cursor {
    const char *p, *end;
} cursor;

static void skip_ows(cursor *c)
{
    while (c->p < c->end && is_ows((unsigned char)*c->p))
        c->p++;
}

static weir_http_str take_token(cursor *c)
{
    const char *s = c->p;
    while (c->p < c->end && is_tchar((unsigned char)*c->p))
        c->p++;
    return (weir_http_str){s, (size_t)(c->p - s)};
}

/* One "; name=value" parameter: 1 with name and value (a token, or a
 * quoted string without its quotes: its bytes as sent, a backslash kept,
 * which is what browsers mean, since they percent-encode '"' in names), 0
 * at the end, -1 for a malformed one. */
static int next_param(cursor *c, weir_http_str *name, weir_http_str *value)
{
    skip_ows(c);
    if (c->p == c->end)
        return 0;
    if (*c->p != ';')
        return -1;
    c->p++;
    skip_ows(c);
    if (c->p == c->end)
        return 0; /* a trailing ";" */
    *name = take_token(c);
    if (!name->len || c->p == c->end || *c->p != '=')
        return -1;
    c->p++;
    if (c->p < c->end && *c->p == '"') {
        const char *s = ++c->p;
        while (c->p < c->end && *c->p != '"')
            c->p++;
        if (c->p == c->end)
            return -1; /* no closing quote */
        *value = (weir_http_str){s, (size_t)(c->p - s)};
        c->p++;
    } else {
        *value = take_token(c);
        if (!value->len)
            return -1;
    }
    return 1;
}

/* The boundary of a multipart/form-data Content-Type. */
static int boundary_of(const char *ct, size_t ctlen, weir_http_str *b, char *why, size_t whycap)
{
    if (!ct)
        return refuse(why, whycap, -EBADMSG, "no Content-Type (want multipart/form-data)");
    cursor c = {ct, ct + ctlen};
    skip_ows(&c);
    weir_http_str type = take_token(&c);
    if (c.p == c.end || *c.p != '/' || !ieq(type.p, type.len, "multipart"))
        return refuse(why, whycap, -EBADMSG, "Content-Type is not multipart/form-data");
    c.p++;
    weir_http_str sub = take_token(&c);
    if (!ieq(sub.p, sub.len, "form-data"))
        return refuse(why, whycap, -EBADMSG, "Content-Type is not multipart/form-data");
    int found = 0, r;
    weir_http_str name, value;
    while ((r = next_param(&c, &name, &value)) > 0) {
        if (!ieq(name.p, name.len, "boundary"))
            continue;
        if (found++)
            return refuse(why, whycap, -EBADMSG, "Content-Type has two boundary parameters");
        *b = value;
    }
    if (r < 0)
        return refuse(why, whycap, -EBADMSG, "malformed Content-Type parameters");
    if (!found)
        return refuse(why, whycap, -EBADMSG, "Content-Type has no boundary parameter");
    if (b->len < 1 || b->len > WEIR_HTTP_MULTIPART_MAX_BOUNDARY)
        return refuse(why, whycap, -EBADMSG, "boundary of %zu bytes (1 to %d allowed)", b->len,
                      WEIR_HTTP_MULTIPART_MAX_BOUNDARY);
    for (size_t i = 0; i < b->len; i++)
        if (!is_bchar((unsigned char)b->p[i]))
            return refuse(why, whycap, -EBADMSG, "boundary holds a character RFC 2046 forbids");
    if (b->p[b->len - 1] == ' ')
        return refuse(why, whycap, -EBADMSG, "boundary ends in a space");
    return 0;
}

/* After "--boundary" at d[i]: 1 for a delimiter line (padding, CRLF: *next
 * is the byte after the CRLF), 2 for the close delimiter ("--"), 0 when
 * this is not a delimiter at all (data goes on), -1 for a bare LF, -2 when
 * the body ends inside the line. */
static int after_delim(const uint8_t *d, size_t len, size_t i, size_t *next)
{
    if (len - i >= 2 && d[i] == '-' && d[i + 1] == '-')
        return 2;
    while (i < len && is_ows(d[i]))
        i++;
    if (i == len)
        return -2;
    if (d[i] == '\n')
        return -1;
    if (d[i] != '\r')
        return 0;
    if (i + 1 == len)
        return -2;
    if (d[i + 1] != '\n')
        return 0;
    *next = i + 2;
    return 1;
}

/* A part's header lines, from d[*pos]: fills the part's name, filename and
 * content type; *pos ends past the blank line. n is the part's number
 * (1-based) for the messages. */
static int part_headers(const uint8_t *d, size_t len, size_t *pos, weir_http_part *pt, size_t n,
                        char *why, size_t whycap)
{
    size_t i = *pos;
    int lines = 0, disposition = 0;
    for (;;) {
        /* One line: at most MAX_LINE bytes before its CRLF. */
        size_t limit =
            len - i < WEIR_HTTP_MULTIPART_MAX_LINE + 2 ? len - i : WEIR_HTTP_MULTIPART_MAX_LINE + 2;
        size_t k = 0;
        while (k < limit && d[i + k] != '\r' && d[i + k] != '\n')
            k++;
        if (k == limit) {
            if (limit == len - i && k <= WEIR_HTTP_MULTIPART_MAX_LINE)
                return refuse(why, whycap, -EBADMSG,
                              "part %zu: the body ends in its header (missing closing delimiter)",
                              n);
            return refuse(why, whycap, -EBADMSG, "part %zu: a header line over %d bytes", n,
                          WEIR_HTTP_MULTIPART_MAX_LINE);
        }
        if (k > WEIR_HTTP_MULTIPART_MAX_LINE)
            return refuse(why, whycap, -EBADMSG, "part %zu: a header line over %d bytes", n,
                          WEIR_HTTP_MULTIPART_MAX_LINE);
        if (d[i + k] == '\n')
            return refuse(why, whycap, -EBADMSG, "part %zu: a header line ends in a bare LF", n);
        if (i + k + 1 == len)
            return refuse(why, whycap, -EBADMSG,
                          "part %zu: the body ends in its header (missing closing delimiter)", n);
        if (d[i + k + 1] != '\n')
            return refuse(why, whycap, -EBADMSG, "part %zu: a bare CR in a header line", n);
        const char *line = (const char *)d + i;
        i += k + 2;
        if (k == 0)
            break; /* the blank line: data follows */
        if (++lines > WEIR_HTTP_MULTIPART_MAX_HEADERS)
            return refuse(why, whycap, -EBADMSG, "part %zu: more than %d header lines", n,
                          WEIR_HTTP_MULTIPART_MAX_HEADERS);
        for (size_t j = 0; j < k; j++)
            if (line[j] == '\0' || (unsigned char)line[j] == 0x7f ||
                ((unsigned char)line[j] < 0x20 && line[j] != '\t'))
                return refuse(why, whycap, -EBADMSG,
                              "part %zu: a control character in a header line", n);
        cursor c = {line, line + k};
        if (is_ows((unsigned char)line[0]))
            return refuse(why, whycap, -EBADMSG, "part %zu: a folded header line", n);
        weir_http_str hname = take_token(&c);
        if (!hname.len || c.p == c.end || *c.p != ':')
            return refuse(why, whycap, -EBADMSG, "part %zu: a header line without \"name:\"", n);
        c.p++;
        skip_ows(&c);
        while (c.end > c.p && is_ows((unsigned char)c.end[-1]))
            c.end--;
        if (ieq(hname.p, hname.len, "content-type")) {
            if (pt->content_type.p)
                return refuse(why, whycap, -EBADMSG, "part %zu: two Content-Type fields", n);
            if (c.p == c.end)
                return refuse(why, whycap, -EBADMSG, "part %zu: an empty Content-Type", n);
            pt->content_type = (weir_http_str){c.p, (size_t)(c.end - c.p)};
        } else if (ieq(hname.p, hname.len, "content-disposition")) {
            if (disposition++)
                return refuse(why, whycap, -EBADMSG, "part %zu: two Content-Disposition fields", n);
            weir_http_str type = take_token(&c);
            if (!ieq(type.p, type.len, "form-data"))
                return refuse(why, whycap, -EBADMSG,
                              "part %zu: Content-Disposition is not form-data", n);
            weir_http_str pn, pv;
            int r, names = 0, files = 0;
            while ((r = next_param(&c, &pn, &pv)) > 0) {
                if (ieq(pn.p, pn.len, "name")) {
                    names++;
                    pt->name = pv;
                } else if (ieq(pn.p, pn.len, "filename")) {
                    files++;
                    pt->filename = pv; /* filename="": p set, len 0 */
                }
            }
            if (r < 0)
                return refuse(why, whycap, -EBADMSG,
                              "part %zu: malformed Content-Disposition parameters", n);
            if (names > 1 || files > 1)
                return refuse(why, whycap, -EBADMSG,
                              "part %zu: a Content-Disposition parameter given twice", n);
        }
        /* Other fields (Content-Transfer-Encoding, which RFC 7578 retires,
         * and any extension) are ignored. */
    }
    if (!disposition)
        return refuse(why, whycap, -EBADMSG, "part %zu: no Content-Disposition: form-data", n);
    if (!pt->name.len)
        return refuse(why, whycap, -EBADMSG, "part %zu: no name in its Content-Disposition", n);
    *pos = i;
    return 0;
}

int weir_http_multipart_parse(const char *content_type, size_t ctlen, const uint8_t *body,
                              size_t len, weir_http_part *parts, size_t cap, size_t *nparts,
                              char *why, size_t whycap)
{
    if (why && whycap)
        why[0] = '\0';
    if (nparts)
        *nparts = 0;
    if ((!body && len) || (!parts && cap) || !nparts)
        return refuse(why, whycap, -EINVAL, "bad arguments");
    weir_http_str b = {0};
    int e = boundary_of(content_type, ctlen, &b, why, whycap);
    if (e)
        return e;
    /* "--" boundary, and CRLF "--" boundary. */
    char delim[4 + WEIR_HTTP_MULTIPART_MAX_BOUNDARY];
    memcpy(delim, "\r\n--", 4);
    memcpy(delim + 4, b.p, b.len);
    const size_t dlen = 4 + b.len;

    /* The first delimiter: at the start, or after the preamble's CRLF. */
    size_t pos = 0, next = 0;
    int kind = 0;
    if (len >= dlen - 2 && memcmp(body, delim + 2, dlen - 2) == 0)
        kind = after_delim(body, len, dlen - 2, &next);
    for (size_t from = 0; kind == 0;) {
        const uint8_t *f = len > from ? memmem(body + from, len - from, delim, dlen) : NULL;
        if (!f)
            return refuse(why, whycap, -EBADMSG, "no boundary delimiter in the body");
        pos = (size_t)(f - body);
        kind = after_delim(body, len, pos + dlen, &next);
        from = pos + 1;
    }
    size_t n = 0;
    for (;;) {
        if (kind == -1)
            return refuse(why, whycap, -EBADMSG, "a delimiter line ends in a bare LF");
        if (kind == -2)
            return refuse(why, whycap, -EBADMSG,
                          "the body ends inside a delimiter line (missing closing delimiter)");
        if (kind == 2)
            break; /* the close delimiter; what follows is the epilogue */
        /* A part starts at next. */
        weir_http_part pt = {0};
        size_t at = next;
        if ((e = part_headers(body, len, &at, &pt, n + 1, why, whycap)))
            return e;
        /* Its data runs to the next delimiter. */
        size_t from = at;
        kind = 0;
        while (kind == 0) {
            const uint8_t *f = len > from ? memmem(body + from, len - from, delim, dlen) : NULL;
            if (!f)
                return refuse(why, whycap, -EBADMSG, "part %zu: missing closing delimiter", n + 1);
            pos = (size_t)(f - body);
            kind = after_delim(body, len, pos + dlen, &next);
            from = pos + 1;
        }
        if (n == cap)
            return refuse(why, whycap, -E2BIG, "more than %zu parts", cap);
        if (!pt.content_type.p)
            pt.content_type = (weir_http_str){"text/plain", 10};
        pt.data = body + at;
        pt.len = pos - at;
        parts[n++] = pt;
        *nparts = n;
    }
    return 0;
}

int weir_http_req_multipart(const weir_http_req *r, weir_http_part *parts, size_t cap,
                            size_t *nparts, char *why, size_t whycap)
{
    if (!r)
        return refuse(why, whycap, -EINVAL, "no request");
    const weir_http_str *ct = weir_http_req_header(r, "content-type");
    return weir_http_multipart_parse(ct ? ct->p : NULL, ct ? ct->len : 0, r->body, r->body_len,
                                     parts, cap, nparts, why, whycap);
}
