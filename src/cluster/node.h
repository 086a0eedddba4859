/* SPDX-License-Identifier: Apache-2.0 */
/*
 * node.h - the two long-running roles of a weir cluster, as `weir node`
 * runs them (docs/cluster.md), and the frame helpers they share.
 *
 * A coordinator (coordinator.c) accepts workers and clients on one port,
 * plans submitted jobs, places their subtasks on workers, deploys them,
 * watches the workers' liveness, coordinates checkpoints across them and
 * restarts a job from its latest completed checkpoint when a worker is
 * lost. A worker (worker.c) registers with a coordinator, runs the
 * subtasks it is given over TCP channels to the other workers, and
 * reports back. Both run inside a weir runtime (weir_main) until their
 * stop descriptor (a signalfd for SIGINT / SIGTERM) becomes readable.
 *
 * Frames (conn.c): every message is encoded and decoded by proto.h; these
 * helpers write one to a socket under a deadline, post one to an outbox,
 * and read and decode one with the caps of weir/cluster.h.
 */
#ifndef WEIR_CLUSTER_NODE_H
#define WEIR_CLUSTER_NODE_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/etcd.h"
#include "cluster/outbox.h"
#include "cluster/proto.h"
#include "weir/stream.h"
#include "weir/tls.h"

/* A control-plane connection: its socket and, with TLS, its session
 * (weir/tls.h). Frames go through the session when there is one. */
typedef struct weir__cl_link {
    int fd;
    weir_tls *tls;
} weir__cl_link;
/* Close l: with TLS, close_notify first (best effort, 100 ms: the peer
 * then reads the end of the stream, not a reset) and the session freed;
 * then the socket. No one may be using l any more. Fibers only. */
void weir__cl_link_close(weir__cl_link *l);
/* A plain socket as a link (a compound literal: valid in its block). */
#define WEIR__CL_FD(fd_) (&(weir__cl_link){.fd = (fd_), .tls = NULL})

/* ---- the coordinator ------------------------------------------------------------------ */
typedef struct coord weir__coord; /* a running coordinator (coord_int.h) */

/* How long a restart waits for the survivors to drain, unless told. */
#define WEIR__COORD_DRAIN_MS 120000

typedef struct weir__coord_opts {
    const char *bind_host;      /* NULL: 0.0.0.0 */
    int port;                   /* 0: a free one; -1: no listener (weir__coord_admit only) */
    const char *advertise_host; /* what clients are told; NULL: bind host */
    const char *cache_dir;      /* plugin cache; NULL: a private temporary directory */
    /* 0: the defaults; stall_ms < 0: no stall verdict (outbox.h). */
    int64_t heartbeat_timeout_ms, watchdog_ms, stall_ms;
    int64_t drain_timeout_ms;  /* a restart's drain (0: WEIR__COORD_DRAIN_MS) */
    int64_t restart_window_ms; /* restarts forgiven after this clean (0: 10 min) */
    int max_restarts;          /* with checkpoints (-1: 10); without: always 0 */
    /* What each worker session's outbox may queue (outbox.h): control
     * frames by count and bytes, deploys by bytes. 0: the defaults. */
    uint64_t max_outbound_control_frames, max_outbound_control_bytes, max_outbound_bulk_bytes;
    /* Connections admitted at once before their first frame (admission.h;
     * 0: WEIR__ADM_MAX_PENDING). */
    int max_pending_connections;
    /* TLS on the cluster port (weir/tls.h: a server context, the caller's,
     * alive while the coordinator runs): every accepted connection's
     * handshake runs on its admission fiber, under the handshake timeout
     * (5 s) within the admission deadline. NULL: plain TCP. */
    weir_tls_ctx *tls;
    uint32_t default_parallelism;
    /* A job's failure is its submitter's to report (weir run prints it):
     * logged at info, not warn. */
    int client_reports;
    int stop_fd; /* readable: shut down (-1: never) */
    /* The HTTP API and /metrics (docs/cluster.md, "HTTP"), on the bind
     * host (127.0.0.1 when none is given) and http_port (0: a free one). */
    int http;
    int http_port;
    /* The web console at "/" (cluster/console.h): NULL serves the files
     * compiled in, a directory serves its files instead. */
    const char *http_static_dir;
    /* High availability (docs/cluster.md): with ha_dir, the coordinator
     * stands for leader in that directory (cluster/ha.h) and opens its
     * ports only once it leads; on_standby is called once when another
     * leads. ha_allow_unsafe_locks: a directory that fails the lock probe
     * is used anyway, with a warning. */
    const char *ha_dir;
    int ha_allow_unsafe_locks;
    /* With ha_dir: etcd decides who leads instead of the directory's lock
     * (cluster/etcd.h): a lease of etcd_lease_ttl_s seconds (0: 10) kept
     * alive every third of it, the key /weir/ETCD_CLUSTER/leader (NULL:
     * "weir") claimed by create-if-absent, its create_revision the epoch.
     * A leader whose lease is gone (it was frozen, or cut off from etcd
     * past the TTL) steps down at once: weir__coord_run returns -ESTALE
     * without cancelling any job, which its successor runs. The records
     * and the leader file stay in ha_dir. */
    const char *etcd_endpoints;
    const char *etcd_cluster;
    int etcd_lease_ttl_s;
    /* How etcd is reached (cluster/etcd.h, weir__etcd_opts): TLS to
     * https:// members, etcd's auth (the password itself, never logged). */
    weir__etcd_opts etcd;
    void (*on_standby)(void *arg, const char *ha_dir);
    /* Once listening: the port bound (the CLI prints it); the HTTP port
     * (when http). */
    void (*on_listen)(void *arg, const char *host, int port);
    void (*on_http)(void *arg, const char *host, int port);
    /* Once running, the coordinator (for weir__coord_admit); NULL once it
     * shuts down, before its fibers are cancelled: from then on it may not
     * be called. */
    void (*on_ready)(void *arg, weir__coord *c);
    void *arg;
} weir__coord_opts;

