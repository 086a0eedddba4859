/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_channel_tcp_alloc.c - every allocation of one process's share of a
 * job over TCP channels (stream/channel_tcp.h) and the TCP checkpoint link
 * (ckpt_link_tcp.c) failing in turn (base/alloc.h's countdown).
 *
 * The job (two paced sources -> keyed count -> a counting sink, checkpointed
 * every few milliseconds) is split over two OS processes as in
 * test_channel_tcp.c: subtask s of every chain in process s % 2, process 0
 * coordinating the checkpoints over a socketpair. This process runs one
 * share with the countdown on; a peer forked for each attempt (before any
 * runtime exists here) runs the other share with it off, so the countdown
 * counts only the allocations of the share under test: the net, its sending
 * and receiving ends, their frame buffers and reader fibers, the checkpoint
 * link, and the deploy, run, checkpoints and state of that share. Once as
 * the coordinating process, once as the worker. A clean run counts them
 * first; its sources end only once a checkpoint completed, so the count
 * includes one.
 *
 * Each failure ends in an error - weir__tcp_new returning NULL with ENOMEM
 * and the listening socket still the caller's, or a run that returns an
 * error with the job's error text set - or, where the failed allocation was
 * not needed (a checkpoint that is only aborted, one batch fewer), in a run
 * whose output is the whole share's. Never a crash, a leak (ASan's leak
 * check at exit) or a hang: an alarm ends the test, naming the attempt, if
 * one run takes longer than a generous deadline.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "stream/channel_tcp.h"
#include "stream/count_ops.h"
#include "stream/plan.h"
#include "test.h"
#include "test_rt.h"
#include "weir/net.h"

#define N          600 /* records per source subtask */
#define PER_NEXT   60  /* records per call of next(), each call then sleeps a little */
#define DEADLINE   60  /* seconds one attempt may take before the test calls it a hang */
#define CONNECT_MS 10000

typedef struct pos_src {
    int64_t next;
    int wait;         /* after the last record, until a checkpoint completed */
    int64_t deadline; /* ... or until then */
} pos_src;

/* arg: an int, 1 to wait for a checkpoint before the end. */
static int pos_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    pos_src *p = calloc(1, sizeof(pos_src));
    if (!p)
        return -ENOMEM;
    p->wait = *(const int *)arg;
    p->deadline = weir_time_after_ms(30000);
    *state = p;
    return 0;
}

static int pos_next(weir_ctx *ctx, void *state)
{
    pos_src *p = state;
    for (int i = 0; i < PER_NEXT && p->next < N; i++, p->next++) {
        int64_t v = p->next * 2 + weir_ctx_subtask(ctx);
        int e = weir_emit(ctx, &v, 8, v);
        if (e)
            return e;
    }
    weir_time_sleep(2 * WEIR_MSEC); /* paced, so that checkpoints happen during the run */
    return p->next >= N &&
           (!p->wait || weir_ctx_completed(ctx) > 0 || weir_time_now() >= p->deadline);
}

static int pos_snapshot(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    if (!(*buf = malloc(8)))
        return -ENOMEM;
    memcpy(*buf, &((pos_src *)state)->next, 8);
    *len = 8;
    return 0;
}

static int pos_restore(weir_ctx *ctx, void *state, const void *buf, size_t len)
{
    (void)ctx;
    if (len != 8)
        return -EINVAL;
    memcpy(&((pos_src *)state)->next, buf, 8);
    return 0;
}

static const weir_source_def pos_def = {.open = pos_open,
                                        .next = pos_next,
                                        .close = free,
                                        .snapshot = pos_snapshot,
                                        .restore = pos_restore};

/* The sink: how many records and an order-free sum of their hashes
 * (nothing allocated, so the countdown is the engine's). */
typedef struct tally {
    _Atomic uint64_t n, sum;
} tally;

static int tally_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    *state = arg;
    return 0;
}

static int tally_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx;
    tally *t = state;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < in->len; i++)
        h = (h ^ ((const uint8_t *)in->data)[i]) * 1099511628211ull;
    atomic_fetch_add(&t->n, 1);
    atomic_fetch_add(&t->sum, h);
    return 0;
}

static const weir_op_def tally_def = {.open = tally_open, .process = tally_process};

static int by_subtask(void *arg, uint32_t chain, uint32_t sub)
{
    (void)arg, (void)chain;
    return (int)(sub % 2);
}

