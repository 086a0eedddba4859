/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_plugins.c - plugins by content (cluster/plugins.h, base/sha256.h):
 * SHA-256 of the standard vectors; a reference made from a real built
 * plugin hashes as sha256sum says and carries the identity of its ELF
 * note; files that are not plugins, or too large, are refused; the cache
 * refuses bytes that do not hash to the claimed name and leaves nothing,
 * finds what was put, answers which references are missing (each once,
 * counting hits), and resolves or loudly refuses a Deploy's plugins; the
 * shipped set dedups, counts and stays within its bound; an ABI mismatch
 * is refused naming both identities; concurrent puts of one plugin publish
 * one whole entry; every allocation failure is an error
 * that leaves nothing behind (ASan checks the leaks).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/afile.h"
#include "base/alloc.h"
#include "base/sha256.h"
#include "cluster/plugins.h"
#include "test.h"

#ifndef WEIR_TEST_PLUGIN_DIR
#error "WEIR_TEST_PLUGIN_DIR must name the directory of the built test plugins"
#endif

static const char *plugin_path(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof(path), "%s/%s.so", WEIR_TEST_PLUGIN_DIR, name);
    return path;
}

static void hex_of(const void *buf, size_t len, char hex[WEIR__SHA256_HEX_SIZE])
{
    uint8_t h[WEIR__SHA256_SIZE];
    CHECK_EQ(weir__sha256(buf, len, h), 0);
    weir__sha256_hex(h, hex);
}

/* A fresh empty directory under TMPDIR. */
static void make_tmpdir(char dir[256])
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, 256, "%s/weir-plugins-XXXXXX", t && *t ? t : "/tmp");
    CHECK(mkdtemp(dir) != NULL);
}

/* Entries of dir other than . and .. (temporary files included). */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char p[4096];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        CHECK_EQ(unlink(p), 0);
    }
    closedir(d);
    CHECK_EQ(rmdir(dir), 0);
}

static void write_file(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK_EQ(fwrite(buf, 1, len, f), len);
    CHECK_EQ(fclose(f), 0);
}

/* A hash that is no plugin's: the SHA-256 of a label. */
static void fake_hash(const char *label, uint8_t h[WEIR__SHA256_SIZE])
{
    CHECK_EQ(weir__sha256(label, strlen(label), h), 0);
}

