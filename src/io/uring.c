/* SPDX-License-Identifier: Apache-2.0 */
/*
 * uring.c - the io_uring backend (default).
 *
 * One ring per loop thread. Setup asks for IORING_SETUP_SINGLE_ISSUER and
 * IORING_SETUP_DEFER_TASKRUN (completions are then processed only when this
 * thread enters the kernel, which is exactly when the loop waits) and falls
 * back flag by flag on kernels without them; the working set is probed once
 * per process. SQPOLL is opt-in (weir_loop_opts.uring_sqpoll, which the
 * context carries): it spends a kernel thread polling the ring.
 *
 * Every request's SQE carries the request's address as user_data; its CQE
 * ends it through the context's done callback. The only SQEs started in a turn reach the kernel in
 * one io_uring_submit_and_wait* call from wait(). When the SQ is full, submit flushes it early
 * (counted in forced_submits); if that still gives no SQE, the op waits on a backlog list and is
 * retried at the start of the next wait - never dropped, and the loop never blocks on it.
 *
 * Cancellation is IORING_OP_ASYNC_CANCEL on the op's user_data. Its own CQE
 * is ignored; the op completes when *its* CQE arrives (-ECANCELED or, when
 * the op won the race, its real result), so buffers stay owned by the kernel
 * until then.
 *
 * Files opened O_NONBLOCK make io_uring report -EAGAIN instead of waiting on
 * some kernels; such an op is re-armed as a poll for its direction and
 * re-issued when the poll fires.
 *
 * A wait that would sleep may first spin on the ring (weir__io_ctx.spin_ns,
 * WEIR_URING_SPIN_US, default 20 us): a sleep in io_uring_enter and the
 * wake-up after it cost tens of microseconds on a virtual machine, more
 * than a loopback round trip. It spins only while the recent waits say a
 * completion is likely that soon: `credit` grows when a spin caught one or
 * a sleep ended within the spin's span (a spin would have), and shrinks
 * when a spin caught nothing, so a loop whose completions come seldom (an
 * idle server, timers far apart) stops spinning by itself. It spins only
 * with 1 to SPIN_INFLIGHT_MAX requests in flight: a loop with many (a busy
 * server, a client pool at 32 connections) does better to sleep and wake
 * to a batch (measured: 0.86x the requests per second at 32 connections
 * when it spun). With
 * DEFER_TASKRUN completions are posted only when this thread enters the
 * kernel, so the spin is a loop of io_uring_get_events (GETEVENTS, no
 * wait).
 */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "io/backend.h"

#define TAG_EFD    ((uint64_t)1) /* the loop's eventfd read */
#define TAG_IGNORE ((uint64_t)2) /* cancel requests: their CQE is not needed */

/* req->state bits */
enum {
    B_BACKLOG_SUBMIT = 1, /* waiting for an SQE to be submitted */
    B_BACKLOG_CANCEL = 2, /* in the kernel; a cancel SQE is still owed */
    B_POLL_RETRY = 4,     /* the kernel currently runs a readiness poll for it */
    B_INFLIGHT = 8,       /* the kernel holds it */
    B_CANCELLED = 16,     /* cancel() was called: do not issue it again */
};

typedef struct uring_state {
    struct io_uring ring;
    uint64_t efd_buf;
    weir__io_req *backlog_head, *backlog_tail;
    unsigned flags;           /* setup flags in use */
    unsigned efd_unsubmitted; /* the eventfd read re-armed, not yet submitted */
    int efd_armed;            /* a read of the loop's eventfd is queued or in flight */
    int credit;               /* > 0: spin before sleeping (see above) */
    unsigned inflight;        /* requests the kernel holds (not the eventfd read) */
    weir__io_ctx ctx;
} uring_state;

static _Atomic unsigned probed_flags = ~0u; /* ~0: not probed yet */

static void backlog_push(uring_state *s, weir__io_req *req, unsigned bit)
{
    if (req->state & (B_BACKLOG_SUBMIT | B_BACKLOG_CANCEL)) {
        req->state |= (uint16_t)bit;
        return;
    }
    req->state |= (uint16_t)bit;
    req->next = NULL;
    req->prev = s->backlog_tail;
    if (s->backlog_tail)
        s->backlog_tail->next = req;
    else
        s->backlog_head = req;
    s->backlog_tail = req;
}

static void backlog_remove(uring_state *s, weir__io_req *req)
{
    if (req->prev)
        req->prev->next = req->next;
    else
        s->backlog_head = req->next;
    if (req->next)
        req->next->prev = req->prev;
    else
        s->backlog_tail = req->prev;
    req->next = req->prev = NULL;
    req->state &= (uint16_t) ~(B_BACKLOG_SUBMIT | B_BACKLOG_CANCEL);
}

