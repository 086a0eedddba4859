/* SPDX-License-Identifier: Apache-2.0 */
/*
 * coordinator.c - a cluster's coordinator (node.h; docs/cluster.md).
 *
 * Fibers, all in one scope of the node:
 *
 *   accept      takes connections and starts an admission fiber for each;
 *   admission   reads the connection's first frame (capped at 64 KiB, under
 *               a deadline), negotiates the version and turns into the
 *               connection's reader: a worker's (Register) or a client's
 *               (HelloClient); anything else drops the connection;
 *   worker reader  stamps every frame as proof of life, answers
 *               Heartbeats, and routes the rest to the job they name (an
 *               event on the job's queue, or a checkpoint ACK on its ack
 *               queue): routing never waits, and a queue that is full
 *               costs the worker its session (its backlog is bounded);
 *   client      serves SubmitJob (with the plugin upload it may need),
 *               ListJobs and CancelJob, replying on its own connection;
 *   watchdog    every watchdog_ms declares a worker lost on silence
 *               (heartbeat timeout), on its outbox's stall or overflow
 *               verdict; a sweep that itself ran late judges nothing;
 *   job         one per job: runs its attempts (below; coord_job.c);
 *   stop        waits for the stop descriptor and shuts the node down.
 *
 * With ha_dir the coordinator first stands for leader (ha.h): its ports
 * stay closed until it holds the directory's lock, and its epoch - fixed
 * from then on - is stamped on every frame to a worker (weir__coord_post),
 * then announced in the leader file once it listens.
 *
 * Everything a coordinator sends a registered worker, its RegisterAck
 * first, goes through the worker session's outbox (outbox.h): posting
 * never waits on the worker. Shared state (the sessions, the jobs) is
 * under one mutex held only for memory work, never across a wait.
 *
 * A job's attempt: define the job from its plugin, plan it, place every
 * subtask (placement.h) and reserve the slots; begin the checkpoint side
 * of the run (runner.c weir__job_coord_begin: the checkpoint and output
 * directories are locked, the restore point chosen); post each worker its
 * Deploy; wait until every subtask reported the port its inbound channels
 * listen on (SubtaskListening), then tell each worker where its outbound
 * channels go (PeerUpdate) and start the checkpoint coordinator, whose
 * TRIGGER / COMPLETE / ABORT messages go out as TriggerCheckpoint /
 * CommitCheckpoint / AbortCheckpoint and whose ACKs are the workers'
 * SubtaskCheckpointed; then wait until every subtask finished. A lost
 * worker (or a worker that cancelled its subtasks itself, as one does when
 * it is stopped) ends the attempt: the survivors are sent CancelTasks and
 * drained (every subtask finished or its worker lost, within
 * drain_timeout_ms, else the job fails naming the subtasks that did not
 * drain), and the job restarts from its latest completed checkpoint with
 * new checkpoints numbered above every id an attempt used, at most
 * max_restarts times in a burst (restarts are forgiven after
 * restart_window_ms of clean running); without checkpoints it fails at
 * once. A subtask that fails on its own (an operator's error) fails the
 * job, as under `weir run`.
 */
#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "cluster/admission.h"
#include "cluster/etcd.h"
#include "cluster/ha.h"
#include "cluster/node.h"
#include "cluster/placement.h"
#include "cluster/plugins.h"
#include "rt/rt_int.h"
#include "stream/ckpt_link.h"
#include "stream/deploy.h"
#include "stream/plan.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/rt.h"
#include "weir/stream.h"
#include "weir/sync.h"
#include "cluster/coord_int.h"

/* ---- blocking-pool jobs --------------------------------------------------------------------- */
typedef struct bjob {
    coord *c;
    const weir__cl_plugin_ref *refs;
    size_t n;
    weir__cl_hash *missing;
    size_t nmissing;
    const uint8_t *bytes;
    size_t len;
    const uint8_t *sha;
    char *path;
    weir_plugin *plugin;
    uint8_t *data;
    char msg[1024];
} bjob;

static intptr_t b_missing(void *arg)
{
    bjob *b = arg;
    return weir__plugin_cache_missing(b->c->cache, b->refs, b->n, &b->missing, &b->nmissing, b->msg,
                                      sizeof(b->msg));
}

static intptr_t b_put(void *arg)
{
    bjob *b = arg;
    return weir__plugin_cache_put(b->c->cache, b->bytes, b->len, b->sha, b->msg, sizeof(b->msg));
}

/* Look the plugin up, read its bytes (for Deploys) and, for the job's own
 * (plugin != NULL asked), open it behind the ABI gate. */
static intptr_t b_open(void *arg)
{
    bjob *b = arg;
    int e = weir__plugin_cache_lookup(b->c->cache, b->sha, &b->path);
    if (e) {
        snprintf(b->msg, sizeof(b->msg), "the uploaded plugin is not in the cache: %s",
                 weir_strerror(e));
        return e;
    }
    FILE *f = fopen(b->path, "rb");
    if (!f)
        return -errno;
    b->data = b->len ? weir__malloc(b->len) : NULL;
    size_t got = b->data ? fread(b->data, 1, b->len, f) : 0;
    fclose(f);
    if (!b->data || got != b->len) {
        snprintf(b->msg, sizeof(b->msg), "reading the cached plugin %s failed", b->path);
        return -EIO;
    }
    if (b->plugin == (weir_plugin *)1) {
        b->plugin = NULL;
        return weir_plugin_open(b->path, &b->plugin, b->msg, sizeof(b->msg));
    }
    return 0;
}

/* ---- sessions -------------------------------------------------------------------------------- */
/* An event for J (mu held). The queue is unbounded, so a loss or a
 * cancel is never dropped; what workers send is bounded where it is
 * routed (route: a worker whose frames fill a job's backlog is lost). */
static void post_ev_locked(cjob *J, ev *x)
{
    if (weir_chan_try_send(J->events, x) < 0) { /* closed, or no memory */
        weir__free(x->message);
        weir__free(x->inputs);
        weir__log(WEIR__LOG_ERROR, LOG, "job %" PRIu64 ": an event could not be queued", J->id);
    }
}

/* Declare w lost (mu held): its outbox is aborted (the socket shut down
 * both ways) and every job using it hears of it. */
void weir__coord_lose_locked(coord *c, wsess *w, const char *kind, const char *cause)
{
    if (w->lost)
        return;
    w->lost = 1;
    w->lost_at = weir_time_now();
    /* A worker lost for silence may be alive and cut off: it stops what it
     * runs only once its own silence timeout passes. */
    w->silent = strcmp(kind, "heartbeat") == 0 || strcmp(kind, "stall") == 0;
    snprintf(w->cause, sizeof(w->cause), "%s", cause);
    weir_counter_inc(weir_metric_counter(c->m.lost, (const char *const[]){kind}));
    weir__log(c->stopping ? WEIR__LOG_INFO : WEIR__LOG_WARN, LOG ".watchdog",
              "worker lost: %s (%s)", w->id, cause);
    weir__outbox_abort(w->ob);
    for (size_t i = 0; i < c->njobs; i++) {
        cjob *J = c->jobs[i];
        if (!J->ended && weir__coord_job_uses(J, w)) {
            ev x = {.kind = EV_LOST, .ws = w->serial};
            post_ev_locked(J, &x);
        }
    }
}

/* The reader's loss: an outbox that stopped by itself shut the socket
 * down, so the reader meets the end of it; the outbox's verdict is then
 * the cause. */
static void lose(coord *c, wsess *w, const char *kind, const char *cause)
{
    char text[WEIR__OUTBOX_VERDICT_MAX];
    enum weir__outbox_verdict v = weir__outbox_verdict(w->ob, text, sizeof(text));
    if (v == WEIR__OUTBOX_OVERFLOW || v == WEIR__OUTBOX_ALLOC) {
        kind = "overflow";
        cause = text;
    }
    pthread_mutex_lock(&c->mu);
    weir__coord_lose_locked(c, w, kind, cause);
    pthread_mutex_unlock(&c->mu);
}

cjob *weir__coord_job_find_locked(coord *c, uint64_t id)
{
    for (size_t i = 0; i < c->njobs; i++)
        if (c->jobs[i]->id == id)
            return c->jobs[i];
    return NULL;
}

typedef struct placed_arg {
    const cjob *J;
    const wsess *w;
} placed_arg;

/* Whether the current attempt of a->J placed (chain, sub) on a->w (mu held). */
static int placed_on(void *arg, uint32_t chain, uint32_t sub)
{
    const placed_arg *a = arg;
    const weir__plan *p = a->J->plan;
    return p && a->J->place && chain < p->nchains && sub < p->chains[chain].par &&
           a->J->aw[a->J->place[a->J->base[chain] + sub]] == a->w;
}

/* A worker's frame for a job: an event on its queue (mu held); its
 * figures straight into the job's view. */
static void route(coord *c, wsess *w, weir__cl_msg *m)
{
    pthread_mutex_lock(&c->mu);
    if (w->lost) { /* frames of a session declared lost are dropped */
        pthread_mutex_unlock(&c->mu);
        return;
    }
    uint64_t jid = m->kind == WEIR_CLUSTER_SUBTASK_LISTENING      ? m->u.listening.job
                   : m->kind == WEIR_CLUSTER_SUBTASK_FINISHED     ? m->u.finished.job
                   : m->kind == WEIR_CLUSTER_SUBTASK_CHECKPOINTED ? m->u.checkpointed.job
                   : m->kind == WEIR_CLUSTER_SUBTASK_STATS        ? m->u.stats.job
                                                                  : m->u.request_final.job;
    cjob *J = weir__coord_job_find_locked(c, jid);
    if (!J || J->ended || !weir__coord_job_uses(J, w)) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    if (m->kind == WEIR_CLUSTER_SUBTASK_STATS) {
        if (m->u.stats.attempt == J->attempt && J->plan)
            weir__jv_report(&J->view, J->plan, &m->u.stats, placed_on, &(placed_arg){J, w},
                            weir_time_now());
        pthread_mutex_unlock(&c->mu);
        return;
    }
    /* The job's backlog of this kind of frame is bounded: a worker that
     * fills it (or sends more than its subtasks could) loses its session.
     * SubtaskCheckpointed and RequestFinalCheckpoint both queue on acks. */
    int to_acks = m->kind == WEIR_CLUSTER_SUBTASK_CHECKPOINTED ||
                  m->kind == WEIR_CLUSTER_REQUEST_FINAL_CHECKPOINT;
    if (weir_chan_len(to_acks ? J->acks : J->events) >= EV_BACKLOG) {
        char cause[160];
        snprintf(cause, sizeof(cause),
                 "its frames for job %" PRIu64 " fill the job's backlog of %u", J->id, EV_BACKLOG);
        weir__coord_lose_locked(c, w, "overflow", cause);
        pthread_mutex_unlock(&c->mu);
        return;
    }
    ev x = {.ws = w->serial};
    switch (m->kind) {
    case WEIR_CLUSTER_SUBTASK_LISTENING:
        x.kind = EV_LISTENING;
        x.attempt = m->u.listening.attempt;
        x.chain = m->u.listening.chain;
        x.sub = m->u.listening.sub;
        x.ninputs = m->u.listening.inputs.n;
        x.inputs = m->u.listening.inputs.v; /* taken */
        m->u.listening.inputs.v = NULL;
        m->u.listening.inputs.n = 0;
        post_ev_locked(J, &x);
        break;
    case WEIR_CLUSTER_SUBTASK_FINISHED:
        x.kind = EV_FINISHED;
        x.attempt = m->u.finished.attempt;
        x.chain = m->u.finished.chain;
        x.sub = m->u.finished.sub;
        x.err = m->u.finished.err;
        x.fatal = m->u.finished.fatal;
        x.message = m->u.finished.message; /* taken */
        m->u.finished.message = NULL;
        x.rin = m->u.finished.records_in;
        x.rout = m->u.finished.records_out;
        post_ev_locked(J, &x);
        break;
    case WEIR_CLUSTER_SUBTASK_CHECKPOINTED: {
        const weir__cl_subtask_checkpointed *k = &m->u.checkpointed;
        /* Only for a subtask the current attempt placed on this worker. */
        const weir__plan *p = J->plan;
        if (!p || !J->place || k->chain >= p->nchains || k->sub >= p->chains[k->chain].par ||
            J->aw[J->place[J->base[k->chain] + k->sub]] != w)
            break;
        weir__ckpt_msg a = {.kind = WEIR__CK_ACK,
                            .id = k->id,
                            .chain = k->chain,
                            .sub = k->sub,
                            .err = k->err,
                            .bytes = k->bytes};
        snprintf(a.state, sizeof(a.state), "%s", k->state);
        snprintf(a.position, sizeof(a.position), "%s", k->position);
        if (weir_chan_try_send(J->acks, &a) < 0)
            weir__log(WEIR__LOG_WARN, LOG, "job %" PRIu64 ": checkpoint acks queue full", J->id);
        break;
    }
    case WEIR_CLUSTER_REQUEST_FINAL_CHECKPOINT: {
        const weir__cl_request_final *k = &m->u.request_final;
        const weir__plan *p = J->plan;
        if (!p || !J->place || k->chain >= p->nchains || k->sub >= p->chains[k->chain].par ||
            J->aw[J->place[J->base[k->chain] + k->sub]] != w)
            break;
        weir__ckpt_msg a = {.kind = WEIR__CK_FINAL_REQ, .chain = k->chain, .sub = k->sub};
        if (weir_chan_try_send(J->acks, &a) < 0)
            weir__log(WEIR__LOG_WARN, LOG, "job %" PRIu64 ": checkpoint acks queue full", J->id);
        break;
    }
    default:
        break;
    }
    pthread_mutex_unlock(&c->mu);
}