/* ---- one process's share -------------------------------------------------------------------- */
typedef struct share {
    int self, lfd, ctl, ports[2];
    char ckpt[64];
    long fail_at;  /* the countdown for this share (-1: off) */
    int wait_ckpt; /* the sources end only once a checkpoint completed (the clean run) */
    /* What happened: */
    long allocations;      /* made while the countdown was on */
    int made;              /* weir__tcp_new gave a net */
    int lfd_kept;          /* ... and if not, the listening socket was still open */
    int ran;               /* the run's result */
    char error[256];       /* the job's error text */
    uint64_t records, sum; /* what this share's sink got (tally) */
    int checkpointed;      /* checkpoint 1 completed (its COMPLETED marker) */
} share;

static intptr_t run_share(void *arg)
{
    share *sh = arg;
    tally t = {0};
    weir_job *j = weir_job_new("tcp-alloc");
    CHECK(j != NULL);
    weir_stream *s =
        weir_stream_parallelism(weir_job_source(j, "src", &pos_def, &sh->wait_ckpt), 2);
    s = weir_stream_map(s, "to_one", to_one, NULL);
    s = weir_stream_reduce(weir_stream_key_by(s, key16, NULL), "count", count16, NULL);
    s = weir_stream_map(s, "to_line", to_line, NULL);
    CHECK_EQ(weir_stream_sink(s, "out", &tally_def, &t), 0);
    weir__plan *p;
    char why[256];
    CHECK_EQ(weir__plan_make(j, 2, 4, &p, why, sizeof(why)), 0);
    weir_frame_builder fb;
    CHECK_EQ(weir__plan_encode(p, &fb), 0);
    const uint8_t *bytes;
    size_t len;
    CHECK_EQ(weir_frame_builder_finish(&fb, &bytes, &len), 0);
    uint64_t hash = weir__tcp_plan_hash(bytes, len);
    weir_frame_builder_close(&fb);

    /* The graph and the plan are test_stream_alloc's; from here on is the
     * share over TCP. */
    const char *hosts[2] = {"127.0.0.1", "127.0.0.1"};
    int ctl[2] = {-1, -1};
    ctl[1 - sh->self] = sh->ctl;
    if (sh->fail_at >= 0)
        weir__alloc_fail_after(sh->fail_at);
    weir__tcp_net *n = weir__tcp_new(&(weir__tcp_opts){
        .self = sh->self,
        .nprocs = 2,
        .hosts = hosts,
        .ports = sh->ports,
        .listen_fd = sh->lfd,
        .place = by_subtask,
        .plan_hash = hash,
        .connect_timeout_ms = CONNECT_MS,
        .control_fds = ctl,
        .coordinator = 0,
    });
    int e = errno;
    sh->made = n != NULL;
    if (n) {
        weir__deploy d;
        weir__tcp_deploy(n, &d);
        sh->ran = weir__job_run_plan(j, p,
                                     &(weir_run_opts){.parallelism = 2,
                                                      .checkpoint_dir = sh->ckpt,
                                                      .checkpoint_interval_ms = 4},
                                     &d);
    }
    sh->allocations = sh->fail_at >= 0 ? weir__alloc_fail_after(-1) : 0;
    if (n) {
        snprintf(sh->error, sizeof(sh->error), "%s", weir_job_error(j));
        sh->records = atomic_load(&t.n);
        sh->sum = atomic_load(&t.sum);
        weir__tcp_free(n);
    } else {
        /* A net that could not be made leaves the sockets to the caller. */
        CHECK_EQ(e, ENOMEM);
        sh->lfd_kept = fcntl(sh->lfd, F_GETFD) >= 0 && fcntl(sh->ctl, F_GETFD) >= 0;
        close(sh->lfd);
        close(sh->ctl);
    }
    weir__plan_free(p);
    weir_job_free(j);
    return 0;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static long g_attempt;
static void on_alarm(int sig)
{
    (void)sig;
    char msg[128];
    int len = snprintf(msg, sizeof(msg),
                       "FAIL: the run with allocation %ld failing did not end in %d s\n", g_attempt,
                       DEADLINE);
    if (write(2, msg, (size_t)len) < 0) {
    }
    _exit(1);
}

/* Run this process's share `self` with allocation fail_at failing (-1:
 * none) against a peer process running the other share. */
static void attempt(int self, long fail_at, share *sh)
{
    memset(sh, 0, sizeof(*sh));
    sh->self = self;
    sh->fail_at = fail_at;
    sh->wait_ckpt = fail_at == LONG_MAX; /* the clean run; the peer's share waits too */
    snprintf(sh->ckpt, sizeof(sh->ckpt), "/tmp/weir-tcp-alloc-XXXXXX");
    CHECK(mkdtemp(sh->ckpt) != NULL);
    int lfd[2], sp[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_GE(lfd[i] = weir_net_listen("127.0.0.1", 0, NULL), 0);
        sh->ports[i] = weir_net_local_port(lfd[i]);
    }
    int peer = 1 - self;
    pid_t pid = fork();
    CHECK_GE(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* no peer outlives a failed test */
        close(lfd[self]);
        close(sp[self]);
        share other = *sh;
        other.self = peer;
        other.lfd = lfd[peer];
        other.ctl = sp[peer];
        other.fail_at = -1;
        test_run_on_rt(2, run_share, &other);
        _exit(other.ran == 0 ? 0 : 1);
    }
    close(lfd[peer]);
    close(sp[peer]);
    sh->lfd = lfd[self];
    sh->ctl = sp[self];
    g_attempt = fail_at;
    alarm(DEADLINE);
    CHECK_EQ(test_run_on_rt(2, run_share, sh), 0);
    alarm(0);
    int st;
    if (sh->made && sh->ran == 0) {
        /* Both ends finished: the peer does too, by itself. */
        CHECK_EQ(waitpid(pid, &st, 0), pid);
        CHECK(WIFEXITED(st));
        CHECK_EQ(WEXITSTATUS(st), 0);
    } else {
        /* This share failed; whatever the peer makes of that (it fails,
         * or waits for a producer that will not come) is not under test. */
        kill(pid, SIGKILL);
        CHECK_EQ(waitpid(pid, &st, 0), pid);
    }
    DIR *dir = opendir(sh->ckpt);
    CHECK(dir != NULL);
    for (struct dirent *de; (de = readdir(dir));)
        sh->checkpointed |= strncmp(de->d_name, "COMPLETED-", 10) == 0;
    closedir(dir);
    CHECK_EQ(nftw(sh->ckpt, remove_one, 8, FTW_DEPTH | FTW_PHYS), 0);
}

static void every_allocation_in_turn(int self)
{
    signal(SIGALRM, on_alarm);
    /* The clean run, whose allocations are counted: its sources end once a
     * checkpoint completed, so that the count has a checkpoint's. */
    share ok;
    attempt(self, LONG_MAX, &ok);
    CHECK(ok.made);
    if (ok.ran)
        fprintf(stderr, "the clean run failed: %s\n", ok.error);
    CHECK_EQ(ok.ran, 0);
    CHECK_GT(ok.records, 0u);
    CHECK(ok.checkpointed);
    CHECK_GT(ok.allocations, 50);
    printf("process %d's share makes %ld engine allocations in a run with a checkpoint\n", self,
           ok.allocations);
    int not_made = 0, failed = 0, unaffected = 0;
    int64_t slowest = 0;
    for (long n = 0; n < ok.allocations + 10; n++) {
        share sh;
        int64_t t0 = weir_time_now();
        attempt(self, n, &sh);
        int64_t ms = (weir_time_now() - t0) / 1000000;
        slowest = ms > slowest ? ms : slowest;
        if (!sh.made) {
            CHECK(sh.lfd_kept);
            not_made++;
            continue;
        }
        if (sh.ran == 0) {
            /* The allocation was one the run could do without: it is
             * still complete. */
            CHECK_EQ(sh.records, ok.records);
            CHECK_EQ(sh.sum, ok.sum);
            unaffected++;
            continue;
        }
        CHECK(sh.ran < 0);
        if (!sh.error[0])
            fprintf(stderr, "allocation %ld: the run returned %d without an error text\n", n,
                    sh.ran);
        CHECK(sh.error[0] != '\0');
        failed++;
    }
    printf("%d nets not made, %d runs failed with an error, %d complete anyway; the slowest "
           "attempt took %lld ms\n",
           not_made, failed, unaffected, (long long)slowest);
    CHECK_GT(not_made, 0);
    CHECK_GT(failed, ok.allocations / 2);
}

TEST(every_allocation_of_the_coordinating_process_fails_in_turn)
{
    every_allocation_in_turn(0);
}

TEST(every_allocation_of_a_worker_process_fails_in_turn)
{
    every_allocation_in_turn(1);
}

TEST_MAIN()
