/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_io.c - the I/O API (weir/io.h) under whichever backend WEIR_IO picks:
 * pipes, readv/writev, pread/pwrite on a regular file, socketpairs, loopback
 * TCP (IPv4 and IPv6) with many concurrent connections, peers that go away,
 * deadlines, cancellation of every kind of I/O suspension, poll and
 * wait-any, closing an fd under a reader, stackless tasks, and the buffer
 * ownership guarantee after a timed-out read.
 *
 * CTest runs this binary once with WEIR_IO=uring and once with WEIR_IO=epoll;
 * every test holds for both. Plain write(2) to a socket whose peer is gone
 * raises SIGPIPE (send uses MSG_NOSIGNAL, write cannot), so the tests that
 * do that ignore SIGPIPE first.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"
#include "test_rt.h"
#include "weir/io.h"
#include "weir/rt.h"

static const char *g_backend = "";

static int is_epoll(void)
{
    return strcmp(g_backend, "epoll") == 0;
}

/* Run fn as the fiber "main" of a fresh loop; return its result. */
static intptr_t run_main(weir_task_fn fn, void *arg)
{
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    g_backend = weir_loop_backend(l);
    weir_spawn_opts o = {.name = "main", .stack_size = 256 * 1024, .loop = l};
    weir_task *t = weir_task_spawn(fn, arg, &o);
    CHECK(t != NULL);
    CHECK_EQ(weir_loop_run(l), 0);
    intptr_t r = -1;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    weir_loop_free(l);
    return r;
}

/* Join a child; returns its value and stores the join status. */
static intptr_t join(weir_task *t, int *status)
{
    intptr_t v = 0;
    int r = weir_task_join(t, &v, WEIR_FOREVER);
    if (status)
        *status = r;
    else
        CHECK_EQ(r, 0);
    return v;
}

static void make_pipe(int p[2])
{
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
}

static ssize_t write_all(int fd, const void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t r =
            weir_io_write(fd, (const char *)buf + done, len - done, weir_time_after_ms(5000));
        if (r < 0)
            return r;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

static ssize_t read_full(int fd, void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t r = weir_io_read(fd, (char *)buf + done, len - done, weir_time_after_ms(5000));
        if (r < 0)
            return r;
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* ---- pipes ---------------------------------------------------------------------------- */
static intptr_t pipe_rw_main(void *arg)
{
    (void)arg;
    int p[2];
    make_pipe(p);
    CHECK_EQ(weir_io_write(p[1], "hello", 5, WEIR_FOREVER), 5);
    char buf[16] = {0};
    CHECK_EQ(weir_io_read(p[0], buf, sizeof(buf), WEIR_FOREVER), 5);
    CHECK_STR(buf, "hello");
    /* EOF once the writer is gone. */
    CHECK_EQ(weir_io_close(p[1]), 0);
    CHECK_EQ(weir_io_read(p[0], buf, sizeof(buf), WEIR_FOREVER), 0);
    CHECK_EQ(weir_io_close(p[0]), 0);
    /* Errors are results, not crashes. */
    CHECK_EQ(weir_io_read(-1, buf, 1, WEIR_FOREVER), -EBADF);
    CHECK_EQ(weir_io_close(p[0]), -EBADF);
    return 0;
}

TEST(pipe_read_write)
{
    CHECK_EQ(run_main(pipe_rw_main, NULL), 0);
}

struct pipe_pair {
    int p[2];
    int64_t delay_ms;
};

static intptr_t delayed_writer(void *arg)
{
    struct pipe_pair *pp = arg;
    weir_time_sleep(pp->delay_ms * WEIR_MSEC);
    return weir_io_write(pp->p[1], "late", 4, WEIR_FOREVER);
}

static intptr_t blocking_read_main(void *arg)
{
    (void)arg;
    struct pipe_pair pp = {.delay_ms = 20};
    make_pipe(pp.p);
    weir_task *w = test_spawn(delayed_writer, &pp);
    int64_t t0 = weir_time_now();
    char buf[8] = {0};
    CHECK_EQ(weir_io_read(pp.p[0], buf, sizeof(buf), weir_time_after_ms(5000)), 4);
    CHECK_GE(weir_time_now() - t0, 15 * WEIR_MSEC);
    CHECK_STR(buf, "late");
    CHECK_EQ(join(w, NULL), 4);
    weir_io_close(pp.p[0]);
    weir_io_close(pp.p[1]);
    return 0;
}

TEST(read_blocks_until_fiber_writes)
{
    CHECK_EQ(run_main(blocking_read_main, NULL), 0);
}

static void *thread_writer(void *arg)
{
    struct pipe_pair *pp = arg;
    usleep(30 * 1000);
    ssize_t r = write(pp->p[1], "thread", 6);
    return (void *)(intptr_t)r;
}

static intptr_t thread_read_main(void *arg)
{
    (void)arg;
    struct pipe_pair pp = {0};
    make_pipe(pp.p);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, thread_writer, &pp), 0);
    char buf[8] = {0};
    CHECK_EQ(weir_io_read(pp.p[0], buf, sizeof(buf), weir_time_after_ms(5000)), 6);
    CHECK_STR(buf, "thread");
    void *res;
    pthread_join(th, &res);
    CHECK_EQ((intptr_t)res, 6);
    weir_io_close(pp.p[0]);
    weir_io_close(pp.p[1]);
    return 0;
}

