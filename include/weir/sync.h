/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/sync.h - synchronisation between tasks: mutex, rwlock, semaphore,
 * notify (condition), oneshot, waitgroup, barrier, channels with select,
 * counted references (strong/weak), and structured-concurrency scopes.
 *
 * Every primitive suspends the *task*, never the thread, and works between
 * tasks on different loops (threads): waiters are woken through their wakers,
 * wherever they run. Each waiting call exists twice, like the I/O calls: a
 * blocking-style function for fibers, and a *_start form that initialises a
 * weir_sync_op for stackless tasks, awaited with WEIR_AWAIT(co, op, res).
 * An operation that can complete at once does so, whatever its deadline
 * and even in a cancelled task: only an actual wait observes the deadline
 * (-ETIMEDOUT) and cancellation (-ECANCELED). A wait that was already
 * satisfied when the cancel arrived reports its success instead (a lock
 * granted, an item received), so nothing is lost: the cancellation shows at
 * the task's next suspension. Waiting calls from outside any task fail with
 * -EINVAL (the immediate path works from anywhere).
 *
 * Objects are created with *_new (NULL + errno on failure) and freed with
 * *_free by their owner, once no task uses them; channels and oneshots are
 * reference counted because both ends own them.
 */
#ifndef WEIR_SYNC_H
#define WEIR_SYNC_H

#include "rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* weir's intrusive list link (private; base/list.h works on it). */
#ifndef WEIR__LIST_DEFINED
#define WEIR__LIST_DEFINED
struct weir__list {
    struct weir__list *next, *prev;
};
#endif

/* A synchronisation leaf op: a weir_op plus a place in a primitive's wait
 * queue. Private fields; pass to WEIR_AWAIT / weir_op_* via weir_op_of(). */
struct weir_sync_op {
    weir_op op;               /* first */
    struct weir__list node;   /* the primitive's wait queue, or a list of ops taken off it */
    void *obj;                /* the primitive waited on */
    void *buf;                /* channel: item to send / room to receive */
    uintptr_t arg;            /* primitive-specific (permits, mode, ...) */
    struct weir__select *sel; /* select group, or NULL */
    int sel_index;
    int pad;    /* channel select: the case index to start from */
    int queued; /* on the wait queue itself (under the primitive's lock) */
    int pad2;
};

/* ---- mutex: fair without convoys --------------------------------------------
 * Normally unlock() releases the lock and wakes the oldest waiter to compete
 * for it, so a running task may take it first (no lock convoy when tasks on
 * several threads contend). A waiter that has waited over 1 ms switches the
 * mutex to hand-off mode: unlock() then passes the lock directly to the
 * oldest waiter and nobody barges, so no task starves (Go's sync.Mutex
 * works the same way). Stackless waiters always receive the lock by
 * hand-off. trylock() may take a released lock in normal mode, never in
 * hand-off mode. Not recursive. */
typedef struct weir_mutex weir_mutex;
weir_mutex *weir_mutex_new(void);
void weir_mutex_free(weir_mutex *m);
int weir_mutex_lock(weir_mutex *m, int64_t deadline); /* 0, -ETIMEDOUT, -ECANCELED */
int weir_mutex_trylock(weir_mutex *m);                /* 0 or -EBUSY */
void weir_mutex_unlock(weir_mutex *m);
int weir_mutex_lock_start(weir_sync_op *op, weir_mutex *m, int64_t deadline);

/* ---- rwlock ------------------------------------------------------------------
 * Many readers or one writer. With prefer_writers (the default policy of
 * weir_rwlock_new(1)) a waiting writer stops new readers from entering, so
 * writers cannot starve; with 0 readers may enter while writers wait. */
typedef struct weir_rwlock weir_rwlock;
weir_rwlock *weir_rwlock_new(int prefer_writers);
void weir_rwlock_free(weir_rwlock *rw);
int weir_rwlock_read(weir_rwlock *rw, int64_t deadline);
int weir_rwlock_write(weir_rwlock *rw, int64_t deadline);
int weir_rwlock_try_read(weir_rwlock *rw);  /* 0 or -EBUSY */
int weir_rwlock_try_write(weir_rwlock *rw); /* 0 or -EBUSY */
void weir_rwlock_unlock_read(weir_rwlock *rw);
void weir_rwlock_unlock_write(weir_rwlock *rw);
int weir_rwlock_read_start(weir_sync_op *op, weir_rwlock *rw, int64_t deadline);
int weir_rwlock_write_start(weir_sync_op *op, weir_rwlock *rw, int64_t deadline);

