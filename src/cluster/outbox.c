/* SPDX-License-Identifier: Apache-2.0 */
/*
 * outbox.c - a worker session's outbound frames (outbox.h): a FIFO of
 * copied frames under a leaf mutex, drained by one writer fiber in chunks
 * of 64 KiB, with per-class bounds, progress stamps for the stall verdict,
 * and a stop that discards, shuts the socket down and ends the writer.
 *
 * The mutex is a plain pthread mutex: nothing waits while holding it (the
 * writer drops it around every send and around its wait for work), so a
 * post from any thread or task returns at once. The writer waits on a
 * weir_notify, whose stored permit keeps a post racing ahead of the wait
 * from being lost.
 */
#include "cluster/outbox.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "base/alloc.h"
#include "weir/base.h"
#include "weir/cluster.h"
#include "weir/io.h"
#include "weir/sync.h"

#define WRITER_STACK (64u << 10)

struct entry {
    struct entry *next;
    size_t len;
    int cls;
    unsigned char data[];
};

struct weir__outbox {
    int fd;
    weir_tls *tls; /* NULL: plain */
    weir__outbox_limits lim;
    pthread_mutex_t mu;
    weir_notify *wake;
    weir_scope *scope;
    /* under mu */
    struct entry *head, *tail;
    uint64_t q_frames[2], q_bytes[2];
    struct entry *cur; /* being written by the writer (owned by it) */
    int64_t last_progress;
    int stopped, writer_done, shut;
    enum weir__outbox_verdict verdict;
    char text[WEIR__OUTBOX_VERDICT_MAX];
    weir__outbox_stats st;
};

static int64_t default_clock(void *arg)
{
    (void)arg;
    return weir_time_now();
}

static int64_t now_of(weir__outbox *ob)
{
    return ob->lim.clock(ob->lim.clock_arg);
}

weir__outbox_limits weir__outbox_limits_default(void)
{
    return (weir__outbox_limits){
        .max_control_frames = WEIR_CLUSTER_BACKLOG_FRAMES,
        .max_control_bytes = WEIR_CLUSTER_BACKLOG_BYTES,
        .max_deploy_bytes = WEIR__OUTBOX_DEPLOY_BYTES,
        .stall_ms = WEIR__OUTBOX_STALL_MS,
        .clock = NULL,
        .clock_arg = NULL,
    };
}

static uint64_t pending_frames(const weir__outbox *ob)
{
    return ob->q_frames[0] + ob->q_frames[1] + (ob->cur ? 1 : 0);
}

/* Record v (the first verdict wins), discard the queue, shut the socket
 * down both ways and wake the writer. Under mu. */
static void stop_locked(weir__outbox *ob, enum weir__outbox_verdict v, const char *text)
{
    if (v != WEIR__OUTBOX_OK && ob->verdict == WEIR__OUTBOX_OK) {
        ob->verdict = v;
        snprintf(ob->text, sizeof ob->text, "%s", text);
    }
    if (ob->stopped)
        return;
    ob->stopped = 1;
    struct entry *e = ob->head;
    while (e) {
        struct entry *next = e->next;
        ob->st.frames_discarded++;
        ob->st.bytes_discarded += e->len;
        weir__free(e);
        e = next;
    }
    ob->head = ob->tail = NULL;
    ob->q_frames[0] = ob->q_frames[1] = ob->q_bytes[0] = ob->q_bytes[1] = 0;
    if (!ob->shut) {
        ob->shut = 1;
        shutdown(ob->fd, SHUT_RDWR);
    }
    weir_notify_one(ob->wake);
}

