/* SPDX-License-Identifier: Apache-2.0 */
/*
 * deploy.c - the subtasks of a plan, built in this process (deploy.h).
 *
 * Operators' run counters (records, watermarks) are reset here for every
 * operator of the plan, deployed here or not: weir_job_op_stats reads the
 * job graph, whose operators one process's run owns.
 */
#include "stream/deploy.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "stream/controller.h"

/* ---- metrics ------------------------------------------------------------------------------- */
static weir_metric_family *family(run *r, const char *name, const char *help, int type)
{
    weir_metric_def d = {.name = name,
                         .help = help,
                         .type = type,
                         .labels = WEIR_LABELS("operator", "subtask"),
                         .nlabels = 2};
    weir_metric_family *f = NULL;
    const char *why;
    if (weir_metrics_register(r->o.metrics, &d, &f, &why) < 0)
        return NULL;
    return f;
}

static int metrics_child(run *r, weir_ctx *c, int subtask)
{
    char sub[16];
    snprintf(sub, sizeof(sub), "%d", subtask);
    const char *const lv[] = {c->op->name, sub};
    weir_metric_family *fi = family(r, "weir_stream_records_in_total",
                                    "Records an operator's subtask processed", WEIR_METRIC_COUNTER);
    weir_metric_family *fo = family(r, "weir_stream_records_out_total",
                                    "Records an operator's subtask emitted", WEIR_METRIC_COUNTER);
    weir_metric_family *fb =
        family(r, "weir_stream_backpressure_seconds_total",
               "Time a subtask waited for credits to send downstream", WEIR_METRIC_COUNTER);
    weir_metric_family *fw =
        family(r, "weir_stream_watermark", "The subtask's watermark (event-time units)",
               WEIR_METRIC_GAUGE);
    weir_metric_family *fl =
        family(r, "weir_stream_watermark_lag",
               "Largest timestamp seen minus the watermark (event-time units)", WEIR_METRIC_GAUGE);
    if (!fi || !fo || !fb || !fw || !fl)
        return -ENOMEM;
    c->m_in = weir_metric_counter(fi, lv);
    c->m_out = weir_metric_counter(fo, lv);
    c->m_bp = weir_metric_counter(fb, lv);
    c->m_wm = weir_metric_gauge(fw, lv);
    c->m_lag = weir_metric_gauge(fl, lv);
    return c->m_in && c->m_out && c->m_bp && c->m_wm && c->m_lag ? 0 : -ENOMEM;
}

/* ---- channels ----------------------------------------------------------------------------- */
static weir__channel *local_factory(void *arg, run *r, const weir__plan_channel *c, subtask *prod,
                                    subtask *cons, int *err)
{
    (void)arg;
    if (!prod || !cons) {
        *err = -EINVAL; /* a local channel needs both ends here */
        return NULL;
    }
    weir__channel *ch = weir__channel_local_new(cons, (int)r->plan->credits);
    if (!ch)
        *err = -ENOMEM;
    (void)c;
    return ch;
}

static int add_channel(run *r, weir__channel *ch)
{
    if (r->nchannels == r->chcap) {
        int cap = r->chcap ? r->chcap * 2 : 64;
        channel **c = weir__realloc(r->channels, (size_t)cap * sizeof(*c));
        if (!c)
            return -ENOMEM;
        r->channels = c;
        r->chcap = cap;
    }
    r->channels[r->nchannels++] = ch;
    return 0;
}

/* ---- subtasks ----------------------------------------------------------------------------- */
static int reset_ops(run *r)
{
    weir_job *j = r->j;
    for (int i = 0; i < j->nops; i++) {
        sop *o = j->ops[i];
        o->records_in = o->records_out = o->backpressure_ns = 0;
        o->watermark = INT64_MAX;
        weir__sub_figures *sub = weir__calloc((size_t)o->par, sizeof(*sub));
        if (!sub)
            return -ENOMEM;
        for (int k = 0; k < o->par; k++)
            sub[k].wm = WEIR_WATERMARK_MIN;
        /* Under the job's lock: a reader of the figures (another thread's
         * weir_job_op_subtask_stats) holds it. */
        pthread_mutex_lock(&j->lock);
        weir__sub_figures *old = o->sub;
        o->sub = sub;
        o->sub_n = o->par;
        pthread_mutex_unlock(&j->lock);
        weir__free(old);
    }
    return 0;
}

