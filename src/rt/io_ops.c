/* SPDX-License-Identifier: Apache-2.0 */
/*
 * io_ops.c - the public I/O operations (weir/io.h): runtime ops that fill
 * in the I/O layer's request inside a weir_io_op, hand it to the loop's
 * backend, and for fibers wait for it.
 *
 * The backend (src/io/) knows nothing of tasks: it reports the end of a
 * request through the `done` callback the loop gave it at init, which is
 * weir__io_req_done below - that finds the op around the request and
 * completes it (weir__op_done), which wakes the waiting task. Who calls
 * whom on a completion: loop turn -> backend wait -> done callback ->
 * weir__op_done -> weir_task_wake.
 *
 * Wait-any is built here from plain poll requests ("parts") so that both
 * backends only ever see single-fd polls: the first part to report
 * readiness decides the result, the other parts are cancelled, and the
 * parent op is done only when every part has been reaped.
 *
 * Regular files under epoll. epoll cannot wait for a regular file, so its
 * backend would run a read or write of one inline, blocking the loop
 * thread on the disk. For read, write, pread, pwrite, readv and writev the
 * backend's file_fd hook says which descriptors those are (learned once per
 * descriptor), and such a request runs on the blocking pool instead
 * (file_job), as libuv does its fs work on a thread pool; io_uring does
 * file I/O asynchronously itself and has no hook. The pool's wait is
 * shielded: the call uses the caller's buffers, so the op must not end
 * before the call has. Cancellation and the deadline (the op's and the
 * task's) are honoured until the call starts on a pool thread - it then
 * returns -ECANCELED / -ETIMEDOUT without touching the file - and a call
 * that has started finishes with its real result, as a file read io_uring
 * has begun does. weir_io_close of such a file also runs on the pool (the
 * backend forgets the descriptor first, so its number can be reused), and
 * always closes it: a close the pool cannot take runs inline.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#include "io/backend.h"
#include "rt/rt_int.h"
#include "weir/io.h"

void weir__io_req_done(void *ud, weir__io_req *req, int64_t res)
{
    (void)ud;
    weir__op_done(&WEIR__CONTAINER_OF(req, weir_io_op, u.req)->op, res);
}

/* Hand a begun op's request to its loop's backend. */
static void io_hand(weir_io_op *op)
{
    weir_loop *l = op->op.task->loop;
    op->u.req.state = 0;
    op->u.req.next = op->u.req.prev = NULL;
    l->be->submit(l->be_state, &op->u.req);
}

/* ---- regular files on the blocking pool ---------------------------------------------- */
/* A read or write of a file the backend would do inline (epoll): the job's
 * argument. The op itself holds the request (kind, fd, buffers). */
typedef struct file_call {
    weir_io_op *op;
    int64_t deadline;
} file_call;

static intptr_t file_job(void *arg)
{
    file_call *c = arg;
    weir_io_op *op = c->op;
    int64_t deadline = c->deadline;
    free(c);
    /* The wait is shielded (the buffers must stay the caller's until the
     * call is over), so cancellation and the deadline are looked at here,
     * before the call: a call not yet started is not started, one started
     * finishes, as io_uring does with a file read it has begun. */
    if (weir__task_cancel_requested(op->op.task) || (weir__op_flags(&op->op) & WEIR__OP_CANCEL_REQ))
        return -ECANCELED;
    if (deadline != WEIR_FOREVER && weir_time_now() >= deadline)
        return -ETIMEDOUT;
    const weir__io_req *q = &op->u.req;
    ssize_t n;
    do {
        switch (q->kind) {
        case WEIR__IO_READ:
            n = q->u.rw.off < 0 ? read(q->fd, q->u.rw.buf, q->u.rw.len)
                                : pread(q->fd, q->u.rw.buf, q->u.rw.len, q->u.rw.off);
            break;
        case WEIR__IO_WRITE:
            n = q->u.rw.off < 0 ? write(q->fd, q->u.rw.buf, q->u.rw.len)
                                : pwrite(q->fd, q->u.rw.buf, q->u.rw.len, q->u.rw.off);
            break;
        case WEIR__IO_READV:
            n = readv(q->fd, q->u.vec.iov, q->u.vec.cnt);
            break;
        default:
            n = writev(q->fd, q->u.vec.iov, q->u.vec.cnt);
            break;
        }
    } while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : (intptr_t)n;
}

/* Whether a request of this kind on fd goes to the blocking pool: a
 * read/write family call on a descriptor the loop's backend says it would
 * serve inline (a regular file under epoll). A socket costs a table look-up
 * in the backend, no syscall. */
