/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_trace.c - WEIR_TRACE: the file a traced run leaves behind (events of
 * fibers, stackless tasks, sleeps, yields, a cross-thread wake between two
 * loops sharing the file, a cancel), running untraced when the file cannot
 * be opened or written, and the weir-trace tool on good and bad files, on a
 * multi-threaded runtime whose tasks are stolen between loops, and on a
 * hand-made file whose loops' buffers are out of time order.
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
#include <sys/syscall.h>
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

/* ---- the summary, parsed ---------------------------------------------------------- */
/* A "per task name" line of the summary. */
typedef struct name_row {
    uint64_t tasks, polls, pendings, wakes_loc, wakes_rmt, steals, migrated, cancels, ended;
    double poll_tot_ms, poll_max_us, life_tot_ms;
} name_row;

/* A "per loop" line. thread is -1 for "-". */
typedef struct loop_row {
    int loop, thread;
    uint64_t tid, records, spawns, polls, steals, stolen;
} loop_row;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    size_t cap = 1 << 16, n = 0, got;
    char *b = malloc(cap);
    CHECK(b != NULL);
    while ((got = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            cap *= 2;
            b = realloc(b, cap);
            CHECK(b != NULL);
        }
    }
    fclose(f);
    b[n] = 0;
    return b;
}

/* Find the line of task name `name` in the summary; 0 if absent. */
static int name_row_get(const char *out, const char *name, name_row *r)
{
    size_t n = strlen(name);
    for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, n) != 0 || p[n] != ' ')
            continue;
        int k = sscanf(p + n,
                       " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
                       " %" SCNu64 " %" SCNu64 " %lf %lf %" SCNu64 " %lf",
                       &r->tasks, &r->polls, &r->pendings, &r->wakes_loc, &r->wakes_rmt, &r->steals,
                       &r->migrated, &r->cancels, &r->poll_tot_ms, &r->poll_max_us, &r->ended,
                       &r->life_tot_ms);
        CHECK_EQ(k, 12);
        return 1;
    }
    return 0;
}

/* The per-loop lines, in order; returns how many. */
static int loop_rows_get(const char *out, loop_row *rows, int max)
{
    const char *p = strstr(out, "\nper loop");
    CHECK(p != NULL);
    p = strchr(p + 1, '\n'); /* the column heads */
    CHECK(p != NULL);
    p = strchr(p + 1, '\n');
    CHECK(p != NULL);
    int n = 0;
    for (p++; *p && *p != '\n' && strncmp(p, "steals whose", 12) != 0; p = strchr(p, '\n') + 1) {
        CHECK(n < max);
        loop_row *r = &rows[n++];
        char thr[16];
        int k = sscanf(
            p, "%d %15s %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64,
            &r->loop, thr, &r->tid, &r->records, &r->spawns, &r->polls, &r->steals, &r->stolen);
        CHECK_EQ(k, 8);
        r->thread = strcmp(thr, "-") == 0 ? -1 : atoi(thr);
    }
    return n;
}

/* ---- tasks that move between loops ---------------------------------------------- */
enum { MIG_THREADS = 2, MIG_WAVES = 8, MIG_WAVE = 250 }; /* 2000 tasks of ~20 us */

static void spin_us(int us)
{
    int64_t end = weir_time_now() + (int64_t)us * 1000;
    while (weir_time_now() < end)
        ;
}

static intptr_t mig_fiber(void *arg)
{
    spin_us(20);
    return (intptr_t)arg;
}

struct mig_frame {
    weir_co co;
};

static int mig_sl(void *p, intptr_t *out)
{
    (void)p;
    spin_us(20);
    *out = 1;
    return WEIR_READY;
}

/* Spawns waves that fit one thread's deque, so the idle thread has to
 * steal rather than take them from the injection queue. */
static intptr_t mig_main(void *arg)
{
    (void)arg;
    static struct mig_frame frames[MIG_WAVE];
    weir_task *h[MIG_WAVE];
    for (int w = 0; w < MIG_WAVES; w++) {
        for (int i = 0; i < MIG_WAVE; i++) {
            if (i % 2) {
                frames[i] = (struct mig_frame){0};
                h[i] = weir_task_spawn_stackless(mig_sl, &frames[i],
                                                 &(weir_spawn_opts){.name = "mig_sl"});
            } else {
                h[i] = weir_task_spawn(mig_fiber, (void *)(intptr_t)i,
                                       &(weir_spawn_opts){.name = "mig_fiber"});
            }
            CHECK(h[i] != NULL);
        }
        for (int i = 0; i < MIG_WAVE; i++) {
            intptr_t r;
            CHECK_EQ(weir_task_join(h[i], &r, WEIR_FOREVER), 0);
            CHECK_EQ(r, i % 2 ? 1 : i);
        }
    }
    return 0;
}

