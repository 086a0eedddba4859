/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto.h - the cluster protocol's messages (weir/cluster.h,
 * docs/cluster-protocol.md) as C structs, and their encoding and decoding.
 * Nothing here touches a socket: a node reads a frame (net/frame.c, with
 * the caps of weir/cluster.h), decodes its payload here, and encodes what
 * it sends here before it writes it.
 *
 * One struct per message; weir__cl_msg holds any of them with its kind and,
 * for a coordinator-to-worker frame, the coordinator's epoch. Encoding and
 * decoding are driven by one table of field layouts per kind (proto.c), so
 * every message follows the same rules: fields in order, tails optional.
 *
 * Decoding treats every byte as a peer's. It refuses, naming the message
 * and the field (`SubmitJob: plugins[2].abi.target: 300 bytes exceed the
 * 128-byte limit`): a field cut short; a string or byte string past its
 * limit or past the bytes left; a count past its limit or larger than the
 * bytes left could hold (checked before anything is allocated for it); a
 * value out of its range (an unknown status, a checkpoint id of 0, a port
 * of 0, a storage handle that is not a storage name); an unknown kind. A
 * frame longer than the fields it knows is accepted (a newer peer's tail
 * is ignored), and one that ends before an optional tail field gives that
 * field and the ones after it their defaults (an older peer).
 *
 * Errors: -EBADMSG (malformed) or -EMSGSIZE (a length or count past its
 * limit), with the sentence in why[cap] (NUL-terminated when cap > 0);
 * -ENOMEM. A failed decode owns nothing.
 *
 * Ownership of a decoded message: strings are NUL-terminated copies and
 * arrays are allocations, all through base/alloc.h, freed by
 * weir__cl_msg_free(); byte strings (a Deploy's plan, a plugin's bytes)
 * are views into the decoded payload, not copied (they can be 256 MiB), so
 * they are valid while the payload is. A decoded string is never NULL.
 * For encoding, a NULL string is the empty one.
 */
#ifndef WEIR_CLUSTER_PROTO_H
#define WEIR_CLUSTER_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "weir/cluster.h"
#include "weir/net.h"

/* A byte string: a view (decoded: into the payload). */
typedef struct weir__cl_bytes {
    const uint8_t *p;
    uint32_t n;
} weir__cl_bytes;

/* A plugin's ABI identity as its ELF note says (weir/job.h weir_abi_id). */
typedef struct weir__cl_abi {
    uint32_t version; /* WEIR_ABI_VERSION */
    char *fingerprint, *target, *toolchain;
} weir__cl_abi;

/* A plugin named by content (SubmitJob). */
typedef struct weir__cl_plugin_ref {
    uint8_t sha256[WEIR_CLUSTER_SHA256_SIZE];
    uint64_t size; /* its bytes, 1..WEIR_CLUSTER_PLUGIN_SIZE_MAX */
    weir__cl_abi abi;
} weir__cl_plugin_ref;

/* A plugin of a Deploy: its bytes when they were not shipped on this
 * connection before (bytes.p NULL: the worker holds them). */
typedef struct weir__cl_deploy_plugin {
    uint8_t sha256[WEIR_CLUSTER_SHA256_SIZE];
    uint64_t size;
    weir__cl_bytes bytes; /* present: exactly size bytes */
} weir__cl_deploy_plugin;

typedef struct weir__cl_hash {
    uint8_t b[WEIR_CLUSTER_SHA256_SIZE];
} weir__cl_hash;

/* A subtask of the plan: (chain, subtask index). */
typedef struct weir__cl_subtask {
    uint32_t chain, sub;
} weir__cl_subtask;

/* An inbound channel a subtask listens for, on this port of its worker's
 * data host. */
typedef struct weir__cl_listen {
    uint32_t channel; /* the plan's channel id */
    uint16_t port;    /* 1..65535 */
} weir__cl_listen;

/* Where an outbound channel's consumer listens. */
typedef struct weir__cl_peer {
    uint32_t channel;
    char *host;
    uint16_t port;
} weir__cl_peer;

/* A job as JobList reports it. */
typedef struct weir__cl_job_info {
    uint64_t id;
    char *name;
    uint8_t state; /* WEIR__CL_JOB_* */
    uint32_t parallelism;
    uint64_t submitted_ms, ended_ms; /* Unix time; ended 0 while it runs */
    char *message;                   /* why it failed, or "" */
} weir__cl_job_info;

