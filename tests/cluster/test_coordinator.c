/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_coordinator.c - a cluster's coordinator (cluster/node.h) run in
 * this process, with in-process workers (weir__worker_run) and fake peers
 * on raw sockets speaking proto.h: first frames that are malformed, too
 * large, cut short, dripped a byte at a time or empty each cost only their
 * connection; version refusals name both versions and the side to
 * upgrade; a worker that never reads is declared lost on its outbox's
 * verdict; a plugin is uploaded once and shipped once per worker
 * connection; a job with checkpoints is restarted within its budget and
 * then fails naming the budget and the cause; a job needing more slots
 * than the cluster has is refused before anything is deployed; a
 * registered worker sending a frame that does not decode loses its
 * session and nothing else; a worker is counted (placed on) from the
 * moment it reads its RegisterAck; a worker given an fd closes it on
 * every failure; a job's end reaches a client that stopped reading for
 * longer than a JobCompleted used to wait.
 *
 * Log lines (stderr) are teed into memory so that a case can wait for
 * what the coordinator says it did; they still reach the real stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <dirent.h>

#include "base/alloc.h"
#include "base/be.h"
#include "rt/rt_int.h"
#include "cluster/client.h"
#include "cluster/coord_int.h"
#include "cluster/ha.h"
#include "cluster/node.h"
#include "cluster/plugins.h"
#include "cluster/proto.h"
#include "test.h"
#include "test_rt.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/rt.h"

#ifndef WEIR_TEST_PLUGIN_DIR
#error "WEIR_TEST_PLUGIN_DIR must name the directory of the built test plugins"
#endif

#define PLUGIN(name) WEIR_TEST_PLUGIN_DIR "/" name ".so"
#define DEADLINE_MS  20000
#define DEADLINE()   weir_time_after_ms(DEADLINE_MS)

/* ---- stderr, teed into memory ------------------------------------------------------------ */

static struct {
    int saved, rd;
    pthread_t th;
    pthread_mutex_t mu;
    char *buf;
    size_t len, cap;
} g_tee = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *tee_main(void *arg)
{
    (void)arg;
    char b[4096];
    ssize_t n;
    while ((n = read(g_tee.rd, b, sizeof(b))) > 0) {
        ssize_t w = write(g_tee.saved, b, (size_t)n);
        (void)w;
        pthread_mutex_lock(&g_tee.mu);
        if (g_tee.len + (size_t)n + 1 > g_tee.cap) {
            size_t cap = (g_tee.cap ? g_tee.cap * 2 : 65536) + (size_t)n;
            char *v = realloc(g_tee.buf, cap);
            if (v) {
                g_tee.buf = v;
                g_tee.cap = cap;
            }
        }
        if (g_tee.len + (size_t)n + 1 <= g_tee.cap) {
            memcpy(g_tee.buf + g_tee.len, b, (size_t)n);
            g_tee.len += (size_t)n;
            g_tee.buf[g_tee.len] = 0;
        }
        pthread_mutex_unlock(&g_tee.mu);
    }
    return NULL;
}

/* A failed check aborts: what it printed must still get out. */
static void tee_on_abort(int sig)
{
    (void)sig;
    dup2(g_tee.saved, 2);
    fcntl(g_tee.rd, F_SETFL, O_NONBLOCK);
    char b[4096];
    ssize_t n;
    while ((n = read(g_tee.rd, b, sizeof(b))) > 0)
        if (write(g_tee.saved, b, (size_t)n) < 0)
            break;
    usleep(100000); /* and what the tee thread holds */
    _exit(134);     /* as an abort would, without waiting on the other threads */
}

/* Every test begins with this: info lines on, stderr teed. */
static void tee_begin(void)
{
    setenv("WEIR_LOG", "info", 0); /* read once, at the first line */
    int p[2];
    CHECK_EQ(pipe(p), 0);
    fflush(stderr);
    g_tee.saved = dup(2);
    CHECK_GE(g_tee.saved, 0);
    CHECK_EQ(dup2(p[1], 2), 2);
    close(p[1]);
    g_tee.rd = p[0];
    g_tee.len = 0;
    if (g_tee.buf)
        g_tee.buf[0] = 0;
    CHECK_EQ(pthread_create(&g_tee.th, NULL, tee_main, NULL), 0);
    signal(SIGABRT, tee_on_abort);
}

static void tee_end(void)
{
    signal(SIGABRT, SIG_DFL);
    fflush(stderr);
    dup2(g_tee.saved, 2); /* the pipe's last writer closes: the reader ends */
    pthread_join(g_tee.th, NULL);
    close(g_tee.saved); /* after the join: the tee thread writes to it */
    close(g_tee.rd);
    free(g_tee.buf);
    g_tee.buf = NULL;
    g_tee.len = g_tee.cap = 0;
}

/* How many times needle occurs in what was logged. */
static int log_count(const char *needle)
{
    int n = 0;
    pthread_mutex_lock(&g_tee.mu);
    for (const char *p = g_tee.buf; p && (p = strstr(p, needle)); p += strlen(needle))
        n++;
    pthread_mutex_unlock(&g_tee.mu);
    return n;
}

/* Poll (fiber) until needle was logged at least n times. */
static void wait_log(const char *needle, int n)
{
    int64_t deadline = DEADLINE();
    while (log_count(needle) < n) {
        if (weir_time_now() >= deadline)
            TEST__FAIL("\"%s\" logged %d times, not %d", needle, log_count(needle), n);
        weir_time_sleep(10 * WEIR_MSEC);
    }
}

/* ---- an in-process coordinator ------------------------------------------------------------ */

typedef struct cnode {
    weir__coord_opts o;
    int stop[2];
    weir_task *t;
    _Atomic int port;
    _Atomic int standby; /* on_standby was called (HA) */
    int rc;
    char msg[512];
    char addr[64];
} cnode;

/* The coordinator a case's on_ready saw (one case at a time). */
static weir__coord *_Atomic ready_coord;

static void on_listen(void *arg, const char *host, int port)
{
    (void)host;
    atomic_store(&((cnode *)arg)->port, port);
}

static intptr_t coord_main(void *arg)
{
    cnode *n = arg;
    n->rc = weir__coord_run(&n->o, n->msg, sizeof(n->msg));
    return 0;
}

/* Spawn a coordinator with n->o as the caller set it (zero: the
 * defaults) on loopback. */
static void coord_spawn(cnode *n)
{
    CHECK_EQ(pipe2(n->stop, O_NONBLOCK | O_CLOEXEC), 0);
    n->o.bind_host = "127.0.0.1";
    n->o.stop_fd = n->stop[0];
    n->o.on_listen = on_listen;
    n->o.arg = n;
    atomic_store(&n->port, 0);
    n->rc = 1;
    n->t = test_spawn(coord_main, n);
}

/* Wait until n listens. */
static void coord_wait_listening(cnode *n)
{
    int64_t deadline = DEADLINE();
    while (!atomic_load(&n->port)) {
        CHECK_LT(weir_time_now(), deadline);
        weir_time_sleep(5 * WEIR_MSEC);
    }
    snprintf(n->addr, sizeof(n->addr), "127.0.0.1:%d", atomic_load(&n->port));
}

/* Spawn a coordinator and wait until it listens. */
static void coord_start(cnode *n)
{
    coord_spawn(n);
    coord_wait_listening(n);
}

/* Stop it: it must end on its own, with 0. */
static void coord_stop(cnode *n)
{
    CHECK_EQ(write(n->stop[1], "x", 1), 1);
    CHECK_EQ(weir_task_join(n->t, NULL, DEADLINE()), 0);
    if (n->rc != 0)
        TEST__FAIL("the coordinator ended with %d: %s", n->rc, n->msg);
    close(n->stop[0]);
    close(n->stop[1]);
}

/* ---- in-process workers ------------------------------------------------------------------- */

typedef struct wnode {
    weir__worker_opts o;
    char id[32];
    int stop[2];
    weir_task *t;
    _Atomic int registered;
    int rc;
    char msg[512];
} wnode;

static void on_registered(void *arg, const char *coordinator)
{
    (void)coordinator;
    atomic_fetch_add(&((wnode *)arg)->registered, 1);
}

static intptr_t worker_main(void *arg)
{
    wnode *w = arg;
    w->rc = weir__worker_run(&w->o, w->msg, sizeof(w->msg));
    return 0;
}

static void worker_start(wnode *w, const char *id, const cnode *c, uint32_t slots)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->id, sizeof(w->id), "%s", id);
    CHECK_EQ(pipe2(w->stop, O_NONBLOCK | O_CLOEXEC), 0);
    w->o = (weir__worker_opts){.id = w->id,
                               .coordinator = c->addr,
                               .slots = slots,
                               .data_host = "127.0.0.1",
                               .stop_fd = w->stop[0],
                               .on_registered = on_registered,
                               .arg = w};
    w->rc = 1;
    w->t = test_spawn(worker_main, w);
    int64_t deadline = DEADLINE();
    while (!atomic_load(&w->registered)) {
        CHECK_LT(weir_time_now(), deadline);
        weir_time_sleep(5 * WEIR_MSEC);
    }
}

static void worker_stop(wnode *w)
{
    CHECK_EQ(write(w->stop[1], "x", 1), 1);
    CHECK_EQ(weir_task_join(w->t, NULL, DEADLINE()), 0);
    if (w->rc != 0)
        TEST__FAIL("worker %s ended with %d: %s", w->id, w->rc, w->msg);
    close(w->stop[0]);
    close(w->stop[1]);
}

/* ---- raw peers ---------------------------------------------------------------------------- */

/* A connection to the coordinator; rcvbuf > 0: with that receive buffer,
 * set before connecting so that the window it advertises stays small. */
