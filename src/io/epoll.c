/* SPDX-License-Identifier: Apache-2.0 */
/*
 * epoll.c - the epoll backend (readiness based fallback for io_uring).
 *
 * Every op first tries its syscall at once (read, pread, write, pwrite,
 * readv, writev, recv/send with MSG_DONTWAIT, accept4, connect, close, or
 * poll(fd, 0) for POLL ops). Only on EAGAIN (EINPROGRESS for connect) is it
 * queued on its fd and interest armed; when readiness arrives the head ops
 * are retried until one sees EAGAIN again. Ops that complete inside submit
 * or cancel report through the context's done callback at once, as
 * backend.h allows.
 *
 * Per-fd state lives in a table indexed by fd (grown by doubling up to the
 * RLIMIT_NOFILE hard limit, at most 4M entries): three FIFO lists linked
 * through req->next/prev - read direction (read, readv, recv, accept), write
 * direction (write, writev, send, connect) and POLL ops - plus whether the
 * fd is in the epoll set and which events are armed. Ops on one fd and
 * direction complete in submission order: a new op does not jump the queue
 * while older ones wait. On first use of an fd, O_NONBLOCK is set on it if
 * fcntl(F_GETFL) says it lacks it (as libuv does; io.h documents this).
 *
 * Interest is EPOLLONESHOT. The keep-alive hot path (read -> EAGAIN -> wait
 * -> read -> write) then costs exactly one epoll_ctl per wait: the kernel
 * disarms the fd when it fires, so nothing has to be taken back when the
 * waiter is satisfied, and an fd with waiters left after a dispatch is
 * re-armed once for all directions. Level-triggered interest would need a
 * second ctl to drop it, and edge-triggered register-once interest cannot
 * notice an fd that the user close(2)d and whose number was reused: its
 * registration silently vanished. With ONESHOT every arm is an explicit
 * MOD/ADD, so ENOENT (registration gone) retries as ADD and EEXIST as MOD.
 * A MOD re-polls the file, so readiness that arrived before arming is seen.
 *
 * Limits: an fd closed with close(2) (instead of weir_io_close) while ops
 * wait on it leaves them waiting until their deadline or cancellation, and
 * if its number is reused by a descriptor created outside weir, the
 * O_NONBLOCK check is not repeated (accept and weir_io_close reset the
 * state of their fd). Regular files cannot be polled (epoll_ctl says EPERM)
 * and never return EAGAIN: a read or write of one would block the loop
 * thread on disk I/O, so ep_file_fd tells the runtime which descriptors are
 * files (one fstat per descriptor, remembered) and the runtime runs their
 * reads and writes on the blocking pool (rt/io_ops.c) instead of
 * submitting them here; what still reaches this backend for a file (a
 * poll, or a request the runtime could not offload) runs directly. A
 * descriptor number reused after close(2) keeps what was learned about it
 * until weir_io_close, an accept or a socket op resets it, as the
 * O_NONBLOCK check does. A non-blocking connect(2)
 * of a unix socket to a listener with a full backlog reports -EAGAIN.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "io/backend.h"

#define EP_EVENTS  256
#define EP_TAG_EFD UINT64_MAX /* epoll data of the loop's eventfd */
#define EP_PENDING INT64_MIN  /* try_op: would block, keep waiting */
#define EP_MAX_FDS (1 << 22)  /* table bound when RLIMIT_NOFILE is larger */
#define EP_POLLBITS                                                                                \
    (EPOLLIN | EPOLLPRI | EPOLLOUT | EPOLLRDNORM | EPOLLRDBAND | EPOLLWRNORM | EPOLLWRBAND |       \
     EPOLLMSG | EPOLLRDHUP)

/* req->state bits */
enum {
    B_QUEUED = 1,     /* on one of its fd's lists */
    B_CONNECTING = 2, /* connect() said EINPROGRESS: now wait and read SO_ERROR */
    B_DISPATCH = 4,   /* taken off its list by a dispatch that completes it next */
};

typedef struct ep_list {
    weir__io_req *head, *tail;
} ep_list;

