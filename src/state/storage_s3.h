/* SPDX-License-Identifier: Apache-2.0 */
/*
 * storage_s3.h - the pieces of the S3 store (storage_s3.c) its tests reach
 * directly: the AWS Signature Version 4 signer, the URI encoding it signs,
 * and a test hook for list pagination. The store itself is only reached
 * through storage.h (weir__storage_open("s3://...")).
 */
#ifndef WEIR_STATE_STORAGE_S3_H
#define WEIR_STATE_STORAGE_S3_H

#include <stddef.h>

/* One request to sign (header-based SigV4, service "s3"). Every string is
 * NUL-terminated and used as given: path and query already URI-encoded the
 * way they are sent (weir__s3_uri_encode), the query's parameters sorted by
 * name. Headers signed: host, x-amz-content-sha256, x-amz-date, then any
 * extra ones (lowercase names, already in sorted order among all of
 * them: the signer merges them in by name), plus x-amz-security-token when
 * token is set. */
typedef struct weir__s3_sig_in {
    const char *method;       /* "GET" */
    const char *path;         /* "/bucket/key" */
    const char *query;        /* "list-type=2&prefix=a" or "" */
    const char *host;         /* the Host field: "127.0.0.1:9000" */
    const char *amz_date;     /* "20130524T000000Z" */
    const char *payload_hash; /* 64 lowercase hex digits */
    const char *region;       /* "us-east-1" */
    const char *access_key;
    const char *secret_key;
    const char *token; /* NULL or "": none */
    /* Extra signed headers (name lowercase, value trimmed). */
    const char *const *extra_names;
    const char *const *extra_values;
    size_t nextra;
} weir__s3_sig_in;

/* The Authorization field's value into out (cap bytes): 0, -ENOSPC, or
 * -EINVAL / -ENOMEM. Thread-safe; the secret is never copied anywhere but
 * the HMAC's key. */
int weir__s3_sign(const weir__s3_sig_in *in, char *out, size_t cap);

/* URI-encode s[0..n) as SigV4 wants it: unreserved characters (A-Z a-z
 * 0-9 - . _ ~) kept, every other byte %XX (uppercase hex); '/' kept when
 * keep_slash (an object key in a path). The encoded length, or -ENOSPC
 * when it needs more than cap bytes (NUL included). */
long weir__s3_uri_encode(const char *s, size_t n, int keep_slash, char *out, size_t cap);

#endif
