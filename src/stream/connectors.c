/* SPDX-License-Identifier: Apache-2.0 */
/*
 * connectors.c - sources and sinks that come with weir: lines of a file
 * (split among subtasks, checkpointed by byte offset), lines from a TCP
 * connection, a CSV field splitter, a stdout sink and a plain text-file
 * sink. (The exactly-once file sink is filesink.c.)
 *
 * File source. Subtask i of p takes the lines that start in the byte range
 * [i*size/p, (i+1)*size/p): it skips the partial line at its start (the
 * previous subtask reads it whole) and reads on past its end to finish the
 * last line, so every line is read exactly once whatever p is. Reads go
 * through weir_io_pread in 64 KiB pieces (io_uring does them
 * asynchronously, the epoll runtime on the blocking pool); the position
 * (the offset of the next line) is what a checkpoint saves.
 *
 * No file call runs on a scheduler thread: the source's open, fstat and
 * first look at the file, and the sinks' opens, writes and closes, are
 * shielded jobs on the blocking pool (weir__blocking_run_shielded); the
 * text and stdout sinks' buffering is described at their section below.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "rt/rt_int.h"
#include "stream/stream_int.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/sync.h"

#define CHUNK (64u << 10)

static intptr_t close_job(void *arg)
{
    close(*(int *)arg);
    return 0;
}

/* close(fd) on the pool (inline off the runtime, or in a stackless task). */
static void close_off_thread(int fd)
{
    if (weir__blocking_run_shielded(close_job, &fd) < 0)
        close(fd);
}

/* ---- lines, from a file or a socket --------------------------------------------------------- */
/* One allocation: the strings follow the struct (freed with the job). */
typedef struct lines_cfg {
    const char *path; /* file */
    const char *host; /* TCP */
    int port;
    weir_line_opts o;
} lines_cfg;

static lines_cfg *cfg_new(const char *path, const char *host, const weir_line_opts *o)
{
    size_t pl = path ? strlen(path) + 1 : 0, hl = host ? strlen(host) + 1 : 0;
    lines_cfg *c = weir__calloc(1, sizeof(*c) + pl + hl);
    if (!c)
        return NULL;
    char *p = (char *)(c + 1);
    if (path)
        c->path = memcpy(p, path, pl);
    if (host)
        c->host = memcpy(p + pl, host, hl);
    if (o)
        c->o = *o;
    else
        c->o.max_out_of_orderness = -1;
    return c;
}

typedef struct lines {
    const lines_cfg *cfg;
    int fd;
    int64_t pos, end; /* file: next byte to read, end of our range (lines starting before it) */
    int64_t line_start;
    uint8_t *buf; /* unconsumed bytes: [head, len); moved down only to read more */
    size_t head, len, cap;
    int64_t lineno;
    int eof, skip_first;
} lines;

static int lines_fill(lines *l)
{
    if (l->head) { /* what is left is a partial line: move it down */
        memmove(l->buf, l->buf + l->head, l->len - l->head);
        l->len -= l->head;
        l->head = 0;
    }
    if (l->cap - l->len < CHUNK) {
        size_t cap = l->cap ? l->cap * 2 : 2 * CHUNK;
        if (cap > WEIR_MAX_RECORD + 2 * (size_t)CHUNK)
            return -E2BIG; /* a line longer than a record may be */
        uint8_t *b = weir__realloc(l->buf, cap);
        if (!b)
            return -ENOMEM;
        l->buf = b;
        l->cap = cap;
    }
    ssize_t n = l->cfg->path ? weir_io_pread(l->fd, l->buf + l->len, CHUNK, l->pos, WEIR_FOREVER)
                             : weir_io_recv(l->fd, l->buf + l->len, CHUNK, 0, WEIR_FOREVER);
    if (n < 0)
        return (int)n;
    if (n == 0)
        l->eof = 1;
    l->pos += n;
    l->len += (size_t)n;
    return 0;
}

/* open(), fstat() and the look at the byte before our range, on the
 * blocking pool: none of them may stall the subtask's thread. */
typedef struct lines_open_call {
    const char *path;
    int64_t par, sub;
    int fd, err, skip_first;
    int64_t pos, end;
} lines_open_call;