static _Atomic int64_t thread_tid[MIG_THREADS];

static intptr_t tid_probe(void *arg)
{
    (void)arg;
    int i = weir_rt_thread_index();
    CHECK(i >= 0 && i < MIG_THREADS);
    atomic_store(&thread_tid[i], (int64_t)syscall(SYS_gettid));
    return 0;
}

/* A 2-thread runtime, traced: the summary must follow every task from the
 * loop that spawned it to the one that stole and ran it. */
TEST(tool_follows_stolen_tasks)
{
    int have_tool = find_tool();
    temp_path("steal");
    CHECK_EQ(setenv("WEIR_TRACE", trace_path, 1), 0);
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = MIG_THREADS});
    CHECK(rt != NULL);
    /* which kernel thread is which scheduler thread (LOOP records name tids) */
    for (int i = 0; i < MIG_THREADS; i++) {
        weir_task *t = weir_task_spawn(
            tid_probe, NULL,
            &(weir_spawn_opts){.name = "tid_probe", .loop = weir_rt_loop(rt, i), .pin = 1});
        CHECK(t != NULL);
        CHECK_EQ(weir_task_join(t, NULL, WEIR_FOREVER), 0);
    }
    weir_task *m = weir_task_spawn(
        mig_main, NULL, &(weir_spawn_opts){.name = "mig_main", .stack_size = 256 << 10, .rt = rt});
    CHECK(m != NULL);
    CHECK_EQ(weir_task_join(m, NULL, weir_time_after_ms(60000)), 0);
    weir_rt_free(rt);
    unsetenv("WEIR_TRACE");

    /* The file itself, read independently of the tool. */
    trace tr;
    trace_read(trace_path, &tr);
    int thread_loop[MIG_THREADS], nloops = 0, ends = 0;
    for (int i = 0; i < MIG_THREADS; i++)
        thread_loop[i] = -1;
    for (size_t i = 0; i < tr.n; i++) {
        const rec *r = &tr.r[i];
        ends += r->ev == EV_END;
        if (r->ev != EV_LOOP)
            continue;
        nloops++;
        for (int k = 0; k < MIG_THREADS; k++)
            if ((uint64_t)atomic_load(&thread_tid[k]) == r->v)
                thread_loop[k] = r->loop;
    }
    CHECK_EQ(nloops, MIG_THREADS);
    CHECK_EQ(ends, MIG_THREADS);
    for (int k = 0; k < MIG_THREADS; k++)
        CHECK(thread_loop[k] >= 0);
    uint64_t steals = 0, spawns_fiber = 0, spawns_sl = 0, polls_on[256] = {0};
    for (size_t i = 0; i < tr.n; i++) {
        const rec *r = &tr.r[i];
        if (r->ev == 1) {
            spawns_fiber += strcmp(spawn_name(&tr, r), "mig_fiber") == 0;
            spawns_sl += strcmp(spawn_name(&tr, r), "mig_sl") == 0;
        } else if (r->ev == 2) {
            polls_on[r->loop]++;
        } else if (r->ev == 7) {
            /* arg: the victim's scheduler-thread index, never the thief's */
            steals++;
            CHECK_LT(r->arg, MIG_THREADS);
            CHECK_NE(thread_loop[r->arg], r->loop);
        }
    }
    CHECK_EQ(spawns_fiber, MIG_WAVES * MIG_WAVE / 2);
    CHECK_EQ(spawns_sl, MIG_WAVES * MIG_WAVE / 2);
    CHECK_GE(steals, 1);
    CHECK_GE(polls_on[thread_loop[0]], 1);
    CHECK_GE(polls_on[thread_loop[1]], 1);
    free(tr.r);

    if (!have_tool) {
        printf("weir-trace not found beside the test binary; tool checks skipped\n");
        unlink(trace_path);
        return;
    }
    char out[PATH_MAX + 8];
    snprintf(out, sizeof(out), "%s.out", trace_path);
    CHECK_EQ(run_tool(NULL, trace_path, out), 0);
    char *sum = slurp(out);
    /* Every task's records were matched to its SPAWN, whichever loop wrote
     * them, and every task was counted once and seen to end. */
    CHECK(strstr(sum, "(no spawn seen)") == NULL);
    name_row f, sl, mm;
    CHECK(name_row_get(sum, "mig_fiber", &f));
    CHECK(name_row_get(sum, "mig_sl", &sl));
    CHECK(name_row_get(sum, "mig_main", &mm));
    CHECK_EQ(f.tasks, MIG_WAVES * MIG_WAVE / 2);
    CHECK_EQ(f.ended, MIG_WAVES * MIG_WAVE / 2);
    CHECK_EQ(sl.tasks, MIG_WAVES * MIG_WAVE / 2);
    CHECK_EQ(sl.ended, MIG_WAVES * MIG_WAVE / 2);
    CHECK_GE(f.polls, f.tasks);
    CHECK_GE(sl.polls, sl.tasks);
    CHECK_EQ(mm.tasks, 1);
    CHECK_EQ(mm.ended, 1);
    CHECK_GT(f.poll_tot_ms + sl.poll_tot_ms, 0.0);
    CHECK_GT(f.life_tot_ms, 0.0);
    /* Stolen tasks ran away from home; each STEAL is charged to its task. */
    CHECK_GE(f.migrated + sl.migrated, 1);
    CHECK_EQ(f.steals + sl.steals + mm.steals, steals);
    /* Per loop: steals by the thief, stolen from the victim. */
    loop_row rows[8];
    int n = loop_rows_get(sum, rows, 8);
    CHECK_EQ(n, MIG_THREADS);
    uint64_t steals_in = 0, stolen = 0;
    for (int i = 0; i < n; i++) {
        steals_in += rows[i].steals;
        stolen += rows[i].stolen;
        /* the inferred scheduler-thread index, when given, is right */
        if (rows[i].thread >= 0) {
            CHECK_LT(rows[i].thread, MIG_THREADS);
            CHECK_EQ(thread_loop[rows[i].thread], rows[i].loop);
        }
    }
    CHECK_EQ(steals_in, steals);
    CHECK_GE(stolen, 1);
    CHECK_LE(stolen, steals);
    free(sum);
    CHECK_EQ(run_tool("--dump", trace_path, out), 0);
    char *dump = slurp(out); /* file_contains reads 64 KiB only */
    CHECK(strstr(dump, "STEAL    task ") && strstr(dump, "  from thread "));
    free(dump);
    unlink(out);
    unlink(trace_path);
}

