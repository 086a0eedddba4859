/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_uring_spin.c - the io_uring backend's spin before sleeping
 * (WEIR_URING_SPIN_US, src/io/uring.c): a fiber's request/response round
 * trips over a socketpair with an echo thread at the other end, one request
 * in flight at a time. With a spin of 2 ms (generous: the echo thread must
 * answer within it only now and then) the loop's waits catch completions
 * by spinning (weir_loop_stats spins_caught) and every byte comes back in
 * order; with the spin off it never spins. Skipped (with a printed line)
 * under WEIR_IO=epoll.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"
#include "weir/io.h"
#include "weir/rt.h"

enum { ROUNDS = 2000 };

static void *echo_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char b;
    while (read(fd, &b, 1) == 1)
        if (write(fd, &b, 1) != 1)
            break;
    return NULL;
}

static intptr_t rounds_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    for (int i = 0; i < ROUNDS; i++) {
        char out = (char)('a' + i % 26), in = 0;
        CHECK_EQ(weir_io_write(fd, &out, 1, weir_time_after_ms(30000)), 1);
        CHECK_EQ(weir_io_read(fd, &in, 1, weir_time_after_ms(30000)), 1);
        CHECK_EQ(in, out);
    }
    return 0;
}

/* ROUNDS round trips on a loop made with WEIR_URING_SPIN_US=spin_us; its
 * stats in *st. 0, or 1 when the loop is not io_uring (skipped). */
static int round_trips(const char *spin_us, weir_loop_stats *st)
{
    CHECK_EQ(setenv("WEIR_URING_SPIN_US", spin_us, 1), 0);
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    unsetenv("WEIR_URING_SPIN_US");
    if (strcmp(weir_loop_backend(l), "uring") != 0) {
        printf("    skipped: backend is %s, this test is for io_uring\n", weir_loop_backend(l));
        weir_loop_free(l);
        return 1;
    }
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    pthread_t echo;
    CHECK_EQ(pthread_create(&echo, NULL, echo_main, (void *)(intptr_t)sv[1]), 0);
    weir_spawn_opts so = {.name = "rounds", .loop = l};
    weir_task *t = weir_task_spawn(rounds_main, (void *)(intptr_t)sv[0], &so);
    CHECK(t != NULL);
    CHECK_EQ(weir_loop_run(l), 0);
    intptr_t v = -1;
    CHECK_EQ(weir_task_join(t, &v, WEIR_FOREVER), 0);
    CHECK_EQ(v, 0);
    CHECK_EQ(weir_loop_stats_get(l, st), 0);
    close(sv[0]); /* the echo thread reads EOF */
    CHECK_EQ(pthread_join(echo, NULL), 0);
    close(sv[1]);
    weir_loop_free(l);
    return 0;
}

TEST(a_round_trip_at_a_time_spins_instead_of_sleeping)
{
    weir_loop_stats st;
    if (round_trips("2000", &st))
        return;
    printf("    spins=%llu caught=%llu parks=%llu\n", (unsigned long long)st.spins,
           (unsigned long long)st.spins_caught, (unsigned long long)st.parks);
    CHECK_GT(st.spins_caught, 0);
    CHECK_LE(st.spins_caught, st.spins);
}

TEST(with_the_spin_off_it_never_spins)
{
    weir_loop_stats st;
    if (round_trips("0", &st))
        return;
    CHECK_EQ(st.spins, 0);
    CHECK_EQ(st.spins_caught, 0);
}

TEST_MAIN()
