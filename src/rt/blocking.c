/* SPDX-License-Identifier: Apache-2.0 */
/*
 * blocking.c - the blocking pool: runs functions that block (file I/O the
 * backend does not cover, DNS, compression, foreign libraries) on a bounded
 * set of threads, and completes a leaf op with each function's result.
 *
 * Each standalone loop has at most one pool (l->pool), and so does each
 * multi-threaded runtime (rt->pool, shared by its threads), created by the
 * first weir_blocking_start() and freed with the loop or runtime once every
 * task ended.
 * Threads are started lazily, one more whenever queued jobs outnumber idle
 * threads, up to WEIR_BLOCKING_THREADS (default 8, 1..1024); idle threads stay
 * alive until the pool is freed. The queue holds at most WEIR_BLOCKING_QUEUE
 * jobs (default 1024). When it is full a new job goes on a FIFO of slot
 * waiters and its task stays suspended: that is the backpressure. A worker
 * that takes a job from the queue moves the oldest slot waiter into the slot
 * it freed, so jobs still start in submission order.
 *
 * A job lives in one of four states, changed only under the pool's mutex:
 *
 *     WAITING --slot freed--> QUEUED --a worker takes it--> RUNNING --fn returns--> freed
 *        |                      |                              |
 *        | cancel               | cancel                       | cancel
 *        v                      v                              v
 *      dropped (discard(arg), freed), op done               DETACHED --fn returns--> freed,
 *      with -ECANCELED; fn never runs                                    result dropped
 *
 * Who completes the op: the canceller while the job is WAITING or QUEUED
 * (the job never runs) or RUNNING (the job is DETACHED and the op is done at
 * once with -ECANCELED), otherwise the worker when fn returns. The worker
 * claims the op by clearing op->u.ptr under the mutex before it
 * calls weir__op_done; a canceller that then finds the pointer NULL knows the
 * worker owns the op and leaves it alone. A bare compare-and-swap on a state
 * word in the job is not enough here: the losing canceller would still have
 * read a job the worker may already have freed. The mutex is taken anyway to
 * move jobs between the lists, and it is never held while fn runs: each
 * hold is a few pointer updates. The op itself is REMOTE: weir__op_done from a worker
 * thread is allowed, and neither side touches the op after completing it
 * (it may live on a fiber stack that is gone by then).
 *
 * A job that never runs is "dropped": refused when it is started (the task
 * was already cancelled or past its deadline, no memory, not one thread),
 * cancelled while WAITING or QUEUED, or still WAITING or QUEUED when the pool
 * is freed. Its owner may pass a discard function (weir_blocking_start_ex)
 * to get arg back then: for every start, exactly one of fn(arg) and
 * discard(arg) is called, once. A job leaves the lists only under the mutex
 * and only by one of three hands - the worker that takes it (it will run fn,
 * never discard), the canceller (it drops the job), the pool's free (it drops
 * the job) - so whichever gets there first owns it and the others no longer
 * find it: a canceller that comes late finds it RUNNING (it detaches it) or
 * the op already claimed, the free finds the lists without it, and a worker
 * that comes late finds an empty queue. A refusal at start drops a job no
 * worker has seen (or one taken back off the queue in the same hold of the
 * mutex that queued it). The worker frees a job that ran without discard.
 * discard is called with the mutex released, by the thread that dropped the
 * job: the starter, the canceller (the waiting task's thread) before it
 * completes the op, or the thread that frees the pool (weir_loop_free's, or
 * weir_rt_free's caller), before that joins the workers. Shutdown cancels
 * every task first, so a job queued then is normally dropped by its
 * canceller; the free only finds jobs of a stackless task that returned
 * without collecting its op.
 *
 * No atomics here: the mutex orders everything the loop thread and the
 * workers share (lists, job states, op->u.ptr), and the op's result
 * reaches the task through weir__op_done's release of the DONE flag.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "base/list.h"
#include "rt/rt_int.h"

enum {
    JOB_WAITING = 1, /* on pool->waiting: no queue slot yet */
    JOB_QUEUED,      /* on pool->queue */
    JOB_RUNNING,     /* a worker runs fn; the op is still attached */
    JOB_DETACHED,    /* running, but the op was cancelled: drop the result */
};

