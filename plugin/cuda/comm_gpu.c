/*
 * comm_gpu: the two comm backends on devices, behind comm.h's table.
 *
 *   nccl    buffers are device pointers, in[r] on the r-th local device.
 *           One process drives all its devices (ncclCommInitAll) or joins
 *           a world of several processes with an NCCL id shared out of band
 *           (sdnn_gpu_nccl_id + sdnn_gpu_comm_open_nccl; MPI carries the id,
 *           NCCL the data).  The plain mean is ncclAllReduce then x 1/W;
 *           the coded mean is the device ring (ring.cu) over ncclSend/Recv.
 *   device  replicas that share one physical device (virtual devices): the
 *           buffers are device pointers on it, the plain mean is the
 *           reference kernel (bit-identical to "local"), the coded mean the
 *           device ring over device copies.
 *
 * Calls return when the result is in place (they wait for the comm
 * streams, over NCCL within the comm's timeout_s), as the host backends
 * do; the device trainer (group.c) uses the ring directly and waits on
 * events instead.  Host C over dev.h, shared by the CUDA and the simulated
 * builds.  A failed NCCL call aborts the communicators (the ring's
 * state), and closing such a comm never waits on them.
 */
#include "dev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_comm.h"

#define GPU_COMM_MAX 16

typedef struct gpu_comm {
    int nccl;
    int ndev;
    sdnn_dctx *ctx[GPU_COMM_MAX];
    sdnn_dnccl *comm[GPU_COMM_MAX];
    int world, first;
    sdnn_dring *ring;           /* nccl: all local devices; device: ring of `ring_n` */
    int ring_n;
    float *scratch[GPU_COMM_MAX];   /* nccl plain mean: outputs of devices 1.. */
    size_t scratch_n;
} gpu_comm;

static void gpu_comm_free(gpu_comm *g)
{
    if (!g) return;
    int failed = g->ring && sdnn_dring_failed(g->ring);
    sdnn_dring_destroy(g->ring);
    for (int i = 0; i < GPU_COMM_MAX; ++i) {
        if (g->scratch[i]) sdnn_dfree(g->scratch[i]);
        if (g->comm[i]) {
            if (failed) sdnn_dnccl_abort(g->comm[i]);
            sdnn_dnccl_destroy(g->comm[i]);
        }
        sdnn_dctx_destroy(g->ctx[i]);
    }
    free(g);
}

static sdnn_status open_ctxs(gpu_comm *g, const int *devs, int ndev)
{
    if (ndev < 1 || ndev > GPU_COMM_MAX)
        return SDNN_ERROR(SDNN_ERR_INVALID, "comm: %d local devices (1..%d)", ndev, GPU_COMM_MAX);
    g->ndev = ndev;
    for (int i = 0; i < ndev; ++i) {
        sdnn_dctx_options o = SDNN_DCTX_OPTIONS_INIT;
        o.device = devs[i];
        SDNN_CHECK(sdnn_dctx_create(&o, &g->ctx[i]));
    }
    return SDNN_OK;
}

/* ---- opening ------------------------------------------------------------------ */

