/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sha256.h - SHA-256 of a buffer, and its lowercase hex. A thin wrapper
 * over libcrypto's EVP interface (OpenSSL; DESIGN.md names it for SHA-256
 * and TLS), so the rest of weir includes no OpenSSL header and links
 * libcrypto through libweir alone. Content-addressed plugins
 * (cluster/plugins.h) are its first user.
 *
 * Any thread; no state. libcrypto allocates its digest context with its
 * own allocator, not base/alloc.h, so weir__alloc_fail_after does not
 * reach it.
 */
#ifndef WEIR_BASE_SHA256_H
#define WEIR_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define WEIR__SHA256_SIZE 32u
/* Hex digits of a digest, and the buffer that holds them with their NUL. */
#define WEIR__SHA256_HEX_LEN  64u
#define WEIR__SHA256_HEX_SIZE 65u

/* out := SHA-256(buf[0..len)). buf may be NULL when len is 0. 0, or -EINVAL
 * (out NULL, or buf NULL with len > 0), -ENOMEM (libcrypto failed: it
 * reports nothing finer for a one-shot digest). */
int weir__sha256(const void *buf, size_t len, uint8_t out[WEIR__SHA256_SIZE]);

/* hex := the 64 lowercase hex digits of h, NUL-terminated. Returns hex. */
char *weir__sha256_hex(const uint8_t h[WEIR__SHA256_SIZE], char hex[WEIR__SHA256_HEX_SIZE]);

#endif
