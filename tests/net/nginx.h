/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nginx.h - start a private nginx for a test binary and make sure it dies
 * with it.
 *
 * nginx_start() writes a configuration into a fresh mkdtemp directory
 * (every path nginx writes - error log, pid, temp dirs - is inside it, so
 * it runs the same as root and as any other user), picks free loopback
 * ports and runs `nginx -p DIR -c DIR/nginx.conf` in the foreground with
 * one process (master_process off, daemon off), so the one pid we hold is
 * all there is to kill. The child asks the kernel for SIGKILL when the
 * thread that forked it ends (PR_SET_PDEATHSIG); an atexit handler and a
 * SIGABRT handler (a failed CHECK aborts) kill it too, then remove the
 * directory. Call it from the main thread, before any runtime starts: the
 * death signal follows the forking thread, and a scheduler thread may end
 * before the test does.
 *
 * The configuration has two servers. `port` (also on [::1] when the machine
 * has IPv6 loopback) keeps connections alive for 60 s and serves the
 * locations listed in NGINX_LOCATIONS below plus the caller's extra ones;
 * `port_short` closes idle connections after 1 s (keepalive_timeout 1s).
 * The echo module (libnginx-mod-http-echo) provides the slow and chunked
 * answers. When nginx or the module is missing, nginx_start() returns 0 and
 * the caller skips.
 */
#ifndef WEIR_TESTS_NGINX_H
#define WEIR_TESTS_NGINX_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NGINX_BIN    "/usr/sbin/nginx"
#define NGINX_ECHO   "/usr/lib/nginx/modules/ngx_http_echo_module.so"
#define NGINX_BIGLEN 100000 /* bytes of /big.txt, a static file (Content-Length) */

typedef struct nginx_proc {
    pid_t pid;
    int port, port_short;
    int ipv6; /* also listening on [::1]:port */
    char dir[64];
} nginx_proc;

static nginx_proc nginx__the;

/* A free TCP port on the loopback of family fam (0 when none). */
static int nginx__free_port(int fam)
{
    int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t len;
    if (fam == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        len = sizeof(*a);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof(*a);
    }
    int port = 0;
    if (bind(fd, (struct sockaddr *)&ss, len) == 0 &&
        getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
        port = ntohs(fam == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                     : ((struct sockaddr_in *)&ss)->sin_port);
    close(fd);
    return port;
}

static int nginx__can_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static void nginx__rm_dir(const char *dir)
{
    if (!dir[0])
        return;
    /* Only paths we made: a fixed list, no recursion into anything else. */
    static const char *const files[] = {"nginx.conf", "error.log", "nginx.pid", "www/big.txt"};
    static const char *const dirs[] = {"body", "proxy", "fastcgi", "uwsgi", "scgi", "www"};
    char p[256];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
        unlink(p);
    }
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, dirs[i]);
        rmdir(p);
    }
    rmdir(dir);
}

static void nginx_stop(void)
{
    nginx_proc *n = &nginx__the;
    if (n->pid > 0) {
        kill(n->pid, SIGKILL);
        waitpid(n->pid, NULL, 0);
        n->pid = 0;
    }
    nginx__rm_dir(n->dir);
    n->dir[0] = '\0';
}

