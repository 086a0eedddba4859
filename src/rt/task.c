/* SPDX-License-Identifier: Apache-2.0 */
/*
 * task.c - task lifecycle: spawn, run, park, wake, end, join, cancel,
 * cleanup handlers and task-local storage.
 *
 * The state word protocol is described in rt_int.h. Every task holds one
 * reference for its join handle and one for the scheduler while it is
 * alive; a waker on another thread holds its own for the duration of the
 * wake. The last unref frees the task.
 *
 * Fibers run on a pooled stack from their loop. A fiber that returns runs its
 * cleanup handlers on its own stack (so they still see their task), then
 * switches back to the scheduler for good; the scheduler recycles the stack.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "rt/rt_int.h"

#ifdef WEIR_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef WEIR_TSAN
#include <sanitizer/tsan_interface.h>
#endif

/* Sanitizer bookkeeping for stack switches: ASan must learn the new stack's
 * bounds, TSan the logical fiber, or their reports are noise. */

/* ---- task-local storage keys (process-wide) --------------------------------- */
static _Atomic int tls_nkeys;
static void (*tls_dtors[WEIR_TLS_MAX])(void *);

int weir_tls_key_new(weir_tls_key *key, void (*dtor)(void *))
{
    int k = atomic_fetch_add_explicit(&tls_nkeys, 1, memory_order_relaxed);
    if (k >= WEIR_TLS_MAX) {
        atomic_fetch_sub_explicit(&tls_nkeys, 1, memory_order_relaxed);
        return -ENOSPC;
    }
    tls_dtors[k] = dtor;
    *key = k;
    return 0;
}

static weir__task_ext *task_ext(weir_task *t)
{
    if (!t->ext) {
        t->ext = calloc(1, sizeof(*t->ext));
        if (t->ext)
            t->ext->deadline = WEIR_FOREVER;
    }
    return t->ext;
}

void *weir_tls_get(weir_tls_key key)
{
    weir_task *t = weir__task_current();
    if (!t || !t->ext || key < 0 || key >= WEIR_TLS_MAX)
        return NULL;
    return t->ext->tls[key];
}

int weir_tls_set(weir_tls_key key, void *value)
{
    weir_task *t = weir__task_current();
    if (!t || key < 0 || key >= atomic_load_explicit(&tls_nkeys, memory_order_relaxed))
        return -EINVAL;
    weir__task_ext *x = task_ext(t);
    if (!x)
        return -ENOMEM;
    x->tls[key] = value;
    if (key >= x->tls_used)
        x->tls_used = key + 1;
    return 0;
}

int weir_task_defer(void (*fn)(void *), void *arg)
{
    weir_task *t = weir__task_current();
    if (!t || !fn)
        return -EINVAL;
    weir__task_ext *x = task_ext(t);
    weir__defer *d = malloc(sizeof(*d));
    if (!x || !d) {
        free(d);
        return -ENOMEM;
    }
    d->fn = fn;
    d->arg = arg;
    d->next = x->defers;
    x->defers = d;
    return 0;
}

/* Cleanup handlers first (they may still read task-locals), then TLS dtors.
 * A handler registered by a handler runs too. */
static void task_run_cleanup(weir_task *t)
{
    weir__task_ext *x = t->ext;
    if (!x)
        return;
    /* Until nothing is left: a TLS destructor may register a handler or set
     * a value again. */
    for (int again = 1; again;) {
        again = 0;
        while (x->defers) {
            weir__defer *d = x->defers;
            x->defers = d->next;
            d->fn(d->arg);
            free(d);
        }
        for (int i = 0; i < x->tls_used; i++) {
            void *v = x->tls[i];
            x->tls[i] = NULL;
            if (v && tls_dtors[i]) {
                tls_dtors[i](v);
                again = 1;
            }
        }
    }
    free(x);
    t->ext = NULL;
}

/* ---- references and wake ------------------------------------------------------ */
weir_task *weir_task_ref(weir_task *t)
{
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
    return t;
}

#define TASK_CACHE_MAX 1024

static size_t task_size(int kind)
{
    return kind == WEIR__TASK_FIBER ? sizeof(weir__fiber_task) : sizeof(weir_task);
}

