/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rt.h - helpers shared by the runtime's tests: run a fiber on a fresh
 * loop until every task has ended, or on a fresh multi-threaded runtime, and
 * spawn-or-fail.
 */
#ifndef WEIR_TESTS_TEST_RT_H
#define WEIR_TESTS_TEST_RT_H

#include "test.h"
#include "weir/rt.h"

/* Run fn(arg) as a fiber named "main" (256 KiB of stack) on a new loop,
 * drive the loop until no task is left, free it, and return fn's result. */
static inline intptr_t test_run_main(weir_task_fn fn, void *arg)
{
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    weir_spawn_opts o = {.name = "main", .stack_size = 256 * 1024, .loop = l};
    weir_task *t = weir_task_spawn(fn, arg, &o);
    CHECK(t != NULL);
    CHECK_EQ(weir_loop_run(l), 0);
    intptr_t r = -1;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    weir_loop_free(l);
    return r;
}

/* Spawn a fiber on the current loop; the test fails if that fails. */
static inline weir_task *test_spawn(weir_task_fn fn, void *arg)
{
    weir_task *t = weir_task_spawn(fn, arg, NULL);
    CHECK(t != NULL);
    return t;
}

/* Run fn(arg) as a fiber (256 KiB of stack) on a new runtime of `threads`
 * scheduler threads, wait for it, free the runtime, and return fn's result. */
static inline intptr_t test_run_on_rt(int threads, weir_task_fn fn, void *arg)
{
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = threads});
    CHECK(rt != NULL);
    weir_task *t =
        weir_task_spawn(fn, arg, &(weir_spawn_opts){.rt = rt, .stack_size = 256 * 1024});
    CHECK(t != NULL);
    intptr_t r = -1;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    weir_rt_free(rt);
    return r;
}

#endif
