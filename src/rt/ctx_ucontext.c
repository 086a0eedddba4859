/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctx_ucontext.c - portable fiber context switch on getcontext/makecontext/
 * swapcontext (see ctx.h), selected with WEIR_CONTEXT=ucontext.
 *
 * weir__ctx.sp holds a ucontext_t *. A made context keeps its ucontext_t
 * (plus entry and arg) in a `made_frame` carved from the top of the fiber
 * stack, and the fiber runs on the stack below it: no allocation per fiber,
 * and the frame is freed with the stack. A thread's own context is
 * calloc'd by weir__ctx_thread_init (zeroed so its uc_stack reads as "size
 * unknown", which ASan's swapcontext interceptor relies on) and freed by
 * weir__ctx_thread_fini.
 *
 * makecontext(3) passes only int arguments to the new function, so the
 * made_frame pointer travels as two 32-bit halves and is reassembled in the
 * trampoline.
 *
 * Slow by design: glibc's swapcontext makes an rt_sigprocmask syscall per
 * switch. It is the fallback for architectures without ctx_<arch>.S and a
 * second implementation to test the scheduler against.
 *
 * CMake compiles every .c file in src/rt, so this file is empty unless
 * WEIR_CONTEXT_UCONTEXT is set.
 */
#if defined(WEIR_CONTEXT_UCONTEXT) && WEIR_CONTEXT_UCONTEXT

#include "rt/ctx.h"

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <ucontext.h>

typedef struct made_frame {
    ucontext_t uc; /* first: weir__ctx.sp points at the frame and at uc */
    void (*entry)(void *);
    void *arg;
} made_frame;

/* Generous alignment for the carved frame: covers any alignment glibc's
 * getcontext may assume for the FP save area inside ucontext_t. */
#define MADE_FRAME_ALIGN 64

static void trampoline(unsigned int hi, unsigned int lo)
{
    made_frame *f = (made_frame *)(((uintptr_t)hi << 16 << 16) | (uintptr_t)lo);

    f->entry(f->arg);
    /* entry must switch away for good instead of returning (ctx.h); with
     * uc_link == NULL returning would silently end the whole thread. */
    abort();
}

void weir__ctx_make(weir__ctx *ctx, void *stack_lo, size_t size, void (*entry)(void *), void *arg)
{
    uintptr_t lo = (uintptr_t)stack_lo;
    uintptr_t top = (lo + size - sizeof(made_frame)) & ~(uintptr_t)(MADE_FRAME_ALIGN - 1);
    made_frame *f = (made_frame *)top;
    uintptr_t fp = (uintptr_t)f;

    assert(size > sizeof(made_frame) + MADE_FRAME_ALIGN);
    f->entry = entry;
    f->arg = arg;
    if (getcontext(&f->uc) != 0)
        abort(); /* cannot fail on Linux: no syscall errors possible here */
    f->uc.uc_link = NULL;
    f->uc.uc_stack.ss_sp = stack_lo;
    f->uc.uc_stack.ss_size = top - lo;
    f->uc.uc_stack.ss_flags = 0;
    /* The shifts in two steps keep this defined where uintptr_t is 32-bit. */
    makecontext(&f->uc, (void (*)(void))trampoline, 2, (unsigned int)(fp >> 16 >> 16),
                (unsigned int)(fp & 0xffffffffu));
    ctx->sp = &f->uc;
}

void weir__ctx_switch(weir__ctx *from, weir__ctx *to)
{
    if (swapcontext(from->sp, to->sp) != 0)
        abort(); /* only fails for an invalid context: a scheduler bug */
}

int weir__ctx_thread_init(weir__ctx *self)
{
    self->sp = calloc(1, sizeof(ucontext_t));
    return self->sp ? 0 : -ENOMEM;
}

void weir__ctx_thread_fini(weir__ctx *self)
{
    free(self->sp);
    self->sp = NULL;
}

#else

/* ISO C forbids an empty translation unit. */
typedef int weir__ctx_ucontext_unused;

#endif
