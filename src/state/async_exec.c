/* SPDX-License-Identifier: Apache-2.0 */
/*
 * async_exec.c - the async execution controller's rules (async_exec.h).
 *
 * The key gate is an open-addressing table (linear probing, each slot the
 * key's hash, the record that holds the key and the FIFO of records
 * parked behind it); a slot lives while its key has a record started or
 * parked. Its size is kept for every record the cap admits, reserved at
 * submit, so starting a record never allocates. Records move through
 * intrusive FIFOs (the records behind a watermark, the records ready to
 * start, each key's parked ones) by their one next link: a record is in
 * at most one of them.
 *
 * Epochs are numbered: records and watermarks of the epoch being run
 * (act) are in the gate; the watermarks still to release close epochs
 * act, act + 1, ... in a ring; records of later epochs wait in the held
 * FIFO, in arrival order, and enter the gate when their epoch's turn
 * comes. One pump runs what can run - ready records, then the next
 * watermark once the epoch's records are all done - and the entry points
 * only change state and call it, so hooks never nest.
 */
#include "state/async_exec.h"

#include <errno.h>
#include <string.h>

#include "base/alloc.h"
#include "weir/state.h"

typedef struct fifo {
    weir__aec_rec *head, *tail;
} fifo;

typedef struct slot {
    weir__aec_rec *owner; /* started (or ready); NULL: the slot is empty */
    fifo parked;          /* behind it */
    uint64_t hash;
} slot;

struct weir__aec {
    weir__aec_hooks h;
    void *arg;
    size_t cap;       /* max in flight */
    size_t in_flight; /* records held, any state */
    size_t active;    /* of them in the gate: ready, running, parked */
    size_t waiting;   /* of them running */
    slot *tab;        /* the key gate */
    size_t tcap;      /* slots */
    fifo held, ready;
    int64_t *wm; /* ring of the watermarks to release, closing epochs act... */
    size_t wcap, whead, nwm;
    uint64_t act;  /* the epoch in the gate */
    size_t open_n; /* records since the last watermark queued */
    int err;
    int pumping;
};

static void push(fifo *q, weir__aec_rec *r)
{
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
}

static weir__aec_rec *pop(fifo *q)
{
    weir__aec_rec *r = q->head;
    if (r && !(q->head = r->next))
        q->tail = NULL;
    return r;
}

weir__aec *weir__aec_new(const weir__aec_hooks *h, void *arg, size_t max_in_flight)
{
    weir__aec *c = weir__calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->h = *h;
    c->arg = arg;
    c->cap = max_in_flight ? max_in_flight : WEIR__AEC_MAX_IN_FLIGHT;
    return c;
}

/* ---- the key gate ------------------------------------------------------------------------ */
/* The slot of r's key, or the empty one where it would go. */
static slot *find(weir__aec *c, const weir__aec_rec *r)
{
    size_t mask = c->tcap - 1;
    for (size_t i = (size_t)r->hash & mask;; i = (i + 1) & mask) {
        slot *s = &c->tab[i];
        if (!s->owner || (s->hash == r->hash && s->owner->klen == r->klen &&
                          (r->klen == 0 || memcmp(s->owner->key, r->key, r->klen) == 0)))
            return s;
    }
}

/* Room for n keys at most 3/4 full. */
static int reserve(weir__aec *c, size_t n)
{
    if (n * 4 <= c->tcap * 3)
        return 0;
    size_t cap = c->tcap ? c->tcap : 16;
    while (n * 4 > cap * 3)
        cap *= 2;
    slot *nw = weir__calloc(cap, sizeof(slot)), *old = c->tab;
    if (!nw)
        return -ENOMEM;
    size_t ocap = c->tcap;
    c->tab = nw;
    c->tcap = cap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].owner) {
            size_t j = (size_t)old[i].hash & (cap - 1);
            while (nw[j].owner)
                j = (j + 1) & (cap - 1);
            nw[j] = old[i];
        }
    weir__free(old);
    return 0;
}

/* Empty slot s, moving later members of its probe run back. */
static void unslot(weir__aec *c, slot *s)
{
    size_t mask = c->tcap - 1, i = (size_t)(s - c->tab);
    for (size_t j = (i + 1) & mask; c->tab[j].owner; j = (j + 1) & mask) {
        size_t home = (size_t)c->tab[j].hash & mask;
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            c->tab[i] = c->tab[j];
            i = j;
        }
    }
    c->tab[i] = (slot){0};
}

/* r enters the gate: ready when its key is free, else parked. */
static void admit(weir__aec *c, weir__aec_rec *r)
{
    slot *s = find(c, r);
    c->active++;
    if (!s->owner) {
        *s = (slot){r, {NULL, NULL}, r->hash};
        r->state = WEIR__AEC_READY;
        push(&c->ready, r);
        return;
    }
    r->state = WEIR__AEC_PARKED;
    push(&s->parked, r);
}

/* ---- failing ----------------------------------------------------------------------------- */
static void gone(weir__aec *c, weir__aec_rec *r)
{
    c->in_flight--;
    c->h.dispose(c->arg, r);
}

