/*
 * ring: collective.c's compressed allreduce-mean on devices.  Every local
 * rank plays its part in lockstep, hop by hop: all ranks encode, one
 * shift moves every rank's bytes to its right neighbour, all ranks decode.
 * The chunks, the hop order, the stochastic-rounding streams and every
 * rounding are the host ring's, and the device codecs write the host
 * codecs' bytes, so the results equal the host backends' bit for bit.
 *
 * Two transports:
 *   device  the ranks are virtual devices of one physical device; their
 *           buffers live in one address space and a shift is a device copy
 *           per rank.  Everything runs on the comm stream of rank 0's
 *           context, which the caller orders after every rank's backward.
 *   NCCL    one device per rank (a process may drive several); a shift is
 *           ncclSend/ncclRecv of every local rank inside one NCCL group,
 *           each on its own device's comm stream.
 */
#include "cuda_util.cuh"

#include <stdlib.h>
#include <string.h>
#if SDNN_NCCL
#include <nccl.h>
#endif

extern "C" {
#include "collective.h"
}

typedef struct ring_rank {
    sdnn_dctx *ctx;         /* where this rank's kernels run */
    void *comm;             /* ncclComm_t, NCCL transport */
    int rank;               /* global */
    unsigned char *scratch; /* device */
    size_t bytes;
    /* per-call state */
    const float *in;
    float *out;
    float *acc;
    unsigned char *sbuf, *rbuf, *cscratch;
    size_t slen, rlen;      /* bytes of the current shift */
} ring_rank;

struct sdnn_dring {
    int nlocal, world, nccl;
    int owns_comms;         /* made by sdnn_dring_create_nccl_local */
    ring_rank *r;
};

static size_t round256(size_t x) { return (x + 255) & ~(size_t)255; }
static int mod(int a, int m) { return ((a % m) + m) % m; }

extern "C" sdnn_status sdnn_dring_create(sdnn_dctx *const *ctxs, int nlocal, void *const *ncomms,
                                         int world, int first_rank, sdnn_dring **out)
{
    *out = NULL;
    if (nlocal < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "device ring: no ranks");
#if !SDNN_NCCL
    if (ncomms) return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "NCCL is not in this build (NCCL=0)");
#endif
    if (!ncomms) {
        world = nlocal;
        first_rank = 0;
        for (int i = 1; i < nlocal; ++i)
            if (ctxs[i]->o.device != ctxs[0]->o.device)
                return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                                  "comm backend device: replicas on devices %d and %d; it moves "
                                  "data within one device (use nccl across devices)",
                                  ctxs[0]->o.device, ctxs[i]->o.device);
    }
    sdnn_dring *R = (sdnn_dring *)calloc(1, sizeof *R);
    if (!R) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a device ring");
    R->r = (ring_rank *)calloc((size_t)nlocal, sizeof *R->r);
    if (!R->r) {
        free(R);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a device ring");
    }
    R->nlocal = nlocal;
    R->world = world;
    R->nccl = ncomms != NULL;
    for (int i = 0; i < nlocal; ++i) {
        R->r[i].ctx = ncomms ? ctxs[i] : ctxs[0];
        R->r[i].comm = ncomms ? ncomms[i] : NULL;
        R->r[i].rank = first_rank + i;
    }
    *out = R;
    return SDNN_OK;
}

extern "C" void sdnn_dring_destroy(sdnn_dring *R)
{
    if (!R) return;
    for (int i = 0; i < R->nlocal; ++i) {
        cudaSetDevice(R->r[i].ctx->o.device);
        cudaStreamSynchronize(R->r[i].ctx->s[SDNN_STREAM_COMM]);
        if (R->r[i].scratch) cudaFree(R->r[i].scratch);
#if SDNN_NCCL
        if (R->owns_comms && R->r[i].comm) ncclCommDestroy((ncclComm_t)R->r[i].comm);
#endif
    }
    free(R->r);
    free(R);
}

