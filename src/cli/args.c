/* SPDX-License-Identifier: Apache-2.0 */
/*
 * args.c - what every weir command parses and prints with (cli/cli.h):
 * error lines, numbers, flags, watermarks and a job's summary line, so
 * run, lint, submit, jobs and cancel take the same spellings and say the
 * same things.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cluster/proto.h"

void weir__cli_errf(const char *cmd, const char *fmt, ...)
{
    fprintf(stderr, "weir %s: ", cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int weir__cli_parse_num(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi,
                        int64_t *out)
{
    char *end;
    errno = 0;
    long long v = s && *s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || errno || *end) {
        weir__cli_errf(cmd, "%s: \"%s\" is not a number", flag, s ? s : "");
        return -1;
    }
    if (v < lo || v > hi) {
        weir__cli_errf(cmd, "%s: %lld is out of range (%" PRId64 "..%" PRId64 ")", flag, v, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int weir__cli_flag_next(const char *cmd, const weir__cli_flag *flags, size_t n, int job_args,
                        int argc, char **argv, int *i, const weir__cli_flag **f, const char **val)
{
    const char *a = argv[*i];
    size_t nlen = strcspn(a, "=");
    *f = NULL;
    *val = NULL;
    for (size_t k = 0; k < n; k++)
        if (strlen(flags[k].name) == nlen && strncmp(flags[k].name, a, nlen) == 0)
            *f = &flags[k];
    if (!*f) {
        if (job_args)
            weir__cli_errf(cmd,
                           "unknown flag %.*s (job arguments that look like flags go after --; "
                           "see weir %s --help)",
                           (int)nlen, a, cmd);
        else
            weir__cli_errf(cmd, "unknown flag %.*s (see weir %s --help)", (int)nlen, a, cmd);
        return CLI_USAGE;
    }
    if ((*f)->takes_value) {
        if (a[nlen] == '=')
            *val = a + nlen + 1;
        else if (*i + 1 < argc)
            *val = argv[++*i];
        else {
            weir__cli_errf(cmd, "%s needs a value", (*f)->name);
            return CLI_USAGE;
        }
    } else if (a[nlen] == '=') {
        weir__cli_errf(cmd, "%s takes no value", (*f)->name);
        return CLI_USAGE;
    }
    return CLI_OK;
}

void weir__cli_finding(weir__cli_findings *f, int error, const char *fmt, ...)
{
    fprintf(stderr, "weir %s: %s: ", f->cmd, error ? "error" : "warning");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (error)
        f->errors++;
    else
        f->warnings++;
}

const char weir__cli_tls_client_help[] =
    "  --tls-ca FILE               TLS to the coordinator: its certificate must chain\n"
    "                              to this authority (PEM) and name the host connected by\n"
    "  --tls-client-cert FILE, --tls-client-key FILE\n"
    "                              this side's certificate and key, for a coordinator\n"
    "                              that asks for one (--tls-client-ca)\n"
    "  --tls-no-verify-hostname    accept a certificate that does not name the host\n";

int weir__cli_tls_flag(const char *name, const char *val, weir__cli_tls *t)
{
    static const struct {
        const char *name;
        size_t off;
    } files[] = {
        {"--tls-cert", offsetof(weir__cli_tls, cert)},
        {"--tls-key", offsetof(weir__cli_tls, key)},
        {"--tls-client-ca", offsetof(weir__cli_tls, client_ca)},
        {"--tls-ca", offsetof(weir__cli_tls, ca)},
        {"--tls-client-cert", offsetof(weir__cli_tls, client_cert)},
        {"--tls-client-key", offsetof(weir__cli_tls, client_key)},
        {"--data-tls-cert", offsetof(weir__cli_tls, data_cert)},
        {"--data-tls-key", offsetof(weir__cli_tls, data_key)},
        {"--data-tls-ca", offsetof(weir__cli_tls, data_ca)},
    };
    if (strcmp(name, "--tls-no-verify-hostname") == 0) {
        t->no_verify_hostname = 1;
        return 1;
    }
    if (strcmp(name, "--data-tls-no-verify-hostname") == 0) {
        t->data_no_verify_hostname = 1;
        return 1;
    }
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        if (strcmp(name, files[i].name) == 0) {
            *(const char **)((char *)t + files[i].off) = val;
            return 1;
        }
    return 0;
}

/* The data plane's flags: all three files or none (naming what is
 * missing); only on a worker (server: the coordinator). */