static int raw_connect(const cnode *c, int rcvbuf)
{
    if (rcvbuf <= 0) {
        int fd = weir_net_connect("127.0.0.1", atomic_load(&c->port), DEADLINE());
        CHECK_GE(fd, 0);
        return fd;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK_GE(fd, 0);
    CHECK_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0); /* loopback: at once */
    CHECK_EQ(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
    return fd;
}

/* All of p[0..len) by deadline: 0, or the error that stopped it. */
static ssize_t send_all(int fd, const void *p, size_t len, int64_t deadline)
{
    size_t at = 0;
    while (at < len) {
        ssize_t n = weir_io_send(fd, (const uint8_t *)p + at, len - at, MSG_NOSIGNAL, deadline);
        if (n < 0)
            return n;
        at += (size_t)n;
    }
    return 0;
}

static void raw_send(int fd, const void *p, size_t len)
{
    CHECK_EQ(send_all(fd, p, len, DEADLINE()), 0);
}

/* m's whole frame into a malloc'd buffer. */
static uint8_t *encode(const weir__cl_msg *m, size_t *len)
{
    weir_frame_builder fb;
    char why[256];
    int e = weir__cl_encode(m, &fb, why, sizeof(why));
    if (e)
        TEST__FAIL("encode: %d %s", e, why);
    const uint8_t *p;
    CHECK_EQ(weir_frame_builder_finish(&fb, &p, len), 0);
    uint8_t *copy = malloc(*len);
    CHECK(copy != NULL);
    memcpy(copy, p, *len);
    weir_frame_builder_close(&fb);
    return copy;
}

static void raw_send_msg(int fd, const weir__cl_msg *m)
{
    size_t len;
    uint8_t *p = encode(m, &len);
    raw_send(fd, p, len);
    free(p);
}

/* The next message, of kind want (weir__cl_msg_free it). */
static void raw_recv_msg(int fd, weir_frame_parser *fp, int want, weir__cl_msg *m)
{
    char why[256];
    int e = weir__cl_recv(WEIR__CL_FD(fd), fp, m, NULL, DEADLINE(), why, sizeof(why));
    if (e != 1)
        TEST__FAIL("recv: %d %s", e, why);
    CHECK_EQ(m->kind, want);
}

/* The coordinator closes the connection (reading and discarding what it
 * sent): EOF or a reset, within the deadline. */
static void raw_expect_closed(int fd)
{
    char b[4096];
    int64_t deadline = DEADLINE();
    for (;;) {
        ssize_t n = weir_io_recv(fd, b, sizeof(b), 0, deadline);
        if (n == 0 || n == -ECONNRESET)
            return;
        if (n < 0)
            TEST__FAIL("waiting for the coordinator to close: %zd (%s)", n, weir_strerror((int)n));
    }
}

static weir__cl_msg register_msg(const char *id, uint32_t version, uint32_t min, uint32_t slots)
{
    weir__cl_msg m = {.kind = WEIR_CLUSTER_REGISTER};
    m.u.reg = (weir__cl_register){version, min, (char *)id, "127.0.0.1", slots, 0};
    return m;
}

/* Register as worker id on fd (fp initialised here) and check the
 * RegisterAck accepts it: its epoch. */
static uint64_t register_raw(int fd, const char *id, weir_frame_parser *fp)
{
    weir__cl_msg m = register_msg(id, WEIR_CLUSTER_PROTO_VERSION, WEIR_CLUSTER_PROTO_MIN_COMPAT, 4);
    raw_send_msg(fd, &m);
    CHECK_EQ(weir_frame_parser_init(fp, NULL), 0);
    weir__cl_msg a;
    raw_recv_msg(fd, fp, WEIR_CLUSTER_REGISTER_ACK, &a);
    if (a.u.reg_ack.status != WEIR__CL_ACCEPTED)
        TEST__FAIL("register refused: %s", a.u.reg_ack.message);
    uint64_t epoch = a.epoch;
    weir__cl_msg_free(&a);
    return epoch;
}

/* A fake worker's connection, registered and accepted. */
static int fake_worker(const cnode *c, const char *id, int rcvbuf, weir_frame_parser *fp)
{
    int fd = raw_connect(c, rcvbuf);
    register_raw(fd, id, fp);
    return fd;
}

/* ---- clients ------------------------------------------------------------------------------- */

static weir__client *client_open(const cnode *c)
{
    weir__client *cl = NULL;
    char msg[1024];
    int e = weir__client_open(c->addr, "test_coordinator", NULL, DEADLINE(), &cl, msg, sizeof(msg));
    if (e)
        TEST__FAIL("client open: %d %s", e, msg);
    return cl;
}

/* ListJobs answers; the number of jobs. */
static uint32_t client_njobs(weir__client *cl)
{
    weir__cl_job_list l;
    char msg[1024];
    int e = weir__client_list(cl, &l, DEADLINE(), msg, sizeof(msg));
    if (e)
        TEST__FAIL("list: %d %s", e, msg);
    uint32_t n = l.jobs.n;
    weir__client_list_free(&l);
    return n;
}

static uint64_t submit_ok(weir__client *cl, const weir__client_submit_opts *o)
{
    uint64_t job = 0;
    char msg[2048];
    int e = weir__client_submit(cl, o, DEADLINE(), &job, msg, sizeof(msg));
    if (e)
        TEST__FAIL("submit: %d %s", e, msg);
    CHECK_GE(job, 1);
    return job;
}

/* Wait for job's end; its error, and its message copied into msg. */
static int32_t wait_job(weir__client *cl, uint64_t job, int64_t deadline, char *out, size_t cap,
                        uint32_t *restarts)
{
    weir__cl_job_completed d;
    char msg[2048];
    int e = weir__client_wait(cl, job, &d, deadline, msg, sizeof(msg));
    if (e)
        TEST__FAIL("wait: %d %s", e, msg);
    CHECK_EQ(d.job, job);
    int32_t err = d.err;
    if (out)
        snprintf(out, cap, "%s", d.message);
    if (restarts)
        *restarts = d.restarts;
    weir__client_completed_free(&d);
    return err;
}

static weir__client_submit_opts count_job(uint32_t par, char **argv, int argc)
{
    return (weir__client_submit_opts){.plugin = PLUGIN("job_count"),
                                      .parallelism = par,
                                      .argc = argc,
                                      .argv = argv,
                                      .max_restarts = -1};
}

/* ---- 1. first frames ------------------------------------------------------------------------ */

typedef struct drip {
    const cnode *c;
    int64_t t0, dropped_at; /* ns */
} drip;

/* A HelloClient sent a byte per 100 ms, until the coordinator drops it
 * (a send fails) or 30 s pass. */
static intptr_t drip_main(void *arg)
{
    drip *d = arg;
    char name[WEIR_CLUSTER_NAME_MAX + 1];
    memset(name, 'd', WEIR_CLUSTER_NAME_MAX);
    name[WEIR_CLUSTER_NAME_MAX] = 0;
    weir__cl_msg m = {.kind = WEIR_CLUSTER_HELLO_CLIENT};
    m.u.hello =
        (weir__cl_hello_client){WEIR_CLUSTER_PROTO_VERSION, WEIR_CLUSTER_PROTO_MIN_COMPAT, name};
    size_t len;
    uint8_t *p = encode(&m, &len); /* 270 bytes: 27 s of dripping */
    int fd = raw_connect(d->c, 0);
    d->t0 = weir_time_now();
    for (size_t i = 0; i < len; i++) {
        ssize_t n = weir_io_send(fd, p + i, 1, MSG_NOSIGNAL, DEADLINE());
        if (n != 1) {
            d->dropped_at = weir_time_now();
            break;
        }
        weir_time_sleep(100 * WEIR_MSEC);
    }
    free(p);
    weir_io_close(fd);
    return 0;
}

static intptr_t first_frames_main(void *arg)
{
    (void)arg;
    cnode c = {.o = {.heartbeat_timeout_ms = 500, .max_restarts = -1}};
    coord_start(&c);
    weir__client *before = client_open(&c); /* a client connected all along */
    CHECK_EQ(client_njobs(before), 0);

    drip d = {.c = &c};
    weir_task *dt = test_spawn(drip_main, &d);

    /* A kind that is neither Register nor HelloClient (nor anything). */
    {
        int fd = raw_connect(&c, 0);
        uint8_t f[] = {0, 0, 0, 9, 0xEE, 0, 0, 0, 1, 0, 0, 0, 1};
        raw_send(fd, f, sizeof(f));
        raw_expect_closed(fd);
        weir_io_close(fd);
        wait_log("its first frame is neither a Register nor a HelloClient", 1);
    }
    /* A known kind of another direction (a client's ListJobs). */
    {
        int fd = raw_connect(&c, 0);
        uint8_t f[] = {0, 0, 0, 1, WEIR_CLUSTER_LIST_JOBS};
        raw_send(fd, f, sizeof(f));
        raw_expect_closed(fd);
        weir_io_close(fd);
        wait_log("its first frame is", 2);
    }
    /* A Register whose versions are fine and whose body is not: the
     * worker id's length runs past the frame. */
    {
        int fd = raw_connect(&c, 0);
        uint8_t f[4 + 1 + 4 + 4 + 4 + 3];
        weir__put_be32(f, sizeof(f) - 4);
        f[4] = WEIR_CLUSTER_REGISTER;
        weir__put_be32(f + 5, WEIR_CLUSTER_PROTO_VERSION);
        weir__put_be32(f + 9, WEIR_CLUSTER_PROTO_MIN_COMPAT);
        weir__put_be32(f + 13, 200); /* 200 bytes of id, 3 there */
        memcpy(f + 17, "abc", 3);
        raw_send(fd, f, sizeof(f));
        raw_expect_closed(fd);
        weir_io_close(fd);
        wait_log("malformed first frame", 1);
    }
    /* A handshake cut short before its versions. */
    {
        int fd = raw_connect(&c, 0);
        uint8_t f[] = {0, 0, 0, 3, WEIR_CLUSTER_HELLO_CLIENT, 0, 0};
        raw_send(fd, f, sizeof(f));
        raw_expect_closed(fd);
        weir_io_close(fd);
        wait_log("its first frame is cut short", 1);
    }
    /* A header declaring more than the first-frame cap. */
    {
        int fd = raw_connect(&c, 0);
        uint8_t f[4 + 16] = {0};
        weir__put_be32(f, WEIR_CLUSTER_FIRST_FRAME_MAX + 1);
        f[4] = WEIR_CLUSTER_REGISTER;
        raw_send(fd, f, sizeof(f));
        raw_expect_closed(fd);
        weir_io_close(fd);
        wait_log("over the 64 KiB first-frame cap", 1);
    }
    /* A zero-length frame. */
    int dropped = log_count("connection dropped before its first frame");
    {
        int fd = raw_connect(&c, 0);
        uint8_t f[] = {0, 0, 0, 0};
        raw_send(fd, f, sizeof(f));
        raw_expect_closed(fd);
        weir_io_close(fd);
        wait_log("connection dropped before its first frame", ++dropped);
    }
    /* A frame cut short, then the connection closed. */
    {
        int fd = raw_connect(&c, 0);
        uint8_t f[] = {0, 0, 0, 100, WEIR_CLUSTER_HELLO_CLIENT, 0, 0, 0, 1};
        raw_send(fd, f, sizeof(f));
        weir_io_close(fd);
        wait_log("connection dropped before its first frame", ++dropped);
    }
    /* A connection that sends nothing and closes. */
    {
        int fd = raw_connect(&c, 0);
        weir_io_close(fd);
    }

    /* The drip: dropped within heartbeat_timeout_ms + 5 s of connecting
     * (a second of slack for the send that notices). */
    CHECK_EQ(weir_task_join(dt, NULL, weir_time_after_ms(30000)), 0);
    CHECK_NE(d.dropped_at, 0);
    int64_t ms = (d.dropped_at - d.t0) / WEIR_MSEC;
    printf("drip dropped after %lld ms\n", (long long)ms);
    CHECK_LE(ms, 500 + 5000 + 1000);
    CHECK_GE(ms, 500 + 5000 - 1000); /* by the deadline, not by something else */
    wait_log("connection dropped before its first frame", dropped + 1);

    /* Only those connections paid: the old client still lists, a new one
     * connects and lists. */
    CHECK_EQ(client_njobs(before), 0);
    weir__client *after = client_open(&c);
    CHECK_EQ(client_njobs(after), 0);
    weir__client_close(after);
    weir__client_close(before);
    coord_stop(&c);
    return 0;
}

TEST(first_frames_cost_only_their_connection)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, first_frames_main, NULL), 0);
    tee_end();
}

