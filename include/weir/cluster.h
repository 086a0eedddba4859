/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/cluster.h - the cluster protocol: what a coordinator, its workers and
 * its clients say to each other, its version and the limits every node
 * holds a peer to. docs/cluster-protocol.md is the field-by-field reference;
 * this comment is the summary.
 *
 * Three roles. A worker connects to the coordinator and registers (Register,
 * answered by RegisterAck); the coordinator deploys a share of a job's plan
 * on it (Deploy), the worker's subtasks bind their inbound channels and say
 * where (SubtaskListening), and once every subtask of the job has reported,
 * the coordinator tells each worker where its outbound channels go
 * (PeerUpdate). Subtasks report their end (SubtaskFinished); the worker
 * heartbeats (Heartbeat / HeartbeatAck); checkpoints are triggered, acked,
 * committed or aborted by messages (TriggerCheckpoint, SubtaskCheckpointed,
 * CommitCheckpoint, AbortCheckpoint), and a bounded source that reached its
 * end asks for one job-wide final checkpoint (RequestFinalCheckpoint /
 * FinalCheckpointAssigned). A client connects, says hello (HelloClient /
 * HelloClientAck) and submits a job (SubmitJob / SubmitJobAck), lists jobs
 * (ListJobs / JobList) or cancels one (CancelJob / CancelJobAck); the
 * coordinator tells it when its job has ended (JobCompleted).
 *
 * Frames. Every message is one weir frame (weir/net.h): a 4-byte big-endian
 * payload length, then the payload, whose first byte is the message kind
 * (enum weir_cluster_kind); integers are big-endian, strings and byte
 * strings a u32 length and the bytes. Every frame the coordinator sends a
 * worker carries, right after the kind, the u64 epoch of the coordinator
 * that sent it (0: unfenced, a coordinator outside high availability); a
 * worker drops a frame from an epoch below the one it is bound to.
 *
 * Plugins travel by content. A SubmitJob names each plugin by its SHA-256,
 * its size and its ABI identity (weir/job.h), no bytes; the coordinator
 * refuses an incompatible identity at once, and otherwise answers with the
 * hashes it does not hold (SubmitJobAck, status NEED_PLUGINS), which the
 * client then sends on the same connection (PluginUpload). A Deploy names
 * its plugins the same way and carries the bytes only of those not yet
 * shipped on that worker connection.
 *
 * Evolution. A message gains fields only at its end ("additive tails"): a
 * decoder ignores bytes past the fields it knows (a newer peer's tail), and
 * gives a field its default when an older peer's shorter frame ends before
 * it. The protocol version changes only for what a tail cannot say (a field
 * changing meaning or width, a new kind that must not reach an older peer).
 * Each node declares its version and the oldest it still speaks in the
 * handshake frames (Register, HelloClient and HelloClientAck right after
 * the kind, RegisterAck after its epoch: places no version will move, so
 * they are read before the rest); a pair talks only when each version lies
 * in the other's range, and a refusal names both versions and which side to
 * upgrade.
 *
 * Limits. Nothing a peer sends is trusted: a frame is refused on its header
 * past WEIR_CLUSTER_FRAME_MAX (a connection's first frame, read before the
 * peer has said who it is, past WEIR_CLUSTER_FIRST_FRAME_MAX), every string
 * has a cap, every count is bounded by the bytes left in the frame, and a
 * frame that does not decode costs its peer the connection, never the
 * process.
 */
#ifndef WEIR_CLUSTER_H
#define WEIR_CLUSTER_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- versions ------------------------------------------------------------------------- */
/* The protocol this weir speaks, and the oldest one it still talks to.
 * 2: a worker takes part in a bounded job's final checkpoint (it answers
 * FinalCheckpointAssigned); a version 1 worker ignored it and would leave
 * the job waiting for its acknowledgement, so 1 is no longer spoken.
 * 3: a worker reports its subtasks' figures once a second (SubtaskStats),
 * and a client may ask for one job in detail (DescribeJob / JobDetail);
 * neither is sent to a peer of version 2, which is still spoken. */
#define WEIR_CLUSTER_PROTO_VERSION    3u
#define WEIR_CLUSTER_PROTO_MIN_COMPAT 2u

/* ---- message kinds ----------------------------------------------------------------------
 * The first payload byte. Grouped by direction, each group in its own range,
 * so a connection's reader can refuse a kind that does not travel its way. */
enum weir_cluster_kind {
    /* worker -> coordinator */
    WEIR_CLUSTER_REGISTER = 0x01,
    WEIR_CLUSTER_HEARTBEAT = 0x02,
    WEIR_CLUSTER_SUBTASK_LISTENING = 0x03,
    WEIR_CLUSTER_SUBTASK_FINISHED = 0x04,
    WEIR_CLUSTER_SUBTASK_CHECKPOINTED = 0x05,
    WEIR_CLUSTER_REQUEST_FINAL_CHECKPOINT = 0x06,
    WEIR_CLUSTER_SUBTASK_STATS = 0x07, /* version 3: its subtasks' figures, once a second */
    /* coordinator -> worker: the epoch follows the kind */
    WEIR_CLUSTER_REGISTER_ACK = 0x21,
    WEIR_CLUSTER_HEARTBEAT_ACK = 0x22,
    WEIR_CLUSTER_DEPLOY = 0x23,
    WEIR_CLUSTER_PEER_UPDATE = 0x24,
    WEIR_CLUSTER_CANCEL_TASKS = 0x25, /* cancel a job's subtasks on this worker */
    WEIR_CLUSTER_TRIGGER_CHECKPOINT = 0x26,
    WEIR_CLUSTER_COMMIT_CHECKPOINT = 0x27,
    WEIR_CLUSTER_ABORT_CHECKPOINT = 0x28,
    WEIR_CLUSTER_FINAL_CHECKPOINT_ASSIGNED = 0x29,
    /* client -> coordinator */
    WEIR_CLUSTER_HELLO_CLIENT = 0x41,
    WEIR_CLUSTER_SUBMIT_JOB = 0x42,
    WEIR_CLUSTER_PLUGIN_UPLOAD = 0x43,
    WEIR_CLUSTER_LIST_JOBS = 0x44,
    WEIR_CLUSTER_CANCEL_JOB = 0x45,
    WEIR_CLUSTER_DESCRIBE_JOB = 0x46, /* version 3: one job in detail (weir job ID) */
    /* coordinator -> client */
    WEIR_CLUSTER_HELLO_CLIENT_ACK = 0x61,
    WEIR_CLUSTER_SUBMIT_JOB_ACK = 0x62,
    WEIR_CLUSTER_JOB_LIST = 0x63,
    WEIR_CLUSTER_CANCEL_JOB_ACK = 0x64,
    WEIR_CLUSTER_JOB_COMPLETED = 0x65,
    WEIR_CLUSTER_JOB_DETAIL = 0x66, /* version 3: GET /api/v1/jobs/ID's JSON */
};

/* ---- limits a node holds every peer to ------------------------------------------------ */
/* Payload bytes (kind included) of one frame, refused on the header alone. */
#define WEIR_CLUSTER_FRAME_MAX (256u << 20)
/* A connection's first frame (Register, HelloClient): a few hundred bytes. */
#define WEIR_CLUSTER_FIRST_FRAME_MAX (64u << 10)
/* A Register's worker id and data host, so a reply naming them stays small. */
#define WEIR_CLUSTER_REGISTER_STR_MAX 255u
/* A host name or address (PeerUpdate). */
#define WEIR_CLUSTER_HOST_MAX 255u
/* A job's, a client's name. */
#define WEIR_CLUSTER_NAME_MAX 255u
/* An error or refusal text. */
#define WEIR_CLUSTER_MESSAGE_MAX 4096u
/* An idle timeout (ms) a SubmitJob or Deploy may carry: what `weir run`
 * takes, so that a deadline made of it cannot overflow. */
#define WEIR_CLUSTER_IDLE_TIMEOUT_MAX_MS ((uint64_t)INT64_MAX / 1000000u)
/* A path (the checkpoint directory). */
#define WEIR_CLUSTER_PATH_MAX 4096u
/* A job argument, and how many a job takes. */
#define WEIR_CLUSTER_ARG_MAX  4096u
#define WEIR_CLUSTER_ARGS_MAX 1024u
/* Plugins one job names, and one plugin's bytes (they ship in one frame). */
#define WEIR_CLUSTER_PLUGINS_MAX     64u
#define WEIR_CLUSTER_PLUGIN_SIZE_MAX (WEIR_CLUSTER_FRAME_MAX - 1024u)
/* An ABI identity's strings (fingerprint, target, toolchain). */
#define WEIR_CLUSTER_ABI_STR_MAX 128u
/* A storage handle in a SubtaskCheckpointed (its bytes, no NUL). */
#define WEIR_CLUSTER_HANDLE_MAX 255u
/* The bytes of a SHA-256. */
#define WEIR_CLUSTER_SHA256_SIZE 32u
/* the JSON text of a JobDetail */
#define WEIR_CLUSTER_DETAIL_MAX (16u << 20)
/* (operator, subtask) figures in one SubtaskStats */
#define WEIR_CLUSTER_STATS_MAX 65536u

/* ---- liveness defaults ----------------------------------------------------------------
 * A RegisterAck tells the worker the heartbeat interval; the rest is the
 * coordinator's own judgement. */
#define WEIR_CLUSTER_HEARTBEAT_MS         500u
#define WEIR_CLUSTER_HEARTBEAT_TIMEOUT_MS 2000u
#define WEIR_CLUSTER_WATCHDOG_MS          100u
/* A worker that hears nothing from its coordinator this long (it answers
 * every heartbeat) ends its session and cancels what it runs: above the
 * coordinator's heartbeat timeout, so that a coordinator restarting a job
 * after a silent worker's loss waits this long (and a margin) before the
 * job's subtasks run again, and a worker cut off from it has stopped
 * them by then. */
#define WEIR_CLUSTER_WORKER_SILENCE_MS 3000u
/* What a worker connection may have queued in the coordinator's dispatch. */
#define WEIR_CLUSTER_BACKLOG_FRAMES 10000u
#define WEIR_CLUSTER_BACKLOG_BYTES  (64u << 20)

#ifdef __cplusplus
}
#endif
#endif /* WEIR_CLUSTER_H */
