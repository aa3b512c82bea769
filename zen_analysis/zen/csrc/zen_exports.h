/* Every function the kernel exports: the one declaration of their signatures. Both sources include it, so the C
 * compiler refuses a definition that differs from it, and zen_analysis.zen.native builds its ctypes signatures
 * from it, so Python cannot disagree with it either (one prototype per line group, ending in ");"). */
#ifndef ZEN_EXPORTS_H
#define ZEN_EXPORTS_H
#include <stdint.h>

/* hierarchical_hash.c: Algorithm 1 */
int64_t zen_place(const int64_t *idx, int64_t start, int64_t end, int64_t n, int pow2_shift, uint32_t seed, int use_l2,
                  uint32_t l2_seed, int k, int64_t par, int64_t ser, int32_t *memory, int64_t *counts_n,
                  int64_t *serial_fill_n, int32_t *overflow, int64_t *overflow_len, int atomic);
void zen_compact(const int32_t *memory, int64_t p_lo, int64_t p_hi, int64_t par, int64_t ser,
                 const int64_t *serial_fill_n, const int32_t *overflow, const int64_t *overflow_offsets_n,
                 const int64_t *offsets_n, int64_t *out);
void zen_h0(const int64_t *idx, int64_t len, uint32_t seed, int64_t *out);

/* hash_bitmap.c: the hash bitmap, Zen's push and aggregation */
void zen_bits_set(const int64_t *pos, int64_t k, uint8_t *out);
void zen_popcounts(const uint8_t *bits, const int64_t *byte_starts, int n, int64_t *counts);
int64_t zen_decode_scatter_i32(const uint8_t *bits, const int64_t *byte_starts, const int64_t *starts, int n,
                               const int32_t *order, const float *values, int64_t cap, float *out, int64_t numel);
int64_t zen_decode_scatter_i64(const uint8_t *bits, const int64_t *byte_starts, const int64_t *starts, int n,
                               const int64_t *order, const float *values, int64_t cap, float *out, int64_t numel);
int64_t zen_count_nonzero(const float *x, int64_t n);
int64_t zen_extract(const float *x, int64_t n, int64_t *idx, float *val, int64_t cap);
int64_t zen_take_set(const uint8_t *bits, int64_t nbytes, float *acc, float *values, int64_t cap);
int64_t zen_extract_pack(const float *x, int64_t numel, int64_t n, uint32_t seed, const int32_t *rank_of,
                         int32_t *tmp, int64_t *counts, int32_t *words, int64_t cap);
int zen_accumulate_packed(const int32_t *words, int64_t r, int64_t set_size, uint8_t *bits, float *acc);
int64_t zen_aggregate_sorted(const int32_t *words, const int64_t *offs, int64_t ns, int64_t set_size, uint8_t *bits,
                             float *values, int64_t *cursor);

#endif
