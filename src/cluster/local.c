/* SPDX-License-Identifier: Apache-2.0 */
/*
 * local.c - a coordinator and a worker in this process (local.h).
 *
 * Each node runs in a fiber of its own, in weir__coord_run /
 * weir__worker_run as `weir node` runs it, until the stop pipe's write end
 * is closed (EOF is a stop for both). The worker's session is a
 * socketpair: one end is the worker's (fd_given), the other is admitted by
 * the coordinator; so is every client's. Start-up is a handshake over a
 * channel: the coordinator says it runs (on_ready) or that it ended, then
 * the worker that it registered or that it ended.
 */
#include "cluster/local.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/alloc.h"
#include "cluster/node.h"
#include "weir/io.h"
#include "weir/rt.h"
#include "weir/sync.h"

#define NODE_STACK (256u << 10)
#define QUIET_MS   (24 * 3600 * 1000) /* liveness verdicts: never, in practice */
#define PEER       "this process"

enum { UP = 1, DOWN = 2 };

struct weir__local {
    pthread_mutex_t mu;
    weir__coord *coord; /* mu: while it runs */
    weir_chan *events;  /* int: UP / DOWN of the coordinator, then of the worker */
    int stop[2];        /* the stop pipe: closing [1] stops both nodes */
    weir_task *ct, *wt;
    weir__coord_opts co;
    weir__worker_opts wo;
    char cmsg[512], wmsg[512];
    int crc, wrc;
    _Atomic int http_port; /* the HTTP API's, once it listens; -1: none */
};

static void on_coord(void *arg, weir__coord *c)
{
    weir__local *l = arg;
    pthread_mutex_lock(&l->mu);
    l->coord = c;
    pthread_mutex_unlock(&l->mu);
    if (c)
        weir_chan_try_send(l->events, &(int){UP});
}

static void on_http(void *arg, const char *host, int port)
{
    (void)host;
    atomic_store(&((weir__local *)arg)->http_port, port);
}

static void on_registered(void *arg, const char *coordinator)
{
    (void)coordinator;
    weir__local *l = arg;
    weir_chan_try_send(l->events, &(int){UP});
}

static intptr_t coord_main(void *arg)
{
    weir__local *l = arg;
    l->crc = weir__coord_run(&l->co, l->cmsg, sizeof(l->cmsg));
    weir_chan_try_send(l->events, &(int){DOWN});
    return 0;
}

static intptr_t worker_main(void *arg)
{
    weir__local *l = arg;
    l->wrc = weir__worker_run(&l->wo, l->wmsg, sizeof(l->wmsg));
    weir_chan_try_send(l->events, &(int){DOWN});
    return 0;
}

/* A socketpair for a session: [0] the peer's, [1] the coordinator's. */
static int pair(int sv[2], char *msg, size_t cap)
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
        int e = -errno;
        snprintf(msg, cap, "socketpair: %s", strerror(errno));
        return e;
    }
    return 0;
}

/* Admit sv[1] to the running coordinator; sv[0] is then the caller's. */
static int admit(weir__local *l, int sv[2], char *msg, size_t cap)
{
    pthread_mutex_lock(&l->mu);
    int e = l->coord ? weir__coord_admit(l->coord, sv[1]) : -ESHUTDOWN;
    pthread_mutex_unlock(&l->mu);
    if (e == -ESHUTDOWN)
        close(sv[1]);
    if (e < 0) {
        close(sv[0]);
        snprintf(msg, cap, "the coordinator in this process %s",
                 e == -ESHUTDOWN ? "is not running" : "is out of memory");
    }
    return e;
}

/* Wait for the next start-up event; DOWN or an error is a failure. */
static int wait_up(weir__local *l)
{
    int ev = 0;
    int e = weir_chan_recv(l->events, &ev, WEIR_FOREVER);
    return e < 0 ? e : ev == UP ? 0 : -ECONNRESET;
}

