/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rt_int.h - the runtime's private state: tasks, loops, leaf ops (private).
 *
 * Task state. One atomic word per task, so that wake() from any thread and
 * the scheduler agree without a lock. It holds one of IDLE, RUNNING, DONE
 * plus the NOTIFIED bit ("a poll is owed"):
 *
 *     IDLE --wake--> IDLE|NOTIFIED (queued) --pick--> RUNNING --park--> IDLE
 *                          ^                            |   \
 *                          |                      wake  |    \--end--> DONE
 *                          |                            v
 *                          +----------park------- RUNNING|NOTIFIED
 *
 * wake() is a single fetch_or of NOTIFIED; only the waker that finds the
 * word exactly IDLE queues the task, so a task is queued at most once and
 * wake() is idempotent. The scheduler's exchange to RUNNING clears the bit;
 * parking is a CAS RUNNING -> IDLE that fails when a wake set NOTIFIED
 * meanwhile, and the task is then re-queued. That is the whole
 * no-lost-wake-up argument: the waker and the parking scheduler race on one
 * word, and whichever comes second sees the other's write. (A wake after the
 * end leaves DONE|NOTIFIED, which readers mask off.)
 *
 * Leaf ops. A task starts an op (weir__op_begin), the op's source completes
 * it (weir__op_done: result + DONE flag, then wake the waiter), and the task
 * collects it (weir_op_wait / weir_op_poll -> op_finish). Deadline and cancel
 * requests do not complete an op directly; they ask its source to finish it
 * early (weir__op_cancel), so an in-kernel request is always reaped first.
 */
#ifndef WEIR_RT_INT_H
#define WEIR_RT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/log.h"
#include "weir/rt.h"
#include "rt/ctx.h"
#include "rt/deque.h"
#include "rt/stack.h"
#include "rt/timer_wheel.h"

#define WEIR__CONTAINER_OF(p, type, member) ((type *)((char *)(p)-offsetof(type, member)))
#define WEIR__UNLIKELY(x)                   __builtin_expect(!!(x), 0)
#define WEIR__LIKELY(x)                     __builtin_expect(!!(x), 1)

/* ---- task ------------------------------------------------------------------ */
enum {
    WEIR__T_IDLE = 0,
    WEIR__T_RUNNING = 2,
    WEIR__T_DONE = 3,
    WEIR__T_STATE_MASK = 3,
    WEIR__T_NOTIFIED = 4, /* woken while RUNNING */
};

enum { WEIR__TASK_FIBER = 1, WEIR__TASK_STACKLESS = 2 };

/* Rarely used per-task state, allocated on first use. */
typedef struct weir__defer {
    struct weir__defer *next;
    void (*fn)(void *);
    void *arg;
} weir__defer;

typedef struct weir__task_ext {
    weir__defer *defers;
    int64_t deadline; /* weir_task_set_deadline(); WEIR_FOREVER without ext */
    int tls_used;     /* highest key + 1 set */
    void *tls[WEIR_TLS_MAX];
} weir__task_ext;

#define WEIR__JOIN_DONE ((weir_op *)(uintptr_t)1)

/* weir_task.flags (owned by the loop thread running the task) */
enum {
    WEIR__TF_ADOPTED = 1,     /* on its loop's live list */
    WEIR__TF_STARTED = 2,     /* fiber context made */
    WEIR__TF_RETURNED = 4,    /* fiber function returned */
    WEIR__TF_CANCEL_SEEN = 8, /* ended with a cancel request pending */
    WEIR__TF_PINNED = 16,     /* runs only on `loop` (weir_spawn_opts.pin) */
};

/*
 * The common task header; a stackless task is exactly this (96 bytes on
 * 64-bit), a fiber is a weir__fiber_task that extends it. Rarely used state
 * (cleanup handlers, task-locals, the task deadline) lives in `ext`,
 * allocated on first use, so that a million small tasks stay small.
 */
