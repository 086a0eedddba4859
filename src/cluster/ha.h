/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ha.h - leader election among a cluster's coordinators over a shared
 * directory (`weir node --role=coordinator --ha-dir DIR`, docs/cluster.md
 * "High availability"), and the fenced writes of the control plane's
 * records.
 *
 * The leader is the coordinator that holds an exclusive fcntl write lock
 * on DIR/leader.lock; the kernel drops the lock when its holder exits or
 * dies, and a standby polling every 200 ms takes it. The winner bumps the
 * epoch - one above the one DIR/active-leader.json holds - and writes that
 * file (host, port, epoch, time) before it opens its control port; the
 * epoch is stamped on every frame it sends to a worker (fencing: a worker
 * drops frames of an epoch below the one it admitted). Workers and
 * clients find the leader by reading the file.
 *
 * Everything rests on the directory honouring POSIX record locks between
 * processes, which some mounts do not (bind mounts of some container
 * runtimes, 9p and virtiofs shares, NFS mounted nolock): there every
 * coordinator would lead. So opening proves it first: the process takes
 * the lock on a probe file and a forked child asks for the same lock; if
 * the child is granted it the directory is refused (allow_unsafe_locks:
 * a warning instead). The probe shows exclusion between processes of one
 * host only: a mount that locks locally but not across hosts passes it.
 *
 * Fenced records (weir__ha_cas_write): a JSON object carrying "epoch",
 * written only when the epoch stored is not above the writer's. The read,
 * the check and the write (a temporary file fsynced, renamed over the
 * record, the directory fsynced) run inside one flock(LOCK_EX) on
 * PATH.wlock, which is created once and never removed, so two writers
 * cannot both pass the check on stale reads: a superseded coordinator
 * never overwrites its successor's record.
 *
 * Job records (weir__ha_job_put / _end / _remove) are fenced by the
 * leader file as well: a record that does not exist yet holds no epoch,
 * so each write holds a shared flock on the leader file's .wlock and is
 * refused (-ESTALE) when the leader file names a later epoch than the
 * writer's. An election writes the leader file under the same lock,
 * exclusively, so a superseded coordinator cannot add a record after its
 * successor has listed the directory either.
 *
 * Every function here does file system calls and may block briefly: call
 * them on the blocking pool from a fiber (the coordinator does).
 */
#ifndef WEIR_CLUSTER_HA_H
#define WEIR_CLUSTER_HA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/sha256.h"
#include "weir/cluster.h"

#define WEIR__HA_POLL_MS     200
#define WEIR__HA_LOCK_FILE   "leader.lock"
#define WEIR__HA_LEADER_FILE "active-leader.json"

typedef struct weir__ha weir__ha;

/* What DIR/active-leader.json says. port 0: the leader has not opened its
 * port yet. */
typedef struct weir__ha_leader {
    char host[WEIR_CLUSTER_HOST_MAX + 1];
    int port;
    uint64_t epoch;
    int64_t time_ms;    /* Unix time of the write */
    int64_t elected_ms; /* Unix time its writer came to lead (older files: time_ms) */
} weir__ha_leader;

/* Open the election in dir (created, mode 0700, if missing) after the
 * lock probe. 0 with *out, or a negative errno with msg: the directory
 * cannot be made or opened, or it grants one lock to two processes
 * (-ENOLCK, unless allow_unsafe_locks). */
int weir__ha_open(const char *dir, int allow_unsafe_locks, weir__ha **out, char *msg, size_t cap);

/* The probe alone: 0 the directory's locks exclude another process, 1
 * they do not, -EAGAIN inconclusive (another process holds the probe
 * file: two coordinators starting together), else a negative errno. */
int weir__ha_probe_locks(const char *dir, char *msg, size_t cap);

/* Try to lead, once, without waiting: 1 this process leads now (*epoch
 * its epoch, written to the leader file with host and port 0), 0 another
 * process holds the lock, or a negative errno with msg. Once it led, it
 * leads until weir__ha_close. */
int weir__ha_try_lead(weir__ha *ha, const char *host, uint64_t *epoch, char *msg, size_t cap);

/* Lead with an epoch decided elsewhere (etcd's revision: etcd.h) instead
 * of the directory's lock: the leader file written with host, port 0 and
 * epoch, fenced. 0, -ESTALE (the file names a higher epoch, msg says
 * which), or another negative errno with msg. */
