/* SPDX-License-Identifier: Apache-2.0 */
/*
 * weir/resil.h - resilience utilities for code that calls services which
 * fail: a circuit breaker, retry with exponential backoff and jitter, and a
 * PID controller. Each stands alone; callers compose them (a retried
 * function that asks a breaker first, a controller that sizes a pool).
 *
 * Circuit breaker. Stops calling a service that keeps failing, so that the
 * callers fail fast instead of piling up on timeouts, and lets one trial
 * call through now and then to find out whether it has recovered:
 *
 *     CLOSED --(threshold consecutive failures)--> OPEN
 *     OPEN --(cooldown passed, next allow())--> HALF_OPEN (one probe admitted)
 *     HALF_OPEN --(success)--> CLOSED      HALF_OPEN --(failure)--> OPEN
 *
 * A caller asks weir_breaker_allow() before each call and reports the
 * outcome with weir_breaker_success() or weir_breaker_failure(). The
 * breaker is one lock-protected object shared by tasks on any scheduler
 * thread; nothing in it suspends, so it works the same from fibers,
 * stackless tasks and plain threads.
 *
 * Retry. weir_retry_run() calls a function until it succeeds, the attempts
 * are spent, a predicate declares the error permanent, the deadline comes or
 * the task is cancelled. Between attempts it sleeps with weir_time_sleep_until,
 * which suspends the task, never the thread. Delays grow exponentially with
 * "full jitter": before retry k (k = 0 for the second attempt) the delay is
 * drawn uniformly from [0, min(max_delay, initial_delay * multiplier^k)], so
 * that many callers failing together do not retry in lockstep. A stackless
 * task drives the same schedule itself with a weir_retry state object
 * (weir_retry_init / weir_retry_next) and a sleep op; see docs/resilience.md.
 *
 * PID controller. Plain arithmetic over a caller-owned struct, for steering
 * a measured signal (a queue's fill ratio, a latency) towards a setpoint:
 * the output is clamped to [out_min, out_max] and the integral term does not
 * wind up while the output is saturated.
 *
 * Time. Breaker and retry read the time through a weir_resil_clock_fn,
 * CLOCK_MONOTONIC nanoseconds (weir_time_now) unless the options name
 * another clock; retry also takes a sleep hook. Tests pass a fake clock and
 * a fake sleep to run long schedules in no time.
 *
 * Errors. Functions return 0 or a negative errno; weir_breaker_new returns
 * NULL and sets errno. Options are checked before use: a bad field gives
 * -EINVAL (EINVAL), and the *_check functions return a sentence naming the
 * field, for configuration loaders that report to a user.
 */
#ifndef WEIR_RESIL_H
#define WEIR_RESIL_H

#include <stdint.h>

#include "rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Now, in nanoseconds on the clock deadlines use (CLOCK_MONOTONIC unless
 * both clock and deadlines come from a test). Must be thread-safe when the
 * object using it is shared between threads. */
typedef int64_t (*weir_resil_clock_fn)(void *arg);

/* ---- circuit breaker ----------------------------------------------------------------------- */
typedef enum weir_breaker_state {
    WEIR_BREAKER_CLOSED = 0,    /* calls go through; failures are counted */
    WEIR_BREAKER_OPEN = 1,      /* calls are rejected until the cooldown has passed */
    WEIR_BREAKER_HALF_OPEN = 2, /* one probe call is out; the rest are rejected */
} weir_breaker_state;

#define WEIR_BREAKER_THRESHOLD_DEFAULT 5
#define WEIR_BREAKER_COOLDOWN_DEFAULT  (30 * WEIR_SEC)

typedef struct weir_breaker_opts {
    /* Consecutive failures, while closed, that open the breaker. 0 = 5. */
    int failure_threshold;
    /* How long the breaker stays open before it admits a probe, ns. 0 = 30 s. */
    int64_t cooldown_ns;
    /* NULL = weir_time_now. Called outside the breaker's lock. */
    weir_resil_clock_fn clock;
    void *clock_arg;
} weir_breaker_opts;

/* Counters since weir_breaker_new. Transitions are counted where they
 * happen: an open breaker whose cooldown has passed still reads OPEN until
 * the next weir_breaker_allow() moves it to HALF_OPEN. */
typedef struct weir_breaker_stats {
    weir_breaker_state state;
    int consecutive_failures; /* while closed */
    uint64_t allowed;         /* allow() returned 0 (probes included) */
    uint64_t rejected;        /* allow() returned -EAGAIN */
    uint64_t probes;          /* calls admitted as half-open probes */
    uint64_t successes;       /* success() reports, all states */
    uint64_t failures;        /* failure() reports, all states */
    uint64_t ignored;         /* reports that arrived while open, and so had no effect */
    uint64_t closed_to_open;
    uint64_t open_to_half_open;
    uint64_t half_open_to_closed;
    uint64_t half_open_to_open;
} weir_breaker_stats;

typedef struct weir_breaker weir_breaker;

