/* SPDX-License-Identifier: Apache-2.0 */
/*
 * storage_redis.c - a store on a Redis server (storage.h):
 * "redis://HOST:PORT[/DB][?prefix=P&password=env://VAR&timeout_ms=N]".
 *
 * Mapping. The blob NAME is the string key P + NAME (P from prefix=,
 * percent-decoded, default empty, so several stores can share a database).
 * put is SET (atomic: a reader sees the old value or the new one); get is
 * GET; get_range is EXISTS + GETRANGE in one pipeline (GETRANGE alone
 * answers "" both for a missing key and past the end of one); delete is
 * DEL; list and the delete of a prefix walk the keyspace with SCAN
 * (MATCH on the escaped P + prefix, COUNT 1000) and fold what they find
 * one level under the prefix, as storage_mem.c does. SCAN visits the
 * whole database, so list costs time in the number of keys of the
 * database, not of the prefix: a pool lists at restore and prune, never
 * on a read. /DB is sent as SELECT on every connection; password=env://VAR
 * reads the password from the environment (never from the URI itself, and
 * it is never logged) and sends AUTH. timeout_ms (default 5000) bounds
 * each wait for the socket to make progress.
 *
 * Durability. storage.h promises that a blob survives a crash once put
 * returns. A Redis server keeps that promise only when it runs with
 * "appendonly yes" and "appendfsync always" (it then fsyncs its log
 * before it answers a write); with the defaults a put can be lost to a
 * crash of the server. This store cannot check the server's settings:
 * configure them (the tests start redis-server so).
 *
 * Threads. The methods block, and are called from the blocking pool's
 * threads and the remote backend's I/O threads, many at once. The store
 * owns a private weir runtime with one thread, on which one fiber owns
 * the connection. A call formats its commands on its own thread, queues
 * them (a mutex-protected FIFO), wakes the fiber (weir_notify_one, which
 * any thread may call) and waits on a condition variable. The fiber takes
 * everything queued, writes it in one sendmsg batch and reads the replies
 * in order, so callers that arrive while a batch is on the wire share the
 * next round trip (pipelining); then it completes the batch and looks at
 * the queue again.
 *
 * Failures. A connection that breaks (the server restarted, a reset, a
 * read timeout) is closed; the commands of the batch that had no reply
 * yet are queued again once (every command this store sends is
 * idempotent: SET, GET, GETRANGE, EXISTS, DEL, SCAN), and fail with the
 * error the second time. The next batch connects again, trying for up
 * to timeout_ms (default 5 s): each attempt has a deadline (at most 1 s)
 * and after a failed one the next waits a backoff (50 ms doubling up to
 * 500 ms). So a server that restarts within timeout_ms costs the calls
 * meanwhile only time, and a call to a store whose server is down fails
 * within about timeout_ms, never hangs.
 *
 * The server is not trusted. Every length and count it sends is bounded
 * before it is used: a bulk string by Redis's own limit of 512 MiB and
 * by what the call asked for (a get's max, a range's length), a status
 * line by 4 KiB, a SCAN reply by 100000 keys and keys are stored only as
 * they arrive, never allocated from a count. Anything that is not the
 * reply the command expects is -EPROTO and drops the connection (the
 * stream can no longer be trusted to be at a reply boundary).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "state/storage.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/rt.h"
#include "weir/sync.h"

#define BULK_MAX    ((size_t)512 << 20) /* Redis's largest string */
#define LINE_CAP    4096                /* a reply's first line, CRLF excluded */
#define PREFIX_MAX  1024
#define KEY_MAX     (PREFIX_MAX + WEIR__STORAGE_NAME_MAX)
#define SCAN_KEYS   100000 /* keys in one SCAN reply */
#define SCAN_ROUNDS (1 << 22)
#define RBUF        (64 << 10)
#define CONNECT_MS  1000
#define BACKOFF_MIN 50
#define BACKOFF_MAX 500
#define TIMEOUT_MS  5000
#define IOV_BATCH   64

enum { R_STATUS, R_INT, R_GET, R_RANGE, R_SCAN };

/* One command and, once done, its reply. On the caller's stack. */
typedef struct rreq {
    struct rreq *next;
    int kind;
    weir__buf cmd;   /* the command (SET: up to its value's bytes) */
    const void *val; /* SET: the value, sent after cmd, then CRLF */
    size_t vlen;
    size_t max;   /* GET: the caller's bound; RANGE: room in out */
    uint8_t *out; /* GET: weir__malloc'd; RANGE: the caller's buffer */
    size_t outlen;
    int64_t num;      /* INT */
    char cursor[24];  /* SCAN: the next cursor */
    weir__names keys; /* SCAN: the keys of this reply */
    size_t keycap;
    int tries, done, res;
    int64_t give_up; /* the call's timeout: a busy server is waited for until then */
} rreq;

