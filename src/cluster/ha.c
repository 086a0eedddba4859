/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ha.c - leader election over a shared directory and fenced records
 * (ha.h).
 *
 * The leader lock is an open-file-description lock (F_OFD_SETLK): a
 * write lock on all of leader.lock, owned by the descriptor this process
 * opened, so no other open and close of the file in the process drops it
 * (a classic POSIX record lock goes with any close of the file by its
 * process) and two elections in one process exclude each other as two
 * processes do. The kernel releases it when the descriptor closes, at the
 * latest when the process dies. The probe uses a classic record lock and a
 * forked child: that is what a mount that does not lock between
 * processes gets wrong.
 */
#include "cluster/ha.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/afile.h"
#include "base/alloc.h"
#include "base/wall.h"
#include "base/log.h"
#include "rt/rt_int.h"

#define LOG        "ha"
#define PROBE_FILE ".lock-probe"

void (*weir__ha_cas_hook)(const char *path);

struct weir__ha {
    char dir[4096];
    char leader[4200]; /* dir/active-leader.json */
    char host[WEIR_CLUSTER_HOST_MAX + 1];
    int fd; /* leader.lock */
    int leading;
    uint64_t epoch;
    int64_t elected_ms; /* Unix time this process came to lead */
};

static int path_in(char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* ---- the probe --------------------------------------------------------------------------- */
/* The parent's lock on the probe file is an open-file-description lock:
 * another probe in the same process (an embedder's second coordinator)
 * cannot drop it by closing the file, and it conflicts with the child's
 * classic record lock as another process's would. */
static int ofd_lock(int fd, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    return fcntl(fd, F_OFD_SETLK, &fl) == 0 ? 0 : -errno;
}

/* The directory part of path (dir[cap]) and its last name. */
static const char *split_path(const char *path, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) {
        snprintf(dir, cap, ".");
        return path;
    }
    *(slash == dir ? slash + 1 : slash) = '\0';
    return strrchr(path, '/') + 1;
}

/* fsync of the directory holding path (its new or removed entry made
 * durable). */
static int sync_parent(const char *path)
{
    char dir[4300];
    split_path(path, dir, sizeof(dir));
    return weir__fsync_dir(dir);
}

int weir__ha_probe_locks(const char *dir, char *msg, size_t cap)
{
    char path[4200];
    if (path_in(path, sizeof(path), dir, PROBE_FILE) < 0) {
        snprintf(msg, cap, "%s: the path is too long", dir);
        return -ENAMETOOLONG;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = -errno;
        snprintf(msg, cap, "%s: %s", path, strerror(-e));
        return e;
    }
    int e = ofd_lock(fd, F_WRLCK);
    if (e == -EAGAIN || e == -EACCES) {
        close(fd);
        snprintf(msg, cap,
                 "%s is locked by another process (a coordinator starting beside this one)", path);
        return -EAGAIN;
    }
    if (e < 0) {
        close(fd);
        snprintf(msg, cap, "locking %s: %s", path, strerror(-e));
        return e;
    }
    /* Record locks belong to a process: only another process asking shows
     * whether the file system excludes it. The child does nothing but
     * async-signal-safe calls. */
    pid_t pid = fork();
    if (pid == 0) {
        int cfd = open(path, O_RDWR | O_CLOEXEC);
        if (cfd < 0)
            _exit(3);
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        if (fcntl(cfd, F_SETLK, &fl) == 0)
            _exit(0); /* granted: the lock excludes nothing */
        _exit(errno == EAGAIN || errno == EACCES ? 1 : 2);
    }
    int rc;
    if (pid < 0) {
        rc = -errno;
        snprintf(msg, cap, "fork for the lock probe: %s", strerror(-rc));
    } else {
        int st = 0;
        pid_t w;
        while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
            ;
        /* No status (SIGCHLD ignored: the child was reaped for us) proves
         * nothing either way. */
        int code = w != pid ? -2 : WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (code == -2) {
            rc = -EAGAIN;
            snprintf(msg, cap, "the lock probe's child left no exit status (SIGCHLD ignored?)");
        } else if (code == 1) {
            rc = 0;
        } else if (code == 0) {
            rc = 1;
            snprintf(msg, cap,
                     "%s does not honour POSIX record locks between processes: a second "
                     "process was granted the lock this one holds, so every coordinator "
                     "sharing it would lead. The usual causes are a bind mount of a "
                     "container runtime, a 9p or virtiofs share, or NFS mounted with nolock; "
                     "use a local directory or a mount that locks. "
                     "--ha-allow-unsafe-locks runs anyway",
                     dir);
        } else {
            rc = -EIO;
            snprintf(msg, cap, "the lock probe on %s could not run (its child exited %d)", path,
                     code);
        }
    }
    ofd_lock(fd, F_UNLCK);
    close(fd);
    return rc;
}

