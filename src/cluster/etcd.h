/* SPDX-License-Identifier: Apache-2.0 */
/*
 * etcd.h - leader election among a cluster's coordinators through etcd v3,
 * the counterpart of the shared-directory election of ha.h for clusters
 * whose coordinators share no file system.
 *
 * A leader is the process whose key exists: each candidate holds a lease
 * (granted with ttl_s seconds, kept alive by weir__etcd_keepalive) and
 * campaigns with one transaction, "create KEY with my value under my lease
 * if KEY does not exist, else read KEY". The key's create_revision is the
 * leader's epoch: etcd's revision counter only grows, so a later leader's
 * epoch is always above an earlier one's (fencing, as ha.h's epoch). The
 * key goes when its lease does: a leader that dies, or is cut off from
 * etcd for longer than its TTL, stops being the leader, and a standby
 * watching the key (weir__etcd_watch_gone) campaigns at once and takes
 * over. A leader must stop acting as
 * one as soon as its keepalive reports the lease gone (-ESTALE), and
 * should stop when it cannot reach etcd for longer than its TTL.
 *
 * etcd is reached over its JSON gateway (POST http[s]://HOST:PORT/v3/...,
 * keys and values base64, int64 fields as JSON strings) with weir's
 * HTTP/1.1 client. An endpoint list names the cluster's members: every
 * request goes to the member that answered last, and on a connection
 * error, a timeout or a 5xx answer to the next one (each member once, the
 * first tried twice), within a per-request deadline
 * (WEIR__ETCD_REQUEST_MS) and an overall one (WEIR__ETCD_TOTAL_MS). etcd
 * is a network peer: a response body over WEIR__ETCD_RESPONSE_MAX, JSON
 * nested deeper than 32 levels, and any field of the wrong type or
 * outside its bounds are refused (-EBADMSG or -EMSGSIZE, with a message
 * naming the endpoint and the field).
 *
 * https:// members are reached with weir's TLS (weir/tls.h): their
 * certificates must chain to the CA file given and name the host of the
 * endpoint (unless no_verify_hostname), and a client certificate is
 * presented when given (etcd's --client-cert-auth). With a user (etcd's
 * auth enabled) the client authenticates first (/v3/auth/authenticate)
 * and sends the token in the Authorization field of every request; a
 * token etcd no longer takes (gRPC code 16: it expired, auth was turned
 * off and on, another member answers) is replaced by authenticating again,
 * once, and the request sent again. A refused password is -EACCES with a
 * message naming the user. The password and the token are never in a
 * message or a log line, and are wiped when freed.
 *
 * Keys and values are text (no NUL byte). Errors are negative errnos with
 * a message in msg[cap] (msg may be NULL). Every function that talks to
 * etcd must run in a fiber; a handle is used by one task at a time.
 */
#ifndef WEIR_CLUSTER_ETCD_H
#define WEIR_CLUSTER_ETCD_H

#include <stddef.h>
#include <stdint.h>

#define WEIR__ETCD_ENDPOINTS_MAX 16          /* members in an endpoint list */
#define WEIR__ETCD_ENDPOINT_MAX  255         /* bytes of one endpoint */
#define WEIR__ETCD_KEY_MAX       1024        /* bytes of a key */
#define WEIR__ETCD_VALUE_MAX     (64u << 10) /* bytes of a value, sent or read */
#define WEIR__ETCD_RESPONSE_MAX  (1u << 20)  /* bytes of a response body */
#define WEIR__ETCD_REQUEST_MS    2000        /* one request to one member */
#define WEIR__ETCD_TOTAL_MS      5000        /* one request, every member tried */
#define WEIR__ETCD_TTL_MAX       3600        /* seconds */

typedef struct weir__etcd weir__etcd;

/* How etcd is reached beyond its endpoints; every field may be 0. */
typedef struct weir__etcd_opts {
    /* https:// endpoints: the CA file their certificates chain to
     * (required), a client certificate and key (both or neither), and
     * whether a certificate that does not name the endpoint's host is
     * taken. Refused with http:// endpoints. */
    const char *ca_file, *cert_file, *key_file;
    int no_verify_hostname;
    /* etcd auth: the user and its password (the secret itself; copied). */
    const char *user, *password;
} weir__etcd_opts;

