/* The Internet checksum (RFC 1071) over a Bigarray, 64 bits at a time.

   The one's-complement sum does not depend on byte order (RFC 1071,
   section 2 B): words are added in the machine's order and the folded
   result is swapped back to network order at the end. Loads go through
   memcpy, so any start address works. Carries are kept in a 128-bit
   accumulator and folded once at the end. */

#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <caml/mlvalues.h>
#include <caml/bigarray.h>

static inline uint64_t load64(const uint8_t *p)
{
  uint64_t w;
  memcpy(&w, p, 8);
  return w;
}

static inline uint32_t fold64(unsigned __int128 acc)
{
  uint64_t lo = (uint64_t)acc, hi = (uint64_t)(acc >> 64);
  uint64_t s = lo + hi;
  if (s < lo) s++;
  s = (s & 0xffffffffu) + (s >> 32);
  s = (s & 0xffffffffu) + (s >> 32);
  s = (s & 0xffff) + (s >> 16);
  s = (s & 0xffff) + (s >> 16);
  return (uint32_t)s;
}

/* The folded 16-bit one's-complement sum of [len] bytes at [p], in the
   machine's byte order. */
static uint32_t sum_native(const uint8_t *p, size_t len)
{
  unsigned __int128 a = 0, b = 0;
  while (len >= 64) {
    a += load64(p);
    b += load64(p + 8);
    a += load64(p + 16);
    b += load64(p + 24);
    a += load64(p + 32);
    b += load64(p + 40);
    a += load64(p + 48);
    b += load64(p + 56);
    p += 64;
    len -= 64;
  }
  while (len >= 8) {
    a += load64(p);
    p += 8;
    len -= 8;
  }
  if (len > 0) {
    /* The tail starts at an even distance from the start, so a zeroed
       word with the remaining bytes copied in pads an odd byte with zero
       on the correct side. */
    uint64_t w = 0;
    memcpy(&w, p, len);
    b += w;
  }
  uint32_t s = fold64(a) + fold64(b);
  return (s & 0xffff) + (s >> 16);
}

#if defined(__x86_64__)
/* With AVX2: each 32-bit lane splits into its two 16-bit words, added
   into 32-bit lanes of four accumulators (no shuffles, no carries); the
   lanes are widened into 64-bit totals every 16384 rounds, well before a
   32-bit lane could overflow (2 words of at most 0xffff per round). */
__attribute__((target("avx2"))) static uint32_t sum_avx2(const uint8_t *p, size_t len)
{
  const __m256i mask = _mm256_set1_epi32(0xffff);
  const __m256i zero = _mm256_setzero_si256();
  __m256i total = zero;
  while (len >= 128) {
    size_t rounds = len / 128;
    if (rounds > 16384) rounds = 16384;
    __m256i a0 = zero, a1 = zero, a2 = zero, a3 = zero;
    for (size_t r = 0; r < rounds; r++) {
      __m256i v0 = _mm256_loadu_si256((const __m256i *)p);
      __m256i v1 = _mm256_loadu_si256((const __m256i *)(p + 32));
      __m256i v2 = _mm256_loadu_si256((const __m256i *)(p + 64));
      __m256i v3 = _mm256_loadu_si256((const __m256i *)(p + 96));
      a0 = _mm256_add_epi32(a0, _mm256_and_si256(v0, mask));
      a1 = _mm256_add_epi32(a1, _mm256_srli_epi32(v0, 16));
      a2 = _mm256_add_epi32(a2, _mm256_and_si256(v1, mask));
      a3 = _mm256_add_epi32(a3, _mm256_srli_epi32(v1, 16));
      a0 = _mm256_add_epi32(a0, _mm256_and_si256(v2, mask));
      a1 = _mm256_add_epi32(a1, _mm256_srli_epi32(v2, 16));
      a2 = _mm256_add_epi32(a2, _mm256_and_si256(v3, mask));
      a3 = _mm256_add_epi32(a3, _mm256_srli_epi32(v3, 16));
      p += 128;
    }
    len -= rounds * 128;
    __m256i lanes[4] = { a0, a1, a2, a3 };
    for (int k = 0; k < 4; k++) {
      total = _mm256_add_epi64(total, _mm256_unpacklo_epi32(lanes[k], zero));
      total = _mm256_add_epi64(total, _mm256_unpackhi_epi32(lanes[k], zero));
    }
  }
  uint64_t t[4];
  _mm256_storeu_si256((__m256i *)t, total);
  unsigned __int128 acc = (unsigned __int128)t[0] + t[1] + t[2] + t[3];
  uint32_t s = fold64(acc) + sum_native(p, len);
  return (s & 0xffff) + (s >> 16);
}

static int use_avx2 = -1;

static inline uint32_t sum_best(const uint8_t *p, size_t len)
{
  if (len < 256) return sum_native(p, len);
  if (use_avx2 < 0) {
    __builtin_cpu_init();
    use_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
  }
  return use_avx2 ? sum_avx2(p, len) : sum_native(p, len);
}
#else
static inline uint32_t sum_best(const uint8_t *p, size_t len) { return sum_native(p, len); }
#endif

static inline uint32_t to_network(uint32_t s)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  return ((s & 0xff) << 8) | (s >> 8);
#else
  return s;
#endif
}

/* [init] is a folded sum in network order, or any non-negative int that
   folds to one. */
intnat consort_net_sum_untagged(value buf, intnat off, intnat len, intnat init)
{
  const uint8_t *p = (const uint8_t *)Caml_ba_data_val(buf) + off;
  uint64_t s = (uint64_t)to_network(sum_best(p, (size_t)len));
  uint64_t i = (uint64_t)init;
  s += (i & 0xffffffffu) + (i >> 32);
  s = (s & 0xffff) + (s >> 16);
  s = (s & 0xffff) + (s >> 16);
  s = (s & 0xffff) + (s >> 16);
  return (intnat)s;
}

/* Bytecode version of the untagged external above. */
value consort_net_sum(value buf, value off, value len, value init)
{
  return Val_long(consort_net_sum_untagged(buf, Long_val(off), Long_val(len), Long_val(init)));
}
