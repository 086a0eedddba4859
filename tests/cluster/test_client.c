/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_client.c - the cluster client (cluster/client.h) against a scripted
 * fake coordinator, a fiber on a loopback listener: the happy path (hello,
 * SubmitJob by reference, NEED_PLUGINS, an upload whose bytes hash to the
 * name, ACCEPTED, JobCompleted); a cache hit (ACCEPTED at once, nothing
 * uploaded); version refusals both ways, the coordinator's message kept; a
 * refused hello; a refused submit naming the coordinator's ABI; a
 * NEED_PLUGINS for a hash never named; the connection closing mid-wait;
 * malformed frames, unknown kinds, kinds that do not travel to a client,
 * the wrong kind, an oversized frame header, each breaking the connection
 * for later calls; list and cancel round trips (and answers for another
 * job); HOST:PORT parsing; preparing a job (plugin errors, checkpoint
 * directories made absolute, argument limits, every allocation failure).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/be.h"
#include "base/sha256.h"
#include "cluster/client.h"
#include "cluster/plugins.h"
#include "test.h"
#include "test_rt.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/rt.h"

#ifndef WEIR_TEST_PLUGIN_DIR
#error "WEIR_TEST_PLUGIN_DIR must name the directory of the built test plugins"
#endif

#define DEADLINE() weir_time_after_ms(20000)

static const char *plugin_path(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof(path), "%s/%s.so", WEIR_TEST_PLUGIN_DIR, name);
    return path;
}

/* ---- the fake coordinator ------------------------------------------------------------- */

typedef struct fake fake;
typedef void (*script_fn)(fake *f);
struct fake {
    int lfd, fd;
    char addr[64];
    weir_frame_parser p;
    script_fn script;
    weir_task *task;
    int done;
    /* what the scripts check against */
    weir__cl_plugin_ref ref; /* job_count's */
    uint64_t job;
    int flag; /* set by the client side when a script waits for it */
};

static intptr_t fake_main(void *arg)
{
    fake *f = arg;
    f->fd = weir_net_accept(f->lfd, NULL, DEADLINE());
    CHECK_GE(f->fd, 0);
    CHECK_EQ(weir_frame_parser_init(&f->p, NULL), 0);
    f->script(f);
    weir_frame_parser_close(&f->p);
    weir_io_close(f->fd);
    f->done = 1;
    return 0;
}

static void fake_start(fake *f, script_fn script)
{
    memset(f, 0, sizeof(*f));
    f->lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(f->lfd, 0);
    snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%d", weir_net_local_port(f->lfd));
    f->script = script;
    f->job = 42;
    char msg[512];
    CHECK_EQ(
        weir__plugin_ref_from_file(plugin_path("job_count"), &f->ref, NULL, NULL, msg, sizeof(msg)),
        0);
    f->task = test_spawn(fake_main, f);
}

static void fake_finish(fake *f)
{
    CHECK_EQ(weir_task_join(f->task, NULL, DEADLINE()), 0);
    CHECK(f->done);
    weir_io_close(f->lfd);
    weir__plugin_ref_clear(&f->ref);
}

/* The next frame, of kind want, decoded into *m; *fr keeps the payload
 * (byte strings are views into it): fake_drop both. */
static void fake_recv(fake *f, int want, weir_frame *fr, weir__cl_msg *m)
{
    CHECK_GT(weir_frame_read(f->fd, &f->p, fr, DEADLINE()), 0);
    CHECK_EQ(weir_frame_kind(fr), want);
    char why[256];
    CHECK_EQ(weir__cl_decode(fr->data, fr->len, m, why, sizeof(why)), 0);
}

static void fake_drop(weir_frame *fr, weir__cl_msg *m)
{
    weir__cl_msg_free(m);
    weir_frame_free(fr);
}

static void fake_expect(fake *f, int want)
{
    weir_frame fr;
    weir__cl_msg m;
    fake_recv(f, want, &fr, &m);
    fake_drop(&fr, &m);
}

/* The client closed its side and sent nothing more (a reset when it
 * closed with bytes of ours unread, after an error). */
static void fake_expect_eof(fake *f)
{
    weir_frame fr = {0};
    ssize_t n = weir_frame_read(f->fd, &f->p, &fr, DEADLINE());
    CHECK(n == 0 || n == -ECONNRESET);
}

static void fake_send(fake *f, const weir__cl_msg *m)
{
    weir_frame_builder fb;
    char why[256];
    CHECK_EQ(weir__cl_encode(m, &fb, why, sizeof(why)), 0);
    const uint8_t *p;
    size_t len;
    CHECK_EQ(weir_frame_builder_finish(&fb, &p, &len), 0);
    CHECK_EQ(weir_frame_write(f->fd, p, len, DEADLINE()), 0);
    weir_frame_builder_close(&fb);
}

/* Bytes as they are: frames a coordinator must never send. */
static void fake_send_raw(fake *f, const void *p, size_t len)
{
    CHECK_EQ(weir_io_send(f->fd, p, len, MSG_NOSIGNAL, DEADLINE()), (ssize_t)len);
}

static void fake_hello_ack(fake *f, uint32_t version, uint32_t min, int status, const char *why)
{
    weir__cl_msg a = {.kind = WEIR_CLUSTER_HELLO_CLIENT_ACK,
                      .u.hello_ack = {version, min, (uint8_t)status, (char *)why}};
    fake_send(f, &a);
}

