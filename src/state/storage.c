/* SPDX-License-Identifier: Apache-2.0 */
/*
 * storage.c - the storage interface (storage.h): the registry of
 * implementations by URI scheme, name checks, and the requests that run an
 * implementation's blocking methods on the runtime's blocking pool.
 *
 * The wait is shielded (weir__blocking_start_shielded): a cancel of the
 * waiting task does not cut it short. A storage call is work that must
 * finish once started - a put the subtask began is durable or failed
 * before the subtask goes on, so nothing writes into a checkpoint
 * directory after its run has cleaned it up, and the cleanup itself runs
 * in a task that may have been cancelled - exactly as the synchronous
 * writes these calls replace. It costs a cancelled subtask at most the
 * time of the call it is in.
 *
 * A request is shared by two holders, counted: the pool job (dropped when
 * the job has run, or when the pool discards it unrun: a runtime freed
 * with the job still queued) and the waiter (dropped by
 * weir__storage_end). The request holds a reference to its store, so the
 * store outlives every job in flight.
 */
#include "state/storage.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "rt/rt_int.h"

/* The implementations, by scheme. A static table rather than a mutable
 * registry: adding a store is adding a line here. */
static const weir__storage_ops *const impls[] = {&weir__storage_dir_ops, &weir__storage_mem_ops,
                                                 &weir__storage_latency_ops,
                                                 &weir__storage_redis_ops, &weir__storage_s3_ops};

void weir__names_free(weir__names *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n; i++)
        weir__free(n->v[i]);
    weir__free(n->v);
    n->v = NULL;
    n->n = 0;
}

int weir__storage_open(const char *uri, weir__storage **out)
{
    if (!uri || !*uri || !out)
        return -EINVAL;
    const char *colon = strstr(uri, "://");
    const weir__storage_ops *ops = &weir__storage_dir_ops;
    const char *where = uri;
    if (colon) {
        size_t n = (size_t)(colon - uri);
        ops = NULL;
        for (size_t i = 0; i < sizeof(impls) / sizeof(impls[0]); i++)
            if (strlen(impls[i]->scheme) == n && memcmp(impls[i]->scheme, uri, n) == 0)
                ops = impls[i];
        if (!ops)
            return -EPROTONOSUPPORT;
        where = colon + 3;
        if (!*where)
            return -EINVAL;
    }
    weir__storage *s = NULL;
    int e = ops->open(where, &s);
    if (e)
        return e;
    s->ops = ops;
    atomic_init(&s->refs, 1);
    *out = s;
    return 0;
}

static void storage_unref(weir__storage *s)
{
    /* acq_rel: the last holder sees every write the others made through
     * the store before it frees it. */
    if (s && atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
        s->ops->free(s);
}

void weir__storage_close(weir__storage *s)
{
    storage_unref(s);
}

int weir__storage_check_name(const char *name, int prefix_ok)
{
    if (!name)
        return -EINVAL;
    size_t n = strlen(name);
    if (n > WEIR__STORAGE_NAME_MAX)
        return -ENAMETOOLONG;
    if (n == 0)
        return prefix_ok ? 0 : -EINVAL;
    if (name[0] == '/')
        return -EINVAL;
    /* Component by component; a prefix may end in '/' (a last, empty
     * component) and, for list, in a partial component ("COMPLETED-"). */
    const char *p = name;
    for (;;) {
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0)
            return end || !prefix_ok ? -EINVAL : 0;
        if (p[0] == '.')
            return -EINVAL; /* ".", "..", and the implementations' own files */
        if (!end)
            return 0;
        p = end + 1;
        if (!*p)
            return prefix_ok ? 0 : -EINVAL;
    }
}

/* ---- requests ------------------------------------------------------------------------------ */
enum { RQ_PUT, RQ_GET, RQ_LIST, RQ_DEL };

struct weir__storage_req {
    weir_op op;
    _Atomic int refs; /* the pool job's and the waiter's */
    weir__storage *s;
    int kind;
    weir__blob blob; /* put */
    size_t max;      /* get */
    uint8_t *buf;    /* get: the bytes, until the waiter takes them */
    size_t len;
    weir__names names; /* list */
    char name[];
};

static void blob_release(weir__blob *b)
{
    if (b->release)
        b->release(b->owner);
    b->release = NULL;
}

