/* SPDX-License-Identifier: Apache-2.0 */
/*
 * node.c - `weir node`: run this process as a cluster's coordinator or as
 * one of its workers (cluster/node.h; docs/cluster.md) until SIGTERM or
 * SIGINT.
 *
 * Once ready the node prints one line on stdout, which scripts read: the
 * coordinator "weir node: coordinator listening on HOST:PORT" (with the
 * port it bound, when asked for port 0), a worker "weir node: worker ID
 * registered with HOST:PORT" each time it registers. Exit codes: 0 stopped
 * by a signal, 1 failed (the port is taken, the coordinator refused this
 * worker's version), 2 bad usage (settings refused included).
 *
 * Settings: the coordinator's liveness and outbound settings are checked
 * before the node starts (check_coord: a zero outbound bound refuses to
 * start, a timeout that defeats another warns), and `weir lint
 * --role=...` runs the same parser and checks on a command line without
 * starting anything (docs/cluster.md, "Settings and lint").
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cluster/node.h"
#include "weir/http.h"
#include "weir/rt.h"

static void usage_node(FILE *f)
{
    fputs("usage: weir node --role=coordinator [--bind-host H] [--port P] [--advertise-host H]\n"
          "                 [--http-port P [--http-static-dir DIR]] [--cache-dir D] [--threads N]\n"
          "                 [--ha-dir DIR [--ha-allow-unsafe-locks]\n"
          "                  [--etcd-endpoints URL[,URL] [--etcd-cluster NAME]\n"
          "                   [--etcd-lease-ttl-s N] [etcd TLS and auth]]]\n"
          "                 [--max-pending-connections N]\n"
          "                 [liveness and outbound settings] [--tls-cert F --tls-key F\n"
          "                 [--tls-client-ca F]]\n"
          "       weir node --role=worker --id ID (--coordinator HOST:PORT | --ha-dir DIR)\n"
          "                 [--slots N] [--data-host H] [--http-port P] [--cache-dir D]\n"
          "                 [--threads N] [--tls-ca F [--tls-client-cert F --tls-client-key F]\n"
          "                 [--tls-no-verify-hostname]] [--data-tls-cert F --data-tls-key F\n"
          "                 --data-tls-ca F [--data-tls-no-verify-hostname]]\n"
          "\n"
          "Run a cluster node until SIGTERM or SIGINT.\n"
          "\n"
          "coordinator:\n"
          "  --bind-host H       the address to listen on (default 0.0.0.0)\n"
          "  --port P            the port (default 0: a free one, printed)\n"
          "  --advertise-host H  the host it prints (default: the bind host, or 127.0.0.1)\n"
          "  --http-port P       serve the HTTP API and /metrics on P (0: a free one), on the\n"
          "                      bind host (default 127.0.0.1), and the web console at /\n"
          "  --http-static-dir DIR  serve the console's files from DIR instead of the ones\n"
          "                      built in (docs/console.md)\n"
          "  --cache-dir D       where received plugins are kept, by SHA-256 (default: a\n"
          "                      private temporary directory, removed at exit)\n"
          "  --ha-dir DIR        high availability: stand for leader in DIR, shared by\n"
          "                      the coordinators (a directory whose file system honours\n"
          "                      POSIX locks between processes); a standby keeps its\n"
          "                      ports closed until it leads\n"
          "  --ha-allow-unsafe-locks  use an --ha-dir that fails the lock probe anyway\n"
          "  --etcd-endpoints URL[,URL]  with --ha-dir: etcd (http://HOST:PORT) decides who\n"
          "                      leads, by a lease a frozen leader loses; the records\n"
          "                      stay in --ha-dir\n"
          "  --etcd-cluster NAME  the leader key's namespace (default weir)\n"
          "  --etcd-lease-ttl-s N  the lease's TTL (default 10): a leader frozen or cut off\n"
          "                      this long is replaced\n"
          "  --etcd-ca FILE      https:// endpoints (required with them): the authority\n"
          "                      the members' certificates chain to; they must name the\n"
          "                      endpoint's host unless --etcd-no-verify-hostname\n"
          "  --etcd-cert FILE, --etcd-key FILE  a client certificate for etcd's\n"
          "                      --client-cert-auth\n"
          "  --etcd-user NAME, --etcd-password env://VAR  etcd's auth: the password is\n"
          "                      read from $VAR (only an env:// reference is taken)\n"
          "  --max-pending-connections N  connections admitted at once before their first\n"
          "                      frame (default 64); a flood beyond evicts its own\n"
          "  --heartbeat-timeout-ms M  a worker silent this long is lost (default 2000)\n"
          "  --watchdog-interval-ms M  how often liveness is judged (default 100)\n"
          "  --outbound-stall-timeout-ms M  a worker whose queued frames make no progress\n"
          "                      this long is lost (default 10000; 0 or less: never)\n"
          "  --restart-drain-timeout-ms M  a restart waits this long for survivors to\n"
          "                      drain, then fails the job (default 120000)\n"
          "  --max-outbound-control-frames N, --max-outbound-control-bytes N,\n"
          "  --max-outbound-bulk-bytes N  what one worker's session may queue: control\n"
          "                      frames (default 10000 and 64 MiB) and deploys (1 GiB);\n"
          "                      past a bound the worker is lost, and 0 is refused\n"
          "  --tls-cert FILE, --tls-key FILE  TLS on the cluster port: this certificate\n"
          "                      (chain, PEM) and its key\n"
          "  --tls-client-ca FILE  mutual TLS: every worker and client must present a\n"
          "                      certificate this authority signed\n",
          f);
    fputs("worker:\n"
          "  --id ID             this worker's id, unique in the cluster (1..255 bytes)\n"
          "  --coordinator H:P   where the coordinator listens (or WEIR_COORDINATOR)\n"
          "  --ha-dir DIR        find the leading coordinator in DIR instead\n"
          "  --slots N           subtasks it runs at once (default 16)\n"
          "  --data-host H       the address other workers reach its channels at\n"
          "                      (default: the one the coordinator sees)\n"
          "  --http-port P       serve /api/v1/health, /api/v1/worker and /metrics on P\n"
          "                      (127.0.0.1; 0: a free one)\n"
          "  --tls-ca FILE       TLS to the coordinator: its certificate must chain to\n"
          "                      this authority and name the host connected by\n"
          "  --tls-client-cert FILE, --tls-client-key FILE  this worker's certificate,\n"
          "                      for a coordinator with --tls-client-ca\n"
          "  --tls-no-verify-hostname  accept a certificate that does not name the host\n"
          "  --data-tls-cert FILE, --data-tls-key FILE, --data-tls-ca FILE  mutual TLS on\n"
          "                      its channels to other workers (all three, on every\n"
          "                      worker): this certificate both ways, peers' signed by\n"
          "                      the CA, a consumer's naming its data host\n"
          "  --data-tls-no-verify-hostname  accept a consumer certificate that does not\n"
          "                      name its data host (the chain is still checked)\n"
          "both:\n"
          "  --threads N         scheduler threads of the node's runtime (default\n"
          "                      WEIR_THREADS, else the online cores); give nodes that\n"
          "                      share a machine their share of its cores\n"
          "\n"
          "With WEIR_AUTH_TOKEN set in the environment every HTTP route (the health\n"
          "check too) needs \"Authorization: Bearer $WEIR_AUTH_TOKEN\" and answers 401\n"
          "without it; set but empty is refused at start.\n"
          "\n"
          "Once ready it prints \"weir node: coordinator listening on HOST:PORT\" or \"weir\n"
          "node: worker ID registered with HOST:PORT\" on stdout, and with --http-port\n"
          "\"weir node: http on HOST:PORT\" first; a standby coordinator prints \"weir node:\n"
          "coordinator standing by in DIR\" until it leads.\n"
          "\n"
          "The settings are checked at start: an error refuses to start, a warning is\n"
          "printed. `weir lint --role=coordinator ...` checks a command line the same way.\n"
          "exit: 0 stopped by a signal, 1 failed, 2 bad usage or settings refused.\n",
          f);
}

typedef struct node_args {
    int worker;
    weir__coord_opts co;
    weir__worker_opts wo;
    int rc;
    char msg[1024];
} node_args;

static node_args g_node;

static void on_listen(void *arg, const char *host, int port)
{
    (void)arg;
    printf("weir node: coordinator listening on %s:%d\n", host, port);
    fflush(stdout);
}

static void on_standby(void *arg, const char *dir)
{
    (void)arg;
    printf("weir node: coordinator standing by in %s\n", dir);
    fflush(stdout);
}

static void on_registered(void *arg, const char *coordinator)
{
    (void)arg;
    printf("weir node: worker %s registered with %s\n", g_node.wo.id, coordinator);
    fflush(stdout);
}

static void on_http(void *arg, const char *host, int port)
{
    (void)arg;
    printf("weir node: http on %s:%d\n", host, port);
    fflush(stdout);
}

static intptr_t node_main(void *arg)
{
    (void)arg;
    node_args *a = &g_node;
    int e = a->worker ? weir__worker_run(&a->wo, a->msg, sizeof(a->msg))
                      : weir__coord_run(&a->co, a->msg, sizeof(a->msg));
    return e < 0 ? CLI_FAILED : CLI_OK;
}

/* weir_main with a thread count: node_main as the fiber "main" of a
 * runtime of `threads` scheduler threads (0: WEIR_THREADS, else the online
 * cores). Every subtask of a worker's share is pinned to one of them
 * (runner.c), so two workers with the default on one machine run twice as
 * many busy threads as it has cores: each hand-off between a share's
 * subtasks then wakes a thread whose core another process holds. */