/* An SQE, flushing a full SQ once; NULL if the ring still has no room. */
static struct io_uring_sqe *get_sqe(uring_state *s)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
    if (sqe)
        return sqe;
    weir__io_stat_add(s->ctx.forced_submits, 1);
    io_uring_submit(&s->ring);
    return io_uring_get_sqe(&s->ring);
}

static uint32_t op_direction(const weir__io_req *req)
{
    switch (req->kind) {
    case WEIR__IO_WRITE:
    case WEIR__IO_WRITEV:
    case WEIR__IO_SEND:
    case WEIR__IO_CONNECT:
        return POLLOUT;
    default:
        return POLLIN;
    }
}

static void prep(struct io_uring_sqe *sqe, weir__io_req *req)
{
    uint64_t off = req->u.rw.off < 0 ? (uint64_t)-1 : (uint64_t)req->u.rw.off;
    if (req->state & B_POLL_RETRY) {
        io_uring_prep_poll_add(sqe, req->fd, op_direction(req));
        io_uring_sqe_set_data(sqe, req);
        return;
    }
    switch (req->kind) {
    case WEIR__IO_READ:
        io_uring_prep_read(sqe, req->fd, req->u.rw.buf, (unsigned)req->u.rw.len, off);
        break;
    case WEIR__IO_WRITE:
        io_uring_prep_write(sqe, req->fd, req->u.rw.buf, (unsigned)req->u.rw.len, off);
        break;
    case WEIR__IO_READV:
        io_uring_prep_readv(sqe, req->fd, req->u.vec.iov, (unsigned)req->u.vec.cnt, (uint64_t)-1);
        break;
    case WEIR__IO_WRITEV:
        io_uring_prep_writev(sqe, req->fd, req->u.vec.iov, (unsigned)req->u.vec.cnt, (uint64_t)-1);
        break;
    case WEIR__IO_RECV:
        io_uring_prep_recv(sqe, req->fd, req->u.rw.buf, req->u.rw.len, req->u.rw.flags);
        break;
    case WEIR__IO_SEND:
        io_uring_prep_send(sqe, req->fd, req->u.rw.buf, req->u.rw.len, req->u.rw.flags);
        break;
    case WEIR__IO_ACCEPT:
        io_uring_prep_accept(sqe, req->fd, req->u.accept.addr, req->u.accept.addrlen,
                             req->u.accept.flags);
        break;
    case WEIR__IO_CONNECT:
        io_uring_prep_connect(sqe, req->fd, req->u.connect.addr, req->u.connect.addrlen);
        break;
    case WEIR__IO_CLOSE:
        io_uring_prep_close(sqe, req->fd);
        break;
    case WEIR__IO_POLL:
        io_uring_prep_poll_add(sqe, req->fd, req->u.poll.events);
        break;
    default:
        io_uring_prep_nop(sqe);
        break;
    }
    io_uring_sqe_set_data(sqe, req);
}

/* ThreadSanitizer tracks descriptors through the libc calls it intercepts;
 * a close the kernel does for the ring is one it never sees, and the next
 * socket() or open() given the same number on another thread looks to it
 * like a race. Under TSan a socket's close is close(2), inline (it does not
 * wait). A file's stays the ring's: its close may flush, and no file call
 * runs on a loop thread (getsockopt tells a socket without touching a
 * file). */
#if defined(__SANITIZE_THREAD__)
#define CLOSE_INLINE 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CLOSE_INLINE 1
#endif
#endif

static void uring_submit(uring_state *s, weir__io_req *req)
{
#ifdef CLOSE_INLINE
    int type;
    socklen_t tl = sizeof(type);
    if (req->kind == WEIR__IO_CLOSE && getsockopt(req->fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0) {
        int r = close(req->fd);
        s->ctx.done(s->ctx.ud, req, r < 0 && errno != EINTR ? -errno : 0);
        return;
    }
#endif
    struct io_uring_sqe *sqe = get_sqe(s);
    if (!sqe) {
        backlog_push(s, req, B_BACKLOG_SUBMIT);
        return;
    }
    prep(sqe, req);
    req->state |= B_INFLIGHT;
    s->inflight++;
}

static void uring_cancel(uring_state *s, weir__io_req *req)
{
    if (req->state & B_BACKLOG_SUBMIT) {
        /* Never reached the kernel: end it here. */
        backlog_remove(s, req);
        s->ctx.done(s->ctx.ud, req, -ECANCELED);
        return;
    }
    if (!(req->state & B_INFLIGHT))
        return;
    /* An -EAGAIN or a readiness poll ending later must not re-issue it. */
    req->state |= B_CANCELLED;
    struct io_uring_sqe *sqe = get_sqe(s);
    if (!sqe) {
        backlog_push(s, req, B_BACKLOG_CANCEL);
        return;
    }
    io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)req, 0);
    io_uring_sqe_set_data64(sqe, TAG_IGNORE);
}

