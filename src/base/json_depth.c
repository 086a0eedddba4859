/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json_depth.c - the nesting check of a JSON text (json_depth.h).
 */
#include "base/json_depth.h"

int weir__json_depth_ok(const void *text, size_t n, int max)
{
    const unsigned char *p = text;
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = p[i];
        if (in_str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else if (ch == '[' || ch == '{') {
            if (++depth > max)
                return 0;
        } else if (ch == ']' || ch == '}') {
            depth--;
        }
    }
    return 1;
}
