// SPDX-License-Identifier: Apache-2.0
//
// libuv peer for bench=timers: n (default 1M) concurrent uv_timer_t, each with
// a random deadline in 0-1000 ms, on one uv_loop_t. Prints wall time from the
// first uv_timer_start until the loop has fired every timer, and peak RSS.
//
//   uv_timers [--n N] [--runs R]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

static size_t fired;

static void on_timer(uv_timer_t *t) {
  (void)t;
  fired++;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  size_t n = 1000000;
  int runs = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--n")) {
      n = strtoull(argv[i + 1], NULL, 10);
    } else if (!strcmp(argv[i], "--runs")) {
      runs = atoi(argv[i + 1]);
    } else {
      fprintf(stderr, "usage: %s [--n N] [--runs R]\n", argv[0]);
      return 2;
    }
  }
  if (n == 0 || runs < 1) {
    fprintf(stderr, "bad --n or --runs\n");
    return 2;
  }
  uint64_t *ms = malloc(n * sizeof *ms);
  uv_timer_t *timers = malloc(n * sizeof *timers);
  double *walls = malloc((size_t)runs * sizeof *walls);
  if (!ms || !timers || !walls) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  uint64_t x = 0x9E3779B97F4A7C15ull; // xorshift64, fixed seed
  uv_loop_t *loop = uv_default_loop();
  for (int r = 0; r < runs; r++) {
    for (size_t i = 0; i < n; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      ms[i] = x % 1001;
    }
    fired = 0;
    uint64_t t0 = uv_hrtime();
    uv_update_time(loop);
    for (size_t i = 0; i < n; i++) {
      uv_timer_init(loop, &timers[i]);
      uv_timer_start(&timers[i], on_timer, ms[i], 0);
    }
    uv_run(loop, UV_RUN_DEFAULT);
    walls[r] = (double)(uv_hrtime() - t0) / 1e9;
    if (fired != n) {
      fprintf(stderr, "fired %zu of %zu timers\n", fired, n);
      return 1;
    }
  }
  qsort(walls, (size_t)runs, sizeof *walls, cmp_double);
  double med = runs % 2 ? walls[runs / 2] : (walls[runs / 2 - 1] + walls[runs / 2]) / 2;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("bench=timers impl=libuv wall_s=%.3f rss_mib=%.1f timers=%zu runs=%d\n", med,
         (double)ru.ru_maxrss / 1024.0, n, runs);
  return 0;
}