/* The reader of a registered worker's connection (its admission fiber). */
static void worker_reader(coord *c, wsess *w, weir_frame_parser *fp)
{
    char why[256];
    for (;;) {
        weir__cl_msg m;
        weir_frame f;
        int e = weir__cl_recv(&w->link, fp, &m, &f, WEIR_FOREVER, why, sizeof(why));
        if (e == 0) {
            lose(c, w, "closed", "connection closed");
            return;
        }
        if (e == -ECANCELED)
            return;
        if (e == -EBADMSG || e == -EMSGSIZE) {
            weir_counter_inc(c->m.malformed);
            char cause[320];
            snprintf(cause, sizeof(cause), "malformed frame: %s", why);
            lose(c, w, "malformed", cause);
            return;
        }
        if (e < 0) {
            char cause[320];
            snprintf(cause, sizeof(cause), "connection failed: %s", why);
            lose(c, w, "closed", cause);
            return;
        }
        atomic_store(&w->last_seen, weir_time_now());
        if (weir__cl_kind_dir(m.kind) != WEIR__CL_FROM_WORKER || m.kind == WEIR_CLUSTER_REGISTER) {
            weir_counter_inc(c->m.malformed);
            char cause[160];
            snprintf(cause, sizeof(cause), "protocol violation: a %s from a worker",
                     weir__cl_kind_name(m.kind));
            weir__cl_msg_free(&m);
            weir_frame_free(&f);
            lose(c, w, "malformed", cause);
            return;
        }
        if (m.kind == WEIR_CLUSTER_HEARTBEAT) {
            weir__cl_msg a = {.kind = WEIR_CLUSTER_HEARTBEAT_ACK};
            a.u.heartbeat_ack.seq = m.u.heartbeat.seq;
            weir__coord_post(w, &a, WEIR__OUTBOX_CONTROL);
        } else {
            route(c, w, &m);
        }
        weir__cl_msg_free(&m);
        weir_frame_free(&f);
    }
}

/* Register: the version was checked. A refusal is written directly, the
 * write bounded (the peer may not read). The RegisterAck goes through the
 * session's outbox, posted under mu in the same critical section that
 * publishes the session: nothing can post to the outbox before it (every
 * poster finds the session in c->ws, under mu), so it is the first frame
 * the worker reads, and by the time the worker reads it the session is
 * published - a client that submits the moment its worker registered finds
 * that worker. A worker that does not read it is judged as any session is
 * (the outbox's stall verdict, the heartbeat timeout). */
static int admit_worker(coord *c, const weir__cl_link *l, weir_frame_parser *fp,
                        weir__cl_register *reg)
{
    int fd = l->fd;
    weir__cl_msg ack = {.kind = WEIR_CLUSTER_REGISTER_ACK, .epoch = c->epoch};
    ack.u.reg_ack =
        (weir__cl_register_ack){WEIR_CLUSTER_PROTO_VERSION, WEIR_CLUSTER_PROTO_MIN_COMPAT,
                                WEIR__CL_ACCEPTED, "", WEIR_CLUSTER_HEARTBEAT_MS};
    wsess *w = weir__calloc(1, sizeof(*w));
    weir__outbox_limits lim = weir__outbox_limits_default();
    lim.stall_ms = c->stall_ms;
    if (c->o.max_outbound_control_frames)
        lim.max_control_frames = c->o.max_outbound_control_frames;
    if (c->o.max_outbound_control_bytes)
        lim.max_control_bytes = c->o.max_outbound_control_bytes;
    if (c->o.max_outbound_bulk_bytes)
        lim.max_deploy_bytes = c->o.max_outbound_bulk_bytes;
    if (!w || !(w->ob = weir__outbox_new(fd, l->tls, &lim))) {
        weir__free(w);
        ack.u.reg_ack.status = WEIR__CL_RETRY;
        ack.u.reg_ack.message = "the coordinator is out of memory";
        weir__cl_send(l, &ack, weir_time_after_ms(250));
        return 0;
    }
    w->c = c;
    w->link = *l;
    w->slots = reg->slots;
    snprintf(w->id, sizeof(w->id), "%s", reg->worker_id);
    if (reg->data_host[0]) {
        snprintf(w->host, sizeof(w->host), "%s", reg->data_host);
    } else {
        weir_net_addr a;
        char buf[300];
        if (weir_net_peer_addr(fd, &a) == 0 && weir_net_addr_format(&a, buf, sizeof(buf)) > 0) {
            char *colon = strrchr(buf, ':');
            if (colon)
                *colon = 0;
            char *h = buf;
            if (h[0] == '[') { /* [v6] */
                h++;
                h[strlen(h) - 1] = 0;
            }
            snprintf(w->host, sizeof(w->host), "%.255s", h);
        } else {
            snprintf(w->host, sizeof(w->host), "127.0.0.1");
        }
    }
    weir__plugin_shipped_init(&w->shipped, 0);
    atomic_store(&w->last_seen, weir_time_now());
    pthread_mutex_lock(&c->mu);
    const char *refusal = c->stopping ? "the coordinator is stopping" : NULL;
    if (!refusal && c->nws == c->wscap) {
        size_t cap = c->wscap ? c->wscap * 2 : 16;
        wsess **v = weir__realloc(c->ws, cap * sizeof(*v));
        if (v) {
            c->ws = v;
            c->wscap = cap;
        } else {
            refusal = "the coordinator is out of memory";
        }
    }
    /* The ack is queued before anything else can be: see above. A post
     * refused (no memory) leaves nothing published. */
    int e = refusal ? 0 : weir__coord_post(w, &ack, WEIR__OUTBOX_CONTROL);
    if (!refusal && e == 0) {
        /* A worker registering again under its id replaces its old
         * session. */
        for (size_t i = 0; i < c->nws; i++)
            if (!c->ws[i]->lost && strcmp(c->ws[i]->id, w->id) == 0)
                weir__coord_lose_locked(c, c->ws[i], "replaced", "replaced by a new registration");
        w->serial = ++c->next_serial;
        w->refs = 1; /* the reader's */
        c->ws[c->nws++] = w;
        for (size_t i = 0; i < c->njobs; i++)
            if (!c->jobs[i]->ended) {
                /* Only to wake a restart waiting for room: one queued
                 * is as good as many. */
                ev x = {.kind = EV_REGISTERED, .ws = w->serial};
                if (weir_chan_len(c->jobs[i]->events) < 16)
                    post_ev_locked(c->jobs[i], &x);
            }
    }
    pthread_mutex_unlock(&c->mu);
    if (refusal || e) {
        if (refusal) { /* the outbox's writer is idle: nothing was posted */
            ack.u.reg_ack.status = WEIR__CL_RETRY;
            ack.u.reg_ack.message = (char *)refusal;
            weir__cl_send(l, &ack, weir_time_after_ms(250));
        } else {
            weir__log(WEIR__LOG_WARN, LOG, "worker %s: registration failed: %s", w->id,
                      weir_strerror(e));
        }
        weir__outbox_free(w->ob); /* shuts the socket down */
        weir__plugin_shipped_clear(&w->shipped);
        weir__free(w);
        return 0;
    }
    weir__log(WEIR__LOG_INFO, LOG, "worker %s registered (%u slots, data host %s)", w->id, w->slots,
              w->host);
    worker_reader(c, w, fp);
    /* The session is over: the loss aborted its outbox. The record (and
     * the socket, which its outbox writes) stays while an attempt still
     * refers to it; the watchdog frees it once nothing does. */
    pthread_mutex_lock(&c->mu);
    weir__coord_lose_locked(c, w, "closed", "connection closed");
    w->refs--;
    pthread_mutex_unlock(&c->mu);
    return 1;
}

static void session_free(wsess *w)
{
    weir__outbox_free(w->ob); /* joins its writer */
    weir__cl_link_close(&w->link);
    weir__plugin_shipped_clear(&w->shipped);
    weir__free(w);
}

/* Sessions lost that nothing refers to any more, freed (outside mu). */
static void reap_sessions(coord *c)
{
    wsess *dead[64];
    size_t n = 0;
    pthread_mutex_lock(&c->mu);
    size_t k = 0;
    for (size_t i = 0; i < c->nws; i++) {
        wsess *w = c->ws[i];
        if (w->lost && w->refs == 0 && n < sizeof(dead) / sizeof(dead[0]))
            dead[n++] = w;
        else
            c->ws[k++] = w;
    }
    c->nws = k;
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; i < n; i++)
        session_free(dead[i]);
}

/* ---- the watchdog ---------------------------------------------------------------------------- */
static intptr_t watchdog_main(void *arg)
{
    coord *c = arg;
    int64_t last = weir_time_now();
    int64_t late_ms =
        c->wd_ms + (c->stall_ms > 0 && c->stall_ms < c->hb_ms ? c->stall_ms : c->hb_ms);
    while (weir_time_sleep(c->wd_ms * WEIR_MSEC) == 0) {
        int64_t now = weir_time_now();
        int late = now - last > late_ms * WEIR_MSEC;
        last = now;
        pthread_mutex_lock(&c->mu);
        for (size_t i = 0; i < c->nws; i++) {
            wsess *w = c->ws[i];
            if (w->lost)
                continue;
            if (late) { /* nothing could be read or written in the gap */
                atomic_store(&w->last_seen, now);
                weir__outbox_rebase(w->ob, now);
                continue;
            }
            int64_t quiet = (now - atomic_load(&w->last_seen)) / WEIR_MSEC;
            char cause[WEIR__OUTBOX_VERDICT_MAX + 64];
            if (quiet > c->hb_ms) {
                snprintf(cause, sizeof(cause), "heartbeat timeout: no frame for %" PRId64 " ms",
                         quiet);
                weir__coord_lose_locked(c, w, "heartbeat", cause);
                continue;
            }
            enum weir__outbox_verdict v = weir__outbox_check(w->ob, now);
            if (v != WEIR__OUTBOX_OK) {
                char text[WEIR__OUTBOX_VERDICT_MAX];
                weir__outbox_verdict(w->ob, text, sizeof(text));
                snprintf(cause, sizeof(cause), "%s", text);
                weir__coord_lose_locked(c, w, v == WEIR__OUTBOX_STALLED ? "stall" : "overflow",
                                        cause);
            }
        }
        pthread_mutex_unlock(&c->mu);
        reap_sessions(c);
    }
    return 0;
}

/* ---- clients ------------------------------------------------------------------------------- */
#define CLIENT_WRITE_MS 10000 /* a client that takes none of a frame for this long is dropped */
/* An admission's deadline is this plus the heartbeat timeout (room for a
 * TLS handshake, then the first frame). */
#define ADMIT_HANDSHAKE_MS 5000

void weir__coord_client_unref(client *cl)
{
    if (atomic_fetch_sub(&cl->refs, 1) == 1) {
        weir__cl_link_close(&cl->link);
        weir_mutex_free(cl->wl);
        weir__free(cl);
    }
}

/* Write m to the client (cl->wl held). A write the client does not take
 * within CLIENT_WRITE_MS, or that the socket refuses, may have left part
 * of a frame behind: the connection is shut down, so that the client
 * sees it end - an error - rather than a corrupt stream or a reply that
 * never comes, and nothing more is written to it. */
static int client_write_locked(client *cl, const weir__cl_msg *m)
{
    if (atomic_load(&cl->closed))
        return -EPIPE;
    int e = weir__cl_send(&cl->link, m, weir_time_after_ms(CLIENT_WRITE_MS));
    if (e) {
        weir__log(WEIR__LOG_INFO, LOG, "client dropped: writing a %s failed: %s",
                  weir__cl_kind_name(m->kind), weir_strerror(e));
        atomic_store(&cl->closed, 1);
        shutdown(cl->link.fd, SHUT_RDWR); /* its reader meets the end and lets go */
    }
    return e;
}

/* Write m under cl->wl. The lock is waited for without a limit: every
 * holder only writes one frame, bounded by CLIENT_WRITE_MS, so a frame is
 * never dropped for want of the lock (a JobCompleted lost so left its
 * client waiting forever). A wait that is cancelled (the coordinator
 * stops) shuts the connection down, for the same reason. */
int weir__coord_client_send(client *cl, const weir__cl_msg *m)
{
    int e = weir_mutex_lock(cl->wl, WEIR_FOREVER);
    if (e) {
        atomic_store(&cl->closed, 1);
        shutdown(cl->link.fd, SHUT_RDWR);
        return e;
    }
    e = client_write_locked(cl, m);
    weir_mutex_unlock(cl->wl);
    return e;
}

static int client_reply(client *cl, weir__cl_msg *m)
{
    return weir__coord_client_send(cl, m);
}

/* A SubmitJobAck refusing the job (locked: the caller holds cl->wl). */
static int refuse_v(client *cl, int locked, const char *fmt, va_list ap)
{
    char msg[WEIR_CLUSTER_MESSAGE_MAX];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    weir__log(WEIR__LOG_INFO, LOG, "submit refused: %s", msg);
    const weir_abi_id *self = weir_abi_self();
    weir__cl_msg m = {.kind = WEIR_CLUSTER_SUBMIT_JOB_ACK};
    m.u.submit_ack.status = WEIR__CL_SUBMIT_REFUSED;
    m.u.submit_ack.message = msg;
    m.u.submit_ack.abi = (weir__cl_abi){(uint32_t)self->version, (char *)self->fingerprint,
                                        (char *)self->target, (char *)self->toolchain};
    if (locked)
        client_write_locked(cl, &m);
    else
        client_reply(cl, &m);
    return -EINVAL;
}