/* Hello in, accepted. */
static void fake_hello(fake *f)
{
    weir_frame fr;
    weir__cl_msg m;
    fake_recv(f, WEIR_CLUSTER_HELLO_CLIENT, &fr, &m);
    CHECK_EQ(m.u.hello.version, WEIR_CLUSTER_PROTO_VERSION);
    CHECK_EQ(m.u.hello.min_compat, WEIR_CLUSTER_PROTO_MIN_COMPAT);
    CHECK_STR(m.u.hello.name, "test client");
    fake_drop(&fr, &m);
    fake_hello_ack(f, WEIR_CLUSTER_PROTO_VERSION, WEIR_CLUSTER_PROTO_MIN_COMPAT, WEIR__CL_ACCEPTED,
                   "");
}

static void fake_submit_ack(fake *f, int status, uint64_t job, const char *why,
                            const uint8_t *missing)
{
    weir__cl_hash h;
    weir__cl_msg a = {
        .kind = WEIR_CLUSTER_SUBMIT_JOB_ACK,
        .u.submit_ack = {.status = (uint8_t)status, .job = job, .message = (char *)why}};
    if (missing) {
        memcpy(h.b, missing, sizeof(h.b));
        a.u.submit_ack.missing.v = &h;
        a.u.submit_ack.missing.n = 1;
    }
    fake_send(f, &a);
}

/* SubmitJob in, checked to name job_count by reference only. */
static void fake_expect_submit(fake *f, weir__cl_submit_job *copy)
{
    weir_frame fr;
    weir__cl_msg m;
    fake_recv(f, WEIR_CLUSTER_SUBMIT_JOB, &fr, &m);
    weir__cl_submit_job *s = &m.u.submit;
    CHECK_EQ(s->plugins.n, 1);
    CHECK(memcmp(s->plugins.v[0].sha256, f->ref.sha256, 32) == 0);
    CHECK_EQ(s->plugins.v[0].size, f->ref.size);
    CHECK_STR(s->plugins.v[0].abi.fingerprint, f->ref.abi.fingerprint);
    CHECK_STR(s->plugins.v[0].abi.target, f->ref.abi.target);
    if (copy) { /* the scalars only: the strings die with m */
        *copy = *s;
        copy->args = (weir__cl_strs){0};
        copy->plugins.v = NULL;
        copy->checkpoint_dir = NULL;
    }
    fake_drop(&fr, &m);
}

static void open_ok(fake *f, weir__client **c)
{
    char msg[1024];
    int e = weir__client_open(f->addr, "test client", NULL, DEADLINE(), c, msg, sizeof(msg));
    if (e)
        TEST__FAIL("open: %d %s", e, msg);
}

static weir__client_submit_opts job_count_opts(void)
{
    return (weir__client_submit_opts){.plugin = plugin_path("job_count"), .max_restarts = -1};
}

/* ---- the happy path ------------------------------------------------------------------- */

static void happy_script(fake *f)
{
    fake_hello(f);
    weir_frame fr;
    weir__cl_msg m;
    fake_recv(f, WEIR_CLUSTER_SUBMIT_JOB, &fr, &m);
    weir__cl_submit_job *s = &m.u.submit;
    CHECK_EQ(s->parallelism, 3);
    CHECK_EQ(s->checkpoint_interval_ms, 250);
    CHECK_EQ(s->max_restarts, 2);
    CHECK_EQ(s->args.n, 2);
    CHECK_STR(s->args.v[0], "1000");
    CHECK_STR(s->args.v[1], "--weird");
    CHECK_EQ(s->checkpoint_dir[0], '/'); /* made absolute */
    CHECK_HAS(s->checkpoint_dir, "/weir-client-ckpt");
    CHECK_EQ(s->plugins.n, 1);
    CHECK(memcmp(s->plugins.v[0].sha256, f->ref.sha256, 32) == 0);
    CHECK_EQ(s->plugins.v[0].size, f->ref.size);
    CHECK_EQ(s->plugins.v[0].abi.version, f->ref.abi.version);
    fake_drop(&fr, &m);

    fake_submit_ack(f, WEIR__CL_SUBMIT_NEED_PLUGINS, 0, "", f->ref.sha256);
    fake_recv(f, WEIR_CLUSTER_PLUGIN_UPLOAD, &fr, &m);
    CHECK(memcmp(m.u.upload.sha256, f->ref.sha256, 32) == 0);
    CHECK_EQ(m.u.upload.bytes.n, f->ref.size);
    uint8_t h[32];
    CHECK_EQ(weir__sha256(m.u.upload.bytes.p, m.u.upload.bytes.n, h), 0);
    CHECK(memcmp(h, f->ref.sha256, 32) == 0); /* the bytes are the plugin's */
    fake_drop(&fr, &m);
    fake_submit_ack(f, WEIR__CL_SUBMIT_ACCEPTED, f->job, "", NULL);

    weir__cl_msg done = {.kind = WEIR_CLUSTER_JOB_COMPLETED,
                         .u.completed = {.job = f->job,
                                         .message = "",
                                         .elapsed_ms = 1500,
                                         .records_in = 1000,
                                         .records_out = 999,
                                         .sources = 1,
                                         .sinks = 2,
                                         .watermark = 77,
                                         .ckpt_completed = 4,
                                         .ckpt_latest = 9,
                                         .ckpt_restored = 5,
                                         .restarts = 1}};
    fake_send(f, &done);
    fake_expect_eof(f);
}

