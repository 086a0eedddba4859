/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock.c - TCP sockets for tasks (weir/net.h): resolution, listen, accept,
 * connect, options, graceful close.
 *
 * Resolution. A numeric host is parsed where it stands (inet_pton, or
 * getaddrinfo with AI_NUMERICHOST for a %scope, which touches no file and
 * no network). A name goes to getaddrinfo(3) on the blocking pool, because
 * it may read files and wait for DNS for seconds, which must never happen
 * on a scheduler thread. AI_ADDRCONFIG is not used: on a host whose only
 * interface is loopback it would make "localhost" unresolvable; an address
 * of a family the machine lacks simply fails to connect and the next one
 * is tried.
 *
 * A name's lookup runs in a heap job, because the task that asked may give
 * up (deadline, cancellation) while getaddrinfo still runs and writes into
 * it. The asker and the pool each hold a reference (job->refs). The asker
 * waits on the pool itself (weir_blocking_run_ex) and drops its reference
 * when the wait returns, whatever the result; the pool's reference is
 * dropped by exactly one of lookup_run (the lookup ran, possibly after the
 * asker left) and lookup_discard (the job never ran: refused, cancelled or
 * timed out while queued - at shutdown too - or dropped when the pool is
 * freed). So the job is freed once, by whoever lets go last, and a lookup
 * whose asker has left before it reached a thread is never run.
 *
 * Sockets are created close-on-exec and blocking; the epoll backend makes
 * them non-blocking on first use (weir/io.h), io_uring does not need it.
 * A socket that never reached a weir I/O call is released with close(2);
 * once it has, weir_io_close() (the epoll backend keeps per-fd state).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rt/rt_int.h"
#include "weir/io.h"
#include "weir/net.h"

/* ---- helpers -------------------------------------------------------------------------- */
static int fiber_caller(void)
{
    return weir__task_current() != NULL && !weir__stackless_caller();
}

static int valid_port(int port)
{
    return port >= 0 && port <= 65535;
}

/* getaddrinfo's EAI_* codes as weir's codes (weir/net.h lists them): its
 * own for a name that did not resolve, negative errno values otherwise. */
static int gai_errno(int rc, int sys_errno)
{
    switch (rc) {
    case EAI_NONAME:
        return WEIR_ERESOLVE;
#ifdef EAI_NODATA
    case EAI_NODATA:
#endif
#ifdef EAI_ADDRFAMILY
    case EAI_ADDRFAMILY:
#endif
        return WEIR_ENOADDR;
    case EAI_AGAIN:
        return -EAGAIN;
    case EAI_MEMORY:
        return -ENOMEM;
    case EAI_FAMILY:
        return -EAFNOSUPPORT;
    case EAI_SERVICE:
    case EAI_BADFLAGS:
        return -EINVAL;
    case EAI_SOCKTYPE:
        return -ESOCKTNOSUPPORT;
    case EAI_OVERFLOW:
        return -ENAMETOOLONG;
    case EAI_SYSTEM:
        return sys_errno > 0 ? -sys_errno : -EIO;
    default: /* EAI_FAIL and anything new */
        return -EIO;
    }
}

/* getaddrinfo into out[0..max); a count (>= 1) or a negative errno. Blocks
 * for a name: call it off the scheduler threads. */
static int gai_resolve(const char *host, const char *service, int flags, weir_net_addr *out,
                       int max)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC,
        .ai_socktype = SOCK_STREAM,
        .ai_protocol = IPPROTO_TCP,
        .ai_flags = flags | AI_NUMERICSERV,
    };
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        int err = gai_errno(rc, errno);
        if (!(flags & AI_NUMERICHOST) || rc != EAI_NONAME)
            weir__log(WEIR__LOG_DEBUG, "net.resolve", "%s: %s", host, gai_strerror(rc));
        return err;
    }
    int n = 0;
    for (const struct addrinfo *ai = res; ai && n < max; ai = ai->ai_next) {
        if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
            ai->ai_addrlen > sizeof(out[n].ss))
            continue;
        memset(&out[n], 0, sizeof(out[n]));
        memcpy(&out[n].ss, ai->ai_addr, ai->ai_addrlen);
        out[n].len = ai->ai_addrlen;
        n++;
    }
    freeaddrinfo(res);
    return n > 0 ? n : WEIR_ENOADDR;
}

