/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tls.c - TLS sessions over weir's sockets (weir/tls.h), with OpenSSL.
 *
 * The socket is not OpenSSL's: a small BIO reads it with recv(MSG_DONTWAIT)
 * and writes it with send(MSG_DONTWAIT | MSG_NOSIGNAL), so the descriptor's
 * flags stay as the I/O backend set them (io_uring owns the fd; epoll made
 * it non-blocking itself) and a peer that went away is -EPIPE, never a
 * SIGPIPE. When OpenSSL wants more bytes (or room) the call returns
 * SSL_ERROR_WANT_READ / WANT_WRITE; the fiber then waits with weir_io_poll
 * under the caller's deadline and calls again.
 *
 * One reader and one writer may share a session. An SSL object is not safe
 * to use from two threads at once, so every OpenSSL call on it runs under
 * the session's mutex; the mutex is never held across a wait, so the
 * reader parked on POLLIN does not hold up the writer. OpenSSL's error
 * queue is per thread: it is cleared before each call and read right after
 * it, before the fiber can yield (and move to another thread).
 *
 * Verification messages. The chain and host checks happen inside the
 * handshake, and a failed check leaves no peer certificate on the session,
 * so a verify callback keeps the first failure's code and the peer's leaf
 * certificate; the handshake's message is built from them: the names the
 * certificate carries for a host mismatch, the CA file for an unknown
 * authority, what the server asked for when a client certificate is
 * missing.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "net/frame_int.h"
#include "rt/rt_int.h"
#include "weir/io.h"
#include "weir/tls.h"

struct weir_tls_ctx {
    SSL_CTX *ssl;
    int server;
    int no_verify_hostname;
    int client_cert; /* a client that presents a certificate */
    char *ca_file;   /* NULL: the system's store (client) / no mutual TLS (server) */
};

#define ERR_CAP 768
/* Most plaintext bytes one SSL_write takes: four full records. */
#define TLS_WRITE_CHUNK (64u << 10)

struct weir_tls {
    SSL *ssl;
    weir_tls_ctx *ctx;
    int fd;
    pthread_mutex_t mu;
    int io_errno; /* the last socket error the BIO saw (under mu) */
    /* The first verification failure (under mu, from the verify callback). */
    int verify_err;
    int verify_depth;
    X509 *verify_cert; /* the certificate at fault, or the leaf */
    X509 *leaf;        /* the peer's leaf certificate, when verification failed */
    char host[256];
    char err[ERR_CAP];
};

/* ---- messages ------------------------------------------------------------------------- */
static void say(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *msg, size_t cap, const char *fmt, ...)
{
    if (!msg || cap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
}

/* OpenSSL's error queue as text ("error:...; error:..."), emptied. */
static void ssl_errors(char *out, size_t cap)
{
    size_t len = 0;
    unsigned long e;
    if (cap)
        out[0] = '\0';
    while ((e = ERR_get_error()) != 0) {
        char one[256];
        ERR_error_string_n(e, one, sizeof(one));
        if (len + 2 < cap) {
            int n = snprintf(out + len, cap - len, "%s%s", len ? "; " : "", one);
            if (n > 0)
                len += (size_t)n < cap - len ? (size_t)n : cap - len - 1;
        }
    }
    if (len == 0 && cap)
        snprintf(out, cap, "no detail from OpenSSL");
}

/* ---- context -------------------------------------------------------------------------- */
static int readable(const char *what, const char *file, char *msg, size_t cap)
{
    if (access(file, R_OK) == 0)
        return 1;
    say(msg, cap, "cannot read %s %s: %s", what, file, strerror(errno));
    return 0;
}

static int load_cert_key(SSL_CTX *c, const char *cert, const char *key, char *msg, size_t cap)
{
    char e[512];
    if (!readable("certificate", cert, msg, cap) || !readable("key", key, msg, cap))
        return -1;
    ERR_clear_error();
    if (SSL_CTX_use_certificate_chain_file(c, cert) != 1) {
        ssl_errors(e, sizeof(e));
        say(msg, cap, "cannot read certificate %s: not a PEM certificate chain (%s)", cert, e);
        return -1;
    }
    if (SSL_CTX_use_PrivateKey_file(c, key, SSL_FILETYPE_PEM) != 1) {
        ssl_errors(e, sizeof(e));
        /* OpenSSL checks the pair as it loads the key, and says so. */
        if (strstr(e, "values mismatch") || strstr(e, "key mismatch"))
            say(msg, cap, "key %s does not match certificate %s (%s)", key, cert, e);
        else
            say(msg, cap, "cannot read key %s: not a PEM private key (%s)", key, e);
        return -1;
    }
    if (SSL_CTX_check_private_key(c) != 1) {
        ssl_errors(e, sizeof(e));
        say(msg, cap, "key %s does not match certificate %s (%s)", key, cert, e);
        return -1;
    }
    return 0;
}

static int load_ca(SSL_CTX *c, int server, const char *ca, char *msg, size_t cap)
{
    char e[512];
    if (!readable("CA file", ca, msg, cap))
        return -1;
    ERR_clear_error();
    if (SSL_CTX_load_verify_locations(c, ca, NULL) != 1) {
        ssl_errors(e, sizeof(e));
        say(msg, cap, "cannot read CA file %s: it holds no PEM certificate (%s)", ca, e);
        return -1;
    }
    if (server) {
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca);
        if (!names || sk_X509_NAME_num(names) == 0) {
            ssl_errors(e, sizeof(e));
            sk_X509_NAME_pop_free(names, X509_NAME_free);
            say(msg, cap, "cannot read CA file %s: it holds no PEM certificate (%s)", ca, e);
            return -1;
        }
        SSL_CTX_set_client_CA_list(c, names); /* takes names */
    }
    return 0;
}

