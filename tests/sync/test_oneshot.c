/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_oneshot.c - oneshot: the value is delivered (sent before or after
 * the receiver waits), a sender that closes without sending gives the
 * receiver -EPIPE, a send to a closed receiver gives -EPIPE, try_recv,
 * deadlines and cancellation of a waiting receive, the stackless receive
 * with weir_oneshot_value, and many oneshots between two loops on two
 * threads. Both ends give their reference back exactly once, so ASan's
 * leak check proves every oneshot freed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "test.h"
#include "test_rt.h"
#include "weir/sync.h"

static intptr_t join(weir_task *t)
{
    intptr_t r = -1;
    int j = weir_task_join(t, &r, WEIR_FOREVER);
    CHECK(j == 0 || j == -ECANCELED);
    return r;
}

TEST(send_then_recv_outside_tasks)
{
    weir_oneshot *o = weir_oneshot_new();
    CHECK(o != NULL);
    intptr_t v = 0;
    CHECK_EQ(weir_oneshot_try_recv(o, &v), -EAGAIN);
    CHECK_EQ(weir_oneshot_send(o, 42), 0);
    CHECK_EQ(weir_oneshot_try_recv(o, &v), 0);
    CHECK_EQ(v, 42);
    weir_oneshot_close_rx(o);

    /* the sender closes without sending */
    o = weir_oneshot_new();
    weir_oneshot_close_tx(o);
    CHECK_EQ(weir_oneshot_try_recv(o, &v), -EPIPE);
    weir_oneshot_close_rx(o);

    /* the receiver is gone: the send fails and gives its reference back */
    o = weir_oneshot_new();
    weir_oneshot_close_rx(o);
    CHECK_EQ(weir_oneshot_send(o, 1), -EPIPE);

    CHECK_EQ(weir_oneshot_send(NULL, 1), -EINVAL);
    CHECK_EQ(weir_oneshot_try_recv(NULL, &v), -EINVAL);
    CHECK_EQ(weir_oneshot_recv(NULL, &v, WEIR_FOREVER), -EINVAL);
}

struct pair {
    weir_oneshot *o;
    intptr_t value;
    int close_only;
    int res;
};

static intptr_t late_sender(void *arg)
{
    struct pair *p = arg;
    weir_time_sleep(WEIR_MSEC);
    if (p->close_only)
        weir_oneshot_close_tx(p->o);
    else
        p->res = weir_oneshot_send(p->o, p->value);
    return 0;
}

static intptr_t waiting_main(void *arg)
{
    (void)arg;
    /* receiver waits, then the value arrives */
    struct pair p = {.o = weir_oneshot_new(), .value = 7};
    weir_task *t = weir_task_spawn(late_sender, &p, NULL);
    intptr_t v = 0;
    CHECK_EQ(weir_oneshot_recv(p.o, &v, WEIR_FOREVER), 0);
    CHECK_EQ(v, 7);
    CHECK_EQ(weir_oneshot_value(p.o), 7);
    join(t);
    CHECK_EQ(p.res, 0);
    weir_oneshot_close_rx(p.o);

    /* receiver waits, the sender closes: -EPIPE */
    struct pair q = {.o = weir_oneshot_new(), .close_only = 1};
    t = weir_task_spawn(late_sender, &q, NULL);
    CHECK_EQ(weir_oneshot_recv(q.o, &v, WEIR_FOREVER), -EPIPE);
    join(t);
    weir_oneshot_close_rx(q.o);

    /* a deadline, then the value still arrives for a later receive */
    weir_oneshot *o = weir_oneshot_new();
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_oneshot_recv(o, &v, weir_time_after_ms(3)), -ETIMEDOUT);
    CHECK_GE(weir_time_now() - t0, 3 * WEIR_MSEC);
    CHECK_EQ(weir_oneshot_send(o, 11), 0);
    CHECK_EQ(weir_oneshot_recv(o, &v, WEIR_FOREVER), 0);
    CHECK_EQ(v, 11);
    weir_oneshot_close_rx(o);
    return 0;
}

TEST(recv_waits_for_value_or_close)
{
    CHECK_EQ(test_run_main(waiting_main, NULL), 0);
}

