/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_metrics.c - weir/metrics.h: metric and label name grammar, reserved
 * names, duplicate and clashing registrations, label escaping, the bound on
 * children, a small registry rendered to an exact golden text, float
 * formatting, histogram bucket boundaries (a value equal to a bound counts
 * in that bucket), no lost updates from tasks on a 2-thread runtime and
 * from plain threads, histogram buckets consistent with _count while
 * observes run, writing to an fd, and the default registry.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "test.h"
#include "test_rt.h"
#include "weir/metrics.h"

static weir_metrics *reg(void)
{
    weir_metrics *m = weir_metrics_new(NULL);
    CHECK(m != NULL);
    return m;
}

/* Render m into a fresh string (caller frees). */
static char *render(weir_metrics *m)
{
    weir_metrics_buf b = {0};
    CHECK_EQ(weir_metrics_render(m, &b), 0);
    CHECK(b.data != NULL);
    CHECK_EQ(strlen(b.data), b.len);
    return b.data;
}

static int reg_def(weir_metrics *m, weir_metric_def d, weir_metric_family **f, const char **why)
{
    return weir_metrics_register(m, &d, f, why);
}

/* ---- names --------------------------------------------------------------------------------- */
TEST(metric_name_grammar)
{
    weir_metrics *m = reg();
    const char *good[] = {"a", "_x", "http_requests_total", "job:rate5m", ":colon_first", "A9_z"};
    const char *bad[] = {"", "9lives", "has-dash", "sp ace", "dot.ted", "é", "__reserved"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        weir_metric_def d = {.name = good[i], .help = "", .type = WEIR_METRIC_GAUGE};
        CHECK(weir_metric_def_check(&d) == NULL);
        CHECK_EQ(weir_metrics_register(m, &d, NULL, NULL), 0);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        weir_metric_def d = {.name = bad[i], .help = "", .type = WEIR_METRIC_GAUGE};
        const char *why = NULL;
        CHECK(weir_metric_def_check(&d) != NULL);
        CHECK_EQ(weir_metrics_register(m, &d, NULL, &why), -EINVAL);
        CHECK(why != NULL && strncmp(why, "metrics: ", 9) == 0);
    }
    weir_metric_def d = {.name = NULL, .help = "", .type = WEIR_METRIC_GAUGE};
    CHECK_EQ(weir_metrics_register(m, &d, NULL, NULL), -EINVAL);
    CHECK(weir_metric_def_check(NULL) != NULL);
    weir_metrics_free(m);
}

TEST(label_name_grammar_and_reserved)
{
    weir_metrics *m = reg();
    const char *why = NULL;
    weir_metric_family *f = NULL;
#define LBL(t, ...)                                                                                \
    reg_def(m,                                                                                     \
            (weir_metric_def){.name = "x",                                                         \
                              .help = "h",                                                         \
                              .type = (t),                                                         \
                              .labels = WEIR_LABELS(__VA_ARGS__),                                  \
                              .nlabels = sizeof WEIR_LABELS(__VA_ARGS__) / sizeof(char *)},        \
            &f, &why)
    CHECK_EQ(LBL(WEIR_METRIC_COUNTER, "a:b"), -EINVAL); /* ':' is for metric names only */
    CHECK_STR(why, "metrics: label name must match [a-zA-Z_][a-zA-Z0-9_]*");
    CHECK_EQ(LBL(WEIR_METRIC_COUNTER, "9a"), -EINVAL);
    CHECK_EQ(LBL(WEIR_METRIC_COUNTER, ""), -EINVAL);
    CHECK_EQ(LBL(WEIR_METRIC_COUNTER, "__name__"), -EINVAL);
    CHECK_STR(why, "metrics: label names starting with \"__\" are reserved");
    CHECK_EQ(LBL(WEIR_METRIC_COUNTER, "a", "b", "a"), -EINVAL);
    CHECK_STR(why, "metrics: a label name appears twice");
    CHECK_EQ(LBL(WEIR_METRIC_HISTOGRAM, "path", "le"), -EINVAL);
    CHECK_STR(why, "metrics: \"le\" is reserved for a histogram's bucket bound");
    /* "le" is an ordinary label on the other types, "_a" is fine anywhere */
    CHECK_EQ(LBL(WEIR_METRIC_COUNTER, "le", "_a", "b9"), 0);
    CHECK(f != NULL);
#undef LBL
    weir_metric_def d = {.name = "y", .help = "h", .type = WEIR_METRIC_GAUGE, .nlabels = 1};
    CHECK_EQ(weir_metrics_register(m, &d, NULL, &why), -EINVAL); /* labels NULL */
    d = (weir_metric_def){.name = "y", .help = NULL, .type = WEIR_METRIC_GAUGE};
    CHECK_EQ(weir_metrics_register(m, &d, NULL, &why), -EINVAL);
    d = (weir_metric_def){.name = "y", .help = "bad \xff utf8", .type = WEIR_METRIC_GAUGE};
    CHECK_EQ(weir_metrics_register(m, &d, NULL, &why), -EINVAL);
    d = (weir_metric_def){.name = "y", .help = "", .type = (weir_metric_type)7};
    CHECK_EQ(weir_metrics_register(m, &d, NULL, &why), -EINVAL);
    weir_metrics_free(m);
}