/* ---- 2. version refusals -------------------------------------------------------------------- */

static intptr_t versions_main(void *arg)
{
    (void)arg;
    cnode c = {.o = {.max_restarts = -1}};
    coord_start(&c);
    weir_frame_parser fp;
    /* A worker of version 1, from before the final checkpoint: it would
     * ignore FinalCheckpointAssigned and leave a bounded job waiting. */
    {
        int fd = raw_connect(&c, 0);
        weir__cl_msg m = register_msg("old", 1, 1, 4);
        raw_send_msg(fd, &m);
        CHECK_EQ(weir_frame_parser_init(&fp, NULL), 0);
        weir__cl_msg a;
        raw_recv_msg(fd, &fp, WEIR_CLUSTER_REGISTER_ACK, &a);
        CHECK_EQ(a.u.reg_ack.status, WEIR__CL_REFUSED);
        CHECK_HAS(a.u.reg_ack.message, "the worker speaks version 1, this coordinator speaks 3 "
                                       "and talks to 2 at the oldest: upgrade the worker");
        weir__cl_msg_free(&a);
        raw_expect_closed(fd);
        weir_frame_parser_close(&fp);
        weir_io_close(fd);
    }
    /* A worker that talks to version 4 at the oldest. */
    {
        int fd = raw_connect(&c, 0);
        weir__cl_msg m = register_msg("future", 5, 4, 4);
        raw_send_msg(fd, &m);
        CHECK_EQ(weir_frame_parser_init(&fp, NULL), 0);
        weir__cl_msg a;
        raw_recv_msg(fd, &fp, WEIR_CLUSTER_REGISTER_ACK, &a);
        CHECK_EQ(a.u.reg_ack.status, WEIR__CL_REFUSED);
        CHECK_EQ(a.u.reg_ack.version, WEIR_CLUSTER_PROTO_VERSION);
        CHECK_EQ(a.u.reg_ack.min_compat, WEIR_CLUSTER_PROTO_MIN_COMPAT);
        CHECK_HAS(a.u.reg_ack.message, "protocol mismatch");
        CHECK_HAS(a.u.reg_ack.message, "this coordinator speaks version 3");
        CHECK_HAS(a.u.reg_ack.message, "the worker speaks 5 and talks to 4 at the oldest");
        CHECK_HAS(a.u.reg_ack.message, "upgrade this coordinator");
        weir__cl_msg_free(&a);
        raw_expect_closed(fd);
        weir_frame_parser_close(&fp);
        weir_io_close(fd);
    }
    /* A client the same. */
    {
        int fd = raw_connect(&c, 0);
        weir__cl_msg m = {.kind = WEIR_CLUSTER_HELLO_CLIENT};
        m.u.hello = (weir__cl_hello_client){4, 4, "future client"};
        raw_send_msg(fd, &m);
        CHECK_EQ(weir_frame_parser_init(&fp, NULL), 0);
        weir__cl_msg a;
        raw_recv_msg(fd, &fp, WEIR_CLUSTER_HELLO_CLIENT_ACK, &a);
        CHECK_EQ(a.u.hello_ack.status, WEIR__CL_REFUSED);
        CHECK_HAS(a.u.hello_ack.message, "this coordinator speaks version 3");
        CHECK_HAS(a.u.hello_ack.message, "the client speaks 4 and talks to 4 at the oldest");
        CHECK_HAS(a.u.hello_ack.message, "upgrade this coordinator");
        weir__cl_msg_free(&a);
        raw_expect_closed(fd);
        weir_frame_parser_close(&fp);
        weir_io_close(fd);
    }
    /* A malformed range (version 0) is refused too, and says so. */
    {
        int fd = raw_connect(&c, 0);
        uint8_t f[4 + 1 + 4 + 4 + 4];
        weir__put_be32(f, sizeof(f) - 4);
        f[4] = WEIR_CLUSTER_HELLO_CLIENT;
        weir__put_be32(f + 5, 0);
        weir__put_be32(f + 9, 0);
        weir__put_be32(f + 13, 0);
        raw_send(fd, f, sizeof(f));
        CHECK_EQ(weir_frame_parser_init(&fp, NULL), 0);
        weir__cl_msg a;
        raw_recv_msg(fd, &fp, WEIR_CLUSTER_HELLO_CLIENT_ACK, &a);
        CHECK_EQ(a.u.hello_ack.status, WEIR__CL_REFUSED);
        CHECK_HAS(a.u.hello_ack.message, "the client declares protocol version 0");
        weir__cl_msg_free(&a);
        raw_expect_closed(fd);
        weir_frame_parser_close(&fp);
        weir_io_close(fd);
    }
    /* A newer client whose range includes ours is accepted. */
    {
        int fd = raw_connect(&c, 0);
        weir__cl_msg m = {.kind = WEIR_CLUSTER_HELLO_CLIENT};
        m.u.hello = (weir__cl_hello_client){7, 1, "newer client"};
        raw_send_msg(fd, &m);
        CHECK_EQ(weir_frame_parser_init(&fp, NULL), 0);
        weir__cl_msg a;
        raw_recv_msg(fd, &fp, WEIR_CLUSTER_HELLO_CLIENT_ACK, &a);
        CHECK_EQ(a.u.hello_ack.status, WEIR__CL_ACCEPTED);
        weir__cl_msg_free(&a);
        weir__cl_msg l = {.kind = WEIR_CLUSTER_LIST_JOBS};
        raw_send_msg(fd, &l);
        raw_recv_msg(fd, &fp, WEIR_CLUSTER_JOB_LIST, &a);
        CHECK_EQ(a.u.job_list.jobs.n, 0);
        weir__cl_msg_free(&a);
        weir_frame_parser_close(&fp);
        weir_io_close(fd);
    }
    /* The client API reports the refusal the same way. */
    {
        weir__client *cl = client_open(&c);
        weir__client_close(cl);
    }
    coord_stop(&c);
    return 0;
}

TEST(version_refusals_name_both_versions_and_the_side_to_upgrade)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, versions_main, NULL), 0);
    tee_end();
}

/* ---- 3. the outbox's verdicts ------------------------------------------------------------ */

/* job_count.so with `mb` MiB of zeros after its last byte: still the
 * same loadable job, a plugin too large for any socket's buffers. */
static void big_plugin(char *path, size_t cap, int mb)
{
    snprintf(path, cap, "/tmp/weir-test-big-XXXXXX.so");
    int out = mkstemps(path, 3);
    CHECK_GE(out, 0);
    FILE *in = fopen(PLUGIN("job_count"), "rb");
    CHECK(in != NULL);
    char b[65536];
    size_t n;
    while ((n = fread(b, 1, sizeof(b), in)) > 0)
        CHECK_EQ(write(out, b, n), (ssize_t)n);
    fclose(in);
    memset(b, 0, sizeof(b));
    for (int i = 0; i < mb * 16; i++)
        CHECK_EQ(write(out, b, sizeof(b)), (ssize_t)sizeof(b));
    close(out);
}

typedef struct beat {
    int fd;
    _Atomic int stop;
    uint64_t sent;
} beat;

/* A Heartbeat every 100 ms until told or the connection breaks. */
static intptr_t beat_main(void *arg)
{
    beat *b = arg;
    while (!atomic_load(&b->stop)) {
        weir__cl_msg hb = {.kind = WEIR_CLUSTER_HEARTBEAT, .u.heartbeat = {b->sent + 1}};
        size_t len;
        uint8_t *f = encode(&hb, &len);
        ssize_t e = send_all(b->fd, f, len, DEADLINE());
        free(f);
        if (e < 0)
            break;
        b->sent++;
        weir_time_sleep(100 * WEIR_MSEC);
    }
    return 0;
}

/* The coordinator deploys a job to a worker that heartbeats but never
 * reads: its Deploy (16 MiB of plugin) cannot be written, and after
 * stall_ms without progress the worker is lost, on that verdict. */
static intptr_t stall_main(void *arg)
{
    (void)arg;
    /* The heartbeat timeout far away: only the outbox can condemn it. */
    cnode c = {.o = {.heartbeat_timeout_ms = 60000, .stall_ms = 300, .max_restarts = -1}};
    coord_start(&c);
    weir_frame_parser fp;
    int fd = fake_worker(&c, "stuck", 1, &fp); /* the smallest receive buffer */
    wait_log("worker stuck registered", 1);
    beat b = {.fd = fd};
    weir_task *bt = test_spawn(beat_main, &b);
    char path[64];
    big_plugin(path, sizeof(path), 16);
    weir__client *cl = client_open(&c);
    weir__client_submit_opts o = count_job(1, NULL, 0);
    o.plugin = path;
    uint64_t job = submit_ok(cl, &o);
    int64_t t0 = weir_time_now();
    wait_log("worker lost: stuck", 1);
    printf("stuck lost %lld ms after the submit, %llu heartbeats sent\n",
           (long long)((weir_time_now() - t0) / WEIR_MSEC), (unsigned long long)b.sent);
    wait_log("worker lost: stuck (no outbound progress for", 1); /* the cause: the stall */
    char msg[WEIR_CLUSTER_MESSAGE_MAX];
    int32_t err = wait_job(cl, job, DEADLINE(), msg, sizeof(msg), NULL);
    printf("job ended: %d %s\n", err, msg);
    CHECK_NE(err, 0);
    CHECK_HAS(msg, "worker stuck lost (no outbound progress for");
    CHECK_HAS(msg, "the job takes no checkpoints");
    CHECK_GE(b.sent, 1); /* it did heartbeat meanwhile */
    /* Not drained to its end: the coordinator's send buffer (MiBs of the
     * Deploy) trickles through the tiny window at the persist timer's
     * pace. The loss shows in the log, the job and the refusal below. */
    atomic_store(&b.stop, 1);
    CHECK_EQ(weir_task_join(bt, NULL, DEADLINE()), 0);
    weir_frame_parser_close(&fp);
    weir_io_close(fd);
    /* The coordinator holds it lost: a job has nowhere to go. */
    CHECK_EQ(weir__client_submit(cl, &o, DEADLINE(), &job, msg, sizeof(msg)), -EACCES);
    CHECK_HAS(msg, "no worker is registered");
    weir__client_close(cl);
    unlink(path);
    coord_stop(&c);
    return 0;
}

