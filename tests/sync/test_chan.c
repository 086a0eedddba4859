/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_chan.c - channels and select: FIFO order, close semantics, try_*,
 * deadlines, stackless ops, and above all exact per-item accounting: many
 * producers and consumers (on one loop and on two loops on two threads),
 * with and without random timeouts and task cancellations, for rendezvous,
 * capacity 1, capacity 16 and unbounded channels, must receive every
 * delivered item exactly once and nothing that a sender was told was not
 * delivered. Select gets the same treatment: exactly one case takes effect.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "test.h"
#include "test_rt.h"
#include "weir/sync.h"

static const size_t caps[] = {0, 1, 16, WEIR_CHAN_UNBOUNDED};
#define NCAPS (sizeof(caps) / sizeof(caps[0]))

static uint64_t salt; /* varies the random choices between rounds */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Join; a task that was cancelled joins with -ECANCELED. */
static intptr_t join(weir_task *t)
{
    intptr_t r = -1;
    int j = weir_task_join(t, &r, WEIR_FOREVER);
    CHECK(j == 0 || j == -ECANCELED);
    return r;
}

/* ---- basics ----------------------------------------------------------------------- */
static intptr_t fifo_producer(void *arg)
{
    weir_chan *c = arg;
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(weir_chan_send(c, &i, WEIR_FOREVER), 0);
    weir_chan_close(c);
    return 0;
}

static intptr_t fifo_main(void *arg)
{
    weir_chan *c = weir_chan_new(sizeof(int), *(size_t *)arg);
    CHECK(c != NULL);
    weir_task *p = test_spawn(fifo_producer, c);
    int v, n = 0;
    while (weir_chan_recv(c, &v, WEIR_FOREVER) == 0)
        CHECK_EQ(v, n++);
    CHECK_EQ(n, 1000);
    CHECK_EQ(weir_chan_recv(c, &v, WEIR_FOREVER), -EPIPE);
    join(p);
    weir_chan_unref(c);
    return 0;
}

TEST(fifo_single_producer_consumer)
{
    for (size_t k = 0; k < NCAPS; k++) {
        size_t cap = caps[k];
        CHECK_EQ(test_run_main(fifo_main, &cap), 0);
    }
}

TEST(try_variants_and_len)
{
    /* try_* never wait and work outside any task. */
    weir_chan *c = weir_chan_new(sizeof(int), 2);
    int a = 1, b = 2, x = 3, v = 0;
    CHECK_EQ(weir_chan_try_recv(c, &v), -EAGAIN);
    CHECK_EQ(weir_chan_try_send(c, &a), 0);
    CHECK_EQ(weir_chan_try_send(c, &b), 0);
    CHECK_EQ(weir_chan_len(c), 2);
    CHECK_EQ(weir_chan_try_send(c, &x), -EAGAIN);
    CHECK_EQ(weir_chan_try_recv(c, &v), 0);
    CHECK_EQ(v, 1);
    CHECK_EQ(weir_chan_try_send(c, &x), 0);
    weir_chan_close(c);
    CHECK_EQ(weir_chan_try_send(c, &x), -EPIPE);
    CHECK_EQ(weir_chan_try_recv(c, &v), 0);
    CHECK_EQ(v, 2);
    CHECK_EQ(weir_chan_try_recv(c, &v), 0);
    CHECK_EQ(v, 3);
    CHECK_EQ(weir_chan_try_recv(c, &v), -EPIPE);
    CHECK_EQ(weir_chan_len(c), 0);
    weir_chan_unref(c);

    /* A rendezvous channel never buffers: try_send needs a waiting receiver. */
    c = weir_chan_new(sizeof(int), 0);
    CHECK_EQ(weir_chan_try_send(c, &a), -EAGAIN);
    CHECK_EQ(weir_chan_try_recv(c, &v), -EAGAIN);
    weir_chan_unref(c);

    CHECK_EQ(weir_chan_try_send(NULL, &a), -EINVAL);
    CHECK_EQ(weir_chan_recv(NULL, &v, WEIR_FOREVER), -EINVAL);
    CHECK_EQ(weir_chan_send(NULL, &v, WEIR_FOREVER), -EINVAL);
}

TEST(ref_unref_and_unbounded_growth)
{
    weir_chan *c = weir_chan_new(sizeof(uint64_t), WEIR_CHAN_UNBOUNDED);
    CHECK(weir_chan_ref(c) == c);
    /* Wrap the ring before it grows, so growth has to unwrap it. */
    uint64_t v;
    for (uint64_t i = 0; i < 5; i++)
        CHECK_EQ(weir_chan_try_send(c, &i), 0);
    for (uint64_t i = 0; i < 5; i++) {
        CHECK_EQ(weir_chan_try_recv(c, &v), 0);
        CHECK_EQ(v, i);
    }
    for (uint64_t i = 0; i < 100000; i++)
        CHECK_EQ(weir_chan_try_send(c, &i), 0);
    CHECK_EQ(weir_chan_len(c), 100000);
    for (uint64_t i = 0; i < 100000; i++) {
        CHECK_EQ(weir_chan_try_recv(c, &v), 0);
        CHECK_EQ(v, i);
    }
    weir_chan_unref(c);
    weir_chan_unref(c); /* the last reference frees (ASan reports a leak otherwise) */

    /* Zero-sized items: a signal channel. */
    c = weir_chan_new(0, 4);
    CHECK_EQ(weir_chan_try_send(c, NULL), 0);
    CHECK_EQ(weir_chan_try_recv(c, NULL), 0);
    CHECK_EQ(weir_chan_try_recv(c, NULL), -EAGAIN);
    weir_chan_unref(c);
}

