/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckpt_coord.c - the checkpoint coordinator, and the in-process link its
 * messages travel on (ckpt_link.h).
 *
 * One coordinator fiber per run with checkpoint_interval_ms (in a scope of
 * its own that weir_job_run cancels and joins once the subtasks ended: the
 * run it reads lives until then). Every interval it starts checkpoint id,
 * one at a time, by sending TRIGGER to every source subtask of the plan.
 * Ids continue after the newest completed checkpoint in the directory, so
 * a restarted job never reuses one. It then collects one ACK from every
 * subtask of the plan. When all are in without error it writes the
 * manifest (manifest.h: operators, subtasks, key-group ranges, the state
 * and position handles of the ACKs), then COMPLETED-<id> (both published
 * atomically through the run's storage), sends COMPLETE to every subtask
 * (their commit hooks run), and removes checkpoints older than the
 * `retain` latest. A failed ACK, or ACKs still missing at
 * checkpoint_timeout_ms, abandons the checkpoint: ABORT goes to every
 * subtask and the next one starts at the next interval (ACKs of an
 * abandoned checkpoint that come late are ignored). A bounded job ends
 * through one final checkpoint (ckpt_link.h, and the coordinator's loop
 * below): what its two-phase sinks received after the last regular
 * checkpoint is committed through it, before the job completes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/wall.h"
#include "state/state_int.h"
#include "state/storage.h"
#include "stream/ckpt_link.h"
#include "stream/manifest.h"
#include "stream/plan.h"
#include "stream/stream_int.h"

/* ---- the in-process link -------------------------------------------------------------------- */
typedef struct local_link {
    weir__ckpt_link l;
    run *r;
    weir_chan *acks;
} local_link;

static int local_ack(weir__ckpt_link *l, const weir__ckpt_msg *m)
{
    return weir_chan_send(((local_link *)l)->acks, m, WEIR_FOREVER);
}

static int local_recv(weir__ckpt_link *l, weir__ckpt_msg *m, int64_t deadline)
{
    return weir_chan_recv(((local_link *)l)->acks, m, deadline);
}

subtask *weir__ckpt_local_subtask(run *r, const weir__ckpt_msg *m)
{
    if (m->chain >= (uint32_t)r->nchains || m->sub >= (uint32_t)r->chains[m->chain].par)
        return NULL;
    subtask *st = &r->chains[m->chain].subs[m->sub];
    return st->here ? st : NULL;
}

int weir__ckpt_deliver(subtask *st, const weir__ckpt_msg *m)
{
    int kind = m->kind == WEIR__CK_TRIGGER    ? IT_TRIGGER
               : m->kind == WEIR__CK_COMPLETE ? IT_NOTIFY
               : m->kind == WEIR__CK_FINAL    ? IT_FINAL
                                              : IT_ABORT;
    return weir__subtask_post(st, (item){kind, 0, {NULL}, (int64_t)m->id});
}

static int local_send(weir__ckpt_link *l, const weir__ckpt_msg *m)
{
    subtask *st = weir__ckpt_local_subtask(((local_link *)l)->r, m);
    return st ? weir__ckpt_deliver(st, m) : -EINVAL;
}

static void local_free(weir__ckpt_link *l)
{
    local_link *ll = (local_link *)l;
    weir_chan_unref(ll->acks);
    weir__free(ll);
}

static const weir__ckpt_link_ops local_ops = {local_ack, local_recv, local_send, NULL, local_free};

weir__ckpt_link *weir__ckpt_link_local(run *r)
{
    local_link *l = weir__calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    if (!(l->acks = weir_chan_new(sizeof(weir__ckpt_msg), WEIR_CHAN_UNBOUNDED))) {
        weir__free(l);
        errno = ENOMEM;
        return NULL;
    }
    l->l.ops = &local_ops;
    l->r = r;
    return &l->l;
}

/* ---- the coordinator ------------------------------------------------------------------------ */
static int any_finished(run *r)
{
    for (int ci = 0; ci < r->nchains; ci++)
        for (int s = 0; s < r->chains[ci].par; s++)
            if (atomic_load(&r->chains[ci].subs[s].finished))
                return 1;
    return 0;
}

static int by_id_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int has_id(const uint64_t *v, size_t n, uint64_t id)
{
    return bsearch(&id, v, n, sizeof(*v), by_id_desc) != NULL;
}

/* A remote-read state backend's runs that only the checkpoints about to
 * be pruned refer to go from its pool (state/remote.c). A failure leaves
 * them there, logged: a pool that keeps a run too many loses nothing. */
static void gc_runs(run *r, const weir__names *ns, const uint64_t *done, size_t nd,
                    uint64_t keep_from, uint64_t latest)
{
    const char *uri = r->o.state_backend;
    if (!uri || strncmp(uri, "remote:", 7) != 0)
        return;
    uint64_t *gone = weir__calloc(ns->n ? ns->n : 1, sizeof(*gone));
    size_t ng = 0, nk = 0;
    while (nk < nd && done[nk] >= keep_from)
        nk++;
    for (size_t i = 0; gone && i < ns->n; i++) {
        uint64_t id = weir__ckpt_id_in(ns->v[i], "chk-", "/");
        if (id && (id < keep_from || (id < latest && !has_id(done, nd, id))))
            gone[ng++] = id;
    }
    int e = gone ? weir__remote_gc(uri, r->store, gone, ng, done, nk) : -ENOMEM;
    if (e < 0)
        weir__log(WEIR__LOG_WARN, "stream.checkpoint",
                  "job \"%s\": deleting the state runs no checkpoint needs from %s: %s", r->j->name,
                  uri, weir_strerror(e));
    weir__free(gone);
}

/* Keep the `retain` latest completed checkpoints (latest is one): remove
 * older ones with their markers, and the directories of abandoned
 * checkpoints below latest. */
static void prune(run *r, uint64_t latest)
{
    size_t retain = r->o.retain > 0 ? (size_t)r->o.retain : 1;
    weir__names ns;
    if (weir__storage_list(r->store, "", &ns) < 0)
        return;
    uint64_t *done = weir__calloc(ns.n ? ns.n : 1, sizeof(*done));
    size_t nd = 0;
    for (size_t i = 0; done && i < ns.n; i++) {
        uint64_t id = weir__ckpt_id_in(ns.v[i], "COMPLETED-", "");
        if (id && id <= latest)
            done[nd++] = id;
    }
    if (done) {
        qsort(done, nd, sizeof(*done), by_id_desc);
        uint64_t keep_from = nd > retain ? done[retain - 1] : 0;
        gc_runs(r, &ns, done, nd, keep_from, latest);
        for (size_t i = 0; i < ns.n; i++) {
            uint64_t id = weir__ckpt_id_in(ns.v[i], "COMPLETED-", "");
            if (id ? id < keep_from
                   : (id = weir__ckpt_id_in(ns.v[i], "chk-", "/")) &&
                         (id < keep_from || (id < latest && !has_id(done, nd, id))))
                weir__storage_delete(r->store, ns.v[i]);
        }
    }
    weir__free(done);
    weir__names_free(&ns);
}

/* kind to every subtask of the plan (sources only: TRIGGER). 0, or the
 * first failure to send (the others are still sent). */
static int send_all(run *r, int kind, uint64_t id)
{
    const weir__plan *p = r->plan;
    int first = 0;
    for (uint32_t ci = 0; ci < p->nchains; ci++) {
        if (kind == WEIR__CK_TRIGGER && p->ops[p->chains[ci].ops[0]].kind != OP_SOURCE)
            continue;
        for (uint32_t s = 0; s < p->chains[ci].par; s++) {
            weir__ckpt_msg m = {.kind = kind, .id = id, .chain = ci, .sub = s};
            int e = r->link->ops->send(r->link, &m);
            if (e < 0 && !first)
                first = e;
        }
    }
    return first;
}

/* The manifest of checkpoint id from the ACKs (acks[base of chain + sub]). */
static int write_manifest(run *r, uint64_t id, int final, const weir__ckpt_msg *acks)
{
    const weir__plan *p = r->plan;
    weir_job *j = r->j;
    weir__manifest m = {
        .id = id, .final = final, .job = j->name, .nops = p->nops, .nsubs = p->nsubtasks};
    m.ops = weir__calloc(p->nops, sizeof(*m.ops));
    m.subs = weir__calloc(p->nsubtasks ? p->nsubtasks : 1, sizeof(*m.subs));
    int e = m.ops && m.subs ? 0 : -ENOMEM;
    for (uint32_t i = 0; !e && i < p->nops; i++)
        m.ops[i] =
            (weir__manifest_op){p->ops[i].name, p->ops[i].par, weir__ckpt_fixed_par(j->ops[i])};
    uint32_t k = 0;
    for (uint32_t ci = 0; !e && ci < p->nchains; ci++)
        for (uint32_t s = 0; s < p->chains[ci].par; s++, k++) {
            const weir__ckpt_msg *a = &acks[k];
            m.subs[k] = (weir__manifest_sub){p->chains[ci].ops[0],
                                             s,
                                             p->chains[ci].kg_first[s],
                                             p->chains[ci].kg_end[s],
                                             a->state[0] ? (char *)a->state : NULL,
                                             a->position[0] ? (char *)a->position : NULL,
                                             a->bytes};
        }
    size_t len = 0;
    char *text = e ? NULL : weir__manifest_encode(&m, &len);
    weir__free(m.ops);
    weir__free(m.subs);
    if (!text)
        return -ENOMEM;
    char name[64];
    snprintf(name, sizeof(name), "chk-%" PRIu64 "/MANIFEST.json", id);
    e = weir__storage_put(r->store, name, text, len);
    weir__free(text);
    return e;
}

/* The plan order of subtask (chain, sub), or -1 if the plan has none. */
static int64_t order_of(const weir__plan *p, uint32_t chain, uint32_t sub)
{
    if (chain >= p->nchains || sub >= p->chains[chain].par)
        return -1;
    uint32_t k = sub;
    for (uint32_t ci = 0; ci < chain; ci++)
        k += p->chains[ci].par;
    return k;
}

/* The history's entry of checkpoint id (j->lock held), or NULL. */
static weir_ckpt_info *hist_find(weir_job *j, uint64_t id)
{
    for (uint64_t k = j->nhist; k > 0 && j->nhist - k < WEIR_CKPT_HISTORY; k--) {
        weir_ckpt_info *h = &j->hist[(k - 1) % WEIR_CKPT_HISTORY];
        if (h->id == id)
            return h;
    }
    return NULL;
}

/* Checkpoint id was triggered (the history's newest entry). */
static void hist_begin(weir_job *j, uint64_t id, int final)
{
    pthread_mutex_lock(&j->lock);
    j->hist[j->nhist++ % WEIR_CKPT_HISTORY] = (weir_ckpt_info){
        .id = id, .state = WEIR_CKPT_IN_PROGRESS, .final = final, .trigger_ms = weir__wall_ms()};
    pthread_mutex_unlock(&j->lock);
}

/* Checkpoint id ended (j->lock held): completed with bytes, or abandoned
 * for why. */
static void hist_end_locked(weir_job *j, uint64_t id, int state, uint64_t bytes, int64_t dur_ns,
                            const char *why)
{
    weir_ckpt_info *h = hist_find(j, id);
    if (!h)
        return;
    h->state = state;
    h->end_ms = weir__wall_ms();
    h->duration_ns = dur_ns;
    h->bytes = bytes;
    snprintf(h->reason, sizeof(h->reason), "%s", why ? why : "");
}

static void abandon(run *r, uint64_t id, int64_t t0, const char *why);
#define FENCED 1 /* complete(): the fence refused, the checkpoint was abandoned */

/* Checkpoint id was acknowledged by every subtask: its manifest, then
 * COMPLETED-<id>, then COMPLETE to every subtask. 0, FENCED, or the error
 * that failed the job. */
static int complete(run *r, uint64_t id, int final, const weir__ckpt_msg *acks, int64_t t0)
{
    weir_job *j = r->j;
    /* A coordinator that no longer leads (the deploy's fence) publishes
     * nothing: the checkpoint is abandoned, its successor's to take. */
    int token = -1;
    if (r->fence) {
        char why[400];
        if (r->fence(r->ended_arg, &token, why, sizeof(why)) < 0) {
            weir__log(WEIR__LOG_WARN, "stream.checkpoint",
                      "job %s: checkpoint %" PRIu64 " not completed: %s", j->name, id, why);
            char reason[160];
            snprintf(reason, sizeof(reason), "not completed: %.140s", why);
            abandon(r, id, t0, reason);
            return FENCED;
        }
    }
    int e = write_manifest(r, id, final, acks);
    if (e < 0) {
        if (r->unfence)
            r->unfence(r->ended_arg, token);
        weir__stream_fail(j, e, "writing %s/chk-%" PRIu64 "/MANIFEST.json: %s", r->o.checkpoint_dir,
                          id, weir_strerror(e));
        return e;
    }
    char name[64], text[600];
    snprintf(name, sizeof(name), "COMPLETED-%" PRIu64, id);
    int n = snprintf(text, sizeof(text), "weir checkpoint %" PRIu64 "\njob %s\n%s", id, j->name,
                     final ? "final\n" : "");
    e = weir__storage_put(r->store, name, text, (size_t)n);
    if (r->unfence)
        r->unfence(r->ended_arg, token);
    if (e < 0) {
        weir__stream_fail(j, e, "writing %s/%s: %s", r->o.checkpoint_dir, name, weir_strerror(e));
        return e;
    }
    atomic_store(&r->completed, id); /* what teardown keeps */
    uint64_t bytes = 0;
    for (uint32_t k = 0; k < r->plan->nsubtasks; k++)
        bytes += acks[k].bytes;
    pthread_mutex_lock(&j->lock);
    j->ckpt.completed++;
    j->ckpt.latest = id;
    j->ckpt.last_duration_ns = weir_time_now() - t0;
    hist_end_locked(j, id, WEIR_CKPT_COMPLETED, bytes, j->ckpt.last_duration_ns, NULL);
    pthread_mutex_unlock(&j->lock);
    /* A subtask not told that the final checkpoint completed would wait
     * for it forever: that failure fails the job (the others were told). */
    if ((e = send_all(r, WEIR__CK_COMPLETE, id)) < 0 && final)
        weir__stream_fail(
            j, e, "telling the subtasks that the final checkpoint %" PRIu64 " completed: %s", id,
            weir_strerror(e));
    prune(r, id);
    return final ? e : 0;
}

/* The subtasks of this process end with err (their next item). */
static void fail_here(run *r, int err)
{
    for (int ci = 0; ci < r->nchains; ci++)
        for (int s = 0; s < r->chains[ci].par; s++)
            if (r->chains[ci].subs[s].here)
                weir__subtask_post(&r->chains[ci].subs[s], (item){IT_FAIL, 0, {NULL}, err});
}

static void abandon(run *r, uint64_t id, int64_t t0, const char *why)
{
    send_all(r, WEIR__CK_ABORT, id);
    pthread_mutex_lock(&r->j->lock);
    r->j->ckpt.aborted++;
    hist_end_locked(r->j, id, WEIR_CKPT_ABORTED, 0, weir_time_now() - t0, why);
    pthread_mutex_unlock(&r->j->lock);
}

/*
 * The coordinator's loop. It waits for the next message with a deadline:
 * the next trigger while no checkpoint is under way, the checkpoint's
 * timeout while one is. One checkpoint at a time; ids only grow.
 *
 * The final checkpoint. The first FINAL_REQ (a subtask reached the end of
 * its input) abandons the checkpoint under way, if any, takes the next id
 * as the job's final checkpoint and sends FINAL to every subtask; no
 * regular checkpoint starts after it. Each subtask acknowledges it when
 * its own input has ended, so it has no timeout: in a job whose other
 * sources never end it completes only if they do (until then the ended
 * subtasks wait; a cancel ends them). Once every subtask acknowledged it,
 * it completes like any checkpoint and the coordinator's work is done: the
 * subtasks commit and end.
 */
intptr_t weir__ckpt_coordinator(void *arg)
{
    run *r = arg;
    weir_job *j = r->j;
    uint64_t id = r->id_base;
    const weir__plan *p = r->plan;
    size_t n = p->nsubtasks ? p->nsubtasks : 1;
    weir__ckpt_msg *acks = weir__calloc(n, sizeof(*acks));
    uint8_t *seen = weir__calloc(n, 1);
    int e = acks && seen ? 0 : -ENOMEM;
    if (e)
        weir__stream_fail(j, e, "checkpoint coordinator: out of memory");
    int64_t timeout_ms = r->o.checkpoint_timeout_ms > 0 ? r->o.checkpoint_timeout_ms : 600000;
    int64_t next = weir_time_after_ms(r->o.checkpoint_interval_ms), deadline = 0, t0 = 0;
    uint64_t cur = 0, final = 0; /* the checkpoint under way; the final one, once asked for */
    int final_told = 0;          /* every subtask was told that the final one completed */
    int over = 0;                /* the run is over: nobody waits for anything */
    uint32_t got = 0;
    while (!e) {
        weir__ckpt_msg a;
        int rc = r->link->ops->recv_ack(r->link, &a, final ? WEIR_FOREVER : cur ? deadline : next);
        if (rc == -ETIMEDOUT && cur) { /* not acknowledged in time */
            char why[96];
            snprintf(why, sizeof(why), "not acknowledged by every subtask within %" PRId64 " ms",
                     timeout_ms);
            abandon(r, cur, t0, why);
            cur = 0;
            next = weir_time_after_ms(r->o.checkpoint_interval_ms);
            continue;
        }
        if (rc == -ETIMEDOUT) { /* the interval passed */
            next = weir_time_after_ms(r->o.checkpoint_interval_ms);
            if (any_finished(r))
                continue; /* a subtask ended without a final checkpoint: the job is ending */
            cur = ++id;
            atomic_store(&r->last_id, id);
            t0 = weir_time_now();
            deadline = weir_time_after_ms(timeout_ms);
            got = 0;
            memset(seen, 0, n);
            hist_begin(j, cur, 0);
            send_all(r, WEIR__CK_TRIGGER, cur);
            continue;
        }
        if (rc < 0) {
            over = 1;
            break; /* the run is over */
        }
        if (a.kind == WEIR__CK_FINAL_REQ) {
            if (final)
                continue; /* FINAL went to every subtask already */
            if (cur)
                abandon(r, cur, t0, "superseded by the final checkpoint (an input ended)");
            cur = 0;
            final = ++id;
            atomic_store(&r->last_id, id);
            t0 = weir_time_now();
            got = 0;
            memset(seen, 0, n);
            hist_begin(j, final, 1);
            if ((e = send_all(r, WEIR__CK_FINAL, final)) < 0) {
                weir__stream_fail(j, e, "sending the final checkpoint's id: %s", weir_strerror(e));
                break; /* (ABORT below) */
            }
            continue;
        }
        if (a.kind == WEIR__CK_ABORT) { /* from the link: a process's subtasks are gone */
            if (weir__ckpt_restored_final(r))
                continue; /* nothing waits for a final: they ended at once */
            e = a.err < 0 ? a.err : -EPIPE;
            weir__stream_fail(j, e,
                              "the checkpoint link to process %" PRIu32
                              " ended before the final checkpoint completed: %s",
                              a.chain, weir_strerror(e));
            if (cur && !final)
                abandon(r, cur, t0, "a worker's subtasks are gone");
            fail_here(r, e); /* (ABORT below tells the others) */
            break;
        }
        uint64_t want = final ? final : cur;
        int64_t k = order_of(p, a.chain, a.sub);
        if (a.kind != WEIR__CK_ACK || !want || a.id != want || k < 0 || seen[k])
            continue; /* a late ack of an abandoned checkpoint */
        if (a.err) {  /* the job is failing (the subtask said why): abandoned */
            char why[160];
            snprintf(why, sizeof(why), "subtask %" PRIu32 " of chain %" PRIu32 " failed it: %s",
                     a.sub, a.chain, weir_strerror(a.err));
            abandon(r, want, t0, why);
            if (final)
                break;
            cur = 0;
            next = weir_time_after_ms(r->o.checkpoint_interval_ms);
            continue;
        }
        seen[k] = 1;
        acks[k] = a;
        if (++got < p->nsubtasks)
            continue;
        int ce = complete(r, want, final != 0, acks, t0);
        if (ce == FENCED) { /* not ours to complete: abandoned */
            if (final)
                break; /* (ABORT below) */
            cur = 0;
            next = weir_time_after_ms(r->o.checkpoint_interval_ms);
            continue;
        }
        if ((e = ce) < 0 || final) {
            final_told = final && !e;
            break;
        }
        cur = 0;
        next = weir_time_after_ms(r->o.checkpoint_interval_ms);
    }
    /* A coordinator that gives up while the run goes on (its manifest could
     * not be written, a subtask could not be told, no memory to start)
     * must not leave the subtasks waiting for a final checkpoint: ABORT of
     * it - or, before there is one, of WEIR__CK_NO_FINAL - fails them at
     * their end (a final that did complete is a restore point all the
     * same). */
    if (!over && !final_told) {
        atomic_store(&r->no_final, 1);
        send_all(r, WEIR__CK_ABORT, final ? final : WEIR__CK_NO_FINAL);
    }
    weir__free(acks);
    weir__free(seen);
    return e;
}
