/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tls.c - TLS sessions (weir/tls.h) on loopback: data and frames both
 * ways (a 1 MiB frame, a reader and a writer fiber sharing each session on
 * a two-thread runtime), hostname checks by DNS name and IP literal, a
 * certificate for another host and an unknown authority refused with
 * messages that say what to fix, mutual TLS, a handshake deadline, a peer
 * that does not speak TLS, bad context inputs, a peer that closes in the
 * middle of a frame or without close_notify, and a reader cancelled out of
 * its wait. Handshakes run on fibers of the default (64 KiB) stack.
 *
 * The certificates are made here with OpenSSL's C API (EC P-256) and
 * written as PEM into a temporary directory: no openssl command needed.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "test.h"
#include "test_certs.h"
#include "test_rt.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/rt.h"
#include "weir/tls.h"

static int64_t after_ms(int64_t ms)
{
    return weir_time_after_ms(ms);
}

static intptr_t join(weir_task *t)
{
    intptr_t v = -1;
    CHECK_EQ(weir_task_join(t, &v, WEIR_FOREVER), 0);
    return v;
}

/* A fiber of the default stack size: TLS must work in one. */
static weir_task *spawn(weir_task_fn fn, void *arg)
{
    weir_task *t = weir_task_spawn(fn, arg, NULL);
    CHECK(t != NULL);
    return t;
}

/* ---- certificates --------------------------------------------------------------------- */
/* test_certs.h's set (ca, other-ca, server, other, client, rogue), and
 * stray.key, a key no certificate goes with, and empty.pem, no certificate. */
static void make_certs(void)
{
    static int made;
    if (made++)
        return;
    certs_make();
    EVP_PKEY *stray = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    CHECK(stray != NULL);
    FILE *f = fopen(certs_file("stray.key"), "w");
    CHECK(f != NULL);
    CHECK_EQ(PEM_write_PrivateKey(f, stray, NULL, NULL, 0, NULL, NULL), 1);
    CHECK_EQ(fclose(f), 0);
    EVP_PKEY_free(stray);
    f = fopen(certs_file("empty.pem"), "w");
    CHECK(f != NULL);
    fputs("not a certificate\n", f);
    fclose(f);
}

static weir_tls_ctx *server_ctx(const char *name, const char *ca)
{
    char cert[64], key[64], msg[512];
    snprintf(cert, sizeof(cert), "%s.pem", name);
    snprintf(key, sizeof(key), "%s.key", name);
    weir_tls_opts o = {.cert_file = certs_file(cert),
                       .key_file = certs_file(key),
                       .ca_file = ca ? certs_file(ca) : NULL};
    weir_tls_ctx *c = weir_tls_ctx_new(1, &o, msg, sizeof(msg));
    if (!c)
        fprintf(stderr, "server ctx: %s\n", msg);
    CHECK(c != NULL);
    return c;
}

static weir_tls_ctx *client_ctx(const char *ca, const char *name, int no_verify_hostname)
{
    char cert[64], key[64], msg[512];
    weir_tls_opts o = {.ca_file = certs_file(ca), .no_verify_hostname = no_verify_hostname};
    if (name) {
        snprintf(cert, sizeof(cert), "%s.pem", name);
        snprintf(key, sizeof(key), "%s.key", name);
        o.cert_file = certs_file(cert);
        o.key_file = certs_file(key);
    }
    weir_tls_ctx *c = weir_tls_ctx_new(0, &o, msg, sizeof(msg));
    if (!c)
        fprintf(stderr, "client ctx: %s\n", msg);
    CHECK(c != NULL);
    return c;
}

/* ---- a connection --------------------------------------------------------------------- */
struct conn {
    weir_tls_ctx *sctx, *cctx;
    const char *host;
    int64_t accept_deadline;
    int raw_client; /* connect without TLS; send `garbage` if set */
    const char *garbage;
    int lfd, sfd, cfd;
    int srv_rc, cli_rc;
    weir_tls *srv, *cli;
    char srv_msg[1024], cli_msg[1024];
};

