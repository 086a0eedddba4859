/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_storage_s3.c - the S3 store (state/storage_s3.c) against s3rver, a
 * real S3 server from npm (tests/npm, installed by scripts/deps.sh), that
 * the test starts itself on a free loopback port and a temporary
 * directory: the SigV4 signer against AWS's published example and a
 * vector computed independently (python3's hmac), URIs and credentials
 * refused (a literal secret never accepted, never echoed), every call
 * with the semantics the other stores have (ranges as check_ranges in
 * test_storage.c asks, -EFBIG, names with spaces, '+', '&' and unicode,
 * listings over many pages, prefix deletes), 16 threads at once, wrong
 * credentials (-EACCES, the secret in no message; s3rver checks the
 * access key but not a V4 signature, so the signer's correctness rests on
 * the vectors), the server killed with
 * SIGKILL and started again on the same directory and port (the blobs
 * survive, a call in flight rides over it), the server down (calls fail
 * within their deadline), a hostile server (a huge Content-Length,
 * garbage XML, a DOCTYPE, too many keys, a key outside the prefix, a
 * token that never ends, a wrong Content-Range, 503s: clean errors), and the remote-read state
 * backend on an S3 pool end to end. Without node or s3rver the test fails, saying to run
 * scripts/deps.sh.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "state/state_int.h"
#include "state/storage.h"
#include "state/storage_s3.h"
#include "s3_server.h"
#include "store_checks.h"
#include "test.h"
#include "test_rt.h"
#include "weir/rt.h"
#include "weir/state.h"

#define BUCKET "weir-test"

/* The credentials every test sees, set before main (no thread runs yet). */
__attribute__((constructor)) static void set_env(void)
{
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    unsetenv("AWS_SESSION_TOKEN");
    setenv("WEIR_TEST_S3_KEY", "S3RVER", 1);
    setenv("WEIR_TEST_S3_SECRET", "S3RVER", 1);
    setenv("WEIR_TEST_S3_WRONG", "not-the-secret-Zq9x", 1);
    setenv("WEIR_TEST_S3_WRONG_KEY", "AKIDNOSUCHKEY", 1);
    unsetenv("WEIR_TEST_S3_UNSET");
}

static double now_s(void)
{
    return (double)weir_time_now() / 1e9;
}

/* ---- the server (tests/state/s3_server.h) ---------------------------------------------- */
static s3_server srv;

static void server_start(void)
{
    s3_server_start(&srv, BUCKET);
}

static void server_kill(void)
{
    s3_server_kill(&srv);
}

static void server_down(void)
{
    s3_server_down(&srv);
}

static void server_up(void)
{
    if (srv.pid > 0)
        return;
    s3_server_up(&srv, BUCKET);
    static int registered;
    if (!registered++)
        atexit(server_down);
}

static weir__storage *open_s3(const char *prefix, const char *extra)
{
    char uri[512];
    snprintf(uri, sizeof(uri), "s3://" BUCKET "/%s?endpoint=127.0.0.1:%d%s", prefix, srv.port,
             extra ? extra : "");
    weir__storage *s;
    int e = weir__storage_open(uri, &s);
    if (e)
        TEST__FAIL("open %s: %d", uri, e);
    return s;
}

static uint8_t *get_ok(weir__storage *s, const char *name, size_t *len)
{
    uint8_t *b = NULL;
    int e = weir__storage_get(s, name, 1 << 20, &b, len);
    if (e)
        TEST__FAIL("get %s: %d", name, e);
    return b;
}

static void check_names(weir__storage *s, const char *prefix, const char *const *want, size_t n)
{
    weir__names ns;
    CHECK_EQ(weir__storage_list(s, prefix, &ns), 0);
    if (ns.n != n) {
        for (size_t i = 0; i < ns.n; i++)
            fprintf(stderr, "  listed %s\n", ns.v[i]);
        TEST__FAIL("list \"%s\": %zu names, want %zu", prefix, ns.n, n);
    }
    for (size_t i = 0; i < n; i++)
        CHECK_STR(ns.v[i], want[i]);
    weir__names_free(&ns);
}

/* ---- the signer ------------------------------------------------------------------------- */
TEST(sigv4_vectors)
{
    /* AWS's documented example: GET /test.txt of examplebucket, a Range. */
    const char *rn[] = {"range"}, *rv[] = {"bytes=0-9"};
    weir__s3_sig_in in = {
        .method = "GET",
        .path = "/test.txt",
        .query = "",
        .host = "examplebucket.s3.amazonaws.com",
        .amz_date = "20130524T000000Z",
        .payload_hash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        .region = "us-east-1",
        .access_key = "AKIAIOSFODNN7EXAMPLE",
        .secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        .extra_names = rn,
        .extra_values = rv,
        .nextra = 1,
    };
    char auth[512];
    CHECK_EQ(weir__s3_sign(&in, auth, sizeof(auth)), 0);
    CHECK_STR(auth, "AWS4-HMAC-SHA256 "
                    "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
                    "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
                    "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    CHECK_EQ(weir__s3_sign(&in, auth, 100), -ENOSPC);
    /* A PUT with a session token and an encoded key, and a listing's
     * sorted query: computed with python3's hmac and hashlib. */
    weir__s3_sig_in put = {
        .method = "PUT",
        .path = "/weir-test/p/a%20b%2Bc",
        .query = "",
        .host = "127.0.0.1:9000",
        .amz_date = "20261203T164000Z",
        .payload_hash = "d00cd3e34894fb8844344e97902f6919c40b62981c8789b774159758fa7558cd",
        .region = "eu-west-1",
        .access_key = "AKIDTEST",
        .secret_key = "secret/KEY+1",
        .token = "TOKEN/xyz==",
    };
    CHECK_EQ(weir__s3_sign(&put, auth, sizeof(auth)), 0);
    CHECK_STR(auth, "AWS4-HMAC-SHA256 Credential=AKIDTEST/20261203/eu-west-1/s3/aws4_request,"
                    "SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"
                    "Signature=df8f37485d0ec7c6b2f73a726c5aea0c0345d2a1e6c31c7f7309e3684cff691c");
    weir__s3_sig_in list = {
        .method = "GET",
        .path = "/weir-test",
        .query = "delimiter=%2F&list-type=2&max-keys=1000&prefix=p%2F",
        .host = "127.0.0.1:9000",
        .amz_date = "20261203T164000Z",
        .payload_hash = in.payload_hash,
        .region = "us-east-1",
        .access_key = "S3RVER",
        .secret_key = "S3RVER",
    };
    CHECK_EQ(weir__s3_sign(&list, auth, sizeof(auth)), 0);
    CHECK_HAS(auth, "Signature=534f65bede1c412d368703a940971220aea2c5dcc61605fb32532b77ca1de76c");
    /* The encoding signed and sent. */
    char enc[64];
    const char *raw = "a b+c&d/\xc3\xa9~_.-";
    CHECK_EQ(weir__s3_uri_encode(raw, strlen(raw), 1, enc, sizeof(enc)), 24);
    CHECK_STR(enc, "a%20b%2Bc%26d/%C3%A9~_.-");
    CHECK_EQ(weir__s3_uri_encode("a/b", 3, 0, enc, sizeof(enc)), 5);
    CHECK_STR(enc, "a%2Fb");
    CHECK_EQ(weir__s3_uri_encode(raw, strlen(raw), 1, enc, 10), -ENOSPC);
}

/* ---- URIs and credentials --------------------------------------------------------------- */
TEST(uris_are_checked)
{
    static const char *bad[] = {
        "s3://" BUCKET "/p",                                  /* no endpoint */
        "s3://" BUCKET "/p?endpoint=",                        /* empty */
        "s3://" BUCKET "/p?endpoint=localhost",               /* no port */
        "s3://" BUCKET "/p?endpoint=127.0.0.1:1/x",           /* a path */
        "s3://Bad_Bucket/p?endpoint=127.0.0.1:1",             /* not a bucket name */
        "s3://ab/p?endpoint=127.0.0.1:1",                     /* too short */
        "s3://" BUCKET "/../p?endpoint=127.0.0.1:1",          /* not a valid prefix */
        "s3://" BUCKET "/p?endpoint=127.0.0.1:1&colour=blue", /* no such option */
        "s3://" BUCKET "/p?endpoint=127.0.0.1:1&timeout_ms=0",
        "s3://" BUCKET "/p?endpoint=127.0.0.1:1&max_keys=1001",
        "s3://" BUCKET "/p?endpoint=127.0.0.1:1&region=EU WEST",
        "s3://" BUCKET "/p?endpoint=127.0.0.1:1&access_key=AKIDLITERAL",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        weir__storage *s = NULL;
        int e = weir__storage_open(bad[i], &s);
        if (e != -EINVAL)
            TEST__FAIL("%s: %d, not refused", bad[i], e);
    }
    /* A literal secret is refused, and the message does not repeat it. */
    char path[] = "/tmp/weir-s3-log-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    weir__storage *s = NULL;
    int e = weir__storage_open(
        "s3://" BUCKET "/p?endpoint=127.0.0.1:1&secret_key=wJalrXUtnFEMI-literal", &s);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    CHECK_EQ(e, -EINVAL);
    char log[4096] = {0};
    CHECK(pread(fd, log, sizeof(log) - 1, 0) > 0);
    close(fd);
    unlink(path);
    CHECK_HAS(log, "secret_key=env://");
    CHECK(strstr(log, "wJalrXUtnFEMI") == NULL);
    /* A variable that is not set: no credentials. */
    CHECK_EQ(weir__storage_open(
                 "s3://" BUCKET "/p?endpoint=127.0.0.1:1&secret_key=env://WEIR_TEST_S3_UNSET", &s),
             -EACCES);
    /* env:// references that are set: the store opens (nothing is sent yet). */
    CHECK_EQ(weir__storage_open("s3://" BUCKET "/p?endpoint=127.0.0.1:1&region=eu-west-1"
                                "&access_key=env://WEIR_TEST_S3_KEY"
                                "&secret_key=env://WEIR_TEST_S3_SECRET&timeout_ms=100",
                                &s),
             0);
    weir__storage_close(s);
    /* The stores without options refuse a '?' rather than take it as a name. */
    CHECK_EQ(weir__storage_open("mem://x?colour=blue", &s), -EINVAL);
}

TEST(calls_as_every_store_answers)
{
    server_up();
    weir__storage *s = open_s3("job/one", NULL);
    uint8_t *b;
    size_t len;
    CHECK_EQ(weir__storage_get(s, "COMPLETED-7", 100, &b, &len), -ENOENT);
    CHECK_EQ(weir__storage_put(s, "COMPLETED-7", "7", 1), 0);
    CHECK_EQ(weir__storage_put(s, "chk-7/MANIFEST.json", "{}", 2), 0);
    CHECK_EQ(weir__storage_put(s, "chk-7/count.0.state", "state", 5), 0);
    CHECK_EQ(weir__storage_put(s, "chk-7/sub/deep", "d", 1), 0);
    CHECK_EQ(weir__storage_put(s, "empty", "", 0), 0);
    b = get_ok(s, "chk-7/count.0.state", &len);
    CHECK_EQ(len, 5);
    CHECK(memcmp(b, "state", 5) == 0);
    weir__free(b);
    b = get_ok(s, "empty", &len);
    CHECK_EQ(len, 0);
    weir__free(b);
    /* Overwritten whole. */
    CHECK_EQ(weir__storage_put(s, "COMPLETED-7", "seven", 5), 0);
    b = get_ok(s, "COMPLETED-7", &len);
    CHECK_EQ(len, 5);
    weir__free(b);
    /* max: a blob past it is -EFBIG. */
    CHECK_EQ(weir__storage_get(s, "COMPLETED-7", 4, &b, &len), -EFBIG);
    b = NULL;
    CHECK_EQ(weir__storage_get(s, "COMPLETED-7", 5, &b, &len), 0);
    weir__free(b);
    static const char *top[] = {"COMPLETED-7", "chk-7/", "empty"};
    check_names(s, "", top, 3);
    static const char *chk[] = {"chk-7/MANIFEST.json", "chk-7/count.0.state", "chk-7/sub/"};
    check_names(s, "chk-7/", chk, 3);
    static const char *part[] = {"COMPLETED-7"};
    check_names(s, "COMP", part, 1);
    check_names(s, "nothing/", NULL, 0);
    /* Another prefix of the same bucket sees none of it. */
    weir__storage *other = open_s3("job/two", NULL);
    check_names(other, "", NULL, 0);
    CHECK_EQ(weir__storage_get(other, "COMPLETED-7", 100, &b, &len), -ENOENT);
    weir__storage_close(other);
    /* Delete: a blob, a missing one, a prefix (the tree under it). */
    CHECK_EQ(weir__storage_delete(s, "empty"), 0);
    CHECK_EQ(weir__storage_delete(s, "empty"), -ENOENT);
    CHECK_EQ(weir__storage_delete(s, "chk-7/"), 0);
    CHECK_EQ(weir__storage_delete(s, "chk-7/"), -ENOENT);
    check_names(s, "", part, 1);
    CHECK_EQ(weir__storage_get(s, "chk-7/sub/deep", 100, &b, &len), -ENOENT);
    /* Names that need encoding, as the signature does it. */
    static const char *odd[] = {"a b/c+d", "a b/x&y=z", "a b/\xc3\xa9t\xc3\xa9", "a b/%41"};
    for (size_t i = 0; i < 4; i++) {
        CHECK_EQ(weir__storage_put(s, odd[i], odd[i], strlen(odd[i])), 0);
        b = get_ok(s, odd[i], &len);
        CHECK_EQ(len, strlen(odd[i]));
        CHECK(memcmp(b, odd[i], len) == 0);
        weir__free(b);
    }
    static const char *odd_sorted[] = {"a b/%41", "a b/c+d", "a b/x&y=z", "a b/\xc3\xa9t\xc3\xa9"};
    check_names(s, "a b/", odd_sorted, 4);
    static const char *odd_top[] = {"COMPLETED-7", "a b/"};
    check_names(s, "", odd_top, 2);
    CHECK_EQ(weir__storage_delete(s, "a b/x&y=z"), 0);
    CHECK_EQ(weir__storage_delete(s, "a b/"), 0);
    check_ranges(s);
    /* A bigger blob, whole and by ranges. */
    size_t big = 3 << 20;
    uint8_t *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (uint8_t)(i * 13 + (i >> 9));
    CHECK_EQ(weir__storage_put_now(s, "big", data, big), 0);
    CHECK_EQ(weir__storage_get(s, "big", big, &b, &len), 0);
    CHECK_EQ(len, big);
    CHECK(memcmp(b, data, big) == 0);
    weir__free(b);
    CHECK_EQ(weir__storage_get(s, "big", big - 1, &b, &len), -EFBIG);
    uint8_t piece[4096];
    size_t got;
    CHECK_EQ(weir__storage_range_now(s, "big", big - 1000, sizeof(piece), piece, &got), 0);
    CHECK_EQ(got, 1000);
    CHECK(memcmp(piece, data + big - 1000, 1000) == 0);
    free(data);
    CHECK_EQ(weir__storage_delete(s, "big"), 0);
    CHECK_EQ(weir__storage_delete(s, "COMPLETED-7"), 0);
    check_names(s, "", NULL, 0);
    weir__storage_close(s);
    /* A store at the bucket's root. */
    s = open_s3("", NULL);
    CHECK_EQ(weir__storage_put(s, "rootblob", "r", 1), 0);
    weir__names ns;
    CHECK_EQ(weir__storage_list(s, "", &ns), 0);
    CHECK_EQ(ns.n, 1); /* job/one/ is empty: S3 has no directories */
    CHECK_STR(ns.v[0], "rootblob");
    weir__names_free(&ns);
    CHECK_EQ(weir__storage_delete(s, "rootblob"), 0);
    weir__storage_close(s);
}

/* From a fiber the calls are jobs on the caller's runtime's blocking pool,
 * whose threads then wait for the store's own runtime. */
static intptr_t fiber_calls(void *arg)
{
    weir__storage *s = arg;
    CHECK(weir_task_current() != NULL);
    CHECK_EQ(weir__storage_put(s, "f/x", "fiber", 5), 0);
    uint8_t *b = NULL;
    size_t len = 0;
    CHECK_EQ(weir__storage_get(s, "f/x", 100, &b, &len), 0);
    CHECK_EQ(len, 5);
    CHECK(memcmp(b, "fiber", 5) == 0);
    weir__free(b);
    weir__names ns;
    CHECK_EQ(weir__storage_list(s, "f/", &ns), 0);
    CHECK_EQ(ns.n, 1);
    CHECK_STR(ns.v[0], "f/x");
    weir__names_free(&ns);
    CHECK_EQ(weir__storage_delete(s, "f/"), 0);
    CHECK_EQ(weir__storage_get(s, "f/x", 100, &b, &len), -ENOENT);
    /* A store opened and freed on a scheduler thread (its runtime is
     * stopped from there). */
    weir__storage *t = open_s3("fiber", NULL);
    CHECK_EQ(weir__storage_put(t, "y", "1", 1), 0);
    CHECK_EQ(weir__storage_delete(t, "y"), 0);
    weir__storage_close(t);
    return 7;
}

TEST(calls_from_a_fiber)
{
    server_up();
    weir__storage *s = open_s3("fiber", NULL);
    CHECK_EQ(test_run_main(fiber_calls, s), 7);
    weir__storage_close(s);
}

/* ---- listings over many pages ------------------------------------------------------------ */
TEST(listings_follow_continuation_tokens)
{
    server_up();
    /* s3rver cannot continue a page that holds directories only (it makes
     * the token from the page's last object), so the directories come
     * after the blobs here. */
    weir__storage *s = open_s3("pages", "&max_keys=3");
    enum { N = 23, D = 2 };
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "k%03d", i);
        CHECK_EQ(weir__storage_put(s, name, name, strlen(name)), 0);
        snprintf(name, sizeof(name), "z%d/x%d", i % D, i);
        CHECK_EQ(weir__storage_put(s, name, name, strlen(name)), 0);
    }
    weir__names ns;
    CHECK_EQ(weir__storage_list(s, "", &ns), 0);
    CHECK_EQ(ns.n, N + D); /* k000 .. k022, z0/, z1/ */
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "k%03d", i);
        CHECK_STR(ns.v[i], name);
    }
    CHECK_STR(ns.v[N], "z0/");
    CHECK_STR(ns.v[N + 1], "z1/");
    weir__names_free(&ns);
    CHECK_EQ(weir__storage_list(s, "z1/", &ns), 0);
    CHECK_EQ(ns.n, N / 2);
    weir__names_free(&ns);
    /* A prefix delete over many pages. */
    weir__storage *up = open_s3("", "&max_keys=2");
    CHECK_EQ(weir__storage_delete(up, "pages/"), 0);
    CHECK_EQ(weir__storage_list(s, "", &ns), 0);
    CHECK_EQ(ns.n, 0);
    weir__names_free(&ns);
    weir__storage_close(up);
    weir__storage_close(s);
}

