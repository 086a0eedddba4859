/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend.h - the interface every I/O backend implements (private).
 *
 * A backend turns I/O leaf ops (kinds WEIR__OP_READ .. WEIR__OP_POLL, see
 * rt_int.h) into kernel work and reports each op's end exactly once with
 * weir__op_done(&op->op, result) on the loop thread. Two implementations pass the
 * same test suite: uring.c (io_uring, completion based) and epoll.c
 * (readiness based). loop.c picks one from WEIR_IO=uring|epoll|auto.
 *
 * Contract:
 *   submit  takes an op that weir__op_begin() accepted. It never fails: an
 *           error becomes the op's result (possibly reported at once, inside
 *           submit). It may not block. Submissions are batched; the kernel
 *           sees them at the next wait() at the latest.
 *   cancel  asks for an early end of a submitted, not yet done op. The op
 *           still completes through weir__op_done: with -ECANCELED, or with
 *           its real result when it won the race. Until then the kernel may
 *           still use the op's buffers, so the op must not be reported early.
 *   wait    flushes submissions, waits up to timeout_ns (0: poll, <0:
 *           forever) for completions or for the loop's eventfd, dispatches
 *           them, and returns how many ops completed (>= 0) or -errno.
 *           A readable eventfd is drained and reported by clearing
 *           l->wake_sent (loop.c handles the rest).
 */
#ifndef WEIR_IO_BACKEND_H
#define WEIR_IO_BACKEND_H

#include <stdint.h>

#include "rt/rt_int.h"
#include "weir/io.h"

struct weir__backend {
    const char *name;
    int (*init)(weir_loop *l);  /* 0 or -errno; sets l->be_state */
    void (*fini)(weir_loop *l); /* all ops have completed by then */
    void (*submit)(weir_loop *l, weir_io_op *op);
    void (*cancel)(weir_loop *l, weir_io_op *op);
    int (*wait)(weir_loop *l, int64_t timeout_ns);
    /* Submissions queued for the next wait (0 for backends that submit at
     * once); the loop does not spin for a wake while the kernel is owed work. */
    unsigned (*pending)(weir_loop *l);
};

extern const weir__backend weir__backend_uring;
extern const weir__backend weir__backend_epoll;

/* Called by a backend when it drained the loop's eventfd. */
static inline void weir__loop_wake_drained(weir_loop *l)
{
    /* Release pairs with the acquire in weir__loop_wake_remote's exchange: a
     * later waker that sees 0 writes the eventfd again. */
    atomic_store_explicit(&l->wake_sent, 0, memory_order_release);
}

#endif
