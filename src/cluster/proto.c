/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto.c - the cluster protocol's codec (proto.h, weir/cluster.h,
 * docs/cluster-protocol.md).
 *
 * One table describes every message: per kind, its fields in wire order,
 * each with its type, where it lives in the message's struct, its limit,
 * its flags (optional tail, must be non-zero / non-empty, a storage name)
 * and its default. Arrays and nested groups point at the table of their
 * element. One encoder, one decoder and one free walk the tables, so a rule
 * (a limit, a tail, a check) is written once and holds for every kind; a
 * message's layout is its table, which the documentation mirrors.
 *
 * The decoder checks in wire order and stops at the first thing wrong,
 * which is the one named: a field's bytes against what is left, then a
 * string's or count's limit, then what is left against the length or the
 * count (times the smallest encoding of one element) - all before the
 * field's allocation, so no count a peer sends sizes memory it did not
 * send. Field values are then checked (range, non-zero, storage names), and
 * last a message's own rules across fields (oldest compatible version at
 * most the version). The encoder applies the same value checks to what it
 * is given, so a node never sends what its peer must refuse.
 *
 * Frames go through weir/net.h's builder and reader (the bounds-checked
 * gets); allocations through base/alloc.h, so the failure countdown
 * reaches every one of them.
 */
#include "cluster/proto.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/be.h"
#include "state/storage.h"
#include "stream/ckpt_link.h"
#include "stream/plan.h"

_Static_assert(WEIR_CLUSTER_HANDLE_MAX + 1 == WEIR__CKPT_HANDLE_MAX,
               "a checkpointed handle fits the checkpoint link's");
_Static_assert(WEIR_CLUSTER_FRAME_MAX <= WEIR_FRAME_MAX, "the cluster cap fits weir's frames");
_Static_assert(WEIR_CLUSTER_FIRST_FRAME_MAX == WEIR_FRAME_FIRST_MAX, "one first-frame cap");

/* ---- the tables ------------------------------------------------------------------------- */
enum ftype {
    T_U8,
    T_U16,
    T_U32,
    T_U64,
    T_STR,   /* char *: u32 length + bytes, no NUL inside */
    T_BYTES, /* weir__cl_bytes: u32 length + bytes, a view */
    T_OPTB,  /* weir__cl_bytes: u8 0 (absent, p NULL) or 1 + bytes */
    T_HASH,  /* uint8_t[32], raw */
    T_ARRAY, /* WEIR__CL_ARRAY: u32 count + elements of sub */
    T_GROUP, /* a struct of sub's fields, inline */
};

enum {
    F_OPT = 1,     /* tail: may be absent (it and every later field take defaults) */
    F_NONZERO = 2, /* an integer >= 1, a string / byte string / array not empty */
    F_STORAGE = 4, /* a string: "" or a storage name */
    F_SIGNED = 8,  /* an integer read as signed: no range check */
    F_PLAN = 16,   /* a byte string: a plan's payload */
};

typedef struct schema schema;
typedef struct field {
    const char *name;
    uint8_t type, flags;
    uint32_t off;
    uint64_t max; /* integers: the largest value (0: any); lengths and counts: the cap */
    uint64_t def; /* integers: the default of an absent tail */
    const schema *sub;
} field;

struct schema {
    const char *name;
    size_t size;
    const field *f;
    size_t nf;
    /* Rules across fields (after the fields are decoded, before encoding):
     * 0, or -EBADMSG with "field: what" in why. NULL: none. */
    int (*check)(const void *obj, char *why, size_t cap);
    int fenced; /* coordinator -> worker: the epoch comes first */
};

#define FLD(S, fld, type, flags, max, def, sub)                                                    \
    {                                                                                              \
#fld, type, flags, (uint32_t)offsetof(S, fld), max, def, sub                               \
    }
#define U8(S, fld, flags, max)        FLD(S, fld, T_U8, flags, max, 0, NULL)
#define U16(S, fld, flags)            FLD(S, fld, T_U16, flags, 0, 0, NULL)
#define U32(S, fld, flags)            FLD(S, fld, T_U32, flags, 0, 0, NULL)
#define U64(S, fld, flags, max)       FLD(S, fld, T_U64, flags, max, 0, NULL)
#define OPT32(S, fld, flags, def)     FLD(S, fld, T_U32, (flags) | F_OPT, 0, def, NULL)
#define STR(S, fld, flags, max)       FLD(S, fld, T_STR, flags, max, 0, NULL)
#define BYTES(S, fld, flags, max)     FLD(S, fld, T_BYTES, flags, max, 0, NULL)
#define HASH(S, fld)                  FLD(S, fld, T_HASH, 0, 0, 0, NULL)
#define ARRAY(S, fld, flags, max, el) FLD(S, fld, T_ARRAY, flags, max, 0, &el)
#define GROUP(S, fld, flags, sub)     FLD(S, fld, T_GROUP, flags, 0, 0, &sub)
#define N(a)                          (sizeof(a) / sizeof((a)[0]))
#define SCHEMA(nm, S, fields, chk, fen)                                                            \
    {                                                                                              \
        nm, sizeof(S), fields, N(fields), chk, fen                                                 \
    }

#define ID_MAX  ((uint64_t)INT64_MAX) /* checkpoint ids: 1..2^63-1, as the checkpoint link's */
#define MSG_MAX WEIR_CLUSTER_MESSAGE_MAX

static int check_versions(uint32_t version, uint32_t min, char *why, size_t cap);

/* elements and groups */
static const field abi_f[] = {
    U32(weir__cl_abi, version, 0),
    STR(weir__cl_abi, fingerprint, 0, WEIR_CLUSTER_ABI_STR_MAX),
    STR(weir__cl_abi, target, 0, WEIR_CLUSTER_ABI_STR_MAX),
    STR(weir__cl_abi, toolchain, 0, WEIR_CLUSTER_ABI_STR_MAX),
};
static const schema abi_s = SCHEMA("abi", weir__cl_abi, abi_f, NULL, 0);

static const field str_f[] = {{"", T_STR, 0, 0, WEIR_CLUSTER_ARG_MAX, 0, NULL}};
static const schema arg_s = {"arg", sizeof(char *), str_f, 1, NULL, 0};

