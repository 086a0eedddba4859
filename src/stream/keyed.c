/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keyed.c - what a keyed operator's functions reach through their context:
 * value state of the current key (optionally under a namespace such as a
 * window), and event-time and processing-time timers.
 *
 * Layout in the subtask's state backend (weir/state.h), per key group:
 *
 *   state   [index u8][key length u32][key][namespace]  -> value
 *   timers  [0xFF or 0xFE][time u64][key length u32][key] -> (empty)
 *
 * The index is the state's name registered in this subtask (at most
 * MAX_STATES, so it never reaches the timer tags). Integers are big-endian
 * and times are stored with the sign bit flipped, so byte order is time
 * order: a group's first timer is the first entry of its timer prefix.
 * Because the key length precedes the key, the prefix [index][len][key]
 * holds exactly one key's entries (all its windows, say), never another
 * key that begins with the same bytes.
 *
 * Timers fire in time order across the subtask's groups: each group's
 * earliest timer time is cached (INT64_MAX when none); firing takes the
 * smallest, deletes that timer, sets the current key from it and calls
 * on_timer(), then looks again. A watermark (or the clock, for processing
 * time) that reaches no timer costs a scan of the cache, never a scan of
 * keys.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "stream/stream_int.h"

#define TAG_EVENT 0xFFu
#define TAG_PROC  0xFEu

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

static int reserve(weir_ctx *ctx, size_t need)
{
    if (need <= ctx->keycap)
        return 0;
    uint8_t *kb = realloc(ctx->keybuf, need);
    if (!kb)
        return -ENOMEM;
    ctx->keybuf = kb;
    ctx->keycap = need;
    return 0;
}

/* [index][len][key][ns] into ctx->keybuf; 0 or a negative errno. */
int weir__state_key(weir_ctx *ctx, const char *name, const void *ns, size_t nslen, size_t *klen)
{
    if (!ctx->backend || !ctx->has_key || !name)
        return -EINVAL; /* keyed state needs a current key */
    int idx = -1;
    for (int i = 0; i < ctx->nstates; i++)
        if (strcmp(ctx->states[i], name) == 0) {
            idx = i;
            break;
        }
    if (idx < 0) {
        if (ctx->nstates == MAX_STATES)
            return weir_fail(ctx, -ENOSPC, "more than %d keyed states", MAX_STATES);
        if (!(ctx->states[ctx->nstates] = strdup(name)))
            return -ENOMEM;
        idx = ctx->nstates++;
    }
    size_t need = 5 + ctx->key_len + nslen;
    if (reserve(ctx, need) < 0)
        return -ENOMEM;
    ctx->keybuf[0] = (uint8_t)idx;
    put_be32(ctx->keybuf + 1, (uint32_t)ctx->key_len);
    if (ctx->key_len)
        memcpy(ctx->keybuf + 5, ctx->key, ctx->key_len);
    if (nslen)
        memcpy(ctx->keybuf + 5 + ctx->key_len, ns, nslen);
    *klen = need;
    return 0;
}

int weir__ns_get(weir_ctx *ctx, const char *state, const void *ns, size_t nslen, const void **val,
                 size_t *len)
{
    size_t kl;
    int e = weir__state_key(ctx, state, ns, nslen, &kl);
    return e < 0 ? e : weir_state_get(ctx->backend, ctx->kg, ctx->keybuf, kl, val, len);
}

int weir__ns_put(weir_ctx *ctx, const char *state, const void *ns, size_t nslen, const void *val,
                 size_t len)
{
    size_t kl;
    int e = weir__state_key(ctx, state, ns, nslen, &kl);
    return e < 0 ? e : weir_state_put(ctx->backend, ctx->kg, ctx->keybuf, kl, val, len);
}

int weir__ns_del(weir_ctx *ctx, const char *state, const void *ns, size_t nslen)
{
    size_t kl;
    int e = weir__state_key(ctx, state, ns, nslen, &kl);
    if (e < 0)
        return e;
    e = weir_state_delete(ctx->backend, ctx->kg, ctx->keybuf, kl);
    return e == -ENOENT ? 0 : e;
}

typedef struct ns_scan {
    size_t skip;
    int (*fn)(void *arg, const void *ns, size_t nslen, const void *val, size_t vlen);
    void *arg;
} ns_scan;

static int ns_scan_fn(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
    ns_scan *s = arg;
    return s->fn(s->arg, (const uint8_t *)key + s->skip, klen - s->skip, val, vlen);
}

