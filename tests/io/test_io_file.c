/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_io_file.c - reads and writes of a regular file through the public
 * I/O ops never run on the loop thread: under epoll (which cannot poll a
 * file) they go to the blocking pool, under io_uring the kernel does them.
 * Results, the file position, cancellation and deadlines are checked too.
 *
 * The binary defines pread, pwrite, read and write itself so the runtime's
 * calls come here first (as test_filesink_io.c does): each counts whether
 * it ran inside a task (a scheduler thread) on the test's file. A pread at
 * GATE_OFF blocks on a pipe until the test releases it, so the test can
 * hold a call "started" or keep the pool's only thread busy.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "test.h"
#include "test_rt.h"
#include "weir/io.h"
#include "weir/rt.h"

#define GATE_OFF 4096 /* a pread here waits for the gate */
#define FILE_LEN (256 << 10)

static _Atomic int file_fd = -1; /* the test file's descriptor: only its calls count */
static _Atomic unsigned long on_task, off_task, at_zero, sock_writes_on_task;
static _Atomic int gate_entered;
static int gate[2]; /* a pread at GATE_OFF reads one byte from gate[0] first */

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

static void note(int fd)
{
    if (fd != atomic_load(&file_fd) || fd < 0)
        return;
    atomic_fetch_add(weir_task_current() ? &on_task : &off_task, 1);
}

ssize_t read(int fd, void *buf, size_t n)
{
    note(fd);
    typedef ssize_t (*read_fn)(int, void *, size_t);
    REAL(read_fn, read);
    return fn_(fd, buf, n);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    note(fd);
    typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);
    REAL(pread_fn, pread);
    if (fd == atomic_load(&file_fd) && off == 0)
        atomic_fetch_add(&at_zero, 1);
    if (fd == atomic_load(&file_fd) && off == GATE_OFF) {
        atomic_store(&gate_entered, 1);
        char c;
        typedef ssize_t (*read_fn)(int, void *, size_t);
        read_fn rd;
        void *p = real("read");
        memcpy(&rd, &p, sizeof(rd));
        CHECK_EQ(rd(gate[0], &c, 1), 1);
    }
    return fn_(fd, buf, n, off);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    note(fd);
    if (weir_task_current() && fd != atomic_load(&file_fd)) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
            atomic_fetch_add(&sock_writes_on_task, 1);
    }
    typedef ssize_t (*write_fn)(int, const void *, size_t);
    REAL(write_fn, write);
    return fn_(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    note(fd);
    typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
    REAL(pwrite_fn, pwrite);
    return fn_(fd, buf, n, off);
}

static int epoll_backend(void)
{
    const char *io = getenv("WEIR_IO");
    return io && !strcmp(io, "epoll");
}

static char path[64];

static void make_file(void)
{
    snprintf(path, sizeof(path), "/tmp/weir-iofile-XXXXXX");
    int fd = mkstemp(path);
    CHECK_GE(fd, 0);
    static unsigned char b[FILE_LEN];
    for (size_t i = 0; i < sizeof(b); i++)
        b[i] = (unsigned char)(i * 7 + i / 251);
    CHECK_EQ(write(fd, b, sizeof(b)), (ssize_t)sizeof(b));
    atomic_store(&file_fd, fd);
    atomic_store(&on_task, 0);
    atomic_store(&off_task, 0);
    atomic_store(&at_zero, 0);
}

static void drop_file(void)
{
    int fd = atomic_exchange(&file_fd, -1);
    close(fd);
    unlink(path);
}

static unsigned char expect(size_t i)
{
    return (unsigned char)(i * 7 + i / 251);
}

