/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_stack.c - fiber stacks (src/rt/stack.h): sizes, pooling, the guard
 * page, and the overflow reporter.
 *
 * Anything that must fault runs in a fork()ed child whose stderr goes to a
 * pipe; the parent checks how the child died and what it printed. The child
 * is single-threaded and uses only the code under test, so fork() is safe.
 *
 * ASan builds (WEIR_ASAN): ASan installs its own SIGSEGV handler and an
 * alternate signal stack at start-up. The reporter keeps ASan's alternate
 * stack and installs its handler over ASan's (ASan allows this by default,
 * allow_user_segv_handler=1), chaining to it for faults that are not
 * overflows, so the same assertions hold there.
 */
#include "rt/ctx.h"
#include "rt/stack.h"
#include "test.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static size_t page(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* ---- sizes and pooling ------------------------------------------------- */

TEST(get_put_reuses)
{
    weir__stack_pool p;
    weir__stack *a, *b;

    weir__stack_pool_init(&p);
    a = weir__stack_get(&p, 0);
    CHECK(a != NULL);
    void *lo = a->lo;
    weir__stack_put(&p, a);
    CHECK_EQ(p.cached, 1);
    b = weir__stack_get(&p, 0);
    CHECK(b == a);
    CHECK(b->lo == lo);
    CHECK_EQ(p.cached, 0);
    weir__stack_put(&p, b);
    weir__stack_pool_fini(&p);
    CHECK_EQ(p.cached, 0);
    CHECK(p.free_list == NULL);
}

TEST(sizes_not_mixed)
{
    weir__stack_pool p;
    weir__stack *small, *big, *small2;

    weir__stack_pool_init(&p);
    small = weir__stack_get(&p, 64 * 1024);
    CHECK(small != NULL);
    weir__stack_put(&p, small);
    big = weir__stack_get(&p, 128 * 1024);
    CHECK(big != NULL);
    CHECK(big != small);
    CHECK_EQ(big->size, 128 * 1024);
    CHECK_EQ(p.cached, 1); /* the small one stays cached */
    weir__stack_put(&p, big);
    small2 = weir__stack_get(&p, 64 * 1024);
    CHECK(small2 == small); /* found behind the big one on the free list */
    CHECK_EQ(p.cached, 1);
    weir__stack_put(&p, small2);
    weir__stack_pool_fini(&p);
}

TEST(size_rounding)
{
    weir__stack_pool p;
    weir__stack *s;

    weir__stack_pool_init(&p);
    s = weir__stack_get(&p, 0);
    CHECK_EQ(s->size, 64 * 1024);
    weir__stack_put(&p, s);

    s = weir__stack_get(&p, 1000);
    CHECK_EQ(s->size, page());
    weir__stack_put(&p, s);

    s = weir__stack_get(&p, page() + 1);
    CHECK_EQ(s->size, 2 * page());
    CHECK(s->lo == (char *)s->map + page()); /* one guard page below */
    CHECK_EQ(s->map_len, 3 * page());
    CHECK_EQ((uintptr_t)s->lo % page(), 0);
    memset(s->lo, 0xa5, s->size); /* the whole usable range is writable */
    weir__stack_put(&p, s);

    errno = 0;
    CHECK(weir__stack_get(&p, SIZE_MAX - 10) == NULL);
    CHECK_EQ(errno, ENOMEM);
    weir__stack_pool_fini(&p);
}

TEST(cache_limit)
{
    weir__stack_pool p;
    weir__stack *s[3];

    weir__stack_pool_init(&p);
    CHECK_EQ(p.max_cached, 1024);
    p.max_cached = 2;
    for (int i = 0; i < 3; i++)
        s[i] = weir__stack_get(&p, 0);
    for (int i = 0; i < 3; i++)
        weir__stack_put(&p, s[i]);
    CHECK_EQ(p.cached, 2); /* the third was unmapped */
    weir__stack_pool_fini(&p);

    CHECK_EQ(setenv("WEIR_STACK_CACHE", "7", 1), 0);
    weir__stack_pool_init(&p);
    CHECK_EQ(p.max_cached, 7);
    CHECK_EQ(setenv("WEIR_STACK_CACHE", "0", 1), 0);
    weir__stack_pool_init(&p);
    CHECK_EQ(p.max_cached, 0);
    s[0] = weir__stack_get(&p, 0);
    weir__stack_put(&p, s[0]);
    CHECK_EQ(p.cached, 0);
    CHECK_EQ(setenv("WEIR_STACK_CACHE", "lots", 1), 0); /* malformed: default */
    weir__stack_pool_init(&p);
    CHECK_EQ(p.max_cached, 1024);
    CHECK_EQ(unsetenv("WEIR_STACK_CACHE"), 0);
}

/* ---- children that fault ------------------------------------------------ */

typedef struct child_result {
    int status;
    char err[4096]; /* the child's stderr, NUL-terminated */
} child_result;

static void run_child(void (*fn)(void), child_result *r)
{
    int fds[2];
    pid_t pid;
    size_t used = 0;

    CHECK_EQ(pipe(fds), 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        fn();
        _exit(99); /* fn should not come back */
    }
    close(fds[1]);
    for (;;) {
        ssize_t n = read(fds[0], r->err + used, sizeof(r->err) - 1 - used);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        used += (size_t)n;
    }
    r->err[used] = '\0';
    close(fds[0]);
    CHECK_EQ(waitpid(pid, &r->status, 0), pid);
}

