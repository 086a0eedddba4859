/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_task.c - tasks: spawn/join (fibers and stackless), results, detach,
 * yield, current-task query, task-local storage, cleanup handlers, joining
 * from outside the runtime, weir_main and the explicit event-loop handle.
 */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include "test.h"
#include "weir/rt.h"

static intptr_t add_one(void *arg)
{
    return (intptr_t)arg + 1;
}

TEST(spawn_join_result)
{
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    weir_spawn_opts o = {.name = "adder", .loop = l};
    weir_task *t = weir_task_spawn(add_one, (void *)41, &o);
    CHECK(t != NULL);
    CHECK_STR(weir_task_name(t), "adder");
    CHECK_EQ(weir_loop_run(l), 0);
    intptr_t r = 0;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, 42);
    weir_loop_free(l);
}

static intptr_t parent_fn(void *arg)
{
    (void)arg;
    weir_task *kids[100];
    for (int i = 0; i < 100; i++) {
        kids[i] = weir_task_spawn(add_one, (void *)(intptr_t)i, NULL);
        CHECK(kids[i] != NULL);
    }
    intptr_t sum = 0;
    for (int i = 0; i < 100; i++) {
        intptr_t r;
        CHECK_EQ(weir_task_join(kids[i], &r, WEIR_FOREVER), 0);
        sum += r;
    }
    return sum;
}

TEST(join_from_task)
{
    weir_loop *l = weir_loop_new(NULL);
    weir_spawn_opts o = {.loop = l};
    weir_task *t = weir_task_spawn(parent_fn, NULL, &o);
    CHECK_EQ(weir_loop_run(l), 0);
    intptr_t r;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, 5050);
    weir_loop_free(l);
}

/* Stackless: counts down with yields, then sleeps, then returns. */
struct countdown {
    weir_co co;
    int n;
    weir_op op;
    int64_t res;
};

static int countdown_poll(void *p, intptr_t *out)
{
    struct countdown *f = p;
    WEIR_BEGIN(&f->co);
    while (f->n > 0) {
        f->n--;
        WEIR_YIELD(&f->co);
    }
    weir_time_sleep_start(&f->op, weir_time_after_ms(2));
    WEIR_AWAIT(&f->co, &f->op, f->res);
    WEIR_RETURN(&f->co, out, 7 + f->res);
    WEIR_END(&f->co);
}

TEST(stackless_yield_sleep)
{
    weir_loop *l = weir_loop_new(NULL);
    struct countdown f = {.n = 10};
    weir_spawn_opts o = {.loop = l};
    weir_task *t = weir_task_spawn_stackless(countdown_poll, &f, &o);
    CHECK(t != NULL);
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_GE(weir_time_now() - t0, 2 * WEIR_MSEC);
    intptr_t r;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, 7);
    CHECK_EQ(f.n, 0);
    weir_loop_free(l);
}

/* A fiber joins a stackless task and vice versa. */
struct joiner {
    weir_co co;
    weir_task *target;
    weir_op op;
    int64_t res;
};

static int joiner_poll(void *p, intptr_t *out)
{
    struct joiner *f = p;
    WEIR_BEGIN(&f->co);
    weir_task_join_start(&f->op, f->target, WEIR_FOREVER);
    WEIR_AWAIT(&f->co, &f->op, f->res);
    CHECK_EQ(f->res, 0);
    intptr_t v = weir_task_join_result(f->target);
    weir_task_detach(f->target);
    WEIR_RETURN(&f->co, out, v * 2);
    WEIR_END(&f->co);
}

static intptr_t slow_value(void *arg)
{
    weir_time_sleep(WEIR_MSEC);
    return (intptr_t)arg;
}

TEST(stackless_joins_fiber)
{
    weir_loop *l = weir_loop_new(NULL);
    weir_spawn_opts o = {.loop = l};
    struct joiner f = {.target = weir_task_spawn(slow_value, (void *)21, &o)};
    weir_task *t = weir_task_spawn_stackless(joiner_poll, &f, &o);
    CHECK_EQ(weir_loop_run(l), 0);
    intptr_t r;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, 42);
    weir_loop_free(l);
}

static int order[16], norder;
static intptr_t yielder(void *arg)
{
    for (int i = 0; i < 3; i++) {
        order[norder++] = (int)(intptr_t)arg;
        CHECK_EQ(weir_task_yield(), 0);
    }
    return 0;
}

