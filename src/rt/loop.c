/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loop.c - the per-thread executor: run queue, remote queue, the turn that
 * runs tasks / expires timers / waits on the I/O backend, and the public
 * entry points built on it (weir_loop_*, weir_main).
 *
 * One turn:
 *   1. move tasks woken from other threads into the run queue;
 *   2. poll queued tasks, including those woken meanwhile, up to a budget of
 *      WEIR__TURN_BUDGET polls (so I/O is still reaped regularly when tasks
 *      keep each other busy);
 *   3. expire due timers;
 *   4. wait in the backend - not at all if work is queued, else until the
 *      nearest timer or the caller's timeout - which also submits every op
 *      started during the turn in one batch, and reaps completions;
 *   5. expire timers again.
 *
 * Sleeping and cross-thread wake: before blocking, the loop stores
 * sleeping=1 and then reads remote_pending (both seq_cst); a waker stores
 * remote_pending=1 and then reads sleeping (task.c). Whichever runs second
 * sees the other's store, so either the loop does not block or the waker
 * writes the eventfd. wake_sent keeps that to one eventfd write per sleep.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "io/backend.h"
#include "rt/rt_int.h"

#ifdef WEIR_TSAN
#include <sanitizer/tsan_interface.h>
#endif

/* The loop bound to this thread. Read through a non-inlined accessor so that
 * code running on a fiber never caches the address of another thread's
 * variable across a context switch. */
static __thread weir_loop *tl_loop;

__attribute__((noinline)) weir_loop *weir__loop_current(void)
{
    return tl_loop;
}

__attribute__((noinline)) weir_task *weir__task_current(void)
{
    weir_loop *l = tl_loop;
    return l ? l->current : NULL;
}

/* ---- live-task list ------------------------------------------------------------
 * Each loop's list is touched by its own thread only. In a runtime a task
 * may end on another thread than the one whose list holds it (t->home):
 * that thread hands it back through the home's `forgets` queue. */
void weir__loop_adopt(weir_loop *l, weir_task *t)
{
    t->flags |= WEIR__TF_ADOPTED;
    t->home = l->index;
    t->all_prev = NULL;
    t->all_next = l->all_head;
    if (l->all_head)
        l->all_head->all_prev = t;
    l->all_head = t;
    __atomic_store_n(&l->ntasks, l->ntasks + 1, __ATOMIC_RELAXED); /* stats read it */
    if (l->shutting_down ||
        (l->rt && atomic_load_explicit(&l->rt->shutting_down, memory_order_seq_cst)))
        atomic_store_explicit(&t->cancel_req, 1, memory_order_release);
}

static void list_unlink(weir_loop *l, weir_task *t)
{
    if (t->all_prev)
        t->all_prev->all_next = t->all_next;
    else
        l->all_head = t->all_next;
    if (t->all_next)
        t->all_next->all_prev = t->all_prev;
    __atomic_store_n(&l->ntasks, l->ntasks - 1, __ATOMIC_RELAXED);
}

int weir__loop_forget(weir_loop *l, weir_task *t)
{
    if (l->rt && t->home != l->index) {
        weir_loop *h = l->rt->loops[t->home];
        pthread_mutex_lock(&h->remote_lock);
        weir__taskq_push(&h->forgets, t);
        /* No wake-up: the unlink can wait for the home thread's next turn
         * (its teardown drains the queue in any case). */
        atomic_store_explicit(&h->remote_pending, 1, memory_order_release);
        pthread_mutex_unlock(&h->remote_lock);
        return 0;
    }
    list_unlink(l, t);
    return 1;
}

/* Shutdown of a runtime: cancel every task on this thread's list, or name
 * the first ten still alive. */
static void loop_cancel_all(weir_loop *l)
{
    for (weir_task *t = l->all_head; t; t = t->all_next)
        weir_task_cancel(t);
}