static intptr_t happy_main(void *arg)
{
    (void)arg;
    fake f;
    fake_start(&f, happy_script);
    weir__client *c;
    open_ok(&f, &c);
    CHECK_STR(weir__client_peer(c), f.addr);
    char dir[64];
    snprintf(dir, sizeof(dir), "weir-client-ckpt-%d", (int)getpid()); /* relative, not there */
    char *args[] = {"1000", "--weird"};
    weir__client_submit_opts o = job_count_opts();
    o.parallelism = 3;
    o.checkpoint_dir = dir;
    o.checkpoint_interval_ms = 250;
    o.max_restarts = 2;
    o.argc = 2;
    o.argv = args;
    uint64_t job = 0;
    char msg[1024];
    int e = weir__client_submit(c, &o, DEADLINE(), &job, msg, sizeof(msg));
    if (e)
        TEST__FAIL("submit: %d %s", e, msg);
    CHECK_EQ(job, 42);
    weir__cl_job_completed d;
    CHECK_EQ(weir__client_wait(c, job, &d, DEADLINE(), msg, sizeof(msg)), 0);
    CHECK_EQ(d.job, 42);
    CHECK_EQ(d.err, 0);
    CHECK_EQ(d.elapsed_ms, 1500);
    CHECK_EQ(d.records_in, 1000);
    CHECK_EQ(d.records_out, 999);
    CHECK_EQ(d.sources, 1);
    CHECK_EQ(d.sinks, 2);
    CHECK_EQ(d.watermark, 77);
    CHECK_EQ(d.ckpt_completed, 4);
    CHECK_EQ(d.ckpt_latest, 9);
    CHECK_EQ(d.ckpt_restored, 5);
    CHECK_EQ(d.restarts, 1);
    weir__client_completed_free(&d);
    CHECK_EQ(d.message, NULL);
    weir__client_close(c);
    fake_finish(&f);
    return 0;
}

TEST(happy_path_uploads_what_is_asked_and_waits)
{
    CHECK_EQ(test_run_main(happy_main, NULL), 0);
}

/* ---- a cache hit: no upload ----------------------------------------------------------- */

static void cache_hit_script(fake *f)
{
    fake_hello(f);
    weir__cl_submit_job s;
    fake_expect_submit(f, &s);
    CHECK_EQ(s.parallelism, 0);
    CHECK_EQ(s.max_restarts, -1);
    fake_submit_ack(f, WEIR__CL_SUBMIT_ACCEPTED, 7, "", NULL);
    /* The next frame is the list, not an upload. */
    fake_expect(f, WEIR_CLUSTER_LIST_JOBS);
    weir__cl_msg l = {.kind = WEIR_CLUSTER_JOB_LIST};
    fake_send(f, &l);
    fake_expect_eof(f);
}

static intptr_t cache_hit_main(void *arg)
{
    (void)arg;
    fake f;
    fake_start(&f, cache_hit_script);
    weir__client *c;
    open_ok(&f, &c);
    weir__client_submit_opts o = job_count_opts();
    uint64_t job = 0;
    char msg[1024];
    CHECK_EQ(weir__client_submit(c, &o, DEADLINE(), &job, msg, sizeof(msg)), 0);
    CHECK_EQ(job, 7);
    weir__cl_job_list l;
    CHECK_EQ(weir__client_list(c, &l, DEADLINE(), msg, sizeof(msg)), 0);
    CHECK_EQ(l.jobs.n, 0);
    weir__client_list_free(&l);
    weir__client_close(c);
    fake_finish(&f);
    return 0;
}

TEST(cache_hit_is_accepted_without_an_upload)
{
    CHECK_EQ(test_run_main(cache_hit_main, NULL), 0);
}

/* ---- handshake refusals --------------------------------------------------------------- */

static int hello_case;

static void hello_script(fake *f)
{
    fake_expect(f, WEIR_CLUSTER_HELLO_CLIENT);
    switch (hello_case) {
    case 0: /* a newer coordinator that refuses, saying why */
        fake_hello_ack(f, 7, 5, WEIR__CL_REFUSED,
                       "protocol mismatch: the client speaks version 2, this coordinator speaks 7 "
                       "and talks to 5 at the oldest: upgrade the client");
        break;
    case 1: /* one that accepts anyway: the client's own check refuses */
        fake_hello_ack(f, 7, 5, WEIR__CL_ACCEPTED, "");
        break;
    case 2: /* compatible, but refused */
        fake_hello_ack(f, WEIR_CLUSTER_PROTO_VERSION, 1, WEIR__CL_REFUSED, "too many clients");
        break;
    case 3: { /* versions only, the rest cut short */
        uint8_t b[4 + 9] = {0,
                            0,
                            0,
                            9,
                            WEIR_CLUSTER_HELLO_CLIENT_ACK,
                            0,
                            0,
                            0,
                            WEIR_CLUSTER_PROTO_VERSION,
                            0,
                            0,
                            0,
                            WEIR_CLUSTER_PROTO_MIN_COMPAT};
        fake_send_raw(f, b, sizeof(b));
        break;
    }
    case 4: { /* not even the versions */
        uint8_t b[4 + 3] = {0, 0, 0, 3, WEIR_CLUSTER_HELLO_CLIENT_ACK, 0, 0};
        fake_send_raw(f, b, sizeof(b));
        break;
    }
    case 5: /* no answer at all: the connection closes */
        return;
    case 6: /* another kind */
        fake_submit_ack(f, WEIR__CL_SUBMIT_ACCEPTED, 1, "", NULL);
        break;
    }
    fake_expect_eof(f);
}