typedef struct blocking_job {
    weir__list node; /* on pool->waiting or pool->queue */
    weir_blocking_fn fn;
    weir_blocking_discard_fn discard; /* NULL: nothing to release */
    void *arg;
    weir_op *op;
    int state; /* JOB_*, under pool->lock */
} blocking_job;

typedef struct job_list {
    weir__list jobs; /* of blocking_job.node, oldest first */
    size_t len;
} job_list;

struct weir__pool {
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t work;  /* a job was queued, or the pool is stopping */
    job_list queue;       /* at most cap jobs */
    job_list waiting;     /* slot waiters; non-empty only while the queue is full */
    size_t cap;
    size_t peak;          /* most jobs ever queued at once (test hook) */
    unsigned max_threads; /* WEIR_BLOCKING_THREADS */
    unsigned nthreads;    /* started so far; threads[0..nthreads) */
    unsigned nidle;       /* blocked in pthread_cond_wait */
    unsigned nrunning;    /* inside fn, detached jobs included */
    int stopping;
    int spawn_warned;
    pthread_t *threads;
};

/* Test hooks (tests/rt/test_blocking.c declares them extern): snapshots under
 * the lock, safe from any thread while the pool exists. */
size_t weir__pool_queued(struct weir__pool *p);
size_t weir__pool_waiting(struct weir__pool *p);
size_t weir__pool_peak_queued(struct weir__pool *p);
unsigned weir__pool_threads(struct weir__pool *p);

/* ---- job lists ------------------------------------------------------------------ */
static void list_init(job_list *q)
{
    weir__list_init(&q->jobs);
    q->len = 0;
}

static void list_push(job_list *q, blocking_job *j)
{
    weir__list_push_back(&q->jobs, &j->node);
    q->len++;
}

static void list_remove(job_list *q, blocking_job *j)
{
    weir__list_remove(&j->node);
    q->len--;
}

/* The oldest job of q, or NULL. */
static blocking_job *list_head(const job_list *q)
{
    weir__list *n = weir__list_first(&q->jobs);
    return n ? weir__container_of(n, blocking_job, node) : NULL;
}

/* A job that will never run: give its argument back to its owner, then
 * free it. Lock not held: discard is the owner's code. */
static void job_drop(blocking_job *j)
{
    if (j->discard)
        j->discard(j->arg);
    free(j);
}

/* ---- workers --------------------------------------------------------------------- */
static void *worker_main(void *arg);

/* Start one more worker. Lock held. All signals are blocked in the new
 * thread from its first instruction (set on the attribute, not by the
 * thread itself), so process signals go to the program's own threads and
 * never interrupt a blocking call in a job. */
static int pool_spawn_locked(struct weir__pool *p)
{
    pthread_attr_t attr;
    sigset_t all;
    int err = pthread_attr_init(&attr);
    if (err)
        return -err;
    sigfillset(&all);
    err = pthread_attr_setsigmask_np(&attr, &all);
    if (!err)
        err = pthread_create(&p->threads[p->nthreads], &attr, worker_main, p);
    pthread_attr_destroy(&attr);
    if (err) {
        if (!p->spawn_warned) {
            p->spawn_warned = 1;
            weir__log(WEIR__LOG_WARN, "rt.blocking", "cannot start a worker (%u running): %s",
                      p->nthreads, strerror(err));
        }
        return -err;
    }
    p->nthreads++;
    weir__log(WEIR__LOG_DEBUG, "rt.blocking", "started worker %u of %u", p->nthreads,
              p->max_threads);
    return 0;
}

/* Put a job in the queue (there is room) and make sure some thread will take
 * it: wake an idle worker, and start another when the queued jobs outnumber
 * the idle ones (a woken worker counts as idle until it runs, so two quick
 * pushes with one idle worker start a second thread). Lock held. Returns the
 * error of a failed thread start; the job stays queued either way, and the
 * caller decides whether that is fatal (no worker at all). */