static int arm_efd(uring_state *s)
{
    struct io_uring_sqe *sqe = get_sqe(s);
    if (!sqe)
        return -EBUSY;
    io_uring_prep_read(sqe, s->ctx.wake_fd, &s->efd_buf, sizeof(s->efd_buf), 0);
    io_uring_sqe_set_data64(sqe, TAG_EFD);
    s->efd_unsubmitted = 1;
    s->efd_armed = 1;
    return 0;
}

static void flush_backlog(uring_state *s)
{
    while (s->backlog_head) {
        weir__io_req *req = s->backlog_head;
        struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
        if (!sqe) {
            io_uring_submit(&s->ring);
            weir__io_stat_add(s->ctx.forced_submits, 1);
            sqe = io_uring_get_sqe(&s->ring);
            if (!sqe)
                return; /* still full: next turn */
        }
        unsigned bits = req->state & (B_BACKLOG_SUBMIT | B_BACKLOG_CANCEL);
        backlog_remove(s, req);
        if (bits & B_BACKLOG_SUBMIT) {
            prep(sqe, req);
            req->state |= B_INFLIGHT;
            s->inflight++;
        } else {
            io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)req, 0);
            io_uring_sqe_set_data64(sqe, TAG_IGNORE);
        }
    }
}

static int is_retryable(const weir__io_req *req)
{
    switch (req->kind) {
    case WEIR__IO_READ:
    case WEIR__IO_WRITE:
    case WEIR__IO_READV:
    case WEIR__IO_WRITEV:
    case WEIR__IO_RECV:
    case WEIR__IO_SEND:
    case WEIR__IO_ACCEPT:
        return 1;
    default:
        return 0;
    }
}

static void complete(uring_state *s, weir__io_req *req, int res)
{
    /* A cancel still owed on the backlog is moot now, and the op is about
     * to be handed back (its memory may be gone after done). */
    if (req->state & B_BACKLOG_CANCEL)
        backlog_remove(s, req);
    if (req->state & B_INFLIGHT)
        s->inflight--;
    req->state &= (uint16_t)~B_INFLIGHT;
    if (req->state & B_POLL_RETRY) {
        req->state &= (uint16_t)~B_POLL_RETRY;
        if (res < 0) {
            s->ctx.done(s->ctx.ud, req, res); /* the poll failed or was cancelled */
            return;
        }
        if (req->state & B_CANCELLED) {
            s->ctx.done(s->ctx.ud, req, -ECANCELED);
            return;
        }
        uring_submit(s, req); /* ready: issue the real op again */
        return;
    }
    if (res == -EAGAIN && is_retryable(req)) {
        if (req->state & B_CANCELLED) {
            s->ctx.done(s->ctx.ud, req, -ECANCELED);
            return;
        }
        req->state |= B_POLL_RETRY;
        weir__io_stat_add(s->ctx.io_retries, 1);
        uring_submit(s, req);
        return;
    }
    s->ctx.done(s->ctx.ud, req, res);
}

#define SPIN_CREDIT_MAX   16
#define SPIN_INFLIGHT_MAX 4 /* more requests in flight: sleeping lets completions batch */

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * WEIR__IO_SEC + ts.tv_nsec;
}

/* Spin up to ns for a completion: 1 one is in the CQ (submissions made),
 * 0 none came. */
static int spin_for_cqe(uring_state *s, int64_t ns)
{
    int r = io_uring_submit_and_get_events(&s->ring);
    if (r >= 0)
        s->efd_unsubmitted = 0;
    int64_t until = mono_ns() + ns;
    while (!io_uring_cq_ready(&s->ring)) {
        if (mono_ns() >= until)
            return 0;
        io_uring_get_events(&s->ring);
    }
    return 1;
}

