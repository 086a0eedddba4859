/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_remote.c - the remote-read backend (state/remote.c) against the
 * in-memory backend as its model: random puts, deletes, reads (at once,
 * later, in batches, answered in any order by the I/O threads), scans,
 * checkpoints (some dropped unwritten, as the engine drops a stale one),
 * crashes (the backend thrown away with its unsaved changes) and lazy
 * restores, every read compared; a hot tier far smaller than the state,
 * so eviction runs all the time and a written key it dropped would show
 * as a wrong read. Beside it: delta checkpoints whose run bytes follow the
 * keys changed, a restore that reads nothing from the pool until a read
 * needs it, a rescale from two handles into one backend, a damaged handle
 * refused with its reason, reads still queued at free answered
 * -ECANCELED exactly once, malformed URIs refused, a synchronous cold
 * read from a fiber that goes through the blocking pool, and scans
 * fetched (ahead, or by an earlier scan): they serve their prefix, never
 * when a newer run may hold what the fetch missed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "state/state_int.h"
#include "state/storage.h"
#include "test.h"
#include "test_rt.h"
#include "weir/rt.h"
#include "weir/state.h"

#define GROUPS 8

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static weir_state_backend *open_remote(const char *uri, int first, int end)
{
    weir_state_backend *b = NULL;
    int e = weir_state_backend_open(uri, GROUPS, first, end, &b);
    if (e)
        TEST__FAIL("open %s: %d", uri, e);
    return b;
}

/* The key of number i (a few share a prefix, for scans). */
static size_t key_of(int i, char *buf)
{
    return (size_t)snprintf(buf, 32, "p%d/k%05d", i % 5, i);
}

static int group_of(const char *k, size_t kl)
{
    return weir_key_group(weir_key_hash(k, kl), GROUPS);
}

/* ---- answers that come later --------------------------------------------------------------- */
typedef struct answer {
    _Atomic int done, calls;
    int err;
    uint8_t val[512];
    size_t vlen;
} answer;

static void on_answer(void *arg, int err, const void *val, size_t vlen)
{
    answer *a = arg;
    a->err = err;
    a->vlen = 0;
    if (!err && vlen <= sizeof(a->val)) {
        if (vlen) /* a scan's prefetch answers with no value */
            memcpy(a->val, val, vlen);
        a->vlen = vlen;
    }
    atomic_fetch_add(&a->calls, 1);
    atomic_store_explicit(&a->done, 1, memory_order_release);
}

static void wait_answer(answer *a)
{
    int64_t deadline = weir_time_now() + 30 * WEIR_SEC;
    while (!atomic_load_explicit(&a->done, memory_order_acquire)) {
        if (weir_time_now() > deadline)
            TEST__FAIL("a read was never answered");
        usleep(100);
    }
}

/* Every one of as[0..n) answered exactly once, with its value or
 * -ECANCELED, and some cancelled (the backend was freed first). */
static void answered_once_some_cancelled(answer *as, int n)
{
    int cancelled = 0;
    for (int i = 0; i < n; i++) {
        wait_answer(&as[i]);
        CHECK_EQ(atomic_load(&as[i].calls), 1);
        CHECK(as[i].err == 0 || as[i].err == -ECANCELED);
        cancelled += as[i].err == -ECANCELED;
    }
    CHECK_GT(cancelled, 0);
}

/* The model's answer for key and the backend's, compared. */
static void expect(weir_state_backend *model, int kg, const char *k, size_t kl, int err,
                   const void *val, size_t vlen, const char *how)
{
    const void *mv;
    size_t ml;
    int me = weir_state_get(model, kg, k, kl, &mv, &ml);
    if (me != err)
        TEST__FAIL("%s of %.*s: %d, the model %d", how, (int)kl, k, err, me);
    if (!me && (ml != vlen || (vlen && memcmp(mv, val, vlen) != 0)))
        TEST__FAIL("%s of %.*s: a value of %zu bytes, the model's %zu", how, (int)kl, k, vlen, ml);
}

/* ---- scans compared -------------------------------------------------------------------------- */
typedef struct dump {
    char buf[1 << 16];
    size_t len;
} dump;

static int dump_fn(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
    dump *d = arg;
    int n = snprintf(d->buf + d->len, sizeof(d->buf) - d->len, "%.*s=%zu:", (int)klen,
                     (const char *)key, vlen);
    if (n > 0 && d->len + (size_t)n < sizeof(d->buf))
        d->len += (size_t)n;
    if (vlen && d->len + vlen < sizeof(d->buf)) {
        memcpy(d->buf + d->len, val, vlen);
        d->len += vlen;
    }
    return 0;
}

static void compare_scan(weir_state_backend *model, weir_state_backend *b, int kg,
                         const char *prefix)
{
    static dump a, m;
    a.len = m.len = 0;
    CHECK_EQ(weir_state_scan(b, kg, prefix, strlen(prefix), dump_fn, &a), 0);
    CHECK_EQ(weir_state_scan(model, kg, prefix, strlen(prefix), dump_fn, &m), 0);
    if (a.len != m.len || memcmp(a.buf, m.buf, a.len) != 0)
        TEST__FAIL("scan of group %d prefix \"%s\": %zu bytes, the model's %zu", kg, prefix, a.len,
                   m.len);
}

/* ---- checkpoints -------------------------------------------------------------------------------
 */
typedef struct image {
    uint8_t *p;
    size_t len;
} image;

static image take_image(weir_state_snapshot *s)
{
    const void *img;
    size_t len;
    CHECK_EQ(weir_state_snapshot_encode(s, &img, &len), 0);
    image im = {weir__malloc(len), len};
    memcpy(im.p, img, len);
    weir_state_snapshot_free(s);
    return im;
}

