/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/base.h - what every layer of weir shares: the text of its error codes
 * and the allocator its engine memory comes from (include weir/rt.h, which
 * includes this).
 *
 * These live in the base layer (src/base/), below the I/O layer and the
 * runtime, so that their declarations have a header of their own that the
 * base sources can include without reaching up into the runtime's.
 */
#ifndef WEIR_BASE_H
#define WEIR_BASE_H

#include <stddef.h>
#include <sys/types.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Text for any error code weir returns: a negative errno, or one of weir's
 * own codes (weir/error.h); either sign. A static string, except for a code
 * nobody knows: "unknown error N", in a buffer of the calling thread that
 * the next such call reuses. */
const char *weir_strerror(int err);

/* The allocator weir's engine memory (state, snapshots, channels, stream
 * structures) comes from. Set it once, before the first runtime or job is
 * made; the four functions behave as the C library's. -EINVAL for a NULL
 * table or function. */
typedef struct weir_allocator {
    void *(*malloc)(size_t n);
    void *(*calloc)(size_t n, size_t size);
    void *(*realloc)(void *p, size_t n);
    void (*free)(void *p);
} weir_allocator;
int weir_set_allocator(const weir_allocator *a);

/* A configuration value that may name a secret held in the environment:
 * "env://VAR" stands for the value of $VAR; any other value stands for
 * itself. The value it stands for is copied into out (cap bytes, NUL
 * included): its length; -ENOENT when $VAR is not set or empty, -EINVAL
 * for a NULL argument, a VAR that is not a variable name (letters, digits
 * and _, not starting with a digit) or a value holding a control
 * character, -ENOSPC when out is too small. why (may be NULL) says what
 * was wrong, naming the variable and never its value. Connector options
 * that carry secrets (the lookup operator's headers) take such values and
 * read them where they run, so a secret is never in a job's arguments, a
 * logged URI or a plan. */
ssize_t weir_env_ref(const char *value, char *out, size_t cap, char *why, size_t whycap);

#ifdef __cplusplus
}
#endif
#endif /* WEIR_BASE_H */
