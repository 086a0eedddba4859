/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_timer_wheel.c - unit tests of the loop's hierarchical timer wheel
 * (src/rt/timer_wheel.c) and of the binary-heap baseline it is benchmarked
 * against (src/rt/timer_heap.c).
 *
 * The wheel tests drive the wheel with explicit times (no clock) and check
 * its contract from every side: no timer fires before its deadline, none is
 * left armed once expire() has passed its deadline, each fires exactly once,
 * order is non-decreasing by deadline within a call with ties in insertion
 * order, fire() may add and delete timers, far-future and extreme deadlines
 * cascade correctly in big jumps and small steps, and next() is never later
 * than the earliest deadline yet never makes an event loop spin.
 */
#include "test.h"

#include <stddef.h>
#include <stdint.h>

#include "rt/timer_heap.h"
#include "rt/timer_wheel.h"

#define MS  INT64_C(1000000)
#define SEC (1000 * MS)
#define DAY (86400 * SEC)

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

/* splitmix64: deterministic, so a failure reproduces. */
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static int64_t rnd_range(int64_t lo, int64_t hi) /* inclusive */
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

static void shuffle(size_t *a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(rnd() % i), t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* ---- wheel fixtures ------------------------------------------------------ */

typedef struct tmr {
    weir_timer_node node; /* first: a node pointer is a tmr pointer */
    size_t id;            /* insertion order */
    int fires;
    int deleted;
} tmr;

typedef struct run {
    weir__wheel *w;
    tmr *t;
    size_t n;
    int64_t now;           /* passed to the current expire() */
    int64_t last_deadline; /* of the previous fire in this call */
    size_t last_id;
    size_t *order; /* ids in firing order, when not NULL */
    size_t nfired;
    size_t next_id;
    void (*hook)(struct run *r, tmr *t); /* called from fire() */
} run;

static void on_fire(weir_timer_node *n, void *ctx)
{
    run *r = ctx;
    tmr *t = (tmr *)n;
    CHECK(!weir__wheel_armed(n));
    CHECK_EQ(n->slot, 0);
    CHECK_LE(n->deadline, r->now);           /* never early */
    CHECK_GE(n->deadline, r->last_deadline); /* non-decreasing within a call */
    if (n->deadline == r->last_deadline && r->nfired > 0)
        CHECK_GT(t->id, r->last_id); /* ties in insertion order */
    CHECK_EQ(t->deleted, 0);
    t->fires++;
    r->last_deadline = n->deadline;
    r->last_id = t->id;
    if (r->order) r->order[r->nfired] = t->id;
    r->nfired++;
    if (r->hook) r->hook(r, t);
}

static size_t expire(run *r, int64_t now)
{
    r->now = now;
    r->last_deadline = INT64_MIN;
    size_t before = r->nfired;
    size_t k = weir__wheel_expire(r->w, now, on_fire, r);
    CHECK_EQ(k, r->nfired - before);
    return k;
}

static void arm(run *r, tmr *t, int64_t deadline)
{
    t->node.deadline = deadline;
    t->id = r->next_id++;
    weir__wheel_add(r->w, &t->node);
    CHECK(weir__wheel_armed(&t->node));
}

/* Every armed timer is due after now, and next() is no later than the
 * earliest of them. O(n): for the smaller tests. */
static void check_state(run *r, int64_t now)
{
    int64_t min = INT64_MAX;
    size_t armed = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (!weir__wheel_armed(&r->t[i].node)) continue;
        armed++;
        CHECK_GT(r->t[i].node.deadline, now); /* none left behind */
        if (r->t[i].node.deadline < min) min = r->t[i].node.deadline;
    }
    CHECK_EQ(armed, r->w->count);
    int64_t next = weir__wheel_next(r->w);
    CHECK_LE(next, min < r->w->origin ? r->w->origin : min); /* origin: see timer_wheel.c */
    if (armed)
        CHECK_GT(next, now); /* no spin: a loop would sleep until next */
    else
        CHECK_EQ(next, INT64_MAX);
}