static int data_tls_check(const char *cmd, const weir__cli_tls *t, int server)
{
    int given = !!t->data_cert + !!t->data_key + !!t->data_ca;
    if (server && (given || t->data_no_verify_hostname)) {
        weir__cli_errf(cmd, "--data-tls-cert, --data-tls-key, --data-tls-ca and "
                            "--data-tls-no-verify-hostname are for workers (the data plane "
                            "runs between workers)");
        return CLI_USAGE;
    }
    if (given && given < 3) {
        char missing[96] = "";
        const char *names[3] = {t->data_cert ? NULL : "--data-tls-cert",
                                t->data_key ? NULL : "--data-tls-key",
                                t->data_ca ? NULL : "--data-tls-ca"};
        for (int i = 0; i < 3; i++)
            if (names[i])
                snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), "%s%s",
                         missing[0] ? " and " : "", names[i]);
        weir__cli_errf(cmd,
                       "data-plane TLS needs --data-tls-cert, --data-tls-key and --data-tls-ca "
                       "together: %s missing",
                       missing);
        return CLI_USAGE;
    }
    if (!given && t->data_no_verify_hostname) {
        weir__cli_errf(cmd, "--data-tls-no-verify-hostname without --data-tls-cert, "
                            "--data-tls-key and --data-tls-ca: the data plane is plaintext");
        return CLI_USAGE;
    }
    return CLI_OK;
}

int weir__cli_tls_check(const char *cmd, const weir__cli_tls *t, int server)
{
    if (data_tls_check(cmd, t, server) != CLI_OK)
        return CLI_USAGE;
    if (server) {
        if (t->ca || t->client_cert || t->client_key || t->no_verify_hostname) {
            weir__cli_errf(cmd, "--tls-ca, --tls-client-cert, --tls-client-key and "
                                "--tls-no-verify-hostname are for workers and clients (a "
                                "coordinator takes --tls-cert, --tls-key, --tls-client-ca)");
            return CLI_USAGE;
        }
        if (!t->cert != !t->key) {
            weir__cli_errf(cmd, "%s without %s: TLS needs both the certificate and its key",
                           t->cert ? "--tls-cert" : "--tls-key",
                           t->cert ? "--tls-key" : "--tls-cert");
            return CLI_USAGE;
        }
        if (t->client_ca && !t->cert) {
            weir__cli_errf(cmd, "--tls-client-ca without --tls-cert and --tls-key: checking "
                                "clients' certificates needs TLS on");
            return CLI_USAGE;
        }
        return CLI_OK;
    }
    if (t->cert || t->key || t->client_ca) {
        weir__cli_errf(cmd, "--tls-cert, --tls-key and --tls-client-ca are for the coordinator "
                            "(a worker or a client takes --tls-ca, --tls-client-cert, "
                            "--tls-client-key)");
        return CLI_USAGE;
    }
    if (!t->client_cert != !t->client_key) {
        weir__cli_errf(cmd, "%s without %s: a client certificate needs its key",
                       t->client_cert ? "--tls-client-cert" : "--tls-client-key",
                       t->client_cert ? "--tls-client-key" : "--tls-client-cert");
        return CLI_USAGE;
    }
    if (!t->ca && (t->client_cert || t->no_verify_hostname)) {
        weir__cli_errf(cmd,
                       "%s without --tls-ca: TLS is on only with the authority that "
                       "signed the coordinator's certificate",
                       t->client_cert ? "--tls-client-cert" : "--tls-no-verify-hostname");
        return CLI_USAGE;
    }
    return CLI_OK;
}

