/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plan.h - the job graph turned into what runs: which operators share a
 * task (chains), how many subtasks each chain has, the edges between them,
 * every subtask's key-group range, and the channels that join subtasks.
 *
 * weir__plan_make derives it from a built job graph and the run's options;
 * it is the only place that decides chaining and parallelism. A plan is
 * plain data: weir__plan_encode writes it as one frame (weir/net.h
 * conventions), weir__plan_decode reads one back treating every byte as
 * untrusted (a coordinator ships plans to workers), and weir__plan_bind
 * checks a plan against the job graph the process loaded from the same
 * plugin (operator names, kinds and edges must be identical: operator ids
 * are their positions in the graph, which the job's define function makes
 * the same on every side) and records chain and parallelism on its
 * operators. deploy.c builds subtasks from it.
 *
 * Channels are not encoded: they follow from the chains and edges, and
 * weir__plan_make and weir__plan_decode both derive them with one
 * function, so both sides of a channel number it alike. For each chain,
 * for each input of its head, for each producer subtask p, for each
 * consumer subtask s (only s == p on a forward edge): one channel, ids in
 * that order; a consumer's inputs are numbered in the order its channels
 * come.
 *
 * Wire layout (kind 'P', integers big-endian, strings u32 length + bytes):
 *
 *   u32 version (1)  str job  u32 key groups  u32 credits
 *   u32 nops, per operator: str name, u8 kind, u8 keyed, u32 parallelism,
 *       u32 chain, u32 position in it, u32 ninputs,
 *       per input: u32 from (an earlier operator), u8 tag, u8 edge
 *   u32 nchains, per chain: u32 parallelism, u32 nops, nops x u32 operator,
 *       parallelism x (u32 first key group, u32 end key group)
 */
#ifndef WEIR_STREAM_PLAN_H
#define WEIR_STREAM_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "weir/net.h"
#include "weir/stream.h"

#define WEIR__PLAN_KIND      'P'
#define WEIR__PLAN_VERSION   1u
#define WEIR__PLAN_MAX_OPS   4096u
#define WEIR__PLAN_MAX_NAME  200u       /* an operator name (graph.c's limit) */
#define WEIR__PLAN_MAX_CHANS (1u << 20) /* channels a plan may need */

typedef struct weir__plan_input {
    uint32_t from; /* the operator it reads */
    uint8_t tag;   /* 0: from's main output, 1: its side output */
    uint8_t edge;  /* EDGE_FORWARD .. EDGE_BROADCAST (stream_int.h) */
} weir__plan_input;

typedef struct weir__plan_op {
    char *name;
    uint8_t kind; /* OP_SOURCE, OP_OPERATOR, OP_SINK */
    uint8_t keyed;
    uint32_t par;
    uint32_t chain, pos;
    uint32_t ninputs;
    weir__plan_input *inputs;
} weir__plan_op;

typedef struct weir__plan_chain {
    uint32_t par;
    uint32_t nops;
    uint32_t *ops;      /* operator ids, head first */
    uint32_t *kg_first; /* [par]: the key groups of each subtask (keyed heads), */
    uint32_t *kg_end;   /* [first, end); 0, 0 for a head that is not keyed */
} weir__plan_chain;

/* A channel: producer subtask (from_chain, from_sub) to consumer subtask
 * (to_chain, to_sub), carrying the records of head input `head_input` of
 * to_chain, which is the consumer's input number `to_input`. */
typedef struct weir__plan_channel {
    uint32_t id;
    uint32_t from_chain, from_sub;
    uint32_t to_chain, to_sub;
    uint32_t head_input, to_input;
} weir__plan_channel;

typedef struct weir__plan {
    char *job;
    uint32_t ngroups, credits;
    uint32_t nops;
    weir__plan_op *ops;
    uint32_t nchains;
    weir__plan_chain *chains;
    uint32_t nchannels; /* derived */
    weir__plan_channel *channels;
    uint32_t nsubtasks; /* over all chains */
} weir__plan;

/* Plan the job for parallelism (the default of operators without their
 * own) and credits per channel. 0, or a negative errno with the reason in
 * why (the graph is refused: a forward edge between parallelisms, an
 * operator without input). */
int weir__plan_make(const weir_job *j, int parallelism, int credits, weir__plan **out, char *why,
                    size_t cap);
void weir__plan_free(weir__plan *p);

/* The plan as one frame (header included) in fb. 0 or the builder's error. */
int weir__plan_encode(const weir__plan *p, weir_frame_builder *fb);
/* A frame's payload (kind byte first) back into a plan. -EBADMSG (why
 * names what was wrong), -ENOMEM. Nothing is kept on failure. */
int weir__plan_decode(const void *payload, size_t len, weir__plan **out, char *why, size_t cap);

/* Check p describes job j (same operators, kinds, edges, and a parallelism
 * j can run), then record each operator's parallelism and chain on j.
 * -EINVAL with why on a mismatch. */
int weir__plan_bind(const weir__plan *p, weir_job *j, char *why, size_t cap);

#endif
