/*
 * codecs: the device codecs against the host codecs (codec.h), and the
 * device ring against the host "local" backend: on a GPU (GPU=1), or on
 * simulated devices (GPU=sim), where codec.cu's kernels run on the kernel
 * executor (sim/exec.c) and the comparison checks them, not a twin.
 *
 * The device encoders must write the host encoders' bytes exactly (same
 * format, rounding, stochastic draws and top-k cut); decoding, decode_add
 * (aliased or not), accumulate and error feedback must give the host's
 * floats bit for bit; every decoded value must also sit within the codec's
 * bound of its input.  The device ring (virtual ranks on one device) must
 * give what the host ring gives, bit for bit, for 2..4 ranks and every
 * codec, and its plain mean must equal sdnn_mean_buffers.
 */
#include "comm.h"
#include "dev.h"
#include "gpu.h"
#include "gpu_test.h"

#include <float.h>

typedef struct variant {
    const char *label;
    const sdnn_codec_ops *codec;
    sdnn_codec_params p;
} variant;

static sdnn_dctx *ctx;

/* Gradient-like values with the cases each codec must round right. */
static void make_input(float *x, size_t n, int flavour)
{
    for (size_t i = 0; i < n; ++i) {
        float v = gt_unif(-1, 1) * powf(10.0f, gt_unif(-4, 0));
        switch (flavour) {
        case 1:   /* specials: zeros, fp16 subnormals, fp16 overflow, halfway cases */
            if (i % 17 == 0) v = 0;
            else if (i % 17 == 1) v = gt_unif(-1, 1) * 1e-6f;
            else if (i % 17 == 2) v = (i & 1 ? 1 : -1) * gt_unif(6e4f, 7e4f);
            else if (i % 17 == 3) v = 1.0f + 0x1p-11f;           /* fp16 tie */
            else if (i % 17 == 4) v = 1.0f + 0x1p-8f;            /* bf16 tie */
            break;
        case 2:   /* many equal magnitudes: top-k ties */
            v = (i % 3 ? 1.0f : -1.0f) * (float)(1 + (i * 7) % 5) * 0.25f;
            break;
        default: break;
        }
        x[i] = v;
    }
}

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    if (sdnn_dmalloc(ctx, bytes ? bytes : 1, &p) != SDNN_OK) {
        printf("device allocation of %zu bytes: %s\n", bytes, sdnn_last_error());
        exit(2);
    }
    return p;
}

static void up(void *d, const void *h, size_t b) { sdnn_dcopy(ctx, 0, d, h, b, 1); }
static void down(void *h, const void *d, size_t b) { sdnn_dcopy(ctx, 0, h, d, b, 1); }

static double bound_of(const variant *v, float x, float scale)
{
    const char *n = v->codec->name;
    if (!strcmp(n, "fp16")) return fabsf(x) >= 6.1035156e-5f ? ldexp(fabs(x), -11) : 0x1p-25;
    if (!strcmp(n, "bf16")) return ldexp(fabs(x), -8);
    /* int8: half a step (a step when stochastic), plus the roundings of
     * 127/m and of x * (127/m): each half an ulp of a value up to 127,
     * i.e. up to 127 * 2^-23 of a step together, with margin. */
    if (!strcmp(n, "int8")) return ((v->p.stochastic ? 1.0 : 0.5) + 127.0 * 0x1p-21) * scale;
    return 0;
}

