/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sock.c - TCP sockets (weir/net.h): listen / accept / connect over
 * IPv4 and IPv6 loopback, names through the resolver on the blocking pool
 * (a lookup dropped unrun at shutdown is freed), refused and timed-out
 * connects, bad arguments, socket options, graceful close, address
 * formatting and error texts.
 *
 * CTest runs it under WEIR_IO=uring and WEIR_IO=epoll. IPv6 tests print
 * "skipped" and pass when the machine has no IPv6 loopback.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rt/rt_int.h"
#include "test.h"
#include "test_rt.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/rt.h"

/* Test hook defined in src/rt/blocking.c. */
extern size_t weir__pool_queued(struct weir__pool *p);

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

static ssize_t send_all(int fd, const void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t r = weir_io_send(fd, (const char *)buf + done, len - done, 0, after_ms(5000));
        if (r < 0)
            return r;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

static ssize_t recv_full(int fd, void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t r = weir_io_recv(fd, (char *)buf + done, len - done, 0, after_ms(5000));
        if (r < 0)
            return r;
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* No IPv6 on this machine: the IPv6 tests pass as skipped. */
static int no_ipv6(int err)
{
    return err == -EADDRNOTAVAIL || err == -EAFNOSUPPORT || err == -EPROTONOSUPPORT;
}

/* ---- listen / accept / connect -------------------------------------------------------- */
struct echo_srv {
    int lfd;
    int n; /* connections to serve */
    char peer[WEIR_NET_ADDRSTRLEN];
};

/* Accept n connections one after another and echo each until EOF. */
static intptr_t echo_server(void *arg)
{
    struct echo_srv *s = arg;
    for (int i = 0; i < s->n; i++) {
        weir_net_addr peer;
        int c = weir_net_accept(s->lfd, &peer, after_ms(10000));
        CHECK_GE(c, 0);
        CHECK_GT(weir_net_addr_format(&peer, s->peer, sizeof(s->peer)), 0);
        CHECK(fcntl(c, F_GETFD) & FD_CLOEXEC);
        char buf[256];
        ssize_t n;
        while ((n = weir_io_recv(c, buf, sizeof(buf), 0, after_ms(10000))) > 0)
            CHECK_EQ(send_all(c, buf, (size_t)n), n);
        CHECK_EQ(n, 0);
        CHECK_EQ(weir_io_close(c), 0);
    }
    return 0;
}

/* Connect to host:port, check an echo round trip, close. */
static void echo_once(const char *host, int port)
{
    int fd = weir_net_connect(host, port, after_ms(10000));
    CHECK_GE(fd, 0);
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    weir_net_addr pa;
    CHECK_EQ(weir_net_peer_addr(fd, &pa), 0);
    CHECK_EQ(weir_net_addr_port(&pa), port);
    const char msg[] = "weir over tcp";
    char back[sizeof(msg)] = {0};
    CHECK_EQ(send_all(fd, msg, sizeof(msg)), sizeof(msg));
    CHECK_EQ(recv_full(fd, back, sizeof(back)), sizeof(back));
    CHECK(memcmp(msg, back, sizeof(msg)) == 0);
    CHECK_EQ(weir_io_close(fd), 0);
}

struct family_case {
    const char *listen_host;
    const char *connect_host;
    const char *peer_prefix; /* how the server sees the client */
};

static intptr_t listen_connect_main(void *arg)
{
    const struct family_case *fc = arg;
    int lfd = weir_net_listen(fc->listen_host, 0, NULL);
    if (no_ipv6(lfd) && strchr(fc->listen_host, ':')) {
        printf("    skipped: no IPv6 loopback (%s)\n", weir_net_strerror(lfd));
        return 0;
    }
    CHECK_GE(lfd, 0);
    CHECK(fcntl(lfd, F_GETFD) & FD_CLOEXEC);
    int port = weir_net_local_port(lfd);
    CHECK_GT(port, 0);
    CHECK_LE(port, 65535);
    struct echo_srv s = {.lfd = lfd, .n = 2};
    weir_task *st = test_spawn(echo_server, &s);
    echo_once(fc->connect_host, port);
    CHECK(strncmp(s.peer, fc->peer_prefix, strlen(fc->peer_prefix)) == 0);
    echo_once(fc->connect_host, port); /* the listener serves again */
    CHECK_EQ(join(st), 0);
    CHECK_EQ(weir_io_close(lfd), 0);
    return 0;
}

TEST(listen_connect_ipv4)
{
    struct family_case fc = {"127.0.0.1", "127.0.0.1", "127.0.0.1:"};
    CHECK_EQ(test_run_main(listen_connect_main, &fc), 0);
}

TEST(listen_connect_ipv6)
{
    struct family_case fc = {"::1", "::1", "[::1]:"};
    CHECK_EQ(test_run_main(listen_connect_main, &fc), 0);
}

TEST(listen_connect_ipv6_brackets)
{
    struct family_case fc = {"[::1]", "[::1]", "[::1]:"};
    CHECK_EQ(test_run_main(listen_connect_main, &fc), 0);
}

/* NULL host: every interface. IPv4 clients reach it, and IPv6 ones too when
 * the machine has IPv6 (dual stack). */
static intptr_t listen_any_main(void *arg)
{
    (void)arg;
    int lfd = weir_net_listen(NULL, 0, NULL);
    CHECK_GE(lfd, 0);
    int port = weir_net_local_port(lfd);
    CHECK_GT(port, 0);
    weir_net_addr la;
    CHECK_EQ(weir_net_local_addr(lfd, &la), 0);
    int v6 = la.ss.ss_family == AF_INET6;
    struct echo_srv s = {.lfd = lfd, .n = v6 ? 2 : 1};
    weir_task *st = test_spawn(echo_server, &s);
    echo_once("127.0.0.1", port);
    if (v6)
        echo_once("::1", port);
    else
        printf("    note: no IPv6, listened on 0.0.0.0\n");
    CHECK_EQ(join(st), 0);
    CHECK_EQ(weir_io_close(lfd), 0);

    /* v6only on the wildcard: IPv4 is refused. */
    weir_listen_opts o = {.v6only = 1};
    lfd = weir_net_listen("", 0, &o);
    if (v6) {
        CHECK_GE(lfd, 0);
        CHECK_EQ(weir_net_connect("127.0.0.1", weir_net_local_port(lfd), after_ms(5000)),
                 -ECONNREFUSED);
        CHECK_EQ(weir_io_close(lfd), 0);
    } else if (lfd >= 0) {
        CHECK_EQ(weir_io_close(lfd), 0);
    }
    return 0;
}

TEST(listen_any_address)
{
    CHECK_EQ(test_run_main(listen_any_main, NULL), 0);
}

/* "localhost" goes through getaddrinfo on the blocking pool; on a machine
 * where it also names ::1 and the server is IPv4 only, the first address
 * is refused and the next one connects. */
static intptr_t localhost_main(void *arg)
{
    (void)arg;
    weir_net_addr addrs[WEIR_NET_RESOLVE_MAX];
    int n = weir_net_resolve("localhost", 8080, addrs, WEIR_NET_RESOLVE_MAX, after_ms(10000));
    CHECK_GE(n, 1);
    int has_v4 = 0;
    for (int i = 0; i < n; i++) {
        char s[WEIR_NET_ADDRSTRLEN];
        CHECK_GT(weir_net_addr_format(&addrs[i], s, sizeof(s)), 0);
        printf("    localhost -> %s\n", s);
        CHECK_EQ(weir_net_addr_port(&addrs[i]), 8080);
        has_v4 |= strcmp(s, "127.0.0.1:8080") == 0;
    }
    CHECK(has_v4);

    int lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(lfd, 0);
    int port = weir_net_local_port(lfd);
    struct echo_srv s = {.lfd = lfd, .n = 1};
    weir_task *st = test_spawn(echo_server, &s);
    echo_once("localhost", port);
    CHECK_EQ(join(st), 0);
    CHECK_EQ(weir_io_close(lfd), 0);

    /* Listening on a name resolves it too. */
    lfd = weir_net_listen("localhost", 0, NULL);
    CHECK_GE(lfd, 0);
    CHECK_GT(weir_net_local_port(lfd), 0);
    CHECK_EQ(weir_io_close(lfd), 0);
    return 0;
}

/* Each address in turn until one accepts; the first error when none does. */
static intptr_t connect_addrs_main(void *arg)
{
    (void)arg;
    int dead = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(dead, 0);
    int dead_port = weir_net_local_port(dead);
    CHECK_EQ(weir_io_close(dead), 0);
    int lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(lfd, 0);
    int port = weir_net_local_port(lfd);
    weir_net_addr a[3];
    CHECK_EQ(weir_net_resolve("127.0.0.1", dead_port, &a[0], 1, WEIR_FOREVER), 1);
    CHECK_EQ(weir_net_resolve("::1", port, &a[1], 1, WEIR_FOREVER), 1); /* refused or no v6 */
    CHECK_EQ(weir_net_resolve("127.0.0.1", port, &a[2], 1, WEIR_FOREVER), 1);
    int fd = weir_net_connect_addrs(a, 3, after_ms(5000));
    CHECK_GE(fd, 0);
    weir_net_addr pa;
    CHECK_EQ(weir_net_peer_addr(fd, &pa), 0);
    char s[WEIR_NET_ADDRSTRLEN];
    CHECK_GT(weir_net_addr_format(&pa, s, sizeof(s)), 0);
    char want[WEIR_NET_ADDRSTRLEN];
    snprintf(want, sizeof(want), "127.0.0.1:%d", port);
    CHECK_STR(s, want);
    CHECK_EQ(weir_io_close(fd), 0);
    /* None accepts: the first address's error. */
    CHECK_EQ(weir_net_connect_addrs(a, 1, after_ms(5000)), -ECONNREFUSED);
    CHECK_EQ(weir_net_connect_addrs(a, 0, after_ms(5000)), -EINVAL);
    CHECK_EQ(weir_net_connect_addrs(NULL, 1, after_ms(5000)), -EINVAL);
    int c = weir_net_accept(lfd, NULL, after_ms(5000));
    CHECK_GE(c, 0);
    CHECK_EQ(weir_io_close(c), 0);
    CHECK_EQ(weir_io_close(lfd), 0);
    return 0;
}

TEST(connect_tries_each_address)
{
    CHECK_EQ(test_run_main(connect_addrs_main, NULL), 0);
}

TEST(connect_localhost_by_name)
{
    CHECK_EQ(test_run_main(localhost_main, NULL), 0);
}

/* Many lookups at once share the pool and all finish. */
static intptr_t resolve_one(void *arg)
{
    (void)arg;
    weir_net_addr a[4];
    return weir_net_resolve("localhost", 1, a, 4, after_ms(10000)) >= 1 ? 0 : -1;
}

static intptr_t resolve_many_main(void *arg)
{
    (void)arg;
    weir_task *t[32];
    for (int i = 0; i < 32; i++)
        t[i] = test_spawn(resolve_one, NULL);
    for (int i = 0; i < 32; i++)
        CHECK_EQ(join(t[i]), 0);
    return 0;
}

TEST(resolve_many_concurrently)
{
    CHECK_EQ(test_run_main(resolve_many_main, NULL), 0);
}

/*
 * Lookups whose asker gives up while they wait for a pool thread: with one
 * thread, kept busy, a lookup times out (or is cancelled) in the queue. Its
 * job is neither lost nor leaked (ASan's leak check runs at exit), and the
 * next lookup still works once the thread is free.
 */
static intptr_t hog(void *arg)
{
    (void)arg;
    usleep(300 * 1000); /* on the pool thread */
    return 7;
}

static intptr_t hog_task(void *arg)
{
    (void)arg;
    return (intptr_t)weir_blocking_run(hog, NULL, WEIR_FOREVER);
}

static intptr_t resolve_forever(void *arg)
{
    (void)arg;
    weir_net_addr a[2];
    return weir_net_resolve("localhost", 80, a, 2, WEIR_FOREVER);
}

static intptr_t abandoned_main(void *arg)
{
    (void)arg;
    weir_task *h = test_spawn(hog_task, NULL);
    weir_time_sleep(30 * WEIR_MSEC); /* the hog has the only thread */
    weir_net_addr a[2];
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_net_resolve("localhost", 80, a, 2, after_ms(50)), -ETIMEDOUT);
    CHECK_GE(weir_time_now() - t0, 50 * WEIR_MSEC); /* at the deadline, not before */
    weir_task *c = test_spawn(resolve_forever, NULL);
    weir_time_sleep(10 * WEIR_MSEC);
    CHECK_EQ(weir_task_cancel(c), 0);
    intptr_t v = 0;
    CHECK_EQ(weir_task_join(c, &v, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(v, -ECANCELED);
    /* Waits behind the hog, then resolves. */
    CHECK_GE(weir_net_resolve("localhost", 80, a, 2, after_ms(10000)), 1);
    CHECK_EQ(join(h), 7);
    return 0;
}

TEST(resolve_abandoned_in_queue)
{
    setenv("WEIR_BLOCKING_THREADS", "1", 1);
    CHECK_EQ(test_run_main(abandoned_main, NULL), 0);
    unsetenv("WEIR_BLOCKING_THREADS");
}

/*
 * A lookup still queued when the loop is freed: the only pool thread is held
 * by a job that returns only once the lookup's task has ended, so the lookup
 * cannot run; the free cancels its task, which drops the queued job. The job
 * (with its address array) is released then, not leaked: ASan's leak check
 * at exit would name it. Needs no network ("localhost" is never looked up).
 */
static atomic_int dropped_hog_started, dropped_asker_ended;
static int64_t dropped_result;

static intptr_t hold_until_asker_ended(void *arg)
{
    (void)arg;
    atomic_store(&dropped_hog_started, 1);
    int64_t give_up = weir_time_now() + 10 * WEIR_SEC;
    while (!atomic_load(&dropped_asker_ended) && weir_time_now() < give_up)
        usleep(1000);
    return 0;
}

static intptr_t dropped_hog_task(void *arg)
{
    (void)arg;
    return (intptr_t)weir_blocking_run(hold_until_asker_ended, NULL, WEIR_FOREVER);
}

static void asker_ended(void *arg)
{
    (void)arg;
    atomic_store(&dropped_asker_ended, 1);
}

static intptr_t dropped_asker(void *arg)
{
    (void)arg;
    CHECK_EQ(weir_task_defer(asker_ended, NULL), 0);
    weir_net_addr a[WEIR_NET_RESOLVE_MAX];
    dropped_result = weir_net_resolve("localhost", 80, a, WEIR_NET_RESOLVE_MAX, WEIR_FOREVER);
    return 0;
}

TEST(resolve_dropped_at_shutdown)
{
    setenv("WEIR_BLOCKING_THREADS", "1", 1);
    atomic_store(&dropped_hog_started, 0);
    atomic_store(&dropped_asker_ended, 0);
    dropped_result = 0;
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    weir_task *h = weir_task_spawn(dropped_hog_task, NULL, &(weir_spawn_opts){.loop = l});
    CHECK(h != NULL);
    weir_task_detach(h);
    int64_t give_up = weir_time_now() + 10 * WEIR_SEC;
    while (!atomic_load(&dropped_hog_started)) {
        CHECK_GE(weir_loop_poll(l, 1), 0);
        CHECK_LT(weir_time_now(), give_up);
    }
    weir_task *t = weir_task_spawn(dropped_asker, NULL, &(weir_spawn_opts){.loop = l});
    CHECK(t != NULL);
    weir_task_detach(t);
    while (weir__pool_queued(l->pool) == 0) { /* the lookup is queued behind the hog */
        CHECK_GE(weir_loop_poll(l, 1), 0);
        CHECK_LT(weir_time_now(), give_up);
    }
    weir_loop_free(l);
    CHECK_EQ(dropped_result, -ECANCELED);
    CHECK_EQ(atomic_load(&dropped_asker_ended), 1);
    unsetenv("WEIR_BLOCKING_THREADS");
}

/* A name the resolver does not know: WEIR_ERESOLVE (or a temporary failure where
 * DNS is unreachable), never a crash, with a readable message. */
static intptr_t unknown_host_main(void *arg)
{
    (void)arg;
    int r = weir_net_connect("no-such-host.invalid", 80, after_ms(10000));
    printf("    no-such-host.invalid: %d (%s)\n", r, weir_net_strerror(r));
    CHECK(r == WEIR_ERESOLVE || r == WEIR_ENOADDR || r == -EAGAIN || r == -ETIMEDOUT);
    if (r == WEIR_ERESOLVE)
        CHECK_STR(weir_net_strerror(r), "host name not found");
    return 0;
}

TEST(connect_unknown_host)
{
    CHECK_EQ(test_run_main(unknown_host_main, NULL), 0);
}

/* From a plain thread without a loop: numbers and names both resolve (the
 * thread itself does the lookup), and listening works. */
TEST(resolve_outside_runtime)
{
    weir_net_addr a[WEIR_NET_RESOLVE_MAX];
    char s[WEIR_NET_ADDRSTRLEN];
    CHECK_EQ(weir_net_resolve("127.0.0.1", 80, a, 4, WEIR_FOREVER), 1);
    CHECK_GT(weir_net_addr_format(&a[0], s, sizeof(s)), 0);
    CHECK_STR(s, "127.0.0.1:80");
    CHECK_EQ(weir_net_resolve("::1", 443, a, 4, WEIR_FOREVER), 1);
    CHECK_GT(weir_net_addr_format(&a[0], s, sizeof(s)), 0);
    CHECK_STR(s, "[::1]:443");
    CHECK_EQ(weir_net_resolve("[2001:db8::7]", 1, a, 4, WEIR_FOREVER), 1);
    CHECK_GT(weir_net_addr_format(&a[0], s, sizeof(s)), 0);
    CHECK_STR(s, "[2001:db8::7]:1");
    /* A scoped literal keeps its scope. */
    CHECK_EQ(weir_net_resolve("fe80::1%lo", 9, a, 4, WEIR_FOREVER), 1);
    CHECK_GT(weir_net_addr_format(&a[0], s, sizeof(s)), 0);
    CHECK_STR(s, "[fe80::1%lo]:9");
    CHECK_GE(weir_net_resolve("localhost", 80, a, WEIR_NET_RESOLVE_MAX, WEIR_FOREVER), 1);
    int lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(lfd, 0);
    CHECK_GT(weir_net_local_port(lfd), 0);
    CHECK_EQ(close(lfd), 0);
}

/* ---- failures ------------------------------------------------------------------------- */
static intptr_t refused_main(void *arg)
{
    (void)arg;
    /* A port that was just free: nothing listens there now. */
    int lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(lfd, 0);
    int port = weir_net_local_port(lfd);
    CHECK_EQ(weir_io_close(lfd), 0);
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_net_connect("127.0.0.1", port, after_ms(5000)), -ECONNREFUSED);
    CHECK_LT(weir_time_now() - t0, 2 * WEIR_SEC); /* refused at once, not timed out */
    return 0;
}

TEST(connect_refused)
{
    CHECK_EQ(test_run_main(refused_main, NULL), 0);
}

/*
 * A listener whose accept queue is full drops new SYNs, so a connect hangs
 * until its deadline: -ETIMEDOUT, on time. Fill the queue (backlog 1, never
 * accepting) with connects bounded by a short deadline each until one times
 * out.
 */
static intptr_t connect_timeout_main(void *arg)
{
    (void)arg;
    weir_listen_opts o = {.backlog = 1};
    int lfd = weir_net_listen("127.0.0.1", 0, &o);
    CHECK_GE(lfd, 0);
    int port = weir_net_local_port(lfd);
    int fds[64], nfds = 0, timed_out = 0;
    for (int i = 0; i < 64 && !timed_out; i++) {
        int64_t t0 = weir_time_now();
        int fd = weir_net_connect("127.0.0.1", port, after_ms(200));
        int64_t took = weir_time_now() - t0;
        if (fd == -ETIMEDOUT) {
            timed_out = 1;
            CHECK_GE(took, 150 * WEIR_MSEC);
            CHECK_LT(took, 3 * WEIR_SEC);
            printf("    connect %d timed out after %.0f ms\n", i, (double)took / 1e6);
        } else {
            CHECK_GE(fd, 0);
            fds[nfds++] = fd;
        }
    }
    CHECK(timed_out);
    for (int i = 0; i < nfds; i++)
        CHECK_EQ(weir_io_close(fds[i]), 0);
    CHECK_EQ(weir_io_close(lfd), 0);
    return 0;
}

TEST(connect_deadline_full_backlog)
{
    CHECK_EQ(test_run_main(connect_timeout_main, NULL), 0);
}

/* A deadline already past and a cancelled task end a connect at once. */
static intptr_t connect_cancelled_child(void *arg)
{
    return weir_net_connect("localhost", *(int *)arg, WEIR_FOREVER);
}

static intptr_t connect_past_main(void *arg)
{
    (void)arg;
    int lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(lfd, 0);
    int port = weir_net_local_port(lfd);
    CHECK_EQ(weir_net_connect("127.0.0.1", port, weir_time_now() - 1), -ETIMEDOUT);
    CHECK_EQ(weir_net_connect("localhost", port, weir_time_now() - 1), -ETIMEDOUT);
    weir_task *t = test_spawn(connect_cancelled_child, &port);
    CHECK_EQ(weir_task_cancel(t), 0);
    intptr_t v = 0;
    CHECK_EQ(weir_task_join(t, &v, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(v, -ECANCELED);
    /* Accept has a deadline too. */
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_net_accept(lfd, NULL, after_ms(50)), -ETIMEDOUT);
    CHECK_GE(weir_time_now() - t0, 40 * WEIR_MSEC);
    CHECK_EQ(weir_io_close(lfd), 0);
    return 0;
}

TEST(connect_accept_deadlines_and_cancel)
{
    CHECK_EQ(test_run_main(connect_past_main, NULL), 0);
}

static intptr_t bad_inputs_main(void *arg)
{
    (void)arg;
    weir_net_addr a[2];
    /* Ports */
    CHECK_EQ(weir_net_listen("127.0.0.1", -1, NULL), -EINVAL);
    CHECK_EQ(weir_net_listen("127.0.0.1", 65536, NULL), -EINVAL);
    CHECK_EQ(weir_net_connect("127.0.0.1", 0, after_ms(1000)), -EINVAL);
    CHECK_EQ(weir_net_connect("127.0.0.1", -5, after_ms(1000)), -EINVAL);
    CHECK_EQ(weir_net_connect("127.0.0.1", 70000, after_ms(1000)), -EINVAL);
    CHECK_EQ(weir_net_resolve("127.0.0.1", 65536, a, 2, WEIR_FOREVER), -EINVAL);
    /* Hosts */
    CHECK_EQ(weir_net_connect(NULL, 80, after_ms(1000)), -EINVAL);
    CHECK_EQ(weir_net_connect("", 80, after_ms(1000)), -EINVAL);
    CHECK_EQ(weir_net_connect("[::1", 80, after_ms(1000)), -EINVAL);
    CHECK_EQ(weir_net_connect("[]", 80, after_ms(1000)), -EINVAL);
    char longname[2000];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    CHECK_EQ(weir_net_connect(longname, 80, after_ms(1000)), -ENAMETOOLONG);
    CHECK_EQ(weir_net_resolve("localhost", 80, a, 0, WEIR_FOREVER), -EINVAL);
    CHECK_EQ(weir_net_resolve("localhost", 80, NULL, 2, WEIR_FOREVER), -EINVAL);
    /* Backlog, addresses we do not have, ports in use */
    weir_listen_opts o = {.backlog = -1};
    CHECK_EQ(weir_net_listen("127.0.0.1", 0, &o), -EINVAL);
    CHECK_EQ(weir_net_listen("192.0.2.1", 0, NULL), -EADDRNOTAVAIL);
    int lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(lfd, 0);
    CHECK_EQ(weir_net_listen("127.0.0.1", weir_net_local_port(lfd), NULL), -EADDRINUSE);
    /* SO_REUSEPORT lets two listeners that both ask for it share a port. */
    weir_listen_opts rp = {.reuseport = 1};
    int l1 = weir_net_listen("127.0.0.1", 0, &rp);
    CHECK_GE(l1, 0);
    int l2 = weir_net_listen("127.0.0.1", weir_net_local_port(l1), &rp);
    CHECK_GE(l2, 0);
    CHECK_EQ(weir_io_close(l1), 0);
    CHECK_EQ(weir_io_close(l2), 0);
    /* Not a socket, not a listener */
    CHECK_EQ(weir_net_local_port(-1), -EBADF);
    CHECK_EQ(weir_net_accept(-1, NULL, after_ms(100)), -EBADF);
    CHECK_EQ(weir_net_set_nodelay(-1, 1), -EBADF);
    CHECK_EQ(weir_net_set_keepalive(lfd, -1, 0, 0), -EINVAL);
    CHECK_EQ(weir_net_set_keepalive(lfd, 10, -1, 0), -EINVAL);
    CHECK_EQ(weir_net_close_graceful(-1, after_ms(100)), -EBADF);
    weir_net_addr bad = {.len = 0};
    CHECK_EQ(weir_net_connect_addr(&bad, after_ms(100)), -EINVAL);
    CHECK_EQ(weir_net_connect_addr(NULL, after_ms(100)), -EINVAL);
    CHECK_EQ(weir_io_close(lfd), 0);
    return 0;
}

TEST(bad_inputs)
{
    CHECK_EQ(test_run_main(bad_inputs_main, NULL), 0);
}

/* The calls that wait refuse to run outside a fiber instead of blocking the
 * thread or hanging. */
TEST(waiting_calls_need_a_fiber)
{
    CHECK_EQ(weir_net_connect("127.0.0.1", 80, WEIR_FOREVER), -EINVAL);
    weir_net_addr a;
    CHECK_EQ(weir_net_resolve("127.0.0.1", 80, &a, 1, WEIR_FOREVER), 1);
    CHECK_EQ(weir_net_connect_addr(&a, WEIR_FOREVER), -EINVAL);
    int lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(lfd, 0);
    CHECK_EQ(weir_net_accept(lfd, NULL, WEIR_FOREVER), -EINVAL);
    /* graceful close outside a fiber still releases the fd */
    CHECK_EQ(weir_net_close_graceful(lfd, WEIR_FOREVER), -EINVAL);
    CHECK_EQ(fcntl(lfd, F_GETFD), -1);
    /* A loop thread outside any task may not block on the resolver. */
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    CHECK_EQ(weir_net_resolve("localhost", 80, &a, 1, WEIR_FOREVER), -EINVAL);
    CHECK_EQ(weir_net_resolve("127.0.0.1", 80, &a, 1, WEIR_FOREVER), 1);
    weir_loop_free(l);
}

/* ---- options -------------------------------------------------------------------------- */
static intptr_t options_main(void *arg)
{
    (void)arg;
    int lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(lfd, 0);
    int fd = weir_net_connect("127.0.0.1", weir_net_local_port(lfd), after_ms(5000));
    CHECK_GE(fd, 0);
    int v = -1;
    socklen_t sl = sizeof(v);
    CHECK_EQ(weir_net_set_nodelay(fd, 1), 0);
    CHECK_EQ(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &sl), 0);
    CHECK_NE(v, 0);
    CHECK_EQ(weir_net_set_nodelay(fd, 0), 0);
    CHECK_EQ(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &sl), 0);
    CHECK_EQ(v, 0);

    CHECK_EQ(weir_net_set_keepalive(fd, 30, 5, 4), 0);
    CHECK_EQ(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &sl), 0);
    CHECK_NE(v, 0);
    CHECK_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &sl), 0);
    CHECK_EQ(v, 30);
    CHECK_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &v, &sl), 0);
    CHECK_EQ(v, 5);
    CHECK_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &v, &sl), 0);
    CHECK_EQ(v, 4);
    CHECK_EQ(weir_net_set_keepalive(fd, 0, 0, 0), 0);
    CHECK_EQ(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &sl), 0);
    CHECK_EQ(v, 0);

    int c = weir_net_accept(lfd, NULL, after_ms(5000));
    CHECK_GE(c, 0);
    CHECK_EQ(weir_io_close(c), 0);
    CHECK_EQ(weir_io_close(fd), 0);
    CHECK_EQ(weir_io_close(lfd), 0);
    return 0;
}

