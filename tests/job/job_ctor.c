/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job_ctor.c - a job plugin with an ELF constructor that creates the file
 * named by $WEIR_TEST_CTOR_MARKER (tests/job/test_job.c). Built twice: as
 * is, where loading it must run the constructor, and claiming another ABI
 * fingerprint, where the gate must refuse it before the constructor runs.
 */
#include <stdio.h>
#include <stdlib.h>

#include "weir/job.h"

__attribute__((constructor)) static void mark(void)
{
    const char *path = getenv("WEIR_TEST_CTOR_MARKER");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f)
        fclose(f);
}

static int define(weir_job *j, int argc, char **argv)
{
    (void)j;
    (void)argc;
    (void)argv;
    return 0;
}

WEIR_REGISTER_JOB("ctor", "1.0", define);
