/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run.h - a sorted run: the immutable blob in which the remote-read
 * backend (remote.c) writes a checkpoint's delta to its pool, and from
 * which a cold read fetches one block with one ranged get.
 *
 * A run holds entries of any key groups, sorted by (group, key bytes in
 * weir__key_cmp order), each a put (key -> value) or a tombstone (key
 * deleted). Its bytes are a sequence of sections, each
 *
 *   [u32 payload length][payload][u64 XXH64 of the payload]   (big-endian)
 *
 * so every section is checked on its own when it is fetched on its own:
 *
 *   - blocks: a group's entries in key order, cut into blocks of about
 *     WEIR__RUN_BLOCK bytes (an entry never spans blocks: a large one makes
 *     a large block). Payload: entries of
 *       [u8 flags: bit 0 tombstone][u32 klen][u32 vlen][key][value]
 *     (a tombstone's vlen is 0);
 *   - after a group's blocks, its meta section: the group's bloom filter
 *     and block index. Payload:
 *       [u32 kg][u64 entries][u32 bloom bytes][u8 hashes][bloom bits]
 *       [u32 nblocks] then per block [u64 offset][u32 length][u32 first
 *       key length][first key]   (offset/length of the whole section)
 *       [u32 last key length][last key]
 *
 * The writer reports, per group, where its meta section is and the
 * group's first and last key: the backend keeps those in its checkpoint
 * handle, so a restore needs no read of the run at all (lazy), and a
 * range that misses [first, last] needs none either.
 *
 * Untrusted bytes. A pool is another system: every section read back is
 * checked (its length against what was fetched, its checksum, every
 * length inside it against what is left) before use; a damaged one is
 * -EBADMSG with the reason in why[0..cap) (why may be NULL; a parse that
 * succeeds leaves it empty).
 *
 * Bloom filter: 10 bits per entry (at least 64 bits), 7 probes by double
 * hashing of the key's weir_key_hash (h1 = low 32 bits, h2 = high 32 bits
 * | 1): about 1% false positives, so a read of a key the run lacks costs
 * no round trip 99 times in 100.
 */
#ifndef WEIR_STATE_RUN_H
#define WEIR_STATE_RUN_H

#include <stddef.h>
#include <stdint.h>

#define WEIR__RUN_BLOCK   4096 /* target payload bytes of a block */
#define WEIR__RUN_SECTION 12   /* bytes a section adds to its payload */

/* ---- writing (any thread; pure CPU) -------------------------------------------------------- */
typedef struct weir__run_writer weir__run_writer;

/* Where one group's data lies in the run, for the handle. */
typedef struct weir__run_group {
    int kg;
    uint64_t meta_off; /* the meta section: offset of its length field */
    uint32_t meta_len; /* the whole section, WEIR__RUN_SECTION included */
    uint64_t entries;
    uint8_t *first, *last; /* the group's smallest and largest key (weir__malloc'd) */
    uint32_t first_len, last_len;
} weir__run_group;

/* NULL on ENOMEM. */
weir__run_writer *weir__run_writer_new(void);
/* Append an entry: (kg, key) strictly after the previous one's, else
 * -EINVAL; -E2BIG past WEIR_STATE_MAX_KEY / WEIR_STATE_MAX_VALUE; -ENOMEM.
 * A tombstone's val is ignored. After an error the writer refuses
 * everything (sticky). */
int weir__run_add(weir__run_writer *w, int kg, const void *key, size_t klen, const void *val,
                  size_t vlen, int tombstone);
/* Close the run: *buf (weir__malloc'd, the caller's) holds its bytes,
 * *groups (weir__malloc'd array, the caller's, free with
 * weir__run_groups_free) one descriptor per group that has entries, in
 * group order. A run of no entries is a valid empty blob (len 0, ngroups
 * 0). The writer is spent afterwards (free it). On an error the outputs
 * are NULL and 0. */
int weir__run_finish(weir__run_writer *w, uint8_t **buf, size_t *len, weir__run_group **groups,
                     size_t *ngroups);
void weir__run_writer_free(weir__run_writer *w);
void weir__run_groups_free(weir__run_group *g, size_t n);

/* ---- reading (any thread) ------------------------------------------------------------------ */
/* One group's meta section, parsed: its bloom filter and block index. */
typedef struct weir__run_meta weir__run_meta;

/* Parse a meta section (the bytes at meta_off, meta_len of them, the
 * section's framing included) of group kg. 0, -EBADMSG (damaged, or of
 * another group), -ENOMEM. */
int weir__run_meta_parse(const uint8_t *p, size_t len, int kg, weir__run_meta **out, char *why,
                         size_t cap);
void weir__run_meta_free(weir__run_meta *m);
/* Bytes the parsed meta holds in memory. */
size_t weir__run_meta_size(const weir__run_meta *m);
uint64_t weir__run_meta_entries(const weir__run_meta *m);
/* 0: the key is certainly not in the run's group; 1: it may be. */
int weir__run_meta_maybe(const weir__run_meta *m, const void *key, size_t klen);
/* The block that would hold key: 0 with its section's offset and length
 * (framing included), or -ENOENT when the key sorts before the first
 * block's first key or after the group's last key. */
int weir__run_meta_block(const weir__run_meta *m, const void *key, size_t klen, uint64_t *off,
                         uint32_t *len);
/* The blocks that may hold keys in [lo, hi) (hi NULL: no upper bound):
 * block indexes [*first, *end) (empty when none), then weir__run_meta_nth
 * for each one's section. */
void weir__run_meta_range(const weir__run_meta *m, const void *lo, size_t lolen, const void *hi,
                          size_t hilen, uint32_t *first, uint32_t *end);
uint32_t weir__run_meta_nblocks(const weir__run_meta *m);
void weir__run_meta_nth(const weir__run_meta *m, uint32_t i, uint64_t *off, uint32_t *len);

/* A block section's entries, checked whole (framing, checksum, lengths,
 * keys strictly ascending) by weir__run_block_open before any is used. */
typedef struct weir__run_block {
    const uint8_t *p; /* the payload */
    size_t len, pos;
} weir__run_block;

/* p/len: the whole section as fetched. 0 or -EBADMSG. */
int weir__run_block_open(weir__run_block *b, const uint8_t *p, size_t len, char *why, size_t cap);
/* The next entry: 1 with its fields (views into the block), 0 at the end. */
int weir__run_block_next(weir__run_block *b, const uint8_t **key, size_t *klen,
                         const uint8_t **val, size_t *vlen, int *tombstone);
/* Find key in an opened block: 0 (a put: *val, *vlen), 1 (a tombstone),
 * -ENOENT (not in the block). */
int weir__run_block_find(const weir__run_block *b, const void *key, size_t klen,
                         const uint8_t **val, size_t *vlen);

#endif
