/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_server.c - the HTTP/1.1 server (weir/http.h, "server").
 *
 * Shape. weir_http_server_start() opens one listening socket per accept
 * loop (SO_REUSEPORT when there are several: one per scheduler thread by
 * default, each loop pinned to its thread) and every accepted connection
 * gets a fiber, spawned on the accepting thread. A connection fiber reads
 * into a 16 KiB buffer and feeds weir_http_parse(); the head is routed and
 * authenticated as soon as it is complete, before it is routed (with a
 * bearer token configured no route is exempt; an unauthenticated or unroutable
 * request with a body is answered without reading the body, and the
 * connection closed); the body is collected up to max_body; at DONE the
 * handler runs and its answer is serialized straight into the connection's
 * output buffer. Pipelined requests already in the input buffer are
 * answered before anything is written, so a burst of them costs one send.
 *
 * Deadlines. Waiting for the first byte of a request: idle_timeout (close
 * quietly). From that byte to the end of the head: header_timeout (408 and
 * close; a slow-header client cannot hold a connection longer). From the
 * end of the head to the end of the body: body_timeout (408). Writing one
 * response: write_timeout (close). Handlers run without a deadline of ours.
 *
 * Stop. weir_http_server_stop() marks the server stopping, cancels the
 * accept loops (which close their sockets), cancels every connection that
 * is between requests, and waits. A connection busy with a request
 * finishes it, answers with "Connection: close" when it can still say so,
 * and ends. The "busy" flag and the stopping flag are read and written
 * under the server lock, so a connection either sees the stop or is seen
 * idle by it (and cancelled). At the stop deadline the rest are cancelled.
 * A waitgroup counts connection fibers from before their spawn to their
 * last touch of the server, so stop returns only when none can touch it.
 *
 * Beside this file: http_server_int.h holds the shared types,
 * http_stream.c the streamed answers (weir_http_res_stream_*) and
 * http_auth.c the token check with its cookie and access_token link.
 *
 * Static files are opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
 * relative to the mounted directory, after a lexical check of the decoded
 * path (no NUL, no "." or ".." segment): the kernel refuses any resolution
 * that leaves the directory, symbolic links included.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/json_depth.h"
#include "base/list.h"
#include "rt/rt_int.h"
#include "weir/http.h"
#include "weir/io.h"
#include "weir/metrics.h"
#include "weir/net.h"
#include "weir/sync.h"

#include "http_server_int.h"

#define REJECTING 64 /* 503 answers in flight at once */

/* ---- metrics -------------------------------------------------------------------------- */
static const char *const method_names[] = {"GET",    "HEAD",    "POST",  "PUT",
                                           "DELETE", "OPTIONS", "PATCH", "other"};
#define NMETHODS (sizeof(method_names) / sizeof(method_names[0]))
_Static_assert(NMETHODS == WEIR__HTTP_NMETHODS, "the server's m_req array");
static const char *const class_names[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};

/* ---- small helpers -------------------------------------------------------------------- */
static int fiber_caller(void)
{
    return weir__task_current() != NULL && !weir__stackless_caller();
}

static int64_t after_ms(int64_t ms)
{
    return weir_time_after_ms(ms);
}

static int str_eq(weir_http_str a, const char *lit)
{
    size_t n = strlen(lit);
    return a.len == n && memcmp(a.p, lit, n) == 0;
}

static int lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

static int method_index(weir_http_str m)
{
    for (size_t i = 0; i + 1 < NMETHODS; i++)
        if (str_eq(m, method_names[i]))
            return (int)i;
    return (int)NMETHODS - 1;
}

/* "Sun, 06 Nov 1994 08:49:37 GMT", formatted once a second per thread. No
 * suspension inside, so the thread-local is the running thread's. */
/* RFC 9110 IMF-fixdate, by hand: strftime's %a and %b follow LC_TIME. */
static size_t http_date(time_t t, char *out /* >= 30 */)
{
    static const char days[] = "SunMonTueWedThuFriSat";
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    struct tm tm;
    gmtime_r(&t, &tm);
    int n = snprintf(out, 30, "%.3s, %02d %.3s %04d %02d:%02d:%02d GMT", days + 3 * tm.tm_wday,
                     tm.tm_mday, months + 3 * tm.tm_mon, tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                     tm.tm_sec);
    return n > 0 && n < 30 ? (size_t)n : 0;
}

static __attribute__((noinline)) void put_date(weir_http_buf *b)
{
    static __thread time_t last;
    static __thread char line[48]; /* "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n" */
    static __thread size_t len;
    time_t now = time(NULL);
    if (now != last) {
        memcpy(line, "Date: ", 6);
        size_t n = http_date(now, line + 6);
        memcpy(line + 6 + n, "\r\n", 2);
        len = 8 + n;
        last = now;
    }
    weir_http_put_raw(b, line, len);
}

/* ---- percent-decoding and the query ------------------------------------------------------ */
static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = lower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

ssize_t weir_http_pct_decode(const char *s, size_t n, char *out, size_t cap, int plus_space)
{
    if ((!s && n) || !out || cap == 0)
        return -EINVAL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (n - i < 3)
                return -EBADMSG;
            int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
            if (h < 0 || l < 0)
                return -EBADMSG;
            c = h * 16 + l;
            i += 2;
        } else if (c == '+' && plus_space) {
            c = ' ';
        }
        if (c == 0)
            return -EBADMSG;
        if (o + 1 >= cap)
            return -ENOSPC;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return (ssize_t)o;
}

ssize_t weir_http_req_query(const weir_http_req *r, const char *name, char *buf, size_t cap)
{
    if (!r || !name || !buf || cap == 0)
        return -EINVAL;
    size_t nl = strlen(name);
    const char *q = r->query.p, *end = r->query.p + r->query.len;
    while (q && q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *pe = amp ? amp : end;
        const char *eq = memchr(q, '=', (size_t)(pe - q));
        const char *ke = eq ? eq : pe;
        /* Names are compared decoded, so "a%5Fb" is "a_b". */
        char key[256];
        ssize_t kn = weir_http_pct_decode(q, (size_t)(ke - q), key, sizeof(key), 1);
        if (kn >= 0 && (size_t)kn == nl && memcmp(key, name, nl) == 0) {
            const char *v = eq ? eq + 1 : pe;
            return weir_http_pct_decode(v, (size_t)(pe - v), buf, cap, 1);
        }
        q = amp ? amp + 1 : end;
    }
    return -ENOENT;
}

const weir_http_str *weir_http_req_param(const weir_http_req *r, const char *name)
{
    if (!r || !name)
        return NULL;
    for (size_t i = 0; i < r->nparams; i++)
        if (strcmp(r->params[i].name, name) == 0)
            return &r->params[i].value;
    return NULL;
}

const weir_http_str *weir_http_req_header(const weir_http_req *r, const char *name)
{
    if (!r || !name)
        return NULL;
    ssize_t i = weir_http_find(r->headers, r->nheaders, name, 0);
    return i < 0 ? NULL : &r->headers[i].value;
}