static const field plugin_ref_f[] = {
    HASH(weir__cl_plugin_ref, sha256),
    U64(weir__cl_plugin_ref, size, F_NONZERO, WEIR_CLUSTER_PLUGIN_SIZE_MAX),
    GROUP(weir__cl_plugin_ref, abi, 0, abi_s),
};
static const schema plugin_ref_s = SCHEMA("plugin", weir__cl_plugin_ref, plugin_ref_f, NULL, 0);

static int check_deploy_plugin(const void *obj, char *why, size_t cap)
{
    const weir__cl_deploy_plugin *p = obj;
    if (p->bytes.p && p->bytes.n != p->size) {
        snprintf(why, cap, "bytes: %u bytes for a plugin of %llu", p->bytes.n,
                 (unsigned long long)p->size);
        return -EBADMSG;
    }
    return 0;
}
static const field deploy_plugin_f[] = {
    HASH(weir__cl_deploy_plugin, sha256),
    U64(weir__cl_deploy_plugin, size, F_NONZERO, WEIR_CLUSTER_PLUGIN_SIZE_MAX),
    FLD(weir__cl_deploy_plugin, bytes, T_OPTB, 0, WEIR_CLUSTER_PLUGIN_SIZE_MAX, 0, NULL),
};
static const schema deploy_plugin_s =
    SCHEMA("plugin", weir__cl_deploy_plugin, deploy_plugin_f, check_deploy_plugin, 0);

static const field hash_f[] = {HASH(weir__cl_hash, b)};
static const schema hash_s = SCHEMA("hash", weir__cl_hash, hash_f, NULL, 0);

static const field subtask_f[] = {U32(weir__cl_subtask, chain, 0), U32(weir__cl_subtask, sub, 0)};
static const schema subtask_s = SCHEMA("subtask", weir__cl_subtask, subtask_f, NULL, 0);

static const field listen_f[] = {U32(weir__cl_listen, channel, 0),
                                 U16(weir__cl_listen, port, F_NONZERO)};
static const schema listen_s = SCHEMA("input", weir__cl_listen, listen_f, NULL, 0);

static const field peer_f[] = {
    U32(weir__cl_peer, channel, 0),
    STR(weir__cl_peer, host, F_NONZERO, WEIR_CLUSTER_HOST_MAX),
    U16(weir__cl_peer, port, F_NONZERO),
};
static const schema peer_s = SCHEMA("peer", weir__cl_peer, peer_f, NULL, 0);

static const field job_info_f[] = {
    U64(weir__cl_job_info, id, F_NONZERO, 0),
    STR(weir__cl_job_info, name, 0, WEIR_CLUSTER_NAME_MAX),
    U8(weir__cl_job_info, state, 0, WEIR__CL_JOB_CANCELLED),
    U32(weir__cl_job_info, parallelism, 0),
    U64(weir__cl_job_info, submitted_ms, 0, 0),
    U64(weir__cl_job_info, ended_ms, 0, 0),
    STR(weir__cl_job_info, message, 0, MSG_MAX),
};
static const schema job_info_s = SCHEMA("job", weir__cl_job_info, job_info_f, NULL, 0);

/* worker -> coordinator */
static int check_register(const void *o, char *why, size_t cap)
{
    const weir__cl_register *m = o;
    return check_versions(m->version, m->min_compat, why, cap);
}
static const field register_f[] = {
    U32(weir__cl_register, version, F_NONZERO),
    U32(weir__cl_register, min_compat, F_NONZERO),
    STR(weir__cl_register, worker_id, F_NONZERO, WEIR_CLUSTER_REGISTER_STR_MAX),
    STR(weir__cl_register, data_host, 0, WEIR_CLUSTER_REGISTER_STR_MAX),
    OPT32(weir__cl_register, slots, F_NONZERO, 1),
    FLD(weir__cl_register, http_port, T_U16, F_OPT, 0, 0, NULL),
};
static const field heartbeat_f[] = {U64(weir__cl_heartbeat, seq, 0, 0)};
static const field listening_f[] = {
    U64(weir__cl_subtask_listening, job, F_NONZERO, 0),
    U32(weir__cl_subtask_listening, attempt, 0),
    U32(weir__cl_subtask_listening, chain, 0),
    U32(weir__cl_subtask_listening, sub, 0),
    ARRAY(weir__cl_subtask_listening, inputs, 0, UINT32_MAX, listen_s),
};
static const field finished_f[] = {
    U64(weir__cl_subtask_finished, job, F_NONZERO, 0),
    U32(weir__cl_subtask_finished, attempt, 0),
    U32(weir__cl_subtask_finished, chain, 0),
    U32(weir__cl_subtask_finished, sub, 0),
    U32(weir__cl_subtask_finished, err, F_SIGNED),
    U8(weir__cl_subtask_finished, fatal, 0, 1),
    STR(weir__cl_subtask_finished, message, 0, MSG_MAX),
    FLD(weir__cl_subtask_finished, records_in, T_U64, F_OPT, 0, 0, NULL),
    FLD(weir__cl_subtask_finished, records_out, T_U64, F_OPT, 0, 0, NULL),
};
static const field checkpointed_f[] = {
    U64(weir__cl_subtask_checkpointed, job, F_NONZERO, 0),
    U64(weir__cl_subtask_checkpointed, id, F_NONZERO, ID_MAX),
    U32(weir__cl_subtask_checkpointed, chain, 0),
    U32(weir__cl_subtask_checkpointed, sub, 0),
    U32(weir__cl_subtask_checkpointed, err, F_SIGNED),
    U64(weir__cl_subtask_checkpointed, bytes, 0, 0),
    STR(weir__cl_subtask_checkpointed, state, F_STORAGE, WEIR_CLUSTER_HANDLE_MAX),
    STR(weir__cl_subtask_checkpointed, position, F_STORAGE, WEIR_CLUSTER_HANDLE_MAX),
};
static const field request_final_f[] = {
    U64(weir__cl_request_final, job, F_NONZERO, 0),
    U32(weir__cl_request_final, chain, 0),
    U32(weir__cl_request_final, sub, 0),
};

static const field op_figures_f[] = {
    U32(weir__cl_op_figures, op, 0),
    U32(weir__cl_op_figures, sub, 0),
    U64(weir__cl_op_figures, records_in, 0, 0),
    U64(weir__cl_op_figures, records_out, 0, 0),
    U64(weir__cl_op_figures, backpressure_ns, 0, 0),
    U64(weir__cl_op_figures, watermark, F_SIGNED, 0),
};
static const schema op_figures_s = SCHEMA("op", weir__cl_op_figures, op_figures_f, NULL, 0);
static const field stats_f[] = {
    U64(weir__cl_subtask_stats, job, F_NONZERO, 0),
    U32(weir__cl_subtask_stats, attempt, 0),
    ARRAY(weir__cl_subtask_stats, ops, 0, WEIR_CLUSTER_STATS_MAX, op_figures_s),
};