TEST(yield_interleaves)
{
    weir_loop *l = weir_loop_new(NULL);
    weir_spawn_opts o = {.loop = l};
    norder = 0;
    weir_task *a = weir_task_spawn(yielder, (void *)1, &o);
    weir_task *b = weir_task_spawn(yielder, (void *)2, &o);
    weir_task_detach(a);
    weir_task_detach(b);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(norder, 6);
    for (int i = 0; i < 6; i++)
        CHECK_EQ(order[i], i % 2 + 1);
    weir_loop_free(l);
}

static weir_tls_key key;
static int dtor_calls;
static void tls_dtor(void *v)
{
    CHECK_EQ((intptr_t)v, 99);
    dtor_calls++;
}

static int cleanup_seq[8], ncleanup;
static void cleanup(void *arg)
{
    cleanup_seq[ncleanup++] = (int)(intptr_t)arg;
}

static intptr_t tls_user(void *arg)
{
    (void)arg;
    CHECK(weir_task_current() != NULL);
    CHECK_STR(weir_task_name(weir_task_current()), "tls-user");
    CHECK(weir_tls_get(key) == NULL);
    CHECK_EQ(weir_tls_set(key, (void *)99), 0);
    CHECK_EQ(weir_task_defer(cleanup, (void *)1), 0);
    CHECK_EQ(weir_task_defer(cleanup, (void *)2), 0);
    weir_time_sleep(WEIR_MSEC);
    CHECK_EQ((intptr_t)weir_tls_get(key), 99);
    return 0;
}

static intptr_t tls_other(void *arg)
{
    (void)arg;
    CHECK(weir_tls_get(key) == NULL); /* per task */
    return 0;
}

TEST(task_local_storage_and_defer)
{
    CHECK_EQ(weir_tls_key_new(&key, tls_dtor), 0);
    weir_loop *l = weir_loop_new(NULL);
    weir_spawn_opts o = {.name = "tls-user", .loop = l};
    weir_task *a = weir_task_spawn(tls_user, NULL, &o);
    weir_task *b = weir_task_spawn(tls_other, NULL, &(weir_spawn_opts){.loop = l});
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(weir_task_join(a, NULL, WEIR_FOREVER), 0);
    CHECK_EQ(weir_task_join(b, NULL, WEIR_FOREVER), 0);
    CHECK_EQ(dtor_calls, 1);
    CHECK_EQ(ncleanup, 2);
    CHECK_EQ(cleanup_seq[0], 2); /* last registered runs first */
    CHECK_EQ(cleanup_seq[1], 1);
    CHECK(weir_task_current() == NULL);
    CHECK_EQ(weir_task_defer(cleanup, NULL), -EINVAL); /* outside a task */
    weir_loop_free(l);
}

/* Join from a thread outside the runtime blocks until the task ends. */
struct ext_join {
    weir_task *t;
    intptr_t r;
    int rc;
};
static void *ext_joiner(void *p)
{
    struct ext_join *j = p;
    j->rc = weir_task_join(j->t, &j->r, WEIR_FOREVER);
    return NULL;
}

TEST(join_from_foreign_thread)
{
    weir_loop *l = weir_loop_new(NULL);
    weir_spawn_opts o = {.loop = l};
    struct ext_join j = {.t = weir_task_spawn(slow_value, (void *)5, &o)};
    pthread_t th;
    pthread_create(&th, NULL, ext_joiner, &j);
    CHECK_EQ(weir_loop_run(l), 0);
    pthread_join(th, NULL);
    CHECK_EQ(j.rc, 0);
    CHECK_EQ(j.r, 5);
    weir_loop_free(l);
}

/* A foreign joiner with a deadline gives up without consuming the handle;
 * joining on the loop's own thread outside a task would wait for ever, and
 * is refused. */
static void *deadline_joiner(void *p)
{
    struct ext_join *j = p;
    j->rc = weir_task_join(j->t, NULL, weir_time_after_ms(5));
    return NULL;
}

