/* SPDX-License-Identifier: Apache-2.0 */
/*
 * submit.c - the cluster's client commands (docs/cluster.md): `weir submit`
 * sends a job plugin to a coordinator and, unless --detach, waits for the
 * job's end and prints the summary `weir run` prints; `weir jobs` lists the
 * coordinator's jobs; `weir job` shows one in detail (the facts of GET
 * /api/v1/jobs/ID, as tables); `weir cancel` cancels one. The protocol is
 * cluster/client.h's; this file parses, prints and picks exit codes.
 *
 * Exit codes, as every weir command: 0 ok; 1 failed (the job failed or was
 * cancelled, the coordinator refused, the connection failed or was lost,
 * the cancel of an unknown job); 2 bad usage (an unknown flag, a bad
 * number, no coordinator, a plugin that cannot be read or is not a weir
 * job) - found before anything is sent.
 *
 * The coordinator is --coordinator HOST:PORT, the one leading in an HA
 * directory (--ha-dir DIR: its active-leader.json), or WEIR_COORDINATOR
 * when neither flag is given. Interrupting `weir submit` stops the waiting, not the
 * job: `weir cancel` does that.
 */
#include <errno.h>
#include <jansson.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cluster/client.h"
#include "cluster/ha.h"
#include "weir/rt.h"
#include "weir/state.h"

/* How long a submit may wait for the coordinator's answer, uploads
 * included (the coordinator deploys before it accepts). */
#define SUBMIT_MS 120000

static const char coordinator_help_fmt[] =
    "  --coordinator HOST:PORT     the cluster's coordinator (default: $WEIR_COORDINATOR);\n"
    "                              an IPv6 address in brackets: [::1]:7000\n"
    "  --ha-dir DIR                instead, the coordinator leading in the cluster's HA\n"
    "                              directory (its active-leader.json); a waiting submit\n"
    "                              follows its job to the next leader\n"
    "%s"
    "  -h, --help                  this help\n";

/* The coordinator's flags, TLS's included, for the usages. */
static const char *coordinator_flags(void)
{
    static char buf[2048];
    snprintf(buf, sizeof(buf), coordinator_help_fmt, weir__cli_tls_client_help);
    return buf;
}

static void usage_submit(FILE *f)
{
    fprintf(f,
            "usage: weir submit JOB.so (--coordinator HOST:PORT | --ha-dir DIR) [flags]\n"
            "                   [--] [job args...]\n"
            "\n"
            "Submit the job plugin JOB.so to a cluster: the coordinator is sent the\n"
            "plugin's hash and ABI identity, and its bytes only when it does not hold them\n"
            "yet. Then wait for the job to end and print the summary `weir run` prints\n"
            "(with --detach: print the job's id and return at once). Interrupting weir\n"
            "submit stops the waiting, not the job: `weir cancel` does that.\n"
            "\n"
            "flags:\n"
            "%s"
            "  --parallelism N             subtasks per operator without its own (1..128,\n"
            "                              default: the coordinator's)\n"
            "  --checkpoint-dir DIR        where checkpoints go, on the workers (made absolute)\n"
            "  --checkpoint-interval-ms M  take a checkpoint every M ms (needs --checkpoint-dir)\n"
            "  --restore                   start from the latest completed checkpoint in DIR\n"
            "                              (none yet: from the start)\n"
            "  --idle-timeout-ms M         an input silent this long leaves the watermark\n"
            "                              (0: never)\n"
            "  --state-backend URI         keyed state's backend on the workers: memory:\n"
            "                              (default) or remote:POOL[?hot_max_bytes=N]\n"
            "                              (docs/state.md)\n"
            "  --max-restarts N            restarts before the job fails (0: fail at once;\n"
            "                              default: the coordinator's policy)\n"
            "  --detach                    print the job's id and do not wait\n"
            "  --progress / --no-progress  while waiting, a live progress line on stderr\n"
            "                              (default: when a terminal)\n"
            "\n"
            "Flags may be written --flag=value. The first argument after JOB.so that is not\n"
            "a flag starts the job's arguments; `--` starts them explicitly.\n"
            "\n"
            "exit: 0 the job finished (--detach: accepted), 1 it failed or was cancelled, the\n"
            "coordinator refused it or the connection failed, 2 bad usage or a plugin that\n"
            "cannot be read or is not a weir job.\n",
            coordinator_flags());
}

static void usage_jobs(FILE *f)
{
    fprintf(f,
            "usage: weir jobs (--coordinator HOST:PORT | --ha-dir DIR)\n"
            "\n"
            "List the coordinator's jobs: id, name, state, parallelism, when submitted and\n"
            "ended (UTC), and why a job failed.\n"
            "\n"
            "flags:\n"
            "%s"
            "\n"
            "exit: 0 listed, 1 the connection failed, 2 bad usage.\n",
            coordinator_flags());
}