static void test_codec(const variant *v, size_t n, int flavour)
{
    int id = sdnn_dcodec_of(v->codec);
    const sdnn_codec_params *p = &v->p;
    size_t eb = v->codec->encoded_size(p, n);
    SOFT_ASSERT(eb == sdnn_dcodec_size(id, p, n), "%s n=%zu: encoded size", v->label, n);
    float *x = malloc(n * 4), *ya = malloc(n * 4), *yb = malloc(n * 4), *add = malloc(n * 4);
    unsigned char *ea = malloc(eb ? eb : 1), *ebuf = malloc(eb ? eb : 1);
    make_input(x, n, flavour);
    gt_fill(add, n, -1, 1);
    uint64_t stream = 0xabcdef12345ull + n;
    size_t cs = sdnn_dcodec_scratch_bytes(id, p, n);
    float *dx = dalloc(n * 4), *dy = dalloc(n * 4);
    void *de = dalloc(eb), *dsc = cs ? dalloc(cs) : NULL;
    up(dx, x, n * 4);

    /* encode */
    v->codec->encode(p, x, n, ea, stream);
    sdnn_status s = sdnn_dcodec_encode(ctx, 0, id, p, dx, n, de, stream, dsc);
    if (s == SDNN_OK) s = sdnn_dctx_sync(ctx);
    SOFT_ASSERT(s == SDNN_OK, "%s n=%zu encode: %s", v->label, n, s ? sdnn_last_error() : "ok");
    down(ebuf, de, eb);
    size_t diff = gt_bytes_differ(ea, ebuf, eb);
    SOFT_ASSERT(diff == 0, "%s n=%zu flavour %d: device encoding = host encoding (%zu of %zu bytes differ)",
             v->label, n, flavour, diff, eb);

    /* decode (of the host's bytes) */
    up(de, ea, eb);
    v->codec->decode(p, ea, n, ya);
    sdnn_dcodec_decode(ctx, 0, id, p, de, n, dy);
    down(yb, dy, n * 4);
    SOFT_ASSERT(gt_bytes_differ(ya, yb, n * 4) == 0, "%s n=%zu: decode bit for bit", v->label, n);

    /* within the codec's bound */
    if (flavour == 0 && v->codec->dense && v->codec != &sdnn_codec_none) {
        size_t chunk = (size_t)(p->int8_chunk > 0 ? p->int8_chunk : 256);
        double worst = 0;
        for (size_t i = 0; i < n; ++i) {
            float scale = 0;
            if (!strcmp(v->codec->name, "int8")) memcpy(&scale, ea + 4 * (i / chunk), 4);
            double b = bound_of(v, x[i], scale), e = fabs((double)ya[i] - x[i]);
            double r = b > 0 ? e / b : (e > 0 ? INFINITY : 0);
            if (r > worst) worst = r;
        }
        SOFT_ASSERT(worst <= 1.0, "%s n=%zu: |decoded - x| within the bound (worst ratio %.3f)",
                 v->label, n, worst);
    }

    /* decode_add into another buffer, then in place; accumulate */
    float *dadd = dalloc(n * 4);
    up(dadd, add, n * 4);
    v->codec->decode_add(p, ea, n, add, ya);
    sdnn_dcodec_decode_add(ctx, 0, id, p, de, n, dadd, dy);
    down(yb, dy, n * 4);
    SOFT_ASSERT(gt_bytes_differ(ya, yb, n * 4) == 0, "%s n=%zu: decode_add bit for bit", v->label, n);
    memcpy(ya, add, n * 4);
    v->codec->decode_add(p, ea, n, ya, ya);
    up(dy, add, n * 4);
    sdnn_dcodec_decode_add(ctx, 0, id, p, de, n, dy, dy);
    down(yb, dy, n * 4);
    SOFT_ASSERT(gt_bytes_differ(ya, yb, n * 4) == 0, "%s n=%zu: decode_add in place bit for bit",
             v->label, n);
    memcpy(ya, add, n * 4);
    v->codec->accumulate(p, ea, n, ya);
    up(dy, add, n * 4);
    sdnn_dcodec_accumulate(ctx, 0, id, p, de, n, dy);
    s = sdnn_dctx_sync(ctx);
    down(yb, dy, n * 4);
    SOFT_ASSERT(s == SDNN_OK && gt_bytes_differ(ya, yb, n * 4) == 0,
             "%s n=%zu: accumulate bit for bit", v->label, n);

    /* error feedback, a few steps (with DGC momentum for top-k) */
    if (v->codec->lossy) {
        float *ga = malloc(n * 4), *ra = calloc(n, 4), *va = calloc(n, 4);
        float *gb = malloc(n * 4), *rb = malloc(n * 4), *vb = malloc(n * 4);
        float *dg = dalloc(n * 4), *dr = dalloc(n * 4), *dv = dalloc(n * 4);
        int momentum = !v->codec->dense;
        unsigned char *scratch = malloc(eb ? eb : 1);
        size_t bad = 0;
        for (int step = 0; step < 3; ++step) {
            make_input(ga, n, flavour == 1 ? 0 : flavour);
            up(dg, ga, n * 4);
            if (step == 0) {
                up(dr, ra, n * 4);
                up(dv, va, n * 4);
            }
            sdnn_codec_ef_step(v->codec, p, ga, ra, momentum ? va : NULL, 0.9f, n, scratch,
                               stream + (uint64_t)step);
            sdnn_dcodec_ef_step(ctx, 0, id, p, dg, dr, momentum ? dv : NULL, 0.9f, n, de, dsc,
                                stream + (uint64_t)step);
            sdnn_dctx_sync(ctx);
            down(gb, dg, n * 4);
            down(rb, dr, n * 4);
            down(vb, dv, n * 4);
            bad += gt_bytes_differ(ga, gb, n * 4) + gt_bytes_differ(ra, rb, n * 4) +
                   (momentum ? gt_bytes_differ(va, vb, n * 4) : 0);
        }
        SOFT_ASSERT(bad == 0, "%s n=%zu: error feedback%s, 3 steps bit for bit (%zu bytes differ)",
                 v->label, n, momentum ? " with momentum correction" : "", bad);
        free(ga); free(ra); free(va); free(gb); free(rb); free(vb); free(scratch);
        sdnn_dfree(dg); sdnn_dfree(dr); sdnn_dfree(dv);
    }
    sdnn_dfree(dx); sdnn_dfree(dy); sdnn_dfree(de); sdnn_dfree(dsc); sdnn_dfree(dadd);
    free(x); free(ya); free(yb); free(add); free(ea); free(ebuf);
}