static int file_offload(int kind, int fd)
{
    if (kind < WEIR__IO_READ || kind > WEIR__IO_WRITEV)
        return 0;
    weir_loop *l = weir__loop_current();
    return l && l->current && l->be->file_fd && l->be->file_fd(l->be_state, fd);
}

static int file_submit(weir_io_op *op, int64_t deadline)
{
    weir_task *t = weir__loop_current()->current;
    int64_t td = weir__task_deadline(t);
    file_call *c = malloc(sizeof(*c));
    if (!c)
        return 1; /* no memory for the hand-off: the backend does it inline */
    c->op = op;
    c->deadline = td < deadline ? td : deadline;
    return weir__blocking_start_shielded(&op->op, file_job, c, free);
}

static int io_submit(weir_io_op *op, int kind, int fd, int64_t deadline)
{
    op->u.req.kind = (uint8_t)kind;
    op->u.req.fd = fd;
    if (WEIR__UNLIKELY(file_offload(kind, fd))) {
        int r = file_submit(op, deadline);
        if (r <= 0)
            return r;
    }
    int r = weir__op_begin(&op->op, WEIR__OP_IO, deadline);
    if (r != 0)
        return r < 0 ? r : 0;
    io_hand(op);
    return 0;
}

/* The kernel caps one transfer near INT_MAX anyway; keep sqe->len in range. */
static size_t clamp_len(size_t len)
{
    return len > (size_t)INT_MAX ? (size_t)INT_MAX : len;
}

static void set_rw(weir_io_op *op, void *buf, size_t len, int64_t off, int flags)
{
    op->u.req.u.rw.buf = buf;
    op->u.req.u.rw.len = clamp_len(len);
    op->u.req.u.rw.off = off;
    op->u.req.u.rw.flags = flags;
}

int weir_io_read_start(weir_io_op *op, int fd, void *buf, size_t len, int64_t off, int64_t deadline)
{
    set_rw(op, buf, len, off, 0);
    return io_submit(op, WEIR__IO_READ, fd, deadline);
}

int weir_io_write_start(weir_io_op *op, int fd, const void *buf, size_t len, int64_t off,
                        int64_t deadline)
{
    set_rw(op, (void *)buf, len, off, 0);
    return io_submit(op, WEIR__IO_WRITE, fd, deadline);
}

int weir_io_readv_start(weir_io_op *op, int fd, const struct iovec *iov, int cnt, int64_t deadline)
{
    op->u.req.u.vec.iov = iov;
    op->u.req.u.vec.cnt = cnt;
    return io_submit(op, WEIR__IO_READV, fd, deadline);
}

int weir_io_writev_start(weir_io_op *op, int fd, const struct iovec *iov, int cnt, int64_t deadline)
{
    op->u.req.u.vec.iov = iov;
    op->u.req.u.vec.cnt = cnt;
    return io_submit(op, WEIR__IO_WRITEV, fd, deadline);
}

int weir_io_recv_start(weir_io_op *op, int fd, void *buf, size_t len, int flags, int64_t deadline)
{
    set_rw(op, buf, len, -1, flags);
    return io_submit(op, WEIR__IO_RECV, fd, deadline);
}

int weir_io_send_start(weir_io_op *op, int fd, const void *buf, size_t len, int flags,
                       int64_t deadline)
{
    set_rw(op, (void *)buf, len, -1, flags | MSG_NOSIGNAL);
    return io_submit(op, WEIR__IO_SEND, fd, deadline);
}

int weir_io_accept_start(weir_io_op *op, int fd, struct sockaddr *addr, socklen_t *addrlen,
                         int64_t deadline)
{
    op->u.req.u.accept.addr = addr;
    op->u.req.u.accept.addrlen = addrlen;
    op->u.req.u.accept.flags = SOCK_NONBLOCK | SOCK_CLOEXEC;
    return io_submit(op, WEIR__IO_ACCEPT, fd, deadline);
}

int weir_io_connect_start(weir_io_op *op, int fd, const struct sockaddr *addr, socklen_t addrlen,
                          int64_t deadline)
{
    op->u.req.u.connect.addr = addr;
    op->u.req.u.connect.addrlen = addrlen;
    return io_submit(op, WEIR__IO_CONNECT, fd, deadline);
}

static intptr_t close_job(void *arg)
{
    int fd = (int)(intptr_t)arg;
    int r = close(fd);
    /* Linux releases the descriptor even when close reports EINTR. */
    return r < 0 && errno != EINTR ? -errno : 0;
}

