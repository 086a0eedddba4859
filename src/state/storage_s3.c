/* SPDX-License-Identifier: Apache-2.0 */
/*
 * storage_s3.c - a store in an S3 bucket (storage.h):
 * "s3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&region=R][&timeout_ms=N]...",
 * blob "a/b" being the object PREFIX/a/b, spoken to over the S3 REST API
 * (PUT, GET with ranges, HEAD, DELETE, ListObjectsV2) with path-style
 * addressing, http://HOST:PORT/BUCKET/KEY, and header-based AWS Signature
 * Version 4.
 *
 * Threads. The methods are blocking calls made on foreign threads (the
 * runtime's blocking pool, the remote backend's I/O threads, a tool's
 * main), and weir's HTTP client needs fibers; so the store owns a private
 * one-thread runtime and two HTTP clients (one for object bodies, capped
 * at max_object_bytes, one for listings and heads, capped at 16 MiB, so a
 * hostile listing cannot make the store hold a blob's worth of memory),
 * each with up to 16 keep-alive connections. A call prepares and signs its
 * request on the caller's thread (hashing a large put there, not on the
 * runtime's single thread), spawns a fiber on the store's runtime that
 * sends it, and joins the fiber, which blocks the caller. Every call is
 * idempotent, so the fiber retries transport errors and 5xx answers with
 * exponential backoff and jitter (weir/resil.h's weir_retry_run) inside
 * one deadline, timeout_ms (30 s) from the call's start; a server that is
 * restarted mid-job is thus ridden over, and one that stays down fails
 * the call with its transport error within the deadline. The payload's
 * hash is computed once, on the caller's thread; each attempt signs again
 * with the time it is sent at (a long retry stays inside the 15 minutes of
 * clock skew S3 allows). Other options: attempts (8 in all), max_keys (a
 * listing's page: 1000; small in tests, to see pages followed).
 *
 * Limits. HTTP only (weir's client has no TLS transport yet). A key must
 * be expressible in XML 1.0 to be listed (no encoding-type=url: s3rver
 * ignores it). A ranged read of an empty object is answered 416 by S3,
 * which reads as 0 bytes; s3rver answers it 206 with a body it never sends
 * (nothing here reads ranges of empty blobs).
 *
 * Errors: 404 is -ENOENT, 403 -EACCES, 400 -EINVAL, a 5xx still there
 * after the retries -EIO, another unexpected status -EIO, a body over a
 * cap -EFBIG (a get past its max) or -EMSGSIZE (a listing), a response that
 * breaks the protocol (a listing that is not XML, a key outside the
 * prefix, a bad Content-Range) -EBADMSG, and a transport failure its own
 * errno. Unexpected answers are logged (component "state.s3") with the
 * method, bucket, key and status; nothing logged or returned ever holds a
 * credential.
 *
 * Semantics, as storage.h asks. put is one PUT (an S3 PUT is atomic:
 * readers see the old object or the whole new one; durable once the
 * server has answered 200, as far as the server's own durability goes).
 * get is one GET; the body is read whole, so max is enforced on what
 * arrived (a declared Content-Length past the client's cap fails before
 * any body byte is read). get_range is a GET with a Range; 206 is the
 * range, 200 (a server that ignored the range) is sliced, 416 means the
 * range starts at or past the end (0 bytes; a missing object is 404
 * first). list is ListObjectsV2 with delimiter '/', following
 * continuation tokens, the names relative to PREFIX, sorted in byte order
 * and deduplicated; keys that are not valid blob names are skipped, as the
 * directory store skips unnameable files. delete of a blob is HEAD, then
 * DELETE (S3 answers a DELETE of a missing key 204, and callers such as
 * the remote backend's pruning count what was really deleted: -ENOENT
 * when missing, as every store); the two are not atomic, so a concurrent
 * delete of the same blob may both return 0. delete of "p/" lists every
 * key under p/ (no delimiter) and deletes each: -ENOENT when there was
 * none, else the first error, every key tried.
 *
 * Listings are untrusted XML, parsed with expat: a DOCTYPE (entity
 * declarations) is refused outright; a key is at most the prefix plus
 * WEIR__STORAGE_NAME_MAX bytes; a page at most 16 MiB and 10000 entries;
 * a listing at most 1 << 20 names and 1 << 16 pages.
 *
 * Credentials. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and (optional)
 * AWS_SESSION_TOKEN from the environment at open, or the variables that
 * access_key=env://VAR, secret_key=env://VAR, session_token=env://VAR
 * name. A URI is logged and shown, so a secret written into one literally
 * is refused (-EINVAL) with a message saying so; no credentials at all is
 * -EACCES at open.
 */
#include "state/storage_s3.h"

#include <errno.h>
#include <expat.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/sha256.h"
#include "state/storage.h"
#include "weir/http.h"
#include "weir/resil.h"
#include "weir/rt.h"

#define LOG_C "state.s3"

#define DEFAULT_TIMEOUT_MS 30000
#define DEFAULT_ATTEMPTS   8
#define DEFAULT_MAX_OBJECT ((size_t)1 << 30)
#define META_MAX_RESPONSE  ((size_t)16 << 20) /* listings, heads, errors */
#define PAGE_MAX_ENTRIES   10000
#define LIST_MAX_NAMES     ((size_t)1 << 20)
#define LIST_MAX_PAGES     (1 << 16)
#define TOKEN_MAX          4096 /* a continuation token */
#define FIBER_STACK        (128 * 1024)

