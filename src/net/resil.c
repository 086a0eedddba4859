/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resil.c - circuit breaker, retry with backoff and jitter, PID controller
 * (weir/resil.h).
 *
 * The breaker is a small state machine behind a pthread mutex. A mutex and
 * not a task lock: nothing inside suspends, a critical section is a few
 * loads and stores, and callers may be plain threads as well as tasks on
 * any scheduler thread. The clock is read before the lock is taken, so a
 * user's clock function never runs under it; a reading that is a little
 * stale by the time the lock is held only delays a transition to a later
 * call, it never makes one early (the elapsed time is then smaller).
 *
 * Retry keeps no shared state: a weir_retry lives in one caller's frame,
 * with its own generator, so concurrent retries of one policy need no lock
 * and (with seed 0) draw different delays.
 *
 * Nothing here needs libm: the backoff cap grows by repeated
 * multiplication, and the PID step is plain arithmetic.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "weir/resil.h"

static int64_t default_clock(void *arg)
{
    (void)arg;
    return weir_time_now();
}

/* now - since >= span, for any int64 values (no overflow). */
static int elapsed_at_least(int64_t now, int64_t since, int64_t span)
{
    if (now < since)
        return 0;
    return (uint64_t)now - (uint64_t)since >= (uint64_t)span;
}

/* ---- circuit breaker ----------------------------------------------------------------------- */
struct weir_breaker {
    pthread_mutex_t lock;
    int threshold;
    int64_t cooldown;
    weir_resil_clock_fn clock;
    void *clock_arg;
    /* guarded by lock: */
    weir_breaker_state state;
    int64_t opened_at; /* OPEN: when it opened (cooldown starts) */
    int64_t probe_at;  /* HALF_OPEN: when the outstanding probe was admitted */
    weir_breaker_stats st;
};

const char *weir_breaker_opts_check(const weir_breaker_opts *o)
{
    if (!o)
        return NULL;
    if (o->failure_threshold < 0)
        return "breaker: failure_threshold must be >= 1 (0 for the default, 5)";
    if (o->cooldown_ns < 0)
        return "breaker: cooldown_ns must be >= 0 (0 for the default, 30 s)";
    return NULL;
}

weir_breaker *weir_breaker_new(const weir_breaker_opts *opts)
{
    if (weir_breaker_opts_check(opts)) {
        errno = EINVAL;
        return NULL;
    }
    weir_breaker_opts o = opts ? *opts : (weir_breaker_opts){0};
    weir_breaker *b = calloc(1, sizeof *b);
    if (!b) {
        errno = ENOMEM;
        return NULL;
    }
    int rc = pthread_mutex_init(&b->lock, NULL);
    if (rc != 0) {
        free(b);
        errno = rc;
        return NULL;
    }
    b->threshold = o.failure_threshold ? o.failure_threshold : WEIR_BREAKER_THRESHOLD_DEFAULT;
    b->cooldown = o.cooldown_ns ? o.cooldown_ns : WEIR_BREAKER_COOLDOWN_DEFAULT;
    b->clock = o.clock ? o.clock : default_clock;
    b->clock_arg = o.clock ? o.clock_arg : NULL;
    b->state = WEIR_BREAKER_CLOSED;
    return b;
}

void weir_breaker_free(weir_breaker *b)
{
    if (!b)
        return;
    pthread_mutex_destroy(&b->lock);
    free(b);
}

/* Under lock. */
static void trip(weir_breaker *b, int64_t now)
{
    if (b->state == WEIR_BREAKER_CLOSED)
        b->st.closed_to_open++;
    else
        b->st.half_open_to_open++;
    b->state = WEIR_BREAKER_OPEN;
    b->opened_at = now;
    b->st.consecutive_failures = 0;
}