static void loop_report_stragglers(weir_loop *l)
{
    int n = 0;
    for (weir_task *t = l->all_head; t && n < 10; t = t->all_next, n++)
        weir__log(WEIR__LOG_WARN, "rt",
                  "runtime shutdown: task '%s' has not ended 5 s after its cancellation", t->name);
}

weir_task *weir__taskq_pop(weir__taskq *q)
{
    weir_task *t = q->head;
    if (t) {
        q->head = t->next;
        if (!q->head)
            q->tail = NULL;
        q->len--;
    }
    return t;
}

/* Tasks woken (or spawned) from other threads. A task spawned there is not
 * yet on the live list. */
static void drain_remote(weir_loop *l)
{
    if (!atomic_load_explicit(&l->remote_pending, memory_order_acquire))
        return;
    pthread_mutex_lock(&l->remote_lock);
    weir__taskq q = l->remote, f = l->forgets;
    l->remote = (weir__taskq){0};
    l->forgets = (weir__taskq){0};
    atomic_store_explicit(&l->remote_pending, 0, memory_order_relaxed);
    pthread_mutex_unlock(&l->remote_lock);
    weir_task *t;
    while ((t = weir__taskq_pop(&f))) { /* ended on other threads */
        list_unlink(l, t);
        weir_task_unref(t); /* the scheduler's reference, handed over */
    }
    if (l->rt && atomic_exchange_explicit(&l->cancel_all, 0, memory_order_acq_rel))
        loop_cancel_all(l);
    if (l->rt && atomic_exchange_explicit(&l->report_stragglers, 0, memory_order_acq_rel))
        loop_report_stragglers(l);
    while ((t = weir__taskq_pop(&q))) {
        if (!(t->flags & WEIR__TF_ADOPTED)) {
            weir__loop_adopt(l, t);
            weir__trace(l, WEIR__EV_SPAWN, t, 1);
        } else {
            WEIR__STAT_ADD(l->remote_wakes, 1);
            weir__trace(l, WEIR__EV_WAKE, t, 1);
        }
        weir__task_schedule_local(l, t);
    }
}

/* ---- the turn ------------------------------------------------------------------- */
enum { UNTIL_NONE, UNTIL_NO_TASKS, UNTIL_TASK_DONE };

static int task_is_done(weir_task *t)
{
    return (atomic_load_explicit(&t->state, memory_order_acquire) & WEIR__T_STATE_MASK) ==
           WEIR__T_DONE;
}

/* `until` says when the caller will stop turning, so that the turn in which
 * that happens does not then block in the backend. */
static int loop_turn_inner(weir_loop *l, int64_t timeout_ns, int until, weir_task *task);

static int loop_turn(weir_loop *l, int64_t timeout_ns, int until, weir_task *task)
{
    l->in_turn = 1;
    int r = loop_turn_inner(l, timeout_ns, until, task);
    l->in_turn = 0;
    return r;
}

int weir__loop_turn(weir_loop *l, int64_t timeout_ns)
{
    return loop_turn(l, timeout_ns, UNTIL_NONE, NULL);
}

