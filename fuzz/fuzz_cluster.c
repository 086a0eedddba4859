/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_cluster.c - the cluster protocol's decoder (cluster/proto.h) on
 * arbitrary payloads: every frame a coordinator, a worker or a client
 * reads from a peer goes through it. Whatever the bytes, decoding returns
 * 0 or a refusal (-EBADMSG / -EMSGSIZE) with a reason, never reads out of
 * bounds, never leaks; a refused frame leaves the message zeroed. An
 * accepted message is one the encoder accepts too (the codec never takes
 * what it would not send), and its encoding is a fixed point: decoding it
 * again and encoding gives the same bytes (an ignored tail or a defaulted
 * one is normalised once, then stays). The handshake kinds' versions read
 * by weir__cl_peek_versions are the decoded ones.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/proto.h"

static uint8_t *encode(const weir__cl_msg *m, size_t *len)
{
    weir_frame_builder fb;
    char why[256];
    if (weir__cl_encode(m, &fb, why, sizeof(why)) != 0)
        abort(); /* decoded, so it must encode */
    uint8_t *f = weir_frame_builder_take(&fb, len);
    if (!f)
        abort();
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    weir__cl_msg m;
    char why[256];
    why[0] = '\0';
    int e = weir__cl_decode(data, size, &m, why, sizeof(why));
    if (e) {
        static const weir__cl_msg zero;
        if ((e != -EBADMSG && e != -EMSGSIZE) || !why[0] || memcmp(&m, &zero, sizeof(m)) != 0)
            abort();
        return 0;
    }
    if (!weir__cl_kind_name(m.kind) || m.kind != data[0])
        abort();
    uint32_t v, min;
    if (weir__cl_peek_versions(data, size, &v, &min) == 0) {
        const uint32_t *want = m.kind == WEIR_CLUSTER_REGISTER       ? &m.u.reg.version
                               : m.kind == WEIR_CLUSTER_REGISTER_ACK ? &m.u.reg_ack.version
                               : m.kind == WEIR_CLUSTER_HELLO_CLIENT ? &m.u.hello.version
                                                                     : &m.u.hello_ack.version;
        if (v != want[0] || min != want[1])
            abort();
    }
    size_t len1, len2;
    uint8_t *f1 = encode(&m, &len1);
    weir__cl_msg again;
    if (weir__cl_decode(f1 + 4, len1 - 4, &again, why, sizeof(why)) != 0)
        abort();
    uint8_t *f2 = encode(&again, &len2);
    if (len1 != len2 || memcmp(f1, f2, len1) != 0)
        abort();
    weir__cl_msg_free(&again);
    weir__cl_msg_free(&m);
    free(f1);
    free(f2);
    return 0;
}
