/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_channel_tls.c - TCP channels (stream/channel_tcp.h) on a TLS data
 * plane: two nets in one process, each with its own share of a job and its
 * own listening socket, meet over loopback.
 *
 *   - mutual TLS both ways: batches cross in both directions on two
 *     credits a channel (so credits cycle many times over the sessions),
 *     and the union of the two shares' outputs is the one-process run's;
 *   - a producer whose certificate another authority signed is refused by
 *     the consumer, and its job fails naming the channel;
 *   - a consumer whose certificate does not name the host the producer
 *     connects by (127.0.0.1) is refused by the producer with the names
 *     the certificate carries, at once, not at the connect deadline;
 *   - a plaintext producer against a TLS consumer, and a TLS producer
 *     against a plaintext consumer, fail promptly with the message that
 *     says to give every worker the data-plane TLS flags.
 *
 * The certificates are made here with OpenSSL's C API, as test_tls.c does.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "stream/channel_tcp.h"
#include "stream/count_ops.h"
#include "stream/lines.h"
#include "stream/plan.h"
#include "test.h"
#include "test_rt.h"
#include "weir/net.h"
#include "weir/tls.h"

/* ---- certificates --------------------------------------------------------------------- */
static char dir[64];
static char path_buf[32][128];
static int npaths;

static const char *file(const char *name)
{
    for (int i = 0; i < npaths; i++)
        if (strcmp(strrchr(path_buf[i], '/') + 1, name) == 0)
            return path_buf[i];
    CHECK_LT(npaths, 32);
    snprintf(path_buf[npaths], sizeof(path_buf[npaths]), "%s/%s", dir, name);
    return path_buf[npaths++];
}

static void add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX v3;
    X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
    CHECK(e != NULL);
    CHECK_EQ(X509_add_ext(x, e, -1), 1);
    X509_EXTENSION_free(e);
}

static EVP_PKEY *keygen(void)
{
    EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    CHECK(k != NULL);
    return k;
}

/* A certificate for key, named cn, signed by issuer (NULL: self-signed CA). */
static X509 *make_cert(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key,
                       const char *san)
{
    static long serial = 1;
    X509 *x = X509_new();
    CHECK(x != NULL);
    CHECK_EQ(X509_set_version(x, 2), 1);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600L * 24 * 30);
    CHECK_EQ(X509_set_pubkey(x, key), 1);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"weir tests", -1, -1,
                               0);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    CHECK_EQ(X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name), 1);
    X509 *iss = issuer ? issuer : x;
    add_ext(x, iss, NID_subject_key_identifier, "hash");
    add_ext(x, iss, NID_authority_key_identifier, "keyid:always");
    if (!issuer) {
        add_ext(x, iss, NID_basic_constraints, "critical,CA:TRUE");
        add_ext(x, iss, NID_key_usage, "critical,keyCertSign,cRLSign");
    } else {
        add_ext(x, iss, NID_basic_constraints, "critical,CA:FALSE");
        add_ext(x, iss, NID_key_usage, "critical,digitalSignature,keyEncipherment");
        add_ext(x, iss, NID_ext_key_usage, "serverAuth,clientAuth");
        if (san)
            add_ext(x, iss, NID_subject_alt_name, san);
    }
    CHECK_GT(X509_sign(x, issuer ? issuer_key : key, EVP_sha256()), 0);
    return x;
}

static void write_cert(X509 *x, const char *name)
{
    FILE *f = fopen(file(name), "w");
    CHECK(f != NULL);
    CHECK_EQ(PEM_write_X509(f, x), 1);
    CHECK_EQ(fclose(f), 0);
}

static void write_key(EVP_PKEY *k, const char *name)
{
    FILE *f = fopen(file(name), "w");
    CHECK(f != NULL);
    CHECK_EQ(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL), 1);
    CHECK_EQ(fclose(f), 0);
}

static void remove_files(void)
{
    for (int i = 0; i < npaths; i++)
        unlink(path_buf[i]);
    if (dir[0])
        rmdir(dir);
}

/* A leaf certificate and key signed by (ca, ca_key), as name.pem / name.key. */
static void leaf(const char *name, const char *cn, const char *san, X509 *ca, EVP_PKEY *ca_key)
{
    char n[64];
    EVP_PKEY *k = keygen();
    X509 *x = make_cert(k, cn, ca, ca_key, san);
    snprintf(n, sizeof(n), "%s.pem", name);
    write_cert(x, n);
    snprintf(n, sizeof(n), "%s.key", name);
    write_key(k, n);
    X509_free(x);
    EVP_PKEY_free(k);
}

