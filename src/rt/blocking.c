/* SPDX-License-Identifier: Apache-2.0 */
/* blocking.c - placeholder until the blocking pool lands. */
#include <errno.h>
#include "rt/rt_int.h"
void weir__op_blocking_cancel(weir_op *op) { (void)op; }
void weir__pool_free(struct weir__pool *p) { (void)p; }
int weir_blocking_start(weir_op *op, weir_blocking_fn fn, void *arg, int64_t deadline) { (void)op; (void)fn; (void)arg; (void)deadline; return -ENOSYS; }
int64_t weir_blocking_run(weir_blocking_fn fn, void *arg, int64_t deadline) { (void)fn; (void)arg; (void)deadline; return -ENOSYS; }
