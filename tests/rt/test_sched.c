/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sched.c - the multi-threaded runtime: spawn/join across threads,
 * stealing, parking without lost wake-ups (wakes and spawns from workers
 * and from foreign threads), wake storms, pinning, migration-safe access to
 * the runtime's thread-locals under -O2, ops bound to the thread that
 * started them, channel MPMC accounting, and shutdown.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_rt.h"
#include "weir/io.h"
#include "weir/sync.h"

enum { THREADS = 2 };

static weir_rt *rt_new(int threads)
{
    weir_rt_opts o = {.threads = threads};
    weir_rt *rt = weir_rt_new(&o);
    CHECK(rt != NULL);
    CHECK_EQ(weir_rt_threads(rt), threads);
    return rt;
}

/* Run fn(arg) as a fiber in rt and join it from this (foreign) thread. */
static intptr_t rt_run(weir_rt *rt, weir_task_fn fn, void *arg)
{
    weir_spawn_opts o = {.name = "main", .stack_size = 256 * 1024, .rt = rt};
    weir_task *t = weir_task_spawn(fn, arg, &o);
    CHECK(t != NULL);
    intptr_t r = -1;
    CHECK_EQ(weir_task_join(t, &r, weir_time_after_ms(60000)), 0);
    return r;
}

static void burn_us(int us)
{
    int64_t end = weir_time_now() + us * 1000;
    while (weir_time_now() < end)
        ;
}

/* Per-thread statistics, read on each thread by a task pinned there. */
struct stats_req {
    weir_loop_stats st;
};
static intptr_t read_stats(void *p)
{
    struct stats_req *r = p;
    CHECK_EQ(weir_loop_stats_get(weir_loop_current(), &r->st), 0);
    return 0;
}
static void rt_stats(weir_rt *rt, weir_loop_stats *sum)
{
    *sum = (weir_loop_stats){0};
    for (int i = 0; i < weir_rt_threads(rt); i++) {
        struct stats_req r;
        weir_spawn_opts o = {.loop = weir_rt_loop(rt, i), .pin = 1};
        weir_task *t = weir_task_spawn(read_stats, &r, &o);
        CHECK(t != NULL);
        CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
        sum->polls += r.st.polls;
        sum->steals += r.st.steals;
        sum->injected += r.st.injected;
        sum->parks += r.st.parks;
    }
}

/* ---- spawn / join and stealing -------------------------------------------------- */
struct sl_frame {
    weir_co co;
    int n;
    int thread;
};

static int sl_work(void *p, intptr_t *out)
{
    struct sl_frame *f = p;
    burn_us(20);
    f->thread = weir_rt_thread_index();
    *out = f->n * 2;
    return WEIR_READY;
}

static intptr_t fiber_work(void *arg)
{
    burn_us(20);
    return (intptr_t)arg + 1;
}

enum { FANOUT = 4000 };
static struct sl_frame frames[FANOUT];

static intptr_t fanout_main(void *arg)
{
    (void)arg;
    static weir_task *h[FANOUT];
    for (int i = 0; i < FANOUT; i++) {
        frames[i] = (struct sl_frame){.n = i, .thread = -1};
        h[i] = i % 2 ? weir_task_spawn_stackless(sl_work, &frames[i], NULL)
                     : weir_task_spawn(fiber_work, (void *)(intptr_t)i, NULL);
        CHECK(h[i] != NULL);
    }
    int on[THREADS] = {0};
    for (int i = 0; i < FANOUT; i++) {
        intptr_t r;
        CHECK_EQ(weir_task_join(h[i], &r, WEIR_FOREVER), 0);
        if (i % 2) {
            CHECK_EQ(r, 2 * i);
            CHECK_GE(frames[i].thread, 0);
            on[frames[i].thread]++;
        } else {
            CHECK_EQ(r, i + 1);
        }
    }
    /* 80 ms of work spawned on one thread: the other must have stolen some. */
    CHECK_GT(on[0], 0);
    CHECK_GT(on[1], 0);
    return 0;
}

TEST(spawn_join_fanout_is_stolen)
{
    weir_rt *rt = rt_new(THREADS);
    CHECK_EQ(rt_run(rt, fanout_main, NULL), 0);
    weir_loop_stats st;
    rt_stats(rt, &st);
    /* More spawns than a deque holds: some went through the injection queue. */
    CHECK_GT(st.steals + st.injected, 0);
    /* The last stats task is counted out just after its joiner was woken. */
    for (int i = 0; i < 10000 && weir_rt_tasks_alive(rt) != 0; i++)
        usleep(100);
    CHECK_EQ(weir_rt_tasks_alive(rt), 0);
    weir_rt_free(rt);
}

/* ---- lost wake-ups ------------------------------------------------------------------ */
/* A task on thread 0 spawns a child and then spins (without yielding) until
 * the child has run. Only the other, parked, thread can run the child: if
 * the spawn's notify were lost, the parent would spin forever. */
static _Atomic int child_ran;

static intptr_t child_sets(void *arg)
{
    (void)arg;
    atomic_store(&child_ran, 1);
    return 0;
}

