/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_keyed.c - keyed state across runs and the keys of a state
 * (weir/stream.h): two named states written in one order, checkpointed,
 * and restored into a run that touches them in the other order, at the
 * same and at another parallelism; a snapshot of the old format refused;
 * weir_keys_iterate as the per-key end of input (one result per key, keys
 * in order, state changed during the walk, an early stop, bad calls), and
 * the same across a checkpoint and a rescaled restore.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "stream/ckpt_files.h"
#include "test.h"
#include "test_rt.h"
#include "weir/rt.h"
#include "weir/state.h"
#include "weir/stream.h"

static intptr_t on_runtime(weir_task_fn fn, void *arg)
{
    return test_run_on_rt(2, fn, arg);
}

static char base[64];

static void setup(void)
{
    strcpy(base, "/tmp/weir-keyed-XXXXXX");
    CHECK(mkdtemp(base) != NULL);
}

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    CHECK_EQ(system(cmd), 0);
}

/* ---- a source (one subtask): keys [first, first + n), key k k % reps_mod + 1 times ---------- */
typedef struct src_cfg {
    uint64_t first, n;
    int reps_mod;       /* key k comes k % reps_mod + 1 times (0: once) */
    int wait_completed; /* then wait for a completed checkpoint before ending */
} src_cfg;

/* The real next: emit once, then (optionally) wait for a checkpoint. */
typedef struct src_state {
    const src_cfg *c;
    int sent;
    int64_t deadline;
} src_state;

static int gen_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    src_state *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->c = arg;
    *state = s;
    return 0;
}

static int gen_next(weir_ctx *ctx, void *state)
{
    src_state *s = state;
    const src_cfg *c = s->c;
    if (!s->sent) {
        for (uint64_t k = c->first; k < c->first + c->n; k++) {
            int reps = c->reps_mod ? (int)(k % (uint64_t)c->reps_mod) + 1 : 1;
            for (int r = 0; r < reps; r++) {
                int e = weir_emit(ctx, &k, sizeof(k), (int64_t)k);
                if (e)
                    return e;
            }
        }
        s->sent = 1;
        s->deadline = weir_time_after_ms(30000);
        return !c->wait_completed;
    }
    /* A checkpoint of this run completed: it holds every record. */
    if (weir_ctx_completed(ctx) > weir_ctx_restored(ctx))
        return 1;
    if (weir_time_now() > s->deadline)
        return weir_fail(ctx, -ETIMEDOUT, "no checkpoint completed in 30 s");
    weir_time_sleep(WEIR_MSEC);
    return 0;
}

static const weir_source_def gen_def = {
    .open = gen_open, .next = gen_next, .close = free, .max_out_of_orderness = -1};

static int u64_key(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = in->data;
    *len = sizeof(uint64_t);
    return 0;
}

static uint64_t key_of(weir_ctx *ctx)
{
    size_t len;
    const void *k = weir_ctx_key(ctx, &len);
    CHECK(k != NULL);
    CHECK_EQ(len, 8);
    uint64_t v;
    memcpy(&v, k, 8);
    return v;
}

static int run_job(weir_job *j, const weir_run_opts *o)
{
    int e = weir_job_run(j, o);
    if (e)
        fprintf(stderr, "run: %s\n", weir_job_error(j));
    return e;
}

/* ---- item 2: state identity does not depend on the order states are touched ---------------- */
/* "a" holds one u64 (3k + 1), "b" two (k, 7k): different values and lengths. */
static int write_ab(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state, (void)in;
    uint64_t k = key_of(ctx), a = 3 * k + 1, b[2] = {k, 7 * k};
    int e = weir_value_put(ctx, "a", &a, sizeof(a));
    return e ? e : weir_value_put(ctx, "b", b, sizeof(b));
}

