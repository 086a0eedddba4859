/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_channel_tcp.c - a job split over two OS processes (started here with
 * fork, before any runtime exists) whose subtasks meet over loopback TCP
 * channels (stream/channel_tcp.h): the union of their outputs is the
 * output of the same job in one process. And the consumer's side against
 * a fake producer: a malformed batch, a stranger's HELLO, a producer that
 * goes past its credits, a connection lost before the end, and a producer
 * that never comes all fail the job naming the channel, without a crash;
 * frames cut across reads, and one larger than the reader's buffer, are
 * put together; and a producer that spent every credit gets every one
 * back (however the consumer groups them). A source in one process that
 * says it is idle leaves the watermark minimum of a sink in the other.
 * The frames a sending end holds for its producer's next push go out
 * before that producer waits for a credit of another channel.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/be.h"
#include "stream/channel_tcp.h"
#include "stream/count_ops.h"
#include "stream/lines.h"
#include "stream/plan.h"
#include "stream/wire.h"
#include "test.h"
#include "test_rt.h"
#include "weir/net.h"
#include "stream/tcp_job.h" /* last: its N */

/* ---- one process's share -------------------------------------------------------------------- */
/* j's plan at parallelism par (in *p) and this process's net for it: the
 * subtasks placed by place (given the plan), checkpoint messages over ctl
 * (NULL: none), process 0 coordinating. */
static weir__tcp_net *plan_and_net_placed(weir_job *j, weir__plan **p, int par, int self, int lfd,
                                          const int ports[2], const int *ctl, int64_t timeout_ms,
                                          int (*place)(void *, uint32_t, uint32_t))
{
    char why[256];
    CHECK_EQ(weir__plan_make(j, par, 4, p, why, sizeof(why)), 0);
    weir_frame_builder fb;
    CHECK_EQ(weir__plan_encode(*p, &fb), 0);
    const uint8_t *bytes;
    size_t len;
    CHECK_EQ(weir_frame_builder_finish(&fb, &bytes, &len), 0);
    const char *hosts[2] = {"127.0.0.1", "127.0.0.1"};
    weir__tcp_net *n = weir__tcp_new(&(weir__tcp_opts){
        .self = self,
        .nprocs = 2,
        .hosts = hosts,
        .ports = ports,
        .listen_fd = lfd,
        .place = place,
        .place_arg = *p,
        .plan_hash = weir__tcp_plan_hash(bytes, len),
        .connect_timeout_ms = timeout_ms,
        .control_fds = ctl,
        .coordinator = 0,
    });
    weir_frame_builder_close(&fb);
    return n;
}

/* Run this process's share of j (plan_and_net_placed's arguments) with
 * options o, printing the job's error when it fails; the net's counters
 * into stats (NULL: not wanted). */
static int run_placed(weir_job *j, int par, int self, int lfd, const int ports[2], const int *ctl,
                      int64_t timeout_ms, int (*place)(void *, uint32_t, uint32_t),
                      const weir_run_opts *o, uint64_t stats[3])
{
    weir__plan *p;
    weir__tcp_net *n = plan_and_net_placed(j, &p, par, self, lfd, ports, ctl, timeout_ms, place);
    CHECK(n != NULL);
    weir__deploy d;
    weir__tcp_deploy(n, &d);
    int e = weir__job_run_plan(j, p, o, &d);
    if (e)
        fprintf(stderr, "process %d: %s\n", self, weir_job_error(j));
    if (stats)
        weir__tcp_stats(n, &stats[0], &stats[1], &stats[2]);
    weir__tcp_free(n);
    weir__plan_free(p);
    return e;
}

/* At parallelism 2, subtask s of every chain in process s % 2. */
static int run_by_subtask(weir_job *j, int self, int lfd, const int ports[2], const int *ctl,
                          int64_t timeout_ms, const weir_run_opts *o, uint64_t stats[3])
{
    return run_placed(j, 2, self, lfd, ports, ctl, timeout_ms, by_subtask, o, stats);
}

typedef struct share {
    int self, lfd, ports[2];
    const char *out;
    int64_t connect_timeout_ms;
    uint64_t sent, received, records;
} share;

static intptr_t run_share(void *arg)
{
    share *sh = arg;
    weir_collector *c = weir_collector_new();
    weir_job *j = count_job("tcp", c);
    uint64_t stats[3];
    int e = run_by_subtask(j, sh->self, sh->lfd, sh->ports, NULL, sh->connect_timeout_ms,
                           &(weir_run_opts){.parallelism = 2}, stats);
    sh->sent = stats[0], sh->received = stats[1], sh->records = stats[2];
    char *text = collected(c);
    FILE *f = fopen(sh->out, "w");
    fputs(text, f);
    fclose(f);
    free(text);
    weir_job_free(j);
    weir_collector_free(c);
    return e;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = calloc(1, (size_t)n + 1);
    CHECK_EQ(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return b;
}

static weir_collector *ref_c;
static intptr_t run_ref(void *arg)
{
    (void)arg;
    weir_job *j = count_job("tcp", ref_c);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.parallelism = 2}), 0);
    weir_job_free(j);
    return 0;
}

