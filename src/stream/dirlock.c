/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dirlock.c - a run's hold on its directories (see dirlock.h).
 *
 * The lock is flock(LOCK_EX | LOCK_NB) on DIR/.lock, opened O_CLOEXEC and
 * kept open for the run's lifetime:
 *
 *  - the kernel drops it when the process dies, however it dies (a
 *    SIGKILLed run never blocks the restore that follows it);
 *  - it belongs to the open file description, so two runs in one process
 *    (each opening the file itself) conflict as two processes do, and
 *    closing some other descriptor of the file does not drop it (both
 *    unlike POSIX record locks);
 *  - a process forked while a run holds it shares it (the description is
 *    inherited): a forked child must not outlive the run and expect the
 *    directory to be free for it.
 *
 * The holder writes its pid into the file once it has the lock, so a
 * refused run can name it. The file is never removed: removing it would
 * let a third run lock a new file of the same name while a second one
 * still holds the old one. A stale pid in an unlocked file means nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "stream/dirlock.h"
#include "weir/rt.h"

/* The holder's pid from the lock file, 0 when unknown. The holder writes
 * it just after taking the lock: a refusal in between finds the file
 * empty, so it looks again for a little while (this path is only taken
 * when a run is refused). */
static long holder_pid(int fd)
{
    for (int tries = 0; tries < 50; tries++) {
        char buf[32];
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        if (n > 0) {
            buf[n] = 0;
            char *end;
            long pid = strtol(buf, &end, 10);
            if (pid > 0 && *end == '\n')
                return pid;
        }
        /* 1 ms; a task (cancelled: give up), or a pool thread (the run
         * takes its locks there: checkpoint.c) */
        if (!weir_task_current())
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        else if (weir_time_sleep(1000000) != 0)
            break;
    }
    return 0;
}

int weir__dirlock_take(weir__dirlocks *l, const char *dir, const char *owner, const char *what,
                       const char **held_by, char *msg, size_t cap)
{
    *held_by = NULL;
    struct stat sd;
    if (stat(dir, &sd) < 0) {
        int e = -errno;
        snprintf(msg, cap, "%s \"%s\": %s", what, dir, strerror(-e));
        return e;
    }
    for (int i = 0; i < l->n; i++)
        if (l->v[i].dev == sd.st_dev && l->v[i].ino == sd.st_ino) {
            *held_by = l->v[i].owner;
            return 0;
        }
    if (l->n == l->cap) {
        int cap2 = l->cap ? 2 * l->cap : 4;
        weir__dirlock *v = weir__realloc(l->v, (size_t)cap2 * sizeof(*v));
        if (!v) {
            snprintf(msg, cap, "%s \"%s\": %s", what, dir, strerror(ENOMEM));
            return -ENOMEM;
        }
        l->v = v;
        l->cap = cap2;
    }
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/%s", dir, WEIR__DIRLOCK_FILE) >= (int)sizeof(path)) {
        snprintf(msg, cap, "%s \"%.200s...\": %s", what, dir, strerror(ENAMETOOLONG));
        return -ENAMETOOLONG;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        int e = -errno;
        snprintf(msg, cap, "%s \"%s\": the lock file %s: %s", what, dir, path, strerror(-e));
        return e;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            long pid = holder_pid(fd);
            char who[64];
            if (!pid)
                snprintf(who, sizeof(who), "a process whose pid the lock file does not show");
            else if (pid == (long)getpid())
                snprintf(who, sizeof(who), "another run in this process (pid %ld)", pid);
            else
                snprintf(who, sizeof(who), "process %ld", pid);
            snprintf(msg, cap, "%s \"%s\" is in use by %s (it holds %s)", what, dir, who, path);
            close(fd);
            return -EBUSY;
        }
        close(fd);
        snprintf(msg, cap, "%s \"%s\": locking %s: %s", what, dir, path, strerror(e));
        return -e;
    }
    char pid[32];
    int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        int e = errno ? -errno : -EIO;
        snprintf(msg, cap, "%s \"%s\": writing %s: %s", what, dir, path, strerror(-e));
        close(fd);
        return e;
    }
    l->v[l->n++] = (weir__dirlock){.fd = fd, .dev = sd.st_dev, .ino = sd.st_ino, .owner = owner};
    return 0;
}

void weir__dirlock_release_all(weir__dirlocks *l)
{
    /* Closing the only descriptor of the open file description releases
     * the flock; the pid stays in the file, meaningless once unlocked. */
    for (int i = 0; i < l->n; i++)
        close(l->v[i].fd);
    weir__free(l->v);
    *l = (weir__dirlocks){0};
}