static intptr_t spinning_parent(void *arg)
{
    (void)arg;
    atomic_store(&child_ran, 0);
    weir_task *c = weir_task_spawn(child_sets, NULL, NULL);
    CHECK(c != NULL);
    int64_t give_up = weir_time_now() + 10 * WEIR_SEC;
    while (!atomic_load(&child_ran))
        CHECK_LT(weir_time_now(), give_up); /* the idle thread was never woken */
    CHECK_EQ(weir_task_join(c, NULL, WEIR_FOREVER), 0);
    return 0;
}

TEST(parked_thread_is_woken_for_stealable_work)
{
    weir_rt *rt = rt_new(THREADS);
    for (int i = 0; i < 300; i++) {
        /* Let both threads go idle, then spawn onto thread 0. */
        if (i % 3 == 0)
            usleep(200 + (i % 7) * 100);
        weir_spawn_opts o = {.loop = weir_rt_loop(rt, 0), .pin = 1};
        weir_task *t = weir_task_spawn(spinning_parent, NULL, &o);
        CHECK(t != NULL);
        CHECK_EQ(weir_task_join(t, NULL, weir_time_after_ms(20000)), 0);
    }
    weir_loop_stats st;
    rt_stats(rt, &st);
    CHECK_GE(st.steals, 300); /* every child was stolen */
    weir_rt_free(rt);
}

/* Foreign threads spawning into idle runtimes: every spawn must run. */
static intptr_t bump(void *arg)
{
    atomic_fetch_add((_Atomic long *)arg, 1);
    return 0;
}

struct spawner {
    weir_rt *rt;
    _Atomic long *count;
    int n;
};

static void *foreign_spawner(void *p)
{
    struct spawner *s = p;
    weir_spawn_opts o = {.rt = s->rt};
    for (int i = 0; i < s->n; i++) {
        weir_task *t = weir_task_spawn(bump, s->count, &o);
        CHECK(t != NULL);
        if (i % 16 == 0)
            usleep(50); /* let the threads park in between */
        CHECK_EQ(weir_task_join(t, NULL, weir_time_after_ms(20000)), 0);
    }
    return NULL;
}

TEST(foreign_spawns_wake_parked_threads)
{
    weir_rt *rt = rt_new(THREADS);
    _Atomic long count = 0;
    pthread_t th[3];
    struct spawner s = {rt, &count, 2000};
    for (int i = 0; i < 3; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, foreign_spawner, &s), 0);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(atomic_load(&count), 3 * 2000);
    weir_rt_free(rt);
}

/* ---- wake storm ------------------------------------------------------------------------ */
/* A ring of fibers passing tokens through channels, so every hop is a wake
 * of a task that may sit on the other thread; plus a foreign thread
 * cancelling nothing but adding wakes through a notify. Every token must
 * make every hop. */
enum { RING = 32, LAPS = 400, TOKENS = 8 };
static weir_chan *ring[RING];
static _Atomic long hops;

static intptr_t ring_member(void *arg)
{
    int i = (int)(intptr_t)arg;
    int64_t v;
    for (;;) {
        int r = weir_chan_recv(ring[i], &v, WEIR_FOREVER);
        if (r == -EPIPE)
            return 0;
        CHECK_EQ(r, 0);
        atomic_fetch_add(&hops, 1);
        if (v == 0)
            continue; /* this token is finished */
        v--;
        CHECK_EQ(weir_chan_send(ring[(i + 1) % RING], &v, WEIR_FOREVER), 0);
    }
}

static intptr_t storm_main(void *arg)
{
    (void)arg;
    weir_task *h[RING];
    for (int i = 0; i < RING; i++) {
        ring[i] = weir_chan_new(sizeof(int64_t), TOKENS);
        CHECK(ring[i] != NULL);
    }
    for (int i = 0; i < RING; i++)
        h[i] = test_spawn(ring_member, (void *)(intptr_t)i);
    for (int k = 0; k < TOKENS; k++) {
        int64_t v = (int64_t)RING * LAPS - 1;
        CHECK_EQ(weir_chan_send(ring[(k * 5) % RING], &v, WEIR_FOREVER), 0);
    }
    /* Each token makes RING * LAPS hops. */
    while (atomic_load(&hops) < (long)TOKENS * RING * LAPS)
        CHECK_EQ(weir_time_sleep(WEIR_MSEC), 0);
    for (int i = 0; i < RING; i++)
        weir_chan_close(ring[i]);
    for (int i = 0; i < RING; i++)
        CHECK_EQ(weir_task_join(h[i], NULL, WEIR_FOREVER), 0);
    for (int i = 0; i < RING; i++)
        weir_chan_unref(ring[i]);
    CHECK_EQ(atomic_load(&hops), (long)TOKENS * RING * LAPS);
    return 0;
}

TEST(wake_storm_ring)
{
    weir_rt *rt = rt_new(THREADS);
    atomic_store(&hops, 0);
    CHECK_EQ(rt_run(rt, storm_main, NULL), 0);
    weir_rt_free(rt);
}

