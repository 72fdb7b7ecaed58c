/*
 * dev: the boundary between the host glue that reads Darknet's structs
 * (net.c, compiled by the C compiler without -DGPU) and the device code.
 * It has two implementations: CUDA (*.cu, compiled by nvcc, make GPU=1)
 * and the simulated device runtime (plugin/cuda/sim/, make GPU=sim), which runs
 * the same host code on CPU-simulated devices.  Nothing here includes
 * darknet.h or a CUDA header: device state lives in our own structures
 * (sdnn_dlayer), streams and handles stay behind the opaque sdnn_dctx.
 *
 * Every call that can fail returns an sdnn_status with the reason recorded
 * through SDNN_ERROR (CUDA, cuBLAS, cuDNN and NCCL codes are translated
 * with their own error strings).  Launches are asynchronous on the
 * context's compute stream unless a function says otherwise.
 */
#ifndef SDNN_CUDA_DEV_H
#define SDNN_CUDA_DEV_H

#include "scalednn.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "codec.h"
#include "costmodel.h"

/* ---- devices and contexts -------------------------------------------------- */

/* Number of CUDA devices; 0 (and SDNN_ERR_UNSUPPORTED "no CUDA device ...")
 * when the runtime finds none or no driver. */
sdnn_status sdnn_dev_count(int *n);
sdnn_status sdnn_dev_describe(int dev, char *buf, size_t len);

/* One (virtual) device: a physical device, a compute stream, a copy stream
 * for preloading, a comm stream for exchanges, cuBLAS and cuDNN handles
 * bound to the compute stream, and a grow-only workspace.  Several
 * contexts may share one physical device (virtual devices). */
typedef struct sdnn_dctx sdnn_dctx;

typedef struct sdnn_dctx_options {
    int device;
    int tf32;              /* allow TF32 tensor cores in cuDNN/cuBLAS (not exact) */
    int deterministic;     /* only deterministic cuDNN algorithms */
    size_t workspace_limit;/* bytes, cap for cuDNN algorithm workspaces */
} sdnn_dctx_options;

#define SDNN_DCTX_OPTIONS_INIT { 0, 0, 1, (size_t)512 << 20 }

sdnn_status sdnn_dctx_create(const sdnn_dctx_options *o, sdnn_dctx **out);
void sdnn_dctx_destroy(sdnn_dctx *c);
int sdnn_dctx_device(const sdnn_dctx *c);
const sdnn_dctx_options *sdnn_dctx_opts(const sdnn_dctx *c);
/* Make c's device current on the calling thread. */
sdnn_status sdnn_dctx_bind(sdnn_dctx *c);
/* Wait for the compute stream (and report a failed kernel). */
sdnn_status sdnn_dctx_sync(sdnn_dctx *c);
sdnn_status sdnn_dctx_sync_all(sdnn_dctx *c);   /* compute, copy and comm */
/* Wait for one stream of c (and report a failed operation on it). */
sdnn_status sdnn_dctx_sync_stream(sdnn_dctx *c, int stream);
/* A workspace of at least `bytes` on the compute stream's device.  Sized
 * between steps only (net.c asks once per network at its creation, for the
 * largest need of its layers): a growth allocates, which serialises the
 * device's streams, and never frees or waits: the outgrown buffer, which
 * queued work may still read, is freed by sdnn_dctx_destroy. */
sdnn_status sdnn_dctx_workspace(sdnn_dctx *c, size_t bytes, void **ws);
/* The workspace as it is now (no allocation). */
void sdnn_dctx_workspace_current(sdnn_dctx *c, void **ws, size_t *bytes);