/* ---- results, and no call on the loop thread ------------------------------------------------ */
static intptr_t rw_main(void *arg)
{
    (void)arg;
    int fd = atomic_load(&file_fd);
    static unsigned char b[FILE_LEN];
    /* pread at offsets, in 64 KiB pieces as the line source reads */
    for (size_t off = 0; off < FILE_LEN; off += 64 << 10) {
        CHECK_EQ(weir_io_pread(fd, b, 64 << 10, (int64_t)off, WEIR_FOREVER), 64 << 10);
        for (size_t i = 0; i < (64 << 10); i++)
            CHECK_EQ(b[i], expect(off + i));
    }
    CHECK_EQ(weir_io_pread(fd, b, 100, FILE_LEN - 10, WEIR_FOREVER), 10); /* short at the end */
    CHECK_EQ(weir_io_pread(fd, b, 100, FILE_LEN, WEIR_FOREVER), 0);       /* end of file */
    /* pwrite, then read it back */
    CHECK_EQ(weir_io_pwrite(fd, "weir", 4, 100, WEIR_FOREVER), 4);
    CHECK_EQ(weir_io_pread(fd, b, 4, 100, WEIR_FOREVER), 4);
    CHECK(memcmp(b, "weir", 4) == 0);
    /* read and write at the file position: each moves it */
    CHECK_EQ(lseek(fd, 0, SEEK_SET), 0);
    CHECK_EQ(weir_io_read(fd, b, 50, WEIR_FOREVER), 50);
    CHECK_EQ(weir_io_read(fd, b + 50, 50, WEIR_FOREVER), 50);
    CHECK_EQ(lseek(fd, 0, SEEK_CUR), 100);
    CHECK_EQ(weir_io_write(fd, "WEIR", 4, WEIR_FOREVER), 4);
    CHECK_EQ(lseek(fd, 0, SEEK_CUR), 104);
    struct iovec iov[2] = {{b, 2}, {b + 2, 2}};
    CHECK_EQ(lseek(fd, 100, SEEK_SET), 100);
    CHECK_EQ(weir_io_readv(fd, iov, 2, WEIR_FOREVER), 4);
    CHECK(memcmp(b, "WEIR", 4) == 0);
    /* A bad descriptor still reports EBADF. */
    CHECK_EQ(weir_io_pread(1 << 20, b, 1, 0, WEIR_FOREVER), -EBADF);
    /* A deadline already past: refused, the file untouched. */
    unsigned long before = atomic_load(&off_task) + atomic_load(&on_task);
    CHECK_EQ(weir_io_pread(fd, b, 1, 0, weir_time_now() - 1), -ETIMEDOUT);
    CHECK_EQ(atomic_load(&off_task) + atomic_load(&on_task), before);
    /* Sockets keep the loop's path: their writes run inline under epoll. */
    int sp[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp), 0);
    CHECK_EQ(weir_io_write(sp[0], "ping", 4, weir_time_after_ms(5000)), 4);
    CHECK_EQ(weir_io_read(sp[1], b, 4, weir_time_after_ms(5000)), 4);
    CHECK(memcmp(b, "ping", 4) == 0);
    CHECK_EQ(weir_io_close(sp[0]), 0);
    CHECK_EQ(weir_io_close(sp[1]), 0);
    return 0;
}

TEST(file_reads_and_writes_never_run_on_the_loop_thread)
{
    make_file();
    CHECK_EQ(test_run_main(rw_main, NULL), 0);
    printf("file calls: %lu on the pool, %lu on the loop thread; %lu socket writes inline\n",
           atomic_load(&off_task), atomic_load(&on_task), atomic_load(&sock_writes_on_task));
    CHECK_EQ(atomic_load(&on_task), 0);
    if (epoll_backend()) {
        CHECK_GE(atomic_load(&off_task), 10); /* every call above went to the pool */
        CHECK_GE(atomic_load(&sock_writes_on_task), 1);
    } else {
        CHECK_EQ(atomic_load(&off_task), 0); /* io_uring made no such call */
    }
    drop_file();
}

/* The same from a multi-threaded runtime. */
TEST(file_reads_from_a_runtime_never_run_on_a_scheduler_thread)
{
    make_file();
    CHECK_EQ(test_run_on_rt(2, rw_main, NULL), 0);
    CHECK_EQ(atomic_load(&on_task), 0);
    drop_file();
}

/* ---- weir_io_close of a file --------------------------------------------------------------- */
static _Atomic int closes_on_task, closes_off_task, watch_close = -1;

int close(int fd)
{
    if (fd == atomic_load(&watch_close))
        atomic_fetch_add(weir_task_current() ? &closes_on_task : &closes_off_task, 1);
    typedef int (*close_fn)(int);
    REAL(close_fn, close);
    return fn_(fd);
}

static intptr_t close_main(void *arg)
{
    (void)arg;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK_GE(fd, 0);
    unsigned char b[8];
    CHECK_EQ(weir_io_pread(fd, b, sizeof(b), 0, WEIR_FOREVER), (ssize_t)sizeof(b));
    atomic_store(&watch_close, fd);
    CHECK_EQ(weir_io_close(fd), 0);
    atomic_store(&watch_close, -1);
    /* The number comes back as a pipe: it must be treated as one (waited
     * for by the backend, ended by its deadline), not as the file it was. */
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    CHECK(p[0] == fd || p[1] == fd);
    int rd = p[0];
    CHECK_EQ(weir_io_read(rd, b, sizeof(b), weir_time_after_ms(20)), -ETIMEDOUT);
    CHECK_EQ(weir_io_write(p[1], "x", 1, weir_time_after_ms(5000)), 1);
    CHECK_EQ(weir_io_read(rd, b, sizeof(b), weir_time_after_ms(5000)), 1);
    CHECK_EQ(weir_io_close(p[0]), 0);
    CHECK_EQ(weir_io_close(p[1]), 0);
    return 0;
}