TEST(socket_options)
{
    CHECK_EQ(test_run_main(options_main, NULL), 0);
}

/* ---- graceful close ------------------------------------------------------------------- */
#define JUNK (256 * 1024)

struct graceful {
    int lfd;
    int peer_closes; /* the client closes after reading the reply */
    int result;      /* weir_net_close_graceful's */
};

/*
 * The server answers without reading what the client sent, then closes
 * gracefully. A plain close with those bytes unread would reset the
 * connection and could destroy the reply before the client read it.
 */
static intptr_t graceful_server(void *arg)
{
    struct graceful *g = arg;
    int c = weir_net_accept(g->lfd, NULL, after_ms(5000));
    CHECK_GE(c, 0);
    /* Wait until some of the client's junk has arrived, unread. */
    CHECK_GT(weir_io_poll(c, POLLIN, after_ms(5000)), 0);
    CHECK_EQ(send_all(c, "reply", 5), 5);
    int64_t t0 = weir_time_now();
    g->result = weir_net_close_graceful(c, after_ms(g->peer_closes ? 5000 : 100));
    if (!g->peer_closes)
        CHECK_GE(weir_time_now() - t0, 80 * WEIR_MSEC);
    return 0;
}

static intptr_t graceful_main(void *arg)
{
    struct graceful *g = arg;
    g->lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(g->lfd, 0);
    weir_task *st = test_spawn(graceful_server, g);
    int fd = weir_net_connect("127.0.0.1", weir_net_local_port(g->lfd), after_ms(5000));
    CHECK_GE(fd, 0);
    char *junk = calloc(1, JUNK);
    CHECK(junk != NULL);
    CHECK_EQ(send_all(fd, junk, JUNK), JUNK);
    free(junk);
    char buf[8] = {0};
    CHECK_EQ(recv_full(fd, buf, 5), 5);
    CHECK(memcmp(buf, "reply", 5) == 0);
    /* The server's FIN: EOF, no reset. */
    CHECK_EQ(weir_io_recv(fd, buf, sizeof(buf), 0, after_ms(5000)), 0);
    if (g->peer_closes) {
        CHECK_EQ(weir_io_close(fd), 0);
        CHECK_EQ(join(st), 0);
    } else {
        CHECK_EQ(join(st), 0); /* it gives up at its deadline */
        CHECK_EQ(weir_io_close(fd), 0);
    }
    CHECK_EQ(weir_io_close(g->lfd), 0);
    return 0;
}