/* close: waiting senders get -EPIPE (their items were not taken), buffered
 * items are drained, then receivers get -EPIPE. */
struct closer {
    weir_chan *c;
    int value;
    int res;
};

static intptr_t blocked_sender(void *arg)
{
    struct closer *s = arg;
    s->res = weir_chan_send(s->c, &s->value, WEIR_FOREVER);
    return 0;
}

static intptr_t blocked_receiver(void *arg)
{
    struct closer *s = arg;
    s->value = -1;
    s->res = weir_chan_recv(s->c, &s->value, WEIR_FOREVER);
    return 0;
}

static intptr_t close_main(void *arg)
{
    size_t cap = *(size_t *)arg;
    weir_chan *c = weir_chan_new(sizeof(int), cap);
    /* fill the buffer, then two senders wait */
    for (int i = 0; i < (int)cap; i++)
        CHECK_EQ(weir_chan_send(c, &i, WEIR_FOREVER), 0);
    struct closer s[2] = {{c, 100, 1}, {c, 101, 1}};
    weir_task *t0 = test_spawn(blocked_sender, &s[0]), *t1 = test_spawn(blocked_sender, &s[1]);
    CHECK_EQ(weir_time_sleep(WEIR_MSEC), 0);
    CHECK_EQ(s[0].res, 1); /* still waiting */
    weir_chan_close(c);
    join(t0);
    join(t1);
    CHECK_EQ(s[0].res, -EPIPE);
    CHECK_EQ(s[1].res, -EPIPE);
    int v;
    for (int i = 0; i < (int)cap; i++) {
        CHECK_EQ(weir_chan_recv(c, &v, WEIR_FOREVER), 0);
        CHECK_EQ(v, i);
    }
    CHECK_EQ(weir_chan_recv(c, &v, WEIR_FOREVER), -EPIPE);
    CHECK_EQ(weir_chan_send(c, &v, WEIR_FOREVER), -EPIPE);
    weir_chan_close(c); /* idempotent */
    weir_chan_unref(c);

    /* waiting receivers are woken with -EPIPE */
    c = weir_chan_new(sizeof(int), cap);
    struct closer r[2] = {{c, 0, 1}, {c, 0, 1}};
    t0 = test_spawn(blocked_receiver, &r[0]);
    t1 = test_spawn(blocked_receiver, &r[1]);
    CHECK_EQ(weir_time_sleep(WEIR_MSEC), 0);
    weir_chan_close(c);
    join(t0);
    join(t1);
    CHECK_EQ(r[0].res, -EPIPE);
    CHECK_EQ(r[1].res, -EPIPE);
    CHECK_EQ(r[0].value, -1); /* nothing written */
    weir_chan_unref(c);
    return 0;
}

TEST(close_semantics)
{
    size_t bounded[] = {0, 1, 3};
    for (int k = 0; k < 3; k++)
        CHECK_EQ(test_run_main(close_main, &bounded[k]), 0);
}

static intptr_t deadline_main(void *arg)
{
    (void)arg;
    weir_chan *c = weir_chan_new(sizeof(int), 1);
    int v = 7;
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_chan_recv(c, &v, weir_time_after_ms(5)), -ETIMEDOUT);
    CHECK_GE(weir_time_now() - t0, 5 * WEIR_MSEC);
    CHECK_EQ(v, 7);
    CHECK_EQ(weir_chan_send(c, &v, WEIR_FOREVER), 0);
    int w = 8;
    CHECK_EQ(weir_chan_send(c, &w, weir_time_after_ms(3)), -ETIMEDOUT); /* full */
    CHECK_EQ(weir_chan_len(c), 1);
    /* a ready item is taken even past the deadline: only a wait observes it */
    v = 0;
    CHECK_EQ(weir_chan_recv(c, &v, weir_time_now() - 1), 0);
    CHECK_EQ(v, 7);
    CHECK_EQ(weir_chan_try_recv(c, &v), -EAGAIN); /* the timed-out 8 was not delivered */
    /* nothing ready and the deadline passed: fails at once */
    t0 = weir_time_now();
    CHECK_EQ(weir_chan_recv(c, &v, t0 - 1), -ETIMEDOUT); /* (else it would wait forever) */
    /* the task deadline applies to channel waits too */
    weir_task_set_deadline(weir_time_after_ms(2));
    CHECK_EQ(weir_chan_recv(c, &v, WEIR_FOREVER), -ETIMEDOUT);
    weir_task_set_deadline(WEIR_FOREVER);
    weir_chan_unref(c);
    return 0;
}

TEST(deadlines)
{
    CHECK_EQ(test_run_main(deadline_main, NULL), 0);
}

static intptr_t cancel_victim(void *arg)
{
    struct closer *s = arg;
    s->value = -1;
    s->res = weir_chan_recv(s->c, &s->value, WEIR_FOREVER);
    return 0;
}

static intptr_t cancel_main(void *arg)
{
    (void)arg;
    weir_chan *c = weir_chan_new(sizeof(int), 0);
    struct closer s = {c, 0, 1};
    weir_task *t = test_spawn(cancel_victim, &s);
    CHECK_EQ(weir_time_sleep(WEIR_MSEC), 0);
    CHECK_EQ(weir_task_cancel(t), 0);
    join(t);
    CHECK_EQ(s.res, -ECANCELED);
    CHECK_EQ(s.value, -1);
    /* the cancelled receiver is gone from the queue */
    int v = 1;
    CHECK_EQ(weir_chan_try_send(c, &v), -EAGAIN);
    /* a sender cancelled the same way did not deliver */
    struct closer snd = {c, 5, 1};
    t = test_spawn(blocked_sender, &snd);
    CHECK_EQ(weir_time_sleep(WEIR_MSEC), 0);
    weir_task_cancel(t);
    join(t);
    CHECK_EQ(snd.res, -ECANCELED);
    CHECK_EQ(weir_chan_try_recv(c, &v), -EAGAIN);
    weir_chan_unref(c);
    return 0;
}

