/* SPDX-License-Identifier: Apache-2.0 */
/*
 * timer_wheel.c - the loop's hierarchical timing wheel (see timer_wheel.h).
 *
 * Positions. A deadline d becomes the tick T = ceil((d - origin) / 1 ms), so
 * that firing at tick T is never early. w->now is the wheel's cursor tick:
 * every armed timer has T >= now. A timer is filed by comparing T with now:
 *
 *   - T <= now (already due, or due within the cursor's own tick): level 0,
 *     the *current slot* (index now & 63). Only this slot can hold timers
 *     whose deadline has passed, and only it is fired partially (timers are
 *     checked one by one against now_ns, so none fires early and none is
 *     left behind once its deadline is <= now_ns).
 *   - else level = (index of the highest bit in which T and now differ) / 6,
 *     slot = the 6 bits of T at that level, as in Linux and Tokio. Levels
 *     0..4 thus hold ticks inside now's current level-above block; every
 *     occupied slot there is "ahead" of now's index at that level.
 *   - level 5 is a ring: slot s stands for the next 2^30-tick block whose
 *     low 6 bits are s, 1..63 blocks ahead. A deadline 64 or more blocks
 *     ahead (past about 2.2 years) is clamped into the block 63 ahead and
 *     re-filed when that block is reached.
 *
 * Because slots of a lower level always lie before every slot of a higher
 * one, the next event is found by bit scans on the lowest non-empty level:
 * the first occupied level-0 slot, or the block start of a higher slot,
 * which is then cascaded (re-filed one level down or more) when time gets
 * there. n->slot encodes level * 64 + index + 1, so 0 stays "not armed".
 *
 * weir__wheel_next(). For a level-0 slot it returns a lower bound of the
 * deadlines in that slot, kept in the list head's otherwise unused deadline
 * field: lowered by every insertion, reset when the slot empties, made exact
 * when expire sorts the slot, left as is (too low) when a timer is deleted.
 * So the value is never later than the earliest deadline, it is usually the
 * earliest deadline itself, and it costs no scan. For a higher level it is
 * the earliest deadline the slot could hold, origin + (start - 1) ms + 1 ns.
 * No busy loop: after expire(now_ns), next() is > now_ns, except when fire()
 * added timers that are already due (below), which the next expire fires.
 * (A stale bound <= now_ns after a deletion costs at most one extra expire,
 * which sorts the slot and makes the bound exact.) One exception to "never
 * later": a deadline before the wheel's origin (a time before the loop was
 * made, such as INT64_MIN) is reported as the origin; both are past, and the
 * caller can compute next - now without overflow.
 *
 * Order and re-entrancy. Within one expire call timers fire in non-decreasing
 * deadline order: each level-0 slot is merge-sorted (stable, so ties keep
 * insertion order, which every list move preserves) just before it fires.
 * fire() may add and delete timers. A timer added by fire() whose tick is
 * later than the tick being fired is fired in the same call when its deadline
 * is <= now_ns (it cannot precede anything already fired); one that falls in
 * the tick being fired or earlier (e.g. a deadline already past) is kept for
 * the next call, so the order within the call holds.
 *
 * Arithmetic. Ticks are uint64 (at most 2^64 ns / 1 ms, about 2^44), all
 * differences of int64 times are taken in uint64 after an ordering check, so
 * INT64_MIN, INT64_MAX and negative origins are safe.
 */
#include "rt/timer_wheel.h"

#define TICK_NS   UINT64_C(1000000)
#define LVL_BITS  6
#define TOP       (WEIR__WHEEL_LEVELS - 1)
#define TOP_SHIFT (LVL_BITS * TOP)

_Static_assert(WEIR__WHEEL_SLOTS == 1 << LVL_BITS, "64 slots per level");
_Static_assert((WEIR__WHEEL_LEVELS * WEIR__WHEEL_SLOTS) < UINT32_MAX, "slot encoding fits");

/* Smallest tick T with origin + T ms >= d (0 for anything at or before origin). */
static uint64_t tick_ceil(const weir__wheel *w, int64_t d)
{
    if (d <= w->origin) return 0;
    uint64_t diff = (uint64_t)d - (uint64_t)w->origin;
    return diff / TICK_NS + (diff % TICK_NS != 0);
}