/* A close the pool could not take (no memory, pool freed): still close. */
static void close_discard(void *arg)
{
    close((int)(intptr_t)arg);
}

int weir_io_close_start(weir_io_op *op, int fd)
{
    op->u.req.kind = WEIR__IO_CLOSE;
    op->u.req.fd = fd;
    if (WEIR__UNLIKELY(file_offload(WEIR__IO_READ, fd))) {
        /* A file under epoll: close it on the pool too (a close may flush),
         * the backend forgetting the number first. Shielded: a close has to
         * happen even for a cancelled task. */
        weir_loop *l = weir__loop_current();
        if (l->be->forget_fd)
            l->be->forget_fd(l->be_state, fd);
        return weir__blocking_start_shielded(&op->op, close_job, (void *)(intptr_t)fd,
                                             close_discard);
    }
    int r = weir__op_begin(&op->op, WEIR__OP_IO, WEIR_FOREVER);
    if (r < 0)
        return r;
    if (r > 0) {
        /* Cancelled task: a close still has to happen, so undo the refusal
         * and submit it anyway. */
        op->op.flags = WEIR__OP_ACTIVE;
        op->op.cancel_reason = WEIR__CANCEL_NONE;
        op->op.result = 0;
    }
    weir__op_anchor(&op->op); /* refused ops were not anchored */
    op->op.flags |= WEIR__OP_UNCANCELLABLE;
    io_hand(op);
    return 0;
}

int weir_io_poll_start(weir_io_op *op, int fd, uint32_t events, int64_t deadline)
{
    op->u.req.u.poll.events = events;
    op->u.req.u.poll.revents = 0;
    return io_submit(op, WEIR__IO_POLL, fd, deadline);
}

/* ---- wait-any ---------------------------------------------------------------------- */
int weir_io_wait_readable_any_start(weir_io_op *op, weir_io_op *parts, const int *fds, int nfds,
                                    int64_t deadline)
{
    if (nfds <= 0 || nfds > 4096 || !parts || !fds) {
        if (op) {
            op->op.flags = 0;
            op->op.result = -EINVAL;
        }
        return -EINVAL;
    }
    int r = weir__op_begin(&op->op, WEIR__OP_ANY, deadline);
    if (r != 0)
        return r < 0 ? r : 0;
    op->u.any.nfds = nfds;
    op->u.any.first = -1;
    op->u.any.parts = parts;
    /* `backend` counts the parts not yet reaped. */
    op->op.backend = (uint16_t)nfds;
    for (int i = 0; i < nfds; i++) {
        weir_io_op *p = &parts[i];
        p->op.task = op->op.task;
        p->op.result = 0;
        p->op.kind = WEIR__OP_IO;
        p->op.cancel_reason = 0;
        p->op.backend = 0;
        p->op.timer.slot = 0;
        p->op.timer.deadline = WEIR_FOREVER;
        p->op.flags = WEIR__OP_ACTIVE | WEIR__OP_PART;
        p->op.u.ptr = op; /* the parent, for weir__op_any_part_done */
        /* state 0 before any part is submitted: a cancel of the parts by an
         * early sibling leaves the later ones alone (backend.h). */
        p->u.req.kind = WEIR__IO_POLL;
        p->u.req.state = 0;
        p->u.req.fd = fds[i];
        p->u.req.next = p->u.req.prev = NULL;
        p->u.req.u.poll.events = POLLIN;
        p->u.req.u.poll.revents = 0;
    }
    weir_loop *l = op->op.task->loop;
    for (int i = 0; i < nfds; i++) {
        /* An earlier part may have completed inside submit and cancelled
         * the rest before they reached the backend. */
        if (weir__op_flags(&parts[i].op) & WEIR__OP_CANCELLING) {
            weir__op_done(&parts[i].op, -ECANCELED);
            continue;
        }
        l->be->submit(l->be_state, &parts[i].u.req);
    }
    return 0;
}

static void any_cancel_parts(weir_io_op *op)
{
    weir_loop *l = op->op.task->loop;
    for (int i = 0; i < op->u.any.nfds; i++) {
        weir_io_op *p = &op->u.any.parts[i];
        uint32_t f = weir__op_flags(&p->op);
        if (!(f & (WEIR__OP_DONE | WEIR__OP_CANCELLING))) {
            __atomic_fetch_or(&p->op.flags, WEIR__OP_CANCELLING, __ATOMIC_RELAXED);
            l->be->cancel(l->be_state, &p->u.req);
        }
    }
}

