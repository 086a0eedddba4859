/* SPDX-License-Identifier: Apache-2.0 */
/*
 * arc.c - counted references with strong and weak counts (Rust's Arc/Weak,
 * seed 004 §5.1), usable from any thread.
 *
 * One allocation: a header with the two counts and the destructor, then the
 * value, aligned for any type. The caller holds a pointer to the value; a
 * weak reference (weir_weak *) is a pointer to the header.
 *
 *   strong   references that keep the value alive. At zero, dtor(value)
 *            runs, exactly once, on the thread that dropped the last one.
 *   weak     weak references, plus one held collectively by all the strong
 *            ones (Rust's trick): the strong side gives it back after the
 *            destructor, so the memory goes when the last reference of
 *            either kind goes, and weak_release never races the dtor.
 *
 * weir_weak_upgrade() is a CAS loop on the strong count that refuses to
 * move it off zero: once the value is being destroyed it stays dead.
 *
 * Memory orders (as Rust's Arc, whose argument is in its sources): taking a
 * reference from one we hold is relaxed - it publishes nothing and a
 * reference cannot vanish while we hold one. Dropping one is a release, so
 * every holder's writes to the value come before the count reaches zero;
 * the thread that sees zero then issues an acquire fence before it destroys
 * or frees, so it sees all of those writes. The seed asks for SeqCst on
 * both; the release/acquire pairing is the weakest that is correct.
 */
#include <assert.h>
#include <limits.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

#include "sync/sync_int.h"

typedef struct arc_hdr {
    _Atomic long strong;
    _Atomic long weak; /* weak references + 1 while strong > 0 */
    void (*dtor)(void *);
    alignas(max_align_t) unsigned char value[];
} arc_hdr;

/* The acquire half of the release/acquire pairing, done by the thread that
 * took a count to zero. A fence is enough, but TSan does not model fences
 * and would report the destructor racing the other holders' last writes;
 * for TSan an acquire load of the count does the same job (it reads our
 * own decrement, the tail of the release sequence of every earlier one),
 * as Rust's Arc does under its sanitizer cfg. */
#ifdef WEIR_TSAN
#define ARC_ACQUIRE(count) ((void)atomic_load_explicit((count), memory_order_acquire))
#else
#define ARC_ACQUIRE(count) atomic_thread_fence(memory_order_acquire)
#endif

/* A count this large means references leak in a loop (or memory is
 * corrupt); stop before it could wrap, as Rust does. */
#define ARC_MAX_REFS (LONG_MAX / 2)

static arc_hdr *hdr_of(const void *p)
{
    return (arc_hdr *)(void *)((char *)(uintptr_t)p - offsetof(arc_hdr, value));
}

void *weir_arc_new(size_t size, void (*dtor)(void *))
{
    if (size > SIZE_MAX - sizeof(arc_hdr)) {
        errno = ENOMEM;
        return NULL;
    }
    arc_hdr *h = calloc(1, sizeof(arc_hdr) + size);
    if (!h) {
        errno = ENOMEM;
        return NULL;
    }
    atomic_init(&h->strong, 1);
    atomic_init(&h->weak, 1);
    h->dtor = dtor;
    return h->value;
}

void *weir_arc_clone(void *p)
{
    if (!p)
        return NULL;
    arc_hdr *h = hdr_of(p);
    /* relaxed: we already hold a reference, so the value cannot go away,
     * and the new reference publishes nothing */
    long old = atomic_fetch_add_explicit(&h->strong, 1, memory_order_relaxed);
    if (old <= 0 || old > ARC_MAX_REFS)
        abort(); /* clone of a dead value, or a reference leak about to wrap */
    return p;
}

static void weak_drop(arc_hdr *h)
{
    /* release: our uses of the header come before the free below */
    if (atomic_fetch_sub_explicit(&h->weak, 1, memory_order_release) != 1)
        return;
    /* acquire: pairs with every other dropper's release, so the free comes
     * after all of their accesses */
    ARC_ACQUIRE(&h->weak);
    free(h);
}

void weir_arc_release(void *p)
{
    if (!p)
        return;
    arc_hdr *h = hdr_of(p);
    /* release: our writes to the value come before the count can reach 0 */
    long old = atomic_fetch_sub_explicit(&h->strong, 1, memory_order_release);
    assert(old > 0 && "weir_arc_release of a dead value");
    if (old != 1)
        return;
    /* acquire: pairs with every other holder's release decrement, so the
     * destructor sees the value as they left it */
    ARC_ACQUIRE(&h->strong);
    if (h->dtor)
        h->dtor(p);
    weak_drop(h); /* the weak reference the strong ones held together */
}

weir_weak *weir_arc_downgrade(void *p)
{
    if (!p)
        return NULL;
    arc_hdr *h = hdr_of(p);
    /* relaxed: as clone - our strong reference keeps the header alive */
    long old = atomic_fetch_add_explicit(&h->weak, 1, memory_order_relaxed);
    if (old > ARC_MAX_REFS)
        abort();
    return (weir_weak *)(void *)h;
}

void *weir_weak_upgrade(weir_weak *w)
{
    if (!w)
        return NULL;
    arc_hdr *h = (arc_hdr *)(void *)w;
    /* relaxed: only a first guess for the CAS */
    long n = atomic_load_explicit(&h->strong, memory_order_relaxed);
    do {
        if (n == 0)
            return NULL; /* destroyed, or being destroyed: stays dead */
        if (n > ARC_MAX_REFS)
            abort();
        /* acquire on success: reads the value written by the latest decrement
         * of the count, a release sequence, so we see the value as the
         * holders that dropped their references left it */
    } while (!atomic_compare_exchange_weak_explicit(&h->strong, &n, n + 1, memory_order_acquire,
                                                    memory_order_relaxed));
    return h->value;
}

void weir_weak_release(weir_weak *w)
{
    if (w)
        weak_drop((arc_hdr *)(void *)w);
}

long weir_arc_strong_count(const void *p)
{
    if (!p)
        return 0;
    /* relaxed: a snapshot for diagnostics and tests, ordered by nothing */
    return atomic_load_explicit(&hdr_of(p)->strong, memory_order_relaxed);
}

long weir_arc_weak_count(const void *p)
{
    if (!p)
        return 0;
    /* relaxed: a snapshot; the caller holds a strong reference, so the
     * collective weak reference is present: don't count it */
    return atomic_load_explicit(&hdr_of(p)->weak, memory_order_relaxed) - 1;
}