/* ---- 16 threads ------------------------------------------------------------------------- */
static weir__storage *shared;
static _Atomic int thread_errors;

static void *hammer(void *arg)
{
    int t = (int)(intptr_t)arg;
    char name[64], val[64];
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof(name), "t%02d/b%d", t, i);
        int n = snprintf(val, sizeof(val), "thread %d blob %d", t, i);
        if (weir__storage_put_now(shared, name, val, (size_t)n) != 0)
            atomic_fetch_add(&thread_errors, 1);
        uint8_t got[64];
        size_t g;
        if (weir__storage_range_now(shared, name, 7, 40, got, &g) != 0 || g != (size_t)n - 7 ||
            memcmp(got, val + 7, g) != 0)
            atomic_fetch_add(&thread_errors, 1);
        if (i % 3 == 2 && weir__storage_delete_now(shared, name) != 0)
            atomic_fetch_add(&thread_errors, 1);
    }
    return NULL;
}

TEST(sixteen_threads_at_once)
{
    server_up();
    shared = open_s3("threads", NULL);
    pthread_t th[16];
    double t0 = now_s();
    for (int i = 0; i < 16; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, hammer, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 16; i++)
        pthread_join(th[i], NULL);
    printf("  16 threads x 12 put+range (+ 4 deletes): %.2f s\n", now_s() - t0);
    CHECK_EQ(atomic_load(&thread_errors), 0);
    weir__names ns;
    CHECK_EQ(weir__storage_list(shared, "t05/", &ns), 0);
    CHECK_EQ(ns.n, 8);
    weir__names_free(&ns);
    CHECK_EQ(weir__storage_list(shared, "", &ns), 0);
    CHECK_EQ(ns.n, 16);
    weir__names_free(&ns);
    CHECK_EQ(weir__storage_delete(shared, "t05/"), 0);
    weir__storage_close(shared);
}

