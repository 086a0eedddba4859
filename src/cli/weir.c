/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir.c - the weir command: `weir run JOB.so` loads a job plugin, defines
 * the job and runs it; `weir lint JOB.so` checks the same plugin, graph and
 * flags without running anything. docs/jobs.md is the user's guide.
 *
 * Exit codes are the interface (scripts test them, not the text): 0 ok,
 * 1 the job (or the configuration lint checked) failed, 2 bad usage - an
 * unknown flag, a missing or malformed value, a plugin that cannot be
 * loaded or that the ABI gate refuses; 128 + the signal's number when
 * SIGINT / SIGTERM interrupted `weir run`.
 *
 * run and lint share the flag parser and the configuration checks, so a
 * clean lint means run accepts the same command line.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "weir/job.h"
#include "weir/rt.h"
#include "weir/state.h"

static const char usage_main[] =
    "usage: weir <command> [options]\n"
    "\n"
    "commands:\n"
    "  run JOB.so [flags] [--] [job args...]   load a job plugin and run it\n"
    "  lint JOB.so [flags] [--] [job args...]  check a plugin, its graph and the flags\n"
    "  lint --role=coordinator [node flags]    check a cluster node's settings\n"
    "  node --role=coordinator|worker ...      run a cluster node (docs/cluster.md)\n"
    "  version                                 print weir's version and ABI identity\n"
    "  submit JOB.so [flags] [--] [args...]    submit a job to a cluster's coordinator\n"
    "  jobs                                    list the jobs of a cluster\n"
    "  job JOB_ID                              one job of a cluster in detail\n"
    "  cancel JOB_ID                           cancel a job of a cluster\n"
    "\n"
    "`weir <command> --help` describes a command. Exit codes: 0 ok, 1 the job failed\n"
    "(lint: a problem found), 2 bad usage or a plugin that cannot be loaded.\n";

static const char flags_help[] =
    "flags:\n"
    "  --parallelism N             subtasks per operator without its own (1..128, default 1)\n"
    "  --checkpoint-dir DIR        where checkpoints go (created if missing)\n"
    "  --checkpoint-interval-ms M  take a checkpoint every M ms (0: none; needs --checkpoint-dir)\n"
    "  --restore                   start from the latest completed checkpoint in DIR\n"
    "  --idle-timeout-ms M         an input silent this long leaves the watermark (0: never)\n"
    "  --state-backend URI         keyed state's backend: memory: (default) or\n"
    "                              remote:POOL[?hot_max_bytes=N] (docs/state.md)\n"
    "  --progress / --no-progress  live progress line on stderr (default: when a terminal)\n"
    "  --quiet                     no summary at the end\n"
    "  --http-port P               run: serve the HTTP API and the console on\n"
    "                              127.0.0.1:P (0: a free port) and print the URL\n"
    "  -h, --help                  this help\n"
    "\n"
    "Flags may be written --flag=value. The first argument after JOB.so that is not a\n"
    "weir flag starts the job's arguments; `--` starts them explicitly (needed when\n"
    "the job's first argument looks like a flag). The job sees JOB.so as argv[0].\n";

static void usage_run(FILE *f)
{
    fprintf(f,
            "usage: weir run JOB.so [flags] [--] [job args...]\n"
            "\n"
            "Load the job plugin JOB.so (refused unless built against this weir: same\n"
            "header fingerprint, target and toolchain), define the job with the job\n"
            "arguments and run it on this process's runtime (WEIR_THREADS threads).\n"
            "\n%s\n"
            "exit: 0 the job finished, 1 it failed (the error is printed), 2 bad usage or\n"
            "a plugin that cannot be loaded or is refused, 130 / 143 interrupted by SIGINT /\n"
            "SIGTERM (the job is cancelled; a second signal exits at once).\n",
            flags_help);
}

