/* SPDX-License-Identifier: Apache-2.0 */
/*
 * demo.c - weir's runtime at work in one process: an HTTP/1.1 keep-alive
 * server (a fiber per connection) and a load of client fibers hammering it
 * over loopback, a once-a-second progress line from an interval timer, and
 * the final requests/s. Everything runs on weir's scheduler threads
 * (WEIR_THREADS, default one per core; connections spread by work
 * stealing), on the I/O backend chosen by WEIR_IO (uring by default).
 *
 *   demo [seconds] [connections]     defaults: 5 s, 64 connections
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "hello_http.h"

static uint16_t port;
static int64_t stop_at;
static _Atomic uint64_t completed, failed; /* bumped from every thread */

/* One keep-alive client: request, read the whole response, repeat. */
static intptr_t client(void *arg)
{
    (void)arg;
    static const char req[] = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || weir_io_connect(fd, (struct sockaddr *)&a, sizeof(a), weir_time_after_ms(2000))) {
        failed++;
        if (fd >= 0)
            weir_io_close(fd);
        return -1;
    }
    char buf[256];
    const size_t want = sizeof(hello_response) - 1;
    while (weir_time_now() < stop_at) {
        if (weir_io_send(fd, req, sizeof(req) - 1, 0, WEIR_FOREVER) != (ssize_t)sizeof(req) - 1)
            break;
        size_t got = 0;
        while (got < want) {
            ssize_t n = weir_io_recv(fd, buf + got, want - got, 0, weir_time_after_ms(2000));
            if (n <= 0)
                goto out;
            got += (size_t)n;
        }
        if (memcmp(buf, hello_response, want) != 0)
            break;
        completed++;
    }
out:
    weir_io_close(fd);
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

static int demo_main(int argc, char **argv)
{
    int seconds = argc > 1 ? atoi(argv[1]) : 5;
    int conns = argc > 2 ? atoi(argv[2]) : 64;
    if (seconds < 1 || seconds > 50 || conns < 1 || conns > 10000) {
        fprintf(stderr, "usage: demo [seconds 1..50] [connections 1..10000]\n");
        return 2;
    }
    int lfd = hello_listen(0, &port);
    if (lfd < 0) {
        perror("demo: listen");
        return 1;
    }
    printf("weir demo: HTTP keep-alive server on 127.0.0.1:%u, %d client connections, %d s, "
           "I/O backend %s\n",
           port, conns, seconds, weir_loop_backend(weir_loop_current()));
    weir_task *server = weir_task_spawn(hello_accept_loop, (void *)(intptr_t)lfd,
                                        &(weir_spawn_opts){.name = "accept"});
    weir_task *rep = weir_task_spawn(reporter, NULL, &(weir_spawn_opts){.name = "reporter"});
    int64_t t0 = weir_time_now();
    stop_at = t0 + (int64_t)seconds * WEIR_SEC;
    weir_task **clients = calloc((size_t)conns, sizeof(*clients));
    for (int i = 0; i < conns; i++)
        clients[i] = weir_task_spawn(client, NULL, &(weir_spawn_opts){.name = "client"});
    for (int i = 0; i < conns; i++)
        weir_task_join(clients[i], NULL, WEIR_FOREVER);
    double secs = (double)(weir_time_now() - t0) / 1e9;
    free(clients);
    weir_task_cancel(rep);
    weir_task_join(rep, NULL, WEIR_FOREVER);
    weir_task_cancel(server);
    weir_task_join(server, NULL, WEIR_FOREVER);
    weir_io_close(lfd);
    printf("weir demo: %llu requests in %.2f s = %.0f req/s on %d scheduler threads (%llu failed "
           "connections)\n",
           (unsigned long long)completed, secs, (double)completed / secs,
           weir_rt_threads(weir_rt_current()), (unsigned long long)failed);
    return completed > 0 && failed == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    return weir_main(demo_main, argc, argv);
}
