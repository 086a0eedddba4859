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
 * abandoned checkpoint that come late are ignored). Once any subtask has
 * ended (a bounded source ran out), no new checkpoint starts: the rest of
 * a bounded job is made durable by its end (finish hooks).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
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

/* Remove checkpoints older than the `retain` latest, and their markers. */
static void prune(run *r, uint64_t latest)
{
    int retain = r->o.retain > 0 ? r->o.retain : 1;
    if (latest <= (uint64_t)retain)
        return;
    uint64_t keep_from = latest - (uint64_t)retain + 1;
    weir__names ns;
    if (weir__storage_list(r->store, "", &ns) < 0)
        return;
    for (size_t i = 0; i < ns.n; i++) {
        uint64_t id = weir__ckpt_id_in(ns.v[i], "COMPLETED-", "");
        if (!id)
            id = weir__ckpt_id_in(ns.v[i], "chk-", "/");
        if (id && id < keep_from)
            weir__storage_delete(r->store, ns.v[i]);
    }
    weir__names_free(&ns);
}

/* kind to every subtask of the plan (sources only: TRIGGER). */
static void send_all(run *r, int kind, uint64_t id)
{
    const weir__plan *p = r->plan;
    for (uint32_t ci = 0; ci < p->nchains; ci++) {
        if (kind == WEIR__CK_TRIGGER && p->ops[p->chains[ci].ops[0]].kind != OP_SOURCE)
            continue;
        for (uint32_t s = 0; s < p->chains[ci].par; s++) {
            weir__ckpt_msg m = {.kind = kind, .id = id, .chain = ci, .sub = s};
            r->link->ops->send(r->link, &m);
        }
    }
}

/* The manifest of checkpoint id from the ACKs (acks[base of chain + sub]). */
static int write_manifest(run *r, uint64_t id, const weir__ckpt_msg *acks)
{
    const weir__plan *p = r->plan;
    weir_job *j = r->j;
    weir__manifest m = {.id = id, .job = j->name, .nops = p->nops, .nsubs = p->nsubtasks};
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

/* Collect the ACKs of checkpoint id into acks. 1: all in without error;
 * 0: abandoned (an error, or the timeout); < 0: the run is over. */
static int collect(run *r, uint64_t id, weir__ckpt_msg *acks, uint8_t *seen)
{
    const weir__plan *p = r->plan;
    int64_t deadline =
        weir_time_after_ms(r->o.checkpoint_timeout_ms > 0 ? r->o.checkpoint_timeout_ms : 600000);
    memset(seen, 0, p->nsubtasks);
    uint32_t got = 0;
    while (got < p->nsubtasks) {
        weir__ckpt_msg a;
        int e = r->link->ops->recv_ack(r->link, &a, deadline);
        if (e == -ETIMEDOUT)
            return 0;
        if (e < 0)
            return e;
        if (a.kind != WEIR__CK_ACK || a.id != id || a.chain >= p->nchains ||
            a.sub >= p->chains[a.chain].par)
            continue; /* a late ack of an abandoned checkpoint */
        uint32_t k = a.sub;
        for (uint32_t ci = 0; ci < a.chain; ci++)
            k += p->chains[ci].par;
        if (seen[k])
            continue;
        if (a.err)
            return 0; /* the job is failing; the checkpoint is abandoned */
        seen[k] = 1;
        acks[k] = a;
        got++;
    }
    return 1;
}

intptr_t weir__ckpt_coordinator(void *arg)
{
    run *r = arg;
    weir_job *j = r->j;
    uint64_t id = r->id_base;
    const weir__plan *p = r->plan;
    weir__ckpt_msg *acks = weir__calloc(p->nsubtasks ? p->nsubtasks : 1, sizeof(*acks));
    uint8_t *seen = weir__calloc(p->nsubtasks ? p->nsubtasks : 1, 1);
    int e = acks && seen ? 0 : -ENOMEM;
    if (e)
        weir__stream_fail(j, e, "checkpoint coordinator: out of memory");
    while (!e) {
        if (weir_time_sleep(r->o.checkpoint_interval_ms * WEIR_MSEC) < 0)
            break; /* the run is over */
        if (any_finished(r))
            continue;
        id++;
        atomic_store(&r->last_id, id);
        int64_t t0 = weir_time_now();
        send_all(r, WEIR__CK_TRIGGER, id);
        int c = collect(r, id, acks, seen);
        if (c < 0)
            break;
        if (c == 0) {
            send_all(r, WEIR__CK_ABORT, id);
            pthread_mutex_lock(&j->lock);
            j->ckpt.aborted++;
            pthread_mutex_unlock(&j->lock);
            continue;
        }
        if ((e = write_manifest(r, id, acks)) < 0) {
            weir__stream_fail(j, e, "writing %s/chk-%" PRIu64 "/MANIFEST.json: %s",
                              r->o.checkpoint_dir, id, weir_strerror(e));
            break;
        }
        char name[64], text[600];
        snprintf(name, sizeof(name), "COMPLETED-%" PRIu64, id);
        int n = snprintf(text, sizeof(text), "weir checkpoint %" PRIu64 "\njob %s\n", id, j->name);
        if ((e = weir__storage_put(r->store, name, text, (size_t)n)) < 0) {
            weir__stream_fail(j, e, "writing %s/%s: %s", r->o.checkpoint_dir, name,
                              weir_strerror(e));
            break;
        }
        atomic_store(&r->completed, id); /* what teardown keeps */
        pthread_mutex_lock(&j->lock);
        j->ckpt.completed++;
        j->ckpt.latest = id;
        j->ckpt.last_duration_ns = weir_time_now() - t0;
        pthread_mutex_unlock(&j->lock);
        send_all(r, WEIR__CK_COMPLETE, id);
        prune(r, id);
    }
    weir__free(acks);
    weir__free(seen);
    return e;
}
