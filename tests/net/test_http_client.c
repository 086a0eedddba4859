/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_http_client.c - the HTTP/1.1 client and its connection pools
 * (weir/http.h, "client"), against a real nginx started by the test
 * (tests/net/nginx.h) and a few raw weir servers for the misbehaviours
 * nginx will not show on demand (a body cut short, idle connections closed
 * at once, bytes sent after a response, a 408 on an idle connection, an
 * early 413, endless 100 Continue).
 *
 * The pool's counters (weir_http_client_stats_get) prove what happened on
 * the wire: connections opened, reused, waits, fast fails, stale retries.
 * Concurrency tests run on a one-thread loop and on a two-thread runtime.
 * Deadlines are generous except where a deadline is the point.
 *
 * When nginx or its echo module is missing every nginx test prints SKIP and
 * passes (scripts/deps.sh installs both).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nginx.h"
#include "test.h"
#include "test_rt.h"
#include "weir/http.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/rt.h"

#define LONG_MS 20000 /* deadline where the deadline is not what is tested */

static nginx_proc *ngx;

static int have_nginx(void)
{
    if (!ngx)
        ngx = nginx_start(NULL);
    if (!ngx)
        printf("    SKIP: nginx or its echo module is not installed\n");
    return ngx != NULL;
}

/* http://127.0.0.1:PORT + path into a static buffer per call site. */
static const char *url_of(char *buf, size_t cap, int port, const char *path)
{
    snprintf(buf, cap, "http://127.0.0.1:%d%s", port, path);
    return buf;
}
#define URL(path)       url_of((char[256]){0}, 256, ngx->port, path)
#define URL_SHORT(path) url_of((char[256]){0}, 256, ngx->port_short, path)

static weir_http_client_stats stats(weir_http_client *c)
{
    weir_http_client_stats st;
    CHECK_EQ(weir_http_client_stats_get(c, &st), 0);
    return st;
}

static int64_t deadline_ms(int64_t ms)
{
    return weir_time_after_ms(ms);
}

/* GET url, expecting success; the response is the caller's. */
static void get_ok(weir_http_client *c, const char *url, weir_http_client_resp *r)
{
    int rc = weir_http_get(c, url, deadline_ms(LONG_MS), r);
    if (rc != 0)
        fprintf(stderr, "GET %s: %s (%s)\n", url, weir_net_strerror(rc), r->error);
    CHECK_EQ(rc, 0);
}

/* Run fn(arg) as a fiber on a runtime of `threads` scheduler threads. */
static intptr_t run_on_rt(int threads, weir_task_fn fn, void *arg)
{
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = threads});
    CHECK(rt != NULL);
    weir_spawn_opts o = {.name = "main", .stack_size = 256 * 1024, .rt = rt};
    weir_task *t = weir_task_spawn(fn, arg, &o);
    CHECK(t != NULL);
    intptr_t v = -1;
    CHECK_EQ(weir_task_join(t, &v, weir_time_after_ms(120000)), 0);
    weir_rt_free(rt);
    return v;
}

/* ---- keep-alive and methods ----------------------------------------------------------- */
static intptr_t keepalive_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    for (int i = 0; i < 20; i++) {
        weir_http_client_resp r;
        get_ok(c, URL("/hello"), &r);
        CHECK_EQ(r.status, 200);
        CHECK_EQ(r.version_minor, 1);
        CHECK_EQ(r.body_len, 13);
        CHECK_STR(r.body, "Hello, World!");
        CHECK_STR(weir_http_client_resp_header(&r, "content-length"), "13");
        CHECK(strncmp(weir_http_client_resp_header(&r, "SERVER"), "nginx", 5) == 0);
        CHECK(weir_http_client_resp_header(&r, "x-absent") == NULL);
        CHECK_STR(r.error, "");
        weir_http_client_resp_free(&r);
        CHECK(r.body == NULL && r.headers == NULL);
    }
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.requests, 20);
    CHECK_EQ(st.opened, 1);
    CHECK_EQ(st.reused, 19);
    CHECK_EQ(st.open_now, 1);
    CHECK_EQ(st.idle_now, 1);
    CHECK_EQ(st.waits, 0);
    weir_http_client_free(c);
    return 0;
}

TEST(keepalive_reuses_one_connection)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(keepalive_main, NULL), 0);
}

static intptr_t methods_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    weir_http_client_resp r;

    /* POST and PUT with a Content-Length body, echoed back. */
    const char *methods[] = {"POST", "PUT"};
    for (int i = 0; i < 2; i++) {
        const char body[] = "weir body \x01\xff bytes";
        weir_http_client_req q = {.method = methods[i],
                                  .url = URL("/echo"),
                                  .body = body,
                                  .body_len = sizeof(body) - 1,
                                  .deadline = deadline_ms(LONG_MS)};
        CHECK_EQ(weir_http_client_do(c, &q, &r), 0);
        CHECK_EQ(r.status, 200);
        CHECK_EQ(r.body_len, sizeof(body) - 1);
        CHECK(memcmp(r.body, body, sizeof(body) - 1) == 0);
        weir_http_client_resp_free(&r);
    }
    /* The method arrives as sent. */
    const char *more[] = {"DELETE", "GET", "OPTIONS", "PATCH"};
    for (int i = 0; i < 4; i++) {
        weir_http_client_req q = {.method = more[i], .url = URL("/method")};
        CHECK_EQ(weir_http_client_do(c, &q, &r), 0);
        char want[32];
        snprintf(want, sizeof(want), "%s\n", more[i]);
        CHECK_STR(r.body, want);
        weir_http_client_resp_free(&r);
    }
    /* HEAD: Content-Length 13 but no body; the connection stays usable,
     * which it would not if the client had waited for 13 bytes. */
    weir_http_client_req h = {.method = "HEAD", .url = URL("/hello")};
    CHECK_EQ(weir_http_client_do(c, &h, &r), 0);
    CHECK_EQ(r.status, 200);
    CHECK_EQ(r.body_len, 0);
    CHECK(r.body != NULL && r.body[0] == '\0');
    CHECK_STR(weir_http_client_resp_header(&r, "Content-Length"), "13");
    weir_http_client_resp_free(&r);
    get_ok(c, URL("/hello"), &r);
    CHECK_STR(r.body, "Hello, World!");
    weir_http_client_resp_free(&r);

    /* A 404 is a response like any other. */
    get_ok(c, URL("/missing"), &r);
    CHECK_EQ(r.status, 404);
    CHECK_STR(r.body, "nope");
    weir_http_client_resp_free(&r);

    /* A path with a query, and a URL without a path. */
    get_ok(c, URL("/uri?x=1&y=%20z#frag"), &r);
    CHECK_STR(r.body, "/uri?x=1&y=%20z\n");
    weir_http_client_resp_free(&r);
    char u[128];
    snprintf(u, sizeof(u), "HTTP://127.0.0.1:%d", ngx->port);
    get_ok(c, u, &r);
    CHECK(r.status == 403 || r.status == 404); /* "/" is not served, but reached nginx */
    weir_http_client_resp_free(&r);

    /* weir_http_post with a content type */
    CHECK_EQ(weir_http_post(c, URL("/echo"), "text/plain", "posted", 6, deadline_ms(LONG_MS), &r),
             0);
    CHECK_STR(r.body, "posted");
    weir_http_client_resp_free(&r);

    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.opened, 1); /* every one of them on one connection */
    CHECK_EQ(st.requests, 12);
    weir_http_client_free(c);
    return 0;
}

TEST(methods_bodies_head_status)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(methods_main, NULL), 0);
}

/* ---- chunked -------------------------------------------------------------------------- */
typedef struct gen {
    size_t total, sent, step;
    int calls;
} gen;

/* Produces `total` bytes of a pattern in pieces of at most `step`. */
static ssize_t gen_body(void *arg, void *buf, size_t cap)
{
    gen *g = arg;
    g->calls++;
    size_t n = g->total - g->sent;
    if (n > g->step)
        n = g->step;
    if (n > cap)
        n = cap;
    for (size_t i = 0; i < n; i++)
        ((char *)buf)[i] = (char)('a' + (g->sent + i) % 26);
    g->sent += n;
    if (g->calls % 3 == 0)
        weir_task_yield(); /* a body function may suspend */
    return (ssize_t)n;
}

static void check_pattern(const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (char)('a' + i % 26))
            TEST__FAIL("pattern differs at %zu", i);
}

static intptr_t chunked_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    weir_http_client_resp r;

    /* A chunked response (two flushes), then the connection is reused. */
    get_ok(c, URL("/chunked"), &r);
    CHECK_STR(weir_http_client_resp_header(&r, "transfer-encoding"), "chunked");
    CHECK_STR(r.body, "part one\npart two\n");
    weir_http_client_resp_free(&r);
    get_ok(c, URL("/big"), &r); /* 1 MB in chunks */
    CHECK_EQ(r.body_len, 1000000);
    CHECK(memcmp(r.body + 999990, "0123456789", 10) == 0);
    CHECK_EQ(strlen(r.body), 1000000);
    weir_http_client_resp_free(&r);

    /* Chunked request bodies of several sizes, echoed back. */
    size_t sizes[] = {1, 1000, 40000, 300000};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        gen g = {.total = sizes[i], .step = 7000};
        weir_http_client_req q = {.method = i % 2 ? "PUT" : "POST",
                                  .url = URL("/echo"),
                                  .body_fn = gen_body,
                                  .body_arg = &g,
                                  .deadline = deadline_ms(LONG_MS)};
        int rc = weir_http_client_do(c, &q, &r);
        if (rc)
            fprintf(stderr, "%s\n", r.error);
        CHECK_EQ(rc, 0);
        CHECK_EQ(r.status, 200);
        CHECK_EQ(r.body_len, sizes[i]);
        check_pattern(r.body, r.body_len);
        weir_http_client_resp_free(&r);
    }
    /* A large Content-Length body (written after the head). */
    size_t big = 200000;
    char *b = malloc(big);
    CHECK(b != NULL);
    for (size_t i = 0; i < big; i++)
        b[i] = (char)('a' + i % 26);
    weir_http_client_req q = {
        .method = "PUT", .url = URL("/echo"), .body = b, .body_len = big, .deadline = 0};
    CHECK_EQ(weir_http_client_do(c, &q, &r), 0);
    CHECK_EQ(r.body_len, big);
    check_pattern(r.body, r.body_len);
    weir_http_client_resp_free(&r);
    free(b);
    CHECK_EQ(stats(c).opened, 1);
    weir_http_client_free(c);
    return 0;
}

