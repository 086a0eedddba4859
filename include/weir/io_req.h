/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/io_req.h - the I/O layer's request: what the kernel is asked to do
 * (private fields; include weir/io.h instead).
 *
 * A request is the kernel-facing half of an I/O op: the kind of call, the
 * descriptor, the buffers and flags, and the links and state bits of the
 * backend (io_uring or epoll) that carries it out. It knows nothing of
 * tasks: the runtime's weir_io_op (weir/io.h) embeds one, hands it to the
 * loop's backend, and learns of its end through the completion callback the
 * backend was given at init (src/io/backend.h). This header exists on its
 * own so that the I/O layer can define the request without seeing the
 * runtime's types, while weir_io_op, which callers allocate, can still hold
 * it by value.
 */
#ifndef WEIR_IO_REQ_H
#define WEIR_IO_REQ_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct iovec;

/* What a request does (weir__io_req.kind). */
enum {
    WEIR__IO_NONE = 0,
    WEIR__IO_READ,    /* read / pread: u.rw */
    WEIR__IO_WRITE,   /* write / pwrite: u.rw */
    WEIR__IO_READV,   /* u.vec */
    WEIR__IO_WRITEV,  /* u.vec */
    WEIR__IO_RECV,    /* u.rw (flags) */
    WEIR__IO_SEND,    /* u.rw (flags) */
    WEIR__IO_ACCEPT,  /* u.accept */
    WEIR__IO_CONNECT, /* u.connect */
    WEIR__IO_CLOSE,   /* fd only */
    WEIR__IO_POLL,    /* u.poll */
};

typedef struct weir__io_req {
    uint8_t kind; /* WEIR__IO_* */
    uint8_t pad_;
    uint16_t state; /* backend-private; 0 before the first submit */
    int fd;
    struct weir__io_req *next, *prev; /* backend wait lists */
    union {
        struct {
            void *buf;
            size_t len;
            int64_t off;
            int flags;
        } rw; /* off < 0: file position */
        struct {
            const struct iovec *iov;
            int cnt;
        } vec;
        struct {
            struct sockaddr *addr;
            socklen_t *addrlen;
            int flags;
        } accept;
        struct {
            const struct sockaddr *addr;
            socklen_t addrlen;
        } connect;
        struct {
            uint32_t events, revents;
        } poll;
    } u;
} weir__io_req;

#ifdef __cplusplus
}
#endif
#endif /* WEIR_IO_REQ_H */
