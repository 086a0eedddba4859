/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ctx.c - the fiber context switch (src/rt/ctx.h), whichever
 * implementation the build selected (asm or ucontext).
 *
 * Each test makes contexts on stacks it maps itself (with a guard page, so a
 * broken switch faults instead of scribbling), switches between them and the
 * thread's own context, and checks what must survive a switch: control flow,
 * the entry argument, callee-saved registers and the FP control state.
 * Also run under qemu-aarch64 by scripts/test-aarch64.sh.
 */
#include "rt/ctx.h"
#include "test.h"

#include <execinfo.h>
#include <fenv.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif
#if defined(WEIR_ASAN) && WEIR_ASAN
#include <sanitizer/asan_interface.h>
#endif

#define TEST_STACK_SIZE ((size_t)64 * 1024)

typedef struct test_stack {
    void *map;
    size_t len;
    void *lo;
    size_t size;
} test_stack;

static test_stack stack_new(size_t size)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    test_stack s = {.len = size + pg, .size = size};

    s.map = mmap(NULL, s.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(s.map != MAP_FAILED);
    CHECK_EQ(mprotect(s.map, pg, PROT_NONE), 0);
    s.lo = (char *)s.map + pg;
    return s;
}

static void stack_free(test_stack *s)
{
    /* A fiber that never returns leaves its frames' ASan redzones poisoned,
     * and the next mmap tends to reuse these addresses: clear the shadow, as
     * weir__stack_put does (ASan does not on munmap). */
#if defined(WEIR_ASAN) && WEIR_ASAN
    ASAN_UNPOISON_MEMORY_REGION(s->lo, s->size);
#endif
    CHECK_EQ(munmap(s->map, s->len), 0);
}

/* ---- ping-pong: main -> a -> b -> a -> ... -> main ---------------------- */

static weir__ctx main_ctx, a_ctx, b_ctx;
static long rounds_left;
static long a_turns, b_turns;
static char trace[8];
static int trace_len;

static void note(char c)
{
    if (trace_len < (int)sizeof(trace) - 1) trace[trace_len++] = c;
}

static void fiber_a(void *arg)
{
    CHECK(arg == &a_ctx);
    note('a');
    while (rounds_left > 0) {
        a_turns++;
        weir__ctx_switch(&a_ctx, &b_ctx);
    }
    weir__ctx_switch(&a_ctx, &main_ctx);
    abort(); /* never resumed again */
}

static void fiber_b(void *arg)
{
    CHECK(arg == &b_ctx);
    note('b');
    for (;;) {
        b_turns++;
        rounds_left--;
        weir__ctx_switch(&b_ctx, &a_ctx);
    }
}

TEST(ping_pong)
{
    test_stack sa = stack_new(TEST_STACK_SIZE), sb = stack_new(TEST_STACK_SIZE);

    CHECK_EQ(weir__ctx_thread_init(&main_ctx), 0);
    weir__ctx_make(&a_ctx, sa.lo, sa.size, fiber_a, &a_ctx);
    weir__ctx_make(&b_ctx, sb.lo, sb.size, fiber_b, &b_ctx);
    rounds_left = 200000;
    note('m');
    weir__ctx_switch(&main_ctx, &a_ctx);
    note('M');
    CHECK_EQ(rounds_left, 0);
    CHECK_EQ(a_turns, 200000);
    CHECK_EQ(b_turns, 200000);
    CHECK_STR(trace, "mabM");
    weir__ctx_thread_fini(&main_ctx);
    stack_free(&sa);
    stack_free(&sb);
}

/* ---- entry argument and repeated main <-> fiber round trips -------------- */

typedef struct echo {
    weir__ctx self, *back;
    uint64_t magic;
    uint64_t value; /* main writes, fiber doubles */
} echo;

static void echo_fiber(void *arg)
{
    echo *e = arg;

    CHECK_EQ(e->magic, 0x5eed5eed5eed5eedull);
    for (;;) {
        e->value *= 2;
        weir__ctx_switch(&e->self, e->back);
    }
}