static void req_unref(weir__storage_req *rq)
{
    /* acq_rel: the waiter's read of the outputs happens before the job's
     * free and the job's writes before the waiter's read (the op's
     * completion also orders the latter). */
    if (atomic_fetch_sub_explicit(&rq->refs, 1, memory_order_acq_rel) != 1)
        return;
    blob_release(&rq->blob);
    weir__free(rq->buf);
    weir__names_free(&rq->names);
    storage_unref(rq->s);
    weir__free(rq);
}

/* The call itself: blocking, on a pool thread (or inline off the runtime). */
static int req_exec(weir__storage_req *rq)
{
    weir__storage *s = rq->s;
    int e;
    switch (rq->kind) {
    case RQ_PUT: {
        const void *buf = rq->blob.buf;
        size_t len = rq->blob.len;
        e = rq->blob.produce ? rq->blob.produce(rq->blob.owner, &buf, &len) : 0;
        if (!e)
            e = s->ops->put(s, rq->name, buf, len);
        blob_release(&rq->blob); /* done with the bytes: free a big snapshot now */
        break;
    }
    case RQ_GET:
        e = s->ops->get(s, rq->name, rq->max, &rq->buf, &rq->len);
        break;
    case RQ_LIST:
        e = s->ops->list(s, rq->name, &rq->names);
        break;
    default:
        e = s->ops->del(s, rq->name);
        break;
    }
    return e;
}

static intptr_t req_job(void *arg)
{
    weir__storage_req *rq = arg;
    int e = req_exec(rq);
    req_unref(rq); /* the pool's share; the waiter still holds its own if it waits */
    return e;
}

static void req_discard(void *arg)
{
    req_unref(arg);
}

static int req_new(weir__storage *s, int kind, const char *name, const weir__blob *blob, size_t max,
                   weir__storage_req **out)
{
    int e = s ? weir__storage_check_name(name, kind == RQ_LIST || kind == RQ_DEL) : -EINVAL;
    if (!e && kind == RQ_DEL && !*name)
        e = -EINVAL; /* deleting the whole store is not a thing */
    if (!e && kind == RQ_PUT && (!blob || (!blob->produce && !blob->buf && blob->len)))
        e = -EINVAL;
    size_t n = e ? 0 : strlen(name);
    weir__storage_req *rq = e ? NULL : weir__calloc(1, sizeof(*rq) + n + 1);
    if (!rq) {
        if (blob && blob->release)
            blob->release(blob->owner);
        return e ? e : -ENOMEM;
    }
    memcpy(rq->name, name, n + 1);
    rq->s = s;
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed); /* a holder adds one */
    rq->kind = kind;
    rq->max = max;
    if (blob)
        rq->blob = *blob;
    atomic_init(&rq->refs, 2);
    *out = rq;
    return 0;
}

static int req_start(weir__storage *s, int kind, const char *name, const weir__blob *blob,
                     size_t max, weir__storage_req **out)
{
    if (!weir_task_current()) {
        if (blob && blob->release)
            blob->release(blob->owner);
        return -EINVAL;
    }
    weir__storage_req *rq;
    int e = req_new(s, kind, name, blob, max, &rq);
    if (e)
        return e;
    /* A refusal once queued (a pool that cannot start a thread) calls
     * req_discard (the job's share) and leaves the op done with the error,
     * which weir__storage_end reports; only a refusal before the op began
     * returns one here. */
    if ((e = weir__blocking_start_shielded(&rq->op, req_job, rq, req_discard)) < 0) {
        req_unref(rq);
        return e;
    }
    *out = rq;
    return 0;
}

int weir__storage_put_start(weir__storage *s, const char *name, const weir__blob *blob,
                            weir__storage_req **out)
{
    return req_start(s, RQ_PUT, name, blob, 0, out);
}

int weir__storage_get_start(weir__storage *s, const char *name, size_t max, weir__storage_req **out)
{
    return req_start(s, RQ_GET, name, NULL, max, out);
}

int weir__storage_list_start(weir__storage *s, const char *prefix, weir__storage_req **out)
{
    return req_start(s, RQ_LIST, prefix, NULL, 0, out);
}

int weir__storage_delete_start(weir__storage *s, const char *name, weir__storage_req **out)
{
    return req_start(s, RQ_DEL, name, NULL, 0, out);
}

weir_op *weir__storage_req_op(weir__storage_req *rq)
{
    return &rq->op;
}