TEST(chunked_requests_and_responses)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(chunked_main, NULL), 0);
}

static ssize_t failing_body(void *arg, void *buf, size_t cap)
{
    int *calls = arg;
    if ((*calls)++ == 0) {
        memset(buf, 'x', cap < 10 ? cap : 10);
        return 10;
    }
    return -EIO;
}

static intptr_t body_fn_fails_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    weir_http_client_resp r;
    get_ok(c, URL("/hello"), &r);
    weir_http_client_resp_free(&r);
    int calls = 0;
    weir_http_client_req q = {.method = "POST",
                              .url = URL("/echo"),
                              .body_fn = failing_body,
                              .body_arg = &calls,
                              .deadline = deadline_ms(LONG_MS)};
    CHECK_EQ(weir_http_client_do(c, &q, &r), -EIO);
    CHECK(strstr(r.error, "body function") != NULL);
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.open_now, 0); /* the half-sent request's connection is gone */
    CHECK_EQ(st.idle_now, 0);
    get_ok(c, URL("/hello"), &r);
    weir_http_client_resp_free(&r);
    CHECK_EQ(stats(c).opened, 2);
    weir_http_client_free(c);
    return 0;
}

TEST(body_function_error_closes_the_connection)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(body_fn_fails_main, NULL), 0);
}

/* ---- size limit, deadline, connection: close ------------------------------------------ */
static intptr_t limits_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(&(weir_http_client_opts){.max_response = 5000});
    CHECK(c != NULL);
    weir_http_client_resp r;
    /* chunked, over the cap while it arrives */
    CHECK_EQ(weir_http_get(c, URL("/big"), deadline_ms(LONG_MS), &r), -EMSGSIZE);
    CHECK(strstr(r.error, "max_response") != NULL);
    CHECK(r.body == NULL);
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.open_now, 0);
    /* Content-Length over the cap: refused at the head */
    CHECK_EQ(weir_http_get(c, URL("/big.txt"), deadline_ms(LONG_MS), &r), -EMSGSIZE);
    CHECK_EQ(stats(c).open_now, 0);
    /* under the cap: fine */
    get_ok(c, URL("/hello"), &r);
    weir_http_client_resp_free(&r);
    CHECK_EQ(stats(c).opened, 3);
    weir_http_client_free(c);

    /* The default cap (16 MiB) lets the 100000-byte file through. */
    c = weir_http_client_new(NULL);
    get_ok(c, URL("/big.txt"), &r);
    CHECK_EQ(r.body_len, NGINX_BIGLEN);
    weir_http_client_resp_free(&r);
    weir_http_client_free(c);

    /* Head limits come from opts.limits. */
    c = weir_http_client_new(&(weir_http_client_opts){.limits = {.max_headers = 2}});
    CHECK(c != NULL);
    CHECK_EQ(weir_http_get(c, URL("/hello"), deadline_ms(LONG_MS), &r), -E2BIG);
    weir_http_client_free(c);
    return 0;
}

TEST(response_size_and_head_limits)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(limits_main, NULL), 0);
}

static intptr_t deadline_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    weir_http_client_resp r;
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_http_get(c, URL("/slow"), deadline_ms(200), &r), -ETIMEDOUT);
    int64_t took = weir_time_now() - t0;
    CHECK_GE(took, 150 * WEIR_MSEC);
    /* (-ETIMEDOUT, not the answer the server sends after its 2 s sleep.) */
    CHECK(strstr(r.error, "deadline") != NULL);
    CHECK_EQ(stats(c).open_now, 0); /* a timed-out connection is not reused */
    /* A deadline already past fails at once. */
    CHECK_EQ(weir_http_get(c, URL("/hello"), weir_time_now() - 1, &r), -ETIMEDOUT);
    get_ok(c, URL("/hello"), &r);
    weir_http_client_resp_free(&r);
    weir_http_client_free(c);
    return 0;
}

TEST(deadline_covers_the_response)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(deadline_main, NULL), 0);
}

static intptr_t close_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    weir_http_client_resp r;
    for (int i = 0; i < 2; i++) {
        get_ok(c, URL("/close"), &r);
        CHECK_STR(r.body, "bye");
        CHECK_STR(weir_http_client_resp_header(&r, "connection"), "close");
        weir_http_client_resp_free(&r);
    }
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.opened, 2);
    CHECK_EQ(st.reused, 0);
    CHECK_EQ(st.open_now, 0);
    /* The caller's Connection: close is honoured too. */
    weir_http_header h = {{"Connection", 10}, {"close", 5}};
    weir_http_client_req q = {.url = URL("/hello"), .headers = &h, .nheaders = 1};
    CHECK_EQ(weir_http_client_do(c, &q, &r), 0);
    weir_http_client_resp_free(&r);
    CHECK_EQ(stats(c).open_now, 0);
    weir_http_client_free(c);
    return 0;
}

TEST(connection_close_is_not_pooled)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(close_main, NULL), 0);
}

/* ---- the cap: waiting, FIFO, fast fail ------------------------------------------------ */
#define NCONC 12

typedef struct conc {
    weir_http_client *c;
    const char *url;
    int rc[NCONC];
} conc;

typedef struct conc_arg {
    conc *s;
    int i;
    const char *url; /* NULL: s->url */
} conc_arg;

static intptr_t conc_one(void *arg)
{
    conc_arg *a = arg;
    weir_http_client_resp r;
    const char *url = a->url ? a->url : a->s->url;
    a->s->rc[a->i] = weir_http_get(a->s->c, url, deadline_ms(60000), &r);
    if (a->s->rc[a->i] == 0 && strcmp(r.body, "ok\n") != 0)
        a->s->rc[a->i] = -EBADMSG;
    weir_http_client_resp_free(&r);
    return 0;
}

/* max_conns concurrent: NCONC requests at once, all succeed over at most
 * max_conns connections. */
static intptr_t cap_main(void *arg)
{
    int max = (int)(intptr_t)arg;
    conc s = {.c = weir_http_client_new(&(weir_http_client_opts){.max_conns = max}),
              .url = URL("/delay")};
    CHECK(s.c != NULL);
    conc_arg args[NCONC];
    weir_task *t[NCONC];
    for (int i = 0; i < NCONC; i++) {
        args[i] = (conc_arg){&s, i, NULL};
        t[i] = test_spawn(conc_one, &args[i]);
    }
    for (int i = 0; i < NCONC; i++)
        CHECK_EQ(weir_task_join(t[i], NULL, WEIR_FOREVER), 0);
    for (int i = 0; i < NCONC; i++)
        CHECK_EQ(s.rc[i], 0);
    weir_http_client_stats st = stats(s.c);
    CHECK_EQ(st.requests, NCONC);
    CHECK_LE(st.opened, max);
    CHECK_GE(st.waits, 1);
    CHECK_EQ(st.reused + st.opened, NCONC);
    CHECK_LE(st.open_now, max);
    weir_http_client_free(s.c);
    return 0;
}

TEST(cap_limits_connections_one_thread)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(cap_main, (void *)(intptr_t)3), 0);
}

TEST(cap_limits_connections_two_threads)
{
    if (have_nginx())
        CHECK_EQ(run_on_rt(2, cap_main, (void *)(intptr_t)3), 0);
}

typedef struct holder {
    weir_http_client *c;
    const char *url;
    int rc;
    const char *error;
} holder;

static intptr_t hold_slow(void *arg)
{
    holder *h = arg;
    weir_http_client_resp r;
    h->rc = weir_http_get(h->c, h->url, deadline_ms(LONG_MS), &r);
    h->error = r.error; /* a static string */
    weir_http_client_resp_free(&r);
    return 0;
}

static void wait_open(weir_http_client *c, uint64_t n)
{
    int64_t until = weir_time_now() + 10 * WEIR_SEC;
    while (stats(c).open_now < n && weir_time_now() < until)
        weir_time_sleep(WEIR_MSEC);
    CHECK_EQ(stats(c).open_now, n);
}

/* Over the cap: fast_fail refuses at once; otherwise the wait ends at the
 * deadline. Cancelling the holder mid-request closes its connection. */
static intptr_t busy_main(void *arg)
{
    int fast = (int)(intptr_t)arg;
    weir_http_client *c =
        weir_http_client_new(&(weir_http_client_opts){.max_conns = 1, .fast_fail = fast});
    CHECK(c != NULL);
    holder h = {c, URL("/slow"), 1, NULL};
    weir_task *t = test_spawn(hold_slow, &h);
    wait_open(c, 1);
    weir_http_client_resp r;
    int64_t t0 = weir_time_now();
    int rc = weir_http_get(c, URL("/hello"), deadline_ms(200), &r);
    int64_t took = weir_time_now() - t0;
    weir_http_client_stats st = stats(c);
    if (fast) {
        CHECK_EQ(rc, -EBUSY);
        CHECK(strstr(r.error, "busy") != NULL);
        (void)took; /* at once: the counters say it did not wait */
        CHECK_EQ(st.fast_fails, 1);
        CHECK_EQ(st.waits, 0);
    } else {
        CHECK_EQ(rc, -ETIMEDOUT);
        CHECK_GE(took, 150 * WEIR_MSEC);
        CHECK_LT(took, 1500 * WEIR_MSEC);
        CHECK_EQ(st.waits, 1);
        CHECK_EQ(st.fast_fails, 0);
        /* A waiter cancelled in the queue leaves it with -ECANCELED. */
        holder w = {c, URL("/hello"), 1, NULL};
        weir_task *wt = test_spawn(hold_slow, &w);
        int64_t until = weir_time_now() + 10 * WEIR_SEC;
        while (stats(c).waits < 2 && weir_time_now() < until)
            weir_time_sleep(WEIR_MSEC);
        weir_time_sleep(5 * WEIR_MSEC);
        CHECK_EQ(weir_task_cancel(wt), 0);
        CHECK_EQ(weir_task_join(wt, NULL, WEIR_FOREVER), -ECANCELED);
        CHECK_EQ(w.rc, -ECANCELED);
        CHECK(strstr(w.error, "cancelled") != NULL);
    }
    /* Another host:port has its own pool and cap. */
    get_ok(c, URL_SHORT("/"), &r);
    CHECK_STR(r.body, "short");
    weir_http_client_resp_free(&r);
    /* Cancel the holder: -ECANCELED, its connection closed. */
    CHECK_EQ(weir_task_cancel(t), 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(h.rc, -ECANCELED);
    CHECK(strstr(h.error, "cancelled") != NULL);
    st = stats(c);
    CHECK_EQ(st.open_now, 1); /* only the other pool's idle connection */
    CHECK_EQ(st.idle_now, 1);
    get_ok(c, URL("/hello"), &r); /* the permit came back */
    weir_http_client_resp_free(&r);
    weir_http_client_free(c);
    return 0;
}

TEST(fast_fail_returns_ebusy)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(busy_main, (void *)(intptr_t)1), 0);
}

