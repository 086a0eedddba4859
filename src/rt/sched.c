/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sched.c - the multi-threaded runtime: N scheduler threads sharing tasks by
 * work stealing.
 *
 * Each thread runs an ordinary loop (loop.c: backend, timer wheel, turn);
 * this file adds what the threads share:
 *
 *   queues     per thread: a private FIFO run queue (loop.c's runq), a
 *              Chase-Lev deque (deque.c; the owner pushes and pops the
 *              bottom, thieves take the top), and a LIFO slot holding the
 *              task most recently woken by a running task (it runs next,
 *              while what it was sent is hot in cache). Shared: an
 *              injection queue for spawns and wakes from outside the
 *              runtime.
 *   routing    weir__sched_enqueue(): a pinned task, or one with an op
 *              still bound to the loop that started it (t->anchors: I/O,
 *              timers, deadlines), goes to its own loop's run queue (via the
 *              remote queue from another thread). Any other task goes to the
 *              waking thread's LIFO slot or deque, or, from outside the
 *              runtime, to the injection queue. So an in-flight io_uring
 *              request is always cancelled on the ring that owns it and a
 *              deadline timer is always disarmed on the wheel that holds
 *              it, without locks on either.
 *   stealing   a thread out of work takes a batch from the injection queue
 *              or steals up to half of a random victim's deque.
 *   parking    an idle thread sleeps in its backend; see below.
 *
 * Parking never loses a wake-up. A thread about to sleep increments
 * rt->nidle and sets its `sleeping` flag (seq_cst), then looks once more at
 * every queue. A thread that makes work stealable (push to a deque or to
 * the injection queue) issues a seq_cst fence and then reads nidle and
 * nsearching: if someone is idle and nobody is searching, it wakes one
 * sleeper (eventfd) unless a wake-up is already in flight
 * (notify_pending). In the single total order of seq_cst operations either
 * the sleeper's re-check comes after the push (and sees it) or the
 * pusher's read comes after the sleeper's increment (and wakes someone). A
 * thread woken that way clears notify_pending before it searches, and wakes
 * the next sleeper when it finds more work than it took, so wake-ups chain
 * instead of stampeding.
 *
 * Searching: after a busy turn a thread spins for up to WEIR_SPIN_US
 * looking for work before it sleeps, but at most half of the threads
 * search at once (nsearching), so an idle runtime does not burn every core.
 * The last searcher to stop hands over to a sleeper if work is left.
 *
 * Also here: requeueing (a yielded task goes to the private FIFO, or to the
 * deque while another thread is idle), the watchdog's rescue of a task
 * stuck in the LIFO slot of a thread that stays in one poll, the per-thread
 * spawn/end counters behind weir_rt_tasks_alive(), and start-up and
 * shutdown (the threads stop together before any loop is freed). A
 * one-thread runtime skips the deque and notifications altogether.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rt/rt_int.h"

#define DEQUE_CAPACITY   WEIR__DEQUE_CAPACITY
#define INJECT_BATCH_MAX 64
#define STEAL_BATCH_MAX  32
#define LIFO_STREAK_MAX  3 /* LIFO polls in a row before the others get a turn */

