/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_connectors.c - the sources and sinks weir ships (weir/stream.h):
 * a file read by 1-7 subtasks (every line exactly once, CRLF, a last line
 * without a newline), the file source rewound from a checkpoint after a
 * SIGKILL into the exactly-once sink, a TCP line source against a weir
 * server, the CSV splitter, the text-file and stdout sinks.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "test_rt.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/rt.h"
#include "weir/stream.h"

/* Every job here runs on a two-thread runtime. */
static intptr_t on_runtime(weir_task_fn fn, void *arg)
{
    return test_run_on_rt(2, fn, arg);
}

static char dir[64];
#define NLINES 10007

/* Line i: "line <i> " + i%50 x's; every 10th ends in CRLF; the last has no
 * newline at all. */
static void write_lines(const char *path)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    for (int i = 0; i < NLINES; i++) {
        fprintf(f, "line %d ", i);
        for (int k = 0; k < i % 50; k++)
            fputc('x', f);
        if (i + 1 < NLINES)
            fputs(i % 10 == 0 ? "\r\n" : "\n", f);
    }
    fclose(f);
}

/* Checks the collected lines are lines 0..NLINES-1, each once. */
static void check_lines(weir_collector *c)
{
    CHECK_EQ(weir_collector_count(c), NLINES);
    static unsigned char seen[NLINES];
    memset(seen, 0, sizeof(seen));
    for (size_t i = 0; i < NLINES; i++) {
        const weir_rec *r = weir_collector_get(c, i);
        int n = -1;
        CHECK_EQ(sscanf((const char *)r->data, "line %d ", &n), 1);
        CHECK(n >= 0 && n < NLINES);
        CHECK_EQ(r->len, (size_t)(strlen("line  ") + (size_t)snprintf(NULL, 0, "%d", n) + n % 50));
        CHECK_EQ(seen[n], 0);
        seen[n] = 1;
    }
}

static intptr_t file_main(void *arg)
{
    int par = (int)(intptr_t)arg;
    char path[128];
    snprintf(path, sizeof(path), "%s/lines.txt", dir);
    weir_job *j = weir_job_new("file");
    weir_collector *c = weir_collector_new();
    weir_stream *s = weir_stream_parallelism(weir_job_source_file(j, "file", path, NULL), par);
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    check_lines(c);
    weir_collector_free(c);
    weir_job_free(j);
    /* A missing file is a clear failure. */
    j = weir_job_new("missing");
    s = weir_job_source_file(j, "file", "/nonexistent/weir-input", NULL);
    c = weir_collector_new();
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_EQ(weir_job_run(j, NULL), -ENOENT);
    CHECK(strstr(weir_job_error(j), "/nonexistent/weir-input") != NULL);
    weir_collector_free(c);
    weir_job_free(j);
    return 0;
}

TEST(file_lines_each_read_once)
{
    strcpy(dir, "/tmp/weir-conn-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    char path[128];
    snprintf(path, sizeof(path), "%s/lines.txt", dir);
    write_lines(path);
    for (int par = 1; par <= 7; par += (par < 3 ? 1 : 4))
        CHECK_EQ(on_runtime(file_main, (void *)(intptr_t)par), 0);
}

/* ---- file source restored after a crash --------------------------------------------------- */
static int slow_identity(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    static __thread int n;
    if (++n % 200 == 0)
        weir_time_sleep(WEIR_MSEC);
    return weir_emit(ctx, in->data, in->len, in->ts);
}

typedef struct crash_cfg {
    const char *in, *ckpt, *out;
    int restore;
} crash_cfg;

static intptr_t crash_main(void *arg)
{
    crash_cfg *cc = arg;
    weir_job *j = weir_job_new("file-crash");
    weir_stream *s = weir_stream_parallelism(weir_job_source_file(j, "file", cc->in, NULL), 2);
    s = weir_stream_map(s, "slow", slow_identity, NULL);
    CHECK_EQ(weir_stream_file_sink(s, "out", cc->out), 0);
    int e = weir_job_run(j, &(weir_run_opts){.checkpoint_dir = cc->ckpt,
                                             .checkpoint_interval_ms = 10,
                                             .restore = cc->restore});
    if (e)
        fprintf(stderr, "%s\n", weir_job_error(j));
    weir_job_free(j);
    return e;
}

TEST(file_source_rewinds_after_a_crash)
{
    char in[128], ckpt[128], out[128];
    snprintf(in, sizeof(in), "%s/lines.txt", dir);
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt", dir);
    snprintf(out, sizeof(out), "%s/out", dir);
    for (int round = 0; round < 3; round++) {
        pid_t pid = fork();
        CHECK_GE(pid, 0);
        if (pid == 0) {
            crash_cfg cc = {in, ckpt, out, round > 0};
            _exit(on_runtime(crash_main, &cc) ? 1 : 0);
        }
        int st;
        if (round < 2) {
            usleep(40 * 1000);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
        } else {
            waitpid(pid, &st, 0);
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        }
    }
    /* Read the committed parts back into a collector-like check. */
    static unsigned char seen[NLINES];
    memset(seen, 0, sizeof(seen));
    int total = 0;
    DIR *d = opendir(out);
    CHECK(d != NULL);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "part-", 5) != 0)
            continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", out, de->d_name);
        FILE *f = fopen(path, "r");
        char line[128];
        while (fgets(line, sizeof(line), f)) {
            int n;
            CHECK_EQ(sscanf(line, "line %d ", &n), 1);
            CHECK_EQ(seen[n], 0); /* never twice */
            seen[n] = 1;
            total++;
        }
        fclose(f);
    }
    closedir(d);
    CHECK_EQ(total, NLINES); /* never lost */
}

