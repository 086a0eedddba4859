/* SPDX-License-Identifier: Apache-2.0 */
/*
 * etcd_flags.c - a coordinator's flags for reaching etcd over https and
 * with etcd's auth (cli.h, weir__cli_etcd): parsed by weir node and weir
 * lint alike, so lint reports what would stop a node from starting.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "cli/cli.h"
#include "cluster/etcd.h"
#include "weir/base.h"
#include "weir/tls.h"

int weir__cli_etcd_flag(const char *name, const char *val, weir__cli_etcd *t)
{
    static const struct {
        const char *name;
        size_t off;
    } vals[] = {
        {"--etcd-ca", offsetof(weir__cli_etcd, ca)},
        {"--etcd-cert", offsetof(weir__cli_etcd, cert)},
        {"--etcd-key", offsetof(weir__cli_etcd, key)},
        {"--etcd-user", offsetof(weir__cli_etcd, user)},
        {"--etcd-password", offsetof(weir__cli_etcd, password_ref)},
    };
    if (strcmp(name, "--etcd-no-verify-hostname") == 0) {
        t->no_verify_hostname = 1;
        return 1;
    }
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++)
        if (strcmp(name, vals[i].name) == 0) {
            *(const char **)((char *)t + vals[i].off) = val;
            return 1;
        }
    return 0;
}

/* Which schemes the endpoints use: bit 1 http://, bit 2 https://. */
static int schemes(const char *eps)
{
    int m = 0;
    for (const char *p = eps; p && *p;) {
        p += strspn(p, " \t");
        if (strncmp(p, "https://", 8) == 0)
            m |= 2;
        else
            m |= 1;
        const char *c = strchr(p, ',');
        p = c ? c + 1 : NULL;
    }
    return m;
}

int weir__cli_etcd_check(const char *cmd, weir__cli_etcd *t, const char *endpoints,
                         weir__etcd_opts *o)
{
    *o = (weir__etcd_opts){0};
    int given = t->ca || t->cert || t->key || t->user || t->password_ref || t->no_verify_hostname;
    if (!endpoints) {
        if (given) {
            weir__cli_errf(cmd, "--etcd-ca, --etcd-cert, --etcd-key, --etcd-no-verify-hostname, "
                                "--etcd-user and --etcd-password need --etcd-endpoints");
            return CLI_USAGE;
        }
        return CLI_OK;
    }
    int m = schemes(endpoints);
    if (m == 3) {
        weir__cli_errf(cmd, "--etcd-endpoints: http:// and https:// mixed: every member is "
                            "reached the same way");
        return CLI_USAGE;
    }
    if (m == 2 && !t->ca) {
        weir__cli_errf(cmd, "--etcd-endpoints https://...: needs --etcd-ca FILE, the authority "
                            "that signed the members' certificates");
        return CLI_USAGE;
    }
    if (m != 2 && (t->ca || t->cert || t->key || t->no_verify_hostname)) {
        weir__cli_errf(cmd, "--etcd-ca, --etcd-cert, --etcd-key and --etcd-no-verify-hostname "
                            "need https:// endpoints");
        return CLI_USAGE;
    }
    if (!t->cert != !t->key) {
        weir__cli_errf(cmd, "%s without %s: a client certificate needs its key",
                       t->cert ? "--etcd-cert" : "--etcd-key",
                       t->cert ? "--etcd-key" : "--etcd-cert");
        return CLI_USAGE;
    }
    if (m == 2) {
        char why[1024];
        weir_tls_opts to = {.ca_file = t->ca,
                            .cert_file = t->cert,
                            .key_file = t->key,
                            .no_verify_hostname = t->no_verify_hostname};
        weir_tls_ctx *ctx = weir_tls_ctx_new(0, &to, why, sizeof(why));
        if (!ctx) {
            weir__cli_errf(cmd, "--etcd-ca/--etcd-cert/--etcd-key: %s", why);
            return CLI_USAGE;
        }
        weir_tls_ctx_free(ctx);
    }
    if (!t->user != !t->password_ref) {
        weir__cli_errf(cmd, "%s",
                       t->user ? "--etcd-user needs --etcd-password env://VAR"
                               : "--etcd-password needs --etcd-user");
        return CLI_USAGE;
    }
    if (t->user) {
        if (!*t->user) {
            weir__cli_errf(cmd, "--etcd-user needs a name");
            return CLI_USAGE;
        }
        if (strncmp(t->password_ref, "env://", 6) != 0) {
            /* Never echo it: it may be the password itself. */
            weir__cli_errf(cmd, "--etcd-password takes only env://VAR (the password is read "
                                "from the environment, never from the command line)");
            return CLI_USAGE;
        }
        char why[256];
        if (weir_env_ref(t->password_ref, t->password, sizeof(t->password), why, sizeof(why)) < 0) {
            weir__cli_errf(cmd, "--etcd-password: %s", why);
            return CLI_USAGE;
        }
    }
    *o = (weir__etcd_opts){.ca_file = t->ca,
                           .cert_file = t->cert,
                           .key_file = t->key,
                           .no_verify_hostname = t->no_verify_hostname,
                           .user = t->user,
                           .password = t->user ? t->password : NULL};
    return CLI_OK;
}
