/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir-trace - read a WEIR_TRACE file (format: src/rt/trace.c, docs/runtime.md).
 *
 *   weir-trace FILE          summary: per task name, per loop, time span
 *   weir-trace --dump FILE   every record as one line of text
 *
 * The file is untrusted input: every length is checked against what is left,
 * every id against its table, and the first malformed byte ends the run with
 * a message naming the offset and what was wrong (exit 1). Reading is one
 * streaming pass in fixed-size chunks, so a multi-gigabyte trace needs only
 * memory for the tasks alive at once.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REC       16
#define HDR       32
#define NAME_MAX_ 255
#define NAME_IDS  0x8000
#define NLOOPS    256

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

/* ---- aggregates --------------------------------------------------------------- */
typedef struct agg {
    char *name;
    uint64_t tasks, polls, pendings, wakes_local, wakes_remote, cancels, ended;
    int64_t poll_total, poll_max, life_total;
} agg;

typedef struct loopst {
    int seen;  /* a LOOP record started this instance */
    int timed; /* a TIME record gave an absolute time */
    int ended;
    uint64_t tid;
    int64_t now, first, last;
    uint64_t records, spawns, polls, wakes_remote, cancels;
    int64_t busy;  /* total poll time */
    int *name_agg; /* name id -> agg index (+1; 0 = unknown) */
} loopst;

typedef struct live {
    uint64_t key_task; /* 0 = empty slot */
    int loop;
    int agg;
    int64_t spawn_at, poll_at; /* poll_at < 0: not in a poll */
} live;

static agg *aggs;
static size_t naggs, cap_aggs;
static loopst loops[NLOOPS];
static live *tab;
static size_t tab_mask, tab_used;
/* finished loop instances, printed in the summary */
typedef struct loopsum {
    int idx;
    loopst st;
} loopsum;
static loopsum *done_loops;
static size_t ndone, cap_done;

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q) {
        fprintf(stderr, "weir-trace: out of memory\n");
        exit(1);
    }
    return q;
}

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

static size_t slot_of(uint64_t task, int loop)
{
    uint64_t h = (task ^ (uint64_t)loop << 56) * UINT64_C(0x9E3779B97F4A7C15);
    return (size_t)(h >> 20);
}

/* Find (or with create, add) the live entry of a task; NULL if absent. */
static live *live_get(uint64_t task, int loop, int create)
{
    if (create && (tab_used + 1) * 2 > tab_mask + 1) {
        size_t cap = tab_mask ? (tab_mask + 1) * 2 : 1024;
        live *nt = xrealloc(NULL, cap * sizeof(*nt));
        memset(nt, 0, cap * sizeof(*nt));
        for (size_t i = 0; tab && i <= tab_mask; i++) {
            if (!tab[i].key_task)
                continue;
            size_t j = slot_of(tab[i].key_task, tab[i].loop);
            while (nt[j & (cap - 1)].key_task)
                j++;
            nt[j & (cap - 1)] = tab[i];
        }
        free(tab);
        tab = nt;
        tab_mask = cap - 1;
    }
    if (!tab)
        return NULL;
    for (size_t j = slot_of(task, loop);; j++) {
        live *e = &tab[j & tab_mask];
        if (!e->key_task) {
            if (!create)
                return NULL;
            e->key_task = task;
            e->loop = loop;
            e->agg = -1;
            e->poll_at = -1;
            tab_used++;
            return e;
        }
        if (e->key_task == task && e->loop == loop)
            return e;
    }
}

/* Delete by backward-shift so that probes never need tombstones. */
static void live_del(live *e)
{
    size_t i = (size_t)(e - tab);
    for (size_t j = i + 1;; j++) {
        live *n = &tab[j & tab_mask];
        if (!n->key_task)
            break;
        size_t home = slot_of(n->key_task, n->loop) & tab_mask;
        /* n may move to i if its home is not in (i, j] cyclically */
        if (((j - home) & tab_mask) >= ((j - i) & tab_mask)) {
            tab[i] = *n;
            i = j & tab_mask;
        }
    }
    tab[i].key_task = 0;
    tab_used--;
}

