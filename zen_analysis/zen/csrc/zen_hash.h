/* h0, Zen's first-level hash, shared by the C kernels: it must equal zen_analysis.zen.hashing.h0 bit for bit
 * (MurmurHash3's fmix32 over the index's two 32-bit halves, seeded); the test suite checks it. */
#ifndef ZEN_HASH_H
#define ZEN_HASH_H
#include <stdint.h>

static inline uint32_t fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

static inline uint32_t h0(int64_t idx, uint32_t seed) {
    uint64_t u = (uint64_t)idx;
    uint32_t hi_seed = seed * 0x9E3779B1u + 0x7F4A7C15u;
    uint32_t lo = fmix32((uint32_t)u ^ seed);
    uint32_t hi = fmix32((uint32_t)(u >> 32) ^ hi_seed);
    return fmix32(lo ^ (hi * 0x27D4EB2Fu));
}

#endif
