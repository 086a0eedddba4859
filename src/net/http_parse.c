/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_parse.c - the HTTP/1.1 message parser and serializer (weir/http.h).
 *
 * The parser works line by line. Bytes of the head (start line, field
 * lines, trailer lines) are copied into one buffer up to and including the
 * LF that ends the line, checking the line's cap and the head's total cap on
 * every copy, so a peer that never sends LF costs at most one line; then the
 * whole line is validated and cut into slices of that buffer. Body bytes are
 * never copied: an event hands the caller a slice of its own input. The
 * buffer grows by doubling as head bytes arrive, so its size follows what
 * the peer actually sent, not a length it claimed.
 *
 * Framing follows RFC 9112 section 6, with the strict choices that close
 * request smuggling: a request with both Content-Length and
 * Transfer-Encoding is refused (a proxy could honour either), as are
 * Content-Length values that disagree, "chunked" applied twice or not last,
 * obs-fold, bare CR, NUL and bare LF. A response with both uses the
 * Transfer-Encoding and closes the connection afterwards (RFC 9112 6.3),
 * because a client must still read what its server sent. Integers from the
 * peer are accumulated with an overflow check before every digit.
 */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/http.h"

enum {
    S_START,      /* before or inside the start line */
    S_HEADERS,    /* field lines */
    S_BODY_LEN,   /* Content-Length body */
    S_BODY_CLOSE, /* response body until EOF */
    S_CHUNK_SIZE, /* chunk-size line */
    S_CHUNK_DATA,
    S_CHUNK_CRLF, /* the CRLF after chunk data */
    S_TRAILERS,
    S_END,  /* complete; DONE still to report */
    S_DONE, /* DONE reported; the next call starts a new message */
};

/* A head buffer or field array larger than this is freed between messages,
 * so one large message does not pin memory for a connection's lifetime. */
#define KEEP_BUF    4096u
#define KEEP_FIELDS 32u

/* ---- character classes (RFC 9110 5.6.2, 5.5) ------------------------------------------ */

static int is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-vchar / SP / HTAB: VCHAR, obs-text, SP, HTAB. */
static int is_value_char(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static int lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

static int str_ieq(const char *p, size_t n, const char *lit)
{
    size_t m = strlen(lit);
    if (n != m)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)p[i]) != lower((unsigned char)lit[i]))
            return 0;
    return 1;
}

/* ---- parser state ----------------------------------------------------------------------- */

static ssize_t fail(weir_http_parser *p, int err, const char *why)
{
    p->priv.err = err;
    p->priv.why = why;
    return err;
}

int weir_http_parser_init(weir_http_parser *p, int kind, const weir_http_limits *lim)
{
    if (!p || (kind != WEIR_HTTP_REQUEST && kind != WEIR_HTTP_RESPONSE))
        return -EINVAL;
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    weir_http_limits l = {0};
    if (lim)
        l = *lim;
    if (!l.max_start_line)
        l.max_start_line = WEIR_HTTP_MAX_START_LINE;
    if (!l.max_header_line)
        l.max_header_line = WEIR_HTTP_MAX_HEADER_LINE;
    if (!l.max_headers)
        l.max_headers = WEIR_HTTP_MAX_HEADERS;
    if (!l.max_header_bytes)
        l.max_header_bytes = WEIR_HTTP_MAX_HEADER_BYTES;
    if (!l.max_body)
        l.max_body = WEIR_HTTP_MAX_BODY;
    /* Line caps have 2 added for the CRLF: keep them far from SIZE_MAX. */
    if (l.max_start_line > SIZE_MAX / 4 || l.max_header_line > SIZE_MAX / 4 ||
        l.max_header_bytes > SIZE_MAX / 4 ||
        l.max_headers > SIZE_MAX / 4 / sizeof(weir_http_header))
        return -EINVAL;
    p->priv.lim = l;
    p->priv.state = S_START;
    return 0;
}

void weir_http_parser_close(weir_http_parser *p)
{
    if (!p)
        return;
    free(p->priv.buf);
    free(p->priv.fields);
    memset(p, 0, sizeof(*p));
}

