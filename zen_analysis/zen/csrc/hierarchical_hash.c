/* Zen's hierarchical hashing (Algorithm 1) as a CPU kernel, called through ctypes by zen_analysis.zen.native.
 *
 * The Python caller splits the indices into one chunk per thread and calls zen_place on each chunk from its own
 * thread (ctypes releases the GIL), then zen_compact per range of partitions: the same structure as the GPU
 * kernel, with threads instead of warps. Slots are claimed with a compare-and-swap, so two threads probing one
 * slot cannot both believe they won (the paper's read-after-write check has that race).
 *
 * h0 must equal zen_analysis.zen.hashing.h0 bit for bit (MurmurHash3 fmix32 over the index's two 32-bit halves,
 * seeded); the test suite checks it. The hash memory holds input positions (int32, EMPTY = -1):
 * partition p owns slots [p * (par + ser), (p + 1) * (par + ser)), the first par the parallel region.
 */
#include <stdint.h>

#include "zen_exports.h"
#include "zen_hash.h"

#define EMPTY (-1)
#ifndef PREFETCH /* indices hashed ahead, so the probe's cache miss overlaps the work on earlier ones */
#define PREFETCH 32
#endif

typedef struct {
    int64_t part; /* partition (server) of the index: h0 mod n */
    uint64_t g;   /* second-level hash: h0's bits the partition did not use, or a fresh seeded hash */
    int64_t slot; /* first probe, g mod par (computed once, for the prefetch and the probe) */
} hashed_t;

static inline hashed_t hash_one(int64_t idx, int64_t n, int pow2_shift, uint32_t seed, int use_l2, uint32_t l2_seed) {
    hashed_t r;
    uint64_t h = h0(idx, seed);
    if (pow2_shift >= 0) {
        r.part = (int64_t)(h & (uint64_t)(n - 1));
        r.g = h >> pow2_shift;
    } else {
        r.part = (int64_t)(h % (uint64_t)n);
        r.g = h / (uint64_t)n;
    }
    if (use_l2) r.g = h0(idx, l2_seed);
    return r;
}

/* Place positions [start, end) of idx into the hash memory. counts_n (this chunk's own n counters) gets the
 * number of indices per partition; serial_fill_n (shared) the serial-region counters; indices past a full serial
 * region go to overflow (shared, with overflow_len its shared length). Returns how many went to serial regions
 * (including the overflowed ones). */
int64_t zen_place(const int64_t *idx, int64_t start, int64_t end, int64_t n, int pow2_shift, uint32_t seed, int use_l2,
                  uint32_t l2_seed, int k, int64_t par, int64_t ser, int32_t *memory, int64_t *counts_n,
                  int64_t *serial_fill_n, int32_t *overflow, int64_t *overflow_len, int atomic) {
    hashed_t ring[PREFETCH];
    int64_t serial = 0, stride = par + ser;
    for (int64_t i = start; i < end + PREFETCH; ++i) {
        int64_t j = i - PREFETCH; /* ring[j % PREFETCH] is hashed, its slot prefetched; then the slot is reused for i */
        if (j >= start) {
            hashed_t r = ring[j % PREFETCH];
            int32_t pos = (int32_t)j;
            int32_t *region = memory + r.part * stride;
            counts_n[r.part] += 1;
            uint64_t step = (r.g >> 11) | 1;
            int placed = 0;
            for (int t = 0; t < k && !placed; ++t) {
                int32_t *slot = region + (t == 0 ? r.slot : (int64_t)((r.g + (uint64_t)t * step) % (uint64_t)par));
                int32_t expected = EMPTY;
                if (__atomic_load_n(slot, __ATOMIC_RELAXED) != EMPTY) continue;
                if (!atomic) { /* the only thread: a plain store claims the slot */
                    *slot = pos;
                    placed = 1;
                } else if (__atomic_compare_exchange_n(slot, &expected, pos, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
                    placed = 1;
            }
            if (!placed) {
                serial += 1;
                int64_t s = __atomic_fetch_add(&serial_fill_n[r.part], 1, __ATOMIC_RELAXED);
                if (s < ser)
                    region[par + s] = pos;
                else /* the serial region is full: never drop an index, keep it aside for the compaction */
                    overflow[__atomic_fetch_add(overflow_len, 1, __ATOMIC_RELAXED)] = pos;
            }
        }
        if (i < end) {
            hashed_t r = hash_one(idx[i], n, pow2_shift, seed, use_l2, l2_seed);
            r.slot = (int64_t)(r.g % (uint64_t)par);
            ring[i % PREFETCH] = r;
            if (k > 0) __builtin_prefetch(&memory[r.part * stride + r.slot], 1, 0);
        }
    }
    return serial;
}

/* Write the positions of partitions [p_lo, p_hi) to out, partition p at [offsets_n[p], offsets_n[p + 1]): its
 * parallel region's occupied slots, its serial region, then its overflowed positions (overflow grouped by
 * partition, partition p's at [overflow_offsets_n[p], overflow_offsets_n[p + 1])). The parallel region is copied
 * without branches; the copy stops once the partition's parallel share is written, so it never writes past it. */
void zen_compact(const int32_t *memory, int64_t p_lo, int64_t p_hi, int64_t par, int64_t ser,
                 const int64_t *serial_fill_n, const int32_t *overflow, const int64_t *overflow_offsets_n,
                 const int64_t *offsets_n, int64_t *out) {
    int64_t stride = par + ser;
    for (int64_t p = p_lo; p < p_hi; ++p) {
        const int32_t *region = memory + p * stride;
        int64_t fill = serial_fill_n[p] < ser ? serial_fill_n[p] : ser;
        int64_t spilled = serial_fill_n[p] - fill;
        int64_t w = offsets_n[p], par_end = offsets_n[p + 1] - fill - spilled;
        for (int64_t s = 0; w < par_end; ++s) {
            int32_t v = region[s];
            out[w] = v;
            w += v != EMPTY;
        }
        for (int64_t s = 0; s < fill; ++s) out[w++] = region[par + s];
        for (int64_t o = overflow_offsets_n[p]; o < overflow_offsets_n[p + 1]; ++o) out[w++] = overflow[o];
    }
}

/* h0 of idx[0:len) into out (for the test that pins this file's hash to the Python one). */
void zen_h0(const int64_t *idx, int64_t len, uint32_t seed, int64_t *out) {
    for (int64_t i = 0; i < len; ++i) out[i] = h0(idx[i], seed);
}

