// SPDX-License-Identifier: Apache-2.0
//
// libuv peer for bench=http_keepalive: a minimal HTTP/1.1 keep-alive "Hello,
// World!" server on one thread, serving 127.0.0.1:PORT until SIGTERM.
//
//   uv_http --port P
//
// Parser: a request is everything up to and including the blank line
// ("\r\n\r\n"); request bodies are not supported (wrk sends GET). Pipelined
// requests are answered in order; the responses for one read go out in one
// write (uv_try_write, then uv_write for whatever the socket did not take).
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

static const char RESPONSE[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";
#define RESPONSE_LEN (sizeof RESPONSE - 1)
#define MAX_HEADER (64 * 1024)

typedef struct {
  uv_tcp_t tcp;
  size_t have;   // unparsed bytes in buf
  int crlf_run;  // parser state: how much of "\r\n\r\n" ends the buffered bytes
  char buf[4096];
  char out[16 * RESPONSE_LEN];
} conn_t;

typedef struct {
  uv_write_t req;
  uv_buf_t buf;
} wreq_t;

static uv_loop_t *loop;

static void on_close(uv_handle_t *h) { free(h->data); }

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  (void)hint;
  conn_t *c = h->data;
  // The parser keeps no bytes: it only tracks how much of "\r\n\r\n" has been
  // seen, so every read can reuse the whole buffer.
  *b = uv_buf_init(c->buf, sizeof c->buf);
}

static void on_write(uv_write_t *req, int status) {
  wreq_t *w = (wreq_t *)req;
  if (status < 0 && !uv_is_closing((uv_handle_t *)req->handle)) {
    uv_close((uv_handle_t *)req->handle, on_close);
  }
  free(w->buf.base);
  free(w);
}

static int send_bytes(conn_t *c, const char *p, size_t len) {
  uv_buf_t b = uv_buf_init((char *)p, (unsigned)len);
  int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
  if (n == UV_EAGAIN || n == UV_ENOSYS) {
    n = 0;
  } else if (n < 0) {
    return n;
  }
  if ((size_t)n == len) {
    return 0;
  }
  wreq_t *w = malloc(sizeof *w);
  char *copy = malloc(len - (size_t)n);
  if (!w || !copy) {
    free(w);
    free(copy);
    return UV_ENOMEM;
  }
  memcpy(copy, p + n, len - (size_t)n);
  w->buf = uv_buf_init(copy, (unsigned)(len - (size_t)n));
  return uv_write(&w->req, (uv_stream_t *)&c->tcp, &w->buf, 1, on_write);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
  conn_t *c = s->data;
  if (nread < 0) {
    if (!uv_is_closing((uv_handle_t *)s)) {
      uv_close((uv_handle_t *)s, on_close);
    }
    return;
  }
  static const char END[] = "\r\n\r\n";
  size_t nout = 0;
  int run = c->crlf_run;
  for (ssize_t i = 0; i < nread; i++) {
    char ch = b->base[i];
    if (ch == END[run]) {
      run++;
    } else {
      run = (ch == '\r') ? 1 : 0;
    }
    c->have++;
    if (run == 4) {  // one complete request
      run = 0;
      c->have = 0;
      if (nout + RESPONSE_LEN > sizeof c->out) {
        if (send_bytes(c, c->out, nout) < 0) {
          uv_close((uv_handle_t *)s, on_close);
          return;
        }
        nout = 0;
      }
      memcpy(c->out + nout, RESPONSE, RESPONSE_LEN);
      nout += RESPONSE_LEN;
    }
  }
  c->crlf_run = run;
  if (c->have > MAX_HEADER) {  // no end of header in sight: drop the client
    uv_close((uv_handle_t *)s, on_close);
    return;
  }
  if (nout && send_bytes(c, c->out, nout) < 0) {
    uv_close((uv_handle_t *)s, on_close);
  }
}

static void on_conn(uv_stream_t *server, int status) {
  if (status < 0) {
    return;
  }
  conn_t *c = calloc(1, sizeof *c);
  if (!c) {
    return;
  }
  uv_tcp_init(loop, &c->tcp);
  c->tcp.data = c;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
    uv_close((uv_handle_t *)&c->tcp, on_close);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, on_read);
}

static void on_signal(uv_signal_t *h, int sig) {
  (void)sig;
  uv_stop(h->loop);
}

int main(int argc, char **argv) {
  int port = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--port")) {
      port = atoi(argv[i + 1]);
    }
  }
  if (port <= 0 || port > 65535) {
    fprintf(stderr, "usage: %s --port P\n", argv[0]);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  loop = uv_default_loop();
  uv_tcp_t server;
  struct sockaddr_in addr;
  uv_ip4_addr("127.0.0.1", port, &addr);
  uv_tcp_init(loop, &server);
  int rc = uv_tcp_bind(&server, (const struct sockaddr *)&addr, 0);
  if (rc == 0) {
    rc = uv_listen((uv_stream_t *)&server, 4096, on_conn);
  }
  if (rc != 0) {
    fprintf(stderr, "listen 127.0.0.1:%d: %s\n", port, uv_strerror(rc));
    return 1;
  }
  uv_signal_t sigterm, sigint;
  uv_signal_init(loop, &sigterm);
  uv_signal_start(&sigterm, on_signal, SIGTERM);
  uv_signal_init(loop, &sigint);
  uv_signal_start(&sigint, on_signal, SIGINT);
  uv_run(loop, UV_RUN_DEFAULT);
  return 0;
}
