/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watchdog.c - the blocking detector: names a task that keeps its loop's
 * thread busy without yielding for longer than WEIR_BLOCKING_WARN_MS.
 *
 * A task that computes for a long time or makes a blocking syscall stalls
 * every other task of its loop, and nothing on that thread can notice while
 * it happens. So one process-wide thread ("weir-watchdog") looks from the
 * outside: each loop publishes poll_seq (its poll count, set at the start of
 * every task poll) and running_name (the polled task's name, NULL between
 * polls) in task.c's weir__task_run. Every period (half the threshold, at
 * least 5 ms) the watchdog samples both for every registered loop. The same
 * poll_seq with a name in two samples means one poll has lasted at least
 * the time between them; once that reaches the threshold the task is named
 * in one warning, and not again for the same poll.
 *
 * The registry of loops is the documented process-wide state behind this
 * (DESIGN.md, "Conventions"): a mutex-protected list plus a count of loops.
 * The count drives the thread's life: the first weir__watchdog_add starts
 * it, reading the threshold then (0 disables the watchdog: no thread), and
 * the weir__watchdog_remove of the last loop stops and joins it, so the next
 * loop created re-reads the environment. Sampling holds the registry mutex,
 * and removal takes it, so a loop is never read after weir_loop_free has
 * passed weir__watchdog_remove. The watchdog touches only the published
 * fields and the name string, which the spawn API requires to outlive its
 * task; never a task.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt/rt_int.h"

/* Default, in milliseconds, when WEIR_BLOCKING_WARN_MS is unset (the
 * issue's figure): ordinary polls take microseconds, so this flags only
 * real stalls, while a stall this long is already visible as latency. */
#define WD_DEFAULT_MS 100
#define WD_MAX_MS     600000
/* Floor on the sampling period, so a tiny threshold does not turn the
 * watchdog into a busy thread competing with the loops it watches. */
#define WD_MIN_PERIOD_NS (5 * WEIR_MSEC)

/* Test hook (tests/rt/test_watchdog.c declares it extern): number of
 * blocked polls detected since the process started, whether or not the log
 * level let the warning through. */
uint64_t weir__watchdog_reports(void);

/* Sampling state of one registered loop; only the watchdog thread reads or
 * writes it after registration, under wd.mu. */
typedef struct wd_entry {
    struct wd_entry *next;
    weir_loop *loop;
    uint64_t seq;  /* poll_seq of the poll being timed, when timing */
    int64_t since; /* monotonic ns when that poll was first seen running */
    int timing;    /* a poll is being timed (seq, since are valid) */
    int reported;  /* that poll has been reported: stay quiet until it ends */
} wd_entry;

enum { WD_IDLE, WD_RUNNING, WD_STOPPING };

static struct {
    pthread_mutex_t mu;
    pthread_cond_t tick;   /* CLOCK_MONOTONIC; signalled to stop the thread */
    pthread_cond_t joined; /* broadcast when a stopping thread has been joined */
    wd_entry *head;
    unsigned nloops;   /* loops between add and remove, watched or not */
    int state;         /* WD_IDLE, WD_RUNNING or WD_STOPPING */
    int stop;          /* asks the running thread to exit */
    long threshold_ms; /* read when nloops went 0 -> 1; 0 = disabled */
    pthread_t thread;
} wd = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .joined = PTHREAD_COND_INITIALIZER,
    .state = WD_IDLE,
};

/* The tick condition variable waits on CLOCK_MONOTONIC (a wall-clock step
 * must not stretch or cut a period), which needs pthread_cond_init with an
 * attribute rather than a static initializer; done once, never destroyed. */
static pthread_once_t wd_once = PTHREAD_ONCE_INIT;

/* Relaxed: a statistic read by tests after the reporting loop has been
 * freed, which already orders it through wd.mu. */
static _Atomic uint64_t wd_reports;

static void wd_init_once(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&wd.tick, &attr);
    pthread_condattr_destroy(&attr);
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * WEIR_SEC + ts.tv_nsec;
}

/* Look at one loop. wd.mu held. */
static void wd_sample(wd_entry *e, int64_t now, int64_t threshold_ns)
{
    weir_loop *l = e->loop;
    /* See the comment on poll_seq in rt_int.h. A stale pair costs at most
     * one period of timing against the wrong poll, which the next sample
     * corrects when it sees the new poll_seq. The name is acquired: its
     * bytes are read below. */
    const char *name = atomic_load_explicit(&l->running_name, memory_order_acquire);
    uint64_t seq = atomic_load_explicit(&l->poll_seq, memory_order_relaxed);
    if (!name) {
        e->timing = 0; /* between polls: the loop is alive */
        return;
    }
    if (!e->timing || seq != e->seq) {
        e->timing = 1;
        e->reported = 0;
        e->seq = seq;
        e->since = now;
        return;
    }
    /* Same poll as one period ago: a task woken into this thread's LIFO
     * slot meanwhile would wait for the whole stall; let another thread
     * have it. */
    if (l->rt)
        weir__sched_rescue_lifo(l);
    int64_t blocked = now - e->since;
    if (e->reported || blocked < threshold_ns)
        return;
    e->reported = 1;
    atomic_fetch_add_explicit(&wd_reports, 1, memory_order_relaxed);
    weir__log(WEIR__LOG_WARN, "rt.watchdog",
              "task '%s' has blocked its thread for %lld ms without yielding "
              "(WEIR_BLOCKING_WARN_MS=%ld)",
              name, (long long)(blocked / WEIR_MSEC), wd.threshold_ms);
}