static intptr_t hello_main(void *arg)
{
    (void)arg;
    static const struct {
        int err;
        const char *has[2];
    } want[] = {
        {-EPROTONOSUPPORT, {"refused the connection: protocol mismatch", "upgrade the client"}},
        {-EPROTONOSUPPORT, {"speaks 7 and talks to 5", "upgrade this client"}},
        {-EACCES, {"refused the connection: too many clients", "coordinator 127.0.0.1:"}},
        {-EBADMSG, {"malformed HelloClientAck", "HelloClientAck"}},
        {-EBADMSG, {"malformed HelloClientAck: cut short before its versions", ""}},
        {-ECONNRESET, {"the connection closed while this client waited for HelloClientAck", ""}},
        {-EBADMSG, {"sent SubmitJobAck while this client waited for HelloClientAck", ""}},
    };
    for (hello_case = 0; hello_case < (int)(sizeof(want) / sizeof(want[0])); hello_case++) {
        fake f;
        fake_start(&f, hello_script);
        weir__client *c = (weir__client *)&f;
        char msg[1024];
        int e = weir__client_open(f.addr, "test client", NULL, DEADLINE(), &c, msg, sizeof(msg));
        if (e != want[hello_case].err)
            TEST__FAIL("case %d: %d (%s), want %d", hello_case, e, msg, want[hello_case].err);
        CHECK(c == NULL);
        CHECK_HAS(msg, want[hello_case].has[0]);
        CHECK_HAS(msg, want[hello_case].has[1]);
        fake_finish(&f);
    }
    return 0;
}

TEST(handshake_refusals_name_versions_and_keep_the_coordinators_message)
{
    CHECK_EQ(test_run_main(hello_main, NULL), 0);
}

/* ---- a refused submit ----------------------------------------------------------------- */

static void refused_script(fake *f)
{
    fake_hello(f);
    fake_expect_submit(f, NULL);
    weir__cl_msg a = {
        .kind = WEIR_CLUSTER_SUBMIT_JOB_ACK,
        .u.submit_ack = {.status = WEIR__CL_SUBMIT_REFUSED,
                         .message =
                             "plugin 3f2a: refused before any bytes shipped: ABI fingerprint "
                             "differs: plugin aaaa, weir ffff",
                         .abi = {1, "ffff", "linux-x86_64", "gcc-99"}}};
    fake_send(f, &a);
    /* The connection is still good: a list goes through. */
    fake_expect(f, WEIR_CLUSTER_LIST_JOBS);
    weir__cl_msg l = {.kind = WEIR_CLUSTER_JOB_LIST};
    fake_send(f, &l);
    fake_expect_eof(f);
}

static intptr_t refused_main(void *arg)
{
    (void)arg;
    fake f;
    fake_start(&f, refused_script);
    weir__client *c;
    open_ok(&f, &c);
    weir__client_submit_opts o = job_count_opts();
    uint64_t job = 99;
    char msg[1024];
    CHECK_EQ(weir__client_submit(c, &o, DEADLINE(), &job, msg, sizeof(msg)), -EACCES);
    CHECK_EQ(job, 0);
    CHECK_HAS(msg, "refused the job: plugin 3f2a: refused before any bytes shipped: ABI "
                   "fingerprint differs: plugin aaaa, weir ffff");
    CHECK_HAS(msg, "the coordinator's weir: ABI version 1, fingerprint ffff, target "
                   "linux-x86_64, toolchain gcc-99");
    weir__cl_job_list l;
    CHECK_EQ(weir__client_list(c, &l, DEADLINE(), msg, sizeof(msg)), 0);
    weir__client_list_free(&l);
    weir__client_close(c);
    fake_finish(&f);
    return 0;
}

TEST(refused_submit_carries_the_message_and_the_coordinators_abi)
{
    CHECK_EQ(test_run_main(refused_main, NULL), 0);
}

/* ---- protocol violations -------------------------------------------------------------- */

static int bad_case;

static void bad_script(fake *f)
{
    fake_hello(f);
    fake_expect_submit(f, NULL);
    switch (bad_case) {
    case 0: { /* NEED_PLUGINS for a hash never named */
        uint8_t h[32];
        CHECK_EQ(weir__sha256("another plugin", 14, h), 0);
        fake_submit_ack(f, WEIR__CL_SUBMIT_NEED_PLUGINS, 0, "", h);
        break;
    }
    case 1: /* NEED_PLUGINS twice */
        fake_submit_ack(f, WEIR__CL_SUBMIT_NEED_PLUGINS, 0, "", f->ref.sha256);
        fake_expect(f, WEIR_CLUSTER_PLUGIN_UPLOAD);
        fake_submit_ack(f, WEIR__CL_SUBMIT_NEED_PLUGINS, 0, "", f->ref.sha256);
        break;
    case 2: { /* a SubmitJobAck cut short */
        uint8_t b[4 + 2] = {0, 0, 0, 2, WEIR_CLUSTER_SUBMIT_JOB_ACK, 0};
        fake_send_raw(f, b, sizeof(b));
        break;
    }
    case 3: { /* an unknown kind */
        uint8_t b[4 + 2] = {0, 0, 0, 2, 0x7f, 0};
        fake_send_raw(f, b, sizeof(b));
        break;
    }
    case 4: { /* a kind for workers */
        weir__cl_msg m = {.kind = WEIR_CLUSTER_HEARTBEAT_ACK, .epoch = 1, .u.heartbeat_ack = {5}};
        fake_send(f, &m);
        break;
    }
    case 5: { /* the wrong client kind */
        weir__cl_msg m = {.kind = WEIR_CLUSTER_JOB_LIST};
        fake_send(f, &m);
        break;
    }
    case 6: { /* a header past 256 MiB */
        uint8_t b[4 + 1];
        weir__put_be32(b, WEIR_CLUSTER_FRAME_MAX + 1);
        b[4] = WEIR_CLUSTER_SUBMIT_JOB_ACK;
        fake_send_raw(f, b, sizeof(b));
        break;
    }
    case 7: { /* a frame that ends before its length says */
        uint8_t b[4 + 3] = {0, 0, 0, 50, WEIR_CLUSTER_SUBMIT_JOB_ACK, 0, 0};
        fake_send_raw(f, b, sizeof(b));
        shutdown(f->fd, SHUT_WR);
        break;
    }
    case 8: /* a zero-length frame */
    {
        uint8_t b[4] = {0, 0, 0, 0};
        fake_send_raw(f, b, sizeof(b));
        break;
    }
    }
    fake_expect_eof(f);
}

