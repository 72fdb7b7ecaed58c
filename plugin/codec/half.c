/*
 * half: the 16-bit codecs fp16 (RNE; F16C where present, bit-identical
 * scalar fallback) and bf16 (RNE; AVX2 encoding), and the scalar
 * conversions their vector paths must match (codec_impl.h, codec.c).
 */
#include "codec_impl.h"

/* ---- scalar conversions -------------------------------------------------- */

/* The arithmetic lives in codec_scalar.h, shared with the device kernels. */
uint16_t sdnn_f32_to_f16(float x) { return sdnn_cs_f32_to_f16(x); }
float sdnn_f16_to_f32(uint16_t h) { return sdnn_cs_f16_to_f32(h); }
static inline uint16_t bf16_round(uint32_t u) { return sdnn_cs_bf16_round(u); }
uint16_t sdnn_f32_to_bf16(float x) { return bf16_round(f32_bits(x)); }
float sdnn_bf16_to_f32(uint16_t h) { return sdnn_cs_bf16_to_f32(h); }


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
    /* Measured (bench/tta_lab.sh: yolov3-tiny 128x128 to mAP@0.5
     * 0.10 on 2 lab hosts, 3 seeds x 2 links, +-50 iterations): 0.75 to
     * 1.14 x none's iterations, median 0.94; 1, as an 11-bit significand
     * (2^-11 relative error) cannot speed convergence: below 1 is noise. */
    .iter_factor = 1.0,
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
    /* Not measured: assumed fp16's 1 (2^-8 relative error per element, no
     * underflow, both far below a mini-batch gradient's own noise). */
    .iter_factor = 1.0,
    .lossy = 1,
    .dense = 1,
    .encoded_size = half_size,
    .align = align_one,
    .encode = bf16_encode,
    .decode = bf16_decode,
    .decode_add = bf16_decode_add,
    .accumulate = bf16_accumulate,
};