TEST(wait_over_the_cap_times_out)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(busy_main, (void *)(intptr_t)0), 0);
}

/* ---- stale and broken connections (raw servers) --------------------------------------- */
typedef struct raw_srv {
    int lfd, port;
    int mode;            /* RAW_* */
    atomic_int accepted; /* connections accepted */
    atomic_int requests; /* request heads read */
    atomic_int release;  /* RAW_ORDER: answer request /0 */
    int order[64];       /* RAW_ORDER: the N of each "GET /N", in arrival order */
} raw_srv;

enum {
    RAW_CUT_BODY,    /* announce 100 bytes, send 9, close */
    RAW_ONE_SHOT,    /* answer one request with keep-alive, then close the connection */
    RAW_GARBAGE,     /* answer with something that is not HTTP */
    RAW_EXTRA,       /* a complete response followed by bytes nobody asked for */
    RAW_CLOSE_DELIM, /* HTTP/1.0, no Content-Length: the body ends with the connection */
    RAW_INTERIM,     /* 100 and 103 before the response (no body to HEAD) */
    RAW_ORDER,       /* keep-alive; record each request's /N; hold /0 until `release` */
    RAW_LATE,        /* keep-alive; bytes nobody asked for 50 ms after some answers */
    RAW_408,         /* one answer, then 50 ms later a 408 and the close */
    RAW_413,         /* keep-alive; a PUT gets 413 + close after its head, body unread */
    RAW_FLOOD,       /* 100 Continue without end (GET /5: five, then the answer) */
};

/* A complete response, sent where none was asked for. */
#define FORGED "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"

/* Read a request head (to the blank line) and, when it says so, a
 * Content-Length body or a chunked body up to its last chunk. */
static int raw_read_request(int fd, int *path_n, int *is_head)
{
    char buf[8192];
    size_t have = 0;
    for (;;) {
        ssize_t n = weir_io_recv(fd, buf + have, sizeof(buf) - 1 - have, 0, deadline_ms(LONG_MS));
        if (n <= 0)
            return -1;
        have += (size_t)n;
        buf[have] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (end) {
            if (path_n && strncmp(buf, "GET /", 5) == 0)
                *path_n = atoi(buf + 5);
            if (is_head)
                *is_head = strncmp(buf, "HEAD ", 5) == 0;
            if (strstr(buf, "chunked") && !strstr(end, "\r\n0\r\n\r\n")) {
                if (have + 1 >= sizeof(buf))
                    have = 0; /* only the end matters */
                continue;
            }
            return 0;
        }
        if (have + 1 >= sizeof(buf))
            return -1;
    }
}

static ssize_t raw_send(int fd, const char *s)
{
    return weir_io_send(fd, s, strlen(s), MSG_NOSIGNAL, deadline_ms(LONG_MS));
}

/* Read one request head into buf (NUL-terminated), leaving any body
 * unread past what came with it. 0, or -1 at EOF or on an error. */
static int raw_read_head(int fd, char *buf, size_t cap)
{
    size_t have = 0;
    for (;;) {
        ssize_t n = weir_io_recv(fd, buf + have, cap - 1 - have, 0, deadline_ms(LONG_MS));
        if (n <= 0)
            return -1;
        have += (size_t)n;
        buf[have] = '\0';
        if (strstr(buf, "\r\n\r\n"))
            return 0;
        if (have + 1 >= cap)
            return -1;
    }
}

/* The modes that read heads only (raw_read_head). */
static void raw_conn_heads(raw_srv *s, int fd)
{
    char buf[8192];
    switch (s->mode) {
    case RAW_LATE:
        while (raw_read_head(fd, buf, sizeof(buf)) == 0) {
            atomic_fetch_add(&s->requests, 1);
            const char *late = NULL;
            if (strncmp(buf, "HEAD ", 5) == 0) {
                /* The length of FORGED: a server smuggling a response in. */
                raw_send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 44\r\n\r\n");
                late = FORGED;
            } else if (strncmp(buf, "GET /204 ", 9) == 0) {
                raw_send(fd, "HTTP/1.1 204 No Content\r\n\r\n");
                late = FORGED; /* a 204 has no body, whatever follows */
            } else if (strncmp(buf, "GET /pad ", 9) == 0) {
                raw_send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nreal");
                late = "\r\n\r\n";
            } else {
                raw_send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nreal");
            }
            if (late) {
                weir_time_sleep(50 * WEIR_MSEC); /* the client has pooled it by now */
                raw_send(fd, late);
            }
        }
        break;
    case RAW_408:
        if (raw_read_head(fd, buf, sizeof(buf)) == 0) {
            atomic_fetch_add(&s->requests, 1);
            raw_send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            weir_time_sleep(50 * WEIR_MSEC);
            raw_send(fd, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
                         "Content-Length: 0\r\n\r\n");
        }
        break;
    case RAW_413:
        while (raw_read_head(fd, buf, sizeof(buf)) == 0) {
            atomic_fetch_add(&s->requests, 1);
            if (strncmp(buf, "PUT ", 4) == 0) {
                /* Closed with the body unread: the kernel resets it. */
                raw_send(fd, "HTTP/1.1 413 Content Too Large\r\nConnection: close\r\n"
                             "Content-Length: 8\r\n\r\ntoo big\n");
                break;
            }
            raw_send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        }
        break;
    case RAW_FLOOD:
        if (raw_read_head(fd, buf, sizeof(buf)) == 0) {
            atomic_fetch_add(&s->requests, 1);
            int five = strncmp(buf, "GET /5 ", 7) == 0;
            int64_t until = weir_time_now() + 10 * WEIR_SEC;
            for (int i = 0; five ? i < 5 : weir_time_now() < until; i++) {
                if (raw_send(fd, "HTTP/1.1 100 Continue\r\n\r\n") <= 0)
                    break;
                if (i % 16 == 15)
                    weir_time_sleep(WEIR_MSEC);
            }
            if (five)
                raw_send(fd, "HTTP/1.1 200 OK\r\nConnection: close\r\n"
                             "Content-Length: 2\r\n\r\nok");
        }
        break;
    }
}