/* ---- pinning and migration ------------------------------------------------------------- */
static pthread_t worker_thread[THREADS];

static intptr_t note_thread(void *arg)
{
    (void)arg;
    int i = weir_rt_thread_index();
    CHECK_GE(i, 0);
    worker_thread[i] = pthread_self();
    return 0;
}

static void note_threads(weir_rt *rt)
{
    for (int i = 0; i < THREADS; i++) {
        weir_spawn_opts o = {.loop = weir_rt_loop(rt, i), .pin = 1};
        weir_task *t = weir_task_spawn(note_thread, NULL, &o);
        CHECK(t != NULL);
        CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    }
}

/* The runtime's view of "where am I" must match the OS thread after every
 * suspension. Kept out of line and compiled at -O2 like the rest of the
 * suite: a compiler that cached a thread-local's address across the
 * context switch inside weir_notify_wait would read the old thread's
 * values here. */
static weir_rt *mig_rt;

__attribute__((noinline)) static int check_where(void)
{
    int i = weir_rt_thread_index();
    CHECK_GE(i, 0);
    CHECK(weir_loop_current() == weir_rt_loop(mig_rt, i));
    CHECK(weir_rt_current() == mig_rt);
    CHECK(pthread_equal(pthread_self(), worker_thread[i]));
    return i;
}

enum { BOUNCES = 3000 };
struct bouncer {
    weir_notify *go;
    int pinned_to; /* -1: free to move */
    long moves;
    _Atomic int done;
};

static intptr_t bouncer_fn(void *p)
{
    struct bouncer *b = p;
    int where = check_where();
    /* Unpinned: go on until a migration was seen (a loaded machine may
     * keep both on one thread for a while), within reason. */
    int64_t give_up = weir_time_now() + 20 * WEIR_SEC;
    for (int k = 0; k < BOUNCES || (b->pinned_to < 0 && b->moves == 0 && weir_time_now() < give_up);
         k++) {
        CHECK_EQ(weir_notify_wait(b->go, WEIR_FOREVER), 0);
        int now = check_where();
        if (b->pinned_to >= 0)
            CHECK_EQ(now, b->pinned_to);
        if (now != where)
            b->moves++;
        where = now;
        if (k % 64 == 0)
            burn_us(30); /* long enough that the waker's thread goes idle and steals */
    }
    atomic_store(&b->done, 1);
    return 0;
}

/* Wakes the bouncers from thread `self` until they are done. */
struct waker_arg {
    struct bouncer *b;
    int nb;
};

static intptr_t waker_fn(void *p)
{
    struct waker_arg *w = p;
    for (;;) {
        int live = 0;
        for (int i = 0; i < w->nb; i++) {
            if (atomic_load(&w->b[i].done))
                continue;
            live++;
            weir_notify_one(w->b[i].go);
        }
        if (!live)
            return 0;
        weir_task_yield();
    }
}

TEST(pinned_never_moves_unpinned_migrates_safely)
{
    weir_rt *rt = rt_new(THREADS);
    mig_rt = rt;
    note_threads(rt);
    struct bouncer b[4];
    weir_task *h[4], *wk[THREADS];
    for (int i = 0; i < 4; i++) {
        b[i] = (struct bouncer){.go = weir_notify_new(), .pinned_to = i < 2 ? i : -1};
        CHECK(b[i].go != NULL);
        weir_spawn_opts o = {.name = "bouncer", .rt = rt};
        if (i < 2) {
            o.loop = weir_rt_loop(rt, i);
            o.pin = 1;
        }
        h[i] = weir_task_spawn(bouncer_fn, &b[i], &o);
        CHECK(h[i] != NULL);
    }
    /* One waker pinned to each thread: a woken unpinned bouncer lands in
     * the waker's thread's queue, so it keeps changing threads. */
    struct waker_arg wa = {b, 4};
    for (int i = 0; i < THREADS; i++) {
        weir_spawn_opts o = {.name = "waker", .loop = weir_rt_loop(rt, i), .pin = 1};
        wk[i] = weir_task_spawn(waker_fn, &wa, &o);
        CHECK(wk[i] != NULL);
    }
    for (int i = 0; i < 4; i++)
        CHECK_EQ(weir_task_join(h[i], NULL, weir_time_after_ms(60000)), 0);
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ(weir_task_join(wk[i], NULL, weir_time_after_ms(60000)), 0);
    CHECK_EQ(b[0].moves, 0);
    CHECK_EQ(b[1].moves, 0);
    /* The test saw migrations, so check_where() was exercised across them. */
    CHECK_GT(b[2].moves + b[3].moves, 0);
    for (int i = 0; i < 4; i++)
        weir_notify_free(b[i].go);
    weir_rt_free(rt);
}

/* ---- ops bound to their thread ----------------------------------------------------------- */
/* A fiber waiting in a read (io_uring request on its thread's ring, or an
 * epoll registration) or a sleep with a deadline resumes on the thread that
 * started the op, whoever wakes it; a cancel from the other thread reaches
 * the in-flight request. */