struct weir_task {
    _Atomic uint32_t state;
    _Atomic uint32_t refs;
    _Atomic uint32_t done_seq;    /* futex word for joiners outside the runtime */
    _Atomic uint8_t cancel_req;   /* weir_task_cancel() was called */
    _Atomic uint8_t foreign_join; /* a thread outside the runtime waits on done_seq */
    uint8_t kind;
    uint8_t flags; /* WEIR__TF_* */
    weir_loop *loop;
    weir_task *next;                /* run-queue link */
    weir_task *all_prev, *all_next; /* loop's list of live tasks */
    const char *name;
    intptr_t result;
    _Atomic(weir_op *) joiner; /* NULL, a waiting join op, or WEIR__JOIN_DONE */
    weir__task_ext *ext;
    /* Multi-threaded runtime. `anchors` counts the task's ops bound to the
     * loop that started them (I/O, timers, deadlines: see op.c); while it is
     * non-zero, or the task is PINNED, the task is queued only on `loop`.
     * `home` is the index of the thread whose live list holds the task.
     * Both are written by the thread running the task; a waker reads them
     * only after its wake found the task IDLE, which orders the reads after
     * the task's last park. */
    uint32_t anchors;
    uint32_t home;
    union {
        struct {
            weir_poll_fn poll;
            void *frame;
        } sl;
        struct {
            weir_task_fn fn;
            void *arg;
        } fiber;
    } u;
};

typedef struct weir__fiber_task {
    struct weir_task task;
    weir__ctx ctx;
    weir__stack *stack;
    size_t stack_size;
#ifdef WEIR_ASAN
    void *asan_fake;
#endif
#ifdef WEIR_TSAN
    void *tsan_fiber;
#endif
} weir__fiber_task;

static inline weir__fiber_task *weir__fiber_of(weir_task *t)
{
    return (weir__fiber_task *)t;
}

static inline int64_t weir__task_deadline(const weir_task *t)
{
    return t->ext ? t->ext->deadline : WEIR_FOREVER;
}

/* ---- spinlock ----------------------------------------------------------------
 * For critical sections of a few dozen instructions; a futex mutex would
 * double the cost of an uncontended channel operation. After a short spin
 * the waiter yields its CPU, so a preempted holder (2 cores, many threads)
 * gets to run. */
#include <sched.h>
typedef struct weir__spin {
    _Atomic int v;
} weir__spin;

static inline void weir__spin_init(weir__spin *l)
{
    atomic_init(&l->v, 0);
}

static inline void weir__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline void weir__spin_lock(weir__spin *l)
{
    for (;;) {
        /* acquire: the critical section sees the previous holder's writes */
        if (!atomic_exchange_explicit(&l->v, 1, memory_order_acquire))
            return;
        for (int i = 0; atomic_load_explicit(&l->v, memory_order_relaxed); i++) {
            if (i >= 64) {
                sched_yield();
                i = 0;
            } else {
                weir__cpu_relax();
            }
        }
    }
}

static inline void weir__spin_unlock(weir__spin *l)
{
    /* release: publishes the critical section to the next holder */
    atomic_store_explicit(&l->v, 0, memory_order_release);
}

/* ---- loop ------------------------------------------------------------------ */
typedef struct weir__backend weir__backend;

typedef struct weir__taskq {
    weir_task *head, *tail;
    size_t len;
} weir__taskq;

struct weir_loop {
    pthread_t thread;
    weir__taskq runq;
    /* Wakes from other threads land here (under remote_lock) and are moved
     * to runq by the loop. */
    pthread_mutex_t remote_lock;
    weir__taskq remote;
    _Atomic int remote_pending;
    /* Cross-thread wake: `sleeping` is set (seq_cst) before the loop blocks in
     * the backend; a waker that sees it writes the eventfd once
     * (`wake_sent`). See weir__loop_wake_remote(). */
    _Atomic int sleeping;
    _Atomic int wake_sent;
    int efd;

    const weir__backend *be;
    void *be_state;

    weir__wheel wheel;
    struct weir_timer *cb_timers; /* armed callback timers (freed with the loop) */
    weir__stack_pool stacks;
    weir__ctx sched_ctx; /* the loop thread's own context */
    weir_task *current;
    weir_task *all_head; /* live tasks (for shutdown) */
    size_t ntasks;
    /* Freed task blocks kept for reuse, one list per kind (linked through
     * `next`); spawn/join of small tasks then never reaches malloc. */
    weir_task *cache[2];
    size_t ncached[2];
    int shutting_down;
    int in_turn;             /* inside loop_turn: the loop may not be re-entered */
    struct weir__pool *pool; /* blocking pool, created on first use */
    int64_t spin_ns;         /* spin before sleeping after a busy turn (WEIR_SPIN_US) */
    weir_loop_opts opts;