static int run_node(int threads)
{
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = threads});
    if (!rt) {
        snprintf(g_node.msg, sizeof(g_node.msg), "cannot create the runtime: %s", strerror(errno));
        return CLI_FAILED;
    }
    weir_task *t = weir_task_spawn(
        node_main, NULL, &(weir_spawn_opts){.name = "main", .stack_size = 256 << 10, .rt = rt});
    intptr_t rc = CLI_FAILED;
    if (t)
        weir_task_join(t, &rc, WEIR_FOREVER);
    else
        snprintf(g_node.msg, sizeof(g_node.msg), "cannot spawn the node: %s", strerror(errno));
    weir_rt_free(rt);
    return (int)rc;
}

/* ---- flags -------------------------------------------------------------------------- */

enum {
    N_ROLE,
    N_BIND,
    N_PORT,
    N_ADVERTISE,
    N_ID,
    N_COORD,
    N_SLOTS,
    N_DATA,
    N_HTTP,
    N_HTTP_STATIC,
    N_CACHE,
    N_THREADS,
    N_HA,
    N_UNSAFE,
    N_PENDING,
    N_ETCD,
    N_ETCD_CLUSTER,
    N_ETCD_TTL,
    N_TLS,      /* one of the TLS flags: weir__cli_tls_flag */
    N_ETCD_SEC, /* one of etcd's TLS and auth flags: weir__cli_etcd_flag */
    /* The coordinator's settings (coord_settings) from here on. */
    N_HEARTBEAT,
    N_WATCHDOG,
    N_STALL,
    N_DRAIN,
    N_CTL_FRAMES,
    N_CTL_BYTES,
    N_BULK_BYTES,
    N_HELP
};
static const weir__cli_flag node_flags[] = {
    {"--role", N_ROLE, 1},
    {"--bind-host", N_BIND, 1},
    {"--port", N_PORT, 1},
    {"--advertise-host", N_ADVERTISE, 1},
    {"--id", N_ID, 1},
    {"--coordinator", N_COORD, 1},
    {"--slots", N_SLOTS, 1},
    {"--data-host", N_DATA, 1},
    {"--http-port", N_HTTP, 1},
    {"--http-static-dir", N_HTTP_STATIC, 1},
    {"--cache-dir", N_CACHE, 1},
    {"--threads", N_THREADS, 1},
    {"--ha-dir", N_HA, 1},
    {"--ha-allow-unsafe-locks", N_UNSAFE, 0},
    {"--max-pending-connections", N_PENDING, 1},
    {"--etcd-endpoints", N_ETCD, 1},
    {"--etcd-cluster", N_ETCD_CLUSTER, 1},
    {"--etcd-lease-ttl-s", N_ETCD_TTL, 1},
    {"--etcd-ca", N_ETCD_SEC, 1},
    {"--etcd-cert", N_ETCD_SEC, 1},
    {"--etcd-key", N_ETCD_SEC, 1},
    {"--etcd-no-verify-hostname", N_ETCD_SEC, 0},
    {"--etcd-user", N_ETCD_SEC, 1},
    {"--etcd-password", N_ETCD_SEC, 1},
    {"--tls-cert", N_TLS, 1},
    {"--tls-key", N_TLS, 1},
    {"--tls-client-ca", N_TLS, 1},
    {"--tls-ca", N_TLS, 1},
    {"--tls-client-cert", N_TLS, 1},
    {"--tls-client-key", N_TLS, 1},
    {"--tls-no-verify-hostname", N_TLS, 0},
    {"--data-tls-cert", N_TLS, 1},
    {"--data-tls-key", N_TLS, 1},
    {"--data-tls-ca", N_TLS, 1},
    {"--data-tls-no-verify-hostname", N_TLS, 0},
    {"--heartbeat-timeout-ms", N_HEARTBEAT, 1},
    {"--watchdog-interval-ms", N_WATCHDOG, 1},
    {"--outbound-stall-timeout-ms", N_STALL, 1},
    {"--restart-drain-timeout-ms", N_DRAIN, 1},
    {"--max-outbound-control-frames", N_CTL_FRAMES, 1},
    {"--max-outbound-control-bytes", N_CTL_BYTES, 1},
    {"--max-outbound-bulk-bytes", N_BULK_BYTES, 1},
    {"--help", N_HELP, 0},
    {"-h", N_HELP, 0},
};