TEST(a_job_over_two_processes_gives_the_one_process_output)
{
    char dir[] = "/tmp/weir-tcp-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int lfd[2], ports[2];
    for (int i = 0; i < 2; i++) {
        CHECK_GE(lfd[i] = weir_net_listen("127.0.0.1", 0, NULL), 0);
        ports[i] = weir_net_local_port(lfd[i]);
    }
    pid_t pid[2];
    char out[2][64];
    for (int i = 0; i < 2; i++) {
        snprintf(out[i], sizeof(out[i]), "%s/out.%d", dir, i);
        pid[i] = fork();
        CHECK_GE(pid[i], 0);
        if (pid[i] == 0) {
            close(lfd[1 - i]);
            share sh = {i, lfd[i], {ports[0], ports[1]}, out[i], 0, 0, 0, 0};
            intptr_t e = test_run_on_rt(2, run_share, &sh);
            if (!e)
                fprintf(stderr, "process %d: %llu bytes sent (%llu records), %llu received\n", i,
                        (unsigned long long)sh.sent, (unsigned long long)sh.records,
                        (unsigned long long)sh.received);
            _exit(e ? 1 : 0);
        }
    }
    close(lfd[0]);
    close(lfd[1]);
    for (int i = 0; i < 2; i++) {
        int status;
        CHECK_EQ(waitpid(pid[i], &status, 0), pid[i]);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0);
    }
    /* Both processes' outputs together are the one-process run's. */
    char *a = slurp(out[0]), *b = slurp(out[1]);
    char *both = malloc(strlen(a) + strlen(b) + 1);
    strcat(strcpy(both, a), b);
    CHECK_GT(strlen(a), 0u); /* each ran a share of the keyed count */
    CHECK_GT(strlen(b), 0u);
    ref_c = weir_collector_new();
    CHECK_EQ(test_run_on_rt(2, run_ref, NULL), 0);
    CHECK_EQ(weir_collector_count(ref_c), 2u * N);
    char *ref = collected(ref_c);
    char *s1 = sorted(both), *s2 = sorted(ref);
    CHECK(strcmp(s1, s2) == 0);
    free(s1), free(s2), free(ref), free(both), free(a), free(b);
    weir_collector_free(ref_c);
    unlink(out[0]);
    unlink(out[1]);
    rmdir(dir);
}

/* ---- the consumer against a fake producer -----------------------------------------------------
 */
typedef struct fake {
    int port;      /* the consumer's */
    int mode;      /* what the fake producer does */
    uint64_t hash; /* the plan's */
    uint32_t credits;
    const char *error;     /* the job's error, after */
    uint32_t back, frames; /* CREDITS_BACK: credits returned, in how many frames */
} fake;

enum { BAD_BATCH, STRANGER_THEN_BAD, PAST_CREDITS, LOST, NEVER, CUT, CREDITS_BACK, BIG };

static int all_in_zero_but_src1(void *arg, uint32_t chain, uint32_t sub)
{
    (void)arg;
    return chain == 0 && sub == 1 ? 1 : 0;
}

static int send_hello(int fd, const fake *f, uint32_t channel)
{
    uint8_t h[WEIR__WIRE_CTRL_MAX];
    /* Channel 2 is src 1 -> count 0: the consumer's input 1. */
    weir__wire_hello hello = {f->hash, channel, 1, 0, 1, f->credits};
    return weir_frame_write(fd, h, weir__wire_encode_hello(h, &hello), WEIR_FOREVER);
}