static intptr_t victim(void *arg)
{
    struct pair *p = arg;
    intptr_t v = -1;
    p->res = weir_oneshot_recv(p->o, &v, WEIR_FOREVER);
    CHECK_EQ(v, -1);
    return 0;
}

static intptr_t cancel_main(void *arg)
{
    (void)arg;
    struct pair p = {.o = weir_oneshot_new(), .res = 1};
    weir_task *t = weir_task_spawn(victim, &p, NULL);
    CHECK_EQ(weir_time_sleep(WEIR_MSEC), 0);
    weir_task_cancel(t);
    join(t);
    CHECK_EQ(p.res, -ECANCELED);
    /* the cancelled receive left nothing behind: the value is still there */
    CHECK_EQ(weir_oneshot_send(p.o, 5), 0);
    intptr_t v;
    CHECK_EQ(weir_oneshot_try_recv(p.o, &v), 0);
    CHECK_EQ(v, 5);
    weir_oneshot_close_rx(p.o);
    return 0;
}

TEST(cancel_waiting_recv)
{
    CHECK_EQ(test_run_main(cancel_main, NULL), 0);
}

struct sl_recv {
    weir_co co;
    weir_sync_op op;
    weir_oneshot *o;
    int64_t res;
};

static int sl_receiver(void *p, intptr_t *out)
{
    struct sl_recv *f = p;
    WEIR_BEGIN(&f->co);
    weir_oneshot_recv_start(&f->op, f->o, WEIR_FOREVER);
    WEIR_AWAIT(&f->co, &f->op, f->res);
    CHECK_EQ(f->res, 0);
    intptr_t v = weir_oneshot_value(f->o);
    weir_oneshot_close_rx(f->o);
    WEIR_RETURN(&f->co, out, v);
    WEIR_END(&f->co);
}

TEST(stackless_recv)
{
    weir_loop *l = weir_loop_new(NULL);
    weir_spawn_opts o = {.loop = l};
    struct sl_recv f = {.o = weir_oneshot_new()};
    struct pair p = {.o = f.o, .value = 99};
    weir_task *t = weir_task_spawn_stackless(sl_receiver, &f, &o);
    weir_task *s = weir_task_spawn(late_sender, &p, &o);
    CHECK_EQ(weir_loop_run(l), 0);
    intptr_t r;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, 99);
    CHECK_EQ(weir_task_join(s, NULL, WEIR_FOREVER), 0);
    weir_loop_free(l);
}

/* Cross-thread request/reply: loop A sends a fresh oneshot per request
 * over a channel; loop B answers on it. Some replies are dropped
 * (close_tx) and some requesters leave without waiting (close_rx). Each
 * side records what it saw for each request; they must agree. */
#define NREQ 3000
enum { R_NONE, R_OK, R_EPIPE, R_CLOSED, R_GAVE_UP };
static int resp[NREQ], req[NREQ];
static weir_chan *requests;

struct request {
    int i;
    weir_oneshot *o;
};

static intptr_t responder(void *arg)
{
    (void)arg;
    struct request rq;
    while (weir_chan_recv(requests, &rq, WEIR_FOREVER) == 0) {
        if (rq.i % 7 == 3) {
            weir_oneshot_close_tx(rq.o);
            resp[rq.i] = R_CLOSED;
        } else {
            int r = weir_oneshot_send(rq.o, rq.i * 2);
            CHECK(r == 0 || r == -EPIPE);
            resp[rq.i] = r == 0 ? R_OK : R_EPIPE;
        }
    }
    return 0;
}

static void *responder_thread(void *arg)
{
    (void)arg;
    weir_loop *l = weir_loop_new(NULL);
    weir_task *t = weir_task_spawn(responder, NULL, &(weir_spawn_opts){.loop = l});
    CHECK_EQ(weir_loop_run(l), 0);
    join(t);
    weir_loop_free(l);
    return NULL;
}

