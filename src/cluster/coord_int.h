/* SPDX-License-Identifier: Apache-2.0 */
/*
 * coord_int.h - the coordinator's shared state, between coordinator.c
 * (sessions, admission, the watchdog, clients, the node) and coord_job.c
 * (a job's attempts and its checkpoint link). Fields marked "mu" are under
 * coord.mu; see coordinator.c's top comment for who touches what.
 */
#ifndef WEIR_CLUSTER_COORD_INT_H
#define WEIR_CLUSTER_COORD_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "base/alloc.h"
#include "base/wall.h"
#include "cluster/admission.h"
#include "cluster/job_view.h"
#include "cluster/node.h"
#include "cluster/plugins.h"
#include "weir/cluster.h"
#include "weir/http.h"
#include "weir/job.h"
#include "weir/metrics.h"
#include "weir/sync.h"

#define LOG           "coordinator"
#define FIBER         (128u << 10)
#define EV_BACKLOG    WEIR_CLUSTER_BACKLOG_FRAMES
#define MAX_JOBS_KEPT 256 /* ended jobs remembered for ListJobs */

typedef struct coord coord;
typedef struct cjob cjob;
typedef struct wsess wsess;
typedef struct client client;

/* ---- a worker's session ------------------------------------------------------------------ */
struct wsess {
    coord *c;
    char id[WEIR_CLUSTER_REGISTER_STR_MAX + 1];
    char host[WEIR_CLUSTER_HOST_MAX + 1]; /* where its subtasks listen */
    uint32_t slots, used;                 /* used: reserved by attempts (mu) */
    weir__cl_link link;                   /* its socket (and TLS session) */
    weir__outbox *ob;
    _Atomic int64_t last_seen;
    int lost;        /* mu */
    uint64_t serial; /* unique in the node: what events name it by */
    int64_t lost_at; /* mu: when it was declared lost */
    int silent;      /* mu: lost for silence (heartbeat, stall): it may still run */
    int leaving;     /* mu: it cancelled subtasks on its own (it is stopping): place nothing */
    int refs;        /* mu: its reader's, and one per attempt placing on it */
    char cause[WEIR__OUTBOX_VERDICT_MAX + 64];
    weir__plugin_shipped shipped; /* mu */
};

/* ---- a client's connection ----------------------------------------------------------------- */
struct client {
    coord *c;
    weir__cl_link link; /* its socket (and TLS session) */
    weir_mutex *wl;     /* one writer at a time: the client fiber, a job's JobCompleted */
    _Atomic int refs;
    _Atomic int closed;
};

/* ---- what readers tell a job ------------------------------------------------------------- */
enum { EV_LISTENING = 1, EV_FINISHED, EV_LOST, EV_CANCEL, EV_REGISTERED };

typedef struct ev {
    int kind;
    uint64_t ws; /* the session's serial: it may be gone when the event is read */
    uint32_t attempt, chain, sub;
    int32_t err;
    uint8_t fatal;
    char *message; /* EV_FINISHED, EV_CANCEL: an allocation, the job's to free */
    uint64_t rin, rout;
    uint32_t ninputs;
    weir__cl_listen *inputs; /* EV_LISTENING: an allocation */
} ev;

struct cjob {
    coord *c;
    uint64_t id;
    char name[WEIR_CLUSTER_NAME_MAX + 1];
    /* mu: what ListJobs shows */
    uint8_t state;
    uint64_t submitted_ms, ended_ms;
    char message[WEIR_CLUSTER_MESSAGE_MAX];
    int ended;       /* its end is decided: nothing more is routed to it */
    int user_cancel; /* a client (or the HTTP API) cancelled it */
    int gone;        /* its fiber is done with it: ListJobs may forget it */
    /* the submission (immutable once published) */
    uint32_t par;
    weir_plugin *plugin;
    int argc;
    char **argv; /* argv[0]: the plugin's cached path */
    char *checkpoint_dir;
    uint64_t interval_ms;
    int max_restarts;
    int restore;         /* the first attempt restores the latest completed checkpoint */
    uint64_t idle_ms;    /* the run's idle timeout (0: never) */
    char *state_backend; /* NULL: memory */
    uint32_t nplugins;
    weir__cl_deploy_plugin *plugins; /* bytes: the job's own copies */
    client *submitter;
    weir_chan *events; /* ev */
    weir_chan *acks;   /* weir__ckpt_msg */
    /* the attempt (its fiber's; aw and naw read under mu by routing) */
    uint32_t attempt;
    wsess **aw;
    uint32_t naw;
    /* what the HTTP API shows of the running attempt (mu; NULL between) */
    const struct weir__plan *plan;
    const uint32_t *place, *base;
    weir_job *cur; /* the attempt's job: its checkpoint counters */
    uint32_t restarts;
    uint64_t ckpt_done_before; /* checkpoints completed by earlier attempts */
    weir__job_view view;       /* mu: its figures and histories (GET /api/v1/jobs/ID) */
    /* A job a new leader took over (recover_one): its first attempt here
     * restores restore_id and numbers checkpoints above id_floor, as its
     * HA record says; until it has room it is parked, not failed. */
    uint64_t restore_id, id_floor;
    int recovered;
    int64_t t0;
};