TEST(bucket_validation)
{
    weir_metrics *m = reg();
    const char *why;
    double inc[] = {1, 2, 2};
    double nan_[] = {1, NAN};
    double inf_mid[] = {1, INFINITY, 3};
    double inf_last[] = {1, 2, INFINITY};
    weir_metric_def d = {.name = "h", .help = "", .type = WEIR_METRIC_HISTOGRAM};
    d.buckets = inc, d.nbuckets = 3;
    CHECK_EQ(weir_metrics_register(m, &d, NULL, &why), -EINVAL);
    CHECK_STR(why, "metrics: bucket bounds must be strictly increasing");
    d.buckets = nan_, d.nbuckets = 2;
    CHECK_EQ(weir_metrics_register(m, &d, NULL, &why), -EINVAL);
    d.buckets = inf_mid, d.nbuckets = 3;
    CHECK_EQ(weir_metrics_register(m, &d, NULL, &why), -EINVAL);
    d.buckets = inf_last, d.nbuckets = 0;
    CHECK_EQ(weir_metrics_register(m, &d, NULL, &why), -EINVAL);
    d = (weir_metric_def){
        .name = "g", .help = "", .type = WEIR_METRIC_GAUGE, .buckets = inc, .nbuckets = 1};
    CHECK_EQ(weir_metrics_register(m, &d, NULL, &why), -EINVAL);
    CHECK_STR(why, "metrics: buckets are for histograms only");
    /* a trailing +Inf is dropped: {1, 2, +Inf} is the same as {1, 2} */
    weir_histogram *h1 = weir_metrics_histogram(m, "h", "", inf_last, 3);
    CHECK(h1 != NULL);
    weir_histogram *h2 = weir_metrics_histogram(m, "h", "", inf_last, 2);
    CHECK(h1 == h2);
    errno = 0;
    CHECK(weir_metrics_histogram(m, "h", "", NULL, 0) == NULL); /* defaults differ */
    CHECK_EQ(errno, EEXIST);

    double out[4];
    CHECK_EQ(weir_metrics_buckets_exponential(1000, 4, 4, out), 0);
    CHECK(out[0] == 1000 && out[1] == 4000 && out[2] == 16000 && out[3] == 64000);
    CHECK_EQ(weir_metrics_buckets_linear(0.5, 0.25, 3, out), 0);
    CHECK(out[0] == 0.5 && out[1] == 0.75 && out[2] == 1.0);
    CHECK_EQ(weir_metrics_buckets_exponential(0, 2, 4, out), -EINVAL);
    CHECK_EQ(weir_metrics_buckets_exponential(1, 1, 4, out), -EINVAL);
    CHECK_EQ(weir_metrics_buckets_linear(0, 0, 4, out), -EINVAL);
    CHECK_EQ(weir_metrics_buckets_linear(0, 1, 0, out), -EINVAL);
    weir_metrics_free(m);
}