    /* Multi-threaded runtime (sched.c); rt is NULL on a standalone loop.
     * The live list (all_head, ntasks) stays this thread's own: a task that
     * ends on another thread is handed back in `forgets` (under
     * remote_lock), and shutdown asks each thread to cancel its own tasks
     * (cancel_all) and to name those that do not end (report_stragglers). */
    struct weir_rt *rt;
    uint32_t index; /* this thread's index in rt */
    weir__taskq forgets;
    _Atomic int cancel_all, report_stragglers;
    weir__deque dq;            /* stealable: spawned and woken tasks */
    _Atomic(weir_task *) lifo; /* the most recently woken task (sched.c) */
    uint64_t rng;              /* victim choice */
    int lifo_streak;           /* LIFO polls in a row */
    int in_finish;             /* inside task_finish: a joiner it wakes may take the LIFO slot */
    /* Tasks spawned from this thread and tasks ended on it (this thread
     * writes them; weir_rt_tasks_alive() sums them over the threads). */
    uint64_t spawned, ended;
    uint64_t steals, injected, lifo_polls;

    /* Published for the blocking watchdog (watchdog.c), written by the loop
     * thread only: poll_seq counts task polls, running_name is the name of
     * the task being polled (NULL between polls). poll_seq is relaxed: the
     * watchdog samples it and tolerates staleness of one period.
     * running_name is stored with release and loaded with acquire: the
     * watchdog reads the string's bytes, which another thread wrote (the
     * one that named the task), so it needs that write ordered before. */
    _Atomic uint64_t poll_seq;
    _Atomic(const char *) running_name;
    struct weir__trace *trace; /* WEIR_TRACE: task lifecycle events, or NULL */

    int coop_budget; /* op results the running task may still take (op.c) */

    /* statistics (loop thread only; see weir_loop_stats) */
    uint64_t polls, completions, forced_submits, parks, remote_wakes, coop_yields;
    uint64_t spins, spins_caught; /* the io_uring backend's spins before sleeping */
    uint64_t waits;               /* backend wait calls (each one submit for io_uring) */
    uint64_t io_retries;          /* ops re-issued after -EAGAIN (io_uring + O_NONBLOCK) */
#ifdef WEIR_ASAN
    const void *asan_sched_bottom;
    size_t asan_sched_size;
#endif
#ifdef WEIR_TSAN
    void *tsan_sched; /* the loop thread's own TSan fiber */
#endif
};

/* Statistics counters: written by their loop's thread only, read by
 * weir_loop_stats_get() from any thread. Relaxed atomic accesses (plain
 * loads and stores on the machines weir runs on) keep those reads
 * race-free without a locked instruction on the hot path. */
#define WEIR__STAT_ADD(field, n) __atomic_store_n(&(field), (field) + (n), __ATOMIC_RELAXED)
#define WEIR__STAT_GET(field)    __atomic_load_n(&(field), __ATOMIC_RELAXED)

/* ---- leaf op flags ----------------------------------------------------------- */
enum {
    WEIR__OP_ACTIVE = 1u << 0,     /* started, not yet collected */
    WEIR__OP_DONE = 1u << 1,       /* result is final (release store) */
    WEIR__OP_WAITING = 1u << 2,    /* waiter parked on it: done() must wake */
    WEIR__OP_CANCELLING = 1u << 3, /* cancel requested from the source */
    WEIR__OP_REMOTE = 1u << 4,     /* may complete on another thread */
    WEIR__OP_UNCANCELLABLE = 1u << 5,
    WEIR__OP_PART = 1u << 6,       /* a wait-any part: done() reports to the parent */
    WEIR__OP_ANCHORED = 1u << 7,   /* counted in task->anchors until finished */
    WEIR__OP_CANCEL_REQ = 1u << 8, /* weir_op_cancel() from another thread */
};

enum {
    WEIR__OP_NONE = 0,
    WEIR__OP_SLEEP,
    WEIR__OP_JOIN,
    WEIR__OP_BLOCKING,
    WEIR__OP_INTERVAL,
    WEIR__OP_ANY,
    WEIR__OP_CUSTOM, /* cancelled through the weir__op_vt in u.ptr (sync, later layers) */
    WEIR__OP_IO,     /* a weir_io_op whose request the loop's backend carries (io_ops.c) */
};