json_t *weir_http_req_json(const weir_http_req *r, char *err, size_t errcap)
{
    if (r && !weir__json_depth_ok(r->body, r->body_len, WEIR_HTTP_JSON_MAX_DEPTH)) {
        if (err && errcap)
            snprintf(err, errcap, "request body is not JSON: nested deeper than %d levels",
                     WEIR_HTTP_JSON_MAX_DEPTH);
        return NULL;
    }
    json_error_t e;
    json_t *v =
        r ? json_loadb((const char *)r->body, r->body_len, JSON_REJECT_DUPLICATES, &e) : NULL;
    if (!v && err && errcap)
        snprintf(err, errcap, "request body is not JSON: %s (line %d, column %d)",
                 r ? e.text : "no request", r ? e.line : 0, r ? e.column : 0);
    return v;
}

/* ---- responses ------------------------------------------------------------------------ */
int weir_http_res_header(weir_http_res *r, const char *name, const char *value)
{
    if (!r || !name || !value)
        return -EINVAL;
    if (r->done)
        return -EALREADY;
    if (strcasecmp(name, "Content-Length") == 0 || strcasecmp(name, "Transfer-Encoding") == 0 ||
        strcasecmp(name, "Connection") == 0)
        return -EINVAL;
    size_t before = r->hdr.len;
    int e = weir_http_put_header(&r->hdr, name, value);
    if (e == -EINVAL) { /* a bad field is refused, not sticky for the response */
        r->hdr.err = 0;
        r->hdr.len = before;
    }
    return e;
}

/* Status line and the fields every answer has, into the connection's
 * output; the body framing is the caller's. */
void weir__http_put_head(conn *c, weir_http_res *r, int status, const char *ctype)
{
    weir_http_buf *b = &c->out;
    weir_http_put_status_line(b, 1, status, NULL);
    weir_http_put_raw(b, "Server: weir\r\n", 14);
    put_date(b);
    if (ctype)
        weir_http_put_header(b, "Content-Type", ctype);
    if (r->hdr.len)
        weir_http_put_raw(b, r->hdr.p, r->hdr.len);
    if (atomic_load(&c->s->stopping))
        r->close = 1; /* the server is stopping: this is the last answer */
    if (r->close)
        weir_http_put_raw(b, "Connection: close\r\n", 19);
    else if (c->p.version_minor == 0)
        weir_http_put_raw(b, "Connection: keep-alive\r\n", 24);
}

static void put_length(weir_http_buf *b, uint64_t n)
{
    char num[40] = "Content-Length: ";
    char digits[24];
    int k = 0;
    do {
        digits[k++] = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    size_t o = 16;
    while (k)
        num[o++] = digits[--k];
    memcpy(num + o, "\r\n\r\n", 4);
    weir_http_put_raw(b, num, o + 4);
}

int weir_http_res_send(weir_http_res *r, int status, const char *content_type, const void *body,
                       size_t n)
{
    if (!r || (!body && n))
        return -EINVAL;
    if (r->done)
        return -EALREADY;
    if (status < 200 || status > 999)
        return -EINVAL;
    if (content_type && (strchr(content_type, '\r') || strchr(content_type, '\n')))
        return -EINVAL;
    conn *c = r->c;
    size_t mark = c->out.len;
    weir__http_put_head(c, r, status, content_type);
    if (status == 204 || status == 304) {
        weir_http_put_end(&c->out);
    } else {
        put_length(&c->out, n);
        if (!r->head_only)
            weir_http_put_raw(&c->out, body, n);
    }
    if (c->out.err) {
        int e = c->out.err;
        c->out.err = 0;
        c->out.len = mark;
        return e;
    }
    r->done = 1;
    r->status = status;
    return 0;
}

int weir_http_res_text(weir_http_res *r, int status, const char *text)
{
    return weir_http_res_send(r, status, "text/plain; charset=utf-8", text,
                              text ? strlen(text) : 0);
}

static int send_json_text(weir_http_res *r, int status, char *text)
{
    if (!text)
        return -ENOMEM;
    int e = weir_http_res_send(r, status, "application/json", text, strlen(text));
    free(text);
    return e;
}

int weir_http_res_json(weir_http_res *r, int status, const json_t *v)
{
    if (!r || !v)
        return -EINVAL;
    return send_json_text(r, status, json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY));
}

int weir_http_res_error(weir_http_res *r, int status, const char *message)
{
    if (!r)
        return -EINVAL;
    json_t *v = json_pack("{s:s,s:i}", "error", message ? message : weir_http_status_text(status),
                          "status", status);
    if (!v)
        return -ENOMEM;
    int e = send_json_text(r, status, json_dumps(v, JSON_COMPACT));
    json_decref(v);
    return e;
}

/* ---- server object and routes ----------------------------------------------------------- */
static int64_t opt_ms(int64_t v, int64_t def)
{
    return v > 0 ? v : def;
}

static int init_metrics(weir_http_server *s)
{
    weir_metrics *m = s->o.metrics;
    weir_metric_family *f;
    const char *why;
    weir_metric_def req = {.name = "weir_http_requests_total",
                           .help = "HTTP requests received, by method",
                           .type = WEIR_METRIC_COUNTER,
                           .labels = WEIR_LABELS("method"),
                           .nlabels = 1};
    int e = weir_metrics_register(m, &req, &f, &why);
    if (e)
        return e;
    for (size_t i = 0; i < NMETHODS; i++)
        if (!(s->m_req[i] = weir_metric_counter(f, WEIR_LABELS(method_names[i]))))
            return -errno;
    weir_metric_def resp = {.name = "weir_http_responses_total",
                            .help = "HTTP responses sent, by status class",
                            .type = WEIR_METRIC_COUNTER,
                            .labels = WEIR_LABELS("code"),
                            .nlabels = 1};
    if ((e = weir_metrics_register(m, &resp, &f, &why)))
        return e;
    for (size_t i = 0; i < 5; i++)
        if (!(s->m_resp[i] = weir_metric_counter(f, WEIR_LABELS(class_names[i]))))
            return -errno;
    s->m_dur = weir_metrics_histogram(m, "weir_http_request_duration_seconds",
                                      "Time from a request's head to its answer", NULL, 0);
    s->m_conns = weir_metrics_gauge(m, "weir_http_connections", "HTTP connections open");
    return s->m_dur && s->m_conns ? 0 : -errno;
}

#define STR_(x) #x
#define STR(x)  STR_(x)

/* The token the options configure: opts.auth_token, else the variable
 * opts.auth_env names (WEIR_AUTH_TOKEN by default, none when ""), else
 * NULL (no auth). An empty string is returned as it is: a problem. */
static const char *auth_token_of(const weir_http_server_opts *o)
{
    if (o->auth_token)
        return o->auth_token;
    const char *env = o->auth_env ? o->auth_env : "WEIR_AUTH_TOKEN";
    return *env ? getenv(env) : NULL;
}

/* What is wrong with a configured token (a static text), or NULL. Visible
 * ASCII only: a token that a header field cannot carry as it is (a space,
 * a control character, a trailing newline from a file) could never match,
 * and refusing it at start says so instead of answering 401 forever. */
