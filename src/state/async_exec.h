/* SPDX-License-Identifier: Apache-2.0 */
/*
 * async_exec.h - the rules of the async execution controller (seed 000):
 * when each record of a keyed subtask may run, when a watermark may leave.
 *
 * A record that waits on a state read does not hold up its subtask: the
 * subtask takes further records while it waits. What keeps the results
 * those of one record at a time is three rules, kept here, apart from
 * any thread, channel or operator so a model test can drive them:
 *
 * - The key gate: one record per key runs at a time. A later record of a
 *   key whose record is running parks behind it, in arrival order, and
 *   runs when every earlier one of the key has finished.
 * - Epochs: the watermarks cut the input into epochs. A watermark is
 *   released (its timers fire, it goes downstream) only once every record
 *   that arrived before it has finished, and a record that arrived after
 *   it starts only once it is released ("serial between epochs": each
 *   record sees the watermark the synchronous path would show it). Two
 *   watermarks with no record between them are one: the later one.
 * - The in-flight cap: at most max_in_flight records are held at once
 *   (running, waiting, parked or behind a watermark); at the cap submit
 *   refuses the record and the caller waits for one to finish, which is
 *   backpressure on its input, not an error.
 *
 * A record that fails fails the controller (the first error is kept): its
 * key and epoch are still released, records not yet started are dropped
 * unrun, no watermark is released again, and the records already waiting
 * finish as their reads complete. Every record given to the controller is
 * handed back to dispose() exactly once: when it finished, when it was
 * dropped, or at weir__aec_free.
 *
 * The controller is single-threaded: every call comes from the subtask's
 * thread, hooks included. Hooks run from inside submit, watermark and
 * finish, never nested: a record that starts while a hook runs is queued
 * and started when the hook returns.
 */
#ifndef WEIR_STATE_ASYNC_EXEC_H
#define WEIR_STATE_ASYNC_EXEC_H

#include <stddef.h>
#include <stdint.h>

/* The default in-flight cap (seed 000). */
#define WEIR__AEC_MAX_IN_FLIGHT 6000

/* A record as the controller sees it, embedded in the caller's copy of
 * the record. The caller sets key / klen (bytes it owns until dispose);
 * the rest is the controller's. */
typedef struct weir__aec_rec {
    struct weir__aec_rec *next;
    const void *key;
    size_t klen;
    uint64_t hash;
    uint64_t epoch;
    int state; /* WEIR__AEC_* */
} weir__aec_rec;

enum {
    WEIR__AEC_HELD = 1, /* behind a watermark not released yet */
    WEIR__AEC_PARKED,   /* behind a record of its key */
    WEIR__AEC_READY,    /* about to start */
    WEIR__AEC_RUNNING   /* started; waits for a read (run() returned 1) */
};

typedef struct weir__aec_hooks {
    /* Start r: 0 it finished, 1 it waits (weir__aec_finish follows), or a
     * negative errno: it failed. */
    int (*run)(void *arg, weir__aec_rec *r);
    /* Every record before watermark wm has finished: release it. 0 or a
     * negative errno (the controller fails). */
    int (*release)(void *arg, int64_t wm);
    /* r leaves the controller (finished, dropped or freed). */
    void (*dispose)(void *arg, weir__aec_rec *r);
} weir__aec_hooks;

typedef struct weir__aec weir__aec;

/* A controller holding at most max_in_flight records (0: the default), or
 * NULL when memory runs out. */
weir__aec *weir__aec_new(const weir__aec_hooks *h, void *arg, size_t max_in_flight);

/* weir__aec_submit's answers when it did not take r (positive: a
 * record's error, which it may also return, is any negative errno, -EAGAIN
 * and -ENOMEM included). */
enum {
    WEIR__AEC_FULL = 1, /* at the cap */
    WEIR__AEC_NOMEM     /* no memory for it */
};

/* Hand r over. WEIR__AEC_FULL at the cap, WEIR__AEC_NOMEM when memory for
 * it runs out: r is not taken and nothing changed. Otherwise r is taken:
 * 0, or the controller's error (r may have run and been disposed already;
 * it is disposed unrun if the controller had failed before). */
int weir__aec_submit(weir__aec *c, weir__aec_rec *r);

/* The input's watermark moved to wm (greater than the last one): 0, the
 * controller's error, or -ENOMEM (nothing changed). */
int weir__aec_watermark(weir__aec *c, int64_t wm);

/* r, which waited (run() returned 1), finished: err 0, or negative when
 * it failed. r is disposed. 0 or the controller's error. */
int weir__aec_finish(weir__aec *c, weir__aec_rec *r, int err);

/* Nothing held and no watermark waiting: what a barrier waits for. */
int weir__aec_idle(const weir__aec *c);
/* Records held (the cap counts these), and those of them waiting. */
size_t weir__aec_in_flight(const weir__aec *c);
size_t weir__aec_waiting(const weir__aec *c);
/* The first error of a record or a release, or 0. */
int weir__aec_error(const weir__aec *c);

/* Dispose of every record still held, waiting ones too, and free c. */
void weir__aec_free(weir__aec *c);

#endif
