/* SPDX-License-Identifier: Apache-2.0 */
/* epoll.c - placeholder until the epoll backend lands. */
#include <errno.h>
#include "io/backend.h"
static int ep_init(weir_loop *l) { (void)l; return -ENOSYS; }
static void ep_fini(weir_loop *l) { (void)l; }
static void ep_submit(weir_loop *l, weir_op *op) { (void)l; weir__op_done(op, -ENOSYS); }
static void ep_cancel(weir_loop *l, weir_op *op) { (void)l; (void)op; }
static int ep_wait(weir_loop *l, int64_t t) { (void)l; (void)t; return -ENOSYS; }
const weir__backend weir__backend_epoll = {"epoll", ep_init, ep_fini, ep_submit, ep_cancel, ep_wait};
