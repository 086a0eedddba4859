/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keyed.c - what a keyed operator's functions reach through their context:
 * value, map and list state of the current key (optionally under a
 * namespace such as a window). Timers are timers.c.
 *
 * Layout in the subtask's state backend (weir/state.h), per key group:
 *
 *   state   [index u8][key length u32][key][namespace]  -> value
 *
 * The index is the state's name registered in this subtask (at most
 * MAX_STATES, so it never reaches the tags timers.c uses at checkpoints).
 * Integers are big-endian. Because the key length precedes the key, the
 * prefix [index][len][key] holds exactly one key's entries (all its
 * windows, say), never another key that begins with the same bytes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "stream/stream_int.h"

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
    weir__put_be32(ctx->keybuf + 1, (uint32_t)ctx->key_len);
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