static intptr_t accept_fiber(void *arg)
{
    struct conn *c = arg;
    c->sfd = weir_net_accept(c->lfd, NULL, after_ms(10000));
    CHECK_GE(c->sfd, 0);
    int64_t dl = c->accept_deadline ? c->accept_deadline : after_ms(10000);
    c->srv_rc = weir_tls_accept(c->sctx, c->sfd, dl, &c->srv, c->srv_msg, sizeof(c->srv_msg));
    return 0;
}

/* Listen, connect, handshake both sides (the server in its own fiber). */
static void conn_open(struct conn *c)
{
    c->lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(c->lfd, 0);
    int port = weir_net_local_port(c->lfd);
    CHECK_GT(port, 0);
    weir_task *srv = spawn(accept_fiber, c);
    c->cfd = weir_net_connect("127.0.0.1", port, after_ms(10000));
    CHECK_GE(c->cfd, 0);
    if (c->raw_client) {
        if (c->garbage)
            CHECK_EQ(weir_io_send(c->cfd, c->garbage, strlen(c->garbage), 0, after_ms(5000)),
                     (ssize_t)strlen(c->garbage));
    } else {
        c->cli_rc = weir_tls_connect(c->cctx, c->cfd, c->host ? c->host : "localhost",
                                     after_ms(10000), &c->cli, c->cli_msg, sizeof(c->cli_msg));
    }
    join(srv);
}

static void conn_close(struct conn *c)
{
    weir_tls_free(c->cli);
    weir_tls_free(c->srv);
    c->cli = c->srv = NULL;
    CHECK_EQ(weir_io_close(c->cfd), 0);
    CHECK_EQ(weir_io_close(c->sfd), 0);
    CHECK_EQ(weir_io_close(c->lfd), 0);
}

/* A byte from the client to the server and one back. */
static void ping(struct conn *c)
{
    char b = 0;
    CHECK_EQ(weir_tls_write(c->cli, "p", 1, after_ms(5000)), 0);
    CHECK_EQ(weir_tls_read(c->srv, &b, 1, after_ms(5000)), 1);
    CHECK_EQ(b, 'p');
    CHECK_EQ(weir_tls_write(c->srv, "q", 1, after_ms(5000)), 0);
    CHECK_EQ(weir_tls_read(c->cli, &b, 1, after_ms(5000)), 1);
    CHECK_EQ(b, 'q');
}

static void expect_ok(struct conn *c)
{
    if (c->srv_rc || c->cli_rc)
        fprintf(stderr, "server %d %s | client %d %s\n", c->srv_rc, c->srv_msg, c->cli_rc,
                c->cli_msg);
    CHECK_EQ(c->srv_rc, 0);
    CHECK_EQ(c->cli_rc, 0);
    ping(c);
}

/* ---- frames --------------------------------------------------------------------------- */
/* Frame seq of n payload bytes: kind 7, u32 seq, then bytes (seq + i). */
static uint8_t *make_frame(uint32_t seq, size_t n, size_t *len)
{
    CHECK_GE(n, 5);
    uint8_t *f = malloc(n + 4);
    CHECK(f != NULL);
    f[0] = (uint8_t)(n >> 24);
    f[1] = (uint8_t)(n >> 16);
    f[2] = (uint8_t)(n >> 8);
    f[3] = (uint8_t)n;
    f[4] = 7;
    f[5] = (uint8_t)(seq >> 24);
    f[6] = (uint8_t)(seq >> 16);
    f[7] = (uint8_t)(seq >> 8);
    f[8] = (uint8_t)seq;
    for (size_t i = 9; i < n + 4; i++)
        f[i] = (uint8_t)(seq + i);
    *len = n + 4;
    return f;
}

static void check_frame(const weir_frame *fr, uint32_t seq, size_t n)
{
    CHECK_EQ(fr->len, n);
    CHECK_EQ(fr->data[0], 7);
    uint32_t s = (uint32_t)fr->data[1] << 24 | (uint32_t)fr->data[2] << 16 |
                 (uint32_t)fr->data[3] << 8 | fr->data[4];
    CHECK_EQ(s, seq);
    for (size_t i = 5; i < n; i++)
        if (fr->data[i] != (uint8_t)(seq + i + 4))
            TEST__FAIL("frame %u byte %zu: %u", seq, i, fr->data[i]);
}

