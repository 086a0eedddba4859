/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sha256.c - SHA-256 through libcrypto's one-shot EVP_Digest (sha256.h).
 */
#include "base/sha256.h"

#include <errno.h>
#include <openssl/evp.h>

int weir__sha256(const void *buf, size_t len, uint8_t out[WEIR__SHA256_SIZE])
{
    static const unsigned char none[1];
    if (!out || (!buf && len))
        return -EINVAL;
    unsigned int n = 0;
    if (EVP_Digest(buf ? buf : none, len, out, &n, EVP_sha256(), NULL) != 1 ||
        n != WEIR__SHA256_SIZE)
        return -ENOMEM;
    return 0;
}

char *weir__sha256_hex(const uint8_t h[WEIR__SHA256_SIZE], char hex[WEIR__SHA256_HEX_SIZE])
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < WEIR__SHA256_SIZE; i++) {
        hex[2 * i] = digits[h[i] >> 4];
        hex[2 * i + 1] = digits[h[i] & 15];
    }
    hex[WEIR__SHA256_HEX_LEN] = '\0';
    return hex;
}
