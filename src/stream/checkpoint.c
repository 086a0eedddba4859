/* SPDX-License-Identifier: Apache-2.0 */
/*
 * checkpoint.c - a subtask's side of aligned-barrier checkpoints, and
 * restore. The coordinator is ckpt_coord.c; the two talk only through the
 * messages of ckpt_link.h.
 *
 * Trigger. A source subtask gets TRIGGER(id) in its mailbox and takes it
 * between two calls of its next(). Every other subtask starts when the
 * barrier reaches it.
 *
 * Barrier. A source subtask flushes what it emitted, writes its position
 * (source snapshot), snapshots its chain (below), sends the barrier after
 * its records on every channel, and acknowledges. An operator subtask
 * aligns: once an input has delivered barrier id, that input's later items
 * wait in its stash; when every input still open has delivered it, the
 * subtask snapshots, forwards the barrier, acknowledges, and replays the
 * stashes before reading its queue again. So the snapshot holds exactly
 * the effect of the records before the barrier on every input. Stashed
 * batches keep their credits, so a stash is bounded like any channel.
 *
 * Snapshot of a chain: the keyed state backend is captured on the
 * subtask's thread (a copy), then pre_commit(id) runs for every operator
 * of the chain that has one (exactly-once sinks), and the barrier goes on.
 * The state (chk-<id>/<op>.<subtask>.state) and a source's position are
 * encoded, written and fsynced on the blocking pool while the subtask goes
 * on with its records; the ACK goes out when they are durable, as mail in
 * the subtask's mailbox (below: acks that wait for their puts). The ACK
 * names where the state and the source position went (their handles in the
 * store) and their size: the coordinator's manifest is made of them.
 *
 * Storage. Every blob of a checkpoint - state files, source positions,
 * the manifest, the COMPLETED markers - is written, read, listed and deleted
 * through the run's store (state/storage.h, a local directory for now),
 * whose calls run on the blocking pool: no fsync, no directory listing, no
 * file read on a scheduler thread. The directory locks and the mkdir of
 * the checkpoint directory at the start of a run are not blobs: prepare
 * makes them one job on the blocking pool of their own (lock_dirs).
 *
 * Completion. COMPLETE(id) in the mailbox runs the operators' commit()
 * hooks (and weir_ctx_completed() says id); ABORT(id), for a checkpoint
 * the coordinator abandoned, runs their abort() hooks.
 *
 * Directories. Before anything else, prepare locks the checkpoint
 * directory and every file sink's output directory (dirlock.c); teardown
 * releases them last. A second run on one of them is refused with -EBUSY.
 *
 * Restore. With opts.restore the latest COMPLETED-<id> in the directory is
 * the restore point, and its manifest (chk-<id>/MANIFEST.json) says what
 * to read: every keyed subtask loads its key groups from the states of its
 * operator whose ranges meet its own (so parallelism may change), sources
 * get their positions back (same parallelism), and operators see the id
 * through weir_ctx_restored().
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "rt/rt_int.h"
#include "state/state_int.h"
#include "state/storage.h"
#include "stream/ckpt_link.h"
#include "stream/manifest.h"
#include "stream/stream_int.h"

/* ---- item queues -------------------------------------------------------------------------- */
int weir__itemq_push(itemq *q, item it)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 16;
        item *v = malloc(cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        for (size_t i = 0; i < q->n; i++)
            v[i] = q->v[(q->head + i) % q->cap];
        free(q->v);
        q->v = v;
        q->head = 0;
        q->cap = cap;
    }
    q->v[(q->head + q->n) % q->cap] = it;
    q->n++;
    return 0;
}

int weir__itemq_pop(itemq *q, item *it)
{
    if (!q->n)
        return -EAGAIN;
    *it = q->v[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    return 0;
}

/* ---- names -------------------------------------------------------------------------------- */
/* The id in name = prefix <digits> suffix exactly (no sign, no spaces, no
 * other tail), or 0. */
uint64_t weir__ckpt_id_in(const char *name, const char *prefix, const char *suffix)
{
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0)
        return 0;
    const char *p = name + pl;
    uint64_t id = 0;
    if (*p < '0' || *p > '9')
        return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (id > (UINT64_MAX - 9) / 10)
            return 0;
        id = id * 10 + (uint64_t)(*p - '0');
    }
    return strcmp(p, suffix) == 0 ? id : 0;
}

