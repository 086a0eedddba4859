/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client.h - the client side of the cluster protocol (weir/cluster.h,
 * docs/cluster-protocol.md): connect to a coordinator, say hello, submit a
 * job, wait for its end, list the jobs, cancel one. What `weir submit`,
 * `weir jobs` and `weir cancel` (cli/submit.c) are made of.
 *
 * One connection per weir__client, used by one fiber at a time: every call
 * that waits needs a fiber (weir_main's, a task's). A call writes its
 * request and reads frames until the answer it waits for; the coordinator
 * speaks only when asked, except for JobCompleted, which weir__client_wait
 * reads. Anything else is an error that names what arrived and what was
 * expected: a frame past WEIR_CLUSTER_FRAME_MAX (refused on its header), a
 * frame that does not decode (the decoder's sentence), a kind that does not
 * travel to a client, the wrong kind, the connection closing. Such an
 * error, a failed write, or a request whose answer did not come by the
 * deadline breaks the connection: every later call returns -EPIPE saying so
 * (close it and open another). Only weir__client_wait may time out and be
 * called again.
 *
 * Plugins travel by content: a SubmitJob carries references only (hash,
 * size, ABI identity); when the coordinator answers NEED_PLUGINS the client
 * sends one PluginUpload per hash it asks for, each of which must be one
 * the SubmitJob named, and reads the next SubmitJobAck, which must accept
 * or refuse - the client never sends the SubmitJob again.
 *
 * Errors are negative errnos with a sentence in msg[cap] (NUL-terminated
 * when cap > 0; msg may be NULL with cap 0) that names the coordinator
 * ("coordinator 127.0.0.1:7000: ..."):
 *   -EINVAL           a bad argument (a HOST:PORT that does not parse)
 *   -ECONNREFUSED ... connecting failed (weir_net_connect's errors)
 *   -ETIMEDOUT        the deadline passed; -ECANCELED the task was cancelled
 *   -EPROTONOSUPPORT  the protocol versions do not overlap (the message
 *                     names both, and which side to upgrade)
 *   -EACCES           the coordinator refused: a hello, or a job (its
 *                     message as it sent it, and its ABI identity)
 *   -EBADMSG          a malformed or unexpected frame, a NEED_PLUGINS for a
 *                     hash this client never named
 *   -EMSGSIZE         a frame header past the limit
 *   -ECONNRESET       the coordinator closed the connection
 *   -EPIPE            the connection broke earlier (or a write failed)
 *   -ENOMEM
 *
 * Ownership: a weir__client is freed by weir__client_close. What a call
 * fills (weir__cl_job_completed, weir__cl_job_list, weir__cl_cancel_job_ack)
 * owns decoded strings and arrays: free it with the matching
 * weir__client_*_free, which zero it.
 */
#ifndef WEIR_CLUSTER_CLIENT_H
#define WEIR_CLUSTER_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/proto.h"
#include "weir/tls.h"

/* What a connect and the hello may take, as the CLI waits. */
#define WEIR__CLIENT_CONNECT_MS 10000

typedef struct weir__client weir__client;

/*
 * Split "HOST:PORT" (an IPv6 literal in brackets: "[::1]:7000") into
 * host[hcap] (brackets dropped) and *port (1..65535). 0, or -EINVAL with
 * msg saying what is wrong. Memory only, callable anywhere.
 */
int weir__client_parse_hostport(const char *hostport, char *host, size_t hcap, int *port, char *msg,
                                size_t cap);

/*
 * Connect to hostport, send HelloClient {WEIR_CLUSTER_PROTO_VERSION,
 * WEIR_CLUSTER_PROTO_MIN_COMPAT, name} and read HelloClientAck; connect and
 * handshake within deadline (absolute; weir_time_after_ms
 * (WEIR__CLIENT_CONNECT_MS) is the CLI's). The versions are checked both
 * ways (weir__cl_version_check) before the rest of the ack is read; a
 * refusal from the coordinator is reported with its message as it sent
 * it. With tls (a client context), the connection is TLS and the
 * coordinator's certificate must name the host of hostport. 0 with *out,
 * else the errors above and *out NULL. Fibers only.
 */
int weir__client_open(const char *hostport, const char *name, weir_tls_ctx *tls, int64_t deadline,
                      weir__client **out, char *msg, size_t cap);
/* The same over fd, a socket already connected to a coordinator (one end
 * of a socketpair whose other end the coordinator admitted: `weir run`'s
 * embedded cluster), named peer in messages. The client owns fd from the
 * call on, failed or not. */
int weir__client_open_fd(int fd, const char *peer, const char *name, int64_t deadline,
                         weir__client **out, char *msg, size_t cap);
/* Close the connection and free c. NULL is a no-op. */
void weir__client_close(weir__client *c);
/* The coordinator's address as given to weir__client_open. */
const char *weir__client_peer(const weir__client *c);

typedef struct weir__client_submit_opts {
    const char *plugin;         /* the job's JOB.so */
    uint32_t parallelism;       /* 0: the coordinator's default */
    const char *checkpoint_dir; /* NULL: none; made absolute (see prepare) */
    uint64_t checkpoint_interval_ms;
    int argc; /* the job's arguments, argv[0] NOT the plugin */
    char **argv;
    int32_t max_restarts; /* -1: the coordinator's policy; 0: fail fast */
    int restore;          /* the first attempt restores the latest completed checkpoint */
    uint64_t idle_timeout_ms;
    const char *state_backend; /* keyed state's backend URI (weir/state.h); NULL: memory */
} weir__client_submit_opts;

/* A SubmitJob ready to send, with the bytes of the plugins it names
 * (bytes[i] is plugins[i]'s file). Owned: weir__client_job_clear. */
typedef struct weir__client_job {
    weir__cl_submit_job submit;
    weir__cl_bytes *bytes;
} weir__client_job;

/*
 * Make the SubmitJob of o without touching the network: read the plugin
 * (weir__plugin_ref_from_file: hash, size, ABI identity, bytes), make the
 * checkpoint directory absolute (realpath of the directory, or of its
 * parent when it does not exist yet; an absolute path whose parent this
 * machine does not have is taken as written: it names the workers'
 * filesystem), copy the arguments and hold them to the protocol's limits.
 * The file work runs on the blocking pool when called from a fiber, inline
 * elsewhere. 0, or the plugin's errors (-ENOENT, -EACCES, -EFBIG, -ENOEXEC:
 * not a weir job), -ENOENT / -ENOTDIR for a relative checkpoint directory
 * whose parent does not exist, -EMSGSIZE (an argument, the argument count
 * or the path past its limit), -EINVAL, -ENOMEM; *out is then empty. These
 * are the submitter's mistakes, not the cluster's.
 */
int weir__client_job_prepare(const weir__client_submit_opts *o, weir__client_job *out, char *msg,
                             size_t cap);
/* Free what a prepared job owns and zero it. Safe on a zeroed one. */
void weir__client_job_clear(weir__client_job *j);

/*
 * Send j's SubmitJob, upload what the coordinator asks for, and read its
 * answer, all within deadline. 0 with the job's id in *job (the
 * coordinator accepted it), else the errors above (-EACCES: refused, the
 * message naming the coordinator's ABI identity when it sent one).
 */
int weir__client_submit_job(weir__client *c, const weir__client_job *j, int64_t deadline,
                            uint64_t *job, char *msg, size_t cap);
/* weir__client_job_prepare + weir__client_submit_job + clear. */
int weir__client_submit(weir__client *c, const weir__client_submit_opts *o, int64_t deadline,
                        uint64_t *job, char *msg, size_t cap);

/*
 * Wait (until deadline; WEIR_FOREVER for as long as the job runs) for the
 * JobCompleted of job; any other frame, or one for another job, is an
 * error. 0 with *out (free it with weir__client_completed_free): the job
 * ended, out->err saying how (0 succeeded, -ECANCELED cancelled, else
 * failed, with out->message). -ETIMEDOUT / -ECANCELED leave the connection
 * whole: wait again to go on waiting.
 */
int weir__client_wait(weir__client *c, uint64_t job, weir__cl_job_completed *out, int64_t deadline,
                      char *msg, size_t cap);

/* ListJobs, and its JobList in *out (weir__client_list_free). */
int weir__client_list(weir__client *c, weir__cl_job_list *out, int64_t deadline, char *msg,
                      size_t cap);

/* CancelJob, and its CancelJobAck in *out (weir__client_cancel_free); an
 * ack for another job is -EBADMSG. out->status says whether the job is
 * being cancelled, was unknown, or had ended: the call succeeds for all
 * three. */
int weir__client_cancel(weir__client *c, uint64_t job, weir__cl_cancel_job_ack *out,
                        int64_t deadline, char *msg, size_t cap);

/* DescribeJob, and its JobDetail in *out (weir__client_detail_free):
 * out->status says whether the job is known, out->json is what GET
 * /api/v1/jobs/ID answers. -EPROTONOSUPPORT (msg says so) from a
 * coordinator of protocol version 2, which cannot answer it. */
int weir__client_describe(weir__client *c, uint64_t job, weir__cl_job_detail *out, int64_t deadline,
                          char *msg, size_t cap);

void weir__client_completed_free(weir__cl_job_completed *m);
void weir__client_detail_free(weir__cl_job_detail *m);
void weir__client_list_free(weir__cl_job_list *m);
void weir__client_cancel_free(weir__cl_cancel_job_ack *m);

#endif