static int verify_cb(int ok, X509_STORE_CTX *xs);

weir_tls_ctx *weir_tls_ctx_new(int server, const weir_tls_opts *o, char *msg, size_t cap)
{
    static const weir_tls_opts none;
    char e[512];
    say(msg, cap, "%s", "");
    if (!o)
        o = &none;
    if (server && (!o->cert_file || !o->key_file)) {
        say(msg, cap, "a TLS server needs a certificate and a key (cert_file %s, key_file %s)",
            o->cert_file ? o->cert_file : "missing", o->key_file ? o->key_file : "missing");
        errno = EINVAL;
        return NULL;
    }
    if (!server && !o->cert_file != !o->key_file) {
        if (o->cert_file)
            say(msg, cap,
                "client certificate %s has no key: give both a certificate and its key, or "
                "neither",
                o->cert_file);
        else
            say(msg, cap,
                "client key %s has no certificate: give both a certificate and its key, or "
                "neither",
                o->key_file);
        errno = EINVAL;
        return NULL;
    }
    weir_tls_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
        say(msg, cap, "out of memory");
        errno = ENOMEM;
        return NULL;
    }
    ctx->server = server;
    ctx->no_verify_hostname = o->no_verify_hostname;
    ctx->client_cert = !server && o->cert_file;
    if (o->ca_file && !(ctx->ca_file = strdup(o->ca_file)))
        goto nomem;
    ERR_clear_error();
    ctx->ssl = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!ctx->ssl) {
        ssl_errors(e, sizeof(e));
        say(msg, cap, "cannot make a TLS context: %s", e);
        goto fail;
    }
    SSL_CTX_set_min_proto_version(ctx->ssl, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx->ssl, SSL_OP_NO_RENEGOTIATION);
    /* A write that had to wait is retried from the same bytes; the mode
     * only lifts OpenSSL's check that the pointer is the same too. */
    SSL_CTX_set_mode(ctx->ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (o->cert_file && load_cert_key(ctx->ssl, o->cert_file, o->key_file, msg, cap) < 0)
        goto fail;
    if (o->ca_file && load_ca(ctx->ssl, server, o->ca_file, msg, cap) < 0)
        goto fail;
    if (server) {
        if (o->ca_file)
            SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                               verify_cb);
        else
            SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_NONE, NULL);
    } else {
        if (!o->ca_file && SSL_CTX_set_default_verify_paths(ctx->ssl) != 1) {
            ssl_errors(e, sizeof(e));
            say(msg, cap, "cannot load the system's certificate store: %s", e);
            goto fail;
        }
        SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_PEER, verify_cb);
    }
    ERR_clear_error();
    return ctx;
nomem:
    say(msg, cap, "out of memory");
    errno = ENOMEM;
    weir_tls_ctx_free(ctx);
    return NULL;
fail:
    ERR_clear_error();
    weir_tls_ctx_free(ctx);
    errno = EINVAL;
    return NULL;
}