/* ---- semaphore: FIFO; a large request is not overtaken by small ones ---------- */
typedef struct weir_sem weir_sem;
weir_sem *weir_sem_new(long permits);
void weir_sem_free(weir_sem *s);
int weir_sem_acquire(weir_sem *s, long n, int64_t deadline);
int weir_sem_try_acquire(weir_sem *s, long n); /* 0 or -EAGAIN */
void weir_sem_release(weir_sem *s, long n);
long weir_sem_available(weir_sem *s);
int weir_sem_acquire_start(weir_sync_op *op, weir_sem *s, long n, int64_t deadline);

/* ---- notify: wake one or all waiters --------------------------------------------
 * notify_one() with no waiter stores one permit that the next wait consumes
 * at once (so a notify racing ahead of the wait is not lost); notify_all()
 * wakes the current waiters and stores nothing. weir_notify_wait_unlock()
 * is the condition-variable form: it releases the mutex, waits, and takes
 * the mutex back before returning (also on timeout and cancellation). */
typedef struct weir_notify weir_notify;
weir_notify *weir_notify_new(void);
void weir_notify_free(weir_notify *n);
int weir_notify_wait(weir_notify *n, int64_t deadline);
int weir_notify_wait_unlock(weir_notify *n, weir_mutex *m, int64_t deadline);
void weir_notify_one(weir_notify *n);
void weir_notify_all(weir_notify *n);
int weir_notify_wait_start(weir_sync_op *op, weir_notify *n, int64_t deadline);

/* ---- oneshot: one value from one sender to one receiver ---------------------------
 * Created with two references, one per end; each end gives its reference
 * back exactly once: the sender by send() or close_tx(), the receiver by
 * close_rx() after receiving. recv() returns -EPIPE when the sender closed
 * without sending; send() returns -EPIPE when the receiver is gone. */
typedef struct weir_oneshot weir_oneshot;
weir_oneshot *weir_oneshot_new(void);
int weir_oneshot_send(weir_oneshot *o, intptr_t value);
void weir_oneshot_close_tx(weir_oneshot *o);
int weir_oneshot_recv(weir_oneshot *o, intptr_t *value, int64_t deadline);
int weir_oneshot_try_recv(weir_oneshot *o, intptr_t *value); /* -EAGAIN when not yet */
void weir_oneshot_close_rx(weir_oneshot *o);
int weir_oneshot_recv_start(weir_sync_op *op, weir_oneshot *o, int64_t deadline);
intptr_t weir_oneshot_value(const weir_oneshot *o); /* after a recv op succeeded */

/* ---- waitgroup: wait until a counter drops to zero ----------------------------------- */
typedef struct weir_waitgroup weir_waitgroup;
weir_waitgroup *weir_waitgroup_new(void);
void weir_waitgroup_free(weir_waitgroup *wg);
void weir_waitgroup_add(weir_waitgroup *wg, long n);
void weir_waitgroup_done(weir_waitgroup *wg);
int weir_waitgroup_wait(weir_waitgroup *wg, int64_t deadline);
int weir_waitgroup_wait_start(weir_sync_op *op, weir_waitgroup *wg, int64_t deadline);

/* ---- barrier: n tasks meet; reusable ---------------------------------------------------
 * wait() returns 1 in exactly one task of each generation (the last to
 * arrive), 0 in the others. A waiter that times out or is cancelled leaves
 * the generation (it no longer counts towards n). */
typedef struct weir_barrier weir_barrier;
weir_barrier *weir_barrier_new(unsigned n);
void weir_barrier_free(weir_barrier *b);
int weir_barrier_wait(weir_barrier *b, int64_t deadline);
int weir_barrier_wait_start(weir_sync_op *op, weir_barrier *b, int64_t deadline);

/* ---- channels: MPMC, bounded, unbounded or rendezvous -----------------------------------
 * Items are fixed-size values copied in and out. capacity 0 is a rendezvous
 * channel (a send completes when a receiver takes the item), SIZE_MAX
 * (WEIR_CHAN_UNBOUNDED) never blocks senders. close(): senders then get
 * -EPIPE; receivers drain what is buffered, then get -EPIPE. A send op's
 * item and a receive op's buffer are borrowed until the op is done.
 * Reference counted: new() returns one reference; ref()/unref(). */
