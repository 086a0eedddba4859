/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progress.c - the live progress line of `weir run` and `weir submit`: a
 * fiber that once a second asks the coordinator for the job in detail
 * (DescribeJob: the JSON of GET /api/v1/jobs/ID, docs/api.md) over a
 * client of its own and rewrites one line on stderr:
 *
 *   [   12s] sources 120000 rec (10.0k/s)  sinks 119000 rec (10.0k/s)
 *           backpressure 93% at parse  watermark lag 1.2 s  checkpoint 14 (5 ms)
 *
 * (on one line): records out of the sources and into the sinks with their
 * rates, the operator whose busiest subtask waited longest for credits in
 * the last second (backpressure: what is downstream of it is the
 * bottleneck), the sinks' watermark as its lag behind the wall clock when
 * it reads as wall-clock time (else its value), and the latest completed
 * checkpoint. It only reads, so the job runs the same with or without it;
 * a coordinator it cannot reach (a leader changing) leaves the line as it
 * was until the next second, and one too old to describe a job (protocol
 * version 2) gets no line.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cli/cli.h"
#include "weir/rt.h"

struct weir__cli_progress {
    int (*open)(void *arg, weir__client **c, char *msg, size_t cap);
    void *arg;
    _Atomic uint64_t job; /* 0 until submitted */
    int64_t t0;
    _Atomic int printed; /* a line is on the terminal: stop clears it */
    weir_task *task;
};

static double num(const json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

/* The line for the job's detail d into buf. */
static void format_line(const json_t *d, double secs, char *buf, size_t cap)
{
    const json_t *ops = json_object_get(d, "operators");
    const json_t *plan = json_object_get(json_object_get(d, "plan"), "operators");
    double in = 0, rin = 0, out = 0, rout = 0, bp = 0;
    const char *bp_op = NULL;
    const json_t *wm = NULL, *lag = NULL;
    size_t i;
    const json_t *o;
    json_array_foreach(ops, i, o)
    {
        const char *kind = json_string_value(json_object_get(json_array_get(plan, i), "kind"));
        if (kind && strcmp(kind, "source") == 0) {
            in += num(o, "records_out");
            rin += num(o, "records_out_per_s");
        } else if (kind && strcmp(kind, "sink") == 0) {
            out += num(o, "records_in");
            rout += num(o, "records_in_per_s");
            const json_t *w = json_object_get(o, "watermark");
            if (!wm || (json_is_integer(w) &&
                        (!json_is_integer(wm) || json_integer_value(w) < json_integer_value(wm)))) {
                wm = w;
                lag = json_object_get(o, "watermark_lag_ms");
            }
        }
        if (num(o, "backpressure") > bp) {
            bp = num(o, "backpressure");
            bp_op = json_string_value(json_object_get(o, "name"));
        }
    }
    char b[24], e[24], w[48] = "-", k[48] = "-", p[300] = "";
    if (json_is_integer(lag))
        snprintf(w, sizeof(w), "lag %.1f s", (double)json_integer_value(lag) / 1e3);
    else if (json_is_integer(wm))
        snprintf(w, sizeof(w), "%" JSON_INTEGER_FORMAT, json_integer_value(wm));
    else if (json_is_string(wm))
        snprintf(w, sizeof(w), "end");
    const json_t *ck = json_object_get(d, "checkpoints");
    if (num(ck, "latest") > 0)
        snprintf(k, sizeof(k), "%.0f (%.0f ms)", num(ck, "latest"), num(ck, "last_duration_ms"));
    if (bp_op && bp >= 0.01)
        snprintf(p, sizeof(p), "  backpressure %.0f%% at %.200s", 100 * bp, bp_op);
    const char *state = json_string_value(json_object_get(d, "state"));
    snprintf(buf, cap,
             "[%5.0fs] sources %.0f rec (%s/s)  sinks %.0f rec (%s/s)%s  watermark %s  checkpoint "
             "%s%s%s",
             secs, in, weir__cli_fmt_rate(rin, b, sizeof(b)), out,
             weir__cli_fmt_rate(rout, e, sizeof(e)), p, w, k,
             state && strcmp(state, "running") ? "  " : "",
             state && strcmp(state, "running") ? state : "");
}

static intptr_t progress_main(void *arg)
{
    weir__cli_progress *pr = arg;
    weir__client *c = NULL;
    char msg[512], line[1024];
    while (weir_time_sleep(WEIR_SEC) == 0) {
        uint64_t job = atomic_load(&pr->job);
        if (!job)
            continue;
        if (!c && pr->open(pr->arg, &c, msg, sizeof(msg)) < 0) {
            c = NULL;
            continue;
        }
        weir__cl_job_detail d;
        int e = weir__client_describe(c, job, &d, weir_time_after_ms(5000), msg, sizeof(msg));
        if (e == -EPROTONOSUPPORT)
            break; /* a coordinator too old to describe a job: no line */
        if (e < 0) {
            weir__client_close(c);
            c = NULL;
            continue;
        }
        json_t *o = d.status == WEIR__CL_DETAIL_OK ? json_loads(d.json, 0, NULL) : NULL;
        weir__client_detail_free(&d);
        if (!o)
            continue;
        format_line(o, (double)(weir_time_now() - pr->t0) / 1e9, line, sizeof(line));
        json_decref(o);
        /* \r and erase-line: the line is rewritten in place */
        fprintf(stderr, "\r\033[K%s", line);
        fflush(stderr);
        atomic_store_explicit(&pr->printed, 1, memory_order_relaxed);
    }
    if (c)
        weir__client_close(c);
    return 0;
}

weir__cli_progress *
weir__cli_progress_start(int (*open)(void *arg, weir__client **c, char *msg, size_t cap), void *arg)
{
    weir__cli_progress *pr = weir__calloc(1, sizeof(*pr));
    if (!pr)
        return NULL;
    pr->open = open;
    pr->arg = arg;
    pr->t0 = weir_time_now();
    pr->task = weir_task_spawn(progress_main, pr,
                               &(weir_spawn_opts){.name = "progress", .stack_size = 128 << 10});
    if (!pr->task) {
        weir__free(pr);
        return NULL;
    }
    return pr;
}

void weir__cli_progress_job(weir__cli_progress *pr, uint64_t job)
{
    if (pr)
        atomic_store(&pr->job, job);
}

void weir__cli_progress_stop(weir__cli_progress *pr)
{
    if (!pr)
        return;
    weir_task_cancel(pr->task);
    weir_task_join(pr->task, NULL, WEIR_FOREVER);
    if (atomic_load_explicit(&pr->printed, memory_order_relaxed))
        fputs("\r\033[K", stderr);
    weir__free(pr);
}