/* The other order: "b" first. Emits [key][1 if both came back right]. */
static int read_ba(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state, (void)in;
    uint64_t k = key_of(ctx), out[2] = {k, 0};
    const void *v;
    size_t len;
    int ok = 0;
    if (weir_value_get(ctx, "b", &v, &len) == 0 && len == 16) {
        uint64_t b[2];
        memcpy(b, v, 16);
        ok = b[0] == k && b[1] == 7 * k;
    }
    if (ok && weir_value_get(ctx, "a", &v, &len) == 0 && len == 8) {
        uint64_t a;
        memcpy(&a, v, 8);
        ok = a == 3 * k + 1;
    } else {
        ok = 0;
    }
    out[1] = (uint64_t)ok;
    return weir_emit(ctx, out, sizeof(out), in->ts);
}

typedef struct order_case {
    int par1, par2;
} order_case;

#define NKEYS 200

static intptr_t order_swap_main(void *arg)
{
    const order_case *oc = arg;
    setup();
    /* Run 1: a then b for every key, checkpointed, ended once a checkpoint holding all completed.
     */
    src_cfg c1 = {.first = 0, .n = NKEYS, .wait_completed = 1};
    weir_job *j = weir_job_new("order");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, &c1), 1);
    s = weir_stream_key_by(s, u64_key, NULL);
    CHECK_EQ(weir_stream_sink(s, "state", &(weir_op_def){.process = write_ab}, NULL), 0);
    CHECK_EQ(run_job(j, &(weir_run_opts){.parallelism = oc->par1,
                                         .checkpoint_dir = base,
                                         .checkpoint_interval_ms = 5,
                                         .retain = 2}),
             0);
    weir_ckpt_stats st;
    weir_job_ckpt_stats(j, &st);
    CHECK_GE(st.completed, 2); /* one holding all, and the final one */
    test_drop_checkpoint(base, st.latest);
    weir_job_free(j);

    /* Run 2: restored at par2, b touched first for every key. */
    src_cfg c2 = {.first = 0, .n = NKEYS};
    weir_collector *col = weir_collector_new();
    j = weir_job_new("order");
    s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, &c2), 1);
    s = weir_stream_key_by(s, u64_key, NULL);
    s = weir_stream_process(s, "state", &(weir_op_def){.process = read_ba}, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", col), 0);
    CHECK_EQ(
        run_job(j, &(weir_run_opts){.parallelism = oc->par2, .checkpoint_dir = base, .restore = 1}),
        0);
    weir_job_ckpt_stats(j, &st);
    CHECK_GT(st.restored, 0);
    CHECK_EQ(weir_collector_count(col), NKEYS);
    int seen[NKEYS] = {0};
    for (size_t i = 0; i < weir_collector_count(col); i++) {
        uint64_t r[2];
        memcpy(r, weir_collector_get(col, i)->data, 16);
        CHECK_LT(r[0], NKEYS);
        CHECK_EQ(r[1], 1); /* both states back, each with its own bytes */
        seen[r[0]]++;
    }
    for (int k = 0; k < NKEYS; k++)
        CHECK_EQ(seen[k], 1);
    weir_collector_free(col);
    weir_job_free(j);
    cleanup();
    return 0;
}

