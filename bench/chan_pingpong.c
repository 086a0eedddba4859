/* SPDX-License-Identifier: Apache-2.0 */
/*
 * chan_pingpong.c - round-trip latency of channels and oneshots between two
 * tasks, on one loop and across two loops on two threads.
 *
 * Exactly what is measured, so that peers can be written identically:
 *
 *   kind=chan             two channels `a` and `b` of capacity 1 carrying an
 *                         8-byte integer (weir_chan_new(8, 1); Tokio
 *                         `tokio::sync::mpsc::channel::<i64>(1)`; Go
 *                         `make(chan int64, 1)`). Task "ping" does, for
 *                         i in 0..N: send(a, i); v = recv(b) (check v == i).
 *                         Task "pong" loops v = recv(a); send(b, v) until
 *                         `a` is closed (ping closes it after the last trip).
 *   kind=chan_rendezvous  the same over capacity-0 channels: weir_chan_new(8, 0),
 *                         Go `make(chan int64)` (Go's "unbuffered"); Tokio
 *                         has no rendezvous mpsc, so it has no peer line.
 *   kind=oneshot          a new oneshot per hop. Ping holds the sending end
 *                         of oneshot `cur` (pong holds its receiving end);
 *                         for each trip ping creates `reply`, sends `reply`
 *                         through `cur`, and waits on `reply`; pong receives
 *                         `reply` from its current oneshot, creates `next`,
 *                         sends `next` through `reply` and waits on `next`,
 *                         which ping uses as its next `cur`. So each round
 *                         trip creates two oneshots and does two sends and
 *                         two receives. Tokio: `struct Msg(Option<oneshot::
 *                         Sender<Msg>>)` over `tokio::sync::oneshot`; Go: a
 *                         `type msg chan msg` made with capacity 1 per hop.
 *                         After N trips ping sends a null/None to end pong.
 *
 * Both tasks are weir stackless tasks (Tokio: async tasks; Go: goroutines).
 * threads=1: both on one loop (Tokio current_thread runtime; Go
 * GOMAXPROCS=1). threads=2: ping on a loop on the main thread, pong on a
 * second loop on its own thread (Tokio multi_thread with 2 workers, each
 * task spawned so that they run on different workers as far as Tokio lets
 * you; Go GOMAXPROCS=2). threads=2 mode=rt: both tasks spawned from the
 * main thread into one multi-threaded runtime of 2 scheduler threads
 * (weir_rt_new, threads=2; spawn with .rt, so they enter through the
 * injection queue), which places them as it likes - with its LIFO slot
 * (WEIR_LIFO=1, the default) a task woken by a running task runs next on
 * the waker's thread, so the pair usually shares one thread; this is the
 * line to set beside Tokio's `threads=2 mode=spawned` and Go's threads=2.
 * The main thread joins both (blocking). Time runs from ping's first send
 * to its last receive; ns_per_roundtrip = that time / N. Each configuration
 * runs `runs` times (BENCH_RUNS, default 5) and the median is printed:
 *
 *   bench=chan_pingpong impl=weir-uring kind=chan threads=1 ns_per_roundtrip=... runs=5
 *
 * The mode=rt lines add the counters of their runtime (a fresh one per
 * kind) over their runs (see spawn_join_mt.c): polls per thread, steals,
 * lifo_polls, remote_wakes.
 *
 *   chan_pingpong [round_trips]      default 200000 (BENCH_QUICK=1: 50000)
 */
#include <pthread.h>
#include <stdatomic.h>

#include "bench.h"
#include "weir/sync.h"

enum { K_CHAN, K_RENDEZVOUS, K_ONESHOT };
static const char *kind_name[] = {"chan", "chan_rendezvous", "oneshot"};

static long trips = 200000;

struct shared {
    int kind;
    weir_chan *a, *b;
    weir_oneshot *first; /* oneshot: ping sends on it, pong receives */
    int64_t ns;          /* ping's measured time */
};

struct ping {
    weir_co co;
    struct shared *s;
    weir_sync_op op;
    long i;
    int64_t v, res, t0;
    weir_oneshot *cur, *reply;
};

