/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_checks.h - checks every storage implementation must pass, shared
 * by the stores' tests (test_storage.c: directory, memory, latency;
 * test_storage_s3.c; test_storage_redis.c).
 */
#ifndef WEIR_TESTS_STATE_STORE_CHECKS_H
#define WEIR_TESTS_STATE_STORE_CHECKS_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "state/storage.h"
#include "test.h"

/* Ranged reads, as the remote-read backend's cold reads make them: every
 * store answers the same (a range past the end is short or empty, an
 * empty range is empty, a missing blob -ENOENT), with its own get_range
 * or through a whole get. */
static inline void check_ranges(weir__storage *s)
{
    enum { N = 10000 };
    uint8_t blob[N], got[256];
    for (int i = 0; i < N; i++)
        blob[i] = (uint8_t)(i * 7 + 3);
    CHECK_EQ(weir__storage_put_now(s, "runs/r1", blob, N), 0);
    size_t n = 99;
    CHECK_EQ(weir__storage_range_now(s, "runs/r1", 0, 100, got, &n), 0);
    CHECK_EQ(n, 100);
    CHECK(memcmp(got, blob, 100) == 0);
    CHECK_EQ(weir__storage_range_now(s, "runs/r1", 4321, 200, got, &n), 0);
    CHECK_EQ(n, 200);
    CHECK(memcmp(got, blob + 4321, 200) == 0);
    CHECK_EQ(weir__storage_range_now(s, "runs/r1", N - 10, 100, got, &n), 0);
    CHECK_EQ(n, 10);
    CHECK(memcmp(got, blob + N - 10, 10) == 0);
    CHECK_EQ(weir__storage_range_now(s, "runs/r1", N, 5, got, &n), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(weir__storage_range_now(s, "runs/r1", 1u << 30, 5, got, &n), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(weir__storage_range_now(s, "runs/r1", UINT64_MAX - 3, 5, got, &n), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(weir__storage_range_now(s, "runs/r1", 7, 0, got, &n), 0);
    CHECK_EQ(n, 0);
    CHECK_EQ(weir__storage_range_now(s, "runs/none", 0, 5, got, &n), -ENOENT);
    CHECK_EQ(weir__storage_range_now(s, "runs/none", 0, 0, got, &n), -ENOENT);
    CHECK_EQ(weir__storage_range_now(s, "../r1", 0, 5, got, &n), -EINVAL);
    CHECK_EQ(weir__storage_range_now(s, "runs/r1", 0, 5, NULL, &n), -EINVAL);
    CHECK_EQ(weir__storage_delete_now(s, "runs/r1"), 0);
    CHECK_EQ(weir__storage_range_now(s, "runs/r1", 0, 5, got, &n), -ENOENT);
    CHECK_EQ(weir__storage_delete_now(s, ""), -EINVAL);
}

#endif