int weir__storage_end(weir__storage_req *rq, int64_t op_result, uint8_t **buf, size_t *len,
                      weir__names *names)
{
    int e = (int)op_result;
    /* Outputs only from a call that ran to success (the op is done: the
     * job wrote them before completing it). */
    if (!e && rq->kind == RQ_GET && buf && len) {
        *buf = rq->buf;
        *len = rq->len;
        rq->buf = NULL;
    }
    if (!e && rq->kind == RQ_LIST && names) {
        *names = rq->names;
        rq->names = (weir__names){0};
    }
    req_unref(rq);
    return e;
}

/* Awaited from a fiber, or inline off the runtime. */
static int call(weir__storage *s, int kind, const char *name, const weir__blob *blob, size_t max,
                uint8_t **buf, size_t *len, weir__names *names)
{
    weir__storage_req *rq;
    if (!weir_task_current()) {
        int e = req_new(s, kind, name, blob, max, &rq);
        if (e)
            return e;
        int r = req_exec(rq);
        req_unref(rq); /* as the job would */
        return weir__storage_end(rq, r, buf, len, names);
    }
    if (weir__task_current()->kind != WEIR__TASK_FIBER) {
        /* A stackless task cannot park in weir_op_wait, and a started
         * request must be waited for: refuse before starting one. */
        if (blob && blob->release)
            blob->release(blob->owner);
        return -EINVAL;
    }
    int e = req_start(s, kind, name, blob, max, &rq);
    if (e)
        return e;
    return weir__storage_end(rq, weir_op_wait(&rq->op), buf, len, names);
}

static void free_copy(void *p)
{
    weir__free(p);
}

int weir__storage_put(weir__storage *s, const char *name, const void *buf, size_t len)
{
    if (!buf && len)
        return -EINVAL;
    void *copy = weir__malloc(len ? len : 1);
    if (!copy)
        return -ENOMEM;
    if (len)
        memcpy(copy, buf, len);
    weir__blob b = {.buf = copy, .len = len, .release = free_copy, .owner = copy};
    return call(s, RQ_PUT, name, &b, 0, NULL, NULL, NULL);
}

int weir__storage_put_blob(weir__storage *s, const char *name, const weir__blob *blob)
{
    return call(s, RQ_PUT, name, blob, 0, NULL, NULL, NULL);
}

int weir__storage_get(weir__storage *s, const char *name, size_t max, uint8_t **buf, size_t *len)
{
    if (!buf || !len)
        return -EINVAL;
    return call(s, RQ_GET, name, NULL, max, buf, len, NULL);
}

int weir__storage_list(weir__storage *s, const char *prefix, weir__names *names)
{
    if (!names)
        return -EINVAL;
    *names = (weir__names){0};
    return call(s, RQ_LIST, prefix, NULL, 0, NULL, NULL, names);
}

int weir__storage_delete(weir__storage *s, const char *name)
{
    return call(s, RQ_DEL, name, NULL, 0, NULL, NULL, NULL);
}

/* ---- direct calls ------------------------------------------------------------------------- */
int weir__storage_put_now(weir__storage *s, const char *name, const void *buf, size_t len)
{
    int e = s && (buf || !len) ? weir__storage_check_name(name, 0) : -EINVAL;
    return e ? e : s->ops->put(s, name, buf, len);
}

int weir__storage_range_now(weir__storage *s, const char *name, uint64_t off, size_t len,
                            uint8_t *buf, size_t *got)
{
    int e = s && got && (buf || !len) ? weir__storage_check_name(name, 0) : -EINVAL;
    if (e)
        return e;
    *got = 0;
    if (s->ops->get_range)
        return s->ops->get_range(s, name, off, len, buf, got);
    uint8_t *all;
    size_t n;
    if ((e = s->ops->get(s, name, WEIR__STORAGE_RANGE_WHOLE_MAX, &all, &n)) != 0)
        return e;
    if (off < n) {
        *got = n - off < len ? (size_t)(n - off) : len;
        memcpy(buf, all + off, *got);
    }
    weir__free(all);
    return 0;
}

int weir__storage_delete_now(weir__storage *s, const char *name)
{
    int e = s ? weir__storage_check_name(name, 1) : -EINVAL;
    if (!e && !*name)
        e = -EINVAL;
    return e ? e : s->ops->del(s, name);
}