/* ---- duplicates ------------------------------------------------------------------------------ */
TEST(duplicate_registration)
{
    weir_metrics *m = reg();
    const char *why = NULL;
    weir_metric_family *a = NULL, *b = NULL;
    weir_metric_def d = {.name = "req_total",
                         .help = "Requests.",
                         .type = WEIR_METRIC_COUNTER,
                         .labels = WEIR_LABELS("method", "code"),
                         .nlabels = 2};
    CHECK_EQ(weir_metrics_register(m, &d, &a, &why), 0);
    /* the same definition (copied strings, not the same pointers) */
    char name[] = "req_total", help[] = "Requests.";
    weir_metric_def same = d;
    same.name = name, same.help = help;
    CHECK_EQ(weir_metrics_register(m, &same, &b, &why), 0);
    CHECK(a == b);

    weir_metric_def other = d;
    other.type = WEIR_METRIC_GAUGE;
    b = NULL;
    CHECK_EQ(weir_metrics_register(m, &other, &b, &why), -EEXIST);
    CHECK_STR(why, "metrics: the name is already registered with another type");
    CHECK(b == NULL);
    other = d;
    other.labels = WEIR_LABELS("code", "method");
    CHECK_EQ(weir_metrics_register(m, &other, &b, &why), -EEXIST);
    CHECK_STR(why, "metrics: the name is already registered with other label names");
    other.labels = WEIR_LABELS("method");
    other.nlabels = 1;
    CHECK_EQ(weir_metrics_register(m, &other, &b, &why), -EEXIST);
    other = d;
    other.help = "Something else.";
    CHECK_EQ(weir_metrics_register(m, &other, &b, &why), -EEXIST);
    CHECK_STR(why, "metrics: the name is already registered with another help text");

    /* shortcuts: same unlabelled definition, same child */
    weir_gauge *g1 = weir_metrics_gauge(m, "temp", "T.");
    CHECK(g1 != NULL);
    CHECK(weir_metrics_gauge(m, "temp", "T.") == g1);
    errno = 0;
    CHECK(weir_metrics_counter(m, "temp", "T.") == NULL);
    CHECK_EQ(errno, EEXIST);
    errno = 0;
    CHECK(weir_metrics_counter(m, "bad-name", "") == NULL);
    CHECK_EQ(errno, EINVAL);
    weir_metrics_free(m);
}

TEST(histogram_series_names_clash)
{
    weir_metrics *m = reg();
    const char *why;
    CHECK(weir_metrics_histogram(m, "lat", "", NULL, 0) != NULL);
    weir_metric_def d = {.name = "lat_count", .help = "", .type = WEIR_METRIC_COUNTER};
    CHECK_EQ(weir_metrics_register(m, &d, NULL, &why), -EEXIST);
    CHECK_STR(why, "metrics: the name collides with a histogram's _bucket, _sum or _count series");
    d.name = "lat_bucket";
    CHECK_EQ(weir_metrics_register(m, &d, NULL, &why), -EEXIST);
    d.name = "lat_sum";
    d.type = WEIR_METRIC_GAUGE;
    CHECK_EQ(weir_metrics_register(m, &d, NULL, &why), -EEXIST);
    d.name = "lat_total"; /* not a histogram suffix */
    CHECK_EQ(weir_metrics_register(m, &d, NULL, &why), 0);
    /* the other way round: a histogram whose series would hit a gauge */
    CHECK(weir_metrics_gauge(m, "q_sum", "") != NULL);
    errno = 0;
    CHECK(weir_metrics_histogram(m, "q", "", NULL, 0) == NULL);
    CHECK_EQ(errno, EEXIST);
    weir_metrics_free(m);
}

/* ---- children ------------------------------------------------------------------------------ */
TEST(children_found_again_and_type_checked)
{
    weir_metrics *m = reg();
    weir_metric_family *f;
    weir_metric_def d = {.name = "c_total",
                         .help = "",
                         .type = WEIR_METRIC_COUNTER,
                         .labels = WEIR_LABELS("a", "b"),
                         .nlabels = 2};
    CHECK_EQ(weir_metrics_register(m, &d, &f, NULL), 0);
    CHECK_EQ(weir_metric_children(f), 0);
    weir_counter *c1 = weir_metric_counter(f, WEIR_LABELS("ab", "c"));
    weir_counter *c2 = weir_metric_counter(f, WEIR_LABELS("a", "bc"));
    CHECK(c1 != NULL && c2 != NULL && c1 != c2);
    char v0[] = "ab", v1[] = "c";
    CHECK(weir_metric_counter(f, WEIR_LABELS(v0, v1)) == c1);
    CHECK_EQ(weir_metric_children(f), 2);
    errno = 0;
    CHECK(weir_metric_gauge(f, WEIR_LABELS("x", "y")) == NULL);
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK(weir_metric_counter(f, NULL) == NULL);
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK(weir_metric_counter(f, WEIR_LABELS("x", NULL)) == NULL);
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK(weir_metric_counter(f, WEIR_LABELS("x", "\xc3")) == NULL); /* truncated UTF-8 */
    CHECK_EQ(errno, EINVAL);
    CHECK(weir_metric_counter(f, WEIR_LABELS("x", "caf\xc3\xa9")) != NULL);
    CHECK_EQ(weir_metric_children(f), 3);
    weir_metrics_free(m);
}