/* A dotted quad or an IPv6 literal without scope, parsed without libc's
 * resolver machinery: 1, or 0 when host is not one of those. */
static int parse_plain_literal(const char *host, int port, weir_net_addr *a)
{
    memset(a, 0, sizeof(*a));
    struct sockaddr_in *in = (struct sockaddr_in *)&a->ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a->ss;
    if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        a->len = sizeof(*in);
        return 1;
    }
    if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        a->len = sizeof(*in6);
        return 1;
    }
    return 0;
}

/* ---- resolution on the blocking pool -------------------------------------------------- */
/* A lookup shared by the asker and the pool (see the file comment). */
typedef struct resolve_job {
    atomic_int refs; /* the asker's and the pool's */
    int flags, max;
    char service[8];
    weir_net_addr addrs[WEIR_NET_RESOLVE_MAX]; /* read by the asker after a count */
    char host[];                               /* NUL-terminated */
} resolve_job;

static void job_unref(resolve_job *j)
{
    /* acq_rel: every access by the party letting go happens before the
     * free by the last one. */
    if (atomic_fetch_sub_explicit(&j->refs, 1, memory_order_acq_rel) == 1)
        free(j);
}

/* On a pool thread: the job ran. The addresses reach a waiting asker through
 * the op's completion, which follows this return. */
static intptr_t lookup_run(void *arg)
{
    resolve_job *j = arg;
    int r = gai_resolve(j->host, j->service, j->flags, j->addrs, j->max);
    job_unref(j); /* the pool's reference; the asker's keeps addrs alive */
    return r;
}

/* The job will never run: the pool's reference goes. */
static void lookup_discard(void *arg)
{
    job_unref(arg);
}

static int resolve_on_pool(const char *host, const char *service, int flags, weir_net_addr *out,
                           int max, int64_t deadline)
{
    if (!fiber_caller())
        return -EINVAL; /* a loop thread may not block, and only fibers wait */
    if (weir_task_cancelled())
        return -ECANCELED;
    if (deadline != WEIR_FOREVER && deadline <= weir_time_now())
        return -ETIMEDOUT;
    size_t hl = strlen(host);
    resolve_job *j = malloc(sizeof(*j) + hl + 1);
    if (!j)
        return -ENOMEM;
    atomic_init(&j->refs, 2);
    j->flags = flags;
    j->max = max < WEIR_NET_RESOLVE_MAX ? max : WEIR_NET_RESOLVE_MAX;
    memcpy(j->service, service, sizeof(j->service));
    memcpy(j->host, host, hl + 1);

    /* Hands the pool its reference: lookup_run or lookup_discard drops it,
     * even when this returns an error without queueing the job. */
    int64_t r = weir_blocking_run_ex(lookup_run, j, lookup_discard, deadline);
    if (r > 0) /* lookup_run returned a count: it wrote addrs */
        memcpy(out, j->addrs, (size_t)r * sizeof(*out));
    job_unref(j);
    return (int)r;
}

/* Resolve host:port for connect (flags 0) or bind (AI_PASSIVE). */
static int resolve(const char *host, int port, int flags, weir_net_addr *out, int max,
                   int64_t deadline)
{
    if (!host || !*host || !out || max <= 0 || !valid_port(port))
        return -EINVAL;
    if (max > WEIR_NET_RESOLVE_MAX)
        max = WEIR_NET_RESOLVE_MAX;
    /* "[v6]" as in URLs: take what is inside. */
    char name[NI_MAXHOST];
    size_t hl = strlen(host);
    if (host[0] == '[') {
        if (hl < 3 || host[hl - 1] != ']')
            return -EINVAL;
        host++;
        hl -= 2;
    }
    if (hl >= sizeof(name))
        return -ENAMETOOLONG;
    memcpy(name, host, hl);
    name[hl] = '\0';

    if (parse_plain_literal(name, port, &out[0]))
        return 1;
    char service[8];
    snprintf(service, sizeof(service), "%d", port);
    if (strchr(name, '%')) {
        /* fe80::1%eth0: numeric with a scope; getaddrinfo maps the interface
         * name without any lookup. */
        return gai_resolve(name, service, flags | AI_NUMERICHOST, out, max);
    }
    if (!weir_loop_current())
        return gai_resolve(name, service, flags, out, max); /* the caller's own thread */
    return resolve_on_pool(name, service, flags, out, max, deadline);
}

