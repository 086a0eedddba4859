/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_http_server.c - the HTTP/1.1 server (weir/http.h): routes with
 * parameters and wildcards, 404/405/HEAD, keep-alive and pipelining, JSON,
 * bearer-token auth, static files and escapes out of their directory,
 * /metrics, request limits, the header/body/idle deadlines against slow
 * clients, the connection cap, handler failures, stop (graceful and
 * forced) and a two-thread runtime.
 *
 * Clients: curl (a real client, run as a child process and waited for on
 * the blocking pool so the loop keeps serving) and raw sockets sending
 * malformed, oversized and slow requests. CTest runs it under both I/O
 * backends; under ASan it also proves nothing leaks.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "test_rt.h"
#include "weir/http.h"
#include "weir/io.h"
#include "weir/metrics.h"
#include "weir/net.h"
#include "weir/rt.h"
#include "weir/sync.h"

extern char **environ;

static int64_t after_ms(int64_t ms)
{
    return weir_time_after_ms(ms);
}

/* ---- handlers ------------------------------------------------------------------------- */
static _Atomic int handler_runs;

static int h_hello(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req, (void)arg;
    handler_runs++;
    return weir_http_res_text(res, 200, "Hello, World!");
}

static int h_user(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    handler_runs++;
    const weir_http_str *id = weir_http_req_param(req, "id");
    const weir_http_str *post = weir_http_req_param(req, "post");
    json_t *v = json_pack("{s:s%,s:s%}", "id", id->p, id->len, "post", post ? post->p : "",
                          post ? post->len : 0);
    int e = weir_http_res_json(res, 200, v);
    json_decref(v);
    return e;
}

static int h_user_list(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req, (void)arg;
    return weir_http_res_text(res, 200, "users");
}

static int h_tail(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    const weir_http_str *t = weir_http_req_param(req, "*");
    return weir_http_res_send(res, 200, "text/plain", t->p, t->len);
}

/* Echo the body back, with a header saying how it came. */
static int h_echo(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    handler_runs++;
    CHECK_EQ(weir_http_res_header(res, "X-Method", "yes"), 0);
    char m[16];
    snprintf(m, sizeof(m), "%.*s", (int)req->method.len, req->method.p);
    CHECK_EQ(weir_http_res_header(res, "X-Echo-Method", m), 0);
    return weir_http_res_send(res, 200, "application/octet-stream", req->body, req->body_len);
}

/* JSON in, JSON out: {"a": n, "b": m} -> {"sum": n+m}. */
static int h_sum(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    char err[160];
    json_t *in = weir_http_req_json(req, err, sizeof(err));
    if (!in)
        return weir_http_res_error(res, 400, err);
    json_int_t a = 0, b = 0;
    if (json_unpack(in, "{s:I,s:I}", "a", &a, "b", &b) != 0) {
        json_decref(in);
        return weir_http_res_error(res, 422, "want {\"a\": int, \"b\": int}");
    }
    json_decref(in);
    json_t *out = json_pack("{s:I}", "sum", a + b);
    int e = weir_http_res_json(res, 200, out);
    json_decref(out);
    return e;
}

static int h_query(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    char v[64];
    ssize_t n = weir_http_req_query(req, "q", v, sizeof(v));
    if (n == -ENOENT)
        return weir_http_res_text(res, 200, "(none)");
    if (n < 0)
        return weir_http_res_error(res, 400, weir_strerror((int)n));
    return weir_http_res_text(res, 200, v);
}

static int h_fail(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req, (void)res, (void)arg;
    return -EIO;
}

static int h_silent(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req, (void)res, (void)arg;
    return 0;
}

static int h_twice(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req, (void)arg;
    CHECK_EQ(weir_http_res_header(res, "Bad Name", "x"), -EINVAL);
    CHECK_EQ(weir_http_res_header(res, "X-Ok", "a\r\nInjected: 1"), -EINVAL);
    CHECK_EQ(weir_http_res_header(res, "Content-Length", "5"), -EINVAL);
    CHECK_EQ(weir_http_res_send(res, 100, NULL, NULL, 0), -EINVAL);
    CHECK_EQ(weir_http_res_text(res, 200, "first"), 0);
    CHECK_EQ(weir_http_res_text(res, 200, "second"), -EALREADY);
    CHECK_EQ(weir_http_res_header(res, "X-Late", "x"), -EALREADY);
    return 0;
}

/* Sleeps arg milliseconds (a slow handler for the stop tests). */
static _Atomic int slow_started, slow_finished;
static int h_slow(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req;
    slow_started++;
    int r = weir_time_sleep((int64_t)(intptr_t)arg * WEIR_MSEC);
    if (r < 0)
        return r;
    slow_finished++;
    return weir_http_res_text(res, 200, "slept");
}

/* 64 KiB of a pattern: answers big enough to need several sends. */
static int h_big(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req;
    size_t n = (size_t)(intptr_t)arg;
    char *b = malloc(n);
    CHECK(b != NULL);
    for (size_t i = 0; i < n; i++)
        b[i] = (char)('a' + i % 26);
    int e = weir_http_res_send(res, 200, "text/plain", b, n);
    free(b);
    return e;
}

static int h_any(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req, (void)arg;
    handler_runs++;
    return weir_http_res_text(res, 200, "TOP-SECRET");
}

static int h_stop_self(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    int e = weir_http_server_stop(req->server, after_ms(100));
    char msg[32];
    snprintf(msg, sizeof(msg), "%d", e);
    return weir_http_res_text(res, 200, msg);
}

/* ---- a raw client --------------------------------------------------------------------- */
static ssize_t send_str(int fd, const char *s, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = weir_io_send(fd, s + done, n - done, MSG_NOSIGNAL, after_ms(5000));
        if (w < 0)
            return w;
        done += (size_t)w;
    }
    return (ssize_t)done;
}

static int connect_to(int port)
{
    int fd = weir_net_connect("127.0.0.1", port, after_ms(5000));
    CHECK_GE(fd, 0);
    return fd;
}

typedef struct reply {
    int status;
    int keep_alive;
    char body[8192];
    size_t body_len;
    char head[2048]; /* "name: value\n" lines */
} reply;

/* Read one response; 0, or the error that ended it (-ECONNRESET: closed). */
static int read_reply(int fd, weir_http_parser *p, char *buf, size_t cap, size_t *have, reply *out,
                      int head_only)
{
    memset(out, 0, sizeof(*out));
    if (head_only)
        weir_http_parser_no_body(p);
    for (;;) {
        weir_http_event ev;
        ssize_t n = weir_http_parse(p, buf, *have, &ev);
        if (n < 0)
            return (int)n;
        if (ev.kind == WEIR_HTTP_HEAD) {
            out->status = p->status;
            out->keep_alive = p->keep_alive;
            size_t o = 0;
            for (size_t i = 0; i < p->nheaders && o < sizeof(out->head) - 1; i++)
                o += (size_t)snprintf(out->head + o, sizeof(out->head) - o, "%.*s: %.*s\n",
                                      (int)p->headers[i].name.len, p->headers[i].name.p,
                                      (int)p->headers[i].value.len, p->headers[i].value.p);
        } else if (ev.kind == WEIR_HTTP_BODY) {
            size_t k = ev.len < sizeof(out->body) - 1 - out->body_len
                           ? ev.len
                           : sizeof(out->body) - 1 - out->body_len;
            memcpy(out->body + out->body_len, ev.data, k);
            out->body_len += k;
        }
        /* Drop what was consumed (after using the event's slice of it). */
        memmove(buf, buf + n, *have - (size_t)n);
        *have -= (size_t)n;
        if (ev.kind == WEIR_HTTP_DONE) {
            return 0;
        } else if (ev.kind == WEIR_HTTP_NEED_MORE) { /* everything consumed: have is 0 */
            ssize_t r = weir_io_recv(fd, buf + *have, cap - *have, 0, after_ms(5000));
            if (r < 0)
                return (int)r;
            if (r == 0) {
                int e = weir_http_parser_eof(p);
                return e == 1 ? 0 : -ECONNRESET;
            }
            *have += (size_t)r;
        }
    }
}

/* One request on a new connection; the reply, and whether the server then
 * closed (peer_closed: EOF within 2 s). */
static int exchange(int port, const char *req, size_t len, reply *out, int *peer_closed)
{
    int fd = connect_to(port);
    CHECK_EQ(send_str(fd, req, len), (ssize_t)len);
    weir_http_parser p;
    weir_http_parser_init(&p, WEIR_HTTP_RESPONSE, NULL);
    char buf[16384];
    size_t have = 0;
    int e = read_reply(fd, &p, buf, sizeof(buf), &have, out, strncmp(req, "HEAD ", 5) == 0);
    if (peer_closed) {
        char c;
        ssize_t r = weir_io_recv(fd, &c, 1, 0, after_ms(2000));
        *peer_closed = r == 0 || r == -ECONNRESET;
    }
    weir_http_parser_close(&p);
    weir_io_close(fd);
    return e;
}

static int get_status(int port, const char *req)
{
    reply r;
    CHECK_EQ(exchange(port, req, strlen(req), &r, NULL), 0);
    return r.status;
}

/* ---- curl ----------------------------------------------------------------------------- */
typedef struct curl_job {
    char *argv[40];
    int argc;
    char out[8192]; /* what curl wrote to stdout (-w and the body) */
    int status;     /* exit status */
} curl_job;

static intptr_t curl_run(void *arg)
{
    curl_job *j = arg;
    char path[] = "/tmp/weir-curl-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -errno;
    unlink(path);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 1);
    pid_t pid;
    int e = posix_spawnp(&pid, "curl", &fa, NULL, j->argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e) {
        close(fd);
        return -e;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    j->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    ssize_t n = pread(fd, j->out, sizeof(j->out) - 1, 0);
    j->out[n > 0 ? n : 0] = '\0';
    close(fd);
    return 0;
}

/* Run curl with the given arguments (NULL-terminated) on the blocking pool;
 * the loop keeps serving meanwhile. Returns curl's stdout. */
static curl_job *curl(const char *first, ...)
{
    static curl_job j;
    memset(&j, 0, sizeof(j));
    j.argv[j.argc++] = "curl";
    j.argv[j.argc++] = "-s";
    j.argv[j.argc++] = "-S";
    j.argv[j.argc++] = "--max-time";
    j.argv[j.argc++] = "20";
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && j.argc < 39; a = va_arg(ap, const char *))
        j.argv[j.argc++] = (char *)a;
    va_end(ap);
    j.argv[j.argc] = NULL;
    CHECK_EQ(weir_blocking_run(curl_run, &j, WEIR_FOREVER), 0);
    return &j;
}

static int have_curl(void)
{
    return system("curl --version >/dev/null 2>&1") == 0;
}