static intptr_t raw_conn(void *arg)
{
    raw_srv *s = ((void **)arg)[0];
    int fd = (int)(intptr_t)((void **)arg)[1];
    free(arg);
    int n = -1;
    int head = 0;
    if (s->mode >= RAW_LATE) {
        raw_conn_heads(s, fd);
        weir_io_close(fd);
        return 0;
    }
    while (s->mode == RAW_ORDER && raw_read_request(fd, &n, NULL) == 0) {
        int k = atomic_fetch_add(&s->requests, 1);
        if (k < 64)
            s->order[k] = n;
        while (n == 0 && !atomic_load(&s->release))
            weir_time_sleep(WEIR_MSEC);
        raw_send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
    }
    if (s->mode != RAW_ORDER && raw_read_request(fd, NULL, &head) == 0) {
        atomic_fetch_add(&s->requests, 1);
        switch (s->mode) {
        case RAW_CUT_BODY:
            raw_send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part");
            break;
        case RAW_ONE_SHOT:
            raw_send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            weir_time_sleep(20 * WEIR_MSEC); /* the client has pooled it by now */
            break;
        case RAW_GARBAGE:
            raw_send(fd, "SSH-2.0-OpenSSH\r\n\r\n");
            break;
        case RAW_EXTRA:
            raw_send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA");
            weir_time_sleep(200 * WEIR_MSEC);
            break;
        case RAW_CLOSE_DELIM:
            raw_send(fd, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil ");
            weir_time_sleep(20 * WEIR_MSEC);
            raw_send(fd, "the end");
            break;
        case RAW_INTERIM:
            raw_send(fd, "HTTP/1.1 100 Continue\r\n\r\n"
                         "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n"
                         "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n");
            if (!head)
                raw_send(fd, "hello");
            weir_time_sleep(500 * WEIR_MSEC); /* keep-alive: the client pools it */
            break;
        }
    }
    weir_io_close(fd);
    return 0;
}

static intptr_t raw_accept_loop(void *arg)
{
    raw_srv *s = arg;
    for (;;) {
        int fd = weir_net_accept(s->lfd, NULL, WEIR_FOREVER);
        if (fd < 0)
            return 0; /* cancelled */
        atomic_fetch_add(&s->accepted, 1);
        void **a = malloc(2 * sizeof(void *));
        CHECK(a != NULL);
        a[0] = s;
        a[1] = (void *)(intptr_t)fd;
        weir_task_detach(test_spawn(raw_conn, a));
    }
}

static weir_task *raw_start(raw_srv *s, int mode)
{
    memset(s, 0, sizeof(*s));
    atomic_init(&s->accepted, 0);
    atomic_init(&s->requests, 0);
    atomic_init(&s->release, 0);
    s->mode = mode;
    s->lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(s->lfd, 0);
    s->port = weir_net_local_port(s->lfd);
    return test_spawn(raw_accept_loop, s);
}

/* Stop n raw servers (their accept loops), then give the connection fibers
 * time to finish. */
static void raw_stop_n(raw_srv *s, weir_task **t, int n)
{
    for (int i = 0; i < n; i++) {
        weir_task_cancel(t[i]);
        int j = weir_task_join(t[i], NULL, WEIR_FOREVER);
        CHECK(j == 0 || j == -ECANCELED);
        weir_io_close(s[i].lfd);
    }
    weir_time_sleep(300 * WEIR_MSEC);
}

static void raw_stop(raw_srv *s, weir_task *t)
{
    raw_stop_n(s, &t, 1);
}

#define RAW_URL(s, path) url_of((char[256]){0}, 256, (s)->port, path)

/* The same through https:// (for a client whose https transport is plain
 * TCP without an idle check). */
static const char *surl_of(char *buf, size_t cap, int https, int port, const char *path)
{
    snprintf(buf, cap, "%s://127.0.0.1:%d%s", https ? "https" : "http", port, path);
    return buf;
}
#define SRAW_URL(https, s, path) surl_of((char[256]){0}, 256, https, (s)->port, path)

/* max_conns 1: requests that queued one after another get the connection
 * in that order. The raw server holds request /0 until all the others are
 * seen queued (waiting_now), then records the order requests arrive in on
 * the one connection. */
static intptr_t fifo_main(void *arg)
{
    (void)arg;
    raw_srv srv;
    weir_task *st_task = raw_start(&srv, RAW_ORDER);
    conc s = {.c = weir_http_client_new(&(weir_http_client_opts){.max_conns = 1})};
    CHECK(s.c != NULL);
    char urls[NCONC][64];
    conc_arg args[NCONC];
    weir_task *t[NCONC];
    for (int i = 0; i < NCONC; i++) {
        snprintf(urls[i], sizeof(urls[i]), "http://127.0.0.1:%d/%d", srv.port, i);
        args[i] = (conc_arg){&s, i, urls[i]};
        t[i] = test_spawn(conc_one, &args[i]);
        /* /0 holds the connection; each later request is queued before
         * the next one starts. */
        int64_t until = weir_time_now() + 10 * WEIR_SEC;
        if (i == 0) {
            while (atomic_load(&srv.requests) < 1 && weir_time_now() < until)
                weir_time_sleep(WEIR_MSEC);
            CHECK_EQ(atomic_load(&srv.requests), 1);
        } else {
            while (stats(s.c).waiting_now < (uint64_t)i && weir_time_now() < until)
                weir_time_sleep(WEIR_MSEC);
            CHECK_EQ(stats(s.c).waiting_now, i);
        }
    }
    atomic_store(&srv.release, 1);
    for (int i = 0; i < NCONC; i++)
        CHECK_EQ(weir_task_join(t[i], NULL, WEIR_FOREVER), 0);
    CHECK_EQ(atomic_load(&srv.requests), NCONC);
    for (int i = 0; i < NCONC; i++) {
        CHECK_EQ(s.rc[i], 0);
        CHECK_EQ(srv.order[i], i);
    }
    weir_http_client_stats st = stats(s.c);
    CHECK_EQ(st.opened, 1);
    CHECK_EQ(st.reused, NCONC - 1);
    CHECK_EQ(st.waits, NCONC - 1);
    CHECK_EQ(st.waiting_now, 0);
    CHECK_EQ(atomic_load(&srv.accepted), 1);
    weir_http_client_free(s.c); /* closes the connection: the server fiber ends */
    raw_stop(&srv, st_task);
    return 0;
}

TEST(waiters_served_in_fifo_order)
{
    CHECK_EQ(test_run_main(fifo_main, NULL), 0);
}

TEST(waiters_served_in_fifo_order_two_threads)
{
    CHECK_EQ(run_on_rt(2, fifo_main, NULL), 0);
}

/* Responses nginx will not give on demand: a body cut short, not HTTP at
 * all, extra bytes, a body delimited by the close, interim 1xx responses. */
static intptr_t broken_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    raw_srv s;
    weir_http_client_resp r;

    /* The server closes inside the body: -ECONNRESET, nothing pooled, and
     * no retry (a response byte had arrived). */
    weir_task *t = raw_start(&s, RAW_CUT_BODY);
    CHECK_EQ(weir_http_get(c, RAW_URL(&s, "/"), deadline_ms(LONG_MS), &r), -ECONNRESET);
    CHECK(r.error[0] != '\0');
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.open_now, 0);
    CHECK_EQ(st.retries, 0);
    CHECK_EQ(atomic_load(&s.accepted), 1);
    raw_stop(&s, t);

    /* Not HTTP at all: the parser's -EBADMSG. */
    t = raw_start(&s, RAW_GARBAGE);
    CHECK_EQ(weir_http_get(c, RAW_URL(&s, "/"), deadline_ms(LONG_MS), &r), -EBADMSG);
    CHECK_EQ(stats(c).open_now, 0);
    raw_stop(&s, t);

    /* Bytes after the response: the response is fine, the connection is
     * not reused. */
    /* A body delimited by the close of the connection. */
    t = raw_start(&s, RAW_CLOSE_DELIM);
    get_ok(c, RAW_URL(&s, "/"), &r);
    CHECK_EQ(r.version_minor, 0);
    CHECK_STR(r.body, "until the end");
    weir_http_client_resp_free(&r);
    CHECK_EQ(stats(c).open_now, 0);
    raw_stop(&s, t);

    /* Interim 1xx responses are skipped, for GET and for HEAD. */
    t = raw_start(&s, RAW_INTERIM);
    get_ok(c, RAW_URL(&s, "/"), &r);
    CHECK_EQ(r.status, 200);
    CHECK_STR(r.body, "hello");
    CHECK(weir_http_client_resp_header(&r, "link") == NULL); /* the 103's field */
    weir_http_client_resp_free(&r);
    CHECK_EQ(stats(c).idle_now, 1); /* kept: nothing was left unread */
    weir_http_client_free(c);       /* (the raw server reads one request per connection) */
    c = weir_http_client_new(NULL);
    weir_http_client_req hq = {
        .method = "HEAD", .url = RAW_URL(&s, "/"), .deadline = deadline_ms(LONG_MS)};
    CHECK_EQ(weir_http_client_do(c, &hq, &r), 0);
    CHECK_EQ(r.status, 200);
    CHECK_EQ(r.body_len, 0);
    CHECK_STR(weir_http_client_resp_header(&r, "content-length"), "5");
    weir_http_client_resp_free(&r);
    CHECK_EQ(stats(c).idle_now, 1); /* no body was awaited after the HEAD */
    raw_stop(&s, t);
    weir_http_client_free(c);
    c = weir_http_client_new(NULL);

    t = raw_start(&s, RAW_EXTRA);
    get_ok(c, RAW_URL(&s, "/"), &r);
    CHECK_STR(r.body, "ok");
    weir_http_client_resp_free(&r);
    CHECK_EQ(stats(c).open_now, 0);
    raw_stop(&s, t);
    weir_http_client_free(c);
    return 0;
}

TEST(server_closing_mid_response)
{
    CHECK_EQ(test_run_main(broken_main, NULL), 0);
}

/* An https transport that is plain TCP without an idle check: the stale
 * connection is only found by sending on it. */
static const weir_http_transport *unchecked_tcp(void)
{
    static weir_http_transport tr;
    tr = weir_http_tcp_transport;
    tr.idle_check = NULL;
    return &tr;
}

/* The server closes each connection 20 ms after its one answer. arg 0:
 * through a transport without an idle check, so the closed connection is
 * found by sending on it: replayed when the request can be, the error
 * otherwise. arg 1: the TCP transport's idle check finds it first, and
 * every request goes out on a fresh connection. */
static intptr_t stale_main(void *arg)
{
    int checked = (int)(intptr_t)arg;
    int https = !checked;
    weir_http_client *c = weir_http_client_new(&(weir_http_client_opts){.https = unchecked_tcp()});
    CHECK(c != NULL);
    raw_srv s;
    weir_http_client_resp r;
    weir_task *t = raw_start(&s, RAW_ONE_SHOT);

    /* GET: pooled, closed by the server while idle, sent again. */
    get_ok(c, SRAW_URL(https, &s, "/a"), &r);
    weir_http_client_resp_free(&r);
    CHECK_EQ(stats(c).idle_now, 1);
    weir_time_sleep(150 * WEIR_MSEC); /* the server has closed it */
    get_ok(c, SRAW_URL(https, &s, "/b"), &r);
    CHECK_STR(r.body, "ok");
    weir_http_client_resp_free(&r);
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.retries, checked ? 0 : 1);
    CHECK_EQ(st.stale, checked ? 1 : 0);
    CHECK_EQ(st.opened, 2);
    CHECK_EQ(st.reused, checked ? 0 : 1);
    CHECK_EQ(atomic_load(&s.requests), 2); /* the stale connection carried nothing */

    /* A streamed body cannot be replayed: the error is the caller's, unless
     * the check kept the request off the closed connection. */
    weir_time_sleep(150 * WEIR_MSEC);
    gen g = {.total = 100, .step = 50};
    weir_http_client_req q = {.method = "PUT",
                              .url = SRAW_URL(https, &s, "/c"),
                              .body_fn = gen_body,
                              .body_arg = &g,
                              .deadline = deadline_ms(LONG_MS)};
    int rc = weir_http_client_do(c, &q, &r);
    if (checked) {
        CHECK_EQ(rc, 0);
        weir_http_client_resp_free(&r);
    } else {
        CHECK(rc == -ECONNRESET || rc == -EPIPE);
    }
    CHECK_EQ(stats(c).retries, checked ? 0 : 1);

    /* A POST is not resent either, unless it carries an Idempotency-Key. */
    if (!checked) {
        get_ok(c, SRAW_URL(https, &s, "/d"), &r);
        weir_http_client_resp_free(&r);
    }
    weir_time_sleep(150 * WEIR_MSEC);
    rc = weir_http_post(c, SRAW_URL(https, &s, "/e"), NULL, "x", 1, deadline_ms(LONG_MS), &r);
    if (checked) {
        CHECK_EQ(rc, 0);
        weir_http_client_resp_free(&r);
    } else {
        CHECK(rc == -ECONNRESET || rc == -EPIPE);
        get_ok(c, SRAW_URL(https, &s, "/f"), &r);
        weir_http_client_resp_free(&r);
    }
    weir_time_sleep(150 * WEIR_MSEC);
    weir_http_header key = {{"Idempotency-Key", 15}, {"k1", 2}};
    q = (weir_http_client_req){.method = "POST",
                               .url = SRAW_URL(https, &s, "/g"),
                               .headers = &key,
                               .nheaders = 1,
                               .body = "x",
                               .body_len = 1,
                               .deadline = deadline_ms(LONG_MS)};
    CHECK_EQ(weir_http_client_do(c, &q, &r), 0);
    weir_http_client_resp_free(&r);
    st = stats(c);
    CHECK_EQ(st.retries, checked ? 0 : 2);
    if (checked) {
        CHECK_EQ(st.stale, 4); /* /b, /c, /e, /g: each found its connection closed */
        CHECK_EQ(st.reused, 0);
        CHECK_EQ(st.opened, 5);
        CHECK_EQ(atomic_load(&s.requests), 5);
    }
    raw_stop(&s, t);
    weir_http_client_free(c);
    return 0;
}