enum { /* RegisterAck, HelloClientAck status */
       WEIR__CL_ACCEPTED = 0,
       WEIR__CL_REFUSED = 1,
       WEIR__CL_RETRY = 2, /* RegisterAck only: refused for now, register again later */
};
enum { /* SubmitJobAck status */
       WEIR__CL_SUBMIT_ACCEPTED = 0,
       WEIR__CL_SUBMIT_NEED_PLUGINS = 1,
       WEIR__CL_SUBMIT_REFUSED = 2,
};
enum { /* CancelJobAck status */
       WEIR__CL_CANCEL_OK = 0,
       WEIR__CL_CANCEL_UNKNOWN = 1,
       WEIR__CL_CANCEL_ENDED = 2,
};
enum { /* JobList state */
       WEIR__CL_JOB_RUNNING = 0,
       WEIR__CL_JOB_RESTARTING = 1,
       WEIR__CL_JOB_SUCCEEDED = 2,
       WEIR__CL_JOB_FAILED = 3,
       WEIR__CL_JOB_CANCELLED = 4,
};

/* Arrays: v[0..n-1], allocated when decoded (NULL when n == 0). */
#define WEIR__CL_ARRAY(T)                                                                          \
    struct {                                                                                       \
        T *v;                                                                                      \
        uint32_t n;                                                                                \
    }
typedef WEIR__CL_ARRAY(char *) weir__cl_strs;

/* ---- worker -> coordinator ---- */
typedef struct weir__cl_register {
    uint32_t version, min_compat;
    char *worker_id; /* 1..WEIR_CLUSTER_REGISTER_STR_MAX bytes */
    char *data_host; /* where its subtasks listen; "" = the address it connected from */
    /* tail (defaults: 1, 0) */
    uint32_t slots;     /* >= 1 */
    uint16_t http_port; /* 0: none */
} weir__cl_register;

typedef struct weir__cl_heartbeat {
    uint64_t seq;
} weir__cl_heartbeat;

typedef struct weir__cl_subtask_listening {
    uint64_t job;
    uint32_t attempt; /* the Deploy's */
    uint32_t chain, sub;
    WEIR__CL_ARRAY(weir__cl_listen) inputs; /* empty: a source, ready */
} weir__cl_subtask_listening;

typedef struct weir__cl_subtask_finished {
    uint64_t job;
    uint32_t attempt;
    uint32_t chain, sub;
    int32_t err;   /* 0, or the subtask's failure */
    uint8_t fatal; /* 1: a redeploy would fail alike (an ABI refusal): no restart */
    char *message;
    /* tail (default 0) */
    uint64_t records_in, records_out;
} weir__cl_subtask_finished;

typedef struct weir__cl_subtask_checkpointed {
    uint64_t job, id; /* id >= 1 */
    uint32_t chain, sub;
    int32_t err;    /* 0, or the subtask's failure: the checkpoint fails */
    uint64_t bytes; /* of state and position */
    char *state;    /* "" or a storage name */
    char *position; /* "" or a storage name */
} weir__cl_subtask_checkpointed;

typedef struct weir__cl_request_final {
    uint64_t job;
    uint32_t chain, sub; /* the bounded source that reached its end */
} weir__cl_request_final;

/* One operator's figures in one subtask, as counted since its attempt
 * started (SubtaskStats; weir_job_op_subtask_stats). */
typedef struct weir__cl_op_figures {
    uint32_t op;  /* the plan's operator id */
    uint32_t sub; /* its subtask */
    uint64_t records_in, records_out;
    uint64_t backpressure_ns; /* waiting for credits */
    int64_t watermark;        /* WEIR_WATERMARK_MIN: none yet */
} weir__cl_op_figures;

typedef struct weir__cl_subtask_stats {
    uint64_t job;
    uint32_t attempt;
    WEIR__CL_ARRAY(weir__cl_op_figures) ops; /* at most WEIR_CLUSTER_STATS_MAX */
} weir__cl_subtask_stats;

/* ---- coordinator -> worker (each with the epoch, in weir__cl_msg) ---- */
typedef struct weir__cl_register_ack {
    uint32_t version, min_compat;
    uint8_t status; /* WEIR__CL_ACCEPTED / REFUSED / RETRY */
    char *message;  /* why not */
    /* tail (default WEIR_CLUSTER_HEARTBEAT_MS) */
    uint32_t heartbeat_ms; /* >= 1 */
} weir__cl_register_ack;

typedef struct weir__cl_heartbeat_ack {
    uint64_t seq; /* the Heartbeat's */
} weir__cl_heartbeat_ack;

typedef struct weir__cl_deploy {
    uint64_t job;
    uint32_t attempt; /* 0 first, +1 per redeploy */
    char *name;
    weir__cl_bytes plan;                       /* weir__plan_encode's payload (kind 'P' first) */
    WEIR__CL_ARRAY(weir__cl_subtask) subtasks; /* the plan's subtasks run here (>= 1) */
    weir__cl_strs args;                        /* the define function's */
    char *checkpoint_dir;                      /* "" none */
    uint64_t checkpoint_interval_ms;
    uint64_t restore_id; /* 0: start fresh */
    uint64_t first_id;   /* the first checkpoint id this run numbers (>= 1) */
    WEIR__CL_ARRAY(weir__cl_deploy_plugin) plugins; /* [0] is the job's (>= 1) */
    /* tail (default 0) */
    uint64_t idle_timeout_ms; /* weir_run_opts.idle_timeout_ms (0: never) */
    /* tail (default "") */
    char *state_backend; /* weir_run_opts.state_backend ("": memory) */
} weir__cl_deploy;

