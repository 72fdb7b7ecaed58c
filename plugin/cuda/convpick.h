/*
 * convpick: which entry of cuDNN's ranking of convolution algorithms a
 * layer takes (conv.cu), in plain C so that the rule is checked on any
 * machine (tests/gpu/convpick.c): cuDNN itself runs only on a GPU.
 *
 * The math types carry cuDNN's own values (conv.cu checks them when it is
 * compiled).  For fp32 data:
 *   FMA        plain fp32 FMA kernels: always allowed;
 *   DEFAULT    what cuDNN reports for the same FMA kernels when asked with
 *              FMA math set, and TF32 where tensor cores may be used: allowed
 *              always, and without tf32 the descriptor is then set to FMA;
 *   TENSOR_OP  TF32 tensor cores: allowed with tf32 only;
 *   CONVERT    tensor cores on data down-converted to fp16: never (tf32
 *              allows TF32's 10-bit mantissa, not fp16's range).
 */
#ifndef SDNN_CUDA_CONVPICK_H
#define SDNN_CUDA_CONVPICK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum sdnn_conv_math {
    SDNN_CONV_MATH_DEFAULT = 0,     /* CUDNN_DEFAULT_MATH */
    SDNN_CONV_MATH_TENSOR_OP = 1,   /* CUDNN_TENSOR_OP_MATH */
    SDNN_CONV_MATH_CONVERT = 2,     /* CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION */
    SDNN_CONV_MATH_FMA = 3          /* CUDNN_FMA_MATH */
};

/* One entry of a ranking (cudnnConvolution*AlgoPerf_t), as the rule sees it. */
typedef struct sdnn_conv_algo {
    int ok;                 /* status == CUDNN_STATUS_SUCCESS */
    size_t memory;          /* workspace bytes */
    int math;               /* enum sdnn_conv_math (any other value: refused) */
    int deterministic;      /* determinism == CUDNN_DETERMINISTIC */
} sdnn_conv_algo;

static inline int sdnn_conv_math_allowed(int math, int tf32)
{
    switch (math) {
    case SDNN_CONV_MATH_FMA:
    case SDNN_CONV_MATH_DEFAULT: return 1;
    case SDNN_CONV_MATH_TENSOR_OP: return tf32 != 0;
    default: return 0;
    }
}

/* The math type to set on the descriptor for an entry taken. */
static inline int sdnn_conv_math_set(int reported, int tf32)
{
    return tf32 ? reported : SDNN_CONV_MATH_FMA;
}

/* What a pick gave up of what was asked (bits; 0: nothing). */
enum sdnn_conv_gave_up {
    SDNN_CONV_OVER_LIMIT = 1,          /* the entry needs more than `limit` bytes */
    SDNN_CONV_NONDETERMINISTIC = 2     /* deterministic asked, no deterministic entry */
};

/* The first entry that succeeded and has an allowed math type, taking in
 * turn: deterministic (when asked) within `limit` bytes; deterministic
 * over the limit; within the limit; any.  Determinism outranks the limit:
 * conv.cu promises the same bits across replicas and reruns, and a larger
 * workspace costs memory, not that promise.  *gave_up (may be NULL) says
 * which pass it took, so that the engine says so at start.  -1: none. */
static inline int sdnn_conv_pick_why(const sdnn_conv_algo *a, int n, size_t limit, int tf32,
                                     int deterministic, int *gave_up)
{
    static const int passes[4] = {0, SDNN_CONV_OVER_LIMIT, SDNN_CONV_NONDETERMINISTIC,
                                  SDNN_CONV_OVER_LIMIT | SDNN_CONV_NONDETERMINISTIC};
    if (gave_up) *gave_up = 0;
    for (int pass = 0; pass < 4; ++pass) {
        int free_limit = passes[pass] & SDNN_CONV_OVER_LIMIT;
        int free_det = !deterministic || (passes[pass] & SDNN_CONV_NONDETERMINISTIC);
        for (int i = 0; i < n; ++i) {
            if (!a[i].ok || !sdnn_conv_math_allowed(a[i].math, tf32)) continue;
            if (!free_limit && a[i].memory > limit) continue;
            if (!free_det && !a[i].deterministic) continue;
            if (gave_up) {
                if (a[i].memory > limit) *gave_up |= SDNN_CONV_OVER_LIMIT;
                if (deterministic && !a[i].deterministic) *gave_up |= SDNN_CONV_NONDETERMINISTIC;
            }
            return i;
        }
    }
    return -1;
}

static inline int sdnn_conv_pick(const sdnn_conv_algo *a, int n, size_t limit, int tf32,
                                 int deterministic)
{
    return sdnn_conv_pick_why(a, n, limit, tf32, deterministic, NULL);
}

#ifdef __cplusplus
}
#endif

#endif
