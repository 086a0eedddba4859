/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_scope.c - structured concurrency: all children succeed; one fails
 * and its siblings are cancelled (they see -ECANCELED at their suspension,
 * their cleanup handlers run, the result names the failing child); the
 * COLLECT_ALL policy; the scope deadline; weir_scope_cancel from a task and
 * from another thread; cancelling the task that joins nested scopes three
 * levels deep; a joiner cancelled before it joins still waits for a child
 * that takes a while to end; stackless children; children on another
 * loop's thread.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "test.h"
#include "test_rt.h"
#include "weir/sync.h"

static _Atomic int cleaned;
static void on_cleanup(void *arg)
{
    (void)arg;
    atomic_fetch_add(&cleaned, 1);
}

static const char *names[] = {"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"};
static weir_spawn_opts named(int i)
{
    return (weir_spawn_opts){.name = names[i]};
}

/* ---- all succeed ---------------------------------------------------------------- */
static _Atomic int sum;
static intptr_t adder(void *arg)
{
    weir_task_defer(on_cleanup, NULL);
    weir_time_sleep((intptr_t)arg % 3 * WEIR_MSEC);
    atomic_fetch_add(&sum, (int)(intptr_t)arg);
    return (intptr_t)arg;
}

static intptr_t all_ok_main(void *arg)
{
    (void)arg;
    weir_scope *s = weir_scope_new(WEIR_SCOPE_CANCEL_SIBLINGS, WEIR_FOREVER);
    CHECK(s != NULL);
    for (int i = 0; i < 10; i++) {
        weir_spawn_opts o = named(i);
        weir_task *t = weir_scope_spawn(s, adder, (void *)(intptr_t)i, &o);
        CHECK(t != NULL);
        CHECK_STR(weir_task_name(t), names[i]);
    }
    weir_scope_result res;
    CHECK_EQ(weir_scope_join(s, &res), 0);
    CHECK_EQ(atomic_load(&sum), 45);
    CHECK_EQ(atomic_load(&cleaned), 10); /* every child's handlers ran before join returned */
    CHECK_EQ(res.failed, 0);
    CHECK_EQ(res.cancelled, 0);
    CHECK_EQ(res.first_error, 0);
    CHECK_EQ(res.first_index, -1);
    CHECK(res.first_name == NULL);
    CHECK_EQ(weir_scope_join(s, &res), -EBUSY);            /* once */
    CHECK(weir_scope_spawn(s, adder, NULL, NULL) == NULL); /* closed */
    CHECK_EQ(errno, EINVAL);
    weir_scope_free(s);

    /* An empty scope joins at once. */
    s = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER);
    CHECK_EQ(weir_scope_join(s, NULL), 0);
    weir_scope_free(s);
    return 0;
}

TEST(scope_all_succeed)
{
    atomic_store(&sum, 0);
    atomic_store(&cleaned, 0);
    test_run_main(all_ok_main, NULL);
    /* Misuse. */
    CHECK(weir_scope_new(7, WEIR_FOREVER) == NULL);
    CHECK_EQ(errno, EINVAL);
    weir_scope *s = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER);
    CHECK_EQ(weir_scope_join(s, NULL), -EINVAL); /* not from a task */
    weir_scope_free(s);                          /* no children: may be freed unjoined */
}

/* ---- a failure cancels the siblings ----------------------------------------------------- */
static _Atomic int saw_cancel;

static intptr_t sleeper(void *arg)
{
    weir_task_defer(on_cleanup, NULL);
    int r = weir_time_sleep((int64_t)(intptr_t)arg);
    if (r == -ECANCELED)
        atomic_fetch_add(&saw_cancel, 1);
    return r;
}

static intptr_t failer(void *arg)
{
    weir_task_defer(on_cleanup, NULL);
    weir_time_sleep((int64_t)(intptr_t)arg);
    return -EIO;
}

