/* SPDX-License-Identifier: Apache-2.0 */
/*
 * demo.c - weir's runtime and HTTP layer at work in one process:
 *
 *   - weir's HTTP/1.1 server (weir/http.h) with three routes: GET /hello,
 *     GET /sum?a=..&b=.. answering JSON, and GET /metrics (the server's own
 *     request metrics in the Prometheus text format);
 *   - client fibers sending keep-alive requests through weir's HTTP client
 *     pool, one connection each;
 *   - a once-a-second progress line from an interval timer, then the totals
 *     and a few lines of /metrics fetched through the same client.
 *
 * Everything runs on weir's scheduler threads (WEIR_THREADS, default one per
 * core; the server listens once per thread) on the I/O backend chosen by
 * WEIR_IO (uring by default).
 *
 *   demo [seconds] [connections]     defaults: 5 s, 64 connections
 */
#include <errno.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/http.h"
#include "weir/metrics.h"
#include "weir/rt.h"

static char base[64];
static int64_t stop_at;
static weir_http_client *client;
static _Atomic uint64_t completed, failed; /* bumped from every thread */

static int hello(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req, (void)arg;
    return weir_http_res_text(res, 200, "Hello, World!");
}

static int sum(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    char a[32], b[32];
    if (weir_http_req_query(req, "a", a, sizeof(a)) < 0 ||
        weir_http_req_query(req, "b", b, sizeof(b)) < 0)
        return weir_http_res_error(res, 400, "want /sum?a=N&b=M");
    json_t *v = json_pack("{s:I}", "sum", (json_int_t)(atoll(a) + atoll(b)));
    int e = weir_http_res_json(res, 200, v);
    json_decref(v);
    return e;
}

/* One client fiber: requests through the pool until the time is up. */
static intptr_t load(void *arg)
{
    long id = (long)(intptr_t)arg;
    char url[128];
    for (long i = 0; weir_time_now() < stop_at; i++) {
        if (i % 4 == 3)
            snprintf(url, sizeof(url), "%s/sum?a=%ld&b=%ld", base, id, i);
        else
            snprintf(url, sizeof(url), "%s/hello", base);
        weir_http_client_resp r;
        int e = weir_http_get(client, url, weir_time_after_ms(5000), &r);
        int ok = e == 0 && r.status == 200 &&
                 (i % 4 == 3 ? strstr(r.body, "\"sum\"") != NULL
                             : strcmp(r.body, "Hello, World!") == 0);
        weir_http_client_resp_free(&r);
        if (!ok) {
            failed++;
            return -1;
        }
        completed++;
    }
    return 0;
}

static intptr_t reporter(void *arg)
{
    (void)arg;
    weir_interval *iv = weir_interval_new(WEIR_SEC);
    uint64_t last = 0;
    int sec = 0;
    while (weir_interval_next(iv) > 0) {
        uint64_t now = completed;
        printf("  t=%2ds  %8.0f req/s\n", ++sec, (double)(now - last));
        last = now;
    }
    weir_interval_free(iv);
    return 0;
}

/* Print the lines of /metrics that count the server's requests (non-zero). */
static void show_metrics(void)
{
    char url[96];
    snprintf(url, sizeof(url), "%s/metrics", base);
    weir_http_client_resp r;
    if (weir_http_get(client, url, weir_time_after_ms(5000), &r) == 0 && r.status == 200) {
        printf("GET /metrics (excerpt):\n");
        for (char *line = strtok(r.body, "\n"); line; line = strtok(NULL, "\n"))
            if ((strncmp(line, "weir_http_requests_total", 24) == 0 ||
                 strncmp(line, "weir_http_responses_total", 25) == 0 ||
                 strncmp(line, "weir_http_request_duration_seconds_count", 40) == 0) &&
                strcmp(line + strlen(line) - 2, " 0") != 0)
                printf("  %s\n", line);
    }
    weir_http_client_resp_free(&r);
}

static int demo_main(int argc, char **argv)
{
    int seconds = argc > 1 ? atoi(argv[1]) : 5;
    int conns = argc > 2 ? atoi(argv[2]) : 64;
    if (seconds < 1 || seconds > 50 || conns < 1 || conns > 10000) {
        fprintf(stderr, "usage: demo [seconds 1..50] [connections 1..10000]\n");
        return 2;
    }
    weir_metrics *m = weir_metrics_new(NULL);
    weir_http_server *s = weir_http_server_new(&(weir_http_server_opts){.metrics = m});
    if (!m || !s) {
        perror("demo");
        return 1;
    }
    weir_http_route(s, "GET", "/hello", hello, NULL, 0);
    weir_http_route(s, "GET", "/sum", sum, NULL, 0);
    weir_http_route_metrics(s, "/metrics", m, 0);
    int e = weir_http_server_start(s);
    client = weir_http_client_new(
        &(weir_http_client_opts){.max_conns = conns, .bearer_token = getenv("WEIR_AUTH_TOKEN")});
    if (e < 0 || !client) {
        fprintf(stderr, "demo: %s\n", weir_strerror(e < 0 ? e : -errno));
        return 1;
    }
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", weir_http_server_port(s));
    printf("weir demo: HTTP server on %s, %d client fibers through one client pool, %d s, "
           "%d scheduler threads, I/O backend %s\n",
           base, conns, seconds, weir_rt_threads(weir_rt_current()),
           weir_loop_backend(weir_loop_current()));
    weir_task *rep = weir_task_spawn(reporter, NULL, &(weir_spawn_opts){.name = "reporter"});
    int64_t t0 = weir_time_now();
    stop_at = t0 + (int64_t)seconds * WEIR_SEC;
    weir_task **clients = calloc((size_t)conns, sizeof(*clients));
    for (int i = 0; i < conns; i++)
        clients[i] = weir_task_spawn(load, (void *)(intptr_t)i, &(weir_spawn_opts){.name = "load"});
    for (int i = 0; i < conns; i++)
        if (clients[i])
            weir_task_join(clients[i], NULL, WEIR_FOREVER);
    double secs = (double)(weir_time_now() - t0) / 1e9;
    free(clients);
    weir_task_cancel(rep);
    weir_task_join(rep, NULL, WEIR_FOREVER);
    show_metrics();
    weir_http_client_stats cs;
    weir_http_client_stats_get(client, &cs);
    weir_http_client_free(client);
    weir_http_server_stop(s, weir_time_after_ms(2000));
    weir_http_server_free(s);
    weir_metrics_free(m);
    printf("weir demo: %llu requests in %.2f s = %.0f req/s (%llu connections opened, %llu "
           "reused; %llu failed requests)\n",
           (unsigned long long)completed, secs, (double)completed / secs,
           (unsigned long long)cs.opened, (unsigned long long)cs.reused,
           (unsigned long long)failed);
    return completed > 0 && failed == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    return weir_main(demo_main, argc, argv);
}
