/* SPDX-License-Identifier: Apache-2.0 */
/*
 * env_ref.c - configuration values that name a secret held in the
 * environment (weir/base.h weir_env_ref): "env://VAR" stands for the value
 * of $VAR, read where the value is used (a worker opening a connector), so
 * the secret never travels in a job's arguments, a URI that is logged, or
 * a plan.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "weir/base.h"

static void say(char *why, size_t cap, const char *fmt, const char *var, size_t n)
{
    if (why && cap)
        snprintf(why, cap, fmt, (int)n, var);
}

ssize_t weir_env_ref(const char *value, char *out, size_t cap, char *why, size_t whycap)
{
    if (why && whycap)
        why[0] = '\0';
    if (!value || !out || !cap)
        return -EINVAL;
    const char *v = value;
    if (strncmp(value, "env://", 6) == 0) {
        const char *var = value + 6;
        size_t n = strlen(var);
        int ok = n > 0 && n <= 255 && !(var[0] >= '0' && var[0] <= '9');
        for (size_t i = 0; ok && i < n; i++)
            ok = (var[i] >= 'A' && var[i] <= 'Z') || (var[i] >= 'a' && var[i] <= 'z') ||
                 (var[i] >= '0' && var[i] <= '9') || var[i] == '_';
        if (!ok) {
            say(why, whycap,
                "env://%.*s does not name an environment variable (letters, digits "
                "and _, not starting with a digit)",
                var, n > 64 ? 64 : n);
            return -EINVAL;
        }
        v = getenv(var);
        if (!v || !*v) {
            if (why && whycap)
                snprintf(why, whycap, "$%.*s is %s", (int)n, var, v ? "empty" : "not set");
            return -ENOENT;
        }
        for (const char *p = v; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f) {
                say(why, whycap, "$%.*s holds a control character", var, n);
                return -EINVAL;
            }
    }
    size_t len = strlen(v);
    if (len >= cap) {
        if (why && whycap)
            snprintf(why, whycap, "the value is longer than %zu bytes", cap - 1);
        return -ENOSPC;
    }
    memcpy(out, v, len + 1);
    return (ssize_t)len;
}