void weir__op_any_part_done(weir_op *part_op)
{
    weir_io_op *part = weir__io_of(part_op);
    weir_io_op *op = part->op.u.ptr;
    int idx = (int)(part - op->u.any.parts);
    /* Readiness that raced with a cancel is still reported: nothing lost. */
    if (op->u.any.first < 0 && part->op.result >= 0) {
        op->u.any.first = idx;
        any_cancel_parts(op);
    } else if (op->u.any.first < 0 && part->op.result < 0 && part->op.result != -ECANCELED) {
        /* A failing fd (EBADF...) fails the whole wait. */
        op->u.any.first = INT_MAX;
        op->op.result = part->op.result;
        any_cancel_parts(op);
    }
    if (--op->op.backend > 0)
        return;
    int64_t r;
    if (op->u.any.first == INT_MAX)
        r = op->op.result;
    else if (op->u.any.first >= 0)
        r = op->u.any.first;
    else
        r = -ECANCELED;
    weir__op_done(&op->op, r);
}

void weir__op_any_cancel(weir_op *op)
{
    any_cancel_parts(weir__io_of(op));
}

/* ---- fiber forms ---------------------------------------------------------------------- */
#define WAIT(start_call)                                                                           \
    do {                                                                                           \
        if (weir__stackless_caller())                                                              \
            return -EINVAL;                                                                        \
        weir_io_op op_;                                                                            \
        int r_ = start_call;                                                                       \
        if (r_ < 0)                                                                                \
            return r_;                                                                             \
        return weir_op_wait(&op_.op);                                                              \
    } while (0)

ssize_t weir_io_read(int fd, void *buf, size_t len, int64_t deadline)
{
    WAIT(weir_io_read_start(&op_, fd, buf, len, -1, deadline));
}

ssize_t weir_io_write(int fd, const void *buf, size_t len, int64_t deadline)
{
    WAIT(weir_io_write_start(&op_, fd, buf, len, -1, deadline));
}

ssize_t weir_io_pread(int fd, void *buf, size_t len, int64_t off, int64_t deadline)
{
    if (off < 0)
        return -EINVAL;
    WAIT(weir_io_read_start(&op_, fd, buf, len, off, deadline));
}

ssize_t weir_io_pwrite(int fd, const void *buf, size_t len, int64_t off, int64_t deadline)
{
    if (off < 0)
        return -EINVAL;
    WAIT(weir_io_write_start(&op_, fd, buf, len, off, deadline));
}

ssize_t weir_io_readv(int fd, const struct iovec *iov, int cnt, int64_t deadline)
{
    WAIT(weir_io_readv_start(&op_, fd, iov, cnt, deadline));
}

ssize_t weir_io_writev(int fd, const struct iovec *iov, int cnt, int64_t deadline)
{
    WAIT(weir_io_writev_start(&op_, fd, iov, cnt, deadline));
}

ssize_t weir_io_recv(int fd, void *buf, size_t len, int flags, int64_t deadline)
{
    WAIT(weir_io_recv_start(&op_, fd, buf, len, flags, deadline));
}

ssize_t weir_io_send(int fd, const void *buf, size_t len, int flags, int64_t deadline)
{
    WAIT(weir_io_send_start(&op_, fd, buf, len, flags, deadline));
}

int weir_io_accept(int fd, struct sockaddr *addr, socklen_t *addrlen, int64_t deadline)
{
    WAIT(weir_io_accept_start(&op_, fd, addr, addrlen, deadline));
}

int weir_io_connect(int fd, const struct sockaddr *addr, socklen_t addrlen, int64_t deadline)
{
    WAIT(weir_io_connect_start(&op_, fd, addr, addrlen, deadline));
}

int weir_io_close(int fd)
{
    WAIT(weir_io_close_start(&op_, fd));
}

int weir_io_poll(int fd, uint32_t events, int64_t deadline)
{
    WAIT(weir_io_poll_start(&op_, fd, events, deadline));
}

int weir_io_wait_readable_any(const int *fds, int nfds, int64_t deadline)
{
    if (weir__stackless_caller())
        return -EINVAL;
    if (nfds <= 0 || nfds > 4096)
        return -EINVAL;
    weir_io_op small[8];
    weir_io_op *parts = nfds <= 8 ? small : calloc((size_t)nfds, sizeof(*parts));
    if (!parts)
        return -ENOMEM;
    weir_io_op op;
    int r = weir_io_wait_readable_any_start(&op, parts, fds, nfds, deadline);
    int64_t v = r < 0 ? r : weir_op_wait(&op.op);
    if (parts != small)
        free(parts);
    return (int)v;
}
