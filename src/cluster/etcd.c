/* SPDX-License-Identifier: Apache-2.0 */
/*
 * etcd.c - leader election through etcd v3's JSON gateway (etcd.h).
 *
 * The gateway speaks protobuf's JSON mapping: a field holding its zero
 * value (false, 0, an empty list) is left out, int64 fields are strings,
 * bytes are base64. So every reader here takes an absent field as zero and
 * a present one of the wrong type as a malformed answer. Errors come back
 * as an HTTP status with {"error", "code"} (code a gRPC status); the
 * streaming keepalive wraps its one answer in {"result"} or {"error"}.
 */
#include "cluster/etcd.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/json_depth.h"
#include "base/log.h"
#include "weir/http.h"
#include "weir/rt.h"
#include "weir/tls.h"

#define JSON_DEPTH_MAX 32
#define PEER_TEXT_MAX  200 /* bytes of an error text of etcd's quoted in a message */

struct weir__etcd {
    weir_http_client *http;
    weir_tls_ctx *tls; /* https:// endpoints */
    weir_http_transport tr;
    int https;
    char *user, *password; /* auth: NULL for none */
    char *token;           /* the token authenticate gave, while valid */
    char ep[WEIR__ETCD_ENDPOINTS_MAX][WEIR__ETCD_ENDPOINT_MAX + 16];
    int nep, cur;
    int ttl_s;
    int request_ms, total_ms;
    int64_t lease; /* 0: none */
    int leading;
    uint64_t epoch;
    char *key;        /* the key e leads, while it does */
    int64_t seen_rev; /* the revision at which the last campaign saw another lead */
};

static int fail(char *msg, size_t cap, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *msg, size_t cap, int err, const char *fmt, ...)
{
    if (msg && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, cap, fmt, ap);
        va_end(ap);
    }
    return err;
}

/* A peer's text, made safe to quote: printable ASCII only, bounded. */
static void peer_text(char *out, size_t cap, const char *s, size_t n)
{
    size_t j = 0;
    for (size_t i = 0; i < n && j + 1 < cap && i < PEER_TEXT_MAX; i++)
        out[j++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    out[j] = '\0';
}

/* ---- endpoints ------------------------------------------------------------------------- */
static int host_char(int c)
{
    return isalnum(c) || c == '.' || c == '-' || c == '_';
}

/* One entry s[0..n) into out as "http[s]://host:port" (*https: which), or
 * a reason. */
static const char *parse_endpoint(const char *s, size_t n, char *out, size_t outcap, int *https)
{
    if (n == 0)
        return "empty entry";
    if (n > WEIR__ETCD_ENDPOINT_MAX)
        return "longer than 255 bytes";
    int tls = n >= 8 && strncmp(s, "https://", 8) == 0;
    if (!tls && (n < 7 || strncmp(s, "http://", 7) != 0))
        return "not http://HOST:PORT or https://HOST:PORT";
    *https = tls;
    size_t i = tls ? 8 : 7, h0, h1;
    if (i < n && s[i] == '[') {
        h0 = i;
        for (i++; i < n && (isxdigit((unsigned char)s[i]) || s[i] == ':' || s[i] == '.'); i++)
            ;
        if (i >= n || s[i] != ']' || i == h0 + 1)
            return "malformed [IPv6] host";
        h1 = ++i;
    } else {
        h0 = i;
        while (i < n && host_char((unsigned char)s[i]))
            i++;
        h1 = i;
        if (h1 == h0)
            return "no host";
    }
    long port = 2379;
    if (i < n && s[i] == ':') {
        size_t p0 = ++i;
        port = 0;
        while (i < n && isdigit((unsigned char)s[i]) && i - p0 < 6)
            port = port * 10 + (s[i++] - '0');
        if (i == p0 || port < 1 || port > 65535)
            return "bad port (1..65535)";
    }
    if (i < n && s[i] == '/')
        i++;
    if (i != n)
        return "unexpected text after host:port (no path, user or query allowed)";
    snprintf(out, outcap, "%s://%.*s:%ld", tls ? "https" : "http", (int)(h1 - h0), s + h0, port);
    return NULL;
}

static int parse_endpoints(weir__etcd *e, const char *list, char *msg, size_t cap)
{
    const char *p = list;
    int idx = 0;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *s = p;
        while (n && (*s == ' ' || *s == '\t'))
            s++, n--;
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
            n--;
        idx++;
        if (e->nep == WEIR__ETCD_ENDPOINTS_MAX)
            return fail(msg, cap, -EINVAL, "etcd endpoints: more than %d entries",
                        WEIR__ETCD_ENDPOINTS_MAX);
        int https = 0;
        const char *why = parse_endpoint(s, n, e->ep[e->nep], sizeof(e->ep[0]), &https);
        if (!why && e->nep > 0 && https != e->https)
            why = "http:// and https:// endpoints mixed: the members are reached one way";
        if (why) {
            char shown[WEIR__ETCD_ENDPOINT_MAX + 1];
            peer_text(shown, sizeof(shown), s, n);
            return fail(msg, cap, -EINVAL, "etcd endpoint %d \"%s\": %s", idx, shown, why);
        }
        e->https = https;
        e->nep++;
        if (!end)
            return 0;
        p = end + 1;
    }
}