TEST(children_bounded)
{
    weir_metrics *m = weir_metrics_new(&(weir_metrics_opts){.max_children = 50});
    CHECK(m != NULL);
    weir_metric_family *f, *g;
    weir_metric_def d = {.name = "by_peer",
                         .help = "",
                         .type = WEIR_METRIC_GAUGE,
                         .labels = WEIR_LABELS("peer"),
                         .nlabels = 1};
    CHECK_EQ(weir_metrics_register(m, &d, &f, NULL), 0);
    char v[32];
    for (int i = 0; i < 50; i++) {
        snprintf(v, sizeof v, "p%d", i);
        CHECK(weir_metric_gauge(f, WEIR_LABELS(v)) != NULL);
    }
    errno = 0;
    CHECK(weir_metric_gauge(f, WEIR_LABELS("one_too_many")) == NULL);
    CHECK_EQ(errno, ENOSPC);
    CHECK(weir_metric_gauge(f, WEIR_LABELS("p7")) != NULL); /* existing ones still found */
    CHECK_EQ(weir_metric_children(f), 50);
    /* a definition's own bound wins over the registry's */
    d.name = "small";
    d.max_children = 2;
    CHECK_EQ(weir_metrics_register(m, &d, &g, NULL), 0);
    CHECK(weir_metric_gauge(g, WEIR_LABELS("a")) != NULL);
    CHECK(weir_metric_gauge(g, WEIR_LABELS("b")) != NULL);
    errno = 0;
    CHECK(weir_metric_gauge(g, WEIR_LABELS("c")) == NULL);
    CHECK_EQ(errno, ENOSPC);
    weir_metrics_free(m);

    /* the default bound is 10000 */
    m = reg();
    d = (weir_metric_def){.name = "many",
                          .help = "",
                          .type = WEIR_METRIC_COUNTER,
                          .labels = WEIR_LABELS("id"),
                          .nlabels = 1};
    CHECK_EQ(weir_metrics_register(m, &d, &f, NULL), 0);
    for (int i = 0; i < WEIR_METRICS_MAX_CHILDREN_DEFAULT; i++) {
        snprintf(v, sizeof v, "%d", i);
        CHECK(weir_metric_counter(f, WEIR_LABELS(v)) != NULL);
    }
    errno = 0;
    CHECK(weir_metric_counter(f, WEIR_LABELS("10000")) == NULL);
    CHECK_EQ(errno, ENOSPC);
    weir_metrics_free(m);
}

/* ---- rendering ----------------------------------------------------------------------------- */
TEST(label_value_and_help_escaping)
{
    weir_metrics *m = reg();
    weir_metric_family *f;
    weir_metric_def d = {.name = "esc",
                         .help = "Back\\slash and\nnewline, \"quotes\" kept.",
                         .type = WEIR_METRIC_GAUGE,
                         .labels = WEIR_LABELS("v"),
                         .nlabels = 1};
    CHECK_EQ(weir_metrics_register(m, &d, &f, NULL), 0);
    weir_gauge_set(weir_metric_gauge(f, WEIR_LABELS("a\\b\"c\nd")), 1);
    weir_gauge_set(weir_metric_gauge(f, WEIR_LABELS("")), 2);
    char *s = render(m);
    CHECK_STR(s, "# HELP esc Back\\\\slash and\\nnewline, \"quotes\" kept.\n"
                 "# TYPE esc gauge\n"
                 "esc{v=\"\"} 2\n"
                 "esc{v=\"a\\\\b\\\"c\\nd\"} 1\n");
    free(s);
    weir_metrics_free(m);
}

