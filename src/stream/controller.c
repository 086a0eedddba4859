/* SPDX-License-Identifier: Apache-2.0 */
/*
 * controller.c - running a record in its own context, and the controller
 * that defers to an operator's admit / drain hooks (controller.h).
 */
#include "stream/controller.h"

#include "stream/stream_int.h"

int weir__ctl_run(weir_ctx *ctx, weir__rctx *rc, const weir_rec *r)
{
    weir__rctx *prev = ctx->rc;
    ctx->rc = rc;
    int e = ctx->op->def.process(ctx, ctx->state, r);
    ctx->rc = prev;
    return e < 0 ? weir__op_error(ctx, e, "process") : e;
}

/* admit() == 1: the operator took the record (its key and bytes copied)
 * and runs it later with weir_ctx_process(). */
static int hooks_admit(weir__controller *c, weir_ctx *ctx, weir__rctx *rc, const weir_rec *r)
{
    (void)c;
    if (ctx->op->def.admit) {
        weir__rctx *prev = ctx->rc;
        ctx->rc = rc;
        int a = ctx->op->def.admit(ctx, ctx->state, r);
        ctx->rc = prev;
        if (a < 0)
            return weir__op_error(ctx, a, "admit");
        if (a == 1)
            return 0;
    }
    return weir__ctl_run(ctx, rc, r);
}

static int hooks_drain(weir__controller *c, weir_ctx *ctx)
{
    (void)c;
    int e = ctx->op->def.drain ? ctx->op->def.drain(ctx, ctx->state) : 0;
    return e < 0 ? weir__op_error(ctx, e, "drain") : 0;
}

static const weir__controller_ops hooks_ops = {
    .name = "hooks", .admit = hooks_admit, .drain = hooks_drain};
weir__controller weir__controller_hooks = {&hooks_ops};
