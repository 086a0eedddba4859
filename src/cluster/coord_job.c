/* SPDX-License-Identifier: Apache-2.0 */
/*
 * coord_job.c - a job's life on the coordinator (coordinator.c's top
 * comment tells the whole): its fiber runs attempts - define, plan, place,
 * begin the checkpoint side (runner.c weir__job_coord_begin), Deploy,
 * SubtaskListening / PeerUpdate, run, and on a loss cancel, drain and
 * restart from the latest completed checkpoint within the restart budget -
 * then reports the end to the submitter (JobCompleted). The checkpoint
 * link of an attempt lives here too: the checkpoint coordinator's TRIGGER,
 * COMPLETE and ABORT go to every worker of the attempt as one frame each,
 * and its ACKs are the workers' SubtaskCheckpointed frames, which the
 * readers route here.
 */
#include <errno.h>
#include <inttypes.h>
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

/* ---- the checkpoint link of an attempt ------------------------------------------------------- */
typedef struct clink {
    weir__ckpt_link l;
    cjob *J;
    uint64_t last[WEIR__CK_LAST + 1]; /* the id last broadcast per kind */
} clink;

static int cl_ack(weir__ckpt_link *l, const weir__ckpt_msg *m)
{
    (void)l, (void)m;
    return -EINVAL; /* no subtask runs here */
}

static int cl_recv(weir__ckpt_link *l, weir__ckpt_msg *m, int64_t deadline)
{
    return weir_chan_recv(((clink *)l)->J->acks, m, deadline);
}

/* The coordinator sends a kind to every subtask in turn, all with one id:
 * one frame per worker of the attempt says it for all of its subtasks. */
static int cl_send(weir__ckpt_link *l, const weir__ckpt_msg *m)
{
    clink *k = (clink *)l;
    if (m->kind < WEIR__CK_TRIGGER || m->kind > WEIR__CK_LAST ||
        weir__ckpt_to_coordinator(m->kind) || k->last[m->kind] == m->id)
        return 0;
    k->last[m->kind] = m->id;
    cjob *J = k->J;
    weir__cl_msg f = {0};
    if (m->kind != WEIR__CK_ABORT) {
        f.kind = m->kind == WEIR__CK_TRIGGER    ? WEIR_CLUSTER_TRIGGER_CHECKPOINT
                 : m->kind == WEIR__CK_COMPLETE ? WEIR_CLUSTER_COMMIT_CHECKPOINT
                                                : WEIR_CLUSTER_FINAL_CHECKPOINT_ASSIGNED;
        f.u.checkpoint = (weir__cl_checkpoint){J->id, m->id};
    } else {
        f.kind = WEIR_CLUSTER_ABORT_CHECKPOINT;
        f.u.abort_checkpoint = (weir__cl_abort_checkpoint){J->id, m->id, "a subtask failed it"};
    }
    pthread_mutex_lock(&J->c->mu);
    for (uint32_t i = 0; i < J->naw; i++)
        if (!J->aw[i]->lost)
            weir__coord_post(J->aw[i], &f, WEIR__OUTBOX_CONTROL);
    pthread_mutex_unlock(&J->c->mu);
    return 0;
}

static void cl_free(weir__ckpt_link *l)
{
    weir__free(l);
}

static const weir__ckpt_link_ops clink_ops = {cl_ack, cl_recv, cl_send, NULL, cl_free};

static weir__ckpt_link *make_clink(void *arg, run *r)
{
    (void)r;
    clink *k = weir__calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->l.ops = &clink_ops;
    k->J = arg;
    return &k->l;
}

/* ---- the checkpoints' fence ------------------------------------------------------------------ */
/* With HA a checkpoint completes only while this coordinator leads: its
 * COMPLETED marker is written inside the leader's fence (ha.h), so a
 * superseded leader that runs on for a moment (frozen past its lease, then
 * woken) cannot complete one its successor does not know of. */
typedef struct fence_job {
    weir__ha *ha;
    char msg[400];
} fence_job;

static intptr_t b_fence(void *arg)
{
    fence_job *f = arg;
    return weir__ha_fence_enter(f->ha, f->msg, sizeof(f->msg));
}

static int ckpt_fence(void *arg, int *token, char *why, size_t cap)
{
    cjob *J = arg;
    *token = -1;
    if (!J->c->ha)
        return 0; /* no HA: nothing to fence */
    fence_job f = {.ha = J->c->ha};
    int fd = (int)weir__blocking_run_shielded(b_fence, &f);
    if (fd < 0) { /* any doubt: not ours to complete */
        snprintf(why, cap, "%s", f.msg[0] ? f.msg : weir_strerror(fd));
        return -ESTALE;
    }
    *token = fd;
    return 0;
}

static void ckpt_unfence(void *arg, int token)
{
    (void)arg;
    if (token >= 0)
        weir__ha_fence_leave(token);
}

/* ---- a job's attempts ------------------------------------------------------------------------ */
enum { A_OK = 0, A_FAILED, A_CANCELLED, A_LOST };