typedef struct ep_fd {
    ep_list rd, wr, pl; /* read direction, write direction, POLL ops */
    uint32_t armed;     /* events armed in the kernel; 0 once ONESHOT fired */
    uint8_t added;      /* in the epoll set (as far as we know, see ep_arm) */
    uint8_t nb_done;    /* O_NONBLOCK ensured */
    uint8_t regular;    /* epoll refused it (EPERM): always ready */
    uint8_t ftype;      /* FT_*: what ep_file_fd learned (0: not asked yet) */
} ep_fd;

enum { FT_FILE = 1, FT_OTHER = 2 }; /* ep_fd.ftype */

typedef struct ep_state {
    int epfd;
    int no_pwait2; /* kernel without epoll_pwait2: use epoll_wait */
    int nfds;      /* table entries allocated */
    int maxfds;    /* bound on the table */
    ep_fd *fds;
    unsigned completed; /* ops completed during the current wait */
    weir__io_ctx ctx;
    struct epoll_event evs[EP_EVENTS];
} ep_state;

/* ---- lists ------------------------------------------------------------------------ */
static void list_push(ep_list *q, weir__io_req *req)
{
    req->next = NULL;
    req->prev = q->tail;
    if (q->tail)
        q->tail->next = req;
    else
        q->head = req;
    q->tail = req;
    req->state |= B_QUEUED;
}

static void list_unlink(ep_list *q, weir__io_req *req)
{
    if (req->prev)
        req->prev->next = req->next;
    else
        q->head = req->next;
    if (req->next)
        req->next->prev = req->prev;
    else
        q->tail = req->prev;
    req->next = req->prev = NULL;
    req->state &= (uint16_t)~B_QUEUED;
}

static ep_list *list_of(ep_fd *st, const weir__io_req *req)
{
    switch (req->kind) {
    case WEIR__IO_WRITE:
    case WEIR__IO_WRITEV:
    case WEIR__IO_SEND:
    case WEIR__IO_CONNECT:
        return &st->wr;
    case WEIR__IO_POLL:
        return &st->pl;
    default:
        return &st->rd;
    }
}

static int has_waiters(const ep_fd *st)
{
    return st->rd.head || st->wr.head || st->pl.head;
}

/* ---- the fd table ----------------------------------------------------------------- */
static ep_fd *fd_get(ep_state *s, int fd, int *err)
{
    if (fd < 0 || fd >= s->maxfds) {
        *err = -EBADF;
        return NULL;
    }
    if (fd >= s->nfds) {
        long n = s->nfds ? s->nfds : 64;
        while (n <= fd)
            n *= 2;
        if (n > s->maxfds)
            n = s->maxfds;
        ep_fd *t = realloc(s->fds, (size_t)n * sizeof(*t));
        if (!t) {
            *err = -ENOMEM;
            return NULL;
        }
        memset(t + s->nfds, 0, (size_t)(n - s->nfds) * sizeof(*t));
        s->fds = t;
        s->nfds = (int)n;
    }
    return &s->fds[fd];
}

static int ensure_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -errno;
    if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

/* ---- syscalls --------------------------------------------------------------------- */
static int64_t try_connect(weir__io_req *req, uint32_t ev)
{
    int fd = req->fd;
    if (!(req->state & B_CONNECTING)) {
        if (connect(fd, req->u.connect.addr, req->u.connect.addrlen) == 0)
            return 0;
        /* EINTR: the connection goes on asynchronously, as with EINPROGRESS. */
        if (errno == EINPROGRESS || errno == EINTR) {
            req->state |= B_CONNECTING;
            return EP_PENDING;
        }
        return -errno;
    }
    int err = 0;
    socklen_t sl = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) < 0)
        return -errno;
    if (err)
        return -err;
    /* A connecting socket becomes writable only once established. */
    return (ev & EPOLLOUT) ? 0 : EP_PENDING;
}