static intptr_t lines_open_job(void *arg)
{
    lines_open_call *c = arg;
    struct stat st;
    c->fd = open(c->path, O_RDONLY | O_CLOEXEC);
    if (c->fd < 0 || fstat(c->fd, &st) < 0) {
        c->err = -errno;
        return 0;
    }
    int64_t size = st.st_size;
    c->pos = size * c->sub / c->par;
    c->end = size * (c->sub + 1) / c->par;
    /* A subtask not starting at 0 skips the line in progress there,
     * unless the byte before it ends a line. */
    if (c->pos > 0) {
        char b;
        if (pread(c->fd, &b, 1, c->pos - 1) != 1) {
            c->err = -EIO;
            return 0;
        }
        c->skip_first = b != '\n';
    }
    return 0;
}

static int lines_open(weir_ctx *ctx, void *arg, void **state)
{
    const lines_cfg *cfg = arg;
    lines *l = weir__calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->cfg = cfg;
    l->fd = -1;
    *state = l;
    if (cfg->path) {
        lines_open_call c = {.path = cfg->path,
                             .par = weir_ctx_parallelism(ctx),
                             .sub = weir_ctx_subtask(ctx),
                             .fd = -1};
        int64_t r = weir__blocking_run_shielded(lines_open_job, &c);
        l->fd = c.fd;
        if (r < 0)
            return weir_fail(ctx, (int)r, "%s: %s", cfg->path, weir_strerror((int)r));
        if (c.err)
            return weir_fail(ctx, c.err, "%s: %s", cfg->path,
                             c.err == -EIO ? "read failed" : strerror(-c.err));
        l->pos = c.pos;
        l->end = c.end;
        l->skip_first = c.skip_first;
        l->line_start = l->pos;
    } else {
        int fd = weir_net_connect(cfg->host, cfg->port, weir_time_after_ms(10000));
        if (fd < 0)
            return weir_fail(ctx, fd, "connecting to %s:%d: %s", cfg->host, cfg->port,
                             weir_net_strerror(fd));
        l->fd = fd;
        l->end = INT64_MAX;
    }
    return 0;
}

static int lines_emit(weir_ctx *ctx, lines *l, const uint8_t *p, size_t n)
{
    if (n && p[n - 1] == '\r')
        n--; /* CRLF files */
    int64_t ts = l->cfg->o.timestamp ? l->cfg->o.timestamp((const char *)p, n, l->cfg->o.arg)
                 : l->cfg->path      ? l->line_start
                                     : weir_time_now();
    l->lineno++;
    return weir_emit(ctx, p, n, ts);
}

static int lines_next(weir_ctx *ctx, void *state)
{
    lines *l = state;
    int emitted = 0;
    while (emitted < 1024) {
        uint8_t *p = l->buf ? l->buf + l->head : NULL; /* no buffer before the first read */
        size_t avail = l->len - l->head;
        uint8_t *nl = avail ? memchr(p, '\n', avail) : NULL;
        if (!nl) {
            if (l->cfg->path && l->line_start >= l->end && !l->skip_first)
                return 1; /* no line of ours starts here */
            if (l->eof) {
                int e = 0;
                if (avail && !l->skip_first && l->line_start < l->end)
                    e = lines_emit(ctx, l, p, avail); /* the last line has no newline */
                l->head = l->len = 0;
                return e ? e : 1;
            }
            if (emitted)
                return 0; /* hand over what we have before waiting for more */
            int e = lines_fill(l);
            if (e)
                return e == -E2BIG
                           ? weir_fail(ctx, e, "a line longer than %u bytes", WEIR_MAX_RECORD)
                           : e;
            continue;
        }
        size_t n = (size_t)(nl - p);
        int mine = !l->skip_first && (!l->cfg->path || l->line_start < l->end);
        if (l->cfg->path && !l->skip_first && l->line_start >= l->end)
            return 1; /* the next subtask's lines start here */
        if (mine) {
            int e = lines_emit(ctx, l, p, n);
            if (e)
                return e;
            emitted++;
        }
        l->skip_first = 0;
        l->line_start += (int64_t)n + 1;
        l->head += n + 1;
        if (l->head == l->len)
            l->head = l->len = 0;
    }
    return 0;
}

static void lines_close(void *state)
{
    lines *l = state;
    if (!l)
        return;
    /* weir_io_close: the backend forgets the fd (epoll's per-fd state), and
     * neither backend closes a file on this thread. */
    if (l->fd >= 0 && weir_io_close(l->fd) == -EINVAL)
        close(l->fd); /* not in a fiber */
    weir__free(l->buf);
    weir__free(l);
}