TEST(a_worker_that_never_reads_its_deploy_is_lost_on_the_stall_verdict)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, stall_main, NULL), 0);
    tee_end();
}

/* The outbound bounds are the coordinator's to set (weir node
 * --max-outbound-bulk-bytes): a deploy bound below the job's plugin costs
 * the worker its session on the overflow verdict, the bound named. */
static intptr_t bulk_bound_main(void *arg)
{
    (void)arg;
    cnode c = {.o = {.max_restarts = -1, .max_outbound_bulk_bytes = 4096}};
    coord_start(&c);
    wnode a;
    worker_start(&a, "a", &c, 4);
    weir__client *cl = client_open(&c);
    char *args[] = {"1000"};
    weir__client_submit_opts o = count_job(1, args, 1);
    uint64_t job = submit_ok(cl, &o);
    char msg[WEIR_CLUSTER_MESSAGE_MAX];
    int32_t err = wait_job(cl, job, DEADLINE(), msg, sizeof(msg), NULL);
    printf("job ended: %d %s\n", err, msg);
    CHECK_NE(err, 0);
    CHECK_HAS(msg, "worker a lost (overflow: a ");
    CHECK_HAS(msg, "deploy frame past the bound of 4096 deploy bytes");
    wait_log("worker lost: a (overflow: a ", 1);
    weir__client_close(cl);
    worker_stop(&a);
    coord_stop(&c);
    return 0;
}

TEST(a_deploy_past_the_configured_bulk_bound_costs_the_worker_its_session)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, bulk_bound_main, NULL), 0);
    tee_end();
}

/* ---- 4. a plugin ships once ------------------------------------------------------------- */

static intptr_t ships_once_main(void *arg)
{
    (void)arg;
    cnode c = {.o = {.max_restarts = -1}};
    coord_start(&c);
    wnode a, b;
    worker_start(&a, "a", &c, 1); /* one slot each: a job of 2 subtasks */
    worker_start(&b, "b", &c, 1); /* lands on both */
    weir__client *cl = client_open(&c);
    weir__plugin_stats s0, s1, s2;
    weir__plugin_stats_read(&s0);
    char *args[] = {"1000"};
    weir__client_submit_opts o = count_job(1, args, 1);
    uint64_t j1 = submit_ok(cl, &o);
    char msg[2048];
    int32_t err = wait_job(cl, j1, DEADLINE(), msg, sizeof(msg), NULL);
    if (err)
        TEST__FAIL("job 1 failed: %d %s", err, msg);
    weir__plugin_stats_read(&s1);
    CHECK_EQ(s1.cache_hits, s0.cache_hits);       /* uploaded, not found */
    CHECK_GT(s1.bytes_shipped, s0.bytes_shipped); /* shipped to a and b */
    uint64_t shipped = s1.bytes_shipped - s0.bytes_shipped;
    uint64_t job2 = submit_ok(cl, &o);
    err = wait_job(cl, job2, DEADLINE(), msg, sizeof(msg), NULL);
    if (err)
        TEST__FAIL("job 2 failed: %d %s", err, msg);
    weir__plugin_stats_read(&s2);
    CHECK_EQ(s2.cache_hits, s1.cache_hits + 1);       /* no upload asked */
    CHECK_EQ(s2.bytes_shipped, s1.bytes_shipped);     /* nothing shipped again */
    CHECK_GE(s2.ships_deduped, s1.ships_deduped + 2); /* a reference to each worker */
    printf("shipped %llu bytes, then %llu references\n", (unsigned long long)shipped,
           (unsigned long long)(s2.ships_deduped - s1.ships_deduped));
    /* The first job took both workers. */
    wait_log("subtasks on 2 workers", 2);
    CHECK_EQ(log_count("subtasks on 2 workers"), 2);
    weir__client_close(cl);
    worker_stop(&a);
    worker_stop(&b);
    coord_stop(&c);
    return 0;
}

TEST(a_plugin_is_uploaded_once_and_shipped_once_per_worker)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, ships_once_main, NULL), 0);
    tee_end();
}

/* A job that fails at once - its checkpoint directory is held by another
 * run - still has its SubmitJobAck read before its JobCompleted (the
 * coordinator writes both under the client's write lock), and the
 * failure says -EBUSY with the holder. Several times: the job's fiber
 * and the ack race without that lock. */
static intptr_t held_dir_main(void *arg)
{
    (void)arg;
    cnode c = {.o = {.max_restarts = -1}};
    coord_start(&c);
    wnode a;
    worker_start(&a, "a", &c, 4);
    char dir[] = "/tmp/weir-held-XXXXXX", lock[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(lock, sizeof(lock), "%s/.lock", dir);
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    CHECK_GE(lfd, 0);
    CHECK_EQ(flock(lfd, LOCK_EX | LOCK_NB), 0); /* another run's, as far as weir can tell */
    weir__client *cl = client_open(&c);
    char *args[] = {"1000"};
    weir__client_submit_opts o = count_job(1, args, 1);
    o.checkpoint_dir = dir;
    o.checkpoint_interval_ms = 100;
    for (int i = 0; i < 5; i++) {
        uint64_t job = submit_ok(cl, &o);
        char msg[2048];
        CHECK_EQ(wait_job(cl, job, DEADLINE(), msg, sizeof(msg), NULL), -EBUSY);
        CHECK_HAS(msg, "is in use by");
    }
    weir__client_close(cl);
    close(lfd);
    unlink(lock);
    rmdir(dir);
    worker_stop(&a);
    coord_stop(&c);
    return 0;
}

TEST(a_job_failing_at_once_is_acknowledged_before_it_is_reported_ended)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, held_dir_main, NULL), 0);
    tee_end();
}

/* ---- private plugin caches ------------------------------------------------------------- */

/* DIR/name made, holding .lock (when lock) and a file; the lock's fd. */
static int cache_like(const char *dir, int lock, int hold)
{
    CHECK_EQ(mkdir(dir, 0700), 0);
    char p[256];
    snprintf(p, sizeof(p), "%s/some.so", dir);
    int f = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    CHECK_GE(f, 0);
    close(f);
    if (!lock)
        return -1;
    snprintf(p, sizeof(p), "%s/.lock", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    CHECK_GE(fd, 0);
    if (hold)
        CHECK_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
    return fd;
}

static void rm_rf(const char *dir)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
}

/* A node's private cache is locked while it runs and removed at its end; a
 * starting node removes the caches of its role nobody holds (a node that
 * died by SIGKILL left them) and leaves held ones and unlocked ones alone. */
static intptr_t sweep_main(void *arg)
{
    (void)arg;
    char dead[64], held[64], bare[64];
    snprintf(dead, sizeof(dead), "/tmp/weir-coordinator-dead%d", (int)getpid());
    snprintf(held, sizeof(held), "/tmp/weir-coordinator-held%d", (int)getpid());
    snprintf(bare, sizeof(bare), "/tmp/weir-coordinator-bare%d", (int)getpid());
    int dfd = cache_like(dead, 1, 0);
    close(dfd); /* its node is gone */
    int hfd = cache_like(held, 1, 1);
    cache_like(bare, 0, 0);
    cnode c = {.o = {.max_restarts = -1}};
    coord_start(&c);
    struct stat st;
    CHECK_EQ(stat(dead, &st), -1);
    CHECK_EQ(stat(held, &st), 0);
    CHECK_EQ(stat(bare, &st), 0);
    /* Its own cache, locked: a second node's sweep leaves it. */
    cnode c2 = {.o = {.max_restarts = -1}};
    coord_start(&c2);
    /* Caches whose lock is held now: at least the two nodes' own. */
    DIR *d = opendir("/tmp");
    CHECK(d != NULL);
    int live = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char p[300];
        if (strncmp(de->d_name, "weir-coordinator-", 17) != 0 || strstr(de->d_name, "held"))
            continue;
        snprintf(p, sizeof(p), "/tmp/%s/.lock", de->d_name);
        int fd = open(p, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            continue;
        live += flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
        close(fd);
    }
    closedir(d);
    CHECK_GE(live, 2); /* (other tests' live nodes may add to it) */
    coord_stop(&c2);
    coord_stop(&c);
    close(hfd);
    rm_rf(held);
    rm_rf(bare);
    return 0;
}

TEST(a_starting_node_removes_the_plugin_caches_of_dead_nodes_only)
{
    CHECK_EQ(test_run_on_rt(2, sweep_main, NULL), 0);
}

/* ---- 6. no capacity --------------------------------------------------------------------- */

static intptr_t capacity_main(void *arg)
{
    (void)arg;
    cnode c = {.o = {.max_restarts = -1}};
    coord_start(&c);
    wnode a;
    worker_start(&a, "a", &c, 2);
    weir__client *cl = client_open(&c);
    weir__plugin_stats s0, s1;
    weir__plugin_stats_read(&s0);
    int deploying = log_count("deploying");
    weir__client_submit_opts o = count_job(8, NULL, 0);
    uint64_t job = 0;
    char msg[2048];
    CHECK_EQ(weir__client_submit(cl, &o, DEADLINE(), &job, msg, sizeof(msg)), -EACCES);
    printf("refused: %s\n", msg);
    CHECK_HAS(msg, "the job needs 16 slots, the cluster has 2 free");
    CHECK_HAS(msg, "worker a: 2");
    CHECK_EQ(job, 0);
    /* Nothing deployed, nothing published; the worker still takes a job
     * that fits. */
    weir__plugin_stats_read(&s1);
    CHECK_EQ(s1.bytes_shipped, s0.bytes_shipped);
    CHECK_EQ(s1.ships_deduped, s0.ships_deduped);
    CHECK_EQ(log_count("deploying"), deploying);
    CHECK_EQ(client_njobs(cl), 0);
    o.parallelism = 1;
    job = submit_ok(cl, &o);
    int32_t err = wait_job(cl, job, DEADLINE(), msg, sizeof(msg), NULL);
    if (err)
        TEST__FAIL("the job that fits failed: %d %s", err, msg);
    weir__client_close(cl);
    worker_stop(&a);
    coord_stop(&c);
    return 0;
}