/* Run a coordinator until stop_fd is readable. 0, or a negative errno with
 * msg (it could not start: the port is taken...). Must run in a task. */
int weir__coord_run(const weir__coord_opts *o, char *msg, size_t cap);

/* Take fd, a connected socket, as if the listener had accepted it (its
 * first frame decides: a worker's Register or a client's HelloClient).
 * The coordinator owns fd from the call on. 0 or -ENOMEM (fd closed, with
 * close(2): the call never waits). */
int weir__coord_admit(weir__coord *c, int fd);

/* Workers registered and not lost now (their sessions are placed on). */
int weir__coord_workers(weir__coord *c);

/* ---- the worker ----------------------------------------------------------------------- */
typedef struct worker weir__worker; /* a running worker (worker.c) */

typedef struct weir__worker_opts {
    const char *id;          /* 1..255 bytes */
    const char *coordinator; /* HOST:PORT; with fd, only a name for it */
    /* With fd_given: fd is a socket already connected to the coordinator
     * (a socketpair's end it admitted), the worker's one session: no
     * reconnecting, no silence verdict (both ends share this process), and
     * the worker ends when the session does. weir__worker_run owns fd from
     * the call on and has closed it when it returns, whatever it returns
     * (a bad id, no memory, a stop before the session began included):
     * the caller must not close it. Else the worker connects to
     * coordinator. */
    int fd_given, fd;
    /* The coordinators' HA directory (cluster/ha.h): before each session
     * the worker reads which one leads there (coordinator may be NULL). */
    const char *ha_dir;
    /* TLS to the coordinator (a client context, the caller's, alive while
     * the worker runs): the certificate must name the host connected by.
     * NULL: plain TCP. Not used with fd_given. */
    weir_tls_ctx *tls;
    /* TLS on the data plane (channel_tcp.h): a server and a client
     * context of the same certificate and authority (the caller's, alive
     * while the worker runs), both or neither. NULL: plain TCP. */
    weir_tls_ctx *data_tls_server, *data_tls_client;
    uint32_t slots;        /* 0: WEIR__WORKER_SLOTS */
    const char *data_host; /* where its subtasks listen; NULL: what the coordinator sees */
    const char *cache_dir; /* NULL: a private temporary directory */
    int http;              /* serve /api/v1/health, /api/v1/worker, /metrics */
    uint16_t http_port;    /* with http: its port (0: a free one), advertised */
    int stop_fd;
    /* Registered (the CLI prints it); the HTTP port (when http). */
    void (*on_registered)(void *arg, const char *coordinator);
    void (*on_http)(void *arg, const char *host, int port);
    /* Once running, the worker; NULL before it is freed. */
    void (*on_ready)(void *arg, weir__worker *wk);
    void *arg;
} weir__worker_opts;

/* Subtasks a worker takes unless told (docs/cluster.md, "Slots"). */
#define WEIR__WORKER_SLOTS 16u

int weir__worker_run(const weir__worker_opts *o, char *msg, size_t cap);

/* ---- frames (conn.c) ------------------------------------------------------------------ */
/* Encode m and write it whole to l by deadline. 0 or a negative errno. */
int weir__cl_send(const weir__cl_link *l, const weir__cl_msg *m, int64_t deadline);
/* Encode m and post it to ob (class: WEIR__OUTBOX_CONTROL / _DEPLOY). */
int weir__cl_post(weir__outbox *ob, const weir__cl_msg *m, int cls);
/*
 * Read one frame from l through p and decode it into *m (weir__cl_msg_free
 * it) and, when frame is not NULL, keep the payload there (a decoded
 * message's byte strings point into it; weir_frame_free it after m).
 * 1 a message, 0 the peer closed at a frame boundary, else a negative errno
 * with why: -EBADMSG / -EMSGSIZE (malformed or too large: drop the peer),
 * -ETIMEDOUT, -ECANCELED, or the socket's error.
 */
int weir__cl_recv(const weir__cl_link *l, weir_frame_parser *p, weir__cl_msg *m, weir_frame *frame,
                  int64_t deadline, char *why, size_t cap);
/*
 * Wait until the stop descriptor says stop: a signalfd's signal (logged
 * with its number and sender), or a byte or EOF on a pipe. A failed or
 * short read (EAGAIN, EINTR) is not a stop: it is retried. 0 stop,
 * -ECANCELED when the waiting task was cancelled.
 */
int weir__cl_wait_stop(int fd, const char *who);

/*
 * A node's private plugin cache when none is given: a fresh directory
 * /tmp/weir-<role>-XXXXXX in dir[cap] (mode 0700), locked for the node's
 * life (flock on its .lock, held through *lock_fd), 0 or a negative errno
 * with msg. First it removes the caches of its role nobody holds locked -
 * those of nodes that died by SIGKILL - so that they do not pile up (the
 * lock it took checked to be the directory's current .lock; a directory
 * with no .lock, as an older weir made them, is left alone: conn.c).
 * weir__cl_cache_dir_remove removes it and what it holds, then drops the
 * lock. Both on the blocking pool (file system calls).
 */
int weir__cl_cache_dir_make(const char *role, char *dir, size_t cap, int *lock_fd, char *msg,
                            size_t msgcap);
void weir__cl_cache_dir_remove(const char *dir, int lock_fd);
/* "HOST:PORT" / "[V6]:PORT" into host[cap] and *port (1..65535). 0 or -EINVAL. */
int weir__cl_split_hostport(const char *s, char *host, size_t cap, int *port);

#endif
