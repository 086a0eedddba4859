/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.h - the weir command's pieces shared between its files.
 *
 * weir.c parses the command line (one parser for `run` and `lint`, so a
 * clean lint means run accepts the same flags), checks the configuration
 * and that the job defines; run.c runs it on a cluster inside the process
 * (cluster/local.h: a coordinator and one worker, joined by socketpairs),
 * submitted as its plugin the way `weir submit` submits it. submit.c is
 * the cluster's client commands (submit, jobs, cancel); args.c the helpers
 * every command parses and prints with, so they all take flags and
 * numbers alike.
 */
#ifndef WEIR_CLI_H
#define WEIR_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cluster/client.h"
#include "weir/job.h"
#include "weir/stream.h"
#include "weir/tls.h"

/* Exit codes: the interface of the command (docs/jobs.md). */
enum { CLI_OK = 0, CLI_FAILED = 1, CLI_USAGE = 2 };

typedef struct cli_opts {
    weir_run_opts run;
    const char *plugin; /* JOB.so */
    int job_argc;       /* job arguments, argv[0] = the plugin path */
    char **job_argv;
    int progress;  /* -1: on a terminal, 0: never, 1: always */
    int quiet;     /* no summary */
    int signal_fd; /* SIGINT / SIGTERM (blocked) read from here; -1: none */
    int http_port; /* run: the HTTP API and console on 127.0.0.1 (0: a free port); -1: none */
} cli_opts;

/*
 * Run the job of plugin p with o (its arguments in o->job_argv): start a
 * coordinator and one worker in this process (cluster/local.h), submit
 * the job to them through a client and wait for its end; they stop before
 * it returns. Must run in a task. Prints a live progress line on stderr
 * when o->progress says so and a summary at the end (unless o->quiet).
 * CLI_OK, CLI_FAILED with the job's error printed, CLI_USAGE when the job
 * was not started because another run holds its checkpoint or output
 * directory (-EBUSY; the message names the directory and the holder's
 * pid), or 128 + the signal's number when a signal read from
 * o->signal_fd cancelled the job.
 */
int weir__cli_run(weir_plugin *p, const cli_opts *o);

/* ---- the progress line (progress.c) ------------------------------------------------------ */
/* A fiber drawing the job's progress on stderr once a second, read from
 * the coordinator through clients open() makes (0, or a negative errno
 * with msg: tried again the next second). NULL: out of memory (no line).
 * _job names the job once it is submitted; _stop ends the fiber, clears
 * the line and frees pr (NULL: nothing). */
typedef struct weir__cli_progress weir__cli_progress;
weir__cli_progress *weir__cli_progress_start(int (*open)(void *arg, weir__client **c, char *msg,
                                                         size_t cap),
                                             void *arg);
void weir__cli_progress_job(weir__cli_progress *pr, uint64_t job);
void weir__cli_progress_stop(weir__cli_progress *pr);

/* ---- shared helpers (args.c) ------------------------------------------------------------ */