TEST(entry_gets_arg)
{
    test_stack s = stack_new(TEST_STACK_SIZE);
    weir__ctx self;
    echo e = {.back = &self, .magic = 0x5eed5eed5eed5eedull};

    CHECK_EQ(weir__ctx_thread_init(&self), 0);
    weir__ctx_make(&e.self, s.lo, s.size, echo_fiber, &e);
    for (uint64_t i = 1; i <= 1000; i++) {
        e.value = i;
        weir__ctx_switch(&self, &e.self);
        CHECK_EQ(e.value, 2 * i);
    }
    weir__ctx_thread_fini(&self);
    stack_free(&s);
}

/* ---- callee-saved registers ------------------------------------------- */

/* Overwrite every callee-saved register the compiler lets us name, then
 * switch back: if the switch failed to restore them for the other side, its
 * values computed before the switch would be wrong after it. */
static void clobber_callee_saved(void)
{
#if defined(__x86_64__)
    __asm__ volatile("movq $-1, %%rbx\n\tmovq $-1, %%r12\n\tmovq $-1, %%r13\n\t"
                     "movq $-1, %%r14\n\tmovq $-1, %%r15" ::
                         : "rbx", "r12", "r13", "r14", "r15");
#elif defined(__aarch64__)
    __asm__ volatile("mov x19, #-1\n\tmov x20, #-1\n\tmov x21, #-1\n\tmov x22, #-1\n\t"
                     "mov x23, #-1\n\tmov x24, #-1\n\tmov x25, #-1\n\tmov x26, #-1\n\t"
                     "mov x27, #-1\n\tmov x28, #-1\n\t"
                     "fmov d8, #-1.0\n\tfmov d9, #-1.0\n\tfmov d10, #-1.0\n\t"
                     "fmov d11, #-1.0\n\tfmov d12, #-1.0\n\tfmov d13, #-1.0\n\t"
                     "fmov d14, #-1.0\n\tfmov d15, #-1.0" ::
                         : "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27", "x28",
                           "d8", "d9", "d10", "d11", "d12", "d13", "d14", "d15");
#endif
}

static weir__ctx regs_main, regs_fiber;

static void regs_clobberer(void *arg)
{
    (void)arg;
    for (;;) {
        clobber_callee_saved();
        weir__ctx_switch(&regs_fiber, &regs_main);
    }
}

/* Many integer and double values live across each switch: under -O2 they sit
 * in callee-saved registers (x86-64 has no callee-saved vector registers, so
 * the doubles there spill; on aarch64 they exercise d8-d15). */
__attribute__((noinline)) static void check_values_survive(int iters)
{
    uint64_t a = 1, b = 2, c = 3, d = 5, e = 7, f = 11, g = 13, h = 17;
    double x = 1.5, y = 2.25, z = 3.125, w = 4.0625, u = 0.5, v = 0.25, s = 8.0, t = 16.0;

    for (int i = 0; i < iters; i++) {
        uint64_t a0 = a, b0 = b, c0 = c, d0 = d, e0 = e, f0 = f, g0 = g, h0 = h;
        double x0 = x, y0 = y, z0 = z, w0 = w, u0 = u, v0 = v, s0 = s, t0 = t;

        weir__ctx_switch(&regs_main, &regs_fiber);
        CHECK(a == a0 && b == b0 && c == c0 && d == d0);
        CHECK(e == e0 && f == f0 && g == g0 && h == h0);
        CHECK(x == x0 && y == y0 && z == z0 && w == w0);
        CHECK(u == u0 && v == v0 && s == s0 && t == t0);
        a = a * 3 + b;
        b = b * 5 + c;
        c = c * 7 + d;
        d = d * 11 + e;
        e = e * 13 + f;
        f = f * 17 + g;
        g = g * 19 + h;
        h = h * 23 + a;
        x = x * 1.0001 + y;
        y = y * 0.9999 + z;
        z = z * 1.5 - w;
        w = w * 0.5 + u;
        u = u + 1.0;
        v = v * 2.0 - 0.125;
        s = s - 0.5;
        t = t * 0.75 + s;
    }
}

TEST(callee_saved_survive)
{
    test_stack s = stack_new(TEST_STACK_SIZE);

    CHECK_EQ(weir__ctx_thread_init(&regs_main), 0);
    weir__ctx_make(&regs_fiber, s.lo, s.size, regs_clobberer, NULL);
    check_values_survive(10000);
    weir__ctx_thread_fini(&regs_main);
    stack_free(&s);
}