int weir__etcd_open(const char *endpoints, int ttl_s, weir__etcd **out, char *msg, size_t cap)
{
    return weir__etcd_open_opts(endpoints, ttl_s, NULL, out, msg, cap);
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = weir__malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Free a secret after wiping it. */
static void free_secret(char **p)
{
    if (*p) {
        explicit_bzero(*p, strlen(*p));
        weir__free(*p);
        *p = NULL;
    }
}

int weir__etcd_open_opts(const char *endpoints, int ttl_s, const weir__etcd_opts *opts,
                         weir__etcd **out, char *msg, size_t cap)
{
    weir__etcd_opts none = {0};
    const weir__etcd_opts *o = opts ? opts : &none;
    if (out)
        *out = NULL;
    if (!out || !endpoints)
        return fail(msg, cap, -EINVAL, "etcd: no endpoints");
    if (ttl_s < 1 || ttl_s > WEIR__ETCD_TTL_MAX)
        return fail(msg, cap, -EINVAL, "etcd: lease TTL %d s outside 1..%d", ttl_s,
                    WEIR__ETCD_TTL_MAX);
    weir__etcd *e = weir__calloc(1, sizeof(*e));
    if (!e)
        return fail(msg, cap, -ENOMEM, "etcd: out of memory");
    int rc = parse_endpoints(e, endpoints, msg, cap);
    if (rc == 0 && e->https && !o->ca_file)
        rc = fail(msg, cap, -EINVAL,
                  "etcd: https:// endpoints need the CA file that signed the members' "
                  "certificates");
    if (rc == 0 && !e->https && (o->ca_file || o->cert_file || o->key_file))
        rc = fail(msg, cap, -EINVAL,
                  "etcd: a CA file or client certificate needs https:// endpoints");
    if (rc == 0 && !o->cert_file != !o->key_file)
        rc = fail(msg, cap, -EINVAL,
                  "etcd: a client certificate needs its key, and a key its "
                  "certificate");
    if (rc == 0 && o->user && (!*o->user || !o->password))
        rc = fail(msg, cap, -EINVAL, "etcd: a user needs a name and a password");
    if (rc == 0 && e->https) {
        char why[1024];
        weir_tls_opts t = {.ca_file = o->ca_file,
                           .cert_file = o->cert_file,
                           .key_file = o->key_file,
                           .no_verify_hostname = o->no_verify_hostname};
        if (!(e->tls = weir_tls_ctx_new(0, &t, why, sizeof(why))))
            rc = fail(msg, cap, -EINVAL, "etcd TLS: %s", why);
        else
            weir_http_tls_transport_init(&e->tr, e->tls);
    }
    if (rc == 0 && o->user &&
        (!(e->user = dup_str(o->user)) || !(e->password = dup_str(o->password))))
        rc = fail(msg, cap, -ENOMEM, "etcd: out of memory");
    weir_http_client_opts ho = {.max_response = WEIR__ETCD_RESPONSE_MAX,
                                .https = e->https ? &e->tr : NULL};
    if (rc == 0 && !(e->http = weir_http_client_new(&ho)))
        rc = fail(msg, cap, -ENOMEM, "etcd: HTTP client: out of memory");
    if (rc < 0) {
        weir__etcd_close(e);
        return rc;
    }
    e->ttl_s = ttl_s;
    e->request_ms = WEIR__ETCD_REQUEST_MS;
    e->total_ms = WEIR__ETCD_TOTAL_MS;
    *out = e;
    return 0;
}

void weir__etcd_close(weir__etcd *e)
{
    if (!e)
        return;
    weir_http_client_free(e->http);
    weir_tls_ctx_free(e->tls);
    weir__free(e->user);
    free_secret(&e->password);
    free_secret(&e->token);
    weir__free(e->key);
    weir__free(e);
}

void weir__etcd_set_timeouts(weir__etcd *e, int request_ms, int total_ms)
{
    if (request_ms > 0)
        e->request_ms = request_ms;
    if (total_ms > 0)
        e->total_ms = total_ms;
}

uint64_t weir__etcd_epoch(const weir__etcd *e)
{
    return e && e->leading ? e->epoch : 0;
}

int64_t weir__etcd_lease(const weir__etcd *e)
{
    return e ? e->lease : 0;
}

const char *weir__etcd_endpoint(const weir__etcd *e)
{
    return e->ep[e->cur];
}

static void drop_lead(weir__etcd *e)
{
    e->leading = 0;
    e->epoch = 0;
    weir__free(e->key);
    e->key = NULL;
}

/* ---- base64 ---------------------------------------------------------------------------- */
static char *b64_encode(const void *p, size_t n)
{
    char *out = weir__malloc(4 * ((n + 2) / 3) + 1);
    if (out)
        EVP_EncodeBlock((unsigned char *)out, p, (int)n);
    return out;
}

/* Strict standard base64 (padded) of s[0..n): the bytes (NUL-terminated,
 * weir__free them) in *out, or -EBADMSG / -ENOMEM. */
static int b64_decode(const char *s, size_t n, char **out, size_t *len)
{
    *out = NULL;
    if (n % 4)
        return -EBADMSG;
    size_t pad = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '=') {
            if (i < n - 2)
                return -EBADMSG;
            pad++;
        } else if (pad || !(isalnum(c) || c == '+' || c == '/')) {
            return -EBADMSG;
        }
    }
    char *b = weir__malloc(n / 4 * 3 + 1);
    if (!b)
        return -ENOMEM;
    int m = n ? EVP_DecodeBlock((unsigned char *)b, (const unsigned char *)s, (int)n) : 0;
    if (m < 0 || (size_t)m < pad) {
        weir__free(b);
        return -EBADMSG;
    }
    *len = (size_t)m - pad;
    b[*len] = '\0';
    *out = b;
    return 0;
}

/* ---- reading answers ------------------------------------------------------------------- */
/* Where an answer came from, for messages. */
typedef struct ctx {
    const char *url;
    char *msg;
    size_t cap;
    int64_t *code; /* where an error answer's gRPC code goes (NULL: nowhere) */
} ctx;

static int bad(const ctx *c, const char *what)
{
    return fail(c->msg, c->cap, -EBADMSG, "etcd %s: malformed answer: %s", c->url, what);
}

