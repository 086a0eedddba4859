/* SPDX-License-Identifier: Apache-2.0 */
/*
 * uring.c - the io_uring backend (default).
 *
 * One ring per loop thread. Setup asks for IORING_SETUP_SINGLE_ISSUER and
 * IORING_SETUP_DEFER_TASKRUN (completions are then processed only when this
 * thread enters the kernel, which is exactly when the loop waits) and falls
 * back flag by flag on kernels without them; the working set is probed once
 * per process. SQPOLL is opt-in (weir_loop_opts.uring_sqpoll): it spends a
 * kernel thread polling the ring.
 *
 * Every op's SQE carries the op's address as user_data; its CQE completes
 * it. The only SQEs started in a turn reach the kernel in one
 * io_uring_submit_and_wait* call from wait(). When the SQ is full, submit
 * flushes it early (counted in forced_submits); if that still gives no SQE,
 * the op waits on a backlog list and is retried at the start of the next
 * wait - never dropped, and the loop never blocks on it.
 *
 * Cancellation is IORING_OP_ASYNC_CANCEL on the op's user_data. Its own CQE
 * is ignored; the op completes when *its* CQE arrives (-ECANCELED or, when
 * the op won the race, its real result), so buffers stay owned by the kernel
 * until then.
 *
 * Files opened O_NONBLOCK make io_uring report -EAGAIN instead of waiting on
 * some kernels; such an op is re-armed as a poll for its direction and
 * re-issued when the poll fires.
 */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "io/backend.h"

#define TAG_EFD    ((uint64_t)1) /* the loop's eventfd read */
#define TAG_IGNORE ((uint64_t)2) /* cancel requests: their CQE is not needed */

/* op->op.backend bits */
enum {
    B_BACKLOG_SUBMIT = 1, /* waiting for an SQE to be submitted */
    B_BACKLOG_CANCEL = 2, /* in the kernel; a cancel SQE is still owed */
    B_POLL_RETRY = 4,     /* the kernel currently runs a readiness poll for it */
    B_INFLIGHT = 8,       /* the kernel holds it */
};

typedef struct uring_state {
    struct io_uring ring;
    uint64_t efd_buf;
    weir_io_op *backlog_head, *backlog_tail;
    unsigned flags;          /* setup flags in use */
    unsigned efd_unsubmitted; /* the eventfd read re-armed, not yet submitted */
    int efd_armed;            /* a read of the loop's eventfd is queued or in flight */
} uring_state;

static _Atomic unsigned probed_flags = ~0u; /* ~0: not probed yet */

static uring_state *S(weir_loop *l)
{
    return l->be_state;
}

static void backlog_push(uring_state *s, weir_io_op *op, unsigned bit)
{
    if (op->op.backend & (B_BACKLOG_SUBMIT | B_BACKLOG_CANCEL)) {
        op->op.backend |= (uint16_t)bit;
        return;
    }
    op->op.backend |= (uint16_t)bit;
    op->next = NULL;
    op->prev = s->backlog_tail;
    if (s->backlog_tail)
        s->backlog_tail->next = op;
    else
        s->backlog_head = op;
    s->backlog_tail = op;
}

static void backlog_remove(uring_state *s, weir_io_op *op)
{
    if (op->prev)
        op->prev->next = op->next;
    else
        s->backlog_head = op->next;
    if (op->next)
        op->next->prev = op->prev;
    else
        s->backlog_tail = op->prev;
    op->next = op->prev = NULL;
    op->op.backend &= (uint16_t) ~(B_BACKLOG_SUBMIT | B_BACKLOG_CANCEL);
}

/* An SQE, flushing a full SQ once; NULL if the ring still has no room. */
static struct io_uring_sqe *get_sqe(weir_loop *l)
{
    uring_state *s = S(l);
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
    if (sqe)
        return sqe;
    WEIR__STAT_ADD(l->forced_submits, 1);
    io_uring_submit(&s->ring);
    return io_uring_get_sqe(&s->ring);
}