/*
 * ca.pem              the authority both sides trust
 * node.pem/.key       IP:127.0.0.1, DNS:localhost (signed by ca): a worker's
 * misnamed.pem/.key   DNS:other.example, IP:10.0.0.1 (signed by ca)
 * rogue.pem/.key      IP:127.0.0.1, signed by other-ca
 */
static void make_certs(void)
{
    if (dir[0])
        return;
    snprintf(dir, sizeof(dir), "/tmp/weir-dtls-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    atexit(remove_files);
    EVP_PKEY *ca_key = keygen(), *other_key = keygen();
    X509 *ca = make_cert(ca_key, "weir test CA", NULL, NULL, NULL);
    X509 *other_ca = make_cert(other_key, "another CA", NULL, NULL, NULL);
    write_cert(ca, "ca.pem");
    write_cert(other_ca, "other-ca.pem");
    leaf("node", "worker", "IP:127.0.0.1,DNS:localhost", ca, ca_key);
    leaf("misnamed", "other.example", "DNS:other.example,IP:10.0.0.1", ca, ca_key);
    leaf("rogue", "rogue", "IP:127.0.0.1", other_ca, other_key);
    X509_free(ca);
    X509_free(other_ca);
    EVP_PKEY_free(ca_key);
    EVP_PKEY_free(other_key);
}

/* ---- the job -------------------------------------------------------------------------------- */
#define N 20000             /* records per source subtask */
static int64_t per_sub = N; /* < 0: the sources never end (a run ends by its failure) */

static int gen_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)arg;
    int64_t *next = calloc(1, sizeof(*next));
    *next = (int64_t)weir_ctx_subtask(ctx) * N;
    *state = next;
    return 0;
}

static int gen_next(weir_ctx *ctx, void *state)
{
    int64_t *next = state;
    int64_t end = per_sub < 0 ? INT64_MAX : ((int64_t)weir_ctx_subtask(ctx) + 1) * N;
    for (int i = 0; i < 256 && *next < end; i++, (*next)++) {
        int e = weir_emit(ctx, next, 8, *next);
        if (e)
            return e;
    }
    return *next >= end;
}

static const weir_source_def gen_def = {.open = gen_open, .next = gen_next, .close = free};

/* src (2) -> to_one -> key_by -> count -> to_line -> collect */
static weir_job *count_job(weir_collector *c)
{
    weir_job *j = weir_job_new("tls");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, NULL), 2);
    s = weir_stream_map(s, "to_one", to_one, NULL);
    s = weir_stream_reduce(weir_stream_key_by(s, key16, NULL), "count", count16, NULL);
    s = weir_stream_map(s, "to_line", to_line, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    return j;
}

/* Subtask s of every chain in process s % 2: channels both ways. */
static int by_subtask(void *arg, uint32_t chain, uint32_t sub)
{
    (void)arg, (void)chain;
    return (int)(sub % 2);
}

/* Process 1 runs src 1 alone: it only produces, process 0 only consumes. */
static int src1_apart(void *arg, uint32_t chain, uint32_t sub)
{
    (void)arg;
    return chain == 0 && sub == 1 ? 1 : 0;
}

/* ---- one net's share ------------------------------------------------------------------------ */
typedef struct side {
    int self, lfd, *ports;
    const char *cert, *ca; /* NULL cert: plain TCP */
    int no_verify;
    int64_t timeout_ms;
    int (*place)(void *, uint32_t, uint32_t);
    uint32_t credits;
    weir_collector *c;
    int rc;
    char err[1024];
    int64_t took_ms;
    uint64_t sent, received, records;
} side;