static intptr_t bad_main(void *arg)
{
    (void)arg;
    static const struct {
        int err;
        const char *has;
    } want[] = {
        {-EBADMSG, "which this client's SubmitJob did not name"},
        {-EBADMSG, "asked for plugins again after they were uploaded"},
        {-EBADMSG, "malformed SubmitJobAck: "},
        {-EBADMSG, "sent an unknown message kind 0x7f while this client waited for SubmitJobAck"},
        {-EBADMSG, "sent HeartbeatAck, which no coordinator sends a client"},
        {-EBADMSG, "sent JobList while this client waited for SubmitJobAck"},
        {-EMSGSIZE, "a frame header past the limit of 268435456 bytes"},
        {-ECONNRESET, "in the middle of a frame"},
        {-EBADMSG, "waiting for SubmitJobAck: "},
    };
    for (bad_case = 0; bad_case < (int)(sizeof(want) / sizeof(want[0])); bad_case++) {
        fake f;
        fake_start(&f, bad_script);
        weir__client *c;
        open_ok(&f, &c);
        weir__client_submit_opts o = job_count_opts();
        uint64_t job = 0;
        char msg[1024];
        int e = weir__client_submit(c, &o, DEADLINE(), &job, msg, sizeof(msg));
        if (e != want[bad_case].err || !strstr(msg, want[bad_case].has))
            TEST__FAIL("case %d: %d (%s), want %d (%s)", bad_case, e, msg, want[bad_case].err,
                       want[bad_case].has);
        CHECK_HAS(msg, f.addr);
        /* The connection is broken for good. */
        weir__cl_job_list l;
        CHECK_EQ(weir__client_list(c, &l, DEADLINE(), msg, sizeof(msg)), -EPIPE);
        CHECK_HAS(msg, "the connection broke on an earlier error");
        weir__client_close(c);
        fake_finish(&f);
    }
    return 0;
}

TEST(protocol_violations_are_errors_that_break_the_connection)
{
    CHECK_EQ(test_run_main(bad_main, NULL), 0);
}

/* ---- waiting -------------------------------------------------------------------------- */

static int wait_case;

static void wait_script(fake *f)
{
    fake_hello(f);
    fake_expect_submit(f, NULL);
    fake_submit_ack(f, WEIR__CL_SUBMIT_ACCEPTED, 9, "", NULL);
    weir__cl_msg d = {.kind = WEIR_CLUSTER_JOB_COMPLETED,
                      .u.completed = {.job = 9,
                                      .err = -ECANCELED,
                                      .message = "cancelled by a "
                                                 "client"}};
    switch (wait_case) {
    case 0: /* closes mid-wait */
        return;
    case 1: /* the end of another job */
        d.u.completed.job = 10;
        fake_send(f, &d);
        break;
    case 2: /* cancelled */
        fake_send(f, &d);
        break;
    }
    fake_expect_eof(f);
}

static intptr_t wait_main(void *arg)
{
    (void)arg;
    for (wait_case = 0; wait_case < 3; wait_case++) {
        fake f;
        fake_start(&f, wait_script);
        weir__client *c;
        open_ok(&f, &c);
        weir__client_submit_opts o = job_count_opts();
        uint64_t job = 0;
        char msg[1024];
        CHECK_EQ(weir__client_submit(c, &o, DEADLINE(), &job, msg, sizeof(msg)), 0);
        CHECK_EQ(job, 9);
        weir__cl_job_completed d;
        int e = weir__client_wait(c, job, &d, WEIR_FOREVER, msg, sizeof(msg));
        if (wait_case == 0) {
            CHECK_EQ(e, -ECONNRESET);
            CHECK_HAS(msg, "the connection closed while this client waited for the JobCompleted "
                           "of job 9");
        } else if (wait_case == 1) {
            CHECK_EQ(e, -EBADMSG);
            CHECK_HAS(msg, "sent the JobCompleted of job 10 while this client waited for that of "
                           "job 9");
        } else {
            CHECK_EQ(e, 0);
            CHECK_EQ(d.err, -ECANCELED);
            CHECK_STR(d.message, "cancelled by a client");
            weir__client_completed_free(&d);
        }
        weir__client_close(c);
        fake_finish(&f);
    }
    return 0;
}

TEST(wait_reports_the_end_or_the_lost_connection)
{
    CHECK_EQ(test_run_main(wait_main, NULL), 0);
}

static void wait_timeout_script(fake *f)
{
    fake_hello(f);
    /* Until the client's first wait has timed out (polled). */
    int64_t deadline = DEADLINE();
    while (!f->flag) {
        CHECK_LT(weir_time_now(), deadline);
        CHECK_EQ(weir_time_sleep(WEIR_MSEC), 0);
    }
    weir__cl_msg d = {.kind = WEIR_CLUSTER_JOB_COMPLETED,
                      .u.completed = {.job = 3, .message = "", .records_in = 5}};
    fake_send(f, &d);
    fake_expect_eof(f);
}

static intptr_t wait_timeout_main(void *arg)
{
    (void)arg;
    fake f;
    fake_start(&f, wait_timeout_script);
    weir__client *c;
    open_ok(&f, &c);
    weir__cl_job_completed d;
    char msg[1024];
    CHECK_EQ(weir__client_wait(c, 3, &d, weir_time_after_ms(50), msg, sizeof(msg)), -ETIMEDOUT);
    CHECK_HAS(msg, "waiting for the JobCompleted of job 3: ");
    f.flag = 1;
    /* The connection is whole: waiting again gets the end. */
    CHECK_EQ(weir__client_wait(c, 3, &d, DEADLINE(), msg, sizeof(msg)), 0);
    CHECK_EQ(d.records_in, 5);
    weir__client_completed_free(&d);
    weir__client_close(c);
    fake_finish(&f);
    return 0;
}