TEST(golden_small_registry)
{
    weir_metrics *m = reg();
    weir_metric_family *req, *lat;
    /* registered out of name order: output is sorted */
    CHECK_EQ(reg_def(m,
                     (weir_metric_def){.name = "http_requests_total",
                                       .help = "Requests served.",
                                       .type = WEIR_METRIC_COUNTER,
                                       .labels = WEIR_LABELS("method", "code"),
                                       .nlabels = 2},
                     &req, NULL),
             0);
    weir_gauge *inflight = weir_metrics_gauge(m, "http_in_flight", "Requests being served.");
    CHECK(inflight != NULL);
    CHECK_EQ(reg_def(m,
                     (weir_metric_def){.name = "http_latency_seconds",
                                       .help = "Request latency.",
                                       .type = WEIR_METRIC_HISTOGRAM,
                                       .labels = WEIR_LABELS("route"),
                                       .nlabels = 1,
                                       .buckets = (const double[]){0.1, 0.5, 1},
                                       .nbuckets = 3},
                     &lat, NULL),
             0);
    weir_counter *quiet = weir_metrics_counter(m, "a_quiet_total", "");
    CHECK(quiet != NULL);
    weir_metric_family *unused;
    CHECK_EQ(reg_def(m,
                     (weir_metric_def){.name = "zz_unused",
                                       .help = "No child yet.",
                                       .type = WEIR_METRIC_GAUGE,
                                       .labels = WEIR_LABELS("x"),
                                       .nlabels = 1},
                     &unused, NULL),
             0);

    weir_counter_add(weir_metric_counter(req, WEIR_LABELS("POST", "500")), 2);
    weir_counter *get200 = weir_metric_counter(req, WEIR_LABELS("GET", "200"));
    weir_counter_add(get200, 1000000);
    weir_counter_inc(get200);
    CHECK_EQ(weir_counter_add_double(weir_metric_counter(req, WEIR_LABELS("GET", "404")), 1.5), 0);
    weir_gauge_set(inflight, 3);
    weir_gauge_dec(inflight);
    weir_histogram *root = weir_metric_histogram(lat, WEIR_LABELS("/"));
    weir_histogram_observe(root, 0.05);
    weir_histogram_observe(root, 0.5); /* == a bound: counts in le="0.5" */
    weir_histogram_observe(root, 0.75);
    weir_histogram_observe(root, 2);
    (void)weir_metric_histogram(lat, WEIR_LABELS("/api")); /* no observations */

    char *s = render(m);
    CHECK_STR(s, "# TYPE a_quiet_total counter\n"
                 "a_quiet_total 0\n"
                 "# HELP http_in_flight Requests being served.\n"
                 "# TYPE http_in_flight gauge\n"
                 "http_in_flight 2\n"
                 "# HELP http_latency_seconds Request latency.\n"
                 "# TYPE http_latency_seconds histogram\n"
                 "http_latency_seconds_bucket{route=\"/\",le=\"0.1\"} 1\n"
                 "http_latency_seconds_bucket{route=\"/\",le=\"0.5\"} 2\n"
                 "http_latency_seconds_bucket{route=\"/\",le=\"1\"} 3\n"
                 "http_latency_seconds_bucket{route=\"/\",le=\"+Inf\"} 4\n"
                 "http_latency_seconds_sum{route=\"/\"} 3.3\n"
                 "http_latency_seconds_count{route=\"/\"} 4\n"
                 "http_latency_seconds_bucket{route=\"/api\",le=\"0.1\"} 0\n"
                 "http_latency_seconds_bucket{route=\"/api\",le=\"0.5\"} 0\n"
                 "http_latency_seconds_bucket{route=\"/api\",le=\"1\"} 0\n"
                 "http_latency_seconds_bucket{route=\"/api\",le=\"+Inf\"} 0\n"
                 "http_latency_seconds_sum{route=\"/api\"} 0\n"
                 "http_latency_seconds_count{route=\"/api\"} 0\n"
                 "# HELP http_requests_total Requests served.\n"
                 "# TYPE http_requests_total counter\n"
                 "http_requests_total{method=\"GET\",code=\"200\"} 1000001\n"
                 "http_requests_total{method=\"GET\",code=\"404\"} 1.5\n"
                 "http_requests_total{method=\"POST\",code=\"500\"} 2\n");
    free(s);

    /* render appends; a reused buffer keeps its allocation */
    weir_metrics_buf b = {0};
    CHECK_EQ(weir_metrics_render(m, &b), 0);
    size_t once = b.len;
    CHECK_EQ(weir_metrics_render(m, &b), 0);
    CHECK_EQ(b.len, 2 * once);
    CHECK(memcmp(b.data, b.data + once, once) == 0);
    b.len = 0;
    CHECK_EQ(weir_metrics_render(m, &b), 0);
    CHECK_EQ(b.len, once);
    weir_metrics_buf_free(&b);
    CHECK(b.data == NULL && b.len == 0);
    weir_metrics_free(m);
}

TEST(empty_registry_renders_empty_string)
{
    weir_metrics *m = reg();
    char *s = render(m);
    CHECK_STR(s, "");
    free(s);
    weir_metrics_free(m);
}

static void gauge_text(weir_metrics *m, weir_gauge *g, double v, const char *want)
{
    weir_gauge_set(g, v);
    char *s = render(m);
    char exp[128];
    snprintf(exp, sizeof exp, "# TYPE g gauge\ng %s\n", want);
    if (strcmp(s, exp) != 0)
        TEST__FAIL("%.17g rendered as \"%s\", want \"%s\"", v, s, exp);
    free(s);
}

