/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run.c - `weir run`: run a defined job on a cluster inside this process
 * (cluster/local.h: a coordinator and a worker joined by socketpairs, no
 * port opened), with a live progress line and a summary. The job takes the
 * path it takes on a cluster of many machines: submitted as its plugin,
 * planned and placed by the coordinator, deployed to the worker, its
 * checkpoints coordinated over the checkpoint link; every channel has both
 * ends on the one worker and is in-process.
 *
 * The progress line is a second fiber that wakes once a second and reads
 * the per-operator counters of the worker's job (weir_job_op_stats,
 * updated by the runner as batches go by): records out of the sources,
 * records into the sinks, the lowest watermark of the sinks; and the last
 * completed checkpoint from the coordinator's side of the job
 * (weir_job_ckpt_stats). It only reads, so the job runs the same with or
 * without it. The summary is the coordinator's JobCompleted, as
 * `weir submit` prints it.
 *
 * Interrupts. SIGINT or SIGTERM cancels the job through a client of its
 * own (a CancelJob), so it stops the way a cancelled job stops on any
 * cluster and the command still reports. The signals are blocked in every
 * thread (weir.c blocks them before the runtime starts its threads) and
 * read from a signalfd by a watcher fiber: no handler runs at an arbitrary
 * point, and the sanitizers' deferred signal delivery does not get in the
 * way. A second signal while the job winds down ends the process at once.
 */
#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cluster/local.h"
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
    weir__local *l;
    _Atomic uint64_t job; /* 0 until submitted */
    int64_t t0;
    _Atomic int printed; /* a line is on the terminal: the summary clears it */
} progress;

/* One reading of the job in progress (under the nodes' locks). */
typedef struct reading {
    totals t;
    weir_ckpt_stats cs;
} reading;

static void read_ops(void *arg, const weir_job *j)
{
    sum_ops(j, &((reading *)arg)->t);
}

static void read_ckpt(void *arg, const weir_job *j)
{
    weir_job_ckpt_stats(j, &((reading *)arg)->cs);
}

static intptr_t progress_main(void *arg)
{
    progress *pr = arg;
    totals prev = {0};
    int64_t last = pr->t0;
    while (weir_time_sleep(1000000000) == 0) {
        int64_t now = weir_time_now();
        reading rd = {.t = {.wm = WEIR_WATERMARK_MIN}};
        uint64_t job = atomic_load(&pr->job);
        if (job)
            weir__local_job_view(pr->l, job, read_ops, read_ckpt, &rd);
        const totals t = rd.t;
        double dt = (double)(now - last) / 1e9;
        char wm[32], ck[48] = "-";
        weir__cli_fmt_wm(wm, sizeof(wm), t.wm);
        if (rd.cs.latest)
            snprintf(ck, sizeof(ck), "%" PRIu64 " (%.0f ms)", rd.cs.latest,
                     (double)rd.cs.last_duration_ns / 1e6);
        /* \r and erase-line: the line is rewritten in place. A restarted
         * job's counters start again: no negative rate. */
        double rin = dt > 0 && t.in >= prev.in ? (double)(t.in - prev.in) / dt : 0.0;
        double rout = dt > 0 && t.out >= prev.out ? (double)(t.out - prev.out) / dt : 0.0;
        fprintf(stderr,
                "\r\033[K[%5.0fs] sources %" PRIu64 " rec (%.0f/s)  sinks %" PRIu64
                " rec (%.0f/s)  watermark %s  checkpoint %s",
                (double)(now - pr->t0) / 1e9, t.in, rin, t.out, rout, wm, ck);
        fflush(stderr);
        atomic_store_explicit(&pr->printed, 1, memory_order_relaxed);
        prev = t;
        last = now;
    }
    return 0;
}

/* ---- interrupts ------------------------------------------------------------------------ */
typedef struct watch_arg {
    int fd;
    weir__local *l;
    pthread_mutex_t mu;
    uint64_t job; /* mu: 0 until submitted */
    int signo;    /* mu: the first signal, 0 none */
    int cancelled;
} watch_arg;