static uint32_t op_direction(const weir_io_op *op)
{
    switch (op->op.kind) {
    case WEIR__OP_WRITE:
    case WEIR__OP_WRITEV:
    case WEIR__OP_SEND:
    case WEIR__OP_CONNECT:
        return POLLOUT;
    default:
        return POLLIN;
    }
}

static void prep(struct io_uring_sqe *sqe, weir_io_op *op)
{
    uint64_t off = op->u.rw.off < 0 ? (uint64_t)-1 : (uint64_t)op->u.rw.off;
    if (op->op.backend & B_POLL_RETRY) {
        /* Every I/O arm of the op's union starts with the fd. */
        io_uring_prep_poll_add(sqe, op->u.rw.fd, op_direction(op));
        io_uring_sqe_set_data(sqe, op);
        return;
    }
    switch (op->op.kind) {
    case WEIR__OP_READ:
        io_uring_prep_read(sqe, op->u.rw.fd, op->u.rw.buf, (unsigned)op->u.rw.len, off);
        break;
    case WEIR__OP_WRITE:
        io_uring_prep_write(sqe, op->u.rw.fd, op->u.rw.buf, (unsigned)op->u.rw.len, off);
        break;
    case WEIR__OP_READV:
        io_uring_prep_readv(sqe, op->u.vec.fd, op->u.vec.iov, (unsigned)op->u.vec.cnt,
                            (uint64_t)-1);
        break;
    case WEIR__OP_WRITEV:
        io_uring_prep_writev(sqe, op->u.vec.fd, op->u.vec.iov, (unsigned)op->u.vec.cnt,
                             (uint64_t)-1);
        break;
    case WEIR__OP_RECV:
        io_uring_prep_recv(sqe, op->u.rw.fd, op->u.rw.buf, op->u.rw.len, op->u.rw.flags);
        break;
    case WEIR__OP_SEND:
        io_uring_prep_send(sqe, op->u.rw.fd, op->u.rw.buf, op->u.rw.len, op->u.rw.flags);
        break;
    case WEIR__OP_ACCEPT:
        io_uring_prep_accept(sqe, op->u.accept.fd, op->u.accept.addr, op->u.accept.addrlen,
                             op->u.accept.flags);
        break;
    case WEIR__OP_CONNECT:
        io_uring_prep_connect(sqe, op->u.connect.fd, op->u.connect.addr, op->u.connect.addrlen);
        break;
    case WEIR__OP_CLOSE:
        io_uring_prep_close(sqe, op->u.rw.fd);
        break;
    case WEIR__OP_POLL:
        io_uring_prep_poll_add(sqe, op->u.poll.fd, op->u.poll.events);
        break;
    default:
        io_uring_prep_nop(sqe);
        break;
    }
    io_uring_sqe_set_data(sqe, op);
}

static void uring_submit(weir_loop *l, weir_io_op *op)
{
    struct io_uring_sqe *sqe = get_sqe(l);
    if (!sqe) {
        backlog_push(S(l), op, B_BACKLOG_SUBMIT);
        return;
    }
    prep(sqe, op);
    op->op.backend |= B_INFLIGHT;
}

static void uring_cancel(weir_loop *l, weir_io_op *op)
{
    uring_state *s = S(l);
    if (op->op.backend & B_BACKLOG_SUBMIT) {
        /* Never reached the kernel: end it here. */
        backlog_remove(s, op);
        weir__op_done(&op->op, -ECANCELED);
        return;
    }
    if (!(op->op.backend & B_INFLIGHT))
        return;
    struct io_uring_sqe *sqe = get_sqe(l);
    if (!sqe) {
        backlog_push(s, op, B_BACKLOG_CANCEL);
        return;
    }
    io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)op, 0);
    io_uring_sqe_set_data64(sqe, TAG_IGNORE);
}

