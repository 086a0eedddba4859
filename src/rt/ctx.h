/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctx.h - machine context switch for fibers (private).
 *
 * Two implementations behind one interface, chosen at build time:
 *   WEIR_CONTEXT_ASM      ctx_x86_64.S (SysV) or ctx_aarch64.S: saves the
 *                         callee-saved registers, the stack pointer and the FP
 *                         control words (MXCSR + x87 CW; FPCR on aarch64) on
 *                         the stack being left, stores the stack pointer in
 *                         *from, and resumes *to.
 *   WEIR_CONTEXT_UCONTEXT ctx_ucontext.c: swapcontext(3); portable, slow
 *                         (it saves the signal mask with a syscall).
 *
 * A context is either a thread's own ("the scheduler context", set up by
 * weir__ctx_thread_init) or one made on a fiber stack by weir__ctx_make. A
 * made context starts in entry(arg) on its first switch-in; entry must never
 * return (it switches away for the last time instead).
 */
#ifndef WEIR_RT_CTX_H
#define WEIR_RT_CTX_H

#include <stddef.h>

typedef struct weir__ctx {
    void *sp; /* asm: saved stack pointer; ucontext: ucontext_t * */
} weir__ctx;

void weir__ctx_switch(weir__ctx *from, weir__ctx *to);
/* Prepare ctx to run entry(arg) on [stack_lo, stack_lo + size). The ucontext
 * build keeps its ucontext_t at the top of that range. */
void weir__ctx_make(weir__ctx *ctx, void *stack_lo, size_t size, void (*entry)(void *), void *arg);
/* The calling thread's own context (storage for ucontext is allocated). */
int weir__ctx_thread_init(weir__ctx *self);
void weir__ctx_thread_fini(weir__ctx *self);

#endif
