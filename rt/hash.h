/* FNV-1a, 64 bits: the one hash that fingerprints configurations, job tokens, data
 * sets and parameters for comparison across ranks (not for security: a job token's hash
 * only keeps the token itself off the wire). Chain calls to hash several pieces. */
#ifndef RT_HASH_H
#define RT_HASH_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define RT_FNV1A_INIT 0xcbf29ce484222325ull /* the offset basis: the hash of nothing */

static inline uint64_t rt_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

static inline uint64_t rt_fnv1a_str(uint64_t h, const char *s) { return rt_fnv1a(h, s, strlen(s)); }
#endif
