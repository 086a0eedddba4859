/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client.c - the client side of the cluster protocol (cluster/client.h).
 *
 * Every exchange is a request and the one answer it waits for: send_msg()
 * encodes and writes, recv_frame() reads one frame and holds it to the kind
 * expected before anything decodes it. A frame that breaks the exchange
 * (wrong kind, malformed, past the limit, the end of the stream) breaks
 * the connection for good: a later answer could not be told from the one a
 * broken call left unread.
 */
#include "cluster/client.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/sha256.h"
#include "cluster/plugins.h"
#include "rt/rt_int.h"
#include "weir/io.h"
#include "weir/net.h"

struct weir__client {
    int fd;
    weir_tls *tls;         /* NULL: plain */
    int broken;            /* a frame or a write broke the exchange: every call is -EPIPE */
    uint32_t peer_version; /* the coordinator's protocol version (its HelloClientAck) */
    weir_frame_parser parser;
    char peer[WEIR_CLUSTER_HOST_MAX + 16]; /* as given */
};

/* msg = "coordinator PEER: " + fmt; breaks c when brk. Returns err. */
static int say(weir__client *c, int err, int brk, char *msg, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static int say(weir__client *c, int err, int brk, char *msg, size_t cap, const char *fmt, ...)
{
    if (brk)
        c->broken = 1;
    if (!cap)
        return err;
    int n = snprintf(msg, cap, "coordinator %s: ", c->peer);
    if (n < 0 || (size_t)n >= cap)
        return err;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, cap - (size_t)n, fmt, ap);
    va_end(ap);
    return err;
}

static int usable(weir__client *c, char *msg, size_t cap)
{
    if (!c->broken)
        return 0;
    return say(c, -EPIPE, 1, msg, cap, "the connection broke on an earlier error");
}