typedef struct weir__cl_peer_update {
    uint64_t job;
    uint32_t attempt;
    WEIR__CL_ARRAY(weir__cl_peer) peers; /* empty: no outbound channel; go */
} weir__cl_peer_update;

typedef struct weir__cl_cancel_tasks {
    uint64_t job;
    uint32_t attempt;
    char *reason;
} weir__cl_cancel_tasks;

/* TriggerCheckpoint, CommitCheckpoint, FinalCheckpointAssigned */
typedef struct weir__cl_checkpoint {
    uint64_t job, id; /* id >= 1 */
} weir__cl_checkpoint;

typedef struct weir__cl_abort_checkpoint {
    uint64_t job, id;
    char *reason;
} weir__cl_abort_checkpoint;

/* ---- client -> coordinator ---- */
typedef struct weir__cl_hello_client {
    uint32_t version, min_compat;
    char *name; /* what the client is ("weir submit") */
} weir__cl_hello_client;

typedef struct weir__cl_submit_job {
    uint32_t parallelism; /* 0: the coordinator's default */
    char *checkpoint_dir; /* "" none */
    uint64_t checkpoint_interval_ms;
    weir__cl_strs args;
    WEIR__CL_ARRAY(weir__cl_plugin_ref) plugins; /* [0] is the job's (>= 1) */
    /* tail (default -1) */
    int32_t max_restarts; /* -1: the coordinator's policy; 0: fail fast */
    /* tail (default 0) */
    uint8_t restore;          /* 1: the first attempt restores the latest completed checkpoint */
    uint64_t idle_timeout_ms; /* weir_run_opts.idle_timeout_ms (0: never) */
    /* tail (default "") */
    char *state_backend; /* weir_run_opts.state_backend ("": memory) */
} weir__cl_submit_job;

typedef struct weir__cl_plugin_upload {
    uint8_t sha256[WEIR_CLUSTER_SHA256_SIZE];
    weir__cl_bytes bytes; /* 1..WEIR_CLUSTER_PLUGIN_SIZE_MAX */
} weir__cl_plugin_upload;

typedef struct weir__cl_list_jobs {
    uint8_t unused; /* no fields */
} weir__cl_list_jobs;

typedef struct weir__cl_cancel_job {
    uint64_t job;
} weir__cl_cancel_job;

typedef struct weir__cl_describe_job {
    uint64_t job;
} weir__cl_describe_job;

/* ---- coordinator -> client ---- */
typedef struct weir__cl_hello_client_ack {
    uint32_t version, min_compat;
    uint8_t status; /* WEIR__CL_ACCEPTED / REFUSED */
    char *message;
} weir__cl_hello_client_ack;

typedef struct weir__cl_submit_job_ack {
    uint8_t status;                        /* WEIR__CL_SUBMIT_* */
    uint64_t job;                          /* ACCEPTED: the job's id (>= 1) */
    char *message;                         /* REFUSED: why */
    WEIR__CL_ARRAY(weir__cl_hash) missing; /* NEED_PLUGINS: upload these */
    /* tail (default: version 0, empty strings): the coordinator's ABI
     * identity, so a refused client can say what differs */
    weir__cl_abi abi;
} weir__cl_submit_job_ack;

typedef struct weir__cl_job_list {
    WEIR__CL_ARRAY(weir__cl_job_info) jobs;
} weir__cl_job_list;

typedef struct weir__cl_cancel_job_ack {
    uint64_t job;
    uint8_t status; /* WEIR__CL_CANCEL_* */
    char *message;
} weir__cl_cancel_job_ack;

/* What weir run prints at a job's end, for the client to print the same. */
typedef struct weir__cl_job_completed {
    uint64_t job;
    int32_t err; /* 0 succeeded, -ECANCELED cancelled, else failed */
    char *message;
    uint64_t elapsed_ms;
    uint64_t records_in, records_out;
    uint32_t sources, sinks;
    int64_t watermark;
    uint64_t ckpt_completed, ckpt_latest, ckpt_restored;
    uint32_t restarts;
} weir__cl_job_completed;

