/*
 * group: N replicas training one model on devices (the device trainer).
 * Each replica is a CPU network mirrored on a virtual device of its own
 * (streams and handles of its own; several may share one GPU).
 *
 * scalednn mode, one step (DESIGN §4 on devices):
 *   1. each replica's slice waits in its preload ring (split=cpu: copied
 *      from pinned host staging straight to its device; split=device0: the
 *      whole batch goes to replica 0's device and is scattered from there);
 *   2. each replica snapshots its update arena, then runs forward/backward
 *      for every subdivision; on the last one, the backward hook records a
 *      bucket's event on the compute stream as soon as the bucket's lowest
 *      layer is done (overlap=1), or all of them at the end (overlap=0);
 *   3. per bucket, the comm stream waits on those events (no host wait),
 *      forms fresh = updates - snapshot, runs error feedback and the coded
 *      or plain mean on the device ring (ring.cu), writes
 *      updates = snapshot + mean and records the bucket's done event;
 *   4. each replica's compute stream waits on a bucket's done event before
 *      Darknet's update of that bucket's layers.
 * The arenas keep layers from last to first, so a bucket is one range.
 * A world of one touches nothing (1 replica == sdnn_gpu_net_train).
 *
 * stock mode: every replica trains and updates on its own; every
 * `interval` iterations the weights come to the host, are averaged by the
 * CPU code of stock.c (Darknet's sync_nets movement) and go back.
 */
#ifdef GPU
#error "never compile the engine with -DGPU: Debian's libdarknet is a CPU build (layer layout)"
#endif
#include "engine.h"

#include "collective.h"
#include "clock.h"
#include "dev.h"
#include "stock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct bucket {
    int lo, hi;                 /* layers */
    size_t off, n;              /* arena range */
    int coded;
    float **residual;           /* per replica, error feedback */
    void **enc, **cscratch;     /* per replica */
} bucket;

typedef struct hook_ctx {
    struct sdnn_gpu_group *G;
    int r;
} hook_ctx;

struct sdnn_gpu_group {
    int n;
    network **nets;
    sdnn_gpu_group_options o;
    const sdnn_codec_ops *codec;
    int nccl;
    sdnn_dctx **vd;
    sdnn_gpu_net **g;
    hook_ctx *hooks;
    sdnn_gpu_preload **pre;
    float **recv_x, **recv_y;   /* split=device0: each replica's slice */
    sdnn_devent **scatter;      /* split=device0: per replica */
    sdnn_dring *ring;
    size_t arena_n;
    float **snap, **grad;
    int nb;
    bucket *b;
    sdnn_devent **bwd;          /* [r * nb + b] */
    sdnn_devent **xdone;
    sdnn_devent **w0, **w1;     /* timing of the compute stream's waits */
    int first_bw;               /* first layer that gets a gradient */
    int recording;
    int stepped;                /* a step has run */
    size_t wire;
    /* The first failure once a feed or step had started changing state:
     * the rings, replicas and exchange are partway through it, so the
     * group refuses everything but destroy (as sdnn_trainer does). */
    sdnn_status failed;
    char failed_msg[256];
};

static double now_s(void) { return sdnn_now_s(); }

#define EV(arr, r, b) (arr)[(size_t)(r) * (size_t)G->nb + (size_t)(b)]

static sdnn_dctx *xctx(sdnn_gpu_group *G, int r) { return G->nccl ? G->vd[r] : G->vd[0]; }