/* The exact check, independent of the compiler's register allocation:
 * regs_switch(from, to, vals) loads every callee-saved register from vals,
 * calls weir__ctx_switch, and stores the registers back into vals. Both
 * sides use it with different patterns, so any register the switch fails to
 * restore comes back holding the other side's pattern. Written as top-level
 * asm because C cannot pin values to these registers across a call.
 *   x86-64:  vals = rbx, rbp, r12, r13, r14, r15
 *   aarch64: vals = x19..x29, d8..d15 */
#if defined(__x86_64__)
#define NREGS 6
__asm__(".text\n"
        ".p2align 4\n"
        "regs_switch:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    pushq %rdx\n" /* 7 pushes: rsp is 16-aligned for the call */
        "    movq 0(%rdx), %rbx\n"
        "    movq 8(%rdx), %rbp\n"
        "    movq 16(%rdx), %r12\n"
        "    movq 24(%rdx), %r13\n"
        "    movq 32(%rdx), %r14\n"
        "    movq 40(%rdx), %r15\n"
        "    call weir__ctx_switch@PLT\n"
        "    popq %rdx\n"
        "    movq %rbx, 0(%rdx)\n"
        "    movq %rbp, 8(%rdx)\n"
        "    movq %r12, 16(%rdx)\n"
        "    movq %r13, 24(%rdx)\n"
        "    movq %r14, 32(%rdx)\n"
        "    movq %r15, 40(%rdx)\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n");
#elif defined(__aarch64__)
#define NREGS 19
__asm__(".text\n"
        ".p2align 4\n"
        "regs_switch:\n"
        "    stp x29, x30, [sp, #-176]!\n"
        "    stp x19, x20, [sp, #16]\n"
        "    stp x21, x22, [sp, #32]\n"
        "    stp x23, x24, [sp, #48]\n"
        "    stp x25, x26, [sp, #64]\n"
        "    stp x27, x28, [sp, #80]\n"
        "    stp d8, d9, [sp, #96]\n"
        "    stp d10, d11, [sp, #112]\n"
        "    stp d12, d13, [sp, #128]\n"
        "    stp d14, d15, [sp, #144]\n"
        "    str x2, [sp, #160]\n"
        "    ldp x19, x20, [x2, #0]\n"
        "    ldp x21, x22, [x2, #16]\n"
        "    ldp x23, x24, [x2, #32]\n"
        "    ldp x25, x26, [x2, #48]\n"
        "    ldp x27, x28, [x2, #64]\n"
        "    ldr x29, [x2, #80]\n"
        "    ldp d8, d9, [x2, #88]\n"
        "    ldp d10, d11, [x2, #104]\n"
        "    ldp d12, d13, [x2, #120]\n"
        "    ldp d14, d15, [x2, #136]\n"
        "    bl weir__ctx_switch\n"
        "    ldr x2, [sp, #160]\n"
        "    stp x19, x20, [x2, #0]\n"
        "    stp x21, x22, [x2, #16]\n"
        "    stp x23, x24, [x2, #32]\n"
        "    stp x25, x26, [x2, #48]\n"
        "    stp x27, x28, [x2, #64]\n"
        "    str x29, [x2, #80]\n"
        "    stp d8, d9, [x2, #88]\n"
        "    stp d10, d11, [x2, #104]\n"
        "    stp d12, d13, [x2, #120]\n"
        "    stp d14, d15, [x2, #136]\n"
        "    ldp x19, x20, [sp, #16]\n"
        "    ldp x21, x22, [sp, #32]\n"
        "    ldp x23, x24, [sp, #48]\n"
        "    ldp x25, x26, [sp, #64]\n"
        "    ldp x27, x28, [sp, #80]\n"
        "    ldp d8, d9, [sp, #96]\n"
        "    ldp d10, d11, [sp, #112]\n"
        "    ldp d12, d13, [sp, #128]\n"
        "    ldp d14, d15, [sp, #144]\n"
        "    ldp x29, x30, [sp], #176\n"
        "    ret\n");
#endif

#if defined(NREGS)
void regs_switch(weir__ctx *from, weir__ctx *to, uint64_t *vals);

static weir__ctx exact_main, exact_fiber;

static void fill(uint64_t *vals, uint64_t tag)
{
    for (int i = 0; i < NREGS; i++)
        vals[i] = tag << 32 | (uint64_t)i << 8 | 0x5a;
}

