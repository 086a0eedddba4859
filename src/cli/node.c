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
 * worker's version), 2 bad usage.
 */
#include <errno.h>
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
    fputs(
        "usage: weir node --role=coordinator [--bind-host H] [--port P] [--advertise-host H]\n"
        "                 [--http-port P] [--cache-dir D] [--threads N]\n"
        "                 [--ha-dir DIR [--ha-allow-unsafe-locks]] [--max-pending-connections N]\n"
        "       weir node --role=worker --id ID (--coordinator HOST:PORT | --ha-dir DIR)\n"
        "                 [--slots N] [--data-host H] [--http-port P] [--cache-dir D]\n"
        "                 [--threads N]\n"
        "\n"
        "Run a cluster node until SIGTERM or SIGINT.\n"
        "\n"
        "coordinator:\n"
        "  --bind-host H       the address to listen on (default 0.0.0.0)\n"
        "  --port P            the port (default 0: a free one, printed)\n"
        "  --advertise-host H  the host it prints (default: the bind host, or 127.0.0.1)\n"
        "  --http-port P       serve the HTTP API and /metrics on P (0: a free one), on the\n"
        "                      bind host (default 127.0.0.1)\n"
        "  --cache-dir D       where received plugins are kept, by SHA-256 (default: a\n"
        "                      private temporary directory, removed at exit)\n"
        "  --ha-dir DIR        high availability: stand for leader in DIR, shared by\n"
        "                      the coordinators (a directory whose file system honours\n"
        "                      POSIX locks between processes); a standby keeps its\n"
        "                      ports closed until it leads\n"
        "  --ha-allow-unsafe-locks  use an --ha-dir that fails the lock probe anyway\n"
        "  --max-pending-connections N  connections admitted at once before their first\n"
        "                      frame (default 64); a flood beyond evicts its own\n"
        "worker:\n"
        "  --id ID             this worker's id, unique in the cluster (1..255 bytes)\n"
        "  --coordinator H:P   where the coordinator listens (or WEIR_COORDINATOR)\n"
        "  --ha-dir DIR        find the leading coordinator in DIR instead\n"
        "  --slots N           subtasks it runs at once (default 16)\n"
        "  --data-host H       the address other workers reach its channels at\n"
        "                      (default: the one the coordinator sees)\n"
        "  --http-port P       serve /api/v1/health, /api/v1/worker and /metrics on P\n"
        "                      (127.0.0.1; 0: a free one)\n"
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
        "exit: 0 stopped by a signal, 1 failed, 2 bad usage.\n",
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

static int value(const char *arg, const char *name, int *i, int argc, char **argv, const char **out)
{
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0)
        return 0;
    if (arg[n] == '=') {
        *out = arg + n + 1;
        return 1;
    }
    if (arg[n] != 0)
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "weir node: %s needs a value\n", name);
        return -1;
    }
    *out = argv[++*i];
    return 1;
}

static int number(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = s && *s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || errno || *end || v < lo || v > hi) {
        fprintf(stderr, "weir node: %s: \"%s\" is not a number in %ld..%ld\n", flag, s ? s : "", lo,
                hi);
        return -1;
    }
    *out = v;
    return 0;
}