/* Echo frames back until the peer closes. */
static intptr_t echo_frames(void *arg)
{
    weir_tls *t = arg;
    weir_frame_parser p;
    weir_frame_parser_init(&p, &(weir_frame_limits){.max_first = WEIR_FRAME_MAX});
    for (;;) {
        weir_frame fr;
        ssize_t n = weir_tls_frame_read(t, &p, &fr, after_ms(10000));
        if (n == 0)
            break;
        CHECK_GT(n, 0);
        uint8_t *w = malloc(fr.len + 4);
        CHECK(w != NULL);
        w[0] = (uint8_t)(fr.len >> 24);
        w[1] = (uint8_t)(fr.len >> 16);
        w[2] = (uint8_t)(fr.len >> 8);
        w[3] = (uint8_t)fr.len;
        memcpy(w + 4, fr.data, fr.len);
        CHECK_EQ(weir_tls_frame_write(t, w, fr.len + 4, after_ms(10000)), 0);
        free(w);
        weir_frame_free(&fr);
    }
    weir_frame_parser_close(&p);
    CHECK_EQ(weir_tls_shutdown(t, after_ms(5000)), 0);
    return 0;
}

static intptr_t round_trip_main(void *arg)
{
    (void)arg;
    struct conn c = {.sctx = server_ctx("server", NULL), .cctx = client_ctx("ca.pem", NULL, 0)};
    conn_open(&c);
    expect_ok(&c);
    /* Bytes both ways, larger than a record (16 KiB). */
    size_t big = 200 * 1024;
    char *out = malloc(big), *in = malloc(big);
    CHECK(out && in);
    for (size_t i = 0; i < big; i++)
        out[i] = (char)(i * 31 + 5);
    weir_task *echo = NULL;
    CHECK_EQ(weir_tls_write(c.cli, out, 1000, after_ms(5000)), 0);
    size_t got = 0;
    while (got < 1000) {
        ssize_t n = weir_tls_read(c.srv, in + got, 1000 - got, after_ms(5000));
        CHECK_GT(n, 0);
        got += (size_t)n;
    }
    CHECK(memcmp(in, out, 1000) == 0);
    CHECK_EQ(weir_tls_fd(c.cli), c.cfd);
    CHECK_STR(weir_tls_last_error(c.cli), "");

    /* Frames: small ones and 1 MiB, echoed by the server. */
    echo = spawn(echo_frames, c.srv);
    weir_frame_parser p;
    weir_frame_parser_init(&p, &(weir_frame_limits){.max_first = WEIR_FRAME_MAX});
    size_t sizes[] = {5, 100, 16 * 1024, 16 * 1024 + 1, 1 << 20, 77};
    for (uint32_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t len;
        uint8_t *f = make_frame(i, sizes[i], &len);
        CHECK_EQ(weir_tls_frame_write(c.cli, f, len, after_ms(10000)), 0);
        free(f);
        weir_frame fr;
        CHECK_EQ(weir_tls_frame_read(c.cli, &p, &fr, after_ms(10000)), (ssize_t)sizes[i]);
        check_frame(&fr, i, sizes[i]);
        weir_frame_free(&fr);
    }
    /* Not a frame: the length bytes disagree. */
    CHECK_EQ(weir_tls_frame_write(c.cli, "\0\0\0\5ab", 6, after_ms(1000)), -EINVAL);
    /* A clean close: the server sees 0 at a frame boundary, shuts down too. */
    CHECK_EQ(weir_tls_shutdown(c.cli, after_ms(5000)), 0);
    join(echo);
    weir_frame fr;
    CHECK_EQ(weir_tls_frame_read(c.cli, &p, &fr, after_ms(5000)), 0);
    weir_frame_parser_close(&p);
    free(out);
    free(in);
    conn_close(&c);
    weir_tls_ctx_free(c.sctx);
    weir_tls_ctx_free(c.cctx);
    return 0;
}

TEST(round_trip_bytes_and_frames)
{
    make_certs();
    CHECK_EQ(test_run_main(round_trip_main, NULL), 0);
}

/* ---- a reader and a writer on each session, at once ----------------------------------- */
#define DUPLEX_FRAMES 3000

static size_t duplex_size(uint32_t i)
{
    if (i % 500 == 250)
        return 200 * 1024 + i;
    return 5 + (i * 7919u) % 12000;
}