/* ---- small helpers ----------------------------------------------------------- */
static uint64_t rng_next(weir_loop *l)
{
    /* xorshift64* */
    uint64_t x = l->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    l->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* ---- notify / park --------------------------------------------------------------- */
/* Work became stealable: wake one sleeping thread if none is looking. */
static void notify(weir_rt *rt)
{
    if (rt->nthreads == 1 && weir__loop_current() == rt->loops[0])
        return; /* nobody else to wake */
    /* seq_cst fence: orders the caller's push before the loads below (see
     * the header comment). */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&rt->nidle, memory_order_seq_cst) == 0)
        return;
    if (atomic_load_explicit(&rt->nsearching, memory_order_seq_cst) != 0)
        return;
    if (atomic_exchange_explicit(&rt->notify_pending, 1, memory_order_seq_cst))
        return; /* a woken thread is on its way */
    weir_loop *self = weir__loop_current();
    int n = rt->nthreads;
    int start = self && self->rt == rt ? (int)(rng_next(self) % (uint64_t)n) : 0;
    for (int i = 0; i < n; i++) {
        weir_loop *w = rt->loops[(start + i) % n];
        if (w != self && atomic_load_explicit(&w->sleeping, memory_order_seq_cst)) {
            weir__loop_unpark(w);
            return;
        }
    }
    /* The idle thread has not reached its `sleeping` store yet; its
     * re-check after that store will see our push. */
    atomic_store_explicit(&rt->notify_pending, 0, memory_order_seq_cst);
}

static int others_have_work(weir_loop *l)
{
    weir_rt *rt = l->rt;
    if (atomic_load_explicit(&rt->inject_len, memory_order_seq_cst))
        return 1;
    for (int i = 0; i < rt->nthreads; i++) {
        weir_loop *v = rt->loops[i];
        if (v != l && weir__deque_len(&v->dq) > 0)
            return 1;
    }
    return 0;
}

int weir__sched_park_enter(weir_loop *l)
{
    weir_rt *rt = l->rt;
    atomic_fetch_add_explicit(&rt->nidle, 1, memory_order_seq_cst);
    atomic_store_explicit(&l->sleeping, 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&l->remote_pending, memory_order_seq_cst) || others_have_work(l) ||
        atomic_load_explicit(&rt->stop, memory_order_seq_cst))
        return 0;
    return 1;
}

void weir__sched_park_leave(weir_loop *l)
{
    weir_rt *rt = l->rt;
    atomic_store_explicit(&l->sleeping, 0, memory_order_seq_cst);
    atomic_fetch_sub_explicit(&rt->nidle, 1, memory_order_seq_cst);
    /* Possibly the thread a notify() woke: let the next notify through, then
     * look for the work it announced. (seq_cst exchange: a notify that read
     * our `sleeping` as 1 set the flag before that read.) */
    if (atomic_exchange_explicit(&rt->notify_pending, 0, memory_order_seq_cst))
        weir__sched_search(l);
}

/* ---- queues ----------------------------------------------------------------------- */
static void inject_push(weir_rt *rt, weir_task *t)
{
    /* notify() under the lock: once the task can be taken (the lock is
     * released) it may run to its end and the runtime be freed; no worker
     * can take it before we are done with rt. */
    pthread_mutex_lock(&rt->inject_lock);
    weir__taskq_push(&rt->inject, t);
    atomic_store_explicit(&rt->inject_len, rt->inject.len, memory_order_relaxed);
    notify(rt);
    pthread_mutex_unlock(&rt->inject_lock);
}

/* The deque is full: move its older half to the injection queue, where the
 * other threads will find it. */
static void deque_overflow(weir_loop *l, weir_task *t)
{
    weir_rt *rt = l->rt;
    if (rt->nthreads == 1) {
        weir__task_schedule_local(l, t); /* nobody to share with */
        return;
    }
    weir__taskq q = {0};
    size_t half = DEQUE_CAPACITY / 2;
    for (size_t i = 0; i < half; i++) {
        void *x = weir__deque_steal(&l->dq);
        if (x == WEIR__DEQUE_EMPTY)
            break;
        if (x != WEIR__DEQUE_ABORT)
            weir__taskq_push(&q, x);
    }
    weir__taskq_push(&q, t);
    pthread_mutex_lock(&rt->inject_lock);
    if (rt->inject.tail)
        rt->inject.tail->next = q.head;
    else
        rt->inject.head = q.head;
    rt->inject.tail = q.tail;
    rt->inject.len += q.len;
    atomic_store_explicit(&rt->inject_len, rt->inject.len, memory_order_relaxed);
    pthread_mutex_unlock(&rt->inject_lock);
}