int weir__cli_node(int argc, char **argv)
{
    node_args *a = &g_node;
    memset(a, 0, sizeof(*a));
    a->co.max_restarts = -1;
    const char *role = NULL, *port = NULL, *slots = NULL, *http = NULL, *cache = NULL,
               *threads = NULL, *ha_dir = NULL, *pending = NULL;
    int unsafe_locks = 0;
    a->wo.coordinator = getenv("WEIR_COORDINATOR");
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage_node(stdout);
            return CLI_OK;
        }
        if (strcmp(argv[i], "--ha-allow-unsafe-locks") == 0) {
            unsafe_locks = 1;
            continue;
        }
        if ((r = value(argv[i], "--role", &i, argc, argv, &role)) ||
            (r = value(argv[i], "--bind-host", &i, argc, argv, &a->co.bind_host)) ||
            (r = value(argv[i], "--port", &i, argc, argv, &port)) ||
            (r = value(argv[i], "--advertise-host", &i, argc, argv, &a->co.advertise_host)) ||
            (r = value(argv[i], "--id", &i, argc, argv, &a->wo.id)) ||
            (r = value(argv[i], "--coordinator", &i, argc, argv, &a->wo.coordinator)) ||
            (r = value(argv[i], "--slots", &i, argc, argv, &slots)) ||
            (r = value(argv[i], "--data-host", &i, argc, argv, &a->wo.data_host)) ||
            (r = value(argv[i], "--http-port", &i, argc, argv, &http)) ||
            (r = value(argv[i], "--cache-dir", &i, argc, argv, &cache)) ||
            (r = value(argv[i], "--threads", &i, argc, argv, &threads)) ||
            (r = value(argv[i], "--ha-dir", &i, argc, argv, &ha_dir)) ||
            (r = value(argv[i], "--max-pending-connections", &i, argc, argv, &pending))) {
            if (r < 0)
                return CLI_USAGE;
            (void)v;
            continue;
        }
        fprintf(stderr, "weir node: unknown argument \"%s\" (weir node --help)\n", argv[i]);
        return CLI_USAGE;
    }
    if (!role || (strcmp(role, "coordinator") != 0 && strcmp(role, "worker") != 0)) {
        fprintf(stderr, "weir node: --role must be coordinator or worker\n");
        return CLI_USAGE;
    }
    a->worker = strcmp(role, "worker") == 0;
    long n;
    int nthreads = 0; /* the runtime's default */
    if (threads) {
        if (number("--threads", threads, 1, 256, &n) < 0)
            return CLI_USAGE;
        nthreads = (int)n;
    }
    a->co.cache_dir = a->wo.cache_dir = cache;
    if (ha_dir && !*ha_dir) {
        fprintf(stderr, "weir node: --ha-dir needs a directory\n");
        return CLI_USAGE;
    }
    a->co.ha_dir = a->wo.ha_dir = ha_dir;
    if (http) {
        if (number("--http-port", http, 0, 65535, &n) < 0)
            return CLI_USAGE;
        a->co.http = a->wo.http = 1;
        a->co.http_port = (int)n;
        a->wo.http_port = (uint16_t)n;
        a->co.on_http = a->wo.on_http = on_http;
        /* Now, not when the server starts: a standby coordinator would
         * find out only when it came to lead. */
        const char *why = weir_http_server_auth_problem(NULL);
        if (why) {
            fprintf(stderr, "weir node: WEIR_AUTH_TOKEN: %s\n", why);
            return CLI_USAGE;
        }
    }
    if (a->worker) {
        if (port || a->co.bind_host || a->co.advertise_host || pending) {
            fprintf(stderr, "weir node: --port, --bind-host, --advertise-host and "
                            "--max-pending-connections are for the coordinator\n");
            return CLI_USAGE;
        }
        if (!a->wo.id || !*a->wo.id) {
            fprintf(stderr, "weir node: a worker needs --id\n");
            return CLI_USAGE;
        }
        if (unsafe_locks) {
            fprintf(stderr, "weir node: --ha-allow-unsafe-locks is for the coordinator\n");
            return CLI_USAGE;
        }
        if (ha_dir && a->wo.coordinator && a->wo.coordinator != getenv("WEIR_COORDINATOR")) {
            fprintf(stderr, "weir node: a worker takes --coordinator or --ha-dir, not both\n");
            return CLI_USAGE;
        }
        if (ha_dir)
            a->wo.coordinator = NULL; /* the leader file says where */
        if (!a->wo.coordinator && !ha_dir) {
            fprintf(stderr, "weir node: a worker needs --coordinator HOST:PORT "
                            "(or WEIR_COORDINATOR) or --ha-dir DIR\n");
            return CLI_USAGE;
        }
        char host[256];
        int p;
        if (a->wo.coordinator &&
            weir__cl_split_hostport(a->wo.coordinator, host, sizeof(host), &p) < 0) {
            fprintf(stderr, "weir node: --coordinator: \"%s\" is not HOST:PORT\n",
                    a->wo.coordinator);
            return CLI_USAGE;
        }
        if (slots) {
            if (number("--slots", slots, 1, 4096, &n) < 0)
                return CLI_USAGE;
            a->wo.slots = (uint32_t)n;
        }
        a->wo.on_registered = on_registered;
    } else {
        if (a->wo.id || slots || a->wo.data_host) {
            fprintf(stderr, "weir node: --id, --slots and --data-host are for workers\n");
            return CLI_USAGE;
        }
        if (port) {
            if (number("--port", port, 0, 65535, &n) < 0)
                return CLI_USAGE;
            a->co.port = (int)n;
        }
        if (unsafe_locks && !ha_dir) {
            fprintf(stderr, "weir node: --ha-allow-unsafe-locks needs --ha-dir\n");
            return CLI_USAGE;
        }
        a->co.ha_allow_unsafe_locks = unsafe_locks;
        if (pending) {
            if (number("--max-pending-connections", pending, 1, 65536, &n) < 0)
                return CLI_USAGE;
            a->co.max_pending_connections = (int)n;
        }
        a->co.on_listen = on_listen;
        a->co.on_standby = on_standby;
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
    int rc = run_node(nthreads);
    if (sfd >= 0)
        close(sfd);
    if (rc != CLI_OK)
        fprintf(stderr, "weir node: %s\n", a->msg[0] ? a->msg : "failed");
    return rc;
}
