/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir-trace - read a WEIR_TRACE file (format: src/rt/trace.c, docs/runtime.md).
 *
 *   weir-trace FILE          summary: per task name, per loop, time span
 *   weir-trace --dump FILE   every record as one line of text, in file order
 *
 * The file is untrusted input: every length is checked against what is left,
 * every id against its table, and the first malformed byte ends the run with
 * a message naming the offset and what was wrong (exit 1).
 *
 * Tasks move between loops. In a multi-threaded runtime a task may be
 * SPAWNed on loop A, STEALen and POLLed on loop B, woken from loop C and end
 * on B; task ids (addresses) are reused at once, often by another loop. So
 * the summary keys task state by task id across all loops, and must see each
 * task's records in the order they happened. The file does not give that
 * order directly: each loop's records are in time order, but a loop writes a
 * whole 64 KiB buffer at a time, so loops interleave only at buffer
 * boundaries and a buffer may hold seconds of one loop's history written
 * after other loops' later records. Hence two passes:
 *
 *   1. Scan the file in order: validate every record (the checks above, and
 *      per loop: LOOP before anything else, TIME before any delta, time never
 *      going backwards) and index each loop instance's records as a list of
 *      runs (file offset, length). A LOOP record starts a new instance even
 *      when it reuses a loop index. The index costs 16 bytes per run, about
 *      one per buffer written.
 *   2. Merge the instances' record streams (each read through its own small
 *      buffer with pread) by absolute time, smallest first, and apply each
 *      task record to the task's state.
 *
 * A time merge is still not causal order, because of how the writer stamps
 * records. SPAWN, WAKE and CANCEL inside a poll carry the poll's *start*
 * (loop A spawns X 50 us into a poll stamped 0, while loop B's READY of the
 * task that had X's address before is stamped 40 us). A provisional
 * PENDING/READY, and whatever follows it outside a poll (the joiner's WAKE,
 * a STEAL), carries the next poll's clock read, which is late by however
 * long the thread was preempted in between. With WEIR_TRACE_CLOCK=coarse,
 * thousands of records of different loops share one stamp. So:
 *
 *   - A PENDING/READY ends the poll its own loop began last: it is charged
 *     to whatever task that POLL was charged to, whatever happened to the id
 *     elsewhere since. Poll times are always one loop's clock differences,
 *     and a task is counted as ended once per poll that ended it.
 *   - A stream whose next record contradicts what is known waits ("is
 *     blocked") until a record of another stream about the same task comes.
 *     Hard waits are for what must be true of any task: a SPAWN of X waits
 *     while the task that had X before is alive (its READY, on another loop,
 *     is stamped later: the address was reused); any other record of an X
 *     never seen waits for its SPAWN; a POLL of X waits while X is in a poll
 *     on another loop; a record of X on the loop where X's last READY was,
 *     after it, is the next task's and waits for its SPAWN.
 *   - Soft waits are for what is only likely, and last until the merge has
 *     moved one clock tick past the record: a record of an ended X on
 *     another loop stamped no earlier than X's READY (the next task's,
 *     merged before its SPAWN; or X's own, stamped late), and a SPAWN of X
 *     while the live X was spawned on another loop with a later stamp (then
 *     that one is the later task, merged too early). When a soft wait
 *     expires the record is applied anyway: to the ended task, or a SPAWN
 *     starts its task. Records of an ended X stamped before its READY, and
 *     a CANCEL of a stale handle (the one record that may follow a READY),
 *     go to the ended task at once: ended tasks are remembered for
 *     DEAD_KEEP_NS for this.
 *   - A coarse stamp t means "in [t, t + tick)": the records of one loop
 *     stamped t are spread evenly over the tick for the merge, so that loops
 *     interleave within a tick instead of one loop's whole tick going first.
 *
 * When every stream with records left waits (a damaged or partial trace: a
 * SPAWN never written, a task spawned before tracing began), the earliest
 * soft wait, else the earliest record, goes ahead anyway: an unknown task is
 * counted under "(no spawn seen)", a SPAWN over a live task replaces it (the
 * old one counts as never ended), a second loop's POLL of a task in a poll
 * takes it over. With the fine clock the summary of an intact trace comes
 * out exact in practice (each task counted once, under its name, ended
 * once; checked on runs of up to 8 threads on 2 cores). With the
 * coarse clock, when task memory is reused within one tick (the task cache
 * does that in a spawn-heavy program), records may be charged to the wrong
 * one of the tasks that shared an address, and so to the wrong name.
 *
 * Steals. A STEAL record is written by the thief's loop; its arg is the
 * victim's scheduler-thread index in its runtime (weir_rt_thread_index()),
 * which the file does not map to loop indices. The summary infers the map:
 * when a task stolen by T was last seen being SPAWNed or woken on loop V
 * (so V had put it on its deque), that is a vote for "V is thread <arg>" and
 * ties V and T to one runtime. Each loop's thread is its most voted index;
 * each thief's steals from thread i are then credited to the loop of its
 * runtime that is thread i ("stolen"), and counted as unattributed when no
 * loop, or more than one, qualifies.
 *
 * Memory: the run index, a 4 KiB reader per loop alive at once, and the
 * tasks alive at once (plus those ended in the last DEAD_KEEP_NS). Input that
 * cannot be read twice (a pipe) is first copied to a temporary file.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REC          16
#define HDR          32
#define NAME_MAX_    255
#define NAME_IDS     0x8000
#define NLOOPS       256
#define NTHREADS     256 /* scheduler-thread indices a STEAL can name */
#define READ_BUF     4096
#define DEAD_KEEP_NS INT64_C(1000000000)

enum {
    EV_SPAWN = 1,
    EV_POLL,
    EV_PENDING,
    EV_WAKE,
    EV_READY,
    EV_CANCEL,
    EV_STEAL,
    EV_LOOP = 16,
    EV_TIME,
    EV_NAME,
    EV_END,
};

static const char *ev_name(int ev)
{
    static const char *lo[] = {NULL,   "SPAWN", "POLL",   "PENDING",
                               "WAKE", "READY", "CANCEL", "STEAL"};
    static const char *hi[] = {"LOOP", "TIME", "NAME", "END"};
    if (ev >= 1 && ev <= 7)
        return lo[ev];
    if (ev >= 16 && ev <= 19)
        return hi[ev - 16];
    return NULL;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q && n) {
        fprintf(stderr, "weir-trace: out of memory\n");
        exit(1);
    }
    return q;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (!p) {
        fprintf(stderr, "weir-trace: out of memory\n");
        exit(1);
    }
    return p;
}

/* ---- input ---------------------------------------------------------------------- */
static FILE *in;
static int in_fd; /* what pass 2 preads: the file, or a copy of a pipe */
static const char *path;
static uint64_t off; /* pass 1: file offset of the next unread byte */
static int dump;
static int64_t t0; /* header clock */

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

__attribute__((noreturn, format(printf, 1, 2))) static void bad(const char *fmt, ...);
static void bad(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "weir-trace: %s: ", path);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* Read exactly one record; 0 at a clean end of file. */
static int read_rec(unsigned char *r, const char *what)
{
    size_t n = fread(r, 1, REC, in);
    if (n == 0 && feof(in))
        return 0;
    if (n != REC) {
        if (ferror(in))
            bad("read error at offset %" PRIu64 ": %s", off, strerror(errno));
        bad("truncated %s at offset %" PRIu64 " (%zu of %d bytes)", what, off, n, REC);
    }
    off += REC;
    return 1;
}

static double ms(int64_t ns)
{
    return (double)ns / 1e6;
}

/* ---- task names ------------------------------------------------------------------- */
typedef struct agg {
    char *name;
    uint64_t tasks, polls, pendings, wakes_local, wakes_remote, steals, migrated, cancels, ended;
    int64_t poll_total, poll_max, life_total;
} agg;

static agg *aggs;
static size_t naggs, cap_aggs;

static int agg_find(const char *name)
{
    for (size_t i = 0; i < naggs; i++)
        if (strcmp(aggs[i].name, name) == 0)
            return (int)i;
    if (naggs == cap_aggs) {
        cap_aggs = cap_aggs ? cap_aggs * 2 : 16;
        aggs = xrealloc(aggs, cap_aggs * sizeof(*aggs));
    }
    memset(&aggs[naggs], 0, sizeof(aggs[0]));
    aggs[naggs].name = xrealloc(NULL, strlen(name) + 1);
    strcpy(aggs[naggs].name, name);
    return (int)naggs++;
}

/* A NAME record's payload: arg bytes in ceil(arg / 16) records from `next`. */
static void read_name(unsigned arg, char *name, int (*next)(void *, unsigned char *), void *ctx,
                      uint64_t at)
{
    unsigned char pr[REC];
    for (unsigned k = 0; k < arg; k += REC) {
        if (!next(ctx, pr))
            bad("truncated NAME payload after offset %" PRIu64, at);
        memcpy(name + k, pr, arg - k < REC ? arg - k : REC);
    }
    name[arg] = 0;
    for (unsigned k = 0; k < arg; k++)
        if (name[k] == 0 || (unsigned char)name[k] < 0x20)
            name[k] = '?'; /* keep the output one line per record */
}

/* ---- loop instances ------------------------------------------------------------ */
typedef struct run {
    uint64_t off, len;
} run;

typedef struct argcount {
    unsigned arg;
    uint64_t n;
} argcount;

typedef struct stream {
    int idx; /* loop index in the records */
    uint64_t tid;
    /* pass 1 */
    run *runs;
    size_t nruns, cap_runs;
    int64_t start; /* its first TIME (INT64_MIN if none) */
    /* pass 2 */
    struct cursor *c; /* reader, while loaded */
    int loaded, done;
    /* the next task record (events 1..7); key: its time for the merge */
    int h_ev;
    unsigned h_arg;
    uint64_t h_task, h_off;
    int64_t key;
    /* the poll in progress on this loop: which task (and which of the tasks
     * that had that id: serial), charged to which name, since when */
    int p_valid, p_agg;
    uint64_t p_id;
    uint32_t p_serial;
    int64_t p_spawn_at, p_at;
    int64_t tick_t;          /* coarse clock: records stamped tick_t, the head is */
    uint64_t tick_j, tick_n; /* the tick_j-th of tick_n */
    int blocked;             /* 0, or what it waits for: WAIT_HARD or WAIT_SOFT */
    /* pass 2: totals */
    int timed, ended;
    int64_t now, first, last;
    uint64_t records, spawns, polls, wakes_remote, cancels, steals, stolen;
    int64_t busy;  /* total poll time */
    int *name_agg; /* name id -> agg index (+1; 0 = unknown) */
    /* steals: who the victims were */
    uint32_t *votes; /* [NTHREADS]: "this loop is thread i" */
    argcount *sargs; /* this loop's STEAL records by arg */
    size_t nsargs;
    int parent; /* union-find: loops of one runtime */
    int thread; /* inferred scheduler-thread index, or -1 */
} stream;

static stream *st;
static size_t nst, cap_st;

/* ---- pass 1: validate, index (or print) ------------------------------------------ */
static struct p1 {
    int inst; /* stream of this loop index, -1 before its LOOP */
    int timed;
    int64_t now;
    int *name_agg; /* --dump: names per id */
} p1[NLOOPS];

static int pass1_next(void *ctx, unsigned char *r)
{
    (void)ctx;
    return read_rec(r, "NAME payload");
}

static uint64_t pass1(void)
{
    uint64_t records = 0;
    unsigned char r[REC];
    char name[NAME_MAX_ + 1];
    for (int i = 0; i < NLOOPS; i++)
        p1[i].inst = -1;
    for (;;) {
        uint64_t at = off;
        if (!read_rec(r, "record"))
            break;
        records++;
        uint32_t dt = get32(r);
        int ev = r[4], li = r[5];
        unsigned arg = (unsigned)r[6] | (unsigned)r[7] << 8;
        uint64_t v = get64(r + 8);
        struct p1 *L = &p1[li];
        if (!ev_name(ev))
            bad("unknown event %d in the record at offset %" PRIu64, ev, at);
        if (ev == EV_LOOP) {
            if (nst == cap_st) {
                cap_st = cap_st ? cap_st * 2 : 16;
                st = xrealloc(st, cap_st * sizeof(*st));
            }
            stream *s = &st[nst];
            memset(s, 0, sizeof(*s));
            s->idx = li;
            s->tid = v;
            s->start = INT64_MIN;
            s->parent = (int)nst;
            s->thread = -1;
            L->inst = (int)nst++;
            L->timed = 0;
            L->now = 0;
            if (L->name_agg)
                memset(L->name_agg, 0, NAME_IDS * sizeof(int));
        } else if (L->inst < 0) {
            bad("record for loop %d before its LOOP record at offset %" PRIu64, li, at);
        }
        if (ev == EV_TIME) {
            if (v > INT64_MAX)
                bad("TIME out of range at offset %" PRIu64, at);
            if (L->timed && (int64_t)v < L->now)
                bad("time goes backwards on loop %d at offset %" PRIu64, li, at);
            L->now = (int64_t)v;
            if (!L->timed && st[L->inst].start == INT64_MIN)
                st[L->inst].start = L->now;
            L->timed = 1;
        } else {
            if (!L->timed && ev != EV_LOOP)
                bad("record for loop %d before its first TIME at offset %" PRIu64, li, at);
            if (L->now > INT64_MAX - (int64_t)dt)
                bad("time out of range on loop %d at offset %" PRIu64, li, at);
            L->now += dt;
        }
        uint64_t len = REC;
        if (ev == EV_NAME) {
            if (arg < 1 || arg > NAME_MAX_)
                bad("NAME length %u out of range 1..%d at offset %" PRIu64, arg, NAME_MAX_, at);
            if (v < 1 || v >= NAME_IDS)
                bad("NAME id %" PRIu64 " out of range at offset %" PRIu64, v, at);
            read_name(arg, name, pass1_next, NULL, at);
            len += (arg + REC - 1) / REC * REC;
            if (dump) {
                if (!L->name_agg)
                    L->name_agg = xcalloc(NAME_IDS, sizeof(int));
                L->name_agg[v] = agg_find(name) + 1;
            }
        }
        if (!dump) {
            stream *s = &st[L->inst];
            if (s->nruns && s->runs[s->nruns - 1].off + s->runs[s->nruns - 1].len == at) {
                s->runs[s->nruns - 1].len += len;
            } else {
                if (s->nruns == s->cap_runs) {
                    s->cap_runs = s->cap_runs ? s->cap_runs * 2 : 4;
                    s->runs = xrealloc(s->runs, s->cap_runs * sizeof(*s->runs));
                }
                s->runs[s->nruns++] = (run){at, len};
            }
            continue;
        }
        if (L->timed)
            printf("%12.6f ms  loop %3d  %-7s", ms(L->now - t0), li, ev_name(ev));
        else /* LOOP comes before the loop's first TIME */
            printf("%15s  loop %3d  %-7s", "", li, ev_name(ev));
        switch (ev) {
        case EV_SPAWN:
            printf("  task %#" PRIx64 "  name %u%s", v, arg & 0x7fff,
                   arg & 0x8000 ? " (remote)" : "");
            if (L->name_agg && L->name_agg[arg & 0x7fff])
                printf(" \"%s\"", aggs[L->name_agg[arg & 0x7fff] - 1].name);
            break;
        case EV_WAKE:
            printf("  task %#" PRIx64 "%s", v, arg ? "  (remote)" : "");
            break;
        case EV_READY:
            printf("  task %#" PRIx64 "  result %d", v, (int16_t)arg);
            break;
        case EV_STEAL:
            printf("  task %#" PRIx64 "  from thread %u", v, arg);
            break;
        case EV_LOOP:
            printf("  tid %" PRIu64, v);
            break;
        case EV_TIME:
            printf("  %" PRIu64 " ns", v);
            break;
        case EV_NAME:
            printf("  id %" PRIu64 "  \"%s\"", v, name);
            break;
        case EV_END:
            break;
        default:
            printf("  task %#" PRIx64, v);
        }
        putchar('\n');
    }
    return records;
}

/* ---- pass 2: reading one stream ------------------------------------------------------ */
typedef struct cursor {
    const run *runs;
    size_t nruns, run_i;
    uint64_t run_off, run_left; /* the part of runs[run_i - 1] not yet read */
    uint64_t buf_off;           /* file offset of buf[0] */
    size_t buf_pos, buf_len;
    unsigned char buf[READ_BUF];
} cursor;

static int cursor_next(void *ctx, unsigned char *r)
{
    cursor *c = ctx;
    while (c->buf_pos == c->buf_len) {
        if (c->run_left == 0) {
            if (c->run_i == c->nruns)
                return 0;
            c->run_off = c->runs[c->run_i].off;
            c->run_left = c->runs[c->run_i].len;
            c->run_i++;
        }
        size_t n = c->run_left < READ_BUF ? (size_t)c->run_left : READ_BUF;
        ssize_t got;
        do
            got = pread(in_fd, c->buf, n, (off_t)c->run_off);
        while (got < 0 && errno == EINTR);
        if (got != (ssize_t)n)
            bad("read error at offset %" PRIu64 " on the second pass: %s", c->run_off,
                got < 0 ? strerror(errno) : "the file shrank");
        c->buf_off = c->run_off;
        c->run_off += n;
        c->run_left -= n;
        c->buf_pos = 0;
        c->buf_len = n;
    }
    memcpy(r, c->buf + c->buf_pos, REC);
    c->buf_pos += REC;
    return 1;
}

/* Clock resolution when coarser than 1 ns, else 0. */
static int64_t tick_res;

/* How many task records, from the head on, share the head's stamp. */
static uint64_t tick_count(const stream *s)
{
    static cursor sc;
    sc = *s->c;
    int64_t now = s->now;
    uint64_t n = 1;
    unsigned char r[REC];
    while (cursor_next(&sc, r)) {
        int ev = r[4];
        if (ev == EV_TIME)
            now = (int64_t)get64(r + 8);
        else
            now += get32(r);
        if (now != s->now || ev == EV_END)
            break;
        if (ev == EV_NAME) {
            unsigned arg = (unsigned)r[6] | (unsigned)r[7] << 8;
            for (unsigned k = 0; k < arg; k += REC)
                if (!cursor_next(&sc, r))
                    return n;
        } else if (ev < EV_LOOP) {
            n++;
        }
    }
    return n;
}

/* The head's key. A coarse stamp t means "in [t, t + tick)": spread the
 * records stamped t evenly over the tick, so that the merge interleaves
 * loops within a tick instead of taking one loop's whole tick first. */
static void head_key(stream *s)
{
    if (!tick_res) {
        s->key = s->now;
        return;
    }
    if (s->tick_n == 0 || s->now != s->tick_t) {
        s->tick_t = s->now;
        s->tick_j = 0;
        s->tick_n = tick_count(s);
    } else if (s->tick_j + 1 < s->tick_n) {
        s->tick_j++;
    }
    s->key = s->now + (int64_t)((double)tick_res * (double)s->tick_j / (double)s->tick_n);
}

/* Consume records up to the next task record (which becomes the head).
 * 0 when the stream has no more. */
static int stream_advance(stream *s)
{
    unsigned char r[REC];
    char name[NAME_MAX_ + 1];
    for (;;) {
        if (!cursor_next(s->c, r))
            return 0;
        uint64_t at = s->c->buf_off + s->c->buf_pos - REC;
        int ev = r[4];
        unsigned arg = (unsigned)r[6] | (unsigned)r[7] << 8;
        uint64_t v = get64(r + 8);
        s->records++;
        if (ev == EV_TIME) {
            s->now = (int64_t)v;
            if (!s->timed)
                s->first = s->now;
            s->timed = 1;
        } else {
            s->now += get32(r);
        }
        s->last = s->now;
        switch (ev) {
        case EV_LOOP:
        case EV_TIME:
            break;
        case EV_END:
            s->ended = 1;
            break;
        case EV_NAME:
            read_name(arg, name, cursor_next, s->c, at);
            if (!s->name_agg)
                s->name_agg = xcalloc(NAME_IDS, sizeof(int));
            s->name_agg[v] = agg_find(name) + 1;
            break;
        default:
            s->h_ev = ev;
            s->h_arg = arg;
            s->h_task = v;
            s->h_off = at;
            head_key(s);
            return 1;
        }
    }
}

static void stream_load(stream *s)
{
    s->loaded = 1;
    s->c = xcalloc(1, sizeof(*s->c));
    s->c->runs = s->runs;
    s->c->nruns = s->nruns;
    if (!stream_advance(s))
        s->done = 1;
}

static void stream_retire(stream *s)
{
    s->done = 1;
    free(s->c);
    s->c = NULL;
    free(s->name_agg);
    s->name_agg = NULL;
    free(s->runs);
    s->runs = NULL;
}

/* ---- pass 2: the merge ---------------------------------------------------------------- */
/* Order: time of the next record (an unloaded stream: its first TIME), then
 * file offset. */
static int64_t skey_t(const stream *s)
{
    return s->loaded ? s->key : s->start;
}

static uint64_t skey_off(const stream *s)
{
    return s->loaded ? s->h_off : s->nruns ? s->runs[0].off : 0;
}

static int before(int a, int b)
{
    int64_t ta = skey_t(&st[a]), tb = skey_t(&st[b]);
    if (ta != tb)
        return ta < tb;
    return skey_off(&st[a]) < skey_off(&st[b]);
}

static int *heap;
static size_t nheap;

static void heap_push(int s)
{
    size_t i = nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(s, heap[p]))
            break;
        heap[i] = heap[p];
        i = p;
    }
    heap[i] = s;
}