int weir_http_parser_error(const weir_http_parser *p)
{
    return p->priv.err;
}

const char *weir_http_parser_reason(const weir_http_parser *p)
{
    return p->priv.why ? p->priv.why : "";
}

size_t weir_http_parser_memory(const weir_http_parser *p)
{
    return p->priv.cap + p->priv.fcap * sizeof(weir_http_header);
}

void weir_http_parser_no_body(weir_http_parser *p)
{
    p->priv.no_body = 1;
}

/* The current message's body cap: its own (weir_http_parser_body_cap) or
 * the limits'. */
static uint64_t body_cap(const weir_http_parser *p)
{
    return p->priv.msg_max_body ? p->priv.msg_max_body : p->priv.lim.max_body;
}

int weir_http_parser_body_cap(weir_http_parser *p, uint64_t max_body)
{
    if (!p)
        return -EINVAL;
    if (p->priv.err)
        return p->priv.err;
    p->priv.msg_max_body = max_body;
    uint64_t cap = body_cap(p);
    if ((p->body == WEIR_HTTP_BODY_LENGTH && p->content_length > cap) || p->body_bytes > cap)
        return (int)fail(p, -EMSGSIZE, "body larger than the limit");
    return 0;
}

int weir_http_error_status(int err)
{
    switch (err) {
    case -ENAMETOOLONG:
        return 414;
    case -E2BIG:
        return 431;
    case -EMSGSIZE:
        return 413;
    case -EOPNOTSUPP:
        return 501;
    case -EPROTONOSUPPORT:
        return 505;
    case -ENOMEM:
        return 500;
    default:
        return 400;
    }
}

/* Forget the previous message; keep small allocations for the next one. */
static void start_message(weir_http_parser *p)
{
    char *buf = p->priv.buf;
    size_t cap = p->priv.cap;
    weir_http_header *fields = p->priv.fields;
    size_t fcap = p->priv.fcap;
    if (cap > KEEP_BUF) {
        free(buf);
        buf = NULL;
        cap = 0;
    }
    if (fcap > KEEP_FIELDS) {
        free(fields);
        fields = NULL;
        fcap = 0;
    }
    weir_http_limits lim = p->priv.lim;
    int kind = p->kind;
    int no_body = p->priv.no_body; /* set for the message about to start */
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    p->priv.lim = lim;
    p->priv.no_body = no_body;
    p->priv.buf = buf;
    p->priv.cap = cap;
    p->priv.fields = fields;
    p->priv.fcap = fcap;
    p->priv.state = S_START;
}

static void rebase_str(weir_http_str *s, const char *old, char *nbuf)
{
    if (s->p)
        s->p = nbuf + (s->p - old);
}

/* Make room for n more bytes in the head buffer. Moving the buffer moves
 * every slice handed out, so they are rebased while the old one is alive. */
static int grow_buf(weir_http_parser *p, size_t n)
{
    size_t need = p->priv.len + n;
    if (need <= p->priv.cap)
        return 0;
    size_t cap = p->priv.cap ? p->priv.cap : 256;
    while (cap < need)
        cap *= 2;
    char *nb = malloc(cap);
    if (!nb)
        return -ENOMEM;
    char *old = p->priv.buf;
    if (old) {
        memcpy(nb, old, p->priv.len);
        rebase_str(&p->method, old, nb);
        rebase_str(&p->target, old, nb);
        rebase_str(&p->reason, old, nb);
        size_t nf = p->nheaders + p->ntrailers;
        for (size_t i = 0; i < nf; i++) {
            rebase_str(&p->priv.fields[i].name, old, nb);
            rebase_str(&p->priv.fields[i].value, old, nb);
        }
        free(old);
    }
    p->priv.buf = nb;
    p->priv.cap = cap;
    return 0;
}

/*
 * Copy input up to and including the next LF onto the current line
 * (buf[line..len)). Returns 1 when the line is complete, 0 when the input
 * ran out first, or a negative errno. max caps the line without its CRLF;
 * head says whether the bytes count against max_header_bytes.
 */