TEST(cancel_waiting_ops)
{
    CHECK_EQ(test_run_main(cancel_main, NULL), 0);
}

/* ---- stackless ------------------------------------------------------------------------ */
struct sl_frame {
    weir_co co;
    weir_sync_op op;
    weir_chan *c;
    int i, v, sum;
    int64_t res;
};

static int sl_producer(void *p, intptr_t *out)
{
    struct sl_frame *f = p;
    WEIR_BEGIN(&f->co);
    for (f->i = 1; f->i <= 100; f->i++) {
        f->v = f->i;
        weir_chan_send_start(&f->op, f->c, &f->v, WEIR_FOREVER);
        WEIR_AWAIT(&f->co, &f->op, f->res);
        CHECK_EQ(f->res, 0);
    }
    weir_chan_close(f->c);
    WEIR_RETURN(&f->co, out, 0);
    WEIR_END(&f->co);
}

static int sl_consumer(void *p, intptr_t *out)
{
    struct sl_frame *f = p;
    WEIR_BEGIN(&f->co);
    for (;;) {
        weir_chan_recv_start(&f->op, f->c, &f->v, WEIR_FOREVER);
        WEIR_AWAIT(&f->co, &f->op, f->res);
        if (f->res != 0)
            break;
        CHECK_EQ(f->v, f->i + 1);
        f->i = f->v;
        f->sum += f->v;
    }
    CHECK_EQ(f->res, -EPIPE);
    WEIR_RETURN(&f->co, out, f->sum);
    WEIR_END(&f->co);
}

TEST(stackless_send_recv)
{
    for (size_t k = 0; k < NCAPS; k++) {
        weir_loop *l = weir_loop_new(NULL);
        weir_chan *c = weir_chan_new(sizeof(int), caps[k]);
        struct sl_frame pf = {.c = c}, cf = {.c = c};
        weir_spawn_opts o = {.loop = l};
        weir_task *ct = weir_task_spawn_stackless(sl_consumer, &cf, &o);
        weir_task *pt = weir_task_spawn_stackless(sl_producer, &pf, &o);
        CHECK_EQ(weir_loop_run(l), 0);
        intptr_t r;
        CHECK_EQ(weir_task_join(pt, &r, WEIR_FOREVER), 0);
        CHECK_EQ(weir_task_join(ct, &r, WEIR_FOREVER), 0);
        CHECK_EQ(r, 5050);
        weir_chan_unref(c);
        weir_loop_free(l);
    }
}

/* ---- MPMC accounting ---------------------------------------------------------------------
 * K producers send ids p*PER + seq; M consumers record every id. With chaos,
 * sends and receives get random short deadlines (retried on -ETIMEDOUT) and
 * some producers and consumers are cancelled at random times. Every id is
 * then received exactly as often as its send reported success (0 or 1). */
#define K   4
#define M   3
#define PER 1500
#define NID (K * PER)

struct mpmc {
    weir_chan *c;
    int chaos;
    int nloops;
    _Atomic int producers_left;
    _Atomic uint8_t delivered[NID];
    _Atomic uint8_t received[NID];
    _Atomic long timeouts, fired, cancels; /* refused at once / timed out waiting */
    _Atomic long progress;                 /* items received so far */
};

struct worker {
    struct mpmc *m;
    int idx;
    int on_loop;
    int victim;
};

static int64_t chaos_deadline(struct mpmc *m, uint64_t *rng)
{
    if (!m->chaos || rng_next(rng) % 8)
        return WEIR_FOREVER;
    /* 0.2 ms in the past .. 2 ms ahead: some fail at once, some fire while
     * the op waits (the wheel ticks in 1 ms), some race a satisfier. */
    return weir_time_now() + (int64_t)(rng_next(rng) % 2200000) - 200000;
}

/* Chaos: now and then a worker dawdles, so that the other side has to wait
 * long enough for its deadlines to fire. */
static void chaos_pause(struct mpmc *m, uint64_t *rng)
{
    if (m->chaos && rng_next(rng) % 128 == 0)
        weir_time_sleep(WEIR_MSEC);
}

static intptr_t mpmc_producer(void *arg)
{
    struct worker *w = arg;
    struct mpmc *m = w->m;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(w->idx + 1) + salt;
    for (int s = 0; s < PER; s++) {
        uint32_t id = (uint32_t)(w->idx * PER + s);
        int r;
        for (;;) {
            int64_t dl = chaos_deadline(m, &rng), t0 = weir_time_now();
            if ((r = weir_chan_send(m->c, &id, dl)) != -ETIMEDOUT)
                break;
            atomic_fetch_add(dl > t0 ? &m->fired : &m->timeouts, 1);
        }
        if (r == -ECANCELED) {
            atomic_fetch_add(&m->cancels, 1);
            break;
        }
        CHECK_EQ(r, 0);
        atomic_store(&m->delivered[id], 1);
        chaos_pause(m, &rng);
    }
    if (atomic_fetch_sub(&m->producers_left, 1) == 1)
        weir_chan_close(m->c);
    return 0;
}

