/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_deque.c - the Chase-Lev deque: LIFO for the owner, FIFO for thieves,
 * the bound, and a race test where the owner pushes and pops while thieves
 * steal, checking that every item is taken exactly once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "rt/deque.h"
#include "test.h"

#define ITEM(i) ((void *)(uintptr_t)((i) + 2)) /* never EMPTY (0) or ABORT (1) */
#define ID(p)   ((long)(uintptr_t)(p)-2)

TEST(owner_lifo_thief_fifo)
{
    weir__deque q;
    CHECK_EQ(weir__deque_init(&q, 8), 0);
    CHECK(weir__deque_pop(&q) == WEIR__DEQUE_EMPTY);
    CHECK(weir__deque_steal(&q) == WEIR__DEQUE_EMPTY);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(weir__deque_push(&q, ITEM(i)), 0);
    CHECK_EQ(weir__deque_push(&q, ITEM(8)), -ENOSPC); /* bounded */
    CHECK_EQ(weir__deque_len(&q), 8);
    CHECK_EQ(ID(weir__deque_pop(&q)), 7);   /* newest */
    CHECK_EQ(ID(weir__deque_steal(&q)), 0); /* oldest */
    CHECK_EQ(ID(weir__deque_steal(&q)), 1);
    CHECK_EQ(weir__deque_push(&q, ITEM(9)), 0); /* wraps around the ring */
    CHECK_EQ(weir__deque_push(&q, ITEM(10)), 0);
    CHECK_EQ(weir__deque_push(&q, ITEM(11)), 0);
    CHECK_EQ(weir__deque_push(&q, ITEM(12)), -ENOSPC);
    CHECK_EQ(ID(weir__deque_pop(&q)), 11);
    long seen = 0;
    void *p;
    while ((p = weir__deque_steal(&q)) != WEIR__DEQUE_EMPTY)
        seen++;
    CHECK_EQ(seen, 7); /* 2..6, 9, 10 */
    CHECK(weir__deque_pop(&q) == WEIR__DEQUE_EMPTY);
    weir__deque_fini(&q);
    CHECK_EQ(weir__deque_init(&q, 6), -EINVAL);
}

/* ---- the race ------------------------------------------------------------------ */
enum { N = 200000, THIEVES = 2 };
static weir__deque rq;
static _Atomic int taken[N];
static _Atomic int owner_done;
static _Atomic long stolen;

static void take(void *p)
{
    long id = ID(p);
    CHECK_GE(id, 0);
    CHECK_LT(id, N);
    CHECK_EQ(atomic_fetch_add_explicit(&taken[id], 1, memory_order_relaxed), 0);
}

static void *thief(void *arg)
{
    (void)arg;
    for (;;) {
        void *p = weir__deque_steal(&rq);
        if (p == WEIR__DEQUE_ABORT)
            continue;
        if (p == WEIR__DEQUE_EMPTY) {
            if (atomic_load_explicit(&owner_done, memory_order_acquire) &&
                weir__deque_len(&rq) == 0)
                break;
            continue;
        }
        take(p);
        atomic_fetch_add_explicit(&stolen, 1, memory_order_relaxed);
    }
    return NULL;
}

TEST(steal_race_every_item_once)
{
    CHECK_EQ(weir__deque_init(&rq, 256), 0);
    pthread_t th[THIEVES];
    for (int i = 0; i < THIEVES; i++)
        pthread_create(&th[i], NULL, thief, NULL);
    srand(3);
    long next = 0;
    while (next < N) {
        /* Push a burst (spilling to "the injection queue" = take it here
         * when full), then pop part of it: the last-item race with thieves
         * happens whenever the deque runs down to one. */
        int burst = 1 + rand() % 64;
        for (int i = 0; i < burst && next < N; i++, next++)
            if (weir__deque_push(&rq, ITEM(next)) == -ENOSPC)
                take(ITEM(next));
        int pops = rand() % 64;
        for (int i = 0; i < pops; i++) {
            void *p = weir__deque_pop(&rq);
            if (p == WEIR__DEQUE_EMPTY)
                break;
            take(p);
        }
    }
    void *p;
    while ((p = weir__deque_pop(&rq)) != WEIR__DEQUE_EMPTY)
        take(p);
    atomic_store_explicit(&owner_done, 1, memory_order_release);
    for (int i = 0; i < THIEVES; i++)
        pthread_join(th[i], NULL);
    for (long i = 0; i < N; i++)
        CHECK_EQ(atomic_load(&taken[i]), 1);
    printf("    stolen by thieves: %ld of %d\n", atomic_load(&stolen), N);
    weir__deque_fini(&rq);
}

TEST_MAIN()
