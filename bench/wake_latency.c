/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wake_latency.c - cross-thread wake round trip: two loops on two threads,
 * one stackless task on each, passing a turn back and forth with
 * weir_task_wake (the waker path a channel or oneshot uses). Each side
 * parks between turns, so every hop is a wake of a task whose loop may be
 * asleep in its backend. Prints the median round trip in microseconds.
 *
 *   wake_latency [round_trips]      default 100000
 */
#include <pthread.h>
#include <stdatomic.h>

#include "bench.h"

static long trips = 100000;
static _Atomic long turn; /* even: ping's move, odd: pong's move */
static weir_task *_Atomic tasks[2];

struct side {
    int parity;
    long moves;
};

static int side_poll(void *p, intptr_t *out)
{
    struct side *s = p;
    for (;;) {
        long t = atomic_load_explicit(&turn, memory_order_acquire);
        if (t >= 2 * trips) {
            *out = 0;
            return WEIR_READY;
        }
        if ((t & 1) != s->parity)
            return WEIR_PENDING; /* the other side will wake us */
        atomic_store_explicit(&turn, t + 1, memory_order_release);
        s->moves++;
        weir_task *peer;
        while (!(peer = atomic_load_explicit(&tasks[!s->parity], memory_order_acquire)))
            ;
        weir_task_wake(peer);
    }
}

static void run_side(int parity)
{
    weir_loop *l = weir_loop_new(NULL);
    struct side s = {.parity = parity};
    weir_spawn_opts o = {.name = parity ? "pong" : "ping", .loop = l};
    weir_task *t = weir_task_spawn_stackless(side_poll, &s, &o);
    atomic_store_explicit(&tasks[parity], weir_task_ref(t), memory_order_release);
    weir_loop_run(l);
    weir_task_join(t, NULL, WEIR_FOREVER);
    weir_loop_free(l);
}

static void *pong_thread(void *arg)
{
    (void)arg;
    run_side(1);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        trips = atol(argv[1]);
    int runs = bench_runs(5);
    double v[100];
    char impl[32] = "weir";
    for (int r = 0; r < runs; r++) {
        atomic_store(&turn, 0);
        atomic_store(&tasks[0], NULL);
        atomic_store(&tasks[1], NULL);
        pthread_t th;
        pthread_create(&th, NULL, pong_thread, NULL);
        int64_t t0 = weir_time_now();
        run_side(0);
        pthread_join(th, NULL);
        v[r] = (double)(weir_time_now() - t0) / 1e3 / (double)trips;
        weir_task_unref(tasks[0]);
        weir_task_unref(tasks[1]);
    }
    /* The label needs a loop on this thread: make one just to ask. */
    weir_loop *l = weir_loop_new(NULL);
    snprintf(impl, sizeof(impl), "%s", bench_impl());
    weir_loop_free(l);
    printf("bench=wake_latency impl=%s round_trips=%ld us_per_roundtrip=%.2f runs=%d\n", impl,
           trips, bench_median(v, runs), runs);
    return 0;
}