/* Cancel the job through a client of our own: the waiting one is busy. */
static void cancel_job(weir__local *l, uint64_t job)
{
    weir__client *c;
    char msg[512];
    if (weir__local_client(l, "weir run", &c, msg, sizeof(msg)) < 0) {
        fprintf(stderr, "\nweir run: cannot cancel the job: %s\n", msg);
        return;
    }
    weir__cl_cancel_job_ack a;
    int e = weir__client_cancel(c, job, &a, weir_time_after_ms(WEIR__CLIENT_CONNECT_MS), msg,
                                sizeof(msg));
    if (e == 0)
        weir__client_cancel_free(&a);
    else if (e != -ECANCELED) /* (the job ended meanwhile: the watcher is done) */
        fprintf(stderr, "\nweir run: cannot cancel the job: %s\n", msg);
    weir__client_close(c);
}

/* The job is known (or a signal came): whoever sees both cancels it. */
static void maybe_cancel(watch_arg *w)
{
    pthread_mutex_lock(&w->mu);
    uint64_t job = w->signo && !w->cancelled ? w->job : 0;
    if (job)
        w->cancelled = 1;
    pthread_mutex_unlock(&w->mu);
    if (job)
        cancel_job(w->l, job);
}

static intptr_t watch_main(void *arg)
{
    watch_arg *w = arg;
    struct signalfd_siginfo si;
    for (int n = 0; weir_io_read(w->fd, &si, sizeof(si), WEIR_FOREVER) == (ssize_t)sizeof(si);) {
        if (n++ == 0) {
            pthread_mutex_lock(&w->mu);
            w->signo = (int)si.ssi_signo;
            pthread_mutex_unlock(&w->mu);
            maybe_cancel(w);
            continue;
        }
        /* The second one: stop trying to be graceful. */
        fprintf(stderr, "\nweir run: %s again: exiting now\n", strsignal((int)si.ssi_signo));
        _exit(128 + (int)si.ssi_signo);
    }
    return 0;
}

/* While the nodes stop: any signal ends the process at once. */
static intptr_t exit_main(void *arg)
{
    int fd = *(const int *)arg;
    struct signalfd_siginfo si;
    if (weir_io_read(fd, &si, sizeof(si), WEIR_FOREVER) == (ssize_t)sizeof(si)) {
        fprintf(stderr, "\nweir run: %s while stopping: exiting now\n",
                strsignal((int)si.ssi_signo));
        _exit(128 + (int)si.ssi_signo);
    }
    return 0;
}

/* ---- the run ------------------------------------------------------------------------------- */
/* Submit the job to the local cluster and wait for its end: 0 with *d
 * (weir__client_completed_free it), or a negative errno with msg (the
 * cluster could not take the job). */
static int submit_and_wait(weir__local *l, const cli_opts *o, progress *pr, watch_arg *w,
                           weir__cl_job_completed *d, char *msg, size_t cap)
{
    weir__client_submit_opts so = {
        .plugin = o->plugin,
        .parallelism = o->run.parallelism > 0 ? (uint32_t)o->run.parallelism : 1,
        .checkpoint_dir = o->run.checkpoint_dir,
        .checkpoint_interval_ms =
            o->run.checkpoint_interval_ms > 0 ? (uint64_t)o->run.checkpoint_interval_ms : 0,
        .argc = o->job_argc > 0 ? o->job_argc - 1 : 0,
        .argv = o->job_argc > 0 ? o->job_argv + 1 : NULL,
        .max_restarts = -1,
        .restore = o->run.restore,
        .state_backend = o->run.state_backend,
        .idle_timeout_ms = o->run.idle_timeout_ms > 0 ? (uint64_t)o->run.idle_timeout_ms : 0};
    weir__client *c;
    int e = weir__local_client(l, "weir run", &c, msg, cap);
    if (e < 0)
        return e;
    uint64_t id = 0;
    if ((e = weir__client_submit(c, &so, WEIR_FOREVER, &id, msg, cap)) == 0) {
        atomic_store(&pr->job, id);
        pthread_mutex_lock(&w->mu);
        w->job = id;
        pthread_mutex_unlock(&w->mu);
        maybe_cancel(w); /* a signal that came while it was submitted */
        e = weir__client_wait(c, id, d, WEIR_FOREVER, msg, cap);
    }
    weir__client_close(c);
    return e;
}

