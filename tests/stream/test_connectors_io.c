/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_connectors_io.c - the line source and the text sink touch no file
 * from a scheduler thread, and the text and stdout sinks still write
 * promptly.
 *
 * The first test interposes the file calls the two connectors make (open,
 * fopen, fstat, pread, read, write, close), as test_filesink_io.c does:
 * each records whether it ran inside a task (weir_task_current() is not
 * NULL: a scheduler thread) on a file under the test's directory, then
 * calls the real function. Under WEIR_IO=epoll the source's 64 KiB reads
 * (weir_io_pread) must show up as pread calls off the scheduler threads;
 * under io_uring the kernel does them and no pread call is made at all.
 *
 * The second defines "promptly": a line the sink got is written out once
 * the subtask waits for more input. A TCP source reads lines the test
 * sends one at a time; after each, the test waits (with a generous
 * deadline, never a fixed sleep) until the line is in the file or on
 * stdout (a pipe here) while the connection is still open, so the sink
 * cannot be relying on the end of input.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "test_rt.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/rt.h"
#include "weir/stream.h"

/* ---- the interposed calls ----------------------------------------------------------------- */
static char watched[64]; /* the test's directory; "" until set */
static _Atomic size_t watched_len;
static _Atomic unsigned long on_task, off_task, preads_off_task, writes_off_task, fstats_on_task;
/* fstat calls allowed on a task: the epoll backend asks once per descriptor
 * whether it is a regular file (a look at an open inode, no disk I/O), to
 * hand its reads to the pool; set per test and backend. */
static unsigned long max_backend_fstats;
static char first_bad[512]; /* the first call on a task, for the message */
static _Atomic int first_bad_set;

