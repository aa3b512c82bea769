/* The hash bitmap's CPU hot loops (Zen, section 3.3), called through ctypes by zen_analysis.zen.native.
 *
 * Bit t of partition p's bitmap stands for S_p[t] (the p-th static hash set, sorted); the bitmaps of all
 * partitions are concatenated, partition p's starting at byte byte_starts[p]; the static sets are concatenated
 * the same way in `order`, S_p starting at element starts[p]. Bit i of a byte is (byte >> i) & 1, as in
 * zen_analysis.zen.bitmap.pack_bits. Every loop is one pass over the bytes (eight at a time) plus work per set
 * bit: none touches the dense tensor except the final scatter into it.
 */
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the eight-bytes-at-a-time loops assume a little-endian machine"
#endif

/* out[pos >> 3] |= 1 << (pos & 7) for each of the k positions (duplicates allowed); out is zeroed by the caller. */
void zen_bits_set(const int64_t *pos, int64_t k, uint8_t *out) {
    for (int64_t i = 0; i < k; i++) out[pos[i] >> 3] |= (uint8_t)(1u << (pos[i] & 7));
}

static int64_t popcount_range(const uint8_t *bits, int64_t lo, int64_t hi) {
    int64_t c = 0, i = lo;
    for (; i + 8 <= hi; i += 8) {
        uint64_t w;
        memcpy(&w, bits + i, 8);
        c += __builtin_popcountll(w);
    }
    for (; i < hi; i++) c += __builtin_popcount(bits[i]);
    return c;
}

/* counts[p] = set bits of partition p's bitmap. */
void zen_popcounts(const uint8_t *bits, const int64_t *byte_starts, int n, int64_t *counts) {
    for (int p = 0; p < n; p++) counts[p] = popcount_range(bits, byte_starts[p], byte_starts[p + 1]);
}

/* For each set bit, in partition order and ascending within a partition, write the next value to the index the
 * bit stands for: out[order[starts[p] + t]] = values[j++]. Returns the number of values consumed. */
#define DECODE_SCATTER(NAME, ORDER_T)                                                                       \
    int64_t NAME(const uint8_t *bits, const int64_t *byte_starts, const int64_t *starts, int n,             \
                 const ORDER_T *order, const float *values, float *out) {                                 \
        int64_t j = 0;                                                                                      \
        for (int p = 0; p < n; p++) {                                                                       \
            const ORDER_T *s_p = order + starts[p];                                                         \
            int64_t lo = byte_starts[p], hi = byte_starts[p + 1], i = lo;                                   \
            for (; i + 8 <= hi; i += 8) {                                                                   \
                uint64_t w;                                                                                 \
                memcpy(&w, bits + i, 8); /* little-endian: bit b of byte i+q is bit 8q+b of w */           \
                while (w) {                                                                                 \
                    int b = __builtin_ctzll(w);                                                             \
                    out[s_p[(i - lo) * 8 + b]] = values[j++];                                               \
                    w &= w - 1;                                                                             \
                }                                                                                           \
            }                                                                                               \
            for (; i < hi; i++) {                                                                           \
                unsigned w = bits[i];                                                                       \
                while (w) {                                                                                 \
                    int b = __builtin_ctz(w);                                                               \
                    out[s_p[(i - lo) * 8 + b]] = values[j++];                                               \
                    w &= w - 1;                                                                             \
                }                                                                                           \
            }                                                                                               \
        }                                                                                                   \
        return j;                                                                                           \
    }

DECODE_SCATTER(zen_decode_scatter_i32, int32_t)
DECODE_SCATTER(zen_decode_scatter_i64, int64_t)

/* values[j++] = acc[t] for each set bit t of one bitmap of nbytes bytes, ascending. Returns j. */
int64_t zen_gather_set(const uint8_t *bits, int64_t nbytes, const float *acc, float *values) {
    int64_t j = 0, i = 0;
    for (; i + 8 <= nbytes; i += 8) {
        uint64_t w;
        memcpy(&w, bits + i, 8);
        while (w) {
            int b = __builtin_ctzll(w);
            values[j++] = acc[i * 8 + b];
            w &= w - 1;
        }
    }
    for (; i < nbytes; i++) {
        unsigned w = bits[i];
        while (w) {
            int b = __builtin_ctz(w);
            values[j++] = acc[i * 8 + b];
            w &= w - 1;
        }
    }
    return j;
}