/* A client of the members in endpoints ("http://host:port" or
 * "https://host:port", several separated by commas, all of one scheme;
 * the port defaults to 2379, a trailing '/' is allowed, nothing else after
 * the port) whose lease, when it campaigns, lives ttl_s seconds
 * (1..WEIR__ETCD_TTL_MAX) without a keepalive. 0 with *out, or -EINVAL
 * with msg naming the malformed entry, http:// and https:// mixed,
 * https:// without a CA file, a certificate file that does not load (its
 * name and what is wrong), or -ENOMEM. Nothing is sent yet. o may be
 * NULL (weir__etcd_open: plain http://, no auth). */
int weir__etcd_open_opts(const char *endpoints, int ttl_s, const weir__etcd_opts *o,
                         weir__etcd **out, char *msg, size_t cap);
int weir__etcd_open(const char *endpoints, int ttl_s, weir__etcd **out, char *msg, size_t cap);

/* Free e without telling etcd anything (weir__etcd_resign first to step
 * down at once: otherwise the key stays until its lease expires). From a
 * fiber where possible. NULL: nothing. */
void weir__etcd_close(weir__etcd *e);

/* Per-request and overall deadlines in milliseconds (0: keep the current
 * one), for callers (and tests) that need them shorter. */
void weir__etcd_set_timeouts(weir__etcd *e, int request_ms, int total_ms);

/* Try to lead, once, without waiting: renew e's lease, or grant one if e
 * holds none (or the one it held has expired), then create key with value
 * unless it exists: a lease won with has its whole TTL. 1: e leads (*epoch: the key's
 * create_revision; campaigning again while leading returns 1 and the same epoch). 0: another lease
 * holds the key: its value is copied to holder[holder_cap] (NULL: not copied; -ENOSPC when it does
 * not fit) and *epoch is the holder's. Negative errno with msg: etcd unreachable (the last member's
 * error), a malformed answer
 * (-EBADMSG), a refusal (-EINVAL, -EPERM, -EPROTO...). */
int weir__etcd_campaign(weir__etcd *e, const char *key, const char *value, uint64_t *epoch,
                        char *holder, size_t holder_cap, char *msg, size_t cap);

/* One keepalive round trip for e's lease: 0 renewed (*ttl_s, may be NULL:
 * the seconds it now has), -ESTALE the lease is gone (expired or revoked,
 * or e holds none): if e was leading it no longer is and must stop at
 * once. Another negative errno: etcd could not say (unreachable,
 * malformed answer); the lease may still be alive. Call every ttl/3. */
int weir__etcd_keepalive(weir__etcd *e, int *ttl_s, char *msg, size_t cap);

/* Who leads key now: 1 a leader (its value in value[vcap], -ENOSPC when
 * it does not fit; *epoch its create_revision; either may be NULL), 0
 * none, or a negative errno with msg. */
int weir__etcd_leader(weir__etcd *e, const char *key, char *value, size_t vcap, uint64_t *epoch,
                      char *msg, size_t cap);

/* Wait, through an etcd watch, for key to go after the revision at which
 * e's last campaign found another leading (0 from that campaign): 1 it
 * was deleted (its lease expired or was revoked, the leader resigned); 2
 * etcd ended the watch (the member stopping, the revision compacted):
 * campaign again; 0 nothing until deadline (absolute); a negative errno
 * with msg: etcd could not be watched (-EINVAL: no campaign has seen
 * another lead; -ETIMEDOUT: no member set the watch up within
 * WEIR__ETCD_REQUEST_MS; -EPROTO: the answer ended before the watch was
 * set up, as through a proxy that does not stream). Only the member that
 * answered last is asked, each request for at most WEIR__ETCD_REQUEST_MS
 * (then again from the same revision), and only while it has a leader;
 * one message of the stream over 64 KiB is refused (-EBADMSG). */
int weir__etcd_watch_gone(weir__etcd *e, const char *key, int64_t deadline, char *msg, size_t cap);

/* Step down: the key is deleted if it is still this leadership's (its
 * create_revision is e's epoch) and e's lease revoked (a lease already
 * gone is fine). 0 or a negative errno with msg; either way e no longer
 * leads nor holds a lease, and may campaign again. */
int weir__etcd_resign(weir__etcd *e, char *msg, size_t cap);

/* The epoch e leads with, 0 while it does not. */
uint64_t weir__etcd_epoch(const weir__etcd *e);
/* The lease e holds, 0 for none. */
int64_t weir__etcd_lease(const weir__etcd *e);
/* The member that answered last ("http[s]://host:port"); the first one
 * before any answer. Valid until weir__etcd_close. */
const char *weir__etcd_endpoint(const weir__etcd *e);

#endif