/* ---- TCP ---------------------------------------------------------------------------------- */
static intptr_t line_server(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    int fd = weir_net_accept(lfd, NULL, weir_time_after_ms(5000));
    CHECK_GE(fd, 0);
    static char buf[64 * 1024];
    size_t n = 0;
    for (int i = 0; i < 2000; i++)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "tcp %d\n", i);
    for (size_t off = 0; off < n;) { /* in odd pieces, lines cut across sends */
        size_t k = n - off < 777 ? n - off : 777;
        CHECK_EQ(weir_io_send(fd, buf + off, k, 0, weir_time_after_ms(5000)), (ssize_t)k);
        off += k;
    }
    weir_net_close_graceful(fd, weir_time_after_ms(2000));
    return 0;
}

static intptr_t tcp_main(void *arg)
{
    (void)arg;
    int lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(lfd, 0);
    weir_task *srv = weir_task_spawn(line_server, (void *)(intptr_t)lfd, NULL);
    weir_job *j = weir_job_new("tcp");
    weir_collector *c = weir_collector_new();
    weir_stream *s = weir_job_source_tcp(j, "tcp", "127.0.0.1", weir_net_local_port(lfd), NULL);
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_EQ(weir_job_run(j, NULL), 0);
    CHECK_EQ(weir_collector_count(c), 2000);
    for (size_t i = 0; i < 2000; i++) {
        char want[32];
        snprintf(want, sizeof(want), "tcp %zu", i);
        const weir_rec *r = weir_collector_get(c, i);
        CHECK_EQ(r->len, strlen(want));
        CHECK(memcmp(r->data, want, r->len) == 0);
    }
    CHECK_EQ(weir_task_join(srv, NULL, WEIR_FOREVER), 0);
    weir_io_close(lfd);
    weir_collector_free(c);
    weir_job_free(j);
    /* Nobody listening: the job fails with the reason. */
    j = weir_job_new("tcp-refused");
    s = weir_job_source_tcp(j, "tcp", "127.0.0.1", 1, NULL);
    c = weir_collector_new();
    CHECK_EQ(weir_stream_collect(s, "out", c), 0);
    CHECK_EQ(weir_job_run(j, NULL), -ECONNREFUSED);
    CHECK(strstr(weir_job_error(j), "127.0.0.1:1") != NULL);
    weir_collector_free(c);
    weir_job_free(j);
    return 0;
}

TEST(tcp_lines)
{
    CHECK_EQ(on_runtime(tcp_main, NULL), 0);
}

/* ---- CSV, sinks ---------------------------------------------------------------------------- */
TEST(csv_split)
{
    weir_csv_field f[8];
    const char *l = "a,\"b,c\",,\"say \"\"hi\"\"\",e";
    CHECK_EQ(weir_csv_split(l, strlen(l), ',', f, 8), 5);
    CHECK_EQ(f[0].len, 1);
    CHECK(memcmp(f[1].p, "b,c", 3) == 0 && f[1].quoted);
    CHECK_EQ(f[2].len, 0);
    char buf[32];
    CHECK_EQ(weir_csv_unquote(&f[3], buf, sizeof(buf)), 8);
    CHECK_STR(buf, "say \"hi\"");
    CHECK_EQ(weir_csv_unquote(&f[3], buf, 4), -ENOSPC);
    CHECK_EQ(weir_csv_split("", 0, ',', f, 8), 1);
    CHECK_EQ(weir_csv_split("a,b,c", 5, ',', f, 2), -E2BIG);
    CHECK_EQ(weir_csv_split("\"open", 5, ',', f, 8), -EBADMSG);
    CHECK_EQ(weir_csv_split("\"a\"x,b", 6, ',', f, 8), -EBADMSG);
    CHECK_EQ(weir_csv_split("x;y", 3, ';', f, 8), 2);
}

static intptr_t sinks_main(void *arg)
{
    (void)arg;
    char in[128], out[128];
    snprintf(in, sizeof(in), "%s/lines.txt", dir);
    snprintf(out, sizeof(out), "%s/copy.txt", dir);
    weir_job *j = weir_job_new("copy");
    weir_stream *s = weir_job_source_file(j, "file", in, NULL);
    CHECK_EQ(weir_stream_text_sink(s, "copy", out), 0);
    weir_stream *few = weir_job_source_file(j, "file2", in, NULL);
    (void)few;
    CHECK_EQ(weir_job_run(j, NULL), 0);
    weir_job_free(j);
    /* The copy has the same lines (CRs dropped, a newline at the end). */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "tr -d '\\r' < %s | diff -q - %s >/dev/null || "
             "{ tr -d '\\r' < %s; echo; } | diff -q - %s >/dev/null",
             in, out, in, out);
    CHECK_EQ(system(cmd), 0);
    j = weir_job_new("print");
    s = weir_job_source_file(j, "file", in, NULL);
    s = weir_stream_filter(s, "first", NULL, NULL); /* a builder error: no function */
    CHECK(s == NULL);
    CHECK_EQ(weir_stream_print(s, "stdout"), -EINVAL);
    weir_job_free(j);
    return 0;
}

TEST(text_sink_copies_a_file)
{
    CHECK_EQ(on_runtime(sinks_main, NULL), 0);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

TEST_MAIN()