enum { WEIR__CANCEL_NONE = 0, WEIR__CANCEL_TASK = 1, WEIR__CANCEL_DEADLINE = 2 };

/* Operations of a WEIR__OP_CUSTOM op. cancel() runs on the waiter's loop
 * thread when the op's deadline passes or its task is cancelled, once; it
 * must lead to exactly one weir__op_done() (now, or later by the op's
 * source when the source got there first). */
typedef struct weir__op_vt {
    void (*cancel)(weir_op *op);
} weir__op_vt;

static inline uint32_t weir__op_flags(const weir_op *op)
{
    return __atomic_load_n(&op->flags, __ATOMIC_ACQUIRE);
}

/* Bind the op's task to the current loop until the op is finished: the op
 * holds something of this loop (an in-flight I/O request on its ring, a
 * timer on its wheel, a job of its blocking pool) that only this thread may
 * touch, so the task must be resumed here (sched.c). The task's thread. */
/* t->anchors is written by the thread of the loop the task is anchored to
 * (only that one runs it meanwhile; a callback timer's release may run
 * there while the task is parked) and read by wakers on any thread:
 * relaxed atomic accesses, no read-modify-write needed. */
static inline void weir__task_anchor(weir_task *t, int delta)
{
    __atomic_store_n(&t->anchors, t->anchors + (uint32_t)delta, __ATOMIC_RELAXED);
}

static inline uint32_t weir__task_anchors(const weir_task *t)
{
    return __atomic_load_n(&t->anchors, __ATOMIC_RELAXED);
}

static inline void weir__op_anchor(weir_op *op)
{
    if (!(__atomic_load_n(&op->flags, __ATOMIC_RELAXED) & WEIR__OP_ANCHORED)) {
        __atomic_fetch_or(&op->flags, WEIR__OP_ANCHORED, __ATOMIC_RELAXED);
        weir__task_anchor(op->task, 1);
    }
}

/* The effective deadline an op began with (its own or its task's). */
static inline int64_t weir__op_deadline(const weir_op *op)
{
    return op->timer.deadline;
}

/* The I/O op around an op of kind WEIR__OP_IO or WEIR__OP_ANY (weir/io.h). */
struct weir_io_op;
static inline struct weir_io_op *weir__io_of(weir_op *op)
{
    return (struct weir_io_op *)(void *)op;
}

/* The loop's I/O backend reports a request's end here (the `done` of the
 * weir__io_ctx the loop gives it, io_ops.c): the op around the request is
 * completed. */
struct weir__io_req;
void weir__io_req_done(void *ud, struct weir__io_req *req, int64_t res);

/* Polls per loop turn before the backend is looked at again (Tokio uses
 * 61). trace.c relies on it too: after this many polls a turn waits in the
 * backend before the next poll. */
#define WEIR__TURN_BUDGET 64

/* Op results a task may take in one poll before it must yield (as Tokio's
 * coop budget). */
#define WEIR__COOP_BUDGET 128

/* ---- the multi-threaded runtime (sched.c) ----------------------------------- */
#define WEIR__RT_MAX_THREADS 256
#define WEIR__DEQUE_CAPACITY 1024

struct weir_rt {
    int nthreads;
    weir_loop **loops; /* nthreads, each set by its thread before startup ends */
    pthread_t *threads;
    /* Injection queue: spawns and wakes from outside the runtime. */
    pthread_mutex_t inject_lock;
    weir__taskq inject;
    _Atomic size_t inject_len;
    /* Parking (see sched.c): threads about to sleep or asleep, threads
     * searching for work, and a wake-up in flight. */
    _Atomic int nidle;
    _Atomic int nsearching;
    _Atomic int notify_pending;
    _Atomic uint64_t foreign_spawned; /* spawns from outside the runtime */
    _Atomic int shutting_down;
    _Atomic int stop;
    int use_lifo;                  /* WEIR_LIFO (default 1) */
    _Atomic uint64_t lifo_rescues; /* tasks the watchdog moved out of a stalled LIFO slot */
    struct weir__pool *pool;       /* blocking pool shared by the threads (blocking.c) */
    weir__stack_shared stacks;     /* fiber stacks traded between the threads' pools */
    weir_rt_opts opts;
    /* startup */
    pthread_mutex_t start_lock;
    pthread_cond_t start_cond;
    int started, start_err;
    int nloops, nstopped, teardown; /* shutdown: see rt_stop() */
};

