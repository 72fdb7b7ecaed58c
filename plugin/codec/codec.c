/*
 * codec: the five gradient codecs (none, fp16, bf16, int8, topk), their
 * registry, the scalar conversions the vector paths must match, the
 * stochastic-rounding generator and error feedback.  codec.h is the contract.
 *
 * Speed comes from loops the compiler vectorises (restrict, no branches in
 * the body, AVX2 and AVX-512 clones beside the baseline) and, where the
 * compiler's code is poor, intrinsics: F16C for fp16, AVX2 for bf16
 * encoding.  Every path is integer or IEEE arithmetic without contraction
 * (-std=c11 keeps a*b+c two roundings) under the default rounding mode, so
 * the bytes do not depend on which path the machine takes; the tests
 * compare the paths a machine takes with the scalar references.  Encoded
 * buffers carry no alignment promise: they are read and written through
 * memcpy, which the compiler turns into plain (unaligned) loads and stores.
 */
#include "codec.h"
#include "codec_scalar.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SDNN_KERNEL __attribute__((target_clones("avx2", "default")))
/* int8 encoding gains from AVX-512 (64-bit multiplies for the generator,
 * narrowing moves), the other kernels do not. */
#define SDNN_KERNEL_V4 __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#define SDNN_X86 1
#else
#define SDNN_KERNEL
#define SDNN_KERNEL_V4
#define SDNN_X86 0
#endif

/* ---- bit access ----------------------------------------------------------- */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t ld16(const unsigned char *p, size_t i)
{
    uint16_t h;
    memcpy(&h, p + 2 * i, sizeof h);
    return h;
}

static inline void st16(unsigned char *p, size_t i, uint16_t h)
{
    memcpy(p + 2 * i, &h, sizeof h);
}

static inline float ldf(const unsigned char *p, size_t i)
{
    float f;
    memcpy(&f, p + 4 * i, sizeof f);
    return f;
}

static inline void stf(unsigned char *p, size_t i, float f)
{
    memcpy(p + 4 * i, &f, sizeof f);
}

static inline uint32_t ld32(const unsigned char *p, size_t i)
{
    uint32_t u;
    memcpy(&u, p + 4 * i, sizeof u);
    return u;
}

static inline void st32(unsigned char *p, size_t i, uint32_t u)
{
    memcpy(p + 4 * i, &u, sizeof u);
}

/* ---- scalar conversions -------------------------------------------------- */

/* The arithmetic lives in codec_scalar.h, shared with the device kernels. */
uint16_t sdnn_f32_to_f16(float x) { return sdnn_cs_f32_to_f16(x); }
float sdnn_f16_to_f32(uint16_t h) { return sdnn_cs_f16_to_f32(h); }
static inline uint16_t bf16_round(uint32_t u) { return sdnn_cs_bf16_round(u); }
uint16_t sdnn_f32_to_bf16(float x) { return bf16_round(f32_bits(x)); }
float sdnn_bf16_to_f32(uint16_t h) { return sdnn_cs_bf16_to_f32(h); }

/* ---- stochastic-rounding generator (codec_scalar.h) ------------------------ */

static inline uint64_t stream_key(uint64_t seed, uint64_t stream)
{
    return sdnn_cs_stream_key(seed, stream);
}

static inline float key_uniform(uint64_t key, uint64_t index)
{
    return sdnn_cs_key_uniform(key, index);
}

float sdnn_codec_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    return key_uniform(stream_key(seed, stream), index);
}

/* ---- dense element kernels ----------------------------------------------- */

/* decode_add (y = decoded + add, y distinct from add) and accumulate
 * (y = decoded + y) of one dense format, from its element load. */
#define SDNN_DENSE_ADD_KERNELS(fmt, LOAD)                                               \
    SDNN_KERNEL static void fmt##_add(const unsigned char *restrict in, size_t n,        \
                                      const float *restrict a, float *restrict y)        \
    {                                                                                    \
        for (size_t i = 0; i < n; ++i) y[i] = LOAD(in, i) + a[i];                        \
    }                                                                                    \
    SDNN_KERNEL static void fmt##_acc(const unsigned char *restrict in, size_t n,        \
                                      float *restrict y)                                 \
    {                                                                                    \
        for (size_t i = 0; i < n; ++i) y[i] = LOAD(in, i) + y[i];                        \
    }

