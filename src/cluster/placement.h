/* SPDX-License-Identifier: Apache-2.0 */
/*
 * placement.h - which worker runs each subtask of a plan (stream/plan.h):
 * the coordinator calls weir__place once per deploy with the workers'
 * free slots and ships each worker the subtasks it got.
 *
 * Why it groups. Subtask i of a chain feeds subtask i of the next across
 * a forward edge; the data plane hands a batch over such a channel as a
 * pointer when both ends share a process and serialises it over a socket
 * when they do not, so placement alone decides what a forward edge costs.
 * Plan order is chain-major (every subtask of the source, then every one
 * of the next chain), and a greedy first fit in that order fills one
 * worker with one chain's subtasks before touching the next: it scatters
 * every pipeline across workers. Measured with 3 workers at parallelism
 * 12, a four-operator forward-only query sent 16 of its 24 channels over
 * a socket that way (8 local; 0 remote placed by instance) and spent 2.05x
 * the CPU per event it did at parallelism 4; test_placement.c reproduces
 * the 16 of 24 on a planned job. A hash, rebalance or broadcast edge
 * reaches every downstream subtask wherever it runs: grouping only ever
 * turns forward channels local.
 *
 * The rules:
 *  - An instance is every subtask sharing an index i, over all chains whose
 *    parallelism is above i (a source of parallelism 1 before a map of 4:
 *    instance 0 holds two subtasks, instances 1-3 one each).
 *  - Workers are visited in sorted id order (strcmp), whatever order w[] is
 *    in: the coordinator's registry has no stable order, and a placement
 *    that changes between deploys of one plan cannot be measured. Same
 *    inputs, same output.
 *  - Instance i goes whole to the first worker, cyclically from the
 *    (i mod nw)-th in sorted order, with room for all of it. With room
 *    everywhere, instances so go round robin and load spreads.
 *  - An instance no worker has room for is split: its subtasks fill the
 *    free slots of the workers in sorted order (from the first, not the
 *    (i mod nw)-th). Splitting is worse than co-locating and much better
 *    than refusing to deploy. Room in total is not room per instance:
 *    instances of 3 over workers of 4 slots leave 1 free on each, so a
 *    fourth instance is split even though 3 slots are free.
 *  - Fewer free slots in total than subtasks is -ENOSPC, and nothing is
 *    placed: never a partial placement.
 *
 * Memory only, no locks: callable anywhere.
 */
#ifndef WEIR_CLUSTER_PLACEMENT_H
#define WEIR_CLUSTER_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "stream/plan.h"

typedef struct weir__place_worker {
    const char *id;      /* worker id (unique) */
    uint32_t free_slots; /* subtasks it can still take */
} weir__place_worker;

/* out[k] for every subtask k of p in plan order (k = the parallelism of
 * the chains before its chain + its index) = an index into w[], the
 * caller's order. 0; -ENOSPC with "the job needs N slots, the cluster has
 * M free (worker a: x, ...)" in msg and out not written (never a partial
 * placement); -EINVAL for no workers, a NULL or duplicate worker id or a
 * NULL argument; -ENOMEM. msg (may be NULL) is always NUL-terminated when
 * cap > 0. */
int weir__place(const weir__plan *p, const weir__place_worker *w, size_t nw, uint32_t *out,
                char *msg, size_t cap);

/* How many of p's channels join subtasks that out (weir__place's) puts on
 * different workers: every one is serialised over a socket. >= 0, -EINVAL
 * or -ENOMEM. */
int weir__place_count_remote(const weir__plan *p, const uint32_t *out);

#endif