TEST(stale_pooled_connection_is_retried)
{
    CHECK_EQ(test_run_main(stale_main, (void *)(intptr_t)0), 0);
}

TEST(stale_idle_connection_found_by_the_idle_check)
{
    CHECK_EQ(test_run_main(stale_main, (void *)(intptr_t)1), 0);
}

/* Bytes that arrive on an idle connection after its response was read (a
 * "body" to a HEAD or a 204, CRLF padding, a 408 before closing) are never
 * read as the answer to the next request: the idle check closes that
 * connection and the request goes out on another. */
static intptr_t late_bytes_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    raw_srv s;
    weir_http_client_resp r;
    weir_task *t = raw_start(&s, RAW_LATE);

    weir_http_client_req hq = {
        .method = "HEAD", .url = RAW_URL(&s, "/"), .deadline = deadline_ms(LONG_MS)};
    CHECK_EQ(weir_http_client_do(c, &hq, &r), 0);
    CHECK_EQ(r.status, 200);
    CHECK_EQ(r.body_len, 0);
    weir_http_client_resp_free(&r);
    CHECK_EQ(stats(c).idle_now, 1);
    weir_time_sleep(150 * WEIR_MSEC); /* the forged response has arrived */
    get_ok(c, RAW_URL(&s, "/x"), &r);
    CHECK_EQ(r.status, 200);
    CHECK_STR(r.body, "real"); /* not "forged" */
    weir_http_client_resp_free(&r);
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.unasked, 1);
    CHECK_EQ(st.opened, 2);
    CHECK_EQ(st.reused, 0);

    /* The same after a 204 (no body, whatever the server sends next). */
    get_ok(c, RAW_URL(&s, "/204"), &r);
    CHECK_EQ(r.status, 204);
    weir_http_client_resp_free(&r);
    weir_time_sleep(150 * WEIR_MSEC);
    get_ok(c, RAW_URL(&s, "/x"), &r);
    CHECK_STR(r.body, "real");
    weir_http_client_resp_free(&r);
    CHECK_EQ(stats(c).unasked, 2);

    /* Padding after a response: not trusted either. */
    get_ok(c, RAW_URL(&s, "/pad"), &r);
    CHECK_STR(r.body, "real");
    weir_http_client_resp_free(&r);
    weir_time_sleep(150 * WEIR_MSEC);
    get_ok(c, RAW_URL(&s, "/x"), &r);
    CHECK_STR(r.body, "real");
    weir_http_client_resp_free(&r);

    /* A connection that stays quiet is reused as before. */
    get_ok(c, RAW_URL(&s, "/x"), &r);
    weir_http_client_resp_free(&r);
    st = stats(c);
    CHECK_EQ(st.unasked, 3);
    CHECK_EQ(st.opened, 4);
    CHECK_EQ(st.reused, 3); /* /204, /pad and the last /x */
    CHECK_EQ(st.retries, 0);
    CHECK_EQ(st.open_now, 1);
    weir_http_client_free(c);
    raw_stop(&s, t);
    return 0;
}

TEST(bytes_after_a_response_are_not_the_next_response)
{
    CHECK_EQ(test_run_main(late_bytes_main, NULL), 0);
}

/* A server that times an idle connection out with a 408 and closes it: the
 * next request succeeds on a fresh connection, it does not get the 408. */
static intptr_t idle_408_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    raw_srv s;
    weir_http_client_resp r;
    weir_task *t = raw_start(&s, RAW_408);
    get_ok(c, RAW_URL(&s, "/a"), &r);
    CHECK_STR(r.body, "ok");
    weir_http_client_resp_free(&r);
    CHECK_EQ(stats(c).idle_now, 1);
    weir_time_sleep(150 * WEIR_MSEC); /* 408, then the close */
    get_ok(c, RAW_URL(&s, "/b"), &r);
    CHECK_EQ(r.status, 200);
    CHECK_STR(r.body, "ok");
    weir_http_client_resp_free(&r);
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.unasked, 1);
    CHECK_EQ(st.retries, 0);
    CHECK_EQ(st.opened, 2);
    CHECK_EQ(atomic_load(&s.requests), 2);
    weir_http_client_free(c);
    raw_stop(&s, t);
    return 0;
}

TEST(idle_408_then_close_is_not_a_response)
{
    CHECK_EQ(test_run_main(idle_408_main, NULL), 0);
}

/* 413 and the close after the head of an 8 MiB PUT: the send of the body
 * fails, the 413 is the answer all the same, and a PUT on a pooled
 * connection is not replayed. */
static intptr_t early_413_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    raw_srv s;
    weir_http_client_resp r;
    weir_task *t = raw_start(&s, RAW_413);
    size_t big = 8u << 20;
    char *b = malloc(big);
    CHECK(b != NULL);
    memset(b, 'x', big);
    weir_http_client_req q = {.method = "PUT",
                              .url = RAW_URL(&s, "/up"),
                              .body = b,
                              .body_len = big,
                              .deadline = deadline_ms(LONG_MS)};
    int rc = weir_http_client_do(c, &q, &r);
    if (rc != 0)
        fprintf(stderr, "PUT: %s (%s)\n", weir_net_strerror(rc), r.error);
    CHECK_EQ(rc, 0);
    CHECK_EQ(r.status, 413);
    CHECK_STR(r.body, "too big\n");
    weir_http_client_resp_free(&r);
    CHECK_EQ(stats(c).open_now, 0);

    /* On a pooled connection: the 413 is not taken for a stale connection. */
    get_ok(c, RAW_URL(&s, "/a"), &r);
    weir_http_client_resp_free(&r);
    CHECK_EQ(stats(c).idle_now, 1);
    CHECK_EQ(weir_http_client_do(c, &q, &r), 0);
    CHECK_EQ(r.status, 413);
    weir_http_client_resp_free(&r);
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.reused, 1);
    CHECK_EQ(st.retries, 0);
    CHECK_EQ(st.open_now, 0);

    /* A streamed body the same. */
    gen g = {.total = big, .step = 16000};
    weir_http_client_req sq = {.method = "PUT",
                               .url = RAW_URL(&s, "/up"),
                               .body_fn = gen_body,
                               .body_arg = &g,
                               .deadline = deadline_ms(LONG_MS)};
    CHECK_EQ(weir_http_client_do(c, &sq, &r), 0);
    CHECK_EQ(r.status, 413);
    weir_http_client_resp_free(&r);
    CHECK_EQ(atomic_load(&s.requests), 4);
    CHECK_EQ(atomic_load(&s.accepted), 3);
    free(b);
    weir_http_client_free(c);
    raw_stop(&s, t);
    return 0;
}

TEST(early_response_while_sending_the_body)
{
    CHECK_EQ(test_run_main(early_413_main, NULL), 0);
}

/* Interim responses are capped: five are skipped, a sixth is -EBADMSG. */
static intptr_t flood_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    raw_srv s;
    weir_http_client_resp r;
    weir_task *t = raw_start(&s, RAW_FLOOD);
    get_ok(c, RAW_URL(&s, "/5"), &r);
    CHECK_EQ(r.status, 200);
    CHECK_STR(r.body, "ok");
    weir_http_client_resp_free(&r);
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_http_get(c, RAW_URL(&s, "/0"), deadline_ms(3000), &r), -EBADMSG);
    CHECK(strstr(r.error, "1xx") != NULL);
    CHECK_LT(weir_time_now() - t0, 2 * WEIR_SEC); /* at once, not at the deadline */
    CHECK_EQ(stats(c).open_now, 0);
    weir_http_client_free(c);
    raw_stop(&s, t);
    return 0;
}

TEST(endless_interim_responses_are_refused)
{
    CHECK_EQ(test_run_main(flood_main, NULL), 0);
}

/* A task already cancelled gets -ECANCELED before it takes a connection:
 * the pooled one stays. */
static intptr_t cancelled_one(void *arg)
{
    raw_srv *s = arg;
    weir_http_client *c = weir_http_client_new(&(weir_http_client_opts){.max_conns = 1});
    CHECK(c != NULL);
    weir_http_client_resp r;
    get_ok(c, RAW_URL(s, "/1"), &r);
    weir_http_client_resp_free(&r);
    CHECK_EQ(weir_task_cancel(weir_task_current()), 0);
    CHECK(weir_task_cancelled());
    CHECK_EQ(weir_http_get(c, RAW_URL(s, "/1"), deadline_ms(LONG_MS), &r), -ECANCELED);
    CHECK(strstr(r.error, "cancelled") != NULL);
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.open_now, 1);
    CHECK_EQ(st.idle_now, 1);
    CHECK_EQ(st.reused, 0);
    return (intptr_t)c;
}

static intptr_t cancelled_main(void *arg)
{
    (void)arg;
    raw_srv s;
    weir_task *t = raw_start(&s, RAW_ORDER);
    atomic_store(&s.release, 1);
    weir_task *ct = test_spawn(cancelled_one, &s);
    intptr_t v = 0;
    int j = weir_task_join(ct, &v, WEIR_FOREVER);
    CHECK(j == 0 || j == -ECANCELED);
    weir_http_client *c = (weir_http_client *)v;
    CHECK(c != NULL);
    /* The permit came back (max_conns 1) and the connection is reused. */
    weir_http_client_resp r;
    get_ok(c, RAW_URL(&s, "/1"), &r);
    CHECK_STR(r.body, "ok\n");
    weir_http_client_resp_free(&r);
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.opened, 1);
    CHECK_EQ(st.reused, 1);
    CHECK_EQ(atomic_load(&s.requests), 2);
    weir_http_client_free(c);
    raw_stop(&s, t);
    return 0;
}

