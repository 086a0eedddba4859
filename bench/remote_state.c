/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote_state.c - what the remote-read backend's checkpoints and restores
 * cost beside the in-memory backend's, measured on the backends
 * themselves (weir/state.h's public calls, on this thread).
 *
 * Checkpoints (mode=delta / mode=full). KEYS keys (100-byte values, in 64
 * key groups) are put, a first checkpoint taken; then INTERVALS times 1%
 * of the keys (a different 1% each time) get a new value and a checkpoint
 * is taken: capture, encode, and the image written durably
 * (weir_state_persist) into a fresh directory. The remote backend's pool
 * is a directory in it (remote:file://DIR/pool), so ckpt_bytes is what
 * the checkpoint added on disk: the image (a handle, for the remote
 * backend) plus the run the encode wrote to the pool. The median over the
 * intervals:
 *
 *   bench=remote_state impl=weir mode=delta|full keys=... changed=0.01
 *       ckpt_bytes=... ckpt_ms=... first_bytes=...
 *
 * Restores (mode=restore-lazy / restore-eager). A state of STATE_MB
 * megabytes (1 KiB values) is checkpointed once; then a fresh backend
 * restores it and reads one key: ttfr_ms is the time from the start of
 * the restore to that value in hand (the first record processed again),
 * restore_ms the restore call alone. Eager: the in-memory backend reads
 * and decodes the whole image (weir_state_restore). Lazy: the remote
 * backend reads its handle (the pool's runs stay where they are), and the
 * key's read is a cold one from the pool (the group's index, then one
 * block). Each restore is run three times (fresh backend each; the page
 * cache is warm for both) and the median printed:
 *
 * The lazy restore is also run with each of the pool's round trips 1 ms
 * later (latency://1/..., latency_ms=1: a remote pool's):
 *
 *   bench=remote_state impl=weir mode=restore-lazy|restore-eager state_mb=... latency_ms=0|1
 *       ttfr_ms=... restore_ms=...
 *
 *   remote_state [KEYS [INTERVALS [STATE_MB...]]]   (default 1000000 10 256 1024)
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "weir/state.h"

enum { GROUPS = 64 };

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t tree_bytes;
static int add_size(const char *p, const struct stat *st, int type, struct FTW *f)
{
    (void)p, (void)f;
    if (type == FTW_F)
        tree_bytes += (uint64_t)st->st_size;
    return 0;
}
static uint64_t du(const char *dir)
{
    tree_bytes = 0;
    nftw(dir, add_size, 16, FTW_PHYS);
    return tree_bytes;
}
static int rm_one(const char *p, const struct stat *st, int type, struct FTW *f)
{
    (void)st, (void)type, (void)f;
    return remove(p);
}
static void rm_tree(const char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static size_t key_of(long i, char *k)
{
    return (size_t)snprintf(k, 32, "key-%012ld", i);
}
static int group_of(const char *k, size_t kl)
{
    return (int)(weir_key_hash(k, kl) % GROUPS);
}

static void die(const char *what, int e)
{
    fprintf(stderr, "remote_state: %s: %s\n", what, strerror(e < 0 ? -e : e));
    exit(1);
}

static weir_state_backend *open_backend(const char *uri)
{
    weir_state_backend *b;
    int e = weir_state_backend_open(uri, GROUPS, 0, GROUPS, &b);
    if (e)
        die(uri, e);
    return b;
}

/* Capture, encode and persist checkpoint id into dir/ckpt-<id>; ms. */
static double checkpoint(weir_state_backend *b, uint64_t id, const char *dir)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/ckpt-%llu", dir, (unsigned long long)id);
    double t0 = now_ms();
    weir_state_snapshot *s;
    int e = weir_state_capture(b, id, &s);
    if (!e)
        e = weir_state_persist(s, path);
    if (e)
        die("checkpoint", e);
    weir_state_snapshot_free(s);
    return now_ms() - t0;
}

static void put_key(weir_state_backend *b, long i, const void *v, size_t vl)
{
    char k[32];
    size_t kl = key_of(i, k);
    int e = weir_state_put(b, group_of(k, kl), k, kl, v, vl);
    if (e)
        die("put", e);
}

static void bench_ckpt(const char *mode, long keys, int intervals)
{
    char dir[] = "/tmp/weir-remote-state-XXXXXX", uri[600];
    if (!mkdtemp(dir))
        die("mkdtemp", errno);
    int delta = !strcmp(mode, "delta");
    snprintf(uri, sizeof(uri), delta ? "remote:file://%s/pool?hot_max_bytes=0" : "memory:", dir);
    weir_state_backend *b = open_backend(uri);
    char v[100];
    memset(v, 'v', sizeof(v));
    for (long i = 0; i < keys; i++)
        put_key(b, i, v, sizeof(v));
    uint64_t before = du(dir);
    checkpoint(b, 1, dir);
    uint64_t first = du(dir) - before;
    double ms[64], bytes[64];
    long step = 100; /* 1%: every 100th key, a different offset each interval */
    for (int r = 0; r < intervals; r++) {
        v[0] = (char)('a' + r % 26);
        for (long i = r % step; i < keys; i += step)
            put_key(b, i, v, sizeof(v));
        before = du(dir);
        ms[r] = checkpoint(b, (uint64_t)r + 2, dir);
        bytes[r] = (double)(du(dir) - before);
        /* The previous image is no longer needed: like a retention of 1
         * (the pool's runs stay: the remote backend's handle refers to them). */
        char old[512];
        snprintf(old, sizeof(old), "%s/ckpt-%d", dir, r + 1);
        unlink(old);
    }
    printf("bench=remote_state impl=weir mode=%s keys=%ld changed=0.01 ckpt_bytes=%.0f "
           "ckpt_ms=%.1f first_bytes=%llu\n",
           mode, keys, bench_median(bytes, intervals), bench_median(ms, intervals),
           (unsigned long long)first);
    fflush(stdout);
    weir_state_backend_free(b);
    rm_tree(dir);
}

/* Three restores from path into fresh backends of uri, each followed by
 * one read; the medians. */
static void restore_one(const char *mode, const char *uri, const char *path, long keys,
                        long state_mb, int latency_ms)
{
    double ttfr[3], rms[3];
    for (int r = 0; r < 3; r++) {
        char why[256] = "", k[32];
        weir_state_backend *f = open_backend(uri);
        double t0 = now_ms();
        int e = weir_state_restore(f, path, why, sizeof(why));
        if (e) {
            fprintf(stderr, "remote_state: restore: %s\n", why);
            die("restore", e);
        }
        rms[r] = now_ms() - t0;
        size_t kl = key_of((keys / 3) * r + 7, k);
        const void *val;
        size_t vl;
        e = weir_state_get(f, group_of(k, kl), k, kl, &val, &vl);
        if (e || vl != 1024)
            die("get after restore", e ? e : EIO);
        ttfr[r] = now_ms() - t0;
        weir_state_backend_free(f);
    }
    printf("bench=remote_state impl=weir mode=%s state_mb=%ld latency_ms=%d ttfr_ms=%.1f "
           "restore_ms=%.1f\n",
           mode, state_mb, latency_ms, bench_median(ttfr, 3), bench_median(rms, 3));
    fflush(stdout);
}

static void bench_restore(long state_mb)
{
    char dir[] = "/tmp/weir-remote-state-XXXXXX", uri[600], path[600];
    if (!mkdtemp(dir))
        die("mkdtemp", errno);
    long keys = state_mb * 1024; /* 1 KiB values */
    static char v[1024];
    memset(v, 'v', sizeof(v));
    /* One state, checkpointed by each backend. */
    const char *modes[] = {"restore-eager", "restore-lazy"};
    for (int m = 0; m < 2; m++) {
        int lazy = m == 1;
        snprintf(uri, sizeof(uri), lazy ? "remote:file://%s/pool?hot_max_bytes=0" : "memory:", dir);
        weir_state_backend *b = open_backend(uri);
        for (long i = 0; i < keys; i++)
            put_key(b, i, v, sizeof(v));
        snprintf(path, sizeof(path), "%s/%s", dir, lazy ? "lazy" : "eager");
        mkdir(path, 0700);
        checkpoint(b, 1, path);
        weir_state_backend_free(b);
        snprintf(path, sizeof(path), "%s/%s/ckpt-1", dir, lazy ? "lazy" : "eager");
        restore_one(modes[m], uri, path, keys, state_mb, 0);
        if (lazy) { /* the same runs, each pool round trip 1 ms later */
            snprintf(uri, sizeof(uri), "remote:latency://1/file://%s/pool?hot_max_bytes=0", dir);
            restore_one(modes[m], uri, path, keys, state_mb, 1);
        }
    }
    rm_tree(dir);
}

int main(int argc, char **argv)
{
    long keys = argc > 1 ? atol(argv[1]) : 1000000;
    int intervals = argc > 2 ? atoi(argv[2]) : 10;
    if (keys < 100 || intervals < 1 || intervals > 64) {
        fprintf(stderr, "remote_state: usage: remote_state [KEYS [INTERVALS [STATE_MB...]]]\n");
        return 2;
    }
    const char *only = getenv("REMOTE_STATE_MODE"); /* ckpt or restore */
    if (!only || !strcmp(only, "ckpt")) {
        bench_ckpt("full", keys, intervals);
        bench_ckpt("delta", keys, intervals);
    }
    if (!only || !strcmp(only, "restore")) {
        if (argc > 3)
            for (int a = 3; a < argc; a++)
                bench_restore(atol(argv[a]));
        else
            bench_restore(256), bench_restore(1024);
    }
    return 0;
}