extern "C" sdnn_status sdnn_dring_create_nccl_local(sdnn_dctx *const *ctxs, int n,
                                                    sdnn_dring **out)
{
    *out = NULL;
#if SDNN_NCCL
    enum { MAXDEV = 64 };
    if (n < 1 || n > MAXDEV)
        return SDNN_ERROR(SDNN_ERR_INVALID, "nccl: %d local devices (1..%d)", n, (int)MAXDEV);
    int devs[MAXDEV];
    ncclComm_t comms[MAXDEV];
    void *pc[MAXDEV];
    for (int i = 0; i < n; ++i) devs[i] = ctxs[i]->o.device;
    ncclResult_t e = ncclCommInitAll(comms, n, devs);
    if (e != ncclSuccess)
        return SDNN_ERROR(SDNN_ERR_COMM, "ncclCommInitAll over %d devices: %s (%s)", n,
                          ncclGetErrorString(e), ncclGetLastError(NULL));
    for (int i = 0; i < n; ++i) pc[i] = comms[i];
    sdnn_status st = sdnn_dring_create(ctxs, n, pc, n, 0, out);
    if (st != SDNN_OK) {
        for (int i = 0; i < n; ++i) ncclCommDestroy(comms[i]);
        return st;
    }
    (*out)->owns_comms = 1;
    return SDNN_OK;
#else
    (void)ctxs; (void)n;
    return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "NCCL is not in this build (NCCL=0)");
#endif
}

extern "C" sdnn_status sdnn_dring_sync(sdnn_dring *R)
{
    for (int i = 0; i < R->nlocal; ++i) {
        SDNN_CU(cudaSetDevice(R->r[i].ctx->o.device));
        SDNN_CU(cudaStreamSynchronize(R->r[i].ctx->s[SDNN_STREAM_COMM]));
    }
    return SDNN_OK;
}

static sdnn_status reserve(ring_rank *k, size_t bytes)
{
    if (bytes <= k->bytes) return SDNN_OK;
    SDNN_CU(cudaSetDevice(k->ctx->o.device));
    if (k->scratch) {
        SDNN_CU(cudaStreamSynchronize(k->ctx->s[SDNN_STREAM_COMM]));
        SDNN_CU(cudaFree(k->scratch));
        k->scratch = NULL;
        k->bytes = 0;
    }
    SDNN_CU(cudaMalloc((void **)&k->scratch, bytes));
    k->bytes = bytes;
    return SDNN_OK;
}

static cudaStream_t comm_stream(ring_rank *k) { return k->ctx->s[SDNN_STREAM_COMM]; }

/* Every local rank sends k->slen bytes of k->sbuf to its right neighbour
 * and receives k->rlen bytes into k->rbuf from its left. */
static sdnn_status shift_all(sdnn_dring *R, size_t *wire)
{
    if (R->world == 1) return SDNN_OK;
    if (!R->nccl) {
        for (int i = 0; i < R->nlocal; ++i) {
            ring_rank *a = &R->r[i], *b = &R->r[(i + 1) % R->nlocal];
            if (a->slen != b->rlen)
                return SDNN_ERROR(SDNN_ERR_INTERNAL, "device ring: rank %d sends %zu bytes, "
                                  "rank %d expects %zu", i, a->slen, (i + 1) % R->nlocal, b->rlen);
            if (a->slen)
                SDNN_CU(cudaMemcpyAsync(b->rbuf, a->sbuf, a->slen, cudaMemcpyDeviceToDevice,
                                        comm_stream(a)));
            *wire += a->slen;
        }
        return SDNN_OK;
    }
#if SDNN_NCCL
    ncclResult_t e = ncclGroupStart();
    for (int i = 0; i < R->nlocal && e == ncclSuccess; ++i) {
        ring_rank *k = &R->r[i];
        ncclComm_t comm = (ncclComm_t)k->comm;
        e = ncclSend(k->sbuf, k->slen, ncclUint8, mod(k->rank + 1, R->world), comm,
                     comm_stream(k));
        if (e == ncclSuccess)
            e = ncclRecv(k->rbuf, k->rlen, ncclUint8, mod(k->rank - 1, R->world), comm,
                         comm_stream(k));
        *wire += k->slen;
    }
    ncclResult_t e2 = ncclGroupEnd();
    if (e == ncclSuccess) e = e2;
    if (e != ncclSuccess)
        return SDNN_ERROR(SDNN_ERR_COMM, "NCCL ring shift failed: %s (%s)", ncclGetErrorString(e),
                          ncclGetLastError(NULL));
    return SDNN_OK;
#else
    return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "NCCL is not in this build");
#endif
}

#define EACH(k) for (ring_rank *k = R->r; k < R->r + R->nlocal; ++k)

static sdnn_status bind(ring_rank *k) { SDNN_CU(cudaSetDevice(k->ctx->o.device)); return SDNN_OK; }