/* coordinator -> worker */
static int check_register_ack(const void *o, char *why, size_t cap)
{
    const weir__cl_register_ack *m = o;
    return check_versions(m->version, m->min_compat, why, cap);
}
static const field register_ack_f[] = {
    U32(weir__cl_register_ack, version, F_NONZERO),
    U32(weir__cl_register_ack, min_compat, F_NONZERO),
    U8(weir__cl_register_ack, status, 0, WEIR__CL_RETRY),
    STR(weir__cl_register_ack, message, 0, MSG_MAX),
    OPT32(weir__cl_register_ack, heartbeat_ms, F_NONZERO, WEIR_CLUSTER_HEARTBEAT_MS),
};
static const field heartbeat_ack_f[] = {U64(weir__cl_heartbeat_ack, seq, 0, 0)};
static int check_deploy(const void *o, char *why, size_t cap)
{
    const weir__cl_deploy *m = o;
    if (m->restore_id > ID_MAX) {
        snprintf(why, cap, "restore_id: %llu is past 2^63", (unsigned long long)m->restore_id);
        return -EBADMSG;
    }
    if (m->restore_id && m->first_id <= m->restore_id) {
        snprintf(why, cap, "first_id: %llu is not above the restored checkpoint %llu",
                 (unsigned long long)m->first_id, (unsigned long long)m->restore_id);
        return -EBADMSG;
    }
    return 0;
}
static const field deploy_f[] = {
    U64(weir__cl_deploy, job, F_NONZERO, 0),
    U32(weir__cl_deploy, attempt, 0),
    STR(weir__cl_deploy, name, 0, WEIR_CLUSTER_NAME_MAX),
    BYTES(weir__cl_deploy, plan, F_NONZERO | F_PLAN, WEIR_CLUSTER_FRAME_MAX),
    ARRAY(weir__cl_deploy, subtasks, F_NONZERO, UINT32_MAX, subtask_s),
    ARRAY(weir__cl_deploy, args, 0, WEIR_CLUSTER_ARGS_MAX, arg_s),
    STR(weir__cl_deploy, checkpoint_dir, 0, WEIR_CLUSTER_PATH_MAX),
    U64(weir__cl_deploy, checkpoint_interval_ms, 0, 0),
    U64(weir__cl_deploy, restore_id, 0, 0),
    U64(weir__cl_deploy, first_id, F_NONZERO, ID_MAX),
    ARRAY(weir__cl_deploy, plugins, F_NONZERO, WEIR_CLUSTER_PLUGINS_MAX, deploy_plugin_s),
    FLD(weir__cl_deploy, idle_timeout_ms, T_U64, F_OPT, WEIR_CLUSTER_IDLE_TIMEOUT_MAX_MS, 0, NULL),
    FLD(weir__cl_deploy, state_backend, T_STR, F_OPT, WEIR_CLUSTER_PATH_MAX, 0, NULL),
};
static const field peer_update_f[] = {
    U64(weir__cl_peer_update, job, F_NONZERO, 0),
    U32(weir__cl_peer_update, attempt, 0),
    ARRAY(weir__cl_peer_update, peers, 0, UINT32_MAX, peer_s),
};
static const field cancel_tasks_f[] = {
    U64(weir__cl_cancel_tasks, job, F_NONZERO, 0),
    U32(weir__cl_cancel_tasks, attempt, 0),
    STR(weir__cl_cancel_tasks, reason, 0, MSG_MAX),
};
static const field checkpoint_f[] = {
    U64(weir__cl_checkpoint, job, F_NONZERO, 0),
    U64(weir__cl_checkpoint, id, F_NONZERO, ID_MAX),
};
static const field abort_f[] = {
    U64(weir__cl_abort_checkpoint, job, F_NONZERO, 0),
    U64(weir__cl_abort_checkpoint, id, F_NONZERO, ID_MAX),
    STR(weir__cl_abort_checkpoint, reason, 0, MSG_MAX),
};

/* client -> coordinator */
static int check_hello(const void *o, char *why, size_t cap)
{
    const weir__cl_hello_client *m = o;
    return check_versions(m->version, m->min_compat, why, cap);
}
static const field hello_f[] = {
    U32(weir__cl_hello_client, version, F_NONZERO),
    U32(weir__cl_hello_client, min_compat, F_NONZERO),
    STR(weir__cl_hello_client, name, 0, WEIR_CLUSTER_NAME_MAX),
};
static const field submit_f[] = {
    U32(weir__cl_submit_job, parallelism, 0),
    STR(weir__cl_submit_job, checkpoint_dir, 0, WEIR_CLUSTER_PATH_MAX),
    U64(weir__cl_submit_job, checkpoint_interval_ms, 0, 0),
    ARRAY(weir__cl_submit_job, args, 0, WEIR_CLUSTER_ARGS_MAX, arg_s),
    ARRAY(weir__cl_submit_job, plugins, F_NONZERO, WEIR_CLUSTER_PLUGINS_MAX, plugin_ref_s),
    FLD(weir__cl_submit_job, max_restarts, T_U32, F_OPT | F_SIGNED, 0, (uint32_t)-1, NULL),
    FLD(weir__cl_submit_job, restore, T_U8, F_OPT, 1, 0, NULL),
    FLD(weir__cl_submit_job, idle_timeout_ms, T_U64, F_OPT, WEIR_CLUSTER_IDLE_TIMEOUT_MAX_MS, 0,
        NULL),
    FLD(weir__cl_submit_job, state_backend, T_STR, F_OPT, WEIR_CLUSTER_PATH_MAX, 0, NULL),
};
static const field upload_f[] = {
    HASH(weir__cl_plugin_upload, sha256),
    BYTES(weir__cl_plugin_upload, bytes, F_NONZERO, WEIR_CLUSTER_PLUGIN_SIZE_MAX),
};
static const field cancel_job_f[] = {U64(weir__cl_cancel_job, job, F_NONZERO, 0)};
static const field describe_job_f[] = {U64(weir__cl_describe_job, job, F_NONZERO, 0)};