TEST(wait_honours_its_deadline_and_can_go_on)
{
    CHECK_EQ(test_run_main(wait_timeout_main, NULL), 0);
}

/* ---- list and cancel ------------------------------------------------------------------ */

static void list_cancel_script(fake *f)
{
    fake_hello(f);
    fake_expect(f, WEIR_CLUSTER_LIST_JOBS);
    weir__cl_job_info jobs[2] = {
        {.id = 1,
         .name = "count",
         .state = WEIR__CL_JOB_FAILED,
         .parallelism = 2,
         .submitted_ms = 1700000000000,
         .ended_ms = 1700000005000,
         .message = "boom"},
        {.id = 2,
         .name = "wordcount",
         .state = WEIR__CL_JOB_RUNNING,
         .parallelism = 4,
         .submitted_ms = 1700000010000,
         .message = ""},
    };
    weir__cl_msg l = {.kind = WEIR_CLUSTER_JOB_LIST, .u.job_list.jobs = {jobs, 2}};
    fake_send(f, &l);
    static const struct {
        uint64_t answer;
        int status;
    } acks[] = {{2, WEIR__CL_CANCEL_OK},
                {5, WEIR__CL_CANCEL_UNKNOWN},
                {1, WEIR__CL_CANCEL_ENDED},
                {4, WEIR__CL_CANCEL_OK}};
    for (size_t i = 0; i < sizeof(acks) / sizeof(acks[0]); i++) {
        weir_frame fr;
        weir__cl_msg m;
        fake_recv(f, WEIR_CLUSTER_CANCEL_JOB, &fr, &m);
        CHECK_EQ(m.u.cancel_job.job, i == 3 ? 3 : acks[i].answer);
        fake_drop(&fr, &m);
        weir__cl_msg a = {
            .kind = WEIR_CLUSTER_CANCEL_JOB_ACK,
            .u.cancel_job_ack = {acks[i].answer, (uint8_t)acks[i].status,
                                 acks[i].status == WEIR__CL_CANCEL_UNKNOWN ? "no job 5" : ""}};
        fake_send(f, &a);
    }
    fake_expect_eof(f);
}

static intptr_t list_cancel_main(void *arg)
{
    (void)arg;
    fake f;
    fake_start(&f, list_cancel_script);
    weir__client *c;
    open_ok(&f, &c);
    char msg[1024];
    weir__cl_job_list l;
    CHECK_EQ(weir__client_list(c, &l, DEADLINE(), msg, sizeof(msg)), 0);
    CHECK_EQ(l.jobs.n, 2);
    CHECK_EQ(l.jobs.v[0].id, 1);
    CHECK_STR(l.jobs.v[0].name, "count");
    CHECK_EQ(l.jobs.v[0].state, WEIR__CL_JOB_FAILED);
    CHECK_EQ(l.jobs.v[0].parallelism, 2);
    CHECK_EQ(l.jobs.v[0].submitted_ms, 1700000000000);
    CHECK_EQ(l.jobs.v[0].ended_ms, 1700000005000);
    CHECK_STR(l.jobs.v[0].message, "boom");
    CHECK_STR(l.jobs.v[1].name, "wordcount");
    CHECK_EQ(l.jobs.v[1].ended_ms, 0);
    weir__client_list_free(&l);
    CHECK(l.jobs.v == NULL);

    weir__cl_cancel_job_ack a;
    CHECK_EQ(weir__client_cancel(c, 2, &a, DEADLINE(), msg, sizeof(msg)), 0);
    CHECK_EQ(a.status, WEIR__CL_CANCEL_OK);
    weir__client_cancel_free(&a);
    CHECK_EQ(weir__client_cancel(c, 5, &a, DEADLINE(), msg, sizeof(msg)), 0);
    CHECK_EQ(a.status, WEIR__CL_CANCEL_UNKNOWN);
    CHECK_STR(a.message, "no job 5");
    weir__client_cancel_free(&a);
    CHECK_EQ(weir__client_cancel(c, 1, &a, DEADLINE(), msg, sizeof(msg)), 0);
    CHECK_EQ(a.status, WEIR__CL_CANCEL_ENDED);
    weir__client_cancel_free(&a);
    CHECK_EQ(weir__client_cancel(c, 0, &a, DEADLINE(), msg, sizeof(msg)), -EINVAL);
    /* An ack for another job than the one cancelled. */
    CHECK_EQ(weir__client_cancel(c, 3, &a, DEADLINE(), msg, sizeof(msg)), -EBADMSG);
    CHECK_HAS(msg, "answered the cancel of job 3 with a CancelJobAck for job 4");
    weir__client_close(c);
    fake_finish(&f);
    return 0;
}

TEST(list_and_cancel_round_trips)
{
    CHECK_EQ(test_run_main(list_cancel_main, NULL), 0);
}

/* ---- describe ------------------------------------------------------------------------- */

static int describe_v2; /* the fake speaks protocol 2 */

