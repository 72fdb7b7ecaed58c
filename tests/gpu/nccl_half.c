/*
 * nccl_half: the device ring's other collectives (sdnn_dring_exchange)
 * over NCCL at W = 1 (a real GPU machine of one device: the calls themselves),
 * 2, 3, 4 and 8 ranks, against an fp64 reference.
 *
 *   native fp16 / bf16   encode, NCCL's half / bfloat16 allreduce (sum),
 *                        decode, x 1/W: every element within half_ref.h's
 *                        bound of the fp64 mean (the worst ratio to the
 *                        bound is printed); every rank the same bits; on
 *                        the simulated NCCL the exact bits of its stated
 *                        order (hr_ring16); wire bytes 2(W-1)/W x 2n per
 *                        rank
 *   fp16 overflow        a sum past 65504 becomes +inf (the codec's rule:
 *                        |s| >= 65520), one just below stays exact
 *   int8 all-gather      = the W decoded lists summed in rank order x 1/W
 *                        (host codec), bit for bit; every rank the same
 *   refusals             the native allreduce over device copies (no NCCL)
 *                        is SDNN_ERR_UNSUPPORTED
 *
 * Needs W devices (NCCL refuses two ranks on one GPU): on a machine with
 * fewer it checks the sizes it can and says which it skipped; on simulated
 * devices it asks for 8 (SDNN_SIM_DEVICES).  On simulated devices what
 * passes is the host logic, ordering and arithmetic, never real NCCL's.
 */
#include "codec.h"
#include "collective.h"
#include "costmodel.h"
#include "dev.h"
#include "gpu_test.h"
#include "half_ref.h"

enum { MAXW = 8 };
static int simulated;

/* Inputs of mixed sign and magnitude (2^-6 .. 2^2), rank r's own stream. */
static void input(int r, float *x, size_t n)
{
    gt_seed(77 + (uint64_t)r);
    for (size_t i = 0; i < n; ++i) {
        float m = exp2f(gt_unif(-6, 2));
        x[i] = gt_unif(0, 1) < 0.5f ? -m : m;
    }
}

typedef struct world {
    int W;
    sdnn_dctx *ctx[MAXW];
    float *d_in[MAXW], *d_out[MAXW];
    sdnn_dring *R;
} world;

static int open_world(world *w, int W, size_t n)
{
    memset(w, 0, sizeof *w);
    w->W = W;
    for (int r = 0; r < W; ++r) {
        sdnn_dctx_options o = SDNN_DCTX_OPTIONS_INIT;
        o.device = r;
        if (sdnn_dctx_create(&o, &w->ctx[r]) != SDNN_OK ||
            sdnn_dmalloc(w->ctx[r], n * 4, (void **)&w->d_in[r]) != SDNN_OK ||
            sdnn_dmalloc(w->ctx[r], n * 4, (void **)&w->d_out[r]) != SDNN_OK)
            return 0;
    }
    return sdnn_dring_create_nccl_local(w->ctx, W, &w->R) == SDNN_OK;
}

static void close_world(world *w)
{
    sdnn_dring_destroy(w->R);
    for (int r = 0; r < w->W; ++r) {
        sdnn_dfree(w->d_in[r]);
        sdnn_dfree(w->d_out[r]);
        sdnn_dctx_destroy(w->ctx[r]);
    }
}

/* Runs path with codec over x[0..W) into got[0..W) (host copies). */
static sdnn_status exchange(world *w, sdnn_cm_coll path, const sdnn_codec_ops *c,
                            const sdnn_codec_params *p, float *const *x, float **got, size_t n,
                            size_t *wire)
{
    for (int r = 0; r < w->W; ++r) sdnn_dcopy(w->ctx[r], 0, w->d_in[r], x[r], n * 4, 1);
    *wire = 0;
    sdnn_status s = sdnn_dring_exchange(w->R, path, c, p, 5, (const float *const *)w->d_in,
                                        w->d_out, n, wire);
    if (s == SDNN_OK) s = sdnn_dring_sync(w->R);
    for (int r = 0; r < w->W; ++r) sdnn_dcopy(w->ctx[r], 0, got[r], w->d_out[r], n * 4, 1);
    return s;
}

