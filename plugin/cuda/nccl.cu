/*
 * nccl: NCCL behind dev.h's sdnn_dnccl_* calls, so that the ring
 * (ring.c) and the device backends (comm_gpu.c) are host C shared with
 * the simulated build (sim/nccl.c is its stand-in).  A handle wraps one
 * ncclComm_t; after sdnn_dnccl_abort the communicator is gone
 * (ncclCommAbort) and the handle only waits for sdnn_dnccl_destroy.  In an
 * NCCL=0 build every call is SDNN_ERR_UNSUPPORTED.
 */
#include "cuda_util.cuh"

#include <stdlib.h>
#include <string.h>
#if SDNN_NCCL
#include <nccl.h>
#endif

struct sdnn_dnccl {
#if SDNN_NCCL
    ncclComm_t comm;
#endif
    int device;
    int dead;       /* aborted */
};

#if SDNN_NCCL
static sdnn_status nccl_fail(ncclResult_t e, const char *what)
{
    return SDNN_ERROR(SDNN_ERR_COMM, "%s: %s (%s)", what, ncclGetErrorString(e),
                      ncclGetLastError(NULL));
}

#define SDNN_NC(call, what)                                                    \
    do {                                                                       \
        ncclResult_t sdnn_e_ = (call);                                         \
        if (sdnn_e_ != ncclSuccess) return nccl_fail(sdnn_e_, (what));         \
    } while (0)