/* "weir CMD: " + the message + a newline, on stderr. */
void weir__cli_errf(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A whole decimal number in [lo, hi]; 0, or -1 with the reason printed. */
int weir__cli_parse_num(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi,
                        int64_t *out);

/* A command's flag: "--name" alone, or taking a value as "--name V" or
 * "--name=V". */
typedef struct weir__cli_flag {
    const char *name;
    int id;
    int takes_value;
} weir__cli_flag;

/*
 * argv[*i], which starts with '-' and is not "-" alone, as one of
 * flags[0..n): 0 with *f and *val (its value, NULL for a flag that takes
 * none; a value in the next argument advances *i). CLI_USAGE, printed, for
 * an unknown flag (job_args: the hint that the job's own flags go after
 * --), a missing value, or a value given to a flag that takes none.
 */
int weir__cli_flag_next(const char *cmd, const weir__cli_flag *flags, size_t n, int job_args,
                        int argc, char **argv, int *i, const weir__cli_flag **f, const char **val);

/*
 * A configuration check's findings (weir run / lint's flags, weir node's
 * settings): each is one line on stderr, "weir CMD: error: ..." or "weir
 * CMD: warning: ...", counted here. Errors refuse (run and node do not
 * start, lint exits 1); warnings print and pass.
 */
typedef struct weir__cli_findings {
    const char *cmd;
    int errors, warnings;
} weir__cli_findings;
void weir__cli_finding(weir__cli_findings *f, int error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * TLS flags (docs/cluster.md, "TLS"). A coordinator: --tls-cert and
 * --tls-key (both, or neither: plain TCP), --tls-client-ca (mutual TLS,
 * needs the other two). A worker or a client command: --tls-ca turns TLS
 * on (the authority the coordinator's certificate must chain to);
 * --tls-client-cert and --tls-client-key (both or neither) and
 * --tls-no-verify-hostname need it. A worker's data plane (its channels
 * to other workers): --data-tls-cert, --data-tls-key and --data-tls-ca,
 * all three or none; --data-tls-no-verify-hostname needs them.
 */
typedef struct weir__cli_tls {
    const char *cert, *key, *client_ca;        /* the coordinator's */
    const char *ca, *client_cert, *client_key; /* a worker's, a client's */
    int no_verify_hostname;
    const char *data_cert, *data_key, *data_ca; /* a worker's data plane */
    int data_no_verify_hostname;
} weir__cli_tls;
/* Flag name's value into t when name is one of the TLS flags above (val:
 * its value; none for --tls-no-verify-hostname): 1, else 0. Every command
 * taking them parses them so. */
int weir__cli_tls_flag(const char *name, const char *val, weir__cli_tls *t);
/* The usage lines of a worker's or a client's TLS flags. */
extern const char weir__cli_tls_client_help[];
/* An incoherent combination for a server (server) or a client side:
 * CLI_USAGE, printed; else CLI_OK. */
int weir__cli_tls_check(const char *cmd, const weir__cli_tls *t, int server);
/* The context t asks for (*out NULL when it asks for none): CLI_OK, or
 * CLI_USAGE with what is wrong printed (a file that cannot be read, a key
 * that is not its certificate's). weir_tls_ctx_free it. */
int weir__cli_tls_ctx(const char *cmd, const weir__cli_tls *t, int server, weir_tls_ctx **out);

/*
 * A coordinator's etcd flags beyond --etcd-endpoints (docs/cluster.md,
 * "Electing through etcd"): --etcd-ca FILE (required with https://
 * endpoints), --etcd-cert FILE and --etcd-key FILE (a client certificate,
 * both or neither), --etcd-no-verify-hostname, --etcd-user NAME and
 * --etcd-password env://VAR (only a reference: the secret is read from
 * the environment, never taken from the command line).
 */
typedef struct weir__cli_etcd {
    const char *ca, *cert, *key, *user, *password_ref;
    int no_verify_hostname;
    char password[1024]; /* what password_ref stands for */
} weir__cli_etcd;
/* As weir__cli_tls_flag, for the flags above: 1 when name is one. */
int weir__cli_etcd_flag(const char *name, const char *val, weir__cli_etcd *t);
/* Check t against the endpoints (NULL: none given) and fill *o: the
 * files load, https:// has --etcd-ca, no scheme is mixed, the password's
 * variable is set. CLI_USAGE with the problem printed, else CLI_OK. */
struct weir__etcd_opts;
int weir__cli_etcd_check(const char *cmd, weir__cli_etcd *t, const char *endpoints,
                         struct weir__etcd_opts *o);

/* A worker's data-plane contexts (both NULL when t asks for none): a
 * server and a client of --data-tls-cert/--data-tls-key, checking peers
 * against --data-tls-ca. CLI_OK, or CLI_USAGE printed as above (nothing
 * to free then). weir_tls_ctx_free both. */
int weir__cli_data_tls_ctx(const char *cmd, const weir__cli_tls *t, weir_tls_ctx **server,
                           weir_tls_ctx **client);

/* A watermark as the summaries print it: "-" none yet, "end", or the number. */
void weir__cli_fmt_wm(char *buf, size_t len, int64_t wm);
/* A rate (records per second) as "1234", "12.3k" or "4.56M" into buf: buf. */
const char *weir__cli_fmt_rate(double v, char *buf, size_t cap);

/*
 * A job's end as `weir run` and `weir submit` print it, on stderr: the
 * label (printf's label_fmt and what follows), then " finished in SECSs:
 * N records from S source(s), M into K sink(s), watermark W" (as
 * weir__cli_fmt_wm prints it), then ", checkpoints C (latest L, restored
 * R)" when checkpoints, ", restarts N" when d has any, and a newline. The
 * caller chooses the label, the clock behind secs, the watermark shown
 * and whether checkpoints are.
 */
struct weir__cl_job_completed;
void weir__cli_summary(const struct weir__cl_job_completed *d, double secs, int64_t watermark,
                       int checkpoints, const char *label_fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ---- cluster client commands (submit.c) ---------------------------------------------------
 * argc/argv: the arguments after the command's name. Exit codes as above. */
int weir__cli_submit(int argc, char **argv);
int weir__cli_jobs(int argc, char **argv);
int weir__cli_cancel(int argc, char **argv);
int weir__cli_job(int argc, char **argv);

/* `weir node` (node.c): argv after "node". Returns the exit code. */
int weir__cli_node(int argc, char **argv);
/* `weir lint --role=...` (node.c): argv after "lint", a `weir node` command
 * line's flags, checked as `weir node` checks them at start without
 * starting anything. 0 clean (warnings allowed), 1 an error, 2 bad usage. */
int weir__cli_node_lint(int argc, char **argv);

#endif /* WEIR_CLI_H */