static intptr_t duplex_writer(void *arg)
{
    weir_tls *t = arg;
    for (uint32_t i = 0; i < DUPLEX_FRAMES; i++) {
        size_t len;
        uint8_t *f = make_frame(i, duplex_size(i), &len);
        CHECK_EQ(weir_tls_frame_write(t, f, len, after_ms(20000)), 0);
        free(f);
        /* Loopback takes megabytes before a write must wait: let the
         * thread's other fibers run now and then (slow sanitizer builds). */
        if (i % 16 == 15)
            weir_task_yield();
    }
    return 0;
}

static intptr_t duplex_reader(void *arg)
{
    weir_tls *t = arg;
    weir_frame_parser p;
    weir_frame_parser_init(&p, &(weir_frame_limits){.max_first = WEIR_FRAME_MAX});
    for (uint32_t i = 0; i < DUPLEX_FRAMES; i++) {
        weir_frame fr;
        ssize_t n = weir_tls_frame_read(t, &p, &fr, after_ms(20000));
        CHECK_EQ(n, (ssize_t)duplex_size(i));
        check_frame(&fr, i, duplex_size(i));
        weir_frame_free(&fr);
        if (i % 16 == 15)
            weir_task_yield(); /* as the writer does */
    }
    weir_frame_parser_close(&p);
    return 0;
}

static intptr_t duplex_main(void *arg)
{
    (void)arg;
    struct conn c = {.sctx = server_ctx("server", NULL), .cctx = client_ctx("ca.pem", NULL, 0)};
    conn_open(&c);
    expect_ok(&c);
    weir_task *t[4] = {spawn(duplex_writer, c.cli), spawn(duplex_reader, c.cli),
                       spawn(duplex_writer, c.srv), spawn(duplex_reader, c.srv)};
    for (int i = 0; i < 4; i++)
        CHECK_EQ(join(t[i]), 0);
    conn_close(&c);
    weir_tls_ctx_free(c.sctx);
    weir_tls_ctx_free(c.cctx);
    return 0;
}

TEST(reader_and_writer_share_a_session)
{
    make_certs();
    /* Two scheduler threads: the four fibers really run in parallel. */
    CHECK_EQ(test_run_on_rt(2, duplex_main, NULL), 0);
}

/* ---- host names and authorities ------------------------------------------------------- */
struct hs_case {
    const char *server, *server_ca; /* server certificate name, its client CA */
    const char *client_ca, *client_cert;
    const char *host;
    int no_verify_hostname;
    struct conn c;
};

/* Handshake with the given certificates; leaves the result in hc->c. */
static intptr_t hs_main(void *arg)
{
    struct hs_case *h = arg;
    h->c.sctx = server_ctx(h->server, h->server_ca);
    h->c.cctx = client_ctx(h->client_ca, h->client_cert, h->no_verify_hostname);
    h->c.host = h->host;
    conn_open(&h->c);
    if (h->c.srv_rc == 0 && h->c.cli_rc == 0) {
        ping(&h->c);
    } else if (h->c.cli_rc == 0) {
        /* TLS 1.3: the client is done before the server checks its
         * certificate; the refusal arrives as an alert on the first read. */
        char b;
        h->c.cli_rc = (int)weir_tls_read(h->c.cli, &b, 1, after_ms(5000));
        snprintf(h->c.cli_msg, sizeof(h->c.cli_msg), "%s", weir_tls_last_error(h->c.cli));
    }
    conn_close(&h->c);
    weir_tls_ctx_free(h->c.sctx);
    weir_tls_ctx_free(h->c.cctx);
    return 0;
}

/* On a fiber of the default stack size (64 KiB), as the handshake's server
 * side always is here (spawn()): OpenSSL's handshake must fit in it. */
static intptr_t on_default_stack(void *arg)
{
    return join(weir_task_spawn(hs_main, arg, NULL));
}

static void handshake(struct hs_case *h)
{
    make_certs();
    CHECK_EQ(test_run_main(on_default_stack, h), 0);
}

