/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_proto.c - the cluster protocol's codec (cluster/proto.h): every
 * kind round-trips; the epoch follows the kind of every coordinator-to-
 * worker frame; an older peer's shorter frame decodes with its tail's
 * defaults and a newer peer's longer one with its tail ignored; every
 * truncation of every kind's encoding is refused with a message naming
 * the message (or, exactly at a tail, decodes to the prefix it was given);
 * strings, byte strings and counts past their limits, and counts larger
 * than the bytes left, are refused before anything is allocated; values
 * out of range are refused naming the field, on both sides; version
 * negotiation is symmetric and says which side to upgrade; every
 * allocation of every decoder and encoder can fail, each failure an error
 * that leaves nothing behind (ASan checks the leaks).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/be.h"
#include "cluster/proto.h"
#include "test.h"

/* Every kind, in the order of weir/cluster.h. */
static const int all_kinds[] = {
    WEIR_CLUSTER_REGISTER,
    WEIR_CLUSTER_HEARTBEAT,
    WEIR_CLUSTER_SUBTASK_LISTENING,
    WEIR_CLUSTER_SUBTASK_FINISHED,
    WEIR_CLUSTER_SUBTASK_CHECKPOINTED,
    WEIR_CLUSTER_REQUEST_FINAL_CHECKPOINT,
    WEIR_CLUSTER_SUBTASK_STATS,
    WEIR_CLUSTER_REGISTER_ACK,
    WEIR_CLUSTER_HEARTBEAT_ACK,
    WEIR_CLUSTER_DEPLOY,
    WEIR_CLUSTER_PEER_UPDATE,
    WEIR_CLUSTER_CANCEL_TASKS,
    WEIR_CLUSTER_TRIGGER_CHECKPOINT,
    WEIR_CLUSTER_COMMIT_CHECKPOINT,
    WEIR_CLUSTER_ABORT_CHECKPOINT,
    WEIR_CLUSTER_FINAL_CHECKPOINT_ASSIGNED,
    WEIR_CLUSTER_HELLO_CLIENT,
    WEIR_CLUSTER_SUBMIT_JOB,
    WEIR_CLUSTER_PLUGIN_UPLOAD,
    WEIR_CLUSTER_LIST_JOBS,
    WEIR_CLUSTER_CANCEL_JOB,
    WEIR_CLUSTER_DESCRIBE_JOB,
    WEIR_CLUSTER_HELLO_CLIENT_ACK,
    WEIR_CLUSTER_SUBMIT_JOB_ACK,
    WEIR_CLUSTER_JOB_LIST,
    WEIR_CLUSTER_CANCEL_JOB_ACK,
    WEIR_CLUSTER_JOB_COMPLETED,
    WEIR_CLUSTER_JOB_DETAIL,
};
#define NKINDS (sizeof(all_kinds) / sizeof(all_kinds[0]))

/* How many optional tail fields (or groups) each kind has: a truncation
 * exactly before one of them is an older peer's frame, and decodes. */
static int tails(int kind)
{
    switch (kind) {
    case WEIR_CLUSTER_SUBMIT_JOB: /* max_restarts, restore, idle_timeout_ms, state_backend */
        return 4;
    case WEIR_CLUSTER_REGISTER:         /* slots, http_port */
    case WEIR_CLUSTER_SUBTASK_FINISHED: /* records_in, records_out */
    case WEIR_CLUSTER_DEPLOY:           /* idle_timeout_ms, state_backend */
        return 2;
    case WEIR_CLUSTER_REGISTER_ACK:   /* heartbeat_ms */
    case WEIR_CLUSTER_SUBMIT_JOB_ACK: /* abi */
        return 1;
    default:
        return 0;
    }
}

#define S(x) ((char *)(x))

static const uint8_t plan_bytes[] = {'P', 0, 0, 0, 1, 'j', 'o', 'b', 0xFF, 0};
static const uint8_t plugin_bytes[] = {0x7F, 'E', 'L', 'F', 2, 1, 1, 0, 9, 9, 9};
static char *args3[] = {S("--in"), S("data/in.txt"), S("")};
static weir__cl_subtask subtasks[] = {{0, 0}, {1, 0}, {1, 3}};
static weir__cl_listen listens[] = {{7, 40001}, {8, 65535}};
static weir__cl_peer peers[] = {{3, S("10.0.0.2"), 40001}, {4, S("worker-b.local"), 1}};
static weir__cl_hash missing[] = {{{1, 2, 3}}, {{0xFF, 0xEE}}};

static void fill_sha(uint8_t *h, uint8_t seed)
{
    for (int i = 0; i < 32; i++)
        h[i] = (uint8_t)(seed + i * 7);
}

