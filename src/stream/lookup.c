/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lookup.c - the async lookup operator (weir_stream_lookup, weir/stream.h):
 * many HTTP lookups in flight per subtask, their answers emitted in input
 * order or as they come, never across a watermark.
 *
 * The operator brings its own controller (controller.h), which the runner
 * installs on each of its subtasks (it heads its chain: the plan never
 * chains an operator with admit / drain hooks onto another). Its admit
 * copies the record (and its key, keyed input), asks request() for the
 * HTTP request, copies that too, appends the entry to the subtask's list
 * (input order) and hands it to the workers. process() is only reached
 * through weir_ctx_process, for an entry whose answer is back: it runs
 * result() in the record's context.
 *
 * Workers are fibers on the job's runtime, in one scope per subtask,
 * started as needed - never more than the most lookups ever in flight at
 * once, so at most capacity - and kept until the subtask closes. Each takes
 * an entry from the request channel and runs it: retry (weir_retry_run)
 * around attempts that ask the breaker, then weir_http_client_do with the
 * attempt's deadline. The answered entry goes into the inbox (a channel)
 * and, unless one is on its way, one IT_CALL mail is posted to the
 * subtask's mailbox - the completion path of the async execution
 * controller (controller_async.c). No one polls: the subtask runs the
 * inbox when the mail comes up, or waits on the inbox itself when it must
 * see an answer (at capacity, in drain()).
 *
 * Order. The controller takes the watermarks: a watermark goes into the
 * list in its place among the records (two with no record between them
 * are one), and is released (weir__stream_release_wm: timers, on_watermark
 * down the chain, downstream) when it reaches the head, i.e. once every
 * record before it has been emitted. Records after it are taken in and
 * looked up meanwhile; each counts the watermarks taken in before it (its
 * epoch). Ordered, records are emitted from the head while the head is
 * answered. Unordered, an answered record is emitted at once when its
 * epoch is the current one (every watermark before it released), else
 * when the watermark before it is released. So no result crosses a
 * watermark either way. drain() (a barrier's snapshot, a processing-time
 * timer, the end of input) waits until the list is empty. At capacity
 * (records in the list, answered ones waiting for an earlier one
 * included) admit waits for answers before it takes the record:
 * backpressure.
 *
 * Checkpoints drain: a snapshot never holds a lookup in flight, and a
 * restore re-issues nothing (the source replays what came after the
 * barrier). Teardown: close() stops the request channel, cancels the
 * workers' scope and joins it - nothing of a lookup outlives the subtask -
 * then frees every entry left (answered or not). The mail is in a
 * reference-counted shell, so one still in the mailbox at teardown only
 * drops its reference; a completion after close is never posted.
 *
 * Memory per lookup in flight: one entry (216 bytes on x86-64, plus the
 * record, its key and the request's URL and body), the response once it
 * is back, and the worker fiber's stack (64 KiB) while it runs; workers
 * stay at the most lookups in flight so far.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "stream/controller.h"
#include "stream/stream_int.h"
#include "weir/http.h"
#include "weir/resil.h"
#include "weir/sync.h"

/* The operator's configuration: lives as long as the job. */
typedef struct lk_cfg {
    weir_lookup_def def; /* def.headers: hs */
    void *arg;
    weir_lookup_header hs[WEIR_LOOKUP_MAX_HEADERS]; /* strings after the struct */
} lk_cfg;

typedef struct lookup lookup;

/* One record's lookup. */
typedef struct lk_ent {
    struct lk_ent *prev, *next; /* the subtask's list, input order */
    lookup *lk;
    int is_wm;      /* a watermark's place in the list, not a record */
    int64_t wm;     /* is_wm: the watermark */
    uint64_t epoch; /* a record: the watermarks taken in before it */
    weir_rec rec;   /* the copy */
    const void *key;
    size_t klen;
    int done; /* answered (in the inbox or after) */
    /* The request (copies). */
    const char *method, *url, *ctype;
    const void *body;
    size_t body_len;
    /* The answer (the worker's until it is in the inbox). */
    int err, attempts;
    weir_http_client_resp resp;
    _Alignas(8) uint8_t bytes[]; /* record, key, method, url, content type, body */
} lk_ent;

struct lookup {
    const lk_cfg *cfg;
    weir_ctx *ctx;
    subtask *st;
    weir_http_client *client;
    weir_breaker *breaker;
    weir_scope *scope;
    weir_chan *reqs;     /* lk_ent *, to the workers */
    weir_chan *inbox;    /* lk_ent *, answered */
    lk_ent *head, *tail; /* records and watermarks, input order */
    size_t n;            /* records in the list */
    uint64_t epoch_in;   /* watermarks taken in */
    uint64_t epoch_out;  /* watermarks released */
    int capacity;
    int workers;
    lk_ent *cur; /* the entry whose result() runs now */
    /* Every request's header fields, their env:// values read at open;
     * read-only after it. The Content-Type of an entry comes last. */
    weir_http_header *hdr;
    int nhdr;
    char *hvals;
    weir__mail mail;
    pthread_mutex_t lock; /* closed, posted, lost */
    int closed, posted, lost;
    _Atomic long refs;
};

static void unref(lookup *lk)
{
    if (atomic_fetch_sub_explicit(&lk->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_mutex_destroy(&lk->lock);
    if (lk->inbox)
        weir_chan_unref(lk->inbox);
    weir__free(lk);
}

static void ent_free(lk_ent *e)
{
    weir_http_client_resp_free(&e->resp);
    weir__free(e);
}

/* ---- the workers (any thread of the runtime) ----------------------------------------------- */
static int64_t attempt(void *arg, int n, int64_t deadline)
{
    (void)deadline;
    lk_ent *e = arg;
    lookup *lk = e->lk;
    e->attempts = n;
    if (lk->breaker && weir_breaker_allow(lk->breaker) < 0)
        return -EAGAIN;
    weir_http_client_resp_free(&e->resp);
    weir_http_header h[WEIR_LOOKUP_MAX_HEADERS + 1];
    int nh = lk->nhdr;
    if (nh)
        memcpy(h, lk->hdr, (size_t)nh * sizeof(*h));
    if (e->ctype)
        h[nh++] = (weir_http_header){{"Content-Type", 12}, {e->ctype, strlen(e->ctype)}};
    weir_http_client_req rq = {.method = e->method,
                               .url = e->url,
                               .headers = nh ? h : NULL,
                               .nheaders = (size_t)nh,
                               .body = e->body,
                               .body_len = e->body_len,
                               .deadline = weir_time_after_ms(lk->cfg->def.timeout_ms)};
    int r = weir_http_client_do(lk->client, &rq, &e->resp);
    if (r == -ECANCELED)
        return r; /* no news of the service */
    int bad = r < 0 || e->resp.status >= 500 || e->resp.status == 429;
    if (lk->breaker) {
        if (bad)
            weir_breaker_failure(lk->breaker);
        else
            weir_breaker_success(lk->breaker);
    }
    return r < 0 ? r : bad ? -EREMOTEIO : 0;
}

/* An answered entry goes back to the subtask. */
static void complete(lookup *lk, lk_ent *e)
{
    pthread_mutex_lock(&lk->lock);
    if (weir_chan_try_send(lk->inbox, &e) < 0) {
        /* No memory to queue it: its record would wait forever. The
         * subtask fails instead (a closed inbox ends its waits). */
        lk->lost = 1;
        weir_chan_close(lk->inbox);
    }
    if (!lk->closed && !lk->posted) {
        atomic_fetch_add_explicit(&lk->refs, 1, memory_order_relaxed);
        if (weir__subtask_post(lk->st, (item){.kind = IT_CALL, .mail = &lk->mail}) == 0)
            lk->posted = 1;
        else
            atomic_fetch_sub_explicit(&lk->refs, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&lk->lock);
}

static intptr_t worker(void *arg)
{
    lookup *lk = arg;
    lk_ent *e;
    while (weir_chan_recv(lk->reqs, &e, WEIR_FOREVER) == 0) {
        int64_t r = weir_retry_run(attempt, e, &lk->cfg->def.retry, WEIR_FOREVER);
        e->err = r < 0 ? (int)r : 0;
        complete(lk, e);
    }
    return 0;
}

/* ---- the subtask's side ------------------------------------------------------------------ */
static void unlink_ent(lookup *lk, lk_ent *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        lk->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        lk->tail = e->prev;
    if (!e->is_wm)
        lk->n--;
}

static void append(lookup *lk, lk_ent *e)
{
    e->prev = lk->tail;
    e->next = NULL;
    if (lk->tail)
        lk->tail->next = e;
    else
        lk->head = e;
    lk->tail = e;
    if (!e->is_wm)
        lk->n++;
}

/* e's result() (through process(), in its record's context); e goes. */
static int emit_ent(lookup *lk, lk_ent *e)
{
    lk->cur = e;
    int r = weir_ctx_process(lk->ctx, e->key, e->klen, &e->rec);
    lk->cur = NULL;
    unlink_ent(lk, e);
    ent_free(e);
    return r < 0 ? r : 0;
}

/* Emit what may go now: answered records at the head (both orders); a
 * watermark at the head is released, and unordered, the answered records
 * of the epoch it opens follow at once. */
static int pump(lookup *lk)
{
    int r = 0;
    while (!r && lk->head) {
        lk_ent *h = lk->head;
        if (!h->is_wm) {
            if (!h->done)
                return 0;
            r = emit_ent(lk, h);
            continue;
        }
        unlink_ent(lk, h);
        lk->epoch_out++;
        r = weir__stream_release_wm(lk->st, h->wm);
        weir__free(h);
        for (lk_ent *e = lk->head, *next; !r && !lk->cfg->def.ordered && e && !e->is_wm; e = next) {
            next = e->next;
            if (e->done)
                r = emit_ent(lk, e);
        }
    }
    return r;
}

/* An answer came: unordered, it goes at once if no watermark waits before
 * it; then whatever may follow. */
static int answered(lookup *lk, lk_ent *e)
{
    e->done = 1;
    int r = 0;
    if (!lk->cfg->def.ordered && e->epoch == lk->epoch_out)
        r = emit_ent(lk, e);
    return r ? r : pump(lk);
}

static int check_lost(lookup *lk)
{
    pthread_mutex_lock(&lk->lock);
    int lost = lk->lost;
    pthread_mutex_unlock(&lk->lock);
    if (!lost)
        return 0;
    weir__stream_fail(
        lk->st->r->j, -ENOMEM,
        "operator \"%s\" (subtask %d): the answer of a lookup was lost: out of memory",
        lk->ctx->op->name, lk->st->index);
    return -ENOMEM;
}

/* Wait for one answer and handle it. */
static int answer_one(lookup *lk)
{
    lk_ent *e;
    int r = weir_chan_recv(lk->inbox, &e, WEIR_FOREVER);
    if (r == -EPIPE)
        return check_lost(lk) ? -ENOMEM : r;
    return r < 0 ? r : answered(lk, e);
}

static int run_inbox(subtask *st, weir__mail *m)
{
    (void)st;
    lookup *lk = (lookup *)((char *)m - offsetof(lookup, mail));
    pthread_mutex_lock(&lk->lock);
    lk->posted = 0;
    pthread_mutex_unlock(&lk->lock);
    lk_ent *e;
    int r = 0;
    while (!r && weir_chan_try_recv(lk->inbox, &e) == 0)
        r = answered(lk, e);
    if (!r)
        r = check_lost(lk);
    unref(lk);
    return r;
}

static void drop_inbox(weir__mail *m)
{
    unref((lookup *)((char *)m - offsetof(lookup, mail)));
}

static char *put_str(uint8_t **p, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = memcpy(*p, s, n);
    *p += n;
    return d;
}

static int lk_admit(weir_ctx *ctx, void *state, const weir_rec *in)
{
    lookup *lk = state;
    const weir_lookup_def *d = &lk->cfg->def;
    int r;
    /* At capacity: answers first (ordered: until the head's go), before
     * request() - nothing runs between it and the copies. */
    while (lk->n >= (size_t)lk->capacity)
        if ((r = answer_one(lk)) < 0)
            return r;
    weir_lookup_req rq; /* not zeroed whole: buf is scratch */
    rq.method = rq.url = rq.content_type = NULL;
    rq.body = NULL;
    rq.body_len = 0;
    rq.buf[0] = '\0';
    r = d->request(ctx, in, &rq, lk->cfg->arg);
    if (r < 0)
        return weir__op_error(ctx, r, "request");
    if (!rq.url || (!rq.body && rq.body_len))
        return weir_fail(ctx, -EINVAL, "request() gave %s",
                         rq.url ? "a NULL body with a length" : "no URL");
    size_t klen = 0;
    const void *key = weir_ctx_key(ctx, &klen);
    size_t ml = rq.method ? strlen(rq.method) + 1 : 0, ul = strlen(rq.url) + 1,
           cl = rq.content_type ? strlen(rq.content_type) + 1 : 0;
    lk_ent *e = weir__calloc(1, sizeof(*e) + in->len + klen + ml + ul + cl + rq.body_len);
    if (!e)
        return weir__op_error(ctx, -ENOMEM, "admit");
    uint8_t *p = e->bytes;
    e->lk = lk;
    e->rec = (weir_rec){memcpy(p, in->data, in->len), in->len, in->ts};
    p += in->len;
    e->key = key ? memcpy(p, key, klen) : NULL;
    e->klen = klen;
    p += klen;
    e->method = put_str(&p, rq.method);
    e->url = put_str(&p, rq.url);
    e->ctype = put_str(&p, rq.content_type);
    e->body = rq.body ? memcpy(p, rq.body, rq.body_len) : NULL;
    e->body_len = rq.body_len;
    /* A worker for each lookup in flight (they stay). */
    if (lk->n + 1 > (size_t)lk->workers) {
        if (!weir_scope_spawn(lk->scope, worker, lk, &(weir_spawn_opts){.name = "lookup"})) {
            ent_free(e);
            return weir__op_error(ctx, errno ? -errno : -ENOMEM, "spawning a lookup worker");
        }
        lk->workers++;
    }
    if ((r = weir_chan_try_send(lk->reqs, &e)) < 0) {
        ent_free(e);
        return weir__op_error(ctx, r, "admit");
    }
    e->epoch = lk->epoch_in;
    append(lk, e);
    return 1;
}

/* Every record emitted and every watermark released. */
static int lk_drain(weir_ctx *ctx, void *state)
{
    (void)ctx;
    lookup *lk = state;
    int r = pump(lk);
    while (!r && lk->n)
        r = answer_one(lk);
    return r;
}

/* ---- the operator's controller (controller.h) ---------------------------------------------
 * It takes the watermarks: one waits in the list, in its place among the
 * records, until every record before it has been emitted, while records
 * after it are taken in and looked up already. */
static int ctl_admit(weir__controller *c, weir_ctx *ctx, weir__rctx *rc, const weir_rec *r)
{
    (void)c;
    weir__rctx *prev = ctx->rc;
    if (rc)
        ctx->rc = rc; /* request() sees the record's key */
    int e = lk_admit(ctx, ctx->state, r);
    ctx->rc = prev;
    return e < 0 ? e : 0;
}

static int ctl_drain(weir__controller *c, weir_ctx *ctx)
{
    (void)c;
    int e = lk_drain(ctx, ctx->state);
    return e < 0 ? weir__op_error(ctx, e, "drain") : 0;
}

static int ctl_watermark(weir__controller *c, weir_ctx *ctx, int64_t wm)
{
    (void)c;
    lookup *lk = ctx->state;
    if (!lk->head) /* nothing before it */
        return weir__stream_release_wm(lk->st, wm);
    if (lk->tail->is_wm) { /* no record since the last one: one watermark */
        lk->tail->wm = wm;
        return 0;
    }
    lk_ent *m = weir__calloc(1, sizeof(*m));
    if (!m)
        return weir__op_error(ctx, -ENOMEM, "on_watermark");
    m->is_wm = 1;
    m->wm = wm;
    append(lk, m);
    lk->epoch_in++;
    return 0;
}

static const weir__controller_ops lookup_ctl_ops = {
    .name = "lookup", .admit = ctl_admit, .drain = ctl_drain, .watermark = ctl_watermark};
static weir__controller lookup_ctl = {&lookup_ctl_ops};

/* Only for an answered entry (emit_ent, through weir_ctx_process). */
static int lk_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    lookup *lk = state;
    lk_ent *e = lk->cur;
    if (!e)
        return -EINVAL;
    const weir_lookup_def *d = &lk->cfg->def;
    if (e->err && d->fail_on_error)
        return weir_fail(ctx, e->err, "lookup %s %s failed after %d attempt%s: %s%s%s",
                         e->method ? e->method : "GET", e->url, e->attempts,
                         e->attempts == 1 ? "" : "s",
                         e->err == -EAGAIN ? "circuit breaker open" : weir_strerror(e->err),
                         e->resp.status ? ", last status " : "",
                         e->resp.status ? weir_http_status_text(e->resp.status) : "");
    weir_lookup_resp resp = {.err = e->err,
                             .status = e->resp.status,
                             .body = e->resp.body ? e->resp.body : "",
                             .body_len = e->resp.body ? e->resp.body_len : 0,
                             .attempts = e->attempts};
    return d->result(ctx, in, &resp, lk->cfg->arg);
}

static void lk_close(void *state)
{
    lookup *lk = state;
    pthread_mutex_lock(&lk->lock);
    lk->closed = 1;
    pthread_mutex_unlock(&lk->lock);
    if (lk->reqs)
        weir_chan_close(lk->reqs);
    if (lk->scope) { /* no lookup outlives the subtask */
        weir_scope_cancel(lk->scope);
        weir_scope_join(lk->scope, NULL);
        weir_scope_free(lk->scope);
    }
    for (lk_ent *e = lk->head, *next; e; e = next) {
        next = e->next;
        ent_free(e);
    }
    lk->head = lk->tail = NULL;
    lk->n = 0;
    if (lk->reqs)
        weir_chan_unref(lk->reqs);
    if (lk->client)
        weir_http_client_free(lk->client);
    if (lk->breaker)
        weir_breaker_free(lk->breaker);
    weir__free(lk->hdr);
    weir__free(lk->hvals);
    unref(lk); /* the inbox's pointers were the list's */
}

/* The header fields, env:// values read from this process's environment
 * (a worker's, where the operator runs). */
static int open_headers(weir_ctx *ctx, lookup *lk)
{
    const weir_lookup_def *d = &lk->cfg->def;
    if (!d->nheaders)
        return 0;
    lk->hdr = weir__calloc((size_t)d->nheaders, sizeof(*lk->hdr));
    lk->hvals = weir__malloc((size_t)d->nheaders * (WEIR_LOOKUP_BUF + 1));
    if (!lk->hdr || !lk->hvals)
        return -ENOMEM;
    for (int i = 0; i < d->nheaders; i++) {
        char *v = lk->hvals + (size_t)i * (WEIR_LOOKUP_BUF + 1), why[320];
        ssize_t n = weir_env_ref(d->headers[i].value, v, WEIR_LOOKUP_BUF + 1, why, sizeof(why));
        if (n >= 0 && (memchr(v, '\r', (size_t)n) || memchr(v, '\n', (size_t)n))) {
            n = -EINVAL;
            snprintf(why, sizeof(why), "the value holds CR or LF");
        }
        if (n < 0)
            return weir_fail(ctx, (int)n, "lookup \"%s\": header %s: %s", ctx->op->name,
                             d->headers[i].name, why);
        lk->hdr[i] =
            (weir_http_header){{d->headers[i].name, strlen(d->headers[i].name)}, {v, (size_t)n}};
    }
    lk->nhdr = d->nheaders;
    return 0;
}

/* Whether name is a token (RFC 9110) the operator may set. */
static int header_ok(const char *name)
{
    static const char *const own[] = {"content-type", "content-length", "host", "connection",
                                      "transfer-encoding"};
    if (!name || !*name || strlen(name) > 64)
        return 0;
    for (const char *p = name; *p; p++)
        if (!strchr("!#$%&'*+-.^_`|~", *p) && !(*p >= '0' && *p <= '9') &&
            !(*p >= 'a' && *p <= 'z') && !(*p >= 'A' && *p <= 'Z'))
            return 0;
    for (size_t i = 0; i < sizeof(own) / sizeof(*own); i++)
        if (strcasecmp(name, own[i]) == 0)
            return 0;
    return 1;
}

/* Why the definition's headers are refused, or NULL. */
static const char *headers_bad(const weir_lookup_def *d)
{
    if (d->nheaders < 0 || d->nheaders > WEIR_LOOKUP_MAX_HEADERS || (d->nheaders && !d->headers))
        return "needs 0..16 headers";
    for (int i = 0; i < d->nheaders; i++) {
        const char *v = d->headers[i].value;
        if (!header_ok(d->headers[i].name))
            return "has a header name that is not a token, or one the client writes itself "
                   "(Content-Type, Content-Length, Host, Connection, Transfer-Encoding)";
        if (!v || strchr(v, '\r') || strchr(v, '\n') || strlen(v) > WEIR_LOOKUP_BUF)
            return "has a header value that is NULL, too long or holds CR or LF";
        char tmp[8];
        char why[160];
        if (strncmp(v, "env://", 6) == 0 &&
            weir_env_ref(v, tmp, sizeof(tmp), why, sizeof(why)) == -EINVAL &&
            strstr(why, "does not name"))
            return "has a header env:// reference that does not name an environment variable";
    }
    return NULL;
}

static int lk_open(weir_ctx *ctx, void *arg, void **state)
{
    const lk_cfg *cfg = arg;
    lookup *lk = weir__calloc(1, sizeof(*lk));
    if (!lk)
        return -ENOMEM;
    if (pthread_mutex_init(&lk->lock, NULL) != 0) {
        weir__free(lk);
        return -ENOMEM;
    }
    atomic_init(&lk->refs, 1);
    lk->cfg = cfg;
    lk->ctx = ctx;
    lk->st = ctx->st;
    lk->capacity = cfg->def.capacity;
    lk->mail = (weir__mail){run_inbox, drop_inbox};
    *state = lk;
    weir_http_client_opts co = {.max_conns = lk->capacity};
    if (!(lk->inbox = weir_chan_new(sizeof(lk_ent *), WEIR_CHAN_UNBOUNDED)) ||
        !(lk->reqs = weir_chan_new(sizeof(lk_ent *), WEIR_CHAN_UNBOUNDED)) ||
        !(lk->scope = weir_scope_new(WEIR_SCOPE_COLLECT_ALL, WEIR_FOREVER)) ||
        !(lk->client = weir_http_client_new(&co)))
        return -ENOMEM;
    if (!cfg->def.no_breaker && !(lk->breaker = weir_breaker_new(&cfg->def.breaker)))
        return errno ? -errno : -ENOMEM;
    return open_headers(ctx, lk);
}

weir_stream *weir_stream_lookup(weir_stream *s, const char *name, const weir_lookup_def *def,
                                void *arg)
{
    if (!s)
        return NULL;
    const char *bad = !def || !def->request || !def->result
                          ? "needs a request and a result function"
                      : def->capacity < 0   ? "needs a capacity >= 0"
                      : def->timeout_ms < 0 ? "needs a timeout_ms >= 0"
                                            : NULL;
    if (!bad)
        bad = headers_bad(def);
    if (!bad)
        bad = weir_retry_policy_check(&def->retry);
    if (!bad && !def->no_breaker)
        bad = weir_breaker_opts_check(&def->breaker);
    if (bad) {
        weir__stream_fail(s->j, -EINVAL, "lookup \"%s\": %s", name ? name : "?", bad);
        return NULL;
    }
    size_t strs = 0;
    for (int i = 0; i < def->nheaders; i++)
        strs += strlen(def->headers[i].name) + strlen(def->headers[i].value) + 2;
    lk_cfg *cfg = weir__malloc(sizeof(*cfg) + strs);
    if (!cfg) {
        weir__stream_fail(s->j, -ENOMEM, "out of memory");
        return NULL;
    }
    *cfg = (lk_cfg){.def = *def, .arg = arg};
    char *p = (char *)(cfg + 1);
    for (int i = 0; i < def->nheaders; i++) {
        size_t nl = strlen(def->headers[i].name) + 1, vl = strlen(def->headers[i].value) + 1;
        cfg->hs[i].name = memcpy(p, def->headers[i].name, nl);
        cfg->hs[i].value = memcpy(p + nl, def->headers[i].value, vl);
        p += nl + vl;
    }
    cfg->def.headers = cfg->hs;
    if (!cfg->def.capacity)
        cfg->def.capacity = WEIR_LOOKUP_CAPACITY;
    if (!cfg->def.timeout_ms)
        cfg->def.timeout_ms = WEIR_LOOKUP_TIMEOUT_MS;
    weir_op_def d = {.open = lk_open,
                     .process = lk_process,
                     .close = lk_close,
                     .admit = lk_admit,
                     .drain = lk_drain};
    weir_stream *out = weir_stream_process(s, name, &d, cfg);
    if (!out) {
        weir__free(cfg);
        return NULL;
    }
    out->owned = cfg; /* lives as long as the job */
    out->from->ctl = &lookup_ctl;
    return out;
}