static int loop_turn_inner(weir_loop *l, int64_t timeout_ns, int until, weir_task *task)
{
    int progress = 0;
    drain_remote(l);
    if (l->rt)
        weir__sched_turn_begin(l);
    /* Tasks woken during the turn run in it too, up to the budget: two
     * tasks passing work back and forth then cost no syscall per hop, and
     * the backend is still polled at least every WEIR__TURN_BUDGET polls.
     * The tasks already queued when the turn began (I/O completions,
     * yields, wakes from other threads) go first. In a runtime the oldest
     * stealable task also gets a poll each turn, then the LIFO slot, the
     * deque and the injection queue take over (sched.c); when all of them
     * are empty the thread steals before it ends the turn. */
    size_t first = l->runq.len;
    weir_task *oldest = l->rt ? weir__sched_oldest(l) : NULL;
    for (int n = 0; n < WEIR__TURN_BUDGET; n++) {
        weir_task *t;
        if (first) {
            first--;
            t = weir__taskq_pop(&l->runq);
        } else if (oldest) {
            t = oldest;
            oldest = NULL;
        } else if (l->rt) {
            t = weir__sched_next(l);
            if (!t && weir__sched_search(l))
                t = weir__sched_next(l);
        } else {
            t = weir__taskq_pop(&l->runq);
        }
        if (!t)
            break;
        weir__task_run(l, t);
        progress++;
    }
    if (oldest) /* the budget ran out first */
        weir__task_schedule_local(l, oldest);
    progress += (int)weir__timers_expire(l);

    int64_t to = timeout_ns;
    if (l->runq.len || (until == UNTIL_NO_TASKS && l->ntasks == 0) ||
        (until == UNTIL_TASK_DONE && task_is_done(task)) ||
        (l->rt &&
         (atomic_load_explicit(&l->lifo, memory_order_relaxed) || weir__deque_len(&l->dq) > 0 ||
          atomic_load_explicit(&l->rt->stop, memory_order_acquire))))
        to = 0;
    if (to != 0) {
        int64_t next = weir__wheel_next(&l->wheel);
        if (next != INT64_MAX) {
            int64_t d = next - weir_time_now();
            if (d < 0)
                d = 0;
            if (to < 0 || d < to)
                to = d;
        }
    }
    if (to != 0 && l->rt && l->rt->nthreads > 1 && progress > 0 && l->spin_ns > 0 &&
        l->be->pending(l->be_state) == 0 && weir__sched_try_search(l)) {
        /* Out of work after a busy turn: look for more elsewhere for a
         * moment before sleeping (at most half of the threads do). */
        int64_t until = weir_time_now() + (to > 0 && to < l->spin_ns ? to : l->spin_ns);
        do {
            if (atomic_load_explicit(&l->remote_pending, memory_order_acquire) ||
                weir__sched_search(l)) {
                to = 0;
                break;
            }
            for (int i = 0; i < 32; i++)
                weir__cpu_relax();
        } while (weir_time_now() < until);
        weir__sched_end_search(l);
    } else if (to != 0 && progress > 0 && l->spin_ns > 0 && l->be->pending(l->be_state) == 0) {
        /* Busy a moment ago: spin briefly for a cross-thread wake before
         * paying for a sleep + eventfd wake-up (tens of microseconds on a
         * virtual machine). Only after a turn that did work, so an idle loop
         * does not burn a core, and only when no submission is waiting for
         * the backend, so I/O is never delayed by it. */
        int64_t until = weir_time_now() + (to > 0 && to < l->spin_ns ? to : l->spin_ns);
        while (!atomic_load_explicit(&l->remote_pending, memory_order_acquire) &&
               weir_time_now() < until)
            weir__cpu_relax();
        if (atomic_load_explicit(&l->remote_pending, memory_order_acquire))
            to = 0;
    }
    int parked = 0;
    if (to != 0 && l->rt) {
        parked = 1;
        if (weir__sched_park_enter(l))
            WEIR__STAT_ADD(l->parks, 1);
        else
            to = 0;
    } else if (to != 0) {
        atomic_store_explicit(&l->sleeping, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&l->remote_pending, memory_order_seq_cst))
            to = 0;
        else
            WEIR__STAT_ADD(l->parks, 1);
    }
    WEIR__STAT_ADD(l->waits, 1);
    int c = l->be->wait(l->be_state, to);
    if (parked)
        weir__sched_park_leave(l);
    else
        atomic_store_explicit(&l->sleeping, 0, memory_order_relaxed);
    if (c < 0) {
        weir__log(WEIR__LOG_ERROR, "io", "%s backend wait failed: %s", l->be->name, strerror(-c));
        return c;
    }
    WEIR__STAT_ADD(l->completions, (uint64_t)c);
    progress += c;
    progress += (int)weir__timers_expire(l);
    drain_remote(l);
    return progress;
}

/* ---- construction ------------------------------------------------------------------ */
/* The backend drained the loop's eventfd. Release pairs with the acquire in
 * weir__loop_unpark's exchange (task.c): a later waker that sees 0 writes the
 * eventfd again. */