/* Opaque stream/event handles for the exchange and the preload ring. */
enum sdnn_dstream { SDNN_STREAM_COMPUTE = 0, SDNN_STREAM_COPY, SDNN_STREAM_COMM };
typedef struct sdnn_devent sdnn_devent;
sdnn_status sdnn_devent_create(sdnn_dctx *c, int timing, sdnn_devent **e);
void sdnn_devent_destroy(sdnn_devent *e);
sdnn_status sdnn_devent_record(sdnn_devent *e, sdnn_dctx *c, int stream);
/* Make `stream` of c wait for e (no host wait). */
sdnn_status sdnn_devent_wait(sdnn_devent *e, sdnn_dctx *c, int stream);
sdnn_status sdnn_devent_sync(sdnn_devent *e);
/* 1 when complete, 0 when not yet. */
int sdnn_devent_done(sdnn_devent *e);
/* Milliseconds between two completed timing events. */
sdnn_status sdnn_devent_elapsed(sdnn_devent *from, sdnn_devent *to, float *ms);
/* The raw cudaStream_t of one of c's streams (for the .cu files). */
void *sdnn_dctx_stream(sdnn_dctx *c, int stream);

/* ---- memory ------------------------------------------------------------------ */

sdnn_status sdnn_dmalloc(sdnn_dctx *c, size_t bytes, void **p);   /* zeroed */
void sdnn_dfree(void *p);
sdnn_status sdnn_hmalloc_pinned(size_t bytes, void **p);
void sdnn_hfree_pinned(void *p);
/* Copies on `stream` of c; sync != 0 waits for that stream afterwards. */
sdnn_status sdnn_dcopy(sdnn_dctx *c, int stream, void *dst, const void *src, size_t bytes,
                       int sync);
/* bytes of device memory at p set to zero, on `stream` of c. */
sdnn_status sdnn_dzero(sdnn_dctx *c, int stream, void *p, size_t bytes);
/* Peer copy between devices (or within one). */
sdnn_status sdnn_dcopy_peer(sdnn_dctx *c, int stream, void *dst, int dst_dev, const void *src,
                            int src_dev, size_t bytes);

/* What a device has done since the process started: device memory in use
 * (the sum of live allocations) and its peak, and copies by kind (pinned
 * or pageable host memory, device to device, between devices).  Kept by
 * the simulated runtime (make GPU=sim); the CUDA runtime reports
 * SDNN_ERR_UNSUPPORTED. */
typedef struct sdnn_dev_stats {
    size_t mem_live, mem_peak;
    uint64_t allocs, frees, bad_frees;
    uint64_t h2d_pinned, h2d_pageable, d2h_pinned, d2h_pageable, d2d, peer;
    uint64_t h2d_pinned_bytes, h2d_pageable_bytes, d2h_pinned_bytes, d2h_pageable_bytes;
    uint64_t d2d_bytes, peer_bytes;
    uint64_t ops;           /* queued operations run (kernels, copies, event marks) */
    uint64_t jitter_us;     /* delays SDNN_SIM_JITTER added before them */
} sdnn_dev_stats;
sdnn_status sdnn_dev_stats_get(int dev, sdnn_dev_stats *s);

/* ---- element kernels (compute stream) ------------------------------------- */

sdnn_status sdnn_k_fill(sdnn_dctx *c, float *x, size_t n, float v);
sdnn_status sdnn_k_copy(sdnn_dctx *c, float *y, const float *x, size_t n);
sdnn_status sdnn_k_axpy(sdnn_dctx *c, size_t n, float a, const float *x, float *y);
sdnn_status sdnn_k_activate(sdnn_dctx *c, float *x, size_t n, int act);
sdnn_status sdnn_k_gradient(sdnn_dctx *c, const float *y, size_t n, int act, float *delta);
/* y = a - b and y = a + b, element-wise, on `stream` (for the exchange). */
sdnn_status sdnn_k_sub(sdnn_dctx *c, int stream, float *y, const float *a, const float *b,
                       size_t n);
sdnn_status sdnn_k_add(sdnn_dctx *c, int stream, float *y, const float *a, const float *b,
                       size_t n);
/* The deferred finite check (no host wait), on `stream`: y = a - b (b NULL:
 * y = a; y NULL: nothing written) and, for every element i whose result is
 * not finite, *first = min(*first, i).  first is one device value the
 * caller sets to ~0ull and reads after a sync. */
sdnn_status sdnn_k_sub_check(sdnn_dctx *c, int stream, float *y, const float *a, const float *b,
                             size_t n, unsigned long long *first);
/* Count of non-finite values in x into *bad (synchronous). */
sdnn_status sdnn_k_count_nonfinite(sdnn_dctx *c, int stream, const float *x, size_t n,
                                   size_t *bad);