TEST(a_job_needing_more_slots_than_free_is_refused_naming_both)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, capacity_main, NULL), 0);
    tee_end();
}

/* ---- 7. a registered worker's frame that does not decode ------------------------------------ */

static intptr_t bad_frame_main(void *arg)
{
    (void)arg;
    cnode c = {.o = {.max_restarts = -1}};
    coord_start(&c);
    wnode good;
    worker_start(&good, "good", &c, 4);
    weir_frame_parser fp;
    int fd = fake_worker(&c, "bad", 0, &fp);
    wait_log("worker bad registered", 1);
    /* A Heartbeat first: the session works. */
    weir__cl_msg hb = {.kind = WEIR_CLUSTER_HEARTBEAT, .u.heartbeat = {7}};
    raw_send_msg(fd, &hb);
    weir__cl_msg a;
    raw_recv_msg(fd, &fp, WEIR_CLUSTER_HEARTBEAT_ACK, &a);
    CHECK_EQ(a.u.heartbeat_ack.seq, 7);
    weir__cl_msg_free(&a);
    /* Then a frame of an unknown kind. */
    uint8_t f[] = {0, 0, 0, 5, 0xEE, 1, 2, 3, 4};
    raw_send(fd, f, sizeof(f));
    raw_expect_closed(fd);
    wait_log("worker lost: bad (malformed frame", 1);
    weir_frame_parser_close(&fp);
    weir_io_close(fd);
    /* A second one, whose Heartbeat is cut short. */
    fd = fake_worker(&c, "bad2", 0, &fp);
    uint8_t g[] = {0, 0, 0, 3, WEIR_CLUSTER_HEARTBEAT, 0, 0};
    raw_send(fd, g, sizeof(g));
    raw_expect_closed(fd);
    wait_log("worker lost: bad2 (malformed frame", 1);
    weir_frame_parser_close(&fp);
    weir_io_close(fd);
    /* Nothing else paid: good is still registered and runs a job. */
    weir__client *cl = client_open(&c);
    char *args[] = {"1000"};
    weir__client_submit_opts o = count_job(2, args, 1);
    uint64_t job = submit_ok(cl, &o);
    char msg[2048];
    int32_t err = wait_job(cl, job, DEADLINE(), msg, sizeof(msg), NULL);
    if (err)
        TEST__FAIL("the job failed: %d %s", err, msg);
    CHECK_EQ(log_count("worker lost: good"), 0);
    wait_log("subtasks on 1 workers", 1);
    weir__client_close(cl);
    worker_stop(&good);
    coord_stop(&c);
    return 0;
}

TEST(a_registered_workers_undecodable_frame_costs_its_session_only)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, bad_frame_main, NULL), 0);
    tee_end();
}

/* ---- 8. a worker's RegisterAck comes with its session published ------------------------ */

static void on_coord_ready(void *arg, weir__coord *co)
{
    (void)arg;
    atomic_store(&ready_coord, co);
}

/* The moment a worker reads its RegisterAck, the coordinator counts it
 * (and places on it): a client submitting then finds it. Many workers in
 * turn, so that a RegisterAck written ahead of the session's publication
 * is caught. The RegisterAck is also the first frame each reads. */
static intptr_t ack_published_main(void *arg)
{
    (void)arg;
    enum { ROUNDS = 30, N = 100 }; /* N at a time: within any descriptor limit */
    cnode c = {.o = {.max_restarts = -1, .on_ready = on_coord_ready}};
    atomic_store(&ready_coord, NULL);
    coord_start(&c);
    weir__coord *co;
    while (!(co = atomic_load(&ready_coord)))
        weir_time_sleep(WEIR_MSEC);
    static int fds[N];
    static weir_frame_parser fps[N];
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < N; i++) {
            char id[32];
            snprintf(id, sizeof(id), "acked%d.%d", r, i);
            fds[i] = fake_worker(&c, id, 0, &fps[i]);
            CHECK_EQ(weir__coord_workers(co), i + 1);
        }
        for (int i = 0; i < N; i++) {
            weir_frame_parser_close(&fps[i]);
            weir_io_close(fds[i]);
        }
        int64_t deadline = DEADLINE();
        while (weir__coord_workers(co) > 0) {
            CHECK_LT(weir_time_now(), deadline);
            weir_time_sleep(WEIR_MSEC);
        }
    }
    coord_stop(&c);
    atomic_store(&ready_coord, NULL);
    return 0;
}

TEST(a_worker_is_placed_on_from_the_moment_it_reads_its_register_ack)
{
    CHECK_EQ(test_run_on_rt(2, ack_published_main, NULL), 0);
}

/* ---- 9. a worker owns the fd it is given ------------------------------------------------ */

/* One run of a worker on sv[0] of a socketpair whose other end has shut
 * its writing side (the worker's registration finds the connection
 * closed): whatever the run returns, sv[0] is closed when it does - the
 * other end reads EOF at once. fail >= 0: the fail-th allocation of the
 * run and all after fail. The allocations attempted while counting. */
static long given_fd_run(const char *id, long fail, int *rc)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    CHECK_EQ(shutdown(sv[1], SHUT_WR), 0);
    weir__worker_opts o = {
        .id = id, .coordinator = "test", .fd_given = 1, .fd = sv[0], .stop_fd = -1};
    char msg[512];
    weir__alloc_fail_after(fail);
    *rc = weir__worker_run(&o, msg, sizeof(msg));
    long n = weir__alloc_fail_after(-1);
    char b[4096];
    ssize_t got;
    while ((got = weir_io_recv(sv[1], b, sizeof(b), 0, weir_time_after_ms(5000))) > 0)
        ; /* its Register, when it got that far */
    if (got != 0)
        TEST__FAIL("worker %s (allocation %ld failing, rc %d: %s) kept its fd: %zd", id, fail, *rc,
                   msg, got);
    close(sv[1]);
    return n;
}

static intptr_t given_fd_main(void *arg)
{
    (void)arg;
    int rc;
    given_fd_run("", -1, &rc); /* refused before anything */
    CHECK_EQ(rc, -EINVAL);
    given_fd_run("w", 0, &rc); /* its first allocation fails */
    CHECK_EQ(rc, -ENOMEM);
    /* Every allocation up to its session, failing in turn. */
    long n = 0;
    for (long i = 0; i <= n + 1; i++) {
        long tried = given_fd_run("w", i, &rc);
        CHECK_NE(rc, 0); /* the session ended at once */
        if (tried <= i)  /* the countdown never fired: done */
            break;
        n = i + 1;
    }
    printf("a given fd closed through %ld allocation failures\n", n);
    CHECK_GT(n, 1);
    return 0;
}

TEST(a_worker_given_an_fd_closes_it_on_every_failure)
{
    CHECK_EQ(test_run_on_rt(1, given_fd_main, NULL), 0);
}

/* A worker flooding RequestFinalCheckpoint for a subtask of its share:
 * those frames go to the job's checkpoint queue (which nobody reads before
 * the subtasks listened), and must count against the job's backlog like
 * SubtaskCheckpointed, so the flood costs the worker its session instead
 * of growing the queue without bound. */
static intptr_t final_flood_main(void *arg)
{
    (void)arg;
    cnode c = {.o = {.heartbeat_timeout_ms = 60000, .stall_ms = 60000, .max_restarts = -1}};
    coord_start(&c);
    weir_frame_parser fp;
    int fd = fake_worker(&c, "finflood", 0, &fp);
    wait_log("worker finflood registered", 1);
    weir__client *cl = client_open(&c);
    weir__client_submit_opts o = count_job(1, NULL, 0);
    uint64_t job = submit_ok(cl, &o);
    weir__cl_msg d;
    weir_frame fr;
    char why[256];
    int r = weir__cl_recv(WEIR__CL_FD(fd), &fp, &d, &fr, DEADLINE(), why, sizeof(why));
    if (r != 1)
        TEST__FAIL("recv: %d %s", r, why);
    CHECK_EQ(d.kind, WEIR_CLUSTER_DEPLOY);
    CHECK_EQ(d.u.deploy.job, job);
    CHECK_GE(d.u.deploy.subtasks.n, 1u);
    weir__cl_msg m = {.kind = WEIR_CLUSTER_REQUEST_FINAL_CHECKPOINT};
    m.u.request_final =
        (weir__cl_request_final){job, d.u.deploy.subtasks.v[0].chain, d.u.deploy.subtasks.v[0].sub};
    weir__cl_msg_free(&d);
    weir_frame_free(&fr);
    size_t one;
    uint8_t *f = encode(&m, &one);
    enum { BATCH = 1000 };
    uint8_t *batch = malloc(one * BATCH);
    CHECK(batch != NULL);
    for (int i = 0; i < BATCH; i++)
        memcpy(batch + (size_t)i * one, f, one);
    free(f);
    /* Three times the backlog, then the verdict within the deadline. */
    int gone = 0;
    for (uint32_t sent = 0; !gone && sent < 3 * WEIR_CLUSTER_BACKLOG_FRAMES; sent += BATCH)
        gone = send_all(fd, batch, one * BATCH, DEADLINE()) < 0;
    free(batch);
    int64_t deadline = DEADLINE();
    while (log_count("worker lost: finflood (its frames for job") == 0 &&
           weir_time_now() < deadline)
        weir_time_sleep(10 * WEIR_MSEC);
    CHECK_EQ(log_count("worker lost: finflood (its frames for job"), 1);
    CHECK_GE(log_count("fill the job's backlog of"), 1);
    char msg[WEIR_CLUSTER_MESSAGE_MAX];
    CHECK_NE(wait_job(cl, job, DEADLINE(), msg, sizeof(msg), NULL), 0);
    weir_frame_parser_close(&fp);
    weir_io_close(fd);
    weir__client_close(cl);
    coord_stop(&c);
    return 0;
}

TEST(a_worker_flooding_final_checkpoint_requests_is_lost_on_the_backlog)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, final_flood_main, NULL), 0);
    tee_end();
}

/* ---- the slow ones, last ---------------------------------------------------------------- */

/* A worker that floods Heartbeats and never reads: the HeartbeatAcks fill
 * its outbox past the control bound. It must be lost on the overflow
 * verdict, and the cause must say so (not a closed connection). */