static int take_line(weir_http_parser *p, const uint8_t *d, size_t n, size_t *used, size_t max,
                     int toolong, const char *toolong_why, int head)
{
    if (*used == n)
        return 0;
    const uint8_t *s = d + *used;
    size_t avail = n - *used;
    const uint8_t *lf = memchr(s, '\n', avail);
    size_t take = lf ? (size_t)(lf - s) + 1 : avail;
    size_t have = p->priv.len - p->priv.line;
    /* The error is the cap the first byte too many passes (the line's on a
     * tie), so it does not depend on how the input was split. */
    size_t line_room = max + 2 - have;
    size_t head_room = head ? p->priv.lim.max_header_bytes - p->priv.head_bytes : SIZE_MAX;
    if (take > line_room || take > head_room) {
        if (line_room <= head_room)
            return (int)fail(p, toolong, toolong_why);
        return (int)fail(p, -E2BIG, "header section too large");
    }
    if (grow_buf(p, take) < 0)
        return (int)fail(p, -ENOMEM, "out of memory");
    memcpy(p->priv.buf + p->priv.len, s, take);
    p->priv.len += take;
    *used += take;
    if (head)
        p->priv.head_bytes += take;
    if (!lf)
        return 0;
    have = p->priv.len - p->priv.line;
    if (have < 2 || p->priv.buf[p->priv.len - 2] != '\r')
        return (int)fail(p, -EBADMSG, "bare LF line ending (CRLF required)");
    return 1;
}

/* The completed line's content, CRLF excluded. */
static char *line_text(weir_http_parser *p, size_t *n)
{
    *n = p->priv.len - p->priv.line - 2;
    return p->priv.buf + p->priv.line;
}

/* Refuse CR and NUL anywhere in a line (CR can only end it). */
static ssize_t check_ctl(weir_http_parser *p, const char *s, size_t n)
{
    if (memchr(s, '\r', n))
        return fail(p, -EBADMSG, "bare CR");
    if (memchr(s, '\0', n))
        return fail(p, -EBADMSG, "NUL byte");
    return 0;
}

/* "HTTP/d.d" at s (exactly 8 bytes). */
static ssize_t parse_version(weir_http_parser *p, const char *s, size_t n)
{
    if (n != 8 || memcmp(s, "HTTP/", 5) != 0 || s[5] < '0' || s[5] > '9' || s[6] != '.' ||
        s[7] < '0' || s[7] > '9')
        return fail(p, -EBADMSG, "malformed HTTP version");
    if (s[5] != '1' || (s[7] != '0' && s[7] != '1'))
        return fail(p, -EPROTONOSUPPORT, "HTTP version not supported");
    p->version_minor = s[7] - '0';
    return 0;
}

static ssize_t parse_request_line(weir_http_parser *p, char *s, size_t n)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)s[i]))
        i++;
    if (i == 0 || i >= n || s[i] != ' ')
        return fail(p, -EBADMSG, "malformed method");
    p->method = (weir_http_str){s, i};
    size_t t = ++i;
    while (i < n && (unsigned char)s[i] > 0x20 && (unsigned char)s[i] < 0x7f)
        i++;
    if (i == t || i >= n || s[i] != ' ')
        return fail(p, -EBADMSG, "malformed request target");
    p->target = (weir_http_str){s + t, i - t};
    i++;
    return parse_version(p, s + i, n - i);
}

static ssize_t parse_status_line(weir_http_parser *p, char *s, size_t n)
{
    if (n < 12 || s[8] != ' ')
        return fail(p, -EBADMSG, "malformed status line");
    ssize_t r = parse_version(p, s, 8);
    if (r < 0)
        return r;
    int st = 0;
    for (int i = 9; i < 12; i++) {
        if (s[i] < '0' || s[i] > '9')
            return fail(p, -EBADMSG, "malformed status code");
        st = st * 10 + (s[i] - '0');
    }
    if (st < 100)
        return fail(p, -EBADMSG, "malformed status code");
    p->status = st;
    /* The SP before an empty reason is required by RFC 9112 4, but servers
     * omit it often enough that refusing would only break clients. */
    if (n == 12) {
        p->reason = (weir_http_str){s + 12, 0};
        return 0;
    }
    if (s[12] != ' ')
        return fail(p, -EBADMSG, "malformed status line");
    for (size_t i = 13; i < n; i++)
        if (!is_value_char((unsigned char)s[i]))
            return fail(p, -EBADMSG, "control character in reason phrase");
    p->reason = (weir_http_str){s + 13, n - 13};
    return 0;
}