/* A message of the kind with every field set to a non-default value. */
static void sample(int kind, weir__cl_msg *m)
{
    static weir__cl_plugin_ref refs[2];
    static weir__cl_deploy_plugin dps[2];
    static weir__cl_job_info infos[2];
    static weir__cl_op_figures figs[2];
    memset(m, 0, sizeof(*m));
    m->kind = (uint8_t)kind;
    if (weir__cl_kind_dir(kind) == WEIR__CL_FROM_COORDINATOR)
        m->epoch = 0x0102030405060708ull;
    switch (kind) {
    case WEIR_CLUSTER_REGISTER:
        m->u.reg = (weir__cl_register){3, 2, S("worker-1"), S("10.1.2.3"), 8, 8081};
        break;
    case WEIR_CLUSTER_HEARTBEAT:
        m->u.heartbeat.seq = 1ull << 40;
        break;
    case WEIR_CLUSTER_SUBTASK_LISTENING:
        m->u.listening = (weir__cl_subtask_listening){9, 2, 1, 3, {listens, 2}};
        break;
    case WEIR_CLUSTER_SUBTASK_FINISHED:
        m->u.finished = (weir__cl_subtask_finished){
            9, 2, 1, 3, -EIO, 1, S("sink failed: disk full"), 1000, 999};
        break;
    case WEIR_CLUSTER_SUBTASK_CHECKPOINTED:
        m->u.checkpointed = (weir__cl_subtask_checkpointed){
            9, 42, 1, 3, 0, 12345, S("chk-42/op.3.state"), S("chk-42/op.3.src")};
        break;
    case WEIR_CLUSTER_REQUEST_FINAL_CHECKPOINT:
        m->u.request_final = (weir__cl_request_final){9, 0, 2};
        break;
    case WEIR_CLUSTER_SUBTASK_STATS:
        figs[0] = (weir__cl_op_figures){0, 1, 10, 20, 3000000, -5};
        figs[1] = (weir__cl_op_figures){2, 0, 1ull << 40, 7, 0, INT64_MIN};
        m->u.stats = (weir__cl_subtask_stats){9, 2, {figs, 2}};
        break;
    case WEIR_CLUSTER_REGISTER_ACK:
        m->u.reg_ack = (weir__cl_register_ack){2, 1, WEIR__CL_RETRY, S("retiring"), 250};
        break;
    case WEIR_CLUSTER_HEARTBEAT_ACK:
        m->u.heartbeat_ack.seq = 77;
        break;
    case WEIR_CLUSTER_DEPLOY:
        fill_sha(dps[0].sha256, 1);
        dps[0].size = sizeof(plugin_bytes);
        dps[0].bytes = (weir__cl_bytes){plugin_bytes, sizeof(plugin_bytes)};
        fill_sha(dps[1].sha256, 2);
        dps[1].size = 1u << 20;
        dps[1].bytes = (weir__cl_bytes){NULL, 0}; /* shipped before */
        m->u.deploy = (weir__cl_deploy){9,
                                        2,
                                        S("word-count"),
                                        {plan_bytes, sizeof(plan_bytes)},
                                        {subtasks, 3},
                                        {args3, 3},
                                        S("/tmp/ck"),
                                        1000,
                                        41,
                                        50,
                                        {dps, 2},
                                        30000,
                                        S("remote:file:///data/pool")};
        break;
    case WEIR_CLUSTER_PEER_UPDATE:
        m->u.peer_update = (weir__cl_peer_update){9, 2, {peers, 2}};
        break;
    case WEIR_CLUSTER_CANCEL_TASKS:
        m->u.cancel_tasks = (weir__cl_cancel_tasks){9, 2, S("worker lost: w2 (heartbeat timeout)")};
        break;
    case WEIR_CLUSTER_TRIGGER_CHECKPOINT:
    case WEIR_CLUSTER_COMMIT_CHECKPOINT:
    case WEIR_CLUSTER_FINAL_CHECKPOINT_ASSIGNED:
        m->u.checkpoint = (weir__cl_checkpoint){9, (uint64_t)INT64_MAX};
        break;
    case WEIR_CLUSTER_ABORT_CHECKPOINT:
        m->u.abort_checkpoint = (weir__cl_abort_checkpoint){9, 43, S("subtask 1.3 failed")};
        break;
    case WEIR_CLUSTER_HELLO_CLIENT:
        m->u.hello = (weir__cl_hello_client){1, 1, S("weir submit")};
        break;
    case WEIR_CLUSTER_SUBMIT_JOB:
        for (int i = 0; i < 2; i++) {
            fill_sha(refs[i].sha256, (uint8_t)(10 + i));
            refs[i].size = 4096u + (uint64_t)i;
            refs[i].abi = (weir__cl_abi){1, S("abcdef0123"), S("linux-x86_64"), S("gcc/none")};
        }
        m->u.submit =
            (weir__cl_submit_job){4,          S("/data/ck"), 500,
                                  {args3, 3}, {refs, 2},     3,
                                  1,          5000,          S("remote:s3://b/p?endpoint=h:1")};
        break;
    case WEIR_CLUSTER_PLUGIN_UPLOAD:
        fill_sha(m->u.upload.sha256, 5);
        m->u.upload.bytes = (weir__cl_bytes){plugin_bytes, sizeof(plugin_bytes)};
        break;
    case WEIR_CLUSTER_LIST_JOBS:
        break;
    case WEIR_CLUSTER_CANCEL_JOB:
        m->u.cancel_job.job = 9;
        break;
    case WEIR_CLUSTER_DESCRIBE_JOB:
        m->u.describe_job.job = 9;
        break;
    case WEIR_CLUSTER_HELLO_CLIENT_ACK:
        m->u.hello_ack = (weir__cl_hello_client_ack){1, 1, WEIR__CL_REFUSED, S("go away")};
        break;
    case WEIR_CLUSTER_SUBMIT_JOB_ACK:
        m->u.submit_ack =
            (weir__cl_submit_job_ack){WEIR__CL_SUBMIT_NEED_PLUGINS,
                                      0,
                                      S(""),
                                      {missing, 2},
                                      {1, S("fedcba"), S("linux-aarch64"), S("clang/asan")}};
        break;
    case WEIR_CLUSTER_JOB_LIST:
        infos[0] = (weir__cl_job_info){9, S("word-count"), WEIR__CL_JOB_RUNNING, 4, 1700, 0, S("")};
        infos[1] = (weir__cl_job_info){8, S("q5"), WEIR__CL_JOB_FAILED, 2, 1600, 1650, S("oops")};
        m->u.job_list.jobs.v = infos;
        m->u.job_list.jobs.n = 2;
        break;
    case WEIR_CLUSTER_CANCEL_JOB_ACK:
        m->u.cancel_job_ack = (weir__cl_cancel_job_ack){9, WEIR__CL_CANCEL_ENDED, S("finished")};
        break;
    case WEIR_CLUSTER_JOB_COMPLETED:
        m->u.completed = (weir__cl_job_completed){
            9, -ECANCELED, S("cancelled"), 1234, 100000, 99999, 2, 1, -5, 7, 7, 3, 1};
        break;
    case WEIR_CLUSTER_JOB_DETAIL:
        m->u.job_detail = (weir__cl_job_detail){9, WEIR__CL_DETAIL_OK, S("{\"id\":9}")};
        break;
    default:
        CHECK(!"a kind without a sample");
    }
}

/* The encoding of m: a malloc'd whole frame in *frame (free it). */
static size_t encode(const weir__cl_msg *m, uint8_t **frame)
{
    weir_frame_builder fb;
    char why[256];
    int e = weir__cl_encode(m, &fb, why, sizeof(why));
    if (e)
        TEST__FAIL("encode %s: %d %s", weir__cl_kind_name(m->kind), e, why);
    size_t len;
    *frame = weir_frame_builder_take(&fb, &len);
    CHECK(*frame);
    CHECK_EQ(weir__get_be32(*frame), len - 4);
    return len;
}

