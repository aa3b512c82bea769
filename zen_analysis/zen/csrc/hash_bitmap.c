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

#include "zen_exports.h"
#include "zen_hash.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the eight-bytes-at-a-time loops assume a little-endian machine"
#endif

/* out[pos >> 3] |= 1 << (pos & 7) for each of the k positions (duplicates allowed); out is zeroed by the caller. */
void zen_bits_set(const int64_t *pos, int64_t k, uint8_t *out) {
    for (int64_t i = 0; i < k; i++) out[pos[i] >> 3] |= (uint8_t)(1u << (pos[i] & 7));
}

/* The (up to) eight bytes of bits[i..hi) as one little-endian word, zero-padded past hi: bit b of byte i+q is
 * bit 8q+b of the word, so every loop below walks a bitmap eight bytes at a time, its tail included. */
static inline uint64_t word_at(const uint8_t *bits, int64_t i, int64_t hi) {
    uint64_t w = 0;
    memcpy(&w, bits + i, hi - i < 8 ? (size_t)(hi - i) : 8);
    return w;
}

static int64_t popcount_range(const uint8_t *bits, int64_t lo, int64_t hi) {
    int64_t c = 0;
    for (int64_t i = lo; i < hi; i += 8) c += __builtin_popcountll(word_at(bits, i, hi));
    return c;
}

/* counts[p] = set bits of partition p's bitmap. */
void zen_popcounts(const uint8_t *bits, const int64_t *byte_starts, int n, int64_t *counts) {
    for (int p = 0; p < n; p++) counts[p] = popcount_range(bits, byte_starts[p], byte_starts[p + 1]);
}

/* For each set bit, in partition order and ascending within a partition, write the next value to the index the
 * bit stands for: out[order[starts[p] + t]] = values[j++]. At most cap values are read and only indices in
 * [0, numel) written: returns the number of values consumed, or -1 (stopping there) if the bitmaps hold more set
 * bits than values or point outside the output. */
#define DECODE_ONE(ORDER_T)                                                                                 \
    do {                                                                                                    \
        if (j == cap) return -1;                                                                            \
        ORDER_T dst = s_p[t];                                                                               \
        if (dst < 0 || (int64_t)dst >= numel) return -1;                                                   \
        out[dst] = values[j++];                                                                             \
    } while (0)

#define DECODE_SCATTER(NAME, ORDER_T)                                                                       \
    int64_t NAME(const uint8_t *bits, const int64_t *byte_starts, const int64_t *starts, int n,             \
                 const ORDER_T *order, const float *values, int64_t cap, float *out, int64_t numel) {      \
        int64_t j = 0;                                                                                      \
        for (int p = 0; p < n; p++) {                                                                       \
            const ORDER_T *s_p = order + starts[p];                                                         \
            int64_t lo = byte_starts[p], hi = byte_starts[p + 1];                                           \
            for (int64_t i = lo; i < hi; i += 8) {                                                          \
                for (uint64_t w = word_at(bits, i, hi); w; w &= w - 1) {                                    \
                    int64_t t = (i - lo) * 8 + __builtin_ctzll(w);                                          \
                    DECODE_ONE(ORDER_T);                                                                    \
                }                                                                                           \
            }                                                                                               \
        }                                                                                                   \
        return j;                                                                                           \
    }

DECODE_SCATTER(zen_decode_scatter_i32, int32_t)
DECODE_SCATTER(zen_decode_scatter_i64, int64_t)

/* ---- Zen's push and aggregation on the CPU */

/* Non-zeros of x[0..n): their positions and values, ascending; returns how many, or -1 if more than cap (the
 * caller then retries with room for zen_count_nonzero's count). A float is non-zero when its bits other than the
 * sign are (as torch.nonzero: -0.0 is zero, NaN is not). */
int64_t zen_count_nonzero(const float *x, int64_t n) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, x + i, 4);
        k += (b & 0x7FFFFFFFu) != 0;
    }
    return k;
}

/* Bit j of the result: whether x[j] is non-zero, for the 64 floats at x (SSE2, part of every x86-64, where
 * present; a plain loop elsewhere). */
static inline uint64_t nonzero_mask64(const float *x) {
    uint64_t m = 0;
#if defined(__SSE2__)
    const __m128i sign_off = _mm_set1_epi32(0x7FFFFFFF), zero = _mm_setzero_si128();
    for (int j = 0; j < 16; j++) {
        __m128i v = _mm_and_si128(_mm_loadu_si128((const __m128i *)(x + 4 * j)), sign_off);
        m |= (uint64_t)(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(v, zero))) ^ 0xF) << (4 * j);
    }
