/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ha.c - leader election over a directory and fenced records
 * (cluster/ha.h): the lock probe, one leader at a time between processes
 * and within one, the epoch bumped by every new leader, a leader's lock
 * released by its death, a superseded leader's writes refused, two
 * writers that cannot both pass the compare-and-set, and malformed
 * leader files refused with what is wrong.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "cluster/ha.h"
#include "test.h"

static char *tmpdir(void)
{
    static char d[64];
    snprintf(d, sizeof(d), "/tmp/weir-test-ha-XXXXXX");
    CHECK(mkdtemp(d));
    return d;
}

static void rm_rf(const char *d)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
    CHECK_EQ(system(cmd), 0);
}

static void put_file(const char *dir, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    CHECK(f);
    fputs(text, f);
    CHECK_EQ(fclose(f), 0);
}

TEST(the_probe_finds_a_local_directory_excludes_other_processes)
{
    char *d = tmpdir(), msg[1024] = "";
    CHECK_EQ(weir__ha_probe_locks(d, msg, sizeof(msg)), 0);
    weir__ha *ha = NULL;
    CHECK_EQ(weir__ha_open(d, 0, &ha, msg, sizeof(msg)), 0);
    CHECK(ha);
    weir__ha_close(ha);
    rm_rf(d);
}

TEST(a_directory_that_cannot_be_one_is_refused_by_name)
{
    char *d = tmpdir(), msg[1024] = "", p[512];
    put_file(d, "plain", "x");
    snprintf(p, sizeof(p), "%s/plain", d);
    weir__ha *ha = NULL;
    CHECK_EQ(weir__ha_open(p, 0, &ha, msg, sizeof(msg)), -ENOTDIR);
    CHECK(!ha);
    CHECK_HAS(msg, "not a directory");
    CHECK_HAS(msg, p);
    CHECK_EQ(weir__ha_open("", 0, &ha, msg, sizeof(msg)), -EINVAL);
    /* A missing directory is made. */
    snprintf(p, sizeof(p), "%s/made", d);
    CHECK_EQ(weir__ha_open(p, 0, &ha, msg, sizeof(msg)), 0);
    struct stat st;
    CHECK_EQ(stat(p, &st), 0);
    CHECK(S_ISDIR(st.st_mode));
    weir__ha_close(ha);
    rm_rf(d);
}

