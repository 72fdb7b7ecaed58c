/*
 * comm: the device comm backends through comm.h's table.  Needs a CUDA
 * device (one is enough: NCCL refuses two ranks on one GPU, so NCCL runs
 * with a world of one here, and the ring's arithmetic is checked against
 * the host in codecs.c).
 *
 *   nccl (world 1) == device (1 buffer) == local, plain and every codec,
 *   bit for bit; the device backend with 3 buffers == local with 3; nccl
 *   opened through its table's init (SDNN_NCCL_DEVICES) works; barrier and
 *   broadcast in a world of one.
 */
#include "comm.h"
#include "dev.h"
#include "gpu.h"
#include "gpu_test.h"

static sdnn_dctx *ctx;

static float *dbuf(const float *h, size_t n)
{
    float *d = NULL;
    if (sdnn_dmalloc(ctx, n * 4, (void **)&d) != SDNN_OK) exit(2);
    sdnn_dcopy(ctx, 0, d, h, n * 4, 1);
    return d;
}

static void fetch(float *h, const float *d, size_t n) { sdnn_dcopy(ctx, 0, h, d, n * 4, 1); }

static size_t same(const float *a, const float *b, size_t n) { return gt_bytes_differ(a, b, n * 4); }

static void compare_backends(sdnn_comm *nccl, sdnn_comm *dev, sdnn_comm *local)
{
    const size_t n = 262147;
    float *h[3], *d[3], *out = malloc(n * 4), *ref = malloc(n * 4), *got = malloc(n * 4);
    for (int r = 0; r < 3; ++r) {
        h[r] = malloc(n * 4);
        gt_fill(h[r], n, -1, 1);
        d[r] = dbuf(h[r], n);
    }
    float *dout = dbuf(h[0], n);

    /* plain mean, one buffer */
    local->ops->allreduce_mean(local, (const float *const *)h, 1, ref, n);
    sdnn_status s = nccl->ops->allreduce_mean(nccl, (const float *const *)d, 1, dout, n);
    fetch(got, dout, n);
    SOFT_ASSERT(s == SDNN_OK && same(got, ref, n) == 0, "nccl world 1 mean = local (%s)",
             s ? sdnn_last_error() : "ok");
    s = dev->ops->allreduce_mean(dev, (const float *const *)d, 1, dout, n);
    fetch(got, dout, n);
    SOFT_ASSERT(s == SDNN_OK && same(got, ref, n) == 0, "device 1-buffer mean = local (%s)",
             s ? sdnn_last_error() : "ok");

    /* plain mean, three buffers on the device backend */
    local->ops->allreduce_mean(local, (const float *const *)h, 3, ref, n);
    s = dev->ops->allreduce_mean(dev, (const float *const *)d, 3, dout, n);
    fetch(got, dout, n);
    SOFT_ASSERT(s == SDNN_OK && same(got, ref, n) == 0, "device 3-buffer mean = local (%s)",
             s ? sdnn_last_error() : "ok");

    static const char *codecs[] = {"none", "fp16", "bf16", "int8", "topk"};
    for (size_t k = 0; k < sizeof codecs / sizeof codecs[0]; ++k) {
        const sdnn_codec_ops *c = sdnn_codec_find(codecs[k]);
        sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
        p.stochastic = 1;
        p.seed = 5;
        p.topk_ratio = 0.05;
        for (int W = 1; W <= 3; W += 2) {
            float *hout[3], *dio[3];
            for (int r = 0; r < W; ++r) {
                hout[r] = malloc(n * 4);
                dio[r] = dbuf(h[r], n);
            }
            size_t wl = 0, wd = 0, wn = 0;
            local->ops->allreduce_mean_coded(local, c, &p, 11, (const float *const *)h, W, hout, n,
                                             &wl);
            s = dev->ops->allreduce_mean_coded(dev, c, &p, 11, (const float *const *)dio, W, dio,
                                               n, &wd);
            size_t bad = 0;
            for (int r = 0; r < W; ++r) {
                fetch(got, dio[r], n);
                bad += same(got, hout[r], n);
            }
            SOFT_ASSERT(s == SDNN_OK && bad == 0 && wd == wl,
                     "device coded %s with %d buffer(s) = local (%zu bytes differ, wire %zu/%zu)%s%s",
                     codecs[k], W, bad, wd, wl, s ? ": " : "", s ? sdnn_last_error() : "");
            if (W == 1) {
                float *dn = dbuf(h[0], n);
                s = nccl->ops->allreduce_mean_coded(nccl, c, &p, 11, (const float *const *)&dn, 1,
                                                    &dn, n, &wn);
                fetch(got, dn, n);
                SOFT_ASSERT(s == SDNN_OK && same(got, hout[0], n) == 0 && wn == 0,
                         "nccl world 1 coded %s = device = local%s%s", codecs[k], s ? ": " : "",
                         s ? sdnn_last_error() : "");
                sdnn_dfree(dn);
            }
            for (int r = 0; r < W; ++r) {
                free(hout[r]);
                sdnn_dfree(dio[r]);
            }
        }
    }
    s = nccl->ops->barrier(nccl);
    SOFT_ASSERT(s == SDNN_OK, "nccl barrier (world 1)");
    s = nccl->ops->broadcast(nccl, d[0], n);
    fetch(got, d[0], n);
    SOFT_ASSERT(s == SDNN_OK && same(got, h[0], n) == 0, "nccl broadcast (world 1) leaves the buffer");
    for (int r = 0; r < 3; ++r) {
        free(h[r]);
        sdnn_dfree(d[r]);
    }
    sdnn_dfree(dout);
    free(out);
    free(ref);
    free(got);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    argv0_ = "comm";
    sdnn_dctx_options o = SDNN_DCTX_OPTIONS_INIT;
    GT_OK(sdnn_dctx_create(&o, &ctx));
    gt_seed(31);
    int devs[1] = {0};
    sdnn_comm *nccl = NULL, *dev = NULL, *local = NULL;
    GT_OK(sdnn_gpu_comm_open_nccl_local(devs, 1, &nccl));
    GT_OK(sdnn_gpu_comm_open_device(0, &dev));
    GT_OK(sdnn_comm_open("local", &local));
    compare_backends(nccl, dev, local);

    /* The table's own init, as the registry would call it. */
    setenv("SDNN_NCCL_DEVICES", "0", 1);
    sdnn_comm *viainit = calloc(1, sizeof *viainit);
    viainit->ops = &sdnn_comm_nccl_ops;
    viainit->size = 1;
    SOFT_ASSERT(sdnn_comm_nccl_ops.available(), "nccl available");
    sdnn_status s = sdnn_comm_nccl_ops.init(viainit);
    SOFT_ASSERT(s == SDNN_OK, "nccl init from the table: %s", s ? sdnn_last_error() : "ok");
    if (s == SDNN_OK) sdnn_comm_nccl_ops.destroy(viainit);
    free(viainit);

    sdnn_comm_close(nccl);
    sdnn_comm_close(dev);
    sdnn_comm_close(local);
    sdnn_dctx_destroy(ctx);
    return gt_summary("comm");
}
