/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wordcount_job.c - word count as a job plugin (docs/jobs.md).
 *
 *     weir run build/release/examples/wordcount_job.so [--parallelism N] [FILE]
 *
 * Reads FILE (default: a few built-in lines), splits it into words, counts
 * each word with a keyed reduce and prints "<word> <count>" for every word
 * at the end of input. Built like any out-of-tree job, with weir_add_job.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/job.h"

static const char *const builtin[] = {
    "the quick brown fox jumps over the lazy dog",
    "the dog sleeps",
    "a fox is quick and a dog is lazy",
};

/* ---- source: the lines of a file (one subtask) or the built-in text -------------------- */

typedef struct lines {
    FILE *f; /* NULL: the built-in lines */
    size_t next;
    char *buf;
    size_t cap;
} lines;

static int lines_open(weir_ctx *ctx, void *arg, void **state)
{
    lines *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    const char *path = arg;
    if (path && !(l->f = fopen(path, "r"))) {
        int e = -errno;
        free(l);
        return weir_fail(ctx, e, "%s: %s", path, strerror(-e));
    }
    *state = l;
    return 0;
}

static int lines_next(weir_ctx *ctx, void *state)
{
    lines *l = state;
    for (int i = 0; i < 64; i++) {
        const char *line;
        size_t len;
        if (l->f) {
            ssize_t n = getline(&l->buf, &l->cap, l->f);
            if (n < 0)
                return 1;
            line = l->buf;
            len = (size_t)n;
        } else {
            if (l->next == sizeof(builtin) / sizeof(builtin[0]))
                return 1;
            line = builtin[l->next];
            len = strlen(line);
        }
        l->next++;
        int e = weir_emit(ctx, line, len, (int64_t)l->next);
        if (e)
            return e;
    }
    return 0;
}

static void lines_close(void *state)
{
    lines *l = state;
    if (l->f)
        fclose(l->f);
    free(l->buf);
    free(l);
}

static const weir_source_def lines_def = {
    .open = lines_open, .next = lines_next, .close = lines_close, .max_out_of_orderness = -1};

/* ---- split, key, count ---------------------------------------------------------------- */

/* A count record: the 8-byte count, then the word. */
static int split(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    const char *s = in->data;
    char rec[8 + 256];
    int64_t one = 1;
    memcpy(rec, &one, 8);
    for (size_t i = 0; i < in->len;) {
        while (i < in->len && !isalnum((unsigned char)s[i]))
            i++;
        size_t start = i;
        while (i < in->len && isalnum((unsigned char)s[i]) && i - start < 256)
            rec[8 + i - start] = (char)tolower((unsigned char)s[i]), i++;
        if (i > start) {
            int e = weir_emit(ctx, rec, 8 + i - start, in->ts);
            if (e)
                return e;
        }
    }
    return 0;
}

static int word_key(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = (const char *)in->data + 8;
    *len = in->len - 8;
    return 0;
}

/* The reduce's output lives until its next call on the same subtask; a
 * subtask runs on one thread and does not yield inside a reduce, so one
 * buffer per thread serves every subtask. */
static _Thread_local char sum_buf[8 + 256];

static int add(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    (void)arg;
    int64_t n = 0, m;
    if (acc)
        memcpy(&n, acc->data, 8);
    memcpy(&m, in->data, 8);
    n += m;
    memcpy(sum_buf, &n, 8);
    memcpy(sum_buf + 8, (const char *)in->data + 8, in->len - 8);
    *out = (weir_rec){.data = sum_buf, .len = in->len, .ts = in->ts};
    return 0;
}

/* ---- sink: the final count of each word, printed at the end ---------------------------- */

static int print_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx;
    (void)state;
    int64_t n;
    memcpy(&n, in->data, 8);
    printf("%.*s %" PRId64 "\n", (int)(in->len - 8), (const char *)in->data + 8, n);
    return 0;
}

static const weir_op_def print_def = {.process = print_process};

/* Keep only each word's last update: the reduce emits every update, so the
 * counts are held and printed at the end of input. */
typedef struct last {
    size_t n, cap;
    char **recs;
    size_t *lens;
} last;

static int last_open(weir_ctx *ctx, void *arg, void **state)
{
    (void)ctx;
    (void)arg;
    return (*state = calloc(1, sizeof(last))) ? 0 : -ENOMEM;
}

static int last_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)ctx;
    last *l = state;
    for (size_t i = 0; i < l->n; i++)
        if (l->lens[i] == in->len &&
            memcmp(l->recs[i] + 8, (const char *)in->data + 8, in->len - 8) == 0) {
            memcpy(l->recs[i], in->data, 8);
            return 0;
        }
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        char **r = realloc(l->recs, cap * sizeof(*r));
        if (!r)
            return -ENOMEM;
        l->recs = r;
        size_t *n = realloc(l->lens, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        l->lens = n;
        l->cap = cap;
    }
    if (!(l->recs[l->n] = malloc(in->len)))
        return -ENOMEM;
    memcpy(l->recs[l->n], in->data, in->len);
    l->lens[l->n++] = in->len;
    return 0;
}

static int last_finish(weir_ctx *ctx, void *state)
{
    last *l = state;
    for (size_t i = 0; i < l->n; i++) {
        int e = weir_emit(ctx, l->recs[i], l->lens[i], 0);
        if (e)
            return e;
    }
    return 0;
}

static void last_close(void *state)
{
    last *l = state;
    for (size_t i = 0; i < l->n; i++)
        free(l->recs[i]);
    free(l->recs);
    free(l->lens);
    free(l);
}

static const weir_op_def last_def = {
    .open = last_open, .process = last_process, .finish = last_finish, .close = last_close};

static int define(weir_job *j, int argc, char **argv)
{
    if (argc > 2) {
        fprintf(stderr, "wordcount: one FILE at most\n");
        return -EINVAL;
    }
    weir_stream *s = weir_job_source(j, "lines", &lines_def, argc > 1 ? argv[1] : NULL);
    s = weir_stream_parallelism(s, 1);
    s = weir_stream_flat_map(s, "split", split, NULL);
    s = weir_stream_key_by(s, word_key, NULL);
    s = weir_stream_reduce(s, "count", add, NULL);
    s = weir_stream_process(s, "latest", &last_def, NULL);
    return weir_stream_sink(s, "print", &print_def, NULL) < 0 ? -EINVAL : 0;
}

WEIR_REGISTER_JOB("wordcount", "1.0", define);