#else
    for (int j = 0; j < 64; j++) {
        uint32_t b;
        memcpy(&b, x + j, 4);
        m |= (uint64_t)((b & 0x7FFFFFFFu) != 0) << j;
    }
#endif
    return m;
}

/* One pass at memory speed: a 64-bit non-zero mask per 64 floats (vector compares, no branch per element), then
 * one store per set bit. */
int64_t zen_extract(const float *x, int64_t n, int64_t *idx, float *val, int64_t cap) {
    int64_t k = 0, i = 0;
    for (; i + 64 <= n; i += 64) {
        uint64_t m = nonzero_mask64(x + i);
        if (!m) continue;
        if (k + __builtin_popcountll(m) > cap) return -1;
        do {
            int b = __builtin_ctzll(m);
            idx[k] = i + b;
            val[k] = x[i + b];
            k++;
            m &= m - 1;
        } while (m);
    }
    for (; i < n; i++) {
        uint32_t b;
        memcpy(&b, x + i, 4);
        if (b & 0x7FFFFFFFu) {
            if (k == cap) return -1;
            idx[k] = i;
            val[k] = x[i];
            k++;
        }
    }
    return k;
}

/* values[j++] = acc[t], then acc[t] = 0, for each set bit t ascending (acc is all zero again afterwards); at
 * most cap values. Returns j, or -1 if the bitmap has more than cap set bits (the values past cap not written). */
int64_t zen_take_set(const uint8_t *bits, int64_t nbytes, float *acc, float *values, int64_t cap) {
    int64_t j = 0;
    for (int64_t i = 0; i < nbytes; i += 8) {
        for (uint64_t w = word_at(bits, i, nbytes); w; w &= w - 1) {
            int64_t t = i * 8 + __builtin_ctzll(w);
            if (j == cap) return -1;
            values[j++] = acc[t];
            acc[t] = 0.0f;
        }
    }
    return j;
}

/* Prefetch the 64-byte lines of the 64 int32 at t whose elements the mask m marks. */
static inline void prefetch_lines(const int32_t *t, uint64_t m) {
    for (int q = 0; q < 4; q++)
        if ((m >> (16 * q)) & 0xFFFF) __builtin_prefetch(t + 16 * q);
}

/* The push message in one pass over x[0..numel): each non-zero's server h0(i) mod n, its
 * position in S_p (rank_of[i]) and its value bits go to tmp (three int32 per entry, in index order) while x
 * streams through; a stable counting sort then groups them by server into words (two int32 per entry, ascending
 * positions within a server). counts[p] receives the group sizes. Returns the number of non-zeros, or -1 if there
 * are more than cap (nothing usable written: the caller retries with room for zen_count_nonzero's count). */
int64_t zen_extract_pack(const float *x, int64_t numel, int64_t n, uint32_t seed, const int32_t *rank_of,
                         int32_t *tmp, int64_t *counts, int32_t *words, int64_t cap) {
    for (int64_t p = 0; p < n; p++) counts[p] = 0;
    int pow2 = (n & (n - 1)) == 0;
    int64_t k = 0, i = 0;
    enum { AHEAD = 8 }; /* blocks: the masks of the next AHEAD blocks are known, their rank_of entries prefetched */
    uint64_t ring[AHEAD] = {0};
    int64_t full = numel / 64 * 64;
    for (int64_t a = 0; a < AHEAD && 64 * a < full; a++) {
        ring[a] = nonzero_mask64(x + 64 * a);
        prefetch_lines(rank_of + 64 * a, ring[a]);
    }
    for (; i < numel; i += 64) {
        uint64_t m;
        if (i + 64 <= numel) {
            m = ring[(i / 64) % AHEAD];
            int64_t ahead = i + 64 * AHEAD;
            if (ahead + 64 <= numel) {
                ring[(i / 64) % AHEAD] = nonzero_mask64(x + ahead);
                prefetch_lines(rank_of + ahead, ring[(i / 64) % AHEAD]);
            }
        } else { /* the tail */
            m = 0;
            for (int64_t j = i; j < numel; j++) {
                uint32_t b;
                memcpy(&b, x + j, 4);
                m |= (uint64_t)((b & 0x7FFFFFFFu) != 0) << (j - i);
            }
        }
        if (!m) continue;
        if (k + __builtin_popcountll(m) > cap) return -1;
        do {
            int64_t at = i + __builtin_ctzll(m);
            uint32_t h = h0(at, seed);
            int32_t p = (int32_t)(pow2 ? (h & (uint32_t)(n - 1)) : (h % (uint32_t)n));
            tmp[3 * k] = p;
            tmp[3 * k + 1] = rank_of[at];
            memcpy(&tmp[3 * k + 2], x + at, 4);
            counts[p]++;
            k++;
            m &= m - 1;
        } while (m);
    }
    int64_t run = 0;
    for (int64_t p = 0; p < n; p++) { /* counts -> start offsets, restored below */
        int64_t c = counts[p];
        counts[p] = run;
        run += c;
    }
    for (int64_t e = 0; e < k; e++) {
        int64_t dst = counts[tmp[3 * e]]++;
        words[2 * dst] = tmp[3 * e + 1];
        words[2 * dst + 1] = tmp[3 * e + 2];
    }
    for (int64_t p = n - 1; p > 0; p--) counts[p] -= counts[p - 1]; /* end offsets -> sizes */
    return k;
}

