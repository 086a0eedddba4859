/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run.c - `weir run`: run a defined job on this process's runtime, with a
 * live progress line and a summary.
 *
 * The progress line is a second fiber that wakes once a second and reads
 * the per-operator counters (weir_job_op_stats, updated by the runner as
 * batches go by): records out of the sources, records into the sinks, the
 * lowest watermark of the sinks, and the last completed checkpoint
 * (weir_job_ckpt_stats). It only reads, so the job runs the same with or
 * without it.
 *
 * Interrupts. The job runs in a task of its own; SIGINT or SIGTERM cancels
 * it, so it stops the way weir_job_run stops any cancelled job and the
 * command still reports. The signals are blocked in every thread (weir.c
 * blocks them before the runtime starts its threads) and read from a
 * signalfd by a watcher fiber: no handler runs at an arbitrary point, and
 * the sanitizers' deferred signal delivery does not get in the way. A second
 * signal while the job winds down ends the process at once.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cli/cli.h"
#include "weir/io.h"
#include "weir/rt.h"

typedef struct totals {
    uint64_t in;  /* records out of the sources */
    uint64_t out; /* records into the sinks */
    int64_t wm;   /* the lowest sink watermark */
    int sources, sinks;
} totals;

static void sum_ops(const weir_job *j, totals *t)
{
    *t = (totals){.wm = WEIR_WATERMARK_MAX};
    for (int i = 0; i < weir_job_ops(j); i++) {
        weir_op_stats st;
        if (weir_job_op_stats(j, weir_job_op_name(j, i), &st) != 0)
            continue;
        int kind = weir_job_op_kind(j, i);
        if (kind == WEIR_OP_SOURCE) {
            t->in += st.records_out;
            t->sources++;
        } else if (kind == WEIR_OP_SINK) {
            t->out += st.records_in;
            t->sinks++;
            if (st.watermark < t->wm)
                t->wm = st.watermark;
        }
    }
    if (!t->sinks)
        t->wm = WEIR_WATERMARK_MIN;
}

typedef struct progress {
    const weir_job *j;
    int64_t t0;
    _Atomic int printed; /* a line is on the terminal: the summary clears it */
} progress;

static intptr_t progress_main(void *arg)
{
    progress *pr = arg;
    totals prev = {0};
    int64_t last = pr->t0;
    while (weir_time_sleep(1000000000) == 0) {
        int64_t now = weir_time_now();
        totals t;
        sum_ops(pr->j, &t);
        double dt = (double)(now - last) / 1e9;
        char wm[32], ck[48] = "-";
        weir__cli_fmt_wm(wm, sizeof(wm), t.wm);
        weir_ckpt_stats cs;
        weir_job_ckpt_stats(pr->j, &cs);
        if (cs.latest)
            snprintf(ck, sizeof(ck), "%" PRIu64 " (%.0f ms)", cs.latest,
                     (double)cs.last_duration_ns / 1e6);
        /* \r and erase-line: the line is rewritten in place. */
        fprintf(stderr,
                "\r\033[K[%5.0fs] sources %" PRIu64 " rec (%.0f/s)  sinks %" PRIu64
                " rec (%.0f/s)  watermark %s  checkpoint %s",
                (double)(now - pr->t0) / 1e9, t.in, dt > 0 ? (double)(t.in - prev.in) / dt : 0.0,
                t.out, dt > 0 ? (double)(t.out - prev.out) / dt : 0.0, wm, ck);
        fflush(stderr);
        atomic_store_explicit(&pr->printed, 1, memory_order_relaxed);
        prev = t;
        last = now;
    }
    return 0;
}

typedef struct job_arg {
    weir_job *j;
    const weir_run_opts *o;
} job_arg;

static intptr_t job_main(void *arg)
{
    job_arg *a = arg;
    return weir_job_run(a->j, a->o);
}

typedef struct watch_arg {
    int fd;
    weir_task *job; /* a reference of the watcher's own: cancel stays valid */
    _Atomic int signo;
} watch_arg;