static intptr_t fake_producer(void *arg)
{
    fake *f = arg;
    if (f->mode == NEVER)
        return 0;
    int fd = weir_net_connect("127.0.0.1", f->port, weir_time_after_ms(10000));
    CHECK_GE(fd, 0);
    if (f->mode == STRANGER_THEN_BAD) {
        /* A HELLO for a channel of another plan: dropped, the consumer
         * keeps listening for the real one. */
        fake other = *f;
        other.hash ^= 1;
        CHECK_EQ(send_hello(fd, &other, 2), 0);
        weir_io_close(fd);
        fd = weir_net_connect("127.0.0.1", f->port, weir_time_after_ms(10000));
        CHECK_GE(fd, 0);
    }
    uint8_t empty[13] = {0, 0, 0, 9, WEIR__WIRE_BATCH, 0, 0, 0, 0, 0, 0, 0, 0};
    if (f->mode == CUT) {
        /* HELLO and a good batch a byte per write (each its own segment:
         * the connection has TCP_NODELAY), then a bad one: the reader
         * puts frames cut across reads together, and only the bad one
         * fails the job. */
        weir_net_set_nodelay(fd, 1);
        uint8_t h[WEIR__WIRE_CTRL_MAX + sizeof(empty)];
        weir__wire_hello hello = {f->hash, 2, 1, 0, 1, f->credits};
        size_t hl = weir__wire_encode_hello(h, &hello);
        memcpy(h + hl, empty, sizeof(empty));
        for (size_t i = 0; i < hl + sizeof(empty); i++)
            CHECK_EQ(weir_io_send(fd, h + i, 1, MSG_NOSIGNAL, WEIR_FOREVER), 1);
    } else {
        CHECK_EQ(send_hello(fd, f, 2), 0);
    }
    if (f->mode == BIG) {
        /* A batch of one 300 KiB record (of key group 0, count 0's), more
         * than the reader's buffer holds to start with, then a bad one. */
        enum { REC = 300 << 10 };
        size_t len = 4 + WEIR__WIRE_BATCH_HEAD + WEIR__WIRE_REC_HEADER + REC;
        uint8_t *big = calloc(1, len), *h = big + 4 + WEIR__WIRE_BATCH_HEAD;
        weir__put_be32(big, (uint32_t)(len - 4));
        big[4] = WEIR__WIRE_BATCH;
        weir__put_be32(big + 5, 1);
        weir__put_be32(big + 9, REC);
        weir__put_be32(h + 8, REC); /* ts 0, key group 0 */
        uint64_t one = 1;
        memcpy(h + WEIR__WIRE_REC_HEADER, &one, 8);
        CHECK_EQ(weir_io_send(fd, big, len, MSG_NOSIGNAL, WEIR_FOREVER), (ssize_t)len);
        free(big);
    }
    if (f->mode == CREDITS_BACK) {
        /* Every credit spent: all of them come back, however the consumer
         * groups them, and no more. */
        for (uint32_t i = 0; i < f->credits; i++)
            CHECK_EQ(weir_frame_write(fd, empty, sizeof(empty), WEIR_FOREVER), 0);
        weir_frame_parser p;
        weir_frame_parser_init(&p, NULL);
        int64_t deadline = weir_time_after_ms(20000);
        while (f->back < f->credits) {
            weir_frame fr = {0};
            CHECK_GT(weir_frame_read(fd, &p, &fr, deadline), 0);
            weir__wire_msg m;
            char why[160];
            CHECK_EQ(weir__wire_decode(fr.data, fr.len, &m, why, sizeof(why)), 0);
            weir_frame_free(&fr);
            CHECK_EQ(m.kind, WEIR__WIRE_CREDIT);
            f->back += m.u.credits;
            f->frames++;
        }
        weir_frame_parser_close(&p);
    }
    if (f->mode == BAD_BATCH || f->mode == STRANGER_THEN_BAD || f->mode == CUT || f->mode == BIG) {
        /* A batch claiming 5 records and carrying none. */
        uint8_t bad[] = {0, 0, 0, 9, WEIR__WIRE_BATCH, 0, 0, 0, 5, 0, 0, 0, 0};
        CHECK_EQ(weir_frame_write(fd, bad, sizeof(bad), WEIR_FOREVER), 0);
    } else if (f->mode == PAST_CREDITS) {
        /* A barrier, then batches on one credit: the consumer holds
         * what comes after the barrier (with its credits) until its other
         * input brings the barrier too, which it never does (no
         * checkpoints run), so the second batch is past the credit. */
        uint8_t barrier[WEIR__WIRE_CTRL_MAX];
        size_t bl = weir__wire_encode_barrier(barrier, 1, WEIR__WIRE_BARRIER_ALIGNED);
        CHECK_EQ(weir_frame_write(fd, barrier, bl, WEIR_FOREVER), 0);
        uint8_t empty[64 * 13];
        for (int i = 0; i < 64; i++)
            memcpy(empty + 13 * i,
                   (uint8_t[]){0, 0, 0, 9, WEIR__WIRE_BATCH, 0, 0, 0, 0, 0, 0, 0, 0}, 13);
        CHECK_EQ(weir_io_send(fd, empty, sizeof(empty), MSG_NOSIGNAL, WEIR_FOREVER),
                 (ssize_t)sizeof(empty));
    }
    /* LOST, CREDITS_BACK: close without END, now. Otherwise hold the connection until
     * the consumer's failed run closes it, so that what was sent is read
     * before any close of ours could reset it. */
    if (f->mode != LOST && f->mode != CREDITS_BACK) {
        char sink[256];
        int64_t deadline = weir_time_after_ms(30000);
        while (weir_io_read(fd, sink, sizeof(sink), deadline) > 0)
            ;
    }
    weir_io_close(fd);
    return 0;
}

static intptr_t run_consumer(void *arg)
{
    fake *f = arg;
    weir_collector *c = weir_collector_new();
    weir_job *j = count_job("tcp", c);
    weir__plan *p;
    char why[256];
    CHECK_EQ(weir__plan_make(j, 2, (int)f->credits, &p, why, sizeof(why)), 0);
    int lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(lfd, 0);
    f->port = weir_net_local_port(lfd);
    const char *hosts[2] = {"127.0.0.1", "127.0.0.1"};
    int ports[2] = {f->port, 1}; /* nobody connects to process 1 */
    weir__tcp_net *n = weir__tcp_new(&(weir__tcp_opts){
        .self = 0,
        .nprocs = 2,
        .hosts = hosts,
        .ports = ports,
        .listen_fd = lfd,
        .place = all_in_zero_but_src1,
        .plan_hash = f->hash,
        .credits = f->credits, /* what the fake producer's HELLO says */
        .connect_timeout_ms = f->mode == NEVER ? 300 : 10000,
    });
    weir__deploy d;
    weir__tcp_deploy(n, &d);
    weir_task *t = weir_task_spawn(fake_producer, f, NULL);
    int e = weir__job_run_plan(j, p, &(weir_run_opts){.parallelism = 2}, &d);
    weir_task_join(t, NULL, WEIR_FOREVER);
    f->error = strdup(weir_job_error(j));
    weir__tcp_free(n);
    weir__plan_free(p);
    weir_job_free(j);
    weir_collector_free(c);
    return e;
}

