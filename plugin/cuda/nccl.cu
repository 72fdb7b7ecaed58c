/*
 * nccl: NCCL behind dev.h's sdnn_dnccl_* calls, so that the ring
 * (ring.c) and the device backends (comm_gpu.c) are host C shared with
 * the simulated build (sim/nccl.c is its stand-in).  A handle wraps one
 * ncclComm_t; after sdnn_dnccl_abort the communicator is gone
 * (ncclCommAbort) and the handle only waits for sdnn_dnccl_destroy.  In an
 * NCCL=0 build every call is SDNN_ERR_UNSUPPORTED.
 *
 * The communicators of a world across processes (sdnn_dnccl_init_ranks)
 * are non-blocking (config blocking=0): no NCCL call waits for a peer.
 * Init, and a group that NCCL is still enqueueing (ncclInProgress), are
 * polled with ncclCommGetAsyncError against the handle's deadline and
 * aborted (ncclCommAbort) on expiry; the ring's host wait does the same
 * for the work on the streams (ring.c, sdnn_dring_sync).
 */
#include "cuda_util.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if SDNN_NCCL
#include <nccl.h>
#endif

extern "C" size_t sdnn_dnccl_type_bytes(sdnn_dnccl_type t) { return t == SDNN_DNCCL_FLOAT ? 4 : 2; }

struct sdnn_dnccl {
#if SDNN_NCCL
    ncclComm_t comm;
#endif
    int device;
    int dead;       /* aborted */
    int nonblocking;
    double timeout_s;
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

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A non-blocking communicator until NCCL finished what it was doing
 * (ncclInProgress), at most its deadline; aborted on expiry or error. */
static sdnn_status settle(sdnn_dnccl *c, const char *what)
{
    if (!c->nonblocking || c->dead) return SDNN_OK;
    const double t0 = mono_s();
    long nap_us = 10;
    for (;;) {
        ncclResult_t a = ncclSuccess;
        ncclResult_t e = ncclCommGetAsyncError(c->comm, &a);
        if (e != ncclSuccess) a = e;
        if (a == ncclSuccess) return SDNN_OK;
        if (a != ncclInProgress) {
            sdnn_status st = nccl_fail(a, what);
            cudaSetDevice(c->device);
            ncclCommAbort(c->comm);
            c->dead = 1;
            return st;
        }
        if (mono_s() - t0 > c->timeout_s) {
            cudaSetDevice(c->device);
            ncclCommAbort(c->comm);
            c->dead = 1;
            return SDNN_ERROR(SDNN_ERR_COMM,
                              "%s: NCCL still in progress after %.1f s (a peer that never "
                              "joined or answered); communicator aborted",
                              what, c->timeout_s);
        }
        struct timespec t = {0, nap_us * 1000L};
        nanosleep(&t, NULL);
        if (nap_us < 1000) nap_us *= 2;
    }
}

/* The communicators the calling thread's open group touched, settled by
 * sdnn_dnccl_group_end when NCCL answers ncclInProgress. */
enum { GROUP_MAX = 64 };
static thread_local sdnn_dnccl *t_group[GROUP_MAX];
static thread_local int t_ngroup;
static thread_local int t_depth;   /* open ncclGroupStart calls */

static void group_note(sdnn_dnccl *c)
{
    for (int i = 0; i < t_ngroup; ++i)
        if (t_group[i] == c) return;
    if (t_ngroup < GROUP_MAX) t_group[t_ngroup++] = c;
}

/* An enqueueing call: ncclInProgress is success on a non-blocking
 * communicator, settled at the group's end (or now, outside a group). */
static sdnn_status queued(sdnn_dnccl *c, ncclResult_t e, const char *what)
{
    if (e != ncclSuccess && !(e == ncclInProgress && c->nonblocking)) return nccl_fail(e, what);
    if (t_depth == 0) return e == ncclInProgress ? settle(c, what) : SDNN_OK;
    group_note(c);
    return SDNN_OK;
}

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
                                             int n, double timeout_s, sdnn_dnccl **comms)
{
    enum { MAXDEV = 64 };
    for (int i = 0; i < n; ++i) comms[i] = NULL;
    if (n < 1 || n > MAXDEV)
        return SDNN_ERROR(SDNN_ERR_INVALID, "nccl: %d local devices (1..%d)", n, (int)MAXDEV);
    if (!(timeout_s > 0)) timeout_s = 60.0;
    ncclUniqueId u;
    memcpy(u.internal, id, SDNN_NCCL_ID_BYTES);
    ncclComm_t raw[MAXDEV] = {};
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t e = ncclGroupStart();
    for (int i = 0; i < n && (e == ncclSuccess || e == ncclInProgress); ++i) {
        cudaSetDevice(ctxs[i]->o.device);
        e = ncclCommInitRankConfig(&raw[i], nranks, u, first_rank + i, &cfg);
    }
    ncclResult_t e2 = ncclGroupEnd();
    if (e == ncclSuccess || e == ncclInProgress) e = e2;
    if (e != ncclSuccess && e != ncclInProgress) {
        for (int i = 0; i < n; ++i)
            if (raw[i]) ncclCommAbort(raw[i]);
        return nccl_fail(e, "ncclCommInitRankConfig");
    }
    SDNN_CHECK(wrap_all(raw, ctxs, n, comms));
    sdnn_status st = SDNN_OK;
    for (int i = 0; i < n; ++i) {
        comms[i]->nonblocking = 1;
        comms[i]->timeout_s = timeout_s;
    }
    for (int i = 0; i < n && st == SDNN_OK; ++i) {
        char what[96];
        snprintf(what, sizeof what, "ncclCommInitRankConfig (rank %d of %d)", first_rank + i,
                 nranks);
        st = settle(comms[i], what);
    }
    if (st != SDNN_OK) {
        for (int i = 0; i < n; ++i) {
            sdnn_dnccl_abort(comms[i]);
            free(comms[i]);
            comms[i] = NULL;
        }
    }
    return st;
}