static int submit_refuse(client *cl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int submit_refuse(client *cl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int e = refuse_v(cl, 0, fmt, ap);
    va_end(ap);
    return e;
}

static int refuse_locked(client *cl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse_locked(client *cl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int e = refuse_v(cl, 1, fmt, ap);
    va_end(ap);
    return e;
}

void weir__coord_job_free(cjob *J)
{
    for (int i = 0; J->argv && i < J->argc; i++)
        weir__free(J->argv[i]);
    weir__free(J->argv);
    for (uint32_t i = 0; J->plugins && i < J->nplugins; i++)
        weir__free((void *)J->plugins[i].bytes.p);
    weir__free(J->plugins);
    weir__free(J->checkpoint_dir);
    weir__free(J->state_backend);
    weir__free(J->aw);
    weir__jv_free(&J->view);
    weir_plugin_close(J->plugin);
    if (J->events) {
        ev x;
        while (weir_chan_try_recv(J->events, &x) == 0)
            weir__coord_ev_free(&x);
        weir_chan_unref(J->events);
    }
    if (J->acks)
        weir_chan_unref(J->acks);
    weir__free(J);
}

static int job_build(coord *c, const weir__cl_submit_job *s, int recovering, cjob **out, char *why,
                     size_t cap);
static const char *job_publish(coord *c, cjob *J, client *cl, uint64_t *id);

/* ---- jobs kept in the HA directory (ha.h) ----------------------------------------------- */
/* What the next leader needs to run J again: its submission. */
static json_t *job_record(const cjob *J)
{
    json_t *args = json_array(), *pl = json_array();
    for (int i = 1; args && i < J->argc; i++)
        if (json_array_append_new(args, json_string(J->argv[i])) < 0) {
            json_decref(args);
            args = NULL;
        }
    for (uint32_t i = 0; pl && i < J->nplugins; i++) {
        char hex[WEIR__SHA256_HEX_SIZE];
        if (json_array_append_new(pl, json_pack("{s:s, s:I}", "sha256",
                                                weir__sha256_hex(J->plugins[i].sha256, hex), "size",
                                                (json_int_t)J->plugins[i].size)) < 0) {
            json_decref(pl);
            pl = NULL;
        }
    }
    if (!args || !pl) {
        json_decref(args);
        json_decref(pl);
        return NULL;
    }
    return json_pack(
        "{s:I, s:s, s:I, s:s?, s:I, s:i, s:b, s:I, s:s?, s:o, s:o, s:I}", "id", (json_int_t)J->id,
        "name", J->name, "parallelism", (json_int_t)J->par, "checkpoint_dir", J->checkpoint_dir,
        "checkpoint_interval_ms", (json_int_t)J->interval_ms, "max_restarts", J->max_restarts,
        "restore", J->restore, "idle_timeout_ms", (json_int_t)J->idle_ms, "state_backend",
        J->state_backend, "args", args, "plugins", pl, "submitted_ms", (json_int_t)J->submitted_ms);
}

typedef struct hjob {
    coord *c;
    cjob *J;
    json_t *obj;
    uint64_t id;
    char msg[1024];
} hjob;

static intptr_t b_job_put(void *arg)
{
    hjob *h = arg;
    cjob *J = h->J;
    for (uint32_t i = 0; i < J->nplugins; i++) {
        int e = weir__ha_plugin_put(h->c->ha, J->plugins[i].sha256, J->plugins[i].bytes.p,
                                    J->plugins[i].bytes.n, h->msg, sizeof(h->msg));
        if (e < 0)
            return e;
    }
    return weir__ha_job_put(h->c->ha, J->id, h->obj, h->msg, sizeof(h->msg));
}

static intptr_t b_job_reput(void *arg)
{
    hjob *h = arg;
    return weir__ha_job_put(h->c->ha, h->id, h->obj, h->msg, sizeof(h->msg));
}

static intptr_t b_job_remove(void *arg)
{
    hjob *h = arg;
    return weir__ha_job_remove(h->c->ha, h->id, h->msg, sizeof(h->msg));
}

static intptr_t b_job_end(void *arg)
{
    hjob *h = arg;
    return weir__ha_job_end(h->c->ha, h->id, h->obj, h->msg, sizeof(h->msg));
}

/* Before J is published: its id taken and its record written, so that a
 * job is never accepted that the next leader would not know. 0, or a
 * negative errno with why. */
static int job_persist(coord *c, cjob *J, char *why, size_t cap)
{
    pthread_mutex_lock(&c->mu);
    J->id = ++c->next_job;
    pthread_mutex_unlock(&c->mu);
    J->submitted_ms = (uint64_t)weir__wall_ms();
    hjob h = {.c = c, .J = J, .obj = job_record(J)};
    int e = h.obj ? (int)weir__blocking_run_shielded(b_job_put, &h) : -ENOMEM;
    json_decref(h.obj);
    if (e < 0)
        snprintf(why, cap, "the job could not be kept for high availability: %s",
                 e == -ENOMEM && !h.msg[0] ? "out of memory" : h.msg);
    return e;
}

/* Job id ended (state, message): its record goes to the history. A
 * failure is logged: the next leader would run it again. */
static void job_forget(coord *c, uint64_t id, const char *name, uint32_t par, uint64_t submitted_ms,
                       const char *state, const char *message)
{
    hjob h = {.c = c, .id = id};
    h.obj = json_pack("{s:I, s:s, s:I, s:I, s:s, s:s, s:I}", "id", (json_int_t)id, "name", name,
                      "parallelism", (json_int_t)par, "submitted_ms", (json_int_t)submitted_ms,
                      "state", state, "message", message, "ended_ms", (json_int_t)weir__wall_ms());
    int e = h.obj ? (int)weir__blocking_run_shielded(b_job_end, &h) : -ENOMEM;
    json_decref(h.obj);
    if (e < 0)
        weir__log(WEIR__LOG_ERROR, LOG,
                  "job %" PRIu64 ": its end could not be recorded in the HA directory (%s): "
                  "the next leader will run it again",
                  id, h.msg[0] ? h.msg : weir_strerror(e));
}

void weir__coord_job_ended(cjob *J)
{
    coord *c = J->c;
    pthread_mutex_lock(&c->mu);
    /* A job cancelled because this coordinator stops is the next leader's
     * to run on. */
    int keep = !c->ha || weir__coord_handed_on_locked(J);
    const char *state = weir__cl_job_state_name(J->state);
    char message[WEIR_CLUSTER_MESSAGE_MAX];
    snprintf(message, sizeof(message), "%s", J->message);
    pthread_mutex_unlock(&c->mu);
    if (!keep)
        job_forget(c, J->id, J->name, J->par, J->submitted_ms, state, message);
}

static int hex_byte(const char *p)
{
    int v = 0;
    for (int i = 0; i < 2; i++) {
        char ch = p[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

typedef struct recovered {
    weir__cl_submit_job s;
    char **args;
    weir__cl_plugin_ref *refs;
} recovered;

static void recovered_free(recovered *r)
{
    weir__free(r->args);
    weir__free(r->refs);
}

/* A job record back into the submission it was (views into o). 0, or
 * -EBADMSG with why naming the field. */
static int job_unrecord(json_t *o, recovered *r, char *why, size_t cap)
{
    memset(r, 0, sizeof(*r));
    json_t *args = json_object_get(o, "args"), *pl = json_object_get(o, "plugins");
    json_t *cd = json_object_get(o, "checkpoint_dir"), *sb = json_object_get(o, "state_backend");
    json_int_t par = json_integer_value(json_object_get(o, "parallelism"));
    static const char *const nonneg[] = {"checkpoint_interval_ms", "idle_timeout_ms",
                                         "submitted_ms"};
    for (size_t i = 0; i < sizeof(nonneg) / sizeof(nonneg[0]); i++) {
        json_t *v = json_object_get(o, nonneg[i]);
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            snprintf(why, cap, "its record's %s is not a non-negative integer", nonneg[i]);
            return -EBADMSG;
        }
    }
    json_t *mr = json_object_get(o, "max_restarts");
    if (!json_is_integer(mr) || json_integer_value(mr) < -1 || json_integer_value(mr) > 1000000) {
        snprintf(why, cap, "its record's max_restarts is not -1 or a count");
        return -EBADMSG;
    }
    if (!json_is_array(args) || !json_is_array(pl) || json_array_size(pl) == 0 ||
        json_array_size(pl) > WEIR_CLUSTER_PLUGINS_MAX ||
        json_array_size(args) > WEIR_CLUSTER_ARGS_MAX || par < 0 || par > 65536 ||
        (!json_is_null(cd) && !json_is_string(cd)) || (!json_is_null(sb) && !json_is_string(sb))) {
        snprintf(why, cap,
                 "its record's args, plugins, parallelism, checkpoint_dir or "
                 "state_backend is not what a submission has");
        return -EBADMSG;
    }
    size_t na = json_array_size(args), np = json_array_size(pl);
    r->args = weir__calloc(na ? na : 1, sizeof(char *));
    r->refs = weir__calloc(np, sizeof(*r->refs));
    if (!r->args || !r->refs) {
        snprintf(why, cap, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < na; i++) {
        if (!json_is_string(json_array_get(args, i))) {
            snprintf(why, cap, "its record's args[%zu] is not a string", i);
            return -EBADMSG;
        }
        r->args[i] = (char *)json_string_value(json_array_get(args, i));
    }
    for (size_t i = 0; i < np; i++) {
        json_t *p = json_array_get(pl, i), *h = json_object_get(p, "sha256");
        json_int_t size = json_integer_value(json_object_get(p, "size"));
        const char *hex = json_string_value(h);
        if (!hex || strlen(hex) != 2 * WEIR_CLUSTER_SHA256_SIZE || size <= 0 ||
            (uint64_t)size > WEIR_CLUSTER_PLUGIN_SIZE_MAX) {
            snprintf(why, cap, "its record's plugins[%zu] has no sha256 or size", i);
            return -EBADMSG;
        }
        for (int k = 0; k < (int)WEIR_CLUSTER_SHA256_SIZE; k++) {
            int b = hex_byte(hex + 2 * k);
            if (b < 0) {
                snprintf(why, cap, "its record's plugins[%zu].sha256 is not hex", i);
                return -EBADMSG;
            }
            r->refs[i].sha256[k] = (uint8_t)b;
        }
        r->refs[i].size = (uint64_t)size;
    }
    r->s = (weir__cl_submit_job){
        .parallelism = (uint32_t)par,
        .checkpoint_dir = (char *)(json_is_string(cd) ? json_string_value(cd) : ""),
        .checkpoint_interval_ms =
            (uint64_t)json_integer_value(json_object_get(o, "checkpoint_interval_ms")),
        .max_restarts = (int32_t)json_integer_value(json_object_get(o, "max_restarts")),
        .restore = json_is_true(json_object_get(o, "restore")),
        .idle_timeout_ms = (uint64_t)json_integer_value(json_object_get(o, "idle_timeout_ms")),
        .state_backend = (char *)(json_is_string(sb) ? json_string_value(sb) : "")};
    r->s.args.v = r->args;
    r->s.args.n = (uint32_t)na;
    r->s.plugins.v = r->refs;
    r->s.plugins.n = (uint32_t)np;
    return 0;
}

typedef struct hplug {
    coord *c;
    const weir__cl_plugin_ref *ref;
    char msg[1024];
} hplug;

/* A recovered job's plugin from the HA directory into the cache. */
static intptr_t b_plugin_back(void *arg)
{
    hplug *h = arg;
    uint8_t *bytes;
    int e = weir__ha_plugin_read(h->c->ha, h->ref->sha256, h->ref->size, &bytes, h->msg,
                                 sizeof(h->msg));
    if (e < 0)
        return e;
    e = weir__plugin_cache_put(h->c->cache, bytes, h->ref->size, h->ref->sha256, h->msg,
                               sizeof(h->msg));
    weir__free(bytes);
    return e;
}

typedef struct hload {
    coord *c;
    int which; /* WEIR__HA_JOBS, WEIR__HA_HISTORY */
    uint64_t *ids;
    size_t n;
    uint64_t id;
    json_t *obj;
    char msg[1024];
} hload;

static intptr_t b_jobs_list(void *arg)
{
    hload *h = arg;
    return weir__ha_jobs(h->c->ha, h->which, &h->ids, &h->n, h->msg, sizeof(h->msg));
}

static intptr_t b_job_load(void *arg)
{
    hload *h = arg;
    h->obj = weir__ha_job_load(h->c->ha, h->which, h->id, h->msg, sizeof(h->msg));
    return h->obj ? 0 : -EBADMSG;
}

static uint8_t state_of(const char *name)
{
    static const uint8_t v[] = {WEIR__CL_JOB_SUCCEEDED, WEIR__CL_JOB_FAILED,
                                WEIR__CL_JOB_CANCELLED};
    for (size_t i = 0; i < sizeof(v); i++)
        if (name && strcmp(name, weir__cl_job_state_name(v[i])) == 0)
            return v[i];
    return WEIR__CL_JOB_FAILED;
}

/* Room for one more job in c->jobs (mu held): the oldest ended job
 * forgotten once MAX_JOBS_KEPT are kept, else the array grown. 0, or
 * -ENOMEM. */
static int jobs_room_locked(coord *c)
{
    if (c->njobs < c->jobcap)
        return 0;
    size_t drop = c->njobs;
    if (c->njobs >= MAX_JOBS_KEPT)
        for (size_t i = 0; i < c->njobs && drop == c->njobs; i++)
            if (c->jobs[i]->gone)
                drop = i;
    if (drop < c->njobs) {
        weir__coord_job_free(c->jobs[drop]);
        memmove(&c->jobs[drop], &c->jobs[drop + 1], (c->njobs - drop - 1) * sizeof(cjob *));
        c->njobs--;
        return 0;
    }
    size_t cap = c->jobcap ? c->jobcap * 2 : 16;
    cjob **v = weir__realloc(c->jobs, cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    c->jobs = v;
    c->jobcap = cap;
    return 0;
}

/* An ended job, only to be listed (ListJobs, the HTTP API). */
static void job_add_ended(coord *c, uint64_t id, const char *name, uint32_t par,
                          uint64_t submitted_ms, uint64_t ended_ms, uint8_t state,
                          const char *message)
{
    cjob *J = weir__calloc(1, sizeof(*J));
    if (!J)
        return; /* only the listing loses it */
    J->c = c;
    J->id = id;
    snprintf(J->name, sizeof(J->name), "%s", name ? name : "?");
    snprintf(J->message, sizeof(J->message), "%s", message ? message : "");
    J->state = state;
    J->par = par;
    J->submitted_ms = submitted_ms;
    J->ended_ms = ended_ms;
    J->ended = J->gone = 1;
    pthread_mutex_lock(&c->mu);
    if (jobs_room_locked(c) == 0) {
        c->jobs[c->njobs++] = J;
        J = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    if (J)
        weir__coord_job_free(J);
}

/* The ended jobs of the history (the newest MAX_JOBS_KEPT / 2), so that
 * ListJobs and the HTTP API show them on the new leader too. */
static void history_reload(coord *c)
{
    /* The history as it was before the port opened (ha_reserve_ids): a job
     * of this leader that ended since is listed already. */
    size_t n = c->nhistory;
    size_t first = n > MAX_JOBS_KEPT / 2 ? n - MAX_JOBS_KEPT / 2 : 0;
    for (size_t i = first; i < n; i++) {
        hload l = {.c = c, .which = WEIR__HA_HISTORY, .id = c->history_ids[i]};
        if (weir__blocking_run_shielded(b_job_load, &l) < 0) {
            weir__log(WEIR__LOG_WARN, LOG, "history of job %" PRIu64 " skipped: %s", l.id, l.msg);
            continue;
        }
        job_add_ended(c, l.id, json_string_value(json_object_get(l.obj, "name")),
                      (uint32_t)json_integer_value(json_object_get(l.obj, "parallelism")),
                      (uint64_t)json_integer_value(json_object_get(l.obj, "submitted_ms")),
                      (uint64_t)json_integer_value(json_object_get(l.obj, "ended_ms")),
                      state_of(json_string_value(json_object_get(l.obj, "state"))),
                      json_string_value(json_object_get(l.obj, "message")));
        json_decref(l.obj);
    }
}

/* Run job id of the HA directory again: 1 recovered, 0 it could not be
 * (logged, counted, moved to the history as needing a resubmit). */
static int recover_one(coord *c, uint64_t id)
{
    hload h = {.c = c, .which = WEIR__HA_JOBS, .id = id};
    char why[WEIR_CLUSTER_MESSAGE_MAX] = "";
    const char *name = "?";
    recovered r = {0};
    cjob *J = NULL;
    /* Its end recorded but its record not removed (the old leader died
     * between the two): it ended, it is not run again. */
    hload hist = {.c = c, .which = WEIR__HA_HISTORY, .id = id};
    if (weir__blocking_run_shielded(b_job_load, &hist) == 0) {
        json_decref(hist.obj);
        hjob rm = {.c = c, .id = id};
        if (weir__blocking_run_shielded(b_job_remove, &rm) < 0)
            weir__log(WEIR__LOG_WARN, LOG, "job %" PRIu64 " ended: its record: %s", id, rm.msg);
        return 0;
    }
    int e = (int)weir__blocking_run_shielded(b_job_load, &h);
    if (e < 0)
        snprintf(why, sizeof(why), "%s", h.msg);
    else if (json_integer_value(json_object_get(h.obj, "id")) != (json_int_t)id) {
        snprintf(why, sizeof(why), "its record's id is not %" PRIu64, id);
        e = -EBADMSG;
    } else if (json_is_string(json_object_get(h.obj, "name")))
        name = json_string_value(json_object_get(h.obj, "name"));
    if (!e)
        e = job_unrecord(h.obj, &r, why, sizeof(why));
    if (!e && (!r.s.checkpoint_dir[0] || !r.s.checkpoint_interval_ms)) {
        snprintf(why, sizeof(why),
                 "it takes no checkpoints, so it cannot go on from where the lost leader left it");
        e = -ENOENT;
    }
    for (uint32_t i = 0; !e && i < r.s.plugins.n; i++) {
        hplug hp = {.c = c, .ref = &r.s.plugins.v[i]};
        if ((e = (int)weir__blocking_run_shielded(b_plugin_back, &hp)) < 0)
            snprintf(why, sizeof(why), "its plugin: %s", hp.msg);
    }
    /* The restore point and the first id this leader numbers, recorded
     * before any frame leaves: above every checkpoint on record (one the
     * lost leader began and never completed included) and above the ids an
     * earlier takeover recorded. */
    uint64_t done = 0, floor = 0;
    if (!e && (e = weir__ckpt_scan(r.s.checkpoint_dir, &done, &floor, why, sizeof(why))) == 0) {
        json_int_t before = json_integer_value(json_object_get(h.obj, "checkpoint_floor"));
        if (before > 0 && (uint64_t)before > floor)
            floor = (uint64_t)before;
        if (floor >= (uint64_t)INT64_MAX / 2) {
            snprintf(why, sizeof(why), "its checkpoint ids are exhausted (%" PRIu64 ")", floor);
            e = -ERANGE;
        } else if (json_object_set_new(h.obj, "restore_checkpoint",
                                       json_integer((json_int_t)done)) < 0 ||
                   json_object_set_new(h.obj, "checkpoint_floor", json_integer((json_int_t)floor)) <
                       0) {
            snprintf(why, sizeof(why), "the coordinator is out of memory");
            e = -ENOMEM;
        }
    }
    if (!e) {
        /* The record is this leader's now: a superseded one can no
         * longer remove it. */
        hjob put = {.c = c, .id = id, .obj = h.obj};
        if ((e = (int)weir__blocking_run_shielded(b_job_reput, &put)) < 0)
            snprintf(why, sizeof(why), "%s", put.msg);
    }
    if (!e)
        e = job_build(c, &r.s, 1, &J, why, sizeof(why));
    if (!e) {
        /* Its first attempt here is a restart: the latest completed
         * checkpoint is restored, new ones are numbered above every id the
         * directory holds, and it waits for room while workers register. */
        J->id = id;
        J->attempt = 1;
        J->restore_id = done;
        J->id_floor = floor;
        J->recovered = 1;
        J->submitted_ms = (uint64_t)json_integer_value(json_object_get(h.obj, "submitted_ms"));
        uint64_t got;
        const char *refused = job_publish(c, J, NULL, &got);
        if (refused) {
            snprintf(why, sizeof(why), "%s", refused);
            e = -EAGAIN;
        }
    }
    if (!e) {
        weir_counter_inc(c->m.recovered);
        weir__log(WEIR__LOG_INFO, LOG,
                  "job %" PRIu64 " (%s) recovered: it restarts from checkpoint %" PRIu64
                  ", numbering new ones from %" PRIu64,
                  id, name, done, floor + 1);
    } else {
        weir_counter_inc(c->m.recovery_failed);
        weir__log(WEIR__LOG_ERROR, LOG,
                  "job %" PRIu64 " (%s) was not recovered: %s; it is not running and must be "
                  "submitted again",
                  id, name, why);
        char message[WEIR_CLUSTER_MESSAGE_MAX];
        snprintf(message, sizeof(message), "not recovered by the new leader: %s", why);
        pthread_mutex_lock(&c->mu);
        int stopping = c->stopping; /* then the next leader is to try */
        pthread_mutex_unlock(&c->mu);
        uint64_t submitted = (uint64_t)json_integer_value(json_object_get(h.obj, "submitted_ms"));
        if (!stopping) {
            job_forget(c, id, name, r.s.parallelism, submitted, "failed", message);
            job_add_ended(c, id, name, r.s.parallelism, submitted, (uint64_t)weir__wall_ms(),
                          WEIR__CL_JOB_FAILED, message);
        }
    }
    recovered_free(&r);
    json_decref(h.obj);
    return e == 0;
}

/* Before a new leader opens its port: job ids continue above every id
 * the directory knows (running and ended), so a submit that comes while
 * the takeover waits for workers never takes a kept job's id. 0 or a
 * negative errno with msg. */
static int ha_reserve_ids(coord *c, char *msg, size_t cap)
{
    for (int which = WEIR__HA_JOBS; which <= WEIR__HA_HISTORY; which++) {
        hload h = {.c = c, .which = which};
        int e = (int)weir__blocking_run_shielded(b_jobs_list, &h);
        if (e < 0) {
            snprintf(msg, cap, "%s", h.msg);
            return e;
        }
        pthread_mutex_lock(&c->mu);
        if (h.n && h.ids[h.n - 1] > c->next_job)
            c->next_job = h.ids[h.n - 1];
        pthread_mutex_unlock(&c->mu);
        if (which == WEIR__HA_JOBS) { /* what the takeover recovers: no job submitted here */
            c->recover_ids = h.ids;
            c->nrecover = h.n;
        } else { /* what it lists as ended: none of its own */
            c->history_ids = h.ids;
            c->nhistory = h.n;
        }
    }
    return 0;
}

/* A new leader's takeover of the jobs its predecessor ran: once worker
 * registrations have settled (the registered set unchanged for 1 s, at
 * most 5 s: workers come back within moments of a leader, not at once, and
 * jobs placed on the first to come would stay there), each job record of
 * the HA directory is run again. */
static intptr_t recover_main(void *arg)
{
    coord *c = arg;
    int64_t start = weir_time_now(), changed = start;
    int last = -1;
    while (weir_time_now() - changed < 1000 * WEIR_MSEC &&
           weir_time_now() - start < 5000 * WEIR_MSEC) {
        int n = weir__coord_workers(c);
        if (n != last) {
            last = n;
            changed = weir_time_now();
        }
        if (weir_time_sleep(50 * WEIR_MSEC) < 0)
            return 0;
    }
    history_reload(c);
    /* The jobs listed before the port opened: a job submitted to this
     * leader since has its own record there, and is not recovered. */
    size_t ok = 0, n = c->nrecover;
    for (size_t i = 0; i < n; i++)
        ok += (size_t)recover_one(c, c->recover_ids[i]);
    if (n)
        weir__log(WEIR__LOG_INFO, LOG, "took over %zu of %zu jobs with %d workers registered", ok,
                  n, weir__coord_workers(c));
    return 0;
}

/* A job record from a submission whose plugins are all in the cache:
 * its plugins opened, its define, plan and placement tried once (a job
 * that cannot run is refused before it is published; the attempt does it
 * again). 0 with *out, or a negative errno with why. */
static int job_build(coord *c, const weir__cl_submit_job *s, int recovering, cjob **out, char *why,
                     size_t cap)
{
    *out = NULL;
    cjob *J = weir__calloc(1, sizeof(*J));
    if (!J) {
        snprintf(why, cap, "the coordinator is out of memory");
        return -ENOMEM;
    }
    J->c = c;
    J->par = s->parallelism;
    J->interval_ms = s->checkpoint_interval_ms;
    J->max_restarts = s->max_restarts;
    J->restore = s->restore;
    J->idle_ms = s->idle_timeout_ms;
    J->nplugins = s->plugins.n;
    J->plugins = weir__calloc(s->plugins.n, sizeof(*J->plugins));
    J->argc = (int)s->args.n + 1;
    J->argv = weir__calloc((size_t)J->argc + 1, sizeof(char *));
    J->events = weir_chan_new(sizeof(ev), WEIR_CHAN_UNBOUNDED);
    J->acks = weir_chan_new(sizeof(weir__ckpt_msg), WEIR_CHAN_UNBOUNDED);
    if (s->checkpoint_dir[0])
        J->checkpoint_dir = weir__strdup(s->checkpoint_dir);
    if (s->state_backend[0])
        J->state_backend = weir__strdup(s->state_backend);
    int e = J->plugins && J->argv && J->events && J->acks &&
                    (!s->checkpoint_dir[0] || J->checkpoint_dir) &&
                    (!s->state_backend[0] || J->state_backend)
                ? 0
                : -ENOMEM;
    for (uint32_t i = 0; !e && i < s->args.n; i++)
        if (!(J->argv[i + 1] = weir__strdup(s->args.v[i])))
            e = -ENOMEM;
    snprintf(why, cap, "the coordinator is out of memory");
    for (uint32_t i = 0; !e && i < s->plugins.n; i++) {
        bjob ob = {.c = c,
                   .sha = s->plugins.v[i].sha256,
                   .len = s->plugins.v[i].size,
                   .plugin = i == 0 ? (weir_plugin *)1 : NULL};
        e = (int)weir__blocking_run_shielded(b_open, &ob);
        snprintf(why, cap, "%s", ob.msg[0] ? ob.msg : weir_strerror(e));
        memcpy(J->plugins[i].sha256, s->plugins.v[i].sha256, 32);
        J->plugins[i].size = s->plugins.v[i].size;
        J->plugins[i].bytes = (weir__cl_bytes){ob.data, (uint32_t)ob.len};
        if (i == 0) {
            J->plugin = ob.plugin;
            J->argv[0] = ob.path;
        } else {
            weir__free(ob.path);
        }
    }
    if (!e) {
        snprintf(J->name, sizeof(J->name), "%s", weir_plugin_entry(J->plugin)->name);
        e = weir__coord_job_check(J, why, cap);
        if (e == -ENOSPC && recovering)
            e = 0; /* its attempt waits for the workers to come back */
    }
    if (e < 0) {
        weir__coord_job_free(J);
        return e;
    }
    *out = J;
    return 0;
}

/* Publish J and start its fiber, its end reported to cl (NULL: nobody).
 * J->id 0: the next id; else the id it keeps (a recovered job). NULL
 * (*id says which) or why it was not (J freed). */
static const char *job_publish(coord *c, cjob *J, client *cl, uint64_t *id)
{
    pthread_mutex_lock(&c->mu);
    if (c->stopping) {
        pthread_mutex_unlock(&c->mu);
        weir__coord_job_free(J);
        return "the coordinator is shutting down";
    }
    if (jobs_room_locked(c) < 0) {
        pthread_mutex_unlock(&c->mu);
        weir__coord_job_free(J);
        return "the coordinator is out of memory";
    }
    if (!J->id)
        J->id = ++c->next_job;
    else if (J->id > c->next_job)
        c->next_job = J->id;
    J->state = WEIR__CL_JOB_RUNNING;
    J->submitted_ms = J->submitted_ms ? J->submitted_ms : (uint64_t)weir__wall_ms();
    J->t0 = weir_time_now();
    if (cl)
        atomic_fetch_add(&cl->refs, 1);
    J->submitter = cl;
    c->jobs[c->njobs++] = J;
    weir_task *t = weir_scope_spawn(c->scope, weir__coord_job_main, J,
                                    &(weir_spawn_opts){.name = "cluster job", .stack_size = FIBER});
    if (t)
        weir_counter_inc(c->m.submitted);
    if (!t) {
        J->ended = J->gone = 1;
        J->state = WEIR__CL_JOB_FAILED;
        snprintf(J->message, sizeof(J->message), "could not start the job's fiber");
        J->submitter = NULL;
        if (cl)
            atomic_fetch_sub(&cl->refs, 1);
    }
    /* J is the job fiber's now (it may end, and be forgotten, at once). */
    *id = J->id;
    pthread_mutex_unlock(&c->mu);
    return t ? NULL : "could not start the job";
}

/* SubmitJob, with the upload of the plugins the cache lacks. Returns < 0
 * when the connection must be dropped (the client broke the protocol). */
static int handle_submit(client *cl, weir_frame_parser *fp, weir__cl_submit_job *s)
{
    coord *c = cl->c;
    for (uint32_t i = 0; i < s->plugins.n; i++) {
        char msg[1024];
        if (weir__plugin_ref_abi_check(&s->plugins.v[i], NULL, msg, sizeof(msg)) < 0)
            return submit_refuse(cl, "%s", msg) * 0;
    }
    bjob b = {.c = c, .refs = s->plugins.v, .n = s->plugins.n};
    int e = (int)weir__blocking_run_shielded(b_missing, &b);
    if (e < 0)
        return submit_refuse(cl, "%s", b.msg) * 0;
    if (b.nmissing) {
        weir__cl_msg m = {.kind = WEIR_CLUSTER_SUBMIT_JOB_ACK};
        m.u.submit_ack.status = WEIR__CL_SUBMIT_NEED_PLUGINS;
        m.u.submit_ack.message = "";
        m.u.submit_ack.missing.v = b.missing;
        m.u.submit_ack.missing.n = (uint32_t)b.nmissing;
        e = client_reply(cl, &m);
        size_t got = 0;
        uint8_t *have = weir__calloc(b.nmissing, 1);
        while (!e && have && got < b.nmissing) {
            weir__cl_msg u;
            weir_frame f;
            char why[256];
            e = weir__cl_recv(&cl->link, fp, &u, &f, weir_time_after_ms(60000), why, sizeof(why));
            if (e <= 0) {
                e = e ? e : -ECONNRESET;
                break;
            }
            e = 0;
            size_t k = 0;
            while (u.kind == WEIR_CLUSTER_PLUGIN_UPLOAD && k < b.nmissing &&
                   memcmp(b.missing[k].b, u.u.upload.sha256, 32) != 0)
                k++;
            if (u.kind != WEIR_CLUSTER_PLUGIN_UPLOAD || k == b.nmissing || have[k]) {
                weir__log(WEIR__LOG_WARN, LOG,
                          "client: expected a PluginUpload of a missing "
                          "plugin, got a %s",
                          weir__cl_kind_name(u.kind));
                e = -EPROTO;
            } else {
                bjob pb = {.c = c,
                           .bytes = u.u.upload.bytes.p,
                           .len = u.u.upload.bytes.n,
                           .sha = u.u.upload.sha256};
                e = (int)weir__blocking_run_shielded(b_put, &pb);
                if (e < 0) {
                    submit_refuse(cl, "%s", pb.msg);
                    e = 1;
                }
                have[k] = 1;
                got++;
            }
            weir__cl_msg_free(&u);
            weir_frame_free(&f);
        }
        weir__free(have);
        weir__free(b.missing);
        if (e)
            return e < 0 ? e : 0;
    }
    cjob *J;
    char why[WEIR_CLUSTER_MESSAGE_MAX];
    if (job_build(c, s, 0, &J, why, sizeof(why)) < 0)
        return submit_refuse(cl, "%s", why) * 0;
    if (c->ha && job_persist(c, J, why, sizeof(why)) < 0) {
        weir__coord_job_free(J);
        return submit_refuse(cl, "%s", why) * 0;
    }
    /* The client's write lock is held from before the job is published
     * until its SubmitJobAck is written: the job's fiber, which may end at
     * once (its directories are another run's), writes its JobCompleted
     * under the same lock, so the client always reads the ack first. */
    if (weir_mutex_lock(cl->wl, WEIR_FOREVER) < 0) { /* cancelled: the coordinator stops */
        if (J->id) /* never acknowledged: the next leader must not run it */
            job_forget(c, J->id, J->name, J->par, J->submitted_ms, "failed",
                       "the coordinator stopped before it was accepted");
        weir__coord_job_free(J);
        return -ECANCELED;
    }
    uint64_t id = 0, kept = J->id;
    char name[sizeof(J->name)];
    snprintf(name, sizeof(name), "%s", J->name);
    const char *refused = job_publish(c, J, cl, &id);
    if (refused) {
        if (kept) /* its record must not make the next leader run it */
            job_forget(c, kept, name, s->parallelism, 0, "failed", refused);
        refuse_locked(cl, "%s", refused);
        weir_mutex_unlock(cl->wl);
        return 0;
    }
    weir__log(WEIR__LOG_INFO, LOG, "job %" PRIu64 " submitted", id);
    weir__cl_msg m = {.kind = WEIR_CLUSTER_SUBMIT_JOB_ACK};
    m.u.submit_ack.status = WEIR__CL_SUBMIT_ACCEPTED;
    m.u.submit_ack.job = id;
    m.u.submit_ack.message = "";
    client_write_locked(cl, &m);
    weir_mutex_unlock(cl->wl);
    return 0;
}

int weir__coord_submit_upload(coord *c, const uint8_t *bytes, size_t n, weir__cl_submit_job *s,
                              uint64_t *id, char *why, size_t cap)
{
    *id = 0;
    weir__cl_plugin_ref ref;
    int e = weir__plugin_ref_from_bytes(bytes, n, "the uploaded plugin", &ref, why, cap);
    if (e < 0)
        return e;
    if ((e = weir__plugin_ref_abi_check(&ref, NULL, why, cap)) < 0) {
        weir__plugin_ref_clear(&ref);
        return -ENOEXEC;
    }
    bjob pb = {.c = c, .bytes = bytes, .len = n, .sha = ref.sha256};
    if ((e = (int)weir__blocking_run_shielded(b_put, &pb)) < 0) {
        snprintf(why, cap, "%s", pb.msg);
        weir__plugin_ref_clear(&ref);
        return e;
    }
    s->plugins.v = &ref;
    s->plugins.n = 1;
    cjob *J;
    e = job_build(c, s, 0, &J, why, cap);
    s->plugins.v = NULL;
    s->plugins.n = 0;
    weir__plugin_ref_clear(&ref);
    if (e < 0)
        return e;
    if (c->ha && (e = job_persist(c, J, why, cap)) < 0) {
        weir__coord_job_free(J);
        return e;
    }
    uint64_t kept = J->id;
    char name[sizeof(J->name)];
    snprintf(name, sizeof(name), "%s", J->name);
    const char *refused = job_publish(c, J, NULL, id);
    if (refused) {
        if (kept) /* its record must not make the next leader run it */
            job_forget(c, kept, name, s->parallelism, 0, "failed", refused);
        snprintf(why, cap, "%s", refused);
        return -EAGAIN;
    }
    weir__log(WEIR__LOG_INFO, LOG, "job %" PRIu64 " submitted over HTTP", *id);
    return 0;
}

static void handle_list(client *cl)
{
    coord *c = cl->c;
    pthread_mutex_lock(&c->mu);
    size_t n = c->njobs;
    weir__cl_job_info *v = weir__calloc(n ? n : 1, sizeof(*v));
    char(*names)[WEIR_CLUSTER_NAME_MAX + 1] = weir__calloc(n ? n : 1, sizeof(*names));
    char(*msgs)[WEIR_CLUSTER_MESSAGE_MAX] = weir__calloc(n ? n : 1, sizeof(*msgs));
    for (size_t i = 0; v && names && msgs && i < n; i++) {
        cjob *J = c->jobs[i];
        memcpy(names[i], J->name, sizeof(names[i]));
        memcpy(msgs[i], J->message, sizeof(msgs[i]));
        v[i] = (weir__cl_job_info){J->id,           names[i],    J->state, J->par,
                                   J->submitted_ms, J->ended_ms, msgs[i]};
    }
    pthread_mutex_unlock(&c->mu);
    weir__cl_msg m = {.kind = WEIR_CLUSTER_JOB_LIST};
    m.u.job_list.jobs.v = v;
    m.u.job_list.jobs.n = v && names && msgs ? (uint32_t)n : 0;
    client_reply(cl, &m);
    weir__free(v);
    weir__free(names);
    weir__free(msgs);
}

int weir__coord_cancel(coord *c, uint64_t id, const char *reason)
{
    pthread_mutex_lock(&c->mu);
    cjob *J = weir__coord_job_find_locked(c, id);
    int st = !J ? WEIR__CL_CANCEL_UNKNOWN : J->ended ? WEIR__CL_CANCEL_ENDED : WEIR__CL_CANCEL_OK;
    if (st == WEIR__CL_CANCEL_OK) {
        ev x = {.kind = EV_CANCEL, .message = weir__strdup(reason)};
        post_ev_locked(J, &x);
        J->user_cancel = 1; /* not the next leader's to run, even if this one stops now */
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

static void handle_cancel(client *cl, uint64_t id)
{
    weir__cl_msg m = {.kind = WEIR_CLUSTER_CANCEL_JOB_ACK};
    m.u.cancel_job_ack.job = id;
    m.u.cancel_job_ack.status = (uint8_t)weir__coord_cancel(cl->c, id, "cancelled by a client");
    m.u.cancel_job_ack.message =
        m.u.cancel_job_ack.status == WEIR__CL_CANCEL_UNKNOWN ? "no such job"
        : m.u.cancel_job_ack.status == WEIR__CL_CANCEL_ENDED ? "the job has already ended"
                                                             : "";
    client_reply(cl, &m);
}

static void handle_describe(client *cl, uint64_t id)
{
    coord *c = cl->c;
    weir__cl_msg m = {.kind = WEIR_CLUSTER_JOB_DETAIL};
    m.u.job_detail.job = id;
    pthread_mutex_lock(&c->mu);
    cjob *J = weir__coord_job_find_locked(c, id);
    json_t *o = J ? weir__coord_job_json_locked(J) : NULL;
    pthread_mutex_unlock(&c->mu);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    m.u.job_detail.status = J ? WEIR__CL_DETAIL_OK : WEIR__CL_DETAIL_UNKNOWN;
    static char none[] = "", oom[] = "{\"error\":\"out of memory\"}";
    m.u.job_detail.json = text && strlen(text) <= WEIR_CLUSTER_DETAIL_MAX ? text : J ? oom : none;
    client_reply(cl, &m);
    free(text);
}

/* The client's session until it ends. 1: l is the client's (closed with
 * its last reference), 0: no memory, l is still the caller's. */
static int client_loop(coord *c, const weir__cl_link *l, weir_frame_parser *fp)
{
    client *cl = weir__calloc(1, sizeof(*cl));
    if (!cl || !(cl->wl = weir_mutex_new())) {
        weir__free(cl);
        return 0;
    }
    cl->c = c;
    cl->link = *l;
    atomic_store(&cl->refs, 1);
    weir__cl_msg ack = {.kind = WEIR_CLUSTER_HELLO_CLIENT_ACK};
    ack.u.hello_ack = (weir__cl_hello_client_ack){
        WEIR_CLUSTER_PROTO_VERSION, WEIR_CLUSTER_PROTO_MIN_COMPAT, WEIR__CL_ACCEPTED, ""};
    int e = client_reply(cl, &ack);
    while (!e) {
        weir__cl_msg m;
        weir_frame f;
        char why[256];
        e = weir__cl_recv(l, fp, &m, &f, WEIR_FOREVER, why, sizeof(why));
        if (e <= 0) {
            if (e == -EBADMSG || e == -EMSGSIZE) {
                weir_counter_inc(c->m.malformed);
                weir__log(WEIR__LOG_WARN, LOG, "client dropped: malformed frame: %s", why);
            }
            break;
        }
        e = 0;
        switch (m.kind) {
        case WEIR_CLUSTER_SUBMIT_JOB:
            e = handle_submit(cl, fp, &m.u.submit);
            break;
        case WEIR_CLUSTER_LIST_JOBS:
            handle_list(cl);
            break;
        case WEIR_CLUSTER_CANCEL_JOB:
            handle_cancel(cl, m.u.cancel_job.job);
            break;
        case WEIR_CLUSTER_DESCRIBE_JOB:
            handle_describe(cl, m.u.describe_job.job);
            break;
        default:
            weir_counter_inc(c->m.malformed);
            weir__log(WEIR__LOG_WARN, LOG, "client dropped: protocol violation: a %s",
                      weir__cl_kind_name(m.kind));
            e = -EPROTO;
        }
        weir__cl_msg_free(&m);
        weir_frame_free(&f);
    }
    atomic_store(&cl->closed, 1);
    shutdown(l->fd, SHUT_RDWR);
    weir__coord_client_unref(cl); /* the fd closes with the last reference */
    return 1;
}

/* ---- admission ---------------------------------------------------------------------------- */
typedef struct admit_arg {
    coord *c;
    int fd;
    uint64_t seq; /* its admission (0: untracked, weir__coord_admit's) */
} admit_arg;

/* A line about an admission refused or evicted, at most 5 in full per
 * 10 s, then one summary (mu held). The counters are the exact record. */
static void adm_log_locked(coord *c, const char *what, const char *addr)
{
    int64_t now = weir_time_now();
    if (now - c->adm_log_window >= 10000 * WEIR_MSEC) {
        if (c->adm_quiet)
            weir__log(WEIR__LOG_WARN, LOG,
                      "%d more connections refused or evicted before their first frame in "
                      "10 s (the last from %s)",
                      c->adm_quiet, c->adm_quiet_addr);
        c->adm_log_window = now;
        c->adm_logged = c->adm_quiet = 0;
    }
    if (c->adm_logged < 5) {
        c->adm_logged++;
        weir__log(WEIR__LOG_WARN, LOG, "connection from %s %s (%zu admissions at once at most)",
                  addr, what, c->adm_cap);
    } else {
        c->adm_quiet++;
        snprintf(c->adm_quiet_addr, sizeof(c->adm_quiet_addr), "%s", addr);
    }
}

/* The index of admission seq, or nadm. */
static size_t adm_find_locked(coord *c, uint64_t seq)
{
    size_t i = 0;
    while (i < c->nadm && c->adm[i].seq != seq)
        i++;
    return i;
}

/* Take the newcomer fd from peer into the admissions: its seq, or 0 when
 * it is refused (fd closed). An eviction shuts the victim's socket down:
 * its fiber's read fails, and it lets go. */
static uint64_t adm_take(coord *c, int fd, const weir_net_addr *peer)
{
    uint64_t key = weir__adm_addr_key(&peer->ss);
    char addr[WEIR_NET_ADDRSTRLEN];
    pthread_mutex_lock(&c->mu);
    size_t victim = 0;
    int v = weir__adm_choose(c->adm, c->nadm, key, c->adm_cap, &victim);
    if (v == WEIR__ADM_EVICT) {
        c->adm[victim].interrupted = 1;
        shutdown(c->adm_fd[victim], SHUT_RDWR);
        weir_counter_inc(c->m.adm_evicted);
        weir_net_addr peer_v;
        if (weir_net_peer_addr(c->adm_fd[victim], &peer_v) < 0 ||
            weir_net_addr_format(&peer_v, addr, sizeof(addr)) < 0)
            snprintf(addr, sizeof(addr), "?");
        adm_log_locked(c, "evicted before its first frame by a newcomer", addr);
    }
    uint64_t seq = 0;
    if (v != WEIR__ADM_REFUSE && c->nadm < 3 * c->adm_cap) {
        seq = ++c->adm_seq;
        c->adm[c->nadm] = (weir__adm_entry){key, seq, WEIR__ADM_ACCEPTED, 0};
        c->adm_fd[c->nadm++] = fd;
    } else {
        weir_counter_inc(c->m.adm_refused);
        if (weir_net_addr_format(peer, addr, sizeof(addr)) < 0)
            snprintf(addr, sizeof(addr), "?");
        adm_log_locked(c, "refused: too many connections are being admitted", addr);
    }
    pthread_mutex_unlock(&c->mu);
    if (!seq)
        weir_io_close(fd);
    return seq;
}

/* Admission seq got as far as progress; 0, or -ECONNABORTED when it was
 * interrupted (evicted). */
static int adm_progress(coord *c, uint64_t seq, int progress)
{
    if (!seq)
        return 0;
    pthread_mutex_lock(&c->mu);
    size_t i = adm_find_locked(c, seq);
    int e = i == c->nadm || c->adm[i].interrupted ? -ECONNABORTED : 0;
    if (!e)
        c->adm[i].progress = progress;
    pthread_mutex_unlock(&c->mu);
    return e;
}

/* Admission seq is over (its first frame arrived, or it failed): 0, or
 * -ECONNABORTED when it had been interrupted. */
static int adm_done(coord *c, uint64_t seq)
{
    if (!seq)
        return 0;
    pthread_mutex_lock(&c->mu);
    size_t i = adm_find_locked(c, seq);
    int e = i == c->nadm || c->adm[i].interrupted ? -ECONNABORTED : 0;
    if (i < c->nadm) {
        c->nadm--;
        c->adm[i] = c->adm[c->nadm];
        c->adm_fd[i] = c->adm_fd[c->nadm];
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

static intptr_t admit_main(void *arg)
{
    admit_arg aa = *(admit_arg *)arg;
    weir__free(arg);
    coord *c = aa.c;
    int fd = aa.fd;
    weir_frame_parser fp;
    weir_frame_parser_init(&fp, &(weir_frame_limits){.max_frame = WEIR_CLUSTER_FRAME_MAX,
                                                     .max_first = WEIR_CLUSTER_FIRST_FRAME_MAX});
    weir_frame f = {0};
    /* The whole admission - the first frame's every byte - has one
     * deadline: a peer sending a byte at a time is bounded too. */
    int64_t deadline = weir_time_after_ms(ADMIT_HANDSHAKE_MS + c->hb_ms);
    weir__cl_link link = {.fd = fd};
    char tls_why[512] = "";
    ssize_t n = weir_io_poll(fd, POLLIN, deadline);
    if (n >= 0 && (n = adm_progress(c, aa.seq, WEIR__ADM_BEGUN)) == 0 && c->o.tls && aa.seq) {
        /* The handshake has its own deadline inside the admission's. */
        int64_t hs = weir_time_after_ms(ADMIT_HANDSHAKE_MS);
        n = weir_tls_accept(c->o.tls, fd, hs < deadline ? hs : deadline, &link.tls, tls_why,
                            sizeof(tls_why));
        if (n < 0 && n != -ECANCELED) {
            weir_counter_inc(c->m.tls_failures);
            weir_net_addr peer;
            char addr[WEIR_NET_ADDRSTRLEN] = "?";
            if (weir_net_peer_addr(fd, &peer) == 0)
                weir_net_addr_format(&peer, addr, sizeof(addr));
            weir__log(WEIR__LOG_WARN, LOG, "connection from %s rejected: TLS handshake: %s", addr,
                      tls_why);
            n = -ECONNABORTED; /* logged here */
        }
    }
    if (n == 0)
        n = link.tls ? weir_tls_frame_read(link.tls, &fp, &f, deadline)
                     : weir_frame_read(fd, &fp, &f, deadline);
    if (adm_done(c, aa.seq) < 0) /* evicted: its socket is shut down */
        n = n > 0 ? -ECONNABORTED : n;
    int owned = 0; /* the fd went to a client, which closes it */
    if (n > 0) {
        uint32_t ver = 0, min = 0;
        int kind = f.data[0];
        char why[512];
        int e = weir__cl_peek_versions(f.data, f.len, &ver, &min);
        if (e == 0 && kind != WEIR_CLUSTER_REGISTER && kind != WEIR_CLUSTER_HELLO_CLIENT)
            e = -EINVAL;
        if (e < 0) {
            weir_counter_inc(c->m.malformed);
            weir__log(WEIR__LOG_WARN, LOG, "connection dropped: its first frame is %s",
                      e == -EINVAL ? "neither a Register nor a HelloClient" : "cut short");
        } else if ((e = weir__cl_version_check("coordinator", WEIR_CLUSTER_PROTO_VERSION,
                                               WEIR_CLUSTER_PROTO_MIN_COMPAT,
                                               kind == WEIR_CLUSTER_REGISTER ? "worker" : "client",
                                               ver, min, why, sizeof(why))) < 0) {
            weir_counter_inc(c->m.refused_version);
            weir__log(WEIR__LOG_WARN, LOG, "connection refused: %s", why);
            weir__cl_msg r = {.kind = kind == WEIR_CLUSTER_REGISTER ? WEIR_CLUSTER_REGISTER_ACK
                                                                    : WEIR_CLUSTER_HELLO_CLIENT_ACK,
                              .epoch = kind == WEIR_CLUSTER_REGISTER ? c->epoch : 0};
            if (kind == WEIR_CLUSTER_REGISTER)
                r.u.reg_ack = (weir__cl_register_ack){
                    WEIR_CLUSTER_PROTO_VERSION, WEIR_CLUSTER_PROTO_MIN_COMPAT, WEIR__CL_REFUSED,
                    why, WEIR_CLUSTER_HEARTBEAT_MS};
            else
                r.u.hello_ack = (weir__cl_hello_client_ack){WEIR_CLUSTER_PROTO_VERSION,
                                                            WEIR_CLUSTER_PROTO_MIN_COMPAT,
                                                            WEIR__CL_REFUSED, why};
            weir__cl_send(&link, &r, weir_time_after_ms(250));
        } else {
            weir__cl_msg m;
            if ((e = weir__cl_decode(f.data, f.len, &m, why, sizeof(why))) < 0) {
                weir_counter_inc(c->m.malformed);
                weir__log(WEIR__LOG_WARN, LOG, "connection dropped: malformed first frame: %s",
                          why);
            } else if (kind == WEIR_CLUSTER_REGISTER) {
                owned = admit_worker(c, &link, &fp, &m.u.reg);
                weir__cl_msg_free(&m);
            } else {
                weir__cl_msg_free(&m);
                weir_frame_free(&f);
                owned = client_loop(c, &link, &fp);
            }
        }
    } else if (n < 0 && n != -ECANCELED && n != -ECONNABORTED) {
        weir_counter_inc(c->m.malformed);
        weir__log(WEIR__LOG_INFO, LOG, "connection dropped before its first frame: %s",
                  n == -EMSGSIZE ? "the frame's length is over the 64 KiB first-frame cap"
                                 : weir_net_strerror((int)n));
    }
    weir_frame_free(&f);
    weir_frame_parser_close(&fp);
    if (!owned) {
        weir__cl_link_close(&link);
    }
    return 0;
}

/* The accept loop only accepts: each connection's first frame is read by
 * an admission fiber of its own, under the admissions' cap. */
static intptr_t accept_main(void *arg)
{
    coord *c = arg;
    int64_t backoff = 10;
    long failed = 0; /* accepts failed in a row (out of descriptors, memory) */
    for (;;) {
        weir_net_addr peer = {0};
        int fd = weir_net_accept(c->lfd, &peer, WEIR_FOREVER);
        if (fd == -ECANCELED)
            return 0;
        if (fd < 0) {
            /* Out of descriptors or memory: the connection waits in the
             * backlog; try again later rather than spin. */
            weir_counter_inc(c->m.accept_failures);
            if (!failed++)
                weir__log(WEIR__LOG_WARN, LOG, "accepting a connection: %s (backing off)",
                          weir_net_strerror(fd));
            if (weir_time_sleep(backoff * WEIR_MSEC) < 0)
                return 0;
            backoff = backoff < 1000 ? backoff * 2 : 1000;
            continue;
        }
        if (failed)
            weir__log(WEIR__LOG_INFO, LOG, "accepting again after %ld failed accepts", failed);
        failed = 0;
        backoff = 10;
        weir_net_set_nodelay(fd, 1);
        uint64_t seq = adm_take(c, fd, &peer);
        if (!seq)
            continue; /* refused: closed */
        admit_arg *aa = weir__malloc(sizeof(*aa));
        if (aa)
            *aa = (admit_arg){c, fd, seq};
        if (!aa || !weir_scope_spawn(
                       c->scope, admit_main, aa,
                       &(weir_spawn_opts){.name = "cluster connection", .stack_size = FIBER})) {
            weir__free(aa);
            adm_done(c, seq);
            weir_io_close(fd);
        }
    }
}

int weir__coord_admit(weir__coord *c, int fd)
{
    admit_arg *aa = weir__malloc(sizeof(*aa));
    if (aa)
        *aa = (admit_arg){c, fd, 0};
    if (!aa ||
        !weir_scope_spawn(c->scope, admit_main, aa,
                          &(weir_spawn_opts){.name = "cluster connection", .stack_size = FIBER})) {
        weir__free(aa);
        close(fd); /* a socket: at once (callers may hold a lock; no wait here) */
        return -ENOMEM;
    }
    return 0;
}

int weir__coord_workers(weir__coord *c)
{
    int workers, jobs;
    pthread_mutex_lock(&c->mu);
    weir__coord_count_locked(c, &workers, &jobs);
    pthread_mutex_unlock(&c->mu);
    return workers;
}

/* ---- the node ---------------------------------------------------------------------------- */
static int metrics_init(coord *c)
{
    static const double ckpt_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                          1,     2.5,  5,     10,   30,  60};
    if (!(c->metrics = weir_metrics_new(NULL)))
        return -ENOMEM;
    weir_metrics *m = c->metrics;
    int e = weir_metrics_register(
        m,
        &(weir_metric_def){"weir_coordinator_workers_lost_total",
                           "Workers declared lost, by cause (heartbeat, stall, overflow, closed, "
                           "malformed, replaced).",
                           WEIR_METRIC_COUNTER, WEIR_LABELS("cause"), 1, NULL, 0, 0},
        &c->m.lost, NULL);
    if (!e)
        e = weir_metrics_register(
            m,
            &(weir_metric_def){"weir_coordinator_jobs_ended_total", "Jobs that ended, by state.",
                               WEIR_METRIC_COUNTER, WEIR_LABELS("state"), 1, NULL, 0, 0},
            &c->m.ended, NULL);
    c->m.malformed = weir_metrics_counter(
        m, "weir_coordinator_malformed_frames_total",
        "Frames from a peer that did not decode or broke the protocol (the peer was dropped).");
    c->m.refused_version = weir_metrics_counter(
        m, "weir_coordinator_version_refusals_total",
        "Peers refused for a protocol version this coordinator does not speak.");
    c->m.restarts = weir_metrics_counter(m, "weir_coordinator_job_restarts_total",
                                         "Job restarts after a worker was lost.");
    c->m.submitted =
        weir_metrics_counter(m, "weir_coordinator_jobs_submitted_total", "Jobs accepted.");
    c->m.adm_refused = weir_metrics_counter(
        m, "weir_coordinator_admission_refusals_total",
        "Connections refused before their first frame: too many were being admitted at once.");
    c->m.adm_evicted = weir_metrics_counter(
        m, "weir_coordinator_admission_evictions_total",
        "Connections closed before their first frame to admit a newcomer (admission.h).");
    c->m.accept_failures =
        weir_metrics_counter(m, "weir_coordinator_accept_failures_total",
                             "Accepts that failed for want of descriptors or memory.");
    c->m.tls_failures = weir_metrics_counter(
        m, "weir_coordinator_handshake_failures_total",
        "Connections closed because their TLS handshake failed or missed its deadline.");
    c->m.recovered =
        weir_metrics_counter(m, "weir_coordinator_jobs_recovered_total",
                             "Jobs a new leader took over from the HA directory and runs again.");
    c->m.recovery_failed =
        weir_metrics_counter(m, "weir_coordinator_job_recoveries_failed_total",
                             "Jobs of the HA directory a new leader could not run again (each "
                             "needs a resubmit: the log says why).");
    c->m.bytes_shipped = weir_metrics_counter(m, "weir_coordinator_plugin_bytes_shipped_total",
                                              "Plugin bytes sent in Deploys.");
    c->m.ships_deduped =
        weir_metrics_counter(m, "weir_coordinator_plugin_ships_deduped_total",
                             "Deploy plugins sent as a reference (the worker held them).");
    c->m.cache_hits = weir_metrics_counter(m, "weir_coordinator_submit_plugin_cache_hits_total",
                                           "Submitted plugins the cache already held.");
    c->m.ckpt_seconds = weir_metrics_histogram(m, "weir_coordinator_checkpoint_duration_seconds",
                                               "Completed checkpoints, trigger to COMPLETED.",
                                               ckpt_buckets, sizeof(ckpt_buckets) / sizeof(double));
    if (!e &&
        (!c->m.malformed || !c->m.refused_version || !c->m.restarts || !c->m.submitted ||
         !c->m.bytes_shipped || !c->m.ships_deduped || !c->m.cache_hits || !c->m.ckpt_seconds))
        e = -ENOMEM;
    weir__plugin_stats_read(&c->m.seen);
    return e;
}

void weir__coord_count_locked(const coord *c, int *workers, int *jobs)
{
    *workers = *jobs = 0;
    for (size_t i = 0; i < c->nws; i++)
        *workers += !c->ws[i]->lost;
    for (size_t i = 0; i < c->njobs; i++)
        *jobs += !c->jobs[i]->ended;
}

static int jobs_running(coord *c)
{
    int workers, jobs;
    pthread_mutex_lock(&c->mu);
    weir__coord_count_locked(c, &workers, &jobs);
    pthread_mutex_unlock(&c->mu);
    return jobs;
}

static int frames_pending(coord *c)
{
    pthread_mutex_lock(&c->mu);
    int n = 0;
    for (size_t i = 0; i < c->nws; i++) {
        weir__outbox_stats st;
        weir__outbox_stats_get(c->ws[i]->ob, &st);
        n += !c->ws[i]->lost && st.frames_pending;
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* ---- leader election (--ha-dir: ha.h) ---------------------------------------------------- */
enum { HA_OPEN, HA_TRY, HA_LEAD_AT, HA_ANNOUNCE, HA_READ };

typedef struct ha_call {
    coord *c;
    int op, port;
    uint64_t epoch;
    weir__ha_leader leader;
    char msg[1024];
} ha_call;

static intptr_t ha_job(void *arg)
{
    ha_call *h = arg;
    coord *c = h->c;
    switch (h->op) {
    case HA_OPEN:
        return weir__ha_open(c->o.ha_dir, c->o.ha_allow_unsafe_locks, &c->ha, h->msg,
                             sizeof(h->msg));
    case HA_TRY:
        return weir__ha_try_lead(c->ha, c->host, &h->epoch, h->msg, sizeof(h->msg));
    case HA_LEAD_AT:
        return weir__ha_lead_at(c->ha, c->host, h->epoch, h->msg, sizeof(h->msg));
    case HA_ANNOUNCE:
        return weir__ha_announce(c->ha, h->port, h->msg, sizeof(h->msg));
    default:
        return weir__ha_read_leader(c->o.ha_dir, &h->leader, h->msg, sizeof(h->msg));
    }
}

/* One election call on the blocking pool (file system calls); an error's
 * text in msg. */
static int ha_call_run(coord *c, int op, int port, char *msg, size_t cap)
{
    ha_call h = {.c = c, .op = op, .port = port};
    int e = (int)weir__blocking_run_shielded(ha_job, &h);
    if (e < 0)
        snprintf(msg, cap, "%s", h.msg);
    if (op == HA_TRY && e == 1)
        c->epoch = h.epoch;
    return e;
}

/* The lease's keepalive, every third of its TTL, while this coordinator
 * leads through etcd. A lease etcd says is gone, or no answer for a whole
 * TTL (etcd drops it then), ends the leadership: the reason and a byte go
 * to the step-down pipe, which the run loop reads. */
static intptr_t etcd_keepalive_main(void *arg)
{
    coord *c = arg;
    int ttl = c->o.etcd_lease_ttl_s > 0 ? c->o.etcd_lease_ttl_s : 10;
    int64_t period = ttl * 1000 / 3, ok = weir_time_now();
    for (;;) {
        if (weir_time_sleep(period * WEIR_MSEC) < 0)
            return 0;
        char msg[512];
        int e = weir__etcd_keepalive(c->etcd, NULL, msg, sizeof(msg));
        if (e == -ECANCELED)
            return 0;
        if (e == 0) {
            ok = weir_time_now();
            continue;
        }
        if (e != -ESTALE && weir_time_now() - ok < (int64_t)ttl * 1000 * WEIR_MSEC) {
            weir__log(WEIR__LOG_WARN, LOG, "etcd keepalive: %s (retrying)", msg);
            continue;
        }
        pthread_mutex_lock(&c->mu); /* the pipe is no synchronization TSan sees */
        snprintf(c->step_down_why, sizeof(c->step_down_why), "%s",
                 e == -ESTALE ? "etcd says this leader's lease is gone (it expired while the "
                                "coordinator was frozen or cut off): another leads now"
                              : "etcd has not answered for a whole lease TTL");
        pthread_mutex_unlock(&c->mu);
        weir__log(WEIR__LOG_ERROR, LOG, "stepping down, epoch %" PRIu64 ": %s (%s)", c->epoch,
                  c->step_down_why, msg);
        char b = 1;
        if (write(c->step_down[1], &b, 1) < 0)
            weir__log(WEIR__LOG_ERROR, LOG, "the step-down pipe: %s", strerror(errno));
        return 0;
    }
}

/* One campaign through etcd: 1 this coordinator leads now (its epoch
 * etcd's revision, the leader file written with it), 0 another leads, or
 * a negative errno with msg. */
static int etcd_try_lead(coord *c, char *msg, size_t cap)
{
    char value[WEIR_CLUSTER_HOST_MAX + 64];
    snprintf(value, sizeof(value), "%s pid %ld", c->host, (long)getpid());
    uint64_t epoch = 0;
    int e = weir__etcd_campaign(c->etcd, c->etcd_key, value, &epoch, NULL, 0, msg, cap);
    if (e == 0)
        c->etcd_holder = epoch;
    if (e != 1)
        return e;
    ha_call h = {.c = c, .op = HA_LEAD_AT, .epoch = epoch};
    if ((e = (int)weir__blocking_run_shielded(ha_job, &h)) < 0) {
        snprintf(msg, cap, "%s", h.msg);
        char rmsg[256];
        weir__etcd_resign(c->etcd, rmsg, sizeof(rmsg)); /* not leading after all */
        return e;
    }
    c->epoch = epoch;
    return 1;
}

/* ---- a standby's watch of the leader's key ---- */
#define WATCH_RETRY_MS 30000 /* after a watch failed, poll this long before watching again */

typedef struct etcd_watch {
    coord *c;
    int64_t until;
    int rc, done_fd; /* done_fd: written to when the watch ends */
    char msg[400];
} etcd_watch;

static intptr_t etcd_watch_main(void *arg)
{
    etcd_watch *w = arg;
    w->rc = weir__etcd_watch_gone(w->c->etcd, w->c->etcd_key, w->until, w->msg, sizeof(w->msg));
    if (w->done_fd >= 0) {
        char b = 1;
        (void)!write(w->done_fd, &b, 1);
    }
    return 0;
}

/* As a standby, wait through an etcd watch for the leader's key to go:
 * what weir__etcd_watch_gone returns (1 deleted, 2 etcd ended the watch,
 * 0 nothing until `until`, a negative errno with msg: the caller polls
 * instead), 3 the stop descriptor said stop, or -ECANCELED: the
 * coordinator's fiber was cancelled. The watch runs in a fiber of its own,
 * so that the stop descriptor is heard while it waits. */
static int etcd_wait_gone(coord *c, int64_t until, char *msg, size_t cap)
{
    etcd_watch w = {.c = c, .until = until, .done_fd = -1};
    int done[2];
    if (c->o.stop_fd < 0) {
        etcd_watch_main(&w); /* nothing to hear meanwhile: here */
        snprintf(msg, cap, "%s", w.msg);
        return w.rc;
    }
    if (pipe2(done, O_CLOEXEC | O_NONBLOCK) < 0) {
        int e = -errno;
        snprintf(msg, cap, "a pipe: %s", strerror(errno));
        return e;
    }
    w.done_fd = done[1];
    weir_scope *s = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER);
    if (!s ||
        !weir_scope_spawn(s, etcd_watch_main, &w,
                          &(weir_spawn_opts){.name = "cluster etcd watch", .stack_size = FIBER})) {
        weir_scope_free(s);
        close(done[0]);
        close(done[1]);
        snprintf(msg, cap, "could not start the watch of the leader's key");
        return -ENOMEM;
    }
    int rc = 0;
    for (;;) {
        int fds[2] = {done[0], c->o.stop_fd};
        int i = weir_io_wait_readable_any(fds, 2, WEIR_FOREVER);
        if (i == 0)
            break; /* the watch ended */
        if (i == 1 && weir__cl_wait_stop(c->o.stop_fd, LOG) == 0) {
            rc = 3;
            break;
        }
        if (i < 0 && i != -EINTR) {
            rc = i; /* -ECANCELED: this fiber is cancelled */
            snprintf(msg, cap, "waiting for the watch: %s", strerror(-i));
            break;
        }
    }
    if (rc)
        weir_scope_cancel(s);
    weir_scope_join(s, NULL); /* the watch uses c->etcd: it ends first */
    weir_scope_free(s);
    close(done[0]);
    close(done[1]);
    if (rc)
        return rc;
    snprintf(msg, cap, "%s", w.msg);
    return w.rc;
}

/* Stand for leader until this coordinator leads (1) or the stop
 * descriptor says stop (0), polling the lock (or campaigning in etcd)
 * every WEIR__HA_POLL_MS with the control port closed; a negative errno
 * with msg when the election cannot run (the directory fails the lock
 * probe, etcd's endpoints are malformed, say). */
static int stand_for_leader(coord *c, char *msg, size_t cap)
{
    int e = ha_call_run(c, HA_OPEN, 0, msg, cap);
    if (e < 0)
        return e;
    if (c->o.etcd_endpoints) {
        snprintf(c->etcd_key, sizeof(c->etcd_key), "/weir/%s/leader",
                 c->o.etcd_cluster ? c->o.etcd_cluster : "weir");
        if ((e = weir__etcd_open_opts(c->o.etcd_endpoints,
                                      c->o.etcd_lease_ttl_s > 0 ? c->o.etcd_lease_ttl_s : 10,
                                      &c->o.etcd, &c->etcd, msg, cap)) < 0)
            return e;
    }
    int64_t watch_after = 0; /* after a failed watch: poll until then */
    for (int said = 0, warned = 0, watch_warned = 0;;) {
        int64_t campaigned = weir_time_now();
        c->etcd_holder = 0;
        e = c->etcd ? etcd_try_lead(c, msg, cap) : ha_call_run(c, HA_TRY, 0, msg, cap);
        /* A refused password is not worth retrying: the node stops. */
        if (e < 0 && c->etcd && e != -ENOMEM && e != -ESTALE && e != -EACCES) {
            /* etcd unreachable or answering badly: keep standing by. */
            if (!warned++)
                weir__log(WEIR__LOG_WARN, LOG, "campaigning in etcd: %s (retrying)", msg);
            e = 0;
        }
        if (e != 0)
            break;
        if (!said++) {
            ha_call h = {.c = c, .op = HA_READ};
            char who[300] = "not known yet";
            if (weir__blocking_run_shielded(ha_job, &h) == 0)
                snprintf(who, sizeof(who), "%s:%d, epoch %" PRIu64, h.leader.host, h.leader.port,
                         h.leader.epoch);
            weir__log(WEIR__LOG_INFO, LOG, "standing by in %s: the leader is %s", c->o.ha_dir, who);
            if (c->o.on_standby)
                c->o.on_standby(c->o.arg, c->o.ha_dir);
        }
        int64_t next = weir_time_after_ms(WEIR__HA_POLL_MS);
        if (c->etcd && c->etcd_holder && weir_time_now() >= watch_after) {
            /* Another leads: watch its key instead of campaigning every
             * poll, and campaign again as soon as it goes - or after a
             * third of the lease's TTL, which renews this standby's lease
             * (and finds a watch that went quiet). */
            int ttl_ms = (c->o.etcd_lease_ttl_s > 0 ? c->o.etcd_lease_ttl_s : 10) * 1000;
            char wmsg[400];
            int w = etcd_wait_gone(c, weir_time_after_ms(ttl_ms / 3), wmsg, sizeof(wmsg));
            if (w == 3)
                return 0; /* stopped while standing by */
            if (w == -ECANCELED)
                return -ECANCELED;
            if (w >= 0)
                watch_warned = 0; /* a later failure is told again */
            if (w == 1) {
                weir__log(WEIR__LOG_INFO, LOG, "the leader's key in etcd is gone: campaigning");
                continue;
            }
            if (w < 0) {
                watch_after = weir_time_after_ms(WATCH_RETRY_MS);
                if (!watch_warned++)
                    weir__log(WEIR__LOG_WARN, LOG,
                              "watching the leader's key in etcd: %s (polling every %d ms for "
                              "%d s instead)",
                              wmsg, WEIR__HA_POLL_MS, WATCH_RETRY_MS / 1000);
            }
            /* Nothing happened, or etcd ended the watch: campaign again,
             * but at most once per poll interval (etcd ending every watch
             * at once must not spin). */
            if (w >= 0) {
                next = campaigned + WEIR__HA_POLL_MS * WEIR_MSEC;
                if (weir_time_now() >= next)
                    continue;
            }
        }
        if (c->o.stop_fd >= 0) {
            int r = weir_io_poll(c->o.stop_fd, POLLIN, next);
            if (r == -ECANCELED)
                return -ECANCELED;
            if (r > 0 && weir__cl_wait_stop(c->o.stop_fd, LOG) == 0)
                return 0;
        } else if (weir_time_sleep_until(next) < 0) {
            return -ECANCELED;
        }
    }
    if (e == 1)
        weir__log(WEIR__LOG_INFO, LOG, "leading from %s with epoch %" PRIu64 "%s%s", c->o.ha_dir,
                  c->epoch, c->etcd ? ", elected in etcd at " : "",
                  c->etcd ? weir__etcd_endpoint(c->etcd) : "");
    return e;
}

/* Until the stop descriptor is readable (0) or the leadership is lost
 * (1: the step-down pipe). */
static int wait_stop_or_step_down(coord *c)
{
    if (c->step_down[0] < 0) {
        if (c->o.stop_fd >= 0)
            weir__cl_wait_stop(c->o.stop_fd, LOG);
        else
            weir_time_sleep_until(WEIR_FOREVER);
        return 0;
    }
    for (;;) {
        int fds[2] = {c->step_down[0], c->o.stop_fd};
        int i = weir_io_wait_readable_any(fds, c->o.stop_fd >= 0 ? 2 : 1, WEIR_FOREVER);
        if (i == 0)
            return 1;
        if (i == 1 && weir__cl_wait_stop(c->o.stop_fd, LOG) == 0)
            return 0;
        if (i < 0 && i != -EINTR)
            return 0; /* cancelled */
    }
}

int weir__coord_run(const weir__coord_opts *o, char *msg, size_t cap)
{
    coord *c = weir__calloc(1, sizeof(*c));
    if (!c) {
        snprintf(msg, cap, "out of memory");
        return -ENOMEM;
    }
    c->o = *o;
    c->lfd = c->tmplock = -1;
    c->step_down[0] = c->step_down[1] = -1;
    c->hb_ms =
        o->heartbeat_timeout_ms > 0 ? o->heartbeat_timeout_ms : WEIR_CLUSTER_HEARTBEAT_TIMEOUT_MS;
    c->wd_ms = o->watchdog_ms > 0 ? o->watchdog_ms : WEIR_CLUSTER_WATCHDOG_MS;
    c->stall_ms = o->stall_ms ? o->stall_ms : WEIR__OUTBOX_STALL_MS;
    c->drain_ms = o->drain_timeout_ms > 0 ? o->drain_timeout_ms : WEIR__COORD_DRAIN_MS;
    c->window_ms = o->restart_window_ms > 0 ? o->restart_window_ms : 600000;
    c->adm_cap =
        o->max_pending_connections > 0 ? (size_t)o->max_pending_connections : WEIR__ADM_MAX_PENDING;
    if (c->o.max_restarts < 0)
        c->o.max_restarts = 10;
    pthread_mutex_init(&c->mu, NULL);
    int e = 0;
    const char *dir = o->cache_dir;
    if (!dir) {
        if ((e = weir__cl_cache_dir_make("coordinator", c->tmpdir, sizeof(c->tmpdir), &c->tmplock,
                                         msg, cap)) < 0)
            goto out;
        dir = c->tmpdir;
    }
    if ((e = weir__plugin_cache_open(dir, &c->cache, msg, cap)) < 0)
        goto out;
    if ((e = metrics_init(c)) < 0 || !(c->adm = weir__calloc(3 * c->adm_cap, sizeof(*c->adm))) ||
        !(c->adm_fd = weir__calloc(3 * c->adm_cap, sizeof(*c->adm_fd)))) {
        e = -ENOMEM;
        snprintf(msg, cap, "out of memory");
        goto out;
    }
    snprintf(c->host, sizeof(c->host), "%s",
             o->advertise_host ? o->advertise_host
             : o->bind_host    ? o->bind_host
                               : "127.0.0.1");
    if (o->etcd_endpoints && !o->ha_dir) {
        e = -EINVAL;
        snprintf(msg, cap, "an etcd election needs the HA directory for the jobs' records");
        goto out;
    }
    if (o->etcd_endpoints && pipe2(c->step_down, O_CLOEXEC | O_NONBLOCK) < 0) {
        e = -errno;
        snprintf(msg, cap, "a pipe: %s", strerror(errno));
        goto out;
    }
    if (o->ha_dir && (e = stand_for_leader(c, msg, cap)) <= 0)
        goto out; /* 0: stopped while standing by */
    if (c->ha && (e = ha_reserve_ids(c, msg, cap)) < 0)
        goto out;
    if (o->port >= 0 &&
        (c->lfd = weir_net_listen(o->bind_host ? o->bind_host : "0.0.0.0", o->port, NULL)) < 0) {
        e = c->lfd;
        snprintf(msg, cap, "listening on %s:%d: %s", o->bind_host ? o->bind_host : "0.0.0.0",
                 o->port, weir_net_strerror(e));
        goto out;
    }
    if (!(c->scope = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER))) {
        e = -ENOMEM;
        snprintf(msg, cap, "out of memory");
        goto out;
    }
    if ((c->lfd >= 0 &&
         !weir_scope_spawn(c->scope, accept_main, c,
                           &(weir_spawn_opts){.name = "cluster accept", .stack_size = FIBER})) ||
        !weir_scope_spawn(c->scope, watchdog_main, c,
                          &(weir_spawn_opts){.name = "cluster watchdog", .stack_size = FIBER})) {
        e = -ENOMEM;
        snprintf(msg, cap, "could not start the coordinator's fibers");
        weir_scope_cancel(c->scope);
    } else {
        if (o->http && (e = weir__coord_http_start(c, msg, cap)) < 0) {
            weir_scope_cancel(c->scope);
            weir_scope_join(c->scope, NULL);
            goto out;
        }
        if (c->ha && (e = ha_call_run(c, HA_ANNOUNCE, c->lfd >= 0 ? weir_net_local_port(c->lfd) : 0,
                                      msg, cap)) < 0) {
            /* A later leader's epoch is stored: this one must not act. */
            weir_scope_cancel(c->scope);
            weir_scope_join(c->scope, NULL);
            weir__coord_http_stop(c);
            goto out;
        }
        if (c->etcd && !weir_scope_spawn(
                           c->scope, etcd_keepalive_main, c,
                           &(weir_spawn_opts){.name = "cluster etcd lease", .stack_size = FIBER})) {
            pthread_mutex_lock(&c->mu);
            snprintf(c->step_down_why, sizeof(c->step_down_why),
                     "could not start the lease's keepalive");
            pthread_mutex_unlock(&c->mu);
            char b = 1;
            (void)!write(c->step_down[1], &b, 1);
        }
        if (c->ha &&
            !weir_scope_spawn(c->scope, recover_main, c,
                              &(weir_spawn_opts){.name = "cluster recovery", .stack_size = FIBER}))
            weir__log(WEIR__LOG_ERROR, LOG, "could not start the recovery of the jobs");
        if (o->on_listen && c->lfd >= 0)
            o->on_listen(o->arg, c->host, weir_net_local_port(c->lfd));
        if (o->on_ready)
            o->on_ready(o->arg, c);
        if (wait_stop_or_step_down(c)) {
            /* Superseded: the jobs are the next leader's now. Nothing is
             * cancelled, recorded or sent; the connections close with the
             * coordinator, and the workers find the leader in ha_dir. */
            pthread_mutex_lock(&c->mu);
            c->stopping = 1;
            c->superseded = 1;
            e = -ESTALE;
            snprintf(msg, cap, "lost the leadership (epoch %" PRIu64 "): %s", c->epoch,
                     c->step_down_why);
            pthread_mutex_unlock(&c->mu);
        } else {
            weir__log(WEIR__LOG_INFO, LOG, "shutting down");
            /* Shutdown: every job's subtasks are cancelled (not drained); what
             * is queued for the workers is written within 1000 ms. */
            pthread_mutex_lock(&c->mu);
            c->stopping = 1;
            for (size_t i = 0; i < c->njobs; i++)
                if (!c->jobs[i]->ended) {
                    ev x = {.kind = EV_CANCEL, .message = weir__strdup("the coordinator stopped")};
                    post_ev_locked(c->jobs[i], &x);
                }
            pthread_mutex_unlock(&c->mu);
            int64_t deadline = weir_time_after_ms(1000);
            while ((jobs_running(c) || frames_pending(c)) && weir_time_now() < deadline)
                weir_time_sleep(10 * WEIR_MSEC);
        }
        weir__coord_http_stop(c);
        if (o->on_ready)
            o->on_ready(o->arg, NULL); /* weir__coord_admit no more */
        weir_scope_cancel(c->scope);
    }
    weir_scope_join(c->scope, NULL);
out:
    weir_scope_free(c->scope);
    if (c->lfd >= 0)
        weir_io_close(c->lfd);
    for (size_t i = 0; i < c->nws; i++)
        session_free(c->ws[i]);
    weir__free(c->ws);
    for (size_t i = 0; i < c->njobs; i++)
        weir__coord_job_free(c->jobs[i]);
    weir__free(c->jobs);
    weir__plugin_cache_free(c->cache);
    weir_metrics_free(c->metrics);
    weir__cl_cache_dir_remove(c->tmpdir, c->tmplock);
    if (c->etcd) {
        /* A leader that stops hands over at once (not a TTL later); one
         * superseded has nothing left to give up. */
        char rmsg[256];
        if (e != -ESTALE && weir__etcd_epoch(c->etcd) &&
            weir__etcd_resign(c->etcd, rmsg, sizeof(rmsg)) < 0)
            weir__log(WEIR__LOG_WARN, LOG, "resigning in etcd: %s", rmsg);
        weir__etcd_close(c->etcd);
    }
    for (int i = 0; i < 2; i++)
        if (c->step_down[i] >= 0)
            close(c->step_down[i]);
    weir__ha_close(c->ha); /* leadership ends with the coordinator */
    weir__free(c->adm);
    weir__free(c->adm_fd);
    weir__free(c->recover_ids);
    weir__free(c->history_ids);
    pthread_mutex_destroy(&c->mu);
    weir__free(c);
    return e;
}