struct coord {
    weir__coord_opts o;
    pthread_mutex_t mu;
    wsess **ws;
    size_t nws, wscap;
    cjob **jobs;
    size_t njobs, jobcap;
    uint64_t next_job, next_serial;
    weir_scope *scope;
    int lfd;
    int stopping;   /* mu */
    int superseded; /* mu: it stopped because another leads now */
    weir__plugin_cache *cache;
    char host[WEIR_CLUSTER_HOST_MAX + 1];
    char tmpdir[64]; /* the private cache directory, removed at the end */
    int tmplock;     /* its lock (-1: none) */
    int64_t hb_ms, wd_ms, stall_ms, drain_ms, window_ms;
    /* The leader's epoch (HA: set before the port opens, then fixed), 0
     * without HA: stamped on every frame to a worker (weir__coord_post). */
    uint64_t epoch;
    struct weir__ha *ha;     /* the election (--ha-dir), NULL without */
    struct weir__etcd *etcd; /* etcd decides who leads (--etcd-endpoints), NULL without */
    char etcd_key[300];
    uint64_t etcd_holder;    /* standing by: the epoch of the leader the last campaign saw */
    int step_down[2];        /* a byte: the leadership is lost (pipe; -1: none) */
    char step_down_why[512]; /* written before the byte */
    uint64_t *recover_ids;   /* the job records a new leader found: it recovers these */
    size_t nrecover;
    uint64_t *history_ids; /* and the history it found: it lists these */
    size_t nhistory;
    /* Admissions (admission.h), under mu: the connections accepted whose
     * first frame has not arrived, each with its socket (shut down to
     * interrupt it); at most 3 * adm_cap. */
    weir__adm_entry *adm;
    int *adm_fd;
    size_t nadm, adm_cap;
    uint64_t adm_seq;
    /* the rate limit of admission log lines (mu) */
    int64_t adm_log_window;
    int adm_logged, adm_quiet;
    char adm_quiet_addr[64];
    /* counters */
    weir_http_server *http; /* NULL: none */
    /* the node's metrics (GET /metrics) */
    weir_metrics *metrics;
    struct {
        weir_metric_family *lost;  /* workers lost {cause} */
        weir_metric_family *ended; /* jobs ended {state} */
        weir_counter *malformed, *refused_version, *restarts, *submitted;
        weir_counter *recovered, *recovery_failed; /* HA takeovers */
        weir_counter *adm_refused, *adm_evicted, *accept_failures, *tls_failures;
        weir_counter *bytes_shipped, *ships_deduped, *cache_hits;
        weir_histogram *ckpt_seconds;
        weir__plugin_stats seen; /* the process's plugin counters as last published */
    } m;
};

/* m posted to w's outbox, stamped with the coordinator's epoch: every
 * coordinator-to-worker frame goes out through here (fencing). */
static inline int weir__coord_post(wsess *w, weir__cl_msg *m, int cls)
{
    m->epoch = w->c->epoch;
    return weir__cl_post(w->ob, m, cls);
}

/* Whether the current attempt of J places subtasks on w (mu held). */
static inline int weir__coord_job_uses(const cjob *J, const wsess *w)
{
    for (uint32_t i = 0; i < J->naw; i++)
        if (J->aw[i] == w)
            return 1;
    return 0;
}

/* The session of J's current attempt with that serial, or NULL (the
 * attempt's sessions are referenced: the pointer is valid). */
static inline wsess *weir__coord_aw_find(const cjob *J, uint64_t serial)
{
    for (uint32_t i = 0; i < J->naw; i++)
        if (J->aw[i]->serial == serial)
            return J->aw[i];
    return NULL;
}