struct anchored {
    int fds[2];
    _Atomic int reading;
    int before, after;
    int cancel_res;
};

static intptr_t anchored_reader(void *p)
{
    struct anchored *a = p;
    char c;
    a->before = weir_rt_thread_index();
    atomic_store(&a->reading, 1);
    int64_t r = weir_io_read(a->fds[0], &c, 1, weir_time_after_ms(20000));
    CHECK_EQ(r, 1);
    a->after = weir_rt_thread_index();
    CHECK_EQ(a->after, a->before);
    /* A sleep with a deadline stays too. */
    int t0 = weir_rt_thread_index();
    CHECK_EQ(weir_time_sleep(2 * WEIR_MSEC), 0);
    CHECK_EQ(weir_rt_thread_index(), t0);
    /* Now a read that is cancelled from elsewhere. */
    atomic_store(&a->reading, 2);
    a->cancel_res = (int)weir_io_read(a->fds[0], &c, 1, WEIR_FOREVER);
    CHECK_EQ(weir_rt_thread_index(), t0);
    return 0;
}

TEST(io_and_timer_ops_resume_on_their_thread)
{
    weir_rt *rt = rt_new(THREADS);
    for (int round = 0; round < 20; round++) {
        struct anchored a = {0};
        CHECK_EQ(pipe(a.fds), 0);
        weir_spawn_opts o = {.rt = rt};
        weir_task *t = weir_task_spawn(anchored_reader, &a, &o);
        CHECK(t != NULL);
        while (atomic_load(&a.reading) != 1)
            usleep(100);
        usleep(500);
        CHECK_EQ(write(a.fds[1], "x", 1), 1);
        while (atomic_load(&a.reading) != 2)
            usleep(100);
        usleep(500);
        CHECK_EQ(weir_task_cancel(t), 0); /* from a foreign thread */
        CHECK_EQ(weir_task_join(t, NULL, weir_time_after_ms(20000)), -ECANCELED);
        CHECK_EQ(a.cancel_res, -ECANCELED);
        close(a.fds[0]);
        close(a.fds[1]);
    }
    weir_rt_free(rt);
}

/* ---- channels: MPMC accounting under cancellation --------------------------------------- */
enum { PRODUCERS = 4, CONSUMERS = 4, ITEMS = 20000 };
static _Atomic unsigned char seen[PRODUCERS * ITEMS];
static _Atomic long received;

struct mpmc {
    weir_chan *ch;
    int id;
};

static intptr_t producer(void *p)
{
    struct mpmc *m = p;
    for (int i = 0; i < ITEMS; i++) {
        int64_t v = (int64_t)m->id * ITEMS + i;
        int r;
        /* Short deadlines: some sends time out and are retried; a timed-out
         * send must not have delivered its item. */
        while ((r = weir_chan_send(m->ch, &v, weir_time_after_ms(1))) == -ETIMEDOUT)
            ;
        CHECK_EQ(r, 0);
    }
    return 0;
}

static intptr_t consumer(void *p)
{
    struct mpmc *m = p;
    for (;;) {
        int64_t v;
        int r = weir_chan_recv(m->ch, &v, weir_time_after_ms(1));
        if (r == -ETIMEDOUT)
            continue; /* a timed-out receive must not have consumed an item */
        if (r == -EPIPE)
            return 0;
        CHECK_EQ(r, 0);
        CHECK_GE(v, 0);
        CHECK_LT(v, PRODUCERS * ITEMS);
        CHECK_EQ(atomic_fetch_add(&seen[v], 1), 0);
        atomic_fetch_add(&received, 1);
    }
}

static intptr_t mpmc_main(void *arg)
{
    (void)arg;
    struct mpmc pm[PRODUCERS], cm[CONSUMERS];
    weir_chan *ch = weir_chan_new(sizeof(int64_t), 16);
    CHECK(ch != NULL);
    weir_task *ph[PRODUCERS], *chh[CONSUMERS];
    for (int i = 0; i < CONSUMERS; i++) {
        cm[i] = (struct mpmc){ch, i};
        chh[i] = test_spawn(consumer, &cm[i]);
    }
    for (int i = 0; i < PRODUCERS; i++) {
        pm[i] = (struct mpmc){ch, i};
        ph[i] = test_spawn(producer, &pm[i]);
    }
    for (int i = 0; i < PRODUCERS; i++)
        CHECK_EQ(weir_task_join(ph[i], NULL, WEIR_FOREVER), 0);
    weir_chan_close(ch);
    for (int i = 0; i < CONSUMERS; i++)
        CHECK_EQ(weir_task_join(chh[i], NULL, WEIR_FOREVER), 0);
    weir_chan_unref(ch);
    CHECK_EQ(atomic_load(&received), PRODUCERS * ITEMS);
    for (int i = 0; i < PRODUCERS * ITEMS; i++)
        CHECK_EQ(atomic_load(&seen[i]), 1);
    return 0;
}