/* out = mean of in[0..nin-1] with sdnn_mean_buffers' order of operations
 * (bit-identical to it), on `stream`; every pointer on c's device. */
sdnn_status sdnn_k_mean(sdnn_dctx *c, int stream, const float *const *in, int nin, float *out,
                        size_t n);
sdnn_status sdnn_k_scale(sdnn_dctx *c, int stream, float *x, size_t n, float s);

/* ---- layers -------------------------------------------------------------------- */

enum sdnn_dl_kind {
    SDNN_DL_CONV = 0,
    SDNN_DL_CONNECTED,
    SDNN_DL_MAXPOOL,
    SDNN_DL_AVGPOOL,
    SDNN_DL_ROUTE,
    SDNN_DL_SHORTCUT,
    SDNN_DL_UPSAMPLE,
    SDNN_DL_SOFTMAX,
    SDNN_DL_COST,
    SDNN_DL_DROPOUT,
    SDNN_DL_YOLO,        /* loss on the host (net.c), backward on the device */
    SDNN_DL_REGION,
    SDNN_DL_KIND_COUNT
};

#define SDNN_DL_MAX_ROUTE 8

/* One layer's device mirror: geometry copied from Darknet's layer, device
 * buffers owned by the engine (except dropout's, which alias the previous
 * layer's output and delta as in Darknet). */
typedef struct sdnn_dlayer {
    int kind;
    int index;              /* position in the network */
    int act;                /* enum sdnn_act */
    int bn;                 /* batch normalisation (conv, connected) */
    int bn_exact;           /* fix_bn_delta=1: its backward exact (ops.h) */
    int batch, inputs, outputs;
    int w, h, c, out_w, out_h, out_c;
    int n, size, stride, pad, groups;
    int nweights;
    int stopbackward;
    float lr_scale;
    /* per kind */
    float alpha, beta;      /* shortcut: out = alpha*out + beta*from */
    float scale;            /* upsample scale, cost scale, dropout 1/(1-p) */
    float probability;      /* dropout */
    float temperature;      /* softmax */
    int softmax_groups;
    int noloss;
    int cost_type;          /* enum sdnn_cost */
    int from;               /* shortcut source layer */
    int nroute;
    int route_from[SDNN_DL_MAX_ROUTE], route_size[SDNN_DL_MAX_ROUTE];
    /* per image, where input j's run of route_size[j] floats starts in its
     * source's output (0 for Darknet's route; the fork's grouped route:
     * group_id x the slice), the source's pitch its outputs */
    int route_off[SDNN_DL_MAX_ROUTE];
    int coords, classes, anchors, background;   /* region */
    uint64_t seed;          /* dropout: counter-based generator */
    uint64_t draws;         /* dropout: forward passes so far */
    /* device buffers */
    float *output, *delta;
    float *weights, *weight_updates, *biases, *bias_updates, *scales, *scale_updates;
    float *rolling_mean, *rolling_variance;
    float *mean, *variance, *mean_delta, *variance_delta, *x, *x_norm;
    float *act_x;           /* mish/swish: the activation's input (sdnn_dl_activate) */
    int *indexes;           /* maxpool argmax */
    float *rand;            /* dropout draws */
    float *loss;            /* softmax/cost per-element loss */
    float cost;             /* host: this layer's cost after forward */
    int has_cost;
    size_t workspace;       /* bytes of workspace the layer needs */
    void *impl;             /* cuDNN descriptors and algorithms */
} sdnn_dlayer;

/* What a layer sees of the network during a pass. */
typedef struct sdnn_dstate {
    const float *input;     /* device: previous layer's output (or the net input) */
    float *delta;           /* device: previous layer's delta, NULL for layer 0 */
    const float *truth;     /* device truth, or NULL */
    int train;
    sdnn_dlayer *layers;    /* the whole network (route, shortcut) */
    void *workspace;
    size_t workspace_bytes;
} sdnn_dstate;

typedef struct sdnn_dupdate {
    int batch;              /* batch x subdivisions */
    float learning_rate, momentum, decay;
} sdnn_dupdate;