typedef struct s3_store {
    weir__storage base;
    char bucket[64];
    char *prefix; /* "" or "a/b/" */
    char endpoint[256];
    char region[64];
    char *akid, *secret, *token;
    int64_t timeout_ms;
    int attempts;
    int max_keys;
    size_t max_object;
    weir_rt *rt;
    weir_http_client *data, *meta;
} s3_store;

/* ---- signing ------------------------------------------------------------------------------- */
long weir__s3_uri_encode(const char *s, size_t n, int keep_slash, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/');
        if (o + (keep ? 1 : 3) >= cap)
            return -ENOSPC;
        if (keep) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    if (o >= cap)
        return -ENOSPC;
    out[o] = '\0';
    return (long)o;
}

static int hmac(const void *key, size_t klen, const void *msg, size_t mlen, uint8_t out[32])
{
    unsigned int n = 32;
    return HMAC(EVP_sha256(), key, (int)klen, msg, mlen, out, &n) && n == 32 ? 0 : -ENOMEM;
}

static void hex32(const uint8_t h[32], char out[65])
{
    weir__sha256_hex(h, out);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const char *const *)a)[0], ((const char *const *)b)[0]);
}

int weir__s3_sign(const weir__s3_sig_in *in, char *out, size_t cap)
{
    if (!in || !out || !in->method || !in->path || !in->query || !in->host || !in->amz_date ||
        strlen(in->amz_date) != 16 || !in->payload_hash || !in->region || !in->access_key ||
        !in->secret_key || in->nextra > 8)
        return -EINVAL;
    /* The signed headers, (name, value) pairs sorted by name. */
    const char *h[13][2];
    size_t nh = 0;
    h[nh][0] = "host", h[nh++][1] = in->host;
    h[nh][0] = "x-amz-content-sha256", h[nh++][1] = in->payload_hash;
    h[nh][0] = "x-amz-date", h[nh++][1] = in->amz_date;
    if (in->token && *in->token)
        h[nh][0] = "x-amz-security-token", h[nh++][1] = in->token;
    for (size_t i = 0; i < in->nextra; i++)
        h[nh][0] = in->extra_names[i], h[nh++][1] = in->extra_values[i];
    qsort(h, nh, sizeof(h[0]), by_name);

    weir__buf signed_h = {0}, creq = {0};
    for (size_t i = 0; i < nh; i++) {
        if (i)
            weir__buf_put(&signed_h, ";", 1);
        weir__buf_put(&signed_h, h[i][0], strlen(h[i][0]));
    }
    weir__buf_put(&signed_h, "", 1); /* NUL */
    weir__buf_put(&creq, in->method, strlen(in->method));
    weir__buf_put(&creq, "\n", 1);
    weir__buf_put(&creq, in->path, strlen(in->path));
    weir__buf_put(&creq, "\n", 1);
    weir__buf_put(&creq, in->query, strlen(in->query));
    weir__buf_put(&creq, "\n", 1);
    for (size_t i = 0; i < nh; i++) {
        weir__buf_put(&creq, h[i][0], strlen(h[i][0]));
        weir__buf_put(&creq, ":", 1);
        weir__buf_put(&creq, h[i][1], strlen(h[i][1]));
        weir__buf_put(&creq, "\n", 1);
    }
    weir__buf_put(&creq, "\n", 1);
    if (!signed_h.err)
        weir__buf_put(&creq, signed_h.p, signed_h.len - 1);
    weir__buf_put(&creq, "\n", 1);
    weir__buf_put(&creq, in->payload_hash, strlen(in->payload_hash));
    int e = signed_h.err ? signed_h.err : creq.err;
    uint8_t d[32];
    char creq_hex[65], sig_hex[65], day[9], scope[128], sts[256];
    if (!e)
        e = weir__sha256(creq.p, creq.len, d);
    weir__buf_free(&creq);
    memcpy(day, in->amz_date, 8);
    day[8] = '\0';
    int n = snprintf(scope, sizeof(scope), "%s/%s/s3/aws4_request", day, in->region);
    if (!e && (n < 0 || (size_t)n >= sizeof(scope)))
        e = -EINVAL;
    if (!e) {
        hex32(d, creq_hex);
        n = snprintf(sts, sizeof(sts), "AWS4-HMAC-SHA256\n%s\n%s\n%s", in->amz_date, scope,
                     creq_hex);
        if (n < 0 || (size_t)n >= sizeof(sts))
            e = -EINVAL;
    }
    /* The signing key: HMAC chain from "AWS4" + secret over day, region,
     * service and the terminator. */
    size_t sl = strlen(in->secret_key);
    char *k0 = e ? NULL : weir__malloc(sl + 5);
    if (!e && !k0)
        e = -ENOMEM;
    uint8_t k[32];
    if (!e) {
        memcpy(k0, "AWS4", 4);
        memcpy(k0 + 4, in->secret_key, sl);
        e = hmac(k0, sl + 4, day, 8, k);
        OPENSSL_cleanse(k0, sl + 4);
        weir__free(k0);
    }
    if (!e)
        e = hmac(k, 32, in->region, strlen(in->region), k);
    if (!e)
        e = hmac(k, 32, "s3", 2, k);
    if (!e)
        e = hmac(k, 32, "aws4_request", 12, k);
    if (!e)
        e = hmac(k, 32, sts, strlen(sts), d);
    OPENSSL_cleanse(k, sizeof(k));
    if (!e) {
        hex32(d, sig_hex);
        n = snprintf(out, cap, "AWS4-HMAC-SHA256 Credential=%s/%s,SignedHeaders=%s,Signature=%s",
                     in->access_key, scope, (const char *)signed_h.p, sig_hex);
        if (n < 0 || (size_t)n >= cap)
            e = -ENOSPC;
    }
    weir__buf_free(&signed_h);
    return e;
}