/* ---- wrong credentials -------------------------------------------------------------------- */
TEST(wrong_credentials_are_eacces)
{
    server_up();
    char path[] = "/tmp/weir-s3-log-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    /* s3rver checks the access key, not the SigV4 signature itself (its
     * V4 check is unimplemented): an unknown key is its 403. */
    weir__storage *s = open_s3("creds", "&access_key=env://WEIR_TEST_S3_WRONG_KEY"
                                        "&secret_key=env://WEIR_TEST_S3_WRONG");
    uint8_t *b;
    size_t len;
    int put = weir__storage_put(s, "x", "1", 1);
    int get = weir__storage_get(s, "x", 10, &b, &len);
    weir__names ns;
    int list = weir__storage_list(s, "", &ns);
    weir__storage_close(s);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    CHECK_EQ(put, -EACCES);
    CHECK_EQ(get, -EACCES);
    CHECK_EQ(list, -EACCES);
    char log[8192] = {0};
    CHECK(pread(fd, log, sizeof(log) - 1, 0) > 0);
    close(fd);
    unlink(path);
    CHECK_HAS(log, "HTTP 403 (InvalidAccessKeyId)");
    CHECK(strstr(log, "not-the-secret") == NULL);
    /* The right key still works: the failure was the secret's. */
    s = open_s3("creds", NULL);
    CHECK_EQ(weir__storage_put(s, "x", "1", 1), 0);
    CHECK_EQ(weir__storage_delete(s, "x"), 0);
    weir__storage_close(s);
}

