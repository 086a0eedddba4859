/* SPDX-License-Identifier: Apache-2.0 */
/*
 * alloc.c - the replaceable allocator and its failure countdown (alloc.h).
 */
#include "base/alloc.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "weir/base.h"

static weir_allocator g_alloc = {malloc, calloc, realloc, free};

/* -1: off. Otherwise the allocations still allowed before the failures. */
static _Atomic long g_left = -1;
static _Atomic long g_count;

int weir_set_allocator(const weir_allocator *a)
{
    if (!a || !a->malloc || !a->calloc || !a->realloc || !a->free)
        return -EINVAL;
    g_alloc = *a;
    return 0;
}

long weir__alloc_fail_after(long n)
{
    long made = atomic_exchange(&g_count, 0);
    atomic_store(&g_left, n < 0 ? -1 : n);
    return made;
}

/* 1: this allocation fails. */
static int fail_now(void)
{
    if (atomic_load_explicit(&g_left, memory_order_relaxed) < 0)
        return 0;
    atomic_fetch_add(&g_count, 1);
    long left = atomic_load(&g_left);
    while (left > 0 && !atomic_compare_exchange_weak(&g_left, &left, left - 1))
        ;
    if (left != 0)
        return 0;
    errno = ENOMEM;
    return 1;
}

void *weir__malloc(size_t n)
{
    return fail_now() ? NULL : g_alloc.malloc(n);
}

void *weir__calloc(size_t n, size_t size)
{
    return fail_now() ? NULL : g_alloc.calloc(n, size);
}

void *weir__realloc(void *p, size_t n)
{
    return fail_now() ? NULL : g_alloc.realloc(p, n);
}

void weir__free(void *p)
{
    g_alloc.free(p);
}

char *weir__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = weir__malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}