TEST(states_restored_whatever_order_they_are_touched_in)
{
    static const order_case cases[] = {{2, 2}, {2, 3}, {3, 1}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        CHECK_EQ(on_runtime(order_swap_main, (void *)&cases[i]), 0);
}

/* A snapshot of the format before state names (version 1) is refused, not misread. */
TEST(snapshot_of_the_old_format_is_refused)
{
    setup();
    char path[128];
    snprintf(path, sizeof(path), "%s/old.state", base);
    weir_state_backend *b = weir_state_memory_new(WEIR_KEY_GROUPS, 0, WEIR_KEY_GROUPS);
    CHECK(b != NULL);
    CHECK_EQ(weir_state_put(b, 5, "\0\0\0\0\1k", 6, "v", 1), 0);
    weir_state_snapshot *snap;
    CHECK_EQ(weir_state_capture(b, 1, &snap), 0);
    CHECK_EQ(weir_state_persist(snap, path), 0);
    weir_state_snapshot_free(snap);
    /* The same file claiming version 1, with a checksum that matches. */
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof(buf), f);
    CHECK_GT(n, 20);
    CHECK_LT(n, sizeof(buf));
    buf[8] = 0, buf[9] = 0, buf[10] = 0, buf[11] = 1;
    uint64_t h = XXH64(buf, n - 8, 0);
    for (int i = 0; i < 8; i++)
        buf[n - 8 + (size_t)i] = (uint8_t)(h >> (56 - 8 * i));
    rewind(f);
    CHECK_EQ(fwrite(buf, 1, n, f), n);
    CHECK_EQ(fclose(f), 0);
    weir_state_backend *r = weir_state_memory_new(WEIR_KEY_GROUPS, 0, WEIR_KEY_GROUPS);
    CHECK(r != NULL);
    char why[256];
    CHECK_EQ(weir_state_restore(r, path, why, sizeof(why)), -EBADMSG);
    CHECK(strstr(why, "version 1") != NULL);
    CHECK_EQ(weir_state_entries(r, 5), 0);
    weir_state_backend_free(r);
    weir_state_backend_free(b);
    cleanup();
}

/* ---- item 7: the keys of a state, as the per-key end of input ------------------------------- */
/* Counts per key in value state "n", and each record's timestamp % 3 in map
 * state "m" (several entries per key); finish() emits [key][count][map
 * entries][subtask] once per key through weir_keys_iterate. */
typedef struct walk {
    int visits;
    int clear; /* clear "n" of each key visited */
    uint64_t last_kg, last_key;
} walk;

static int count_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state;
    const void *v;
    size_t len;
    uint64_t n = 0;
    int e = weir_value_get(ctx, "n", &v, &len);
    if (e == 0)
        memcpy(&n, v, 8);
    else if (e != -ENOENT)
        return e;
    n++;
    uint8_t uk = (uint8_t)(in->ts % 3);
    e = weir_value_put(ctx, "n", &n, 8);
    return e ? e : weir_map_put(ctx, "m", &uk, 1, "", 0);
}

static int count_entry(void *arg, const void *ukey, size_t uklen, const void *val, size_t len)
{
    (void)ukey, (void)uklen, (void)val, (void)len;
    ++*(uint64_t *)arg;
    return 0;
}

static int emit_final(weir_ctx *ctx, const void *key, size_t len, void *arg)
{
    walk *w = arg;
    CHECK_EQ(len, 8);
    CHECK(weir_ctx_key(ctx, NULL) == key);
    uint64_t k;
    memcpy(&k, key, 8);
    /* Keys in group order, then (all 8 bytes long) byte order within a group. */
    uint64_t kg = (uint64_t)weir_key_group(weir_key_hash(key, len), WEIR_KEY_GROUPS);
    uint8_t be[8], last_be[8];
    for (int i = 0; i < 8; i++)
        be[i] = (uint8_t)(k >> (8 * i)), last_be[i] = (uint8_t)(w->last_key >> (8 * i));
    if (w->visits)
        CHECK(kg > w->last_kg || (kg == w->last_kg && memcmp(last_be, be, 8) < 0));
    w->last_kg = kg;
    w->last_key = k;
    const void *v;
    size_t vl;
    uint64_t out[4] = {k, 0, 0, (uint64_t)weir_ctx_subtask(ctx)};
    if (weir_value_get(ctx, "n", &v, &vl) == 0)
        memcpy(&out[1], v, 8);
    int e = weir_map_iterate(ctx, "m", count_entry, &out[2]);
    if (!e)
        e = weir_emit(ctx, out, sizeof(out), 0);
    if (!e && w->clear)
        e = weir_value_clear(ctx, "n");
    if (e)
        return e;
    w->visits++;
    return 0;
}

static int never(weir_ctx *ctx, const void *key, size_t len, void *arg)
{
    (void)ctx, (void)key, (void)len;
    ++*(int *)arg;
    return 0;
}

