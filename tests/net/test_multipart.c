/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_multipart.c - the multipart/form-data parser (weir/http.h,
 * "multipart"): a file part among text fields, quoted and bare
 * boundaries, preamble and epilogue, delimiter look-alikes inside binary
 * data, the request convenience, and every refusal with its reason. Each
 * body is parsed from an exact-size copy, so ASan sees any over-read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "weir/http.h"

#define CT "multipart/form-data; boundary=\"----weirB0undary\""
#define B  "----weirB0undary"

typedef struct result {
    int rc;
    size_t n;
    weir_http_part parts[8];
    char why[160];
    uint8_t *copy;
} result;

/* Parse body[0..len) (copied to an exact-size buffer) under ct. */
static void parse_n(result *r, const char *ct, const void *body, size_t len, size_t cap)
{
    memset(r, 0, sizeof(*r));
    r->copy = malloc(len ? len : 1);
    memcpy(r->copy, body, len);
    r->rc = weir_http_multipart_parse(ct, ct ? strlen(ct) : 0, r->copy, len, r->parts, cap, &r->n,
                                      r->why, sizeof(r->why));
}

static void parse(result *r, const char *ct, const char *body)
{
    parse_n(r, ct, body, strlen(body), 8);
}

static void done(result *r)
{
    free(r->copy);
}

static int str_is(weir_http_str s, const char *lit)
{
    return s.p && s.len == strlen(lit) && memcmp(s.p, lit, s.len) == 0;
}

#define CHECK_VIEW(s, lit) CHECK(str_is((s), (lit)))

/* A refusal: rc and a reason holding what. */
static void refused(const char *ct, const char *body, int rc, const char *what)
{
    result r;
    parse(&r, ct, body);
    CHECK_EQ(r.rc, rc);
    CHECK_HAS(r.why, what);
    done(&r);
}

TEST(form_with_file_and_fields)
{
    /* Binary file data holding the boundary without the CRLF-- before it,
     * "--boundary" not at a line start, a CRLF "--boundary" followed by
     * more characters, NULs and lone CRs. */
    static const uint8_t file[] = "\x89PNG\r\n\x1a\n\0\0" B "\r\n"
                                  "x--" B "\r\n"
                                  "\r\n--" B "x not a delimiter\r\n"
                                  "\r--" B "\r\n"
                                  "\xff\xfe\0end";
    const size_t flen = sizeof(file) - 1;
    char body[2048];
    size_t o = 0;
    o += (size_t)snprintf(body + o, sizeof(body) - o,
                          "This preamble is ignored.\r\n"
                          "--" B "\r\n"
                          "Content-Disposition: form-data; name=\"job\"\r\n"
                          "\r\n"
                          "wordcount\r\n"
                          "--" B "  \t\r\n" /* transport padding */
                          "content-disposition: form-data; name=\"plugin\"; "
                          "filename=\"wc.so\"\r\n"
                          "Content-Type: application/octet-stream\r\n"
                          "X-Ignored: yes\r\n"
                          "\r\n");
    memcpy(body + o, file, flen);
    o += flen;
    o += (size_t)snprintf(body + o, sizeof(body) - o,
                          "\r\n--" B "\r\n"
                          "Content-Disposition: form-data; name=parallelism\r\n"
                          "\r\n"
                          "4\r\n"
                          "--" B "\r\n"
                          "Content-Disposition: form-data; name=\"empty\"; filename=\"\"\r\n"
                          "\r\n"
                          "\r\n"
                          "--" B "--\r\n"
                          "This epilogue is ignored, even --" B "\r\n");
    result r;
    parse_n(&r, CT, body, o, 8);
    CHECK_EQ(r.rc, 0);
    CHECK_STR(r.why, "");
    CHECK_EQ(r.n, 4);
    CHECK_VIEW(r.parts[0].name, "job");
    CHECK(r.parts[0].filename.p == NULL);
    CHECK_VIEW(r.parts[0].content_type, "text/plain");
    CHECK_EQ(r.parts[0].len, 9);
    CHECK(memcmp(r.parts[0].data, "wordcount", 9) == 0);
    CHECK_VIEW(r.parts[1].name, "plugin");
    CHECK_VIEW(r.parts[1].filename, "wc.so");
    CHECK_VIEW(r.parts[1].content_type, "application/octet-stream");
    CHECK_EQ(r.parts[1].len, flen);
    CHECK(memcmp(r.parts[1].data, file, flen) == 0);
    /* Views into the body, not copies. */
    CHECK(r.parts[1].data > r.copy && r.parts[1].data < r.copy + o);
    CHECK(r.parts[1].name.p > (const char *)r.copy);
    CHECK_VIEW(r.parts[2].name, "parallelism");
    CHECK_EQ(r.parts[2].len, 1);
    CHECK_EQ(r.parts[2].data[0], '4');
    CHECK_VIEW(r.parts[3].name, "empty");
    CHECK(r.parts[3].filename.p != NULL);
    CHECK_EQ(r.parts[3].filename.len, 0);
    CHECK_EQ(r.parts[3].len, 0);
    done(&r);

    /* cap 3 of those 4 parts: -E2BIG, the first 3 given. */
    parse_n(&r, CT, body, o, 3);
    CHECK_EQ(r.rc, -E2BIG);
    CHECK_EQ(r.n, 3);
    CHECK_HAS(r.why, "more than 3 parts");
    done(&r);
}