TEST(cancelled_task_leaves_the_pooled_connection)
{
    CHECK_EQ(test_run_main(cancelled_main, NULL), 0);
}

/* Idle connections expire whichever pool the next request uses, and pools
 * left without connections or requests are freed: the client does not
 * keep a socket per host it once reached, nor a pool per host. */
#define NSRV 24
static intptr_t sweep_main(void *arg)
{
    (void)arg;
    static raw_srv srv[NSRV];
    weir_task *t[NSRV];
    for (int i = 0; i < NSRV; i++) {
        t[i] = raw_start(&srv[i], RAW_ORDER);
        atomic_store(&srv[i].release, 1);
    }
    weir_http_client_resp r;

    /* One GET to each of 5 ports, then, past idle_ms, GETs to one port
     * only: the other four sockets are closed too. */
    weir_http_client *c = weir_http_client_new(&(weir_http_client_opts){.idle_ms = 100});
    CHECK(c != NULL);
    for (int i = 0; i < 5; i++) {
        get_ok(c, RAW_URL(&srv[i], "/1"), &r);
        weir_http_client_resp_free(&r);
    }
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.open_now, 5);
    CHECK_EQ(st.pools_now, 5);
    weir_time_sleep(500 * WEIR_MSEC);
    for (int k = 0; k < 3; k++) {
        get_ok(c, RAW_URL(&srv[0], "/1"), &r);
        weir_http_client_resp_free(&r);
    }
    st = stats(c);
    CHECK_EQ(st.expired, 5);
    CHECK_EQ(st.open_now, 1);
    CHECK_EQ(st.idle_now, 1);
    CHECK_EQ(st.pools_now, 1);
    CHECK_EQ(st.opened, 6);

    /* A pool whose request got no connection to keep is freed at once:
     * hosts nobody listens on leave nothing behind. */
    for (int i = 2; i < 42; i++) {
        char u[64];
        snprintf(u, sizeof(u), "http://127.0.0.%d:1/", i);
        CHECK_EQ(weir_http_get(c, u, deadline_ms(LONG_MS), &r), -ECONNREFUSED);
        CHECK_EQ(stats(c).pools_now, 1);
    }
    weir_http_client_free(c);

    /* Many pools at once (the table grows), each found again. */
    c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < NSRV; i++) {
            get_ok(c, RAW_URL(&srv[i], "/1"), &r);
            weir_http_client_resp_free(&r);
        }
    }
    st = stats(c);
    CHECK_EQ(st.pools_now, NSRV);
    CHECK_EQ(st.opened, NSRV);
    CHECK_EQ(st.reused, NSRV);
    weir_http_client_free(c);
    raw_stop_n(srv, t, NSRV);
    return 0;
}

TEST(idle_connections_of_every_pool_expire_and_pools_are_freed)
{
    CHECK_EQ(test_run_main(sweep_main, NULL), 0);
}

/* nginx closes idle connections of its second server after 1 s. */
static intptr_t stale_nginx_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    weir_http_client_resp r;
    get_ok(c, URL_SHORT("/x"), &r);
    weir_http_client_resp_free(&r);
    weir_time_sleep(2200 * WEIR_MSEC);
    get_ok(c, URL_SHORT("/y"), &r);
    CHECK_STR(r.body, "short");
    weir_http_client_resp_free(&r);
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.retries, 0); /* the idle check found it closed */
    CHECK_EQ(st.stale, 1);
    CHECK_EQ(st.opened, 2);
    weir_http_client_free(c);
    return 0;
}

TEST(stale_nginx_keepalive_timeout)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(stale_nginx_main, NULL), 0);
}

static intptr_t idle_timeout_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(&(weir_http_client_opts){.idle_ms = 400});
    CHECK(c != NULL);
    weir_http_client_resp r;
    get_ok(c, URL("/hello"), &r);
    weir_http_client_resp_free(&r);
    get_ok(c, URL("/hello"), &r); /* at once: reused */
    weir_http_client_resp_free(&r);
    weir_time_sleep(800 * WEIR_MSEC);
    get_ok(c, URL("/hello"), &r); /* too old: closed, a new one opened */
    weir_http_client_resp_free(&r);
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.opened, 2);
    CHECK_EQ(st.reused, 1);
    CHECK_EQ(st.expired, 1);
    CHECK_EQ(st.retries, 0);
    CHECK_EQ(st.open_now, 1);
    weir_http_client_free(c);
    return 0;
}

TEST(idle_connections_expire)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(idle_timeout_main, NULL), 0);
}

/* ---- URLs, names, arguments ----------------------------------------------------------- */
static intptr_t bad_urls_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    static const struct {
        const char *url;
        int err;
    } cases[] = {
        {"", -EINVAL},
        {"127.0.0.1/x", -EINVAL},
        {"http:/x", -EINVAL},
        {"http://", -EINVAL},
        {"http:///path", -EINVAL},
        {"http://:80/", -EINVAL},
        {"http://user:pw@127.0.0.1/", -EINVAL},
        {"http://user@127.0.0.1/", -EINVAL},
        {"http://127.0.0.1:0/", -EINVAL},
        {"http://127.0.0.1:65536/", -EINVAL},
        {"http://127.0.0.1:8o/", -EINVAL},
        {"http://127.0.0.1:123456/", -EINVAL},
        {"http://[::1/", -EINVAL},
        {"http://[zz::1]/", -EINVAL},
        {"http://[::1]x/", -EINVAL},
        {"http://[]/", -EINVAL},
        {"http://ho st/", -EINVAL},
        {"http://host/pa th", -EINVAL},
        {"http://host/\x01", -EINVAL},
        {"http://host/caf\xc3\xa9", -EINVAL},
        {"http://h%41st/", -EINVAL},
        {"ftp://127.0.0.1/", -EPROTONOSUPPORT},
        {"https://127.0.0.1/", -EPROTONOSUPPORT}, /* no transport */
        {NULL, -EINVAL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        weir_http_client_resp r;
        weir_http_client_req q = {.url = cases[i].url};
        int rc = weir_http_client_do(c, &q, &r);
        if (rc != cases[i].err)
            fprintf(stderr, "url %s: %d (%s)\n", cases[i].url ? cases[i].url : "NULL", rc, r.error);
        CHECK_EQ(rc, cases[i].err);
        CHECK(r.error[0] != '\0');
        weir_http_client_resp_free(&r);
    }
    weir_http_client_resp r;
    CHECK_EQ(weir_http_get(c, "https://127.0.0.1/", 0, &r), -EPROTONOSUPPORT);
    CHECK(strstr(r.error, "transport") != NULL);

    /* Request fields the client refuses. */
    weir_http_header cl = {{"Content-Length", 14}, {"3", 1}};
    weir_http_header te = {{"transfer-encoding", 17}, {"chunked", 7}};
    weir_http_header crlf = {{"X-Test", 6}, {"a\r\nb: c", 7}};
    weir_http_header badname = {{"X Test", 6}, {"v", 1}};
    const char *u = "http://127.0.0.1:1/";
    weir_http_client_req bad[] = {
        {.url = u, .headers = &cl, .nheaders = 1},
        {.url = u, .headers = &te, .nheaders = 1},
        {.url = u, .headers = &crlf, .nheaders = 1},
        {.url = u, .headers = &badname, .nheaders = 1},
        {.url = u, .method = "GE T"},
        {.url = u, .method = ""},
        {.url = u, .body = "x", .body_len = 1, .body_fn = gen_body},
        {.url = u, .body_len = 5},
        {.url = u, .nheaders = 1},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ(weir_http_client_do(c, &bad[i], &r), -EINVAL);
        CHECK(r.error[0] != '\0');
    }
    /* weir_http_post with a NULL body and a length: refused, not read. */
    CHECK_EQ(weir_http_post(c, u, "text/plain", NULL, 5, deadline_ms(LONG_MS), &r), -EINVAL);
    CHECK(r.error[0] != '\0');
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.opened, 0); /* none of them cost a connection */
    CHECK_EQ(st.pools_now, 0);
    /* NULL with 0 is an empty body (and reaches the connect). */
    CHECK_EQ(weir_http_post(c, u, NULL, NULL, 0, deadline_ms(LONG_MS), &r), -ECONNREFUSED);
    CHECK_EQ(weir_http_client_do(NULL, &bad[0], &r), -EINVAL);
    CHECK_EQ(weir_http_client_do(c, NULL, &r), -EINVAL);
    CHECK_EQ(weir_http_client_do(c, &bad[0], NULL), -EINVAL);
    /* Nothing listens on port 1. */
    CHECK_EQ(weir_http_get(c, "http://127.0.0.1:1/", deadline_ms(LONG_MS), &r), -ECONNREFUSED);
    CHECK(strstr(r.error, "connect") != NULL);
    weir_http_client_free(c);
    return 0;
}

TEST(bad_urls_and_requests)
{
    CHECK_EQ(test_run_main(bad_urls_main, NULL), 0);
}

TEST(needs_a_fiber)
{
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    weir_http_client_resp r;
    CHECK_EQ(weir_http_get(c, "http://127.0.0.1:1/", 0, &r), -EINVAL);
    CHECK(strstr(r.error, "fiber") != NULL);
    weir_http_client_stats st;
    CHECK_EQ(weir_http_client_stats_get(c, &st), 0); /* works anywhere */
    weir_http_client_free(c);
    /* bad options */
    CHECK(weir_http_client_new(&(weir_http_client_opts){.max_conns = -1}) == NULL);
    CHECK_EQ(errno, EINVAL);
    CHECK(weir_http_client_new(&(weir_http_client_opts){.idle_ms = -5}) == NULL);
    CHECK(weir_http_client_new(&(weir_http_client_opts){.bearer_token = "a b"}) == NULL);
    CHECK_EQ(errno, EINVAL);
    /* The environment is not read: its token cannot fail (or reach) us. */
    setenv("WEIR_AUTH_TOKEN", "tok\r\nX-Evil: 1", 1);
    c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    weir_http_client_free(c);
    unsetenv("WEIR_AUTH_TOKEN");
    /* A User-Agent with a control character is refused at once, not by
     * every request; spaces and tabs are fine. */
    static const char *const bad_ua[] = {"weir\r\nX-Evil: 1", "weir\n", "a\x01b", "del\x7f"};
    for (size_t i = 0; i < sizeof(bad_ua) / sizeof(bad_ua[0]); i++) {
        errno = 0;
        CHECK(weir_http_client_new(&(weir_http_client_opts){.user_agent = bad_ua[i]}) == NULL);
        CHECK_EQ(errno, EINVAL);
    }
    c = weir_http_client_new(&(weir_http_client_opts){.user_agent = "my tool/1.0 (x;\ty)"});
    CHECK(c != NULL);
    weir_http_client_free(c);
    weir_http_client_free(NULL);
}