void sdnn_gpu_group_destroy(sdnn_gpu_group *G)
{
    if (!G) return;
    /* The ring first: its wait is bounded and aborts a stuck exchange,
     * which the streams' syncs below would wait for forever. */
    sdnn_dring_destroy(G->ring);
    for (int r = 0; G->vd && r < G->n; ++r)
        if (G->vd[r]) sdnn_dctx_sync_all(G->vd[r]);
    size_t ne = (size_t)G->n * (size_t)G->nb;
    for (size_t i = 0; i < ne; ++i) {
        if (G->bwd) sdnn_devent_destroy(G->bwd[i]);
        if (G->xdone) sdnn_devent_destroy(G->xdone[i]);
        if (G->w0) sdnn_devent_destroy(G->w0[i]);
        if (G->w1) sdnn_devent_destroy(G->w1[i]);
    }
    free(G->bwd);
    free(G->xdone);
    free(G->w0);
    free(G->w1);
    for (int k = 0; G->b && k < G->nb; ++k) {
        bucket *b = &G->b[k];
        for (int r = 0; r < G->n; ++r) {
            if (b->residual) sdnn_dfree(b->residual[r]);
            if (b->enc) sdnn_dfree(b->enc[r]);
            if (b->cscratch) sdnn_dfree(b->cscratch[r]);
        }
        free(b->residual);
        free(b->enc);
        free(b->cscratch);
    }
    free(G->b);
    for (int r = 0; r < G->n; ++r) {
        if (G->snap) sdnn_dfree(G->snap[r]);
        if (G->grad) sdnn_dfree(G->grad[r]);
        if (G->recv_x) sdnn_dfree(G->recv_x[r]);
        if (G->recv_y) sdnn_dfree(G->recv_y[r]);
        if (G->scatter) sdnn_devent_destroy(G->scatter[r]);
        if (G->pre) sdnn_gpu_preload_destroy(G->pre[r]);
        if (G->g) sdnn_gpu_net_destroy(G->g[r]);
    }
    for (int r = 0; G->vd && r < G->n; ++r) sdnn_gpu_vdev_close(G->vd[r]);
    free(G->snap);
    free(G->grad);
    free(G->recv_x);
    free(G->recv_y);
    free(G->scatter);
    free(G->pre);
    free(G->g);
    free(G->hooks);
    free(G->vd);
    free(G);
}

/* ---- buckets ---------------------------------------------------------------------- */

static sdnn_status hook(void *ctx, sdnn_gpu_net *g, int layer)
{
    (void)g;
    hook_ctx *h = ctx;
    sdnn_gpu_group *G = h->G;
    if (!G->recording || !G->o.overlap) return SDNN_OK;
    for (int k = 0; k < G->nb; ++k)
        if (G->b[k].lo == layer)
            SDNN_CHECK(sdnn_devent_record(EV(G->bwd, h->r, k), G->vd[h->r], SDNN_STREAM_COMPUTE));
    return SDNN_OK;
}

static sdnn_status make_buckets(sdnn_gpu_group *G)
{
    sdnn_gpu_net *g0 = G->g[0];
    network *net = G->nets[0];
    G->first_bw = 0;
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].stopbackward) G->first_bw = i + 1;
    G->b = calloc((size_t)net->n, sizeof *G->b);
    if (!G->b) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for buckets");
    size_t cap = (size_t)(G->o.bucket_mb * 1024.0 * 1024.0 / sizeof(float));
    if (cap < 1) cap = 1;
    bucket *cur = NULL;
    for (int i = net->n - 1; i >= G->first_bw; --i) {
        size_t off, n;
        sdnn_gpu_net_layer_span(g0, i, &off, &n);
        if (!n) continue;
        if (!cur) {
            cur = &G->b[G->nb++];
            cur->hi = i;
            cur->off = off;
        }
        cur->lo = i;
        cur->n = off + n - cur->off;
        if (cur->n >= cap) cur = NULL;
    }
    int lossy = G->codec && G->codec->lossy;
    for (int k = 0; k < G->nb; ++k) {
        bucket *b = &G->b[k];
        b->coded = lossy && b->n >= G->o.compress_min_floats;
        if (!b->coded || !G->o.error_feedback) continue;
        b->residual = calloc((size_t)G->n, sizeof *b->residual);
        b->enc = calloc((size_t)G->n, sizeof *b->enc);
        b->cscratch = calloc((size_t)G->n, sizeof *b->cscratch);
        if (!b->residual || !b->enc || !b->cscratch)
            return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for error feedback");
        int id = sdnn_dcodec_of(G->codec);
        for (int r = 0; r < G->n; ++r) {
            sdnn_dctx *c = xctx(G, r);
            SDNN_CHECK(sdnn_dmalloc(c, b->n * sizeof(float), (void **)&b->residual[r]));
            SDNN_CHECK(sdnn_dmalloc(c, sdnn_dcodec_size(id, &G->o.codec_params, b->n),
                                    &b->enc[r]));
            size_t cs = sdnn_dcodec_scratch_bytes(id, &G->o.codec_params, b->n);
            if (cs) SDNN_CHECK(sdnn_dmalloc(c, cs, &b->cscratch[r]));
        }
    }
    size_t ne = (size_t)G->n * (size_t)G->nb;
    G->bwd = calloc(ne ? ne : 1, sizeof *G->bwd);
    G->xdone = calloc(ne ? ne : 1, sizeof *G->xdone);
    G->w0 = calloc(ne ? ne : 1, sizeof *G->w0);
    G->w1 = calloc(ne ? ne : 1, sizeof *G->w1);
    if (!G->bwd || !G->xdone || !G->w0 || !G->w1)
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for events");
    for (int r = 0; r < G->n; ++r) {
        for (int k = 0; k < G->nb; ++k) {
            SDNN_CHECK(sdnn_devent_create(G->vd[r], 0, &EV(G->bwd, r, k)));
            SDNN_CHECK(sdnn_devent_create(xctx(G, r), 0, &EV(G->xdone, r, k)));
            SDNN_CHECK(sdnn_devent_create(G->vd[r], 1, &EV(G->w0, r, k)));
            SDNN_CHECK(sdnn_devent_create(G->vd[r], 1, &EV(G->w1, r, k)));
        }
    }
    return SDNN_OK;
}