/* The device ring with W virtual ranks against the host "local" backend. */
static void test_ring(const variant *v, int W, size_t n)
{
    sdnn_comm *local = NULL;
    if (sdnn_comm_open("local", &local) != SDNN_OK) {
        SOFT_ASSERT(0, "local backend: %s", sdnn_last_error());
        return;
    }
    float *hin[8], *hout[8], *din[8];
    for (int r = 0; r < W; ++r) {
        hin[r] = malloc(n * 4);
        hout[r] = malloc(n * 4);
        make_input(hin[r], n, 0);
        din[r] = dalloc(n * 4);
        up(din[r], hin[r], n * 4);
    }
    uint64_t stream = 77 + (uint64_t)W;
    size_t wire_h = 0, wire_d = 0;
    sdnn_status s = local->ops->allreduce_mean_coded(local, v->codec, &v->p, stream,
                                                     (const float *const *)hin, W, hout, n, &wire_h);
    SOFT_ASSERT(s == SDNN_OK, "local coded mean: %s", s ? sdnn_last_error() : "ok");
    sdnn_dctx *ctxs[8];
    for (int r = 0; r < W; ++r) ctxs[r] = ctx;
    sdnn_dring *ring = NULL;
    s = sdnn_dring_create(ctxs, W, NULL, W, 0, &ring);
    if (s == SDNN_OK)
        s = sdnn_dring_coded(ring, v->codec, &v->p, stream, (const float *const *)din, din, n,
                             &wire_d);
    if (s == SDNN_OK) s = sdnn_dring_sync(ring);
    SOFT_ASSERT(s == SDNN_OK, "device ring %s W=%d: %s", v->label, W, s ? sdnn_last_error() : "ok");
    size_t bad = 0;
    float *tmp = malloc(n * 4);
    for (int r = 0; r < W; ++r) {
        down(tmp, din[r], n * 4);
        bad += gt_bytes_differ(tmp, hout[r], n * 4);
    }
    SOFT_ASSERT(bad == 0 && wire_d == wire_h,
             "device ring %-14s W=%d n=%zu: = local backend bit for bit (%zu bytes differ), "
             "wire %zu vs %zu", v->label, W, n, bad, wire_d, wire_h);

    /* plain mean */
    for (int r = 0; r < W; ++r) up(din[r], hin[r], n * 4);
    sdnn_mean_buffers((const float *const *)hin, W, hout[0], n);
    float *douts[8];
    for (int r = 0; r < W; ++r) douts[r] = din[r];
    s = sdnn_dring_mean(ring, (const float *const *)din, douts, n, NULL);
    if (s == SDNN_OK) s = sdnn_dring_sync(ring);
    bad = 0;
    for (int r = 0; r < W; ++r) {
        down(tmp, din[r], n * 4);
        bad += gt_bytes_differ(tmp, hout[0], n * 4);
    }
    SOFT_ASSERT(s == SDNN_OK && bad == 0, "device mean W=%d: = sdnn_mean_buffers bit for bit", W);
    sdnn_dring_destroy(ring);
    for (int r = 0; r < W; ++r) {
        free(hin[r]);
        free(hout[r]);
        sdnn_dfree(din[r]);
    }
    free(tmp);
    sdnn_comm_close(local);
}

