/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plan.c - job graph -> plan, the plan's frame, and binding a plan to a
 * job graph (plan.h).
 *
 * Chaining. Operators are created in topological order (an operator can
 * only read streams that exist), so one pass decides: an operator joins
 * its input's chain when that input is its only one, a forward edge of the
 * main output, from an operator with no other reader, of the same
 * parallelism and not a sink - unless it has admit or drain hooks
 * (weir_op_def: a lookup, say), which only a chain's head gets. Without
 * its own parallelism an operator that reads only forward edges takes its
 * input's (so it can chain), else the run's.
 */
#include "stream/plan.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "stream/stream_int.h"
#include "weir/state.h"

static int fail(char *why, size_t cap, int e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *why, size_t cap, int e, const char *fmt, ...)
{
    if (why && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return e;
}

void weir__plan_free(weir__plan *p)
{
    if (!p)
        return;
    for (uint32_t i = 0; p->ops && i < p->nops; i++) {
        weir__free(p->ops[i].name);
        weir__free(p->ops[i].inputs);
    }
    for (uint32_t i = 0; p->chains && i < p->nchains; i++) {
        weir__free(p->chains[i].ops);
        weir__free(p->chains[i].kg_first);
        weir__free(p->chains[i].kg_end);
    }
    weir__free(p->ops);
    weir__free(p->chains);
    weir__free(p->channels);
    weir__free(p->job);
    weir__free(p);
}

/* ---- channels (the same on every side) -------------------------------------------------- */
static int derive_channels(weir__plan *p, char *why, size_t cap)
{
    uint64_t n = 0;
    for (uint32_t ci = 0; ci < p->nchains; ci++) {
        const weir__plan_op *head = &p->ops[p->chains[ci].ops[0]];
        for (uint32_t k = 0; k < head->ninputs; k++) {
            const weir__plan_input *in = &head->inputs[k];
            uint64_t prod = p->chains[p->ops[in->from].chain].par;
            n += in->edge == EDGE_FORWARD ? prod : prod * p->chains[ci].par;
        }
    }
    if (n > WEIR__PLAN_MAX_CHANS)
        return fail(why, cap, -EBADMSG, "the plan needs %llu channels, more than %u",
                    (unsigned long long)n, WEIR__PLAN_MAX_CHANS);
    p->channels = weir__calloc(n ? (size_t)n : 1, sizeof(*p->channels));
    uint32_t *inputs = NULL; /* next input number of each consumer subtask */
    uint32_t *base = weir__calloc(p->nchains + 1, sizeof(*base));
    if (p->channels && base) {
        for (uint32_t ci = 0; ci < p->nchains; ci++)
            base[ci + 1] = base[ci] + p->chains[ci].par;
        inputs = weir__calloc(base[p->nchains] ? base[p->nchains] : 1, sizeof(*inputs));
    }
    if (!p->channels || !base || !inputs) {
        weir__free(base);
        weir__free(inputs);
        return fail(why, cap, -ENOMEM, "out of memory");
    }
    uint32_t id = 0;
    for (uint32_t ci = 0; ci < p->nchains; ci++) {
        const weir__plan_op *head = &p->ops[p->chains[ci].ops[0]];
        for (uint32_t k = 0; k < head->ninputs; k++) {
            const weir__plan_input *in = &head->inputs[k];
            uint32_t pc = p->ops[in->from].chain;
            for (uint32_t s0 = 0; s0 < p->chains[pc].par; s0++)
                for (uint32_t s = 0; s < p->chains[ci].par; s++) {
                    if (in->edge == EDGE_FORWARD && s != s0)
                        continue;
                    p->channels[id] = (weir__plan_channel){
                        id, pc, s0, ci, s, k, inputs[base[ci] + s]++,
                    };
                    id++;
                }
        }
    }
    p->nchannels = id;
    p->nsubtasks = base[p->nchains];
    weir__free(base);
    weir__free(inputs);
    return 0;
}

static int set_ranges(weir__plan_chain *c, int keyed, uint32_t ngroups)
{
    if (!(c->kg_first = weir__calloc(c->par, sizeof(uint32_t))) ||
        !(c->kg_end = weir__calloc(c->par, sizeof(uint32_t))))
        return -ENOMEM;
    for (uint32_t s = 0; keyed && s < c->par; s++) {
        int first, end;
        weir_key_group_range((int)s, (int)c->par, (int)ngroups, &first, &end);
        c->kg_first[s] = (uint32_t)first;
        c->kg_end[s] = (uint32_t)end;
    }
    return 0;
}

/* ---- job graph -> plan ------------------------------------------------------------------ */
static int make(const weir_job *j, int def, weir__plan *p, char *why, size_t cap)
{
    if (!(p->job = weir__strdup(j->name ? j->name : "")) ||
        !(p->ops = weir__calloc((size_t)j->nops, sizeof(*p->ops))) ||
        !(p->chains = weir__calloc((size_t)j->nops, sizeof(*p->chains))))
        return fail(why, cap, -ENOMEM, "out of memory");
    p->nops = (uint32_t)j->nops;
    for (int i = 0; i < j->nops; i++) {
        const sop *o = j->ops[i];
        weir__plan_op *po = &p->ops[i];
        if (!(po->name = weir__strdup(o->name)))
            return fail(why, cap, -ENOMEM, "out of memory");
        po->kind = (uint8_t)o->kind;
        po->keyed = (uint8_t)o->keyed;
        if (o->kind != OP_SOURCE && o->ninputs == 0)
            return fail(why, cap, -EINVAL, "operator \"%s\" has no input", o->name);
        if (o->ninputs && !(po->inputs = weir__calloc((size_t)o->ninputs, sizeof(*po->inputs))))
            return fail(why, cap, -ENOMEM, "out of memory");
        po->ninputs = (uint32_t)o->ninputs;
        int fwd = o->ninputs > 0;
        for (int k = 0; k < o->ninputs; k++) {
            po->inputs[k] =
                (weir__plan_input){(uint32_t)o->inputs[k].from->id, (uint8_t)o->inputs[k].tag,
                                   (uint8_t)o->inputs[k].edge};
            fwd &= o->inputs[k].edge == EDGE_FORWARD;
        }
        po->par = (uint32_t)(o->parallelism ? o->parallelism
                             : fwd          ? (int)p->ops[o->inputs[0].from->id].par
                                            : def);
        for (int k = 0; k < o->ninputs; k++) {
            const weir__plan_op *from = &p->ops[po->inputs[k].from];
            if (po->inputs[k].edge == EDGE_FORWARD && from->par != po->par)
                return fail(why, cap, -EINVAL,
                            "forward edge \"%s\" -> \"%s\" joins parallelism %u to %u: use "
                            "rebalance or key_by",
                            from->name, o->name, from->par, po->par);
        }
        const sop *up = o->ninputs == 1 ? o->inputs[0].from : NULL;
        if (up && o->inputs[0].edge == EDGE_FORWARD && o->inputs[0].tag == 0 && up->nouts == 1 &&
            p->ops[up->id].par == po->par && up->kind != OP_SINK && !o->def.admit &&
            !o->def.drain) {
            weir__plan_chain *c = &p->chains[p->ops[up->id].chain];
            uint32_t *ops = weir__realloc(c->ops, (c->nops + 1) * sizeof(*ops));
            if (!ops)
                return fail(why, cap, -ENOMEM, "out of memory");
            c->ops = ops;
            po->chain = p->ops[up->id].chain;
            po->pos = c->nops;
            c->ops[c->nops++] = (uint32_t)i;
        } else {
            weir__plan_chain *c = &p->chains[p->nchains];
            if (!(c->ops = weir__malloc(sizeof(*c->ops))))
                return fail(why, cap, -ENOMEM, "out of memory");
            c->ops[0] = (uint32_t)i;
            c->nops = 1;
            c->par = po->par;
            po->chain = p->nchains++;
            po->pos = 0;
        }
    }
    for (uint32_t ci = 0; ci < p->nchains; ci++)
        if (set_ranges(&p->chains[ci], p->ops[p->chains[ci].ops[0]].keyed, p->ngroups) < 0)
            return fail(why, cap, -ENOMEM, "out of memory");
    return derive_channels(p, why, cap);
}

int weir__plan_make(const weir_job *j, int parallelism, int credits, weir__plan **out, char *why,
                    size_t cap)
{
    *out = NULL;
    if (parallelism < 1 || parallelism > WEIR_KEY_GROUPS || credits < 1)
        return fail(why, cap, -EINVAL, "bad run options (parallelism 1..%d, credits >= 1)",
                    WEIR_KEY_GROUPS);
    if ((uint32_t)j->nops > WEIR__PLAN_MAX_OPS)
        return fail(why, cap, -EINVAL, "the job has %d operators, more than %u", j->nops,
                    WEIR__PLAN_MAX_OPS);
    weir__plan *p = weir__calloc(1, sizeof(*p));
    if (!p)
        return fail(why, cap, -ENOMEM, "out of memory");
    p->ngroups = WEIR_KEY_GROUPS;
    p->credits = (uint32_t)credits;
    int e = make(j, parallelism, p, why, cap);
    if (e) {
        weir__plan_free(p);
        return e;
    }
    *out = p;
    return 0;
}

/* ---- the frame -------------------------------------------------------------------------- */
int weir__plan_encode(const weir__plan *p, weir_frame_builder *fb)
{
    int e = weir_frame_builder_init(fb, WEIR__PLAN_KIND);
    weir_frame_put_u32(fb, WEIR__PLAN_VERSION);
    weir_frame_put_str(fb, p->job);
    weir_frame_put_u32(fb, p->ngroups);
    weir_frame_put_u32(fb, p->credits);
    weir_frame_put_u32(fb, p->nops);
    for (uint32_t i = 0; i < p->nops; i++) {
        const weir__plan_op *o = &p->ops[i];
        weir_frame_put_str(fb, o->name);
        weir_frame_put_u8(fb, o->kind);
        weir_frame_put_u8(fb, o->keyed);
        weir_frame_put_u32(fb, o->par);
        weir_frame_put_u32(fb, o->chain);
        weir_frame_put_u32(fb, o->pos);
        weir_frame_put_u32(fb, o->ninputs);
        for (uint32_t k = 0; k < o->ninputs; k++) {
            weir_frame_put_u32(fb, o->inputs[k].from);
            weir_frame_put_u8(fb, o->inputs[k].tag);
            weir_frame_put_u8(fb, o->inputs[k].edge);
        }
    }
    weir_frame_put_u32(fb, p->nchains);
    for (uint32_t ci = 0; ci < p->nchains; ci++) {
        const weir__plan_chain *c = &p->chains[ci];
        weir_frame_put_u32(fb, c->par);
        weir_frame_put_u32(fb, c->nops);
        for (uint32_t k = 0; k < c->nops; k++)
            weir_frame_put_u32(fb, c->ops[k]);
        for (uint32_t s = 0; s < c->par; s++) {
            weir_frame_put_u32(fb, c->kg_first[s]);
            e = weir_frame_put_u32(fb, c->kg_end[s]);
        }
    }
    const uint8_t *bytes;
    size_t len;
    return e ? e : weir_frame_builder_finish(fb, &bytes, &len);
}

/* The structure holds together: what the decoder checks after reading. */
static int check(const weir__plan *p, char *why, size_t cap)
{
    if (p->ngroups != WEIR_KEY_GROUPS)
        return fail(why, cap, -EBADMSG, "plan: %u key groups, this weir has %d", p->ngroups,
                    WEIR_KEY_GROUPS);
    if (p->credits < 1 || p->credits > 1u << 16)
        return fail(why, cap, -EBADMSG, "plan: %u credits per channel (1..65536)", p->credits);
    for (uint32_t i = 0; i < p->nops; i++) {
        const weir__plan_op *o = &p->ops[i];
        if (!o->name[0])
            return fail(why, cap, -EBADMSG, "plan: operator %u has an empty name", i);
        for (uint32_t k = 0; k < i; k++)
            if (strcmp(p->ops[k].name, o->name) == 0)
                return fail(why, cap, -EBADMSG, "plan: two operators are named \"%s\"", o->name);
        if (o->kind > OP_SINK || o->keyed > 1 || o->par < 1 || o->par > p->ngroups)
            return fail(why, cap, -EBADMSG,
                        "plan: operator \"%s\": kind %u, keyed %u, parallelism %u out of range",
                        o->name, o->kind, o->keyed, o->par);
        if ((o->kind == OP_SOURCE) != (o->ninputs == 0))
            return fail(why, cap, -EBADMSG, "plan: operator \"%s\": %u inputs for its kind",
                        o->name, o->ninputs);
        for (uint32_t k = 0; k < o->ninputs; k++) {
            const weir__plan_input *in = &o->inputs[k];
            if (in->from >= i || in->tag > 1 || in->edge > EDGE_BROADCAST)
                return fail(why, cap, -EBADMSG, "plan: operator \"%s\": input %u is malformed",
                            o->name, k);
            if (in->edge == EDGE_FORWARD && p->ops[in->from].par != o->par)
                return fail(why, cap, -EBADMSG,
                            "plan: forward edge into \"%s\" changes parallelism", o->name);
        }
        if (o->chain >= p->nchains || o->pos >= p->chains[o->chain].nops ||
            p->chains[o->chain].ops[o->pos] != i)
            return fail(why, cap, -EBADMSG, "plan: operator \"%s\" is not where its chain says",
                        o->name);
    }
    uint32_t placed = 0;
    for (uint32_t ci = 0; ci < p->nchains; ci++) {
        const weir__plan_chain *c = &p->chains[ci];
        placed += c->nops;
        for (uint32_t k = 0; k < c->nops; k++) {
            const weir__plan_op *o = &p->ops[c->ops[k]];
            if (o->chain != ci || o->pos != k || o->par != c->par)
                return fail(why, cap, -EBADMSG, "plan: chain %u lists \"%s\" wrongly", ci, o->name);
            /* Inside a chain, records pass by call: each operator reads
             * exactly the one before it, forward, main output. */
            if (k > 0 && (o->ninputs != 1 || o->inputs[0].from != c->ops[k - 1] ||
                          o->inputs[0].edge != EDGE_FORWARD || o->inputs[0].tag != 0))
                return fail(why, cap, -EBADMSG, "plan: \"%s\" cannot be chained where it is",
                            o->name);
        }
        /* A keyed head's subtasks tile the key groups in order. */
        int keyed = p->ops[c->ops[0]].keyed;
        uint32_t next = 0;
        for (uint32_t s = 0; s < c->par; s++) {
            uint32_t f = c->kg_first[s], e = c->kg_end[s];
            if (keyed ? (f != next || e <= f || e > p->ngroups) : (f || e))
                return fail(why, cap, -EBADMSG, "plan: chain %u subtask %u has key groups [%u, %u)",
                            ci, s, f, e);
            next = e;
        }
        if (keyed && next != p->ngroups)
            return fail(why, cap, -EBADMSG, "plan: chain %u leaves key groups %u.. unowned", ci,
                        next);
    }
    if (placed != p->nops)
        return fail(why, cap, -EBADMSG, "plan: chains hold %u operators of %u", placed, p->nops);
    return 0;
}

static int decode(weir_frame_reader *r, weir__plan *p, char *why, size_t cap)
{
    uint8_t kind = 0;
    uint32_t version = 0;
    weir_frame_get_u8(r, &kind);
    weir_frame_get_u32(r, &version);
    if (weir_frame_reader_error(r) || kind != WEIR__PLAN_KIND || version != WEIR__PLAN_VERSION)
        return fail(why, cap, -EBADMSG, "plan: not a version-%u plan frame", WEIR__PLAN_VERSION);
    weir_frame_get_strdup(r, 255, &p->job);
    weir_frame_get_u32(r, &p->ngroups);
    weir_frame_get_u32(r, &p->credits);
    uint32_t n = 0;
    /* An operator takes at least 4 + 2 + 16 bytes. */
    if (weir_frame_get_count(r, 22, &n) < 0 || n < 1 || n > WEIR__PLAN_MAX_OPS)
        return fail(why, cap, -EBADMSG, "plan: bad header or operator count");
    if (!(p->ops = weir__calloc(n, sizeof(*p->ops))))
        return fail(why, cap, -ENOMEM, "out of memory");
    p->nops = n;
    for (uint32_t i = 0; i < n; i++) {
        weir__plan_op *o = &p->ops[i];
        int e = weir_frame_get_strdup(r, WEIR__PLAN_MAX_NAME, &o->name);
        if (e == -ENOMEM)
            return fail(why, cap, -ENOMEM, "out of memory");
        weir_frame_get_u8(r, &o->kind);
        weir_frame_get_u8(r, &o->keyed);
        weir_frame_get_u32(r, &o->par);
        weir_frame_get_u32(r, &o->chain);
        weir_frame_get_u32(r, &o->pos);
        if (weir_frame_get_count(r, 6, &o->ninputs) < 0)
            return fail(why, cap, -EBADMSG, "plan: operator %u is cut short or malformed", i);
        if (o->ninputs && !(o->inputs = weir__calloc(o->ninputs, sizeof(*o->inputs))))
            return fail(why, cap, -ENOMEM, "out of memory");
        for (uint32_t k = 0; k < o->ninputs; k++) {
            weir_frame_get_u32(r, &o->inputs[k].from);
            weir_frame_get_u8(r, &o->inputs[k].tag);
            weir_frame_get_u8(r, &o->inputs[k].edge);
        }
        if (weir_frame_reader_error(r))
            return fail(why, cap, -EBADMSG, "plan: operator %u is cut short or malformed", i);
    }
    /* A chain takes at least 4 + 4 + 4 + 8 bytes; there is at most one per operator. */
    if (weir_frame_get_count(r, 20, &n) < 0 || n < 1 || n > p->nops)
        return fail(why, cap, -EBADMSG, "plan: bad chain count");
    if (!(p->chains = weir__calloc(n, sizeof(*p->chains))))
        return fail(why, cap, -ENOMEM, "out of memory");
    p->nchains = n;
    for (uint32_t ci = 0; ci < n; ci++) {
        weir__plan_chain *c = &p->chains[ci];
        weir_frame_get_u32(r, &c->par);
        if (weir_frame_get_count(r, 4, &c->nops) < 0 || c->nops < 1 || c->nops > p->nops ||
            c->par < 1 || c->par > WEIR_KEY_GROUPS)
            return fail(why, cap, -EBADMSG, "plan: chain %u is malformed", ci);
        if (!(c->ops = weir__calloc(c->nops, sizeof(*c->ops))) ||
            !(c->kg_first = weir__calloc(c->par, sizeof(uint32_t))) ||
            !(c->kg_end = weir__calloc(c->par, sizeof(uint32_t))))
            return fail(why, cap, -ENOMEM, "out of memory");
        for (uint32_t k = 0; k < c->nops; k++) {
            weir_frame_get_u32(r, &c->ops[k]);
            if (c->ops[k] >= p->nops)
                return fail(why, cap, -EBADMSG, "plan: chain %u names operator %u of %u", ci,
                            c->ops[k], p->nops);
        }
        for (uint32_t s = 0; s < c->par; s++) {
            weir_frame_get_u32(r, &c->kg_first[s]);
            weir_frame_get_u32(r, &c->kg_end[s]);
        }
        if (weir_frame_reader_error(r))
            return fail(why, cap, -EBADMSG, "plan: chain %u is cut short", ci);
    }
    if (!weir_frame_at_end(r))
        return fail(why, cap, -EBADMSG, "plan: %zu bytes after its end", weir_frame_remaining(r));
    int e = check(p, why, cap);
    return e ? e : derive_channels(p, why, cap);
}

int weir__plan_decode(const void *payload, size_t len, weir__plan **out, char *why, size_t cap)
{
    *out = NULL;
    weir__plan *p = weir__calloc(1, sizeof(*p));
    if (!p)
        return fail(why, cap, -ENOMEM, "out of memory");
    weir_frame_reader r;
    weir_frame_reader_init(&r, payload, len);
    int e = decode(&r, p, why, cap);
    if (e) {
        weir__plan_free(p);
        return e;
    }
    *out = p;
    return 0;
}

/* ---- plan + job graph ------------------------------------------------------------------- */
int weir__plan_bind(const weir__plan *p, weir_job *j, char *why, size_t cap)
{
    if ((uint32_t)j->nops != p->nops)
        return fail(why, cap, -EINVAL, "the plan has %u operators, job \"%s\" %d", p->nops, j->name,
                    j->nops);
    for (uint32_t i = 0; i < p->nops; i++) {
        const weir__plan_op *po = &p->ops[i];
        const sop *o = j->ops[i];
        int same = strcmp(o->name, po->name) == 0 && o->kind == po->kind && o->keyed == po->keyed &&
                   (uint32_t)o->ninputs == po->ninputs &&
                   (!o->parallelism || (uint32_t)o->parallelism == po->par);
        for (uint32_t k = 0; same && k < po->ninputs; k++)
            same = (uint32_t)o->inputs[k].from->id == po->inputs[k].from &&
                   o->inputs[k].tag == po->inputs[k].tag && o->inputs[k].edge == po->inputs[k].edge;
        if (!same)
            return fail(why, cap, -EINVAL,
                        "the plan's operator %u (\"%s\") is not the job's (\"%s\"): was the plan "
                        "made from another version of the job?",
                        i, po->name, o->name);
    }
    /* A chain's operators other than its head must have that head as their
     * only reader chain-wise: graph.c's nouts, which the plan does not carry. */
    for (uint32_t i = 0; i < p->nops; i++) {
        const weir__plan_op *po = &p->ops[i];
        if (po->pos > 0 && j->ops[po->inputs[0].from]->nouts != 1)
            return fail(why, cap, -EINVAL, "the plan chains \"%s\" to an operator with two readers",
                        po->name);
        sop *o = j->ops[i];
        o->par = (int)po->par;
        o->chain = (int)po->chain;
        o->chain_pos = (int)po->pos;
    }
    return 0;
}