TEST(read_blocks_until_thread_writes)
{
    CHECK_EQ(run_main(thread_read_main, NULL), 0);
}

static intptr_t vec_main(void *arg)
{
    (void)arg;
    int p[2];
    make_pipe(p);
    struct iovec out[3] = {{"ab", 2}, {"cde", 3}, {"fghij", 5}};
    CHECK_EQ(weir_io_writev(p[1], out, 3, WEIR_FOREVER), 10);
    char a[4] = {0}, b[16] = {0};
    struct iovec in[2] = {{a, 3}, {b, sizeof(b) - 1}};
    CHECK_EQ(weir_io_readv(p[0], in, 2, WEIR_FOREVER), 10);
    CHECK_STR(a, "abc");
    CHECK_STR(b, "defghij");
    weir_io_close(p[0]);
    weir_io_close(p[1]);
    return 0;
}

TEST(readv_writev)
{
    CHECK_EQ(run_main(vec_main, NULL), 0);
}

static intptr_t file_main(void *arg)
{
    (void)arg;
    char path[] = "/tmp/weir_test_io_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    CHECK_EQ(weir_io_pwrite(fd, "world", 5, 100, WEIR_FOREVER), 5);
    CHECK_EQ(weir_io_pwrite(fd, "hello", 5, 0, WEIR_FOREVER), 5);
    char buf[16] = {0};
    CHECK_EQ(weir_io_pread(fd, buf, 5, 100, WEIR_FOREVER), 5);
    CHECK_STR(buf, "world");
    memset(buf, 0, sizeof(buf));
    CHECK_EQ(weir_io_pread(fd, buf, 5, 0, WEIR_FOREVER), 5);
    CHECK_STR(buf, "hello");
    CHECK_EQ(weir_io_pread(fd, buf, 5, 105, WEIR_FOREVER), 0); /* past the end */
    CHECK_EQ(weir_io_pread(fd, buf, 5, -1, WEIR_FOREVER), -EINVAL);
    /* Positional ops leave the file position alone; plain reads use it. */
    CHECK_EQ(lseek(fd, 0, SEEK_CUR), 0);
    memset(buf, 0, sizeof(buf));
    CHECK_EQ(weir_io_read(fd, buf, 3, WEIR_FOREVER), 3);
    CHECK_STR(buf, "hel");
    CHECK_EQ(weir_io_poll(fd, POLLIN, weir_time_after_ms(1000)) & POLLIN, POLLIN);
    CHECK_EQ(weir_io_close(fd), 0);
    return 0;
}

TEST(pread_pwrite_regular_file)
{
    CHECK_EQ(run_main(file_main, NULL), 0);
}

/* ---- socketpair ---------------------------------------------------------------------- */
static intptr_t delayed_send(void *arg)
{
    int fd = (int)(intptr_t)arg;
    weir_time_sleep(10 * WEIR_MSEC);
    return weir_io_send(fd, "pong", 4, 0, WEIR_FOREVER);
}

static intptr_t sockpair_main(void *arg)
{
    (void)arg;
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    char buf[16] = {0};
    CHECK_EQ(weir_io_send(sv[0], "ping", 4, 0, WEIR_FOREVER), 4);
    CHECK_EQ(weir_io_recv(sv[1], buf, sizeof(buf), 0, WEIR_FOREVER), 4);
    CHECK_STR(buf, "ping");
    weir_task *t = test_spawn(delayed_send, (void *)(intptr_t)sv[1]);
    memset(buf, 0, sizeof(buf));
    /* MSG_PEEK passes through: the bytes stay for the next recv. */
    CHECK_EQ(weir_io_recv(sv[0], buf, sizeof(buf), MSG_PEEK, weir_time_after_ms(5000)), 4);
    memset(buf, 0, sizeof(buf));
    CHECK_EQ(weir_io_recv(sv[0], buf, sizeof(buf), 0, weir_time_after_ms(5000)), 4);
    CHECK_STR(buf, "pong");
    CHECK_EQ(join(t, NULL), 4);
    CHECK_EQ(weir_io_close(sv[0]), 0);
    CHECK_EQ(weir_io_close(sv[1]), 0);
    return 0;
}

