/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stack.c - fiber stacks: guarded mappings, the per-loop pool, and the
 * SIGSEGV handler that turns a guard-page hit into a readable message.
 *
 * Mapping: one anonymous MAP_NORESERVE|MAP_STACK mapping of guard + size
 * bytes; the lowest page is then made PROT_NONE. MAP_NORESERVE keeps untouched
 * stack pages out of the commit charge, so a million 64 KiB stacks cost only
 * what they actually touch. The weir__stack header lives in a small malloc,
 * not inside the mapping: the usable range stays exactly `size` bytes, and
 * the ucontext build can carve its frame from the top of it (ctx_ucontext.c)
 * without colliding with the header.
 *
 * Pool: a singly linked free list per loop (one loop per thread, so no
 * locking). Only stacks of the requested usable size are reused; beyond
 * max_cached (default 1024, env WEIR_STACK_CACHE) put() unmaps.
 *
 * Overflow reporter: weir__stack_guard_enter records the running fiber's
 * guard range and task name in initial-exec thread-locals (plain loads, so
 * the handler may read them). The SIGSEGV/SIGBUS handler runs on a per-thread
 * alternate stack, because the faulting stack has no room left. A fault is
 * classified as an overflow of the current fiber when si_addr lies
 *   - in its guard page, or
 *   - up to OVERFLOW_SLACK (64 KiB) below the guard page, and the
 *     interrupted stack pointer is itself at or below the bottom page of
 *     the usable range. A frame larger than a page can step over the guard
 *     page; if what lies below is unmapped the fault lands there. (If it is
 *     mapped, nothing faults: guard pages cannot catch that case.)
 * Then it writes "fiber stack overflow in task <name>\n" with write(2) and
 * aborts. Any other fault goes to the handler that was installed before ours;
 * if that was SIG_DFL or SIG_IGN the default disposition is restored and the
 * handler returns, so the faulting instruction faults again and the process
 * dies the normal way (core dump included).
 *
 * Process-wide state: the previous SIGSEGV/SIGBUS actions, saved once when
 * the handler is installed. Signal dispositions are per process, so this is
 * the unavoidable registry DESIGN.md allows.
 */
#include "rt/stack.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(WEIR_ASAN) && WEIR_ASAN
#include <sanitizer/asan_interface.h>
#define STACK_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define STACK_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define STACK_DEFAULT_SIZE  ((size_t)64 * 1024)
#define STACK_DEFAULT_CACHE 1024
#define OVERFLOW_SLACK      ((uintptr_t)64 * 1024)
#define ALTSTACK_MIN        ((size_t)64 * 1024)

#define TLS_IE __thread __attribute__((tls_model("initial-exec")))

/* ---- stacks and the pool ---------------------------------------------- */

