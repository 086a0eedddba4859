/* SPDX-License-Identifier: Apache-2.0 */
/*
 * local.h - a cluster inside this process: one coordinator and one worker,
 * as `weir node` runs them, joined to each other and to their clients by
 * socketpairs instead of TCP. It is what `weir run` runs a job on
 * (cli/run.c), so that a job on one machine takes the very path it takes
 * on many: submitted as a plugin, planned and placed by the coordinator,
 * deployed to a worker, checkpointed by the coordinator over the
 * checkpoint link.
 *
 * No port is opened. The coordinator has no listener (it admits the
 * socketpairs' ends it is given); the worker holds every subtask, so every
 * channel of the plan has both ends on it and is a local channel
 * (channel_tcp.c makes those in-process, by pointer): only control frames
 * (Deploy, SubtaskListening, checkpoint triggers and acks, the ends of
 * subtasks) cross a socketpair. Liveness verdicts are off: a worker in
 * this process cannot be partitioned from its coordinator, and a job that
 * keeps a thread busy for seconds must not be mistaken for a lost worker.
 *
 * Lifetime: weir__local_start returns once both nodes run (the worker
 * registered); weir__local_stop shuts both down, as SIGTERM shuts a node
 * down, and waits for them. Fibers only.
 */
#ifndef WEIR_CLUSTER_LOCAL_H
#define WEIR_CLUSTER_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/client.h"
#include "weir/stream.h"

typedef struct weir__local weir__local;

/* Start a coordinator and a worker of `slots` slots (0: as many as any
 * plan needs). 0 with *out, or a negative errno with msg (the HTTP port
 * is taken, say). */
int weir__local_start(uint32_t slots, int http_port, weir__local **out, char *msg, size_t cap);
/* With http_port >= 0 the coordinator serves its HTTP API (and the
 * console) on 127.0.0.1:http_port (0: a free one): the port it listens
 * on; -1 without. */
int weir__local_http_port(const weir__local *l);

/* A client connected to the coordinator (weir__client_close it), for
 * submitting, waiting, cancelling. 0, or the errors of
 * weir__client_open_fd. Callable from any fiber while the cluster runs. */
int weir__local_client(weir__local *l, const char *name, weir__client **out, char *msg, size_t cap);

/* Stop both nodes and wait for them; free l. The first node error seen
 * (one that stopped a node early) is copied into msg, if any. NULL: no-op. */
void weir__local_stop(weir__local *l, char *msg, size_t cap);

#endif