TEST(hostname_by_dns_name_and_ip_literal)
{
    struct hs_case a = {.server = "server", .client_ca = "ca.pem", .host = "localhost"};
    handshake(&a);
    CHECK_EQ(a.c.srv_rc, 0);
    CHECK_EQ(a.c.cli_rc, 0);
    struct hs_case b = {.server = "server", .client_ca = "ca.pem", .host = "127.0.0.1"};
    handshake(&b);
    CHECK_EQ(b.c.srv_rc, 0);
    CHECK_EQ(b.c.cli_rc, 0);
}

TEST(certificate_for_another_host_is_refused)
{
    struct hs_case a = {.server = "other", .client_ca = "ca.pem", .host = "localhost"};
    handshake(&a);
    CHECK_EQ(a.c.cli_rc, -EPROTO);
    CHECK_HAS(a.c.cli_msg, "the certificate of localhost names DNS:other.example, IP:10.0.0.1 "
                           "but not localhost");
    CHECK_HAS(a.c.cli_msg, "connect by one of those names");
    CHECK_HAS(a.c.cli_msg, "reissue the certificate with localhost in its subjectAltName");
    CHECK_HAS(a.c.cli_msg, "hostname verification off");
    CHECK_NE(a.c.srv_rc, 0);

    struct hs_case b = {.server = "other", .client_ca = "ca.pem", .host = "127.0.0.1"};
    handshake(&b);
    CHECK_EQ(b.c.cli_rc, -EPROTO);
    CHECK_HAS(b.c.cli_msg, "names DNS:other.example, IP:10.0.0.1 but not 127.0.0.1");

    /* With hostname verification off the chain alone decides. */
    struct hs_case c = {
        .server = "other", .client_ca = "ca.pem", .host = "localhost", .no_verify_hostname = 1};
    handshake(&c);
    CHECK_EQ(c.c.cli_rc, 0);
    CHECK_EQ(c.c.srv_rc, 0);
}

TEST(unknown_authority_is_refused)
{
    struct hs_case a = {.server = "server", .client_ca = "other-ca.pem", .host = "localhost"};
    handshake(&a);
    CHECK_EQ(a.c.cli_rc, -EPROTO);
    CHECK_HAS(a.c.cli_msg, "the certificate of localhost");
    CHECK_HAS(a.c.cli_msg, "is not signed by the configured CA file");
    CHECK_HAS(a.c.cli_msg, "other-ca.pem");
    CHECK_NE(a.c.srv_rc, 0);
    /* No hostname check does not mean no chain check. */
    struct hs_case b = {.server = "server",
                        .client_ca = "other-ca.pem",
                        .host = "localhost",
                        .no_verify_hostname = 1};
    handshake(&b);
    CHECK_EQ(b.c.cli_rc, -EPROTO);
}

TEST(mutual_tls)
{
    /* No client certificate. */
    struct hs_case a = {
        .server = "server", .server_ca = "ca.pem", .client_ca = "ca.pem", .host = "localhost"};
    handshake(&a);
    CHECK_EQ(a.c.srv_rc, -EPROTO);
    CHECK_HAS(a.c.srv_msg, "the client presented no certificate");
    CHECK_HAS(a.c.srv_msg, "ca.pem");
    CHECK_EQ(a.c.cli_rc, -EPROTO);
    CHECK_HAS(a.c.cli_msg, "the server requires a client certificate: give one signed by its CA");

    /* A client certificate from another authority. */
    struct hs_case b = {.server = "server",
                        .server_ca = "ca.pem",
                        .client_ca = "ca.pem",
                        .client_cert = "rogue",
                        .host = "localhost"};
    handshake(&b);
    CHECK_EQ(b.c.srv_rc, -EPROTO);
    CHECK_HAS(b.c.srv_msg, "the client's certificate");
    CHECK_HAS(b.c.srv_msg, "is not signed by the configured CA file");
    CHECK_EQ(b.c.cli_rc, -EPROTO);
    CHECK_HAS(b.c.cli_msg, "the server refused this client's certificate");

    /* A good one. */
    struct hs_case c = {.server = "server",
                        .server_ca = "ca.pem",
                        .client_ca = "ca.pem",
                        .client_cert = "client",
                        .host = "localhost"};
    handshake(&c);
    CHECK_EQ(c.c.srv_rc, 0);
    CHECK_EQ(c.c.cli_rc, 0);
}