int weir__client_parse_hostport(const char *hostport, char *host, size_t hcap, int *port, char *msg,
                                size_t cap)
{
    if (cap)
        msg[0] = '\0';
    const char *h = hostport, *colon;
    size_t hlen;
    if (!hostport || !*hostport) {
        snprintf(msg, cap, "no coordinator address (HOST:PORT)");
        return -EINVAL;
    }
    if (h[0] == '[') {
        const char *close = strchr(h, ']');
        if (!close || close[1] != ':') {
            snprintf(msg, cap, "\"%s\": an IPv6 address is written [ADDRESS]:PORT", hostport);
            return -EINVAL;
        }
        h++;
        hlen = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(h, ':');
        if (!colon) {
            snprintf(msg, cap, "\"%s\" is not HOST:PORT", hostport);
            return -EINVAL;
        }
        if (memchr(h, ':', (size_t)(colon - h))) {
            snprintf(msg, cap, "\"%s\": an IPv6 address is written [ADDRESS]:PORT", hostport);
            return -EINVAL;
        }
        hlen = (size_t)(colon - h);
    }
    if (hlen == 0 || hlen > WEIR_CLUSTER_HOST_MAX || hlen >= hcap) {
        snprintf(msg, cap, "\"%s\": %s host", hostport, hlen ? "too long a" : "no");
        return -EINVAL;
    }
    const char *p = colon + 1;
    char *end;
    errno = 0;
    long v = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : -1;
    if (v < 1 || v > 65535 || errno || *end) {
        snprintf(msg, cap, "\"%s\": the port must be a number in 1..65535", hostport);
        return -EINVAL;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = (int)v;
    return 0;
}

/* ---- frames ---------------------------------------------------------------------------- */

static int send_msg(weir__client *c, const weir__cl_msg *m, int64_t deadline, char *msg, size_t cap)
{
    const char *name = weir__cl_kind_name(m->kind);
    weir_frame_builder fb;
    char why[512];
    int e = weir__cl_encode(m, &fb, why, sizeof(why));
    const uint8_t *p = NULL;
    size_t len = 0;
    if (e == 0)
        e = weir_frame_builder_finish(&fb, &p, &len);
    if (e < 0) {
        weir_frame_builder_close(&fb);
        /* Nothing was written: the connection is still whole. */
        return say(c, e, 0, msg, cap, "cannot encode %s: %s", name,
                   why[0] ? why : weir_net_strerror(e));
    }
    e = c->tls ? weir_tls_frame_write(c->tls, p, len, deadline)
               : weir_frame_write(c->fd, p, len, deadline);
    weir_frame_builder_close(&fb);
    if (e < 0)
        return say(c, e == -ETIMEDOUT || e == -ECANCELED ? e : -EPIPE, 1, msg, cap,
                   "sending %s: %s", name, weir_net_strerror(e));
    return 0;
}

/* The next frame, which must be of kind want (what: what this client waits
 * for, for the messages). 0 with *f (weir_frame_free it). A deadline or a
 * cancellation breaks the connection (the late answer would be taken for
 * the next request's) unless resumable: the parser keeps what arrived and
 * the next call goes on with the same frame. */
static int recv_frame(weir__client *c, int want, const char *what, int64_t deadline, int resumable,
                      weir_frame *f, char *msg, size_t cap)
{
    *f = (weir_frame){0};
    ssize_t n = c->tls ? weir_tls_frame_read(c->tls, &c->parser, f, deadline)
                       : weir_frame_read(c->fd, &c->parser, f, deadline);
    if (n == -EPROTO && c->tls)
        return say(c, -EPROTO, 1, msg, cap, "TLS: %s, while this client waited for %s",
                   weir_tls_last_error(c->tls), what);
    if (n == 0)
        return say(c, -ECONNRESET, 1, msg, cap,
                   "the connection closed while this client waited for %s", what);
    if (n == -EMSGSIZE)
        return say(c, -EMSGSIZE, 1, msg, cap,
                   "a frame header past the limit of %u bytes, while this client waited for %s",
                   WEIR_CLUSTER_FRAME_MAX, what);
    if (n == -ECONNRESET)
        return say(c, -ECONNRESET, 1, msg, cap,
                   "the connection was reset or closed in the middle of a frame, while this "
                   "client waited for %s",
                   what);
    if (n < 0)
        return say(c, (int)n, !(resumable && (n == -ETIMEDOUT || n == -ECANCELED)), msg, cap,
                   "waiting for %s: %s", what, weir_net_strerror((int)n));
    int kind = weir_frame_kind(f);
    const char *name = weir__cl_kind_name(kind);
    int e = 0;
    if (!name)
        e = say(c, -EBADMSG, 1, msg, cap,
                "sent an unknown message kind 0x%02x while this client waited for %s", kind, what);
    else if (weir__cl_kind_dir(kind) != WEIR__CL_TO_CLIENT)
        e = say(c, -EBADMSG, 1, msg, cap,
                "sent %s, which no coordinator sends a client, while this client waited for %s",
                name, what);
    else if (kind != want)
        e = say(c, -EBADMSG, 1, msg, cap, "sent %s while this client waited for %s", name, what);
    if (e < 0)
        weir_frame_free(f);
    return e;
}

/* Decode f (freed either way) into *m. */
static int decode_frame(weir__client *c, weir_frame *f, weir__cl_msg *m, char *msg, size_t cap)
{
    char why[512];
    int e = weir__cl_decode(f->data, f->len, m, why, sizeof(why));
    int kind = weir_frame_kind(f);
    weir_frame_free(f);
    if (e < 0)
        return say(c, e == -ENOMEM ? e : -EBADMSG, 1, msg, cap, "malformed %s: %s",
                   weir__cl_kind_name(kind), why);
    return 0;
}

static int recv_msg(weir__client *c, int want, const char *what, int64_t deadline, int resumable,
                    weir__cl_msg *m, char *msg, size_t cap)
{
    weir_frame f;
    int e = recv_frame(c, want, what, deadline, resumable, &f, msg, cap);
    return e < 0 ? e : decode_frame(c, &f, m, msg, cap);
}

/* ---- connection ------------------------------------------------------------------------ */

static int handshake(weir__client *c, const char *name, int64_t deadline, char *msg, size_t cap)
{
    weir__cl_msg hello = {.kind = WEIR_CLUSTER_HELLO_CLIENT,
                          .u.hello = {.version = WEIR_CLUSTER_PROTO_VERSION,
                                      .min_compat = WEIR_CLUSTER_PROTO_MIN_COMPAT,
                                      .name = (char *)(name ? name : "")}};
    int e = send_msg(c, &hello, deadline, msg, cap);
    if (e < 0)
        return e;
    weir_frame f;
    if ((e = recv_frame(c, WEIR_CLUSTER_HELLO_CLIENT_ACK, "HelloClientAck", deadline, 0, &f, msg,
                        cap)) < 0)
        return e;
    /* The versions first: the rest of the frame is laid out by a version
     * this client may not speak. */
    uint32_t v, min;
    if (weir__cl_peek_versions(f.data, f.len, &v, &min) < 0) {
        weir_frame_free(&f);
        return say(c, -EBADMSG, 1, msg, cap,
                   "malformed HelloClientAck: cut short before its "
                   "versions");
    }
    char vwhy[512];
    int ve =
        weir__cl_version_check("client", WEIR_CLUSTER_PROTO_VERSION, WEIR_CLUSTER_PROTO_MIN_COMPAT,
                               "coordinator", v, min, vwhy, sizeof(vwhy));
    weir__cl_msg ack = {0};
    char why[512];
    int de = weir__cl_decode(f.data, f.len, &ack, why, sizeof(why));
    weir_frame_free(&f);
    if (ve < 0) {
        /* The coordinator's own refusal says it best, when it is readable. */
        if (de == 0 && ack.u.hello_ack.status == WEIR__CL_REFUSED && ack.u.hello_ack.message[0])
            say(c, ve, 1, msg, cap, "refused the connection: %s", ack.u.hello_ack.message);
        else
            say(c, ve, 1, msg, cap, "%s", vwhy);
        weir__cl_msg_free(&ack);
        return ve;
    }
    if (de < 0)
        return say(c, de == -ENOMEM ? de : -EBADMSG, 1, msg, cap, "malformed HelloClientAck: %s",
                   why);
    if (ack.u.hello_ack.status == WEIR__CL_REFUSED) {
        say(c, -EACCES, 1, msg, cap, "refused the connection: %s",
            ack.u.hello_ack.message[0] ? ack.u.hello_ack.message : "(no reason given)");
        weir__cl_msg_free(&ack);
        return -EACCES;
    }
    weir__cl_msg_free(&ack);
    c->peer_version = v;
    return 0;
}

/* A client not yet connected, named peer in messages; NULL (msg set) when
 * out of memory. */
static weir__client *client_new(const char *peer, char *msg, size_t cap)
{
    weir__client *c = weir__calloc(1, sizeof(*c));
    if (!c) {
        snprintf(msg, cap, "out of memory");
        return NULL;
    }
    c->fd = -1;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    /* The first frame is the ack, which a coordinator keeps small. */
    weir_frame_limits lim = {.max_frame = WEIR_CLUSTER_FRAME_MAX,
                             .max_first = WEIR_CLUSTER_FIRST_FRAME_MAX};
    int e = weir_frame_parser_init(&c->parser, &lim);
    if (e < 0) {
        weir__free(c);
        snprintf(msg, cap, "frame parser: %s", weir_net_strerror(e));
        return NULL;
    }
    return c;
}

int weir__client_open(const char *hostport, const char *name, weir_tls_ctx *tls, int64_t deadline,
                      weir__client **out, char *msg, size_t cap)
{
    *out = NULL;
    if (cap)
        msg[0] = '\0';
    char host[WEIR_CLUSTER_HOST_MAX + 1];
    int port;
    int e = weir__client_parse_hostport(hostport, host, sizeof(host), &port, msg, cap);
    if (e < 0)
        return e;
    weir__client *c = client_new(hostport, msg, cap);
    if (!c)
        return -ENOMEM;
    int fd = weir_net_connect(host, port, deadline);
    if (fd < 0) {
        say(c, fd, 1, msg, cap, "cannot connect: %s", weir_net_strerror(fd));
        weir__client_close(c);
        return fd;
    }
    c->fd = fd;
    weir_net_set_nodelay(fd, 1);
    if (tls) {
        char tmsg[512];
        if ((e = weir_tls_connect(tls, fd, host, deadline, &c->tls, tmsg, sizeof(tmsg))) < 0) {
            say(c, e, 1, msg, cap, "TLS handshake: %s", tmsg);
            weir__client_close(c);
            return e;
        }
    }
    if ((e = handshake(c, name, deadline, msg, cap)) < 0) {
        weir__client_close(c);
        return e;
    }
    *out = c;
    return 0;
}

int weir__client_open_fd(int fd, const char *peer, const char *name, int64_t deadline,
                         weir__client **out, char *msg, size_t cap)
{
    *out = NULL;
    if (cap)
        msg[0] = '\0';
    weir__client *c = client_new(peer, msg, cap);
    if (!c) {
        weir_io_close(fd);
        return -ENOMEM;
    }
    c->fd = fd;
    int e = handshake(c, name, deadline, msg, cap);
    if (e < 0) {
        weir__client_close(c);
        return e;
    }
    *out = c;
    return 0;
}

void weir__client_close(weir__client *c)
{
    if (!c)
        return;
    if (c->tls && !c->broken)
        weir_tls_shutdown(c->tls, weir_time_after_ms(100)); /* the end, not a reset */
    weir_tls_free(c->tls);
    if (c->fd >= 0)
        weir_io_close(c->fd);
    weir_frame_parser_close(&c->parser);
    weir__free(c);
}

const char *weir__client_peer(const weir__client *c)
{
    return c->peer;
}

/* ---- preparing a job ------------------------------------------------------------------- */

/* The checkpoint directory d, absolute, in *out (weir__malloc'd). */
static int abs_dir(const char *d, char **out, char *msg, size_t cap)
{
    *out = NULL;
    size_t n = strlen(d);
    if (n == 0) {
        snprintf(msg, cap, "empty checkpoint directory name");
        return -EINVAL;
    }
    if (n >= PATH_MAX) {
        snprintf(msg, cap, "checkpoint directory: a %zu-byte path", n);
        return -EMSGSIZE;
    }
    char *r = realpath(d, NULL);
    if (r) {
        *out = weir__strdup(r);
        free(r);
        return *out ? 0 : -ENOMEM;
    }
    if (errno != ENOENT) {
        int e = -errno;
        snprintf(msg, cap, "checkpoint directory %s: %s", d, strerror(-e));
        return e;
    }
    /* It does not exist yet (the job creates it): its parent must. */
    char buf[PATH_MAX];
    memcpy(buf, d, n + 1);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    char *slash = strrchr(buf, '/');
    const char *parent = ".", *base = buf;
    if (slash == buf) {
        parent = "/";
        base = buf + 1;
    } else if (slash) {
        *slash = '\0';
        parent = buf;
        base = slash + 1;
    }
    char *rp = realpath(parent, NULL);
    if (!rp) {
        int e = -errno;
        if (d[0] == '/') { /* the workers' filesystem, not this machine's */
            if (slash && slash != buf)
                *slash = '/';
            *out = weir__strdup(buf);
            return *out ? 0 : -ENOMEM;
        }
        snprintf(msg, cap, "checkpoint directory %s: its parent %s: %s", d, parent, strerror(-e));
        return e;
    }
    size_t need = strlen(rp) + 1 + strlen(base) + 1;
    char *p = weir__malloc(need);
    if (p)
        snprintf(p, need, "%s%s%s", rp, strcmp(rp, "/") ? "/" : "", base);
    free(rp);
    *out = p;
    return p ? 0 : -ENOMEM;
}

typedef struct prep {
    const weir__client_submit_opts *o;
    weir__cl_plugin_ref ref;
    uint8_t *bytes;
    size_t len;
    char *dir;
    char *msg;
    size_t cap;
} prep;

static intptr_t prep_files(void *arg)
{
    prep *p = arg;
    int e = weir__plugin_ref_from_file(p->o->plugin, &p->ref, &p->bytes, &p->len, p->msg, p->cap);
    if (e == 0 && p->o->checkpoint_dir)
        e = abs_dir(p->o->checkpoint_dir, &p->dir, p->msg, p->cap);
    return e;
}

void weir__client_job_clear(weir__client_job *j)
{
    if (!j)
        return;
    for (uint32_t i = 0; j->bytes && i < j->submit.plugins.n; i++)
        weir__free((void *)j->bytes[i].p);
    weir__free(j->bytes);
    weir__cl_msg m = {.kind = WEIR_CLUSTER_SUBMIT_JOB, .u.submit = j->submit};
    weir__cl_msg_free(&m);
    memset(j, 0, sizeof(*j));
}

int weir__client_job_prepare(const weir__client_submit_opts *o, weir__client_job *out, char *msg,
                             size_t cap)
{
    memset(out, 0, sizeof(*out));
    if (cap)
        msg[0] = '\0';
    if (!o || !o->plugin || !*o->plugin || o->argc < 0 || (o->argc > 0 && !o->argv)) {
        snprintf(msg, cap, "no job plugin");
        return -EINVAL;
    }
    if ((uint32_t)o->argc > WEIR_CLUSTER_ARGS_MAX) {
        snprintf(msg, cap, "%d job arguments, past the limit of %u", o->argc,
                 WEIR_CLUSTER_ARGS_MAX);
        return -EMSGSIZE;
    }
    for (int i = 0; i < o->argc; i++)
        if (strlen(o->argv[i]) > WEIR_CLUSTER_ARG_MAX) {
            snprintf(msg, cap, "job argument %d is %zu bytes, past the limit of %u", i + 1,
                     strlen(o->argv[i]), WEIR_CLUSTER_ARG_MAX);
            return -EMSGSIZE;
        }
    prep p = {.o = o, .msg = msg, .cap = cap};
    int e = (int)weir__blocking_run_shielded(prep_files, &p);
    if (e < 0 && cap && !msg[0])
        snprintf(msg, cap, "reading %s: %s", o->plugin, strerror(-e));
    if (e == 0 && p.dir && strlen(p.dir) > WEIR_CLUSTER_PATH_MAX) {
        snprintf(msg, cap, "checkpoint directory %s: past the limit of %u bytes", p.dir,
                 WEIR_CLUSTER_PATH_MAX);
        e = -EMSGSIZE;
    }
    weir__client_job *j = out;
    j->submit.parallelism = o->parallelism;
    j->submit.checkpoint_interval_ms = o->checkpoint_interval_ms;
    j->submit.max_restarts = o->max_restarts;
    j->submit.restore = o->restore ? 1 : 0;
    j->submit.idle_timeout_ms = o->idle_timeout_ms;
    j->submit.state_backend = weir__strdup(o->state_backend ? o->state_backend : "");
    j->submit.checkpoint_dir = p.dir ? p.dir : weir__strdup("");
    j->submit.plugins.v = weir__calloc(1, sizeof(weir__cl_plugin_ref));
    j->bytes = weir__calloc(1, sizeof(weir__cl_bytes));
    if (j->submit.plugins.v && j->bytes) {
        j->submit.plugins.v[0] = p.ref;
        j->submit.plugins.n = 1;
        j->bytes[0] = (weir__cl_bytes){p.bytes, (uint32_t)p.len};
    } else {
        weir__plugin_ref_clear(&p.ref);
        weir__free(p.bytes);
    }
    if (o->argc > 0 && (j->submit.args.v = weir__calloc((size_t)o->argc, sizeof(char *)))) {
        j->submit.args.n = (uint32_t)o->argc;
        for (int i = 0; i < o->argc; i++)
            if (!(j->submit.args.v[i] = weir__strdup(o->argv[i])))
                e = e ? e : -ENOMEM;
    }
    if (e == 0 && (!j->submit.checkpoint_dir || !j->submit.state_backend || !j->submit.plugins.n ||
                   (o->argc > 0 && !j->submit.args.v)))
        e = -ENOMEM;
    if (e < 0) {
        if (e == -ENOMEM && cap && !msg[0])
            snprintf(msg, cap, "out of memory");
        weir__client_job_clear(j);
    }
    return e;
}

/* ---- requests -------------------------------------------------------------------------- */

static int refused(weir__client *c, const weir__cl_submit_job_ack *a, char *msg, size_t cap)
{
    const char *why = a->message[0] ? a->message : "(no reason given)";
    if (a->abi.version)
        return say(c, -EACCES, 0, msg, cap,
                   "refused the job: %s (the coordinator's weir: ABI version %u, fingerprint %s, "
                   "target %s, toolchain %s)",
                   why, a->abi.version, a->abi.fingerprint, a->abi.target, a->abi.toolchain);
    return say(c, -EACCES, 0, msg, cap, "refused the job: %s", why);
}

/* plugins[i] of the SubmitJob whose hash is h, or -1. */
static int named(const weir__client_job *j, const uint8_t *h)
{
    for (uint32_t i = 0; i < j->submit.plugins.n; i++)
        if (memcmp(j->submit.plugins.v[i].sha256, h, WEIR_CLUSTER_SHA256_SIZE) == 0)
            return (int)i;
    return -1;
}

int weir__client_submit_job(weir__client *c, const weir__client_job *j, int64_t deadline,
                            uint64_t *job, char *msg, size_t cap)
{
    *job = 0;
    if (cap)
        msg[0] = '\0';
    int e = usable(c, msg, cap);
    if (e < 0)
        return e;
    weir__cl_msg m = {.kind = WEIR_CLUSTER_SUBMIT_JOB, .u.submit = j->submit};
    if ((e = send_msg(c, &m, deadline, msg, cap)) < 0)
        return e;
    weir__cl_msg ack = {0};
    if ((e = recv_msg(c, WEIR_CLUSTER_SUBMIT_JOB_ACK, "SubmitJobAck", deadline, 0, &ack, msg,
                      cap)) < 0)
        return e;
    weir__cl_submit_job_ack *a = &ack.u.submit_ack;
    if (a->status == WEIR__CL_SUBMIT_NEED_PLUGINS) {
        /* Every hash asked for must be one this client named: anything else
         * is a coordinator that lost track, and nothing is sent. */
        for (uint32_t i = 0; i < a->missing.n; i++)
            if (named(j, a->missing.v[i].b) < 0) {
                char hex[WEIR__SHA256_HEX_SIZE];
                weir__sha256_hex(a->missing.v[i].b, hex);
                weir__cl_msg_free(&ack);
                return say(c, -EBADMSG, 1, msg, cap,
                           "asked for plugin %s, which this client's SubmitJob did not name", hex);
            }
        for (uint32_t i = 0; i < a->missing.n && e == 0; i++) {
            int k = named(j, a->missing.v[i].b);
            weir__cl_msg up = {.kind = WEIR_CLUSTER_PLUGIN_UPLOAD,
                               .u.upload = {.bytes = j->bytes[k]}};
            memcpy(up.u.upload.sha256, a->missing.v[i].b, WEIR_CLUSTER_SHA256_SIZE);
            e = send_msg(c, &up, deadline, msg, cap);
        }
        weir__cl_msg_free(&ack);
        if (e < 0)
            return e;
        if ((e = recv_msg(c, WEIR_CLUSTER_SUBMIT_JOB_ACK, "SubmitJobAck after the upload", deadline,
                          0, &ack, msg, cap)) < 0)
            return e;
        if (a->status == WEIR__CL_SUBMIT_NEED_PLUGINS) {
            weir__cl_msg_free(&ack);
            return say(c, -EBADMSG, 1, msg, cap,
                       "asked for plugins again after they were uploaded");
        }
    }
    if (a->status == WEIR__CL_SUBMIT_REFUSED)
        e = refused(c, a, msg, cap);
    else
        *job = a->job;
    weir__cl_msg_free(&ack);
    return e;
}

int weir__client_submit(weir__client *c, const weir__client_submit_opts *o, int64_t deadline,
                        uint64_t *job, char *msg, size_t cap)
{
    weir__client_job j;
    *job = 0;
    int e = weir__client_job_prepare(o, &j, msg, cap);
    if (e < 0)
        return e;
    e = weir__client_submit_job(c, &j, deadline, job, msg, cap);
    weir__client_job_clear(&j);
    return e;
}

int weir__client_wait(weir__client *c, uint64_t job, weir__cl_job_completed *out, int64_t deadline,
                      char *msg, size_t cap)
{
    memset(out, 0, sizeof(*out));
    if (cap)
        msg[0] = '\0';
    int e = usable(c, msg, cap);
    if (e < 0)
        return e;
    char what[64];
    snprintf(what, sizeof(what), "the JobCompleted of job %" PRIu64, job);
    weir__cl_msg m = {0};
    if ((e = recv_msg(c, WEIR_CLUSTER_JOB_COMPLETED, what, deadline, 1, &m, msg, cap)) < 0)
        return e;
    if (m.u.completed.job != job) {
        e = say(c, -EBADMSG, 1, msg, cap,
                "sent the JobCompleted of job %" PRIu64 " while this "
                "client waited for that of job %" PRIu64,
                m.u.completed.job, job);
        weir__cl_msg_free(&m);
        return e;
    }
    *out = m.u.completed;
    return 0;
}

int weir__client_list(weir__client *c, weir__cl_job_list *out, int64_t deadline, char *msg,
                      size_t cap)
{
    memset(out, 0, sizeof(*out));
    if (cap)
        msg[0] = '\0';
    int e = usable(c, msg, cap);
    if (e < 0)
        return e;
    weir__cl_msg req = {.kind = WEIR_CLUSTER_LIST_JOBS};
    if ((e = send_msg(c, &req, deadline, msg, cap)) < 0)
        return e;
    weir__cl_msg m = {0};
    if ((e = recv_msg(c, WEIR_CLUSTER_JOB_LIST, "JobList", deadline, 0, &m, msg, cap)) < 0)
        return e;
    *out = m.u.job_list;
    return 0;
}

int weir__client_cancel(weir__client *c, uint64_t job, weir__cl_cancel_job_ack *out,
                        int64_t deadline, char *msg, size_t cap)
{
    memset(out, 0, sizeof(*out));
    if (cap)
        msg[0] = '\0';
    int e = usable(c, msg, cap);
    if (e < 0)
        return e;
    if (!job) {
        snprintf(msg, cap, "job id 0: job ids start at 1");
        return -EINVAL;
    }
    weir__cl_msg req = {.kind = WEIR_CLUSTER_CANCEL_JOB, .u.cancel_job = {.job = job}};
    if ((e = send_msg(c, &req, deadline, msg, cap)) < 0)
        return e;
    weir__cl_msg m = {0};
    if ((e = recv_msg(c, WEIR_CLUSTER_CANCEL_JOB_ACK, "CancelJobAck", deadline, 0, &m, msg, cap)) <
        0)
        return e;
    if (m.u.cancel_job_ack.job != job) {
        e = say(c, -EBADMSG, 1, msg, cap,
                "answered the cancel of job %" PRIu64 " with a CancelJobAck for job %" PRIu64, job,
                m.u.cancel_job_ack.job);
        weir__cl_msg_free(&m);
        return e;
    }
    *out = m.u.cancel_job_ack;
    return 0;
}

int weir__client_describe(weir__client *c, uint64_t job, weir__cl_job_detail *out, int64_t deadline,
                          char *msg, size_t cap)
{
    memset(out, 0, sizeof(*out));
    if (cap)
        msg[0] = '\0';
    int e = usable(c, msg, cap);
    if (e < 0)
        return e;
    if (!job) {
        snprintf(msg, cap, "job id 0: job ids start at 1");
        return -EINVAL;
    }
    if (c->peer_version < 3)
        return say(c, -EPROTONOSUPPORT, 0, msg, cap,
                   "speaks protocol version %u, which cannot describe a job (3 or later can): "
                   "use its HTTP API, GET /api/v1/jobs/%" PRIu64,
                   c->peer_version, job);
    weir__cl_msg req = {.kind = WEIR_CLUSTER_DESCRIBE_JOB, .u.describe_job = {.job = job}};
    if ((e = send_msg(c, &req, deadline, msg, cap)) < 0)
        return e;
    weir__cl_msg m = {0};
    if ((e = recv_msg(c, WEIR_CLUSTER_JOB_DETAIL, "JobDetail", deadline, 0, &m, msg, cap)) < 0)
        return e;
    if (m.u.job_detail.job != job) {
        e = say(c, -EBADMSG, 1, msg, cap,
                "answered the description of job %" PRIu64 " with one of job %" PRIu64, job,
                m.u.job_detail.job);
        weir__cl_msg_free(&m);
        return e;
    }
    *out = m.u.job_detail;
    return 0;
}

void weir__client_detail_free(weir__cl_job_detail *p)
{
    weir__cl_msg m = {.kind = WEIR_CLUSTER_JOB_DETAIL, .u.job_detail = *p};
    weir__cl_msg_free(&m);
    memset(p, 0, sizeof(*p));
}

void weir__client_completed_free(weir__cl_job_completed *p)
{
    weir__cl_msg m = {.kind = WEIR_CLUSTER_JOB_COMPLETED, .u.completed = *p};
    weir__cl_msg_free(&m);
    memset(p, 0, sizeof(*p));
}

void weir__client_list_free(weir__cl_job_list *p)
{
    weir__cl_msg m = {.kind = WEIR_CLUSTER_JOB_LIST, .u.job_list = *p};
    weir__cl_msg_free(&m);
    memset(p, 0, sizeof(*p));
}

void weir__client_cancel_free(weir__cl_cancel_job_ack *p)
{
    weir__cl_msg m = {.kind = WEIR_CLUSTER_CANCEL_JOB_ACK, .u.cancel_job_ack = *p};
    weir__cl_msg_free(&m);
    memset(p, 0, sizeof(*p));
}
