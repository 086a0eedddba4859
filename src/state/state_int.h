/* SPDX-License-Identifier: Apache-2.0 */
/*
 * state_int.h - what the state backends share: the snapshot format's
 * writer and checked reader (snapshot.c), and the snapshot object.
 */
#ifndef WEIR_STATE_INT_H
#define WEIR_STATE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "weir/state.h"

/* A captured snapshot: the file's bytes, checksum excluded. */
struct weir_state_snapshot {
    uint64_t id;
    uint8_t *buf;
    size_t len, cap;
    int err; /* first append error (sticky) */
};

/* Writing: a header, then each group's entries in key order. */
int weir__snap_init(weir_state_snapshot *s, uint64_t id, int ngroups, int first_kg, int end_kg);
void weir__snap_group(weir_state_snapshot *s, int kg, uint64_t count);
void weir__snap_entry(weir_state_snapshot *s, const void *key, size_t klen, const void *val,
                      size_t vlen);

/* Byte order of keys: memcmp, then the shorter first. */
int weir__key_cmp(const void *a, size_t an, const void *b, size_t bn);

/* Reading a whole file image (checksum included), checked before use. */
typedef struct weir__snap_reader {
    const uint8_t *p;
    size_t len, pos;
    int ngroups, first_kg, end_kg;
    uint64_t id;
} weir__snap_reader;

/* Check the image whole: header, every group and entry within bounds, the
 * checksum. 0, or -EBADMSG with weir__state_fail() set. */
int weir__snap_open(weir__snap_reader *r, const uint8_t *p, size_t len);
/* The next group: 1 with *kg and *count, 0 at the end. Then count entries. */
int weir__snap_next_group(weir__snap_reader *r, int *kg, uint64_t *count);
void weir__snap_next_entry(weir__snap_reader *r, const uint8_t **key, size_t *klen,
                           const uint8_t **val, size_t *vlen);

/* Read a snapshot file into memory (*p malloc'd). */
int weir__snap_read_file(const char *path, uint8_t **p, size_t *len);
/* Record why a restore failed (for weir_state_strerror) and return -EBADMSG. */
int weir__state_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
