/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_client.c - requests per second through weir's HTTP/1.1 client pool
 * against a local server (bench/run starts nginx with a keep-alive
 * `return 200 "Hello, World!"` location), for comparison with libcurl's
 * multi interface (bench/peers/curl).
 *
 * What one run does (the peer does exactly this):
 *
 *   - one client whose pool allows CONNS connections to the host:port;
 *   - CONNS workers (here fibers on one thread, the curl peer's easy
 *     handles in one multi handle) each send GET URL, read the whole
 *     response (13 bytes, Content-Length), check the status is 200, and
 *     start the next request at once, for DURATION seconds;
 *   - keep-alive throughout: each worker ends up with a connection of its
 *     own, opened on its first request and reused after;
 *   - req_per_s = requests completed / wall seconds (the clock runs from
 *     the start of the first request until the last worker stops).
 *
 * A warm-up run (not measured, 0.3 s) opens the connections; every run
 * creates a fresh client, so each run's first CONNS requests connect. The
 * median of BENCH_RUNS runs (default 5, 3 with BENCH_QUICK=1) is printed:
 *
 *   bench=http_client impl=weir-uring conns=32 req_per_s=... cpu_us_per_req=...
 *       duration_s=2 opened=32 reused=... errors=0 runs=5
 *
 * cpu_us_per_req is the client process's CPU time (user + system, from
 * getrusage) over the measured runs divided by the requests they made: a
 * client that spins before parking shows a higher figure at the same rate.
 *
 *   http_client --url http://127.0.0.1:PORT/hello [--conns C] [--duration S]
 *
 * bench/run runs it with WEIR_THREADS=1 (the peer is one thread too), once
 * per I/O backend.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench.h"
#include "weir/http.h"

/* CPU seconds (user + system) of the whole process so far. */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

typedef struct run_state {
    weir_http_client *c;
    const char *url;
    int64_t until;
    uint64_t requests, errors;
} run_state;

static intptr_t worker(void *arg)
{
    run_state *s = arg;
    while (weir_time_now() < s->until) {
        weir_http_client_resp r;
        int rc = weir_http_get(s->c, s->url, weir_time_after_ms(10000), &r);
        if (rc == 0 && r.status == 200 && r.body_len == 13) {
            s->requests++;
        } else {
            if (s->errors++ == 0)
                fprintf(stderr, "http_client: %s (%s), status %d\n", weir_strerror(rc), r.error,
                        r.status);
        }
        weir_http_client_resp_free(&r);
    }
    return 0;
}

/* One run: req/s, and the pool's stats in *st. */
static double run(const char *url, int conns, double seconds, weir_http_client_stats *st,
                  uint64_t *errors, uint64_t *requests)
{
    run_state s = {.url = url};
    s.c = weir_http_client_new(&(weir_http_client_opts){.max_conns = conns});
    if (!s.c) {
        perror("weir_http_client_new");
        exit(1);
    }
    weir_task **t = calloc((size_t)conns, sizeof(*t));
    int64_t t0 = weir_time_now();
    s.until = t0 + (int64_t)(seconds * 1e9);
    for (int i = 0; i < conns; i++) {
        t[i] = weir_task_spawn(worker, &s, &(weir_spawn_opts){.name = "worker"});
        if (!t[i]) {
            perror("spawn");
            exit(1);
        }
    }
    for (int i = 0; i < conns; i++)
        weir_task_join(t[i], NULL, WEIR_FOREVER);
    double wall = (double)(weir_time_now() - t0) / 1e9;
    weir_http_client_stats_get(s.c, st);
    *errors += s.errors;
    *requests += s.requests;
    weir_http_client_free(s.c);
    free(t);
    return (double)s.requests / wall;
}

static int bench_main(int argc, char **argv)
{
    const char *url = NULL;
    long conns = 32;
    double duration = getenv("BENCH_QUICK") && strcmp(getenv("BENCH_QUICK"), "1") == 0 ? 1 : 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--url") == 0 && i + 1 < argc)
            url = argv[++i];
        else if (strcmp(argv[i], "--conns") == 0 && i + 1 < argc)
            conns = bench_parse_long(argv[++i], 32);
        else if (strcmp(argv[i], "--duration") == 0 && i + 1 < argc)
            duration = atof(argv[++i]);
    }
    if (!url || conns <= 0 || conns > 10000 || duration <= 0) {
        fprintf(stderr, "usage: http_client --url URL [--conns C] [--duration SECONDS]\n");
        return 2;
    }
    int runs = bench_runs(5);
    weir_http_client_stats st;
    uint64_t errors = 0;
    uint64_t requests = 0;
    run(url, (int)conns, 0.3, &st, &errors, &requests); /* warm-up */
    if (errors) {
        fprintf(stderr, "http_client: the warm-up failed; is a server at %s?\n", url);
        return 1;
    }
    double *v = calloc((size_t)runs, sizeof(*v));
    uint64_t opened = 0, reused = 0;
    requests = 0;
    double c0 = cpu_s();
    for (int i = 0; i < runs; i++) {
        v[i] = run(url, (int)conns, duration, &st, &errors, &requests);
        opened += st.opened;
        reused += st.reused;
    }
    double cpu_us = (cpu_s() - c0) * 1e6 / (double)(requests ? requests : 1);
    printf("bench=http_client impl=%s conns=%ld req_per_s=%.0f cpu_us_per_req=%.2f duration_s=%g "
           "opened=%llu reused=%llu errors=%llu runs=%d\n",
           bench_impl(), conns, bench_median(v, runs), cpu_us, duration,
           (unsigned long long)(opened / (uint64_t)runs),
           (unsigned long long)(reused / (uint64_t)runs), (unsigned long long)errors, runs);
    free(v);
    return errors ? 1 : 0;
}

int main(int argc, char **argv)
{
    return weir_main(bench_main, argc, argv);
}