static void usage_lint(FILE *f)
{
    fprintf(f,
            "usage: weir lint JOB.so [flags] [--] [job args...]\n"
            "       weir lint --role=coordinator|worker [weir node flags]\n"
            "\n"
            "Check without running: the plugin loads and passes the ABI gate, the job's\n"
            "graph builds from the job arguments, and the flags make sense (parallelism\n"
            "range, checkpoint directory writable, interval sane, restore has something\n"
            "to restore). Warnings print but do not fail.\n"
            "\n"
            "With --role first, it checks a `weir node` command line instead (paste one\n"
            "in with `node` replaced by `lint`): the coordinator's liveness and outbound\n"
            "settings, as the node checks them at start (docs/cluster.md, \"Settings and\n"
            "lint\"); weir node --help lists the flags.\n"
            "\n%s\n"
            "exit: 0 ok (\"ok\" is printed), 1 a problem found, 2 bad usage or a plugin\n"
            "that cannot be loaded or is refused.\n",
            flags_help);
}

static void usage_version(FILE *f)
{
    fputs("usage: weir version\n\nPrint weir's version and the ABI identity a job plugin "
          "must match.\n",
          f);
}

enum {
    F_PAR,
    F_DIR,
    F_INTERVAL,
    F_RESTORE,
    F_IDLE,
    F_STATE,
    F_PROGRESS,
    F_NO_PROGRESS,
    F_QUIET,
    F_HTTP,
    F_HELP
};
static const weir__cli_flag flags[] = {
    {"--parallelism", F_PAR, 1},
    {"--checkpoint-dir", F_DIR, 1},
    {"--checkpoint-interval-ms", F_INTERVAL, 1},
    {"--restore", F_RESTORE, 0},
    {"--idle-timeout-ms", F_IDLE, 1},
    {"--state-backend", F_STATE, 1},
    {"--progress", F_PROGRESS, 0},
    {"--no-progress", F_NO_PROGRESS, 0},
    {"--quiet", F_QUIET, 0},
    {"--http-port", F_HTTP, 1},
    {"--help", F_HELP, 0},
    {"-h", F_HELP, 0},
};

/* Parse the arguments after the command name. CLI_OK, CLI_USAGE (printed),
 * or -1 for --help (printed). */
static int parse_args(const char *cmd, int argc, char **argv, cli_opts *o)
{
    *o = (cli_opts){.progress = -1, .signal_fd = -1, .http_port = -1};
    int i = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (o->plugin)
                break; /* the job's arguments start here */
            o->plugin = a;
            continue;
        }
        const weir__cli_flag *f;
        const char *val;
        if (weir__cli_flag_next(cmd, flags, sizeof(flags) / sizeof(flags[0]), 1, argc, argv, &i, &f,
                                &val))
            return CLI_USAGE;
        int64_t v;
        switch (f->id) {
        case F_HELP:
            return -1;
        case F_PAR:
            if (weir__cli_parse_num(cmd, f->name, val, 1, WEIR_KEY_GROUPS, &v))
                return CLI_USAGE;
            o->run.parallelism = (int)v;
            break;
        case F_DIR:
            if (!*val) {
                weir__cli_errf(cmd, "%s: empty directory name", f->name);
                return CLI_USAGE;
            }
            o->run.checkpoint_dir = val;
            break;
        case F_INTERVAL:
            if (weir__cli_parse_num(cmd, f->name, val, 0, INT64_MAX / 1000000, &v))
                return CLI_USAGE;
            o->run.checkpoint_interval_ms = v;
            break;
        case F_IDLE:
            if (weir__cli_parse_num(cmd, f->name, val, 0, INT64_MAX / 1000000, &v))
                return CLI_USAGE;
            o->run.idle_timeout_ms = v;
            break;
        case F_RESTORE:
            o->run.restore = 1;
            break;
        case F_STATE:
            if (!*val) {
                weir__cli_errf(cmd, "%s: empty URI", f->name);
                return CLI_USAGE;
            }
            o->run.state_backend = val;
            break;
        case F_PROGRESS:
            o->progress = 1;
            break;
        case F_NO_PROGRESS:
            o->progress = 0;
            break;
        case F_QUIET:
            o->quiet = 1;
            break;
        case F_HTTP:
            if (weir__cli_parse_num(cmd, f->name, val, 0, 65535, &v))
                return CLI_USAGE;
            o->http_port = (int)v;
            break;
        }
    }
    if (!o->plugin && i < argc)
        o->plugin = argv[i++];
    if (!o->plugin) {
        weir__cli_errf(cmd, "no job plugin given (weir %s JOB.so ...; see weir %s --help)", cmd,
                       cmd);
        return CLI_USAGE;
    }
    /* The job's argv: the plugin path, then what is left. */
    o->job_argc = 1 + (argc - i);
    o->job_argv = calloc((size_t)o->job_argc + 1, sizeof(char *));
    if (!o->job_argv) {
        weir__cli_errf(cmd, "out of memory");
        return CLI_FAILED;
    }
    o->job_argv[0] = (char *)o->plugin;
    for (int k = 1; k < o->job_argc; k++)
        o->job_argv[k] = argv[i + k - 1];
    return CLI_OK;
}

