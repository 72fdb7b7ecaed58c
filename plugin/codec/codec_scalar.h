/*
 * codec_scalar: the scalar arithmetic of the codecs written once for the
 * host codecs (codec.c, which the simulated device also runs) and the
 * device codec kernels (cuda/codec.cu): binary16 and bfloat16 rounding on
 * a float's bits, and the counter-based generator of stochastic rounding.
 * nvcc compiles these as __host__ __device__ functions, a C compiler as
 * static inline ones; codec.h documents what each computes.
 */
#ifndef SDNN_CODEC_SCALAR_H
#define SDNN_CODEC_SCALAR_H

#include <stdint.h>
#include <string.h>

#include "splitmix.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define SDNN_CS static __host__ __device__ __forceinline__
#else
#define SDNN_CS static inline
#endif

SDNN_CS uint32_t sdnn_cs_bits(float f)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

SDNN_CS float sdnn_cs_float(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

SDNN_CS uint16_t sdnn_cs_f32_to_f16(float x)
{
    uint32_t u = sdnn_cs_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    uint32_t h;
    if (a > 0x7f800000u) {
        /* NaN: quiet bit set, top payload bits kept (what F16C does). */
        h = 0x7e00u | ((a >> 13) & 0x3ffu);
    } else if (a >= 0x477ff000u) {
        /* 65520 is halfway between 65504 (the largest binary16) and 2^16;
         * the tie goes to the even neighbour, which is infinity. */
        h = 0x7c00u;
    } else if (a >= 0x38800000u) {
        /* Normal: rebias the exponent and round the 13 dropped bits to
         * nearest even; a carry into the exponent is the right result. */
        h = (a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13;
    } else if (a > 0x33000000u) {
        /* binary16 subnormal: the value in units of 2^-24, rounded to
         * nearest even.  2^-25 itself is the tie with 0 (below). */
        uint32_t e = a >> 23;                 /* 102..112 */
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e;            /* 14..24 */
        uint32_t half = 1u << (shift - 1);
        uint32_t rem = m & ((1u << shift) - 1u);
        h = m >> shift;
        if (rem > half || (rem == half && (h & 1u))) ++h;
    } else {
        h = 0;
    }
    return (uint16_t)(sign | h);
}

SDNN_CS float sdnn_cs_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    /* m x 2^-24 is exact: one rounding-free multiply on either side. */
    if (e == 0) return sdnn_cs_float(sign | sdnn_cs_bits((float)m * 0x1p-24f));
    if (e == 31) return sdnn_cs_float(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
    return sdnn_cs_float(sign | ((e + 112u) << 23) | (m << 13));
}

/* Adding 0x7fff plus the lowest kept bit rounds the dropped half to nearest
 * even (a carry into the exponent is the right result, up to inf).  NaN
 * only gets its quiet bit: rounding could carry a low payload into inf.
 * The choice is made on 32 bits so the host's vector code packs once. */
SDNN_CS uint16_t sdnn_cs_bf16_round(uint32_t u)
{
    /* Signed compare (both sides are below 2^31): one vector instruction. */
    int nan = (int32_t)(u & 0x7fffffffu) > 0x7f800000;
    uint32_t v = nan ? (u | 0x00400000u) : u + 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(v >> 16);
}

SDNN_CS float sdnn_cs_bf16_to_f32(uint16_t h) { return sdnn_cs_float((uint32_t)h << 16); }

/* ---- stochastic-rounding generator ------------------------------------------------- */

#define SDNN_CS_GOLDEN SDNN_SPLITMIX_GOLDEN

/* splitmix64's finaliser (base/splitmix.h). */
SDNN_CS uint64_t sdnn_cs_mix64(uint64_t z) { return sdnn_splitmix64_mix(z); }

/* One key per (seed, stream); element i then draws splitmix64's i-th output
 * from that key, so any element can be drawn without the ones before it. */
SDNN_CS uint64_t sdnn_cs_stream_key(uint64_t seed, uint64_t stream)
{
    return sdnn_cs_mix64(seed ^ sdnn_cs_mix64(stream + 0x632be59bd9b4e019ull));
}

/* Uniform in [0, 1): the top 24 bits of the draw, as a float. */
SDNN_CS float sdnn_cs_key_uniform(uint64_t key, uint64_t index)
{
    uint64_t z = sdnn_cs_mix64(key + (index + 1) * SDNN_CS_GOLDEN);
    return (float)(int32_t)(z >> 40) * 0x1p-24f;
}

#ifdef __cplusplus
}
#endif

#endif