/* ---- requests -------------------------------------------------------------------------- */
typedef struct s3_req {
    s3_store *s;
    weir_http_client *http;
    const char *method;
    const char *what; /* for messages: the name or prefix */
    char *url;
    char *path, *query; /* as signed: one allocation, query after path's NUL */
    weir_http_header hdr[6];
    size_t nhdr;
    char auth[1024], date[17], sha[65], range[64];
    const void *body;
    size_t body_len;
    int64_t deadline;
    int last_err;
    weir_http_client_resp resp;
} s3_req;

static void req_free(s3_req *r)
{
    weir_http_client_resp_free(&r->resp);
    weir__free(r->url);
    weir__free(r->path);
    r->url = r->path = r->query = NULL;
}

static void hdr(s3_req *r, const char *name, const char *value)
{
    r->hdr[r->nhdr].name = (weir_http_str){name, strlen(name)};
    r->hdr[r->nhdr++].value = (weir_http_str){value, strlen(value)};
}

/* Sign r as of now (each attempt signs again: a request retried for long
 * stays inside the server's allowed clock skew). */
static int req_sign(s3_req *r)
{
    const s3_store *s = r->s;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(r->date, sizeof(r->date), "%Y%m%dT%H%M%SZ", &tm);
    const char *rn[1] = {"range"}, *rv[1] = {r->range};
    weir__s3_sig_in in = {
        .method = r->method,
        .path = r->path,
        .query = r->query,
        .host = s->endpoint,
        .amz_date = r->date,
        .payload_hash = r->sha,
        .region = s->region,
        .access_key = s->akid,
        .secret_key = s->secret,
        .token = s->token,
        .extra_names = rn,
        .extra_values = rv,
        .nextra = *r->range ? 1 : 0,
    };
    int e = weir__s3_sign(&in, r->auth, sizeof(r->auth));
    r->hdr[0].value = (weir_http_str){r->auth, e ? 0 : strlen(r->auth)};
    r->hdr[2].value = (weir_http_str){r->date, strlen(r->date)};
    return e;
}

/* Build and sign method path?query (both encoded; the query sorted) with
 * an optional body and Range. */
static int req_init(s3_req *r, s3_store *s, weir_http_client *http, const char *method,
                    const char *path, const char *query, const void *body, size_t len,
                    const char *range, const char *what)
{
    memset(r, 0, sizeof(*r));
    r->s = s;
    r->http = http;
    r->method = method;
    r->what = what;
    r->body = body;
    r->body_len = len;
    r->deadline = weir_time_after_ms(s->timeout_ms);
    size_t pl = strlen(path), ql = strlen(query);
    size_t ul = strlen(s->endpoint) + pl + ql + 16;
    r->url = weir__malloc(ul);
    r->path = weir__malloc(pl + ql + 2);
    if (!r->url || !r->path)
        return -ENOMEM;
    snprintf(r->url, ul, "http://%s%s%s%s", s->endpoint, path, *query ? "?" : "", query);
    memcpy(r->path, path, pl + 1);
    r->query = r->path + pl + 1;
    memcpy(r->query, query, ql + 1);
    uint8_t d[32];
    int e = weir__sha256(body, len, d);
    if (e)
        return e;
    hex32(d, r->sha);
    if (range)
        snprintf(r->range, sizeof(r->range), "%s", range);
    hdr(r, "Authorization", r->auth); /* hdr[0]: set by req_sign */
    hdr(r, "x-amz-content-sha256", r->sha);
    hdr(r, "x-amz-date", r->date); /* hdr[2]: req_sign too */
    if (s->token && *s->token)
        hdr(r, "x-amz-security-token", s->token);
    if (range)
        hdr(r, "Range", r->range);
    return req_sign(r);
}

/* Transport errors and 5xx (-EIO here) are worth another attempt. */
static int retryable(int err, int attempt, void *arg)
{
    (void)attempt;
    (void)arg;
    switch (err) {
    case -EIO:
    case -ECONNREFUSED:
    case -ECONNRESET:
    case -ECONNABORTED:
    case -EPIPE:
    case -ENOTCONN:
    case -EHOSTUNREACH:
    case -ENETUNREACH:
    case -ENETDOWN:
    case -EAGAIN:
    case -ETIMEDOUT:
        return 1;
    default:
        return 0;
    }
}

static int64_t attempt(void *arg, int n, int64_t deadline)
{
    s3_req *r = arg;
    weir_http_client_resp_free(&r->resp);
    int e = n > 1 ? req_sign(r) : 0;
    if (e)
        return e;
    weir_http_client_req q = {
        .method = r->method,
        .url = r->url,
        .headers = r->hdr,
        .nheaders = r->nhdr,
        .body = r->body_len ? r->body : NULL,
        .body_len = r->body_len,
        .deadline = deadline,
    };
    e = weir_http_client_do(r->http, &q, &r->resp);
    if (e == 0 && r->resp.status >= 500)
        e = -EIO;
    r->last_err = e;
    return e < 0 ? e : r->resp.status;
}

