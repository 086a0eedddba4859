/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_io_uring_sq.c - io_uring with a tiny submission queue: 200 reads
 * started in one turn on a 4-entry ring must all reach the kernel (by early
 * flushes, counted in forced_submits, or the backlog) and all complete with
 * their own data. Skipped (with a printed line) under WEIR_IO=epoll.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt/rt_int.h"
#include "test.h"
#include "weir/io.h"
#include "weir/rt.h"

enum { N = 200 };

struct reader {
    int fd;
    int id;
};

static intptr_t read_one(void *arg)
{
    struct reader *r = arg;
    char buf[32] = {0}, want[32];
    snprintf(want, sizeof(want), "pipe %d", r->id);
    ssize_t n = weir_io_read(r->fd, buf, sizeof(buf) - 1, weir_time_after_ms(10000));
    CHECK_EQ(n, (ssize_t)strlen(want));
    CHECK_STR(buf, want);
    return 0;
}

static int p[N][2];
static struct reader rs[N];

static intptr_t main_fiber(void *arg)
{
    (void)arg;
    weir_task *ts[N];
    for (int i = 0; i < N; i++) {
        rs[i] = (struct reader){p[i][0], i};
        ts[i] = weir_task_spawn(read_one, &rs[i], NULL);
        CHECK(ts[i] != NULL);
    }
    weir_time_sleep(20 * WEIR_MSEC); /* every reader is now blocked in the kernel */
    for (int i = 0; i < N; i++) {
        char msg[32];
        int len = snprintf(msg, sizeof(msg), "pipe %d", i);
        CHECK_EQ(write(p[i][1], msg, (size_t)len), len);
    }
    for (int i = 0; i < N; i++) {
        intptr_t v = -1;
        CHECK_EQ(weir_task_join(ts[i], &v, WEIR_FOREVER), 0);
        CHECK_EQ(v, 0);
    }
    return 0;
}

TEST(tiny_sq_many_reads)
{
    weir_loop_opts o = {.uring_entries = 4};
    weir_loop *l = weir_loop_new(&o);
    CHECK(l != NULL);
    if (strcmp(weir_loop_backend(l), "uring") != 0) {
        printf("    skipped: backend is %s, this test is for io_uring\n", weir_loop_backend(l));
        weir_loop_free(l);
        return;
    }
    for (int i = 0; i < N; i++)
        CHECK_EQ(pipe2(p[i], O_CLOEXEC), 0);
    weir_spawn_opts so = {.name = "main", .loop = l};
    weir_task *t = weir_task_spawn(main_fiber, NULL, &so);
    CHECK(t != NULL);
    CHECK_EQ(weir_loop_run(l), 0);
    intptr_t v = -1;
    CHECK_EQ(weir_task_join(t, &v, WEIR_FOREVER), 0);
    CHECK_EQ(v, 0);
    CHECK_GT(l->forced_submits, 0);
    printf("    forced_submits=%llu\n", (unsigned long long)l->forced_submits);
    weir_loop_free(l);
    for (int i = 0; i < N; i++) {
        close(p[i][0]);
        close(p[i][1]);
    }
}

/* Batching: ops started by many tasks in one turn reach the kernel in that
 * turn's single backend wait (one io_uring_submit), not one syscall each. */
static intptr_t read_quietly(void *arg)
{
    char c;
    return weir_io_read((int)(intptr_t)arg, &c, 1, weir_time_after_ms(10000));
}

TEST(one_submit_per_turn)
{
    enum { M = 50 };
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    int fds[M][2];
    weir_task *ts[M];
    for (int i = 0; i < M; i++) {
        CHECK_EQ(pipe2(fds[i], O_CLOEXEC), 0);
        weir_spawn_opts so = {.loop = l};
        ts[i] = weir_task_spawn(read_quietly, (void *)(intptr_t)fds[i][0], &so);
    }
    uint64_t waits0 = l->waits, forced0 = l->forced_submits;
    CHECK_GE(weir_loop_poll(l, 0), M); /* every task starts its read, then one wait */
    CHECK_EQ(l->waits - waits0, 1);
    CHECK_EQ(l->forced_submits - forced0, 0);
    for (int i = 0; i < M; i++)
        CHECK_EQ(write(fds[i][1], "x", 1), 1);
    CHECK_EQ(weir_loop_run(l), 0);
    for (int i = 0; i < M; i++) {
        intptr_t v = 0;
        CHECK_EQ(weir_task_join(ts[i], &v, WEIR_FOREVER), 0);
        CHECK_EQ(v, 1);
        close(fds[i][0]);
        close(fds[i][1]);
    }
    weir_loop_free(l);
}

/* SQPOLL is opt-in: a kernel thread polls the submission queue. */
static intptr_t sqpoll_echo(void *arg)
{
    int *fds = arg;
    for (int i = 0; i < 100; i++) {
        char out[16], in[16] = {0};
        int len = snprintf(out, sizeof(out), "msg %d", i);
        CHECK_EQ(weir_io_write(fds[1], out, (size_t)len, weir_time_after_ms(5000)), len);
        CHECK_EQ(weir_io_read(fds[0], in, sizeof(in) - 1, weir_time_after_ms(5000)), len);
        CHECK_STR(in, out);
    }
    return 0;
}

TEST(sqpoll_opt_in)
{
    weir_loop_opts o = {.uring_sqpoll = 1};
    const char *io = getenv("WEIR_IO");
    if (io && strcmp(io, "epoll") == 0) {
        printf("    skipped: WEIR_IO=epoll\n");
        return;
    }
    weir_loop *l = weir_loop_new(&o);
    if (!l) {
        printf("    skipped: SQPOLL ring refused here (%s)\n", strerror(errno));
        return;
    }
    int fds[2];
    CHECK_EQ(pipe2(fds, O_CLOEXEC), 0);
    weir_spawn_opts so = {.name = "sqpoll", .loop = l};
    weir_task *t = weir_task_spawn(sqpoll_echo, fds, &so);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    weir_loop_free(l);
    close(fds[0]);
    close(fds[1]);
}

TEST_MAIN()