TEST(float_formatting)
{
    weir_metrics *m = reg();
    weir_gauge *g = weir_metrics_gauge(m, "g", "");
    CHECK(g != NULL);
    gauge_text(m, g, 0, "0");
    gauge_text(m, g, -0.0, "0");
    gauge_text(m, g, 1, "1");
    gauge_text(m, g, -42, "-42");
    gauge_text(m, g, 1e6, "1000000"); /* not 1e+06 */
    gauge_text(m, g, 123456789012345678.0 / 10, "12345678901234568");
    gauge_text(m, g, 1e17, "1e+17");
    gauge_text(m, g, 0.1, "0.1"); /* not 0.10000000000000001 */
    gauge_text(m, g, 0.1 + 0.2, "0.30000000000000004");
    gauge_text(m, g, -2.5, "-2.5");
    gauge_text(m, g, 1.0 / 3, "0.3333333333333333");
    gauge_text(m, g, 1e-9, "1e-09");
    gauge_text(m, g, 5e-324, "5e-324");
    gauge_text(m, g, 1.7976931348623157e308, "1.7976931348623157e+308");
    gauge_text(m, g, NAN, "NaN");
    gauge_text(m, g, INFINITY, "+Inf");
    gauge_text(m, g, -INFINITY, "-Inf");
    CHECK(isnan(weir_gauge_value(g)) == 0);
    CHECK(weir_gauge_value(g) == -INFINITY);

    /* counters: whole increments print exactly, past 2^53 */
    weir_counter *c = weir_metrics_counter(m, "c_total", "");
    weir_counter_add(c, UINT64_MAX - 1);
    char *s = render(m);
    CHECK(strstr(s, "c_total 18446744073709551614\n") != NULL);
    free(s);
    CHECK_EQ(weir_counter_add_double(c, -1), -EINVAL);
    CHECK_EQ(weir_counter_add_double(c, NAN), -EINVAL);
    weir_metrics_free(m);
}

TEST(histogram_bucket_boundaries)
{
    weir_metrics *m = reg();
    weir_histogram *h = weir_metrics_histogram(m, "h", "", (const double[]){-1, 0, 1, 2.5}, 4);
    CHECK(h != NULL);
    double obs[] = {-INFINITY, -1, -0.5, 0, -0.0, 1, nextafter(1, 2), 2.5, 2.6, INFINITY};
    for (size_t i = 0; i < sizeof obs / sizeof *obs; i++)
        weir_histogram_observe(h, obs[i]);
    CHECK_EQ(weir_histogram_count(h), 10);
    char *s = render(m);
    CHECK_STR(s, "# TYPE h histogram\n"
                 "h_bucket{le=\"-1\"} 2\n"  /* -Inf, -1 */
                 "h_bucket{le=\"0\"} 5\n"   /* -0.5, 0, -0 */
                 "h_bucket{le=\"1\"} 6\n"   /* 1 */
                 "h_bucket{le=\"2.5\"} 8\n" /* 1+ulp, 2.5 */
                 "h_bucket{le=\"+Inf\"} 10\n"
                 "h_sum NaN\n" /* -Inf + +Inf */
                 "h_count 10\n");
    free(s);
    weir_metrics_free(m);
}

TEST(histogram_default_buckets_and_nan)
{
    weir_metrics *m = reg();
    weir_histogram *h = weir_metrics_histogram(m, "d_seconds", "", NULL, 0);
    CHECK(h != NULL);
    weir_histogram_observe(h, 0.005);
    weir_histogram_observe(h, 10);
    weir_histogram_observe(h, 11);
    CHECK(weir_histogram_sum(h) == 0.005 + 10.0 + 11.0); /* 21.005000000000003 */
    char *s = render(m);
    CHECK_STR(s, "# TYPE d_seconds histogram\n"
                 "d_seconds_bucket{le=\"0.005\"} 1\n"
                 "d_seconds_bucket{le=\"0.01\"} 1\n"
                 "d_seconds_bucket{le=\"0.025\"} 1\n"
                 "d_seconds_bucket{le=\"0.05\"} 1\n"
                 "d_seconds_bucket{le=\"0.1\"} 1\n"
                 "d_seconds_bucket{le=\"0.25\"} 1\n"
                 "d_seconds_bucket{le=\"0.5\"} 1\n"
                 "d_seconds_bucket{le=\"1\"} 1\n"
                 "d_seconds_bucket{le=\"2.5\"} 1\n"
                 "d_seconds_bucket{le=\"5\"} 1\n"
                 "d_seconds_bucket{le=\"10\"} 2\n"
                 "d_seconds_bucket{le=\"+Inf\"} 3\n"
                 "d_seconds_sum 21.005000000000003\n"
                 "d_seconds_count 3\n");
    free(s);
    weir_histogram_observe(h, NAN); /* +Inf bucket, sum NaN */
    s = render(m);
    CHECK(strstr(s, "d_seconds_bucket{le=\"+Inf\"} 4\n") != NULL);
    CHECK(strstr(s, "d_seconds_sum NaN\n") != NULL);
    CHECK(strstr(s, "d_seconds_count 4\n") != NULL);
    free(s);
    weir_metrics_free(m);
}