static int heap_pop(void)
{
    if (!nheap)
        return -1;
    int top = heap[0], x = heap[--nheap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= nheap)
            break;
        if (c + 1 < nheap && before(heap[c + 1], heap[c]))
            c++;
        if (!before(heap[c], x))
            break;
        heap[i] = heap[c];
        i = c;
    }
    if (nheap)
        heap[i] = x;
    return top;
}

/* Streams waiting for another stream's record about their head's task;
 * nsoft of them wait softly, for at most soft_wait ns past their stamp. */
static int *blocked;
static size_t nblocked, nsoft;
static int64_t soft_wait;

/* ---- pass 2: task state, by task id across loops ----------------------------------- */
typedef struct task {
    uint64_t id;     /* 0 = empty slot */
    uint32_t serial; /* counts the tasks that had this id */
    int alive;       /* spawned (or first seen) and no READY yet */
    int agg;
    int poll_loop; /* stream polling it, or -1 */
    int home;      /* stream that spawned it (or first polled it), or -1 */
    int last_loop, last_ev;
    int migrated;
    int64_t spawn_at, spawn_key; /* spawn_at < 0: unknown */
    int64_t dead_at, dead_key;   /* its READY's time, merge key and stream, when !alive */
    int dead_loop;
} task;

static task *tab;
static size_t tab_mask, tab_used;
static int64_t merged_now; /* latest time processed */

