/* SPDX-License-Identifier: Apache-2.0 */
/*
 * runner.c - running a job (weir/stream.h): weir_job_run plans the job and
 * deploys the whole plan in this process; weir__job_run_plan runs the
 * subtasks of a plan that a deploy put here (the rest of a two-process or
 * cluster run lives elsewhere). The subtask loop itself is task.c.
 *
 * Plan. Operators are created in topological order (an operator can only
 * read streams that exist), so one pass assigns chains (plan.c): an
 * operator joins its input's chain when that input is its only one, a
 * forward edge, from an operator with no other reader and the same
 * parallelism. Each chain runs as `parallelism` subtasks, fibers pinned
 * round robin to the runtime's threads, spawned in one scope: the first
 * failure cancels the rest, and weir_job_run() returns when every subtask
 * has ended.
 *
 * Teardown. Batches still queued when subtasks stop (after a failure or a
 * cancel) are freed once every subtask has been joined: the run owns the
 * queues and channels, not the subtasks. Nothing is freed before every
 * task of the run has ended, whatever the caller's cancellation state: the
 * subtasks are joined through their scope, and the checkpoint coordinator,
 * which must outlive them (it is cancelled once they have ended), through
 * a scope of its own. A scope's join waits for its children even when the
 * joining task is cancelled; a plain weir_task_join() would return
 * -ECANCELED at once in a cancelled caller (weir_job_run's task, when the
 * job is cancelled), leaving the coordinator running on the freed run and
 * its handle leaked.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/intern.h"
#include "stream/ckpt_link.h"
#include "stream/deploy.h"
#include "stream/stream_int.h"
#include "weir/sync.h"

#define SUBTASK_STACK (256u << 10)

/* ---- errors ------------------------------------------------------------------------------- */
void weir__stream_fail(weir_job *j, int err, const char *fmt, ...)
{
    pthread_mutex_lock(&j->lock);
    if (!j->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->error, sizeof(j->error), fmt, ap);
        va_end(ap);
        j->err = err;
    }
    pthread_mutex_unlock(&j->lock);
}

int weir_fail(weir_ctx *ctx, int err, const char *fmt, ...)
{
    if (err >= 0)
        err = -EINVAL;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    weir__stream_fail(ctx->st->r->j, err, "operator \"%s\" (subtask %d): %s", ctx->op->name,
                      ctx->st->index, msg);
    return err;
}

/* A user function's error without a weir_fail message gets one. */
int weir__op_error(weir_ctx *ctx, int e, const char *what)
{
    if (e < 0 && e != -ECANCELED)
        weir__stream_fail(ctx->st->r->j, e, "operator \"%s\" (subtask %d): %s failed: %s",
                          ctx->op->name, ctx->st->index, what, weir_strerror(e));
    return e;
}

/* Once the subtasks (and the coordinator) have ended: the tasks of the
 * channels and of the checkpoint link end too, before anything they use
 * is freed. */
static void stop_tasks(run *r, const weir__deploy *d)
{
    if (d && d->stop)
        d->stop(d->arg, r);
    if (r->link && r->link->ops->stop)
        r->link->ops->stop(r->link);
}

/* The end of a run that was deployed: the tasks of its channels and link
 * end, then everything is freed (prepared: the checkpoint side too). */
/* Whether every subtask of the run's plan has ended (weir__job_coord_finished
 * marks those of other processes). */
static int all_ended(run *r)
{
    if (!r->chains) /* the build failed early */
        return 0;
    for (int c = 0; c < r->nchains; c++)
        for (int s = 0; s < r->chains[c].par; s++)
            if (!r->chains[c].subs || !atomic_load(&r->chains[c].subs[s].finished))
                return 0;
    return 1;
}

static void end_run(run *r, const weir__deploy *d, int prepared)
{
    stop_tasks(r, d);
    r->all_ended = all_ended(r); /* before the subtasks are freed */
    pthread_mutex_lock(&r->j->lock);
    r->j->running = 0;
    pthread_mutex_unlock(&r->j->lock);
    weir__deploy_teardown(r);
    if (prepared) {
        weir__ckpt_teardown(r);
    } else if (r->link) { /* a deploy's link, made before the prepare failed */
        r->link->ops->free(r->link);
        r->link = NULL;
    }
}

