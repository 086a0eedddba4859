/* SPDX-License-Identifier: Apache-2.0 */
/*
 * channel.h - how a subtask's records reach a subtask of the next chain,
 * whether or not that subtask runs in this process.
 *
 * A channel joins one producer subtask to one consumer subtask (the plan
 * numbers them, plan.h). The producer fills the channel's open batch
 * (task.c) and hands it over with send_batch, which first spends one of
 * the channel's credits, waiting for one: at most `credits` batches are in
 * flight on a channel, whatever carries them. Control items (watermark,
 * barrier, end of input, idle) go with send_ctl, after the batches sent
 * before them and without credits (a producer sends at most one per
 * advance). On the consumer's side every channel delivers into the
 * subtask's mailbox (its input queue, an item per batch or control), so a
 * subtask waits on one queue for all its inputs; once it has processed a
 * batch it returns the credit with credit().
 *
 * A channel may hold what it was given for a moment rather than pass it on
 * at once (push): a socket's channel keeps the frames of one step of its
 * producer - a source's call of next() and the watermark after it, an
 * operator's items until its queue is empty (16 at most; it lets its
 * thread's other tasks run once before it counts the queue as empty) - to
 * write them together, so a batch and the watermark after it cost one
 * write, not two.
 * The producer pushes every output at the end of each step and before it
 * waits for anything (weir__stream_push_all, task.c): before its input
 * queue, and before a credit of any of its channels (weir__credit_take),
 * so no consumer waits on frames its producer holds while the producer
 * waits on it. A barrier, an idle flag and the end of input are written
 * at once, with whatever is held before them.
 *
 * Implementations: channel_local.c hands the batch over by pointer into
 * the consumer's queue, no copy, and keeps the credits in a semaphore
 * both sides share. A channel that crosses processes implements the same
 * calls over a socket (the batch encoded in the wire layout of wire.h,
 * credits returned by frames). The factory deploy.c is given makes them.
 *
 * Ownership: send_batch takes the batch on success; on failure (-ECANCELED,
 * a closed peer) it stays the caller's. The channel belongs to the run
 * that made it and is freed by free() once no subtask uses it.
 */
#ifndef WEIR_STREAM_CHANNEL_H
#define WEIR_STREAM_CHANNEL_H

#include <stdint.h>

#include "weir/sync.h"

typedef struct weir__channel weir__channel;
struct batch;
struct subtask;

typedef struct weir__channel_ops {
    const char *name;
    /* Spend a credit (waiting up to forever; the wait is added to
     * *waited_ns), then hand b over. 0 or a negative errno. */
    int (*send_batch)(weir__channel *ch, struct batch *b, uint64_t *waited_ns);
    /* A control item (IT_WATERMARK, IT_BARRIER, IT_EOI) with its value. */
    int (*send_ctl)(weir__channel *ch, int kind, int64_t value);
    /* The consumer processed one batch of this channel. */
    void (*credit)(weir__channel *ch);
    void (*free)(weir__channel *ch);
    /* Pass on what send_batch / send_ctl held back; NULL: they hold
     * nothing. 0 or a negative errno (the job failed already). */
    int (*push)(weir__channel *ch);
} weir__channel_ops;

struct weir__channel {
    const weir__channel_ops *ops;
    uint32_t id;          /* the plan's channel number */
    int input;            /* the consumer's input index */
    struct batch *open;   /* the producer's batch being filled (task.c) */
    struct subtask *prod; /* the producer, when it runs here (deploy.c) */
};

/* Push every output channel of st (task.c). */
int weir__stream_push_all(struct subtask *st);

/* Take one of a channel's credits, waiting for it if none is free (the
 * wait is added to *waited_ns: the producer's backpressure). Before it
 * waits, the producer pushes its outputs (see push above). */
static inline int weir__credit_take(weir__channel *ch, weir_sem *credits, uint64_t *waited_ns)
{
    if (weir_sem_try_acquire(credits, 1) == 0)
        return 0;
    if (ch->prod) {
        int pe = weir__stream_push_all(ch->prod);
        if (pe)
            return pe;
    }
    int64_t t0 = weir_time_now();
    int e = weir_sem_acquire(credits, 1, WEIR_FOREVER);
    *waited_ns += (uint64_t)(weir_time_now() - t0);
    return e;
}

/* The in-process channel into consumer `to` (its input queue), with
 * `credits` credits. NULL on allocation failure. */
weir__channel *weir__channel_local_new(struct subtask *to, int credits);

#endif