/* J's attempt now places on v[0..n) (mu held): the sessions it held are
 * released, these referenced; v is J's (NULL, 0: none). */
static inline void weir__coord_aw_set_locked(cjob *J, wsess **v, uint32_t n)
{
    for (uint32_t i = 0; i < J->naw; i++)
        J->aw[i]->refs--;
    for (uint32_t i = 0; i < n; i++)
        v[i]->refs++;
    weir__free(J->aw);
    J->aw = v;
    J->naw = n;
}

/* coordinator.c: how many worker sessions are alive and how many jobs
 * have not ended (mu held). */
void weir__coord_count_locked(const coord *c, int *workers, int *jobs);

/* Whether J, cancelled, is the next leader's to run on (mu held): it was
 * cancelled because this coordinator stops under HA, and no client asked
 * for it - a user's cancel that races the stop stays a cancel. */
static inline int weir__coord_handed_on_locked(const cjob *J)
{
    return J->c->ha && J->c->stopping && J->state == WEIR__CL_JOB_CANCELLED && !J->user_cancel;
}

/* Why a job of a stopping coordinator ends (mu held): it lost the
 * leadership, or it is shutting down. */
static inline const char *weir__coord_stop_why_locked(const coord *c)
{
    return c->superseded ? "this coordinator lost the leadership"
                         : "the coordinator is shutting down";
}

/* coordinator.c: a worker lost for a cause of the metrics' label
 * (heartbeat, stall, overflow, closed, malformed, replaced) with the
 * cause's text (mu held). */
void weir__coord_lose_locked(coord *c, wsess *w, const char *kind, const char *cause);

/* coord_http.c: the HTTP API and /metrics on o.http_port (0: a free one);
 * 0 or a negative errno with msg. Stopped and freed by
 * weir__coord_http_stop. */
int weir__coord_http_start(coord *c, char *msg, size_t cap);
/* coord_http.c: J as GET /api/v1/jobs/ID shows it (mu held); NULL: no
 * memory. */
struct json_t *weir__coord_job_json_locked(const cjob *J);
/* coordinator.c: submit a job whose plugin's n bytes came with the
 * request (POST /api/v1/jobs): s holds the rest of a SubmitJob (its
 * plugins are this one). 0 with *id, or a negative errno with why:
 * -ENOEXEC / -EFBIG (not a weir plugin for this weir), -EINVAL and the
 * like (the job is refused: it does not define, plan or place), -EAGAIN
 * (the coordinator cannot take it now: it stops), -ENOMEM / -EIO. No one
 * is told of its end but the HTTP API. */
int weir__coord_submit_upload(coord *c, const uint8_t *bytes, size_t n,
                              struct weir__cl_submit_job *s, uint64_t *id, char *why, size_t cap);
/* coordinator.c: the job of that id, or NULL (mu held). */
cjob *weir__coord_job_find_locked(coord *c, uint64_t id);
/* coordinator.c: cancel job id for reason (a CancelJob, DELETE
 * /api/v1/jobs/ID): WEIR__CL_CANCEL_OK (its cancel is under way),
 * _UNKNOWN or _ENDED. */
int weir__coord_cancel(coord *c, uint64_t id, const char *reason);
void weir__coord_http_stop(coord *c);

/* coordinator.c: a client's reference dropped (the last closes it); m
 * written to a client under its write lock, waited for without a limit
 * (0, or the error, after which the connection is shut down: the client
 * sees it end instead of waiting for a frame that never comes); a job
 * record freed. */
void weir__coord_client_unref(client *cl);
int weir__coord_client_send(client *cl, const weir__cl_msg *m);
void weir__coord_job_free(cjob *J);

/* coord_job.c: the job's fiber (its attempts, then its end reported to
 * the submitter); a dry run of an attempt's define, plan and placement
 * (0, or the error with why: what a submit is refused with); an event's
 * allocations freed. */
intptr_t weir__coord_job_main(void *arg);
/* coordinator.c: J's end is final (state, message): with HA its record
 * moves to the history, unless it was cancelled by this coordinator's own
 * stop (the next leader runs it on). Called by its fiber, off mu. */
void weir__coord_job_ended(cjob *J);
int weir__coord_job_check(cjob *J, char *why, size_t cap);
void weir__coord_ev_free(ev *x);

#endif
