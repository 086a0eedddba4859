/* SPDX-License-Identifier: Apache-2.0 */
/*
 * alloc.h - the allocator the engine's memory goes through.
 *
 * weir__malloc / weir__calloc / weir__realloc / weir__free / weir__strdup
 * behave as the C library's and call the process's allocator: the C
 * library's unless weir_set_allocator (weir/base.h) replaced it before the
 * first allocation. Code that allocates through them can be tested for
 * every allocation failure in turn: weir__alloc_fail_after(n) makes the
 * n-th allocation from now (0: the next one) and every later one fail until
 * weir__alloc_fail_after(-1) turns the countdown off. The countdown is
 * process-wide and meant for tests that run one thread of allocations at a
 * time; it costs one relaxed atomic load per allocation when off.
 */
#ifndef WEIR_BASE_ALLOC_H
#define WEIR_BASE_ALLOC_H

#include <stddef.h>

void *weir__malloc(size_t n);
void *weir__calloc(size_t n, size_t size);
void *weir__realloc(void *p, size_t n);
void weir__free(void *p);
char *weir__strdup(const char *s);

/* Tests: fail the n-th allocation from now and all after it (n < 0: off).
 * Returns how many allocations were attempted while the countdown was on
 * since the last call: weir__alloc_fail_after(LONG_MAX), an operation,
 * then weir__alloc_fail_after(-1) counts the operation's allocations, and
 * a test can then fail each in turn. */
long weir__alloc_fail_after(long n);

#endif