/* Options with their defaults filled in, or -EINVAL with the job's error. */
static int run_opts(weir_job *j, const weir_run_opts *opts, weir_run_opts *o)
{
    *o = opts ? *opts : (weir_run_opts){0};
    if (o->parallelism == 0)
        o->parallelism = 1;
    if (o->credits == 0)
        o->credits = 4;
    if (o->parallelism < 1 || o->parallelism > WEIR_KEY_GROUPS || o->credits < 1 ||
        o->threads < 0) {
        weir__stream_fail(j, -EINVAL, "bad run options (parallelism 1..%d, credits >= 1)",
                          WEIR_KEY_GROUPS);
        return -EINVAL;
    }
    if (j->nops == 0) {
        weir__stream_fail(j, -EINVAL, "the job has no operators");
        return -EINVAL;
    }
    return 0;
}

int weir_job_run(weir_job *j, const weir_run_opts *opts)
{
    if (!j)
        return -EINVAL;
    if (j->err)
        return j->err;
    if (!weir_task_current())
        return -EINVAL;
    weir_run_opts o;
    if (run_opts(j, opts, &o) < 0)
        return j->err;
    weir__plan *p;
    char why[sizeof(j->error)];
    int e = weir__plan_make(j, o.parallelism, o.credits, &p, why, sizeof(why));
    if (e) {
        weir__stream_fail(j, e, "%s", why);
        return e;
    }
    e = weir__job_run_plan(j, p, &o, NULL);
    weir__plan_free(p);
    return e;
}

int weir__job_run_plan(weir_job *j, const weir__plan *p, const weir_run_opts *opts,
                       const weir__deploy *d)
{
    if (j->err)
        return j->err;
    run r = {.j = j};
    if (run_opts(j, opts, &r.o) < 0)
        return j->err;
    char why[sizeof(j->error)];
    int e = weir__plan_bind(p, j, why, sizeof(why));
    if (e) {
        weir__stream_fail(j, e, "%s", why);
        return e;
    }
    pthread_mutex_lock(&j->lock);
    memset(&j->ckpt, 0, sizeof(j->ckpt));
    j->nhist = 0;
    pthread_mutex_unlock(&j->lock);
    e = weir__deploy_build(&r, p, d);
    r.worker = d && d->worker;
    r.restore_id = d ? d->restore_id : 0;
    r.id_floor = d ? d->id_floor : 0;
    r.ended = d ? d->ended : NULL;
    r.ended_arg = d ? d->arg : NULL;
    r.fence = d ? d->fence : NULL;
    r.unfence = d ? d->unfence : NULL;
    r.spans = d && d->link;
    if (!e && d && d->link && !(r.link = d->link(d->arg, &r))) {
        e = errno ? -errno : -ENOMEM;
        weir__stream_fail(j, e, "the checkpoint link: %s", weir_strerror(e));
    }
    if (!e && (e = weir__ckpt_prepare(&r)) < 0 && !j->err)
        weir__stream_fail(j, e, "checkpoint directory \"%s\": %s",
                          r.o.checkpoint_dir ? r.o.checkpoint_dir : "(none)",
                          e == -EINVAL ? "checkpoints and restore need a checkpoint_dir"
                                       : weir_strerror(e));
    pthread_mutex_lock(&j->lock);
    j->ckpt.restored = r.restored;
    j->running = !e;
    pthread_mutex_unlock(&j->lock);
    if (e) {
        if (!j->err)
            weir__stream_fail(j, e, "deploying the job: %s", weir_strerror(e));
        end_run(&r, d, 0);
        return j->err;
    }
    if (d && d->start && (e = d->start(d->arg, &r)) < 0) {
        weir__stream_fail(j, e, "starting the job's channels: %s", weir_strerror(e));
        end_run(&r, d, 1);
        return j->err;
    }
    weir_rt *rt = weir_rt_current();
    int threads = rt ? weir_rt_threads(rt) : 1;
    if (r.o.threads > 0 && r.o.threads < threads)
        threads = r.o.threads;
    weir_scope *sc = weir_scope_new(WEIR_SCOPE_CANCEL_SIBLINGS, WEIR_FOREVER);
    /* The coordinator has a scope of its own (see Teardown at the top). */
    weir_scope *cs = NULL;
    if (sc && r.link && r.o.checkpoint_interval_ms > 0 && !r.worker &&
        (!(cs = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER)) ||
         !weir_scope_spawn(cs, weir__ckpt_coordinator, &r,
                           &(weir_spawn_opts){.name = "checkpoints", .stack_size = 128u << 10}))) {
        weir__stream_fail(j, -ENOMEM, "could not start the checkpoint coordinator");
        weir_scope_free(cs); /* no child: no join needed */
        weir_scope_free(sc);
        end_run(&r, d, 1);
        return j->err;
    }
    int next = 0;
    for (int ci = 0; sc && ci < r.nchains; ci++)
        for (int s = 0; s < r.chains[ci].par; s++) {
            if (!r.chains[ci].subs[s].here)
                continue;
            /* Interned: the watchdog may print it after the job is freed. */
            weir_spawn_opts so = {.name = weir__intern(r.chains[ci].ops[0]->name, "subtask"),
                                  .stack_size = SUBTASK_STACK,
                                  .pin = 1,
                                  .loop = rt ? weir_rt_loop(rt, next++ % threads) : NULL};
            if (!weir_scope_spawn(sc, weir__subtask_main, &r.chains[ci].subs[s], &so)) {
                weir__stream_fail(j, -ENOMEM, "could not start a subtask: %s", strerror(errno));
                weir_scope_cancel(sc);
                ci = r.nchains;
                break;
            }
        }
    weir_scope_result res = {0};
    e = sc ? weir_scope_join(sc, &res) : -ENOMEM;
    weir_scope_free(sc);
    if (cs) {
        weir_scope_cancel(cs);
        weir_scope_join(cs, NULL);
        weir_scope_free(cs);
    }
    end_run(&r, d, 1);
    if (j->err)
        return j->err;
    if (e && e != -ECANCELED)
        weir__stream_fail(j, e, "subtask \"%s\" failed: %s", res.first_name ? res.first_name : "?",
                          weir_strerror(e));
    return e;
}