static int64_t try_poll(weir__io_req *req)
{
    struct pollfd p = {.fd = req->fd, .events = (short)req->u.poll.events};
    int r;
    while ((r = poll(&p, 1, 0)) < 0 && errno == EINTR)
        ;
    if (r < 0)
        return -errno;
    if (p.revents & POLLNVAL)
        return -EBADF;
    return p.revents ? (int64_t)(uint16_t)p.revents : EP_PENDING;
}

/* The op's syscall, non-blocking: its result, or EP_PENDING. `ev` is the
 * readiness that triggered a retry (0 on the first attempt). */
static int64_t try_op(weir__io_req *req, uint32_t ev)
{
    ssize_t r;
    for (;;) {
        switch (req->kind) {
        case WEIR__IO_READ:
            r = req->u.rw.off < 0 ? read(req->fd, req->u.rw.buf, req->u.rw.len)
                                  : pread(req->fd, req->u.rw.buf, req->u.rw.len, req->u.rw.off);
            break;
        case WEIR__IO_WRITE:
            r = req->u.rw.off < 0 ? write(req->fd, req->u.rw.buf, req->u.rw.len)
                                  : pwrite(req->fd, req->u.rw.buf, req->u.rw.len, req->u.rw.off);
            break;
        case WEIR__IO_READV:
            r = readv(req->fd, req->u.vec.iov, req->u.vec.cnt);
            break;
        case WEIR__IO_WRITEV:
            r = writev(req->fd, req->u.vec.iov, req->u.vec.cnt);
            break;
        case WEIR__IO_RECV:
            r = recv(req->fd, req->u.rw.buf, req->u.rw.len, req->u.rw.flags | MSG_DONTWAIT);
            break;
        case WEIR__IO_SEND:
            r = send(req->fd, req->u.rw.buf, req->u.rw.len, req->u.rw.flags | MSG_DONTWAIT);
            break;
        case WEIR__IO_ACCEPT:
            r = accept4(req->fd, req->u.accept.addr, req->u.accept.addrlen, req->u.accept.flags);
            break;
        case WEIR__IO_CONNECT:
            return try_connect(req, ev);
        case WEIR__IO_POLL:
            return try_poll(req);
        default:
            return -EINVAL;
        }
        if (r >= 0)
            return r;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return EP_PENDING;
        return -errno;
    }
}

/* ---- completion ------------------------------------------------------------------- */
static void complete(ep_state *s, weir__io_req *req, int64_t r)
{
    req->state = 0;
    s->completed++;
    s->ctx.done(s->ctx.ud, req, r);
}

/* A new accepted descriptor may reuse the number of one closed behind our
 * back: start its state afresh (accept4 made it non-blocking). */
static void fresh_fd(ep_state *s, int fd)
{
    int err;
    ep_fd *st = fd_get(s, fd, &err); /* may move the table: callers re-index */
    if (st && !has_waiters(st))
        *st = (ep_fd){.nb_done = 1, .ftype = FT_OTHER}; /* a socket */
}

static void finish(ep_state *s, weir__io_req *req, int64_t r)
{
    if (req->kind == WEIR__IO_ACCEPT && r >= 0)
        fresh_fd(s, (int)r);
    complete(s, req, r);
}

/* ---- interest --------------------------------------------------------------------- */
static uint32_t want_of(const ep_fd *st)
{
    uint32_t w = 0;
    if (st->rd.head)
        w |= EPOLLIN;
    if (st->wr.head)
        w |= EPOLLOUT;
    for (const weir__io_req *req = st->pl.head; req; req = req->next)
        w |= req->u.poll.events & EP_POLLBITS;
    return w;
}

