/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn.c - the frame helpers the cluster's nodes share (node.h): a message
 * encoded and written, posted, or read and decoded under the protocol's
 * caps.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "cluster/node.h"
#include "rt/rt_int.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/rt.h"

/* Where nodes make their private plugin caches, and each one's lock. */
#define CACHE_PARENT "/tmp"
#define CACHE_LOCK   ".lock"

int weir__cl_send(const weir__cl_link *l, const weir__cl_msg *m, int64_t deadline)
{
    weir_frame_builder fb;
    int e = weir__cl_encode(m, &fb, NULL, 0);
    const uint8_t *f;
    size_t len;
    if (!e && !(e = weir_frame_builder_finish(&fb, &f, &len)))
        e = l->tls ? weir_tls_frame_write(l->tls, f, len, deadline)
                   : weir_frame_write(l->fd, f, len, deadline);
    weir_frame_builder_close(&fb);
    return e;
}

void weir__cl_link_close(weir__cl_link *l)
{
    if (l->tls) {
        weir_tls_shutdown(l->tls, weir_time_after_ms(100));
        weir_tls_free(l->tls);
        l->tls = NULL;
    }
    if (l->fd >= 0)
        weir_io_close(l->fd);
    l->fd = -1;
}

int weir__cl_post(weir__outbox *ob, const weir__cl_msg *m, int cls)
{
    weir_frame_builder fb;
    int e = weir__cl_encode(m, &fb, NULL, 0);
    const uint8_t *f;
    size_t len;
    if (!e && !(e = weir_frame_builder_finish(&fb, &f, &len)))
        e = weir__outbox_post(ob, f, len, cls);
    weir_frame_builder_close(&fb);
    return e;
}

int weir__cl_recv(const weir__cl_link *l, weir_frame_parser *p, weir__cl_msg *m, weir_frame *frame,
                  int64_t deadline, char *why, size_t cap)
{
    memset(m, 0, sizeof(*m));
    if (cap)
        why[0] = 0;
    weir_frame f = {0};
    ssize_t n = l->tls ? weir_tls_frame_read(l->tls, p, &f, deadline)
                       : weir_frame_read(l->fd, p, &f, deadline);
    if (n == 0)
        return 0;
    if (n < 0) {
        if (n == -EMSGSIZE)
            snprintf(why, cap, "a frame longer than the cap");
        else if (n == -EBADMSG)
            snprintf(why, cap, "a frame of length 0");
        else if (n == -EPROTO && l->tls)
            snprintf(why, cap, "TLS: %s", weir_tls_last_error(l->tls));
        else
            snprintf(why, cap, "%s", weir_net_strerror((int)n));
        return (int)n;
    }
    int e = weir__cl_decode(f.data, f.len, m, why, cap);
    if (e < 0) {
        weir_frame_free(&f);
        return e;
    }
    if (frame)
        *frame = f;
    else if (m->kind == WEIR_CLUSTER_DEPLOY || m->kind == WEIR_CLUSTER_PLUGIN_UPLOAD) {
        /* Their byte strings point into the payload: the caller must keep
         * it. */
        snprintf(why, cap, "internal: a %s read without its frame", weir__cl_kind_name(m->kind));
        weir__cl_msg_free(m);
        weir_frame_free(&f);
        return -EINVAL;
    } else {
        weir_frame_free(&f);
    }
    return 1;
}

int weir__cl_wait_stop(int fd, const char *who)
{
    for (int warned = 0;;) {
        struct signalfd_siginfo si;
        ssize_t n = weir_io_read(fd, &si, sizeof(si), WEIR_FOREVER);
        if (n == -ECANCELED)
            return -ECANCELED;
        if (n == (ssize_t)sizeof(si)) {
            weir__log(WEIR__LOG_INFO, who, "%s from pid %u: stopping", strsignal((int)si.ssi_signo),
                      si.ssi_pid);
            return 0;
        }
        if (n >= 0) /* a pipe (an embedding program's, a test's): a byte or its end */
            return 0;
        if (!warned++)
            weir__log(WEIR__LOG_WARN, who, "reading the stop descriptor: %s (retrying)",
                      strerror((int)-n));
        if (weir_time_sleep(10 * WEIR_MSEC) < 0)
            return -ECANCELED;
    }
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path), 0;
}