int weir__job_error_copy(weir_job *j, char *buf, size_t cap)
{
    pthread_mutex_lock(&j->lock);
    int e = j->err;
    if (cap)
        snprintf(buf, cap, "%s", j->error);
    pthread_mutex_unlock(&j->lock);
    return e;
}

/* ---- a coordinator's share of a run (deploy.h) ------------------------------------------- */
typedef struct coord_run {
    run r; /* first: the run's address is the coord_run's */
    weir_scope *cs;
} coord_run;

static int nothing_here(void *arg, uint32_t chain, uint32_t sub)
{
    (void)arg, (void)chain, (void)sub;
    return 0;
}

int weir__job_coord_begin(weir_job *j, const weir__plan *p, const weir_run_opts *opts,
                          const weir__deploy *d, run **out)
{
    *out = NULL;
    if (!d || j->err)
        return j->err ? j->err : -EINVAL;
    coord_run *c = weir__calloc(1, sizeof(*c));
    if (!c) {
        weir__stream_fail(j, -ENOMEM, "out of memory");
        return -ENOMEM;
    }
    run *r = &c->r;
    r->j = j;
    char why[sizeof(j->error)];
    int e = run_opts(j, opts, &r->o);
    if (!e && (e = weir__plan_bind(p, j, why, sizeof(why))) < 0)
        weir__stream_fail(j, e, "%s", why);
    if (e) {
        weir__free(c);
        return j->err;
    }
    weir__deploy nd = *d;
    nd.here = nothing_here;
    pthread_mutex_lock(&j->lock);
    memset(&j->ckpt, 0, sizeof(j->ckpt));
    j->nhist = 0;
    pthread_mutex_unlock(&j->lock);
    e = weir__deploy_build(r, p, &nd);
    r->restore_id = d->restore_id;
    r->id_floor = d->id_floor;
    r->fence = d->fence;
    r->unfence = d->unfence;
    r->ended_arg = d->arg;
    r->spans = 1;
    if (!e && r->o.checkpoint_interval_ms > 0 && (!d->link || !(r->link = d->link(d->arg, r)))) {
        e = d->link && errno ? -errno : -ENOMEM;
        weir__stream_fail(j, e, "the checkpoint link: %s", weir_strerror(e));
    }
    if (!e && (e = weir__ckpt_prepare(r)) < 0 && !j->err)
        weir__stream_fail(j, e, "checkpoint directory \"%s\": %s",
                          r->o.checkpoint_dir ? r->o.checkpoint_dir : "(none)",
                          e == -EINVAL ? "checkpoints and restore need a checkpoint_dir"
                                       : weir_strerror(e));
    pthread_mutex_lock(&j->lock);
    j->ckpt.restored = r->restored;
    j->running = !e;
    pthread_mutex_unlock(&j->lock);
    if (e) {
        end_run(r, NULL, 0);
        weir__free(c);
        return j->err ? j->err : e;
    }
    *out = r;
    return 0;
}