/* How long a subtask's failure waits for a loss that would explain it: a
 * worker that stops cancels its subtasks, reports them and closes its
 * session within about a second (its outbox's flush). */
#define LOSS_GRACE_MS 2000

typedef struct attempt {
    weir_job *j;
    weir__plan *plan;
    uint8_t *plan_bytes;
    size_t plan_len;
    uint32_t *place;   /* [nsubtasks]: index into J->aw */
    uint32_t *base;    /* [nchains]: plan order of subtask 0 of each chain */
    uint8_t *done;     /* [nsubtasks]: finished, or its worker lost */
    uint8_t *listened; /* [nsubtasks] */
    uint16_t *port;    /* [nchannels]: where its consumer listens */
    uint32_t ndone, nlistened;
    int saw_loss;       /* a worker of the attempt was lost (cause: the first) */
    int fatal;          /* a subtask's failure that a redeploy would repeat */
    int64_t fence;      /* no redeploy before this (a silent worker may still run) */
    uint64_t ckpt_seen; /* completed checkpoints observed into the metrics */
    uint64_t rin, rout;
    char why[WEIR_CLUSTER_MESSAGE_MAX];
    int32_t err;
} attempt;

void weir__coord_ev_free(ev *x)
{
    weir__free(x->message);
    weir__free(x->inputs);
}

static void attempt_free(cjob *J, attempt *a)
{
    coord *c = J->c;
    pthread_mutex_lock(&c->mu);
    for (uint32_t k = 0; a->place && a->plan && k < a->plan->nsubtasks; k++)
        J->aw[a->place[k]]->used--;
    if (J->plan && J->plan == a->plan)
        weir__jv_attempt_end(&J->view, J->cur, J->attempt);
    J->plan = NULL; /* what the HTTP API reads */
    J->place = J->base = NULL;
    J->cur = NULL;
    pthread_mutex_unlock(&c->mu);
    weir__free(a->place);
    weir__free(a->base);
    weir__free(a->done);
    weir__free(a->listened);
    weir__free(a->port);
    weir__free(a->plan_bytes);
    weir__plan_free(a->plan);
    if (a->j)
        weir_job_free(a->j);
    memset(a, 0, sizeof(*a));
}

static int64_t idx_of(const attempt *a, uint32_t chain, uint32_t sub)
{
    if (chain >= a->plan->nchains || sub >= a->plan->chains[chain].par)
        return -1;
    return (int64_t)a->base[chain] + sub;
}

/* Define, plan and place (reserving the slots). 0, -ENOSPC (no room now),
 * or another error with a->why. */
static int attempt_prepare(cjob *J, attempt *a)
{
    coord *c = J->c;
    char msg[1024];
    int e = weir_plugin_define(J->plugin, J->argc, J->argv, &a->j, msg, sizeof(msg));
    if (e) {
        snprintf(a->why, sizeof(a->why), "defining the job: %s", msg);
        return e;
    }
    uint32_t par = J->par ? J->par : (c->o.default_parallelism ? c->o.default_parallelism : 1);
    if ((e = weir__plan_make(a->j, (int)par, 4, &a->plan, msg, sizeof(msg))) < 0) {
        snprintf(a->why, sizeof(a->why), "planning the job: %s", msg);
        return e;
    }
    weir_frame_builder fb;
    const uint8_t *f;
    size_t len;
    if ((e = weir__plan_encode(a->plan, &fb)) == 0 &&
        (e = weir_frame_builder_finish(&fb, &f, &len)) == 0) {
        a->plan_len = len - WEIR_FRAME_HEADER;
        if ((a->plan_bytes = weir__malloc(a->plan_len)))
            memcpy(a->plan_bytes, f + WEIR_FRAME_HEADER, a->plan_len);
        else
            e = -ENOMEM;
    }
    weir_frame_builder_close(&fb);
    const weir__plan *p = a->plan;
    a->place = weir__calloc(p->nsubtasks ? p->nsubtasks : 1, sizeof(*a->place));
    a->base = weir__calloc(p->nchains ? p->nchains : 1, sizeof(*a->base));
    a->done = weir__calloc(p->nsubtasks ? p->nsubtasks : 1, 1);
    a->listened = weir__calloc(p->nsubtasks ? p->nsubtasks : 1, 1);
    a->port = weir__calloc(p->nchannels ? p->nchannels : 1, sizeof(*a->port));
    if (!e && (!a->place || !a->base || !a->done || !a->listened || !a->port))
        e = -ENOMEM;
    if (e) {
        weir__free(a->place);
        a->place = NULL;
        snprintf(a->why, sizeof(a->why), "out of memory");
        return e;
    }
    for (uint32_t ci = 1; ci < p->nchains; ci++)
        a->base[ci] = a->base[ci - 1] + p->chains[ci - 1].par;
    /* Placement over the live workers, with their free slots. */
    pthread_mutex_lock(&c->mu);
    size_t nlive = 0;
    for (size_t i = 0; i < c->nws; i++)
        nlive += !c->ws[i]->lost;
    weir__place_worker *pw = weir__calloc(nlive ? nlive : 1, sizeof(*pw));
    wsess **live = weir__calloc(nlive ? nlive : 1, sizeof(*live));
    e = pw && live ? 0 : -ENOMEM;
    size_t n = 0;
    for (size_t i = 0; !e && i < c->nws; i++) {
        wsess *w = c->ws[i];
        if (w->lost || w->leaving)
            continue;
        live[n] = w;
        pw[n++] = (weir__place_worker){w->id, w->slots > w->used ? w->slots - w->used : 0};
    }
    if (!e && n == 0) {
        e = -ENOSPC;
        snprintf(a->why, sizeof(a->why), "no worker is registered");
    } else if (!e) {
        e = weir__place(p, pw, n, a->place, a->why, sizeof(a->why));
    }
    if (!e) {
        /* The workers used, in first-use order; place[] re-indexed. */
        wsess **v = weir__calloc(n, sizeof(*v));
        uint32_t nv = 0;
        e = v ? 0 : -ENOMEM;
        for (uint32_t k = 0; !e && k < p->nsubtasks; k++) {
            wsess *w = live[a->place[k]];
            uint32_t x = 0;
            while (x < nv && v[x] != w)
                x++;
            if (x == nv)
                v[nv++] = w;
            a->place[k] = x;
            w->used++;
        }
        if (!e) {
            weir__coord_aw_set_locked(J, v, nv);
            J->plan = a->plan;
            J->place = a->place;
            J->base = a->base;
            J->cur = a->j;
            weir__jv_attempt_begin(&J->view, a->plan); /* -ENOMEM: no figures shown */
        }
    }
    pthread_mutex_unlock(&c->mu);
    weir__free(pw);
    weir__free(live);
    if (e) {
        weir__free(a->place);
        a->place = NULL;
    }
    return e;
}

