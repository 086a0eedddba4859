/* SPDX-License-Identifier: Apache-2.0 */
/*
 * afile.c - atomic file publication and whole-file reads (afile.h).
 */
#include "base/afile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"

int weir__fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int e = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return e;
}

static int write_all(int fd, const uint8_t *p, size_t left)
{
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno != EINTR)
            return -errno;
        if (w > 0)
            p += w, left -= (size_t)w;
    }
    return 0;
}

int weir__file_write_atomic(const char *dir, const char *name, const void *buf, size_t len)
{
    char tmp[4096], path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path) ||
        (size_t)snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name) >= sizeof(tmp))
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    int e = write_all(fd, buf, len);
    if (!e && fsync(fd) < 0)
        e = -errno;
    if (close(fd) < 0 && !e)
        e = -errno;
    if (!e && rename(tmp, path) < 0)
        e = -errno;
    if (e) {
        unlink(tmp);
        return e;
    }
    return weir__fsync_dir(dir);
}

int weir__file_read_all(const char *path, size_t max, uint8_t **buf, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    if ((uint64_t)sb.st_size > max) {
        close(fd);
        return -EFBIG;
    }
    size_t cap = (size_t)sb.st_size + 1, n = 0; /* +1: a file that grew is seen */
    uint8_t *b = weir__malloc(cap);
    int e = b ? 0 : -ENOMEM;
    while (!e) {
        if (n == cap) {
            if (cap > max) {
                e = -EFBIG;
                break;
            }
            uint8_t *nb = weir__realloc(b, cap * 2);
            if (!nb) {
                e = -ENOMEM;
                break;
            }
            b = nb, cap *= 2;
        }
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0 && errno != EINTR)
            e = -errno;
        else if (r == 0)
            break;
        else if (r > 0)
            n += (size_t)r;
    }
    close(fd);
    if (!e && n > max)
        e = -EFBIG;
    if (e) {
        weir__free(b);
        return e;
    }
    *buf = b;
    *len = n;
    return 0;
}