int weir__cli_tls_ctx(const char *cmd, const weir__cli_tls *t, int server, weir_tls_ctx **out)
{
    *out = NULL;
    int rc = weir__cli_tls_check(cmd, t, server);
    if (rc != CLI_OK || (server ? !t->cert : !t->ca))
        return rc;
    weir_tls_opts o =
        server ? (weir_tls_opts){.cert_file = t->cert, .key_file = t->key, .ca_file = t->client_ca}
               : (weir_tls_opts){.cert_file = t->client_cert,
                                 .key_file = t->client_key,
                                 .ca_file = t->ca,
                                 .no_verify_hostname = t->no_verify_hostname};
    char msg[1024];
    if (!(*out = weir_tls_ctx_new(server, &o, msg, sizeof(msg)))) {
        weir__cli_errf(cmd, "TLS: %s", msg);
        return CLI_USAGE;
    }
    return CLI_OK;
}

const char *weir__cli_fmt_rate(double v, char *buf, size_t cap)
{
    if (v >= 1e6)
        snprintf(buf, cap, "%.2fM", v / 1e6);
    else if (v >= 1e4)
        snprintf(buf, cap, "%.1fk", v / 1e3);
    else
        snprintf(buf, cap, "%.0f", v);
    return buf;
}

int weir__cli_data_tls_ctx(const char *cmd, const weir__cli_tls *t, weir_tls_ctx **server,
                           weir_tls_ctx **client)
{
    *server = *client = NULL;
    int rc = data_tls_check(cmd, t, 0);
    if (rc != CLI_OK || !t->data_cert)
        return rc;
    weir_tls_opts o = {.cert_file = t->data_cert,
                       .key_file = t->data_key,
                       .ca_file = t->data_ca,
                       .no_verify_hostname = t->data_no_verify_hostname};
    char msg[1024];
    if (!(*server = weir_tls_ctx_new(1, &o, msg, sizeof(msg))) ||
        !(*client = weir_tls_ctx_new(0, &o, msg, sizeof(msg)))) {
        weir_tls_ctx_free(*server);
        *server = NULL;
        weir__cli_errf(cmd, "data-plane TLS: %s", msg);
        return CLI_USAGE;
    }
    return CLI_OK;
}

void weir__cli_fmt_wm(char *buf, size_t len, int64_t wm)
{
    if (wm == WEIR_WATERMARK_MIN)
        snprintf(buf, len, "-");
    else if (wm == WEIR_WATERMARK_MAX)
        snprintf(buf, len, "end");
    else
        snprintf(buf, len, "%" PRId64, wm);
}

void weir__cli_summary(const weir__cl_job_completed *d, double secs, int64_t watermark,
                       int checkpoints, const char *label_fmt, ...)
{
    char wm[32];
    weir__cli_fmt_wm(wm, sizeof(wm), watermark);
    va_list ap;
    va_start(ap, label_fmt);
    vfprintf(stderr, label_fmt, ap);
    va_end(ap);
    fprintf(stderr,
            " finished in %.2fs: %" PRIu64 " records from %u source%s, %" PRIu64
            " into %u sink%s, watermark %s",
            secs, d->records_in, d->sources, d->sources == 1 ? "" : "s", d->records_out, d->sinks,
            d->sinks == 1 ? "" : "s", wm);
    if (checkpoints)
        fprintf(stderr, ", checkpoints %" PRIu64 " (latest %" PRIu64 ", restored %" PRIu64 ")",
                d->ckpt_completed, d->ckpt_latest, d->ckpt_restored);
    if (d->restarts)
        fprintf(stderr, ", restarts %u", d->restarts);
    fputc('\n', stderr);
}