static intptr_t req_fiber(void *arg)
{
    s3_req *r = arg;
    weir_retry_policy p = {
        .max_attempts = r->s->attempts,
        .initial_delay_ns = 100 * WEIR_MSEC,
        .max_delay_ns = 2 * WEIR_SEC,
        .should_retry = retryable,
    };
    int64_t v = weir_retry_run(attempt, r, &p, r->deadline);
    /* Out of time before the next attempt: report what the last one met. */
    if (v == -ETIMEDOUT && r->last_err < 0)
        v = r->last_err;
    return (intptr_t)v;
}

/* The S3 error code of an error body (<Code>X</Code>), for messages. */
static void error_code(const weir_http_client_resp *resp, char *out, size_t cap)
{
    out[0] = '\0';
    const char *b = resp->body ? strstr(resp->body, "<Code>") : NULL;
    if (!b)
        return;
    b += 6;
    size_t n = 0;
    while (n + 1 < cap && ((b[n] >= 'A' && b[n] <= 'Z') || (b[n] >= 'a' && b[n] <= 'z')))
        n++;
    memcpy(out, b, n);
    out[n] = '\0';
}

/* Send r on the store's runtime and wait: the status, or -errno. */
static int req_run(s3_req *r)
{
    weir_spawn_opts o = {.name = "s3", .stack_size = FIBER_STACK, .rt = r->s->rt};
    weir_task *t = weir_task_spawn(req_fiber, r, &o);
    if (!t)
        return -errno;
    intptr_t v = 0;
    int e = weir_task_join(t, &v, WEIR_FOREVER);
    if (e < 0)
        return e;
    if (v == -EIO && r->resp.status >= 500) {
        char code[48];
        error_code(&r->resp, code, sizeof(code));
        weir__log(WEIR__LOG_WARN, LOG_C, "%s %s/%s%s: HTTP %d%s%s%s, attempts spent", r->method,
                  r->s->bucket, r->s->prefix, r->what, r->resp.status, *code ? " (" : "", code,
                  *code ? ")" : "");
    } else if (v < 0) {
        int why = r->resp.error && *r->resp.error;
        weir__log(WEIR__LOG_WARN, LOG_C, "%s %s/%s%s: %s%s%s", r->method, r->s->bucket,
                  r->s->prefix, r->what, weir_strerror((int)v), why ? ": " : "",
                  why ? r->resp.error : "");
    }
    return (int)v;
}

/* The errno of an unexpected status, logged (404 is the ordinary -ENOENT). */
static int status_err(s3_req *r, int status)
{
    if (status == 404)
        return -ENOENT;
    int e = status == 403 ? -EACCES : status == 400 ? -EINVAL : -EIO;
    char code[48];
    error_code(&r->resp, code, sizeof(code));
    weir__log(WEIR__LOG_WARN, LOG_C, "%s %s/%s%s: HTTP %d%s%s%s", r->method, r->s->bucket,
              r->s->prefix, r->what, status, *code ? " (" : "", code, *code ? ")" : "");
    return e;
}

/* "/BUCKET/PREFIXname", encoded (weir__malloc'd), or NULL. */
static char *obj_path(const s3_store *s, const char *name)
{
    size_t pl = strlen(s->prefix), nl = strlen(name);
    char *key = weir__malloc(pl + nl + 1);
    size_t cap = strlen(s->bucket) + 3 * (pl + nl) + 4;
    char *out = weir__malloc(cap);
    if (!key || !out) {
        weir__free(key);
        weir__free(out);
        return NULL;
    }
    memcpy(key, s->prefix, pl);
    memcpy(key + pl, name, nl + 1);
    int n = snprintf(out, cap, "/%s/", s->bucket);
    weir__s3_uri_encode(key, pl + nl, 1, out + n, cap - (size_t)n);
    weir__free(key);
    return out;
}

/* One object call: method on name's path. The status, or -errno. */
static int obj_call(s3_store *s, s3_req *r, weir_http_client *http, const char *method,
                    const char *name, const void *body, size_t len, const char *range)
{
    char *path = obj_path(s, name);
    if (!path)
        return -ENOMEM;
    int e = req_init(r, s, http, method, path, "", body, len, range, name);
    weir__free(path);
    return e ? e : req_run(r);
}

/* ---- the methods -------------------------------------------------------------------------- */
static int s3_put(weir__storage *st, const char *name, const void *buf, size_t len)
{
    s3_store *s = (s3_store *)st;
    s3_req r;
    int v = obj_call(s, &r, s->data, "PUT", name, buf, len, NULL);
    int e = v < 0 ? v : v == 200 || v == 204 ? 0 : status_err(&r, v);
    if (v == 404)
        weir__log(WEIR__LOG_WARN, LOG_C, "PUT %s/%s%s: no bucket %s", s->bucket, s->prefix, name,
                  s->bucket);
    req_free(&r);
    return e;
}

static int s3_get(weir__storage *st, const char *name, size_t max, uint8_t **buf, size_t *len)
{
    s3_store *s = (s3_store *)st;
    s3_req r;
    int v = obj_call(s, &r, s->data, "GET", name, NULL, 0, NULL);
    int e = v == -EMSGSIZE ? -EFBIG : v < 0 ? v : v == 200 ? 0 : status_err(&r, v);
    if (!e && r.resp.body_len > max)
        e = -EFBIG;
    if (!e) {
        size_t n = r.resp.body_len;
        if (!(*buf = weir__malloc(n ? n : 1))) {
            e = -ENOMEM;
        } else {
            memcpy(*buf, r.resp.body, n);
            *len = n;
        }
    }
    req_free(&r);
    return e;
}