uint64_t weir__job_coord_restored(const run *r)
{
    return r->restored;
}

uint64_t weir__job_coord_first_id(const run *r)
{
    return r->id_base + 1;
}

int weir__job_coord_start_checkpoints(run *r)
{
    coord_run *c = (coord_run *)r;
    if (c->cs || !r->link || r->o.checkpoint_interval_ms <= 0)
        return 0;
    if (!(c->cs = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER)))
        return -ENOMEM;
    if (!weir_scope_spawn(c->cs, weir__ckpt_coordinator, r,
                          &(weir_spawn_opts){.name = "checkpoints", .stack_size = 128u << 10})) {
        weir_scope_free(c->cs); /* no child: no join needed */
        c->cs = NULL;
        return -ENOMEM;
    }
    return 0;
}

void weir__job_coord_finished(run *r, uint32_t chain, uint32_t sub)
{
    if (chain < (uint32_t)r->nchains && sub < (uint32_t)r->chains[chain].par)
        atomic_store(&r->chains[chain].subs[sub].finished, 1);
}

uint64_t weir__job_coord_end(run *r)
{
    if (!r)
        return 0;
    coord_run *c = (coord_run *)r;
    if (c->cs) {
        weir_scope_cancel(c->cs);
        weir_scope_join(c->cs, NULL);
        weir_scope_free(c->cs);
    }
    /* The coordinator has stopped: no id above this one was triggered. */
    uint64_t last = atomic_load(&r->last_id);
    if (last < r->id_base)
        last = r->id_base;
    end_run(r, NULL, 1);
    weir__free(c);
    return last;
}

int weir_job_op_stats(const weir_job *j, const char *op, weir_op_stats *st)
{
    if (!j || !op || !st)
        return -EINVAL;
    for (int i = 0; i < j->nops; i++)
        if (strcmp(j->ops[i]->name, op) == 0) {
            sop *o = j->ops[i];
            st->records_in = o->records_in;
            st->records_out = o->records_out;
            st->backpressure_ns = o->backpressure_ns;
            /* During a run: the lowest of its subtasks' watermarks now;
             * after it: the lowest they ended with. */
            pthread_mutex_lock((pthread_mutex_t *)&j->lock);
            int64_t wm = INT64_MAX;
            if (j->running && o->sub) {
                for (int k = 0; k < o->sub_n; k++) {
                    int64_t w = atomic_load_explicit(&o->sub[k].wm, memory_order_relaxed);
                    if (w < wm)
                        wm = w;
                }
            } else {
                wm = o->watermark;
            }
            pthread_mutex_unlock((pthread_mutex_t *)&j->lock);
            st->watermark = wm;
            return 0;
        }
    return -ENOENT;
}

int weir_job_op_subtask_stats(const weir_job *j, int i, int subtask, weir_op_stats *st)
{
    if (!j || !st)
        return -EINVAL;
    if (i < 0 || i >= j->nops)
        return -ENOENT;
    const sop *o = j->ops[i];
    pthread_mutex_lock((pthread_mutex_t *)&j->lock); /* the array is replaced under it */
    int e = !o->sub || subtask < 0 || subtask >= o->sub_n ? -ERANGE : 0;
    if (!e) {
        const weir__sub_figures *f = &o->sub[subtask];
        *st = (weir_op_stats){
            .records_in = atomic_load_explicit(&f->in, memory_order_relaxed),
            .records_out = atomic_load_explicit(&f->out, memory_order_relaxed),
            .watermark = atomic_load_explicit(&f->wm, memory_order_relaxed),
            .backpressure_ns = atomic_load_explicit(&f->bp_ns, memory_order_relaxed),
        };
    }
    pthread_mutex_unlock((pthread_mutex_t *)&j->lock);
    return e;
}
