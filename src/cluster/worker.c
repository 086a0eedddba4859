/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker.c - a cluster's worker (node.h; docs/cluster.md).
 *
 * A session: connect to the coordinator, Register, read the RegisterAck
 * (version, status, the heartbeat interval), then a heartbeat fiber posts
 * a Heartbeat every interval and this fiber reads the coordinator's
 * frames. Everything the worker sends goes through the session's outbox
 * (outbox.h), so no sender ever waits on the coordinator. Frames of an
 * epoch below the one the RegisterAck bound are dropped and counted.
 *
 * A Deploy starts a fiber for that job's share: it takes the plugins into
 * the worker's cache (bytes shipped, or a reference it must resolve, else
 * the deploy fails loudly), opens the job's plugin behind the ABI gate,
 * defines the job, decodes the plan, binds one listening socket for the
 * share's inbound channels and reports it for each subtask
 * (SubtaskListening), then waits at most 30 s for the PeerUpdate that says
 * where its outbound channels go, and runs the share (runner.c
 * weir__job_run_plan over TCP channels, channel_tcp.c: forward channels
 * inside this worker stay in-process). Checkpoint messages travel as
 * frames: a TriggerCheckpoint is delivered to the share's source subtasks,
 * CommitCheckpoint and AbortCheckpoint to all of them, and each subtask's
 * ACK goes back as SubtaskCheckpointed (from whichever thread persisted
 * it: posting is thread-safe). A trigger that arrives before the share's
 * subtasks exist is held and delivered when they do. At the end every
 * subtask's SubtaskFinished goes out, the first carrying the share's
 * record counts.
 *
 * CancelTasks cancels a share (its subtasks stop as a cancelled job's do:
 * two-phase sinks abort). A session that ends (the coordinator closed it,
 * declared this worker lost, or went away) cancels every share and drains
 * it, then the worker connects and registers again, with backoff. The
 * stop descriptor (SIGTERM / SIGINT) cancels every share, reports their
 * subtasks cancelled, lets the outbox write what it holds for up to a
 * second, and ends.
 */
#include <errno.h>
#include <jansson.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/wall.h"
#include "cluster/ha.h"
#include "cluster/node.h"
#include "cluster/plugins.h"
#include "rt/rt_int.h"
#include "stream/channel_tcp.h"
#include "stream/ckpt_link.h"
#include "stream/deploy.h"
#include "stream/plan.h"
#include "stream/stream_int.h"
#include "weir/http.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/rt.h"
#include "weir/sync.h"

#define LOG               "worker"
#define FIBER             (128u << 10)
#define WORKER_SILENCE_MS ((int)WEIR_CLUSTER_WORKER_SILENCE_MS)

typedef struct worker worker;

typedef struct wpeer {
    uint32_t channel;
    char *host;
    int port;
} wpeer;

/* One Deploy: a job's share on this worker. */
typedef struct wjob {
    worker *wk;
    weir__outbox *ob; /* the session's */
    uint64_t job;
    uint32_t attempt;
    char name[WEIR_CLUSTER_NAME_MAX + 1];
    uint8_t *plan_bytes;
    size_t plan_len;
    weir__cl_subtask *subs;
    uint32_t nsubs;
    uint8_t *reported; /* [nsubs]: its SubtaskFinished went out (worker mu) */
    int argc;
    char **argv;
    char *checkpoint_dir;
    char *state_backend; /* NULL: memory */
    uint64_t interval_ms, restore_id, idle_ms;
    weir__cl_deploy_plugin *plugins; /* bytes: copies, freed once cached */
    uint32_t nplugins;
    weir_chan *go; /* the PeerUpdate: an int (1) once peers are set */
    wpeer *peers;  /* sorted by channel */
    uint32_t npeers;
    /* worker mu */
    run *r;            /* while its subtasks exist: checkpoint deliveries */
    const weir_job *j; /* while it is defined: its figures (SubtaskStats) */
    const weir__plan *plan;
    uint64_t pending_trigger; /* a trigger that came before r */
    uint64_t pending_final;   /* the final checkpoint's id, if it came before r */
    weir_task *task;
    int ended;
    weir__deploy td; /* the TCP net's deploy, wrapped */
} wjob;

struct worker {
    weir__worker_opts o;
    pthread_mutex_t mu;
    wjob **jobs;
    size_t njobs, cap;
    weir__plugin_cache *cache;
    char tmpdir[64];
    int tmplock; /* its lock (-1: none) */
    _Atomic int stopping;
    _Atomic int fd; /* the session's socket, -1 between sessions */
    weir_scope *jobs_scope;
    uint64_t epoch;     /* mu: the epoch bound (the RegisterAck's, or a later frame's) */
    uint64_t epoch_max; /* mu: the highest ever bound: a coordinator below is superseded */
    /* With ha_dir: "HOST:PORT" of the leader the file named last (mu). */
    char leader[WEIR_CLUSTER_HOST_MAX + 16];
    _Atomic uint64_t fenced, sessions;
    _Atomic uint64_t stale; /* frames accepted from a leader already superseded */
    /* mu: what /api/v1/worker shows */
    int registered;
    char last_error[512];
    weir_http_server *http;
};

/* ---- the checkpoint link of a share ------------------------------------------------------- */
typedef struct wlink {
    weir__ckpt_link l;
    wjob *J;
} wlink;

static int wl_ack(weir__ckpt_link *l, const weir__ckpt_msg *m)
{
    wjob *J = ((wlink *)l)->J;
    if (m->kind == WEIR__CK_FINAL_REQ) {
        weir__cl_msg f = {.kind = WEIR_CLUSTER_REQUEST_FINAL_CHECKPOINT};
        f.u.request_final = (weir__cl_request_final){J->job, m->chain, m->sub};
        return weir__cl_post(J->ob, &f, WEIR__OUTBOX_CONTROL);
    }
    weir__cl_msg f = {.kind = WEIR_CLUSTER_SUBTASK_CHECKPOINTED};
    f.u.checkpointed = (weir__cl_subtask_checkpointed){
        J->job, m->id, m->chain, m->sub, m->err, m->bytes, (char *)m->state, (char *)m->position};
    return weir__cl_post(J->ob, &f, WEIR__OUTBOX_CONTROL);
}

static int wl_recv(weir__ckpt_link *l, weir__ckpt_msg *m, int64_t deadline)
{
    (void)l, (void)m, (void)deadline;
    return -EINVAL; /* the coordinator is elsewhere */
}

static int wl_send(weir__ckpt_link *l, const weir__ckpt_msg *m)
{
    (void)l, (void)m;
    return -EINVAL;
}

static void wl_stop(weir__ckpt_link *l)
{
    wjob *J = ((wlink *)l)->J;
    pthread_mutex_lock(&J->wk->mu);
    J->r = NULL;
    pthread_mutex_unlock(&J->wk->mu);
}

static void wl_free(weir__ckpt_link *l)
{
    weir__free(l);
}

static const weir__ckpt_link_ops wlink_ops = {wl_ack, wl_recv, wl_send, wl_stop, wl_free};

/* kind for every subtask of the share (TRIGGER: its sources); mu held. */
static void deliver_locked(wjob *J, int kind, uint64_t id)
{
    if (!J->r) {
        if (kind == WEIR__CK_TRIGGER)
            J->pending_trigger = id;
        if (kind == WEIR__CK_FINAL)
            J->pending_final = id;
        return;
    }
    for (uint32_t i = 0; i < J->nsubs; i++) {
        weir__ckpt_msg m = {
            .kind = kind, .id = id, .chain = J->subs[i].chain, .sub = J->subs[i].sub};
        if (kind == WEIR__CK_TRIGGER &&
            J->plan->ops[J->plan->chains[m.chain].ops[0]].kind != OP_SOURCE)
            continue;
        subtask *st = weir__ckpt_local_subtask(J->r, &m);
        if (st)
            weir__ckpt_deliver(st, &m);
    }
}