static intptr_t rm_tree(void *arg)
{
    return nftw(arg, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Remove every CACHE_PARENT/weir-<role>-* directory of ours whose lock
 * nobody holds: the cache of a node that died without removing it.
 *
 * The lock taken must be the one the directory holds now. Between this
 * sweep's open and its flock another sweep may lock the same file, remove
 * the directory (its .lock unlinked), and a new node may make a cache under
 * the same name; the flock would then succeed on the old, unlinked file
 * and remove the new node's cache. So once locked, the file's inode is
 * compared with a fresh lstat of the path, and a mismatch (or no file)
 * skips the directory.
 *
 * A directory without a lock file is left alone, whatever its age: a
 * node makes its lock before its cache comes into view (make_dir), so such
 * a directory is from an older weir that took no lock, or not weir's, and
 * nothing tells whether its node still runs (a cache's time stamps only
 * move when a plugin is added). Another user's is left alone too. */
static void sweep(const char *role)
{
    DIR *d = opendir(CACHE_PARENT);
    if (!d)
        return;
    char prefix[64];
    int np = snprintf(prefix, sizeof(prefix), "weir-%s-", role);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, prefix, (size_t)np) != 0)
            continue;
        char path[PATH_MAX], lock[PATH_MAX];
        struct stat st;
        if (snprintf(path, sizeof(path), "%s/%s", CACHE_PARENT, de->d_name) >= (int)sizeof(path) ||
            snprintf(lock, sizeof(lock), "%s/" CACHE_LOCK, path) >= (int)sizeof(lock) ||
            lstat(path, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
            continue;
        int fd = open(lock, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue;
        struct stat held, now;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &held) == 0 && lstat(lock, &now) == 0 &&
            held.st_dev == now.st_dev && held.st_ino == now.st_ino) {
            weir__log(WEIR__LOG_INFO, "cluster", "removing %s: its node is gone", path);
            rm_tree(path);
        }
        close(fd);
    }
    closedir(d);
}

typedef struct mkdir_arg {
    const char *role;
    char *dir;
    size_t cap;
    int fd;
    char *msg;
    size_t msgcap;
} mkdir_arg;

/* The directory is made under a name the sweep does not look at
 * (.weir-ROLE-XXXXXX), its lock taken, and only then renamed into view:
 * a sweep never finds a live node's cache unlocked. */
static intptr_t make_dir(void *arg)
{
    mkdir_arg *a = arg;
    sweep(a->role);
    for (int tries = 0; tries < 16; tries++) {
        char tmp[256], lock[PATH_MAX];
        snprintf(tmp, sizeof(tmp), "%s/.weir-%s-XXXXXX", CACHE_PARENT, a->role);
        if (!mkdtemp(tmp)) {
            int e = -errno;
            snprintf(a->msg, a->msgcap, "making a plugin cache directory: %s", strerror(errno));
            return e;
        }
        snprintf(lock, sizeof(lock), "%s/" CACHE_LOCK, tmp);
        int fd = open(lock, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
            int e = -errno;
            snprintf(a->msg, a->msgcap, "locking the plugin cache %s: %s", tmp, strerror(errno));
            if (fd >= 0)
                close(fd);
            rm_tree(tmp);
            return e;
        }
        /* The final name: the leading dot dropped. */
        int n = snprintf(a->dir, a->cap, "%s/%s", CACHE_PARENT, tmp + strlen(CACHE_PARENT) + 2);
        if (n < 0 || (size_t)n >= a->cap) {
            close(fd);
            rm_tree(tmp);
            snprintf(a->msg, a->msgcap, "the plugin cache's name is too long");
            return -ENAMETOOLONG;
        }
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, a->dir, RENAME_NOREPLACE) == 0) {
            a->fd = fd;
            return 0;
        }
        int e = errno;
        close(fd);
        rm_tree(tmp);
        if (e != EEXIST) {
            snprintf(a->msg, a->msgcap, "naming the plugin cache %s: %s", a->dir, strerror(e));
            return -e;
        }
    }
    snprintf(a->msg, a->msgcap, "making a plugin cache directory: no free name");
    return -EEXIST;
}

int weir__cl_cache_dir_make(const char *role, char *dir, size_t cap, int *lock_fd, char *msg,
                            size_t msgcap)
{
    *lock_fd = -1;
    mkdir_arg a = {role, dir, cap, -1, msg, msgcap};
    int e = (int)weir__blocking_run_shielded(make_dir, &a);
    if (e < 0) {
        dir[0] = 0;
        return e;
    }
    *lock_fd = a.fd;
    return 0;
}

void weir__cl_cache_dir_remove(const char *dir, int lock_fd)
{
    if (dir && dir[0])
        weir__blocking_run_shielded(rm_tree, (void *)dir);
    if (lock_fd >= 0)
        close(lock_fd); /* last: until now a sweep leaves it alone */
}

int weir__cl_split_hostport(const char *s, char *host, size_t cap, int *port)
{
    if (!s || !*s)
        return -EINVAL;
    const char *colon;
    size_t hl;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return -EINVAL;
        hl = (size_t)(close - s - 1);
        s++;
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || strchr(s, ':') != colon)
            return -EINVAL;
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= cap)
        return -EINVAL;
    char *end;
    errno = 0;
    long v = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || v < 1 || v > 65535)
        return -EINVAL;
    memcpy(host, s, hl);
    host[hl] = 0;
    *port = (int)v;
    return 0;
}