/* Earliest deadline that can map to tick t >= 1: origin + (t - 1) ms + 1 ns.
 * Saturates, although every caller passes a tick no later than some armed
 * deadline's, so the true value is <= INT64_MAX. */
static int64_t tick_first_ns(const weir__wheel *w, uint64_t t)
{
    uint64_t room = (uint64_t)INT64_MAX - (uint64_t)w->origin; /* >= 0 in uint64 terms */
    if (t == 0) return w->origin;
    if ((t - 1) > (room - 1) / TICK_NS) return INT64_MAX;
    uint64_t off = (t - 1) * TICK_NS + 1;
    if (off > room) return INT64_MAX;
    /* origin + off <= INT64_MAX; computed in uint64, the result is in range. */
    return (int64_t)((uint64_t)w->origin + off);
}

static inline unsigned level_shift(unsigned level)
{
    return LVL_BITS * level;
}

static inline weir_timer_node *slot_head(weir__wheel *w, uint32_t enc)
{
    return &w->slots[0][0] + (enc - 1);
}

static void list_init(weir_timer_node *h)
{
    h->next = h->prev = h;
}

static inline int list_empty(const weir_timer_node *h)
{
    return h->next == h;
}

/* Appends n at the tail of (level, idx); ties thereby keep insertion order. */
static void link_at(weir__wheel *w, weir_timer_node *n, unsigned level, unsigned idx)
{
    weir_timer_node *h = &w->slots[level][idx];
    n->next = h;
    n->prev = h->prev;
    h->prev->next = n;
    h->prev = n;
    n->slot = (uint32_t)(level * WEIR__WHEEL_SLOTS + idx + 1);
    w->occupied[level] |= UINT64_C(1) << idx;
    if (level == 0 && n->deadline < h->deadline) h->deadline = n->deadline;
}

/* Files n relative to w->now (see the top of the file). */
static void place(weir__wheel *w, weir_timer_node *n)
{
    uint64_t t = tick_ceil(w, n->deadline), now = w->now;
    if (t <= now) {
        link_at(w, n, 0, (unsigned)(now & 63));
        return;
    }
    unsigned level = (unsigned)(63 - __builtin_clzll(t ^ now)) / LVL_BITS;
    if (level < TOP) {
        link_at(w, n, level, (unsigned)((t >> level_shift(level)) & 63));
        return;
    }
    uint64_t ahead = (t >> TOP_SHIFT) - (now >> TOP_SHIFT); /* >= 1 */
    if (ahead > 63) ahead = 63;
    link_at(w, n, TOP, (unsigned)(((now >> TOP_SHIFT) + ahead) & 63));
}

void weir__wheel_init(weir__wheel *w, int64_t now_ns)
{
    w->origin = now_ns;
    w->now = 0;
    w->count = 0;
    for (unsigned l = 0; l < WEIR__WHEEL_LEVELS; l++) {
        w->occupied[l] = 0;
        for (unsigned s = 0; s < WEIR__WHEEL_SLOTS; s++) {
            weir_timer_node *h = &w->slots[l][s];
            list_init(h);
            h->deadline = INT64_MAX;
            h->slot = 0;
            h->pad = 0;
        }
    }
}

void weir__wheel_add(weir__wheel *w, weir_timer_node *n)
{
    place(w, n);
    w->count++;
}

/* Unlinks n from whatever list holds it (a slot, or a private list inside
 * expire) and keeps the occupancy bit of n's recorded slot truthful. */
static void unlink_node(weir__wheel *w, weir_timer_node *n)
{
    uint32_t enc = n->slot;
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = n->prev = NULL;
    n->slot = 0;
    weir_timer_node *h = slot_head(w, enc);
    if (list_empty(h)) {
        unsigned level = (enc - 1) / WEIR__WHEEL_SLOTS, idx = (enc - 1) % WEIR__WHEEL_SLOTS;
        w->occupied[level] &= ~(UINT64_C(1) << idx);
        h->deadline = INT64_MAX;
    }
}

void weir__wheel_del(weir__wheel *w, weir_timer_node *n)
{
    unlink_node(w, n);
    w->count--;
}

/* The earliest slot after the current one: *level and start tick *t.
 * Returns 0 when there is none. Level 0 here excludes the current slot. */
