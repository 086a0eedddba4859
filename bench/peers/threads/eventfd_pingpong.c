// SPDX-License-Identifier: Apache-2.0
//
// Peer for bench=wake_latency: two plain threads ping-pong over two eventfds
// (blocking read/write, so each hop is a sleeping thread being woken).
// A round trip is ping + pong. One line per placement:
//   pin=none       the scheduler places the threads (normally two cores)
//   pin=same-core  both threads pinned to CPU 0 (wakes without an IPI)
//
//   eventfd_pingpong [--n ROUNDTRIPS] [--runs R]
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static int ping_fd, pong_fd;
static long roundtrips;
static int pin_cpu = -1;

static void die(const char *what) {
  perror(what);
  exit(1);
}

static void pin(void) {
  if (pin_cpu < 0) {
    return;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(pin_cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
    die("pthread_setaffinity_np");
  }
}

static void put(int fd) {
  uint64_t one = 1;
  if (write(fd, &one, sizeof one) != sizeof one) {
    die("eventfd write");
  }
}

static void take(int fd) {
  uint64_t v;
  if (read(fd, &v, sizeof v) != sizeof v) {
    die("eventfd read");
  }
}

static void *ponger(void *arg) {
  (void)arg;
  pin();
  for (long i = 0; i < roundtrips + 100; i++) {
    take(ping_fd);
    put(pong_fd);
  }
  return NULL;
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double one_run(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, ponger, NULL) != 0) {
    die("pthread_create");
  }
  pin();
  for (int i = 0; i < 100; i++) {  // warm up
    put(ping_fd);
    take(pong_fd);
  }
  double t0 = now_ns();
  for (long i = 0; i < roundtrips; i++) {
    put(ping_fd);
    take(pong_fd);
  }
  double el = now_ns() - t0;
  pthread_join(t, NULL);
  return el / 1000.0 / (double)roundtrips;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int runs = 5;
  roundtrips = 20000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--n")) {
      roundtrips = atol(argv[i + 1]);
    } else if (!strcmp(argv[i], "--runs")) {
      runs = atoi(argv[i + 1]);
    } else {
      fprintf(stderr, "usage: %s [--n ROUNDTRIPS] [--runs R]\n", argv[0]);
      return 2;
    }
  }
  if (roundtrips < 1 || runs < 1 || runs > 1000) {
    fprintf(stderr, "bad --n or --runs\n");
    return 2;
  }
  ping_fd = eventfd(0, EFD_CLOEXEC);
  pong_fd = eventfd(0, EFD_CLOEXEC);
  if (ping_fd < 0 || pong_fd < 0) {
    die("eventfd");
  }
  double per[1000];
  static const char *const names[] = {"none", "same-core"};
  for (int p = 0; p < 2; p++) {
    cpu_set_t orig;
    sched_getaffinity(0, sizeof orig, &orig);
    pin_cpu = p == 0 ? -1 : 0;
    for (int r = 0; r < runs; r++) {
      per[r] = one_run();
    }
    sched_setaffinity(0, sizeof orig, &orig);  // undo the main thread's pin
    qsort(per, (size_t)runs, sizeof per[0], cmp_double);
    double med = runs % 2 ? per[runs / 2] : (per[runs / 2 - 1] + per[runs / 2]) / 2;
    printf("bench=wake_latency impl=threads-eventfd pin=%s us_per_roundtrip=%.2f roundtrips=%ld runs=%d\n",
           names[p], med, roundtrips, runs);
    fflush(stdout);
  }
  return 0;
}