static int decode(const uint8_t *p, size_t n, weir__cl_msg *m, char *why, size_t cap)
{
    /* A copy of exactly n bytes, so ASan sees any read past them. */
    uint8_t *copy = malloc(n ? n : 1);
    memcpy(copy, p, n);
    int e = weir__cl_decode(copy, n, m, why, cap);
    if (e == 0) {
        /* Byte strings are views into the payload: re-point them at the
         * caller's bytes before the copy goes. */
        switch (m->kind) {
        case WEIR_CLUSTER_DEPLOY:
            m->u.deploy.plan.p = p + (m->u.deploy.plan.p - copy);
            for (uint32_t i = 0; i < m->u.deploy.plugins.n; i++)
                if (m->u.deploy.plugins.v[i].bytes.p)
                    m->u.deploy.plugins.v[i].bytes.p =
                        p + (m->u.deploy.plugins.v[i].bytes.p - copy);
            break;
        case WEIR_CLUSTER_PLUGIN_UPLOAD:
            m->u.upload.bytes.p = p + (m->u.upload.bytes.p - copy);
            break;
        }
    }
    free(copy);
    return e;
}

/* m re-encoded equals the frame's bytes. */
static void check_reencodes(const weir__cl_msg *m, const uint8_t *frame, size_t len)
{
    uint8_t *again;
    size_t n = encode(m, &again);
    CHECK_EQ(n, len);
    CHECK(memcmp(again, frame, len) == 0);
    free(again);
}

/* A frame's bytes with extra bytes appended to the payload and the length
 * fixed up. */
static uint8_t *append(const uint8_t *frame, size_t len, const void *extra, size_t n)
{
    uint8_t *p = malloc(len + n);
    memcpy(p, frame, len);
    memcpy(p + len, extra, n);
    weir__put_be32(p, (uint32_t)(len + n - 4));
    return p;
}

/* ---- round trips ------------------------------------------------------------------------- */
TEST(every_kind_round_trips)
{
    for (size_t k = 0; k < NKINDS; k++) {
        weir__cl_msg m, d;
        sample(all_kinds[k], &m);
        uint8_t *f;
        size_t len = encode(&m, &f);
        CHECK_EQ(f[4], all_kinds[k]);
        char why[256];
        int e = decode(f + 4, len - 4, &d, why, sizeof(why));
        if (e)
            TEST__FAIL("%s: %s", weir__cl_kind_name(all_kinds[k]), why);
        CHECK_EQ(d.kind, all_kinds[k]);
        CHECK_EQ(d.epoch, m.epoch);
        check_reencodes(&d, f, len);
        weir__cl_msg_free(&d);
        CHECK_EQ(d.kind, 0);
        free(f);
    }
}

TEST(decoded_fields)
{
    weir__cl_msg m, d;
    uint8_t *f;
    char why[256];
    sample(WEIR_CLUSTER_DEPLOY, &m);
    size_t len = encode(&m, &f);
    /* the epoch right after the kind */
    CHECK_EQ(weir__get_be64(f + 5), 0x0102030405060708ull);
    CHECK_EQ(weir__cl_decode(f + 4, len - 4, &d, why, sizeof(why)), 0);
    const weir__cl_deploy *dp = &d.u.deploy;
    CHECK_STR(dp->name, "word-count");
    CHECK_EQ(dp->plan.n, sizeof(plan_bytes));
    CHECK(dp->plan.p > f && dp->plan.p < f + len); /* a view into the payload */
    CHECK(memcmp(dp->plan.p, plan_bytes, sizeof(plan_bytes)) == 0);
    CHECK_EQ(dp->subtasks.n, 3);
    CHECK_EQ(dp->subtasks.v[2].chain, 1);
    CHECK_EQ(dp->subtasks.v[2].sub, 3);
    CHECK_EQ(dp->args.n, 3);
    CHECK_STR(dp->args.v[1], "data/in.txt");
    CHECK_STR(dp->args.v[2], "");
    CHECK_EQ(dp->restore_id, 41);
    CHECK_EQ(dp->first_id, 50);
    CHECK_EQ(dp->plugins.n, 2);
    CHECK_EQ(dp->plugins.v[0].bytes.n, sizeof(plugin_bytes));
    CHECK(memcmp(dp->plugins.v[0].bytes.p, plugin_bytes, sizeof(plugin_bytes)) == 0);
    CHECK(dp->plugins.v[1].bytes.p == NULL);
    CHECK_EQ(dp->plugins.v[1].size, 1u << 20);
    CHECK_EQ(dp->plugins.v[1].sha256[31], (uint8_t)(2 + 31 * 7));
    weir__cl_msg_free(&d);
    free(f);

    sample(WEIR_CLUSTER_JOB_COMPLETED, &m);
    len = encode(&m, &f);
    CHECK_EQ(weir__cl_decode(f + 4, len - 4, &d, why, sizeof(why)), 0);
    CHECK_EQ(d.u.completed.err, -ECANCELED);
    CHECK_EQ(d.u.completed.watermark, -5);
    CHECK_EQ(d.epoch, 0); /* not a coordinator-to-worker kind */
    weir__cl_msg_free(&d);
    free(f);

    /* Names and directions. */
    CHECK_STR(weir__cl_kind_name(WEIR_CLUSTER_FINAL_CHECKPOINT_ASSIGNED),
              "FinalCheckpointAssigned");
    CHECK(weir__cl_kind_name(0x7F) == NULL);
    CHECK_EQ(weir__cl_kind_dir(0x7F), 0);
    for (size_t k = 0; k < NKINDS; k++) {
        int dir = weir__cl_kind_dir(all_kinds[k]);
        CHECK_EQ(dir, all_kinds[k] < 0x20   ? WEIR__CL_FROM_WORKER
                      : all_kinds[k] < 0x40 ? WEIR__CL_FROM_COORDINATOR
                      : all_kinds[k] < 0x60 ? WEIR__CL_FROM_CLIENT
                                            : WEIR__CL_TO_CLIENT);
    }
}

