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
 * through weir_io_pread in 64 KiB pieces; the position (the offset of the
 * next line) is what a checkpoint saves.
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
#include "stream/stream_int.h"
#include "weir/io.h"
#include "weir/net.h"

#define CHUNK (64u << 10)

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
    uint8_t *buf; /* unconsumed bytes: [0, len) */
    size_t len, cap;
    int64_t lineno;
    int eof, skip_first;
} lines;

static int lines_fill(lines *l)
{
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
        l->fd = open(cfg->path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (l->fd < 0 || fstat(l->fd, &st) < 0)
            return weir_fail(ctx, -errno, "%s: %s", cfg->path, strerror(errno));
        int64_t size = st.st_size, p = weir_ctx_parallelism(ctx), i = weir_ctx_subtask(ctx);
        l->pos = size * i / p;
        l->end = size * (i + 1) / p;
        /* A subtask not starting at 0 skips the line in progress there,
         * unless the byte before it ends a line. */
        if (l->pos > 0) {
            char c;
            if (pread(l->fd, &c, 1, l->pos - 1) != 1)
                return weir_fail(ctx, -EIO, "%s: read failed", cfg->path);
            l->skip_first = c != '\n';
        }
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
        uint8_t *nl = l->len ? memchr(l->buf, '\n', l->len) : NULL;
        if (!nl) {
            if (l->cfg->path && l->line_start >= l->end && !l->skip_first)
                return 1; /* no line of ours starts here */
            if (l->eof) {
                int e = 0;
                if (l->len && !l->skip_first && l->line_start < l->end)
                    e = lines_emit(ctx, l, l->buf, l->len); /* the last line has no newline */
                l->len = 0;
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
        size_t n = (size_t)(nl - l->buf);
        int mine = !l->skip_first && (!l->cfg->path || l->line_start < l->end);
        if (l->cfg->path && !l->skip_first && l->line_start >= l->end)
            return 1; /* the next subtask's lines start here */
        if (mine) {
            int e = lines_emit(ctx, l, l->buf, n);
            if (e)
                return e;
            emitted++;
        }
        l->skip_first = 0;
        l->line_start += (int64_t)n + 1;
        memmove(l->buf, nl + 1, l->len - n - 1);
        l->len -= n + 1;
    }
    return 0;
}

static void lines_close(void *state)
{
    lines *l = state;
    if (!l)
        return;
    if (l->fd >= 0)
        close(l->fd);
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
    l->len = 0;
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

/* ---- stdout and text-file sinks ------------------------------------------------------------ */
static pthread_mutex_t stdout_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct text_sink {
    FILE *f;
    int own;
} text_sink;

static int text_open(weir_ctx *ctx, void *arg, void **state)
{
    text_sink *t = weir__calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    *state = t;
    if (!arg) {
        t->f = stdout;
        return 0;
    }
    char path[4096];
    if (weir_ctx_parallelism(ctx) > 1)
        snprintf(path, sizeof(path), "%s.%d", (const char *)arg, weir_ctx_subtask(ctx));
    else
        snprintf(path, sizeof(path), "%s", (const char *)arg);
    if (!(t->f = fopen(path, "w")))
        return weir_fail(ctx, -errno, "%s: %s", path, strerror(errno));
    t->own = 1;
    return 0;
}

static int text_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx;
    text_sink *t = state;
    int nl = in->len == 0 || ((const char *)in->data)[in->len - 1] != '\n';
    if (!t->own)
        pthread_mutex_lock(&stdout_lock); /* whole lines from every subtask */
    size_t w = fwrite(in->data, 1, in->len, t->f);
    if (nl)
        fputc('\n', t->f);
    if (!t->own)
        pthread_mutex_unlock(&stdout_lock);
    return w == in->len ? 0 : -EIO;
}

static int text_finish(weir_ctx *ctx, void *state)
{
    (void)ctx;
    text_sink *t = state;
    return fflush(t->f) == 0 ? 0 : -errno;
}

static void text_close(void *state)
{
    text_sink *t = state;
    if (t && t->own)
        fclose(t->f);
    else if (t)
        fflush(t->f);
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