int weir_breaker_allow(weir_breaker *b)
{
    int64_t now = b->clock(b->clock_arg);
    int rc = 0;
    pthread_mutex_lock(&b->lock);
    switch (b->state) {
    case WEIR_BREAKER_CLOSED:
        break;
    case WEIR_BREAKER_OPEN:
        if (!elapsed_at_least(now, b->opened_at, b->cooldown)) {
            rc = -EAGAIN;
            break;
        }
        b->state = WEIR_BREAKER_HALF_OPEN;
        b->st.open_to_half_open++;
        b->probe_at = now;
        b->st.probes++;
        break;
    case WEIR_BREAKER_HALF_OPEN:
        /* One probe at a time; a probe silent for a whole cooldown is
         * presumed lost (its caller was cancelled) and replaced. */
        if (!elapsed_at_least(now, b->probe_at, b->cooldown)) {
            rc = -EAGAIN;
            break;
        }
        b->probe_at = now;
        b->st.probes++;
        break;
    }
    if (rc == 0)
        b->st.allowed++;
    else
        b->st.rejected++;
    pthread_mutex_unlock(&b->lock);
    return rc;
}

void weir_breaker_success(weir_breaker *b)
{
    pthread_mutex_lock(&b->lock);
    b->st.successes++;
    switch (b->state) {
    case WEIR_BREAKER_CLOSED:
        b->st.consecutive_failures = 0;
        break;
    case WEIR_BREAKER_OPEN:
        b->st.ignored++;
        break;
    case WEIR_BREAKER_HALF_OPEN:
        b->state = WEIR_BREAKER_CLOSED;
        b->st.half_open_to_closed++;
        b->st.consecutive_failures = 0;
        break;
    }
    pthread_mutex_unlock(&b->lock);
}

void weir_breaker_failure(weir_breaker *b)
{
    int64_t now = b->clock(b->clock_arg);
    pthread_mutex_lock(&b->lock);
    b->st.failures++;
    switch (b->state) {
    case WEIR_BREAKER_CLOSED:
        if (++b->st.consecutive_failures >= b->threshold)
            trip(b, now);
        break;
    case WEIR_BREAKER_OPEN:
        b->st.ignored++;
        break;
    case WEIR_BREAKER_HALF_OPEN:
        trip(b, now);
        break;
    }
    pthread_mutex_unlock(&b->lock);
}

weir_breaker_state weir_breaker_state_get(weir_breaker *b)
{
    pthread_mutex_lock(&b->lock);
    weir_breaker_state s = b->state;
    pthread_mutex_unlock(&b->lock);
    return s;
}

void weir_breaker_stats_get(weir_breaker *b, weir_breaker_stats *st)
{
    pthread_mutex_lock(&b->lock);
    *st = b->st;
    st->state = b->state;
    pthread_mutex_unlock(&b->lock);
}

const char *weir_breaker_state_name(weir_breaker_state s)
{
    switch (s) {
    case WEIR_BREAKER_CLOSED:
        return "closed";
    case WEIR_BREAKER_OPEN:
        return "open";
    case WEIR_BREAKER_HALF_OPEN:
        return "half-open";
    }
    return "?";
}

/* ---- retry ----------------------------------------------------------------------------------- */
/* splitmix64: one add and two multiply-xorshifts per draw; every seed,
 * zero included, gives a full-period sequence, and its output is good
 * enough for jitter (not for anything secret). */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

const char *weir_retry_policy_check(const weir_retry_policy *p)
{
    if (!p)
        return NULL;
    if (p->max_attempts < 0)
        return "retry: max_attempts must be >= 1 (0 for the default, 1)";
    if (p->initial_delay_ns < 0)
        return "retry: initial_delay_ns must be >= 0 (0 for the default, 50 ms)";
    if (p->max_delay_ns < 0)
        return "retry: max_delay_ns must be >= 0 (0 for the default, 30 s)";
    /* Written so that NaN fails too. */
    if (!(p->multiplier == 0.0 || (p->multiplier >= 1.0 && isfinite(p->multiplier))))
        return "retry: multiplier must be a finite number >= 1.0 (0 for the default, 2.0)";
    return NULL;
}