static intptr_t mpmc_consumer(void *arg)
{
    struct worker *w = arg;
    struct mpmc *m = w->m;
    uint64_t rng = 0x2545f4914f6cdd1dull * (uint64_t)(w->idx + 7) + salt;
    int last[K];
    for (int p = 0; p < K; p++)
        last[p] = -1;
    for (;;) {
        uint32_t id = UINT32_MAX;
        int64_t dl = chaos_deadline(m, &rng), t0 = weir_time_now();
        int r = weir_chan_recv(m->c, &id, dl);
        if (r == -ETIMEDOUT || r == -ECANCELED) {
            CHECK_EQ(id, UINT32_MAX); /* a failed receive received nothing */
            if (r == -ECANCELED) {
                atomic_fetch_add(&m->cancels, 1);
                break;
            }
            atomic_fetch_add(dl > t0 ? &m->fired : &m->timeouts, 1);
            continue;
        }
        if (r == -EPIPE)
            break;
        CHECK_EQ(r, 0);
        CHECK_LT(id, NID);
        /* per-producer FIFO as seen by one consumer */
        int p = (int)id / PER, s = (int)id % PER;
        CHECK_GT(s, last[p]);
        last[p] = s;
        CHECK_EQ(atomic_fetch_add(&m->received[id], 1), 0);
        atomic_fetch_add(&m->progress, 1);
        chaos_pause(m, &rng);
    }
    return 0;
}

/* One loop's supervisor: cancels its victims at random times, then joins
 * every task of its loop (so handles are only used on their own loop). */
struct supervisor {
    struct mpmc *m;
    weir_task *tasks[K + M];
    int victim[K + M];
    int n;
    uint64_t seed;
};

static intptr_t supervise(void *arg)
{
    struct supervisor *s = arg;
    for (int i = 0; i < s->n; i++) {
        if (!s->victim[i])
            continue;
        /* cancel somewhere in the first three quarters of the traffic */
        long at = (long)(rng_next(&s->seed) % (NID * 3 / 4));
        while (atomic_load(&s->m->progress) < at && atomic_load(&s->m->producers_left) > 0)
            weir_time_sleep(WEIR_MSEC / 4);
        weir_task_cancel(s->tasks[i]);
    }
    for (int i = 0; i < s->n; i++)
        join(s->tasks[i]);
    return 0;
}

struct loop_job {
    struct mpmc *m;
    struct worker w[K + M];
    int which;
};

static void run_loop_part(struct loop_job *j)
{
    struct mpmc *m = j->m;
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    struct supervisor sup = {.m = m, .seed = 0xabcdef12345ull + (uint64_t)j->which + salt};
    weir_spawn_opts o = {.loop = l};
    for (int i = 0; i < K + M; i++) {
        struct worker *w = &j->w[i];
        if (w->on_loop != j->which)
            continue;
        sup.tasks[sup.n] = weir_task_spawn(i < K ? mpmc_producer : mpmc_consumer, w, &o);
        CHECK(sup.tasks[sup.n] != NULL);
        sup.victim[sup.n++] = w->victim;
    }
    weir_task *st = weir_task_spawn(supervise, &sup, &o);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(weir_task_join(st, NULL, WEIR_FOREVER), 0);
    weir_loop_free(l);
}

static void *loop_thread(void *arg)
{
    run_loop_part(arg);
    return NULL;
}

static void mpmc_run(size_t cap, int nloops, int chaos)
{
    static struct mpmc m;
    memset(&m, 0, sizeof(m));
    m.c = weir_chan_new(sizeof(uint32_t), cap);
    m.chaos = chaos;
    m.nloops = nloops;
    atomic_store(&m.producers_left, K);
    struct loop_job jobs[2];
    for (int L = 0; L < 2; L++) {
        jobs[L].m = &m;
        jobs[L].which = L;
        for (int i = 0; i < K + M; i++) {
            int ci = i - K;
            jobs[L].w[i] = (struct worker){
                .m = &m,
                .idx = i < K ? i : ci,
                .on_loop = nloops == 1 ? 0 : i % 2,
                /* producers 1 and 3 and consumer 2 may be cancelled; consumers
                 * 0 and 1 (one per loop) never are, so the channel drains. */
                .victim = chaos && (i < K ? i % 2 == 1 : ci >= 2),
            };
        }
    }
    pthread_t th;
    if (nloops == 2)
        CHECK_EQ(pthread_create(&th, NULL, loop_thread, &jobs[1]), 0);
    run_loop_part(&jobs[0]);
    if (nloops == 2)
        CHECK_EQ(pthread_join(th, NULL), 0);
    long delivered = 0;
    for (int id = 0; id < NID; id++) {
        CHECK_EQ(atomic_load(&m.received[id]), atomic_load(&m.delivered[id]));
        delivered += atomic_load(&m.delivered[id]);
    }
    if (!chaos)
        CHECK_EQ(delivered, NID);
    else
        printf("  cap=%zu loops=%d delivered=%ld timeouts=%ld+%ld cancels=%ld\n", cap, nloops,
               delivered, atomic_load(&m.timeouts), atomic_load(&m.fired), atomic_load(&m.cancels));
    CHECK_EQ(weir_chan_len(m.c), 0);
    weir_chan_unref(m.c);
}

TEST(mpmc_one_loop)
{
    for (size_t k = 0; k < NCAPS; k++)
        mpmc_run(caps[k], 1, 0);
}

TEST(mpmc_cross_thread)
{
    for (size_t k = 0; k < NCAPS; k++)
        mpmc_run(caps[k], 2, 0);
}

TEST(mpmc_one_loop_chaos)
{
    for (salt = 0; salt < 5; salt++)
        for (size_t k = 0; k < NCAPS; k++)
            mpmc_run(caps[k], 1, 1);
}

TEST(mpmc_cross_thread_chaos)
{
    for (salt = 0; salt < 5; salt++)
        for (size_t k = 0; k < NCAPS; k++)
            mpmc_run(caps[k], 2, 1);
}

