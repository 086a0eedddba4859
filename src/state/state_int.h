/* SPDX-License-Identifier: Apache-2.0 */
/*
 * state_int.h - what the state backends share: the snapshot format's
 * writer and checked reader (snapshot.c), the snapshot object, and the
 * snapshot calls that go through a store (state/storage.h).
 */
#ifndef WEIR_STATE_INT_H
#define WEIR_STATE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "state/storage.h"
#include "weir/state.h"

/* The largest snapshot file a restore reads into memory. */
#define WEIR__SNAP_MAX_FILE ((size_t)1 << 40)

typedef struct weir__snap_chunk {
    uint8_t *p;
    size_t len;
} weir__snap_chunk;

/* A captured snapshot: the file's bytes, checksum excluded until
 * weir_state_snapshot_encode appends it (sealed), in chunks[] then buf
 * while it is written (snapshot.c says why), in buf alone once encoded. */
struct weir_state_snapshot {
    uint64_t id;
    uint8_t *buf; /* the chunk being filled */
    size_t len, cap;
    weir__snap_chunk *chunks; /* filled before buf, in order */
    size_t nchunks, chunks_cap;
    size_t aside; /* bytes in chunks[] */
    int err;      /* first append error (sticky) */
    int sealed;   /* encoded: buf is the whole image, checksum included */
    /* A backend whose image is made at persist time (remote.c): prepare
     * runs once, first thing in encode (the blocking pool), and leaves
     * the image in buf, sealed; drop frees ext, at free. */
    int (*prepare)(weir_state_snapshot *s);
    void (*drop)(weir_state_snapshot *s);
    void *ext;
};

/* Writing: a header, then each group's entries in key order. */
int weir__snap_init(weir_state_snapshot *s, uint64_t id, int ngroups, int first_kg, int end_kg);
void weir__snap_group(weir_state_snapshot *s, int kg, uint64_t count);
void weir__snap_entry(weir_state_snapshot *s, const void *key, size_t klen, const void *val,
                      size_t vlen);

/* Byte order of keys: memcmp, then the shorter first. */
int weir__key_cmp(const void *a, size_t an, const void *b, size_t bn);

/* Reading a whole file image (checksum included), checked before use. */
typedef struct weir__snap_reader {
    const uint8_t *p;
    size_t len, pos;
    int ngroups, first_kg, end_kg;
    uint64_t id;
} weir__snap_reader;

/* Check the image whole: header, every group and entry within bounds, the
 * checksum. 0, or -EBADMSG with the reason in why[0..cap) (why may be
 * NULL). */
int weir__snap_open(weir__snap_reader *r, const uint8_t *p, size_t len, char *why, size_t cap);
/* The reader of an image weir__snap_open has accepted (on another thread:
 * state/snapshot.c's restore_from checks it on the blocking pool): the
 * header only, nothing checked again. */
void weir__snap_open_checked(weir__snap_reader *r, const uint8_t *p, size_t len);
/* The next group: 1 with *kg and *count, 0 at the end. Then count entries. */
int weir__snap_next_group(weir__snap_reader *r, int *kg, uint64_t *count);
void weir__snap_next_entry(weir__snap_reader *r, const uint8_t **key, size_t *klen,
                           const uint8_t **val, size_t *vlen);

/* Write why a restore failed into why[0..cap) (nothing if why is NULL)
 * and return -EBADMSG. */
int weir__state_fail(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Through a store, for the engine. persist_to takes s (freed once
 * written, or on failure): encoded and written on the blocking pool while
 * the calling fiber waits; 0 once the blob is durable. restore_from reads
 * the blob on the blocking pool and, for a backend with restore_checked,
 * checks the image whole there too; only the loading into b runs on the
 * caller's thread (b's owner). A backend without restore_checked gets the
 * image through restore, as weir_state_restore_image. */
int weir__state_persist_to(weir__storage *st, const char *name, weir_state_snapshot *s);
int weir__state_restore_from(weir__storage *st, const char *name, weir_state_backend *b, char *why,
                             size_t cap);

/* ---- the remote-read backend (remote.c) -------------------------------------------------------
 */
/* "remote:POOL_URI[?hot_max_bytes=N&io_threads=N]". 0, -EINVAL, -ENOMEM
 * or the pool's open error. */
int weir__remote_open(const char *uri, int ngroups, int first_kg, int end_kg,
                      weir_state_backend **out);
typedef struct weir__remote_stat {
    size_t hot_bytes, budget;
    uint64_t evictions, cold_reads, blocks_read, run_bytes;
    uint64_t dirty, clean;  /* entries changed since the last capture; evictable ones */
    uint64_t merges;        /* pairs of runs compacted into one */
    uint64_t max_chain;     /* the longest chain of runs of a group */
    uint64_t scans_fetched; /* scans' pool parts prefetched on the I/O threads */
    uint64_t scans_served;  /* scans that a prefetch served (no round trip) */
    uint64_t round_trips;   /* ranged gets of the pool */
    uint64_t block_hits;    /* blocks a read found in the block cache */
    uint64_t block_shared;  /* reads that waited for another's fetch of their block */
    uint64_t block_seeded;  /* blocks a persist put in the cache */
    size_t block_bytes;     /* the block cache's bytes now */
} weir__remote_stat;
/* Delete from the pool of backend uri (nothing unless it is "remote:")
 * the runs that the handles of checkpoints gone[] (in the checkpoint
 * store ckpts) refer to and those of kept[] do not: the checkpoints being
 * pruned and the ones retained. Never on a doubt: a kept handle that
 * cannot be read or parsed deletes nothing. The number of runs deleted,
 * or a negative errno. From a fiber (the calls are awaited) or off the
 * runtime. */
int weir__remote_gc(const char *uri, weir__storage *ckpts, const uint64_t *gone, size_t ngone,
                    const uint64_t *kept, size_t nkept);
/* The run names a remote-state handle refers to (repeats included): 0,
 * -EBADMSG (not a whole handle) or -ENOMEM. */
int weir__remote_handle_runs(const uint8_t *img, size_t len, weir__names *out);
/* Its counters (b must be a remote backend; on its owner), after taking
 * in what the persists and reads finished (and evicting as it must). */
void weir__remote_stats(weir_state_backend *b, weir__remote_stat *st);

/* ---- the hot tier's hooks into the in-memory backend (remote.c) -------------------------- */
/* A memory backend whose entries each carry meta bytes for its owner:
 * zeroed when the entry is made, at one address for the entry's life (a
 * put that replaces the value does not move it). */
weir_state_backend *weir__mem_new_meta(int ngroups, int first_kg, int end_kg, size_t meta);
/* get, with the entry's meta. */
int weir__mem_get_meta(weir_state_backend *b, int kg, const void *key, size_t klen,
                       const void **val, size_t *vlen, void **meta);
/* put, with the entry's meta; *created: the key is new. */
int weir__mem_put_meta(weir_state_backend *b, int kg, const void *key, size_t klen, const void *val,
                       size_t vlen, void **meta, int *created);
/* The key of the entry a meta belongs to. */
void weir__mem_meta_key(const void *meta, const void **key, size_t *klen);
typedef int (*weir__mem_scan_meta_fn)(void *arg, const void *key, size_t klen, const void *val,
                                      size_t vlen, void *meta);
/* scan, with each entry's meta. */
int weir__mem_scan_meta(weir_state_backend *b, int kg, const void *prefix, size_t plen,
                        weir__mem_scan_meta_fn fn, void *arg);

#endif