/* Position: the offset of the next line and the line number. */
static int lines_snapshot(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    lines *l = state;
    /* malloc: the runner frees a source's position with free() (weir/stream.h). */
    int64_t *p = malloc(3 * sizeof(int64_t));
    if (!p)
        return -ENOMEM;
    p[0] = l->line_start;
    p[1] = l->lineno;
    p[2] = l->skip_first;
    *buf = p;
    *len = 3 * sizeof(int64_t);
    return 0;
}

static int lines_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    lines *l = state;
    if (!l->cfg->path)
        return 0; /* a socket cannot rewind: it goes on from now */
    if (len != 3 * sizeof(int64_t))
        return weir_fail(ctx, -EBADMSG, "file source position of %zu bytes", len);
    int64_t p[3];
    memcpy(p, buf, sizeof(p));
    l->line_start = l->pos = p[0];
    l->lineno = p[1];
    l->skip_first = (int)p[2];
    l->head = l->len = 0;
    l->eof = 0;
    return 0;
}

static weir_stream *lines_source(weir_job *j, const char *name, lines_cfg *cfg)
{
    weir_source_def def = {.open = lines_open,
                           .next = lines_next,
                           .close = lines_close,
                           .max_out_of_orderness = cfg->o.max_out_of_orderness,
                           .snapshot = lines_snapshot,
                           .restore = lines_restore};
    weir_stream *s = weir_job_source(j, name, &def, cfg);
    if (!s) {
        weir__free(cfg);
        return NULL;
    }
    s->owned = cfg;
    return s;
}

weir_stream *weir_job_source_file(weir_job *j, const char *name, const char *path,
                                  const weir_line_opts *o)
{
    if (!j || j->err)
        return NULL;
    lines_cfg *cfg = path && *path ? cfg_new(path, NULL, o) : NULL;
    if (!cfg) {
        weir__stream_fail(j, path && *path ? -ENOMEM : -EINVAL, "file source \"%s\" needs a path",
                          name ? name : "?");
        return NULL;
    }
    return lines_source(j, name, cfg);
}

weir_stream *weir_job_source_tcp(weir_job *j, const char *name, const char *host, int port,
                                 const weir_line_opts *o)
{
    if (!j || j->err)
        return NULL;
    lines_cfg *cfg = host && *host && port > 0 && port <= 65535 ? cfg_new(NULL, host, o) : NULL;
    if (!cfg) {
        weir__stream_fail(j, -EINVAL, "TCP source \"%s\" needs a host and a port 1..65535",
                          name ? name : "?");
        return NULL;
    }
    cfg->port = port;
    return lines_source(j, name, cfg);
}

/* ---- CSV -------------------------------------------------------------------------------- */
int weir_csv_split(const char *line, size_t len, char sep, weir_csv_field *out, int max)
{
    if ((!line && len) || !out || max < 1)
        return -EINVAL;
    int n = 0;
    size_t i = 0;
    for (;;) {
        if (n == max)
            return -E2BIG;
        weir_csv_field *f = &out[n++];
        f->quoted = 0;
        if (i < len && line[i] == '"') {
            size_t start = ++i;
            for (;;) {
                if (i >= len)
                    return -EBADMSG; /* an unterminated quote */
                if (line[i] == '"') {
                    if (i + 1 < len && line[i + 1] == '"') {
                        i += 2; /* an escaped quote */
                        continue;
                    }
                    break;
                }
                i++;
            }
            f->p = line + start;
            f->len = i - start;
            f->quoted = 1;
            i++; /* the closing quote */
            if (i < len && line[i] != sep)
                return -EBADMSG; /* text after a closing quote */
        } else {
            size_t start = i;
            while (i < len && line[i] != sep)
                i++;
            f->p = line + start;
            f->len = i - start;
        }
        if (i >= len)
            return n;
        i++; /* the separator */
    }
}

ssize_t weir_csv_unquote(const weir_csv_field *f, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < f->len; i++) {
        if (f->quoted && f->p[i] == '"')
            i++; /* "" -> " */
        if (o + 1 >= cap)
            return -ENOSPC;
        buf[o++] = f->p[i < f->len ? i : f->len - 1];
    }
    if (cap)
        buf[o] = '\0';
    return (ssize_t)o;
}