/* Calls fn on each non-empty element of a comma-separated list value. */
typedef ssize_t (*elem_fn)(weir_http_parser *p, const char *s, size_t n);

static ssize_t each_elem(weir_http_parser *p, const char *s, size_t n, elem_fn fn, int keep_empty)
{
    size_t i = 0;
    for (;;) {
        size_t b = i;
        while (i < n && s[i] != ',')
            i++;
        size_t e = i;
        while (b < e && is_ows(s[b]))
            b++;
        while (e > b && is_ows(s[e - 1]))
            e--;
        if (e > b || keep_empty) {
            ssize_t r = fn(p, s + b, e - b);
            if (r < 0)
                return r;
        }
        if (i >= n)
            return 0;
        i++; /* the comma */
    }
}

static ssize_t cl_elem(weir_http_parser *p, const char *s, size_t n)
{
    if (n == 0)
        return fail(p, -EBADMSG, "malformed Content-Length");
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return fail(p, -EBADMSG, "malformed Content-Length");
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return fail(p, -EBADMSG, "Content-Length out of range");
        v = v * 10 + d;
    }
    if (p->priv.cl_seen && v != p->content_length)
        return fail(p, -EBADMSG, "conflicting Content-Length values");
    p->priv.cl_seen = 1;
    p->content_length = v;
    return 0;
}

static ssize_t te_elem(weir_http_parser *p, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)s[i]))
            return fail(p, -EBADMSG, "malformed Transfer-Encoding");
    p->priv.te_codings++;
    int chunked = str_ieq(s, n, "chunked");
    p->priv.te_chunked += chunked;
    p->priv.te_other += !chunked;
    p->priv.te_last_chunked = chunked;
    return 0;
}

static ssize_t conn_elem(weir_http_parser *p, const char *s, size_t n)
{
    if (str_ieq(s, n, "close"))
        p->priv.conn_close = 1;
    else if (str_ieq(s, n, "keep-alive"))
        p->priv.conn_ka = 1;
    return 0;
}

/* One field line (a header, or a trailer when trailer is set). */
static ssize_t parse_field(weir_http_parser *p, char *s, size_t n, int trailer)
{
    if (is_ows(s[0]))
        return fail(p, -EBADMSG, "obs-fold (line folding) is not allowed");
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)s[i]))
        i++;
    if (i == 0 || i >= n || s[i] != ':')
        return fail(p, -EBADMSG, "malformed header field name");
    size_t b = i + 1, e = n;
    while (b < e && is_ows(s[b]))
        b++;
    while (e > b && is_ows(s[e - 1]))
        e--;
    for (size_t k = b; k < e; k++)
        if (!is_value_char((unsigned char)s[k]))
            return fail(p, -EBADMSG, "control character in header field value");
    size_t *count = trailer ? &p->ntrailers : &p->nheaders;
    if (*count >= p->priv.lim.max_headers)
        return fail(p, -E2BIG, trailer ? "too many trailer fields" : "too many header fields");
    size_t nf = p->nheaders + p->ntrailers;
    if (nf == p->priv.fcap) {
        size_t fcap = p->priv.fcap ? p->priv.fcap * 2 : 8;
        weir_http_header *f = realloc(p->priv.fields, fcap * sizeof(*f));
        if (!f)
            return fail(p, -ENOMEM, "out of memory");
        p->priv.fields = f;
        p->priv.fcap = fcap;
    }
    p->priv.fields[nf] = (weir_http_header){{s, i}, {s + b, e - b}};
    (*count)++;
    p->headers = p->priv.fields;
    p->trailers = p->priv.fields + p->nheaders;
    if (trailer)
        return 0; /* trailers never change the framing (RFC 9110 6.5.1) */
    const char *v = s + b;
    size_t vn = e - b;
    if (str_ieq(s, i, "content-length"))
        return each_elem(p, v, vn, cl_elem, 1);
    if (str_ieq(s, i, "transfer-encoding")) {
        p->priv.te_lines++;
        return each_elem(p, v, vn, te_elem, 0);
    }
    if (str_ieq(s, i, "connection"))
        return each_elem(p, v, vn, conn_elem, 0);
    if (str_ieq(s, i, "host"))
        p->priv.hosts++;
    return 0;
}