/* ---- concurrency --------------------------------------------------------------------------- */
enum { RT_TASKS = 4, RT_OPS = 50000 };
static struct {
    weir_metric_family *req;
    weir_counter *c;
    weir_gauge *g;
    weir_histogram *h;
} xt;

static intptr_t rt_worker(void *arg)
{
    (void)arg;
    /* each task looks the shared child up itself: lookups race too */
    weir_counter *mine = weir_metric_counter(xt.req, WEIR_LABELS("GET", "200"));
    CHECK(mine != NULL);
    for (int i = 0; i < RT_OPS; i++) {
        weir_counter_inc(xt.c);
        CHECK_EQ(weir_counter_add_double(mine, 0.5), 0);
        weir_gauge_add(xt.g, 2);
        weir_gauge_dec(xt.g);
        weir_histogram_observe(xt.h, (double)(i % 4));
        if (i % 1000 == 999)
            weir_task_yield(); /* let the tasks interleave on each thread */
    }
    return 0;
}

TEST(no_lost_updates_on_two_thread_runtime)
{
    weir_metrics *m = reg();
    weir_metric_def d = {.name = "req_total",
                         .help = "",
                         .type = WEIR_METRIC_COUNTER,
                         .labels = WEIR_LABELS("method", "code"),
                         .nlabels = 2};
    CHECK_EQ(weir_metrics_register(m, &d, &xt.req, NULL), 0);
    xt.c = weir_metrics_counter(m, "ops_total", "");
    xt.g = weir_metrics_gauge(m, "level", "");
    xt.h = weir_metrics_histogram(m, "obs", "", (const double[]){0, 1, 2}, 3);
    CHECK(xt.c && xt.g && xt.h);
    weir_rt *rt = weir_rt_new(&(weir_rt_opts){.threads = 2});
    CHECK(rt != NULL);
    weir_task *t[RT_TASKS];
    for (int i = 0; i < RT_TASKS; i++) {
        weir_spawn_opts o = {.name = "updater", .loop = weir_rt_loop(rt, i % 2), .pin = 1};
        t[i] = weir_task_spawn(rt_worker, NULL, &o);
        CHECK(t[i] != NULL);
    }
    for (int i = 0; i < RT_TASKS; i++) {
        intptr_t r = -1;
        CHECK_EQ(weir_task_join(t[i], &r, weir_time_after_ms(60000)), 0);
        CHECK_EQ(r, 0);
    }
    weir_rt_free(rt);
    const uint64_t total = (uint64_t)RT_TASKS * RT_OPS;
    CHECK(weir_counter_value(xt.c) == (double)total);
    CHECK_EQ(weir_metric_children(xt.req), 1);
    CHECK(weir_counter_value(weir_metric_counter(xt.req, WEIR_LABELS("GET", "200"))) ==
          0.5 * (double)total);
    CHECK(weir_gauge_value(xt.g) == (double)total);
    CHECK_EQ(weir_histogram_count(xt.h), total);
    CHECK(weir_histogram_sum(xt.h) == 1.5 * (double)total); /* 0+1+2+3 per 4, exact */
    char *s = render(m);
    char want[160];
    snprintf(want, sizeof want, "obs_bucket{le=\"0\"} %" PRIu64 "\n", total / 4);
    CHECK(strstr(s, want) != NULL);
    snprintf(want, sizeof want, "obs_bucket{le=\"2\"} %" PRIu64 "\n", 3 * total / 4);
    CHECK(strstr(s, want) != NULL);
    snprintf(want, sizeof want, "ops_total %" PRIu64 "\n", total);
    CHECK(strstr(s, want) != NULL);
    free(s);
    weir_metrics_free(m);
}

enum { PT_THREADS = 4, PT_OPS = 100000 };
static _Atomic int pt_done;

static void *pt_worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < PT_OPS; i++) {
        weir_counter_add(xt.c, 3);
        weir_gauge_sub(xt.g, 0.25);
        weir_histogram_observe(xt.h, i % 2 ? 0.5 : 5);
    }
    atomic_fetch_add(&pt_done, 1);
    return NULL;
}

/* Parse the obs histogram out of a render and check that the buckets never
 * decrease and that +Inf equals _count. Returns _count. */