/* ---- configuration checks (run refuses on an error, lint reports) ---------------------- */

/* The latest COMPLETED-<id> in dir (0: none). */
static uint64_t latest_completed(const char *dir)
{
    DIR *d = opendir(dir);
    uint64_t best = 0;
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        uint64_t id;
        char extra;
        if (sscanf(de->d_name, "COMPLETED-%" SCNu64 "%c", &id, &extra) == 1 && id > best)
            best = id;
    }
    closedir(d);
    return best;
}

/* What weir_job_run would take badly or silently ignore. Every message says
 * what to change. */
static void check_config(const cli_opts *o, weir__cli_findings *f)
{
    const weir_run_opts *r = &o->run;
    const char *dir = r->checkpoint_dir;
    if (r->checkpoint_interval_ms > 0 && !dir)
        weir__cli_finding(f, 1,
                          "--checkpoint-interval-ms %" PRId64 " without --checkpoint-dir: "
                          "checkpoints need a directory",
                          r->checkpoint_interval_ms);
    if (r->restore && !dir)
        weir__cli_finding(f, 1, "--restore without --checkpoint-dir: nothing to restore from");
    if (dir) {
        struct stat st;
        if (stat(dir, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                weir__cli_finding(f, 1, "checkpoint directory %s is not a directory", dir);
            else if (access(dir, W_OK | X_OK) != 0)
                weir__cli_finding(f, 1, "checkpoint directory %s is not writable: %s", dir,
                                  strerror(errno));
        } else if (errno == ENOENT) {
            /* weir_job_run creates the last component: its parent must exist. */
            char parent[PATH_MAX];
            snprintf(parent, sizeof(parent), "%s", dir);
            size_t n = strlen(parent);
            while (n > 1 && parent[n - 1] == '/')
                parent[--n] = '\0';
            char *slash = strrchr(parent, '/');
            if (!slash)
                snprintf(parent, sizeof(parent), ".");
            else if (slash == parent)
                parent[1] = '\0';
            else
                *slash = '\0';
            if (access(parent, W_OK | X_OK) != 0)
                weir__cli_finding(f, 1, "checkpoint directory %s cannot be created (%s: %s)", dir,
                                  parent, strerror(errno));
        } else {
            weir__cli_finding(f, 1, "checkpoint directory %s: %s", dir, strerror(errno));
        }
        if (r->checkpoint_interval_ms == 0 && !r->restore)
            weir__cli_finding(f, 0,
                              "--checkpoint-dir without --checkpoint-interval-ms: no checkpoint "
                              "will be taken");
        if (r->restore && latest_completed(dir) == 0)
            weir__cli_finding(
                f, 0, "--restore: no completed checkpoint in %s yet, the job starts afresh", dir);
    }
    if (r->checkpoint_interval_ms > 0 && r->checkpoint_interval_ms < 10)
        weir__cli_finding(f, 0,
                          "--checkpoint-interval-ms %" PRId64 " is very short: the job may spend "
                          "more time checkpointing than working",
                          r->checkpoint_interval_ms);
    if (r->state_backend) {
        weir_state_backend *b;
        int e = weir_state_backend_open(r->state_backend, WEIR_KEY_GROUPS, 0, 0, &b);
        if (e)
            weir__cli_finding(f, 1, "--state-backend %s: %s", r->state_backend,
                              e == -ENOENT ? "no backend has that scheme"
                                           : "a malformed URI, or one its backend refused");
        else
            weir_state_backend_free(b);
        if (!e && strstr(r->state_backend, "mem://") && dir)
            weir__cli_finding(f, 0,
                              "--state-backend %s keeps its pool in this process's memory: a "
                              "checkpoint's state is gone when the process ends",
                              r->state_backend);
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 0 && r->parallelism > 4 * cores)
        weir__cli_finding(
            f, 0, "--parallelism %d is more than 4x the %ld cores: subtasks will mostly wait",
            r->parallelism, cores);
}

/* ---- commands ---------------------------------------------------------------------------- */

/* Handed from main to the runtime's main fiber (weir_main takes argc/argv). */
static struct {
    const char *cmd;
    cli_opts o;
    weir_plugin *p;
} g;

static int run_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    /* Defined here only as a check, so that a job that cannot define
     * fails before a cluster is started; the run defines its own. */
    char msg[1024];
    weir_job *j = NULL;
    if (weir_plugin_define(g.p, g.o.job_argc, g.o.job_argv, &j, msg, sizeof(msg)) != 0) {
        weir__cli_errf(g.cmd, "%s", msg);
        return CLI_FAILED;
    }
    weir_job_free(j);
    return weir__cli_run(g.p, &g.o);
}

