/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckpt_link_tcp.c - checkpoint messages between processes (ckpt_link.h),
 * over one stream socket per worker process: TCP, or a socketpair a
 * parent made before forking its workers.
 *
 * The coordinator's process keeps a socket to every worker process. Its
 * link delivers TRIGGER / COMPLETE / ABORT / FINAL for a subtask of its own
 * process to that subtask's mailbox, and writes the others' to the
 * socket of the process the subtask runs in; ACKs (and FINAL_REQs) of its own
 * subtasks go straight to the coordinator's queue, and a reader fiber per
 * worker socket decodes the workers' ones into the same queue. A worker's link
 * writes its subtasks' ACKs to its one socket (a mutex keeps frames
 * whole: several subtasks ack at once) and a reader fiber delivers what
 * the coordinator sends to the subtask it names.
 *
 * Frames (weir/net.h conventions), kind WEIR__CKPT_FRAME:
 *
 *   u8 message (TRIGGER..FINAL)  u64 id  u32 chain  u32 subtask
 *   u32 err (as int32)  u64 bytes  str state  str position
 *
 * Every field is checked on receipt: a message naming a subtask that does
 * not run in the receiving process, an unknown kind, a handle that is not
 * a storage name, is a protocol error: it fails the job naming the peer,
 * and the socket is no longer read. An end of the stream is not an error
 * by itself (a worker that finished closes its socket): a peer that died
 * breaks the data channels to it, which fail the job. The end of a
 * worker's socket is told to the checkpoint coordinator all the same: a
 * run ends through its final checkpoint, which that worker will never
 * acknowledge now (ckpt_link.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "state/storage.h"
#include "stream/ckpt_link.h"
#include "stream/plan.h"
#include "stream/stream_int.h"
#include "weir/net.h"

#define WEIR__CKPT_FRAME 'K'
#define FRAME_MAX        (64 + 2 * WEIR__CKPT_HANDLE_MAX)

typedef struct tcp_link {
    weir__ckpt_link l;
    run *r;
    int self, nprocs;
    int *fds; /* [nprocs]: coordinator: each worker's socket (-1: self); worker: [0] */
    int (*place)(void *arg, uint32_t chain, uint32_t sub);
    void *place_arg;
    int coordinator;
    weir_chan *acks;   /* the coordinator's queue */
    weir_mutex *wlock; /* a worker's writes */
    weir_scope *readers;
} tcp_link;

static int encode(const weir__ckpt_msg *m, weir_frame_builder *fb)
{
    weir_frame_builder_init(fb, WEIR__CKPT_FRAME);
    weir_frame_put_u8(fb, (uint8_t)m->kind);
    weir_frame_put_u64(fb, m->id);
    weir_frame_put_u32(fb, m->chain);
    weir_frame_put_u32(fb, m->sub);
    weir_frame_put_u32(fb, (uint32_t)m->err);
    weir_frame_put_u64(fb, m->bytes);
    weir_frame_put_str(fb, m->state);
    weir_frame_put_str(fb, m->position);
    const uint8_t *b;
    size_t len;
    return weir_frame_builder_finish(fb, &b, &len);
}

static int write_msg(tcp_link *t, int fd, const weir__ckpt_msg *m)
{
    weir_frame_builder fb;
    int e = encode(m, &fb);
    const uint8_t *b;
    size_t len;
    if (!e && !(e = weir_frame_builder_finish(&fb, &b, &len))) {
        if (t->wlock && (e = weir_mutex_lock(t->wlock, WEIR_FOREVER)) == 0) {
            e = weir_frame_write(fd, b, len, WEIR_FOREVER);
            weir_mutex_unlock(t->wlock);
        } else if (!t->wlock) {
            e = weir_frame_write(fd, b, len, WEIR_FOREVER);
        }
    }
    weir_frame_builder_close(&fb);
    return e;
}

int weir__ckpt_msg_decode(const uint8_t *p, size_t len, weir__ckpt_msg *m, char *why, size_t cap)
{
    weir_frame_reader r;
    weir_frame_reader_init(&r, p, len);
    uint8_t kind = 0, msg = 0;
    uint32_t err = 0;
    memset(m, 0, sizeof(*m));
    weir_frame_get_u8(&r, &kind);
    weir_frame_get_u8(&r, &msg);
    weir_frame_get_u64(&r, &m->id);
    weir_frame_get_u32(&r, &m->chain);
    weir_frame_get_u32(&r, &m->sub);
    weir_frame_get_u32(&r, &err);
    weir_frame_get_u64(&r, &m->bytes);
    weir_frame_get_str(&r, m->state, sizeof(m->state));
    weir_frame_get_str(&r, m->position, sizeof(m->position));
    const char *bad = NULL;
    if (weir_frame_reader_error(&r) || !weir_frame_at_end(&r) || kind != WEIR__CKPT_FRAME)
        bad = "a malformed checkpoint message";
    else if (msg < WEIR__CK_TRIGGER || msg > WEIR__CK_LAST)
        bad = "an unknown checkpoint message";
    else if ((m->id == 0 && msg != WEIR__CK_FINAL_REQ) || m->id > INT64_MAX)
        bad = "a checkpoint id of 0 or past 2^63";
    else if ((m->state[0] && weir__storage_check_name(m->state, 0) < 0) ||
             (m->position[0] && weir__storage_check_name(m->position, 0) < 0))
        bad = "a handle that is not a storage name";
    if (bad) {
        snprintf(why, cap, "%s", bad);
        return -EBADMSG;
    }
    m->kind = msg;
    m->err = (int32_t)err;
    return 0;
}

typedef struct reader_arg {
    tcp_link *t;
    int proc, fd; /* the peer process and its socket */
} reader_arg;

static intptr_t reader(void *arg)
{
    reader_arg *ra = arg;
    tcp_link *t = ra->t;
    int proc = ra->proc, fd = ra->fd;
    weir__free(ra);
    weir_frame_parser p;
    weir_frame_parser_init(&p, &(weir_frame_limits){FRAME_MAX, FRAME_MAX});
    for (;;) {
        weir_frame f = {0};
        ssize_t n = weir_frame_read(fd, &p, &f, WEIR_FOREVER);
        if (n <= 0 && n != -ECANCELED && !t->coordinator && t->r->o.checkpoint_interval_ms > 0) {
            /* The coordinator's process closed its end, or it broke:
             * nothing more comes (a subtask waiting for the final
             * checkpoint would wait forever). What it sent before is in
             * the mailboxes ahead of this: a subtask told that the final
             * one completed ends well. (Not weir__ckpt_has_final: this
             * reader may run before the run's link field is assigned; the
             * link exists by construction, and r->o was set before it.) */
            for (int ci = 0; ci < t->r->nchains; ci++)
                for (int s = 0; s < t->r->chains[ci].par; s++)
                    if (t->r->chains[ci].subs[s].here)
                        weir__subtask_post(&t->r->chains[ci].subs[s],
                                           (item){IT_FAIL, 0, {NULL}, n < 0 ? (int)n : -EPIPE});
        }
        if (n <= 0 && n != -ECANCELED && t->coordinator) {
            /* A worker's process closed its end, or it broke: its ACKs
             * stop. The coordinator decides what that means (ckpt_link.h:
             * ABORT from a link). */
            weir__ckpt_msg g = {
                .kind = WEIR__CK_ABORT, .chain = (uint32_t)proc, .err = n < 0 ? (int)n : -EPIPE};
            weir_chan_try_send(t->acks, &g);
        }
        if (n <= 0)
            break; /* the end of the stream, the end of the run, or broken */
        weir__ckpt_msg m;
        char why[96] = "";
        int e = weir__ckpt_msg_decode(f.data, f.len, &m, why, sizeof(why));
        weir_frame_free(&f);
        subtask *st = e ? NULL : weir__ckpt_local_subtask(t->r, &m);
        if (!e && t->coordinator) {
            /* From a worker: only ACKs and FINAL_REQs, of its own subtasks
             * (of the plan: place() is never asked about numbers the plan
             * does not have). */
            const weir__plan *pl = t->r->plan;
            if (!weir__ckpt_to_coordinator(m.kind) || m.chain >= pl->nchains ||
                m.sub >= pl->chains[m.chain].par || t->place(t->place_arg, m.chain, m.sub) != proc)
                e = -EBADMSG, snprintf(why, sizeof(why), "an ACK for a subtask it does not run");
            else
                e = weir_chan_send(t->acks, &m, WEIR_FOREVER);
        } else if (!e) {
            if (weir__ckpt_to_coordinator(m.kind) || !st)
                e = -EBADMSG,
                snprintf(why, sizeof(why), "a message for no subtask of this process");
            else
                weir__ckpt_deliver(st, &m);
        }
        if (e == -EBADMSG) {
            weir__stream_fail(t->r->j, e, "checkpoint link from process %d: %s", proc, why);
            /* Whatever this process runs ends with it. */
            for (int ci = 0; ci < t->r->nchains; ci++)
                for (int s = 0; s < t->r->chains[ci].par; s++)
                    if (t->r->chains[ci].subs[s].here)
                        weir__subtask_post(&t->r->chains[ci].subs[s],
                                           (item){IT_FAIL, 0, {NULL}, -EPROTO});
            break;
        }
        if (e)
            break;
    }
    weir_frame_parser_close(&p);
    return 0;
}

static int tcp_ack(weir__ckpt_link *l, const weir__ckpt_msg *m)
{
    tcp_link *t = (tcp_link *)l;
    if (t->coordinator)
        return weir_chan_send(t->acks, m, WEIR_FOREVER);
    return write_msg(t, t->fds[0], m);
}

static int tcp_recv_ack(weir__ckpt_link *l, weir__ckpt_msg *m, int64_t deadline)
{
    tcp_link *t = (tcp_link *)l;
    return t->coordinator ? weir_chan_recv(t->acks, m, deadline) : -EINVAL;
}

static int tcp_send(weir__ckpt_link *l, const weir__ckpt_msg *m)
{
    tcp_link *t = (tcp_link *)l;
    if (!t->coordinator)
        return -EINVAL;
    subtask *st = weir__ckpt_local_subtask(t->r, m);
    if (st)
        return weir__ckpt_deliver(st, m);
    int proc = t->place(t->place_arg, m->chain, m->sub);
    if (proc < 0 || proc >= t->nprocs || t->fds[proc] < 0)
        return -EINVAL;
    return write_msg(t, t->fds[proc], m);
}

static void tcp_stop(weir__ckpt_link *l)
{
    tcp_link *t = (tcp_link *)l;
    if (!t->readers)
        return;
    weir_scope_cancel(t->readers);
    weir_scope_join(t->readers, NULL);
    weir_scope_free(t->readers);
    t->readers = NULL;
}

static void tcp_free(weir__ckpt_link *l)
{
    tcp_link *t = (tcp_link *)l;
    tcp_stop(l);
    for (int i = 0; t->fds && i < (t->coordinator ? t->nprocs : 1); i++)
        if (t->fds[i] >= 0)
            weir_io_close(t->fds[i]);
    if (t->acks)
        weir_chan_unref(t->acks);
    if (t->wlock)
        weir_mutex_free(t->wlock);
    weir__free(t->fds);
    weir__free(t);
}

static const weir__ckpt_link_ops tcp_ops = {tcp_ack, tcp_recv_ack, tcp_send, tcp_stop, tcp_free};

weir__ckpt_link *weir__ckpt_link_tcp(run *r, const weir__ckpt_tcp_opts *o)
{
    tcp_link *t = weir__calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->l.ops = &tcp_ops;
    t->r = r;
    t->self = o->self;
    t->nprocs = o->nprocs;
    t->place = o->place;
    t->place_arg = o->place_arg;
    t->coordinator = o->self == o->coordinator;
    int nfds = t->coordinator ? o->nprocs : 1;
    int ok = (t->fds = weir__calloc((size_t)nfds, sizeof(int))) != NULL;
    for (int i = 0; ok && i < nfds; i++)
        t->fds[i] = t->coordinator ? (i == o->self ? -1 : o->fds[i]) : o->fds[o->coordinator];
    ok = ok && (t->readers = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER));
    if (ok && t->coordinator)
        ok = (t->acks = weir_chan_new(sizeof(weir__ckpt_msg), WEIR_CHAN_UNBOUNDED)) != NULL;
    if (ok && !t->coordinator)
        ok = (t->wlock = weir_mutex_new()) != NULL;
    for (int i = 0; ok && i < nfds; i++) {
        if (t->fds[i] < 0)
            continue;
        reader_arg *ra = weir__malloc(sizeof(*ra));
        if (ra)
            *ra = (reader_arg){t, t->coordinator ? i : o->coordinator, t->fds[i]};
        if (!ra || !weir_scope_spawn(
                       t->readers, reader, ra,
                       &(weir_spawn_opts){.name = "checkpoint link", .stack_size = 64u << 10})) {
            weir__free(ra);
            ok = 0;
            break;
        }
    }
    if (!ok) {
        if (t->fds) /* the fds stay the caller's on failure */
            for (int i = 0; i < nfds; i++)
                t->fds[i] = -1;
        tcp_free(&t->l);
        errno = ENOMEM;
        return NULL;
    }
    return &t->l;
}