static intptr_t writer(void *arg)
{
    weir__outbox *ob = arg;
    for (;;) {
        pthread_mutex_lock(&ob->mu);
        while (!ob->stopped && !ob->head) {
            pthread_mutex_unlock(&ob->mu);
            int r = weir_notify_wait(ob->wake, WEIR_FOREVER);
            pthread_mutex_lock(&ob->mu);
            if (r < 0 && !ob->head)
                stop_locked(ob, WEIR__OUTBOX_OK, ""); /* cancelled: end */
        }
        if (ob->stopped) {
            ob->writer_done = 1;
            pthread_mutex_unlock(&ob->mu);
            return 0;
        }
        struct entry *e = ob->head;
        ob->head = e->next;
        if (!ob->head)
            ob->tail = NULL;
        ob->q_frames[e->cls]--;
        ob->q_bytes[e->cls] -= e->len;
        ob->cur = e;
        pthread_mutex_unlock(&ob->mu);

        size_t off = 0;
        ssize_t err = 0;
        int stopped = 0;
        while (off < e->len && !stopped) {
            size_t n = e->len - off;
            if (n > WEIR__OUTBOX_CHUNK)
                n = WEIR__OUTBOX_CHUNK;
            ssize_t w = ob->tls
                            ? weir_tls_write(ob->tls, e->data + off, n, WEIR_FOREVER)
                            : weir_io_send(ob->fd, e->data + off, n, MSG_NOSIGNAL, WEIR_FOREVER);
            if (ob->tls && w == 0)
                w = (ssize_t)n; /* all of it */
            if (w == -EINTR || w == -EAGAIN)
                continue;
            if (w <= 0) {
                err = w < 0 ? w : -EPIPE;
                break;
            }
            off += (size_t)w;
            pthread_mutex_lock(&ob->mu);
            ob->st.bytes_written += (uint64_t)w;
            ob->last_progress = now_of(ob);
            stopped = ob->stopped;
            pthread_mutex_unlock(&ob->mu);
        }

        pthread_mutex_lock(&ob->mu);
        ob->cur = NULL;
        if (off == e->len && !err) {
            ob->st.frames_written++;
        } else {
            ob->st.frames_discarded++;
            ob->st.bytes_discarded += e->len;
            if (err && !ob->stopped) {
                char text[WEIR__OUTBOX_VERDICT_MAX];
                snprintf(text, sizeof text, "write failed: %s", weir_strerror((int)err));
                stop_locked(ob, err == -ECANCELED ? WEIR__OUTBOX_OK : WEIR__OUTBOX_WRITE_FAILED,
                            text);
            }
        }
        pthread_mutex_unlock(&ob->mu);
        weir__free(e);
    }
}

weir__outbox *weir__outbox_new(int fd, weir_tls *tls, const weir__outbox_limits *limits)
{
    if (fd < 0) {
        errno = EINVAL;
        return NULL;
    }
    weir__outbox *ob = weir__calloc(1, sizeof *ob);
    if (!ob) {
        errno = ENOMEM;
        return NULL;
    }
    ob->fd = fd;
    ob->tls = tls;
    ob->lim = limits ? *limits : weir__outbox_limits_default();
    if (!ob->lim.clock) {
        ob->lim.clock = default_clock;
        ob->lim.clock_arg = NULL;
    }
    int e = pthread_mutex_init(&ob->mu, NULL);
    if (e) {
        weir__free(ob);
        errno = e;
        return NULL;
    }
    if (!(ob->wake = weir_notify_new()))
        goto fail;
    if (!(ob->scope = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER)))
        goto fail;
    if (!weir_scope_spawn(ob->scope, writer, ob,
                          &(weir_spawn_opts){.name = "outbox writer", .stack_size = WRITER_STACK}))
        goto fail;
    return ob;
fail:
    e = errno ? errno : ENOMEM;
    if (ob->scope) {
        weir_scope_join(ob->scope, NULL);
        weir_scope_free(ob->scope);
    }
    if (ob->wake)
        weir_notify_free(ob->wake);
    pthread_mutex_destroy(&ob->mu);
    weir__free(ob);
    errno = e;
    return NULL;
}

void weir__outbox_free(weir__outbox *ob)
{
    if (!ob)
        return;
    weir__outbox_abort(ob);
    weir_scope_join(ob->scope, NULL);
    weir_scope_free(ob->scope);
    weir_notify_free(ob->wake);
    pthread_mutex_destroy(&ob->mu);
    weir__free(ob);
}