static void native(world *w, int t, float *const *x, float **got, size_t n)
{
    const int W = w->W;
    const sdnn_codec_ops *c = t == HR_HALF ? &sdnn_codec_fp16 : &sdnn_codec_bf16;
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    size_t wire = 0;
    sdnn_status s = exchange(w, SDNN_CM_NATIVE, c, &p, x, got, n, &wire);
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "W=%d %s native: %s", W, c->name, sdnn_last_error());
        return;
    }
    size_t same = 0;
    for (int r = 1; r < W; ++r) same += gt_bytes_differ(got[r], got[0], n * 4);
    SOFT_ASSERT(same == 0, "W=%d %s native: every rank the same bits (%zu bytes differ)", W,
                c->name, same);
    double worst = 0;
    size_t at = 0, over = 0;
    for (size_t i = 0; i < n; ++i) {
        double m = 0;
        for (int r = 0; r < W; ++r) m += (double)x[r][i];
        m /= W;
        double b = hr_bound(t, (const float *const *)x, W, i, m);
        double e = fabs((double)got[0][i] - m);
        over += !(e <= b);
        if (e / b > worst) worst = e / b, at = i;
    }
    SOFT_ASSERT(over == 0, "W=%d %s native: within the bound of the fp64 mean (%zu elements "
                "over; worst error/bound %.3f at %zu)", W, c->name, over, worst, at);
    printf("    W=%d %s native all-reduce: worst error / bound %.3f\n", W, c->name, worst);
    if (simulated) {
        float *ref = malloc(n * 4);
        hr_ring16(t, (const float *const *)x, W, n, ref);
        size_t d = gt_bytes_differ(got[0], ref, n * 4);
        SOFT_ASSERT(d == 0, "W=%d %s native: the simulated NCCL's stated order, bit for bit "
                    "(%zu bytes differ)", W, c->name, d);
        free(ref);
    }
    const size_t want = W > 1 ? (size_t)W * 2 * (size_t)(W - 1) * (2 * n) / (size_t)W : 0;
    SOFT_ASSERT(wire == want, "W=%d %s native: %zu wire bytes, 2(W-1)/W x 2n per rank = %zu", W,
                c->name, wire, want);
}

static void allgather_int8(world *w, float *const *x, float **got, size_t n)
{
    const int W = w->W;
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    p.int8_chunk = 64;
    size_t wire = 0;
    sdnn_status s = exchange(w, SDNN_CM_ALLGATHER, &sdnn_codec_int8, &p, x, got, n, &wire);
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "W=%d int8 all-gather: %s", W, sdnn_last_error());
        return;
    }
    const size_t enc = sdnn_codec_int8.encoded_size(&p, n);
    unsigned char *buf = malloc(enc);
    float *ref = calloc(n, 4);
    for (int r = 0; r < W; ++r) {
        /* the ring's stream for rank r's list: sdnn_stream_mix(5, r, 0) */
        sdnn_codec_int8.encode(&p, x[r], n, buf, sdnn_stream_mix(5, (uint64_t)r, 0));
        sdnn_codec_int8.accumulate(&p, buf, n, ref);
    }
    for (size_t i = 0; i < n; ++i) ref[i] *= 1.0f / (float)W;
    size_t d = 0;
    for (int r = 0; r < W; ++r) d += gt_bytes_differ(got[r], ref, n * 4);
    SOFT_ASSERT(d == 0, "W=%d int8 all-gather: = the %d decoded lists in rank order x 1/W on every "
                "rank, bit for bit (%zu bytes differ)", W, W, d);
    const size_t want = (size_t)W * (size_t)(W - 1) * enc;
    SOFT_ASSERT(wire == want, "W=%d int8 all-gather: %zu wire bytes, (W-1) x coded per rank = %zu",
                W, wire, want);
    free(buf);
    free(ref);
}