static intptr_t fail_main(void *arg)
{
    (void)arg;
    weir_scope *s = weir_scope_new(WEIR_SCOPE_CANCEL_SIBLINGS, WEIR_FOREVER);
    weir_spawn_opts o[4] = {named(0), named(1), named(2), named(3)};
    weir_scope_spawn(s, sleeper, (void *)(intptr_t)(3600 * WEIR_SEC), &o[0]);
    weir_scope_spawn(s, sleeper, (void *)(intptr_t)(3600 * WEIR_SEC), &o[1]);
    weir_scope_spawn(s, failer, (void *)(intptr_t)(2 * WEIR_MSEC), &o[2]);
    weir_scope_spawn(s, sleeper, (void *)(intptr_t)(3600 * WEIR_SEC), &o[3]);
    int64_t t0 = weir_time_now();
    weir_scope_result res;
    CHECK_EQ(weir_scope_join(s, &res), -EIO);
    CHECK_LT(weir_time_now() - t0, 10 * WEIR_SEC);
    CHECK_EQ(res.failed, 1);
    CHECK_EQ(res.cancelled, 3);
    CHECK_EQ(res.first_error, -EIO);
    CHECK_STR(res.first_name, "c2");
    CHECK_EQ(res.first_index, 2);
    CHECK_EQ(atomic_load(&saw_cancel), 3); /* at their suspension */
    CHECK_EQ(atomic_load(&cleaned), 4);    /* and their handlers ran */
    weir_scope_free(s);
    return 0;
}

TEST(scope_failure_cancels_siblings)
{
    atomic_store(&saw_cancel, 0);
    atomic_store(&cleaned, 0);
    test_run_main(fail_main, NULL);
}

/* ---- COLLECT_ALL keeps the siblings running ------------------------------------------------- */
static intptr_t collect_main(void *arg)
{
    (void)arg;
    weir_scope *s = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER);
    weir_spawn_opts o[4] = {named(0), named(1), named(2), named(3)};
    weir_scope_spawn(s, failer, (void *)(intptr_t)(8 * WEIR_MSEC), &o[0]);
    weir_scope_spawn(s, failer, (void *)(intptr_t)(2 * WEIR_MSEC), &o[1]); /* fails first */
    weir_scope_spawn(s, sleeper, (void *)(intptr_t)(20 * WEIR_MSEC), &o[2]);
    weir_scope_spawn(s, adder, (void *)(intptr_t)5, &o[3]);
    weir_scope_result res;
    int64_t t0 = weir_time_now();
    CHECK_EQ(weir_scope_join(s, &res), -EIO);
    CHECK_GE(weir_time_now() - t0, 20 * WEIR_MSEC); /* the sleeper ran to its end */
    CHECK_EQ(res.failed, 2);
    CHECK_EQ(res.cancelled, 0);
    CHECK_EQ(res.first_index, 1); /* in completion order, not spawn order */
    CHECK_STR(res.first_name, "c1");
    CHECK_EQ(atomic_load(&saw_cancel), 0);
    CHECK_EQ(atomic_load(&sum), 5);
    weir_scope_free(s);
    return 0;
}

TEST(scope_collect_all)
{
    atomic_store(&saw_cancel, 0);
    atomic_store(&sum, 0);
    test_run_main(collect_main, NULL);
}

/* ---- deadline ----------------------------------------------------------------------------- */
static intptr_t deadline_main(void *arg)
{
    (void)arg;
    int64_t t0 = weir_time_now();
    weir_scope *s = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, t0 + 10 * WEIR_MSEC);
    weir_scope_spawn(s, adder, (void *)(intptr_t)1, NULL); /* done in time */
    for (int i = 0; i < 3; i++)
        weir_scope_spawn(s, sleeper, (void *)(intptr_t)(3600 * WEIR_SEC), NULL);
    weir_scope_result res;
    CHECK_EQ(weir_scope_join(s, &res), -ETIMEDOUT);
    CHECK_GE(weir_time_now() - t0, 10 * WEIR_MSEC);
    CHECK_EQ(res.failed, 0);
    CHECK_EQ(res.cancelled, 3);
    CHECK_EQ(atomic_load(&saw_cancel), 3);
    CHECK_EQ(atomic_load(&cleaned), 4);
    weir_scope_free(s);

    /* A deadline already past at join cancels at once. */
    s = weir_scope_new(WEIR_SCOPE_CANCEL_SIBLINGS, weir_time_now());
    weir_scope_spawn(s, sleeper, (void *)(intptr_t)(3600 * WEIR_SEC), NULL);
    CHECK_EQ(weir_scope_join(s, &res), -ETIMEDOUT);
    CHECK_EQ(res.cancelled, 1);
    weir_scope_free(s);
    return 0;
}