/* An int64 field (a JSON string of digits, or an integer); absent: 0. */
static int get_i64(const ctx *c, const json_t *o, const char *name, int64_t *v)
{
    *v = 0;
    const json_t *f = json_object_get(o, name);
    if (!f)
        return 0;
    if (json_is_integer(f)) {
        *v = (int64_t)json_integer_value(f);
        return 0;
    }
    const char *s = json_string_value(f);
    size_t n = json_string_length(f);
    char why[128];
    snprintf(why, sizeof(why), "\"%s\" is not an int64", name);
    if (!s || n == 0 || n > 20)
        return bad(c, why);
    size_t i = s[0] == '-';
    if (i == n)
        return bad(c, why);
    for (size_t k = i; k < n; k++)
        if (!isdigit((unsigned char)s[k]))
            return bad(c, why);
    errno = 0;
    long long x = strtoll(s, NULL, 10);
    if (errno)
        return bad(c, why);
    *v = x;
    return 0;
}

/* A non-negative int64 field. */
static int get_u63(const ctx *c, const json_t *o, const char *name, int64_t *v)
{
    int rc = get_i64(c, o, name, v);
    if (rc == 0 && *v < 0) {
        char why[128];
        snprintf(why, sizeof(why), "\"%s\" is negative", name);
        return bad(c, why);
    }
    return rc;
}

/* An object field; absent: NULL (0), another type: -EBADMSG. */
static int get_obj(const ctx *c, const json_t *o, const char *name, json_t **v)
{
    *v = json_object_get(o, name);
    if (*v && !json_is_object(*v)) {
        char why[128];
        snprintf(why, sizeof(why), "\"%s\" is not an object", name);
        return bad(c, why);
    }
    return 0;
}

/* An array field; absent: NULL (0). */
static int get_arr(const ctx *c, const json_t *o, const char *name, json_t **v)
{
    *v = json_object_get(o, name);
    if (*v && !json_is_array(*v)) {
        char why[128];
        snprintf(why, sizeof(why), "\"%s\" is not an array", name);
        return bad(c, why);
    }
    return 0;
}

/* A bytes field (base64), at most max bytes decoded; absent: "". */
static int get_bytes(const ctx *c, const json_t *o, const char *name, size_t max, char **v,
                     size_t *len)
{
    *v = NULL;
    *len = 0;
    const json_t *f = json_object_get(o, name);
    char why[128];
    if (f && !json_is_string(f)) {
        snprintf(why, sizeof(why), "\"%s\" is not a string", name);
        return bad(c, why);
    }
    size_t n = f ? json_string_length(f) : 0;
    if (n > (max + 2) / 3 * 4) {
        snprintf(why, sizeof(why), "\"%s\" is over %zu bytes", name, max);
        return bad(c, why);
    }
    int rc = b64_decode(f ? json_string_value(f) : "", n, v, len);
    if (rc == -ENOMEM)
        return fail(c->msg, c->cap, rc, "etcd: out of memory");
    if (rc < 0 || *len > max) {
        weir__free(*v);
        *v = NULL;
        snprintf(why, sizeof(why), "\"%s\" is not base64 of at most %zu bytes", name, max);
        return bad(c, why);
    }
    return 0;
}

/* gRPC status codes (the "code" of an error answer) as errnos. */
static int grpc_errno(int64_t code)
{
    switch (code) {
    case 3:  /* InvalidArgument */
    case 11: /* OutOfRange */
        return -EINVAL;
    case 4: /* DeadlineExceeded */
        return -ETIMEDOUT;
    case 5: /* NotFound: the lease */
        return -ENOENT;
    case 7:  /* PermissionDenied */
    case 16: /* Unauthenticated */
        return -EPERM;
    case 8: /* ResourceExhausted */
        return -ENOSPC;
    case 14: /* Unavailable */
        return -EAGAIN;
    default:
        return -EPROTO;
    }
}

/* An error answer's text and errno (status: the HTTP status; 0 inside a
 * streamed answer). */
static int peer_error(const ctx *c, int status, const json_t *err)
{
    char text[PEER_TEXT_MAX + 1] = "";
    int64_t code = -1;
    if (json_is_object(err)) {
        const json_t *m = json_object_get(err, "error");
        if (!json_is_string(m))
            m = json_object_get(err, "message");
        if (json_is_string(m))
            peer_text(text, sizeof(text), json_string_value(m), json_string_length(m));
        const json_t *k = json_object_get(err, "code");
        if (!k)
            k = json_object_get(err, "grpc_code");
        if (json_is_integer(k))
            code = json_integer_value(k);
    }
    if (c->code)
        *c->code = code;
    int rc = code >= 0 ? grpc_errno(code) : status == 404 ? -ENOENT : -EPROTO;
    return fail(c->msg, c->cap, rc, "etcd %s: HTTP %d: %s", c->url, status,
                text[0] ? text : "(no error text)");
}

/* Parse a body into a JSON object (*out, decref it). */
static int parse_body(const ctx *c, const char *body, size_t n, int stream, json_t **out)
{
    *out = NULL;
    if (!weir__json_depth_ok(body, n, JSON_DEPTH_MAX))
        return bad(c, "JSON nested too deep");
    json_error_t je;
    json_t *v =
        json_loadb(body, n, JSON_REJECT_DUPLICATES | (stream ? JSON_DISABLE_EOF_CHECK : 0), &je);
    if (!v) {
        char why[256], t[PEER_TEXT_MAX + 1];
        peer_text(t, sizeof(t), je.text, strlen(je.text));
        snprintf(why, sizeof(why), "not JSON: %s (line %d, column %d)", t, je.line, je.column);
        return bad(c, why);
    }
    if (!json_is_object(v)) {
        json_decref(v);
        return bad(c, "not a JSON object");
    }
    *out = v;
    return 0;
}

