/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scan_spy.h - "spyscan:URI", a state backend for tests (test_join.c,
 * test_async_ctl.c): the backend of URI itself, with its scan prefetches
 * that went to the pool (-EINPROGRESS) counted in spy_later. Its ops are
 * a copy of the first backend's with that one wrapped, so every backend
 * opened through it must be of one kind.
 */
#ifndef WEIR_TESTS_SCAN_SPY_H
#define WEIR_TESTS_SCAN_SPY_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "test.h"
#include "weir/state.h"

static _Atomic long spy_later;
static weir_state_backend_ops spy_ops;
static int (*spy_real)(weir_state_backend *, int, const void *, size_t, weir_state_get_cb, void *);

static pthread_mutex_t spy_mu = PTHREAD_MUTEX_INITIALIZER;

static int spy_prefetch(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                        weir_state_get_cb cb, void *arg)
{
    int e = spy_real(b, kg, prefix, plen, cb, arg);
    if (e == -EINPROGRESS)
        atomic_fetch_add(&spy_later, 1);
    return e;
}

static weir_state_backend *spy_make(void *arg, const char *uri, int ngroups, int first, int end)
{
    (void)arg;
    weir_state_backend *b = NULL;
    if (weir_state_backend_open(uri + strlen("spyscan:"), ngroups, first, end, &b) != 0)
        return NULL;
    CHECK(b->ops->scan_prefetch != NULL);
    pthread_mutex_lock(&spy_mu);
    if (!spy_real) {
        spy_ops = *b->ops;
        spy_real = b->ops->scan_prefetch;
        spy_ops.scan_prefetch = spy_prefetch;
    }
    pthread_mutex_unlock(&spy_mu);
    b->ops = &spy_ops;
    return b;
}

/* Register the scheme (once per process). */
static void spy_register(void)
{
    static int done;
    if (!done++)
        CHECK_EQ(weir_state_backend_register("spyscan", spy_make, NULL), 0);
}

#endif