#define LOAD_F32(in, i) ldf((in), (i))
#define LOAD_F16(in, i) sdnn_f16_to_f32(ld16((in), (i)))
#define LOAD_BF16(in, i) bits_f32((uint32_t)ld16((in), (i)) << 16)

SDNN_DENSE_ADD_KERNELS(f32, LOAD_F32)
SDNN_DENSE_ADD_KERNELS(f16, LOAD_F16)
SDNN_DENSE_ADD_KERNELS(bf16, LOAD_BF16)

SDNN_KERNEL static void f16_dec(const unsigned char *restrict in, size_t n, float *restrict y)
{
    for (size_t i = 0; i < n; ++i) y[i] = LOAD_F16(in, i);
}

SDNN_KERNEL static void bf16_dec(const unsigned char *restrict in, size_t n, float *restrict y)
{
    for (size_t i = 0; i < n; ++i) y[i] = LOAD_BF16(in, i);
}

SDNN_KERNEL static void add_into(float *restrict y, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; ++i) y[i] = x[i] + y[i];
}

SDNN_KERNEL static void sub_from(float *restrict y, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; ++i) y[i] = y[i] - x[i];
}

/* DGC: u = m*u + g, v = v + u (no FMA: the bytes must not depend on it). */
SDNN_KERNEL static void momentum_step(float *restrict u, float *restrict v,
                                      const float *restrict g, float m, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        float ui = m * u[i] + g[i];
        u[i] = ui;
        v[i] = v[i] + ui;
    }
}

/* ---- shared table entries ------------------------------------------------ */

static size_t align_one(const sdnn_codec_params *p)
{
    (void)p;
    return 1;
}

/* ---- none ------------------------------------------------------------------ */

static size_t none_size(const sdnn_codec_params *p, size_t n)
{
    (void)p;
    return n * sizeof(float);
}

static size_t none_encode(const sdnn_codec_params *p, const float *x, size_t n, void *out,
                          uint64_t stream)
{
    (void)p; (void)stream;
    if (n) memcpy(out, x, n * sizeof(float));
    return n * sizeof(float);
}

static void none_decode(const sdnn_codec_params *p, const void *in, size_t n, float *y)
{
    (void)p;
    if (n) memcpy(y, in, n * sizeof(float));
}

static void none_decode_add(const sdnn_codec_params *p, const void *in, size_t n,
                            const float *add, float *y)
{
    (void)p;
    if (y == add) f32_acc(in, n, y);
    else f32_add(in, n, add, y);
}

static void none_accumulate(const sdnn_codec_params *p, const void *in, size_t n, float *y)
{
    (void)p;
    f32_acc(in, n, y);
}

const sdnn_codec_ops sdnn_codec_none = {
    .name = "none",
    .lossy = 0,
    .dense = 1,
    .encoded_size = none_size,
    .align = align_one,
    .encode = none_encode,
    .decode = none_decode,
    .decode_add = none_decode_add,
    .accumulate = none_accumulate,
};

/* ---- fp16 ------------------------------------------------------------------ */

#if SDNN_X86
/* F16C rounds with the immediate (nearest even), not MXCSR, and keeps
 * binary16 subnormals; the tests check it equals sdnn_f32_to_f16 bit for bit. */
__attribute__((target("avx,f16c"))) static void f16c_encode(const float *restrict x, size_t n,
                                                             unsigned char *restrict o)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        __m128i b = _mm256_cvtps_ph(_mm256_loadu_ps(x + i + 8), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(void *)(o + 2 * i), a);
        _mm_storeu_si128((__m128i *)(void *)(o + 2 * i + 16), b);
    }
    for (; i < n; ++i) st16(o, i, sdnn_f32_to_f16(x[i]));
}

static inline __m256 f16c_load8(const unsigned char *p)
    __attribute__((target("avx,f16c"), always_inline));
