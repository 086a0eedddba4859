/* SPDX-License-Identifier: Apache-2.0 */
/*
 * intern.h - strings that live as long as the process.
 *
 * weir__intern(s) returns a copy of s that is never freed, the same
 * pointer for equal strings: what a task's name must be when the string it
 * came from does not outlive every reader of the name - the runtime's
 * watchdog may still be printing a task's name after the task ended and
 * its owner freed what the name was made from (a job's operator names).
 * The set is a documented process-wide registry: at most WEIR__INTERN_MAX
 * strings of at most WEIR__INTERN_LEN bytes each (longer ones are cut);
 * past it, or when no memory is left, `fallback` is returned instead (a
 * string literal). Thread-safe: one mutex, taken once per call; not for
 * hot paths.
 */
#ifndef WEIR_BASE_INTERN_H
#define WEIR_BASE_INTERN_H

#define WEIR__INTERN_MAX 4096
#define WEIR__INTERN_LEN 200

const char *weir__intern(const char *s, const char *fallback);

#endif
