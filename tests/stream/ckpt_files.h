/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckpt_files.h - for tests that restore a bounded job's state: such a job
 * ends through its final checkpoint (the latest; a restore from it runs
 * nothing), so a test that wants the job's state back removes it, and the
 * regular checkpoint before it (kept with retain >= 2) is the restore
 * point.
 */
#ifndef WEIR_TESTS_CKPT_FILES_H
#define WEIR_TESTS_CKPT_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "test.h"

/* Remove checkpoint id (its COMPLETED marker and its directory) from dir. */
static inline void test_drop_checkpoint(const char *dir, uint64_t id)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s/COMPLETED-%llu' '%s/chk-%llu'", dir,
             (unsigned long long)id, dir, (unsigned long long)id);
    CHECK_EQ(system(cmd), 0);
}

#endif
