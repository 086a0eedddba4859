/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctx_x86_64.S - fiber context switch for x86-64 System V (see ctx.h).
 *
 * A suspended context is nothing but its saved stack pointer: everything
 * else the SysV ABI makes callee-saved is pushed on the stack being left.
 * Frame at ctx->sp, lowest address first (64 bytes, rsp stays 16-aligned):
 *
 *      0   MXCSR (4 bytes)         SSE rounding/FTZ/DAZ/masks and flags
 *      4   x87 control word (2)    x87 precision/rounding/masks
 *      8   r15
 *     16   r14
 *     24   r13                     made context: arg for entry
 *     32   r12                     made context: entry
 *     40   rbx
 *     48   rbp                     made context: 0, ends frame-pointer walks
 *     56   return address          made context: weir__ctx_trampoline
 *
 * The control words are part of the ABI's callee-saved state ("the control
 * bits of MXCSR and the x87 control word"), so a fiber that changes its
 * rounding mode must not leak it into the scheduler or other fibers.
 * The x87 status word and the rest of the x87 state are caller-saved and
 * ignored. The caller-saved vector registers are not saved either: the
 * compiler already assumes a call to weir__ctx_switch clobbers them.
 *
 * Not compatible with CET shadow stacks (the return address is replaced
 * under the hardware's feet); we emit no .note.gnu.property, so the linker
 * marks any binary containing this file as not shadow-stack capable.
 */

    .text

/*
 * void weir__ctx_switch(weir__ctx *from, weir__ctx *to)
 *   rdi = from, rsi = to
 * The CFI describes the frame relative to rsp only, so it stays correct after
 * rsp moves to the other stack: an unwinder stopped inside this function
 * walks whichever stack rsp currently points at.
 */
    .globl  weir__ctx_switch
    .type   weir__ctx_switch, @function
    .p2align 4
weir__ctx_switch:
    .cfi_startproc
    pushq   %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rbp, 0
    pushq   %rbx
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %rbx, 0
    pushq   %r12
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %r12, 0
    pushq   %r13
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %r13, 0
    pushq   %r14
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %r14, 0
    pushq   %r15
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset %r15, 0
    subq    $8, %rsp
    .cfi_adjust_cfa_offset 8
    stmxcsr (%rsp)
    fnstcw  4(%rsp)

    movq    %rsp, (%rdi)
    movq    (%rsi), %rsp

    ldmxcsr (%rsp)
    fldcw   4(%rsp)
    addq    $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq    %r15
    .cfi_adjust_cfa_offset -8
    .cfi_restore %r15
    popq    %r14
    .cfi_adjust_cfa_offset -8
    .cfi_restore %r14
    popq    %r13
    .cfi_adjust_cfa_offset -8
    .cfi_restore %r13
    popq    %r12
    .cfi_adjust_cfa_offset -8
    .cfi_restore %r12
    popq    %rbx
    .cfi_adjust_cfa_offset -8
    .cfi_restore %rbx
    popq    %rbp
    .cfi_adjust_cfa_offset -8
    .cfi_restore %rbp
    ret
    .cfi_endproc
    .size   weir__ctx_switch, .-weir__ctx_switch

/*
 * First code a made context runs: weir__ctx_switch "returns" here with
 * rsp 16-aligned (ctx_make arranges it), so the call below enters entry with
 * rsp + 8 16-aligned as SysV requires. The return address column is
 * undefined, which tells DWARF unwinders (gdb, libgcc's backtrace, ASan's
 * slow unwinder) that this is the outermost frame; rbp == 0 does the same for
 * frame-pointer walkers (ASan's fast unwinder, perf).
 */
    .type   weir__ctx_trampoline, @function
    .p2align 4
weir__ctx_trampoline:
    .cfi_startproc
    .cfi_undefined %rip
    movq    %r13, %rdi
    callq   *%r12
    /* entry must switch away for good instead of returning (ctx.h). */
    ud2
    .cfi_endproc
    .size   weir__ctx_trampoline, .-weir__ctx_trampoline

/*
 * void weir__ctx_make(weir__ctx *ctx, void *stack_lo, size_t size,
 *                     void (*entry)(void *), void *arg)
 *   rdi = ctx, rsi = stack_lo, rdx = size, rcx = entry, r8 = arg
 * Writes the frame described at the top of this file below a 16-byte zeroed
 * pad at the aligned top of the stack (the pad reads as a null return address
 * and frame pointer to naive stack walkers). The control words start at
 * their ABI-defined initial values rather than the caller's, so a fiber's
 * floating-point behaviour does not depend on who spawned it.
 */
    .globl  weir__ctx_make
    .type   weir__ctx_make, @function
    .p2align 4
weir__ctx_make:
    .cfi_startproc
    leaq    (%rsi,%rdx), %rax
    andq    $-16, %rax
    subq    $80, %rax
    movl    $0x1f80, 0(%rax)        /* MXCSR: all exceptions masked, RN */
    movl    $0x037f, 4(%rax)        /* x87 CW: masked, extended, RN */
    movq    $0, 8(%rax)             /* r15 */
    movq    $0, 16(%rax)            /* r14 */
    movq    %r8, 24(%rax)           /* r13 = arg */
    movq    %rcx, 32(%rax)          /* r12 = entry */
    movq    $0, 40(%rax)            /* rbx */
    movq    $0, 48(%rax)            /* rbp */
    leaq    weir__ctx_trampoline(%rip), %rdx
    movq    %rdx, 56(%rax)
    movq    $0, 64(%rax)
    movq    $0, 72(%rax)
    movq    %rax, (%rdi)
    ret
    .cfi_endproc
    .size   weir__ctx_make, .-weir__ctx_make

/* int weir__ctx_thread_init(weir__ctx *self): nothing to allocate; the saved
 * stack pointer is written by the first switch away. */
    .globl  weir__ctx_thread_init
    .type   weir__ctx_thread_init, @function
    .p2align 4
weir__ctx_thread_init:
    .cfi_startproc
    movq    $0, (%rdi)
    xorl    %eax, %eax
    ret
    .cfi_endproc
    .size   weir__ctx_thread_init, .-weir__ctx_thread_init

/* void weir__ctx_thread_fini(weir__ctx *self) */
    .globl  weir__ctx_thread_fini
    .type   weir__ctx_thread_fini, @function
    .p2align 4
weir__ctx_thread_fini:
    .cfi_startproc
    movq    $0, (%rdi)
    ret
    .cfi_endproc
    .size   weir__ctx_thread_fini, .-weir__ctx_thread_fini

    .section .note.GNU-stack, "", @progbits