static size_t slot_of(uint64_t id)
{
    return (size_t)((id * UINT64_C(0x9E3779B97F4A7C15)) >> 20);
}

static task *task_find(uint64_t id)
{
    if (!tab)
        return NULL;
    for (size_t j = slot_of(id);; j++) {
        task *e = &tab[j & tab_mask];
        if (e->id == id)
            return e;
        if (!e->id)
            return NULL;
    }
}

/* Rebuild with room to spare, dropping tasks that ended long ago. */
static void tab_rebuild(void)
{
    size_t keep = 0;
    for (size_t i = 0; tab && i <= tab_mask; i++)
        if (tab[i].id && (tab[i].alive || tab[i].dead_at >= merged_now - DEAD_KEEP_NS))
            keep++;
    size_t cap = 1024;
    while (cap < 4 * (keep + 1))
        cap *= 2;
    task *nt = xcalloc(cap, sizeof(*nt));
    size_t used = 0;
    for (size_t i = 0; tab && i <= tab_mask; i++) {
        if (!tab[i].id || !(tab[i].alive || tab[i].dead_at >= merged_now - DEAD_KEEP_NS))
            continue;
        size_t j = slot_of(tab[i].id);
        while (nt[j & (cap - 1)].id)
            j++;
        nt[j & (cap - 1)] = tab[i];
        used++;
    }
    free(tab);
    tab = nt;
    tab_mask = cap - 1;
    tab_used = used;
}