static int stop_at_first(weir_ctx *ctx, const void *key, size_t len, void *arg)
{
    (void)ctx, (void)key, (void)len;
    ++*(int *)arg;
    return 7;
}

static int count_finish(weir_ctx *ctx, void *state)
{
    (void)state;
    CHECK_EQ(weir_keys_iterate(ctx, NULL, never, NULL), -EINVAL);
    CHECK_EQ(weir_keys_iterate(ctx, "n", NULL, NULL), -EINVAL);
    /* A walk that stops early returns what fn returned. */
    int visits = 0;
    int e = weir_keys_iterate(ctx, "m", stop_at_first, &visits);
    CHECK(e == 7 || (e == 0 && visits == 0));
    CHECK_LE(visits, 1);
    /* The per-key end of input: one result per key, clearing as it goes. */
    walk w = {.clear = 1};
    if ((e = weir_keys_iterate(ctx, "n", emit_final, &w)) != 0)
        return e;
    /* No current key after the walk; every "n" is gone, "m" is still there. */
    CHECK(weir_ctx_key(ctx, NULL) == NULL);
    int left = 0;
    CHECK_EQ(weir_keys_iterate(ctx, "n", never, &left), 0);
    CHECK_EQ(left, 0);
    CHECK_EQ(weir_keys_iterate(ctx, "none", never, &left), 0);
    CHECK_EQ(left, 0);
    return 0;
}

static const weir_op_def count_def = {.process = count_process, .finish = count_finish};

/* The first-run finish only checks: the final results come from the second run. */
static int quiet_finish(weir_ctx *ctx, void *state)
{
    (void)ctx, (void)state;
    return 0;
}

static const weir_op_def count_quiet_def = {.process = count_process, .finish = quiet_finish};

static uint64_t reps(uint64_t k, int mod)
{
    return mod ? k % (uint64_t)mod + 1 : 1;
}

static void check_results(weir_collector *col, uint64_t nkeys, const uint64_t *want_n,
                          const uint64_t *want_m, int par)
{
    CHECK_EQ(weir_collector_count(col), nkeys); /* one per key, whatever its updates */
    int *seen = calloc(nkeys, sizeof(int));
    CHECK(seen != NULL);
    for (size_t i = 0; i < weir_collector_count(col); i++) {
        uint64_t r[4];
        memcpy(r, weir_collector_get(col, i)->data, sizeof(r));
        CHECK_LT(r[0], nkeys);
        CHECK_EQ(r[1], want_n[r[0]]);
        CHECK_EQ(r[2], want_m[r[0]]);
        /* Visited by the subtask that owns the key. */
        int kg = weir_key_group(weir_key_hash(&r[0], 8), WEIR_KEY_GROUPS);
        CHECK_EQ(r[3], (uint64_t)weir_key_group_owner(kg, par, WEIR_KEY_GROUPS));
        seen[r[0]]++;
    }
    for (uint64_t k = 0; k < nkeys; k++)
        CHECK_EQ(seen[k], 1);
    free(seen);
}

static intptr_t keys_main(void *arg)
{
    int par = (int)(intptr_t)arg;
    enum { N = 500, MOD = 5 };
    src_cfg c = {.first = 0, .n = N, .reps_mod = MOD};
    weir_collector *col = weir_collector_new();
    weir_job *j = weir_job_new("keys");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, &c), 1);
    s = weir_stream_key_by(s, u64_key, NULL);
    s = weir_stream_process(s, "count", &count_def, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", col), 0);
    CHECK_EQ(run_job(j, &(weir_run_opts){.parallelism = par}), 0);
    uint64_t want_n[N], want_m[N];
    for (uint64_t k = 0; k < N; k++) {
        want_n[k] = reps(k, MOD);
        want_m[k] = 1; /* every record of key k has timestamp k */
    }
    check_results(col, N, want_n, want_m, par);
    weir_collector_free(col);
    weir_job_free(j);
    return 0;
}