static void usage_cancel(FILE *f)
{
    fprintf(f,
            "usage: weir cancel JOB_ID (--coordinator HOST:PORT | --ha-dir DIR)\n"
            "\n"
            "Cancel a job of the cluster (its id as weir submit --detach and weir jobs print\n"
            "it). The coordinator stops its subtasks; a weir submit waiting for it reports\n"
            "it cancelled.\n"
            "\n"
            "flags:\n"
            "%s"
            "\n"
            "exit: 0 the job is being cancelled (or had already ended), 1 no such job or the\n"
            "connection failed, 2 bad usage.\n",
            coordinator_flags());
}

static void usage_job(FILE *f)
{
    fprintf(f,
            "usage: weir job JOB_ID (--coordinator HOST:PORT | --ha-dir DIR)\n"
            "\n"
            "Show one job of the cluster as the coordinator sees it now: its state, each\n"
            "operator's records per second in and out, backpressure (the share of the last\n"
            "second its busiest subtask waited for credits downstream) and watermark lag,\n"
            "its latest checkpoints, its restarts with their causes and its errors (the\n"
            "facts of GET /api/v1/jobs/ID, docs/api.md).\n"
            "\n"
            "flags:\n"
            "%s"
            "\n"
            "exit: 0 shown, 1 no such job or the connection failed, 2 bad usage.\n",
            coordinator_flags());
}

enum {
    F_COORD,
    F_HADIR,
    F_PAR,
    F_DIR,
    F_INTERVAL,
    F_RESTORE,
    F_IDLE,
    F_STATE,
    F_RESTARTS,
    F_DETACH,
    F_PROGRESS,
    F_NO_PROGRESS,
    F_TLS, /* one of the client's TLS flags: weir__cli_tls_flag */
    F_HELP
};
#define TLS_FLAGS                                                                                  \
    {"--tls-ca", F_TLS, 1}, {"--tls-client-cert", F_TLS, 1}, {"--tls-client-key", F_TLS, 1},       \
    {                                                                                              \
        "--tls-no-verify-hostname", F_TLS, 0                                                       \
    }
static const weir__cli_flag submit_flags[] = {
    {"--coordinator", F_COORD, 1},
    {"--ha-dir", F_HADIR, 1},
    {"--parallelism", F_PAR, 1},
    {"--checkpoint-dir", F_DIR, 1},
    {"--checkpoint-interval-ms", F_INTERVAL, 1},
    {"--restore", F_RESTORE, 0},
    {"--idle-timeout-ms", F_IDLE, 1},
    {"--state-backend", F_STATE, 1},
    {"--max-restarts", F_RESTARTS, 1},
    {"--detach", F_DETACH, 0},
    {"--progress", F_PROGRESS, 0},
    {"--no-progress", F_NO_PROGRESS, 0},
    TLS_FLAGS,
    {"--help", F_HELP, 0},
    {"-h", F_HELP, 0},
};
/* jobs and cancel: the coordinator and help only. */
static const weir__cli_flag coord_flags[] = {
    {"--coordinator", F_COORD, 1}, {"--ha-dir", F_HADIR, 1}, TLS_FLAGS,
    {"--help", F_HELP, 0},         {"-h", F_HELP, 0},
};

/* Handed from the command to the runtime's main fiber. */
typedef struct cmd_state {
    const char *cmd;
    const char *coordinator;
    weir__client_submit_opts so;
    int detach;
    int progress; /* -1: on a terminal, 0: never, 1: always */
    uint64_t job; /* cancel */
    weir__cli_tls tls;
    weir_tls_ctx *tls_ctx; /* NULL: plain TCP */
    const char *ha_dir;    /* the leader was found there (submit follows it) */
    uint64_t epoch;        /* the leader's when found */
} cmd_state;
static cmd_state g;

/* The coordinator given, the one leading in the HA directory, or
 * WEIR_COORDINATOR, checked. CLI_OK, CLI_USAGE or CLI_FAILED (no leader
 * to be found; printed). */
/* The leader's HOST:PORT, an IPv6 address in brackets. */
static void leader_addr(const weir__ha_leader *l, char *buf, size_t cap)
{
    snprintf(buf, cap, strchr(l->host, ':') ? "[%s]:%d" : "%s:%d", l->host, l->port);
}

