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
 * The certificates are test_certs.h's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stream/channel_tcp.h"
#include "stream/count_ops.h"
#include "stream/lines.h"
#include "stream/plan.h"
#include "test.h"
#include "test_certs.h"
#include "test_rt.h"
#include "weir/net.h"
#include "stream/tcp_job.h" /* last: its N */
#include "weir/tls.h"

/* ---- certificates: test_certs.h's set --------------------------------------------------
 * server.pem/.key   IP:127.0.0.1, DNS:localhost (signed by ca): a worker's
 * other.pem/.key    DNS:other.example, IP:10.0.0.1 (signed by ca)
 * rogue.pem/.key    signed by other-ca
 */

/* ---- the job: tcp_job.h -------------------------------------------------------------------- */
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
        weir_tls_opts o = {.cert_file = certs_file(cert),
                           .key_file = certs_file(key),
                           .ca_file = certs_file(sd->ca),
                           .no_verify_hostname = sd->no_verify};
        srv = weir_tls_ctx_new(1, &o, msg, sizeof(msg));
        CHECK(srv != NULL);
        cli = weir_tls_ctx_new(0, &o, msg, sizeof(msg));
        CHECK(cli != NULL);
    }
    weir_job *j = count_job("tls", sd->c);
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
    certs_make();
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
    weir_job *j = count_job("tls", ref_c);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.parallelism = 2}), 0);
    weir_job_free(j);
    return 0;
}

TEST(tls_channels_both_ways_give_the_one_process_output)
{
    side sd[2] = {{.cert = "server", .credits = 2}, {.cert = "server", .credits = 2}};
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
    side sd[2] = {{.cert = "server"}, {.cert = "rogue", .ca = "ca.pem"}};
    pair_fails(sd, 3000);
    CHECK_HAS(sd[1].err, "(\"to_one\" 1 -> \"count\" ");
    CHECK_HAS(sd[1].err, "certificate");
    /* the consumer never got its producer: it fails at its deadline */
    CHECK_HAS(sd[0].err, "did not connect in 3000 ms");
    free_pair(sd);
}

TEST(a_consumer_certificate_for_another_host_is_refused_at_once)
{
    side sd[2] = {{.cert = "other"}, {.cert = "server"}};
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
    side sd[2] = {{.cert = "other", .credits = 2},
                  {.cert = "server", .no_verify = 1, .credits = 2}};
    run_pair(sd, src1_apart, 10000);
    CHECK_EQ(sd[0].rc, 0);
    CHECK_EQ(sd[1].rc, 0);
    CHECK_EQ(weir_collector_count(sd[0].c), 2u * N);
    free_pair(sd);
}

TEST(a_plaintext_producer_against_a_tls_consumer_fails_promptly)
{
    side sd[2] = {{.cert = "server"}, {.cert = NULL}};
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
    side sd[2] = {{.cert = NULL}, {.cert = "server"}};
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