TEST(graceful_close_peer_reads_everything)
{
    struct graceful g = {.peer_closes = 1};
    CHECK_EQ(test_run_main(graceful_main, &g), 0);
    CHECK_EQ(g.result, 0);
}

TEST(graceful_close_deadline)
{
    struct graceful g = {.peer_closes = 0};
    CHECK_EQ(test_run_main(graceful_main, &g), 0);
    CHECK_EQ(g.result, -ETIMEDOUT);
}

/* A socket that was never connected: -ENOTCONN, and still closed. */
static intptr_t graceful_unconnected_main(void *arg)
{
    (void)arg;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK_GE(fd, 0);
    CHECK_EQ(weir_net_close_graceful(fd, after_ms(100)), -ENOTCONN);
    CHECK_EQ(fcntl(fd, F_GETFD), -1);
    return 0;
}

TEST(graceful_close_unconnected)
{
    CHECK_EQ(test_run_main(graceful_unconnected_main, NULL), 0);
}

/* ---- addresses and messages ----------------------------------------------------------- */
TEST(addr_format_and_errors)
{
    weir_net_addr a;
    char s[WEIR_NET_ADDRSTRLEN];
    CHECK_EQ(weir_net_resolve("10.1.2.3", 65535, &a, 1, WEIR_FOREVER), 1);
    CHECK_EQ(weir_net_addr_format(&a, s, sizeof(s)), (int)strlen("10.1.2.3:65535"));
    CHECK_STR(s, "10.1.2.3:65535");
    CHECK_EQ(weir_net_addr_format(&a, s, 5), -ENOSPC);
    CHECK_STR(s, "");
    weir_net_addr unix_addr = {.len = sizeof(sa_family_t)};
    unix_addr.ss.ss_family = AF_UNIX;
    CHECK_EQ(weir_net_addr_format(&unix_addr, s, sizeof(s)), -EAFNOSUPPORT);
    CHECK_EQ(weir_net_addr_port(&unix_addr), -EAFNOSUPPORT);

    CHECK_STR(weir_net_strerror(WEIR_ERESOLVE), "host name not found");
    CHECK_STR(weir_net_strerror(WEIR_ENOADDR), weir_strerror(WEIR_ENOADDR));
    CHECK_STR(weir_net_strerror(-EBADMSG), "malformed frame");
    CHECK_STR(weir_net_strerror(-ETIMEDOUT), weir_strerror(-ETIMEDOUT));
    CHECK_STR(weir_net_strerror(ECONNREFUSED), weir_strerror(-ECONNREFUSED));
}