/* The coordinator's liveness and outbound settings, each as given or its
 * default (docs/cluster.md, "Settings and lint"). */
typedef struct coord_settings {
    int64_t heartbeat_ms, watchdog_ms, stall_ms, drain_ms; /* stall <= 0: no stall verdict */
    int64_t ctl_frames, ctl_bytes, bulk_bytes;
} coord_settings;

#define DAY_MS 86400000
/* Each setting's flag, field and range. The outbound bounds take 0, which
 * the check refuses with its reason rather than the parser with a range. */
static const struct {
    int id;
    size_t off;
    int64_t lo, hi;
} settings[] = {
    {N_HEARTBEAT, offsetof(coord_settings, heartbeat_ms), 1, DAY_MS},
    {N_WATCHDOG, offsetof(coord_settings, watchdog_ms), 1, DAY_MS},
    {N_STALL, offsetof(coord_settings, stall_ms), -DAY_MS, DAY_MS},
    {N_DRAIN, offsetof(coord_settings, drain_ms), 1, DAY_MS},
    {N_CTL_FRAMES, offsetof(coord_settings, ctl_frames), 0, 1000000000},
    {N_CTL_BYTES, offsetof(coord_settings, ctl_bytes), 0, (int64_t)1 << 40},
    {N_BULK_BYTES, offsetof(coord_settings, bulk_bytes), 0, (int64_t)1 << 40},
};