static void describe_script(fake *f)
{
    if (describe_v2) {
        fake_expect(f, WEIR_CLUSTER_HELLO_CLIENT);
        fake_hello_ack(f, 2, 2, WEIR__CL_ACCEPTED, "");
        fake_expect_eof(f); /* nothing is asked of it */
        return;
    }
    fake_hello(f);
    static const struct {
        uint64_t answer;
        int status;
        const char *json;
    } d[] = {{4, WEIR__CL_DETAIL_OK, "{\"id\":4,\"state\":\"running\"}"},
             {5, WEIR__CL_DETAIL_UNKNOWN, ""},
             {7, WEIR__CL_DETAIL_OK, "{}"}};
    for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++) {
        weir_frame fr;
        weir__cl_msg m;
        fake_recv(f, WEIR_CLUSTER_DESCRIBE_JOB, &fr, &m);
        fake_drop(&fr, &m);
        weir__cl_msg a = {.kind = WEIR_CLUSTER_JOB_DETAIL,
                          .u.job_detail = {d[i].answer, (uint8_t)d[i].status, (char *)d[i].json}};
        fake_send(f, &a);
    }
    fake_expect_eof(f);
}

static intptr_t describe_main(void *arg)
{
    (void)arg;
    char msg[1024];
    weir__cl_job_detail d;
    for (describe_v2 = 0; describe_v2 < 2; describe_v2++) {
        fake f;
        fake_start(&f, describe_script);
        weir__client *c;
        open_ok(&f, &c);
        if (describe_v2) {
            /* An older coordinator cannot describe a job: refused here,
             * saying where else to look, and nothing is sent. */
            CHECK_EQ(weir__client_describe(c, 4, &d, DEADLINE(), msg, sizeof(msg)),
                     -EPROTONOSUPPORT);
            CHECK_HAS(msg, "speaks protocol version 2, which cannot describe a job");
            CHECK_HAS(msg, "GET /api/v1/jobs/4");
        } else {
            CHECK_EQ(weir__client_describe(c, 4, &d, DEADLINE(), msg, sizeof(msg)), 0);
            CHECK_EQ(d.status, WEIR__CL_DETAIL_OK);
            CHECK_STR(d.json, "{\"id\":4,\"state\":\"running\"}");
            weir__client_detail_free(&d);
            CHECK(d.json == NULL);
            CHECK_EQ(weir__client_describe(c, 5, &d, DEADLINE(), msg, sizeof(msg)), 0);
            CHECK_EQ(d.status, WEIR__CL_DETAIL_UNKNOWN);
            weir__client_detail_free(&d);
            CHECK_EQ(weir__client_describe(c, 0, &d, DEADLINE(), msg, sizeof(msg)), -EINVAL);
            /* A detail of another job than the one asked for. */
            CHECK_EQ(weir__client_describe(c, 6, &d, DEADLINE(), msg, sizeof(msg)), -EBADMSG);
            CHECK_HAS(msg, "answered the description of job 6 with one of job 7");
        }
        weir__client_close(c);
        fake_finish(&f);
    }
    return 0;
}

TEST(describe_round_trips_and_is_not_asked_of_an_older_coordinator)
{
    CHECK_EQ(test_run_main(describe_main, NULL), 0);
}

/* ---- connecting ----------------------------------------------------------------------- */