static sdnn_status alive(sdnn_dnccl *c, const char *what)
{
    if (!c) return SDNN_ERROR(SDNN_ERR_INVALID, "%s: no communicator", what);
    if (c->dead) return SDNN_ERROR(SDNN_ERR_ABORTED, "%s: the communicator was aborted", what);
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dnccl_unique_id(unsigned char id[SDNN_NCCL_ID_BYTES])
{
    ncclUniqueId u;
    SDNN_NC(ncclGetUniqueId(&u), "ncclGetUniqueId");
    static_assert(sizeof u.internal == SDNN_NCCL_ID_BYTES, "NCCL id size");
    memcpy(id, u.internal, SDNN_NCCL_ID_BYTES);
    return SDNN_OK;
}

static sdnn_status wrap_all(ncclComm_t *raw, sdnn_dctx *const *ctxs, int n, sdnn_dnccl **comms)
{
    for (int i = 0; i < n; ++i) {
        comms[i] = (sdnn_dnccl *)calloc(1, sizeof **comms);
        if (!comms[i]) {
            for (int j = 0; j < n; ++j) {
                if (j < i) free(comms[j]);
                comms[j] = NULL;
                ncclCommDestroy(raw[j]);
            }
            return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for NCCL handles");
        }
        comms[i]->comm = raw[i];
        comms[i]->device = ctxs[i]->o.device;
    }
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dnccl_init_all(sdnn_dctx *const *ctxs, int n, sdnn_dnccl **comms)
{
    enum { MAXDEV = 64 };
    for (int i = 0; i < n; ++i) comms[i] = NULL;
    if (n < 1 || n > MAXDEV)
        return SDNN_ERROR(SDNN_ERR_INVALID, "nccl: %d local devices (1..%d)", n, (int)MAXDEV);
    int devs[MAXDEV];
    ncclComm_t raw[MAXDEV];
    for (int i = 0; i < n; ++i) devs[i] = ctxs[i]->o.device;
    ncclResult_t e = ncclCommInitAll(raw, n, devs);
    if (e != ncclSuccess) return nccl_fail(e, "ncclCommInitAll");
    return wrap_all(raw, ctxs, n, comms);
}

extern "C" sdnn_status sdnn_dnccl_init_ranks(const unsigned char id[SDNN_NCCL_ID_BYTES],
                                             int nranks, int first_rank, sdnn_dctx *const *ctxs,
                                             int n, sdnn_dnccl **comms)
{
    enum { MAXDEV = 64 };
    for (int i = 0; i < n; ++i) comms[i] = NULL;
    if (n < 1 || n > MAXDEV)
        return SDNN_ERROR(SDNN_ERR_INVALID, "nccl: %d local devices (1..%d)", n, (int)MAXDEV);
    ncclUniqueId u;
    memcpy(u.internal, id, SDNN_NCCL_ID_BYTES);
    ncclComm_t raw[MAXDEV] = {};
    ncclResult_t e = ncclGroupStart();
    for (int i = 0; i < n && e == ncclSuccess; ++i) {
        cudaSetDevice(ctxs[i]->o.device);
        e = ncclCommInitRank(&raw[i], nranks, u, first_rank + i);
    }
    ncclResult_t e2 = ncclGroupEnd();
    if (e == ncclSuccess) e = e2;
    if (e != ncclSuccess) {
        for (int i = 0; i < n; ++i)
            if (raw[i]) ncclCommAbort(raw[i]);
        return nccl_fail(e, "ncclCommInitRank");
    }
    return wrap_all(raw, ctxs, n, comms);
}

extern "C" void sdnn_dnccl_abort(sdnn_dnccl *c)
{
    if (!c || c->dead) return;
    cudaSetDevice(c->device);
    ncclCommAbort(c->comm);
    c->dead = 1;
}

extern "C" void sdnn_dnccl_destroy(sdnn_dnccl *c)
{
    if (!c) return;
    if (!c->dead) {
        cudaSetDevice(c->device);
        ncclCommDestroy(c->comm);
    }
    free(c);
}

extern "C" sdnn_status sdnn_dnccl_async_error(sdnn_dnccl *c)
{
    SDNN_CHECK(alive(c, "ncclCommGetAsyncError"));
    ncclResult_t a = ncclSuccess;
    SDNN_NC(ncclCommGetAsyncError(c->comm, &a), "ncclCommGetAsyncError");
    if (a != ncclSuccess && a != ncclInProgress) return nccl_fail(a, "NCCL (asynchronous)");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dnccl_group_start(void)
{
    SDNN_NC(ncclGroupStart(), "ncclGroupStart");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dnccl_group_end(void)
{
    SDNN_NC(ncclGroupEnd(), "ncclGroupEnd");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dnccl_send(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, const void *buf,
                                       size_t bytes, int peer)
{
    SDNN_CHECK(alive(c, "ncclSend"));
    SDNN_NC(ncclSend(buf, bytes, ncclUint8, peer, c->comm, ctx->s[stream]), "ncclSend");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dnccl_recv(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, void *buf,
                                       size_t bytes, int peer)
{
    SDNN_CHECK(alive(c, "ncclRecv"));
    SDNN_NC(ncclRecv(buf, bytes, ncclUint8, peer, c->comm, ctx->s[stream]), "ncclRecv");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dnccl_allreduce_sum(sdnn_dnccl *c, sdnn_dctx *ctx, int stream,
                                                const float *in, float *out, size_t n)
{
    SDNN_CHECK(alive(c, "ncclAllReduce"));
    SDNN_NC(ncclAllReduce(in, out, n, ncclFloat, ncclSum, c->comm, ctx->s[stream]),
            "ncclAllReduce");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dnccl_broadcast(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, float *buf,
                                            size_t n, int root)
{
    SDNN_CHECK(alive(c, "ncclBroadcast"));
    SDNN_NC(ncclBroadcast(buf, buf, n, ncclFloat, root, c->comm, ctx->s[stream]),
            "ncclBroadcast");
    return SDNN_OK;
}

#else /* !SDNN_NCCL */

static sdnn_status no_nccl(void)
{
    return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "NCCL is not in this build (NCCL=0)");
}

extern "C" sdnn_status sdnn_dnccl_unique_id(unsigned char id[SDNN_NCCL_ID_BYTES])
{
    (void)id;
    return no_nccl();
}
extern "C" sdnn_status sdnn_dnccl_init_all(sdnn_dctx *const *ctxs, int n, sdnn_dnccl **comms)
{
    (void)ctxs;
    for (int i = 0; i < n; ++i) comms[i] = NULL;
    return no_nccl();
}
extern "C" sdnn_status sdnn_dnccl_init_ranks(const unsigned char id[SDNN_NCCL_ID_BYTES],
                                             int nranks, int first_rank, sdnn_dctx *const *ctxs,
                                             int n, sdnn_dnccl **comms)
{
    (void)id; (void)nranks; (void)first_rank; (void)ctxs;
    for (int i = 0; i < n; ++i) comms[i] = NULL;
    return no_nccl();
}
extern "C" void sdnn_dnccl_abort(sdnn_dnccl *c) { (void)c; }
extern "C" void sdnn_dnccl_destroy(sdnn_dnccl *c) { free(c); }
extern "C" sdnn_status sdnn_dnccl_async_error(sdnn_dnccl *c) { (void)c; return no_nccl(); }
extern "C" sdnn_status sdnn_dnccl_group_start(void) { return no_nccl(); }
extern "C" sdnn_status sdnn_dnccl_group_end(void) { return no_nccl(); }
extern "C" sdnn_status sdnn_dnccl_send(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, const void *buf,
                                       size_t bytes, int peer)
{
    (void)c; (void)ctx; (void)stream; (void)buf; (void)bytes; (void)peer;
    return no_nccl();
}
extern "C" sdnn_status sdnn_dnccl_recv(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, void *buf,
                                       size_t bytes, int peer)
{
    (void)c; (void)ctx; (void)stream; (void)buf; (void)bytes; (void)peer;
    return no_nccl();
}
extern "C" sdnn_status sdnn_dnccl_allreduce_sum(sdnn_dnccl *c, sdnn_dctx *ctx, int stream,
                                                const float *in, float *out, size_t n)
{
    (void)c; (void)ctx; (void)stream; (void)in; (void)out; (void)n;
    return no_nccl();
}
extern "C" sdnn_status sdnn_dnccl_broadcast(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, float *buf,
                                            size_t n, int root)
{
    (void)c; (void)ctx; (void)stream; (void)buf; (void)n; (void)root;
    return no_nccl();
}

#endif
