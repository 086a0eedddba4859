/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c - weir's small leveled logger and environment helpers (log.h).
 *
 * Lines go to stderr as "weir <level> <component>: message". The level comes
 * from WEIR_LOG (error, warn, info, debug; default warn) and is read once;
 * the cached value is a process-wide one-time probe held in an atomic.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

static _Atomic int log_level = -1;

int weir__log_level(void)
{
    int lv = atomic_load_explicit(&log_level, memory_order_relaxed);
    if (lv >= 0)
        return lv;
    static const char *names[] = {"error", "warn", "info", "debug"};
    const char *e = getenv("WEIR_LOG");
    lv = WEIR__LOG_WARN;
    for (int i = 0; e && i < 4; i++)
        if (strcmp(e, names[i]) == 0)
            lv = i;
    atomic_store_explicit(&log_level, lv, memory_order_relaxed);
    return lv;
}

void weir__log(int level, const char *component, const char *fmt, ...)
{
    static const char *tags[] = {"error", "warn", "info", "debug"};
    if (level > weir__log_level())
        return;
    char buf[1024];
    int n = snprintf(buf, sizeof(buf), "weir %s %s: ", tags[level], component);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof(buf))
        vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", buf);
}

long weir__env_long(const char *name, long dflt, long min, long max)
{
    const char *e = getenv(name);
    if (!e || !*e)
        return dflt;
    char *end;
    errno = 0;
    long v = strtol(e, &end, 10);
    if (errno || *end || v < min || v > max) {
        weir__log(WEIR__LOG_WARN, "rt", "ignoring %s=%s (want an integer in %ld..%ld)", name, e,
                  min, max);
        return dflt;
    }
    return v;
}