static task *task_add(uint64_t id)
{
    if ((tab_used + 1) * 2 > tab_mask + 1 || !tab)
        tab_rebuild();
    size_t j = slot_of(id);
    while (tab[j & tab_mask].id)
        j++;
    task *e = &tab[j & tab_mask];
    memset(e, 0, sizeof(*e));
    e->id = id;
    tab_used++;
    return e;
}

/* A new task with id `id` (reusing the entry of an ended one). */
static task *task_begin(task *e, uint64_t id, int agg, int64_t spawn_at, int home)
{
    if (!e)
        e = task_add(id);
    e->serial++;
    e->alive = 1;
    e->agg = agg;
    e->spawn_at = spawn_at;
    e->poll_loop = -1;
    e->home = home;
    e->last_loop = -1;
    e->last_ev = 0;
    e->migrated = 0;
    aggs[agg].tasks++;
    return e;
}

static int uf_find(int a)
{
    while (st[a].parent != a)
        a = st[a].parent = st[st[a].parent].parent;
    return a;
}

/* A STEAL by stream si of task e: count it by arg, and vote on which loop
 * is thread `arg` (see the top). */
static void steal_seen(stream *s, int si, task *e, unsigned arg)
{
    size_t k = 0;
    while (k < s->nsargs && s->sargs[k].arg != arg)
        k++;
    if (k == s->nsargs) {
        s->sargs = xrealloc(s->sargs, (s->nsargs + 1) * sizeof(*s->sargs));
        s->sargs[s->nsargs++] = (argcount){arg, 0};
    }
    s->sargs[k].n++;
    /* Last SPAWNed or woken on another loop: that loop had it on its deque. */
    if (arg < NTHREADS && e->last_loop >= 0 && e->last_loop != si &&
        (e->last_ev == EV_SPAWN || e->last_ev == EV_WAKE)) {
        stream *v = &st[e->last_loop];
        if (!v->votes)
            v->votes = xcalloc(NTHREADS, sizeof(*v->votes));
        v->votes[arg]++;
        int a = uf_find(si), b = uf_find(e->last_loop);
        if (a != b)
            st[a].parent = b; /* one runtime */
    }
}