TEST(recv_send_socketpair)
{
    CHECK_EQ(run_main(sockpair_main, NULL), 0);
}

/* ---- TCP ------------------------------------------------------------------------------ */
typedef struct addr {
    struct sockaddr_storage ss;
    socklen_t len;
    int family;
} addr;

/* A listening socket on the loopback address of `family`; -errno if that
 * family is unavailable. */
static int tcp_listen(int family, addr *a, int backlog)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(a, 0, sizeof(*a));
    a->family = family;
    if (family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&a->ss;
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a->len = sizeof(*in);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a->ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_addr = in6addr_loopback;
        a->len = sizeof(*in6);
    }
    if (bind(fd, (struct sockaddr *)&a->ss, a->len) < 0 || listen(fd, backlog) < 0 ||
        getsockname(fd, (struct sockaddr *)&a->ss, &a->len) < 0) {
        int err = errno;
        weir_io_close(fd);
        return -err;
    }
    return fd;
}

static intptr_t echo_handler(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[512];
    for (;;) {
        ssize_t n = weir_io_read(fd, buf, sizeof(buf), weir_time_after_ms(10000));
        if (n <= 0)
            break;
        if (write_all(fd, buf, (size_t)n) < 0)
            break;
    }
    weir_io_close(fd);
    return 0;
}

struct server {
    int lfd;
    int n;
};

static intptr_t echo_server(void *arg)
{
    struct server *sv = arg;
    for (int i = 0; i < sv->n; i++) {
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        int c = weir_io_accept(sv->lfd, (struct sockaddr *)&peer, &plen, weir_time_after_ms(10000));
        CHECK_GE(c, 0);
        CHECK_GT(plen, 0);
        int fl = fcntl(c, F_GETFL);
        CHECK(fl & O_NONBLOCK);
        CHECK(fcntl(c, F_GETFD) & FD_CLOEXEC);
        weir_task_detach(test_spawn(echo_handler, (void *)(intptr_t)c));
    }
    return 0;
}

struct client {
    const addr *a;
    int id;
};