/* The head is complete: decide how the body is delimited. */
static ssize_t end_of_head(weir_http_parser *p)
{
    int req = p->kind == WEIR_HTTP_REQUEST;
    int te = p->priv.te_lines > 0;
    p->keep_alive =
        p->version_minor == 1 ? !p->priv.conn_close : p->priv.conn_ka && !p->priv.conn_close;
    if (req) {
        if (p->version_minor == 1 && p->priv.hosts != 1)
            return fail(p, -EBADMSG, p->priv.hosts ? "more than one Host" : "missing Host");
        if (p->priv.hosts > 1)
            return fail(p, -EBADMSG, "more than one Host");
    } else {
        int st = p->status;
        if ((st >= 100 && st < 200) || st == 204 || st == 304 || p->priv.no_body) {
            if (st == 101)
                p->keep_alive = 0; /* the connection now speaks another protocol */
            p->body = WEIR_HTTP_BODY_NONE;
            p->priv.state = S_END;
            return 0;
        }
    }
    if (te) {
        if (req && p->priv.cl_seen)
            return fail(p, -EBADMSG, "both Content-Length and Transfer-Encoding");
        if (req && p->version_minor == 0)
            return fail(p, -EBADMSG, "Transfer-Encoding in an HTTP/1.0 request");
        if (p->priv.te_codings == 0)
            return fail(p, -EBADMSG, "empty Transfer-Encoding");
        if (p->priv.te_chunked > 1)
            return fail(p, -EBADMSG, "chunked applied more than once");
        if (p->priv.te_chunked && !p->priv.te_last_chunked)
            return fail(p, -EBADMSG, "chunked is not the final transfer coding");
        if (p->priv.te_other)
            return fail(p, -EOPNOTSUPP, "unsupported transfer coding");
        if (p->priv.cl_seen || p->version_minor == 0)
            p->keep_alive = 0; /* RFC 9112 6.1 and 6.3: framing was doubtful */
        p->body = WEIR_HTTP_BODY_CHUNKED;
        p->priv.state = S_CHUNK_SIZE;
        return 0;
    }
    if (p->priv.cl_seen) {
        if (p->content_length > body_cap(p))
            return fail(p, -EMSGSIZE, "body larger than the limit");
        p->body = WEIR_HTTP_BODY_LENGTH;
        p->priv.left = p->content_length;
        p->priv.state = p->content_length ? S_BODY_LEN : S_END;
        return 0;
    }
    if (req) {
        p->body = WEIR_HTTP_BODY_NONE;
        p->priv.state = S_END;
    } else {
        p->body = WEIR_HTTP_BODY_CLOSE;
        p->keep_alive = 0;
        p->priv.state = S_BODY_CLOSE;
    }
    return 0;
}

static ssize_t parse_chunk_size(weir_http_parser *p, const char *s, size_t n)
{
    ssize_t r = check_ctl(p, s, n);
    if (r < 0)
        return r;
    uint64_t v = 0;
    size_t i = 0;
    for (; i < n; i++) {
        int c = lower((unsigned char)s[i]), d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else
            break;
        if (v > (UINT64_MAX >> 4))
            return fail(p, -EBADMSG, "chunk size out of range");
        v = v << 4 | (uint64_t)d;
    }
    if (i == 0)
        return fail(p, -EBADMSG, "malformed chunk size");
    while (i < n && is_ows(s[i]))
        i++;
    if (i < n && s[i] != ';')
        return fail(p, -EBADMSG, "malformed chunk size");
    /* chunk-ext is ignored, but it is still part of a line: no CTLs. */
    for (; i < n; i++)
        if (!is_value_char((unsigned char)s[i]))
            return fail(p, -EBADMSG, "control character in chunk extension");
    if (v > body_cap(p) - p->body_bytes)
        return fail(p, -EMSGSIZE, "body larger than the limit");
    p->priv.left = v;
    return 0;
}