/* What apply() says about a record. */
enum { APPLIED, WAIT_HARD, WAIT_SOFT }; /* also stream.blocked */

/* A record of stream si about task e, which has ended (its READY was
 * applied): is it e's own, applied late because the merge could not tell
 * the order (a tie, an early in-poll stamp, a late provisional one), or the
 * next task's with e's id, whose SPAWN is yet to come? 1: e's, 0: the next
 * task's, -1: cannot tell. */
static int ended_task_record(const task *e, int si, int ev, int64_t key)
{
    if (ev == EV_CANCEL)
        return 1; /* a stale handle cancelled after the end: the one record allowed */
    if (ev == EV_PENDING && e->poll_loop == si)
        return 1; /* ends a poll already charged to e */
    if (ev == EV_READY || si == e->dead_loop)
        return 0; /* a task ends once; a loop's own records are in order */
    /* A stamp before the READY's cannot be the next task's, unless an
     * in-poll record stamped with a poll that began before the end (rare:
     * the next task must be spawned and woken within that poll). */
    return key < e->dead_key ? 1 : -1;
}

/* Apply stream si's head record, or say what it waits for (another
 * stream's record about the same task). With `force` it is applied anyway:
 * a soft wait as a record of the ended task, a hard one as the old
 * per-loop reading did. */
