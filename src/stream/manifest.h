/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manifest.h - what a completed checkpoint holds: chk-<id>/MANIFEST.json.
 *
 * The coordinator writes it once every subtask acknowledged the
 * checkpoint, before the COMPLETED-<id> marker: the job, every operator
 * with the parallelism it ran at (and whether it must keep it: a source
 * that saves a position, a two-phase sink), and every subtask of a chain
 * head with its key-group range, the handle (storage name) and size of its
 * state, and its source position's handle. A restore reads only what the
 * manifest names: a worker given a manifest by the coordinator needs no
 * listing of the checkpoint's directory.
 *
 * A job's final checkpoint (ckpt_link.h) says "final": true and names no
 * state or position: it was taken once every subtask had reached the end
 * of its input, and a restore from it only lets two-phase sinks commit
 * what it covered (nothing runs again).
 *
 *   {"weir_manifest": 1, "checkpoint": 7, "job": "q5",
 *    "operators": [{"name": "src", "parallelism": 2, "fixed": true}, ...],
 *    "subtasks": [{"operator": "count", "subtask": 0, "key_groups": [0, 64],
 *                  "state": "chk-7/count.0.state", "bytes": 1234,
 *                  "position": null}, ...]}
 *
 * The decoder treats the file as untrusted: every type, count, range and
 * name is checked, and a refusal says what was wrong.
 */
#ifndef WEIR_STREAM_MANIFEST_H
#define WEIR_STREAM_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#define WEIR__MANIFEST_VERSION 1
#define WEIR__MANIFEST_MAX     (64u << 20) /* bytes of a manifest file */

typedef struct weir__manifest_op {
    char *name;
    uint32_t par;
    int fixed;
} weir__manifest_op;

typedef struct weir__manifest_sub {
    uint32_t op; /* index in ops: the chain's head */
    uint32_t sub;
    uint32_t kg_first, kg_end; /* 0, 0: not keyed */
    char *state;               /* storage name, or NULL */
    char *position;            /* a source's position, or NULL */
    uint64_t bytes;            /* state + position */
} weir__manifest_sub;

typedef struct weir__manifest {
    uint64_t id;
    int final; /* the job's final checkpoint: "final": true (absent: false) */
    char *job;
    uint32_t nops, nsubs;
    weir__manifest_op *ops;
    weir__manifest_sub *subs;
} weir__manifest;

/* The manifest as JSON text (weir__free it); NULL on allocation failure. */
char *weir__manifest_encode(const weir__manifest *m, size_t *len);
/* Text back into *m (freed with weir__manifest_clear). 0, or -EBADMSG
 * with why, or -ENOMEM. */
int weir__manifest_decode(const void *text, size_t len, weir__manifest *m, char *why, size_t cap);
void weir__manifest_clear(weir__manifest *m);
/* The op index of name, or -1. */
int weir__manifest_find(const weir__manifest *m, const char *name);

#endif