static inline __m256 f16c_load8(const unsigned char *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

__attribute__((target("avx,f16c"))) static void f16c_dec(const unsigned char *restrict in,
                                                          size_t n, float *restrict y)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f16c_load8(in + 2 * i));
    for (; i < n; ++i) y[i] = sdnn_f16_to_f32(ld16(in, i));
}

/* y = decoded + a; a may equal y (each lane is read before it is written). */
__attribute__((target("avx,f16c"))) static void f16c_add(const unsigned char *restrict in,
                                                          size_t n, const float *a, float *y)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(f16c_load8(in + 2 * i), _mm256_loadu_ps(a + i)));
    for (; i < n; ++i) y[i] = sdnn_f16_to_f32(ld16(in, i)) + a[i];
}

static int have_f16c(void)
{
#if defined(__clang__) && __clang_major__ < 16
    /* Older clang does not know "f16c" here; every AVX2 processor has F16C. */
    return __builtin_cpu_supports("avx2");
#else
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
#endif
}
#else
static int have_f16c(void) { return 0; }
static void f16c_encode(const float *x, size_t n, unsigned char *o) { (void)x; (void)n; (void)o; }
static void f16c_dec(const unsigned char *in, size_t n, float *y) { (void)in; (void)n; (void)y; }
static void f16c_add(const unsigned char *in, size_t n, const float *a, float *y)
{
    (void)in; (void)n; (void)a; (void)y;
}
#endif

static size_t half_size(const sdnn_codec_params *p, size_t n)
{
    (void)p;
    return 2 * n;
}

static size_t fp16_encode(const sdnn_codec_params *p, const float *x, size_t n, void *out,
                          uint64_t stream)
{
    (void)p; (void)stream;
    unsigned char *o = out;
    if (have_f16c()) f16c_encode(x, n, o);
    else
        for (size_t i = 0; i < n; ++i) st16(o, i, sdnn_f32_to_f16(x[i]));
    return 2 * n;
}

static void fp16_decode(const sdnn_codec_params *p, const void *in, size_t n, float *y)
{
    (void)p;
    if (have_f16c()) f16c_dec(in, n, y);
    else f16_dec(in, n, y);
}

static void fp16_decode_add(const sdnn_codec_params *p, const void *in, size_t n,
                            const float *add, float *y)
{
    (void)p;
    if (have_f16c()) f16c_add(in, n, add, y);
    else if (y == add) f16_acc(in, n, y);
    else f16_add(in, n, add, y);
}

static void fp16_accumulate(const sdnn_codec_params *p, const void *in, size_t n, float *y)
{
    fp16_decode_add(p, in, n, y, y);
}

const sdnn_codec_ops sdnn_codec_fp16 = {
    .name = "fp16",
    .lossy = 1,
    .dense = 1,
    .encoded_size = half_size,
    .align = align_one,
    .encode = fp16_encode,
    .decode = fp16_decode,
    .decode_add = fp16_decode_add,
    .accumulate = fp16_accumulate,
};

/* ---- bf16 ------------------------------------------------------------------ */

#if SDNN_X86
/* bf16_round on 16 lanes.  gcc's own vectorisation of it masks and packs
 * each alternative apart; this is about 20% faster.  The tests check it
 * against sdnn_f32_to_bf16 on every machine with AVX2. */
__attribute__((target("avx2"))) static void bf16_enc_avx2(const float *restrict x, size_t n,
                                                           unsigned char *restrict o)
{
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i quiet = _mm256_set1_epi32(0x00400000);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int h = 0; h < 2; ++h) {
            __m256i u = _mm256_loadu_si256((const __m256i *)(const void *)(x + i + 8 * h));
            __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
            __m256i v = _mm256_add_epi32(_mm256_add_epi32(u, bias), lsb);
            __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
            v = _mm256_blendv_epi8(v, _mm256_or_si256(u, quiet), nan);
            /* Arithmetic shift: every value fits int16, so the signed
             * saturating pack keeps the 16 bits as they are. */
            r[h] = _mm256_srai_epi32(v, 16);
        }
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(r[0], r[1]), 0xd8);
        _mm256_storeu_si256((__m256i *)(void *)(o + 2 * i), packed);
    }
    for (; i < n; ++i) st16(o, i, bf16_round(f32_bits(x[i])));
}