static int apply(int si, int force)
{
    stream *s = &st[si];
    int ev = s->h_ev;
    unsigned arg = s->h_arg;
    uint64_t id = s->h_task;
    int64_t now = s->now;
    task *e = task_find(id);
    int alive = e && e->alive;

    if ((ev == EV_PENDING || ev == EV_READY) && s->p_valid && s->p_id == id) {
        /* The end of this loop's poll: the task that poll was charged to,
         * whatever happened to its id elsewhere since. */
        agg *g = &aggs[s->p_agg];
        int64_t d = now - s->p_at;
        g->poll_total += d;
        s->busy += d;
        if (d > g->poll_max)
            g->poll_max = d;
        s->p_valid = 0;
        int same = e && e->serial == s->p_serial;
        if (same && e->poll_loop == si)
            e->poll_loop = -1;
        if (ev == EV_PENDING) {
            g->pendings++;
        } else {
            g->ended++;
            if (s->p_spawn_at >= 0)
                g->life_total += now - s->p_spawn_at;
            if (same && e->alive) {
                e->alive = 0;
                e->dead_at = now;
                e->dead_key = s->key;
                e->dead_loop = si;
            }
        }
        if (same) {
            e->last_loop = si;
            e->last_ev = ev;
        }
        return APPLIED;
    }

    if (ev == EV_SPAWN) {
        /* The task that had this id before has not ended yet: its READY is
         * to come, unless that task is in fact a later one, spawned on
         * another loop and merged too early (a later stamp says so). */
        if (alive && !force)
            return e->home != si && e->spawn_key > s->key ? WAIT_SOFT : WAIT_HARD;
        unsigned nid = arg & 0x7fff;
        int a = s->name_agg && s->name_agg[nid] ? s->name_agg[nid] - 1 : agg_find("(unnamed)");
        e = task_begin(e, id, a, now, si);
        e->spawn_key = s->key;
        s->spawns++;
    } else if (!e) {
        if (!force)
            return WAIT_HARD; /* its SPAWN is yet to come */
        /* spawned before the trace began, or its SPAWN was lost */
        e = task_begin(NULL, id, agg_find("(no spawn seen)"), -1, -1);
    } else if (!alive) {
        int own = ended_task_record(e, si, ev, s->key);
        if (own == 0 && !force)
            return WAIT_HARD;
        if (own < 0 && !force)
            return WAIT_SOFT;
        if (own == 0) /* the next task's, and its SPAWN is not in the file */
            e = task_begin(e, id, agg_find("(no spawn seen)"), -1, -1);
    }

    agg *g = &aggs[e->agg];
    switch (ev) {
    case EV_POLL:
        if (e->poll_loop >= 0 && e->poll_loop != si && !force)
            return WAIT_HARD; /* still in its poll on another loop */
        g->polls++;
        s->polls++;
        e->poll_loop = si;
        s->p_valid = 1;
        s->p_id = id;
        s->p_serial = e->serial;
        s->p_agg = e->agg;
        s->p_spawn_at = e->spawn_at;
        s->p_at = now;
        if (e->home < 0) {
            e->home = si;
        } else if (e->home != si && !e->migrated) {
            e->migrated = 1;
            g->migrated++;
        }
        break;
    case EV_PENDING:
    case EV_READY:
        /* not the end of a poll seen on this loop (its POLL is missing) */
        if (e->poll_loop == si)
            e->poll_loop = -1;
        if (ev == EV_PENDING) {
            g->pendings++;
        } else {
            g->ended++;
            if (e->spawn_at >= 0)
                g->life_total += now - e->spawn_at;
            e->alive = 0;
            e->dead_at = now;
            e->dead_key = s->key;
            e->dead_loop = si;
        }
        break;
    case EV_WAKE:
        if (arg) {
            g->wakes_remote++;
            s->wakes_remote++;
        } else {
            g->wakes_local++;
        }
        break;
    case EV_CANCEL:
        g->cancels++;
        s->cancels++;
        break;
    case EV_STEAL:
        g->steals++;
        s->steals++;
        steal_seen(s, si, e, arg);
        break;
    }
    e->last_loop = si;
    e->last_ev = ev;
    return APPLIED;
}