static size_t page_size(void)
{
    /* Every thread computes the same value, so a relaxed cache suffices; it
     * is atomic only to keep the benign race out of TSan reports. Lock-free,
     * so the signal handler may read it too. */
    static atomic_size_t cached;
    size_t v = atomic_load_explicit(&cached, memory_order_relaxed);

    if (v == 0) {
        v = (size_t)sysconf(_SC_PAGESIZE);
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

static weir__stack *stack_map(size_t size)
{
    size_t guard = page_size();
    weir__stack *s = malloc(sizeof(*s));
    void *map;

    if (!s) return NULL;
    map = mmap(NULL, guard + size, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (map == MAP_FAILED) goto fail_malloc;
    if (mprotect(map, guard, PROT_NONE) != 0) {
        int saved = errno;
        munmap(map, guard + size);
        errno = saved;
        goto fail_malloc;
    }
    *s = (weir__stack){
        .next = NULL,
        .map = map,
        .map_len = guard + size,
        .lo = (char *)map + guard,
        .size = size,
    };
    return s;

fail_malloc:
    free(s);
    return NULL;
}

static void stack_unmap(weir__stack *s)
{
    /* Frames of a fiber that never returned leave ASan poison behind; clear
     * it so whatever reuses these addresses starts clean. */
    STACK_UNPOISON(s->lo, s->size);
    munmap(s->map, s->map_len);
    free(s);
}

static size_t cache_limit_from_env(void)
{
    const char *v = getenv("WEIR_STACK_CACHE");
    char *end;
    unsigned long n;

    if (!v || *v == '\0') return STACK_DEFAULT_CACHE;
    errno = 0;
    n = strtoul(v, &end, 10);
    if (errno != 0 || *end != '\0' || v[0] == '-')
        return STACK_DEFAULT_CACHE; /* malformed: ignore rather than fail init */
    return (size_t)n;
}

void weir__stack_pool_init(weir__stack_pool *p)
{
    p->free_list = NULL;
    p->cached = 0;
    p->max_cached = cache_limit_from_env();
    p->shared = NULL;
}

/* Pools of a runtime keep at most this many stacks of their own and trade
 * the rest with the shared pool this many at a time. */
#define POOL_LOCAL_MAX 128
#define POOL_BATCH     32

void weir__stack_shared_init(weir__stack_shared *sh)
{
    pthread_mutex_init(&sh->lock, NULL);
    sh->free_list = NULL;
    sh->cached = 0;
    sh->max_cached = cache_limit_from_env();
}

void weir__stack_shared_fini(weir__stack_shared *sh)
{
    weir__stack *s = sh->free_list;
    while (s) {
        weir__stack *next = s->next;
        stack_unmap(s);
        s = next;
    }
    sh->free_list = NULL;
    sh->cached = 0;
    pthread_mutex_destroy(&sh->lock);
}

/* Move up to POOL_BATCH stacks of `size` from the shared pool to p. */
static void pool_refill(weir__stack_pool *p, size_t size)
{
    weir__stack_shared *sh = p->shared;
    int n = 0;
    pthread_mutex_lock(&sh->lock);
    for (weir__stack **link = &sh->free_list; *link && n < POOL_BATCH;) {
        weir__stack *s = *link;
        if (s->size != size) {
            link = &s->next;
            continue;
        }
        *link = s->next;
        sh->cached--;
        s->next = p->free_list;
        p->free_list = s;
        p->cached++;
        n++;
    }
    pthread_mutex_unlock(&sh->lock);
}

/* p is full: hand a batch to the shared pool (which unmaps beyond its own
 * limit). */
static void pool_spill(weir__stack_pool *p)
{
    weir__stack_shared *sh = p->shared;
    weir__stack *batch = NULL, *drop = NULL;
    for (int n = 0; n < POOL_BATCH && p->free_list; n++) {
        weir__stack *s = p->free_list;
        p->free_list = s->next;
        p->cached--;
        s->next = batch;
        batch = s;
    }
    pthread_mutex_lock(&sh->lock);
    while (batch) {
        weir__stack *s = batch;
        batch = s->next;
        if (sh->cached < sh->max_cached) {
            s->next = sh->free_list;
            sh->free_list = s;
            sh->cached++;
        } else {
            s->next = drop;
            drop = s;
        }
    }
    pthread_mutex_unlock(&sh->lock);
    while (drop) {
        weir__stack *s = drop;
        drop = s->next;
        stack_unmap(s);
    }
}

void weir__stack_pool_fini(weir__stack_pool *p)
{
    weir__stack *s = p->free_list;

    while (s) {
        weir__stack *next = s->next;
        stack_unmap(s);
        s = next;
    }
    p->free_list = NULL;
    p->cached = 0;
}

weir__stack *weir__stack_get(weir__stack_pool *p, size_t size)
{
    size_t pg = page_size();
    weir__stack **link;

    if (size == 0) size = STACK_DEFAULT_SIZE;
    if (size > SIZE_MAX - 2 * pg) {
        errno = ENOMEM;
        return NULL;
    }
    size = (size + pg - 1) & ~(pg - 1);

    /* Linear, but a loop's fibers nearly all use the default size, so the
     * head matches; a mixed-size pool costs at most max_cached steps. */
    for (int again = p->shared != NULL;; again = 0) {
        for (link = &p->free_list; *link; link = &(*link)->next) {
            weir__stack *s = *link;
            if (s->size == size) {
                *link = s->next;
                s->next = NULL;
                p->cached--;
                return s;
            }
        }
        if (!again)
            break;
        pool_refill(p, size);
    }
    return stack_map(size);
}

void weir__stack_put(weir__stack_pool *p, weir__stack *s)
{
    if (!s) return;
    if (p->shared && p->cached >= POOL_LOCAL_MAX)
        pool_spill(p);
    if (p->cached >= p->max_cached) {
        stack_unmap(s);
        return;
    }
    STACK_UNPOISON(s->lo, s->size);
    s->next = p->free_list;
    p->free_list = s;
    p->cached++;
}

/* ---- overflow reporter ------------------------------------------------ */

/* The running fiber's guard page [guard_lo, guard_hi) and task name; all 0
 * when no fiber runs. Written by the thread itself, read by its own signal
 * handler: same thread, so plain accesses suffice (volatile stops the
 * compiler from caching them across the switch). initial-exec so that
 * reading them never calls __tls_get_addr (which may allocate). */
static TLS_IE volatile uintptr_t guard_lo;
static TLS_IE volatile uintptr_t guard_hi;
static TLS_IE const char *volatile guard_task;
/* The alternate signal stack this module installed on this thread, if any. */
static TLS_IE void *altstack_mem;
static TLS_IE size_t altstack_len;

static pthread_once_t handler_once = PTHREAD_ONCE_INIT;
static int handler_err;
static struct sigaction prev_segv;
static struct sigaction prev_bus;

static void write_all(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        buf += n;
        len -= (size_t)n;
    }
}

/* The interrupted stack pointer, or 0 when this architecture is not known
 * (then the slack region below the guard is judged by address alone). */
static uintptr_t fault_sp(const void *uctx)
{
    const ucontext_t *uc = uctx;
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.sp;
#else
    (void)uc;
    return 0;
#endif
}

static int is_overflow(uintptr_t addr, const void *uctx)
{
    uintptr_t lo = guard_lo, hi = guard_hi, sp;

    if (lo == 0) return 0; /* no fiber running on this thread */
    if (addr >= lo && addr < hi) return 1;
    if (addr >= hi || lo - addr > OVERFLOW_SLACK) return 0;
    /* Below the guard: only an overflow if the stack itself ran out. */
    sp = fault_sp(uctx);
    return sp == 0 || sp < hi + page_size();
}

static void segv_handler(int sig, siginfo_t *info, void *uctx)
{
    const struct sigaction *prev = sig == SIGBUS ? &prev_bus : &prev_segv;
    /* si_code <= 0: sent by kill/raise/sigqueue, not a fault: never ours. */
    if (info->si_code > 0 && is_overflow((uintptr_t)info->si_addr, uctx)) {
        static const char head[] = "fiber stack overflow in task ";
        const char *name = guard_task ? guard_task : "(unnamed)";
        size_t len = 0;

        while (len < 256 && name[len] != '\0')
            len++;
        write_all(head, sizeof(head) - 1);
        write_all(name, len);
        write_all("\n", 1);
        abort();
    }

    if (prev->sa_flags & SA_SIGINFO) {
        prev->sa_sigaction(sig, info, uctx);
        return;
    }
    if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
        prev->sa_handler(sig);
        return;
    }
    /* Default (or ignored, which the kernel overrides for real faults):
     * restore it and let the fault recur, or re-raise a sent signal. */
    signal(sig, SIG_DFL);
    if (info->si_code <= 0) raise(sig);
}

static int install_one(int sig, struct sigaction *prev)
{
    struct sigaction sa;

    /* Read the previous action before installing ours, so the handler never
     * sees `prev` half-written if the signal arrives right after. */
    if (sigaction(sig, NULL, prev) != 0) return -errno;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = segv_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0) return -errno;
    return 0;
}

