/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/state.h - keyed state: key groups, the state backend interface, and
 * the in-memory backend.
 *
 * Key groups. Keyed state is split into WEIR_KEY_GROUPS (128) key groups: a
 * key's group is its 64-bit hash (weir_key_hash: XXH3, stable across
 * processes, machines and weir versions) modulo the group count, and the
 * groups are dealt to the subtasks of a keyed operator in contiguous ranges
 * (weir_key_group_range). The group count is fixed for the life of a job's
 * state; the parallelism is not: rescaling moves whole groups between
 * subtasks, so a subtask restores exactly the groups of its new range from
 * the snapshots that hold them.
 *
 * Backends. Every backend stores byte keys to byte values per key group,
 * behind one interface (weir_state_backend_ops): point get / put / delete,
 * an ordered scan of one group by key prefix, and snapshots split in two
 * phases - capture (on the operator's thread, at the barrier: a
 * point-in-time copy, after which the operator may go on mutating; called
 * from a fiber it may yield to the thread's other tasks while it copies, so
 * the owner must not touch the backend until it returns) and
 * persist (anywhere, later: write it durably) - and restore. The stream
 * layer composes its keys (state name, record key, namespace, map key) into
 * the byte keys, so value, list and map state and windows are all layered
 * on these few calls; the ordered prefix scan is what makes "every map entry
 * of this key" and "every window of this key" cheap.
 *
 * Reads that may complete later. get_async is the seam for backends whose
 * reads go to a remote tier: it either answers at once (returns 0 or
 * -ENOENT, the callback is not called) or returns -EINPROGRESS and calls the
 * callback later, exactly once, from any thread (the engine brings the
 * answer back to the subtask's thread), also when the backend is freed
 * first (then with -ECANCELED, before or after free returns). The key is
 * the caller's only during the call. The in-memory backend always answers
 * at once. get_many_async does the same for several keys (one callback per
 * key). A keyed subtask whose backend has get_async runs its records under
 * the async execution controller: a record waiting for a read does not
 * hold up the records of other keys.
 *
 * Views and ownership. A value returned by get (and the key/value given to
 * a scan callback) points into the backend and stays valid until the next
 * put, delete, restore or free on that backend; copy it to keep it. A
 * backend is used by one task at a time (the subtask that owns it); a
 * captured snapshot is independent of the backend and may be persisted on
 * another thread.
 *
 * Snapshot images. encode turns a captured snapshot into its image (pure
 * CPU, any thread): a header (magic, format version, group count, the
 * range of groups), then per group its entries in key order, then an XXH64
 * checksum of everything before it. persist writes the image to a file: a
 * temporary file, fsynced, renamed into place, the directory fsynced, so a
 * file under its final name is always complete (the engine stores images
 * through its storage interface instead, state/storage.h, off the
 * scheduler threads). restore treats an image as untrusted: every length
 * is checked against what is left, the checksum must match, and a damaged
 * or foreign image is -EBADMSG with nothing restored.
 *
 * Errors: 0 or a negative errno. -ENOENT (no such key), -EINVAL (a key
 * group outside the backend's range, a NULL pointer with a length),
 * -E2BIG (a key or value over WEIR_STATE_MAX_KEY / WEIR_STATE_MAX_VALUE),
 * -ENOMEM, -EBADMSG (a damaged snapshot), and file errors from persist and
 * restore. A restore says what was wrong in a refused image in a buffer
 * the caller passes (why, cap), never in a hidden per-thread text.
 */
#ifndef WEIR_STATE_H
#define WEIR_STATE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- keys and key groups -------------------------------------------------------------- */

#define WEIR_KEY_GROUPS 128 /* the default group count (a job's max parallelism) */

/* XXH3-64 of the key bytes, seed 0: the same on every machine and version. */
uint64_t weir_key_hash(const void *key, size_t len);
/* The group of a key hash: hash % ngroups (ngroups >= 1). */
int weir_key_group(uint64_t hash, int ngroups);
/* The subtask (0..parallelism-1) that owns group kg: kg * parallelism / ngroups. */
int weir_key_group_owner(int kg, int parallelism, int ngroups);
/* The groups subtask owns: [*first, *end), contiguous, the inverse of
 * weir_key_group_owner (every group has exactly one owner). -EINVAL for
 * parallelism outside 1..ngroups or subtask outside 0..parallelism-1. */
int weir_key_group_range(int subtask, int parallelism, int ngroups, int *first, int *end);

/* ---- the backend interface ------------------------------------------------------------ */

#define WEIR_STATE_MAX_KEY   (64u << 10) /* bytes of a key */
#define WEIR_STATE_MAX_VALUE (64u << 20) /* bytes of a value */

typedef struct weir_state_backend weir_state_backend;
typedef struct weir_state_snapshot weir_state_snapshot;

/* A scan callback: return 0 to go on, anything else stops the scan and is
 * returned by it. It must not modify the backend. */
typedef int (*weir_state_scan_fn)(void *arg, const void *key, size_t klen, const void *val,
                                  size_t vlen);
/* An asynchronous read's answer: err 0 with the value, or -ENOENT / an
 * error (val NULL). The view is valid during the call only. */
typedef void (*weir_state_get_cb)(void *arg, int err, const void *val, size_t vlen);

/* One read of a batch (weir_state_backend_ops.get_batch). */
typedef struct weir_state_read {
    int kg;
    const void *key;
    size_t klen;
    void *arg; /* the callback's */
} weir_state_read;

/* An entry handed to a capture beside the backend's own (see
 * weir_state_capture_with). */
typedef struct weir_state_entry {
    int kg;
    const void *key;
    size_t klen;
    const void *val;
    size_t vlen;
} weir_state_entry;

typedef struct weir_state_backend_ops {
    const char *name;
    int (*get)(weir_state_backend *b, int kg, const void *key, size_t klen, const void **val,
               size_t *vlen);
    int (*put)(weir_state_backend *b, int kg, const void *key, size_t klen, const void *val,
               size_t vlen);
    int (*del)(weir_state_backend *b, int kg, const void *key, size_t klen);
    int (*scan)(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                weir_state_scan_fn fn, void *arg);
    /* NULL: the backend answers every read at once (weir_state_get_async
     * then calls get). */
    int (*get_async)(weir_state_backend *b, int kg, const void *key, size_t klen,
                     weir_state_get_cb cb, void *arg);
    /* extra: n entries, checked sorted and in range, to merge in. */
    int (*capture)(weir_state_backend *b, uint64_t checkpoint_id, const weir_state_entry *extra,
                   size_t n, weir_state_snapshot **out);
    /* Load an image (untrusted: checked whole before anything changes);
     * on -EBADMSG / -EINVAL the reason in why[0..cap) (why may be NULL). */
    int (*restore)(weir_state_backend *b, const uint8_t *img, size_t len, char *why, size_t cap);
    size_t (*entries)(weir_state_backend *b, int kg);
    void (*free)(weir_state_backend *b);
    /* The entries with the prefix from the first key >= from on (a seek,
     * then the walk scan does). NULL: weir_state_scan_from walks the
     * prefix from its start and skips the keys below from. */
    int (*scan_from)(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                     const void *from, size_t flen, weir_state_scan_fn fn, void *arg);
    /* Optional, for a backend whose images are weir's snapshot format
     * (snapshot.c's, as every built-in backend's are): restore an image the
     * engine has already checked whole with that format's reader - checksum,
     * header, every length and group - on the blocking pool, so that the
     * owner's thread only loads it. It may skip its own check (the group
     * count against the backend's is still its to refuse). NULL: the engine
     * calls restore, which checks the image on the owner's thread. */
    int (*restore_checked)(weir_state_backend *b, const uint8_t *img, size_t len, char *why,
                           size_t cap);
    /* Optional, beside get_async: n reads, of any groups, in one round
     * trip. The async execution controller gathers the reads its records
     * issue together (one input batch, one round of answers) and hands
     * them over at once instead of one get_async each. Each read is
     * answered through cb(reads[i].arg, ...) exactly once, as get_async
     * answers later (any thread, at once or later; -ECANCELED when the
     * backend is freed first). Keys are the caller's during the call
     * only. 0, or a negative errno: then no read was started and no
     * callback comes. */
    int (*get_batch)(weir_state_backend *b, const weir_state_read *reads, size_t n,
                     weir_state_get_cb cb);
    /* Optional, beside get_batch: the answer if the backend has it without
     * a round trip - 0 with a view of the value (valid until the next call
     * on the backend), or -ENOENT - else -EWOULDBLOCK, and nothing was
     * started. The async execution controller asks it before it gathers a
     * read into a batch, so a hot read runs its record at once instead of
     * waiting for the batch's answers. */
    int (*get_now)(weir_state_backend *b, int kg, const void *key, size_t klen, const void **val,
                   size_t *vlen);
    /* Optional, for a backend whose scans may wait on a remote tier: make
     * the next scan of exactly (kg, prefix) answerable without a round
     * trip. 0 when it already is (nothing to fetch: cb is not called), or
     * -EINPROGRESS and cb(arg, err, NULL, 0) exactly once later, from any
     * thread, once the entries are fetched (-ECANCELED when the backend is
     * freed first; err is advisory: the scan itself reads again on any
     * failure). What was fetched serves the scans of that prefix while
     * nothing newer reached the remote tier; a scan it cannot serve
     * reads synchronously, as without a prefetch. The prefix is the
     * caller's during the call only. Another negative errno: nothing was
     * started (no memory, say), and no callback comes; the scan can still
     * read synchronously. NULL: scans never wait. */
    int (*scan_prefetch)(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                         weir_state_get_cb cb, void *arg);
} weir_state_backend_ops;

/* Every backend starts with this header (its private state follows). */
struct weir_state_backend {
    const weir_state_backend_ops *ops;
    int ngroups;          /* the job's group count */
    int first_kg, end_kg; /* the groups this backend holds: [first_kg, end_kg) */
};

/* The calls, through the ops (with argument checks done once, here). */
int weir_state_get(weir_state_backend *b, int kg, const void *key, size_t klen, const void **val,
                   size_t *vlen);
int weir_state_put(weir_state_backend *b, int kg, const void *key, size_t klen, const void *val,
                   size_t vlen);
int weir_state_delete(weir_state_backend *b, int kg, const void *key, size_t klen);
/* Entries of group kg whose key starts with prefix (plen 0: all), in
 * ascending byte order of their keys. */
int weir_state_scan(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                    weir_state_scan_fn fn, void *arg);
/* The same, from the first key >= from on (keys in byte order, the
 * shorter first): a range read costs a search, not a walk past the keys
 * below from. */
int weir_state_scan_from(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                         const void *from, size_t flen, weir_state_scan_fn fn, void *arg);
/* 0 / -ENOENT at once (cb not called), or -EINPROGRESS and cb later. */
int weir_state_get_async(weir_state_backend *b, int kg, const void *key, size_t klen,
                         weir_state_get_cb cb, void *arg);
/* n keys; each answered at once (cb called before this returns) or later.
 * Returns how many are still in progress. */
int weir_state_get_many_async(weir_state_backend *b, int kg, const void *const *keys,
                              const size_t *klens, size_t n, weir_state_get_cb cb,
                              void *const *args);
/* Prefetch for a scan of (kg, prefix): 0 when it would not wait (cb not
 * called), -EINPROGRESS and cb later, or an argument error. See
 * weir_state_backend_ops.scan_prefetch. */
int weir_state_scan_prefetch(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                             weir_state_get_cb cb, void *arg);
/* Entries in group kg. */
size_t weir_state_entries(weir_state_backend *b, int kg);
void weir_state_backend_free(weir_state_backend *b);

/* ---- snapshots ------------------------------------------------------------------------ */

/* Capture a point-in-time copy of every group the backend holds (the
 * barrier phase: on the owning task, synchronous). The backend may be
 * mutated freely afterwards; the snapshot does not change. */
int weir_state_capture(weir_state_backend *b, uint64_t checkpoint_id, weir_state_snapshot **out);
/* The same, with n more entries merged into the snapshot as if they were
 * the backend's: tables kept outside the backend that must move with their
 * key groups (the stream runner's timers). They must be sorted by group,
 * then key bytes, lie in the backend's groups, and not repeat each other's
 * or the backend's keys: -EINVAL otherwise (nothing captured). */
int weir_state_capture_with(weir_state_backend *b, uint64_t checkpoint_id,
                            const weir_state_entry *extra, size_t n, weir_state_snapshot **out);
/* The snapshot's image (the file's bytes, checksum included): *img points
 * into s and stays valid until s is freed. The first call appends the
 * checksum (a pass over the bytes); later calls return the same image. Any
 * thread, one at a time. 0, -EINVAL, or the capture's -ENOMEM. */
int weir_state_snapshot_encode(weir_state_snapshot *s, const void **img, size_t *len);
/* Encode, then write the image durably to path (temp file ".<name>.tmp"
 * beside it, fsync, rename, fsync of the directory). Blocks: any thread
 * but a scheduler thread's task (the engine goes through its storage). 0
 * or a negative errno. */
int weir_state_persist(weir_state_snapshot *s, const char *path);
uint64_t weir_state_snapshot_id(const weir_state_snapshot *s);
/* Bytes the snapshot holds in memory. */
size_t weir_state_snapshot_size(const weir_state_snapshot *s);
void weir_state_snapshot_free(weir_state_snapshot *s);
/* Load the groups of the backend's range that the image holds (an image
 * may hold more or fewer groups: a rescale restores one backend from
 * several). Restored groups replace what the backend held in them. The
 * image is checked whole before anything changes: -EBADMSG for a damaged
 * one, -EINVAL for a group count other than the backend's; either way
 * why[0..cap) says what was wrong (why may be NULL; "" on success or for
 * other errors). On the backend's owner. */
int weir_state_restore_image(weir_state_backend *b, const void *img, size_t len, char *why,
                             size_t cap);
/* The same from a file (read whole first: blocks, as persist). */
int weir_state_restore(weir_state_backend *b, const char *path, char *why, size_t cap);

/* ---- the in-memory backend ------------------------------------------------------------- */

/* Groups [first_kg, end_kg) of ngroups, each an ordered skip list in
 * memory. NULL with errno EINVAL (a bad range) or ENOMEM. */
weir_state_backend *weir_state_memory_new(int ngroups, int first_kg, int end_kg);

/* ---- backends by URI ------------------------------------------------------------------ */
/* A job's keyed state lives in the backend its run names by URI
 * (weir_run_opts.state_backend): "<scheme>:<rest>". Built in: "memory:"
 * (weir_state_memory_new) and "remote:POOL_URI[?hot_max_bytes=N&
 * io_threads=N]" (a hot tier in memory over a durable pool of runs, with
 * delta checkpoints and lazy restores: docs/state.md). A factory makes the backend of groups
 * [first_kg, end_kg) for a URI of its scheme, or returns NULL with errno
 * set (EINVAL: a URI it does not understand). */
typedef weir_state_backend *(*weir_state_backend_factory)(void *arg, const char *uri, int ngroups,
                                                          int first_kg, int end_kg);
/* Add a scheme (before any job runs). -EINVAL (bad name: 1..31 bytes, no
 * ':'), -EEXIST, -ENOSPC (16 schemes at most). */
int weir_state_backend_register(const char *scheme, weir_state_backend_factory make, void *arg);
/* The backend of groups [first_kg, end_kg) for uri (NULL: "memory:").
 * -EINVAL (malformed, or refused by its factory), -ENOENT (no such
 * scheme), -ENOMEM. */
int weir_state_backend_open(const char *uri, int ngroups, int first_kg, int end_kg,
                            weir_state_backend **out);

#ifdef __cplusplus
}
#endif
#endif /* WEIR_STATE_H */