/* Each worker its Deploy. */
static void post_deploys(cjob *J, attempt *a, uint64_t restore_id, uint64_t first_id)
{
    coord *c = J->c;
    const weir__plan *p = a->plan;
    weir__cl_subtask *subs = weir__calloc(p->nsubtasks ? p->nsubtasks : 1, sizeof(*subs));
    weir__cl_deploy_plugin *pl = weir__calloc(J->nplugins, sizeof(*pl));
    if (!subs || !pl) {
        weir__free(subs);
        weir__free(pl);
        return; /* the workers never report: the attempt times out */
    }
    for (uint32_t x = 0; x < J->naw; x++) {
        uint32_t n = 0;
        for (uint32_t ci = 0; ci < p->nchains; ci++)
            for (uint32_t s = 0; s < p->chains[ci].par; s++)
                if (a->place[a->base[ci] + s] == x)
                    subs[n++] = (weir__cl_subtask){ci, s};
        weir__cl_msg m = {.kind = WEIR_CLUSTER_DEPLOY};
        weir__cl_deploy *d = &m.u.deploy;
        d->job = J->id;
        d->attempt = J->attempt;
        d->name = J->name;
        d->plan = (weir__cl_bytes){a->plan_bytes, (uint32_t)a->plan_len};
        d->subtasks.v = subs;
        d->subtasks.n = n;
        d->args.v = J->argv + 1;
        d->args.n = (uint32_t)(J->argc - 1);
        d->checkpoint_dir = J->checkpoint_dir ? J->checkpoint_dir : "";
        d->checkpoint_interval_ms = J->interval_ms;
        d->restore_id = restore_id;
        d->first_id = first_id;
        d->idle_timeout_ms = J->idle_ms;
        d->state_backend = J->state_backend ? J->state_backend : "";
        d->plugins.v = pl;
        d->plugins.n = J->nplugins;
        /* Under mu only the shipped set's say; the frame (megabytes, with
         * plugin bytes) is encoded and posted outside it. The session is
         * the attempt's (referenced): its outbox stays valid. */
        pthread_mutex_lock(&c->mu);
        wsess *w = J->aw[x];
        for (uint32_t i = 0; i < J->nplugins; i++) {
            pl[i] = J->plugins[i];
            if (!weir__plugin_shipped_plan(&w->shipped, pl[i].sha256, pl[i].size))
                pl[i].bytes = (weir__cl_bytes){NULL, 0};
        }
        int lost = w->lost;
        pthread_mutex_unlock(&c->mu);
        int e = lost ? -EPIPE : weir__coord_post(w, &m, WEIR__OUTBOX_DEPLOY);
        if (e) /* its loss (or the overflow verdict) folds the attempt */
            weir__log(WEIR__LOG_WARN, LOG, "job %" PRIu64 ": Deploy to %s not posted: %s", J->id,
                      w->id, weir_strerror(e));
    }
    weir__free(subs);
    weir__free(pl);
}

