/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_http_tls.c - weir's HTTPS transport (weir_http_tls_transport_init)
 * under the HTTP client, against a TLS server made here with
 * weir_tls_accept that answers every request with a canned response:
 * a request over https, keep-alive reuse of the TLS connection (TLS 1.3
 * session tickets that arrive after the handshake are not taken for
 * unasked bytes), bytes sent after a response found by the idle check, a
 * certificate for another host and an untrusted authority refused with
 * the TLS layer's message, mutual TLS, and https:// without a transport.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "test_certs.h"
#include "test_rt.h"
#include "weir/http.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/rt.h"
#include "weir/tls.h"

#define LONG_MS 10000
#define MAXC    8

typedef struct server {
    weir_tls_ctx *ctx;
    int lfd, port;
    const char *extra; /* sent after every response: bytes nobody asked for */
    weir_task *acceptor;
    weir_task *conns[MAXC];
    int nconns;
    atomic_int requests, handshakes_failed, extras_sent;
} server;

typedef struct sconn {
    server *s;
    int fd;
} sconn;

static intptr_t sconn_main(void *arg)
{
    sconn *k = arg;
    server *s = k->s;
    weir_tls *t = NULL;
    char msg[512];
    if (weir_tls_accept(s->ctx, k->fd, weir_time_after_ms(LONG_MS), &t, msg, sizeof(msg)) < 0) {
        atomic_fetch_add(&s->handshakes_failed, 1);
        goto out;
    }
    char buf[4096];
    size_t len = 0;
    for (;;) {
        char *end = len ? memmem(buf, len, "\r\n\r\n", 4) : NULL;
        if (!end) {
            if (len == sizeof(buf))
                break;
            ssize_t n = weir_tls_read(t, buf + len, sizeof(buf) - len, weir_time_after_ms(LONG_MS));
            if (n <= 0)
                break;
            len += (size_t)n;
            continue;
        }
        size_t used = (size_t)(end + 4 - buf);
        memmove(buf, buf + used, len - used);
        len -= used;
        atomic_fetch_add(&s->requests, 1);
        const char *resp = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        if (weir_tls_write(t, resp, strlen(resp), weir_time_after_ms(LONG_MS)) < 0)
            break;
        if (s->extra &&
            weir_tls_write(t, s->extra, strlen(s->extra), weir_time_after_ms(LONG_MS)) < 0)
            break;
        if (s->extra)
            atomic_fetch_add(&s->extras_sent, 1);
    }
out:
    weir_tls_free(t);
    weir_io_close(k->fd);
    free(k);
    return 0;
}

static intptr_t acceptor_main(void *arg)
{
    server *s = arg;
    for (;;) {
        int fd = weir_net_accept(s->lfd, NULL, WEIR_FOREVER);
        if (fd < 0)
            return 0; /* cancelled */
        CHECK_LT(s->nconns, MAXC);
        sconn *k = malloc(sizeof(*k));
        CHECK(k != NULL);
        *k = (sconn){s, fd};
        s->conns[s->nconns] = weir_task_spawn(sconn_main, k, NULL);
        CHECK(s->conns[s->nconns] != NULL);
        s->nconns++;
    }
}

/* A server with cert name.pem/.key; client_ca: require client certificates. */
static void server_start(server *s, const char *name, const char *client_ca)
{
    char cert[64], key[64], msg[512];
    snprintf(cert, sizeof(cert), "%s.pem", name);
    snprintf(key, sizeof(key), "%s.key", name);
    weir_tls_opts o = {.cert_file = certs_file(cert),
                       .key_file = certs_file(key),
                       .ca_file = client_ca ? certs_file(client_ca) : NULL};
    s->ctx = weir_tls_ctx_new(1, &o, msg, sizeof(msg));
    if (!s->ctx)
        fprintf(stderr, "server ctx: %s\n", msg);
    CHECK(s->ctx != NULL);
    s->lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(s->lfd, 0);
    s->port = weir_net_local_port(s->lfd);
    s->acceptor = weir_task_spawn(acceptor_main, s, NULL);
    CHECK(s->acceptor != NULL);
}

