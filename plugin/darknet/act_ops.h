/*
 * act_ops: the per-element formulas of the maintained Darknet fork's
 * activations that Debian's libdarknet lacks (mish, swish) and their
 * gradients, written once for the host and the device.  Plain C:
 * a C compiler sees static inline functions, nvcc sees __host__ __device__
 * ones, so a device kernel and the CPU layer compute the same values.
 *
 *   softplus(x) = log(1 + e^x), taken as x above 20 (e^-20 is below a
 *                 float's resolution of x there) and e^x below -20
 *   mish(x)     = x tanh(softplus(x))
 *   mish'(x)    = tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2)
 *   swish(x)    = x sigmoid(x)
 *   swish'(x)   = s + x s (1 - s),  s = sigmoid(x)
 *
 * The gradients take the activation's input x (the layer keeps it), not its
 * output: neither function is invertible in closed form.
 */
#ifndef SDNN_ACT_OPS_H
#define SDNN_ACT_OPS_H

#include <math.h>

#ifdef __CUDACC__
#define SDNN_ACT_HD static __host__ __device__ __forceinline__
#else
#define SDNN_ACT_HD static inline
#endif

SDNN_ACT_HD float sdnn_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

SDNN_ACT_HD float sdnn_softplusf(float x)
{
    if (x > 20.0f) return x;
    if (x < -20.0f) return expf(x);
    return log1pf(expf(x));
}

SDNN_ACT_HD float sdnn_mishf(float x) { return x * tanhf(sdnn_softplusf(x)); }

SDNN_ACT_HD float sdnn_mish_gradf(float x)
{
    float t = tanhf(sdnn_softplusf(x));
    return t + x * sdnn_sigmoidf(x) * (1.0f - t * t);
}

SDNN_ACT_HD float sdnn_swishf(float x) { return x * sdnn_sigmoidf(x); }

SDNN_ACT_HD float sdnn_swish_gradf(float x)
{
    float s = sdnn_sigmoidf(x);
    return s + x * s * (1.0f - s);
}

#endif