/* coordinator -> client */
static int check_hello_ack(const void *o, char *why, size_t cap)
{
    const weir__cl_hello_client_ack *m = o;
    return check_versions(m->version, m->min_compat, why, cap);
}
static const field hello_ack_f[] = {
    U32(weir__cl_hello_client_ack, version, F_NONZERO),
    U32(weir__cl_hello_client_ack, min_compat, F_NONZERO),
    U8(weir__cl_hello_client_ack, status, 0, WEIR__CL_REFUSED),
    STR(weir__cl_hello_client_ack, message, 0, MSG_MAX),
};
static int check_submit_ack(const void *o, char *why, size_t cap)
{
    const weir__cl_submit_job_ack *m = o;
    if (m->status == WEIR__CL_SUBMIT_ACCEPTED && !m->job) {
        snprintf(why, cap, "job: 0 for an accepted job");
        return -EBADMSG;
    }
    if (m->status == WEIR__CL_SUBMIT_NEED_PLUGINS && !m->missing.n) {
        snprintf(why, cap, "missing: empty, yet plugins are asked for");
        return -EBADMSG;
    }
    return 0;
}
static const field submit_ack_f[] = {
    U8(weir__cl_submit_job_ack, status, 0, WEIR__CL_SUBMIT_REFUSED),
    U64(weir__cl_submit_job_ack, job, 0, 0),
    STR(weir__cl_submit_job_ack, message, 0, MSG_MAX),
    ARRAY(weir__cl_submit_job_ack, missing, 0, WEIR_CLUSTER_PLUGINS_MAX, hash_s),
    GROUP(weir__cl_submit_job_ack, abi, F_OPT, abi_s),
};
static const field job_list_f[] = {ARRAY(weir__cl_job_list, jobs, 0, UINT32_MAX, job_info_s)};
static const field cancel_ack_f[] = {
    U64(weir__cl_cancel_job_ack, job, F_NONZERO, 0),
    U8(weir__cl_cancel_job_ack, status, 0, WEIR__CL_CANCEL_ENDED),
    STR(weir__cl_cancel_job_ack, message, 0, MSG_MAX),
};
static const field completed_f[] = {
    U64(weir__cl_job_completed, job, F_NONZERO, 0),
    U32(weir__cl_job_completed, err, F_SIGNED),
    STR(weir__cl_job_completed, message, 0, MSG_MAX),
    U64(weir__cl_job_completed, elapsed_ms, 0, 0),
    U64(weir__cl_job_completed, records_in, 0, 0),
    U64(weir__cl_job_completed, records_out, 0, 0),
    U32(weir__cl_job_completed, sources, 0),
    U32(weir__cl_job_completed, sinks, 0),
    U64(weir__cl_job_completed, watermark, F_SIGNED, 0),
    U64(weir__cl_job_completed, ckpt_completed, 0, 0),
    U64(weir__cl_job_completed, ckpt_latest, 0, 0),
    U64(weir__cl_job_completed, ckpt_restored, 0, 0),
    U32(weir__cl_job_completed, restarts, 0),
};

static const field job_detail_f[] = {
    U64(weir__cl_job_detail, job, F_NONZERO, 0),
    U8(weir__cl_job_detail, status, 0, WEIR__CL_DETAIL_UNKNOWN),
    STR(weir__cl_job_detail, json, 0, WEIR_CLUSTER_DETAIL_MAX),
};

typedef struct kind_desc {
    uint8_t kind, dir;
    schema s;
} kind_desc;

#define W  WEIR__CL_FROM_WORKER
#define C  WEIR__CL_FROM_COORDINATOR
#define CL WEIR__CL_FROM_CLIENT
#define TC WEIR__CL_TO_CLIENT
static const kind_desc kinds[] = {
    {WEIR_CLUSTER_REGISTER, W,
     SCHEMA("Register", weir__cl_register, register_f, check_register, 0)},
    {WEIR_CLUSTER_HEARTBEAT, W, SCHEMA("Heartbeat", weir__cl_heartbeat, heartbeat_f, NULL, 0)},
    {WEIR_CLUSTER_SUBTASK_LISTENING, W,
     SCHEMA("SubtaskListening", weir__cl_subtask_listening, listening_f, NULL, 0)},
    {WEIR_CLUSTER_SUBTASK_FINISHED, W,
     SCHEMA("SubtaskFinished", weir__cl_subtask_finished, finished_f, NULL, 0)},
    {WEIR_CLUSTER_SUBTASK_CHECKPOINTED, W,
     SCHEMA("SubtaskCheckpointed", weir__cl_subtask_checkpointed, checkpointed_f, NULL, 0)},
    {WEIR_CLUSTER_REQUEST_FINAL_CHECKPOINT, W,
     SCHEMA("RequestFinalCheckpoint", weir__cl_request_final, request_final_f, NULL, 0)},
    {WEIR_CLUSTER_SUBTASK_STATS, W,
     SCHEMA("SubtaskStats", weir__cl_subtask_stats, stats_f, NULL, 0)},
    {WEIR_CLUSTER_REGISTER_ACK, C,
     SCHEMA("RegisterAck", weir__cl_register_ack, register_ack_f, check_register_ack, 1)},
    {WEIR_CLUSTER_HEARTBEAT_ACK, C,
     SCHEMA("HeartbeatAck", weir__cl_heartbeat_ack, heartbeat_ack_f, NULL, 1)},
    {WEIR_CLUSTER_DEPLOY, C, SCHEMA("Deploy", weir__cl_deploy, deploy_f, check_deploy, 1)},
    {WEIR_CLUSTER_PEER_UPDATE, C,
     SCHEMA("PeerUpdate", weir__cl_peer_update, peer_update_f, NULL, 1)},
    {WEIR_CLUSTER_CANCEL_TASKS, C,
     SCHEMA("CancelTasks", weir__cl_cancel_tasks, cancel_tasks_f, NULL, 1)},
    {WEIR_CLUSTER_TRIGGER_CHECKPOINT, C,
     SCHEMA("TriggerCheckpoint", weir__cl_checkpoint, checkpoint_f, NULL, 1)},
    {WEIR_CLUSTER_COMMIT_CHECKPOINT, C,
     SCHEMA("CommitCheckpoint", weir__cl_checkpoint, checkpoint_f, NULL, 1)},
    {WEIR_CLUSTER_ABORT_CHECKPOINT, C,
     SCHEMA("AbortCheckpoint", weir__cl_abort_checkpoint, abort_f, NULL, 1)},
    {WEIR_CLUSTER_FINAL_CHECKPOINT_ASSIGNED, C,
     SCHEMA("FinalCheckpointAssigned", weir__cl_checkpoint, checkpoint_f, NULL, 1)},
    {WEIR_CLUSTER_HELLO_CLIENT, CL,
     SCHEMA("HelloClient", weir__cl_hello_client, hello_f, check_hello, 0)},
    {WEIR_CLUSTER_SUBMIT_JOB, CL, SCHEMA("SubmitJob", weir__cl_submit_job, submit_f, NULL, 0)},
    {WEIR_CLUSTER_PLUGIN_UPLOAD, CL,
     SCHEMA("PluginUpload", weir__cl_plugin_upload, upload_f, NULL, 0)},
    {WEIR_CLUSTER_LIST_JOBS, CL, {"ListJobs", sizeof(weir__cl_list_jobs), NULL, 0, NULL, 0}},
    {WEIR_CLUSTER_CANCEL_JOB, CL, SCHEMA("CancelJob", weir__cl_cancel_job, cancel_job_f, NULL, 0)},
    {WEIR_CLUSTER_DESCRIBE_JOB, CL,
     SCHEMA("DescribeJob", weir__cl_describe_job, describe_job_f, NULL, 0)},
    {WEIR_CLUSTER_HELLO_CLIENT_ACK, TC,
     SCHEMA("HelloClientAck", weir__cl_hello_client_ack, hello_ack_f, check_hello_ack, 0)},
    {WEIR_CLUSTER_SUBMIT_JOB_ACK, TC,
     SCHEMA("SubmitJobAck", weir__cl_submit_job_ack, submit_ack_f, check_submit_ack, 0)},
    {WEIR_CLUSTER_JOB_LIST, TC, SCHEMA("JobList", weir__cl_job_list, job_list_f, NULL, 0)},
    {WEIR_CLUSTER_CANCEL_JOB_ACK, TC,
     SCHEMA("CancelJobAck", weir__cl_cancel_job_ack, cancel_ack_f, NULL, 0)},
    {WEIR_CLUSTER_JOB_COMPLETED, TC,
     SCHEMA("JobCompleted", weir__cl_job_completed, completed_f, NULL, 0)},
    {WEIR_CLUSTER_JOB_DETAIL, TC, SCHEMA("JobDetail", weir__cl_job_detail, job_detail_f, NULL, 0)},
};
#undef W
#undef C
#undef CL
#undef TC

