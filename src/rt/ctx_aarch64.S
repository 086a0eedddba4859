/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctx_aarch64.S - fiber context switch for AArch64 (AAPCS64, see ctx.h).
 *
 * A suspended context is nothing but its saved stack pointer: the
 * callee-saved state is stored on the stack being left. Frame at ctx->sp,
 * lowest address first (176 bytes, sp stays 16-aligned):
 *
 *      0   x19, x20                made context: x19 = entry, x20 = arg
 *     16   x21, x22
 *     32   x23, x24
 *     48   x25, x26
 *     64   x27, x28
 *     80   d8, d9                  (low 64 bits of v8-v15 are callee-saved)
 *     96   d10, d11
 *    112   d12, d13
 *    128   d14, d15
 *    144   FPCR, padding           rounding mode, FZ, DN, trap enables
 *    160   x29 (fp), x30 (lr)      made context: 0, weir__ctx_trampoline
 *
 * FPCR is restored because a fiber's rounding mode must not leak into the
 * scheduler or other fibers. FPSR (the cumulative exception flags) is not:
 * like the x87 status word on x86-64 it is treated as thread state, as the
 * ABI does not make it callee-saved. Writing FPCR can be slow on some cores,
 * so it is written only when it differs.
 */

    .text

/*
 * void weir__ctx_switch(weir__ctx *from, weir__ctx *to)
 *   x0 = from, x1 = to
 * The CFI is sp-relative, so it stays correct once sp points at the other
 * stack.
 */
    .globl  weir__ctx_switch
    .type   weir__ctx_switch, %function
    .p2align 4
weir__ctx_switch:
    .cfi_startproc
    sub     sp, sp, #176
    .cfi_def_cfa_offset 176
    stp     x19, x20, [sp, #0]
    stp     x21, x22, [sp, #16]
    stp     x23, x24, [sp, #32]
    stp     x25, x26, [sp, #48]
    stp     x27, x28, [sp, #64]
    stp     d8, d9, [sp, #80]
    stp     d10, d11, [sp, #96]
    stp     d12, d13, [sp, #112]
    stp     d14, d15, [sp, #128]
    mrs     x9, fpcr
    str     x9, [sp, #144]
    stp     x29, x30, [sp, #160]
    .cfi_offset x19, -176
    .cfi_offset x20, -168
    .cfi_offset x21, -160
    .cfi_offset x22, -152
    .cfi_offset x23, -144
    .cfi_offset x24, -136
    .cfi_offset x25, -128
    .cfi_offset x26, -120
    .cfi_offset x27, -112
    .cfi_offset x28, -104
    .cfi_offset d8, -96
    .cfi_offset d9, -88
    .cfi_offset d10, -80
    .cfi_offset d11, -72
    .cfi_offset d12, -64
    .cfi_offset d13, -56
    .cfi_offset d14, -48
    .cfi_offset d15, -40
    .cfi_offset x29, -16
    .cfi_offset x30, -8

    mov     x10, sp
    str     x10, [x0]
    ldr     x10, [x1]
    mov     sp, x10

    ldp     x19, x20, [sp, #0]
    ldp     x21, x22, [sp, #16]
    ldp     x23, x24, [sp, #32]
    ldp     x25, x26, [sp, #48]
    ldp     x27, x28, [sp, #64]
    ldp     d8, d9, [sp, #80]
    ldp     d10, d11, [sp, #96]
    ldp     d12, d13, [sp, #112]
    ldp     d14, d15, [sp, #128]
    ldr     x10, [sp, #144]
    cmp     x9, x10                 /* x9 still holds our own FPCR */
    b.eq    1f
    msr     fpcr, x10
1:
    ldp     x29, x30, [sp, #160]
    add     sp, sp, #176
    .cfi_def_cfa_offset 0
    .cfi_restore x19
    .cfi_restore x20
    .cfi_restore x21
    .cfi_restore x22
    .cfi_restore x23
    .cfi_restore x24
    .cfi_restore x25
    .cfi_restore x26
    .cfi_restore x27
    .cfi_restore x28
    .cfi_restore d8
    .cfi_restore d9
    .cfi_restore d10
    .cfi_restore d11
    .cfi_restore d12
    .cfi_restore d13
    .cfi_restore d14
    .cfi_restore d15
    .cfi_restore x29
    .cfi_restore x30
    ret
    .cfi_endproc
    .size   weir__ctx_switch, .-weir__ctx_switch

/*
 * First code a made context runs: weir__ctx_switch returns here through x30
 * with a 16-aligned sp. The return address column (x30) is undefined, which
 * tells DWARF unwinders this is the outermost frame; x29 == 0 ends
 * frame-record walks.
 */
    .type   weir__ctx_trampoline, %function
    .p2align 4
weir__ctx_trampoline:
    .cfi_startproc
    .cfi_undefined x30
    mov     x0, x20
    blr     x19
    /* entry must switch away for good instead of returning (ctx.h). */
    brk     #0x3e8
    .cfi_endproc
    .size   weir__ctx_trampoline, .-weir__ctx_trampoline

/*
 * void weir__ctx_make(weir__ctx *ctx, void *stack_lo, size_t size,
 *                     void (*entry)(void *), void *arg)
 *   x0 = ctx, x1 = stack_lo, x2 = size, x3 = entry, x4 = arg
 * Writes the frame above below a 16-byte zeroed pad at the aligned top of the
 * stack. FPCR starts at 0 (round to nearest, no flush-to-zero, no traps): the
 * ABI's initial state, not the spawner's.
 */
    .globl  weir__ctx_make
    .type   weir__ctx_make, %function
    .p2align 4
weir__ctx_make:
    .cfi_startproc
    add     x9, x1, x2
    and     x9, x9, #~15
    sub     x9, x9, #(176 + 16)
    stp     x3, x4, [x9, #0]        /* x19 = entry, x20 = arg */
    stp     xzr, xzr, [x9, #16]
    stp     xzr, xzr, [x9, #32]
    stp     xzr, xzr, [x9, #48]
    stp     xzr, xzr, [x9, #64]
    stp     xzr, xzr, [x9, #80]
    stp     xzr, xzr, [x9, #96]
    stp     xzr, xzr, [x9, #112]
    stp     xzr, xzr, [x9, #128]
    stp     xzr, xzr, [x9, #144]    /* FPCR = 0 */
    adr     x10, weir__ctx_trampoline
    stp     xzr, x10, [x9, #160]    /* x29 = 0, x30 = trampoline */
    stp     xzr, xzr, [x9, #176]
    str     x9, [x0]
    ret
    .cfi_endproc
    .size   weir__ctx_make, .-weir__ctx_make

/* int weir__ctx_thread_init(weir__ctx *self): nothing to allocate. */
    .globl  weir__ctx_thread_init
    .type   weir__ctx_thread_init, %function
    .p2align 4
weir__ctx_thread_init:
    .cfi_startproc
    str     xzr, [x0]
    mov     w0, #0
    ret
    .cfi_endproc
    .size   weir__ctx_thread_init, .-weir__ctx_thread_init

/* void weir__ctx_thread_fini(weir__ctx *self) */
    .globl  weir__ctx_thread_fini
    .type   weir__ctx_thread_fini, %function
    .p2align 4
weir__ctx_thread_fini:
    .cfi_startproc
    str     xzr, [x0]
    ret
    .cfi_endproc
    .size   weir__ctx_thread_fini, .-weir__ctx_thread_fini

    .section .note.GNU-stack, "", %progbits