void weir_tls_ctx_free(weir_tls_ctx *ctx)
{
    if (!ctx)
        return;
    SSL_CTX_free(ctx->ssl);
    free(ctx->ca_file);
    free(ctx);
}

/* ---- the socket BIO ------------------------------------------------------------------- */
/* The BIO's data is the session (for the fd and to keep the socket error). */
static int bio_write(BIO *b, const char *buf, int len)
{
    weir_tls *t = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    for (;;) {
        ssize_t n = send(t->fd, buf, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0)
            return (int)n;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            BIO_set_retry_write(b);
        else
            t->io_errno = errno;
        return -1;
    }
}

static int bio_read(BIO *b, char *buf, int len)
{
    weir_tls *t = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    for (;;) {
        ssize_t n = recv(t->fd, buf, (size_t)len, MSG_DONTWAIT);
        if (n >= 0)
            return (int)n; /* 0: the peer closed the TCP stream */
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            BIO_set_retry_read(b);
        else
            t->io_errno = errno;
        return -1;
    }
}

static int bio_puts(BIO *b, const char *s)
{
    return bio_write(b, s, (int)strlen(s));
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b;
    (void)num;
    (void)ptr;
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1; /* nothing is buffered here */
    default:
        return 0;
    }
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;
static int ssl_index = -1; /* SSL ex_data slot holding the session */

/* One method for the process (a documented process-wide registry: it is
 * immutable once made, like OpenSSL's own methods). */
static void bio_method_make(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "weir socket");
    if (m && (!BIO_meth_set_write(m, bio_write) || !BIO_meth_set_read(m, bio_read) ||
              !BIO_meth_set_puts(m, bio_puts) || !BIO_meth_set_ctrl(m, bio_ctrl) ||
              !BIO_meth_set_create(m, bio_create))) {
        BIO_meth_free(m);
        m = NULL;
    }
    bio_method = m;
    ssl_index = SSL_get_ex_new_index(0, "weir_tls", NULL, NULL, NULL);
}

/* ---- verification --------------------------------------------------------------------- */
static int verify_cb(int ok, X509_STORE_CTX *xs)
{
    SSL *ssl = X509_STORE_CTX_get_ex_data(xs, SSL_get_ex_data_X509_STORE_CTX_idx());
    weir_tls *t = ssl ? SSL_get_ex_data(ssl, ssl_index) : NULL;
    if (!ok && t && !t->verify_err) {
        t->verify_err = X509_STORE_CTX_get_error(xs);
        t->verify_depth = X509_STORE_CTX_get_error_depth(xs);
        X509 *c = X509_STORE_CTX_get_current_cert(xs);
        if (c && X509_up_ref(c))
            t->verify_cert = c;
        X509 *leaf = X509_STORE_CTX_get0_cert(xs);
        if (leaf && X509_up_ref(leaf))
            t->leaf = leaf;
    }
    return ok;
}

/* The certificate's DNS and IP subjectAltNames, "DNS:a, IP:10.0.0.1". */
static void san_list(X509 *x, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    GENERAL_NAMES *gens = x ? X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL) : NULL;
    for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
        char one[300];
        one[0] = '\0';
        if (g->type == GEN_DNS) {
            const ASN1_IA5STRING *s = g->d.dNSName;
            snprintf(one, sizeof(one), "DNS:%.*s", ASN1_STRING_length(s),
                     (const char *)ASN1_STRING_get0_data(s));
        } else if (g->type == GEN_IPADD) {
            const ASN1_OCTET_STRING *s = g->d.iPAddress;
            char ip[INET6_ADDRSTRLEN] = "?";
            int n = ASN1_STRING_length(s);
            const unsigned char *p = ASN1_STRING_get0_data(s);
            if (n == 4)
                inet_ntop(AF_INET, p, ip, sizeof(ip));
            else if (n == 16)
                inet_ntop(AF_INET6, p, ip, sizeof(ip));
            snprintf(one, sizeof(one), "IP:%s", ip);
        }
        if (one[0] && len + 1 < cap) {
            int n = snprintf(out + len, cap - len, "%s%s", len ? ", " : "", one);
            if (n > 0)
                len += (size_t)n < cap - len ? (size_t)n : cap - len - 1;
        }
    }
    GENERAL_NAMES_free(gens);
}

static void subject_of(X509 *x, char *out, size_t cap)
{
    out[0] = '\0';
    if (x)
        X509_NAME_oneline(X509_get_subject_name(x), out, (int)cap);
    if (!out[0])
        snprintf(out, cap, "(unknown subject)");
}