TEST(closing_a_file_runs_off_the_loop_thread_and_forgets_its_number)
{
    make_file();
    CHECK_EQ(test_run_main(close_main, NULL), 0);
    CHECK_EQ(atomic_load(&closes_on_task), 0);
    if (epoll_backend())
        CHECK_EQ(atomic_load(&closes_off_task), 1);
    drop_file();
}

/* ---- cancellation and deadlines on the pool (epoll) ------------------------------------------ */
typedef struct reader {
    int64_t off, deadline;
    unsigned char buf[16];
} reader;

static intptr_t read_one(void *arg)
{
    reader *r = arg;
    return weir_io_pread(atomic_load(&file_fd), r->buf, sizeof(r->buf), r->off, r->deadline);
}

static void await_flag(_Atomic int *flag)
{
    int64_t deadline = weir_time_after_ms(10000);
    while (!atomic_load(flag)) {
        CHECK(weir_time_now() < deadline);
        weir_time_sleep(WEIR_MSEC);
    }
}

static void release_gate(void)
{
    CHECK_EQ(write(gate[1], "g", 1), 1);
}

static intptr_t started_main(void *arg)
{
    (void)arg;
    /* A call that has started finishes with its real result, cancel or not:
     * the buffer is the caller's until then. */
    reader a = {.off = GATE_OFF, .deadline = WEIR_FOREVER};
    weir_task *t = test_spawn(read_one, &a);
    await_flag(&gate_entered);
    CHECK_EQ(weir_task_cancel(t), 0);
    CHECK_EQ(weir_task_join(t, NULL, weir_time_after_ms(50)), -ETIMEDOUT); /* still in pread */
    release_gate();
    intptr_t r = 0;
    weir_task_join(t, &r, WEIR_FOREVER);
    CHECK_EQ(r, (intptr_t)sizeof(a.buf));
    for (size_t i = 0; i < sizeof(a.buf); i++)
        CHECK_EQ(a.buf[i], expect(GATE_OFF + i));

    /* One pool thread (WEIR_BLOCKING_THREADS=1), held by a gated call: a
     * queued call whose task is cancelled, or whose deadline passes while it
     * waits, ends without reading. */
    atomic_store(&gate_entered, 0);
    reader hold = {.off = GATE_OFF, .deadline = WEIR_FOREVER};
    reader c = {.off = 0, .deadline = WEIR_FOREVER};
    reader d = {.off = 0, .deadline = weir_time_after_ms(1)};
    weir_task *th = test_spawn(read_one, &hold);
    await_flag(&gate_entered);
    weir_task *tc = test_spawn(read_one, &c), *td = test_spawn(read_one, &d);
    CHECK_EQ(weir_task_yield(), 0); /* both queue their call */
    CHECK_EQ(weir_task_yield(), 0);
    CHECK_EQ(weir_task_cancel(tc), 0);
    while (weir_time_now() <= d.deadline)
        weir_time_sleep(WEIR_MSEC);
    release_gate();
    CHECK_EQ(weir_task_join(th, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, (intptr_t)sizeof(hold.buf));
    weir_task_join(tc, &r, WEIR_FOREVER);
    CHECK_EQ(r, -ECANCELED);
    CHECK_EQ(weir_task_join(td, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, -ETIMEDOUT);
    CHECK_EQ(atomic_load(&at_zero), 0); /* neither read */
    return 0;
}

TEST(file_call_on_the_pool_honours_cancel_and_deadline_until_it_starts)
{
    if (!epoll_backend()) {
        printf("(io_uring does file reads itself: nothing on the pool to test)\n");
        return;
    }
    CHECK_EQ(pipe(gate), 0);
    make_file();
    setenv("WEIR_BLOCKING_THREADS", "1", 1);
    CHECK_EQ(test_run_main(started_main, NULL), 0);
    unsetenv("WEIR_BLOCKING_THREADS");
    CHECK_EQ(atomic_load(&on_task), 0);
    drop_file();
    close(gate[0]);
    close(gate[1]);
}

TEST_MAIN()
