/* SPDX-License-Identifier: Apache-2.0 */
/* trace.c - placeholder: tracing is being written (WEIR_TRACE is ignored). */
#include "rt/rt_int.h"
int weir__trace_open(weir_loop *l) { (void)l; return 0; }
void weir__trace_close(weir_loop *l) { (void)l; }
void weir__trace_emit(weir_loop *l, int ev, const weir_task *t, uint64_t arg) { (void)l; (void)ev; (void)t; (void)arg; }