static void check_vals(const uint64_t *vals, uint64_t tag)
{
    uint64_t want[NREGS];

    fill(want, tag);
    for (int i = 0; i < NREGS; i++)
        if (vals[i] != want[i])
            TEST__FAIL("register %d: %#" PRIx64 " != %#" PRIx64, i, vals[i], want[i]);
}

static void exact_fiber_fn(void *arg)
{
    uint64_t vals[NREGS];

    (void)arg;
    for (uint64_t round = 1;; round++) {
        fill(vals, 0xf1b0 + round);
        regs_switch(&exact_fiber, &exact_main, vals);
        check_vals(vals, 0xf1b0 + round);
    }
}

TEST(callee_saved_exact)
{
    test_stack s = stack_new(TEST_STACK_SIZE);
    uint64_t vals[NREGS];

    CHECK_EQ(weir__ctx_thread_init(&exact_main), 0);
    weir__ctx_make(&exact_fiber, s.lo, s.size, exact_fiber_fn, NULL);
    for (uint64_t round = 1; round <= 1000; round++) {
        fill(vals, 0x3a10 + round);
        regs_switch(&exact_main, &exact_fiber, vals);
        check_vals(vals, 0x3a10 + round);
    }
    weir__ctx_thread_fini(&exact_main);
    stack_free(&s);
}
#endif

/* ---- floating-point control state is per context ---------------------- */

static weir__ctx fp_main, fp_up, fp_plain;
static volatile double fp_one = 1.0, fp_three = 3.0;
static double third_nearest;
static int up_round_seen, plain_round_seen;
static double up_third, plain_third;
#if defined(__x86_64__)
static unsigned int up_csr;
#endif

static double third(void)
{
    return fp_one / fp_three;
}

static void fp_up_fiber(void *arg)
{
    (void)arg;
    CHECK_EQ(fesetround(FE_UPWARD), 0);
#if defined(__x86_64__)
    /* Also flush-to-zero and denormals-are-zero: MXCSR bits fenv cannot set. */
    _mm_setcsr(_mm_getcsr() | 0x8040);
    up_csr = _mm_getcsr();
#endif
    for (;;) {
        weir__ctx_switch(&fp_up, &fp_main);
#if defined(__x86_64__)
        CHECK_EQ(_mm_getcsr(), up_csr); /* exactly, flags included */
#endif
        up_round_seen = fegetround();
        up_third = third();
#if defined(__x86_64__)
        up_csr = _mm_getcsr(); /* now with the inexact flag */
#endif
    }
}

static void fp_plain_fiber(void *arg)
{
    (void)arg;
    for (;;) {
        plain_round_seen = fegetround();
        plain_third = third();
        weir__ctx_switch(&fp_plain, &fp_main);
    }
}

TEST(fp_control_per_context)
{
    test_stack s1 = stack_new(TEST_STACK_SIZE), s2 = stack_new(TEST_STACK_SIZE);
#if defined(__x86_64__)
    unsigned int main_csr;
#endif

    CHECK_EQ(fegetround(), FE_TONEAREST);
    third_nearest = third();
#if defined(__x86_64__)
    main_csr = _mm_getcsr();
#endif
    CHECK_EQ(weir__ctx_thread_init(&fp_main), 0);
    weir__ctx_make(&fp_up, s1.lo, s1.size, fp_up_fiber, NULL);
    weir__ctx_make(&fp_plain, s2.lo, s2.size, fp_plain_fiber, NULL);

    weir__ctx_switch(&fp_main, &fp_up); /* fiber switches rounding mode */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(fegetround(), FE_TONEAREST);
        CHECK(third() == third_nearest);
#if defined(__x86_64__)
        CHECK_EQ(_mm_getcsr(), main_csr);
#endif
        weir__ctx_switch(&fp_main, &fp_plain);
        CHECK_EQ(plain_round_seen, FE_TONEAREST);
        CHECK(plain_third == third_nearest);
        weir__ctx_switch(&fp_main, &fp_up);
        CHECK_EQ(up_round_seen, FE_UPWARD);
        CHECK(up_third > third_nearest); /* 1/3 rounds down when nearest */
    }
    CHECK_EQ(fegetround(), FE_TONEAREST);
    weir__ctx_thread_fini(&fp_main);
    stack_free(&s1);
    stack_free(&s2);
}

