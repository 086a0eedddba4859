/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_trace.c - WEIR_TRACE: the file a traced run leaves behind (events of
 * fibers, stackless tasks, sleeps, yields, a cross-thread wake between two
 * loops sharing the file, a cancel), running untraced when the file cannot
 * be opened or written, and the weir-trace tool on good and bad files.
 *
 * The file is parsed here by a small reader of its own, independent of the
 * tool, so that a bug shared by writer and tool cannot hide.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rt/rt_int.h"
#include "test_rt.h"

extern char **environ;

/* ---- a minimal reader ---------------------------------------------------------- */
enum { EV_LOOP = 16, EV_TIME = 17, EV_NAME = 18, EV_END = 19 };

typedef struct rec {
    int64_t t; /* absolute ns, reconstructed per loop */
    int ev, loop;
    unsigned arg;
    uint64_t v;
    char name[256]; /* NAME only */
} rec;

typedef struct trace {
    rec *r;
    size_t n;
    char names[4][64][64]; /* [loop][id] for the loops of this test */
} trace;

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void trace_read(const char *path, trace *tr)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    unsigned char h[32];
    CHECK_EQ(fread(h, 1, 32, f), 32);
    CHECK(memcmp(h, "WEIRTRC1", 8) == 0);
    CHECK_EQ(le(h + 8, 4), 1);
    CHECK_EQ(le(h + 12, 4), 16);
    CHECK_EQ(le(h + 24, 4), getpid());
    int64_t now[256] = {0};
    int timed[256] = {0};
    memset(tr, 0, sizeof(*tr));
    size_t cap = 0;
    unsigned char b[16];
    size_t got;
    while ((got = fread(b, 1, 16, f)) == 16) {
        if (tr->n == cap) {
            cap = cap ? cap * 2 : 1024;
            tr->r = realloc(tr->r, cap * sizeof(rec));
            CHECK(tr->r != NULL);
        }
        rec *r = &tr->r[tr->n++];
        memset(r, 0, sizeof(*r));
        r->ev = b[4];
        r->loop = b[5];
        r->arg = (unsigned)le(b + 6, 2);
        r->v = le(b + 8, 8);
        if (r->ev == EV_TIME) {
            CHECK(!timed[r->loop] || (int64_t)r->v >= now[r->loop]); /* monotonic per loop */
            now[r->loop] = (int64_t)r->v;
            timed[r->loop] = 1;
        } else if (r->ev == EV_LOOP) {
            timed[r->loop] = 0;
        } else {
            CHECK(timed[r->loop]);
            now[r->loop] += (int64_t)le(b, 4);
        }
        r->t = now[r->loop];
        if (r->ev == EV_NAME) {
            CHECK(r->arg >= 1 && r->arg <= 255);
            size_t padded = (r->arg + 15) / 16 * 16;
            unsigned char nb[256];
            CHECK_EQ(fread(nb, 1, padded, f), padded);
            memcpy(r->name, nb, r->arg);
            if (r->loop < 4 && r->v < 64)
                memcpy(tr->names[r->loop][r->v], r->name, r->arg < 63 ? r->arg : 63);
        }
    }
    CHECK_EQ(got, 0); /* whole records only */
    fclose(f);
}

static const char *spawn_name(const trace *tr, const rec *r)
{
    unsigned id = r->arg & 0x7fff;
    return r->loop < 4 && id < 64 ? tr->names[r->loop][id] : "";
}

/* The events of the task spawned under `name` (the first one): from its
 * SPAWN to its READY, as a string of letters S P p W R C. */
static void task_events(const trace *tr, const char *name, char *out, size_t outsz, int *loop,
                        rec *spawn)
{
    size_t i = 0, k = 0;
    for (; i < tr->n; i++)
        if (tr->r[i].ev == 1 && strcmp(spawn_name(tr, &tr->r[i]), name) == 0)
            break;
    CHECK(i < tr->n);
    const rec *s = &tr->r[i];
    if (loop)
        *loop = s->loop;
    if (spawn)
        *spawn = *s;
    for (; i < tr->n && k + 1 < outsz; i++) {
        const rec *r = &tr->r[i];
        if (r->loop != s->loop || r->v != s->v || r->ev > 7)
            continue;
        out[k++] = "?SPpWRCT"[r->ev];
        if (r->ev == 5)
            break;
    }
    out[k] = 0;
}