/* ---- deadlines and peers that do not speak TLS ---------------------------------------- */
static intptr_t silent_main(void *arg)
{
    (void)arg;
    struct conn c = {.sctx = server_ctx("server", NULL), .raw_client = 1};
    c.accept_deadline = after_ms(300);
    conn_open(&c);
    CHECK_EQ(c.srv_rc, -ETIMEDOUT);
    CHECK(c.srv == NULL);
    CHECK_HAS(c.srv_msg, "timed out");
    CHECK_GE(weir_time_now(), c.accept_deadline);
    conn_close(&c);
    weir_tls_ctx_free(c.sctx);
    return 0;
}

TEST(handshake_deadline)
{
    make_certs();
    CHECK_EQ(test_run_main(silent_main, NULL), 0);
}

static intptr_t garbage_main(void *arg)
{
    (void)arg;
    const char *junk[] = {"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                          "\x16\x03\x01\xff\xffthis is not a ClientHello at all, really"};
    for (int i = 0; i < 2; i++) {
        struct conn c = {.sctx = server_ctx("server", NULL), .raw_client = 1, .garbage = junk[i]};
        conn_open(&c);
        CHECK_EQ(c.srv_rc, -EPROTO);
        CHECK_HAS(c.srv_msg, "TLS handshake failed");
        CHECK_HAS(c.srv_msg, "error:");
        conn_close(&c);
        weir_tls_ctx_free(c.sctx);
    }
    return 0;
}

TEST(garbage_instead_of_client_hello)
{
    make_certs();
    CHECK_EQ(test_run_main(garbage_main, NULL), 0);
}

/* ---- bad context inputs --------------------------------------------------------------- */
static void refused(int server, weir_tls_opts o, const char *want1, const char *want2)
{
    char msg[1024];
    weir_tls_ctx *c = weir_tls_ctx_new(server, &o, msg, sizeof(msg));
    CHECK(c == NULL);
    CHECK_HAS(msg, want1);
    if (want2)
        CHECK_HAS(msg, want2);
}

TEST(bad_context_inputs)
{
    make_certs();
    const char *missing = certs_file("missing.pem");
    refused(1, (weir_tls_opts){.cert_file = missing, .key_file = certs_file("server.key")},
            "cannot read certificate", missing);
    refused(1, (weir_tls_opts){.cert_file = missing, .key_file = certs_file("server.key")},
            "No such file", NULL);
    refused(1, (weir_tls_opts){.cert_file = certs_file("server.pem"), .key_file = missing},
            "cannot read key", missing);
    refused(1,
            (weir_tls_opts){.cert_file = certs_file("server.key"),
                            .key_file = certs_file("server.key")},
            "cannot read certificate", "server.key");
    refused(
        1,
        (weir_tls_opts){.cert_file = certs_file("server.pem"), .key_file = certs_file("stray.key")},
        "key ", "stray.key does not match certificate");
    refused(
        1,
        (weir_tls_opts){.cert_file = certs_file("server.pem"), .key_file = certs_file("stray.key")},
        "server.pem", NULL);
    refused(1, (weir_tls_opts){.cert_file = certs_file("server.pem")},
            "needs a certificate and a key", NULL);
    refused(0, (weir_tls_opts){.cert_file = certs_file("client.pem")}, "client certificate",
            "client.pem");
    refused(0, (weir_tls_opts){.cert_file = certs_file("client.pem")}, "has no key", NULL);
    refused(0, (weir_tls_opts){.key_file = certs_file("client.key")}, "has no certificate",
            "client.key");
    refused(0, (weir_tls_opts){.ca_file = missing}, "cannot read CA file", missing);
    refused(0, (weir_tls_opts){.ca_file = certs_file("empty.pem")}, "empty.pem",
            "no PEM certificate");
    refused(1,
            (weir_tls_opts){.cert_file = certs_file("server.pem"),
                            .key_file = certs_file("server.key"),
                            .ca_file = certs_file("empty.pem")},
            "empty.pem", "no PEM certificate");
    /* A context for the wrong side. */
    weir_tls_ctx *c = client_ctx("ca.pem", NULL, 0);
    weir_tls *t = (weir_tls *)1;
    char msg[256];
    CHECK_EQ(weir_tls_accept(c, 0, WEIR_FOREVER, &t, msg, sizeof(msg)), -EINVAL);
    CHECK(t == NULL);
    weir_tls_ctx_free(c);
    weir_tls_ctx_free(NULL);
    weir_tls_free(NULL);
}

/* ---- a peer that goes away mid-frame -------------------------------------------------- */
static intptr_t mid_frame_main(void *arg)
{
    (void)arg;
    for (int clean = 0; clean < 2; clean++) {
        struct conn c = {.sctx = server_ctx("server", NULL), .cctx = client_ctx("ca.pem", NULL, 0)};
        conn_open(&c);
        expect_ok(&c);
        weir_frame_parser p;
        weir_frame_parser_init(&p, NULL);
        /* Half a frame: the reader times out and keeps it. */
        size_t len;
        uint8_t *f = make_frame(1, 100, &len);
        CHECK_EQ(weir_tls_write(c.cli, f, 30, after_ms(5000)), 0);
        weir_frame fr;
        CHECK_EQ(weir_tls_frame_read(c.srv, &p, &fr, after_ms(100)), -ETIMEDOUT);
        CHECK_EQ(weir_tls_write(c.cli, f + 30, len - 30, after_ms(5000)), 0);
        CHECK_EQ(weir_tls_frame_read(c.srv, &p, &fr, after_ms(5000)), 100);
        check_frame(&fr, 1, 100);
        weir_frame_free(&fr);
        /* Then another half, and the client goes away: with close_notify
         * (clean) or without. */
        CHECK_EQ(weir_tls_write(c.cli, f, 30, after_ms(5000)), 0);
        if (clean)
            CHECK_EQ(weir_tls_shutdown(c.cli, after_ms(5000)), 0);
        CHECK_EQ(shutdown(c.cfd, SHUT_WR), 0);
        CHECK_EQ(weir_tls_frame_read(c.srv, &p, &fr, after_ms(5000)), -ECONNRESET);
        free(f);
        weir_frame_parser_close(&p);
        conn_close(&c);
        weir_tls_ctx_free(c.sctx);
        weir_tls_ctx_free(c.cctx);
    }
    return 0;
}

TEST(peer_closing_mid_frame)
{
    make_certs();
    CHECK_EQ(test_run_main(mid_frame_main, NULL), 0);
}

/* ---- cancellation, and the end of the stream ------------------------------------------ */
static intptr_t read_forever(void *arg)
{
    char b;
    return (intptr_t)weir_tls_read(arg, &b, 1, WEIR_FOREVER);
}

static intptr_t cancel_main(void *arg)
{
    (void)arg;
    struct conn c = {.sctx = server_ctx("server", NULL), .cctx = client_ctx("ca.pem", NULL, 0)};
    conn_open(&c);
    expect_ok(&c);
    /* A reader parked on an idle session is cancelled out of its wait. */
    weir_task *r = spawn(read_forever, c.srv);
    weir_time_sleep_until(after_ms(20)); /* parked, most likely; either way */
    CHECK_EQ(weir_task_cancel(r), 0);
    intptr_t rv = 0;
    CHECK_EQ(weir_task_join(r, &rv, WEIR_FOREVER), -ECANCELED); /* it was cancelled */
    CHECK_EQ(rv, -ECANCELED);                                   /* and its read said so */
    CHECK_HAS(weir_tls_last_error(c.srv), "cancelled");
    /* The session still works afterwards. */
    ping(&c);
    /* A TCP close without close_notify, at a record boundary: not an end. */
    CHECK_EQ(shutdown(c.cfd, SHUT_WR), 0);
    char b;
    CHECK_EQ(weir_tls_read(c.srv, &b, 1, after_ms(5000)), -ECONNRESET);
    CHECK_HAS(weir_tls_last_error(c.srv), "without a TLS close_notify");
    conn_close(&c);
    weir_tls_ctx_free(c.sctx);
    weir_tls_ctx_free(c.cctx);
    return 0;
}

TEST(cancel_and_unclean_close)
{
    make_certs();
    CHECK_EQ(test_run_main(cancel_main, NULL), 0);
}

TEST_MAIN()
