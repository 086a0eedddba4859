/* SPDX-License-Identifier: Apache-2.0 */
/*
 * placement.c - subtasks to workers by instance (placement.h).
 *
 * Every check (arguments, ids, total room) comes before the first write to
 * out, and once the total room covers the subtasks the placement cannot
 * fail: each instance takes exactly as many slots as it has subtasks, so
 * the room left always covers what is left to place and a split always
 * finds its slots.
 */
#include "cluster/placement.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static int say(char *msg, size_t cap, int e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int say(char *msg, size_t cap, int e, const char *fmt, ...)
{
    if (msg && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, cap, fmt, ap);
        va_end(ap);
    }
    return e;
}

static int by_id(const void *a, const void *b)
{
    const weir__place_worker *x = *(const weir__place_worker *const *)a;
    const weir__place_worker *y = *(const weir__place_worker *const *)b;
    return strcmp(x->id, y->id);
}

/* "the job needs N slots, the cluster has M free (worker a: x, ...)", the
 * workers in sorted order, cut at cap. */
static int no_space(char *msg, size_t cap, uint32_t need, uint64_t total,
                    const weir__place_worker *const *by, size_t nw)
{
    if (!msg || !cap)
        return -ENOSPC;
    size_t at = 0;
    int n = snprintf(msg, cap, "the job needs %u slots, the cluster has %llu free (", need,
                     (unsigned long long)total);
    for (size_t i = 0; n >= 0 && (at += (size_t)n) < cap && i <= nw; i++)
        n = i == nw ? snprintf(msg + at, cap - at, ")")
                    : snprintf(msg + at, cap - at, "%sworker %s: %u", i ? ", " : "", by[i]->id,
                               by[i]->free_slots);
    return -ENOSPC;
}

int weir__place(const weir__plan *p, const weir__place_worker *w, size_t nw, uint32_t *out,
                char *msg, size_t cap)
{
    if (msg && cap)
        msg[0] = '\0';
    if (!p || (!w && nw) || (!out && p->nsubtasks))
        return say(msg, cap, -EINVAL, "placement: a required argument is NULL");
    if (nw == 0)
        return say(msg, cap, -EINVAL, "placement: no workers to place %u subtasks on",
                   p->nsubtasks);
    if (nw > UINT32_MAX)
        return say(msg, cap, -EINVAL, "placement: %zu workers is too many", nw);
    for (size_t i = 0; i < nw; i++)
        if (!w[i].id)
            return say(msg, cap, -EINVAL, "placement: worker %zu has no id", i);
    /* by: the workers in sorted id order; room[i]: by[i]'s slots left. */
    const weir__place_worker **by = weir__malloc(nw * sizeof(*by));
    uint32_t *room = weir__malloc(nw * sizeof(*room));
    int rc = 0;
    if (!by || !room) {
        rc = say(msg, cap, -ENOMEM, "placement: out of memory");
        goto done;
    }
    for (size_t i = 0; i < nw; i++)
        by[i] = &w[i];
    qsort(by, nw, sizeof(*by), by_id);
    uint64_t total = 0;
    for (size_t i = 0; i < nw; i++) {
        if (i && strcmp(by[i - 1]->id, by[i]->id) == 0) {
            rc = say(msg, cap, -EINVAL, "placement: worker id \"%s\" is given twice", by[i]->id);
            goto done;
        }
        room[i] = by[i]->free_slots;
        total += room[i];
    }
    if (total < p->nsubtasks) {
        rc = no_space(msg, cap, p->nsubtasks, total, by, nw);
        goto done;
    }
    uint32_t instances = 0;
    for (uint32_t c = 0; c < p->nchains; c++)
        instances = p->chains[c].par > instances ? p->chains[c].par : instances;
    for (uint32_t i = 0; i < instances; i++) {
        uint32_t size = 0;
        for (uint32_t c = 0; c < p->nchains; c++)
            size += p->chains[c].par > i;
        /* The first worker with room for the whole instance, from the
         * (i mod nw)-th; nw when none has (split). */
        size_t whole = nw;
        for (size_t j = 0; j < nw && whole == nw; j++)
            if (room[(i % nw + j) % nw] >= size)
                whole = (i % nw + j) % nw;
        uint32_t k = 0; /* plan index of subtask 0 of chain c */
        size_t fill = 0;
        for (uint32_t c = 0; c < p->nchains; k += p->chains[c].par, c++) {
            if (p->chains[c].par <= i)
                continue;
            size_t at = whole;
            if (at == nw) {
                while (fill < nw && room[fill] == 0)
                    fill++;
                at = fill; /* < nw: the room left covers what is left */
            }
            room[at]--;
            out[k + i] = (uint32_t)(by[at] - w);
        }
    }
done:
    weir__free(by);
    weir__free(room);
    return rc;
}

int weir__place_count_remote(const weir__plan *p, const uint32_t *out)
{
    if (!p || (!out && p->nsubtasks))
        return -EINVAL;
    uint32_t *base = weir__malloc(((size_t)p->nchains + 1) * sizeof(*base));
    if (!base)
        return -ENOMEM;
    base[0] = 0;
    for (uint32_t c = 0; c < p->nchains; c++)
        base[c + 1] = base[c] + p->chains[c].par;
    int n = 0;
    for (uint32_t i = 0; i < p->nchannels; i++) {
        const weir__plan_channel *ch = &p->channels[i];
        n += out[base[ch->from_chain] + ch->from_sub] != out[base[ch->to_chain] + ch->to_sub];
    }
    weir__free(base);
    return n;
}
