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
 * The progress line is progress.c's, read from the local coordinator as
 * `weir submit` reads it from a cluster's. With --http-port the local
 * coordinator serves its HTTP API and the console on that port of
 * 127.0.0.1, and the command prints the URL. The summary is the
 * coordinator's JobCompleted, as `weir submit` prints it.
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
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cluster/local.h"
#include "weir/io.h"
#include "weir/rt.h"

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
static int submit_and_wait(weir__local *l, const cli_opts *o, weir__cli_progress *pr, watch_arg *w,
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
        weir__cli_progress_job(pr, id);
        pthread_mutex_lock(&w->mu);
        w->job = id;
        pthread_mutex_unlock(&w->mu);
        maybe_cancel(w); /* a signal that came while it was submitted */
        e = weir__client_wait(c, id, d, WEIR_FOREVER, msg, cap);
    }
    weir__client_close(c);
    return e;
}

/* The progress line's client of the local coordinator. */
static int open_local(void *arg, weir__client **c, char *msg, size_t cap)
{
    return weir__local_client(arg, "weir run progress", c, msg, cap);
}

int weir__cli_run(weir_plugin *p, const cli_opts *o)
{
    const weir_job_entry *entry = weir_plugin_entry(p);
    int show = o->progress < 0 ? isatty(2) : o->progress;
    int64_t t0 = weir_time_now();
    watch_arg w = {.fd = o->signal_fd};
    pthread_mutex_init(&w.mu, NULL);
    char msg[WEIR_CLUSTER_MESSAGE_MAX + 256] = "";
    weir__local *l = NULL;
    int e = weir__local_start(0, o->http_port, &l, msg, sizeof(msg));
    weir__cl_job_completed d = {0};
    if (e == 0) {
        w.l = l;
        if (o->http_port >= 0)
            fprintf(stderr, "weir run: console and API on http://127.0.0.1:%d/%s\n",
                    weir__local_http_port(l),
                    getenv("WEIR_AUTH_TOKEN") ? " (open it once with ?access_token=TOKEN, the "
                                                "token of WEIR_AUTH_TOKEN)"
                                              : "");
        weir__cli_progress *pr = show ? weir__cli_progress_start(open_local, l) : NULL;
        weir_task *watch = NULL;
        if (o->signal_fd >= 0)
            watch = weir_task_spawn(watch_main, &w,
                                    &(weir_spawn_opts){.name = "signals", .stack_size = 64 << 10});
        e = submit_and_wait(l, o, pr, &w, &d, msg, sizeof(msg));
        weir__cli_progress_stop(pr);
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
    double secs = (double)(weir_time_now() - t0) / 1e9;
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