TEST(chan_mpmc_exact_across_threads)
{
    weir_rt *rt = rt_new(THREADS);
    CHECK_EQ(rt_run(rt, mpmc_main, NULL), 0);
    weir_rt_free(rt);
}

/* ---- mutex across threads ------------------------------------------------------------------ */
static weir_mutex *mx;
static long guarded; /* plain: the mutex is what makes this race-free */

static intptr_t locker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5000; i++) {
        CHECK_EQ(weir_mutex_lock(mx, WEIR_FOREVER), 0);
        long v = guarded;
        if (i % 100 == 0)
            weir_task_yield(); /* hold it across a suspension now and then */
        guarded = v + 1;
        weir_mutex_unlock(mx);
    }
    return 0;
}

static intptr_t mutex_main(void *arg)
{
    (void)arg;
    mx = weir_mutex_new();
    CHECK(mx != NULL);
    guarded = 0;
    weir_task *h[4];
    for (int i = 0; i < 4; i++)
        h[i] = test_spawn(locker, NULL);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(weir_task_join(h[i], NULL, WEIR_FOREVER), 0);
    CHECK_EQ(guarded, 4 * 5000);
    weir_mutex_free(mx);
    return 0;
}

TEST(mutex_across_threads)
{
    weir_rt *rt = rt_new(THREADS);
    CHECK_EQ(rt_run(rt, mutex_main, NULL), 0);
    weir_rt_free(rt);
}

/* ---- blocking pool shared by the threads -------------------------------------------------- */
static intptr_t slow_double(void *arg)
{
    usleep(200);
    return (intptr_t)arg * 2;
}

/* Runs until *arg is set (at most 10 s): one static flag per user, so it
 * outlives the job, which may still be running when its user has ended. */
static _Atomic int job_release[8];

static intptr_t held_job(void *arg)
{
    _Atomic int *release = arg;
    for (int i = 0; i < 100000 && !atomic_load(release); i++)
        usleep(100);
    return 1;
}

static intptr_t blocking_user(void *arg)
{
    intptr_t base = (intptr_t)arg;
    for (intptr_t i = 0; i < 20; i++)
        CHECK_EQ(weir_blocking_run(slow_double, (void *)(base + i), WEIR_FOREVER), 2 * (base + i));
    /* A deadline that passes while the job runs: the wait ends, the job's
     * result is dropped. The job runs until released, so the deadline
     * always comes first. */
    _Atomic int *release = &job_release[base / 100];
    CHECK_EQ(weir_blocking_run(held_job, (void *)release, weir_time_after_ms(2)), -ETIMEDOUT);
    atomic_store(release, 1);
    return 0;
}

static intptr_t blocking_main(void *arg)
{
    (void)arg;
    weir_task *h[8];
    for (int i = 0; i < 8; i++)
        h[i] = test_spawn(blocking_user, (void *)(intptr_t)(i * 100));
    for (int i = 0; i < 8; i++)
        CHECK_EQ(weir_task_join(h[i], NULL, WEIR_FOREVER), 0);
    return 0;
}

TEST(blocking_pool_from_every_thread)
{
    weir_rt *rt = rt_new(THREADS);
    CHECK_EQ(rt_run(rt, blocking_main, NULL), 0);
    weir_rt_free(rt);
}

/* ---- scopes across threads ------------------------------------------------------------------ */
/* Children spread over both threads end and wake the joiner from either
 * thread; the joiner's deadline timer must be cancelled on its own
 * thread. Nested scopes: a failure deep down cancels the whole tree. */
static intptr_t scope_leaf(void *arg)
{
    intptr_t kind = (intptr_t)arg;
    burn_us(50);
    if (kind == 1)
        return -EIO; /* the failure */
    if (kind == 2)
        return weir_time_sleep(3600 * WEIR_SEC); /* cancelled by the failure */
    return 0;
}

static intptr_t scope_mid(void *arg)
{
    intptr_t fail = (intptr_t)arg;
    weir_scope *s = weir_scope_new(WEIR_SCOPE_CANCEL_SIBLINGS, weir_time_after_ms(30000));
    CHECK(s != NULL);
    for (int i = 0; i < 8; i++)
        CHECK(weir_scope_spawn(s, scope_leaf, (void *)(intptr_t)(fail && i == 5 ? 1 : i % 2 ? 2 : 0),
                               NULL) != NULL);
    weir_scope_result res;
    int r = weir_scope_join(s, &res);
    weir_scope_free(s);
    return r;
}

static intptr_t scope_main(void *arg)
{
    (void)arg;
    for (int round = 0; round < 30; round++) {
        weir_scope *s = weir_scope_new(WEIR_SCOPE_CANCEL_SIBLINGS, weir_time_after_ms(30000));
        CHECK(s != NULL);
        for (int i = 0; i < 4; i++)
            CHECK(weir_scope_spawn(s, scope_mid, (void *)(intptr_t)(i == 2), NULL) != NULL);
        weir_scope_result res;
        int r = weir_scope_join(s, &res);
        CHECK_EQ(r, -EIO);
        CHECK_EQ(res.first_index, 2);
        CHECK_EQ(res.first_error, -EIO);
        weir_scope_free(s);
    }
    /* A scope whose deadline passes while children sleep on other threads. */
    weir_scope *s = weir_scope_new(WEIR_SCOPE_CANCEL_SIBLINGS, weir_time_after_ms(20));
    for (int i = 0; i < 6; i++)
        CHECK(weir_scope_spawn(s, scope_leaf, (void *)(intptr_t)2, NULL) != NULL);
    weir_scope_result res;
    CHECK_EQ(weir_scope_join(s, &res), -ETIMEDOUT);
    CHECK_EQ(res.cancelled, 6);
    weir_scope_free(s);
    return 0;
}

