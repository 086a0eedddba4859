/* SPDX-License-Identifier: Apache-2.0 */
/*
 * err.c - the text of weir's error codes (weir_strerror, weir/base.h).
 */
#include <errno.h>
#include <string.h>

#include "weir/base.h"

const char *weir_strerror(int err)
{
    if (err > 0)
        err = -err;
    switch (err) {
    case 0:
        return "success";
    case -ECANCELED:
        return "operation cancelled";
    case -ETIMEDOUT:
        return "deadline passed";
    default:
        /* strerror() text for the rest; glibc's table is static. */
        return strerror(-err);
    }
}