TEST(keys_iterate_gives_one_result_per_key_at_end_of_input)
{
    for (int par = 1; par <= 3; par += 2)
        CHECK_EQ(on_runtime(keys_main, (void *)(intptr_t)par), 0);
}

/* Outside a keyed operator the walk is refused. */
static int unkeyed_finish(weir_ctx *ctx, void *state)
{
    (void)state;
    int n = 0;
    CHECK_EQ(weir_keys_iterate(ctx, "n", never, &n), -EINVAL);
    CHECK_EQ(n, 0);
    return 0;
}

static int drop(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx, (void)state, (void)in;
    return 0;
}

static intptr_t unkeyed_main(void *arg)
{
    (void)arg;
    src_cfg c = {.first = 0, .n = 10};
    weir_job *j = weir_job_new("unkeyed");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, &c), 1);
    CHECK_EQ(weir_stream_sink(s, "sink", &(weir_op_def){.process = drop, .finish = unkeyed_finish},
                              NULL),
             0);
    CHECK_EQ(run_job(j, &(weir_run_opts){.parallelism = 1}), 0);
    weir_job_free(j);
    return 0;
}

TEST(keys_iterate_outside_a_keyed_operator_is_einval)
{
    CHECK_EQ(on_runtime(unkeyed_main, NULL), 0);
}

/* A state name of the wrong length fails the job with a message naming it. */
static int long_name(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state, (void)in;
    char name[WEIR_STATE_NAME_MAX + 2];
    memset(name, 'x', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    CHECK_EQ(weir_value_put(ctx, name, "v", 1), -EINVAL);
    return -EINVAL;
}

/* A name beginning with a control character is weir's own (a window's,
 * a join's, a reduce's state): refused, failing the job, naming why. */
static int own_name(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state, (void)in;
    CHECK_EQ(weir_value_put(ctx, "\x01w", "v", 1), -EINVAL);
    return -EINVAL;
}

static intptr_t own_name_main(void *arg)
{
    (void)arg;
    src_cfg c = {.first = 0, .n = 1};
    weir_job *j = weir_job_new("names");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, &c), 1);
    s = weir_stream_key_by(s, u64_key, NULL);
    CHECK_EQ(weir_stream_sink(s, "named", &(weir_op_def){.process = own_name}, NULL), 0);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.parallelism = 1}), -EINVAL);
    CHECK(strstr(weir_job_error(j), "control character are weir's own") != NULL);
    weir_job_free(j);
    return 0;
}

TEST(state_names_of_weirs_own_operators_are_refused)
{
    CHECK_EQ(on_runtime(own_name_main, NULL), 0);
}

static intptr_t long_name_main(void *arg)
{
    (void)arg;
    src_cfg c = {.first = 0, .n = 1};
    weir_job *j = weir_job_new("names");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, &c), 1);
    s = weir_stream_key_by(s, u64_key, NULL);
    CHECK_EQ(weir_stream_sink(s, "named", &(weir_op_def){.process = long_name}, NULL), 0);
    CHECK_EQ(weir_job_run(j, &(weir_run_opts){.parallelism = 1}), -EINVAL);
    CHECK(strstr(weir_job_error(j), "keyed state name \"xxxx") != NULL);
    CHECK(strstr(weir_job_error(j), "129 bytes (1 to 128)") != NULL);
    weir_job_free(j);
    return 0;
}

TEST(state_name_too_long_fails_the_job_clearly)
{
    CHECK_EQ(on_runtime(long_name_main, NULL), 0);
}

/* Across a checkpoint and a rescaled restore (2 -> 3): keys only the first
 * run saw are visited too, with their restored counts. */