/* opts: more of the backend's options ("&name=value"), or "". */
static void model_test_opts(const char *pool, size_t budget, int steps, const char *opts)
{
    char uri[256];
    snprintf(uri, sizeof(uri), "remote:%s?hot_max_bytes=%zu&io_threads=4%s", pool, budget, opts);
    weir_state_backend *b = open_remote(uri, 0, GROUPS);
    weir_state_backend *model = weir_state_memory_new(GROUPS, 0, GROUPS);
    image saved = {0}, saved_model = {0};
    enum { KEYS = 600 };
    uint8_t val[300];
    uint64_t checkpoints = 0, crashes = 0, async_later = 0, merges = 0, max_chain = 0;
    uint64_t prefetched = 0, served = 0;
    for (int step = 0; step < steps; step++) {
        char k[32];
        int i = (int)(rnd() % KEYS);
        size_t kl = key_of(i, k);
        int kg = group_of(k, kl);
        unsigned op = (unsigned)(rnd() % 100);
        if (op < 35) { /* put */
            size_t vl = rnd() % sizeof(val);
            for (size_t j = 0; j < vl; j++)
                val[j] = (uint8_t)(step + j);
            CHECK_EQ(weir_state_put(b, kg, k, kl, val, vl), 0);
            CHECK_EQ(weir_state_put(model, kg, k, kl, val, vl), 0);
        } else if (op < 45) { /* delete */
            int me = weir_state_delete(model, kg, k, kl);
            int e = weir_state_delete(b, kg, k, kl);
            /* A key the hot tier does not hold is deleted without a read: 0. */
            if (e != me && !(e == 0 && me == -ENOENT))
                TEST__FAIL("delete of %s: %d, the model %d", k, e, me);
        } else if (op < 60) { /* get */
            const void *v;
            size_t vl;
            int e = weir_state_get(b, kg, k, kl, &v, &vl);
            expect(model, kg, k, kl, e, v, vl, "get");
        } else if (op < 80) { /* get_async */
            answer a = {0};
            const void *v = NULL;
            size_t vl = 0;
            int e = weir_state_get_async(b, kg, k, kl, on_answer, &a);
            if (e == -EINPROGRESS) {
                async_later++;
                wait_answer(&a);
                e = a.err;
                v = a.val;
                vl = a.vlen;
                CHECK_EQ(atomic_load(&a.calls), 1);
            } else {
                CHECK_EQ(atomic_load(&a.calls), 0);
                if (!e)
                    CHECK_EQ(weir_state_get(b, kg, k, kl, &v, &vl), 0);
            }
            expect(model, kg, k, kl, e, v, vl, "get_async");
        } else if (op < 86) { /* a batch, answered in any order */
            enum { NB = 12 };
            answer as[NB];
            char ks[NB][32];
            weir_state_read rd[NB];
            memset(as, 0, sizeof(as));
            for (int j = 0; j < NB; j++) {
                size_t l = key_of((int)(rnd() % KEYS), ks[j]);
                rd[j] = (weir_state_read){group_of(ks[j], l), ks[j], l, &as[j]};
            }
            CHECK_EQ(b->ops->get_batch(b, rd, NB, on_answer), 0);
            for (int j = 0; j < NB; j++) {
                wait_answer(&as[j]);
                CHECK_EQ(atomic_load(&as[j].calls), 1);
                expect(model, rd[j].kg, ks[j], rd[j].klen, as[j].err, as[j].val, as[j].vlen,
                       "get_batch");
            }
        } else if (op < 91) { /* scan, half of them prefetched first */
            char prefix[8];
            snprintf(prefix, sizeof(prefix), "p%d/", (int)(rnd() % 5));
            const char *p = rnd() % 4 ? prefix : "";
            int kg = (int)(rnd() % GROUPS);
            if (rnd() % 2) {
                answer a = {0};
                int e = weir_state_scan_prefetch(b, kg, p, strlen(p), on_answer, &a);
                if (e == -EINPROGRESS) {
                    prefetched++;
                    wait_answer(&a);
                    CHECK_EQ(a.err, 0);
                    CHECK_EQ(atomic_load(&a.calls), 1);
                } else {
                    CHECK_EQ(e, 0);
                    CHECK_EQ(atomic_load(&a.calls), 0);
                }
                /* Now and then changes between the prefetch and its scan,
                 * a checkpoint among them (its run makes the prefetch
                 * stale): the scan must see them all the same. */
                for (int j = rnd() % 3 ? 0 : (int)(rnd() % 6); j > 0; j--) {
                    size_t l = key_of((int)(rnd() % KEYS), k);
                    int g = group_of(k, l);
                    if (j == 1 && rnd() % 2) {
                        weir_state_snapshot *s, *ms;
                        CHECK_EQ(weir_state_capture(b, ++checkpoints, &s), 0);
                        CHECK_EQ(weir_state_capture(model, checkpoints, &ms), 0);
                        weir__free(saved.p);
                        weir__free(saved_model.p);
                        saved = take_image(s);
                        saved_model = take_image(ms);
                    } else if (rnd() % 3) {
                        CHECK_EQ(weir_state_put(b, g, k, l, "changed", 7), 0);
                        CHECK_EQ(weir_state_put(model, g, k, l, "changed", 7), 0);
                    } else {
                        weir_state_delete(b, g, k, l);
                        weir_state_delete(model, g, k, l);
                    }
                }
            }
            compare_scan(model, b, kg, p);
        } else if (op < 97) { /* checkpoint; now and then one dropped unwritten */
            weir_state_snapshot *s, *ms;
            CHECK_EQ(weir_state_capture(b, ++checkpoints, &s), 0);
            if (rnd() % 4 == 0) {
                weir_state_snapshot_free(s); /* stale: its delta goes into the next run */
                continue;
            }
            CHECK_EQ(weir_state_capture(model, checkpoints, &ms), 0);
            weir__free(saved.p);
            weir__free(saved_model.p);
            saved = take_image(s);
            saved_model = take_image(ms);
        } else if (saved.p && rnd() % 3 == 0) { /* crash: back to the last checkpoint written */
            crashes++;
            weir__remote_stat cs;
            weir__remote_stats(b, &cs);
            merges += cs.merges;
            served += cs.scans_served;
            weir_state_backend_free(b);
            weir_state_backend_free(model);
            b = open_remote(uri, 0, GROUPS);
            model = weir_state_memory_new(GROUPS, 0, GROUPS);
            char why[256] = "";
            CHECK_EQ(weir_state_restore_image(b, saved.p, saved.len, why, sizeof(why)), 0);
            CHECK_EQ(
                weir_state_restore_image(model, saved_model.p, saved_model.len, why, sizeof(why)),
                0);
            weir__remote_stat st;
            weir__remote_stats(b, &st);
            CHECK_EQ(st.cold_reads, 0); /* lazy: nothing read yet */
        }
        weir__remote_stat st;
        weir__remote_stats(b, &st);
        if (st.max_chain > max_chain)
            max_chain = st.max_chain;
        /* Only keys not yet durable may hold the hot tier over its budget. */
        if (budget && st.hot_bytes > budget && st.clean > 0)
            TEST__FAIL("hot tier at %zu bytes with %" PRIu64 " evictable entries, budget %zu",
                       st.hot_bytes, st.clean, budget);
    }
    /* Every key, at the end. */
    for (int i = 0; i < KEYS; i++) {
        char k[32];
        size_t kl = key_of(i, k);
        const void *v;
        size_t vl;
        int e = weir_state_get(b, group_of(k, kl), k, kl, &v, &vl);
        expect(model, group_of(k, kl), k, kl, e, v, vl, "final get");
    }
    for (int kg = 0; kg < GROUPS; kg++)
        compare_scan(model, b, kg, "");
    weir__remote_stat st;
    weir__remote_stats(b, &st);
    merges += st.merges;
    served += st.scans_served;
    printf("  %s budget %zu: %d steps, %" PRIu64 " checkpoints, %" PRIu64 " crashes, %" PRIu64
           " reads answered later, %" PRIu64 " evictions, %" PRIu64 " blocks read, %" PRIu64
           " merges, chains up to %" PRIu64 " runs, %" PRIu64 " scans prefetched, %" PRIu64
           " served so\n",
           pool, budget, steps, checkpoints, crashes, async_later, st.evictions, st.blocks_read,
           merges, max_chain, prefetched, served);
    CHECK_GT(prefetched, 0);
    CHECK_GT(served, 0);
    CHECK_GT(merges, 0);
    CHECK_LE(max_chain, 8);
    CHECK_GT(checkpoints, 0);
    CHECK_GT(crashes, 0);
    CHECK_GT(async_later, 0);
    if (budget)
        CHECK_GT(st.evictions, 0);
    weir__free(saved.p);
    weir__free(saved_model.p);
    weir_state_backend_free(b);
    weir_state_backend_free(model);
}