static intptr_t run_side(void *arg)
{
    side *sd = arg;
    weir_tls_ctx *srv = NULL, *cli = NULL;
    if (sd->cert) {
        char cert[64], key[64], msg[512];
        snprintf(cert, sizeof(cert), "%s.pem", sd->cert);
        snprintf(key, sizeof(key), "%s.key", sd->cert);
        weir_tls_opts o = {.cert_file = file(cert),
                           .key_file = file(key),
                           .ca_file = file(sd->ca),
                           .no_verify_hostname = sd->no_verify};
        srv = weir_tls_ctx_new(1, &o, msg, sizeof(msg));
        CHECK(srv != NULL);
        cli = weir_tls_ctx_new(0, &o, msg, sizeof(msg));
        CHECK(cli != NULL);
    }
    weir_job *j = count_job(sd->c);
    weir__plan *p;
    char why[256];
    CHECK_EQ(weir__plan_make(j, 2, 4, &p, why, sizeof(why)), 0);
    weir_frame_builder fb;
    CHECK_EQ(weir__plan_encode(p, &fb), 0);
    const uint8_t *bytes;
    size_t len;
    CHECK_EQ(weir_frame_builder_finish(&fb, &bytes, &len), 0);
    const char *hosts[2] = {"127.0.0.1", "127.0.0.1"};
    weir__tcp_net *n = weir__tcp_new(&(weir__tcp_opts){
        .self = sd->self,
        .nprocs = 2,
        .hosts = hosts,
        .ports = sd->ports,
        .listen_fd = sd->lfd,
        .place = sd->place,
        .place_arg = p,
        .plan_hash = weir__tcp_plan_hash(bytes, len),
        .credits = sd->credits,
        .connect_timeout_ms = sd->timeout_ms,
        .tls_server = srv,
        .tls_client = cli,
    });
    weir_frame_builder_close(&fb);
    CHECK(n != NULL);
    weir__deploy d;
    weir__tcp_deploy(n, &d);
    int64_t t0 = weir_time_now();
    sd->rc = weir__job_run_plan(j, p, &(weir_run_opts){.parallelism = 2}, &d);
    sd->took_ms = (weir_time_now() - t0) / WEIR_MSEC;
    snprintf(sd->err, sizeof(sd->err), "%s", weir_job_error(j));
    if (sd->rc)
        fprintf(stderr, "net %d (%lld ms): %s\n", sd->self, (long long)sd->took_ms, sd->err);
    weir__tcp_stats(n, &sd->sent, &sd->received, &sd->records);
    weir__tcp_free(n);
    weir__plan_free(p);
    weir_job_free(j);
    weir_tls_ctx_free(srv);
    weir_tls_ctx_free(cli);
    return 0;
}

static intptr_t run_both(void *arg)
{
    side *sd = arg;
    weir_task *t[2];
    for (int i = 0; i < 2; i++) {
        t[i] = weir_task_spawn(run_side, &sd[i], NULL);
        CHECK(t[i] != NULL);
    }
    for (int i = 0; i < 2; i++)
        CHECK_EQ(weir_task_join(t[i], NULL, WEIR_FOREVER), 0);
    return 0;
}

/* Two nets, a and b (self, cert, ca... filled in here), on one runtime. */
static void run_pair(side sd[2], int (*place)(void *, uint32_t, uint32_t), int64_t timeout_ms)
{
    make_certs();
    static int ports[2];
    for (int i = 0; i < 2; i++) {
        CHECK_GE(sd[i].lfd = weir_net_listen("127.0.0.1", 0, NULL), 0);
        ports[i] = weir_net_local_port(sd[i].lfd);
    }
    for (int i = 0; i < 2; i++) {
        sd[i].self = i;
        sd[i].ports = ports;
        sd[i].place = place;
        sd[i].timeout_ms = timeout_ms;
        if (!sd[i].ca)
            sd[i].ca = "ca.pem";
        if (!sd[i].c)
            sd[i].c = weir_collector_new();
    }
    CHECK_EQ(test_run_on_rt(2, run_both, sd), 0);
}

static void free_pair(side sd[2])
{
    for (int i = 0; i < 2; i++)
        weir_collector_free(sd[i].c);
}

static weir_collector *ref_c;
static intptr_t run_ref(void *arg)
{
    (void)arg;
    weir_job *j = count_job(ref_c);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.parallelism = 2}), 0);
    weir_job_free(j);
    return 0;
}

TEST(tls_channels_both_ways_give_the_one_process_output)
{
    side sd[2] = {{.cert = "node", .credits = 2}, {.cert = "node", .credits = 2}};
    run_pair(sd, by_subtask, 10000);
    CHECK_EQ(sd[0].rc, 0);
    CHECK_EQ(sd[1].rc, 0);
    for (int i = 0; i < 2; i++) {
        /* each net sent batches and read credits, and read batches and
         * sent credits: every byte of them through a session */
        CHECK_GT(sd[i].records, 0u);
        CHECK_GT(sd[i].sent, 8u * sd[i].records);
        CHECK_GT(sd[i].received, 8u * sd[i].records / 2);
        printf("net %d: %llu bytes sent (%llu records), %llu received, in %lld ms\n", i,
               (unsigned long long)sd[i].sent, (unsigned long long)sd[i].records,
               (unsigned long long)sd[i].received, (long long)sd[i].took_ms);
    }
    char *a = collected(sd[0].c), *b = collected(sd[1].c);
    CHECK_GT(strlen(a), 0u);
    CHECK_GT(strlen(b), 0u);
    char *both = malloc(strlen(a) + strlen(b) + 1);
    strcat(strcpy(both, a), b);
    ref_c = weir_collector_new();
    CHECK_EQ(test_run_on_rt(2, run_ref, NULL), 0);
    CHECK_EQ(weir_collector_count(ref_c), 2u * N);
    char *ref = collected(ref_c);
    char *s1 = sorted(both), *s2 = sorted(ref);
    CHECK(strcmp(s1, s2) == 0);
    free(s1), free(s2), free(ref), free(both), free(a), free(b);
    weir_collector_free(ref_c);
    free_pair(sd);
}