/* ---- evolution --------------------------------------------------------------------------- */
TEST(older_peer_shorter_frame_takes_defaults)
{
    char why[256];
    weir__cl_msg d;
    weir_frame_builder fb;
    const uint8_t *p;
    size_t len;

    /* A Register of a peer that knew neither slots nor the HTTP port. */
    weir_frame_builder_init(&fb, WEIR_CLUSTER_REGISTER);
    weir_frame_put_u32(&fb, 1);
    weir_frame_put_u32(&fb, 1);
    weir_frame_put_str(&fb, "w1");
    weir_frame_put_str(&fb, "");
    CHECK_EQ(weir_frame_builder_finish(&fb, &p, &len), 0);
    CHECK_EQ(weir__cl_decode(p + 4, len - 4, &d, why, sizeof(why)), 0);
    CHECK_STR(d.u.reg.worker_id, "w1");
    CHECK_STR(d.u.reg.data_host, "");
    CHECK_EQ(d.u.reg.slots, 1);
    CHECK_EQ(d.u.reg.http_port, 0);
    weir__cl_msg_free(&d);
    /* ... one that knew slots only. */
    weir_frame_put_u32(&fb, 6);
    CHECK_EQ(weir_frame_builder_finish(&fb, &p, &len), 0);
    CHECK_EQ(weir__cl_decode(p + 4, len - 4, &d, why, sizeof(why)), 0);
    CHECK_EQ(d.u.reg.slots, 6);
    CHECK_EQ(d.u.reg.http_port, 0);
    weir__cl_msg_free(&d);

    /* A RegisterAck without the heartbeat interval. */
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_REGISTER_ACK);
    weir_frame_put_u64(&fb, 5);
    weir_frame_put_u32(&fb, 1);
    weir_frame_put_u32(&fb, 1);
    weir_frame_put_u8(&fb, WEIR__CL_ACCEPTED);
    weir_frame_put_str(&fb, "");
    CHECK_EQ(weir_frame_builder_finish(&fb, &p, &len), 0);
    CHECK_EQ(weir__cl_decode(p + 4, len - 4, &d, why, sizeof(why)), 0);
    CHECK_EQ(d.epoch, 5);
    CHECK_EQ(d.u.reg_ack.heartbeat_ms, WEIR_CLUSTER_HEARTBEAT_MS);
    weir__cl_msg_free(&d);

    /* A SubmitJob without max_restarts: the coordinator's policy (-1). */
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_SUBMIT_JOB);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_str(&fb, "");
    weir_frame_put_u64(&fb, 0);
    weir_frame_put_u32(&fb, 0); /* no args */
    weir_frame_put_u32(&fb, 1); /* one plugin */
    uint8_t sha[32] = {9};
    weir_frame_put_raw(&fb, sha, 32);
    weir_frame_put_u64(&fb, 100);
    weir_frame_put_u32(&fb, 1);
    weir_frame_put_str(&fb, "f");
    weir_frame_put_str(&fb, "t");
    weir_frame_put_str(&fb, "c");
    CHECK_EQ(weir_frame_builder_finish(&fb, &p, &len), 0);
    CHECK_EQ(weir__cl_decode(p + 4, len - 4, &d, why, sizeof(why)), 0);
    CHECK_EQ(d.u.submit.max_restarts, -1);
    CHECK_EQ(d.u.submit.plugins.n, 1);
    CHECK_STR(d.u.submit.plugins.v[0].abi.toolchain, "c");
    CHECK(d.u.submit.args.v == NULL);
    weir__cl_msg_free(&d);

    /* A SubmitJobAck without the coordinator's ABI identity. */
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_SUBMIT_JOB_ACK);
    weir_frame_put_u8(&fb, WEIR__CL_SUBMIT_ACCEPTED);
    weir_frame_put_u64(&fb, 12);
    weir_frame_put_str(&fb, "");
    weir_frame_put_u32(&fb, 0);
    CHECK_EQ(weir_frame_builder_finish(&fb, &p, &len), 0);
    CHECK_EQ(weir__cl_decode(p + 4, len - 4, &d, why, sizeof(why)), 0);
    CHECK_EQ(d.u.submit_ack.job, 12);
    CHECK_EQ(d.u.submit_ack.abi.version, 0);
    CHECK_STR(d.u.submit_ack.abi.fingerprint, "");
    CHECK_STR(d.u.submit_ack.abi.target, "");
    weir__cl_msg_free(&d);
    /* ... but a tail group begun is a tail group to finish. */
    weir_frame_put_u32(&fb, 1);
    weir_frame_put_str(&fb, "fp");
    CHECK_EQ(weir_frame_builder_finish(&fb, &p, &len), 0);
    CHECK_EQ(weir__cl_decode(p + 4, len - 4, &d, why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, "SubmitJobAck: abi.target: length cut short");

    /* A SubtaskFinished without the record counts. */
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_SUBTASK_FINISHED);
    weir_frame_put_u64(&fb, 3);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_u32(&fb, 1);
    weir_frame_put_u32(&fb, 2);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_u8(&fb, 0);
    weir_frame_put_str(&fb, "");
    CHECK_EQ(weir_frame_builder_finish(&fb, &p, &len), 0);
    CHECK_EQ(weir__cl_decode(p + 4, len - 4, &d, why, sizeof(why)), 0);
    CHECK_EQ(d.u.finished.records_in, 0);
    CHECK_EQ(d.u.finished.records_out, 0);
    weir__cl_msg_free(&d);
    weir_frame_builder_close(&fb);
}

TEST(newer_peer_longer_frame_ignores_tail)
{
    static const uint8_t extra[] = {0xAB, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 7};
    for (size_t k = 0; k < NKINDS; k++) {
        for (size_t n = 1; n <= sizeof(extra); n += 4) {
            weir__cl_msg m, d;
            sample(all_kinds[k], &m);
            uint8_t *f;
            size_t len = encode(&m, &f);
            uint8_t *longer = append(f, len, extra, n);
            char why[256];
            int e = decode(longer + 4, len + n - 4, &d, why, sizeof(why));
            if (e)
                TEST__FAIL("%s + %zu bytes: %s", weir__cl_kind_name(all_kinds[k]), n, why);
            check_reencodes(&d, f, len);
            weir__cl_msg_free(&d);
            free(longer);
            free(f);
        }
    }
}