static intptr_t refused_connect_main(void *arg)
{
    (void)arg;
    int lfd = weir_net_listen("127.0.0.1", 0, NULL);
    CHECK_GE(lfd, 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", weir_net_local_port(lfd));
    weir_io_close(lfd); /* nobody listens there now */
    weir__client *c;
    char msg[1024];
    CHECK_EQ(weir__client_open(addr, "x", NULL, DEADLINE(), &c, msg, sizeof(msg)), -ECONNREFUSED);
    CHECK_HAS(msg, "cannot connect: Connection refused");
    CHECK_HAS(msg, addr);
    CHECK_EQ(weir__client_open("nohostport", "x", NULL, DEADLINE(), &c, msg, sizeof(msg)), -EINVAL);
    CHECK_HAS(msg, "is not HOST:PORT");

    /* IPv6, where the machine has it. */
    int l6 = weir_net_listen("::1", 0, NULL);
    if (l6 >= 0) {
        snprintf(addr, sizeof(addr), "[::1]:%d", weir_net_local_port(l6));
        weir_io_close(l6);
        CHECK_EQ(weir__client_open(addr, "x", NULL, DEADLINE(), &c, msg, sizeof(msg)),
                 -ECONNREFUSED);
    }
    return 0;
}

TEST(connect_refused_is_an_error_naming_the_coordinator)
{
    CHECK_EQ(test_run_main(refused_connect_main, NULL), 0);
}

TEST(hostport_parses)
{
    char host[256], msg[256];
    int port = 0;
    CHECK_EQ(
        weir__client_parse_hostport("localhost:7000", host, sizeof(host), &port, msg, sizeof(msg)),
        0);
    CHECK_STR(host, "localhost");
    CHECK_EQ(port, 7000);
    CHECK_EQ(weir__client_parse_hostport("[::1]:1", host, sizeof(host), &port, msg, sizeof(msg)),
             0);
    CHECK_STR(host, "::1");
    CHECK_EQ(port, 1);
    CHECK_EQ(
        weir__client_parse_hostport("10.0.0.1:65535", host, sizeof(host), &port, msg, sizeof(msg)),
        0);
    CHECK_EQ(port, 65535);
    const char *bad[] = {"",        "host",    "host:",  "host:0",   "host:65536",
                         "host:7x", "host:-1", ":7000",  "::1:7000", "[::1]7000",
                         "[::1",    "[]:7",    "host: 7"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        msg[0] = '\0';
        if (weir__client_parse_hostport(bad[i], host, sizeof(host), &port, msg, sizeof(msg)) !=
            -EINVAL)
            TEST__FAIL("\"%s\" parsed", bad[i]);
        CHECK(msg[0] != '\0');
    }
    CHECK_EQ(weir__client_parse_hostport(NULL, host, sizeof(host), &port, msg, sizeof(msg)),
             -EINVAL);
}

/* ---- preparing a job ------------------------------------------------------------------ */

TEST(prepare_refuses_what_the_submitter_got_wrong)
{
    weir__client_job j;
    char msg[1024];
    weir__client_submit_opts o = job_count_opts();
    o.plugin = plugin_path("no_such_job");
    CHECK_EQ(weir__client_job_prepare(&o, &j, msg, sizeof(msg)), -ENOENT);
    CHECK_HAS(msg, "no_such_job.so");
    CHECK_EQ(j.submit.plugins.n, 0);
    o.plugin = plugin_path("job_not_plugin");
    CHECK_EQ(weir__client_job_prepare(&o, &j, msg, sizeof(msg)), -ENOEXEC);
    CHECK_HAS(msg, "not a weir job plugin");
    o.plugin = NULL;
    CHECK_EQ(weir__client_job_prepare(&o, &j, msg, sizeof(msg)), -EINVAL);

    o = job_count_opts();
    o.checkpoint_dir = "no/such/parent/dir";
    CHECK_EQ(weir__client_job_prepare(&o, &j, msg, sizeof(msg)), -ENOENT);
    CHECK_HAS(msg, "its parent no/such/parent");

    char *many[WEIR_CLUSTER_ARGS_MAX + 1];
    for (size_t i = 0; i <= WEIR_CLUSTER_ARGS_MAX; i++)
        many[i] = "x";
    o = job_count_opts();
    o.argc = WEIR_CLUSTER_ARGS_MAX + 1;
    o.argv = many;
    CHECK_EQ(weir__client_job_prepare(&o, &j, msg, sizeof(msg)), -EMSGSIZE);
    char *big = malloc(WEIR_CLUSTER_ARG_MAX + 2);
    CHECK(big != NULL);
    memset(big, 'a', WEIR_CLUSTER_ARG_MAX + 1);
    big[WEIR_CLUSTER_ARG_MAX + 1] = '\0';
    char *args[] = {"ok", big};
    o.argc = 2;
    o.argv = args;
    CHECK_EQ(weir__client_job_prepare(&o, &j, msg, sizeof(msg)), -EMSGSIZE);
    CHECK_HAS(msg, "job argument 2 is 4097 bytes");
    free(big);
}

TEST(prepare_makes_the_checkpoint_directory_absolute)
{
    char base[256];
    const char *t = getenv("TMPDIR");
    snprintf(base, sizeof(base), "%s/weir-client-XXXXXX", t && *t ? t : "/tmp");
    CHECK(mkdtemp(base) != NULL);
    char *real = realpath(base, NULL);
    CHECK(real != NULL);
    char cwd[PATH_MAX];
    CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
    CHECK_EQ(chdir(base), 0);

    weir__client_job j;
    char msg[1024], want[PATH_MAX + 64];
    weir__client_submit_opts o = job_count_opts();
    /* Relative, not there yet: its parent's real path + its name. */
    o.checkpoint_dir = "ckpt/";
    CHECK_EQ(weir__client_job_prepare(&o, &j, msg, sizeof(msg)), 0);
    snprintf(want, sizeof(want), "%s/ckpt", real);
    CHECK_STR(j.submit.checkpoint_dir, want);
    CHECK_EQ(j.submit.plugins.n, 1);
    CHECK_EQ(j.bytes[0].n, j.submit.plugins.v[0].size);
    weir__client_job_clear(&j);
    /* There: its real path. */
    CHECK_EQ(mkdir("sub", 0700), 0);
    o.checkpoint_dir = "./sub/../sub";
    CHECK_EQ(weir__client_job_prepare(&o, &j, msg, sizeof(msg)), 0);
    snprintf(want, sizeof(want), "%s/sub", real);
    CHECK_STR(j.submit.checkpoint_dir, want);
    weir__client_job_clear(&j);
    /* Absolute on the workers' filesystem only: as written. */
    o.checkpoint_dir = "/no/such/weir/dir/ckpt";
    CHECK_EQ(weir__client_job_prepare(&o, &j, msg, sizeof(msg)), 0);
    CHECK_STR(j.submit.checkpoint_dir, "/no/such/weir/dir/ckpt");
    weir__client_job_clear(&j);
    /* None: "". */
    o.checkpoint_dir = NULL;
    CHECK_EQ(weir__client_job_prepare(&o, &j, msg, sizeof(msg)), 0);
    CHECK_STR(j.submit.checkpoint_dir, "");
    weir__client_job_clear(&j);
    weir__client_job_clear(&j); /* twice is fine */

    CHECK_EQ(chdir(cwd), 0);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    CHECK_EQ(system(cmd), 0);
    free(real);
}

TEST(prepare_survives_every_allocation_failure)
{
    char *args[] = {"1000", "linger"};
    weir__client_submit_opts o = job_count_opts();
    o.checkpoint_dir = "/tmp";
    o.argc = 2;
    o.argv = args;
    weir__client_job j;
    char msg[1024];
    weir__alloc_fail_after(LONG_MAX);
    CHECK_EQ(weir__client_job_prepare(&o, &j, msg, sizeof(msg)), 0);
    long n = weir__alloc_fail_after(-1);
    weir__client_job_clear(&j);
    CHECK_GT(n, 5);
    for (long i = 0; i < n; i++) {
        weir__alloc_fail_after(i);
        int e = weir__client_job_prepare(&o, &j, msg, sizeof(msg));
        weir__alloc_fail_after(-1);
        if (e != -ENOMEM)
            TEST__FAIL("allocation %ld of %ld failing: %d (%s)", i, n, e, msg);
        CHECK(msg[0] != '\0');
        CHECK_EQ(j.submit.plugins.n, 0); /* nothing left behind (ASan: no leak) */
        CHECK(j.bytes == NULL);
        CHECK(j.submit.checkpoint_dir == NULL);
    }
}

TEST_MAIN()