/* ---- a server killed and started again ---------------------------------------------------- */
/* The server dies with the thread that started it (PR_SET_PDEATHSIG):
 * this one stays until the test lets it go. */
static _Atomic int restart_done;
static void *restart_later(void *arg)
{
    (void)arg;
    usleep(600 * 1000);
    server_start();
    while (!atomic_load(&restart_done))
        usleep(10000);
    return NULL;
}

TEST(a_server_killed_and_restarted)
{
    server_up();
    weir__storage *s = open_s3("restart", "&attempts=60");
    char name[32];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof(name), "blob-%02d", i);
        CHECK_EQ(weir__storage_put(s, name, name, strlen(name)), 0);
    }
    /* Kept-alive connections are in the pool: kill the server under them. */
    server_kill();
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, restart_later, NULL), 0);
    /* A call made while the server is down rides over the restart. */
    double t0 = now_s();
    size_t len;
    uint8_t *b = get_ok(s, "blob-03", &len);
    printf("  a get across the restart: %.2f s\n", now_s() - t0);
    CHECK_EQ(len, 7);
    CHECK(memcmp(b, "blob-03", 7) == 0);
    weir__free(b);
    /* Every blob survived, and every call works again. */
    weir__names ns;
    CHECK_EQ(weir__storage_list(s, "", &ns), 0);
    CHECK_EQ(ns.n, 20);
    weir__names_free(&ns);
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof(name), "blob-%02d", i);
        b = get_ok(s, name, &len);
        CHECK_EQ(len, strlen(name));
        weir__free(b);
    }
    /* Killed again, between calls this time (started by this thread now). */
    server_kill();
    atomic_store(&restart_done, 1);
    pthread_join(th, NULL);
    server_start();
    CHECK_EQ(weir__storage_put(s, "after", "a", 1), 0);
    CHECK_EQ(weir__storage_delete(s, ""), -EINVAL);
    weir__storage *up = open_s3("", NULL);
    CHECK_EQ(weir__storage_delete(up, "restart/"), 0);
    weir__storage_close(up);
    weir__storage_close(s);
}

