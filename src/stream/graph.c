/* SPDX-License-Identifier: Apache-2.0 */
/*
 * graph.c - building a job (weir/stream.h): operators, the edges between
 * them, and the built-in operators (map, flat_map, filter, reduce, the
 * collector) expressed as weir_op_def like any user operator.
 *
 * Builder errors do not make every call return one: the first is stored in
 * the job (weir_job_error) and every later call on a broken job returns
 * NULL, so a pipeline can be written as one expression and checked once;
 * weir_job_run() refuses a job with an error.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "stream/controller.h"
#include "stream/stream_int.h"

static void build_fail(weir_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void build_fail(weir_job *j, const char *fmt, ...)
{
    if (j->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->error, sizeof(j->error), fmt, ap);
    va_end(ap);
    j->err = -EINVAL;
}

weir_job *weir_job_new(const char *name)
{
    weir_job *j = weir__calloc(1, sizeof(*j));
    if (!j || !(j->name = weir__strdup(name ? name : "job"))) {
        weir__free(j);
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_init(&j->lock, NULL);
    return j;
}

void weir_job_free(weir_job *j)
{
    if (!j)
        return;
    for (int i = 0; i < j->nops; i++) {
        sop *o = j->ops[i];
        weir__free(o->sub);
        weir__free(o->name);
        weir__free(o->inputs);
        weir__free(o->outs);
        weir__free(o);
    }
    for (weir_stream *s = j->streams, *next; s; s = next) {
        next = s->next_alloc;
        weir__free(s->parts);
        weir__free(s->owned);
        weir__free(s);
    }
    pthread_mutex_destroy(&j->lock);
    weir__free(j->ops);
    weir__free(j->name);
    weir__free(j);
}

const char *weir_job_error(const weir_job *j)
{
    return j ? j->error : "no job";
}

static weir_stream *new_stream(weir_job *j, sop *from, int edge)
{
    weir_stream *s = weir__calloc(1, sizeof(*s));
    if (!s) {
        build_fail(j, "out of memory");
        return NULL;
    }
    s->j = j;
    s->from = from;
    s->edge = edge;
    s->next_alloc = j->streams;
    j->streams = s;
    return s;
}

static sop *new_op(weir_job *j, const char *name, int kind)
{
    /* Names become file names in checkpoints and labels in metrics. */
    if (strchr(name, '/') || name[0] == '.' || strlen(name) > 200) {
        build_fail(j, "operator name \"%.40s\": no '/', no leading '.', at most 200 bytes", name);
        return NULL;
    }
    for (int i = 0; i < j->nops; i++)
        if (strcmp(j->ops[i]->name, name) == 0) {
            build_fail(j, "two operators are named \"%s\": names must be unique", name);
            return NULL;
        }
    if (j->nops == j->cap) {
        int cap = j->cap ? j->cap * 2 : 8;
        sop **ops = weir__realloc(j->ops, (size_t)cap * sizeof(*ops));
        if (!ops) {
            build_fail(j, "out of memory");
            return NULL;
        }
        j->ops = ops;
        j->cap = cap;
    }
    sop *o = weir__calloc(1, sizeof(*o));
    if (!o || !(o->name = weir__strdup(name))) {
        weir__free(o);
        build_fail(j, "out of memory");
        return NULL;
    }
    o->id = j->nops;
    o->kind = kind;
    j->ops[j->nops++] = o;
    return o;
}

static int add_out(sop *from, sop *to)
{
    sop **outs = weir__realloc(from->outs, (size_t)(from->nouts + 1) * sizeof(*outs));
    if (!outs)
        return -ENOMEM;
    outs[from->nouts++] = to;
    from->outs = outs;
    return 0;
}