static int unknown_authority(int v)
{
    return v == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
           v == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT ||
           v == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT ||
           v == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN ||
           v == X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE ||
           v == X509_V_ERR_CERT_SIGNATURE_FAILURE;
}

/* The message for a failed verification of the peer's certificate. */
static void verify_message(weir_tls *t, char *out, size_t cap)
{
    int v = t->verify_err ? t->verify_err : (int)SSL_get_verify_result(t->ssl);
    const char *why = X509_verify_cert_error_string(v);
    const char *ca = t->ctx->ca_file;
    char who[300];
    char subj[256];
    if (t->ctx->server)
        say(who, sizeof(who), "%s", "the client's certificate");
    else
        say(who, sizeof(who), "the certificate of %s", t->host);
    if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH) {
        char names[400];
        san_list(t->leaf, names, sizeof(names));
        if (!names[0])
            say(names, sizeof(names), "%s", "no DNS or IP subjectAltName");
        say(out, cap,
            "%s names %s but not %s: connect by one of those names, or reissue the "
            "certificate with %s in its subjectAltName (or turn hostname verification off)",
            who, names, t->host, t->host);
    } else if (unknown_authority(v)) {
        subject_of(t->verify_cert ? t->verify_cert : t->leaf, subj, sizeof(subj));
        if (ca)
            say(out, cap,
                "%s (%s) is not signed by the configured CA file %s (%s): give the CA file "
                "that issued it, or reissue the certificate from the CA in %s",
                who, subj, ca, why, ca);
        else
            say(out, cap,
                "%s (%s) is not signed by an authority of the system's store (%s): give the "
                "CA file that issued it (ca_file)",
                who, subj, why);
    } else {
        subject_of(t->verify_cert ? t->verify_cert : t->leaf, subj, sizeof(subj));
        say(out, cap, "%s does not verify: %s (at depth %d, %s)", who, why, t->verify_depth, subj);
    }
}

/* ---- calls ---------------------------------------------------------------------------- */
enum op { OP_HANDSHAKE, OP_READ, OP_WRITE, OP_SHUTDOWN };

static const char *op_name(enum op op)
{
    switch (op) {
    case OP_HANDSHAKE:
        return "TLS handshake";
    case OP_READ:
        return "TLS read";
    case OP_WRITE:
        return "TLS write";
    default:
        return "TLS shutdown";
    }
}

/* Set the session's message (under mu) and copy it out. */
static void set_err(weir_tls *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(weir_tls *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof(t->err), fmt, ap);
    va_end(ap);
}

/* What a call that did not succeed means (under mu, right after the call:
 * the error queue is this thread's): 0 "wait for *events and call again",
 * 1 the peer's close_notify, or a negative errno with the session's
 * message set. */
