/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_arc.c - counted references: strong and weak counts, the destructor
 * at the last strong reference, the memory at the last of either kind
 * (ASan sees a leak or a use after free otherwise), upgrade after death,
 * alignment, and cross-thread clone / release / upgrade stress with the
 * destructor running exactly once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>

#include "test.h"
#include "weir/sync.h"

#define MAGIC 0x5eed5eedL

struct thing {
    long magic;
    long payload[4];
};

static _Atomic int dtors;

static void thing_dtor(void *p)
{
    struct thing *t = p;
    CHECK_EQ(t->magic, MAGIC); /* sees the value as its holders left it */
    t->magic = 0;
    atomic_fetch_add(&dtors, 1);
}

TEST(arc_counts_and_lifetime)
{
    atomic_store(&dtors, 0);
    struct thing *a = weir_arc_new(sizeof(*a), thing_dtor);
    CHECK(a != NULL);
    CHECK_EQ((uintptr_t)a % alignof(max_align_t), 0);
    CHECK_EQ(a->payload[3], 0); /* zeroed */
    a->magic = MAGIC;
    CHECK_EQ(weir_arc_strong_count(a), 1);
    CHECK_EQ(weir_arc_weak_count(a), 0);

    struct thing *b = weir_arc_clone(a);
    CHECK(b == a);
    CHECK_EQ(weir_arc_strong_count(a), 2);
    weir_weak *w = weir_arc_downgrade(a);
    weir_weak *w2 = weir_arc_downgrade(a);
    CHECK(w != NULL);
    CHECK_EQ(weir_arc_weak_count(a), 2);
    weir_weak_release(w2);
    CHECK_EQ(weir_arc_weak_count(a), 1);

    weir_arc_release(b);
    CHECK_EQ(weir_arc_strong_count(a), 1);
    struct thing *c = weir_weak_upgrade(w);
    CHECK(c == a);
    CHECK_EQ(weir_arc_strong_count(a), 2);
    weir_arc_release(c);
    CHECK_EQ(atomic_load(&dtors), 0);

    weir_arc_release(a); /* the last strong reference: dtor, memory stays for w */
    CHECK_EQ(atomic_load(&dtors), 1);
    CHECK(weir_weak_upgrade(w) == NULL); /* dead stays dead */
    CHECK(weir_weak_upgrade(w) == NULL);
    weir_weak_release(w); /* the memory goes now */
    CHECK_EQ(atomic_load(&dtors), 1);
}

TEST(arc_without_weak_or_dtor)
{
    atomic_store(&dtors, 0);
    void *p = weir_arc_new(0, NULL); /* zero bytes and no dtor are fine */
    CHECK(p != NULL);
    weir_arc_release(weir_arc_clone(p));
    weir_arc_release(p); /* frees at once: no weak reference */
    struct thing *t = weir_arc_new(sizeof(*t), thing_dtor);
    t->magic = MAGIC;
    weir_arc_release(t);
    CHECK_EQ(atomic_load(&dtors), 1);
    /* NULL is accepted everywhere. */
    CHECK(weir_arc_clone(NULL) == NULL);
    weir_arc_release(NULL);
    CHECK(weir_arc_downgrade(NULL) == NULL);
    CHECK(weir_weak_upgrade(NULL) == NULL);
    weir_weak_release(NULL);
    CHECK_EQ(weir_arc_strong_count(NULL), 0);
    errno = 0;
    CHECK(weir_arc_new(SIZE_MAX - 8, NULL) == NULL);
    CHECK_EQ(errno, ENOMEM);
}

/* Cross-thread stress. Each round makes one value with one strong and one
 * weak reference per thread; the threads clone, upgrade and release in a
 * loop and then drop their references in a race. The dtor must run once
 * per value, never while someone holds a strong reference (upgrades check
 * the magic), and ASan / TSan watch the frees. */
#define NTHREADS 4
#define ROUNDS   2000
#define SPINS    50

struct shared {
    _Atomic(struct thing *) strong[NTHREADS];
    _Atomic(weir_weak *) weak[NTHREADS];
    pthread_barrier_t start, end;
};

static void *stress_thread(void *p)
{
    static _Atomic int next_id;
    struct shared *sh = p;
    int id = atomic_fetch_add(&next_id, 1) % NTHREADS;
    for (int r = 0; r < ROUNDS; r++) {
        pthread_barrier_wait(&sh->start);
        struct thing *mine = atomic_load(&sh->strong[id]);
        weir_weak *w = atomic_load(&sh->weak[id]);
        for (int i = 0; i < SPINS; i++) {
            struct thing *c = weir_arc_clone(mine);
            CHECK_EQ(c->magic, MAGIC);
            struct thing *u = weir_weak_upgrade(w);
            CHECK(u != NULL); /* we still hold `mine` */
            weir_arc_release(c);
            weir_arc_release(u);
        }
        weir_arc_release(mine); /* the race for the last strong reference */
        /* Upgrades racing the death: NULL, or a live value. */
        for (int i = 0; i < SPINS; i++) {
            struct thing *u = weir_weak_upgrade(w);
            if (!u)
                break;
            CHECK_EQ(u->magic, MAGIC);
            weir_arc_release(u);
        }
        weir_weak_release(w); /* the race for the memory */
        pthread_barrier_wait(&sh->end);
    }
    return NULL;
}

TEST(arc_cross_thread_stress)
{
    atomic_store(&dtors, 0);
    struct shared sh;
    pthread_barrier_init(&sh.start, NULL, NTHREADS + 1);
    pthread_barrier_init(&sh.end, NULL, NTHREADS + 1);
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++)
        pthread_create(&th[i], NULL, stress_thread, &sh);
    for (int r = 0; r < ROUNDS; r++) {
        struct thing *t = weir_arc_new(sizeof(*t), thing_dtor);
        CHECK(t != NULL);
        t->magic = MAGIC;
        for (int i = 0; i < NTHREADS; i++) {
            atomic_store(&sh.weak[i], weir_arc_downgrade(t));
            atomic_store(&sh.strong[i], i ? weir_arc_clone(t) : t);
        }
        pthread_barrier_wait(&sh.start);
        pthread_barrier_wait(&sh.end);
        CHECK_EQ(atomic_load(&dtors), r + 1); /* exactly once per value */
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&sh.start);
    pthread_barrier_destroy(&sh.end);
}

TEST_MAIN()