/* ---- select ------------------------------------------------------------------------------- */
static intptr_t select_ready_main(void *arg)
{
    (void)arg;
    weir_chan *a = weir_chan_new(sizeof(int), 1), *b = weir_chan_new(sizeof(int), 1);
    int v = 5, ra = -1, rb = -1;
    CHECK_EQ(weir_chan_send(b, &v, WEIR_FOREVER), 0);
    weir_select_case cs[2] = {{.kind = WEIR_SELECT_RECV, .chan = a, .item = &ra},
                              {.kind = WEIR_SELECT_RECV, .chan = b, .item = &rb}};
    CHECK_EQ(weir_select(cs, 2, WEIR_FOREVER), 1);
    CHECK_EQ(cs[1].result, 0);
    CHECK_EQ(rb, 5);
    CHECK_EQ(ra, -1);
    /* both ready: the first case wins (in-order priority) */
    int x = 1, y = 2;
    CHECK_EQ(weir_chan_send(a, &x, WEIR_FOREVER), 0);
    CHECK_EQ(weir_chan_send(b, &y, WEIR_FOREVER), 0);
    CHECK_EQ(weir_select(cs, 2, WEIR_FOREVER), 0);
    CHECK_EQ(ra, 1);
    CHECK_EQ(weir_chan_len(b), 1); /* untouched */
    /* several SEND cases with room: exactly one item is sent */
    weir_chan *d = weir_chan_new(sizeof(int), 4);
    weir_select_case ss[3] = {{.kind = WEIR_SELECT_SEND, .chan = b, .item = &x}, /* full */
                              {.kind = WEIR_SELECT_SEND, .chan = d, .item = &x},
                              {.kind = WEIR_SELECT_SEND, .chan = a, .item = &y}};
    CHECK_EQ(weir_select(ss, 3, WEIR_FOREVER), 1);
    CHECK_EQ(weir_chan_len(d), 1);
    CHECK_EQ(weir_chan_len(a), 0);
    CHECK_EQ(weir_chan_len(b), 1);
    /* a due TIMER case is ready in its turn */
    weir_select_case ts[2] = {{.kind = WEIR_SELECT_TIMER, .at = weir_time_now() - 1},
                              {.kind = WEIR_SELECT_RECV, .chan = b, .item = &rb}};
    CHECK_EQ(weir_select(ts, 2, WEIR_FOREVER), 0);
    CHECK_EQ(ts[0].result, 0);
    CHECK_EQ(weir_chan_len(b), 1);
    weir_chan_unref(a);
    weir_chan_unref(b);
    weir_chan_unref(d);
    return 0;
}

TEST(select_ready_case)
{
    CHECK_EQ(test_run_main(select_ready_main, NULL), 0);
}

struct delayed_send {
    weir_chan *c;
    int v;
    int64_t after_ns;
    int close;
};

static intptr_t delayed_sender(void *arg)
{
    struct delayed_send *d = arg;
    weir_time_sleep(d->after_ns);
    if (d->close)
        weir_chan_close(d->c);
    else
        CHECK_EQ(weir_chan_send(d->c, &d->v, WEIR_FOREVER), 0);
    return 0;
}

static intptr_t select_block_main(void *arg)
{
    (void)arg;
    weir_chan *c[3];
    for (int i = 0; i < 3; i++)
        c[i] = weir_chan_new(sizeof(int), i == 1 ? 0 : 2);
    int got[3] = {-1, -1, -1};
    weir_select_case cs[3];
    for (int i = 0; i < 3; i++)
        cs[i] = (weir_select_case){.kind = WEIR_SELECT_RECV, .chan = c[i], .item = &got[i]};
    struct delayed_send d = {c[1], 42, 2 * WEIR_MSEC, 0};
    weir_task *t = test_spawn(delayed_sender, &d);
    CHECK_EQ(weir_select(cs, 3, weir_time_after_ms(5000)), 1);
    CHECK_EQ(cs[1].result, 0);
    CHECK_EQ(got[1], 42);
    CHECK_EQ(got[0], -1);
    CHECK_EQ(got[2], -1);
    join(t);
    /* no part was left behind: a rendezvous send finds no receiver, and items
     * sent to the other channels stay there */
    int v = 9;
    CHECK_EQ(weir_chan_try_send(c[1], &v), -EAGAIN);
    CHECK_EQ(weir_chan_try_send(c[0], &v), 0);
    CHECK_EQ(weir_chan_len(c[0]), 1);
    CHECK_EQ(got[0], -1);

    /* a blocking select woken by close reports -EPIPE for that case */
    int r2 = -1;
    weir_select_case one[2] = {{.kind = WEIR_SELECT_RECV, .chan = c[2], .item = &r2},
                               {.kind = WEIR_SELECT_SEND, .chan = c[1], .item = &v}};
    struct delayed_send dc = {c[2], 0, WEIR_MSEC, 1};
    t = test_spawn(delayed_sender, &dc);
    CHECK_EQ(weir_select(one, 2, WEIR_FOREVER), 0);
    CHECK_EQ(one[0].result, -EPIPE);
    join(t);
    /* selecting on a closed channel: at once, -EPIPE (RECV after drain, SEND) */
    CHECK_EQ(weir_select(one, 1, WEIR_FOREVER), 0);
    CHECK_EQ(one[0].result, -EPIPE);
    weir_select_case snd = {.kind = WEIR_SELECT_SEND, .chan = c[2], .item = &v};
    CHECK_EQ(weir_select(&snd, 1, WEIR_FOREVER), 0);
    CHECK_EQ(snd.result, -EPIPE);
    weir_chan_close(c[0]); /* buffered item still drains through select */
    weir_select_case rc = {.kind = WEIR_SELECT_RECV, .chan = c[0], .item = &r2};
    CHECK_EQ(weir_select(&rc, 1, WEIR_FOREVER), 0);
    CHECK_EQ(rc.result, 0);
    CHECK_EQ(r2, 9);
    CHECK_EQ(weir_select(&rc, 1, WEIR_FOREVER), 0);
    CHECK_EQ(rc.result, -EPIPE);
    for (int i = 0; i < 3; i++)
        weir_chan_unref(c[i]);
    return 0;
}