static int next_event(const weir__wheel *w, unsigned *level, uint64_t *t)
{
    uint64_t now = w->now;
    uint64_t m0 = w->occupied[0] & (~UINT64_C(1) << (now & 63));
    if (m0) {
        *level = 0;
        *t = (now & ~UINT64_C(63)) | (uint64_t)__builtin_ctzll(m0);
        return 1;
    }
    for (unsigned l = 1; l < TOP; l++) {
        uint64_t m = w->occupied[l];
        if (!m) continue;
        unsigned sh = level_shift(l);
        *level = l;
        *t = ((now >> (sh + LVL_BITS)) << (sh + LVL_BITS)) | ((uint64_t)__builtin_ctzll(m) << sh);
        return 1;
    }
    uint64_t m = w->occupied[TOP];
    if (!m) return 0;
    unsigned r = (unsigned)((now >> TOP_SHIFT) & 63);
    uint64_t rot = r ? (m >> r) | (m << (64 - r)) : m; /* bit j = j blocks ahead */
    *level = TOP;
    *t = ((now >> TOP_SHIFT) + (uint64_t)__builtin_ctzll(rot)) << TOP_SHIFT;
    return 1;
}

int64_t weir__wheel_next(const weir__wheel *w)
{
    if (w->occupied[0]) {
        /* All level-0 slots lie at or after the current index, so the
         * lowest set bit is the earliest. */
        int64_t d = w->slots[0][__builtin_ctzll(w->occupied[0])].deadline;
        return d < w->origin ? w->origin : d;
    }
    unsigned level;
    uint64_t t;
    if (!next_event(w, &level, &t)) return INT64_MAX;
    return tick_first_ns(w, t);
}

/* Moves the whole list of h to the tail of the private list dst. */
static void splice_tail(weir_timer_node *dst, weir_timer_node *h)
{
    if (list_empty(h)) return;
    weir_timer_node *first = h->next, *last = h->prev;
    first->prev = dst->prev;
    dst->prev->next = first;
    last->next = dst;
    dst->prev = last;
    list_init(h);
}

/* Moves the whole private list src to the head of h (current level-0 slot). */
static void splice_head(weir__wheel *w, weir_timer_node *h, unsigned idx, weir_timer_node *src)
{
    if (list_empty(src)) return;
    int64_t min = h->deadline;
    for (weir_timer_node *n = src->next; n != src; n = n->next) {
        n->slot = (uint32_t)(idx + 1);
        if (n->deadline < min) min = n->deadline;
    }
    weir_timer_node *first = src->next, *last = src->prev;
    last->next = h->next;
    h->next->prev = last;
    h->next = first;
    first->prev = h;
    list_init(src);
    h->deadline = min;
    w->occupied[0] |= UINT64_C(1) << idx;
}

/* Stable merge of two NULL-terminated lists (ties taken from a first). */
static weir_timer_node *merge(weir_timer_node *a, weir_timer_node *b)
{
    weir_timer_node head, *tail = &head;
    while (a && b) {
        if (b->deadline < a->deadline) {
            tail->next = b;
            b = b->next;
        } else {
            tail->next = a;
            a = a->next;
        }
        tail = tail->next;
    }
    tail->next = a ? a : b;
    return head.next;
}

/* Empties the list of h into a NULL-terminated chain linked by next, in list
 * order. The nodes are usually cold and scattered over memory, so this walk
 * is bound by cache misses; it follows next from the front and prev from the
 * back at once, two independent pointer chases that overlap, and the callers
 * then work on warm nodes. */
static weir_timer_node *take_chain(weir_timer_node *h)
{
    weir_timer_node *first = h->next, *a = first, *b = h->prev, *back = NULL;
    if (first == h) return NULL;
    list_init(h);
    /* front: first .. a by their own next links; back: nodes after b. */
    for (;;) {
        if (a == b) {
            a->next = back;
            return first;
        }
        weir_timer_node *an = a->next, *bp = b->prev;
        if (an == b) {
            b->next = back;
            return first;
        }
        b->next = back;
        back = b;
        a = an;
        b = bp;
    }
}

/* Sorts a chain by deadline, stably: a bottom-up merge sort with one pending
 * run per power of two, as the Linux kernel's list_sort. */
