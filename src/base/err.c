/* SPDX-License-Identifier: Apache-2.0 */
/*
 * err.c - the error table behind weir_strerror (weir/base.h): one text per
 * code weir returns. weir's own codes (weir/error.h) have their entries
 * here; a few errno values get weir's own wording where the C library's
 * would read oddly for what weir means by them; every other errno value
 * has the C library's text. Nothing here depends on which call failed:
 * there is no thread-local "last error" text.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "weir/base.h"

#define NWEIR (WEIR_ERROR_BASE - WEIR_ERROR_END)

/* Indexed by WEIR_ERROR_BASE - code. */
static const char *const weir_text[NWEIR] = {
    [WEIR_ERROR_BASE - WEIR_ERESOLVE] = "host name not found",
    [WEIR_ERROR_BASE - WEIR_ENOADDR] = "host name has no usable address",
    [WEIR_ERROR_BASE - WEIR_EABI] = "built against another weir ABI (rebuild against this weir)",
};

const char *weir_strerror(int err)
{
    /* A positive code (errno after a constructor's NULL) reads as its
     * negative: the same text either way. */
    if (err > 0)
        err = -err;
    if (err <= WEIR_ERROR_BASE && err > WEIR_ERROR_END)
        return weir_text[WEIR_ERROR_BASE - err];
    switch (err) {
    case 0:
        return "success";
    case -ECANCELED:
        return "operation cancelled";
    case -ETIMEDOUT:
        return "deadline passed";
    default:
        break;
    }
    /* strerrordesc_np: the C library's static text, NULL for a number it
     * does not know (strerror would format that one into a shared buffer). */
    const char *s = err == INT_MIN ? NULL : strerrordesc_np(-err);
    if (s)
        return s;
    /* Unknown: the number in a per-thread buffer, valid until this thread's
     * next unknown code. Only ever a formatting buffer, never error state. */
    static _Thread_local char unknown[32];
    snprintf(unknown, sizeof(unknown), "unknown error %d", err);
    return unknown;
}