static fake consumer_fails(int mode, const char *needle)
{
    fake f = {.mode = mode, .hash = 0x1234, .credits = mode == PAST_CREDITS ? 1 : 4};
    per_sub = -1; /* the job ends by the failure alone */
    CHECK(test_run_on_rt(2, run_consumer, &f) < 0);
    per_sub = N;
    CHECK_HAS(f.error, "channel 2 (\"to_one\" 1 -> \"count\" 0)");
    CHECK_HAS(f.error, needle);
    free((void *)f.error);
    return f;
}

TEST(a_malformed_batch_fails_the_job_naming_the_channel)
{
    consumer_fails(BAD_BATCH, "batch");
}

TEST(a_strangers_hello_is_dropped_and_the_real_producer_still_counts)
{
    consumer_fails(STRANGER_THEN_BAD, "batch");
}

TEST(a_producer_past_its_credits_fails_the_job)
{
    consumer_fails(PAST_CREDITS, "more batches than its credits");
}

TEST(a_connection_lost_before_the_end_fails_the_job)
{
    consumer_fails(LOST, "closed before its end of input");
}

TEST(a_producer_that_never_connects_fails_the_job)
{
    consumer_fails(NEVER, "did not connect in 300 ms");
}

TEST(frames_cut_across_reads_are_read_whole)
{
    consumer_fails(CUT, "batch: record headers cut short (0 of 65 bytes for 5 records)");
}

TEST(a_frame_larger_than_the_read_buffer_is_read_whole)
{
    consumer_fails(BIG, "batch: record headers cut short (0 of 65 bytes for 5 records)");
}

TEST(a_producer_that_spent_every_credit_gets_every_one_back)
{
    fake f = consumer_fails(CREDITS_BACK, "closed before its end of input");
    CHECK_EQ(f.back, 4u);
    CHECK_GE(f.frames, 1u);
    CHECK_LE(f.frames, 4u);
    printf("4 credits came back in %u CREDIT frames\n", f.frames);
}

/* ---- checkpoints across the two processes, and SIGKILL -------------------------------------- */
#define EO_N 30000 /* records per source subtask */

typedef struct pos_src {
    int64_t next;
} pos_src;

static int pos_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = calloc(1, sizeof(pos_src));
    return 0;
}

static int pos_next(weir_ctx *ctx, void *state)
{
    pos_src *p = state;
    for (int i = 0; i < 100 && p->next < EO_N; i++, p->next++) {
        int64_t v = p->next * 2 + weir_ctx_subtask(ctx);
        int e = weir_emit(ctx, &v, 8, v);
        if (e)
            return e;
    }
    weir_time_sleep(WEIR_MSEC); /* paced */
    return p->next >= EO_N;
}

static int pos_snapshot(weir_ctx *ctx, void *state, void **buf, size_t *len)
{
    (void)ctx;
    *buf = malloc(8);
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

/* src (2) -> to_one -> key_by -> count -> to_line -> file sink (out) or collect (c) */
static weir_job *eo_job(const char *out, weir_collector *c)
{
    weir_job *j = weir_job_new("tcp-eo");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &pos_def, NULL), 2);
    s = weir_stream_map(s, "to_one", to_one, NULL);
    s = weir_stream_reduce(weir_stream_key_by(s, key16, NULL), "count", count16, NULL);
    s = weir_stream_map(s, "to_line", to_line, NULL);
    CHECK_EQ(out ? weir_stream_file_sink(s, "sink", out) : weir_stream_collect(s, "sink", c), 0);
    return j;
}

typedef struct eo_share {
    int self, lfd, ctl, ports[2];
    const char *ckpt, *out;
    int restore;
} eo_share;

static intptr_t run_eo_share(void *arg)
{
    eo_share *sh = arg;
    weir_job *j = eo_job(sh->out, NULL);
    int ctl[2] = {-1, -1};
    ctl[1 - sh->self] = sh->ctl;
    int e = run_by_subtask(j, sh->self, sh->lfd, sh->ports, ctl, 0,
                           &(weir_run_opts){.parallelism = 2,
                                            .checkpoint_dir = sh->ckpt,
                                            .checkpoint_interval_ms = 30,
                                            .restore = sh->restore},
                           NULL);
    weir_job_free(j);
    return e;
}

/* Start both processes of a run; pids in pid[]. */
static void start_pair(const char *ckpt, const char *out, int restore, pid_t pid[2])
{
    int lfd[2], ports[2], sp[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_GE(lfd[i] = weir_net_listen("127.0.0.1", 0, NULL), 0);
        ports[i] = weir_net_local_port(lfd[i]);
    }
    for (int i = 0; i < 2; i++) {
        pid[i] = fork();
        CHECK_GE(pid[i], 0);
        if (pid[i] == 0) {
            close(lfd[1 - i]);
            close(sp[1 - i]);
            eo_share sh = {i, lfd[i], sp[i], {ports[0], ports[1]}, ckpt, out, restore};
            _exit(test_run_on_rt(2, run_eo_share, &sh) ? 1 : 0);
        }
    }
    for (int i = 0; i < 2; i++) {
        close(lfd[i]);
        close(sp[i]);
    }
}

