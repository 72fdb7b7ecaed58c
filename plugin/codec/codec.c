/*
 * codec: the codec registry (the only list of the codecs' names), the
 * identity codec `none` and error feedback.  Each codec family is one file
 * of this folder, its sdnn_codec_ops table declared in codec.h: half.c
 * (fp16, bf16), int8.c, topk.c; adding a codec is one file and one line
 * of `registry` below.  codec.h is the contract, codec_impl.h the kernels
 * the files share.
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
#include "codec_impl.h"

#include <pthread.h>
#include <stdio.h>

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
    .iter_factor = 1.0,
    .lossy = 0,
    .dense = 1,
    .encoded_size = none_size,
    .align = align_one,
    .encode = none_encode,
    .decode = none_decode,
    .decode_add = none_decode_add,
    .accumulate = none_accumulate,
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

/* Built from `registry` once (the only list of the names). */
static char names[128];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void names_build(void)
{
    size_t at = 0;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; ++i) {
        int w = snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "", registry[i]->name);
        if (w < 0 || (size_t)w >= sizeof names - at) break;
        at += (size_t)w;
    }
}

const char *sdnn_codec_names(void)
{
    pthread_once(&names_once, names_build);
    return names;
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