TEST(scope_trees_across_threads)
{
    weir_rt *rt = rt_new(THREADS);
    CHECK_EQ(rt_run(rt, scope_main, NULL), 0);
    weir_rt_free(rt);
}

/* ---- fairness: yields, the injection queue, idle threads ---------------------------------- */
static _Atomic int spin_stop;
static _Atomic long spin_on[THREADS];

static intptr_t yielder(void *arg)
{
    (void)arg;
    while (!atomic_load(&spin_stop)) {
        burn_us(20);
        atomic_fetch_add(&spin_on[weir_rt_thread_index()], 1);
        weir_task_yield();
    }
    return 0;
}

TEST(yielding_tasks_do_not_starve_injection_or_idle_threads)
{
    for (int pinned = 0; pinned < 2; pinned++) {
        weir_rt *rt = rt_new(THREADS);
        atomic_store(&spin_stop, 0);
        weir_task *y[THREADS];
        for (int i = 0; i < THREADS; i++) {
            weir_spawn_opts o = {.name = "yielder", .rt = rt};
            if (pinned) {
                o.loop = weir_rt_loop(rt, i);
                o.pin = 1;
            }
            y[i] = weir_task_spawn(yielder, NULL, &o);
            CHECK(y[i] != NULL);
        }
        usleep(20000);
        /* Every thread is busy with a task that always has more to do:
         * a spawn from outside must still get its turn promptly. */
        for (int k = 0; k < 20; k++) {
            _Atomic long c = 0;
            weir_spawn_opts o = {.rt = rt};
            weir_task *t = weir_task_spawn(bump, &c, &o);
            CHECK(t != NULL);
            CHECK_EQ(weir_task_join(t, NULL, weir_time_after_ms(2000)), 0);
            CHECK_EQ(atomic_load(&c), 1);
        }
        for (int i = 0; i < THREADS; i++)
            atomic_store(&spin_on[i], 0);
        usleep(200000);
        /* Two yielding tasks, two threads: each thread runs one of them
         * (unpinned, they were spawned together and one got stolen). */
        for (int i = 0; i < THREADS; i++)
            CHECK_GT(atomic_load(&spin_on[i]), 0);
        atomic_store(&spin_stop, 1);
        for (int i = 0; i < THREADS; i++)
            CHECK_EQ(weir_task_join(y[i], NULL, weir_time_after_ms(5000)), 0);
        weir_rt_free(rt);
    }
}

/* A task woken into the LIFO slot of a thread that then stays in one long
 * poll is not stuck there: the watchdog hands it to the idle thread. */
struct lifo_case {
    weir_notify *go;
    _Atomic int ran, waiting;
};

static intptr_t lifo_wakee(void *p)
{
    struct lifo_case *c = p;
    atomic_store(&c->waiting, 1);
    CHECK_EQ(weir_notify_wait(c->go, WEIR_FOREVER), 0);
    atomic_store(&c->ran, 1);
    return 0;
}

static intptr_t lifo_hog(void *p)
{
    struct lifo_case *c = p;
    weir_notify_one(c->go); /* the wakee lands in this thread's LIFO slot */
    int64_t give_up = weir_time_now() + 3 * WEIR_SEC;
    while (!atomic_load(&c->ran)) /* hog the thread until the wakee ran elsewhere */
        CHECK_LT(weir_time_now(), give_up);
    return 0;
}

TEST(lifo_slot_of_a_stalled_thread_is_rescued)
{
    weir_rt *rt = rt_new(THREADS);
    for (int k = 0; k < 3; k++) {
        struct lifo_case c = {.go = weir_notify_new()};
        weir_spawn_opts o = {.loop = weir_rt_loop(rt, 0), .pin = 1};
        weir_spawn_opts u = {.rt = rt};
        weir_task *w = weir_task_spawn(lifo_wakee, &c, &u);
        CHECK(w != NULL);
        while (!atomic_load(&c.waiting))
            usleep(100);
        usleep(20000); /* parked on the notify by now */
        weir_task *h = weir_task_spawn(lifo_hog, &c, &o);
        CHECK(h != NULL);
        CHECK_EQ(weir_task_join(h, NULL, weir_time_after_ms(10000)), 0);
        CHECK_EQ(weir_task_join(w, NULL, weir_time_after_ms(10000)), 0);
        weir_notify_free(c.go);
    }
    weir_loop_stats st;
    CHECK_EQ(weir_loop_stats_get(weir_rt_loop(rt, 0), &st), 0);
    CHECK_GE(st.lifo_rescues, 1); /* at least once the slot was where it waited */
    weir_rt_free(rt);
}