static uint64_t newest_completed(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "ls %s 2>/dev/null | sed -n 's/^COMPLETED-//p' | sort -n | tail -1",
             dir);
    FILE *f = popen(cmd, "r");
    unsigned long long id = 0;
    if (f) {
        if (fscanf(f, "%llu", &id) != 1)
            id = 0;
        pclose(f);
    }
    return id;
}

/* Wait for pid to end by itself within ms; 1 if it did (status in *st). */
static int ends_within(pid_t pid, int64_t ms, int *st)
{
    for (int64_t waited = 0; waited < ms; waited += 5) {
        pid_t r = waitpid(pid, st, WNOHANG);
        if (r == pid)
            return 1;
        usleep(5000);
    }
    return 0;
}

static char *read_parts(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "cat %s/part-* 2>/dev/null", dir);
    FILE *f = popen(cmd, "r");
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    size_t got;
    while ((got = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2)
            b = realloc(b, cap *= 2);
    }
    pclose(f);
    b[n] = '\0';
    return b;
}

static weir_collector *eo_ref;
static intptr_t run_eo_ref(void *arg)
{
    (void)arg;
    weir_job *j = eo_job(NULL, eo_ref);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.parallelism = 2}), 0);
    weir_job_free(j);
    return 0;
}

TEST(sigkill_of_either_process_and_a_restore_of_both_is_exactly_once)
{
    char dir[] = "/tmp/weir-tcp-eo-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char ckpt[96], out[96];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt", dir);
    snprintf(out, sizeof(out), "%s/out", dir);
    CHECK_EQ(mkdir(ckpt, 0755), 0);
    srand((unsigned)getpid());
    uint64_t last = 0;
    int finished = 0;
    for (int round = 0; round < 4 && !finished; round++) {
        pid_t pid[2];
        int alive[2] = {1, 1}, st[2] = {0, 0};
        start_pair(ckpt, out, round > 0, pid);
        /* A checkpoint of this round completes, then a random moment -
         * unless the restored run reaches its end first. */
        int64_t deadline = weir_time_after_ms(60000);
        uint64_t now_id;
        while ((now_id = newest_completed(ckpt)) <= last && weir_time_now() < deadline &&
               (alive[0] || alive[1])) {
            for (int i = 0; i < 2; i++)
                if (alive[i] && waitpid(pid[i], &st[i], WNOHANG) == pid[i])
                    alive[i] = 0;
            usleep(2000);
        }
        if (!alive[0] && !alive[1]) {
            for (int i = 0; i < 2; i++) {
                CHECK(WIFEXITED(st[i]));
                CHECK_EQ(WEXITSTATUS(st[i]), 0);
            }
            finished = 1;
            break;
        }
        CHECK_GT(now_id, last);
        usleep((useconds_t)(rand() % 150) * 1000);
        int victim = round % 2;
        if (alive[victim]) {
            kill(pid[victim], SIGKILL);
            CHECK_EQ(waitpid(pid[victim], &st[victim], 0), pid[victim]);
        }
        /* The other notices its lost peer and ends by itself, failed -
         * or finished, if the kill came after its last record. */
        int other = 1 - victim;
        int ended = !alive[other] || ends_within(pid[other], 30000, &st[other]);
        if (!ended)
            kill(pid[other], SIGKILL), waitpid(pid[other], &st[other], 0);
        CHECK(ended);
        CHECK(WIFEXITED(st[other]));
        last = newest_completed(ckpt);
    }
    if (!finished) {
        pid_t pid[2];
        start_pair(ckpt, out, 1, pid);
        for (int i = 0; i < 2; i++) {
            int st;
            CHECK(ends_within(pid[i], 60000, &st));
            CHECK(WIFEXITED(st));
            CHECK_EQ(WEXITSTATUS(st), 0);
        }
    }
    /* Every committed line once: the one-process run's lines exactly. */
    eo_ref = weir_collector_new();
    CHECK_EQ(test_run_on_rt(2, run_eo_ref, NULL), 0);
    CHECK_EQ(weir_collector_count(eo_ref), 2u * EO_N);
    char *ref = collected(eo_ref), *got = read_parts(out);
    char *s1 = sorted(got), *s2 = sorted(ref);
    CHECK_EQ(strlen(s1), strlen(s2));
    CHECK(strcmp(s1, s2) == 0);
    free(s1), free(s2), free(ref), free(got);
    weir_collector_free(eo_ref);
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

/* ---- idleness over TCP ------------------------------------------------------------------------
 */
/* A quiet source and a hop after it in process 1, a busy source and the
 * sink in process 0: the hop's IDLE reaches the sink as a frame, and the
 * sink's watermark follows busy (no silence timeout anywhere); once quiet
 * emits again the hop is active and its watermark counts. What the two
 * processes share lives in a shared mapping. */
typedef struct idle_shared {
    _Atomic int64_t sink_wm;   /* the sink's, while quiet is idle */
    _Atomic int64_t sink_last; /* the sink's latest before the end */
    _Atomic int quiet_resumed;
} idle_shared;
static idle_shared *ish;