static void *real(const char *name)
{
    char icpt[64];
    snprintf(icpt, sizeof(icpt), "__interceptor_%s", name);
    void *p = dlsym(RTLD_DEFAULT, icpt);
    return p ? p : dlsym(RTLD_NEXT, name);
}
#define REAL(type, name)                                                                           \
    static _Atomic(type) r_;                                                                       \
    type fn_ = atomic_load(&r_);                                                                   \
    if (!fn_) {                                                                                    \
        void *p_ = real(#name);                                                                    \
        memcpy(&fn_, &p_, sizeof(fn_));                                                            \
        atomic_store(&r_, fn_);                                                                    \
    }

static int is_watched(const char *path)
{
    size_t n = atomic_load(&watched_len);
    return n && path && strncmp(path, watched, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static void note(const char *call, const char *path)
{
    if (!is_watched(path))
        return;
    if (!weir_task_current()) {
        atomic_fetch_add(&off_task, 1);
        if (!strcmp(call, "pread"))
            atomic_fetch_add(&preads_off_task, 1);
        if (!strcmp(call, "write"))
            atomic_fetch_add(&writes_off_task, 1);
        return;
    }
    if (!strcmp(call, "fstat") && atomic_fetch_add(&fstats_on_task, 1) < max_backend_fstats)
        return; /* the epoll backend learning that an fd is a file (see below) */
    atomic_fetch_add(&on_task, 1);
    int zero = 0;
    if (atomic_compare_exchange_strong(&first_bad_set, &zero, 1))
        snprintf(first_bad, sizeof(first_bad), "%s(%s) in task \"%s\"", call, path,
                 weir_task_name(weir_task_current()));
}

/* The path behind fd (asked on every thread: the pool's calls are counted). */
static void note_fd(const char *call, int fd)
{
    if (!atomic_load(&watched_len))
        return;
    char link[64], path[512];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    typedef ssize_t (*readlink_fn)(const char *, char *, size_t);
    REAL(readlink_fn, readlink);
    ssize_t n = fn_(link, path, sizeof(path) - 1);
    if (n <= 0)
        return;
    path[n] = '\0';
    note(call, path);
}

int open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    note("open", path);
    typedef int (*open_fn)(const char *, int, ...);
    REAL(open_fn, open);
    return fn_(path, flags, mode);
}

/* Not cloned by the optimiser: gcc -O3 would specialise it for this file's
 * own calls, and the clone lacks stdio.h's "closed by fclose" attribute,
 * which -Wmismatched-dealloc then reports at each fclose. */
#if defined(__GNUC__) && !defined(__clang__)
FILE *fopen(const char *path, const char *mode) __attribute__((noipa));
#endif
FILE *fopen(const char *path, const char *mode)
{
    note("fopen", path);
    typedef FILE *(*fopen_fn)(const char *, const char *);
    REAL(fopen_fn, fopen);
    return fn_(path, mode);
}

int fstat(int fd, struct stat *st)
{
    note_fd("fstat", fd);
    typedef int (*fstat_fn)(int, struct stat *);
    REAL(fstat_fn, fstat);
    return fn_(fd, st);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    note_fd("pread", fd);
    typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);
    REAL(pread_fn, pread);
    return fn_(fd, buf, n, off);
}

ssize_t read(int fd, void *buf, size_t n)
{
    note_fd("read", fd);
    typedef ssize_t (*read_fn)(int, void *, size_t);
    REAL(read_fn, read);
    return fn_(fd, buf, n);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    note_fd("write", fd);
    typedef ssize_t (*write_fn)(int, const void *, size_t);
    REAL(write_fn, write);
    return fn_(fd, buf, n);
}

int close(int fd)
{
    note_fd("close", fd);
    typedef int (*close_fn)(int);
    REAL(close_fn, close);
    return fn_(fd);
}

/* ---- no file call on a scheduler thread --------------------------------------------------- */
#define NLINES 60000 /* ~1 MiB: many 64 KiB reads, several sink buffers */

typedef struct cfg {
    const char *in, *out;
} cfg;

static intptr_t lines_to_text(void *arg)
{
    cfg *c = arg;
    weir_job *j = weir_job_new("connectors-io");
    weir_stream *s = weir_stream_parallelism(weir_job_source_file(j, "in", c->in, NULL), 2);
    CHECK_EQ(weir_stream_text_sink(s, "out", c->out), 0);
    int e = weir_job_run(j, NULL);
    if (e)
        fprintf(stderr, "job: %s\n", weir_job_error(j));
    weir_job_free(j);
    return e;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    CHECK_EQ(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    CHECK_GE(n, 0);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    CHECK(b != NULL);
    CHECK_EQ(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

TEST(line_source_and_text_sink_touch_no_file_on_a_scheduler_thread)
{
    char base[] = "/tmp/weir-cnio-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char in[128], out[128], part[2][140];
    snprintf(in, sizeof(in), "%s/in.txt", base);
    snprintf(out, sizeof(out), "%s/out.txt", base);
    FILE *f = fopen(in, "w");
    CHECK(f != NULL);
    for (int i = 0; i < NLINES; i++) {
        fprintf(f, "line %d %.*s\n", i, i % 23, "xxxxxxxxxxxxxxxxxxxxxxxxxxx");
        if (i % 20000 == 7) /* a line longer than the sink's 256 KiB buffer */
            for (int k = 0; k < (300 << 10); k++)
                fputc(k + 1 == (300 << 10) ? '\n' : 'y', f);
    }
    CHECK_EQ(fclose(f), 0);
    const char *io = getenv("WEIR_IO");
    int epoll = io && !strcmp(io, "epoll");
    max_backend_fstats = epoll ? 2 : 0; /* one per source subtask's descriptor */
    snprintf(watched, sizeof(watched), "%s", base);
    atomic_store(&watched_len, strlen(watched));

    cfg c = {.in = in, .out = out};
    CHECK_EQ(test_run_on_rt(2, lines_to_text, &c), 0);
    atomic_store(&watched_len, 0);

    /* Subtask 0 has the first half of the lines, in order, subtask 1 the rest. */
    size_t nin, n0, n1;
    char *want = slurp(in, &nin);
    for (int i = 0; i < 2; i++)
        snprintf(part[i], sizeof(part[i]), "%s.%d", out, i);
    char *p0 = slurp(part[0], &n0), *p1 = slurp(part[1], &n1);
    CHECK_EQ(n0 + n1, nin);
    CHECK(n0 > 0 && n1 > 0);
    CHECK(memcmp(want, p0, n0) == 0);
    CHECK(memcmp(want + n0, p1, n1) == 0);
    free(want);
    free(p0);
    free(p1);

    if (atomic_load(&on_task))
        fprintf(stderr, "%lu file calls on a scheduler thread, the first: %s\n",
                atomic_load(&on_task), first_bad);
    printf("file calls under %s: %lu on pool threads (%lu preads, %lu writes), %lu on "
           "scheduler threads\n",
           base, atomic_load(&off_task), atomic_load(&preads_off_task),
           atomic_load(&writes_off_task), atomic_load(&on_task));
    CHECK_EQ(atomic_load(&on_task), 0);
    /* The interposition saw the work: both sinks' writes, both opens and
     * the 1-byte look of subtask 1 at the byte before its range. */
    CHECK_GE(atomic_load(&writes_off_task), 2);
    CHECK_GE(atomic_load(&preads_off_task), 1);
    if (epoll) /* every 64 KiB piece was a pread on the pool */
        CHECK_GE(atomic_load(&preads_off_task), (unsigned long)(nin / (64u << 10)));
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    CHECK_EQ(system(cmd), 0);
}

/* ---- errors ---------------------------------------------------------------------------------- */
typedef struct err_cfg {
    const char *in, *out;
} err_cfg;

static intptr_t sink_error_main(void *arg)
{
    err_cfg *c = arg;
    weir_job *j = weir_job_new("sink-error");
    weir_stream *s = weir_job_source_file(j, "in", c->in, NULL);
    CHECK_EQ(weir_stream_text_sink(s, "out", c->out), 0);
    int e = weir_job_run(j, NULL);
    CHECK_LT(e, 0);
    printf("%s: %s\n", c->out, weir_job_error(j));
    CHECK(strstr(weir_job_error(j), c->out) != NULL); /* names the file */
    weir_job_free(j);
    return -e;
}

TEST(text_sink_reports_what_failed)
{
    char in[] = "/tmp/weir-cnerr-XXXXXX";
    int fd = mkstemp(in);
    CHECK_GE(fd, 0);
    CHECK_EQ(write(fd, "one\ntwo\n", 8), 8);
    close(fd);
    /* A directory that does not exist: open() fails, named. */
    err_cfg c = {.in = in, .out = "/nonexistent-weir-dir/out.txt"};
    CHECK_EQ(test_run_on_rt(2, sink_error_main, &c), ENOENT);
    /* A device that takes no data: the write fails, by the end of input. */
    c.out = "/dev/full";
    CHECK_EQ(test_run_on_rt(2, sink_error_main, &c), ENOSPC);
    unlink(in);
}

/* ---- promptness ---------------------------------------------------------------------------- */
typedef struct prompt {
    int lfd;
    const char *out; /* text sink path; NULL: print */
    int rd;          /* print: the read end of the pipe standing in for stdout */
} prompt;

static intptr_t prompt_job(void *arg)
{
    prompt *p = arg;
    weir_job *j = weir_job_new("prompt");
    weir_stream *s = weir_job_source_tcp(j, "tcp", "127.0.0.1", weir_net_local_port(p->lfd), NULL);
    CHECK_EQ(p->out ? weir_stream_text_sink(s, "out", p->out) : weir_stream_print(s, "out"), 0);
    int e = weir_job_run(j, NULL);
    if (e)
        fprintf(stderr, "job: %s\n", weir_job_error(j));
    weir_job_free(j);
    return e;
}

/* Wait until `got` (what the sink wrote so far) holds want, 10 s at most. */
static void await_output(prompt *p, char *got, size_t *len, size_t cap, const char *want)
{
    int64_t deadline = weir_time_after_ms(10000);
    size_t wl = strlen(want);
    while (*len < wl) {
        if (p->out) {
            FILE *f = fopen(p->out, "rb");
            if (f) {
                *len = fread(got, 1, cap, f);
                fclose(f);
            }
            if (*len < wl) {
                CHECK(weir_time_now() < deadline);
                weir_time_sleep(WEIR_MSEC); /* polling a file: nothing to wait on */
            }
        } else {
            ssize_t n = weir_io_read(p->rd, got + *len, cap - *len, deadline);
            CHECK_GT(n, 0);
            *len += (size_t)n;
        }
    }
    CHECK_EQ(*len, wl);
    CHECK(memcmp(got, want, wl) == 0);
}

static intptr_t prompt_main(void *arg)
{
    prompt *p = arg;
    p->lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(p->lfd, 0);
    weir_task *job = weir_task_spawn(prompt_job, p, NULL);
    CHECK(job != NULL);
    int fd = weir_net_accept(p->lfd, NULL, weir_time_after_ms(10000));
    CHECK_GE(fd, 0);
    char want[256] = "", got[256];
    size_t len = 0;
    for (int i = 0; i < 3; i++) {
        char line[32];
        int n = snprintf(line, sizeof(line), "prompt %d\n", i);
        CHECK_EQ(weir_io_send(fd, line, (size_t)n, 0, weir_time_after_ms(5000)), n);
        strcat(want, line);
        /* The connection stays open: the source waits for more. */
        await_output(p, got, &len, sizeof(got), want);
    }
    weir_net_close_graceful(fd, weir_time_after_ms(2000));
    CHECK_EQ(weir_task_join(job, NULL, WEIR_FOREVER), 0);
    weir_io_close(p->lfd);
    return 0;
}

TEST(text_sink_writes_a_line_once_the_subtask_waits)
{
    char base[] = "/tmp/weir-cnpr-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char out[128];
    snprintf(out, sizeof(out), "%s/out.txt", base);
    prompt p = {.out = out, .rd = -1};
    CHECK_EQ(test_run_on_rt(2, prompt_main, &p), 0);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    CHECK_EQ(system(cmd), 0);
}

TEST(print_writes_a_line_once_the_subtask_waits)
{
    int pfd[2];
    CHECK_EQ(pipe(pfd), 0);
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    CHECK_GE(saved, 0);
    CHECK_EQ(dup2(pfd[1], STDOUT_FILENO), STDOUT_FILENO);
    close(pfd[1]);
    prompt p = {.out = NULL, .rd = pfd[0]};
    intptr_t r = test_run_on_rt(2, prompt_main, &p);
    fflush(stdout);
    CHECK_EQ(dup2(saved, STDOUT_FILENO), STDOUT_FILENO);
    close(saved);
    close(pfd[0]);
    CHECK_EQ(r, 0);
}

TEST_MAIN()
