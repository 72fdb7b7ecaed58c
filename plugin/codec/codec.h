/*
 * codec: how a bucket of float gradients is encoded to cross a link.
 *
 * A codec is a table of function pointers found by name in a registry
 * (sdnn_codec_find).  Dense codecs (none, fp16, bf16, int8) encode every
 * element and can be decoded, summed in fp32 and re-encoded hop by hop, so
 * the collectives carry them around a ring; sparse codecs (topk) encode a
 * selection and travel by all-gather, summed locally.
 *
 * Every function is deterministic: the same input, parameters and stream
 * give the same bytes on every machine, so every rank that decodes the same
 * bytes gets the same floats.  Inputs are finite (the exchange rejects
 * non-finite gradients before they reach a codec); what each codec does
 * with 0, +-inf, NaN, subnormals and overflow is still defined below.
 *
 *  none   the identity: n floats, bit for bit.
 *  fp16   IEEE binary16, round to nearest even.  |x| >= 65520 becomes +-inf,
 *         inf stays inf, NaN stays a (quiet) NaN with its sign, values
 *         below 2^-25 in magnitude become +-0, binary16 subnormals are kept.
 *         Error: at most half an ulp of binary16 at x (2^-11 |x| for normal
 *         values, 2^-25 in the subnormal range).
 *  bf16   the top 16 bits of a float, round to nearest even.  Overflow past
 *         the largest bf16 becomes +-inf, NaN stays a quiet NaN, float
 *         subnormals are rounded like any other value.  Error: at most half
 *         an ulp of an 8-bit significand, i.e. <= 2^-8 |x|.
 *  int8   per chunk of int8_chunk elements, with m = max|x|, a float scale
 *         s = m / 127 and q = round(x * (127 / m)) in [-127, 127] (nearest
 *         even, or stochastic: floor(x * (127 / m) + u), u uniform in [0,1)
 *         from a counter-based generator keyed by seed, stream and element
 *         index); a multiply, not x / s, for speed.  Error: <= s/2 per
 *         element (nearest) and < s (stochastic, unbiased), each up to a
 *         few ulps of m from the two roundings of 127/m.
 *         An all-zero chunk has s = 0.
 *  topk   the k = clamp(ceil(ratio * n), 1, n) entries of largest magnitude
 *         as (uint32 index, float value) pairs, indices ascending; ties at
 *         the threshold go to the lowest indices.  Selection is O(n).
 */
#ifndef SDNN_CODEC_H
#define SDNN_CODEC_H

#include "scalednn.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sdnn_codec_params {
    int int8_chunk;        /* int8: elements per scale, >= 1 (default 256) */
    int stochastic;        /* int8: 1 = stochastic rounding */
    uint64_t seed;         /* int8: stochastic rounding seed */
    double topk_ratio;     /* topk: fraction of entries kept, in (0, 1] */
} sdnn_codec_params;

#define SDNN_CODEC_PARAMS_INIT { .int8_chunk = 256, .stochastic = 0, .seed = 0, .topk_ratio = 0.01 }

typedef struct sdnn_codec_ops {
    const char *name;
    int lossy;             /* 0 only for none */
    int dense;             /* 1: ring (decode, add in fp32, re-encode per hop);
                            * 0: sparse, all-gather and local sum */
    /* The planner's default iteration factor: iterations to a target
     * accuracy with this codec / with none (none: 1).  A stated model, not
     * a property of the code: docs/ARCHITECTURE.md ("Iterations to the
     * target") says which runs each number comes from; [scalednn]
     * iter_factor= overrides it (costmodel.h, sdnn_iter_factor). */
    double iter_factor;
    /* Bytes encode() writes for n floats (exact). */
    size_t (*encoded_size)(const sdnn_codec_params *p, size_t n);
    /* Element alignment a ring chunk boundary must respect (int8: chunk). */
    size_t (*align)(const sdnn_codec_params *p);
    /* Encode x[0..n-1] into out (encoded_size bytes); returns the bytes
     * written.  `stream` selects the stochastic-rounding stream. */
    size_t (*encode)(const sdnn_codec_params *p, const float *x, size_t n,
                     void *out, uint64_t stream);
    /* y[i] = decoded[i]. */
    void (*decode)(const sdnn_codec_params *p, const void *in, size_t n, float *y);
    /* y[i] = decoded[i] + add[i]; y may alias add. */
    void (*decode_add)(const sdnn_codec_params *p, const void *in, size_t n,
                       const float *add, float *y);
    /* y[i] += decoded[i] (sparse codecs touch only their k entries). */
    void (*accumulate)(const sdnn_codec_params *p, const void *in, size_t n, float *y);
} sdnn_codec_ops;

extern const sdnn_codec_ops sdnn_codec_none;
extern const sdnn_codec_ops sdnn_codec_fp16;
extern const sdnn_codec_ops sdnn_codec_bf16;
extern const sdnn_codec_ops sdnn_codec_int8;
extern const sdnn_codec_ops sdnn_codec_topk;

/* The codec called `name`, or NULL. */
const sdnn_codec_ops *sdnn_codec_find(const char *name);
/* "none, fp16, bf16, int8, topk" (for messages). */
const char *sdnn_codec_names(void);

/* topk: entries kept for n elements at ratio r: clamp(ceil(r*n), 1, n),
 * where a product within a few ulps above an integer counts as that integer
 * (0.07 x 100 keeps 7, not 8). */
size_t sdnn_codec_topk_k(double ratio, size_t n);

/* Scalar conversions (the reference the vector paths must equal). */
uint16_t sdnn_f32_to_f16(float x);
float sdnn_f16_to_f32(uint16_t h);
uint16_t sdnn_f32_to_bf16(float x);
float sdnn_bf16_to_f32(uint16_t h);

/* Uniform [0,1) of the counter-based generator used for stochastic
 * rounding: a pure function of (seed, stream, index). */
float sdnn_codec_uniform(uint64_t seed, uint64_t stream, uint64_t index);

/*
 * Error feedback (local accumulation), for any lossy codec.
 *   g        in: this step's fresh gradient; out: what this replica sends,
 *            i.e. decode(encode(g + residual)) (exact values for topk)
 *   residual in/out: what earlier steps did not send; out: g' - sent, where
 *            g' = g + residual (so sent + residual == g' bit for bit for
 *            topk, and within one rounding for dense codecs)
 *   velocity NULL, or DGC momentum correction with factor `momentum`:
 *            u = momentum*u + g; v = v + u; send from v; both u and v are
 *            zeroed where an entry was sent (topk).  `residual` is v.
 *   scratch  encoded_size(n) bytes
 * With codec none the gradient passes through and the residual stays 0.
 */
void sdnn_codec_ef_step(const sdnn_codec_ops *c, const sdnn_codec_params *p,
                        float *g, float *residual, float *velocity, float momentum,
                        size_t n, void *scratch, uint64_t stream);

#ifdef __cplusplus
}
#endif

#endif
