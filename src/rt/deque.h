/* SPDX-License-Identifier: Apache-2.0 */
/*
 * deque.h - a bounded Chase-Lev work-stealing deque (private).
 *
 * One owner thread pushes and pops at the bottom (LIFO: the task it just
 * woke runs next, its data still in cache); any number of thieves steal at
 * the top (FIFO: the oldest work, the least likely to be hot in the owner's
 * cache). The algorithm is Chase & Lev's, with the C11 orderings of Le,
 * Pop, Cohen and Zappa Nardelli ("Correct and efficient work-stealing for
 * weak memory models", PPoPP 2013); each ordering is explained where it is
 * used (deque.c).
 *
 * The capacity is fixed (a power of two) instead of growing: push() fails
 * with -ENOSPC when the ring is full and the scheduler moves work to its
 * shared injection queue instead (as Tokio does). A fixed ring never has to
 * reclaim an old array that a thief may still be reading.
 */
#ifndef WEIR_RT_DEQUE_H
#define WEIR_RT_DEQUE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define WEIR__DEQUE_EMPTY ((void *)0)
#define WEIR__DEQUE_ABORT ((void *)1) /* steal lost a race: retry or go elsewhere */

typedef struct weir__deque {
    /* top and bottom on separate cache lines: thieves hammer top, the owner
     * bottom. */
    _Alignas(64) _Atomic int64_t top;
    _Alignas(64) _Atomic int64_t bottom;
    _Alignas(64) size_t mask; /* capacity - 1 */
    _Atomic(void *) *slots;
} weir__deque;

/* capacity: a power of two >= 2. 0 or -ENOMEM / -EINVAL. */
int weir__deque_init(weir__deque *q, size_t capacity);
void weir__deque_fini(weir__deque *q);
/* Owner only. 0, or -ENOSPC when full. item must not be NULL or ABORT. */
int weir__deque_push(weir__deque *q, void *item);
/* Owner only: the most recently pushed item, or EMPTY. */
void *weir__deque_pop(weir__deque *q);
/* Any thread: the oldest item, EMPTY, or ABORT (lost a race with another
 * thief or with the owner taking the last item). */
void *weir__deque_steal(weir__deque *q);
/* Approximate number of items (exact when called by the owner with no
 * concurrent steals). */
size_t weir__deque_len(weir__deque *q);

#endif