static intptr_t overflow_main(void *arg)
{
    (void)arg;
    cnode c = {.o = {.heartbeat_timeout_ms = 60000, .stall_ms = 60000, .max_restarts = -1}};
    coord_start(&c);
    weir_frame_parser fp;
    /* The receive buffer is left to the kernel's autotuning. A fixed one
     * (SO_RCVBUF, which turns autotuning off) wedged the connection now and
     * then: the coordinator's acks arrive as tiny segments, each costing far
     * more buffer than its 21 bytes, and once this end's buffer is over its
     * fixed size the kernel drops the coordinator's segments whole, their
     * ACKs included. This end then never learns that its heartbeats
     * arrived, backs off to retransmits tens of seconds apart (ss showed
     * cwnd 1, backoff 7, the coordinator's Recv-Q empty), and the worker
     * was lost on its heartbeat timeout, not on the overflow. Autotuned,
     * the kernel grows the buffer to fit what is queued instead (up to
     * tcp_rmem's maximum), while the window it advertises stays small: the
     * coordinator's writes still block after a few MiB. */
    int fd = fake_worker(&c, "flood", 0, &fp);
    wait_log("worker flood registered", 1);
    enum { BATCH = 512 };
    size_t one;
    weir__cl_msg hb = {.kind = WEIR_CLUSTER_HEARTBEAT};
    uint8_t *f = encode(&hb, &one);
    uint8_t *batch = malloc(one * BATCH);
    CHECK(batch != NULL);
    uint64_t seq = 1;
    /* The coordinator's socket buffer takes a few MiB of acks (200k and
     * more) before its outbox queues any: a sanitizer build needs long to
     * read that many, so this flood gets 90 s (it ends at the loss). */
    int64_t t0 = weir_time_now(), deadline = weir_time_after_ms(90000);
    int gone = 0;
    while (!gone && weir_time_now() < deadline) {
        for (int i = 0; i < BATCH; i++) {
            hb.u.heartbeat.seq = seq++;
            free(f);
            f = encode(&hb, &one);
            memcpy(batch + (size_t)i * one, f, one);
        }
        /* Whole batches (frames must not be cut) until the session ends. */
        size_t at = 0;
        while (!gone && at < one * BATCH && weir_time_now() < deadline) {
            ssize_t n = weir_io_send(fd, batch + at, one * BATCH - at, MSG_NOSIGNAL,
                                     weir_time_after_ms(200));
            if (n >= 0)
                at += (size_t)n;
            else if (n != -ETIMEDOUT)
                gone = 1; /* the coordinator shut the session down */
            if (log_count("worker lost: flood") > 0)
                gone = 1;
        }
    }
    free(f);
    free(batch);
    printf("flood: %llu heartbeats in %lld ms\n", (unsigned long long)seq - 1,
           (long long)((weir_time_now() - t0) / WEIR_MSEC));
    CHECK(gone);
    wait_log("worker lost: flood", 1);
    weir_frame_parser_close(&fp);
    weir_io_close(fd);
    /* Lines reach the tee a moment after they are written. */
    int64_t until = weir_time_after_ms(500);
    while (log_count("worker lost: flood (overflow: ") == 0 && weir_time_now() < until)
        weir_time_sleep(10 * WEIR_MSEC);
    CHECK_EQ(log_count("worker lost: flood (overflow: "), 1);
    coord_stop(&c);
    return 0;
}

TEST(a_worker_flooding_heartbeats_is_lost_on_the_overflow_verdict)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, overflow_main, NULL), 0);
    tee_end();
}

/* ---- 5. the restart budget ---------------------------------------------------------------- */

/* The latest COMPLETED-<id> in dir, 0 for none. */
static uint64_t latest_completed(const char *dir)
{
    uint64_t best = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "COMPLETED-", 10) == 0) {
            uint64_t id = strtoull(e->d_name + 10, NULL, 10);
            best = id > best ? id : best;
        }
    closedir(d);
    return best;
}

static intptr_t budget_main(void *arg)
{
    (void)arg;
    char tmp[] = "/tmp/weir-test-coord-XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    char ckpt[128], out[128];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt", tmp);
    snprintf(out, sizeof(out), "%s/out", tmp);
    cnode c = {.o = {.max_restarts = 10}}; /* the job's own budget must win */
    coord_start(&c);
    wnode w1, w2;
    worker_start(&w1, "w1", &c, 4);
    weir__client *cl = client_open(&c);
    char *args[] = {out, "1000000000"}; /* runs until stopped */
    weir__client_submit_opts o = {.plugin = PLUGIN("job_eo"),
                                  .parallelism = 1,
                                  .checkpoint_dir = ckpt,
                                  .checkpoint_interval_ms = 50,
                                  .argc = 2,
                                  .argv = args,
                                  .max_restarts = 1};
    uint64_t job = submit_ok(cl, &o);
    int64_t first = weir_time_after_ms(30000);
    while (latest_completed(ckpt) == 0) {
        CHECK_LT(weir_time_now(), first);
        weir_time_sleep(20 * WEIR_MSEC);
    }
    worker_stop(&w1); /* the first loss: restarted */
    wait_log("restarting (1)", 1);
    uint64_t done = latest_completed(ckpt);
    worker_start(&w2, "w2", &c, 4);
    /* The restart runs on w2: a checkpoint above the last one completes
     * (and the job has not ended on the first loss alone). */
    int64_t deadline = weir_time_after_ms(30000);
    while (latest_completed(ckpt) <= done) {
        if (log_count("job 1 failed") > 0)
            TEST__FAIL("one worker stopping spent the whole restart budget (the restart was "
                       "placed on the worker that was going away)");
        CHECK_LT(weir_time_now(), deadline);
        weir_time_sleep(20 * WEIR_MSEC);
    }
    worker_stop(&w2); /* the second: the budget is spent */
    char msg[WEIR_CLUSTER_MESSAGE_MAX];
    uint32_t restarts = 0;
    int32_t err = wait_job(cl, job, DEADLINE(), msg, sizeof(msg), &restarts);
    printf("job ended: %d %s\n", err, msg);
    CHECK_NE(err, 0);
    CHECK_NE(err, -ECANCELED);
    CHECK_EQ(restarts, 1);
    CHECK_HAS(msg, "the restart budget (1 in a burst) is spent");
    CHECK_HAS(msg, "worker w2"); /* the cause: the second loss */
    CHECK_EQ(log_count("restarting (2)"), 0);
    /* ListJobs says the same. */
    weir__cl_job_list l;
    char lm[1024];
    CHECK_EQ(weir__client_list(cl, &l, DEADLINE(), lm, sizeof(lm)), 0);
    CHECK_EQ(l.jobs.n, 1);
    CHECK_EQ(l.jobs.v[0].state, WEIR__CL_JOB_FAILED);
    CHECK_HAS(l.jobs.v[0].message, "restart budget");
    weir__client_list_free(&l);
    weir__client_close(cl);
    coord_stop(&c);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    CHECK_EQ(system(cmd), 0);
    return 0;
}

TEST(a_job_past_its_restart_budget_fails_naming_it_and_the_cause)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, budget_main, NULL), 0);
    tee_end();
}

/* A client that stops reading holds up its connection's writer: a job of
 * its that ends meanwhile must still reach it once it reads again, even
 * after more than the 5 s a JobCompleted used to wait for the client's
 * write lock before it was dropped (and its client waited forever). The
 * client floods ListJobs without reading until the coordinator stops
 * taking them (its reply is stuck), a second client cancels the job, and
 * 6 s later - within the coordinator's 10 s write deadline - the first
 * reads everything: the JobCompleted is among it. */