/* An error answer (a status outside 2xx): its text and errno, as
 * peer_error, from its body when that is JSON. */
static int status_error(const ctx *c, const weir_http_client_resp *r)
{
    json_t *err = NULL;
    if (parse_body(c, r->body, r->body_len, 0, &err) < 0)
        err = NULL;
    int rc = peer_error(c, r->status, err);
    json_decref(err);
    return rc;
}

/* ---- requests -------------------------------------------------------------------------- */
/* POST req (not consumed) to path on the members in turn, starting at
 * the one that answered last: on a connection error, a timeout or a 5xx,
 * the next one. 0 with the answer's object in *out (decref it), or a
 * negative errno with msg. stream: a streamed RPC (keepalive): its first
 * message is taken, unwrapped from {"result"}.
 *
 * A request may so reach etcd twice, which every one here bears: the
 * create-if-absent transaction sent again finds the key under this lease
 * (a campaign that leads), a delete or a revoke again changes nothing, and
 * a second grant leaves a lease nobody uses, which expires after its TTL. */
static int call_raw(weir__etcd *e, const char *path, json_t *req, int stream, json_t **out,
                    char *msg, size_t cap, int64_t *code)
{
    *out = NULL;
    *code = -1;
    char *body = json_dumps(req, JSON_COMPACT);
    if (!body)
        return fail(msg, cap, -ENOMEM, "etcd: out of memory");
    size_t blen = strlen(body);
    int64_t overall = weir_time_after_ms(e->total_ms);
    int rc = fail(msg, cap, -ETIMEDOUT, "etcd %s%s: no time left", e->ep[e->cur], path);
    for (int i = 0; i <= e->nep; i++) {
        int idx = (e->cur + i) % e->nep;
        char url[sizeof(e->ep[0]) + 64];
        snprintf(url, sizeof(url), "%s%s", e->ep[idx], path);
        ctx c = {url, msg, cap, code};
        int64_t now = weir_time_now();
        if (now >= overall)
            break;
        int64_t dl = weir_time_after_ms(e->request_ms);
        if (dl > overall)
            dl = overall;
        weir_http_client_resp r = {0};
        /* etcd takes the token as it is (no "Bearer"). */
        weir_http_header h[2] = {{{"Content-Type", 12}, {"application/json", 16}}};
        if (e->token)
            h[1] = (weir_http_header){{"Authorization", 13}, {e->token, strlen(e->token)}};
        weir_http_client_req q = {.method = "POST",
                                  .url = url,
                                  .headers = h,
                                  .nheaders = e->token ? 2 : 1,
                                  .body = body,
                                  .body_len = blen,
                                  .deadline = dl};
        int x = weir_http_client_do(e->http, &q, &r);
        if (x < 0) {
            rc = fail(msg, cap, x, "etcd %s: %s (%s)", url, weir_net_strerror(x),
                      r.error && r.error[0] ? r.error : "request failed");
            weir_http_client_resp_free(&r);
            if (x == -ECANCELED || x == -ENOMEM || x == -EINVAL)
                break;
            continue;
        }
        if (r.status >= 500) {
            rc = status_error(&c, &r);
            if (rc == -EPROTO || rc == -EAGAIN)
                rc = -EIO;
            weir_http_client_resp_free(&r);
            continue;
        }
        e->cur = idx; /* it answered */
        json_t *v = NULL;
        if (r.status < 200 || r.status > 299) {
            rc = status_error(&c, &r);
        } else if ((rc = parse_body(&c, r.body, r.body_len, stream, &v)) == 0 && stream) {
            json_t *res = NULL, *err = NULL;
            if ((rc = get_obj(&c, v, "result", &res)) == 0 &&
                (rc = get_obj(&c, v, "error", &err)) == 0) {
                if (err)
                    rc = peer_error(&c, r.status, err);
                else if (!res)
                    rc = bad(&c, "no \"result\"");
                else
                    *out = json_incref(res);
            }
        } else if (rc == 0) {
            *out = json_incref(v);
        }
        json_decref(v);
        weir_http_client_resp_free(&r);
        break;
    }
    /* The request may hold the password (authenticate). */
    explicit_bzero(body, blen);
    free(body);
    return rc;
}

/* Authenticate as e->user: a new token in e->token, or -EACCES with a
 * message naming the user (never the password), or another negative errno
 * (etcd unreachable). */
static int authenticate(weir__etcd *e, char *msg, size_t cap)
{
    free_secret(&e->token);
    json_t *req = json_pack("{s:s,s:s}", "name", e->user, "password", e->password), *v = NULL;
    if (!req)
        return fail(msg, cap, -ENOMEM, "etcd: out of memory");
    int64_t code;
    int rc = call_raw(e, "/v3/auth/authenticate", req, 0, &v, msg, cap, &code);
    json_t *pw = json_object_get(req, "password");
    if (json_is_string(pw))
        explicit_bzero((char *)json_string_value(pw), json_string_length(pw));
    json_decref(req);
    if (rc < 0) {
        if (code >= 0) {
            char why[512];
            snprintf(why, sizeof(why), "%s", msg ? msg : "");
            rc = fail(msg, cap, -EACCES, "etcd: authentication as user \"%s\" failed: %s", e->user,
                      why);
        }
        return rc;
    }
    char url[sizeof(e->ep[0]) + 32];
    snprintf(url, sizeof(url), "%s/v3/auth/authenticate", e->ep[e->cur]);
    ctx c = {url, msg, cap, NULL};
    const json_t *t = json_object_get(v, "token");
    if (!json_is_string(t) || json_string_length(t) == 0 || json_string_length(t) > 4096)
        rc = bad(&c, "no \"token\" string");
    else {
        const char *tv = json_string_value(t);
        for (size_t i = 0; rc == 0 && i < json_string_length(t); i++)
            if (tv[i] < 0x21 || tv[i] > 0x7e)
                rc = bad(&c, "a \"token\" that cannot be sent in a header field");
        if (rc == 0 && !(e->token = dup_str(tv)))
            rc = fail(msg, cap, -ENOMEM, "etcd: out of memory");
    }
    json_decref(v);
    return rc;
}