static intptr_t names_main(void *arg)
{
    (void)arg;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    weir_http_client_resp r;
    char u[128];
    snprintf(u, sizeof(u), "http://LocalHost:%d/auth", ngx->port);
    get_ok(c, u, &r);
    char want[64];
    snprintf(want, sizeof(want), "host=[localhost:%d]", ngx->port);
    CHECK(strstr(r.body, want) != NULL);
    weir_http_client_resp_free(&r);
    if (ngx->ipv6) {
        snprintf(u, sizeof(u), "http://[::1]:%d/auth", ngx->port);
        get_ok(c, u, &r);
        snprintf(want, sizeof(want), "host=[[::1]:%d]", ngx->port);
        CHECK(strstr(r.body, want) != NULL);
        weir_http_client_resp_free(&r);
        snprintf(u, sizeof(u), "http://[0:0::1]:%d/hello", ngx->port);
        get_ok(c, u, &r);
        weir_http_client_resp_free(&r);
    } else {
        printf("    (no IPv6 loopback: [::1] skipped)\n");
    }
    /* A name that does not resolve. */
    int rc = weir_http_get(c, "http://no-such-host.invalid/", deadline_ms(LONG_MS), &r);
    CHECK(rc == WEIR_ERESOLVE || rc == -EAGAIN || rc == WEIR_ENOADDR);
    weir_http_client_free(c);
    return 0;
}

TEST(host_names_and_ipv6_literals)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(names_main, NULL), 0);
}

static intptr_t auth_main(void *arg)
{
    (void)arg;
    weir_http_client_resp r;
    /* $WEIR_AUTH_TOKEN is not picked up: a client reaching third parties
     * must not hand them the token of its own service. */
    setenv("WEIR_AUTH_TOKEN", "env-token", 1);
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    get_ok(c, URL("/auth"), &r);
    CHECK(strstr(r.body, "auth=[]") != NULL);
    weir_http_client_resp_free(&r);
    weir_http_client_free(c);

    /* The option is sent, with the caller's fields. */
    c = weir_http_client_new(&(weir_http_client_opts){.bearer_token = "opt-token"});
    CHECK(c != NULL);
    weir_http_header x = {{"X-Test", 6}, {"seen", 4}};
    weir_http_client_req q = {.url = URL("/auth"), .headers = &x, .nheaders = 1};
    CHECK_EQ(weir_http_client_do(c, &q, &r), 0);
    CHECK(strstr(r.body, "auth=[Bearer opt-token]") != NULL);
    CHECK(strstr(r.body, "x=[seen]") != NULL);
    weir_http_client_resp_free(&r);
    /* The caller's own Authorization wins. */
    weir_http_header a = {{"authorization", 13}, {"Basic Zm9v", 10}};
    q.headers = &a;
    CHECK_EQ(weir_http_client_do(c, &q, &r), 0);
    CHECK(strstr(r.body, "auth=[Basic Zm9v]") != NULL);
    weir_http_client_resp_free(&r);
    weir_http_client_free(c);

    /* A tool that wants the variable says so. */
    c = weir_http_client_new(&(weir_http_client_opts){.bearer_token = getenv("WEIR_AUTH_TOKEN")});
    CHECK(c != NULL);
    get_ok(c, URL("/auth"), &r);
    CHECK(strstr(r.body, "auth=[Bearer env-token]") != NULL);
    weir_http_client_resp_free(&r);
    weir_http_client_free(c);
    /* "" sends none, and so does the same pattern with the variable unset
     * or empty. */
    c = weir_http_client_new(&(weir_http_client_opts){.bearer_token = ""});
    get_ok(c, URL("/auth"), &r);
    CHECK(strstr(r.body, "auth=[]") != NULL);
    weir_http_client_resp_free(&r);
    weir_http_client_free(c);
    setenv("WEIR_AUTH_TOKEN", "", 1);
    c = weir_http_client_new(&(weir_http_client_opts){.bearer_token = getenv("WEIR_AUTH_TOKEN")});
    get_ok(c, URL("/auth"), &r);
    CHECK(strstr(r.body, "auth=[]") != NULL);
    weir_http_client_resp_free(&r);
    weir_http_client_free(c);
    unsetenv("WEIR_AUTH_TOKEN");
    c = weir_http_client_new(&(weir_http_client_opts){.bearer_token = getenv("WEIR_AUTH_TOKEN")});
    get_ok(c, URL("/auth"), &r);
    CHECK(strstr(r.body, "auth=[]") != NULL);
    weir_http_client_resp_free(&r);
    weir_http_client_free(c);
    return 0;
}

TEST(bearer_token_only_when_given)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(auth_main, NULL), 0);
}

static intptr_t user_agent_main(void *arg)
{
    (void)arg;
    weir_http_client_resp r;
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    get_ok(c, URL("/ua"), &r);
    CHECK_STR(r.body, "ua=[weir/0.1]\n");
    weir_http_client_resp_free(&r);
    weir_http_client_free(c);
    c = weir_http_client_new(&(weir_http_client_opts){.user_agent = "my tool/1.0 (linux)"});
    CHECK(c != NULL);
    get_ok(c, URL("/ua"), &r);
    CHECK_STR(r.body, "ua=[my tool/1.0 (linux)]\n");
    weir_http_client_resp_free(&r);
    weir_http_client_free(c);
    c = weir_http_client_new(&(weir_http_client_opts){.user_agent = ""});
    CHECK(c != NULL);
    get_ok(c, URL("/ua"), &r);
    CHECK_STR(r.body, "ua=[]\n");
    weir_http_client_resp_free(&r);
    weir_http_client_free(c);
    return 0;
}

TEST(user_agent_sent_as_given)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(user_agent_main, NULL), 0);
}

/* ---- the transport seam --------------------------------------------------------------- */
typedef struct counting {
    atomic_int connects, reads, writes, closes, checks;
} counting;

static counting cnt;

static int count_connect(void *ctx, const char *host, int port, int64_t deadline, void **conn)
{
    counting *k = ctx;
    atomic_fetch_add(&k->connects, 1);
    return weir_http_tcp_transport.connect(weir_http_tcp_transport.ctx, host, port, deadline, conn);
}

static ssize_t count_read(void *conn, void *buf, size_t len, int64_t deadline)
{
    atomic_fetch_add(&cnt.reads, 1);
    return weir_http_tcp_transport.read(conn, buf, len, deadline);
}

static ssize_t count_write(void *conn, const void *buf, size_t len, int64_t deadline)
{
    atomic_fetch_add(&cnt.writes, 1);
    return weir_http_tcp_transport.write(conn, buf, len, deadline);
}

static void count_close(void *conn)
{
    atomic_fetch_add(&cnt.closes, 1);
    weir_http_tcp_transport.close(conn);
}

static int count_idle_check(void *conn)
{
    atomic_fetch_add(&cnt.checks, 1);
    return weir_http_tcp_transport.idle_check(conn);
}

static intptr_t transport_main(void *arg)
{
    (void)arg;
    weir_http_transport tr = {.connect = count_connect,
                              .read = count_read,
                              .write = count_write,
                              .close = count_close,
                              .ctx = &cnt,
                              .idle_check = count_idle_check};
    weir_http_client *c = weir_http_client_new(&(weir_http_client_opts){.https = &tr});
    CHECK(c != NULL);
    char u[128];
    /* nginx speaks plain HTTP on this port; the test transport is plain TCP
     * too, so https:// works end to end through it. */
    snprintf(u, sizeof(u), "https://127.0.0.1:%d/auth", ngx->port);
    weir_http_client_resp r;
    for (int i = 0; i < 3; i++) {
        get_ok(c, u, &r);
        char want[64];
        snprintf(want, sizeof(want), "host=[127.0.0.1:%d]", ngx->port);
        CHECK(strstr(r.body, want) != NULL);
        weir_http_client_resp_free(&r);
    }
    CHECK_EQ(atomic_load(&cnt.connects), 1);
    CHECK_GE(atomic_load(&cnt.writes), 3);
    CHECK_GE(atomic_load(&cnt.reads), 3);
    CHECK_EQ(atomic_load(&cnt.closes), 0);
    CHECK_EQ(atomic_load(&cnt.checks), 2); /* each reuse is checked first */
    /* http:// to the same host:port is another pool on the built-in TCP. */
    get_ok(c, URL("/hello"), &r);
    weir_http_client_resp_free(&r);
    CHECK_EQ(atomic_load(&cnt.connects), 1);
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.opened, 2);
    CHECK_EQ(st.reused, 2);
    /* A connect failure through the transport. */
    CHECK_EQ(weir_http_get(c, "https://127.0.0.1:1/", deadline_ms(LONG_MS), &r), -ECONNREFUSED);
    CHECK_EQ(atomic_load(&cnt.connects), 2);
    weir_http_client_free(c); /* closes the idle connections */
    CHECK_EQ(atomic_load(&cnt.closes), 1);
    return 0;
}

TEST(transport_seam_for_https)
{
    if (have_nginx())
        CHECK_EQ(test_run_main(transport_main, NULL), 0);
}

/* Every request on a 2-thread runtime at once, mixed: the pool's state is
 * touched from both threads (TSan watches this one). */
#define NMIX 16
typedef struct mix {
    weir_http_client *c;
    int rc[NMIX];
} mix;

typedef struct mix_arg {
    mix *m;
    int i;
} mix_arg;

