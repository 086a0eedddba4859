/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.c - WEIR_TRACE=<file>: a binary log of task lifecycle events (spawn,
 * poll, pending, wake, ready, cancel, steal) cheap enough to leave on in a
 * benchmark run. tools/weir-trace.c summarises or dumps it.
 *
 * Each loop appends 16-byte records to a private in-memory buffer (64 KiB)
 * and hands the whole buffer to write(2) when it fills and when the loop is
 * freed. Every loop of the process writes into the same file: it is opened
 * (O_APPEND, truncated) once, by the first loop that asks, and kept in a small
 * process-wide registry under a mutex (the "documented process-wide registry"
 * DESIGN.md allows) together with a bitmap of loop indices. With O_APPEND each
 * write(2) to a regular file lands whole at the end of the file, so buffers of
 * different loops interleave only at buffer boundaries, never inside a
 * record. (For a pipe or FIFO that holds only up to PIPE_BUF bytes, so such
 * a file gets PIPE_BUF-sized buffers.)
 *
 * File format (little-endian; the same table is in docs/runtime.md):
 *
 *   header, 32 bytes
 *     0  u8[8] magic "WEIRTRC1"
 *     8  u32   version (1)
 *    12  u32   record size (16)
 *    16  u64   CLOCK_MONOTONIC ns when the file was created
 *    24  u32   pid of the writing process
 *    28  u32   clock resolution in ns (1: CLOCK_MONOTONIC; 4000000 or so:
 *              CLOCK_MONOTONIC_COARSE, WEIR_TRACE_CLOCK=coarse)
 *   then records, 16 bytes each
 *     0  u32   dt: ns since the previous record of the same loop
 *     4  u8    event
 *     5  u8    loop index (0..255, unique among the loops alive at once)
 *     6  u16   arg (per event, below)
 *     8  u64   task id (weir_task_id(), the task's address) or payload
 *
 *   event          arg                                   u64
 *    1 SPAWN       bits 0-14 name id, bit 15: spawned    task
 *                  from another thread
 *    2 POLL        0                                     task
 *    3 PENDING     0                                     task
 *    4 WAKE        1: woken from another thread          task
 *    5 READY       the task's result, saturated to s16   task
 *    6 CANCEL      0                                     task
 *    7 STEAL       the victim's scheduler-thread index   task
 *                  in its runtime (not a loop index;
 *                  weir_rt_thread_index()); written by
 *                  the thief's loop
 *   16 LOOP        0                                     kernel thread id
 *   17 TIME        0                                     absolute CLOCK_MONOTONIC ns
 *   18 NAME        name length n (1..255)                name id (1..32767)
 *   19 END         0                                     0
 *
 * A loop's records are in time order. Its first buffer starts LOOP, TIME;
 * every later buffer starts with TIME (so a buffer never depends on an
 * earlier one's deltas), and a TIME also precedes a record whose delta does
 * not fit in 32 bits. A NAME record is followed by ceil(n / 16) records' worth
 * of name bytes (zero-padded, not NUL-terminated); it comes before the first
 * SPAWN that uses its id, and never straddles two buffers. Name ids are per
 * loop index and key on the name *pointer* (names are borrowed and usually
 * literals); id 0 means "not recorded" (more than 32767 distinct names).
 * END is a loop's last record; a loop index may be reused after its END by a
 * later loop, which begins with LOOP again.
 *
 * Timestamps. clock_gettime costs ~23 ns here, as much as half of a whole
 * spawn+join, so reads are kept to about one per poll:
 *   - POLL always reads the clock;
 *   - SPAWN / WAKE / CANCEL inside a poll take the poll's start time (they
 *     happened between the poll's start and end records anyway);
 *   - PENDING / READY read the clock unless another poll follows at once in
 *     the same turn (the run queue is not empty and the turn's poll budget is
 *     not spent): then the record is written *provisional* and stamped with
 *     the next clock read, which is the next POLL's. A poll's duration then
 *     includes the few nanoseconds of scheduler work until the next poll.
 *   - anything else reads the clock, unless it follows a provisional record
 *     (e.g. the joiner's WAKE after READY), in which case it shares its stamp.
 * A flush or close stamps provisional records with a fresh clock read first.
 * That one read per poll is still the largest single cost (bench/spawn_join:
 * 45 -> 96 ns per stackless task into a file, ~83 into /dev/null), so
 * WEIR_TRACE_CLOCK=coarse swaps in CLOCK_MONOTONIC_COARSE (~5 ns, one-tick
 * resolution, typically 1-4 ms):
 * order, counts and lifetimes of long tasks stay exact, and summed poll time
 * over many polls stays an unbiased estimate (a poll of d ns crosses a tick
 * with probability d / tick), but single short polls read as 0 or one tick.
 *
 * Failure: weir__trace_open() returns -errno when the file cannot be opened
 * (the loop logs it and runs untraced). A failed or short write(2) stops
 * tracing for that loop with one warning; the file may then end in a partial
 * buffer, which the reader reports as truncated.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/be.h"
#include "rt/rt_int.h"

#define TRACE_MAGIC    "WEIRTRC1"
#define TRACE_VERSION  1u
#define TRACE_HDR_SIZE 32
#define REC            16 /* record size */
#define TRACE_BUF      (64 * 1024)
#define NAME_MAX_LEN   255
#define NAME_ID_MAX    0x7fff
#define SPAWN_REMOTE   0x8000
#define NO_PROVISIONAL SIZE_MAX

enum {
    EV_LOOP = 16,
    EV_TIME = 17,
    EV_NAME = 18,
    EV_END = 19,
};

typedef struct name_slot {
    const char *key;
    uint16_t id;
} name_slot;

struct weir__trace {
    int fd; /* the registry's descriptor; valid while we hold a ref */
    clockid_t clock;
    uint8_t idx;   /* loop index in every record */
    size_t len;    /* bytes used in buf */
    size_t cap;    /* TRACE_BUF, or PIPE_BUF for a non-regular file */
    size_t prov;   /* offset of the first provisional record, or NO_PROVISIONAL */
    int64_t last;  /* time of the last stamped record */
    uint64_t turn; /* l->waits when the current turn's first poll was seen */
    unsigned turn_polls;
    /* name pointer -> id, open addressing; one-entry cache in front */
    name_slot *names;
    size_t names_mask; /* capacity - 1, or 0 when not allocated */
    unsigned nnames;
    const char *last_name;
    uint16_t last_id;
    unsigned char buf[]; /* cap bytes */
};

/* ---- the process-wide registry ------------------------------------------------ */
/* One open trace file per process, shared by every traced loop. The file
 * stays open after the last loop closes (all its data has been written by
 * then), so that loops created later append to the same trace instead of
 * truncating it; asking for a different path replaces it. */
static struct {
    pthread_mutex_t lock;
    int fd;
    int refs;
    int is_reg;
    char path[PATH_MAX];
    clockid_t clock;  /* the clock every loop stamps with (WEIR_TRACE_CLOCK) */
    uint64_t used[4]; /* loop indices in use (256 bits) */
} reg = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

/* Write all of buf or fail: a short write is an error, because retrying the
 * rest would no longer be atomic with respect to other loops' writes. */
static int write_whole(int fd, const void *buf, size_t n)
{
    ssize_t r;
    do
        r = write(fd, buf, n);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return -errno;
    return (size_t)r == n ? 0 : -ENOSPC;
}

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * WEIR_SEC + ts.tv_nsec;
}

static int reg_open_file(const char *path)
{
    if (strlen(path) >= sizeof(reg.path))
        return -ENAMETOOLONG;
    const char *want = getenv("WEIR_TRACE_CLOCK");
    clockid_t id = CLOCK_MONOTONIC;
    if (want && strcmp(want, "coarse") == 0)
        id = CLOCK_MONOTONIC_COARSE;
    else if (want && *want && strcmp(want, "fine") != 0)
        weir__log(WEIR__LOG_WARN, "rt.trace", "ignoring WEIR_TRACE_CLOCK=%s (want fine or coarse)",
                  want);
    struct timespec res = {0, 1};
    clock_getres(id, &res);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    struct stat st;
    int is_reg = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    unsigned char h[TRACE_HDR_SIZE] = {0};
    memcpy(h, TRACE_MAGIC, 8);
    weir__put_le32(h + 8, TRACE_VERSION);
    weir__put_le32(h + 12, REC);
    weir__put_le64(h + 16, (uint64_t)clock_ns(id));
    weir__put_le32(h + 24, (uint32_t)getpid());
    weir__put_le32(h + 28, (uint32_t)(res.tv_sec ? UINT32_MAX : res.tv_nsec));
    int r = write_whole(fd, h, sizeof(h));
    if (r < 0) {
        close(fd);
        return r;
    }
    if (reg.fd >= 0)
        close(reg.fd);
    reg.fd = fd;
    reg.is_reg = is_reg;
    reg.clock = id;
    strcpy(reg.path, path); /* length checked above */
    return 0;
}

/* Take a reference on the file for `path` and a free loop index. */
static int reg_acquire(const char *path, int *fd, int *is_reg, clockid_t *clock, uint8_t *idx)
{
    int r = 0;
    pthread_mutex_lock(&reg.lock);
    if (reg.fd < 0 || strcmp(reg.path, path) != 0) {
        if (reg.refs > 0)
            r = -EBUSY; /* another loop of this process traces elsewhere */
        else
            r = reg_open_file(path);
    }
    if (r == 0) {
        r = -EMFILE; /* 256 loops traced at once */
        for (int i = 0; i < 256; i++) {
            if (!(reg.used[i / 64] & (UINT64_C(1) << (i % 64)))) {
                reg.used[i / 64] |= UINT64_C(1) << (i % 64);
                *idx = (uint8_t)i;
                r = 0;
                break;
            }
        }
    }
    if (r == 0) {
        reg.refs++;
        *fd = reg.fd;
        *is_reg = reg.is_reg;
        *clock = reg.clock;
    }
    pthread_mutex_unlock(&reg.lock);
    return r;
}

static void reg_release(uint8_t idx)
{
    pthread_mutex_lock(&reg.lock);
    reg.used[idx / 64] &= ~(UINT64_C(1) << (idx % 64));
    reg.refs--;
    pthread_mutex_unlock(&reg.lock);
}

/* ---- records ------------------------------------------------------------------- */
/* Records are built as two host-order words: on the little-endian hosts weir
 * runs on (x86-64, aarch64) that is the file's byte order already. */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "trace.c stores records in host byte order; add byte swapping for this host"
#endif
static unsigned char *rec_put(struct weir__trace *tr, uint32_t dt, int ev, uint16_t arg, uint64_t v)
{
    unsigned char *p = tr->buf + tr->len;
    uint64_t w =
        (uint64_t)dt | (uint64_t)(uint8_t)ev << 32 | (uint64_t)tr->idx << 40 | (uint64_t)arg << 48;
    memcpy(p, &w, 8);
    memcpy(p + 8, &v, 8);
    tr->len += REC;
    return p;
}

/* Give the provisional records (if any) the time `now`: the first one's delta
 * carries the whole gap, the rest keep delta 0. */
static void stamp_provisional(struct weir__trace *tr, int64_t now)
{
    if (tr->prov == NO_PROVISIONAL)
        return;
    uint64_t d = now > tr->last ? (uint64_t)(now - tr->last) : 0;
    if (d > UINT32_MAX)
        d = UINT32_MAX; /* a 4 s gap in scheduler bookkeeping: clamp, keep order */
    weir__put_le32(tr->buf + tr->prov, (uint32_t)d);
    tr->last += (int64_t)d;
    tr->prov = NO_PROVISIONAL;
}

/* Delta from the last stamped record to `now`, with a TIME record first when
 * it does not fit in 32 bits. */
static uint32_t clock_delta(struct weir__trace *tr, int64_t now)
{
    stamp_provisional(tr, now);
    if (now <= tr->last)
        return 0;
    uint64_t d = (uint64_t)(now - tr->last);
    tr->last = now;
    if (d > UINT32_MAX) {
        rec_put(tr, 0, EV_TIME, 0, (uint64_t)now);
        return 0;
    }
    return (uint32_t)d;
}

static void trace_disable(weir_loop *l, int err)
{
    struct weir__trace *tr = l->trace;
    weir__log(WEIR__LOG_WARN, "rt.trace", "writing the trace failed (%s); loop %u stops tracing",
              strerror(-err), tr->idx);
    l->trace = NULL;
    reg_release(tr->idx);
    free(tr->names);
    free(tr);
}

/* Write the buffer out and start the next one with a TIME record. Returns
 * 0, or -errno after which the caller must disable tracing. */
static int trace_flush(struct weir__trace *tr)
{
    if (tr->prov != NO_PROVISIONAL)
        stamp_provisional(tr, clock_ns(tr->clock));
    int r = write_whole(tr->fd, tr->buf, tr->len);
    tr->len = 0;
    if (r == 0)
        rec_put(tr, 0, EV_TIME, 0, (uint64_t)tr->last);
    return r;
}

static size_t name_hash(const char *name)
{
    /* Fibonacci hashing of the pointer; the high half is well mixed. */
    return (size_t)(((uint64_t)(uintptr_t)name * UINT64_C(0x9E3779B97F4A7C15)) >> 32);
}

static name_slot *name_probe(name_slot *tab, size_t mask, const char *name)
{
    /* Load stays under 1/2, so an empty slot ends every probe. */
    for (size_t j = name_hash(name);; j++) {
        name_slot *s = &tab[j & mask];
        if (s->key == name || !s->key)
            return s;
    }
}

static int names_grow(struct weir__trace *tr)
{
    size_t cap = tr->names_mask ? (tr->names_mask + 1) * 2 : 64;
    name_slot *ns = calloc(cap, sizeof(*ns));
    if (!ns)
        return -ENOMEM;
    for (size_t i = 0; tr->names && i <= tr->names_mask; i++)
        if (tr->names[i].key)
            *name_probe(ns, cap - 1, tr->names[i].key) = tr->names[i];
    free(tr->names);
    tr->names = ns;
    tr->names_mask = cap - 1;
    return 0;
}

/* Name id for a task name, writing a NAME record group the first time the
 * pointer is seen. The caller made room for the group. 0 when the name
 * cannot be recorded (table full or out of memory). */
static uint16_t name_id(struct weir__trace *tr, const char *name)
{
    if (name == tr->last_name)
        return tr->last_id;
    name_slot *s = tr->names ? name_probe(tr->names, tr->names_mask, name) : NULL;
    if (!s || !s->key) {
        if (tr->nnames >= NAME_ID_MAX)
            return 0;
        if (!tr->names || (tr->nnames + 1) * 2 > tr->names_mask + 1) {
            if (names_grow(tr) < 0)
                return 0;
        }
        s = name_probe(tr->names, tr->names_mask, name);
        size_t n = strnlen(name, NAME_MAX_LEN);
        s->key = name;
        s->id = (uint16_t)++tr->nnames;
        rec_put(tr, 0, EV_NAME, (uint16_t)n, s->id);
        size_t padded = (n + REC - 1) / REC * REC;
        memset(tr->buf + tr->len, 0, padded);
        memcpy(tr->buf + tr->len, name, n);
        tr->len += padded;
    }
    tr->last_name = name;
    tr->last_id = s->id;
    return s->id;
}

void weir__trace_emit(weir_loop *l, int ev, const weir_task *t, uint64_t arg)
{
    struct weir__trace *tr = l->trace;
    /* Room for TIME + the record, and for a SPAWN a NAME group. */
    size_t need = 2 * REC;
    if (ev == WEIR__EV_SPAWN)
        need += REC + (NAME_MAX_LEN + REC - 1) / REC * REC;
    if (WEIR__UNLIKELY(tr->cap - tr->len < need)) {
        int r = trace_flush(tr);
        if (r < 0) {
            trace_disable(l, r);
            return;
        }
    }

    uint32_t dt = 0;
    int provisional = 0;
    switch (ev) {
    case WEIR__EV_POLL:
        if (l->waits != tr->turn) {
            tr->turn = l->waits;
            tr->turn_polls = 0;
        }
        tr->turn_polls++;
        dt = clock_delta(tr, clock_ns(tr->clock));
        break;
    case WEIR__EV_PENDING:
    case WEIR__EV_READY:
        /* Another poll follows at once: let its clock read stamp us. */
        if (l->runq.len > 0 && l->waits == tr->turn && tr->turn_polls < WEIR__TURN_BUDGET)
            provisional = 1;
        else
            dt = clock_delta(tr, clock_ns(tr->clock));
        break;
    default:
        if (l->current)
            break; /* inside a poll: the poll's start time */
        if (tr->prov != NO_PROVISIONAL)
            provisional = 1;
        else
            dt = clock_delta(tr, clock_ns(tr->clock));
        break;
    }

    uint16_t a;
    if (ev == WEIR__EV_SPAWN) {
        a = name_id(tr, t->name);
        if (arg)
            a |= SPAWN_REMOTE;
    } else if (ev == WEIR__EV_READY) {
        int64_t v = (int64_t)arg;
        a = (uint16_t)(int16_t)(v < INT16_MIN ? INT16_MIN : v > INT16_MAX ? INT16_MAX : v);
    } else {
        a = (uint16_t)(arg > UINT16_MAX ? UINT16_MAX : arg);
    }
    unsigned char *p = rec_put(tr, dt, ev, a, (uint64_t)(uintptr_t)t); /* = weir_task_id(t) */
    if (provisional && tr->prov == NO_PROVISIONAL)
        tr->prov = (size_t)(p - tr->buf);
}

int weir__trace_open(weir_loop *l)
{
    const char *path = getenv("WEIR_TRACE");
    if (!path || !*path)
        return 0;
    int fd = -1, is_reg = 0;
    uint8_t idx = 0;
    clockid_t clock = CLOCK_MONOTONIC;
    int r = reg_acquire(path, &fd, &is_reg, &clock, &idx);
    if (r < 0)
        return r;
    size_t cap = is_reg ? TRACE_BUF : PIPE_BUF;
    struct weir__trace *tr = calloc(1, sizeof(*tr) + cap);
    if (!tr) {
        reg_release(idx);
        return -ENOMEM;
    }
    tr->fd = fd;
    tr->clock = clock;
    tr->idx = idx;
    tr->cap = cap;
    tr->prov = NO_PROVISIONAL;
    tr->last = clock_ns(tr->clock);
    rec_put(tr, 0, EV_LOOP, 0, (uint64_t)syscall(SYS_gettid));
    rec_put(tr, 0, EV_TIME, 0, (uint64_t)tr->last);
    l->trace = tr;
    return 0;
}

void weir__trace_close(weir_loop *l)
{
    struct weir__trace *tr = l->trace;
    if (!tr)
        return;
    if (tr->cap - tr->len < 2 * REC) {
        int r = trace_flush(tr);
        if (r < 0) {
            trace_disable(l, r);
            return;
        }
    }
    uint32_t dt = clock_delta(tr, clock_ns(tr->clock));
    rec_put(tr, dt, EV_END, 0, 0);
    int r = write_whole(tr->fd, tr->buf, tr->len);
    if (r < 0) {
        trace_disable(l, r);
        return;
    }
    l->trace = NULL;
    reg_release(tr->idx);
    free(tr->names);
    free(tr);
}