static int failure(weir_tls *t, enum op op, int ret, short *events)
{
    int e = SSL_get_error(t->ssl, ret);
    char q[512];
    switch (e) {
    case SSL_ERROR_WANT_READ:
        ERR_clear_error();
        *events = POLLIN;
        return 0;
    case SSL_ERROR_WANT_WRITE:
        ERR_clear_error();
        *events = POLLOUT;
        return 0;
    case SSL_ERROR_ZERO_RETURN:
        ERR_clear_error();
        return 1; /* close_notify: the caller decides what it means */
    case SSL_ERROR_SYSCALL: {
        int err = t->io_errno;
        ERR_clear_error();
        t->io_errno = 0;
        if (!err) {
            /* The socket reached its end without the peer's close_notify. */
            set_err(t, "%s: the peer closed the connection without a TLS close_notify",
                    op_name(op));
            return -ECONNRESET;
        }
        set_err(t, "%s: the connection was lost (%s)", op_name(op), strerror(err));
        return err == EPIPE ? -EPIPE : err == ENOMEM ? -ENOMEM : -ECONNRESET;
    }
    case SSL_ERROR_SSL:
        break;
    default:
        ERR_clear_error();
        set_err(t, "%s failed (SSL error %d)", op_name(op), e);
        return -EPROTO;
    }
    unsigned long first = ERR_peek_error();
    int reason = ERR_GET_REASON(first);
    ssl_errors(q, sizeof(q));
    if (reason == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        set_err(t, "%s: the peer closed the connection without a TLS close_notify", op_name(op));
        return -ECONNRESET;
    }
    if (t->io_errno) {
        int err = t->io_errno;
        t->io_errno = 0;
        set_err(t, "%s: the connection was lost (%s)", op_name(op), strerror(err));
        return err == EPIPE ? -EPIPE : -ECONNRESET;
    }
    if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED || t->verify_err) {
        char v[ERR_CAP];
        verify_message(t, v, sizeof(v));
        set_err(t, "%s failed: %s", op_name(op), v);
    } else if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
               reason == SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE) {
        if (!t->ctx->server && !t->ctx->client_cert &&
            reason != SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE)
            set_err(t,
                    "%s failed: the server requires a client certificate: give one signed by its "
                    "CA (cert_file and key_file) (%s)",
                    op_name(op), q);
        else if (!t->ctx->server && !t->ctx->client_cert)
            set_err(t,
                    "%s failed: the server refused the handshake; if it requires a client "
                    "certificate, give one signed by its CA (%s)",
                    op_name(op), q);
        else
            set_err(t, "%s failed: the peer refused the handshake (%s)", op_name(op), q);
    } else if (reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
        set_err(t,
                "%s failed: the client presented no certificate, and this server requires one "
                "signed by the CA file %s",
                op_name(op), t->ctx->ca_file ? t->ctx->ca_file : "(none)");
    } else if (reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA ||
               reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE ||
               reason == SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN ||
               reason == SSL_R_TLSV1_ALERT_DECRYPT_ERROR) {
        if (t->ctx->server)
            set_err(t,
                    "%s failed: the client refused this server's certificate (a name or an "
                    "authority it does not accept: the client's message says which) (%s)",
                    op_name(op), q);
        else
            set_err(t,
                    "%s failed: the server refused this client's certificate: it must be signed "
                    "by the CA the server trusts (%s)",
                    op_name(op), q);
    } else if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_HTTP_REQUEST ||
               reason == SSL_R_PACKET_LENGTH_TOO_LONG || reason == SSL_R_RECORD_LENGTH_MISMATCH ||
               reason == SSL_R_UNKNOWN_PROTOCOL) {
        set_err(t, "%s failed: the peer does not speak TLS (or not TLS 1.2 or later) (%s)",
                op_name(op), q);
    } else {
        set_err(t, "%s failed: %s", op_name(op), q);
    }
    return -EPROTO;
}

/*
 * Run one OpenSSL call (fn) until it succeeds or fails for good, waiting
 * for readiness in between. Returns fn's positive result, 0 for
 * close_notify, or a negative errno.
 */
typedef int (*ssl_fn)(weir_tls *t, void *arg);

static int run(weir_tls *t, enum op op, ssl_fn fn, void *arg, int64_t deadline)
{
    for (;;) {
        short events = 0;
        pthread_mutex_lock(&t->mu);
        ERR_clear_error();
        int r = fn(t, arg);
        int f = r > 0 ? 0 : failure(t, op, r, &events);
        pthread_mutex_unlock(&t->mu);
        if (r > 0)
            return r;
        if (f == 1)
            return 0;
        if (f < 0)
            return f;
        int w = weir_io_poll(t->fd, (uint32_t)events, deadline);
        if (w < 0) {
            pthread_mutex_lock(&t->mu);
            if (w == -ETIMEDOUT)
                set_err(t, "%s timed out (waiting for the peer to %s)", op_name(op),
                        events == POLLIN ? "send" : "read");
            else if (w == -ECANCELED)
                set_err(t, "%s cancelled", op_name(op));
            else
                set_err(t, "%s: waiting on the socket failed (%s)", op_name(op), strerror(-w));
            pthread_mutex_unlock(&t->mu);
            return w;
        }
    }
}

static int do_handshake(weir_tls *t, void *arg)
{
    (void)arg;
    return SSL_do_handshake(t->ssl);
}

struct rw {
    void *buf;
    size_t len, done;
};

static int do_read(weir_tls *t, void *arg)
{
    struct rw *a = arg;
    return SSL_read_ex(t->ssl, a->buf, a->len, &a->done); /* 1, or 0 on failure */
}

static int do_write(weir_tls *t, void *arg)
{
    struct rw *a = arg;
    return SSL_write_ex(t->ssl, a->buf, a->len, &a->done); /* 1, or 0 on failure */
}

