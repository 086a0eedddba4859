/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wordcount_job.c - word count as a job plugin (docs/jobs.md).
 *
 *     weir run build/release/examples/wordcount_job.so [--parallelism N] [FILE]
 *
 * Reads FILE (default: a few built-in lines), splits it into words, counts
 * each word in keyed value state and prints "<word> <count>" once for
 * every word at the end of input (weir_keys_iterate from finish(): one
 * walk over the counts, whatever the number of distinct words). Built like
 * any out-of-tree job, with weir_add_job.
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

/* A word record: the word's bytes (at most 256). */
static int split(weir_ctx *ctx, const weir_rec *in, void *arg)
{
    (void)arg;
    const char *s = in->data;
    char word[256];
    for (size_t i = 0; i < in->len;) {
        while (i < in->len && !isalnum((unsigned char)s[i]))
            i++;
        size_t start = i;
        while (i < in->len && isalnum((unsigned char)s[i]) && i - start < sizeof(word))
            word[i - start] = (char)tolower((unsigned char)s[i]), i++;
        if (i > start) {
            int e = weir_emit(ctx, word, i - start, in->ts);
            if (e)
                return e;
        }
    }
    return 0;
}

static int word_key(const weir_rec *in, void *arg, const void **key, size_t *len)
{
    (void)arg;
    *key = in->data;
    *len = in->len;
    return 0;
}

/* Each word's running count is its value of the state "n"; nothing is
 * emitted per record. */
static int count_process(weir_ctx *ctx, void *state, const weir_rec *in)
{
    (void)state, (void)in;
    const void *v;
    size_t len;
    int64_t n = 0;
    int e = weir_value_get(ctx, "n", &v, &len);
    if (e == 0)
        memcpy(&n, v, sizeof(n));
    else if (e != -ENOENT)
        return e;
    n++;
    return weir_value_put(ctx, "n", &n, sizeof(n));
}

/* At the end of input, once per word (the current key): a count record,
 * the 8-byte count then the word. */
static int emit_count(weir_ctx *ctx, const void *word, size_t len, void *arg)
{
    (void)arg;
    const void *v;
    size_t vlen;
    int e = weir_value_get(ctx, "n", &v, &vlen);
    if (e)
        return e;
    char rec[8 + 256];
    memcpy(rec, v, 8);
    memcpy(rec + 8, word, len);
    return weir_emit(ctx, rec, 8 + len, 0);
}

static int count_finish(weir_ctx *ctx, void *state)
{
    (void)state;
    return weir_keys_iterate(ctx, "n", emit_count, NULL);
}

static const weir_op_def count_def = {.process = count_process, .finish = count_finish};

/* ---- sink: "<word> <count>" per word ------------------------------------------------------ */

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
    s = weir_stream_process(s, "count", &count_def, NULL);
    return weir_stream_sink(s, "print", &print_def, NULL) < 0 ? -EINVAL : 0;
}

WEIR_REGISTER_JOB("wordcount", "1.0", define);
