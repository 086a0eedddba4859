/* SPDX-License-Identifier: Apache-2.0 */
/*
 * storage.h - where checkpoints live: named blobs behind a small
 * interface, in the spirit of SQLite's VFS, so the engine never touches a
 * file system itself.
 *
 * A store holds blobs under names. A name is a relative path of
 * components separated by '/' ("COMPLETED-7", "chk-7/count.0.state"): not
 * empty, at most WEIR__STORAGE_NAME_MAX bytes, no empty, "." or ".."
 * component, no component beginning with '.' (the implementations keep
 * their temporary files and locks under such names) and no leading '/'.
 * Anything else is -EINVAL (-ENAMETOOLONG when too long) before the store
 * is asked.
 *
 * Calls: put (publish a blob atomically: a reader sees the old blob or the
 * whole new one, and once put returns the blob survives a crash), get (a
 * whole blob), list (the names one level under a prefix, as an object
 * store lists with a '/' delimiter: "chk-7/" lists "chk-7/MANIFEST.json" and
 * "chk-7/count.0.state"; "" lists "COMPLETED-7" and "chk-7/", a trailing
 * '/' marking a "directory") and delete (a blob, or with a name ending in
 * '/' every blob under that prefix: pruning a checkpoint). A missing blob
 * is -ENOENT for get and delete; list of a missing prefix is empty. A
 * store may also read a range of a blob (get_range: one block of a large
 * run, for the remote-read backend's cold reads, state/remote.c).
 *
 * Asynchrony. An implementation's methods are plain blocking calls (as a
 * VFS's are); this module never runs them on the caller's thread when the
 * caller is a task: each call is a job on the runtime's blocking pool
 * (weir_blocking_start_ex) that the caller awaits, so a scheduler thread
 * runs its other tasks while a file is written and fsynced. The start
 * functions give a request whose weir_op a fiber waits on (weir_op_wait)
 * or a stackless task polls (weir_op_poll); weir__storage_end collects the
 * result (only once the op is done: the request is the op's memory). The
 * wait is shielded: neither a cancel of the task nor
 * weir_op_cancel cuts it short, since a call, once started, must finish
 * (a put is durable or failed before its caller goes on; a cleanup runs
 * even in a cancelled task), as the synchronous file calls it replaces. The weir__storage_put /
 * _get / _list / _delete wrappers do all three for a fiber, and run the call inline on a thread
 * that is not a task at all (a tool, a test's main), where blocking hurts nobody.
 *
 * Ownership. A store is counted: weir__storage_open gives one reference,
 * every request in flight holds one, so weir__storage_close may come
 * before a request's pool job has let go of the store. The
 * bytes of a put are handed over with a weir__blob: the store calls
 * release(owner) once, on whatever thread, when it no longer needs them
 * (whether or not the put ran). A get's buffer and a list's names belong
 * to the caller (weir__free, weir__names_free).
 *
 * Implementations, chosen by URI scheme (weir__storage_open): "file:///a/b"
 * or a plain path "/a/b", "a/b" is a local directory (storage_dir.c);
 * "mem://NAME" the process's memory, the same blobs for every open of NAME
 * (storage_mem.c: tests, benchmarks); "latency://MS/URI" or
 * "latency://MIN-MAX/URI" the store URI names, each call MS (or a random
 * MIN to MAX) milliseconds later (storage_latency.c: a remote store's
 * round trips, for tests and benchmarks); "redis://HOST:PORT[/DB][?prefix=P]"
 * a Redis server's string keys, over one pipelined connection of its own
 * (storage_redis.c: durable only on a server with appendonly and
 * appendfsync always);
 * "s3://BUCKET/PREFIX?endpoint=HOST:PORT[&region=R]" an S3 bucket over the
 * S3 REST API with SigV4 (storage_s3.c).
 */
#ifndef WEIR_STATE_STORAGE_H
#define WEIR_STATE_STORAGE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "weir/rt.h"

#define WEIR__STORAGE_NAME_MAX 1024
/* The largest blob weir__storage_range_now reads whole, from a store without get_range. */
#define WEIR__STORAGE_RANGE_WHOLE_MAX ((size_t)1 << 32)

typedef struct weir__storage weir__storage;

/* Names from a list, sorted in byte order (each weir__malloc'd). */
typedef struct weir__names {
    char **v;
    size_t n;
} weir__names;
void weir__names_free(weir__names *n);

/* The bytes of a put. Either buf/len are set, or produce makes them on
 * the blocking pool just before the write (for work too big for a
 * scheduler thread: encoding a large snapshot) and leaves them valid until
 * release. release(owner) (may be NULL) is called exactly once. */
typedef struct weir__blob {
    const void *buf;
    size_t len;
    int (*produce)(void *owner, const void **buf, size_t *len);
    void (*release)(void *owner);
    void *owner;
} weir__blob;

/* An implementation. Every method blocks; storage.c calls them on the
 * blocking pool with a checked name. */
