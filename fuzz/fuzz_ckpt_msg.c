/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_ckpt_msg.c - the checkpoint message decoder (stream/ckpt_link.h) on
 * arbitrary payloads. Its frames come from another process over the
 * control socket: whatever the bytes, decoding returns 0 or -EBADMSG with
 * a reason, never reads out of bounds, and a message it accepts has a
 * known kind, a non-zero id (a FINAL_REQ may have none) and handles that are storage names (or
 * empty), both NUL-terminated within their buffers.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "state/storage.h"
#include "stream/ckpt_link.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    weir__ckpt_msg m;
    char why[96];
    why[0] = '\0';
    int e = weir__ckpt_msg_decode(data, size, &m, why, sizeof(why));
    if (e) {
        if (e != -EBADMSG || !why[0])
            abort();
        return 0;
    }
    if (m.kind < WEIR__CK_TRIGGER || m.kind > WEIR__CK_LAST ||
        (m.id == 0 && m.kind != WEIR__CK_FINAL_REQ) || !memchr(m.state, 0, sizeof(m.state)) ||
        !memchr(m.position, 0, sizeof(m.position)) ||
        (m.state[0] && weir__storage_check_name(m.state, 0) < 0) ||
        (m.position[0] && weir__storage_check_name(m.position, 0) < 0))
        abort();
    return 0;
}