/* Connect stream s (a union, or one operator's output) into o's inputs. */
static int link_input(weir_stream *s, sop *o)
{
    weir_job *j = s->j;
    int n = s->parts ? s->nparts : 1;
    sinput *in = weir__realloc(o->inputs, (size_t)(o->ninputs + n) * sizeof(*in));
    if (!in) {
        build_fail(j, "out of memory");
        return -ENOMEM;
    }
    o->inputs = in;
    for (int i = 0; i < n; i++) {
        weir_stream *p = s->parts ? s->parts[i] : s;
        o->inputs[o->ninputs++] = (sinput){p->from, p->tag, p->edge, p->key, p->key_arg};
        if (add_out(p->from, o) < 0) {
            build_fail(j, "out of memory");
            return -ENOMEM;
        }
    }
    int hashed = 0;
    for (int i = 0; i < o->ninputs; i++)
        hashed += o->inputs[i].edge == EDGE_HASH;
    if (hashed && hashed != o->ninputs) {
        build_fail(j, "operator \"%s\": all of its inputs must be keyed (key_by) or none", o->name);
        return -EINVAL;
    }
    o->keyed = hashed > 0;
    return 0;
}

/* A new operator reading stream s. */
static weir_stream *add_op(weir_stream *s, const char *name, int kind, const weir_op_def *def,
                           void *arg)
{
    if (!s)
        return NULL; /* an earlier step failed: its error is in the job */
    weir_job *j = s->j;
    if (j->err)
        return NULL;
    if (!name || !*name || !def || !def->process) {
        build_fail(j, "an operator needs a name and a process function");
        return NULL;
    }
    sop *o = new_op(j, name, kind);
    if (!o)
        return NULL;
    o->def = *def;
    o->arg = arg;
    if (link_input(s, o) < 0)
        return NULL;
    return kind == OP_SINK ? s : new_stream(j, o, EDGE_FORWARD);
}

weir_stream *weir_job_source(weir_job *j, const char *name, const weir_source_def *def, void *arg)
{
    if (!j || j->err)
        return NULL;
    if (!name || !*name || !def || !def->next || def->max_out_of_orderness < -1 ||
        def->idle_timeout_ms < 0) {
        build_fail(j, "a source needs a name, a next function, max_out_of_orderness >= -1 and "
                      "idle_timeout_ms >= 0");
        return NULL;
    }
    sop *o = new_op(j, name, OP_SOURCE);
    if (!o)
        return NULL;
    o->src = *def;
    o->arg = arg;
    return new_stream(j, o, EDGE_FORWARD);
}

/* ---- edges ------------------------------------------------------------------------------ */
static weir_stream *with_edge(weir_stream *s, int edge, weir_key_fn key, void *karg)
{
    if (!s || s->j->err)
        return NULL;
    if (s->parts) {
        build_fail(s->j, "partition a stream before the union, not the union itself");
        return NULL;
    }
    weir_stream *n = new_stream(s->j, s->from, edge);
    if (n) {
        n->tag = s->tag;
        n->key = key;
        n->key_arg = karg;
    }
    return n;
}

weir_stream *weir_stream_key_by(weir_stream *s, weir_key_fn fn, void *arg)
{
    if (s && !fn) {
        build_fail(s->j, "key_by needs a key function");
        return NULL;
    }
    return with_edge(s, EDGE_HASH, fn, arg);
}

weir_stream *weir_stream_rebalance(weir_stream *s)
{
    return with_edge(s, EDGE_REBALANCE, NULL, NULL);
}

weir_stream *weir_stream_broadcast(weir_stream *s)
{
    return with_edge(s, EDGE_BROADCAST, NULL, NULL);
}

weir_stream *weir_stream_union(weir_stream *const *streams, int n)
{
    if (!streams || n < 1 || !streams[0])
        return NULL;
    weir_job *j = streams[0]->j;
    for (int i = 0; i < n; i++)
        if (!streams[i] || streams[i]->j != j || streams[i]->parts) {
            build_fail(j, "union: every stream must come from this job and none be a union");
            return NULL;
        }
    weir_stream *u = new_stream(j, NULL, EDGE_FORWARD);
    if (!u)
        return NULL;
    u->parts = weir__malloc((size_t)n * sizeof(*u->parts));
    if (!u->parts) {
        build_fail(j, "out of memory");
        return NULL;
    }
    memcpy(u->parts, streams, (size_t)n * sizeof(*u->parts));
    u->nparts = n;
    return u;
}

