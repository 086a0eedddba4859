/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h - weir's small leveled logger, and environment helpers.
 *
 * Every layer reports what an operator should see through one logger:
 * lines go to stderr as "weir <level> <component>: message", the component
 * a dotted name ("net.resolve", "rt.blocking") that says where it came
 * from; the level comes from WEIR_LOG=error|warn|info|debug (default
 * warn), read once. A log line is for people: callers still get the error
 * code, never a message to parse. weir__env_long reads the numeric tuning
 * knobs (WEIR_BLOCKING_THREADS...) the same way everywhere: a value out
 * of range is a warning and the default, never a failure.
 */
#ifndef WEIR_BASE_LOG_H
#define WEIR_BASE_LOG_H

enum { WEIR__LOG_ERROR = 0, WEIR__LOG_WARN, WEIR__LOG_INFO, WEIR__LOG_DEBUG };
void weir__log(int level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int weir__log_level(void);

/* An integer from the environment: dflt when unset or empty, dflt with a
 * warning when not an integer in [min, max]. */
long weir__env_long(const char *name, long dflt, long min, long max);

#endif