TEST(one_leader_at_a_time_in_a_process_and_each_new_one_bumps_the_epoch)
{
    char *d = tmpdir(), msg[1024] = "";
    weir__ha *a, *b;
    CHECK_EQ(weir__ha_open(d, 0, &a, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__ha_open(d, 0, &b, msg, sizeof(msg)), 0);
    uint64_t ea = 0, eb = 0;
    CHECK_EQ(weir__ha_try_lead(a, "host-a", &ea, msg, sizeof(msg)), 1);
    CHECK_EQ(ea, 1);
    CHECK_EQ(weir__ha_try_lead(b, "host-b", &eb, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__ha_try_lead(a, "host-a", &ea, msg, sizeof(msg)), 1); /* still, same epoch */
    CHECK_EQ(ea, 1);
    weir__ha_leader l;
    CHECK_EQ(weir__ha_read_leader(d, &l, msg, sizeof(msg)), 0);
    CHECK_STR(l.host, "host-a");
    CHECK_EQ(l.port, 0); /* not announced yet */
    CHECK_EQ(l.epoch, 1);
    CHECK_EQ(weir__ha_announce(a, 4242, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__ha_read_leader(d, &l, msg, sizeof(msg)), 0);
    CHECK_EQ(l.port, 4242);
    CHECK_EQ(l.epoch, 1);
    CHECK_GT(l.time_ms, 0);
    /* A standby cannot announce. */
    CHECK_EQ(weir__ha_announce(b, 1, msg, sizeof(msg)), -EPERM);
    weir__ha_close(a);
    CHECK_EQ(weir__ha_try_lead(b, "host-b", &eb, msg, sizeof(msg)), 1);
    CHECK_EQ(eb, 2);
    CHECK_EQ(weir__ha_read_leader(d, &l, msg, sizeof(msg)), 0);
    CHECK_STR(l.host, "host-b");
    CHECK_EQ(l.epoch, 2);
    weir__ha_close(b);
    rm_rf(d);
}

/* A child that leads, says so on a pipe, then waits to be killed. */
static pid_t child_leader(const char *d, uint64_t *epoch)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        char msg[1024];
        weir__ha *ha;
        uint64_t e = 0;
        if (weir__ha_open(d, 0, &ha, msg, sizeof(msg)) < 0 ||
            weir__ha_try_lead(ha, "child", &e, msg, sizeof(msg)) != 1)
            _exit(1);
        if (write(p[1], &e, sizeof(e)) != (ssize_t)sizeof(e))
            _exit(1);
        for (;;)
            pause();
    }
    close(p[1]);
    CHECK_EQ(read(p[0], epoch, sizeof(*epoch)), (ssize_t)sizeof(*epoch));
    close(p[0]);
    return pid;
}

TEST(a_leader_in_another_process_holds_until_it_dies)
{
    char *d = tmpdir(), msg[1024] = "";
    uint64_t ce = 0, e = 0;
    pid_t pid = child_leader(d, &ce);
    CHECK_EQ(ce, 1);
    weir__ha *ha;
    CHECK_EQ(weir__ha_open(d, 0, &ha, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__ha_try_lead(ha, "parent", &e, msg, sizeof(msg)), 0);
    CHECK_EQ(kill(pid, SIGKILL), 0);
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    /* The kernel released the dead leader's lock: the standby leads at its
     * next poll, one epoch above. */
    CHECK_EQ(weir__ha_try_lead(ha, "parent", &e, msg, sizeof(msg)), 1);
    CHECK_EQ(e, 2);
    weir__ha_leader l;
    CHECK_EQ(weir__ha_read_leader(d, &l, msg, sizeof(msg)), 0);
    CHECK_STR(l.host, "parent");
    weir__ha_close(ha);
    rm_rf(d);
}

TEST(a_superseded_leader_cannot_overwrite_its_successor)
{
    char *d = tmpdir(), msg[1024] = "", path[512];
    snprintf(path, sizeof(path), "%s/%s", d, WEIR__HA_LEADER_FILE);
    weir__ha *a;
    uint64_t e = 0, stored = 0;
    CHECK_EQ(weir__ha_open(d, 0, &a, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__ha_try_lead(a, "old", &e, msg, sizeof(msg)), 1);
    /* A successor (its lock taken on another host, say) wrote epoch 5. */
    json_t *o = json_pack("{s:s, s:i}", "host", "new", "port", 7000);
    CHECK_EQ(weir__ha_cas_write(path, 5, o, &stored, msg, sizeof(msg)), 0);
    CHECK_EQ(stored, 1);
    json_decref(o);
    CHECK_EQ(weir__ha_announce(a, 6000, msg, sizeof(msg)), -ESTALE);
    CHECK_HAS(msg, "epoch 5");
    weir__ha_leader l;
    CHECK_EQ(weir__ha_read_leader(d, &l, msg, sizeof(msg)), 0);
    CHECK_STR(l.host, "new");
    CHECK_EQ(l.port, 7000);
    CHECK_EQ(l.epoch, 5);
    /* The same epoch may write again (the leader announcing its port). */
    o = json_pack("{s:s, s:i}", "host", "new", "port", 7001);
    CHECK_EQ(weir__ha_cas_write(path, 5, o, NULL, msg, sizeof(msg)), 0);
    json_decref(o);
    weir__ha_close(a);
    rm_rf(d);
}

/* ---- two writers racing the compare-and-set ---- */
static _Atomic int inside, most_inside;
static __thread int slow;

static void count_inside(const char *path)
{
    (void)path;
    int n = atomic_fetch_add(&inside, 1) + 1;
    int m = atomic_load(&most_inside);
    while (n > m && !atomic_compare_exchange_weak(&most_inside, &m, n))
        ;
    if (slow) /* stretch the window between the read and the rename */
        nanosleep(&(struct timespec){0, 200 * 1000000L}, NULL);
    atomic_fetch_sub(&inside, 1);
}

typedef struct racer {
    const char *path;
    uint64_t epoch;
    int slow, rc;
    _Atomic int *started;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    slow = r->slow;
    char msg[1024];
    json_t *o = json_pack("{s:s}", "who", r->slow ? "slow" : "fast");
    atomic_store(r->started, 1);
    r->rc = weir__ha_cas_write(r->path, r->epoch, o, NULL, msg, sizeof(msg));
    json_decref(o);
    return NULL;
}

TEST(two_writers_cannot_straddle_the_compare_and_set)
{
    char *d = tmpdir(), path[512], msg[1024];
    snprintf(path, sizeof(path), "%s/job-1.json", d);
    weir__ha_cas_hook = count_inside;
    /* The lower epoch reads first and dawdles inside; the higher one comes
     * while it is there, must wait for its rename, and wins after it. */
    _Atomic int s1 = 0, s2 = 0;
    racer lo = {path, 2, 1, 0, &s1}, hi = {path, 3, 0, 0, &s2};
    pthread_t t1, t2;
    CHECK_EQ(pthread_create(&t1, NULL, race, &lo), 0);
    while (!atomic_load(&s1) || !atomic_load(&inside))
        sched_yield();
    CHECK_EQ(pthread_create(&t2, NULL, race, &hi), 0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    CHECK_EQ(atomic_load(&most_inside), 1);
    CHECK_EQ(lo.rc, 0);
    CHECK_EQ(hi.rc, 0);
    /* The other order: the higher epoch is stored first, the lower one is
     * refused however long it took. */
    atomic_store(&most_inside, 0);
    racer lo2 = {path, 2, 0, 0, &s1};
    race(&lo2);
    CHECK_EQ(lo2.rc, -ESTALE);
    weir__ha_cas_hook = NULL;
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    CHECK(o);
    CHECK_EQ(json_integer_value(json_object_get(o, "epoch")), 3);
    CHECK_STR(json_string_value(json_object_get(o, "who")), "fast");
    json_decref(o);
    /* The lock file stays; no temporary file is left. */
    char p[600];
    snprintf(p, sizeof(p), "%s.wlock", path);
    CHECK_EQ(access(p, F_OK), 0);
    snprintf(p, sizeof(p), "%s.tmp", path);
    CHECK_NE(access(p, F_OK), 0);
    (void)msg;
    rm_rf(d);
}

TEST(malformed_leader_files_are_refused_naming_the_field)
{
    char *d = tmpdir(), msg[1024] = "", path[512];
    weir__ha_leader l;
    CHECK_EQ(weir__ha_read_leader(d, &l, msg, sizeof(msg)), -ENOENT);
    static const struct {
        const char *text, *says;
    } bad[] = {
        {"{", "not a JSON record"},
        {"[]", "\"host\""},
        {"{\"host\":\"\",\"port\":1,\"epoch\":1}", "\"host\""},
        {"{\"host\":\"h\",\"port\":70000,\"epoch\":1}", "\"port\""},
        {"{\"host\":\"h\",\"port\":\"1\",\"epoch\":1}", "\"port\""},
        {"{\"host\":\"h\",\"port\":1,\"epoch\":0}", "\"epoch\""},
        {"{\"host\":\"h\",\"port\":1}", "\"epoch\""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        put_file(d, WEIR__HA_LEADER_FILE, bad[i].text);
        msg[0] = 0;
        CHECK_EQ(weir__ha_read_leader(d, &l, msg, sizeof(msg)), -EBADMSG);
        CHECK_HAS(msg, bad[i].says);
    }
    /* A fenced write refuses to replace a record it cannot read. */
    put_file(d, WEIR__HA_LEADER_FILE, "{\"epoch\":-3}");
    snprintf(path, sizeof(path), "%s/%s", d, WEIR__HA_LEADER_FILE);
    json_t *o = json_object();
    CHECK_EQ(weir__ha_cas_write(path, 9, o, NULL, msg, sizeof(msg)), -EBADMSG);
    CHECK_HAS(msg, "epoch");
    json_decref(o);
    rm_rf(d);
}

TEST(job_records_and_plugins_are_kept_by_the_leader_and_fenced)
{
    char *d = tmpdir(), msg[1024] = "";
    weir__ha *a, *b;
    uint64_t e = 0;
    CHECK_EQ(weir__ha_open(d, 0, &a, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__ha_open(d, 0, &b, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__ha_try_lead(a, "a", &e, msg, sizeof(msg)), 1);
    /* Plugins by content: read back whole, and checked. */
    static const char so[] = "not really an ELF, but bytes";
    uint8_t sha[WEIR__SHA256_SIZE], *back = NULL;
    CHECK_EQ(weir__sha256(so, sizeof(so), sha), 0);
    CHECK_EQ(weir__ha_plugin_put(a, sha, so, sizeof(so), msg, sizeof(msg)), 0);
    CHECK_EQ(weir__ha_plugin_put(a, sha, so, sizeof(so), msg, sizeof(msg)), 0); /* again: kept */
    CHECK_EQ(weir__ha_plugin_read(a, sha, sizeof(so), &back, msg, sizeof(msg)), 0);
    CHECK(memcmp(back, so, sizeof(so)) == 0);
    weir__free(back);
    CHECK_EQ(weir__ha_plugin_read(a, sha, sizeof(so) + 1, &back, msg, sizeof(msg)), -EBADMSG);
    CHECK_HAS(msg, "not the");
    uint8_t other[WEIR__SHA256_SIZE];
    memcpy(other, sha, sizeof(other));
    other[0] ^= 1;
    CHECK_EQ(weir__ha_plugin_read(a, other, sizeof(so), &back, msg, sizeof(msg)), -ENOENT);
    /* A plugin file whose bytes changed under its name is refused. */
    char hex[WEIR__SHA256_HEX_SIZE], name[128];
    snprintf(name, sizeof(name), "plugins/%s.so", weir__sha256_hex(sha, hex));
    char text[sizeof(so)];
    memcpy(text, so, sizeof(so));
    text[0] = 'N';
    text[sizeof(text) - 1] = '\0';
    put_file(d, name, text);
    CHECK_EQ(weir__ha_plugin_read(a, sha, sizeof(so) - 1, &back, msg, sizeof(msg)), -EBADMSG);
    CHECK_HAS(msg, "do not hash to its name");
    /* Job records: listed in id order, read back, moved to the history. */
    uint64_t *ids;
    size_t n;
    CHECK_EQ(weir__ha_jobs(a, WEIR__HA_JOBS, &ids, &n, msg, sizeof(msg)), 0);
    CHECK_EQ(n, 0);
    for (uint64_t id = 12; id >= 10; id--) {
        json_t *o = json_pack("{s:I}", "id", (json_int_t)id);
        CHECK_EQ(weir__ha_job_put(a, id, o, msg, sizeof(msg)), 0);
        json_decref(o);
    }
    put_file(d, "jobs/notes.txt", "ignored");
    CHECK_EQ(weir__ha_jobs(a, WEIR__HA_JOBS, &ids, &n, msg, sizeof(msg)), 0);
    CHECK_EQ(n, 3);
    CHECK_EQ(ids[0], 10);
    CHECK_EQ(ids[2], 12);
    weir__free(ids);
    json_t *o = weir__ha_job_load(a, WEIR__HA_JOBS, 11, msg, sizeof(msg));
    CHECK(o);
    CHECK_EQ(json_integer_value(json_object_get(o, "epoch")), 1);
    json_decref(o);
    CHECK(!weir__ha_job_load(a, WEIR__HA_JOBS, 99, msg, sizeof(msg)));
    json_t *h = json_pack("{s:s}", "state", "succeeded");
    CHECK_EQ(weir__ha_job_end(a, 11, h, msg, sizeof(msg)), 0);
    json_decref(h);
    CHECK_EQ(weir__ha_jobs(a, WEIR__HA_JOBS, &ids, &n, msg, sizeof(msg)), 0);
    CHECK_EQ(n, 2);
    CHECK_EQ(ids[1], 12);
    weir__free(ids);
    CHECK_EQ(weir__ha_jobs(a, WEIR__HA_HISTORY, &ids, &n, msg, sizeof(msg)), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(ids[0], 11);
    weir__free(ids);
    o = weir__ha_job_load(a, WEIR__HA_HISTORY, 11, msg, sizeof(msg));
    CHECK(o);
    CHECK_STR(json_string_value(json_object_get(o, "state")), "succeeded");
    json_decref(o);
    char p[600];
    /* A new leader rewrites a record; the old one can then neither
     * rewrite nor remove it. */
    uint64_t old_epoch = weir__ha_epoch(a);
    CHECK_EQ(old_epoch, 1);
    weir__ha_close(a);
    CHECK_EQ(weir__ha_try_lead(b, "b", &e, msg, sizeof(msg)), 1);
    CHECK_EQ(e, 2);
    o = json_pack("{s:I}", "id", (json_int_t)12);
    CHECK_EQ(weir__ha_job_put(b, 12, o, msg, sizeof(msg)), 0);
    json_decref(o);
    snprintf(p, sizeof(p), "%s/jobs/12.json", d);
    o = json_object();
    CHECK_EQ(weir__ha_cas_write(p, old_epoch, o, NULL, msg, sizeof(msg)), -ESTALE);
    json_decref(o);
    CHECK_EQ(weir__ha_cas_write(p, old_epoch, NULL, NULL, msg, sizeof(msg)), -ESTALE);
    CHECK_EQ(access(p, F_OK), 0);
    weir__ha_close(b);
    rm_rf(d);
}

TEST(a_superseded_leader_cannot_add_a_record_either)
{
    /* A record that does not exist yet holds no epoch of its own: the
     * leader file's epoch fences it. Here a later leader (another host's,
     * whose lock this one could not see) has written the leader file. */
    char *d = tmpdir(), msg[1024] = "", p[600];
    weir__ha *a;
    uint64_t e = 0;
    CHECK_EQ(weir__ha_open(d, 0, &a, msg, sizeof(msg)), 0);
    CHECK_EQ(weir__ha_try_lead(a, "a", &e, msg, sizeof(msg)), 1);
    json_t *o = json_pack("{s:I}", "id", (json_int_t)7);
    CHECK_EQ(weir__ha_job_put(a, 7, o, msg, sizeof(msg)), 0);
    json_decref(o);
    put_file(d, "active-leader.json",
             "{\"host\":\"elsewhere\",\"port\":7000,\"epoch\":5,\"time_ms\":1}");
    o = json_pack("{s:I}", "id", (json_int_t)8);
    CHECK_EQ(weir__ha_job_put(a, 8, o, msg, sizeof(msg)), -ESTALE);
    CHECK_HAS(msg, "another coordinator leads now");
    CHECK_HAS(msg, "epoch 5");
    json_decref(o);
    snprintf(p, sizeof(p), "%s/jobs/8.json", d);
    CHECK(access(p, F_OK) < 0);
    /* Nor end or remove one it wrote while it led. */
    json_t *h = json_pack("{s:s}", "state", "succeeded");
    CHECK_EQ(weir__ha_job_end(a, 7, h, msg, sizeof(msg)), -ESTALE);
    json_decref(h);
    CHECK_EQ(weir__ha_job_remove(a, 7, msg, sizeof(msg)), -ESTALE);
    snprintf(p, sizeof(p), "%s/jobs/7.json", d);
    CHECK_EQ(access(p, F_OK), 0);
    snprintf(p, sizeof(p), "%s/history/7.json", d);
    CHECK(access(p, F_OK) < 0);
    weir__ha_close(a);
    rm_rf(d);
}

TEST_MAIN()