static intptr_t echo_client(void *arg)
{
    struct client *c = arg;
    int fd = socket(c->a->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    int r = weir_io_connect(fd, (const struct sockaddr *)&c->a->ss, c->a->len,
                            weir_time_after_ms(10000));
    CHECK_EQ(r, 0);
    char msg[1500], back[1500];
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (char)('a' + (c->id + i) % 26);
    for (int round = 0; round < 3; round++) {
        CHECK_EQ(write_all(fd, msg, sizeof(msg)), sizeof(msg));
        memset(back, 0, sizeof(back));
        CHECK_EQ(read_full(fd, back, sizeof(back)), sizeof(back));
        CHECK(memcmp(msg, back, sizeof(msg)) == 0);
    }
    CHECK_EQ(weir_io_close(fd), 0);
    return 0;
}

#define NCLIENTS 50

static intptr_t echo_main(void *arg)
{
    int family = (int)(intptr_t)arg;
    addr a;
    int lfd = tcp_listen(family, &a, 128);
    if (lfd < 0) {
        printf("    skipped: no loopback for family %d (%s)\n", family, strerror(-lfd));
        return 0;
    }
    struct server sv = {lfd, NCLIENTS};
    weir_task *st = test_spawn(echo_server, &sv);
    struct client cl[NCLIENTS];
    weir_task *ct[NCLIENTS];
    for (int i = 0; i < NCLIENTS; i++) {
        cl[i] = (struct client){&a, i};
        ct[i] = test_spawn(echo_client, &cl[i]);
    }
    for (int i = 0; i < NCLIENTS; i++)
        CHECK_EQ(join(ct[i], NULL), 0);
    CHECK_EQ(join(st, NULL), 0);
    CHECK_EQ(weir_io_close(lfd), 0);
    return 0;
}

TEST(tcp_echo_ipv4_many)
{
    CHECK_EQ(run_main(echo_main, (void *)(intptr_t)AF_INET), 0);
}

TEST(tcp_echo_ipv6_many)
{
    CHECK_EQ(run_main(echo_main, (void *)(intptr_t)AF_INET6), 0);
}

/* A peer that goes away: reads see EOF, writes fail (no SIGPIPE with send). */
static intptr_t peer_close_main(void *arg)
{
    (void)arg;
    signal(SIGPIPE, SIG_IGN);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    weir_io_close(sv[1]);
    char buf[8];
    CHECK_EQ(weir_io_read(sv[0], buf, sizeof(buf), weir_time_after_ms(5000)), 0);
    CHECK_EQ(weir_io_send(sv[0], "x", 1, 0, weir_time_after_ms(5000)), -EPIPE);
    CHECK_EQ(weir_io_write(sv[0], "x", 1, weir_time_after_ms(5000)), -EPIPE);
    weir_io_close(sv[0]);

    /* TCP: the server closes the connection right after accepting it. */
    addr a;
    int lfd = tcp_listen(AF_INET, &a, 16);
    CHECK(lfd >= 0);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK_EQ(weir_io_connect(fd, (struct sockaddr *)&a.ss, a.len, weir_time_after_ms(5000)), 0);
    int c = weir_io_accept(lfd, NULL, NULL, weir_time_after_ms(5000));
    CHECK(c >= 0);
    CHECK_EQ(weir_io_close(c), 0);
    CHECK_EQ(weir_io_read(fd, buf, sizeof(buf), weir_time_after_ms(5000)), 0);
    /* The first write may still be accepted (the RST comes back after it). */
    ssize_t r = 0;
    for (int i = 0; i < 100 && r >= 0; i++) {
        r = weir_io_send(fd, "data", 4, 0, weir_time_after_ms(5000));
        if (r >= 0)
            weir_time_sleep(WEIR_MSEC);
    }
    CHECK(r == -EPIPE || r == -ECONNRESET);
    r = weir_io_write(fd, "data", 4, weir_time_after_ms(5000));
    CHECK(r == -EPIPE || r == -ECONNRESET);
    CHECK_EQ(weir_io_close(fd), 0);
    CHECK_EQ(weir_io_close(lfd), 0);
    return 0;
}

TEST(peer_closes_early)
{
    CHECK_EQ(run_main(peer_close_main, NULL), 0);
}

static intptr_t refused_main(void *arg)
{
    (void)arg;
    /* Bind a port, then release it without listening: nobody answers there. */
    addr a;
    int lfd = tcp_listen(AF_INET, &a, 1);
    CHECK(lfd >= 0);
    weir_io_close(lfd);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK_EQ(weir_io_connect(fd, (struct sockaddr *)&a.ss, a.len, weir_time_after_ms(5000)),
             -ECONNREFUSED);
    weir_io_close(fd);
    return 0;
}

TEST(connect_refused)
{
    CHECK_EQ(run_main(refused_main, NULL), 0);
}

static intptr_t deadline_main(void *arg)
{
    (void)arg;
    addr a;
    int lfd = tcp_listen(AF_INET, &a, 16);
    CHECK(lfd >= 0);
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_io_accept(lfd, NULL, NULL, weir_time_after_ms(50)), -ETIMEDOUT);
    int64_t dt = weir_time_now() - t0;
    CHECK_GE(dt, 45 * WEIR_MSEC);
    CHECK_LT(dt, 2 * WEIR_SEC);
    weir_io_close(lfd);

    int p[2];
    make_pipe(p);
    char buf[4];
    t0 = weir_time_now();
    CHECK_EQ(weir_io_read(p[0], buf, sizeof(buf), weir_time_after_ms(30)), -ETIMEDOUT);
    dt = weir_time_now() - t0;
    CHECK_GE(dt, 25 * WEIR_MSEC);
    CHECK_LT(dt, 2 * WEIR_SEC);
    /* The task deadline applies too. */
    int64_t old = weir_task_set_deadline(weir_time_after_ms(20));
    CHECK_EQ(weir_io_read(p[0], buf, sizeof(buf), WEIR_FOREVER), -ETIMEDOUT);
    weir_task_set_deadline(old);
    /* A deadline in the past fails at once. */
    CHECK_EQ(weir_io_read(p[0], buf, sizeof(buf), weir_time_now() - 1), -ETIMEDOUT);
    weir_io_close(p[0]);
    weir_io_close(p[1]);
    return 0;
}

