/* SPDX-License-Identifier: Apache-2.0 */
/*
 * list.h - the one intrusive doubly-linked list every layer uses.
 *
 * A list is a weir__list head; an element embeds a weir__list node and is
 * found back from it with weir__container_of. The list is circular through
 * the head, so push, remove and pop are a few pointer stores with no NULL
 * cases and nothing allocates: a waiter queue, a timer's cancel list or a
 * connection table costs one node per element and never fails.
 *
 * A node that is on no list points at itself (weir__list_init it, and
 * weir__list_remove leaves it so): weir__list_linked then tells whether it
 * is on a list, and removing it again is a no-op. A zeroed node is neither:
 * init it before the first remove or linked test.
 *
 * Not thread-safe: the owner of the list serializes the calls (a mutex, or
 * the one thread the list belongs to).
 */
#ifndef WEIR_BASE_LIST_H
#define WEIR_BASE_LIST_H

#include <stddef.h>

/* The definition is shared with weir/sync.h, whose public op struct embeds
 * a node (a public header cannot include this private one). */
#ifndef WEIR__LIST_DEFINED
#define WEIR__LIST_DEFINED
struct weir__list {
    struct weir__list *next, *prev;
};
#endif
typedef struct weir__list weir__list;

/* The struct of the given type whose member is the node at ptr. */
#define weir__container_of(ptr, type, member)                                                      \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* An empty list, or a node on no list. */
static inline void weir__list_init(weir__list *h)
{
    h->next = h->prev = h;
}

static inline int weir__list_empty(const weir__list *h)
{
    return h->next == h;
}

/* 1 if the (initialized) node is on a list. */
static inline int weir__list_linked(const weir__list *n)
{
    return n->next != n;
}

/* Link n just before at (at the end of the list when at is the head). */
static inline void weir__list_insert_before(weir__list *at, weir__list *n)
{
    n->next = at;
    n->prev = at->prev;
    at->prev->next = n;
    at->prev = n;
}

static inline void weir__list_push_back(weir__list *h, weir__list *n)
{
    weir__list_insert_before(h, n);
}

static inline void weir__list_push_front(weir__list *h, weir__list *n)
{
    weir__list_insert_before(h->next, n);
}

/* Unlink n from its list and leave it pointing at itself; a no-op on a node
 * that is on no list. */
static inline void weir__list_remove(weir__list *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = n->prev = n;
}

/* The first / last node, or NULL on an empty list. */
static inline weir__list *weir__list_first(const weir__list *h)
{
    return h->next == h ? NULL : h->next;
}

static inline weir__list *weir__list_last(const weir__list *h)
{
    return h->prev == h ? NULL : h->prev;
}

/* Unlink and return the first node, or NULL on an empty list. */
static inline weir__list *weir__list_pop(weir__list *h)
{
    weir__list *n = weir__list_first(h);
    if (n)
        weir__list_remove(n);
    return n;
}

/* Move every node of from to the end of to; from is left empty. */
static inline void weir__list_splice(weir__list *to, weir__list *from)
{
    if (weir__list_empty(from))
        return;
    from->next->prev = to->prev;
    to->prev->next = from->next;
    from->prev->next = to;
    to->prev = from->prev;
    weir__list_init(from);
}

/* For each node it of list h, first to last. The body must not remove it;
 * weir__list_foreach_safe allows removing (or freeing) it, with tmp as the
 * next node saved before the body runs. */
#define weir__list_foreach(it, h) for ((it) = (h)->next; (it) != (h); (it) = (it)->next)
#define weir__list_foreach_safe(it, tmp, h)                                                        \
    for ((it) = (h)->next, (tmp) = (it)->next; (it) != (h); (it) = (tmp), (tmp) = (it)->next)

#endif