static int build_subtask(run *r, const weir__plan_chain *pc, chain *c, int s)
{
    subtask *st = &c->subs[s];
    st->r = r;
    st->index = s;
    st->par = c->par;
    st->here = 1;
    st->ops = c->ops;
    st->nops = c->nops;
    st->wm = WEIR_WATERMARK_MIN;
    st->wm_given = WEIR_WATERMARK_MIN;
    st->max_ts = INT64_MIN;
    st->max_seen = INT64_MIN;
    st->source = c->ops[0]->kind == OP_SOURCE;
    if (!(st->ctx = weir__calloc((size_t)c->nops, sizeof(weir_ctx))))
        return -ENOMEM;
    for (int k = 0; k < c->nops; k++) {
        st->ctx[k].st = st;
        st->ctx[k].op = c->ops[k];
        st->ctx[k].next = k + 1 < c->nops ? &st->ctx[k + 1] : NULL;
        if (r->o.metrics && metrics_child(r, &st->ctx[k], s) < 0)
            return -ENOMEM;
    }
    if (!(st->inq = weir_chan_new(sizeof(item), WEIR_CHAN_UNBOUNDED)))
        return -ENOMEM;
    if (!st->source && c->ops[0]->ctl)
        st->ctl = c->ops[0]->ctl;
    else if (!st->source && (c->ops[0]->def.admit || c->ops[0]->def.drain))
        st->ctl = &weir__controller_hooks;
    if (c->ops[0]->keyed) {
        int e = weir_state_backend_open(r->o.state_backend, (int)r->plan->ngroups,
                                        (int)pc->kg_first[s], (int)pc->kg_end[s], &st->backend);
        if (e) {
            weir__stream_fail(r->j, e, "state backend \"%s\" for \"%s\" subtask %d: %s",
                              r->o.state_backend ? r->o.state_backend : "memory:", c->ops[0]->name,
                              s,
                              e == -ENOENT   ? "no backend has that scheme"
                              : e == -EINVAL ? "a malformed URI, or one its backend refused"
                                             : weir_strerror(e));
            return e;
        }
        st->ctx[0].backend = st->backend;
        /* A backend whose reads may answer later: records wait for them
         * in the async execution controller, not in the subtask. */
        if (!st->ctl && st->backend->ops->get_async &&
            !(st->ctl = weir__controller_async_new(st, 0)))
            return -ENOMEM;
    }
    return 0;
}

static output *add_output(subtask *prod, const sinput *in, int par, uint32_t rr)
{
    output *outs = weir__realloc(prod->outs, (size_t)(prod->nouts + 1) * sizeof(*outs));
    if (!outs)
        return NULL;
    prod->outs = outs;
    output *o = &prod->outs[prod->nouts];
    *o = (output){in->from, in->tag, in->edge, in->key, in->key_arg, par, NULL, rr};
    if (!(o->targets = weir__calloc((size_t)par, sizeof(channel *))))
        return NULL;
    prod->nouts++;
    return o;
}

static int add_input(subtask *cons, channel *ch, const sinput *in, int k)
{
    in_state *ins = weir__realloc(cons->ins, (size_t)(cons->nins + 1) * sizeof(*ins));
    if (!ins)
        return -ENOMEM;
    cons->ins = ins;
    ins[cons->nins++] = (in_state){
        .ch = ch, .wm = WEIR_WATERMARK_MIN, .key = in->key, .key_arg = in->key_arg, .side = k};
    return 0;
}