TEST(foreign_join_deadline)
{
    weir_loop *l = weir_loop_new(NULL);
    weir_spawn_opts o = {.loop = l};
    weir_task *t = weir_task_spawn(slow_value, (void *)1, &o);
    CHECK_EQ(weir_task_join(t, NULL, weir_time_after_ms(5)), -EDEADLK);
    struct ext_join j = {.t = t};
    pthread_t th;
    pthread_create(&th, NULL, deadline_joiner, &j);
    pthread_join(th, NULL); /* the loop is not running: the task cannot end */
    CHECK_EQ(j.rc, -ETIMEDOUT);
    CHECK_EQ(weir_loop_run(l), 0);
    intptr_t r;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, 1);
    weir_loop_free(l);
}

/* Spawning from another thread goes through the remote queue. */
static weir_loop *shared_loop;
static void *foreign_spawner(void *p)
{
    (void)p;
    weir_spawn_opts o = {.loop = shared_loop, .name = "from-afar"};
    weir_task *t = weir_task_spawn(add_one, (void *)9, &o);
    intptr_t r = 0;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    return (void *)r;
}

TEST(spawn_from_foreign_thread)
{
    shared_loop = weir_loop_new(NULL);
    pthread_t th;
    pthread_create(&th, NULL, foreign_spawner, NULL);
    void *res = NULL;
    /* Drive the loop until the foreign thread has its answer. */
    for (int i = 0; i < 2000; i++) {
        CHECK_GE(weir_loop_poll(shared_loop, 5), 0);
        if (pthread_tryjoin_np(th, &res) == 0)
            break;
    }
    CHECK_EQ((intptr_t)res, 10);
    weir_loop_free(shared_loop);
}

/* The event-loop handle: poll reports progress, wake interrupts a wait. */
static void *waker_thread(void *p)
{
    usleep(20000);
    CHECK_EQ(weir_loop_wake(p), 0);
    return NULL;
}

TEST(event_loop_poll_and_wake)
{
    weir_loop *l = weir_loop_new(NULL);
    CHECK(weir_loop_new(NULL) == NULL); /* one per thread */
    CHECK_EQ(errno, EBUSY);
    CHECK_EQ(weir_loop_poll(l, 0), 0); /* nothing to do */
    weir_spawn_opts o = {.loop = l};
    weir_task *t = weir_task_spawn(add_one, (void *)1, &o);
    CHECK_GE(weir_loop_poll(l, 0), 1);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    pthread_t th;
    pthread_create(&th, NULL, waker_thread, l);
    int64_t t0 = weir_time_now();
    CHECK_GE(weir_loop_poll(l, 10000), 0);
    int64_t took = weir_time_now() - t0;
    CHECK_LT(took, 5 * WEIR_SEC); /* woken long before the 10 s timeout */
    pthread_join(th, NULL);
    weir_loop_free(l);
}

static int main_entry(int argc, char **argv)
{
    CHECK_EQ(argc, 2);
    CHECK_STR(argv[1], "x");
    CHECK_STR(weir_task_name(weir_task_current()), "main");
    weir_task *t = weir_task_spawn(slow_value, (void *)3, NULL);
    intptr_t r;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    return (int)r + 4;
}

static intptr_t forever_sleeper(void *arg)
{
    (void)arg;
    CHECK_EQ(weir_time_sleep(3600 * WEIR_SEC), -ECANCELED);
    return 0;
}

static int main_leaves_tasks(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    weir_task_detach(weir_task_spawn(forever_sleeper, NULL, NULL));
    return 3;
}

TEST(weir_main_exit_code)
{
    char *argv[] = {"prog", "x", NULL};
    CHECK_EQ(weir_main(main_entry, 2, argv), 7);
    /* Tasks still running when main returns are cancelled and drained. */
    CHECK_EQ(weir_main(main_leaves_tasks, 2, argv), 3);
}

TEST(spawn_errors)
{
    errno = 0;
    CHECK(weir_task_spawn(add_one, NULL, NULL) == NULL); /* no loop here */
    CHECK_EQ(errno, EINVAL);
    weir_loop *l = weir_loop_new(NULL);
    CHECK(weir_task_spawn(NULL, NULL, &(weir_spawn_opts){.loop = l}) == NULL);
    CHECK_EQ(weir_task_yield(), -EINVAL);
    CHECK_EQ(weir_task_join(NULL, NULL, WEIR_FOREVER), -EINVAL);
    weir_loop_free(l);
    weir_loop_opts bad = {.io = "kqueue"};
    CHECK(weir_loop_new(&bad) == NULL);
    CHECK_EQ(errno, EINVAL);
}

TEST_MAIN()
