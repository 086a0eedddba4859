/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_watchdog.c - the blocking detector: a task that keeps its thread past
 * WEIR_BLOCKING_WARN_MS is named once per such poll, a task that yields in
 * time never is, loops on other threads do not blur who blocked, 0 disables
 * the watchdog (no thread at all), and loops created and freed concurrently
 * start and stop the watchdog thread without leaks or races.
 *
 * The watchdog reads WEIR_BLOCKING_WARN_MS when its thread starts, which is
 * when the first loop of the process is created, and stops when the last
 * loop is freed; so each test sets the variable before creating its loops
 * and frees them all before it ends. Reports are counted through a hook in
 * watchdog.c; the tests that check the text capture stderr in a temp file.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "weir/rt.h"

/* Test hook defined in src/rt/watchdog.c. */
extern uint64_t weir__watchdog_reports(void);

/* Keep the thread without yielding: what the watchdog is for. */
static void spin_ms(int64_t ms)
{
    int64_t end = weir_time_now() + ms * WEIR_MSEC;
    while (weir_time_now() < end)
        ;
}

/* Threads of this process named "weir-watchdog". */
static int watchdog_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char path[300], comm[32] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* the thread exited meanwhile */
        if (fgets(comm, sizeof(comm), f) && strcmp(comm, "weir-watchdog\n") == 0)
            n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

/* After the last loop is freed the thread has been joined; its /proc entry
 * can outlive the join by a moment, so allow a short grace. */
static void check_no_watchdog_thread(void)
{
    int64_t give_up = weir_time_now() + 2 * WEIR_SEC;
    while (watchdog_threads() != 0) {
        CHECK_LT(weir_time_now(), give_up);
        usleep(1000);
    }
}

/* ---- stderr capture ------------------------------------------------------------ */
static FILE *cap_file;
static int cap_saved = -1;

/* A check failing while stderr is captured aborts with its message in the
 * file: put stderr back and copy the file out first (async-signal-safe
 * calls only), then let the abort proceed. */
static void capture_on_abort(int sig)
{
    (void)sig;
    int fd = fileno(cap_file);
    dup2(cap_saved, 2);
    lseek(fd, 0, SEEK_SET);
    char buf[512];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        if (write(2, buf, (size_t)n) < 0)
            break;
}

static void capture_begin(void)
{
    fflush(stderr);
    cap_file = tmpfile();
    CHECK(cap_file != NULL);
    cap_saved = dup(2);
    CHECK_GE(cap_saved, 0);
    struct sigaction sa = {.sa_handler = capture_on_abort, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(SIGABRT, &sa, NULL), 0);
    CHECK_GE(dup2(fileno(cap_file), 2), 0);
}

/* Restore stderr, echo what was captured there (so a failure still shows
 * it), and return it; the caller frees. */
static char *capture_end(void)
{
    fflush(stderr);
    signal(SIGABRT, SIG_DFL);
    CHECK_GE(dup2(cap_saved, 2), 0);
    close(cap_saved);
    cap_saved = -1;
    long n = ftell(cap_file);
    CHECK_GE(n, 0);
    char *buf = calloc(1, (size_t)n + 1);
    CHECK(buf != NULL);
    rewind(cap_file);
    CHECK_EQ(fread(buf, 1, (size_t)n, cap_file), (size_t)n);
    fclose(cap_file);
    cap_file = NULL;
    fputs(buf, stderr);
    return buf;
}

/* ---- task bodies ----------------------------------------------------------------- */
/* Spin for arg ms in one poll. */
static intptr_t spinner(void *arg)
{
    spin_ms((intptr_t)arg);
    return 0;
}

/* Work for arg ms in total, but never more than 2 ms without yielding or
 * sleeping: well under any threshold these tests use. */
static intptr_t polite(void *arg)
{
    int64_t end = weir_time_now() + (intptr_t)arg * WEIR_MSEC;
    for (int i = 0; weir_time_now() < end; i++) {
        spin_ms(2);
        if (i % 4 == 3)
            CHECK_EQ(weir_time_sleep(1 * WEIR_MSEC), 0);
        else
            CHECK_EQ(weir_task_yield(), 0);
    }
    return 0;
}

