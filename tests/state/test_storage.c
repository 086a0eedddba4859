/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_storage.c - the storage interface (state/storage.h): names refused
 * before a store sees them, the local directory store's put / get / list
 * / delete (atomic publication, no temporary file left, pruning a prefix),
 * opening by URI, the calls from a fiber running on the blocking pool and
 * not on the fiber's thread, a wait that a cancel does not cut short,
 * snapshots persisted and restored through a store with the reason of
 * a refusal in the caller's buffer, and a restored image checked whole on
 * the blocking pool (its checksum never computed on a scheduler thread)
 * before the backend loads it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "state/state_int.h"
#include "state/storage.h"
#include "store_checks.h"
#include "test.h"
#include "test_rt.h"
#include "weir/rt.h"
#include "weir/state.h"

static char base[64];

static void make_base(void)
{
    strcpy(base, "/tmp/weir-storage-XXXXXX");
    CHECK(mkdtemp(base) != NULL);
}

static void rm_base(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    CHECK_EQ(system(cmd), 0);
}

static int exists(const char *rel)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", base, rel);
    return stat(path, &st) == 0;
}

TEST(names_are_checked)
{
    static const char *good[] = {"a", "COMPLETED-7", "chk-7/count.0.state", "a/b/c"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        CHECK_EQ(weir__storage_check_name(good[i], 0), 0);
    static const char *bad[] = {"",     "/abs", "a//b",    "..",  "../x", "a/../b", "a/.",
                                ".tmp", "a/",   "a/.lock", "./a", "a/..", "/"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (weir__storage_check_name(bad[i], 0) != -EINVAL)
            fprintf(stderr, "accepted \"%s\"\n", bad[i]);
        CHECK_EQ(weir__storage_check_name(bad[i], 0), -EINVAL);
    }
    /* Prefixes (list, delete): "" and a trailing '/' are fine, the rest not. */
    CHECK_EQ(weir__storage_check_name("", 1), 0);
    CHECK_EQ(weir__storage_check_name("chk-7/", 1), 0);
    CHECK_EQ(weir__storage_check_name("COMPLETED-", 1), 0);
    CHECK_EQ(weir__storage_check_name("a//", 1), -EINVAL);
    CHECK_EQ(weir__storage_check_name("../", 1), -EINVAL);
    char *longname = malloc(WEIR__STORAGE_NAME_MAX + 2);
    memset(longname, 'x', WEIR__STORAGE_NAME_MAX + 1);
    longname[WEIR__STORAGE_NAME_MAX + 1] = '\0';
    CHECK_EQ(weir__storage_check_name(longname, 0), -ENAMETOOLONG);
    longname[WEIR__STORAGE_NAME_MAX] = '\0';
    CHECK_EQ(weir__storage_check_name(longname, 0), 0);
    free(longname);
    CHECK_EQ(weir__storage_check_name(NULL, 1), -EINVAL);
}

TEST(open_by_uri)
{
    make_base();
    weir__storage *s;
    CHECK_EQ(weir__storage_open("nope://x", &s), -EPROTONOSUPPORT);
    CHECK_EQ(weir__storage_open("file://", &s), -EINVAL);
    CHECK_EQ(weir__storage_open("", &s), -EINVAL);
    char uri[128];
    snprintf(uri, sizeof(uri), "file://%s/", base); /* file:///tmp/...: the absolute path */
    CHECK_EQ(weir__storage_open(uri, &s), 0);
    CHECK_STR(weir__storage_dir_path(s), base);
    CHECK_EQ(weir__storage_put(s, "x", "1", 1), 0);
    weir__storage_close(s);
    CHECK(exists("x"));
    CHECK_EQ(weir__storage_open(base, &s), 0); /* a plain path */
    uint8_t *buf;
    size_t len;
    CHECK_EQ(weir__storage_get(s, "x", 16, &buf, &len), 0);
    CHECK_EQ(len, 1);
    CHECK_EQ(buf[0], '1');
    weir__free(buf);
    weir__storage_close(s);
    rm_base();
}

/* Every call of the directory store, off the runtime (inline) or from a
 * fiber (on the pool): the same answers. */
static intptr_t dir_calls(void *arg)
{
    weir__storage *s = arg;
    CHECK_EQ(weir__storage_put(s, "COMPLETED-3", "done", 4), 0);
    CHECK_EQ(weir__storage_put(s, "chk-3/b.state", "bb", 2), 0);
    CHECK_EQ(weir__storage_put(s, "chk-3/a.state", "a", 1), 0);
    CHECK_EQ(weir__storage_put(s, "chk-4/deep/x", "", 0), 0);
    /* A put replaces the blob whole. */
    CHECK_EQ(weir__storage_put(s, "chk-3/a.state", "AAAA", 4), 0);
    uint8_t *buf;
    size_t len;
    CHECK_EQ(weir__storage_get(s, "chk-3/a.state", 16, &buf, &len), 0);
    CHECK_EQ(len, 4);
    CHECK_EQ(memcmp(buf, "AAAA", 4), 0);
    weir__free(buf);
    CHECK_EQ(weir__storage_get(s, "chk-3/a.state", 3, &buf, &len), -EFBIG);
    CHECK_EQ(weir__storage_get(s, "chk-3/none", 16, &buf, &len), -ENOENT);
    CHECK_EQ(weir__storage_get(s, "chk-4/deep/x", 16, &buf, &len), 0);
    CHECK_EQ(len, 0);
    weir__free(buf);
    /* One level, sorted, directories with a '/', no temporary files. */
    weir__names ns;
    CHECK_EQ(weir__storage_list(s, "", &ns), 0);
    CHECK_EQ(ns.n, 3);
    CHECK_STR(ns.v[0], "COMPLETED-3");
    CHECK_STR(ns.v[1], "chk-3/");
    CHECK_STR(ns.v[2], "chk-4/");
    weir__names_free(&ns);
    CHECK_EQ(weir__storage_list(s, "chk-3/", &ns), 0);
    CHECK_EQ(ns.n, 2);
    CHECK_STR(ns.v[0], "chk-3/a.state");
    CHECK_STR(ns.v[1], "chk-3/b.state");
    weir__names_free(&ns);
    CHECK_EQ(weir__storage_list(s, "chk-3/b", &ns), 0);
    CHECK_EQ(ns.n, 1);
    CHECK_STR(ns.v[0], "chk-3/b.state");
    weir__names_free(&ns);
    CHECK_EQ(weir__storage_list(s, "COMPLETED-", &ns), 0);
    CHECK_EQ(ns.n, 1);
    weir__names_free(&ns);
    CHECK_EQ(weir__storage_list(s, "chk-9/", &ns), 0); /* missing: empty */
    CHECK_EQ(ns.n, 0);
    weir__names_free(&ns);
    /* Bad names never reach the store. */
    CHECK_EQ(weir__storage_put(s, "../escape", "x", 1), -EINVAL);
    CHECK_EQ(weir__storage_get(s, "/etc/passwd", 16, &buf, &len), -EINVAL);
    CHECK_EQ(weir__storage_list(s, "..", &ns), -EINVAL);
    CHECK_EQ(weir__storage_delete(s, ""), -EINVAL);
    /* Delete a blob, then a whole prefix. */
    CHECK_EQ(weir__storage_delete(s, "COMPLETED-3"), 0);
    CHECK_EQ(weir__storage_delete(s, "COMPLETED-3"), -ENOENT);
    CHECK_EQ(weir__storage_delete(s, "chk-4/"), 0);
    CHECK_EQ(weir__storage_delete(s, "chk-3/"), 0);
    CHECK_EQ(weir__storage_list(s, "", &ns), 0);
    CHECK_EQ(ns.n, 0);
    weir__names_free(&ns);
    return 0;
}

TEST(directory_store_inline_and_on_the_pool)
{
    for (int on_rt = 0; on_rt < 2; on_rt++) {
        make_base();
        weir__storage *s;
        CHECK_EQ(weir__storage_open(base, &s), 0);
        if (on_rt)
            CHECK_EQ(test_run_on_rt(2, dir_calls, s), 0);
        else
            CHECK_EQ(dir_calls(s), 0);
        /* Nothing but the (empty) root is left: no ".<name>.tmp". */
        char cmd[160];
        snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s)\"", base);
        CHECK_EQ(system(cmd), 0);
        weir__storage_close(s);
        rm_base();
    }
}