int weir__local_start(uint32_t slots, int http_port, weir__local **out, char *msg, size_t cap)
{
    *out = NULL;
    weir__local *l = weir__calloc(1, sizeof(*l));
    if (!l) {
        snprintf(msg, cap, "out of memory");
        return -ENOMEM;
    }
    pthread_mutex_init(&l->mu, NULL);
    l->stop[0] = l->stop[1] = -1;
    atomic_init(&l->http_port, -1);
    int e = 0;
    if (!(l->events = weir_chan_new(sizeof(int), 4))) {
        snprintf(msg, cap, "out of memory");
        e = -ENOMEM;
        goto fail;
    }
    if (pipe2(l->stop, O_CLOEXEC | O_NONBLOCK) < 0) {
        e = -errno;
        snprintf(msg, cap, "pipe: %s", strerror(errno));
        l->stop[0] = l->stop[1] = -1;
        goto fail;
    }
    l->co = (weir__coord_opts){.port = -1,
                               .heartbeat_timeout_ms = QUIET_MS,
                               .stall_ms = QUIET_MS,
                               .max_restarts = -1,
                               .default_parallelism = 1,
                               .client_reports = 1,
                               .stop_fd = l->stop[0],
                               .http = http_port >= 0,
                               .http_port = http_port,
                               .on_http = on_http,
                               .on_ready = on_coord,
                               .arg = l};
    if (!(l->ct = weir_task_spawn(
              coord_main, l,
              &(weir_spawn_opts){.name = "local coordinator", .stack_size = NODE_STACK}))) {
        e = -ENOMEM;
        snprintf(msg, cap, "out of memory");
        goto fail;
    }
    if ((e = wait_up(l)) < 0) {
        snprintf(msg, cap, "the coordinator did not start: %s", l->cmsg[0] ? l->cmsg : "?");
        goto fail;
    }
    int sv[2];
    if ((e = pair(sv, msg, cap)) < 0 || (e = admit(l, sv, msg, cap)) < 0)
        goto fail;
    l->wo = (weir__worker_opts){.id = "local",
                                .coordinator = PEER,
                                .fd_given = 1,
                                .fd = sv[0],
                                .slots = slots ? slots : UINT32_MAX / 2,
                                .stop_fd = l->stop[0],
                                .on_registered = on_registered,
                                .arg = l};
    if (!(l->wt = weir_task_spawn(
              worker_main, l,
              &(weir_spawn_opts){.name = "local worker", .stack_size = NODE_STACK}))) {
        close(sv[0]);
        e = -ENOMEM;
        snprintf(msg, cap, "out of memory");
        goto fail;
    }
    if ((e = wait_up(l)) < 0) {
        snprintf(msg, cap, "the worker did not start: %s",
                 l->wmsg[0]   ? l->wmsg
                 : l->cmsg[0] ? l->cmsg
                              : "?");
        goto fail;
    }
    /* The worker has its RegisterAck, which the coordinator posts only
     * with the session published: it places on the worker from now on. */
    *out = l;
    return 0;
fail:
    weir__local_stop(l, NULL, 0);
    return e;
}

int weir__local_client(weir__local *l, const char *name, weir__client **out, char *msg, size_t cap)
{
    *out = NULL;
    int sv[2];
    int e = pair(sv, msg, cap);
    if (e == 0)
        e = admit(l, sv, msg, cap);
    if (e < 0)
        return e;
    return weir__client_open_fd(sv[0], PEER, name, weir_time_after_ms(WEIR__CLIENT_CONNECT_MS), out,
                                msg, cap);
}

int weir__local_http_port(const weir__local *l)
{
    return atomic_load(&l->http_port);
}

void weir__local_stop(weir__local *l, char *msg, size_t cap)
{
    if (!l)
        return;
    if (cap)
        msg[0] = 0;
    if (l->stop[1] >= 0)
        close(l->stop[1]); /* EOF: both nodes stop */
    if (l->wt)
        weir_task_join(l->wt, NULL, WEIR_FOREVER);
    if (l->ct)
        weir_task_join(l->ct, NULL, WEIR_FOREVER);
    if (cap && (l->crc < 0 || l->wrc < 0))
        snprintf(msg, cap, "%s", l->crc < 0 ? l->cmsg : l->wmsg);
    if (l->stop[0] >= 0)
        close(l->stop[0]);
    if (l->events)
        weir_chan_unref(l->events);
    pthread_mutex_destroy(&l->mu);
    weir__free(l);
}