static const char *token_problem(const char *tok)
{
    if (!tok)
        return NULL;
    if (!*tok)
        return "set but empty (unset it to serve without a token)";
    size_t n = 0;
    for (; tok[n]; n++) {
        if (n >= WEIR_HTTP_MAX_TOKEN)
            return "longer than " STR(WEIR_HTTP_MAX_TOKEN) " bytes";
        if ((unsigned char)tok[n] <= 0x20 || (unsigned char)tok[n] >= 0x7f)
            return "holds a byte that is not visible ASCII (a space, a control character...)";
    }
    return NULL;
}

const char *weir_http_server_auth_problem(const weir_http_server_opts *opts)
{
    weir_http_server_opts o = opts ? *opts : (weir_http_server_opts){0};
    return token_problem(auth_token_of(&o));
}

weir_http_server *weir_http_server_new(const weir_http_server_opts *opts)
{
    weir_http_server_opts o = opts ? *opts : (weir_http_server_opts){0};
    if (o.port < 0 || o.port > 65535 || o.max_conns < 0 || o.listeners < 0 ||
        o.listeners > MAX_LISTENERS) {
        errno = EINVAL;
        return NULL;
    }
    weir_http_server *s = calloc(1, sizeof(*s));
    if (!s) {
        errno = ENOMEM;
        return NULL;
    }
    o.header_timeout_ms = opt_ms(o.header_timeout_ms, 10000);
    o.body_timeout_ms = opt_ms(o.body_timeout_ms, 30000);
    o.idle_timeout_ms = opt_ms(o.idle_timeout_ms, 60000);
    o.write_timeout_ms = opt_ms(o.write_timeout_ms, 30000);
    if (o.max_conns == 0)
        o.max_conns = 10000;
    if (o.limits.max_body == 0)
        o.limits.max_body = WEIR_HTTP_SERVER_MAX_BODY;
    if (o.stack_size == 0)
        o.stack_size = WEIR_STACK_DEFAULT;
    s->o = o;
    s->tail = &s->routes;
    s->port = -1;
    weir__list_init(&s->conns);
    atomic_init(&s->refs, 1);
    pthread_mutex_init(&s->lock, NULL);
    /* Check the limits now: a parser refuses nonsense with -EINVAL. */
    weir_http_parser probe;
    int bad = weir_http_parser_init(&probe, WEIR_HTTP_REQUEST, &o.limits);
    if (!bad)
        weir_http_parser_close(&probe);
    const char *tok = auth_token_of(&o);
    if (!bad && token_problem(tok))
        bad = -EINVAL;
    s->host = strdup(o.host ? o.host : "127.0.0.1");
    s->token = tok && !bad ? strdup(tok) : NULL;
    s->wg = weir_waitgroup_new();
    s->o.host = s->host;
    s->o.auth_token = s->token;
    s->o.auth_env = "";
    int e = bad ? bad : (!s->host || (tok && !s->token) || !s->wg) ? -ENOMEM : 0;
    if (!e && s->o.metrics)
        e = init_metrics(s);
    if (e) {
        weir_http_server_free(s);
        errno = -e;
        return NULL;
    }
    s->token_len = s->token ? strlen(s->token) : 0;
    s->token_cookie_ok = s->token && !strpbrk(s->token, "\",;\\");
    return s;
}

static int parse_pattern(route *r, const char *pattern)
{
    if (!pattern || pattern[0] != '/')
        return -EINVAL;
    r->text = strdup(pattern + 1);
    if (!r->text)
        return -ENOMEM;
    size_t n = 1;
    for (const char *q = r->text; *q; q++)
        n += *q == '/';
    r->segs = calloc(n, sizeof(seg));
    if (!r->segs)
        return -ENOMEM;
    size_t params = 0;
    char *q = r->text;
    for (size_t i = 0; i < n; i++) {
        char *slash = strchr(q, '/');
        if (slash)
            *slash = '\0';
        seg *sg = &r->segs[i];
        if (q[0] == ':') {
            sg->kind = SEG_PARAM;
            sg->s = q + 1;
            if (!q[1] || strcmp(q + 1, "*") == 0)
                return -EINVAL;
            params++;
        } else if (strcmp(q, "*") == 0) {
            if (i != n - 1)
                return -EINVAL;
            sg->kind = SEG_WILD;
            sg->s = "*";
            params++;
        } else {
            if (strchr(q, '*') || strchr(q, '?') || strchr(q, '#'))
                return -EINVAL;
            sg->kind = SEG_LIT;
            sg->s = q;
        }
        sg->len = strlen(sg->s);
        q = slash ? slash + 1 : q + strlen(q);
    }
    r->nseg = n;
    return params > WEIR_HTTP_MAX_PARAMS ? -EINVAL : 0;
}

static void route_free(route *r)
{
    if (r->dirfd > 0)
        close(r->dirfd);
    free(r->method);
    free(r->text);
    free(r->segs);
    free(r);
}

static int add_route(weir_http_server *s, int kind, const char *method, const char *pattern,
                     int flags, route **out)
{
    if (!s || !pattern)
        return -EINVAL;
    pthread_mutex_lock(&s->lock);
    int started = s->started;
    pthread_mutex_unlock(&s->lock);
    if (started)
        return -EBUSY;
    route *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->kind = kind;
    r->flags = flags;
    r->dirfd = -1;
    int e = parse_pattern(r, pattern);
    if (!e && method && strcmp(method, "*") != 0) {
        if (!*method || strpbrk(method, " \t\r\n/:"))
            e = -EINVAL;
        else if (!(r->method = strdup(method)))
            e = -ENOMEM;
    }
    if (e) {
        route_free(r);
        return e;
    }
    *s->tail = r;
    s->tail = &r->next;
    *out = r;
    return 0;
}

int weir_http_route(weir_http_server *s, const char *method, const char *pattern,
                    weir_http_handler h, void *arg, int flags)
{
    if (!h)
        return -EINVAL;
    route *r;
    if (flags)
        return -EINVAL; /* none defined: no route is exempt from the token */
    int e = add_route(s, ROUTE_HANDLER, method, pattern, 0, &r);
    if (e)
        return e;
    r->h = h;
    r->arg = arg;
    return 0;
}

int weir_http_route_max_body(weir_http_server *s, const char *method, const char *pattern,
                             weir_http_handler h, void *arg, uint64_t max_body)
{
    if (!h || max_body == 0)
        return -EINVAL;
    route *r;
    int e = add_route(s, ROUTE_HANDLER, method, pattern, 0, &r);
    if (e)
        return e;
    r->h = h;
    r->arg = arg;
    r->max_body = max_body;
    return 0;
}

int weir_http_route_static(weir_http_server *s, const char *pattern, const char *dir, int flags)
{
    if (!dir || !pattern || !*pattern || pattern[strlen(pattern) - 1] != '*' ||
        (flags & ~WEIR_HTTP_STATIC_SPA))
        return -EINVAL;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    route *r;
    int e = add_route(s, ROUTE_STATIC, "GET", pattern, flags, &r);
    if (e) {
        close(fd);
        return e;
    }
    r->dirfd = fd;
    return 0;
}