typedef struct rstore {
    weir__storage base;
    char host[256];
    int port, db;
    char *prefix; /* P */
    size_t plen;
    char *password;
    int64_t timeout_ns;
    weir_rt *rt;
    weir_task *fiber;
    weir_notify *wake;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rreq *head, *tail; /* queued, under mu */
    int closing;       /* under mu */
    /* The fiber's own. */
    int fd;
    uint8_t *rbuf;
    size_t rpos, rlen;
    int64_t next_connect, backoff_ms;
    /* For tests and operators. */
    _Atomic uint64_t writes, cmds, max_batch, batched, connects, drops;
} rstore;

/* ---- commands -------------------------------------------------------------------------------- */
static void put_count(weir__buf *b, char kind, size_t n)
{
    char h[32];
    int k = snprintf(h, sizeof(h), "%c%zu\r\n", kind, n);
    weir__buf_put(b, h, (size_t)k);
}

static void put_arg(weir__buf *b, const void *p, size_t n)
{
    put_count(b, '$', n);
    weir__buf_put(b, p, n);
    weir__buf_put(b, "\r\n", 2);
}

static void put_str(weir__buf *b, const char *s)
{
    put_arg(b, s, strlen(s));
}

static void put_key(const rstore *s, weir__buf *b, const char *name)
{
    size_t n = strlen(name);
    put_count(b, '$', s->plen + n);
    weir__buf_put(b, s->prefix, s->plen);
    weir__buf_put(b, name, n);
    weir__buf_put(b, "\r\n", 2);
}

static void put_u64(weir__buf *b, uint64_t v)
{
    char d[24];
    int k = snprintf(d, sizeof(d), "%llu", (unsigned long long)v);
    put_arg(b, d, (size_t)k);
}

/* Queue n commands, wake the fiber, wait for every reply. The results are
 * in each request's res. */
static void submit(rstore *s, rreq **v, int n)
{
    for (int i = 0; i < n; i++) {
        if (v[i]->cmd.err) { /* formatting ran out of memory: not sent */
            v[i]->res = v[i]->cmd.err;
            v[i]->done = 1;
        }
        v[i]->next = NULL;
        v[i]->give_up = weir_time_now() + s->timeout_ns;
    }
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n; i++) {
        if (v[i]->done)
            continue;
        if (s->tail)
            s->tail->next = v[i];
        else
            s->head = v[i];
        s->tail = v[i];
    }
    pthread_mutex_unlock(&s->mu);
    weir_notify_one(s->wake);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n; i++)
        while (!v[i]->done)
            pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++)
        weir__buf_free(&v[i]->cmd);
}

/* ---- the fiber: reading replies -------------------------------------------------------------- */
static int64_t io_deadline(const rstore *s)
{
    return weir_time_now() + s->timeout_ns;
}

/* More bytes into rbuf. */
static int fill(rstore *s)
{
    if (s->rpos == s->rlen)
        s->rpos = s->rlen = 0;
    else if (s->rlen == RBUF) {
        memmove(s->rbuf, s->rbuf + s->rpos, s->rlen - s->rpos);
        s->rlen -= s->rpos;
        s->rpos = 0;
    }
    ssize_t n = weir_io_recv(s->fd, s->rbuf + s->rlen, RBUF - s->rlen, 0, io_deadline(s));
    if (n < 0)
        return (int)n;
    if (n == 0)
        return -ECONNRESET; /* the server closed with replies owed */
    s->rlen += (size_t)n;
    return 0;
}

/* A line up to CRLF, into line (NUL-terminated, at most LINE_CAP bytes). */
static int rd_line(rstore *s, char *line, size_t *n)
{
    size_t got = 0;
    for (;;) {
        while (s->rpos < s->rlen) {
            char c = (char)s->rbuf[s->rpos++];
            if (c == '\n') {
                if (!got || line[got - 1] != '\r')
                    return -EPROTO;
                line[--got] = '\0';
                *n = got;
                return 0;
            }
            if (got >= LINE_CAP)
                return -EPROTO;
            line[got++] = c;
        }
        int e = fill(s);
        if (e)
            return e;
    }
}

/* n bytes into dst (NULL: skipped), then CRLF. */
static int rd_bulk(rstore *s, uint8_t *dst, size_t n)
{
    while (n) {
        if (s->rpos == s->rlen) {
            if (dst && n >= RBUF / 2) { /* a large value: straight into its place */
                ssize_t k = weir_io_recv(s->fd, dst, n, 0, io_deadline(s));
                if (k < 0)
                    return (int)k;
                if (k == 0)
                    return -ECONNRESET;
                dst += k;
                n -= (size_t)k;
                continue;
            }
            int e = fill(s);
            if (e)
                return e;
        }
        size_t k = s->rlen - s->rpos < n ? s->rlen - s->rpos : n;
        if (dst) {
            memcpy(dst, s->rbuf + s->rpos, k);
            dst += k;
        }
        s->rpos += k;
        n -= k;
    }
    while (s->rlen - s->rpos < 2) {
        if (s->rpos && s->rlen == RBUF) {
            memmove(s->rbuf, s->rbuf + s->rpos, s->rlen - s->rpos);
            s->rlen -= s->rpos;
            s->rpos = 0;
        }
        int e = fill(s);
        if (e)
            return e;
    }
    if (s->rbuf[s->rpos] != '\r' || s->rbuf[s->rpos + 1] != '\n')
        return -EPROTO;
    s->rpos += 2;
    return 0;
}