/* ---- fenced records ---------------------------------------------------------------------- */
/* The epoch stored at path: 0 when there is no record. */
static int stored_epoch(const char *path, uint64_t *out, char *msg, size_t cap)
{
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o) {
        if (access(path, F_OK) != 0 && errno == ENOENT) {
            *out = 0;
            return 0;
        }
        snprintf(msg, cap, "%s: not a JSON record (%s, line %d)", path, je.text, je.line);
        return -EBADMSG;
    }
    json_t *e = json_object_get(o, "epoch");
    int rc = 0;
    if (!json_is_integer(e) || json_integer_value(e) < 0) {
        snprintf(msg, cap, "%s: its \"epoch\" is missing or not a non-negative integer", path);
        rc = -EBADMSG;
    } else {
        *out = (uint64_t)json_integer_value(e);
    }
    json_decref(o);
    return rc;
}

/* s written to path atomically (base/afile.h: a temporary file fsynced,
 * renamed, the directory fsynced). */
static int replace_file(const char *path, const char *s, char *msg, size_t cap)
{
    char dir[4300];
    const char *name = split_path(path, dir, sizeof(dir));
    int e = weir__file_write_atomic(dir, name, s, strlen(s));
    if (e < 0)
        snprintf(msg, cap, "writing %s: %s", path, strerror(-e));
    return e;
}

int weir__ha_cas_write(const char *path, uint64_t epoch, json_t *obj, uint64_t *stored, char *msg,
                       size_t cap)
{
    char wl[4300];
    if (snprintf(wl, sizeof(wl), "%s.wlock", path) >= (int)sizeof(wl)) {
        snprintf(msg, cap, "%s: the path is too long", path);
        return -ENAMETOOLONG;
    }
    /* Created once and never removed: a writer that removed and made it
     * again could lock a fresh file while another holds the old one. */
    int lfd = open(wl, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lfd < 0) {
        int e = -errno;
        snprintf(msg, cap, "%s: %s", wl, strerror(-e));
        return e;
    }
    int e;
    while ((e = flock(lfd, LOCK_EX)) < 0 && errno == EINTR)
        ;
    if (e < 0) {
        e = -errno;
        snprintf(msg, cap, "locking %s: %s", wl, strerror(-e));
        close(lfd);
        return e;
    }
    uint64_t cur = 0;
    e = stored_epoch(path, &cur, msg, cap);
    if (e == -EBADMSG && !obj) /* a record no one can read may still go */
        e = 0;
    if (!e) {
        if (stored)
            *stored = cur;
        if (epoch == 0) {
            epoch = cur + 1;
            if (stored)
                *stored = epoch;
        } else if (cur > epoch) {
            snprintf(msg, cap,
                     "%s holds epoch %" PRIu64 ", above this writer's %" PRIu64
                     ": a later leader wrote it",
                     path, cur, epoch);
            e = -ESTALE;
        }
    }
    if (!e && weir__ha_cas_hook)
        weir__ha_cas_hook(path);
    char *s = NULL;
    if (!e && !obj) { /* the record's removal, fenced the same way */
        if (unlink(path) < 0 && errno != ENOENT) {
            e = -errno;
            snprintf(msg, cap, "removing %s: %s", path, strerror(-e));
        } else if ((e = sync_parent(path)) < 0) {
            snprintf(msg, cap, "syncing the directory of %s: %s", path, strerror(-e));
        }
        flock(lfd, LOCK_UN);
        close(lfd);
        return e;
    }
    if (!e) {
        if (json_object_set_new(obj, "epoch", json_integer((json_int_t)epoch)) < 0 ||
            !(s = json_dumps(obj, JSON_SORT_KEYS | JSON_COMPACT))) {
            snprintf(msg, cap, "out of memory");
            e = -ENOMEM;
        }
    }
    if (!e)
        e = replace_file(path, s, msg, cap);
    free(s);
    flock(lfd, LOCK_UN);
    close(lfd);
    return e;
}