TEST(every_truncation_is_refused_or_an_older_peer)
{
    for (size_t k = 0; k < NKINDS; k++) {
        int kind = all_kinds[k];
        const char *name = weir__cl_kind_name(kind);
        weir__cl_msg m, d;
        sample(kind, &m);
        uint8_t *f;
        size_t len = encode(&m, &f);
        const uint8_t *payload = f + 4;
        size_t plen = len - 4;
        int accepted = 0;
        for (size_t cut = 0; cut < plen; cut++) {
            char why[256];
            memset(why, 'x', sizeof(why));
            int e = decode(payload, cut, &d, why, sizeof(why));
            if (e == 0) {
                /* An older peer's frame: what it sent decoded faithfully
                 * (the re-encoding starts with exactly those bytes) and
                 * the rest took defaults. */
                uint8_t *again;
                size_t n = encode(&d, &again);
                CHECK_GT(n - 4, cut);
                CHECK(memcmp(again + 4, payload, cut) == 0);
                free(again);
                weir__cl_msg_free(&d);
                accepted++;
                continue;
            }
            CHECK(e == -EBADMSG || e == -EMSGSIZE);
            CHECK(memchr(why, 0, sizeof(why)) != NULL);
            CHECK_GT(strlen(why), 0);
            if (cut > 0)
                CHECK_HAS(why, name);
            /* A failed decode leaves nothing (ASan: no leak) and a zeroed message. */
            CHECK_EQ(d.kind, 0);
        }
        if (accepted != tails(kind))
            TEST__FAIL("%s: %d truncations decoded, %d tails", name, accepted, tails(kind));
        free(f);
    }
}

/* ---- limits ------------------------------------------------------------------------------ */
/* Decode the frame built in fb, expecting err with `has` in why; counts
 * the allocations the refusal made (must be 0 for refusals before any
 * allocation). */
static long refuse_frame(weir_frame_builder *fb, int err, const char *has)
{
    const uint8_t *p;
    size_t len;
    CHECK_EQ(weir_frame_builder_finish(fb, &p, &len), 0);
    char why[256];
    weir__cl_msg d;
    weir__alloc_fail_after(LONG_MAX);
    int e = weir__cl_decode(p + 4, len - 4, &d, why, sizeof(why));
    long allocs = weir__alloc_fail_after(-1);
    if (e != err)
        TEST__FAIL("want %d, got %d: %s", err, e, e ? why : "(accepted)");
    CHECK_HAS(why, has);
    return allocs;
}

static void register_head(weir_frame_builder *fb, const char *id, const char *host)
{
    weir_frame_builder_reset(fb, WEIR_CLUSTER_REGISTER);
    weir_frame_put_u32(fb, 1);
    weir_frame_put_u32(fb, 1);
    weir_frame_put_str(fb, id);
    weir_frame_put_str(fb, host);
}

TEST(strings_past_their_limits)
{
    weir_frame_builder fb;
    weir_frame_builder_init(&fb, 0);
    char big[300];
    memset(big, 'w', sizeof(big));
    big[WEIR_CLUSTER_REGISTER_STR_MAX] = '\0'; /* 255 bytes: the most */
    char why[256];
    weir__cl_msg d;
    const uint8_t *p;
    size_t len;
    register_head(&fb, big, big);
    CHECK_EQ(weir_frame_builder_finish(&fb, &p, &len), 0);
    CHECK_EQ(weir__cl_decode(p + 4, len - 4, &d, why, sizeof(why)), 0);
    CHECK_EQ(strlen(d.u.reg.worker_id), 255);
    weir__cl_msg_free(&d);

    big[WEIR_CLUSTER_REGISTER_STR_MAX] = 'w'; /* 256 */
    big[WEIR_CLUSTER_REGISTER_STR_MAX + 1] = '\0';
    register_head(&fb, big, "");
    CHECK_EQ(refuse_frame(&fb, -EMSGSIZE, "Register: worker_id: 256 bytes exceed the limit of 255"),
             0);
    register_head(&fb, "w", big);
    CHECK_EQ(refuse_frame(&fb, -EMSGSIZE, "Register: data_host: 256 bytes exceed the limit of 255"),
             1); /* the worker id, before; freed */
    ;
    register_head(&fb, "", "");
    refuse_frame(&fb, -EBADMSG, "Register: worker_id: empty");

    /* A length past the bytes left. */
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_REGISTER);
    weir_frame_put_u32(&fb, 1);
    weir_frame_put_u32(&fb, 1);
    weir_frame_put_u32(&fb, 200);
    weir_frame_put_raw(&fb, "abc", 3);
    CHECK_EQ(refuse_frame(&fb, -EBADMSG,
                          "Register: worker_id: 200 bytes need at least 200 bytes, 3 left"),
             0);
    /* A NUL inside. */
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_REGISTER);
    weir_frame_put_u32(&fb, 1);
    weir_frame_put_u32(&fb, 1);
    weir_frame_put_bytes(&fb, "a\0b", 3);
    weir_frame_put_str(&fb, "");
    refuse_frame(&fb, -EBADMSG, "Register: worker_id: a NUL byte inside");

    /* Nested: a plugin's ABI target past 128 bytes names the path. */
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_SUBMIT_JOB);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_str(&fb, "");
    weir_frame_put_u64(&fb, 0);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_u32(&fb, 2);
    for (int i = 0; i < 2; i++) {
        uint8_t sha[32] = {0};
        weir_frame_put_raw(&fb, sha, 32);
        weir_frame_put_u64(&fb, 10);
        weir_frame_put_u32(&fb, 1);
        weir_frame_put_str(&fb, "f");
        memset(big, 't', 129);
        big[129] = '\0';
        weir_frame_put_str(&fb, i ? big : "t");
        weir_frame_put_str(&fb, "c");
    }
    refuse_frame(&fb, -EMSGSIZE,
                 "SubmitJob: plugins[1].abi.target: 129 bytes exceed the limit of 128");

    /* An argument past its limit. */
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_SUBMIT_JOB);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_str(&fb, "");
    weir_frame_put_u64(&fb, 0);
    weir_frame_put_u32(&fb, 2);
    weir_frame_put_str(&fb, "ok");
    char *arg = malloc(WEIR_CLUSTER_ARG_MAX + 2);
    memset(arg, 'a', WEIR_CLUSTER_ARG_MAX + 1);
    arg[WEIR_CLUSTER_ARG_MAX + 1] = '\0';
    weir_frame_put_str(&fb, arg);
    free(arg);
    refuse_frame(&fb, -EMSGSIZE, "SubmitJob: args[1]: 4097 bytes exceed the limit of 4096");

    /* The encoder holds the same limits. */
    weir__cl_msg m;
    sample(WEIR_CLUSTER_REGISTER, &m);
    memset(big, 'w', 256);
    big[256] = '\0';
    m.u.reg.worker_id = big;
    weir_frame_builder enc;
    CHECK_EQ(weir__cl_encode(&m, &enc, why, sizeof(why)), -EMSGSIZE);
    CHECK_HAS(why, "Register: worker_id: 256 bytes exceed the 255-byte limit");
    weir_frame_builder_close(&enc);
    weir_frame_builder_close(&fb);
}