/* A RESP integer: an optional '-', then digits, no overflow. */
static int parse_int(const char *p, int64_t *v)
{
    int neg = *p == '-';
    p += neg;
    if (!*p)
        return -EPROTO;
    uint64_t x = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || x > ((uint64_t)INT64_MAX - (uint64_t)(*p - '0')) / 10)
            return -EPROTO;
        x = x * 10 + (uint64_t)(*p - '0');
    }
    *v = neg ? -(int64_t)x : (int64_t)x;
    return 0;
}

/* The next reply's first line, which must be of type t ('$', '*', ':')
 * with an integer: *v. */
static int rd_head(rstore *s, char t, int64_t *v)
{
    char line[LINE_CAP + 1];
    size_t n;
    int e = rd_line(s, line, &n);
    if (e)
        return e;
    return n && line[0] == t ? parse_int(line + 1, v) : -EPROTO;
}

/* A server's error reply, as an errno. */
static int error_code(const char *msg)
{
    static const struct {
        const char *word;
        int e;
    } map[] = {{"NOAUTH", -EACCES}, {"WRONGPASS", -EACCES}, {"NOPERM", -EACCES},
               {"OOM", -ENOSPC},    {"READONLY", -EROFS},   {"LOADING", -EAGAIN},
               {"BUSY", -EAGAIN},   {"MASTERDOWN", -EAGAIN}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (strncmp(msg, map[i].word, strlen(map[i].word)) == 0)
            return map[i].e;
    return -EIO;
}

static int push_key(rreq *r, char *k)
{
    if (r->keys.n == r->keycap) {
        size_t nc = r->keycap ? r->keycap * 2 : 64;
        char **nv = weir__realloc(r->keys.v, nc * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        r->keys.v = nv;
        r->keycap = nc;
    }
    r->keys.v[r->keys.n++] = k;
    return 0;
}

/* SCAN's reply after its "*2" line: the cursor, then the keys. */
static int rd_scan(rstore *s, rreq *r)
{
    int64_t n;
    int e = rd_head(s, '$', &n);
    if (e || n < 1 || n >= (int64_t)sizeof(r->cursor))
        return e ? e : -EPROTO;
    if ((e = rd_bulk(s, (uint8_t *)r->cursor, (size_t)n)) != 0)
        return e;
    r->cursor[n] = '\0';
    for (int64_t i = 0; i < n; i++)
        if (r->cursor[i] < '0' || r->cursor[i] > '9')
            return -EPROTO;
    int64_t count;
    if ((e = rd_head(s, '*', &count)) != 0 || count < 0 || count > SCAN_KEYS)
        return e ? e : -EPROTO;
    for (int64_t i = 0; i < count; i++) {
        int64_t kl;
        if ((e = rd_head(s, '$', &kl)) != 0 || kl < 0 || (size_t)kl > BULK_MAX)
            return e ? e : -EPROTO;
        if (kl > KEY_MAX) { /* not one of ours: skipped */
            if ((e = rd_bulk(s, NULL, (size_t)kl)) != 0)
                return e;
            continue;
        }
        char *k = weir__malloc((size_t)kl + 1);
        if (!k)
            return -ENOMEM;
        if ((e = rd_bulk(s, (uint8_t *)k, (size_t)kl)) != 0) {
            weir__free(k);
            return e;
        }
        k[kl] = '\0';
        if (memchr(k, '\0', (size_t)kl)) { /* no name holds a NUL */
            weir__free(k);
            continue;
        }
        if ((e = push_key(r, k)) != 0) {
            weir__free(k);
            return e;
        }
    }
    return 0;
}

/* The reply to r: 0 with r->res set (the command's own result, which may
 * be an error the server answered), or the error that ends the
 * connection. */
static int read_reply(rstore *s, rreq *r)
{
    char line[LINE_CAP + 1];
    size_t n;
    int e = rd_line(s, line, &n);
    if (e)
        return e;
    if (!n)
        return -EPROTO;
    if (line[0] == '-') {
        r->res = error_code(line + 1);
        return 0;
    }
    int64_t v = 0;
    if (line[0] != '+' && (e = parse_int(line + 1, &v)) != 0)
        return e;
    r->res = 0;
    switch (r->kind) {
    case R_STATUS:
        return line[0] == '+' ? 0 : -EPROTO;
    case R_INT:
        r->num = v;
        return line[0] == ':' ? 0 : -EPROTO;
    case R_GET:
        if (line[0] != '$' || v < -1 || v > (int64_t)BULK_MAX)
            return -EPROTO;
        if (v == -1) {
            r->res = -ENOENT;
            return 0;
        }
        if ((size_t)v > r->max) { /* never allocated: read past */
            r->res = -EFBIG;
            return rd_bulk(s, NULL, (size_t)v);
        }
        if (!(r->out = weir__malloc(v ? (size_t)v : 1)))
            return -ENOMEM; /* the value is still on the wire: the connection goes */
        if ((e = rd_bulk(s, r->out, (size_t)v)) != 0) {
            weir__free(r->out);
            r->out = NULL;
            return e;
        }
        r->outlen = (size_t)v;
        return 0;
    case R_RANGE:
        if (line[0] != '$' || v < 0 || (uint64_t)v > r->max)
            return -EPROTO; /* more than the range asked for */
        r->outlen = (size_t)v;
        return rd_bulk(s, r->out, (size_t)v);
    default: /* R_SCAN */
        if (line[0] != '*' || v != 2)
            return -EPROTO;
        if ((e = rd_scan(s, r)) != 0) {
            weir__names_free(&r->keys);
            r->keycap = 0;
        }
        return e;
    }
}

/* ---- the fiber: the connection --------------------------------------------------------------- */
/* Every byte of iov[0..cnt) (consumed). sendmsg with MSG_NOSIGNAL: a
 * server gone is -EPIPE, never SIGPIPE; a full socket waits for POLLOUT. */
static int send_all(rstore *s, struct iovec *iov, int cnt)
{
    while (cnt > 0) {
        if (iov->iov_len == 0) {
            iov++;
            cnt--;
            continue;
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)(cnt < IOV_MAX ? cnt : IOV_MAX)};
        ssize_t n = sendmsg(s->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return -errno;
            int r = weir_io_poll(s->fd, POLLOUT, io_deadline(s));
            if (r < 0)
                return r;
            continue;
        }
        size_t done = (size_t)n;
        while (cnt > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    return 0;
}

static void drop(rstore *s)
{
    if (s->fd >= 0) {
        weir_io_close(s->fd);
        atomic_fetch_add_explicit(&s->drops, 1, memory_order_relaxed);
    }
    s->fd = -1;
    s->rpos = s->rlen = 0;
}

/* AUTH and SELECT on a new connection. */
static int handshake(rstore *s)
{
    if (!s->password && !s->db)
        return 0;
    rreq auth = {.kind = R_STATUS}, sel = {.kind = R_STATUS};
    weir__buf b = {0};
    if (s->password) {
        put_count(&b, '*', 2);
        put_str(&b, "AUTH");
        put_str(&b, s->password);
    }
    if (s->db) {
        put_count(&b, '*', 2);
        put_str(&b, "SELECT");
        put_u64(&b, (uint64_t)s->db);
    }
    int e = b.err;
    struct iovec iov = {b.p, b.len};
    if (!e)
        e = send_all(s, &iov, 1);
    if (b.p)
        explicit_bzero(b.p, b.cap); /* the password */
    weir__buf_free(&b);
    if (!e && s->password && !(e = read_reply(s, &auth)) && auth.res)
        e = -EACCES;
    if (!e && s->db && !(e = read_reply(s, &sel)) && sel.res)
        e = sel.res == -EIO ? -EINVAL : sel.res; /* no such database */
    return e;
}

/* Connect (again), trying until the call's timeout: a server restarting
 * within it is not an error of the calls meanwhile. After a failure the
 * store waits a backoff before the next attempt, so a server that is down
 * costs each batch at most timeout_ms, never a hang or a spin. */
static int ensure_conn(rstore *s)
{
    if (s->fd >= 0)
        return 0;
    int64_t give_up = weir_time_now() + s->timeout_ns;
    for (;;) {
        if (weir_time_now() < s->next_connect)
            weir_time_sleep_until(s->next_connect);
        int64_t ms =
            s->timeout_ns / WEIR_MSEC < CONNECT_MS ? s->timeout_ns / WEIR_MSEC : CONNECT_MS;
        int fd = weir_net_connect(s->host, s->port, weir_time_after_ms(ms));
        int e = fd < 0 ? fd : 0;
        if (!e) {
            s->fd = fd;
            weir_net_set_nodelay(fd, 1);
            if ((e = handshake(s)) != 0)
                drop(s);
        }
        if (!e) {
            s->backoff_ms = 0;
            atomic_fetch_add_explicit(&s->connects, 1, memory_order_relaxed);
            return 0;
        }
        s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : BACKOFF_MIN;
        if (s->backoff_ms > BACKOFF_MAX)
            s->backoff_ms = BACKOFF_MAX;
        s->next_connect = weir_time_after_ms(s->backoff_ms);
        /* Refusals of the server itself (a password, a database) and a
         * deadline that the next attempt would pass end it here. */
        if (e == -EACCES || e == -EINVAL || e == -EPROTO || s->next_connect >= give_up)
            return e;
    }
}

/* Send the batch's commands; 0 or the connection's error. */
static int write_batch(rstore *s, rreq *batch, size_t n)
{
    static const char crlf[2] = {'\r', '\n'};
    struct iovec iov[IOV_BATCH * 3];
    int cnt = 0;
    for (rreq *r = batch; r; r = r->next) {
        iov[cnt++] = (struct iovec){r->cmd.p, r->cmd.len};
        if (r->kind == R_STATUS && r->val) {
            iov[cnt++] = (struct iovec){(void *)r->val, r->vlen};
            iov[cnt++] = (struct iovec){(void *)crlf, 2};
        }
        if (cnt > (IOV_BATCH - 1) * 3 || !r->next) {
            int e = send_all(s, iov, cnt);
            if (e)
                return e;
            cnt = 0;
        }
    }
    atomic_fetch_add_explicit(&s->writes, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->cmds, n, memory_order_relaxed);
    if (n > 1)
        atomic_fetch_add_explicit(&s->batched, 1, memory_order_relaxed);
    uint64_t m = atomic_load_explicit(&s->max_batch, memory_order_relaxed);
    if (n > m)
        atomic_store_explicit(&s->max_batch, n, memory_order_relaxed);
    return 0;
}

/* Mark requests done; their callers may free them as soon as mu is let go. */
static void finish(rstore *s, rreq *list)
{
    pthread_mutex_lock(&s->mu);
    for (rreq *r = list, *nx; r; r = nx) {
        nx = r->next;
        r->done = 1;
    }
    pthread_mutex_unlock(&s->mu);
    pthread_cond_broadcast(&s->cv);
}

static void fail_all(rreq *list, int e)
{
    for (rreq *r = list; r; r = r->next)
        r->res = e;
}

/* One batch: connect if need be, write, read the replies in order. */
static void run_batch(rstore *s, rreq *batch)
{
    size_t n = 0;
    for (rreq *r = batch; r; r = r->next)
        n++;
    int e = ensure_conn(s);
    if (e) {
        fail_all(batch, e);
        finish(s, batch);
        return;
    }
    rreq *r = batch;
    if (!(e = write_batch(s, batch, n)))
        for (; r; r = r->next)
            if ((e = read_reply(s, r)) != 0)
                break;
    if (!e) {
        /* A server still loading its data after a restart (or busy with a
         * script, or a replica without its master) answers -EAGAIN: those
         * commands go round again after a pause, until their call's
         * timeout; the others are done. */
        rreq *done = NULL, *busy = NULL, *busy_tail = NULL;
        for (rreq *q = batch, *nx; q; q = nx) {
            nx = q->next;
            if (q->res == -EAGAIN && weir_time_now() + BACKOFF_MIN * WEIR_MSEC < q->give_up) {
                q->res = 0;
                q->next = NULL;
                if (busy_tail)
                    busy_tail->next = q;
                else
                    busy = q;
                busy_tail = q;
            } else {
                q->next = done;
                done = q;
            }
        }
        finish(s, done);
        if (busy) {
            pthread_mutex_lock(&s->mu);
            busy_tail->next = s->head;
            s->head = busy;
            if (!s->tail)
                s->tail = busy_tail;
            pthread_mutex_unlock(&s->mu);
            weir_time_sleep_until(weir_time_after_ms(BACKOFF_MIN));
        }
        return;
    }
    /* The connection broke at r: the replies before it are good; r and
     * the rest go round once more on a new connection, unless they did
     * already or the server spoke nonsense to r. */
    drop(s);
    rreq *answered = r == batch ? NULL : batch, *again = NULL, *again_tail = NULL, *failed = NULL;
    if (answered) {
        rreq *p = batch;
        while (p->next != r)
            p = p->next;
        p->next = NULL;
    }
    for (rreq *q = r, *nx; q; q = nx) {
        nx = q->next;
        q->next = NULL;
        if (q->tries++ == 0 && !(q == r && (e == -EPROTO || e == -ENOMEM))) {
            if (again_tail)
                again_tail->next = q;
            else
                again = q;
            again_tail = q;
        } else {
            q->res = e;
            q->next = failed;
            failed = q;
        }
    }
    finish(s, answered);
    finish(s, failed);
    if (again) {
        pthread_mutex_lock(&s->mu);
        again_tail->next = s->head;
        s->head = again;
        if (!s->tail)
            s->tail = again_tail;
        pthread_mutex_unlock(&s->mu);
    }
}

static intptr_t fiber_main(void *arg)
{
    rstore *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        rreq *batch = s->head;
        s->head = s->tail = NULL;
        int closing = s->closing;
        pthread_mutex_unlock(&s->mu);
        if (batch)
            run_batch(s, batch);
        else if (closing)
            break;
        else
            weir_notify_wait(s->wake, WEIR_FOREVER);
    }
    drop(s);
    return 0;
}

/* ---- opening --------------------------------------------------------------------------------- */
static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* The percent-decoded value [p, p + n) into a weir__malloc'd string. */
static int decode(const char *p, size_t n, char **out, size_t *len)
{
    char *d = weir__malloc(n + 1);
    if (!d)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '%') {
            if (i + 2 >= n || hexval(p[i + 1]) < 0 || hexval(p[i + 2]) < 0 ||
                (hexval(p[i + 1]) | hexval(p[i + 2])) == 0) {
                weir__free(d);
                return -EINVAL; /* a bad escape, or %00 */
            }
            d[k++] = (char)(hexval(p[i + 1]) * 16 + hexval(p[i + 2]));
            i += 2;
        } else {
            d[k++] = p[i];
        }
    }
    d[k] = '\0';
    *out = d;
    *len = k;
    return 0;
}