/* The in-memory store answers as the directory store does, and keeps its
 * blobs for the next open of its name. */
TEST(memory_store_inline_and_on_the_pool)
{
    for (int on_rt = 0; on_rt < 2; on_rt++) {
        weir__storage *s;
        CHECK_EQ(weir__storage_open(on_rt ? "mem://calls-rt" : "mem://calls", &s), 0);
        CHECK(weir__storage_dir_path(s) == NULL);
        if (on_rt)
            CHECK_EQ(test_run_on_rt(2, dir_calls, s), 0);
        else
            CHECK_EQ(dir_calls(s), 0);
        weir__storage_close(s);
    }
    weir__storage *a, *b, *c;
    CHECK_EQ(weir__storage_open("mem://kept", &a), 0);
    CHECK_EQ(weir__storage_put(a, "d/x", "xyz", 3), 0);
    CHECK_EQ(weir__storage_put(a, "d.y", "", 0), 0);
    weir__storage_close(a);
    CHECK_EQ(weir__storage_open("mem://kept", &b), 0);
    CHECK_EQ(weir__storage_open("mem://other", &c), 0);
    uint8_t *buf;
    size_t len;
    CHECK_EQ(weir__storage_get(b, "d/x", 16, &buf, &len), 0);
    CHECK_EQ(len, 3);
    CHECK_EQ(memcmp(buf, "xyz", 3), 0);
    weir__free(buf);
    CHECK_EQ(weir__storage_get(c, "d/x", 16, &buf, &len), -ENOENT);
    weir__names ns;
    CHECK_EQ(weir__storage_list(b, "", &ns), 0); /* "d.y" < "d/" in byte order */
    CHECK_EQ(ns.n, 2);
    CHECK_STR(ns.v[0], "d.y");
    CHECK_STR(ns.v[1], "d/");
    weir__names_free(&ns);
    CHECK_EQ(weir__storage_delete(b, "e/"), -ENOENT);
    CHECK_EQ(weir__storage_delete(b, "d/"), 0);
    CHECK_EQ(weir__storage_delete(b, "d.y"), 0);
    weir__storage_close(b);
    weir__storage_close(c);
}

