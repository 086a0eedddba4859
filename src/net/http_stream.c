/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_stream.c - streamed answers of the HTTP server (weir/http.h,
 * weir_http_res_stream_*): a head written at once, then a body written as
 * the handler goes, for Server-Sent Events and other long answers.
 *
 * The head goes out with whatever pipelined answers were waiting before it
 * in the connection's output buffer; each write is one chunk (HTTP/1.1) or
 * raw bytes (HTTP/1.0, the body ends with the connection), sent at once
 * under write_timeout_ms. The connection is marked streaming under the
 * server's lock, which is how weir_http_server_stop finds it: instead of
 * waiting for the handler until its deadline, the stop shuts the socket's
 * reads (shutdown(SHUT_RD)), and the read that weir_http_res_stream_wait is
 * parked in returns 0 at once. The stopping flag, set before, tells that
 * apart from the client's close. Writes still work after it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "http_server_int.h"
#include "weir/io.h"

/* The stream's head: the status line and fields of put_head, then the body
 * framing: chunked for HTTP/1.1, none for HTTP/1.0 (the body ends when the
 * connection closes, so no Content-Length and no keep-alive). A streamed
 * answer is always the connection's last. */
int weir_http_res_stream_start(weir_http_res *r, int status, const char *content_type)
{
    if (!r)
        return -EINVAL;
    if (r->done)
        return -EALREADY;
    if (status < 200 || status > 999 || status == 204 || status == 304)
        return -EINVAL;
    if (content_type && (strchr(content_type, '\r') || strchr(content_type, '\n')))
        return -EINVAL;
    conn *c = r->c;
    size_t mark = c->out.len;
    r->close = 1;
    r->chunked = c->p.version_minor == 1;
    weir__http_put_head(c, r, status, content_type);
    weir_http_put_raw(&c->out, "Cache-Control: no-cache\r\n", 25);
    if (r->chunked)
        weir_http_put_raw(&c->out, "Transfer-Encoding: chunked\r\n", 28);
    weir_http_put_end(&c->out);
    if (c->out.err) {
        int e = c->out.err;
        c->out.err = 0;
        c->out.len = mark;
        return e;
    }
    r->done = 1;
    r->status = status;
    r->stream = STREAM_OPEN;
    weir_http_server *s = c->s;
    pthread_mutex_lock(&s->lock);
    c->streaming = 1; /* from now on a stop shuts the socket's reads (stream_wait) */
    pthread_mutex_unlock(&s->lock);
    /* The head now, with any pipelined answers before it: a client waits
     * for it before the first event. */
    int e = weir__http_flush(c);
    if (e < 0)
        r->stream_err = e;
    return e;
}

static int stream_check(weir_http_res *r)
{
    if (!r)
        return -EINVAL;
    if (r->stream == STREAM_NONE)
        return -EINVAL;
    if (r->stream == STREAM_ENDED)
        return -EALREADY;
    return r->stream_err;
}

int weir_http_res_stream_write(weir_http_res *r, const void *p, size_t n)
{
    int e = stream_check(r);
    if (e)
        return e;
    if (!p && n)
        return -EINVAL;
    if (n == 0 || r->head_only)
        return 0; /* an empty chunk would end the body; HEAD has none */
    conn *c = r->c;
    if (r->chunked)
        weir_http_put_chunk(&c->out, p, n);
    else
        weir_http_put_raw(&c->out, p, n);
    if (c->out.err) {
        e = c->out.err;
        weir_http_buf_close(&c->out);
        return e;
    }
    if ((e = weir__http_flush(c)) < 0)
        r->stream_err = e;
    return e;
}

int weir_http_res_stream_end(weir_http_res *r)
{
    int e = stream_check(r);
    if (e)
        return e;
    r->stream = STREAM_ENDED;
    if (!r->chunked || r->head_only)
        return 0; /* the close ends the body */
    conn *c = r->c;
    weir_http_put_last_chunk(&c->out, NULL, 0);
    if ((e = weir__http_flush(c)) < 0)
        r->stream_err = e;
    return e;
}

/* Wait for the deadline while watching the socket: the client's close (a
 * read of 0, a reset) ends the wait at once, bytes it sends are dropped. A
 * stop shuts the reads of every open stream (shutdown(SHUT_RD), see
 * weir_http_server_stop), which a pending read sees as 0: the stopping flag,
 * set before, tells the two apart. It is read before each read, so a stop
 * just before the read is seen by the read itself. */
int weir_http_res_stream_wait(weir_http_res *r, int64_t deadline)
{
    int e = stream_check(r);
    if (e)
        return e;
    conn *c = r->c;
    uint8_t sink[512];
    for (;;) {
        if (atomic_load(&c->s->stopping))
            return -ECANCELED;
        ssize_t n = weir_io_recv(c->fd, sink, sizeof(sink), 0, deadline);
        if (n == -ETIMEDOUT)
            return 0;
        if (n == -ECANCELED)
            return -ECANCELED;
        if (n > 0)
            continue;
        if (atomic_load(&c->s->stopping))
            return -ECANCELED;
        return -ECONNRESET; /* 0 (EOF) or a reset */
    }
}

/* The handler of a streamed answer returned: end the body for it, unless
 * it failed (then the connection closes without the end, which a chunked
 * client sees as a broken body: nothing else can follow a sent head). */
void weir__http_stream_finish(conn *c, int handler_rc)
{
    weir_http_res *r = &c->res;
    if (r->stream == STREAM_OPEN && handler_rc >= 0 && !r->stream_err)
        weir_http_res_stream_end(r);
    else if (r->stream == STREAM_OPEN)
        c->out.len = 0; /* nothing more goes out */
    /* A whole body: close gracefully, so bytes the client sent meanwhile
     * cannot make the close a reset that destroys the body's end. */
    c->linger = !r->stream_err && handler_rc >= 0;
    r->stream = STREAM_ENDED;
    weir_http_server *s = c->s;
    pthread_mutex_lock(&s->lock);
    c->streaming = 0;
    pthread_mutex_unlock(&s->lock);
}