/* Run fn(arg) as a fiber with that name on a new loop of this thread,
 * made with opts (NULL: the backend from WEIR_IO). */
static void run_on(const weir_loop_opts *opts, const char *name, weir_task_fn fn, intptr_t arg)
{
    weir_loop *l = weir_loop_new(opts);
    CHECK(l != NULL);
    weir_spawn_opts o = {.name = name, .loop = l};
    weir_task *t = weir_task_spawn(fn, (void *)arg, &o);
    CHECK(t != NULL);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    weir_loop_free(l);
}

static void run_named(const char *name, weir_task_fn fn, intptr_t arg)
{
    run_on(NULL, name, fn, arg);
}

/* ---- tests ------------------------------------------------------------------------ */
static intptr_t spin_and_count_threads(void *arg)
{
    /* The watchdog runs while this loop exists. */
    CHECK_EQ(watchdog_threads(), 1);
    spin_ms((intptr_t)arg);
    return 0;
}

TEST(spinning_task_is_named_once)
{
    setenv("WEIR_BLOCKING_WARN_MS", "50", 1);
    uint64_t before = weir__watchdog_reports();
    capture_begin();
    run_named("spinner", spin_and_count_threads, 200);
    char *out = capture_end();
    CHECK_EQ(weir__watchdog_reports() - before, 1);
    CHECK(strstr(out, "weir warn rt.watchdog: task 'spinner' has blocked its thread for ") != NULL);
    CHECK(strstr(out, "ms without yielding (WEIR_BLOCKING_WARN_MS=50)") != NULL);
    free(out);
    check_no_watchdog_thread();
}

/* A name written after the watchdog thread started (a job names its
 * subtasks after the runtime is up): the watchdog reads its bytes, so the
 * loop must publish the name with release and the watchdog acquire it
 * (TSan reports the read as a race otherwise). */
TEST(name_written_after_the_watchdog_started_is_read_safely)
{
    setenv("WEIR_BLOCKING_WARN_MS", "50", 1);
    uint64_t before = weir__watchdog_reports();
    capture_begin();
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    CHECK_EQ(watchdog_threads(), 1);
    char *name = strdup("heap-named");
    CHECK(name != NULL);
    weir_task *t = weir_task_spawn(spinner, (void *)(intptr_t)200,
                                   &(weir_spawn_opts){.name = name, .loop = l});
    CHECK(t != NULL);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    weir_loop_free(l);
    free(name);
    char *out = capture_end();
    CHECK_EQ(weir__watchdog_reports() - before, 1);
    CHECK(strstr(out, "task 'heap-named' has blocked its thread") != NULL);
    free(out);
    check_no_watchdog_thread();
}

TEST(yielding_task_is_not_named)
{
    setenv("WEIR_BLOCKING_WARN_MS", "50", 1);
    uint64_t before = weir__watchdog_reports();
    run_named("polite", polite, 300);
    CHECK_EQ(weir__watchdog_reports() - before, 0);
    check_no_watchdog_thread();
}

/* Each blocked poll is reported once: a task that blocks, yields and
 * blocks again is named twice. */
static intptr_t spin_twice(void *arg)
{
    spin_ms((intptr_t)arg);
    CHECK_EQ(weir_task_yield(), 0);
    spin_ms((intptr_t)arg);
    return 0;
}

TEST(each_blocked_poll_is_named)
{
    setenv("WEIR_BLOCKING_WARN_MS", "50", 1);
    uint64_t before = weir__watchdog_reports();
    run_named("twice", spin_twice, 150);
    CHECK_EQ(weir__watchdog_reports() - before, 2);
}

struct loop_thread {
    const char *name;
    weir_task_fn fn;
    intptr_t arg;
    pthread_barrier_t *both_up;
};

static void *loop_thread_main(void *p)
{
    struct loop_thread *lt = p;
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    /* Both loops registered before either task runs. */
    pthread_barrier_wait(lt->both_up);
    weir_spawn_opts o = {.name = lt->name, .loop = l};
    weir_task *t = weir_task_spawn(lt->fn, (void *)lt->arg, &o);
    CHECK(t != NULL);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    weir_loop_free(l);
    return NULL;
}

