/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_filesink_io.c - a checkpointed run into the exactly-once file sink,
 * and a run restored from it, touch no file of their directories from a
 * scheduler thread: the sink's writes, renames, listings and deletions,
 * the checkpoint directory's blobs and the directory locks all run on the
 * blocking pool.
 *
 * The test binary defines the file calls the engine makes (open, write,
 * fsync, rename, unlink, opendir, mkdir) itself, so the library's calls
 * come here first: each records whether it ran inside a task (a scheduler
 * thread: weir_task_current() is not NULL) on a path under the test's
 * directory, then calls the real function (the sanitizer's interceptor
 * when there is one, else libc's). A call on a pool thread is counted too,
 * so the test also sees that the work really happened somewhere.
 */
#include <dirent.h>
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
#include "weir/rt.h"
#include "weir/stream.h"

/* ---- the interposed calls ----------------------------------------------------------------- */
static char watched[64]; /* the test's directory; "" until set */
static size_t watched_len;
static _Atomic unsigned long on_task, off_task, sink_renames_off_task;
static char first_bad[512]; /* the first call on a task, for the message */
static _Atomic int first_bad_set;

/* The real function: a sanitizer's interceptor (it would have been called
 * had this file not defined the name), else the next definition (libc). */
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
        void *p_ = real(#name); /* (memcpy: ISO C has no cast from void * to a function) */        \
        memcpy(&fn_, &p_, sizeof(fn_));                                                            \
        atomic_store(&r_, fn_);                                                                    \
    }

static int is_watched(const char *path)
{
    return watched_len && path && strncmp(path, watched, watched_len) == 0 &&
           (path[watched_len] == '/' || path[watched_len] == '\0');
}

static void note(const char *call, const char *path)
{
    if (!is_watched(path))
        return;
    if (!weir_task_current()) {
        atomic_fetch_add(&off_task, 1);
        if (!strcmp(call, "rename") && strstr(path, "/out/.part-")) /* the sink's, not a store's */
            atomic_fetch_add(&sink_renames_off_task, 1);
        return;
    }
    atomic_fetch_add(&on_task, 1);
    int zero = 0;
    if (atomic_compare_exchange_strong(&first_bad_set, &zero, 1))
        snprintf(first_bad, sizeof(first_bad), "%s(%s) in task \"%s\"", call, path,
                 weir_task_name(weir_task_current()));
}

/* An fd's path, for the calls that take a descriptor (only asked on a
 * task: the pool threads' calls are fine wherever they go). */
static void note_fd(const char *call, int fd)
{
    if (!weir_task_current() || !watched_len)
        return;
    char link[64], path[512];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
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

ssize_t write(int fd, const void *buf, size_t n)
{
    note_fd("write", fd);
    typedef ssize_t (*write_fn)(int, const void *, size_t);
    REAL(write_fn, write);
    return fn_(fd, buf, n);
}

int fsync(int fd)
{
    note_fd("fsync", fd);
    typedef int (*fsync_fn)(int);
    REAL(fsync_fn, fsync);
    return fn_(fd);
}

int rename(const char *from, const char *to)
{
    note("rename", from);
    typedef int (*rename_fn)(const char *, const char *);
    REAL(rename_fn, rename);
    return fn_(from, to);
}

int unlink(const char *path)
{
    note("unlink", path);
    typedef int (*unlink_fn)(const char *);
    REAL(unlink_fn, unlink);
    return fn_(path);
}

int mkdir(const char *path, mode_t mode)
{
    note("mkdir", path);
    typedef int (*mkdir_fn)(const char *, mode_t);
    REAL(mkdir_fn, mkdir);
    return fn_(path, mode);
}

DIR *opendir(const char *path)
{
    note("opendir", path);
    typedef DIR *(*opendir_fn)(const char *);
    REAL(opendir_fn, opendir);
    return fn_(path);
}

/* ---- the job ------------------------------------------------------------------------------ */
#define PER_SUB   20000
#define BIG_EVERY 997         /* record i % BIG_EVERY == 5 is BIG bytes: past the sink's buffer */
#define BIG       (300 << 10) /* the sink buffers 256 KiB */

static size_t rec_len(int64_t i)
{
    return i % BIG_EVERY == 5 ? BIG : 16 + (size_t)(i % 40);
}

typedef struct gen {
    int64_t next;
    int sub;
} gen;

static int gen_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)arg;
    gen *g = calloc(1, sizeof(gen));
    if (!g)
        return -ENOMEM;
    g->sub = weir_ctx_subtask(ctx);
    *state = g;
    return 0;
}

/* "<sub> <i> " then x's up to rec_len(i) bytes, a few records a call, a
 * millisecond's sleep now and then so checkpoints come while it runs. */