/* Allocate the layer's device buffers (not the parameters: the caller
 * places those in its arenas first) and descriptors; computes workspace. */
sdnn_status sdnn_dl_setup(sdnn_dctx *c, sdnn_dlayer *l);
void sdnn_dl_release(sdnn_dlayer *l);
sdnn_status sdnn_dl_forward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s);
sdnn_status sdnn_dl_backward(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dstate *s);
sdnn_status sdnn_dl_update(sdnn_dctx *c, sdnn_dlayer *l, const sdnn_dupdate *a);
const char *sdnn_dl_kind_name(int kind);

/* Floats in each parameter tensor of l (0 where it has none). */
size_t sdnn_dl_nweights(const sdnn_dlayer *l);
size_t sdnn_dl_nbiases(const sdnn_dlayer *l);
size_t sdnn_dl_nscales(const sdnn_dlayer *l);

/* ---- codecs on the device ------------------------------------------------------ */

/* The device codecs write the host codecs' bytes (codec.h): the same
 * format, the same rounding, the same stochastic-rounding generator, the
 * same top-k cut, so a buffer encoded on a device decodes on the host and
 * back, bit for bit.  Ids follow the host registry. */
enum sdnn_dcodec { SDNN_DCODEC_NONE = 0, SDNN_DCODEC_FP16, SDNN_DCODEC_BF16, SDNN_DCODEC_INT8,
                   SDNN_DCODEC_TOPK, SDNN_DCODEC_COUNT };

/* The device codec of a host codec table, or -1. */
int sdnn_dcodec_of(const sdnn_codec_ops *c);
const sdnn_codec_ops *sdnn_dcodec_host(int codec);
/* Bytes of an encoding of n floats (the host codec's encoded_size). */
size_t sdnn_dcodec_size(int codec, const sdnn_codec_params *p, size_t n);
/* Device scratch the encoder needs for n floats (top-k selection state). */
size_t sdnn_dcodec_scratch_bytes(int codec, const sdnn_codec_params *p, size_t n);
/* All on `stream` of c with buffers on c's device, no host waits.
 * rstream: the stochastic-rounding stream, as the host codec's `stream`. */
sdnn_status sdnn_dcodec_encode(sdnn_dctx *c, int stream, int codec, const sdnn_codec_params *p,
                               const float *x, size_t n, void *out, uint64_t rstream,
                               void *scratch);
sdnn_status sdnn_dcodec_decode(sdnn_dctx *c, int stream, int codec, const sdnn_codec_params *p,
                               const void *in, size_t n, float *y);
/* y = decoded + add (y may alias add). */
sdnn_status sdnn_dcodec_decode_add(sdnn_dctx *c, int stream, int codec,
                                   const sdnn_codec_params *p, const void *in, size_t n,
                                   const float *add, float *y);
/* y += decoded (sparse: only the k entries). */
sdnn_status sdnn_dcodec_accumulate(sdnn_dctx *c, int stream, int codec,
                                   const sdnn_codec_params *p, const void *in, size_t n,
                                   float *y);
/* sdnn_codec_ef_step on the device (velocity may be NULL); enc holds
 * sdnn_dcodec_size bytes, scratch sdnn_dcodec_scratch_bytes. */
sdnn_status sdnn_dcodec_ef_step(sdnn_dctx *c, int stream, int codec, const sdnn_codec_params *p,
                                float *g, float *residual, float *velocity, float momentum,
                                size_t n, void *enc, void *scratch, uint64_t rstream);

/* ---- NCCL ---------------------------------------------------------------------------- */

/* NCCL's calls as the ring and the device backends use them, so that the
 * code above stays host C shared by both builds: nccl.cu wraps NCCL (or
 * refuses with SDNN_ERR_UNSUPPORTED in an NCCL=0 build), sim/nccl.c is an
 * in-process stand-in with NCCL's group semantics.  A handle is one rank's
 * communicator on one device.  Every error is SDNN_ERR_COMM with NCCL's
 * message (or SDNN_ERR_INVALID for a bad argument). */