/* call_raw with the token of e->user when e has one: authenticated first,
 * and once more when etcd says the token is not (or no longer) valid (code
 * 16, Unauthenticated: it expired, auth was turned off and on, or the
 * member that answers did not issue it), the request then sent again. */
static int call(weir__etcd *e, const char *path, json_t *req, int stream, json_t **out, char *msg,
                size_t cap)
{
    int rc;
    if (e->user && !e->token && (rc = authenticate(e, msg, cap)) < 0)
        return rc;
    int64_t code;
    rc = call_raw(e, path, req, stream, out, msg, cap, &code);
    if (rc < 0 && e->user && code == 16) {
        weir__log(WEIR__LOG_INFO, "cluster.etcd", "etcd %s: token refused; authenticating again",
                  e->ep[e->cur]);
        if ((rc = authenticate(e, msg, cap)) < 0)
            return rc;
        rc = call_raw(e, path, req, stream, out, msg, cap, &code);
    }
    return rc;
}

/* The answer's header.revision (> 0). */
static int header_revision(const ctx *c, const json_t *v, int64_t *rev)
{
    json_t *h;
    int rc = get_obj(c, v, "header", &h);
    if (rc == 0 && h)
        rc = get_u63(c, h, "revision", rev);
    if (rc == 0 && (!h || *rev <= 0))
        rc = bad(c, "no header.revision");
    return rc;
}

static int check_key(const char *key, char *msg, size_t cap)
{
    if (!key || !key[0])
        return fail(msg, cap, -EINVAL, "etcd: empty key");
    if (strlen(key) > WEIR__ETCD_KEY_MAX)
        return fail(msg, cap, -EINVAL, "etcd: key over %d bytes", WEIR__ETCD_KEY_MAX);
    return 0;
}

/* Copy a value out as a C string. */
static int copy_value(const ctx *c, const char *v, size_t n, char *buf, size_t bcap)
{
    if (memchr(v, '\0', n))
        return bad(c, "the value holds a NUL byte");
    if (!buf)
        return 0;
    if (n >= bcap)
        return fail(c->msg, c->cap, -ENOSPC, "etcd %s: the value (%zu bytes) does not fit in %zu",
                    c->url, n, bcap);
    memcpy(buf, v, n);
    buf[n] = '\0';
    return 0;
}

/* One key-value of a range answer: its key checked against want, the
 * value copied out, create_revision and lease. */
static int read_kv(const ctx *c, const json_t *kv, const char *want, char *buf, size_t bcap,
                   int64_t *create, int64_t *lease)
{
    if (!json_is_object(kv))
        return bad(c, "a kv is not an object");
    char *k = NULL, *v = NULL;
    size_t kn, vn;
    int rc = get_bytes(c, kv, "key", WEIR__ETCD_KEY_MAX, &k, &kn);
    if (rc == 0 && (kn != strlen(want) || memcmp(k, want, kn) != 0))
        rc = bad(c, "the kv is not the key asked for");
    if (rc == 0)
        rc = get_bytes(c, kv, "value", WEIR__ETCD_VALUE_MAX, &v, &vn);
    if (rc == 0)
        rc = get_u63(c, kv, "create_revision", create);
    if (rc == 0 && *create <= 0)
        rc = bad(c, "\"create_revision\" is not positive");
    if (rc == 0)
        rc = get_i64(c, kv, "lease", lease);
    if (rc == 0)
        rc = copy_value(c, v, vn, buf, bcap);
    weir__free(k);
    weir__free(v);
    return rc;
}

/* The kvs of a range answer r: 0 none, 1 the first read into the out
 * parameters. */
static int read_range(const ctx *c, const json_t *r, const char *key, char *buf, size_t bcap,
                      int64_t *create, int64_t *lease)
{
    json_t *kvs;
    int rc = get_arr(c, r, "kvs", &kvs);
    if (rc < 0)
        return rc;
    if (!kvs || json_array_size(kvs) == 0)
        return 0;
    rc = read_kv(c, json_array_get(kvs, 0), key, buf, bcap, create, lease);
    return rc < 0 ? rc : 1;
}

/* ---- the election ---------------------------------------------------------------------- */
static int grant(weir__etcd *e, char *msg, size_t cap)
{
    json_t *req = json_pack("{s:i}", "TTL", e->ttl_s), *v = NULL;
    if (!req)
        return fail(msg, cap, -ENOMEM, "etcd: out of memory");
    int rc = call(e, "/v3/lease/grant", req, 0, &v, msg, cap);
    json_decref(req);
    if (rc < 0)
        return rc;
    char url[sizeof(e->ep[0]) + 16];
    snprintf(url, sizeof(url), "%s/v3/lease/grant", e->ep[e->cur]);
    ctx c = {url, msg, cap, NULL};
    int64_t id, ttl;
    if ((rc = get_i64(&c, v, "ID", &id)) == 0 && (rc = get_i64(&c, v, "TTL", &ttl)) == 0) {
        if (id == 0 || ttl <= 0)
            rc = bad(&c, "lease grant without an ID and a TTL");
        else
            e->lease = id;
    }
    json_decref(v);
    return rc;
}

