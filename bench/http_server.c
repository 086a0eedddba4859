/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_server.c - the weir side of the http_server benchmark: weir's HTTP/1.1
 * server (weir/http.h) with one route, GET / answering "Hello, World!" as
 * text/plain, on the runtime of weir_main (WEIR_THREADS scheduler threads,
 * one listening socket and accept loop each). Unlike http_keepalive's
 * hand-rolled responder this is the whole server: the request parser with
 * its limits, routing, the header deadline, Date and Server fields. bench/run
 * starts it, drives it with wrk and reads its CPU time; it serves until
 * SIGTERM or SIGINT, read by a fiber from a signalfd, then stops gracefully.
 *
 *   http_server --port P
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>

#include "weir/http.h"
#include "weir/io.h"
#include "weir/rt.h"

static int hello(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req, (void)arg;
    return weir_http_res_send(res, 200, "text/plain", "Hello, World!", 13);
}

static int server_main(int argc, char **argv)
{
    long port = 8080;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            port = atol(argv[++i]);
    if (port <= 0 || port > 65535) {
        fprintf(stderr, "usage: http_server --port P\n");
        return 2;
    }
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    weir_http_server *s = weir_http_server_new(&(weir_http_server_opts){.port = (int)port});
    if (sfd < 0 || !s || weir_http_route(s, "GET", "/", hello, NULL, 0) != 0) {
        perror("http_server");
        return 1;
    }
    int e = weir_http_server_start(s);
    if (e < 0) {
        fprintf(stderr, "http_server: %s\n", weir_strerror(e));
        return 1;
    }
    fprintf(stderr, "http_server: weir-%s, %d threads, listening on 127.0.0.1:%d\n",
            weir_loop_backend(weir_loop_current()), weir_rt_threads(weir_rt_current()),
            weir_http_server_port(s));
    struct signalfd_siginfo si;
    weir_io_read(sfd, &si, sizeof(si), WEIR_FOREVER);
    weir_http_server_stop(s, weir_time_after_ms(1000));
    weir_http_server_free(s);
    weir_io_close(sfd);
    return 0;
}

int main(int argc, char **argv)
{
    return weir_main(server_main, argc, argv);
}