static const kind_desc *find_kind(int kind)
{
    for (size_t i = 0; i < N(kinds); i++)
        if (kinds[i].kind == kind)
            return &kinds[i];
    return NULL;
}

const char *weir__cl_kind_name(int kind)
{
    const kind_desc *k = find_kind(kind);
    return k ? k->s.name : NULL;
}

int weir__cl_kind_dir(int kind)
{
    const kind_desc *k = find_kind(kind);
    return k ? k->dir : 0;
}

/* ---- shared pieces ---------------------------------------------------------------------- */
__attribute__((format(printf, 4, 5))) static int refuse(int err, char *why, size_t cap,
                                                        const char *fmt, ...)
{
    if (cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return err;
}

/* Put "prefix" in front of what why says (on the way out of a failure). */
__attribute__((format(printf, 3, 4))) static void prefix(char *why, size_t cap, const char *fmt,
                                                         ...)
{
    if (!cap)
        return;
    char head[160], tail[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof(head), fmt, ap);
    va_end(ap);
    snprintf(tail, sizeof(tail), "%s", why);
    snprintf(why, cap, "%s%s", head, tail);
}

static int check_versions(uint32_t version, uint32_t min, char *why, size_t cap)
{
    if (min > version)
        return refuse(-EBADMSG, why, cap, "min_compat: %u is above the version %u", min, version);
    return 0;
}

static uint8_t *at(const void *obj, const field *f)
{
    return (uint8_t *)obj + f->off;
}

static int width(int type)
{
    return type == T_U8 ? 1 : type == T_U16 ? 2 : type == T_U32 ? 4 : 8;
}

static uint64_t get_int(const void *obj, const field *f)
{
    const uint8_t *p = at(obj, f);
    switch (f->type) {
    case T_U8:
        return *p;
    case T_U16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case T_U32: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

static void set_int(void *obj, const field *f, uint64_t v)
{
    uint8_t *p = at(obj, f);
    uint8_t b = (uint8_t)v;
    uint16_t h = (uint16_t)v;
    uint32_t w = (uint32_t)v;
    switch (f->type) {
    case T_U8:
        memcpy(p, &b, 1);
        break;
    case T_U16:
        memcpy(p, &h, 2);
        break;
    case T_U32:
        memcpy(p, &w, 4);
        break;
    default:
        memcpy(p, &v, 8);
    }
}

/* An array's items pointer and count (every WEIR__CL_ARRAY lays them out
 * alike: a pointer, then a u32). The pointer goes through memcpy: it is
 * some T *, read and written as its bytes. */
typedef WEIR__CL_ARRAY(void) any_array;
static void *arr_items(const void *obj, const field *f)
{
    void *v;
    memcpy(&v, at(obj, f) + offsetof(any_array, v), sizeof(v));
    return v;
}
static uint32_t arr_count(const void *obj, const field *f)
{
    uint32_t n;
    memcpy(&n, at(obj, f) + offsetof(any_array, n), sizeof(n));
    return n;
}
static void arr_set(void *obj, const field *f, void *v, uint32_t n)
{
    memcpy(at(obj, f) + offsetof(any_array, v), &v, sizeof(v));
    memcpy(at(obj, f) + offsetof(any_array, n), &n, sizeof(n));
}

static char *get_str(const void *obj, const field *f)
{
    char *s;
    memcpy(&s, at(obj, f), sizeof(s));
    return s;
}
static void set_str(void *obj, const field *f, char *s)
{
    memcpy(at(obj, f), &s, sizeof(s));
}

/* The fewest bytes an element of s takes on the wire (s has no tail). */
static uint64_t min_size(const schema *s)
{
    uint64_t n = 0;
    for (size_t i = 0; i < s->nf; i++) {
        const field *f = &s->f[i];
        switch (f->type) {
        case T_U8:
        case T_U16:
        case T_U32:
        case T_U64:
            n += (uint64_t)width(f->type);
            break;
        case T_OPTB:
            n += 1;
            break;
        case T_HASH:
            n += WEIR_CLUSTER_SHA256_SIZE;
            break;
        case T_GROUP:
            n += min_size(f->sub);
            break;
        default: /* a length or a count */
            n += 4;
        }
    }
    return n ? n : 1;
}

/* The checks of an integer's value, both ways. */
static int check_int(const field *f, uint64_t v, char *why, size_t cap)
{
    if (f->flags & F_SIGNED)
        return 0;
    if ((f->flags & F_NONZERO) && v == 0)
        return refuse(-EBADMSG, why, cap, "%s: 0 is not allowed", f->name);
    if (f->max && v > f->max)
        return refuse(-EBADMSG, why, cap, "%s: %llu is above its largest value %llu", f->name,
                      (unsigned long long)v, (unsigned long long)f->max);
    return 0;
}

/* The checks of a string's or byte string's contents (length already
 * within its cap), both ways. */
static int check_text(const field *f, const uint8_t *p, size_t n, char *why, size_t cap)
{
    if ((f->flags & F_NONZERO) && n == 0)
        return refuse(-EBADMSG, why, cap, "%s: empty", f->name);
    if (f->type == T_STR && n && memchr(p, 0, n))
        return refuse(-EBADMSG, why, cap, "%s: a NUL byte inside the string", f->name);
    if ((f->flags & F_STORAGE) && n > WEIR_CLUSTER_HANDLE_MAX)
        return refuse(-EMSGSIZE, why, cap, "%s: a %zu-byte storage name", f->name, n);
    if ((f->flags & F_STORAGE) && n) {
        char name[WEIR_CLUSTER_HANDLE_MAX + 1];
        memcpy(name, p, n); /* n <= the handle cap: checked before */
        name[n] = '\0';
        if (weir__storage_check_name(name, 0) < 0)
            return refuse(-EBADMSG, why, cap, "%s: \"%s\" is not a storage name", f->name, name);
    }
    return 0;
}

/* ---- free ------------------------------------------------------------------------------- */
static void free_fields(const schema *s, void *obj)
{
    for (size_t i = 0; i < s->nf; i++) {
        const field *f = &s->f[i];
        if (f->type == T_STR) {
            weir__free(get_str(obj, f));
            set_str(obj, f, NULL);
        } else if (f->type == T_GROUP) {
            free_fields(f->sub, at(obj, f));
        } else if (f->type == T_ARRAY) {
            uint8_t *v = arr_items(obj, f);
            uint32_t n = arr_count(obj, f);
            for (uint32_t j = 0; v && j < n; j++)
                free_fields(f->sub, v + (size_t)j * f->sub->size);
            weir__free(v);
            arr_set(obj, f, NULL, 0);
        }
    }
}

void weir__cl_msg_free(weir__cl_msg *m)
{
    if (!m)
        return;
    const kind_desc *k = find_kind(m->kind);
    if (k)
        free_fields(&k->s, &m->u);
    memset(m, 0, sizeof(*m));
}

/* ---- encoding --------------------------------------------------------------------------- */
typedef struct ectx {
    weir_frame_builder *fb;
    char *why;
    size_t cap;
} ectx;

static int enc_fields(ectx *e, const schema *s, const void *obj)
{
    int r;
    if (s->check && (r = s->check(obj, e->why, e->cap)) < 0)
        return r;
    for (size_t i = 0; i < s->nf; i++) {
        const field *f = &s->f[i];
        switch (f->type) {
        case T_U8:
        case T_U16:
        case T_U32:
        case T_U64: {
            uint64_t v = get_int(obj, f);
            if ((r = check_int(f, v, e->why, e->cap)) < 0)
                return r;
            if (f->type == T_U8)
                weir_frame_put_u8(e->fb, (uint8_t)v);
            else if (f->type == T_U16)
                weir_frame_put_u16(e->fb, (uint16_t)v);
            else if (f->type == T_U32)
                weir_frame_put_u32(e->fb, (uint32_t)v);
            else
                weir_frame_put_u64(e->fb, v);
            break;
        }
        case T_STR: {
            const char *str = get_str(obj, f);
            size_t n = str ? strlen(str) : 0;
            if (n > f->max)
                return refuse(-EMSGSIZE, e->why, e->cap, "%s: %zu bytes exceed the %llu-byte limit",
                              f->name, n, (unsigned long long)f->max);
            if ((r = check_text(f, (const uint8_t *)str, n, e->why, e->cap)) < 0)
                return r;
            weir_frame_put_bytes(e->fb, str ? str : "", n);
            break;
        }
        case T_BYTES:
        case T_OPTB: {
            weir__cl_bytes b;
            memcpy(&b, at(obj, f), sizeof(b));
            if (f->type == T_OPTB) {
                weir_frame_put_u8(e->fb, b.p ? 1 : 0);
                if (!b.p)
                    break;
            }
            if (b.n > f->max)
                return refuse(-EMSGSIZE, e->why, e->cap, "%s: %u bytes exceed the %llu-byte limit",
                              f->name, b.n, (unsigned long long)f->max);
            if (b.n && !b.p)
                return refuse(-EINVAL, e->why, e->cap, "%s: %u bytes at NULL", f->name, b.n);
            if ((r = check_text(f, b.p, b.n, e->why, e->cap)) < 0)
                return r;
            if ((f->flags & F_PLAN) && b.n && b.p[0] != WEIR__PLAN_KIND)
                return refuse(-EBADMSG, e->why, e->cap, "%s: not a plan's payload", f->name);
            weir_frame_put_bytes(e->fb, b.p ? (const void *)b.p : "", b.n);
            break;
        }
        case T_HASH:
            weir_frame_put_raw(e->fb, at(obj, f), WEIR_CLUSTER_SHA256_SIZE);
            break;
        case T_GROUP:
            if ((r = enc_fields(e, f->sub, at(obj, f))) < 0) {
                prefix(e->why, e->cap, "%s.", f->name);
                return r;
            }
            break;
        case T_ARRAY: {
            const uint8_t *v = arr_items(obj, f);
            uint32_t n = arr_count(obj, f);
            if (n > f->max)
                return refuse(-EMSGSIZE, e->why, e->cap, "%s: %u elements exceed the limit of %llu",
                              f->name, n, (unsigned long long)f->max);
            if ((f->flags & F_NONZERO) && n == 0)
                return refuse(-EBADMSG, e->why, e->cap, "%s: empty", f->name);
            if (n && !v)
                return refuse(-EINVAL, e->why, e->cap, "%s: %u elements at NULL", f->name, n);
            weir_frame_put_u32(e->fb, n);
            for (uint32_t j = 0; j < n; j++) {
                if ((r = enc_fields(e, f->sub, v + (size_t)j * f->sub->size)) < 0) {
                    prefix(e->why, e->cap, "%s[%u]%s", f->name, j, f->sub->f[0].name[0] ? "." : "");
                    return r;
                }
            }
            break;
        }
        }
    }
    return 0;
}

int weir__cl_encode(const weir__cl_msg *m, weir_frame_builder *fb, char *why, size_t cap)
{
    if (cap)
        why[0] = '\0';
    const kind_desc *k = find_kind(m->kind);
    memset(fb, 0, sizeof(*fb));
    if (!k)
        return refuse(-EINVAL, why, cap, "unknown message kind 0x%02x", m->kind);
    int r = weir_frame_builder_init(fb, m->kind);
    if (r < 0)
        return r;
    if (k->s.fenced)
        weir_frame_put_u64(fb, m->epoch);
    ectx e = {fb, why, cap};
    if ((r = enc_fields(&e, &k->s, &m->u)) < 0) {
        prefix(why, cap, "%s: ", k->s.name);
        return r;
    }
    const uint8_t *b;
    size_t len;
    if ((r = weir_frame_builder_finish(fb, &b, &len)) < 0)
        return r;
    if (len - WEIR_FRAME_HEADER > WEIR_CLUSTER_FRAME_MAX)
        return refuse(-EMSGSIZE, why, cap, "%s: %zu bytes exceed the %u-byte frame cap", k->s.name,
                      len - WEIR_FRAME_HEADER, WEIR_CLUSTER_FRAME_MAX);
    return 0;
}

/* ---- decoding --------------------------------------------------------------------------- */
typedef struct dctx {
    weir_frame_reader r;
    char *why;
    size_t cap;
} dctx;

static size_t left(const dctx *d)
{
    return weir_frame_remaining(&d->r);
}

static int cut(dctx *d, const field *f, const char *what, size_t need)
{
    return refuse(-EBADMSG, d->why, d->cap, "%s: %scut short (%zu of %zu bytes)", f->name, what,
                  left(d), need);
}

/* The defaults of fields [from, nf) of s: the tail an older peer did not
 * send. */
static int def_fields(dctx *d, const schema *s, void *obj, size_t from)
{
    for (size_t i = from; i < s->nf; i++) {
        const field *f = &s->f[i];
        switch (f->type) {
        case T_STR: {
            char *e = weir__malloc(1);
            if (!e)
                return refuse(-ENOMEM, d->why, d->cap, "%s: out of memory", f->name);
            e[0] = '\0';
            set_str(obj, f, e);
            break;
        }
        case T_GROUP: {
            int r = def_fields(d, f->sub, at(obj, f), 0);
            if (r < 0)
                return r;
            break;
        }
        case T_U8:
        case T_U16:
        case T_U32:
        case T_U64:
            set_int(obj, f, f->def);
            break;
        default: /* bytes, hashes and arrays: zero, as the message was */
            break;
        }
    }
    return 0;
}

/* The u32 length or count that comes next, checked against its cap and
 * what is left after it (each unit taking `unit` bytes), without consuming
 * it: *n is valid on 0. */
static int peek_len(dctx *d, const field *f, uint64_t unit, const char *what, uint32_t *n)
{
    if (left(d) < 4)
        return cut(d, f, "length ", 4);
    *n = weir__get_be32(d->r.p + d->r.pos);
    size_t rest = left(d) - 4;
    if (*n > f->max)
        return refuse(-EMSGSIZE, d->why, d->cap, "%s: %u %s exceed the limit of %llu", f->name, *n,
                      what, (unsigned long long)f->max);
    if ((uint64_t)*n * unit > rest)
        return refuse(-EBADMSG, d->why, d->cap, "%s: %u %s need at least %llu bytes, %zu left",
                      f->name, *n, what, (unsigned long long)((uint64_t)*n * unit), rest);
    return 0;
}

/* The next integer of the given type (the bytes are there). */
static uint64_t get_be(weir_frame_reader *r, int type)
{
    uint8_t b;
    uint16_t h;
    uint32_t w;
    uint64_t v;
    switch (type) {
    case T_U8:
        weir_frame_get_u8(r, &b);
        return b;
    case T_U16:
        weir_frame_get_u16(r, &h);
        return h;
    case T_U32:
        weir_frame_get_u32(r, &w);
        return w;
    default:
        weir_frame_get_u64(r, &v);
        return v;
    }
}

static int dec_fields(dctx *d, const schema *s, void *obj)
{
    int r;
    for (size_t i = 0; i < s->nf; i++) {
        const field *f = &s->f[i];
        if ((f->flags & F_OPT) && weir_frame_at_end(&d->r)) {
            if ((r = def_fields(d, s, obj, i)) < 0)
                return r;
            break; /* an older peer's frame: the rest are defaults */
        }
        switch (f->type) {
        case T_U8:
        case T_U16:
        case T_U32:
        case T_U64: {
            size_t w = (size_t)width(f->type);
            if (left(d) < w)
                return cut(d, f, "", w);
            uint64_t v = get_be(&d->r, f->type);
            if ((r = check_int(f, v, d->why, d->cap)) < 0)
                return r;
            set_int(obj, f, v);
            break;
        }
        case T_STR:
        case T_BYTES:
        case T_OPTB: {
            if (f->type == T_OPTB) {
                uint8_t present;
                if (left(d) < 1)
                    return cut(d, f, "presence byte ", 1);
                weir_frame_get_u8(&d->r, &present);
                if (present > 1)
                    return refuse(-EBADMSG, d->why, d->cap, "%s: presence byte %u is not 0 or 1",
                                  f->name, present);
                if (!present)
                    break; /* the view stays {NULL, 0} */
            }
            uint32_t n;
            if ((r = peek_len(d, f, 1, "bytes", &n)) < 0)
                return r;
            const uint8_t *p;
            size_t got;
            weir_frame_get_bytes(&d->r, &p, &got); /* peek_len checked it is all there */
            if ((r = check_text(f, p, n, d->why, d->cap)) < 0)
                return r;
            if ((f->flags & F_PLAN) && n && p[0] != WEIR__PLAN_KIND)
                return refuse(-EBADMSG, d->why, d->cap,
                              "%s: kind byte 0x%02x is not a plan's ('%c')", f->name, p[0],
                              WEIR__PLAN_KIND);
            if (f->type != T_STR) {
                weir__cl_bytes b = {p, n};
                memcpy(at(obj, f), &b, sizeof(b));
                break;
            }
            char *str = weir__malloc((size_t)n + 1);
            if (!str)
                return refuse(-ENOMEM, d->why, d->cap, "%s: out of memory", f->name);
            memcpy(str, p, n);
            str[n] = '\0';
            set_str(obj, f, str);
            break;
        }
        case T_HASH:
            if (left(d) < WEIR_CLUSTER_SHA256_SIZE)
                return cut(d, f, "", WEIR_CLUSTER_SHA256_SIZE);
            weir_frame_get_raw(&d->r, at(obj, f), WEIR_CLUSTER_SHA256_SIZE);
            break;
        case T_GROUP:
            if ((r = dec_fields(d, f->sub, at(obj, f))) < 0) {
                prefix(d->why, d->cap, "%s.", f->name);
                return r;
            }
            break;
        case T_ARRAY: {
            uint32_t n;
            const schema *el = f->sub;
            if ((r = peek_len(d, f, min_size(el), "elements", &n)) < 0)
                return r;
            weir_frame_get_u32(&d->r, &n);
            if ((f->flags & F_NONZERO) && n == 0)
                return refuse(-EBADMSG, d->why, d->cap, "%s: empty", f->name);
            if (!n)
                break;
            uint8_t *v = weir__calloc(n, el->size);
            if (!v)
                return refuse(-ENOMEM, d->why, d->cap, "%s: out of memory for %u elements", f->name,
                              n);
            arr_set(obj, f, v, n); /* owned by obj from here: freed with it */
            for (uint32_t j = 0; j < n; j++) {
                if ((r = dec_fields(d, el, v + (size_t)j * el->size)) < 0) {
                    prefix(d->why, d->cap, "%s[%u]%s", f->name, j, el->f[0].name[0] ? "." : "");
                    return r;
                }
            }
            break;
        }
        }
    }
    if (s->check && (r = s->check(obj, d->why, d->cap)) < 0)
        return r;
    return 0;
}

int weir__cl_decode(const uint8_t *payload, size_t len, weir__cl_msg *m, char *why, size_t cap)
{
    memset(m, 0, sizeof(*m));
    if (cap)
        why[0] = '\0';
    if (len == 0)
        return refuse(-EBADMSG, why, cap, "an empty frame (no message kind)");
    const kind_desc *k = find_kind(payload[0]);
    if (!k)
        return refuse(-EBADMSG, why, cap, "unknown message kind 0x%02x", payload[0]);
    if (len > WEIR_CLUSTER_FRAME_MAX) /* the cap counts the kind byte, as weir_frame_limits */
        return refuse(-EMSGSIZE, why, cap, "%s: %zu bytes exceed the %u-byte frame cap", k->s.name,
                      len, WEIR_CLUSTER_FRAME_MAX);
    dctx d = {.why = why, .cap = cap};
    weir_frame_reader_init(&d.r, payload + 1, len - 1);
    m->kind = payload[0];
    int r = 0;
    if (k->s.fenced) {
        if (left(&d) < 8)
            r = refuse(-EBADMSG, why, cap, "epoch: cut short (%zu of 8 bytes)", left(&d));
        else
            weir_frame_get_u64(&d.r, &m->epoch);
    }
    if (r == 0)
        r = dec_fields(&d, &k->s, &m->u);
    if (r < 0) {
        prefix(why, cap, "%s: ", k->s.name);
        weir__cl_msg_free(m);
        return r;
    }
    /* Bytes past the known fields: a newer peer's tail, ignored. */
    return 0;
}

/* ---- versions --------------------------------------------------------------------------- */
int weir__cl_version_check(const char *self_role, uint32_t self_version, uint32_t self_min,
                           const char *peer_role, uint32_t peer_version, uint32_t peer_min,
                           char *why, size_t cap)
{
    if (cap)
        why[0] = '\0';
    if (!self_version || !self_min || self_min > self_version)
        return refuse(-EBADMSG, why, cap,
                      "this %s declares protocol version %u with oldest compatible %u", self_role,
                      self_version, self_min);
    if (!peer_version || !peer_min || peer_min > peer_version)
        return refuse(-EBADMSG, why, cap,
                      "the %s declares protocol version %u with oldest compatible %u", peer_role,
                      peer_version, peer_min);
    if (peer_version < self_min)
        return refuse(-EPROTONOSUPPORT, why, cap,
                      "protocol mismatch: the %s speaks version %u, this %s speaks %u and talks "
                      "to %u at the oldest: upgrade the %s",
                      peer_role, peer_version, self_role, self_version, self_min, peer_role);
    if (self_version < peer_min)
        return refuse(-EPROTONOSUPPORT, why, cap,
                      "protocol mismatch: this %s speaks version %u, the %s speaks %u and talks "
                      "to %u at the oldest: upgrade this %s",
                      self_role, self_version, peer_role, peer_version, peer_min, self_role);
    return 0;
}

int weir__cl_peek_versions(const uint8_t *payload, size_t len, uint32_t *version, uint32_t *min)
{
    *version = *min = 0;
    if (len == 0)
        return -EBADMSG;
    size_t at = 1;
    switch (payload[0]) {
    case WEIR_CLUSTER_REGISTER_ACK:
        at += 8; /* the epoch */
        break;
    case WEIR_CLUSTER_REGISTER:
    case WEIR_CLUSTER_HELLO_CLIENT:
    case WEIR_CLUSTER_HELLO_CLIENT_ACK:
        break;
    default:
        return -EINVAL;
    }
    if (len < at + 8)
        return -EBADMSG;
    weir_frame_reader r;
    weir_frame_reader_init(&r, payload + at, 8);
    weir_frame_get_u32(&r, version);
    weir_frame_get_u32(&r, min);
    return 0;
}

const char *weir__cl_job_state_name(int state)
{
    switch (state) {
    case WEIR__CL_JOB_RUNNING:
        return "running";
    case WEIR__CL_JOB_RESTARTING:
        return "restarting";
    case WEIR__CL_JOB_SUCCEEDED:
        return "succeeded";
    case WEIR__CL_JOB_FAILED:
        return "failed";
    case WEIR__CL_JOB_CANCELLED:
        return "cancelled";
    }
    return "?";
}