/* A parsed command line. */
typedef struct node_cmdline {
    const char *cmd; /* "node" or "lint": what messages start with */
    const char *role, *port, *slots, *http, *threads, *pending, *etcd_ttl;
    int unsafe_locks;
    int nthreads;
    int coord_flags; /* coordinator settings given */
    coord_settings set;
    weir__cli_tls tls;
    weir__cli_etcd etcd;
} node_cmdline;

/*
 * The liveness and outbound checks (seed: the coordinator's settings
 * lint): a zero bound is an error (the node refuses to start), a timeout
 * that defeats another a warning. The same at `weir node` start and in
 * `weir lint --role=coordinator`.
 */
static void check_coord(const coord_settings *s, weir__cli_findings *f)
{
    static const struct {
        const char *flag, *what;
        size_t off;
        int64_t dflt;
    } bounds[] = {
        {"--max-outbound-control-frames", "control frame", offsetof(coord_settings, ctl_frames),
         WEIR_CLUSTER_BACKLOG_FRAMES},
        {"--max-outbound-control-bytes", "control frame", offsetof(coord_settings, ctl_bytes),
         WEIR_CLUSTER_BACKLOG_BYTES},
        {"--max-outbound-bulk-bytes", "deploy", offsetof(coord_settings, bulk_bytes),
         WEIR__OUTBOX_DEPLOY_BYTES},
    };
    for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++)
        if (*(const int64_t *)((const char *)s + bounds[i].off) == 0)
            weir__cli_finding(f, 1,
                              "%s 0 refuses every %s to a worker, and a refused frame costs the "
                              "worker its connection: every worker would be lost at its first "
                              "(give 1 or more; default %" PRId64 ")",
                              bounds[i].flag, bounds[i].what, bounds[i].dflt);
    if (s->bulk_bytes > 0 && s->bulk_bytes < (int64_t)WEIR_CLUSTER_FRAME_MAX)
        weir__cli_finding(f, 0,
                          "--max-outbound-bulk-bytes %" PRId64 " is below one largest frame (%u "
                          "bytes): a deploy carries its plugins' bytes, and two queued back to "
                          "back for a healthy worker can reach the bound and cost it its "
                          "connection",
                          s->bulk_bytes, WEIR_CLUSTER_FRAME_MAX);
    if (s->watchdog_ms > s->heartbeat_ms)
        weir__cli_finding(f, 0,
                          "--watchdog-interval-ms %" PRId64 " is longer than "
                          "--heartbeat-timeout-ms %" PRId64 ": the watchdog judges silence "
                          "once a period, so the effective heartbeat timeout is its period",
                          s->watchdog_ms, s->heartbeat_ms);
    if (s->heartbeat_ms < 2 * (int64_t)WEIR_CLUSTER_HEARTBEAT_MS)
        weir__cli_finding(f, 0,
                          "--heartbeat-timeout-ms %" PRId64 " is under two heartbeats (a worker "
                          "heartbeats every %u ms): one late heartbeat gets a healthy worker "
                          "declared lost",
                          s->heartbeat_ms, WEIR_CLUSTER_HEARTBEAT_MS);
    if (s->stall_ms <= 0)
        return; /* the stall verdict is off: only the bounds matter */
    if (s->stall_ms <= s->heartbeat_ms)
        weir__cli_finding(f, 0,
                          "--outbound-stall-timeout-ms %" PRId64 " is at or below "
                          "--heartbeat-timeout-ms %" PRId64 ": the stall verdict is for a "
                          "worker that heartbeats but has stopped reading, and this short it "
                          "also takes one whose reader is held up for less than the heartbeat "
                          "timeout tolerates",
                          s->stall_ms, s->heartbeat_ms);
    if (s->stall_ms >= s->drain_ms)
        weir__cli_finding(f, 0,
                          "--outbound-stall-timeout-ms %" PRId64 " is at or above "
                          "--restart-drain-timeout-ms %" PRId64 ": a survivor that stops "
                          "reading during a restart's drain fails the job at the drain "
                          "deadline instead of being declared lost and folded into the restart",
                          s->stall_ms, s->drain_ms);
    if (s->watchdog_ms > s->stall_ms)
        weir__cli_finding(f, 0,
                          "--watchdog-interval-ms %" PRId64 " is longer than "
                          "--outbound-stall-timeout-ms %" PRId64 ": the watchdog judges stalls "
                          "once a period, so the effective stall timeout is its period",
                          s->watchdog_ms, s->stall_ms);
}