/* NULL when the options are valid, else a static sentence naming the bad
 * field. opts NULL is valid (all defaults). */
const char *weir_breaker_opts_check(const weir_breaker_opts *opts);
/* opts may be NULL (defaults); copied. NULL with errno EINVAL (bad option,
 * see weir_breaker_opts_check) or ENOMEM. Free with weir_breaker_free once
 * no caller uses it. */
weir_breaker *weir_breaker_new(const weir_breaker_opts *opts);
void weir_breaker_free(weir_breaker *b);

/*
 * May a call go out now? 0: make the call, then report its outcome.
 * -EAGAIN: the breaker is open, or half-open with its probe still out;
 * fail fast and try again later. -EAGAIN is the breaker's only refusal; a
 * function wrapped in weir_retry_run returns it as is and lets
 * should_retry decide whether waiting for the breaker is worth it.
 *
 * When the cooldown has passed, the first allow() moves the breaker to
 * HALF_OPEN and admits that caller alone as the probe. A probe that never
 * reports (its task was cancelled mid-call) does not wedge the breaker:
 * after another cooldown without a report the next allow() admits a new
 * probe.
 */
int weir_breaker_allow(weir_breaker *b);
/*
 * Report the outcome of an admitted call. Reports are not tied to
 * admissions: while closed, a success resets the consecutive-failure count
 * and a failure adds to it; while half-open, the first report decides (a
 * success closes the breaker, a failure reopens it and restarts the
 * cooldown) even when it comes from a call admitted before the breaker
 * opened, since it is news from the service as fresh as the probe's;
 * while open, reports are counted in `ignored` and change nothing.
 * A caller that cannot judge (it was cancelled before an answer) should
 * report nothing.
 */
void weir_breaker_success(weir_breaker *b);
void weir_breaker_failure(weir_breaker *b);
weir_breaker_state weir_breaker_state_get(weir_breaker *b);
/* A consistent snapshot (taken under the breaker's lock). */
void weir_breaker_stats_get(weir_breaker *b, weir_breaker_stats *st);
/* "closed", "open", "half-open" ("?" for anything else). */
const char *weir_breaker_state_name(weir_breaker_state s);

/* ---- retry with exponential backoff and full jitter ------------------------------------------ */
#define WEIR_RETRY_INITIAL_DELAY_DEFAULT (50 * WEIR_MSEC)
#define WEIR_RETRY_MULTIPLIER_DEFAULT    2.0
#define WEIR_RETRY_MAX_DELAY_DEFAULT     (30 * WEIR_SEC)

/* Whether to retry after attempt number `attempt` (1 = the first) failed
 * with `err` (negative errno). Nonzero: retry. Never asked about
 * -ECANCELED, which always stops. */
typedef int (*weir_retry_pred_fn)(int err, int attempt, void *arg);
/* Sleep until `until` (absolute ns on the policy's clock); 0, or a negative
 * errno that ends the retry with that result (-ECANCELED, -ETIMEDOUT...). */
typedef int (*weir_retry_sleep_fn)(void *arg, int64_t until);
/* One attempt: `attempt` counts from 1; `deadline` is the caller's, for
 * the attempt's own operations. Returns >= 0 on success, else a negative
 * errno. */
typedef int64_t (*weir_retry_fn)(void *arg, int attempt, int64_t deadline);

/* Zero fields take the defaults, so `(weir_retry_policy){.max_attempts = 4}`
 * is a complete policy. The policy is only read; one may serve many
 * concurrent retries. */
typedef struct weir_retry_policy {
    /* Attempts in all, the first included. 0 = 1: no retry. */
    int max_attempts;
    /* Cap of the first delay, ns. 0 = 50 ms. (For back-to-back retries use
     * 1: every draw is then 0 or 1 ns.) */
    int64_t initial_delay_ns;
    /* Growth of the cap per retry; >= 1.0 (1.0 keeps it constant). 0 = 2.0. */
    double multiplier;
    /* Upper bound of the cap, ns. 0 = 30 s. Below initial_delay_ns it wins. */
    int64_t max_delay_ns;
    /* NULL = retry every error (except -ECANCELED, as always). */
    weir_retry_pred_fn should_retry;
    void *should_retry_arg;
    /* Jitter generator seed. 0 = a fresh seed per retry state (clock, task
     * and address mixed), so concurrent callers draw different delays;
     * nonzero gives a reproducible sequence (tests). */
    uint64_t seed;
    /* NULL = weir_time_now. */
    weir_resil_clock_fn clock;
    void *clock_arg;
    /* weir_retry_run only. NULL = weir_time_sleep_until (fibers). */
    weir_retry_sleep_fn sleep;
    void *sleep_arg;
} weir_retry_policy;

/*
 * The state of one retry loop, for callers that drive it themselves (a
 * stackless task keeps it in its frame). Public so it can be embedded;
 * the fields are private: read them through the functions below.
 */