int weir_retry_init(weir_retry *r, const weir_retry_policy *p)
{
    if (weir_retry_policy_check(p))
        return -EINVAL;
    r->p = p ? *p : (weir_retry_policy){0};
    if (r->p.max_attempts == 0)
        r->p.max_attempts = 1;
    if (r->p.initial_delay_ns == 0)
        r->p.initial_delay_ns = WEIR_RETRY_INITIAL_DELAY_DEFAULT;
    if (r->p.multiplier == 0.0)
        r->p.multiplier = WEIR_RETRY_MULTIPLIER_DEFAULT;
    if (r->p.max_delay_ns == 0)
        r->p.max_delay_ns = WEIR_RETRY_MAX_DELAY_DEFAULT;
    if (!r->p.clock) {
        r->p.clock = default_clock;
        r->p.clock_arg = NULL;
    }
    r->attempts = 0;
    r->last_error = 0;
    double init = (double)r->p.initial_delay_ns, max = (double)r->p.max_delay_ns;
    r->cap = init < max ? init : max;
    uint64_t seed = r->p.seed;
    if (seed == 0) {
        /* Different for retries started at the same time (address) or by
         * the same frame reused (time); the task id separates tasks whose
         * frames land on the same address at the same tick. */
        weir_task *t = weir_task_current();
        uint64_t mix = (uint64_t)weir_time_now() ^ ((uint64_t)(uintptr_t)r << 17) ^
                       (t ? weir_task_id(t) * UINT64_C(0x2545f4914f6cdd1d) : 0);
        seed = splitmix64(&mix);
    }
    r->rng = seed;
    return 0;
}

/* The current cap as an integer; exact max_delay_ns once the cap reached it
 * (its double may round above INT64_MAX). */
static int64_t cap_ns(const weir_retry *r)
{
    if (r->cap >= (double)r->p.max_delay_ns)
        return r->p.max_delay_ns;
    return (int64_t)r->cap;
}

int64_t weir_retry_next_delay(weir_retry *r)
{
    int64_t cap = cap_ns(r);
    /* 53 random bits as a fraction in [0, 1), scaled to [0, cap + 1);
     * rounding may land on cap + 1 for large caps, hence the clamp. */
    double u = (double)(splitmix64(&r->rng) >> 11) * 0x1.0p-53;
    double d = u * ((double)cap + 1.0);
    int64_t delay = d >= (double)cap ? cap : (int64_t)d;
    double next = r->cap * r->p.multiplier; /* finite * [1, finite]: +inf at worst */
    double max = (double)r->p.max_delay_ns;
    r->cap = next < max ? next : max;
    return delay;
}

int weir_retry_next(weir_retry *r, int err, int64_t deadline, int64_t *until)
{
    if (err >= 0)
        return -EINVAL;
    r->attempts++;
    r->last_error = err;
    if (err == -ECANCELED || weir_task_cancelled())
        return -ECANCELED;
    if (r->attempts >= r->p.max_attempts)
        return err;
    if (r->p.should_retry && !r->p.should_retry(err, r->attempts, r->p.should_retry_arg))
        return err;
    int64_t delay = weir_retry_next_delay(r);
    int64_t now = r->p.clock(r->p.clock_arg);
    int64_t at = (now > 0 && delay > INT64_MAX - now) ? INT64_MAX : now + delay;
    if (at >= deadline)
        return -ETIMEDOUT;
    *until = at;
    return 0;
}

int weir_retry_attempts(const weir_retry *r)
{
    return r->attempts;
}

int weir_retry_last_error(const weir_retry *r)
{
    return r->last_error;
}