/* ---- a hand-made file --------------------------------------------------------------- */
static unsigned char *put_rec(unsigned char *p, uint32_t dt, int ev, int loop, unsigned arg,
                              uint64_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(dt >> (8 * i));
    p[4] = (unsigned char)ev;
    p[5] = (unsigned char)loop;
    p[6] = (unsigned char)arg;
    p[7] = (unsigned char)(arg >> 8);
    for (int i = 0; i < 8; i++)
        p[8 + i] = (unsigned char)(v >> (8 * i));
    return p + 16;
}

static unsigned char *put_name(unsigned char *p, int loop, unsigned id, const char *name)
{
    size_t n = strlen(name);
    p = put_rec(p, 0, EV_NAME, loop, (unsigned)n, id);
    size_t padded = (n + 15) / 16 * 16;
    memset(p, 0, padded);
    memcpy(p, name, n);
    return p + padded;
}

/*
 * Loop 0 runs "main", which spawns task X ("alpha") twice in one poll: X is
 * stolen by loop 1 and ends there, and its address is reused by the second
 * spawn, stamped (like every record inside a poll) with the poll's start,
 * before the first X's READY. Loop 1 writes its buffer first, so the file
 * holds the thief's records before the SPAWNs they belong to. Afterwards a
 * stale handle of X is cancelled, and loop 1 runs a task Y whose SPAWN is
 * not in the file. Task Z ("beta") is woken on loop 0, stolen by loop 1 and
 * ends there; loop 0's WAKE carries a late (provisional) stamp, after Z's
 * READY, because loop 0's thread was preempted before its next clock read;
 * then Z's address is reused on loop 0.
 */