TEST(select_blocking_woken_by_right_channel)
{
    CHECK_EQ(test_run_main(select_block_main, NULL), 0);
}

static intptr_t select_timer_main(void *arg)
{
    (void)arg;
    weir_chan *c = weir_chan_new(sizeof(int), 0);
    int v = -1;
    /* timer case fires before the deadline */
    int64_t t0 = weir_time_now();
    weir_select_case cs[3] = {{.kind = WEIR_SELECT_RECV, .chan = c, .item = &v},
                              {.kind = WEIR_SELECT_TIMER, .at = t0 + 20 * WEIR_MSEC},
                              {.kind = WEIR_SELECT_TIMER, .at = t0 + 5 * WEIR_MSEC}};
    CHECK_EQ(weir_select(cs, 3, t0 + 5 * WEIR_SEC), 2);
    CHECK_EQ(cs[2].result, 0);
    CHECK_GE(weir_time_now() - t0, 5 * WEIR_MSEC);
    CHECK_LT(weir_time_now() - t0, 20 * WEIR_MSEC * 50);
    /* the deadline before the timer case: -ETIMEDOUT */
    t0 = weir_time_now();
    cs[1].at = cs[2].at = t0 + 5 * WEIR_SEC;
    CHECK_EQ(weir_select(cs, 3, t0 + 3 * WEIR_MSEC), -ETIMEDOUT);
    CHECK_GE(weir_time_now() - t0, 3 * WEIR_MSEC);
    /* only timers: a sleep */
    t0 = weir_time_now();
    weir_select_case tc = {.kind = WEIR_SELECT_TIMER, .at = t0 + 2 * WEIR_MSEC};
    CHECK_EQ(weir_select(&tc, 1, WEIR_FOREVER), 0);
    CHECK_GE(weir_time_now() - t0, 2 * WEIR_MSEC);
    /* no cases at all: waits for the deadline */
    CHECK_EQ(weir_select(NULL, 0, weir_time_after_ms(1)), -ETIMEDOUT);
    CHECK_EQ(weir_select(cs, 3, weir_time_now() - 1), -ETIMEDOUT);
    int x = 1;
    CHECK_EQ(weir_chan_try_send(c, &x), -EAGAIN); /* no stale receiver */
    weir_select_case bad = {.kind = 99};
    CHECK_EQ(weir_select(&bad, 1, WEIR_FOREVER), -EINVAL);
    weir_chan_unref(c);
    return 0;
}

TEST(select_timer_and_deadline)
{
    CHECK_EQ(test_run_main(select_timer_main, NULL), 0);
}

struct sel_victim {
    weir_chan *a, *b;
    int res;
};

static intptr_t select_victim(void *arg)
{
    struct sel_victim *s = arg;
    int x = -1, y = 3;
    weir_select_case cs[2] = {{.kind = WEIR_SELECT_RECV, .chan = s->a, .item = &x},
                              {.kind = WEIR_SELECT_SEND, .chan = s->b, .item = &y}};
    s->res = weir_select(cs, 2, WEIR_FOREVER);
    CHECK_EQ(x, -1);
    return 0;
}

static intptr_t select_cancel_main(void *arg)
{
    (void)arg;
    struct sel_victim s = {weir_chan_new(sizeof(int), 0), weir_chan_new(sizeof(int), 0), 1};
    weir_task *t = test_spawn(select_victim, &s);
    CHECK_EQ(weir_time_sleep(WEIR_MSEC), 0);
    weir_task_cancel(t);
    join(t);
    CHECK_EQ(s.res, -ECANCELED);
    int v = 1;
    CHECK_EQ(weir_chan_try_send(s.a, &v), -EAGAIN);
    CHECK_EQ(weir_chan_try_recv(s.b, &v), -EAGAIN);
    weir_chan_unref(s.a);
    weir_chan_unref(s.b);
    return 0;
}

/* A select that sends and receives on the same rendezvous channel cannot
 * match itself; a peer takes the SEND case. */
static intptr_t select_self_peer(void *arg)
{
    int v = -1;
    CHECK_EQ(weir_chan_recv(arg, &v, WEIR_FOREVER), 0);
    CHECK_EQ(v, 31);
    return 0;
}

static intptr_t select_self_main(void *arg)
{
    (void)arg;
    weir_chan *c = weir_chan_new(sizeof(int), 0);
    int out = 31, in = -1;
    weir_select_case cs[2] = {{.kind = WEIR_SELECT_SEND, .chan = c, .item = &out},
                              {.kind = WEIR_SELECT_RECV, .chan = c, .item = &in}};
    CHECK_EQ(weir_select(cs, 2, weir_time_after_ms(2)), -ETIMEDOUT);
    weir_task *t = test_spawn(select_self_peer, c);
    CHECK_EQ(weir_select(cs, 2, WEIR_FOREVER), 0);
    CHECK_EQ(in, -1);
    join(t);
    weir_chan_unref(c);
    return 0;
}

TEST(select_same_channel_both_ways)
{
    CHECK_EQ(test_run_main(select_self_main, NULL), 0);
}

TEST(select_cancellation)
{
    CHECK_EQ(test_run_main(select_cancel_main, NULL), 0);
}