/* ---- stdout and text-file sinks ------------------------------------------------------------
 * Records collect as lines in the subtask's fill buffer; a writer fiber of
 * the sink, pinned to the subtask's thread, takes the whole buffer and
 * writes it with one job on the blocking pool (write(2) to the file;
 * fwrite + fflush of stdout under stdout_lock, so lines of different
 * subtasks never mix and a stdout nobody reads stalls a pool thread, not a
 * scheduler thread). process() only copies and, when the writer is idle,
 * wakes it. Being on the same thread, the writer runs only when the subtask
 * suspends - it waits for input, for credits, or for the writer because
 * the fill buffer is full - so a busy subtask fills whole buffers (one
 * hand-off per TEXT_BUF bytes) while the writer's job writes the previous
 * one, and output stops waiting the moment the subtask has nothing more to
 * do: that is the promptness `weir run ... print` relies on. No lock
 * guards the buffers: only the fibers of this one thread touch `fill`,
 * and the pool job only `out`, handed over by the pool. finish() waits
 * until everything is written and reports the first failed write. */
#define TEXT_BUF (256u << 10)

static pthread_mutex_t stdout_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct text_sink {
    int fd; /* the file; -1 for stdout */
    uint8_t *fill, *out;
    size_t fill_len, fill_cap, out_len, out_cap;
    int err;         /* the first failed write (negative errno), sticky */
    int writer_idle; /* the writer waits for `kick` with nothing to write */
    int stop;
    weir_notify *kick, *done; /* writer: work or stop / waiters: a buffer was written */
    weir_scope *sc;           /* the writer's */
    const char *path;         /* for messages; NULL for stdout */
} text_sink;

/* The pool job: all of out[0, out_len). */
static intptr_t text_write_job(void *arg)
{
    text_sink *t = arg;
    if (t->fd < 0) {
        pthread_mutex_lock(&stdout_lock);
        errno = 0;
        size_t w = fwrite(t->out, 1, t->out_len, stdout);
        int e = fflush(stdout) != 0 || w != t->out_len ? (errno ? -errno : -EIO) : 0;
        pthread_mutex_unlock(&stdout_lock);
        return e;
    }
    for (size_t off = 0; off < t->out_len;) {
        ssize_t n = write(t->fd, t->out + off, t->out_len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        off += (size_t)n;
    }
    return 0;
}

static intptr_t text_writer(void *arg)
{
    text_sink *t = arg;
    for (;;) {
        while (!t->fill_len && !t->stop) {
            t->writer_idle = 1;
            int e = weir_notify_wait(t->kick, WEIR_FOREVER);
            t->writer_idle = 0;
            if (e < 0 && !t->fill_len) /* cancelled: the run is going down */
                return 0;
        }
        if (!t->fill_len)
            return 0; /* stopped with nothing left */
        /* A subtask that only yielded (a source between two next() calls)
         * is still busy: let it fill more while the buffer keeps growing,
         * so that a hand-off carries a good part of a buffer. One that
         * waits leaves the buffer as it was: write it now. */
        while (!t->stop && t->fill_len < t->fill_cap / 2) {
            size_t before = t->fill_len;
            if (weir_task_yield() < 0 || t->fill_len == before)
                break;
        }
        uint8_t *b = t->out;
        size_t cap = t->out_cap;
        t->out = t->fill;
        t->out_cap = t->fill_cap;
        t->out_len = t->fill_len;
        t->fill = b;
        t->fill_cap = cap;
        t->fill_len = 0;
        /* Shielded: the job uses t, which must not go while it runs. */
        int64_t r = weir__blocking_run_shielded(text_write_job, t);
        if (r < 0 && !t->err)
            t->err = (int)r;
        t->out_len = 0;
        weir_notify_all(t->done);
    }
}

/* Wake the writer if it waits for work. */
static void text_kick(text_sink *t)
{
    if (t->writer_idle) {
        t->writer_idle = 0;
        weir_notify_one(t->kick);
    }
}

typedef struct text_open_call {
    const char *path;
    int fd, err;
} text_open_call;

static intptr_t text_open_job(void *arg)
{
    text_open_call *c = arg;
    c->fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    c->err = c->fd < 0 ? errno : 0;
    return 0;
}

static int text_open(weir_ctx *ctx, void *arg, void **state)
{
    text_sink *t = weir__calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    *state = t;
    t->fd = -1;
    if (!(t->fill = weir__malloc(TEXT_BUF)) || !(t->out = weir__malloc(TEXT_BUF)) ||
        !(t->kick = weir_notify_new()) || !(t->done = weir_notify_new()))
        return -ENOMEM;
    t->fill_cap = t->out_cap = TEXT_BUF;
    if (arg) {
        char path[4096];
        int n =
            weir_ctx_parallelism(ctx) > 1
                ? snprintf(path, sizeof(path), "%s.%d", (const char *)arg, weir_ctx_subtask(ctx))
                : snprintf(path, sizeof(path), "%s", (const char *)arg);
        if (n < 0 || (size_t)n >= sizeof(path))
            return weir_fail(ctx, -ENAMETOOLONG, "text sink path \"%.64s...\" is too long",
                             (const char *)arg);
        text_open_call c = {.path = path, .fd = -1};
        int64_t r = weir__blocking_run_shielded(text_open_job, &c);
        if (r < 0)
            return weir_fail(ctx, (int)r, "%s: %s", path, weir_strerror((int)r));
        if (c.fd < 0)
            return weir_fail(ctx, -c.err, "%s: %s", path, strerror(c.err));
        t->fd = c.fd;
        t->path = arg;
    }
    weir_spawn_opts so = {.name = "text-sink-writer", .stack_size = 32u << 10, .pin = 1};
    if (!(t->sc = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER)))
        return -ENOMEM;
    if (!weir_scope_spawn(t->sc, text_writer, t, &so)) {
        weir_scope_free(t->sc); /* no child: no join needed */
        t->sc = NULL;
        return -ENOMEM;
    }
    return 0;
}