TEST(accept_and_read_deadlines)
{
    CHECK_EQ(run_main(deadline_main, NULL), 0);
}

/* ---- cancellation --------------------------------------------------------------------- */
enum { K_READ, K_ACCEPT, K_POLL, K_ANY, K_RECV, K_WRITE };

struct blocked {
    int kind;
    int fds[3];
    int started;
};

static intptr_t blocked_op(void *arg)
{
    struct blocked *b = arg;
    char buf[16];
    b->started = 1;
    switch (b->kind) {
    case K_READ:
        return weir_io_read(b->fds[0], buf, sizeof(buf), WEIR_FOREVER);
    case K_RECV:
        return weir_io_recv(b->fds[0], buf, sizeof(buf), 0, WEIR_FOREVER);
    case K_ACCEPT:
        return weir_io_accept(b->fds[0], NULL, NULL, WEIR_FOREVER);
    case K_POLL:
        return weir_io_poll(b->fds[0], POLLIN, WEIR_FOREVER);
    case K_ANY:
        return weir_io_wait_readable_any(b->fds, 3, WEIR_FOREVER);
    case K_WRITE: {
        /* Fill the socket buffer, then block in write. */
        static char big[65536];
        for (;;) {
            ssize_t r = weir_io_write(b->fds[0], big, sizeof(big), WEIR_FOREVER);
            if (r < 0)
                return r;
        }
    }
    }
    return -EINVAL;
}

static intptr_t cancel_main(void *arg)
{
    (void)arg;
    int p1[2], p2[2], p3[2], sv[2];
    make_pipe(p1);
    make_pipe(p2);
    make_pipe(p3);
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    addr a;
    int lfd = tcp_listen(AF_INET, &a, 16);
    CHECK(lfd >= 0);
    struct blocked bs[] = {
        {K_READ, {p1[0]}, 0}, {K_ACCEPT, {lfd}, 0},
        {K_POLL, {p1[0]}, 0}, {K_ANY, {p1[0], p2[0], p3[0]}, 0},
        {K_RECV, {sv[0]}, 0}, {K_WRITE, {sv[1]}, 0},
    };
    for (size_t i = 0; i < sizeof(bs) / sizeof(bs[0]); i++) {
        weir_task *t = test_spawn(blocked_op, &bs[i]);
        weir_time_sleep(10 * WEIR_MSEC); /* let it block */
        CHECK(bs[i].started);
        CHECK_EQ(weir_task_cancel(t), 0);
        int st;
        intptr_t v = join(t, &st);
        CHECK_EQ(st, -ECANCELED);
        CHECK_EQ(v, -ECANCELED);
    }
    /* Nothing was consumed or left behind: the fds still work. */
    CHECK_EQ(weir_io_write(p1[1], "z", 1, WEIR_FOREVER), 1);
    char c;
    CHECK_EQ(weir_io_read(p1[0], &c, 1, weir_time_after_ms(1000)), 1);
    CHECK_EQ(c, 'z');
    int fds[] = {p1[0], p1[1], p2[0], p2[1], p3[0], p3[1], sv[0], sv[1], lfd};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        CHECK_EQ(weir_io_close(fds[i]), 0);
    return 0;
}

TEST(cancel_blocked_io)
{
    CHECK_EQ(run_main(cancel_main, NULL), 0);
}

/* Data arrives, then the reader is cancelled before it runs again: it
 * reports either the bytes or -ECANCELED with the bytes still in the pipe. */
static intptr_t reader5(void *arg)
{
    int *p = arg;
    char buf[8] = {0};
    ssize_t r = weir_io_read(p[0], buf, 5, WEIR_FOREVER);
    if (r == 5)
        CHECK(memcmp(buf, "abcde", 5) == 0);
    return r;
}

static intptr_t cancel_race_main(void *arg)
{
    (void)arg;
    int got = 0, cancelled = 0;
    for (int i = 0; i < 20; i++) {
        int p[2];
        make_pipe(p);
        weir_task *t = test_spawn(reader5, p);
        weir_time_sleep(i % 2 ? WEIR_MSEC : 0); /* reader blocked, or only started */
        CHECK_EQ(write(p[1], "abcde", 5), 5);
        if (i % 4 >= 2)
            weir_task_yield(); /* give the completion a turn to arrive */
        weir_task_cancel(t);
        int st;
        intptr_t v = join(t, &st);
        if (v == 5) {
            got++;
        } else {
            CHECK_EQ(v, -ECANCELED);
            cancelled++;
            char buf[8] = {0};
            CHECK_EQ(weir_io_read(p[0], buf, sizeof(buf), weir_time_after_ms(1000)), 5);
            CHECK_STR(buf, "abcde");
        }
        weir_io_close(p[0]);
        weir_io_close(p[1]);
    }
    printf("    read won %d times, cancel won %d times\n", got, cancelled);
    return 0;
}