TEST(a_server_down_fails_in_bounded_time)
{
    server_up();
    weir__storage *s = open_s3("down", "&timeout_ms=1500");
    CHECK_EQ(weir__storage_put(s, "x", "1", 1), 0);
    server_kill();
    double t0 = now_s();
    uint8_t *b;
    size_t len;
    int e = weir__storage_get(s, "x", 10, &b, &len);
    double took = now_s() - t0;
    printf("  a get with the server down: %s after %.2f s\n", weir_strerror(e), took);
    CHECK(e == -ECONNREFUSED || e == -ETIMEDOUT || e == -ECONNRESET);
    CHECK_LT(took, 5.0);
    t0 = now_s();
    CHECK_LT(weir__storage_put(s, "y", "1", 1), 0);
    CHECK_LT(now_s() - t0, 5.0);
    weir__storage_close(s);
    /* Up again: the blob is there (and the next tests have a server). */
    server_start();
    s = open_s3("down", NULL);
    b = get_ok(s, "x", &len);
    weir__free(b);
    CHECK_EQ(weir__storage_delete(s, "x"), 0);
    weir__storage_close(s);
}

/* ---- a hostile server ---------------------------------------------------------------------- */
enum {
    H_HUGE_LENGTH,
    H_GARBAGE_XML,
    H_NOT_LISTING,
    H_DOCTYPE,
    H_TOO_MANY,
    H_OUTSIDE,
    H_NO_TOKEN,
    H_BAD_RANGE,
    H_500,
    H_LONG_KEY,
    H_SAME_TOKEN
};
static struct {
    int fd, port;
    _Atomic int mode;
    _Atomic int stop;
    _Atomic int requests;
} evil;

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void reply(int fd, const char *status, const char *extra, const char *body, size_t n)
{
    char head[512];
    int h = snprintf(head, sizeof(head),
                     "HTTP/1.1 %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n", status, n,
                     extra);
    send_all(fd, head, (size_t)h);
    send_all(fd, body, n);
}

