/* SPDX-License-Identifier: Apache-2.0 */
/*
 * channel_tcp.h - channels between subtasks in different processes, over
 * TCP in the wire layout of wire.h.
 *
 * One weir__tcp_net per process and run. It knows where every subtask of
 * the plan runs (place(): a process number) and each process's address,
 * and listens on this process's socket (made by the caller, so that a
 * test or a worker can bind port 0 and tell the others the port before
 * anything runs). As deploy's channel factory (weir__tcp_channel) it makes
 *
 *   - a local channel (channel_local.c) when both ends run here;
 *   - a sending end when only the producer does: it connects to the
 *     consumer's process on its first send (retrying until the connect
 *     deadline, as the other process may still be starting), announces
 *     the channel with HELLO, then writes BATCH and control frames. A
 *     batch is sent only with a credit in hand: credits come back in
 *     CREDIT frames, read by a fiber of the channel's own. The frames of
 *     one step of the producer wait for its push (channel.h) and go out in
 *     one write - a source's batch and the watermark after it, say, which
 *     would otherwise be two writes and two wake-ups of the reader for one
 *     batch (a watermark replaces one held right before it); a barrier,
 *     an idle flag or the end of input goes out at once, and so does
 *     what is held once it passes 64 KiB;
 *   - a receiving end when only the consumer does: the net's accept fiber
 *     takes the connection and hands it to a fiber of its own, which
 *     checks its HELLO against what the plan says of that channel (the
 *     first connection to claim a channel has it) and starts a reader fiber that decodes each frame
 * into an item of the consumer's mailbox. The consumer's credit() returns credits in CREDIT frames,
 * several in one when it can (see rx_credit).
 *
 * Reading: each connection is read into a buffer of the channel's own, so
 * one read takes every frame the socket holds and they are decoded from
 * it one after another; a read tries a non-blocking recv first and waits
 * on the loop only when the socket is empty. A credit reader releases all
 * the credits of the frames one read brought at once.
 *
 * TLS (tls_server / tls_client in the options: a worker's --data-tls-*
 * flags, docs/cluster.md "TLS"). Every connection of the net is mutual
 * TLS: the producer's handshake follows its connect, under the channel's
 * connect deadline, on the sending fiber, and checks that the consumer's
 * certificate chains to the authority and names the host connected to;
 * the consumer's side runs on the connection's fiber, in the 10 s of the
 * HELLO. The
 * frames are the same, inside the session: a push is one weir_tls_write
 * (records of 16 KiB, one SSL_write per 64 KiB), credits one each; the
 * buffered reads read the session instead of the socket. Links end with
 * close_notify. A net with TLS and one without do not talk: the TLS
 * producer's handshake fails at once (the plaintext consumer drops what
 * is not a HELLO) and its message says to give every worker the flags; a
 * plaintext producer's HELLO on a TLS consumer (told apart by its first
 * byte) fails that channel with the same advice. A failed handshake on
 * the consumer's side is logged and the connection dropped, as a
 * stranger's HELLO is.
 *
 * Failures. A malformed, oversized or unexpected frame, a producer that
 * sends past its credits, a connection lost before end of input, or a
 * producer that never connects within the deadline, fails the job with a
 * message naming the channel and its ends, and ends the consumer with that
 * error (an IT_FAIL item); so does a connection this process cannot take
 * for lack of memory (every channel still waiting for its producer fails).
 * The process goes on. A sending end whose connection broke returns the
 * error from its send, failing its subtask; a consumer that sends anything
 * but CREDIT frames, or more credits than the channel has, fails the job.
 *
 * Lifetime: weir__tcp_start (deploy's start hook) starts the accept fiber;
 * weir__tcp_stop (the stop hook, once the subtasks have ended) cancels and
 * joins every fiber of the net; the channels themselves are freed with
 * the run, and the net after it (weir__tcp_free).
 */
#ifndef WEIR_STREAM_CHANNEL_TCP_H
#define WEIR_STREAM_CHANNEL_TCP_H

#include "stream/deploy.h"
#include "weir/tls.h"

typedef struct weir__tcp_net weir__tcp_net;

/* The fewest credits a TCP channel gets by default. Over TCP a batch and
 * the credit for it each cross a socket and wait for a turn of the
 * receiving loop, where a local channel hands the batch over by pointer:
 * with the run's 4 credits the producer of q5 over two processes waits for
 * credits much of the time, and 16 gave about a fifth more events/s
 * (bench/RESULTS.md, "Engine seams"). It costs memory only while the
 * consumer falls behind: up to 16 batches (64 KiB of records each) queued
 * per channel. */
#define WEIR__TCP_MIN_CREDITS 16u

typedef struct weir__tcp_opts {
    int self;                 /* this process's number */
    int nprocs;               /* processes 0..nprocs-1 */
    const char *const *hosts; /* [nprocs]: where each listens */
    const int *ports;         /* [nprocs] */
    int listen_fd;            /* this process's listening socket; a net made closes it */
    /* The process subtask sub of chain runs in. */
    int (*place)(void *arg, uint32_t chain, uint32_t sub);
    void *place_arg;
    uint64_t plan_hash; /* the same on every side: HELLOs carry it */
    /* Batches a TCP channel may have in flight (the HELLO carries it, so
     * both ends must agree). 0: the plan's credits, but at least
     * WEIR__TCP_MIN_CREDITS. */
    uint32_t credits;
    int64_t connect_timeout_ms; /* 0: 30 s */
    /* Where the consumer of channel id listens, when the net does not
     * know each process's address up front (a cluster's worker learns
     * them per channel from a PeerUpdate): a host (valid while the net
     * is) and *port, or NULL for none known. NULL: hosts[] / ports[] of
     * the consumer's process. */
    const char *(*peer)(void *arg, uint32_t channel, int *port);
    void *peer_arg;
    /* Checkpoint messages (ckpt_link_tcp.c): process `coordinator` runs
     * the coordinator; control_fds[p] is this process's socket to process
     * p (see weir__ckpt_tcp_opts), owned by the net's link once the run
     * made it. NULL: the run does not checkpoint across processes. */
    const int *control_fds;
    int coordinator;
    /* TLS on every channel over TCP (weir/tls.h; the caller's contexts,
     * alive while the net is; both or neither, NULL: plain TCP). A
     * receiving end is a server of tls_server (mutual TLS: its authority
     * checks the producer's certificate); a sending end a client of
     * tls_client, which checks that the consumer's certificate names the
     * host it connected to (what peer() or hosts[] said). */
    weir_tls_ctx *tls_server, *tls_client;
} weir__tcp_opts;

/* NULL with errno (EINVAL, ENOMEM), and then listen_fd and control_fds
 * stay the caller's to close. */
weir__tcp_net *weir__tcp_new(const weir__tcp_opts *o);
void weir__tcp_free(weir__tcp_net *n);

/* A deploy for this process's share of the plan over n (here(), the
 * channel factory, start and stop), to give weir__job_run_plan. */
void weir__tcp_deploy(weir__tcp_net *n, weir__deploy *d);

/* A stable hash of a plan's frame bytes (both sides of a connection run
 * the same plan). */
uint64_t weir__tcp_plan_hash(const void *frame, size_t len);

/* Bytes written and read by the net's channels so far (frames included),
 * and the records its sending ends sent. */
void weir__tcp_stats(const weir__tcp_net *n, uint64_t *sent, uint64_t *received, uint64_t *records);

#endif