static void loop_woken(void *ud)
{
    weir_loop *l = ud;
    atomic_store_explicit(&l->wake_sent, 0, memory_order_release);
}

static const weir__backend *pick_backend(const char *want, int *is_auto)
{
    if (!want || !*want)
        want = getenv("WEIR_IO");
    *is_auto = !want || !*want || strcmp(want, "auto") == 0;
    if (*is_auto || strcmp(want, "uring") == 0)
        return &weir__backend_uring;
    if (strcmp(want, "epoll") == 0)
        return &weir__backend_epoll;
    return NULL;
}

weir_loop *weir_loop_new(const weir_loop_opts *opts)
{
    return weir__loop_new_rt(opts, NULL, 0);
}

/* A loop for scheduler thread `index` of rt (NULL: a standalone loop). The
 * runtime fields are set before anything else (the watchdog) can see the
 * loop. */
weir_loop *weir__loop_new_rt(const weir_loop_opts *opts, weir_rt *rt, int index)
{
    if (tl_loop) {
        errno = EBUSY; /* one loop per thread */
        return NULL;
    }
    weir_loop *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    if (opts)
        l->opts = *opts;
    int is_auto = 0;
    l->be = pick_backend(l->opts.io, &is_auto);
    if (!l->be) {
        weir__log(WEIR__LOG_ERROR, "io", "unknown I/O backend '%s' (want uring, epoll or auto)",
                  l->opts.io ? l->opts.io : getenv("WEIR_IO"));
        free(l);
        errno = EINVAL;
        return NULL;
    }
    int err = 0;
    l->thread = pthread_self();
    pthread_mutex_init(&l->remote_lock, NULL);
    l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (l->efd < 0) {
        err = errno;
        goto fail_efd;
    }
    weir__wheel_init(&l->wheel, weir_time_now());
    l->spin_ns = weir__env_long("WEIR_SPIN_US", 20, 0, 10000) * 1000;
    weir__stack_pool_init(&l->stacks);
    if ((err = -weir__ctx_thread_init(&l->sched_ctx)) != 0)
        goto fail_ctx;
    if ((err = -weir__stack_guard_thread_init()) != 0)
        goto fail_guard;
#ifdef WEIR_TSAN
    l->tsan_sched = __tsan_get_current_fiber();
#endif
    tl_loop = l;
    /* The backend knows the loop only as the callbacks' argument. */
    weir__io_ctx ctx = {
        .ud = l,
        .done = weir__io_req_done,
        .woken = loop_woken,
        .wake_fd = l->efd,
        .uring_entries = l->opts.uring_entries,
        .uring_sqpoll = l->opts.uring_sqpoll,
        .spin_ns = weir__env_long("WEIR_URING_SPIN_US", 20, 0, 10000) * 1000,
        .forced_submits = &l->forced_submits,
        .spins = &l->spins,
        .spins_caught = &l->spins_caught,
        .io_retries = &l->io_retries,
    };
    int r = l->be->init(&l->be_state, &ctx);
    if (r < 0 && is_auto && l->be == &weir__backend_uring) {
        weir__log(WEIR__LOG_WARN, "io", "io_uring unavailable (%s); using epoll", strerror(-r));
        l->be = &weir__backend_epoll;
        r = l->be->init(&l->be_state, &ctx);
    }
    if (r < 0) {
        err = -r;
        weir__log(WEIR__LOG_ERROR, "io", "cannot start the %s backend: %s", l->be->name,
                  strerror(err));
        goto fail_be;
    }
    if ((r = weir__trace_open(l)) < 0) {
        /* Asked for a trace and cannot write it: say so, run without. */
        weir__log(WEIR__LOG_WARN, "rt.trace", "cannot trace to %s: %s", getenv("WEIR_TRACE"),
                  strerror(-r));
    }
    if (rt) {
        if (weir__deque_init(&l->dq, WEIR__DEQUE_CAPACITY) < 0) {
            err = ENOMEM;
            weir__trace_close(l);
            l->be->fini(l->be_state);
            l->be_state = NULL;
            goto fail_be;
        }
        l->rt = rt;
        if (rt->nthreads > 1)
            l->stacks.shared = &rt->stacks;
        l->index = (uint32_t)index;
        l->rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(index + 1);
    }
    weir__watchdog_add(l);
    return l;

fail_be:
    tl_loop = NULL;
    weir__stack_guard_thread_fini();
fail_guard:
    weir__ctx_thread_fini(&l->sched_ctx);
fail_ctx:
    weir__stack_pool_fini(&l->stacks);
    close(l->efd);
fail_efd:
    pthread_mutex_destroy(&l->remote_lock);
    free(l);
    errno = err;
    return NULL;
}