static void listing(int fd, const char *entries)
{
    char *b = malloc(strlen(entries) + 512);
    int n = sprintf(b,
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult "
                    "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
                    "<Prefix>p/</Prefix>%s</ListBucketResult>",
                    entries);
    reply(fd, "200 OK", "Content-Type: application/xml\r\n", b, (size_t)n);
    free(b);
}

static void *evil_server(void *arg)
{
    (void)arg;
    while (!atomic_load(&evil.stop)) {
        int c = accept(evil.fd, NULL, NULL);
        if (c < 0)
            continue;
        char req[8192];
        size_t got = 0;
        while (got < sizeof(req) - 1) { /* the head is enough: no request here has a body */
            ssize_t r = recv(c, req + got, sizeof(req) - 1 - got, 0);
            if (r <= 0)
                break;
            got += (size_t)r;
            req[got] = '\0';
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        atomic_fetch_add(&evil.requests, 1);
        switch (atomic_load(&evil.mode)) {
        case H_HUGE_LENGTH: {
            const char *h = "HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\nxxxx";
            send_all(c, h, strlen(h));
            break;
        }
        case H_GARBAGE_XML:
            listing(c, "<Contents><Key>p/a</Key></Contents><Contents><<<&&&");
            break;
        case H_NOT_LISTING:
            reply(c, "200 OK", "", "<Other><Key>p/a</Key></Other>", 29);
            break;
        case H_DOCTYPE: {
            const char *b = "<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\">"
                            "<!ENTITY lol2 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">]>"
                            "<ListBucketResult><Contents><Key>p/&lol2;</Key></Contents>"
                            "</ListBucketResult>";
            reply(c, "200 OK", "", b, strlen(b));
            break;
        }
        case H_TOO_MANY: {
            size_t cap = 20000 * 40 + 1, n = 0;
            char *e = malloc(cap);
            for (int i = 0; i < 20000; i++)
                n += (size_t)snprintf(e + n, cap - n, "<Contents><Key>p/k%d</Key></Contents>", i);
            listing(c, e);
            free(e);
            break;
        }
        case H_OUTSIDE:
            listing(c, "<Contents><Key>elsewhere/secret</Key></Contents>"
                       "<IsTruncated>false</IsTruncated>");
            break;
        case H_SAME_TOKEN:
            listing(c, "<Contents><Key>p/a</Key></Contents><IsTruncated>true</IsTruncated>"
                       "<NextContinuationToken>again</NextContinuationToken>");
            break;
        case H_NO_TOKEN:
            listing(c, "<Contents><Key>p/a</Key></Contents><IsTruncated>true</IsTruncated>");
            break;
        case H_BAD_RANGE:
            reply(c, "206 Partial Content", "Content-Range: bytes 0-3/10\r\n", "abcd", 4);
            break;
        case H_500:
            reply(c, "503 Slow Down", "", "<Error><Code>SlowDown</Code></Error>", 36);
            break;
        case H_LONG_KEY: {
            size_t kl = 100000;
            char *e = malloc(kl + 64);
            strcpy(e, "<Contents><Key>p/");
            memset(e + strlen(e), 'k', kl);
            strcpy(e + 17 + kl, "</Key></Contents>");
            listing(c, e);
            free(e);
            break;
        }
        }
        shutdown(c, SHUT_WR);
        close(c);
    }
    return NULL;
}

