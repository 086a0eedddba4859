/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scope.c - structured concurrency: a scope owns the tasks spawned in it,
 * weir_scope_join() waits for all of them, and a failure, the scope's
 * deadline, weir_scope_cancel() or the cancellation of the joining task
 * cancels the rest.
 *
 * Each child runs a wrapper around the user's function (or poll function).
 * The wrapper's first act is to register a cleanup handler; handlers run
 * last-registered first, so ours runs after every handler the child
 * registers itself, when the child has otherwise ended - returned, failed
 * or cancelled. That handler (child_end) records the result and, for the
 * first failure under WEIR_SCOPE_CANCEL_SIBLINGS, cancels the siblings at
 * once: the scope reacts to completions as they happen, whoever joins and
 * whether or not anyone joins yet.
 *
 * Classification of a child's result r (as it ends):
 *   failed     r < 0 and r != -ECANCELED (the first, in completion order,
 *              is first_error / first_name / first_index)
 *   cancelled  r == -ECANCELED, or r >= 0 with a cancel request pending
 *              (as weir_task_join reports it)
 *   succeeded  otherwise
 *
 * join's return value: -ECANCELED when the joining task was cancelled;
 * otherwise the first cause that ended the scope early - the first failure
 * under CANCEL_SIBLINGS, -ETIMEDOUT for the deadline, -ECANCELED for
 * weir_scope_cancel(); otherwise the first failure (COLLECT_ALL); else 0.
 * The result struct counts every child in every case.
 *
 * "Holds" count what join waits for: two per child, one given back when the
 * child ends (child_end), one when its spawner has stored the join handle -
 * a child on another loop may end before weir_task_spawn even returns, and
 * join must not free the child record under the spawner's feet. join parks
 * its fiber until the holds reach zero; child_end wakes it then. Parking
 * directly (no leaf op) is what lets join keep waiting after its own task
 * was cancelled: every op would fail at once from then on, but a park just
 * waits for the next wake, and weir_task_cancel() is such a wake.
 *
 * Cancellation while joining: join sees its task's cancel request on the
 * wake the cancel sends, cancels every child, keeps waiting until every one
 * has ended, and returns -ECANCELED. A child blocked in its own scope's join
 * does the same, so cancellation runs down nested scopes to the leaves and
 * every level still waits for its children: nothing outlives its scope.
 *
 * The scope's deadline (with the joining task's own deadline, if earlier) is
 * enforced by join: a callback timer on the joiner's loop wakes it, and it
 * cancels every child and returns -ETIMEDOUT. While that timer is armed the
 * joining task is anchored to its loop (weir_timer_start does that for the
 * task that starts a timer), so that in a multi-threaded runtime it is
 * resumed there and cancels the timer on the thread that owns it. Children are not interrupted
 * by the deadline before join is called.
 *
 * Ownership: the scope holds the join handles. weir_scope_spawn() returns a
 * borrowed handle (cancel it if you like; never join or detach it), valid
 * until weir_scope_join() returns. join gives the handles back and frees the
 * child records, and closes the scope (a later spawn fails with EINVAL; a
 * second join, or one racing another, returns -EBUSY); weir_scope_free() is
 * then allowed. Freeing a scope that has unjoined children is a programming
 * error (assert): the children would run on with a dangling scope. A scope
 * that never had a child may be freed without a join.
 *
 * Limitation: a fiber spawned onto *another* loop whose stack cannot be
 * mapped when that loop starts it never runs its wrapper, so the scope
 * never hears of its end and join would wait forever. On the spawner's own
 * loop the stack is taken at spawn, and spawn fails instead.
 */
#include <assert.h>
#include <stdlib.h>

#include "sync/sync_int.h"

typedef struct scope_child {
    struct scope_child *next; /* the scope's children, in spawn order */
    weir_scope *s;
    weir_task *t; /* join handle; NULL until the spawner stored it */
    const char *name;
    int index;
    int ended;    /* child_end ran */
    int deferred; /* child_end is registered as a cleanup handler */
    int started;  /* stackless: first poll done */
    intptr_t result;
    weir_task_fn fn; /* fiber child */
    void *arg;
    weir_poll_fn poll; /* stackless child */
    void *frame;
} scope_child;

struct weir_scope {
    weir__spin lock; /* guards everything below */
    int policy;
    int64_t deadline;
    scope_child *head, *tail;
    int nspawned;
    long holds;        /* see the top: join waits for zero */
    weir_task *waiter; /* the joining task, while it waits */
    int cancelling;    /* every child has been (and new ones are) cancelled */
    int cause;         /* first reason for ending early; 0 = none */
    int joining, joined;
    weir_scope_result res;
};