#define WEIR_CHAN_UNBOUNDED SIZE_MAX
typedef struct weir_chan weir_chan;
weir_chan *weir_chan_new(size_t item_size, size_t capacity);
weir_chan *weir_chan_ref(weir_chan *c);
void weir_chan_unref(weir_chan *c);
int weir_chan_send(weir_chan *c, const void *item, int64_t deadline); /* 0, -EPIPE, ... */
int weir_chan_recv(weir_chan *c, void *item, int64_t deadline);       /* 0, -EPIPE, ... */
int weir_chan_try_send(weir_chan *c, const void *item); /* 0, -EAGAIN (full), -EPIPE */
int weir_chan_try_recv(weir_chan *c, void *item);       /* 0, -EAGAIN (empty), -EPIPE */
void weir_chan_close(weir_chan *c);
size_t weir_chan_len(weir_chan *c);
int weir_chan_send_start(weir_sync_op *op, weir_chan *c, const void *item, int64_t deadline);
int weir_chan_recv_start(weir_sync_op *op, weir_chan *c, void *item, int64_t deadline);

/* ---- select: the first of several channel operations or timers ---------------------------
 * Exactly one case completes; the others have no effect (no item is taken
 * or given by them). Returns the index of that case, with its status in
 * cases[i].result (0, or -EPIPE for a closed channel), or -ETIMEDOUT /
 * -ECANCELED. Cases ready at once are taken in case order (a fixed priority,
 * not random). A WEIR_SELECT_TIMER case completes at its `at` time and wins
 * over a deadline that passes at the same time. The parts may be discarded
 * as soon as the select is done. -ENOMEM when it cannot get memory (an
 * unbounded send, or more than 16 distinct channels). */
enum { WEIR_SELECT_SEND = 1, WEIR_SELECT_RECV = 2, WEIR_SELECT_TIMER = 3 };
typedef struct weir_select_case {
    int kind;
    weir_chan *chan; /* SEND / RECV */
    void *item;      /* SEND: item to send; RECV: room for the item */
    int64_t at;      /* TIMER: when it fires */
    int result;      /* out */
} weir_select_case;
int weir_select(weir_select_case *cases, int ncases, int64_t deadline);
/* parts: caller storage for ncases ops that lives as long as op. */
int weir_select_start(weir_sync_op *op, weir_sync_op *parts, weir_select_case *cases, int ncases,
                      int64_t deadline);

/* ---- counted references (strong / weak) ------------------------------------------------------
 * weir_arc_new() returns a pointer to `size` zeroed bytes with one strong
 * reference. When the last strong reference goes, dtor(ptr) runs; the memory
 * goes when the last weak reference goes too. upgrade() gives a new strong
 * reference, or NULL once the value was destroyed. Thread-safe. */
typedef struct weir_weak weir_weak;
void *weir_arc_new(size_t size, void (*dtor)(void *));
void *weir_arc_clone(void *p);
void weir_arc_release(void *p);
weir_weak *weir_arc_downgrade(void *p);
void *weir_weak_upgrade(weir_weak *w);
void weir_weak_release(weir_weak *w);
long weir_arc_strong_count(const void *p);
long weir_arc_weak_count(const void *p);

/* ---- scopes: structured concurrency ------------------------------------------------------------
 * Tasks spawned in a scope are joined by weir_scope_join(). A child that
 * ends with a negative result (an error) fails the scope: with
 * WEIR_SCOPE_CANCEL_SIBLINGS (the default) its siblings are then cancelled.
 * Cancelling the scope, or the task joining it, cancels every child, and
 * their own scopes in turn (recursively), and still waits for them all to
 * end - also when the joining task was cancelled before it called join
 * (unlike weir_task_join), so a cancelled task can tear down what its
 * children use after the join. The result names the first child that
 * failed and why. */
enum { WEIR_SCOPE_CANCEL_SIBLINGS = 0, WEIR_SCOPE_COLLECT_ALL = 1 };
typedef struct weir_scope weir_scope;
typedef struct weir_scope_result {
    int failed;             /* children that ended with an error */
    int cancelled;          /* children that ended cancelled */
    int first_error;        /* the first failure's result (negative errno), 0 if none */
    const char *first_name; /* that child's task name */
    int first_index;        /* its spawn order in the scope, -1 if none */
} weir_scope_result;
weir_scope *weir_scope_new(int policy, int64_t deadline);
weir_task *weir_scope_spawn(weir_scope *s, weir_task_fn fn, void *arg, const weir_spawn_opts *o);
weir_task *weir_scope_spawn_stackless(weir_scope *s, weir_poll_fn poll, void *frame,
                                      const weir_spawn_opts *o);
void weir_scope_cancel(weir_scope *s);
/* 0 when every child succeeded; else first_error, or -ETIMEDOUT / -ECANCELED
 * when the scope's deadline passed or it was cancelled. */
int weir_scope_join(weir_scope *s, weir_scope_result *res);
void weir_scope_free(weir_scope *s);

#ifdef __cplusplus
}
#endif
#endif /* WEIR_SYNC_H */