/* "bytes A-B/T" of a 206: A must be off, B - A + 1 the body's length. */
static int check_content_range(const weir_http_client_resp *resp, uint64_t off)
{
    const char *cr = weir_http_client_resp_header(resp, "Content-Range");
    uint64_t a, b;
    if (!cr || sscanf(cr, "bytes %" SCNu64 "-%" SCNu64, &a, &b) != 2 || a != off || b < a ||
        b - a + 1 != resp->body_len)
        return -EBADMSG;
    return 0;
}

static int s3_get_range(weir__storage *st, const char *name, uint64_t off, size_t len, uint8_t *buf,
                        size_t *got)
{
    s3_store *s = (s3_store *)st;
    s3_req r;
    *got = 0;
    if (len == 0 || off > UINT64_MAX - len) {
        /* Nothing to read: only whether the blob is there. */
        int v = obj_call(s, &r, s->meta, "HEAD", name, NULL, 0, NULL);
        int e = v < 0 ? v : v == 200 ? 0 : status_err(&r, v);
        req_free(&r);
        return e;
    }
    char range[64];
    snprintf(range, sizeof(range), "bytes=%" PRIu64 "-%" PRIu64, off, off + len - 1);
    int v = obj_call(s, &r, s->data, "GET", name, NULL, 0, range);
    int e = v < 0 ? v : 0;
    if (v == 206) {
        if ((e = check_content_range(&r.resp, off)) == 0 && r.resp.body_len > len)
            e = -EBADMSG;
        if (!e) {
            memcpy(buf, r.resp.body, r.resp.body_len);
            *got = r.resp.body_len;
        }
    } else if (v == 200) { /* the range was ignored: the whole blob */
        if (off < r.resp.body_len) {
            size_t n = r.resp.body_len - off < len ? (size_t)(r.resp.body_len - off) : len;
            memcpy(buf, r.resp.body + off, n);
            *got = n;
        }
    } else if (v == 416) {
        /* At or past the end of an object that is there. */
    } else if (v >= 0) {
        e = status_err(&r, v);
    }
    if (e == -EBADMSG)
        weir__log(WEIR__LOG_WARN, LOG_C, "GET %s/%s%s: a 206 that is not the range asked for",
                  s->bucket, s->prefix, name);
    req_free(&r);
    return e;
}

/* ---- listing ------------------------------------------------------------------------------- */
enum { X_NONE, X_KEY, X_PREFIX, X_TRUNC, X_TOKEN };

typedef struct lister {
    XML_Parser xp;
    int depth, in; /* depth of the element stack; what text is being read */
    int root_ok;
    int err;
    weir__buf text;
    size_t text_max;
    size_t entries; /* on this page */
    int truncated;
    char *token; /* the next continuation token */
    /* the results */
    const char *full; /* the prefix asked for, store prefix included */
    size_t strip;     /* bytes of the store prefix */
    int recursive;
    weir__names *out;
    size_t cap;
} lister;

static void x_fail(lister *l, int e)
{
    if (!l->err)
        l->err = e;
    XML_StopParser(l->xp, XML_FALSE);
}

static void add_name(lister *l, const char *key, size_t n, int dir)
{
    if (n < strlen(l->full) || memcmp(key, l->full, strlen(l->full)) != 0) {
        x_fail(l, -EBADMSG); /* the server answered for another prefix */
        return;
    }
    const char *rel = key + l->strip;
    size_t rl = n - l->strip;
    if (!rl || rl > WEIR__STORAGE_NAME_MAX || memchr(rel, '\0', rl))
        return; /* not a blob name of this store */
    if (!l->recursive) {
        char tmp[WEIR__STORAGE_NAME_MAX + 1];
        memcpy(tmp, rel, rl);
        tmp[rl] = '\0';
        if (weir__storage_check_name(tmp, dir) != 0 || (dir && rel[rl - 1] != '/'))
            return;
    }
    if (l->out->n >= LIST_MAX_NAMES) {
        x_fail(l, -E2BIG);
        return;
    }
    if (l->out->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        char **v = weir__realloc(l->out->v, nc * sizeof(*v));
        if (!v) {
            x_fail(l, -ENOMEM);
            return;
        }
        l->out->v = v;
        l->cap = nc;
    }
    char *c = weir__malloc(rl + 1);
    if (!c) {
        x_fail(l, -ENOMEM);
        return;
    }
    memcpy(c, rel, rl);
    c[rl] = '\0';
    l->out->v[l->out->n++] = c;
}

static void XMLCALL x_start(void *ud, const XML_Char *name, const XML_Char **attrs)
{
    (void)attrs;
    lister *l = ud;
    l->depth++;
    l->in = X_NONE;
    if (l->depth == 1) {
        if (strcmp(name, "ListBucketResult") != 0)
            x_fail(l, -EBADMSG);
        l->root_ok = 1;
    } else if (l->depth == 2 && strcmp(name, "IsTruncated") == 0) {
        l->in = X_TRUNC;
    } else if (l->depth == 2 && strcmp(name, "NextContinuationToken") == 0) {
        l->in = X_TOKEN;
    } else if (l->depth == 2 &&
               (strcmp(name, "Contents") == 0 || strcmp(name, "CommonPrefixes") == 0)) {
        if (++l->entries > PAGE_MAX_ENTRIES)
            x_fail(l, -EBADMSG);
    } else if (l->depth == 3 && strcmp(name, "Key") == 0) {
        l->in = X_KEY;
    } else if (l->depth == 3 && strcmp(name, "Prefix") == 0) {
        l->in = X_PREFIX;
    }
    l->text.len = 0;
}