static int arm_efd(weir_loop *l)
{
    uring_state *s = S(l);
    struct io_uring_sqe *sqe = get_sqe(l);
    if (!sqe)
        return -EBUSY;
    io_uring_prep_read(sqe, l->efd, &s->efd_buf, sizeof(s->efd_buf), 0);
    io_uring_sqe_set_data64(sqe, TAG_EFD);
    s->efd_unsubmitted = 1;
    s->efd_armed = 1;
    return 0;
}

static void flush_backlog(weir_loop *l)
{
    uring_state *s = S(l);
    while (s->backlog_head) {
        weir_io_op *op = s->backlog_head;
        struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
        if (!sqe) {
            io_uring_submit(&s->ring);
            WEIR__STAT_ADD(l->forced_submits, 1);
            sqe = io_uring_get_sqe(&s->ring);
            if (!sqe)
                return; /* still full: next turn */
        }
        unsigned bits = op->op.backend & (B_BACKLOG_SUBMIT | B_BACKLOG_CANCEL);
        backlog_remove(s, op);
        if (bits & B_BACKLOG_SUBMIT) {
            prep(sqe, op);
            op->op.backend |= B_INFLIGHT;
        } else {
            io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)op, 0);
            io_uring_sqe_set_data64(sqe, TAG_IGNORE);
        }
    }
}

static int is_retryable(const weir_io_op *op)
{
    switch (op->op.kind) {
    case WEIR__OP_READ:
    case WEIR__OP_WRITE:
    case WEIR__OP_READV:
    case WEIR__OP_WRITEV:
    case WEIR__OP_RECV:
    case WEIR__OP_SEND:
    case WEIR__OP_ACCEPT:
        return 1;
    default:
        return 0;
    }
}

static void complete(weir_loop *l, weir_io_op *op, int res)
{
    /* A cancel still owed on the backlog is moot now, and the op is about
     * to be handed back (its memory may be gone after done). */
    if (op->op.backend & B_BACKLOG_CANCEL)
        backlog_remove(S(l), op);
    op->op.backend &= (uint16_t)~B_INFLIGHT;
    if (op->op.backend & B_POLL_RETRY) {
        op->op.backend &= (uint16_t)~B_POLL_RETRY;
        if (res < 0) {
            weir__op_done(&op->op, res); /* the poll failed or was cancelled */
            return;
        }
        if (weir__op_flags(&op->op) & WEIR__OP_CANCELLING) {
            weir__op_done(&op->op, -ECANCELED);
            return;
        }
        uring_submit(l, op); /* ready: issue the real op again */
        return;
    }
    if (res == -EAGAIN && is_retryable(op)) {
        if (weir__op_flags(&op->op) & WEIR__OP_CANCELLING) {
            weir__op_done(&op->op, -ECANCELED);
            return;
        }
        op->op.backend |= B_POLL_RETRY;
        WEIR__STAT_ADD(l->io_retries, 1);
        uring_submit(l, op);
        return;
    }
    weir__op_done(&op->op, res);
}

static int uring_wait(weir_loop *l, int64_t timeout_ns)
{
    uring_state *s = S(l);
    flush_backlog(l);
    /* Without a read on the eventfd, wakes from other threads cannot reach
     * a sleeping loop: re-arm it, and do not block until that worked. */
    if (!s->efd_armed && arm_efd(l) < 0)
        timeout_ns = 0;
    int r;
    if (timeout_ns == 0) {
        r = io_uring_submit_and_get_events(&s->ring);
    } else if (timeout_ns < 0) {
        r = io_uring_submit_and_wait(&s->ring, 1);
    } else {
        struct __kernel_timespec ts = {.tv_sec = timeout_ns / WEIR_SEC,
                                       .tv_nsec = timeout_ns % WEIR_SEC};
        struct io_uring_cqe *cqe;
        r = io_uring_submit_and_wait_timeout(&s->ring, &cqe, 1, &ts, NULL);
    }
    if (r < 0 && r != -ETIME && r != -EINTR && r != -EBUSY && r != -EAGAIN)
        return r;
    s->efd_unsubmitted = 0; /* whatever was queued has been submitted */

    int n = 0, rearm = 0;
    unsigned head, seen = 0;
    struct io_uring_cqe *cqe;
    io_uring_for_each_cqe(&s->ring, head, cqe)
    {
        seen++;
        uint64_t ud = cqe->user_data;
        if (ud == TAG_EFD) {
            weir__loop_wake_drained(l);
            s->efd_armed = 0;
            rearm = 1;
        } else if (ud != TAG_IGNORE && ud != 0 && ud != LIBURING_UDATA_TIMEOUT) {
            /* (LIBURING_UDATA_TIMEOUT: liburing's own timeout on kernels
             * without IORING_FEAT_EXT_ARG.) */
            complete(l, (weir_io_op *)(uintptr_t)ud, cqe->res);
            n++;
        }
    }
    io_uring_cq_advance(&s->ring, seen);
    if (rearm)
        arm_efd(l); /* on failure the next wait retries it (efd_armed) */
    return n;
}