/*   codecs [--max-size N]   sizes above N left out (run_sim.sh's ASan run:
 *                           2^20, the 3,000,017 case runs in its three
 *                           plain seeds) */
int main(int argc, char **argv)
{
    size_t max_size = (size_t)-1;
    for (int a = 1; a < argc; ++a) {
        char *end = NULL;
        if (strcmp(argv[a], "--max-size") == 0 && a + 1 < argc &&
            (max_size = strtoull(argv[a + 1], &end, 10), end && *end == '\0' && max_size > 0)) {
            ++a;
        } else {
            fprintf(stderr, "codecs: usage: codecs [--max-size N]\n");
            return 2;
        }
    }
    argv0_ = "codecs";
    sdnn_dctx_options o = SDNN_DCTX_OPTIONS_INIT;
    GT_OK(sdnn_dctx_create(&o, &ctx));
    gt_seed(2024);
    sdnn_codec_params base = SDNN_CODEC_PARAMS_INIT;
    variant v[8];
    int nv = 0;
    v[nv] = (variant){"none", &sdnn_codec_none, base}; ++nv;
    v[nv] = (variant){"fp16", &sdnn_codec_fp16, base}; ++nv;
    v[nv] = (variant){"bf16", &sdnn_codec_bf16, base}; ++nv;
    v[nv] = (variant){"int8", &sdnn_codec_int8, base}; ++nv;
    v[nv] = (variant){"int8-stoch-100", &sdnn_codec_int8, base};
    v[nv].p.stochastic = 1;
    v[nv].p.seed = 99;
    v[nv].p.int8_chunk = 100;
    ++nv;
    v[nv] = (variant){"topk-0.01", &sdnn_codec_topk, base}; ++nv;
    v[nv] = (variant){"topk-0.3", &sdnn_codec_topk, base};
    v[nv].p.topk_ratio = 0.3;
    ++nv;
    v[nv] = (variant){"topk-1", &sdnn_codec_topk, base};
    v[nv].p.topk_ratio = 1.0;
    ++nv;
    /* warp, block and top-k tile (2048) edges; 1 << 20 and 3000017 take the
     * top-k offsets scan over several rounds of 256 tiles, the last one partial */
    static const size_t sizes[] = {1,    31,   32,   33,   255,   256,     257,
                                   1000, 2047, 2048, 2049, 65549, 1 << 20, 3000017};
    for (int k = 0; k < nv; ++k)
        for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; ++j)
            for (int f = 0; f < 3 && sizes[j] <= max_size; ++f) test_codec(&v[k], sizes[j], f);
    for (int k = 0; k < nv; ++k)
        for (int W = 2; W <= 4; ++W) test_ring(&v[k], W, 100003);
    sdnn_dctx_destroy(ctx);
    return gt_summary("codecs");
}