static intptr_t requester(void *arg)
{
    (void)arg;
    for (int i = 0; i < NREQ; i++) {
        struct request rq = {i, weir_oneshot_new()};
        CHECK(rq.o != NULL);
        CHECK_EQ(weir_chan_send(requests, &rq, WEIR_FOREVER), 0);
        if (i % 11 == 5) { /* the requester leaves without waiting */
            weir_oneshot_close_rx(rq.o);
            req[i] = R_GAVE_UP;
            continue;
        }
        intptr_t v = -1;
        int r = weir_oneshot_recv(rq.o, &v, WEIR_FOREVER);
        CHECK(r == 0 || r == -EPIPE);
        if (r == 0)
            CHECK_EQ(v, i * 2);
        req[i] = r == 0 ? R_OK : R_EPIPE;
        weir_oneshot_close_rx(rq.o);
    }
    weir_chan_close(requests);
    return 0;
}

TEST(cross_thread_request_reply)
{
    requests = weir_chan_new(sizeof(struct request), 16);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, responder_thread, NULL), 0);
    CHECK_EQ(test_run_main(requester, NULL), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    int epipe_sends = 0;
    for (int i = 0; i < NREQ; i++) {
        if (req[i] == R_GAVE_UP) {
            CHECK_NE(resp[i], R_NONE); /* ok (sent first), -EPIPE, or closed */
            epipe_sends += resp[i] == R_EPIPE;
        } else if (resp[i] == R_CLOSED) {
            CHECK_EQ(req[i], R_EPIPE);
        } else {
            CHECK_EQ(resp[i], R_OK); /* a live receiver never makes a send fail */
            CHECK_EQ(req[i], R_OK);
        }
    }
    printf("  sends to a receiver that had left: %d\n", epipe_sends);
    weir_chan_unref(requests);
}

/* A send racing a receive's deadline on another thread, many times: the
 * parked receive is completed exactly once - with the value, or timed out,
 * after which the value is still there for try_recv. */
enum { RACE_ROUNDS = 3000 };
static weir_oneshot *race_os[RACE_ROUNDS];
static _Atomic int race_round = -1;

static void race_spin(int ns)
{
    int64_t end = weir_time_now() + ns;
    while (weir_time_now() < end)
        ;
}

static intptr_t race_receiver(void *arg)
{
    (void)arg;
    int timeouts = 0;
    for (int i = 0; i < RACE_ROUNDS; i++) {
        atomic_store(&race_round, i);
        intptr_t v = -1;
        int r = weir_oneshot_recv(race_os[i], &v, weir_time_now() + (i % 7) * 3000);
        if (r == 0) {
            CHECK_EQ(v, i);
        } else {
            CHECK_EQ(r, -ETIMEDOUT);
            timeouts++;
            while ((r = weir_oneshot_try_recv(race_os[i], &v)) == -EAGAIN)
                weir_task_yield();
            CHECK_EQ(r, 0);
            CHECK_EQ(v, i);
        }
        weir_oneshot_close_rx(race_os[i]);
    }
    return timeouts;
}

static intptr_t race_sender(void *arg)
{
    (void)arg;
    for (int i = 0; i < RACE_ROUNDS; i++) {
        while (atomic_load(&race_round) < i)
            ;
        race_spin((i % 5) * 2000);
        CHECK_EQ(weir_oneshot_send(race_os[i], i), 0);
    }
    return 0;
}

TEST(send_races_receive_deadline_across_threads)
{
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = 2});
    CHECK(rt != NULL);
    for (int i = 0; i < RACE_ROUNDS; i++)
        CHECK((race_os[i] = weir_oneshot_new()) != NULL);
    weir_spawn_opts r = {.name = "receiver", .loop = weir_rt_loop(rt, 0), .pin = 1};
    weir_spawn_opts s = {.name = "sender", .loop = weir_rt_loop(rt, 1), .pin = 1};
    weir_task *rt_h = weir_task_spawn(race_receiver, NULL, &r);
    weir_task *st_h = weir_task_spawn(race_sender, NULL, &s);
    CHECK(rt_h && st_h);
    CHECK_EQ(weir_task_join(st_h, NULL, weir_time_after_ms(60000)), 0);
    intptr_t timeouts = -1;
    CHECK_EQ(weir_task_join(rt_h, &timeouts, weir_time_after_ms(60000)), 0);
    CHECK_GT(timeouts, 0); /* both outcomes happened */
    CHECK_LT(timeouts, RACE_ROUNDS);
    weir_rt_free(rt);
}

TEST_MAIN()
