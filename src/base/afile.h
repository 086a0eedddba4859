/* SPDX-License-Identifier: Apache-2.0 */
/*
 * afile.h - publishing a file atomically, and the blocking file helpers
 * around it. A reader never sees a half-written file under its final
 * name: the bytes go to a temporary file beside it (".<name>.tmp"), which
 * is fsynced, renamed into place, and the directory fsynced, so the name
 * survives a crash too.
 *
 * These calls block (write, fsync): in the engine they run on the
 * blocking pool (state/storage.h), never on a scheduler thread.
 */
#ifndef WEIR_BASE_AFILE_H
#define WEIR_BASE_AFILE_H

#include <stddef.h>
#include <stdint.h>

/* dir/name := buf[0..len), atomically. 0 or -errno; on failure the
 * temporary file is removed and dir/name is what it was. */
int weir__file_write_atomic(const char *dir, const char *name, const void *buf, size_t len);
/* fsync a directory (after a rename or unlink in it). */
int weir__fsync_dir(const char *dir);
/* The whole file at path into a new buffer (weir__free it), at most max
 * bytes (-EFBIG past it). 0 or -errno. */
int weir__file_read_all(const char *path, size_t max, uint8_t **buf, size_t *len);

#endif