static ssize_t event(weir_http_event *ev, int kind, size_t used)
{
    ev->kind = kind;
    return (ssize_t)used;
}

static ssize_t body_slice(weir_http_parser *p, const uint8_t *d, size_t n, size_t used,
                          weir_http_event *ev, uint64_t max)
{
    size_t k = n - used;
    if (k > max)
        k = (size_t)max;
    ev->kind = WEIR_HTTP_BODY;
    ev->data = d + used;
    ev->len = k;
    p->body_bytes += k;
    return (ssize_t)(used + k);
}

ssize_t weir_http_parse(weir_http_parser *p, const void *data, size_t len, weir_http_event *ev)
{
    if (!p || !ev || (!data && len))
        return -EINVAL;
    *ev = (weir_http_event){WEIR_HTTP_NEED_MORE, NULL, 0};
    if (p->priv.err)
        return p->priv.err;
    if (p->priv.state == S_DONE)
        start_message(p);
    const uint8_t *d = data;
    const weir_http_limits *lim = &p->priv.lim;
    size_t used = 0;
    for (;;) {
        int r;
        size_t n;
        char *s;
        ssize_t e;
        switch (p->priv.state) {
        case S_START:
            r = take_line(
                p, d, len, &used, lim->max_start_line, -ENAMETOOLONG,
                p->kind == WEIR_HTTP_REQUEST ? "request line too long" : "status line too long", 1);
            if (r <= 0)
                return r < 0 ? r : event(ev, WEIR_HTTP_NEED_MORE, used);
            s = line_text(p, &n);
            if (n == 0 && p->kind == WEIR_HTTP_REQUEST) {
                p->priv.len = p->priv.line; /* an empty line before a request */
                continue;
            }
            if ((e = check_ctl(p, s, n)) < 0)
                return e;
            e = p->kind == WEIR_HTTP_REQUEST ? parse_request_line(p, s, n)
                                             : parse_status_line(p, s, n);
            if (e < 0)
                return e;
            p->priv.line = p->priv.len;
            p->priv.state = S_HEADERS;
            continue;
        case S_HEADERS:
        case S_TRAILERS:
            r = take_line(p, d, len, &used, lim->max_header_line, -E2BIG,
                          "header field line too long", 1);
            if (r <= 0)
                return r < 0 ? r : event(ev, WEIR_HTTP_NEED_MORE, used);
            s = line_text(p, &n);
            if (n == 0) {
                p->priv.len = p->priv.line; /* the blank line is not kept */
                if (p->priv.state == S_TRAILERS) {
                    p->priv.state = S_END;
                    continue;
                }
                if ((e = end_of_head(p)) < 0)
                    return e;
                return event(ev, WEIR_HTTP_HEAD, used);
            }
            if ((e = check_ctl(p, s, n)) < 0)
                return e;
            e = parse_field(p, s, n, p->priv.state == S_TRAILERS);
            if (e < 0)
                return e;
            p->priv.line = p->priv.len;
            continue;
        case S_BODY_LEN:
        case S_CHUNK_DATA:
            if (used == len)
                return event(ev, WEIR_HTTP_NEED_MORE, used);
            e = body_slice(p, d, len, used, ev, p->priv.left);
            p->priv.left -= ev->len;
            if (p->priv.left == 0) {
                p->priv.state = p->priv.state == S_BODY_LEN ? S_END : S_CHUNK_CRLF;
                p->priv.crlf = 0;
            }
            return e;
        case S_BODY_CLOSE:
            if (used == len)
                return event(ev, WEIR_HTTP_NEED_MORE, used);
            /* Up to the cap first, then the error on the byte past it: the
             * same events however the bytes were split. */
            if (p->body_bytes == body_cap(p))
                return fail(p, -EMSGSIZE, "body larger than the limit");
            return body_slice(p, d, len, used, ev, body_cap(p) - p->body_bytes);
        case S_CHUNK_SIZE:
            r = take_line(p, d, len, &used, lim->max_header_line, -EBADMSG,
                          "chunk size line too long", 0);
            if (r <= 0)
                return r < 0 ? r : event(ev, WEIR_HTTP_NEED_MORE, used);
            s = line_text(p, &n);
            e = parse_chunk_size(p, s, n);
            p->priv.len = p->priv.line; /* chunk lines are not kept */
            if (e < 0)
                return e;
            p->priv.state = p->priv.left ? S_CHUNK_DATA : S_TRAILERS;
            continue;
        case S_CHUNK_CRLF:
            if (used == len)
                return event(ev, WEIR_HTTP_NEED_MORE, used);
            if (d[used] != (p->priv.crlf == 0 ? '\r' : '\n'))
                return fail(p, -EBADMSG, "chunk data not followed by CRLF");
            used++;
            if (++p->priv.crlf == 2)
                p->priv.state = S_CHUNK_SIZE;
            continue;
        case S_END:
            p->priv.state = S_DONE;
            p->priv.no_body = 0;
            return event(ev, WEIR_HTTP_DONE, used);
        default:
            assert(0 && "impossible parser state");
            return fail(p, -EBADMSG, "internal parser state");
        }
    }
}

