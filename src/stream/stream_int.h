/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stream_int.h - the job graph as the runner sees it (graph.c builds it,
 * runner.c and deploy.c run it, task.c is a subtask's loop) and the per-subtask context behind
 * weir_ctx.
 */
#ifndef WEIR_STREAM_INT_H
#define WEIR_STREAM_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/be.h"
#include "stream/channel.h"
#include "stream/dirlock.h"
#include "weir/metrics.h"
#include "weir/state.h"
#include "weir/stream.h"
#include "weir/sync.h"

enum { EDGE_FORWARD, EDGE_HASH, EDGE_REBALANCE, EDGE_BROADCAST };
enum { OP_SOURCE, OP_OPERATOR, OP_SINK };

typedef struct sop sop;

/* One input of an operator: records of `from`, partitioned by `edge`. */
typedef struct sinput {
    sop *from;
    int tag; /* 0: the main output of from, 1: its side output */
    int edge;
    weir_key_fn key;
    void *key_arg;
} sinput;

/* An operator of the graph. */
/* One subtask's share of an operator's figures (weir_job_op_subtask_stats):
 * pushed by the subtask's thread as batches go by, read from any thread. */
typedef struct weir__sub_figures {
    _Atomic uint64_t in, out, bp_ns;
    _Atomic int64_t wm;
} weir__sub_figures;

struct sop {
    int id;
    char *name;
    int kind;
    weir_source_def src;
    weir_op_def def;
    void *arg;
    int parallelism; /* 0: the job's */
    sinput *inputs;
    int ninputs;
    sop **outs; /* operators reading this one */
    int nouts;
    int keyed; /* inputs are hash edges */
    /* A built-in operator's own controller (controller.h; the lookup's),
     * shared by its subtasks: its state is the operator's. NULL: the
     * runner picks one. */
    struct weir__controller *ctl;
    int reads; /* WEIR_READS_* (weir_stream_reads) */
    /* A built-in operator's private op (window.c): the state reads its
     * on_timer will make for the timer at `when` of the current key
     * (ctx->rc), each announced with weir__ns_prefetch, so that a batch
     * of due timers reads its state in one round (timers.c). NULL: none. */
    int (*timer_reads)(weir_ctx *ctx, void *state, int domain, int64_t when);
    /* Filled by the run. */
    int par;
    int chain;     /* the chain (task) it runs in */
    int chain_pos; /* its place in that chain */
    _Atomic uint64_t records_in, records_out, backpressure_ns;
    _Atomic int64_t watermark; /* after a run: the lowest of its subtasks' */
    weir__sub_figures *sub;    /* during a run: each subtask's, [par] */
    int sub_n;
};

/* A stream handle: an operator's output with the edge the next input uses,
 * or a union of several. */
struct weir_stream {
    weir_job *j;
    sop *from;
    int tag;
    int edge;
    weir_key_fn key;
    void *key_arg;
    weir_stream **parts; /* union: the streams it joins */
    int nparts;
    void *owned;             /* freed with the handle (a built-in operator's fn_arg) */
    weir_stream *next_alloc; /* the job's list of handles, for freeing */
};

struct weir_job {
    char *name;
    weir_ckpt_stats ckpt; /* of the last (or current) run; under lock */
    /* its latest checkpoints, a ring (under lock): hist[k % WEIR_CKPT_HISTORY]
     * for k in [nhist - min(nhist, WEIR_CKPT_HISTORY), nhist) */
    weir_ckpt_info hist[WEIR_CKPT_HISTORY];
    uint64_t nhist;
    int running; /* under lock */
    sop **ops;
    int nops, cap;
    weir_stream *streams;
    /* Room for a channel's TLS failure: the names on the certificate and
     * what to do about them. */
    char error[1024];
    int err;
    pthread_mutex_t lock; /* guards error/err during a run */
};

struct subtask;

/* The context one record is handled in: its key (as the key function gave
 * it), key group and timestamp. Each record, firing timer or key of a
 * walk has its own; the operator's weir_ctx points at the one being
 * handled (rc), so a controller that holds records back (the async
 * execution controller) keeps each record's context with it and points
 * the operator at it again when the record continues. */
typedef struct weir__rctx {
    const void *key;
    size_t klen;
    int kg;
    int64_t ts;
} weir__rctx;

/* The context of one operator in one subtask. */
struct weir_ctx {
    struct subtask *st;
    sop *op;
    weir_ctx *next; /* the next operator of the chain, NULL at its tail */
    void *state;
    /* keyed */
    weir__rctx *rc; /* the record (or timer) of a key being handled; NULL outside one */
    weir_state_backend *backend;
    uint8_t *keybuf; /* a state entry's key composed here (keyed.c) */
    size_t keycap;
    uint64_t in, out; /* records, added to the operator's counters at the end */
    int side;         /* the input the current record came from */
    /* metrics (opts.metrics): children of this operator + subtask */
    struct weir_counter *m_in, *m_out, *m_bp;
    struct weir_gauge *m_wm, *m_lag;
    uint64_t in_pushed, out_pushed;
    uint64_t seq; /* a per-subtask sequence for buffered entries (joins, lists) */
    /* A continuation that weir__ctl_get runs at once finds the state key
     * it read still in keybuf, read_kl bytes, until it composes another;
     * 0: not (an answer that came later). */
    size_t read_kl;
    /* The order key of the reads the running record issues
     * (weir_ctx_read_order). */
    int64_t read_order;
};

/* ---- the running job (runner.c)
 * ----------------------------------------------------------------------------- */
#define NO_KG 0xFF
_Static_assert(WEIR_KEY_GROUPS < NO_KG, "a key group fits a batch's byte");

typedef struct batch {
    uint32_t n, used, cap;
    int64_t ts[WEIR_BATCH_RECORDS];
    uint32_t off[WEIR_BATCH_RECORDS];
    uint32_t len[WEIR_BATCH_RECORDS];
    /* The key group a hash edge routed the record by (the consumer's key
     * function is the edge's: it need not hash again), or NO_KG. A
     * consumer checks it is one of its own groups (task.c): a batch
     * that came over a network is not trusted to say so. */
    uint8_t kg[WEIR_BATCH_RECORDS];
    _Alignas(8) uint8_t data[];
} batch;

/* wire.c: a batch with room for `need` bytes of records, at least
 * WEIR_BATCH_BYTES (n = used = 0), or NULL when memory runs out; freed with
 * weir__batch_free(). Batches decoded from a TCP channel are made by it
 * too, so a consumer frees local and remote ones alike. */
batch *weir__batch_new(size_t need);
void weir__batch_free(batch *b);

/* ---- the run's structures ----------------------------------------------------------------- */

/* The items of a subtask's mailbox (its input queue): what its inputs
 * deliver (IT_BATCH, IT_WATERMARK, IT_EOI, IT_BARRIER, IT_IDLE - wm 1: the
 * producer has nothing to send and leaves the watermark minimum, 0: it is
 * active again -, each with the input it came on) and what others post to
 * it (weir__subtask_post): IT_TIMER (a processing-time timer is due), IT_NOTIFY
 * (checkpoint wm completed: run the commit hooks), IT_TRIGGER (sources:
 * start checkpoint wm), IT_ABORT (checkpoint wm will never complete), IT_FINAL (wm is the job's
 * final checkpoint: take it at the end of input), IT_CALL (a completion - a
 * state read, a persist, a control message - to run on the subtask's thread), IT_FAIL (end with
 * error wm: a channel broke; the job's error says why). */
enum {
    IT_BATCH,
    IT_WATERMARK,
    IT_EOI,
    IT_BARRIER,
    IT_IDLE,
    IT_NOTIFY, /* from here on: posted items (handle_posted, task.c) */
    IT_TIMER,
    IT_TRIGGER,
    IT_ABORT,
    IT_FINAL,
    IT_CALL,
    IT_FAIL
};

struct subtask;
/* An IT_CALL item's work, embedded in the poster's object: fn runs on the
 * subtask's thread (a negative return ends the subtask with that error,
 * the job's error set by fn); drop (may be NULL) instead when the run ends
 * first. */
typedef struct weir__mail {
    int (*fn)(struct subtask *st, struct weir__mail *m);
    void (*drop)(struct weir__mail *m);
} weir__mail;

typedef struct item {
    int kind;
    int input; /* the consumer's input (channel) index */
    union {
        batch *b;         /* IT_BATCH */
        weir__mail *mail; /* IT_CALL */
    };
    int64_t wm; /* IT_WATERMARK: the watermark; IT_BARRIER, IT_TRIGGER: the checkpoint id */
} item;

/* A FIFO of items (an input's items held back while it is aligned). */
typedef struct itemq {
    item *v;
    size_t head, n, cap;
} itemq;

typedef struct subtask subtask;

/* A channel (channel.h) between a producer and a consumer subtask. */
typedef weir__channel channel;

typedef struct output {
    sop *from; /* the operator of the chain whose records these are */
    int tag;
    int edge;
    weir_key_fn key;
    void *key_arg;
    int par;           /* the consumer's parallelism */
    channel **targets; /* by consumer subtask index */
    uint32_t rr;
} output;

typedef struct in_state {
    channel *ch;
    int64_t wm;
    int eoi, idle;
    int said_idle; /* its producer sent IT_IDLE 1 and nothing since */
    int64_t last;
    weir_key_fn key;
    void *key_arg;
    uint64_t blocked; /* the barrier it delivered; its items wait in stash */
    itemq stash;
    int side; /* which input of the head operator (its inputs' order) */
} in_state;

typedef struct run run;

/* One timer: a key's time in a domain (timers.c). */
typedef struct weir__timer {
    int64_t when;
    uint64_t hash; /* of (when, key) */
    uint32_t klen;
    int kg;
    int dead; /* deleted, still in its bucket */
    _Alignas(16) uint8_t key[];
} weir__timer;

typedef struct weir__tbucket {
    int64_t when;
    weir__timer **v; /* [head, n): not fired yet, in registration order */
    size_t head, n, cap;
} weir__tbucket;

typedef struct weir__tslot {
    uint64_t hash;
    weir__timer *x; /* NULL: empty */
} weir__tslot;

typedef struct weir__timers {
    weir__tbucket **heap; /* buckets, min-heap by time */
    size_t nb, bcap;
    weir__tbucket **bmap; /* by time: open addressing, at most half full */
    size_t bmcap;
    weir__tbucket *last; /* the last bucket added to */
    weir__tslot *set;    /* the live timers by (when, key): at most half full */
    size_t scap;
    size_t live, dead;
    weir__timer *spare; /* fired timers kept for reuse (small keys) */
    size_t nspare;
} weir__timers;

struct subtask {
    run *r;
    int index, par;
    int here; /* deployed in this process (deploy.c); the rest are empty slots */
    sop **ops;
    int nops;
    weir_ctx *ctx;
    weir_chan *inq; /* the mailbox (sources have one too) */
    in_state *ins;
    int nins;
    output *outs;
    int nouts;
    int64_t wm, max_ts;
    int64_t wm_given; /* the last watermark handed to a controller that takes them */
    int source;
    weir_state_backend *backend;
    struct weir__prefetch *pf;    /* the timers' prefetch round under way (keyed.c), or NULL */
    weir__timers timers[2];       /* by domain (timers.c) */
    struct weir__controller *ctl; /* keyed heads with admit/drain (controller.h); else NULL */
    weir_timer *ptimer;           /* posts IT_TIMER at ptimer_at (timers.c); NULL: none armed */
    int64_t ptimer_at;
    int out_idle;      /* it sent IT_IDLE 1 on its outputs and has been idle since */
    int64_t last_emit; /* sources: when next() last emitted a record */
    uint64_t bp_ns;
    int held;                /* outputs holding frames for their next push (channel.h) */
    _Atomic unsigned posted; /* items posted and not yet taken (sources look between next()s) */
    /* checkpoints (checkpoint.c) */
    uint64_t last_barrier; /* the last checkpoint it took part in */
    int arrived;           /* inputs aligned on the current barrier */
    itemq replay;          /* stashed items to process before the queue */
    uint64_t committed;    /* the last checkpoint its commit hooks saw */
    uint64_t final_id;     /* the job's final checkpoint, once told (IT_FINAL) */
    int at_end;            /* its input ended: it waits for the final checkpoint */
    int final_aborted;     /* ABORT of the final checkpoint (or of WEIR__CK_NO_FINAL) came */
    int64_t max_seen;      /* largest record timestamp seen (watermark lag) */
    uint64_t bp_pushed;
    weir_chan *persist_q;            /* checkpoint puts for the persister (checkpoint.c) */
    struct weir_scope *persist_sc;   /* the persister's scope */
    _Atomic uint64_t persist_newest; /* the latest barrier handed to it */
    _Atomic int finished;
};

typedef struct chain {
    sop **ops;
    int nops, par;
    subtask *subs;
} chain;

struct weir__plan;

struct run {
    weir_job *j;
    weir_run_opts o;
    const struct weir__plan *plan; /* what the run deployed (deploy.c) */
    chain *chains;
    int nchains;
    channel **channels;
    int nchannels, chcap;
    /* checkpoints */
    struct weir__ckpt_link *link; /* checkpoint messages (ckpt_link.h) */
    int worker;    /* another process coordinates checkpoints and holds the directories */
    int spans;     /* its subtasks are not all in this process (a deploy's link) */
    int all_ended; /* at its end: every subtask of the plan had ended (end_run) */
    struct weir__manifest *restore_m; /* the restored checkpoint's manifest */
    _Atomic uint64_t completed;       /* the latest completed (or restored) checkpoint */
    uint64_t restored;
    uint64_t restore_id;      /* the deploy's choice of restore point (0: the latest) */
    uint64_t id_base;         /* checkpoints of this run are numbered after it */
    uint64_t id_floor;        /* the deploy's floor for id_base (deploy.h) */
    _Atomic uint64_t last_id; /* the last checkpoint id the coordinator triggered */
    _Atomic int no_final;     /* the coordinator gave up: no final checkpoint will complete */
    void (*ended)(void *arg, subtask *st, int err);             /* the deploy's (deploy.h) */
    int (*fence)(void *arg, int *token, char *why, size_t cap); /* the deploy's (deploy.h) */
    void (*unfence)(void *arg, int token);
    void *ended_arg;
    weir__dirlocks locks;        /* the checkpoint and sink directories, held while it runs */
    struct weir__storage *store; /* the checkpoint directory's (state/storage.h) */
};

/* checkpoint.c */
int weir__ckpt_prepare(run *r);              /* find the checkpoint to restore, make the link */
int weir__ckpt_restore_subtask(subtask *st); /* after open: state, source position */
int weir__ckpt_barrier(subtask *st, uint64_t id); /* snapshot, forward, ack */
/* At a subtask's end: the puts of its barriers finish; ok (it ended well):
 * their acks go out. 0 or the first put's error. */
int weir__ckpt_end_persists(subtask *st, int ok);
/* Snapshots a persister dropped unwritten because a later barrier came
 * (their checkpoints were abandoned), process-wide: for tests. */
uint64_t weir__ckpt_stale_dropped(void);
/* A subtask learnt that checkpoint id completed (commit hooks) / was
 * abandoned (abort hooks). */
void weir__ckpt_on_complete(subtask *st, uint64_t id);
void weir__ckpt_on_abort(subtask *st, uint64_t id);
/* Whether the run ends through a final checkpoint (it takes checkpoints):
 * a subtask at the end of its input then takes part in it (task.c). */
int weir__ckpt_has_final(const run *r);
/* The subtask reached the end of its input: it asks for the final
 * checkpoint's id (FINAL_REQ) unless it was told already. */
int weir__ckpt_request_final(subtask *st);
/* Its part of final checkpoint id: pre_commit(id) of its operators and
 * the ACK (no state, no position: nothing runs after it). */
int weir__ckpt_final_barrier(subtask *st, uint64_t id);
/* The restored checkpoint is a final one: the job had ended; its subtasks
 * only open (two-phase sinks commit what it covered) and end. */
int weir__ckpt_restored_final(const run *r);
/* The id in "<prefix><digits><suffix>", 0 if name is not one. */
uint64_t weir__ckpt_id_in(const char *name, const char *prefix, const char *suffix);
/* Operators whose checkpointed data is per subtask index (they keep their
 * parallelism across a restore). */
int weir__ckpt_fixed_par(const sop *o);
intptr_t weir__ckpt_coordinator(void *arg); /* the fiber that triggers and completes */
void weir__ckpt_teardown(run *r);           /* also releases the directory locks */
int weir__itemq_push(itemq *q, item it);
int weir__itemq_pop(itemq *q, item *it);

/* filesink.c: the output directory of an exactly-once file sink, NULL for
 * any other operator (the run locks it, checkpoint.c). */
const char *weir__filesink_dir(const sop *o);

/* Post a control item (IT_NOTIFY, IT_TRIGGER, IT_CALL) to a subtask's
 * mailbox, from any thread. 0, or -EPIPE once the subtask's run is over. */
int weir__subtask_post(subtask *st, item it);

/* task.c: a subtask's fiber (runner.c spawns one per subtask here) */
intptr_t weir__subtask_main(void *arg);

/* task.c, for checkpoint.c and the controllers */
int weir__stream_drain(subtask *st);
/* Every record before watermark wm has finished: wm takes effect (the
 * timers it passed fire, the chain's on_watermark hooks run) and goes
 * downstream. */
int weir__stream_release_wm(subtask *st, int64_t wm);
int weir__stream_flush_all(subtask *st);
int weir__stream_broadcast(subtask *st, int kind, int64_t v);

/* Byte keys in keyed state: big-endian integers, and times with the sign
 * bit flipped, so that byte order is numeric order (keyed.c, window.c,
 * join.c). */
static inline void weir__put_time(uint8_t *p, int64_t t)
{
    weir__put_be64(p, (uint64_t)t ^ (UINT64_C(1) << 63));
}

static inline int64_t weir__get_time(const uint8_t *p)
{
    return (int64_t)(weir__get_be64(p) ^ (UINT64_C(1) << 63));
}

/* The step between window starts: the slide of hopping windows, the size
 * of tumbling ones (window.c, join.c). */
static inline int64_t weir__window_step(const weir_window *w)
{
    return w->kind == WEIR_WINDOW_HOPPING ? w->slide : w->size;
}

/* a + b, saturated at the ends of the int64 range (event-time arithmetic). */
static inline int64_t weir__sat_add(int64_t a, int64_t b)
{
    if (b > 0 && a > INT64_MAX - b)
        return INT64_MAX;
    if (b < 0 && a < INT64_MIN - b)
        return INT64_MIN;
    return a + b;
}

/* keyed.c: namespaced keyed state of the current key, and timers. weir's
 * own operators keep their state under names that begin with a control
 * character, which the public state calls refuse: a user function handed
 * the operator's context cannot reach them. */
#define WEIR__STATE_WINDOWS "\x01w" /* window.c: one entry per open window */
#define WEIR__STATE_PANES   "\x01p" /* window.c: a key's hopping panes */
#define WEIR__STATE_JOIN    "\x01j" /* join.c: buffered records */
#define WEIR__STATE_REDUCE  "\x01r" /* graph.c: a keyed reduce's value */
int weir__state_key(weir_ctx *ctx, const char *name, const void *ns, size_t nslen, size_t *klen);
int weir__ns_get(weir_ctx *ctx, const char *state, const void *ns, size_t nslen, const void **val,
                 size_t *len);
int weir__ns_put(weir_ctx *ctx, const char *state, const void *ns, size_t nslen, const void *val,
                 size_t len);
int weir__ns_del(weir_ctx *ctx, const char *state, const void *ns, size_t nslen);
int weir__ns_scan(weir_ctx *ctx, const char *state,
                  int (*fn)(void *arg, const void *ns, size_t nslen, const void *val, size_t vlen),
                  void *arg);
/* Prefetch rounds (keyed.c), for timers.c: before a batch of due timers
 * fires, the state reads their on_timer will make are asked for together
 * and kept until the round ends, served by weir__ns_get; weir__ns_put and
 * weir__ns_del (and weir__ns_forget, for a put made otherwise) drop the
 * key's entry. At most WEIR__PREFETCH_MAX keys a round.
 *   begin   a round is gathered: weir__ns_prefetch adds a key (0, or 1
 *           when the round is full and the key not in it); outside a
 *           gathering it does nothing. -ENOMEM, or 0.
 *   wait    the round's reads go out (one get_batch where the backend has
 *           it) and the subtask's fiber waits for their answers, parked,
 *           not its thread; -ECANCELED (the round is dropped: answers
 *           after it free themselves) or 0.
 *   end     the round's values go (no-op without one).
 * Only on a backend with asynchronous reads: on one that answers at once
 * there is nothing to gain. */
#define WEIR__PREFETCH_MAX 512
typedef struct weir__prefetch weir__prefetch;
int weir__prefetch_begin(subtask *st);
int weir__ns_prefetch(weir_ctx *ctx, const char *state, const void *ns, size_t nslen);
/* The same for a scan of the current key's entries of state whose
 * namespace starts with ns[0..nslen) (on a backend with scan_prefetch:
 * the scan of exactly that prefix then finds them fetched; else nothing). */
int weir__ns_prefetch_scan(weir_ctx *ctx, const char *state, const void *ns, size_t nslen);
int weir__prefetch_wait(subtask *st);
void weir__prefetch_end(subtask *st);
void weir__ns_forget(weir_ctx *ctx, const void *key, size_t klen);
/* Timers (timers.c). */
void weir__timers_free(weir__timers *t);
int weir__timers_fire(subtask *st, int domain, int64_t upto);
int64_t weir__timers_next(subtask *st, int domain);
/* Processing time: keep one runtime timer armed at the earliest
 * processing-time timer (it posts IT_TIMER); disarm at the subtask's end.
 * Both on the subtask's thread. */
int weir__timers_arm(subtask *st);
void weir__timers_disarm(subtask *st);
/* Checkpoints: capture the backend with the timers as entries of their
 * groups; after a restore, move them out of the backend into the heaps. */
int weir__timers_capture(subtask *st, uint64_t id, weir_state_snapshot **out);
int weir__timers_load(subtask *st);

/* runner.c: run the subtasks of plan p that d deploys here (d NULL: all,
 * local channels), as weir_job_run does for the whole job (deploy.h). */
struct weir__deploy;
int weir__job_run_plan(weir_job *j, const struct weir__plan *p, const weir_run_opts *opts,
                       const struct weir__deploy *d);

/* runner.c: a user function's error e (< 0, not -ECANCELED) fails the job
 * naming the operator and what failed, unless something failed first. */
int weir__op_error(weir_ctx *ctx, int e, const char *what);

/* runner.c, for graph.c's built-in operators */
void weir__stream_fail(weir_job *j, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