static int parse_num(const char *p, size_t n, long long lo, long long hi, long long *v)
{
    long long x = 0;
    if (!n || n > 12)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -EINVAL;
        x = x * 10 + (p[i] - '0');
    }
    if (x < lo || x > hi)
        return -EINVAL;
    *v = x;
    return 0;
}

/* "HOST:PORT[/DB][?k=v&...]" into s. */
static int parse_where(rstore *s, const char *where)
{
    const char *q = strchr(where, '?');
    const char *end = q ? q : where + strlen(where);
    const char *slash = memchr(where, '/', (size_t)(end - where));
    const char *hend = slash ? slash : end, *h = where, *hstop, *colon;
    if (*h == '[') {
        hstop = memchr(h, ']', (size_t)(hend - h));
        if (!hstop)
            return -EINVAL;
        h++;
        colon = hstop + 1 < hend ? hstop + 1 : NULL;
        if (colon && *colon != ':')
            return -EINVAL;
    } else {
        colon = memchr(h, ':', (size_t)(hend - h));
        hstop = colon ? colon : hend;
    }
    size_t hl = (size_t)(hstop - h);
    if (!hl || hl >= sizeof(s->host))
        return -EINVAL;
    memcpy(s->host, h, hl);
    s->host[hl] = '\0';
    long long v = 6379;
    if (colon && parse_num(colon + 1, (size_t)(hend - colon - 1), 1, 65535, &v))
        return -EINVAL;
    s->port = (int)v;
    v = 0;
    if (slash && slash + 1 < end && parse_num(slash + 1, (size_t)(end - slash - 1), 0, INT_MAX, &v))
        return -EINVAL;
    s->db = (int)v;
    s->timeout_ns = TIMEOUT_MS * WEIR_MSEC;
    for (const char *o = q ? q + 1 : NULL; o && *o;) {
        const char *amp = strchr(o, '&'), *oe = amp ? amp : o + strlen(o);
        const char *eq = memchr(o, '=', (size_t)(oe - o));
        if (!eq)
            return -EINVAL;
        size_t kl = (size_t)(eq - o), vl = (size_t)(oe - eq - 1);
        const char *val = eq + 1;
        int e;
        if (kl == 6 && memcmp(o, "prefix", 6) == 0) {
            weir__free(s->prefix);
            s->prefix = NULL;
            if ((e = decode(val, vl, &s->prefix, &s->plen)) != 0)
                return e;
            if (s->plen > PREFIX_MAX)
                return -EINVAL;
        } else if (kl == 8 && memcmp(o, "password", 8) == 0) {
            /* Only from the environment: a URI is logged and shown. */
            char var[128];
            if (vl <= 6 || memcmp(val, "env://", 6) != 0 || vl - 6 >= sizeof(var))
                return -EINVAL;
            memcpy(var, val + 6, vl - 6);
            var[vl - 6] = '\0';
            const char *pw = getenv(var);
            if (!pw || !*pw)
                return -EINVAL;
            weir__free(s->password);
            if (!(s->password = weir__strdup(pw)))
                return -ENOMEM;
        } else if (kl == 10 && memcmp(o, "timeout_ms", 10) == 0) {
            if (parse_num(val, vl, 1, 3600000, &v))
                return -EINVAL;
            s->timeout_ns = v * WEIR_MSEC;
        } else {
            return -EINVAL;
        }
        o = amp ? amp + 1 : NULL;
    }
    if (!s->prefix && !(s->prefix = weir__strdup("")))
        return -ENOMEM;
    return 0;
}