/* NCCL keeps no reason: the caller's message is the one reported. */
extern "C" void sdnn_dnccl_abort_because(sdnn_dnccl *c, const char *why)
{
    (void)why;
    sdnn_dnccl_abort(c);
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
    if (t_depth++ == 0) t_ngroup = 0;
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dnccl_group_end(void)
{
    ncclResult_t e = ncclGroupEnd();
    if (t_depth > 0) --t_depth;
    sdnn_status st = SDNN_OK;
    if (e != ncclSuccess && e != ncclInProgress) st = nccl_fail(e, "ncclGroupEnd");
    if (t_depth > 0) return st;
    /* Non-blocking: wait (bounded) until NCCL has enqueued the group. */
    for (int i = 0; i < t_ngroup && st == SDNN_OK; ++i) st = settle(t_group[i], "ncclGroupEnd");
    t_ngroup = 0;
    return st;
}

extern "C" sdnn_status sdnn_dnccl_send(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, const void *buf,
                                       size_t bytes, int peer)
{
    SDNN_CHECK(alive(c, "ncclSend"));
    return queued(c, ncclSend(buf, bytes, ncclUint8, peer, c->comm, ctx->s[stream]), "ncclSend");
}

extern "C" sdnn_status sdnn_dnccl_recv(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, void *buf,
                                       size_t bytes, int peer)
{
    SDNN_CHECK(alive(c, "ncclRecv"));
    return queued(c, ncclRecv(buf, bytes, ncclUint8, peer, c->comm, ctx->s[stream]), "ncclRecv");
}

extern "C" sdnn_status sdnn_dnccl_allreduce_sum(sdnn_dnccl *c, sdnn_dctx *ctx, int stream,
                                                const float *in, float *out, size_t n)
{
    SDNN_CHECK(alive(c, "ncclAllReduce"));
    return queued(c, ncclAllReduce(in, out, n, ncclFloat, ncclSum, c->comm, ctx->s[stream]),
                  "ncclAllReduce");
}

/* ncclHalf and ncclBfloat16 are in every NCCL this project builds against
 * (2.10 and later with CUDA 11+; CUDA 13 ships 2.28); NCCL sums them in
 * their own type, rounding each step's partial sum. */
extern "C" sdnn_status sdnn_dnccl_allreduce_sum_typed(sdnn_dnccl *c, sdnn_dctx *ctx, int stream,
                                                      const void *in, void *out, size_t n,
                                                      sdnn_dnccl_type t)
{
    SDNN_CHECK(alive(c, "ncclAllReduce"));
    ncclDataType_t dt;
    switch (t) {
    case SDNN_DNCCL_FLOAT: dt = ncclFloat; break;
    case SDNN_DNCCL_HALF: dt = ncclHalf; break;
    case SDNN_DNCCL_BF16: dt = ncclBfloat16; break;
    default: return SDNN_ERROR(SDNN_ERR_INVALID, "ncclAllReduce: element type %d", (int)t);
    }
    return queued(c, ncclAllReduce(in, out, n, dt, ncclSum, c->comm, ctx->s[stream]),
                  "ncclAllReduce");
}

extern "C" sdnn_status sdnn_dnccl_broadcast(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, float *buf,
                                            size_t n, int root)
{
    SDNN_CHECK(alive(c, "ncclBroadcast"));
    return queued(c, ncclBroadcast(buf, buf, n, ncclFloat, root, c->comm, ctx->s[stream]),
                  "ncclBroadcast");
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
                                             int n, double timeout_s, sdnn_dnccl **comms)
{
    (void)id; (void)nranks; (void)first_rank; (void)ctxs; (void)timeout_s;
    for (int i = 0; i < n; ++i) comms[i] = NULL;
    return no_nccl();
}
extern "C" void sdnn_dnccl_abort(sdnn_dnccl *c) { (void)c; }
extern "C" void sdnn_dnccl_abort_because(sdnn_dnccl *c, const char *why) { (void)c; (void)why; }
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
extern "C" sdnn_status sdnn_dnccl_allreduce_sum_typed(sdnn_dnccl *c, sdnn_dctx *ctx, int stream,
                                                      const void *in, void *out, size_t n,
                                                      sdnn_dnccl_type t)
{
    (void)c; (void)ctx; (void)stream; (void)in; (void)out; (void)n; (void)t;
    return no_nccl();
}
extern "C" sdnn_status sdnn_dnccl_broadcast(sdnn_dnccl *c, sdnn_dctx *ctx, int stream, float *buf,
                                            size_t n, int root)
{
    (void)c; (void)ctx; (void)stream; (void)buf; (void)n; (void)root;
    return no_nccl();
}

#endif