static int have_avx2(void)
{
    return __builtin_cpu_supports("avx2");
}
#else
static int have_avx2(void) { return 0; }
static void bf16_enc_avx2(const float *x, size_t n, unsigned char *o) { (void)x; (void)n; (void)o; }
#endif

static size_t bf16_encode(const sdnn_codec_params *p, const float *x, size_t n, void *out,
                          uint64_t stream)
{
    (void)p; (void)stream;
    unsigned char *o = out;
    if (have_avx2()) bf16_enc_avx2(x, n, o);
    else
        for (size_t i = 0; i < n; ++i) st16(o, i, bf16_round(f32_bits(x[i])));
    return 2 * n;
}

static void bf16_decode(const sdnn_codec_params *p, const void *in, size_t n, float *y)
{
    (void)p;
    bf16_dec(in, n, y);
}

static void bf16_decode_add(const sdnn_codec_params *p, const void *in, size_t n,
                            const float *add, float *y)
{
    (void)p;
    if (y == add) bf16_acc(in, n, y);
    else bf16_add(in, n, add, y);
}

static void bf16_accumulate(const sdnn_codec_params *p, const void *in, size_t n, float *y)
{
    (void)p;
    bf16_acc(in, n, y);
}

const sdnn_codec_ops sdnn_codec_bf16 = {
    .name = "bf16",
    .lossy = 1,
    .dense = 1,
    .encoded_size = half_size,
    .align = align_one,
    .encode = bf16_encode,
    .decode = bf16_decode,
    .decode_add = bf16_decode_add,
    .accumulate = bf16_accumulate,
};

/* ---- int8 ------------------------------------------------------------------ */

/* Rounds to nearest even for |r| < 2^22: r + 1.5*2^23 lands where the float
 * spacing is 1, so the addition itself rounds (default rounding mode, as
 * nearbyintf), and the subtraction is exact.  Unlike nearbyintf it
 * vectorises without SSE4.1. */
#define SDNN_ROUND_MAGIC 12582912.0f

static int chunk_of(const sdnn_codec_params *p)
{
    return p->int8_chunk >= 1 ? p->int8_chunk : 256;
}

static size_t chunks_of(size_t n, size_t chunk)
{
    return n / chunk + (n % chunk != 0);
}

/* The chunk kernels are inlined into the one cloned loop over all chunks
 * (int8_quantize): a call per 256 elements costs more than the work. */
#define SDNN_INLINE static inline __attribute__((always_inline))