static int ping_poll(void *p, intptr_t *out)
{
    struct ping *f = p;
    struct shared *s = f->s;
    WEIR_BEGIN(&f->co);
    f->t0 = weir_time_now();
    if (s->kind != K_ONESHOT) {
        for (f->i = 0; f->i < trips; f->i++) {
            f->v = f->i;
            weir_chan_send_start(&f->op, s->a, &f->v, WEIR_FOREVER);
            WEIR_AWAIT(&f->co, &f->op, f->res);
            weir_chan_recv_start(&f->op, s->b, &f->v, WEIR_FOREVER);
            WEIR_AWAIT(&f->co, &f->op, f->res);
            if (f->res != 0 || f->v != f->i)
                abort();
        }
        s->ns = weir_time_now() - f->t0;
        weir_chan_close(s->a);
    } else {
        f->cur = s->first;
        for (f->i = 0; f->i < trips; f->i++) {
            f->reply = weir_oneshot_new();
            if (!f->reply || weir_oneshot_send(f->cur, (intptr_t)f->reply) != 0)
                abort();
            weir_oneshot_recv_start(&f->op, f->reply, WEIR_FOREVER);
            WEIR_AWAIT(&f->co, &f->op, f->res);
            if (f->res != 0)
                abort();
            f->cur = (weir_oneshot *)weir_oneshot_value(f->reply);
            weir_oneshot_close_rx(f->reply);
        }
        s->ns = weir_time_now() - f->t0;
        weir_oneshot_send(f->cur, 0); /* the end */
    }
    WEIR_RETURN(&f->co, out, 0);
    WEIR_END(&f->co);
}

struct pong {
    weir_co co;
    struct shared *s;
    weir_sync_op op;
    int64_t v, res;
    weir_oneshot *cur, *reply, *next;
};

static int pong_poll(void *p, intptr_t *out)
{
    struct pong *f = p;
    struct shared *s = f->s;
    WEIR_BEGIN(&f->co);
    if (s->kind != K_ONESHOT) {
        for (;;) {
            weir_chan_recv_start(&f->op, s->a, &f->v, WEIR_FOREVER);
            WEIR_AWAIT(&f->co, &f->op, f->res);
            if (f->res != 0)
                break;
            weir_chan_send_start(&f->op, s->b, &f->v, WEIR_FOREVER);
            WEIR_AWAIT(&f->co, &f->op, f->res);
        }
    } else {
        f->cur = s->first;
        for (;;) {
            weir_oneshot_recv_start(&f->op, f->cur, WEIR_FOREVER);
            WEIR_AWAIT(&f->co, &f->op, f->res);
            f->reply = (weir_oneshot *)weir_oneshot_value(f->cur);
            weir_oneshot_close_rx(f->cur);
            if (f->res != 0 || !f->reply)
                break;
            f->next = weir_oneshot_new();
            if (!f->next || weir_oneshot_send(f->reply, (intptr_t)f->next) != 0)
                abort();
            f->cur = f->next;
        }
    }
    WEIR_RETURN(&f->co, out, 0);
    WEIR_END(&f->co);
}

static void *pong_thread(void *arg)
{
    struct shared *s = arg;
    weir_loop *l = weir_loop_new(NULL);
    struct pong f = {.s = s};
    weir_task *t = weir_task_spawn_stackless(pong_poll, &f, &(weir_spawn_opts){.loop = l});
    weir_loop_run(l);
    weir_task_join(t, NULL, WEIR_FOREVER);
    weir_loop_free(l);
    return NULL;
}