weir_stream *weir_stream_side(weir_stream *s)
{
    if (!s || s->j->err)
        return NULL;
    if (!s->from || s->parts || s->from->kind == OP_SOURCE) {
        build_fail(s->j, "a side output belongs to an operator's own stream");
        return NULL;
    }
    weir_stream *n = new_stream(s->j, s->from, EDGE_FORWARD);
    if (n)
        n->tag = 1;
    return n;
}

weir_stream *weir_stream_parallelism(weir_stream *s, int parallelism)
{
    if (!s || s->j->err)
        return NULL;
    if (!s->from || parallelism < 1 || parallelism > WEIR_KEY_GROUPS) {
        build_fail(s->j, "parallelism must be 1..%d, set on an operator's own stream",
                   WEIR_KEY_GROUPS);
        return NULL;
    }
    s->from->parallelism = parallelism;
    return s;
}

weir_stream *weir_stream_reads(weir_stream *s, int flags)
{
    if (!s || s->j->err)
        return NULL;
    if (!s->from || (flags & ~(WEIR_READS_NO_COALESCE | WEIR_READS_DEADLINE_ORDER))) {
        build_fail(s->j, "weir_stream_reads: %s",
                   s->from ? "unknown flags" : "set on an operator's own stream");
        return NULL;
    }
    s->from->reads = flags;
    return s;
}

void weir_ctx_read_order(weir_ctx *ctx, int64_t order)
{
    if (ctx)
        ctx->read_order = order;
}

/* ---- built-in operators ------------------------------------------------------------------- */
typedef struct fn_arg {
    weir_rec_fn rec;
    weir_filter_fn filter;
    weir_reduce_fn reduce;
    void *arg;
} fn_arg;

/* The state of map / flat_map / filter / reduce: the user's function and
 * arg, allocated by open() from the operator's arg (a fn_arg in the job). */
static int fn_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    *state = arg;
    return 0;
}

static int map_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    fn_arg *f = state;
    return f->rec(ctx, in, f->arg);
}

static int filter_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    fn_arg *f = state;
    int keep = f->filter(in, f->arg);
    if (keep < 0)
        return keep;
    return keep ? weir_emit(ctx, in->data, in->len, in->ts) : 0;
}

/* Reduce: the key's value is [i64 ts][bytes]. The read may answer later
 * (controller.h): the rest runs when it does. */
static int reduce_read(weir_ctx *ctx, void *state, const weir_rec *in, int e, const void *v,
                       size_t vlen, void *arg)
{
    (void)arg;
    fn_arg *f = state;
    weir_rec out = *in;
    if (e == 0) {
        if (vlen < 8)
            return weir_fail(ctx, -EBADMSG, "reduce state of %zu bytes is damaged", vlen);
        weir_rec acc = {(const uint8_t *)v + 8, vlen - 8, 0};
        memcpy(&acc.ts, v, 8);
        if ((e = f->reduce(&acc, in, &out, f->arg)) < 0)
            return e;
    } else if (e != -ENOENT) {
        return e;
    }
    /* Compose [ts][bytes] (out may point into the state: copy first). */
    uint8_t small[256];
    uint8_t *buf = out.len + 8 <= sizeof(small) ? small : weir__malloc(out.len + 8);
    if (!buf)
        return -ENOMEM;
    memcpy(buf, &in->ts, 8);
    if (out.len)
        memcpy(buf + 8, out.data, out.len);
    e = weir__ns_put(ctx, WEIR__STATE_REDUCE, NULL, 0, buf, out.len + 8);
    if (!e)
        e = weir_emit(ctx, buf + 8, out.len, in->ts);
    if (buf != small)
        weir__free(buf);
    return e;
}

static int reduce_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    return weir__ns_get_async(ctx, in, WEIR__STATE_REDUCE, NULL, 0, reduce_read, NULL);
}