static weir_timer_node *sort_chain(weir_timer_node *list)
{
    weir_timer_node *n = list;
    while (n && n->next && n->deadline <= n->next->deadline)
        n = n->next;
    if (!n || !n->next) return list; /* already sorted, e.g. what the last call left over */
    weir_timer_node *bins[64] = {0};
    unsigned top = 0;
    while (list) {
        weir_timer_node *run = list;
        list = list->next;
        run->next = NULL;
        unsigned i = 0;
        for (; bins[i]; i++) {
            run = merge(bins[i], run); /* bins[i] holds earlier elements */
            bins[i] = NULL;
        }
        bins[i] = run;
        if (i > top) top = i;
    }
    weir_timer_node *all = NULL;
    for (unsigned i = 0; i <= top; i++)
        if (bins[i]) all = merge(bins[i], all);
    return all;
}

/* Links a chain into the empty private list h, restoring prev links. */
static void chain_to_list(weir_timer_node *h, weir_timer_node *chain)
{
    weir_timer_node *prev = h;
    for (weir_timer_node *n = chain; n; n = n->next) {
        n->prev = prev;
        prev->next = n;
        prev = n;
    }
    prev->next = h;
    h->prev = prev;
}

size_t weir__wheel_expire(weir__wheel *w, int64_t now_ns,
                          void (*fire)(weir_timer_node *n, void *ctx), void *ctx)
{
    /* Every timer with deadline <= now_ns has tick <= limit. */
    uint64_t limit = tick_ceil(w, now_ns);
    uint64_t target = now_ns <= w->origin ? 0 : ((uint64_t)now_ns - (uint64_t)w->origin) / TICK_NS;
    /* Timers that fire() added into a slot already fired in this call wait
     * here until the end, so that they go to the next call. */
    weir_timer_node later;
    list_init(&later);
    int cur_done = 0;
    size_t fired = 0;

    for (;;) {
        unsigned idx = (unsigned)(w->now & 63);
        weir_timer_node *h = &w->slots[0][idx];
        if (!cur_done && (w->occupied[0] >> idx & 1)) {
            weir_timer_node batch;
            list_init(&batch);
            chain_to_list(&batch, sort_chain(take_chain(h)));
            w->occupied[0] &= ~(UINT64_C(1) << idx);
            h->deadline = INT64_MAX;
            /* fire() may delete any node of batch: take the head each time. */
            while (batch.next != &batch && batch.next->deadline <= now_ns) {
                weir_timer_node *n = batch.next;
                unlink_node(w, n);
                w->count--;
                fired++;
                fire(n, ctx);
            }
            /* What is left is due later than now_ns; it was inserted before
             * anything fire() added here, so it goes first. */
            splice_head(w, h, idx, &batch);
            cur_done = 1;
            continue;
        }
        unsigned level;
        uint64_t t;
        if (!next_event(w, &level, &t) || t > limit) break;
        if (w->occupied[0] >> idx & 1) { /* added by fire(), for the next call */
            splice_tail(&later, h);
            w->occupied[0] &= ~(UINT64_C(1) << idx);
            h->deadline = INT64_MAX;
        }
        w->now = t;
        cur_done = 0;
        if (level > 0) {
            weir_timer_node *src = &w->slots[level][(t >> level_shift(level)) & 63];
            /* One pass in list order, keeping ties in insertion order. (A
             * take_chain() pre-pass does not pay here: a higher slot can hold
             * far more nodes than the caches, and they would be cold again.) */
            weir_timer_node *n = src->next, *next;
            list_init(src);
            w->occupied[level] &= ~(UINT64_C(1) << ((t >> level_shift(level)) & 63));
            for (; n != src; n = next) {
                next = n->next;
                place(w, n);
            }
        }
    }

    /* Advance the cursor to the clock's tick (every slot left starts after
     * limit >= target, so nothing is passed over), carrying the timers of
     * the current slot, which are all due at or before it, along. */
    unsigned idx = (unsigned)(w->now & 63);
    if (target > w->now) {
        splice_tail(&later, &w->slots[0][idx]);
        w->occupied[0] &= ~(UINT64_C(1) << idx);
        w->slots[0][idx].deadline = INT64_MAX;
        w->now = target;
        idx = (unsigned)(target & 63);
    }
    splice_head(w, &w->slots[0][idx], idx, &later);
    return fired;
}