typedef struct idle_src {
    int phase, i;
    int64_t give_up;
} idle_src;

static int idle_src_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    idle_src *q = calloc(1, sizeof(*q));
    q->give_up = weir_time_after_ms(20000);
    *state = q;
    return 0;
}

static int emit_at(weir_ctx *ctx, int64_t key, int64_t ts)
{
    int64_t rec[2] = {key, ts};
    return weir_emit(ctx, rec, sizeof(rec), ts);
}

/* ts 0..9, then poll (idle) until the sink's watermark passed 1050, then
 * ts 2000, then stay until the sink's watermark reached 1999. */
static int quiet_next(weir_ctx *ctx, void *state)
{
    idle_src *q = state;
    int late = weir_time_now() > q->give_up;
    if (q->phase == 0) {
        for (int i = 0; i < 10; i++)
            CHECK_EQ(emit_at(ctx, 1, i), 0);
        q->phase = 1;
        return 0;
    }
    if (q->phase == 1 && (atomic_load(&ish->sink_wm) >= 1050 || late)) {
        atomic_store(&ish->quiet_resumed, 1);
        CHECK_EQ(emit_at(ctx, 1, 2000), 0);
        q->phase = 2;
        return 0;
    }
    if (q->phase == 2 && (atomic_load(&ish->sink_last) >= 1999 || late))
        return 1;
    return weir_time_sleep(2 * WEIR_MSEC) < 0 ? -ECANCELED : 0;
}

/* ts 1000.. every 2 ms until quiet resumed. */
static int busy_next(weir_ctx *ctx, void *state)
{
    idle_src *b = state;
    if (atomic_load(&ish->quiet_resumed) || weir_time_now() > b->give_up)
        return 1;
    CHECK_EQ(emit_at(ctx, 2, 1000 + b->i++), 0);
    return weir_time_sleep(2 * WEIR_MSEC) < 0 ? -ECANCELED : 0;
}

static int idle_hop(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    return weir_emit(ctx, in->data, in->len, in->ts);
}

static int idle_key(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = in->data;
    *len = 8;
    return 0;
}

static int idle_sink(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx, (void)state, (void)in;
    return 0;
}

static int idle_sink_wm(weir_ctx *ctx, void *state, int64_t wm)
{
    (void)ctx, (void)state;
    if (wm == WEIR_WATERMARK_MAX)
        return 0;
    if (!atomic_load(&ish->quiet_resumed) && wm > atomic_load(&ish->sink_wm))
        atomic_store(&ish->sink_wm, wm);
    if (wm > atomic_load(&ish->sink_last))
        atomic_store(&ish->sink_last, wm);
    return 0;
}

static weir_job *idle_job(void)
{
    static const weir_source_def qd = {
        .open = idle_src_open, .next = quiet_next, .close = free, .idle_timeout_ms = 50};
    static const weir_source_def bd = {.open = idle_src_open, .next = busy_next, .close = free};
    static const weir_op_def sink = {.process = idle_sink, .on_watermark = idle_sink_wm};
    weir_job *j = weir_job_new("tcp-idle");
    weir_stream *q = weir_stream_key_by(weir_job_source(j, "quiet", &qd, NULL), idle_key, NULL);
    q = weir_stream_map(q, "hop", idle_hop, NULL);
    weir_stream *both[2] = {
        weir_stream_key_by(q, idle_key, NULL),
        weir_stream_key_by(weir_job_source(j, "busy", &bd, NULL), idle_key, NULL)};
    CHECK_EQ(weir_stream_sink(weir_stream_union(both, 2), "wm", &sink, NULL), 0);
    return j;
}

/* quiet and hop in process 1, the rest in 0. */
static int idle_place(void *arg, uint32_t chain, uint32_t sub)
{
    const weir__plan *p = arg;
    (void)sub;
    const char *head = p->ops[p->chains[chain].ops[0]].name;
    return strcmp(head, "quiet") == 0 || strcmp(head, "hop") == 0;
}

static intptr_t run_idle_share(void *arg)
{
    share *sh = arg;
    weir_job *j = idle_job();
    int e = run_placed(j, 1, sh->self, sh->lfd, sh->ports, NULL, 10000, idle_place, NULL, NULL);
    weir_job_free(j);
    return e;
}

TEST(idleness_crosses_processes)
{
    ish = mmap(NULL, sizeof(*ish), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(ish != MAP_FAILED);
    atomic_store(&ish->sink_wm, WEIR_WATERMARK_MIN);
    atomic_store(&ish->sink_last, WEIR_WATERMARK_MIN);
    int lfd[2], ports[2];
    for (int i = 0; i < 2; i++) {
        CHECK_GE(lfd[i] = weir_net_listen("127.0.0.1", 0, NULL), 0);
        ports[i] = weir_net_local_port(lfd[i]);
    }
    pid_t pid[2];
    for (int i = 0; i < 2; i++) {
        pid[i] = fork();
        CHECK_GE(pid[i], 0);
        if (pid[i] == 0) {
            close(lfd[1 - i]);
            share sh = {.self = i, .lfd = lfd[i], .ports = {ports[0], ports[1]}};
            _exit(test_run_on_rt(2, run_idle_share, &sh) ? 1 : 0);
        }
    }
    close(lfd[0]);
    close(lfd[1]);
    for (int i = 0; i < 2; i++) {
        int status;
        CHECK_EQ(waitpid(pid[i], &status, 0), pid[i]);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0);
    }
    CHECK_GE(atomic_load(&ish->sink_wm), 1050);   /* quiet (through hop) left the minimum */
    CHECK_GE(atomic_load(&ish->sink_last), 1999); /* and came back */
    munmap(ish, sizeof(*ish));
}