static sdnn_status dense_ring(sdnn_dring *R, int codec, const sdnn_codec_params *p,
                              uint64_t stream, size_t n, size_t *wire)
{
    const sdnn_codec_ops *hc = sdnn_dcodec_host(codec);
    const int W = R->world;
    const size_t align = hc->align(p);
    size_t lo0, maxlen;
    sdnn_ring_chunk(n, align, W, 0, &lo0, &maxlen);
    size_t enc_max = round256(hc->encoded_size(p, maxlen));
    size_t acc_bytes = round256(maxlen * sizeof(float));
    size_t cs = round256(sdnn_dcodec_scratch_bytes(codec, p, maxlen));
    EACH(k) {
        SDNN_CHECK(reserve(k, acc_bytes + 2 * enc_max + cs));
        k->acc = (float *)k->scratch;
        k->sbuf = k->scratch + acc_bytes;
        k->rbuf = k->sbuf + enc_max;
        k->cscratch = k->rbuf + enc_max;
    }
    /* Reduce-scatter: at hop s rank R sends chunk R-s and receives R-s-1. */
    if (W == 1) {
        EACH(k) {
            SDNN_CHECK(bind(k));
            SDNN_CU(cudaMemcpyAsync(k->acc, k->in, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                    comm_stream(k)));
        }
    }
    for (int s = 0; s < W - 1; ++s) {
        EACH(k) {
            SDNN_CHECK(bind(k));
            int sc = mod(k->rank - s, W), rc = mod(k->rank - s - 1, W);
            size_t slo, slen, rlo, rlen;
            sdnn_ring_chunk(n, align, W, sc, &slo, &slen);
            sdnn_ring_chunk(n, align, W, rc, &rlo, &rlen);
            const float *src = s == 0 ? k->in + slo : k->acc;
            SDNN_CHECK(sdnn_dcodec_encode(k->ctx, SDNN_STREAM_COMM, codec, p, src, slen, k->sbuf,
                                          sdnn_stream_mix(stream, (uint64_t)sc, (uint64_t)s),
                                          k->cscratch));
            k->slen = hc->encoded_size(p, slen);
            k->rlen = hc->encoded_size(p, rlen);
        }
        SDNN_CHECK(shift_all(R, wire));
        EACH(k) {
            SDNN_CHECK(bind(k));
            int rc = mod(k->rank - s - 1, W);
            size_t rlo, rlen;
            sdnn_ring_chunk(n, align, W, rc, &rlo, &rlen);
            SDNN_CHECK(sdnn_dcodec_decode_add(k->ctx, SDNN_STREAM_COMM, codec, p, k->rbuf, rlen,
                                              k->in + rlo, k->acc));
        }
    }
    /* The owner's mean, encoded once. */
    const float inv = 1.0f / (float)W;
    EACH(k) {
        SDNN_CHECK(bind(k));
        int own = mod(k->rank + 1, W);
        size_t olo, olen;
        sdnn_ring_chunk(n, align, W, own, &olo, &olen);
        SDNN_CHECK(sdnn_k_scale(k->ctx, SDNN_STREAM_COMM, k->acc, olen, inv));
        SDNN_CHECK(sdnn_dcodec_encode(k->ctx, SDNN_STREAM_COMM, codec, p, k->acc, olen, k->sbuf,
                                      sdnn_stream_mix(stream, (uint64_t)own, (uint64_t)W),
                                      k->cscratch));
        SDNN_CHECK(sdnn_dcodec_decode(k->ctx, SDNN_STREAM_COMM, codec, p, k->sbuf, olen,
                                      k->out + olo));
        k->slen = hc->encoded_size(p, olen);
    }
    /* All-gather: each encoded mean passes on unchanged. */
    for (int s = 0; s < W - 1; ++s) {
        EACH(k) {
            int rc = mod(k->rank - s, W);
            size_t rlo, rlen;
            sdnn_ring_chunk(n, align, W, rc, &rlo, &rlen);
            k->rlen = hc->encoded_size(p, rlen);
        }
        SDNN_CHECK(shift_all(R, wire));
        EACH(k) {
            SDNN_CHECK(bind(k));
            int rc = mod(k->rank - s, W);
            size_t rlo, rlen;
            sdnn_ring_chunk(n, align, W, rc, &rlo, &rlen);
            SDNN_CHECK(sdnn_dcodec_decode(k->ctx, SDNN_STREAM_COMM, codec, p, k->rbuf, rlen,
                                          k->out + rlo));
            unsigned char *t = k->sbuf;
            k->sbuf = k->rbuf;
            k->rbuf = t;
            k->slen = k->rlen;
        }
    }
    return SDNN_OK;
}