/* ---- creation ----------------------------------------------------------------------- */

sdnn_status sdnn_gpu_group_create(network **nets, int n, const sdnn_gpu_group_options *o,
                                  sdnn_gpu_group **out)
{
    *out = NULL;
    sdnn_gpu_group_options def = SDNN_GPU_GROUP_OPTIONS_INIT;
    if (!o) o = &def;
    if (n < 1 || !nets) return SDNN_ERROR(SDNN_ERR_INVALID, "gpu group: %d replicas", n);
    if (o->preload < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "preload=%d: at least 1", o->preload);
    int dn;
    SDNN_CHECK(sdnn_dev_count(&dn));
    sdnn_gpu_group *G = calloc(1, sizeof *G);
    if (!G) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a gpu group");
    sdnn_status st = SDNN_OK;
    G->n = n;
    G->nets = nets;
    G->o = *o;
    const char *comm = o->comm ? o->comm : "device";
    if (strcmp(comm, "nccl") == 0) {
        G->nccl = 1;
    } else if (strcmp(comm, "device") != 0) {
        st = SDNN_ERROR(SDNN_ERR_INVALID, "gpu group: comm=%s (device, nccl)", comm);
        goto fail;
    }
    G->codec = sdnn_codec_find(o->codec ? o->codec : "none");
    if (!G->codec || sdnn_dcodec_of(G->codec) < 0) {
        st = SDNN_ERROR(SDNN_ERR_INVALID, "gpu group: codec %s (%s)", o->codec,
                        sdnn_codec_names());
        goto fail;
    }
    G->vd = calloc((size_t)n, sizeof *G->vd);
    G->g = calloc((size_t)n, sizeof *G->g);
    G->hooks = calloc((size_t)n, sizeof *G->hooks);
    G->pre = calloc((size_t)n, sizeof *G->pre);
    G->snap = calloc((size_t)n, sizeof *G->snap);
    G->grad = calloc((size_t)n, sizeof *G->grad);
    G->recv_x = calloc((size_t)n, sizeof *G->recv_x);
    G->recv_y = calloc((size_t)n, sizeof *G->recv_y);
    G->scatter = calloc((size_t)n, sizeof *G->scatter);
    if (!G->vd || !G->g || !G->hooks || !G->pre || !G->snap || !G->grad || !G->recv_x ||
        !G->recv_y || !G->scatter) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a gpu group");
        goto fail;
    }
    network *n0 = nets[0];
    int B = n0->batch * n0->subdivisions;
    for (int r = 0; r < n; ++r) {
        sdnn_gpu_options go = o->gpu;
        go.device = o->devices ? o->devices[r] : 0;
        if (go.device < 0 || go.device >= dn) {
            st = SDNN_ERROR(SDNN_ERR_INVALID, "replica %d: device %d (%d found)", r, go.device, dn);
            goto fail;
        }
        SDNN_CHECKGOTO(sdnn_gpu_vdev_open(&go, &G->vd[r]), st, fail);
        SDNN_CHECKGOTO(sdnn_gpu_net_create(nets[r], G->vd[r], &G->g[r]), st, fail);
        sdnn_gpu_net_set_seed(G->g[r], 0x5ca1ed0dull + 0x1000193ull * (uint64_t)r);
        G->hooks[r].G = G;
        G->hooks[r].r = r;
        sdnn_gpu_net_set_backward_hook(G->g[r], hook, &G->hooks[r]);
        int rows = B;
        if (o->split == SDNN_GPU_SPLIT_DEVICE0) {
            if (r == 0) rows = B * n;
            else {
                SDNN_CHECKGOTO(sdnn_dmalloc(G->vd[r], (size_t)B * n0->inputs * sizeof(float),
                                            (void **)&G->recv_x[r]), st, fail);
                SDNN_CHECKGOTO(sdnn_dmalloc(G->vd[r],
                                            (size_t)B * (n0->truths ? n0->truths : 1) * sizeof(float),
                                            (void **)&G->recv_y[r]), st, fail);
            }
            SDNN_CHECKGOTO(sdnn_devent_create(G->vd[r], 0, &G->scatter[r]), st, fail);
        }
        if (o->split == SDNN_GPU_SPLIT_CPU || r == 0)
            SDNN_CHECKGOTO(sdnn_gpu_preload_create(G->vd[r], o->preload, rows, n0->inputs,
                                                   n0->truths, &G->pre[r]), st, fail);
    }
    sdnn_gpu_net_arena(G->g[0], NULL, NULL, &G->arena_n);
    if (n > 1 && o->mode == SDNN_GPU_MODE_SCALEDNN) {
        if (G->nccl)
            SDNN_CHECKGOTO(sdnn_dring_create_nccl_local(G->vd, n, &G->ring), st, fail);
        else
            SDNN_CHECKGOTO(sdnn_dring_create(G->vd, n, NULL, n, 0, &G->ring), st, fail);
        for (int r = 0; r < n; ++r) {
            SDNN_CHECKGOTO(sdnn_dmalloc(G->vd[r], G->arena_n * sizeof(float), (void **)&G->snap[r]),
                           st, fail);
            SDNN_CHECKGOTO(sdnn_dmalloc(G->vd[r], G->arena_n * sizeof(float), (void **)&G->grad[r]),
                           st, fail);
        }
        SDNN_CHECKGOTO(make_buckets(G), st, fail);
    }
    *out = G;
    return SDNN_OK;