int weir_net_resolve(const char *host, int port, weir_net_addr *out, int max, int64_t deadline)
{
    return resolve(host, port, 0, out, max, deadline);
}

/* ---- addresses ------------------------------------------------------------------------ */
int weir_net_addr_port(const weir_net_addr *a)
{
    if (!a)
        return -EINVAL;
    if (a->ss.ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
    if (a->ss.ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
    return -EAFNOSUPPORT;
}

int weir_net_addr_format(const weir_net_addr *a, char *buf, size_t cap)
{
    if (!a || !buf || cap == 0)
        return -EINVAL;
    buf[0] = '\0';
    int fam = a->ss.ss_family;
    if (fam != AF_INET && fam != AF_INET6)
        return -EAFNOSUPPORT;
    /* NI_NUMERICHOST: formatting only, no reverse lookup. A scope comes
     * out as "%eth0" (or the index when the interface is gone). */
    char host[NI_MAXHOST];
    int rc = getnameinfo((const struct sockaddr *)&a->ss, a->len, host, sizeof(host), NULL, 0,
                         NI_NUMERICHOST);
    if (rc != 0)
        return gai_errno(rc, errno);
    int port = weir_net_addr_port(a);
    int n = fam == AF_INET6 ? snprintf(buf, cap, "[%s]:%d", host, port)
                            : snprintf(buf, cap, "%s:%d", host, port);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n >= cap) {
        buf[0] = '\0';
        return -ENOSPC;
    }
    return n;
}

int weir_net_local_addr(int fd, weir_net_addr *out)
{
    if (!out)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    out->len = sizeof(out->ss);
    if (getsockname(fd, (struct sockaddr *)&out->ss, &out->len) < 0)
        return -errno;
    return 0;
}

int weir_net_peer_addr(int fd, weir_net_addr *out)
{
    if (!out)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    out->len = sizeof(out->ss);
    if (getpeername(fd, (struct sockaddr *)&out->ss, &out->len) < 0)
        return -errno;
    return 0;
}

int weir_net_local_port(int fd)
{
    weir_net_addr a;
    int r = weir_net_local_addr(fd, &a);
    return r < 0 ? r : weir_net_addr_port(&a);
}

/* ---- listen --------------------------------------------------------------------------- */
/* One listening socket on one address; its fd or -errno. */
static int listen_on(const weir_net_addr *a, int backlog, const weir_listen_opts *opts)
{
    int fam = a->ss.ss_family;
    int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
    if (fd < 0)
        return -errno;
    int one = 1;
    int v6only = opts && opts->v6only ? 1 : 0;
    /* SO_REUSEADDR: a restarted server can bind while the previous one's
     * connections sit in TIME_WAIT. IPV6_V6ONLY is set both ways explicitly
     * since its default is a sysctl (net.ipv6.bindv6only). */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        (opts && opts->reuseport &&
         setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) ||
        (fam == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)) < 0) ||
        bind(fd, (const struct sockaddr *)&a->ss, a->len) < 0 || listen(fd, backlog) < 0) {
        int err = errno;
        close(fd); /* never used with weir I/O: a plain close is right */
        return -err;
    }
    return fd;
}

int weir_net_listen(const char *host, int port, const weir_listen_opts *opts)
{
    if (!valid_port(port))
        return -EINVAL;
    int backlog = opts && opts->backlog ? opts->backlog : SOMAXCONN;
    if (backlog < 0)
        return -EINVAL;
    if (!host || !*host) {
        /* Every interface: "::" with IPv4 mapped in, or 0.0.0.0 when this
         * machine has no IPv6 (module not loaded, disabled by sysctl). */
        weir_net_addr any;
        parse_plain_literal("::", port, &any);
        int fd = listen_on(&any, backlog, opts);
        if (fd == -EAFNOSUPPORT || fd == -EADDRNOTAVAIL) {
            parse_plain_literal("0.0.0.0", port, &any);
            fd = listen_on(&any, backlog, opts);
        }
        return fd;
    }
    weir_net_addr addrs[WEIR_NET_RESOLVE_MAX];
    int n = resolve(host, port, AI_PASSIVE, addrs, WEIR_NET_RESOLVE_MAX, WEIR_FOREVER);
    if (n < 0)
        return n;
    int first_err = 0;
    for (int i = 0; i < n; i++) {
        int fd = listen_on(&addrs[i], backlog, opts);
        if (fd >= 0)
            return fd;
        if (!first_err)
            first_err = fd;
    }
    return first_err;
}