static intptr_t keys_restore_main(void *arg)
{
    (void)arg;
    enum { N = 300, MOD = 3 };
    setup();
    src_cfg c1 = {.first = 0, .n = N, .reps_mod = MOD, .wait_completed = 1};
    weir_job *j = weir_job_new("keys");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, &c1), 1);
    s = weir_stream_key_by(s, u64_key, NULL);
    CHECK_EQ(weir_stream_sink(s, "count", &count_quiet_def, NULL), 0);
    CHECK_EQ(run_job(j, &(weir_run_opts){.parallelism = 2,
                                         .checkpoint_dir = base,
                                         .checkpoint_interval_ms = 5,
                                         .retain = 2}),
             0);
    weir_ckpt_stats st;
    weir_job_ckpt_stats(j, &st);
    test_drop_checkpoint(base, st.latest); /* the final one */
    weir_job_free(j);

    /* Keys [N/2, N + N/2) once more. */
    src_cfg c2 = {.first = N / 2, .n = N};
    weir_collector *col = weir_collector_new();
    j = weir_job_new("keys");
    s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, &c2), 1);
    s = weir_stream_key_by(s, u64_key, NULL);
    s = weir_stream_process(s, "count", &count_def, NULL);
    CHECK_EQ(weir_stream_collect(s, "out", col), 0);
    CHECK_EQ(run_job(j, &(weir_run_opts){.parallelism = 3, .checkpoint_dir = base, .restore = 1}),
             0);
    uint64_t want_n[N + N / 2], want_m[N + N / 2];
    for (uint64_t k = 0; k < N + N / 2; k++) {
        want_n[k] = (k < N ? reps(k, MOD) : 0) + (k >= N / 2 ? 1 : 0);
        want_m[k] = 1;
    }
    check_results(col, N + N / 2, want_n, want_m, 3);
    weir_collector_free(col);
    weir_job_free(j);
    cleanup();
    return 0;
}

TEST(keys_iterate_visits_restored_keys_after_a_rescale)
{
    CHECK_EQ(on_runtime(keys_restore_main, NULL), 0);
}

/* Event-time timers registered per key from finish() (past the final
 * watermark) fire right after it, each with its key current. */
static int arm_final(weir_ctx *ctx, const void *key, size_t len, void *arg)
{
    (void)key, (void)len, (void)arg;
    return weir_timer_register(ctx, WEIR_TIME_EVENT, 1000000 + (int64_t)key_of(ctx));
}

static int arm_finish(weir_ctx *ctx, void *state)
{
    (void)state;
    return weir_keys_iterate(ctx, "n", arm_final, NULL);
}

static _Atomic int64_t fired_sum, fired_n;

static int fired(weir_ctx *ctx, void *state, int domain, int64_t when)
{
    (void)state;
    CHECK_EQ(domain, WEIR_TIME_EVENT);
    CHECK_EQ(when, 1000000 + (int64_t)key_of(ctx));
    atomic_fetch_add(&fired_sum, (int64_t)key_of(ctx));
    atomic_fetch_add(&fired_n, 1);
    return 0;
}

static intptr_t finish_timers_main(void *arg)
{
    (void)arg;
    enum { N = 500 };
    atomic_store(&fired_sum, 0);
    atomic_store(&fired_n, 0);
    src_cfg c = {.first = 0, .n = N, .reps_mod = 2};
    weir_job *j = weir_job_new("finish-timers");
    weir_stream *s = weir_stream_parallelism(weir_job_source(j, "src", &gen_def, &c), 1);
    s = weir_stream_key_by(s, u64_key, NULL);
    CHECK_EQ(weir_stream_sink(
                 s, "count",
                 &(weir_op_def){.process = count_process, .finish = arm_finish, .on_timer = fired},
                 NULL),
             0);
    CHECK_EQ(run_job(j, &(weir_run_opts){.parallelism = 2}), 0);
    CHECK_EQ(atomic_load(&fired_n), N);
    CHECK_EQ(atomic_load(&fired_sum), (int64_t)N * (N - 1) / 2);
    weir_job_free(j);
    return 0;
}

TEST(timers_registered_in_finish_fire)
{
    CHECK_EQ(on_runtime(finish_timers_main, NULL), 0);
}

TEST_MAIN()