static void store_free(rstore *s)
{
    if (s->fiber) {
        pthread_mutex_lock(&s->mu);
        s->closing = 1;
        pthread_mutex_unlock(&s->mu);
        weir_notify_one(s->wake);
        /* Not joined: a join from a fiber (a store closed by a task, as
         * the remote backend's pruning does) returns at once when that
         * fiber is cancelled. weir_rt_free below waits for it instead, on
         * any thread, whatever the caller's cancellation. */
        weir_task_detach(s->fiber);
    }
    if (s->rt)
        weir_rt_free(s->rt);
    if (s->wake)
        weir_notify_free(s->wake);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    if (s->password) {
        explicit_bzero(s->password, strlen(s->password));
        weir__free(s->password);
    }
    weir__free(s->prefix);
    weir__free(s->rbuf);
    weir__free(s);
}

static int redis_open(const char *where, weir__storage **out)
{
    rstore *s = weir__calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int e = parse_where(s, where);
    if (!e && (!(s->rbuf = weir__malloc(RBUF)) || !(s->wake = weir_notify_new())))
        e = -ENOMEM;
    if (!e && !(s->rt = weir_rt_new(&(weir_rt_opts){.threads = 1})))
        e = errno ? -errno : -ENOMEM;
    if (!e) {
        weir_spawn_opts o = {.name = "redis-store", .rt = s->rt, .stack_size = 128 << 10};
        if (!(s->fiber = weir_task_spawn(fiber_main, s, &o)))
            e = errno ? -errno : -ENOMEM;
    }
    if (e) {
        store_free(s);
        return e;
    }
    *out = &s->base;
    return 0;
}