static intptr_t timed_get(void *arg)
{
    weir__storage *s = arg;
    uint8_t *buf;
    size_t len;
    for (int i = 0; i < 5; i++) {
        int64_t t0 = weir_time_now();
        CHECK_EQ(weir__storage_get(s, "x", 16, &buf, &len), 0);
        /* At least the latency (a lower bound: a loaded machine only adds). */
        CHECK_GE(weir_time_now() - t0, 2 * WEIR_MSEC);
        weir__free(buf);
    }
    return 0;
}

/* latency:// answers as its store does, each call at least its latency
 * later; a malformed latency or store is refused. */
TEST(latency_store_adds_its_round_trip)
{
    weir__storage *s;
    CHECK_EQ(weir__storage_open("latency://0-0.5/mem://lat-calls", &s), 0);
    CHECK_EQ(test_run_on_rt(2, dir_calls, s), 0);
    weir__storage_close(s);
    CHECK_EQ(weir__storage_open("latency://2/mem://lat-timed", &s), 0);
    CHECK_EQ(weir__storage_put(s, "x", "1", 1), 0);
    CHECK_EQ(test_run_on_rt(2, timed_get, s), 0);
    weir__storage_close(s);
    static const char *bad[] = {"latency://",
                                "latency://x/mem://a",
                                "latency://5",
                                "latency://5/",
                                "latency://5-1/mem://a",
                                "latency://-1/mem://a",
                                "latency://99999999/mem://a",
                                "latency://60000.5/mem://a",
                                "latency://0-60000.001/mem://a",
                                "latency://1-/mem://a"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (weir__storage_open(bad[i], &s) != -EINVAL)
            TEST__FAIL("%s was not refused", bad[i]);
    CHECK_EQ(weir__storage_open("latency://1/nope://a", &s), -EPROTONOSUPPORT);
}

TEST(ranged_reads_on_every_store)
{
    make_base();
    char uri[128];
    snprintf(uri, sizeof(uri), "file://%s", base);
    const char *uris[] = {uri, "mem://ranges", "latency://0-0.2/mem://ranges-lat"};
    for (size_t i = 0; i < sizeof(uris) / sizeof(uris[0]); i++) {
        weir__storage *s;
        CHECK_EQ(weir__storage_open(uris[i], &s), 0);
        CHECK(s->ops->get_range != NULL);
        check_ranges(s);
        weir__storage_close(s);
    }
    /* A store without get_range: the range of a whole get. */
    static weir__storage_ops whole;
    whole = weir__storage_mem_ops;
    whole.get_range = NULL;
    weir__storage *s;
    CHECK_EQ(weir__storage_open("mem://ranges-whole", &s), 0);
    s->ops = &whole;
    check_ranges(s);
    weir__storage_close(s);
    rm_base();
}

/* A store that records where its methods run, and can hold a put until
 * released: to see the calls leave the caller's thread, and a given-up
 * wait outlived by its call. */
typedef struct probe_store {
    weir__storage base;
    pthread_t put_thread;
    _Atomic int puts, hold, held, freed;
} probe_store;

static int probe_put(weir__storage *s, const char *name, const void *buf, size_t len)
{
    probe_store *p = (probe_store *)s;
    (void)name, (void)buf, (void)len;
    p->put_thread = pthread_self();
    atomic_store(&p->held, 1);
    while (atomic_load(&p->hold))
        usleep(1000);
    atomic_fetch_add(&p->puts, 1);
    return 0;
}

static int probe_get(weir__storage *s, const char *name, size_t max, uint8_t **buf, size_t *len)
{
    (void)s, (void)name, (void)max, (void)buf, (void)len;
    return -ENOENT;
}

static int probe_list(weir__storage *s, const char *prefix, weir__names *out)
{
    (void)s, (void)prefix;
    *out = (weir__names){0};
    return 0;
}

static int probe_del(weir__storage *s, const char *name)
{
    (void)s, (void)name;
    return 0;
}

static void probe_free(weir__storage *s)
{
    atomic_store(&((probe_store *)s)->freed, 1);
}

static const weir__storage_ops probe_ops = {"probe",    NULL,      probe_put,  probe_get,
                                            probe_list, probe_del, probe_free, NULL};

static _Atomic int released;
static void count_release(void *owner)
{
    (void)owner;
    atomic_fetch_add(&released, 1);
}

static intptr_t off_thread(void *arg)
{
    probe_store *p = arg;
    CHECK_EQ(weir__storage_put(&p->base, "x", "y", 1), 0);
    CHECK_EQ(atomic_load(&p->puts), 1);
    CHECK(!pthread_equal(p->put_thread, pthread_self())); /* the pool's thread */
    return 0;
}

/* A put held inside the store while its task is cancelled: the wait is
 * shielded, so the task gets the put's own result once it has finished. */
typedef struct held_put {
    probe_store *p;
    int result;
} held_put;

static intptr_t put_held(void *arg)
{
    held_put *h = arg;
    weir__storage_req *rq;
    weir__blob b = {.buf = "z", .len = 1, .release = count_release};
    CHECK_EQ(weir__storage_put_start(&h->p->base, "y", &b, &rq), 0);
    weir_op *op = weir__storage_req_op(rq);
    weir_op_cancel(op); /* ignored too */
    h->result = weir__storage_end(rq, weir_op_wait(op), NULL, NULL, NULL);
    return 0;
}

static intptr_t cancel_while_held(void *arg)
{
    probe_store *p = arg;
    atomic_store(&p->hold, 1);
    atomic_store(&p->held, 0);
    held_put h = {p, -1};
    weir_task *t = weir_task_spawn(put_held, &h, &(weir_spawn_opts){.name = "put"});
    CHECK(t != NULL);
    while (!atomic_load(&p->held))
        weir_time_sleep(WEIR_MSEC);
    CHECK_EQ(weir_task_cancel(t), 0);
    weir_time_sleep(20 * WEIR_MSEC); /* (a chance to end early, which it must not take) */
    CHECK_EQ(h.result, -1);
    CHECK_EQ(atomic_load(&released), 0); /* the put still has the bytes */
    weir__storage_close(&p->base);       /* the opener's reference: the request keeps it */
    CHECK_EQ(atomic_load(&p->freed), 0);
    atomic_store(&p->hold, 0);
    weir_task_join(t, NULL, WEIR_FOREVER);
    CHECK_EQ(h.result, 0);
    CHECK_EQ(atomic_load(&p->puts), 2);
    CHECK_EQ(atomic_load(&released), 1);
    while (!atomic_load(&p->freed)) /* the pool job's reference goes last */
        weir_time_sleep(WEIR_MSEC);
    return 0;
}

TEST(calls_leave_the_callers_thread)
{
    probe_store p = {.base = {.ops = &probe_ops}};
    atomic_init(&p.base.refs, 1);
    CHECK_EQ(test_run_on_rt(1, off_thread, &p), 0);
    CHECK_EQ(test_run_on_rt(2, cancel_while_held, &p), 0);
    /* Off the runtime a start is refused, and its blob released. */
    weir__storage_req *rq;
    weir__blob b = {.buf = "z", .len = 1, .release = count_release};
    atomic_store(&released, 0);
    CHECK_EQ(weir__storage_put_start(&p.base, "y", &b, &rq), -EINVAL);
    CHECK_EQ(atomic_load(&released), 1);
}

/* ---- snapshots through a store -------------------------------------------------------------- */
static intptr_t snap_roundtrip(void *arg)
{
    weir__storage *s = arg;
    weir_state_backend *b = weir_state_memory_new(16, 0, 16);
    CHECK(b != NULL);
    for (int i = 0; i < 1000; i++) {
        char k[16];
        int n = snprintf(k, sizeof(k), "k%d", i);
        CHECK_EQ(weir_state_put(b, i % 16, k, (size_t)n, &i, sizeof(i)), 0);
    }
    weir_state_snapshot *snap;
    CHECK_EQ(weir_state_capture(b, 5, &snap), 0);
    CHECK_EQ(weir__state_persist_to(s, "chk-5/op.0.state", snap), 0); /* takes snap */
    /* The blob is the file weir_state_persist writes. */
    weir_state_snapshot *again;
    CHECK_EQ(weir_state_capture(b, 5, &again), 0);
    const void *img;
    size_t ilen;
    CHECK_EQ(weir_state_snapshot_encode(again, &img, &ilen), 0);
    const void *img2;
    size_t ilen2;
    CHECK_EQ(weir_state_snapshot_encode(again, &img2, &ilen2), 0); /* sealed once */
    CHECK_EQ(ilen2, ilen);
    uint8_t *got;
    size_t glen;
    CHECK_EQ(weir__storage_get(s, "chk-5/op.0.state", WEIR__SNAP_MAX_FILE, &got, &glen), 0);
    CHECK_EQ(glen, ilen);
    CHECK_EQ(memcmp(got, img, ilen), 0);
    weir_state_snapshot_free(again);

    char why[256] = "stale";
    weir_state_backend *r = weir_state_memory_new(16, 4, 8);
    CHECK_EQ(weir__state_restore_from(s, "chk-5/op.0.state", r, why, sizeof(why)), 0);
    CHECK_STR(why, "");
    size_t total = 0;
    for (int kg = 4; kg < 8; kg++)
        total += weir_state_entries(r, kg);
    CHECK_EQ(total, weir_state_entries(b, 4) + weir_state_entries(b, 5) + weir_state_entries(b, 6) +
                        weir_state_entries(b, 7));
    /* A damaged blob: refused whole, the reason in our buffer. */
    got[glen / 2] ^= 1;
    CHECK_EQ(weir__storage_put(s, "chk-5/bad.state", got, glen), 0);
    CHECK_EQ(weir__state_restore_from(s, "chk-5/bad.state", r, why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, "checksum");
    CHECK_EQ(weir_state_restore_image(r, got, 10, why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, "not a weir state snapshot");
    CHECK_EQ(weir_state_restore_image(r, got, 10, NULL, 0), -EBADMSG); /* no buffer: fine */
    CHECK_EQ(weir__state_restore_from(s, "chk-5/none", r, why, sizeof(why)), -ENOENT);
    CHECK_STR(why, "");
    weir__free(got);
    weir_state_backend_free(r);
    weir_state_backend_free(b);
    return 0;
}

/* ---- the check of a restored image, on the pool --------------------------------------------- */
/* XXH64 is the snapshot checksum (state/snapshot.c calls libxxhash's):
 * defined here, it counts where it runs while `counting` is set - inside
 * a task (a scheduler thread) or not (a pool thread) - and calls the
 * library's. */
static _Atomic int counting;
static _Atomic unsigned long sums_on_task, sums_off_task;

XXH64_hash_t XXH64(const void *p, size_t n, XXH64_hash_t seed)
{
    typedef XXH64_hash_t (*xxh64_fn)(const void *, size_t, XXH64_hash_t);
    static _Atomic(xxh64_fn) real;
    xxh64_fn fn = atomic_load(&real);
    if (!fn) {
        void *sym = dlsym(RTLD_NEXT, "XXH64");
        CHECK(sym != NULL);
        memcpy(&fn, &sym, sizeof(fn)); /* (ISO C has no cast from void * to a function) */
        atomic_store(&real, fn);
    }
    if (atomic_load(&counting))
        atomic_fetch_add(weir_task_current() ? &sums_on_task : &sums_off_task, 1);
    return fn(p, n, seed);
}

/* A backend that counts its restore calls and hands them to a memory
 * backend. */
typedef struct probe_backend {
    weir_state_backend base;
    weir_state_backend *in;
    int restores, checked;
} probe_backend;

static int probe_restore(weir_state_backend *b, const uint8_t *img, size_t len, char *why,
                         size_t cap)
{
    probe_backend *p = (probe_backend *)b;
    p->restores++;
    return p->in->ops->restore(p->in, img, len, why, cap);
}

static int probe_restore_checked(weir_state_backend *b, const uint8_t *img, size_t len, char *why,
                                 size_t cap)
{
    probe_backend *p = (probe_backend *)b;
    p->checked++;
    return p->in->ops->restore_checked(p->in, img, len, why, cap);
}

static const weir_state_backend_ops probe_checked_ops = {
    .name = "probe", .restore = probe_restore, .restore_checked = probe_restore_checked};
static const weir_state_backend_ops probe_plain_ops = {.name = "probe-plain",
                                                       .restore = probe_restore};

static probe_backend probe_new(const weir_state_backend_ops *ops)
{
    probe_backend p = {.in = weir_state_memory_new(16, 0, 16)};
    CHECK(p.in != NULL);
    p.base = *p.in;
    p.base.ops = ops;
    return p;
}

static intptr_t restore_checks_off_thread(void *arg)
{
    weir__storage *s = arg;
    weir_state_backend *b = weir_state_memory_new(16, 0, 16);
    CHECK(b != NULL);
    for (int i = 0; i < 1000; i++) {
        char k[16];
        int n = snprintf(k, sizeof(k), "k%d", i);
        CHECK_EQ(weir_state_put(b, i % 16, k, (size_t)n, &i, sizeof(i)), 0);
    }
    weir_state_snapshot *snap;
    CHECK_EQ(weir_state_capture(b, 1, &snap), 0);
    CHECK_EQ(weir__state_persist_to(s, "chk-1/p.state", snap), 0);
    uint8_t *img;
    size_t len;
    CHECK_EQ(weir__storage_get(s, "chk-1/p.state", WEIR__SNAP_MAX_FILE, &img, &len), 0);
    img[len / 2] ^= 1;
    CHECK_EQ(weir__storage_put(s, "chk-1/bad.state", img, len), 0);
    weir__free(img);
    char why[256];

    /* A good image: checked on a pool thread, then loaded through
     * restore_checked (restore, which checks it again, not called). */
    probe_backend p = probe_new(&probe_checked_ops);
    atomic_store(&counting, 1);
    CHECK_EQ(weir__state_restore_from(s, "chk-1/p.state", &p.base, why, sizeof(why)), 0);
    atomic_store(&counting, 0);
    CHECK_EQ(p.checked, 1);
    CHECK_EQ(p.restores, 0);
    CHECK_EQ(atomic_load(&sums_on_task), 0);
    CHECK_GE(atomic_load(&sums_off_task), 1);
    for (int kg = 0; kg < 16; kg++)
        CHECK_EQ(weir_state_entries(p.in, kg), weir_state_entries(b, kg));

    /* A damaged one: refused there, the backend never asked. */
    atomic_store(&sums_off_task, 0);
    atomic_store(&counting, 1);
    CHECK_EQ(weir__state_restore_from(s, "chk-1/bad.state", &p.base, why, sizeof(why)), -EBADMSG);
    atomic_store(&counting, 0);
    CHECK_HAS(why, "checksum");
    CHECK_EQ(p.checked + p.restores, 1); /* only the good image's */
    CHECK_EQ(atomic_load(&sums_on_task), 0);
    CHECK_GE(atomic_load(&sums_off_task), 1);
    /* (what it held is untouched) */
    for (int kg = 0; kg < 16; kg++)
        CHECK_EQ(weir_state_entries(p.in, kg), weir_state_entries(b, kg));
    weir_state_backend_free(p.in);

    /* A backend without restore_checked gets restore, as before. */
    probe_backend q = probe_new(&probe_plain_ops);
    CHECK_EQ(weir__state_restore_from(s, "chk-1/p.state", &q.base, why, sizeof(why)), 0);
    CHECK_EQ(q.restores, 1);
    CHECK_EQ(weir_state_entries(q.in, 3), weir_state_entries(b, 3));
    CHECK_EQ(weir__state_restore_from(s, "chk-1/bad.state", &q.base, why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, "checksum");
    weir_state_backend_free(q.in);
    weir_state_backend_free(b);
    return 0;
}

TEST(restore_checks_the_image_off_the_owners_thread)
{
    make_base();
    weir__storage *s;
    CHECK_EQ(weir__storage_open(base, &s), 0);
    CHECK_EQ(test_run_on_rt(2, restore_checks_off_thread, s), 0);
    weir__storage_close(s);
    rm_base();
}

TEST(snapshots_through_a_store)
{
    make_base();
    weir__storage *s;
    CHECK_EQ(weir__storage_open(base, &s), 0);
    CHECK_EQ(test_run_on_rt(2, snap_roundtrip, s), 0);
    CHECK(exists("chk-5/op.0.state"));
    weir__storage_close(s);
    rm_base();
}

TEST_MAIN()