/* ---- the election ------------------------------------------------------------------------ */
int weir__ha_open(const char *dir, int allow_unsafe_locks, weir__ha **out, char *msg, size_t cap)
{
    *out = NULL;
    if (!dir || !*dir || strlen(dir) >= 4000) {
        snprintf(msg, cap, "--ha-dir: \"%s\" is not a usable directory path", dir ? dir : "");
        return -EINVAL;
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        int e = -errno;
        snprintf(msg, cap, "--ha-dir %s: %s", dir, strerror(-e));
        return e;
    }
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        snprintf(msg, cap, "--ha-dir %s: not a directory", dir);
        return -ENOTDIR;
    }
    int p = weir__ha_probe_locks(dir, msg, cap);
    if (p == 1) {
        if (!allow_unsafe_locks)
            return -ENOLCK;
        weir__log(WEIR__LOG_WARN, LOG, "%s (going on: --ha-allow-unsafe-locks)", msg);
    } else if (p == -EAGAIN) {
        weir__log(WEIR__LOG_INFO, LOG, "lock probe inconclusive: %s", msg);
    } else if (p < 0) {
        return p;
    }
    weir__ha *ha = weir__calloc(1, sizeof(*ha));
    if (!ha) {
        snprintf(msg, cap, "out of memory");
        return -ENOMEM;
    }
    snprintf(ha->dir, sizeof(ha->dir), "%s", dir);
    char lock[4200];
    path_in(lock, sizeof(lock), dir, WEIR__HA_LOCK_FILE);
    path_in(ha->leader, sizeof(ha->leader), dir, WEIR__HA_LEADER_FILE);
    if ((ha->fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
        int e = -errno;
        snprintf(msg, cap, "%s: %s", lock, strerror(-e));
        weir__free(ha);
        return e;
    }
    *out = ha;
    return 0;
}