TEST(a_hostile_server_gets_clean_errors)
{
    evil.fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(bind(evil.fd, (struct sockaddr *)&a, sizeof(a)), 0);
    CHECK_EQ(listen(evil.fd, 64), 0);
    socklen_t l = sizeof(a);
    CHECK_EQ(getsockname(evil.fd, (struct sockaddr *)&a, &l), 0);
    evil.port = ntohs(a.sin_port);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, evil_server, NULL), 0);
    char uri[256];
    snprintf(uri, sizeof(uri), "s3://" BUCKET "/p?endpoint=127.0.0.1:%d&timeout_ms=3000&attempts=3",
             evil.port);
    weir__storage *s;
    CHECK_EQ(weir__storage_open(uri, &s), 0);
    uint8_t *b;
    size_t len;
    weir__names ns;
    double t0 = now_s();
    atomic_store(&evil.mode, H_HUGE_LENGTH);
    CHECK_EQ(weir__storage_get(s, "x", 1 << 20, &b, &len), -EFBIG);
    atomic_store(&evil.mode, H_GARBAGE_XML);
    CHECK_EQ(weir__storage_list(s, "", &ns), -EBADMSG);
    atomic_store(&evil.mode, H_NOT_LISTING);
    CHECK_EQ(weir__storage_list(s, "", &ns), -EBADMSG);
    atomic_store(&evil.mode, H_DOCTYPE);
    CHECK_EQ(weir__storage_list(s, "", &ns), -EBADMSG);
    atomic_store(&evil.mode, H_TOO_MANY);
    CHECK_EQ(weir__storage_list(s, "", &ns), -EBADMSG);
    atomic_store(&evil.mode, H_OUTSIDE);
    CHECK_EQ(weir__storage_list(s, "", &ns), -EBADMSG);
    atomic_store(&evil.mode, H_NO_TOKEN);
    CHECK_EQ(weir__storage_list(s, "", &ns), -EBADMSG);
    atomic_store(&evil.mode, H_SAME_TOKEN);
    CHECK_EQ(weir__storage_list(s, "", &ns), -EBADMSG);
    atomic_store(&evil.mode, H_LONG_KEY);
    CHECK_EQ(weir__storage_list(s, "", &ns), -EBADMSG);
    atomic_store(&evil.mode, H_BAD_RANGE);
    uint8_t buf[16];
    size_t got;
    CHECK_EQ(weir__storage_range_now(s, "x", 2, 4, buf, &got), -EBADMSG);
    /* A 5xx is retried, then -EIO. */
    atomic_store(&evil.mode, H_500);
    int before = atomic_load(&evil.requests);
    CHECK_EQ(weir__storage_put(s, "x", "1", 1), -EIO);
    CHECK_EQ(atomic_load(&evil.requests) - before, 3);
    printf("  every hostile answer refused in %.2f s\n", now_s() - t0);
    weir__storage_close(s);
    atomic_store(&evil.stop, 1);
    shutdown(evil.fd, SHUT_RDWR);
    close(evil.fd);
    pthread_join(th, NULL);
}