/* ---- timers and intervals across threads -------------------------------------------------- */
struct iv_case {
    weir_interval *iv;
    _Atomic int waiting;
    int64_t res;
};

static intptr_t interval_waiter(void *p)
{
    struct iv_case *c = p;
    CHECK_GE(weir_interval_next(c->iv), 1); /* a tick first (maybe several, missed) */
    atomic_store(&c->waiting, 1);
    c->res = weir_interval_next(c->iv); /* an hour: cancelled from elsewhere */
    return 0;
}

static void cb_count(void *arg)
{
    atomic_fetch_add((_Atomic int *)arg, 1);
}

struct timer_case {
    weir_notify *go;
    _Atomic int fired;
    weir_timer *tm;
};

static intptr_t timer_owner(void *p)
{
    struct timer_case *c = p;
    int before = weir_rt_thread_index();
    weir_timer *tm = weir_timer_start(3600 * WEIR_SEC, 0, cb_count, &c->fired);
    CHECK(tm != NULL);
    __atomic_store_n(&c->tm, tm, __ATOMIC_RELEASE);
    /* Woken from the other thread, but the timer keeps the task here. */
    CHECK_EQ(weir_notify_wait(c->go, WEIR_FOREVER), 0);
    CHECK_EQ(weir_rt_thread_index(), before);
    CHECK_EQ(weir_timer_cancel(c->tm), 0);
    /* Without a timer it may move again; nothing else to check. */
    return 0;
}

static intptr_t timer_main(void *arg)
{
    weir_rt *rt = arg;
    for (int round = 0; round < 50; round++) {
        struct timer_case c = {.go = weir_notify_new()};
        weir_spawn_opts o = {.loop = weir_rt_loop(rt, round % 2), .pin = 0};
        weir_task *t = weir_task_spawn(timer_owner, &c, &o);
        CHECK(t != NULL);
        weir_time_sleep(WEIR_MSEC / 4);
        weir_notify_one(c.go);
        CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
        CHECK_EQ(atomic_load(&c.fired), 0);
        weir_notify_free(c.go);
    }
    return 0;
}

TEST(timers_and_intervals_across_threads)
{
    weir_rt *rt = rt_new(THREADS);
    for (int k = 0; k < 30; k++) {
        struct iv_case c = {.iv = weir_interval_new(WEIR_MSEC)};
        CHECK(c.iv != NULL);
        weir_spawn_opts o = {.rt = rt};
        weir_task *t = weir_task_spawn(interval_waiter, &c, &o);
        CHECK(t != NULL);
        while (!atomic_load(&c.waiting))
            usleep(50);
        /* Now it waits on the 1 ms period: lengthen nothing, just cancel
         * (or free) it from this foreign thread at some point. */
        usleep((useconds_t)(k % 5) * 300);
        if (k % 2)
            weir_interval_cancel(c.iv);
        else
            weir_interval_free(c.iv);
        CHECK_EQ(weir_task_join(t, NULL, weir_time_after_ms(5000)), 0);
        CHECK(c.res >= 1 || c.res == -ECANCELED); /* a tick may win the race */
        if (k % 2)
            weir_interval_free(c.iv);
    }
    CHECK_EQ(rt_run(rt, timer_main, rt), 0);
    /* A timer cancelled from a thread that does not own it: refused. */
    struct timer_case c = {.go = weir_notify_new()};
    weir_spawn_opts o = {.rt = rt};
    weir_task *t = weir_task_spawn(timer_owner, &c, &o);
    CHECK(t != NULL);
    while (!__atomic_load_n(&c.tm, __ATOMIC_ACQUIRE))
        usleep(50);
    CHECK_EQ(weir_timer_cancel(c.tm), -EPERM);
    CHECK_EQ(weir_timer_cancel(NULL), -EINVAL);
    weir_notify_one(c.go);
    CHECK_EQ(weir_task_join(t, NULL, weir_time_after_ms(5000)), 0);
    weir_notify_free(c.go);
    weir_rt_free(rt);
}

/* weir_op_cancel from another thread: the request is carried out on the
 * thread that owns the op (here an io_uring read or epoll wait). */
struct opc {
    int fds[2];
    weir_io_op op;
    _Atomic int started;
    int64_t res;
};

static intptr_t op_owner(void *p)
{
    struct opc *c = p;
    char ch;
    CHECK_EQ(weir_io_read_start(&c->op, c->fds[0], &ch, 1, -1, WEIR_FOREVER), 0);
    atomic_store(&c->started, 1);
    c->res = weir_op_wait(weir_op_of(&c->op));
    return 0;
}

