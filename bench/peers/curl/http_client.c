/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_client.c - the libcurl peer of bench/http_client.c: requests per
 * second through libcurl's multi interface against the same local server.
 *
 * One thread, one multi handle, CONNS easy handles (CURLMOPT_MAX_HOST_
 * CONNECTIONS = CONNS, so at most CONNS connections, as weir's pool cap).
 * Each easy handle sends GET URL; when it completes (status 200 and a
 * 13-byte body checked), it is removed and added again, which sends the
 * next request on the connection the multi handle's pool kept alive. The
 * loop is curl_multi_perform + curl_multi_poll for DURATION seconds, after
 * a 0.3 s warm-up; every run uses a fresh multi handle (so its first CONNS
 * requests connect, as weir's do). req_per_s = completed / wall seconds,
 * median over BENCH_RUNS runs (default 5, 3 with BENCH_QUICK=1):
 *
 *   bench=http_client impl=curl-multi conns=32 req_per_s=... cpu_us_per_req=...
 *       duration_s=2 errors=0 runs=5
 *
 * cpu_us_per_req: the process's CPU time (getrusage) over the measured runs
 * divided by the requests completed, as weir's line.
 *
 *   curl_http_client --url URL [--conns C] [--duration S]
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct worker {
    CURL *easy;
    size_t got; /* body bytes of the current response */
} worker;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    ((worker *)arg)->got += size * n;
    return size * n;
}

static unsigned long errors, completed;

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static double run(const char *url, int conns, double seconds)
{
    CURLM *m = curl_multi_init();
    curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)conns);
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)conns);
    worker *w = calloc((size_t)conns, sizeof(*w));
    for (int i = 0; i < conns; i++) {
        CURL *e = curl_easy_init();
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, &w[i]);
        curl_easy_setopt(e, CURLOPT_PRIVATE, &w[i]);
        curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        w[i].easy = e;
        curl_multi_add_handle(m, e);
    }
    unsigned long done = 0;
    double t0 = now_s(), until = t0 + seconds;
    int running = conns, stopping = 0;
    while (running > 0) {
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            CURL *e = msg->easy_handle;
            worker *wk;
            long status = 0;
            curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&wk);
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
            if (msg->data.result == CURLE_OK && status == 200 && wk->got == 13) {
                done++;
            } else if (errors++ == 0) {
                fprintf(stderr, "curl_http_client: %s, status %ld\n",
                        curl_easy_strerror(msg->data.result), status);
            }
            curl_multi_remove_handle(m, e);
            wk->got = 0;
            if (!stopping && now_s() < until) {
                curl_multi_add_handle(m, e); /* the next request, same connection */
                running++;
            }
        }
        if (!stopping && now_s() >= until)
            stopping = 1;
        if (running > 0)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    double wall = now_s() - t0;
    completed += done;
    for (int i = 0; i < conns; i++)
        curl_easy_cleanup(w[i].easy);
    curl_multi_cleanup(m);
    free(w);
    return (double)done / wall;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *url = NULL;
    int conns = 32;
    const char *q = getenv("BENCH_QUICK");
    double duration = q && strcmp(q, "1") == 0 ? 1 : 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--url") == 0 && i + 1 < argc)
            url = argv[++i];
        else if (strcmp(argv[i], "--conns") == 0 && i + 1 < argc)
            conns = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--duration") == 0 && i + 1 < argc)
            duration = strtod(argv[++i], NULL);
    }
    if (!url || conns <= 0 || conns > 10000 || duration <= 0) {
        fprintf(stderr, "usage: curl_http_client --url URL [--conns C] [--duration SECONDS]\n");
        return 2;
    }
    const char *re = getenv("BENCH_RUNS");
    int runs = re ? atoi(re) : 0;
    if (runs <= 0 || runs >= 100)
        runs = q && strcmp(q, "1") == 0 ? 3 : 5;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    run(url, conns, 0.3);
    if (errors) {
        fprintf(stderr, "curl_http_client: the warm-up failed; is a server at %s?\n", url);
        return 1;
    }
    double *v = calloc((size_t)runs, sizeof(*v));
    completed = 0;
    double c0 = cpu_s();
    for (int i = 0; i < runs; i++)
        v[i] = run(url, conns, duration);
    double cpu_us = (cpu_s() - c0) * 1e6 / (double)(completed ? completed : 1);
    qsort(v, (size_t)runs, sizeof(*v), cmp);
    double med = runs % 2 ? v[runs / 2] : (v[runs / 2 - 1] + v[runs / 2]) / 2;
    printf("bench=http_client impl=curl-multi conns=%d req_per_s=%.0f cpu_us_per_req=%.2f "
           "duration_s=%g errors=%lu runs=%d\n",
           conns, med, cpu_us, duration, errors, runs);
    free(v);
    curl_global_cleanup();
    return errors ? 1 : 0;
}