/* The first error: nothing more starts or is released. Parked and held
 * records go now; ready ones as the pump reaches them (each holds its
 * key's slot); running ones as they finish. */
static void fail(weir__aec *c, int err)
{
    if (c->err)
        return;
    c->err = err;
    for (size_t i = 0; i < c->tcap; i++) {
        slot *s = &c->tab[i];
        for (weir__aec_rec *r; (r = pop(&s->parked));) {
            c->active--;
            gone(c, r);
        }
    }
    for (weir__aec_rec *r; (r = pop(&c->held));)
        gone(c, r);
    c->nwm = 0;
    c->open_n = 0;
}

/* r, which held its key, is done: the next record of the key (if any)
 * becomes ready. */
static void done(weir__aec *c, weir__aec_rec *r, int err)
{
    if (err < 0)
        fail(c, err);
    slot *s = find(c, r);
    weir__aec_rec *nx = pop(&s->parked);
    if (nx) {
        s->owner = nx;
        nx->state = WEIR__AEC_READY;
        push(&c->ready, nx);
    } else {
        unslot(c, s);
    }
    c->active--;
    gone(c, r);
}

/* ---- the pump ---------------------------------------------------------------------------- */
static void pump(weir__aec *c)
{
    if (c->pumping)
        return;
    c->pumping = 1;
    for (;;) {
        weir__aec_rec *r = pop(&c->ready);
        if (r) {
            if (c->err) { /* dropped unrun */
                done(c, r, 0);
                continue;
            }
            r->state = WEIR__AEC_RUNNING;
            int e = c->h.run(c->arg, r);
            if (e == 1)
                c->waiting++;
            else
                done(c, r, e < 0 ? e : 0);
            continue;
        }
        if (c->err || c->active || !c->nwm)
            break;
        /* Epoch act is over: its watermark leaves, the next epoch enters. */
        int64_t wm = c->wm[c->whead];
        c->whead = (c->whead + 1) & (c->wcap - 1);
        c->nwm--;
        c->act++;
        int e = c->h.release(c->arg, wm);
        if (e < 0) {
            fail(c, e);
            break;
        }
        while (c->held.head && c->held.head->epoch == c->act)
            admit(c, pop(&c->held));
    }
    c->pumping = 0;
}

/* ---- entry points ------------------------------------------------------------------------ */
int weir__aec_submit(weir__aec *c, weir__aec_rec *r)
{
    if (c->err) {
        c->in_flight++;
        gone(c, r);
        return c->err;
    }
    if (c->in_flight >= c->cap)
        return WEIR__AEC_FULL;
    if (reserve(c, c->in_flight + 1) < 0)
        return WEIR__AEC_NOMEM;
    r->hash = weir_key_hash(r->key, r->klen);
    r->epoch = c->act + c->nwm;
    c->in_flight++;
    c->open_n++;
    if (c->nwm == 0) {
        admit(c, r);
    } else {
        r->state = WEIR__AEC_HELD;
        push(&c->held, r);
    }
    pump(c);
    return c->err;
}

int weir__aec_watermark(weir__aec *c, int64_t wm)
{
    if (c->err)
        return c->err;
    if (c->nwm && c->open_n == 0) {
        /* No record since the last one queued: this one replaces it. */
        c->wm[(c->whead + c->nwm - 1) & (c->wcap - 1)] = wm;
        return 0;
    }
    if (c->nwm == c->wcap) {
        size_t cap = c->wcap ? c->wcap * 2 : 8;
        int64_t *nw = weir__malloc(cap * sizeof(*nw));
        if (!nw)
            return -ENOMEM;
        for (size_t i = 0; i < c->nwm; i++)
            nw[i] = c->wm[(c->whead + i) & (c->wcap - 1)];
        weir__free(c->wm);
        c->wm = nw;
        c->wcap = cap;
        c->whead = 0;
    }
    c->wm[(c->whead + c->nwm) & (c->wcap - 1)] = wm;
    c->nwm++;
    c->open_n = 0;
    pump(c);
    return c->err;
}

int weir__aec_finish(weir__aec *c, weir__aec_rec *r, int err)
{
    c->waiting--;
    done(c, r, err < 0 ? err : 0);
    pump(c);
    return c->err;
}

int weir__aec_idle(const weir__aec *c)
{
    return c->in_flight == 0 && c->nwm == 0;
}

size_t weir__aec_in_flight(const weir__aec *c)
{
    return c->in_flight;
}

size_t weir__aec_waiting(const weir__aec *c)
{
    return c->waiting;
}

int weir__aec_error(const weir__aec *c)
{
    return c->err;
}

void weir__aec_free(weir__aec *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->tcap; i++) {
        slot *s = &c->tab[i];
        if (!s->owner)
            continue;
        for (weir__aec_rec *r; (r = pop(&s->parked));)
            c->h.dispose(c->arg, r);
        c->h.dispose(c->arg, s->owner);
    }
    for (weir__aec_rec *r; (r = pop(&c->held));)
        c->h.dispose(c->arg, r);
    weir__free(c->tab);
    weir__free(c->wm);
    weir__free(c);
}