static int do_shutdown(weir_tls *t, void *arg)
{
    (void)arg;
    /* 0: close_notify sent, the peer's not yet seen - enough (best effort). */
    int r = SSL_shutdown(t->ssl);
    return r >= 0 ? 1 : r;
}

/* ---- sessions ------------------------------------------------------------------------- */
static int session(weir_tls_ctx *ctx, int fd, const char *host, int64_t deadline, weir_tls **out,
                   char *msg, size_t cap)
{
    say(msg, cap, "%s", "");
    if (out)
        *out = NULL;
    if (!ctx || fd < 0 || !out || (!ctx->server && (!host || !*host))) {
        say(msg, cap, "bad argument to weir_tls_%s", ctx && ctx->server ? "accept" : "connect");
        return -EINVAL;
    }
    if (!weir__frame_fiber_caller()) {
        say(msg, cap, "weir_tls_%s must run in a fiber", ctx->server ? "accept" : "connect");
        return -EINVAL;
    }
    pthread_once(&bio_once, bio_method_make);
    if (!bio_method || ssl_index < 0) {
        say(msg, cap, "cannot set up OpenSSL's socket BIO");
        return -ENOMEM;
    }
    weir_tls *t = calloc(1, sizeof(*t));
    if (!t) {
        say(msg, cap, "out of memory");
        return -ENOMEM;
    }
    t->ctx = ctx;
    t->fd = fd;
    pthread_mutex_init(&t->mu, NULL);
    if (host) {
        const char *h = host;
        size_t n = strlen(h);
        /* "[::1]" names the address ::1 */
        if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
            h++;
            n -= 2;
        }
        if (n >= sizeof(t->host)) {
            say(msg, cap, "host name too long: %s", host);
            weir_tls_free(t);
            return -EINVAL;
        }
        memcpy(t->host, h, n);
        t->host[n] = '\0';
    }
    ERR_clear_error();
    t->ssl = SSL_new(ctx->ssl);
    BIO *bio = bio_method ? BIO_new(bio_method) : NULL;
    if (!t->ssl || !bio) {
        BIO_free(bio);
        ERR_clear_error();
        weir_tls_free(t);
        say(msg, cap, "out of memory");
        return -ENOMEM;
    }
    BIO_set_data(bio, t);
    SSL_set_bio(t->ssl, bio, bio); /* the SSL owns the BIO */
    SSL_set_ex_data(t->ssl, ssl_index, t);
    if (ctx->server) {
        SSL_set_accept_state(t->ssl);
    } else {
        SSL_set_connect_state(t->ssl);
        unsigned char addr[16];
        int ip = inet_pton(AF_INET, t->host, addr) == 1 || inet_pton(AF_INET6, t->host, addr) == 1;
        int ok = 1;
        if (ip) {
            if (!ctx->no_verify_hostname)
                ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), t->host) == 1;
        } else {
            ok = SSL_set_tlsext_host_name(t->ssl, t->host) == 1;
            if (ok && !ctx->no_verify_hostname)
                ok = SSL_set1_host(t->ssl, t->host) == 1;
        }
        if (!ok) {
            char e[512];
            ssl_errors(e, sizeof(e));
            say(msg, cap, "cannot check the host name %s: %s", t->host, e);
            weir_tls_free(t);
            return -EINVAL;
        }
    }
    int r = 0;
    if (weir_task_cancelled())
        r = -ECANCELED;
    else if (deadline != WEIR_FOREVER && deadline <= weir_time_now())
        r = -ETIMEDOUT;
    if (r < 0)
        set_err(t, "TLS handshake %s", r == -ETIMEDOUT ? "timed out" : "cancelled");
    else
        r = run(t, OP_HANDSHAKE, do_handshake, NULL, deadline);
    if (r == 0) {
        /* close_notify in place of a handshake */
        set_err(t, "TLS handshake failed: the peer closed the connection");
        r = -ECONNRESET;
    }
    if (r < 0) {
        say(msg, cap, "%s", t->err);
        weir_tls_free(t);
        return r;
    }
    ERR_clear_error();
    *out = t;
    return 0;
}

int weir_tls_connect(weir_tls_ctx *ctx, int fd, const char *host, int64_t deadline, weir_tls **out,
                     char *msg, size_t cap)
{
    if (ctx && ctx->server) {
        say(msg, cap, "weir_tls_connect needs a client context");
        if (out)
            *out = NULL;
        return -EINVAL;
    }
    return session(ctx, fd, host, deadline, out, msg, cap);
}

