/* SPDX-License-Identifier: Apache-2.0 */
/*
 * outbox.h - a worker session's outbound frames: a FIFO that one writer
 * fiber alone drains onto the session's socket, so that whoever decides a
 * frame (the watchdog, a dispatch, a checkpoint trigger) posts it and goes
 * on, never waiting on a peer that has stopped reading.
 *
 * Posting. weir__outbox_post() copies the frame (header included, as
 * weir_frame_builder_finish() gives it) into the FIFO under the outbox's
 * own mutex, a leaf nothing waits under, wakes the writer and returns: it
 * never blocks, from any thread, inside or outside a task. Frames are of
 * one of two classes, each with its own bounds (the frame being written
 * never counts): control frames, at most max_control_frames and
 * max_control_bytes queued (WEIR_CLUSTER_BACKLOG_FRAMES / _BYTES by
 * default), and deploys, at most max_deploy_bytes (1 GiB) queued, so a
 * burst of deploys never pushes out the control traffic beside them. A
 * bound of 0 refuses every frame of its class. A post past a bound is
 * refused with -ENOBUFS and stops the outbox with the overflow verdict; a
 * post that cannot allocate is refused with -ENOMEM and stops it with the
 * allocation verdict; a post to a stopped outbox is refused with -EPIPE.
 *
 * Writing. The writer fiber, spawned on the current runtime by
 * weir__outbox_new() in the outbox's scope, writes the frames in the order
 * they were posted, each in chunks of at most 64 KiB (weir_io_send,
 * MSG_NOSIGNAL; with a TLS session, weir_tls_write of the whole chunk).
 * Every chunk the socket takes is progress. A write error
 * stops the outbox with the verdict "write failed: <errno text>".
 *
 * Stall. weir__outbox_check(now), which the node's watchdog calls every
 * WEIR_CLUSTER_WATCHDOG_MS, gives the stalled verdict when frames have
 * been pending (queued or being written) for stall_ms with no progress:
 * the clock starts when a frame is posted to an outbox with nothing
 * pending, and restarts at each chunk written. It only records the
 * verdict; the caller declares the peer lost and aborts the outbox. The
 * progress stamps come from limits.clock (weir_time_now by default), the
 * same clock as `now`, so tests inject time.
 *
 * Stopping. An outbox stops on overflow, allocation failure, a write
 * error or weir__outbox_abort(): what is queued is discarded (counted),
 * the socket is shut down both ways (which wakes a writer blocked in a
 * send) and the writer ends. A frame being written when the outbox stops
 * is discarded too; some of it may have reached the peer. An abort is
 * never a verdict. weir__outbox_free() aborts, joins the writer (from a
 * task) and frees what is left. The outbox never closes the fd: its owner
 * does, after the free.
 *
 * Verdicts. The first verdict is kept, with a text for the log: overflow
 * (naming the bound), allocation, write failed, stalled.
 */
#ifndef WEIR_CLUSTER_OUTBOX_H
#define WEIR_CLUSTER_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

#include "weir/tls.h"

#define WEIR__OUTBOX_DEPLOY_BYTES (1u << 30)
#define WEIR__OUTBOX_STALL_MS     10000
#define WEIR__OUTBOX_CHUNK        (64u << 10)
#define WEIR__OUTBOX_VERDICT_MAX  160

enum weir__outbox_class { WEIR__OUTBOX_CONTROL = 0, WEIR__OUTBOX_DEPLOY = 1 };

enum weir__outbox_verdict {
    WEIR__OUTBOX_OK = 0,       /* no verdict (an aborted outbox included) */
    WEIR__OUTBOX_OVERFLOW,     /* a post found its class at a bound */
    WEIR__OUTBOX_ALLOC,        /* a post could not allocate */
    WEIR__OUTBOX_WRITE_FAILED, /* the socket refused a write */
    WEIR__OUTBOX_STALLED,      /* frames pending, no progress for stall_ms */
};

typedef struct weir__outbox_limits {
    uint64_t max_control_frames;
    uint64_t max_control_bytes;
    uint64_t max_deploy_bytes;
    int64_t stall_ms;            /* <= 0, or too large for ns: no stall verdict */
    int64_t (*clock)(void *arg); /* ns, must not wait; NULL: weir_time_now */
    void *clock_arg;
} weir__outbox_limits;

typedef struct weir__outbox_stats {
    uint64_t frames_posted, bytes_posted;
    uint64_t frames_written, bytes_written; /* bytes: every byte the socket took */
    uint64_t frames_discarded, bytes_discarded;
    uint64_t frames_pending, bytes_pending; /* queued + the one being written */
    int stopped;
    int writer_done;
} weir__outbox_stats;

typedef struct weir__outbox weir__outbox;

/* The default limits (WEIR_CLUSTER_BACKLOG_*, 1 GiB of deploys, 10 s). */
weir__outbox_limits weir__outbox_limits_default(void);

/* A new outbox writing fd (not owned; through tls, not owned, unless NULL), its writer spawned on
 * the current runtime; limits NULL: the defaults. Must run in a task. NULL + errno. */
weir__outbox *weir__outbox_new(int fd, weir_tls *tls, const weir__outbox_limits *limits);
/* Abort, join the writer (must run in a task) and free. NULL is a no-op. */
void weir__outbox_free(weir__outbox *ob);

/* Queue a copy of frame[0..len). 0, -ENOBUFS (overflow), -ENOMEM, -EPIPE
 * (stopped), -EINVAL (len 0 or a bad class). Never blocks. */
int weir__outbox_post(weir__outbox *ob, const void *frame, size_t len, int cls);
/* The stall check at time now (ns, the limits' clock); returns the verdict. */
enum weir__outbox_verdict weir__outbox_check(weir__outbox *ob, int64_t now);
/* Restart the stall clock at now: a watchdog that was itself held up
 * (the process was suspended) judges no stall from the gap. */
void weir__outbox_rebase(weir__outbox *ob, int64_t now);
/* Stop: discard what is queued, shut the socket down, end the writer. */
void weir__outbox_abort(weir__outbox *ob);

/* The verdict, and its text copied into text[0..cap) when text != NULL. */
enum weir__outbox_verdict weir__outbox_verdict(weir__outbox *ob, char *text, size_t cap);
void weir__outbox_stats_get(weir__outbox *ob, weir__outbox_stats *out);

#endif