/* Make t stealable on l's deque (l is the calling thread's loop). */
static void push_deque(weir_loop *l, weir_task *t)
{
    if (l->rt->nthreads == 1) {
        /* Nobody to steal: the plain FIFO is cheaper than the deque. */
        weir__task_schedule_local(l, t);
        return;
    }
    if (WEIR__UNLIKELY(weir__deque_push(&l->dq, t) < 0))
        deque_overflow(l, t);
    notify(l->rt);
}

void weir__sched_enqueue(weir_task *t, int woken)
{
    weir_loop *cur = weir__loop_current();
    weir_loop *l = t->loop;
    weir_rt *rt = l->rt;
    if (!rt || weir__task_anchors(t) || (t->flags & WEIR__TF_PINNED)) {
        if (l == cur) {
            if (woken)
                weir__trace(l, WEIR__EV_WAKE, t, 0);
            weir__task_schedule_local(l, t);
        } else {
            weir__loop_push_remote(l, t); /* traced when the loop drains it */
        }
        return;
    }
    if (!cur || cur->rt != rt) {
        inject_push(rt, t);
        return;
    }
    if (woken)
        weir__trace(cur, WEIR__EV_WAKE, t, 0);
    if (woken && (cur->current || cur->in_finish) && rt->use_lifo) {
        /* A running task woke it (it sent a message, released a lock): run
         * it next. The task it displaces becomes stealable. */
        /* An empty slot is only ever filled by its owner: a plain store
         * (release: the task's state travels with it to whoever takes it).
         * A full one is exchanged, as the watchdog may be taking its task
         * (weir__sched_rescue_lifo). */
        weir_task *old = atomic_load_explicit(&cur->lifo, memory_order_relaxed);
        if (!old) {
            atomic_store_explicit(&cur->lifo, t, memory_order_release);
            return;
        }
        if (!(old = atomic_exchange_explicit(&cur->lifo, t, memory_order_acq_rel)))
            return;
        t = old;
    }
    push_deque(cur, t);
}

static void adopt_if_new(weir_loop *l, weir_task *t)
{
    if (!(t->flags & WEIR__TF_ADOPTED)) {
        weir__loop_adopt(l, t);
        weir__trace(l, WEIR__EV_SPAWN, t, 1);
    }
}

/* Take a share of the injection queue: the first task is returned, the
 * rest go to l's deque. */
static weir_task *take_inject(weir_loop *l)
{
    weir_rt *rt = l->rt;
    if (!atomic_load_explicit(&rt->inject_len, memory_order_acquire))
        return NULL;
    weir__taskq q = {0};
    pthread_mutex_lock(&rt->inject_lock);
    size_t n = rt->inject.len / (size_t)rt->nthreads + 1;
    if (n > INJECT_BATCH_MAX)
        n = INJECT_BATCH_MAX;
    for (size_t i = 0; i < n && rt->inject.head; i++)
        weir__taskq_push(&q, weir__taskq_pop(&rt->inject));
    atomic_store_explicit(&rt->inject_len, rt->inject.len, memory_order_relaxed);
    pthread_mutex_unlock(&rt->inject_lock);
    weir_task *first = weir__taskq_pop(&q), *t;
    if (!first)
        return NULL;
    WEIR__STAT_ADD(l->injected, q.len + 1);
    adopt_if_new(l, first);
    int pushed = 0;
    while ((t = weir__taskq_pop(&q))) {
        adopt_if_new(l, t);
        if (weir__deque_push(&l->dq, t) < 0)
            weir__task_schedule_local(l, t);
        else
            pushed = 1;
    }
    if (pushed)
        notify(rt);
    return first;
}