static void model_test(const char *pool, size_t budget, int steps)
{
    model_test_opts(pool, budget, steps, "");
}

TEST(model_small_hot_tier)
{
    model_test("mem://remote-model-small", 8192, 20000);
}

/* A block cache of a few blocks (most of what persists put in dropped at
 * once, reads answered from it, from fetches shared or from the pool),
 * and none at all (blocks live only while read). */
TEST(model_small_block_cache)
{
    model_test_opts("mem://remote-model-bc", 8192, 20000, "&block_cache_bytes=6000");
    model_test_opts("latency://0-0.2/mem://remote-model-bc0", 8192, 3000, "&block_cache_bytes=0");
}

TEST(model_unbounded_hot_tier)
{
    model_test("mem://remote-model-unbounded", 0, 8000);
}

TEST(model_over_a_directory_with_latency)
{
    char dir[] = "/tmp/weir-remote-XXXXXX", pool[96];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(pool, sizeof(pool), "latency://0-0.2/file://%s", dir);
    model_test(pool, 16384, 3000);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

/* ---- deltas --------------------------------------------------------------------------------- */
TEST(a_checkpoint_writes_what_changed)
{
    weir_state_backend *b = open_remote("remote:mem://remote-delta?hot_max_bytes=0", 0, GROUPS);
    char k[32], v[100];
    memset(v, 'v', sizeof(v));
    enum { N = 10000 };
    for (int i = 0; i < N; i++) {
        size_t kl = key_of(i, k);
        CHECK_EQ(weir_state_put(b, group_of(k, kl), k, kl, v, sizeof(v)), 0);
    }
    weir__remote_stat st;
    uint64_t before = 0, full, small;
    weir_state_snapshot *s;
    CHECK_EQ(weir_state_capture(b, 1, &s), 0);
    image im = take_image(s);
    weir__remote_stats(b, &st);
    full = st.run_bytes - before;
    before = st.run_bytes;
    for (int i = 0; i < N / 100; i++) { /* 1% */
        size_t kl = key_of(i * 100, k);
        v[0] = 'w';
        CHECK_EQ(weir_state_put(b, group_of(k, kl), k, kl, v, sizeof(v)), 0);
    }
    weir__free(im.p);
    CHECK_EQ(weir_state_capture(b, 2, &s), 0);
    im = take_image(s);
    weir__remote_stats(b, &st);
    small = st.run_bytes - before;
    printf("  full %" PRIu64 " bytes, 1%% changed %" PRIu64 " bytes, handle %zu bytes\n", full,
           small, im.len);
    CHECK_GT(full, (uint64_t)N * sizeof(v));
    CHECK_LT(small * 50, full); /* about 1/100 */
    CHECK_GT(small * 200, full);
    /* Nothing changed: no run at all. */
    before = st.run_bytes;
    weir__free(im.p);
    CHECK_EQ(weir_state_capture(b, 3, &s), 0);
    im = take_image(s);
    weir__remote_stats(b, &st);
    CHECK_EQ(st.run_bytes, before);
    /* The newest value wins over the first run's. */
    weir_state_backend *r = open_remote("remote:mem://remote-delta?hot_max_bytes=0", 0, GROUPS);
    char why[128];
    CHECK_EQ(weir_state_restore_image(r, im.p, im.len, why, sizeof(why)), 0);
    for (int i = 0; i < N; i += 50) {
        size_t kl = key_of(i, k);
        const void *val;
        size_t vl;
        CHECK_EQ(weir_state_get(r, group_of(k, kl), k, kl, &val, &vl), 0);
        CHECK_EQ(vl, sizeof(v));
        CHECK_EQ(((const char *)val)[0], i % 100 == 0 ? 'w' : 'v');
    }
    weir__free(im.p);
    weir_state_backend_free(r);
    weir_state_backend_free(b);
}

/* ---- lazy restore, rescale, a damaged handle ---------------------------------------------------
 */
TEST(restore_is_lazy_and_rescales)
{
    /* Two subtasks' backends, groups [0, 4) and [4, 8), one pool. */
    const char *uri = "remote:mem://remote-rescale?hot_max_bytes=4096";
    weir_state_backend *lo = open_remote(uri, 0, 4), *hi = open_remote(uri, 4, GROUPS);
    weir_state_backend *model = weir_state_memory_new(GROUPS, 0, GROUPS);
    char k[32];
    for (int i = 0; i < 3000; i++) {
        size_t kl = key_of(i, k);
        int kg = group_of(k, kl);
        char v[24];
        int vl = snprintf(v, sizeof(v), "value-%d", i);
        CHECK_EQ(weir_state_put(kg < 4 ? lo : hi, kg, k, kl, v, (size_t)vl), 0);
        CHECK_EQ(weir_state_put(model, kg, k, kl, v, (size_t)vl), 0);
    }
    /* timers ride in the handle */
    weir_state_entry timer = {5,
                              "\xff"
                              "t1",
                              3, "", 0};
    weir_state_snapshot *s1, *s2;
    CHECK_EQ(weir_state_capture(lo, 1, &s1), 0);
    CHECK_EQ(weir_state_capture_with(hi, 1, &timer, 1, &s2), 0);
    image a = take_image(s1), b = take_image(s2);
    weir_state_backend_free(lo);
    weir_state_backend_free(hi);
    weir_state_backend *one = open_remote(uri, 0, GROUPS);
    char why[256] = "";
    CHECK_EQ(weir_state_restore_image(one, a.p, a.len, why, sizeof(why)), 0);
    CHECK_EQ(weir_state_restore_image(one, b.p, b.len, why, sizeof(why)), 0);
    weir__remote_stat st;
    weir__remote_stats(one, &st);
    CHECK_EQ(st.cold_reads, 0);
    CHECK_EQ(st.blocks_read, 0);
    const void *v;
    size_t vl;
    CHECK_EQ(weir_state_get(one, 5,
                            "\xff"
                            "t1",
                            3, &v, &vl),
             0); /* the timer, held */
    CHECK_EQ(weir_state_delete(one, 5,
                               "\xff"
                               "t1",
                               3),
             0);
    CHECK_EQ(weir_state_get(one, 5,
                            "\xff"
                            "t1",
                            3, &v, &vl),
             -ENOENT);
    for (int i = 0; i < 3000; i++) {
        size_t kl = key_of(i, k);
        int e = weir_state_get(one, group_of(k, kl), k, kl, &v, &vl);
        expect(model, group_of(k, kl), k, kl, e, v, vl, "restored get");
    }
    weir__remote_stats(one, &st);
    CHECK_GT(st.blocks_read, 0);
    /* A damaged handle: refused with its reason, the backend unchanged. */
    for (size_t at = 0; at < b.len; at += b.len / 17 + 1) {
        b.p[at] ^= 0x40;
        why[0] = '\0';
        int e = weir_state_restore_image(one, b.p, b.len, why, sizeof(why));
        if (e != -EBADMSG && e != -EINVAL)
            TEST__FAIL("a handle damaged at byte %zu: %d", at, e);
        CHECK(why[0] != '\0');
        b.p[at] ^= 0x40;
    }
    CHECK_EQ(weir_state_restore_image(one, b.p, 20, why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, "remote-state handle");
    size_t kl = key_of(7, k);
    CHECK_EQ(weir_state_get(one, group_of(k, kl), k, kl, &v, &vl), 0);
    /* A memory backend's image is not a handle. */
    weir_state_snapshot *ms;
    CHECK_EQ(weir_state_capture(model, 9, &ms), 0);
    image mi = take_image(ms);
    CHECK_EQ(weir_state_restore_image(one, mi.p, mi.len, why, sizeof(why)), -EBADMSG);
    weir__free(mi.p);
    weir__free(a.p);
    weir__free(b.p);
    weir_state_backend_free(one);
    weir_state_backend_free(model);
}

/* ---- scans prefetched ------------------------------------------------------------------------
 */
static void checkpoint(weir_state_backend *b, uint64_t id)
{
    weir_state_snapshot *s;
    CHECK_EQ(weir_state_capture(b, id, &s), 0);
    image im = take_image(s); /* the run is written */
    weir__free(im.p);
    /* The next call takes the durable capture in: its entries are clean,
     * and with a budget of one byte evicted. */
    weir__remote_stat st;
    weir__remote_stats(b, &st);
}

static void prefetch(weir_state_backend *b, int kg, const char *p, int want)
{
    answer a = {0};
    CHECK_EQ(weir_state_scan_prefetch(b, kg, p, strlen(p), on_answer, &a), want);
    if (want == -EINPROGRESS) {
        wait_answer(&a);
        CHECK_EQ(a.err, 0);
    }
    CHECK_EQ(atomic_load(&a.calls), want == -EINPROGRESS);
}

static void scan_is(weir_state_backend *b, int kg, const char *p, const char *want)
{
    static dump d;
    d.len = 0;
    CHECK_EQ(weir_state_scan(b, kg, p, strlen(p), dump_fn, &d), 0);
    if (d.len != strlen(want) || memcmp(d.buf, want, d.len) != 0)
        TEST__FAIL("scan of \"%s\": \"%.*s\", not \"%s\"", p, (int)d.len, d.buf, want);
}

/* A group nothing of which was evicted or restored is whole in memory: a
 * miss there is an absence, answered at once, checkpoints or not; once an
 * entry of it is evicted, a miss asks the pool. */
TEST(a_miss_goes_to_the_pool_only_once_something_left_memory)
{
    weir_state_backend *b =
        open_remote("remote:mem://remote-whole?hot_max_bytes=0&io_threads=1", 0, GROUPS);
    CHECK_EQ(weir_state_put(b, 0, "a", 1, "1", 1), 0);
    CHECK_EQ(weir_state_delete(b, 0, "a", 1), 0);
    CHECK_EQ(weir_state_put(b, 0, "b", 1, "2", 1), 0);
    checkpoint(b, 1);
    checkpoint(b, 2);
    answer a = {0};
    const void *v;
    size_t vl;
    CHECK_EQ(weir_state_get_async(b, 0, "zz", 2, on_answer, &a), -ENOENT);
    CHECK_EQ(weir_state_get(b, 0, "a", 1, &v, &vl), -ENOENT);
    CHECK_EQ(weir_state_get(b, 0, "b", 1, &v, &vl), 0);
    CHECK_EQ(weir_state_delete(b, 0, "zz", 2), -ENOENT);
    prefetch(b, 0, "", 0);
    scan_is(b, 0, "", "b=1:2");
    weir__remote_stat st;
    weir__remote_stats(b, &st);
    CHECK_EQ(st.cold_reads, 0);
    CHECK_EQ(st.blocks_read, 0);
    weir_state_backend_free(b);
    /* The same with a budget of one byte: "b" is evicted after the
     * checkpoint, and the misses go to the pool (a key outside the run's
     * range is answered at once: the persist left the run's meta in
     * memory). */
    b = open_remote("remote:mem://remote-whole2?hot_max_bytes=1&io_threads=1", 0, GROUPS);
    CHECK_EQ(weir_state_put(b, 0, "b", 1, "2", 1), 0);
    checkpoint(b, 1);
    int e = weir_state_get_async(b, 0, "zz", 2, on_answer, &a);
    if (e == -EINPROGRESS) {
        wait_answer(&a);
        e = a.err;
    }
    CHECK_EQ(e, -ENOENT);
    CHECK_EQ(weir_state_get(b, 0, "b", 1, &v, &vl), 0);
    weir__remote_stats(b, &st);
    CHECK_EQ(st.cold_reads, 2);
    weir_state_backend_free(b);
}

/* A scan whose callback reads (cold keys, written through to the hot
 * tier): nothing the scan still walks is evicted or replaced under it. */
typedef struct reader {
    weir_state_backend *b;
    int i;
    dump d;
} reader;

static int read_in_scan(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
    reader *r = arg;
    char k[32];
    for (int j = 0; j < 4; j++, r->i++) {
        size_t kl = (size_t)snprintf(k, sizeof(k), "q/%03d", r->i % 40);
        const void *v;
        size_t vl;
        CHECK_EQ(weir_state_get(r->b, 0, k, kl, &v, &vl), 0);
        answer a = {0};
        if (weir_state_get_async(r->b, 0, k, kl, on_answer, &a) == -EINPROGRESS)
            wait_answer(&a);
        answer p = {0};
        if (weir_state_scan_prefetch(r->b, 0, "p/", 2, on_answer, &p) == -EINPROGRESS)
            wait_answer(&p);
    }
    return dump_fn(&r->d, key, klen, val, vlen);
}

TEST(a_scan_whose_callback_reads_keeps_what_it_walks)
{
    weir_state_backend *b =
        open_remote("remote:mem://remote-reentrant?hot_max_bytes=400&io_threads=2", 0, GROUPS);
    char k[32];
    for (int i = 0; i < 40; i++) {
        size_t kl = (size_t)snprintf(k, sizeof(k), "q/%03d", i);
        CHECK_EQ(weir_state_put(b, 0, k, kl, "qqqq", 4), 0);
        kl = (size_t)snprintf(k, sizeof(k), "p/%03d", i);
        CHECK_EQ(weir_state_put(b, 0, k, kl, "pppp", 4), 0);
    }
    checkpoint(b, 1);
    const void *v;
    size_t vl;
    CHECK_EQ(weir_state_get(b, 0, "p/007", 5, &v, &vl), 0); /* a clean hot entry the scan walks */
    static reader r;
    r.b = b;
    CHECK_EQ(weir_state_scan(b, 0, "p/", 2, read_in_scan, &r), 0);
    static dump want;
    want.len = 0;
    for (int i = 0; i < 40; i++) {
        size_t kl = (size_t)snprintf(k, sizeof(k), "p/%03d", i);
        dump_fn(&want, k, kl, "pppp", 4);
    }
    CHECK_EQ(r.d.len, want.len);
    CHECK(memcmp(r.d.buf, want.buf, want.len) == 0);
    weir_state_backend_free(b);
}

/* A run the chain still names but the pool lost is an error for the
 * reads and scans that need it (-EIO), never an absence. */
TEST(a_run_lost_from_the_pool_is_an_error_not_an_absence)
{
    weir_state_backend *b =
        open_remote("remote:mem://remote-lost?hot_max_bytes=1&io_threads=1", 0, GROUPS);
    CHECK_EQ(weir_state_put(b, 0, "p/a", 3, "1", 1), 0);
    checkpoint(b, 1);
    weir__storage *st;
    CHECK_EQ(weir__storage_open("mem://remote-lost", &st), 0);
    weir__names ns;
    CHECK_EQ(weir__storage_list(st, "", &ns), 0);
    CHECK_GT(ns.n, 0);
    for (size_t i = 0; i < ns.n; i++)
        CHECK_EQ(weir__storage_delete(st, ns.v[i]), 0);
    weir__names_free(&ns);
    weir__storage_close(st);
    const void *v;
    size_t vl;
    CHECK_EQ(weir_state_get(b, 0, "p/a", 3, &v, &vl), -EIO);
    answer a = {0};
    CHECK_EQ(weir_state_get_async(b, 0, "p/a", 3, on_answer, &a), -EINPROGRESS);
    wait_answer(&a);
    CHECK_EQ(a.err, -EIO);
    static dump d;
    CHECK_EQ(weir_state_scan(b, 0, "p/", 2, dump_fn, &d), -EIO);
    answer p = {0};
    CHECK_EQ(weir_state_scan_prefetch(b, 0, "p/", 2, on_answer, &p), -EINPROGRESS);
    wait_answer(&p);
    CHECK_EQ(p.err, -EIO);
    CHECK_EQ(weir_state_scan(b, 0, "p/", 2, dump_fn, &d), -EIO);
    weir_state_backend_free(b);
}

TEST(a_fetched_scan_serves_its_prefix_and_is_never_stale)
{
    weir_state_backend *b =
        open_remote("remote:mem://remote-prefetch?hot_max_bytes=1&io_threads=2", 0, GROUPS);
    /* Nothing in the pool yet: a scan would not wait. */
    prefetch(b, 0, "p/", 0);
    CHECK_EQ(weir_state_put(b, 0, "p/a", 3, "1", 1), 0);
    CHECK_EQ(weir_state_put(b, 0, "q/a", 3, "x", 1), 0);
    checkpoint(b, 1);
    weir__remote_stat st;
    weir__remote_stats(b, &st);
    CHECK_EQ(st.clean, 0); /* evicted: the scans below must go to the pool */

    /* Prefetched: the scans of the prefix read nothing more from the pool. */
    prefetch(b, 0, "p/", -EINPROGRESS);
    weir__remote_stats(b, &st);
    uint64_t blocks = st.blocks_read;
    CHECK_EQ(st.scans_fetched, 1);
    scan_is(b, 0, "p/", "p/a=1:1");
    scan_is(b, 0, "p/", "p/a=1:1");
    weir__remote_stats(b, &st);
    CHECK_EQ(st.scans_served, 2);
    CHECK_EQ(st.blocks_read, blocks);
    /* At hand: the next prefetch has nothing to fetch. */
    prefetch(b, 0, "p/", 0);
    /* A write since is seen (the hot tier's entries win). */
    CHECK_EQ(weir_state_put(b, 0, "p/c", 3, "4", 1), 0);
    scan_is(b, 0, "p/", "p/a=1:1p/c=1:4");
    /* Another prefix is not served by it: read, then kept for the next. */
    scan_is(b, 0, "q/", "q/a=1:x");
    weir__remote_stats(b, &st);
    CHECK_EQ(st.scans_served, 3);
    CHECK_GT(st.blocks_read, blocks);
    blocks = st.blocks_read;
    scan_is(b, 0, "q/", "q/a=1:x");
    weir__remote_stats(b, &st);
    CHECK_EQ(st.scans_served, 4);
    CHECK_EQ(st.blocks_read, blocks);
    CHECK_EQ(weir_state_delete(b, 0, "p/c", 3), 0);

    /* Stale: a checkpoint wrote newer entries of the prefix, which then
     * left the hot tier; the fetched part must not hide them. */
    CHECK_EQ(weir_state_put(b, 0, "p/a", 3, "2", 1), 0);
    CHECK_EQ(weir_state_put(b, 0, "p/b", 3, "3", 1), 0);
    checkpoint(b, 2);
    weir__remote_stats(b, &st);
    CHECK_EQ(st.clean, 0);
    scan_is(b, 0, "p/", "p/a=1:2p/b=1:3");
    weir__remote_stats(b, &st);
    CHECK_EQ(st.scans_served, 4);
    /* A delete, likewise (the scan above left its part at hand). */
    prefetch(b, 0, "p/", 0);
    CHECK_EQ(weir_state_delete(b, 0, "p/a", 3), 0);
    checkpoint(b, 3);
    scan_is(b, 0, "p/", "p/b=1:3");

    /* A prefetch still queued when the backend goes is answered once. */
    weir_state_backend_free(b);
    const char *uri =
        "remote:latency://200/mem://remote-prefetch-free?hot_max_bytes=1&io_threads=1";
    b = open_remote(uri, 0, GROUPS);
    char k[8];
    for (int i = 0; i < 8; i++) {
        snprintf(k, sizeof(k), "p%d/", i);
        CHECK_EQ(weir_state_put(b, 0, k, 3, "v", 1), 0);
    }
    checkpoint(b, 1);
    enum { N = 8 };
    static answer as[N];
    memset(as, 0, sizeof(as));
    for (int i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "p%d/", i);
        CHECK_EQ(weir_state_scan_prefetch(b, 0, k, 3, on_answer, &as[i]), -EINPROGRESS);
    }
    weir_state_backend_free(b);
    answered_once_some_cancelled(as, N);
}

/* ---- reads queued at free ---------------------------------------------------------------------
 */
TEST(reads_queued_at_free_are_cancelled_once)
{
    const char *uri = "remote:latency://200/mem://remote-free?hot_max_bytes=0&io_threads=1";
    weir_state_backend *b = open_remote(uri, 0, GROUPS);
    char k[32];
    for (int i = 0; i < 50; i++) {
        size_t kl = key_of(i, k);
        CHECK_EQ(weir_state_put(b, group_of(k, kl), k, kl, "v", 1), 0);
    }
    weir_state_snapshot *s;
    CHECK_EQ(weir_state_capture(b, 1, &s), 0);
    image im = take_image(s);
    weir_state_backend_free(b);
    b = open_remote(uri, 0, GROUPS);
    char why[128];
    CHECK_EQ(weir_state_restore_image(b, im.p, im.len, why, sizeof(why)), 0);
    enum { N = 20 };
    static answer as[N];
    memset(as, 0, sizeof(as));
    for (int i = 0; i < N; i++) {
        size_t kl = key_of(i, k);
        CHECK_EQ(weir_state_get_async(b, group_of(k, kl), k, kl, on_answer, &as[i]), -EINPROGRESS);
    }
    weir_state_backend_free(b); /* one thread, 200 ms a read: all but one still queued */
    answered_once_some_cancelled(as, N);
    weir__free(im.p);
}

/* ---- the block cache --------------------------------------------------------------------- */
/* Keys "s/000".."s/019" of group 0 in the pool (one block), none in the
 * hot tier (a budget of one byte), the pool every call 100 ms late. */
static weir_state_backend *one_block_in_the_pool(const char *uri)
{
    weir_state_backend *b = open_remote(uri, 0, GROUPS);
    char k[16];
    for (int i = 0; i < 20; i++) {
        size_t kl = (size_t)snprintf(k, sizeof(k), "s/%03d", i);
        CHECK_EQ(weir_state_put(b, 0, k, kl, k, kl), 0);
    }
    checkpoint(b, 1);
    return b;
}

/* Two cold reads of one block at once cost one round trip: the second
 * waits for the first's fetch. */
TEST(concurrent_cold_reads_of_one_block_share_one_fetch)
{
    weir_state_backend *b = one_block_in_the_pool(
        "remote:latency://100/mem://remote-share?hot_max_bytes=1&io_threads=4&block_cache_bytes=0");
    weir__remote_stat st0, st;
    weir__remote_stats(b, &st0);
    CHECK_EQ(st0.hot_bytes, 0);
    answer a = {0}, c = {0};
    CHECK_EQ(weir_state_get_async(b, 0, "s/003", 5, on_answer, &a), -EINPROGRESS);
    CHECK_EQ(weir_state_get_async(b, 0, "s/017", 5, on_answer, &c), -EINPROGRESS);
    wait_answer(&a);
    wait_answer(&c);
    CHECK_EQ(a.err, 0);
    CHECK_EQ(c.err, 0);
    CHECK(a.vlen == 5 && memcmp(a.val, "s/003", 5) == 0);
    CHECK(c.vlen == 5 && memcmp(c.val, "s/017", 5) == 0);
    weir__remote_stats(b, &st);
    CHECK_EQ(st.round_trips - st0.round_trips, 1);
    CHECK_EQ(st.block_shared - st0.block_shared, 1);
    CHECK_EQ(st.block_bytes, 0); /* a cache of 0 bytes keeps nothing */
    /* Nothing kept: the next read of the block fetches it again. */
    answer d = {0};
    CHECK_EQ(weir_state_get_async(b, 0, "s/009", 5, on_answer, &d), -EINPROGRESS);
    wait_answer(&d);
    CHECK_EQ(d.err, 0);
    weir__remote_stats(b, &st);
    CHECK_EQ(st.round_trips - st0.round_trips, 2);
    weir_state_backend_free(b);
}

/* A shared fetch that fails fails every read waiting for it, each with
 * its error (the pool lost the run: -EIO), and is not kept: the next read
 * fetches again. */
TEST(a_shared_fetch_that_fails_fails_every_reader)
{
    weir_state_backend *b =
        one_block_in_the_pool("remote:latency://100/mem://remote-share-fail?hot_max_bytes=1&io_"
                              "threads=4&block_cache_bytes=0");
    weir__storage *pool;
    CHECK_EQ(weir__storage_open("mem://remote-share-fail", &pool), 0);
    weir__names ns;
    CHECK_EQ(weir__storage_list(pool, "", &ns), 0);
    CHECK_GT(ns.n, 0);
    for (size_t i = 0; i < ns.n; i++)
        CHECK_EQ(weir__storage_delete(pool, ns.v[i]), 0);
    weir__names_free(&ns);
    weir__storage_close(pool);
    weir__remote_stat st0, st;
    weir__remote_stats(b, &st0);
    answer a = {0}, c = {0};
    CHECK_EQ(weir_state_get_async(b, 0, "s/003", 5, on_answer, &a), -EINPROGRESS);
    CHECK_EQ(weir_state_get_async(b, 0, "s/017", 5, on_answer, &c), -EINPROGRESS);
    wait_answer(&a);
    wait_answer(&c);
    CHECK_EQ(a.err, -EIO);
    CHECK_EQ(c.err, -EIO);
    weir__remote_stats(b, &st);
    CHECK_EQ(st.round_trips - st0.round_trips, 1);
    CHECK_EQ(st.block_shared - st0.block_shared, 1);
    const void *v;
    size_t vl;
    CHECK_EQ(weir_state_get(b, 0, "s/005", 5, &v, &vl), -EIO);
    weir__remote_stats(b, &st);
    CHECK_EQ(st.round_trips - st0.round_trips, 2);
    weir_state_backend_free(b);
}

/* The blocks of a run its persist wrote are in the block cache: a key
 * evicted once the run is durable is answered at once, no round trip,
 * until the cache's bound drops the block. */
TEST(a_persisted_block_answers_at_once_within_the_cache_bound)
{
    weir_state_backend *b = one_block_in_the_pool(
        "remote:latency://100/mem://remote-seeded?hot_max_bytes=1&io_threads=2");
    weir__remote_stat st0, st;
    weir__remote_stats(b, &st0);
    CHECK_EQ(st0.hot_bytes, 0);
    CHECK_EQ(st0.block_seeded, 0); /* a bound of one byte (the hot tier's): nothing kept */
    weir_state_backend_free(b);
    b = one_block_in_the_pool("remote:latency://100/mem://remote-seeded2?hot_max_bytes=1&io_"
                              "threads=2&block_cache_bytes=65536");
    weir__remote_stats(b, &st0);
    CHECK_EQ(st0.hot_bytes, 0);
    CHECK_EQ(st0.block_seeded, 1);
    CHECK_GT(st0.block_bytes, 0);
    CHECK(st0.block_bytes <= 65536);
    answer a = {0};
    CHECK_EQ(weir_state_get_async(b, 0, "s/003", 5, on_answer, &a), 0); /* at once */
    const void *v;
    size_t vl;
    CHECK_EQ(weir_state_get(b, 0, "s/003", 5, &v, &vl), 0);
    CHECK(vl == 5 && memcmp(v, "s/003", 5) == 0);
    CHECK_EQ(b->ops->get_now(b, 0, "s/011", 5, &v, &vl), 0);
    CHECK(vl == 5 && memcmp(v, "s/011", 5) == 0);
    CHECK_EQ(weir_state_get_async(b, 0, "s/0105", 6, on_answer, &a), -ENOENT); /* not there */
    weir__remote_stats(b, &st);
    CHECK_EQ(st.round_trips, st0.round_trips);
    CHECK_EQ(st.block_hits - st0.block_hits, 3);
    /* A delete, checkpointed: the newer run's tombstone hides the value. */
    CHECK_EQ(weir_state_delete(b, 0, "s/003", 5), 0);
    checkpoint(b, 2);
    CHECK_EQ(weir_state_get_async(b, 0, "s/003", 5, on_answer, &a), -ENOENT);
    weir__remote_stats(b, &st);
    CHECK_EQ(st.round_trips, st0.round_trips);
    weir_state_backend_free(b);
}

TEST(uris_are_checked)
{
    static const char *bad[] = {"remote:",
                                "remote:?hot_max_bytes=1",
                                "remote:mem://x?hot_max_bytes=",
                                "remote:mem://x?hot_max_bytes=-1",
                                "remote:mem://x?hot_max_bytes=12k",
                                "remote:mem://x?io_threads=0",
                                "remote:mem://x?io_threads=257",
                                "remote:mem://x?colour=blue",
                                "remote:mem://x?reads=later",
                                "remote:nope://x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        weir_state_backend *b = NULL;
        int e = weir_state_backend_open(bad[i], GROUPS, 0, GROUPS, &b);
        if (e != -EINVAL)
            TEST__FAIL("%s: %d, not refused", bad[i], e);
    }
    weir_state_backend *b;
    CHECK_EQ(weir_state_backend_open("remote:mem://x", GROUPS, 0, GROUPS, &b), 0);
    weir__remote_stat st;
    weir__remote_stats(b, &st);
    CHECK_GE(st.budget, (size_t)64 << 20); /* a quarter of the RAM, at least 64 MiB */
    CHECK(b->ops->get_async != NULL);
    weir_state_backend_free(b);
    CHECK_EQ(
        weir_state_backend_open("remote:mem://x?reads=sync&hot_max_bytes=0", GROUPS, 0, GROUPS, &b),
        0);
    CHECK(b->ops->get_async == NULL && b->ops->get_batch == NULL);
    weir_state_backend_free(b);
}

/* ---- a synchronous cold read from a fiber ------------------------------------------------------
 */
static intptr_t fiber_reads(void *arg)
{
    image *im = arg;
    weir_state_backend *b = open_remote("remote:mem://remote-fiber?hot_max_bytes=0", 0, GROUPS);
    char why[128];
    CHECK_EQ(weir_state_restore_image(b, im->p, im->len, why, sizeof(why)), 0);
    char k[32];
    size_t kl = key_of(3, k);
    const void *v;
    size_t vl;
    CHECK_EQ(weir_state_get(b, group_of(k, kl), k, kl, &v, &vl), 0);
    CHECK_EQ(vl, 5);
    CHECK(memcmp(v, "three", 5) == 0);
    static dump d;
    d.len = 0;
    CHECK_EQ(weir_state_scan(b, group_of(k, kl), "", 0, dump_fn, &d), 0);
    CHECK_HAS(d.buf, "p3/k00003=5:three");
    weir_state_backend_free(b);
    return 0;
}

TEST(a_cold_read_from_a_fiber)
{
    weir_state_backend *b = open_remote("remote:mem://remote-fiber?hot_max_bytes=0", 0, GROUPS);
    char k[32];
    size_t kl = key_of(3, k);
    CHECK_EQ(weir_state_put(b, group_of(k, kl), k, kl, "three", 5), 0);
    weir_state_snapshot *s;
    CHECK_EQ(weir_state_capture(b, 1, &s), 0);
    image im = take_image(s);
    weir_state_backend_free(b);
    CHECK_EQ(test_run_main(fiber_reads, &im), 0);
    weir__free(im.p);
}

TEST_MAIN()
