/* SPDX-License-Identifier: Apache-2.0 */
/*
 * io.c - the public I/O operations (weir/io.h): fill in a leaf op, hand it
 * to the loop's backend, and for fibers wait for it.
 *
 * Wait-any is built here from plain poll ops ("parts") so that both backends
 * only ever see single-fd polls: the first part to report readiness decides
 * the result, the other parts are cancelled, and the parent op is done only
 * when every part has been reaped.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "io/backend.h"
#include "rt/rt_int.h"
#include "weir/io.h"

static int io_submit(weir_io_op *op, int kind, int64_t deadline)
{
    int r = weir__op_begin(&op->op, kind, deadline);
    if (r != 0)
        return r < 0 ? r : 0;
    op->next = op->prev = op->parent = NULL;
    weir_loop *l = op->op.task->loop;
    l->be->submit(l, op);
    return 0;
}

/* The kernel caps one transfer near INT_MAX anyway; keep sqe->len in range. */
static size_t clamp_len(size_t len)
{
    return len > (size_t)INT_MAX ? (size_t)INT_MAX : len;
}

int weir_io_read_start(weir_io_op *op, int fd, void *buf, size_t len, int64_t off, int64_t deadline)
{
    op->u.rw.fd = fd;
    op->u.rw.buf = buf;
    op->u.rw.len = clamp_len(len);
    op->u.rw.off = off;
    op->u.rw.flags = 0;
    return io_submit(op, WEIR__OP_READ, deadline);
}

int weir_io_write_start(weir_io_op *op, int fd, const void *buf, size_t len, int64_t off,
                        int64_t deadline)
{
    op->u.rw.fd = fd;
    op->u.rw.buf = (void *)buf;
    op->u.rw.len = clamp_len(len);
    op->u.rw.off = off;
    op->u.rw.flags = 0;
    return io_submit(op, WEIR__OP_WRITE, deadline);
}

int weir_io_readv_start(weir_io_op *op, int fd, const struct iovec *iov, int cnt, int64_t deadline)
{
    op->u.vec.fd = fd;
    op->u.vec.iov = iov;
    op->u.vec.cnt = cnt;
    op->u.vec.off = -1;
    return io_submit(op, WEIR__OP_READV, deadline);
}

int weir_io_writev_start(weir_io_op *op, int fd, const struct iovec *iov, int cnt, int64_t deadline)
{
    op->u.vec.fd = fd;
    op->u.vec.iov = iov;
    op->u.vec.cnt = cnt;
    op->u.vec.off = -1;
    return io_submit(op, WEIR__OP_WRITEV, deadline);
}

int weir_io_recv_start(weir_io_op *op, int fd, void *buf, size_t len, int flags, int64_t deadline)
{
    op->u.rw.fd = fd;
    op->u.rw.buf = buf;
    op->u.rw.len = clamp_len(len);
    op->u.rw.off = -1;
    op->u.rw.flags = flags;
    return io_submit(op, WEIR__OP_RECV, deadline);
}

int weir_io_send_start(weir_io_op *op, int fd, const void *buf, size_t len, int flags,
                       int64_t deadline)
{
    op->u.rw.fd = fd;
    op->u.rw.buf = (void *)buf;
    op->u.rw.len = clamp_len(len);
    op->u.rw.off = -1;
    op->u.rw.flags = flags | MSG_NOSIGNAL;
    return io_submit(op, WEIR__OP_SEND, deadline);
}

int weir_io_accept_start(weir_io_op *op, int fd, struct sockaddr *addr, socklen_t *addrlen,
                         int64_t deadline)
{
    op->u.accept.fd = fd;
    op->u.accept.addr = addr;
    op->u.accept.addrlen = addrlen;
    op->u.accept.flags = SOCK_NONBLOCK | SOCK_CLOEXEC;
    return io_submit(op, WEIR__OP_ACCEPT, deadline);
}

int weir_io_connect_start(weir_io_op *op, int fd, const struct sockaddr *addr, socklen_t addrlen,
                          int64_t deadline)
{
    op->u.connect.fd = fd;
    op->u.connect.addr = addr;
    op->u.connect.addrlen = addrlen;
    return io_submit(op, WEIR__OP_CONNECT, deadline);
}

int weir_io_close_start(weir_io_op *op, int fd)
{
    op->u.rw.fd = fd;
    int r = weir__op_begin(&op->op, WEIR__OP_CLOSE, WEIR_FOREVER);
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
    op->next = op->prev = op->parent = NULL;
    weir_loop *l = op->op.task->loop;
    l->be->submit(l, op);
    return 0;
}

int weir_io_poll_start(weir_io_op *op, int fd, uint32_t events, int64_t deadline)
{
    op->u.poll.fd = fd;
    op->u.poll.events = events;
    return io_submit(op, WEIR__OP_POLL, deadline);
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
    weir_loop *l = op->op.task->loop;
    op->next = op->prev = op->parent = NULL;
    op->u.any.nfds = nfds;
    op->u.any.first = -1;
    op->u.any.parts = parts;
    /* `backend` counts the parts not yet reaped. */
    op->op.backend = (uint16_t)nfds;
    for (int i = 0; i < nfds; i++) {
        weir_io_op *p = &parts[i];
        p->op.task = op->op.task;
        p->op.result = 0;
        p->op.kind = WEIR__OP_POLL;
        p->op.cancel_reason = 0;
        p->op.backend = 0;
        p->op.timer.slot = 0;
        p->op.timer.deadline = WEIR_FOREVER;
        p->op.flags = WEIR__OP_ACTIVE | WEIR__OP_PART;
        p->parent = op;
        p->next = p->prev = NULL;
        p->u.poll.fd = fds[i];
        p->u.poll.events = POLLIN;
    }
    for (int i = 0; i < nfds; i++) {
        /* An earlier part may have completed inside submit and cancelled
         * the rest before they reached the backend. */
        if (weir__op_flags(&parts[i].op) & WEIR__OP_CANCELLING) {
            weir__op_done(&parts[i].op, -ECANCELED);
            continue;
        }
        l->be->submit(l, &parts[i]);
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
            l->be->cancel(l, p);
        }
    }
}

void weir__op_any_part_done(weir_op *part_op)
{
    weir_io_op *part = weir__io_of(part_op);
    weir_io_op *op = part->parent;
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