/* ---- restore ------------------------------------------------------------------------------ */
/* The highest id of the names in s that start with prefix (then the id,
 * then suffix): COMPLETED markers, or chk-N/ directories. 0: none (or the
 * listing failed: e, when not NULL, says so). */
static uint64_t highest_id(weir__storage *s, const char *prefix, const char *suffix, int *e)
{
    weir__names ns;
    uint64_t best = 0;
    int le = weir__storage_list(s, prefix, &ns);
    if (e)
        *e = le < 0 ? le : 0;
    if (le < 0)
        return 0;
    for (size_t i = 0; i < ns.n; i++) {
        uint64_t id = weir__ckpt_id_in(ns.v[i], prefix, suffix);
        if (id > best)
            best = id;
    }
    weir__names_free(&ns);
    return best;
}

static uint64_t latest_completed(run *r)
{
    return highest_id(r->store, "COMPLETED-", "", NULL);
}

int weir__ckpt_scan(const char *dir, uint64_t *completed, uint64_t *highest, char *why, size_t cap)
{
    weir__storage *s;
    *completed = *highest = 0;
    int e = weir__storage_open(dir, &s);
    if (e < 0) {
        snprintf(why, cap, "checkpoint directory \"%s\": %s", dir, weir_strerror(e));
        return e;
    }
    *completed = highest_id(s, "COMPLETED-", "", &e);
    if (!e)
        *highest = highest_id(s, "chk-", "/", &e);
    if (*completed > *highest)
        *highest = *completed;
    weir__storage_close(s);
    if (e < 0)
        snprintf(why, cap, "checkpoint directory \"%s\": listing it: %s", dir, weir_strerror(e));
    return e;
}

/* Remove every checkpoint directory above id `done`, the latest completed
 * one: what a run began and never finished (ids only grow). */
static void drop_unfinished(run *r, uint64_t done)
{
    weir__names ns;
    if (weir__storage_list(r->store, "", &ns) < 0)
        return;
    for (size_t i = 0; i < ns.n; i++) {
        uint64_t id = weir__ckpt_id_in(ns.v[i], "chk-", "/");
        if (id > done && id > r->id_base)
            weir__storage_delete(r->store, ns.v[i]);
    }
    weir__names_free(&ns);
}

/* 0 if checkpoint id completed (its COMPLETED marker is there), else the
 * job fails saying so: a restore point given by a coordinator must be one. */
static int completed(run *r, uint64_t id)
{
    char name[48];
    snprintf(name, sizeof(name), "COMPLETED-%" PRIu64, id);
    uint8_t *buf = NULL;
    size_t len;
    int e = weir__storage_get(r->store, name, 4096, &buf, &len);
    weir__free(buf);
    if (e)
        weir__stream_fail(
            r->j, e, "restore: checkpoint %" PRIu64 " in %s %s", id, r->o.checkpoint_dir,
            e == -ENOENT ? "never completed (it has no COMPLETED marker)" : weir_strerror(e));
    return e;
}

/* Operators whose checkpointed data is per subtask index: sources that
 * save a position, operators with two-phase-commit hooks. They must keep
 * their parallelism across a restore (keyed state may change it). */
int weir__ckpt_fixed_par(const sop *o)
{
    return (o->kind == OP_SOURCE && o->src.snapshot) || o->def.pre_commit || o->def.commit;
}

/* The restored checkpoint's manifest into r->restore_m, and the layout
 * check: a restore refuses a source or a two-phase sink whose parallelism
 * changed (their checkpointed data is per subtask). */