static int gen_next(weir_ctx *ctx, void *state)
{
    gen *g = state;
    static __thread char buf[BIG];
    for (int k = 0; k < 50 && g->next < PER_SUB; k++) {
        int64_t i = g->next++;
        size_t n = rec_len(i);
        int h = snprintf(buf, sizeof(buf), "%d %lld ", g->sub, (long long)i);
        memset(buf + h, 'x', n - (size_t)h);
        int e = weir_emit(ctx, buf, n, i);
        if (e)
            return e;
    }
    if (g->next >= PER_SUB)
        return 1;
    if (g->next % 500 == 0)
        weir_time_sleep(WEIR_MSEC);
    return 0;
}

static int gen_snapshot(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    if (!(*buf = malloc(sizeof(int64_t))))
        return -ENOMEM;
    memcpy(*buf, &((gen *)state)->next, sizeof(int64_t));
    *len = sizeof(int64_t);
    return 0;
}

static int gen_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    (void)ctx;
    if (len != sizeof(int64_t))
        return -EBADMSG;
    memcpy(&((gen *)state)->next, buf, sizeof(int64_t));
    return 0;
}

typedef struct cfg {
    const char *ckpt, *out;
    int restore;
    weir_ckpt_stats ck;
} cfg;

static intptr_t run_main(void *arg)
{
    cfg *c = arg;
    weir_job *j = weir_job_new("filesink-io");
    weir_source_def sd = {.open = gen_open,
                          .next = gen_next,
                          .close = free,
                          .snapshot = gen_snapshot,
                          .restore = gen_restore};
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "gen", &sd, NULL), 2);
    CHECK_EQ(weir_stream_file_sink(s, "out", c->out), 0);
    int e = weir_job_run(j, &(weir_run_opts){.checkpoint_dir = c->ckpt,
                                             .checkpoint_interval_ms = 10,
                                             .restore = c->restore});
    if (e)
        fprintf(stderr, "job: %s\n", weir_job_error(j));
    weir_job_ckpt_stats(j, &c->ck);
    weir_job_free(j);
    return e;
}

/* Every record of both subtasks exactly once, whole, in the committed
 * files. */
static void check_output(const char *out)
{
    static unsigned char seen[2][PER_SUB];
    memset(seen, 0, sizeof(seen));
    long total = 0;
    DIR *d = opendir(out);
    CHECK(d != NULL);
    struct dirent *de;
    static char line[BIG + 2];
    while ((de = readdir(d)) != NULL) {
        CHECK(de->d_name[0] != '.' || !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
              !strcmp(de->d_name, ".lock")); /* nothing pending or in progress left */
        if (strncmp(de->d_name, "part-", 5) != 0)
            continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", out, de->d_name);
        FILE *f = fopen(path, "r");
        CHECK(f != NULL);
        while (fgets(line, sizeof(line), f)) {
            int sub;
            long long i;
            CHECK_EQ(sscanf(line, "%d %lld ", &sub, &i), 2);
            CHECK(sub >= 0 && sub < 2 && i >= 0 && i < PER_SUB);
            CHECK_EQ(strlen(line), rec_len(i) + 1);
            CHECK_EQ(seen[sub][i], 0);
            seen[sub][i] = 1;
            total++;
        }
        fclose(f);
    }
    closedir(d);
    CHECK_EQ(total, 2L * PER_SUB);
}

TEST(file_sink_and_checkpoints_touch_no_file_on_a_scheduler_thread)
{
    char base[] = "/tmp/weir-fsio-XXXXXX";
    CHECK(mkdtemp(base) != NULL);
    char ckpt[128], out[128];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt", base);
    snprintf(out, sizeof(out), "%s/out", base);
    snprintf(watched, sizeof(watched), "%s", base);
    watched_len = strlen(watched);

    cfg first = {.ckpt = ckpt, .out = out};
    CHECK_EQ(test_run_on_rt(2, run_main, &first), 0);
    CHECK_GE(first.ck.completed, 1);
    check_output(out);
    /* The restored run deletes what the first committed after its last
     * checkpoint, commits the pending files and writes the tail again. */
    cfg again = {.ckpt = ckpt, .out = out, .restore = 1};
    CHECK_EQ(test_run_on_rt(2, run_main, &again), 0);
    CHECK_GE(again.ck.restored, 1);
    check_output(out);

    watched_len = 0;
    if (atomic_load(&on_task))
        fprintf(stderr, "%lu file calls on a scheduler thread, the first: %s\n",
                atomic_load(&on_task), first_bad);
    printf("file calls under %s: %lu on pool threads (%lu renames of the sink's), %lu on "
           "scheduler threads\n",
           base, atomic_load(&off_task), atomic_load(&sink_renames_off_task),
           atomic_load(&on_task));
    CHECK_EQ(atomic_load(&on_task), 0);
    CHECK_GE(atomic_load(&sink_renames_off_task), 2); /* the interposition saw the sink's work */
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    CHECK_EQ(system(cmd), 0);
}

TEST_MAIN()