weir_scope *weir_scope_new(int policy, int64_t deadline)
{
    if (policy != WEIR_SCOPE_CANCEL_SIBLINGS && policy != WEIR_SCOPE_COLLECT_ALL) {
        errno = EINVAL;
        return NULL;
    }
    weir_scope *s = calloc(1, sizeof(*s));
    if (!s) {
        errno = ENOMEM;
        return NULL;
    }
    weir__spin_init(&s->lock);
    s->policy = policy;
    s->deadline = deadline;
    s->res.first_index = -1;
    return s;
}

/* Cancel every child that has a handle and has not ended; children whose
 * handle is not stored yet are cancelled by their spawner (it sees
 * `cancelling`). Under the lock: weir_task_cancel() only takes a loop's
 * remote-queue lock, which is never held while taking ours. */
static void cancel_children_locked(weir_scope *s)
{
    for (scope_child *c = s->head; c; c = c->next)
        if (c->t && !c->ended)
            weir_task_cancel(c->t);
}

/* Start cancelling for `cause` (the first cause wins). Under the lock. */
static void scope_cancel_locked(weir_scope *s, int cause)
{
    if (!s->cause)
        s->cause = cause;
    if (!s->cancelling) {
        s->cancelling = 1;
        cancel_children_locked(s);
    }
}

/* Give back k holds; returns a reference to the joiner to wake when they
 * reached zero. Under the lock. */
static weir_task *release_locked(weir_scope *s, long k)
{
    s->holds -= k;
    assert(s->holds >= 0);
    if (s->holds == 0 && s->waiter)
        return weir_task_ref(s->waiter);
    return NULL;
}

static void wake_and_unref(weir_task *t)
{
    if (t) {
        weir_task_wake(t);
        weir_task_unref(t);
    }
}

/* The child has ended (its own cleanup handlers have run). Runs in the
 * child's task, on its loop. After the unlock the scope may be freed by
 * the joiner at any moment: touch nothing but the local reference. */
static void child_end(void *arg)
{
    scope_child *c = arg;
    weir_scope *s = c->s;
    intptr_t r = c->result;
    int cancel_seen = weir_task_cancelled();
    weir__spin_lock(&s->lock);
    c->ended = 1;
    if (r < 0 && r != -ECANCELED) {
        if (s->res.failed++ == 0) {
            s->res.first_error = (int)r;
            s->res.first_name = c->name;
            s->res.first_index = c->index;
        }
        if (s->policy == WEIR_SCOPE_CANCEL_SIBLINGS)
            scope_cancel_locked(s, (int)r);
    } else if (r == -ECANCELED || cancel_seen) {
        s->res.cancelled++;
    }
    weir_task *w = release_locked(s, 1);
    weir__spin_unlock(&s->lock);
    wake_and_unref(w);
}

static intptr_t child_fiber_main(void *arg)
{
    scope_child *c = arg;
    /* First, so that it runs after every handler the child registers. */
    c->deferred = weir_task_defer(child_end, c) == 0;
    c->result = c->fn(c->arg);
    intptr_t r = c->result;
    if (!c->deferred)
        child_end(c); /* no memory for the handler: report now, before the others */
    return r;
}

static int child_poll(void *frame, intptr_t *out)
{
    scope_child *c = frame;
    if (!c->started) {
        c->started = 1;
        c->deferred = weir_task_defer(child_end, c) == 0;
    }
    int ready = c->poll(c->frame, out);
    if (ready == WEIR_READY) {
        c->result = *out;
        if (!c->deferred)
            child_end(c);
    }
    return ready;
}

static weir_task *scope_spawn(weir_scope *s, scope_child *c, const weir_spawn_opts *o)
{
    c->s = s;
    c->name = o && o->name ? o->name : "task";
    weir__spin_lock(&s->lock);
    if (s->joined) {
        weir__spin_unlock(&s->lock);
        free(c);
        errno = EINVAL; /* spawning into a scope that was already joined */
        return NULL;
    }
    c->index = s->nspawned++;
    if (s->tail)
        s->tail->next = c;
    else
        s->head = c;
    s->tail = c;
    s->holds += 2;
    weir__spin_unlock(&s->lock);

    weir_task *h = c->fn ? weir_task_spawn(child_fiber_main, c, o)
                         : weir_task_spawn_stackless(child_poll, c, o);
    int err = errno;

    weir__spin_lock(&s->lock);
    weir_task *w;
    if (!h) {
        /* The child never ran: unlink it and give back both holds. */
        scope_child **pp = &s->head, *prev = NULL;
        while (*pp != c) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        *pp = c->next;
        if (s->tail == c)
            s->tail = prev;
        if (c->index == s->nspawned - 1)
            s->nspawned--; /* keep indices dense unless spawns raced */
        w = release_locked(s, 2);
    } else {
        c->t = h;
        if (s->cancelling && !c->ended)
            weir_task_cancel(h);
        w = release_locked(s, 1);
    }
    weir__spin_unlock(&s->lock);
    wake_and_unref(w);
    if (!h) {
        free(c);
        errno = err;
    }
    return h;
}

