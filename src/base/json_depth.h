/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json_depth.h - how deep a JSON text nests, before a parser sees it.
 *
 * jansson's parser recurses once per level of nesting (up to 2048 deep),
 * and weir parses on fibers' small stacks: a peer's body of a few KB of
 * brackets must not be able to overflow one. weir__json_depth_ok scans
 * the text (strings and their escapes skipped) and says whether it nests
 * at most max deep; the text need not be valid JSON (the parser judges
 * that afterwards).
 */
#ifndef WEIR_BASE_JSON_DEPTH_H
#define WEIR_BASE_JSON_DEPTH_H

#include <stddef.h>

/* 1 when p[0..n) nests arrays and objects at most max deep, else 0. */
int weir__json_depth_ok(const void *p, size_t n, int max);

#endif