/* Steal from v: one task returned, up to half of the rest moved to l. */
static weir_task *steal_from(weir_loop *l, weir_loop *v)
{
    void *x;
    int tries = 0;
    do
        x = weir__deque_steal(&v->dq);
    while (x == WEIR__DEQUE_ABORT && ++tries < 8);
    if (x == WEIR__DEQUE_EMPTY || x == WEIR__DEQUE_ABORT)
        return NULL;
    size_t more = weir__deque_len(&v->dq) / 2;
    if (more > STEAL_BATCH_MAX)
        more = STEAL_BATCH_MAX;
    size_t got = 1;
    for (size_t i = 0; i < more; i++) {
        void *y = weir__deque_steal(&v->dq);
        if (y == WEIR__DEQUE_EMPTY || y == WEIR__DEQUE_ABORT)
            break;
        if (weir__deque_push(&l->dq, y) < 0)
            weir__task_schedule_local(l, y);
        weir__trace(l, WEIR__EV_STEAL, y, v->index);
        got++;
    }
    WEIR__STAT_ADD(l->steals, got);
    weir__trace(l, WEIR__EV_STEAL, x, v->index);
    return x;
}

/* Put a task that ran on this thread back in line: the private run queue,
 * or - when other threads are idle and the task may move - the deque,
 * where an idle thread will steal it (a thread with two yielding tasks
 * would otherwise keep both while the other thread sleeps). */
void weir__sched_requeue(weir_loop *l, weir_task *t)
{
    weir_rt *rt = l->rt;
    if (rt && !weir__task_anchors(t) && !(t->flags & WEIR__TF_PINNED) &&
        atomic_load_explicit(&rt->nidle, memory_order_relaxed) > 0)
        push_deque(l, t);
    else
        weir__task_schedule_local(l, t);
}

void weir__sched_turn_begin(weir_loop *l)
{
    /* Once per turn, whatever the local queues hold, so that spawns and
     * wakes from outside the runtime are not starved by local work. */
    if (atomic_load_explicit(&l->rt->inject_len, memory_order_relaxed)) {
        weir_task *t = take_inject(l);
        if (t)
            weir__task_schedule_local(l, t);
    }
}

weir_task *weir__sched_next(weir_loop *l)
{
    weir_task *t = atomic_load_explicit(&l->lifo, memory_order_relaxed) ?
                       atomic_exchange_explicit(&l->lifo, NULL, memory_order_acq_rel) :
                       NULL;
    if (t) {
        if (++l->lifo_streak <= LIFO_STREAK_MAX) {
            WEIR__STAT_ADD(l->lifo_polls, 1);
            return t;
        }
        /* Two tasks bouncing work through the slot would starve the rest:
         * send this one to the back of this thread's line (not the deque:
         * the pair would then be split across threads, every hop a
         * cross-thread wake). */
        weir__task_schedule_local(l, t);
    }
    l->lifo_streak = 0;
    void *x = weir__deque_pop(&l->dq);
    if (x != WEIR__DEQUE_EMPTY)
        return x;
    if ((t = weir__taskq_pop(&l->runq)))
        return t;
    return take_inject(l);
}

weir_task *weir__sched_oldest(weir_loop *l)
{
    /* The owner takes its own deque's top: the oldest stealable task runs at
     * least once per turn however busy the LIFO end is. */
    if (weir__deque_len(&l->dq) < 2)
        return NULL;
    void *x = weir__deque_steal(&l->dq);
    return x == WEIR__DEQUE_EMPTY || x == WEIR__DEQUE_ABORT ? NULL : x;
}

int weir__sched_search(weir_loop *l)
{
    weir_rt *rt = l->rt;
    weir_task *t = take_inject(l);
    if (!t && rt->nthreads > 1) {
        int n = rt->nthreads;
        int start = (int)(rng_next(l) % (uint64_t)n);
        for (int i = 0; i < n && !t; i++) {
            weir_loop *v = rt->loops[(start + i) % n];
            if (v != l)
                t = steal_from(l, v);
        }
    }
    if (!t)
        return 0;
    weir__task_schedule_local(l, t);
    /* More out there than we took: pass the word on. */
    if (weir__deque_len(&l->dq) > 0 || others_have_work(l))
        notify(rt);
    return 1;
}