/* The create-if-absent transaction: 1 e leads, 0 another does. */
static int txn_create(weir__etcd *e, const char *key, const char *k64, const char *v64,
                      uint64_t *epoch, char *holder, size_t hcap, char *msg, size_t cap)
{
    char lease[24];
    snprintf(lease, sizeof(lease), "%" PRId64, e->lease);
    json_t *req =
        json_pack("{s:[{s:s,s:s,s:s}],s:[{s:{s:s,s:s,s:s}}],s:[{s:{s:s}}]}", "compare", "target",
                  "CREATE", "key", k64, "create_revision", "0", "success", "requestPut", "key", k64,
                  "value", v64, "lease", lease, "failure", "requestRange", "key", k64);
    if (!req)
        return fail(msg, cap, -ENOMEM, "etcd: out of memory");
    json_t *v = NULL;
    int rc = call(e, "/v3/kv/txn", req, 0, &v, msg, cap);
    json_decref(req);
    if (rc < 0)
        return rc;
    char url[sizeof(e->ep[0]) + 16];
    snprintf(url, sizeof(url), "%s/v3/kv/txn", e->ep[e->cur]);
    ctx c = {url, msg, cap, NULL};
    int64_t rev = 0, create = 0, holder_lease = 0;
    const json_t *ok = json_object_get(v, "succeeded");
    json_t *resps = NULL, *r0 = NULL;
    if (ok && !json_is_boolean(ok))
        rc = bad(&c, "\"succeeded\" is not a boolean");
    else if ((rc = header_revision(&c, v, &rev)) < 0)
        ;
    else if (json_is_true(ok)) {
        /* The put is the transaction's only write: the key was created at
         * the transaction's revision. */
        e->leading = 1;
        e->epoch = (uint64_t)rev;
        rc = 1;
    } else if ((rc = get_arr(&c, v, "responses", &resps)) < 0)
        ;
    else if (!resps || json_array_size(resps) != 1 || !json_is_object(json_array_get(resps, 0)))
        rc = bad(&c, "a failed transaction without its one range response");
    else if ((rc = get_obj(&c, json_array_get(resps, 0), "response_range", &r0)) < 0)
        ;
    else if (!r0)
        rc = bad(&c, "a failed transaction without its one range response");
    else if ((rc = read_range(&c, r0, key, holder, hcap, &create, &holder_lease)) == 0)
        rc = fail(msg, cap, -EAGAIN, "etcd %s: the key was held and then gone: try again", url);
    else if (rc == 1 && holder_lease == e->lease && holder_lease != 0) {
        e->leading = 1; /* this lease created it: a campaign again while leading */
        e->epoch = (uint64_t)create;
    } else if (rc == 1) {
        rc = 0;
        e->seen_rev = rev;
    }
    if (rc >= 0 && epoch)
        *epoch = rc == 1 ? e->epoch : (uint64_t)create;
    json_decref(v);
    return rc;
}

int weir__etcd_campaign(weir__etcd *e, const char *key, const char *value, uint64_t *epoch,
                        char *holder, size_t holder_cap, char *msg, size_t cap)
{
    int rc = check_key(key, msg, cap);
    if (rc < 0)
        return rc;
    if (!value || strlen(value) > WEIR__ETCD_VALUE_MAX)
        return fail(msg, cap, -EINVAL, "etcd: value missing or over %u bytes",
                    WEIR__ETCD_VALUE_MAX);
    if (e->leading && strcmp(e->key, key) != 0)
        return fail(msg, cap, -EBUSY, "etcd: this client already leads another key");
    char *k64 = b64_encode(key, strlen(key)), *v64 = b64_encode(value, strlen(value));
    char *kcopy = weir__strdup(key);
    if (!k64 || !v64 || !kcopy) {
        rc = fail(msg, cap, -ENOMEM, "etcd: out of memory");
        goto out;
    }
    /* A lease held while not leading is renewed first: one won with would
     * otherwise be as old as the wait since its grant, and might expire
     * before the new leader's first keepalive. A lease etcd no longer has
     * is dropped here (-ESTALE) and granted again below; any other failure
     * is the transaction's to report. */
    if (!e->leading && e->lease && weir__etcd_keepalive(e, NULL, msg, cap) == -ECANCELED) {
        rc = -ECANCELED;
        goto out;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!e->lease && (rc = grant(e, msg, cap)) < 0)
            break;
        rc = txn_create(e, key, k64, v64, epoch, holder, holder_cap, msg, cap);
        if (rc != -ENOENT)
            break;
        /* etcd does not know e's lease any more (it expired while e was
         * not leading): a new one, once. */
        e->lease = 0;
        drop_lead(e);
    }
    if (rc == 1) {
        weir__free(e->key);
        e->key = kcopy;
        kcopy = NULL;
    }
out:
    weir__free(k64);
    weir__free(v64);
    weir__free(kcopy);
    return rc;
}

