/* SPDX-License-Identifier: Apache-2.0 */
/*
 * intern.c - the process's interned strings (intern.h): a linear set, as
 * it holds a few dozen names (one per operator of the jobs a process ran).
 * The strings come from the C library's allocator, not weir's replaceable
 * one: they outlive every allocator a program may install, and the
 * allocation-failure countdown of tests must not turn a task's name into
 * the fallback.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/intern.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char *set[WEIR__INTERN_MAX];
static size_t n;

const char *weir__intern(const char *s, const char *fallback)
{
    if (!s)
        return fallback;
    size_t len = strnlen(s, WEIR__INTERN_LEN);
    const char *out = fallback;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < n; i++)
        if (strncmp(set[i], s, len) == 0 && set[i][len] == '\0') {
            out = set[i];
            goto done;
        }
    if (n < WEIR__INTERN_MAX) {
        char *c = malloc(len + 1);
        if (c) {
            memcpy(c, s, len);
            c[len] = '\0';
            set[n++] = c;
            out = c;
        }
    }
done:
    pthread_mutex_unlock(&mu);
    return out;
}