/* ---- jobs and plugins -------------------------------------------------------------------- */
static int sub_path(const weir__ha *ha, char *out, size_t cap, const char *sub, const char *name)
{
    int n = snprintf(out, cap, "%s/%s/%s", ha->dir, sub, name);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static int sub_dir(const weir__ha *ha, const char *sub, char *msg, size_t cap)
{
    char d[4200];
    snprintf(d, sizeof(d), "%s/%s", ha->dir, sub);
    if (mkdir(d, 0700) == 0) {
        int e = sync_parent(d);
        if (e < 0)
            snprintf(msg, cap, "syncing %s: %s", ha->dir, strerror(-e));
        return e;
    }
    if (errno != EEXIST) {
        int e = -errno;
        snprintf(msg, cap, "%s: %s", d, strerror(-e));
        return e;
    }
    return 0;
}

int weir__ha_plugin_put(weir__ha *ha, const uint8_t sha[WEIR__SHA256_SIZE], const void *bytes,
                        size_t len, char *msg, size_t cap)
{
    char hex[WEIR__SHA256_HEX_SIZE], name[WEIR__SHA256_HEX_SIZE + 8], path[4300];
    snprintf(name, sizeof(name), "%s.so", weir__sha256_hex(sha, hex));
    int e = sub_dir(ha, "plugins", msg, cap);
    if (e < 0)
        return e;
    sub_path(ha, path, sizeof(path), "plugins", name);
    uint8_t *have = NULL;
    char why[256];
    if (weir__ha_plugin_read(ha, sha, len, &have, why, sizeof(why)) == 0) {
        weir__free(have);
        return 0; /* named by content, and checked: the same bytes */
    }
    char dir[4300];
    split_path(path, dir, sizeof(dir));
    if ((e = weir__file_write_atomic(dir, name, bytes, len)) < 0)
        snprintf(msg, cap, "writing %s: %s", path, strerror(-e));
    return e;
}

int weir__ha_plugin_read(weir__ha *ha, const uint8_t sha[WEIR__SHA256_SIZE], uint64_t size,
                         uint8_t **out, char *msg, size_t cap)
{
    char hex[WEIR__SHA256_HEX_SIZE], name[WEIR__SHA256_HEX_SIZE + 8], path[4300];
    snprintf(name, sizeof(name), "%s.so", weir__sha256_hex(sha, hex));
    sub_path(ha, path, sizeof(path), "plugins", name);
    *out = NULL;
    uint8_t *b = NULL;
    size_t len = 0;
    int e = weir__file_read_all(path, (size_t)size, &b, &len);
    if (e == -EFBIG || (!e && len != size)) {
        snprintf(msg, cap, "%s: not the %" PRIu64 " bytes the job names (%s)", path, size,
                 e ? "more" : "fewer");
        e = -EBADMSG;
    } else if (e) {
        snprintf(msg, cap, "%s: %s", path, strerror(-e));
    }
    uint8_t h[WEIR__SHA256_SIZE];
    if (!e && (weir__sha256(b, size, h) < 0 || memcmp(h, sha, sizeof(h)) != 0)) {
        snprintf(msg, cap, "%s: its bytes do not hash to its name", path);
        e = -EBADMSG;
    }
    if (e) {
        weir__free(b);
        return e;
    }
    *out = b;
    return 0;
}

/*
 * A job record's write is fenced by the directory's leader too, not only
 * by the record's own epoch: a record that does not exist yet holds no
 * epoch, so a superseded leader could otherwise still add one. The writer
 * holds a shared flock on the leader file's .wlock across its write, and
 * refuses when the leader file names a later epoch than its own; an
 * election's write of the leader file holds the same lock exclusively.
 * So a new leader either bumps the epoch first (and the old one's write is
 * refused) or after (and lists what the old one wrote). Returns the
 * descriptor to hand to weir__ha_fence_leave, or a negative errno with msg.
 */
int weir__ha_fence_enter(weir__ha *ha, char *msg, size_t cap)
{
    char wl[4300];
    snprintf(wl, sizeof(wl), "%s.wlock", ha->leader);
    int lfd = open(wl, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lfd < 0) {
        int e = -errno;
        snprintf(msg, cap, "%s: %s", wl, strerror(-e));
        return e;
    }
    int e;
    while ((e = flock(lfd, LOCK_SH)) < 0 && errno == EINTR)
        ;
    uint64_t cur = 0;
    if (e < 0) {
        e = -errno;
        snprintf(msg, cap, "locking %s: %s", wl, strerror(-e));
    } else if ((e = stored_epoch(ha->leader, &cur, msg, cap)) == 0 && cur > ha->epoch) {
        snprintf(msg, cap,
                 "%s names epoch %" PRIu64 ", above this coordinator's %" PRIu64
                 ": another coordinator leads now",
                 ha->leader, cur, ha->epoch);
        e = -ESTALE;
    }
    if (e < 0) {
        close(lfd);
        return e;
    }
    return lfd;
}

void weir__ha_fence_leave(int lfd)
{
    flock(lfd, LOCK_UN);
    close(lfd);
}

/* A record of DIR/SUB (its job id's), fenced; obj NULL: removed. */
static int job_record_write(weir__ha *ha, const char *sub, uint64_t id, json_t *obj, char *msg,
                            size_t cap)
{
    char name[32], path[4300];
    snprintf(name, sizeof(name), "%" PRIu64 ".json", id);
    int e = obj ? sub_dir(ha, sub, msg, cap) : 0;
    if (e < 0)
        return e;
    sub_path(ha, path, sizeof(path), sub, name);
    int lfd = weir__ha_fence_enter(ha, msg, cap);
    if (lfd < 0)
        return lfd;
    e = weir__ha_cas_write(path, ha->epoch, obj, NULL, msg, cap);
    weir__ha_fence_leave(lfd);
    return e;
}

int weir__ha_job_put(weir__ha *ha, uint64_t id, json_t *obj, char *msg, size_t cap)
{
    return job_record_write(ha, "jobs", id, obj, msg, cap);
}

int weir__ha_job_end(weir__ha *ha, uint64_t id, json_t *hist, char *msg, size_t cap)
{
    int e = job_record_write(ha, "history", id, hist, msg, cap);
    return e < 0 ? e : weir__ha_job_remove(ha, id, msg, cap);
}

int weir__ha_job_remove(weir__ha *ha, uint64_t id, char *msg, size_t cap)
{
    return job_record_write(ha, "jobs", id, NULL, msg, cap);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static const char *which_dir(int which)
{
    return which == WEIR__HA_HISTORY ? "history" : "jobs";
}

int weir__ha_jobs(weir__ha *ha, int which, uint64_t **ids, size_t *n, char *msg, size_t cap)
{
    char d[4200];
    snprintf(d, sizeof(d), "%s/%s", ha->dir, which_dir(which));
    *ids = NULL;
    *n = 0;
    DIR *dir = opendir(d);
    if (!dir) {
        if (errno == ENOENT)
            return 0;
        int e = -errno;
        snprintf(msg, cap, "%s: %s", d, strerror(-e));
        return e;
    }
    size_t cap_ids = 0;
    int e = 0;
    for (struct dirent *de; !e && (de = readdir(dir));) {
        /* Only what this file writes: a canonical decimal id, 1 to
         * WEIR__HA_ID_MAX, then ".json" (its .wlock and .tmp, and
         * anything else, are not records). */
        const char *p = de->d_name;
        uint64_t v = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 16)
            v = v * 10 + (uint64_t)(*p++ - '0'), digits++;
        if (!digits || de->d_name[0] == '0' || strcmp(p, ".json") != 0 || v > WEIR__HA_ID_MAX)
            continue;
        if (*n == cap_ids) {
            size_t nc = cap_ids ? cap_ids * 2 : 16;
            uint64_t *nv = weir__realloc(*ids, nc * sizeof(*nv));
            if (!nv) {
                snprintf(msg, cap, "out of memory");
                e = -ENOMEM;
                break;
            }
            *ids = nv;
            cap_ids = nc;
        }
        (*ids)[(*n)++] = v;
    }
    closedir(dir);
    if (e) {
        weir__free(*ids);
        *ids = NULL;
        *n = 0;
        return e;
    }
    if (*n)
        qsort(*ids, *n, sizeof(**ids), cmp_u64);
    return 0;
}

json_t *weir__ha_job_load(weir__ha *ha, int which, uint64_t id, char *msg, size_t cap)
{
    char name[32], path[4300];
    snprintf(name, sizeof(name), "%" PRIu64 ".json", id);
    sub_path(ha, path, sizeof(path), which_dir(which), name);
    struct stat st;
    if (stat(path, &st) == 0 && st.st_size > (off_t)WEIR__HA_RECORD_MAX) {
        snprintf(msg, cap, "%s: %lld bytes, over the %u a record may have", path,
                 (long long)st.st_size, WEIR__HA_RECORD_MAX);
        return NULL;
    }
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o)
        snprintf(msg, cap, "%s: not a JSON record (%s)", path, je.text);
    else if (!json_is_object(o)) {
        snprintf(msg, cap, "%s: not a JSON object", path);
        json_decref(o);
        o = NULL;
    }
    return o;
}