/* A freed task goes to the calling thread's loop's cache (the cache is not
 * locked: only its own thread touches it), or to free() outside a loop. */
static void task_free(weir_task *t)
{
    free(t->ext);
    weir_loop *l = weir__loop_current();
    int k = t->kind == WEIR__TASK_FIBER;
    if (l && l->ncached[k] < TASK_CACHE_MAX) {
        t->next = l->cache[k];
        l->cache[k] = t;
        l->ncached[k]++;
        return;
    }
    free(t);
}

void weir__task_cache_drain(weir_loop *l)
{
    for (int k = 0; k < 2; k++) {
        while (l->cache[k]) {
            weir_task *t = l->cache[k];
            l->cache[k] = t->next;
            free(t);
        }
        l->ncached[k] = 0;
    }
}

void weir_task_unref(weir_task *t)
{
    /* acq_rel: the last owner must see every other owner's writes before it
     * frees (the classic refcount release/acquire pairing). */
    if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) == 1)
        task_free(t);
}

void weir__taskq_push(weir__taskq *q, weir_task *t)
{
    t->next = NULL;
    if (q->tail)
        q->tail->next = t;
    else
        q->head = t;
    q->tail = t;
    q->len++;
}

void weir__task_schedule_local(weir_loop *l, weir_task *t)
{
    weir__taskq_push(&l->runq, t);
}

/* Another thread's wake: queue under the lock, then make sure the loop is not
 * asleep in its backend. The seq_cst store of remote_pending and load of
 * sleeping pair with the loop's seq_cst store of sleeping and load of
 * remote_pending (loop.c): at least one side sees the other. */
void weir__loop_push_remote(weir_loop *l, weir_task *t)
{
    /* Everything under the lock, the eventfd write included: once the task
     * is queued its loop may run it to the end and be freed, and
     * weir_loop_free takes this lock first, so it waits for us. */
    pthread_mutex_lock(&l->remote_lock);
    if (t)
        weir__taskq_push(&l->remote, t);
    atomic_store_explicit(&l->remote_pending, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&l->sleeping, memory_order_seq_cst))
        weir__loop_unpark(l);
    pthread_mutex_unlock(&l->remote_lock);
}

/* One eventfd write per sleep (the backend clears wake_sent when it drains
 * the eventfd). */
void weir__loop_unpark(weir_loop *l)
{
    if (!atomic_exchange_explicit(&l->wake_sent, 1, memory_order_acq_rel)) {
        uint64_t one = 1;
        ssize_t r;
        do
            r = write(l->efd, &one, sizeof(one));
        while (r < 0 && errno == EINTR);
        /* EAGAIN means the counter is saturated: the loop will wake anyway. */
    }
}

int weir_loop_wake(weir_loop *l)
{
    if (!l)
        return -EINVAL;
    weir__loop_push_remote(l, NULL);
    return 0;
}

/*
 * Wake: one RMW on the state word, always. The fetch_or is what orders the
 * waker's prior writes (an op's result) before the task's next run: the
 * scheduler's exchange to RUNNING (or its failed CAS to IDLE) reads the
 * value this RMW wrote.
 */
void weir_task_wake(weir_task *t)
{
    uint32_t prev = atomic_fetch_or_explicit(&t->state, WEIR__T_NOTIFIED, memory_order_acq_rel);
    if (prev != WEIR__T_IDLE)
        return; /* already queued, running (will re-run) or done */
    weir__sched_enqueue(t, 1);
}

void weir_task_wake_self(void)
{
    weir_task *t = weir__task_current();
    if (t)
        weir_task_wake(t);
}

