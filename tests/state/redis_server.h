/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_server.h - a redis-server of a test's own on loopback, for the
 * tests of the Redis pool (tests/state/test_storage_redis.c) and of jobs
 * whose state lives in one (tests/stream/test_checkpoint.c): started on a
 * free port with a data directory of its own, durable (appendonly,
 * appendfsync always), waited for by polling PING, killed and started
 * again on the same port and data.
 */
#ifndef WEIR_TESTS_STATE_REDIS_SERVER_H
#define WEIR_TESTS_STATE_REDIS_SERVER_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "weir/rt.h"

typedef struct server {
    pid_t pid;
    int port;
    char dir[64];
    const char *pass; /* --requirepass */
} server;

static inline int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    CHECK(fd >= 0);
    CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    CHECK_EQ(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* A blocking connection to 127.0.0.1:port with short timeouts, or -1. */
static inline int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {0, 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static inline int pings(int port)
{
    int fd = dial(port);
    if (fd < 0)
        return 0;
    char b[16] = "";
    /* Without the password the server answers PING with -NOAUTH: up all the same. */
    int ok = send(fd, "PING\r\n", 6, MSG_NOSIGNAL) == 6 && recv(fd, b, sizeof(b) - 1, 0) >= 5 &&
             (memcmp(b, "+PONG", 5) == 0 || memcmp(b, "-NOAUTH", 7) == 0);
    close(fd);
    return ok;
}

static inline int on_path(const char *prog)
{
    const char *path = getenv("PATH");
    char buf[512];
    for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
        const char *c = strchr(p, ':');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, p, prog);
        if (access(buf, X_OK) == 0)
            return 1;
        p += n + (c != NULL);
    }
    return access("/usr/sbin/redis-server", X_OK) == 0 ||
           access("/usr/bin/redis-server", X_OK) == 0;
}

/* Start (or start again, on the same port and data) and wait for PONG. */
static inline void server_start(server *s)
{
    if (!on_path("redis-server"))
        TEST__FAIL("redis-server not found: these tests need it (scripts/deps.sh installs the "
                   "Debian package redis-server)");
    if (!s->dir[0]) {
        strcpy(s->dir, "/tmp/weir-redis-XXXXXX");
        CHECK(mkdtemp(s->dir) != NULL);
        s->port = free_port();
    }
    char port[16], log[128];
    snprintf(port, sizeof(port), "%d", s->port);
    snprintf(log, sizeof(log), "%s/server.log", s->dir);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test takes its server along */
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--dir",
               s->dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
               "--daemonize", "no", s->pass ? "--requirepass" : (char *)NULL, s->pass,
               (char *)NULL);
        _exit(127);
    }
    s->pid = pid;
    int64_t deadline = weir_time_now() + 20 * WEIR_SEC;
    while (!pings(s->port)) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            TEST__FAIL("redis-server exited (status %d): see %s", st, log);
        if (weir_time_now() > deadline)
            TEST__FAIL("redis-server on port %d never answered PING: see %s", s->port, log);
        usleep(5000);
    }
}

static inline void server_kill(server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
    }
    s->pid = 0;
}

static inline void server_stop(server *s)
{
    server_kill(s);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", s->dir);
    CHECK_EQ(system(cmd), 0);
}

#endif
