/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_plan.c - the plan decoder (stream/plan.h) on arbitrary payloads.
 * A plan comes from the coordinator over the network: whatever the bytes,
 * decoding returns 0 or -EBADMSG/-ENOMEM and never reads out of bounds or
 * leaks. A plan that decodes must encode back to the same bytes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "stream/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    weir__plan *p;
    char why[256];
    int e = weir__plan_decode(data, size, &p, why, sizeof(why));
    if (e) {
        if (e != -EBADMSG && e != -ENOMEM)
            abort();
        return 0;
    }
    weir_frame_builder fb;
    if (weir__plan_encode(p, &fb) != 0)
        abort();
    size_t len;
    uint8_t *b = weir_frame_builder_take(&fb, &len);
    if (!b || len != size + 4 || memcmp(b + 4, data, size) != 0)
        abort();
    free(b);
    weir__plan_free(p);
    return 0;
}