typedef struct weir__storage_ops {
    const char *scheme; /* "file" for "file://..." */
    /* where: the URI with "scheme://" removed (or the plain path). */
    int (*open)(const char *where, weir__storage **out);
    int (*put)(weir__storage *s, const char *name, const void *buf, size_t len);
    /* At most max bytes (-EFBIG past it) into a weir__malloc'd *buf. */
    int (*get)(weir__storage *s, const char *name, size_t max, uint8_t **buf, size_t *len);
    int (*list)(weir__storage *s, const char *prefix, weir__names *out);
    int (*del)(weir__storage *s, const char *name);
    void (*free)(weir__storage *s);
    /* Optional: bytes [off, off + len) of a blob into buf; *got is how
     * many (fewer only where the blob ends; 0 at or past its end). NULL:
     * weir__storage_range_now gets the whole blob and copies the range. */
    int (*get_range)(weir__storage *s, const char *name, uint64_t off, size_t len, uint8_t *buf,
                     size_t *got);
} weir__storage_ops;

/* Every implementation's object starts with this. */
struct weir__storage {
    const weir__storage_ops *ops;
    _Atomic int refs; /* set by weir__storage_open */
};

/* The store a URI names. 0, -EINVAL (bad URI), -EPROTONOSUPPORT (no
 * implementation of the scheme) or the implementation's error. */
int weir__storage_open(const char *uri, weir__storage **out);
/* Give back the opener's reference. */
void weir__storage_close(weir__storage *s);

/* 0 if name is a valid blob name (prefix_ok: a trailing '/' or "" allowed
 * too, for list and delete), else -EINVAL / -ENAMETOOLONG. */
int weir__storage_check_name(const char *name, int prefix_ok);

/* ---- asynchronous calls ---------------------------------------------------------------- */
typedef struct weir__storage_req weir__storage_req;

/* Start a call from a task (-EINVAL elsewhere); *out is the request to
 * await. On an error return there is no request (a put's blob has been
 * released). */
int weir__storage_put_start(weir__storage *s, const char *name, const weir__blob *blob,
                            weir__storage_req **out);
int weir__storage_get_start(weir__storage *s, const char *name, size_t max,
                            weir__storage_req **out);
int weir__storage_list_start(weir__storage *s, const char *prefix, weir__storage_req **out);
int weir__storage_delete_start(weir__storage *s, const char *name, weir__storage_req **out);
/* The op to wait on or poll. */
weir_op *weir__storage_req_op(weir__storage_req *rq);
/* After the op is done: the call's result (0 or -errno), its outputs
 * moved to the caller (get:
 * *buf, *len; list: *names; pass NULL for the others), and the request
 * freed. */
int weir__storage_end(weir__storage_req *rq, int64_t op_result, uint8_t **buf, size_t *len,
                      weir__names *names);

/* ---- the same, awaited (a fiber) or inline (not a task) --------------------------------- */
/* A stackless task gets -EINVAL (it uses the start forms). */
/* Copies buf (for small blobs: the caller's bytes are not borrowed past
 * the call, even when the wait is cancelled). */
int weir__storage_put(weir__storage *s, const char *name, const void *buf, size_t len);
int weir__storage_put_blob(weir__storage *s, const char *name, const weir__blob *blob);
int weir__storage_get(weir__storage *s, const char *name, size_t max, uint8_t **buf, size_t *len);
int weir__storage_list(weir__storage *s, const char *prefix, weir__names *names);
int weir__storage_delete(weir__storage *s, const char *name);

/* ---- the same, called directly ------------------------------------------------------------ */
/* For code that is itself a job on the blocking pool (or not on the
 * runtime at all): the implementation's method, on the calling thread,
 * after the name check. They block; never call them from a task. put
 * does not take buf. range reads [off, off + len) of a blob (*got as
 * get_range says) with one call of the store: its get_range, or a whole
 * get for a store without one. */
int weir__storage_put_now(weir__storage *s, const char *name, const void *buf, size_t len);
int weir__storage_range_now(weir__storage *s, const char *name, uint64_t off, size_t len,
                            uint8_t *buf, size_t *got);
int weir__storage_delete_now(weir__storage *s, const char *name);

/* The implementations: a local directory (storage_dir.c), memory
 * (storage_mem.c), latency added to another (storage_latency.c), a Redis
 * server (storage_redis.c). */
extern const weir__storage_ops weir__storage_dir_ops;
extern const weir__storage_ops weir__storage_mem_ops;
extern const weir__storage_ops weir__storage_latency_ops;
extern const weir__storage_ops weir__storage_redis_ops;
/* A Redis store's counters (-EINVAL for another store): batches written,
 * commands in them, the most in one, batches of more than one (the
 * pipelining), connections made and dropped. */
typedef struct weir__storage_redis_stat {
    uint64_t writes, cmds, max_batch, batched, connects, drops;
} weir__storage_redis_stat;
int weir__storage_redis_stats(const weir__storage *s, weir__storage_redis_stat *out);
/* An S3 bucket over HTTP (storage_s3.c). */
extern const weir__storage_ops weir__storage_s3_ops;
/* The directory a local store lives in (NULL for other stores): for
 * messages that name files. */
const char *weir__storage_dir_path(const weir__storage *s);

#endif