TEST(bare_boundary_at_start)
{
    result r;
    parse(&r, "Multipart/Form-Data;boundary=abc ; charset=utf-8",
          "--abc\r\nContent-Disposition: form-data; name=a\r\n\r\n1\r\n--abc--");
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(r.n, 1);
    CHECK_VIEW(r.parts[0].name, "a");
    CHECK_EQ(r.parts[0].len, 1);
    done(&r);

    /* The longest boundary, 70 characters (spaces inside allowed). */
    char b70[71], ct[128], body[512];
    memset(b70, 'z', 70);
    b70[10] = ' ';
    b70[70] = '\0';
    snprintf(ct, sizeof(ct), "multipart/form-data; boundary=\"%s\"", b70);
    snprintf(body, sizeof(body),
             "--%s\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\nv\r\n--%s--", b70, b70);
    parse(&r, ct, body);
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(r.n, 1);
    done(&r);

    /* No parts at all: a body that is only the close delimiter. */
    parse(&r, "multipart/form-data; boundary=q", "--q--\r\n");
    CHECK_EQ(r.rc, 0);
    CHECK_EQ(r.n, 0);
    done(&r);
}

TEST(request_convenience)
{
    const char *body = "--k\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nhi\r\n--k--\r\n";
    weir_http_header h[2] = {
        {{"Host", 4}, {"x", 1}},
        {{"content-type", 12}, {"multipart/form-data; boundary=k", 31}},
    };
    weir_http_req req = {0};
    req.headers = h;
    req.nheaders = 2;
    req.body = (const uint8_t *)body;
    req.body_len = strlen(body);
    weir_http_part parts[2];
    size_t n;
    char why[128];
    CHECK_EQ(weir_http_req_multipart(&req, parts, 2, &n, why, sizeof(why)), 0);
    CHECK_EQ(n, 1);
    CHECK_VIEW(parts[0].name, "f");
    req.nheaders = 1; /* no Content-Type */
    CHECK_EQ(weir_http_req_multipart(&req, parts, 2, &n, why, sizeof(why)), -EBADMSG);
    CHECK_HAS(why, "no Content-Type");
    CHECK_EQ(weir_http_multipart_parse("multipart/form-data; boundary=k", 31, NULL, 5, parts, 2, &n,
                                       NULL, 0),
             -EINVAL);
}

#define PART "Content-Disposition: form-data; name=\"a\"\r\n"

TEST(refusals_content_type)
{
    const char *ok = "--k\r\n" PART "\r\nx\r\n--k--";
    refused(NULL, ok, -EBADMSG, "no Content-Type");
    refused("text/plain; boundary=k", ok, -EBADMSG, "not multipart/form-data");
    refused("multipart/mixed; boundary=k", ok, -EBADMSG, "not multipart/form-data");
    refused("multipart/form-data", ok, -EBADMSG, "no boundary parameter");
    refused("multipart/form-data; charset=utf-8", ok, -EBADMSG, "no boundary parameter");
    refused("multipart/form-data; boundary=\"\"", ok, -EBADMSG, "boundary of 0 bytes");
    refused("multipart/form-data; boundary=k; boundary=j", ok, -EBADMSG, "two boundary");
    refused("multipart/form-data; boundary=\"k", ok, -EBADMSG, "malformed Content-Type");
    refused("multipart/form-data; boundary=\"a;b\"", ok, -EBADMSG, "character RFC 2046 forbids");
    refused("multipart/form-data; boundary=\"ab \"", ok, -EBADMSG, "ends in a space");
    char ct[128];
    char b71[72];
    memset(b71, 'y', 71);
    b71[71] = '\0';
    snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%s", b71);
    refused(ct, ok, -EBADMSG, "boundary of 71 bytes (1 to 70 allowed)");
}