int weir__cli_run(weir_plugin *p, const cli_opts *o)
{
    const weir_job_entry *entry = weir_plugin_entry(p);
    int show = o->progress < 0 ? isatty(2) : o->progress;
    progress pr = {.t0 = weir_time_now()};
    watch_arg w = {.fd = o->signal_fd};
    pthread_mutex_init(&w.mu, NULL);
    char msg[WEIR_CLUSTER_MESSAGE_MAX + 256] = "";
    weir__local *l = NULL;
    int e = weir__local_start(0, &l, msg, sizeof(msg));
    weir__cl_job_completed d = {0};
    if (e == 0) {
        pr.l = w.l = l;
        weir_task *ticker = NULL, *watch = NULL;
        if (show)
            ticker = weir_task_spawn(
                progress_main, &pr, &(weir_spawn_opts){.name = "progress", .stack_size = 64 << 10});
        if (o->signal_fd >= 0)
            watch = weir_task_spawn(watch_main, &w,
                                    &(weir_spawn_opts){.name = "signals", .stack_size = 64 << 10});
        e = submit_and_wait(l, o, &pr, &w, &d, msg, sizeof(msg));
        if (ticker) {
            weir_task_cancel(ticker);
            weir_task_join(ticker, NULL, WEIR_FOREVER);
            if (atomic_load_explicit(&pr.printed, memory_order_relaxed))
                fputs("\r\033[K", stderr);
        }
        if (watch) {
            weir_task_cancel(watch);
            weir_task_join(watch, NULL, WEIR_FOREVER);
        }
        /* Stopping waits for every subtask to end: one stuck in an
         * operator must not make the process deaf to a signal. */
        weir_task *deaf = NULL;
        if (o->signal_fd >= 0)
            deaf = weir_task_spawn(exit_main, (void *)&o->signal_fd,
                                   &(weir_spawn_opts){.name = "signals", .stack_size = 64 << 10});
        char why[512];
        weir__local_stop(l, why, sizeof(why));
        if (deaf) {
            weir_task_cancel(deaf);
            weir_task_join(deaf, NULL, WEIR_FOREVER);
        }
        if (e < 0 && why[0] && !msg[0])
            snprintf(msg, sizeof(msg), "%s", why);
    }
    pthread_mutex_destroy(&w.mu);
    double secs = (double)(weir_time_now() - pr.t0) / 1e9;
    int rc = CLI_OK;
    if (e < 0) {
        fprintf(stderr, "weir run: job %s failed: %s\n", entry->name,
                msg[0] ? msg : weir_strerror(e));
        return CLI_FAILED;
    }
    if (d.err == -ECANCELED && w.signo) {
        fprintf(stderr, "weir run: job %s interrupted by %s after %.2fs: cancelled\n", entry->name,
                w.signo == SIGINT ? "SIGINT" : "SIGTERM", secs);
        rc = 128 + w.signo;
    } else if (d.err == -EBUSY) {
        /* Its checkpoint or output directory is another run's (the
         * coordinator refuses before anything is deployed): the command
         * was wrong, like bad arguments, and nothing ran. */
        fprintf(stderr, "weir run: job %s not started: %s\n", entry->name,
                d.message && *d.message ? d.message : weir_strerror(d.err));
        rc = CLI_USAGE;
    } else if (d.err) {
        fprintf(stderr, "weir run: job %s failed: %s\n", entry->name,
                d.message && *d.message ? d.message : weir_strerror(d.err));
        rc = CLI_FAILED;
    } else if (!o->quiet) {
        weir__cli_summary(&d, secs, d.sinks ? d.watermark : WEIR_WATERMARK_MIN,
                          o->run.checkpoint_dir != NULL, "weir run: job %s %s", entry->name,
                          entry->version ? entry->version : "");
    }
    weir__client_completed_free(&d);
    return rc;
}