int weir__ns_scan(weir_ctx *ctx, const char *state,
                  int (*fn)(void *arg, const void *ns, size_t nslen, const void *val, size_t vlen),
                  void *arg)
{
    size_t kl;
    int e = weir__state_key(ctx, state, NULL, 0, &kl);
    if (e < 0)
        return e;
    ns_scan s = {kl, fn, arg};
    return weir_state_scan(ctx->backend, ctx->kg, ctx->keybuf, kl, ns_scan_fn, &s);
}

int weir_value_get(weir_ctx *ctx, const char *state, const void **val, size_t *len)
{
    return weir__ns_get(ctx, state, NULL, 0, val, len);
}

int weir_value_put(weir_ctx *ctx, const char *state, const void *val, size_t len)
{
    return weir__ns_put(ctx, state, NULL, 0, val, len);
}

int weir_value_clear(weir_ctx *ctx, const char *state)
{
    return weir__ns_del(ctx, state, NULL, 0);
}

/* ---- timers ------------------------------------------------------------------------------ */
/* [tag][time][len][key] of the current key into ctx->keybuf. */
static int timer_key(weir_ctx *ctx, int domain, int64_t when, size_t *klen)
{
    size_t need = 13 + ctx->key_len;
    if (reserve(ctx, need) < 0)
        return -ENOMEM;
    ctx->keybuf[0] = domain == WEIR_TIME_EVENT ? TAG_EVENT : TAG_PROC;
    weir__put_time(ctx->keybuf + 1, when);
    put_be32(ctx->keybuf + 9, (uint32_t)ctx->key_len);
    if (ctx->key_len)
        memcpy(ctx->keybuf + 13, ctx->key, ctx->key_len);
    *klen = need;
    return 0;
}

int weir_timer_register(weir_ctx *ctx, int domain, int64_t when)
{
    if (!ctx || !ctx->backend || !ctx->has_key ||
        (domain != WEIR_TIME_EVENT && domain != WEIR_TIME_PROCESSING) || when == INT64_MAX)
        return -EINVAL;
    size_t kl;
    int e = timer_key(ctx, domain, when, &kl);
    if (!e)
        e = weir_state_put(ctx->backend, ctx->kg, ctx->keybuf, kl, "", 0);
    if (e)
        return e;
    subtask *st = ctx->st;
    int64_t *first = &st->timer_first[domain][ctx->kg - st->backend->first_kg];
    if (when < *first)
        *first = when;
    return 0;
}

int weir_timer_delete(weir_ctx *ctx, int domain, int64_t when)
{
    if (!ctx || !ctx->backend || !ctx->has_key ||
        (domain != WEIR_TIME_EVENT && domain != WEIR_TIME_PROCESSING))
        return -EINVAL;
    size_t kl;
    int e = timer_key(ctx, domain, when, &kl);
    if (!e)
        e = weir_state_delete(ctx->backend, ctx->kg, ctx->keybuf, kl);
    /* The group's cached first time may now be early; firing re-reads it. */
    return e == -ENOENT ? 0 : e;
}

typedef struct peek {
    int64_t when;
    uint8_t *raw; /* the copy; the entry starts 3 bytes in, so its key (at 13) is 16-aligned */
    uint8_t *key; /* the timer entry: [tag][time][len][key] */
    size_t klen;
} peek;

static int peek_fn(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
    (void)val, (void)vlen;
    peek *p = arg;
    p->when = weir__get_time((const uint8_t *)key + 1);
    p->klen = klen;
    p->raw = malloc(klen + 3);
    if (!p->raw)
        return -ENOMEM;
    p->key = p->raw + 3;
    memcpy(p->key, key, klen);
    return 1; /* the first is enough */
}

/* Re-read group kg's earliest timer of the domain into the cache. */
static int refresh(subtask *st, int domain, int kg, peek *out)
{
    uint8_t tag = domain == WEIR_TIME_EVENT ? TAG_EVENT : TAG_PROC;
    peek p = {INT64_MAX, NULL, NULL, 0};
    int r = weir_state_scan(st->backend, kg, &tag, 1, peek_fn, &p);
    if (r < 0)
        return r;
    st->timer_first[domain][kg - st->backend->first_kg] = p.when;
    if (out)
        *out = p;
    else
        free(p.raw);
    return 0;
}