static intptr_t completed_main(void *arg)
{
    (void)arg;
    cnode c = {.o = {.max_restarts = -1}};
    coord_start(&c);
    wnode w;
    worker_start(&w, "a", &c, 4);
    int fd = raw_connect(&c, 4096);
    int small = 4096;
    CHECK_EQ(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
    weir__client *a = NULL;
    char msg[2048];
    if (weir__client_open_fd(fd, c.addr, "slow reader", DEADLINE(), &a, msg, sizeof(msg)))
        TEST__FAIL("client open: %s", msg);
    char *args[] = {"1000000000000"}; /* runs until cancelled */
    weir__client_submit_opts o = count_job(1, args, 1);
    uint64_t job = submit_ok(a, &o);
    /* ListJobs until none is taken for 500 ms: a reply is stuck. A
     * thousand frames a send, so the coordinator's receive buffer fills at
     * once after it stopped reading (one tiny frame a send took seconds on
     * a loaded machine, and the stuck write neared its deadline). */
    size_t one;
    uint8_t *frame = encode(&(weir__cl_msg){.kind = WEIR_CLUSTER_LIST_JOBS}, &one);
    size_t len = one * 1000;
    uint8_t *list = malloc(len);
    CHECK(list != NULL);
    for (size_t i = 0; i < 1000; i++)
        memcpy(list + i * one, frame, one);
    free(frame);
    int64_t quiet_since = 0;
    for (size_t sent = 0;;) {
        ssize_t n = send(fd, list + sent, len - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            sent = (sent + (size_t)n) % len;
            quiet_since = 0;
            continue;
        }
        CHECK(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
        if (!quiet_since)
            quiet_since = weir_time_now();
        else if (weir_time_now() - quiet_since > 500 * WEIR_MSEC)
            break;
        weir_time_sleep(20 * WEIR_MSEC);
    }
    free(list);
    int64_t stuck = weir_time_now();
    weir__client *b = client_open(&c);
    weir__cl_cancel_job_ack ca;
    CHECK_EQ(weir__client_cancel(b, job, &ca, DEADLINE(), msg, sizeof(msg)), 0);
    CHECK_EQ(ca.status, WEIR__CL_CANCEL_OK);
    weir__client_cancel_free(&ca);
    weir_time_sleep_until(stuck + 6000 * WEIR_MSEC);
    /* (Any frame cut short would fail this read.) */
    weir_frame_parser fp;
    CHECK_EQ(weir_frame_parser_init(&fp, NULL), 0);
    int64_t deadline = DEADLINE();
    size_t lists = 0;
    for (;;) {
        weir__cl_msg m;
        char why[256];
        int e = weir__cl_recv(WEIR__CL_FD(fd), &fp, &m, NULL, deadline, why, sizeof(why));
        if (e != 1)
            TEST__FAIL("no JobCompleted after %zu JobLists: %d %s", lists, e, why);
        if (m.kind == WEIR_CLUSTER_JOB_COMPLETED) {
            CHECK_EQ(m.u.completed.job, job);
            CHECK_EQ(m.u.completed.err, -ECANCELED);
            weir__cl_msg_free(&m);
            break;
        }
        CHECK_EQ(m.kind, WEIR_CLUSTER_JOB_LIST);
        lists++;
        weir__cl_msg_free(&m);
    }
    printf("the JobCompleted came after %zu JobLists\n", lists);
    weir_frame_parser_close(&fp);
    weir__client_close(a);
    weir__client_close(b);
    worker_stop(&w);
    coord_stop(&c);
    return 0;
}

TEST(a_job_end_reaches_a_client_that_stopped_reading_for_a_while)
{
    CHECK_EQ(test_run_on_rt(2, completed_main, NULL), 0);
}

/* ---- 6. high availability: election and fencing ------------------------------------------- */

static void on_standby(void *arg, const char *dir)
{
    (void)dir;
    atomic_store(&((cnode *)arg)->standby, 1);
}

/* A raw worker's RegisterAck from c: its epoch; then a Heartbeat's ack,
 * which goes through the session's outbox: its epoch too. */
static void registers_under_epoch(const cnode *c, const char *id, uint64_t epoch)
{
    weir_frame_parser fp;
    int fd = raw_connect(c, 0);
    CHECK_EQ(register_raw(fd, id, &fp), epoch);
    weir__cl_msg a;
    weir__cl_msg hb = {.kind = WEIR_CLUSTER_HEARTBEAT};
    hb.u.heartbeat.seq = 1;
    raw_send_msg(fd, &hb);
    raw_recv_msg(fd, &fp, WEIR_CLUSTER_HEARTBEAT_ACK, &a);
    CHECK_EQ(a.epoch, epoch);
    weir__cl_msg_free(&a);
    weir_frame_parser_close(&fp);
    close(fd);
}

static intptr_t election_main(void *arg)
{
    (void)arg;
    char dir[64] = "/tmp/weir-test-ha-XXXXXX", msg[512];
    CHECK(mkdtemp(dir));
    cnode a = {.o = {.ha_dir = dir, .on_standby = on_standby}};
    coord_start(&a);
    CHECK(!atomic_load(&a.standby)); /* the first one leads at once */
    weir__ha_leader l;
    CHECK_EQ(weir__ha_read_leader(dir, &l, msg, sizeof(msg)), 0);
    CHECK_EQ(l.epoch, 1);
    CHECK_EQ(l.port, atomic_load(&a.port));
    registers_under_epoch(&a, "w-a", 1);
    /* The second stands by with its port closed. */
    cnode b = {.o = {.ha_dir = dir, .on_standby = on_standby}};
    coord_spawn(&b);
    int64_t deadline = DEADLINE();
    while (!atomic_load(&b.standby)) {
        CHECK_LT(weir_time_now(), deadline);
        weir_time_sleep(5 * WEIR_MSEC);
    }
    CHECK_EQ(atomic_load(&b.port), 0);
    /* The leader goes: the standby leads within a poll or two, one epoch
     * above, and says where in the leader file. */
    coord_stop(&a);
    coord_wait_listening(&b);
    CHECK_EQ(weir__ha_read_leader(dir, &l, msg, sizeof(msg)), 0);
    while (l.port != atomic_load(&b.port)) { /* announced just after listening */
        CHECK_LT(weir_time_now(), deadline);
        weir_time_sleep(5 * WEIR_MSEC);
        CHECK_EQ(weir__ha_read_leader(dir, &l, msg, sizeof(msg)), 0);
    }
    CHECK_EQ(l.epoch, 2);
    registers_under_epoch(&b, "w-b", 2);
    coord_stop(&b);
    /* A directory that is a file is refused with its name. */
    char file[128];
    snprintf(file, sizeof(file), "%s/%s", dir, WEIR__HA_LEADER_FILE);
    cnode bad = {.o = {.ha_dir = file}};
    coord_spawn(&bad);
    CHECK_EQ(weir_task_join(bad.t, NULL, DEADLINE()), 0);
    CHECK_EQ(bad.rc, -ENOTDIR);
    CHECK_HAS(bad.msg, "not a directory");
    close(bad.stop[0]);
    close(bad.stop[1]);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
    return 0;
}

TEST(one_coordinator_leads_the_standby_takes_over_with_the_next_epoch)
{
    CHECK_EQ(test_run_on_rt(2, election_main, NULL), 0);
}

/* A fake coordinator's side of one registration: the Register read, a
 * RegisterAck of epoch sent. */
static int fake_coord_accept(int lfd, weir_frame_parser *fp, uint64_t epoch)
{
    int fd = weir_io_accept(lfd, NULL, NULL, DEADLINE());
    CHECK_GE(fd, 0);
    CHECK_EQ(weir_frame_parser_init(fp, NULL), 0);
    weir__cl_msg m;
    raw_recv_msg(fd, fp, WEIR_CLUSTER_REGISTER, &m);
    weir__cl_msg_free(&m);
    weir__cl_msg ack = {.kind = WEIR_CLUSTER_REGISTER_ACK, .epoch = epoch};
    ack.u.reg_ack =
        (weir__cl_register_ack){WEIR_CLUSTER_PROTO_VERSION, WEIR_CLUSTER_PROTO_MIN_COMPAT,
                                WEIR__CL_ACCEPTED, "", WEIR_CLUSTER_HEARTBEAT_MS};
    raw_send_msg(fd, &ack);
    return fd;
}

static void send_hb_ack(int fd, uint64_t epoch)
{
    weir__cl_msg a = {.kind = WEIR_CLUSTER_HEARTBEAT_ACK, .epoch = epoch};
    a.u.heartbeat_ack.seq = 1;
    raw_send_msg(fd, &a);
}

static intptr_t fencing_main(void *arg)
{
    (void)arg;
    int lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(lfd, 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", weir_net_local_port(lfd));
    wnode w;
    memset(&w, 0, sizeof(w));
    snprintf(w.id, sizeof(w.id), "fenced");
    CHECK_EQ(pipe2(w.stop, O_NONBLOCK | O_CLOEXEC), 0);
    w.o = (weir__worker_opts){.id = w.id,
                              .coordinator = addr,
                              .data_host = "127.0.0.1",
                              .stop_fd = w.stop[0],
                              .on_registered = on_registered,
                              .arg = &w};
    w.t = test_spawn(worker_main, &w);
    weir_frame_parser fp;
    int fd = fake_coord_accept(lfd, &fp, 5);
    /* A frame of a lower epoch is dropped and counted; a higher one
     * rebinds the worker (a new leader that kept the connection). */
    send_hb_ack(fd, 4);
    wait_log("dropped a HeartbeatAck of epoch 4 (bound to 5)", 1);
    send_hb_ack(fd, 7);
    send_hb_ack(fd, 6);
    wait_log("dropped a HeartbeatAck of epoch 6 (bound to 7)", 1);
    weir_frame_parser_close(&fp);
    close(fd);
    /* The worker registers again; a coordinator admitting it with an
     * epoch below the one it bound is a superseded leader: refused. */
    fd = fake_coord_accept(lfd, &fp, 3);
    wait_log("admitted it with epoch 3, below epoch 7 bound before: a superseded leader", 1);
    raw_expect_closed(fd);
    weir_frame_parser_close(&fp);
    close(fd);
    /* And the next one, of a higher epoch, gets it. */
    fd = fake_coord_accept(lfd, &fp, 8);
    int64_t deadline = DEADLINE();
    while (atomic_load(&w.registered) < 2) {
        CHECK_LT(weir_time_now(), deadline);
        weir_time_sleep(5 * WEIR_MSEC);
    }
    CHECK_EQ(write(w.stop[1], "x", 1), 1);
    CHECK_EQ(weir_task_join(w.t, NULL, DEADLINE()), 0);
    CHECK_EQ(w.rc, 0);
    close(w.stop[0]);
    close(w.stop[1]);
    weir_frame_parser_close(&fp);
    close(fd);
    weir_io_close(lfd);
    return 0;
}

TEST(a_worker_drops_frames_below_its_epoch_and_refuses_a_superseded_leader)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, fencing_main, NULL), 0);
    tee_end();
}

/* The leader file (HA_DIR/active-leader.json) naming leader at port
 * with epoch, elected ago_ms before now, as a leader writes it. */
static void put_leader(const char *dir, int port, uint64_t epoch, int64_t ago_ms)
{
    char path[256], msg[256];
    snprintf(path, sizeof(path), "%s/active-leader.json", dir);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    json_t *o = json_pack("{s:s, s:i, s:I, s:I}", "host", "127.0.0.1", "port", port, "time_ms",
                          (json_int_t)now, "elected_ms", (json_int_t)(now - ago_ms));
    CHECK(o);
    if (weir__ha_cas_write(path, epoch, o, NULL, msg, sizeof(msg)) != 0)
        TEST__FAIL("writing the leader file: %s", msg);
    json_decref(o);
}

/* A worker in session with a leader that another has superseded - the
 * HA directory's leader file names a higher epoch, as when a frozen
 * leader lost its etcd lease - rebinds to the new epoch while it still
 * reads the old session: the old leader's frames are dropped and
 * counted, the first one ends the session, and the worker registers
 * with the leader the file names. A commit is checked against the file
 * whatever the last look at it. */