uint64_t weir__ha_epoch(const weir__ha *ha)
{
    return ha->leading ? ha->epoch : 0;
}

static json_t *leader_obj(const weir__ha *ha, int port)
{
    return json_pack("{s:s, s:i, s:I, s:I}", "host", ha->host, "port", port, "time_ms",
                     (json_int_t)weir__wall_ms(), "elected_ms", (json_int_t)ha->elected_ms);
}

int weir__ha_try_lead(weir__ha *ha, const char *host, uint64_t *epoch, char *msg, size_t cap)
{
    if (ha->leading) {
        *epoch = ha->epoch;
        return 1;
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(ha->fd, F_OFD_SETLK, &fl) < 0) {
        if (errno == EAGAIN || errno == EACCES)
            return 0;
        int e = -errno;
        snprintf(msg, cap, "locking %s/%s: %s", ha->dir, WEIR__HA_LOCK_FILE, strerror(-e));
        return e;
    }
    snprintf(ha->host, sizeof(ha->host), "%s", host);
    ha->elected_ms = weir__wall_ms();
    json_t *o = leader_obj(ha, 0);
    uint64_t ep = 0;
    int e = o ? weir__ha_cas_write(ha->leader, 0, o, &ep, msg, cap) : -ENOMEM;
    json_decref(o);
    if (e < 0) {
        if (e == -ENOMEM)
            snprintf(msg, cap, "out of memory");
        fl.l_type = F_UNLCK;
        fcntl(ha->fd, F_OFD_SETLK, &fl);
        return e;
    }
    ha->leading = 1;
    ha->epoch = ep;
    *epoch = ep;
    return 1;
}