TEST(two_loops_only_the_blocker_is_named)
{
    setenv("WEIR_BLOCKING_WARN_MS", "50", 1);
    uint64_t before = weir__watchdog_reports();
    pthread_barrier_t both_up;
    CHECK_EQ(pthread_barrier_init(&both_up, NULL, 2), 0);
    struct loop_thread a = {"blocker", spinner, 200, &both_up};
    struct loop_thread b = {"bystander", polite, 300, &both_up};
    pthread_t ta, tb;
    capture_begin();
    CHECK_EQ(pthread_create(&ta, NULL, loop_thread_main, &a), 0);
    CHECK_EQ(pthread_create(&tb, NULL, loop_thread_main, &b), 0);
    CHECK_EQ(pthread_join(ta, NULL), 0);
    CHECK_EQ(pthread_join(tb, NULL), 0);
    char *out = capture_end();
    pthread_barrier_destroy(&both_up);
    CHECK_EQ(weir__watchdog_reports() - before, 1);
    CHECK(strstr(out, "task 'blocker' has blocked") != NULL);
    CHECK(strstr(out, "bystander") == NULL);
    free(out);
    check_no_watchdog_thread();
}

static intptr_t spin_without_watchdog(void *arg)
{
    CHECK_EQ(watchdog_threads(), 0);
    spin_ms((intptr_t)arg);
    return 0;
}

TEST(zero_disables_the_watchdog)
{
    setenv("WEIR_BLOCKING_WARN_MS", "0", 1);
    uint64_t before = weir__watchdog_reports();
    run_named("unwatched", spin_without_watchdog, 150);
    CHECK_EQ(weir__watchdog_reports() - before, 0);
}

/* The threshold is read again whenever the watchdog restarts, i.e. at the
 * first loop after all loops were freed. */
TEST(threshold_reread_on_restart)
{
    setenv("WEIR_BLOCKING_WARN_MS", "1000", 1);
    uint64_t before = weir__watchdog_reports();
    run_named("short", spinner, 100);
    CHECK_EQ(weir__watchdog_reports() - before, 0);
    check_no_watchdog_thread();
    setenv("WEIR_BLOCKING_WARN_MS", "20", 1);
    run_named("short", spinner, 100);
    CHECK_EQ(weir__watchdog_reports() - before, 1);
}

/* An invalid value warns and falls back to the default of 100 ms. */
TEST(bad_value_uses_default)
{
    setenv("WEIR_BLOCKING_WARN_MS", "-5", 1);
    uint64_t before = weir__watchdog_reports();
    capture_begin();
    run_named("slow", spinner, 250);
    char *out = capture_end();
    CHECK_EQ(weir__watchdog_reports() - before, 1);
    CHECK(strstr(out, "ignoring WEIR_BLOCKING_WARN_MS=-5") != NULL);
    CHECK(strstr(out, "task 'slow' has blocked its thread") != NULL);
    CHECK(strstr(out, "(WEIR_BLOCKING_WARN_MS=100)") != NULL);
    free(out);
}

/* Loops come and go on several threads while the watchdog samples every
 * 5 ms: the thread starts and stops many times, and the last loop's
 * removal may race with a new loop's registration. */
#define CHURN_THREADS 4
#define CHURN_LOOPS   30

static intptr_t few_yields(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(weir_task_yield(), 0);
    return 0;
}

static void *churn_main(void *p)
{
    (void)p;
    for (int i = 0; i < CHURN_LOOPS; i++) {
        run_on(NULL, "churn", few_yields, 0);
        if (i % 8 == 0)
            usleep(2000); /* sometimes let the count reach zero */
    }
    return NULL;
}

TEST(loops_come_and_go)
{
    setenv("WEIR_BLOCKING_WARN_MS", "10", 1);
    pthread_t th[CHURN_THREADS];
    for (int i = 0; i < CHURN_THREADS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, churn_main, NULL), 0);
    for (int i = 0; i < CHURN_THREADS; i++)
        CHECK_EQ(pthread_join(th[i], NULL), 0);
    check_no_watchdog_thread();
}

TEST_MAIN()
