/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/rt.h - the runtime: tasks, wakers, leaf operations, timers,
 * cancellation, the blocking pool and the event loop.
 *
 * A *task* is the unit of scheduling. It comes in two kinds that share one
 * scheduler, one waker and the same leaf operations:
 *
 *   - a *fiber* runs a plain C function on its own small stack (64 KiB by
 *     default, mmap'd with a guard page). Blocking-style calls such as
 *     weir_time_sleep() or weir_io_read() park the fiber until the operation
 *     completes; the thread runs other tasks meanwhile.
 *   - a *stackless* task is a poll function over a frame the caller owns. It
 *     returns WEIR_PENDING when it must wait and WEIR_READY when it is done;
 *     the WEIR_BEGIN / WEIR_AWAIT / WEIR_YIELD / WEIR_RETURN macros below turn
 *     a C function into such a state machine. It costs no stack, so millions
 *     of them fit in memory.
 *
 * A *leaf operation* (weir_op) is one thing a task waits for: a timer, an I/O
 * request, a join, a blocking job. A fiber starts an op and waits for it
 * (weir_op_wait); a stackless task starts it and polls it (weir_op_poll,
 * usually through WEIR_AWAIT). Every op carries a deadline and observes
 * cancellation: it then ends with -ETIMEDOUT or -ECANCELED.
 *
 * An op that the kernel may still touch (an in-flight read into your buffer)
 * is never reported done before the kernel has let go of it: cancelling or
 * timing out an io_uring request is itself asynchronous, so weir_op_wait and
 * weir_op_poll keep waiting until the cancelled request's completion arrives.
 * Your buffer, and the fiber stack frame holding the op, stay valid until
 * then without any action on your part.
 *
 * The *loop* (weir_loop) is one scheduler thread's executor: a run queue, an
 * I/O backend (io_uring by default, epoll as the fallback, chosen by
 * WEIR_IO=uring|epoll|auto), a hierarchical timer wheel and a cross-thread
 * wake channel (an eventfd). weir_main() makes one, runs an async main in it
 * and returns its exit code; weir_loop_new() and weir_loop_poll() let a
 * program drive the loop from its own main loop instead.
 *
 * Errors: functions return 0 (or a count) on success and a negative errno on
 * failure; constructors return NULL and set errno. Failures errno has no
 * word for have weir's own codes (weir/error.h). weir_strerror() gives the
 * text for any code this library returns.
 */
#ifndef WEIR_RT_H
#define WEIR_RT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weir_loop weir_loop;
typedef struct weir_task weir_task;
typedef struct weir_rt weir_rt;

/* ---- time ---------------------------------------------------------------
 * Times are CLOCK_MONOTONIC nanoseconds. A deadline is an absolute time;
 * WEIR_FOREVER means none. */
#define WEIR_FOREVER INT64_MAX
#define WEIR_MSEC    INT64_C(1000000)
#define WEIR_SEC     INT64_C(1000000000)

int64_t weir_time_now(void);
/* now + ms, saturating at WEIR_FOREVER; a negative ms means no deadline. */
int64_t weir_time_after_ms(int64_t ms);

/* ---- leaf operations ----------------------------------------------------- */
enum { WEIR_PENDING = 0, WEIR_READY = 1 };

/* Link in the loop's timer wheel. Private: only the runtime touches it. */
typedef struct weir_timer_node {
    struct weir_timer_node *next, *prev;
    int64_t deadline;
    uint32_t slot; /* wheel position; 0 = not armed */
    uint32_t pad;
} weir_timer_node;

/*
 * One leaf operation. The struct is public so that it can live inside a
 * stackless task's frame or on a fiber's stack, but all fields are private.
 * Initialise it by one of the *_start() functions; it is then owned by the
 * runtime until weir_op_poll() returned WEIR_READY or weir_op_wait()
 * returned, after which it may be reused or discarded.
 *
 * Timers, joins, intervals and blocking jobs use a weir_op (64 bytes); I/O
 * needs the larger weir_io_op of weir/io.h and synchronisation the
 * weir_sync_op of weir/sync.h, each of which begins with a weir_op.
 * WEIR_AWAIT and weir_op_of() accept any of them.
 */
typedef struct weir_op {
    weir_task *task; /* waiter, woken on completion */
    int64_t result;
    weir_timer_node timer; /* deadline (or due time) on the loop's wheel */
    uint32_t flags;        /* WEIR__OP_* (runtime-private), accessed atomically */
    uint8_t kind;
    uint8_t cancel_reason; /* 0, 1 = cancelled, 2 = timed out */
    uint16_t backend;      /* backend-private */
    union {
        int64_t due; /* sleep */
        void *ptr;   /* interval, join target, blocking job */
    } u;
} weir_op;

typedef struct weir_io_op weir_io_op;     /* weir/io.h */
typedef struct weir_sync_op weir_sync_op; /* weir/sync.h */
/* The weir_op inside a weir_op *, weir_io_op * or weir_sync_op *. */
#define weir_op_of(x)                                                                              \
    _Generic((x), weir_io_op *                                                                     \
             : (weir_op *)(void *)(x), weir_sync_op *                                              \
             : (weir_op *)(void *)(x), weir_op *                                                   \
             : (x))

/* From a stackless task: WEIR_READY with *result set, or WEIR_PENDING (the
 * task is woken when the op can make progress). */
int weir_op_poll(weir_op *op, int64_t *result);
/* From a fiber: park until the op is done; returns its result. */
int64_t weir_op_wait(weir_op *op);
/* Ask for the op to end early with -ECANCELED. Asynchronous: the op is done
 * only when weir_op_poll/wait says so. From another thread or task the
 * caller must know the op is still in flight (its waiter cannot finish it
 * meanwhile): an op that may already be collected - its frame gone - must
 * not be touched; cancel the task through its handle instead. */
void weir_op_cancel(weir_op *op);

/* ---- tasks --------------------------------------------------------------- */
typedef intptr_t (*weir_task_fn)(void *arg);
/* A stackless task's step: advance the state machine in `frame`; return
 * WEIR_READY with *result set when finished, WEIR_PENDING otherwise. */
typedef int (*weir_poll_fn)(void *frame, intptr_t *result);

#define WEIR_STACK_DEFAULT (64 * 1024)

typedef struct weir_spawn_opts {
    /* Borrowed: must outlive the task, and any report of it the watchdog
     * may still be printing once it ended: a literal, or a string kept
     * for the process's life. NULL = "task". */
    const char *name;
    size_t stack_size; /* fibers: usable stack bytes, 0 = WEIR_STACK_DEFAULT */
    /* Where the task runs. `loop` names one loop (a standalone loop, or one
     * scheduler thread of a runtime: weir_rt_loop()); `rt` a multi-threaded
     * runtime, whose threads share the task. Neither: the caller's loop or
     * runtime (required from outside the runtime). */
    weir_loop *loop;
    weir_rt *rt;
    /* Pin the task to the thread it starts on (`loop`, or the caller's):
     * it is then resumed only there, never stolen. */
    int pin;
} weir_spawn_opts;

/*
 * Spawn returns a join handle holding one reference to the task. Give it
 * back exactly once with weir_task_join() (which also collects the result)
 * or weir_task_detach(). NULL with errno set on failure (ENOMEM, EINVAL when
 * there is no loop to run on).
 */
weir_task *weir_task_spawn(weir_task_fn fn, void *arg, const weir_spawn_opts *opts);
/* `frame` is borrowed: keep it alive until the task has ended (joined). */
weir_task *weir_task_spawn_stackless(weir_poll_fn poll, void *frame, const weir_spawn_opts *opts);

/*
 * Wait for the task to end and collect its result. From inside a task this
 * suspends; from a thread outside the runtime it blocks that thread. Returns
 * 0 when the task ended normally, -ECANCELED when it was cancelled (its
 * return value is still stored); the handle is consumed. If the *joiner*
 * times out or is cancelled (-ETIMEDOUT / -ECANCELED with the task still
 * running) the handle is not consumed: a cancelled task's join returns at
 * once. To wait for a task whatever the caller's cancellation state (say,
 * before freeing what it uses), spawn it in a scope: weir_scope_join
 * (sync.h) keeps waiting. -EDEADLK when called on the task's own loop
 * thread outside any task while the task still runs (nothing would run
 * it); drive the loop instead (weir_loop_run / weir_loop_poll).
 *
 * Blocking-style calls like this one (and weir_time_sleep, weir_io_read,
 * weir_mutex_lock...) are for fibers: a stackless task gets -EINVAL and uses
 * the *_start forms.
 */
int weir_task_join(weir_task *h, intptr_t *result, int64_t deadline);
void weir_task_detach(weir_task *h);
/* Request cancellation: the task's current or next suspension returns
 * -ECANCELED. Safe from any thread; the handle stays valid. */
int weir_task_cancel(weir_task *h);

/* The running task, or NULL outside the runtime. */
weir_task *weir_task_current(void);
const char *weir_task_name(const weir_task *t);
/* An identifier unique among live tasks (not reused while t is alive). */
uint64_t weir_task_id(const weir_task *t);
int weir_task_cancelled(void); /* current task has a cancel request */
/* Let other tasks run; 0 or -ECANCELED. Fibers only (stackless: WEIR_YIELD). */
int weir_task_yield(void);
/* Register fn(arg) to run when the current task ends, cancelled or not;
 * handlers run last-registered first. 0, -ENOMEM, or -EINVAL outside a task. */
int weir_task_defer(void (*fn)(void *), void *arg);
/* Deadline applied to every suspension of the current task (the earlier of
 * it and the operation's own). Returns the previous one. */
int64_t weir_task_set_deadline(int64_t deadline);

/* Task-local storage: keys are process-wide (at most WEIR_TLS_MAX), values
 * per task; dtor(value) runs when a task ends with a non-NULL value. */
#define WEIR_TLS_MAX 64
typedef int weir_tls_key;
int weir_tls_key_new(weir_tls_key *key, void (*dtor)(void *));
void *weir_tls_get(weir_tls_key key);
int weir_tls_set(weir_tls_key key, void *value);

/* Join as a leaf op (stackless tasks). Result: 0/-ECANCELED as above; the
 * task's value in *result of weir_task_join_result(). */
int weir_task_join_start(weir_op *op, weir_task *h, int64_t deadline);
intptr_t weir_task_join_result(weir_task *h); /* then release with detach */

/* ---- stackless state machines ---------------------------------------------
 * Put a `weir_co co;` member in the frame, zero it before spawning, then:
 *
 *   static int step(void *p, intptr_t *out) {
 *       struct frame *f = p;
 *       WEIR_BEGIN(&f->co);
 *       weir_time_sleep_start(&f->op, weir_time_after_ms(10));
 *       WEIR_AWAIT(&f->co, &f->op, f->res);
 *       WEIR_RETURN(&f->co, out, f->res);
 *       WEIR_END(&f->co);
 *   }
 *
 * Locals do not survive a suspension: keep them in the frame. One WEIR_AWAIT
 * or WEIR_YIELD per source line (the line number is the resume label). */
typedef struct weir_co {
    int line;
} weir_co;
#define WEIR_BEGIN(co)                                                                             \
    switch ((co)->line) {                                                                          \
    case 0:
#define WEIR_AWAIT(co, op, res)                                                                    \
    do {                                                                                           \
        (co)->line = __LINE__;                                                                     \
        /* fall through */                                                                         \
    case __LINE__:                                                                                 \
        if (weir_op_poll(weir_op_of(op), &(res)) == WEIR_PENDING)                                  \
            return WEIR_PENDING;                                                                   \
    } while (0)
#define WEIR_YIELD(co)                                                                             \
    do {                                                                                           \
        (co)->line = __LINE__;                                                                     \
        weir_task_wake_self();                                                                     \
        return WEIR_PENDING;                                                                       \
    case __LINE__:;                                                                                \
    } while (0)
#define WEIR_RETURN(co, out, value)                                                                \
    do {                                                                                           \
        (co)->line = -1;                                                                           \
        *(out) = (intptr_t)(value);                                                                \
        return WEIR_READY;                                                                         \
    } while (0)
#define WEIR_END(co)                                                                               \
    default:                                                                                       \
        break;                                                                                     \
        }                                                                                          \
        return WEIR_READY
/* Schedule the current task to be polled again (used by WEIR_YIELD). */
void weir_task_wake_self(void);

/* ---- wakers -----------------------------------------------------------------
 * A waker is a counted reference to a task. weir_task_wake() is safe from any
 * thread, never loses a wake-up, and is a no-op while the task is already
 * scheduled. Code that builds its own leaf operations keeps a reference for
 * as long as it may wake the task. */
weir_task *weir_task_ref(weir_task *t);
void weir_task_unref(weir_task *t);
void weir_task_wake(weir_task *t);

/* ---- timers ------------------------------------------------------------- */
/* 0, or -ECANCELED / -ETIMEDOUT (task deadline earlier than the sleep). */
int weir_time_sleep(int64_t ns);
int weir_time_sleep_until(int64_t deadline);
int weir_time_sleep_start(weir_op *op, int64_t deadline);

/* Interval: ticks every period, first at start + period. A late waiter
 * skips the ticks it missed (no burst); weir_interval_next() returns how
 * many periods passed since the previous tick it returned (>= 1), or
 * -ECANCELED once weir_interval_cancel() was called. */
typedef struct weir_interval weir_interval;
weir_interval *weir_interval_new(int64_t period_ns);
int64_t weir_interval_next(weir_interval *iv);
int weir_interval_next_start(weir_interval *iv, weir_op *op);
void weir_interval_cancel(weir_interval *iv);
void weir_interval_free(weir_interval *iv);

/* Callback timer on the current loop (setTimeout / setInterval): cb runs on
 * the loop thread, never inside weir_timer_start(). period 0 = one-shot. A
 * one-shot timer frees itself after its callback; weir_timer_cancel() frees
 * a timer that has not fired (or any interval timer) and guarantees the
 * callback will not run again. */
typedef struct weir_timer weir_timer;
weir_timer *weir_timer_start(int64_t delay_ns, int64_t period_ns, void (*cb)(void *), void *arg);
/* 0, or -EPERM when called from another thread than the timer's loop (a
 * runtime keeps the task that started a timer on that thread until the
 * timer fires or is cancelled, so a task may always cancel its own). */
int weir_timer_cancel(weir_timer *t);

/* ---- blocking pool ------------------------------------------------------------
 * Runs fn(arg) on a bounded pool of threads (WEIR_BLOCKING_THREADS, default
 * 8) through a bounded queue (WEIR_BLOCKING_QUEUE, default 1024): when the
 * queue is full the awaiting task waits for a slot. fn's return value is the
 * op's result; return a negative errno to report an error. A cancelled or
 * timed-out wait returns at once; the job, if already running, finishes in
 * the background and its result is dropped; if not yet running, it is dropped
 * and fn never runs.
 *
 * The _ex forms take a discard function, for an arg the job owns (heap memory
 * that must outlive a wait that gives up). Each call leads to exactly one of
 * fn(arg) and discard(arg), exactly once: fn when a pool thread takes the job
 * (even after the wait gave up), discard when the job is dropped unrun -
 * refused at the start (even with an error return), cancelled or timed out
 * while queued (shutdown cancels every task, so a job still queued then is
 * dropped this way), or left queued by a stackless task that ended without
 * collecting it, when the loop or runtime is freed. Free arg in both fn and
 * discard; if the waiter reads results from it, count references (fn and
 * discard drop the pool's, the waiter its own after the wait). discard runs
 * on the thread that dropped the job: the caller (a refusal), the waiting
 * task's thread before its wait returns (a cancel or timeout), or the thread
 * freeing the loop or runtime, outside any task. It should only release and
 * return. A NULL discard makes them weir_blocking_start / weir_blocking_run. */
typedef intptr_t (*weir_blocking_fn)(void *arg);
typedef void (*weir_blocking_discard_fn)(void *arg);
int weir_blocking_start(weir_op *op, weir_blocking_fn fn, void *arg, int64_t deadline);
int64_t weir_blocking_run(weir_blocking_fn fn, void *arg, int64_t deadline);
int weir_blocking_start_ex(weir_op *op, weir_blocking_fn fn, void *arg,
                           weir_blocking_discard_fn discard, int64_t deadline);
int64_t weir_blocking_run_ex(weir_blocking_fn fn, void *arg, weir_blocking_discard_fn discard,
                             int64_t deadline);

/* ---- the event loop ------------------------------------------------------------ */
typedef struct weir_loop_opts {
    const char *io;         /* "uring", "epoll", "auto"; NULL = $WEIR_IO or auto */
    unsigned uring_entries; /* submission queue size; 0 = 256 */
    int uring_sqpoll;       /* opt in to IORING_SETUP_SQPOLL (burns a core) */
} weir_loop_opts;

/* Create a loop bound to the calling thread (one per thread). */
weir_loop *weir_loop_new(const weir_loop_opts *opts);
/* Run ready tasks, expire timers, and wait up to timeout_ms (-1 = until
 * something happens, 0 = don't wait) for I/O or a wake. Returns a progress
 * count (tasks polled + completions handled), or a negative errno. */
int weir_loop_poll(weir_loop *l, int timeout_ms);
/* Run until no task is left. 0 or negative errno. */
int weir_loop_run(weir_loop *l);
/* Wake a loop blocked in weir_loop_poll(); safe from any thread. */
int weir_loop_wake(weir_loop *l);
/* Cancel the tasks still alive, let them finish, and free the loop. Must be
 * called on the loop's thread, outside any task. */
void weir_loop_free(weir_loop *l);
/* Counters of one loop (per scheduler thread). Call on the loop's thread
 * for exact figures; from elsewhere the snapshot may be slightly stale and
 * runq_len reads 0. */
typedef struct weir_loop_stats {
    uint64_t polls;          /* task polls (resumes of a fiber, poll calls) */
    uint64_t completions;    /* leaf ops completed by the I/O backend */
    uint64_t waits;          /* backend waits (io_uring: submissions) */
    uint64_t parks;          /* waits that could block the thread */
    uint64_t remote_wakes;   /* tasks woken from other threads */
    uint64_t tasks_alive;    /* spawned and not yet ended */
    uint64_t runq_len;       /* tasks ready to run now */
    uint64_t io_retries;     /* io_uring ops re-issued after -EAGAIN */
    uint64_t forced_submits; /* io_uring submissions forced by a full queue */
    uint64_t spins;          /* io_uring waits that spun on the ring before sleeping */
    uint64_t spins_caught;   /* ... and found a completion, so did not sleep */
    uint64_t coop_yields;    /* tasks made to yield by the cooperative budget */
    /* multi-threaded runtime only (0 on a standalone loop) */
    uint64_t steals;       /* tasks this thread stole from others */
    uint64_t injected;     /* tasks this thread took from the injection queue */
    uint64_t lifo_polls;   /* polls of a task taken from the LIFO slot */
    uint64_t inject_depth; /* tasks now in the runtime's injection queue */
    uint64_t deque_len;    /* tasks now in this thread's stealable deque */
    uint64_t lifo_rescues; /* runtime-wide: tasks moved out of the LIFO slot of a
                              thread stuck in one poll (by the watchdog) */
} weir_loop_stats;
int weir_loop_stats_get(const weir_loop *l, weir_loop_stats *st);

/* The loop bound to the calling thread, or NULL. */
weir_loop *weir_loop_current(void);
/* Name of the I/O backend in use: "uring" or "epoll". */
const char *weir_loop_backend(const weir_loop *l);

/* Start a multi-threaded runtime (WEIR_THREADS scheduler threads, default
 * the online cores), run entry(argc, argv) as a fiber named "main" in it,
 * cancel and drain what is left when it returns, and return its exit code. */
int weir_main(int (*entry)(int argc, char **argv), int argc, char **argv);

/* ---- the multi-threaded runtime ------------------------------------------------
 * N scheduler threads, each with its own loop (I/O backend, timer wheel),
 * sharing tasks by work stealing: a task spawned or woken by a scheduler
 * thread goes to that thread's queue, and an idle thread steals from the
 * others. A task suspended on I/O or on an operation with a deadline
 * resumes on the thread that started the operation; a pinned task always
 * runs on its thread. See docs/runtime.md ("Scheduler threads"). */
typedef struct weir_rt_opts {
    int threads;         /* 0 = $WEIR_THREADS, else the online cores (max 256) */
    weir_loop_opts loop; /* options of every thread's loop */
} weir_rt_opts;
/* Start the threads. NULL with errno set on failure. */
weir_rt *weir_rt_new(const weir_rt_opts *opts);
int weir_rt_threads(const weir_rt *rt);
/* Scheduler thread i's loop (0 <= i < threads): spawn onto it (with .pin
 * to keep the task there) or read its statistics. */
weir_loop *weir_rt_loop(weir_rt *rt, int i);
/* The runtime of the calling scheduler thread, or NULL. */
weir_rt *weir_rt_current(void);
/* The calling scheduler thread's index in its runtime, or -1. */
int weir_rt_thread_index(void);
/* Tasks spawned and not yet ended, across all threads. */
uint64_t weir_rt_tasks_alive(const weir_rt *rt);
/* Cancel the tasks still alive, wait for them to end, stop the threads and
 * free the runtime. From a thread outside the runtime. */
void weir_rt_free(weir_rt *rt);

/* weir_strerror() and weir_set_allocator() are declared in weir/base.h. */

#ifdef __cplusplus
}
#endif
#endif /* WEIR_RT_H */