int weir_loop_stats_get(const weir_loop *l, weir_loop_stats *st)
{
    if (!l || !st)
        return -EINVAL;
    weir_loop *ml = (weir_loop *)l;
    *st = (weir_loop_stats){
        .polls = WEIR__STAT_GET(l->polls),
        .completions = WEIR__STAT_GET(l->completions),
        .waits = WEIR__STAT_GET(l->waits),
        .parks = WEIR__STAT_GET(l->parks),
        .remote_wakes = WEIR__STAT_GET(l->remote_wakes),
        .tasks_alive = __atomic_load_n(&l->ntasks, __ATOMIC_RELAXED),
        /* the run queue is the loop thread's own: not readable elsewhere */
        .runq_len = pthread_equal(l->thread, pthread_self()) ? l->runq.len : 0,
        .io_retries = WEIR__STAT_GET(l->io_retries),
        .forced_submits = WEIR__STAT_GET(l->forced_submits),
        .spins = WEIR__STAT_GET(l->spins),
        .spins_caught = WEIR__STAT_GET(l->spins_caught),
        .coop_yields = WEIR__STAT_GET(l->coop_yields),
        .steals = WEIR__STAT_GET(l->steals),
        .injected = WEIR__STAT_GET(l->injected),
        .lifo_polls = WEIR__STAT_GET(l->lifo_polls),
        .inject_depth = l->rt ? atomic_load_explicit(&l->rt->inject_len, memory_order_relaxed) : 0,
        .deque_len = l->rt ? weir__deque_len(&ml->dq) : 0,
        .lifo_rescues =
            l->rt ? atomic_load_explicit(&l->rt->lifo_rescues, memory_order_relaxed) : 0,
    };
    return 0;
}

weir_loop *weir_loop_current(void)
{
    return weir__loop_current();
}

const char *weir_loop_backend(const weir_loop *l)
{
    return l ? l->be->name : NULL;
}

static int loop_check_caller(weir_loop *l)
{
    if (!l)
        return -EINVAL;
    if (l != tl_loop || l->current || l->in_turn || l->rt)
        return -EPERM; /* wrong thread, inside a task or a timer callback, or a runtime's */
    return 0;
}

int weir_loop_poll(weir_loop *l, int timeout_ms)
{
    int r = loop_check_caller(l);
    if (r < 0)
        return r;
    return loop_turn(l, timeout_ms < 0 ? -1 : (int64_t)timeout_ms * WEIR_MSEC, UNTIL_NONE, NULL);
}

int weir_loop_run(weir_loop *l)
{
    int r = loop_check_caller(l);
    if (r < 0)
        return r;
    while (l->ntasks > 0 || atomic_load_explicit(&l->remote_pending, memory_order_acquire))
        if ((r = loop_turn(l, -1, UNTIL_NO_TASKS, NULL)) < 0)
            return r;
    return 0;
}