int weir_tls_accept(weir_tls_ctx *ctx, int fd, int64_t deadline, weir_tls **out, char *msg,
                    size_t cap)
{
    if (ctx && !ctx->server) {
        say(msg, cap, "weir_tls_accept needs a server context");
        if (out)
            *out = NULL;
        return -EINVAL;
    }
    return session(ctx, fd, NULL, deadline, out, msg, cap);
}

ssize_t weir_tls_read(weir_tls *t, void *buf, size_t len, int64_t deadline)
{
    if (!t || (!buf && len))
        return -EINVAL;
    if (!weir__frame_fiber_caller())
        return -EINVAL;
    if (len == 0)
        return 0;
    struct rw a = {.buf = buf, .len = len};
    int r = run(t, OP_READ, do_read, &a, deadline);
    if (r < 0)
        return r;
    if (r == 0)
        return 0; /* close_notify */
    return (ssize_t)a.done;
}

int weir_tls_idle_check(weir_tls *t)
{
    if (!t)
        return -EINVAL;
    /* One peek, never a wait: it reads what the socket holds without
     * blocking (the BIO reads with MSG_DONTWAIT), handles post-handshake
     * messages such as TLS 1.3 session tickets, and says whether
     * application bytes remain. */
    unsigned char b;
    size_t n = 0;
    short events = 0;
    pthread_mutex_lock(&t->mu);
    ERR_clear_error();
    int r = SSL_peek_ex(t->ssl, &b, 1, &n);
    int f = r > 0 ? 0 : failure(t, OP_READ, r, &events);
    pthread_mutex_unlock(&t->mu);
    if (r > 0)
        return -EBADMSG;
    if (f == 1)
        return -ECONNRESET; /* close_notify */
    return f;
}

int weir_tls_write(weir_tls *t, const void *buf, size_t len, int64_t deadline)
{
    if (!t || (!buf && len))
        return -EINVAL;
    if (!weir__frame_fiber_caller())
        return -EINVAL;
    /* Observe cancellation and the deadline even when the socket has room,
     * as weir_frame_write does. */
    if (weir_task_cancelled())
        return -ECANCELED;
    if (deadline != WEIR_FOREVER && deadline <= weir_time_now())
        return -ETIMEDOUT;
    if (len == 0)
        return 0;
    /* Without partial writes, SSL_write_ex returns when all the bytes given
     * are out (it remembers its progress across WANT_WRITE, and is called
     * again with the same bytes). A chunk at a time keeps each hold of the
     * lock short, so a reader is not held up behind a long write. */
    const uint8_t *p = buf;
    while (len > 0) {
        size_t n = len < TLS_WRITE_CHUNK ? len : TLS_WRITE_CHUNK;
        struct rw a = {.buf = (void *)p, .len = n};
        int r = run(t, OP_WRITE, do_write, &a, deadline);
        if (r < 0)
            return r;
        if (r == 0)
            return -EPIPE; /* close_notify cannot end a write; be safe */
        p += n;
        len -= n;
    }
    return 0;
}

static ssize_t tls_source(void *arg, void *buf, size_t len, int64_t deadline)
{
    return weir_tls_read(arg, buf, len, deadline);
}

ssize_t weir_tls_frame_read(weir_tls *t, weir_frame_parser *p, weir_frame *out, int64_t deadline)
{
    if (!t)
        return -EINVAL;
    return weir__frame_read_from(tls_source, t, p, out, deadline);
}

int weir_tls_frame_write(weir_tls *t, const void *frame, size_t len, int64_t deadline)
{
    if (weir__frame_check(frame, len) < 0)
        return -EINVAL;
    return weir_tls_write(t, frame, len, deadline);
}

int weir_tls_shutdown(weir_tls *t, int64_t deadline)
{
    if (!t)
        return -EINVAL;
    if (!weir__frame_fiber_caller())
        return -EINVAL;
    int r = run(t, OP_SHUTDOWN, do_shutdown, NULL, deadline);
    return r < 0 ? r : 0;
}

void weir_tls_free(weir_tls *t)
{
    if (!t)
        return;
    SSL_free(t->ssl); /* and its BIO; the fd stays open */
    X509_free(t->verify_cert);
    X509_free(t->leaf);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

int weir_tls_fd(const weir_tls *t)
{
    return t ? t->fd : -1;
}

const char *weir_tls_last_error(const weir_tls *t)
{
    return t ? t->err : "";
}