TEST(scope_deadline)
{
    atomic_store(&saw_cancel, 0);
    atomic_store(&cleaned, 0);
    test_run_main(deadline_main, NULL);
}

/* ---- weir_scope_cancel ---------------------------------------------------------------------- */
static intptr_t scope_canceller(void *arg)
{
    weir_time_sleep(3 * WEIR_MSEC);
    weir_scope_cancel(arg);
    return 0;
}

static void *foreign_scope_canceller(void *arg)
{
    struct timespec ts = {0, 3 * 1000 * 1000};
    nanosleep(&ts, NULL);
    weir_scope_cancel(arg);
    return NULL;
}

static intptr_t cancel_main(void *arg)
{
    (void)arg;
    /* From a task (here: a child of the scope itself). */
    weir_scope *s = weir_scope_new(WEIR_SCOPE_CANCEL_SIBLINGS, WEIR_FOREVER);
    for (int i = 0; i < 3; i++)
        weir_scope_spawn(s, sleeper, (void *)(intptr_t)(3600 * WEIR_SEC), NULL);
    weir_scope_spawn(s, scope_canceller, s, NULL);
    weir_scope_result res;
    CHECK_EQ(weir_scope_join(s, &res), -ECANCELED);
    /* 4: the canceller, a child too, returned 0 with a cancel pending, which
     * counts as cancelled (as weir_task_join would report it). */
    CHECK_EQ(res.cancelled, 4);
    CHECK_EQ(res.failed, 0);
    CHECK_EQ(res.first_index, -1);
    weir_scope_free(s);
    CHECK_EQ(atomic_load(&cleaned), 3);

    /* From a thread outside the runtime. */
    s = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER);
    for (int i = 0; i < 3; i++)
        weir_scope_spawn(s, sleeper, (void *)(intptr_t)(3600 * WEIR_SEC), NULL);
    pthread_t th;
    pthread_create(&th, NULL, foreign_scope_canceller, s);
    CHECK_EQ(weir_scope_join(s, &res), -ECANCELED);
    pthread_join(th, NULL);
    CHECK_EQ(res.cancelled, 3);
    weir_scope_free(s);
    CHECK_EQ(atomic_load(&cleaned), 6);

    /* Children spawned into a cancelled scope are cancelled at once. */
    s = weir_scope_new(WEIR_SCOPE_CANCEL_SIBLINGS, WEIR_FOREVER);
    weir_scope_cancel(s);
    weir_scope_spawn(s, sleeper, (void *)(intptr_t)(3600 * WEIR_SEC), NULL);
    CHECK_EQ(weir_scope_join(s, &res), -ECANCELED);
    CHECK_EQ(res.cancelled, 1);
    weir_scope_free(s);
    CHECK_EQ(atomic_load(&saw_cancel), 7);
    return 0;
}

TEST(scope_cancel)
{
    atomic_store(&saw_cancel, 0);
    atomic_store(&cleaned, 0);
    test_run_main(cancel_main, NULL);
}

/* ---- cancelling the joiner of nested scopes ------------------------------------------------- */
/* level 1..3: each node opens a scope with two children and joins it; the
 * children of level 3 sleep. Cancelling the root's task must reach every
 * leaf, and every node must still wait for its children. */
static _Atomic int leaves_cleaned, nodes_cleaned, leaves_started;
static _Atomic int nodes_ended_before_children; /* must stay 0 */

static void leaf_cleanup(void *arg)
{
    (void)arg;
    atomic_fetch_add(&leaves_cleaned, 1);
}

static void node_cleanup(void *arg)
{
    (void)arg;
    atomic_fetch_add(&nodes_cleaned, 1);
}

static intptr_t leaf(void *arg)
{
    (void)arg;
    weir_task_defer(leaf_cleanup, NULL);
    atomic_fetch_add(&leaves_started, 1);
    return weir_time_sleep(3600 * WEIR_SEC);
}

