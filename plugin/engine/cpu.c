/*
 * cpu: the host engine (see engine.h): libdarknet's train_network on the
 * host replicas with scalednn's layer hooks (hooks.c, the 1x1 delta fix
 * included) and the strided 1x1 convolution the parse gave them
 * (conv1x1.h; fix_1x1_stride=0 puts libdarknet's back for the engine's
 * life).  Buffers are host memory; pull and push have nothing to move.
 */
#include "engine.h"
#include "blas.h"
#include "conv1x1.h"
#include "conv_dnnl.h"
#include "hooks.h"
#include "replicas.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cpu_engine {
    int hooked;
    int released;    /* fix_1x1_stride=0 took conv1x1.h's functions off the replicas */
    sdnn_engine_callbacks cb;
} cpu_engine;

static int cpu_available(int ndev, char *why, size_t len)
{
    (void)ndev; (void)why; (void)len;
    return 1;
}

/* The ids of -gpus only count the replicas: any list runs. */
static int cpu_available_on(const int *devices, int n, char *why, size_t len)
{
    (void)devices;
    return cpu_available(n, why, len);
}

static void cpu_describe_device(int dev, char *buf, size_t len)
{
    (void)dev;   /* an id names no device here */
    snprintf(buf, len, "CPU replica, a thread of its own (a -gpus id only counts replicas); "
             "gemm: %s; oneDNN: %s", sdnn_blas_name(), sdnn_conv_dnnl_name());
}

static sdnn_status cpu_create(sdnn_engine *e, const sdnn_engine_opts *o)
{
    /* The replicas read their rows of the one host batch in place: there
     * is no device 0 to send the batch to, nor anything to scatter. */
    if (o->split == SDNN_ENGINE_SPLIT_DEVICE0)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "[scalednn] split=device0 needs a device engine (engine=gpu): the cpu "
                          "engine's replicas read their rows of the host batch in place, with "
                          "nothing to scatter; use split=cpu (the default)");
    e->preload = 1;   /* nothing is copied ahead: the loader's lookahead is the overlap */
    cpu_engine *c = calloc(1, sizeof *c);
    if (!c) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the cpu engine");
    e->impl = c;
    if (!o->fix_1x1_stride) {
        /* Debian's libdarknet as it is: the strided 1x1 convolutions on the
         * unstrided input, before the hooks read the pointers. */
        for (int r = 0; r < e->n; ++r) c->released += sdnn_conv1x1_detach(e->nets[r]);
    }
    /* cpu_conv=onednn: the convolutions run on oneDNN through the hooks. */
    int need = o->hooks || o->cpu_conv_onednn || sdnn_engine_fixes_needed(o, e->nets[0]);
    int fixes = (o->fix_1x1_delta ? SDNN_FIX_1X1 : 0) | (o->fix_bn_delta ? SDNN_FIX_BN : 0) |
                (o->fix_region_delta ? SDNN_FIX_REGION : 0) |
                (o->cpu_conv_onednn ? SDNN_HOOK_ONEDNN : 0);
    if (need) {
        for (int r = 0; r < e->n; ++r) {
            sdnn_status st = sdnn_hooks_install(e->nets[r], o->hook_forward, fixes);
            if (st != SDNN_OK) {
                for (int q = 0; q <= r; ++q) sdnn_hooks_uninstall(e->nets[q]);
                if (c->released)
                    for (int q = 0; q < e->n; ++q) sdnn_conv1x1_attach(e->nets[q]);
                free(c);
                e->impl = NULL;
                return st;
            }
        }
        c->hooked = 1;
    }
    return SDNN_OK;
}

static void cpu_destroy(sdnn_engine *e)
{
    cpu_engine *c = e->impl;
    if (!c) return;
    if (c->hooked)
        for (int r = 0; r < e->n; ++r) sdnn_hooks_uninstall(e->nets[r]);
    if (c->released)
        for (int r = 0; r < e->n; ++r) sdnn_conv1x1_attach(e->nets[r]);
    free(c);
    e->impl = NULL;
}

static sdnn_engine_mem cpu_mem(const sdnn_engine *e)
{
    (void)e;
    return SDNN_ENGINE_MEM_HOST;
}

static sdnn_status cpu_buf_alloc(sdnn_engine *e, int r, size_t floats, float **out)
{
    (void)e; (void)r;
    *out = calloc(floats ? floats : 1, sizeof(float));
    return *out ? SDNN_OK : SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a %zu-float buffer", floats);
}

static void cpu_buf_free(sdnn_engine *e, int r, float *p)
{
    (void)e; (void)r;
    free(p);
}

static void cpu_set_callbacks(sdnn_engine *e, const sdnn_engine_callbacks *cb)
{
    cpu_engine *c = e->impl;
    if (cb) c->cb = *cb;
    else memset(&c->cb, 0, sizeof c->cb);
}

static void cpu_bind_thread(sdnn_engine *e, int r)
{
    /* The hooks find the replica through the thread's hook context (the
     * caller's); they reach the scheduler through this engine's
     * callbacks. */
    cpu_engine *c = e->impl;
    sdnn_hooks_bind_callbacks(r >= 0 ? &c->cb : NULL);
}

static sdnn_status cpu_train(sdnn_engine *e, int r, data slice, float *loss)
{
    float l = train_network(e->nets[r], slice);
    if (loss) *loss = l;
    return SDNN_OK;
}