/* ---- a process lost in the final checkpoint ----------------------------------------------------
 * [src -> sink] at parallelism 2, subtask s in process s: no data channel
 * between the processes, only the checkpoint link. Process 1 dies in its
 * sink's pre-commit of the final checkpoint (after its finish()), so its
 * ACK never comes: process 0, whose subtask took the final and waits for
 * it to complete, must fail and end, not wait forever. */
static int fin_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    *state = arg; /* this process's "finish() ran" */
    return 0;
}

static int fin_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx, (void)state, (void)in;
    return 0;
}

static int fin_finish(weir_ctx *ctx, void *state)
{
    (void)ctx;
    *(int *)state = 1;
    return 0;
}

static int fin_pre_commit(weir_ctx *ctx, void *state, uint64_t id)
{
    (void)id;
    if (weir_ctx_subtask(ctx) == 1 && *(int *)state)
        _exit(7); /* a crash in the final checkpoint */
    return 0;
}

typedef struct fin_share {
    int self, lfd, ctl, ports[2];
    const char *ckpt;
} fin_share;

static intptr_t run_fin_share(void *arg)
{
    fin_share *sh = arg;
    static int finished;
    weir_job *j = weir_job_new("tcp-final");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, NULL), 2);
    CHECK_EQ(weir_stream_sink(s, "sink",
                              &(weir_op_def){.open = fin_open,
                                             .process = fin_process,
                                             .finish = fin_finish,
                                             .pre_commit = fin_pre_commit},
                              &finished),
             0);
    int ctl[2] = {-1, -1};
    ctl[1 - sh->self] = sh->ctl;
    int e = run_by_subtask(j, sh->self, sh->lfd, sh->ports, ctl, 0,
                           &(weir_run_opts){.parallelism = 2,
                                            .checkpoint_dir = sh->ckpt,
                                            .checkpoint_interval_ms = 30},
                           NULL);
    weir_job_free(j);
    return e;
}

TEST(a_process_lost_in_the_final_checkpoint_fails_the_other_instead_of_hanging)
{
    char dir[] = "/tmp/weir-tcp-fin-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    per_sub = 2000;
    int lfd[2], ports[2], sp[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_GE(lfd[i] = weir_net_listen("127.0.0.1", 0, NULL), 0);
        ports[i] = weir_net_local_port(lfd[i]);
    }
    pid_t pid[2];
    for (int i = 0; i < 2; i++) {
        pid[i] = fork();
        CHECK_GE(pid[i], 0);
        if (pid[i] == 0) {
            close(lfd[1 - i]);
            close(sp[1 - i]);
            fin_share sh = {i, lfd[i], sp[i], {ports[0], ports[1]}, dir};
            _exit(test_run_on_rt(2, run_fin_share, &sh) ? 1 : 0);
        }
    }
    for (int i = 0; i < 2; i++) {
        close(lfd[i]);
        close(sp[i]);
    }
    int st[2];
    CHECK(ends_within(pid[1], 60000, &st[1]));
    CHECK(WIFEXITED(st[1]));
    CHECK_EQ(WEXITSTATUS(st[1]), 7); /* it died in the final's pre-commit */
    int ended = ends_within(pid[0], 30000, &st[0]);
    if (!ended)
        kill(pid[0], SIGKILL), waitpid(pid[0], &st[0], 0);
    CHECK(ended);
    CHECK(WIFEXITED(st[0]));
    CHECK_EQ(WEXITSTATUS(st[0]), 1); /* failed: the final checkpoint never completed */
    per_sub = N;
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

/* A worker process whose coordinator's process is gone before its run
 * starts (the control socket's other end closed): its subtask at the end
 * of its input must fail, not wait for a final checkpoint nobody runs. The
 * link's reader meets the end at once, while the run is still being set
 * up. */
TEST(a_worker_process_without_its_coordinator_fails_instead_of_hanging)
{
    char dir[] = "/tmp/weir-tcp-fin-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    per_sub = 2000;
    int lfd[2], ports[2], sp[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    close(sp[0]); /* process 0 never comes */
    for (int i = 0; i < 2; i++) {
        CHECK_GE(lfd[i] = weir_net_listen("127.0.0.1", 0, NULL), 0);
        ports[i] = weir_net_local_port(lfd[i]);
    }
    pid_t pid = fork();
    CHECK_GE(pid, 0);
    if (pid == 0) {
        close(lfd[0]);
        fin_share sh = {1, lfd[1], sp[1], {ports[0], ports[1]}, dir};
        _exit(test_run_on_rt(2, run_fin_share, &sh) ? 1 : 0);
    }
    close(lfd[0]);
    close(lfd[1]);
    close(sp[1]);
    int st;
    int ended = ends_within(pid, 30000, &st);
    if (!ended)
        kill(pid, SIGKILL), waitpid(pid, &st, 0);
    CHECK(ended);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 1);
    per_sub = N;
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK_EQ(system(cmd), 0);
}

/* ---- frames held for the next write ------------------------------------------------------------
 */
/* A sending end holds the frames of its producer's step and writes them
 * together (channel.h, push): they must be out before the producer waits
 * for a credit of any of its channels. One source subtask (process 0)
 * emits, in one call of next(), a full batch and a record more to gate 1
 * (process 1, over TCP) and then ten batches' worth to gate 0 (process
 * 0, a local channel of the plan's 4 credits). Gate 0 does not take its
 * first record before gate 1 has seen one: the source runs out of gate 0's
 * credits with gate 1's batch still held, and only the push before that
 * wait lets either gate go on (without it: gate 0 gives up after 10 s). */
typedef struct hold_shared {
    _Atomic int seen1;    /* gate 1 took a record */
    _Atomic int gave_up;  /* gate 0 waited 10 s for it */
    _Atomic int64_t n[2]; /* records each gate took */
} hold_shared;
static hold_shared *hsh;
static int64_t hold_key[2]; /* a key each gate owns */

static int hold_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx, (void)arg;
    *state = NULL;
    return 0;
}

