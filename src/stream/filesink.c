/* SPDX-License-Identifier: Apache-2.0 */
/*
 * filesink.c - the exactly-once file sink (weir_stream_file_sink).
 *
 * Each subtask writes its records as lines into part files in the output
 * directory, through three names:
 *
 *   .part-<subtask>.inprogress       being written (data since the last barrier)
 *   .part-<subtask>-<id>.pending     pre-committed at the barrier of checkpoint id
 *                                    (fsynced, not yet visible)
 *   part-<subtask>-<id>              committed: checkpoint id completed
 *
 * A crash loses nothing and duplicates nothing: records after the last
 * completed checkpoint are only in in-progress or pending files, which the
 * restored run deletes (the source replays those records from the
 * checkpointed position), while pending files of checkpoints up to the
 * restored one are committed (their checkpoint completed, but the crash may
 * have come before the commit). At the end of input the rest goes through
 * the job's final checkpoint (pre-committed under its id, committed once it
 * completed); without checkpoints it is committed directly: the job
 * succeeded. The committed files, read in order of
 * (subtask, id), are the output. A subtask keeps its index across a restore
 * (the sink's parallelism must not change; a restore refuses a change).
 * Committed files of ids after the restored checkpoint (a run without
 * checkpoints that committed its tail itself into this directory, or an
 * older weir's subtask that did so while the job then failed) are removed
 * by the restored run (their records come again from the rewound
 * sources); a fresh run (no restore) starts the directory's part files
 * over.
 *
 * open() deletes and commits files without asking whether another run is
 * using them: that is safe because the run holds the directory from its
 * start (checkpoint.c's prepare locks every file sink's directory with
 * dirlock.c before any subtask opens), which is also why two file sinks of
 * one job may not share a directory. weir__filesink_dir() tells the run
 * which operators are file sinks.
 *
 * No file call runs on the subtask's thread: records collect in a 256 KiB
 * buffer in memory, and every call that touches the file system - a
 * buffer's write(2), the creation of the in-progress file, the fsync of a
 * pre-commit, the renames, the directory listings and deletions of open()
 * and commit() - is a job on the blocking pool (fs_call), so a slow disk
 * stalls this subtask, never its thread. The wait is shielded
 * (weir__blocking_run_shielded), as a store's calls are (state/storage.c):
 * a step once started finishes before the subtask goes on, cancelled or
 * not - a rename cut short by a cancel could otherwise still happen after
 * the run has released the directory, under the next run's feet. That
 * also lets a job use the sink's own memory and descriptor: the sink
 * cannot be closed while one of its jobs runs.
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

#include "base/alloc.h"
#include "rt/rt_int.h"
#include "stream/stream_int.h"

/* Each buffer's write is a round trip to the pool while the subtask
 * waits: at 64 KiB that took a sink-bound job from ~1 GB/s to ~0.6 GB/s;
 * at 256 KiB it is as fast as the direct write(2)s were. */
#define BUF (256u << 10)

typedef struct fsink {
    char *dir;
    int sub;
    int fd; /* the in-progress file, -1 when not created yet (on the first write) */
    uint8_t *buf;
    size_t len;
    uint64_t next_id; /* the id the final commit at end of input takes */
} fsink;

static void name_of(const fsink *f, char *out, size_t cap, const char *kind, uint64_t id)
{
    if (!strcmp(kind, "inprogress"))
        snprintf(out, cap, "%s/.part-%d.inprogress", f->dir, f->sub);
    else if (!strcmp(kind, "pending"))
        snprintf(out, cap, "%s/.part-%d-%" PRIu64 ".pending", f->dir, f->sub, id);
    else
        snprintf(out, cap, "%s/part-%d-%" PRIu64, f->dir, f->sub, id);
}

/* ---- the file system work: on a pool thread ----------------------------------------------- */
/* Everything below up to fs_call runs on the blocking pool (or inline off
 * the runtime), while the subtask waits. */

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The in-progress file, created when its first bytes go out. */
static int ensure_open(fsink *f)
{
    if (f->fd >= 0)
        return 0;
    char path[4096];
    name_of(f, path, sizeof(path), "inprogress", 0);
    f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    return f->fd < 0 ? -errno : 0;
}

/* The buffer, then n more bytes at p (a record too big for it), into the
 * in-progress file. */
static int write_out(fsink *f, const uint8_t *p, size_t n)
{
    int e = ensure_open(f);
    if (!e && f->len)
        e = write_all(f->fd, f->buf, f->len);
    if (!e)
        f->len = 0;
    if (!e && n)
        e = write_all(f->fd, p, n);
    return e;
}

