/*
 * sim/codec: the device codecs of dev.h on a simulated device.  Each call
 * queues the host codec itself (codec.h) on the named stream, over the
 * host addresses of its device buffers, so the bytes are the host codecs'
 * by construction; what this shows is the host logic that drives the
 * device codecs (buffer sizes, streams, ordering), not the CUDA kernels of
 * codec.cu, whose bytes only a GPU run compares (tests/gpu/codecs).
 */
#include "sim.h"

#include <string.h>

/* The host encoders keep no selection state on the device. */
size_t sdnn_dcodec_scratch_bytes(int codec, const sdnn_codec_params *p, size_t n)
{
    (void)codec;
    (void)p;
    (void)n;
    return 0;
}

typedef struct dc_arg {
    const sdnn_codec_ops *codec;
    sdnn_codec_params p;
    const float *x;     /* encode input */
    void *out;          /* encode output */
    const void *in;     /* decode input */
    const float *add;
    float *y;
    size_t n;
    uint64_t rstream;
    /* ef_step */
    float *g, *residual, *velocity;
    float momentum;
} dc_arg;

static sdnn_status check_codec(int codec, const char *call, const sdnn_codec_ops **out)
{
    *out = sdnn_dcodec_host(codec);
    if (!*out) return SDNN_ERROR(SDNN_ERR_INVALID, "%s: device codec %d unknown", call, codec);
    return SDNN_OK;
}

#define DPTR(c, p, bytes, name, out)                                                 \
    do {                                                                             \
        void *h_;                                                                    \
        SDNN_CHECK(sdnn_sim_dptr((c), (p), (bytes), (name), &h_));                    \
        (out) = h_;                                                                  \
    } while (0)

static sdnn_status run_encode(void *arg)
{
    dc_arg *a = arg;
    a->codec->encode(&a->p, a->x, a->n, a->out, a->rstream);
    return SDNN_OK;
}

sdnn_status sdnn_dcodec_encode(sdnn_dctx *c, int stream, int codec, const sdnn_codec_params *p,
                               const float *x, size_t n, void *out, uint64_t rstream,
                               void *scratch)
{
    static const char call[] = "sdnn_dcodec_encode";
    (void)scratch;
    if (n == 0) return SDNN_OK;
    dc_arg a;
    memset(&a, 0, sizeof a);
    SDNN_CHECK(check_codec(codec, call, &a.codec));
    a.p = *p;
    DPTR(c, x, n * sizeof(float), call, a.x);
    DPTR(c, out, a.codec->encoded_size(p, n), call, a.out);
    a.n = n;
    a.rstream = rstream;
    return sdnn_sim_launch(c, stream, call, run_encode, &a, sizeof a);
}

static sdnn_status run_decode(void *arg)
{
    dc_arg *a = arg;
    if (a->add) a->codec->decode_add(&a->p, a->in, a->n, a->add, a->y);
    else a->codec->decode(&a->p, a->in, a->n, a->y);
    return SDNN_OK;
}

static sdnn_status run_accumulate(void *arg)
{
    dc_arg *a = arg;
    a->codec->accumulate(&a->p, a->in, a->n, a->y);
    return SDNN_OK;
}

static sdnn_status queue_decode(sdnn_dctx *c, int stream, int codec, const sdnn_codec_params *p,
                                const void *in, size_t n, const float *add, float *y,
                                sdnn_sim_fn fn, const char *call)
{
    if (n == 0) return SDNN_OK;
    dc_arg a;
    memset(&a, 0, sizeof a);
    SDNN_CHECK(check_codec(codec, call, &a.codec));
    a.p = *p;
    DPTR(c, in, a.codec->encoded_size(p, n), call, a.in);
    if (add) DPTR(c, add, n * sizeof(float), call, a.add);
    DPTR(c, y, n * sizeof(float), call, a.y);
    a.n = n;
    return sdnn_sim_launch(c, stream, call, fn, &a, sizeof a);
}

sdnn_status sdnn_dcodec_decode(sdnn_dctx *c, int stream, int codec, const sdnn_codec_params *p,
                               const void *in, size_t n, float *y)
{
    return queue_decode(c, stream, codec, p, in, n, NULL, y, run_decode, "sdnn_dcodec_decode");
}

sdnn_status sdnn_dcodec_decode_add(sdnn_dctx *c, int stream, int codec,
                                   const sdnn_codec_params *p, const void *in, size_t n,
                                   const float *add, float *y)
{
    if (!add)
        return SDNN_ERROR(SDNN_ERR_INVALID, "sdnn_dcodec_decode_add: no buffer to add");
    return queue_decode(c, stream, codec, p, in, n, add, y, run_decode, "sdnn_dcodec_decode_add");
}

sdnn_status sdnn_dcodec_accumulate(sdnn_dctx *c, int stream, int codec,
                                   const sdnn_codec_params *p, const void *in, size_t n,
                                   float *y)
{
    return queue_decode(c, stream, codec, p, in, n, NULL, y, run_accumulate,
                        "sdnn_dcodec_accumulate");
}

static sdnn_status run_ef_step(void *arg)
{
    dc_arg *a = arg;
    sdnn_codec_ef_step(a->codec, &a->p, a->g, a->residual, a->velocity, a->momentum, a->n, a->out,
                       a->rstream);
    return SDNN_OK;
}

sdnn_status sdnn_dcodec_ef_step(sdnn_dctx *c, int stream, int codec, const sdnn_codec_params *p,
                                float *g, float *residual, float *velocity, float momentum,
                                size_t n, void *enc, void *scratch, uint64_t rstream)
{
    static const char call[] = "sdnn_dcodec_ef_step";
    (void)scratch;
    if (n == 0) return SDNN_OK;
    dc_arg a;
    memset(&a, 0, sizeof a);
    SDNN_CHECK(check_codec(codec, call, &a.codec));
    a.p = *p;
    size_t fb = n * sizeof(float);
    DPTR(c, g, fb, call, a.g);
    if (residual) DPTR(c, residual, fb, call, a.residual);
    if (velocity) DPTR(c, velocity, fb, call, a.velocity);
    if (a.codec->lossy) {
        if (!residual)
            return SDNN_ERROR(SDNN_ERR_INVALID, "%s: codec %s needs a residual", call,
                              a.codec->name);
        DPTR(c, enc, a.codec->encoded_size(p, n), call, a.out);
    }
    a.momentum = momentum;
    a.n = n;
    a.rstream = rstream;
    return sdnn_sim_launch(c, stream, call, run_ef_step, &a, sizeof a);
}