fail:
    sdnn_gpu_group_destroy(G);
    return st;
}

sdnn_gpu_net *sdnn_gpu_group_net(sdnn_gpu_group *G, int r) { return G->g[r]; }

/* ---- failed state ------------------------------------------------------------------- */

sdnn_status sdnn_gpu_group_failed(const sdnn_gpu_group *G) { return G->failed; }

/* Record st (not OK) as the failure that stops the group; returns st. */
static sdnn_status fail_group(sdnn_gpu_group *G, sdnn_status st)
{
    if (G->failed == SDNN_OK) {
        G->failed = st;
        snprintf(G->failed_msg, sizeof G->failed_msg, "%s", sdnn_last_error());
    }
    return st;
}

static sdnn_status refuse(const sdnn_gpu_group *G, const char *what)
{
    return SDNN_ERROR(SDNN_ERR_ABORTED,
                      "gpu group: no %s: the group stopped after a failed step (%s: %s); its "
                      "replicas hold that step's partial state",
                      what, sdnn_strerror(G->failed), G->failed_msg);
}

/* ---- data ----------------------------------------------------------------------------- */

/* The rings a step reads: every replica's (split=cpu) or replica 0's. */
static int rings(const sdnn_gpu_group *G)
{
    return G->o.split == SDNN_GPU_SPLIT_DEVICE0 ? 1 : G->n;
}

static sdnn_status feed_rings(sdnn_gpu_group *G, data d)
{
    network *n0 = G->nets[0];
    int B = n0->batch * n0->subdivisions;
    float *const *y = n0->truths ? d.y.vals : NULL;
    if (G->o.split == SDNN_GPU_SPLIT_DEVICE0)
        return sdnn_gpu_preload_push(G->pre[0], d.X.vals, y, B * G->n);
    for (int r = 0; r < G->n; ++r)
        SDNN_CHECK(sdnn_gpu_preload_push(G->pre[r], d.X.vals + (size_t)r * B,
                                         y ? y + (size_t)r * B : NULL, B));
    return SDNN_OK;
}