static void *wd_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&wd.mu);
    int64_t threshold_ns = wd.threshold_ms * WEIR_MSEC;
    int64_t period_ns = threshold_ns / 2;
    if (period_ns < WD_MIN_PERIOD_NS)
        period_ns = WD_MIN_PERIOD_NS;
    int64_t next = mono_ns() + period_ns;
    while (!wd.stop) {
        struct timespec ts = {(time_t)(next / WEIR_SEC), (long)(next % WEIR_SEC)};
        pthread_cond_timedwait(&wd.tick, &wd.mu, &ts);
        if (wd.stop)
            break;
        int64_t now = mono_ns();
        if (now < next)
            continue; /* spurious wake-up */
        for (wd_entry *e = wd.head; e; e = e->next)
            wd_sample(e, now, threshold_ns);
        /* From now, not from the missed deadline: after a long stall of
         * this thread, one sample is enough to catch up. */
        next = now + period_ns;
    }
    pthread_mutex_unlock(&wd.mu);
    return NULL;
}

/* Start the thread for a new session. wd.mu held, state WD_IDLE. All
 * signals are blocked from its first instruction (set on the attribute),
 * so process signals go to the program's own threads. */
static void wd_start_locked(void)
{
    pthread_attr_t attr;
    sigset_t all;
    int err = pthread_attr_init(&attr);
    if (!err) {
        sigfillset(&all);
        err = pthread_attr_setsigmask_np(&attr, &all);
        wd.stop = 0;
        if (!err)
            err = pthread_create(&wd.thread, &attr, wd_main, NULL);
        pthread_attr_destroy(&attr);
    }
    if (err) {
        /* Run unwatched rather than fail the loop: the watchdog is advice. */
        weir__log(WEIR__LOG_WARN, "rt.watchdog", "cannot start the blocking watchdog: %s",
                  strerror(err));
        wd.threshold_ms = 0;
        return;
    }
    /* Named by the starter, so the name is in place when add returns. */
    pthread_setname_np(wd.thread, "weir-watchdog");
    wd.state = WD_RUNNING;
}

int weir__watchdog_add(weir_loop *l)
{
    pthread_once(&wd_once, wd_init_once);
    /* Allocated before locking; freed again if this session is unwatched. */
    wd_entry *e = calloc(1, sizeof(*e));
    pthread_mutex_lock(&wd.mu);
    /* The last loop of the previous session is joining the old thread:
     * a new session starts only after it is gone. */
    while (wd.state == WD_STOPPING)
        pthread_cond_wait(&wd.joined, &wd.mu);
    if (wd.nloops++ == 0) {
        wd.threshold_ms = weir__env_long("WEIR_BLOCKING_WARN_MS", WD_DEFAULT_MS, 0, WD_MAX_MS);
        if (wd.threshold_ms > 0)
            wd_start_locked();
    }
    int r = 0;
    if (wd.state == WD_RUNNING && e) {
        e->loop = l;
        e->next = wd.head;
        wd.head = e;
        e = NULL;
    } else if (wd.state == WD_RUNNING) {
        r = -ENOMEM; /* this loop goes unwatched; it still counts */
    }
    pthread_mutex_unlock(&wd.mu);
    free(e);
    return r;
}

void weir__watchdog_remove(weir_loop *l)
{
    wd_entry *gone = NULL;
    pthread_mutex_lock(&wd.mu);
    for (wd_entry **pp = &wd.head; *pp; pp = &(*pp)->next) {
        if ((*pp)->loop == l) {
            gone = *pp;
            *pp = gone->next;
            break;
        }
    }
    assert(wd.nloops > 0);
    if (--wd.nloops == 0 && wd.state == WD_RUNNING) {
        /* Last loop: stop the thread now (the signal cuts its timed wait
         * short) and join it without the lock, which it needs to exit. */
        assert(wd.head == NULL);
        wd.state = WD_STOPPING;
        wd.stop = 1;
        pthread_cond_signal(&wd.tick);
        pthread_t th = wd.thread;
        pthread_mutex_unlock(&wd.mu);
        pthread_join(th, NULL);
        pthread_mutex_lock(&wd.mu);
        wd.state = WD_IDLE;
        pthread_cond_broadcast(&wd.joined);
    }
    pthread_mutex_unlock(&wd.mu);
    free(gone);
}

uint64_t weir__watchdog_reports(void)
{
    return atomic_load_explicit(&wd_reports, memory_order_relaxed);
}