/* Arm ONESHOT interest for the fd's waiters. 0 or -errno. */
static int ep_arm(ep_state *s, int fd, ep_fd *st)
{
    uint32_t want = want_of(st);
    if (!want || (st->armed && (st->armed & want) == want))
        return 0;
    struct epoll_event e = {.events = want | EPOLLONESHOT, .data.u64 = (uint64_t)fd};
    int ctl = st->added ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    int r = epoll_ctl(s->epfd, ctl, fd, &e);
    if (r < 0 && errno == ENOENT && ctl == EPOLL_CTL_MOD) /* closed and reused */
        r = epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &e);
    else if (r < 0 && errno == EEXIST && ctl == EPOLL_CTL_ADD)
        r = epoll_ctl(s->epfd, EPOLL_CTL_MOD, fd, &e);
    if (r < 0) {
        int err = errno;
        if (err == EPERM)
            st->regular = 1;
        st->added = 0;
        st->armed = 0;
        return -err;
    }
    st->added = 1;
    st->armed = want;
    return 0;
}

/* Take back armed interest. A disarmed (fired) ONESHOT item reports nothing
 * and is left in place, so that the next arm is a plain MOD. */
static void ep_drop(ep_state *s, int fd, ep_fd *st)
{
    if (st->added && st->armed) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, NULL);
        st->added = 0;
    }
    st->armed = 0;
}

/* Arming failed: nothing will tell us about readiness, so end every waiter
 * with one last attempt (a non-pollable fd is always ready) or the error. */
static void fail_fd(ep_state *s, int fd, int err)
{
    for (;;) {
        ep_fd *st = &s->fds[fd];
        ep_list *q = st->rd.head ? &st->rd : st->wr.head ? &st->wr : &st->pl;
        weir__io_req *req = q->head;
        if (!req)
            return;
        list_unlink(q, req);
        int64_t r = try_op(req, 0);
        if (r == EP_PENDING)
            r = err == -EPERM ? -EAGAIN : err;
        finish(s, req, r);
    }
}

/* ---- backend interface ------------------------------------------------------------ */
static void do_close(ep_state *s, weir__io_req *req)
{
    int fd = req->fd;
    if (fd >= 0 && fd < s->nfds) {
        for (;;) {
            ep_fd *st = &s->fds[fd];
            ep_list *q = st->rd.head ? &st->rd : st->wr.head ? &st->wr : &st->pl;
            weir__io_req *w = q->head;
            if (!w)
                break;
            list_unlink(q, w);
            complete(s, w, -EBADF);
        }
        if (s->fds[fd].added) /* before the close: the number may be reused at once */
            epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, NULL);
        s->fds[fd] = (ep_fd){0};
    }
    int r = close(fd);
    /* Linux releases the descriptor even when close reports EINTR. */
    s->ctx.done(s->ctx.ud, req, r < 0 && errno != EINTR ? -errno : 0);
}

static void ep_submit(void *state, weir__io_req *req)
{
    ep_state *s = state;
    if (req->kind == WEIR__IO_CLOSE) {
        do_close(s, req);
        return;
    }
    int fd = req->fd, err = 0;
    ep_fd *st = fd_get(s, fd, &err);
    if (!st) {
        s->ctx.done(s->ctx.ud, req, err);
        return;
    }
    /* Only a socket takes these: no file (see ep_file_fd). */
    if (req->kind >= WEIR__IO_RECV && req->kind <= WEIR__IO_CONNECT)
        st->ftype = FT_OTHER;
    /* A connect usually starts a socket's life: check it afresh. So is an
     * accept: a listener's number may be one this loop saw as another
     * descriptor (closed on another loop, whose close reset only that
     * loop's state), and an accept4 on a blocking listener would hold the
     * loop's thread until a connection came. */
    if (!st->nb_done || req->kind == WEIR__IO_CONNECT || req->kind == WEIR__IO_ACCEPT) {
        if ((err = ensure_nonblock(fd)) < 0) {
            s->ctx.done(s->ctx.ud, req, err);
            return;
        }
        st->nb_done = 1;
    }
    ep_list *q = list_of(st, req);
    /* FIFO: while older ops of this direction wait, a new one queues behind
     * them (their readiness event is pending). Polls consume nothing and a
     * connect has to be issued once, so those always try. */
    if (!q->head || req->kind == WEIR__IO_POLL || req->kind == WEIR__IO_CONNECT) {
        int64_t r = try_op(req, 0);
        if (r != EP_PENDING || st->regular) {
            if (r == EP_PENDING)
                r = -EAGAIN;
            req->state = 0;
            if (req->kind == WEIR__IO_ACCEPT && r >= 0)
                fresh_fd(s, (int)r);
            s->ctx.done(s->ctx.ud, req, r);
            return;
        }
    }
    list_push(q, req);
    if ((err = ep_arm(s, fd, st)) < 0)
        fail_fd(s, fd, err);
}