TEST(cancel_after_data_loses_nothing)
{
    CHECK_EQ(run_main(cancel_race_main, NULL), 0);
}

/* ---- poll and wait-any ---------------------------------------------------------------- */
static intptr_t poll_main(void *arg)
{
    (void)arg;
    int p[2];
    make_pipe(p);
    CHECK_EQ(weir_io_poll(p[1], POLLOUT, weir_time_after_ms(1000)), POLLOUT);
    CHECK_EQ(weir_io_poll(p[0], POLLIN, weir_time_after_ms(20)), -ETIMEDOUT);
    struct pipe_pair pp = {{p[0], p[1]}, 10};
    weir_task *w = test_spawn(delayed_writer, &pp);
    int r = weir_io_poll(p[0], POLLIN, weir_time_after_ms(5000));
    CHECK_EQ(r & POLLIN, POLLIN);
    CHECK_EQ(join(w, NULL), 4);
    /* Ready at once, and polling consumed nothing. */
    CHECK_EQ(weir_io_poll(p[0], POLLIN, weir_time_after_ms(1000)) & POLLIN, POLLIN);
    char buf[8];
    CHECK_EQ(weir_io_read(p[0], buf, sizeof(buf), WEIR_FOREVER), 4);
    /* Writer gone: POLLHUP is reported to a POLLIN waiter. */
    weir_io_close(p[1]);
    CHECK_EQ(weir_io_poll(p[0], POLLIN, weir_time_after_ms(1000)) & POLLHUP, POLLHUP);
    weir_io_close(p[0]);
    /* A reader going away while we wait: the waiting poll sees POLLERR. */
    make_pipe(p);
    CHECK_EQ(weir_io_poll(-1, POLLIN, weir_time_after_ms(1000)), -EBADF);
    weir_io_close(p[0]);
    CHECK(weir_io_poll(p[1], POLLOUT, weir_time_after_ms(1000)) & POLLERR);
    weir_io_close(p[1]);
    return 0;
}

TEST(poll_readable_writable)
{
    CHECK_EQ(run_main(poll_main, NULL), 0);
}

static intptr_t write_later(void *arg)
{
    int fd = (int)(intptr_t)arg;
    weir_time_sleep(15 * WEIR_MSEC);
    return weir_io_write(fd, "!", 1, WEIR_FOREVER);
}

static intptr_t any_main(void *arg)
{
    (void)arg;
    int p[4][2], fds[4];
    for (int i = 0; i < 4; i++) {
        make_pipe(p[i]);
        fds[i] = p[i][0];
    }
    CHECK_EQ(weir_io_wait_readable_any(fds, 4, weir_time_after_ms(20)), -ETIMEDOUT);
    weir_task *w = test_spawn(write_later, (void *)(intptr_t)p[2][1]);
    CHECK_EQ(weir_io_wait_readable_any(fds, 4, weir_time_after_ms(5000)), 2);
    CHECK_EQ(join(w, NULL), 1);
    /* Already readable: at once; the others are untouched. */
    CHECK_EQ(weir_io_wait_readable_any(fds, 4, weir_time_after_ms(1000)), 2);
    CHECK_EQ(write(p[0][1], "a", 1), 1);
    int r = weir_io_wait_readable_any(fds, 4, weir_time_after_ms(1000));
    CHECK(r == 0 || r == 2);
    char c;
    CHECK_EQ(weir_io_read(p[2][0], &c, 1, WEIR_FOREVER), 1);
    CHECK_EQ(weir_io_wait_readable_any(fds, 4, weir_time_after_ms(1000)), 0);
    CHECK_EQ(weir_io_read(p[0][0], &c, 1, WEIR_FOREVER), 1);
    /* More fds than the on-stack part array; the same fd twice. */
    int many[20];
    for (int i = 0; i < 20; i++)
        many[i] = p[i % 4][0];
    w = test_spawn(write_later, (void *)(intptr_t)p[3][1]);
    CHECK_EQ(weir_io_wait_readable_any(many, 20, weir_time_after_ms(5000)) % 4, 3);
    CHECK_EQ(join(w, NULL), 1);
    CHECK_EQ(weir_io_read(p[3][0], &c, 1, WEIR_FOREVER), 1);
    /* A bad fd fails the whole wait. */
    int bad[3] = {p[1][0], 100000 - 1, p[2][0]};
    CHECK_EQ(weir_io_wait_readable_any(bad, 3, weir_time_after_ms(1000)), -EBADF);
    int closed_fd = dup(p[1][0]);
    weir_io_close(closed_fd);
    bad[1] = closed_fd;
    CHECK_EQ(weir_io_wait_readable_any(bad, 3, weir_time_after_ms(1000)), -EBADF);
    CHECK_EQ(weir_io_wait_readable_any(fds, 0, WEIR_FOREVER), -EINVAL);
    for (int i = 0; i < 4; i++) {
        weir_io_close(p[i][0]);
        weir_io_close(p[i][1]);
    }
    return 0;
}