static const rec *find_ready(const trace *tr, const rec *spawn)
{
    const rec *r = tr->r, *end = tr->r + tr->n;
    while (r < end && r != spawn && !(r->ev == 1 && r->loop == spawn->loop && r->v == spawn->v))
        r++;
    for (; r < end; r++)
        if (r->ev == 5 && r->loop == spawn->loop && r->v == spawn->v)
            return r;
    return NULL;
}

static char trace_path[PATH_MAX];

static void temp_path(const char *tag)
{
    const char *dir = getenv("TMPDIR");
    snprintf(trace_path, sizeof(trace_path), "%s/weir-test-trace-%d-%s.trc",
             dir && *dir ? dir : "/tmp", (int)getpid(), tag);
}

/* ---- the traced program ------------------------------------------------------- */
static intptr_t sleeper(void *arg)
{
    (void)arg;
    CHECK_EQ(weir_time_sleep(2 * WEIR_MSEC), 0);
    return 7;
}

static intptr_t yielder(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(weir_task_yield(), 0);
    return 0;
}

static intptr_t victim(void *arg)
{
    (void)arg;
    return weir_time_sleep(100 * WEIR_SEC);
}

struct sl_frame {
    weir_co co;
    weir_op op;
    int64_t res;
};

static int sl_sleeper(void *p, intptr_t *out)
{
    struct sl_frame *f = p;
    WEIR_BEGIN(&f->co);
    weir_time_sleep_start(&f->op, weir_time_now() + WEIR_MSEC);
    WEIR_AWAIT(&f->co, &f->op, f->res);
    WEIR_YIELD(&f->co);
    WEIR_RETURN(&f->co, out, f->res);
    WEIR_END(&f->co);
}

/* The second loop: its own thread, driven until told to stop. */
static _Atomic(weir_loop *) loop2;
static _Atomic int stop2;

static void *loop2_thread(void *arg)
{
    (void)arg;
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    atomic_store(&loop2, l);
    while (!atomic_load(&stop2))
        CHECK(weir_loop_poll(l, 5) >= 0);
    weir_loop_free(l);
    return NULL;
}

static intptr_t remote_worker(void *arg)
{
    (void)arg;
    CHECK_EQ(weir_time_sleep(20 * WEIR_MSEC), 0); /* outlives the others: main parks on it */
    return 11;
}

static intptr_t traced_main(void *arg)
{
    (void)arg;
    weir_spawn_opts o = {.name = "sleeper"};
    weir_task *s = weir_task_spawn(sleeper, NULL, &o);
    weir_task *y = weir_task_spawn(yielder, NULL, &(weir_spawn_opts){.name = "yielder"});
    weir_task *v = weir_task_spawn(victim, NULL, &(weir_spawn_opts){.name = "victim"});
    struct sl_frame fr = {0};
    weir_task *sl =
        weir_task_spawn_stackless(sl_sleeper, &fr, &(weir_spawn_opts){.name = "sl_sleeper"});
    CHECK(s && y && v && sl);

    /* Cross-thread: a task on loop 2, spawned from here; joining it parks
     * this fiber until loop 2's thread wakes it. */
    weir_loop *l2;
    while (!(l2 = atomic_load(&loop2)))
        weir_time_sleep(WEIR_MSEC / 4);
    weir_task *rw = weir_task_spawn(remote_worker, NULL,
                                    &(weir_spawn_opts){.name = "remote_worker", .loop = l2});
    CHECK(rw != NULL);

    intptr_t r;
    CHECK_EQ(weir_task_join(s, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, 7);
    CHECK_EQ(weir_task_join(y, &r, WEIR_FOREVER), 0);
    CHECK_EQ(weir_task_cancel(v), 0);
    CHECK_EQ(weir_task_join(v, &r, WEIR_FOREVER), -ECANCELED);
    CHECK_EQ(r, -ECANCELED);
    CHECK_EQ(weir_task_join(sl, &r, WEIR_FOREVER), 0);
    CHECK_EQ(weir_task_join(rw, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, 11);
    return 0;
}

static void produce_trace(const char *tag)
{
    temp_path(tag);
    CHECK_EQ(setenv("WEIR_TRACE", trace_path, 1), 0);
    atomic_store(&loop2, NULL);
    atomic_store(&stop2, 0);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, loop2_thread, NULL), 0);
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    CHECK(l->trace != NULL);
    weir_task *m = weir_task_spawn(
        traced_main, NULL, &(weir_spawn_opts){.name = "main", .stack_size = 256 << 10, .loop = l});
    CHECK(m != NULL);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK_EQ(weir_task_join(m, NULL, WEIR_FOREVER), 0);
    weir_loop_free(l);
    atomic_store(&stop2, 1);
    CHECK_EQ(pthread_join(th, NULL), 0);
    unsetenv("WEIR_TRACE");
}