/* Whether the running task t has a cancel request. A runtime being shut
 * down counts as one for every task: the request otherwise travels through
 * the thread holding the task on its live list, which a busy task may keep
 * from passing it on. */
static inline int weir__task_cancel_requested(weir_task *t)
{
    if (atomic_load_explicit(&t->cancel_req, memory_order_acquire))
        return 1;
    struct weir_rt *rt = t->loop->rt;
    if (WEIR__UNLIKELY(rt && atomic_load_explicit(&rt->shutting_down, memory_order_relaxed))) {
        atomic_store_explicit(&t->cancel_req, 1, memory_order_release);
        return 1;
    }
    return 0;
}

/* Queue a runnable (IDLE|NOTIFIED) task. `woken`: by a wake, not a spawn
 * (decides the LIFO slot and the trace event). */
void weir__sched_enqueue(weir_task *t, int woken);
/* A task that ran here goes back in line (yield, woken while running). */
void weir__sched_requeue(weir_loop *l, weir_task *t);
/* Start of a turn: take a share of the injection queue. */
void weir__sched_turn_begin(weir_loop *l);
/* Inside a turn: the next task this thread should run, or NULL. */
weir_task *weir__sched_next(weir_loop *l);
/* The oldest task of l's own deque when it holds several (fairness), or NULL. */
weir_task *weir__sched_oldest(weir_loop *l);
/* Become one of the searching threads (at most half): 1, or 0 if too many. */
int weir__sched_try_search(weir_loop *l);
void weir__sched_end_search(weir_loop *l);
/* Idle: look for work elsewhere (injection queue, other threads' deques).
 * A task found is queued locally; returns 1 then. */
int weir__sched_search(weir_loop *l);
/* Park protocol around a blocking backend wait: enter returns 0 when work
 * showed up meanwhile (do not block), 1 otherwise; leave always follows. */
int weir__sched_park_enter(weir_loop *l);
void weir__sched_park_leave(weir_loop *l);
/* Count a spawn into rt by the calling thread. */
void weir__sched_task_spawned(struct weir_rt *rt);
void weir__sched_rescue_lifo(weir_loop *l);
void weir__sched_fini_loop(weir_loop *l);

/* One turn of a runtime thread's loop (loop.c), and its teardown once the
 * runtime has stopped. */
int weir__loop_turn(weir_loop *l, int64_t timeout_ns);
weir_loop *weir__loop_new_rt(const weir_loop_opts *opts, struct weir_rt *rt, int index);
void weir__loop_destroy(weir_loop *l);
/* Wake a loop blocked in its backend (any thread). */
void weir__loop_unpark(weir_loop *l);
/* Queue t on loop l from another thread (remote queue). */
void weir__loop_push_remote(weir_loop *l, weir_task *t);
weir_task *weir__taskq_pop(weir__taskq *q);
void weir__taskq_push(weir__taskq *q, weir_task *t);

/* ---- runtime internals shared across files --------------------------------- */
weir_loop *weir__loop_current(void);
weir_task *weir__task_current(void);

/* The blocking-style (fiber) calls refuse a stackless task before they
 * start anything: they could not wait, and an op started on the caller's
 * stack would outlive it. (Stackless tasks use the *_start forms.) */
static inline int weir__stackless_caller(void)
{
    weir_task *t = weir__task_current();
    return t && t->kind != WEIR__TASK_FIBER;
}

/* Begin an op for the current task: sets task/deadline/kind, checks for a
 * pending cancel (completes at once with -ECANCELED) and arms the deadline
 * timer. Returns 0 when the caller should now hand the op to its source, or
 * 1 when it is already complete (cancelled). -EINVAL outside a task. */
int weir__op_begin(weir_op *op, int kind, int64_t deadline);
/* The same; with shielded != 0 the op ignores the task's cancellation and
 * deadline (for cleanup that must finish, such as re-taking a mutex). */
int weir__op_begin_ex(weir_op *op, int kind, int64_t deadline, int shielded);
/* Complete: store result, mark DONE, wake the waiter if it parked. Loop
 * thread only unless the op is REMOTE (then any thread). */