weir_task *weir_scope_spawn(weir_scope *s, weir_task_fn fn, void *arg, const weir_spawn_opts *o)
{
    if (!s || !fn) {
        errno = EINVAL;
        return NULL;
    }
    scope_child *c = calloc(1, sizeof(*c));
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    c->fn = fn;
    c->arg = arg;
    return scope_spawn(s, c, o);
}

weir_task *weir_scope_spawn_stackless(weir_scope *s, weir_poll_fn poll, void *frame,
                                      const weir_spawn_opts *o)
{
    if (!s || !poll) {
        errno = EINVAL;
        return NULL;
    }
    scope_child *c = calloc(1, sizeof(*c));
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    c->poll = poll;
    c->frame = frame;
    return scope_spawn(s, c, o);
}

void weir_scope_cancel(weir_scope *s)
{
    if (!s)
        return;
    weir__spin_lock(&s->lock);
    scope_cancel_locked(s, -ECANCELED);
    weir__spin_unlock(&s->lock);
}

/* The deadline timer of a join: lives in join's frame; its callback runs on
 * the joiner's loop thread, so `fired` needs no atomics. */
typedef struct join_timer {
    weir_timer *timer; /* NULL once fired (a one-shot timer frees itself) */
    weir_task *joiner;
    int fired;
} join_timer;

static void join_timer_cb(void *arg)
{
    join_timer *jt = arg;
    jt->timer = NULL;
    jt->fired = 1;
    weir_task_wake(jt->joiner);
}

int weir_scope_join(weir_scope *s, weir_scope_result *res)
{
    weir_task *self = weir__task_current();
    if (!s || !self || self->kind != WEIR__TASK_FIBER)
        return -EINVAL;
    weir__spin_lock(&s->lock);
    int busy = s->joining || s->joined;
    if (!busy) {
        s->joining = 1;
        s->waiter = self;
    }
    weir__spin_unlock(&s->lock);
    if (busy)
        return -EBUSY;

    int64_t deadline = s->deadline;
    int64_t td = weir__task_deadline(self);
    if (td < deadline)
        deadline = td;
    join_timer jt = {.joiner = self};
    int timed_out = 0, self_cancelled = 0;
    if (deadline != WEIR_FOREVER) {
        int64_t now = weir_time_now();
        if (deadline <= now)
            jt.fired = 1;
        else if (!(jt.timer = weir_timer_start(deadline - now, 0, join_timer_cb, &jt)))
            jt.fired = 1; /* no memory for the timer: end the scope now rather than never */
    }

    scope_child *list;
    weir_scope_result out;
    int cause;
    for (;;) {
        cause = 0;
        if (!self_cancelled && weir_task_cancelled()) {
            self_cancelled = 1;
            cause = -ECANCELED;
        } else if (!timed_out && jt.fired) {
            timed_out = 1;
            cause = -ETIMEDOUT;
        }
        weir__spin_lock(&s->lock);
        if (cause)
            scope_cancel_locked(s, cause);
        if (s->holds == 0) {
            /* Close the scope in the same critical section that saw it
             * empty, so that no spawn can slip in between. */
            s->joined = 1;
            s->waiter = NULL;
            list = s->head;
            s->head = s->tail = NULL;
            out = s->res;
            cause = s->cause;
            weir__spin_unlock(&s->lock);
            break;
        }
        weir__spin_unlock(&s->lock);
        /* A child_end that takes the holds to zero wakes us; so do the
         * timer and a cancel of our task. A wake that lands before the park
         * makes the park return at once (NOTIFIED), so none is lost;
         * spurious wakes just go round the loop. */
        if (!self_cancelled && weir_task_cancelled())
            continue;
        weir__fiber_park();
    }
    if (jt.timer)
        weir_timer_cancel(jt.timer);

    /* Every child has ended (its cleanup handlers ran); give the handles
     * back - the scheduler holds its own reference until each task is done. */
    while (list) {
        scope_child *next = list->next;
        weir_task_detach(list->t);
        free(list);
        list = next;
    }
    if (res)
        *res = out;
    if (self_cancelled)
        return -ECANCELED;
    if (cause)
        return cause;
    return out.failed ? out.first_error : 0;
}

void weir_scope_free(weir_scope *s)
{
    if (!s)
        return;
    assert((s->joined || !s->head) && "weir_scope_free before weir_scope_join");
    free(s);
}