TEST(refusals_body)
{
    const char *ct = "multipart/form-data; boundary=k";
    refused(ct, "", -EBADMSG, "no boundary delimiter");
    refused(ct, "just text, --j\r\n", -EBADMSG, "no boundary delimiter");
    refused(ct, "--k\r\n" PART "\r\nx\r\n", -EBADMSG, "missing closing delimiter");
    refused(ct, "--k\r\n" PART "\r\nx\r\n--k", -EBADMSG, "missing closing delimiter");
    refused(ct, "--k\r\n" PART, -EBADMSG, "missing closing delimiter");
    refused(ct, "--k\r\n" PART "\r\nx\r\n--k\r\n" PART "\r\ny", -EBADMSG,
            "part 2: missing closing delimiter");
    refused(ct, "--k\r\n\r\nx\r\n--k--", -EBADMSG, "part 1: no Content-Disposition: form-data");
    refused(ct, "--k\r\nContent-Type: text/plain\r\n\r\nx\r\n--k--", -EBADMSG,
            "no Content-Disposition: form-data");
    refused(ct, "--k\r\nContent-Disposition: attachment; name=a\r\n\r\nx\r\n--k--", -EBADMSG,
            "Content-Disposition is not form-data");
    refused(ct, "--k\r\nContent-Disposition: form-data\r\n\r\nx\r\n--k--", -EBADMSG,
            "part 1: no name");
    refused(ct, "--k\r\nContent-Disposition: form-data; filename=\"f\"\r\n\r\nx\r\n--k--", -EBADMSG,
            "no name");
    refused(ct, "--k\r\nContent-Disposition: form-data; name=\"\"\r\n\r\nx\r\n--k--", -EBADMSG,
            "no name");
    refused(ct, "--k\r\nContent-Disposition: form-data; name=a; name=b\r\n\r\nx\r\n--k--", -EBADMSG,
            "given twice");
    refused(ct, "--k\r\n" PART PART "\r\nx\r\n--k--", -EBADMSG, "two Content-Disposition");
    refused(ct, "--k\r\nContent-Disposition: form-data; name=\"a\r\n\r\nx\r\n--k--", -EBADMSG,
            "malformed Content-Disposition");
    refused(ct, "--k\r\n" PART " folded\r\n\r\nx\r\n--k--", -EBADMSG, "folded");
    refused(ct, "--k\r\n" PART "no colon\r\n\r\nx\r\n--k--", -EBADMSG, "without \"name:\"");
    refused(ct, "--k\r\n" PART "X-A: \x01\r\n\r\nx\r\n--k--", -EBADMSG, "control character");
    /* Bare LF and bare CR line ends. */
    refused(ct, "--k\nContent-Disposition: form-data; name=a\n\nx\n--k--", -EBADMSG, "bare LF");
    refused(ct, "--k\r\nContent-Disposition: form-data; name=a\n\r\nx\r\n--k--", -EBADMSG,
            "bare LF");
    refused(ct, "--k\r\n" PART "\r\nx\r\n--k\n" PART "\r\ny\r\n--k--", -EBADMSG, "bare LF");
    refused(ct, "--k\r\nContent-Disposition: form-data; name=a\rX: y\r\n\r\nx\r\n--k--", -EBADMSG,
            "bare CR");
}

TEST(refusals_bounds)
{
    const char *ct = "multipart/form-data; boundary=k";
    /* A header line of exactly 1024 bytes passes, 1025 does not. */
    for (size_t len = 1024; len <= 1025; len++) {
        char *body = malloc(len + 64);
        size_t o = (size_t)sprintf(body, "--k\r\n" PART "X-Pad: ");
        memset(body + o, 'p', len - 7);
        o += len - 7;
        o += (size_t)sprintf(body + o, "\r\n\r\nx\r\n--k--");
        result r;
        parse_n(&r, ct, body, o, 8);
        if (len == 1024) {
            CHECK_EQ(r.rc, 0);
            CHECK_EQ(r.n, 1);
        } else {
            CHECK_EQ(r.rc, -EBADMSG);
            CHECK_HAS(r.why, "part 1: a header line over 1024 bytes");
        }
        done(&r);
        free(body);
    }
    /* A long line that the body ends in is still too long, not truncated. */
    {
        char body[2048];
        size_t o = (size_t)sprintf(body, "--k\r\n" PART "X-Pad: ");
        memset(body + o, 'p', 1500);
        result r;
        parse_n(&r, ct, body, o + 1500, 8);
        CHECK_EQ(r.rc, -EBADMSG);
        CHECK_HAS(r.why, "over 1024 bytes");
        done(&r);
    }
    /* 16 header lines pass, 17 do not. */
    for (int lines = 16; lines <= 17; lines++) {
        char body[1024];
        size_t o = (size_t)sprintf(body, "--k\r\n" PART);
        for (int i = 1; i < lines; i++)
            o += (size_t)sprintf(body + o, "X-H%d: v\r\n", i);
        o += (size_t)sprintf(body + o, "\r\nx\r\n--k--");
        result r;
        parse_n(&r, ct, body, o, 8);
        if (lines == 16) {
            CHECK_EQ(r.rc, 0);
        } else {
            CHECK_EQ(r.rc, -EBADMSG);
            CHECK_HAS(r.why, "more than 16 header lines");
        }
        done(&r);
    }
    /* More parts than cap, with cap 0. */
    const char *one = "--k\r\n" PART "\r\nx\r\n--k--";
    result r;
    parse_n(&r, ct, one, strlen(one), 0);
    CHECK_EQ(r.rc, -E2BIG);
    CHECK_STR(r.why, "more than 0 parts");
    done(&r);
}

TEST_MAIN()
