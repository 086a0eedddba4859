/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lines.h - comparing the text lines jobs write, whatever order their
 * subtasks wrote them in (test_plan.c, test_channel_tcp.c): a collector's
 * records as "\n"-ended lines, and those lines sorted.
 */
#ifndef WEIR_TESTS_LINES_H
#define WEIR_TESTS_LINES_H

#include <stdlib.h>
#include <string.h>

#include "weir/stream.h"

static inline int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted lines of a buffer of "\n"-ended lines, joined again. */
static inline char *sorted(char *text)
{
    size_t n = 0, cap = 16;
    char **v = malloc(cap * sizeof(*v));
    for (char *save, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (n == cap)
            v = realloc(v, (cap *= 2) * sizeof(*v));
        v[n++] = l;
    }
    qsort(v, n, sizeof(*v), str_cmp);
    size_t len = 1;
    for (size_t i = 0; i < n; i++)
        len += strlen(v[i]) + 1;
    char *out = calloc(1, len);
    for (size_t i = 0; i < n; i++)
        strcat(strcat(out, v[i]), "\n");
    free(v);
    return out;
}

static inline char *collected(const weir_collector *c)
{
    size_t n = weir_collector_count(c), len = 1;
    for (size_t i = 0; i < n; i++)
        len += weir_collector_get(c, i)->len + 1;
    char *out = calloc(1, len), *p = out;
    for (size_t i = 0; i < n; i++) {
        const weir_rec *r = weir_collector_get(c, i);
        memcpy(p, r->data, r->len);
        p += r->len;
        *p++ = '\n';
    }
    return out;
}

#endif
