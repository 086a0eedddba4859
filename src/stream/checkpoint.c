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
 * Snapshot of a chain: the keyed state backend (capture, then persist to
 * chk-<id>/<op>.<subtask>.state), then pre_commit(id) of every operator of
 * the chain that has one (exactly-once sinks).
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
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ---- files -------------------------------------------------------------------------------- */
static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int e = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return e;
}

/* Write path atomically: temp file, fsync, rename, fsync of dir. */
static int write_atomic(const char *dir, const char *name, const void *buf, size_t len)
{
    char tmp[4096], path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    const uint8_t *p = buf;
    size_t left = len;
    int e = 0;
    while (left && !e) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno != EINTR)
            e = -errno;
        else if (w > 0)
            p += w, left -= (size_t)w;
    }
    if (!e && fsync(fd) < 0)
        e = -errno;
    if (close(fd) < 0 && !e)
        e = -errno;
    if (!e && rename(tmp, path) < 0)
        e = -errno;
    if (e)
        unlink(tmp);
    return e ? e : fsync_dir(dir);
}

static int chk_dir(run *r, uint64_t id, char *out, size_t cap, int create)
{
    snprintf(out, cap, "%s/chk-%" PRIu64, r->o.checkpoint_dir, id);
    if (create && mkdir(out, 0755) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* ---- restore ------------------------------------------------------------------------------ */
static uint64_t latest_completed(const char *dir)
{
    DIR *d = opendir(dir);
    uint64_t best = 0;
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        uint64_t id;
        char extra;
        if (sscanf(de->d_name, "COMPLETED-%" SCNu64 "%c", &id, &extra) == 1 && id > best)
            best = id;
    }
    closedir(d);
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
static int write_layout(run *r, const char *dir)
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
    int e = write_atomic(dir, "LAYOUT", buf, len);
    free(buf);
    return e;
}

/* A restore refuses a source or a two-phase sink whose parallelism
 * changed: their checkpointed data is per subtask. */
static int check_layout(run *r)
{
    char dir[4096], path[4160];
    chk_dir(r, r->restored, dir, sizeof(dir), 0);
    snprintf(path, sizeof(path), "%s/LAYOUT", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        int e = -errno;
        weir__stream_fail(r->j, e, "restore: %s: %s", path, strerror(-e));
        return e;
    }
    char line[512];
    int e = 0;
    while (!e && fgets(line, sizeof(line), f)) {
        int par, fixed, off = 0;
        if (sscanf(line, "%d %d %n", &par, &fixed, &off) != 2 || !off)
            continue;
        line[strcspn(line, "\n")] = '\0';
        const char *name = line + off;
        for (int i = 0; i < r->j->nops; i++) {
            sop *o = r->j->ops[i];
            if (strcmp(o->name, name) != 0 || !fixed || !fixed_par(o) || o->par == par)
                continue;
            e = -EINVAL;
            weir__stream_fail(r->j, e,
                              "restore from checkpoint %" PRIu64 ": \"%s\" ran on %d subtasks "
                              "there and would run on %d now; a source that saves its position "
                              "and an exactly-once sink must keep their parallelism",
                              r->restored, name, par, o->par);
        }
    }
    fclose(f);
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
    /* Ids never go back in a directory: a fresh run into a directory that
     * holds checkpoints of an earlier run numbers its own after them, so
     * the latest COMPLETED marker is always the newest checkpoint. */
    r->id_base = latest_completed(r->o.checkpoint_dir);
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
    if (e)
        weir__dirlock_release_all(&r->locks);
    return e;
}

static int read_file(const char *path, uint8_t **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    size_t cap = 256, n = 0;
    uint8_t *b = malloc(cap);
    for (;;) {
        if (!b) {
            fclose(f);
            return -ENOMEM;
        }
        n += fread(b + n, 1, cap - n, f);
        if (n < cap)
            break;
        uint8_t *nb = realloc(b, cap *= 2);
        if (!nb)
            free(b);
        b = nb;
    }
    int e = ferror(f) ? -EIO : 0;
    fclose(f);
    if (e) {
        free(b);
        return e;
    }
    *buf = b;
    *len = n;
    return 0;
}

int weir__ckpt_restore_subtask(subtask *st)
{
    run *r = st->r;
    if (!r->restored)
        return 0;
    char dir[4096];
    chk_dir(r, r->restored, dir, sizeof(dir), 0);
    sop *head = st->ops[0];
    if (st->source && head->src.restore) {
        char path[4352];
        snprintf(path, sizeof(path), "%s/%s.%d.src", dir, head->name, st->index);
        uint8_t *buf = NULL;
        size_t len = 0;
        int e = read_file(path, &buf, &len);
        if (e) {
            weir__stream_fail(r->j, e,
                              "restore of \"%s\" subtask %d: %s: %s (a source must "
                              "keep its parallelism across a restore)",
                              head->name, st->index, path, weir_strerror(e));
            return e;
        }
        e = head->src.restore(&st->ctx[0], st->ctx[0].state, buf, len);
        free(buf);
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
        DIR *d = opendir(dir);
        if (!d) {
            int e = -errno;
            weir__stream_fail(r->j, e, "restore: %s: %s", dir, strerror(-e));
            return e;
        }
        size_t nl = strlen(head->name);
        struct dirent *de;
        int e = 0;
        while (!e && (de = readdir(d)) != NULL) {
            /* Exactly "<operator>.<digits>.state": not another operator
             * whose name starts with this one's and a dot. */
            const char *n = de->d_name, *q = n + nl + 1;
            if (strncmp(n, head->name, nl) != 0 || n[nl] != '.' || *q < '0' || *q > '9')
                continue;
            while (*q >= '0' && *q <= '9')
                q++;
            if (strcmp(q, ".state") != 0)
                continue;
            char path[4352];
            snprintf(path, sizeof(path), "%s/%s", dir, n);
            if ((e = weir_state_restore(st->backend, path)) < 0)
                weir__stream_fail(r->j, e, "restore of \"%s\" from %s: %s", head->name, path,
                                  e == -EBADMSG ? weir_state_strerror() : weir_strerror(e));
        }
        closedir(d);
        if (!e && (e = weir__timers_load(st)) < 0)
            weir__stream_fail(r->j, e, "restore of \"%s\": the timers in %s: %s", head->name, dir,
                              weir_strerror(e));
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
    char dir[4096];
    if (!e)
        e = chk_dir(r, id, dir, sizeof(dir), 1);
    sop *head = st->ops[0];
    if (!e && st->source && head->src.snapshot) {
        void *buf = NULL;
        size_t len = 0;
        if ((e = head->src.snapshot(&st->ctx[0], st->ctx[0].state, &buf, &len)) == 0) {
            char name[512];
            snprintf(name, sizeof(name), "%s.%d.src", head->name, st->index);
            e = write_atomic(dir, name, buf, len);
        }
        free(buf);
    }
    if (!e && st->backend) {
        weir_state_snapshot *snap;
        if ((e = weir__timers_capture(st, id, &snap)) == 0) {
            char path[4352];
            snprintf(path, sizeof(path), "%s/%s.%d.state", dir, head->name, st->index);
            e = weir_state_persist(snap, path);
            weir_state_snapshot_free(snap);
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

static void remove_chk(const char *path)
{
    DIR *sub = opendir(path);
    if (sub) {
        struct dirent *f;
        while ((f = readdir(sub)) != NULL) {
            if (f->d_name[0] == '.' && (!f->d_name[1] || !strcmp(f->d_name, "..")))
                continue;
            char fp[4608];
            snprintf(fp, sizeof(fp), "%s/%s", path, f->d_name);
            unlink(fp);
        }
        closedir(sub);
    }
    rmdir(path);
}

/* Remove checkpoints older than the `retain` latest, and their markers. */
static void prune(run *r, uint64_t latest)
{
    int retain = r->o.retain > 0 ? r->o.retain : 1;
    if (latest <= (uint64_t)retain)
        return;
    uint64_t keep_from = latest - (uint64_t)retain + 1;
    DIR *d = opendir(r->o.checkpoint_dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        uint64_t id;
        char extra;
        char path[4352];
        if (sscanf(de->d_name, "COMPLETED-%" SCNu64 "%c", &id, &extra) == 1 && id < keep_from) {
            snprintf(path, sizeof(path), "%s/%s", r->o.checkpoint_dir, de->d_name);
            unlink(path);
        } else if (sscanf(de->d_name, "chk-%" SCNu64 "%c", &id, &extra) == 1 && id < keep_from) {
            snprintf(path, sizeof(path), "%s/%s", r->o.checkpoint_dir, de->d_name);
            remove_chk(path);
        }
    }
    closedir(d);
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
        char cdir[4096];
        chk_dir(r, id, cdir, sizeof(cdir), 1);
        int le = write_layout(r, cdir);
        if (le) {
            weir__stream_fail(j, le, "writing %s/LAYOUT: %s", cdir, weir_strerror(le));
            return le;
        }
        char name[64], text[600];
        snprintf(name, sizeof(name), "COMPLETED-%" PRIu64, id);
        int n = snprintf(text, sizeof(text), "weir checkpoint %" PRIu64 "\njob %s\n", id, j->name);
        int e = write_atomic(r->o.checkpoint_dir, name, text, (size_t)n);
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
    DIR *d = opendir(r->o.checkpoint_dir);
    if (!d)
        goto unlock;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        uint64_t id;
        char extra, path[4352];
        if (sscanf(de->d_name, "chk-%" SCNu64 "%c", &id, &extra) == 1 && id > done &&
            id > r->id_base) {
            snprintf(path, sizeof(path), "%s/%s", r->o.checkpoint_dir, de->d_name);
            remove_chk(path);
        }
    }
    closedir(d);
unlock:
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