static void XMLCALL x_text(void *ud, const XML_Char *s, int len)
{
    lister *l = ud;
    if (l->in == X_NONE || len <= 0)
        return;
    if (l->text.len + (size_t)len > l->text_max) {
        x_fail(l, -EBADMSG); /* a key (or token) longer than any of ours */
        return;
    }
    weir__buf_put(&l->text, s, (size_t)len);
    if (l->text.err)
        x_fail(l, l->text.err);
}

static void XMLCALL x_end(void *ud, const XML_Char *name)
{
    (void)name;
    lister *l = ud;
    const char *t = (const char *)l->text.p;
    size_t n = l->text.len;
    if (l->in == X_TRUNC) {
        l->truncated = n == 4 && memcmp(t, "true", 4) == 0;
    } else if (l->in == X_TOKEN && n) {
        weir__free(l->token);
        if ((l->token = weir__malloc(n + 1))) {
            memcpy(l->token, t, n);
            l->token[n] = '\0';
        } else {
            x_fail(l, -ENOMEM);
        }
    } else if (l->in == X_KEY && l->depth == 3) {
        add_name(l, t, n, 0);
    } else if (l->in == X_PREFIX && l->depth == 3) {
        add_name(l, t, n, 1);
    }
    l->in = X_NONE;
    l->text.len = 0;
    l->depth--;
}

/* A DOCTYPE may declare entities (billion laughs): no listing has one. */
static void XMLCALL x_doctype(void *ud, const XML_Char *name, const XML_Char *sysid,
                              const XML_Char *pubid, int has_internal)
{
    (void)name;
    (void)sysid;
    (void)pubid;
    (void)has_internal;
    x_fail(ud, -EBADMSG);
}

static int parse_page(lister *l, const char *body, size_t len)
{
    if (!(l->xp = XML_ParserCreate("UTF-8")))
        return -ENOMEM;
    XML_SetUserData(l->xp, l);
    XML_SetElementHandler(l->xp, x_start, x_end);
    XML_SetCharacterDataHandler(l->xp, x_text);
    XML_SetStartDoctypeDeclHandler(l->xp, x_doctype);
    l->depth = 0;
    l->in = X_NONE;
    l->root_ok = 0;
    l->entries = 0;
    l->truncated = 0;
    weir__free(l->token);
    l->token = NULL;
    if (XML_Parse(l->xp, body, (int)len, XML_TRUE) != XML_STATUS_OK && !l->err)
        l->err = -EBADMSG;
    XML_ParserFree(l->xp);
    l->xp = NULL;
    if (!l->err && !l->root_ok)
        l->err = -EBADMSG;
    return l->err;
}