static int params(sdnn_engine *e, int r, int layer, sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER])
{
    int np = sdnn_layer_params(&e->nets[r]->layers[layer], p);
    return np < 0 ? 0 : np;
}

static void cpu_snapshot(sdnn_engine *e, int r, int layer, float *dst)
{
    sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
    int np = params(e, r, layer, p);
    for (int j = 0; j < np; ++j) {
        memcpy(dst, p[j].upd, p[j].n * sizeof(float));
        dst += p[j].n;
    }
}

static long first_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        if (!isfinite(x[i])) return (long)i;
    return -1;
}

static int cpu_pack(sdnn_engine *e, int r, int layer, const float *snap, float *dst,
                    sdnn_engine_bad *bad)
{
    sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
    int np = params(e, r, layer, p);
    for (int j = 0; j < np; ++j) {
        const float *u = p[j].upd;
        int nonfinite = 0;
        for (size_t k = 0; k < p[j].n; ++k) {
            float g = u[k] - snap[k];
            nonfinite |= !isfinite(g);
            dst[k] = g;
        }
        if (nonfinite) {
            if (bad) {
                bad->what = p[j].what;
                bad->at = first_nonfinite(dst, p[j].n);
            }
            return -1;
        }
        dst += p[j].n;
        snap += p[j].n;
    }
    return 0;
}

static int cpu_check(sdnn_engine *e, int r, int layer, sdnn_engine_bad *bad)
{
    sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
    int np = params(e, r, layer, p);
    for (int j = 0; j < np; ++j) {
        long at = first_nonfinite(p[j].upd, p[j].n);
        if (at >= 0) {
            if (bad) {
                bad->what = p[j].what;
                bad->at = at;
            }
            return -1;
        }
    }
    return 0;
}

static void cpu_ef_step(sdnn_engine *e, int r, const sdnn_codec_ops *codec,
                        const sdnn_codec_params *p, float *grad, float *resid, float *vel,
                        float momentum, size_t n, void *scratch, uint64_t stream)
{
    (void)e; (void)r;
    sdnn_codec_ef_step(codec, p, grad, resid, vel, momentum, n, scratch, stream);
}

static void cpu_apply(sdnn_engine *e, int r, int layer, const float *snap, const float *mean)
{
    sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
    int np = params(e, r, layer, p);
    for (int j = 0; j < np; ++j) {
        float *u = p[j].upd;
        for (size_t k = 0; k < p[j].n; ++k) u[k] = snap[k] + mean[k];
        mean += p[j].n;
        snap += p[j].n;
    }
}

static void cpu_ready(sdnn_engine *e, int r, int bucket)
{
    (void)e; (void)r; (void)bucket;   /* the scheduler's ready count is the signal */
}

static sdnn_status cpu_ready_wait(sdnn_engine *e, int r, int bucket)
{
    (void)e; (void)r; (void)bucket;
    return SDNN_OK;
}

static sdnn_status cpu_sync(sdnn_engine *e, int r)
{
    (void)e; (void)r;
    return SDNN_OK;
}

static sdnn_status cpu_buf_read(sdnn_engine *e, int r, const float *src, float *host, size_t n)
{
    (void)e; (void)r;
    if (n) memcpy(host, src, n * sizeof(float));
    return SDNN_OK;
}

static sdnn_status cpu_buf_write(sdnn_engine *e, int r, float *dst, const float *host, size_t n)
{
    (void)e; (void)r;
    if (n) memcpy(dst, host, n * sizeof(float));
    return SDNN_OK;
}

static sdnn_status cpu_move(sdnn_engine *e, unsigned what)
{
    (void)e; (void)what;   /* the host networks are the engine's own */
    return SDNN_OK;
}

/* train() reads the fed batch's rows in place (the trainer keeps it). */
static sdnn_status cpu_feed(sdnn_engine *e, data batch)
{
    (void)e; (void)batch;
    return SDNN_OK;
}

static sdnn_status cpu_resize(sdnn_engine *e, int w, int h)
{
    (void)e; (void)w; (void)h;   /* resize_network on the host replicas is all */
    return SDNN_OK;
}

const sdnn_engine_ops sdnn_engine_cpu = {
    .name = "cpu",
    .host_memory = 1,
    .available = cpu_available,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .mem = cpu_mem,
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .set_callbacks = cpu_set_callbacks,
    .bind_thread = cpu_bind_thread,
    .train = cpu_train,
    .snapshot = cpu_snapshot,
    .pack = cpu_pack,
    .check = cpu_check,
    .ef_step = cpu_ef_step,
    .apply = cpu_apply,
    .ready = cpu_ready,
    .ready_wait = cpu_ready_wait,
    .sync = cpu_sync,
    .pull = cpu_move,
    .push = cpu_move,
    .resize = cpu_resize,
    .comm_open = NULL,        /* the host comm as it is */
    .buf_read = cpu_buf_read,
    .buf_write = cpu_buf_write,
    .set_timeline = NULL,     /* the hooks record the replicas' spans */
    .nonfinite_at = NULL,     /* pack() checks at once */
    .available_on = cpu_available_on,
    .describe_device = cpu_describe_device,
    .feed = cpu_feed,
};