TEST(wait_readable_any)
{
    CHECK_EQ(run_main(any_main, NULL), 0);
}

/* ---- close under a reader ------------------------------------------------------------- */
static intptr_t reader_any(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[8];
    return weir_io_read(fd, buf, sizeof(buf), weir_time_after_ms(10000));
}

static intptr_t close_main(void *arg)
{
    (void)arg;
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    /* Keep the socket itself alive past the close, so that it can be shut
     * down when the backend (io_uring) leaves the read in flight. */
    int keep = dup(sv[0]);
    CHECK(keep >= 0);
    weir_task *t = test_spawn(reader_any, (void *)(intptr_t)sv[0]);
    weir_time_sleep(10 * WEIR_MSEC);
    CHECK_EQ(weir_io_close(sv[0]), 0);
    weir_time_sleep(10 * WEIR_MSEC);
    shutdown(keep, SHUT_RDWR);
    intptr_t v = join(t, NULL);
    if (is_epoll())
        CHECK_EQ(v, -EBADF);
    else
        CHECK(v == -EBADF || v == 0);
    weir_io_close(keep);
    weir_io_close(sv[1]);
    return 0;
}

TEST(close_fd_under_reader)
{
    CHECK_EQ(run_main(close_main, NULL), 0);
}

/* ---- stackless ------------------------------------------------------------------------ */
struct sl_echo {
    weir_co co;
    weir_io_op op;
    int64_t res;
    int in, out; /* read from in, write what came to out */
    char buf[32];
    int64_t n;
};

static int sl_echo_poll(void *p, intptr_t *out)
{
    struct sl_echo *f = p;
    WEIR_BEGIN(&f->co);
    weir_io_read_start(&f->op, f->in, f->buf, sizeof(f->buf), -1, weir_time_after_ms(5000));
    WEIR_AWAIT(&f->co, &f->op, f->res);
    if (f->res <= 0)
        WEIR_RETURN(&f->co, out, f->res);
    f->n = f->res;
    weir_io_write_start(&f->op, f->out, f->buf, (size_t)f->n, -1, weir_time_after_ms(5000));
    WEIR_AWAIT(&f->co, &f->op, f->res);
    WEIR_RETURN(&f->co, out, f->res);
    WEIR_END(&f->co);
}

static intptr_t stackless_main(void *arg)
{
    (void)arg;
    int a[2], b[2];
    make_pipe(a);
    make_pipe(b);
    struct sl_echo f = {.in = a[0], .out = b[1]};
    weir_task *t = weir_task_spawn_stackless(sl_echo_poll, &f, NULL);
    CHECK(t != NULL);
    weir_time_sleep(5 * WEIR_MSEC); /* it now waits for data */
    CHECK_EQ(weir_io_write(a[1], "stackless", 9, WEIR_FOREVER), 9);
    char buf[16] = {0};
    CHECK_EQ(weir_io_read(b[0], buf, sizeof(buf), weir_time_after_ms(5000)), 9);
    CHECK_STR(buf, "stackless");
    CHECK_EQ(join(t, NULL), 9);
    /* A stackless read that sees EOF. */
    struct sl_echo g = {.in = a[0], .out = b[1]};
    t = weir_task_spawn_stackless(sl_echo_poll, &g, NULL);
    CHECK(t != NULL);
    weir_io_close(a[1]);
    CHECK_EQ(join(t, NULL), 0); /* EOF */
    weir_io_close(a[0]);
    weir_io_close(b[0]);
    weir_io_close(b[1]);
    return 0;
}

TEST(stackless_read_write)
{
    CHECK_EQ(run_main(stackless_main, NULL), 0);
}