int weir__etcd_keepalive(weir__etcd *e, int *ttl_s, char *msg, size_t cap)
{
    if (!e->lease) {
        drop_lead(e);
        return fail(msg, cap, -ESTALE, "etcd: no lease held");
    }
    char id[24];
    snprintf(id, sizeof(id), "%" PRId64, e->lease);
    json_t *req = json_pack("{s:s}", "ID", id), *v = NULL;
    if (!req)
        return fail(msg, cap, -ENOMEM, "etcd: out of memory");
    int rc = call(e, "/v3/lease/keepalive", req, 1, &v, msg, cap);
    json_decref(req);
    if (rc == -ENOENT)
        goto gone;
    if (rc < 0)
        return rc;
    char url[sizeof(e->ep[0]) + 32];
    snprintf(url, sizeof(url), "%s/v3/lease/keepalive", e->ep[e->cur]);
    ctx c = {url, msg, cap, NULL};
    int64_t rid, ttl;
    /* A TTL of 0 (or none) is a lease etcd no longer has, whatever the ID
     * says: stepping down on it is the safe side. */
    if ((rc = get_i64(&c, v, "ID", &rid)) == 0 && (rc = get_i64(&c, v, "TTL", &ttl)) == 0 &&
        ttl > 0 && rid != e->lease)
        rc = bad(&c, "the keepalive answers for another lease");
    json_decref(v);
    if (rc < 0)
        return rc;
    if (ttl > 0) {
        if (ttl_s)
            *ttl_s = ttl > INT32_MAX ? INT32_MAX : (int)ttl;
        return 0;
    }
gone:
    rc = fail(msg, cap, -ESTALE, "etcd: lease %" PRId64 " has expired%s", e->lease,
              e->leading ? ": no longer the leader" : "");
    e->lease = 0;
    drop_lead(e);
    return rc;
}

int weir__etcd_leader(weir__etcd *e, const char *key, char *value, size_t vcap, uint64_t *epoch,
                      char *msg, size_t cap)
{
    int rc = check_key(key, msg, cap);
    if (rc < 0)
        return rc;
    char *k64 = b64_encode(key, strlen(key));
    json_t *req = k64 ? json_pack("{s:s}", "key", k64) : NULL, *v = NULL;
    weir__free(k64);
    if (!req)
        return fail(msg, cap, -ENOMEM, "etcd: out of memory");
    rc = call(e, "/v3/kv/range", req, 0, &v, msg, cap);
    json_decref(req);
    if (rc < 0)
        return rc;
    char url[sizeof(e->ep[0]) + 16];
    snprintf(url, sizeof(url), "%s/v3/kv/range", e->ep[e->cur]);
    ctx c = {url, msg, cap, NULL};
    int64_t create = 0, lease = 0;
    rc = read_range(&c, v, key, value, vcap, &create, &lease);
    if (rc == 1 && epoch)
        *epoch = (uint64_t)create;
    json_decref(v);
    return rc;
}

/* ---- the watch ------------------------------------------------------------------------- */
/* A watch's answer is a stream of messages, each {"result": WatchResponse}
 * or {"error": ...} on a line of its own. */
#define WATCH_LINE_MAX (64u << 10) /* bytes of one message: a longer one is refused */

typedef struct watch_rd {
    ctx c;
    char *line; /* the message being read */
    size_t len;
    int created; /* etcd set the watch up */
    int gone;    /* 1: a delete of the key; 2: etcd ended the watch */
    int err;     /* a malformed message or an error answer */
} watch_rd;

/* One message: 0 read on, 1 the key went, 2 etcd ended the watch, or a
 * negative errno with msg. */
static int watch_message(watch_rd *w, const char *m, size_t n)
{
    while (n && (m[n - 1] == '\r' || m[n - 1] == ' '))
        n--;
    if (n == 0)
        return 0;
    json_t *v = NULL, *res = NULL, *err = NULL, *evs = NULL;
    int rc = parse_body(&w->c, m, n, 0, &v);
    if (rc == 0 && (rc = get_obj(&w->c, v, "error", &err)) == 0 && err)
        rc = peer_error(&w->c, 0, err);
    else if (rc == 0 && (rc = get_obj(&w->c, v, "result", &res)) == 0 && !res)
        rc = bad(&w->c, "a watch message without \"result\"");
    if (rc == 0) {
        const json_t *created = json_object_get(res, "created");
        const json_t *canceled = json_object_get(res, "canceled");
        if ((created && !json_is_boolean(created)) || (canceled && !json_is_boolean(canceled)))
            rc = bad(&w->c, "\"created\" or \"canceled\" is not a boolean");
        else if ((rc = get_arr(&w->c, res, "events", &evs)) == 0) {
            if (json_is_true(created))
                w->created = 1;
            /* Cancelled by etcd (its start revision compacted, the member
             * stopping): whatever happened is read again. */
            if (json_is_true(canceled))
                rc = 2;
            for (size_t i = 0; rc == 0 && evs && i < json_array_size(evs); i++) {
                const json_t *ev = json_array_get(evs, i);
                const json_t *type = json_is_object(ev) ? json_object_get(ev, "type") : NULL;
                if (!json_is_object(ev) || (type && !json_is_string(type)))
                    rc = bad(&w->c, "a watch event that is not an object with a \"type\"");
                else if (type && strcmp(json_string_value(type), "DELETE") == 0)
                    rc = 1; /* a PUT has no "type" (its zero value) */
            }
        }
    }
    json_decref(v);
    return rc;
}

/* The body of the watch, as it arrives: split into lines. */
static int watch_body(void *arg, const void *data, size_t len)
{
    watch_rd *w = arg;
    const char *p = data, *end = p + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t take = (size_t)((nl ? nl : end) - p);
        if (take > WATCH_LINE_MAX - w->len)
            return w->err = bad(&w->c, "a watch message over 64 KiB");
        memcpy(w->line + w->len, p, take);
        w->len += take;
        p += take;
        if (!nl)
            break;
        p++; /* the newline */
        int rc = watch_message(w, w->line, w->len);
        w->len = 0;
        if (rc < 0)
            return w->err = rc;
        if (rc > 0) {
            w->gone = rc;
            return 1;
        }
    }
    return 0;
}

/* One watch request, its answer read until dl: as weir__etcd_watch_gone,
 * but 0 also when dl passes with the watch set up (the caller asks again). */
