/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckpt_link.h - the messages of a checkpoint, and the link they travel
 * on between the checkpoint coordinator and the subtasks.
 *
 * The coordinator (ckpt_coord.c) and the subtasks (checkpoint.c) share no
 * memory: everything goes as a message.
 *
 *   TRIGGER   coordinator -> each source subtask: take checkpoint id
 *   ACK       subtask -> coordinator: done with id (err 0), with the
 *             handles (storage names) its state and source position went
 *             to and their size; or err < 0, the checkpoint fails
 *   COMPLETE  coordinator -> every subtask: id is complete (the manifest
 *             and COMPLETED-<id> are durable): two-phase sinks commit
 *   ABORT     coordinator -> every subtask: id will never complete:
 *             two-phase sinks drop what they pre-committed for it
 *   FINAL_REQ subtask -> coordinator: it reached the end of its input;
 *             the job needs its final checkpoint (id 0: the subtask does
 *             not know it yet)
 *   ABORT     link -> coordinator (never from a subtask): the link to
 *             the process `chain` ended (err says how) before the final
 *             checkpoint completed; its subtasks acknowledge nothing more,
 *             so the final cannot complete and the run fails
 *   FINAL     coordinator -> every subtask: id is the job's final
 *             checkpoint; a subtask takes it once at the end of its input
 *             (its ACK as for any checkpoint), and ends once it completed
 *
 * A bounded job with checkpoints ends through one job-wide final
 * checkpoint: the first FINAL_REQ abandons a checkpoint in progress, no
 * regular one starts after it, and the final completes (manifest, marker,
 * COMPLETE) once every subtask of the plan acknowledged it, so what
 * two-phase sinks received after the last regular checkpoint is committed
 * through a checkpoint too, before the job completes.
 *
 * A link carries them. In one process (weir__ckpt_link_local) an ACK is
 * an item of the coordinator's queue and the others are items of the
 * subtask's mailbox; across processes the cluster's control connection
 * carries the same messages (encoded in its frames) and a process
 * delivers what it receives to its own subtasks. Subtasks are named by
 * the plan's (chain, subtask) numbers.
 */
#ifndef WEIR_STREAM_CKPT_LINK_H
#define WEIR_STREAM_CKPT_LINK_H

#include <stddef.h>
#include <stdint.h>

#define WEIR__CKPT_HANDLE_MAX 256 /* a handle's bytes with its NUL */

enum {
    WEIR__CK_TRIGGER = 1,
    WEIR__CK_ACK,
    WEIR__CK_COMPLETE,
    WEIR__CK_ABORT,
    WEIR__CK_FINAL_REQ,
    WEIR__CK_FINAL,
    WEIR__CK_LAST = WEIR__CK_FINAL
};

/* ABORT of this id: the coordinator stopped before a final checkpoint was
 * assigned, and none will come (subtasks at their end fail). */
#define WEIR__CK_NO_FINAL ((uint64_t)INT64_MAX)

/* Kinds a subtask sends (the coordinator receives: ACK, FINAL_REQ). */
static inline int weir__ckpt_to_coordinator(int kind)
{
    return kind == WEIR__CK_ACK || kind == WEIR__CK_FINAL_REQ;
}

typedef struct weir__ckpt_msg {
    int kind;
    uint64_t id;
    uint32_t chain, sub;                  /* the subtask it is from (ACK) or for */
    int32_t err;                          /* ACK: 0 or the subtask's failure */
    uint64_t bytes;                       /* ACK: the state's and position's size */
    char state[WEIR__CKPT_HANDLE_MAX];    /* ACK: "" or the state's handle */
    char position[WEIR__CKPT_HANDLE_MAX]; /* ACK: "" or the source position's */
} weir__ckpt_msg;

typedef struct weir__ckpt_link weir__ckpt_link;
struct run;

typedef struct weir__ckpt_link_ops {
    /* An ACK or FINAL_REQ, from a subtask's thread. 0 or a negative errno. */
    int (*ack)(weir__ckpt_link *l, const weir__ckpt_msg *m);
    /* The coordinator's next ACK or FINAL_REQ, waiting up to deadline. */
    int (*recv_ack)(weir__ckpt_link *l, weir__ckpt_msg *m, int64_t deadline);
    /* TRIGGER, COMPLETE, ABORT or FINAL for subtask (m->chain, m->sub). */
    int (*send)(weir__ckpt_link *l, const weir__ckpt_msg *m);
    /* The run's subtasks have ended: the link's own tasks end (before
     * anything of the run is freed). NULL: it has none. */
    void (*stop)(weir__ckpt_link *l);
    void (*free)(weir__ckpt_link *l);
} weir__ckpt_link_ops;

struct weir__ckpt_link {
    const weir__ckpt_link_ops *ops;
};

/* For links (ckpt_coord.c): the subtask of this process a message names
 * (NULL: not one of the plan's, or it runs elsewhere), and the delivery
 * of TRIGGER / COMPLETE / ABORT / FINAL to it as an item of its mailbox. */
struct subtask;
struct subtask *weir__ckpt_local_subtask(struct run *r, const weir__ckpt_msg *m);
int weir__ckpt_deliver(struct subtask *st, const weir__ckpt_msg *m);

/* The link of a run whose subtasks all share this process. NULL with
 * errno. */
weir__ckpt_link *weir__ckpt_link_local(struct run *r);

/* The link between processes (ckpt_link_tcp.c): process `coordinator`
 * runs the coordinator; fds[p] is this process's socket to process p
 * (the coordinator's: one per worker; a worker's: fds[coordinator]),
 * which the link owns once made. place() says where each subtask runs. */
typedef struct weir__ckpt_tcp_opts {
    int self, nprocs, coordinator;
    const int *fds;
    int (*place)(void *arg, uint32_t chain, uint32_t sub);
    void *place_arg;
} weir__ckpt_tcp_opts;
weir__ckpt_link *weir__ckpt_link_tcp(struct run *r, const weir__ckpt_tcp_opts *o);

/* A checkpoint message frame's payload (kind byte first) into m; -EBADMSG
 * with why for anything malformed. */
int weir__ckpt_msg_decode(const uint8_t *p, size_t len, weir__ckpt_msg *m, char *why, size_t cap);

#endif
