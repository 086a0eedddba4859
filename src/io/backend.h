/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend.h - the interface every I/O backend implements (private).
 *
 * A backend turns requests (weir__io_req, weir/io_req.h) into kernel work
 * and reports each request's end exactly once through the `done` callback
 * of the context it was given at init, on the thread that owns it. It knows
 * nothing of tasks, wakers or loops: the runtime (src/rt/io_ops.c) embeds a
 * request in each I/O op, and its `done` finds the op around the request
 * and completes it; the backend only fills in what the kernel said, as an
 * event library's poller fills its fired list and the loop dispatches it.
 * Two implementations pass the same test suite: uring.c (io_uring,
 * completion based) and epoll.c (readiness based). The runtime picks one
 * from WEIR_IO=uring|epoll|auto.
 *
 * Contract:
 *   submit  takes a request whose `state` is 0. It never fails: an error
 *           becomes the request's result (possibly reported at once, inside
 *           submit). It may not block. Submissions are batched; the kernel
 *           sees them at the next wait() at the latest.
 *   cancel  asks for an early end of a request. A request not submitted yet
 *           (state 0) is left alone: the caller completes it itself. A
 *           submitted one still ends through `done`: with -ECANCELED, or
 *           with its real result when it won the race. Until then the
 *           kernel may still use the request's buffers, so it must not be
 *           reported early.
 *   wait    flushes submissions, waits up to timeout_ns (0: poll, <0:
 *           forever) for completions or for the wake fd, dispatches them
 *           through the callbacks, and returns how many requests completed
 *           (>= 0) or -errno. A readable wake fd is drained and reported
 *           through `woken`.
 *   pending submissions queued for the next wait (0 for backends that submit
 *           at once): the caller does not spin for a wake while the kernel
 *           is owed work.
 */
#ifndef WEIR_IO_BACKEND_H
#define WEIR_IO_BACKEND_H

#include <stdint.h>

#include "weir/io_req.h"

#define WEIR__IO_SEC  1000000000LL
#define WEIR__IO_MSEC 1000000LL

/* What a backend is given at init; it copies it. */
typedef struct weir__io_ctx {
    void *ud; /* first argument of the callbacks */
    /* A request ended with res (a count, an fd, revents or -errno). */
    void (*done)(void *ud, weir__io_req *req, int64_t res);
    /* The wake fd (an eventfd) was readable and has been drained. */
    void (*woken)(void *ud);
    int wake_fd;
    unsigned uring_entries; /* 0: the default */
    int uring_sqpoll;
    /* How long wait() may spin on its completions before sleeping, when
     * recent waits say one is likely that soon (0: never). */
    int64_t spin_ns;
    /* Counters the backend adds to (relaxed stores; the owner reads them
     * from any thread): SQ flushes forced by a full queue, and requests
     * re-issued after -EAGAIN on an O_NONBLOCK file. */
    uint64_t *forced_submits, *io_retries;
    uint64_t *spins, *spins_caught; /* waits that spun; of them, those a completion ended */
} weir__io_ctx;

typedef struct weir__backend {
    const char *name;
    int (*init)(void **state, const weir__io_ctx *ctx); /* 0 or -errno */
    void (*fini)(void *state);                          /* every request has ended by then */
    void (*submit)(void *state, weir__io_req *req);
    void (*cancel)(void *state, weir__io_req *req);
    int (*wait)(void *state, int64_t timeout_ns);
    unsigned (*pending)(void *state);
    /* Optional (NULL: never). 1 when the backend would run a read or write
     * of fd inline on the loop thread, where it may block (a regular file
     * or block device under epoll, which cannot poll them); the runtime
     * then runs those on the blocking pool instead (rt/io_ops.c). Called on
     * the loop thread before such a request is made; must be cheap for
     * other descriptors (no syscall once the fd is known). */
    int (*file_fd)(void *state, int fd);
    /* With file_fd: drop what the backend knows of fd, which the runtime is
     * about to close on the blocking pool (a weir_io_close of a file). */
    void (*forget_fd)(void *state, int fd);
} weir__backend;

extern const weir__backend weir__backend_uring;
extern const weir__backend weir__backend_epoll;

static inline void weir__io_stat_add(uint64_t *counter, uint64_t n)
{
    __atomic_store_n(counter, *counter + n, __ATOMIC_RELAXED);
}

#endif
