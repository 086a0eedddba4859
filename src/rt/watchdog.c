/* SPDX-License-Identifier: Apache-2.0 */
/* watchdog.c - placeholder: the blocking watchdog is being written. */
#include "rt/rt_int.h"
int weir__watchdog_add(weir_loop *l) { (void)l; return 0; }
void weir__watchdog_remove(weir_loop *l) { (void)l; }