static void ep_cancel(void *state, weir__io_req *req)
{
    ep_state *s = state;
    /* Not queued: it is being completed by a dispatch right now (or already
     * was), which reports its real result. */
    if (!(req->state & B_QUEUED))
        return;
    int fd = req->fd;
    ep_fd *st = &s->fds[fd];
    list_unlink(list_of(st, req), req);
    if (!has_waiters(st)) {
        ep_drop(s, fd, st);
        /* An fd given up on (timeout, cancel) is often close(2)d next and
         * its number reused: re-check O_NONBLOCK on its next use. */
        st->nb_done = 0;
        st->ftype = 0;
    }
    req->state = 0;
    s->ctx.done(s->ctx.ud, req, -ECANCELED);
}

/* Retry the head ops of one direction until one would block again. */
static void retry_list(ep_state *s, int fd, int write_dir, uint32_t ev)
{
    for (;;) {
        ep_fd *st = &s->fds[fd];
        ep_list *q = write_dir ? &st->wr : &st->rd;
        weir__io_req *req = q->head;
        if (!req)
            return;
        int64_t r = try_op(req, ev);
        if (r == EP_PENDING)
            return;
        list_unlink(q, req);
        finish(s, req, r);
    }
}

/* Complete the POLL ops the event satisfies. They are unlinked first and
 * completed after, because completing a wait-any part cancels its siblings,
 * which may sit on this very list. */
static void dispatch_polls(ep_state *s, int fd, uint32_t ev)
{
    ep_fd *st = &s->fds[fd];
    weir__io_req *ready = NULL, **tail = &ready;
    for (weir__io_req *req = st->pl.head, *nx; req; req = nx) {
        nx = req->next;
        uint32_t rev = ev & (req->u.poll.events | EPOLLERR | EPOLLHUP);
        if (!rev)
            continue;
        list_unlink(&st->pl, req);
        req->state = B_DISPATCH;
        req->u.poll.revents = rev;
        *tail = req;
        tail = &req->next;
    }
    while (ready) {
        weir__io_req *req = ready;
        ready = req->next;
        req->next = NULL;
        complete(s, req, req->u.poll.revents);
    }
}

static void on_event(ep_state *s, int fd, uint32_t ev)
{
    if (fd < 0 || fd >= s->nfds)
        return;
    s->fds[fd].armed = 0; /* ONESHOT: the kernel disarmed it */
    if (ev & (EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLERR | EPOLLHUP))
        retry_list(s, fd, 0, ev);
    if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))
        retry_list(s, fd, 1, ev);
    if (s->fds[fd].pl.head)
        dispatch_polls(s, fd, ev);
    ep_fd *st = &s->fds[fd];
    int err;
    if (has_waiters(st) && (err = ep_arm(s, fd, st)) < 0)
        fail_fd(s, fd, err);
}

static void drain_efd(ep_state *s)
{
    uint64_t v;
    /* One read resets an eventfd; the bound only guards against a writer
     * storm keeping it readable forever. */
    for (int i = 0; i < 8 && read(s->ctx.wake_fd, &v, sizeof(v)) == (ssize_t)sizeof(v); i++)
        ;
    s->ctx.woken(s->ctx.ud);
}