static weir__wheel *wheel_new(int64_t origin)
{
    weir__wheel *w = malloc(sizeof(*w));
    CHECK(w != NULL);
    weir__wheel_init(w, origin);
    return w;
}

/* Sort ids by (deadline, id): the reference firing order. */
static const tmr *sort_base;
static int cmp_ref(const void *a, const void *b)
{
    const tmr *x = &sort_base[*(const size_t *)a], *y = &sort_base[*(const size_t *)b];
    if (x->node.deadline != y->node.deadline) return x->node.deadline < y->node.deadline ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* ---- wheel tests --------------------------------------------------------- */

TEST(wheel_basics)
{
    weir__wheel *w = wheel_new(1000 * SEC);
    tmr t[3];
    memset(t, 0, sizeof(t));
    run r = {.w = w, .t = t, .n = 3};
    CHECK_EQ(weir__wheel_next(w), INT64_MAX);
    CHECK_EQ(w->count, 0);
    CHECK(!weir__wheel_armed(&t[0].node));

    arm(&r, &t[0], 1000 * SEC + 5 * MS);
    arm(&r, &t[1], 1000 * SEC + 5 * MS + 1);
    arm(&r, &t[2], 1000 * SEC + 3 * SEC);
    CHECK_EQ(w->count, 3);
    CHECK_LE(weir__wheel_next(w), 1000 * SEC + 5 * MS);
    CHECK_GT(weir__wheel_next(w), 1000 * SEC + 4 * MS); /* precise to its slot */

    weir__wheel_del(w, &t[0].node);
    CHECK(!weir__wheel_armed(&t[0].node));
    CHECK_EQ(w->count, 2);
    CHECK_LE(weir__wheel_next(w), 1000 * SEC + 5 * MS + 1);

    CHECK_EQ(expire(&r, 1000 * SEC + 5 * MS), 0); /* t[1] is 1 ns later */
    check_state(&r, 1000 * SEC + 5 * MS);
    CHECK_EQ(expire(&r, 1000 * SEC + 5 * MS + 1), 1);
    CHECK_EQ(t[1].fires, 1);
    check_state(&r, 1000 * SEC + 5 * MS + 1);
    CHECK_EQ(expire(&r, 1000 * SEC + 3 * SEC - 1), 0);
    CHECK_EQ(expire(&r, 1000 * SEC + 3 * SEC), 1);
    CHECK_EQ(w->count, 0);
    CHECK_EQ(weir__wheel_next(w), INT64_MAX);

    /* A node can be re-armed after it fired or was deleted. */
    arm(&r, &t[0], 1000 * SEC + 4 * SEC);
    weir__wheel_del(w, &t[0].node);
    arm(&r, &t[0], 1000 * SEC + 4 * SEC);
    CHECK_EQ(expire(&r, 1000 * SEC + 5 * SEC), 1);
    CHECK_EQ(t[0].fires, 1);

    /* A deadline in the past fires at the next expire, even at the same now. */
    arm(&r, &t[2], 1000 * SEC + 4 * SEC);
    CHECK_LE(weir__wheel_next(w), 1000 * SEC + 4 * SEC);
    CHECK_EQ(expire(&r, 1000 * SEC + 5 * SEC), 1);
    arm(&r, &t[2], 0); /* before the origin: next() says origin, i.e. now */
    CHECK_EQ(weir__wheel_next(w), 1000 * SEC);
    CHECK_EQ(expire(&r, 1000 * SEC + 5 * SEC), 1);
    CHECK_EQ(t[2].fires, 3);
    free(w);
}

/* Many random deadlines (ns-random and ms-aligned for ties, some past, some
 * hours away), time advancing by random steps: the firing sequence equals the
 * stably sorted reference and nothing is late or early. */
TEST(wheel_random_order)
{
    enum { N = 20000 };
    int64_t origin = 77 * SEC + 123;
    weir__wheel *w = wheel_new(origin);
    tmr *t = calloc(N, sizeof(*t));
    size_t *order = calloc(N, sizeof(*order)), *ref = calloc(N, sizeof(*ref));
    run r = {.w = w, .t = t, .n = N, .order = order};
    for (size_t i = 0; i < N; i++) {
        int64_t d;
        switch (rnd() % 4) {
        case 0:
            d = origin + rnd_range(-5, 2000) * MS;
            break; /* ties */
        case 1:
            d = origin + rnd_range(-SEC, 3 * SEC);
            break;
        case 2:
            d = origin + rnd_range(0, 5 * 3600) * SEC + rnd_range(0, SEC);
            break;
        default:
            d = origin + rnd_range(0, 70 * SEC);
            break;
        }
        arm(&r, &t[i], d);
        ref[i] = i;
    }
    sort_base = t;
    qsort(ref, N, sizeof(*ref), cmp_ref);

    int64_t now = origin - 2 * SEC;
    size_t steps = 0;
    while (w->count) {
        uint64_t k = rnd() % 16;
        if (k < 10)
            now += rnd_range(0, 3 * MS);
        else if (k < 15)
            now += rnd_range(0, 200 * MS);
        else
            now += rnd_range(0, 900 * SEC);
        expire(&r, now);
        check_state(&r, now);
        steps++;
    }
    CHECK_EQ(r.nfired, N);
    for (size_t i = 0; i < N; i++) {
        CHECK_EQ(order[i], ref[i]);
        CHECK_EQ(t[i].fires, 1);
    }
    printf("  %zu expire calls\n", steps);
    free(ref);
    free(order);
    free(t);
    free(w);
}

/* Timers added while time runs, with deadlines around the current time
 * (past, this tick, near, far): each fires once, never early, never late. */
TEST(wheel_interleaved_adds)
{
    enum { N = 6000 };
    int64_t origin = -3 * SEC; /* negative times are fine */
    weir__wheel *w = wheel_new(origin);
    tmr *t = calloc(N, sizeof(*t));
    run r = {.w = w, .t = t, .n = N};
    size_t added = 0;
    int64_t now = origin;
    while (added < N || w->count) {
        for (int k = (int)(rnd() % 8); k > 0 && added < N; k--) {
            int64_t d;
            switch (rnd() % 5) {
            case 0:
                d = now - rnd_range(0, 5 * MS);
                break;
            case 1:
                d = now + rnd_range(0, MS);
                break;
            case 2:
                d = now + rnd_range(0, 100 * MS);
                break;
            case 3:
                d = now + rnd_range(0, 600 * SEC);
                break;
            default:
                d = now + rnd_range(0, 3 * DAY);
                break;
            }
            arm(&r, &t[added++], d);
        }
        /* Sometimes cancel a random armed timer. */
        if (added && rnd() % 3 == 0) {
            tmr *x = &t[rnd() % added];
            if (weir__wheel_armed(&x->node)) {
                weir__wheel_del(w, &x->node);
                x->deleted = 1;
            }
        }
        uint64_t k = rnd() % 32;
        now += k < 28 ? rnd_range(0, 2 * MS) : k < 31 ? rnd_range(0, 10 * SEC) : DAY / 3;
        expire(&r, now);
        check_state(&r, now);
    }
    for (size_t i = 0; i < N; i++)
        CHECK_EQ(t[i].fires + t[i].deleted, 1);
    free(t);
    free(w);
}

/* Equal deadlines, some of them far enough to cascade through several
 * levels, fire in insertion order. */
TEST(wheel_ties_insertion_order)
{
    enum { N = 3000 };
    weir__wheel *w = wheel_new(0);
    tmr *t = calloc(N, sizeof(*t));
    run r = {.w = w, .t = t, .n = N};
    const int64_t ds[] = {7 * MS, 7 * MS + 1, 64 * MS, 5 * SEC, 3 * DAY, 900 * DAY};
    int64_t now = 0;
    for (size_t i = 0; i < N; i++) {
        if (i == N / 2) { /* half of them added later, relative to another now */
            now = 3 * MS;
            expire(&r, now);
        }
        arm(&r, &t[i], ds[rnd() % 6]);
    }
    while (w->count) {
        now = weir__wheel_next(w) > now ? weir__wheel_next(w) : now;
        expire(&r, now); /* on_fire checks the tie order */
    }
    CHECK_EQ(r.nfired, N);
    free(t);
    free(w);
}

static tmr *victims[3];

static void del_hook(run *r, tmr *t)
{
    if (t->id != 0) return;
    for (int i = 0; i < 3; i++) {
        weir__wheel_del(r->w, &victims[i]->node);
        victims[i]->deleted = 1;
    }
}

TEST(wheel_delete_from_fire)
{
    weir__wheel *w = wheel_new(0);
    tmr t[6];
    memset(t, 0, sizeof(t));
    run r = {.w = w, .t = t, .n = 6, .hook = del_hook};
    arm(&r, &t[0], 10 * MS);     /* deletes 1, 3, 4 */
    arm(&r, &t[1], 10 * MS);     /* same slot, already detached for firing */
    arm(&r, &t[2], 10 * MS + 1); /* the next tick */
    arm(&r, &t[3], 12 * MS);     /* a later level-0 slot */
    arm(&r, &t[4], 5 * SEC);     /* a higher level */
    arm(&r, &t[5], 10 * MS - 1); /* same tick as 0, fires before it */
    victims[0] = &t[1];
    victims[1] = &t[3];
    victims[2] = &t[4];
    CHECK_EQ(expire(&r, 20 * MS), 3); /* 5, 0, 2 */
    CHECK_EQ(t[5].fires + t[0].fires + t[2].fires, 3);
    CHECK_EQ(w->count, 0);
    check_state(&r, 20 * MS);
    CHECK_EQ(expire(&r, 10 * SEC), 0);
    free(w);
}

static tmr *spare, *periodic;
static size_t nspare;

static void add_hook(run *r, tmr *t)
{
    if (t->id == 0) {
        /* A later tick, due by now: fires in this call, after t. */
        arm(r, &spare[nspare++], 15 * MS);
        /* Already past: kept for the next call (order within a call). */
        arm(r, &spare[nspare++], 1 * MS);
        /* The tick being fired (9.5 ms rounds up to tick 10): next call too. */
        arm(r, &spare[nspare++], 9 * MS + MS / 2);
        /* Not yet due. */
        arm(r, &spare[nspare++], 30 * MS);
    } else if (t == periodic && t->fires < 100) {
        /* A periodic timer re-arms itself; it catches up within one call. */
        t->node.deadline += MS;
        weir__wheel_add(r->w, &t->node);
    }
}

TEST(wheel_add_from_fire)
{
    weir__wheel *w = wheel_new(0);
    tmr t[2], sp[8];
    memset(t, 0, sizeof(t));
    memset(sp, 0, sizeof(sp));
    spare = sp;
    periodic = &t[1];
    nspare = 0;
    run r = {.w = w, .t = t, .n = 2, .hook = add_hook};
    arm(&r, &t[0], 10 * MS);
    CHECK_EQ(expire(&r, 20 * MS), 2); /* t0, then the 15 ms one */
    CHECK_EQ(sp[0].fires, 1);
    CHECK_EQ(sp[1].fires + sp[2].fires + sp[3].fires, 0);
    /* The deferred ones are due: next() says so and the next call fires
     * them, at the same now, in deadline order. */
    CHECK_LE(weir__wheel_next(w), 1 * MS);
    r.order = (size_t[8]){0};
    r.nfired = 0;
    CHECK_EQ(expire(&r, 20 * MS), 2);
    CHECK_EQ(r.order[0], sp[1].id);
    CHECK_EQ(r.order[1], sp[2].id);
    CHECK_GT(weir__wheel_next(w), 20 * MS);
    CHECK_LE(weir__wheel_next(w), 30 * MS);
    CHECK_EQ(expire(&r, 30 * MS), 1);
    CHECK_EQ(sp[3].fires, 1);
    CHECK_EQ(w->count, 0);

    r.order = NULL;
    arm(&r, &t[1], 1 * MS + 30 * MS);
    CHECK_EQ(expire(&r, 30 * MS + 100 * MS), 100); /* 31 ms .. 130 ms */
    CHECK_EQ(t[1].fires, 100);
    CHECK(!weir__wheel_armed(&t[1].node));
    free(w);
}

/* Days, years, centuries and INT64_MAX, from a negative and a positive
 * origin, reached in one jump per deadline and by an event loop's small
 * steps (next() + expire()). */
static void far_future(int64_t origin, int jumps)
{
    const int64_t offs[] = {DAY,           30 * DAY,   365 * DAY,  800 * DAY,
                            3 * 365 * DAY, 3650 * DAY, 36500 * DAY};
    enum { NO = sizeof(offs) / sizeof(offs[0]), N = NO + 3 };
    weir__wheel *w = wheel_new(origin);
    tmr t[N];
    memset(t, 0, sizeof(t));
    size_t order[N];
    run r = {.w = w, .t = t, .n = N, .order = order};
    for (int i = 0; i < NO; i++)
        arm(&r, &t[i], origin + offs[i] + 7);
    arm(&r, &t[NO], INT64_MAX - 1);
    arm(&r, &t[NO + 1], INT64_MAX);
    arm(&r, &t[NO + 2], INT64_MAX - MS / 2);
    int64_t now = origin;
    size_t iters = 0;
    if (jumps) {
        for (int i = 0; i < NO; i++) {
            int64_t d = t[i].node.deadline;
            CHECK_EQ(expire(&r, d - 1), 0);
            check_state(&r, d - 1);
            CHECK_EQ(expire(&r, d), 1);
            check_state(&r, d);
        }
        CHECK_EQ(expire(&r, INT64_MAX - MS / 2 - 1), 0);
        CHECK_EQ(expire(&r, INT64_MAX - 1), 2);
        CHECK_EQ(expire(&r, INT64_MAX), 1);
    } else {
        while (w->count) {
            int64_t next = weir__wheel_next(w);
            now = next > now ? next : now;
            expire(&r, now);
            iters++;
            CHECK_LT(iters, 10000); /* cascades only: ~60 per 2.2 years */
        }
        printf("  origin %" PRId64 ": %zu loop iterations\n", origin, iters);
    }
    CHECK_EQ(w->count, 0);
    for (int i = 0; i < N; i++)
        CHECK_EQ(t[i].fires, 1);
    for (int i = 0; i < NO; i++)
        CHECK_EQ(order[i], (size_t)i);
    CHECK_EQ(order[NO], t[NO + 2].id);
    CHECK_EQ(order[NO + 1], t[NO].id);
    CHECK_EQ(order[NO + 2], t[NO + 1].id);
    free(w);
}

TEST(wheel_far_future_jumps)
{
    far_future(0, 1);
    far_future(-4 * SEC * 1000 * 1000 * 1000, 1); /* INT64_MAX: ~420 years away */
    far_future(INT64_MIN + 5, 1);                 /* ... and ~580 years */
}

TEST(wheel_far_future_steps)
{
    far_future(0, 0);
    far_future(-4 * SEC * 1000 * 1000 * 1000, 0); /* INT64_MAX: ~420 years away */
    far_future(INT64_MIN + 5, 0);
}

/* Extreme values: INT64_MIN deadlines, origin near INT64_MAX. */
TEST(wheel_extremes)
{
    weir__wheel *w = wheel_new(INT64_MAX - 10 * MS);
    tmr t[4];
    memset(t, 0, sizeof(t));
    run r = {.w = w, .t = t, .n = 4};
    arm(&r, &t[0], INT64_MIN);
    arm(&r, &t[1], INT64_MAX);
    arm(&r, &t[2], INT64_MAX - 3 * MS);
    arm(&r, &t[3], INT64_MAX - 10 * MS);
    CHECK_EQ(weir__wheel_next(w), INT64_MAX - 10 * MS); /* the origin, no overflow */
    CHECK_EQ(expire(&r, INT64_MIN), 1);
    CHECK_EQ(expire(&r, INT64_MAX - 10 * MS), 1);
    CHECK_EQ(expire(&r, INT64_MAX - 3 * MS), 1);
    check_state(&r, INT64_MAX - 3 * MS);
    CHECK_EQ(expire(&r, INT64_MAX), 1);
    CHECK_EQ(weir__wheel_next(w), INT64_MAX);
    free(w);

    w = wheel_new(INT64_MIN);
    r.w = w;
    arm(&r, &t[0], INT64_MIN);
    arm(&r, &t[1], INT64_MAX);
    arm(&r, &t[2], 0);
    CHECK_EQ(expire(&r, INT64_MIN), 1);
    CHECK_EQ(expire(&r, -1), 0);
    CHECK_EQ(expire(&r, 0), 1);
    CHECK_EQ(expire(&r, INT64_MAX - 1), 0);
    CHECK_EQ(expire(&r, INT64_MAX), 1);
    free(w);
}

/* An event loop: t = next(); now = max(now, t); expire(now). next() is
 * never later than the earliest deadline and the loop does not spin: its
 * iteration count stays bounded, deletions (stale bounds) included. */
TEST(wheel_next_no_busy_loop)
{
    enum { N = 10000 };
    weir__wheel *w = wheel_new(5 * SEC);
    tmr *t = calloc(N, sizeof(*t));
    size_t *ref = calloc(N, sizeof(*ref));
    run r = {.w = w, .t = t, .n = N};
    for (size_t i = 0; i < N; i++) {
        int64_t d = 5 * SEC + (rnd() % 8 ? rnd_range(0, 10 * SEC) : rnd_range(0, 40 * DAY));
        arm(&r, &t[i], d);
        ref[i] = i;
    }
    sort_base = t;
    qsort(ref, N, sizeof(*ref), cmp_ref);
    int64_t now = 5 * SEC;
    size_t iters = 0, pos = 0, idle = 0;
    while (w->count) {
        while (!weir__wheel_armed(&t[ref[pos]].node))
            pos++;
        int64_t next = weir__wheel_next(w);
        CHECK_LE(next, t[ref[pos]].node.deadline);
        now = next > now ? next : now;
        size_t k = expire(&r, now);
        idle += k == 0;
        iters++;
        if (iters % 7 == 0) { /* delete the earliest: leaves a stale bound */
            while (pos < N && !weir__wheel_armed(&t[ref[pos]].node))
                pos++;
            if (pos < N) {
                weir__wheel_del(w, &t[ref[pos]].node);
                t[ref[pos]].deleted = 1;
            }
        }
    }
    printf("  %zu iterations, %zu without a fire, %zu fired\n", iters, idle, r.nfired);
    CHECK_LE(iters, 2 * N);
    free(ref);
    free(t);
    free(w);
}

/* A million timers in one calloc'd array: add, cancel half in random order,
 * expire the rest in 1 ms steps. */
TEST(wheel_million)
{
    enum { N = 1000000 };
    weir__wheel *w = wheel_new(0);
    tmr *t = calloc(N, sizeof(*t));
    size_t *perm = calloc(N, sizeof(*perm));
    CHECK(t && perm);
    run r = {.w = w, .t = t, .n = N};
    for (size_t i = 0; i < N; i++) {
        arm(&r, &t[i], rnd_range(0, 1000 * MS));
        perm[i] = i;
    }
    CHECK_EQ(w->count, N);
    shuffle(perm, N);
    for (size_t i = 0; i < N / 2; i++) {
        weir__wheel_del(w, &t[perm[i]].node);
        t[perm[i]].deleted = 1;
    }
    CHECK_EQ(w->count, N - N / 2);
    for (int64_t now = 0; now <= 1000 * MS; now += MS)
        expire(&r, now);
    CHECK_EQ(r.nfired, N - N / 2);
    CHECK_EQ(w->count, 0);
    CHECK_EQ(weir__wheel_next(w), INT64_MAX);
    for (size_t i = 0; i < N; i++)
        CHECK_EQ(t[i].fires + t[i].deleted, 1);
    free(perm);
    free(t);
    free(w);
}

/* ---- heap baseline ------------------------------------------------------- */

typedef struct htmr {
    weir__theap_node node;
    size_t id;
    int fires;
} htmr;

typedef struct hrun {
    weir__theap *h;
    int64_t now, last;
    size_t nfired;
    size_t *order;
    htmr *victim;
} hrun;

static void on_hfire(weir__theap_node *n, void *ctx)
{
    hrun *r = ctx;
    htmr *t = (htmr *)n;
    CHECK(!weir__theap_armed(n));
    CHECK_LE(n->deadline, r->now);
    CHECK_GE(n->deadline, r->last);
    r->last = n->deadline;
    t->fires++;
    if (r->order) r->order[r->nfired] = t->id;
    r->nfired++;
    if (r->victim && weir__theap_armed(&r->victim->node)) {
        weir__theap_del(r->h, &r->victim->node);
        r->victim = NULL;
    }
}

static size_t hexpire(hrun *r, int64_t now)
{
    r->now = now;
    r->last = INT64_MIN;
    return weir__theap_expire(r->h, now, on_hfire, r);
}

static const htmr *hsort_base;
static int cmp_href(const void *a, const void *b)
{
    const htmr *x = &hsort_base[*(const size_t *)a], *y = &hsort_base[*(const size_t *)b];
    if (x->node.deadline != y->node.deadline) return x->node.deadline < y->node.deadline ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

TEST(heap_basics)
{
    weir__theap h;
    weir__theap_init(&h);
    htmr t[3];
    memset(t, 0, sizeof(t));
    hrun r = {.h = &h};
    CHECK_EQ(weir__theap_next(&h), INT64_MAX);
    t[0].node.deadline = 5 * MS;
    t[1].node.deadline = 2 * MS;
    t[2].node.deadline = 9 * MS;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(weir__theap_add(&h, &t[i].node), 0);
    CHECK_EQ(weir__theap_next(&h), 2 * MS);
    weir__theap_del(&h, &t[1].node);
    CHECK(!weir__theap_armed(&t[1].node));
    CHECK_EQ(weir__theap_next(&h), 5 * MS);
    CHECK_EQ(hexpire(&r, 5 * MS - 1), 0);
    CHECK_EQ(hexpire(&r, 5 * MS), 1);
    r.victim = &t[2]; /* deleting from inside fire */
    t[1].node.deadline = 6 * MS;
    CHECK_EQ(weir__theap_add(&h, &t[1].node), 0);
    CHECK_EQ(hexpire(&r, 100 * MS), 1);
    CHECK_EQ(t[2].fires, 0);
    CHECK_EQ(h.len, 0);
    weir__theap_free(&h);
}

TEST(heap_random_order)
{
    enum { N = 200000 };
    weir__theap h;
    weir__theap_init(&h);
    htmr *t = calloc(N, sizeof(*t));
    size_t *order = calloc(N, sizeof(*order)), *ref = calloc(N, sizeof(*ref));
    size_t *perm = calloc(N, sizeof(*perm));
    hrun r = {.h = &h, .order = order};
    for (size_t i = 0; i < N; i++) {
        t[i].id = i;
        t[i].node.deadline = rnd() % 2 ? rnd_range(0, 1000) * MS : rnd_range(0, 1000 * MS);
        CHECK_EQ(weir__theap_add(&h, &t[i].node), 0);
        perm[i] = i;
    }
    /* Cancel a random quarter, then check what fires against the reference. */
    shuffle(perm, N);
    for (size_t i = 0; i < N / 4; i++)
        weir__theap_del(&h, &t[perm[i]].node);
    size_t m = 0;
    for (size_t i = 0; i < N; i++)
        if (weir__theap_armed(&t[i].node)) ref[m++] = i;
    hsort_base = t;
    qsort(ref, m, sizeof(*ref), cmp_href);
    for (int64_t now = 0; h.len; now += rnd_range(0, 3 * MS))
        hexpire(&r, now);
    CHECK_EQ(r.nfired, m);
    for (size_t i = 0; i < m; i++)
        CHECK_EQ(order[i], ref[i]);
    free(perm);
    free(ref);
    free(order);
    free(t);
    weir__theap_free(&h);
}

TEST_MAIN()