int weir__ha_lead_at(weir__ha *ha, const char *host, uint64_t epoch, char *msg, size_t cap);

/* The leader announces where it listens: the leader file rewritten with
 * port (its epoch's, fenced). 0, -ESTALE (a later leader's epoch is
 * stored: this one is superseded), or another negative errno with msg. */
int weir__ha_announce(weir__ha *ha, int port, char *msg, size_t cap);

/* Read dir's leader file: 0, -ENOENT (none yet), -EBADMSG (malformed,
 * with msg), or another negative errno with msg. */
int weir__ha_read_leader(const char *dir, weir__ha_leader *out, char *msg, size_t cap);

/* weir__ha_read_leader on the blocking pool, for a fiber (workers and
 * clients following the leader). Same results. */
int weir__ha_read_leader_pooled(const char *dir, weir__ha_leader *out, char *msg, size_t cap);

/* Give up leading (the lock released) and free ha. NULL: nothing. */
void weir__ha_close(weir__ha *ha);

/* Write obj (a JSON object; its "epoch" set here to epoch) to path as a
 * fenced record: 0 written, -ESTALE refused (the stored record's epoch is
 * above epoch: *stored says it), or a negative errno with msg. epoch 0:
 * one above the stored one (what an election does), returned in *stored.
 * stored may be NULL. obj NULL: the record is removed, under the same
 * check. */
int weir__ha_cas_write(const char *path, uint64_t epoch, json_t *obj, uint64_t *stored, char *msg,
                       size_t cap);

/* The leader's fence around a write that must not happen once another
 * leads (a job record, a checkpoint's COMPLETED marker): a shared flock on
 * the leader file's .wlock (an election's write holds it exclusively),
 * then the leader file's epoch checked against this leader's. The
 * descriptor to hand to weir__ha_fence_leave after the write, or -ESTALE
 * (another coordinator leads now) or another negative errno, with msg.
 * Blocking: file I/O. */
int weir__ha_fence_enter(weir__ha *ha, char *msg, size_t cap);
void weir__ha_fence_leave(int lfd);

/* ---- what a leader keeps of its jobs (DIR/jobs, DIR/history, DIR/plugins) ----
 * A running job's record (DIR/jobs/ID.json, its submission as the
 * coordinator encodes it) and its plugins (DIR/plugins/SHA256.so, named by
 * content) are written at submit, so that the next leader can run it
 * again; its end moves the record to DIR/history/ID.json. Records are
 * fenced by the leader's epoch. */
int weir__ha_plugin_put(weir__ha *ha, const uint8_t sha[WEIR__SHA256_SIZE], const void *bytes,
                        size_t len, char *msg, size_t cap);
/* The plugin's bytes (weir__malloc'd), checked against sha and size:
 * -EBADMSG when they are not its. */
int weir__ha_plugin_read(weir__ha *ha, const uint8_t sha[WEIR__SHA256_SIZE], uint64_t size,
                         uint8_t **out, char *msg, size_t cap);
/* Write job id's record (obj; "epoch" set here). The leader's only. */
int weir__ha_job_put(weir__ha *ha, uint64_t id, json_t *obj, char *msg, size_t cap);
/* Job id's record removed (fenced). */
int weir__ha_job_remove(weir__ha *ha, uint64_t id, char *msg, size_t cap);
#define WEIR__HA_RECORD_MAX (4u << 20) /* bytes a job record read back may have */
/* Job id ended: hist written to its history record, its job record removed. */
int weir__ha_job_end(weir__ha *ha, uint64_t id, json_t *hist, char *msg, size_t cap);
enum { WEIR__HA_JOBS, WEIR__HA_HISTORY };  /* which records */
#define WEIR__HA_ID_MAX 999999999999999ull /* job ids a record's name may carry */
/* The ids of the job (or history) records, ascending (weir__free *ids). */
int weir__ha_jobs(weir__ha *ha, int which, uint64_t **ids, size_t *n, char *msg, size_t cap);
/* Job id's record (json_decref it), or NULL with msg. */
json_t *weir__ha_job_load(weir__ha *ha, int which, uint64_t id, char *msg, size_t cap);
/* The epoch this process leads with, 0 while it does not. */
uint64_t weir__ha_epoch(const weir__ha *ha);

/* Test hook: called inside the critical section of every fenced write,
 * between the read and the rename (NULL: none). */
extern void (*weir__ha_cas_hook)(const char *path);

#endif