static void nginx__on_abort(int sig)
{
    /* kill(2) and waitpid(2) are async-signal-safe; the directory stays
     * behind in /tmp after a failure, which helps reading its error.log. */
    if (nginx__the.pid > 0) {
        kill(nginx__the.pid, SIGKILL);
        waitpid(nginx__the.pid, NULL, 0);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static int nginx__write_file(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    size_t w = fwrite(text, 1, len, f);
    return fclose(f) == 0 && w == len ? 0 : -1;
}

/* One attempt on fresh ports: 1 when nginx answers, 0 when it could not
 * start (ports taken meanwhile: try again), -1 on a hard failure. */
static int nginx__try(nginx_proc *n, const char *extra)
{
    n->port = nginx__free_port(AF_INET);
    n->port_short = nginx__free_port(AF_INET);
    int v6 = nginx__free_port(AF_INET6) > 0;
    if (!n->port || !n->port_short || n->port == n->port_short)
        return 0;
    n->ipv6 = v6;
    char v6line[64] = "";
    if (v6)
        snprintf(v6line, sizeof(v6line), "listen [::1]:%d;", n->port);
    /* Every "@" in the template is the directory. */
    static const char tmpl[] =
        "master_process off;\n"
        "daemon off;\n"
        "error_log @/error.log warn;\n"
        "pid @/nginx.pid;\n"
        "load_module " NGINX_ECHO ";\n"
        "events { worker_connections 1024; }\n"
        "http {\n"
        "  access_log off;\n"
        "  default_type text/plain;\n"
        "  client_body_temp_path @/body;\n"
        "  proxy_temp_path @/proxy;\n"
        "  fastcgi_temp_path @/fastcgi;\n"
        "  uwsgi_temp_path @/uwsgi;\n"
        "  scgi_temp_path @/scgi;\n"
        "  client_body_buffer_size 4m;\n"
        "  client_max_body_size 16m;\n"
        "  keepalive_requests 100000;\n"
        "  server {\n"
        "    listen 127.0.0.1:%d;\n"
        "    %s\n"
        "    keepalive_timeout 60s;\n"
        "    root @/www;\n"
        "    location = /hello { return 200 \"Hello, World!\"; }\n"
        "    location = /echo { echo_read_request_body; echo_request_body; }\n"
        "    location = /chunked { echo \"part one\"; echo_flush; echo \"part two\"; }\n"
        "    location = /method { echo $request_method; }\n"
        "    location = /uri { echo $request_uri; }\n"
        "    location = /big { echo_duplicate 100000 \"0123456789\"; }\n"
        "    location = /slow { echo_sleep 2; echo late; }\n"
        "    location = /delay { echo_sleep 0.05; echo ok; }\n"
        "    location = /close { keepalive_timeout 0; return 200 \"bye\"; }\n"
        "    location = /missing { return 404 \"nope\"; }\n"
        "    location = /auth { echo \"auth=[$http_authorization] x=[$http_x_test] "
        "host=[$http_host]\"; }\n"
        "    location = /ua { echo \"ua=[$http_user_agent]\"; }\n"
        "%s\n"
        "  }\n"
        "  server {\n"
        "    listen 127.0.0.1:%d;\n"
        "    keepalive_timeout 1s;\n"
        "    location / { return 200 \"short\"; }\n"
        "  }\n"
        "}\n";
    static char fmt[sizeof(tmpl) + 16 * sizeof(n->dir)], conf[sizeof(fmt) + 4096];
    size_t fl = 0, dl = strlen(n->dir);
    for (const char *t = tmpl; *t; t++) {
        if (*t == '@') {
            memcpy(fmt + fl, n->dir, dl);
            fl += dl;
        } else {
            fmt[fl++] = *t;
        }
    }
    fmt[fl] = '\0';
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    int len = snprintf(conf, sizeof(conf), fmt, n->port, v6line, extra ? extra : "", n->port_short);
#pragma GCC diagnostic pop
    char path[256];
    snprintf(path, sizeof(path), "%s/nginx.conf", n->dir);
    if (len <= 0 || (size_t)len >= sizeof(conf) || nginx__write_file(path, conf, (size_t)len) < 0)
        return -1;
    char elog[256];
    snprintf(elog, sizeof(elog), "%s/error.log", n->dir);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) /* the test died before the line above */
            _exit(1);
        setpgid(0, 0);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        execl(NGINX_BIN, "nginx", "-p", n->dir, "-c", path, "-e", elog, (char *)NULL);
        _exit(127);
    }
    n->pid = pid;
    struct timespec ts = {0, 20 * 1000 * 1000};
    for (int i = 0; i < 500; i++) { /* 10 s */
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            n->pid = 0;
            fprintf(stderr, "nginx exited (status %d); see %s\n", st, elog);
            return 0;
        }
        if (nginx__can_connect(n->port) && nginx__can_connect(n->port_short))
            return 1;
        nanosleep(&ts, NULL);
    }
    return -1;
}

/*
 * Start the binary's nginx (once; later calls return the same one) with
 * extra location blocks (may be NULL). Returns it, or NULL when nginx or
 * its echo module is not installed (the caller prints SKIP and passes).
 * A failure to start it otherwise fails the test.
 */
static nginx_proc *nginx_start(const char *extra)
{
    nginx_proc *n = &nginx__the;
    if (n->pid > 0)
        return n;
    if (access(NGINX_BIN, X_OK) != 0 || access(NGINX_ECHO, R_OK) != 0)
        return NULL;
    snprintf(n->dir, sizeof(n->dir), "/tmp/weir-nginx-XXXXXX");
    if (!mkdtemp(n->dir)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        abort();
    }
    /* The directory is 0700 and ours; nginx (one process, never switching
     * users with master_process off) writes only inside it. */
    char p[256];
    snprintf(p, sizeof(p), "%s/www", n->dir);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/www/big.txt", n->dir);
    static char big[NGINX_BIGLEN];
    memset(big, 'a', sizeof(big));
    if (nginx__write_file(p, big, sizeof(big)) < 0)
        abort();
    atexit(nginx_stop);
    signal(SIGABRT, nginx__on_abort);
    for (int attempt = 0; attempt < 5; attempt++) {
        int r = nginx__try(n, extra);
        if (r == 1)
            return n;
        if (r < 0)
            break;
    }
    fprintf(stderr, "could not start nginx in %s\n", n->dir);
    abort();
}

#endif