static void post_peer_updates(cjob *J, attempt *a)
{
    coord *c = J->c;
    const weir__plan *p = a->plan;
    weir__cl_peer *peers = weir__calloc(p->nchannels ? p->nchannels : 1, sizeof(*peers));
    if (!peers)
        return;
    for (uint32_t x = 0; x < J->naw; x++) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < p->nchannels; i++) {
            const weir__plan_channel *pc = &p->channels[i];
            uint32_t from = a->place[a->base[pc->from_chain] + pc->from_sub];
            uint32_t to = a->place[a->base[pc->to_chain] + pc->to_sub];
            if (from == x && to != x && a->port[pc->id])
                peers[n++] = (weir__cl_peer){pc->id, J->aw[to]->host, a->port[pc->id]};
        }
        weir__cl_msg m = {.kind = WEIR_CLUSTER_PEER_UPDATE};
        m.u.peer_update.job = J->id;
        m.u.peer_update.attempt = J->attempt;
        m.u.peer_update.peers.v = peers;
        m.u.peer_update.peers.n = n;
        pthread_mutex_lock(&c->mu);
        if (!J->aw[x]->lost)
            weir__coord_post(J->aw[x], &m, WEIR__OUTBOX_CONTROL);
        pthread_mutex_unlock(&c->mu);
    }
    weir__free(peers);
}

static void post_cancels(cjob *J, attempt *a, const char *reason)
{
    coord *c = J->c;
    weir__cl_msg m = {.kind = WEIR_CLUSTER_CANCEL_TASKS};
    m.u.cancel_tasks = (weir__cl_cancel_tasks){J->id, J->attempt, (char *)reason};
    pthread_mutex_lock(&c->mu);
    for (uint32_t x = 0; x < J->naw; x++) {
        int pending = 0;
        for (uint32_t k = 0; a->plan && k < a->plan->nsubtasks; k++)
            pending |= a->place[k] == x && !a->done[k];
        if (pending && !J->aw[x]->lost)
            weir__coord_post(J->aw[x], &m, WEIR__OUTBOX_CONTROL);
    }
    pthread_mutex_unlock(&c->mu);
}

/* Mark every subtask of w done (lost with it). */
/* Mark every subtask of w that still ran done (lost with it); how many. */
static uint32_t fold_lost(attempt *a, cjob *J, const wsess *w)
{
    uint32_t n = 0;
    for (uint32_t k = 0; a->plan && k < a->plan->nsubtasks; k++)
        if (J->aw[a->place[k]] == w && !a->done[k]) {
            a->done[k] = 1;
            a->ndone++;
            n++;
        }
    return n;
}

/* One event of the running attempt. Returns the outcome when it ends the
 * attempt's run (A_*), or -1 to go on. */
static int on_event(cjob *J, attempt *a, run *r, ev *x, int *outcome, char *cause, size_t cap)
{
    int64_t k =
        x->kind == EV_LISTENING || x->kind == EV_FINISHED ? idx_of(a, x->chain, x->sub) : -1;
    wsess *w = J->aw ? weir__coord_aw_find(J, x->ws) : NULL; /* NULL: not this attempt's */
    int own = k >= 0 && w && x->attempt == J->attempt && J->aw[a->place[k]] == w;
    switch (x->kind) {
    case EV_LISTENING:
        if (!own || a->listened[k])
            break;
        a->listened[k] = 1;
        a->nlistened++;
        for (uint32_t i = 0; i < x->ninputs; i++)
            if (x->inputs[i].channel < a->plan->nchannels) {
                const weir__plan_channel *pc = &a->plan->channels[x->inputs[i].channel];
                if (pc->to_chain == x->chain && pc->to_sub == x->sub)
                    a->port[pc->id] = x->inputs[i].port;
            }
        break;
    case EV_FINISHED:
        if (!own || a->done[k])
            break;
        a->done[k] = 1;
        a->ndone++;
        a->rin += x->rin;
        a->rout += x->rout;
        if (r)
            weir__job_coord_finished(r, x->chain, x->sub);
        if (x->fatal) /* a redeploy would fail alike: never a restart */
            a->fatal = 1;
        if (x->err && x->err != -ECANCELED) {
            pthread_mutex_lock(&J->c->mu);
            weir__jv_error_add(
                &J->view, J->attempt, x->chain, x->sub,
                a->j ? weir_job_op_name(a->j, (int)a->plan->chains[x->chain].ops[0]) : "", w->id,
                x->message && *x->message ? x->message : weir_strerror(x->err));
            pthread_mutex_unlock(&J->c->mu);
        }
        if (x->err == 0 || *outcome != A_OK)
            break;
        if (x->err == -ECANCELED && !x->fatal) { /* its worker cancelled it: it is going away */
            pthread_mutex_lock(&J->c->mu);
            w->leaving = 1; /* a restart places nothing there */
            pthread_mutex_unlock(&J->c->mu);
            *outcome = A_LOST;
            snprintf(cause, cap, "worker %s cancelled its subtasks", w->id);
        } else {
            *outcome = A_FAILED;
            a->err = x->err;
            snprintf(a->why, sizeof(a->why), "%s",
                     x->message && *x->message ? x->message : weir_strerror(x->err));
        }
        break;
    case EV_LOST:
        /* A worker whose subtasks had all ended takes nothing with it -
         * unless the attempt is failing: a subtask's failure then may be
         * that worker's going (it cancelled its subtasks, then broke their
         * channels), and the loss makes it a restart. */
        if (!w || (fold_lost(a, J, w) == 0 && *outcome == A_OK))
            break;
        if (w->silent) {
            int64_t f = w->lost_at + (WEIR_CLUSTER_WORKER_SILENCE_MS + 500) * WEIR_MSEC;
            if (f > a->fence)
                a->fence = f;
        }
        if (!a->saw_loss)
            snprintf(cause, cap, "worker %s lost (%s)", w->id, w->cause);
        a->saw_loss = 1;
        if (*outcome == A_OK)
            *outcome = A_LOST;
        break;
    case EV_CANCEL:
        if (*outcome == A_OK) {
            *outcome = A_CANCELLED;
            snprintf(a->why, sizeof(a->why), "%s", x->message ? x->message : "cancelled");
        }
        break;
    default:
        break;
    }
    weir__coord_ev_free(x);
    return -1;
}

