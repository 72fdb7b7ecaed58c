/*
 * int8: per-chunk scale max|x|/127, nearest-even or stochastic rounding
 * from the counter-based generator (sdnn_codec_uniform; codec_scalar.h).
 */
#include "codec_impl.h"

float sdnn_codec_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    return key_uniform(stream_key(seed, stream), index);
}


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
    /* Measured (bench/tta_lab.sh: yolov3-tiny 128x128 to mAP@0.5
     * 0.10 on 2 lab hosts, 3 seeds x 2 links, +-50 iterations): 0.88 to
     * 1.14 x none's iterations, median 1.00 (the first default, 1.25, was
     * assumed; docs/ARCHITECTURE.md, "Time to accuracy", has the lab runs
     * of the planner with each). */
    .iter_factor = 1.0,
    .lossy = 1,
    .dense = 1,
    .encoded_size = int8_size,
    .align = int8_align,
    .encode = int8_encode,
    .decode = int8_decode,
    .decode_add = int8_decode_add,
    .accumulate = int8_accumulate,
};

