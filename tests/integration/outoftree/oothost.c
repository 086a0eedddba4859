/* SPDX-License-Identifier: Apache-2.0 */
/* oothost.c - a program of its own that loads a job plugin, built out of
 * tree against an installed weir with weir_link_host()
 * (tests/integration/install_job.sh): oothost JOB.so [job args]. */
#include <stdio.h>

#include <weir/job.h>

static weir_plugin *plugin;

static int run(int argc, char **argv)
{
    char msg[512];
    weir_job *j = NULL;
    if (weir_plugin_define(plugin, argc - 1, argv + 1, &j, msg, sizeof(msg)) != 0) {
        fprintf(stderr, "oothost: %s\n", msg);
        return 1;
    }
    int e = weir_job_run(j, NULL);
    if (e)
        fprintf(stderr, "oothost: %s\n", weir_job_error(j));
    weir_job_free(j);
    return e ? 1 : 0;
}

int main(int argc, char **argv)
{
    char msg[512];
    if (argc < 2 || weir_plugin_open(argv[1], &plugin, msg, sizeof(msg)) != 0) {
        fprintf(stderr, "oothost: %s\n", argc < 2 ? "usage: oothost JOB.so" : msg);
        return 2;
    }
    int rc = weir_main(run, argc, argv);
    weir_plugin_close(plugin);
    return rc;
}
