/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_client.c - the HTTP/1.1 client and its keep-alive connection pools
 * (weir/http.h, "client").
 *
 * One pool per scheme://host:port, created on first use, found through a
 * hash table (seeded per client, grown by doubling), and freed as soon as
 * it holds no connection and no request refers to it. A pool is a FIFO
 * weir_sem of max_conns permits plus a list of idle connections, most
 * recently used first. A request holds one permit from before it looks for
 * a connection until it has put the connection back or closed it, and opens
 * a new connection only when the idle list is empty. So the connections of
 * a pool (idle, in use and being opened) never outnumber its permits: each
 * holder has at most one, and an idle connection only ever comes from a
 * holder that gave its permit back.
 * A returning request puts its connection on the idle list *before* it
 * releases its permit; the semaphore grants the permit straight to its
 * oldest waiter (no barging: a newcomer's try_acquire fails while anyone
 * waits), which then finds that connection first in the list. That is the
 * FIFO hand-off the pool promises, across scheduler threads.
 *
 * The client's lock (a pthread mutex) guards the pool list, the idle lists
 * and the counters. It is held for a few list operations only, never across
 * a suspension or a call into a transport, so a plain mutex is right; all
 * waiting is done on the semaphore. A connection in use belongs to one
 * request, which may move between threads with its fiber; handing it over
 * through the idle list under the lock orders its state for the next user.
 *
 * A request's bytes are built before it takes a permit (a bad header costs
 * no connection). The head and a body buffer up to 64 KiB go out in one
 * write; a larger buffer is written after the head from the caller's
 * memory; a streamed body is framed into chunks in the connection's read
 * buffer, which is idle while the request is being sent. The response is
 * parsed by the connection's weir_http_parser, reused from one response to
 * the next; its limits carry the client's head caps and max_response as
 * max_body, so an announced Content-Length over the cap fails at the head.
 *
 * A request refers to its pool (users, under the lock) from the lookup
 * until it has given its permit back, so every waiter on the semaphore and
 * every holder of a permit keeps the pool alive: a pool with no users and
 * no idle connection has all its permits free and nobody queued, and only
 * then is it unlinked and freed. Expired idle connections are closed by the
 * pool's own requests and, at most once per idle_ms/2, by a sweep over
 * every pool run by any request, which also frees the pools left empty.
 *
 * An idle connection is probed before it is reused (the transport's
 * idle_check; for TCP a non-blocking MSG_PEEK): one the server has closed is
 * closed unused (stat `stale`), and one holding bytes nobody asked for (a
 * late "body" after a HEAD or a 204, a 408 sent before closing, padding) is
 * closed unused too (stat `unasked`): those bytes must never be read as the
 * response to the next request.
 *
 * Staleness is judged the way browsers and Go's net/http do it: on a pooled
 * connection, EOF, ECONNRESET or EPIPE before the first byte of the response
 * means the server had closed the connection while it was idle (after the
 * probe, or on a transport without one), so the request most likely never
 * reached it; a replayable request is then sent once more on a new
 * connection. A request that got any response byte, ran on a fresh
 * connection, or cannot be replayed reports the error. When sending the
 * body fails that way the response is still read: a server may answer (413)
 * and close before reading the whole body.
 */
#include <arpa/inet.h>
#include <net/if.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/list.h"
#include "rt/rt_int.h"
#include "weir/http.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/sync.h"

#define RBUF_SIZE     (16u << 10)  /* a connection's read buffer (and chunk framing room) */
#define INLINE_BODY   (64u << 10)  /* a body buffer up to this size is sent with the head */
#define BODY_PREALLOC (256u << 10) /* most a Content-Length makes us allocate up front */
#define CHUNK_HDR     10u          /* room before chunk data: hex size + CRLF */
#define HOST_MAX      255u
#define MAX_INTERIM   5u  /* interim 1xx responses before the final one (Go's bound) */
#define POOLS_MIN     16u /* initial buckets of the pool table (a power of two) */

static int fiber_caller(void)
{
    return weir__task_current() != NULL && !weir__stackless_caller();
}

/* ---- the plain TCP transport ---------------------------------------------------------- */
typedef struct tcp_conn {
    int fd;
} tcp_conn;

static int tcp_connect(void *ctx, const char *host, int port, int64_t deadline, void **out)
{
    (void)ctx;
    tcp_conn *t = malloc(sizeof(*t));
    if (!t)
        return -ENOMEM;
    int fd = weir_net_connect(host, port, deadline);
    if (fd < 0) {
        free(t);
        return fd;
    }
    /* Request/response: a small request must leave at once, not wait for
     * the ACK of the previous segment (Nagle). */
    weir_net_set_nodelay(fd, 1);
    t->fd = fd;
    *out = t;
    return 0;
}

static ssize_t tcp_read(void *conn, void *buf, size_t len, int64_t deadline)
{
    return weir_io_recv(((tcp_conn *)conn)->fd, buf, len, 0, deadline);
}

static ssize_t tcp_write(void *conn, const void *buf, size_t len, int64_t deadline)
{
    /* MSG_NOSIGNAL: a server that went away is -EPIPE, not SIGPIPE. */
    return weir_io_send(((tcp_conn *)conn)->fd, buf, len, MSG_NOSIGNAL, deadline);
}

/* A non-blocking peek: nothing to read and not closed is the only state in
 * which an idle connection may carry a request. */
static int tcp_idle_check(void *conn)
{
    char b;
    ssize_t n;
    do
        n = recv(((tcp_conn *)conn)->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n > 0)
        return -EBADMSG; /* bytes nobody asked for */
    if (n == 0)
        return -ECONNRESET; /* the server closed it */
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
}

static void tcp_close(void *conn)
{
    tcp_conn *t = conn;
    /* weir_io_close keeps the epoll backend's per-fd state right; outside a
     * fiber (weir_http_client_free from a plain thread) only close(2) is
     * possible. */
    if (!fiber_caller() || weir_io_close(t->fd) == -EINVAL)
        close(t->fd);
    free(t);
}

