/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hello_http.h - a minimal HTTP/1.1 keep-alive "Hello, World!" responder on
 * weir fibers for the http_keepalive benchmark: the runtime's own cost,
 * beside the same hand-rolled responder in libuv, Tokio and Go. Not an HTTP
 * server (weir/http.h has that, measured by http_server): it reads
 * until the blank line ending each request header, ignores bodies, and
 * answers every request with the same small response. It handles
 * pipelined requests and closes on EOF, error or an oversized header.
 */
#ifndef WEIR_BENCH_HELLO_HTTP_H
#define WEIR_BENCH_HELLO_HTTP_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "weir/io.h"
#include "weir/rt.h"

static const char hello_response[] = "HTTP/1.1 200 OK\r\n"
                                     "Content-Type: text/plain\r\n"
                                     "Content-Length: 13\r\n"
                                     "\r\n"
                                     "Hello, World!";

/* Listening TCP socket on 127.0.0.1:port (0 = any free port); returns the fd
 * and stores the bound port, or -errno. */
static int hello_listen(uint16_t port, uint16_t *bound)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(a);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 4096) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) < 0) {
        close(fd);
        return -1;
    }
    *bound = ntohs(a.sin_port);
    return fd;
}

/* Serve one connection (a fiber per connection); arg is the fd. */
static intptr_t hello_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char buf[8192], out[16 * sizeof(hello_response)];
    size_t have = 0;
    for (;;) {
        ssize_t n = weir_io_recv(fd, buf + have, sizeof(buf) - have, 0, WEIR_FOREVER);
        if (n <= 0)
            break;
        have += (size_t)n;
        /* Answer every complete request header in the buffer in one send. */
        size_t pos = 0, nout = 0;
        char *end;
        while ((end = memmem(buf + pos, have - pos, "\r\n\r\n", 4)) != NULL) {
            if (nout + sizeof(hello_response) > sizeof(out))
                break;
            memcpy(out + nout, hello_response, sizeof(hello_response) - 1);
            nout += sizeof(hello_response) - 1;
            pos = (size_t)(end - buf) + 4;
        }
        if (pos == 0 && have == sizeof(buf))
            break; /* header larger than our buffer */
        memmove(buf, buf + pos, have - pos);
        have -= pos;
        if (nout && weir_io_send(fd, out, nout, 0, WEIR_FOREVER) != (ssize_t)nout)
            break;
    }
    weir_io_close(fd);
    return 0;
}

/* Accept loop: a fiber per connection, until cancelled. */
static intptr_t hello_accept_loop(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int c = weir_io_accept(lfd, NULL, NULL, WEIR_FOREVER);
        if (c == -ECANCELED)
            break;
        if (c < 0)
            continue; /* EMFILE, ECONNABORTED...: keep serving */
        weir_spawn_opts o = {.name = "http-conn", .stack_size = 32 * 1024};
        weir_task *t = weir_task_spawn(hello_conn, (void *)(intptr_t)c, &o);
        if (t)
            weir_task_detach(t);
        else
            close(c);
    }
    return 0;
}

#endif