static int uring_wait(uring_state *s, int64_t timeout_ns)
{
    flush_backlog(s);
    /* Without a read on the eventfd, wakes from other threads cannot reach
     * a sleeping loop: re-arm it, and do not block until that worked. */
    if (!s->efd_armed && arm_efd(s) < 0)
        timeout_ns = 0;
    int64_t spin = s->ctx.spin_ns;
    if (timeout_ns > 0 && timeout_ns < spin)
        spin = timeout_ns;
    int caught = 0; /* the spin submitted and found completions: no other enter */
    if (timeout_ns != 0 && spin > 0 && s->credit > 0 && s->inflight >= 1 &&
        s->inflight <= SPIN_INFLIGHT_MAX) {
        weir__io_stat_add(s->ctx.spins, 1);
        if (spin_for_cqe(s, spin)) {
            weir__io_stat_add(s->ctx.spins_caught, 1);
            if (s->credit < SPIN_CREDIT_MAX)
                s->credit++;
            caught = 1;
        } else {
            s->credit -= 2;
            if (timeout_ns > 0) /* the spin used that much of it */
                timeout_ns = timeout_ns > spin ? timeout_ns - spin : 0;
        }
    }
    int64_t slept = !caught && timeout_ns != 0 && spin > 0 ? mono_ns() : 0;
    int r = 0;
    if (caught) {
        /* spin_for_cqe submitted everything */
    } else if (timeout_ns == 0) {
        r = io_uring_submit_and_get_events(&s->ring);
    } else if (timeout_ns < 0) {
        r = io_uring_submit_and_wait(&s->ring, 1);
    } else {
        struct __kernel_timespec ts = {.tv_sec = timeout_ns / WEIR__IO_SEC,
                                       .tv_nsec = timeout_ns % WEIR__IO_SEC};
        struct io_uring_cqe *cqe;
        r = io_uring_submit_and_wait_timeout(&s->ring, &cqe, 1, &ts, NULL);
    }
    if (r < 0 && r != -ETIME && r != -EINTR && r != -EBUSY && r != -EAGAIN)
        return r;
    s->efd_unsubmitted = 0; /* whatever was queued has been submitted */
    /* A sleep that a completion ended within the spin's span: a spin
     * would have caught it. */
    if (slept && io_uring_cq_ready(&s->ring) && mono_ns() - slept < spin &&
        s->credit < SPIN_CREDIT_MAX)
        s->credit = s->credit < 0 ? 1 : s->credit + 1;

    int n = 0, rearm = 0;
    unsigned head, seen = 0;
    struct io_uring_cqe *cqe;
    io_uring_for_each_cqe(&s->ring, head, cqe)
    {
        seen++;
        uint64_t ud = cqe->user_data;
        if (ud == TAG_EFD) {
            s->ctx.woken(s->ctx.ud);
            s->efd_armed = 0;
            rearm = 1;
        } else if (ud != TAG_IGNORE && ud != 0 && ud != LIBURING_UDATA_TIMEOUT) {
            /* (LIBURING_UDATA_TIMEOUT: liburing's own timeout on kernels
             * without IORING_FEAT_EXT_ARG.) */
            complete(s, (weir__io_req *)(uintptr_t)ud, cqe->res);
            n++;
        }
    }
    io_uring_cq_advance(&s->ring, seen);
    if (rearm)
        arm_efd(s); /* on failure the next wait retries it (efd_armed) */
    return n;
}

static unsigned uring_pending(uring_state *s)
{
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

static int uring_init(void **state, const weir__io_ctx *ctx)
{
    uring_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->ctx = *ctx;
    unsigned entries = ctx->uring_entries ? ctx->uring_entries : 256;
    unsigned want = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    if (ctx->uring_sqpoll)
        want = IORING_SETUP_SQPOLL | IORING_SETUP_SINGLE_ISSUER;
    unsigned cached = atomic_load_explicit(&probed_flags, memory_order_relaxed);
    if (cached != ~0u && !ctx->uring_sqpoll)
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
    if (!ctx->uring_sqpoll)
        atomic_store_explicit(&probed_flags, flags, memory_order_relaxed);
    s->flags = flags;
    weir__log(WEIR__LOG_DEBUG, "io.uring", "ring of %u entries, flags 0x%x", entries, flags);
    if ((r = arm_efd(s)) < 0) {
        io_uring_queue_exit(&s->ring);
        free(s);
        return r;
    }
    *state = s;
    return 0;
}

static void uring_fini(void *state)
{
    uring_state *s = state;
    if (!s)
        return;
    io_uring_queue_exit(&s->ring); /* also drops the eventfd read */
    free(s);
}

/* The interface's entry points take the state as void *. */
static void uring_submit_cb(void *state, weir__io_req *req)
{
    uring_submit(state, req);
}

static void uring_cancel_cb(void *state, weir__io_req *req)
{
    uring_cancel(state, req);
}

static int uring_wait_cb(void *state, int64_t timeout_ns)
{
    return uring_wait(state, timeout_ns);
}

static unsigned uring_pending_cb(void *state)
{
    return uring_pending(state);
}

const weir__backend weir__backend_uring = {
    .name = "uring",
    .init = uring_init,
    .fini = uring_fini,
    .submit = uring_submit_cb,
    .cancel = uring_cancel_cb,
    .wait = uring_wait_cb,
    .pending = uring_pending_cb,
};