static int hold_next(weir_ctx *ctx, void *state)
{
    (void)state;
    for (int i = 0; i <= WEIR_BATCH_RECORDS; i++)
        CHECK_EQ(emit_at(ctx, hold_key[1], i), 0);
    for (int i = 0; i < 10 * WEIR_BATCH_RECORDS; i++) {
        int e = emit_at(ctx, hold_key[0], i);
        if (e)
            return e;
    }
    return 1;
}

static int hold_gate(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state, (void)in;
    int g = weir_ctx_subtask(ctx);
    if (g == 1)
        atomic_store(&hsh->seen1, 1);
    else if (atomic_load(&hsh->n[0]) == 0) {
        int64_t give_up = weir_time_after_ms(10000);
        while (!atomic_load(&hsh->seen1)) {
            if (weir_time_now() > give_up) {
                atomic_store(&hsh->gave_up, 1);
                return -ETIMEDOUT;
            }
            if (weir_time_sleep(WEIR_MSEC) < 0)
                return -ECANCELED;
        }
    }
    atomic_fetch_add(&hsh->n[g], 1);
    return 0;
}

static weir_job *hold_job(void)
{
    static const weir_source_def src = {.open = hold_open, .next = hold_next};
    static const weir_op_def gate = {.process = hold_gate};
    weir_job *j = weir_job_new("tcp-hold");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &src, NULL), 1);
    CHECK_EQ(weir_stream_sink(weir_stream_key_by(s, idle_key, NULL), "gate", &gate, NULL), 0);
    return j;
}

/* src in process 0, gate s in process s. */
static int hold_place(void *arg, uint32_t chain, uint32_t sub)
{
    const weir__plan *p = arg;
    return strcmp(p->ops[p->chains[chain].ops[0]].name, "src") == 0 ? 0 : (int)sub;
}

static intptr_t run_hold_share(void *arg)
{
    share *sh = arg;
    weir_job *j = hold_job();
    int e = run_placed(j, 2, sh->self, sh->lfd, sh->ports, NULL, 10000, hold_place,
                       &(weir_run_opts){.parallelism = 2}, NULL);
    weir_job_free(j);
    return e;
}

TEST(held_frames_go_out_before_their_producer_waits_for_a_credit)
{
    hsh = mmap(NULL, sizeof(*hsh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(hsh != MAP_FAILED);
    memset(hsh, 0, sizeof(*hsh));
    for (int64_t k = 1, found = 0; found != 3; k++) {
        int g = weir_key_group_owner(weir_key_group(weir_key_hash(&k, 8), WEIR_KEY_GROUPS), 2,
                                     WEIR_KEY_GROUPS);
        if (!(found & (1 << g))) {
            hold_key[g] = k;
            found |= 1 << g;
        }
    }
    int lfd[2], ports[2];
    for (int i = 0; i < 2; i++) {
        CHECK_GE(lfd[i] = weir_net_listen("127.0.0.1", 0, NULL), 0);
        ports[i] = weir_net_local_port(lfd[i]);
    }
    pid_t pid[2];
    for (int i = 0; i < 2; i++) {
        pid[i] = fork();
        CHECK_GE(pid[i], 0);
        if (pid[i] == 0) {
            close(lfd[1 - i]);
            share sh = {.self = i, .lfd = lfd[i], .ports = {ports[0], ports[1]}};
            _exit(test_run_on_rt(2, run_hold_share, &sh) ? 1 : 0);
        }
    }
    close(lfd[0]);
    close(lfd[1]);
    for (int i = 0; i < 2; i++) {
        int status;
        CHECK_EQ(waitpid(pid[i], &status, 0), pid[i]);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0);
    }
    CHECK_EQ(atomic_load(&hsh->gave_up), 0);
    CHECK_EQ(atomic_load(&hsh->n[1]), WEIR_BATCH_RECORDS + 1);
    CHECK_EQ(atomic_load(&hsh->n[0]), 10 * WEIR_BATCH_RECORDS);
    munmap(hsh, sizeof(*hsh));
}

TEST_MAIN()
