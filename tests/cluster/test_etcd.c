/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_etcd.c - leader election through etcd (cluster/etcd.h), against a
 * real etcd (Debian's etcd-server) started here on loopback in a
 * temporary directory: the first campaigner leads, a second sees who
 * does, resigning and a lease left to expire hand over with a higher
 * epoch, the superseded leader's keepalive reports its lease gone and
 * its resign leaves its successor's key alone, a campaign after an
 * unnoticed expiry gets a new lease, an endpoint list fails over past
 * dead, failing and silent members; and without etcd:
 * malformed endpoint lists refused by entry, and a fake member answering
 * malformed, oversized or wrongly typed JSON refused with what is wrong.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "cluster/etcd.h"
#include "test.h"
#include "test_certs.h"
#include "weir/http.h"
#include "weir/rt.h"

#define ETCD_BIN "/usr/bin/etcd"

/* An etcd of the test's: 0 the plain one most tests share, 1 https with
 * client certificates, 2 auth enabled. */
typedef struct etcd_inst {
    pid_t pid;
    char dir[64];
    char url[64];
    char ctl[512]; /* "etcdctl --endpoints=URL [TLS flags]" */
} etcd_inst;
static etcd_inst insts[3];
#define etcd_url  (insts[0].url)
#define ETCD_TLS  1
#define ETCD_AUTH 2

/* ---- the etcd under test ------------------------------------------------------------- */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t n = sizeof(a);
    CHECK_EQ(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void rm_rf(const char *d)
{
    pid_t p = fork();
    if (p == 0) {
        execl("/bin/rm", "rm", "-rf", d, (char *)NULL);
        _exit(127);
    }
    if (p > 0)
        waitpid(p, NULL, 0);
}

static void etcd_stop(void)
{
    for (int i = 0; i < 3; i++) {
        etcd_inst *x = &insts[i];
        if (x->pid > 0) {
            kill(x->pid, SIGTERM);
            waitpid(x->pid, NULL, 0);
            x->pid = 0;
        }
        if (x->dir[0]) {
            rm_rf(x->dir);
            x->dir[0] = '\0';
        }
    }
}

/* A failed CHECK aborts: take etcd and its directory down first. */
static void on_abort(int sig)
{
    for (int i = 0; i < 3; i++) {
        if (insts[i].pid > 0) {
            kill(insts[i].pid, SIGKILL);
            waitpid(insts[i].pid, NULL, 0);
        }
        if (insts[i].dir[0])
            rm_rf(insts[i].dir);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Run "CTL args" (an etcdctl command line); its exit status. */
static int ctl(const etcd_inst *x, const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s %s >/dev/null 2>&1", x->ctl, args);
    return system(cmd);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Start etcd number i once per test binary (from the main thread, before
 * any runtime); insts[i].url is its client URL. ETCD_TLS serves https
 * with certs_file("server.pem") and asks for client certificates signed
 * by ca.pem (certs_make first). */
static void etcd_start(int i)
{
    etcd_inst *x = &insts[i];
    if (x->pid > 0)
        return;
    if (access(ETCD_BIN, X_OK) != 0)
        TEST__FAIL("etcd not found: run scripts/deps.sh (etcd-server)");
    snprintf(x->dir, sizeof(x->dir), "/tmp/weir-test-etcd-XXXXXX");
    CHECK(mkdtemp(x->dir));
    static int hooked;
    if (!hooked++) {
        signal(SIGABRT, on_abort);
        atexit(etcd_stop);
    }
    int cport = free_port(), pport = free_port();
    while (pport == cport)
        pport = free_port();
    char data[128], log[128], client[64], peer[64], cluster[96];
    snprintf(data, sizeof(data), "%s/data", x->dir);
    snprintf(log, sizeof(log), "%s/etcd.log", x->dir);
    snprintf(client, sizeof(client), "%s://127.0.0.1:%d", i == ETCD_TLS ? "https" : "http", cport);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", pport);
    snprintf(cluster, sizeof(cluster), "default=%s", peer);
    snprintf(x->url, sizeof(x->url), "%s", client);
    if (i == ETCD_TLS)
        snprintf(x->ctl, sizeof(x->ctl), "etcdctl --endpoints=%s --cacert=%s --cert=%s --key=%s",
                 client, certs_file("ca.pem"), certs_file("client.pem"), certs_file("client.key"));
    else
        snprintf(x->ctl, sizeof(x->ctl), "etcdctl --endpoints=%s", client);
    pid_t p = fork();
    CHECK(p >= 0);
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        if (i == ETCD_TLS)
            execl(ETCD_BIN, "etcd", "--name", "default", "--data-dir", data, "--listen-client-urls",
                  client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
                  "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
                  "--cert-file", certs_file("server.pem"), "--key-file", certs_file("server.key"),
                  "--trusted-ca-file", certs_file("ca.pem"), "--client-cert-auth", (char *)NULL);
        else
            execl(ETCD_BIN, "etcd", "--name", "default", "--data-dir", data, "--listen-client-urls",
                  client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
                  "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
                  (char *)NULL);
        _exit(127);
    }
    x->pid = p;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (ctl(x, "--command-timeout=1s endpoint health") == 0)
            return;
        int st;
        if (waitpid(x->pid, &st, WNOHANG) == x->pid) {
            x->pid = 0;
            char cmd[256];
            snprintf(cmd, sizeof(cmd), "tail -20 '%s' >&2", log);
            if (system(cmd) != 0)
                fprintf(stderr, "(no etcd log)\n");
            TEST__FAIL("etcd exited before it answered (status %d)", st);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (t1.tv_sec - t0.tv_sec > 20)
            TEST__FAIL("etcd on %s not healthy after 20 s", client);
        sleep_ms(100);
    }
}

static void etcd_up(void)
{
    etcd_start(0);
}

/* Run fn(arg) as a fiber on a runtime of two threads. */
static intptr_t run(weir_task_fn fn, void *arg)
{
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = 2});
    CHECK(rt != NULL);
    weir_spawn_opts o = {.name = "main", .stack_size = 256 * 1024, .rt = rt};
    weir_task *t = weir_task_spawn(fn, arg, &o);
    CHECK(t != NULL);
    intptr_t v = -1;
    CHECK_EQ(weir_task_join(t, &v, weir_time_after_ms(60000)), 0);
    weir_rt_free(rt);
    return v;
}

static weir__etcd *open_ok(const char *eps, int ttl)
{
    char msg[512] = "";
    weir__etcd *e = NULL;
    int rc = weir__etcd_open(eps, ttl, &e, msg, sizeof(msg));
    if (rc != 0)
        TEST__FAIL("weir__etcd_open(%s): %d %s", eps, rc, msg);
    return e;
}

static int campaign(weir__etcd *e, const char *key, const char *val, uint64_t *epoch, char *holder,
                    size_t hcap)
{
    char msg[512] = "";
    int rc = weir__etcd_campaign(e, key, val, epoch, holder, hcap, msg, sizeof(msg));
    if (rc < 0)
        fprintf(stderr, "campaign %s: %d %s\n", key, rc, msg);
    return rc;
}

/* ---- against etcd ---------------------------------------------------------------------- */
static intptr_t lead_main(void *arg)
{
    (void)arg;
    const char *key = "/weir/test/lead";
    weir__etcd *a = open_ok(etcd_url, 10), *b = open_ok(etcd_url, 10);
    char holder[256] = "", msg[512] = "";
    uint64_t ea = 0, eb = 0, e2 = 0;

    CHECK_EQ(weir__etcd_leader(b, key, holder, sizeof(holder), &eb, msg, sizeof(msg)), 0);
    CHECK_EQ(campaign(a, key, "host-a:7000", &ea, holder, sizeof(holder)), 1);
    CHECK_GT(ea, 0);
    CHECK_EQ(weir__etcd_epoch(a), ea);
    CHECK_NE(weir__etcd_lease(a), 0);
    /* Again while leading: the same leadership. */
    CHECK_EQ(campaign(a, key, "host-a:7000", &e2, NULL, 0), 1);
    CHECK_EQ(e2, ea);

    CHECK_EQ(campaign(b, key, "host-b:7001", &eb, holder, sizeof(holder)), 0);
    CHECK_STR(holder, "host-a:7000");
    CHECK_EQ(eb, ea);
    CHECK_EQ(weir__etcd_epoch(b), 0);
    holder[0] = '\0';
    CHECK_EQ(weir__etcd_leader(b, key, holder, sizeof(holder), &eb, msg, sizeof(msg)), 1);
    CHECK_STR(holder, "host-a:7000");
    CHECK_EQ(eb, ea);
    /* A buffer too small is said so. */
    char tiny[4];
    CHECK_EQ(weir__etcd_leader(b, key, tiny, sizeof(tiny), NULL, msg, sizeof(msg)), -ENOSPC);

    int ttl = 0;
    CHECK_EQ(weir__etcd_keepalive(a, &ttl, msg, sizeof(msg)), 0);
    CHECK_GT(ttl, 0);
    CHECK_LE(ttl, 10);

    CHECK_EQ(weir__etcd_resign(a, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__etcd_epoch(a), 0);
    CHECK_EQ(weir__etcd_lease(a), 0);
    CHECK_EQ(weir__etcd_leader(b, key, holder, sizeof(holder), &eb, msg, sizeof(msg)), 0);
    CHECK_EQ(campaign(b, key, "host-b:7001", &eb, holder, sizeof(holder)), 1);
    CHECK_GT(eb, ea);
    /* a's lease was revoked: its keepalive says so. */
    CHECK_EQ(weir__etcd_keepalive(a, NULL, msg, sizeof(msg)), -ESTALE);
    /* a campaigns again with a new lease and sees b. */
    CHECK_EQ(campaign(a, key, "host-a:7000", &e2, holder, sizeof(holder)), 0);
    CHECK_STR(holder, "host-b:7001");
    CHECK_EQ(e2, eb);

    CHECK_EQ(weir__etcd_resign(b, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__etcd_resign(a, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__etcd_leader(a, key, NULL, 0, NULL, msg, sizeof(msg)), 0);
    weir__etcd_close(a);
    weir__etcd_close(b);
    return 0;
}

TEST(the_first_campaigner_leads_and_resigning_hands_over)
{
    etcd_up();
    CHECK_EQ(run(lead_main, NULL), 0);
}

/* Poll c's campaign until it leads (within ms). */
static int campaign_until(weir__etcd *c, const char *key, const char *val, uint64_t *epoch, int ms)
{
    int64_t until = weir_time_after_ms(ms);
    char holder[256];
    int rc;
    while ((rc = campaign(c, key, val, epoch, holder, sizeof(holder))) == 0 &&
           weir_time_now() < until)
        weir_time_sleep(200 * WEIR_MSEC);
    return rc;
}

static intptr_t expire_main(void *arg)
{
    (void)arg;
    const char *key = "/weir/test/expire";
    weir__etcd *a = open_ok(etcd_url, 2), *b = open_ok(etcd_url, 10);
    char holder[256] = "", msg[512] = "";
    uint64_t ea = 0, eb = 0;
    CHECK_EQ(campaign(a, key, "a", &ea, holder, sizeof(holder)), 1);
    CHECK_EQ(campaign(b, key, "b", &eb, holder, sizeof(holder)), 0);
    CHECK_STR(holder, "a");
    /* No keepalives: a's lease expires and b takes over. */
    CHECK_EQ(campaign_until(b, key, "b", &eb, 15000), 1);
    CHECK_GT(eb, ea);
    int rc = weir__etcd_keepalive(a, NULL, msg, sizeof(msg));
    CHECK_EQ(rc, -ESTALE);
    CHECK_HAS(msg, "expired");
    CHECK_EQ(weir__etcd_epoch(a), 0);
    /* a's resign must not remove b's key (nothing to do: a no longer leads). */
    CHECK_EQ(weir__etcd_resign(a, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__etcd_leader(a, key, holder, sizeof(holder), NULL, msg, sizeof(msg)), 1);
    CHECK_STR(holder, "b");
    CHECK_EQ(weir__etcd_resign(b, msg, sizeof(msg)), 0);

    /* A lease that expired while its holder did not look: the next
     * campaign gets a new one (etcd refuses the put under the dead one). */
    const char *key2 = "/weir/test/expire2";
    weir__etcd *c = open_ok(etcd_url, 2);
    uint64_t ec = 0, ec2 = 0;
    CHECK_EQ(campaign(c, key2, "c", &ec, NULL, 0), 1);
    int64_t old = weir__etcd_lease(c);
    int64_t until = weir_time_after_ms(15000);
    while (weir__etcd_leader(b, key2, NULL, 0, NULL, msg, sizeof(msg)) == 1 &&
           weir_time_now() < until)
        weir_time_sleep(200 * WEIR_MSEC);
    CHECK_EQ(weir__etcd_leader(b, key2, NULL, 0, NULL, msg, sizeof(msg)), 0);
    CHECK_EQ(campaign(c, key2, "c", &ec2, NULL, 0), 1);
    CHECK_GT(ec2, ec);
    CHECK_NE(weir__etcd_lease(c), old);

    /* c's lease expires again and b takes key2; c, which has not looked,
     * still believes it leads: its resign must leave b's key alone. */
    uint64_t eb2 = 0;
    CHECK_EQ(campaign_until(b, key2, "b", &eb2, 15000), 1);
    CHECK_GT(eb2, ec2);
    CHECK_EQ(weir__etcd_epoch(c), ec2);
    CHECK_EQ(weir__etcd_resign(c, msg, sizeof(msg)), 0);
    char who[16] = "";
    uint64_t ew = 0;
    CHECK_EQ(weir__etcd_leader(c, key2, who, sizeof(who), &ew, msg, sizeof(msg)), 1);
    CHECK_STR(who, "b");
    CHECK_EQ(ew, eb2);
    CHECK_EQ(weir__etcd_resign(b, msg, sizeof(msg)), 0);

    weir__etcd_close(a);
    weir__etcd_close(b);
    weir__etcd_close(c);
    return 0;
}

/* b stands by watching a's key: a resign (from another fiber, while b
 * waits), an expired lease and a delete before the watch began all wake
 * it; nothing happening runs the watch to its deadline. */
typedef struct resigner {
    weir__etcd *e;
    int rc;
} resigner;

static intptr_t resign_soon(void *arg)
{
    resigner *r = arg;
    char msg[256];
    weir_time_sleep(200 * WEIR_MSEC);
    r->rc = weir__etcd_resign(r->e, msg, sizeof(msg));
    return 0;
}

static intptr_t watch_main(void *arg)
{
    (void)arg;
    const char *key = "/weir/test/watch";
    weir__etcd *a = open_ok(etcd_url, 10), *b = open_ok(etcd_url, 10);
    char msg[512] = "";
    uint64_t ea = 0, eb = 0;
    CHECK_EQ(campaign(a, key, "a", &ea, NULL, 0), 1);
    CHECK_EQ(campaign(b, key, "b", &eb, NULL, 0), 0);
    /* Nothing happens: the deadline (a PUT of another key changes nothing). */
    char put[300];
    snprintf(put, sizeof(put), "put /weir/test/other x");
    CHECK_EQ(ctl(&insts[0], put), 0);
    CHECK_EQ(weir__etcd_watch_gone(b, key, weir_time_after_ms(300), msg, sizeof(msg)), 0);
    /* a resigns while b watches. */
    resigner r = {.e = a, .rc = -1};
    weir_task *t = weir_task_spawn(resign_soon, &r, &(weir_spawn_opts){.stack_size = 64 * 1024});
    CHECK(t != NULL);
    int rc = weir__etcd_watch_gone(b, key, weir_time_after_ms(20000), msg, sizeof(msg));
    if (rc != 1)
        fprintf(stderr, "watch: %d %s\n", rc, msg);
    CHECK_EQ(rc, 1);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(campaign(b, key, "b", &eb, NULL, 0), 1);
    /* a deletes before it watches: the watch starts after what a saw. */
    CHECK_EQ(campaign(a, key, "a", &ea, NULL, 0), 0);
    CHECK_EQ(weir__etcd_resign(b, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__etcd_watch_gone(a, key, weir_time_after_ms(20000), msg, sizeof(msg)), 1);
    /* A lease left to expire (TTL 2 s, no keepalive). */
    weir__etcd *c = open_ok(etcd_url, 2);
    CHECK_EQ(campaign(c, key, "c", NULL, NULL, 0), 1);
    CHECK_EQ(campaign(a, key, "a", &ea, NULL, 0), 0);
    CHECK_EQ(weir__etcd_watch_gone(a, key, weir_time_after_ms(20000), msg, sizeof(msg)), 1);
    CHECK_EQ(campaign(a, key, "a", &ea, NULL, 0), 1);
    CHECK_EQ(weir__etcd_resign(a, msg, sizeof(msg)), 0);
    weir__etcd_close(a);
    weir__etcd_close(b);
    weir__etcd_close(c);
    return 0;
}

TEST(a_standby_watching_the_key_sees_the_leader_go)
{
    etcd_up();
    CHECK_EQ(run(watch_main, NULL), 0);
}

TEST(a_lease_left_to_expire_hands_over_with_a_higher_epoch)
{
    etcd_up();
    CHECK_EQ(run(expire_main, NULL), 0);
}

static int unavailable(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req, (void)arg;
    return weir_http_res_error(res, 503, "etcdserver: no leader");
}

static intptr_t failover_main(void *arg)
{
    (void)arg;
    char eps[256], dead[64], msg[512] = "";
    snprintf(dead, sizeof(dead), "http://127.0.0.1:%d", free_port());
    snprintf(eps, sizeof(eps), "%s,%s", dead, etcd_url);
    weir__etcd *e = open_ok(eps, 10);
    CHECK_STR(weir__etcd_endpoint(e), dead);
    uint64_t ep = 0;
    CHECK_EQ(campaign(e, "/weir/test/failover", "x", &ep, NULL, 0), 1);
    CHECK_STR(weir__etcd_endpoint(e), etcd_url); /* remembered */
    CHECK_EQ(weir__etcd_keepalive(e, NULL, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__etcd_resign(e, msg, sizeof(msg)), 0);
    weir__etcd_close(e);

    /* A member answering 503, and one that takes connections and never
     * answers (a listening socket nobody accepts on): past both. */
    weir_http_server *s = weir_http_server_new(&(weir_http_server_opts){.auth_env = ""});
    CHECK(s != NULL);
    CHECK_EQ(weir_http_route(s, "POST", "/*", unavailable, NULL, 0), 0);
    CHECK_EQ(weir_http_server_start(s), 0);
    int hole = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(hole >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(bind(hole, (struct sockaddr *)&a, sizeof(a)), 0);
    CHECK_EQ(listen(hole, 16), 0);
    socklen_t alen = sizeof(a);
    CHECK_EQ(getsockname(hole, (struct sockaddr *)&a, &alen), 0);
    snprintf(eps, sizeof(eps), "http://127.0.0.1:%d,http://127.0.0.1:%d,%s",
             weir_http_server_port(s), ntohs(a.sin_port), etcd_url);
    e = open_ok(eps, 10);
    weir__etcd_set_timeouts(e, 300, 3000);
    int64_t t0 = weir_time_now();
    CHECK_EQ(campaign(e, "/weir/test/failover", "y", &ep, NULL, 0), 1);
    CHECK_LT(weir_time_now() - t0, 2 * WEIR_SEC);
    CHECK_STR(weir__etcd_endpoint(e), etcd_url);
    CHECK_EQ(weir__etcd_resign(e, msg, sizeof(msg)), 0);
    weir__etcd_close(e);
    /* Only those two: the overall deadline ends it, naming a member. */
    snprintf(eps, sizeof(eps), "http://127.0.0.1:%d,http://127.0.0.1:%d", weir_http_server_port(s),
             ntohs(a.sin_port));
    e = open_ok(eps, 10);
    weir__etcd_set_timeouts(e, 300, 1000);
    t0 = weir_time_now();
    int rc = weir__etcd_campaign(e, "/weir/test/failover", "y", &ep, NULL, 0, msg, sizeof(msg));
    CHECK_LT(rc, 0);
    CHECK_LT(weir_time_now() - t0, 3 * WEIR_SEC);
    CHECK_HAS(msg, "http://127.0.0.1:");
    weir__etcd_close(e);
    close(hole);
    CHECK_EQ(weir_http_server_stop(s, weir_time_after_ms(5000)), 0);
    weir_http_server_free(s);

    /* Every member dead: the error names one. */
    snprintf(eps, sizeof(eps), "%s,http://127.0.0.1:%d", dead, free_port());
    e = open_ok(eps, 10);
    rc = weir__etcd_campaign(e, "/weir/test/failover", "x", &ep, NULL, 0, msg, sizeof(msg));
    CHECK_LT(rc, 0);
    CHECK_HAS(msg, "http://127.0.0.1:");
    CHECK_HAS(msg, "/v3/lease/grant");
    weir__etcd_close(e);
    return 0;
}

TEST(an_endpoint_list_fails_over_past_a_dead_member)
{
    etcd_up();
    CHECK_EQ(run(failover_main, NULL), 0);
}

/* ---- over https, with client certificates ---------------------------------------------- */
static weir__etcd *open_opts_ok(const char *eps, const weir__etcd_opts *o)
{
    char msg[1024] = "";
    weir__etcd *e = NULL;
    int rc = weir__etcd_open_opts(eps, 10, o, &e, msg, sizeof(msg));
    if (rc != 0)
        TEST__FAIL("weir__etcd_open_opts(%s): %d %s", eps, rc, msg);
    return e;
}

static intptr_t tls_main(void *arg)
{
    (void)arg;
    const char *url = insts[ETCD_TLS].url, *key = "/weir/test/tls";
    weir__etcd_opts o = {.ca_file = certs_file("ca.pem"),
                         .cert_file = certs_file("client.pem"),
                         .key_file = certs_file("client.key")};
    weir__etcd *a = open_opts_ok(url, &o), *b = open_opts_ok(url, &o);
    char holder[256] = "", msg[1024] = "";
    uint64_t ea = 0, eb = 0;
    CHECK_EQ(campaign(a, key, "host-a:7000", &ea, holder, sizeof(holder)), 1);
    CHECK_EQ(campaign(b, key, "host-b:7001", &eb, holder, sizeof(holder)), 0);
    CHECK_STR(holder, "host-a:7000");
    CHECK_EQ(eb, ea);
    int ttl = 0;
    CHECK_EQ(weir__etcd_keepalive(a, &ttl, msg, sizeof(msg)), 0);
    CHECK_GT(ttl, 0);
    CHECK_EQ(weir__etcd_resign(a, msg, sizeof(msg)), 0);
    CHECK_EQ(campaign(b, key, "host-b:7001", &eb, holder, sizeof(holder)), 1);
    CHECK_GT(eb, ea);
    CHECK_EQ(weir__etcd_resign(b, msg, sizeof(msg)), 0);
    CHECK_STR(weir__etcd_endpoint(a), url);
    weir__etcd_close(a);
    weir__etcd_close(b);

    /* An authority that did not sign etcd's certificate: refused, saying so. */
    weir__etcd_opts wrong = o;
    wrong.ca_file = certs_file("other-ca.pem");
    weir__etcd *w = open_opts_ok(url, &wrong);
    int rc = weir__etcd_campaign(w, key, "w", &ea, NULL, 0, msg, sizeof(msg));
    printf("    wrong CA: %d %s\n", rc, msg);
    CHECK_EQ(rc, -EPROTO);
    CHECK_HAS(msg, url);
    CHECK_HAS(msg, "not signed by the configured CA file");
    CHECK_HAS(msg, "other-ca.pem");
    weir__etcd_close(w);

    /* No client certificate: etcd (--client-cert-auth) refuses the handshake. */
    weir__etcd_opts bare = {.ca_file = certs_file("ca.pem")};
    w = open_opts_ok(url, &bare);
    rc = weir__etcd_campaign(w, key, "w", &ea, NULL, 0, msg, sizeof(msg));
    printf("    no client certificate: %d %s\n", rc, msg);
    CHECK_LT(rc, 0);
    CHECK_HAS(msg, url);
    weir__etcd_close(w);
    return 0;
}

TEST(over_https_with_client_certificates)
{
    certs_make();
    etcd_start(ETCD_TLS);
    CHECK_EQ(run(tls_main, NULL), 0);
}

static void tls_refused(const char *eps, const weir__etcd_opts *o, const char *needle)
{
    char msg[1024] = "";
    weir__etcd *e = (weir__etcd *)1;
    int rc = weir__etcd_open_opts(eps, 10, o, &e, msg, sizeof(msg));
    if (rc != -EINVAL)
        TEST__FAIL("\"%s\" not refused: %d %s", eps, rc, msg);
    CHECK(e == NULL);
    CHECK_HAS(msg, needle);
}

TEST(tls_and_auth_options_are_checked_at_open)
{
    certs_make();
    weir__etcd_opts none = {0}, ca = {.ca_file = certs_file("ca.pem")};
    tls_refused("https://h:1", &none, "CA file");
    tls_refused("https://h:1,http://h:2", &ca, "mixed");
    tls_refused("http://h:1", &ca, "needs https://");
    weir__etcd_opts half = ca;
    half.cert_file = certs_file("client.pem");
    tls_refused("https://h:1", &half, "its key");
    weir__etcd_opts missing = {.ca_file = "/nonexistent/ca.pem"};
    tls_refused("https://h:1", &missing, "/nonexistent/ca.pem");
    weir__etcd_opts mismatched = ca;
    mismatched.cert_file = certs_file("client.pem");
    mismatched.key_file = certs_file("rogue.key");
    tls_refused("https://h:1", &mismatched, "rogue.key");
    weir__etcd_opts nopw = {.user = "u"};
    tls_refused("http://h:1", &nopw, "password");
    weir__etcd *e = open_opts_ok("https://h:1", &ca);
    CHECK_STR(weir__etcd_endpoint(e), "https://h:1");
    weir__etcd_close(e);
}

/* ---- with etcd's auth ------------------------------------------------------------------ */
/* POST body to the auth etcd's path with token (NULL: none); the status. */
static int gateway(const char *path, const char *token, const char *body, char *out, size_t cap)
{
    weir_http_client *h = weir_http_client_new(NULL);
    CHECK(h != NULL);
    char url[256];
    snprintf(url, sizeof(url), "%s%s", insts[ETCD_AUTH].url, path);
    weir_http_header hd[1] = {{{"Authorization", 13}, {token, token ? strlen(token) : 0}}};
    weir_http_client_req q = {.method = "POST",
                              .url = url,
                              .headers = hd,
                              .nheaders = token ? 1 : 0,
                              .body = body,
                              .body_len = strlen(body),
                              .deadline = weir_time_after_ms(10000)};
    weir_http_client_resp r;
    CHECK_EQ(weir_http_client_do(h, &q, &r), 0);
    if (out)
        snprintf(out, cap, "%s", r.body);
    int st = r.status;
    weir_http_client_resp_free(&r);
    weir_http_client_free(h);
    return st;
}

/* Turn auth off and on again (etcd then forgets every token it gave). */
static void auth_cycle(void)
{
    char body[1024], tok[256];
    CHECK_EQ(gateway("/v3/auth/authenticate", NULL, "{\"name\":\"root\",\"password\":\"rootpw\"}",
                     body, sizeof(body)),
             200);
    char *t = strstr(body, "\"token\":\"");
    CHECK(t != NULL);
    t += 9;
    size_t n = strcspn(t, "\"");
    CHECK_LT(n, sizeof(tok));
    memcpy(tok, t, n);
    tok[n] = '\0';
    CHECK_EQ(gateway("/v3/auth/disable", tok, "{}", NULL, 0), 200);
    CHECK_EQ(gateway("/v3/auth/enable", NULL, "{}", NULL, 0), 200);
}

static intptr_t auth_main(void *arg)
{
    (void)arg;
    const char *url = insts[ETCD_AUTH].url, *key = "/weir/test/auth";
    weir__etcd_opts o = {.user = "tester", .password = "testpw"};
    weir__etcd *a = open_opts_ok(url, &o);
    char holder[256] = "", msg[1024] = "";
    uint64_t ea = 0, e2 = 0;
    CHECK_EQ(campaign(a, key, "host-a:7000", &ea, holder, sizeof(holder)), 1);
    CHECK_EQ(weir__etcd_keepalive(a, NULL, msg, sizeof(msg)), 0);

    /* Without auth the key is not to be read. */
    weir__etcd *anon = open_ok(url, 10);
    int rc = weir__etcd_leader(anon, key, NULL, 0, NULL, msg, sizeof(msg));
    printf("    no user: %d %s\n", rc, msg);
    CHECK_LT(rc, 0);
    weir__etcd_close(anon);

    /* etcd forgets the token: the next requests authenticate again. */
    auth_cycle();
    int ttl = 0;
    rc = weir__etcd_keepalive(a, &ttl, msg, sizeof(msg));
    if (rc != 0)
        fprintf(stderr, "keepalive after the token went: %d %s\n", rc, msg);
    CHECK_EQ(rc, 0);
    CHECK_GT(ttl, 0);
    auth_cycle();
    CHECK_EQ(campaign(a, key, "host-a:7000", &e2, NULL, 0), 1);
    CHECK_EQ(e2, ea);
    auth_cycle();
    CHECK_EQ(weir__etcd_resign(a, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__etcd_leader(a, key, NULL, 0, NULL, msg, sizeof(msg)), 0);
    weir__etcd_close(a);

    /* A wrong password: authentication failed, naming the user, not the password. */
    weir__etcd_opts wrong = {.user = "tester", .password = "s3cr3t-wrong"};
    weir__etcd *w = open_opts_ok(url, &wrong);
    rc = weir__etcd_campaign(w, key, "w", &ea, NULL, 0, msg, sizeof(msg));
    printf("    wrong password: %d %s\n", rc, msg);
    CHECK_EQ(rc, -EACCES);
    CHECK_HAS(msg, "authentication as user \"tester\" failed");
    CHECK(strstr(msg, "s3cr3t") == NULL);
    CHECK_EQ(weir__etcd_lease(w), 0);
    weir__etcd_close(w);

    /* A user whose role does not cover the key: refused. */
    weir__etcd_opts other = {.user = "outsider", .password = "outpw"};
    w = open_opts_ok(url, &other);
    rc = weir__etcd_campaign(w, key, "w", &ea, NULL, 0, msg, sizeof(msg));
    printf("    no permission: %d %s\n", rc, msg);
    CHECK_EQ(rc, -EPERM);
    weir__etcd_close(w);
    return 0;
}

TEST(with_etcd_auth_a_token_and_authenticating_again)
{
    etcd_start(ETCD_AUTH);
    const etcd_inst *x = &insts[ETCD_AUTH];
    const char *setup[] = {"user add root:rootpw",
                           "role add weir",
                           "role grant-permission weir --prefix=true readwrite /weir/",
                           "user add tester:testpw",
                           "user grant-role tester weir",
                           "user add outsider:outpw",
                           "auth enable"};
    for (size_t i = 0; i < sizeof(setup) / sizeof(setup[0]); i++)
        if (ctl(x, setup[i]) != 0)
            TEST__FAIL("%s %s failed", x->ctl, setup[i]);
    CHECK_EQ(run(auth_main, NULL), 0);
}

/* ---- without etcd ---------------------------------------------------------------------- */
static void refused(const char *eps, const char *needle1, const char *needle2)
{
    char msg[512] = "";
    weir__etcd *e = (weir__etcd *)1;
    int rc = weir__etcd_open(eps, 10, &e, msg, sizeof(msg));
    if (rc != -EINVAL)
        TEST__FAIL("\"%s\" not refused: %d %s", eps, rc, msg);
    CHECK(e == NULL);
    CHECK_HAS(msg, needle1);
    if (needle2)
        CHECK_HAS(msg, needle2);
}

TEST(malformed_endpoint_lists_are_refused_naming_the_entry)
{
    refused("", "endpoint 1", "empty");
    refused("127.0.0.1:2379", "\"127.0.0.1:2379\"", "http://");
    refused("ftp://h:1", "\"ftp://h:1\"", NULL);
    refused("http://", "no host", NULL);
    refused("http://h:0", "\"http://h:0\"", "port");
    refused("http://h:70000", "port", NULL);
    refused("http://h:12x", "\"http://h:12x\"", NULL);
    refused("http://a:1,,http://b:2", "endpoint 2", "empty");
    refused("http://a:1,http://b:2,", "endpoint 3", "empty");
    refused("http://a:1,https://b:2", "endpoint 2 \"https://b:2\"", "mixed");
    refused("https://a:1", "CA file", NULL);
    refused("http://h:1/v3", "\"http://h:1/v3\"", "path");
    refused("http://user@h:1", "\"http://user@h:1\"", NULL);
    refused("http://[::1:2379", "IPv6", NULL);
    refused("http://h:1\r\n", "endpoint 1", NULL);
    char many[1024] = "";
    for (int i = 0; i < WEIR__ETCD_ENDPOINTS_MAX + 1; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%shttp://h:%d", i ? "," : "",
                 i + 1);
    refused(many, "more than", NULL);

    char msg[512];
    weir__etcd *e = NULL;
    CHECK_EQ(weir__etcd_open("http://h:1", 0, &e, msg, sizeof(msg)), -EINVAL);
    CHECK_HAS(msg, "TTL");
    CHECK_EQ(weir__etcd_open(NULL, 10, &e, msg, sizeof(msg)), -EINVAL);
    /* Accepted forms. */
    const char *good[] = {"http://h", "http://10.0.0.1:2379/", "http://[::1]:2379",
                          " http://a:1 , http://b-2.example:2 "};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        e = open_ok(good[i], 5);
        weir__etcd_close(e);
    }
    e = open_ok("http://h", 5);
    CHECK_STR(weir__etcd_endpoint(e), "http://h:2379");
    weir__etcd_close(e);
    /* Each allocation of an open failing in turn: -ENOMEM, nothing leaked. */
    for (long n = 0;; n++) {
        CHECK_LT(n, 1000);
        weir__alloc_fail_after(n);
        e = NULL;
        int rc = weir__etcd_open("http://a:1,http://b:2", 5, &e, msg, sizeof(msg));
        weir__alloc_fail_after(-1);
        if (rc == 0) {
            weir__etcd_close(e);
            break;
        }
        CHECK_EQ(rc, -ENOMEM);
        CHECK(e == NULL);
    }
}

/* A fake member: each path answers with what the case sets. */
static struct {
    int status;
    const char *grant, *txn, *range, *keepalive, *watch;
    char *big;           /* an oversized answer, when set, for every path */
    char watch_req[512]; /* the last watch's request */
    int hasleader;       /* the last watch asked for a member with a leader */
    int watch_stall;     /* the watch answers nothing for 1.5 s */
} fake;

static int fake_handler(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    if (fake.big)
        return weir_http_res_send(res, 200, "application/json", fake.big, strlen(fake.big));
    const char *body = "{}";
    if (req->path.len == 15 && memcmp(req->path.p, "/v3/lease/grant", 15) == 0)
        body = fake.grant;
    else if (req->path.len == 10 && memcmp(req->path.p, "/v3/kv/txn", 10) == 0)
        body = fake.txn;
    else if (req->path.len == 12 && memcmp(req->path.p, "/v3/kv/range", 12) == 0)
        body = fake.range;
    else if (req->path.len == 19 && memcmp(req->path.p, "/v3/lease/keepalive", 19) == 0)
        body = fake.keepalive;
    else if (req->path.len == 9 && memcmp(req->path.p, "/v3/watch", 9) == 0) {
        body = fake.watch;
        if (fake.watch_stall) /* a member that sets nothing up */
            weir_time_sleep(1500 * WEIR_MSEC);
        const weir_http_str *hl = weir_http_req_header(req, "grpc-metadata-hasleader");
        fake.hasleader = hl && hl->len == 4 && memcmp(hl->p, "true", 4) == 0;
        snprintf(fake.watch_req, sizeof(fake.watch_req), "%.*s", (int)req->body_len,
                 (const char *)req->body);
    }
    if (!body)
        body = "{}";
    return weir_http_res_send(res, fake.status ? fake.status : 200, "application/json", body,
                              strlen(body));
}

#define GRANT_OK "{\"header\":{\"revision\":\"1\"},\"ID\":\"42\",\"TTL\":\"10\"}"

/* A campaign on the fake member fails with rc and a message holding needle. */
static void campaign_fails(weir__etcd *e, int rc, const char *needle)
{
    char msg[512] = "";
    uint64_t ep = 0;
    int got = weir__etcd_campaign(e, "/k", "v", &ep, NULL, 0, msg, sizeof(msg));
    if (got != rc)
        TEST__FAIL("campaign: %d (%s), expected %d", got, msg, rc);
    CHECK_HAS(msg, needle);
}

static intptr_t fake_main(void *arg)
{
    (void)arg;
    weir_http_server *s = weir_http_server_new(&(weir_http_server_opts){.auth_env = ""});
    CHECK(s != NULL);
    CHECK_EQ(weir_http_route(s, "POST", "/*", fake_handler, NULL, 0), 0);
    CHECK_EQ(weir_http_server_start(s), 0);
    char url[64], msg[512] = "";
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", weir_http_server_port(s));
    weir__etcd *e = open_ok(url, 10);
    weir__etcd_set_timeouts(e, 1000, 2000);

    memset(&fake, 0, sizeof(fake));
    fake.grant = "{oops";
    campaign_fails(e, -EBADMSG, "not JSON");
    fake.grant = "[1,2]";
    campaign_fails(e, -EBADMSG, "not a JSON object");
    fake.grant = "{\"ID\":true,\"TTL\":\"10\"}";
    campaign_fails(e, -EBADMSG, "\"ID\" is not an int64");
    fake.grant = "{\"ID\":\"12x\",\"TTL\":\"10\"}";
    campaign_fails(e, -EBADMSG, "\"ID\"");
    fake.grant = "{\"ID\":\"99999999999999999999\",\"TTL\":\"10\"}";
    campaign_fails(e, -EBADMSG, "\"ID\"");
    fake.grant = "{\"ID\":\"42\"}";
    campaign_fails(e, -EBADMSG, "without an ID and a TTL");
    char deep[20001];
    memset(deep, '[', sizeof(deep) - 1);
    deep[sizeof(deep) - 1] = '\0';
    fake.grant = deep;
    campaign_fails(e, -EBADMSG, "too deep");
    fake.status = 500;
    fake.grant = "{\"error\":\"boom\",\"code\":13}";
    campaign_fails(e, -EIO, "HTTP 500: boom");
    fake.status = 400;
    fake.grant = "{\"error\":\"bad\\u0001thing\",\"code\":3}";
    campaign_fails(e, -EINVAL, "HTTP 400: bad?thing");
    fake.status = 0;

    /* Oversized: refused by the client's cap. */
    size_t big = WEIR__ETCD_RESPONSE_MAX + 1000;
    fake.big = malloc(big + 1);
    CHECK(fake.big);
    memset(fake.big, ' ', big);
    fake.big[0] = '{';
    fake.big[big - 1] = '}';
    fake.big[big] = '\0';
    campaign_fails(e, -EMSGSIZE, url);
    free(fake.big);
    fake.big = NULL;

    /* The grant is fine from here on; the transaction is not. */
    fake.grant = GRANT_OK;
    fake.txn = "{\"header\":{\"revision\":\"5\"},\"succeeded\":\"yes\"}";
    campaign_fails(e, -EBADMSG, "\"succeeded\" is not a boolean");
    fake.txn = "{\"succeeded\":true}";
    campaign_fails(e, -EBADMSG, "header.revision");
    fake.txn = "{\"header\":{\"revision\":\"5\"}}";
    campaign_fails(e, -EBADMSG, "range response");
    fake.txn = "{\"header\":{\"revision\":\"5\"},\"responses\":[{\"response_range\":{\"kvs\":"
               "[{\"key\":\"L2s=\",\"value\":\"!!!!\",\"create_revision\":\"3\"}]}}]}";
    campaign_fails(e, -EBADMSG, "\"value\" is not base64");
    fake.txn = "{\"header\":{\"revision\":\"5\"},\"responses\":[{\"response_range\":{\"kvs\":"
               "[{\"key\":\"b3RoZXI=\",\"value\":\"dg==\",\"create_revision\":\"3\"}]}}]}";
    campaign_fails(e, -EBADMSG, "not the key asked for");
    fake.txn = "{\"header\":{\"revision\":\"5\"},\"responses\":[{\"response_range\":{\"kvs\":"
               "[{\"key\":\"L2s=\",\"value\":\"dg==\",\"create_revision\":{}}]}}]}";
    campaign_fails(e, -EBADMSG, "\"create_revision\"");
    fake.txn = "{\"header\":{\"revision\":\"5\"},\"responses\":[{\"response_range\":{\"kvs\":"
               "[{\"key\":\"L2s=\",\"value\":\"dg==\",\"create_revision\":\"-3\"}]}}]}";
    campaign_fails(e, -EBADMSG, "negative");
    /* A well-formed answer: another lease (7) holds /k with "v". */
    fake.txn = "{\"header\":{\"revision\":\"5\"},\"responses\":[{\"response_range\":{\"kvs\":"
               "[{\"key\":\"L2s=\",\"value\":\"dg==\",\"create_revision\":\"3\",\"lease\":"
               "\"7\"}]}}]}";
    char holder[8];
    uint64_t ep = 0;
    CHECK_EQ(weir__etcd_campaign(e, "/k", "v", &ep, holder, sizeof(holder), msg, sizeof(msg)), 0);
    CHECK_STR(holder, "v");
    CHECK_EQ(ep, 3);

    /* The watch of a standby that saw /k held at revision 5: from 6,
     * deletes only. */
    int64_t dl = weir_time_after_ms(5000);
    fake.watch = "{\"result\":{\"created\":true}}\n{\"result\":{\"events\":[{\"type\":"
                 "\"DELETE\",\"kv\":{\"key\":\"L2s=\"}}]}}\n";
    CHECK_EQ(weir__etcd_watch_gone(e, "/k", dl, msg, sizeof(msg)), 1);
    CHECK_HAS(fake.watch_req, "\"start_revision\":\"6\"");
    CHECK_HAS(fake.watch_req, "\"filters\":[\"NOPUT\"]");
    CHECK_HAS(fake.watch_req, "\"key\":\"L2s=\"");
    CHECK(fake.hasleader); /* only a member with a leader may answer */
    /* The last message without its newline counts. */
    fake.watch = "{\"result\":{\"created\":true}}\n{\"result\":{\"events\":[{\"type\":"
                 "\"DELETE\"}]}}";
    CHECK_EQ(weir__etcd_watch_gone(e, "/k", dl, msg, sizeof(msg)), 1);
    /* A PUT (no "type") is no change; the stream's end after the watch
     * was set up is etcd ending it (2), as is a cancel. */
    fake.watch = "{\"result\":{\"created\":true}}\r\n\n{\"result\":{\"events\":[{\"kv\":{}}]}}\n";
    CHECK_EQ(weir__etcd_watch_gone(e, "/k", dl, msg, sizeof(msg)), 2);
    fake.watch = "{\"result\":{\"canceled\":true,\"compact_revision\":\"9\"}}\n";
    CHECK_EQ(weir__etcd_watch_gone(e, "/k", dl, msg, sizeof(msg)), 2);
    /* A member that sets nothing up within the request deadline (1 s here). */
    fake.watch_stall = 1;
    CHECK_EQ(weir__etcd_watch_gone(e, "/k", dl, msg, sizeof(msg)), -ETIMEDOUT);
    CHECK_HAS(msg, "not set up in time");
    fake.watch_stall = 0;
    /* An answer that ends before the watch is set up: not a stream. */
    fake.watch = "";
    CHECK_EQ(weir__etcd_watch_gone(e, "/k", dl, msg, sizeof(msg)), -EPROTO);
    CHECK_HAS(msg, "before the watch was set up");
    fake.watch = "{oops\n";
    CHECK_EQ(weir__etcd_watch_gone(e, "/k", dl, msg, sizeof(msg)), -EBADMSG);
    CHECK_HAS(msg, "not JSON");
    CHECK_HAS(msg, "/v3/watch");
    fake.watch = "{\"result\":{\"created\":\"yes\"}}\n";
    CHECK_EQ(weir__etcd_watch_gone(e, "/k", dl, msg, sizeof(msg)), -EBADMSG);
    CHECK_HAS(msg, "not a boolean");
    fake.watch = "{\"result\":{\"events\":[{\"type\":7}]}}\n";
    CHECK_EQ(weir__etcd_watch_gone(e, "/k", dl, msg, sizeof(msg)), -EBADMSG);
    fake.watch = "{\"created\":true}\n";
    CHECK_EQ(weir__etcd_watch_gone(e, "/k", dl, msg, sizeof(msg)), -EBADMSG);
    CHECK_HAS(msg, "without \"result\"");
    fake.watch = "{\"error\":{\"grpc_code\":16,\"message\":\"invalid auth token\"}}\n";
    CHECK_EQ(weir__etcd_watch_gone(e, "/k", dl, msg, sizeof(msg)), -EPERM);
    CHECK_HAS(msg, "invalid auth token");
    char *line = malloc((70u << 10) + 1); /* one message over 64 KiB, never ended */
    CHECK(line);
    memset(line, ' ', 70u << 10);
    line[0] = '{';
    line[70u << 10] = '\0';
    fake.watch = line;
    CHECK_EQ(weir__etcd_watch_gone(e, "/k", dl, msg, sizeof(msg)), -EBADMSG);
    CHECK_HAS(msg, "over 64 KiB");
    free(line);
    fake.status = 400;
    fake.watch = "{\"error\":\"bad watch\",\"code\":3}";
    CHECK_EQ(weir__etcd_watch_gone(e, "/k", dl, msg, sizeof(msg)), -EINVAL);
    CHECK_HAS(msg, "HTTP 400: bad watch");
    fake.status = 0;
    /* A handle whose campaigns have seen nobody else has nothing to watch. */
    weir__etcd *e2 = open_ok(url, 10);
    CHECK_EQ(weir__etcd_watch_gone(e2, "/k", dl, msg, sizeof(msg)), -EINVAL);
    CHECK_HAS(msg, "no campaign");
    weir__etcd_close(e2);

    fake.range = "{\"kvs\":{}}";
    CHECK_EQ(weir__etcd_leader(e, "/k", NULL, 0, NULL, msg, sizeof(msg)), -EBADMSG);
    CHECK_HAS(msg, "\"kvs\" is not an array");
    fake.range = "{\"kvs\":[7]}";
    CHECK_EQ(weir__etcd_leader(e, "/k", NULL, 0, NULL, msg, sizeof(msg)), -EBADMSG);
    fake.range = "{\"kvs\":[{\"key\":\"L2s=\",\"value\":\"dgB2\",\"create_revision\":\"3\"}]}";
    CHECK_EQ(weir__etcd_leader(e, "/k", holder, sizeof(holder), NULL, msg, sizeof(msg)), -EBADMSG);
    CHECK_HAS(msg, "NUL");

    fake.keepalive = "{\"result\":{\"ID\":\"43\",\"TTL\":\"5\"}}";
    CHECK_EQ(weir__etcd_keepalive(e, NULL, msg, sizeof(msg)), -EBADMSG);
    CHECK_HAS(msg, "another lease");
    fake.keepalive = "{\"result\":7}";
    CHECK_EQ(weir__etcd_keepalive(e, NULL, msg, sizeof(msg)), -EBADMSG);
    fake.keepalive = "{\"error\":{\"grpc_code\":5,\"message\":\"lease not found\"}}";
    CHECK_EQ(weir__etcd_keepalive(e, NULL, msg, sizeof(msg)), -ESTALE);
    CHECK_EQ(weir__etcd_lease(e), 0);

    weir__etcd_close(e);
    CHECK_EQ(weir_http_server_stop(s, weir_time_after_ms(5000)), 0);
    weir_http_server_free(s);
    return 0;
}

TEST(a_misbehaving_member_gets_a_clear_error)
{
    CHECK_EQ(run(fake_main, NULL), 0);
}

TEST_MAIN()
