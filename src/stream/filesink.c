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
 * have come before the commit). At the end of input the rest is committed
 * directly: the job succeeded. The committed files, read in order of
 * (subtask, id), are the output. A subtask keeps its index across a restore
 * (the sink's parallelism must not change; a restore refuses a change).
 * Files committed at the end of input by one subtask while the job as a
 * whole then failed are removed by the restored run (their records come
 * again from the rewound sources); a fresh run (no restore) starts the
 * directory's part files over.
 *
 * open() deletes and commits files without asking whether another run is
 * using them: that is safe because the run holds the directory from its
 * start (checkpoint.c's prepare locks every file sink's directory with
 * dirlock.c before any subtask opens), which is also why two file sinks of
 * one job may not share a directory. weir__filesink_dir() tells the run
 * which operators are file sinks.
 *
 * Writes go through a 64 KiB buffer with write(2) (the page cache: quick);
 * the fsync of a pre-commit runs on the blocking pool, so a slow disk
 * stalls this subtask, never its thread.
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
#include "stream/stream_int.h"

#define BUF (64u << 10)

typedef struct fsink {
    char *dir;
    int sub;
    int fd; /* the in-progress file, -1 when none */
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

static int flush_buf(fsink *f)
{
    size_t off = 0;
    while (off < f->len) {
        ssize_t w = write(f->fd, f->buf + off, f->len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        off += (size_t)w;
    }
    f->len = 0;
    return 0;
}

/* The pool's job owns a descriptor of its own and closes it: a cancelled
 * subtask stops waiting at once while the fsync may still run (or not have
 * started), and the sink's descriptor is closed right after - the job
 * must not fsync a number that open() may have handed out again. */
static intptr_t fsync_job(void *arg)
{
    int fd = (int)(intptr_t)arg;
    int e = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return e;
}

static void fsync_discard(void *arg)
{
    close((int)(intptr_t)arg);
}

/* fsync(fd) on the blocking pool, fd left open. */
static int fsync_pooled(int fd)
{
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0)
        return -errno;
    return (int)weir_blocking_run_ex(fsync_job, (void *)(intptr_t)own, fsync_discard, WEIR_FOREVER);
}

static int sync_dir(const fsink *f)
{
    int fd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int e = fsync_pooled(fd);
    close(fd);
    return e;
}

/* Close the in-progress file durably and give it its next name. */
static int seal(fsink *f, const char *kind, uint64_t id)
{
    if (f->fd < 0)
        return 0;
    int e = flush_buf(f);
    if (!e)
        e = fsync_pooled(f->fd);
    close(f->fd);
    f->fd = -1;
    if (e)
        return e;
    char from[4096], to[4096];
    name_of(f, from, sizeof(from), "inprogress", 0);
    name_of(f, to, sizeof(to), kind, id);
    if (rename(from, to) < 0)
        return -errno;
    return sync_dir(f);
}

/* Delete this subtask's committed files of checkpoints after `after`: a
 * subtask that reached its end of input commits the rest of its output
 * (fs_finish) before the job as a whole succeeded; if the job then failed
 * and restarts from checkpoint `after`, those records come again. Files
 * committed through a checkpoint are never after the restored one (it is
 * the latest completed). */
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
    if (mkdir(f->dir, 0755) < 0 && errno != EEXIST)
        return weir_fail(ctx, -errno, "output directory %s: %s", f->dir, strerror(errno));
    /* Whatever a crashed run left: pending files of checkpoints up to the
     * restored one are committed, later ones and in-progress data dropped. */
    uint64_t restored = weir_ctx_restored(ctx);
    char path[4096];
    name_of(f, path, sizeof(path), "inprogress", 0);
    unlink(path);
    int e = drop_finals_after(f, restored);
    if (!e)
        e = resolve(f, restored, 1);
    if (e)
        return weir_fail(ctx, e, "resolving pending files in %s: %s", f->dir, weir_strerror(e));
    f->next_id = restored + 1;
    return 0;
}

static int fs_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    fsink *f = state;
    if (f->fd < 0) {
        char path[4096];
        name_of(f, path, sizeof(path), "inprogress", 0);
        f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (f->fd < 0)
            return weir_fail(ctx, -errno, "%s: %s", path, strerror(errno));
    }
    int nl = in->len == 0 || ((const char *)in->data)[in->len - 1] != '\n';
    if (f->len + in->len + 1 > BUF) {
        int e = flush_buf(f);
        if (e)
            return weir_fail(ctx, e, "writing into %s: %s", f->dir, weir_strerror(e));
    }
    if (in->len + 1 > BUF) { /* a huge record: straight through (the buffer is empty) */
        const uint8_t *p = in->data;
        size_t left = in->len;
        while (left) {
            ssize_t w = write(f->fd, p, left);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                return weir_fail(ctx, -errno, "writing into %s: %s", f->dir, strerror(errno));
            p += w;
            left -= (size_t)w;
        }
    } else {
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
    return seal(f, "pending", id);
}

static int fs_commit(weir_ctx *ctx, void *state, uint64_t id)
{
    (void)ctx;
    return resolve(state, id, 0);
}

/* End of input: the job succeeded; everything becomes visible. */
static int fs_finish(weir_ctx *ctx, void *state)
{
    fsink *f = state;
    uint64_t c = weir_ctx_completed(ctx);
    if (c >= f->next_id)
        f->next_id = c + 1;
    int e = seal(f, "final", f->next_id);
    if (!e)
        e = resolve(f, UINT64_MAX, 0);
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