/* ---- the methods ----------------------------------------------------------------------------- */
static void redis_free(weir__storage *st)
{
    store_free((rstore *)st);
}

static int redis_put(weir__storage *st, const char *name, const void *buf, size_t len)
{
    rstore *s = (rstore *)st;
    if (len > BULK_MAX)
        return -EFBIG;
    rreq r = {.kind = R_STATUS, .val = buf ? buf : "", .vlen = len}, *v = &r;
    put_count(&r.cmd, '*', 3);
    put_str(&r.cmd, "SET");
    put_key(s, &r.cmd, name);
    put_count(&r.cmd, '$', len);
    submit(s, &v, 1);
    return r.res;
}

static int redis_get(weir__storage *st, const char *name, size_t max, uint8_t **buf, size_t *len)
{
    rstore *s = (rstore *)st;
    rreq r = {.kind = R_GET, .max = max}, *v = &r;
    put_count(&r.cmd, '*', 2);
    put_str(&r.cmd, "GET");
    put_key(s, &r.cmd, name);
    submit(s, &v, 1);
    if (r.res) {
        weir__free(r.out);
        return r.res;
    }
    *buf = r.out;
    *len = r.outlen;
    return 0;
}

static int redis_get_range(weir__storage *st, const char *name, uint64_t off, size_t len,
                           uint8_t *buf, size_t *got)
{
    rstore *s = (rstore *)st;
    rreq ex = {.kind = R_INT}, rg = {.kind = R_RANGE, .out = buf}, *v[2] = {&ex, &rg};
    put_count(&ex.cmd, '*', 2);
    put_str(&ex.cmd, "EXISTS");
    put_key(s, &ex.cmd, name);
    /* Nothing to read past Redis's largest string, and GETRANGE's end
     * is inclusive (a zero-length range has none). */
    int n = 1;
    if (len && off < BULK_MAX) {
        if (len > BULK_MAX)
            len = BULK_MAX;
        rg.max = len;
        put_count(&rg.cmd, '*', 4);
        put_str(&rg.cmd, "GETRANGE");
        put_key(s, &rg.cmd, name);
        put_u64(&rg.cmd, off);
        put_u64(&rg.cmd, off + len - 1);
        n = 2;
    }
    submit(s, v, n);
    *got = 0;
    if (ex.res || ex.num == 0)
        return ex.res ? ex.res : -ENOENT;
    if (n == 2 && rg.res)
        return rg.res;
    *got = n == 2 ? rg.outlen : 0;
    return 0;
}