static double run_once(weir_loop *l, int kind, int threads)
{
    struct shared s = {.kind = kind};
    size_t cap = kind == K_RENDEZVOUS ? 0 : 1;
    s.a = weir_chan_new(sizeof(int64_t), cap);
    s.b = weir_chan_new(sizeof(int64_t), cap);
    s.first = kind == K_ONESHOT ? weir_oneshot_new() : NULL;
    if (!s.a || !s.b || (kind == K_ONESHOT && !s.first))
        abort();
    weir_spawn_opts o = {.loop = l};
    struct ping pf = {.s = &s};
    struct pong qf = {.s = &s};
    pthread_t th;
    weir_task *pt = weir_task_spawn_stackless(ping_poll, &pf, &o), *qt = NULL;
    if (threads == 2)
        pthread_create(&th, NULL, pong_thread, &s);
    else
        qt = weir_task_spawn_stackless(pong_poll, &qf, &o);
    weir_loop_run(l);
    weir_task_join(pt, NULL, WEIR_FOREVER);
    if (qt)
        weir_task_join(qt, NULL, WEIR_FOREVER);
    else
        pthread_join(th, NULL);
    weir_chan_unref(s.a);
    weir_chan_unref(s.b);
    return (double)s.ns / (double)trips;
}

/* threads=2 mode=rt: both tasks in the 2-thread runtime rt. */
static double run_rt(weir_rt *rt, int kind)
{
    struct shared s = {.kind = kind};
    size_t cap = kind == K_RENDEZVOUS ? 0 : 1;
    s.a = weir_chan_new(sizeof(int64_t), cap);
    s.b = weir_chan_new(sizeof(int64_t), cap);
    s.first = kind == K_ONESHOT ? weir_oneshot_new() : NULL;
    if (!s.a || !s.b || (kind == K_ONESHOT && !s.first))
        abort();
    weir_spawn_opts o = {.rt = rt};
    struct ping pf = {.s = &s};
    struct pong qf = {.s = &s};
    weir_task *pt = weir_task_spawn_stackless(ping_poll, &pf, &o);
    weir_task *qt = weir_task_spawn_stackless(pong_poll, &qf, &o);
    if (!pt || !qt)
        abort();
    if (weir_task_join(pt, NULL, WEIR_FOREVER) != 0 || weir_task_join(qt, NULL, WEIR_FOREVER) != 0)
        abort();
    weir_chan_unref(s.a);
    weir_chan_unref(s.b);
    return (double)s.ns / (double)trips;
}

/* The mode=rt line, on a runtime of its own (made and freed here, so that
 * its idle threads never share the machine with the other lines). */
static int rt_line(int kind, int runs)
{
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = 2});
    if (!rt) {
        perror("weir_rt_new");
        return -1;
    }
    weir_loop_stats st;
    uint64_t polls[2];
    double v[100];
    for (int r = 0; r < runs; r++)
        v[r] = run_rt(rt, kind);
    bench_rt_stats(rt, &st, polls);
    printf("bench=chan_pingpong impl=%s kind=%s threads=2 mode=rt ns_per_roundtrip=%.1f runs=%d "
           "polls=%s steals=%llu lifo_polls=%llu remote_wakes=%llu\n",
           bench_impl_rt(rt), kind_name[kind], bench_median(v, runs), runs,
           bench_fmt_polls(polls, 2), (unsigned long long)st.steals,
           (unsigned long long)st.lifo_polls, (unsigned long long)st.remote_wakes);
    weir_rt_free(rt);
    return 0;
}

int main(int argc, char **argv)
{
    const char *q = getenv("BENCH_QUICK");
    if (q && strcmp(q, "1") == 0)
        trips = 50000;
    if (argc > 1)
        trips = atol(argv[1]);
    if (trips <= 0)
        trips = 1;
    int runs = bench_runs(5);
    weir_loop *l = weir_loop_new(NULL);
    if (!l) {
        perror("weir_loop_new");
        return 1;
    }
    for (int kind = K_CHAN; kind <= K_ONESHOT; kind++) {
        for (int threads = 1; threads <= 2; threads++) {
            double v[100];
            for (int r = 0; r < runs; r++)
                v[r] = run_once(l, kind, threads);
            printf("bench=chan_pingpong impl=%s kind=%s threads=%d ns_per_roundtrip=%.1f "
                   "runs=%d\n",
                   bench_impl(), kind_name[kind], threads, bench_median(v, runs), runs);
        }
        if (rt_line(kind, runs) < 0)
            return 1;
        fflush(stdout);
    }
    weir_loop_free(l);
    return 0;
}