static void merge(void)
{
    heap = xrealloc(NULL, (nst + 1) * sizeof(*heap));
    blocked = xrealloc(NULL, (nst + 1) * sizeof(*blocked));
    for (size_t i = 0; i < nst; i++)
        heap_push((int)i);
    for (;;) {
        int force = 0, si = -1;
        /* A soft wait lasts until the merge has moved past the record's
         * clock tick: the next task's SPAWN, if that is what it is, has a
         * stamp no later (see the top). */
        for (size_t k = 0; nsoft && nheap && k < nblocked; k++) {
            int b = blocked[k];
            if (st[b].blocked == WAIT_SOFT && skey_t(&st[heap[0]]) - st[b].key >= soft_wait) {
                si = b;
                blocked[k] = blocked[--nblocked];
                break;
            }
        }
        if (si < 0)
            si = heap_pop();
        else
            force = 1;
        if (si < 0) {
            if (!nblocked)
                break;
            /* Everything left waits (see the top): the earliest soft wait
             * goes ahead, else the earliest of all. */
            size_t m = 0;
            for (size_t k = 1; k < nblocked; k++) {
                int sk = st[blocked[k]].blocked == WAIT_SOFT,
                    sm = st[blocked[m]].blocked == WAIT_SOFT;
                if (sk > sm || (sk == sm && before(blocked[k], blocked[m])))
                    m = k;
            }
            si = blocked[m];
            blocked[m] = blocked[--nblocked];
            force = 1;
        }
        if (st[si].blocked == WAIT_SOFT)
            nsoft--;
        st[si].blocked = 0;
        stream *s = &st[si];
        if (!s->loaded) {
            stream_load(s);
            if (s->done)
                stream_retire(s);
            else
                heap_push(si);
            continue;
        }
        int r = apply(si, force);
        if (r != APPLIED) {
            s->blocked = r;
            nsoft += r == WAIT_SOFT;
            blocked[nblocked++] = si;
            continue;
        }
        if (s->now > merged_now)
            merged_now = s->now;
        uint64_t id = s->h_task;
        if (stream_advance(s))
            heap_push(si);
        else
            stream_retire(s);
        /* Whoever waited on this task may go on now. */
        for (size_t k = 0; k < nblocked;) {
            if (st[blocked[k]].h_task == id) {
                nsoft -= st[blocked[k]].blocked == WAIT_SOFT;
                st[blocked[k]].blocked = 0;
                heap_push(blocked[k]);
                blocked[k] = blocked[--nblocked];
            } else {
                k++;
            }
        }
    }
}

/* ---- pass 2: who was stolen from ------------------------------------------------------ */

/* (runtime, thread index) -> stream, -2 when ambiguous, -1 when absent */
typedef struct tslot {
    int root, thread, stream;
} tslot;

static uint64_t resolve_victims(void)
{
    size_t cap = 16;
    while (cap < 2 * (nst + 1))
        cap *= 2;
    tslot *m = xcalloc(cap, sizeof(*m));
    for (size_t i = 0; i < cap; i++)
        m[i].root = -1;
    for (size_t i = 0; i < nst; i++) {
        stream *s = &st[i];
        if (!s->votes)
            continue;
        uint32_t best = 0;
        for (int k = 0; k < NTHREADS; k++)
            if (s->votes[k] > best) {
                best = s->votes[k];
                s->thread = k;
            }
        free(s->votes);
        s->votes = NULL;
        int root = uf_find((int)i);
        size_t j = ((size_t)root * 31 + (size_t)s->thread) & (cap - 1);
        while (m[j].root >= 0 && !(m[j].root == root && m[j].thread == s->thread))
            j = (j + 1) & (cap - 1);
        if (m[j].root < 0)
            m[j] = (tslot){root, s->thread, (int)i};
        else
            m[j].stream = -2; /* two loops of one runtime claim the same index */
    }
    uint64_t unresolved = 0;
    for (size_t i = 0; i < nst; i++) {
        stream *s = &st[i];
        int root = uf_find((int)i);
        for (size_t k = 0; k < s->nsargs; k++) {
            int thread = (int)s->sargs[k].arg, victim = -1;
            size_t j = ((size_t)root * 31 + (size_t)thread) & (cap - 1);
            for (; m[j].root >= 0; j = (j + 1) & (cap - 1))
                if (m[j].root == root && m[j].thread == thread) {
                    victim = m[j].stream;
                    break;
                }
            if (victim >= 0 && victim != (int)i)
                st[victim].stolen += s->sargs[k].n;
            else
                unresolved += s->sargs[k].n;
        }
        free(s->sargs);
        s->sargs = NULL;
    }
    free(m);
    return unresolved;
}

/* ---- summary ------------------------------------------------------------------------ */
static int cmp_agg(const void *a, const void *b)
{
    const agg *x = a, *y = b;
    return x->poll_total < y->poll_total ? 1 : x->poll_total > y->poll_total ? -1 : 0;
}