sdnn_status sdnn_gpu_group_feed(sdnn_gpu_group *G, data d)
{
    if (G->failed != SDNN_OK) return refuse(G, "feed");
    network *n0 = G->nets[0];
    int B = n0->batch * n0->subdivisions;
    if (d.X.rows != B * G->n)
        return SDNN_ERROR(SDNN_ERR_INVALID, "gpu group: %d rows, a step takes %d x %d", d.X.rows,
                          G->n, B);
    if (d.X.cols != n0->inputs || (n0->truths && d.y.cols != n0->truths))
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "gpu group: rows of %d inputs and %d truths, the net takes %d and %d",
                          d.X.cols, d.y.cols, n0->inputs, n0->truths);
    /* Every ring or none: the rings stay in step, slot for slot. */
    for (int r = 0; r < rings(G); ++r)
        if (sdnn_gpu_preload_room(G->pre[r]) < 1)
            return SDNN_ERROR(SDNN_ERR_INVALID,
                              "gpu group: %d steps fed and not stepped (preload=%d): step before "
                              "feeding more", sdnn_gpu_preload_queued(G->pre[r]), G->o.preload);
    sdnn_status st = feed_rings(G, d);
    return st == SDNN_OK ? st : fail_group(G, st);
}

typedef struct slice {
    const float *x, *y, *y_host;
} slice;

/* Each replica's rows of the oldest fed step, ready on its compute stream. */
static sdnn_status take_slices(sdnn_gpu_group *G, slice *s)
{
    network *n0 = G->nets[0];
    int B = n0->batch * n0->subdivisions;
    size_t in = (size_t)n0->inputs, tr = (size_t)n0->truths;
    if (G->o.split == SDNN_GPU_SPLIT_CPU) {
        for (int r = 0; r < G->n; ++r) {
            sdnn_gpu_slot sl;
            SDNN_CHECK(sdnn_gpu_preload_pop(G->pre[r], &sl));
            s[r].x = sl.x;
            s[r].y = sl.y;
            s[r].y_host = sl.y_host;
        }
        return SDNN_OK;
    }
    /* device0: everything lands on replica 0's device, then scatters. */
    sdnn_gpu_slot sl;
    SDNN_CHECK(sdnn_gpu_preload_pop(G->pre[0], &sl));
    s[0].x = sl.x;
    s[0].y = sl.y;
    s[0].y_host = sl.y_host;
    SDNN_CHECK(sdnn_devent_record(G->scatter[0], G->vd[0], SDNN_STREAM_COMPUTE));
    int d0 = sdnn_dctx_device(G->vd[0]);
    for (int r = 1; r < G->n; ++r) {
        sdnn_dctx *c = G->vd[r];
        SDNN_CHECK(sdnn_devent_wait(G->scatter[0], c, SDNN_STREAM_COMPUTE));
        SDNN_CHECK(sdnn_dcopy_peer(c, SDNN_STREAM_COMPUTE, G->recv_x[r], sdnn_dctx_device(c),
                                   sl.x + (size_t)r * B * in, d0, (size_t)B * in * sizeof(float)));
        if (tr)
            SDNN_CHECK(sdnn_dcopy_peer(c, SDNN_STREAM_COMPUTE, G->recv_y[r], sdnn_dctx_device(c),
                                       sl.y + (size_t)r * B * tr, d0,
                                       (size_t)B * tr * sizeof(float)));
        SDNN_CHECK(sdnn_devent_record(G->scatter[r], c, SDNN_STREAM_COMPUTE));
        /* Replica 0 must not release the slot before the copies read it. */
        SDNN_CHECK(sdnn_devent_wait(G->scatter[r], G->vd[0], SDNN_STREAM_COMPUTE));
        s[r].x = G->recv_x[r];
        s[r].y = tr ? G->recv_y[r] : NULL;
        s[r].y_host = tr ? sl.y_host + (size_t)r * B * tr : NULL;
    }
    return SDNN_OK;
}

