/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_tls.c - the HTTPS transport of weir's HTTP client (weir/http.h,
 * weir_http_tls_transport_init): a TCP connection (weir_net_connect), a
 * TLS client handshake on it (weir_tls_connect, the URL's host checked
 * against the server's certificate unless the context says not to), then
 * weir_tls_read / weir_tls_write. Closing frees the session and the
 * socket without sending close_notify or waiting for the peer's: a client
 * that ends its connections gives the server no truncation to fear (HTTP
 * frames its messages), and close must never wait.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "net/frame_int.h"
#include "weir/http.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/tls.h"

typedef struct tls_conn {
    int fd;
    weir_tls *tls;
} tls_conn;

static int tls_connect_msg(void *ctx, const char *host, int port, int64_t deadline, void **out,
                           char *msg, size_t cap)
{
    if (msg && cap)
        msg[0] = '\0';
    tls_conn *k = malloc(sizeof(*k));
    if (!k)
        return -ENOMEM;
    int fd = weir_net_connect(host, port, deadline);
    if (fd < 0) {
        free(k);
        return fd;
    }
    weir_net_set_nodelay(fd, 1);
    char why[1024] = "";
    int r = weir_tls_connect(ctx, fd, host, deadline, &k->tls, why, sizeof(why));
    if (r < 0) {
        if (msg && cap)
            snprintf(msg, cap, "TLS to %s:%d: %s", host, port, why[0] ? why : "handshake failed");
        if (weir_io_close(fd) == -EINVAL)
            close(fd);
        free(k);
        return r;
    }
    k->fd = fd;
    *out = k;
    return 0;
}

static int tls_connect(void *ctx, const char *host, int port, int64_t deadline, void **out)
{
    return tls_connect_msg(ctx, host, port, deadline, out, NULL, 0);
}

static ssize_t tls_read(void *conn, void *buf, size_t len, int64_t deadline)
{
    /* A close without close_notify stays -ECONNRESET: a response delimited
     * by the connection's end is then refused as possibly truncated. */
    return weir_tls_read(((tls_conn *)conn)->tls, buf, len, deadline);
}

static ssize_t tls_write(void *conn, const void *buf, size_t len, int64_t deadline)
{
    int r = weir_tls_write(((tls_conn *)conn)->tls, buf, len, deadline);
    return r < 0 ? r : (ssize_t)len;
}

static int tls_idle_check(void *conn)
{
    return weir_tls_idle_check(((tls_conn *)conn)->tls);
}

static void tls_close(void *conn)
{
    tls_conn *k = conn;
    weir_tls_free(k->tls);
    if (!weir__frame_fiber_caller() || weir_io_close(k->fd) == -EINVAL)
        close(k->fd);
    free(k);
}

int weir_http_tls_transport_init(weir_http_transport *t, weir_tls_ctx *ctx)
{
    if (!t || !ctx)
        return -EINVAL;
    *t = (weir_http_transport){
        .connect = tls_connect,
        .read = tls_read,
        .write = tls_write,
        .close = tls_close,
        .ctx = ctx,
        .idle_check = tls_idle_check,
        .connect_msg = tls_connect_msg,
    };
    return 0;
}