/* After the clients are freed (their connections closed). */
static void server_stop(server *s)
{
    weir_task_cancel(s->acceptor);
    int j = weir_task_join(s->acceptor, NULL, WEIR_FOREVER);
    CHECK(j == 0 || j == -ECANCELED);
    for (int i = 0; i < s->nconns; i++)
        CHECK_EQ(weir_task_join(s->conns[i], NULL, WEIR_FOREVER), 0);
    weir_io_close(s->lfd);
    weir_tls_ctx_free(s->ctx);
}

typedef struct client {
    weir_tls_ctx *ctx;
    weir_http_transport tr;
    weir_http_client *http;
} client;

static void client_new(client *c, const char *ca, const char *cert)
{
    char msg[512], pem[64], key[64];
    weir_tls_opts o = {.ca_file = certs_file(ca)};
    if (cert) {
        snprintf(pem, sizeof(pem), "%s.pem", cert);
        snprintf(key, sizeof(key), "%s.key", cert);
        o.cert_file = certs_file(pem);
        o.key_file = certs_file(key);
    }
    c->ctx = weir_tls_ctx_new(0, &o, msg, sizeof(msg));
    if (!c->ctx)
        fprintf(stderr, "client ctx: %s\n", msg);
    CHECK(c->ctx != NULL);
    CHECK_EQ(weir_http_tls_transport_init(&c->tr, c->ctx), 0);
    c->http = weir_http_client_new(&(weir_http_client_opts){.https = &c->tr});
    CHECK(c->http != NULL);
}

static void client_free(client *c)
{
    weir_http_client_free(c->http);
    weir_tls_ctx_free(c->ctx);
}

static const char *url(char *buf, const char *host, int port)
{
    snprintf(buf, 128, "https://%s:%d/x", host, port);
    return buf;
}

static weir_http_client_stats stats(weir_http_client *c)
{
    weir_http_client_stats st;
    CHECK_EQ(weir_http_client_stats_get(c, &st), 0);
    return st;
}

static void get_ok(client *c, const char *u)
{
    weir_http_client_resp r;
    int rc = weir_http_get(c->http, u, weir_time_after_ms(LONG_MS), &r);
    if (rc != 0)
        fprintf(stderr, "GET %s: %s (%s)\n", u, weir_net_strerror(rc), r.error);
    CHECK_EQ(rc, 0);
    CHECK_EQ(r.status, 200);
    CHECK_EQ(r.body_len, 5);
    CHECK_EQ(strcmp(r.body, "hello"), 0);
    weir_http_client_resp_free(&r);
}

/* ---- tests ---------------------------------------------------------------------------- */
static intptr_t good_main(void *arg)
{
    (void)arg;
    server s = {0};
    server_start(&s, "server", NULL);
    client c;
    client_new(&c, "ca.pem", NULL);
    char u[128];
    get_ok(&c, url(u, "localhost", s.port));
    /* Let the server's session tickets arrive before the idle check. */
    weir_time_sleep(50 * WEIR_MSEC);
    get_ok(&c, url(u, "localhost", s.port));
    get_ok(&c, url(u, "localhost", s.port));
    weir_http_client_stats st = stats(c.http);
    CHECK_EQ(st.opened, 1);
    CHECK_EQ(st.reused, 2);
    CHECK_EQ(st.unasked, 0);
    CHECK_EQ(st.stale, 0);
    /* By IP literal: the certificate's IP subjectAltName. */
    get_ok(&c, url(u, "127.0.0.1", s.port));
    CHECK_EQ(stats(c.http).opened, 2);
    client_free(&c);
    server_stop(&s);
    CHECK_EQ(atomic_load(&s.requests), 4);
    return 0;
}

TEST(request_over_https_and_keep_alive_reuse)
{
    certs_make();
    CHECK_EQ(test_run_main(good_main, NULL), 0);
}