int weir__deploy_build(run *r, const weir__plan *p, const weir__deploy *d)
{
    weir_job *j = r->j;
    r->plan = p;
    int e = reset_ops(r);
    if (e)
        return e;
    if (!(r->chains = weir__calloc(p->nchains, sizeof(chain))))
        return -ENOMEM;
    r->nchains = (int)p->nchains;
    for (uint32_t ci = 0; ci < p->nchains; ci++) {
        const weir__plan_chain *pc = &p->chains[ci];
        chain *c = &r->chains[ci];
        c->par = (int)pc->par;
        c->nops = (int)pc->nops;
        if (!(c->ops = weir__calloc(pc->nops, sizeof(*c->ops))) ||
            !(c->subs = weir__calloc(pc->par, sizeof(subtask))))
            return -ENOMEM;
        for (uint32_t k = 0; k < pc->nops; k++)
            c->ops[k] = j->ops[pc->ops[k]];
        for (uint32_t s = 0; s < pc->par; s++) {
            c->subs[s].index = (int)s;
            if (d && d->here && !d->here(d->arg, ci, s))
                continue;
            if ((e = build_subtask(r, pc, c, (int)s)) < 0)
                return e;
        }
    }
    /* Channels, in the plan's order: for each chain head's input, each
     * producer subtask gets one output, holding a channel per consumer. */
    weir__channel *(*make)(void *, run *, const weir__plan_channel *, subtask *, subtask *, int *) =
        d && d->channel ? d->channel : local_factory;
    void *arg = d ? d->arg : NULL;
    uint32_t id = 0;
    for (uint32_t ci = 0; ci < p->nchains; ci++) {
        chain *c = &r->chains[ci];
        sop *head = c->ops[0];
        for (int k = 0; k < head->ninputs; k++) {
            const sinput *in = &head->inputs[k];
            chain *pc = &r->chains[in->from->chain];
            for (int ps = 0; ps < pc->par; ps++) {
                subtask *prod = pc->subs[ps].here ? &pc->subs[ps] : NULL;
                output *o = prod ? add_output(prod, in, c->par, (uint32_t)ps) : NULL;
                if (prod && !o)
                    return -ENOMEM;
                for (int s = 0; s < c->par; s++) {
                    if (in->edge == EDGE_FORWARD && s != ps)
                        continue;
                    const weir__plan_channel *pch = &p->channels[id++];
                    subtask *cons = c->subs[s].here ? &c->subs[s] : NULL;
                    if (!prod && !cons)
                        continue;
                    int err = -ENOMEM;
                    channel *ch = make(arg, r, pch, prod, cons, &err);
                    if (!ch || (e = add_channel(r, ch)) < 0) {
                        if (ch)
                            ch->ops->free(ch);
                        else
                            e = err;
                        weir__stream_fail(j, e, "channel %u (\"%s\" %d -> \"%s\" %d): %s", pch->id,
                                          in->from->name, ps, head->name, s, weir_strerror(e));
                        return e;
                    }
                    ch->id = pch->id;
                    ch->input = (int)pch->to_input;
                    ch->prod = prod;
                    if (cons && (e = add_input(cons, ch, in, k)) < 0)
                        return e;
                    assert(!cons || cons->nins == ch->input + 1);
                    if (o)
                        o->targets[s] = ch;
                }
            }
        }
    }
    return 0;
}

void weir__deploy_teardown(run *r)
{
    for (int ci = 0; ci < r->nchains; ci++) {
        chain *c = &r->chains[ci];
        for (int s = 0; c->subs && s < c->par; s++) {
            subtask *st = &c->subs[s];
            /* First: a controller's late completions must not post to the
             * mailbox once it goes. */
            if (st->ctl && st->ctl->ops->free)
                st->ctl->ops->free(st->ctl);
            st->ctl = NULL;
            if (st->inq) {
                item it;
                while (weir_chan_try_recv(st->inq, &it) == 0)
                    if (it.kind == IT_BATCH)
                        weir__batch_free(it.b);
                    else if (it.kind == IT_CALL && it.mail->drop)
                        it.mail->drop(it.mail);
                weir_chan_unref(st->inq);
            }
            for (int k = 0; k <= st->nins; k++) {
                itemq *q = k < st->nins ? &st->ins[k].stash : &st->replay;
                item it;
                while (weir__itemq_pop(q, &it) == 0)
                    if (it.kind == IT_BATCH)
                        weir__batch_free(it.b);
                weir__free(q->v);
            }
            for (int k = 0; st->ctx && k < st->nops; k++) {
                weir_ctx *x = &st->ctx[k];
                x->op->records_in += x->in - x->in_pushed;
                x->op->records_out += x->out - x->out_pushed;
                if (x->op->sub && st->index < x->op->sub_n) {
                    x->op->sub[st->index].in += x->in - x->in_pushed;
                    x->op->sub[st->index].out += x->out - x->out_pushed;
                }
                if (st->wm < x->op->watermark)
                    x->op->watermark = st->wm;
                weir__free(x->keybuf);
            }
            if (st->nops)
                st->ops[st->nops - 1]->backpressure_ns += st->bp_ns - st->bp_pushed;
            for (int k = 0; k < st->nouts; k++)
                weir__free(st->outs[k].targets);
            weir_state_backend_free(st->backend);
            weir__timers_free(&st->timers[0]);
            weir__timers_free(&st->timers[1]);
            weir__free(st->outs);
            weir__free(st->ins);
            weir__free(st->ctx);
        }
        weir__free(c->subs);
        weir__free(c->ops);
    }
    for (int i = 0; i < r->nchannels; i++)
        r->channels[i]->ops->free(r->channels[i]);
    weir__free(r->channels);
    weir__free(r->chains);
}