static int read_manifest(run *r)
{
    char name[64], why[256] = "";
    snprintf(name, sizeof(name), "chk-%" PRIu64 "/MANIFEST.json", r->restored);
    uint8_t *buf;
    size_t len;
    int e = weir__storage_get(r->store, name, WEIR__MANIFEST_MAX, &buf, &len);
    if (e) {
        weir__stream_fail(r->j, e, "restore: %s/%s: %s%s", r->o.checkpoint_dir, name,
                          weir_strerror(e),
                          e == -ENOENT ? " (a checkpoint of an older weir has none)" : "");
        return e;
    }
    if (!(r->restore_m = weir__calloc(1, sizeof(*r->restore_m)))) {
        weir__free(buf);
        return -ENOMEM;
    }
    e = weir__manifest_decode(buf, len, r->restore_m, why, sizeof(why));
    weir__free(buf);
    if (!e && r->restore_m->id != r->restored) {
        e = -EBADMSG;
        snprintf(why, sizeof(why), "manifest: it is checkpoint %" PRIu64 "'s", r->restore_m->id);
    }
    if (e) {
        weir__stream_fail(r->j, e, "restore: %s/%s: %s", r->o.checkpoint_dir, name,
                          why[0] ? why : weir_strerror(e));
        return e;
    }
    const weir__manifest *m = r->restore_m;
    for (uint32_t i = 0; i < m->nops; i++)
        for (int k = 0; m->ops[i].fixed && k < r->j->nops; k++) {
            sop *o = r->j->ops[k];
            if (strcmp(o->name, m->ops[i].name) != 0 || !weir__ckpt_fixed_par(o) ||
                (uint32_t)o->par == m->ops[i].par)
                continue;
            weir__stream_fail(r->j, -EINVAL,
                              "restore from checkpoint %" PRIu64 ": \"%s\" ran on %u subtasks "
                              "there and would run on %d now; a source that saves its position "
                              "and an exactly-once sink must keep their parallelism",
                              r->restored, o->name, m->ops[i].par, o->par);
            return -EINVAL;
        }
    return 0;
}

/* Take the run's directories: the checkpoint directory and every file
 * sink's output directory, before anything in them is read or changed (a
 * sink's open() deletes the part files a run in progress would commit).
 * One lock per directory: the checkpoint directory may also be a sink's
 * output (their file names differ), but two file sinks of one job may not
 * share one (their part files would have the same names). */
static int take_dir(run *r, const char *dir, const char *owner, const char *what, const char **held,
                    char *msg, size_t cap)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        int e = -errno;
        snprintf(msg, cap, "%s \"%s\": %s", what, dir, strerror(-e));
        return e;
    }
    return weir__dirlock_take(&r->locks, dir, owner, what, held, msg, cap);
}

/* The locks, as one job on the blocking pool (mkdir, the lock files'
 * open, flock and pid: file system calls, not for a scheduler thread).
 * The wait is shielded: the job uses the run, and its locks must be
 * taken or not before the run goes on. */
typedef struct lock_step {
    run *r;
    char msg[sizeof(((weir_job *)0)->error)];
} lock_step;

static intptr_t lock_job(void *arg)
{
    lock_step *ls = arg;
    run *r = ls->r;
    weir_job *j = r->j;
    const char *held;
    int e = 0;
    if (r->o.checkpoint_dir)
        e = take_dir(r, r->o.checkpoint_dir, NULL, "checkpoint directory", &held, ls->msg,
                     sizeof(ls->msg));
    for (int i = 0; !e && i < j->nops; i++) {
        const char *dir = weir__filesink_dir(j->ops[i]);
        if (!dir)
            continue;
        char what[128];
        snprintf(what, sizeof(what), "output directory of file sink \"%.80s\"", j->ops[i]->name);
        e = take_dir(r, dir, j->ops[i]->name, what, &held, ls->msg, sizeof(ls->msg));
        if (!e && held) {
            e = -EINVAL;
            snprintf(ls->msg, sizeof(ls->msg),
                     "file sinks \"%s\" and \"%s\" both write into \"%s\" (their part files "
                     "would collide): give each its own directory",
                     held, j->ops[i]->name, dir);
        }
    }
    return e;
}

static int lock_dirs(run *r)
{
    lock_step ls = {.r = r};
    int e = (int)weir__blocking_run_shielded(lock_job, &ls);
    if (e)
        weir__stream_fail(r->j, e, "%s", ls.msg[0] ? ls.msg : weir_strerror(e));
    return e;
}