const weir_http_transport weir_http_tcp_transport = {
    .connect = tcp_connect,
    .read = tcp_read,
    .write = tcp_write,
    .close = tcp_close,
    .ctx = NULL,
    .idle_check = tcp_idle_check,
};

/* ---- client, pools, connections ------------------------------------------------------- */
typedef struct pool pool;

typedef struct conn {
    weir__list node;               /* its pool's idle list, or a list of ones to close */
    const weir_http_transport *tr; /* its pool's: a connection never refers to its pool */
    void *tc;                      /* the transport's connection */
    int64_t idle_since;
    weir_http_parser parser; /* reused from one response to the next */
    uint8_t *rbuf;           /* RBUF_SIZE bytes */
} conn;

struct pool {
    pool *next; /* hash chain */
    weir_sem *permits;
    const weir_http_transport *tr;
    weir__list idle; /* of conn.node, most recently used first */
    long users;      /* requests referring to the pool (under c->mu) */
    uint32_t hash;
    int https, port;
    char host[]; /* lower case, without [brackets] */
};

struct weir_http_client {
    pthread_mutex_t mu; /* pools, idle lists, st; never held across a suspension */
    pool **buckets;     /* the pools, by hash; nbuckets is a power of two */
    size_t nbuckets;
    uint32_t seed;
    int64_t next_sweep; /* no sweep of every pool before this time */
    int max_conns, fast_fail;
    size_t max_response;
    weir_http_limits limits; /* head caps, max_body = max_response */
    int64_t idle_ns;
    char *token;      /* bearer token, or NULL */
    char *user_agent; /* or NULL */
    const weir_http_transport *https;
    weir_http_client_stats st;
};

weir_http_client *weir_http_client_new(const weir_http_client_opts *opts)
{
    weir_http_client_opts o = {0};
    if (opts)
        o = *opts;
    if (o.max_conns < 0 || o.idle_ms < 0 || (o.idle_ms > INT64_MAX / WEIR_MSEC)) {
        errno = EINVAL;
        return NULL;
    }
    weir_http_client *c = calloc(1, sizeof(*c));
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    c->max_conns = o.max_conns ? o.max_conns : WEIR_HTTP_CLIENT_MAX_CONNS;
    c->fast_fail = o.fast_fail != 0;
    c->max_response = o.max_response ? o.max_response : WEIR_HTTP_CLIENT_MAX_RESPONSE;
    c->limits = o.limits;
    c->limits.max_body = c->max_response;
    c->idle_ns = (o.idle_ms ? o.idle_ms : WEIR_HTTP_CLIENT_IDLE_MS) * WEIR_MSEC;
    c->https = o.https;
    /* Validate the limits once, here, rather than at every connection. */
    weir_http_parser probe;
    if (weir_http_parser_init(&probe, WEIR_HTTP_RESPONSE, &c->limits) < 0) {
        free(c);
        errno = EINVAL;
        return NULL;
    }
    weir_http_parser_close(&probe);
    /* Only the token given: the environment is not read, so a client that
     * calls third parties never hands them its own service's credential. */
    const char *tok = o.bearer_token;
    if (tok && *tok) {
        /* Visible ASCII only: a space, CR or LF would break the header
         * line (RFC 6750's b64token is narrower still). */
        for (const char *t = tok; *t; t++) {
            if ((unsigned char)*t <= 0x20 || (unsigned char)*t >= 0x7f) {
                free(c);
                errno = EINVAL;
                return NULL;
            }
        }
    }
    const char *ua = o.user_agent ? o.user_agent : "weir/0.1";
    /* A field value: no control character but tab (CR or LF would make
     * every request fail, or inject a line). */
    for (const char *t = ua; *t; t++) {
        unsigned char ch = (unsigned char)*t;
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
            free(c);
            errno = EINVAL;
            return NULL;
        }
    }
    if (tok && *tok && !(c->token = strdup(tok)))
        goto nomem;
    if (*ua && !(c->user_agent = strdup(ua)))
        goto nomem;
    c->nbuckets = POOLS_MIN;
    if (!(c->buckets = calloc(c->nbuckets, sizeof(*c->buckets))))
        goto nomem;
    /* Seeded so that hosts chosen by someone else cannot be picked to share
     * one chain; not a secret, only unpredictable enough. */
    c->seed = (uint32_t)((uintptr_t)c >> 4) ^ (uint32_t)weir_time_now() ^
              (uint32_t)((uint64_t)weir_time_now() >> 32) ^ (uint32_t)getpid();
    if (pthread_mutex_init(&c->mu, NULL) != 0)
        goto nomem;
    return c;
nomem:
    free(c->buckets);
    free(c->token);
    free(c->user_agent);
    free(c);
    errno = ENOMEM;
    return NULL;
}

/* Close k; *count (a counter of c->st, or NULL) is bumped under the lock.
 * It must not refer to its pool: a sweep closes the expired connections of
 * pools it does not hold, and the last user of such a pool may free it. */
static void conn_destroy(weir_http_client *c, conn *k, uint64_t *count)
{
    k->tr->close(k->tc);
    weir_http_parser_close(&k->parser);
    free(k->rbuf);
    free(k);
    pthread_mutex_lock(&c->mu);
    c->st.open_now--;
    if (count)
        (*count)++;
    pthread_mutex_unlock(&c->mu);
}

static void pools_free(pool *gone)
{
    for (pool *next; gone; gone = next) {
        next = gone->next;
        weir_sem_free(gone->permits);
        free(gone);
    }
}

void weir_http_client_free(weir_http_client *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nbuckets; i++) {
        for (pool *p = c->buckets[i]; p; p = p->next) {
            weir__list *n;
            while ((n = weir__list_pop(&p->idle)))
                conn_destroy(c, weir__container_of(n, conn, node), NULL);
        }
        pools_free(c->buckets[i]);
    }
    free(c->buckets);
    pthread_mutex_destroy(&c->mu);
    free(c->token);
    free(c->user_agent);
    free(c);
}