/* ---- the deploy hooks: the TCP net's, and the link ----------------------------------------- */
static int w_here(void *arg, uint32_t chain, uint32_t sub)
{
    wjob *J = arg;
    return J->td.here(J->td.arg, chain, sub);
}

static weir__channel *w_channel(void *arg, run *r, const weir__plan_channel *c, subtask *prod,
                                subtask *cons, int *err)
{
    wjob *J = arg;
    return J->td.channel(J->td.arg, r, c, prod, cons, err);
}

static int w_start(void *arg, run *r)
{
    wjob *J = arg;
    return J->td.start ? J->td.start(J->td.arg, r) : 0;
}

static void w_stop(void *arg, run *r)
{
    wjob *J = arg;
    if (J->td.stop)
        J->td.stop(J->td.arg, r);
}

static weir__ckpt_link *w_link(void *arg, run *r)
{
    wjob *J = arg;
    wlink *l = weir__calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->l.ops = &wlink_ops;
    l->J = J;
    pthread_mutex_lock(&J->wk->mu);
    J->r = r;
    if (J->pending_trigger)
        deliver_locked(J, WEIR__CK_TRIGGER, J->pending_trigger);
    J->pending_trigger = 0;
    if (J->pending_final)
        deliver_locked(J, WEIR__CK_FINAL, J->pending_final);
    J->pending_final = 0;
    pthread_mutex_unlock(&J->wk->mu);
    return &l->l;
}

/* Where each subtask runs, for the TCP net: 0 here, 1 elsewhere. */
static int w_place(void *arg, uint32_t chain, uint32_t sub)
{
    wjob *J = arg;
    for (uint32_t i = 0; i < J->nsubs; i++)
        if (J->subs[i].chain == chain && J->subs[i].sub == sub)
            return 0;
    return 1;
}

static const char *w_peer(void *arg, uint32_t channel, int *port)
{
    wjob *J = arg;
    for (uint32_t i = 0; i < J->npeers; i++)
        if (J->peers[i].channel == channel) {
            *port = J->peers[i].port;
            return J->peers[i].host;
        }
    return NULL;
}

/* ---- a share ------------------------------------------------------------------------------- */
typedef struct bopen {
    worker *wk;
    wjob *J;
    char *path;
    weir_plugin *plugin;
    char msg[1024];
} bopen;

static intptr_t b_plugins(void *arg)
{
    bopen *b = arg;
    wjob *J = b->J;
    for (uint32_t i = 0; i < J->nplugins; i++) {
        char *path = NULL;
        int e =
            weir__plugin_cache_accept(b->wk->cache, &J->plugins[i], &path, b->msg, sizeof(b->msg));
        if (e < 0)
            return e;
        if (i == 0)
            b->path = path;
        else
            weir__free(path);
    }
    return weir_plugin_open(b->path, &b->plugin, b->msg, sizeof(b->msg));
}

static void post_finished(wjob *J, uint32_t i, int32_t err, int fatal, const char *message,
                          uint64_t rin, uint64_t rout)
{
    weir__cl_msg f = {.kind = WEIR_CLUSTER_SUBTASK_FINISHED};
    f.u.finished = (weir__cl_subtask_finished){J->job,          J->attempt, J->subs[i].chain,
                                               J->subs[i].sub,  err,        (uint8_t)fatal,
                                               (char *)message, rin,        rout};
    weir__cl_post(J->ob, &f, WEIR__OUTBOX_CONTROL);
}

/* Every subtask of the share not reported yet (they never ran, or the
 * share failed around them), the first carrying rin / rout. */
static void report_finished(wjob *J, int32_t err, int fatal, const char *message, uint64_t rin,
                            uint64_t rout)
{
    for (uint32_t i = 0; i < J->nsubs; i++) {
        pthread_mutex_lock(&J->wk->mu);
        int done = J->reported && J->reported[i];
        if (J->reported)
            J->reported[i] = 1;
        pthread_mutex_unlock(&J->wk->mu);
        if (done)
            continue;
        post_finished(J, i, err, fatal, message, rin, rout);
        rin = rout = 0;
    }
}

/* A subtask of the share ended (on its thread): reported at once, so
 * the coordinator knows which subtasks still run (no checkpoint starts
 * once one has ended), with its own record counts. */
static void w_ended(void *arg, subtask *st, int err)
{
    wjob *J = arg;
    uint32_t chain = (uint32_t)st->ops[0]->chain, sub = (uint32_t)st->index, i = 0;
    while (i < J->nsubs && (J->subs[i].chain != chain || J->subs[i].sub != sub))
        i++;
    if (i == J->nsubs)
        return;
    pthread_mutex_lock(&J->wk->mu);
    int done = J->reported[i];
    J->reported[i] = 1;
    pthread_mutex_unlock(&J->wk->mu);
    if (done)
        return;
    uint64_t rin = st->ops[0]->kind == OP_SOURCE ? st->ctx[0].out : 0;
    uint64_t rout = st->ops[st->nops - 1]->kind == OP_SINK ? st->ctx[st->nops - 1].in : 0;
    /* Another subtask may be setting the job's error: read under its lock. */
    char msg[WEIR_CLUSTER_MESSAGE_MAX] = "";
    if (err < 0 && (weir__job_error_copy(st->r->j, msg, sizeof(msg)) == 0 || !msg[0]))
        snprintf(msg, sizeof(msg), "%s", weir_strerror(err));
    post_finished(J, i, err < 0 ? err : 0, 0, err < 0 ? msg : "", rin, rout);
}

static void wjob_free(wjob *J)
{
    for (int i = 0; J->argv && i < J->argc; i++)
        weir__free(J->argv[i]);
    weir__free(J->argv);
    weir__free(J->plan_bytes);
    weir__free(J->subs);
    weir__free(J->reported);
    weir__free(J->checkpoint_dir);
    weir__free(J->state_backend);
    for (uint32_t i = 0; J->plugins && i < J->nplugins; i++)
        weir__free((void *)J->plugins[i].bytes.p);
    weir__free(J->plugins);
    for (uint32_t i = 0; J->peers && i < J->npeers; i++)
        weir__free(J->peers[i].host);
    weir__free(J->peers);
    if (J->go)
        weir_chan_unref(J->go);
    if (J->task)
        weir_task_unref(J->task);
    weir__free(J);
}

