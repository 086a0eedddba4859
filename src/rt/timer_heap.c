/* SPDX-License-Identifier: Apache-2.0 */
/*
 * timer_heap.c - binary min-heap of timers, the benchmark baseline for the
 * timer wheel (see timer_heap.h). Entries are ordered by (deadline, seq);
 * every move of an entry rewrites its node's index so that del() can find
 * it in O(1) and repair the heap in O(log n).
 */
#include "rt/timer_heap.h"

#include <errno.h>
#include <stdlib.h>

static int before(const weir__theap_entry *x, const weir__theap_entry *y)
{
    if (x->deadline != y->deadline) return x->deadline < y->deadline;
    return x->node->seq < y->node->seq;
}

static void put(weir__theap *h, size_t i, weir__theap_entry e)
{
    h->a[i] = e;
    e.node->index = i + 1;
}

static void sift_up(weir__theap *h, size_t i)
{
    weir__theap_entry e = h->a[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&e, &h->a[p])) break;
        put(h, i, h->a[p]);
        i = p;
    }
    put(h, i, e);
}

static void sift_down(weir__theap *h, size_t i)
{
    weir__theap_entry e = h->a[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->len) break;
        if (c + 1 < h->len && before(&h->a[c + 1], &h->a[c])) c++;
        if (!before(&h->a[c], &e)) break;
        put(h, i, h->a[c]);
        i = c;
    }
    put(h, i, e);
}

void weir__theap_init(weir__theap *h)
{
    h->a = NULL;
    h->len = h->cap = 0;
    h->seq = 0;
}

void weir__theap_free(weir__theap *h)
{
    free(h->a);
    weir__theap_init(h);
}

int weir__theap_reserve(weir__theap *h, size_t n)
{
    if (n <= h->cap) return 0;
    if (n > SIZE_MAX / sizeof(*h->a)) return -ENOMEM;
    weir__theap_entry *a = realloc(h->a, n * sizeof(*a));
    if (!a) return -ENOMEM;
    h->a = a;
    h->cap = n;
    return 0;
}

int weir__theap_add(weir__theap *h, weir__theap_node *n)
{
    if (h->len == h->cap) {
        int rc = weir__theap_reserve(h, h->cap ? 2 * h->cap : 64);
        if (rc < 0) return rc;
    }
    n->seq = h->seq++;
    h->a[h->len] = (weir__theap_entry){n->deadline, n};
    sift_up(h, h->len++);
    return 0;
}

void weir__theap_del(weir__theap *h, weir__theap_node *n)
{
    size_t i = n->index - 1;
    n->index = 0;
    if (i == --h->len) return;
    put(h, i, h->a[h->len]);
    if (i > 0 && before(&h->a[i], &h->a[(i - 1) / 2]))
        sift_up(h, i);
    else
        sift_down(h, i);
}

int64_t weir__theap_next(const weir__theap *h)
{
    return h->len ? h->a[0].deadline : INT64_MAX;
}

size_t weir__theap_expire(weir__theap *h, int64_t now_ns,
                          void (*fire)(weir__theap_node *n, void *ctx), void *ctx)
{
    size_t fired = 0;
    while (h->len && h->a[0].deadline <= now_ns) {
        weir__theap_node *n = h->a[0].node;
        weir__theap_del(h, n);
        fired++;
        fire(n, ctx);
    }
    return fired;
}