static uint64_t check_histogram_text(const char *s)
{
    uint64_t prev = 0, inf = 0, count = 0;
    int nb = 0;
    for (const char *p = s; (p = strstr(p, "obs_bucket{le=\"")); p++) {
        const char *sp = strchr(p, ' ');
        CHECK(sp != NULL);
        uint64_t v = strtoull(sp + 1, NULL, 10);
        CHECK_GE(v, prev);
        prev = v;
        if (strncmp(p, "obs_bucket{le=\"+Inf\"}", 21) == 0)
            inf = v;
        nb++;
    }
    CHECK_EQ(nb, 3);
    const char *c = strstr(s, "obs_count ");
    CHECK(c != NULL);
    count = strtoull(c + 10, NULL, 10);
    CHECK_EQ(inf, count);
    return count;
}

TEST(no_lost_updates_from_threads_and_consistent_renders)
{
    weir_metrics *m = reg();
    xt.c = weir_metrics_counter(m, "ops_total", "");
    xt.g = weir_metrics_gauge(m, "level", "");
    xt.h = weir_metrics_histogram(m, "obs", "", (const double[]){1, 2}, 2);
    CHECK(xt.c && xt.g && xt.h);
    atomic_store(&pt_done, 0);
    pthread_t th[PT_THREADS];
    for (int i = 0; i < PT_THREADS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, pt_worker, NULL), 0);
    /* render while they observe: every render is self-consistent */
    uint64_t last = 0;
    int renders = 0;
    weir_metrics_buf b = {0};
    while (atomic_load(&pt_done) < PT_THREADS || renders < 3) {
        b.len = 0;
        CHECK_EQ(weir_metrics_render(m, &b), 0);
        uint64_t n = check_histogram_text(b.data);
        CHECK_GE(n, last);
        last = n;
        renders++;
    }
    for (int i = 0; i < PT_THREADS; i++)
        CHECK_EQ(pthread_join(th[i], NULL), 0);
    b.len = 0;
    CHECK_EQ(weir_metrics_render(m, &b), 0);
    const uint64_t total = (uint64_t)PT_THREADS * PT_OPS;
    CHECK_EQ(check_histogram_text(b.data), total);
    weir_metrics_buf_free(&b);
    CHECK(weir_counter_value(xt.c) == 3.0 * (double)total);
    CHECK(weir_gauge_value(xt.g) == -0.25 * (double)total);
    CHECK(weir_histogram_sum(xt.h) == 2.75 * (double)total);
    weir_metrics_free(m);
}

/* ---- fd, default registry ------------------------------------------------------------------ */
TEST(write_fd_matches_render)
{
    weir_metrics *m = reg();
    weir_metric_family *f;
    weir_metric_def d = {.name = "w",
                         .help = "Wide.",
                         .type = WEIR_METRIC_GAUGE,
                         .labels = WEIR_LABELS("k"),
                         .nlabels = 1};
    CHECK_EQ(weir_metrics_register(m, &d, &f, NULL), 0);
    char v[32];
    for (int i = 0; i < 300; i++) { /* ~6 KB: more than one buffer growth */
        snprintf(v, sizeof v, "key%03d", i);
        weir_gauge_set(weir_metric_gauge(f, WEIR_LABELS(v)), i);
    }
    char *want = render(m);
    size_t n = strlen(want);
    CHECK_LT(n, 60000); /* fits in a pipe's buffer */
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK_EQ(weir_metrics_write_fd(m, p[1]), 0);
    close(p[1]);
    char *got = calloc(1, n + 2);
    size_t off = 0;
    ssize_t r;
    while ((r = read(p[0], got + off, n + 1 - off)) > 0)
        off += (size_t)r;
    close(p[0]);
    CHECK_EQ(off, n);
    CHECK_STR(got, want);
    CHECK_EQ(weir_metrics_write_fd(m, -1), -EBADF);
    free(got);
    free(want);
    weir_metrics_free(m);
}

TEST(default_registry)
{
    weir_metrics *d = weir_metrics_default();
    CHECK(d != NULL);
    CHECK(weir_metrics_default() == d);
    weir_counter *c = weir_metrics_counter(NULL, "test_default_total", "Via NULL.");
    CHECK(c != NULL);
    CHECK(weir_metrics_counter(d, "test_default_total", "Via NULL.") == c);
    weir_counter_add(c, 7);
    weir_metrics_buf b = {0};
    CHECK_EQ(weir_metrics_render(NULL, &b), 0);
    CHECK(strstr(b.data, "# HELP test_default_total Via NULL.\n"
                         "# TYPE test_default_total counter\n"
                         "test_default_total 7\n") != NULL);
    weir_metrics_buf_free(&b);
    weir_metrics_free(d); /* a no-op for the default registry */
    CHECK(weir_metrics_counter(NULL, "test_default_total", "Via NULL.") == c);
}

TEST_MAIN()