TEST(counts_bounded_by_limits_and_bytes_left)
{
    weir_frame_builder fb;
    /* A count of 2^32 - 1 in a 20-byte frame: refused before any allocation. */
    weir_frame_builder_init(&fb, WEIR_CLUSTER_JOB_LIST);
    weir_frame_put_u32(&fb, UINT32_MAX);
    weir_frame_put_raw(&fb, "0123456789abcde", 15);
    CHECK_EQ(refuse_frame(&fb, -EBADMSG, "JobList: jobs: 4294967295 elements need at least"), 0);
    /* The same in a PeerUpdate (fenced) and a SubtaskListening. */
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_PEER_UPDATE);
    weir_frame_put_u64(&fb, 0);
    weir_frame_put_u64(&fb, 1);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_u32(&fb, UINT32_MAX);
    CHECK_EQ(refuse_frame(&fb, -EBADMSG, "PeerUpdate: peers: 4294967295 elements"), 0);
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_SUBTASK_LISTENING);
    weir_frame_put_u64(&fb, 1);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_u32(&fb, 2); /* each input takes 6 bytes: 12 needed */
    weir_frame_put_raw(&fb, "01234567890", 11);
    CHECK_EQ(refuse_frame(&fb, -EBADMSG, "inputs: 2 elements need at least 12 bytes, 11 left"), 0);
    /* Counts past their own limits. */
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_SUBMIT_JOB);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_str(&fb, "");
    weir_frame_put_u64(&fb, 0);
    weir_frame_put_u32(&fb, WEIR_CLUSTER_ARGS_MAX + 1);
    CHECK_EQ(
        refuse_frame(&fb, -EMSGSIZE, "SubmitJob: args: 1025 elements exceed the limit of 1024"),
        1); /* checkpoint_dir, freed */
    ;
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_SUBMIT_JOB);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_str(&fb, "");
    weir_frame_put_u64(&fb, 0);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_u32(&fb, WEIR_CLUSTER_PLUGINS_MAX + 1);
    CHECK_EQ(refuse_frame(&fb, -EMSGSIZE, "SubmitJob: plugins: 65 elements exceed the limit of 64"),
             1); /* checkpoint_dir, freed */
    ;
    /* A job names at least one plugin. */
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_SUBMIT_JOB);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_str(&fb, "");
    weir_frame_put_u64(&fb, 0);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_u32(&fb, 0);
    refuse_frame(&fb, -EBADMSG, "SubmitJob: plugins: empty");
    /* A plugin size past the frame's room. */
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_PLUGIN_UPLOAD);
    uint8_t sha[32] = {0};
    weir_frame_put_raw(&fb, sha, 32);
    weir_frame_put_u32(&fb, WEIR_CLUSTER_PLUGIN_SIZE_MAX + 1);
    CHECK_EQ(refuse_frame(&fb, -EMSGSIZE, "PluginUpload: bytes:"), 0);
    weir_frame_builder_close(&fb);
}