static int watch_once(weir__etcd *e, const char *body, int64_t dl, char *msg, size_t cap)
{
    watch_rd w = {.line = weir__malloc(WATCH_LINE_MAX)};
    if (!w.line)
        return fail(msg, cap, -ENOMEM, "etcd: out of memory");
    char url[sizeof(e->ep[0]) + 16];
    snprintf(url, sizeof(url), "%s/v3/watch", e->ep[e->cur]);
    int64_t code = -1;
    w.c = (ctx){url, msg, cap, &code};
    /* Hasleader: a member cut off from the quorum refuses the watch
     * (rather than one that could never report a delete). */
    weir_http_header h[3] = {{{"Content-Type", 12}, {"application/json", 16}},
                             {{"Grpc-Metadata-Hasleader", 23}, {"true", 4}}};
    if (e->token)
        h[2] = (weir_http_header){{"Authorization", 13}, {e->token, strlen(e->token)}};
    weir_http_client_req q = {.method = "POST",
                              .url = url,
                              .headers = h,
                              .nheaders = e->token ? 3 : 2,
                              .body = body,
                              .body_len = strlen(body),
                              .deadline = dl,
                              .on_body = watch_body,
                              .on_body_arg = &w};
    weir_http_client_resp r = {0};
    int x = weir_http_client_do(e->http, &q, &r), rc;
    if (x == 0 && !w.gone && !w.err && w.len > 0 && r.status >= 200 && r.status <= 299) {
        int m = watch_message(&w, w.line, w.len); /* a last message without its newline */
        if (m < 0)
            w.err = m;
        else if (m > 0)
            w.gone = m;
    }
    if (w.gone)
        rc = w.gone;
    else if (w.err)
        rc = w.err;
    else if (x == -ETIMEDOUT && w.created)
        rc = 0; /* nothing happened until dl */
    else if (x == -ETIMEDOUT)
        rc = fail(msg, cap, x, "etcd %s: the watch was not set up in time", url);
    else if (x < 0)
        rc = fail(msg, cap, x, "etcd %s: %s (%s)", url, weir_net_strerror(x),
                  r.error && r.error[0] ? r.error : "request failed");
    else if (r.status < 200 || r.status > 299)
        rc = status_error(&w.c, &r);
    else if (!w.created) {
        rc = fail(msg, cap, -EPROTO,
                  "etcd %s: the answer ended before the watch was set up "
                  "(a proxy that does not stream?)",
                  url);
    } else {
        rc = 2; /* etcd ended the stream: look again */
    }
    if (rc < 0 && code == 16)
        free_secret(&e->token); /* refused: the next request authenticates again */
    weir_http_client_resp_free(&r);
    weir__free(w.line);
    return rc;
}

int weir__etcd_watch_gone(weir__etcd *e, const char *key, int64_t deadline, char *msg, size_t cap)
{
    int rc = check_key(key, msg, cap);
    if (rc < 0)
        return rc;
    if (e->seen_rev <= 0)
        return fail(msg, cap, -EINVAL, "etcd: no campaign has seen another lead yet");
    char *k64 = b64_encode(key, strlen(key));
    char from[24];
    snprintf(from, sizeof(from), "%" PRId64, e->seen_rev + 1);
    /* NOPUT: only deletes are sent (a PUT of the same key under the
     * leader's lease is no change of leader). */
    json_t *req = k64 ? json_pack("{s:{s:s,s:s,s:[s]}}", "create_request", "key", k64,
                                  "start_revision", from, "filters", "NOPUT")
                      : NULL;
    weir__free(k64);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body)
        return fail(msg, cap, -ENOMEM, "etcd: out of memory");
    /* Each request lasts at most one request deadline, so a member that
     * answers nothing (or a proxy that holds the stream back) is found
     * out that soon; asking again from the same revision loses nothing. */
    for (rc = 0; rc == 0;) {
        int64_t now = weir_time_now();
        if (now >= deadline)
            break;
        if (e->user && !e->token && (rc = authenticate(e, msg, cap)) < 0)
            break;
        int64_t dl = weir_time_after_ms(e->request_ms);
        rc = watch_once(e, body, dl < deadline ? dl : deadline, msg, cap);
    }
    free(body);
    return rc;
}

int weir__etcd_resign(weir__etcd *e, char *msg, size_t cap)
{
    int rc = 0;
    json_t *v = NULL;
    if (e->leading) {
        char *k64 = b64_encode(e->key, strlen(e->key));
        char rev[24];
        snprintf(rev, sizeof(rev), "%" PRIu64, e->epoch);
        /* Only this leadership's key: a successor's (created after this
         * lease expired) has another create_revision. */
        json_t *req = k64 ? json_pack("{s:[{s:s,s:s,s:s,s:s}],s:[{s:{s:s}}]}", "compare", "target",
                                      "CREATE", "result", "EQUAL", "key", k64, "create_revision",
                                      rev, "success", "requestDeleteRange", "key", k64)
                          : NULL;
        weir__free(k64);
        if (!req)
            rc = fail(msg, cap, -ENOMEM, "etcd: out of memory");
        else
            rc = call(e, "/v3/kv/txn", req, 0, &v, msg, cap);
        json_decref(req);
        json_decref(v);
        v = NULL;
        drop_lead(e);
    }
    if (e->lease) {
        char id[24];
        snprintf(id, sizeof(id), "%" PRId64, e->lease);
        json_t *req = json_pack("{s:s}", "ID", id);
        char m2[512];
        int r2 = req ? call(e, "/v3/lease/revoke", req, 0, &v, m2, sizeof(m2))
                     : fail(m2, sizeof(m2), -ENOMEM, "etcd: out of memory");
        json_decref(req);
        json_decref(v);
        e->lease = 0;
        if (r2 < 0 && r2 != -ENOENT && rc == 0)
            rc = fail(msg, cap, r2, "%s", m2);
    }
    return rc;
}