static void default_segv(void)
{
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
}

static void guard_write_child(void)
{
    weir__stack_pool p;
    weir__stack *s;

    default_segv();
    weir__stack_pool_init(&p);
    s = weir__stack_get(&p, 0);
    ((volatile char *)s->lo)[0] = 1;  /* fine */
    ((volatile char *)s->lo)[-1] = 1; /* guard page: SIGSEGV */
}

TEST(guard_page_faults)
{
    child_result r;

    run_child(guard_write_child, &r);
    CHECK(WIFSIGNALED(r.status));
    CHECK_EQ(WTERMSIG(r.status), SIGSEGV);
}

/* ---- THE overflow test -------------------------------------------------- */

static volatile int depth_limit = INT_MAX; /* keeps the recursion "bounded" */
static weir__ctx child_main, child_fiber;

/* 256+ bytes per frame, the buffer used after the call: no tail call, no
 * loop, no frame elimination at -O2. */
__attribute__((noinline)) static int recurse_forever(int depth)
{
    volatile char buf[256];

    buf[depth & 255] = (char)depth;
    if (depth >= depth_limit) return 0;
    return recurse_forever(depth + 1) + buf[(depth * 7) & 255];
}

static void recursing_fiber(void *arg)
{
    (void)arg;
    recurse_forever(0);
    _exit(98); /* unreachable: the recursion never ends */
}

static void overflow_child(void)
{
    weir__stack_pool p;
    weir__stack *s;

    CHECK_EQ(weir__stack_guard_thread_init(), 0);
    weir__stack_pool_init(&p);
    s = weir__stack_get(&p, 16 * 1024);
    CHECK(s != NULL);
    CHECK_EQ(weir__ctx_thread_init(&child_main), 0);
    weir__ctx_make(&child_fiber, s->lo, s->size, recursing_fiber, NULL);
    weir__stack_guard_enter(s, "deep-recursion");
    weir__ctx_switch(&child_main, &child_fiber);
}

TEST(overflow_reported)
{
    child_result r;

    run_child(overflow_child, &r);
    if (!WIFSIGNALED(r.status) || WTERMSIG(r.status) != SIGABRT)
        fprintf(stderr, "child status %#x, stderr:\n%s\n", r.status, r.err);
    CHECK(WIFSIGNALED(r.status));
    CHECK_EQ(WTERMSIG(r.status), SIGABRT);
    CHECK(strstr(r.err, "fiber stack overflow in task deep-recursion\n") != NULL);
}

/* ---- faults that are not overflows pass through ----------------------- */

static volatile char *forbidden_page;

static void wild_write_fiber(void *arg)
{
    (void)arg;
    forbidden_page[0] = 1; /* not near any fiber stack */
    _exit(97);
}

static void wild_write_with_guard(void)
{
    weir__stack_pool p;
    weir__stack *s;

    forbidden_page = mmap(NULL, page(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(forbidden_page != MAP_FAILED);
    CHECK_EQ(weir__stack_guard_thread_init(), 0);
    weir__stack_pool_init(&p);
    s = weir__stack_get(&p, 0);
    CHECK_EQ(weir__ctx_thread_init(&child_main), 0);
    weir__ctx_make(&child_fiber, s->lo, s->size, wild_write_fiber, NULL);
    weir__stack_guard_enter(s, "wild");
    weir__ctx_switch(&child_main, &child_fiber);
}

static void default_then_wild(void)
{
    default_segv();
    wild_write_with_guard();
}

TEST(other_fault_default_disposition)
{
    child_result r;

    run_child(default_then_wild, &r);
    CHECK(WIFSIGNALED(r.status));
    CHECK_EQ(WTERMSIG(r.status), SIGSEGV);
    CHECK(strstr(r.err, "fiber stack overflow") == NULL);
}

static void app_handler(int sig, siginfo_t *info, void *uctx)
{
    static const char msg[] = "app handler\n";

    (void)sig;
    (void)uctx;
    if (info->si_addr == (void *)forbidden_page && write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
        _exit(43);
    _exit(42);
}

static void app_handler_then_wild(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = app_handler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(SIGSEGV, &sa, NULL), 0);
    wild_write_with_guard();
}

TEST(other_fault_chains_to_previous_handler)
{
    child_result r;

    run_child(app_handler_then_wild, &r);
    CHECK(WIFEXITED(r.status));
    CHECK_EQ(WEXITSTATUS(r.status), 42);
    CHECK(strstr(r.err, "app handler\n") != NULL);
    CHECK(strstr(r.err, "fiber stack overflow") == NULL);
}

/* In a child too: the handler is installed once per process, and the tests
 * above need a process where that has not happened yet. */
static void init_fini_child(void)
{
    stack_t ss;

    for (int i = 0; i < 3; i++) {
        CHECK_EQ(weir__stack_guard_thread_init(), 0);
        CHECK_EQ(sigaltstack(NULL, &ss), 0);
        CHECK(!(ss.ss_flags & SS_DISABLE));
        weir__stack_guard_thread_fini();
    }
    _exit(0);
}

TEST(guard_thread_init_fini_repeat)
{
    child_result r;

    run_child(init_fini_child, &r);
    if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0)
        fprintf(stderr, "child status %#x, stderr:\n%s\n", r.status, r.err);
    CHECK(WIFEXITED(r.status));
    CHECK_EQ(WEXITSTATUS(r.status), 0);
}

TEST_MAIN()