static int ep_wait(void *state, int64_t timeout_ns)
{
    ep_state *s = state;
    int n = -1;
    if (!s->no_pwait2) {
        struct timespec ts, *tp = NULL;
        if (timeout_ns >= 0) {
            ts.tv_sec = (time_t)(timeout_ns / WEIR__IO_SEC);
            ts.tv_nsec = (long)(timeout_ns % WEIR__IO_SEC);
            tp = &ts;
        }
        n = epoll_pwait2(s->epfd, s->evs, EP_EVENTS, tp, NULL);
        if (n < 0 && errno == ENOSYS)
            s->no_pwait2 = 1;
    }
    if (s->no_pwait2) {
        int ms = -1;
        if (timeout_ns >= 0) {
            /* Rounded up: waking early would only spin until the deadline. */
            int64_t m = (timeout_ns + WEIR__IO_MSEC - 1) / WEIR__IO_MSEC;
            ms = m > INT32_MAX ? INT32_MAX : (int)m;
        }
        n = epoll_wait(s->epfd, s->evs, EP_EVENTS, ms);
    }
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    s->completed = 0;
    for (int i = 0; i < n; i++) {
        if (s->evs[i].data.u64 == EP_TAG_EFD)
            drain_efd(s);
        else
            on_event(s, (int)s->evs[i].data.u64, s->evs[i].events);
    }
    return (int)s->completed;
}

static int ep_init(void **state, const weir__io_ctx *ctx)
{
    ep_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->ctx = *ctx;
    struct rlimit rl;
    rlim_t lim = EP_MAX_FDS;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rlim_t m = rl.rlim_max != RLIM_INFINITY ? rl.rlim_max : rl.rlim_cur;
        if (m != RLIM_INFINITY && m < lim)
            lim = m < 64 ? 64 : m;
    }
    s->maxfds = (int)lim;
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epfd < 0) {
        int err = errno;
        free(s);
        return -err;
    }
    /* Level-triggered: it is drained every time it fires. */
    struct epoll_event e = {.events = EPOLLIN, .data.u64 = EP_TAG_EFD};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, ctx->wake_fd, &e) < 0) {
        int err = errno;
        close(s->epfd);
        free(s);
        return -err;
    }
    *state = s;
    weir__log(WEIR__LOG_DEBUG, "io.epoll", "epoll backend, fd table bound %d", s->maxfds);
    return 0;
}

static void ep_fini(void *state)
{
    ep_state *s = state;
    if (!s)
        return;
    close(s->epfd);
    free(s->fds);
    free(s);
}

/* Every op reaches the kernel inside submit: nothing is ever owed. */
static unsigned ep_pending(void *state)
{
    (void)state;
    return 0;
}

/* Whether fd is a regular file or a block device: epoll cannot wait for
 * those and their read/write would block the loop thread, so the runtime
 * runs them on the blocking pool. One fstat per descriptor, remembered in
 * its table entry until weir_io_close (which the runtime runs on the pool
 * for a file, after ep_forget_fd), an accept that returns its number, or a
 * cancelled wait resets it; a socket op (recv, send, accept,
 * connect) marks it a socket without asking. */
static int ep_file_fd(void *state, int fd)
{
    ep_state *s = state;
    int err;
    ep_fd *st = fd_get(s, fd, &err);
    if (!st)
        return 0; /* the request itself reports the error */
    if (!st->ftype) {
        struct stat sb;
        if (fstat(fd, &sb) < 0)
            return 0; /* EBADF: let the request report it; learn nothing */
        st->ftype = S_ISREG(sb.st_mode) || S_ISBLK(sb.st_mode) ? FT_FILE : FT_OTHER;
    }
    return st->ftype == FT_FILE;
}

/* fd is a file the runtime closes on the pool: its number may be reused
 * right after, so nothing learned about it may stay. A file is never
 * queued or in the epoll set (epoll refuses it), so there is nothing else
 * to undo. */
static void ep_forget_fd(void *state, int fd)
{
    ep_state *s = state;
    if (fd >= 0 && fd < s->nfds && !has_waiters(&s->fds[fd]))
        s->fds[fd] = (ep_fd){0};
}

const weir__backend weir__backend_epoll = {
    .name = "epoll",
    .init = ep_init,
    .fini = ep_fini,
    .submit = ep_submit,
    .cancel = ep_cancel,
    .wait = ep_wait,
    .pending = ep_pending,
    .file_fd = ep_file_fd,
    .forget_fd = ep_forget_fd,
};