static intptr_t unasked_main(void *arg)
{
    (void)arg;
    server s = {.extra = "junk"};
    server_start(&s, "server", NULL);
    client c;
    client_new(&c, "ca.pem", NULL);
    char u[128];
    get_ok(&c, url(u, "localhost", s.port));
    /* The junk written (on loopback it is then in the client's socket). */
    int64_t deadline = weir_time_after_ms(LONG_MS);
    while (atomic_load(&s.extras_sent) < 1) {
        CHECK_LT(weir_time_now(), deadline);
        weir_time_sleep(WEIR_MSEC);
    }
    get_ok(&c, url(u, "localhost", s.port));
    weir_http_client_stats st = stats(c.http);
    CHECK_EQ(st.unasked, 1);
    CHECK_EQ(st.opened, 2);
    CHECK_EQ(st.reused, 0);
    client_free(&c);
    server_stop(&s);
    return 0;
}

TEST(bytes_after_a_response_are_found_by_the_idle_check)
{
    certs_make();
    CHECK_EQ(test_run_main(unasked_main, NULL), 0);
}

/* GET must fail with -EPROTO and a message holding every one of want[]. */
static void get_refused(client *c, const char *u, const char *const *want)
{
    weir_http_client_resp r;
    int rc = weir_http_get(c->http, u, weir_time_after_ms(LONG_MS), &r);
    printf("    %s: %s\n", u, r.error);
    CHECK_EQ(rc, -EPROTO);
    for (; *want; want++) {
        if (!strstr(r.error, *want))
            fprintf(stderr, "no \"%s\" in: %s\n", *want, r.error);
        CHECK(strstr(r.error, *want) != NULL);
    }
    weir_http_client_resp_free(&r);
}

static intptr_t refused_main(void *arg)
{
    (void)arg;
    server s = {0};
    server_start(&s, "other", NULL);
    client c;
    client_new(&c, "ca.pem", NULL);
    char u[128];
    get_refused(&c, url(u, "localhost", s.port),
                (const char *const[]){"TLS to localhost:", "other.example", NULL});
    get_refused(&c, url(u, "127.0.0.1", s.port), (const char *const[]){"10.0.0.1", NULL});
    client_free(&c);
    /* An authority that did not sign the server's certificate. */
    client_new(&c, "other-ca.pem", NULL);
    get_refused(&c, url(u, "localhost", s.port), (const char *const[]){"other-ca.pem", NULL});
    CHECK_EQ(stats(c.http).opened, 0);
    client_free(&c);
    server_stop(&s);
    CHECK_EQ(atomic_load(&s.requests), 0);
    return 0;
}

TEST(another_hosts_certificate_and_an_untrusted_authority_refused)
{
    certs_make();
    CHECK_EQ(test_run_main(refused_main, NULL), 0);
}

static intptr_t mutual_main(void *arg)
{
    (void)arg;
    server s = {0};
    server_start(&s, "server", "ca.pem");
    client c;
    char u[128];
    client_new(&c, "ca.pem", "client");
    get_ok(&c, url(u, "localhost", s.port));
    client_free(&c);
    client_new(&c, "ca.pem", NULL);
    weir_http_client_resp r;
    int rc = weir_http_get(c.http, url(u, "localhost", s.port), weir_time_after_ms(LONG_MS), &r);
    printf("    no client certificate: %d %s\n", rc, r.error);
    CHECK_LT(rc, 0);
    weir_http_client_resp_free(&r);
    client_free(&c);
    server_stop(&s);
    CHECK_EQ(atomic_load(&s.requests), 1);
    return 0;
}

TEST(mutual_tls_client_certificate)
{
    certs_make();
    CHECK_EQ(test_run_main(mutual_main, NULL), 0);
}

static intptr_t none_main(void *arg)
{
    (void)arg;
    weir_http_client *h = weir_http_client_new(NULL);
    weir_http_client_resp r;
    CHECK_EQ(weir_http_get(h, "https://127.0.0.1:1/", weir_time_after_ms(LONG_MS), &r),
             -EPROTONOSUPPORT);
    weir_http_client_resp_free(&r);
    weir_http_client_free(h);
    weir_http_transport t;
    CHECK_EQ(weir_http_tls_transport_init(&t, NULL), -EINVAL);
    CHECK_EQ(weir_http_tls_transport_init(NULL, NULL), -EINVAL);
    return 0;
}

TEST(https_without_a_transport)
{
    CHECK_EQ(test_run_main(none_main, NULL), 0);
}

TEST_MAIN()