void weir_loop_free(weir_loop *l)
{
    if (loop_check_caller(l) < 0)
        return;
    l->shutting_down = 1;
    drain_remote(l);
    for (weir_task *t = l->all_head; t; t = t->all_next)
        weir_task_cancel(t);
    /* Let every cancelled task end. One that ignores its cancellation holds
     * this up: name the stragglers once after a while, so the hang is not
     * silent. */
    int64_t warn_at = weir_time_now() + 5 * WEIR_SEC;
    int warned = 0, errors = 0;
    while (l->ntasks > 0) {
        int64_t to = warned ? -1 : warn_at - weir_time_now();
        if (loop_turn(l, to < 0 && !warned ? 0 : to, UNTIL_NO_TASKS, NULL) < 0 && ++errors > 100)
            break;
        if (!warned && l->ntasks > 0 && weir_time_now() >= warn_at) {
            warned = 1;
            int n = 0;
            for (weir_task *t = l->all_head; t && n < 10; t = t->all_next, n++)
                weir__log(WEIR__LOG_WARN, "rt.loop",
                          "loop shutdown: task '%s' has not ended 5 s after its cancellation",
                          t->name);
        }
    }
    if (l->ntasks > 0) {
        /* The backend keeps failing: freeing the loop now would pull it from
         * under tasks that still reference it. Leak it instead. */
        weir__log(WEIR__LOG_ERROR, "rt.loop", "%zu tasks never ended; the loop is not freed",
                  l->ntasks);
        tl_loop = NULL;
        return;
    }
    weir__loop_destroy(l);
}

/* Free a loop whose tasks have all ended (its own thread). */
void weir__loop_destroy(weir_loop *l)
{
    /* Tasks that ended on other threads of a runtime, handed back after
     * this thread's last turn (every thread has stopped turning by now). */
    atomic_store_explicit(&l->remote_pending, 1, memory_order_relaxed);
    drain_remote(l);
    weir__timers_free_all(l);
    if (l->pool)
        weir__pool_free(l->pool);
    weir__log(WEIR__LOG_DEBUG, "rt.loop",
              "%s loop: %llu polls, %llu completions, %llu waits, %llu forced submits, "
              "%llu I/O retries",
              l->be->name, (unsigned long long)l->polls, (unsigned long long)l->completions,
              (unsigned long long)l->waits, (unsigned long long)l->forced_submits,
              (unsigned long long)l->io_retries);
    weir__watchdog_remove(l);
    weir__trace_close(l);
    /* Ops of cancelled tasks have all been reaped; nothing is in the kernel. */
    l->be->fini(l->be_state);
    l->be_state = NULL;
    weir__task_cache_drain(l);
    if (l->rt)
        weir__sched_fini_loop(l);
    tl_loop = NULL;
    weir__stack_guard_thread_fini();
    weir__ctx_thread_fini(&l->sched_ctx);
    weir__stack_pool_fini(&l->stacks);
    /* A waker on another thread may still be inside loop_wake_remote (it
     * queued the last task, which has since ended): wait for it to leave. */
    pthread_mutex_lock(&l->remote_lock);
    pthread_mutex_unlock(&l->remote_lock);
    close(l->efd);
    pthread_mutex_destroy(&l->remote_lock);
    free(l);
}

/* ---- weir_main --------------------------------------------------------------------- */
struct main_args {
    int (*entry)(int, char **);
    int argc;
    char **argv;
};

static intptr_t main_fiber(void *p)
{
    struct main_args *a = p;
    return a->entry(a->argc, a->argv);
}

int weir_main(int (*entry)(int argc, char **argv), int argc, char **argv)
{
    weir_rt *rt = weir_rt_new(NULL);
    if (!rt) {
        weir__log(WEIR__LOG_ERROR, "rt", "cannot create the runtime: %s", strerror(errno));
        return 1;
    }
    struct main_args a = {entry, argc, argv};
    weir_spawn_opts o = {.name = "main", .stack_size = 256 * 1024, .rt = rt};
    weir_task *t = weir_task_spawn(main_fiber, &a, &o);
    if (!t) {
        weir__log(WEIR__LOG_ERROR, "rt", "cannot spawn main: %s", strerror(errno));
        weir_rt_free(rt);
        return 1;
    }
    intptr_t rc = 1;
    weir_task_join(t, &rc, WEIR_FOREVER);
    weir_rt_free(rt);
    return (int)rc;
}