int weir_http_parser_eof(weir_http_parser *p)
{
    if (p->priv.err)
        return p->priv.err;
    switch (p->priv.state) {
    case S_START:
        /* Nothing of a start line yet (skipped empty lines leave none). */
        if (p->priv.len == p->priv.line)
            return 0;
        break;
    case S_DONE:
        return 0;
    case S_END:
        return 1;
    case S_BODY_CLOSE:
        p->priv.state = S_END;
        return 1;
    default:
        break;
    }
    return (int)fail(p, -ECONNRESET, "connection closed inside a message");
}

ssize_t weir_http_find(const weir_http_header *fields, size_t n, const char *name, size_t from)
{
    if (!name)
        return -1;
    for (size_t i = from; i < n; i++)
        if (str_ieq(fields[i].name.p, fields[i].name.len, name))
            return (ssize_t)i;
    return -1;
}

const weir_http_str *weir_http_header_get(const weir_http_parser *p, const char *name)
{
    ssize_t i = weir_http_find(p->headers, p->nheaders, name, 0);
    return i < 0 ? NULL : &p->headers[i].value;
}

/* ---- serializer --------------------------------------------------------------------------- */

void weir_http_buf_init(weir_http_buf *b)
{
    memset(b, 0, sizeof(*b));
}

void weir_http_buf_close(weir_http_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

void weir_http_buf_reset(weir_http_buf *b)
{
    b->len = 0;
    b->err = 0;
}

static int put(weir_http_buf *b, const void *s, size_t n)
{
    if (b->err)
        return b->err;
    if (n > b->cap - b->len) {
        if (n > SIZE_MAX / 2 - b->len)
            return b->err = -ENOMEM;
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q)
            return b->err = -ENOMEM;
        b->p = q;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

int weir_http_put_raw(weir_http_buf *b, const void *data, size_t n)
{
    if (!data && n)
        return b->err ? b->err : (b->err = -EINVAL);
    return put(b, data, n);
}

static int puts_(weir_http_buf *b, const char *s)
{
    return put(b, s, strlen(s));
}

static int bad(weir_http_buf *b)
{
    if (!b->err)
        b->err = -EINVAL;
    return b->err;
}

static int is_token(const char *s, size_t n)
{
    if (!s || n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)s[i]))
            return 0;
    return 1;
}

