/*
 * codec_impl.h: what the codec files (codec.c, half.c, int8.c, topk.c)
 * share and nothing else includes: the vector-clone attributes, unaligned
 * loads and stores on encoded bytes, the dense add/accumulate kernels and
 * the stochastic-rounding key (codec_scalar.h).  The kernels are static in
 * each file that includes this (unused ones are dropped), so each codec
 * file stays self-contained.
 */
#ifndef SDNN_CODEC_IMPL_H
#define SDNN_CODEC_IMPL_H

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


/* A vectorised kernel of this header: static in each codec file. */
#define SDNN_CODEC_KERNEL SDNN_KERNEL static __attribute__((unused))
#define SDNN_INLINE static inline __attribute__((always_inline))

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


/* ---- stochastic-rounding generator (codec_scalar.h) ------------------------ */

static inline uint64_t stream_key(uint64_t seed, uint64_t stream)
{
    return sdnn_cs_stream_key(seed, stream);
}

static inline float key_uniform(uint64_t key, uint64_t index)
{
    return sdnn_cs_key_uniform(key, index);
}


/* ---- dense element kernels ----------------------------------------------- */

/* decode_add (y = decoded + add, y distinct from add) and accumulate
 * (y = decoded + y) of one dense format, from its element load. */
#define SDNN_DENSE_ADD_KERNELS(fmt, LOAD)                                               \
    SDNN_CODEC_KERNEL void fmt##_add(const unsigned char *restrict in, size_t n,        \
                                      const float *restrict a, float *restrict y)        \
    {                                                                                    \
        for (size_t i = 0; i < n; ++i) y[i] = LOAD(in, i) + a[i];                        \
    }                                                                                    \
    SDNN_CODEC_KERNEL void fmt##_acc(const unsigned char *restrict in, size_t n,        \
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

SDNN_CODEC_KERNEL void f16_dec(const unsigned char *restrict in, size_t n, float *restrict y)
{
    for (size_t i = 0; i < n; ++i) y[i] = LOAD_F16(in, i);
}

SDNN_CODEC_KERNEL void bf16_dec(const unsigned char *restrict in, size_t n, float *restrict y)
{
    for (size_t i = 0; i < n; ++i) y[i] = LOAD_BF16(in, i);
}

SDNN_CODEC_KERNEL void add_into(float *restrict y, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; ++i) y[i] = x[i] + y[i];
}

SDNN_CODEC_KERNEL void sub_from(float *restrict y, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; ++i) y[i] = y[i] - x[i];
}

/* DGC: u = m*u + g, v = v + u (no FMA: the bytes must not depend on it). */
SDNN_CODEC_KERNEL void momentum_step(float *restrict u, float *restrict v,
                                      const float *restrict g, float m, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        float ui = m * u[i] + g[i];
        u[i] = ui;
        v[i] = v[i] + ui;
    }
}


/* ---- shared table entries ------------------------------------------------ */

static inline size_t align_one(const sdnn_codec_params *p)
{
    (void)p;
    return 1;
}


#endif
