/* SPDX-License-Identifier: Apache-2.0 */
/*
 * deque.c - the bounded Chase-Lev deque of deque.h.
 *
 * Indices grow without wrapping (64-bit); slot = index & mask. Invariant:
 * top <= bottom + 1 at all times, and the items are at [top, bottom).
 * The only contended transitions are on `top` (thieves among themselves, and
 * the owner when it takes the last item), always by a seq_cst CAS, so each
 * index is handed out exactly once.
 */
#include <errno.h>
#include <stdlib.h>

#include "rt/deque.h"

int weir__deque_init(weir__deque *q, size_t capacity)
{
    if (capacity < 2 || (capacity & (capacity - 1)))
        return -EINVAL;
    q->slots = calloc(capacity, sizeof(*q->slots));
    if (!q->slots)
        return -ENOMEM;
    for (size_t i = 0; i < capacity; i++)
        atomic_init(&q->slots[i], NULL);
    q->mask = capacity - 1;
    atomic_init(&q->top, 0);
    atomic_init(&q->bottom, 0);
    return 0;
}

void weir__deque_fini(weir__deque *q)
{
    free(q->slots);
    q->slots = NULL;
}

int weir__deque_push(weir__deque *q, void *item)
{
    int64_t b = atomic_load_explicit(&q->bottom, memory_order_relaxed);
    /* acquire: a thief's CAS on top released the slot it emptied; we are
     * about to overwrite a slot only after seeing that top moved past it. */
    int64_t t = atomic_load_explicit(&q->top, memory_order_acquire);
    if ((uint64_t)(b - t) > q->mask)
        return -ENOSPC;
    atomic_store_explicit(&q->slots[b & (int64_t)q->mask], item, memory_order_relaxed);
    /* release: a thief that reads this bottom (acquire) also sees the slot
     * written above and everything the owner did to the item before. */
    atomic_store_explicit(&q->bottom, b + 1, memory_order_release);
    return 0;
}

void *weir__deque_pop(weir__deque *q)
{
    int64_t b = atomic_load_explicit(&q->bottom, memory_order_relaxed) - 1;
    atomic_store_explicit(&q->bottom, b, memory_order_relaxed);
    /* seq_cst fence: orders our store of bottom before our load of top,
     * against a thief's load of top before its load of bottom (its own
     * fence). Without it both could take the last item. */
    atomic_thread_fence(memory_order_seq_cst);
    int64_t t = atomic_load_explicit(&q->top, memory_order_relaxed);
    if (t > b) { /* empty: restore */
        atomic_store_explicit(&q->bottom, b + 1, memory_order_relaxed);
        return WEIR__DEQUE_EMPTY;
    }
    void *item = atomic_load_explicit(&q->slots[b & (int64_t)q->mask], memory_order_relaxed);
    if (t == b) {
        /* The last item: race the thieves for it on top. */
        if (!atomic_compare_exchange_strong_explicit(&q->top, &t, t + 1, memory_order_seq_cst,
                                                     memory_order_relaxed))
            item = WEIR__DEQUE_EMPTY; /* a thief got it */
        atomic_store_explicit(&q->bottom, b + 1, memory_order_relaxed);
    }
    return item;
}

void *weir__deque_steal(weir__deque *q)
{
    /* acquire: pairs with the owner's and other thieves' updates of top. */
    int64_t t = atomic_load_explicit(&q->top, memory_order_acquire);
    /* seq_cst fence: see pop(). */
    atomic_thread_fence(memory_order_seq_cst);
    /* acquire: pairs with push()'s release of bottom, making the slot and
     * the item's contents visible. */
    int64_t b = atomic_load_explicit(&q->bottom, memory_order_acquire);
    if (t >= b)
        return WEIR__DEQUE_EMPTY;
    void *item = atomic_load_explicit(&q->slots[t & (int64_t)q->mask], memory_order_relaxed);
    /* seq_cst CAS: claims index t; a failure means another thief or the
     * owner (taking the last item) claimed it first, and the value we read
     * may be stale. */
    if (!atomic_compare_exchange_strong_explicit(&q->top, &t, t + 1, memory_order_seq_cst,
                                                 memory_order_relaxed))
        return WEIR__DEQUE_ABORT;
    return item;
}

size_t weir__deque_len(weir__deque *q)
{
    int64_t b = atomic_load_explicit(&q->bottom, memory_order_relaxed);
    int64_t t = atomic_load_explicit(&q->top, memory_order_relaxed);
    return b > t ? (size_t)(b - t) : 0;
}