/* Append a query parameter name=value (value encoded). */
static void qparam(weir__buf *q, const char *name, const char *value)
{
    size_t vl = strlen(value), cap = 3 * vl + 1;
    char *enc = weir__malloc(cap);
    if (!enc) {
        weir__buf_put(q, "", 0);
        q->err = -ENOMEM;
        return;
    }
    weir__s3_uri_encode(value, vl, 0, enc, cap);
    if (q->len)
        weir__buf_put(q, "&", 1);
    weir__buf_put(q, name, strlen(name));
    weir__buf_put(q, "=", 1);
    weir__buf_put(q, enc, strlen(enc));
    weir__free(enc);
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names under prefix: one level (delimiter '/') or every key
 * (recursive), relative to the store's prefix, sorted and unique. */
static int list_names(s3_store *s, const char *prefix, int recursive, weir__names *out)
{
    size_t pl = strlen(s->prefix), ql = strlen(prefix);
    char *full = weir__malloc(pl + ql + 1);
    if (!full)
        return -ENOMEM;
    memcpy(full, s->prefix, pl);
    memcpy(full + pl, prefix, ql + 1);
    *out = (weir__names){0};
    lister l = {.full = full, .strip = pl, .recursive = recursive, .out = out};
    l.text_max = pl + WEIR__STORAGE_NAME_MAX + TOKEN_MAX;
    char path[80], mk[16];
    snprintf(path, sizeof(path), "/%s", s->bucket);
    snprintf(mk, sizeof(mk), "%d", s->max_keys);
    int e = 0;
    char *token = NULL;
    for (int page = 0; !e; page++) {
        if (page >= LIST_MAX_PAGES) {
            e = -E2BIG;
            break;
        }
        /* Parameters in sorted order, as the signature wants them. */
        weir__buf q = {0};
        if (token)
            qparam(&q, "continuation-token", token);
        if (!recursive)
            qparam(&q, "delimiter", "/");
        qparam(&q, "list-type", "2");
        qparam(&q, "max-keys", mk);
        qparam(&q, "prefix", full);
        weir__buf_put(&q, "", 1);
        if ((e = q.err) != 0) {
            weir__buf_free(&q);
            break;
        }
        s3_req r;
        e = req_init(&r, s, s->meta, "GET", path, (const char *)q.p, NULL, 0, NULL, prefix);
        weir__buf_free(&q);
        int v = e ? e : req_run(&r);
        if (v < 0)
            e = v;
        else if (v != 200)
            e = v == 404 ? -ENOENT : status_err(&r, v);
        else
            e = parse_page(&l, r.resp.body, r.resp.body_len);
        if (e == -EBADMSG)
            weir__log(WEIR__LOG_WARN, LOG_C, "list %s/%s: a malformed listing", s->bucket, full);
        req_free(&r);
        if (e || !l.truncated)
            break;
        if (!l.token || !*l.token) {
            e = -EBADMSG; /* truncated, with nowhere to go on from */
            weir__log(WEIR__LOG_WARN, LOG_C, "list %s/%s: truncated without a token", s->bucket,
                      full);
            break;
        }
        if (token && strcmp(token, l.token) == 0) {
            e = -EBADMSG; /* the same page again: it would never end */
            weir__log(WEIR__LOG_WARN, LOG_C, "list %s/%s: the same continuation token again",
                      s->bucket, full);
            break;
        }
        weir__free(token);
        token = l.token;
        l.token = NULL;
    }
    weir__free(token);
    weir__free(l.token);
    weir__buf_free(&l.text);
    weir__free(full);
    if (e == -ENOENT) { /* NoSuchBucket */
        weir__log(WEIR__LOG_WARN, LOG_C, "list: no bucket %s", s->bucket);
        e = -ENOENT;
    }
    if (e) {
        weir__names_free(out);
        return e;
    }
    if (out->n > 1) {
        qsort(out->v, out->n, sizeof(*out->v), name_cmp);
        size_t k = 1;
        for (size_t i = 1; i < out->n; i++) {
            if (strcmp(out->v[i], out->v[k - 1]) == 0)
                weir__free(out->v[i]);
            else
                out->v[k++] = out->v[i];
        }
        out->n = k;
    }
    return 0;
}

static int s3_list(weir__storage *st, const char *prefix, weir__names *out)
{
    return list_names((s3_store *)st, prefix, 0, out);
}

/* DELETE of one key: 0 whether or not it was there (S3 says 204 both ways). */
static int delete_key(s3_store *s, const char *name)
{
    s3_req r;
    int v = obj_call(s, &r, s->meta, "DELETE", name, NULL, 0, NULL);
    int e = v < 0 ? v : v == 204 || v == 200 || v == 404 ? 0 : status_err(&r, v);
    req_free(&r);
    return e;
}

static int s3_del(weir__storage *st, const char *name)
{
    s3_store *s = (s3_store *)st;
    size_t n = strlen(name);
    if (name[n - 1] != '/') {
        s3_req r;
        int v = obj_call(s, &r, s->meta, "HEAD", name, NULL, 0, NULL);
        int e = v < 0 ? v : v == 200 ? 0 : status_err(&r, v);
        req_free(&r);
        return e ? e : delete_key(s, name);
    }
    weir__names all;
    int e = list_names(s, name, 1, &all);
    if (e)
        return e;
    if (!all.n)
        e = -ENOENT;
    for (size_t i = 0; i < all.n; i++) {
        int d = delete_key(s, all.v[i]);
        if (d && !e)
            e = d;
    }
    weir__names_free(&all);
    return e;
}

/* ---- opening -------------------------------------------------------------------------------- */
static void s3_free(weir__storage *st)
{
    s3_store *s = (s3_store *)st;
    if (s->rt)
        weir_rt_free(s->rt); /* every call joined its fiber: nothing is in flight */
    if (s->data)
        weir_http_client_free(s->data);
    if (s->meta)
        weir_http_client_free(s->meta);
    weir__free(s->prefix);
    if (s->secret) {
        OPENSSL_cleanse(s->secret, strlen(s->secret));
        weir__free(s->secret);
    }
    if (s->token) {
        OPENSSL_cleanse(s->token, strlen(s->token));
        weir__free(s->token);
    }
    weir__free(s->akid);
    weir__free(s);
}

static int all_of(const char *s, size_t n, const char *set)
{
    for (size_t i = 0; i < n; i++)
        if (!s[i] || !strchr(set, s[i]))
            return 0;
    return 1;
}

/* A credential from the environment: var (from "env://VAR", or the
 * default name). Never echoed. */
static int cred(const char *opt, const char *ref, const char *dflt, int required, char **out)
{
    const char *var = dflt;
    if (ref) {
        if (strncmp(ref, "env://", 6) != 0 || !ref[6] ||
            !all_of(ref + 6, strlen(ref + 6),
                    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")) {
            weir__log(WEIR__LOG_ERROR, LOG_C,
                      "%s= must name an environment variable (%s=env://VARIABLE): a credential "
                      "written into a URI would be logged with it",
                      opt, opt);
            return -EINVAL;
        }
        var = ref + 6;
        required = 1;
    }
    const char *v = getenv(var);
    if (!v || !*v) {
        if (!required)
            return 0;
        weir__log(WEIR__LOG_ERROR, LOG_C, "no credentials: $%s is not set", var);
        return -EACCES;
    }
    for (const char *p = v; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            weir__log(WEIR__LOG_ERROR, LOG_C, "$%s holds a control character", var);
            return -EINVAL;
        }
    return (*out = weir__strdup(v)) ? 0 : -ENOMEM;
}

static int num(const char *v, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return -EINVAL;
    *out = x;
    return 0;
}

static int parse(s3_store *s, const char *where, char *refs[3])
{
    const char *q = strchr(where, '?');
    size_t wl = q ? (size_t)(q - where) : strlen(where);
    const char *slash = memchr(where, '/', wl);
    size_t bl = slash ? (size_t)(slash - where) : wl;
    if (bl < 3 || bl > 63 || !all_of(where, bl, "abcdefghijklmnopqrstuvwxyz0123456789.-")) {
        weir__log(WEIR__LOG_ERROR, LOG_C, "s3://BUCKET/PREFIX: a bucket is 3 to 63 of a-z 0-9 . -");
        return -EINVAL;
    }
    memcpy(s->bucket, where, bl);
    s->bucket[bl] = '\0';
    const char *p = slash ? slash + 1 : where + wl;
    size_t pl = (size_t)(where + wl - p);
    while (pl && p[pl - 1] == '/')
        pl--;
    if (!(s->prefix = weir__malloc(pl + 2)))
        return -ENOMEM;
    memcpy(s->prefix, p, pl);
    s->prefix[pl] = '\0';
    if (pl && (pl > WEIR__STORAGE_NAME_MAX || weir__storage_check_name(s->prefix, 0) != 0)) {
        weir__log(WEIR__LOG_ERROR, LOG_C, "s3://BUCKET/PREFIX: the prefix is not a valid name");
        return -EINVAL;
    }
    if (pl) {
        s->prefix[pl] = '/';
        s->prefix[pl + 1] = '\0';
    }
    snprintf(s->region, sizeof(s->region), "us-east-1");
    s->timeout_ms = DEFAULT_TIMEOUT_MS;
    s->attempts = DEFAULT_ATTEMPTS;
    s->max_keys = 1000;
    s->max_object = DEFAULT_MAX_OBJECT;
    while (q && *q) {
        q++;
        const char *amp = strchr(q, '&');
        size_t n = amp ? (size_t)(amp - q) : strlen(q);
        char opt[512];
        if (n >= sizeof(opt))
            return -EINVAL;
        memcpy(opt, q, n);
        opt[n] = '\0';
        q = amp;
        char *v = strchr(opt, '=');
        if (!v || !v[1]) {
            weir__log(WEIR__LOG_ERROR, LOG_C, "s3:// option without a value");
            return -EINVAL;
        }
        *v++ = '\0';
        long long x;
        int e = 0;
        if (strcmp(opt, "endpoint") == 0) {
            if (strlen(v) >= sizeof(s->endpoint) || !strchr(v, ':') ||
                !all_of(v, strlen(v),
                        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789.-:[]"))
                e = -EINVAL;
            else
                snprintf(s->endpoint, sizeof(s->endpoint), "%s", v);
        } else if (strcmp(opt, "region") == 0) {
            if (strlen(v) >= sizeof(s->region) ||
                !all_of(v, strlen(v), "abcdefghijklmnopqrstuvwxyz0123456789-"))
                e = -EINVAL;
            else
                snprintf(s->region, sizeof(s->region), "%s", v);
        } else if (strcmp(opt, "timeout_ms") == 0) {
            if (!(e = num(v, 1, 3600000, &x)))
                s->timeout_ms = x;
        } else if (strcmp(opt, "attempts") == 0) {
            if (!(e = num(v, 1, 100, &x)))
                s->attempts = (int)x;
        } else if (strcmp(opt, "max_keys") == 0) {
            if (!(e = num(v, 1, 1000, &x)))
                s->max_keys = (int)x;
        } else if (strcmp(opt, "max_object_bytes") == 0) {
            if (!(e = num(v, 1, (long long)1 << 40, &x)))
                s->max_object = (size_t)x;
        } else if (strcmp(opt, "access_key") == 0 || strcmp(opt, "secret_key") == 0 ||
                   strcmp(opt, "session_token") == 0) {
            int i = opt[0] == 'a' ? 0 : opt[1] == 'e' && opt[2] == 'c' ? 1 : 2;
            weir__free(refs[i]);
            if (!(refs[i] = weir__strdup(v)))
                return -ENOMEM;
        } else {
            weir__log(WEIR__LOG_ERROR, LOG_C, "s3:// has no option %s", opt);
            return -EINVAL;
        }
        if (e) {
            weir__log(WEIR__LOG_ERROR, LOG_C, "s3:// option %s: a bad value", opt);
            return e;
        }
    }
    if (!*s->endpoint) {
        weir__log(WEIR__LOG_ERROR, LOG_C, "s3:// needs endpoint=HOST:PORT");
        return -EINVAL;
    }
    return 0;
}

static int s3_open(const char *where, weir__storage **out)
{
    s3_store *s = weir__calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    char *refs[3] = {NULL, NULL, NULL};
    int e = parse(s, where, refs);
    /* Refuse a literal secret before looking at anything else. */
    if (!e)
        e = cred("access_key", refs[0], "AWS_ACCESS_KEY_ID", 1, &s->akid);
    if (!e)
        e = cred("secret_key", refs[1], "AWS_SECRET_ACCESS_KEY", 1, &s->secret);
    if (!e)
        e = cred("session_token", refs[2], "AWS_SESSION_TOKEN", 0, &s->token);
    for (int i = 0; i < 3; i++)
        weir__free(refs[i]);
    if (!e) {
        weir_http_client_opts o = {.max_conns = 16, .max_response = s->max_object};
        if (!(s->data = weir_http_client_new(&o)))
            e = -errno;
        o.max_response = META_MAX_RESPONSE;
        if (!e && !(s->meta = weir_http_client_new(&o)))
            e = -errno;
    }
    if (!e && !(s->rt = weir_rt_new(&(weir_rt_opts){.threads = 1})))
        e = errno ? -errno : -ENOMEM;
    if (e) {
        s3_free(&s->base);
        return e;
    }
    *out = &s->base;
    return 0;
}

const weir__storage_ops weir__storage_s3_ops = {
    .scheme = "s3",
    .open = s3_open,
    .put = s3_put,
    .get = s3_get,
    .get_range = s3_get_range,
    .list = s3_list,
    .del = s3_del,
    .free = s3_free,
};