static intptr_t superseded_main(void *arg)
{
    (void)arg;
    char dir[] = "/tmp/weir-test-superseded-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int lfd = weir_net_listen("127.0.0.1", 0, NULL), lfd2 = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(lfd, 0);
    CHECK_GE(lfd2, 0);
    put_leader(dir, weir_net_local_port(lfd), 5, 0);
    wnode w;
    memset(&w, 0, sizeof(w));
    snprintf(w.id, sizeof(w.id), "follower");
    CHECK_EQ(pipe2(w.stop, O_NONBLOCK | O_CLOEXEC), 0);
    w.o = (weir__worker_opts){.id = w.id,
                              .ha_dir = dir,
                              .data_host = "127.0.0.1",
                              .stop_fd = w.stop[0],
                              .on_registered = on_registered,
                              .arg = &w};
    w.t = test_spawn(worker_main, &w);
    weir_frame_parser fp;
    int fd = fake_coord_accept(lfd, &fp, 5);
    send_hb_ack(fd, 5); /* the leader's: taken */
    wait_log("follower registered", 1);
    /* A new leader, epoch 6, elsewhere, elected a minute ago: the worker
     * reads it within its watch and rebinds, and counts the frame it took
     * since as stale; the old leader's commit is dropped, and ends the
     * session. */
    put_leader(dir, weir_net_local_port(lfd2), 6, 60000);
    wait_log("names a new leader, epoch 6 above this session's 5: following it (frames of the "
             "superseded leader were taken after it was elected)",
             1);
    weir__cl_msg c = {.kind = WEIR_CLUSTER_COMMIT_CHECKPOINT, .epoch = 5};
    c.u.checkpoint = (weir__cl_checkpoint){.job = 1, .id = 3};
    raw_send_msg(fd, &c);
    wait_log("dropped a CommitCheckpoint of epoch 5 (bound to 6)", 1);
    wait_log("a superseded leader (epoch 5 below 6)", 1);
    raw_expect_closed(fd);
    weir_frame_parser_close(&fp);
    close(fd);
    int fd2 = fake_coord_accept(lfd2, &fp, 6);
    int64_t deadline = DEADLINE();
    while (atomic_load(&w.registered) < 2) {
        CHECK_LT(weir_time_now(), deadline);
        weir_time_sleep(5 * WEIR_MSEC);
    }
    /* A commit arriving before any watch saw the file move: read at the
     * commit itself. */
    put_leader(dir, weir_net_local_port(lfd), 7, 0);
    c.epoch = 6;
    raw_send_msg(fd2, &c);
    wait_log("names a new leader, epoch 7 above this session's 6: following it\n", 1);
    wait_log("dropped a CommitCheckpoint of epoch 6 (bound to 7)", 1);
    raw_expect_closed(fd2);
    CHECK_EQ(write(w.stop[1], "x", 1), 1);
    CHECK_EQ(weir_task_join(w.t, NULL, DEADLINE()), 0);
    CHECK_EQ(w.rc, 0);
    close(w.stop[0]);
    close(w.stop[1]);
    weir_frame_parser_close(&fp);
    close(fd2);
    weir_io_close(lfd);
    weir_io_close(lfd2);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK_EQ(system(cmd), 0);
    return 0;
}

/* The latest COMPLETED-<id> marker in dir (0: none). */
static uint64_t latest_marker(const char *dir)
{
    DIR *d = opendir(dir);
    uint64_t best = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        unsigned long long id;
        char extra;
        if (sscanf(de->d_name, "COMPLETED-%llu%c", &id, &extra) == 1 && id > best)
            best = id;
    }
    if (d)
        closedir(d);
    return best;
}

typedef struct put_leader_arg {
    const char *dir;
    int port;
    uint64_t epoch;
} put_leader_arg;

static intptr_t b_put_leader(void *arg)
{
    put_leader_arg *a = arg;
    put_leader(a->dir, a->port, a->epoch, 0);
    return 0;
}

/* A leader whose HA directory names a later epoch - another coordinator
 * leads now, while this one still runs (frozen past its lease, woken) -
 * completes no checkpoint: each is abandoned at its COMPLETED marker's
 * fence, which it shows in the job's history, and no marker is written. */
static intptr_t ckpt_fence_main(void *arg)
{
    (void)arg;
    char dir[] = "/tmp/weir-test-ckfence-XXXXXX", ck[300];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(ck, sizeof(ck), "%s/ck", dir);
    cnode c = {.o = {.ha_dir = dir, .max_restarts = -1}};
    coord_start(&c);
    wnode w;
    worker_start(&w, "a", &c, 4);
    weir__client *cl = client_open(&c);
    char *args[] = {"1000000000000"}; /* runs until cancelled */
    weir__client_submit_opts o = count_job(1, args, 1);
    o.checkpoint_dir = ck;
    o.checkpoint_interval_ms = 50;
    uint64_t job = submit_ok(cl, &o);
    int64_t deadline = DEADLINE();
    while (latest_marker(ck) < 2) {
        CHECK_LT(weir_time_now(), deadline);
        weir_time_sleep(10 * WEIR_MSEC);
    }
    /* Epoch 2: another leads. Written on the blocking pool, as another
     * process would: its exclusive lock waits for the fence's shared one,
     * which a fiber of this process holds. */
    CHECK_EQ(weir__blocking_run_shielded(b_put_leader, &(put_leader_arg){dir, 1, 2}), 0);
    wait_log("not completed: ", 1);
    CHECK_GE(log_count("above this coordinator's 1: another coordinator leads now"), 1);
    uint64_t at = latest_marker(ck);
    wait_log("not completed: ", 4); /* three more tries, none completed */
    CHECK_EQ(latest_marker(ck), at);
    char msg[2048];
    weir__cl_job_detail d;
    CHECK_EQ(weir__client_describe(cl, job, &d, DEADLINE(), msg, sizeof(msg)), 0);
    CHECK_EQ(d.status, WEIR__CL_DETAIL_OK);
    CHECK_HAS(d.json, "\"state\":\"aborted\"");
    CHECK_HAS(d.json, "not completed: ");
    weir__client_detail_free(&d);
    weir__client_close(cl);
    worker_stop(&w);
    coord_stop(&c);
    snprintf(msg, sizeof(msg), "rm -rf '%s'", dir);
    CHECK_EQ(system(msg), 0);
    return 0;
}

TEST(a_superseded_leader_completes_no_checkpoint)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, ckpt_fence_main, NULL), 0);
    tee_end();
}

/* A user's cancel that races the leader's own stop stays a cancel: the
 * job's record moves to the history, so the next leader does not run it
 * again (a job cancelled only by the stop is handed on: see ha.sh). */
static intptr_t cancel_race_main(void *arg)
{
    (void)arg;
    char dir[] = "/tmp/weir-test-cancelrace-XXXXXX", path[300];
    CHECK(mkdtemp(dir) != NULL);
    cnode c = {.o = {.ha_dir = dir, .max_restarts = -1}};
    coord_start(&c);
    wnode w;
    worker_start(&w, "a", &c, 4);
    weir__client *cl = client_open(&c);
    char *args[] = {"1000000000000"}; /* runs until cancelled */
    weir__client_submit_opts o = count_job(1, args, 1);
    uint64_t job = submit_ok(cl, &o);
    snprintf(path, sizeof(path), "%s/jobs/%" PRIu64 ".json", dir, job);
    CHECK_EQ(access(path, F_OK), 0);
    char msg[2048];
    weir__cl_cancel_job_ack ca;
    CHECK_EQ(weir__client_cancel(cl, job, &ca, DEADLINE(), msg, sizeof(msg)), 0);
    CHECK_EQ(ca.status, WEIR__CL_CANCEL_OK);
    weir__client_cancel_free(&ca);
    weir__client_close(cl);
    coord_stop(&c); /* at once: the stop's own cancel comes on top */
    CHECK_EQ(access(path, F_OK), -1);
    snprintf(path, sizeof(path), "%s/history/%" PRIu64 ".json", dir, job);
    CHECK_EQ(access(path, F_OK), 0);
    worker_stop(&w);
    snprintf(msg, sizeof(msg), "rm -rf '%s'", dir);
    CHECK_EQ(system(msg), 0);
    return 0;
}

TEST(a_users_cancel_racing_the_leaders_stop_stays_a_cancel)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, cancel_race_main, NULL), 0);
    tee_end();
}

TEST(a_worker_follows_the_leader_file_past_a_superseded_leader)
{
    tee_begin();
    CHECK_EQ(test_run_on_rt(2, superseded_main, NULL), 0);
    tee_end();
}

/* ---- 7. admission control ----------------------------------------------------------------- */

/* A connection to c from source address src (any 127/8 address is
 * loopback's), blocking connect, then non-blocking. */
static int raw_connect_from(const cnode *c, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK_GE(fd, 0);
    struct sockaddr_in s = {.sin_family = AF_INET};
    CHECK_EQ(inet_pton(AF_INET, src, &s.sin_addr), 1);
    CHECK_EQ(bind(fd, (struct sockaddr *)&s, sizeof(s)), 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    CHECK_EQ(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
    return fd;
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    CHECK(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n - 2; /* . and .. */
}

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SLOW 4
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SLOW 4
#endif
#endif
#ifndef SLOW
#define SLOW 1
#endif

static intptr_t flood_main(void *arg)
{
    (void)arg;
    enum { CAP = 16, SILENT = 900, DRIP = 100 };
    int base = open_fds();
    atomic_store(&ready_coord, NULL);
    cnode c = {.o = {.max_pending_connections = CAP, .on_ready = on_coord_ready}};
    coord_start(&c);
    coord *co = (coord *)atomic_load(&ready_coord);
    CHECK(co);
    int coord_fds = open_fds() - base;
    /* 1000 connections from 127.0.0.1: most send nothing, some one byte of
     * a frame and then nothing. */
    static int fds[SILENT + DRIP];
    for (int i = 0; i < SILENT + DRIP; i++) {
        fds[i] = raw_connect_from(&c, "127.0.0.1");
        if (i >= SILENT)
            CHECK_EQ(send(fds[i], "\0", 1, MSG_NOSIGNAL), 1);
    }
    /* The coordinator took them all, and holds at most 3 * CAP: the rest
     * were evicted (shut down, then closed by their fibers) or refused. */
    int64_t deadline = DEADLINE();
    while (weir_counter_value(co->m.adm_refused) + weir_counter_value(co->m.adm_evicted) <
           SILENT + DRIP - 3 * CAP) {
        CHECK_LT(weir_time_now(), deadline);
        weir_time_sleep(10 * WEIR_MSEC);
    }
    CHECK_GT(weir_counter_value(co->m.adm_evicted), 0);
    int held;
    while ((held = open_fds() - base - coord_fds - (SILENT + DRIP)) > 3 * CAP) {
        if (weir_time_now() > deadline)
            TEST__FAIL("the coordinator holds %d descriptors for the flood, over %d", held,
                       3 * CAP);
        weir_time_sleep(10 * WEIR_MSEC);
    }
    /* Three workers from another address get in, each within 2 s. */
    for (int w = 0; w < 3; w++) {
        int64_t t0 = weir_time_now();
        int fd = raw_connect_from(&c, "127.0.0.2");
        char id[16];
        snprintf(id, sizeof(id), "w%d", w);
        weir_frame_parser fp;
        register_raw(fd, id, &fp);
        weir_frame_parser_close(&fp);
        CHECK_LT(weir_time_now() - t0, 2000 * SLOW * WEIR_MSEC);
        close(fd);
    }
    for (int i = 0; i < SILENT + DRIP; i++)
        close(fds[i]);
    coord_stop(&c);
    return 0;
}

TEST(a_flood_of_silent_connections_holds_few_descriptors_and_workers_still_get_in)
{
    CHECK_EQ(test_run_on_rt(2, flood_main, NULL), 0);
}

TEST_MAIN()