static intptr_t mix_one(void *arg)
{
    mix_arg *a = arg;
    weir_http_client_resp r;
    int rc = 0;
    for (int k = 0; k < 10 && rc == 0; k++) {
        switch ((a->i + k) % 3) {
        case 0:
            rc = weir_http_get(a->m->c, URL("/hello"), deadline_ms(60000), &r);
            break;
        case 1:
            rc = weir_http_post(a->m->c, URL("/echo"), NULL, "mixed", 5, deadline_ms(60000), &r);
            if (rc == 0 && strcmp(r.body, "mixed") != 0)
                rc = -EBADMSG;
            break;
        default:
            rc = weir_http_get(a->m->c, URL("/chunked"), deadline_ms(60000), &r);
            break;
        }
        weir_http_client_resp_free(&r);
    }
    a->m->rc[a->i] = rc;
    return 0;
}

static intptr_t mix_main(void *arg)
{
    (void)arg;
    mix m = {.c = weir_http_client_new(&(weir_http_client_opts){.max_conns = 4})};
    CHECK(m.c != NULL);
    mix_arg args[NMIX];
    weir_task *t[NMIX];
    for (int i = 0; i < NMIX; i++) {
        args[i] = (mix_arg){&m, i};
        t[i] = test_spawn(mix_one, &args[i]);
    }
    for (int i = 0; i < NMIX; i++)
        CHECK_EQ(weir_task_join(t[i], NULL, WEIR_FOREVER), 0);
    for (int i = 0; i < NMIX; i++)
        CHECK_EQ(m.rc[i], 0);
    weir_http_client_stats st = stats(m.c);
    CHECK_EQ(st.requests, NMIX * 10);
    CHECK_LE(st.opened, 4);
    CHECK_EQ(st.open_now, st.idle_now);
    weir_http_client_free(m.c);
    return 0;
}

TEST(mixed_requests_two_threads)
{
    if (have_nginx())
        CHECK_EQ(run_on_rt(2, mix_main, NULL), 0);
}

/* Pools made and freed over and over from two threads: every request is
 * Connection: close, so a pool empties whenever its last user leaves, while
 * others wait for its two permits; and idle_ms is short, so sweeps run from
 * both threads. TSan watches the pool's lifetime here. */
#define NCHURN 8
static intptr_t churn_one(void *arg)
{
    mix_arg *a = arg;
    weir_http_header close_h = {{"Connection", 10}, {"close", 5}};
    weir_http_client_resp r;
    int rc = 0;
    for (int k = 0; k < 25 && rc == 0; k++) {
        int port = (a->i + k) % 2 ? ngx->port : ngx->port_short;
        weir_http_client_req q = {.url = url_of((char[256]){0}, 256, port, "/hello"),
                                  .headers = (a->i + k) % 3 ? &close_h : NULL,
                                  .nheaders = (a->i + k) % 3 ? 1 : 0,
                                  .deadline = deadline_ms(60000)};
        rc = weir_http_client_do(a->m->c, &q, &r);
        weir_http_client_resp_free(&r);
        if (k % 5 == 4)
            weir_time_sleep(3 * WEIR_MSEC);
    }
    a->m->rc[a->i] = rc;
    return 0;
}

static intptr_t churn_main(void *arg)
{
    (void)arg;
    mix m = {.c = weir_http_client_new(&(weir_http_client_opts){.max_conns = 2, .idle_ms = 4})};
    CHECK(m.c != NULL);
    mix_arg args[NCHURN];
    weir_task *t[NCHURN];
    for (int i = 0; i < NCHURN; i++) {
        args[i] = (mix_arg){&m, i};
        t[i] = test_spawn(churn_one, &args[i]);
    }
    for (int i = 0; i < NCHURN; i++)
        CHECK_EQ(weir_task_join(t[i], NULL, WEIR_FOREVER), 0);
    for (int i = 0; i < NCHURN; i++)
        CHECK_EQ(m.rc[i], 0);
    weir_http_client_stats st = stats(m.c);
    CHECK_EQ(st.requests, NCHURN * 25);
    CHECK_EQ(st.waiting_now, 0);
    CHECK_LE(st.pools_now, 2);
    CHECK_EQ(st.pools_now > 0, st.idle_now > 0); /* a pool left holds a connection */
    weir_time_sleep(20 * WEIR_MSEC);
    weir_http_client_resp r;
    get_ok(m.c, URL("/hello"), &r); /* the sweep: the rest expire, their pools go */
    weir_http_client_resp_free(&r);
    st = stats(m.c);
    CHECK_EQ(st.pools_now, 1);
    CHECK_EQ(st.open_now, 1);
    weir_http_client_free(m.c);
    return 0;
}

TEST(pools_made_and_freed_two_threads)
{
    if (have_nginx())
        CHECK_EQ(run_on_rt(2, churn_main, NULL), 0);
}

/* ---- a body taken as it arrives (on_body) ----------------------------------------------- */
/* GET /ticks?n=N: a stream of "tick I\n" lines 5 ms apart, N of them
 * (0: until the client goes); GET /missing: a 404 with its text. */
static int h_ticks(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    char n[16] = "0";
    if (weir_http_req_query(req, "n", n, sizeof(n)) < 0)
        return weir_http_res_text(res, 400, "n?");
    int max = atoi(n), e = weir_http_res_stream_start(res, 200, "text/plain");
    for (int i = 0; e == 0 && (max == 0 || i < max); i++) {
        char line[32];
        int len = snprintf(line, sizeof(line), "tick %d\n", i);
        if ((e = weir_http_res_stream_write(res, line, (size_t)len)) == 0 &&
            (e = weir_http_res_stream_wait(res, weir_time_after_ms(5))) == -ETIMEDOUT)
            e = 0;
    }
    return e == -ECANCELED || e == -EPIPE || e == -ECONNRESET ? 0 : e;
}

static int h_missing(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req;
    (void)arg;
    return weir_http_res_text(res, 404, "no such thing");
}

typedef struct taker {
    char got[4096];
    size_t len;
    int calls, lines, stop_at, fail;
} taker;

static int take(void *arg, const void *data, size_t len)
{
    taker *t = arg;
    t->calls++;
    if (t->fail)
        return t->fail;
    CHECK_LT(t->len + len, sizeof(t->got));
    memcpy(t->got + t->len, data, len);
    t->len += len;
    t->got[t->len] = '\0';
    for (size_t i = 0; i < len; i++)
        t->lines += ((const char *)data)[i] == '\n';
    return t->stop_at && t->lines >= t->stop_at ? 1 : 0;
}

static intptr_t on_body_main(void *arg)
{
    (void)arg;
    weir_http_server *s = weir_http_server_new(NULL);
    CHECK(s != NULL);
    CHECK_EQ(weir_http_route(s, "GET", "/ticks", h_ticks, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/missing", h_missing, NULL, 0), 0);
    CHECK_EQ(weir_http_server_start(s), 0);
    int port = weir_http_server_port(s);
    char url[128];
    /* max_response 32: a streamed body is not held to it, a whole one is. */
    weir_http_client *c = weir_http_client_new(&(weir_http_client_opts){.max_response = 32});
    CHECK(c != NULL);
    weir_http_client_resp r;

    /* To its end: every line, nothing kept in resp->body, the connection pooled. */
    taker t = {0};
    weir_http_client_req q = {.url = url_of(url, sizeof(url), port, "/ticks?n=20"),
                              .deadline = deadline_ms(LONG_MS),
                              .on_body = take,
                              .on_body_arg = &t};
    CHECK_EQ(weir_http_client_do(c, &q, &r), 0);
    CHECK_EQ(r.status, 200);
    CHECK_EQ(r.body_len, 0);
    CHECK_STR(r.body, "");
    CHECK_STR(weir_http_client_resp_header(&r, "content-type"), "text/plain");
    CHECK_EQ(t.lines, 20);
    CHECK(strncmp(t.got, "tick 0\ntick 1\n", 14) == 0);
    CHECK(strstr(t.got, "tick 19\n") != NULL);
    CHECK_GT(t.len, 32);
    weir_http_client_resp_free(&r);
    /* Without on_body the same body is over max_response. */
    q.on_body = NULL;
    CHECK_EQ(weir_http_client_do(c, &q, &r), -EMSGSIZE);
    weir_http_client_resp_free(&r);

    /* Stopped after 3 lines of an endless stream: 0, and the connection closed. */
    t = (taker){.stop_at = 3};
    q = (weir_http_client_req){.url = url_of(url, sizeof(url), port, "/ticks?n=0"),
                               .deadline = deadline_ms(LONG_MS),
                               .on_body = take,
                               .on_body_arg = &t};
    CHECK_EQ(weir_http_client_do(c, &q, &r), 0);
    CHECK_EQ(r.status, 200);
    CHECK_GE(t.lines, 3);
    weir_http_client_resp_free(&r);
    weir_http_client_stats st = stats(c);
    CHECK_EQ(st.idle_now, 0); /* not pooled */
    CHECK_EQ(st.open_now, 0);

    /* The deadline bounds an endless stream; what arrived was given. */
    t = (taker){0};
    q.deadline = deadline_ms(100);
    CHECK_EQ(weir_http_client_do(c, &q, &r), -ETIMEDOUT);
    CHECK_GT(t.lines, 0);
    weir_http_client_resp_free(&r);

    /* A negative return fails the call with it. */
    t = (taker){.fail = -EPROTO};
    q.deadline = deadline_ms(LONG_MS);
    CHECK_EQ(weir_http_client_do(c, &q, &r), -EPROTO);
    CHECK_EQ(t.calls, 1);
    weir_http_client_resp_free(&r);

    /* Another status: the body whole, on_body never called. */
    t = (taker){0};
    q.url = url_of(url, sizeof(url), port, "/missing");
    CHECK_EQ(weir_http_client_do(c, &q, &r), 0);
    CHECK_EQ(r.status, 404);
    CHECK_STR(r.body, "no such thing");
    CHECK_EQ(t.calls, 0);
    weir_http_client_resp_free(&r);

    weir_http_client_free(c);
    CHECK_EQ(weir_http_server_stop(s, deadline_ms(5000)), 0);
    weir_http_server_free(s);
    return 0;
}

TEST(on_body_takes_a_stream_as_it_arrives)
{
    CHECK_EQ(test_run_main(on_body_main, NULL), 0);
}

TEST_MAIN()