static void install_handlers(void)
{
    handler_err = install_one(SIGSEGV, &prev_segv);
    if (handler_err == 0) handler_err = install_one(SIGBUS, &prev_bus);
}

int weir__stack_guard_thread_init(void)
{
    stack_t cur;

    if (sigaltstack(NULL, &cur) != 0) return -errno;
    if (!(cur.ss_flags & SS_DISABLE)) {
        /* Someone (the application, ASan) already gave this thread an
         * alternate stack: keep it rather than pull it from under them. */
    } else if (!altstack_mem) {
        size_t len = (size_t)sysconf(_SC_SIGSTKSZ) * 4;
        stack_t ss;
        void *mem;

        if (len < ALTSTACK_MIN) len = ALTSTACK_MIN;
        mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) return -errno;
        ss = (stack_t){.ss_sp = mem, .ss_size = len, .ss_flags = 0};
        if (sigaltstack(&ss, NULL) != 0) {
            int err = -errno;
            munmap(mem, len);
            return err;
        }
        altstack_mem = mem;
        altstack_len = len;
    }

    pthread_once(&handler_once, install_handlers);
    return handler_err;
}

void weir__stack_guard_thread_fini(void)
{
    stack_t cur;

    weir__stack_guard_enter(NULL, NULL);
    if (!altstack_mem) return;
    /* Only remove the alternate stack if it is still ours. */
    if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == altstack_mem) {
        stack_t off = {.ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE};
        if (sigaltstack(&off, NULL) != 0)
            return; /* still in use (cannot happen outside a handler): leak it */
    }
    munmap(altstack_mem, altstack_len);
    altstack_mem = NULL;
    altstack_len = 0;
}

void weir__stack_guard_enter(const weir__stack *s, const char *task_name)
{
    if (!s) {
        guard_lo = 0;
        guard_hi = 0;
        guard_task = NULL;
        return;
    }
    /* Clear first so a fault in between never pairs one fiber's range with
     * another's name. */
    guard_lo = 0;
    guard_task = task_name;
    guard_hi = (uintptr_t)s->lo;
    guard_lo = (uintptr_t)s->map;
}