int64_t weir_retry_run(weir_retry_fn fn, void *arg, const weir_retry_policy *p, int64_t deadline)
{
    weir_retry r;
    if (!fn)
        return -EINVAL;
    int rc = weir_retry_init(&r, p);
    if (rc < 0)
        return rc;
    for (int attempt = 1;; attempt++) {
        int64_t res = fn(arg, attempt, deadline);
        if (res >= 0)
            return res;
        int64_t until;
        rc = weir_retry_next(&r, res < -INT_MAX ? -INT_MAX : (int)res, deadline, &until);
        if (rc < 0)
            return rc;
        rc = r.p.sleep ? r.p.sleep(r.p.sleep_arg, until) : weir_time_sleep_until(until);
        if (rc < 0)
            return rc;
        /* A sleep hook need not observe cancellation; never start an
         * attempt in a task that was cancelled during the backoff. */
        if (weir_task_cancelled())
            return -ECANCELED;
    }
}

/* ---- PID controller ------------------------------------------------------------------------- */
const char *weir_pid_opts_check(const weir_pid_opts *o)
{
    if (!o)
        return "pid: options are required (gains and output limits)";
    if (!isfinite(o->kp) || !isfinite(o->ki) || !isfinite(o->kd))
        return "pid: gains kp, ki and kd must be finite numbers";
    if (!isfinite(o->setpoint))
        return "pid: setpoint must be a finite number";
    if (isnan(o->out_min) || isnan(o->out_max))
        return "pid: out_min and out_max must be numbers (infinite for no limit)";
    if (!(o->out_min < o->out_max))
        return "pid: out_min must be below out_max";
    return NULL;
}

int weir_pid_init(weir_pid *pid, const weir_pid_opts *o)
{
    if (weir_pid_opts_check(o))
        return -EINVAL;
    pid->o = *o;
    weir_pid_reset(pid);
    return 0;
}

static double clamp(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

int weir_pid_update(weir_pid *pid, double measured, double dt_s, double *out)
{
    const weir_pid_opts *o = &pid->o;
    if (!isfinite(measured) || !isfinite(dt_s) || !(dt_s > 0.0))
        return -EINVAL;
    double e = o->setpoint - measured;
    double p = o->kp * e;
    double d = pid->primed ? -o->kd * (measured - pid->prev_meas) / dt_s : 0.0;
    double di = o->ki * e * dt_s;
    double i = pid->integral + di;
    double u = p + i + d;
    /* Conditional integration: the integral may grow towards a limit only
     * until the output reaches it (so a saturated output sits exactly on
     * the limit rather than one step short), never past it. `room` is the
     * integral that puts the output on the limit; the integral is not
     * pulled back to it when P alone already pushes past the limit. */
    if (u > o->out_max && di > 0.0) {
        double room = o->out_max - p - d;
        i = room > pid->integral ? room : pid->integral;
    } else if (u < o->out_min && di < 0.0) {
        double room = o->out_min - p - d;
        i = room < pid->integral ? room : pid->integral;
    }
    /* And never let the integral alone exceed what the output can be:
     * at rest (e = 0, steady measurement) the output is the integral. */
    i = clamp(i, o->out_min, o->out_max);
    u = clamp(p + i + d, o->out_min, o->out_max);
    if (isnan(u) || isnan(i))
        return -ERANGE;
    pid->integral = i;
    pid->prev_meas = measured;
    pid->primed = 1;
    pid->output = u;
    *out = u;
    return 0;
}

void weir_pid_reset(weir_pid *pid)
{
    pid->integral = 0.0;
    pid->prev_meas = 0.0;
    pid->output = 0.0;
    pid->primed = 0;
}

int weir_pid_set_setpoint(weir_pid *pid, double setpoint)
{
    if (!isfinite(setpoint))
        return -EINVAL;
    pid->o.setpoint = setpoint;
    return 0;
}

double weir_pid_output(const weir_pid *pid)
{
    return pid->output;
}

double weir_pid_integral(const weir_pid *pid)
{
    return pid->integral;
}