/* lint: the job's graph. It is defined twice and the two compared: every
 * process that loads the job defines it, and they must agree on the
 * operators (names, kinds, order). */
static void lint_job(weir__cli_findings *f)
{
    const char *name = weir_plugin_entry(g.p)->name;
    char msg[1024];
    weir_job *j = NULL, *again = NULL;
    if (weir_plugin_define(g.p, g.o.job_argc, g.o.job_argv, &j, msg, sizeof(msg)) != 0) {
        weir__cli_finding(f, 1, "%s", msg);
        return;
    }
    int n = weir_job_ops(j), sources = 0, sinks = 0;
    if (n == 0)
        weir__cli_finding(f, 1, "job %s defines no operators", name);
    for (int i = 0; i < n; i++) {
        sources += weir_job_op_kind(j, i) == WEIR_OP_SOURCE;
        sinks += weir_job_op_kind(j, i) == WEIR_OP_SINK;
    }
    if (n > 0 && sinks == 0)
        weir__cli_finding(f, 0, "job %s has no sink: its results go nowhere", name);
    if (weir_plugin_define(g.p, g.o.job_argc, g.o.job_argv, &again, msg, sizeof(msg)) != 0) {
        weir__cli_finding(f, 1,
                          "job %s: defined a second time it fails (%s): every process that loads "
                          "the job defines it",
                          name, msg);
    } else if (weir_job_ops(again) != n) {
        weir__cli_finding(f, 1,
                          "job %s is not deterministic: %d operators, then %d when defined again",
                          name, n, weir_job_ops(again));
    } else {
        for (int i = 0; i < n; i++)
            if (strcmp(weir_job_op_name(j, i), weir_job_op_name(again, i)) != 0 ||
                weir_job_op_kind(j, i) != weir_job_op_kind(again, i)) {
                weir__cli_finding(f, 1,
                                  "job %s is not deterministic: operator %d is \"%s\", then \"%s\" "
                                  "when defined again (name operators from the job arguments only)",
                                  name, i, weir_job_op_name(j, i), weir_job_op_name(again, i));
                break;
            }
    }
    if (!f->errors)
        printf("ok: job %s %s, %d operators (%d sources, %d sinks)%s\n", name,
               weir_plugin_entry(g.p)->version, n, sources, sinks,
               f->warnings ? ", with warnings" : "");
    weir_job_free(again);
    weir_job_free(j);
}

