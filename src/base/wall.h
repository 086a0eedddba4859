/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wall.h - the wall clock as Unix milliseconds: the time weir writes into
 * records and shows to people (the leader file, a job's submit and end,
 * checkpoint and restart times). Durations use weir_time_now(), the
 * monotonic clock, never this.
 */
#ifndef WEIR_BASE_WALL_H
#define WEIR_BASE_WALL_H

#include <stdint.h>
#include <time.h>

static inline int64_t weir__wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