typedef struct sdnn_dnccl sdnn_dnccl;
#ifndef SDNN_NCCL_ID_BYTES
#define SDNN_NCCL_ID_BYTES 128
#endif
sdnn_status sdnn_dnccl_unique_id(unsigned char id[SDNN_NCCL_ID_BYTES]);
/* One rank per context, all in this process (ncclCommInitAll). */
sdnn_status sdnn_dnccl_init_all(sdnn_dctx *const *ctxs, int n, sdnn_dnccl **comms);
/* This process's ranks first_rank .. first_rank + n - 1 of a world of
 * nranks, joined through id (ncclCommInitRank for each, in one group),
 * across processes.  The communicators are non-blocking (NCCL's config
 * blocking=0): init waits at most timeout_s for every rank to join, and
 * aborts them on expiry; later waits are the caller's (sdnn_dring_sync
 * polls sdnn_dnccl_async_error against its deadline).  The simulated
 * build joins processes through shared memory named after the id. */
sdnn_status sdnn_dnccl_init_ranks(const unsigned char id[SDNN_NCCL_ID_BYTES], int nranks,
                                  int first_rank, sdnn_dctx *const *ctxs, int n,
                                  double timeout_s, sdnn_dnccl **comms);
/* After the work queued on it completed (ncclCommDestroy: waits for it). */
void sdnn_dnccl_destroy(sdnn_dnccl *c);
/* At once, cancelling what is queued or in flight (ncclCommAbort): the
 * way out after a failure or a timeout.  The handle stays valid for
 * sdnn_dnccl_destroy (which then only frees it); other calls fail. */
void sdnn_dnccl_abort(sdnn_dnccl *c);
/* sdnn_dnccl_abort, with the reason (the simulated NCCL adds it to the
 * message of every operation it cancels, so that a stream's sticky error
 * says why; real NCCL keeps none). */
void sdnn_dnccl_abort_because(sdnn_dnccl *c, const char *why);
/* SDNN_OK, or the asynchronous error the communicator has seen
 * (ncclCommGetAsyncError), or SDNN_ERR_ABORTED after an abort. */
sdnn_status sdnn_dnccl_async_error(sdnn_dnccl *c);
sdnn_status sdnn_dnccl_group_start(void);
sdnn_status sdnn_dnccl_group_end(void);
/* Queued on `stream` of ctx (the communicator's device); inside a group
 * the operations may complete in any order. */
sdnn_status sdnn_dnccl_send(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, const void *buf,
                            size_t bytes, int peer);
sdnn_status sdnn_dnccl_recv(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, void *buf, size_t bytes,
                            int peer);
sdnn_status sdnn_dnccl_allreduce_sum(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, const float *in,
                                     float *out, size_t n);
sdnn_status sdnn_dnccl_broadcast(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, float *buf, size_t n,
                                 int root);
/* The element types of sdnn_dnccl_allreduce_sum_typed: NCCL's ncclFloat,
 * ncclHalf (IEEE binary16) and ncclBfloat16, each element 4, 2, 2 bytes in
 * the fp16 / bf16 codecs' encoding. */
typedef enum sdnn_dnccl_type {
    SDNN_DNCCL_FLOAT = 0,
    SDNN_DNCCL_HALF = 1,
    SDNN_DNCCL_BF16 = 2,
} sdnn_dnccl_type;
/* Bytes of one element of type t. */
size_t sdnn_dnccl_type_bytes(sdnn_dnccl_type t);
/* ncclAllReduce(ncclSum) of n elements of type t, summed in that type: the
 * partial sums of NCCL's ring are rounded to t at every step (the
 * simulated NCCL does exactly that: sim/nccl.c states its order). */
sdnn_status sdnn_dnccl_allreduce_sum_typed(sdnn_dnccl *c, sdnn_dctx *ctx, int stream,
                                           const void *in, void *out, size_t n,
                                           sdnn_dnccl_type t);

/* ---- collectives on devices ------------------------------------------------------ */

/* The compressed allreduce-mean of collective.h (the same chunks, hops,
 * streams and arithmetic, hence bit-identical results to the host ring),
 * played by every local rank in lockstep; and the plain mean.  Ranks are
 * either virtual devices of one physical device (transport: device copies
 * on one stream) or NCCL ranks (one device each; ncclSend/ncclRecv). */