static int pick_coordinator(const char *cmd, const char *flag, const char *ha_dir)
{
    static char leader[WEIR_CLUSTER_HOST_MAX + 16];
    if (flag && ha_dir) {
        weir__cli_errf(cmd, "--coordinator or --ha-dir, not both");
        return CLI_USAGE;
    }
    if (ha_dir) {
        weir__ha_leader l;
        char msg[1024];
        int e = weir__ha_read_leader(ha_dir, &l, msg, sizeof(msg));
        if (e == -ENOENT || (!e && l.port == 0)) {
            weir__cli_errf(cmd, "no coordinator leads in %s yet", ha_dir);
            return CLI_FAILED;
        }
        if (e < 0) {
            weir__cli_errf(cmd, "--ha-dir: %s", msg);
            return CLI_FAILED;
        }
        leader_addr(&l, leader, sizeof(leader));
        flag = leader;
        g.ha_dir = ha_dir;
        g.epoch = l.epoch;
    }
    const char *env = getenv("WEIR_COORDINATOR");
    g.coordinator = flag ? flag : env && *env ? env : NULL;
    if (!g.coordinator) {
        weir__cli_errf(cmd,
                       "no coordinator: give --coordinator HOST:PORT or set WEIR_COORDINATOR "
                       "(see weir %s --help)",
                       cmd);
        return CLI_USAGE;
    }
    char host[WEIR_CLUSTER_HOST_MAX + 1], msg[256];
    int port;
    if (weir__client_parse_hostport(g.coordinator, host, sizeof(host), &port, msg, sizeof(msg))) {
        weir__cli_errf(cmd, "--coordinator: %s", msg);
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* The command's main fiber, with the TLS context its flags ask for. */
static int run_cmd(int (*fn)(int, char **))
{
    int rc = weir__cli_tls_ctx(g.cmd, &g.tls, 0, &g.tls_ctx);
    if (rc != CLI_OK)
        return rc;
    char *args[] = {(char *)"weir", NULL};
    rc = weir_main(fn, 1, args);
    weir_tls_ctx_free(g.tls_ctx);
    g.tls_ctx = NULL;
    return rc;
}

/* A client of the coordinator at addr, named after the command. */
static int connect_to(const char *addr, weir__client **c, char *msg, size_t cap)
{
    char name[32];
    snprintf(name, sizeof(name), "weir %s", g.cmd);
    return weir__client_open(addr, name, g.tls_ctx, weir_time_after_ms(WEIR__CLIENT_CONNECT_MS), c,
                             msg, cap);
}

/* The progress line's client (progress.c). */
static int open_progress(void *arg, weir__client **c, char *msg, size_t cap)
{
    (void)arg;
    return connect_to(g.coordinator, c, msg, cap);
}

static int open_client(weir__client **c, char *msg, size_t cap)
{
    if (connect_to(g.coordinator, c, msg, cap) < 0) {
        weir__cli_errf(g.cmd, "%s", msg);
        return CLI_FAILED;
    }
    return CLI_OK;
}

/* ---- submit ------------------------------------------------------------------------------ */

static void print_summary(uint64_t id, const weir__cl_job_completed *d)
{
    weir__cli_summary(d, (double)d->elapsed_ms / 1e3, d->watermark,
                      g.so.checkpoint_dir || d->ckpt_completed || d->ckpt_restored,
                      "weir submit: job %" PRIu64, id);
}

/* s with control bytes shown as '?' (the coordinator's text goes to a
 * terminal), at most cap - 1 bytes. */
static const char *printable(const char *s, char *buf, size_t cap)
{
    size_t n = 0;
    for (; s[n] && n + 1 < cap; n++)
        buf[n] = (unsigned char)s[n] < 0x20 || s[n] == 0x7f ? '?' : s[n];
    buf[n] = '\0';
    return buf;
}

/* How long weir submit --ha-dir looks for a next leader that lists the
 * job before it gives up. */
#define FOLLOW_MS 120000

/* With --ha-dir, after the connection to the job's leader ended: find
 * each next leader in the directory and ask it for job id until it has
 * ended, reconnecting as leaders change. Its state and message into *st
 * and why[cap] (CLI_OK), or CLI_FAILED with msg when no leader listed the
 * job for FOLLOW_MS. */
static int follow_job(uint64_t id, uint8_t *st, char *why, size_t wcap, char *msg, size_t cap)
{
    int64_t give_up = weir_time_after_ms(FOLLOW_MS);
    uint64_t epoch = g.epoch;
    weir__client *c = NULL;
    char where[WEIR_CLUSTER_HOST_MAX + 16] = "";
    snprintf(msg, cap, "no coordinator leads in %s", g.ha_dir);
    while (weir_time_now() < give_up) {
        if (weir_time_sleep(200 * WEIR_MSEC) < 0)
            break;
        if (!c) {
            weir__ha_leader l;
            char lmsg[512];
            if (weir__ha_read_leader_pooled(g.ha_dir, &l, lmsg, sizeof(lmsg)) != 0 || l.port == 0 ||
                l.epoch <= epoch)
                continue; /* no next leader (listening) yet */
            leader_addr(&l, where, sizeof(where));
            if (connect_to(where, &c, msg, cap) < 0)
                continue;
            epoch = l.epoch;
            weir__cli_errf(g.cmd,
                           "job %" PRIu64 ": following it to the leader at %s (epoch %" PRIu64 ")",
                           id, where, epoch);
        }
        weir__cl_job_list jl;
        if (weir__client_list(c, &jl, weir_time_after_ms(WEIR__CLIENT_CONNECT_MS), msg, cap) < 0) {
            weir__client_close(c); /* that leader went too: find the next */
            c = NULL;
            continue;
        }
        int found = 0, ended = 0;
        for (size_t i = 0; i < jl.jobs.n; i++) {
            const weir__cl_job_info *ji = &jl.jobs.v[i];
            if (ji->id != id)
                continue;
            found = 1;
            ended = ji->state == WEIR__CL_JOB_SUCCEEDED || ji->state == WEIR__CL_JOB_FAILED ||
                    ji->state == WEIR__CL_JOB_CANCELLED;
            *st = ji->state;
            snprintf(why, wcap, "%s", ji->message ? ji->message : "");
        }
        weir__client_list_free(&jl);
        if (ended) {
            weir__client_close(c);
            return CLI_OK;
        }
        if (found)
            give_up = weir_time_after_ms(FOLLOW_MS); /* it runs: follow it for as long */
        else
            snprintf(msg, cap, "the leader at %s does not list job %" PRIu64 " (yet)", where, id);
    }
    weir__client_close(c);
    return CLI_FAILED;
}

static int submit_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    char msg[2048];
    weir__client_job j;
    if (weir__client_job_prepare(&g.so, &j, msg, sizeof(msg)) < 0) {
        weir__cli_errf(g.cmd, "%s", msg);
        return CLI_USAGE;
    }
    weir__client *c;
    int rc = open_client(&c, msg, sizeof(msg));
    if (rc != CLI_OK) {
        weir__client_job_clear(&j);
        return rc;
    }
    uint64_t id;
    int e = weir__client_submit_job(c, &j, weir_time_after_ms(SUBMIT_MS), &id, msg, sizeof(msg));
    weir__client_job_clear(&j);
    if (e < 0) {
        weir__cli_errf(g.cmd, "%s", msg);
        weir__client_close(c);
        return CLI_FAILED;
    }
    if (g.detach) {
        printf("%" PRIu64 "\n", id);
        weir__client_close(c);
        return CLI_OK;
    }
    weir__cli_errf(g.cmd, "job %" PRIu64 " submitted", id);
    weir__cl_job_completed d;
    int show = g.progress < 0 ? isatty(2) : g.progress;
    weir__cli_progress *pr = show ? weir__cli_progress_start(open_progress, NULL) : NULL;
    weir__cli_progress_job(pr, id);
    e = weir__client_wait(c, id, &d, WEIR_FOREVER, msg, sizeof(msg));
    weir__cli_progress_stop(pr); /* before a leader is followed: it reads g.coordinator */
    weir__client_close(c);
    if (e < 0 && g.ha_dir && e != -ECANCELED) {
        /* The leader went; the job goes on under the next one. */
        weir__cli_errf(g.cmd, "job %" PRIu64 ": %s; looking for the next leader in %s", id, msg,
                       g.ha_dir);
        uint8_t st = 0;
        char why[WEIR_CLUSTER_MESSAGE_MAX + 1] = "";
        if (follow_job(id, &st, why, sizeof(why), msg, sizeof(msg)) != CLI_OK) {
            weir__cli_errf(g.cmd, "job %" PRIu64 ": %s", id, msg);
            return CLI_FAILED;
        }
        char shown[WEIR_CLUSTER_MESSAGE_MAX + 1];
        printable(why, shown, sizeof(shown));
        weir__cli_errf(g.cmd, "job %" PRIu64 " %s%s%s", id, weir__cl_job_state_name(st),
                       shown[0] ? ": " : "", shown);
        return st == WEIR__CL_JOB_SUCCEEDED ? CLI_OK : CLI_FAILED;
    }
    if (e < 0) {
        weir__cli_errf(g.cmd, "job %" PRIu64 ": %s", id, msg);
        return CLI_FAILED;
    }
    rc = CLI_OK;
    if (d.err == 0) {
        print_summary(id, &d);
    } else {
        weir__cli_errf(g.cmd, "job %" PRIu64 " %s: %s", id,
                       d.err == -ECANCELED ? "was cancelled" : "failed",
                       d.message[0] ? d.message : weir_strerror(d.err));
        rc = CLI_FAILED;
    }
    weir__client_completed_free(&d);
    return rc;
}

int weir__cli_submit(int argc, char **argv)
{
    const char *cmd = "submit", *coord = NULL, *ha_dir = NULL;
    g = (cmd_state){.cmd = cmd, .so.max_restarts = -1, .progress = -1};
    int i = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (g.so.plugin)
                break; /* the job's arguments start here */
            g.so.plugin = a;
            continue;
        }
        const weir__cli_flag *f;
        const char *val;
        if (weir__cli_flag_next(cmd, submit_flags, sizeof(submit_flags) / sizeof(submit_flags[0]),
                                1, argc, argv, &i, &f, &val))
            return CLI_USAGE;
        int64_t v;
        switch (f->id) {
        case F_TLS:
            weir__cli_tls_flag(f->name, val, &g.tls);
            break;
        case F_HELP:
            usage_submit(stdout);
            return CLI_OK;
        case F_COORD:
            coord = val;
            break;
        case F_HADIR:
            ha_dir = val;
            break;
        case F_PAR:
            if (weir__cli_parse_num(cmd, f->name, val, 1, WEIR_KEY_GROUPS, &v))
                return CLI_USAGE;
            g.so.parallelism = (uint32_t)v;
            break;
        case F_DIR:
            if (!*val) {
                weir__cli_errf(cmd, "%s: empty directory name", f->name);
                return CLI_USAGE;
            }
            g.so.checkpoint_dir = val;
            break;
        case F_INTERVAL:
            if (weir__cli_parse_num(cmd, f->name, val, 0, INT64_MAX / 1000000, &v))
                return CLI_USAGE;
            g.so.checkpoint_interval_ms = (uint64_t)v;
            break;
        case F_RESTORE:
            g.so.restore = 1;
            break;
        case F_IDLE:
            if (weir__cli_parse_num(cmd, f->name, val, 0, INT64_MAX / 1000000, &v))
                return CLI_USAGE;
            g.so.idle_timeout_ms = (uint64_t)v;
            break;
        case F_STATE: {
            /* A URI no backend takes is refused here, before anything is
             * sent; one that needs its pool (reached from the workers) is
             * the workers' to open. */
            weir_state_backend *b = NULL;
            int e = *val ? weir_state_backend_open(val, WEIR_KEY_GROUPS, 0, 0, &b) : -EINVAL;
            weir_state_backend_free(b);
            if (e == -EINVAL || e == -ENOENT) {
                weir__cli_errf(cmd, "%s %s: %s", f->name, val,
                               e == -ENOENT ? "no backend of that scheme"
                                            : "not a state backend URI");
                return CLI_USAGE;
            }
            g.so.state_backend = val;
            break;
        }
        case F_RESTARTS:
            if (weir__cli_parse_num(cmd, f->name, val, 0, INT32_MAX, &v))
                return CLI_USAGE;
            g.so.max_restarts = (int32_t)v;
            break;
        case F_DETACH:
            g.detach = 1;
            break;
        case F_PROGRESS:
            g.progress = 1;
            break;
        case F_NO_PROGRESS:
            g.progress = 0;
            break;
        }
    }
    if (!g.so.plugin && i < argc)
        g.so.plugin = argv[i++];
    if (!g.so.plugin) {
        weir__cli_errf(cmd, "no job plugin given (weir submit JOB.so ...; see weir submit --help)");
        return CLI_USAGE;
    }
    if (g.so.checkpoint_interval_ms > 0 && !g.so.checkpoint_dir) {
        weir__cli_errf(cmd,
                       "--checkpoint-interval-ms %" PRIu64 " without --checkpoint-dir: "
                       "checkpoints need a directory",
                       g.so.checkpoint_interval_ms);
        return CLI_USAGE;
    }
    if (g.so.restore && !g.so.checkpoint_dir) {
        weir__cli_errf(cmd, "--restore without --checkpoint-dir: nothing to restore from");
        return CLI_USAGE;
    }
    int rc = pick_coordinator(cmd, coord, ha_dir);
    if (rc != CLI_OK)
        return rc;
    g.so.argc = argc - i;
    g.so.argv = argv + i;
    return run_cmd(submit_main);
}