/* ---- spawn ------------------------------------------------------------------- */
static weir_task *task_new(const weir_spawn_opts *opts, int kind)
{
    weir_loop *cur = weir__loop_current();
    weir_loop *l = opts && opts->loop ? opts->loop : cur;
    if (opts && opts->rt && !opts->loop) {
        /* Any thread of the runtime: the caller's if it is one. */
        if (!cur || cur->rt != opts->rt)
            l = opts->rt->loops[0];
    }
    if (!l) {
        errno = EINVAL;
        return NULL;
    }
    int k = kind == WEIR__TASK_FIBER;
    weir_task *t;
    if (l == weir__loop_current() && l->cache[k]) {
        t = l->cache[k];
        l->cache[k] = t->next;
        l->ncached[k]--;
    } else if (!(t = malloc(task_size(kind)))) {
        errno = ENOMEM;
        return NULL;
    }
    memset(t, 0, offsetof(weir_task, u));
    atomic_init(&t->state, WEIR__T_IDLE);
    atomic_init(&t->refs, 2); /* handle + scheduler */
    atomic_init(&t->joiner, NULL);
    t->kind = (uint8_t)kind;
    t->loop = l;
    if (opts && opts->pin)
        t->flags |= WEIR__TF_PINNED;
    t->name = opts && opts->name ? opts->name : "task";
    return t;
}

/* Register on the loop's live list and queue. Foreign threads go through the
 * remote queue; the loop links the task when it drains it (loop.c). */
static void task_start(weir_task *t)
{
    weir_loop *l = t->loop;
    atomic_store_explicit(&t->state, WEIR__T_IDLE | WEIR__T_NOTIFIED, memory_order_relaxed);
    if (l->rt)
        weir__sched_task_spawned(l->rt);
    weir_loop *cur = weir__loop_current();
    if (cur && (cur == l || (l->rt && cur->rt == l->rt && !(t->flags & WEIR__TF_PINNED)))) {
        /* From a thread of the same runtime: its queues. A runtime's task
         * joins the live list of the thread that first runs it (task_run),
         * so that a stolen task never touches its spawner's list. */
        t->loop = cur;
        if (!cur->rt)
            weir__loop_adopt(cur, t);
        weir__trace(cur, WEIR__EV_SPAWN, t, 0);
        weir__sched_enqueue(t, 0);
    } else if (l->rt && !(t->flags & WEIR__TF_PINNED)) {
        weir__sched_enqueue(t, 0); /* the injection queue; adopted when taken */
    } else {
        weir__loop_push_remote(l, t);
    }
}

weir_task *weir_task_spawn(weir_task_fn fn, void *arg, const weir_spawn_opts *opts)
{
    if (!fn) {
        errno = EINVAL;
        return NULL;
    }
    weir_task *t = task_new(opts, WEIR__TASK_FIBER);
    if (!t)
        return NULL;
    weir__fiber_task *ft = weir__fiber_of(t);
    t->u.fiber.fn = fn;
    t->u.fiber.arg = arg;
    ft->stack_size = opts && opts->stack_size ? opts->stack_size : WEIR_STACK_DEFAULT;
    ft->stack = NULL;
    /* On the loop's own thread take the stack now so that failure is
     * reported to the spawner; from elsewhere the loop takes it later. */
    if (t->loop == weir__loop_current()) {
        ft->stack = weir__stack_get(&t->loop->stacks, ft->stack_size);
        if (!ft->stack) {
            task_free(t);
            errno = ENOMEM;
            return NULL;
        }
    }
    task_start(t);
    return t;
}

weir_task *weir_task_spawn_stackless(weir_poll_fn poll, void *frame, const weir_spawn_opts *opts)
{
    if (!poll) {
        errno = EINVAL;
        return NULL;
    }
    weir_task *t = task_new(opts, WEIR__TASK_STACKLESS);
    if (!t)
        return NULL;
    t->u.sl.poll = poll;
    t->u.sl.frame = frame;
    task_start(t);
    return t;
}

/* ---- running --------------------------------------------------------------------- */
static void fiber_entry(void *arg)
{
    weir_task *t = arg;
    weir__fiber_task *ft = weir__fiber_of(t);
#ifdef WEIR_ASAN
    __sanitizer_finish_switch_fiber(NULL, &t->loop->asan_sched_bottom, &t->loop->asan_sched_size);
#endif
    t->result = t->u.fiber.fn(t->u.fiber.arg);
    task_run_cleanup(t);
    t->flags |= WEIR__TF_RETURNED; /* tells the scheduler this fiber is finished */
    weir_loop *l = weir__loop_current();
#ifdef WEIR_ASAN
    __sanitizer_start_switch_fiber(NULL, l->asan_sched_bottom, l->asan_sched_size);
#endif
#ifdef WEIR_TSAN
    __tsan_switch_to_fiber(l->tsan_sched, 0);
#endif
    weir__ctx_switch(&ft->ctx, &l->sched_ctx);
    __builtin_trap(); /* a finished fiber is never resumed */
}