typedef struct sdnn_dring sdnn_dring;

/* nlocal ranks on ctxs[r] (their comm streams are used); for NCCL,
 * ncomms[r] is local rank r's communicator (not owned), world the NCCL
 * world size and first_rank the global rank of local rank 0.  ncomms ==
 * NULL: the device transport (world = nlocal, every ctx on one physical
 * device). */
sdnn_status sdnn_dring_create(sdnn_dctx *const *ctxs, int nlocal, sdnn_dnccl *const *ncomms,
                              int world, int first_rank, sdnn_dring **out);
/* NCCL over one process's devices (ncclCommInitAll); the ring owns the
 * communicators.  NCCL refuses two ranks on one device. */
sdnn_status sdnn_dring_create_nccl_local(sdnn_dctx *const *ctxs, int n, sdnn_dring **out);
/* The ring over this process's n devices as NCCL ranks first_rank ..
 * first_rank + n - 1 of a world of `world` ranks across processes, joined
 * through id (sdnn_dnccl_init_ranks, at most timeout_s); it owns the
 * communicators and its deadline is timeout_s. */
sdnn_status sdnn_dring_create_nccl_world(const unsigned char id[SDNN_NCCL_ID_BYTES], int world,
                                         int first_rank, sdnn_dctx *const *ctxs, int n,
                                         double timeout_s, sdnn_dring **out);
void sdnn_dring_destroy(sdnn_dring *r);
/* out[r] = decoded mean over every rank of in[]; out[r] may alias in[r].
 * Queued on the ranks' comm streams; *wire += bytes the local ranks sent. */
sdnn_status sdnn_dring_coded(sdnn_dring *r, const sdnn_codec_ops *codec,
                             const sdnn_codec_params *p, uint64_t stream, const float *const *in,
                             float *const *out, size_t n, size_t *wire);
/* The same mean by another collective (costmodel.h's sdnn_cm_coll):
 *   SDNN_CM_CODED_RING  sdnn_dring_coded's ring (dense codecs);
 *   SDNN_CM_NATIVE      fp16 / bf16 over NCCL only: encode once, NCCL's
 *                       half / bfloat16 allreduce (sum), decode, x 1/W;
 *   SDNN_CM_ALLGATHER   every rank's encoded bucket to every rank, the W
 *                       lists accumulated in rank order, x 1/W (the only
 *                       way of a sparse codec; int8 too).
 * SDNN_ERR_UNSUPPORTED where sdnn_dring_offers says 0.  Every rank gets
 * the same bits. */
sdnn_status sdnn_dring_exchange(sdnn_dring *r, sdnn_cm_coll path, const sdnn_codec_ops *codec,
                                const sdnn_codec_params *p, uint64_t stream,
                                const float *const *in, float *const *out, size_t n,
                                size_t *wire);
int sdnn_dring_offers(const sdnn_dring *r, const sdnn_codec_ops *codec, sdnn_cm_coll path);
/* out[r] = mean of in[] (device transport: sdnn_mean_buffers' order, bit
 * for bit; NCCL: ncclAllReduce sum, then x 1/world). */
sdnn_status sdnn_dring_mean(sdnn_dring *r, const float *const *in, float *const *out, size_t n,
                            size_t *wire);
/* Wait for every local rank's comm stream.  Over NCCL the wait is bounded:
 * a rank whose exchange makes no progress for the ring's timeout (an
 * unmatched send or receive: a peer that never answers) fails with
 * SDNN_ERR_COMM naming the rank and its peers, and every communicator of
 * the ring is aborted, as after any failed NCCL call; later calls on an
 * aborted ring fail with SDNN_ERR_ABORTED. */
sdnn_status sdnn_dring_sync(sdnn_dring *r);
/* The bound of sdnn_dring_sync (seconds, default SDNN_COMM_TIMEOUT_S or
 * SDNN_NCCL_TIMEOUT_S from the environment). */
void sdnn_dring_set_timeout(sdnn_dring *r, double seconds);
/* 1 once the ring failed and aborted its communicators. */
int sdnn_dring_failed(const sdnn_dring *r);

#ifdef __cplusplus
}
#endif
#endif