int weir__ha_lead_at(weir__ha *ha, const char *host, uint64_t epoch, char *msg, size_t cap)
{
    if (ha->leading && ha->epoch == epoch)
        return 0;
    snprintf(ha->host, sizeof(ha->host), "%s", host);
    ha->elected_ms = weir__wall_ms();
    json_t *o = leader_obj(ha, 0);
    uint64_t stored = 0;
    int e = o ? weir__ha_cas_write(ha->leader, epoch, o, &stored, msg, cap) : -ENOMEM;
    json_decref(o);
    if (e == -ENOMEM)
        snprintf(msg, cap, "out of memory");
    else if (e == -ESTALE)
        snprintf(msg, cap,
                 "%s names epoch %" PRIu64 ", above this leader's %" PRIu64
                 ": a later leader, or one elected otherwise (the directory's lock) wrote it",
                 ha->leader, stored, epoch);
    if (e < 0)
        return e;
    ha->leading = 1;
    ha->epoch = epoch;
    return 0;
}

int weir__ha_announce(weir__ha *ha, int port, char *msg, size_t cap)
{
    if (!ha->leading) {
        snprintf(msg, cap, "not leading");
        return -EPERM;
    }
    json_t *o = leader_obj(ha, port);
    if (!o) {
        snprintf(msg, cap, "out of memory");
        return -ENOMEM;
    }
    int e = weir__ha_cas_write(ha->leader, ha->epoch, o, NULL, msg, cap);
    json_decref(o);
    return e;
}

typedef struct leader_read {
    const char *dir;
    weir__ha_leader *out;
    char *msg;
    size_t cap;
} leader_read;

static intptr_t leader_job(void *arg)
{
    leader_read *r = arg;
    return weir__ha_read_leader(r->dir, r->out, r->msg, r->cap);
}

int weir__ha_read_leader_pooled(const char *dir, weir__ha_leader *out, char *msg, size_t cap)
{
    leader_read r = {dir, out, msg, cap};
    return (int)weir__blocking_run_shielded(leader_job, &r);
}

int weir__ha_read_leader(const char *dir, weir__ha_leader *out, char *msg, size_t cap)
{
    char path[4200];
    if (path_in(path, sizeof(path), dir, WEIR__HA_LEADER_FILE) < 0) {
        snprintf(msg, cap, "%s: the path is too long", dir);
        return -ENAMETOOLONG;
    }
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o) {
        if (access(path, F_OK) != 0 && errno == ENOENT)
            return -ENOENT;
        snprintf(msg, cap, "%s: not a JSON record (%s)", path, je.text);
        return -EBADMSG;
    }
    json_t *h = json_object_get(o, "host"), *p = json_object_get(o, "port"),
           *e = json_object_get(o, "epoch"), *t = json_object_get(o, "time_ms"),
           *el = json_object_get(o, "elected_ms");
    int rc = 0;
    if (!json_is_string(h) || json_string_length(h) == 0 ||
        json_string_length(h) > WEIR_CLUSTER_HOST_MAX) {
        snprintf(msg, cap, "%s: \"host\" is not a host name of 1 to %d bytes", path,
                 WEIR_CLUSTER_HOST_MAX);
        rc = -EBADMSG;
    } else if (!json_is_integer(p) || json_integer_value(p) < 0 || json_integer_value(p) > 65535) {
        snprintf(msg, cap, "%s: \"port\" is not a port number", path);
        rc = -EBADMSG;
    } else if (!json_is_integer(e) || json_integer_value(e) < 1) {
        snprintf(msg, cap, "%s: \"epoch\" is not a positive integer", path);
        rc = -EBADMSG;
    } else {
        memset(out, 0, sizeof(*out));
        snprintf(out->host, sizeof(out->host), "%s", json_string_value(h));
        out->port = (int)json_integer_value(p);
        out->epoch = (uint64_t)json_integer_value(e);
        out->time_ms = json_is_integer(t) ? (int64_t)json_integer_value(t) : 0;
        out->elected_ms = json_is_integer(el) ? (int64_t)json_integer_value(el) : out->time_ms;
    }
    json_decref(o);
    return rc;
}

void weir__ha_close(weir__ha *ha)
{
    if (!ha)
        return;
    close(ha->fd); /* the lock goes with its descriptor */
    weir__free(ha);
}