/* Switch from the scheduler into fiber t until it parks or returns. */
static void fiber_resume(weir_loop *l, weir_task *t)
{
    weir__fiber_task *ft = weir__fiber_of(t);
    weir__stack *s = ft->stack;
    weir__stack_guard_enter(s, t->name);
#ifdef WEIR_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, s->lo, s->size);
#endif
#ifdef WEIR_TSAN
    __tsan_switch_to_fiber(ft->tsan_fiber, 0);
#endif
    weir__ctx_switch(&l->sched_ctx, &ft->ctx);
#ifdef WEIR_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
    weir__stack_guard_enter(NULL, NULL);
}

void weir__fiber_park(void)
{
    weir_loop *l = weir__loop_current();
    weir__fiber_task *ft = weir__fiber_of(l->current);
#ifdef WEIR_ASAN
    __sanitizer_start_switch_fiber(&ft->asan_fake, l->asan_sched_bottom, l->asan_sched_size);
#endif
#ifdef WEIR_TSAN
    __tsan_switch_to_fiber(l->tsan_sched, 0);
#endif
    weir__ctx_switch(&ft->ctx, &l->sched_ctx);
    /* Resumed, possibly (in a multi-threaded runtime) on another thread: reload
     * the loop through the accessor rather than trusting `l`. */
#ifdef WEIR_ASAN
    l = weir__loop_current();
    __sanitizer_finish_switch_fiber(ft->asan_fake, &l->asan_sched_bottom, &l->asan_sched_size);
#endif
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void task_finish(weir_loop *l, weir_task *t)
{
    if (l->rt)
        WEIR__STAT_ADD(l->ended, 1);
    l->in_finish = 1;
    if (atomic_load_explicit(&t->cancel_req, memory_order_acquire))
        t->flags |= WEIR__TF_CANCEL_SEEN;
    /* seq_cst store of DONE, then seq_cst load of foreign_join; a foreign
     * joiner does the mirror image (join_blocking). One of the two sees the
     * other's store, so either we wake it or it never sleeps. */
    atomic_store_explicit(&t->state, WEIR__T_DONE, memory_order_seq_cst);
    weir_op *j = atomic_exchange_explicit(&t->joiner, WEIR__JOIN_DONE, memory_order_acq_rel);
    if (j)
        weir__op_done(j, 0);
    if (atomic_load_explicit(&t->foreign_join, memory_order_seq_cst)) {
        atomic_fetch_add_explicit(&t->done_seq, 1, memory_order_seq_cst);
        futex_wake_all(&t->done_seq);
    }
    l->in_finish = 0;
    /* Off the live list last: it keeps the scheduler's reference (handed
     * to the task's home thread when that is another one). */
    if (weir__loop_forget(l, t))
        weir_task_unref(t);
}

/* Poll one task taken from the run queue. */
void weir__task_run(weir_loop *l, weir_task *t)
{
    /* acq_rel exchange: clears NOTIFIED and reads every waker's release. */
    atomic_exchange_explicit(&t->state, WEIR__T_RUNNING, memory_order_acq_rel);
    /* The task now belongs to this thread (it may have been stolen). Relaxed
     * atomic: diagnostics read it without synchronising. */
    if (t->loop != l)
        __atomic_store_n(&t->loop, l, __ATOMIC_RELAXED);
    if (WEIR__UNLIKELY(!(t->flags & WEIR__TF_ADOPTED)))
        weir__loop_adopt(l, t); /* a runtime's task, on its first run */
    l->current = t;
    WEIR__STAT_ADD(l->polls, 1);
    l->coop_budget = WEIR__COOP_BUDGET;
    /* release (the name) and relaxed (poll_seq): see rt_int.h */
    atomic_store_explicit(&l->running_name, t->name, memory_order_release);
    atomic_store_explicit(&l->poll_seq, l->polls, memory_order_relaxed);
    weir__trace(l, WEIR__EV_POLL, t, 0);
    int ready;
    if (t->kind == WEIR__TASK_FIBER) {
        weir__fiber_task *ft = weir__fiber_of(t);
        if (WEIR__UNLIKELY(!(t->flags & WEIR__TF_STARTED))) {
            if (!ft->stack)
                ft->stack = weir__stack_get(&l->stacks, ft->stack_size);
            if (!ft->stack) {
                weir__log(WEIR__LOG_ERROR, "rt.task",
                          "no stack for task %s: %s (each fiber stack is two memory mappings; "
                          "many fibers may need a higher vm.max_map_count)",
                          t->name, strerror(errno));
                t->result = -ENOMEM;
                l->current = NULL;
                task_finish(l, t);
                return;
            }
            weir__ctx_make(&ft->ctx, ft->stack->lo, ft->stack->size, fiber_entry, t);
#ifdef WEIR_TSAN
            ft->tsan_fiber = __tsan_create_fiber(0);
#endif
            t->flags |= WEIR__TF_STARTED;
        }
        fiber_resume(l, t);
        ready = (t->flags & WEIR__TF_RETURNED) != 0;
        if (ready) {
            weir__stack_put(&l->stacks, ft->stack);
            ft->stack = NULL;
#ifdef WEIR_TSAN
            __tsan_destroy_fiber(ft->tsan_fiber);
#endif
        }
    } else {
        intptr_t res = 0;
        ready = t->u.sl.poll(t->u.sl.frame, &res) == WEIR_READY;
        if (ready) {
            t->result = res;
            task_run_cleanup(t);
        }
    }
    l->current = NULL;
    atomic_store_explicit(&l->running_name, NULL, memory_order_relaxed);
    if (ready) {
        weir__trace(l, WEIR__EV_READY, t, (uint64_t)t->result);
        task_finish(l, t);
        return;
    }
    weir__trace(l, WEIR__EV_PENDING, t, 0);
    /* Park: RUNNING -> IDLE unless a wake arrived meanwhile (NOTIFIED). */
    uint32_t expect = WEIR__T_RUNNING;
    if (!atomic_compare_exchange_strong_explicit(&t->state, &expect, WEIR__T_IDLE,
                                                 memory_order_acq_rel, memory_order_acquire)) {
        /* Woken while it ran (or it yielded): the back of this thread's
         * FIFO, so that a yield lets everything queued here run first (or
         * the deque, for an idle thread to take; sched.c). */
        atomic_store_explicit(&t->state, WEIR__T_IDLE | WEIR__T_NOTIFIED, memory_order_relaxed);
        weir__sched_requeue(l, t);
    }
}

/* ---- queries, yield, cancel ------------------------------------------------------- */
weir_task *weir_task_current(void)
{
    return weir__task_current();
}

const char *weir_task_name(const weir_task *t)
{
    return t ? t->name : NULL;
}

uint64_t weir_task_id(const weir_task *t)
{
    return (uint64_t)(uintptr_t)t;
}

int weir_task_cancelled(void)
{
    weir_task *t = weir__task_current();
    return t && weir__task_cancel_requested(t);
}

int64_t weir_task_set_deadline(int64_t deadline)
{
    weir_task *t = weir__task_current();
    if (!t)
        return WEIR_FOREVER;
    int64_t old = weir__task_deadline(t);
    if (old == deadline)
        return old;
    weir__task_ext *x = task_ext(t);
    if (x)
        x->deadline = deadline;
    return old;
}

int weir_task_yield(void)
{
    weir_task *t = weir__task_current();
    if (!t || t->kind != WEIR__TASK_FIBER)
        return -EINVAL;
    /* Yield even when cancelled: a cancelled task spinning on yield must
     * still let the loop run (shutdown cancels every task). */
    weir_task_wake(t);
    weir__fiber_park();
    return weir__task_cancel_requested(t) ? -ECANCELED : 0;
}

int weir_task_cancel(weir_task *h)
{
    if (!h)
        return -EINVAL;
    /* Release: the cancelled task's acquire load of cancel_req happens after
     * the wake below re-runs it. */
    atomic_store_explicit(&h->cancel_req, 1, memory_order_release);
    weir_loop *l = weir__loop_current();
    if (l)
        weir__trace(l, WEIR__EV_CANCEL, h, 0);
    weir_task_wake(h);
    return 0;
}

/* ---- join ------------------------------------------------------------------------- */
int weir_task_join_start(weir_op *op, weir_task *h, int64_t deadline)
{
    if (!h)
        return -EINVAL;
    int r = weir__op_begin(op, WEIR__OP_JOIN, deadline);
    if (r < 0)
        return r;
    op->flags |= WEIR__OP_REMOTE;
    op->u.ptr = h;
    if (r > 0)
        return 0;
    weir_op *expect = NULL;
    if (!atomic_compare_exchange_strong_explicit(&h->joiner, &expect, op, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        if (expect == WEIR__JOIN_DONE) {
            weir__op_done(op, 0);
            return 0;
        }
        weir__op_done(op, -EBUSY); /* someone else is already joining */
    }
    return 0;
}

/* The joiner gave up: take the op back unless the task's end already did. */
void weir__op_join_cancel(weir_op *op)
{
    weir_task *h = op->u.ptr;
    weir_op *expect = op;
    if (atomic_compare_exchange_strong_explicit(&h->joiner, &expect, NULL, memory_order_acq_rel,
                                                memory_order_acquire))
        weir__op_done(op, -ECANCELED);
    /* else task_finish took it and completes it now (REMOTE op: safe). */
}

intptr_t weir_task_join_result(weir_task *h)
{
    return h ? h->result : 0;
}

static int join_collect(weir_task *h, intptr_t *result)
{
    if (result)
        *result = h->result;
    int r = (h->flags & WEIR__TF_CANCEL_SEEN) ? -ECANCELED : 0;
    weir_task_unref(h);
    return r;
}

/* From a thread outside the runtime: sleep on the task's done_seq futex. */
static int join_blocking(weir_task *h, intptr_t *result, int64_t deadline)
{
    atomic_store_explicit(&h->foreign_join, 1, memory_order_seq_cst);
    for (;;) {
        uint32_t seq = atomic_load_explicit(&h->done_seq, memory_order_seq_cst);
        if ((atomic_load_explicit(&h->state, memory_order_seq_cst) & WEIR__T_STATE_MASK) ==
            WEIR__T_DONE)
            break;
        struct timespec ts, *tsp = NULL;
        if (deadline != WEIR_FOREVER) {
            if (weir_time_now() >= deadline)
                return -ETIMEDOUT;
            ts.tv_sec = deadline / WEIR_SEC;
            ts.tv_nsec = deadline % WEIR_SEC;
            tsp = &ts;
        }
        /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline. */
        syscall(SYS_futex, &h->done_seq, FUTEX_WAIT_BITSET_PRIVATE, seq, tsp, NULL,
                FUTEX_BITSET_MATCH_ANY);
    }
    /* DONE was stored before the joiner op exchange; wait for task_finish to
     * be past its last use of the task (it drops its reference last). */
    return join_collect(h, result);
}

int weir_task_join(weir_task *h, intptr_t *result, int64_t deadline)
{
    if (!h)
        return -EINVAL;
    weir_task *self = weir__task_current();
    if (!self) {
        /* Blocking the very thread that must run the task would never end. */
        if (__atomic_load_n(&h->loop, __ATOMIC_RELAXED) == weir__loop_current() &&
            (atomic_load_explicit(&h->state, memory_order_acquire) & WEIR__T_STATE_MASK) !=
                WEIR__T_DONE)
            return -EDEADLK;
        return join_blocking(h, result, deadline);
    }
    if (self == h || self->kind != WEIR__TASK_FIBER)
        return -EINVAL;
    weir_op op;
    int r = weir_task_join_start(&op, h, deadline);
    if (r < 0)
        return r;
    r = (int)weir_op_wait(&op);
    if (r < 0)
        return r;
    return join_collect(h, result);
}

void weir_task_detach(weir_task *h)
{
    if (h)
        weir_task_unref(h);
}
