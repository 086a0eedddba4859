/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_manifest.c - the checkpoint manifest decoder (stream/manifest.h) on
 * arbitrary text. A manifest is read back from a checkpoint directory
 * another process (or a damaged disk) wrote: whatever the bytes, decoding
 * returns 0, -EBADMSG with a reason, or -ENOMEM, and leaks nothing. A
 * manifest it accepts has every subtask naming one of its operators
 * within that operator's parallelism, key groups within [0, 128], and
 * encodes and decodes again to the same manifest.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "stream/manifest.h"

static int same(const weir__manifest *a, const weir__manifest *b)
{
    if (a->id != b->id || strcmp(a->job, b->job) || a->nops != b->nops || a->nsubs != b->nsubs)
        return 0;
    for (uint32_t i = 0; i < a->nops; i++)
        if (strcmp(a->ops[i].name, b->ops[i].name) || a->ops[i].par != b->ops[i].par ||
            !a->ops[i].fixed != !b->ops[i].fixed)
            return 0;
    for (uint32_t i = 0; i < a->nsubs; i++) {
        const weir__manifest_sub *x = &a->subs[i], *y = &b->subs[i];
        if (x->op != y->op || x->sub != y->sub || x->kg_first != y->kg_first ||
            x->kg_end != y->kg_end || x->bytes != y->bytes || !x->state != !y->state ||
            !x->position != !y->position || (x->state && strcmp(x->state, y->state)) ||
            (x->position && strcmp(x->position, y->position)))
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    weir__manifest m, again;
    char why[256];
    why[0] = '\0';
    int e = weir__manifest_decode(data, size, &m, why, sizeof(why));
    if (e) {
        if ((e != -EBADMSG && e != -ENOMEM) || !why[0])
            abort();
        return 0;
    }
    for (uint32_t i = 0; i < m.nsubs; i++)
        if (m.subs[i].op >= m.nops || m.subs[i].sub >= m.ops[m.subs[i].op].par ||
            m.subs[i].kg_end > 128 || m.subs[i].kg_first > m.subs[i].kg_end)
            abort();
    size_t len;
    char *text = weir__manifest_encode(&m, &len);
    if (!text)
        abort();
    if (weir__manifest_decode(text, len, &again, why, sizeof(why)) != 0 || !same(&m, &again))
        abort();
    weir__free(text);
    weir__manifest_clear(&again);
    weir__manifest_clear(&m);
    return 0;
}