/* ---- jobs -------------------------------------------------------------------------------- */

static const char *utc(uint64_t ms, char *buf, size_t cap)
{
    if (!ms)
        return "-";
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(buf, cap, "%" PRIu64 "ms", ms);
    return buf;
}

/* One line of the table, without trailing blanks (an empty message). */
static void put_row(char *line, size_t cap, int n)
{
    size_t len = n < 0 ? 0 : (size_t)n >= cap ? cap - 1 : (size_t)n;
    while (len > 0 && line[len - 1] == ' ')
        len--;
    printf("%.*s\n", (int)len, line);
}

static void print_jobs(const weir__cl_job_list *l)
{
    int idw = 2, namew = 4;
    for (uint32_t i = 0; i < l->jobs.n; i++) {
        char id[24];
        int n = snprintf(id, sizeof(id), "%" PRIu64, l->jobs.v[i].id);
        idw = n > idw ? n : idw;
        int nl = (int)strlen(l->jobs.v[i].name);
        namew = nl > namew ? (nl > 40 ? 40 : nl) : namew;
    }
    static char line[WEIR_CLUSTER_MESSAGE_MAX + 256];
    put_row(line, sizeof(line),
            snprintf(line, sizeof(line), "%-*s  %-*s  %-10s  %11s  %-20s  %-20s  %s", idw, "ID",
                     namew, "NAME", "STATE", "PARALLELISM", "SUBMITTED", "ENDED", "MESSAGE"));
    for (uint32_t i = 0; i < l->jobs.n; i++) {
        const weir__cl_job_info *j = &l->jobs.v[i];
        char name[41], message[WEIR_CLUSTER_MESSAGE_MAX + 1], sub[32], end[32];
        put_row(line, sizeof(line),
                snprintf(line, sizeof(line), "%*" PRIu64 "  %-*s  %-10s  %11u  %-20s  %-20s  %s",
                         idw, j->id, namew, printable(j->name, name, sizeof(name)),
                         weir__cl_job_state_name(j->state), j->parallelism,
                         utc(j->submitted_ms, sub, sizeof(sub)), utc(j->ended_ms, end, sizeof(end)),
                         printable(j->message, message, sizeof(message))));
    }
}