static sdnn_status release_slices(sdnn_gpu_group *G)
{
    if (G->o.split == SDNN_GPU_SPLIT_DEVICE0) return sdnn_gpu_preload_release(G->pre[0]);
    for (int r = 0; r < G->n; ++r) SDNN_CHECK(sdnn_gpu_preload_release(G->pre[r]));
    return SDNN_OK;
}

/* ---- exchange ------------------------------------------------------------------------- */

static sdnn_status exchange_bucket(sdnn_gpu_group *G, int k, uint64_t iteration)
{
    bucket *b = &G->b[k];
    const float *in[64];
    float *io[64];
    if (G->n > 64) return SDNN_ERROR(SDNN_ERR_INVALID, "gpu group: at most 64 replicas");
    if (!G->nccl)
        for (int r = 0; r < G->n; ++r)
            SDNN_CHECK(sdnn_devent_wait(EV(G->bwd, r, k), G->vd[0], SDNN_STREAM_COMM));
    for (int r = 0; r < G->n; ++r) {
        sdnn_dctx *c = xctx(G, r);
        if (G->nccl) SDNN_CHECK(sdnn_devent_wait(EV(G->bwd, r, k), c, SDNN_STREAM_COMM));
        float *upd;
        sdnn_gpu_net_arena(G->g[r], NULL, &upd, NULL);
        SDNN_CHECK(sdnn_dctx_bind(c));
        SDNN_CHECK(sdnn_k_sub(c, SDNN_STREAM_COMM, G->grad[r] + b->off, upd + b->off,
                              G->snap[r] + b->off, b->n));
        if (b->coded && G->o.error_feedback)
            SDNN_CHECK(sdnn_dcodec_ef_step(c, SDNN_STREAM_COMM, sdnn_dcodec_of(G->codec),
                                           &G->o.codec_params, G->grad[r] + b->off,
                                           b->residual[r], NULL, 0, b->n, b->enc[r],
                                           b->cscratch[r],
                                           sdnn_stream_mix(iteration, (uint64_t)k,
                                                           0x10000u + (uint64_t)r)));
        in[r] = G->grad[r] + b->off;
        io[r] = G->grad[r] + b->off;
    }
    if (b->coded)
        SDNN_CHECK(sdnn_dring_coded(G->ring, G->codec, &G->o.codec_params,
                                    sdnn_stream_mix(G->o.codec_params.seed, iteration, (uint64_t)k),
                                    in, io, b->n, &G->wire));
    else
        SDNN_CHECK(sdnn_dring_mean(G->ring, in, io, b->n, &G->wire));
    for (int r = 0; r < G->n; ++r) {
        sdnn_dctx *c = xctx(G, r);
        float *upd;
        sdnn_gpu_net_arena(G->g[r], NULL, &upd, NULL);
        SDNN_CHECK(sdnn_dctx_bind(c));
        SDNN_CHECK(sdnn_k_add(c, SDNN_STREAM_COMM, upd + b->off, G->snap[r] + b->off,
                              G->grad[r] + b->off, b->n));
        SDNN_CHECK(sdnn_devent_record(EV(G->xdone, r, k), c, SDNN_STREAM_COMM));
    }
    return SDNN_OK;
}