/* Stackless select: a receive on two channels, then a send. */
struct sl_sel {
    weir_co co;
    weir_sync_op op;
    weir_sync_op parts[2];
    weir_select_case cs[2];
    weir_chan *a, *b;
    int x, y;
    int64_t res;
};

static int sl_select(void *p, intptr_t *out)
{
    struct sl_sel *f = p;
    WEIR_BEGIN(&f->co);
    f->cs[0] = (weir_select_case){.kind = WEIR_SELECT_RECV, .chan = f->a, .item = &f->x};
    f->cs[1] = (weir_select_case){.kind = WEIR_SELECT_RECV, .chan = f->b, .item = &f->y};
    weir_select_start(&f->op, f->parts, f->cs, 2, WEIR_FOREVER);
    WEIR_AWAIT(&f->co, &f->op, f->res);
    CHECK_EQ(f->res, 1);
    CHECK_EQ(f->y, 77);
    f->cs[0] = (weir_select_case){.kind = WEIR_SELECT_SEND, .chan = f->a, .item = &f->y};
    weir_select_start(&f->op, f->parts, f->cs, 1, WEIR_FOREVER);
    WEIR_AWAIT(&f->co, &f->op, f->res);
    CHECK_EQ(f->res, 0);
    CHECK_EQ(f->cs[0].result, 0);
    WEIR_RETURN(&f->co, out, 0);
    WEIR_END(&f->co);
}

static intptr_t sl_select_peer(void *arg)
{
    struct sl_sel *f = arg;
    int v = 77;
    weir_time_sleep(WEIR_MSEC);
    CHECK_EQ(weir_chan_send(f->b, &v, WEIR_FOREVER), 0);
    v = 0;
    CHECK_EQ(weir_chan_recv(f->a, &v, WEIR_FOREVER), 0);
    CHECK_EQ(v, 77);
    return 0;
}

TEST(select_stackless)
{
    weir_loop *l = weir_loop_new(NULL);
    struct sl_sel f = {.a = weir_chan_new(sizeof(int), 0), .b = weir_chan_new(sizeof(int), 0)};
    weir_spawn_opts o = {.loop = l};
    weir_task *t = weir_task_spawn_stackless(sl_select, &f, &o);
    weir_task *p = weir_task_spawn(sl_select_peer, &f, &o);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    CHECK_EQ(weir_task_join(p, NULL, WEIR_FOREVER), 0);
    weir_chan_unref(f.a);
    weir_chan_unref(f.b);
    weir_loop_free(l);
}

/* Select accounting across threads: producers offer each id on both
 * channels in one select (exactly one takes it); consumers either select
 * on both or receive plainly from one; some selects time out at random.
 * Every id must be received exactly once. */
#define SP   3
#define SC   4
#define SPER 1500
#define SNID (SP * SPER)

struct selmix {
    weir_chan *ch[2];
    _Atomic int producers_left;
    _Atomic uint8_t received[SNID];
    _Atomic long timeouts;
};

struct selworker {
    struct selmix *m;
    int idx;
};

static intptr_t selmix_producer(void *arg)
{
    struct selworker *w = arg;
    struct selmix *m = w->m;
    uint64_t rng = 0x1234567ull * (uint64_t)(w->idx + 3);
    for (int s = 0; s < SPER; s++) {
        uint32_t id = (uint32_t)(w->idx * SPER + s);
        weir_select_case cs[2] = {{.kind = WEIR_SELECT_SEND, .chan = m->ch[0], .item = &id},
                                  {.kind = WEIR_SELECT_SEND, .chan = m->ch[1], .item = &id}};
        if (rng_next(&rng) & 1) { /* vary the order */
            weir_select_case t = cs[0];
            cs[0] = cs[1];
            cs[1] = t;
        }
        int64_t dl = rng_next(&rng) % 8 ? WEIR_FOREVER : weir_time_now() + 1500000;
        int r = weir_select(cs, 2, dl);
        if (r == -ETIMEDOUT) {
            atomic_fetch_add(&m->timeouts, 1);
            s--; /* not sent: offer it again */
            continue;
        }
        CHECK_GE(r, 0);
        CHECK_EQ(cs[r].result, 0);
    }
    if (atomic_fetch_sub(&m->producers_left, 1) == 1) {
        weir_chan_close(m->ch[0]);
        weir_chan_close(m->ch[1]);
    }
    return 0;
}

static void selmix_record(struct selmix *m, uint32_t id)
{
    CHECK_LT(id, SNID);
    CHECK_EQ(atomic_fetch_add(&m->received[id], 1), 0);
}

static intptr_t selmix_consumer(void *arg)
{
    struct selworker *w = arg;
    struct selmix *m = w->m;
    uint64_t rng = 0x7654321ull * (uint64_t)(w->idx + 5);
    if (w->idx % 2) { /* plain receiver on one channel */
        uint32_t id;
        while (weir_chan_recv(m->ch[w->idx / 2 % 2], &id, WEIR_FOREVER) == 0) {
            selmix_record(m, id);
            if (rng_next(&rng) % 64 == 0)
                weir_time_sleep(2 * WEIR_MSEC);
        }
        return 0;
    }
    int open[2] = {1, 1};
    while (open[0] || open[1]) {
        uint32_t v[2] = {UINT32_MAX, UINT32_MAX};
        weir_select_case cs[2];
        int map[2], n = 0;
        for (int i = 0; i < 2; i++)
            if (open[i]) {
                map[n] = i;
                cs[n++] =
                    (weir_select_case){.kind = WEIR_SELECT_RECV, .chan = m->ch[i], .item = &v[i]};
            }
        int64_t dl = rng_next(&rng) % 8 ? WEIR_FOREVER : weir_time_now() + 1500000;
        int r = weir_select(cs, n, dl);
        if (r == -ETIMEDOUT) {
            CHECK(v[0] == UINT32_MAX && v[1] == UINT32_MAX);
            atomic_fetch_add(&m->timeouts, 1);
            continue;
        }
        CHECK_GE(r, 0);
        int ch = map[r];
        CHECK_EQ(v[!ch], UINT32_MAX); /* the other case had no effect */
        if (cs[r].result == -EPIPE) {
            open[ch] = 0;
            continue;
        }
        CHECK_EQ(cs[r].result, 0);
        selmix_record(m, v[ch]);
        if (rng_next(&rng) % 64 == 0)
            weir_time_sleep(2 * WEIR_MSEC); /* let selects on the other side time out */
    }
    return 0;
}