static weir_stream *fn_op(weir_stream *s, const char *name, fn_arg f,
                          int (*process)(weir_ctx *, void *, const weir_rec *))
{
    if (!s || s->j->err)
        return NULL;
    if (!f.rec && !f.filter && !f.reduce) {
        build_fail(s->j, "operator \"%s\" needs a function", name ? name : "?");
        return NULL;
    }
    fn_arg *fa = weir__malloc(sizeof(*fa));
    if (!fa) {
        build_fail(s->j, "out of memory");
        return NULL;
    }
    *fa = f;
    weir_op_def def = {.open = fn_open, .process = process};
    weir_stream *out = add_op(s, name, OP_OPERATOR, &def, fa);
    if (!out) {
        weir__free(fa);
        return NULL;
    }
    out->owned = fa; /* lives as long as the job */
    return out;
}

weir_stream *weir_stream_map(weir_stream *s, const char *name, weir_rec_fn fn, void *arg)
{
    return fn_op(s, name, (fn_arg){.rec = fn, .arg = arg}, map_process);
}

weir_stream *weir_stream_flat_map(weir_stream *s, const char *name, weir_rec_fn fn, void *arg)
{
    return fn_op(s, name, (fn_arg){.rec = fn, .arg = arg}, map_process);
}

weir_stream *weir_stream_filter(weir_stream *s, const char *name, weir_filter_fn fn, void *arg)
{
    return fn_op(s, name, (fn_arg){.filter = fn, .arg = arg}, filter_process);
}

weir_stream *weir_stream_reduce(weir_stream *s, const char *name, weir_reduce_fn fn, void *arg)
{
    if (s && !s->j->err && s->edge != EDGE_HASH) {
        build_fail(s->j, "reduce \"%s\" needs a keyed stream: key_by first", name ? name : "?");
        return NULL;
    }
    return fn_op(s, name, (fn_arg){.reduce = fn, .arg = arg}, reduce_process);
}

/* Aggregate: the accumulator is the key's value under "agg". */
typedef struct agg_arg {
    weir_agg_def def;
    void *arg;
} agg_arg;

/* The accumulator's read may answer later (controller.h). */
static int agg_read(weir_ctx *ctx, void *state, const weir_rec *in, int e, const void *v,
                    size_t vlen, void *arg)
{
    (void)arg;
    agg_arg *a = state;
    if (e && e != -ENOENT)
        return e;
    weir_rec acc = {v, vlen, in->ts}, out;
    if ((e = a->def.add(e ? NULL : &acc, in, &out, a->arg)) < 0)
        return e;
    /* out may point into the stored accumulator: copy before the put. */
    uint8_t small[256];
    uint8_t *copy = out.len <= sizeof(small) ? small : weir__malloc(out.len);
    if (!copy)
        return -ENOMEM;
    if (out.len)
        memcpy(copy, out.data, out.len);
    e = weir_value_put(ctx, "agg", copy, out.len);
    if (!e) {
        weir_rec now = {copy, out.len, in->ts}, res = now;
        if (a->def.result && (e = a->def.result(&now, &res, a->arg)) < 0) {
            if (copy != small)
                weir__free(copy);
            return e;
        }
        e = weir_emit(ctx, res.data, res.len, in->ts);
    }
    if (copy != small)
        weir__free(copy);
    return e;
}

static int agg_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    return weir__ns_get_async(ctx, in, "agg", NULL, 0, agg_read, NULL);
}

weir_stream *weir_stream_aggregate(weir_stream *s, const char *name, const weir_agg_def *def,
                                   void *arg)
{
    if (!s || s->j->err)
        return NULL;
    if (s->edge != EDGE_HASH || !def || !def->add) {
        build_fail(s->j, "aggregate \"%s\" needs a keyed stream (key_by) and an add function",
                   name ? name : "?");
        return NULL;
    }
    agg_arg *a = weir__malloc(sizeof(*a));
    if (!a) {
        build_fail(s->j, "out of memory");
        return NULL;
    }
    *a = (agg_arg){*def, arg};
    weir_op_def d = {.open = fn_open, .process = agg_process};
    weir_stream *out = add_op(s, name, OP_OPERATOR, &d, a);
    if (!out) {
        weir__free(a);
        return NULL;
    }
    out->owned = a;
    return out;
}

