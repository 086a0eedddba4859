/* SPDX-License-Identifier: Apache-2.0 */
/*
 * checkpoint.c - aligned-barrier checkpoints of a running job, and restore.
 *
 * Trigger. A coordinator fiber (one per run with checkpoint_interval_ms,
 * in a scope of its own that weir_job_run cancels and joins once the
 * subtasks have ended: the run it reads lives until then, even when the
 * job was cancelled) starts checkpoint id every interval, one at a time:
 * it asks every source subtask for a barrier (an atomic request each reads
 * between two calls of its next()). Ids continue after the restored
 * checkpoint, so a restarted job never reuses one.
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
 * Snapshot of a chain: the keyed state backend (capture on the subtask's
 * thread, then encode and write chk-<id>/<op>.<subtask>.state on the
 * blocking pool while the subtask waits: it acks only once the state is
 * durable), then pre_commit(id) of every operator of the chain that has
 * one (exactly-once sinks).
 *
 * Storage. Every blob of a checkpoint - state files, source positions,
 * LAYOUT, the COMPLETED markers - is written, read, listed and deleted
 * through the run's store (state/storage.h, a local directory for now),
 * whose calls run on the blocking pool: no fsync, no directory listing, no
 * file read on a scheduler thread. Only the directory locks and the
 * mkdir of the checkpoint directory at the start of a run are direct.
 *
 * Completion. When every subtask acknowledged id, the coordinator writes
 * COMPLETED-<id> atomically (temporary file, fsync, rename, fsync of the
 * directory), publishes the id (operators' commit() hooks run with it: a
 * subtask with an input queue is woken by a notify item, a source chain
 * looks between calls), and removes checkpoints older than the `retain`
 * latest. Once any subtask has ended (a bounded source ran out), no new
 * checkpoint starts: the rest of a bounded job is made durable by its end
 * (finish hooks).
 *
 * Directories. Before anything else, prepare locks the checkpoint
 * directory and every file sink's output directory (dirlock.c); teardown
 * releases them last. A second run on one of them is refused with -EBUSY.
 *
 * Restore. With opts.restore the latest COMPLETED-<id> in the directory is
 * the restore point: every keyed subtask loads its key groups from all
 * state files of its operator in chk-<id> (so parallelism may change),
 * sources get their positions back (same parallelism, one file each), and
 * operators see the id through weir_ctx_restored().
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "state/state_int.h"
#include "state/storage.h"
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
static uint64_t id_in(const char *name, const char *prefix, const char *suffix)
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
static uint64_t latest_completed(run *r)
{
    weir__names ns;
    uint64_t best = 0;
    if (weir__storage_list(r->store, "COMPLETED-", &ns) < 0)
        return 0;
    for (size_t i = 0; i < ns.n; i++) {
        uint64_t id = id_in(ns.v[i], "COMPLETED-", "");
        if (id > best)
            best = id;
    }
    weir__names_free(&ns);
    return best;
}

/* Operators whose checkpointed data is per subtask index: sources that
 * save a position, operators with two-phase-commit hooks. They must keep
 * their parallelism across a restore (keyed state may change it). */
static int fixed_par(const sop *o)
{
    return (o->kind == OP_SOURCE && o->src.snapshot) || o->def.pre_commit || o->def.commit;
}

/* chk-<id>/LAYOUT: "<parallelism> <fixed> <operator>" per operator. */
static int write_layout(run *r, uint64_t id)
{
    weir_job *j = r->j;
    size_t cap = 256, len = 0;
    char *buf = malloc(cap);
    for (int i = 0; buf && i < j->nops; i++) {
        size_t need = strlen(j->ops[i]->name) + 32;
        if (len + need > cap) {
            char *nb = realloc(buf, cap = (len + need) * 2);
            if (!nb)
                free(buf);
            buf = nb;
            if (!buf)
                break;
        }
        len += (size_t)snprintf(buf + len, cap - len, "%d %d %s\n", j->ops[i]->par,
                                fixed_par(j->ops[i]), j->ops[i]->name);
    }
    if (!buf)
        return -ENOMEM;
    char name[64];
    snprintf(name, sizeof(name), "chk-%" PRIu64 "/LAYOUT", id);
    int e = weir__storage_put(r->store, name, buf, len);
    free(buf);
    return e;
}