static intptr_t wjob_main(void *arg)
{
    wjob *J = arg;
    worker *wk = J->wk;
    char msg[WEIR_CLUSTER_MESSAGE_MAX] = "";
    int fatal = 0;
    weir_job *j = NULL;
    weir__plan *p = NULL;
    weir__tcp_net *net = NULL;
    uint64_t rin = 0, rout = 0;
    bopen b = {.wk = wk, .J = J};
    int e = (int)weir__blocking_run_shielded(b_plugins, &b);
    /* The bytes are cached (or the deploy failed): drop our copies. */
    for (uint32_t i = 0; i < J->nplugins; i++) {
        weir__free((void *)J->plugins[i].bytes.p);
        J->plugins[i].bytes = (weir__cl_bytes){NULL, 0};
    }
    if (e < 0) {
        snprintf(msg, sizeof(msg), "worker %s: %s", wk->o.id, b.msg);
        fatal = e == WEIR_EABI;
        goto report;
    }
    weir__free(J->argv[0]);
    J->argv[0] = b.path;
    b.path = NULL;
    if ((e = weir_plugin_define(b.plugin, J->argc, J->argv, &j, msg, sizeof(msg))) < 0)
        goto report;
    pthread_mutex_lock(&wk->mu);
    J->j = j;
    pthread_mutex_unlock(&wk->mu);
    if ((e = weir__plan_decode(J->plan_bytes, J->plan_len, &p, msg, sizeof(msg))) < 0)
        goto report;
    pthread_mutex_lock(&wk->mu); /* post_stats reads it */
    J->plan = p;
    pthread_mutex_unlock(&wk->mu);
    for (uint32_t i = 0; i < J->nsubs; i++)
        if (J->subs[i].chain >= p->nchains || J->subs[i].sub >= p->chains[J->subs[i].chain].par) {
            e = -EBADMSG;
            snprintf(msg, sizeof(msg), "the Deploy names subtask (%u, %u), not in its plan",
                     J->subs[i].chain, J->subs[i].sub);
            goto report;
        }
    /* One listening socket for the share's inbound channels from other
     * workers - none when every producer is here (a job all on one worker,
     * as under weir run: no port opened). */
    int remote_in = 0;
    for (uint32_t c = 0; c < p->nchannels && !remote_in; c++) {
        const weir__plan_channel *pc = &p->channels[c];
        remote_in = w_place(J, pc->to_chain, pc->to_sub) == 0 &&
                    w_place(J, pc->from_chain, pc->from_sub) != 0;
    }
    int lfd = remote_in ? weir_net_listen(NULL, 0, NULL) : -1;
    if (remote_in && lfd < 0) {
        e = lfd;
        snprintf(msg, sizeof(msg), "worker %s: listening for channels: %s", wk->o.id,
                 weir_net_strerror(e));
        goto report;
    }
    int port = lfd >= 0 ? weir_net_local_port(lfd) : 0;
    const char *hosts[2] = {"127.0.0.1", "127.0.0.1"};
    int ports[2] = {port, port};
    net = weir__tcp_new(
        &(weir__tcp_opts){.self = 0,
                          .nprocs = 2,
                          .hosts = hosts,
                          .ports = ports,
                          .listen_fd = lfd,
                          .place = w_place,
                          .place_arg = J,
                          /* the attempt in it: a producer of an earlier
                           * attempt cannot attach to this one's consumer
                           * on a reused port */
                          .plan_hash = weir__tcp_plan_hash(J->plan_bytes, J->plan_len) ^
                                       ((uint64_t)J->attempt + 1) * 0x9e3779b97f4a7c15ull,
                          .peer = w_peer,
                          .peer_arg = J,
                          .tls_server = wk->o.data_tls_server,
                          .tls_client = wk->o.data_tls_client});
    if (!net) {
        e = -errno;
        if (lfd >= 0)
            weir_io_close(lfd);
        snprintf(msg, sizeof(msg), "out of memory");
        goto report;
    }
    /* Phase one: where each subtask's inbound channels listen. */
    weir__cl_listen *in = weir__calloc(p->nchannels ? p->nchannels : 1, sizeof(*in));
    if (!in) {
        e = -ENOMEM;
        goto report;
    }
    for (uint32_t i = 0; i < J->nsubs; i++) {
        uint32_t n = 0;
        for (uint32_t c = 0; c < p->nchannels; c++) {
            const weir__plan_channel *pc = &p->channels[c];
            if (pc->to_chain == J->subs[i].chain && pc->to_sub == J->subs[i].sub &&
                w_place(J, pc->from_chain, pc->from_sub) != 0)
                in[n++] = (weir__cl_listen){pc->id, (uint16_t)port};
        }
        weir__cl_msg f = {.kind = WEIR_CLUSTER_SUBTASK_LISTENING};
        f.u.listening.job = J->job;
        f.u.listening.attempt = J->attempt;
        f.u.listening.chain = J->subs[i].chain;
        f.u.listening.sub = J->subs[i].sub;
        f.u.listening.inputs.v = in;
        f.u.listening.inputs.n = n;
        weir__cl_post(J->ob, &f, WEIR__OUTBOX_CONTROL);
    }
    weir__free(in);
    /* Phase two: the PeerUpdate, within 30 s. */
    int go = 0;
    e = weir_chan_recv(J->go, &go, weir_time_after_ms(30000));
    if (e == -ETIMEDOUT) {
        snprintf(msg, sizeof(msg), "worker %s: no PeerUpdate within 30 s", wk->o.id);
        goto report;
    }
    if (e < 0)
        goto report; /* cancelled */
    weir__tcp_deploy(net, &J->td);
    weir__deploy d = {.here = w_here,
                      .channel = w_channel,
                      .start = w_start,
                      .stop = w_stop,
                      .link = J->checkpoint_dir && J->interval_ms ? w_link : NULL,
                      .worker = 1,
                      .restore_id = J->restore_id,
                      .ended = w_ended,
                      .arg = J};
    weir_run_opts o = {.parallelism = 1,
                       .credits = 4,
                       .checkpoint_dir = J->checkpoint_dir,
                       .checkpoint_interval_ms = (int64_t)J->interval_ms,
                       .idle_timeout_ms = (int64_t)J->idle_ms,
                       .state_backend = J->state_backend,
                       .restore = J->restore_id != 0};
    e = weir__job_run_plan(j, p, &o, &d);
    if (e < 0 && weir_job_error(j)[0])
        snprintf(msg, sizeof(msg), "%s", weir_job_error(j));
    /* Subtasks reported their own ends: what is left failed around them
     * (the run could not start them). */
    rin = rout = 0;
report:
    if (e < 0 && !msg[0])
        snprintf(msg, sizeof(msg), "%s", weir_strerror(e));
    if (e < 0 && e != -ECANCELED)
        weir__log(wk->o.fd_given ? WEIR__LOG_INFO : WEIR__LOG_WARN, LOG,
                  "job %" PRIu64 " attempt %u: %s", J->job, J->attempt, msg);
    report_finished(J, e < 0 ? e : 0, fatal, e < 0 ? msg : "", rin, rout);
    pthread_mutex_lock(&wk->mu);
    J->ended = 1;
    J->r = NULL;
    J->plan = NULL;
    J->j = NULL;
    pthread_mutex_unlock(&wk->mu);
    weir__tcp_free(net);
    weir__plan_free(p);
    if (j)
        weir_job_free(j);
    weir__free(b.path);
    weir_plugin_close(b.plugin);
    return 0;
}

/* ---- the coordinator's frames ------------------------------------------------------------- */
static wjob *find_locked(worker *wk, uint64_t job, int live)
{
    for (size_t i = wk->njobs; i-- > 0;)
        if (wk->jobs[i]->job == job && (!live || !wk->jobs[i]->ended))
            return wk->jobs[i];
    return NULL;
}

/* Shares that ended are forgotten (mu held). */
static void reap_locked(worker *wk)
{
    size_t k = 0;
    for (size_t i = 0; i < wk->njobs; i++) {
        wjob *J = wk->jobs[i];
        if (J->ended) { /* its fiber no longer touches it */
            wjob_free(J);
            continue;
        }
        wk->jobs[k++] = J;
    }
    wk->njobs = k;
}

