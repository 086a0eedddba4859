/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/stream.h - the dataflow API and the runner on one machine.
 *
 * A job is a graph of operators built with this API and run by
 * weir_job_run(). Records are byte strings with an event timestamp; a user
 * function sees one record (weir_rec) and emits any number through its
 * context (weir_emit). A struct is a record of sizeof(struct) bytes; text is
 * a record of its bytes.
 *
 *     weir_job *j = weir_job_new("word-count");
 *     weir_stream *lines = weir_job_source(j, "lines", &gen, 1);
 *     weir_stream *words = weir_stream_flat_map(lines, "split", split_words, NULL);
 *     weir_stream *keyed = weir_stream_key_by(words, word_key, NULL);
 *     weir_stream *counts = weir_stream_reduce(keyed, "count", add_counts, NULL);
 *     weir_stream_sink(counts, "print", &printer, 1);
 *     int e = weir_job_run(j, &(weir_run_opts){.parallelism = 2});
 *     weir_job_free(j);
 *
 * Graph. Every operator has a parallelism and runs as that many subtasks:
 * its own (weir_stream_parallelism), else its input's when it reads only
 * forward edges, else the job's (weir_run_opts.parallelism). An edge says how records go from the
 * subtasks of one operator to those of the next:
 *
 *   forward    subtask i to subtask i (same parallelism; the default)
 *   hash       by key: the key's group (weir/state.h: 128 key groups) picks
 *              the subtask that owns it (weir_stream_key_by)
 *   rebalance  round robin over every downstream subtask
 *   broadcast  to every downstream subtask
 *
 * Operators joined by a forward edge of equal parallelism are chained: they
 * run in one task and a record passes from one to the next as a function
 * call. Other edges carry batches of records between tasks.
 *
 * Flow control. Between two subtasks, records travel in batches (up to
 * WEIR_BATCH_RECORDS records or WEIR_BATCH_BYTES bytes, or sooner when the
 * producer runs out of input). Each channel (producer subtask -> consumer
 * subtask) has a fixed number of credits (opts.credits, default 4): a
 * producer spends one per batch sent and waits when it has none; the
 * consumer returns it when the batch is processed. A slow consumer so
 * stops its producers with bounded memory: at most credits batches in
 * flight per channel. The same protocol will run over sockets between
 * machines; a subtask does not know whether its neighbour is in the same
 * process.
 *
 * Event time. Records carry a timestamp (nanoseconds or any unit the job
 * chooses, consistently). A source says how late its records may be
 * (weir_source_def.max_out_of_orderness): its watermark - "no record at or
 * before this time is still on time" - is the largest timestamp it emitted
 * minus that bound minus one. Everywhere a record with ts > watermark is on
 * time and one with ts <= watermark may be late; a timer at t fires once
 * t <= watermark, a window [start, end) once end - 1 <= watermark. So a
 * record exactly the bound behind the largest is on time. A subtask's watermark is the minimum over
 * its inputs, leaving out idle ones: a source that emitted nothing for its
 * idle_timeout_ms says it is idle, a subtask whose inputs are all idle is
 * idle too, and (with opts.idle_timeout_ms) an input silent that long counts
 * as idle; each until it sends again. When a bounded source ends, its watermark jumps to
 * WEIR_WATERMARK_MAX (end of input), which fires every pending event-time timer downstream.
 *
 * Keyed operators. After weir_stream_key_by() an operator's functions run
 * with a current key (the record's key) and keyed state scoped to it: each
 * keyed subtask owns the key groups of its range and a state backend
 * (weir/state.h, in memory here) holding them. weir_value_get/put/clear
 * read and write the current key's value of a named state.
 *
 * Threads. weir_job_run() runs the subtasks as fibers pinned to the
 * runtime's scheduler threads (round robin), on the runtime of the calling
 * fiber, and returns when every subtask has ended: 0, or the first error a
 * user function or the runner reported (weir_job_error() says which
 * operator and why). The graph must not change while it runs.
 *
 * Ownership: the job owns every stream and operator made from it; strings
 * given to the builder are copied; user args are borrowed and must outlive
 * weir_job_run().
 */
#ifndef WEIR_STREAM_H
#define WEIR_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "resil.h"
#include "rt.h"

#ifdef __cplusplus
extern "C" {
#endif

struct weir_metrics;
typedef struct weir_job weir_job;
typedef struct weir_stream weir_stream;
typedef struct weir_ctx weir_ctx;

#define WEIR_BATCH_RECORDS 1024
#define WEIR_BATCH_BYTES   (64u << 10)
#define WEIR_WATERMARK_MIN INT64_MIN
#define WEIR_WATERMARK_MAX INT64_MAX
#define WEIR_MAX_RECORD    (16u << 20) /* bytes of one record */

/* A record: bytes (8-byte aligned when they came from a batch) and its
 * event timestamp. Valid during the call that received it. */
typedef struct weir_rec {
    const void *data;
    size_t len;
    int64_t ts;
} weir_rec;

/* ---- emitting and context --------------------------------------------------------------- */

/* Emit a record downstream (copied). 0, -E2BIG past WEIR_MAX_RECORD,
 * -ECANCELED when the job is being torn down, -ENOMEM, -EPIPE after the
 * subtask's end of input (the final checkpoint's pre_commit). */
int weir_emit(weir_ctx *ctx, const void *data, size_t len, int64_t ts);
/* The subtask's index (0..parallelism-1) and the operator's parallelism. */
int weir_ctx_subtask(const weir_ctx *ctx);
int weir_ctx_parallelism(const weir_ctx *ctx);
/* The current watermark of this subtask (WEIR_WATERMARK_MIN before any). */
int64_t weir_ctx_watermark(const weir_ctx *ctx);
/* Which input of the operator the current record came from: 0.. in the
 * order of its inputs (a union's streams, a join's left then right). */
int weir_ctx_input(const weir_ctx *ctx);
/* Record a failure with a message: the job stops and weir_job_run()
 * returns err (negative). Returns err, so `return weir_fail(ctx, -EINVAL,
 * "bad input %d", n);` reads naturally. */
int weir_fail(weir_ctx *ctx, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The run's metrics registry (weir_run_opts.metrics), for a user function's
 * own counters (register families once, in open()); NULL when the run has
 * none. */
struct weir_metrics *weir_ctx_metrics(const weir_ctx *ctx);
/* The checkpoint this run restored from (0: none). */
uint64_t weir_ctx_restored(const weir_ctx *ctx);
/* A directory for the operator's own files (exactly-once sinks): the
 * checkpoint directory, or NULL without checkpoints. */
const char *weir_ctx_checkpoint_dir(const weir_ctx *ctx);
/* The latest checkpoint that completed in this run or was restored (0: none). */
uint64_t weir_ctx_completed(const weir_ctx *ctx);
/* 1 when the run ends through a final checkpoint (it takes checkpoints):
 * after finish(), pre_commit() and commit() run once more, for the job's
 * final checkpoint, so a two-phase sink commits its tail through them; 0
 * without checkpoints, where a two-phase sink commits the rest in
 * finish(). See weir_op_def.pre_commit. */
int weir_ctx_final_checkpoint(const weir_ctx *ctx);

/* Keyed operators: the current record's (or firing timer's, or
 * weir_keys_iterate's) key - NULL outside one, e.g. in on_watermark or
 * finish, where keyed state and timers are -EINVAL too. No alignment
 * promised: memcpy it out to read a number. */
const void *weir_ctx_key(const weir_ctx *ctx, size_t *len);

/* Value state of the current key, by state name. A state is its name (1
 * to WEIR_STATE_NAME_MAX bytes, any number of states per operator; names
 * beginning with a control character are kept for weir's own windows,
 * joins and reduce, and refused like a name of another length): the
 * same name finds the same entries in every run and subtask, so a restore,
 * at any parallelism, finds each state whatever order the run touches
 * them in. get: 0 with a view (valid until the next state call), or
 * -ENOENT. -EINVAL outside a keyed operator or for a name of another
 * length (which also fails the job, naming it). */
#define WEIR_STATE_NAME_MAX 128
int weir_value_get(weir_ctx *ctx, const char *state, const void **val, size_t *len);
int weir_value_put(weir_ctx *ctx, const char *state, const void *val, size_t len);
int weir_value_clear(weir_ctx *ctx, const char *state);

/*
 * Map state of the current key: entries by user key, iterated in ascending
 * byte order of the user keys. List state: values appended in order. Views
 * are valid until the next state call; the iteration callback returns
 * non-zero to stop (and that value is returned) and must not modify state.
 */
int weir_map_get(weir_ctx *ctx, const char *state, const void *ukey, size_t uklen, const void **val,
                 size_t *len);
int weir_map_put(weir_ctx *ctx, const char *state, const void *ukey, size_t uklen, const void *val,
                 size_t len);
int weir_map_delete(weir_ctx *ctx, const char *state, const void *ukey, size_t uklen);
typedef int (*weir_entry_fn)(void *arg, const void *ukey, size_t uklen, const void *val,
                             size_t len);
int weir_map_iterate(weir_ctx *ctx, const char *state, weir_entry_fn fn, void *arg);
int weir_list_add(weir_ctx *ctx, const char *state, const void *val, size_t len);
/* fn gets each value (ukey is the entry's position, 8 bytes). */
int weir_list_iterate(weir_ctx *ctx, const char *state, weir_entry_fn fn, void *arg);
int weir_list_clear(weir_ctx *ctx, const char *state);

/*
 * Reads that may answer later. With a state backend whose reads go to a
 * remote tier (weir_state_backend_ops.get_async), a record need not hold
 * up its subtask while its state is fetched: process() asks for the value
 * with a continuation and returns; the subtask goes on with records of
 * other keys, and fn runs when the value is there - in the record's
 * context (its key, state calls, timers and emits as in process()), on the
 * subtask's thread - with err 0 and a view of the value (valid during the
 * call), -ENOENT, or the read's error. fn may read again; the record is
 * done when a continuation returns without reading again. in is the
 * record being processed (fn gets the same record, perhaps a copy). A
 * later record of the same key runs only after this one is done, and a
 * watermark takes effect only once every record before it is done (docs/
 * state.md, "The async execution controller"). On a backend that answers
 * at once (the in-memory one), and outside process() (timers, finish), fn
 * runs before the call returns. The call returns 0, a negative errno, or
 * fn's value when fn ran (a negative one fails the record as process()
 * failing would). A value of length 0 is a non-NULL view either way.
 */
typedef int (*weir_state_cont)(weir_ctx *ctx, void *state, const weir_rec *in, int err,
                               const void *val, size_t len, void *arg);
int weir_value_get_async(weir_ctx *ctx, const weir_rec *in, const char *state, weir_state_cont fn,
                         void *arg);
int weir_map_get_async(weir_ctx *ctx, const weir_rec *in, const char *state, const void *ukey,
                       size_t uklen, weir_state_cont fn, void *arg);

/*
 * How a keyed operator's reads go out under the async execution controller
 * (set on the operator's own stream, before weir_job_run; docs/state.md,
 * "Read coalescing and deadline-aware ordering"):
 *
 * - Read coalescing (the default where the backend has get_batch): reads
 *   the records issue while the subtask has nothing else to run go to the
 *   backend as one batch, one round trip. WEIR_READS_NO_COALESCE sends each
 *   read on its own.
 * - WEIR_READS_DEADLINE_ORDER: among the answers that are ready together,
 *   the reads with the lowest order key (weir_ctx_read_order: a deadline,
 *   say) resume their records first; equal keys keep their order of
 *   arrival. It reorders only records of distinct keys (the key gate) and
 *   never moves one across a watermark. Coalescing resumes a batch's
 *   answers as they come, so with both the ordering is inert: the run logs
 *   a warning and goes on coalescing.
 *
 * NULL, or -EINVAL (also weir_job_error) for unknown flags or a stream that
 * no operator made. On a backend whose reads answer at once, nothing
 * changes.
 */
enum { WEIR_READS_NO_COALESCE = 1, WEIR_READS_DEADLINE_ORDER = 2 };
weir_stream *weir_stream_reads(weir_stream *s, int flags);
/* The order key of the reads the current record issues from here on (0
 * until set; a continuation starts with its read's): lower resumes first
 * under WEIR_READS_DEADLINE_ORDER. */
void weir_ctx_read_order(weir_ctx *ctx, int64_t order);

/*
 * The keys of a state: fn runs once for every key of this subtask that has
 * an entry of `state` (value, map or list; restored ones too), with that
 * key current, so it may read and write the key's state (clear it, say),
 * register timers and emit. Keys come in key-group order, then shorter
 * before longer and in byte order within a group. fn returns non-zero to stop (and that value is
 * returned). Called from finish() it is the per-key end of input: keep
 * the running value in value state while records come, and emit one
 * result per key there (examples/wordcount_job.c). It reads every entry of
 * the state once; the keys of one key group are held at a time. 0, fn's
 * value, -EINVAL outside a keyed operator or with a NULL state or fn,
 * -ENOMEM. The caller's current key (if any) is current again after.
 */
typedef int (*weir_key_visit_fn)(weir_ctx *ctx, const void *key, size_t len, void *arg);
int weir_keys_iterate(weir_ctx *ctx, const char *state, weir_key_visit_fn fn, void *arg);

/*
 * Timers of the current key (keyed operators). An event-time timer fires
 * when the subtask's watermark reaches `when` (end of input fires them
 * all, and those finish() registers fire right after it returns); a
 * processing-time timer when weir_time_now() does. on_timer() then
 * runs with that key current. One timer per (key, domain, time): registering
 * it again changes nothing. Timers fire in time order across the subtask's
 * keys (those of one time in the order they were registered), and are
 * keyed state: a snapshot holds them, a rescaled restore moves them with
 * their keys. -EINVAL outside a keyed operator, or for when == INT64_MAX;
 * -E2BIG for a key longer than WEIR_STATE_MAX_KEY - 13 bytes. Deleting a
 * timer that is not there returns 0.
 */
enum { WEIR_TIME_EVENT = 0, WEIR_TIME_PROCESSING = 1 };
int weir_timer_register(weir_ctx *ctx, int domain, int64_t when);
int weir_timer_delete(weir_ctx *ctx, int domain, int64_t when);

/* ---- sources ---------------------------------------------------------------------------- */

/*
 * A source subtask calls next() again and again; each call emits records
 * (as many as it likes, a batch's worth is a good size) and returns 0 to be
 * called again, 1 when the source has ended (bounded input), or a negative
 * errno to fail the job. open() makes the subtask's state (*state), close()
 * frees it; both may be NULL. close() also runs after an open() that failed
 * once it had stored a state. An unbounded source never returns 1; it ends
 * when the job is cancelled.
 */
typedef struct weir_source_def {
    int (*open)(weir_ctx *ctx, void *arg, void **state);
    int (*next)(weir_ctx *ctx, void *state);
    void (*close)(void *state);
    /* Watermarks: the largest timestamp emitted so far minus this bound
     * (>= 0) minus one. -1: the source emits no watermarks (processing-time
     * jobs). */
    int64_t max_out_of_orderness;
    /* Idleness: a source whose next() calls emit nothing for this long says
     * so to its consumers, which leave it out of their watermark minimum
     * until it emits again (a quiet partition must not hold every window
     * back). 0: weir_run_opts.idle_timeout_ms, which also covers a source
     * that waits inside next() (its consumers see it silent). */
    int64_t idle_timeout_ms;
    /* Checkpoints (both NULL: the source cannot be rewound, and a restored
     * job starts it from the beginning). snapshot() gives the subtask's
     * position as bytes (*buf malloc'd, freed by the runner) at a barrier;
     * restore() gets them back after open() when a job restarts from a
     * checkpoint. */
    int (*snapshot)(weir_ctx *ctx, void *state, void **buf, size_t *len);
    int (*restore)(weir_ctx *ctx, void *state, const void *buf, size_t len);
} weir_source_def;

weir_stream *weir_job_source(weir_job *j, const char *name, const weir_source_def *def, void *arg);

/*
 * Lines of a file, or of a TCP connection, as records (without the line
 * end; a CR before it is dropped too). A file is split among the source's
 * subtasks by byte ranges, each line read by exactly one subtask, and is
 * checkpointed by offset (a restore goes on after the last checkpointed
 * line). A TCP source connects from every subtask and ends at EOF; a
 * restore cannot rewind it. Timestamps: o->timestamp(line) when given, else
 * the line's byte offset (files) or weir_time_now() (TCP); o NULL: no
 * watermarks.
 */
typedef struct weir_line_opts {
    int64_t (*timestamp)(const char *line, size_t len, void *arg);
    void *arg;
    int64_t max_out_of_orderness; /* as weir_source_def's; -1: no watermarks */
} weir_line_opts;
weir_stream *weir_job_source_file(weir_job *j, const char *name, const char *path,
                                  const weir_line_opts *o);
weir_stream *weir_job_source_tcp(weir_job *j, const char *name, const char *host, int port,
                                 const weir_line_opts *o);

/* CSV: split a line at sep into at most max fields (views into the line;
 * a quoted field is given without its quotes, "" inside still doubled).
 * The field count, -E2BIG past max, -EBADMSG for an unterminated quote or
 * text after a closing quote. weir_csv_unquote copies a field with "" made
 * " (NUL-terminated): its length, or -ENOSPC. */
typedef struct weir_csv_field {
    const char *p;
    size_t len;
    int quoted;
} weir_csv_field;
int weir_csv_split(const char *line, size_t len, char sep, weir_csv_field *out, int max);
ssize_t weir_csv_unquote(const weir_csv_field *f, char *buf, size_t cap);

/* ---- transformations ------------------------------------------------------------------ */

/* A one-record function: emits 0..n records through ctx. 0 or a negative
 * errno (fails the job). */
typedef int (*weir_rec_fn)(weir_ctx *ctx, const weir_rec *in, void *arg);
/* A predicate: 1 keeps the record, 0 drops it, < 0 fails the job. */
typedef int (*weir_filter_fn)(const weir_rec *in, void *arg);
/* The key of a record: *key / *len (may point into the record). */
typedef int (*weir_key_fn)(const weir_rec *in, void *arg, const void **key, size_t *len);
/* Reduce: combine the running value acc with in into out (out->data may
 * point into acc, in, or memory of arg's that stays valid until the next
 * call); the result is stored as the key's value and emitted. A key's first
 * record becomes its value as it is (fn is not called for it), so records
 * and the value have one shape; weir_stream_aggregate is for a value of
 * another shape. */
typedef int (*weir_reduce_fn)(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg);

/* map and flat_map are the same function type: a map emits exactly one
 * record, a flat_map any number (the runner does not check). */
weir_stream *weir_stream_map(weir_stream *s, const char *name, weir_rec_fn fn, void *arg);
weir_stream *weir_stream_flat_map(weir_stream *s, const char *name, weir_rec_fn fn, void *arg);
weir_stream *weir_stream_filter(weir_stream *s, const char *name, weir_filter_fn fn, void *arg);

/* The edges out of s: how the next operator's subtasks receive s's records.
 * A union is partitioned through its parts: key_by (rebalance...) each
 * stream, then unite them. */
weir_stream *weir_stream_key_by(weir_stream *s, weir_key_fn fn, void *arg);
weir_stream *weir_stream_rebalance(weir_stream *s);
weir_stream *weir_stream_broadcast(weir_stream *s);

/* Keyed (after key_by): a running reduce per key, emitting every update. */
weir_stream *weir_stream_reduce(weir_stream *s, const char *name, weir_reduce_fn fn, void *arg);

/*
 * Windows (keyed, event time). Each record joins the windows its timestamp
 * falls in: tumbling windows of `size` ([k*size, (k+1)*size)), hopping
 * windows of `size` every `slide`, or sessions that close after `gap`
 * without a record (a record starts [ts, ts+gap) and merges every session it
 * overlaps). fn folds a window's records (for sessions it also folds two
 * sessions' values together when they merge, so it must be associative).
 *
 * A window fires when the watermark reaches its end - 1: it emits one
 * record, a weir_window_result header followed by the folded bytes, with
 * timestamp end - 1. allowed_lateness keeps a fired window's state that much
 * longer: a record arriving late but within it updates the window, which
 * fires again at once with the new value. A record too late for every
 * window it belongs to goes to the late side output
 * (weir_stream_side(window_stream)) unchanged. Windows live in keyed state
 * and fire from event-time timers: a watermark touches only the windows it
 * closes, never every key.
 */
enum { WEIR_WINDOW_TUMBLING = 1, WEIR_WINDOW_HOPPING = 2, WEIR_WINDOW_SESSION = 3 };
typedef struct weir_window {
    int kind;
    int64_t size;             /* tumbling, hopping */
    int64_t slide;            /* hopping */
    int64_t gap;              /* session */
    int64_t allowed_lateness; /* >= 0 */
} weir_window;
typedef struct weir_window_result {
    int64_t start, end; /* [start, end); the folded bytes follow */
} weir_window_result;
weir_stream *weir_stream_window(weir_stream *s, const char *name, const weir_window *w,
                                weir_reduce_fn fn, void *arg);

/*
 * Joins of two keyed streams (both after key_by, keys compared as bytes).
 * fn gets each matching pair and emits what it likes (the timestamp to give
 * is the caller's; max(left.ts, right.ts) is usual).
 *
 * Interval join: pairs where right.ts is in [left.ts + lower, left.ts +
 * upper] (lower <= upper, either may be negative). Each side's records are
 * kept, ordered by time, until the watermark shows no partner can come (a
 * left record until the watermark reaches ts + upper, a right one ts -
 * lower); a record matches by a seek into the other side's buffer, O(log n
 * + matches). A record at or below the watermark when it arrives goes to
 * the side output.
 *
 * Window join: pairs in the same tumbling or hopping window (w.kind), emitted
 * when the window fires (the watermark reaches its end - 1).
 */
typedef int (*weir_join_fn)(weir_ctx *ctx, const weir_rec *left, const weir_rec *right, void *arg);
weir_stream *weir_stream_interval_join(weir_stream *left, weir_stream *right, const char *name,
                                       int64_t lower, int64_t upper, weir_join_fn fn, void *arg);
weir_stream *weir_stream_window_join(weir_stream *left, weir_stream *right, const char *name,
                                     const weir_window *w, weir_join_fn fn, void *arg);

/*
 * Keyed running aggregate with an accumulator of another shape than the
 * records: add() folds a record into the accumulator (acc NULL for the key's
 * first; *out the new accumulator, which may point into acc, in or arg's
 * memory), result() turns the accumulator into the record emitted after
 * every update (NULL: the accumulator itself is emitted).
 */
typedef struct weir_agg_def {
    int (*add)(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg);
    int (*result)(const weir_rec *acc, weir_rec *out, void *arg);
} weir_agg_def;
weir_stream *weir_stream_aggregate(weir_stream *s, const char *name, const weir_agg_def *def,
                                   void *arg);

/*
 * Async lookups (enrichment): each record asks an HTTP service something
 * and the answer becomes zero or more output records, with many lookups in
 * flight per subtask instead of one at a time.
 *
 * request() turns a record into an HTTP request (method, URL, body),
 * copied as soon as request() returns: its pointers may point into the
 * record, into arg's memory or into req->buf (room for a URL made with
 * snprintf), never into request()'s own stack. The request runs
 * on a fiber of the job's runtime, through the subtask's HTTP client pool
 * (weir/http.h), wrapped in a circuit breaker and a retry with backoff
 * (weir/resil.h): each attempt asks the breaker first (open: the attempt
 * fails at once with -EAGAIN) and has its own deadline, timeout_ms after
 * it starts; an attempt fails on a transport error, a timeout or a status
 * of 429 or 5xx (-EREMOTEIO), and fails the breaker too. When the answer
 * is back, result() runs on the subtask's thread, in the record's context
 * (keyed input: its key; emits as in process()), with resp->err 0 and the
 * response, or resp->err < 0 when the lookup finally failed (the attempts
 * spent, a permanent error, the breaker open): the failure is the result
 * function's to handle (drop the record, emit a default, or fail the job
 * with weir_fail). With fail_on_error, a lookup that finally fails fails
 * the job instead, naming the operator, the URL and the error, and
 * result() sees only answers.
 *
 * Order. ordered: results leave in input order (a quick answer waits for
 * the slower ones before it). Unordered: each as its answer comes. Either
 * way no result crosses a watermark: a watermark leaves only after every
 * record before it has been emitted, and the results of records after it
 * go after it (their lookups start while it waits).
 *
 * Capacity: at most `capacity` lookups in flight per subtask (ordered: the
 * answered ones waiting for an earlier one count too); at capacity the
 * subtask stops taking input until one is emitted - backpressure, not an
 * error. Checkpoints: a barrier waits until every lookup in flight is
 * answered and its results emitted, so a snapshot holds no lookup and a
 * restore re-issues none (the records after the barrier come again from
 * the source). Guide: docs/stream.md, "Async lookups".
 */
#define WEIR_LOOKUP_BUF 1024
typedef struct weir_lookup_req {
    const char *method;       /* NULL: "GET" */
    const char *url;          /* http://host[:port]/path[?query] */
    const char *content_type; /* of the body; NULL: none */
    const void *body;         /* NULL: no body */
    size_t body_len;
    char buf[WEIR_LOOKUP_BUF]; /* scratch for the above: the operator copies it */
} weir_lookup_req;

typedef struct weir_lookup_resp {
    int err;          /* 0: a response below; < 0: the lookup failed (see above) */
    int status;       /* the last response's status (0: none came) */
    const char *body; /* the body (NUL-terminated; "" when none) */
    size_t body_len;
    int attempts; /* attempts made */
} weir_lookup_resp;

#define WEIR_LOOKUP_CAPACITY    100
#define WEIR_LOOKUP_TIMEOUT_MS  10000
#define WEIR_LOOKUP_MAX_HEADERS 16

/* A header field every lookup request carries. value may be "env://VAR"
 * (weir/base.h weir_env_ref): read from the environment of the process
 * that runs the operator (a worker) when it opens, so a token never
 * travels in the job's arguments or its plan; unset, the job fails naming
 * the variable. */
typedef struct weir_lookup_header {
    const char *name;  /* a token; not Content-Type, Content-Length, Host or Connection */
    const char *value; /* no CR, LF or NUL */
} weir_lookup_header;

typedef struct weir_lookup_def {
    /* Fill *req for record in: 0, or a negative errno (fails the job). */
    int (*request)(weir_ctx *ctx, const weir_rec *in, weir_lookup_req *req, void *arg);
    /* The answer for in: emit what it gives. 0 or a negative errno. */
    int (*result)(weir_ctx *ctx, const weir_rec *in, const weir_lookup_resp *resp, void *arg);
    int ordered;        /* 1: results in input order; 0: as answers come */
    int capacity;       /* lookups in flight per subtask; 0: WEIR_LOOKUP_CAPACITY */
    int64_t timeout_ms; /* per attempt; 0: WEIR_LOOKUP_TIMEOUT_MS */
    int fail_on_error;  /* a lookup that finally fails fails the job */
    /* Retries (zero: one attempt, no retry; weir_retry_policy's defaults
     * for the other fields) and the breaker (zero: its defaults, 5
     * failures in a row open it for 30 s), one per subtask. no_breaker:
     * none. Copied; their args are borrowed. */
    weir_retry_policy retry;
    weir_breaker_opts breaker;
    int no_breaker;
    /* Header fields of every request (at most WEIR_LOOKUP_MAX_HEADERS),
     * copied when the operator is made. */
    const weir_lookup_header *headers;
    int nheaders;
} weir_lookup_def;

/* The lookup operator reading s (keyed or not). NULL with the job's error
 * for a NULL request or result, a negative capacity or timeout, a bad
 * retry policy or breaker option, or a header that is not allowed (too
 * many, a name that is not a token or one the client writes itself, a
 * value with CR, LF or NUL, a malformed env:// reference). */
weir_stream *weir_stream_lookup(weir_stream *s, const char *name, const weir_lookup_def *def,
                                void *arg);

/* The side output of the operator that made s (windows: late records). */
weir_stream *weir_stream_side(weir_stream *s);
/* Emit to the side output (operators that have one). */
int weir_emit_side(weir_ctx *ctx, const void *data, size_t len, int64_t ts);

/* A general operator: process() per record, on_watermark() when the
 * subtask's watermark advances, finish() once at end of input (it may
 * still emit). Any may be NULL but process. Keyed when it follows key_by. */
typedef struct weir_op_def {
    int (*open)(weir_ctx *ctx, void *arg, void **state);
    int (*process)(weir_ctx *ctx, void *state, const weir_rec *in);
    int (*on_watermark)(weir_ctx *ctx, void *state, int64_t watermark);
    int (*finish)(weir_ctx *ctx, void *state);
    void (*close)(void *state);
    /* Keyed operators: a timer of the current key fired (domain
     * WEIR_TIME_EVENT or WEIR_TIME_PROCESSING, at time when). */
    int (*on_timer)(weir_ctx *ctx, void *state, int domain, int64_t when);
    /* Two-phase commit (exactly-once sinks). pre_commit() runs at the
     * barrier of checkpoint id: make everything received so far durable but
     * not yet visible. commit() runs once that checkpoint completed (every
     * subtask acknowledged it and its COMPLETED marker is written). On a
     * restore, open() finds pending work with weir_ctx_restored(): commit
     * what belongs to checkpoints up to it, drop the rest.
     * A bounded job with checkpoints ends through one job-wide final
     * checkpoint: once a subtask's input ended and finish() ran, its
     * pre_commit(id) runs for the final id, and its commit(id) once every
     * subtask of the job got there and the checkpoint completed; then the
     * subtask ends (weir_ctx_final_checkpoint() says whether this follows).
     * The end of input has gone out by then: weir_emit() from that
     * pre_commit() returns -EPIPE (flush in finish()).
     * A job restored from its final checkpoint had ended: its operators
     * are opened (open() commits what is pending up to it), nothing else
     * runs, and the job completes. */
    int (*pre_commit)(weir_ctx *ctx, void *state, uint64_t id);
    int (*commit)(weir_ctx *ctx, void *state, uint64_t id);
    /*
     * The async-execution seam (keyed operators whose state reads may
     * complete later, weir_state_get_async). admit() sees each record before
     * process(): 0 lets it through now; 1 means the operator's controller
     * took it (copying what it needs) and will run it later with
     * weir_ctx_process() - e.g. after an earlier record of the same key
     * finished. drain() is called before anything that must see every
     * earlier record done: a watermark (and the timers it fires), a
     * checkpoint barrier's snapshot, the end of input. It returns once
     * nothing is in flight (it may wait: it runs in the subtask's fiber), or
     * a negative errno.
     */
    int (*admit)(weir_ctx *ctx, void *state, const weir_rec *in);
    int (*drain)(weir_ctx *ctx, void *state);
    /* Checkpoint id was abandoned (it failed, or was not done within
     * checkpoint_timeout_ms) and will never complete. What pre_commit(id)
     * prepared stays pending: the next completed checkpoint's commit()
     * covers it, a restore drops it. An operator that holds resources per
     * checkpoint (a transaction) can release them here. */
    int (*abort)(weir_ctx *ctx, void *state, uint64_t id);
} weir_op_def;

/* Run the operator's process() on a record its controller held back, with
 * its key current again (key bytes as the key function gave them). */
int weir_ctx_process(weir_ctx *ctx, const void *key, size_t len, const weir_rec *in);

weir_stream *weir_stream_process(weir_stream *s, const char *name, const weir_op_def *def,
                                 void *arg);

/* Several streams into one operator input (their records interleave). */
weir_stream *weir_stream_union(weir_stream *const *streams, int n);

/* The parallelism of the operator that made s (before weir_job_run). */
weir_stream *weir_stream_parallelism(weir_stream *s, int parallelism);

/* ---- sinks ------------------------------------------------------------------------------ */

/* A sink is an operator that emits nothing: its process() consumes. */
int weir_stream_sink(weir_stream *s, const char *name, const weir_op_def *def, void *arg);

/* The parallelism of the sink named `sink` (any of the sinks below too),
 * before weir_job_run: a sink has no stream of its own to give to
 * weir_stream_parallelism. Without one it takes its input's (forward
 * edges) or the job's. An exactly-once sink must keep its parallelism
 * across a restore, so fix it here and read through a rebalance when the
 * operators before it are rescaled. 0, or -EINVAL (no such sink, not a
 * sink, parallelism outside 1..128; also stored in weir_job_error). */
int weir_job_sink_parallelism(weir_job *j, const char *sink, int parallelism);

/*
 * The exactly-once file sink: each record becomes a line (a newline is added
 * unless it ends with one) in part files under dir, committed with the
 * checkpoints: part-<subtask>-<id> appears once checkpoint id completed, and
 * the rest at the end of input. After a crash and a restore the committed
 * files hold every record once: no line lost, none repeated. Without
 * checkpoints everything is committed at the end. The sink's parallelism
 * must stay the same across restores (weir_job_sink_parallelism, behind a
 * rebalance). A run holds dir for its lifetime
 * (see checkpoint_dir in weir_run_opts): another run writing into it is
 * refused with -EBUSY; two file sinks of one job may not share a directory
 * (-EINVAL: their part files would collide), though a sink may write into
 * the checkpoint directory. Guide: docs/stream.md.
 */
int weir_stream_file_sink(weir_stream *s, const char *name, const char *dir);

/* Records as lines on stdout (whole lines from every subtask). */
int weir_stream_print(weir_stream *s, const char *name);
/* Records as lines in a text file: path, or path.<subtask> at parallelism
 * > 1; written as they come (no transactions: see weir_stream_file_sink). */
int weir_stream_text_sink(weir_stream *s, const char *name, const char *path);

/* An in-memory collector for tests: every record reaching it, copied, from
 * every subtask (order within a subtask kept). */
typedef struct weir_collector weir_collector;
weir_collector *weir_collector_new(void);
void weir_collector_free(weir_collector *c);
int weir_stream_collect(weir_stream *s, const char *name, weir_collector *c);
size_t weir_collector_count(const weir_collector *c);
/* The i-th record collected (in arrival order across subtasks). */
const weir_rec *weir_collector_get(const weir_collector *c, size_t i);

/* ---- jobs ------------------------------------------------------------------------------- */

typedef struct weir_run_opts {
    int parallelism; /* operators without their own: 1 */
    int credits;     /* batches in flight per channel: 4 */
    /* An input silent this long leaves the watermark minimum, and a source
     * without its own idle_timeout_ms that emits nothing this long says it
     * is idle: 0 = never. */
    int64_t idle_timeout_ms;
    int threads; /* 0: every thread of the runtime */
    /* Checkpoints: every checkpoint_interval_ms (0: none) into
     * checkpoint_dir; restore: start from the latest completed checkpoint
     * there (none yet: start afresh); retain: completed checkpoints kept
     * (default 1). A run holds checkpoint_dir and every file sink's
     * directory from its start to its end (flock on DIR/.lock, which the
     * kernel drops when the process dies, even by SIGKILL): a second run on
     * one of them, in another process or in this one, is refused before it
     * touches anything: weir_job_run returns -EBUSY and weir_job_error
     * names the directory and the holder's pid. A process forked during a
     * run shares its locks. See docs/stream.md, "Checkpoints". */
    const char *checkpoint_dir;
    int64_t checkpoint_interval_ms;
    int restore;
    int retain;
    /* A checkpoint not acknowledged by every subtask this long after its
     * trigger is abandoned (ABORT, weir_op_def.abort) and the job goes on;
     * 0: 10 minutes. */
    int64_t checkpoint_timeout_ms;
    /* Per-operator metrics (labels operator, subtask) go to this registry
     * (weir/metrics.h), updated as batches go by: weir_stream_records_in_total,
     * weir_stream_records_out_total, weir_stream_backpressure_seconds_total,
     * weir_stream_watermark and weir_stream_watermark_lag (the largest
     * timestamp the subtask has seen minus its watermark). NULL: none. */
    struct weir_metrics *metrics;
    /* Where keyed state lives: a backend URI (weir/state.h,
     * weir_state_backend_open). NULL: "memory:". */
    const char *state_backend;
} weir_run_opts;

/* A new, empty job. NULL with errno. */
weir_job *weir_job_new(const char *name);
void weir_job_free(weir_job *j);
/* The first error of building the graph (a NULL stream passed on, a bad
 * parallelism, a keyed operator without key_by...), checked by run. */
const char *weir_job_error(const weir_job *j);
/* Run the job to the end (bounded sources) or until the calling task is
 * cancelled (-ECANCELED). Fibers only. 0, or the first failure (see
 * weir_job_error). Returns only once every task of the run has ended,
 * cancelled or not: nothing of the run outlives the call. */
int weir_job_run(weir_job *j, const weir_run_opts *opts);

/* Checkpoints of the run in progress or the last one (safe to read during
 * a run): completed, the latest completed id, the restored id. */
typedef struct weir_ckpt_stats {
    uint64_t completed, latest, restored;
    uint64_t aborted;         /* abandoned: failed or timed out */
    int64_t last_duration_ns; /* trigger to COMPLETED marker, of the latest */
} weir_ckpt_stats;
void weir_job_ckpt_stats(const weir_job *j, weir_ckpt_stats *st);

/* The latest checkpoints of the run in progress or the last one (at most
 * WEIR_CKPT_HISTORY), each from its trigger on: what an operator's console
 * shows. Times are the wall clock (Unix ms). */
#define WEIR_CKPT_HISTORY 64
enum { WEIR_CKPT_IN_PROGRESS = 0, WEIR_CKPT_COMPLETED = 1, WEIR_CKPT_ABORTED = 2 };
typedef struct weir_ckpt_info {
    uint64_t id;
    int state;           /* WEIR_CKPT_* */
    int final;           /* a bounded job's final checkpoint */
    int64_t trigger_ms;  /* when it was triggered */
    int64_t end_ms;      /* when it completed or was abandoned; 0 in progress */
    int64_t duration_ns; /* trigger to end */
    uint64_t bytes;      /* completed: the state and positions its subtasks wrote
                            (a final checkpoint writes none: nothing runs after it) */
    char reason[160];    /* abandoned: why */
} weir_ckpt_info;
/* Copy the latest min(cap, how many) into out, oldest first: how many. */
int weir_job_ckpt_history(const weir_job *j, weir_ckpt_info *out, int cap);

/* The operators of the job, in the order they were added (a source first):
 * how many, and the name and kind of the i-th. */
enum { WEIR_OP_SOURCE = 0, WEIR_OP_OPERATOR = 1, WEIR_OP_SINK = 2 };
int weir_job_ops(const weir_job *j);
const char *weir_job_op_name(const weir_job *j, int i);
int weir_job_op_kind(const weir_job *j, int i);

/* Counters per operator (by name): of the run in progress (updated as
 * batches go by; safe to read from any thread while weir_job_run() runs,
 * e.g. for a progress line), or of the last run. */
typedef struct weir_op_stats {
    uint64_t records_in, records_out;
    int64_t watermark;        /* the lowest watermark among its subtasks at the end */
    uint64_t backpressure_ns; /* time its subtasks waited for credits */
} weir_op_stats;
int weir_job_op_stats(const weir_job *j, const char *op, weir_op_stats *st);
/* The same for one subtask of the i-th operator (weir_job_op_name's i):
 * its records in and out, the time it waited for credits (counted on the
 * last operator of its chain, the one whose output crosses a channel) and
 * its watermark now (WEIR_WATERMARK_MIN before its first). Counts of the
 * run in progress, or of the last one; a subtask that runs in another
 * process (a cluster's other workers) reads as zeros. 0, -EINVAL (a NULL
 * argument), -ENOENT (no such operator), -ERANGE (subtask past the
 * operator's parallelism, or no run yet). */
int weir_job_op_subtask_stats(const weir_job *j, int i, int subtask, weir_op_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* WEIR_STREAM_H */