/* A restore refuses a source or a two-phase sink whose parallelism
 * changed: their checkpointed data is per subtask. */
static int check_layout(run *r)
{
    char name[64];
    snprintf(name, sizeof(name), "chk-%" PRIu64 "/LAYOUT", r->restored);
    uint8_t *buf;
    size_t len;
    int e = weir__storage_get(r->store, name, 1u << 20, &buf, &len);
    if (e) {
        weir__stream_fail(r->j, e, "restore: %s/%s: %s", r->o.checkpoint_dir, name, strerror(-e));
        return e;
    }
    /* Line by line; the last may lack its newline. */
    for (size_t at = 0; !e && at < len;) {
        const uint8_t *nl = memchr(buf + at, '\n', len - at);
        size_t ll = nl ? (size_t)(nl - (buf + at)) : len - at;
        char line[512];
        if (ll >= sizeof(line))
            ll = sizeof(line) - 1;
        memcpy(line, buf + at, ll);
        line[ll] = '\0';
        at += nl ? (size_t)(nl - (buf + at)) + 1 : len - at;
        int par, fixed, off = 0;
        if (sscanf(line, "%d %d %n", &par, &fixed, &off) != 2 || !off)
            continue;
        const char *opname = line + off;
        for (int i = 0; i < r->j->nops; i++) {
            sop *o = r->j->ops[i];
            if (strcmp(o->name, opname) != 0 || !fixed || !fixed_par(o) || o->par == par)
                continue;
            e = -EINVAL;
            weir__stream_fail(r->j, e,
                              "restore from checkpoint %" PRIu64 ": \"%s\" ran on %d subtasks "
                              "there and would run on %d now; a source that saves its position "
                              "and an exactly-once sink must keep their parallelism",
                              r->restored, opname, par, o->par);
        }
    }
    weir__free(buf);
    return e;
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

static int lock_dirs(run *r)
{
    weir_job *j = r->j;
    char msg[sizeof(j->error)];
    const char *held;
    int e = 0;
    if (r->o.checkpoint_dir)
        e = take_dir(r, r->o.checkpoint_dir, NULL, "checkpoint directory", &held, msg, sizeof(msg));
    for (int i = 0; !e && i < j->nops; i++) {
        const char *dir = weir__filesink_dir(j->ops[i]);
        if (!dir)
            continue;
        char what[128];
        snprintf(what, sizeof(what), "output directory of file sink \"%.80s\"", j->ops[i]->name);
        e = take_dir(r, dir, j->ops[i]->name, what, &held, msg, sizeof(msg));
        if (!e && held) {
            e = -EINVAL;
            snprintf(msg, sizeof(msg),
                     "file sinks \"%s\" and \"%s\" both write into \"%s\" (their part files "
                     "would collide): give each its own directory",
                     held, j->ops[i]->name, dir);
        }
    }
    if (e)
        weir__stream_fail(j, e, "%s", msg);
    return e;
}

int weir__ckpt_prepare(run *r)
{
    atomic_store(&r->completed, 0);
    if (!r->o.checkpoint_dir && (r->o.checkpoint_interval_ms > 0 || r->o.restore))
        return -EINVAL;
    int e = lock_dirs(r);
    if (e || !r->o.checkpoint_dir)
        goto out;
    if ((e = weir__storage_open(r->o.checkpoint_dir, &r->store)) < 0) {
        weir__stream_fail(r->j, e, "checkpoint directory \"%s\": %s", r->o.checkpoint_dir,
                          weir_strerror(e));
        goto out;
    }
    /* Ids never go back in a directory: a fresh run into a directory that
     * holds checkpoints of an earlier run numbers its own after them, so
     * the latest COMPLETED marker is always the newest checkpoint. */
    r->id_base = latest_completed(r);
    if (r->o.restore) {
        r->restored = r->id_base;
        atomic_store(&r->completed, r->restored);
        if (r->restored && (e = check_layout(r)) != 0)
            goto out;
    }
    if (r->o.checkpoint_interval_ms > 0 &&
        !(r->acks = weir_chan_new(sizeof(ckpt_ack), WEIR_CHAN_UNBOUNDED)))
        e = -ENOMEM;
out:
    /* A failed prepare is not followed by weir__ckpt_teardown. */
    if (e) {
        weir__storage_close(r->store);
        r->store = NULL;
        weir__dirlock_release_all(&r->locks);
    }
    return e;
}

/* The state files of operator op in chk-<id>: "chk-<id>/<op>.<digits>.state"
 * exactly, not another operator whose name starts with op's and a dot. */
static int is_state_of(const char *name, const char *dir, const char *op)
{
    size_t dl = strlen(dir), ol = strlen(op);
    if (strncmp(name, dir, dl) != 0 || strncmp(name + dl, op, ol) != 0 || name[dl + ol] != '.')
        return 0;
    const char *q = name + dl + ol + 1;
    if (*q < '0' || *q > '9')
        return 0;
    while (*q >= '0' && *q <= '9')
        q++;
    return strcmp(q, ".state") == 0;
}

int weir__ckpt_restore_subtask(subtask *st)
{
    run *r = st->r;
    if (!r->restored)
        return 0;
    const char *root = r->o.checkpoint_dir;
    char dir[64];
    snprintf(dir, sizeof(dir), "chk-%" PRIu64 "/", r->restored);
    sop *head = st->ops[0];
    if (st->source && head->src.restore) {
        char name[WEIR__STORAGE_NAME_MAX + 64];
        snprintf(name, sizeof(name), "%s%s.%d.src", dir, head->name, st->index);
        uint8_t *buf = NULL;
        size_t len = 0;
        int e = weir__storage_get(r->store, name, WEIR__SNAP_MAX_FILE, &buf, &len);
        if (e) {
            weir__stream_fail(r->j, e,
                              "restore of \"%s\" subtask %d: %s/%s: %s (a source must "
                              "keep its parallelism across a restore)",
                              head->name, st->index, root, name, weir_strerror(e));
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
        /* Every state file of this operator: each loads only our groups. */
        weir__names ns;
        int e = weir__storage_list(r->store, dir, &ns);
        if (e) {
            weir__stream_fail(r->j, e, "restore: %s/%s: %s", root, dir, strerror(-e));
            return e;
        }
        for (size_t i = 0; !e && i < ns.n; i++) {
            if (!is_state_of(ns.v[i], dir, head->name))
                continue;
            char why[256];
            if ((e = weir__state_restore_from(r->store, ns.v[i], st->backend, why, sizeof(why))) <
                0)
                weir__stream_fail(r->j, e, "restore of \"%s\" from %s/%s: %s", head->name, root,
                                  ns.v[i], why[0] ? why : weir_strerror(e));
        }
        weir__names_free(&ns);
        if (!e && (e = weir__timers_load(st)) < 0)
            weir__stream_fail(r->j, e, "restore of \"%s\": the timers in %s/%s: %s", head->name,
                              root, dir, weir_strerror(e));
        if (e)
            return e;
    }
    st->committed = r->restored;
    st->last_barrier = r->restored;
    return 0;
}

/* ---- the barrier in a subtask --------------------------------------------------------------- */
static void ack(subtask *st, uint64_t id, int err)
{
    ckpt_ack a = {id, err};
    weir_chan_send(st->r->acks, &a, WEIR_FOREVER);
}

int weir__ckpt_barrier(subtask *st, uint64_t id)
{
    run *r = st->r;
    st->last_barrier = id;
    int e = weir__stream_drain(st); /* every record before the barrier done */
    if (!e)
        e = weir__stream_flush_all(st);
    sop *head = st->ops[0];
    char name[WEIR__STORAGE_NAME_MAX + 64];
    if (!e && st->source && head->src.snapshot) {
        void *buf = NULL;
        size_t len = 0;
        if ((e = head->src.snapshot(&st->ctx[0], st->ctx[0].state, &buf, &len)) == 0) {
            snprintf(name, sizeof(name), "chk-%" PRIu64 "/%s.%d.src", id, head->name, st->index);
            /* The operator's malloc'd bytes go to the store, which frees them. */
            weir__blob b = {.buf = buf, .len = len, .release = free, .owner = buf};
            buf = NULL;
            e = weir__storage_put_blob(r->store, name, &b);
        }
        free(buf);
    }
    if (!e && st->backend) {
        /* Capture here (the backend is this subtask's); encode, write and
         * fsync on the blocking pool, which frees the snapshot. */
        weir_state_snapshot *snap;
        if ((e = weir__timers_capture(st, id, &snap)) == 0) {
            snprintf(name, sizeof(name), "chk-%" PRIu64 "/%s.%d.state", id, head->name, st->index);
            e = weir__state_persist_to(r->store, name, snap);
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
    if (e && e != -ECANCELED) /* (the first failure of the job wins) */
        weir__stream_fail(r->j, e, "checkpoint %" PRIu64 " in \"%s\" subtask %d: %s", id,
                          head->name, st->index, weir_strerror(e));
    ack(st, id, e);
    return e;
}

void weir__ckpt_maybe_commit(subtask *st)
{
    uint64_t c = atomic_load(&st->r->completed);
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

/* ---- the coordinator ---------------------------------------------------------------------- */
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
        uint64_t id = id_in(ns.v[i], "COMPLETED-", "");
        if (!id)
            id = id_in(ns.v[i], "chk-", "/");
        if (id && id < keep_from)
            weir__storage_delete(r->store, ns.v[i]);
    }
    weir__names_free(&ns);
}

static void notify_all(run *r)
{
    for (int ci = 0; ci < r->nchains; ci++)
        for (int s = 0; s < r->chains[ci].par; s++) {
            subtask *st = &r->chains[ci].subs[s];
            if (st->here)
                weir__subtask_post(st, (item){IT_NOTIFY, 0, {NULL}, 0});
        }
}

intptr_t weir__ckpt_coordinator(void *arg)
{
    run *r = arg;
    weir_job *j = r->j;
    uint64_t id = r->id_base;
    for (;;) {
        if (weir_time_sleep(r->o.checkpoint_interval_ms * WEIR_MSEC) < 0)
            return 0; /* the run is over */
        if (any_finished(r))
            continue;
        id++;
        int64_t t0 = weir_time_now();
        for (int ci = 0; ci < r->nchains; ci++)
            if (r->chains[ci].ops[0]->kind == OP_SOURCE)
                for (int s = 0; s < r->chains[ci].par; s++)
                    if (r->chains[ci].subs[s].here)
                        weir__subtask_post(&r->chains[ci].subs[s],
                                           (item){IT_TRIGGER, 0, {NULL}, (int64_t)id});
        int acked = 0, failed = 0;
        while (acked < r->nsubtasks) {
            ckpt_ack a;
            if (weir_chan_recv(r->acks, &a, WEIR_FOREVER) < 0)
                return 0;
            if (a.id != id)
                continue; /* a late ack of an abandoned checkpoint */
            acked++;
            failed |= a.err != 0;
        }
        if (failed)
            continue; /* the job is failing; the checkpoint is abandoned */
        int le = write_layout(r, id);
        if (le) {
            weir__stream_fail(j, le, "writing %s/chk-%" PRIu64 "/LAYOUT: %s", r->o.checkpoint_dir,
                              id, weir_strerror(le));
            return le;
        }
        char name[64], text[600];
        snprintf(name, sizeof(name), "COMPLETED-%" PRIu64, id);
        int n = snprintf(text, sizeof(text), "weir checkpoint %" PRIu64 "\njob %s\n", id, j->name);
        int e = weir__storage_put(r->store, name, text, (size_t)n);
        if (e) {
            weir__stream_fail(j, e, "writing %s/%s: %s", r->o.checkpoint_dir, name,
                              weir_strerror(e));
            return e;
        }
        atomic_store(&r->completed, id);
        pthread_mutex_lock(&j->lock);
        j->ckpt.completed++;
        j->ckpt.latest = id;
        j->ckpt.last_duration_ns = weir_time_now() - t0;
        pthread_mutex_unlock(&j->lock);
        notify_all(r);
        prune(r, id);
    }
}

void weir__ckpt_teardown(run *r)
{
    if (r->acks)
        weir_chan_unref(r->acks);
    /* Checkpoints this run started but never completed (a source ended,
     * the job failed or was cancelled while one was under way) leave no
     * directory behind: restores only ever use completed ones. */
    if (!r->o.checkpoint_dir || r->o.checkpoint_interval_ms <= 0)
        goto unlock;
    uint64_t done = atomic_load(&r->completed);
    weir__names ns;
    if (weir__storage_list(r->store, "", &ns) < 0)
        goto unlock;
    for (size_t i = 0; i < ns.n; i++) {
        uint64_t id = id_in(ns.v[i], "chk-", "/");
        if (id > done && id > r->id_base)
            weir__storage_delete(r->store, ns.v[i]);
    }
    weir__names_free(&ns);
unlock:
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