/* A Deploy not taken: each of its subtasks reported ended with err. */
static void refuse_deploy(worker *wk, weir__outbox *ob, const weir__cl_deploy *d, int err,
                          const char *why)
{
    wjob tmp = {.wk = wk,
                .job = d->job,
                .attempt = d->attempt,
                .subs = d->subtasks.v,
                .nsubs = d->subtasks.n,
                .ob = ob};
    report_finished(&tmp, err, 0, why, 0, 0);
}

static void on_deploy(worker *wk, weir__outbox *ob, const weir__cl_deploy *d)
{
    if (atomic_load(&wk->stopping)) { /* nothing new starts on a worker that stops */
        refuse_deploy(wk, ob, d, -ECANCELED, "the worker is stopping");
        return;
    }
    wjob *J = weir__calloc(1, sizeof(*J));
    int e = J ? 0 : -ENOMEM;
    if (J) {
        J->wk = wk;
        J->ob = ob;
        J->job = d->job;
        J->attempt = d->attempt;
        snprintf(J->name, sizeof(J->name), "%s", d->name);
        J->plan_len = d->plan.n;
        J->plan_bytes = weir__malloc(d->plan.n ? d->plan.n : 1);
        J->nsubs = d->subtasks.n;
        J->subs = weir__calloc(d->subtasks.n ? d->subtasks.n : 1, sizeof(*J->subs));
        J->reported = weir__calloc(d->subtasks.n ? d->subtasks.n : 1, 1);
        J->argc = (int)d->args.n + 1;
        J->argv = weir__calloc((size_t)J->argc + 1, sizeof(char *));
        J->checkpoint_dir = d->checkpoint_dir[0] ? weir__strdup(d->checkpoint_dir) : NULL;
        J->state_backend = d->state_backend[0] ? weir__strdup(d->state_backend) : NULL;
        J->interval_ms = d->checkpoint_interval_ms;
        J->restore_id = d->restore_id;
        J->idle_ms = d->idle_timeout_ms;
        J->nplugins = d->plugins.n;
        J->plugins = weir__calloc(d->plugins.n ? d->plugins.n : 1, sizeof(*J->plugins));
        J->go = weir_chan_new(sizeof(int), 1);
        e = J->plan_bytes && J->subs && J->reported && J->argv && J->plugins && J->go &&
                    (!d->checkpoint_dir[0] || J->checkpoint_dir) &&
                    (!d->state_backend[0] || J->state_backend)
                ? 0
                : -ENOMEM;
        if (!e) {
            memcpy(J->plan_bytes, d->plan.p, d->plan.n);
            memcpy(J->subs, d->subtasks.v, d->subtasks.n * sizeof(*J->subs));
            J->argv[0] = weir__strdup("job.so");
            for (uint32_t i = 0; i < d->args.n; i++)
                if (!(J->argv[i + 1] = weir__strdup(d->args.v[i])))
                    e = -ENOMEM;
        }
        for (uint32_t i = 0; !e && i < d->plugins.n; i++) {
            J->plugins[i] = d->plugins.v[i];
            if (d->plugins.v[i].bytes.p) {
                uint8_t *copy = weir__malloc(d->plugins.v[i].bytes.n);
                if (!copy) {
                    e = -ENOMEM;
                    J->plugins[i].bytes = (weir__cl_bytes){NULL, 0};
                    break;
                }
                memcpy(copy, d->plugins.v[i].bytes.p, d->plugins.v[i].bytes.n);
                J->plugins[i].bytes.p = copy;
            }
        }
    }
    if (!e) {
        pthread_mutex_lock(&wk->mu);
        reap_locked(wk);
        if (wk->njobs == wk->cap) {
            size_t cap = wk->cap ? wk->cap * 2 : 8;
            wjob **v = weir__realloc(wk->jobs, cap * sizeof(*v));
            if (v) {
                wk->jobs = v;
                wk->cap = cap;
            }
        }
        if (wk->njobs < wk->cap) {
            J->task =
                weir_scope_spawn(wk->jobs_scope, wjob_main, J,
                                 &(weir_spawn_opts){.name = "worker job", .stack_size = FIBER});
            if (J->task) {
                weir_task_ref(J->task);
                wk->jobs[wk->njobs++] = J;
            }
        }
        e = J->task ? 0 : -ENOMEM;
        pthread_mutex_unlock(&wk->mu);
    }
    if (e) {
        weir__log(WEIR__LOG_ERROR, LOG, "job %" PRIu64 ": could not take its Deploy: %s", d->job,
                  weir_strerror(e));
        refuse_deploy(wk, ob, d, e, "the worker is out of memory");
        if (J)
            wjob_free(J);
    }
}

static void on_peer_update(worker *wk, weir__cl_peer_update *u)
{
    pthread_mutex_lock(&wk->mu);
    wjob *J = find_locked(wk, u->job, 1);
    if (J && J->attempt == u->attempt && !J->peers) {
        J->peers = weir__calloc(u->peers.n ? u->peers.n : 1, sizeof(*J->peers));
        for (uint32_t i = 0; J->peers && i < u->peers.n; i++) {
            J->peers[i] = (wpeer){u->peers.v[i].channel, u->peers.v[i].host, u->peers.v[i].port};
            u->peers.v[i].host = NULL; /* taken */
            J->npeers++;
        }
        int one = 1;
        weir_chan_try_send(J->go, &one);
    }
    pthread_mutex_unlock(&wk->mu);
}

static void cancel_all(worker *wk, uint64_t job)
{
    pthread_mutex_lock(&wk->mu);
    for (size_t i = 0; i < wk->njobs; i++)
        if (!wk->jobs[i]->ended && (!job || wk->jobs[i]->job == job))
            weir_task_cancel(wk->jobs[i]->task);
    pthread_mutex_unlock(&wk->mu);
}

static void on_checkpoint(worker *wk, int kind, uint64_t job, uint64_t id)
{
    pthread_mutex_lock(&wk->mu);
    wjob *J = find_locked(wk, job, 1);
    if (J)
        deliver_locked(J, kind, id);
    pthread_mutex_unlock(&wk->mu);
}

/* Heartbeats every interval; and the outbox's own stall verdict: a
 * coordinator that stopped reading ends the session (the socket is shut
 * down, which the session's reader meets). */
typedef struct hb_arg {
    worker *wk;
    weir__outbox *ob;
    int fd;
    int64_t ms;
    int stats; /* the coordinator takes SubtaskStats (version 3 on) */
} hb_arg;

/* How often a session reports its subtasks' figures. */
#define STATS_MS 1000

/* One SubtaskStats per share of this session that runs now: every
 * operator of every subtask the share holds, its counts since the share
 * started. Built under mu (the share's job is read, not changed), posted
 * outside it. */