weir_stream *weir_stream_process(weir_stream *s, const char *name, const weir_op_def *def,
                                 void *arg)
{
    return add_op(s, name, OP_OPERATOR, def, arg);
}

int weir_stream_sink(weir_stream *s, const char *name, const weir_op_def *def, void *arg)
{
    if (!s)
        return -EINVAL;
    return add_op(s, name, OP_SINK, def, arg) ? 0 : s->j->err ? s->j->err : -EINVAL;
}

int weir_job_sink_parallelism(weir_job *j, const char *sink, int parallelism)
{
    if (!j)
        return -EINVAL;
    if (j->err)
        return j->err;
    for (int i = 0; sink && i < j->nops; i++) {
        sop *o = j->ops[i];
        if (strcmp(o->name, sink) != 0)
            continue;
        if (o->kind != OP_SINK) {
            build_fail(j,
                       "\"%s\" is not a sink: set an operator's parallelism with "
                       "weir_stream_parallelism",
                       sink);
            return j->err;
        }
        if (parallelism < 1 || parallelism > WEIR_KEY_GROUPS) {
            build_fail(j, "sink \"%s\": parallelism %d, must be 1..%d", sink, parallelism,
                       WEIR_KEY_GROUPS);
            return j->err;
        }
        o->parallelism = parallelism;
        return 0;
    }
    build_fail(j, "weir_job_sink_parallelism: no sink named \"%s\"", sink ? sink : "(null)");
    return j->err;
}

/* ---- the collector ------------------------------------------------------------------------ */
struct weir_collector {
    pthread_mutex_t lock;
    weir_rec *recs;
    size_t n, cap;
};

weir_collector *weir_collector_new(void)
{
    weir_collector *c = weir__calloc(1, sizeof(*c));
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

void weir_collector_free(weir_collector *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++)
        weir__free((void *)c->recs[i].data);
    weir__free(c->recs);
    pthread_mutex_destroy(&c->lock);
    weir__free(c);
}

static int collect_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx;
    weir_collector *c = state;
    void *copy = weir__malloc(in->len ? in->len : 1);
    if (!copy)
        return -ENOMEM;
    if (in->len)
        memcpy(copy, in->data, in->len);
    pthread_mutex_lock(&c->lock);
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        weir_rec *r = weir__realloc(c->recs, cap * sizeof(*r));
        if (!r) {
            pthread_mutex_unlock(&c->lock);
            weir__free(copy);
            return -ENOMEM;
        }
        c->recs = r;
        c->cap = cap;
    }
    c->recs[c->n++] = (weir_rec){copy, in->len, in->ts};
    pthread_mutex_unlock(&c->lock);
    return 0;
}

int weir_stream_collect(weir_stream *s, const char *name, weir_collector *c)
{
    if (!c)
        return -EINVAL;
    weir_op_def def = {.open = fn_open, .process = collect_process};
    return weir_stream_sink(s, name, &def, c);
}

size_t weir_collector_count(const weir_collector *c)
{
    return c ? c->n : 0;
}

const weir_rec *weir_collector_get(const weir_collector *c, size_t i)
{
    return c && i < c->n ? &c->recs[i] : NULL;
}

int weir_job_ops(const weir_job *j)
{
    return j ? j->nops : 0;
}

const char *weir_job_op_name(const weir_job *j, int i)
{
    return j && i >= 0 && i < j->nops ? j->ops[i]->name : NULL;
}

int weir_job_op_kind(const weir_job *j, int i)
{
    if (!j || i < 0 || i >= j->nops)
        return -EINVAL;
    return j->ops[i]->kind == OP_SOURCE ? WEIR_OP_SOURCE
           : j->ops[i]->kind == OP_SINK ? WEIR_OP_SINK
                                        : WEIR_OP_OPERATOR;
}