/* Fire every timer of the domain at or before `upto`, in time order. */
int weir__timers_fire(subtask *st, int domain, int64_t upto)
{
    if (!st->backend || !st->timer_first[domain])
        return 0;
    weir_ctx *c = &st->ctx[0];
    int ngroups = st->backend->end_kg - st->backend->first_kg;
    for (unsigned fired = 0;; fired++) {
        /* A watermark can close many windows: let the other subtasks of
         * this thread run now and then. */
        if (fired % 256 == 255) {
            int y = weir_task_yield();
            if (y < 0)
                return y;
        }
        int best = -1;
        for (int g = 0; g < ngroups; g++)
            if (st->timer_first[domain][g] != INT64_MAX && st->timer_first[domain][g] <= upto &&
                (best < 0 || st->timer_first[domain][g] < st->timer_first[domain][best]))
                best = g;
        if (best < 0)
            return 0;
        int kg = st->backend->first_kg + best;
        peek p;
        int e = refresh(st, domain, kg, &p);
        if (e < 0)
            return e;
        if (!p.key || p.when > upto) { /* the cache was early (a deleted timer) */
            free(p.raw);
            continue;
        }
        e = weir_state_delete(st->backend, kg, p.key, p.klen);
        if (!e)
            e = refresh(st, domain, kg, NULL);
        if (e < 0) {
            free(p.raw);
            return e;
        }
        c->key = p.key + 13;
        c->key_len = p.klen - 13;
        c->has_key = 1;
        c->kg = kg;
        if (c->op->def.on_timer)
            e = c->op->def.on_timer(c, c->state, domain, p.when);
        free(p.raw);
        c->key = NULL;
        c->key_len = 0;
        c->has_key = 0;
        if (e < 0)
            return e;
    }
}

/* The earliest processing-time timer of the subtask (INT64_MAX: none). */
int64_t weir__timers_next(subtask *st, int domain)
{
    if (!st->backend || !st->timer_first[domain])
        return INT64_MAX;
    int64_t m = INT64_MAX;
    int ngroups = st->backend->end_kg - st->backend->first_kg;
    for (int g = 0; g < ngroups; g++)
        if (st->timer_first[domain][g] < m)
            m = st->timer_first[domain][g];
    return m;
}

/* ---- map and list state ------------------------------------------------------------------ */
int weir_map_get(weir_ctx *ctx, const char *state, const void *ukey, size_t uklen, const void **val,
                 size_t *len)
{
    return weir__ns_get(ctx, state, ukey, uklen, val, len);
}

int weir_map_put(weir_ctx *ctx, const char *state, const void *ukey, size_t uklen, const void *val,
                 size_t len)
{
    return weir__ns_put(ctx, state, ukey, uklen, val, len);
}

int weir_map_delete(weir_ctx *ctx, const char *state, const void *ukey, size_t uklen)
{
    return weir__ns_del(ctx, state, ukey, uklen);
}

int weir_map_iterate(weir_ctx *ctx, const char *state, weir_entry_fn fn, void *arg)
{
    if (!fn)
        return -EINVAL;
    return weir__ns_scan(ctx, state, fn, arg);
}

/* List entries: the namespace is a position, a per-subtask sequence number
 * (big-endian), so iteration is append order. */
int weir_list_add(weir_ctx *ctx, const char *state, const void *val, size_t len)
{
    uint8_t pos[8];
    weir__put_be64(pos, ++ctx->seq);
    return weir__ns_put(ctx, state, pos, 8, val, len);
}

int weir_list_iterate(weir_ctx *ctx, const char *state, weir_entry_fn fn, void *arg)
{
    return weir_map_iterate(ctx, state, fn, arg);
}

typedef struct collect_ns {
    uint8_t (*ns)[8];
    size_t n, cap;
} collect_ns;

static int collect_pos(void *arg, const void *ns, size_t nslen, const void *val, size_t vlen)
{
    (void)val, (void)vlen;
    collect_ns *c = arg;
    if (nslen != 8)
        return -EBADMSG;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        uint8_t(*v)[8] = realloc(c->ns, cap * 8);
        if (!v)
            return -ENOMEM;
        c->ns = v;
        c->cap = cap;
    }
    memcpy(c->ns[c->n++], ns, 8);
    return 0;
}

int weir_list_clear(weir_ctx *ctx, const char *state)
{
    collect_ns c = {0};
    int e = weir__ns_scan(ctx, state, collect_pos, &c);
    for (size_t i = 0; !e && i < c.n; i++)
        e = weir__ns_del(ctx, state, c.ns[i], 8);
    free(c.ns);
    return e;
}