/* P + prefix as a SCAN pattern: glob characters escaped, then '*'. */
static int scan_pattern(const rstore *s, const char *prefix, weir__buf *pat)
{
    const char *parts[2] = {s->prefix, prefix};
    for (int i = 0; i < 2; i++)
        for (const char *c = parts[i]; *c; c++) {
            if (strchr("*?[]\\", *c))
                weir__buf_put(pat, "\\", 1);
            weir__buf_put(pat, c, 1);
        }
    weir__buf_put(pat, "*", 1);
    return pat->err;
}

/* One SCAN step from cursor (updated) into r's keys; 0 or an error. */
static int scan_step(rstore *s, const weir__buf *pat, char *cursor, rreq *r)
{
    *r = (rreq){.kind = R_SCAN};
    rreq *v = r;
    put_count(&r->cmd, '*', 6);
    put_str(&r->cmd, "SCAN");
    put_str(&r->cmd, cursor);
    put_str(&r->cmd, "MATCH");
    put_arg(&r->cmd, pat->p, pat->len);
    put_str(&r->cmd, "COUNT");
    put_str(&r->cmd, "1000");
    submit(s, &v, 1);
    if (r->res) {
        weir__names_free(&r->keys);
        return r->res;
    }
    memcpy(cursor, r->cursor, sizeof(r->cursor));
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int redis_list(weir__storage *st, const char *prefix, weir__names *out)
{
    rstore *s = (rstore *)st;
    weir__buf pat = {0};
    size_t pl = strlen(prefix), cap = 0;
    char cursor[24] = "0";
    int e = scan_pattern(s, prefix, &pat), rounds = 0;
    *out = (weir__names){0};
    while (!e) {
        rreq r;
        if (++rounds > SCAN_ROUNDS) {
            e = -EPROTO; /* a cursor that never comes back to 0 */
            break;
        }
        if ((e = scan_step(s, &pat, cursor, &r)) != 0)
            break;
        for (size_t i = 0; i < r.keys.n && !e; i++) {
            const char *k = r.keys.v[i];
            if (strncmp(k, s->prefix, s->plen) != 0 || strncmp(k + s->plen, prefix, pl) != 0)
                continue; /* the server's MATCH is not trusted either */
            const char *nm = k + s->plen;
            if (weir__storage_check_name(nm, 0) != 0)
                continue; /* not a blob this store could have written */
            const char *slash = strchr(nm + pl, '/');
            size_t n = slash ? (size_t)(slash - nm) + 1 : strlen(nm);
            char *c = weir__malloc(n + 1);
            if (c && out->n == cap) {
                size_t nc = cap ? cap * 2 : 16;
                char **nv = weir__realloc(out->v, nc * sizeof(*nv));
                if (nv) {
                    out->v = nv;
                    cap = nc;
                }
            }
            if (!c || out->n == cap) {
                weir__free(c);
                e = -ENOMEM;
                break;
            }
            memcpy(c, nm, n);
            c[n] = '\0';
            out->v[out->n++] = c;
        }
        weir__names_free(&r.keys);
        if (!e && strcmp(cursor, "0") == 0)
            break;
    }
    weir__buf_free(&pat);
    if (e) {
        weir__names_free(out);
        return e;
    }
    /* Sorted, each name once (a directory comes once per blob under it,
     * and SCAN may return a key twice). */
    if (out->n > 1)
        qsort(out->v, out->n, sizeof(*out->v), cmp_names);
    size_t k = 0;
    for (size_t i = 0; i < out->n; i++) {
        if (k && strcmp(out->v[k - 1], out->v[i]) == 0)
            weir__free(out->v[i]);
        else
            out->v[k++] = out->v[i];
    }
    out->n = k;
    return 0;
}

/* Every key under P + prefix: SCAN, and a DEL of each step's keys. */
static int del_prefix(rstore *s, const char *prefix)
{
    weir__buf pat = {0};
    size_t pl = strlen(prefix);
    char cursor[24] = "0";
    int e = scan_pattern(s, prefix, &pat), rounds = 0;
    int64_t deleted = 0;
    while (!e) {
        rreq r, d = {.kind = R_INT}, *v = &d;
        if (++rounds > SCAN_ROUNDS) {
            e = -EPROTO;
            break;
        }
        if ((e = scan_step(s, &pat, cursor, &r)) != 0)
            break;
        size_t n = 0;
        for (size_t i = 0; i < r.keys.n; i++) {
            const char *k = r.keys.v[i];
            if (strncmp(k, s->prefix, s->plen) == 0 && strncmp(k + s->plen, prefix, pl) == 0)
                r.keys.v[n++] = r.keys.v[i];
            else
                weir__free(r.keys.v[i]);
        }
        r.keys.n = n;
        if (n) {
            put_count(&d.cmd, '*', n + 1);
            put_str(&d.cmd, "DEL");
            for (size_t i = 0; i < n; i++)
                put_str(&d.cmd, r.keys.v[i]);
            submit(s, &v, 1);
            e = d.res;
            deleted += d.num;
        }
        weir__names_free(&r.keys);
        if (!e && strcmp(cursor, "0") == 0)
            break;
    }
    weir__buf_free(&pat);
    return e ? e : deleted > 0 ? 0 : -ENOENT;
}

static int redis_del(weir__storage *st, const char *name)
{
    rstore *s = (rstore *)st;
    if (name[strlen(name) - 1] == '/')
        return del_prefix(s, name);
    rreq r = {.kind = R_INT}, *v = &r;
    put_count(&r.cmd, '*', 2);
    put_str(&r.cmd, "DEL");
    put_key(s, &r.cmd, name);
    submit(s, &v, 1);
    return r.res ? r.res : r.num > 0 ? 0 : -ENOENT;
}

const weir__storage_ops weir__storage_redis_ops = {
    "redis", redis_open, redis_put, redis_get, redis_list, redis_del, redis_free, redis_get_range,
};

int weir__storage_redis_stats(const weir__storage *st, weir__storage_redis_stat *out)
{
    if (!st || !out || st->ops != &weir__storage_redis_ops)
        return -EINVAL;
    const rstore *s = (const rstore *)st;
    out->writes = atomic_load_explicit(&s->writes, memory_order_relaxed);
    out->cmds = atomic_load_explicit(&s->cmds, memory_order_relaxed);
    out->max_batch = atomic_load_explicit(&s->max_batch, memory_order_relaxed);
    out->batched = atomic_load_explicit(&s->batched, memory_order_relaxed);
    out->connects = atomic_load_explicit(&s->connects, memory_order_relaxed);
    out->drops = atomic_load_explicit(&s->drops, memory_order_relaxed);
    return 0;
}
