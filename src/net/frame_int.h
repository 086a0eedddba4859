/* SPDX-License-Identifier: Apache-2.0 */
/*
 * frame_int.h - what frame.c shares with the net layer's other
 * transports of frames (tls.c): the read loop of weir_frame_read over any
 * byte source, and the check that a buffer is one whole frame.
 */
#ifndef WEIR_NET_FRAME_INT_H
#define WEIR_NET_FRAME_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "weir/net.h"

/* Up to len bytes from the source into buf by deadline: > 0, 0 at its
 * end, or a negative errno. */
typedef ssize_t (*weir__frame_source)(void *arg, void *buf, size_t len, int64_t deadline);

/* weir_frame_read's contract over src: the deadline covers the whole
 * frame, a frame half read survives an error, and nothing past the
 * frame's end is asked of the source. Fibers only (-EINVAL otherwise). */
ssize_t weir__frame_read_from(weir__frame_source src, void *arg, weir_frame_parser *p,
                              weir_frame *out, int64_t deadline);

/* 0 when frame[0..len) is one whole frame (its length bytes say len),
 * else -EINVAL. */
int weir__frame_check(const void *frame, size_t len);

/* 1 when the caller may wait: a fiber, not a stackless task. */
int weir__frame_fiber_caller(void);

#endif
