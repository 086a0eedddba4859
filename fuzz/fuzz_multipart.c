/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_multipart.c - libFuzzer target for the multipart/form-data parser
 * (weir/http.h, "multipart").
 *
 * Input layout: byte 0 gives the parts array's capacity (its low 4 bits,
 * 0..15, so the -E2BIG edge is reached); the bytes up to the first '\n'
 * are the Content-Type value; the rest is the body. The Content-Type and
 * the body are each copied to an allocation of exactly their size, so ASan
 * sees any read past them. Beyond memory safety the target aborts when an
 * invariant breaks:
 *
 *   - the result is 0, -EBADMSG or -E2BIG, with a NUL-terminated reason
 *     that is empty exactly on success, and -E2BIG only with a full array;
 *   - at most cap parts, and no more written than *nparts says;
 *   - every part's data lies inside the body, parts in order and apart;
 *     its name is non-empty and, like its filename, inside the body; its
 *     content type inside the body or the default "text/plain";
 *   - parsing again gives the same result (no hidden state).
 *
 * Build and run: `make test-fuzz` (see fuzz/run.sh and docs/http.md).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(msg)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_multipart: invariant broken: %s (line %d)\n", msg, __LINE__);        \
        abort();                                                                                   \
    } while (0)

static int inside(const void *p, size_t n, const uint8_t *b, size_t len)
{
    const uint8_t *q = p;
    return q >= b && n <= len && q - b <= (ptrdiff_t)(len - n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t cap = data[0] & 15;
    const uint8_t *rest = data + 1;
    size_t left = size - 1;
    const uint8_t *nl = memchr(rest, '\n', left);
    size_t ctlen = nl ? (size_t)(nl - rest) : left;
    size_t blen = nl ? left - ctlen - 1 : 0;
    char *ct = malloc(ctlen ? ctlen : 1);
    uint8_t *body = malloc(blen ? blen : 1);
    if (!ct || !body)
        abort();
    memcpy(ct, rest, ctlen);
    if (blen)
        memcpy(body, nl + 1, blen);

    weir_http_part parts[16];
    memset(parts, 0xa5, sizeof(parts)); /* untouched past *nparts */
    size_t n = 99;
    char why[128];
    int rc = weir_http_multipart_parse(ct, ctlen, body, blen, parts, cap, &n, why, sizeof(why));
    if (rc != 0 && rc != -EBADMSG && rc != -E2BIG)
        FAIL("an undocumented error");
    if (!memchr(why, '\0', sizeof(why)))
        FAIL("the reason is not NUL-terminated");
    if ((rc == 0) != (why[0] == '\0'))
        FAIL("a reason on success, or none on failure");
    if (n > cap)
        FAIL("more parts than cap");
    if (rc == -E2BIG && n != cap)
        FAIL("-E2BIG with room left");
    const uint8_t *prev_end = body;
    for (size_t i = 0; i < n; i++) {
        const weir_http_part *p = &parts[i];
        if (!inside(p->data, p->len, body, blen))
            FAIL("data outside the body");
        if (p->data < prev_end)
            FAIL("parts out of order or overlapping");
        prev_end = p->data + p->len;
        if (!p->name.p || !p->name.len || !inside(p->name.p, p->name.len, body, blen))
            FAIL("a name empty or outside the body");
        if (p->filename.p && !inside(p->filename.p, p->filename.len, body, blen))
            FAIL("a filename outside the body");
        if (!p->content_type.p || !p->content_type.len)
            FAIL("no content type");
        if (!inside(p->content_type.p, p->content_type.len, body, blen) &&
            !(p->content_type.len == 10 && memcmp(p->content_type.p, "text/plain", 10) == 0))
            FAIL("a content type outside the body that is not the default");
    }
    for (size_t i = n; i < 16; i++) {
        const uint8_t *b = (const uint8_t *)&parts[i];
        for (size_t k = 0; k < sizeof(parts[i]); k++)
            if (b[k] != 0xa5)
                FAIL("a part written past *nparts");
    }
    weir_http_part again[16];
    size_t n2 = 0;
    char why2[128];
    int rc2 = weir_http_multipart_parse(ct, ctlen, body, blen, again, cap, &n2, why2, sizeof(why2));
    if (rc2 != rc || n2 != n || strcmp(why, why2) != 0 ||
        (n && memcmp(again, parts, n * sizeof(parts[0])) != 0))
        FAIL("a second parse disagrees");
    free(ct);
    free(body);
    return 0;
}