static void post_stats(worker *wk, weir__outbox *ob)
{
    weir__cl_msg *ms = NULL;
    size_t nm = 0;
    pthread_mutex_lock(&wk->mu);
    ms = wk->njobs ? weir__calloc(wk->njobs, sizeof(*ms)) : NULL;
    for (size_t i = 0; ms && i < wk->njobs; i++) {
        wjob *J = wk->jobs[i];
        if (J->ended || J->ob != ob || !J->j || !J->plan)
            continue;
        const weir__plan *p = J->plan;
        size_t n = 0;
        for (uint32_t k = 0; k < J->nsubs; k++)
            if (J->subs[k].chain < p->nchains)
                n += p->chains[J->subs[k].chain].nops;
        if (!n || n > WEIR_CLUSTER_STATS_MAX)
            continue;
        weir__cl_op_figures *f = weir__calloc(n, sizeof(*f));
        if (!f)
            break;
        n = 0;
        for (uint32_t k = 0; k < J->nsubs; k++) {
            const weir__cl_subtask *st = &J->subs[k];
            if (st->chain >= p->nchains)
                continue;
            for (uint32_t x = 0; x < p->chains[st->chain].nops; x++) {
                uint32_t op = p->chains[st->chain].ops[x];
                weir_op_stats os;
                if (weir_job_op_subtask_stats(J->j, (int)op, (int)st->sub, &os) != 0)
                    continue;
                f[n++] = (weir__cl_op_figures){
                    op, st->sub, os.records_in, os.records_out, os.backpressure_ns, os.watermark};
            }
        }
        weir__cl_msg *m = &ms[nm++];
        m->kind = WEIR_CLUSTER_SUBTASK_STATS;
        m->u.stats = (weir__cl_subtask_stats){J->job, J->attempt, {f, (uint32_t)n}};
    }
    pthread_mutex_unlock(&wk->mu);
    for (size_t i = 0; i < nm; i++) {
        weir__cl_post(ob, &ms[i], WEIR__OUTBOX_CONTROL);
        weir__free(ms[i].u.stats.ops.v);
    }
    weir__free(ms);
}

static intptr_t heartbeat_main(void *arg)
{
    hb_arg *a = arg;
    weir__cl_msg m = {.kind = WEIR_CLUSTER_HEARTBEAT};
    int64_t next_stats = weir_time_after_ms(STATS_MS);
    for (uint64_t seq = 1; weir_time_sleep(a->ms * WEIR_MSEC) == 0; seq++) {
        m.u.heartbeat.seq = seq;
        if (weir__cl_post(a->ob, &m, WEIR__OUTBOX_CONTROL) == -EPIPE)
            break;
        if (a->stats && weir_time_now() >= next_stats) {
            next_stats = weir_time_after_ms(STATS_MS);
            post_stats(a->wk, a->ob);
        }
        if (weir__outbox_check(a->ob, weir_time_now()) != WEIR__OUTBOX_OK) {
            char text[WEIR__OUTBOX_VERDICT_MAX];
            weir__outbox_verdict(a->ob, text, sizeof(text));
            weir__log(WEIR__LOG_WARN, LOG, "ending the session: %s", text);
            shutdown(a->fd, SHUT_RDWR);
            break;
        }
    }
    return 0;
}

/* ---- following the leader (ha_dir) ------------------------------------------------------ */
/* How often a session reads the leader file, and a commit always does. */
#define LEADER_WATCH_MS 250

/* When a session accepted its last frames (wall-clock ms, a ring): a
 * frame accepted after the leader file's next leader came to lead was a
 * superseded leader's, taken before the worker knew - what
 * weir_worker_stale_frames_accepted_total counts. */
#define ACCEPTED_RING 64
typedef struct accepted {
    int64_t ms[ACCEPTED_RING];
    unsigned n; /* frames accepted in the session */
} accepted;

/* With ha_dir: whether the leader file names an epoch above the one this
 * session is bound to - a new leader elected while this session's
 * coordinator was frozen, say. If so the worker rebinds to it (frames of
 * the superseded leader are dropped and counted from now on), counts the
 * frames acc says it accepted after the new leader came to lead (the
 * ring's reach at most; clocks of one host, or kept in step), and says
 * so: 1. 0 otherwise, or when the file cannot be read. */
static int leader_moved_on(worker *wk, const accepted *acc)
{
    if (!wk->o.ha_dir || wk->o.fd_given)
        return 0;
    weir__ha_leader l;
    char msg[512];
    if (weir__ha_read_leader_pooled(wk->o.ha_dir, &l, msg, sizeof(msg)) != 0)
        return 0;
    pthread_mutex_lock(&wk->mu);
    uint64_t bound = wk->epoch;
    int moved = l.epoch > bound;
    if (moved)
        wk->epoch = wk->epoch_max = l.epoch;
    pthread_mutex_unlock(&wk->mu);
    if (!moved)
        return 0;
    unsigned stale = 0, have = acc->n < ACCEPTED_RING ? acc->n : ACCEPTED_RING;
    for (unsigned i = 0; i < have; i++)
        stale += acc->ms[i] > l.elected_ms;
    atomic_fetch_add(&wk->stale, stale);
    weir__log(WEIR__LOG_WARN, LOG,
              "%s names a new leader, epoch %" PRIu64 " above this session's %" PRIu64
              ": following it%s",
              wk->o.ha_dir, l.epoch, bound,
              stale ? " (frames of the superseded leader were taken after it was elected)" : "");
    return 1;
}

/* One session, from connect to its end. 1: registered and ended (go
 * again), 0: could not register (retry later), < 0: give up. */