int weir__sched_try_search(weir_loop *l)
{
    weir_rt *rt = l->rt;
    int n = atomic_load_explicit(&rt->nsearching, memory_order_relaxed);
    /* At most half of the threads search at once. */
    while (2 * (n + 1) <= rt->nthreads) {
        if (atomic_compare_exchange_weak_explicit(&rt->nsearching, &n, n + 1,
                                                  memory_order_seq_cst, memory_order_relaxed))
            return 1;
    }
    return 0;
}

void weir__sched_end_search(weir_loop *l)
{
    /* The last searcher to leave hands over: a notify() that saw it
     * searching did not wake anyone, so wake someone for what is left. */
    if (atomic_fetch_sub_explicit(&l->rt->nsearching, 1, memory_order_seq_cst) == 1 &&
        others_have_work(l))
        notify(l->rt);
}

/* The watchdog saw l stuck in one poll with a task waiting in its LIFO
 * slot, which no other thread can steal: hand that task to the injection
 * queue, where an idle thread will find it. (The stall Tokio's LIFO slot is
 * known for; here it lasts one or two watchdog periods at most.) Any
 * thread. */
void weir__sched_rescue_lifo(weir_loop *l)
{
    if (!atomic_load_explicit(&l->lifo, memory_order_relaxed))
        return;
    weir_task *t = atomic_exchange_explicit(&l->lifo, NULL, memory_order_acq_rel);
    if (t) {
        weir__log(WEIR__LOG_DEBUG, "rt.sched", "task '%s' moved out of a stalled thread's LIFO slot",
                  t->name);
        atomic_fetch_add_explicit(&l->rt->lifo_rescues, 1, memory_order_relaxed);
        inject_push(l->rt, t);
    }
}

void weir__sched_task_spawned(weir_rt *rt)
{
    weir_loop *cur = weir__loop_current();
    if (cur && cur->rt == rt)
        WEIR__STAT_ADD(cur->spawned, 1);
    else
        atomic_fetch_add_explicit(&rt->foreign_spawned, 1, memory_order_relaxed);
}

/* Tasks alive: spawns minus ends, each counted by the thread that did it
 * (no shared counter on the spawn/end path). The counters are monotonic, so
 * two identical scans in a row are a consistent snapshot (as of the moment
 * between them); retry until that happens. */
static uint64_t rt_alive(const weir_rt *rt)
{
    uint64_t prev_s = UINT64_MAX, prev_e = UINT64_MAX;
    for (;;) {
        uint64_t s = atomic_load_explicit(&((weir_rt *)rt)->foreign_spawned, memory_order_acquire);
        uint64_t e = 0;
        for (int i = 0; i < rt->nthreads; i++) {
            weir_loop *l = rt->loops[i];
            s += __atomic_load_n(&l->spawned, __ATOMIC_ACQUIRE);
            e += __atomic_load_n(&l->ended, __ATOMIC_ACQUIRE);
        }
        if (s == prev_s && e == prev_e)
            return s - e;
        prev_s = s;
        prev_e = e;
    }
}

/* ---- threads ------------------------------------------------------------------------ */
struct worker_arg {
    weir_rt *rt;
    int index;
};