int weir_http_route_metrics(weir_http_server *s, const char *path, struct weir_metrics *m,
                            int flags)
{
    if (flags)
        return -EINVAL;
    route *r;
    int e = add_route(s, ROUTE_METRICS, "GET", path, 0, &r);
    if (!e)
        r->m = m;
    return e;
}

static void server_destroy(weir_http_server *s)
{
    for (route *r = s->routes, *next; r; r = next) {
        next = r->next;
        route_free(r);
    }
    weir_waitgroup_free(s->wg);
    pthread_mutex_destroy(&s->lock);
    free(s->host);
    free(s->token);
    free(s);
}

/* The owner's reference: the memory goes when the last connection that may
 * still be winding down (after a cancelled stop) has ended. */
void weir_http_server_free(weir_http_server *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1)
        server_destroy(s);
}

static void server_unref(weir_http_server *s)
{
    weir_http_server_free(s);
}

void weir_http_server_stats_get(const weir_http_server *s, weir_http_server_stats *st)
{
    st->accepted = atomic_load(&s->accepted);
    st->open = atomic_load(&s->open);
    st->rejected = atomic_load(&s->rejected);
    st->requests = atomic_load(&s->requests);
    st->errors = atomic_load(&s->errors);
    st->timeouts = atomic_load(&s->timeouts);
}

int weir_http_server_port(const weir_http_server *s)
{
    return s && s->port >= 0 ? s->port : -ENOTCONN;
}

/* ---- routing -------------------------------------------------------------------------- */
/* Does path (starting with '/') match r? Parameters go to req. */
static int match(const route *r, const char *path, size_t n, weir_http_req *req)
{
    const char *p = path + 1, *end = path + n;
    size_t np = 0;
    for (size_t i = 0; i < r->nseg; i++) {
        const seg *sg = &r->segs[i];
        if (sg->kind == SEG_WILD) {
            req->params[np].name = "*";
            req->params[np].value = (weir_http_str){p, (size_t)(end - p)};
            req->nparams = np + 1;
            return 1;
        }
        if (p > end)
            return 0;
        const char *slash = memchr(p, '/', (size_t)(end - p));
        const char *se = slash ? slash : end;
        size_t len = (size_t)(se - p);
        if (sg->kind == SEG_LIT) {
            if (len != sg->len || memcmp(p, sg->s, len) != 0)
                return 0;
        } else {
            if (len == 0)
                return 0;
            req->params[np].name = sg->s;
            req->params[np].value = (weir_http_str){p, len};
            np++;
        }
        if (i + 1 < r->nseg) {
            if (!slash) {
                /* "/static" matches "/static/ *" with an empty tail. */
                if (i + 2 == r->nseg && r->segs[i + 1].kind == SEG_WILD) {
                    req->params[np].name = "*";
                    req->params[np].value = (weir_http_str){end, 0};
                    req->nparams = np + 1;
                    return 1;
                }
                return 0;
            }
            p = slash + 1;
        } else if (slash) {
            return 0;
        }
    }
    req->nparams = np;
    return 1;
}

static int method_ok(const route *r, weir_http_str m)
{
    return !r->method || str_eq(m, r->method);
}

static void add_allow(conn *c, const char *m)
{
    size_t n = strlen(c->allow);
    /* Already listed? */
    for (const char *q = c->allow; (q = strstr(q, m)) != NULL; q++)
        if ((q == c->allow || q[-1] == ' ') && (q[strlen(m)] == ',' || q[strlen(m)] == '\0'))
            return;
    snprintf(c->allow + n, sizeof(c->allow) - n, "%s%s", n ? ", " : "", m);
}

/* Find the route for the request in c->req; sets c->rt or c->early_status.
 * HEAD takes the first route, in registration order, that serves HEAD, GET
 * or any method (its body is dropped). */
static void route_request(conn *c)
{
    weir_http_server *s = c->s;
    weir_http_req *q = &c->req;
    c->allow[0] = '\0';
    int head = str_eq(q->method, "HEAD");
    int path_matched = 0;
    for (const route *r = s->routes; r; r = r->next) {
        if (!match(r, q->path.p, q->path.len, q))
            continue;
        path_matched = 1;
        if (method_ok(r, q->method) || (head && strcmp(r->method, "GET") == 0)) {
            c->rt = r;
            return;
        }
        add_allow(c, r->method);
        if (strcmp(r->method, "GET") == 0)
            add_allow(c, "HEAD");
    }
    q->nparams = 0;
    if (str_eq(q->method, "OPTIONS") && path_matched) {
        c->early_status = 204; /* capability query (behind the token, if one is set) */
        return;
    }
    c->early_status = path_matched ? 405 : 404;
}

/* ---- the connection ------------------------------------------------------------------- */
/* Write it all, under the write deadline. (A plain send(2) tried first was
 * measured: with io_uring it costs more CPU per request than letting the
 * send ride the ring's batched submission, and the epoll backend already
 * tries the send at once.) */
static ssize_t send_all(conn *c, const void *p, size_t n, int64_t deadline)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = weir_io_send(c->fd, (const char *)p + done, n - done, MSG_NOSIGNAL, deadline);
        if (w < 0)
            return w;
        if (w == 0)
            return -EPIPE;
        done += (size_t)w;
    }
    return (ssize_t)done;
}

int weir__http_flush(conn *c)
{
    if (c->out.len == 0)
        return 0;
    ssize_t w = send_all(c, c->out.p, c->out.len, after_ms(c->s->o.write_timeout_ms));
    if (c->out.cap > OUT_KEEP) /* a big answer went out: do not keep its buffer */
        weir_http_buf_close(&c->out);
    else
        weir_http_buf_reset(&c->out);
    if (w == -ETIMEDOUT)
        atomic_fetch_add(&c->s->timeouts, 1);
    return w < 0 ? (int)w : 0;
}

static void begin_response(conn *c, int keep_alive)
{
    weir_http_res *r = &c->res;
    weir_http_buf_reset(&r->hdr);
    r->c = c;
    r->done = 0;
    r->status = 0;
    r->file_fd = -1;
    r->stream = STREAM_NONE;
    r->chunked = 0;
    r->stream_err = 0;
    r->head_only = str_eq(c->p.method, "HEAD");
    r->close = !keep_alive;
}

/* Count one answered request. */
static void account(conn *c, int status)
{
    weir_http_server *s = c->s;
    atomic_fetch_add(&s->requests, 1);
    if (s->m_dur) {
        int cls = status / 100 - 1;
        if (cls >= 0 && cls < 5)
            weir_counter_inc(s->m_resp[cls]);
        weir_histogram_observe(s->m_dur, (double)(weir_time_now() - c->t0) / 1e9);
    }
}

/* An answer from the server itself (an error, 204 to OPTIONS...). */
static void answer_plain(conn *c, int status, const char *msg, int close)
{
    weir_http_res *r = &c->res;
    weir_http_buf_reset(&r->hdr);
    r->done = 0;
    r->close = r->close || close;
    if (status == 401)
        weir_http_put_header(&r->hdr, "WWW-Authenticate",
                             c->auth_invalid ? "Bearer realm=\"weir\", error=\"invalid_token\""
                                             : "Bearer realm=\"weir\"");
    if (status == 405 || (status == 204 && c->allow[0]))
        weir_http_put_header(&r->hdr, "Allow", c->allow[0] ? c->allow : "OPTIONS");
    if (status == 303 && weir__http_put_redirect(c) < 0) {
        weir_http_buf_reset(&r->hdr);
        status = 500;
        msg = "out of memory";
    }
    if (status == 204 || status == 303)
        weir_http_res_send(r, status, NULL, NULL, 0);
    else
        weir_http_res_error(r, status, msg);
    if (status >= 400)
        atomic_fetch_add(&c->s->errors, 1);
    account(c, status);
}