/* Wait for events until pred holds or the outcome turns, the deadline
 * passes (-ETIMEDOUT) or the checkpoint side failed (j's error). */
static int wait_until(cjob *J, attempt *a, run *r, int (*pred)(const attempt *), int64_t deadline,
                      int *outcome, char *cause, size_t cap)
{
    int ok = *outcome == A_OK; /* a turn of the outcome ends the wait */
    while (!pred(a)) {
        if (ok && *outcome != A_OK)
            return 0;
        int je;
        if (a->j && *outcome == A_OK && (je = weir__job_error_copy(a->j, a->why, sizeof(a->why)))) {
            *outcome = A_FAILED; /* the checkpoint side failed (a manifest write...) */
            a->err = je;
            return 0;
        }
        if (a->j) { /* a checkpoint completed: its duration into the metrics */
            weir_ckpt_stats cs;
            weir_job_ckpt_stats(a->j, &cs);
            if (cs.completed > a->ckpt_seen) {
                a->ckpt_seen = cs.completed;
                weir_histogram_observe(J->c->m.ckpt_seconds, (double)cs.last_duration_ns / 1e9);
            }
        }
        ev x;
        int64_t tick = weir_time_after_ms(100);
        int e = weir_chan_recv(J->events, &x, tick < deadline ? tick : deadline);
        if (e == -ETIMEDOUT) {
            if (weir_time_now() >= deadline)
                return -ETIMEDOUT;
            continue;
        }
        if (e < 0)
            return e;
        on_event(J, a, r, &x, outcome, cause, cap);
    }
    return 0;
}

static int all_listened(const attempt *a)
{
    return a->nlistened == a->plan->nsubtasks;
}

static int all_done(const attempt *a)
{
    return a->ndone == a->plan->nsubtasks;
}

/* The drain after an attempt went wrong: every subtask finished or lost. */
static int saw_loss(const attempt *a)
{
    return a->saw_loss;
}

static int drain(cjob *J, attempt *a, run *r, int *outcome, char *cause, size_t cap)
{
    coord *c = J->c;
    int e = wait_until(J, a, r, all_done, weir_time_after_ms(c->drain_ms), outcome, cause, cap);
    if (e != -ETIMEDOUT)
        return e;
    char *p = a->why;
    size_t left = sizeof(a->why);
    int n = snprintf(
        p, left, "the restart's drain timed out after %" PRId64 " ms; not drained:", c->drain_ms);
    for (uint32_t ci = 0; ci < a->plan->nchains && n > 0 && (size_t)n < left; ci++)
        for (uint32_t s = 0; s < a->plan->chains[ci].par; s++) {
            uint32_t k = a->base[ci] + s;
            if (a->done[k])
                continue;
            p += n;
            left -= (size_t)n;
            n = snprintf(p, left, " \"%s\" %u on %s",
                         a->j ? weir_job_op_name(a->j, (int)a->plan->chains[ci].ops[0]) : "?", s,
                         J->aw[a->place[k]]->id);
            if (n < 0 || (size_t)n >= left)
                break;
        }
    return -ETIMEDOUT;
}

typedef struct totals {
    uint64_t completed, latest, restored;
    uint32_t sources, sinks;
} totals;

/* Between two tries of an attempt that cannot start yet: wait ms for a
 * cancellation. 0 none came (try again; any other event is dropped, no
 * attempt runs to take it), A_CANCELLED a client's or the stop's, its
 * reason in a->why, or a negative errno: the wait itself was cancelled
 * (this coordinator is going away). */
/* a->why for an attempt its coordinator's stop ended. */
static void stop_why(cjob *J, attempt *a)
{
    pthread_mutex_lock(&J->c->mu);
    snprintf(a->why, sizeof(a->why), "%s", weir__coord_stop_why_locked(J->c));
    pthread_mutex_unlock(&J->c->mu);
}