TEST(sha256_known_vectors)
{
    char hex[WEIR__SHA256_HEX_SIZE];
    hex_of("", 0, hex);
    CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hex_of(NULL, 0, hex);
    CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hex_of("abc", 3, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(two_blocks, strlen(two_blocks), hex);
    CHECK_STR(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* A million 'a's: the FIPS 180-2 long vector. */
    size_t n = 1000000;
    char *a = malloc(n);
    CHECK(a != NULL);
    memset(a, 'a', n);
    hex_of(a, n, hex);
    free(a);
    CHECK_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    uint8_t h[WEIR__SHA256_SIZE];
    CHECK_EQ(weir__sha256(NULL, 1, h), -EINVAL);
    CHECK_EQ(weir__sha256("x", 1, NULL), -EINVAL);
}

TEST(reference_of_a_built_plugin_matches_sha256sum)
{
    const char *path = plugin_path("job_count");
    char cmd[4200], out[128] = "";
    snprintf(cmd, sizeof(cmd), "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    CHECK(fgets(out, sizeof(out), p) != NULL);
    CHECK_EQ(pclose(p), 0);
    CHECK(strlen(out) > WEIR__SHA256_HEX_LEN);
    out[WEIR__SHA256_HEX_LEN] = '\0';

    weir__cl_plugin_ref ref;
    uint8_t *bytes = NULL;
    size_t len = 0;
    char msg[1024];
    CHECK_EQ(weir__plugin_ref_from_file(path, &ref, &bytes, &len, msg, sizeof(msg)), 0);
    char hex[WEIR__SHA256_HEX_SIZE];
    CHECK_STR(weir__sha256_hex(ref.sha256, hex), out);
    struct stat st;
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(ref.size, st.st_size);
    CHECK_EQ(len, st.st_size);
    uint8_t h[WEIR__SHA256_SIZE];
    CHECK_EQ(weir__sha256(bytes, len, h), 0);
    CHECK(memcmp(h, ref.sha256, sizeof(h)) == 0);
    /* The identity is the note's: this build's, since it built the plugin. */
    const weir_abi_id *self = weir_abi_self();
    CHECK_EQ(ref.abi.version, self->version);
    CHECK_STR(ref.abi.fingerprint, self->fingerprint);
    CHECK_STR(ref.abi.target, self->target);
    CHECK_STR(ref.abi.toolchain, self->toolchain);
    CHECK_EQ(weir__plugin_ref_abi_check(&ref, NULL, msg, sizeof(msg)), 0);
    CHECK_STR(msg, "");
    weir__free(bytes);

    /* Without the bytes: the same reference. */
    weir__cl_plugin_ref again;
    CHECK_EQ(weir__plugin_ref_from_file(path, &again, NULL, NULL, msg, sizeof(msg)), 0);
    CHECK(memcmp(again.sha256, ref.sha256, sizeof(h)) == 0);
    CHECK_EQ(again.size, ref.size);
    weir__plugin_ref_clear(&again);
    weir__plugin_ref_clear(&ref);
    CHECK(ref.abi.fingerprint == NULL);
    weir__plugin_ref_clear(&ref); /* twice: a no-op */
}

TEST(files_that_are_not_plugins_are_refused)
{
    char dir[256], path[512], msg[1024];
    make_tmpdir(dir);
    weir__cl_plugin_ref ref;
    uint8_t *bytes = (uint8_t *)1;
    size_t len = 7;

    snprintf(path, sizeof(path), "%s/missing.so", dir);
    CHECK_EQ(weir__plugin_ref_from_file(path, &ref, &bytes, &len, msg, sizeof(msg)), -ENOENT);
    CHECK_HAS(msg, "missing.so");
    CHECK(bytes == NULL);
    CHECK_EQ(len, 0);

    snprintf(path, sizeof(path), "%s/empty.so", dir);
    write_file(path, "", 0);
    CHECK_EQ(weir__plugin_ref_from_file(path, &ref, &bytes, &len, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "empty");

    snprintf(path, sizeof(path), "%s/text.so", dir);
    write_file(path, "not an ELF file\n", 16);
    CHECK_EQ(weir__plugin_ref_from_file(path, &ref, &bytes, &len, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "not a weir job plugin");
    CHECK(ref.abi.fingerprint == NULL);

    /* An ELF shared object without the weir note. */
    CHECK_EQ(weir__plugin_ref_from_file(plugin_path("job_not_plugin"), &ref, &bytes, &len, msg,
                                        sizeof(msg)),
             -ENOEXEC);
    CHECK_HAS(msg, "job_not_plugin.so");

    /* Past the frame's limit, refused on its size (a sparse file). */
    snprintf(path, sizeof(path), "%s/huge.so", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK_EQ(ftruncate(fd, (off_t)WEIR_CLUSTER_PLUGIN_SIZE_MAX + 1), 0);
    CHECK_EQ(close(fd), 0);
    CHECK_EQ(weir__plugin_ref_from_file(path, &ref, &bytes, &len, msg, sizeof(msg)), -EFBIG);
    CHECK_HAS(msg, "larger than");

    CHECK_EQ(weir__plugin_ref_from_file("", &ref, NULL, NULL, msg, sizeof(msg)), -EINVAL);
    remove_tree(dir);
}

TEST(abi_mismatch_names_both_identities)
{
    char msg[2048], hex[WEIR__SHA256_HEX_SIZE];
    weir__cl_plugin_ref ref;
    CHECK_EQ(weir__plugin_ref_from_file(plugin_path("job_bad_fingerprint"), &ref, NULL, NULL, msg,
                                        sizeof(msg)),
             0);
    CHECK_EQ(weir__plugin_ref_abi_check(&ref, NULL, msg, sizeof(msg)), WEIR_EABI);
    CHECK_HAS(msg, weir__sha256_hex(ref.sha256, hex));
    CHECK_HAS(msg, "before any bytes shipped");
    CHECK_HAS(msg, "plugin 0000000000000000000000000000000000000000000000000000000000000000");
    CHECK_HAS(msg, weir_abi_self()->fingerprint);
    weir__plugin_ref_clear(&ref);

    /* Against another host: every differing field, both values. */
    CHECK_EQ(
        weir__plugin_ref_from_file(plugin_path("job_count"), &ref, NULL, NULL, msg, sizeof(msg)),
        0);
    weir_abi_id host = *weir_abi_self();
    host.version += 1;
    host.toolchain = "othercc/tsan";
    CHECK_EQ(weir__plugin_ref_abi_check(&ref, &host, msg, sizeof(msg)), WEIR_EABI);
    char want[64];
    snprintf(want, sizeof(want), "plugin %d, weir %d", weir_abi_self()->version, host.version);
    CHECK_HAS(msg, want);
    snprintf(want, sizeof(want), "plugin %s, weir othercc/tsan", weir_abi_self()->toolchain);
    CHECK_HAS(msg, want);
    weir__plugin_ref_clear(&ref);
}

TEST(cache_refuses_a_wrong_hash_and_leaves_nothing)
{
    char dir[256], msg[1024];
    make_tmpdir(dir);
    weir__plugin_cache *c;
    CHECK_EQ(weir__plugin_cache_open(dir, &c, msg, sizeof(msg)), 0);
    CHECK_STR(weir__plugin_cache_dir(c), dir);
    const char *bytes = "the plugin's bytes";
    uint8_t wrong[WEIR__SHA256_SIZE];
    fake_hash("something else", wrong);
    CHECK_EQ(
        weir__plugin_cache_put(c, (const uint8_t *)bytes, strlen(bytes), wrong, msg, sizeof(msg)),
        -EBADMSG);
    char hex[WEIR__SHA256_HEX_SIZE];
    CHECK_HAS(msg, weir__sha256_hex(wrong, hex));
    hex_of(bytes, strlen(bytes), hex);
    CHECK_HAS(msg, hex);
    CHECK_EQ(count_entries(dir), 0);
    char *path = (char *)1;
    CHECK_EQ(weir__plugin_cache_lookup(c, wrong, &path), -ENOENT);
    CHECK(path == NULL);
    /* No bytes at all. */
    uint8_t empty[WEIR__SHA256_SIZE];
    CHECK_EQ(weir__sha256("", 0, empty), 0);
    CHECK_EQ(weir__plugin_cache_put(c, (const uint8_t *)"", 0, empty, msg, sizeof(msg)), -EMSGSIZE);
    CHECK_EQ(count_entries(dir), 0);
    weir__plugin_cache_free(c);
    remove_tree(dir);
}

TEST(cache_put_lookup_and_missing)
{
    char dir[256], msg[1024];
    make_tmpdir(dir);
    weir__plugin_cache *c;
    CHECK_EQ(weir__plugin_cache_open(dir, &c, msg, sizeof(msg)), 0);

    weir__cl_plugin_ref refs[4];
    uint8_t *bytes;
    size_t len;
    CHECK_EQ(weir__plugin_ref_from_file(plugin_path("job_count"), &refs[0], &bytes, &len, msg,
                                        sizeof(msg)),
             0);
    CHECK_EQ(
        weir__plugin_ref_from_file(plugin_path("job_eo"), &refs[1], NULL, NULL, msg, sizeof(msg)),
        0);
    refs[2] = refs[1]; /* named twice: asked for once */
    memset(&refs[3], 0, sizeof(refs[3]));
    fake_hash("a third plugin", refs[3].sha256);
    refs[3].size = 10;

    weir__plugin_stats before, after;
    weir__plugin_stats_read(&before);
    weir__cl_hash *missing;
    size_t nmissing;
    CHECK_EQ(weir__plugin_cache_missing(c, refs, 4, &missing, &nmissing, msg, sizeof(msg)), 0);
    CHECK_EQ(nmissing, 3);
    CHECK(memcmp(missing[0].b, refs[0].sha256, WEIR__SHA256_SIZE) == 0);
    CHECK(memcmp(missing[1].b, refs[1].sha256, WEIR__SHA256_SIZE) == 0);
    CHECK(memcmp(missing[2].b, refs[3].sha256, WEIR__SHA256_SIZE) == 0);
    weir__free(missing);
    weir__plugin_stats_read(&after);
    CHECK_EQ(after.cache_hits, before.cache_hits);

    /* The upload goes in; the next submit finds it. */
    CHECK_EQ(weir__plugin_cache_put(c, bytes, len, refs[0].sha256, msg, sizeof(msg)), 0);
    CHECK_EQ(count_entries(dir), 1); /* no temporary file left */
    char *path;
    CHECK_EQ(weir__plugin_cache_lookup(c, refs[0].sha256, &path), 0);
    char hex[WEIR__SHA256_HEX_SIZE], want[512];
    snprintf(want, sizeof(want), "%s/%s.so", dir, weir__sha256_hex(refs[0].sha256, hex));
    CHECK_STR(path, want);
    uint8_t *back;
    size_t backlen;
    CHECK_EQ(weir__file_read_all(path, len, &back, &backlen), 0);
    CHECK_EQ(backlen, len);
    CHECK(memcmp(back, bytes, len) == 0);
    weir__free(back);
    weir__free(path);
    /* A second put of the same plugin: nothing new. */
    CHECK_EQ(weir__plugin_cache_put(c, bytes, len, refs[0].sha256, msg, sizeof(msg)), 0);
    CHECK_EQ(count_entries(dir), 1);

    weir__plugin_stats_read(&before);
    CHECK_EQ(weir__plugin_cache_missing(c, refs, 4, &missing, &nmissing, msg, sizeof(msg)), 0);
    CHECK_EQ(nmissing, 2);
    CHECK(memcmp(missing[0].b, refs[1].sha256, WEIR__SHA256_SIZE) == 0);
    CHECK(memcmp(missing[1].b, refs[3].sha256, WEIR__SHA256_SIZE) == 0);
    weir__free(missing);
    weir__plugin_stats_read(&after);
    CHECK_EQ(after.cache_hits, before.cache_hits + 1);

    /* Everything cached: nothing to ask for, no allocation. */
    CHECK_EQ(weir__plugin_cache_missing(c, refs, 1, &missing, &nmissing, msg, sizeof(msg)), 0);
    CHECK_EQ(nmissing, 0);
    CHECK(missing == NULL);

    /* A reference that lies about the size of a cached plugin. */
    refs[0].size += 1;
    CHECK_EQ(weir__plugin_cache_missing(c, refs, 1, &missing, &nmissing, msg, sizeof(msg)),
             -EBADMSG);
    CHECK_HAS(msg, hex);
    CHECK(missing == NULL);
    refs[0].size -= 1;

    /* A cache reopened over the same directory sees what was put. */
    weir__plugin_cache_free(c);
    CHECK_EQ(weir__plugin_cache_open(dir, &c, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__plugin_cache_lookup(c, refs[0].sha256, &path), 0);
    weir__free(path);
    weir__plugin_cache_free(c);

    /* Not a directory. */
    char file[512];
    snprintf(file, sizeof(file), "%s/%s.so", dir, hex);
    CHECK_EQ(weir__plugin_cache_open(file, &c, msg, sizeof(msg)), -ENOTDIR);
    CHECK_HAS(msg, "not a directory");

    weir__free(bytes);
    weir__plugin_ref_clear(&refs[0]);
    weir__plugin_ref_clear(&refs[1]);
    remove_tree(dir);
}

TEST(deploy_plugins_resolve_or_fail_loudly)
{
    char dir[256], msg[1024], hex[WEIR__SHA256_HEX_SIZE];
    make_tmpdir(dir);
    weir__plugin_cache *c;
    CHECK_EQ(weir__plugin_cache_open(dir, &c, msg, sizeof(msg)), 0);
    const char *body = "plugin bytes for a deploy";
    weir__cl_deploy_plugin p = {.size = strlen(body)};
    CHECK_EQ(weir__sha256(body, strlen(body), p.sha256), 0);

    /* A reference first: this worker never received it. */
    char *path = (char *)1;
    CHECK_EQ(weir__plugin_cache_accept(c, &p, &path, msg, sizeof(msg)), -ENOENT);
    CHECK(path == NULL);
    CHECK_HAS(msg, weir__sha256_hex(p.sha256, hex));
    CHECK_HAS(msg, "does not hold it");

    /* Bytes, but not as many as the reference says. */
    p.bytes = (weir__cl_bytes){(const uint8_t *)body, (uint32_t)strlen(body) - 1};
    CHECK_EQ(weir__plugin_cache_accept(c, &p, &path, msg, sizeof(msg)), -EBADMSG);
    CHECK_EQ(count_entries(dir), 0);

    /* The bytes: put, and resolved. */
    p.bytes.n = (uint32_t)strlen(body);
    CHECK_EQ(weir__plugin_cache_accept(c, &p, &path, msg, sizeof(msg)), 0);
    CHECK_HAS(path, hex);
    weir__free(path);
    /* Then a reference to it resolves. */
    p.bytes = (weir__cl_bytes){NULL, 0};
    CHECK_EQ(weir__plugin_cache_accept(c, &p, &path, msg, sizeof(msg)), 0);
    CHECK_HAS(path, hex);
    weir__free(path);
    CHECK_EQ(weir__plugin_cache_accept(c, &p, NULL, msg, sizeof(msg)), 0);

    /* Bytes that are not the plugin named. */
    fake_hash("another", p.sha256);
    p.bytes = (weir__cl_bytes){(const uint8_t *)body, (uint32_t)strlen(body)};
    CHECK_EQ(weir__plugin_cache_accept(c, &p, &path, msg, sizeof(msg)), -EBADMSG);
    CHECK_HAS(msg, "not ");
    CHECK_EQ(count_entries(dir), 1);
    weir__plugin_cache_free(c);
    remove_tree(dir);
}

struct racer {
    weir__plugin_cache *c;
    const uint8_t *bytes;
    size_t len;
    const uint8_t *sha;
    int failures;
};

static void *race_puts(void *arg)
{
    struct racer *r = arg;
    char msg[256];
    for (int i = 0; i < 20; i++) {
        char *path = NULL;
        if (weir__plugin_cache_put(r->c, r->bytes, r->len, r->sha, msg, sizeof(msg)) != 0 ||
            weir__plugin_cache_lookup(r->c, r->sha, &path) != 0)
            r->failures++;
        weir__free(path);
    }
    return NULL;
}

/* Threads putting the same plugin at once (two Deploys for one worker, or
 * an upload racing a deploy): one entry, whole, no temporary left. */
TEST(concurrent_puts_publish_one_whole_entry)
{
    char dir[256], msg[1024];
    make_tmpdir(dir);
    weir__plugin_cache *c;
    CHECK_EQ(weir__plugin_cache_open(dir, &c, msg, sizeof(msg)), 0);
    weir__cl_plugin_ref ref;
    uint8_t *bytes;
    size_t len;
    CHECK_EQ(
        weir__plugin_ref_from_file(plugin_path("job_count"), &ref, &bytes, &len, msg, sizeof(msg)),
        0);
    struct racer r[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (struct racer){c, bytes, len, ref.sha256, 0};
        CHECK_EQ(pthread_create(&t[i], NULL, race_puts, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(pthread_join(t[i], NULL), 0);
        CHECK_EQ(r[i].failures, 0);
    }
    CHECK_EQ(count_entries(dir), 1);
    char *path;
    CHECK_EQ(weir__plugin_cache_lookup(c, ref.sha256, &path), 0);
    uint8_t *back;
    size_t backlen;
    CHECK_EQ(weir__file_read_all(path, len, &back, &backlen), 0);
    CHECK_EQ(backlen, len);
    CHECK(memcmp(back, bytes, len) == 0);
    weir__free(back);
    weir__free(path);
    weir__free(bytes);
    weir__plugin_ref_clear(&ref);
    weir__plugin_cache_free(c);
    remove_tree(dir);
}

TEST(shipped_set_dedups_and_counts)
{
    weir__plugin_shipped s;
    weir__plugin_shipped_init(&s, 0);
    CHECK_EQ(s.max, WEIR__PLUGIN_SHIPPED_MAX);
    uint8_t a[WEIR__SHA256_SIZE], b[WEIR__SHA256_SIZE];
    fake_hash("plugin a", a);
    fake_hash("plugin b", b);
    CHECK_EQ(weir__plugin_shipped_has(&s, a), 0); /* empty: nothing allocated */
    weir__plugin_stats before, after;
    weir__plugin_stats_read(&before);
    CHECK_EQ(weir__plugin_shipped_plan(&s, a, 1000), 1);
    CHECK_EQ(weir__plugin_shipped_plan(&s, a, 1000), 0);
    CHECK_EQ(weir__plugin_shipped_plan(&s, b, 24), 1);
    CHECK_EQ(weir__plugin_shipped_plan(&s, a, 1000), 0);
    CHECK_EQ(weir__plugin_shipped_plan(&s, b, 24), 0);
    weir__plugin_stats_read(&after);
    CHECK_EQ(after.bytes_shipped - before.bytes_shipped, 1024);
    CHECK_EQ(after.ships_deduped - before.ships_deduped, 3);
    CHECK_EQ(s.n, 2);
    /* A re-registered worker: a new connection, an empty set, full bytes. */
    weir__plugin_shipped_clear(&s);
    CHECK_EQ(weir__plugin_shipped_has(&s, a), 0);
    CHECK_EQ(weir__plugin_shipped_plan(&s, a, 1000), 1);
    weir__plugin_shipped_clear(&s);
}

TEST(shipped_set_is_bounded)
{
    weir__plugin_shipped s;
    weir__plugin_shipped_init(&s, 8);
    uint8_t h[100][WEIR__SHA256_SIZE];
    char label[32];
    for (int i = 0; i < 100; i++) {
        snprintf(label, sizeof(label), "plugin %d", i);
        fake_hash(label, h[i]);
    }
    for (int i = 0; i < 8; i++)
        CHECK_EQ(weir__plugin_shipped_add(&s, h[i]), 1);
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(weir__plugin_shipped_has(&s, h[i]), 1);
        CHECK_EQ(weir__plugin_shipped_add(&s, h[i]), 0);
    }
    CHECK_EQ(s.n, 8);
    CHECK_EQ(s.resets, 0);
    /* The ninth: full, so it starts over with only the new one. */
    CHECK_EQ(weir__plugin_shipped_add(&s, h[8]), 1);
    CHECK_EQ(s.n, 1);
    CHECK_EQ(s.resets, 1);
    CHECK_EQ(weir__plugin_shipped_has(&s, h[8]), 1);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(weir__plugin_shipped_has(&s, h[i]), 0);
    size_t cap = s.cap;
    for (int i = 9; i < 100; i++) {
        CHECK_EQ(weir__plugin_shipped_add(&s, h[i]), 1);
        CHECK_LE(s.n, 8);
        CHECK_EQ(s.cap, cap); /* memory stays what the bound set */
        CHECK_EQ(weir__plugin_shipped_has(&s, h[i]), 1);
    }
    weir__plugin_shipped_clear(&s);
    /* A bound past the hard limit is clamped. */
    weir__plugin_shipped_init(&s, SIZE_MAX);
    CHECK_EQ(s.max, (size_t)1 << 20);
    weir__plugin_shipped_clear(&s);
}

/* Run op once counting its allocations, then with each one failing in
 * turn: every failure must be -ENOMEM, and undo must leave no trace. */
#define EVERY_ALLOC_FAILS(what, op, ok_cleanup, fail_check)                                        \
    do {                                                                                           \
        weir__alloc_fail_after(LONG_MAX);                                                          \
        int e_ = (op);                                                                             \
        long n_ = weir__alloc_fail_after(-1);                                                      \
        CHECK_EQ(e_, 0);                                                                           \
        ok_cleanup;                                                                                \
        CHECK_GT(n_, 0);                                                                           \
        for (long i_ = 0; i_ < n_; i_++) {                                                         \
            weir__alloc_fail_after(i_);                                                            \
            e_ = (op);                                                                             \
            weir__alloc_fail_after(-1);                                                            \
            if (e_ != -ENOMEM)                                                                     \
                TEST__FAIL("%s: allocation %ld of %ld failed, got %d", what, i_, n_, e_);          \
            fail_check;                                                                            \
        }                                                                                          \
    } while (0)

/* 0 when h was added, else the error (1 "already there" is a failure here). */
static int shipped_add_new(weir__plugin_shipped *s, const uint8_t h[WEIR__SHA256_SIZE])
{
    int e = weir__plugin_shipped_add(s, h);
    return e == 1 ? 0 : e < 0 ? e : -EEXIST;
}

TEST(every_allocation_failure_is_an_error)
{
    char dir[256], msg[1024];
    make_tmpdir(dir);
    weir__cl_plugin_ref ref;
    uint8_t *bytes = NULL;
    size_t len = 0;
    const char *path = plugin_path("job_count");
    EVERY_ALLOC_FAILS("ref_from_file",
                      weir__plugin_ref_from_file(path, &ref, &bytes, &len, msg, sizeof(msg)),
                      (weir__plugin_ref_clear(&ref), weir__free(bytes)),
                      CHECK(bytes == NULL && ref.abi.fingerprint == NULL));

    weir__plugin_cache *c = NULL;
    EVERY_ALLOC_FAILS("cache_open", weir__plugin_cache_open(dir, &c, msg, sizeof(msg)),
                      weir__plugin_cache_free(c), CHECK(c == NULL));
    CHECK_EQ(weir__plugin_cache_open(dir, &c, msg, sizeof(msg)), 0);

    CHECK_EQ(weir__plugin_ref_from_file(path, &ref, &bytes, &len, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__plugin_cache_put(c, bytes, len, ref.sha256, msg, sizeof(msg)), 0);
    char *found = NULL;
    EVERY_ALLOC_FAILS("cache_lookup", weir__plugin_cache_lookup(c, ref.sha256, &found),
                      weir__free(found), CHECK(found == NULL));

    weir__cl_plugin_ref refs[2] = {ref, {.size = 5}};
    fake_hash("not cached", refs[1].sha256);
    weir__cl_hash *missing = NULL;
    size_t nmissing = 0;
    EVERY_ALLOC_FAILS(
        "cache_missing",
        weir__plugin_cache_missing(c, refs, 2, &missing, &nmissing, msg, sizeof(msg)),
        {
            CHECK_EQ(nmissing, 1);
            weir__free(missing);
        },
        CHECK(missing == NULL && nmissing == 0));

    weir__cl_deploy_plugin dp = {.size = len, .bytes = {bytes, (uint32_t)len}};
    memcpy(dp.sha256, ref.sha256, sizeof(dp.sha256));
    EVERY_ALLOC_FAILS("cache_accept", weir__plugin_cache_accept(c, &dp, &found, msg, sizeof(msg)),
                      weir__free(found), CHECK(found == NULL));
    CHECK_EQ(count_entries(dir), 1);

    weir__plugin_shipped s;
    weir__plugin_shipped_init(&s, 4);
    EVERY_ALLOC_FAILS("shipped_add", shipped_add_new(&s, ref.sha256),
                      weir__plugin_shipped_clear(&s), CHECK(s.cap == 0 && s.n == 0));
    /* Planning through a failure still ships the bytes, and counts them. */
    weir__plugin_stats before, after;
    weir__plugin_stats_read(&before);
    weir__alloc_fail_after(0);
    int plan = weir__plugin_shipped_plan(&s, ref.sha256, 10);
    weir__alloc_fail_after(-1);
    CHECK_EQ(plan, 1);
    CHECK_EQ(weir__plugin_shipped_has(&s, ref.sha256), 0);
    weir__plugin_stats_read(&after);
    CHECK_EQ(after.bytes_shipped - before.bytes_shipped, 10);
    weir__plugin_shipped_clear(&s);

    weir__plugin_cache_free(c);
    weir__free(bytes);
    weir__plugin_ref_clear(&ref);
    remove_tree(dir);
}

TEST_MAIN()
