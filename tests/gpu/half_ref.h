/*
 * half_ref: the references of NCCL's 16-bit allreduce for tests/gpu
 * (nccl_half.c, nccl_world.c), written apart from the simulated NCCL they
 * check:
 *
 *   hr_ring16   the bits the simulated NCCL must give (sim/nccl.c states
 *               the order): chunk c = [c n / W, (c+1) n / W) is summed
 *               starting at rank c+1 around the ring, every partial sum
 *               rounded to the type; then decoded and x 1/W in fp32, as
 *               the device ring's native path does.
 *   hr_bound    the error bound any NCCL meets, whatever its order: for
 *               element i with A = sum_r |x_r[i]| and u the unit roundoff
 *               of the type (2^-11 binary16, 2^-8 bfloat16),
 *                 encode    u A                      (one rounding per input)
 *                 W-1 sums  g (1 + u) A,  g = (W-1) u / (1 - (W-1) u)
 *                           (each partial sum of the encoded values is
 *                           rounded once; Higham's gamma bound)
 *                 binary16 subnormals: at most 2^-25 absolute per
 *                           rounding, (2W - 1) roundings
 *               all divided by W, then the fp32 scale's own rounding,
 *               2^-24 of the result.  |x| > 65504 (or a partial sum past
 *               it) is outside the bound: the fp16 codec's rule makes it
 *               +-inf (|s| >= 65520), and so does NCCL's half sum.
 */
#ifndef SDNN_GPU_HALF_REF_H
#define SDNN_GPU_HALF_REF_H

#include "codec.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { HR_HALF = 0, HR_BF16 = 1 };

static inline uint16_t hr_enc(int t, float x)
{
    return t == HR_HALF ? sdnn_f32_to_f16(x) : sdnn_f32_to_bf16(x);
}

static inline float hr_dec(int t, uint16_t h)
{
    return t == HR_HALF ? sdnn_f16_to_f32(h) : sdnn_bf16_to_f32(h);
}

/* out[i] for the W inputs x[r][0..n) as described above. */
static __attribute__((unused)) void hr_ring16(int t, const float *const *x, int W, size_t n,
                                              float *out)
{
    const float inv = 1.0f / (float)W;
    for (int c = 0; c < W; ++c) {
        size_t lo = (size_t)c * n / (size_t)W, hi = (size_t)(c + 1) * n / (size_t)W;
        for (size_t i = lo; i < hi; ++i) {
            uint16_t s = hr_enc(t, x[(c + 1) % W][i]);
            for (int k = 2; k <= W; ++k) {
                uint16_t e = hr_enc(t, x[(c + k) % W][i]);
                s = hr_enc(t, hr_dec(t, s) + hr_dec(t, e));
            }
            float v = hr_dec(t, s);
            out[i] = W > 1 ? v * inv : v;
        }
    }
}

/* The bound on |got - mean| for element i (see the header). */
static __attribute__((unused)) double hr_bound(int t, const float *const *x, int W, size_t i,
                                               double mean)
{
    const double u = t == HR_HALF ? 0x1p-11 : 0x1p-8;
    double A = 0;
    for (int r = 0; r < W; ++r) A += fabs((double)x[r][i]);
    const double g = (W - 1) * u / (1 - (W - 1) * u);
    double e = u * A + g * (1 + u) * A;
    if (t == HR_HALF) e += (2.0 * W - 1) * 0x1p-25;
    e /= W;
    return e + 0x1p-24 * (fabs(mean) + e);
}

#endif
