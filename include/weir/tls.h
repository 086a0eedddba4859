/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/tls.h - TLS on weir's sockets (OpenSSL), for fibers.
 *
 * A context (weir_tls_ctx) holds what every connection of one side
 * shares: a server's certificate and key, and the authority it checks
 * client certificates against (mutual TLS); a client's authority for the
 * server's certificate and, for mutual TLS, its own certificate and key.
 * Both sides speak TLS 1.2 or later and refuse renegotiation. Files are
 * PEM; a file that cannot be read, a key that does not match its
 * certificate, an authority that holds no certificate is refused at
 * weir_tls_ctx_new with a message naming the file and what is wrong.
 *
 * A session (weir_tls) runs over a connected socket the caller owns: the
 * handshake (weir_tls_connect / weir_tls_accept) completes under one
 * deadline, and a client checks that the server's certificate names the
 * host it connected by - a DNS name against the certificate's DNS
 * subjectAltNames, an IP literal against its IP subjectAltNames - unless
 * the context says not to. A failed handshake's message says what failed
 * and how to fix it (the names the certificate does carry, an authority
 * that did not sign it, a client certificate the server asked for).
 *
 * I/O never blocks a thread: the socket is read and written without
 * waiting (MSG_DONTWAIT) and the fiber waits for readiness with
 * weir_io_poll under the call's deadline. One fiber may read while
 * another writes the same session (a reader and an outbox writer): each
 * OpenSSL call runs under the session's lock, which is never held while
 * waiting. Two readers, or two writers, at once are not supported.
 *
 * Errors are negative errnos: -ETIMEDOUT (the deadline passed),
 * -ECANCELED (the fiber was cancelled), -ECONNRESET / -EPIPE (the peer
 * went away), -EPROTO (a TLS failure: bad record, alert, verification;
 * the session's last error text says which), -ENOMEM, -EINVAL.
 */
#ifndef WEIR_TLS_H
#define WEIR_TLS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "weir/net.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weir_tls_ctx weir_tls_ctx;
typedef struct weir_tls weir_tls;

typedef struct weir_tls_opts {
    /* A server's certificate (chain) and key: required. A client's, for
     * mutual TLS: both or neither. */
    const char *cert_file, *key_file;
    /* A server: with ca_file, every client must present a certificate
     * this authority signed (mutual TLS). A client: the authority the
     * server's certificate must chain to (NULL: the system's store). */
    const char *ca_file;
    /* A client: accept a certificate that does not name the host (the
     * chain is still checked). */
    int no_verify_hostname;
} weir_tls_opts;

/* A context for servers (server != 0) or clients. NULL with msg on error. */
weir_tls_ctx *weir_tls_ctx_new(int server, const weir_tls_opts *o, char *msg, size_t cap);
/* Free a context; the sessions made from it must be freed first. NULL is a no-op. */
void weir_tls_ctx_free(weir_tls_ctx *ctx);

/*
 * Handshake as a client on fd, connected to host (the name or IP literal
 * it was reached by: sent as SNI when a name, and checked against the
 * certificate). 0 with *out, or a negative errno with msg. fd stays the
 * caller's.
 */
int weir_tls_connect(weir_tls_ctx *ctx, int fd, const char *host, int64_t deadline, weir_tls **out,
                     char *msg, size_t cap);
/* Handshake as a server on fd, an accepted connection. As above. */
int weir_tls_accept(weir_tls_ctx *ctx, int fd, int64_t deadline, weir_tls **out, char *msg,
                    size_t cap);

/* Up to len bytes: > 0, 0 when the peer ended the session with
 * close_notify (weir_tls_shutdown), -ECONNRESET when the connection closed
 * without it (a TCP close, a crash: the end cannot be told from a
 * truncation), or another negative errno. */
ssize_t weir_tls_read(weir_tls *t, void *buf, size_t len, int64_t deadline);
/* All len bytes: 0 or a negative errno (part may have been sent). */
int weir_tls_write(weir_tls *t, const void *buf, size_t len, int64_t deadline);
/* Whether an idle session may carry another request, without waiting:
 * 0 nothing is waiting to be read and the peer has not closed it
 * (post-handshake messages such as TLS 1.3 session tickets are taken in
 * and are not data), -EBADMSG application bytes are waiting, -ECONNRESET
 * the peer closed it (close_notify or a TCP close), another negative
 * errno a TLS failure. From a fiber or a plain thread. */
int weir_tls_idle_check(weir_tls *t);
/* Frames over TLS: as weir_frame_read / weir_frame_write (weir/net.h). */
ssize_t weir_tls_frame_read(weir_tls *t, weir_frame_parser *p, weir_frame *out, int64_t deadline);
int weir_tls_frame_write(weir_tls *t, const void *frame, size_t len, int64_t deadline);

/* Send close_notify (best effort, under deadline). 0 or a negative errno. */
int weir_tls_shutdown(weir_tls *t, int64_t deadline);
/* Free the session; its socket is not closed. NULL is a no-op. */
void weir_tls_free(weir_tls *t);

int weir_tls_fd(const weir_tls *t);
/* The last failure's text (verification, alert), "" when none. */
const char *weir_tls_last_error(const weir_tls *t);

#ifdef __cplusplus
}
#endif
#endif /* WEIR_TLS_H */