/* ---- the remote-read state backend on an S3 pool --------------------------------------------- */
#define GROUPS 8

static int group_of(const char *k, size_t kl)
{
    return weir_key_group(weir_key_hash(k, kl), GROUPS);
}

TEST(remote_state_on_s3)
{
    server_up();
    char uri[256];
    snprintf(uri, sizeof(uri),
             "remote:s3://" BUCKET "/state?endpoint=127.0.0.1:%d&hot_max_bytes=0&io_threads=4",
             srv.port);
    weir_state_backend *b = NULL;
    /* The backend's options are its own; the rest go to the pool's URI. */
    char bad[300];
    snprintf(bad, sizeof(bad), "%s&colour=blue", uri);
    CHECK_EQ(weir_state_backend_open(bad, GROUPS, 0, GROUPS, &b), -EINVAL);
    CHECK_EQ(weir_state_backend_open(uri, GROUPS, 0, GROUPS, &b), 0);
    enum { N = 3000 };
    char k[32], v[64];
    for (int i = 0; i < N; i++) {
        size_t kl = (size_t)snprintf(k, sizeof(k), "key-%05d", i);
        int vl = snprintf(v, sizeof(v), "value %d", i * 7);
        CHECK_EQ(weir_state_put(b, group_of(k, kl), k, kl, v, (size_t)vl), 0);
    }
    weir_state_snapshot *snap;
    CHECK_EQ(weir_state_capture(b, 1, &snap), 0);
    const void *img;
    size_t ilen;
    CHECK_EQ(weir_state_snapshot_encode(snap, &img, &ilen), 0);
    uint8_t *handle = malloc(ilen);
    memcpy(handle, img, ilen);
    weir_state_snapshot_free(snap);
    weir_state_backend_free(b);
    /* The runs are objects of the bucket. */
    weir__storage *pool = open_s3("state", NULL);
    weir__names ns;
    CHECK_EQ(weir__storage_list(pool, "", &ns), 0);
    CHECK_GT(ns.n, 0);
    weir__names_free(&ns);
    weir__storage_close(pool);
    /* A lazy restore in a new backend: every read goes to the pool. */
    weir_state_backend *r = NULL;
    CHECK_EQ(weir_state_backend_open(uri, GROUPS, 0, GROUPS, &r), 0);
    char why[128];
    CHECK_EQ(weir_state_restore_image(r, handle, ilen, why, sizeof(why)), 0);
    for (int i = 0; i < N; i += 7) {
        size_t kl = (size_t)snprintf(k, sizeof(k), "key-%05d", i);
        int vl = snprintf(v, sizeof(v), "value %d", i * 7);
        const void *val;
        size_t got;
        CHECK_EQ(weir_state_get(r, group_of(k, kl), k, kl, &val, &got), 0);
        CHECK_EQ(got, (size_t)vl);
        CHECK(memcmp(val, v, got) == 0);
    }
    const void *val;
    size_t got;
    CHECK_EQ(weir_state_get(r, group_of("nope", 4), "nope", 4, &val, &got), -ENOENT);
    weir__remote_stat st;
    weir__remote_stats(r, &st);
    CHECK_GT(st.cold_reads, 0);
    weir_state_backend_free(r);
    free(handle);
    server_down(); /* the last test */
}

TEST_MAIN()
