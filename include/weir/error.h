/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/error.h - weir's own error codes.
 *
 * weir returns 0 or a negative error code. Most codes are negative errno
 * values (-EINVAL, -ETIMEDOUT, -ECANCELED...), passed on from the system or
 * meaning what the system means by them. A failure errno has no word for
 * gets a code of its own here instead of borrowing one whose text would
 * mislead (a host name that did not resolve is not "No such device or
 * address"). These codes sit far below any errno value (glibc's stop under
 * 200), so `err == WEIR_ERESOLVE` and a switch over errno values never
 * collide, and weir_strerror() (weir/base.h) has a text for each.
 */
#ifndef WEIR_ERROR_H
#define WEIR_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

enum {
    WEIR_ERROR_BASE = -10000,
    /* The resolver does not know the host name (weir_net_resolve, connect,
     * listen, the HTTP client). */
    WEIR_ERESOLVE = WEIR_ERROR_BASE,
    /* The host name exists but has no address of a usable family. */
    WEIR_ENOADDR = WEIR_ERROR_BASE - 1,
    /* A job plugin was built against another weir: ABI version, header
     * fingerprint, target or toolchain differ (weir_abi_check,
     * weir_plugin_open). */
    WEIR_EABI = WEIR_ERROR_BASE - 2,
    /* One past the last code (the next one gets WEIR_ERROR_END and this
     * moves down); for tables and tests. */
    WEIR_ERROR_END = WEIR_ERROR_BASE - 3,
};

#ifdef __cplusplus
}
#endif
#endif /* WEIR_ERROR_H */