static int session(worker *wk, const char *host, int port, char *msg, size_t cap)
{
    int fd;
    if (wk->o.fd_given) {
        fd = wk->o.fd;
    } else {
        fd = weir_net_connect(host, port, weir_time_after_ms(10000));
        if (fd < 0) {
            snprintf(msg, cap, "connecting to %s: %s", wk->o.coordinator, weir_net_strerror(fd));
            return 0;
        }
        weir_net_set_nodelay(fd, 1);
    }
    weir__cl_link link = {.fd = fd};
    if (wk->o.tls && !wk->o.fd_given) {
        char tmsg[512];
        int te = weir_tls_connect(wk->o.tls, fd, host, weir_time_after_ms(10000), &link.tls, tmsg,
                                  sizeof(tmsg));
        if (te < 0) {
            snprintf(msg, cap, "connecting to %s: TLS handshake: %.400s", wk->o.coordinator, tmsg);
            weir_io_close(fd);
            return 0;
        }
    }
    weir__cl_msg m = {.kind = WEIR_CLUSTER_REGISTER};
    m.u.reg = (weir__cl_register){WEIR_CLUSTER_PROTO_VERSION,
                                  WEIR_CLUSTER_PROTO_MIN_COMPAT,
                                  (char *)wk->o.id,
                                  (char *)(wk->o.data_host ? wk->o.data_host : ""),
                                  wk->o.slots ? wk->o.slots : WEIR__WORKER_SLOTS,
                                  wk->o.http_port};
    weir_frame_parser fp;
    weir_frame_parser_init(&fp, &(weir_frame_limits){.max_frame = WEIR_CLUSTER_FRAME_MAX,
                                                     .max_first = WEIR_CLUSTER_FRAME_MAX});
    int e = weir__cl_send(&link, &m, weir_time_after_ms(10000));
    weir__cl_msg ack;
    char why[512] = "";
    if (!e)
        e = weir__cl_recv(&link, &fp, &ack, NULL, weir_time_after_ms(10000), why, sizeof(why));
    else
        snprintf(why, sizeof(why), "%s", weir_net_strerror(e));
    if (e <= 0) {
        snprintf(msg, cap, "registering with %s: %s%s", wk->o.coordinator,
                 e == 0 ? "the coordinator closed the connection" : why,
                 !link.tls && (e == 0 || e == -ECONNRESET || e == -EMSGSIZE || e == -EBADMSG)
                     ? " (does it ask for TLS? give the worker --tls-ca)"
                     : "");
        weir_frame_parser_close(&fp);
        weir__cl_link_close(&link);
        return 0;
    }
    int rc = 1;
    if (ack.kind != WEIR_CLUSTER_REGISTER_ACK) {
        snprintf(msg, cap, "registering with %s: it answered a %s", wk->o.coordinator,
                 weir__cl_kind_name(ack.kind));
        rc = 0;
    } else if (weir__cl_version_check("worker", WEIR_CLUSTER_PROTO_VERSION,
                                      WEIR_CLUSTER_PROTO_MIN_COMPAT, "coordinator",
                                      ack.u.reg_ack.version, ack.u.reg_ack.min_compat, why,
                                      sizeof(why)) < 0) {
        snprintf(msg, cap, "%s", why);
        rc = -EPROTONOSUPPORT;
    } else if (ack.u.reg_ack.status != WEIR__CL_ACCEPTED) {
        snprintf(msg, cap, "the coordinator refused the registration: %s", ack.u.reg_ack.message);
        rc = ack.u.reg_ack.status == WEIR__CL_RETRY ? 0 : -EPERM;
    }
    pthread_mutex_lock(&wk->mu);
    if (rc == 1 && ack.epoch < wk->epoch_max) {
        /* A leader superseded since this worker was admitted by a later
         * one (it woke from a pause, say): it must not get the worker. */
        snprintf(msg, cap,
                 "%s admitted it with epoch %" PRIu64 ", below epoch %" PRIu64
                 " bound before: a superseded leader",
                 wk->o.coordinator, ack.epoch, wk->epoch_max);
        rc = 0;
    } else if (rc == 1) {
        wk->epoch = ack.epoch;
        if (ack.epoch > wk->epoch_max)
            wk->epoch_max = ack.epoch;
    }
    pthread_mutex_unlock(&wk->mu);
    uint32_t hb =
        ack.u.reg_ack.heartbeat_ms ? ack.u.reg_ack.heartbeat_ms : WEIR_CLUSTER_HEARTBEAT_MS;
    int stats = ack.u.reg_ack.version >= 3;
    weir__cl_msg_free(&ack);
    weir__outbox *ob = rc == 1 ? weir__outbox_new(fd, link.tls, NULL) : NULL;
    if (rc == 1 && !ob) {
        snprintf(msg, cap, "out of memory");
        rc = 0;
    }
    if (rc != 1) {
        weir_frame_parser_close(&fp);
        weir__cl_link_close(&link);
        return rc;
    }
    atomic_store(&wk->fd, fd);
    atomic_fetch_add(&wk->sessions, 1);
    pthread_mutex_lock(&wk->mu);
    wk->registered = 1;
    pthread_mutex_unlock(&wk->mu);
    if (wk->o.on_registered)
        wk->o.on_registered(wk->o.arg, wk->o.coordinator);
    weir__log(WEIR__LOG_INFO, LOG, "%s registered with %s", wk->o.id, wk->o.coordinator);
    hb_arg ha = {wk, ob, fd, hb, stats};
    weir_task *ht = weir_task_spawn(heartbeat_main, &ha,
                                    &(weir_spawn_opts){.name = "heartbeat", .stack_size = FIBER});
    /* The coordinator answers every heartbeat: a session silent for
     * WORKER_SILENCE_MS (no frame, and no byte of one arriving) has lost
     * its coordinator, partitioned or hung, and ends. The reads wake every
     * 200 ms to see whether the worker is stopping. */
    int64_t last = weir_time_now(), watched = last;
    size_t seen = 0;
    int superseded = 0; /* the leader file names a later leader */
    accepted acc = {.n = 0};
    for (;;) {
        weir__cl_msg f;
        weir_frame fr;
        if (!superseded && weir_time_now() - watched >= LEADER_WATCH_MS * WEIR_MSEC) {
            watched = weir_time_now();
            superseded = leader_moved_on(wk, &acc);
        }
        int64_t silence = last + WORKER_SILENCE_MS * WEIR_MSEC, tick = weir_time_after_ms(200);
        e = weir__cl_recv(&link, &fp, &f, &fr, tick < silence ? tick : silence, why, sizeof(why));
        if (e == -ETIMEDOUT) {
            size_t have = fp.have + fp.hdr_have;
            if (atomic_load(&wk->stopping))
                break;
            if (have != seen) { /* a large frame is arriving */
                seen = have;
                last = weir_time_now();
                continue;
            }
            if (weir_time_now() < silence || wk->o.fd_given)
                continue; /* (a coordinator in this process is not partitioned off) */
            snprintf(why, sizeof(why), "no frame from the coordinator for %d ms",
                     WORKER_SILENCE_MS);
        }
        if (e <= 0) {
            snprintf(msg, cap, "the session with %s ended: %s", wk->o.coordinator,
                     e == 0 ? "the coordinator closed it" : why);
            /* A coordinator in this process closes the socketpair only when
             * it stops (the stop fd may reach it before it reaches us) or
             * drops us, which it logs itself with the cause. */
            if (!atomic_load(&wk->stopping))
                weir__log(wk->o.fd_given && e == 0 ? WEIR__LOG_INFO : WEIR__LOG_WARN, LOG, "%s",
                          msg);
            break;
        }
        last = weir_time_now();
        seen = fp.have + fp.hdr_have;
        if (weir__cl_kind_dir(f.kind) != WEIR__CL_FROM_COORDINATOR) {
            weir__log(WEIR__LOG_WARN, LOG, "session with %s dropped: a %s from the coordinator",
                      wk->o.coordinator, weir__cl_kind_name(f.kind));
            weir__cl_msg_free(&f);
            weir_frame_free(&fr);
            break;
        }
        /* A commit is the one frame whose effect cannot be taken back:
         * the leader file is read again first, whatever the last watch. */
        if (!superseded && f.kind == WEIR_CLUSTER_COMMIT_CHECKPOINT) {
            watched = weir_time_now();
            superseded = leader_moved_on(wk, &acc);
        }
        pthread_mutex_lock(&wk->mu);
        uint64_t bound = wk->epoch;
        if (f.epoch > bound) /* a new leader that kept the connection */
            wk->epoch = wk->epoch_max = f.epoch;
        pthread_mutex_unlock(&wk->mu);
        if (f.epoch < bound) {
            atomic_fetch_add(&wk->fenced, 1);
            weir__log(WEIR__LOG_ERROR, LOG,
                      "dropped a %s of epoch %" PRIu64 " (bound to %" PRIu64 ")",
                      weir__cl_kind_name(f.kind), f.epoch, bound);
            if (superseded) {
                /* Its coordinator is a superseded leader still talking:
                 * go to the one the leader file names. */
                snprintf(msg, cap,
                         "the session with %s ended: a superseded leader (epoch %" PRIu64
                         " below %" PRIu64 ")",
                         wk->o.coordinator, f.epoch, bound);
                weir__log(WEIR__LOG_WARN, LOG, "%s", msg);
                weir__cl_msg_free(&f);
                weir_frame_free(&fr);
                break;
            }
        } else {
            acc.ms[acc.n++ % ACCEPTED_RING] = weir__wall_ms();
            switch (f.kind) {
            case WEIR_CLUSTER_DEPLOY:
                on_deploy(wk, ob, &f.u.deploy);
                break;
            case WEIR_CLUSTER_PEER_UPDATE:
                on_peer_update(wk, &f.u.peer_update);
                break;
            case WEIR_CLUSTER_CANCEL_TASKS:
                cancel_all(wk, f.u.cancel_tasks.job);
                break;
            case WEIR_CLUSTER_TRIGGER_CHECKPOINT:
                on_checkpoint(wk, WEIR__CK_TRIGGER, f.u.checkpoint.job, f.u.checkpoint.id);
                break;
            case WEIR_CLUSTER_COMMIT_CHECKPOINT:
                on_checkpoint(wk, WEIR__CK_COMPLETE, f.u.checkpoint.job, f.u.checkpoint.id);
                break;
            case WEIR_CLUSTER_ABORT_CHECKPOINT:
                on_checkpoint(wk, WEIR__CK_ABORT, f.u.abort_checkpoint.job,
                              f.u.abort_checkpoint.id);
                break;
            case WEIR_CLUSTER_FINAL_CHECKPOINT_ASSIGNED:
                on_checkpoint(wk, WEIR__CK_FINAL, f.u.checkpoint.job, f.u.checkpoint.id);
                break;
            default: /* HeartbeatAck */
                break;
            }
        }
        weir__cl_msg_free(&f);
        weir_frame_free(&fr);
    }
    /* The session is over: every share is cancelled and drained (their
     * SubtaskFinished still go out while the outbox writes). */
    cancel_all(wk, 0);
    for (;;) {
        pthread_mutex_lock(&wk->mu);
        int live = 0;
        for (size_t i = 0; i < wk->njobs; i++)
            live += !wk->jobs[i]->ended;
        pthread_mutex_unlock(&wk->mu);
        if (!live)
            break;
        weir_time_sleep(5 * WEIR_MSEC);
    }
    /* What the outbox holds (the shares' last reports) gets up to a second. */
    int64_t deadline = weir_time_after_ms(1000);
    for (;;) {
        weir__outbox_stats st;
        weir__outbox_stats_get(ob, &st);
        if (st.stopped || !st.frames_pending || weir_time_now() >= deadline)
            break;
        weir_time_sleep(5 * WEIR_MSEC);
    }
    atomic_store(&wk->fd, -1);
    pthread_mutex_lock(&wk->mu);
    wk->registered = 0;
    pthread_mutex_unlock(&wk->mu);
    if (ht) {
        weir_task_cancel(ht);
        weir_task_join(ht, NULL, WEIR_FOREVER);
    }
    weir__outbox_free(ob);
    weir_frame_parser_close(&fp);
    weir__cl_link_close(&link);
    return 1;
}

