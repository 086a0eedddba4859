/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_keepalive.c - the weir side of the HTTP keep-alive benchmark: the
 * "Hello, World!" server of bench/hello_http.h on one thread, a fiber
 * per connection. bench/run starts it, drives it with wrk and reads its CPU
 * time; it serves until SIGTERM or SIGINT, which it receives through a
 * signalfd read by a fiber (so shutdown is an ordinary cancellation).
 *
 *   http_keepalive --port P
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/signalfd.h>

#include "hello_http.h"

static int server_main(int argc, char **argv)
{
    long port = 8080;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            port = atol(argv[++i]);
    if (port <= 0 || port > 65535) {
        fprintf(stderr, "usage: http_keepalive --port P\n");
        return 2;
    }
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    uint16_t bound;
    int lfd = hello_listen((uint16_t)port, &bound);
    if (sfd < 0 || lfd < 0) {
        perror("http_keepalive");
        return 1;
    }
    fprintf(stderr, "http_keepalive: weir-%s listening on 127.0.0.1:%u\n",
            weir_loop_backend(weir_loop_current()), bound);
    weir_task *acc = weir_task_spawn(hello_accept_loop, (void *)(intptr_t)lfd,
                                     &(weir_spawn_opts){.name = "accept"});
    struct signalfd_siginfo si;
    weir_io_read(sfd, &si, sizeof(si), WEIR_FOREVER);
    weir_task_cancel(acc);
    weir_task_join(acc, NULL, WEIR_FOREVER);
    weir_io_close(lfd);
    weir_io_close(sfd);
    return 0; /* connection fibers still open are cancelled by weir_main */
}

int main(int argc, char **argv)
{
    return weir_main(server_main, argc, argv);
}