/* ---- a server for the tests ------------------------------------------------------------- */
static weir_http_server *make_server(const weir_http_server_opts *o)
{
    weir_http_server *s = weir_http_server_new(o);
    CHECK(s != NULL);
    CHECK_EQ(weir_http_route(s, "GET", "/hello", h_hello, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/users", h_user_list, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/users/:id", h_user, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/users/:id/posts/:post", h_user, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/files/*", h_tail, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "POST", "/echo", h_echo, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "PUT", "/echo", h_echo, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "POST", "/sum", h_sum, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/query", h_query, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/fail", h_fail, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/silent", h_silent, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/twice", h_twice, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/slow", h_slow, (void *)(intptr_t)300, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/health", h_hello, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/big", h_big, (void *)(intptr_t)(64 << 10), 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/huge", h_big, (void *)(intptr_t)(8 << 20), 0), 0);
    CHECK_EQ(weir_http_route(s, NULL, "/any", h_any, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/stop-self", h_stop_self, NULL, 0), 0);
    CHECK_EQ(weir_http_server_start(s), 0);
    CHECK_GT(weir_http_server_port(s), 0);
    return s;
}

static void finish(weir_http_server *s)
{
    CHECK_EQ(weir_http_server_stop(s, after_ms(5000)), 0);
    weir_http_server_stats st;
    weir_http_server_stats_get(s, &st);
    CHECK_EQ(st.open, 0);
    weir_http_server_free(s);
}

/* ---- routes --------------------------------------------------------------------------- */
static intptr_t routes_main(void *arg)
{
    (void)arg;
    weir_http_server *s = make_server(NULL);
    int port = weir_http_server_port(s);
    reply r;

    const char *q = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_EQ(r.status, 200);
    CHECK_STR(r.body, "Hello, World!");
    CHECK(strstr(r.head, "Content-Type: text/plain; charset=utf-8\n") != NULL);
    CHECK(strstr(r.head, "Date: ") != NULL);
    CHECK(r.keep_alive);

    q = "GET /users/42 HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_EQ(r.status, 200);
    CHECK_STR(r.body, "{\"id\":\"42\",\"post\":\"\"}");
    CHECK(strstr(r.head, "Content-Type: application/json\n") != NULL);

    q = "GET /users/7/posts/abc%20d HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_STR(r.body, "{\"id\":\"7\",\"post\":\"abc%20d\"}");

    q = "GET /users HTTP/1.1\r\nHost: x\r\n\r\n"; /* a literal beats nothing */
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_STR(r.body, "users");

    q = "GET /files/a/b/c.txt?x=1 HTTP/1.1\r\nHost: x\r\n\r\n"; /* wildcard, query cut */
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_STR(r.body, "a/b/c.txt");
    q = "GET /files HTTP/1.1\r\nHost: x\r\n\r\n"; /* empty tail */
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_EQ(r.status, 200);
    CHECK_EQ(r.body_len, 0);
    q = "GET http://example.com/files/abs HTTP/1.1\r\nHost: x\r\n\r\n"; /* absolute-form */
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_STR(r.body, "abs");

    /* Misses. */
    CHECK_EQ(get_status(port, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"), 404);
    CHECK_EQ(get_status(port, "GET /users/ HTTP/1.1\r\nHost: x\r\n\r\n"), 404);
    CHECK_EQ(get_status(port, "GET /users/1/posts HTTP/1.1\r\nHost: x\r\n\r\n"), 404);
    CHECK_EQ(get_status(port, "GET /hello/ HTTP/1.1\r\nHost: x\r\n\r\n"), 404);
    CHECK_EQ(get_status(port, "GET hello HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
    q = "DELETE /echo HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_EQ(r.status, 405);
    CHECK(strstr(r.head, "Allow: POST, PUT\n") != NULL);
    CHECK(strstr(r.body, "\"status\":405") != NULL);

    /* HEAD is served by GET, without the body but with its length. */
    q = "HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_EQ(r.status, 200);
    CHECK(strstr(r.head, "Content-Length: 13\n") != NULL);
    CHECK_EQ(r.body_len, 0);

    /* OPTIONS: 204 with what the path allows. */
    q = "OPTIONS /echo HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_EQ(r.status, 204);
    CHECK(strstr(r.head, "Allow: POST, PUT\n") != NULL);
    CHECK_EQ(get_status(port, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"), 204);

    /* Query decoding. */
    q = "GET /query?a=1&q=hello+w%6Frld%21 HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_STR(r.body, "hello world!");
    q = "GET /query?q=%zz HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_EQ(r.status, 400);
    q = "GET /query HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_STR(r.body, "(none)");

    /* Handlers that fail, say nothing, or misuse the response. */
    q = "GET /fail HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_EQ(r.status, 500);
    CHECK(strstr(r.body, "handler failed") != NULL);
    q = "GET /silent HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_EQ(r.status, 500);
    CHECK(strstr(r.body, "no answer") != NULL);
    q = "GET /twice HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_STR(r.body, "first");
    CHECK(strstr(r.head, "X-Late") == NULL);

    /* JSON in and out. */
    q = "POST /sum HTTP/1.1\r\nHost: x\r\nContent-Length: 14\r\n\r\n{\"a\":2,\"b\":40}";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_STR(r.body, "{\"sum\":42}");
    q = "POST /sum HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n{\"a\"";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_EQ(r.status, 400);
    CHECK(strstr(r.body, "not JSON") != NULL);

    /* JSON nested deeper than the bound is refused, not parsed (the parser
     * recurses per level on the connection's stack). */
    {
        static char deep[4200];
        int o = snprintf(deep, sizeof(deep),
                         "POST /sum HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n");
        memset(deep + o, '[', 1000);
        memset(deep + o + 1000, ']', 1000);
        CHECK_EQ(exchange(port, deep, (size_t)o + 2000, &r, NULL), 0);
        CHECK_EQ(r.status, 400);
        CHECK(strstr(r.body, "nested deeper than 64") != NULL);
    }
    /* Absolute-form: the authority ends at '/' or '?'. */
    q = "GET http://h?x=/files/a HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_EQ(r.status, 404); /* path "/", not "/files/a" */
    /* A refused request with Content-Length: 0 keeps the connection. */
    int closed = 0;
    q = "POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, &closed), 0);
    CHECK_EQ(r.status, 404);
    CHECK(!closed);
    /* A handler stopping its own server would wait for itself. */
    q = "GET /stop-self HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_EQ(atoi(r.body), -EDEADLK);

    /* Routes cannot change once started; bad patterns are refused. */
    CHECK_EQ(weir_http_route(s, "GET", "/late", h_hello, NULL, 0), -EBUSY);
    finish(s);

    weir_http_server *b = weir_http_server_new(NULL);
    CHECK_EQ(weir_http_route(b, "GET", "nope", h_hello, NULL, 0), -EINVAL);
    CHECK_EQ(weir_http_route(b, "GET", "/a/*/b", h_hello, NULL, 0), -EINVAL);
    CHECK_EQ(weir_http_route(b, "GET", "/a/:", h_hello, NULL, 0), -EINVAL);
    CHECK_EQ(weir_http_route(b, "GET", "/a/b*", h_hello, NULL, 0), -EINVAL);
    CHECK_EQ(weir_http_route(b, "G ET", "/a", h_hello, NULL, 0), -EINVAL);
    CHECK_EQ(weir_http_route(b, "GET", "/a", NULL, NULL, 0), -EINVAL);
    CHECK_EQ(weir_http_route(b, "GET", "/:a/:b/:c/:d/:e/:f/:g/:h/:i/:j/:k/:l/:m/:n/:o/:p/:q",
                             h_hello, NULL, 0),
             -EINVAL);
    CHECK_EQ(weir_http_route_static(b, "/s", "/tmp", 0), -EINVAL);
    /* No flag opts a route out of the token (there is none to give). */
    CHECK_EQ(weir_http_route(b, "GET", "/a", h_hello, NULL, 1), -EINVAL);
    CHECK_EQ(weir_http_route(b, "GET", "/a", h_hello, NULL, WEIR_HTTP_STATIC_SPA), -EINVAL);
    CHECK_EQ(weir_http_route_static(b, "/s/*", "/tmp", 1), -EINVAL);
    CHECK_EQ(weir_http_route_metrics(b, "/m", NULL, 1), -EINVAL);
    CHECK_EQ(weir_http_route_static(b, "/s/*", "/nonexistent-dir-weir", 0), -ENOENT);
    CHECK_EQ(weir_http_server_port(b), -ENOTCONN);
    CHECK_EQ(weir_http_server_stop(b, after_ms(10)), 0); /* stopped before started: */
    CHECK_EQ(weir_http_server_start(b), -ESHUTDOWN);     /* cannot start any more */
    weir_http_server_free(b);
    errno = 0;
    CHECK(weir_http_server_new(&(weir_http_server_opts){.port = 70000}) == NULL);
    CHECK_EQ(errno, EINVAL);
    return 0;
}

TEST(routes_params_and_misses)
{
    test_run_main(routes_main, NULL);
}

static intptr_t pct_main(void *arg)
{
    (void)arg;
    char out[16];
    CHECK_EQ(weir_http_pct_decode("a%20b", 5, out, sizeof(out), 0), 3);
    CHECK_STR(out, "a b");
    CHECK_EQ(weir_http_pct_decode("a+b", 3, out, sizeof(out), 0), 3);
    CHECK_STR(out, "a+b");
    CHECK_EQ(weir_http_pct_decode("a+b", 3, out, sizeof(out), 1), 3);
    CHECK_STR(out, "a b");
    CHECK_EQ(weir_http_pct_decode("%4", 2, out, sizeof(out), 0), -EBADMSG);
    CHECK_EQ(weir_http_pct_decode("%g0", 3, out, sizeof(out), 0), -EBADMSG);
    CHECK_EQ(weir_http_pct_decode("a%00", 4, out, sizeof(out), 0), -EBADMSG);
    CHECK_EQ(weir_http_pct_decode("abcd", 4, out, 4, 0), -ENOSPC);
    CHECK_EQ(weir_http_pct_decode("abc", 3, out, 4, 0), 3);
    CHECK_EQ(weir_http_pct_decode("", 0, out, 1, 0), 0);
    return 0;
}

TEST(percent_decoding)
{
    test_run_main(pct_main, NULL);
}

/* ---- keep-alive and pipelining ----------------------------------------------------------- */
static intptr_t keepalive_main(void *arg)
{
    (void)arg;
    weir_http_server *s = make_server(NULL);
    int port = weir_http_server_port(s);
    int fd = connect_to(port);
    weir_http_parser p;
    weir_http_parser_init(&p, WEIR_HTTP_RESPONSE, NULL);
    char buf[16384];
    size_t have = 0;
    reply r;
    /* Sequential requests on one connection. */
    for (int i = 0; i < 20; i++) {
        const char *q = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
        CHECK_EQ(send_str(fd, q, strlen(q)), (ssize_t)strlen(q));
        CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
        CHECK_EQ(r.status, 200);
    }
    /* Three pipelined in one write, one of them with a chunked body. */
    const char *three = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
                        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\nTrailer: t\r\n\r\n"
                        "GET /users/9 HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(send_str(fd, three, strlen(three)), (ssize_t)strlen(three));
    CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
    CHECK_STR(r.body, "Hello, World!");
    CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
    CHECK_STR(r.body, "abcdefg");
    CHECK(strstr(r.head, "X-Echo-Method: POST\n") != NULL);
    CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
    CHECK_STR(r.body, "{\"id\":\"9\",\"post\":\"\"}");
    /* "Connection: close" is honoured: answered, then closed. */
    const char *last = "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    CHECK_EQ(send_str(fd, last, strlen(last)), (ssize_t)strlen(last));
    CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
    CHECK(!r.keep_alive);
    CHECK(strstr(r.head, "Connection: close\n") != NULL);
    char c;
    CHECK_EQ(weir_io_recv(fd, &c, 1, 0, after_ms(2000)), 0);
    weir_http_parser_close(&p);
    weir_io_close(fd);

    /* A burst of pipelined requests for big answers: all come back, in
     * order (the server flushes as answers pile up instead of buffering
     * them all). */
    fd = connect_to(port);
    weir_http_parser_init(&p, WEIR_HTTP_RESPONSE, NULL);
    have = 0;
    {
        static char burst[64 * 32];
        size_t o = 0;
        for (int i = 0; i < 64; i++)
            o += (size_t)snprintf(burst + o, sizeof(burst) - o, "%s",
                                  i % 8 == 7 ? "GET /users/1 HTTP/1.1\r\nHost: x\r\n\r\n"
                                             : "GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
        CHECK_EQ(send_str(fd, burst, o), (ssize_t)o);
        for (int i = 0; i < 64; i++) {
            CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
            CHECK_EQ(r.status, 200);
            if (i % 8 == 7)
                CHECK_STR(r.body, "{\"id\":\"1\",\"post\":\"\"}");
            else
                CHECK(strstr(r.head, "Content-Length: 65536\n") != NULL);
        }
    }
    /* 100-continue: never ahead of earlier answers, and not sent when the
     * body is already here. */
    const char *cont = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
                       "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                       "Content-Length: 5\r\n\r\nhello";
    CHECK_EQ(send_str(fd, cont, strlen(cont)), (ssize_t)strlen(cont));
    CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
    CHECK_STR(r.body, "Hello, World!");
    CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
    CHECK_EQ(r.status, 200);
    CHECK_STR(r.body, "hello");
    /* A 100 when the client waits for it: then the final answer. */
    cont = "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
    CHECK_EQ(send_str(fd, cont, strlen(cont)), (ssize_t)strlen(cont));
    CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
    CHECK_EQ(r.status, 100);
    CHECK_EQ(send_str(fd, "abc", 3), 3);
    CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
    CHECK_STR(r.body, "abc");
    /* A malformed request after a HEAD gets its error body. */
    const char *hm = "HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\nBAD\r\n\r\n";
    CHECK_EQ(send_str(fd, hm, strlen(hm)), (ssize_t)strlen(hm));
    CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 1), 0);
    CHECK_EQ(r.body_len, 0);
    CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
    CHECK_EQ(r.status, 400);
    CHECK(strstr(r.body, "\"status\":400") != NULL);
    weir_http_parser_close(&p);
    weir_io_close(fd);

    /* HTTP/1.0: closes unless asked to keep alive. */
    reply r10;
    int closed = 0;
    const char *q10 = "GET /hello HTTP/1.0\r\n\r\n";
    CHECK_EQ(exchange(port, q10, strlen(q10), &r10, &closed), 0);
    CHECK_EQ(r10.status, 200);
    CHECK(closed);
    q10 = "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    CHECK_EQ(exchange(port, q10, strlen(q10), &r10, &closed), 0);
    CHECK(strstr(r10.head, "Connection: keep-alive\n") != NULL);
    CHECK(!closed);

    weir_http_server_stats st;
    weir_http_server_stats_get(s, &st);
    CHECK_EQ(st.accepted, 4);
    CHECK_EQ(st.requests, 26 + 64 + 2 + 1 + 2);
    finish(s);
    return 0;
}

TEST(keepalive_and_pipelining)
{
    test_run_main(keepalive_main, NULL);
}

/* ---- malformed, oversized and slow requests ------------------------------------------------ */
static void expect_refused(int port, const char *req, size_t len, int status)
{
    reply r;
    int closed = 0;
    CHECK_EQ(exchange(port, req, len, &r, &closed), 0);
    if (r.status != status)
        fprintf(stderr, "request %.40s...: status %d, want %d\n", req, r.status, status);
    CHECK_EQ(r.status, status);
    CHECK(closed);
    CHECK(strstr(r.head, "Connection: close\n") != NULL);
    char want[32];
    snprintf(want, sizeof(want), "\"status\":%d", status);
    CHECK(strstr(r.body, want) != NULL);
}

static intptr_t malformed_main(void *arg)
{
    (void)arg;
    weir_http_server_opts o = {
        .limits = {.max_body = 1024, .max_header_bytes = 4096, .max_start_line = 2048},
        .header_timeout_ms = 300,
        .body_timeout_ms = 300,
        .idle_timeout_ms = 400};
    weir_http_server *s = make_server(&o);
    int port = weir_http_server_port(s);
    int runs = handler_runs;

    const char *q = "GARBAGE\r\n\r\n";
    expect_refused(port, q, strlen(q), 400);
    q = "GET / HTTP/2.0\r\nHost: x\r\n\r\n";
    expect_refused(port, q, strlen(q), 505);
    q = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n";
    expect_refused(port, q, strlen(q), 501);
    q = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
    expect_refused(port, q, strlen(q), 400); /* smuggling shape */
    q = "GET /hello HTTP/1.1\r\n\r\n";
    expect_refused(port, q, strlen(q), 400); /* no Host in 1.1 */
    q = "GET /hello HTTP/1.1\nHost: x\n\n";
    expect_refused(port, q, strlen(q), 400); /* bare LF */
    CHECK_EQ(get_status(port, "GET /hello HTTP/1.1\r\nHost: x\r\nExpect: magic\r\n\r\n"), 417);

    /* A body over max_body is refused from its Content-Length, unread. */
    q = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n";
    expect_refused(port, q, strlen(q), 413);
    /* ... and a chunked one when it grows past the cap. */
    static char big[4096];
    int n = snprintf(big, sizeof(big),
                     "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "400\r\n%01024d\r\n1\r\nx\r\n0\r\n\r\n",
                     0);
    expect_refused(port, big, (size_t)n, 413);
    /* A URI over the start-line cap, a header block over its cap. */
    static char uri[10000];
    n = snprintf(uri, sizeof(uri), "GET /%03000d HTTP/1.1\r\nHost: x\r\n\r\n", 0);
    expect_refused(port, uri, (size_t)n, 414);
    static char hdr[8192];
    n = snprintf(hdr, sizeof(hdr), "GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: %05000d\r\n\r\n", 0);
    expect_refused(port, hdr, (size_t)n, 431);
    CHECK_EQ(handler_runs, runs); /* no handler saw any of these */

    /* Slow head: 408 after header_timeout, then closed. */
    int fd = connect_to(port);
    const char *part = "GET /hello HTTP/1.1\r\nHost: x\r\n";
    CHECK_EQ(send_str(fd, part, strlen(part)), (ssize_t)strlen(part));
    int64_t t0 = weir_time_now();
    weir_http_parser p;
    weir_http_parser_init(&p, WEIR_HTTP_RESPONSE, NULL);
    char buf[4096];
    size_t have = 0;
    reply r;
    CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
    CHECK_EQ(r.status, 408);
    int64_t took = weir_time_now() - t0;
    CHECK_GE(took, 250 * WEIR_MSEC);
    CHECK_LT(took, 3000 * WEIR_MSEC);
    weir_http_parser_close(&p);
    weir_io_close(fd);

    /* Trickling bytes does not extend the head deadline. */
    fd = connect_to(port);
    t0 = weir_time_now();
    int got408 = 0;
    for (int i = 0; i < 40; i++) {
        if (send_str(fd, "X", 1) < 0)
            break;
        char c[512];
        ssize_t rr = weir_io_recv(fd, c, sizeof(c), 0, after_ms(50));
        if (rr > 0) {
            got408 = strstr(c, " 408 ") != NULL;
            break;
        }
        if (rr == 0)
            break;
    }
    CHECK(got408);
    CHECK_LT(weir_time_now() - t0, 1500 * WEIR_MSEC);
    weir_io_close(fd);

    /* Slow body: 408. */
    fd = connect_to(port);
    q = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc";
    CHECK_EQ(send_str(fd, q, strlen(q)), (ssize_t)strlen(q));
    weir_http_parser_init(&p, WEIR_HTTP_RESPONSE, NULL);
    have = 0;
    CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
    CHECK_EQ(r.status, 408);
    weir_http_parser_close(&p);
    weir_io_close(fd);

    /* Idle keep-alive connection: closed quietly after idle_timeout. */
    fd = connect_to(port);
    t0 = weir_time_now();
    char c;
    CHECK_EQ(weir_io_recv(fd, &c, 1, 0, after_ms(3000)), 0);
    CHECK_GE(weir_time_now() - t0, 350 * WEIR_MSEC);
    weir_io_close(fd);

    /* A stray CRLF after a request is not the start of a slow head: the
     * connection idles and closes quietly (no 408). */
    fd = connect_to(port);
    q = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi\r\n";
    CHECK_EQ(send_str(fd, q, strlen(q)), (ssize_t)strlen(q));
    weir_http_parser_init(&p, WEIR_HTTP_RESPONSE, NULL);
    have = 0;
    CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
    CHECK_STR(r.body, "hi");
    {
        char rest[256];
        ssize_t got = weir_io_recv(fd, rest, sizeof(rest), 0, after_ms(3000));
        CHECK_EQ(got, 0); /* EOF, no 408 */
    }
    weir_http_parser_close(&p);
    weir_io_close(fd);

    /* A client that vanishes mid-request costs nothing. */
    fd = connect_to(port);
    q = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc";
    CHECK_EQ(send_str(fd, q, strlen(q)), (ssize_t)strlen(q));
    weir_io_close(fd);

    weir_http_server_stats st;
    weir_http_server_stats_get(s, &st);
    CHECK_GE(st.timeouts, 3);
    CHECK_GE(st.errors, 9);
    finish(s);
    return 0;
}

TEST(malformed_oversized_and_slow)
{
    test_run_main(malformed_main, NULL);
}

/* ---- auth ----------------------------------------------------------------------------- */
/* "<request line> HTTP/1.1" with the extra header lines, on its own
 * connection closed by the server: the whole answer, byte for byte, minus
 * the Date field (the one part that may differ between two answers). */
static void raw_no_date(int port, const char *line, const char *extra, char *out, size_t cap)
{
    char req[512];
    int n = snprintf(req, sizeof(req), "%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s\r\n",
                     line, extra);
    CHECK(n > 0 && (size_t)n < sizeof(req));
    int fd = connect_to(port);
    CHECK_EQ(send_str(fd, req, (size_t)n), n);
    size_t have = 0;
    for (;;) {
        CHECK_LT(have, cap - 1);
        ssize_t r = weir_io_recv(fd, out + have, cap - 1 - have, 0, after_ms(5000));
        CHECK_GE(r, 0);
        if (r == 0)
            break;
        have += (size_t)r;
    }
    weir_io_close(fd);
    out[have] = '\0';
    char *d = strstr(out, "\r\nDate: ");
    if (d) {
        char *e = strstr(d + 2, "\r\n");
        CHECK(e != NULL);
        memmove(d, e, strlen(e) + 1);
    }
}

/* GET /hello with the given Authorization value(s) ("" none), its reply. */
static void get_auth(int port, const char *const *values, size_t n, reply *r)
{
    size_t len = 64;
    for (size_t i = 0; i < n; i++)
        len += strlen(values[i]) + 20;
    char *q = malloc(len);
    CHECK(q != NULL);
    size_t o = (size_t)snprintf(q, len, "GET /hello HTTP/1.1\r\nHost: x\r\n");
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(q + o, len - o, "Authorization: %s\r\n", values[i]);
    o += (size_t)snprintf(q + o, len - o, "\r\n");
    CHECK_EQ(exchange(port, q, o, r, NULL), 0);
    free(q);
}

/* The server's token is "s3cret-token". */
static void auth_edges(int port)
{
    int runs = handler_runs;
    reply r;
    /* No field: 401 saying so, with the challenge and no error code. */
    get_auth(port, NULL, 0, &r);
    CHECK_EQ(r.status, 401);
    CHECK(strstr(r.head, "WWW-Authenticate: Bearer realm=\"weir\"\n") != NULL);
    CHECK(strstr(r.head, "Content-Type: application/json") != NULL);
    CHECK(strstr(r.body, "missing bearer token") != NULL);
    CHECK(strstr(r.body, "\"status\":401") != NULL || strstr(r.body, "\"status\": 401") != NULL);
    /* A wrong one: said to be wrong, neither it nor the token echoed. */
    const char *wrong[] = {"Bearer n0t-the-0ne"};
    get_auth(port, wrong, 1, &r);
    CHECK_EQ(r.status, 401);
    CHECK(strstr(r.head, "error=\"invalid_token\"") != NULL);
    CHECK(strstr(r.body, "wrong bearer token") != NULL);
    CHECK(strstr(r.body, "n0t-the-0ne") == NULL && strstr(r.body, "s3cret") == NULL);
    CHECK(strstr(r.head, "s3cret") == NULL);
    /* Other schemes, and shapes that are not "Bearer <token>". */
    static const char *const shapes[] = {
        "Basic czNjcmV0LXRva2Vu",
        "Basic s3cret-token",
        "Token s3cret-token",
        "s3cret-token",
        "Bearer",
        "Bearer ",
        "Bearers3cret-token",
        "Bearer s3cret-toke",
        "Bearer s3cret-tokeN",
        "Bearer\ts3cret-token",
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        get_auth(port, &shapes[i], 1, &r);
        CHECK_EQ(r.status, 401);
        CHECK(strstr(r.head, "WWW-Authenticate: Bearer") != NULL);
    }
    /* Two fields, even both right: which one counts is ambiguous. */
    const char *two[] = {"Bearer s3cret-token", "Bearer s3cret-token"};
    get_auth(port, two, 2, &r);
    CHECK_EQ(r.status, 401);
    CHECK(strstr(r.body, "more than one") != NULL);
    const char *two_b[] = {"Bearer wrong", "Bearer s3cret-token"};
    get_auth(port, two_b, 2, &r);
    CHECK_EQ(r.status, 401);
    /* Over the bound: 401 without a comparison, even when the token is
     * there after padding; far over it, the parser's 431. No crash either
     * way, and no handler. */
    size_t big = WEIR_HTTP_MAX_AUTH_FIELD + 100;
    char *v = malloc(big + 32);
    CHECK(v != NULL);
    memcpy(v, "Bearer ", 7);
    memset(v + 7, ' ', big);
    strcpy(v + 7 + big, "s3cret-token");
    const char *padded[] = {v};
    get_auth(port, padded, 1, &r);
    CHECK_EQ(r.status, 401);
    memset(v + 7, 'x', big);
    v[7 + big] = '\0';
    get_auth(port, padded, 1, &r);
    CHECK_EQ(r.status, 401);
    free(v);
    v = malloc(WEIR_HTTP_MAX_HEADER_LINE + 64);
    CHECK(v != NULL);
    memcpy(v, "Bearer ", 7);
    memset(v + 7, 'x', WEIR_HTTP_MAX_HEADER_LINE);
    v[7 + WEIR_HTTP_MAX_HEADER_LINE] = '\0';
    const char *huge[] = {v};
    get_auth(port, huge, 1, &r);
    CHECK_EQ(r.status, 431);
    free(v);
    CHECK_EQ(handler_runs, runs);
    /* A malformed target without the token is still a 401: the token is
     * asked for before the target is looked at. */
    CHECK_EQ(get_status(port, "GET nopath HTTP/1.1\r\nHost: x\r\n\r\n"), 401);
    /* Right, and the handler runs (once per request). */
    const char *right[] = {"Bearer s3cret-token"};
    get_auth(port, right, 1, &r);
    CHECK_EQ(r.status, 200);
    CHECK_STR(r.body, "Hello, World!");
    CHECK_EQ(handler_runs, runs + 1);
}

static intptr_t auth_main(void *arg)
{
    (void)arg;
    setenv("WEIR_TEST_TOKEN", "s3cret-token", 1);
    weir_http_server *s = make_server(&(weir_http_server_opts){.auth_env = "WEIR_TEST_TOKEN"});
    unsetenv("WEIR_TEST_TOKEN"); /* read once, at creation */
    int port = weir_http_server_port(s);
    int runs = handler_runs;
    reply r;
    const char *q = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_EQ(r.status, 401);
    CHECK(strstr(r.head, "WWW-Authenticate: Bearer") != NULL);
    CHECK_EQ(
        get_status(port, "GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n\r\n"),
        401);
    CHECK_EQ(get_status(port, "GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                              "s3cret-token-and-more\r\n\r\n"),
             401);
    CHECK_EQ(get_status(port, "GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Basic "
                              "s3cret-token\r\n\r\n"),
             401);
    CHECK_EQ(get_status(port, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"), 401); /* no probing */
    CHECK_EQ(handler_runs, runs);
    /* A refused request with a body is answered unread and closed. */
    q = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
    expect_refused(port, q, strlen(q), 401);
    CHECK_EQ(handler_runs, runs);
    CHECK_EQ(get_status(port, "GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                              "s3cret-token\r\n\r\n"),
             200);
    CHECK_EQ(get_status(port, "GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: bearer  "
                              "s3cret-token\r\n\r\n"),
             200);
    /* No route is exempt: a health check needs the token like the rest. */
    CHECK_EQ(get_status(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), 401);
    CHECK_EQ(get_status(port, "GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                              "s3cret-token\r\n\r\n"),
             200);
    /* With the token, OPTIONS says what the path allows. */
    reply ro;
    q = "OPTIONS /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret-token\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &ro, NULL), 0);
    CHECK_EQ(ro.status, 204);
    CHECK(strstr(ro.head, "Allow: GET, HEAD\n") != NULL);
    CHECK_EQ(get_status(port, "OPTIONS * HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                              "s3cret-token\r\n\r\n"),
             204);
    /* Without it (or with a wrong one), an existing path and an unknown one
     * get the same bytes, whatever the method: no probing. */
    static const char *const probes[][2] = {
        {"OPTIONS /hello", "OPTIONS /nope"}, {"OPTIONS /users/7", "OPTIONS /users/7/nope"},
        {"OPTIONS *", "OPTIONS /nope"},      {"HEAD /hello", "HEAD /nope"},
        {"POST /hello", "POST /nope"},       {"DELETE /echo", "DELETE /nope"},
        {"FROB /hello", "FROB /nope"},       {"GET /hello", "GET /nope"},
    };
    static const char *const creds[] = {
        "",
        "Authorization: Bearer wrong\r\n",
        /* a CORS preflight's shape */
        "Origin: http://elsewhere.example\r\nAccess-Control-Request-Method: GET\r\n",
    };
    for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++)
        for (size_t k = 0; k < sizeof(creds) / sizeof(creds[0]); k++) {
            char a[2048], b[2048];
            raw_no_date(port, probes[i][0], creds[k], a, sizeof(a));
            raw_no_date(port, probes[i][1], creds[k], b, sizeof(b));
            if (strcmp(a, b) != 0)
                fprintf(stderr, "%s vs %s (%s):\n%s\n----\n%s\n", probes[i][0], probes[i][1],
                        creds[k], a, b);
            CHECK_STR(a, b);
            CHECK(strncmp(a, "HTTP/1.1 401 ", 13) == 0);
            CHECK(strstr(a, "WWW-Authenticate: Bearer") != NULL);
            CHECK(strstr(a, "Allow:") == NULL);
        }
    /* An OPTIONS that would reach a handler needs the token too. */
    int before = handler_runs;
    CHECK_EQ(get_status(port, "OPTIONS /any HTTP/1.1\r\nHost: x\r\n\r\n"), 401);
    CHECK_EQ(handler_runs, before);
    CHECK_EQ(get_status(port, "OPTIONS /any HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                              "s3cret-token\r\n\r\n"),
             200);
    auth_edges(port);
    finish(s);

    /* No token configured: nothing changes, an Authorization field included
     * (it is the handler's to read). */
    unsetenv("WEIR_AUTH_TOKEN");
    CHECK(weir_http_server_auth_problem(NULL) == NULL);
    s = make_server(NULL);
    port = weir_http_server_port(s);
    CHECK_EQ(get_status(port, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"), 200);
    CHECK_EQ(get_status(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), 200);
    CHECK_EQ(
        get_status(port, "GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Basic eDp5\r\n\r\n"),
        200);
    CHECK_EQ(get_status(port, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"), 404);
    finish(s);

    /* WEIR_AUTH_TOKEN is the default variable; the explicit token wins over
     * it, and auth_env "" does not look. */
    setenv("WEIR_AUTH_TOKEN", "from-env", 1);
    s = make_server(NULL);
    port = weir_http_server_port(s);
    CHECK_EQ(get_status(port, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"), 401);
    CHECK_EQ(get_status(port, "GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                              "from-env\r\n\r\n"),
             200);
    finish(s);
    s = make_server(&(weir_http_server_opts){.auth_token = "t"});
    port = weir_http_server_port(s);
    CHECK_EQ(get_status(port, "GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                              "from-env\r\n\r\n"),
             401);
    CHECK_EQ(get_status(port, "GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n\r\n"),
             200);
    finish(s);
    s = make_server(&(weir_http_server_opts){.auth_env = ""});
    CHECK_EQ(get_status(weir_http_server_port(s), "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"), 200);
    finish(s);

    /* A token that cannot work is a configuration error, not "auth off":
     * set but empty, too long, or holding a byte a header cannot carry as
     * it is. The reason never quotes the token. */
    setenv("WEIR_AUTH_TOKEN", "", 1);
    const char *why = weir_http_server_auth_problem(NULL);
    CHECK(why != NULL && strstr(why, "empty") != NULL);
    errno = 0;
    CHECK(weir_http_server_new(NULL) == NULL);
    CHECK_EQ(errno, EINVAL);
    unsetenv("WEIR_AUTH_TOKEN");
    char long_tok[WEIR_HTTP_MAX_TOKEN + 2];
    memset(long_tok, 'k', sizeof(long_tok) - 1);
    long_tok[sizeof(long_tok) - 1] = '\0';
    static const char *const bad[] = {"",        "with space",        "new\nline",    "tab\t",
                                      "del\x7f", "\xc3\xa9t\xc3\xa9", "trailing-cr\r"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]) + 1; i++) {
        const char *t = i < sizeof(bad) / sizeof(bad[0]) ? bad[i] : long_tok;
        weir_http_server_opts o = {.auth_token = t};
        why = weir_http_server_auth_problem(&o);
        CHECK(why != NULL);
        CHECK(!*t || strstr(why, t) == NULL);
        errno = 0;
        CHECK(weir_http_server_new(&o) == NULL);
        CHECK_EQ(errno, EINVAL);
    }
    CHECK(strstr(weir_http_server_auth_problem(&(weir_http_server_opts){.auth_token = long_tok}),
                 "1024") != NULL);
    /* The longest token there may be works, and its field is in bounds. */
    long_tok[WEIR_HTTP_MAX_TOKEN] = '\0';
    s = make_server(&(weir_http_server_opts){.auth_token = long_tok});
    char *q2 = malloc(WEIR_HTTP_MAX_TOKEN + 128);
    CHECK(q2 != NULL);
    snprintf(q2, WEIR_HTTP_MAX_TOKEN + 128,
             "GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", long_tok);
    CHECK_EQ(get_status(weir_http_server_port(s), q2), 200);
    free(q2);
    finish(s);
    return 0;
}

TEST(bearer_token)
{
    test_run_main(auth_main, NULL);
}

/* ---- static files ------------------------------------------------------------------------ */
static char static_root[64];

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    CHECK_LT(snprintf(path, sizeof(path), "%s/%s", dir, name), (int)sizeof(path));
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void make_tree(void)
{
    strcpy(static_root, "/tmp/weir-static-XXXXXX");
    CHECK(mkdtemp(static_root) != NULL);
    char p[256];
    snprintf(p, sizeof(p), "%s/www", static_root);
    CHECK_EQ(mkdir(p, 0755), 0);
    snprintf(p, sizeof(p), "%s/www/sub", static_root);
    CHECK_EQ(mkdir(p, 0755), 0);
    snprintf(p, sizeof(p), "%s/www/app", static_root);
    CHECK_EQ(mkdir(p, 0755), 0);
    write_file(static_root, "secret.txt", "top secret");
    snprintf(p, sizeof(p), "%s/www", static_root);
    write_file(p, "index.html", "<h1>home</h1>");
    write_file(p, "app.js", "console.log(1)");
    write_file(p, "sub/page.css", "body{}");
    write_file(p, "sub/index.html", "sub index");
    write_file(p, "my file.txt", "spaced");
    write_file(p, ".env", "SECRET=top secret");
    write_file(p, "sub/.hidden", "top secret");
    /* A big file, streamed in several chunks. */
    enum { BIG = 300000 };
    char *big = malloc(BIG);
    CHECK(big != NULL);
    for (size_t i = 0; i < BIG - 1; i++)
        big[i] = (char)('a' + i % 26);
    big[BIG - 1] = '\0';
    write_file(p, "big.txt", big);
    free(big);
    /* Links: one out of the root, one inside it. */
    char target[256], link[256];
    snprintf(target, sizeof(target), "%s/secret.txt", static_root);
    snprintf(link, sizeof(link), "%s/www/out.txt", static_root);
    CHECK_EQ(symlink(target, link), 0);
    snprintf(link, sizeof(link), "%s/www/in.js", static_root);
    CHECK_EQ(symlink("app.js", link), 0);
    snprintf(link, sizeof(link), "%s/www/up", static_root);
    CHECK_EQ(symlink("..", link), 0);
}

static void rm_tree(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", static_root);
    CHECK_EQ(system(cmd), 0);
}

static intptr_t static_main(void *arg)
{
    (void)arg;
    make_tree();
    char www[128];
    snprintf(www, sizeof(www), "%s/www", static_root);
    weir_http_server *s = weir_http_server_new(NULL);
    CHECK_EQ(weir_http_route(s, "GET", "/api/ping", h_hello, NULL, 0), 0);
    CHECK_EQ(weir_http_route_static(s, "/assets/*", www, 0), 0);
    CHECK_EQ(weir_http_route_static(s, "/*", www, WEIR_HTTP_STATIC_SPA), 0);
    CHECK_EQ(weir_http_server_start(s), 0);
    int port = weir_http_server_port(s);
    reply r;
    struct {
        const char *path;
        int status;
        const char *body, *type;
    } cases[] = {
        {"/assets/app.js", 200, "console.log(1)", "text/javascript"},
        {"/assets/sub/page.css", 200, "body{}", "text/css"},
        {"/assets/sub/", 200, "sub index", "text/html"},
        {"/assets/sub", 200, "sub index", "text/html"},
        {"/assets/", 200, "<h1>home</h1>", "text/html"},
        {"/assets/my%20file.txt", 200, "spaced", "text/plain"},
        {"/assets/in.js", 200, "console.log(1)", "text/javascript"},
        {"/assets/nope.js", 404, NULL, NULL},
        {"/assets/nope", 404, NULL, NULL},              /* no SPA on this mount */
        {"/assets/../secret.txt", 404, NULL, NULL},     /* lexical */
        {"/assets/%2e%2e/secret.txt", 404, NULL, NULL}, /* encoded */
        {"/assets/sub/..%2f..%2fsecret.txt", 404, NULL, NULL},
        {"/assets/out.txt", 404, NULL, NULL},       /* symlink out */
        {"/assets/up/secret.txt", 404, NULL, NULL}, /* symlinked dir out */
        {"/assets/a%00b", 400, NULL, NULL},
        {"/assets/.env", 404, NULL, NULL}, /* hidden files */
        {"/assets/sub/.hidden", 404, NULL, NULL},
        {"/assets/%zz", 400, NULL, NULL},
        {"/api/ping", 200, "Hello, World!", NULL},               /* earlier route wins */
        {"/deep/link/route", 200, "<h1>home</h1>", "text/html"}, /* SPA fallback */
        {"/missing.png", 404, NULL, NULL},                       /* asset with extension */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char q[256];
        int n = snprintf(q, sizeof(q), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", cases[i].path);
        CHECK_EQ(exchange(port, q, (size_t)n, &r, NULL), 0);
        if (r.status != cases[i].status)
            fprintf(stderr, "%s: %d, want %d\n", cases[i].path, r.status, cases[i].status);
        CHECK_EQ(r.status, cases[i].status);
        if (cases[i].body)
            CHECK_STR(r.body, cases[i].body);
        if (cases[i].type) {
            char want[64];
            snprintf(want, sizeof(want), "Content-Type: %s", cases[i].type);
            CHECK(strstr(r.head, want) != NULL);
        }
        CHECK(strstr(r.body, "top secret") == NULL);
    }
    /* HEAD: the length, no body. */
    const char *q = "HEAD /assets/app.js HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK(strstr(r.head, "Content-Length: 14\n") != NULL);
    CHECK(strstr(r.head, "Last-Modified: ") != NULL);
    CHECK_EQ(r.body_len, 0);
    CHECK_EQ(
        get_status(port, "POST /assets/app.js HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"),
        405);

    /* A big file, streamed, then the connection goes on. */
    int fd = connect_to(port);
    q = "GET /assets/big.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /assets/app.js HTTP/1.1\r\nHost: "
        "x\r\n\r\n";
    CHECK_EQ(send_str(fd, q, strlen(q)), (ssize_t)strlen(q));
    weir_http_parser p;
    weir_http_parser_init(&p, WEIR_HTTP_RESPONSE, NULL);
    char buf[16384];
    size_t have = 0, total = 0;
    int ok = 1;
    for (int done = 0; !done;) {
        weir_http_event ev;
        ssize_t n = weir_http_parse(&p, buf, have, &ev);
        CHECK_GE(n, 0);
        if (ev.kind == WEIR_HTTP_BODY) {
            for (size_t i = 0; i < ev.len; i++)
                ok &= ev.data[i] == (uint8_t)('a' + (total + i) % 26);
            total += ev.len;
        }
        done = ev.kind == WEIR_HTTP_DONE;
        memmove(buf, buf + n, have - (size_t)n);
        have -= (size_t)n;
        if (ev.kind == WEIR_HTTP_NEED_MORE) {
            ssize_t got = weir_io_recv(fd, buf, sizeof(buf), 0, after_ms(5000));
            CHECK_GT(got, 0);
            have = (size_t)got;
        }
    }
    CHECK_EQ(total, 299999);
    CHECK(ok);
    CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
    CHECK_STR(r.body, "console.log(1)");
    weir_http_parser_close(&p);
    weir_io_close(fd);

    finish(s);
    rm_tree();
    return 0;
}

TEST(static_files_and_escapes)
{
    test_run_main(static_main, NULL);
}

/* ---- metrics -------------------------------------------------------------------------- */
static intptr_t metrics_main(void *arg)
{
    (void)arg;
    weir_metrics *m = weir_metrics_new(NULL);
    weir_http_server *s = weir_http_server_new(&(weir_http_server_opts){.metrics = m});
    CHECK_EQ(weir_http_route(s, "GET", "/hello", h_hello, NULL, 0), 0);
    CHECK_EQ(weir_http_route_metrics(s, "/metrics", m, 0), 0);
    CHECK_EQ(weir_http_server_start(s), 0);
    int port = weir_http_server_port(s);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(get_status(port, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"), 200);
    CHECK_EQ(get_status(port, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"), 404);
    CHECK_EQ(get_status(port, "BREW /hello HTTP/1.1\r\nHost: x\r\n\r\n"), 405);
    reply r;
    const char *q = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(exchange(port, q, strlen(q), &r, NULL), 0);
    CHECK_EQ(r.status, 200);
    CHECK(strstr(r.head, "Content-Type: text/plain; version=0.0.4") != NULL);
    CHECK(strstr(r.body, "weir_http_requests_total{method=\"GET\"} 5") != NULL); /* this one too */
    CHECK(strstr(r.body, "weir_http_requests_total{method=\"other\"} 1") != NULL);
    CHECK(strstr(r.body, "weir_http_responses_total{code=\"2xx\"} 3") != NULL);
    CHECK(strstr(r.body, "weir_http_responses_total{code=\"4xx\"} 2") != NULL);
    CHECK(strstr(r.body, "weir_http_request_duration_seconds_count 5") != NULL);
    CHECK(strstr(r.body, "weir_http_connections 1") != NULL);
    finish(s);
    weir_metrics_free(m);
    return 0;
}

TEST(metrics_endpoint)
{
    test_run_main(metrics_main, NULL);
}

/* ---- connection cap, stop ---------------------------------------------------------------- */
static intptr_t cap_main(void *arg)
{
    (void)arg;
    weir_http_server *s = make_server(&(weir_http_server_opts){.max_conns = 2});
    int port = weir_http_server_port(s);
    int a = connect_to(port), b = connect_to(port);
    /* Make sure both are being served before the third arrives. */
    reply r;
    weir_http_parser p;
    char buf[4096];
    size_t have;
    const char *q = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
    for (int i = 0; i < 2; i++) {
        int fd = i ? b : a;
        CHECK_EQ(send_str(fd, q, strlen(q)), (ssize_t)strlen(q));
        weir_http_parser_init(&p, WEIR_HTTP_RESPONSE, NULL);
        have = 0;
        CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
        weir_http_parser_close(&p);
    }
    int closed = 0;
    CHECK_EQ(exchange(port, q, strlen(q), &r, &closed), 0);
    CHECK_EQ(r.status, 503);
    CHECK(closed);
    weir_io_close(a);
    weir_io_close(b);
    weir_http_server_stats st;
    weir_http_server_stats_get(s, &st);
    CHECK_EQ(st.rejected, 1);
    finish(s);
    return 0;
}

TEST(connection_cap)
{
    test_run_main(cap_main, NULL);
}

typedef struct slow_client {
    int port;
    reply r;
    int err;
} slow_client;

static intptr_t slow_client_main(void *arg)
{
    slow_client *sc = arg;
    const char *q = "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n";
    sc->err = exchange(sc->port, q, strlen(q), &sc->r, NULL);
    return 0;
}

typedef struct big_reader {
    int fd, err;
    size_t body;
} big_reader;

static intptr_t big_reader_main(void *arg)
{
    big_reader *br = arg;
    weir_http_parser p;
    weir_http_parser_init(&p, WEIR_HTTP_RESPONSE, NULL);
    static char buf[65536];
    size_t have = 0;
    for (;;) {
        weir_http_event ev;
        ssize_t n = weir_http_parse(&p, buf, have, &ev);
        if (n < 0) {
            br->err = (int)n;
            break;
        }
        if (ev.kind == WEIR_HTTP_BODY)
            br->body += ev.len;
        memmove(buf, buf + n, have - (size_t)n);
        have -= (size_t)n;
        if (ev.kind == WEIR_HTTP_DONE)
            break;
        if (ev.kind == WEIR_HTTP_NEED_MORE) {
            ssize_t got = weir_io_recv(br->fd, buf, sizeof(buf), 0, after_ms(5000));
            if (got <= 0) {
                br->err = got ? (int)got : -ECONNRESET;
                break;
            }
            have = (size_t)got;
        }
    }
    weir_http_parser_close(&p);
    return 0;
}

static intptr_t stop_main(void *arg)
{
    (void)arg;
    /* Graceful: an idle connection is closed, a request in progress ends. */
    weir_http_server *s = make_server(NULL);
    int port = weir_http_server_port(s);
    int idle = connect_to(port);
    slow_client sc = {.port = port};
    slow_started = slow_finished = 0;
    weir_task *t = test_spawn(slow_client_main, &sc);
    while (!slow_started)
        weir_time_sleep(WEIR_MSEC);
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_http_server_stop(s, after_ms(5000)), 0);
    CHECK_GE(weir_time_now() - t0, 150 * WEIR_MSEC); /* waited for the handler */
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    CHECK_EQ(sc.err, 0);
    CHECK_EQ(sc.r.status, 200);
    CHECK(strstr(sc.r.head, "Connection: close\n") != NULL);
    char c;
    CHECK_EQ(weir_io_recv(idle, &c, 1, 0, after_ms(2000)), 0);
    weir_io_close(idle);
    CHECK_LT(weir_net_connect("127.0.0.1", port, after_ms(1000)), 0); /* not listening */
    weir_http_server_free(s);

    /* Graceful, with an 8 MiB answer stuck in the socket (the client reads
     * only after stop began): the whole answer still arrives. */
    s = make_server(NULL);
    {
        int fd = connect_to(weir_http_server_port(s));
        const char *q = "GET /huge HTTP/1.1\r\nHost: x\r\n\r\n";
        CHECK_EQ(send_str(fd, q, strlen(q)), (ssize_t)strlen(q));
        weir_time_sleep(100 * WEIR_MSEC); /* the server is blocked writing */
        big_reader br = {.fd = fd};
        weir_task *rt = test_spawn(big_reader_main, &br);
        CHECK_EQ(weir_http_server_stop(s, after_ms(10000)), 0);
        CHECK_EQ(weir_task_join(rt, NULL, WEIR_FOREVER), 0);
        CHECK_EQ(br.err, 0);
        CHECK_EQ(br.body, 8 << 20);
        weir_io_close(fd);
    }
    weir_http_server_free(s);

    /* Forced: the deadline passes, the handler is cancelled. */
    s = make_server(NULL);
    sc = (slow_client){.port = weir_http_server_port(s)};
    slow_started = slow_finished = 0;
    t = test_spawn(slow_client_main, &sc);
    while (!slow_started)
        weir_time_sleep(WEIR_MSEC);
    CHECK_EQ(weir_http_server_stop(s, after_ms(50)), -ETIMEDOUT);
    CHECK_EQ(slow_finished, 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    CHECK_NE(sc.err, 0); /* the connection was dropped mid-request */
    weir_http_server_stats st;
    weir_http_server_stats_get(s, &st);
    CHECK_EQ(st.open, 0);
    weir_http_server_free(s);

    /* Stop and free of a server never started. */
    s = weir_http_server_new(NULL);
    CHECK_EQ(weir_http_server_stop(s, after_ms(10)), 0);
    weir_http_server_free(s);
    return 0;
}

TEST(stop_graceful_and_forced)
{
    test_run_main(stop_main, NULL);
}

/* ---- curl ----------------------------------------------------------------------------- */
static intptr_t curl_main(void *arg)
{
    (void)arg;
    make_tree();
    char www[128];
    snprintf(www, sizeof(www), "%s/www", static_root);
    weir_http_server *s = weir_http_server_new(&(weir_http_server_opts){.auth_token = "tok"});
    CHECK_EQ(weir_http_route(s, "GET", "/hello", h_hello, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/users/:id", h_user, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "POST", "/echo", h_echo, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "PUT", "/echo", h_echo, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "POST", "/sum", h_sum, NULL, 0), 0);
    CHECK_EQ(weir_http_route_static(s, "/static/*", www, 0), 0);
    CHECK_EQ(weir_http_server_start(s), 0);
    char base[64];
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", weir_http_server_port(s));
    char u1[128], u2[128], u3[128];
    const char *auth = "Authorization: Bearer tok";

    /* Two URLs in one run: curl reuses the connection. */
    snprintf(u1, sizeof(u1), "%s/hello", base);
    snprintf(u2, sizeof(u2), "%s/users/5", base);
    curl_job *j = curl("-H", auth, "-w", "|%{http_code} %{num_connects}\n", u1, u2, NULL);
    CHECK_EQ(j->status, 0);
    CHECK_STR(j->out, "Hello, World!|200 1\n{\"id\":\"5\",\"post\":\"\"}|200 0\n");

    /* Without the token. */
    j = curl("-w", "|%{http_code}", u1, NULL);
    CHECK(strstr(j->out, "|401") != NULL);
    CHECK(strstr(j->out, "missing bearer token") != NULL);
    j = curl("-H", "Authorization: Bearer nope", "-w", "|%{http_code}", u1, NULL);
    CHECK(strstr(j->out, "|401") != NULL);
    CHECK(strstr(j->out, "wrong bearer token") != NULL);

    /* JSON POST, chunked PUT upload, a 100-continue body. */
    snprintf(u3, sizeof(u3), "%s/sum", base);
    j = curl("-H", auth, "-H", "Content-Type: application/json", "-d", "{\"a\":1,\"b\":2}", u3,
             NULL);
    CHECK_STR(j->out, "{\"sum\":3}");
    snprintf(u3, sizeof(u3), "%s/echo", base);
    j = curl("-H", auth, "-X", "PUT", "-H", "Transfer-Encoding: chunked", "--data-binary",
             "chunked upload body", u3, NULL);
    CHECK_STR(j->out, "chunked upload body");
    j = curl("-H", auth, "-H", "Expect: 100-continue", "--data-binary", "continued", u3, NULL);
    CHECK_STR(j->out, "continued");

    /* Static files, and curl's --path-as-is trying to climb out. */
    snprintf(u3, sizeof(u3), "%s/static/sub/page.css", base);
    j = curl("-H", auth, u3, NULL);
    CHECK_STR(j->out, "body{}");
    snprintf(u3, sizeof(u3), "%s/static/../../secret.txt", base);
    j = curl("-H", auth, "--path-as-is", "-w", "|%{http_code}", u3, NULL);
    CHECK(strstr(j->out, "|404") != NULL);
    CHECK(strstr(j->out, "secret") == NULL);
    snprintf(u3, sizeof(u3), "%s/static/out.txt", base);
    j = curl("-H", auth, "-w", "|%{http_code}", u3, NULL);
    CHECK(strstr(j->out, "|404") != NULL);

    /* HEAD with curl -I. */
    j = curl("-H", auth, "-I", u1, NULL);
    CHECK(strstr(j->out, "HTTP/1.1 200 OK") != NULL);
    CHECK(strstr(j->out, "Content-Length: 13") != NULL);
    finish(s);
    rm_tree();
    return 0;
}

TEST(driven_by_curl)
{
    if (!have_curl()) {
        printf("skipped: curl not installed\n");
        return;
    }
    test_run_main(curl_main, NULL);
}

/* ---- streamed answers ------------------------------------------------------------------- */
/* GET /sse?mode=...: "steps" writes event i once the test let it (sse_go >
 * i), three of them; "wait" waits long and records what the wait returned
 * (then writes "bye"); "flood" writes until a write fails; "ticks" writes
 * three events 20 ms apart. */
static _Atomic int sse_go, sse_rc, sse_done;
static _Atomic int64_t sse_t;

static int h_sse(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    char mode[16];
    CHECK_GE(weir_http_req_query(req, "mode", mode, sizeof(mode)), 0);
    CHECK_EQ(weir_http_res_header(res, "X-Stream", "yes"), 0);
    CHECK_EQ(weir_http_res_stream_write(res, "x", 1), -EINVAL); /* not started */
    int e = weir_http_res_stream_start(res, 200, "text/event-stream");
    CHECK_EQ(e, 0);
    CHECK_EQ(weir_http_res_stream_start(res, 200, "text/event-stream"), -EALREADY);
    CHECK_EQ(weir_http_res_text(res, 200, "no"), -EALREADY);
    char ev[64];
    if (strcmp(mode, "steps") == 0 || strcmp(mode, "ticks") == 0) {
        int ticks = mode[0] == 't';
        for (int i = 0; i < 3; i++) {
            while (!ticks && sse_go <= i)
                CHECK_EQ(weir_http_res_stream_wait(res, after_ms(1)), 0);
            if (ticks)
                CHECK_EQ(weir_http_res_stream_wait(res, after_ms(20)), 0);
            int n = snprintf(ev, sizeof(ev), "data: event %d\n\n", i);
            CHECK_EQ(weir_http_res_stream_write(res, ev, (size_t)n), 0);
        }
        if (ticks)
            CHECK_EQ(weir_http_res_stream_end(res), 0);
        sse_done = 1;
        return 0; /* "steps": the end is written for it */
    }
    if (strcmp(mode, "wait") == 0) {
        e = weir_http_res_stream_wait(res, after_ms(30000));
        sse_t = weir_time_now();
        sse_rc = e;
        if (e == -ECANCELED)
            CHECK_EQ(weir_http_res_stream_write(res, "data: bye\n\n", 11), 0);
        sse_done = 1;
        return 0;
    }
    if (strcmp(mode, "flood") == 0) {
        static char block[64 << 10];
        memset(block, 'x', sizeof(block));
        while ((e = weir_http_res_stream_write(res, block, sizeof(block))) == 0)
            ;
        CHECK_EQ(weir_http_res_stream_write(res, "x", 1), e); /* sticky */
        sse_rc = e;
        sse_done = 1;
        return e; /* an error after the start: the connection just closes */
    }
    return -EINVAL;
}

static void sse_reset(void)
{
    sse_go = sse_rc = sse_done = 0;
    sse_t = 0;
}

/* Read exactly n bytes (5 s at most). */
static void read_exact(int fd, char *buf, size_t n)
{
    size_t got = 0;
    int64_t deadline = after_ms(5000);
    while (got < n) {
        ssize_t r = weir_io_recv(fd, buf + got, n - got, 0, deadline);
        CHECK_GT(r, 0);
        got += (size_t)r;
    }
    buf[n] = '\0';
}

/* Read up to the end of the head; returns it (NUL-terminated). */
static void read_head(int fd, char *buf, size_t cap)
{
    size_t got = 0;
    int64_t deadline = after_ms(5000);
    while (got < 4 || memcmp(buf + got - 4, "\r\n\r\n", 4) != 0) {
        CHECK_LT(got, cap - 1);
        ssize_t r = weir_io_recv(fd, buf + got, 1, 0, deadline);
        CHECK_EQ(r, 1);
        got++;
    }
    buf[got] = '\0';
}

/* Read until EOF (5 s at most); the bytes read. */
static size_t read_to_eof(int fd, char *buf, size_t cap)
{
    size_t got = 0;
    int64_t deadline = after_ms(5000);
    for (;;) {
        CHECK_LT(got, cap - 1);
        ssize_t r = weir_io_recv(fd, buf + got, cap - 1 - got, 0, deadline);
        CHECK_GE(r, 0);
        if (r == 0)
            break;
        got += (size_t)r;
    }
    buf[got] = '\0';
    return got;
}

/* Poll (1 ms steps) until *flag is set or ms pass. */
static int wait_flag(_Atomic int *flag, int64_t ms)
{
    int64_t deadline = after_ms(ms);
    while (!*flag && weir_time_now() < deadline)
        weir_time_sleep(WEIR_MSEC);
    return *flag;
}

static weir_http_server *sse_server(const weir_http_server_opts *o)
{
    weir_http_server *s = weir_http_server_new(o);
    CHECK(s != NULL);
    CHECK_EQ(weir_http_route(s, "GET", "/sse", h_sse, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/hello", h_hello, NULL, 0), 0);
    CHECK_EQ(weir_http_server_start(s), 0);
    return s;
}

static int sse_open(int port, const char *mode, int minor, char *head, size_t cap)
{
    int fd = connect_to(port);
    char q[128];
    int n = snprintf(q, sizeof(q), "GET /sse?mode=%s HTTP/1.%d\r\nHost: x\r\n\r\n", mode, minor);
    CHECK_EQ(send_str(fd, q, (size_t)n), n);
    read_head(fd, head, cap);
    return fd;
}

static intptr_t stream_events_main(void *arg)
{
    (void)arg;
    weir_http_server *s = sse_server(NULL);
    int port = weir_http_server_port(s);
    char head[1024], buf[256];
    sse_reset();
    int fd = sse_open(port, "steps", 1, head, sizeof(head));
    CHECK_HAS(head, "HTTP/1.1 200 OK\r\n");
    CHECK_HAS(head, "Content-Type: text/event-stream\r\n");
    CHECK_HAS(head, "Transfer-Encoding: chunked\r\n");
    CHECK_HAS(head, "Connection: close\r\n");
    CHECK_HAS(head, "X-Stream: yes\r\n");
    CHECK(strstr(head, "Content-Length") == NULL);
    /* One event per step, each its own chunk, and nothing before its step. */
    for (int i = 0; i < 3; i++) {
        char c;
        CHECK_EQ(weir_io_recv(fd, &c, 1, 0, after_ms(50)), -ETIMEDOUT); /* not yet written */
        sse_go = i + 1;
        char want[64];
        snprintf(want, sizeof(want), "f\r\ndata: event %d\n\n\r\n", i);
        read_exact(fd, buf, strlen(want));
        CHECK_STR(buf, want);
    }
    read_exact(fd, buf, 5);
    CHECK_STR(buf, "0\r\n\r\n"); /* written for the handler */
    CHECK_EQ(read_to_eof(fd, buf, sizeof(buf)), 0);
    weir_io_close(fd);
    CHECK(sse_done);

    /* HTTP/1.0: no chunks, the close ends the body. */
    sse_reset();
    sse_go = 3;
    fd = sse_open(port, "steps", 0, head, sizeof(head));
    CHECK_HAS(head, "HTTP/1.1 200 OK\r\n");
    CHECK_HAS(head, "Connection: close\r\n");
    CHECK(strstr(head, "Transfer-Encoding") == NULL);
    CHECK(strstr(head, "Content-Length") == NULL);
    read_to_eof(fd, buf, sizeof(buf));
    CHECK_STR(buf, "data: event 0\n\ndata: event 1\n\ndata: event 2\n\n");
    weir_io_close(fd);

    /* HEAD: the head only. */
    sse_reset();
    sse_go = 3;
    fd = connect_to(port);
    const char *hq = "HEAD /sse?mode=steps HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(send_str(fd, hq, strlen(hq)), (ssize_t)strlen(hq));
    read_head(fd, head, sizeof(head));
    CHECK_HAS(head, "Transfer-Encoding: chunked\r\n");
    CHECK_EQ(read_to_eof(fd, buf, sizeof(buf)), 0);
    weir_io_close(fd);

    weir_http_server_stats st;
    weir_http_server_stats_get(s, &st);
    CHECK_EQ(st.requests, 3); /* each stream once */
    finish(s);
    return 0;
}

TEST(stream_events_one_by_one)
{
    test_run_main(stream_events_main, NULL);
}

static intptr_t stream_client_close_main(void *arg)
{
    (void)arg;
    weir_http_server *s = sse_server(NULL);
    char head[1024];
    sse_reset();
    int fd = sse_open(weir_http_server_port(s), "wait", 1, head, sizeof(head));
    CHECK_EQ(send_str(fd, "ignored bytes", 13), 13); /* dropped by the wait */
    weir_time_sleep(20 * WEIR_MSEC);
    CHECK(!sse_done);
    int64_t t0 = weir_time_now();
    weir_io_close(fd);
    CHECK(wait_flag(&sse_done, 5000));
    CHECK_EQ(sse_rc, -ECONNRESET);
    CHECK_LT(sse_t - t0, 1000 * WEIR_MSEC); /* at once, not at the 30 s deadline */
    finish(s);
    return 0;
}

TEST(stream_client_close_ends_wait)
{
    test_run_main(stream_client_close_main, NULL);
}

static intptr_t stream_stop_main(void *arg)
{
    (void)arg;
    weir_http_server *s = sse_server(NULL);
    char head[1024], buf[256];
    sse_reset();
    int fd = sse_open(weir_http_server_port(s), "wait", 1, head, sizeof(head));
    int fd2 = sse_open(weir_http_server_port(s), "wait", 0, head, sizeof(head));
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_http_server_stop(s, after_ms(20000)), 0);
    CHECK_LT(weir_time_now() - t0, 2000 * WEIR_MSEC); /* well under the deadline */
    CHECK_EQ(sse_rc, -ECANCELED);
    /* The handler still wrote its last event, and the end followed. */
    read_to_eof(fd, buf, sizeof(buf));
    CHECK_STR(buf, "b\r\ndata: bye\n\n\r\n0\r\n\r\n");
    read_to_eof(fd2, buf, sizeof(buf));
    CHECK_STR(buf, "data: bye\n\n");
    weir_io_close(fd);
    weir_io_close(fd2);
    weir_http_server_free(s);
    return 0;
}

TEST(stream_stop_wakes_waits)
{
    test_run_main(stream_stop_main, NULL);
}

static intptr_t stream_stalled_main(void *arg)
{
    (void)arg;
    weir_http_server *s = sse_server(&(weir_http_server_opts){.write_timeout_ms = 200});
    int port = weir_http_server_port(s);
    sse_reset();
    int fd = connect_to(port);
    int small = 4096;
    CHECK_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
    const char *q = "GET /sse?mode=flood HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK_EQ(send_str(fd, q, strlen(q)), (ssize_t)strlen(q));
    /* Never read: the writes fill the socket, then one stalls. */
    CHECK(wait_flag(&sse_done, 10000));
    CHECK_EQ(sse_rc, -ETIMEDOUT);
    weir_io_close(fd);
    weir_http_server_stats st;
    weir_http_server_stats_get(s, &st);
    CHECK_GE(st.timeouts, 1);
    CHECK_EQ(get_status(port, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"), 200); /* still serving */
    finish(s);
    return 0;
}

TEST(stream_stalled_client_times_out)
{
    test_run_main(stream_stalled_main, NULL);
}

static intptr_t stream_curl_main(void *arg)
{
    (void)arg;
    weir_http_server *s = sse_server(NULL);
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/sse?mode=ticks", weir_http_server_port(s));
    sse_reset();
    curl_job *j = curl("-N", "-H", "Accept: text/event-stream", url, NULL);
    CHECK_EQ(j->status, 0);
    CHECK_STR(j->out, "data: event 0\n\ndata: event 1\n\ndata: event 2\n\n");
    finish(s);
    return 0;
}

TEST(stream_read_by_curl)
{
    if (!have_curl()) {
        printf("skipped: curl not installed\n");
        return;
    }
    test_run_main(stream_curl_main, NULL);
}

/* ---- per-route body caps ---------------------------------------------------------------- */
static int h_length(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    char n[32];
    snprintf(n, sizeof(n), "%zu", req->body_len);
    for (size_t i = 0; i < req->body_len; i++)
        if (req->body[i] != 'b')
            return weir_http_res_error(res, 400, "body corrupted");
    return weir_http_res_text(res, 200, n);
}

/* "POST path" with a body of n bytes 'b' (Content-Length or chunked). */
static char *post_of(const char *path, size_t n, int chunked, size_t *len)
{
    char *q = malloc(n + 256);
    int h = snprintf(q, 256, "POST %s HTTP/1.1\r\nHost: x\r\n", path);
    if (chunked)
        h += snprintf(q + h, 256 - (size_t)h, "Transfer-Encoding: chunked\r\n\r\n%zx\r\n", n);
    else
        h += snprintf(q + h, 256 - (size_t)h, "Content-Length: %zu\r\n\r\n", n);
    memset(q + h, 'b', n);
    size_t o = (size_t)h + n;
    if (chunked) {
        memcpy(q + o, "\r\n0\r\n\r\n", 7);
        o += 7;
    }
    *len = o;
    return q;
}

static int post_status(int port, const char *path, size_t n, int chunked, char *body)
{
    size_t len;
    char *q = post_of(path, n, chunked, &len);
    reply r;
    int e = exchange(port, q, len, &r, NULL);
    free(q);
    if (e == -ECONNRESET || e == -EPIPE)
        return -1;
    CHECK_EQ(e, 0);
    if (body)
        snprintf(body, 64, "%.63s", r.body);
    return r.status;
}

static intptr_t body_cap_main(void *arg)
{
    (void)arg;
    weir_http_server *s = weir_http_server_new(&(weir_http_server_opts){.limits.max_body = 1024});
    CHECK(s != NULL);
    CHECK_EQ(weir_http_route(s, "POST", "/small", h_length, NULL, 0), 0);
    CHECK_EQ(weir_http_route_max_body(s, "POST", "/upload", h_length, NULL, 0), -EINVAL);
    CHECK_EQ(weir_http_route_max_body(s, "POST", "/upload", h_length, NULL, 64 << 10), 0);
    CHECK_EQ(weir_http_route_max_body(s, "POST", "/tiny", h_length, NULL, 10), 0);
    CHECK_EQ(weir_http_server_start(s), 0);
    CHECK_EQ(weir_http_route_max_body(s, "POST", "/late", h_length, NULL, 10), -EBUSY);
    int port = weir_http_server_port(s);
    char body[64];

    /* The server's cap on an ordinary route, either framing. */
    CHECK_EQ(post_status(port, "/small", 1024, 0, body), 200);
    CHECK_STR(body, "1024");
    CHECK_EQ(post_status(port, "/small", 1025, 0, NULL), 413);
    CHECK_EQ(post_status(port, "/small", 1025, 1, NULL), 413);
    /* The route's larger cap, to its last byte and one past it. */
    CHECK_EQ(post_status(port, "/upload", 5000, 0, body), 200);
    CHECK_STR(body, "5000");
    CHECK_EQ(post_status(port, "/upload", 64 << 10, 1, body), 200);
    CHECK_STR(body, "65536");
    CHECK_EQ(post_status(port, "/upload", (64 << 10) + 1, 0, NULL), 413);
    CHECK_EQ(post_status(port, "/upload", (64 << 10) + 1, 1, NULL), 413);
    /* A smaller one. */
    CHECK_EQ(post_status(port, "/tiny", 10, 0, NULL), 200);
    CHECK_EQ(post_status(port, "/tiny", 11, 0, NULL), 413);
    /* No route: the large cap is no one's (404, the body unread). */
    CHECK_EQ(post_status(port, "/nope", 5000, 0, NULL), 404);

    /* One connection: the upload's cap does not stay for the next request. */
    {
        int fd = connect_to(port);
        weir_http_parser p;
        weir_http_parser_init(&p, WEIR_HTTP_RESPONSE, NULL);
        char buf[16384];
        size_t have = 0, len;
        reply r;
        char *q = post_of("/upload", 5000, 0, &len);
        CHECK_EQ(send_str(fd, q, len), (ssize_t)len);
        free(q);
        CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
        CHECK_EQ(r.status, 200);
        q = post_of("/small", 2000, 0, &len);
        send_str(fd, q, len);
        free(q);
        CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
        CHECK_EQ(r.status, 413);
        weir_http_parser_close(&p);
        weir_io_close(fd);
    }

    /* Expect: 100-continue: a body within the route's cap is invited, one
     * over it is refused from the head. */
    {
        int fd = connect_to(port);
        const char *h = "POST /upload HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                        "Content-Length: 3000\r\n\r\n";
        CHECK_EQ(send_str(fd, h, strlen(h)), (ssize_t)strlen(h));
        char got[64];
        read_exact(fd, got, 25);
        CHECK_STR(got, "HTTP/1.1 100 Continue\r\n\r\n");
        char *b = malloc(3000);
        memset(b, 'b', 3000);
        CHECK_EQ(send_str(fd, b, 3000), 3000);
        free(b);
        weir_http_parser p;
        weir_http_parser_init(&p, WEIR_HTTP_RESPONSE, NULL);
        char buf[4096];
        size_t have = 0;
        reply r;
        CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
        CHECK_EQ(r.status, 200);
        CHECK_STR(r.body, "3000");
        weir_http_parser_close(&p);
        weir_io_close(fd);

        fd = connect_to(port);
        h = "POST /upload HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            "Content-Length: 70000\r\n\r\n";
        CHECK_EQ(send_str(fd, h, strlen(h)), (ssize_t)strlen(h));
        weir_http_parser_init(&p, WEIR_HTTP_RESPONSE, NULL);
        have = 0;
        CHECK_EQ(read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0), 0);
        CHECK_EQ(r.status, 413); /* no 100 first */
        weir_http_parser_close(&p);
        weir_io_close(fd);
    }
    if (have_curl()) {
        char url[96];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d/upload", port);
        static char data[4000];
        memset(data, 'b', sizeof(data) - 1);
        curl_job *j = curl("-H", "Expect: 100-continue", "--data-binary", data, url, NULL);
        CHECK_STR(j->out, "3999");
    }
    weir_http_server_stats st;
    weir_http_server_stats_get(s, &st);
    CHECK_GE(st.errors, 7);
    finish(s);
    return 0;
}

TEST(route_body_caps)
{
    test_run_main(body_cap_main, NULL);
}

/* ---- browser authentication: the cookie and the access_token link ------------------------- */
/* GET target with the extra header lines; the reply. */
static void get_with(int port, const char *target, const char *extra, reply *r)
{
    size_t len = strlen(target) + strlen(extra) + 64;
    char *q = malloc(len);
    CHECK(q != NULL);
    int n = snprintf(q, len, "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", target, extra);
    CHECK_EQ(exchange(port, q, (size_t)n, r, NULL), 0);
    free(q);
}

static intptr_t browser_auth_main(void *arg)
{
    (void)arg;
    weir_http_server *s = make_server(&(weir_http_server_opts){.auth_token = "s3cret-token"});
    int port = weir_http_server_port(s);
    int runs = handler_runs;
    reply r;

    /* The cookie: missing, wrong, look-alike names, ambiguous, too long. */
    get_with(port, "/hello", "", &r);
    CHECK_EQ(r.status, 401);
    CHECK_HAS(r.body, "missing bearer token");
    get_with(port, "/hello", "Cookie: theme=dark\r\n", &r);
    CHECK_EQ(r.status, 401);
    CHECK_HAS(r.body, "missing bearer token");
    get_with(port, "/hello", "Cookie: weir_token=n0pe\r\n", &r);
    CHECK_EQ(r.status, 401);
    CHECK_HAS(r.body, "wrong weir_token cookie");
    CHECK_HAS(r.head, "error=\"invalid_token\"");
    CHECK(strstr(r.body, "n0pe") == NULL && strstr(r.body, "s3cret") == NULL);
    static const char *const bad[] = {
        "Cookie: weir_tokenx=s3cret-token\r\n",
        "Cookie: xweir_token=s3cret-token\r\n",
        "Cookie: weir_token=s3cret-toke\r\n",
        "Cookie: weir_token=s3cret-token2\r\n",
        "Cookie: weir_token\r\n",
        "Cookie: weir_token=s3cret-token; weir_token=s3cret-token\r\n",
        "Cookie: weir_token=s3cret-token\r\nCookie: a=1\r\n",
        "Cookie: a=s3cret-token\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        get_with(port, "/hello", bad[i], &r);
        CHECK_EQ(r.status, 401);
    }
    {
        size_t big = WEIR_HTTP_MAX_COOKIE_FIELD + 10;
        char *v = malloc(big + 64);
        int o = sprintf(v, "Cookie: weir_token=s3cret-token; pad=");
        memset(v + o, 'p', big);
        strcpy(v + o + big, "\r\n");
        get_with(port, "/hello", v, &r);
        CHECK_EQ(r.status, 401);
        CHECK_HAS(r.body, "Cookie field longer than 4096 bytes");
        free(v);
    }
    /* A wrong Authorization field decides, whatever the cookie says. */
    get_with(port, "/hello", "Authorization: Bearer wrong\r\nCookie: weir_token=s3cret-token\r\n",
             &r);
    CHECK_EQ(r.status, 401);
    CHECK_EQ(handler_runs, runs);
    /* Right: alone, among others, quoted. */
    static const char *const good[] = {
        "Cookie: weir_token=s3cret-token\r\n",
        "Cookie: a=1; weir_token=s3cret-token; b=2\r\n",
        "Cookie: a=1;weir_token=s3cret-token\r\n",
        "Cookie: weir_token=\"s3cret-token\"\r\n",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        get_with(port, "/hello", good[i], &r);
        CHECK_EQ(r.status, 200);
        CHECK_STR(r.body, "Hello, World!");
    }
    CHECK_EQ(handler_runs, runs + 4);

    /* The link: a valid access_token is a 303 to the same target without
     * it (every other parameter kept, in order), setting the cookie. */
    get_with(port, "/query?q=abc&access_token=s3cret-token&z=1", "", &r);
    CHECK_EQ(r.status, 303);
    CHECK_HAS(r.head, "Location: /query?q=abc&z=1\n");
    CHECK_HAS(r.head, "Set-Cookie: weir_token=s3cret-token; Path=/; HttpOnly; SameSite=Strict\n");
    CHECK_HAS(r.head, "Cache-Control: no-store\n");
    CHECK_EQ(r.body_len, 0);
    get_with(port, "/hello?access_token=s3cret%2Dtoken", "", &r); /* percent-encoded */
    CHECK_EQ(r.status, 303);
    CHECK_HAS(r.head, "Location: /hello\n");
    get_with(port, "/hello?access_token=s3cret-token&", "", &r);
    CHECK_HAS(r.head, "Location: /hello\n");
    get_with(port, "/users/7?a=1&access%5Ftoken=s3cret-token", "", &r); /* name decoded */
    CHECK_EQ(r.status, 303);
    CHECK_HAS(r.head, "Location: /users/7?a=1\n");
    CHECK_EQ(handler_runs, runs + 4); /* a redirect runs no handler */
    /* Following it with the cookie. */
    get_with(port, "/query?q=abc&z=1", "Cookie: weir_token=s3cret-token\r\n", &r);
    CHECK_EQ(r.status, 200);
    CHECK_STR(r.body, "abc");
    /* A wrong access_token is a 401, even beside a valid field or cookie. */
    get_with(port, "/hello?access_token=n0pe", "", &r);
    CHECK_EQ(r.status, 401);
    CHECK_HAS(r.body, "wrong access_token");
    CHECK_HAS(r.head, "error=\"invalid_token\"");
    CHECK(strstr(r.head, "Set-Cookie") == NULL);
    CHECK(strstr(r.body, "n0pe") == NULL && strstr(r.body, "s3cret") == NULL);
    get_with(port, "/hello?access_token=", "", &r);
    CHECK_EQ(r.status, 401);
    get_with(port, "/hello?access_token=%zz", "", &r);
    CHECK_EQ(r.status, 401);
    get_with(port, "/hello?access_token=n0pe", "Authorization: Bearer s3cret-token\r\n", &r);
    CHECK_EQ(r.status, 401);
    get_with(port, "/hello?access_token=s3cret-token&access_token=s3cret-token", "", &r);
    CHECK_EQ(r.status, 401);
    CHECK_HAS(r.body, "more than one access_token");
    /* Only a GET: another method with it in the query is not let in. */
    const char *post = "POST /echo?access_token=s3cret-token HTTP/1.1\r\nHost: x\r\n"
                       "Content-Length: 0\r\n\r\n";
    CHECK_EQ(get_status(port, post), 401);
    CHECK_EQ(handler_runs, runs + 4);

    if (have_curl()) {
        /* curl as a browser: follow the 303 with its cookie engine on. */
        char url[128];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d/hello?access_token=s3cret-token", port);
        curl_job *j = curl("-L", "-b", "", "-w", "|%{http_code} %{num_redirects}", url, NULL);
        CHECK_EQ(j->status, 0);
        CHECK_STR(j->out, "Hello, World!|200 1");
    }
    finish(s);

    /* A token no cookie can carry: its link is refused, saying why. */
    s = make_server(&(weir_http_server_opts){.auth_token = "semi;colon"});
    get_with(weir_http_server_port(s), "/hello?access_token=semi%3Bcolon", "", &r);
    CHECK_EQ(r.status, 401);
    CHECK_HAS(r.body, "cannot be carried in a cookie");
    finish(s);
    return 0;
}

TEST(browser_auth_cookie_and_link)
{
    test_run_main(browser_auth_main, NULL);
}

/* ---- a two-thread runtime --------------------------------------------------------------- */
typedef struct mt_client {
    int port, n, ok;
} mt_client;

static intptr_t mt_client_main(void *arg)
{
    mt_client *m = arg;
    int fd = connect_to(m->port);
    weir_http_parser p;
    weir_http_parser_init(&p, WEIR_HTTP_RESPONSE, NULL);
    char buf[4096];
    size_t have = 0;
    reply r;
    for (int i = 0; i < m->n; i++) {
        const char *q = i % 2 ? "GET /users/77 HTTP/1.1\r\nHost: x\r\n\r\n"
                              : "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi";
        if (send_str(fd, q, strlen(q)) < 0)
            break;
        if (read_reply(fd, &p, buf, sizeof(buf), &have, &r, 0) != 0)
            break;
        m->ok +=
            r.status == 200 && strcmp(r.body, i % 2 ? "{\"id\":\"77\",\"post\":\"\"}" : "hi") == 0;
    }
    weir_http_parser_close(&p);
    weir_io_close(fd);
    return 0;
}

static intptr_t mt_main(void *arg)
{
    (void)arg;
    weir_http_server *s = make_server(NULL);
    enum { CLIENTS = 16, N = 200 };
    mt_client cl[CLIENTS];
    weir_task *t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        cl[i] = (mt_client){.port = weir_http_server_port(s), .n = N};
        t[i] = test_spawn(mt_client_main, &cl[i]);
    }
    for (int i = 0; i < CLIENTS; i++) {
        CHECK_EQ(weir_task_join(t[i], NULL, WEIR_FOREVER), 0);
        CHECK_EQ(cl[i].ok, N);
    }
    weir_http_server_stats st;
    weir_http_server_stats_get(s, &st);
    CHECK_EQ(st.accepted, CLIENTS);
    CHECK_EQ(st.requests, CLIENTS * N);
    finish(s);
    return 0;
}

TEST(two_thread_runtime)
{
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = 2});
    CHECK(rt != NULL);
    weir_task *t =
        weir_task_spawn(mt_main, NULL, &(weir_spawn_opts){.rt = rt, .stack_size = 256 * 1024});
    CHECK(t != NULL);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    weir_rt_free(rt);
}

TEST_MAIN()
