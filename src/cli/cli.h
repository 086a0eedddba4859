/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.h - the weir command's pieces shared between its files.
 *
 * weir.c parses the command line (one parser for `run` and `lint`, so a
 * clean lint means run accepts the same flags) and checks the
 * configuration; run.c runs a defined job. The run path takes the job and
 * the options only, so a coordinator and workers can later be put under it
 * in one process without changing what users see.
 */
#ifndef WEIR_CLI_H
#define WEIR_CLI_H

#include <stdio.h>

#include "weir/job.h"
#include "weir/stream.h"

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
} cli_opts;

/*
 * Run j (defined from plugin p) with o on the calling fiber's runtime.
 * Prints a live progress line on stderr when o->progress says so and a
 * summary at the end (unless o->quiet). CLI_OK, CLI_FAILED with the job's
 * error printed, CLI_USAGE when the job was not started because another run
 * holds its checkpoint or output directory (-EBUSY; the message names the
 * directory and the holder's pid), or 128 + the signal's number when a
 * signal read from o->signal_fd cancelled the job.
 */
int weir__cli_run(weir_plugin *p, weir_job *j, const cli_opts *o);

/* `weir node` (node.c): argv after "node". Returns the exit code. */
int weir__cli_node(int argc, char **argv);

#endif /* WEIR_CLI_H */