int weir_http_put_request_line(weir_http_buf *b, const char *method, const char *target,
                               int version_minor)
{
    if (b->err)
        return b->err;
    if (!method || !is_token(method, strlen(method)) || !target || !*target ||
        (version_minor != 0 && version_minor != 1))
        return bad(b);
    for (const char *t = target; *t; t++)
        if ((unsigned char)*t <= 0x20 || (unsigned char)*t >= 0x7f)
            return bad(b);
    puts_(b, method);
    put(b, " ", 1);
    puts_(b, target);
    return puts_(b, version_minor ? " HTTP/1.1\r\n" : " HTTP/1.0\r\n");
}

int weir_http_put_status_line(weir_http_buf *b, int version_minor, int status, const char *reason)
{
    if (b->err)
        return b->err;
    if (status < 100 || status > 999 || (version_minor != 0 && version_minor != 1))
        return bad(b);
    if (!reason)
        reason = weir_http_status_text(status);
    for (const char *r = reason; *r; r++)
        if (!is_value_char((unsigned char)*r))
            return bad(b);
    /* Formatted by hand: this runs once per response of a server. */
    char line[13] = "HTTP/1.x nnn ";
    line[7] = (char)('0' + version_minor);
    line[9] = (char)('0' + status / 100);
    line[10] = (char)('0' + status / 10 % 10);
    line[11] = (char)('0' + status % 10);
    put(b, line, sizeof(line));
    puts_(b, reason);
    return put(b, "\r\n", 2);
}

int weir_http_put_header_n(weir_http_buf *b, const char *name, size_t nlen, const char *value,
                           size_t vlen)
{
    if (b->err)
        return b->err;
    if (!is_token(name, nlen) || (!value && vlen))
        return bad(b);
    for (size_t i = 0; i < vlen; i++)
        if (!is_value_char((unsigned char)value[i]))
            return bad(b);
    /* Surrounding whitespace would not survive a round trip. */
    if (vlen && (is_ows(value[0]) || is_ows(value[vlen - 1])))
        return bad(b);
    put(b, name, nlen);
    put(b, ": ", 2);
    put(b, value, vlen);
    return put(b, "\r\n", 2);
}

int weir_http_put_header(weir_http_buf *b, const char *name, const char *value)
{
    if (!name || !value)
        return bad(b);
    return weir_http_put_header_n(b, name, strlen(name), value, strlen(value));
}

int weir_http_put_end(weir_http_buf *b)
{
    return put(b, "\r\n", 2);
}

int weir_http_put_content(weir_http_buf *b, const void *data, size_t n)
{
    if (!data && n)
        return bad(b);
    char line[48];
    int k = snprintf(line, sizeof(line), "Content-Length: %zu\r\n\r\n", n);
    put(b, line, (size_t)k);
    return put(b, data, n);
}

int weir_http_put_chunked(weir_http_buf *b)
{
    return puts_(b, "Transfer-Encoding: chunked\r\n\r\n");
}

int weir_http_put_chunk(weir_http_buf *b, const void *data, size_t n)
{
    if (!data && n)
        return bad(b);
    if (n == 0) /* a zero-size chunk would end the body */
        return b->err;
    char line[24];
    int k = snprintf(line, sizeof(line), "%zx\r\n", n);
    put(b, line, (size_t)k);
    put(b, data, n);
    return put(b, "\r\n", 2);
}

int weir_http_put_last_chunk(weir_http_buf *b, const weir_http_header *trailers, size_t n)
{
    if (!trailers && n)
        return bad(b);
    put(b, "0\r\n", 3);
    for (size_t i = 0; i < n; i++)
        weir_http_put_header_n(b, trailers[i].name.p, trailers[i].name.len, trailers[i].value.p,
                               trailers[i].value.len);
    return put(b, "\r\n", 2);
}

const char *weir_http_status_text(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 101:
        return "Switching Protocols";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 206:
        return "Partial Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 303:
        return "See Other";
    case 304:
        return "Not Modified";
    case 307:
        return "Temporary Redirect";
    case 308:
        return "Permanent Redirect";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 415:
        return "Unsupported Media Type";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "";
    }
}