static void *worker_main(void *p)
{
    struct worker_arg *a = p;
    weir_rt *rt = a->rt;
    int idx = a->index;
    free(a);
    weir_loop *l = weir__loop_new_rt(&rt->opts.loop, rt, idx);
    int err = l ? 0 : errno;
    if (l)
        rt->loops[idx] = l;
    pthread_mutex_lock(&rt->start_lock);
    if (l)
        rt->nloops++;
    if (!l && !rt->start_err)
        rt->start_err = err ? err : EINVAL;
    rt->started++;
    pthread_cond_broadcast(&rt->start_cond);
    /* Wait until every thread is up (or one failed): the others' loops are
     * read from rt->loops from now on. */
    while (rt->started < rt->nthreads && !rt->start_err)
        pthread_cond_wait(&rt->start_cond, &rt->start_lock);
    int failed = rt->start_err != 0;
    pthread_mutex_unlock(&rt->start_lock);
    if (!l)
        return NULL;
    /* Another thread failed to start: rt->loops has holes, so do not turn
     * (a turn may steal from every loop); just wait to be torn down. */
    while (!failed && !atomic_load_explicit(&rt->stop, memory_order_acquire))
        if (weir__loop_turn(l, -1) < 0)
            sched_yield(); /* logged by the turn; do not spin hard on it */
    /* The other threads may still steal from our deque or write our
     * eventfd until they too have stopped: free nothing before that. */
    pthread_mutex_lock(&rt->start_lock);
    rt->nstopped++;
    pthread_cond_broadcast(&rt->start_cond);
    while (!rt->teardown)
        pthread_cond_wait(&rt->start_cond, &rt->start_lock);
    pthread_mutex_unlock(&rt->start_lock);
    weir__loop_destroy(l);
    return NULL;
}

/* Stop the threads (`made` of them were created) and wait for them. */
static void rt_stop(weir_rt *rt, int made)
{
    atomic_store_explicit(&rt->stop, 1, memory_order_seq_cst);
    for (int i = 0; i < made; i++)
        if (rt->loops[i])
            weir__loop_unpark(rt->loops[i]);
    pthread_mutex_lock(&rt->start_lock);
    while (rt->nstopped < rt->nloops)
        pthread_cond_wait(&rt->start_cond, &rt->start_lock);
    rt->teardown = 1;
    pthread_cond_broadcast(&rt->start_cond);
    pthread_mutex_unlock(&rt->start_lock);
    for (int i = 0; i < made; i++)
        pthread_join(rt->threads[i], NULL);
}

static int env_threads(void)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online < 1)
        online = 1;
    if (online > WEIR__RT_MAX_THREADS)
        online = WEIR__RT_MAX_THREADS;
    return (int)weir__env_long("WEIR_THREADS", online, 1, WEIR__RT_MAX_THREADS);
}

static void rt_release(weir_rt *rt)
{
    if (rt->pool)
        weir__pool_free(rt->pool); /* every task has ended: no job is awaited */
    weir__stack_shared_fini(&rt->stacks);
    pthread_mutex_destroy(&rt->inject_lock);
    pthread_mutex_destroy(&rt->start_lock);
    pthread_cond_destroy(&rt->start_cond);
    free(rt->loops);
    free(rt->threads);
    free(rt);
}