/* ---- buffer ownership ----------------------------------------------------------------- */
/* The read's buffer lives in this fiber's frame, gone once it returns. */
static intptr_t short_reader(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[64];
    memset(buf, 0, sizeof(buf));
    ssize_t r = weir_io_read(fd, buf, sizeof(buf), weir_time_after_ms(10));
    return r;
}

struct sl_reader {
    weir_co co;
    weir_io_op op;
    int64_t res;
    int fd;
    char buf[64];
};

static int sl_reader_poll(void *p, intptr_t *out)
{
    struct sl_reader *f = p;
    WEIR_BEGIN(&f->co);
    weir_io_read_start(&f->op, f->fd, f->buf, sizeof(f->buf), -1, weir_time_after_ms(10));
    WEIR_AWAIT(&f->co, &f->op, f->res);
    WEIR_RETURN(&f->co, out, f->res);
    WEIR_END(&f->co);
}

static intptr_t ownership_main(void *arg)
{
    (void)arg;
    enum { N = 8 };
    int p[N][2];
    for (int i = 0; i < N; i++) {
        make_pipe(p[i]);
        weir_task *t = test_spawn(short_reader, (void *)(intptr_t)p[i][0]);
        CHECK_EQ(join(t, NULL), -ETIMEDOUT);
    }
    /* Stackless too, with the frame on the heap and freed right away: a
     * late completion would write into freed memory (ASan reports it). */
    for (int i = 0; i < N; i++) {
        struct sl_reader *f = calloc(1, sizeof(*f));
        f->fd = p[i][0];
        weir_task *t = weir_task_spawn_stackless(sl_reader_poll, f, NULL);
        CHECK_EQ(join(t, NULL), -ETIMEDOUT);
        free(f);
    }
    /* Reuse the fiber stacks meanwhile, then feed the pipes. */
    for (int i = 0; i < N; i++) {
        weir_task *t = test_spawn(short_reader, (void *)(intptr_t)p[(i + 1) % N][1]);
        CHECK_EQ(join(t, NULL), -EBADF); /* write end: reading it fails */
    }
    for (int i = 0; i < N; i++)
        CHECK_EQ(write(p[i][1], "owned!", 6), 6);
    weir_time_sleep(20 * WEIR_MSEC); /* a late completion would land now */
    for (int i = 0; i < N; i++) {
        char buf[16] = {0};
        CHECK_EQ(weir_io_read(p[i][0], buf, sizeof(buf), weir_time_after_ms(1000)), 6);
        CHECK_STR(buf, "owned!");
        weir_io_close(p[i][0]);
        weir_io_close(p[i][1]);
    }
    return 0;
}

TEST(timed_out_read_releases_buffer)
{
    CHECK_EQ(run_main(ownership_main, NULL), 0);
}

/* ---- FIFO on one fd ------------------------------------------------------------------- */
struct fifo_reader {
    int fd;
    int64_t got;
};

static intptr_t fifo_read(void *arg)
{
    struct fifo_reader *r = arg;
    char c = 0;
    r->got = weir_io_read(r->fd, &c, 1, weir_time_after_ms(5000));
    return c;
}

static intptr_t many_readers_main(void *arg)
{
    (void)arg;
    /* Several readers on one pipe: every byte goes to exactly one of them. */
    int p[2];
    make_pipe(p);
    enum { R = 10 };
    struct fifo_reader rs[R];
    weir_task *ts[R];
    for (int i = 0; i < R; i++) {
        rs[i] = (struct fifo_reader){p[0], 0};
        ts[i] = test_spawn(fifo_read, &rs[i]);
    }
    weir_time_sleep(5 * WEIR_MSEC);
    for (int i = 0; i < R; i++) {
        char c = (char)('A' + i);
        CHECK_EQ(weir_io_write(p[1], &c, 1, WEIR_FOREVER), 1);
        weir_task_yield();
    }
    int seen = 0;
    for (int i = 0; i < R; i++) {
        intptr_t c = join(ts[i], NULL);
        CHECK_EQ(rs[i].got, 1);
        CHECK(c >= 'A' && c < 'A' + R);
        CHECK_EQ(seen & (1 << (c - 'A')), 0);
        seen |= 1 << (c - 'A');
    }
    CHECK_EQ(seen, (1 << R) - 1);
    weir_io_close(p[0]);
    weir_io_close(p[1]);
    return 0;
}

TEST(many_readers_one_pipe)
{
    CHECK_EQ(run_main(many_readers_main, NULL), 0);
}

TEST_MAIN()