/* Server p's aggregation of received packed entries (position in S_p, value bits): set bit t, acc[t] += value.
 * Every position is checked first: returns -1 without touching bits or acc if one is past |S_p|, else 0. */
int zen_accumulate_packed(const int32_t *words, int64_t r, int64_t set_size, uint8_t *bits, float *acc) {
    for (int64_t i = 0; i < r; i++) {
        int64_t t = words[2 * i];
        if (t < 0 || t >= set_size) return -1;
    }
    for (int64_t i = 0; i < r; i++) {
        int64_t t = words[2 * i];
        float v;
        memcpy(&v, &words[2 * i + 1], 4);
        bits[t >> 3] |= (uint8_t)(1u << (t & 7));
        acc[t] += v;
    }
    return 0;
}

/* Server p's aggregation when every sender's entries arrive in ascending position (what zen_extract_pack and a
 * stable grouping send): the ns streams words[2 offs[s] .. 2 offs[s+1]) are merged block by block over S_p, each
 * block's sums kept in a small accumulator that stays in cache, and the block's set bits read out at once —
 * O(received + |S_p| / 8), with no pass over an |S_p|-sized buffer. Writes the bitmap (zeroed by the caller) and
 * the summed values in bit order; returns how many values, -1 if a position is past |S_p| or -2 if a stream is
 * not ascending (both checked before anything is written). cursor is scratch of ns int64. */
#define ZEN_BLOCK 16384
int64_t zen_aggregate_sorted(const int32_t *words, const int64_t *offs, int64_t ns, int64_t set_size, uint8_t *bits,
                             float *values, int64_t *cursor) {
    for (int64_t s = 0; s < ns; s++) {
        int32_t prev = -1;
        for (int64_t c = offs[s]; c < offs[s + 1]; c++) {
            int32_t t = words[2 * c];
            if (t < 0 || t >= set_size) return -1;
            if (t < prev) return -2;
            prev = t;
        }
        cursor[s] = offs[s];
    }
    float acc[ZEN_BLOCK] = {0};
    int64_t j = 0;
    for (int64_t lo = 0; lo < set_size; lo += ZEN_BLOCK) { /* ZEN_BLOCK is a multiple of 64: blocks start on words */
        int64_t hi = lo + ZEN_BLOCK < set_size ? lo + ZEN_BLOCK : set_size;
        for (int64_t s = 0; s < ns; s++) {
            int64_t c = cursor[s], e = offs[s + 1];
            for (; c < e && words[2 * c] < hi; c++) {
                int64_t t = words[2 * c];
                float v;
                memcpy(&v, &words[2 * c + 1], 4);
                bits[t >> 3] |= (uint8_t)(1u << (t & 7));
                acc[t - lo] += v;
            }
            cursor[s] = c;
        }
        int64_t b_lo = lo >> 3, b_hi = (hi + 7) >> 3;
        for (int64_t i = b_lo; i < b_hi; i += 8) {
            for (uint64_t w = word_at(bits, i, b_hi); w; w &= w - 1) {
                int64_t t = (i - b_lo) * 8 + __builtin_ctzll(w);
                values[j++] = acc[t];
                acc[t] = 0.0f;
            }
        }
    }
    return j;
}