static intptr_t node(void *arg)
{
    int level = (int)(intptr_t)arg;
    weir_task_defer(node_cleanup, NULL);
    weir_scope *s = weir_scope_new(WEIR_SCOPE_CANCEL_SIBLINGS, WEIR_FOREVER);
    for (int i = 0; i < 2; i++)
        weir_scope_spawn(s, level == 3 ? leaf : node, (void *)(intptr_t)(level + 1), NULL);
    weir_scope_result res;
    int r = weir_scope_join(s, &res);
    CHECK_EQ(r, -ECANCELED);
    CHECK_EQ(res.cancelled, 2);
    CHECK_EQ(res.failed, 0);
    if (level == 3 && atomic_load(&leaves_cleaned) < 2)
        atomic_fetch_add(&nodes_ended_before_children, 1);
    weir_scope_free(s);
    return r;
}

static intptr_t nested_main(void *arg)
{
    (void)arg;
    weir_task *root = weir_task_spawn(node, (void *)(intptr_t)1, NULL);
    while (atomic_load(&leaves_started) < 8)
        weir_time_sleep(WEIR_MSEC);
    weir_time_sleep(WEIR_MSEC);
    CHECK_EQ(atomic_load(&leaves_cleaned), 0);
    weir_task_cancel(root);
    intptr_t r;
    CHECK_EQ(weir_task_join(root, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, -ECANCELED);
    CHECK_EQ(atomic_load(&leaves_cleaned), 8);
    CHECK_EQ(atomic_load(&nodes_cleaned), 1 + 2 + 4);
    CHECK_EQ(atomic_load(&nodes_ended_before_children), 0);
    return 0;
}

TEST(scope_cancel_joiner_nested)
{
    test_run_main(nested_main, NULL);
}

/* ---- stackless children --------------------------------------------------------------------- */
struct sl_child {
    weir_co co;
    weir_op op;
    int64_t res;
    int64_t sleep_ns;
    int value;
};

static int sl_child_poll(void *p, intptr_t *out)
{
    struct sl_child *f = p;
    WEIR_BEGIN(&f->co);
    weir_task_defer(on_cleanup, NULL);
    weir_time_sleep_start(&f->op, weir_time_now() + f->sleep_ns);
    WEIR_AWAIT(&f->co, &f->op, f->res);
    if (f->res == -ECANCELED)
        atomic_fetch_add(&saw_cancel, 1);
    WEIR_RETURN(&f->co, out, f->res < 0 ? f->res : f->value);
    WEIR_END(&f->co);
}

static intptr_t stackless_main(void *arg)
{
    (void)arg;
    struct sl_child f[3] = {
        {.sleep_ns = WEIR_MSEC, .value = 1},
        {.sleep_ns = 2 * WEIR_MSEC, .value = -EPROTO}, /* fails */
        {.sleep_ns = 3600 * WEIR_SEC},
    };
    weir_scope *s = weir_scope_new(WEIR_SCOPE_CANCEL_SIBLINGS, WEIR_FOREVER);
    for (int i = 0; i < 3; i++) {
        weir_spawn_opts o = named(i);
        CHECK(weir_scope_spawn_stackless(s, sl_child_poll, &f[i], &o) != NULL);
    }
    weir_scope_result res;
    CHECK_EQ(weir_scope_join(s, &res), -EPROTO);
    CHECK_EQ(res.failed, 1);
    CHECK_EQ(res.cancelled, 1);
    CHECK_EQ(res.first_index, 1);
    CHECK_STR(res.first_name, "c1");
    CHECK_EQ(atomic_load(&saw_cancel), 1);
    CHECK_EQ(atomic_load(&cleaned), 3);
    weir_scope_free(s);
    return 0;
}

TEST(scope_stackless_children)
{
    atomic_store(&saw_cancel, 0);
    atomic_store(&cleaned, 0);
    test_run_main(stackless_main, NULL);
}

/* ---- children on another thread's loop ------------------------------------------------------ */
static weir_loop *other_loop;
static _Atomic int other_stop;

static void *other_thread(void *arg)
{
    (void)arg;
    other_loop = weir_loop_new(NULL);
    CHECK(other_loop != NULL);
    atomic_store(&other_stop, 1); /* ready */
    while (atomic_load(&other_stop) != 2)
        CHECK_GE(weir_loop_poll(other_loop, 5), 0);
    CHECK_EQ(weir_loop_run(other_loop), 0);
    weir_loop_free(other_loop);
    return NULL;
}

static intptr_t remote_main(void *arg)
{
    (void)arg;
    for (int round = 0; round < 50; round++) {
        weir_scope *s = weir_scope_new(WEIR_SCOPE_CANCEL_SIBLINGS, WEIR_FOREVER);
        weir_spawn_opts o = {.loop = other_loop, .name = "remote"};
        for (int i = 0; i < 4; i++) /* multiples of 3: adders that never sleep */
            CHECK(weir_scope_spawn(s, adder, (void *)(intptr_t)(3 * i), &o) != NULL);
        o.name = "remote-fail";
        weir_scope_spawn(s, failer, (void *)(intptr_t)WEIR_MSEC, &o);
        o.name = "remote-sleep";
        weir_scope_spawn(s, sleeper, (void *)(intptr_t)(3600 * WEIR_SEC), &o);
        weir_scope_result res;
        CHECK_EQ(weir_scope_join(s, &res), -EIO);
        CHECK_STR(res.first_name, "remote-fail");
        CHECK_EQ(res.first_index, 5 - 1);
        CHECK_EQ(res.cancelled, 1);
        weir_scope_free(s);
    }
    return 0;
}

TEST(scope_children_on_another_thread)
{
    atomic_store(&cleaned, 0);
    atomic_store(&other_stop, 0);
    pthread_t th;
    pthread_create(&th, NULL, other_thread, NULL);
    while (atomic_load(&other_stop) != 1)
        sched_yield();
    /* As run_main, but the other thread stops before this loop is freed:
     * its children's last wakes of our joiner must be over by then
     * (weir_task_wake touches the target loop after queueing the task). */
    weir_loop *l = weir_loop_new(NULL);
    weir_task *t = weir_task_spawn(remote_main, NULL, &(weir_spawn_opts){.loop = l});
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    atomic_store(&other_stop, 2);
    pthread_join(th, NULL);
    weir_loop_free(l);
    CHECK_EQ(atomic_load(&cleaned), 50 * 6);
}

/* ---- a joiner cancelled before it joins waits for a slow child ------------------------------ */
/* weir_job_run's teardown relies on this: its task may be cancelled before
 * it joins the checkpoint coordinator's scope, and the coordinator may take
 * a while to notice (it is writing a checkpoint). The child here keeps
 * going for 30 ms of wall time after its cancel (its yields fail, it does
 * not stop); the join must still wait for it. */
static _Atomic int slow_done;

static intptr_t slow_child(void *arg)
{
    (void)arg;
    while (weir_task_yield() == 0)
        ;
    int64_t until = weir_time_now() + 30 * WEIR_MSEC;
    while (weir_time_now() < until)
        weir_task_yield();
    atomic_store(&slow_done, 1);
    return 0;
}

static intptr_t cancelled_joiner(void *arg)
{
    (void)arg;
    weir_scope *s = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER);
    CHECK(weir_scope_spawn(s, slow_child, NULL, NULL) != NULL);
    weir_task_cancel(weir_task_current());
    CHECK(weir_task_cancelled());
    weir_scope_result res;
    CHECK_EQ(weir_scope_join(s, &res), -ECANCELED);
    CHECK_EQ(atomic_load(&slow_done), 1);
    CHECK_EQ(res.cancelled, 1);
    weir_scope_free(s);
    return 0;
}

static intptr_t slow_main(void *arg)
{
    (void)arg;
    weir_task *t = test_spawn(cancelled_joiner, NULL);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), -ECANCELED); /* it cancelled itself */
    return 0;
}

TEST(scope_cancelled_joiner_waits_for_slow_child)
{
    atomic_store(&slow_done, 0);
    test_run_main(slow_main, NULL);
}

TEST_MAIN()