static int cmd_run_or_lint(const char *cmd, int argc, char **argv)
{
    int lint = strcmp(cmd, "lint") == 0;
    /* A node's settings: the same command line as `weir node`'s. */
    if (lint && argc > 0 && strncmp(argv[0], "--role", 6) == 0)
        return weir__cli_node_lint(argc, argv);
    int rc = parse_args(cmd, argc, argv, &g.o);
    if (rc < 0) {
        (lint ? usage_lint : usage_run)(stdout);
        return CLI_OK;
    }
    if (rc != CLI_OK)
        return rc;
    g.cmd = cmd;
    char msg[1024];
    int e = weir_plugin_open(g.o.plugin, &g.p, msg, sizeof(msg));
    if (e < 0) {
        weir__cli_errf(cmd, "%s", msg);
        free(g.o.job_argv);
        return CLI_USAGE;
    }
    weir__cli_findings f = {.cmd = cmd};
    check_config(&g.o, &f);
    if (!lint) {
        if (f.errors) {
            rc = CLI_USAGE;
        } else {
            /* Block SIGINT / SIGTERM before the runtime's threads exist, so
             * every thread inherits it, and read them from a signalfd
             * (run.c, "Interrupts"). */
            sigset_t set;
            sigemptyset(&set);
            sigaddset(&set, SIGINT);
            sigaddset(&set, SIGTERM);
            g.o.signal_fd = -1;
            if (pthread_sigmask(SIG_BLOCK, &set, NULL) == 0)
                g.o.signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
            char *args[] = {(char *)"weir", NULL};
            rc = weir_main(run_main, 1, args);
            if (g.o.signal_fd >= 0)
                close(g.o.signal_fd);
        }
    } else {
        lint_job(&f);
        if (f.errors)
            fprintf(stderr, "weir lint: %d error%s\n", f.errors, f.errors == 1 ? "" : "s");
        rc = f.errors ? CLI_FAILED : CLI_OK;
    }
    weir_plugin_close(g.p);
    free(g.o.job_argv);
    return rc;
}

static int cmd_version(int argc, char **argv)
{
    if (argc > 0 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        usage_version(stdout);
        return CLI_OK;
    }
    if (argc > 0) {
        weir__cli_errf("version", "unexpected argument %s", argv[0]);
        return CLI_USAGE;
    }
    const weir_abi_id *id = weir_abi_self();
    printf("weir %s\nabi version %d\nabi fingerprint %s\ntarget %s\ntoolchain %s\n",
           WEIR_VERSION_STRING, id->version, id->fingerprint, id->target, id->toolchain);
    return CLI_OK;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_main, stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_main, stdout);
        return CLI_OK;
    }
    if (strcmp(cmd, "run") == 0 || strcmp(cmd, "lint") == 0)
        return cmd_run_or_lint(cmd, argc - 2, argv + 2);
    if (strcmp(cmd, "node") == 0)
        return weir__cli_node(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0)
        return cmd_version(argc - 2, argv + 2);
    if (strcmp(cmd, "submit") == 0)
        return weir__cli_submit(argc - 2, argv + 2);
    if (strcmp(cmd, "jobs") == 0)
        return weir__cli_jobs(argc - 2, argv + 2);
    if (strcmp(cmd, "cancel") == 0)
        return weir__cli_cancel(argc - 2, argv + 2);
    if (strcmp(cmd, "job") == 0)
        return weir__cli_job(argc - 2, argv + 2);
    fprintf(stderr, "weir: unknown command \"%s\"\n\n%s", cmd, usage_main);
    return CLI_USAGE;
}