int weir__outbox_post(weir__outbox *ob, const void *frame, size_t len, int cls)
{
    if (!ob || (!frame && len) || len == 0 ||
        (cls != WEIR__OUTBOX_CONTROL && cls != WEIR__OUTBOX_DEPLOY))
        return -EINVAL;
    pthread_mutex_lock(&ob->mu);
    int rc = 0;
    if (ob->stopped) {
        rc = -EPIPE;
        goto out;
    }
    char text[WEIR__OUTBOX_VERDICT_MAX];
    const char *bound = NULL;
    uint64_t limit = 0;
    if (cls == WEIR__OUTBOX_CONTROL && ob->q_frames[0] + 1 > ob->lim.max_control_frames) {
        bound = "control frames";
        limit = ob->lim.max_control_frames;
    } else if (cls == WEIR__OUTBOX_CONTROL && (len > ob->lim.max_control_bytes ||
                                               ob->q_bytes[0] > ob->lim.max_control_bytes - len)) {
        bound = "control bytes";
        limit = ob->lim.max_control_bytes;
    } else if (cls == WEIR__OUTBOX_DEPLOY && (len > ob->lim.max_deploy_bytes ||
                                              ob->q_bytes[1] > ob->lim.max_deploy_bytes - len)) {
        bound = "deploy bytes";
        limit = ob->lim.max_deploy_bytes;
    }
    if (bound) {
        snprintf(text, sizeof text, "overflow: a %zu-byte %s frame past the bound of %llu %s", len,
                 cls == WEIR__OUTBOX_CONTROL ? "control" : "deploy", (unsigned long long)limit,
                 bound);
        stop_locked(ob, WEIR__OUTBOX_OVERFLOW, text);
        rc = -ENOBUFS;
        goto out;
    }
    struct entry *e = weir__malloc(sizeof *e + len);
    if (!e) {
        snprintf(text, sizeof text, "allocation: no memory for a %zu-byte frame", len);
        stop_locked(ob, WEIR__OUTBOX_ALLOC, text);
        rc = -ENOMEM;
        goto out;
    }
    e->next = NULL;
    e->len = len;
    e->cls = cls;
    memcpy(e->data, frame, len);
    if (pending_frames(ob) == 0)
        ob->last_progress = now_of(ob);
    if (ob->tail)
        ob->tail->next = e;
    else
        ob->head = e;
    ob->tail = e;
    ob->q_frames[cls]++;
    ob->q_bytes[cls] += len;
    ob->st.frames_posted++;
    ob->st.bytes_posted += len;
    weir_notify_one(ob->wake);
out:
    pthread_mutex_unlock(&ob->mu);
    return rc;
}

enum weir__outbox_verdict weir__outbox_check(weir__outbox *ob, int64_t now)
{
    pthread_mutex_lock(&ob->mu);
    uint64_t pending = pending_frames(ob);
    if (ob->verdict == WEIR__OUTBOX_OK && !ob->stopped && pending && ob->lim.stall_ms > 0 &&
        ob->lim.stall_ms <= INT64_MAX / WEIR_MSEC &&
        now - ob->last_progress >= ob->lim.stall_ms * WEIR_MSEC) {
        ob->verdict = WEIR__OUTBOX_STALLED;
        snprintf(ob->text, sizeof ob->text,
                 "no outbound progress for %lld ms with %llu frames pending",
                 (long long)((now - ob->last_progress) / WEIR_MSEC), (unsigned long long)pending);
    }
    enum weir__outbox_verdict v = ob->verdict;
    pthread_mutex_unlock(&ob->mu);
    return v;
}

void weir__outbox_rebase(weir__outbox *ob, int64_t now)
{
    pthread_mutex_lock(&ob->mu);
    ob->last_progress = now;
    pthread_mutex_unlock(&ob->mu);
}

void weir__outbox_abort(weir__outbox *ob)
{
    if (!ob)
        return;
    pthread_mutex_lock(&ob->mu);
    stop_locked(ob, WEIR__OUTBOX_OK, "");
    pthread_mutex_unlock(&ob->mu);
}

enum weir__outbox_verdict weir__outbox_verdict(weir__outbox *ob, char *text, size_t cap)
{
    pthread_mutex_lock(&ob->mu);
    enum weir__outbox_verdict v = ob->verdict;
    if (text && cap)
        snprintf(text, cap, "%s", ob->text);
    pthread_mutex_unlock(&ob->mu);
    return v;
}

void weir__outbox_stats_get(weir__outbox *ob, weir__outbox_stats *out)
{
    pthread_mutex_lock(&ob->mu);
    *out = ob->st;
    out->frames_pending = pending_frames(ob);
    out->bytes_pending = ob->q_bytes[0] + ob->q_bytes[1] + (ob->cur ? ob->cur->len : 0);
    out->stopped = ob->stopped;
    out->writer_done = ob->writer_done;
    pthread_mutex_unlock(&ob->mu);
}