static sdnn_status sparse_allgather(sdnn_dring *R, int codec, const sdnn_codec_params *p,
                                    uint64_t stream, size_t n, size_t *wire)
{
    const sdnn_codec_ops *hc = sdnn_dcodec_host(codec);
    const int W = R->world;
    const size_t enc = hc->encoded_size(p, n), stride = round256(enc);
    size_t cs = round256(sdnn_dcodec_scratch_bytes(codec, p, n));
    EACH(k) {
        SDNN_CHECK(reserve(k, (size_t)W * stride + cs));
        k->cscratch = k->scratch + (size_t)W * stride;
        SDNN_CHECK(bind(k));
        SDNN_CHECK(sdnn_dcodec_encode(k->ctx, SDNN_STREAM_COMM, codec, p, k->in, n,
                                      k->scratch + (size_t)k->rank * stride,
                                      sdnn_stream_mix(stream, (uint64_t)k->rank, 0), k->cscratch));
    }
    for (int s = 0; s < W - 1; ++s) {
        EACH(k) {
            int sc = mod(k->rank - s, W), rc = mod(k->rank - s - 1, W);
            k->sbuf = k->scratch + (size_t)sc * stride;
            k->rbuf = k->scratch + (size_t)rc * stride;
            k->slen = k->rlen = enc;
        }
        SDNN_CHECK(shift_all(R, wire));
    }
    const float inv = 1.0f / (float)W;
    EACH(k) {
        SDNN_CHECK(bind(k));
        SDNN_CU(cudaMemsetAsync(k->out, 0, n * sizeof(float), comm_stream(k)));
        for (int q = 0; q < W; ++q)
            SDNN_CHECK(sdnn_dcodec_accumulate(k->ctx, SDNN_STREAM_COMM, codec, p,
                                              k->scratch + (size_t)q * stride, n, k->out));
        SDNN_CHECK(sdnn_k_scale(k->ctx, SDNN_STREAM_COMM, k->out, n, inv));
    }
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dring_coded(sdnn_dring *R, const sdnn_codec_ops *codec,
                                        const sdnn_codec_params *p, uint64_t stream,
                                        const float *const *in, float *const *out, size_t n,
                                        size_t *wire)
{
    int id = sdnn_dcodec_of(codec);
    if (id < 0)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "codec %s has no device version",
                          codec ? codec->name : "(null)");
    size_t sent = 0;
    if (n == 0) return SDNN_OK;
    for (int i = 0; i < R->nlocal; ++i) {
        R->r[i].in = in[i];
        R->r[i].out = out[i];
    }
    sdnn_status st = codec->dense ? dense_ring(R, id, p, stream, n, &sent)
                                  : sparse_allgather(R, id, p, stream, n, &sent);
    if (wire) *wire += sent;
    return st;
}

extern "C" sdnn_status sdnn_dring_mean(sdnn_dring *R, const float *const *in, float *const *out,
                                       size_t n, size_t *wire)
{
    if (n == 0) return SDNN_OK;
    const int W = R->world;
    if (wire && W > 1) *wire += (size_t)R->nlocal * 2 * (size_t)(W - 1) * n * sizeof(float) / W;
    if (!R->nccl) {
        ring_rank *k = &R->r[0];
        SDNN_CHECK(bind(k));
        SDNN_CHECK(sdnn_k_mean(k->ctx, SDNN_STREAM_COMM, in, R->nlocal, out[0], n));
        for (int i = 1; i < R->nlocal; ++i)
            if (out[i] != out[0])
                SDNN_CU(cudaMemcpyAsync(out[i], out[0], n * sizeof(float),
                                        cudaMemcpyDeviceToDevice, comm_stream(k)));
        return SDNN_OK;
    }
#if SDNN_NCCL
    ncclResult_t e = ncclGroupStart();
    EACH(k) {
        if (e != ncclSuccess) break;
        int i = (int)(k - R->r);
        e = ncclAllReduce(in[i], out[i], n, ncclFloat, ncclSum, (ncclComm_t)k->comm,
                          comm_stream(k));
    }
    ncclResult_t e2 = ncclGroupEnd();
    if (e == ncclSuccess) e = e2;
    if (e != ncclSuccess)
        return SDNN_ERROR(SDNN_ERR_COMM, "ncclAllReduce failed: %s (%s)", ncclGetErrorString(e),
                          ncclGetLastError(NULL));
    if (W > 1) {
        EACH(k) {
            SDNN_CHECK(bind(k));
            SDNN_CHECK(sdnn_k_scale(k->ctx, SDNN_STREAM_COMM, out[k - R->r], n,
                                    1.0f / (float)W));
        }
    }
    return SDNN_OK;
#else
    return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "NCCL is not in this build");
#endif
}
