/* SPDX-License-Identifier: Apache-2.0 */
/*
 * timer_heap.h - a binary min-heap of timers (private), kept only as the
 * baseline that bench/timer_cancel.c measures the timer wheel against; the
 * loop itself uses timer_wheel.h.
 *
 * Same operations as the wheel: add, del by handle in O(log n) (each node
 * stores its position in the heap array), next, expire. Timers fire in
 * (deadline, insertion order) order. Unlike the wheel, a timer that fire()
 * adds with a deadline <= now_ns fires in the same expire call, even if its
 * deadline precedes the one just fired. The heap array is owned by the heap:
 * weir__theap_free() releases it; nodes are owned by the caller.
 */
#ifndef WEIR_RT_TIMER_HEAP_H
#define WEIR_RT_TIMER_HEAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct weir__theap_node {
    int64_t deadline; /* set by the caller before add */
    uint64_t seq;     /* insertion order, breaks deadline ties */
    size_t index;     /* 1 + position in the heap array; 0 = not armed */
} weir__theap_node;

/* The array keeps each key beside its node so that sifting compares without
 * chasing pointers. */
typedef struct weir__theap_entry {
    int64_t deadline;
    weir__theap_node *node;
} weir__theap_entry;

typedef struct weir__theap {
    weir__theap_entry *a;
    size_t len, cap;
    uint64_t seq;
} weir__theap;

void weir__theap_init(weir__theap *h);
void weir__theap_free(weir__theap *h);
/* Grows the array to hold n timers. 0 or -ENOMEM. */
int weir__theap_reserve(weir__theap *h, size_t n);
/* n->deadline must be set; n must not be armed. 0 or -ENOMEM. */
int weir__theap_add(weir__theap *h, weir__theap_node *n);
/* n must be armed. */
void weir__theap_del(weir__theap *h, weir__theap_node *n);
static inline int weir__theap_armed(const weir__theap_node *n)
{
    return n->index != 0;
}
/* Earliest deadline; INT64_MAX when empty. */
int64_t weir__theap_next(const weir__theap *h);
/* Fire every timer with deadline <= now_ns, each removed before fire(n, ctx)
 * is called; fire may add and delete timers. Returns the count. */
size_t weir__theap_expire(weir__theap *h, int64_t now_ns,
                          void (*fire)(weir__theap_node *n, void *ctx), void *ctx);

#endif