static intptr_t stop_main(void *arg)
{
    worker *wk = arg;
    if (weir__cl_wait_stop(wk->o.stop_fd, LOG) < 0)
        return 0;
    atomic_store(&wk->stopping, 1);
    weir__log(WEIR__LOG_INFO, LOG, "%s stopping", wk->o.id);
    /* The session's reader sees `stopping` within 200 ms, drains the
     * cancelled shares (their reports go out) and ends. */
    cancel_all(wk, 0);
    return 0;
}

/* ---- HTTP ---------------------------------------------------------------------------------- */
static int h_health(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req;
    worker *wk = arg;
    pthread_mutex_lock(&wk->mu);
    int ok = wk->registered && !atomic_load(&wk->stopping);
    pthread_mutex_unlock(&wk->mu);
    json_t *v = json_pack("{s:s, s:s, s:s}", "status", ok ? "ok" : "connecting", "role", "worker",
                          "id", wk->o.id);
    int e = v ? weir_http_res_json(res, ok ? 200 : 503, v) : -ENOMEM;
    json_decref(v);
    return e;
}

static int h_worker(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req;
    worker *wk = arg;
    json_t *jobs = json_array();
    pthread_mutex_lock(&wk->mu);
    const char *state = atomic_load(&wk->stopping) ? "stopping"
                        : wk->registered           ? "registered"
                                                   : "connecting";
    for (size_t i = 0; jobs && i < wk->njobs; i++) {
        wjob *J = wk->jobs[i];
        if (!J->ended)
            json_array_append_new(jobs, json_pack("{s:I, s:i, s:s, s:i}", "job", (json_int_t)J->job,
                                                  "attempt", (int)J->attempt, "name", J->name,
                                                  "subtasks", (int)J->nsubs));
    }
    json_t *v = json_pack("{s:s, s:s, s:s, s:i, s:o, s:s, s:I}", "id", wk->o.id, "state", state,
                          "coordinator", wk->o.coordinator, "slots",
                          (int)(wk->o.slots ? wk->o.slots : WEIR__WORKER_SLOTS), "jobs", jobs,
                          "last_error", wk->last_error, "epoch", (json_int_t)wk->epoch);
    pthread_mutex_unlock(&wk->mu);
    int e = v ? weir_http_res_json(res, 200, v) : -ENOMEM;
    json_decref(v);
    return e;
}

static int h_metrics(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req;
    worker *wk = arg;
    pthread_mutex_lock(&wk->mu);
    uint64_t subtasks = 0;
    for (size_t i = 0; i < wk->njobs; i++)
        subtasks += wk->jobs[i]->ended ? 0 : wk->jobs[i]->nsubs;
    int registered = wk->registered;
    pthread_mutex_unlock(&wk->mu);
    char text[2048];
    int n = snprintf(text, sizeof(text),
                     "# HELP weir_worker_fenced_frames_total Coordinator frames dropped for an "
                     "epoch below the one bound.\n"
                     "# TYPE weir_worker_fenced_frames_total counter\n"
                     "weir_worker_fenced_frames_total %" PRIu64 "\n"
                     "# HELP weir_worker_stale_frames_accepted_total Coordinator frames "
                     "accepted after the leader file's next leader was elected, before this "
                     "worker read it.\n"
                     "# TYPE weir_worker_stale_frames_accepted_total counter\n"
                     "weir_worker_stale_frames_accepted_total %" PRIu64 "\n"
                     "# HELP weir_worker_sessions_total Sessions registered with a coordinator.\n"
                     "# TYPE weir_worker_sessions_total counter\n"
                     "weir_worker_sessions_total %" PRIu64 "\n"
                     "# HELP weir_worker_registered 1 while a session is registered.\n"
                     "# TYPE weir_worker_registered gauge\n"
                     "weir_worker_registered %d\n"
                     "# HELP weir_worker_subtasks Subtasks of the shares deployed here.\n"
                     "# TYPE weir_worker_subtasks gauge\n"
                     "weir_worker_subtasks %" PRIu64 "\n",
                     atomic_load(&wk->fenced), atomic_load(&wk->stale), atomic_load(&wk->sessions),
                     registered, subtasks);
    return weir_http_res_send(res, 200, "text/plain; version=0.0.4", text, (size_t)n);
}

/* The bearer token (WEIR_AUTH_TOKEN) is the HTTP server's: it guards every
 * route, /api/v1/health included. */
static int http_start(worker *wk, char *msg, size_t cap)
{
    const char *why = weir_http_server_auth_problem(NULL);
    if (why) {
        snprintf(msg, cap, "WEIR_AUTH_TOKEN: %s", why);
        return -EINVAL;
    }
    weir_http_server *s = weir_http_server_new(
        &(weir_http_server_opts){.host = "127.0.0.1", .port = wk->o.http_port, .listeners = 1});
    if (!s) {
        snprintf(msg, cap, "the HTTP server: %s", strerror(errno));
        return -errno;
    }
    int e;
    if ((e = weir_http_route(s, "GET", "/api/v1/health", h_health, wk, 0)) ||
        (e = weir_http_route(s, "GET", "/api/v1/worker", h_worker, wk, 0)) ||
        (e = weir_http_route(s, "GET", "/metrics", h_metrics, wk, 0)) ||
        (e = weir_http_server_start(s))) {
        snprintf(msg, cap, "the HTTP server on 127.0.0.1:%u: %s", wk->o.http_port,
                 weir_strerror(e));
        weir_http_server_free(s);
        return e;
    }
    wk->http = s;
    /* The port the coordinator is told about. */
    wk->o.http_port = (uint16_t)weir_http_server_port(s);
    if (wk->o.on_http)
        wk->o.on_http(wk->o.arg, "127.0.0.1", wk->o.http_port);
    return 0;
}