SDNN_INLINE uint32_t maxabs_bits(const float *restrict x, size_t n)
{
    /* On the bits: |x| orders like its bit pattern, and an integer max
     * vectorises where a float one (NaN rules) does not. */
    uint32_t m = 0;
    for (size_t i = 0; i < n; ++i) {
        uint32_t a = f32_bits(x[i]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

/* The fast kernels need a normal, finite scale: then |x / s| <= 127(1 + 2^-22),
 * the rounding trick is valid and the result only needs an integer clamp. */
SDNN_INLINE void quant_nearest(const float *restrict x, size_t n, float inv, int8_t *restrict q)
{
    for (size_t i = 0; i < n; ++i) {
        int32_t t = (int32_t)((x[i] * inv + SDNN_ROUND_MAGIC) - SDNN_ROUND_MAGIC);
        t = t < 127 ? t : 127;
        t = t > -127 ? t : -127;
        q[i] = (int8_t)t;
    }
}

/* floor(x/s + u): truncation, minus one where it rounded up (negatives). */
SDNN_INLINE void quant_stochastic(const float *restrict x, size_t n, float inv, uint64_t key,
                                  uint64_t base, int8_t *restrict q)
{
    for (size_t i = 0; i < n; ++i) {
        float r = x[i] * inv + key_uniform(key, base + i);
        int32_t t = (int32_t)r;
        t -= (float)t > r;
        t = t < 127 ? t : 127;
        t = t > -127 ? t : -127;
        q[i] = (int8_t)t;
    }
}

/* Scales that are 0, subnormal or not finite (a chunk of zeros, of values
 * below ~1e-36, or holding inf/NaN): element by element with every guard.
 * Non-finite scales give q = 0, which decodes to NaN (inf * 0). */
static void quant_guarded(const float *x, size_t n, float s, float inv, int stochastic,
                          uint64_t key, uint64_t base, int8_t *q)
{
    int usable = s > 0 && s <= FLT_MAX && inv > 0 && inv <= FLT_MAX;
    for (size_t i = 0; i < n; ++i) {
        float r = 0;
        if (usable) {
            r = x[i] * inv;
            r = stochastic ? floorf(r + key_uniform(key, base + i)) : nearbyintf(r);
            r = fminf(fmaxf(r, -127.0f), 127.0f);
        }
        q[i] = (int8_t)r;
    }
}

/* Decoding, all chunks per call: y = q*s, y = q*s + a (a distinct from y),
 * y = q*s + y. */
SDNN_KERNEL static void int8_dec(const unsigned char *restrict scales, const int8_t *restrict q,
                                 size_t n, size_t chunk, float *restrict y)
{
    for (size_t lo = 0, c = 0; lo < n; lo += chunk, ++c) {
        size_t len = n - lo < chunk ? n - lo : chunk;
        float s = ldf(scales, c);
        for (size_t i = lo; i < lo + len; ++i) y[i] = (float)q[i] * s;
    }
}

SDNN_KERNEL static void int8_add(const unsigned char *restrict scales, const int8_t *restrict q,
                                 size_t n, size_t chunk, const float *restrict a,
                                 float *restrict y)
{
    for (size_t lo = 0, c = 0; lo < n; lo += chunk, ++c) {
        size_t len = n - lo < chunk ? n - lo : chunk;
        float s = ldf(scales, c);
        for (size_t i = lo; i < lo + len; ++i) y[i] = (float)q[i] * s + a[i];
    }
}

SDNN_KERNEL static void int8_acc(const unsigned char *restrict scales, const int8_t *restrict q,
                                 size_t n, size_t chunk, float *restrict y)
{
    for (size_t lo = 0, c = 0; lo < n; lo += chunk, ++c) {
        size_t len = n - lo < chunk ? n - lo : chunk;
        float s = ldf(scales, c);
        for (size_t i = lo; i < lo + len; ++i) y[i] = (float)q[i] * s + y[i];
    }
}

static size_t int8_size(const sdnn_codec_params *p, size_t n)
{
    return sizeof(float) * chunks_of(n, (size_t)chunk_of(p)) + n;
}

static size_t int8_align(const sdnn_codec_params *p)
{
    return (size_t)chunk_of(p);
}

SDNN_KERNEL_V4 static void int8_quantize(const float *restrict x, size_t n, size_t chunk,
                                         int stochastic, uint64_t key,
                                         unsigned char *restrict scales, int8_t *restrict q)
{
    for (size_t lo = 0, c = 0; lo < n; lo += chunk, ++c) {
        size_t len = n - lo < chunk ? n - lo : chunk;
        /* q = round(x * 127/m): a multiply, where x / s would be bound by
         * the divider's throughput; |x - s*q| <= s/2 holds up to a few ulps. */
        float m = bits_f32(maxabs_bits(x + lo, len));
        float s = m / 127.0f, inv = 127.0f / m;
        stf(scales, c, s);
        if (!(s >= FLT_MIN && s <= FLT_MAX))
            quant_guarded(x + lo, len, s, inv, stochastic, key, lo, q + lo);
        else if (stochastic)
            quant_stochastic(x + lo, len, inv, key, lo, q + lo);
        else
            quant_nearest(x + lo, len, inv, q + lo);
    }
}

static size_t int8_encode(const sdnn_codec_params *p, const float *x, size_t n, void *out,
                          uint64_t stream)
{
    size_t chunk = (size_t)chunk_of(p), nch = chunks_of(n, chunk);
    unsigned char *scales = out;
    int8_quantize(x, n, chunk, p->stochastic, stream_key(p->seed, stream), scales,
                  (int8_t *)(scales + sizeof(float) * nch));
    return sizeof(float) * nch + n;
}

static void int8_decode(const sdnn_codec_params *p, const void *in, size_t n, float *y)
{
    size_t chunk = (size_t)chunk_of(p);
    const unsigned char *scales = in;
    int8_dec(scales, (const int8_t *)(scales + sizeof(float) * chunks_of(n, chunk)), n, chunk, y);
}

static void int8_accumulate(const sdnn_codec_params *p, const void *in, size_t n, float *y)
{
    size_t chunk = (size_t)chunk_of(p);
    const unsigned char *scales = in;
    int8_acc(scales, (const int8_t *)(scales + sizeof(float) * chunks_of(n, chunk)), n, chunk, y);
}

static void int8_decode_add(const sdnn_codec_params *p, const void *in, size_t n,
                            const float *add, float *y)
{
    size_t chunk = (size_t)chunk_of(p);
    const unsigned char *scales = in;
    if (y == add) int8_accumulate(p, in, n, y);
    else int8_add(scales, (const int8_t *)(scales + sizeof(float) * chunks_of(n, chunk)), n,
                  chunk, add, y);
}

const sdnn_codec_ops sdnn_codec_int8 = {
    .name = "int8",
    .lossy = 1,
    .dense = 1,
    .encoded_size = int8_size,
    .align = int8_align,
    .encode = int8_encode,
    .decode = int8_decode,
    .decode_add = int8_decode_add,
    .accumulate = int8_accumulate,
};

/* ---- topk ------------------------------------------------------------------ */

size_t sdnn_codec_topk_k(double ratio, size_t n)
{
    if (n == 0) return 0;
    double want = ratio * (double)n;
    if (!(want > 1)) return 1;            /* also NaN */
    if (want >= (double)n) return n;
    /* A decimal ratio is not exact in binary (0.07 * 100 = 7.000000000000001):
     * a product within a few ulps above an integer counts as that integer. */
    double f = floor(want);
    size_t k = (size_t)(want - f <= want * 0x1p-50 ? f : ceil(want));
    return k < 1 ? 1 : k > n ? n : k;
}

/*
 * Selection by radix on the magnitude bits (|x| orders like its bit pattern
 * with the sign cleared): a histogram of the top 11 bits finds the bin that
 * holds the k-th largest, a second pass refines inside that bin on the next
 * 11 bits, a third on the last 9.  At most three counting passes and one
 * emitting pass over x, O(n) always, no allocation.  Where a bin boundary
 * falls exactly on k the later passes are skipped.
 *
 * The result is a cut: every key >= gt is kept, plus the first `budget`
 * keys (lowest indices) equal to eq.  Counts and indices are 32-bit, as
 * the format's indices are: n must stay below 2^32.
 */
typedef struct topk_cut {
    uint32_t gt, eq;
    size_t budget;
} topk_cut;

#define TOPK_NO_KEY 0xffffffffu   /* above every magnitude key (< 2^31) */

static void topk_histogram(const float *restrict x, size_t n, uint32_t *restrict hist)
{
    /* Four sub-histograms: neighbours that fall in the same bin (common:
     * gradients cluster in a few exponents) do not wait on each other's
     * increments. */
    uint32_t h[4][2048];
    memset(h, 0, sizeof h);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        ++h[0][(f32_bits(x[i]) >> 20) & 0x7ffu];
        ++h[1][(f32_bits(x[i + 1]) >> 20) & 0x7ffu];
        ++h[2][(f32_bits(x[i + 2]) >> 20) & 0x7ffu];
        ++h[3][(f32_bits(x[i + 3]) >> 20) & 0x7ffu];
    }
    for (; i < n; ++i) ++h[0][(f32_bits(x[i]) >> 20) & 0x7ffu];
    for (int b = 0; b < 2048; ++b) hist[b] = h[0][b] + h[1][b] + h[2][b] + h[3][b];
}

/* Keys in [lo, lo + span] are rare in the later passes (one bin of the
 * previous level, the kept entries): a vector test of 16 keys at a time
 * skips the blocks without any. */
#define TOPK_BLOCK 16

SDNN_INLINE int topk_in_range(uint32_t key, uint32_t lo, uint32_t span)
{
    return key - lo <= span;
}

SDNN_INLINE int topk_block_hits(const float *restrict x, uint32_t lo, uint32_t span)
{
    int any = 0;
    for (int j = 0; j < TOPK_BLOCK; ++j)
        any |= topk_in_range(f32_bits(x[j]) & 0x7fffffffu, lo, span);
    return any;
}

SDNN_KERNEL static void topk_histogram_in(const float *restrict x, size_t n, uint32_t lo,
                                          uint32_t span, int shift, uint32_t mask,
                                          uint32_t *restrict hist)
{
    memset(hist, 0, 2048 * sizeof *hist);
    for (size_t i = 0; i < n; i += TOPK_BLOCK) {
        size_t end = n - i < TOPK_BLOCK ? n : i + TOPK_BLOCK;
        if (end - i == TOPK_BLOCK && !topk_block_hits(x + i, lo, span)) continue;
        for (size_t j = i; j < end; ++j) {
            uint32_t key = f32_bits(x[j]) & 0x7fffffffu;
            if (topk_in_range(key, lo, span)) ++hist[(key >> shift) & mask];
        }
    }
}

static topk_cut topk_select(const float *x, size_t n, size_t k)
{
    static const int shifts[3] = {20, 9, 0}, widths[3] = {11, 11, 9};
    uint32_t hist[2048];
    uint32_t prefix = 0;
    size_t need = k;   /* still to take among keys whose high bits == prefix */
    for (int level = 0; level < 3; ++level) {
        int shift = shifts[level];
        uint32_t mask = (1u << widths[level]) - 1u;
        if (level == 0) topk_histogram(x, n, hist);
        else {
            int above = shift + widths[level];
            topk_histogram_in(x, n, prefix << above, (1u << above) - 1u, shift, mask, hist);
        }
        uint32_t b = mask;
        while (hist[b] < need) need -= hist[b--];
        prefix = (prefix << widths[level]) | b;
        if (hist[b] == need) return (topk_cut){prefix << shift, TOPK_NO_KEY, 0};
    }
    return (topk_cut){prefix + 1, prefix, need};
}

static size_t topk_size(const sdnn_codec_params *p, size_t n)
{
    return 2 * sizeof(uint32_t) * sdnn_codec_topk_k(p->topk_ratio, n);
}

SDNN_KERNEL static void topk_emit(const float *restrict x, size_t n, topk_cut cut,
                                  unsigned char *restrict idx, unsigned char *restrict val)
{
    uint32_t lo = cut.budget ? cut.eq : cut.gt;   /* eq == gt - 1 when budget */
    uint32_t span = 0x7fffffffu - lo;
    size_t j = 0;
    for (size_t i = 0; i < n; i += TOPK_BLOCK) {
        size_t end = n - i < TOPK_BLOCK ? n : i + TOPK_BLOCK;
        if (end - i == TOPK_BLOCK && !topk_block_hits(x + i, lo, span)) continue;
        for (size_t e = i; e < end; ++e) {
            uint32_t key = f32_bits(x[e]) & 0x7fffffffu;
            if (key >= cut.gt || (key == cut.eq && cut.budget)) {
                if (key < cut.gt) --cut.budget;
                st32(idx, j, (uint32_t)e);
                stf(val, j, x[e]);
                ++j;
            }
        }
    }
}

static size_t topk_encode(const sdnn_codec_params *p, const float *x, size_t n, void *out,
                          uint64_t stream)
{
    (void)stream;
    size_t k = sdnn_codec_topk_k(p->topk_ratio, n);
    if (k == 0) return 0;
    topk_cut cut = k == n ? (topk_cut){0, TOPK_NO_KEY, 0} : topk_select(x, n, k);
    unsigned char *idx = out;
    topk_emit(x, n, cut, idx, idx + sizeof(uint32_t) * k);
    return 2 * sizeof(uint32_t) * k;
}

/* Indices outside [0, n) (a corrupt buffer) are skipped rather than written. */
static void topk_decode(const sdnn_codec_params *p, const void *in, size_t n, float *y)
{
    size_t k = sdnn_codec_topk_k(p->topk_ratio, n);
    const unsigned char *idx = in, *val = idx + sizeof(uint32_t) * k;
    if (n) memset(y, 0, n * sizeof(float));
    for (size_t j = 0; j < k; ++j) {
        uint32_t i = ld32(idx, j);
        if (i < n) y[i] = ldf(val, j);
    }
}

static void topk_accumulate(const sdnn_codec_params *p, const void *in, size_t n, float *y)
{
    size_t k = sdnn_codec_topk_k(p->topk_ratio, n);
    const unsigned char *idx = in, *val = idx + sizeof(uint32_t) * k;
    for (size_t j = 0; j < k; ++j) {
        uint32_t i = ld32(idx, j);
        if (i < n) y[i] = ldf(val, j) + y[i];
    }
}

/* The gaps between topk entries decode to 0, so decode_add gives them
 * 0 + add, which is add except that -0 becomes +0 (as for the dense codecs). */
SDNN_KERNEL static void add_zero(const float *restrict a, size_t n, float *restrict y)
{
    for (size_t i = 0; i < n; ++i) y[i] = 0.0f + a[i];
}

SDNN_KERNEL static void add_zero_inplace(float *restrict y, size_t n)
{
    for (size_t i = 0; i < n; ++i) y[i] = 0.0f + y[i];
}

static void topk_fill_gap(const float *add, float *y, size_t lo, size_t hi)
{
    if (y == add) add_zero_inplace(y + lo, hi - lo);
    else add_zero(add + lo, hi - lo, y + lo);
}

/* One pass in index order, so y may alias add. */
static void topk_decode_add(const sdnn_codec_params *p, const void *in, size_t n,
                            const float *add, float *y)
{
    size_t k = sdnn_codec_topk_k(p->topk_ratio, n);
    const unsigned char *idx = in, *val = idx + sizeof(uint32_t) * k;
    size_t done = 0;
    for (size_t j = 0; j < k; ++j) {
        size_t i = ld32(idx, j);
        if (i < done || i >= n) continue;
        topk_fill_gap(add, y, done, i);
        y[i] = ldf(val, j) + add[i];
        done = i + 1;
    }
    topk_fill_gap(add, y, done, n);
}

const sdnn_codec_ops sdnn_codec_topk = {
    .name = "topk",
    .lossy = 1,
    .dense = 0,
    .encoded_size = topk_size,
    .align = align_one,
    .encode = topk_encode,
    .decode = topk_decode,
    .decode_add = topk_decode_add,
    .accumulate = topk_accumulate,
};

/* ---- registry ---------------------------------------------------------------- */

static const sdnn_codec_ops *const registry[] = {
    &sdnn_codec_none, &sdnn_codec_fp16, &sdnn_codec_bf16, &sdnn_codec_int8, &sdnn_codec_topk,
};

const sdnn_codec_ops *sdnn_codec_find(const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; ++i)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

const char *sdnn_codec_names(void)
{
    return "none, fp16, bf16, int8, topk";
}

/* ---- error feedback ------------------------------------------------------------ */

void sdnn_codec_ef_step(const sdnn_codec_ops *c, const sdnn_codec_params *p,
                        float *g, float *residual, float *velocity, float momentum,
                        size_t n, void *scratch, uint64_t stream)
{
    if (!c->lossy) {
        if (residual && n) memset(residual, 0, n * sizeof(float));
        return;
    }
    /* residual becomes g' (the value to send), g becomes what was sent,
     * then residual = g' - sent: three passes, no temporary. */
    if (velocity) momentum_step(velocity, residual, g, momentum, n);
    else add_into(residual, g, n);
    c->encode(p, residual, n, scratch, stream);
    c->decode(p, scratch, n, g);
    sub_from(residual, g, n);
    if (velocity && !c->dense) {
        /* topk: momentum is cleared where an entry left (DGC's masking);
         * the residual there is already exactly g' - g' = 0. */
        size_t k = sdnn_codec_topk_k(p->topk_ratio, n);
        const unsigned char *idx = scratch;
        for (size_t j = 0; j < k; ++j) {
            uint32_t i = ld32(idx, j);
            if (i < n) velocity[i] = 0;
        }
    }
}