static void loop_retire(int idx)
{
    loopst *L = &loops[idx];
    if (!L->seen)
        return;
    if (ndone == cap_done) {
        cap_done = cap_done ? cap_done * 2 : 8;
        done_loops = xrealloc(done_loops, cap_done * sizeof(*done_loops));
    }
    done_loops[ndone].idx = idx;
    done_loops[ndone].st = *L;
    done_loops[ndone].st.name_agg = NULL;
    ndone++;
    free(L->name_agg);
    memset(L, 0, sizeof(*L));
}

/* ---- reading ------------------------------------------------------------------ */
static FILE *in;
static const char *path;
static uint64_t off; /* file offset of the next unread byte */
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

static void on_record(const unsigned char *r, uint64_t at)
{
    uint32_t dt = get32(r);
    int ev = r[4], li = r[5];
    unsigned arg = (unsigned)r[6] | (unsigned)r[7] << 8;
    uint64_t v = get64(r + 8);
    loopst *L = &loops[li];
    char name[NAME_MAX_ + 1];

    if (!ev_name(ev))
        bad("unknown event %d in the record at offset %" PRIu64, ev, at);
    if (ev == EV_LOOP) {
        loop_retire(li);
        L = &loops[li];
        L->seen = 1;
        L->tid = v;
    } else if (!L->seen) {
        bad("record for loop %d before its LOOP record at offset %" PRIu64, li, at);
    }
    if (ev == EV_TIME) {
        if (v > INT64_MAX)
            bad("TIME out of range at offset %" PRIu64, at);
        if (L->timed && (int64_t)v < L->now)
            bad("time goes backwards on loop %d at offset %" PRIu64, li, at);
        L->now = (int64_t)v;
        if (!L->timed)
            L->first = L->now;
        L->timed = 1;
    } else {
        if (!L->timed && ev != EV_LOOP)
            bad("record for loop %d before its first TIME at offset %" PRIu64, li, at);
        L->now += dt;
    }
    L->last = L->now;
    L->records++;
    if (ev == EV_NAME) {
        if (arg < 1 || arg > NAME_MAX_)
            bad("NAME length %u out of range 1..%d at offset %" PRIu64, arg, NAME_MAX_, at);
        if (v < 1 || v >= NAME_IDS)
            bad("NAME id %" PRIu64 " out of range at offset %" PRIu64, v, at);
        unsigned char pr[REC];
        for (unsigned k = 0; k < arg; k += REC) {
            if (!read_rec(pr, "NAME payload"))
                bad("truncated NAME payload after offset %" PRIu64, at);
            memcpy(name + k, pr, arg - k < REC ? arg - k : REC);
        }
        name[arg] = 0;
        for (unsigned k = 0; k < arg; k++)
            if (name[k] == 0 || (unsigned char)name[k] < 0x20)
                name[k] = '?'; /* keep the output one line per record */
        if (!L->name_agg) {
            L->name_agg = calloc(NAME_IDS, sizeof(int));
            if (!L->name_agg)
                bad("out of memory");
        }
        L->name_agg[v] = agg_find(name) + 1;
    }
    if (dump) {
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
            printf("  task %#" PRIx64 "  from loop %u", v, arg);
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

    live *e;
    switch (ev) {
    case EV_SPAWN: {
        L->spawns++;
        unsigned id = arg & 0x7fff;
        int a = L->name_agg && L->name_agg[id] ? L->name_agg[id] - 1 : agg_find("(unnamed)");
        e = live_get(v, li, 1);
        e->agg = a;
        e->spawn_at = L->now;
        e->poll_at = -1;
        aggs[a].tasks++;
        break;
    }
    case EV_POLL:
    case EV_PENDING:
    case EV_WAKE:
    case EV_READY:
    case EV_CANCEL:
    case EV_STEAL:
        e = live_get(v, li, 0);
        if (!e) { /* spawned before the trace began, or its SPAWN was lost */
            e = live_get(v, li, 1);
            e->agg = agg_find("(no spawn seen)");
            e->spawn_at = -1;
            aggs[e->agg].tasks++;
        }
        agg *g = &aggs[e->agg];
        if (ev == EV_POLL) {
            g->polls++;
            L->polls++;
            e->poll_at = L->now;
        } else if (ev == EV_PENDING || ev == EV_READY) {
            if (e->poll_at >= 0) {
                int64_t d = L->now - e->poll_at;
                g->poll_total += d;
                L->busy += d;
                if (d > g->poll_max)
                    g->poll_max = d;
            }
            e->poll_at = -1;
            if (ev == EV_PENDING) {
                g->pendings++;
            } else {
                g->ended++;
                if (e->spawn_at >= 0)
                    g->life_total += L->now - e->spawn_at;
                live_del(e);
            }
        } else if (ev == EV_WAKE) {
            if (arg) {
                g->wakes_remote++;
                L->wakes_remote++;
            } else {
                g->wakes_local++;
            }
        } else if (ev == EV_CANCEL) {
            g->cancels++;
            L->cancels++;
        }
        break;
    case EV_END:
        L->ended = 1;
        break;
    }
}

static int cmp_agg(const void *a, const void *b)
{
    const agg *x = a, *y = b;
    return x->poll_total < y->poll_total ? 1 : x->poll_total > y->poll_total ? -1 : 0;
}

static void summary(uint32_t pid, uint32_t res, uint64_t records)
{
    for (int i = 0; i < NLOOPS; i++)
        loop_retire(i);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (size_t i = 0; i < ndone; i++) {
        if (done_loops[i].st.first < lo)
            lo = done_loops[i].st.first;
        if (done_loops[i].st.last > hi)
            hi = done_loops[i].st.last;
    }
    printf("trace %s: pid %u, clock resolution %u ns, %" PRIu64 " records, %zu loop(s)\n", path,
           pid, res, records, ndone);
    if (ndone)
        printf("span: %.3f ms (from %.3f to %.3f ms after the file was created)\n", ms(hi - lo),
               ms(lo - t0), ms(hi - t0));
    printf("\nper loop:\n%5s %10s %10s %10s %10s %10s %8s %12s %12s  %s\n", "loop", "tid",
           "records", "spawns", "polls", "wakes_rmt", "cancels", "busy_ms", "span_ms", "");
    for (size_t i = 0; i < ndone; i++) {
        loopst *L = &done_loops[i].st;
        printf("%5d %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %8" PRIu64
               " %12.3f %12.3f  %s\n",
               done_loops[i].idx, L->tid, L->records, L->spawns, L->polls, L->wakes_remote,
               L->cancels, ms(L->busy), ms(L->last - L->first), L->ended ? "" : "(no END)");
    }
    qsort(aggs, naggs, sizeof(*aggs), cmp_agg);
    printf("\nper task name (sorted by total poll time):\n%-24s %9s %10s %10s %9s %9s %8s %12s "
           "%11s %9s %13s\n",
           "name", "tasks", "polls", "pendings", "wakes_loc", "wakes_rmt", "cancels", "poll_tot_ms",
           "poll_max_us", "ended", "life_tot_ms");
    for (size_t i = 0; i < naggs; i++) {
        agg *g = &aggs[i];
        printf("%-24s %9" PRIu64 " %10" PRIu64 " %10" PRIu64 " %9" PRIu64 " %9" PRIu64 " %8" PRIu64
               " %12.3f %11.3f %9" PRIu64 " %13.3f\n",
               g->name, g->tasks, g->polls, g->pendings, g->wakes_local, g->wakes_remote,
               g->cancels, ms(g->poll_total), (double)g->poll_max / 1e3, g->ended,
               ms(g->life_total));
    }
}

static int usage(void)
{
    fprintf(stderr, "usage: weir-trace [--dump] FILE\n"
                    "  summarise (or with --dump, print every record of) a WEIR_TRACE file\n");
    return 2;
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
    uint64_t records = 0;
    unsigned char r[REC];
    for (;;) {
        uint64_t at = off;
        if (!read_rec(r, "record"))
            break;
        on_record(r, at);
        records++;
    }
    if (!dump)
        summary(get32(h + 24), get32(h + 28), records);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "weir-trace: writing the output failed\n");
        return 1;
    }
    return 0;
}