enum { /* JobDetail status */
       WEIR__CL_DETAIL_OK = 0,
       WEIR__CL_DETAIL_UNKNOWN = 1,
};
/* One job as GET /api/v1/jobs/ID shows it (docs/api.md). */
typedef struct weir__cl_job_detail {
    uint64_t job;
    uint8_t status; /* WEIR__CL_DETAIL_* */
    char *json;     /* OK: the JSON object; "" otherwise */
} weir__cl_job_detail;

typedef struct weir__cl_msg {
    uint8_t kind;   /* enum weir_cluster_kind */
    uint64_t epoch; /* coordinator -> worker kinds; 0 elsewhere */
    union {
        weir__cl_register reg;
        weir__cl_heartbeat heartbeat;
        weir__cl_subtask_listening listening;
        weir__cl_subtask_finished finished;
        weir__cl_subtask_checkpointed checkpointed;
        weir__cl_request_final request_final;
        weir__cl_subtask_stats stats;
        weir__cl_register_ack reg_ack;
        weir__cl_heartbeat_ack heartbeat_ack;
        weir__cl_deploy deploy;
        weir__cl_peer_update peer_update;
        weir__cl_cancel_tasks cancel_tasks;
        weir__cl_checkpoint checkpoint; /* TRIGGER / COMMIT / FINAL_CHECKPOINT_ASSIGNED */
        weir__cl_abort_checkpoint abort_checkpoint;
        weir__cl_hello_client hello;
        weir__cl_submit_job submit;
        weir__cl_plugin_upload upload;
        weir__cl_list_jobs list_jobs;
        weir__cl_cancel_job cancel_job;
        weir__cl_describe_job describe_job;
        weir__cl_hello_client_ack hello_ack;
        weir__cl_submit_job_ack submit_ack;
        weir__cl_job_list job_list;
        weir__cl_cancel_job_ack cancel_job_ack;
        weir__cl_job_completed completed;
        weir__cl_job_detail job_detail;
    } u;
} weir__cl_msg;

/* A JobList state's name ("running", "restarting", "succeeded", "failed",
 * "cancelled"; "?" for another value). */
const char *weir__cl_job_state_name(int state);

/* Who sends a kind. */
enum {
    WEIR__CL_FROM_WORKER = 1,      /* to the coordinator */
    WEIR__CL_FROM_COORDINATOR = 2, /* to a worker: fenced by the epoch */
    WEIR__CL_FROM_CLIENT = 3,      /* to the coordinator */
    WEIR__CL_TO_CLIENT = 4,        /* from the coordinator */
};

/* The message's name ("SubmitJob"), or NULL for an unknown kind. */
const char *weir__cl_kind_name(int kind);
/* WEIR__CL_FROM_* / TO_CLIENT, or 0 for an unknown kind. */
int weir__cl_kind_dir(int kind);

/*
 * m's whole frame (length bytes included) into fb, which this initializes
 * (weir_frame_builder_close it either way); take the bytes with
 * weir_frame_builder_finish / _take. The encoder holds m to the decoder's
 * rules, so nothing it sends is refused: 0, or -EMSGSIZE (a string, byte
 * string, count or the whole frame past its limit), -EBADMSG (a value the
 * decoder refuses: a port of 0, an unknown status), -EINVAL (an unknown
 * kind, elements at NULL), -ENOMEM; the sentence in why[cap] as the
 * decoder writes it (why may be NULL with cap 0).
 */
int weir__cl_encode(const weir__cl_msg *m, weir_frame_builder *fb, char *why, size_t cap);

/* A frame's payload (kind byte first) into *m (see the top for errors and
 * ownership). */
int weir__cl_decode(const uint8_t *payload, size_t len, weir__cl_msg *m, char *why, size_t cap);

/* Free what a decoded message owns and zero it. Safe on a zeroed one. */
void weir__cl_msg_free(weir__cl_msg *m);

/*
 * Version negotiation, the same on both sides: this node (self, a role
 * such as "coordinator") speaks self_version and talks to peers down to
 * self_min; the peer (peer_role) declared peer_version / peer_min. 0 when
 * each version lies in the other's range; else -EPROTONOSUPPORT with the
 * refusal in why, naming both versions and which side to upgrade; -EBADMSG
 * when a range is malformed (version 0, or an oldest compatible version
 * above the version).
 */
int weir__cl_version_check(const char *self_role, uint32_t self_version, uint32_t self_min,
                           const char *peer_role, uint32_t peer_version, uint32_t peer_min,
                           char *why, size_t cap);

/*
 * The versions a handshake frame (Register, RegisterAck, HelloClient,
 * HelloClientAck) declares, read from where every version puts them, so a
 * node can negotiate before it decodes the rest, whose layout a version it
 * does not speak may have changed. 0, -EINVAL (not a handshake kind),
 * -EBADMSG (cut short).
 */
int weir__cl_peek_versions(const uint8_t *payload, size_t len, uint32_t *version, uint32_t *min);

#endif
