/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stream_int.h - the job graph as the runner sees it (graph.c builds it,
 * runner.c runs it) and the per-subtask context behind weir_ctx.
 */
#ifndef WEIR_STREAM_INT_H
#define WEIR_STREAM_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "weir/state.h"
#include "weir/stream.h"

enum { EDGE_FORWARD, EDGE_HASH, EDGE_REBALANCE, EDGE_BROADCAST };
enum { OP_SOURCE, OP_OPERATOR, OP_SINK };

#define MAX_STATES 64

typedef struct sop sop;

/* One input of an operator: records of `from`, partitioned by `edge`. */
typedef struct sinput {
    sop *from;
    int edge;
    weir_key_fn key;
    void *key_arg;
} sinput;

/* An operator of the graph. */
struct sop {
    int id;
    char *name;
    int kind;
    weir_source_def src;
    weir_op_def def;
    void *arg;
    int parallelism; /* 0: the job's */
    sinput *inputs;
    int ninputs;
    sop **outs; /* operators reading this one */
    int nouts;
    int keyed;  /* inputs are hash edges */
    /* Filled by the run. */
    int par;
    int chain;         /* the chain (task) it runs in */
    int chain_pos;     /* its place in that chain */
    _Atomic uint64_t records_in, records_out, backpressure_ns;
    _Atomic int64_t watermark;
};

/* A stream handle: an operator's output with the edge the next input uses,
 * or a union of several. */
struct weir_stream {
    weir_job *j;
    sop *from;
    int edge;
    weir_key_fn key;
    void *key_arg;
    weir_stream **parts; /* union: the streams it joins */
    int nparts;
    void *owned;             /* freed with the handle (a built-in operator's fn_arg) */
    weir_stream *next_alloc; /* the job's list of handles, for freeing */
};

struct weir_job {
    char *name;
    sop **ops;
    int nops, cap;
    weir_stream *streams;
    char error[256];
    int err;
    pthread_mutex_t lock; /* guards error/err during a run */
};

struct subtask;

/* The context of one operator in one subtask. */
struct weir_ctx {
    struct subtask *st;
    sop *op;
    weir_ctx *next; /* the next operator of the chain, NULL at its tail */
    void *state;
    /* keyed */
    const void *key;
    size_t key_len;
    weir_state_backend *backend;
    int kg;
    uint8_t *keybuf; /* [state index][key] composed here */
    size_t keycap;
    char *states[MAX_STATES]; /* state names, by index (this subtask's) */
    int nstates;
    uint64_t in, out; /* records, added to the operator's counters at the end */
};

/* runner.c, for graph.c's built-in operators */
void weir__stream_fail(weir_job *j, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