static int parse_devices(const char *s, int *devs, int max)
{
    int n = 0;
    while (s && *s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0) return -1;
        devs[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

sdnn_status sdnn_gpu_nccl_id(unsigned char id[SDNN_NCCL_ID_BYTES])
{
    int n;
    SDNN_CHECK(sdnn_dev_count(&n));
    return sdnn_dnccl_unique_id(id);
}

static sdnn_status wrap(gpu_comm *g, const sdnn_comm_ops *ops, int rank, int size, sdnn_comm **out)
{
    sdnn_comm *c = (sdnn_comm *)calloc(1, sizeof *c);
    if (!c) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a comm");
    c->ops = ops;
    c->rank = rank;
    c->size = size;
    c->impl = g;
    *out = c;
    return SDNN_OK;
}

static sdnn_status nccl_local_init(gpu_comm *g, const int *devs, int ndev)
{
    SDNN_CHECK(open_ctxs(g, devs, ndev));
    g->nccl = 1;
    g->world = ndev;
    g->first = 0;
    SDNN_CHECK(sdnn_dnccl_init_all(g->ctx, ndev, g->comm));
    return sdnn_dring_create(g->ctx, ndev, g->comm, ndev, 0, &g->ring);
}

sdnn_status sdnn_gpu_comm_open_nccl_local(const int *devs, int ndev, sdnn_comm **out)
{
    *out = NULL;
    gpu_comm *g = (gpu_comm *)calloc(1, sizeof *g);
    if (!g) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a comm");
    sdnn_status st = nccl_local_init(g, devs, ndev);
    if (st == SDNN_OK) st = wrap(g, &sdnn_comm_nccl_ops, 0, 1, out);
    if (st != SDNN_OK) gpu_comm_free(g);
    return st;
}

sdnn_status sdnn_gpu_comm_open_nccl(const unsigned char id[SDNN_NCCL_ID_BYTES], int nranks,
                                    int first_rank, const int *devs, int ndev, sdnn_comm **out)
{
    *out = NULL;
    if (ndev < 1 || first_rank < 0 || first_rank + ndev > nranks)
        return SDNN_ERROR(SDNN_ERR_INVALID, "nccl: ranks %d..%d outside a world of %d",
                          first_rank, first_rank + ndev - 1, nranks);
    gpu_comm *g = calloc(1, sizeof *g);
    if (!g) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a comm");
    sdnn_status st = open_ctxs(g, devs, ndev);
    g->nccl = 1;
    g->world = nranks;
    g->first = first_rank;
    if (st == SDNN_OK) st = sdnn_dnccl_init_ranks(id, nranks, first_rank, g->ctx, ndev,
                                                SDNN_COMM_TIMEOUT_S, g->comm);
    if (st == SDNN_OK) st = sdnn_dring_create(g->ctx, ndev, g->comm, nranks, first_rank, &g->ring);
    /* comm.h counts processes: this one is the (first_rank/ndev)-th of
     * nranks/ndev when every process drives ndev devices. */
    if (st == SDNN_OK) st = wrap(g, &sdnn_comm_nccl_ops, first_rank / ndev, nranks / ndev, out);
    if (st != SDNN_OK) gpu_comm_free(g);
    return st;
}

sdnn_status sdnn_gpu_comm_open_device(int device, sdnn_comm **out)
{
    *out = NULL;
    gpu_comm *g = (gpu_comm *)calloc(1, sizeof *g);
    if (!g) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a comm");
    sdnn_status st = open_ctxs(g, &device, 1);
    g->world = 1;
    if (st == SDNN_OK) st = wrap(g, &sdnn_comm_device_ops, 0, 1, out);
    if (st != SDNN_OK) gpu_comm_free(g);
    return st;
}

/* ---- the registry's entry points ---------------------------------------------- */

int sdnn_gpucomm_available(void)
{
    int n = 0;
    return sdnn_dev_count(&n) == SDNN_OK && n > 0;
}

int sdnn_gpucomm_nccl_available(void) { return SDNN_NCCL && sdnn_gpucomm_available(); }

sdnn_status sdnn_gpucomm_nccl_init(sdnn_comm *c)
{
    int n;
    SDNN_CHECK(sdnn_dev_count(&n));
    int devs[GPU_COMM_MAX], nd = 0;
    const char *env = getenv("SDNN_NCCL_DEVICES");
    if (env && *env) {
        nd = parse_devices(env, devs, GPU_COMM_MAX);
        if (nd < 1)
            return SDNN_ERROR(SDNN_ERR_INVALID, "SDNN_NCCL_DEVICES=%s: expected 0,1,... ", env);
    } else {
        for (nd = 0; nd < n && nd < GPU_COMM_MAX; ++nd) devs[nd] = nd;
    }
    gpu_comm *g = (gpu_comm *)calloc(1, sizeof *g);
    if (!g) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a comm");
    sdnn_status st = nccl_local_init(g, devs, nd);
    if (st != SDNN_OK) {
        gpu_comm_free(g);
        return st;
    }
    c->impl = g;
    return SDNN_OK;
}

sdnn_status sdnn_gpucomm_device_init(sdnn_comm *c)
{
    const char *env = getenv("SDNN_GPU_DEVICE");
    int dev = env && *env ? atoi(env) : 0;
    gpu_comm *g = (gpu_comm *)calloc(1, sizeof *g);
    if (!g) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a comm");
    sdnn_status st = open_ctxs(g, &dev, 1);
    g->world = 1;
    if (st != SDNN_OK) {
        gpu_comm_free(g);
        return st;
    }
    c->impl = g;
    return SDNN_OK;
}

void sdnn_gpucomm_destroy(sdnn_comm *c)
{
    gpu_comm_free((gpu_comm *)c->impl);
    c->impl = NULL;
}

/* The device ring for `nin` virtual ranks (all on the one device). */
static sdnn_status device_ring(gpu_comm *g, int nin)
{
    if (g->ring && g->ring_n == nin) return SDNN_OK;
    sdnn_dring_destroy(g->ring);
    g->ring = NULL;
    if (nin > GPU_COMM_MAX) return SDNN_ERROR(SDNN_ERR_INVALID, "device comm: %d buffers", nin);
    sdnn_dctx *ctxs[GPU_COMM_MAX];
    for (int i = 0; i < nin; ++i) ctxs[i] = g->ctx[0];
    SDNN_CHECK(sdnn_dring_create(ctxs, nin, NULL, nin, 0, &g->ring));
    g->ring_n = nin;
    return SDNN_OK;
}

static sdnn_status check_nin(gpu_comm *g, int nin)
{
    if (g->nccl && nin != g->ndev)
        return SDNN_ERROR(SDNN_ERR_INVALID, "nccl: %d buffers for %d local devices", nin, g->ndev);
    return SDNN_OK;
}

sdnn_status sdnn_gpucomm_allreduce_mean(sdnn_comm *c, const float *const *in, int nin, float *out,
                                      size_t n)
{
    gpu_comm *g = (gpu_comm *)c->impl;
    SDNN_CHECK(check_nin(g, nin));
    float *outs[GPU_COMM_MAX];
    if (!g->nccl) {
        SDNN_CHECK(device_ring(g, nin));
        for (int i = 0; i < nin; ++i) outs[i] = out;
    } else {
        if (n > g->scratch_n) {
            for (int i = 1; i < g->ndev; ++i) {
                if (g->scratch[i]) sdnn_dfree(g->scratch[i]);
                g->scratch[i] = NULL;
                SDNN_CHECK(sdnn_dmalloc(g->ctx[i], n * sizeof(float), (void **)&g->scratch[i]));
            }
            g->scratch_n = n;
        }
        outs[0] = out;
        for (int i = 1; i < nin; ++i) outs[i] = g->scratch[i];
    }
    sdnn_dring_set_timeout(g->ring, c->timeout_s);
    SDNN_CHECK(sdnn_dring_mean(g->ring, in, outs, n, NULL));
    return sdnn_dring_sync(g->ring);
}

sdnn_status sdnn_gpucomm_allreduce_mean_coded(sdnn_comm *c, const sdnn_codec_ops *codec,
                                            const sdnn_codec_params *p, uint64_t stream,
                                            const float *const *in, int nin, float *const *out,
                                            size_t n, size_t *wire)
{
    gpu_comm *g = (gpu_comm *)c->impl;
    SDNN_CHECK(check_nin(g, nin));
    if (!g->nccl) SDNN_CHECK(device_ring(g, nin));
    size_t sent = 0;
    sdnn_dring_set_timeout(g->ring, c->timeout_s);
    SDNN_CHECK(sdnn_dring_coded(g->ring, codec, p, stream, in, out, n, &sent));
    if (wire) *wire = sent;
    return sdnn_dring_sync(g->ring);
}

sdnn_status sdnn_gpucomm_broadcast(sdnn_comm *c, float *buf, size_t n)
{
    gpu_comm *g = (gpu_comm *)c->impl;
    if (!g->nccl || c->size == 1) return SDNN_OK;   /* one process: nothing to move */
    if (g->ndev != 1)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                          "nccl broadcast: one buffer per process needs one device per process");
    SDNN_CHECK(sdnn_dctx_bind(g->ctx[0]));
    SDNN_CHECK(sdnn_dnccl_broadcast(g->comm[0], g->ctx[0], SDNN_STREAM_COMM, buf, n, 0));
    /* The ring's bounded wait (timeout_s, aborting on expiry) over the
     * same communicators and comm streams. */
    sdnn_dring_set_timeout(g->ring, c->timeout_s);
    return sdnn_dring_sync(g->ring);
}

sdnn_status sdnn_gpucomm_barrier(sdnn_comm *c)
{
    gpu_comm *g = (gpu_comm *)c->impl;
    if (!g->nccl || g->world == 1) return SDNN_OK;
    float *tmp[GPU_COMM_MAX] = {0};
    sdnn_status st = SDNN_OK;
    for (int i = 0; i < g->ndev && st == SDNN_OK; ++i)
        st = sdnn_dmalloc(g->ctx[i], sizeof(float), (void **)&tmp[i]);
    if (st == SDNN_OK) {
        st = sdnn_dnccl_group_start();
        for (int i = 0; i < g->ndev && st == SDNN_OK; ++i)
            st = sdnn_dnccl_allreduce_sum(g->comm[i], g->ctx[i], SDNN_STREAM_COMM, tmp[i], tmp[i],
                                          1);
        sdnn_status e2 = sdnn_dnccl_group_end();
        if (st == SDNN_OK) st = e2;
        /* Part of the group may be queued: cancel it rather than wait on it. */
        if (st != SDNN_OK)
            for (int i = 0; i < g->ndev; ++i) sdnn_dnccl_abort(g->comm[i]);
        if (st == SDNN_OK) {
            sdnn_dring_set_timeout(g->ring, c->timeout_s);
            st = sdnn_dring_sync(g->ring);
        }
    }
    for (int i = 0; i < g->ndev; ++i) sdnn_dfree(tmp[i]);
    return st;
}
