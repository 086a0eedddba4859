/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugins.h - plugins by content (weir/cluster.h, "Plugins travel by
 * content"; docs/cluster-protocol.md, "Content-addressed plugins"): the
 * pieces a client, a coordinator and a worker use to name a job plugin by
 * its SHA-256, keep plugins in a cache keyed by it, ship each plugin's
 * bytes at most once per worker connection, and refuse an incompatible
 * plugin before any of its bytes move. No sockets here: the nodes call
 * these around the messages of cluster/proto.h.
 *
 * The flow. A client makes a reference from its plugin file
 * (weir__plugin_ref_from_file: hash, size, the ABI identity of its ELF note)
 * and sends references only (SubmitJob). The coordinator refuses a
 * reference whose identity does not match its own (weir__plugin_ref_abi_check)
 * before asking for anything, then answers with the hashes its cache lacks
 * (weir__plugin_cache_missing; status NEED_PLUGINS); each PluginUpload
 * goes into the cache (weir__plugin_cache_put, which verifies the bytes
 * against the hash). A Deploy carries bytes only for the hashes not yet
 * shipped on that worker connection (weir__plugin_shipped_plan, one set per
 * connection, started empty: a worker that registers again receives full
 * bytes again); a worker takes each Deploy plugin into its own cache, or
 * resolves the reference there, and fails the deploy loudly when it cannot
 * (weir__plugin_cache_accept). A reference is a claim about the peer's
 * cache, never permission to run without the plugin.
 *
 * Cache layout: <dir>/<64 lowercase hex digits>.so, published atomically
 * (base/afile.h), so a name that exists holds exactly the bytes whose
 * SHA-256 it spells. One process owns a cache directory (a worker's is its
 * own); puts within the process are serialized by the cache's mutex.
 *
 * Blocking. weir__plugin_ref_from_file and every weir__plugin_cache_*
 * function read, write or stat files: call them off scheduler threads (a
 * node runs them as blocking-pool jobs, weir__blocking_run_shielded in
 * rt/rt_int.h, or on a thread of its own). The shipped set and the ABI
 * check are memory only, callable anywhere.
 *
 * Counters (weir__plugin_stats_read): bytes shipped in Deploys, ships
 * deduplicated (a Deploy plugin sent as a reference because that
 * connection already had it), and cache hits (a submitted reference the
 * coordinator's cache already held: no upload asked). Process-wide relaxed
 * atomics, for a node's /metrics.
 *
 * Errors are negative errnos, with a sentence in msg[msglen] (always
 * NUL-terminated when msglen > 0; msg may be NULL) that names the plugin by
 * its hex hash or path.
 */
#ifndef WEIR_CLUSTER_PLUGINS_H
#define WEIR_CLUSTER_PLUGINS_H

#include <stddef.h>
#include <stdint.h>

#include "base/sha256.h"
#include "cluster/proto.h"
#include "weir/job.h"

/* ---- references ----------------------------------------------------------------------- */

/*
 * A reference to the plugin file at path: its SHA-256, its size and the ABI
 * identity its ELF note carries (read from the bytes, never dlopen'd: a
 * submitter need not be able to load the plugin to name it). The file is
 * read whole, at most WEIR_CLUSTER_PLUGIN_SIZE_MAX bytes (it ships in one
 * frame). 0 with *ref filled (its strings allocated: weir__plugin_ref_clear)
 * and, when bytes is not NULL, the file's contents in *bytes / *len
 * (weir__free them: what a PluginUpload sends); else -ENOENT / -EACCES /
 * ... (cannot read), -EFBIG (past the limit), -ENOEXEC (empty, not an ELF
 * shared object, or no weir identity note: not a weir job), -ENOMEM, and
 * *ref / *bytes are left empty.
 */
int weir__plugin_ref_from_file(const char *path, weir__cl_plugin_ref *ref, uint8_t **bytes,
                               size_t *len, char *msg, size_t msglen);

/* The same for a plugin's n bytes in memory (an upload), named name in
 * messages: -EFBIG, -ENOEXEC or -ENOMEM, with *ref left empty. */
int weir__plugin_ref_from_bytes(const uint8_t *buf, size_t n, const char *name,
                                weir__cl_plugin_ref *ref, char *msg, size_t msglen);

/* Free a reference's strings and zero it. Safe on a zeroed one. */
void weir__plugin_ref_clear(weir__cl_plugin_ref *ref);

/*
 * Whether the plugin ref names may load into host (NULL: this weir,
 * weir_abi_self()): 0, or WEIR_EABI with msg naming the plugin's hash and,
 * for every field that differs, the plugin's value and host's (weir/job.h
 * weir_abi_check). What a coordinator asks of each SubmitJob reference
 * before it asks for bytes; the load-time gate stays the authority.
 */
int weir__plugin_ref_abi_check(const weir__cl_plugin_ref *ref, const weir_abi_id *host, char *msg,
                               size_t msglen);

/* ---- the content-addressed cache ------------------------------------------------------ */

typedef struct weir__plugin_cache weir__plugin_cache;

/* A cache in dir, created (mode 0700, its parent must exist) when missing.
 * 0 with *out, else -ENOTDIR / -EACCES / -ENAMETOOLONG / -ENOMEM ... */
int weir__plugin_cache_open(const char *dir, weir__plugin_cache **out, char *msg, size_t msglen);
/* Free the handle (the files stay). NULL is a no-op. */
void weir__plugin_cache_free(weir__plugin_cache *c);
const char *weir__plugin_cache_dir(const weir__plugin_cache *c);

/*
 * Put bytes[0..len) under the hash the sender claims for them. The bytes
 * are hashed first: a mismatch is -EBADMSG naming both hashes, and writes
 * nothing. A hash already cached is not written again (0). -EMSGSIZE for
 * len 0 or past WEIR_CLUSTER_PLUGIN_SIZE_MAX; a write error leaves no file
 * under the name.
 */
int weir__plugin_cache_put(weir__plugin_cache *c, const uint8_t *bytes, size_t len,
                           const uint8_t sha256[WEIR__SHA256_SIZE], char *msg, size_t msglen);

/* The cached file of a hash: 0 with *path (weir__free it), -ENOENT when it
 * is not cached, -ENOMEM. */
int weir__plugin_cache_lookup(weir__plugin_cache *c, const uint8_t sha256[WEIR__SHA256_SIZE],
                              char **path);

/*
 * What a coordinator answers a SubmitJob with: the hashes of refs[0..n)
 * not cached, each once, in the order first named, in *missing (an
 * allocation, NULL when none are missing; weir__free it) and *nmissing.
 * Every reference found counts a cache hit. A cached plugin whose size is
 * not the one the reference claims is -EBADMSG naming both (the reference
 * is wrong: the name fixes the bytes). 0, -EINVAL, -ENOMEM.
 */
int weir__plugin_cache_missing(weir__plugin_cache *c, const weir__cl_plugin_ref *refs, size_t n,
                               weir__cl_hash **missing, size_t *nmissing, char *msg, size_t msglen);

/*
 * What a receiver does with one plugin a Deploy names: with bytes, put them
 * (verified); without, resolve the reference. 0 with *path (the cached
 * file, weir__free it; path may be NULL), else the put's errors, -EBADMSG
 * when bytes are present but not exactly size of them, or -ENOENT when the
 * reference does not resolve: msg says the sender believed this peer holds
 * a plugin it does not, and the deploy must fail with it.
 */
int weir__plugin_cache_accept(weir__plugin_cache *c, const weir__cl_deploy_plugin *p, char **path,
                              char *msg, size_t msglen);

/* ---- what one worker connection has been shipped --------------------------------------- */

/* The hashes a coordinator sent with their bytes on one worker connection.
 * Owned by whoever writes that connection's Deploys (not thread-safe). At
 * most max hashes: a set that is full forgets them all and starts over, so
 * at worst a plugin ships again, which the worker's put takes as a no-op. */
#define WEIR__PLUGIN_SHIPPED_MAX 1024u
typedef struct weir__plugin_shipped {
    uint8_t (*slot)[WEIR__SHA256_SIZE]; /* open addressing, linear probes */
    uint8_t *used;                      /* slot i holds a hash */
    size_t n, cap, max;
    uint64_t resets; /* times it was full and started over */
} weir__plugin_shipped;

/* An empty set of at most max hashes (0: WEIR__PLUGIN_SHIPPED_MAX; at most
 * 1 << 20). Allocates nothing until the first add. */
void weir__plugin_shipped_init(weir__plugin_shipped *s, size_t max);
/* Free it (it is empty and reusable after). */
void weir__plugin_shipped_clear(weir__plugin_shipped *s);
/* 1 when h was shipped on this connection, else 0. */
int weir__plugin_shipped_has(const weir__plugin_shipped *s, const uint8_t h[WEIR__SHA256_SIZE]);
/* Record h: 1 added, 0 already there, -ENOMEM (and the set unchanged). */
int weir__plugin_shipped_add(weir__plugin_shipped *s, const uint8_t h[WEIR__SHA256_SIZE]);

/*
 * One plugin of a Deploy about to be written to this connection: 1 when
 * its bytes must go with it (they were not shipped here; recorded now, and
 * size counted as bytes shipped), 0 when the reference suffices (counted
 * as a ship deduplicated). On -ENOMEM nothing is recorded: send the bytes
 * anyway (the answer is then 1, and it is counted).
 */
int weir__plugin_shipped_plan(weir__plugin_shipped *s, const uint8_t h[WEIR__SHA256_SIZE],
                              uint64_t size);

/* ---- counters ------------------------------------------------------------------------- */

typedef struct weir__plugin_stats {
    uint64_t bytes_shipped; /* plugin bytes put into Deploys */
    uint64_t ships_deduped; /* Deploy plugins sent as references only */
    uint64_t cache_hits;    /* submitted references already cached */
} weir__plugin_stats;

/* The process's counters so far (monotonic). */
void weir__plugin_stats_read(weir__plugin_stats *out);

#endif