TEST(tool_orders_loops_by_time)
{
    if (!find_tool()) {
        printf("weir-trace not found beside the test binary; skipped\n");
        return;
    }
    enum { MS = 1000000 };
    const uint64_t M = 0x1000, X = 0x2000, Y = 0x3000, Z = 0x4000;
    static unsigned char f[4096];
    unsigned char *p = f;
    memset(p, 0, 32);
    memcpy(p, "WEIRTRC1", 8);
    p[8] = 1;                   /* version */
    p[12] = 16;                 /* record size */
    for (int i = 0; i < 8; i++) /* file created at 0.5 ms */
        p[16 + i] = (unsigned char)((uint64_t)(MS / 2) >> (8 * i));
    p[28] = 1; /* clock resolution, ns */
    p += 32;
    /* loop 1, the thief: its one buffer comes first in the file */
    p = put_rec(p, 0, EV_LOOP, 1, 0, 101);
    p = put_rec(p, 0, EV_TIME, 1, 0, 1 * MS);
    p = put_rec(p, MS / 10, 7, 1, 0, X);     /* 1.1 STEAL X from thread 0 */
    p = put_rec(p, 0, 2, 1, 0, X);           /* 1.1 POLL X */
    p = put_rec(p, 9 * MS / 10, 5, 1, 5, X); /* 2.0 READY X */
    p = put_rec(p, MS / 10, 7, 1, 0, X);     /* 2.1 STEAL X (the second) */
    p = put_rec(p, 0, 2, 1, 0, X);           /* 2.1 POLL X */
    p = put_rec(p, 4 * MS / 10, 3, 1, 0, X); /* 2.5 PENDING X */
    p = put_rec(p, MS / 20, 4, 1, 1, X);     /* 2.55 WAKE X from another thread */
    p = put_rec(p, MS / 20, 2, 1, 0, X);     /* 2.6 POLL X */
    p = put_rec(p, 4 * MS / 10, 5, 1, 6, X); /* 3.0 READY X */
    p = put_rec(p, MS / 20, 7, 1, 0, Z);     /* 3.05 STEAL Z */
    p = put_rec(p, 0, 2, 1, 0, Z);           /* 3.05 POLL Z */
    p = put_rec(p, MS / 20, 5, 1, 9, Z);     /* 3.1 READY Z */
    p = put_rec(p, 4 * MS / 10, 2, 1, 0, Y); /* 3.5 POLL Y: no SPAWN anywhere */
    p = put_rec(p, MS / 10, 5, 1, 0, Y);     /* 3.6 READY Y */
    p = put_rec(p, 0, EV_END, 1, 0, 0);
    /* loop 0, the spawner */
    p = put_rec(p, 0, EV_LOOP, 0, 0, 100);
    p = put_rec(p, 0, EV_TIME, 0, 0, 1 * MS);
    p = put_name(p, 0, 1, "main");
    p = put_rec(p, 0, 1, 0, 1, M); /* 1.0 SPAWN main */
    p = put_rec(p, 0, 2, 0, 0, M); /* 1.0 POLL main */
    p = put_name(p, 0, 2, "alpha");
    p = put_rec(p, 0, 1, 0, 2, X); /* 1.0 SPAWN X */
    p = put_rec(p, 0, 1, 0, 2, X); /* 1.0 SPAWN X again: the address reused */
    p = put_name(p, 0, 3, "beta");
    p = put_rec(p, 0, 1, 0, 3, Z);        /* 1.0 SPAWN Z */
    p = put_rec(p, 4 * MS, 3, 0, 0, M);   /* 5.0 PENDING main (provisional) */
    p = put_rec(p, 0, 4, 0, 0, Z);        /* 5.0 WAKE Z, really before 3.05 */
    p = put_rec(p, MS, 2, 0, 0, M);       /* 6.0 POLL main */
    p = put_rec(p, 0, 1, 0, 3, Z);        /* 6.0 SPAWN Z: the address reused */
    p = put_rec(p, 0, 6, 0, 0, X);        /* 6.0 CANCEL X, long ended */
    p = put_rec(p, MS / 10, 5, 0, 0, M);  /* 6.1 READY main */
    p = put_rec(p, MS / 10, 2, 0, 0, Z);  /* 6.2 POLL Z */
    p = put_rec(p, MS / 10, 5, 0, 10, Z); /* 6.3 READY Z */
    p = put_rec(p, 0, EV_END, 0, 0, 0);
    temp_path("order");
    write_file(trace_path, f, (size_t)(p - f));
    char out[PATH_MAX + 8];
    snprintf(out, sizeof(out), "%s.out", trace_path);
    CHECK_EQ(run_tool(NULL, trace_path, out), 0);
    char *sum = slurp(out);
    name_row a, b, m, y;
    CHECK(name_row_get(sum, "alpha", &a));
    CHECK_EQ(a.tasks, 2);
    CHECK_EQ(a.polls, 3);
    CHECK_EQ(a.pendings, 1);
    CHECK_EQ(a.wakes_loc, 0);
    CHECK_EQ(a.wakes_rmt, 1);
    CHECK_EQ(a.steals, 2);
    CHECK_EQ(a.migrated, 2);
    CHECK_EQ(a.cancels, 1);
    CHECK_EQ(a.ended, 2);
    CHECK(a.poll_tot_ms > 1.699 && a.poll_tot_ms < 1.701); /* 0.9 + 0.4 + 0.4 */
    CHECK(a.poll_max_us > 899.9 && a.poll_max_us < 900.1);
    CHECK(a.life_tot_ms > 2.999 && a.life_tot_ms < 3.001); /* 1.0 + 2.0 */
    CHECK(name_row_get(sum, "beta", &b));
    CHECK_EQ(b.tasks, 2);
    CHECK_EQ(b.polls, 2);
    CHECK_EQ(b.wakes_loc, 1); /* the late WAKE: the first Z's */
    CHECK_EQ(b.steals, 1);
    CHECK_EQ(b.migrated, 1);
    CHECK_EQ(b.ended, 2);
    CHECK(b.poll_tot_ms > 0.149 && b.poll_tot_ms < 0.151); /* 0.05 + 0.1 */
    CHECK(b.life_tot_ms > 2.399 && b.life_tot_ms < 2.401); /* 2.1 + 0.3 */
    CHECK(name_row_get(sum, "main", &m));
    CHECK_EQ(m.tasks, 1);
    CHECK_EQ(m.polls, 2);
    CHECK_EQ(m.ended, 1);
    CHECK_EQ(m.migrated, 0);
    CHECK(name_row_get(sum, "(no spawn seen)", &y));
    CHECK_EQ(y.tasks, 1);
    CHECK_EQ(y.polls, 1);
    CHECK_EQ(y.ended, 1);
    loop_row rows[4];
    CHECK_EQ(loop_rows_get(sum, rows, 4), 2);
    /* in the order of their LOOP records: the thief first */
    CHECK_EQ(rows[0].loop, 1);
    CHECK_EQ(rows[0].tid, 101);
    CHECK_EQ(rows[0].steals, 3);
    CHECK_EQ(rows[0].stolen, 0);
    CHECK_EQ(rows[0].thread, -1);
    CHECK_EQ(rows[1].loop, 0);
    CHECK_EQ(rows[1].spawns, 5);
    CHECK_EQ(rows[1].steals, 0);
    CHECK_EQ(rows[1].stolen, 3);
    CHECK_EQ(rows[1].thread, 0);
    CHECK_EQ(run_tool("--dump", trace_path, out), 0);
    CHECK(file_contains(out, "STEAL    task 0x2000  from thread 0"));
    /* The same file through a pipe (the summary reads its input twice, so
     * the tool copies it first): the same summary. */
    int pfd[2];
    CHECK_EQ(pipe(pfd), 0);
    char out2[PATH_MAX + 8];
    snprintf(out2, sizeof(out2), "%s.out2", trace_path);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[0], 0);
    posix_spawn_file_actions_addclose(&fa, pfd[1]);
    posix_spawn_file_actions_addopen(&fa, 1, out2, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char *argv[3] = {tool, "/dev/stdin", NULL};
    pid_t pid;
    CHECK_EQ(posix_spawn(&pid, tool, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[0]);
    CHECK_EQ(write(pfd[1], f, (size_t)(p - f)), p - f); /* < PIPE_BUF: whole */
    close(pfd[1]);
    int stat;
    CHECK_EQ(waitpid(pid, &stat, 0), pid);
    CHECK(WIFEXITED(stat) && WEXITSTATUS(stat) == 0);
    char *sum2 = slurp(out2);
    CHECK(strchr(sum, '\n') && strchr(sum2, '\n'));
    CHECK_STR(strchr(sum2, '\n'), strchr(sum, '\n')); /* all but the line naming the file */
    free(sum2);
    free(sum);
    unlink(out2);
    unlink(out);
    unlink(trace_path);
}

TEST_MAIN()
