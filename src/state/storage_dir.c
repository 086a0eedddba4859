/* SPDX-License-Identifier: Apache-2.0 */
/*
 * storage_dir.c - the local directory store (storage.h): blob "a/b" is the
 * file <root>/a/b.
 *
 * put publishes atomically (base/afile.h: a temporary ".<name>.tmp" beside
 * it, fsync, rename, fsync of the directory), creating the directories of
 * the name first; a directory it creates is fsynced into its parent, so a
 * blob that survives a crash is also reachable. list reads one directory
 * and skips names beginning with '.' (temporary files, lock files): those
 * are never blob names. delete of "p/" removes the tree under <root>/p and
 * the directory itself. The first put makes the store's own directory
 * when it is missing (not its parents). Every method blocks: storage.c
 * runs them on the blocking pool.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/afile.h"
#include "base/alloc.h"
#include "state/storage.h"

typedef struct dir_store {
    weir__storage base;
    char *root;
    _Atomic int root_made; /* the root exists (checked once, by the first put) */
} dir_store;

static int path_of(const dir_store *d, const char *name, size_t nlen, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%.*s", d->root, (int)nlen, name);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static int dir_open(const char *where, weir__storage **out)
{
    if (strchr(where, '?'))
        return -EINVAL; /* no options: one meant for another layer, or misspelt */
    dir_store *d = weir__calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    size_t n = strlen(where);
    while (n > 1 && where[n - 1] == '/')
        n--; /* "dir/" and "dir" are one store */
    if (!(d->root = weir__malloc(n + 1))) {
        weir__free(d);
        return -ENOMEM;
    }
    memcpy(d->root, where, n);
    d->root[n] = '\0';
    *out = &d->base;
    return 0;
}

static void dir_free(weir__storage *s)
{
    dir_store *d = (dir_store *)s;
    weir__free(d->root);
    weir__free(d);
}

const char *weir__storage_dir_path(const weir__storage *s)
{
    return s && s->ops == &weir__storage_dir_ops ? ((const dir_store *)s)->root : NULL;
}

/* Create the directories of name's first dlen bytes ("a/b" of "a/b/c"),
 * each new one fsynced into its parent. */
static int make_dirs(const dir_store *d, const char *name, size_t dlen)
{
    char path[PATH_MAX];
    for (size_t i = 0; i <= dlen; i++) {
        if (i < dlen && name[i] != '/')
            continue;
        int e = path_of(d, name, i, path, sizeof(path));
        if (e)
            return e;
        if (mkdir(path, 0755) == 0) {
            /* The new entry lives in its parent: fsync that. */
            char parent[PATH_MAX];
            size_t up = i;
            while (up > 0 && name[up - 1] != '/')
                up--;
            if (up > 0)
                e = path_of(d, name, up - 1, parent, sizeof(parent));
            else
                e = snprintf(parent, sizeof(parent), "%s", d->root) < 0 ? -EINVAL : 0;
            if (!e)
                e = weir__fsync_dir(parent);
            if (e)
                return e;
        } else if (errno != EEXIST) {
            return -errno;
        }
    }
    return 0;
}

/* The store's own directory, made on the first put if it is missing (its
 * parent must exist), as a checkpoint directory is. */
static int make_root(dir_store *d)
{
    if (d->root_made)
        return 0;
    if (mkdir(d->root, 0755) == 0) {
        char parent[PATH_MAX];
        snprintf(parent, sizeof(parent), "%s", d->root);
        char *slash = strrchr(parent, '/');
        if (!slash)
            snprintf(parent, sizeof(parent), ".");
        else if (slash == parent)
            parent[1] = '\0';
        else
            *slash = '\0';
        int e = weir__fsync_dir(parent);
        if (e)
            return e;
    } else if (errno != EEXIST) {
        return -errno;
    }
    d->root_made = 1;
    return 0;
}

static int dir_put(weir__storage *s, const char *name, const void *buf, size_t len)
{
    dir_store *d = (dir_store *)s;
    const char *slash = strrchr(name, '/');
    char dir[PATH_MAX];
    int e = make_root(d);
    if (e)
        return e;
    if (slash) {
        size_t dlen = (size_t)(slash - name);
        if ((e = make_dirs(d, name, dlen)) != 0 || (e = path_of(d, name, dlen, dir, sizeof(dir))))
            return e;
    } else if (snprintf(dir, sizeof(dir), "%s", d->root) >= (int)sizeof(dir)) {
        return -ENAMETOOLONG;
    }
    return weir__file_write_atomic(dir, slash ? slash + 1 : name, buf, len);
}

static int dir_get(weir__storage *s, const char *name, size_t max, uint8_t **buf, size_t *len)
{
    char path[PATH_MAX];
    int e = path_of((dir_store *)s, name, strlen(name), path, sizeof(path));
    return e ? e : weir__file_read_all(path, max, buf, len);
}

/* pread of the range: a cold read of the remote-read backend fetches one
 * block of a large run this way. */
static int dir_get_range(weir__storage *s, const char *name, uint64_t off, size_t len, uint8_t *buf,
                         size_t *got)
{
    char path[PATH_MAX];
    int e = path_of((dir_store *)s, name, strlen(name), path, sizeof(path));
    if (e)
        return e;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t n = 0;
    /* An offset past what off_t holds is past the end of any file. */
    if (off > (uint64_t)INT64_MAX || len > (uint64_t)INT64_MAX - off)
        len = off > (uint64_t)INT64_MAX ? 0 : (size_t)((uint64_t)INT64_MAX - off);
    while (n < len) {
        ssize_t r = pread(fd, buf + n, len - n, (off_t)(off + n));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            e = -errno;
            break;
        }
        if (r == 0)
            break; /* the end of the blob */
        n += (size_t)r;
    }
    close(fd);
    *got = n;
    return e;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_dir(const char *dir, const struct dirent *de)
{
    if (de->d_type != DT_UNKNOWN)
        return de->d_type == DT_DIR;
    char path[PATH_MAX];
    struct stat st;
    int n = snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
    if (n < 0 || (size_t)n >= sizeof(path))
        return 0;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int dir_list(weir__storage *s, const char *prefix, weir__names *out)
{
    dir_store *d = (dir_store *)s;
    const char *slash = strrchr(prefix, '/');
    size_t dlen = slash ? (size_t)(slash - prefix) + 1 : 0; /* "chk-7/" of "chk-7/op" */
    const char *part = prefix + dlen;
    size_t plen = strlen(part);
    char path[PATH_MAX];
    int e = path_of(d, prefix, dlen, path, sizeof(path));
    if (e)
        return e;
    *out = (weir__names){0};
    DIR *dh = opendir(path);
    if (!dh)
        return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
    size_t cap = 0;
    struct dirent *de;
    while (!e && (de = readdir(dh)) != NULL) {
        const char *n = de->d_name;
        if (n[0] == '.' || strncmp(n, part, plen) != 0)
            continue;
        size_t nl = strlen(n);
        int sub = is_dir(path, de);
        if (dlen + nl + (size_t)sub > WEIR__STORAGE_NAME_MAX)
            continue; /* not nameable: not a blob of this store */
        if (out->n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **v = weir__realloc(out->v, nc * sizeof(*v));
            if (!v) {
                e = -ENOMEM;
                break;
            }
            out->v = v;
            cap = nc;
        }
        char *full = weir__malloc(dlen + nl + 2);
        if (!full) {
            e = -ENOMEM;
            break;
        }
        memcpy(full, prefix, dlen);
        memcpy(full + dlen, n, nl);
        if (sub)
            full[dlen + nl++] = '/';
        full[dlen + nl] = '\0';
        out->v[out->n++] = full;
    }
    closedir(dh);
    if (e) {
        weir__names_free(out);
        return e;
    }
    if (out->n > 1)
        qsort(out->v, out->n, sizeof(*out->v), name_cmp);
    return 0;
}

/* rm -r path (a directory): depth first; the first error wins but the
 * rest is still tried, so a prune leaves as little as it can. */
static int remove_tree(char *path, size_t len, size_t cap)
{
    DIR *dh = opendir(path);
    if (!dh)
        return -errno;
    int e = 0;
    struct dirent *de;
    while ((de = readdir(dh)) != NULL) {
        const char *n = de->d_name;
        if (n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2])))
            continue;
        int w = snprintf(path + len, cap - len, "/%s", n);
        if (w < 0 || (size_t)w >= cap - len) {
            e = e ? e : -ENAMETOOLONG;
            continue;
        }
        int r = 0, sub = de->d_type == DT_DIR;
        struct stat st;
        if (de->d_type == DT_UNKNOWN) /* path now names the entry: no symlink followed */
            sub = lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
        if (sub)
            r = remove_tree(path, len + (size_t)w, cap);
        else if (unlink(path) < 0)
            r = -errno;
        if (r && !e)
            e = r;
        path[len] = '\0';
    }
    closedir(dh);
    path[len] = '\0';
    if (rmdir(path) < 0 && !e)
        e = -errno;
    return e;
}

static int dir_del(weir__storage *s, const char *name)
{
    dir_store *d = (dir_store *)s;
    size_t n = strlen(name);
    char path[PATH_MAX];
    int e = path_of(d, name, n, path, sizeof(path));
    if (e)
        return e;
    if (name[n - 1] != '/')
        return unlink(path) < 0 ? -errno : 0;
    path[strlen(path) - 1] = '\0';
    return remove_tree(path, strlen(path), sizeof(path));
}

const weir__storage_ops weir__storage_dir_ops = {
    .scheme = "file",
    .open = dir_open,
    .put = dir_put,
    .get = dir_get,
    .get_range = dir_get_range,
    .list = dir_list,
    .del = dir_del,
    .free = dir_free,
};