static int wait_cancel(cjob *J, attempt *a, int64_t ms)
{
    ev x;
    int r = weir_chan_recv(J->events, &x, weir_time_after_ms(ms));
    if (r == -ETIMEDOUT)
        return 0;
    if (r != 0) {
        stop_why(J, a); /* the wait itself was cancelled */
        return r;
    }
    int cancel = x.kind == EV_CANCEL;
    if (cancel)
        snprintf(a->why, sizeof(a->why), "%s", x.message ? x.message : "cancelled");
    weir__coord_ev_free(&x);
    return cancel ? A_CANCELLED : 0;
}

/* One attempt: 0 with the outcome, the cause of a loss in cause. */
static int run_attempt(cjob *J, int restore, uint64_t *max_id, attempt *a, totals *t, char *cause,
                       size_t cap)
{
    coord *c = J->c;
    int outcome = A_OK;
    int e = attempt_prepare(J, a);
    if (e == -ENOSPC && J->attempt > 0) {
        /* A restart waits for room (workers registering) for a while; a
         * job a new leader took over is parked until there is room (or it
         * is cancelled): the workers it ran on come back in their time. */
        int parked = J->recovered == 1;
        int64_t deadline = parked ? WEIR_FOREVER : weir_time_after_ms(180000);
        if (parked)
            weir__log(WEIR__LOG_WARN, LOG,
                      "job %" PRIu64 " parked: %s; it runs once workers with room register", J->id,
                      a->why);
        while (e == -ENOSPC && weir_time_now() < deadline) {
            attempt_free(J, a);
            if (wait_cancel(J, a, 500))
                return A_CANCELLED;
            e = attempt_prepare(J, a);
        }
    }
    if (e)
        return A_FAILED;
    for (int i = 0; i < weir_job_ops(a->j); i++) {
        if (J->attempt == 0 && weir_job_op_kind(a->j, i) == WEIR_OP_SOURCE)
            t->sources++;
        if (J->attempt == 0 && weir_job_op_kind(a->j, i) == WEIR_OP_SINK)
            t->sinks++;
    }
    weir_run_opts o = {.parallelism = 1,
                       .credits = 4,
                       .checkpoint_dir = J->checkpoint_dir,
                       .checkpoint_interval_ms = (int64_t)J->interval_ms,
                       .idle_timeout_ms = (int64_t)J->idle_ms,
                       .state_backend = J->state_backend,
                       .restore = restore};
    /* A taken-over job's first attempt restores what its record names. */
    weir__deploy d = {.link = make_clink,
                      .id_floor = *max_id,
                      .restore_id = restore && J->recovered == 1 ? J->restore_id : 0,
                      .fence = J->c->ha ? ckpt_fence : NULL,
                      .unfence = ckpt_unfence,
                      .arg = J};
    run *r = NULL;
    /* A job a new leader took over may find its directories still held by
     * the leader it replaced: a frozen process (its lease lost, it has not
     * run since) keeps its locks until it steps down or dies. The job
     * waits for them, cancellable, rather than fail: the lock is what
     * keeps two runs from writing one directory. */
    for (int waited = 0;
         (e = weir__job_coord_begin(a->j, a->plan, &o, &d, &r)) == -EBUSY && J->recovered == 1;
         waited = 1) {
        if (!waited)
            weir__log(WEIR__LOG_WARN, LOG,
                      "job %" PRIu64 " waits for its directories: %s (a leader this one "
                      "replaced that has not exited yet: it lets go when it steps down or dies)",
                      J->id, weir_job_error(a->j));
        int w = wait_cancel(J, a, 200);
        if (w < 0)
            stop_why(J, a);
        if (w)
            return A_CANCELLED;
        /* A job that failed to begin keeps its error: define it again. */
        attempt_free(J, a);
        if (attempt_prepare(J, a) != 0)
            return A_FAILED;
    }
    if (e < 0) {
        snprintf(a->why, sizeof(a->why), "%s", weir_job_error(a->j));
        a->err = e;
        return A_FAILED;
    }
    uint64_t restored = weir__job_coord_restored(r), first = weir__job_coord_first_id(r);
    if (restored)
        t->restored = restored;
    weir__log(WEIR__LOG_INFO, LOG, "job %" PRIu64 " attempt %u: deploying", J->id, J->attempt);
    /* ACKs an earlier attempt's stragglers sent are not this one's. */
    weir__ckpt_msg stale;
    while (weir_chan_try_recv(J->acks, &stale) == 0)
        ;
    post_deploys(J, a, restored, first);
    e = wait_until(J, a, r, all_listened, weir_time_after_ms(60000), &outcome, cause, cap);
    if (e == -ETIMEDOUT && outcome == A_OK) {
        outcome = A_FAILED;
        snprintf(a->why, sizeof(a->why),
                 "%u of %u subtasks did not report where they listen within 60 s",
                 a->plan->nsubtasks - a->nlistened, a->plan->nsubtasks);
    } else if (e < 0 && outcome == A_OK) {
        outcome = A_CANCELLED;
        stop_why(J, a);
    }
    if (outcome == A_OK) {
        post_peer_updates(J, a);
        weir__log(WEIR__LOG_INFO, LOG,
                  "job %" PRIu64 " attempt %u running: %u subtasks on %u workers, restored from "
                  "checkpoint %" PRIu64,
                  J->id, J->attempt, a->plan->nsubtasks, J->naw, restored);
        if (weir__job_coord_start_checkpoints(r) < 0) {
            outcome = A_FAILED;
            snprintf(a->why, sizeof(a->why), "could not start the checkpoint coordinator");
        }
    }
    if (outcome == A_OK) {
        e = wait_until(J, a, r, all_done, WEIR_FOREVER, &outcome, cause, cap);
        if (e < 0 && outcome == A_OK) {
            outcome = A_CANCELLED;
            stop_why(J, a);
        }
    }
    if (!all_done(a)) {
        pthread_mutex_lock(&c->mu);
        int stopping = c->stopping;
        pthread_mutex_unlock(&c->mu);
        post_cancels(J, a, outcome == A_LOST ? cause : a->why);
        if (!stopping && drain(J, a, r, &outcome, cause, cap) == -ETIMEDOUT)
            outcome = A_FAILED;
    }
    /* A subtask that failed may have failed because a worker died: its
     * channels to that worker broke, and its report can reach us before
     * the dead worker's connection is seen closed. The loss gets a moment
     * to show up; if it does, the attempt was lost, not failed. */
    if (outcome == A_FAILED && a->err && !a->saw_loss && !a->fatal)
        wait_until(J, a, r, saw_loss, weir_time_after_ms(LOSS_GRACE_MS), &outcome, cause, cap);
    if (outcome == A_FAILED && a->saw_loss && a->err && !a->fatal) {
        outcome = A_LOST;
        weir__log(WEIR__LOG_INFO, LOG, "job %" PRIu64 ": %s, after: %s", J->id, cause, a->why);
    }
    weir_ckpt_stats cs;
    weir_job_ckpt_stats(a->j, &cs);
    t->completed += cs.completed;
    if (cs.latest)
        t->latest = cs.latest;
    /* The next attempt numbers its checkpoints above every id this one
     * used (one it triggered and never completed included). */
    uint64_t used = weir__job_coord_end(r);
    if (used > *max_id)
        *max_id = used;
    return outcome;
}

