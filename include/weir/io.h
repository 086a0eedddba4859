/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/io.h - asynchronous file-descriptor I/O for tasks.
 *
 * Each operation exists twice: a blocking-style call for fibers
 * (weir_io_read) and a *_start form that initialises a weir_op for stackless
 * tasks, awaited with WEIR_AWAIT / weir_op_poll. Both go through the loop's
 * backend: io_uring (completion based; one io_uring_submit per loop turn for
 * all ops started in that turn) or epoll (readiness based; the syscall is
 * tried first and retried on readiness).
 *
 * Results follow one convention: a byte count, a file descriptor or 0 on
 * success, a negative errno on failure (-ETIMEDOUT past the deadline,
 * -ECANCELED when the task was cancelled). A read that completed before its
 * cancellation took effect reports the bytes it read, so no data is lost.
 *
 * Buffers are borrowed: they must stay valid until the call returns (fibers)
 * or the op is READY (stackless). The runtime guarantees the op is not
 * reported done while the kernel may still write into the buffer, including
 * after a timeout or cancellation (see rt.h).
 *
 * Regular files under epoll (which cannot poll them): read, write, pread,
 * pwrite, readv, writev and close of one run on the blocking pool, never
 * on the loop thread; cancellation and the deadline apply until the call
 * starts there, and a started call ends with its real result (runtime.md).
 *
 * Sockets used with the epoll backend are switched to O_NONBLOCK on first
 * use (as libuv does); accepted sockets come back non-blocking and
 * close-on-exec under both backends. Close every fd you used with these
 * functions through weir_io_close(): the epoll backend keeps per-fd state
 * that a plain close(2) would leave stale for the next fd with that number.
 * With ops in flight, under epoll the waiting ops then end with -EBADF. Under
 * io_uring a request already in the kernel keeps its own file reference;
 * shut the socket down (shutdown(2)) or cancel the task to end it.
 */
#ifndef WEIR_IO_H
#define WEIR_IO_H

#include "io_req.h"
#include "rt.h"
#include <poll.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An I/O leaf op: a weir_op plus the I/O layer's request (weir/io_req.h).
 * Private fields; pass it to WEIR_AWAIT / weir_op_poll / weir_op_cancel via
 * weir_op_of(). */
struct weir_io_op {
    weir_op op; /* first */
    union {
        struct weir__io_req req; /* what the backend carries out */
        /* wait-any: the parts (plain polls, each with op.u.ptr = this op) */
        struct {
            int nfds;
            int first;
            struct weir_io_op *parts;
        } any;
    } u;
};

/* read/write at the file position (off = -1) or at an offset. */
ssize_t weir_io_read(int fd, void *buf, size_t len, int64_t deadline);
ssize_t weir_io_write(int fd, const void *buf, size_t len, int64_t deadline);
ssize_t weir_io_pread(int fd, void *buf, size_t len, int64_t off, int64_t deadline);
ssize_t weir_io_pwrite(int fd, const void *buf, size_t len, int64_t off, int64_t deadline);
ssize_t weir_io_readv(int fd, const struct iovec *iov, int cnt, int64_t deadline);
ssize_t weir_io_writev(int fd, const struct iovec *iov, int cnt, int64_t deadline);
ssize_t weir_io_recv(int fd, void *buf, size_t len, int flags, int64_t deadline);
ssize_t weir_io_send(int fd, const void *buf, size_t len, int flags, int64_t deadline);
/* Returns the new connection's fd (SOCK_NONBLOCK | SOCK_CLOEXEC). */
int weir_io_accept(int fd, struct sockaddr *addr, socklen_t *addrlen, int64_t deadline);
int weir_io_connect(int fd, const struct sockaddr *addr, socklen_t addrlen, int64_t deadline);
/* Not cancellable: the descriptor is always released. */
int weir_io_close(int fd);
/* Wait for POLLIN/POLLOUT/...; returns the revents mask. */
int weir_io_poll(int fd, uint32_t events, int64_t deadline);
/* Wait until one of fds is readable; returns its index. */
int weir_io_wait_readable_any(const int *fds, int nfds, int64_t deadline);

int weir_io_read_start(weir_io_op *op, int fd, void *buf, size_t len, int64_t off,
                       int64_t deadline);
int weir_io_write_start(weir_io_op *op, int fd, const void *buf, size_t len, int64_t off,
                        int64_t deadline);
int weir_io_readv_start(weir_io_op *op, int fd, const struct iovec *iov, int cnt, int64_t deadline);
int weir_io_writev_start(weir_io_op *op, int fd, const struct iovec *iov, int cnt,
                         int64_t deadline);
int weir_io_recv_start(weir_io_op *op, int fd, void *buf, size_t len, int flags, int64_t deadline);
int weir_io_send_start(weir_io_op *op, int fd, const void *buf, size_t len, int flags,
                       int64_t deadline);
int weir_io_accept_start(weir_io_op *op, int fd, struct sockaddr *addr, socklen_t *addrlen,
                         int64_t deadline);
int weir_io_connect_start(weir_io_op *op, int fd, const struct sockaddr *addr, socklen_t addrlen,
                          int64_t deadline);
int weir_io_close_start(weir_io_op *op, int fd);
int weir_io_poll_start(weir_io_op *op, int fd, uint32_t events, int64_t deadline);
/* `parts` is caller-provided storage for nfds ops that lives as long as op. */
int weir_io_wait_readable_any_start(weir_io_op *op, weir_io_op *parts, const int *fds, int nfds,
                                    int64_t deadline);

#ifdef __cplusplus
}
#endif
#endif /* WEIR_IO_H */