/* Parse argv into a (g_node) and l. CLI_OK, CLI_USAGE (printed), or -1 for
 * --help. Settings checks are check_node's. */
static int parse_node(int argc, char **argv, node_args *a, node_cmdline *l)
{
    const char *cmd = l->cmd;
    memset(a, 0, sizeof(*a));
    a->co.max_restarts = -1;
    l->set = (coord_settings){WEIR_CLUSTER_HEARTBEAT_TIMEOUT_MS,
                              WEIR_CLUSTER_WATCHDOG_MS,
                              WEIR__OUTBOX_STALL_MS,
                              WEIR__COORD_DRAIN_MS,
                              WEIR_CLUSTER_BACKLOG_FRAMES,
                              WEIR_CLUSTER_BACKLOG_BYTES,
                              WEIR__OUTBOX_DEPLOY_BYTES};
    const char *ha_dir = NULL, *cache = NULL;
    a->wo.coordinator = getenv("WEIR_COORDINATOR");
    int coord_given = 0;
    for (int i = 0; i < argc; i++) {
        const weir__cli_flag *f;
        const char *v;
        if (argv[i][0] != '-' || !argv[i][1]) {
            weir__cli_errf(cmd, "unexpected argument \"%s\" (weir node --help)", argv[i]);
            return CLI_USAGE;
        }
        if (weir__cli_flag_next(cmd, node_flags, sizeof(node_flags) / sizeof(node_flags[0]), 0,
                                argc, argv, &i, &f, &v))
            return CLI_USAGE;
        size_t k = 0;
        while (k < sizeof(settings) / sizeof(settings[0]) && settings[k].id != f->id)
            k++;
        if (k < sizeof(settings) / sizeof(settings[0])) {
            if (weir__cli_parse_num(cmd, f->name, v, settings[k].lo, settings[k].hi,
                                    (int64_t *)((char *)&l->set + settings[k].off)))
                return CLI_USAGE;
            l->coord_flags++;
            continue;
        }
        switch (f->id) {
        case N_HELP:
            return -1;
        case N_ROLE:
            l->role = v;
            break;
        case N_BIND:
            a->co.bind_host = v;
            coord_given = 1;
            break;
        case N_PORT:
            l->port = v;
            break;
        case N_ADVERTISE:
            a->co.advertise_host = v;
            coord_given = 1;
            break;
        case N_ID:
            a->wo.id = v;
            break;
        case N_COORD:
            a->wo.coordinator = v;
            break;
        case N_SLOTS:
            l->slots = v;
            break;
        case N_DATA:
            a->wo.data_host = v;
            break;
        case N_HTTP:
            l->http = v;
            break;
        case N_HTTP_STATIC:
            a->co.http_static_dir = v;
            coord_given = 1;
            break;
        case N_CACHE:
            cache = v;
            break;
        case N_THREADS:
            l->threads = v;
            break;
        case N_HA:
            ha_dir = v;
            break;
        case N_UNSAFE:
            l->unsafe_locks = 1;
            break;
        case N_PENDING:
            l->pending = v;
            break;
        case N_ETCD:
            a->co.etcd_endpoints = v;
            break;
        case N_ETCD_CLUSTER:
            a->co.etcd_cluster = v;
            break;
        case N_ETCD_TTL:
            l->etcd_ttl = v;
            break;
        case N_TLS:
            weir__cli_tls_flag(f->name, v, &l->tls);
            break;
        case N_ETCD_SEC:
            weir__cli_etcd_flag(f->name, v, &l->etcd);
            break;
        }
    }
    if (!l->role || (strcmp(l->role, "coordinator") != 0 && strcmp(l->role, "worker") != 0)) {
        weir__cli_errf(cmd, "--role must be coordinator or worker");
        return CLI_USAGE;
    }
    a->worker = strcmp(l->role, "worker") == 0;
    if (weir__cli_tls_check(cmd, &l->tls, !a->worker) != CLI_OK)
        return CLI_USAGE;
    int64_t n;
    if (l->threads && weir__cli_parse_num(cmd, "--threads", l->threads, 1, 256, &n))
        return CLI_USAGE;
    l->nthreads = l->threads ? (int)n : 0; /* 0: the runtime's default */
    a->co.cache_dir = a->wo.cache_dir = cache;
    if (ha_dir && !*ha_dir) {
        weir__cli_errf(cmd, "--ha-dir needs a directory");
        return CLI_USAGE;
    }
    a->co.ha_dir = a->wo.ha_dir = ha_dir;
    if (l->http) {
        if (weir__cli_parse_num(cmd, "--http-port", l->http, 0, 65535, &n))
            return CLI_USAGE;
        a->co.http = a->wo.http = 1;
        a->co.http_port = (int)n;
        a->wo.http_port = (uint16_t)n;
        a->co.on_http = a->wo.on_http = on_http;
    }
    if (a->worker) {
        if (l->port || coord_given || l->pending || l->coord_flags || a->co.etcd_endpoints ||
            a->co.etcd_cluster || l->etcd_ttl || l->etcd.ca || l->etcd.cert || l->etcd.key ||
            l->etcd.user || l->etcd.password_ref || l->etcd.no_verify_hostname) {
            weir__cli_errf(cmd, "--port, --bind-host, --advertise-host, --http-static-dir, "
                                "--max-pending-connections, the --etcd-* flags and the liveness "
                                "and outbound settings are for the coordinator (a worker finds "
                                "the leader in --ha-dir)");
            return CLI_USAGE;
        }
        if (!a->wo.id || !*a->wo.id) {
            weir__cli_errf(cmd, "a worker needs --id");
            return CLI_USAGE;
        }
        if (l->unsafe_locks) {
            weir__cli_errf(cmd, "--ha-allow-unsafe-locks is for the coordinator");
            return CLI_USAGE;
        }
        if (ha_dir && a->wo.coordinator && a->wo.coordinator != getenv("WEIR_COORDINATOR")) {
            weir__cli_errf(cmd, "a worker takes --coordinator or --ha-dir, not both");
            return CLI_USAGE;
        }
        if (ha_dir)
            a->wo.coordinator = NULL; /* the leader file says where */
        if (!a->wo.coordinator && !ha_dir) {
            weir__cli_errf(cmd, "a worker needs --coordinator HOST:PORT (or WEIR_COORDINATOR) "
                                "or --ha-dir DIR");
            return CLI_USAGE;
        }
        char host[256];
        int p;
        if (a->wo.coordinator &&
            weir__cl_split_hostport(a->wo.coordinator, host, sizeof(host), &p) < 0) {
            weir__cli_errf(cmd, "--coordinator: \"%s\" is not HOST:PORT", a->wo.coordinator);
            return CLI_USAGE;
        }
        if (l->slots) {
            if (weir__cli_parse_num(cmd, "--slots", l->slots, 1, 4096, &n))
                return CLI_USAGE;
            a->wo.slots = (uint32_t)n;
        }
        a->wo.on_registered = on_registered;
    } else {
        if (a->wo.id || l->slots || a->wo.data_host) {
            weir__cli_errf(cmd, "--id, --slots and --data-host are for workers");
            return CLI_USAGE;
        }
        if (l->port) {
            if (weir__cli_parse_num(cmd, "--port", l->port, 0, 65535, &n))
                return CLI_USAGE;
            a->co.port = (int)n;
        }
        if (l->unsafe_locks && !ha_dir) {
            weir__cli_errf(cmd, "--ha-allow-unsafe-locks needs --ha-dir");
            return CLI_USAGE;
        }
        a->co.ha_allow_unsafe_locks = l->unsafe_locks;
        if ((a->co.etcd_cluster || l->etcd_ttl) && !a->co.etcd_endpoints) {
            weir__cli_errf(cmd, "%s needs --etcd-endpoints",
                           a->co.etcd_cluster ? "--etcd-cluster" : "--etcd-lease-ttl-s");
            return CLI_USAGE;
        }
        if (a->co.etcd_endpoints && !ha_dir) {
            weir__cli_errf(cmd, "--etcd-endpoints needs --ha-dir: etcd decides who leads, the "
                                "jobs' records and the leader file stay in the directory");
            return CLI_USAGE;
        }
        if (a->co.etcd_endpoints && !*a->co.etcd_endpoints) {
            weir__cli_errf(cmd, "--etcd-endpoints needs at least one http://HOST:PORT");
            return CLI_USAGE;
        }
        if (a->co.etcd_cluster &&
            (!*a->co.etcd_cluster || strlen(a->co.etcd_cluster) > 64 ||
             strspn(a->co.etcd_cluster, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_.") != strlen(a->co.etcd_cluster))) {
            weir__cli_errf(cmd, "--etcd-cluster \"%s\": 1 to 64 letters, digits, '-', '_' or '.'",
                           a->co.etcd_cluster);
            return CLI_USAGE;
        }
        if (weir__cli_etcd_check(cmd, &l->etcd, a->co.etcd_endpoints, &a->co.etcd) != CLI_OK)
            return CLI_USAGE;
        if (l->etcd_ttl) {
            if (weir__cli_parse_num(cmd, "--etcd-lease-ttl-s", l->etcd_ttl, 1, 3600, &n))
                return CLI_USAGE;
            a->co.etcd_lease_ttl_s = (int)n;
        }
        if (l->pending) {
            if (weir__cli_parse_num(cmd, "--max-pending-connections", l->pending, 1, 65536, &n))
                return CLI_USAGE;
            a->co.max_pending_connections = (int)n;
        }
        const coord_settings *s = &l->set;
        a->co.heartbeat_timeout_ms = s->heartbeat_ms;
        a->co.watchdog_ms = s->watchdog_ms;
        a->co.stall_ms =
            s->stall_ms > 0 ? s->stall_ms : -1; /* the coordinator's 0 is the default */
        a->co.drain_timeout_ms = s->drain_ms;
        a->co.max_outbound_control_frames = (uint64_t)s->ctl_frames;
        a->co.max_outbound_control_bytes = (uint64_t)s->ctl_bytes;
        a->co.max_outbound_bulk_bytes = (uint64_t)s->bulk_bytes;
        a->co.on_listen = on_listen;
        a->co.on_standby = on_standby;
    }
    return CLI_OK;
}

/* What the node would take badly: the token (both roles, when it serves
 * HTTP) and the coordinator's settings. */
static void check_node(const node_args *a, const node_cmdline *l, weir__cli_findings *f)
{
    if (a->co.http) {
        const char *why = weir_http_server_auth_problem(NULL);
        if (why)
            weir__cli_finding(f, 1, "WEIR_AUTH_TOKEN: %s", why);
    }
    if (!a->worker)
        check_coord(&l->set, f);
}

int weir__cli_node_lint(int argc, char **argv)
{
    node_cmdline l = {.cmd = "lint"};
    int rc = parse_node(argc, argv, &g_node, &l);
    if (rc < 0) {
        usage_node(stdout);
        return CLI_OK;
    }
    if (rc != CLI_OK)
        return rc;
    weir__cli_findings f = {.cmd = "lint"};
    check_node(&g_node, &l, &f);
    weir_tls_ctx *tls = NULL; /* the files load, the key is the certificate's */
    if (weir__cli_tls_ctx("lint", &l.tls, !g_node.worker, &tls) != CLI_OK)
        f.errors++;
    weir_tls_ctx_free(tls);
    weir_tls_ctx *dsrv, *dcli; /* the data plane's files too */
    if (weir__cli_data_tls_ctx("lint", &l.tls, &dsrv, &dcli) != CLI_OK)
        f.errors++;
    weir_tls_ctx_free(dsrv);
    weir_tls_ctx_free(dcli);
    if (f.errors) {
        fprintf(stderr, "weir lint: %d error%s\n", f.errors, f.errors == 1 ? "" : "s");
        return CLI_FAILED;
    }
    if (g_node.worker) {
        printf("ok: worker %s settings%s\n", g_node.wo.id, f.warnings ? ", with warnings" : "");
    } else {
        const coord_settings *s = &l.set;
        printf("ok: coordinator settings (heartbeat timeout %" PRId64 " ms, watchdog %" PRId64
               " ms, stall timeout %" PRId64 " ms, restart drain %" PRId64 " ms)%s\n",
               s->heartbeat_ms, s->watchdog_ms, s->stall_ms > 0 ? s->stall_ms : 0, s->drain_ms,
               f.warnings ? ", with warnings" : "");
    }
    return CLI_OK;
}

int weir__cli_node(int argc, char **argv)
{
    node_args *a = &g_node;
    node_cmdline l = {.cmd = "node"};
    int rc = parse_node(argc, argv, a, &l);
    if (rc < 0) {
        usage_node(stdout);
        return CLI_OK;
    }
    if (rc != CLI_OK)
        return rc;
    /* Now, not when the coordinator starts: a standby would find out only
     * when it came to lead. Warnings are printed and the node starts. */
    weir__cli_findings f = {.cmd = "node"};
    check_node(a, &l, &f);
    if (f.errors) {
        fprintf(stderr,
                "weir node: not started: %d error%s (weir lint --role=%s checks a "
                "command line)\n",
                f.errors, f.errors == 1 ? "" : "s", l.role);
        return CLI_USAGE;
    }
    weir_tls_ctx *tls;
    if (weir__cli_tls_ctx("node", &l.tls, !a->worker, &tls) != CLI_OK)
        return CLI_USAGE;
    a->co.tls = a->wo.tls = tls;
    if (weir__cli_data_tls_ctx("node", &l.tls, &a->wo.data_tls_server, &a->wo.data_tls_client) !=
        CLI_OK) {
        weir_tls_ctx_free(tls);
        return CLI_USAGE;
    }
    /* SIGINT / SIGTERM blocked in every thread and read from a signalfd
     * (as `weir run` does: run.c, "Interrupts"). */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sfd = -1;
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) == 0)
        sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    signal(SIGPIPE, SIG_IGN);
    a->co.stop_fd = a->wo.stop_fd = sfd;
    rc = run_node(l.nthreads);
    if (sfd >= 0)
        close(sfd);
    weir_tls_ctx_free(tls);
    weir_tls_ctx_free(a->wo.data_tls_server);
    weir_tls_ctx_free(a->wo.data_tls_client);
    if (rc != CLI_OK)
        fprintf(stderr, "weir node: %s\n", a->msg[0] ? a->msg : "failed");
    return rc;
}