TEST(records_lifecycle)
{
    produce_trace("life");
    trace tr;
    trace_read(trace_path, &tr);

    /* Two loops, each LOOP ... END, in the same file. */
    int loops = 0, ends = 0;
    for (size_t i = 0; i < tr.n; i++) {
        loops += tr.r[i].ev == EV_LOOP;
        ends += tr.r[i].ev == EV_END;
    }
    CHECK_EQ(loops, 2);
    CHECK_EQ(ends, 2);

    char ev[64];
    int lmain, lrem;
    rec sp;
    /* sleep: spawn, first poll parks, the timer wakes it, second poll ends */
    task_events(&tr, "sleeper", ev, sizeof(ev), &lmain, &sp);
    CHECK_STR(ev, "SPpWPR");
    const rec *ready = find_ready(&tr, &sp);
    CHECK(ready != NULL);
    CHECK_EQ((int16_t)ready->arg, 7);
    CHECK_GE(ready->t - sp.t, 2 * WEIR_MSEC); /* lifetime covers the sleep */
    /* yields re-queue a running task (no separate wake): four polls */
    task_events(&tr, "yielder", ev, sizeof(ev), NULL, NULL);
    CHECK_STR(ev, "SPpPpPpPR");
    /* cancel: recorded, then the wake and the poll that ends it */
    task_events(&tr, "victim", ev, sizeof(ev), NULL, &sp);
    CHECK_STR(ev, "SPpCWPR");
    CHECK_EQ((int16_t)find_ready(&tr, &sp)->arg, -ECANCELED);
    task_events(&tr, "sl_sleeper", ev, sizeof(ev), NULL, NULL);
    CHECK_STR(ev, "SPpWPpPR");
    /* the task on loop 2 was spawned from loop 1's thread */
    task_events(&tr, "remote_worker", ev, sizeof(ev), &lrem, &sp);
    CHECK_STR(ev, "SPpWPR");
    CHECK_NE(lrem, lmain);
    CHECK(sp.arg & 0x8000);
    /* main was woken from loop 2's thread when remote_worker ended */
    task_events(&tr, "main", ev, sizeof(ev), NULL, &sp);
    int remote_wake = 0;
    for (size_t i = 0; i < tr.n; i++)
        if (tr.r[i].ev == 4 && tr.r[i].v == sp.v && tr.r[i].loop == lmain && tr.r[i].arg == 1)
            remote_wake = 1;
    CHECK(remote_wake);
    free(tr.r);
    unlink(trace_path);
}

static intptr_t quick(void *arg)
{
    (void)arg;
    weir_time_sleep(WEIR_MSEC / 10);
    return 1;
}

TEST(unopenable_path_runs_untraced)
{
    CHECK_EQ(setenv("WEIR_TRACE", "/nonexistent/dir/x.trc", 1), 0);
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    CHECK(l->trace == NULL);
    weir_task *t = weir_task_spawn(quick, NULL, &(weir_spawn_opts){.loop = l});
    CHECK(t != NULL);
    CHECK_EQ(weir_loop_run(l), 0);
    intptr_t r;
    CHECK_EQ(weir_task_join(t, &r, WEIR_FOREVER), 0);
    CHECK_EQ(r, 1);
    weir_loop_free(l);
    unsetenv("WEIR_TRACE");
}

struct many {
    int n;
};

static intptr_t spawner(void *arg)
{
    struct many *m = arg;
    for (int i = 0; i < m->n; i++) {
        weir_task *t = weir_task_spawn(quick, NULL, &(weir_spawn_opts){.name = "quick"});
        CHECK(t != NULL);
        CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    }
    return 0;
}

/* A write that fails mid-run (file size limit) stops tracing for the loop
 * and nothing else. */