int weir_http_client_stats_get(weir_http_client *c, weir_http_client_stats *st)
{
    if (!c || !st)
        return -EINVAL;
    pthread_mutex_lock(&c->mu);
    *st = c->st;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* Under c->mu: move the idle connections of p older than the idle timeout
 * onto *dead (the oldest are at the tail). */
static void take_expired(weir_http_client *c, pool *p, int64_t now, weir__list *dead)
{
    weir__list *n;
    while ((n = weir__list_last(&p->idle)) &&
           now - weir__container_of(n, conn, node)->idle_since > c->idle_ns) {
        weir__list_remove(n);
        c->st.idle_now--;
        c->st.expired++;
        weir__list_push_back(dead, n);
    }
}

static void close_all(weir_http_client *c, weir__list *dead)
{
    weir__list *n;
    while ((n = weir__list_pop(dead)))
        conn_destroy(c, weir__container_of(n, conn, node), NULL);
}

static uint32_t pool_hash(uint32_t seed, int https, int port, const char *host)
{
    uint32_t h = 2166136261u ^ seed; /* FNV-1a */
    for (const unsigned char *s = (const unsigned char *)host; *s; s++)
        h = (h ^ *s) * 16777619u;
    h = (h ^ (uint32_t)port) * 16777619u;
    h = (h ^ (uint32_t)https) * 16777619u;
    return h ^ (h >> 15);
}

/* Under c->mu: twice the buckets. Out of memory, the chains just grow. */
static void pools_grow(weir_http_client *c)
{
    size_t nb = c->nbuckets * 2;
    pool **b = calloc(nb, sizeof(*b));
    if (!b)
        return;
    for (size_t i = 0; i < c->nbuckets; i++) {
        for (pool *p = c->buckets[i], *next; p; p = next) {
            next = p->next;
            p->next = b[p->hash & (nb - 1)];
            b[p->hash & (nb - 1)] = p;
        }
    }
    free(c->buckets);
    c->buckets = b;
    c->nbuckets = nb;
}

/* Under c->mu, at most once per idle_ms/2: the expired idle connections of
 * every pool onto *dead, and every pool left with no connection and no user
 * (so no permit held and no waiter) unlinked onto *gone. The caller closes
 * *dead, then frees *gone, after unlocking. */
static void sweep(weir_http_client *c, int64_t now, weir__list *dead, pool **gone)
{
    if (now < c->next_sweep)
        return;
    c->next_sweep = now + c->idle_ns / 2;
    for (size_t i = 0; i < c->nbuckets; i++) {
        pool **pp = &c->buckets[i];
        while (*pp) {
            pool *p = *pp;
            take_expired(c, p, now, dead);
            if (p->users == 0 && weir__list_empty(&p->idle)) {
                *pp = p->next;
                c->st.pools_now--;
                p->next = *gone;
                *gone = p;
            } else {
                pp = &p->next;
            }
        }
    }
}

/* The pool of scheme://host:port, made on first use, with a reference for
 * the caller (give it back with pool_put); NULL when out of memory. */
static pool *pool_get(weir_http_client *c, int https, const char *host, int port,
                      const weir_http_transport *tr)
{
    weir__list dead;
    weir__list_init(&dead);
    pool *gone = NULL;
    int64_t now = weir_time_now();
    uint32_t h = pool_hash(c->seed, https, port, host);
    pthread_mutex_lock(&c->mu);
    sweep(c, now, &dead, &gone);
    pool *p = c->buckets[h & (c->nbuckets - 1)];
    while (p &&
           !(p->hash == h && p->https == https && p->port == port && strcmp(p->host, host) == 0))
        p = p->next;
    if (!p) {
        size_t hl = strlen(host);
        p = calloc(1, sizeof(*p) + hl + 1);
        if (p && !(p->permits = weir_sem_new(c->max_conns))) {
            free(p);
            p = NULL;
        }
        if (p) {
            weir__list_init(&p->idle);
            p->tr = tr;
            p->hash = h;
            p->https = https;
            p->port = port;
            memcpy(p->host, host, hl + 1);
            p->next = c->buckets[h & (c->nbuckets - 1)];
            c->buckets[h & (c->nbuckets - 1)] = p;
            if (++c->st.pools_now > c->nbuckets)
                pools_grow(c);
        }
    }
    if (p)
        p->users++;
    pthread_mutex_unlock(&c->mu);
    close_all(c, &dead);
    pools_free(gone);
    return p;
}

/* Give back the reference of pool_get (after the permit, if one was taken):
 * the last user of a pool without idle connections frees it. */
static void pool_put(weir_http_client *c, pool *p)
{
    int free_it = 0;
    pthread_mutex_lock(&c->mu);
    if (--p->users == 0 && weir__list_empty(&p->idle)) {
        pool **pp = &c->buckets[p->hash & (c->nbuckets - 1)];
        while (*pp != p)
            pp = &(*pp)->next;
        *pp = p->next;
        c->st.pools_now--;
        free_it = 1;
    }
    pthread_mutex_unlock(&c->mu);
    if (free_it) {
        p->next = NULL;
        pools_free(p);
    }
}

/* The most recently used idle connection of p that passes the transport's
 * idle check, or NULL. Expired ones, and ones the check refuses (closed by
 * the server, or holding bytes nobody asked for), are closed on the way. */
static conn *idle_take(weir_http_client *c, pool *p)
{
    for (;;) {
        weir__list dead, *n;
        weir__list_init(&dead);
        conn *k = NULL;
        pthread_mutex_lock(&c->mu);
        take_expired(c, p, weir_time_now(), &dead);
        if ((n = weir__list_pop(&p->idle))) {
            k = weir__container_of(n, conn, node);
            c->st.idle_now--;
        }
        pthread_mutex_unlock(&c->mu);
        close_all(c, &dead);
        if (!k)
            return NULL;
        int e = p->tr->idle_check ? p->tr->idle_check(k->tc) : 0;
        if (e == 0) {
            pthread_mutex_lock(&c->mu);
            c->st.reused++;
            pthread_mutex_unlock(&c->mu);
            return k;
        }
        weir__log(WEIR__LOG_DEBUG, "net.http_client", "%s:%d: idle connection %s; closed", p->host,
                  p->port,
                  e == -EBADMSG ? "holds bytes nobody asked for" : "was closed by the server");
        conn_destroy(c, k, e == -EBADMSG ? &c->st.unasked : &c->st.stale);
    }
}

static void idle_put(weir_http_client *c, pool *p, conn *k)
{
    weir__list dead;
    weir__list_init(&dead);
    int64_t now = weir_time_now();
    k->idle_since = now;
    pthread_mutex_lock(&c->mu);
    take_expired(c, p, now, &dead);
    weir__list_push_front(&p->idle, &k->node);
    c->st.idle_now++;
    pthread_mutex_unlock(&c->mu);
    close_all(c, &dead);
}

static int conn_open(weir_http_client *c, pool *p, int64_t deadline, conn **out, char *msg,
                     size_t cap)
{
    conn *k = calloc(1, sizeof(*k));
    if (!k)
        return -ENOMEM;
    k->tr = p->tr;
    k->rbuf = malloc(RBUF_SIZE);
    int r = k->rbuf ? weir_http_parser_init(&k->parser, WEIR_HTTP_RESPONSE, &c->limits) : -ENOMEM;
    if (r == 0)
        r = p->tr->connect_msg
                ? p->tr->connect_msg(p->tr->ctx, p->host, p->port, deadline, &k->tc, msg, cap)
                : p->tr->connect(p->tr->ctx, p->host, p->port, deadline, &k->tc);
    if (r < 0) {
        weir_http_parser_close(&k->parser);
        free(k->rbuf);
        free(k);
        return r;
    }
    pthread_mutex_lock(&c->mu);
    c->st.opened++;
    c->st.open_now++;
    pthread_mutex_unlock(&c->mu);
    *out = k;
    return 0;
}

/* ---- URLs ----------------------------------------------------------------------------- */
typedef struct url {
    int https, port;
    char host[HOST_MAX + 1];          /* for the transport: lower case, no brackets */
    char authority[HOST_MAX + 3 + 6]; /* for Host: "[v6]" or name, ":port" unless default */
    const char *path;                 /* path and query, up to '#' or the end */
    size_t path_len;
} url;

static int is_alpha(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static int is_digit(unsigned char ch)
{
    return ch >= '0' && ch <= '9';
}

static char lower(char ch)
{
    return ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
}

/* http://host[:port][/path][?query][#fragment]; 0 or -EINVAL /
 * -EPROTONOSUPPORT with *why set. */
static int parse_url(const char *s, url *u, const char **why)
{
    memset(u, 0, sizeof(*u));
    if (!s) {
        *why = "no URL";
        return -EINVAL;
    }
    /* scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) "://" */
    size_t i = 0;
    if (!is_alpha((unsigned char)s[0])) {
        *why = "URL without a scheme (http://...)";
        return -EINVAL;
    }
    while (is_alpha((unsigned char)s[i]) || is_digit((unsigned char)s[i]) || s[i] == '+' ||
           s[i] == '-' || s[i] == '.')
        i++;
    if (strncmp(s + i, "://", 3) != 0) {
        *why = "URL without a scheme (http://...)";
        return -EINVAL;
    }
    if (i == 4 && strncasecmp(s, "http", 4) == 0) {
        u->https = 0;
    } else if (i == 5 && strncasecmp(s, "https", 5) == 0) {
        u->https = 1;
    } else {
        *why = "URL scheme is neither http nor https";
        return -EPROTONOSUPPORT;
    }
    const char *a = s + i + 3;
    size_t alen = strcspn(a, "/?#");
    if (memchr(a, '@', alen)) {
        *why = "URL with a userinfo part (user@host) is refused";
        return -EINVAL;
    }
    const char *port = NULL;
    size_t hl = 0, plen = 0;
    if (alen > 0 && a[0] == '[') {
        const char *close = memchr(a, ']', alen);
        if (!close) {
            *why = "URL with an unterminated [IPv6] host";
            return -EINVAL;
        }
        /* [v6] or [v6%25zone] (RFC 6874) */
        const char *lit = a + 1;
        size_t ll = (size_t)(close - lit);
        char addr[INET6_ADDRSTRLEN + 1], zone[IF_NAMESIZE + 1] = "";
        const char *pct = memchr(lit, '%', ll);
        size_t al = pct ? (size_t)(pct - lit) : ll;
        if (pct) {
            size_t zl = ll - al;
            if (zl < 4 || strncmp(pct, "%25", 3) != 0 || zl - 3 > IF_NAMESIZE) {
                *why = "URL with a bad IPv6 zone (use %25)";
                return -EINVAL;
            }
            memcpy(zone, pct + 3, zl - 3);
            zone[zl - 3] = '\0';
            for (const char *z = zone; *z; z++) {
                if (!is_alpha((unsigned char)*z) && !is_digit((unsigned char)*z) && *z != '.' &&
                    *z != '-' && *z != '_') {
                    *why = "URL with a bad IPv6 zone (use %25)";
                    return -EINVAL;
                }
            }
        }
        struct in6_addr tmp;
        if (al == 0 || al >= sizeof(addr)) {
            *why = "URL with an invalid IPv6 address";
            return -EINVAL;
        }
        memcpy(addr, lit, al);
        addr[al] = '\0';
        if (inet_pton(AF_INET6, addr, &tmp) != 1) {
            *why = "URL with an invalid IPv6 address";
            return -EINVAL;
        }
        for (char *x = addr; *x; x++)
            *x = lower(*x);
        snprintf(u->host, sizeof(u->host), "%s%s%s", addr, *zone ? "%" : "", zone);
        hl = (size_t)(close - a) + 1;
        if (hl < alen) {
            if (a[hl] != ':') {
                *why = "URL with junk after the [IPv6] host";
                return -EINVAL;
            }
            port = a + hl + 1;
            plen = alen - hl - 1;
        }
        /* Host: the bracketed form, zone dropped (it means nothing to the
         * server, RFC 6874 section 4). */
        snprintf(u->authority, sizeof(u->authority), "[%s]", addr);
    } else {
        const char *colon = memchr(a, ':', alen);
        hl = colon ? (size_t)(colon - a) : alen;
        if (colon) {
            port = colon + 1;
            plen = alen - hl - 1;
        }
        if (hl == 0) {
            *why = "URL without a host";
            return -EINVAL;
        }
        if (hl > HOST_MAX) {
            *why = "URL host longer than 255 bytes";
            return -EINVAL;
        }
        for (size_t k = 0; k < hl; k++) {
            unsigned char ch = (unsigned char)a[k];
            if (!is_alpha(ch) && !is_digit(ch) && ch != '-' && ch != '.' && ch != '_') {
                *why = "URL host with a character other than letters, digits, '-', '.', '_'";
                return -EINVAL;
            }
            u->host[k] = lower((char)ch);
        }
        u->host[hl] = '\0';
        memcpy(u->authority, u->host, hl + 1);
    }
    int dflt = u->https ? 443 : 80;
    u->port = dflt;
    if (port && plen > 0) {
        long v = 0;
        for (size_t k = 0; k < plen; k++) {
            if (!is_digit((unsigned char)port[k]) || k >= 5) {
                *why = "URL with a bad port";
                return -EINVAL;
            }
            v = v * 10 + (port[k] - '0');
        }
        if (v < 1 || v > 65535) {
            *why = "URL port outside 1..65535";
            return -EINVAL;
        }
        u->port = (int)v;
    }
    if (u->port != dflt) {
        size_t n = strlen(u->authority);
        snprintf(u->authority + n, sizeof(u->authority) - n, ":%d", u->port);
    }
    u->path = a + alen;
    u->path_len = strcspn(u->path, "#");
    for (size_t k = 0; k < u->path_len; k++) {
        unsigned char ch = (unsigned char)u->path[k];
        if (ch <= 0x20 || ch >= 0x7f) {
            *why = "URL with a space, control character or non-ASCII byte (percent-encode it)";
            return -EINVAL;
        }
    }
    return 0;
}

/* ---- requests ------------------------------------------------------------------------- */
static int str_ieq(weir_http_str s, const char *lit)
{
    size_t n = strlen(lit);
    return s.len == n && strncasecmp(s.p, lit, n) == 0;
}

/* Whether the comma list `v` holds the token `tok` (case-insensitive). */
static int list_has(weir_http_str v, const char *tok)
{
    size_t n = strlen(tok), i = 0;
    while (i < v.len) {
        while (i < v.len && (v.p[i] == ' ' || v.p[i] == '\t' || v.p[i] == ','))
            i++;
        size_t st = i;
        while (i < v.len && v.p[i] != ',')
            i++;
        size_t e = i;
        while (e > st && (v.p[e - 1] == ' ' || v.p[e - 1] == '\t'))
            e--;
        if (e - st == n && strncasecmp(v.p + st, tok, n) == 0)
            return 1;
    }
    return 0;
}

static int idempotent(const char *m)
{
    static const char *const ok[] = {"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (strcmp(m, ok[i]) == 0)
            return 1;
    return 0;
}

/* What one request needs besides its bytes. */
typedef struct plan {
    const char *method;
    int head;               /* HEAD: the response has no body */
    int close;              /* the caller asked for Connection: close */
    int replayable;         /* may be sent again after a stale connection */
    const void *body_after; /* a body buffer written after the head, or NULL */
    size_t body_after_len;
} plan;

/* The request head (and a small body) into b. 0 or -EINVAL with *why. */
static int build_request(weir_http_client *c, const weir_http_client_req *req, const url *u,
                         plan *pl, weir_http_buf *b, const char **why)
{
    memset(pl, 0, sizeof(*pl));
    pl->method = req->method ? req->method : "GET";
    pl->head = strcmp(pl->method, "HEAD") == 0;
    if ((req->body && req->body_fn) || (!req->body && req->body_len)) {
        *why = "a request has a body buffer or a body function, not both";
        return -EINVAL;
    }
    if (req->nheaders && !req->headers) {
        *why = "nheaders without headers";
        return -EINVAL;
    }
    int has_host = 0, has_auth = 0, has_ua = 0, idem_key = 0;
    for (size_t i = 0; i < req->nheaders; i++) {
        const weir_http_header *h = &req->headers[i];
        if (str_ieq(h->name, "content-length") || str_ieq(h->name, "transfer-encoding")) {
            *why = "Content-Length and Transfer-Encoding are set by the client";
            return -EINVAL;
        }
        has_host |= str_ieq(h->name, "host");
        has_auth |= str_ieq(h->name, "authorization");
        has_ua |= str_ieq(h->name, "user-agent");
        idem_key |= str_ieq(h->name, "idempotency-key");
        if (str_ieq(h->name, "connection") && list_has(h->value, "close"))
            pl->close = 1;
    }
    pl->replayable = !req->body_fn && (idempotent(pl->method) || idem_key);

    /* The target: path and query of the URL, "/" when it has none. */
    char small[512], *target = small;
    size_t tl = u->path_len + 1;
    if (tl + 1 > sizeof(small) && !(target = malloc(tl + 1)))
        return -ENOMEM;
    size_t n = 0;
    if (u->path_len == 0 || u->path[0] != '/')
        target[n++] = '/';
    memcpy(target + n, u->path, u->path_len);
    target[n + u->path_len] = '\0';
    weir_http_put_request_line(b, pl->method, target, 1);
    if (target != small)
        free(target);
    if (b->err) {
        *why = "method is not a token";
        return b->err;
    }
    if (!has_host)
        weir_http_put_header(b, "Host", u->authority);
    if (!has_ua && c->user_agent)
        weir_http_put_header(b, "User-Agent", c->user_agent);
    if (b->err) {
        *why = "invalid Host or User-Agent";
        return b->err;
    }
    if (!has_auth && c->token) {
        size_t tkl = strlen(c->token);
        char *v = malloc(tkl + 8);
        if (!v)
            return -ENOMEM;
        memcpy(v, "Bearer ", 7);
        memcpy(v + 7, c->token, tkl + 1);
        weir_http_put_header(b, "Authorization", v);
        free(v);
        if (b->err) {
            *why = "the bearer token cannot be sent in a header field";
            return b->err;
        }
    }
    for (size_t i = 0; i < req->nheaders; i++) {
        const weir_http_header *h = &req->headers[i];
        if (weir_http_put_header_n(b, h->name.p, h->name.len, h->value.p, h->value.len) < 0) {
            *why = "invalid header field (name not a token, or CR, LF or NUL in the value)";
            return b->err;
        }
    }
    if (req->body_fn) {
        weir_http_put_chunked(b);
    } else if (req->body || strcmp(pl->method, "POST") == 0 || strcmp(pl->method, "PUT") == 0 ||
               strcmp(pl->method, "PATCH") == 0) {
        if (req->body_len <= INLINE_BODY) {
            weir_http_put_content(b, req->body, req->body_len);
        } else {
            char line[48];
            int k = snprintf(line, sizeof(line), "%zu", req->body_len);
            weir_http_put_header_n(b, "Content-Length", 14, line, (size_t)k);
            weir_http_put_end(b);
            pl->body_after = req->body;
            pl->body_after_len = req->body_len;
        }
    } else {
        weir_http_put_end(b);
    }
    return b->err;
}

static int write_all(const weir_http_transport *tr, void *tc, const void *buf, size_t len,
                     int64_t deadline)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = tr->write(tc, p, len, deadline);
        if (n < 0)
            return (int)n;
        if (n == 0 || (size_t)n > len)
            return -EIO; /* a transport that breaks its contract */
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Send the body of body_fn as chunks, framed in the connection's read
 * buffer (unused until the response is read). *write_failed is set when the
 * error is the transport's (not the body function's). */
static int send_chunks(conn *k, const weir_http_client_req *req, int64_t deadline, const char **why,
                       int *write_failed)
{
    const weir_http_transport *tr = k->tr;
    uint8_t *frame = k->rbuf;
    size_t cap = RBUF_SIZE - CHUNK_HDR - 2;
    for (;;) {
        ssize_t n = req->body_fn(req->body_arg, frame + CHUNK_HDR, cap);
        if (n < 0) {
            *why = "the body function failed";
            return (int)n;
        }
        if ((size_t)n > cap) {
            *why = "the body function returned more than it was given room for";
            return -EINVAL;
        }
        if (n == 0)
            break;
        char hex[CHUNK_HDR + 1];
        int hl = snprintf(hex, sizeof(hex), "%zx\r\n", (size_t)n);
        uint8_t *start = frame + CHUNK_HDR - hl;
        memcpy(start, hex, (size_t)hl);
        memcpy(frame + CHUNK_HDR + n, "\r\n", 2);
        int r = write_all(tr, k->tc, start, (size_t)hl + (size_t)n + 2, deadline);
        if (r < 0) {
            *why = "could not send the request body";
            *write_failed = 1;
            return r;
        }
    }
    int r = write_all(tr, k->tc, "0\r\n\r\n", 5, deadline);
    if (r < 0) {
        *why = "could not send the request body";
        *write_failed = 1;
    }
    return r;
}

/* The errors of a connection the server has closed. */
static int stale_error(int r)
{
    return r == -ECONNRESET || r == -EPIPE;
}

/* ---- responses ------------------------------------------------------------------------ */
static void resp_init(weir_http_client_resp *resp)
{
    memset(resp, 0, sizeof(*resp));
    resp->error = "";
}

void weir_http_client_resp_free(weir_http_client_resp *resp)
{
    if (!resp)
        return;
    free(resp->body);
    free(resp->priv.fields);
    resp_init(resp);
}

const char *weir_http_client_resp_header(const weir_http_client_resp *resp, const char *name)
{
    if (!resp || !name)
        return NULL;
    ssize_t i = weir_http_find(resp->headers, resp->nheaders, name, 0);
    return i < 0 ? NULL : resp->headers[i].value.p;
}

static size_t fields_bytes(const weir_http_header *f, size_t n)
{
    size_t b = 0;
    for (size_t i = 0; i < n; i++)
        b += f[i].name.len + f[i].value.len + 2;
    return b;
}

static char *copy_str(char *dst, weir_http_str s, weir_http_str *out)
{
    memcpy(dst, s.p, s.len);
    dst[s.len] = '\0';
    out->p = dst;
    out->len = s.len;
    return dst + s.len + 1;
}

/* Copy the parser's header and trailer fields into resp (one block). */
static int copy_fields(const weir_http_parser *p, weir_http_client_resp *resp)
{
    size_t n = p->nheaders + p->ntrailers;
    size_t bytes = n * sizeof(weir_http_header) + fields_bytes(p->headers, p->nheaders) +
                   fields_bytes(p->trailers, p->ntrailers) + 1;
    char *blk = malloc(bytes);
    if (!blk)
        return -ENOMEM;
    weir_http_header *arr = (weir_http_header *)(void *)blk;
    char *s = blk + n * sizeof(weir_http_header);
    for (size_t i = 0; i < p->nheaders; i++) {
        s = copy_str(s, p->headers[i].name, &arr[i].name);
        s = copy_str(s, p->headers[i].value, &arr[i].value);
    }
    for (size_t i = 0; i < p->ntrailers; i++) {
        weir_http_header *t = &arr[p->nheaders + i];
        s = copy_str(s, p->trailers[i].name, &t->name);
        s = copy_str(s, p->trailers[i].value, &t->value);
    }
    resp->priv.fields = blk;
    resp->headers = p->nheaders ? arr : NULL;
    resp->nheaders = p->nheaders;
    resp->trailers = p->ntrailers ? arr + p->nheaders : NULL;
    resp->ntrailers = p->ntrailers;
    resp->status = p->status;
    resp->version_minor = p->version_minor;
    return 0;
}

typedef struct body_acc {
    char *p;
    size_t len, cap;
} body_acc;

static int body_reserve(body_acc *b, size_t want)
{
    if (want + 1 <= b->cap)
        return 0;
    size_t cap = b->cap * 2; /* doubling: amortised O(1) per byte */
    if (cap < want + 1)
        cap = want + 1;
    if (cap < 256)
        cap = 256;
    char *np = realloc(b->p, cap);
    if (!np)
        return -ENOMEM;
    b->p = np;
    b->cap = cap;
    return 0;
}

/* One exchange on connection k: send, then read the whole response into
 * resp. Returns 0 with *keep set when the connection may carry another
 * request, or a negative errno; *got says whether any byte of the response
 * arrived (staleness).
 *
 * A server may answer before it has read the body (413, 401, a redirect)
 * and close, which fails the body's send with EPIPE or ECONNRESET; the
 * response is read all the same from what arrived. When none did, the
 * send's error is returned (so a pooled connection still counts as stale). */
static int exchange(weir_http_client *c, conn *k, const weir_http_client_req *req, const plan *pl,
                    const weir_http_buf *head, int64_t deadline, weir_http_client_resp *resp,
                    int *keep, int *got, const char **why)
{
    const weir_http_transport *tr = k->tr;
    *keep = 0;
    *got = 0;
    int r = write_all(tr, k->tc, head->p, head->len, deadline);
    if (r < 0) {
        *why = "could not send the request";
        return r;
    }
    int send_err = 0; /* the body's send failed as if the server had closed */
    const char *send_why = NULL;
    if (pl->body_after) {
        r = write_all(tr, k->tc, pl->body_after, pl->body_after_len, deadline);
        if (r < 0) {
            *why = "could not send the request body";
            if (!stale_error(r))
                return r;
            send_err = r;
        }
    } else if (req->body_fn) {
        int write_failed = 0;
        r = send_chunks(k, req, deadline, why, &write_failed);
        if (r < 0) {
            if (!write_failed || !stale_error(r))
                return r;
            send_err = r;
        }
    }
    if (send_err)
        send_why = *why;

    weir_http_parser *p = &k->parser;
    if (pl->head)
        weir_http_parser_no_body(p);
    body_acc body = {0};
    size_t off = 0, len = 0;
    int interim = 0, done = 0;
    int streamed = 0, stopped = 0; /* the body goes to req->on_body; it said stop */
    unsigned ninterim = 0;
    while (!done) {
        weir_http_event ev;
        ssize_t n = weir_http_parse(p, k->rbuf + off, len - off, &ev);
        if (n < 0) {
            r = (int)n;
            *why = r == -EMSGSIZE ? "response body larger than max_response"
                                  : weir_http_parser_reason(p);
            goto fail;
        }
        off += (size_t)n;
        switch (ev.kind) {
        case WEIR_HTTP_NEED_MORE: {
            ssize_t got_n = tr->read(k->tc, k->rbuf, RBUF_SIZE, deadline);
            if (send_err && !*got && got_n <= 0) {
                r = send_err; /* no answer at all: the send's error */
                *why = send_why;
                goto fail;
            }
            if (got_n < 0 || got_n > (ssize_t)RBUF_SIZE) {
                r = got_n < 0 ? (int)got_n : -EIO; /* -EIO: a transport that overran */
                *why = "could not read the response";
                goto fail;
            }
            if (got_n == 0) {
                int e = weir_http_parser_eof(p);
                if (e == 1) {
                    done = 1; /* a body delimited by the close */
                    break;
                }
                r = e < 0 ? e : -ECONNRESET;
                *why = e < 0 ? "connection closed in the middle of the response"
                             : "connection closed before the response";
                goto fail;
            }
            *got = 1;
            off = 0;
            len = (size_t)got_n;
            break;
        }
        case WEIR_HTTP_HEAD:
            interim = p->status >= 100 && p->status < 200 && p->status != 101;
            if (interim && ++ninterim > MAX_INTERIM) {
                r = -EBADMSG;
                *why = "more than 5 interim (1xx) responses";
                goto fail;
            }
            if (!interim && req->on_body && !pl->head && p->status >= 200 && p->status < 300) {
                streamed = 1;
                weir_http_parser_body_cap(p, UINT64_MAX); /* on_body bounds what it keeps */
            } else if (!interim && p->body == WEIR_HTTP_BODY_LENGTH) {
                uint64_t cl = p->content_length;
                if (body_reserve(&body, cl < BODY_PREALLOC ? (size_t)cl : BODY_PREALLOC) < 0) {
                    r = -ENOMEM;
                    goto fail;
                }
            }
            break;
        case WEIR_HTTP_BODY:
            if (streamed) {
                int b = req->on_body(req->on_body_arg, ev.data, ev.len);
                if (b < 0) {
                    r = b;
                    *why = "the response body function failed";
                    goto fail;
                }
                if (b > 0)
                    stopped = done = 1;
                break;
            }
            if (ev.len > c->max_response - body.len) {
                r = -EMSGSIZE; /* the parser's cap already; kept for clarity */
                *why = "response body larger than max_response";
                goto fail;
            }
            if (body_reserve(&body, body.len + ev.len) < 0) {
                r = -ENOMEM;
                goto fail;
            }
            memcpy(body.p + body.len, ev.data, ev.len);
            body.len += ev.len;
            break;
        case WEIR_HTTP_DONE:
            if (interim) {
                /* 100 Continue and friends: the real response follows. The
                 * no-body flag applied to the interim one: set it again. */
                interim = 0;
                if (pl->head)
                    weir_http_parser_no_body(p);
                break;
            }
            done = 1;
            break;
        }
    }
    if (body_reserve(&body, body.len) < 0 || copy_fields(p, resp) < 0) {
        r = -ENOMEM;
        goto fail;
    }
    body.p[body.len] = '\0';
    resp->body = body.p;
    resp->body_len = body.len;
    /* Reusable only at a clean boundary: the whole request sent, nothing
     * unasked-for left over (bytes arriving later are the idle check's). */
    *keep = p->keep_alive && !pl->close && off == len && !send_err && !stopped;
    return 0;
fail:
    free(body.p);
    return r;
}

/* ---- weir_http_client_do -------------------------------------------------------------- */
static int fail(weir_http_client_resp *resp, int err, const char *why)
{
    if (err == -ECANCELED)
        why = "the request's task was cancelled";
    resp->error = why && *why ? why : weir_net_strerror(err);
    weir__log(WEIR__LOG_DEBUG, "net.http_client", "request failed: %s (%s)", resp->error,
              weir_net_strerror(err));
    return err;
}

int weir_http_client_do(weir_http_client *c, const weir_http_client_req *req,
                        weir_http_client_resp *resp)
{
    if (!resp)
        return -EINVAL;
    resp_init(resp);
    if (!c || !req)
        return fail(resp, -EINVAL, "NULL client or request");
    if (!fiber_caller())
        return fail(resp, -EINVAL, "weir_http_client_do needs a fiber");
    int64_t deadline = req->deadline ? req->deadline : WEIR_FOREVER;
    const char *why = NULL;
    url u;
    int r = parse_url(req->url, &u, &why);
    if (r < 0)
        return fail(resp, r, why);
    const weir_http_transport *tr = &weir_http_tcp_transport;
    if (u.https) {
        tr = c->https;
        if (!tr)
            return fail(resp, -EPROTONOSUPPORT,
                        "https:// needs a TLS transport (weir_http_client_opts.https); "
                        "weir has none built in");
    }
    weir_http_buf head;
    weir_http_buf_init(&head);
    plan pl;
    r = build_request(c, req, &u, &pl, &head, &why);
    if (r < 0) {
        weir_http_buf_close(&head);
        return fail(resp, r, why);
    }
    pool *p = pool_get(c, u.https, u.host, u.port, tr);
    if (!p) {
        weir_http_buf_close(&head);
        return fail(resp, -ENOMEM, "out of memory");
    }

    /* A permit: one connection of this pool's max_conns. */
    if (weir_sem_try_acquire(p->permits, 1) < 0) {
        if (c->fast_fail) {
            pthread_mutex_lock(&c->mu);
            c->st.fast_fails++;
            pthread_mutex_unlock(&c->mu);
            pool_put(c, p);
            weir_http_buf_close(&head);
            return fail(resp, -EBUSY, "every connection to this host:port is busy (fast_fail)");
        }
        /* Start the wait (which queues us, or takes a permit freed since),
         * count it, then park: so waiting_now never counts a request that
         * is not in the queue yet. */
        weir_sync_op op;
        r = weir_sem_acquire_start(&op, p->permits, 1, deadline);
        pthread_mutex_lock(&c->mu);
        c->st.waits++;
        c->st.waiting_now++;
        pthread_mutex_unlock(&c->mu);
        if (r == 0)
            r = (int)weir_op_wait(&op.op);
        pthread_mutex_lock(&c->mu);
        c->st.waiting_now--;
        pthread_mutex_unlock(&c->mu);
        if (r < 0) {
            pool_put(c, p);
            weir_http_buf_close(&head);
            return fail(resp, r, "no connection to this host:port became free in time");
        }
    }

    int fresh_only = 0;
    for (int attempt = 0;; attempt++) {
        /* A cancelled task would fail its first write with -ECANCELED and
         * lose a healthy pooled connection: stop before taking one. */
        if (weir_task_cancelled()) {
            r = -ECANCELED;
            break;
        }
        conn *k = fresh_only ? NULL : idle_take(c, p);
        int reused = k != NULL;
        resp->priv.why[0] = '\0';
        if (!k && (r = conn_open(c, p, deadline, &k, resp->priv.why, sizeof(resp->priv.why))) < 0) {
            why = resp->priv.why[0] ? resp->priv.why : "could not connect";
            break;
        }
        int keep = 0, got = 0;
        why = NULL;
        r = exchange(c, k, req, &pl, &head, deadline, resp, &keep, &got, &why);
        if (r == 0) {
            if (keep)
                idle_put(c, p, k);
            else
                conn_destroy(c, k, NULL);
            pthread_mutex_lock(&c->mu);
            c->st.requests++;
            pthread_mutex_unlock(&c->mu);
            break;
        }
        /* Never reuse a connection after an error: its state is unknown. */
        conn_destroy(c, k, NULL);
        if (reused && !got && stale_error(r) && pl.replayable && attempt == 0 &&
            !weir_task_cancelled()) {
            weir__log(WEIR__LOG_DEBUG, "net.http_client",
                      "%s:%d: pooled connection was stale (%s); sending again", p->host, p->port,
                      weir_net_strerror(r));
            pthread_mutex_lock(&c->mu);
            c->st.retries++;
            pthread_mutex_unlock(&c->mu);
            fresh_only = 1;
            continue;
        }
        break;
    }
    weir_sem_release(p->permits, 1);
    pool_put(c, p);
    weir_http_buf_close(&head);
    if (r < 0) {
        /* exchange() leaves resp untouched on failure. */
        if (r == -ETIMEDOUT && why != resp->priv.why)
            why = "the request's deadline passed";
        return fail(resp, r, why);
    }
    return 0;
}

int weir_http_get(weir_http_client *c, const char *url, int64_t deadline,
                  weir_http_client_resp *resp)
{
    weir_http_client_req req = {.method = "GET", .url = url, .deadline = deadline};
    return weir_http_client_do(c, &req, resp);
}

int weir_http_post(weir_http_client *c, const char *url, const char *content_type, const void *body,
                   size_t len, int64_t deadline, weir_http_client_resp *resp)
{
    weir_http_header h = {{"Content-Type", 12},
                          {content_type, content_type ? strlen(content_type) : 0}};
    weir_http_client_req req = {
        .method = "POST",
        .url = url,
        .headers = content_type ? &h : NULL,
        .nheaders = content_type ? 1 : 0,
        /* NULL with a length stays NULL: weir_http_client_do refuses it. */
        .body = body ? body : (len ? NULL : ""),
        .body_len = len,
        .deadline = deadline,
    };
    return weir_http_client_do(c, &req, resp);
}
