/* SPDX-License-Identifier: Apache-2.0 */
/*
 * timer_wheel.h - hierarchical timing wheel (private), one per loop.
 *
 * Six levels of 64 slots; level 0 slots are 1 ms wide, each level up 64x
 * wider (about 2 years at the top; later deadlines are clamped there and
 * re-filed). Insert and remove are O(1) (intrusive doubly-linked slot lists
 * plus a 64-bit occupancy mask per level); finding the next expiry is a few
 * bit scans. Timers never fire before their deadline and at most one tick
 * (1 ms) after the loop looks at the clock past it. Within one call of
 * weir__wheel_expire() timers fire in non-decreasing deadline order (ties in
 * insertion order).
 */
#ifndef WEIR_RT_TIMER_WHEEL_H
#define WEIR_RT_TIMER_WHEEL_H

#include <stdint.h>
#include <stddef.h>
#include "weir/rt.h" /* weir_timer_node */

#define WEIR__WHEEL_LEVELS 6
#define WEIR__WHEEL_SLOTS  64

typedef struct weir__wheel {
    int64_t origin;  /* ns of tick 0 */
    uint64_t now;    /* current tick (ms since origin) */
    uint64_t occupied[WEIR__WHEEL_LEVELS];
    weir_timer_node slots[WEIR__WHEEL_LEVELS][WEIR__WHEEL_SLOTS]; /* list heads */
    size_t count;
} weir__wheel;

void weir__wheel_init(weir__wheel *w, int64_t now_ns);
/* n->deadline must be set; n must not be armed. */
void weir__wheel_add(weir__wheel *w, weir_timer_node *n);
/* n must be armed. O(1). */
void weir__wheel_del(weir__wheel *w, weir_timer_node *n);
static inline int weir__wheel_armed(const weir_timer_node *n) { return n->slot != 0; }
/* Earliest time at which weir__wheel_expire may fire something (never later
 * than the earliest deadline); INT64_MAX when empty. */
int64_t weir__wheel_next(const weir__wheel *w);
/* Fire every timer with deadline <= now_ns. Each is unlinked before
 * fire(n, ctx) is called; fire may add and delete timers. Returns the count. */
size_t weir__wheel_expire(weir__wheel *w, int64_t now_ns,
                          void (*fire)(weir_timer_node *n, void *ctx), void *ctx);

#endif