struct selmix_job {
    struct selmix *m;
    struct selworker w[SP + SC];
    int which, nloops;
};

static void *selmix_loop(void *arg)
{
    struct selmix_job *j = arg;
    weir_loop *l = weir_loop_new(NULL);
    weir_spawn_opts o = {.loop = l};
    weir_task *ts[SP + SC];
    int n = 0;
    for (int i = 0; i < SP + SC; i++) {
        if (j->nloops == 2 && i % 2 != j->which)
            continue;
        ts[n++] = weir_task_spawn(i < SP ? selmix_producer : selmix_consumer, &j->w[i], &o);
    }
    CHECK_EQ(weir_loop_run(l), 0);
    for (int i = 0; i < n; i++)
        CHECK_EQ(weir_task_join(ts[i], NULL, WEIR_FOREVER), 0);
    weir_loop_free(l);
    return NULL;
}

static void selmix_run(size_t cap, int nloops)
{
    static struct selmix m;
    memset(&m, 0, sizeof(m));
    m.ch[0] = weir_chan_new(sizeof(uint32_t), cap);
    m.ch[1] = weir_chan_new(sizeof(uint32_t), cap);
    atomic_store(&m.producers_left, SP);
    struct selmix_job jobs[2];
    for (int L = 0; L < 2; L++) {
        jobs[L].m = &m;
        jobs[L].which = L;
        jobs[L].nloops = nloops;
        for (int i = 0; i < SP + SC; i++)
            jobs[L].w[i] = (struct selworker){.m = &m, .idx = i < SP ? i : i - SP};
    }
    pthread_t th;
    if (nloops == 2)
        CHECK_EQ(pthread_create(&th, NULL, selmix_loop, &jobs[1]), 0);
    selmix_loop(&jobs[0]);
    if (nloops == 2)
        CHECK_EQ(pthread_join(th, NULL), 0);
    for (int id = 0; id < SNID; id++)
        CHECK_EQ(atomic_load(&m.received[id]), 1);
    printf("  cap=%zu loops=%d select timeouts=%ld\n", cap, nloops, atomic_load(&m.timeouts));
    weir_chan_unref(m.ch[0]);
    weir_chan_unref(m.ch[1]);
}

TEST(select_exactly_one_case_one_loop)
{
    selmix_run(0, 1);
    selmix_run(1, 1);
    selmix_run(16, 1);
}

TEST(select_exactly_one_case_cross_thread)
{
    selmix_run(0, 2);
    selmix_run(1, 2);
    selmix_run(16, 2);
    selmix_run(WEIR_CHAN_UNBOUNDED, 2);
}

/* Review fixes: a select with a case ready takes it even past its deadline
 * (as send/recv do); fiber-only calls refuse a stackless task up front
 * instead of leaving an op queued on its stack. */
static intptr_t select_ready_past_deadline(void *arg)
{
    (void)arg;
    weir_chan *c = weir_chan_new(sizeof(int), 1);
    int v = 5, got = 0;
    CHECK_EQ(weir_chan_send(c, &v, WEIR_FOREVER), 0);
    weir_select_case cs[] = {{.kind = WEIR_SELECT_RECV, .chan = c, .item = &got}};
    CHECK_EQ(weir_select(cs, 1, weir_time_now() - 1), 0);
    CHECK_EQ(got, 5);
    CHECK_EQ(weir_select(cs, 1, weir_time_now() - 1), -ETIMEDOUT); /* nothing ready */
    weir_chan_unref(c);
    return 0;
}

TEST(select_ready_case_wins_over_past_deadline)
{
    CHECK_EQ(test_run_main(select_ready_past_deadline, NULL), 0);
}

struct sl_misuse {
    weir_chan *c;
    int rc;
};

static int sl_misuse_poll(void *p, intptr_t *out)
{
    struct sl_misuse *f = p;
    int v = 0;
    f->rc = weir_chan_recv(f->c, &v, WEIR_FOREVER); /* fiber form: refused */
    *out = 0;
    return WEIR_READY;
}

static intptr_t misuse_main(void *arg)
{
    (void)arg;
    struct sl_misuse f = {.c = weir_chan_new(sizeof(int), 1)};
    weir_task *t = weir_task_spawn_stackless(sl_misuse_poll, &f, NULL);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    CHECK_EQ(f.rc, -EINVAL);
    int v = 9;
    CHECK_EQ(weir_chan_send(f.c, &v, WEIR_FOREVER), 0); /* nothing stale queued */
    CHECK_EQ(weir_chan_try_recv(f.c, &v), 0);
    CHECK_EQ(v, 9);
    weir_chan_unref(f.c);
    return 0;
}

TEST(fiber_form_refuses_stackless_caller)
{
    CHECK_EQ(test_run_main(misuse_main, NULL), 0);
}

TEST_MAIN()