static intptr_t watch_main(void *arg)
{
    watch_arg *w = arg;
    struct signalfd_siginfo si;
    for (int n = 0; weir_io_read(w->fd, &si, sizeof(si), WEIR_FOREVER) == (ssize_t)sizeof(si);) {
        if (n++ == 0) {
            atomic_store_explicit(&w->signo, (int)si.ssi_signo, memory_order_relaxed);
            weir_task_cancel(w->job);
            continue;
        }
        /* The second one: stop trying to be graceful. */
        fprintf(stderr, "\nweir run: %s again: exiting now\n", strsignal((int)si.ssi_signo));
        _exit(128 + (int)si.ssi_signo);
    }
    weir_task_unref(w->job);
    return 0;
}

/* Run the job in its own task, cancelled by a signal read from signal_fd
 * (-1: not interruptible). *signo: the signal that cancelled it, or 0. */
static int run_interruptible(weir_job *j, const weir_run_opts *o, int signal_fd, int *signo)
{
    *signo = 0;
    job_arg a = {j, o};
    weir_task *job = weir_task_spawn(job_main, &a, &(weir_spawn_opts){.name = "job"});
    if (!job)
        return -errno;
    watch_arg w = {.fd = signal_fd, .job = weir_task_ref(job)};
    weir_task *watch = NULL;
    if (signal_fd >= 0)
        watch = weir_task_spawn(watch_main, &w,
                                &(weir_spawn_opts){.name = "signals", .stack_size = 64 << 10});
    if (!watch)
        weir_task_unref(w.job);
    intptr_t r = -ECANCELED;
    weir_task_join(job, &r, WEIR_FOREVER);
    if (watch) {
        weir_task_cancel(watch);
        weir_task_join(watch, NULL, WEIR_FOREVER);
        *signo = atomic_load_explicit(&w.signo, memory_order_relaxed);
    }
    return (int)r;
}

int weir__cli_run(weir_plugin *p, weir_job *j, const cli_opts *o)
{
    const weir_job_entry *entry = weir_plugin_entry(p);
    int show = o->progress < 0 ? isatty(2) : o->progress;
    progress pr = {.j = j, .t0 = weir_time_now()};
    weir_task *ticker = NULL;
    if (show)
        ticker = weir_task_spawn(progress_main, &pr,
                                 &(weir_spawn_opts){.name = "progress", .stack_size = 64 << 10});

    int signo;
    int e = run_interruptible(j, &o->run, o->signal_fd, &signo);

    if (ticker) {
        weir_task_cancel(ticker);
        weir_task_join(ticker, NULL, WEIR_FOREVER);
        if (atomic_load_explicit(&pr.printed, memory_order_relaxed))
            fputs("\r\033[K", stderr);
    }
    double secs = (double)(weir_time_now() - pr.t0) / 1e9;
    if (e < 0 && signo) {
        fprintf(stderr, "weir run: job %s interrupted by %s after %.2fs: cancelled\n", entry->name,
                signo == SIGINT ? "SIGINT" : "SIGTERM", secs);
        return 128 + signo;
    }
    if (e == -EBUSY) {
        /* Its checkpoint or output directory is another run's (weir_job_run
         * refuses before touching anything): the command was wrong, like
         * bad arguments, and nothing ran. */
        const char *why = weir_job_error(j);
        fprintf(stderr, "weir run: job %s not started: %s\n", entry->name,
                why && *why ? why : weir_strerror(e));
        return CLI_USAGE;
    }
    if (e < 0) {
        const char *why = weir_job_error(j);
        fprintf(stderr, "weir run: job %s failed: %s\n", entry->name,
                why && *why ? why : weir_strerror(e));
        return CLI_FAILED;
    }
    if (!o->quiet) {
        totals t;
        sum_ops(j, &t);
        weir_ckpt_stats ck;
        weir_job_ckpt_stats(j, &ck);
        char wm[32];
        weir__cli_fmt_wm(wm, sizeof(wm), t.wm);
        fprintf(stderr,
                "weir run: job %s %s finished in %.2fs: %" PRIu64
                " records from %d source%s, %" PRIu64 " into %d sink%s, watermark %s",
                entry->name, entry->version ? entry->version : "", secs, t.in, t.sources,
                t.sources == 1 ? "" : "s", t.out, t.sinks, t.sinks == 1 ? "" : "s", wm);
        if (o->run.checkpoint_dir)
            fprintf(stderr, ", checkpoints %" PRIu64 " (latest %" PRIu64 ", restored %" PRIu64 ")",
                    ck.completed, ck.latest, ck.restored);
        fputc('\n', stderr);
    }
    return CLI_OK;
}