/* ---- accept and connect --------------------------------------------------------------- */
int weir_net_accept(int lfd, weir_net_addr *peer, int64_t deadline)
{
    if (!fiber_caller())
        return -EINVAL;
    for (;;) {
        weir_net_addr tmp;
        weir_net_addr *a = peer ? peer : &tmp;
        memset(a, 0, sizeof(*a));
        a->len = sizeof(a->ss);
        int fd = weir_io_accept(lfd, (struct sockaddr *)&a->ss, &a->len, deadline);
        /* Reset by the peer while queued: not the listener's failure, and
         * the next connection may be right behind it. */
        if (fd == -ECONNABORTED)
            continue;
        return fd;
    }
}

int weir_net_connect_addr(const weir_net_addr *addr, int64_t deadline)
{
    if (!addr || addr->len == 0 || addr->len > sizeof(addr->ss))
        return -EINVAL;
    if (!fiber_caller())
        return -EINVAL;
    int fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
    if (fd < 0)
        return -errno;
    int r = weir_io_connect(fd, (const struct sockaddr *)&addr->ss, addr->len, deadline);
    if (r < 0) {
        weir_io_close(fd);
        return r;
    }
    return fd;
}

int weir_net_connect_addrs(const weir_net_addr *addrs, int n, int64_t deadline)
{
    if (!addrs || n <= 0)
        return -EINVAL;
    if (!fiber_caller())
        return -EINVAL;
    int first_err = 0;
    for (int i = 0; i < n; i++) {
        int fd = weir_net_connect_addr(&addrs[i], deadline);
        if (fd >= 0)
            return fd;
        /* The deadline is shared, and a cancelled task stops trying. */
        if (fd == -ETIMEDOUT || fd == -ECANCELED)
            return fd;
        if (!first_err)
            first_err = fd;
    }
    return first_err;
}

int weir_net_connect(const char *host, int port, int64_t deadline)
{
    if (!fiber_caller())
        return -EINVAL;
    if (port == 0)
        return -EINVAL; /* nothing listens on port 0 */
    weir_net_addr addrs[WEIR_NET_RESOLVE_MAX];
    int n = resolve(host, port, 0, addrs, WEIR_NET_RESOLVE_MAX, deadline);
    if (n < 0)
        return n;
    return weir_net_connect_addrs(addrs, n, deadline);
}

/* ---- options -------------------------------------------------------------------------- */
int weir_net_set_nodelay(int fd, int on)
{
    int v = on ? 1 : 0;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)) < 0)
        return -errno;
    return 0;
}

int weir_net_set_keepalive(int fd, int idle_s, int interval_s, int count)
{
    if (idle_s < 0 || interval_s < 0 || count < 0)
        return -EINVAL;
    int on = idle_s > 0;
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) < 0)
        return -errno;
    if (!on)
        return 0;
    if (setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s)) < 0)
        return -errno;
    if (interval_s > 0 &&
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s)) < 0)
        return -errno;
    if (count > 0 && setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count)) < 0)
        return -errno;
    return 0;
}

/* ---- graceful close ------------------------------------------------------------------- */
int weir_net_close_graceful(int fd, int64_t deadline)
{
    if (fd < 0)
        return -EBADF;
    if (!fiber_caller()) {
        close(fd);
        return -EINVAL;
    }
    int r;
    if (shutdown(fd, SHUT_WR) < 0) {
        r = -errno; /* -ENOTCONN: never connected, or already reset */
    } else {
        /* The peer sees EOF; let it finish and close its side. What it
         * still sends is read and dropped, so that our close finds an empty
         * receive buffer and ends with a FIN, not a reset. */
        char buf[2048];
        for (;;) {
            ssize_t n = weir_io_recv(fd, buf, sizeof(buf), 0, deadline);
            if (n > 0)
                continue;
            r = (int)n; /* 0: the peer closed */
            break;
        }
    }
    int c = weir_io_close(fd);
    return r < 0 ? r : c;
}

/* ---- errors --------------------------------------------------------------------------- */
const char *weir_net_strerror(int err)
{
    if (err > 0)
        err = -err;
    switch (err) {
    case -EMSGSIZE:
        return "frame or field larger than allowed";
    case -EBADMSG:
        return "malformed frame";
    case -ECONNRESET:
        return "connection reset, or closed in the middle of a frame";
    default:
        return weir_strerror(err);
    }
}
