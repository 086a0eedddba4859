/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_certs.h - certificates for tests, made with OpenSSL's C API (EC
 * P-256) and written as PEM into a temporary directory removed at exit:
 *
 *   ca.pem            the authority the tests trust
 *   server.pem/.key   DNS:localhost, IP:127.0.0.1 (signed by ca)
 *   other.pem/.key    DNS:other.example, IP:10.0.0.1 (signed by ca)
 *   client.pem/.key   a client certificate signed by ca
 *   other-ca.pem      another authority; rogue.pem/.key a client it signed
 *
 * certs_make() once, then certs_file("server.pem") for a path.
 */
#ifndef WEIR_TEST_CERTS_H
#define WEIR_TEST_CERTS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "test.h"

static char certs_dir[64];
static char certs_paths[32][128];
static int certs_n;

static const char *certs_file(const char *name)
{
    for (int i = 0; i < certs_n; i++)
        if (strcmp(strrchr(certs_paths[i], '/') + 1, name) == 0)
            return certs_paths[i];
    CHECK_LT(certs_n, 32);
    snprintf(certs_paths[certs_n], sizeof(certs_paths[0]), "%s/%s", certs_dir, name);
    return certs_paths[certs_n++];
}

static void certs_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX v3;
    X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
    CHECK(e != NULL);
    CHECK_EQ(X509_add_ext(x, e, -1), 1);
    X509_EXTENSION_free(e);
}

static X509 *certs_cert(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key,
                        const char *san)
{
    static long serial = 1;
    X509 *x = X509_new();
    CHECK(x != NULL);
    CHECK_EQ(X509_set_version(x, 2), 1);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600L * 24 * 30);
    CHECK_EQ(X509_set_pubkey(x, key), 1);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    CHECK_EQ(X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name), 1);
    X509 *iss = issuer ? issuer : x;
    certs_ext(x, iss, NID_subject_key_identifier, "hash");
    certs_ext(x, iss, NID_authority_key_identifier, "keyid:always");
    if (!issuer) {
        certs_ext(x, iss, NID_basic_constraints, "critical,CA:TRUE");
        certs_ext(x, iss, NID_key_usage, "critical,keyCertSign,cRLSign");
    } else {
        certs_ext(x, iss, NID_basic_constraints, "critical,CA:FALSE");
        certs_ext(x, iss, NID_key_usage, "critical,digitalSignature,keyEncipherment");
        certs_ext(x, iss, NID_ext_key_usage, "serverAuth,clientAuth");
        certs_ext(x, iss, NID_subject_alt_name, san);
    }
    CHECK_GT(X509_sign(x, issuer ? issuer_key : key, EVP_sha256()), 0);
    return x;
}

static void certs_write(X509 *x, EVP_PKEY *k, const char *name)
{
    char n[64];
    snprintf(n, sizeof(n), "%s.pem", name);
    FILE *f = fopen(certs_file(n), "w");
    CHECK(f != NULL);
    CHECK_EQ(PEM_write_X509(f, x), 1);
    CHECK_EQ(fclose(f), 0);
    if (!k)
        return;
    snprintf(n, sizeof(n), "%s.key", name);
    f = fopen(certs_file(n), "w");
    CHECK(f != NULL);
    CHECK_EQ(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL), 1);
    CHECK_EQ(fclose(f), 0);
}

static void certs_remove(void)
{
    for (int i = 0; i < certs_n; i++)
        unlink(certs_paths[i]);
    if (certs_dir[0])
        rmdir(certs_dir);
}

static void certs_leaf(const char *name, const char *cn, const char *san, X509 *ca,
                       EVP_PKEY *ca_key)
{
    EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    CHECK(k != NULL);
    X509 *x = certs_cert(k, cn, ca, ca_key, san);
    certs_write(x, k, name);
    X509_free(x);
    EVP_PKEY_free(k);
}

static void certs_make(void)
{
    if (certs_dir[0])
        return;
    snprintf(certs_dir, sizeof(certs_dir), "/tmp/weir-certs-XXXXXX");
    CHECK(mkdtemp(certs_dir) != NULL);
    atexit(certs_remove);
    EVP_PKEY *ca_key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    EVP_PKEY *other_key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    CHECK(ca_key != NULL && other_key != NULL);
    X509 *ca = certs_cert(ca_key, "weir test CA", NULL, NULL, NULL);
    X509 *other_ca = certs_cert(other_key, "another CA", NULL, NULL, NULL);
    certs_write(ca, NULL, "ca");
    certs_write(other_ca, NULL, "other-ca");
    certs_leaf("server", "localhost", "DNS:localhost,IP:127.0.0.1", ca, ca_key);
    certs_leaf("other", "other.example", "DNS:other.example,IP:10.0.0.1", ca, ca_key);
    certs_leaf("client", "weir-client", "DNS:weir-client", ca, ca_key);
    certs_leaf("rogue", "rogue", "DNS:rogue", other_ca, other_key);
    X509_free(ca);
    X509_free(other_ca);
    EVP_PKEY_free(ca_key);
    EVP_PKEY_free(other_key);
}

#endif