/* A worker's mkdir of the checkpoint directory, on the pool. */
static intptr_t mkdir_job(void *arg)
{
    return mkdir(arg, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

int weir__ckpt_prepare(run *r)
{
    atomic_store(&r->completed, 0);
    if (!r->o.checkpoint_dir && (r->o.checkpoint_interval_ms > 0 || r->o.restore))
        return -EINVAL;
    /* A worker's directories are held by the coordinator's process (the
     * sinks' part files are per subtask, so processes share them). */
    int e = r->worker ? 0 : lock_dirs(r);
    if (e || !r->o.checkpoint_dir)
        goto out;
    if (r->worker &&
        (e = (int)weir__blocking_run_shielded(mkdir_job, (void *)r->o.checkpoint_dir)) < 0) {
        weir__stream_fail(r->j, e, "checkpoint directory \"%s\": %s", r->o.checkpoint_dir,
                          strerror(-e));
        goto out;
    }
    if ((e = weir__storage_open(r->o.checkpoint_dir, &r->store)) < 0) {
        weir__stream_fail(r->j, e, "checkpoint directory \"%s\": %s", r->o.checkpoint_dir,
                          weir_strerror(e));
        goto out;
    }
    /* Ids never go back in a directory: a fresh run into a directory that
     * holds checkpoints of an earlier run numbers its own after them, so
     * the latest COMPLETED marker is always the newest checkpoint. */
    r->id_base = latest_completed(r);
    if (!r->worker) /* what an earlier run spanning processes left unfinished */
        drop_unfinished(r, r->id_base);
    if (r->o.restore && r->restore_id && (e = completed(r, r->restore_id)) < 0)
        goto out;
    if (r->restore_id > r->id_base)
        r->id_base = r->restore_id;
    if (r->o.restore) {
        r->restored = r->restore_id ? r->restore_id : r->id_base;
        atomic_store(&r->completed, r->restored);
        if (r->restored && (e = read_manifest(r)) != 0)
            goto out;
    }
    if (r->id_floor > r->id_base)
        r->id_base = r->id_floor;
    if (r->o.checkpoint_interval_ms > 0 && !r->link && !(r->link = weir__ckpt_link_local(r)))
        e = -ENOMEM;
out:
    /* A failed prepare is not followed by weir__ckpt_teardown. */
    if (e) {
        if (r->restore_m) {
            weir__manifest_clear(r->restore_m);
            weir__free(r->restore_m);
            r->restore_m = NULL;
        }
        weir__storage_close(r->store);
        r->store = NULL;
        weir__dirlock_release_all(&r->locks);
    }
    return e;
}

/* The manifest's entry for subtask sub of operator op, or NULL. */
static const weir__manifest_sub *entry_of(const weir__manifest *m, const char *op, int sub)
{
    int k = weir__manifest_find(m, op);
    for (uint32_t i = 0; k >= 0 && i < m->nsubs; i++)
        if (m->subs[i].op == (uint32_t)k && m->subs[i].sub == (uint32_t)sub)
            return &m->subs[i];
    return NULL;
}

int weir__ckpt_restored_final(const run *r)
{
    return r->restored && r->restore_m && r->restore_m->final;
}

int weir__ckpt_restore_subtask(subtask *st)
{
    run *r = st->r;
    if (!r->restored)
        return 0;
    if (weir__ckpt_restored_final(r)) { /* nothing runs again: no state, no position */
        st->committed = r->restored;
        st->last_barrier = r->restored;
        return 0;
    }
    const char *root = r->o.checkpoint_dir;
    const weir__manifest *m = r->restore_m;
    sop *head = st->ops[0];
    if (st->source && head->src.restore) {
        const weir__manifest_sub *ms = entry_of(m, head->name, st->index);
        uint8_t *buf = NULL;
        size_t len = 0;
        int e = ms && ms->position
                    ? weir__storage_get(r->store, ms->position, WEIR__SNAP_MAX_FILE, &buf, &len)
                    : -ENOENT;
        if (e) {
            weir__stream_fail(r->j, e,
                              "restore of \"%s\" subtask %d: %s/%s: %s (a source must "
                              "keep its parallelism across a restore)",
                              head->name, st->index, root,
                              ms && ms->position ? ms->position : "(no position in the manifest)",
                              weir_strerror(e));
            return e;
        }
        e = head->src.restore(&st->ctx[0], st->ctx[0].state, buf, len);
        weir__free(buf);
        if (e < 0) {
            weir__stream_fail(r->j, e,
                              "source \"%s\" subtask %d refused its checkpointed "
                              "position: %s",
                              head->name, st->index, weir_strerror(e));
            return e;
        }
    }
    if (st->backend) {
        /* Every state of this operator whose groups meet ours: each loads
         * only our groups (the parallelism may have changed). */
        int k = weir__manifest_find(m, head->name), e = 0;
        for (uint32_t i = 0; k >= 0 && !e && i < m->nsubs; i++) {
            const weir__manifest_sub *ms = &m->subs[i];
            if (ms->op != (uint32_t)k || !ms->state ||
                ms->kg_end <= (uint32_t)st->backend->first_kg ||
                ms->kg_first >= (uint32_t)st->backend->end_kg)
                continue;
            char why[256] = "";
            if ((e = weir__state_restore_from(r->store, ms->state, st->backend, why, sizeof(why))) <
                0)
                weir__stream_fail(r->j, e, "restore of \"%s\" from %s/%s: %s", head->name, root,
                                  ms->state, why[0] ? why : weir_strerror(e));
        }
        if (!e && (e = weir__timers_load(st)) < 0)
            weir__stream_fail(r->j, e, "restore of \"%s\": the timers in %s/chk-%" PRIu64 ": %s",
                              head->name, root, r->restored, weir_strerror(e));
        if (e)
            return e;
    }
    st->committed = r->restored;
    st->last_barrier = r->restored;
    return 0;
}

/* ---- the barrier in a subtask --------------------------------------------------------------- */
/* The subtask's (chain, index) in the plan. */
static int ack(subtask *st, weir__ckpt_msg *a, int err)
{
    a->kind = WEIR__CK_ACK;
    a->chain = (uint32_t)st->ops[0]->chain;
    a->sub = (uint32_t)st->index;
    a->err = err;
    return st->r->link->ops->ack(st->r->link, a);
}

/* ---- acks that wait for their puts -----------------------------------------------------------
 * A snapshot's puts (the state, a source's position) run on the blocking
 * pool while the subtask goes on with its records: its ACK must wait until
 * they are durable, but nothing else must. The puts of one barrier travel
 * as one pending_ack to the subtask's persister, a fiber of its own (made at
 * the first barrier that has something to put) that waits for them in
 * order and then sends the ACK itself: the links' ack calls may come from
 * any fiber, and a source waiting inside next() must not hold its ACK
 * back. A failed put comes back to the subtask as mail instead (the
 * subtask fails the job and ends, on its own thread); the mail owns the
 * object: its fn or, when the run ended first, its drop frees it.
 *
 * The coordinator runs one checkpoint at a time, so when barrier N has
 * been handed over, an older one still queued was abandoned: the
 * persister drops it unwritten (persist_newest), and at most one snapshot
 * waits behind the one being written whatever the disk's speed. At the
 * subtask's end the persister is told to stop, finishes what it was
 * given - every put of a subtask that ended well (a checkpoint its last
 * barrier began may still complete), only the one under way of one that
 * failed or was cancelled (its waits are shielded: a put once started
 * completes) - and is joined; a subtask that ended well then takes the
 * failures still in its mailbox. */
typedef struct pending_ack {
    weir__mail mail;
    subtask *st;
    weir__ckpt_msg a;
    void *pos; /* the source position's bytes (malloc'd by the source) */
    size_t pos_len;
    weir_state_snapshot *snap; /* the captured state */
    int err;
    const char *failed; /* the blob whose put failed first */
} pending_ack;

static int ack_ready(subtask *st, weir__mail *m)
{
    pending_ack *p = (pending_ack *)m;
    int e = p->err;
    if (e && e != -ECANCELED)
        weir__stream_fail(st->r->j, e,
                          "checkpoint %" PRIu64 " in \"%s\" subtask %d: writing its %s: %s",
                          p->a.id, st->ops[0]->name, st->index, p->failed, weir_strerror(e));
    ack(st, &p->a, e);
    weir__free(p);
    return e;
}

static void ack_drop(weir__mail *m)
{
    weir__free(m);
}

/* Every put of p, in order, awaited by the calling fiber (the waits are
 * shielded: a put once started completes); the store takes the bytes. */
static void do_puts(pending_ack *p)
{
    weir__storage *store = p->st->r->store;
    if (p->pos) {
        weir__blob b = {.buf = p->pos, .len = p->pos_len, .release = free, .owner = p->pos};
        p->pos = NULL;
        int e = weir__storage_put_blob(store, p->a.position, &b);
        if (e && !p->err) {
            p->err = e;
            p->failed = "source position";
        }
    }
    if (p->snap) {
        weir_state_snapshot *s = p->snap;
        p->snap = NULL;
        int e = p->err ? (weir_state_snapshot_free(s), 0)
                       : weir__state_persist_to(store, p->a.state, s);
        if (e && !p->err) {
            p->err = e;
            p->failed = "state";
        }
    }
}

/* Snapshots dropped unwritten, process-wide (for tests). */
static _Atomic uint64_t stale_dropped;
uint64_t weir__ckpt_stale_dropped(void)
{
    return atomic_load(&stale_dropped);
}

static int has_puts(const pending_ack *p)
{
    return p->pos || p->snap;
}

static void drop_puts(pending_ack *p)
{
    free(p->pos);
    weir_state_snapshot_free(p->snap);
    p->pos = NULL;
    p->snap = NULL;
}

static intptr_t persister(void *arg)
{
    subtask *st = arg;
    for (;;) {
        pending_ack *p;
        int e = weir_chan_recv(st->persist_q, &p, WEIR_FOREVER);
        if (e == -ECANCELED) /* cancelled: every put it was given still finishes */
            e = weir_chan_try_recv(st->persist_q, &p);
        if (e)
            return 0; /* closed and empty (or cancelled and empty) */
        if (p->a.id < atomic_load(&st->persist_newest)) {
            /* A later barrier came: the coordinator runs one checkpoint at
             * a time, so this one is over (abandoned: its ACK never went),
             * and writing it would only delay the live one. */
            atomic_fetch_add_explicit(&stale_dropped, 1, memory_order_relaxed);
            drop_puts(p);
            weir__free(p);
            continue;
        }
        do_puts(p);
        if (!p->err) { /* the ACK needs nothing of the subtask's thread */
            ack(st, &p->a, 0);
            weir__free(p);
        } else if (weir__subtask_post(st, (item){IT_CALL, 0, {.mail = &p->mail}, 0}) < 0) {
            weir__free(p);
        }
    }
}

/* Hand p to the persister (made on first use). Without one (no memory)
 * the subtask waits for the puts itself and acks at once. */
static int persist_later(subtask *st, pending_ack *p)
{
    if (!st->persist_q && (st->persist_q = weir_chan_new(sizeof(p), WEIR_CHAN_UNBOUNDED))) {
        weir_spawn_opts so = {.name = "persist", .stack_size = 64u << 10};
        if (!(st->persist_sc = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER)) ||
            !weir_scope_spawn(st->persist_sc, persister, st, &so)) {
            weir_scope_free(st->persist_sc); /* no child: no join needed */
            st->persist_sc = NULL;
            weir_chan_unref(st->persist_q);
            st->persist_q = NULL;
        }
    }
    atomic_store(&st->persist_newest, p->a.id);
    if (st->persist_q && weir_chan_try_send(st->persist_q, &p) == 0)
        return 0;
    do_puts(p);
    return ack_ready(st, &p->mail);
}

/* The persister ends: what it was given below id `newest` is dropped
 * unwritten, the rest is written, and it is joined. */
static void stop_persister(subtask *st, uint64_t newest)
{
    if (!st->persist_q)
        return;
    if (newest > atomic_load(&st->persist_newest))
        atomic_store(&st->persist_newest, newest);
    weir_chan_close(st->persist_q);
    weir_scope_join(st->persist_sc, NULL);
    weir_scope_free(st->persist_sc);
    weir_chan_unref(st->persist_q);
    st->persist_sc = NULL;
    st->persist_q = NULL;
}

int weir__ckpt_end_persists(subtask *st, int ok)
{
    if (!st->persist_q)
        return 0;
    /* A failed or cancelled subtask: what is queued is not written. */
    stop_persister(st, ok ? 0 : UINT64_MAX);
    if (!ok || !st->inq)
        return 0;
    /* Acks still in the mailbox go out; nothing else there is for a
     * subtask that has ended (teardown drops it). */
    int e = 0;
    item it;
    while (weir_chan_try_recv(st->inq, &it) == 0)
        if (it.kind == IT_CALL && it.mail->fn == ack_ready) {
            int r = ack_ready(st, it.mail);
            if (!e)
                e = r;
        } else if (it.kind == IT_CALL && it.mail->drop) {
            it.mail->drop(it.mail);
        }
    return e;
}

int weir__ckpt_barrier(subtask *st, uint64_t id)
{
    run *r = st->r;
    st->last_barrier = id;
    pending_ack *p = weir__calloc(1, sizeof(*p));
    if (!p) {
        weir__ckpt_msg a = {.id = id};
        weir__stream_fail(r->j, -ENOMEM, "checkpoint %" PRIu64 " in \"%s\" subtask %d: %s", id,
                          st->ops[0]->name, st->index, weir_strerror(-ENOMEM));
        ack(st, &a, -ENOMEM);
        return -ENOMEM;
    }
    p->mail = (weir__mail){ack_ready, ack_drop};
    p->st = st;
    p->a.id = id;
    weir__ckpt_msg *ap = &p->a;
    int e = weir__stream_drain(st); /* every record before the barrier done */
    if (!e)
        e = weir__stream_flush_all(st);
    sop *head = st->ops[0];
    /* Operator names are at most 200 bytes: a handle fits. */
    _Static_assert(WEIR__CKPT_HANDLE_MAX >= 200 + 48, "a handle holds any operator's name");
    if (!e && st->source && head->src.snapshot) {
        void *buf = NULL;
        size_t len = 0;
        if ((e = head->src.snapshot(&st->ctx[0], st->ctx[0].state, &buf, &len)) == 0) {
            snprintf(ap->position, sizeof(ap->position), "chk-%" PRIu64 "/%s.%d.src", id,
                     head->name, st->index);
            ap->bytes += len;
            /* The operator's malloc'd bytes go to the store, which frees them. */
            p->pos = buf;
            p->pos_len = len;
            if (!buf) /* an empty position is a position too */
                e = (p->pos = malloc(1)) ? 0 : -ENOMEM;
        } else {
            free(buf);
        }
    }
    if (!e && st->backend) {
        /* Capture here (the backend is this subtask's: the snapshot is a
         * copy); encode, write and fsync on the blocking pool, which frees
         * it, while the subtask goes on. */
        weir_state_snapshot *snap;
        if ((e = weir__timers_capture(st, id, &snap)) == 0) {
            snprintf(ap->state, sizeof(ap->state), "chk-%" PRIu64 "/%s.%d.state", id, head->name,
                     st->index);
            ap->bytes += weir_state_snapshot_size(snap);
            p->snap = snap;
        }
    }
    for (int i = 0; !e && i < st->nops; i++) {
        weir_ctx *c = &st->ctx[i];
        if (c->op->def.pre_commit && (e = c->op->def.pre_commit(c, c->state, id)) < 0)
            weir__stream_fail(r->j, e,
                              "operator \"%s\" (subtask %d): pre-commit of "
                              "checkpoint %" PRIu64 " failed: %s",
                              c->op->name, st->index, id, weir_strerror(e));
    }
    if (!e)
        e = weir__stream_broadcast(st, IT_BARRIER, (int64_t)id);
    if (!e && has_puts(p))
        return persist_later(st, p); /* the ACK once the puts are durable */
    drop_puts(p);
    if (e && e != -ECANCELED) /* (the first failure of the job wins) */
        weir__stream_fail(r->j, e, "checkpoint %" PRIu64 " in \"%s\" subtask %d: %s", id,
                          head->name, st->index, weir_strerror(e));
    ack(st, ap, e);
    weir__free(p);
    return e;
}

/* ---- the final checkpoint ------------------------------------------------------------------- */
int weir__ckpt_has_final(const run *r)
{
    return r->link && r->o.checkpoint_interval_ms > 0;
}

int weir__ckpt_request_final(subtask *st)
{
    if (st->final_id)
        return 0;
    weir__ckpt_msg m = {.kind = WEIR__CK_FINAL_REQ,
                        .chain = (uint32_t)st->ops[0]->chain,
                        .sub = (uint32_t)st->index};
    return st->r->link->ops->ack(st->r->link, &m);
}

int weir__ckpt_final_barrier(subtask *st, uint64_t id)
{
    /* Everything the subtask will ever emit went out with its end of
     * input (finish_chain), so nothing is forwarded, and no state or
     * position is saved: a restore from a final checkpoint runs nothing. */
    st->last_barrier = id;
    /* The checkpoints before it were abandoned or are done: snapshots still
     * queued are dropped (a put under way finishes), so nothing writes
     * into the directory of a checkpoint the final one's completion
     * removes. */
    stop_persister(st, id);
    weir__ckpt_msg a = {.id = id};
    int e = 0;
    for (int i = 0; !e && i < st->nops; i++) {
        weir_ctx *c = &st->ctx[i];
        if (c->op->def.pre_commit && (e = c->op->def.pre_commit(c, c->state, id)) < 0)
            weir__stream_fail(st->r->j, e,
                              "operator \"%s\" (subtask %d): pre-commit of the final "
                              "checkpoint %" PRIu64 " failed: %s",
                              c->op->name, st->index, id, weir_strerror(e));
    }
    /* A regular checkpoint whose ACK is lost times out; the final one has
     * no timeout, so the subtask fails instead of waiting for it. */
    int se = ack(st, &a, e);
    if (!e && se < 0) {
        e = se;
        weir__stream_fail(st->r->j, e,
                          "\"%s\" subtask %d: acknowledging the final checkpoint %" PRIu64 ": %s",
                          st->ops[0]->name, st->index, id, weir_strerror(e));
    }
    return e;
}

void weir__ckpt_on_complete(subtask *st, uint64_t c)
{
    /* What weir_ctx_completed() reports: the latest this process heard of. */
    uint64_t seen = atomic_load(&st->r->completed);
    while (seen < c && !atomic_compare_exchange_weak(&st->r->completed, &seen, c))
        ;
    if (c <= st->committed)
        return;
    st->committed = c;
    for (int i = 0; i < st->nops; i++) {
        weir_ctx *x = &st->ctx[i];
        int e;
        if (x->op->def.commit && (e = x->op->def.commit(x, x->state, c)) < 0)
            weir__stream_fail(st->r->j, e,
                              "operator \"%s\" (subtask %d): commit of checkpoint "
                              "%" PRIu64 " failed: %s",
                              x->op->name, st->index, c, weir_strerror(e));
    }
}

void weir__ckpt_on_abort(subtask *st, uint64_t id)
{
    for (int i = 0; i < st->nops; i++) {
        weir_ctx *x = &st->ctx[i];
        int e;
        if (x->op->def.abort && (e = x->op->def.abort(x, x->state, id)) < 0)
            weir__stream_fail(st->r->j, e,
                              "operator \"%s\" (subtask %d): abort of checkpoint "
                              "%" PRIu64 " failed: %s",
                              x->op->name, st->index, id, weir_strerror(e));
    }
}

void weir__ckpt_teardown(run *r)
{
    if (r->link)
        r->link->ops->free(r->link);
    r->link = NULL;
    if (r->restore_m) {
        weir__manifest_clear(r->restore_m);
        weir__free(r->restore_m);
        r->restore_m = NULL;
    }
    /* Checkpoints this run started but never completed (a source ended,
     * the job failed or was cancelled while one was under way) leave no
     * directory behind: restores only ever use completed ones. When the
     * run spans processes, only once every subtask of the plan reported
     * its end (a subtask ends after its checkpoint writes): a lost
     * process's subtasks may still be writing into one; the next run's
     * prepare removes those instead. */
    if (r->o.checkpoint_dir && r->o.checkpoint_interval_ms > 0 && !r->worker &&
        (!r->spans || r->all_ended))
        drop_unfinished(r, atomic_load(&r->completed));
    weir__storage_close(r->store);
    r->store = NULL;
    /* Last: every subtask has ended (their sinks' files are closed) and the
     * cleanup above is done while the directories are still this run's. */
    weir__dirlock_release_all(&r->locks);
}

uint64_t weir_ctx_restored(const weir_ctx *ctx)
{
    return ctx->st->r->restored;
}

uint64_t weir_ctx_completed(const weir_ctx *ctx)
{
    return atomic_load(&ctx->st->r->completed);
}

int weir_ctx_final_checkpoint(const weir_ctx *ctx)
{
    return weir__ckpt_has_final(ctx->st->r);
}

const char *weir_ctx_checkpoint_dir(const weir_ctx *ctx)
{
    return ctx->st->r->o.checkpoint_dir;
}

void weir_job_ckpt_stats(const weir_job *j, weir_ckpt_stats *st)
{
    pthread_mutex_lock((pthread_mutex_t *)&j->lock);
    *st = j->ckpt;
    pthread_mutex_unlock((pthread_mutex_t *)&j->lock);
}

int weir_job_ckpt_history(const weir_job *j, weir_ckpt_info *out, int cap)
{
    if (!j || !out || cap <= 0)
        return 0;
    pthread_mutex_lock((pthread_mutex_t *)&j->lock);
    uint64_t n = j->nhist < WEIR_CKPT_HISTORY ? j->nhist : WEIR_CKPT_HISTORY;
    if (n > (uint64_t)cap)
        n = (uint64_t)cap;
    for (uint64_t k = 0; k < n; k++)
        out[k] = j->hist[(j->nhist - n + k) % WEIR_CKPT_HISTORY];
    pthread_mutex_unlock((pthread_mutex_t *)&j->lock);
    return (int)n;
}