static int sync_dir(const fsink *f)
{
    int fd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int e = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return e;
}

/* Close the in-progress file durably and give it its next name. */
static int seal(fsink *f, const char *kind, uint64_t id)
{
    if (f->fd < 0 && !f->len)
        return 0; /* nothing since the last seal */
    int e = write_out(f, NULL, 0);
    if (!e && fsync(f->fd) < 0)
        e = -errno;
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    f->len = 0; /* (dropped after an error: the subtask fails) */
    if (e)
        return e;
    char from[4096], to[4096];
    name_of(f, from, sizeof(from), "inprogress", 0);
    name_of(f, to, sizeof(to), kind, id);
    if (rename(from, to) < 0)
        return -errno;
    return sync_dir(f);
}

/* Delete this subtask's committed files of ids after `after`: files a
 * subtask committed at its end of input without a checkpoint (fs_finish
 * of a run without checkpoints, or of an older weir) whose records a run
 * restored from checkpoint `after` writes again. Files committed through a
 * checkpoint are never after the restored one (it is the latest
 * completed). */
static int drop_finals_after(fsink *f, uint64_t after)
{
    DIR *d = opendir(f->dir);
    if (!d)
        return -errno;
    char prefix[64];
    int pl = snprintf(prefix, sizeof(prefix), "part-%d-", f->sub);
    struct dirent *de;
    int e = 0;
    while (!e && (de = readdir(d)) != NULL) {
        uint64_t id;
        char extra;
        if (strncmp(de->d_name, prefix, (size_t)pl) != 0 ||
            sscanf(de->d_name + pl, "%" SCNu64 "%c", &id, &extra) != 1 || id <= after)
            continue;
        char path[4096];
        name_of(f, path, sizeof(path), "final", id);
        if (unlink(path) < 0)
            e = -errno;
    }
    closedir(d);
    return e;
}

/* Commit or drop this subtask's pending files: commit those up to `upto`
 * (all of them when drop_rest is 0), delete the others. */
static int resolve(fsink *f, uint64_t upto, int drop_rest)
{
    DIR *d = opendir(f->dir);
    if (!d)
        return -errno;
    struct dirent *de;
    int e = 0, changed = 0;
    char prefix[64];
    int pl = snprintf(prefix, sizeof(prefix), ".part-%d-", f->sub);
    while (!e && (de = readdir(d)) != NULL) {
        uint64_t id;
        char tail[16];
        if (strncmp(de->d_name, prefix, (size_t)pl) != 0 ||
            sscanf(de->d_name + pl, "%" SCNu64 "%15s", &id, tail) != 2 ||
            strcmp(tail, ".pending") != 0)
            continue;
        char from[4096], to[4096];
        name_of(f, from, sizeof(from), "pending", id);
        if (id <= upto) {
            name_of(f, to, sizeof(to), "final", id);
            if (rename(from, to) < 0)
                e = -errno;
        } else if (drop_rest && unlink(from) < 0) {
            e = -errno;
        }
        changed = 1;
    }
    closedir(d);
    return !e && changed ? sync_dir(f) : e;
}

/* Whatever a crashed run left: pending files of checkpoints up to the
 * restored one are committed, later ones and in-progress data dropped.
 * *mkdir_failed tells the two messages apart. */
static int prepare(fsink *f, uint64_t restored, int *mkdir_failed)
{
    if (mkdir(f->dir, 0755) < 0 && errno != EEXIST) {
        *mkdir_failed = 1;
        return -errno;
    }
    char path[4096];
    name_of(f, path, sizeof(path), "inprogress", 0);
    unlink(path);
    int e = drop_finals_after(f, restored);
    return e ? e : resolve(f, restored, 1);
}

/* One step of the sink's file work, as a pool job. */
enum { FS_PREPARE, FS_WRITE, FS_SEAL, FS_RESOLVE };

typedef struct fs_step {
    fsink *f;
    int what;
    const uint8_t *p; /* FS_WRITE: bytes after the buffer's */
    size_t n;
    const char *kind; /* FS_SEAL: the next name, and its id */
    uint64_t id;      /* FS_SEAL; FS_RESOLVE, FS_PREPARE: up to which id pending files commit */
    int drop_rest;    /* FS_RESOLVE */
    int mkdir_failed; /* FS_PREPARE's answer */
} fs_step;