static unsigned uring_pending(weir_loop *l)
{
    uring_state *s = S(l);
    /* The loop's own eventfd read is not work owed to anyone. (A forced
     * flush may have submitted it already: then ready can be 0.) */
    unsigned ready = io_uring_sq_ready(&s->ring);
    if (ready >= s->efd_unsubmitted)
        ready -= s->efd_unsubmitted;
    return ready + (s->backlog_head != NULL);
}

static int try_setup(uring_state *s, unsigned entries, unsigned flags)
{
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    p.flags = flags | IORING_SETUP_CQSIZE;
    p.cq_entries = entries * 4;
    if (flags & IORING_SETUP_SQPOLL)
        p.sq_thread_idle = 1000;
    return io_uring_queue_init_params(entries, &s->ring, &p);
}

static int uring_init(weir_loop *l)
{
    uring_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    unsigned entries = l->opts.uring_entries ? l->opts.uring_entries : 256;
    unsigned want = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    if (l->opts.uring_sqpoll)
        want = IORING_SETUP_SQPOLL | IORING_SETUP_SINGLE_ISSUER;
    unsigned cached = atomic_load_explicit(&probed_flags, memory_order_relaxed);
    if (cached != ~0u && !l->opts.uring_sqpoll)
        want = cached;
    /* Drop optional flags one at a time: kernels before 6.0/6.1 refuse them
     * with -EINVAL. */
    static const unsigned drop[] = {0, IORING_SETUP_DEFER_TASKRUN, IORING_SETUP_SINGLE_ISSUER};
    int r = -EINVAL;
    unsigned flags = want;
    for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++) {
        flags &= ~drop[i];
        r = try_setup(s, entries, flags);
        if (r != -EINVAL)
            break;
    }
    if (r < 0) {
        free(s);
        return r;
    }
    if (!(s->ring.features & IORING_FEAT_NODROP))
        weir__log(WEIR__LOG_WARN, "io.uring", "kernel lacks IORING_FEAT_NODROP");
    if (!l->opts.uring_sqpoll)
        atomic_store_explicit(&probed_flags, flags, memory_order_relaxed);
    s->flags = flags;
    l->be_state = s;
    weir__log(WEIR__LOG_DEBUG, "io.uring", "ring of %u entries, flags 0x%x", entries, flags);
    if ((r = arm_efd(l)) < 0) {
        io_uring_queue_exit(&s->ring);
        free(s);
        l->be_state = NULL;
        return r;
    }
    return 0;
}

static void uring_fini(weir_loop *l)
{
    uring_state *s = S(l);
    if (!s)
        return;
    io_uring_queue_exit(&s->ring); /* also drops the eventfd read */
    free(s);
    l->be_state = NULL;
}

const weir__backend weir__backend_uring = {
    .name = "uring",
    .init = uring_init,
    .fini = uring_fini,
    .submit = uring_submit,
    .cancel = uring_cancel,
    .wait = uring_wait,
    .pending = uring_pending,
};