TEST(op_cancel_from_another_thread)
{
    weir_rt *rt = rt_new(THREADS);
    for (int k = 0; k < 20; k++) {
        struct opc c = {0};
        CHECK_EQ(pipe(c.fds), 0);
        weir_spawn_opts o = {.rt = rt};
        weir_task *t = weir_task_spawn(op_owner, &c, &o);
        CHECK(t != NULL);
        while (!atomic_load(&c.started))
            usleep(50);
        usleep(200);
        weir_op_cancel(weir_op_of(&c.op));
        CHECK_EQ(weir_task_join(t, NULL, weir_time_after_ms(5000)), 0);
        CHECK_EQ(c.res, -ECANCELED);
        close(c.fds[0]);
        close(c.fds[1]);
    }
    weir_rt_free(rt);
}

/* A thread that cannot start (no file descriptors left for its loop) makes
 * weir_rt_new fail cleanly instead of running a half-made runtime. In a
 * child process, so the descriptor limit stays there. */
TEST(startup_failure_is_an_error)
{
    pid_t pid = fork();
    CHECK_GE(pid, 0);
    if (pid == 0) {
        struct rlimit rl = {24, 24};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(2);
        weir_rt_opts o = {.threads = 16};
        errno = 0;
        weir_rt *rt = weir_rt_new(&o);
        _exit(rt == NULL && errno != 0 ? 0 : 1);
    }
    int st = 0;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
}

/* ---- shutdown ------------------------------------------------------------------------------ */
static _Atomic int cleanups;

static void count_cleanup(void *arg)
{
    (void)arg;
    atomic_fetch_add(&cleanups, 1);
}

static intptr_t stuck(void *arg)
{
    weir_chan *ch = arg;
    weir_task_defer(count_cleanup, NULL);
    int64_t v;
    return weir_chan_recv(ch, &v, WEIR_FOREVER); /* never sent: cancelled at shutdown */
}

static intptr_t sleeper(void *arg)
{
    (void)arg;
    weir_task_defer(count_cleanup, NULL);
    return weir_time_sleep(3600 * WEIR_SEC);
}

TEST(free_cancels_live_tasks)
{
    weir_rt *rt = rt_new(THREADS);
    weir_chan *ch = weir_chan_new(sizeof(int64_t), 0);
    atomic_store(&cleanups, 0);
    weir_spawn_opts o = {.rt = rt};
    for (int i = 0; i < 50; i++) {
        weir_task *t = weir_task_spawn(i % 2 ? stuck : sleeper, ch, &o);
        CHECK(t != NULL);
        weir_task_detach(t);
    }
    while (weir_rt_tasks_alive(rt) != 50)
        usleep(100);
    usleep(2000);
    weir_rt_free(rt);
    CHECK_EQ(atomic_load(&cleanups), 50);
    weir_chan_unref(ch);
}

/* A task that only polls weir_task_cancelled() between chunks of work,
 * never suspending, still sees the runtime's shutdown. */
static _Atomic int cpu_started;

static intptr_t cpu_until_cancelled(void *arg)
{
    (void)arg;
    atomic_store(&cpu_started, 1);
    while (!weir_task_cancelled())
        burn_us(100);
    return 0;
}

TEST(shutdown_reaches_a_task_that_never_suspends)
{
    for (int threads = 1; threads <= 2; threads++) {
        weir_rt *rt = rt_new(threads);
        atomic_store(&cpu_started, 0);
        weir_spawn_opts o = {.rt = rt};
        weir_task *t = weir_task_spawn(cpu_until_cancelled, NULL, &o);
        CHECK(t != NULL);
        weir_task_detach(t);
        while (!atomic_load(&cpu_started))
            usleep(100);
        int64_t t0 = weir_time_now();
        weir_rt_free(rt);
        CHECK_LT(weir_time_now() - t0, 2 * WEIR_SEC);
    }
}

TEST(bad_arguments)
{
    weir_rt_opts o = {.threads = -1};
    errno = 0;
    CHECK(weir_rt_new(&o) == NULL);
    CHECK_EQ(errno, EINVAL);
    o.threads = 100000;
    CHECK(weir_rt_new(&o) == NULL);
    CHECK(weir_rt_loop(NULL, 0) == NULL);
    CHECK_EQ(weir_rt_thread_index(), -1);
    CHECK(weir_rt_current() == NULL);
    weir_rt *rt = rt_new(1);
    CHECK(weir_rt_loop(rt, 1) == NULL);
    /* A runtime thread's loop is driven by the runtime, not by the caller. */
    CHECK_EQ(weir_loop_poll(weir_rt_loop(rt, 0), 0), -EPERM);
    weir_rt_free(rt);
}

/* One thread: spawn, injection and join paths without stealing. */
TEST(single_thread_runtime)
{
    weir_rt *rt = rt_new(1);
    weir_spawn_opts o = {.rt = rt};
    _Atomic long count = 0;
    weir_task *h[100];
    for (int i = 0; i < 100; i++)
        CHECK((h[i] = weir_task_spawn(bump, &count, &o)) != NULL);
    for (int i = 0; i < 100; i++)
        CHECK_EQ(weir_task_join(h[i], NULL, WEIR_FOREVER), 0);
    CHECK_EQ(atomic_load(&count), 100);
    weir_rt_free(rt);
}

TEST_MAIN()