TEST(values_out_of_range)
{
    char why[256];
    /* Each spoiled sample is refused by the encoder; its bytes, written
     * by hand into the sample's frame where the encoder would not, are
     * refused by the decoder with the same words. */
    weir__cl_msg m;
    weir_frame_builder fb;
#define SPOIL(k, stmt, text)                                                                       \
    do {                                                                                           \
        sample(k, &m);                                                                             \
        stmt;                                                                                      \
        int e_ = weir__cl_encode(&m, &fb, why, sizeof(why));                                       \
        weir_frame_builder_close(&fb);                                                             \
        if (e_ == 0)                                                                               \
            TEST__FAIL("%s: encoded despite: %s", weir__cl_kind_name(k), text);                    \
        CHECK_HAS(why, text);                                                                      \
    } while (0)
    SPOIL(WEIR_CLUSTER_PEER_UPDATE, peers[1].port = 0,
          "PeerUpdate: peers[1].port: 0 is not allowed");
    peers[1].port = 1;
    SPOIL(WEIR_CLUSTER_PEER_UPDATE, peers[0].host = S(""), "PeerUpdate: peers[0].host: empty");
    peers[0].host = S("10.0.0.2");
    SPOIL(WEIR_CLUSTER_TRIGGER_CHECKPOINT, m.u.checkpoint.id = 0,
          "TriggerCheckpoint: id: 0 is not allowed");
    SPOIL(WEIR_CLUSTER_COMMIT_CHECKPOINT, m.u.checkpoint.id = (uint64_t)INT64_MAX + 1,
          "CommitCheckpoint: id: 9223372036854775808 is above its largest value");
    SPOIL(WEIR_CLUSTER_REGISTER_ACK, m.u.reg_ack.status = 3, "RegisterAck: status: 3 is above");
    SPOIL(WEIR_CLUSTER_REGISTER, m.u.reg.min_compat = 4,
          "Register: min_compat: 4 is above the version 3");
    SPOIL(WEIR_CLUSTER_REGISTER, m.u.reg.slots = 0, "Register: slots: 0 is not allowed");
    SPOIL(WEIR_CLUSTER_SUBTASK_FINISHED, m.u.finished.fatal = 2, "SubtaskFinished: fatal: 2");
    SPOIL(WEIR_CLUSTER_SUBTASK_CHECKPOINTED, m.u.checkpointed.state = S("../x"),
          "SubtaskCheckpointed: state: \"../x\" is not a storage name");
    SPOIL(WEIR_CLUSTER_SUBMIT_JOB_ACK, m.u.submit_ack.missing.n = 0,
          "SubmitJobAck: missing: empty, yet plugins are asked for");
    SPOIL(WEIR_CLUSTER_DEPLOY, m.u.deploy.first_id = 41,
          "Deploy: first_id: 41 is not above the restored checkpoint 41");
    SPOIL(WEIR_CLUSTER_DEPLOY, m.u.deploy.plugins.v[0].bytes.n = 3,
          "Deploy: plugins[0].bytes: 3 bytes for a plugin of 11");
    SPOIL(WEIR_CLUSTER_DEPLOY, m.u.deploy.subtasks.n = 0, "Deploy: subtasks: empty");
    static const uint8_t not_plan[] = {'X', 1};
    SPOIL(WEIR_CLUSTER_DEPLOY, m.u.deploy.plan = ((weir__cl_bytes){not_plan, 2}),
          "Deploy: plan: not a plan's payload");
    SPOIL(WEIR_CLUSTER_JOB_LIST, ((weir__cl_job_info *)m.u.job_list.jobs.v)[1].state = 9,
          "JobList: jobs[1].state: 9 is above its largest value 4");
    m.kind = 0x7F;
    CHECK_EQ(weir__cl_encode(&m, &fb, why, sizeof(why)), -EINVAL);
    weir_frame_builder_close(&fb);
    CHECK_HAS(why, "unknown message kind 0x7f");
#undef SPOIL

    /* The decoder, on bytes no encoder writes. */
    weir_frame_builder_init(&fb, WEIR_CLUSTER_PEER_UPDATE);
    weir_frame_put_u64(&fb, 0);
    weir_frame_put_u64(&fb, 1);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_u32(&fb, 1);
    weir_frame_put_u32(&fb, 5);
    weir_frame_put_str(&fb, "h");
    weir_frame_put_u16(&fb, 0);
    refuse_frame(&fb, -EBADMSG, "PeerUpdate: peers[0].port: 0 is not allowed");
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_TRIGGER_CHECKPOINT);
    weir_frame_put_u64(&fb, 0);
    weir_frame_put_u64(&fb, 1);
    weir_frame_put_u64(&fb, 0);
    refuse_frame(&fb, -EBADMSG, "TriggerCheckpoint: id: 0 is not allowed");
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_SUBTASK_CHECKPOINTED);
    weir_frame_put_u64(&fb, 1);
    weir_frame_put_u64(&fb, 1);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_u64(&fb, 0);
    weir_frame_put_str(&fb, "ok/name");
    weir_frame_put_str(&fb, "/abs");
    refuse_frame(&fb, -EBADMSG, "SubtaskCheckpointed: position: \"/abs\" is not a storage name");
    weir_frame_builder_reset(&fb, WEIR_CLUSTER_DEPLOY);
    weir_frame_put_u64(&fb, 0);
    weir_frame_put_u64(&fb, 1);
    weir_frame_put_u32(&fb, 0);
    weir_frame_put_str(&fb, "j");
    weir_frame_put_bytes(&fb, "Q", 1);
    refuse_frame(&fb, -EBADMSG, "Deploy: plan: kind byte 0x51 is not a plan's ('P')");
    /* A Deploy plugin's presence byte. */
    sample(WEIR_CLUSTER_DEPLOY, &m);
    uint8_t *f;
    size_t len = encode(&m, &f);
    /* the second plugin ends with its presence byte 0 (the idle timeout's
     * 8 bytes and the state backend's string follow): make it 2 */
    size_t at = len - 9 - 4 - strlen(m.u.deploy.state_backend);
    CHECK_EQ(f[at], 0);
    f[at] = 2;
    weir__cl_msg d;
    CHECK_EQ(weir__cl_decode(f + 4, len - 4, &d, why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, "Deploy: plugins[1].bytes: presence byte 2 is not 0 or 1");
    free(f);
    /* Empty and unknown frames. */
    uint8_t one = 0x7F;
    CHECK_EQ(weir__cl_decode(&one, 0, &d, why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, "empty frame");
    CHECK_EQ(weir__cl_decode(&one, 1, &d, why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, "unknown message kind 0x7f");
    /* A payload past the frame cap (kind byte included), refused on its
     * length before a byte past the kind is read (so the buffer may be
     * shorter than the length claims). */
    uint8_t big[16] = {WEIR_CLUSTER_HEARTBEAT};
    CHECK_EQ(weir__cl_decode(big, WEIR_CLUSTER_FRAME_MAX + 1, &d, why, sizeof(why)), -EMSGSIZE);
    CHECK_HAS(why, "Heartbeat: 268435457 bytes exceed the 268435456-byte frame cap");
    /* A cut epoch. */
    uint8_t fenced[5] = {WEIR_CLUSTER_HEARTBEAT_ACK, 0, 0, 0, 0};
    CHECK_EQ(weir__cl_decode(fenced, sizeof(fenced), &d, why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, "HeartbeatAck: epoch: cut short (4 of 8 bytes)");
    /* why may be absent. */
    CHECK_EQ(weir__cl_decode(fenced, sizeof(fenced), &d, NULL, 0), -EBADMSG);
    weir_frame_builder_close(&fb);
}

/* ---- versions ---------------------------------------------------------------------------- */
TEST(version_negotiation)
{
    char why[256];
    CHECK_EQ(weir__cl_version_check("coordinator", 1, 1, "worker", 1, 1, why, sizeof(why)), 0);
    /* Overlapping ranges, either way round. */
    CHECK_EQ(weir__cl_version_check("coordinator", 3, 2, "worker", 2, 1, why, sizeof(why)), 0);
    CHECK_EQ(weir__cl_version_check("worker", 2, 1, "coordinator", 3, 2, why, sizeof(why)), 0);
    /* The peer is too old for this node. */
    CHECK_EQ(weir__cl_version_check("coordinator", 3, 3, "worker", 2, 1, why, sizeof(why)),
             -EPROTONOSUPPORT);
    CHECK_HAS(why, "the worker speaks version 2");
    CHECK_HAS(why, "this coordinator speaks 3");
    CHECK_HAS(why, "upgrade the worker");
    /* This node is too old for the peer: the same pair seen from the other side. */
    CHECK_EQ(weir__cl_version_check("worker", 2, 1, "coordinator", 3, 3, why, sizeof(why)),
             -EPROTONOSUPPORT);
    CHECK_HAS(why, "this worker speaks version 2");
    CHECK_HAS(why, "the coordinator speaks 3");
    CHECK_HAS(why, "upgrade this worker");
    /* A one-sided check would pass this pair: the client reads 1..2, but
     * the coordinator no longer talks to 2. */
    CHECK_EQ(weir__cl_version_check("coordinator", 4, 3, "client", 2, 1, why, sizeof(why)),
             -EPROTONOSUPPORT);
    CHECK_HAS(why, "upgrade the client");
    /* Malformed ranges. */
    CHECK_EQ(weir__cl_version_check("coordinator", 1, 1, "worker", 0, 0, why, sizeof(why)),
             -EBADMSG);
    CHECK_HAS(why, "the worker declares protocol version 0");
    CHECK_EQ(weir__cl_version_check("coordinator", 1, 1, "worker", 2, 3, why, sizeof(why)),
             -EBADMSG);
    CHECK_EQ(weir__cl_version_check("coordinator", 1, 2, "worker", 1, 1, why, sizeof(why)),
             -EBADMSG);
    CHECK_HAS(why, "this coordinator declares");
    /* This build is compatible with itself. */
    CHECK_EQ(weir__cl_version_check(
                 "coordinator", WEIR_CLUSTER_PROTO_VERSION, WEIR_CLUSTER_PROTO_MIN_COMPAT, "worker",
                 WEIR_CLUSTER_PROTO_VERSION, WEIR_CLUSTER_PROTO_MIN_COMPAT, why, sizeof(why)),
             0);

    /* The versions of every handshake kind, read before the rest. */
    int hs[] = {WEIR_CLUSTER_REGISTER, WEIR_CLUSTER_REGISTER_ACK, WEIR_CLUSTER_HELLO_CLIENT,
                WEIR_CLUSTER_HELLO_CLIENT_ACK};
    for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
        weir__cl_msg m;
        sample(hs[i], &m);
        uint8_t *f;
        size_t len = encode(&m, &f);
        uint32_t v, min;
        CHECK_EQ(weir__cl_peek_versions(f + 4, len - 4, &v, &min), 0);
        const uint32_t *want = hs[i] == WEIR_CLUSTER_REGISTER       ? &m.u.reg.version
                               : hs[i] == WEIR_CLUSTER_REGISTER_ACK ? &m.u.reg_ack.version
                               : hs[i] == WEIR_CLUSTER_HELLO_CLIENT ? &m.u.hello.version
                                                                    : &m.u.hello_ack.version;
        CHECK_EQ(v, want[0]);
        CHECK_EQ(min, want[1]);
        /* A future version's rest need not decode: the versions still read. */
        size_t head = hs[i] == WEIR_CLUSTER_REGISTER_ACK ? 17 : 9;
        CHECK_EQ(weir__cl_peek_versions(f + 4, head, &v, &min), 0);
        CHECK_EQ(weir__cl_peek_versions(f + 4, head - 1, &v, &min), -EBADMSG);
        free(f);
    }
    uint8_t hb[9] = {WEIR_CLUSTER_HEARTBEAT};
    uint32_t v, min;
    CHECK_EQ(weir__cl_peek_versions(hb, sizeof(hb), &v, &min), -EINVAL);
}

/* ---- allocation failures ----------------------------------------------------------------- */
TEST(every_allocation_failure_is_an_error)
{
    for (size_t k = 0; k < NKINDS; k++) {
        weir__cl_msg m, d;
        sample(all_kinds[k], &m);
        uint8_t *f;
        size_t len = encode(&m, &f);
        char why[256];
        /* Decoding: count the allocations, then fail each in turn. */
        weir__alloc_fail_after(LONG_MAX);
        CHECK_EQ(weir__cl_decode(f + 4, len - 4, &d, why, sizeof(why)), 0);
        weir__cl_msg_free(&d);
        long n = weir__alloc_fail_after(-1);
        for (long i = 0; i < n; i++) {
            weir__alloc_fail_after(i);
            int e = weir__cl_decode(f + 4, len - 4, &d, why, sizeof(why));
            weir__alloc_fail_after(-1);
            if (e != -ENOMEM)
                TEST__FAIL("%s: allocation %ld of %ld failed, decode gave %d",
                           weir__cl_kind_name(all_kinds[k]), i, n, e);
            CHECK_HAS(why, "out of memory");
            CHECK_EQ(d.kind, 0);
        }
        /* The older peer's frames allocate their defaults: fail those too. */
        for (size_t cut = 0; cut < len - 4; cut++) {
            char w2[256];
            if (weir__cl_decode(f + 4, cut, &d, w2, sizeof(w2)) != 0)
                continue;
            weir__cl_msg_free(&d);
            weir__alloc_fail_after(LONG_MAX);
            CHECK_EQ(weir__cl_decode(f + 4, cut, &d, w2, sizeof(w2)), 0);
            weir__cl_msg_free(&d);
            long nc = weir__alloc_fail_after(-1);
            for (long i = 0; i < nc; i++) {
                weir__alloc_fail_after(i);
                int e = weir__cl_decode(f + 4, cut, &d, w2, sizeof(w2));
                weir__alloc_fail_after(-1);
                CHECK_EQ(e, -ENOMEM);
            }
        }
        /* Encoding. */
        weir_frame_builder fb;
        weir__alloc_fail_after(LONG_MAX);
        CHECK_EQ(weir__cl_encode(&m, &fb, why, sizeof(why)), 0);
        weir_frame_builder_close(&fb);
        n = weir__alloc_fail_after(-1);
        CHECK_GT(n, 0);
        for (long i = 0; i < n; i++) {
            weir__alloc_fail_after(i);
            int e = weir__cl_encode(&m, &fb, why, sizeof(why));
            weir_frame_builder_close(&fb);
            weir__alloc_fail_after(-1);
            CHECK_EQ(e, -ENOMEM);
        }
        free(f);
    }
}

TEST_MAIN()