static const char *content_type_of(const char *name)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {"html", "text/html; charset=utf-8"},
        {"htm", "text/html; charset=utf-8"},
        {"css", "text/css; charset=utf-8"},
        {"js", "text/javascript; charset=utf-8"},
        {"mjs", "text/javascript; charset=utf-8"},
        {"json", "application/json"},
        {"map", "application/json"},
        {"txt", "text/plain; charset=utf-8"},
        {"csv", "text/csv; charset=utf-8"},
        {"xml", "application/xml"},
        {"svg", "image/svg+xml"},
        {"png", "image/png"},
        {"jpg", "image/jpeg"},
        {"jpeg", "image/jpeg"},
        {"gif", "image/gif"},
        {"webp", "image/webp"},
        {"ico", "image/x-icon"},
        {"wasm", "application/wasm"},
        {"woff", "font/woff"},
        {"woff2", "font/woff2"},
        {"pdf", "application/pdf"},
    };
    const char *slash = strrchr(name, '/');
    const char *dot = strrchr(slash ? slash : name, '.');
    if (dot)
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
            if (strcasecmp(dot + 1, types[i].ext) == 0)
                return types[i].type;
    return "application/octet-stream";
}

static int open_beneath(int dirfd, const char *rel)
{
    struct open_how how = {.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
    return fd < 0 ? -errno : (int)fd;
}

/* Open a regular file (a directory's index.html) beneath the root. */
static int open_file(int dirfd, char *rel, size_t cap, struct stat *st)
{
    int fd = open_beneath(dirfd, rel);
    if (fd < 0)
        return fd;
    if (fstat(fd, st) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    if (S_ISDIR(st->st_mode)) {
        close(fd);
        size_t n = strlen(rel);
        if (n + 12 > cap)
            return -ENAMETOOLONG;
        strcpy(rel + n, n && rel[n - 1] != '/' ? "/index.html" : "index.html");
        return open_file(dirfd, rel, cap, st);
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return -ENOENT;
    }
    return fd;
}

/* Answer a static-file request: sets up res->file_fd or answers an error. */
static void serve_static(conn *c, const route *r)
{
    const weir_http_str *tail = weir_http_req_param(&c->req, "*");
    char rel[4096];
    ssize_t n = weir_http_pct_decode(tail->p, tail->len, rel + 1, sizeof(rel) - 32, 0);
    if (n < 0) {
        answer_plain(c, n == -ENOSPC ? 414 : 400, "bad path", 0);
        return;
    }
    /* Lexical check: every segment must be a plain name. */
    rel[0] = '.';
    char *q = rel + 1;
    for (;;) {
        while (*q == '/')
            q++;
        char *e = strchr(q, '/');
        size_t len = e ? (size_t)(e - q) : strlen(q);
        /* ".", "..", and hidden files (".git", ".env": never meant to be
         * served) are all refused. */
        if (len >= 1 && q[0] == '.') {
            answer_plain(c, 404, "not found", 0);
            return;
        }
        if (!e)
            break;
        q = e + 1;
    }
    /* "./" + path, so an empty tail is the root itself. */
    memmove(rel + 2, rel + 1, (size_t)n + 1);
    rel[1] = '/';
    struct stat st;
    int fd = open_file(r->dirfd, rel, sizeof(rel), &st);
    if (fd == -ENOENT && (r->flags & WEIR_HTTP_STATIC_SPA)) {
        const char *slash = strrchr(rel, '/');
        if (!strchr(slash ? slash : rel, '.')) {
            strcpy(rel, "index.html");
            fd = open_file(r->dirfd, rel, sizeof(rel), &st);
        }
    }
    if (fd < 0) {
        int status = fd == -ENOENT || fd == -ENOTDIR || fd == -EXDEV || fd == -ELOOP ? 404
                     : fd == -EACCES || fd == -EPERM                                 ? 403
                     : fd == -ENAMETOOLONG                                           ? 414
                                                                                     : 500;
        answer_plain(c, status, status == 404 ? "not found" : strerror(-fd), 0);
        return;
    }
    weir_http_res *res = &c->res;
    weir__http_put_head(c, res, 200, content_type_of(rel));
    char lm[32];
    if (http_date(st.st_mtime, lm))
        weir_http_put_header(&c->out, "Last-Modified", lm);
    put_length(&c->out, (uint64_t)st.st_size);
    res->done = 1;
    res->status = 200;
    if (res->head_only || st.st_size == 0)
        close(fd);
    else {
        res->file_fd = fd;
        res->file_size = (uint64_t)st.st_size;
    }
}

/* Stream the static file after the head; 0 or an error (close). */
static int send_file(conn *c)
{
    weir_http_res *r = &c->res;
    int fd = r->file_fd;
    r->file_fd = -1;
    int e = weir__http_flush(c);
    /* One deadline for the whole file: a client reading a piece just before
     * each write would time out can not stretch it. */
    int64_t deadline = after_ms(c->s->o.write_timeout_ms);
    char *buf = e ? NULL : malloc(FILE_CHUNK);
    uint64_t off = 0;
    if (!e && !buf)
        e = -ENOMEM;
    while (!e && off < r->file_size) {
        size_t want = r->file_size - off < FILE_CHUNK ? (size_t)(r->file_size - off) : FILE_CHUNK;
        ssize_t n = weir_io_pread(fd, buf, want, (int64_t)off, WEIR_FOREVER);
        if (n <= 0) {
            e = n < 0 ? (int)n : -EIO; /* the file shrank: the length is a lie now */
            break;
        }
        ssize_t w = send_all(c, buf, (size_t)n, deadline);
        if (w < 0) {
            e = (int)w;
            if (w == -ETIMEDOUT)
                atomic_fetch_add(&c->s->timeouts, 1);
        }
        off += (uint64_t)n;
    }
    free(buf);
    weir_io_close(fd);
    return e;
}

static void serve_metrics(conn *c, const route *r)
{
    weir_metrics_buf mb = {0};
    int e = weir_metrics_render(r->m, &mb);
    if (e)
        answer_plain(c, 500, "metrics could not be rendered", 0);
    else
        weir_http_res_send(&c->res, 200, WEIR_METRICS_CONTENT_TYPE, mb.data, mb.len);
    weir_metrics_buf_free(&mb);
}

/* The head is complete: fill c->req, route, authenticate. */
/* Does the request announce body bytes? (Content-Length: 0 does not.) */
static int has_body(const weir_http_parser *p)
{
    return p->body == WEIR_HTTP_BODY_CHUNKED ||
           (p->body == WEIR_HTTP_BODY_LENGTH && p->content_length > 0);
}

static void on_head(conn *c, int body_buffered)
{
    weir_http_server *s = c->s;
    weir_http_parser *p = &c->p;
    weir_http_req *q = &c->req;
    c->rt = NULL;
    c->early_status = 0;
    c->early_msg = NULL;
    c->auth_invalid = 0;
    c->auth_redirect = 0;
    c->blen = 0;
    q->method = p->method;
    q->target = p->target;
    q->version_minor = p->version_minor;
    q->headers = p->headers;
    q->nheaders = p->nheaders;
    q->nparams = 0;
    q->body = NULL;
    q->body_len = 0;
    q->peer = c->peer;
    q->server = s;
    if (s->m_req[0])
        weir_counter_inc(s->m_req[method_index(p->method)]);
    /* The token first, before the target is even looked at: every request
     * whose head is complete passes here, and with a token configured none
     * goes on without it (no route, no handler, no 404 or 405 that would
     * tell what exists). Only what the parser refuses before a head is
     * complete (400, 413, 414, 431...) is answered without this check. */
    q->path = q->query = (weir_http_str){"", 0};
    /* The target is split first (the token may come in its query), but not
     * routed before the check. */
    /* origin-form "/p?q"; absolute-form "http://host/p?q"; "*" for OPTIONS. */
    const char *t = p->target.p, *end = t + p->target.len;
    if (p->target.len > 7 &&
        (strncasecmp(t, "http://", 7) == 0 || strncasecmp(t, "https://", 8) == 0)) {
        const char *a = t + (lower(t[4]) == 's' ? 8 : 7), *sl = a;
        while (sl < end && *sl != '/' && *sl != '?')
            sl++;
        if (sl < end && *sl == '/') {
            t = sl;
        } else { /* no path: "/" with whatever query follows */
            static const char root[] = "/";
            q->path = (weir_http_str){root, 1};
            q->query =
                sl < end ? (weir_http_str){sl + 1, (size_t)(end - sl - 1)} : (weir_http_str){"", 0};
            goto routed_path;
        }
    }
    {
        const char *qm = memchr(t, '?', (size_t)(end - t));
        q->path = (weir_http_str){t, (size_t)((qm ? qm : end) - t)};
        q->query = qm ? (weir_http_str){qm + 1, (size_t)(end - qm - 1)} : (weir_http_str){"", 0};
    }
routed_path:
    if ((c->early_msg = weir__http_auth_refusal(c, &c->auth_invalid))) {
        c->early_status = c->auth_redirect ? 303 : 401;
        return;
    }
    if (str_eq(p->target, "*")) {
        c->allow[0] = '\0';
        if (!str_eq(p->method, "OPTIONS")) {
            c->early_status = 400;
            return;
        }
        c->early_status = 204; /* "OPTIONS *": behind the token, above */
    } else if (q->path.len == 0 || q->path.p[0] != '/') {
        c->early_status = 400;
        c->early_msg = "request target must be a path starting with /";
        return;
    } else {
        route_request(c);
    }
    /* The route's body cap, or the server's: a declared length over it is
     * 413 now (before any 100 Continue), a chunked body when it gets there.
     * (Unrouted and refused requests with a body are closed unread.) */
    if (c->rt && !c->early_status &&
        weir_http_parser_body_cap(p, c->rt->max_body ? c->rt->max_body : s->o.limits.max_body)) {
        c->early_status = 413;
        c->early_msg = "body larger than the limit";
        return;
    }
    const weir_http_str *ex = weir_http_header_get(p, "expect");
    if (ex && !c->early_status) {
        if (ex->len == 12 && strncasecmp(ex->p, "100-continue", 12) == 0) {
            /* After the answers before it, and only when the client is
             * waiting for it (no body bytes arrived yet). */
            if (p->version_minor == 1 && has_body(p) && !body_buffered) {
                weir_http_put_raw(&c->out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
                weir__http_flush(c);
            }
        } else {
            c->early_status = 417;
            c->early_msg = "unsupported Expect";
        }
    }
}

static int on_body(conn *c, const uint8_t *d, size_t n)
{
    if (c->early_status)
        return 0; /* answered without the body */
    if (n > c->bcap - c->blen) {
        size_t cap = c->bcap ? c->bcap : 4096;
        while (cap < c->blen + n)
            cap *= 2;
        uint8_t *nb = realloc(c->body, cap);
        if (!nb)
            return -ENOMEM;
        c->body = nb;
        c->bcap = cap;
    }
    memcpy(c->body + c->blen, d, n);
    c->blen += n;
    return 0;
}

/* The request is complete: answer it into c->out. */
static void on_done(conn *c)
{
    weir_http_req *q = &c->req;
    const route *r = c->rt;
    if (c->early_status) {
        answer_plain(c, c->early_status, c->early_msg, 0);
        return;
    }
    q->body = c->body ? c->body : (const uint8_t *)"";
    q->body_len = c->blen;
    if (r->kind == ROUTE_STATIC) {
        serve_static(c, r);
        if (c->res.status && c->res.status < 400)
            account(c, c->res.status);
        return;
    }
    if (r->kind == ROUTE_METRICS) {
        serve_metrics(c, r);
        if (c->res.done)
            account(c, c->res.status);
        return;
    }
    size_t mark = c->out.len;
    int e = r->h(q, &c->res, r->arg);
    if (c->res.stream != STREAM_NONE) {
        weir__http_stream_finish(c, e);
        account(c, c->res.status);
        return;
    }
    if (!c->res.done) {
        c->out.len = mark;
        char msg[128];
        if (e < 0)
            snprintf(msg, sizeof(msg), "handler failed: %s", weir_strerror(e));
        else
            snprintf(msg, sizeof(msg), "handler gave no answer");
        weir_http_buf_reset(&c->res.hdr);
        weir_http_res_error(&c->res, 500, msg);
    }
    account(c, c->res.status);
}

/* Between requests: may the connection go on? Marks it idle. */
static int set_busy(conn *c, int busy)
{
    weir_http_server *s = c->s;
    pthread_mutex_lock(&s->lock);
    int stopping = atomic_load(&s->stopping);
    c->busy = busy;
    pthread_mutex_unlock(&s->lock);
    return !stopping;
}

/* When a phase's deadline passes: idle (close quietly), head, body (408). */
enum { PHASE_IDLE, PHASE_HEAD, PHASE_BODY };

/* A server-made error answer outside a request it could parse (a malformed
 * head, a deadline): nothing of the previous request's answer applies, and
 * the connection closes after it, gracefully (the client may be sending). */
static void answer_and_close(conn *c, int status, const char *msg)
{
    c->res.head_only = 0;
    c->res.close = 1;
    c->linger = 1;
    answer_plain(c, status, msg, 1);
    weir__http_flush(c);
}

/* Only CR/LF in d[0..n)? (Clients may send a stray CRLF after a body.) */
static int only_crlf(const uint8_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (d[i] != '\r' && d[i] != '\n')
            return 0;
    return 1;
}

static void serve(conn *c)
{
    weir_http_server *s = c->s;
    weir_http_parser *p = &c->p;
    const int64_t phase_ms[] = {s->o.idle_timeout_ms, s->o.header_timeout_ms, s->o.body_timeout_ms};
    size_t have = 0, pos = 0;
    int phase = PHASE_IDLE;
    /* The phase's deadline, computed the first time the phase has to wait
     * for bytes (0: not yet): a request that arrives whole never reads the
     * clock for it. The head deadline so runs from the first wait for more
     * of the head, microseconds after its first byte. */
    int64_t deadline = 0;
    for (;;) {
        weir_http_event ev;
        ssize_t n = weir_http_parse(p, c->rbuf + pos, have - pos, &ev);
        if (n < 0) {
            answer_and_close(c, weir_http_error_status((int)n), weir_http_parser_reason(p));
            return;
        }
        pos += (size_t)n;
        switch (ev.kind) {
        case WEIR_HTTP_NEED_MORE: {
            if (weir__http_flush(c) < 0)
                return;
            pos = have = 0;
            /* Between requests, and every answer is out: the connection is
             * idle now, which a stop may see (and cancel it), or which it
             * sees stop. */
            if (phase == PHASE_IDLE && !set_busy(c, 0))
                return;
            if (!deadline)
                deadline = after_ms(phase_ms[phase]);
            ssize_t got = weir_io_recv(c->fd, c->rbuf, sizeof(c->rbuf), 0, deadline);
            if (got == -ETIMEDOUT) {
                if (phase != PHASE_IDLE) {
                    atomic_fetch_add(&s->timeouts, 1);
                    answer_and_close(c, 408,
                                     phase == PHASE_HEAD ? "request head took too long"
                                                         : "request body took too long");
                }
                return;
            }
            if (got <= 0)
                return; /* EOF, reset, cancelled */
            have = (size_t)got;
            if (phase == PHASE_IDLE) {
                /* A stop that saw us idle cancelled us: end before touching
                 * the request, so the client may safely send it again. */
                if (!set_busy(c, 1))
                    return;
                phase = PHASE_HEAD;
                deadline = 0;
                if (s->m_dur)
                    c->t0 = weir_time_now();
            }
            break;
        }
        case WEIR_HTTP_HEAD:
            begin_response(c, p->keep_alive);
            on_head(c, pos < have);
            phase = PHASE_BODY;
            deadline = 0;
            if (c->early_status && has_body(p)) {
                /* Refused before its body: answer, and close rather than
                 * read a body nobody wants. */
                c->res.close = 1;
                c->linger = 1;
                answer_plain(c, c->early_status, c->early_msg, 1);
                weir__http_flush(c);
                return;
            }
            break;
        case WEIR_HTTP_BODY:
            if (on_body(c, ev.data, ev.len) < 0) {
                answer_and_close(c, 500, "out of memory");
                return;
            }
            break;
        case WEIR_HTTP_DONE: {
            on_done(c);
            /* No answer (out of memory writing it): the next answer would
             * go to the wrong request. Close instead. */
            int close = c->res.close || !c->res.done;
            if (c->res.file_fd >= 0 && send_file(c) < 0)
                return;
            if (c->bcap > (64u << 10)) { /* do not keep a big body buffer around */
                free(c->body);
                c->body = NULL;
                c->bcap = 0;
            }
            if (close) {
                weir__http_flush(c);
                return;
            }
            deadline = 0;
            if (pos < have && only_crlf(c->rbuf + pos, have - pos))
                pos = have;   /* a stray CRLF is not a request */
            if (pos < have) { /* a pipelined request follows */
                phase = PHASE_HEAD;
                if (s->m_dur)
                    c->t0 = weir_time_now();
                /* Answers wait to go out together, up to a bound: a burst of
                 * pipelined requests cannot pile up answers in memory. */
                if (c->out.len >= OUT_KEEP && weir__http_flush(c) < 0)
                    return;
            } else {
                phase = PHASE_IDLE; /* idle once the answer is out (NEED_MORE) */
            }
            break;
        }
        }
    }
}

static void conn_free(conn *c)
{
    weir_http_parser_close(&c->p);
    weir_http_buf_close(&c->out);
    weir_http_buf_close(&c->res.hdr);
    free(c->body);
    free(c);
}

static intptr_t conn_main(void *arg)
{
    conn *c = arg;
    weir_http_server *s = c->s;
    pthread_mutex_lock(&s->lock);
    int stopping = atomic_load(&s->stopping);
    if (!stopping) {
        c->task = weir_task_ref(weir_task_current());
        weir__list_push_front(&s->conns, &c->node);
    }
    pthread_mutex_unlock(&s->lock);
    if (!stopping) {
        weir_net_set_nodelay(c->fd, 1);
        c->res.file_fd = -1;
        if (weir_http_parser_init(&c->p, WEIR_HTTP_REQUEST, &s->plim) == 0)
            serve(c);
        if (c->res.file_fd >= 0)
            close(c->res.file_fd);
        pthread_mutex_lock(&s->lock);
        weir__list_remove(&c->node);
        pthread_mutex_unlock(&s->lock);
        weir_task_unref(c->task);
    }
    if (c->linger) /* an error answer: let the client read it before the close */
        weir_net_close_graceful(c->fd, after_ms(1000));
    else
        weir_io_close(c->fd);
    atomic_fetch_sub(&s->open, 1);
    if (s->m_conns)
        weir_gauge_dec(s->m_conns);
    conn_free(c);
    weir_waitgroup_done(s->wg);
    server_unref(s);
    return 0;
}

/* ---- accepting ------------------------------------------------------------------------ */
#define BUSY_BODY "{\"error\":\"too many connections\",\"status\":503}"
_Static_assert(sizeof(BUSY_BODY) - 1 == 45, "Content-Length of the 503 below");
static const char busy_503[] = "HTTP/1.1 503 Service Unavailable\r\n"
                               "Content-Type: application/json\r\n"
                               "Content-Length: 45\r\n"
                               "Connection: close\r\n\r\n" BUSY_BODY;

/* Answer 503 and close gracefully: closing with the request unread (or
 * arriving later) would reset the connection, and a reset can destroy the
 * 503 before the client reads it. */
static intptr_t reject_main(void *arg)
{
    conn *c = arg;
    weir_http_server *s = c->s;
    if (send_all(c, busy_503, sizeof(busy_503) - 1, after_ms(1000)) >= 0)
        weir_net_close_graceful(c->fd, after_ms(1000));
    else
        weir_io_close(c->fd);
    atomic_fetch_sub(&s->rejecting, 1);
    free(c);
    server_unref(s);
    return 0;
}

static void reject(weir_http_server *s, int fd)
{
    atomic_fetch_add(&s->rejected, 1);
    /* At most REJECTING of those at once; past that a flood just gets closed. */
    conn *c = NULL;
    if (atomic_fetch_add(&s->rejecting, 1) < REJECTING && (c = malloc(sizeof(*c))) != NULL) {
        c->s = s;
        c->fd = fd;
        /* A reference, not the waitgroup: stop() does not wait for these
         * (they end within a second), the server's memory stays for them. */
        atomic_fetch_add(&s->refs, 1);
        weir_task *t = weir_task_spawn(
            reject_main, c, &(weir_spawn_opts){.name = "http-reject", .stack_size = 16384});
        if (t) {
            weir_task_detach(t);
            return;
        }
        atomic_fetch_sub(&s->refs, 1);
        free(c);
    }
    atomic_fetch_sub(&s->rejecting, 1);
    close(fd);
}

static void spawn_conn(weir_http_server *s, int fd, const weir_net_addr *peer)
{
    conn *c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return;
    }
    c->s = s;
    c->fd = fd;
    c->res.c = c;
    c->res.file_fd = -1;
    weir_http_buf_init(&c->out);
    weir_http_buf_init(&c->res.hdr);
    if (weir_net_addr_format(peer, c->peer, sizeof(c->peer)) < 0)
        strcpy(c->peer, "?");
    atomic_fetch_add(&s->open, 1);
    if (s->m_conns)
        weir_gauge_inc(s->m_conns);
    atomic_fetch_add(&s->refs, 1);
    weir_waitgroup_add(s->wg, 1);
    weir_task *t = weir_task_spawn(
        conn_main, c, &(weir_spawn_opts){.name = "http-conn", .stack_size = s->o.stack_size});
    if (t) {
        weir_task_detach(t);
        return;
    }
    close(fd);
    atomic_fetch_sub(&s->open, 1);
    if (s->m_conns)
        weir_gauge_dec(s->m_conns);
    conn_free(c);
    weir_waitgroup_done(s->wg);
    server_unref(s);
}

typedef struct acceptor acceptor;

static intptr_t accept_main(void *arg)
{
    acceptor *a = arg;
    weir_http_server *s = a->s;
    for (;;) {
        weir_net_addr peer;
        int fd = weir_net_accept(a->lfd, &peer, WEIR_FOREVER);
        if (fd == -ECANCELED)
            break;
        if (fd < 0) {
            /* Out of descriptors or memory: the connection stays queued;
             * wait a little instead of spinning. */
            if (weir_time_sleep(10 * WEIR_MSEC) == -ECANCELED)
                break;
            continue;
        }
        atomic_fetch_add(&s->accepted, 1);
        if (atomic_load(&s->open) >= (uint64_t)s->o.max_conns) {
            reject(s, fd);
            continue;
        }
        spawn_conn(s, fd, &peer);
    }
    weir_io_close(a->lfd);
    a->lfd = -1;
    weir_waitgroup_done(s->wg);
    server_unref(s);
    return 0;
}

int weir_http_server_start(weir_http_server *s)
{
    if (!s)
        return -EINVAL;
    if (!fiber_caller())
        return -EINVAL;
    pthread_mutex_lock(&s->lock);
    int again = s->started, stopped = atomic_load(&s->stopping);
    if (!again && !stopped)
        s->started = 1;
    pthread_mutex_unlock(&s->lock);
    if (stopped)
        return -ESHUTDOWN;
    if (again)
        return -EBUSY;
    /* The parsers take the largest body cap of any route, so that a head
     * declaring a body for such a route gets as far as routing; each request
     * then gets its route's cap (on_head). Routes are fixed from now on. */
    s->plim = s->o.limits;
    for (const route *r = s->routes; r; r = r->next)
        if (r->max_body > s->plim.max_body)
            s->plim.max_body = r->max_body;
    weir_rt *rt = weir_rt_current();
    int threads = rt ? weir_rt_threads(rt) : 1;
    int n = s->o.listeners ? s->o.listeners : threads < MAX_LISTENERS ? threads : MAX_LISTENERS;
    weir_listen_opts lo = {.backlog = 4096, .reuseport = n > 1};
    int port = s->o.port, e = 0, i;
    for (i = 0; i < n; i++) {
        int fd = weir_net_listen(s->host, port, &lo);
        if (fd < 0) {
            e = fd;
            break;
        }
        s->acc[i] = (acceptor){s, fd};
        if (i == 0)
            port = weir_net_local_port(fd);
    }
    if (e) {
        while (i-- > 0)
            close(s->acc[i].lfd);
        pthread_mutex_lock(&s->lock);
        s->started = 0; /* nothing runs: may be started again (another port...) */
        pthread_mutex_unlock(&s->lock);
        return e;
    }
    s->port = port;
    s->nlisten = n;
    for (i = 0; i < n; i++) {
        atomic_fetch_add(&s->refs, 1);
        weir_waitgroup_add(s->wg, 1);
        weir_spawn_opts so = {
            .name = "http-accept", .pin = 1, .loop = rt ? weir_rt_loop(rt, i % threads) : NULL};
        s->acceptors[i] = weir_task_spawn(accept_main, &s->acc[i], &so);
        if (!s->acceptors[i]) {
            e = -errno;
            weir_waitgroup_done(s->wg);
            atomic_fetch_sub(&s->refs, 1);
            for (int j = i; j < n; j++) /* the ones no accept loop owns */
                close(s->acc[j].lfd);
            s->nlisten = i;
            weir_http_server_stop(s, WEIR_FOREVER); /* the loops that run close theirs */
            return e;
        }
    }
    return 0;
}

/* Cancel connections: all of them, or those between requests. Under lock.
 * A connection with an open stream is woken instead: its reads are shut,
 * which ends a weir_http_res_stream_wait() at once (-ECANCELED), while its
 * writes still work, so the handler may end the stream properly. (The fd
 * stays open while the connection is on the list: it leaves the list,
 * under the lock, before it closes the fd.) */
static void cancel_conns(weir_http_server *s, int all)
{
    weir__list *n;
    weir__list_foreach (n, &s->conns) {
        conn *c = weir__container_of(n, conn, node);
        if (all || !c->busy)
            weir_task_cancel(c->task);
        else if (c->streaming)
            shutdown(c->fd, SHUT_RD);
    }
}

int weir_http_server_stop(weir_http_server *s, int64_t deadline)
{
    if (!s)
        return -EINVAL;
    if (!fiber_caller())
        return -EINVAL;
    pthread_mutex_lock(&s->lock);
    weir_task *self = weir_task_current();
    weir__list *n;
    weir__list_foreach (n, &s->conns) {
        if (weir__container_of(n, conn, node)->task == self) {
            /* a handler would wait for its own connection */
            pthread_mutex_unlock(&s->lock);
            return -EDEADLK;
        }
    }
    int first = s->started && !atomic_load(&s->stopping);
    atomic_store(&s->stopping, 1);
    if (first)
        cancel_conns(s, 0);
    pthread_mutex_unlock(&s->lock);
    if (first) {
        for (int i = 0; i < s->nlisten; i++) {
            weir_task_cancel(s->acceptors[i]);
            weir_task_detach(s->acceptors[i]);
            s->acceptors[i] = NULL;
        }
    }
    int r = weir_waitgroup_wait(s->wg, deadline);
    if (r == 0)
        return 0;
    pthread_mutex_lock(&s->lock);
    cancel_conns(s, 1);
    pthread_mutex_unlock(&s->lock);
    if (r == -ETIMEDOUT) /* cancelled connections end promptly */
        r = weir_waitgroup_wait(s->wg, WEIR_FOREVER) == 0 ? -ETIMEDOUT : -ECANCELED;
    return r;
}