/* Wait until the writer wrote everything handed to it so far and, with
 * `all`, the fill buffer too. */
static int text_wait(text_sink *t, int all)
{
    while (t->out_len || (all && t->fill_len)) {
        text_kick(t);
        int e = weir_notify_wait(t->done, WEIR_FOREVER);
        if (e < 0)
            return e;
    }
    return t->err;
}

static int text_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx;
    text_sink *t = state;
    if (t->err)
        return t->err;
    int nl = in->len == 0 || ((const char *)in->data)[in->len - 1] != '\n';
    size_t need = in->len + (size_t)nl;
    if (t->fill_cap - t->fill_len < need) {
        /* Full: the writer takes this buffer once it has written its own. */
        while (t->fill_len) {
            text_kick(t);
            int e = weir_notify_wait(t->done, WEIR_FOREVER);
            if (e < 0)
                return e;
            if (t->err)
                return t->err;
        }
        if (t->fill_cap < need) { /* a record longer than a buffer */
            uint8_t *b = weir__realloc(t->fill, need);
            if (!b)
                return -ENOMEM;
            t->fill = b;
            t->fill_cap = need;
        }
    }
    memcpy(t->fill + t->fill_len, in->data, in->len);
    if (nl)
        t->fill[t->fill_len + in->len] = '\n';
    t->fill_len += need;
    text_kick(t);
    return 0;
}

static int text_finish(weir_ctx *ctx, void *state)
{
    text_sink *t = state;
    int e = text_wait(t, 1);
    if (e < 0 && t->path)
        return weir_fail(ctx, e, "writing %s: %s", t->path, weir_strerror(e));
    return e;
}

static void text_close(void *state)
{
    text_sink *t = state;
    if (!t)
        return;
    if (t->sc) {
        /* What finish() did not see (a failed run) is written all the same,
         * as stdio would have at exit. */
        t->stop = 1;
        text_kick(t);
        weir_scope_join(t->sc, NULL);
        weir_scope_free(t->sc);
    }
    if (t->fd >= 0)
        close_off_thread(t->fd);
    weir_notify_free(t->kick);
    weir_notify_free(t->done);
    weir__free(t->fill);
    weir__free(t->out);
    weir__free(t);
}

int weir_stream_print(weir_stream *s, const char *name)
{
    weir_op_def def = {
        .open = text_open, .process = text_process, .finish = text_finish, .close = text_close};
    return weir_stream_sink(s, name, &def, NULL);
}

int weir_stream_text_sink(weir_stream *s, const char *name, const char *path)
{
    if (!path || !*path)
        return -EINVAL;
    weir_op_def def = {
        .open = text_open, .process = text_process, .finish = text_finish, .close = text_close};
    return weir_stream_sink(s, name, &def, (void *)path);
}