/* A given fd not handed to a session yet, closed (the worker owns it). */
static int given_fd_close(const weir__worker_opts *o, int e)
{
    if (o->fd_given)
        weir_io_close(o->fd);
    return e;
}

/* ---- finding the leader (ha_dir) --------------------------------------------------------- */
/* The leader the HA directory names, into host / *port: 1 (go and
 * register), 0 none to try now (why says so: no leader yet, one that has
 * not opened its port, one whose epoch is below the one this worker
 * admitted). */
static int find_leader(worker *wk, char *host, size_t cap, int *port, char *why, size_t wcap)
{
    weir__ha_leader l;
    char msg[512];
    int e = weir__ha_read_leader_pooled(wk->o.ha_dir, &l, msg, sizeof(msg));
    if (e == -ENOENT) {
        snprintf(why, wcap, "no leader in %s yet", wk->o.ha_dir);
        return 0;
    }
    if (e < 0) {
        snprintf(why, wcap, "%.*s", (int)(wcap > 1 ? wcap - 1 : 0), msg);
        return 0;
    }
    pthread_mutex_lock(&wk->mu);
    uint64_t max = wk->epoch_max;
    if (l.port > 0 && l.epoch >= max)
        snprintf(wk->leader, sizeof(wk->leader), "%s:%d", l.host, l.port);
    pthread_mutex_unlock(&wk->mu);
    if (l.port == 0) {
        snprintf(why, wcap, "the leader in %s (epoch %" PRIu64 ") has not opened its port yet",
                 wk->o.ha_dir, l.epoch);
        return 0;
    }
    if (l.epoch < max) {
        snprintf(why, wcap,
                 "%s names %s:%d with epoch %" PRIu64 ", below epoch %" PRIu64
                 " this worker was admitted under",
                 wk->o.ha_dir, l.host, l.port, l.epoch, max);
        return 0;
    }
    snprintf(host, cap, "%s", l.host);
    *port = l.port;
    return 1;
}

int weir__worker_run(const weir__worker_opts *o, char *msg, size_t cap)
{
    char host[WEIR_CLUSTER_HOST_MAX + 1];
    int port;
    if (!o->id || !*o->id || strlen(o->id) > WEIR_CLUSTER_REGISTER_STR_MAX) {
        snprintf(msg, cap, "the worker id must be 1 to %u bytes", WEIR_CLUSTER_REGISTER_STR_MAX);
        return given_fd_close(o, -EINVAL);
    }
    if (o->fd_given || (o->ha_dir && !o->coordinator)) {
        snprintf(host, sizeof(host), "-");
        port = 0;
    } else if (weir__cl_split_hostport(o->coordinator, host, sizeof(host), &port) < 0) {
        snprintf(msg, cap, "the coordinator \"%s\" is not HOST:PORT",
                 o->coordinator ? o->coordinator : "");
        return -EINVAL;
    }
    worker *wk = weir__calloc(1, sizeof(*wk));
    if (!wk) {
        snprintf(msg, cap, "out of memory");
        return given_fd_close(o, -ENOMEM);
    }
    int fd_left = o->fd_given; /* the given fd, until its session takes it */
    wk->o = *o;
    if (o->ha_dir && !o->fd_given) {
        snprintf(wk->leader, sizeof(wk->leader), "the leader in %s", o->ha_dir);
        wk->o.coordinator = wk->leader;
    }
    wk->tmplock = -1;
    atomic_store(&wk->fd, -1);
    pthread_mutex_init(&wk->mu, NULL);
    int e = 0;
    const char *dir = o->cache_dir;
    if (!dir) {
        if ((e = weir__cl_cache_dir_make("worker", wk->tmpdir, sizeof(wk->tmpdir), &wk->tmplock,
                                         msg, cap)) < 0)
            goto out;
        dir = wk->tmpdir;
    }
    if ((e = weir__plugin_cache_open(dir, &wk->cache, msg, cap)) < 0)
        goto out;
    if (!(wk->jobs_scope = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER))) {
        e = -ENOMEM;
        goto out;
    }
    if (o->http && (e = http_start(wk, msg, cap)) < 0)
        goto out;
    weir_task *st =
        o->stop_fd >= 0
            ? weir_task_spawn(stop_main, wk,
                              &(weir_spawn_opts){.name = "worker stop", .stack_size = FIBER})
            : NULL;
    int64_t backoff = 100;
    char last[512] = "";
    if (o->on_ready)
        o->on_ready(o->arg, wk);
    while (!atomic_load(&wk->stopping)) {
        char why[512] = "";
        fd_left = 0; /* the session closes it, whatever happens */
        int rc = wk->o.ha_dir && !o->fd_given
                     ? find_leader(wk, host, sizeof(host), &port, why, sizeof(why))
                     : 1;
        if (rc == 1)
            rc = session(wk, host, port, why, sizeof(why));
        if (o->fd_given) { /* its one session */
            if (rc <= 0 && !atomic_load(&wk->stopping)) {
                snprintf(msg, cap, "%s", why);
                e = rc < 0 ? rc : -ECONNRESET;
            }
            break;
        }
        if (rc < 0) {
            snprintf(msg, cap, "%s", why);
            e = rc;
            break;
        }
        if (why[0]) {
            pthread_mutex_lock(&wk->mu);
            snprintf(wk->last_error, sizeof(wk->last_error), "%s", why);
            pthread_mutex_unlock(&wk->mu);
        }
        if (rc == 1)
            backoff = 100;
        else if (strcmp(why, last) != 0) /* one line per new reason */
            weir__log(WEIR__LOG_WARN, LOG, "%s; retrying", why);
        snprintf(last, sizeof(last), "%s", why);
        if (atomic_load(&wk->stopping))
            break;
        /* Full jitter. */
        int64_t ms = 1 + (int64_t)((uint64_t)rand() % (uint64_t)backoff);
        for (int64_t t = 0; t < ms && !atomic_load(&wk->stopping); t += 20)
            weir_time_sleep(20 * WEIR_MSEC);
        backoff = backoff < 5000 ? backoff * 2 : 5000;
    }
    cancel_all(wk, 0);
    if (st) {
        weir_task_cancel(st);
        weir_task_join(st, NULL, WEIR_FOREVER);
    }
    weir_scope_join(wk->jobs_scope, NULL);
    if (o->on_ready)
        o->on_ready(o->arg, NULL);
out:
    if (wk->http) {
        weir_http_server_stop(wk->http, weir_time_after_ms(1000));
        weir_http_server_free(wk->http);
    }
    weir_scope_free(wk->jobs_scope);
    pthread_mutex_lock(&wk->mu);
    for (size_t i = 0; i < wk->njobs; i++) /* every fiber was joined with the scope */
        wjob_free(wk->jobs[i]);
    pthread_mutex_unlock(&wk->mu);
    weir__free(wk->jobs);
    weir__plugin_cache_free(wk->cache);
    weir__cl_cache_dir_remove(wk->tmpdir, wk->tmplock);
    pthread_mutex_destroy(&wk->mu);
    weir__free(wk);
    return fd_left ? given_fd_close(o, e) : e;
}