static int jobs_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    char msg[2048];
    weir__client *c;
    int rc = open_client(&c, msg, sizeof(msg));
    if (rc != CLI_OK)
        return rc;
    weir__cl_job_list l;
    int e = weir__client_list(c, &l, weir_time_after_ms(WEIR__CLIENT_CONNECT_MS), msg, sizeof(msg));
    weir__client_close(c);
    if (e < 0) {
        weir__cli_errf(g.cmd, "%s", msg);
        return CLI_FAILED;
    }
    print_jobs(&l);
    weir__client_list_free(&l);
    return CLI_OK;
}

/* jobs and cancel: --coordinator, --help and (cancel) one JOB_ID. CLI_OK,
 * CLI_USAGE (printed) or -1 for --help. */
static int parse_coord_only(const char *cmd, int argc, char **argv, const char **positional)
{
    const char *coord = NULL, *ha_dir = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] == '\0' || (positional && a[1] >= '0' && a[1] <= '9')) {
            if (!positional || *positional) {
                weir__cli_errf(cmd, "unexpected argument %s (see weir %s --help)", a, cmd);
                return CLI_USAGE;
            }
            *positional = a;
            continue;
        }
        const weir__cli_flag *f;
        const char *val;
        if (weir__cli_flag_next(cmd, coord_flags, sizeof(coord_flags) / sizeof(coord_flags[0]), 0,
                                argc, argv, &i, &f, &val))
            return CLI_USAGE;
        if (f->id == F_HELP)
            return -1;
        if (f->id == F_TLS)
            weir__cli_tls_flag(f->name, val, &g.tls);
        else if (f->id == F_HADIR)
            ha_dir = val;
        else
            coord = val;
    }
    return pick_coordinator(cmd, coord, ha_dir);
}