static int pool_queue_locked(struct weir__pool *p, blocking_job *j)
{
    int r = 0;
    j->state = JOB_QUEUED;
    list_push(&p->queue, j);
    if (p->queue.len > p->peak)
        p->peak = p->queue.len;
    if (p->queue.len > p->nidle && p->nthreads < p->max_threads && !p->stopping)
        r = pool_spawn_locked(p);
    if (p->nidle > 0)
        pthread_cond_signal(&p->work);
    return r;
}

/* A queue slot was freed: give it to the oldest slot waiter. Lock held. A
 * worker exists whenever this runs (the slot was freed by a worker taking a
 * job, or by a cancel of a queued job, and a job is only ever queued while a
 * worker exists), so the promoted job will run even if no thread starts. */
static void pool_promote_locked(struct weir__pool *p)
{
    blocking_job *w = list_head(&p->waiting);
    if (w && p->queue.len < p->cap) {
        list_remove(&p->waiting, w);
        (void)pool_queue_locked(p, w);
    }
}

static void *worker_main(void *arg)
{
    struct weir__pool *p = arg;
    pthread_setname_np(pthread_self(), "weir-blocking");
    pthread_mutex_lock(&p->lock);
    for (;;) {
        blocking_job *j = list_head(&p->queue);
        if (!j) {
            if (p->stopping)
                break;
            p->nidle++;
            pthread_cond_wait(&p->work, &p->lock);
            p->nidle--;
            continue;
        }
        list_remove(&p->queue, j);
        j->state = JOB_RUNNING;
        p->nrunning++;
        pool_promote_locked(p);
        pthread_mutex_unlock(&p->lock);

        intptr_t result = j->fn(j->arg);

        pthread_mutex_lock(&p->lock);
        p->nrunning--;
        weir_op *op = NULL;
        if (j->state == JOB_RUNNING) {
            /* Claim the op: from here a canceller finds no job and leaves
             * the op to us. */
            op = j->op;
            op->u.ptr = NULL;
        }
        pthread_mutex_unlock(&p->lock);
        if (op)
            weir__op_done(op, result); /* last touch of op: it may vanish now */
        free(j);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* ---- pool life cycle ---------------------------------------------------------------- */
static struct weir__pool *pool_new(void)
{
    struct weir__pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->max_threads = (unsigned)weir__env_long("WEIR_BLOCKING_THREADS", 8, 1, 1024);
    p->cap = (size_t)weir__env_long("WEIR_BLOCKING_QUEUE", 1024, 1, 1L << 24);
    list_init(&p->queue);
    list_init(&p->waiting);
    /* Sized for the cap at once (8 KiB at most) so that starting a thread
     * never has to grow an array the joiner reads. */
    p->threads = calloc(p->max_threads, sizeof(*p->threads));
    if (!p->threads) {
        free(p);
        return NULL;
    }
    int err = pthread_mutex_init(&p->lock, NULL);
    if (err) {
        free(p->threads);
        free(p);
        errno = err;
        return NULL;
    }
    err = pthread_cond_init(&p->work, NULL);
    if (err) {
        pthread_mutex_destroy(&p->lock);
        free(p->threads);
        free(p);
        errno = err;
        return NULL;
    }
    return p;
}

/* Take every job off q and onto *out: they will never run. Every task has
 * ended when the pool is freed, and a task cannot end while a blocking op of
 * its is queued (waiting on the op cancels it, which dequeues the job), so
 * this only finds jobs of a stackless task that returned without collecting
 * its op. Their ops may be gone: never run them, never touch the ops. */
static size_t pool_discard_locked(job_list *q, job_list *out)
{
    size_t n = 0;
    blocking_job *j;
    while ((j = list_head(q))) {
        list_remove(q, j);
        list_push(out, j);
        n++;
    }
    return n;
}

void weir__pool_free(struct weir__pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    /* Queued jobs first: the discards go in submission order. Once both lists
     * are empty with stopping set, no worker can take anything more. */
    job_list dropped;
    list_init(&dropped);
    pool_discard_locked(&p->queue, &dropped);
    pool_discard_locked(&p->waiting, &dropped);
    if (p->nrunning > 0)
        weir__log(WEIR__LOG_DEBUG, "rt.blocking", "waiting for %u detached job(s) to return",
                  p->nrunning);
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    /* Before the join: a running job may be waiting for what a discard
     * releases. */
    size_t ndropped = dropped.len;
    blocking_job *j;
    while ((j = list_head(&dropped))) {
        list_remove(&dropped, j);
        job_drop(j);
    }
    pthread_mutex_lock(&p->lock);
    /* Join one at a time, re-reading nthreads under the lock: nothing can start
     * a thread once stopping is set and the queue is empty, but the loop
     * below does not rely on it. */
    unsigned joined = 0;
    while (joined < p->nthreads) {
        pthread_t t = p->threads[joined++];
        pthread_mutex_unlock(&p->lock);
        pthread_join(t, NULL);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    if (ndropped)
        weir__log(WEIR__LOG_WARN, "rt.blocking",
                  "dropped %zu blocking job(s) whose task ended without collecting them", ndropped);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    free(p->threads);
    free(p);
}

/* ---- the op ------------------------------------------------------------------------ */
/* The pool of l (its runtime's when it has one); created when `make`. */
static struct weir__pool *loop_pool(weir_loop *l, int make)
{
    if (!l->rt) {
        if (!l->pool && make)
            l->pool = pool_new();
        return l->pool;
    }
    weir_rt *rt = l->rt;
    struct weir__pool *p = __atomic_load_n(&rt->pool, __ATOMIC_ACQUIRE);
    if (p || !make)
        return p;
    pthread_mutex_lock(&rt->inject_lock);
    if (!(p = rt->pool) && (p = pool_new()))
        __atomic_store_n(&rt->pool, p, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&rt->inject_lock);
    return p;
}

void weir__op_blocking_cancel(weir_op *op)
{
    struct weir__pool *p = loop_pool(op->task->loop, 0);
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    blocking_job *j = op->u.ptr;
    if (!j) {
        /* The worker claimed the op and completes it with fn's result. */
        pthread_mutex_unlock(&p->lock);
        return;
    }
    op->u.ptr = NULL;
    switch (j->state) {
    case JOB_WAITING:
        list_remove(&p->waiting, j);
        break;
    case JOB_QUEUED:
        list_remove(&p->queue, j);
        pool_promote_locked(p);
        break;
    default: /* JOB_RUNNING: the worker frees the job when fn returns */
        j->state = JOB_DETACHED;
        j->op = NULL;
        j = NULL;
        break;
    }
    pthread_mutex_unlock(&p->lock);
    /* Dropped: discard before the op is done, so the waiter finds arg
     * released when its wait returns. */
    if (j)
        job_drop(j);
    weir__op_done(op, -ECANCELED);
}

/* fn will never run for this start: hand arg back to its owner. */
static void refuse_arg(weir_blocking_discard_fn discard, void *arg)
{
    if (discard)
        discard(arg);
}

static int start_job(weir_op *op, weir_blocking_fn fn, void *arg, weir_blocking_discard_fn discard,
                     int64_t deadline, int shielded)
{
    if (!op) {
        refuse_arg(discard, arg);
        return -EINVAL;
    }
    if (!fn) {
        /* As weir__op_begin does outside a task: leave the op inactive with
         * the error as its result, so a later wait/poll reports it. */
        op->flags = 0;
        op->result = -EINVAL;
        refuse_arg(discard, arg);
        return -EINVAL;
    }
    int r = weir__op_begin_ex(op, WEIR__OP_BLOCKING, deadline, shielded);
    if (r < 0) {
        refuse_arg(discard, arg);
        return r;
    }
    /* A pool thread completes it (before `r > 0` so that a cancel of an
     * already-refused op still sees a consistent kind). */
    op->flags |= WEIR__OP_REMOTE;
    op->u.ptr = NULL;
    if (r > 0) {
        /* Already done: the task was cancelled or the deadline passed. */
        refuse_arg(discard, arg);
        return 0;
    }

    struct weir__pool *p = loop_pool(op->task->loop, 1);
    blocking_job *j = p ? malloc(sizeof(*j)) : NULL;
    if (!j) {
        refuse_arg(discard, arg);
        weir__op_done(op, -ENOMEM);
        return 0;
    }
    j->fn = fn;
    j->discard = discard;
    j->arg = arg;
    j->op = op;
    op->u.ptr = j;

    pthread_mutex_lock(&p->lock);
    if (p->queue.len < p->cap) {
        r = pool_queue_locked(p, j);
        if (p->nthreads == 0) {
            /* Not even one thread could start: nothing would ever run it. */
            list_remove(&p->queue, j);
            j = NULL;
        }
    } else {
        /* Full: wait for a slot. The task stays suspended on the op. */
        j->state = JOB_WAITING;
        list_push(&p->waiting, j);
    }
    pthread_mutex_unlock(&p->lock);
    if (!j) {
        job_drop(op->u.ptr); /* no worker ever saw it */
        op->u.ptr = NULL;
        weir__op_done(op, r < 0 ? r : -EAGAIN);
    }
    return 0;
}

int weir_blocking_start_ex(weir_op *op, weir_blocking_fn fn, void *arg,
                           weir_blocking_discard_fn discard, int64_t deadline)
{
    return start_job(op, fn, arg, discard, deadline, 0);
}

int weir__blocking_start_shielded(weir_op *op, weir_blocking_fn fn, void *arg,
                                  weir_blocking_discard_fn discard)
{
    return start_job(op, fn, arg, discard, WEIR_FOREVER, 1);
}

int64_t weir__blocking_run_shielded(weir_blocking_fn fn, void *arg)
{
    weir_task *t = weir__task_current();
    if (!t)
        return fn(arg);
    if (t->kind != WEIR__TASK_FIBER)
        return -EINVAL; /* weir_op_wait refuses it, and a started op must be waited for */
    weir_op op;
    int r = weir__blocking_start_shielded(&op, fn, arg, NULL);
    if (r < 0)
        return r;
    return weir_op_wait(&op);
}

int weir_blocking_start(weir_op *op, weir_blocking_fn fn, void *arg, int64_t deadline)
{
    return weir_blocking_start_ex(op, fn, arg, NULL, deadline);
}

int64_t weir_blocking_run_ex(weir_blocking_fn fn, void *arg, weir_blocking_discard_fn discard,
                             int64_t deadline)
{
    weir_task *t = weir__task_current();
    /* Check first: weir_op_wait refuses a stackless caller, and a started op
     * must not be abandoned. */
    if (!t || t->kind != WEIR__TASK_FIBER) {
        refuse_arg(discard, arg);
        return -EINVAL;
    }
    weir_op op;
    int r = weir_blocking_start_ex(&op, fn, arg, discard, deadline);
    if (r < 0)
        return r;
    return weir_op_wait(&op);
}

int64_t weir_blocking_run(weir_blocking_fn fn, void *arg, int64_t deadline)
{
    return weir_blocking_run_ex(fn, arg, NULL, deadline);
}

/* ---- test hooks ----------------------------------------------------------------------- */
size_t weir__pool_queued(struct weir__pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t n = p->queue.len;
    pthread_mutex_unlock(&p->lock);
    return n;
}

size_t weir__pool_waiting(struct weir__pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t n = p->waiting.len;
    pthread_mutex_unlock(&p->lock);
    return n;
}

size_t weir__pool_peak_queued(struct weir__pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t n = p->peak;
    pthread_mutex_unlock(&p->lock);
    return n;
}

unsigned weir__pool_threads(struct weir__pool *p)
{
    pthread_mutex_lock(&p->lock);
    unsigned n = p->nthreads;
    pthread_mutex_unlock(&p->lock);
    return n;
}