static sdnn_status step_scalednn(sdnn_gpu_group *G, const slice *s, float *loss)
{
    network *n0 = G->nets[0];
    int batch = n0->batch, sub = n0->subdivisions, B = batch * sub, N = G->n;
    size_t in = (size_t)n0->inputs, tr = (size_t)n0->truths;
    size_t S = *n0->seen;
    uint64_t iteration = (uint64_t)(S / (size_t)B);
    float sum = 0;
    if (N == 1) {
        SDNN_CHECK(sdnn_gpu_net_train_rows(G->g[0], s[0].x, s[0].y, s[0].y_host, B, 1, &sum));
        *loss = sum;
        return SDNN_OK;
    }
    for (int r = 0; r < N; ++r) {
        *G->nets[r]->seen = S + (size_t)(N - 1) * B;
        float *upd;
        sdnn_gpu_net_arena(G->g[r], NULL, &upd, NULL);
        SDNN_CHECK(sdnn_dctx_bind(G->vd[r]));
        SDNN_CHECK(sdnn_dcopy(G->vd[r], SDNN_STREAM_COMPUTE, G->snap[r], upd,
                              G->arena_n * sizeof(float), 0));
    }
    float rl[64] = {0};
    for (int j = 0; j < sub; ++j) {
        G->recording = j == sub - 1;
        for (int r = 0; r < N; ++r) {
            size_t r0 = (size_t)j * batch;
            float l = 0;
            SDNN_CHECK(sdnn_gpu_net_train_rows(G->g[r], s[r].x + r0 * in,
                                               tr ? s[r].y + r0 * tr : NULL,
                                               tr ? s[r].y_host + r0 * tr : NULL, batch, 0, &l));
            rl[r] += l;
            if (G->recording && !G->o.overlap)
                for (int k = 0; k < G->nb; ++k)
                    SDNN_CHECK(sdnn_devent_record(EV(G->bwd, r, k), G->vd[r],
                                                  SDNN_STREAM_COMPUTE));
        }
    }
    G->recording = 0;
    for (int k = 0; k < G->nb; ++k) SDNN_CHECK(exchange_bucket(G, k, iteration));
    for (int r = 0; r < N; ++r) {
        sdnn_dctx *c = G->vd[r];
        SDNN_CHECK(sdnn_dctx_bind(c));
        int done_hi = n0->n;     /* layers above the buckets have no parameters */
        for (int k = 0; k < G->nb; ++k) {
            bucket *b = &G->b[k];
            SDNN_CHECK(sdnn_devent_record(EV(G->w0, r, k), c, SDNN_STREAM_COMPUTE));
            SDNN_CHECK(sdnn_devent_wait(EV(G->xdone, r, k), c, SDNN_STREAM_COMPUTE));
            SDNN_CHECK(sdnn_devent_record(EV(G->w1, r, k), c, SDNN_STREAM_COMPUTE));
            SDNN_CHECK(sdnn_gpu_net_update_layers(G->g[r], b->lo, done_hi - 1));
            done_hi = b->lo;
        }
        /* Layers that get no gradient (stopbackward) still take Darknet's
         * update (decay and momentum), identically on every replica. */
        SDNN_CHECK(sdnn_gpu_net_update_layers(G->g[r], 0, done_hi - 1));
        sum += rl[r] / (float)sub;
    }
    *loss = sum / (float)N;
    return SDNN_OK;
}

static sdnn_status move_params(sdnn_gpu_group *G, int to_device)
{
    static const sdnn_gpu_tensor t[] = {SDNN_GT_WEIGHTS, SDNN_GT_BIASES, SDNN_GT_SCALES};
    for (int r = 0; r < G->n; ++r) {
        network *net = G->nets[r];
        for (int i = 0; i < net->n; ++i) {
            layer *l = &net->layers[i];
            if (l->type != CONVOLUTIONAL && l->type != CONNECTED) continue;
            for (size_t k = 0; k < sizeof t / sizeof t[0]; ++k) {
                float *dev;
                size_t n;
                SDNN_CHECK(sdnn_gpu_net_tensor(G->g[r], i, t[k], &dev, &n));
                if (!n) continue;
                float *host = t[k] == SDNN_GT_WEIGHTS ? l->weights
                              : t[k] == SDNN_GT_BIASES ? l->biases : l->scales;
                if (to_device) SDNN_CHECK(sdnn_gpu_net_set(G->g[r], i, t[k], host));
                else SDNN_CHECK(sdnn_gpu_net_get(G->g[r], i, t[k], host));
            }
        }
    }
    return SDNN_OK;
}

static sdnn_status step_stock(sdnn_gpu_group *G, const slice *s, float *loss, int *synced,
                              size_t *bytes)
{
    network *n0 = G->nets[0];
    int B = n0->batch * n0->subdivisions;
    float sum = 0;
    for (int r = 0; r < G->n; ++r) {
        float l = 0;
        SDNN_CHECK(sdnn_gpu_net_train_rows(G->g[r], s[r].x, s[r].y, s[r].y_host, B, 1, &l));
        sum += l;
    }
    *loss = sum / (float)G->n;
    *synced = 0;
    if (G->n > 1 && sdnn_stock_due(G->nets, G->n, G->o.stock_interval)) {
        SDNN_CHECK(move_params(G, 0));
        SDNN_CHECK(sdnn_stock_sync(G->nets, G->n, G->o.stock_interval, bytes));
        SDNN_CHECK(move_params(G, 1));
        *synced = 1;
    }
    return SDNN_OK;
}