TEST(write_failure_disables_tracing)
{
    temp_path("full");
    CHECK_EQ(setenv("WEIR_TRACE", trace_path, 1), 0);
    struct rlimit old, lim;
    CHECK_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 8192; /* the header fits, the first 64 KiB buffer does not */
    void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
    weir_loop *l = weir_loop_new(NULL);
    CHECK(l != NULL);
    CHECK(l->trace != NULL);
    struct many m = {3000}; /* ~6 records a task: several buffers */
    weir_task *t = weir_task_spawn(spawner, &m, &(weir_spawn_opts){.loop = l});
    CHECK(t != NULL);
    CHECK_EQ(weir_loop_run(l), 0);
    CHECK(l->trace == NULL);
    CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    weir_loop_free(l);
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, oldsig);
    unsetenv("WEIR_TRACE");
    unlink(trace_path);
}

/* ---- the tool ------------------------------------------------------------------ */
static char tool[PATH_MAX];

static int find_tool(void)
{
    ssize_t n = readlink("/proc/self/exe", tool, sizeof(tool) - 16);
    if (n <= 0)
        return 0;
    tool[n] = 0;
    char *slash = strrchr(tool, '/');
    if (!slash)
        return 0;
    strcpy(slash + 1, "weir-trace");
    return access(tool, X_OK) == 0;
}

/* Run the tool with stdout to `out` (or /dev/null); its exit status, or
 * 128 + signal if it crashed. */
static int run_tool(const char *opt, const char *file, const char *out)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    char *argv[4] = {tool, (char *)opt, (char *)file, NULL};
    if (!opt) {
        argv[1] = (char *)file;
        argv[2] = NULL;
    }
    pid_t pid;
    CHECK_EQ(posix_spawn(&pid, tool, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK_EQ(fwrite(p, 1, n, f), n);
    CHECK_EQ(fclose(f), 0);
}

static int file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = 0;
    fclose(f);
    return strstr(buf, needle) != NULL;
}

TEST(tool_reads_good_and_rejects_bad)
{
    if (!find_tool()) {
        printf("weir-trace not found beside the test binary; skipped\n");
        return;
    }
    produce_trace("tool");
    char out[PATH_MAX + 8];
    snprintf(out, sizeof(out), "%s.out", trace_path);
    CHECK_EQ(run_tool(NULL, trace_path, out), 0);
    CHECK(file_contains(out, "sleeper"));
    CHECK(file_contains(out, "remote_worker"));
    CHECK_EQ(run_tool("--dump", trace_path, out), 0);
    CHECK(file_contains(out, "READY"));

    /* a valid file cut inside a record */
    FILE *f = fopen(trace_path, "rb");
    CHECK(f != NULL);
    static unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    CHECK_GT(n, 32 + 64);
    char bad[PATH_MAX + 8];
    snprintf(bad, sizeof(bad), "%s.bad", trace_path);
    write_file(bad, buf, n - 5);
    CHECK_EQ(run_tool(NULL, bad, NULL), 1);
    /* not a trace at all */
    write_file(bad, "hello, world\n", 13);
    CHECK_EQ(run_tool(NULL, bad, NULL), 1);
    CHECK_EQ(run_tool("--dump", bad, NULL), 1);
    /* a valid header, then garbage: rejected, never a crash */
    unsigned seed = 12345;
    for (int round = 0; round < 20; round++) {
        size_t len = 32 + 16 * (size_t)(1 + round * 7);
        for (size_t i = 32; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            buf[i] = (unsigned char)(seed >> 16);
        }
        write_file(bad, buf, len);
        int rc = run_tool(round % 2 ? "--dump" : NULL, bad, NULL);
        CHECK(rc == 0 || rc == 1);
    }
    /* garbage shaped like records: NAME lengths past the end */
    memset(buf + 32, 0, 64);
    buf[32 + 4] = 16; /* LOOP */
    buf[48 + 4] = 17; /* TIME */
    buf[64 + 4] = 18; /* NAME, 200 bytes announced, none follow */
    buf[64 + 6] = 200;
    buf[64 + 8] = 1;
    write_file(bad, buf, 32 + 48);
    CHECK_EQ(run_tool(NULL, bad, NULL), 1);
    unlink(bad);
    unlink(out);
    unlink(trace_path);
}

TEST_MAIN()
