/* SPDX-License-Identifier: Apache-2.0 */
/*
 * channel_tcp.c - channels over TCP between processes (channel_tcp.h).
 */
#include "stream/channel_tcp.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/be.h"
#include "base/log.h"
#include "stream/ckpt_link.h"
#include "stream/wire.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/tls.h"

#define FIBER_STACK (64u << 10)
/* A receiving end's buffer to start with: a full batch frame (64 KiB of
 * records and their headers) fits, and so do the several smaller ones a
 * busy producer has queued on the socket. It grows for a larger frame. */
#define RX_BUF     (128u << 10)
#define CREDIT_BUF 256u

/* What a failed data-plane handshake or a TLS/plaintext mismatch adds to
 * its message: every worker's channels speak TLS, or none do. */
#define TLS_HINT                                                                                   \
    "is the data plane TLS on every worker? give every worker --data-tls-cert, --data-tls-key "    \
    "and --data-tls-ca"

/* A channel's connection: its socket and, on a TLS data plane, its session
 * (weir/tls.h) - every byte goes through the session when there is one. */
typedef struct conn {
    int fd; /* -1 until connected */
    weir_tls *tls;
} conn;

/* Every byte of p[0, len) - whole frames, one or several - as
 * weir_frame_write sends one: straight from the fiber while the socket
 * has room, waiting on the loop when it is full. Over TLS, one
 * weir_tls_write for them all (records of up to 16 KiB each). */