static void overflow(world *w, float **got)
{
    /* W = 2: 40000 + 40000 = 80000 > 65504, 30000 + 30000 = 60000 is a
     * binary16 value, -40000 twice the negative overflow. */
    float a[4] = {40000.0f, 30000.0f, -40000.0f, 1.0f};
    float *x[2] = {a, a};
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    size_t wire = 0;
    sdnn_status s = exchange(w, SDNN_CM_NATIVE, &sdnn_codec_fp16, &p, x, got, 4, &wire);
    SOFT_ASSERT(s == SDNN_OK && isinf(got[0][0]) && got[0][0] > 0 && got[0][1] == 30000.0f &&
                    isinf(got[0][2]) && got[0][2] < 0 && got[0][3] == 1.0f,
                "fp16 native, W=2: a sum past 65504 is +-inf (the fp16 codec's rule), 60000 "
                "stays: %g %g %g %g (%s)", (double)got[0][0], (double)got[0][1],
                (double)got[0][2], (double)got[0][3], s ? sdnn_last_error() : "ok");
}

static void refusals(void)
{
    sdnn_dctx *ctx[2] = {0};
    for (int r = 0; r < 2; ++r) {
        sdnn_dctx_options o = SDNN_DCTX_OPTIONS_INIT;
        o.device = 0;
        if (sdnn_dctx_create(&o, &ctx[r]) != SDNN_OK) exit(2);
    }
    sdnn_dring *R = NULL;
    if (sdnn_dring_create(ctx, 2, NULL, 2, 0, &R) != SDNN_OK) exit(2);
    SOFT_ASSERT(!sdnn_dring_offers(R, &sdnn_codec_fp16, SDNN_CM_NATIVE) &&
                    sdnn_dring_offers(R, &sdnn_codec_int8, SDNN_CM_ALLGATHER) &&
                    !sdnn_dring_offers(R, &sdnn_codec_topk, SDNN_CM_CODED_RING),
                "device copies: no native allreduce, an all-gather for int8, no coded ring for "
                "top-k");
    float *d[2];
    for (int r = 0; r < 2; ++r)
        if (sdnn_dmalloc(ctx[r], 64 * 4, (void **)&d[r]) != SDNN_OK) exit(2);
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    size_t wire = 0;
    sdnn_status s = sdnn_dring_exchange(R, SDNN_CM_NATIVE, &sdnn_codec_fp16, &p, 1,
                                        (const float *const *)d, d, 64, &wire);
    SOFT_ASSERT(s == SDNN_ERR_UNSUPPORTED && strstr(sdnn_last_error(), "needs NCCL"),
                "device copies: the native allreduce is refused (%s: %s)", sdnn_strerror(s),
                sdnn_last_error());
    sdnn_dring_destroy(R);
    for (int r = 0; r < 2; ++r) {
        sdnn_dfree(d[r]);
        sdnn_dctx_destroy(ctx[r]);
    }
}

int main(void)
{
    argv0_ = "nccl_half";
    setenv("SDNN_SIM_DEVICES", "8", 1);   /* read by the simulated runtime only */
    int ndev = 0;
    if (sdnn_dev_count(&ndev) != SDNN_OK || ndev < 1) {
        printf("nccl_half: no device: not checked\n");
        return 0;
    }
    char desc[256];
    sdnn_dev_describe(0, desc, sizeof desc);
    simulated = strstr(desc, "simulated") != NULL;
    printf("    device 0: %s%s\n", desc,
           simulated ? " (host logic and kernels on the host executor; no GPU)" : "");
    refusals();
    const size_t n = 20011;   /* odd: chunks of unequal length */
    float *x[MAXW], *got[MAXW];
    for (int r = 0; r < MAXW; ++r) {
        x[r] = malloc(n * 4);
        got[r] = malloc(n * 4);
        input(r, x[r], n);
    }
    static const int sizes[] = {1, 2, 3, 4, 8};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
        const int W = sizes[k];
        if (W > ndev) {
            printf("    W=%d: not checked (%d device%s; NCCL needs one per rank)\n", W, ndev,
                   ndev == 1 ? "" : "s");
            continue;
        }
        world w;
        if (!open_world(&w, W, n)) {
            SOFT_ASSERT(0, "W=%d: NCCL world: %s", W, sdnn_last_error());
            close_world(&w);
            continue;
        }
        native(&w, HR_HALF, x, got, n);
        native(&w, HR_BF16, x, got, n);
        allgather_int8(&w, x, got, n);
        if (W == 2) overflow(&w, got);
        close_world(&w);
    }
    for (int r = 0; r < MAXW; ++r) {
        free(x[r]);
        free(got[r]);
    }
    return gt_summary("nccl_half");
}