int weir__cli_jobs(int argc, char **argv)
{
    g = (cmd_state){.cmd = "jobs"};
    int rc = parse_coord_only(g.cmd, argc, argv, NULL);
    if (rc < 0) {
        usage_jobs(stdout);
        return CLI_OK;
    }
    if (rc != CLI_OK)
        return rc;
    return run_cmd(jobs_main);
}

/* ---- job ---------------------------------------------------------------------------------- */

static const char *jstr(const json_t *o, const char *k, const char *def)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : def;
}

static double jnum(const json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

/* A watermark's lag behind the wall clock, or why there is none. */
static const char *lag(const json_t *o, char *buf, size_t cap)
{
    const json_t *l = json_object_get(o, "watermark_lag_ms"), *w = json_object_get(o, "watermark");
    if (json_is_integer(l))
        snprintf(buf, cap, "%.1f s", (double)json_integer_value(l) / 1e3);
    else if (json_is_string(w))
        snprintf(buf, cap, "end");
    else if (json_is_integer(w))
        snprintf(buf, cap, "at %" JSON_INTEGER_FORMAT, json_integer_value(w));
    else
        snprintf(buf, cap, "-");
    return buf;
}

static void print_job(const json_t *d)
{
    char a[64], b[64], line[1400];
    uint64_t sub_ms = (uint64_t)jnum(d, "submitted_ms");
    printf("job %" JSON_INTEGER_FORMAT " \"%s\": %s, attempt %d, %d restart%s, submitted %s\n",
           json_integer_value(json_object_get(d, "id")), jstr(d, "name", "?"),
           jstr(d, "state", "?"), (int)jnum(d, "attempt"), (int)jnum(d, "restarts"),
           (int)jnum(d, "restarts") == 1 ? "" : "s", utc(sub_ms, a, sizeof(a)));
    if (json_object_get(d, "message"))
        printf("  %s\n", jstr(d, "message", ""));
    const json_t *ops = json_object_get(d, "operators");
    const json_t *plan = json_object_get(json_object_get(d, "plan"), "operators");
    if (json_array_size(ops)) {
        int w = 8;
        size_t i;
        const json_t *o;
        json_array_foreach(ops, i, o)
        {
            int n = (int)strlen(jstr(o, "name", ""));
            w = n > w ? (n > 40 ? 40 : n) : w;
        }
        printf("\n");
        put_row(line, sizeof(line),
                snprintf(line, sizeof(line), "%-*s  %-8s  %3s  %9s  %9s  %12s  %13s  %s", w,
                         "OPERATOR", "KIND", "PAR", "IN/S", "OUT/S", "BACKPRESSURE",
                         "WATERMARK LAG", "WORKERS"));
        json_array_foreach(ops, i, o)
        {
            const json_t *po = json_array_get(plan, i);
            char workers[256] = "", in[24], out[24], lg[48];
            size_t k, len = 0;
            const json_t *s;
            json_array_foreach(json_object_get(o, "subtasks"), k, s)
            {
                const char *wk = jstr(s, "worker", "?");
                if (!strstr(workers, wk) && len + strlen(wk) + 2 < sizeof(workers))
                    len += (size_t)snprintf(workers + len, sizeof(workers) - len, "%s%s",
                                            len ? "," : "", wk);
            }
            put_row(line, sizeof(line),
                    snprintf(line, sizeof(line), "%-*.*s  %-8s  %3d  %9s  %9s  %11.0f%%  %13s  %s",
                             w, w, jstr(o, "name", "?"), jstr(po, "kind", "?"),
                             (int)json_array_size(json_object_get(o, "subtasks")),
                             weir__cli_fmt_rate(jnum(o, "records_in_per_s"), in, sizeof(in)),
                             weir__cli_fmt_rate(jnum(o, "records_out_per_s"), out, sizeof(out)),
                             100 * jnum(o, "backpressure"), lag(o, lg, sizeof(lg)), workers));
        }
    }
    const json_t *ck = json_object_get(d, "checkpoints");
    if (ck && json_object_get(ck, "interval_ms")) {
        printf("\ncheckpoints: %d completed, every %d ms into %s\n", (int)jnum(ck, "completed"),
               (int)jnum(ck, "interval_ms"), jstr(ck, "dir", "?"));
        const json_t *h = json_object_get(ck, "history");
        size_t n = json_array_size(h), from = n > 10 ? n - 10 : 0;
        if (n) {
            put_row(line, sizeof(line),
                    snprintf(line, sizeof(line), "%8s  %7s  %-11s  %-20s  %11s  %10s  %s", "ID",
                             "ATTEMPT", "STATE", "TRIGGERED", "DURATION", "BYTES", "REASON"));
            for (size_t k = n; k-- > from;) { /* newest first */
                const json_t *c = json_array_get(h, k);
                char dur[32] = "-", by[32] = "-";
                if (json_object_get(c, "duration_ms"))
                    snprintf(dur, sizeof(dur), "%.1f ms", jnum(c, "duration_ms"));
                if (json_object_get(c, "bytes"))
                    snprintf(by, sizeof(by), "%.0f", jnum(c, "bytes"));
                put_row(line, sizeof(line),
                        snprintf(line, sizeof(line), "%8.0f  %7d  %-11s  %-20s  %11s  %10s  %s",
                                 jnum(c, "id"), (int)jnum(c, "attempt"), jstr(c, "state", "?"),
                                 utc((uint64_t)jnum(c, "trigger_ms"), b, sizeof(b)), dur, by,
                                 jstr(c, "reason", "")));
            }
        }
    }
    const json_t *rs = json_object_get(d, "restart_history");
    if (json_array_size(rs)) {
        printf("\nrestarts:\n");
        size_t k;
        const json_t *r;
        json_array_foreach(rs, k, r)
            printf("  attempt %d at %s: %s\n", (int)jnum(r, "attempt"),
                   utc((uint64_t)jnum(r, "at_ms"), a, sizeof(a)), jstr(r, "cause", ""));
    }
    const json_t *er = json_object_get(d, "errors");
    if (json_array_size(er)) {
        printf("\nerrors (newest first):\n");
        for (size_t k = json_array_size(er); k-- > 0;) {
            const json_t *e = json_array_get(er, k);
            if (json_object_get(e, "operator"))
                printf("  %s attempt %d, \"%s\" subtask %d on %s: %s\n",
                       utc((uint64_t)jnum(e, "at_ms"), a, sizeof(a)), (int)jnum(e, "attempt"),
                       jstr(e, "operator", "?"), (int)jnum(e, "subtask"), jstr(e, "worker", "?"),
                       jstr(e, "message", ""));
            else
                printf("  %s attempt %d: %s\n", utc((uint64_t)jnum(e, "at_ms"), a, sizeof(a)),
                       (int)jnum(e, "attempt"), jstr(e, "message", ""));
        }
    }
}

static int job_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    char msg[2048];
    weir__client *c;
    int rc = open_client(&c, msg, sizeof(msg));
    if (rc != CLI_OK)
        return rc;
    weir__cl_job_detail d;
    int e = weir__client_describe(c, g.job, &d, weir_time_after_ms(WEIR__CLIENT_CONNECT_MS), msg,
                                  sizeof(msg));
    weir__client_close(c);
    if (e < 0) {
        weir__cli_errf(g.cmd, "%s", msg);
        return CLI_FAILED;
    }
    if (d.status != WEIR__CL_DETAIL_OK) {
        weir__cli_errf(g.cmd, "no job %" PRIu64 " on coordinator %s", g.job, g.coordinator);
        weir__client_detail_free(&d);
        return CLI_FAILED;
    }
    json_error_t je;
    json_t *o = json_loads(d.json, 0, &je);
    weir__client_detail_free(&d);
    if (!json_is_object(o)) {
        weir__cli_errf(
            g.cmd, "coordinator %s: its description of job %" PRIu64 " is not a JSON object: %s",
            g.coordinator, g.job, je.text);
        json_decref(o);
        return CLI_FAILED;
    }
    print_job(o);
    json_decref(o);
    return CLI_OK;
}

