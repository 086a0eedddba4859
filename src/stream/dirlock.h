/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dirlock.h - the directories a run holds for its lifetime (dirlock.c).
 *
 * A run locks its checkpoint directory and every exactly-once file sink's
 * output directory before it reads or changes anything in them, and keeps
 * them until it ends: a second run on one of them (another process, or
 * another weir_job_run in this one) is refused at once instead of deleting
 * files the first one is using. weir__dirlock_take makes file system
 * calls (stat, open, flock, a write of the pid): the run calls it on the
 * blocking pool (checkpoint.c's lock_dirs), never on a scheduler thread.
 */
#ifndef WEIR_STREAM_DIRLOCK_H
#define WEIR_STREAM_DIRLOCK_H

#include <stddef.h>
#include <sys/types.h>

/* The lock file inside a locked directory. Its name starts with a dot and
 * matches none of the names checkpoint.c (COMPLETED-*, chk-*) and
 * filesink.c (part-*, .part-*) look for. */
#define WEIR__DIRLOCK_FILE ".lock"

typedef struct weir__dirlock {
    int fd; /* the open lock file, flock(LOCK_EX) held */
    dev_t dev;
    ino_t ino;         /* of the directory: one lock per directory however it is named */
    const char *owner; /* who in the run uses it (not copied) */
} weir__dirlock;

typedef struct weir__dirlocks {
    weir__dirlock *v;
    int n, cap;
} weir__dirlocks;

/* Lock directory dir (which must exist) for this set, on behalf of owner
 * (a name kept for *held_by); `what` says what dir is in messages ("the
 * checkpoint directory"). 0: locked, or already held by this set, however
 * named (*held_by is then the owner that took it; NULL when newly locked).
 * -EBUSY: another run holds it; msg names the directory and the holder's
 * pid. Other negative errno: msg says what failed. */
int weir__dirlock_take(weir__dirlocks *l, const char *dir, const char *owner, const char *what,
                       const char **held_by, char *msg, size_t cap);

/* Release every lock of the set (idempotent). */
void weir__dirlock_release_all(weir__dirlocks *l);

#endif /* WEIR_STREAM_DIRLOCK_H */