void weir__op_done(weir_op *op, int64_t result);
/* Ask the op's source to finish early; reason is WEIR__CANCEL_*. */
void weir__op_cancel(weir_op *op, int reason);

/* Tasks (task.c) */
void weir__task_schedule_local(weir_loop *l, weir_task *t);
void weir__task_run(weir_loop *l, weir_task *t);
void weir__task_cache_drain(weir_loop *l);
void weir__op_join_cancel(weir_op *op);
/* Loop bookkeeping (loop.c): the live-task list. forget() returns 1 when
 * the task was unlinked here (the caller drops the scheduler's reference),
 * 0 when it was handed to its home thread, which drops it. */
void weir__loop_adopt(weir_loop *l, weir_task *t);
int weir__loop_forget(weir_loop *l, weir_task *t);
/* Suspend the current fiber until woken. */
void weir__fiber_park(void);

/* Timers on the loop's wheel (loop thread). */
void weir__timer_arm(weir_loop *l, weir_timer_node *n, int64_t deadline);
void weir__timer_disarm(weir_loop *l, weir_timer_node *n);
size_t weir__timers_expire(weir_loop *l);
void weir__timers_free_all(weir_loop *l); /* callback timers still armed */
void weir__interval_detach(weir_op *op);
int weir__interval_cancelled(const weir_op *op);

/* Blocking pool (blocking.c) */
/* weir_blocking_start_ex whose wait neither the task's cancellation nor
 * its deadline cuts short: the op ends when the job has run (or the pool
 * dropped it), for work that must finish once started - the engine's
 * storage calls (state/storage.c), as the synchronous writes they replace
 * did. */
int weir__blocking_start_shielded(weir_op *op, weir_blocking_fn fn, void *arg,
                                  weir_blocking_discard_fn discard);
/* fn(arg) on the blocking pool, shielded, the calling fiber waiting: the
 * call returns only once fn has run (its result) or the pool has dropped
 * the job unrun (a negative errno), so arg may live on the caller's stack
 * and fn may use what the caller owns. Off the runtime (not a task) fn runs
 * inline, where blocking hurts nobody; a stackless task gets -EINVAL and
 * fn does not run. For the engine's file work that is not a blob of its
 * store (stream/filesink.c, the check of a snapshot image in
 * state/snapshot.c). */
int64_t weir__blocking_run_shielded(weir_blocking_fn fn, void *arg);
struct weir__pool;
void weir__op_blocking_cancel(weir_op *op);
void weir__pool_free(struct weir__pool *p);

/* Wait-any (io_ops.c) */
void weir__op_any_part_done(weir_op *part);
void weir__op_any_cancel(weir_op *op);

/* Tracing (trace.c). WEIR_TRACE=<file> records task lifecycle events of
 * every loop into that file (see docs/runtime.md for the format). The hooks
 * cost one predictable branch when tracing is off. `arg` is event-specific
 * (WAKE: 1 when the wake came from another thread). */
enum {
    WEIR__EV_SPAWN = 1,
    WEIR__EV_POLL,    /* a poll begins */
    WEIR__EV_PENDING, /* the poll ended with the task suspended */
    WEIR__EV_WAKE,
    WEIR__EV_READY, /* the task ended */
    WEIR__EV_CANCEL,
    WEIR__EV_STEAL, /* taken from another thread's deque (arg: its index) */
};
int weir__trace_open(weir_loop *l);   /* from weir_loop_new; 0 or -errno */
void weir__trace_close(weir_loop *l); /* from weir_loop_free: flushes */
void weir__trace_emit(weir_loop *l, int ev, const weir_task *t, uint64_t arg);
static inline void weir__trace(weir_loop *l, int ev, const weir_task *t, uint64_t arg)
{
    if (WEIR__UNLIKELY(l->trace != NULL))
        weir__trace_emit(l, ev, t, arg);
}

/* Blocking watchdog (watchdog.c): one process-wide thread, running while
 * any loop exists, that logs the name of a task keeping its loop's thread
 * busy past WEIR_BLOCKING_WARN_MS (default 100), once per such poll. */
int weir__watchdog_add(weir_loop *l);
void weir__watchdog_remove(weir_loop *l);

#endif