static void summary(uint32_t pid, uint32_t res, uint64_t records)
{
    soft_wait = res; /* one clock tick */
    tick_res = res > 1 ? (int64_t)res : 0;
    merge();
    uint64_t unresolved = resolve_victims();
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (size_t i = 0; i < nst; i++) {
        if (!st[i].timed)
            continue;
        if (st[i].first < lo)
            lo = st[i].first;
        if (st[i].last > hi)
            hi = st[i].last;
    }
    printf("trace %s: pid %u, clock resolution %u ns, %" PRIu64 " records, %zu loop(s)\n", path,
           pid, res, records, nst);
    if (lo <= hi)
        printf("span: %.3f ms (from %.3f to %.3f ms after the file was created)\n", ms(hi - lo),
               ms(lo - t0), ms(hi - t0));
    printf("\nper loop (thread: scheduler-thread index, inferred from steals):\n"
           "%5s %6s %10s %10s %10s %10s %8s %8s %10s %8s %12s %12s  %s\n",
           "loop", "thread", "tid", "records", "spawns", "polls", "steals", "stolen", "wakes_rmt",
           "cancels", "busy_ms", "span_ms", "");
    for (size_t i = 0; i < nst; i++) {
        stream *L = &st[i];
        char thr[16] = "-";
        if (L->thread >= 0)
            snprintf(thr, sizeof(thr), "%d", L->thread);
        printf("%5d %6s %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %8" PRIu64
               " %8" PRIu64 " %10" PRIu64 " %8" PRIu64 " %12.3f %12.3f  %s\n",
               L->idx, thr, L->tid, L->records, L->spawns, L->polls, L->steals, L->stolen,
               L->wakes_remote, L->cancels, ms(L->busy), ms(L->last - L->first),
               L->ended ? "" : "(no END)");
    }
    if (unresolved)
        printf("steals whose victim loop is unknown: %" PRIu64 "\n", unresolved);
    qsort(aggs, naggs, sizeof(*aggs), cmp_agg);
    printf("\nper task name (sorted by total poll time; migrated: tasks polled on a loop other "
           "than the one that spawned them):\n"
           "%-24s %9s %10s %10s %9s %9s %8s %8s %8s %12s %11s %9s %13s\n",
           "name", "tasks", "polls", "pendings", "wakes_loc", "wakes_rmt", "steals", "migrated",
           "cancels", "poll_tot_ms", "poll_max_us", "ended", "life_tot_ms");
    for (size_t i = 0; i < naggs; i++) {
        agg *g = &aggs[i];
        printf("%-24s %9" PRIu64 " %10" PRIu64 " %10" PRIu64 " %9" PRIu64 " %9" PRIu64 " %8" PRIu64
               " %8" PRIu64 " %8" PRIu64 " %12.3f %11.3f %9" PRIu64 " %13.3f\n",
               g->name, g->tasks, g->polls, g->pendings, g->wakes_local, g->wakes_remote, g->steals,
               g->migrated, g->cancels, ms(g->poll_total), (double)g->poll_max / 1e3, g->ended,
               ms(g->life_total));
    }
}

static int usage(void)
{
    fprintf(stderr, "usage: weir-trace [--dump] FILE\n"
                    "  summarise (or with --dump, print every record of) a WEIR_TRACE file\n");
    return 2;
}

/* The summary reads the file twice: copy what cannot be (a pipe) to a
 * temporary file first. */
static void make_rereadable(void)
{
    struct stat sb;
    if (fstat(fileno(in), &sb) == 0 && S_ISREG(sb.st_mode)) {
        in_fd = fileno(in);
        return;
    }
    FILE *tmp = tmpfile();
    if (!tmp) {
        fprintf(stderr, "weir-trace: cannot create a temporary file: %s\n", strerror(errno));
        exit(1);
    }
    static char b[1 << 16];
    size_t n;
    while ((n = fread(b, 1, sizeof(b), in)) > 0)
        if (fwrite(b, 1, n, tmp) != n) {
            fprintf(stderr, "weir-trace: writing a temporary file failed\n");
            exit(1);
        }
    if (ferror(in))
        bad("read error: %s", strerror(errno));
    if (fflush(tmp) != 0 || fseek(tmp, 0, SEEK_SET) != 0) {
        fprintf(stderr, "weir-trace: writing a temporary file failed\n");
        exit(1);
    }
    fclose(in);
    in = tmp;
    in_fd = fileno(in);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) {
        dump = 1;
        path = argv[2];
    } else if (argc == 2 && argv[1][0] != '-') {
        path = argv[1];
    } else {
        return usage();
    }
    in = fopen(path, "rb");
    if (!in) {
        fprintf(stderr, "weir-trace: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    if (!dump)
        make_rereadable();
    unsigned char h[HDR];
    size_t n = fread(h, 1, HDR, in);
    if (n < 8 || memcmp(h, "WEIRTRC1", 8) != 0)
        bad("not a weir trace (bad magic; want \"WEIRTRC1\")");
    if (n < HDR)
        bad("truncated header (%zu of %d bytes)", n, HDR);
    if (get32(h + 8) != 1)
        bad("unsupported version %" PRIu32 " (this tool reads version 1)", get32(h + 8));
    if (get32(h + 12) != REC)
        bad("record size %" PRIu32 ", want %d", get32(h + 12), REC);
    if (get64(h + 16) > INT64_MAX)
        bad("header clock out of range");
    t0 = (int64_t)get64(h + 16);
    off = HDR;
    uint64_t records = pass1();
    if (!dump)
        summary(get32(h + 24), get32(h + 28), records);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "weir-trace: writing the output failed\n");
        return 1;
    }
    return 0;
}