static intptr_t fs_job(void *arg)
{
    fs_step *c = arg;
    switch (c->what) {
    case FS_PREPARE:
        return prepare(c->f, c->id, &c->mkdir_failed);
    case FS_WRITE:
        return write_out(c->f, c->p, c->n);
    case FS_SEAL:
        return seal(c->f, c->kind, c->id);
    default:
        return resolve(c->f, c->id, c->drop_rest);
    }
}

/* Run a step on the blocking pool and wait for it (shielded: the header
 * says why; c may stay on this stack). */
static int fs_call(fs_step *c)
{
    return (int)weir__blocking_run_shielded(fs_job, c);
}

/* ---- the operator: on the subtask's thread ------------------------------------------------ */
static int fs_open(weir_ctx *ctx, void *arg, void **state)
{
    fsink *f = weir__calloc(1, sizeof(*f));
    if (!f || !(f->buf = weir__malloc(BUF)) || !(f->dir = weir__strdup(arg))) {
        if (f)
            weir__free(f->buf);
        weir__free(f);
        return -ENOMEM;
    }
    f->sub = weir_ctx_subtask(ctx);
    f->fd = -1;
    *state = f;
    uint64_t restored = weir_ctx_restored(ctx);
    fs_step c = {.f = f, .what = FS_PREPARE, .id = restored};
    int e = fs_call(&c);
    if (e && c.mkdir_failed)
        return weir_fail(ctx, e, "output directory %s: %s", f->dir, weir_strerror(e));
    if (e)
        return weir_fail(ctx, e, "resolving pending files in %s: %s", f->dir, weir_strerror(e));
    f->next_id = restored + 1;
    return 0;
}

static int fs_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    fsink *f = state;
    int nl = in->len == 0 || ((const char *)in->data)[in->len - 1] != '\n';
    int big = in->len + 1 > BUF; /* straight through, after the buffer */
    if (f->len + in->len + 1 > BUF) {
        fs_step c = {.f = f, .what = FS_WRITE, .p = big ? in->data : NULL, .n = big ? in->len : 0};
        int e = fs_call(&c);
        if (e)
            return weir_fail(ctx, e, "writing into %s: %s", f->dir, weir_strerror(e));
    }
    if (!big) {
        memcpy(f->buf + f->len, in->data, in->len);
        f->len += in->len;
    }
    if (nl)
        f->buf[f->len++] = '\n';
    return 0;
}

static int fs_pre_commit(weir_ctx *ctx, void *state, uint64_t id)
{
    (void)ctx;
    fsink *f = state;
    if (id >= f->next_id)
        f->next_id = id + 1;
    fs_step c = {.f = f, .what = FS_SEAL, .kind = "pending", .id = id};
    return fs_call(&c);
}

static int fs_commit(weir_ctx *ctx, void *state, uint64_t id)
{
    (void)ctx;
    fs_step c = {.f = state, .what = FS_RESOLVE, .id = id};
    return fs_call(&c);
}

/* End of input. With checkpoints the rest goes through the job's final
 * checkpoint (its pre_commit and commit); without, the job succeeded and
 * everything becomes visible now. */
static int fs_finish(weir_ctx *ctx, void *state)
{
    fsink *f = state;
    if (weir_ctx_final_checkpoint(ctx))
        return 0;
    uint64_t c = weir_ctx_completed(ctx);
    if (c >= f->next_id)
        f->next_id = c + 1;
    fs_step s = {.f = f, .what = FS_SEAL, .kind = "final", .id = f->next_id};
    int e = fs_call(&s);
    if (!e) {
        fs_step r = {.f = f, .what = FS_RESOLVE, .id = UINT64_MAX};
        e = fs_call(&r);
    }
    return e;
}

static void fs_close(void *state)
{
    fsink *f = state;
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    weir__free(f->buf);
    weir__free(f->dir);
    weir__free(f);
}

const char *weir__filesink_dir(const sop *o)
{
    return o->kind == OP_SINK && o->def.open == fs_open ? o->arg : NULL;
}

int weir_stream_file_sink(weir_stream *s, const char *name, const char *dir)
{
    if (!dir || !*dir)
        return -EINVAL;
    weir_op_def def = {.open = fs_open,
                       .process = fs_process,
                       .finish = fs_finish,
                       .close = fs_close,
                       .pre_commit = fs_pre_commit,
                       .commit = fs_commit};
    return weir_stream_sink(s, name, &def, (void *)dir);
}
