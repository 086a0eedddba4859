/* SPDX-License-Identifier: Apache-2.0 */
/*
 * s3_server.h - an s3rver of a test's own on loopback (npm, installed in
 * tests/npm by scripts/deps.sh), for the tests of the S3 pool
 * (tests/state/test_storage_s3.c) and of jobs whose state lives in one
 * (tests/stream/test_checkpoint.c): a free port, a data directory of its
 * own, one bucket, waited for by polling its port; killed and started again
 * on the same port and data. It takes the access key S3RVER with the
 * secret S3RVER (s3_server_credentials puts them in the environment).
 */
#ifndef WEIR_TESTS_STATE_S3_SERVER_H
#define WEIR_TESTS_STATE_S3_SERVER_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "weir/rt.h"

typedef struct s3_server {
    pid_t pid;
    int port;
    char dir[64];
} s3_server;

static inline void s3_server_credentials(void)
{
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    unsetenv("AWS_SESSION_TOKEN");
}

static inline int s3_server_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t l = sizeof(a);
    CHECK_EQ(getsockname(fd, (struct sockaddr *)&a, &l), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static inline int s3_server_port_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* Start s3rver on s->dir and s->port with the bucket, and wait until it
 * listens. */
static inline void s3_server_start(s3_server *s, const char *bucket)
{
    /* tests/npm, beside this header's directory (however __FILE__ spells it) */
    char dir[4096], js[4200];
    snprintf(dir, sizeof(dir), "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    snprintf(js, sizeof(js), "%s/../npm/node_modules/s3rver/bin/s3rver.js", dir);
    if (access(js, R_OK) != 0)
        TEST__FAIL("s3rver is not installed (%s): run scripts/deps.sh", js);
    if (system("command -v node >/dev/null 2>&1") != 0)
        TEST__FAIL("node is not installed: run scripts/deps.sh");
    char port[16];
    snprintf(port, sizeof(port), "%d", s->port);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* Dies with the test, even one that aborts. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* WEIR_TEST_S3_VERBOSE=1: the server's log on stdout. */
        int verbose = getenv("WEIR_TEST_S3_VERBOSE") != NULL;
        int null = open("/dev/null", O_RDWR);
        if (!verbose)
            dup2(null, 1);
        /* s3rver makes continuation tokens with DES, which OpenSSL 3
         * keeps in its legacy provider. */
        char *argv[] = {"node",
                        "--openssl-legacy-provider",
                        js,
                        "-d",
                        s->dir,
                        "-a",
                        "127.0.0.1",
                        "-p",
                        port,
                        "--configure-bucket",
                        (char *)bucket,
                        verbose ? NULL : "--silent",
                        NULL};
        execvp("node", argv);
        _exit(127);
    }
    s->pid = pid;
    int64_t until = weir_time_now() + 30 * WEIR_SEC;
    while (!s3_server_port_open(s->port)) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            TEST__FAIL("s3rver exited before listening (status %d)", st);
        if (weir_time_now() > until)
            TEST__FAIL("s3rver does not listen on port %d after 30 s", s->port);
        usleep(20000);
    }
}

static inline void s3_server_kill(s3_server *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGKILL);
    int st;
    CHECK_EQ(waitpid(s->pid, &st, 0), s->pid);
    s->pid = 0;
}

/* A fresh directory and port, and the server started on them. */
static inline void s3_server_up(s3_server *s, const char *bucket)
{
    strcpy(s->dir, "/tmp/weir-s3-XXXXXX");
    CHECK(mkdtemp(s->dir) != NULL);
    s->port = s3_server_free_port();
    s3_server_start(s, bucket);
}

/* Kill it and remove its data. */
static inline void s3_server_down(s3_server *s)
{
    if (!*s->dir)
        return;
    s3_server_kill(s);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", s->dir);
    CHECK_EQ(system(cmd), 0);
    s->dir[0] = '\0';
}

#endif