typedef struct weir_retry {
    weir_retry_policy p; /* defaults applied */
    int attempts;        /* failed attempts reported to weir_retry_next */
    double cap;          /* cap of the next draw, ns */
    uint64_t rng;
    int last_error;
} weir_retry;

/* NULL when valid, else a static sentence naming the bad field. NULL policy
 * is valid (all defaults). */
const char *weir_retry_policy_check(const weir_retry_policy *p);
/* Start a retry loop: 0, or -EINVAL for a bad policy (p NULL = defaults). */
int weir_retry_init(weir_retry *r, const weir_retry_policy *p);
/* Draw the next delay (ns) and grow the cap: uniform in [0, cap], cap
 * starting at initial_delay and multiplied by `multiplier` after each draw,
 * never above max_delay. No predicate, no clock: the bare schedule. */
int64_t weir_retry_next_delay(weir_retry *r);
/*
 * After an attempt failed with `err` (< 0): may another attempt follow?
 * 0 with *until set to the absolute time (policy clock) to sleep until
 * before it; otherwise the result the retry loop ends with:
 *   -ECANCELED  the current task has a cancel request, or err is -ECANCELED;
 *   err         the attempts are spent or should_retry said no;
 *   -ETIMEDOUT  the next attempt could not start before `deadline`
 *               (the delay would reach it), so there is no point waiting;
 *   -EINVAL     err is not negative.
 * The last error reported stays readable with weir_retry_last_error().
 */
int weir_retry_next(weir_retry *r, int err, int64_t deadline, int64_t *until);
/* Attempts reported failed so far, and the error of the last one (0: none). */
int weir_retry_attempts(const weir_retry *r);
int weir_retry_last_error(const weir_retry *r);

/*
 * From a fiber: run fn(arg, attempt, deadline) under the policy. Returns
 * fn's result on success (>= 0), else the error it ended with as described
 * for weir_retry_next, or the sleep's error (-ECANCELED when the task is
 * cancelled during a backoff, -ETIMEDOUT when a task deadline set with
 * weir_task_set_deadline ends it). The first attempt is always made, even
 * past the deadline or in a cancelled task, as weir's other operations do
 * their immediate part; a success reported by fn is returned even if the
 * task was cancelled meanwhile. -EINVAL for a bad policy or a NULL fn,
 * before any attempt. Fibers only, unless the policy has a sleep hook:
 * from a stackless task the first backoff would fail with -EINVAL (such a
 * task drives weir_retry_next with a sleep op instead).
 */
int64_t weir_retry_run(weir_retry_fn fn, void *arg, const weir_retry_policy *p, int64_t deadline);

/* ---- PID controller ------------------------------------------------------------------------- */
typedef struct weir_pid_opts {
    double kp, ki, kd; /* gains: finite; a negative set makes a reverse-acting controller */
    double setpoint;   /* finite */
    /* Output limits, out_min < out_max; either may be infinite (-INFINITY /
     * INFINITY) for no limit on that side. A zeroed pair is rejected. */
    double out_min, out_max;
} weir_pid_opts;

/* Caller-owned; not thread-safe (one controller, one caller). Fields are
 * private: use the functions. */
typedef struct weir_pid {
    weir_pid_opts o;
    double integral;  /* the I term (ki already applied), within [out_min, out_max] */
    double prev_meas; /* last measurement, for the D term */
    double output;    /* last output */
    int primed;       /* prev_meas is valid */
} weir_pid;

/* NULL when valid, else a static sentence naming the bad field. */
const char *weir_pid_opts_check(const weir_pid_opts *o);
/* 0, or -EINVAL for bad options (pid left untouched). */
int weir_pid_init(weir_pid *pid, const weir_pid_opts *o);
/*
 * One control step: `measured` is the process value now, `dt_s` the seconds
 * since the previous step (> 0). Writes the new output to *out and returns
 * 0; -EINVAL for a non-finite measurement or a dt that is not a positive
 * finite number, -ERANGE when the terms overflow to NaN; in both cases the
 * controller is unchanged.
 *
 * u = kp*e + I + D, e = setpoint - measured, clamped to the limits.
 * I accumulates ki*e*dt, but only until the output reaches a limit, never
 * to drive it further out (conditional integration), and I itself stays
 * within the limits (clamping): so after a long saturation the output
 * comes back as soon as the error changes sign. D is -kd * d(measured)/dt
 * (on the measurement, so a setpoint change gives no kick), 0 on the first
 * step after init or reset.
 */
int weir_pid_update(weir_pid *pid, double measured, double dt_s, double *out);
/* Forget the integral and the previous measurement; keep the options. */
void weir_pid_reset(weir_pid *pid);
/* Change the target (bumpless: the integral is kept). -EINVAL if not finite. */
int weir_pid_set_setpoint(weir_pid *pid, double setpoint);
/* The last output (0 before the first update). */
double weir_pid_output(const weir_pid *pid);
/* The integral term now. */
double weir_pid_integral(const weir_pid *pid);

#ifdef __cplusplus
}
#endif
#endif /* WEIR_RESIL_H */