#if defined(__x86_64__)
/* The whole MXCSR travels with the context, including the sticky exception
 * flags: a fiber's inexact result does not show up in the scheduler. */
static weir__ctx flag_main, flag_fiber;
static int fiber_flags_seen;
static volatile double fp_sink;

static void flag_fiber_fn(void *arg)
{
    (void)arg;
    for (;;) {
        feclearexcept(FE_ALL_EXCEPT);
        fp_sink = third(); /* raises FE_INEXACT in MXCSR */
        fiber_flags_seen = fetestexcept(FE_INEXACT);
        weir__ctx_switch(&flag_fiber, &flag_main);
    }
}

TEST(mxcsr_flags_restored)
{
    test_stack s = stack_new(TEST_STACK_SIZE);

    CHECK_EQ(weir__ctx_thread_init(&flag_main), 0);
    weir__ctx_make(&flag_fiber, s.lo, s.size, flag_fiber_fn, NULL);
    feclearexcept(FE_ALL_EXCEPT);
    weir__ctx_switch(&flag_main, &flag_fiber);
    CHECK(fiber_flags_seen & FE_INEXACT);
    CHECK_EQ(_mm_getcsr() & 0x3f, 0); /* no SSE exception flags here */
    weir__ctx_thread_fini(&flag_main);
    stack_free(&s);
}
#endif

/* ---- stack use inside a fiber ------------------------------------------ */

static weir__ctx deep_main, deep_fiber;
static long deep_result;

/* About 150 bytes of frame per level (more under ASan): 150 levels stay well
 * inside 64 KiB. The buffer is used after the recursive call so neither the
 * frame nor the call can be optimised away. */
__attribute__((noinline)) static long recurse_sum(int n)
{
    volatile char buf[96];

    buf[n % 96] = (char)n;
    if (n == 0) return 0;
    return recurse_sum(n - 1) + buf[n % 96];
}

static void deep_fn(void *arg)
{
    int depth = *(int *)arg;

    deep_result = recurse_sum(depth);
    weir__ctx_switch(&deep_fiber, &deep_main);
    abort();
}

TEST(deep_recursion_fits)
{
    test_stack s = stack_new(TEST_STACK_SIZE);
    int depth = 150;
    long want = 0;

    for (int i = 1; i <= depth; i++)
        want += (char)i;
    CHECK_EQ(weir__ctx_thread_init(&deep_main), 0);
    weir__ctx_make(&deep_fiber, s.lo, s.size, deep_fn, &depth);
    weir__ctx_switch(&deep_main, &deep_fiber);
    CHECK_EQ(deep_result, want);
    weir__ctx_thread_fini(&deep_main);
    stack_free(&s);
}

/* ---- stack alignment and unwinding ------------------------------------- */

static weir__ctx misc_main, misc_fiber;
static uintptr_t entry_frame_addr;
static int bt_frames;

static void align_fn(void *arg)
{
    (void)arg;
    /* The frame address is where the frame pointer points: the caller's
     * rsp - 16 on x86-64 (return address + saved rbp), sp itself on aarch64.
     * Either way it is 16-aligned only if entry was called per the ABI. */
    entry_frame_addr = (uintptr_t)__builtin_frame_address(0);
    /* glibc's backtrace() walks the DWARF CFI; it must stop cleanly at the
     * trampoline (undefined return address) instead of running off the top
     * of the fiber stack. */
    void *frames[64];
    bt_frames = backtrace(frames, 64);
    weir__ctx_switch(&misc_fiber, &misc_main);
    abort();
}

TEST(aligned_entry_and_clean_backtrace)
{
    test_stack s = stack_new(TEST_STACK_SIZE);

    CHECK_EQ(weir__ctx_thread_init(&misc_main), 0);
    weir__ctx_make(&misc_fiber, s.lo, s.size - 8, align_fn, NULL); /* unaligned top */
    weir__ctx_switch(&misc_main, &misc_fiber);
    CHECK_EQ(entry_frame_addr % 16, 0);
    CHECK(entry_frame_addr > (uintptr_t)s.lo);
    CHECK(entry_frame_addr < (uintptr_t)s.lo + s.size);
    CHECK_GE(bt_frames, 1);
    CHECK_LT(bt_frames, 8); /* align_fn, trampoline, perhaps a libc frame */
    weir__ctx_thread_fini(&misc_main);
    stack_free(&s);
}

TEST_MAIN()