/* ---- on the multi-threaded runtime ---------------------------------------------------- */
struct mt {
    int lfd, port;
};

static intptr_t mt_client(void *arg)
{
    struct mt *m = arg;
    echo_once("localhost", m->port);
    return 0;
}

/* Servers and clients spread over the scheduler threads; lookups run on the
 * runtime's shared pool. */
TEST(echo_on_multithreaded_runtime)
{
    weir_rt_opts ro = {.threads = 2};
    weir_rt *rt = weir_rt_new(&ro);
    CHECK(rt != NULL);
    struct mt m;
    m.lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(m.lfd, 0);
    m.port = weir_net_local_port(m.lfd);
    enum { N = 16 };
    struct echo_srv s = {.lfd = m.lfd, .n = N};
    weir_spawn_opts so = {.name = "server", .rt = rt, .stack_size = 128 * 1024};
    weir_task *st = weir_task_spawn(echo_server, &s, &so);
    CHECK(st != NULL);
    weir_task *ct[N];
    for (int i = 0; i < N; i++) {
        weir_spawn_opts co = {.name = "client", .rt = rt};
        ct[i] = weir_task_spawn(mt_client, &m, &co);
        CHECK(ct[i] != NULL);
    }
    for (int i = 0; i < N; i++)
        CHECK_EQ(join(ct[i]), 0);
    CHECK_EQ(join(st), 0);
    weir_rt_free(rt);
    CHECK_EQ(close(m.lfd), 0);
}

TEST_MAIN()