/* A command taking one JOB_ID: parsed into g.job. */
static int parse_job_cmd(int argc, char **argv, void (*usage)(FILE *))
{
    const char *id = NULL;
    int rc = parse_coord_only(g.cmd, argc, argv, &id);
    if (rc < 0) {
        usage(stdout);
        return -1;
    }
    if (rc != CLI_OK)
        return rc;
    int64_t v;
    if (!id) {
        weir__cli_errf(g.cmd, "no job id given (weir %s JOB_ID ...; see weir %s --help)", g.cmd,
                       g.cmd);
        return CLI_USAGE;
    }
    if (weir__cli_parse_num(g.cmd, "JOB_ID", id, 1, INT64_MAX, &v))
        return CLI_USAGE;
    g.job = (uint64_t)v;
    return CLI_OK;
}

int weir__cli_job(int argc, char **argv)
{
    g = (cmd_state){.cmd = "job"};
    int rc = parse_job_cmd(argc, argv, usage_job);
    return rc < 0 ? CLI_OK : rc != CLI_OK ? rc : run_cmd(job_main);
}

/* ---- cancel ------------------------------------------------------------------------------ */

static int cancel_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    char msg[2048];
    weir__client *c;
    int rc = open_client(&c, msg, sizeof(msg));
    if (rc != CLI_OK)
        return rc;
    weir__cl_cancel_job_ack a;
    int e = weir__client_cancel(c, g.job, &a, weir_time_after_ms(WEIR__CLIENT_CONNECT_MS), msg,
                                sizeof(msg));
    weir__client_close(c);
    if (e < 0) {
        weir__cli_errf(g.cmd, "%s", msg);
        return CLI_FAILED;
    }
    char why[WEIR_CLUSTER_MESSAGE_MAX + 1];
    printable(a.message, why, sizeof(why));
    switch (a.status) {
    case WEIR__CL_CANCEL_OK:
        weir__cli_errf(g.cmd, "job %" PRIu64 " is being cancelled", g.job);
        break;
    case WEIR__CL_CANCEL_ENDED:
        weir__cli_errf(g.cmd, "job %" PRIu64 " had already ended%s%s", g.job, why[0] ? ": " : "",
                       why);
        break;
    default:
        weir__cli_errf(g.cmd, "no job %" PRIu64 " on coordinator %s%s%s", g.job, g.coordinator,
                       why[0] ? ": " : "", why);
        rc = CLI_FAILED;
    }
    weir__client_cancel_free(&a);
    return rc;
}

int weir__cli_cancel(int argc, char **argv)
{
    g = (cmd_state){.cmd = "cancel"};
    int rc = parse_job_cmd(argc, argv, usage_cancel);
    return rc < 0 ? CLI_OK : rc != CLI_OK ? rc : run_cmd(cancel_main);
}