static void send_completed(client *cl, const weir__cl_job_completed *jc)
{
    if (!cl || atomic_load(&cl->closed))
        return;
    weir__cl_msg m = {.kind = WEIR_CLUSTER_JOB_COMPLETED};
    m.u.completed = *jc;
    weir__coord_client_send(cl, &m); /* never dropped while the client reads */
}

intptr_t weir__coord_job_main(void *arg)
{
    cjob *J = arg;
    coord *c = J->c;
    int restarts = 0, burst = 0;
    int64_t last_restart = 0;
    uint64_t max_id = J->id_floor;
    totals t = {0};
    attempt a = {0};
    char cause[WEIR_CLUSTER_MESSAGE_MAX] = "";
    int outcome;
    int checkpoints = J->checkpoint_dir && J->interval_ms > 0;
    int budget = !checkpoints ? 0 : J->max_restarts >= 0 ? J->max_restarts : c->o.max_restarts;
    uint64_t rin = 0, rout = 0;
    for (;;) {
        /* A restart restores the latest completed checkpoint; the first
         * attempt does when the submitter asked (weir run --restore). */
        int restore = J->attempt > 0 ? checkpoints : J->restore && J->checkpoint_dir;
        outcome = run_attempt(J, restore, &max_id, &a, &t, cause, sizeof(cause));
        if (J->recovered)
            J->recovered = 2; /* its later attempts restore the latest */
        rin = a.rin;
        rout = a.rout;
        if (outcome != A_LOST) {
            if (outcome == A_FAILED && !a.err)
                a.err = -EIO;
            break;
        }
        pthread_mutex_lock(&c->mu);
        int stopping = c->stopping;
        pthread_mutex_unlock(&c->mu);
        if (stopping) { /* no restart from a coordinator that stops */
            outcome = A_CANCELLED;
            stop_why(J, &a);
            break;
        }
        int64_t now = weir_time_now();
        if (last_restart && now - last_restart > c->window_ms * WEIR_MSEC)
            burst = 0; /* clean running for the window: forgiven */
        if (burst >= budget) {
            a.err = -EIO;
            if (!checkpoints)
                snprintf(a.why, sizeof(a.why),
                         "%s; the job takes no checkpoints, so it is not "
                         "restarted",
                         cause);
            else
                snprintf(a.why, sizeof(a.why), "%s; the restart budget (%d in a burst) is spent",
                         cause, budget);
            outcome = A_FAILED;
            break;
        }
        burst++;
        restarts++;
        last_restart = now;
        weir_counter_inc(c->m.restarts);
        weir__log(WEIR__LOG_WARN, LOG, "job %" PRIu64 ": restarting (%d): %s", J->id, restarts,
                  cause);
        pthread_mutex_lock(&c->mu);
        J->state = WEIR__CL_JOB_RESTARTING;
        J->restarts = (uint32_t)restarts;
        weir__jv_restart_add(&J->view, J->attempt + 1, cause);
        J->ckpt_done_before = t.completed;
        pthread_mutex_unlock(&c->mu);
        int64_t fence = a.fence;
        attempt_free(J, &a);
        if (fence > weir_time_now()) {
            weir__log(WEIR__LOG_INFO, LOG,
                      "job %" PRIu64 ": waiting %" PRId64 " ms for the lost worker to stop", J->id,
                      (fence - weir_time_now()) / WEIR_MSEC);
            weir_time_sleep_until(fence);
        }
        J->attempt++;
        pthread_mutex_lock(&c->mu);
        J->state = WEIR__CL_JOB_RUNNING;
        pthread_mutex_unlock(&c->mu);
    }
    /* a is freed before the submitter hears: the message is copied */
    char why[WEIR_CLUSTER_MESSAGE_MAX];
    snprintf(why, sizeof(why), "%s", outcome == A_OK ? "" : a.why);
    weir__cl_job_completed jc = {.job = J->id,
                                 .err = outcome == A_OK          ? 0
                                        : outcome == A_CANCELLED ? -ECANCELED
                                                                 : (a.err ? a.err : -EIO),
                                 .message = why,
                                 .elapsed_ms = (uint64_t)((weir_time_now() - J->t0) / WEIR_MSEC),
                                 .records_in = rin,
                                 .records_out = rout,
                                 .sources = t.sources,
                                 .sinks = t.sinks,
                                 .watermark =
                                     outcome == A_OK ? WEIR_WATERMARK_MAX : WEIR_WATERMARK_MIN,
                                 .ckpt_completed = t.completed,
                                 .ckpt_latest = t.latest,
                                 .ckpt_restored = t.restored,
                                 .restarts = (uint32_t)restarts};
    attempt_free(J, &a);
    pthread_mutex_lock(&c->mu);
    /* The failure itself, unless it is the last subtask error told */
    const weir__job_view *v = &J->view;
    if (outcome == A_FAILED &&
        (!v->ner || strcmp(v->er[(v->ner - 1) % WEIR__JV_KEEP].message, why) != 0))
        weir__jv_error_add(&J->view, J->attempt, -1, -1, NULL, NULL, why);
    J->state = outcome == A_OK          ? WEIR__CL_JOB_SUCCEEDED
               : outcome == A_CANCELLED ? WEIR__CL_JOB_CANCELLED
                                        : WEIR__CL_JOB_FAILED;
    snprintf(J->message, sizeof(J->message), "%s", jc.message);
    J->ended_ms = (uint64_t)weir__wall_ms();
    J->ended = 1; /* readers route nothing more to it */
    J->ckpt_done_before = t.completed;
    weir_counter_inc(
        weir_metric_counter(c->m.ended, (const char *const[]){weir__cl_job_state_name(J->state)}));
    weir__coord_aw_set_locked(J, NULL, 0);
    client *cl = J->submitter;
    J->submitter = NULL;
    pthread_mutex_unlock(&c->mu);
    weir__coord_job_ended(J);
    /* The state is final before the submitter hears of it (a ListJobs it
     * sends next shows the end). A job cancelled because this leader
     * stops is not over: the next leader runs it on, and the submitter
     * hears nothing but the connection's end (weir submit --ha-dir then
     * follows the job to the next leader). */
    pthread_mutex_lock(&c->mu);
    int handed_on = weir__coord_handed_on_locked(J);
    pthread_mutex_unlock(&c->mu);
    if (handed_on)
        weir__log(WEIR__LOG_INFO, LOG, "job %" PRIu64 " left to the next leader: %s", J->id, why);
    else if (outcome != A_OK)
        weir__log(outcome == A_CANCELLED || c->o.client_reports ? WEIR__LOG_INFO : WEIR__LOG_WARN,
                  LOG, "job %" PRIu64 " %s: %s", J->id,
                  outcome == A_CANCELLED ? "cancelled" : "failed", why);
    if (!handed_on)
        send_completed(cl, &jc);
    if (cl)
        weir__coord_client_unref(cl);
    ev x;
    while (weir_chan_try_recv(J->events, &x) == 0)
        weir__coord_ev_free(&x);
    pthread_mutex_lock(&c->mu);
    J->gone = 1; /* this fiber touches J no more: it may be forgotten */
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int weir__coord_job_check(cjob *J, char *why, size_t cap)
{
    attempt a = {0};
    int e = attempt_prepare(J, &a);
    snprintf(why, cap, "%s", a.why);
    attempt_free(J, &a);
    pthread_mutex_lock(&J->c->mu);
    weir__coord_aw_set_locked(J, NULL, 0);
    pthread_mutex_unlock(&J->c->mu);
    return e;
}
