/* SPDX-License-Identifier: Apache-2.0 */
/*
 * channel_local.c - the in-process channel (channel.h): a batch moves by
 * pointer into the consumer subtask's input queue; the credits are a
 * semaphore the producer takes from and the consumer gives back to.
 */
#include <errno.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "stream/stream_int.h"

typedef struct local_channel {
    weir__channel ch;
    weir_sem *credits;
    subtask *to;
} local_channel;

static int local_send_batch(weir__channel *c, batch *b, uint64_t *waited_ns)
{
    local_channel *lc = (local_channel *)c;
    int e = weir__credit_take(c, lc->credits, waited_ns);
    if (e)
        return e;
    item it = {IT_BATCH, c->input, {b}, 0};
    e = weir_chan_send(lc->to->inq, &it, WEIR_FOREVER);
    if (e)
        weir_sem_release(lc->credits, 1);
    return e;
}

static int local_send_ctl(weir__channel *c, int kind, int64_t v)
{
    local_channel *lc = (local_channel *)c;
    item it = {kind, c->input, {NULL}, v};
    return weir_chan_send(lc->to->inq, &it, WEIR_FOREVER);
}

static void local_credit(weir__channel *c)
{
    weir_sem_release(((local_channel *)c)->credits, 1);
}

static void local_free(weir__channel *c)
{
    local_channel *lc = (local_channel *)c;
    weir__batch_free(c->open);
    weir_sem_free(lc->credits);
    weir__free(lc);
}

static const weir__channel_ops local_ops = {"local",      local_send_batch, local_send_ctl,
                                            local_credit, local_free,       NULL};

weir__channel *weir__channel_local_new(subtask *to, int credits)
{
    local_channel *lc = weir__calloc(1, sizeof(*lc));
    if (!lc)
        return NULL;
    if (!(lc->credits = weir_sem_new(credits))) {
        weir__free(lc);
        return NULL;
    }
    lc->ch.ops = &local_ops;
    lc->to = to;
    return &lc->ch;
}