/* The consumer's side of every channel in net 0, the producer's of two in
 * net 1; the sources never end, so each run ends by its failure alone. */
static void pair_fails(side sd[2], int64_t timeout_ms)
{
    per_sub = -1;
    run_pair(sd, src1_apart, timeout_ms);
    per_sub = N;
    CHECK(sd[0].rc < 0);
    CHECK(sd[1].rc < 0);
}

TEST(a_producer_another_authority_signed_is_refused)
{
    /* rogue trusts ca (so it takes the consumer's certificate); the
     * consumer's authority did not sign rogue's. */
    side sd[2] = {{.cert = "node"}, {.cert = "rogue", .ca = "ca.pem"}};
    pair_fails(sd, 3000);
    CHECK_HAS(sd[1].err, "(\"to_one\" 1 -> \"count\" ");
    CHECK_HAS(sd[1].err, "certificate");
    /* the consumer never got its producer: it fails at its deadline */
    CHECK_HAS(sd[0].err, "did not connect in 3000 ms");
    free_pair(sd);
}

TEST(a_consumer_certificate_for_another_host_is_refused_at_once)
{
    side sd[2] = {{.cert = "misnamed"}, {.cert = "node"}};
    pair_fails(sd, 5000);
    CHECK_HAS(sd[1].err, "(\"to_one\" 1 -> \"count\" ");
    CHECK_HAS(sd[1].err, "TLS handshake failed");
    CHECK_HAS(sd[1].err, "names DNS:other.example, IP:10.0.0.1 but not 127.0.0.1");
    CHECK_HAS(sd[1].err, "subjectAltName");
    CHECK(strstr(sd[1].err, "--data-tls-cert") == NULL); /* not a mismatch of planes */
    CHECK_LT(sd[1].took_ms, 2500);                       /* at once, not at the 5 s deadline */
    free_pair(sd);
}

TEST(no_verify_hostname_takes_a_certificate_for_another_host)
{
    side sd[2] = {{.cert = "misnamed", .credits = 2},
                  {.cert = "node", .no_verify = 1, .credits = 2}};
    run_pair(sd, src1_apart, 10000);
    CHECK_EQ(sd[0].rc, 0);
    CHECK_EQ(sd[1].rc, 0);
    CHECK_EQ(weir_collector_count(sd[0].c), 2u * N);
    free_pair(sd);
}

TEST(a_plaintext_producer_against_a_tls_consumer_fails_promptly)
{
    side sd[2] = {{.cert = "node"}, {.cert = NULL}};
    pair_fails(sd, 5000);
    CHECK_HAS(sd[0].err, "(\"to_one\" 1 -> \"count\" ");
    CHECK_HAS(sd[0].err, "its producer connected without TLS");
    CHECK_HAS(sd[0].err, "give every worker --data-tls-cert, --data-tls-key and --data-tls-ca");
    CHECK_LT(sd[0].took_ms, 2500); /* neither waits for the 5 s deadline */
    CHECK_LT(sd[1].took_ms, 2500);
    free_pair(sd);
}

TEST(a_tls_producer_against_a_plaintext_consumer_fails_promptly)
{
    side sd[2] = {{.cert = NULL}, {.cert = "node"}};
    pair_fails(sd, 5000);
    CHECK_HAS(sd[1].err, "(\"to_one\" 1 -> \"count\" ");
    CHECK_HAS(sd[1].err, "to 127.0.0.1:");
    CHECK_HAS(sd[1].err, "TLS handshake");
    CHECK_HAS(sd[1].err, "is the data plane TLS on every worker? give every worker "
                         "--data-tls-cert, --data-tls-key and --data-tls-ca");
    CHECK_LT(sd[1].took_ms, 2500);
    free_pair(sd);
}

TEST_MAIN()