static int conn_write(const conn *c, const uint8_t *p, size_t len, int64_t deadline)
{
    if (c->tls)
        return weir_tls_write(c->tls, p, len, deadline);
    if (weir_task_cancelled())
        return -ECANCELED;
    while (len > 0) {
        ssize_t n = send(c->fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return -errno;
            int r = weir_io_poll(c->fd, POLLOUT, deadline);
            if (r < 0)
                return r;
            continue;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Close c: over TLS, close_notify first (best effort, 100 ms; skipped
 * outside a fiber and after a failure: broken). */
static void conn_close(conn *c, int broken)
{
    if (c->tls) {
        if (!broken)
            weir_tls_shutdown(c->tls, weir_time_after_ms(100));
        weir_tls_free(c->tls);
        c->tls = NULL;
    }
    if (c->fd >= 0)
        weir_io_close(c->fd);
    c->fd = -1;
}

/* ---- reading frames ---------------------------------------------------------------------------
 * A connection's frames are read through a buffer of our own rather than a
 * weir_frame_parser: one recv takes every frame the socket holds, and the
 * reader hands each complete one out from the buffer (decoded in place: a
 * BATCH is copied once, into its batch) before it reads again. The first
 * attempt at a read is a direct non-blocking recv, which saves a trip
 * through the loop when bytes are already there; only when the socket is
 * empty does the fiber wait on the loop's I/O. The lengths are checked
 * from the 4 header bytes against the caller's cap before the buffer grows
 * for a frame, and it grows only as the frame's bytes arrive. */
typedef struct rbuf {
    uint8_t *p;
    size_t start, end, cap; /* unread bytes: p[start, end) */
    size_t init;            /* cap to start with and to come back to */
    int drained;            /* the last read came back short: the socket was empty */
} rbuf;

static int rbuf_init(rbuf *b, size_t cap)
{
    *b = (rbuf){.p = weir__malloc(cap), .cap = cap, .init = cap};
    return b->p ? 0 : -ENOMEM;
}

static void rbuf_close(rbuf *b)
{
    weir__free(b->p);
    b->p = NULL;
}

/* The next frame's payload (kind byte first) in *frame, valid until the
 * next call: its length (> 0); 0 at an end of the stream between frames;
 * or a negative errno: -EMSGSIZE past max, -EBADMSG for a zero length,
 * -ECONNRESET for an end inside a frame, -ENOMEM, or the read's error
 * (-ECANCELED, -ETIMEDOUT...). */
static ssize_t rbuf_next(rbuf *b, const conn *c, size_t max, const uint8_t **frame,
                         int64_t deadline)
{
    for (;;) {
        size_t have = b->end - b->start, need = 4;
        if (have >= 4) {
            uint32_t len = weir__get_be32(b->p + b->start);
            if (len == 0)
                return -EBADMSG;
            if (len > max)
                return -EMSGSIZE;
            need = 4 + (size_t)len;
            if (have >= need) {
                *frame = b->p + b->start + 4;
                b->start += need;
                return (ssize_t)len;
            }
        }
        if (have == 0) {
            b->start = b->end = 0;
            if (b->cap > 4 * b->init) { /* back to its size after a large frame */
                uint8_t *np = weir__realloc(b->p, b->init);
                if (np) {
                    b->p = np;
                    b->cap = b->init;
                }
            }
        }
        if (b->cap - b->start < need) { /* room for the whole frame, at the front */
            memmove(b->p, b->p + b->start, have);
            b->start = 0;
            b->end = have;
        }
        if (b->end == b->cap) {
            /* Full, and the frame is longer: grow by doubling as its bytes
             * arrive, so a length that promises more than comes costs at
             * most twice what did. */
            size_t cap = b->cap * 2 < need ? b->cap * 2 : need;
            uint8_t *np = weir__realloc(b->p, cap);
            if (!np)
                return -ENOMEM;
            b->p = np;
            b->cap = cap;
        }
        size_t room = b->cap - b->end;
        ssize_t n = -EAGAIN;
        if (c->tls) /* tries the socket first, waits on the loop when empty */
            n = weir_tls_read(c->tls, b->p + b->end, room, deadline);
        else if (!b->drained) {
            if (weir_task_cancelled())
                return -ECANCELED;
            n = recv(c->fd, b->p + b->end, room, MSG_DONTWAIT);
            if (n < 0)
                n = errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
        }
        if (n == -EAGAIN)
            n = weir_io_recv(c->fd, b->p + b->end, room, 0, deadline);
        if (n == 0)
            return have ? -ECONNRESET : 0;
        if (n < 0)
            return n;
        b->drained = (size_t)n < room;
        b->end += (size_t)n;
    }
}

typedef struct tx_channel tx_channel;
typedef struct rx_channel rx_channel;

struct weir__tcp_net {
    weir__tcp_opts o;
    int *control_fds; /* NULL: no checkpoint link */
    char **hosts;
    int *ports;
    int lfd;
    run *r;
    weir_scope *fibers; /* accept, readers, credit readers */
    rx_channel **rx;    /* by plan channel id: the receiving ends here (NULL: none) */
    uint32_t nrx_slots;
    _Atomic uint32_t attached, expected;
    _Atomic uint64_t sent, received, records;
};

/* The sending end: producer here, consumer in process `to`. */
struct tx_channel {
    weir__channel ch;
    weir__tcp_net *net;
    weir__plan_channel pc;
    int to;
    conn c; /* fd -1 until the first send connects */
    int broken;
    _Atomic int ended;    /* END is held or out: a close after it is the consumer's end */
    _Atomic int lost;     /* the credit reader saw the connection end before it */
    _Atomic int credited; /* a CREDIT frame came back */
    char why[640];        /* what failed connecting, when it says more than an errno */
    weir_sem *credits;
    uint8_t *buf;    /* frames held until the producer's next push (tx_push) */
    size_t len, cap; /* buf[0, len) held */
    size_t wm_at;    /* len when the last frame held is a WATERMARK's, else 0 */
};

/* The receiving end: consumer here, producer elsewhere. */
struct rx_channel {
    weir__channel ch;
    weir__tcp_net *net;
    weir__plan_channel pc;
    subtask *cons;
    conn c;                /* fd -1 until the producer connects */
    int broken;            /* its reader failed: no close_notify */
    _Atomic int claimed;   /* 1: its producer attached; 2: failed without one */
    _Atomic int in_flight; /* batches received, not yet processed */
    uint32_t owed;         /* processed, their credits not yet sent (the consumer's thread) */
    int ended;
};

uint64_t weir__tcp_plan_hash(const void *frame, size_t len)
{
    return XXH3_64bits(frame, len);
}

void weir__tcp_stats(const weir__tcp_net *n, uint64_t *sent, uint64_t *received, uint64_t *records)
{
    *sent = atomic_load(&n->sent);
    *received = atomic_load(&n->received);
    *records = atomic_load(&n->records);
}

/* "channel 7 ("src" 0 -> "count" 1)" */
static void describe(run *r, const weir__plan_channel *pc, char *buf, size_t cap)
{
    snprintf(buf, cap, "channel %" PRIu32 " (\"%s\" %" PRIu32 " -> \"%s\" %" PRIu32 ")", pc->id,
             r->chains[pc->from_chain].ops[r->chains[pc->from_chain].nops - 1]->name, pc->from_sub,
             r->chains[pc->to_chain].ops[0]->name, pc->to_sub);
}

/* Fail the job naming the channel, and end its consumer with e. */
static void rx_fail(rx_channel *rx, int e, const char *what)
{
    char name[256];
    describe(rx->net->r, &rx->pc, name, sizeof(name));
    weir__stream_fail(rx->net->r->j, e, "%s: %s", name, what);
    weir__subtask_post(rx->cons, (item){IT_FAIL, rx->ch.input, {NULL}, e});
}

/* The credits of each channel over TCP (channel_tcp.h). */
static uint32_t tcp_credits(const weir__tcp_net *n)
{
    uint32_t c = n->r->plan->credits;
    return n->o.credits ? n->o.credits : c > WEIR__TCP_MIN_CREDITS ? c : WEIR__TCP_MIN_CREDITS;
}

static weir__wire_hello hello_of(const weir__tcp_net *n, const weir__plan_channel *pc)
{
    return (weir__wire_hello){n->o.plan_hash, pc->id,       pc->from_sub,
                              pc->to_sub,     pc->to_input, tcp_credits(n)};
}

/* ---- the sending end ------------------------------------------------------------------------ */
static intptr_t credit_reader(void *arg)
{
    tx_channel *tx = arg;
    rbuf b;
    if (rbuf_init(&b, CREDIT_BUF) < 0) {
        char name[256];
        describe(tx->net->r, &tx->pc, name, sizeof(name));
        weir__stream_fail(tx->net->r->j, -ENOMEM, "%s: no memory to read its credits", name);
        return 0;
    }
    int lost = 0; /* the connection ended before the producer's end of input */
    for (;;) {
        /* Every CREDIT frame that is in, then one release. */
        uint64_t got = 0;
        const char *bad = NULL;
        char why[160];
        do {
            const uint8_t *f;
            ssize_t n = rbuf_next(&b, &tx->c, 64, &f, WEIR_FOREVER);
            if (n <= 0) {
                /* closed, cancelled at the end of the run, or broken */
                if (n == -EMSGSIZE || n == -EBADMSG)
                    bad = "a malformed frame";
                else if (n != -ECANCELED && !atomic_load(&tx->ended))
                    lost = n ? (int)n : -ECONNRESET;
                got = 0;
                break;
            }
            weir__wire_msg m;
            int e = weir__wire_decode(f, (size_t)n, &m, why, sizeof(why));
            if (e || m.kind != WEIR__WIRE_CREDIT) {
                if (!e)
                    weir__wire_msg_free(&m);
                bad = e ? why : "a frame other than CREDIT";
                break;
            }
            got += m.u.credits;
        } while (b.start < b.end);
        if (got > tcp_credits(tx->net))
            bad = "more credits than the channel has";
        char name[256];
        if (bad || lost)
            describe(tx->net->r, &tx->pc, name, sizeof(name));
        if (bad)
            weir__stream_fail(tx->net->r->j, -EBADMSG, "%s: the consumer sent %s", name, bad);
        else if (lost == -EPROTO && tx->c.tls) /* an alert: a refused certificate, say */
            weir__stream_fail(tx->net->r->j, lost, "%s: process %d ended the TLS session: %s", name,
                              tx->to, weir_tls_last_error(tx->c.tls));
        else if (lost)
            weir__stream_fail(tx->net->r->j, lost,
                              "%s: process %d closed the connection before the end of input (%s)",
                              name, tx->to,
                              tx->c.tls ? weir_tls_last_error(tx->c.tls) : weir_strerror(lost));
        if (bad || lost) {
            /* A producer waiting for credits would wait for ever: wake it
             * into the failure (tx_lost). */
            atomic_store(&tx->lost, 1);
            weir_sem_release(tx->credits, (long)tcp_credits(tx->net));
            break;
        }
        if (!got)
            break;
        atomic_store_explicit(&tx->credited, 1, memory_order_relaxed);
        weir_sem_release(tx->credits, (long)got);
    }
    rbuf_close(&b);
    return 0;
}

/* The credit reader found the connection over (tx->lost): the job has
 * failed, and this sending end sends nothing more. */
static int tx_lost(tx_channel *tx)
{
    if (!atomic_load(&tx->lost))
        return 0;
    tx->broken = 1;
    return -EPIPE;
}

/* Connect to the consumer's process and announce the channel, retrying
 * the connect until the connect deadline while it may still be starting.
 * On a TLS data plane the handshake follows, under the same deadline and
 * not retried: a consumer that refuses it (a certificate of another
 * authority, a name that does not match, a plaintext consumer closing on
 * the ClientHello) fails the channel at once, with tx->why saying so. */
static int tx_connect(tx_channel *tx)
{
    weir__tcp_net *n = tx->net;
    int64_t ms = n->o.connect_timeout_ms > 0 ? n->o.connect_timeout_ms : 30000;
    int64_t deadline = weir_time_after_ms(ms), backoff = 5;
    const char *host = n->hosts[tx->to];
    int port = n->ports[tx->to];
    if (n->o.peer && !(host = n->o.peer(n->o.peer_arg, tx->pc.id, &port)))
        return -EHOSTUNREACH; /* nobody said where its consumer listens */
    int fd;
    for (;;) {
        fd = weir_net_connect(host, port, deadline);
        if (fd >= 0 || fd == -ECANCELED || weir_time_now() >= deadline)
            break;
        if (weir_time_sleep(backoff * WEIR_MSEC) < 0)
            return -ECANCELED;
        backoff = backoff < 200 ? backoff * 2 : 200;
    }
    if (fd < 0)
        return fd;
    weir_net_set_nodelay(fd, 1);
    conn c = {fd, NULL};
    if (n->o.tls_client) {
        char tmsg[512];
        int e = weir_tls_connect(n->o.tls_client, fd, host, deadline, &c.tls, tmsg, sizeof(tmsg));
        if (e) {
            weir_io_close(fd);
            if (e == -ECANCELED)
                return e;
            /* A verification failure says what to fix; a peer that closed
             * or does not speak TLS is most likely a plaintext worker. */
            int mismatch = e != -EPROTO || strstr(tmsg, "does not speak TLS") != NULL;
            snprintf(tx->why, sizeof(tx->why), "to %s:%d: %s%s", host, port, tmsg,
                     mismatch ? " (" TLS_HINT ")" : "");
            return e;
        }
    }
    uint8_t h[WEIR__WIRE_CTRL_MAX];
    weir__wire_hello hello = hello_of(n, &tx->pc);
    size_t len = weir__wire_encode_hello(h, &hello);
    int e = conn_write(&c, h, len, deadline);
    if (e && c.tls && e != -ECANCELED) {
        /* Under TLS 1.3 a server checks the client's certificate after the
         * client's side of the handshake is done: a refusal is an alert
         * that arrives now. Its text says more than the reset. */
        uint8_t one;
        if (weir_tls_read(c.tls, &one, 1, weir_time_after_ms(100)) == -EPROTO)
            snprintf(tx->why, sizeof(tx->why), "to %s:%d: %s", host, port,
                     weir_tls_last_error(c.tls));
        else
            snprintf(tx->why, sizeof(tx->why),
                     "to %s:%d: the TLS session ended right after its handshake (%s): did the "
                     "consumer refuse this process's certificate? it must be signed by the "
                     "authority the consumer trusts",
                     host, port, weir_tls_last_error(c.tls));
    }
    if (e) {
        conn_close(&c, 1);
        return e;
    }
    atomic_fetch_add(&n->sent, len);
    tx->c = c;
    if (!weir_scope_spawn(n->fibers, credit_reader, tx,
                          &(weir_spawn_opts){.name = "channel credits", .stack_size = FIBER_STACK}))
        return -ENOMEM;
    return 0;
}

static int tx_write(tx_channel *tx, const uint8_t *p, size_t len)
{
    if (tx->broken)
        return -EPIPE;
    int e = tx->c.fd < 0 ? tx_connect(tx) : 0;
    if (!e)
        e = conn_write(&tx->c, p, len, WEIR_FOREVER);
    if (e) {
        tx->broken = 1; /* part of a frame may be out: nothing more can follow */
        if (e != -ECANCELED) {
            char name[256];
            describe(tx->net->r, &tx->pc, name, sizeof(name));
            if (tx->why[0])
                weir__stream_fail(tx->net->r->j, e, "%s %s", name, tx->why);
            else if (tx->c.tls)
                weir__stream_fail(tx->net->r->j, e, "%s: sending to process %d: %s%s", name, tx->to,
                                  weir_tls_last_error(tx->c.tls),
                                  atomic_load(&tx->credited)
                                      ? ""
                                      : " (no credit came back: did the consumer refuse this "
                                        "process's certificate? it must be signed by the "
                                        "authority the consumer trusts)");
            else
                weir__stream_fail(tx->net->r->j, e, "%s: sending to process %d: %s", name, tx->to,
                                  weir_strerror(e));
        }
        return e;
    }
    atomic_fetch_add_explicit(&tx->net->sent, len, memory_order_relaxed);
    return 0;
}

/* Frames held past this many bytes are written without waiting for the
 * push: a step that emits many batches sends them as it goes. */
#define TX_HOLD_MAX (64u << 10)

/* Room for `more` bytes after the held ones. */
static int tx_reserve(tx_channel *tx, size_t more)
{
    if (tx->len + more <= tx->cap)
        return 0;
    size_t cap = tx->cap ? tx->cap : 1024;
    while (cap < tx->len + more)
        cap *= 2;
    uint8_t *nb = weir__realloc(tx->buf, cap);
    if (!nb)
        return -ENOMEM;
    tx->buf = nb;
    tx->cap = cap;
    return 0;
}

/* Write every held frame, in one write. */
static int tx_push(weir__channel *c)
{
    tx_channel *tx = (tx_channel *)c;
    if (!tx->len)
        return 0;
    int e = tx_write(tx, tx->buf, tx->len);
    tx->len = tx->wm_at = 0;
    c->prod->held--;
    return e;
}

/* The first frame held since the last push: the producer has one more
 * output to push. */
static void tx_hold(tx_channel *tx)
{
    if (!tx->len)
        tx->ch.prod->held++;
}

/* The batch's frame joins those held; the credit it spent comes back once
 * the consumer has processed it, which it cannot do before the push: the
 * producer pushes before it waits for a credit (weir__credit_take). */
static int tx_send_batch(weir__channel *c, batch *b, uint64_t *waited_ns)
{
    tx_channel *tx = (tx_channel *)c;
    if (tx->broken)
        return -EPIPE;
    int e = weir__credit_take(c, tx->credits, waited_ns);
    if (!e && (e = tx_lost(tx)) < 0)
        weir_sem_release(tx->credits, 1);
    if (e)
        return e;
    size_t len = weir__wire_batch_size(b);
    if ((tx->len && tx->len + len > TX_HOLD_MAX && (e = tx_push(c)) < 0) ||
        (e = tx_reserve(tx, len)) < 0) {
        weir_sem_release(tx->credits, 1);
        return e; /* b stays the caller's */
    }
    tx_hold(tx);
    weir__wire_batch_encode(b, tx->buf + tx->len);
    tx->len += len;
    tx->wm_at = 0;
    atomic_fetch_add_explicit(&tx->net->records, b->n, memory_order_relaxed);
    weir__batch_free(b); /* it is bytes now */
    return 0;
}

/* A watermark waits for the push with the frames before it, and replaces a
 * watermark held right before it (the later one says all the earlier one
 * does: watermarks only rise). The other control frames go out at once. */
static int tx_send_ctl(weir__channel *c, int kind, int64_t v)
{
    tx_channel *tx = (tx_channel *)c;
    if (tx->broken || tx_lost(tx))
        return -EPIPE;
    if (kind == IT_EOI)
        atomic_store(&tx->ended, 1);
    if (kind == IT_WATERMARK && tx->wm_at) {
        weir__wire_encode_watermark(tx->buf + tx->wm_at - WEIR__WIRE_WATERMARK_SIZE, v);
        return 0;
    }
    int e = tx_reserve(tx, WEIR__WIRE_CTRL_MAX);
    if (e)
        return e;
    tx_hold(tx);
    uint8_t *f = tx->buf + tx->len;
    tx->len += kind == IT_WATERMARK ? weir__wire_encode_watermark(f, v)
               : kind == IT_BARRIER
                   ? weir__wire_encode_barrier(f, (uint64_t)v, WEIR__WIRE_BARRIER_ALIGNED)
               : kind == IT_IDLE ? weir__wire_encode_idle(f, v != 0)
                                 : weir__wire_encode_end(f);
    if (kind == IT_WATERMARK) {
        tx->wm_at = tx->len;
        return 0;
    }
    return tx_push(c);
}

static void tx_credit(weir__channel *c)
{
    (void)c; /* credits of a sending end come back over the wire */
}

static void tx_free(weir__channel *c)
{
    tx_channel *tx = (tx_channel *)c;
    conn_close(&tx->c, tx->broken);
    weir__batch_free(c->open);
    weir_sem_free(tx->credits);
    weir__free(tx->buf);
    weir__free(tx);
}

static const weir__channel_ops tx_ops = {"tcp-send", tx_send_batch, tx_send_ctl,
                                         tx_credit,  tx_free,       tx_push};

/* ---- the receiving end ---------------------------------------------------------------------- */
typedef struct rx_start {
    rx_channel *rx;
    rbuf b; /* HELLO is out of it; the rest of the stream follows */
} rx_start;

static intptr_t rx_reader(void *arg)
{
    rx_start *s = arg;
    rx_channel *rx = s->rx;
    weir__tcp_net *n = rx->net;
    char why[200];
    for (;;) {
        const uint8_t *f;
        ssize_t got = rbuf_next(&s->b, &rx->c, WEIR__WIRE_MAX_FRAME, &f, WEIR_FOREVER);
        if (got == -ECANCELED)
            break;
        if (got <= 0) {
            rx->broken = got < 0;
            if (!rx->ended)
                rx_fail(rx, got ? (int)got : -ECONNRESET,
                        got == -EMSGSIZE ? "a frame longer than the largest batch"
                        : got && rx->c.tls && got != -EBADMSG ? weir_tls_last_error(rx->c.tls)
                        : got                                 ? weir_strerror((int)got)
                              : "the producer's connection closed before its end of input");
            break;
        }
        atomic_fetch_add_explicit(&n->received, (uint64_t)got + 4, memory_order_relaxed);
        weir__wire_msg m;
        int e = weir__wire_decode(f, (size_t)got, &m, why, sizeof(why));
        if (e) {
            rx_fail(rx, e, why);
            break;
        }
        item it = {0, rx->ch.input, {NULL}, 0};
        const char *bad = NULL;
        switch (m.kind) {
        case WEIR__WIRE_BATCH:
            if (atomic_fetch_add(&rx->in_flight, 1) >= (int)tcp_credits(n))
                bad = "the producer sent more batches than its credits";
            it.kind = IT_BATCH;
            it.b = m.u.b;
            break;
        case WEIR__WIRE_WATERMARK:
            it.kind = IT_WATERMARK;
            it.wm = m.u.wm;
            break;
        case WEIR__WIRE_BARRIER:
            it.kind = IT_BARRIER;
            if (m.u.barrier.id == 0 || m.u.barrier.id > INT64_MAX)
                bad = "a barrier with checkpoint id 0 or past 2^63";
            it.wm = (int64_t)m.u.barrier.id;
            break;
        case WEIR__WIRE_END:
            it.kind = IT_EOI;
            rx->ended = 1;
            break;
        case WEIR__WIRE_IDLE:
            it.kind = IT_IDLE;
            it.wm = m.u.idle;
            break;
        default: /* HELLO again, CREDIT: not from a producer here */
            bad = "a frame a producer does not send";
        }
        if (!bad && rx->ended && it.kind != IT_EOI)
            bad = "a frame after its end of input";
        if (bad) {
            weir__wire_msg_free(&m);
            rx_fail(rx, -EBADMSG, bad);
            break;
        }
        if (weir_chan_send(rx->cons->inq, &it, WEIR_FOREVER) < 0) {
            weir__wire_msg_free(&m);
            break;
        }
        if (it.kind == IT_EOI)
            break; /* nothing more on this connection */
    }
    rbuf_close(&s->b);
    weir__free(s);
    return 0;
}

/* Fail every receiving end whose producer has not attached yet: "its
 * producer (process P) <what>". A connection still on its way in (its
 * handshake, its HELLO) finds the channel taken. */
static void fail_unattached(weir__tcp_net *n, int e, const char *what)
{
    for (uint32_t i = 0; i < n->nrx_slots; i++) {
        rx_channel *rx = n->rx[i];
        int free_slot = 0;
        if (!rx || !atomic_compare_exchange_strong(&rx->claimed, &free_slot, 2))
            continue;
        char why[160];
        snprintf(why, sizeof(why), "its producer (process %d) %s",
                 n->o.place(n->o.place_arg, rx->pc.from_chain, rx->pc.from_sub), what);
        rx_fail(rx, e, why);
    }
}

/* On a TLS data plane, what a new connection speaks, from its first byte
 * (peeked, not taken): 1 TLS (a handshake record, 0x16), 0 not (a
 * plaintext producer's HELLO starts with its length's high byte, 0), or a
 * negative errno (closed, the deadline). */
static int speaks_tls(int fd, int64_t deadline)
{
    for (;;) {
        uint8_t first;
        ssize_t r = recv(fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 1)
            return first == 0x16;
        if (r == 0)
            return -ECONNRESET;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        int w = weir_io_poll(fd, POLLIN, deadline);
        if (w < 0)
            return w;
    }
}

/* A connection's first frame: which channel it carries, on a fiber of the
 * connection's own (attach_main), so that one slow peer does not hold up
 * the others. On a TLS data plane the handshake comes first (in the 10 s
 * of the HELLO): a peer that fails it is dropped and logged, as a
 * stranger is. A plaintext producer whose HELLO names a channel this
 * process waits for - a worker without the data-plane TLS flags - fails
 * that channel at once with what to do, rather than leaving it to the
 * connect deadline. */
static void attach(weir__tcp_net *n, int fd)
{
    rx_start *s = weir__calloc(1, sizeof(*s));
    if (!s || rbuf_init(&s->b, RX_BUF) < 0) {
        weir__free(s);
        /* Perhaps a producer this process waits for: the job cannot go
         * on without it, and must not wait for it until the deadline. */
        weir_io_close(fd);
        fail_unattached(n, -ENOMEM, "could not be accepted: out of memory");
        return;
    }
    const uint8_t *f;
    char why[640] = "";
    /* The HELLO comes before the peer has said who it is: 64 bytes at
     * most, and in 10 s. */
    int64_t deadline = weir_time_after_ms(10000);
    conn c = {fd, NULL};
    int plain = 0;  /* a plaintext peer on a TLS data plane */
    int failed = 0; /* ...that failed its channel */
    ssize_t got = 1;
    if (n->o.tls_server) {
        int t = speaks_tls(fd, deadline);
        if (t == 1) {
            char tmsg[512];
            int te = weir_tls_accept(n->o.tls_server, fd, deadline, &c.tls, tmsg, sizeof(tmsg));
            if (te) {
                got = te;
                snprintf(why, sizeof(why), "%s", tmsg);
            }
        } else if (t < 0) {
            got = t;
        } else {
            plain = 1;
        }
    }
    if (got > 0)
        got = rbuf_next(&s->b, &c, 64, &f, deadline);
    weir__wire_msg m = {0};
    int e = why[0]     ? (int)got
            : got > 0  ? weir__wire_decode(f, (size_t)got, &m, why, sizeof(why))
            : got == 0 ? -ECONNRESET
                       : (int)got;
    rx_channel *rx = NULL;
    if (got == 0)
        snprintf(why, sizeof(why), "it closed before its HELLO");
    if (got == -EMSGSIZE && !n->o.tls_server && s->b.end > s->b.start && s->b.p[s->b.start] == 0x16)
        snprintf(why, sizeof(why),
                 "it speaks TLS, and this process's data plane is plaintext (" TLS_HINT ")");
    if (!e && m.kind != WEIR__WIRE_HELLO) {
        weir__wire_msg_free(&m);
        e = -EBADMSG;
        snprintf(why, sizeof(why), "its first frame is not a HELLO");
    }
    if (!e && (m.u.hello.channel >= n->nrx_slots || !(rx = n->rx[m.u.hello.channel]) ||
               atomic_load(&rx->claimed)))
        e = -ENOENT;
    if (!e) {
        weir__wire_hello want = hello_of(n, &rx->pc);
        e = weir__wire_hello_check(&m.u.hello, &want, why, sizeof(why));
    }
    int free_slot = 0;
    if (!e && plain) {
        /* The producer of a channel here, without TLS: the job cannot go
         * on, and it says why now. */
        if (atomic_compare_exchange_strong(&rx->claimed, &free_slot, 2)) {
            rx_fail(rx, -EPROTO,
                    "its producer connected without TLS, and this process's data plane is TLS "
                    "(" TLS_HINT ")");
            failed = 1;
        }
        e = -EPROTO;
    } else if (!e && !atomic_compare_exchange_strong(&rx->claimed, &free_slot, 1)) {
        e = -ENOENT; /* another connection took it first, or it has failed */
    }
    if (e) {
        /* A stranger, or a peer of another plan: drop the connection,
         * keep listening (the real producer may still come). Cancelled:
         * the run is ending. */
        if (e != -ECANCELED && !failed)
            weir__log(WEIR__LOG_WARN, "stream.channel", "dropped a connection%s: %s%s",
                      plain ? " without TLS" : "",
                      why[0]         ? why
                      : e == -ENOENT ? "not a channel this process expects"
                                     : weir_strerror(e),
                      plain ? " (" TLS_HINT ")" : "");
        rbuf_close(&s->b);
        weir__free(s);
        conn_close(&c, 1);
        return;
    }
    atomic_fetch_add(&n->received, (uint64_t)got + 4);
    if (c.tls && weir__log_level() >= WEIR__LOG_DEBUG) {
        char name[256];
        describe(n->r, &rx->pc, name, sizeof(name));
        weir__log(WEIR__LOG_DEBUG, "stream.channel", "%s: its producer is in, over TLS", name);
    }
    rx->c = c;
    s->rx = rx;
    atomic_fetch_add(&n->attached, 1);
    if (!weir_scope_spawn(
            n->fibers, rx_reader, s,
            &(weir_spawn_opts){.name = "channel reader", .stack_size = FIBER_STACK})) {
        rbuf_close(&s->b);
        weir__free(s);
        rx_fail(rx, -ENOMEM, "could not start its reader");
    }
}

typedef struct attach_arg {
    weir__tcp_net *n;
    int fd;
} attach_arg;

static intptr_t attach_main(void *arg)
{
    attach_arg a = *(attach_arg *)arg;
    weir__free(arg);
    attach(a.n, a.fd);
    return 0;
}

static intptr_t acceptor(void *arg)
{
    weir__tcp_net *n = arg;
    int64_t ms = n->o.connect_timeout_ms > 0 ? n->o.connect_timeout_ms : 30000;
    int64_t deadline = weir_time_after_ms(ms);
    while (atomic_load(&n->attached) < atomic_load(&n->expected)) {
        int fd = weir_net_accept(n->lfd, NULL, deadline);
        if (fd == -ECANCELED)
            return 0;
        if (fd == -ETIMEDOUT) {
            char what[96];
            snprintf(what, sizeof(what), "did not connect in %" PRId64 " ms", ms);
            fail_unattached(n, -ETIMEDOUT, what);
            return 0;
        }
        if (fd < 0) {
            if (weir_time_sleep(10 * WEIR_MSEC) < 0)
                return 0;
            continue;
        }
        weir_net_set_nodelay(fd, 1);
        attach_arg *a = weir__malloc(sizeof(*a));
        if (a)
            *a = (attach_arg){n, fd};
        if (!a || !weir_scope_spawn(
                      n->fibers, attach_main, a,
                      &(weir_spawn_opts){.name = "channel attach", .stack_size = FIBER_STACK})) {
            weir__free(a);
            attach(n, fd); /* here, then */
        }
    }
    return 0;
}

static int rx_send_batch(weir__channel *c, batch *b, uint64_t *waited_ns)
{
    (void)c, (void)b, (void)waited_ns;
    return -EINVAL; /* a receiving end sends nothing */
}

static int rx_send_ctl(weir__channel *c, int kind, int64_t v)
{
    (void)c, (void)kind, (void)v;
    return -EINVAL;
}

/* The consumer processed one of our batches: a credit back - though not
 * always at once. Credits go back together, in one CREDIT frame, once half
 * the channel's are owed or when the consumer has no other batch of this
 * channel left to process (it may be about to wait for one). The producer
 * is never left waiting for a credit the consumer holds: when it has spent
 * all of its credits, every one of its batches is at the consumer, which
 * returns them at the latest with the last one it processes (an input held
 * back while a barrier aligns keeps what it owes until it is released, as
 * it keeps its batches). */
static void rx_credit(weir__channel *c)
{
    rx_channel *rx = (rx_channel *)c;
    int left = atomic_fetch_sub(&rx->in_flight, 1) - 1;
    if (++rx->owed < (tcp_credits(rx->net) + 1) / 2 && left > 0)
        return;
    uint8_t f[WEIR__WIRE_CREDIT_SIZE];
    size_t len = weir__wire_encode_credit(f, rx->owed);
    rx->owed = 0;
    /* A failed write means the producer is gone: its reader notices. */
    if (rx->c.fd >= 0 && conn_write(&rx->c, f, len, WEIR_FOREVER) == 0)
        atomic_fetch_add_explicit(&rx->net->sent, len, memory_order_relaxed);
}

static void rx_free(weir__channel *c)
{
    rx_channel *rx = (rx_channel *)c;
    conn_close(&rx->c, rx->broken);
    weir__batch_free(c->open);
    weir__free(rx);
}

static const weir__channel_ops rx_ops = {"tcp-receive", rx_send_batch, rx_send_ctl,
                                         rx_credit,     rx_free,       NULL};

/* ---- the factory and the net ---------------------------------------------------------------- */
static weir__channel *factory(void *arg, run *r, const weir__plan_channel *pc, subtask *prod,
                              subtask *cons, int *err)
{
    weir__tcp_net *n = arg;
    n->r = r;
    if (prod && cons)
        return weir__channel_local_new(cons, (int)r->plan->credits);
    if (prod) {
        tx_channel *tx = weir__calloc(1, sizeof(*tx));
        if (!tx || !(tx->credits = weir_sem_new(tcp_credits(n)))) {
            weir__free(tx);
            *err = -ENOMEM;
            return NULL;
        }
        tx->ch.ops = &tx_ops;
        tx->net = n;
        tx->pc = *pc;
        tx->c.fd = -1;
        tx->to = n->o.place(n->o.place_arg, pc->to_chain, pc->to_sub);
        if (tx->to < 0 || tx->to >= n->o.nprocs) {
            tx_free(&tx->ch);
            *err = -EINVAL;
            return NULL;
        }
        return &tx->ch;
    }
    if (!n->rx) {
        n->nrx_slots = r->plan->nchannels;
        if (!(n->rx = weir__calloc(n->nrx_slots ? n->nrx_slots : 1, sizeof(*n->rx)))) {
            *err = -ENOMEM;
            return NULL;
        }
    }
    rx_channel *rx = weir__calloc(1, sizeof(*rx));
    if (!rx) {
        *err = -ENOMEM;
        return NULL;
    }
    rx->ch.ops = &rx_ops;
    rx->net = n;
    rx->pc = *pc;
    rx->cons = cons;
    rx->c.fd = -1;
    n->rx[pc->id] = rx;
    atomic_fetch_add(&n->expected, 1);
    return &rx->ch;
}

static int here(void *arg, uint32_t chain, uint32_t sub)
{
    weir__tcp_net *n = arg;
    return n->o.place(n->o.place_arg, chain, sub) == n->o.self;
}

static int start(void *arg, run *r)
{
    weir__tcp_net *n = arg;
    n->r = r;
    if (!(n->fibers = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER)))
        return -ENOMEM;
    if (atomic_load(&n->expected) &&
        !weir_scope_spawn(n->fibers, acceptor, n,
                          &(weir_spawn_opts){.name = "channel accept", .stack_size = FIBER_STACK}))
        return -ENOMEM;
    return 0;
}

static void stop(void *arg, run *r)
{
    weir__tcp_net *n = arg;
    (void)r;
    if (!n->fibers)
        return;
    weir_scope_cancel(n->fibers);
    weir_scope_join(n->fibers, NULL);
    weir_scope_free(n->fibers);
    n->fibers = NULL;
}

static weir__ckpt_link *make_link(void *arg, run *r)
{
    weir__tcp_net *n = arg;
    weir__ckpt_link *l =
        weir__ckpt_link_tcp(r, &(weir__ckpt_tcp_opts){n->o.self, n->o.nprocs, n->o.coordinator,
                                                      n->control_fds, n->o.place, n->o.place_arg});
    if (l) /* the link owns the sockets now */
        for (int i = 0; i < n->o.nprocs; i++)
            n->control_fds[i] = -1;
    return l;
}

void weir__tcp_deploy(weir__tcp_net *n, weir__deploy *d)
{
    *d = (weir__deploy){.here = here,
                        .channel = factory,
                        .start = start,
                        .stop = stop,
                        .link = n->control_fds ? make_link : NULL,
                        .worker = n->control_fds && n->o.self != n->o.coordinator,
                        .arg = n};
}

/* weir__tcp_new's way out: the sockets stay the caller's. */
static weir__tcp_net *new_failed(weir__tcp_net *n, int err)
{
    n->lfd = -1;
    weir__free(n->control_fds);
    n->control_fds = NULL;
    weir__tcp_free(n);
    errno = err;
    return NULL;
}

weir__tcp_net *weir__tcp_new(const weir__tcp_opts *o)
{
    if (!o || o->nprocs < 1 || o->self < 0 || o->self >= o->nprocs || !o->place || !o->hosts ||
        !o->ports || (o->control_fds && (o->coordinator < 0 || o->coordinator >= o->nprocs)) ||
        !o->tls_server != !o->tls_client) {
        errno = EINVAL;
        return NULL;
    }
    weir__tcp_net *n = weir__calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    n->o = *o;
    n->o.hosts = NULL;
    n->o.ports = NULL;
    n->o.control_fds = NULL;
    n->lfd = o->listen_fd;
    n->hosts = weir__calloc((size_t)o->nprocs, sizeof(*n->hosts));
    n->ports = weir__calloc((size_t)o->nprocs, sizeof(*n->ports));
    if (!n->hosts || !n->ports)
        return new_failed(n, ENOMEM);
    for (int i = 0; i < o->nprocs; i++) {
        if (!(n->hosts[i] = weir__strdup(o->hosts[i] ? o->hosts[i] : "127.0.0.1")))
            return new_failed(n, ENOMEM);
        n->ports[i] = o->ports[i];
    }
    if (o->control_fds) {
        if (!(n->control_fds = weir__calloc((size_t)o->nprocs, sizeof(int))))
            return new_failed(n, ENOMEM);
        memcpy(n->control_fds, o->control_fds, (size_t)o->nprocs * sizeof(int));
    }
    return n;
}

void weir__tcp_free(weir__tcp_net *n)
{
    if (!n)
        return;
    stop(n, NULL);
    for (int i = 0; n->hosts && i < n->o.nprocs; i++)
        weir__free(n->hosts[i]);
    weir__free(n->hosts);
    weir__free(n->ports);
    weir__free(n->rx);
    for (int i = 0; n->control_fds && i < n->o.nprocs; i++)
        if (n->control_fds[i] >= 0 && i != n->o.self)
            weir_io_close(n->control_fds[i]);
    weir__free(n->control_fds);
    if (n->lfd >= 0)
        weir_io_close(n->lfd);
    weir__free(n);
}