weir_rt *weir_rt_new(const weir_rt_opts *opts)
{
    if (opts && (opts->threads < 0 || opts->threads > WEIR__RT_MAX_THREADS)) {
        weir__log(WEIR__LOG_ERROR, "rt", "runtime threads must be 0..%d, not %d",
                  WEIR__RT_MAX_THREADS, opts->threads);
        errno = EINVAL;
        return NULL;
    }
    weir_rt *rt = calloc(1, sizeof(*rt));
    if (!rt)
        return NULL;
    if (opts)
        rt->opts = *opts;
    rt->nthreads = rt->opts.threads ? rt->opts.threads : env_threads();
    rt->use_lifo = (int)weir__env_long("WEIR_LIFO", 1, 0, 1);
    rt->loops = calloc((size_t)rt->nthreads, sizeof(*rt->loops));
    rt->threads = calloc((size_t)rt->nthreads, sizeof(*rt->threads));
    pthread_mutex_init(&rt->inject_lock, NULL);
    weir__stack_shared_init(&rt->stacks);
    pthread_mutex_init(&rt->start_lock, NULL);
    pthread_cond_init(&rt->start_cond, NULL);
    if (!rt->loops || !rt->threads) {
        rt_release(rt);
        errno = ENOMEM;
        return NULL;
    }
    int made = 0, err = 0;
    for (; made < rt->nthreads; made++) {
        struct worker_arg *a = malloc(sizeof(*a));
        if (!a) {
            err = ENOMEM;
            break;
        }
        a->rt = rt;
        a->index = made;
        if ((err = pthread_create(&rt->threads[made], NULL, worker_main, a)) != 0) {
            free(a);
            break;
        }
    }
    pthread_mutex_lock(&rt->start_lock);
    if (err && !rt->start_err)
        rt->start_err = err;
    while (rt->started < made && !(rt->start_err && rt->started == made))
        pthread_cond_wait(&rt->start_cond, &rt->start_lock);
    if (rt->start_err)
        pthread_cond_broadcast(&rt->start_cond);
    err = rt->start_err;
    pthread_mutex_unlock(&rt->start_lock);
    if (err) {
        /* Threads that made their loop see `stop` and tear it down. */
        rt_stop(rt, made);
        weir__log(WEIR__LOG_ERROR, "rt", "cannot start %d scheduler threads: %s", rt->nthreads,
                  strerror(err));
        rt_release(rt);
        errno = err;
        return NULL;
    }
    return rt;
}

int weir_rt_threads(const weir_rt *rt)
{
    return rt ? rt->nthreads : 0;
}

weir_loop *weir_rt_loop(weir_rt *rt, int i)
{
    return rt && i >= 0 && i < rt->nthreads ? rt->loops[i] : NULL;
}

weir_rt *weir_rt_current(void)
{
    weir_loop *l = weir__loop_current();
    return l ? l->rt : NULL;
}

int weir_rt_thread_index(void)
{
    weir_loop *l = weir__loop_current();
    return l && l->rt ? (int)l->index : -1;
}

uint64_t weir_rt_tasks_alive(const weir_rt *rt)
{
    return rt ? rt_alive(rt) : 0;
}

void weir_rt_free(weir_rt *rt)
{
    if (!rt)
        return;
    weir_loop *cur = weir__loop_current();
    if (cur && cur->rt == rt) {
        weir__log(WEIR__LOG_ERROR, "rt", "weir_rt_free called from one of its own threads");
        return;
    }
    atomic_store_explicit(&rt->shutting_down, 1, memory_order_seq_cst);
    /* Each thread cancels the tasks on its own live list; tasks adopted
     * after this see shutting_down and are cancelled as they are adopted
     * (weir__loop_adopt). */
    for (int i = 0; i < rt->nthreads; i++) {
        atomic_store_explicit(&rt->loops[i]->cancel_all, 1, memory_order_release);
        weir__loop_push_remote(rt->loops[i], NULL);
    }
    int64_t warn_at = weir_time_now() + 5 * WEIR_SEC;
    int warned = 0;
    while (rt_alive(rt) != 0) {
        struct timespec ts = {0, 200 * 1000}; /* shutdown only: polling is fine */
        nanosleep(&ts, NULL);
        if (!warned && weir_time_now() >= warn_at) {
            warned = 1;
            for (int i = 0; i < rt->nthreads; i++) {
                /* A thread stuck in one task cannot answer the request
                 * below: name what it runs from here. */
                const char *name =
                    atomic_load_explicit(&rt->loops[i]->running_name, memory_order_acquire);
                if (name)
                    weir__log(WEIR__LOG_WARN, "rt",
                              "runtime shutdown: thread %d is still running task '%s'", i, name);
                atomic_store_explicit(&rt->loops[i]->report_stragglers, 1, memory_order_release);
                weir__loop_push_remote(rt->loops[i], NULL);
            }
        }
    }
    rt_stop(rt, rt->nthreads);
    rt_release(rt);
}

void weir__sched_fini_loop(weir_loop *l)
{
    weir__deque_fini(&l->dq);
}