/* The largest time a replica's compute stream waited on exchanges in the
 * last completed step. */
static sdnn_status exposed(sdnn_gpu_group *G, double *s)
{
    *s = 0;
    if (G->o.mode != SDNN_GPU_MODE_SCALEDNN || !G->ring) return SDNN_OK;
    for (int r = 0; r < G->n; ++r) {
        double e = 0;
        for (int k = 0; k < G->nb; ++k) {
            float ms = 0;
            SDNN_CHECK(sdnn_devent_elapsed(EV(G->w0, r, k), EV(G->w1, r, k), &ms));
            e += ms > 0 ? ms : 0;
        }
        if (e / 1000.0 > *s) *s = e / 1000.0;
    }
    return SDNN_OK;
}

static sdnn_status run_step(sdnn_gpu_group *G, sdnn_gpu_step_stats *st, double t0)
{
    slice s[64];
    /* async: the previous step's events are complete once its work is;
     * read its exposed time before this step records them again. */
    if (G->o.async && G->stepped) {
        if (G->ring) SDNN_CHECK(sdnn_dring_sync(G->ring));   /* bounded: see dev.h */
        for (int r = 0; r < G->n; ++r) SDNN_CHECK(sdnn_dctx_sync_all(G->vd[r]));
        SDNN_CHECK(exposed(G, &st->exposed_comm_s));
    }
    SDNN_CHECK(take_slices(G, s));
    G->wire = 0;
    if (G->o.mode == SDNN_GPU_MODE_STOCK)
        SDNN_CHECK(step_stock(G, s, &st->loss, &st->synced, &st->bytes));
    else
        SDNN_CHECK(step_scalednn(G, s, &st->loss));
    SDNN_CHECK(release_slices(G));
    if (G->o.mode == SDNN_GPU_MODE_SCALEDNN) st->bytes = G->wire;
    G->stepped = 1;
    if (!G->o.async) {
        if (G->ring) SDNN_CHECK(sdnn_dring_sync(G->ring));   /* bounded: see dev.h */
        for (int r = 0; r < G->n; ++r) SDNN_CHECK(sdnn_dctx_sync_all(G->vd[r]));
        SDNN_CHECK(exposed(G, &st->exposed_comm_s));
    }
    st->seconds = now_s() - t0;
    return SDNN_OK;
}

sdnn_status sdnn_gpu_group_step(sdnn_gpu_group *G, sdnn_gpu_step_stats *st)
{
    memset(st, 0, sizeof *st);
    double t0 = now_s();
    if (G->failed != SDNN_OK) return refuse(G, "step");
    if (G->n > 64) return SDNN_ERROR(SDNN_ERR_INVALID, "gpu group: at most 64 replicas");
    for (int r = 0; r < rings(G); ++r)
        if (sdnn_gpu_preload_queued(G->pre[r]) < 1)
            return SDNN_ERROR(SDNN_ERR_INVALID, "gpu group: no batch fed for this step "
                              "(sdnn_gpu_group_feed first)");
    sdnn_status s = run_step(G, st, t0);
    return s == SDNN_OK ? s : fail_group(G, s);
}

sdnn_status sdnn_gpu_group_pull(sdnn_gpu_group *G)
{
    if (G->failed != SDNN_OK) return refuse(G, "pull");
    for (int r = 0; r < G->n; ++r) SDNN_CHECK(sdnn_gpu_net_pull(G->g[r]));
    return SDNN_OK;
}

sdnn_status sdnn_gpu_group_preload_stats(sdnn_gpu_group *G, sdnn_gpu_preload_stats *st)
{
    memset(st, 0, sizeof *st);
    for (int r = 0; r < G->n; ++r) {
        if (!G->pre[r]) continue;
        sdnn_gpu_preload_stats one;
        SDNN_CHECK(sdnn_gpu_preload_stats_get(G->pre[r], &one));
        st->copy_ms += one.copy_ms;
        st->exposed_ms += one.exposed_ms;
        st->bytes += one.bytes;
        st->copies += one.copies;
    }
    return SDNN_OK;
}
