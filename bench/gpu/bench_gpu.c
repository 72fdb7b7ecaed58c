/*
 * bench_gpu: the GPU engine's benchmarks.  Each command ends with one
 * "RESULT <command> key=value ..." line that bench/gpu/run.sh reads to
 * assert the stated targets (the time targets are asserted there, not
 * here); comm exits 3 when any row's #wrong is not 0.
 *
 *   bench_gpu bandwidth [-mb M]
 *       host->device and device->host copies from pinned and from pageable
 *       memory (GB/s, median of 9)
 *   bench_gpu train CFG [-batch B] [-size S] [-steps N] [-replicas R]
 *                       [-mode scalednn|stock] [-preload K] [-tf32]
 *                       [-split cpu|device0] [-codec C]
 *       images/s of the trainer (sdnn_trainer_feed / step_fed) on the gpu
 *       engine, R virtual replicas on device 0, on in-memory detection
 *       batches, with the preload rings' hidden fraction (1 - exposed copy
 *       / copy time) and the time spent in host-side losses
 *   bench_gpu comm [-backend device|nccl] [-ranks W] [-codec C] [-max MB] [-J]
 *       nccl-tests-style sweep of the allreduce-mean: size, time, algbw,
 *       busbw = algbw * 2(W-1)/W, #wrong against the host reference
 *       (sdnn_mean_buffers, or the host local backend for coded means,
 *       which the device ring equals bit for bit)
 */
#include "comm.h"
#include "config.h"
#include "dev.h"
#include "engine.h"
#include "gpu.h"
#include "gpu_test.h"
#include "trainer.h"

#include <time.h>

static double now(void) { return sdnn_gpu_now(); }

static const char *opt(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 1; i + 1 < argc; ++i)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return def;
}

static int flag(int argc, char **argv, const char *name)
{
    for (int i = 1; i < argc; ++i)
        if (!strcmp(argv[i], name)) return 1;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

#define DIE(...)                                                                   \
    do {                                                                           \
        fprintf(stderr, __VA_ARGS__);                                              \
        fprintf(stderr, ": %s\n", sdnn_last_error());                              \
        return 1;                                                                  \
    } while (0)

/* ---- bandwidth ----------------------------------------------------------------- */

static int bench_bandwidth(int argc, char **argv)
{
    size_t mb = (size_t)atoi(opt(argc, argv, "-mb", "256")), bytes = mb << 20;
    sdnn_dctx_options o = SDNN_DCTX_OPTIONS_INIT;
    sdnn_dctx *c;
    if (sdnn_dctx_create(&o, &c)) DIE("device");
    void *pinned, *dev;
    char *pageable = malloc(bytes);
    if (!pageable || sdnn_hmalloc_pinned(bytes, &pinned) || sdnn_dmalloc(c, bytes, &dev))
        DIE("allocations of %zu MiB", mb);
    memset(pageable, 1, bytes);
    memset(pinned, 1, bytes);
    printf("# copies of %zu MiB, median of 9 (GB/s)\n%-10s %10s %10s\n", mb, "memory", "H2D", "D2H");
    const char *names[2] = {"pinned", "pageable"};
    void *src[2] = {pinned, pageable};
    double gbs[2][2];
    for (int m = 0; m < 2; ++m) {
        for (int dir = 0; dir < 2; ++dir) {
            double t[9];
            for (int k = 0; k < 9; ++k) {
                double t0 = now();
                if (dir == 0) sdnn_dcopy(c, SDNN_STREAM_COPY, dev, src[m], bytes, 1);
                else sdnn_dcopy(c, SDNN_STREAM_COPY, src[m], dev, bytes, 1);
                t[k] = now() - t0;
            }
            gbs[m][dir] = (double)bytes / median(t, 9) / 1e9;
        }
        printf("%-10s %10.2f %10.2f\n", names[m], gbs[m][0], gbs[m][1]);
    }
    printf("pinned/pageable: H2D %.2fx, D2H %.2fx\n", gbs[0][0] / gbs[1][0], gbs[0][1] / gbs[1][1]);
    printf("RESULT bandwidth pinned_h2d=%.2f pinned_d2h=%.2f pageable_h2d=%.2f pageable_d2h=%.2f\n",
           gbs[0][0], gbs[0][1], gbs[1][0], gbs[1][1]);
    sdnn_dfree(dev);
    sdnn_hfree_pinned(pinned);
    free(pageable);
    sdnn_dctx_destroy(c);
    return 0;
}

/* ---- training throughput ------------------------------------------------------------ */

/* Replica rows of d as a batch of its own for the trainer to own: new row
 * pointers, the same rows (free_data frees only the pointers). */
static data view_of(data d)
{
    data v = d;
    v.shallow = 1;
    v.X.vals = malloc((size_t)d.X.rows * sizeof *v.X.vals);
    v.y.vals = malloc((size_t)d.y.rows * sizeof *v.y.vals);
    if (v.X.vals) memcpy(v.X.vals, d.X.vals, (size_t)d.X.rows * sizeof *v.X.vals);
    if (v.y.vals) memcpy(v.y.vals, d.y.vals, (size_t)d.y.rows * sizeof *v.y.vals);
    return v;
}

static int bench_train(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "bench_gpu train CFG [options]\n");
        return 2;
    }
    const char *cfg = argv[2];
    int batch = atoi(opt(argc, argv, "-batch", "64"));
    int size = atoi(opt(argc, argv, "-size", "416"));
    int steps = atoi(opt(argc, argv, "-steps", "20"));
    int R = atoi(opt(argc, argv, "-replicas", "1"));
    int K = atoi(opt(argc, argv, "-preload", "2"));
    const char *mode = opt(argc, argv, "-mode", "scalednn");
    const char *split = opt(argc, argv, "-split", "cpu");
    const char *codec = opt(argc, argv, "-codec", "none");
    int tf32 = flag(argc, argv, "-tf32");
    if (R < 1 || R > 8 || batch % R) {
        fprintf(stderr, "-replicas must divide -batch\n");
        return 2;
    }
    if (K < 1 || K > 8) {
        fprintf(stderr, "-preload must be 1..8\n");
        return 2;
    }
    /* Read by the gpu engine when it opens its devices. */
    if (tf32) setenv("SDNN_GPU_TF32", "1", 1);
    char set[256];
    snprintf(set, sizeof set, "batch=%d\nsubdivisions=1\nwidth=%d\nheight=%d\n", batch / R, size,
             size);
    network **nets = calloc((size_t)R, sizeof *nets);
    if (!nets) DIE("memory");
    for (int r = 0; r < R; ++r) {
        nets[r] = gt_parse_file(cfg, set);
        if (!nets[r]) {
            fprintf(stderr, "cannot parse %s\n", cfg);
            return 1;
        }
        if (r) gt_copy_net(nets[r], nets[0]);
    }
    /* The trainer on the gpu engine, every replica on device 0 (virtual
     * replicas), as detector train -gpus 0,0 with virtual=1 runs it; the
     * trainer multiplies the learning rate by R. */
    sdnn_config c = SDNN_CONFIG_INIT;
    c.present = 1;
    c.mode = strcmp(mode, "stock") ? SDNN_MODE_SCALEDNN : SDNN_MODE_STOCK;
    c.bucket_mb = 4;
    c.preload = K;
    c.virtual_devices = 1;
    snprintf(c.split, sizeof c.split, "%s", split);
    snprintf(c.compress, sizeof c.compress, "%s", codec);
    c.error_feedback = strcmp(codec, "none") != 0;
    snprintf(c.engine, sizeof c.engine, "gpu");
    int devices[8] = {0};
    sdnn_trainer_opts to = SDNN_TRAINER_OPTS_INIT;
    to.devices = devices;
    sdnn_trainer *T;
    if (sdnn_trainer_create_opts(nets, R, &c, &to, 1, &T)) DIE("trainer");
    sdnn_engine *E = sdnn_trainer_engine_instance(T);
    int classes = 1;
    for (int i = 0; i < nets[0]->n; ++i)
        if (nets[0]->layers[i].type == YOLO || nets[0]->layers[i].type == REGION)
            classes = nets[0]->layers[i].classes;
    enum { NB = 3 };
    data d[NB];
    for (int k = 0; k < NB; ++k)
        d[k] = gt_detection_data(batch, size, size, nets[0]->c, nets[0]->truths, classes,
                                 77 + (uint64_t)k);
    /* Keep K batches fed: the copies of the next steps run under this one. */
    int fed = 0;
    for (; fed < K && fed < steps; ++fed)
        if (sdnn_trainer_feed(T, view_of(d[fed % NB]))) DIE("feed");
    int warm = steps > 5 ? 3 : 1;
    double t0 = 0, loss = 0, exposed = 0;
    size_t bytes = 0;
    sdnn_gpu_preload_stats p0 = {0};
    for (int s = 0; s < steps; ++s) {
        if (s == warm) {
            if (sdnn_gpu_engine_preload_stats(E, &p0)) DIE("preload statistics");
            t0 = now();
        }
        sdnn_step_stats st;
        if (sdnn_trainer_step_fed(T, &st)) DIE("step %d", s);
        if (fed < steps) {
            if (sdnn_trainer_feed(T, view_of(d[fed % NB]))) DIE("feed");
            ++fed;
        }
        if (s >= warm) {
            exposed += st.exposed_s;
            bytes += st.bytes;
        }
        loss = st.loss;
    }
    sdnn_gpu_preload_stats p;
    if (sdnn_gpu_engine_preload_stats(E, &p)) DIE("preload statistics");
    double secs = now() - t0;
    int timed = steps - warm;
    double copy = p.copy_ms - p0.copy_ms, exp_ms = p.exposed_ms - p0.exposed_ms;
    double hl = 0;
    for (int r = 0; r < R; ++r) hl += sdnn_gpu_net_host_loss_seconds(sdnn_gpu_engine_net(E, r));
    printf("train %s %dx%d batch %d = %d x %d, %s, preload %d, split %s%s %s (trainer, engine gpu)\n",
           cfg, size, size, batch, R, batch / R, mode, K, split, tf32 ? ", tf32" : "", codec);
    printf("  images/s %.1f   step %.2f ms   loss %.3f\n", (double)timed * batch / secs,
           1e3 * secs / timed, loss);
    printf("  preload: %d copies, %.1f MB, copy %.2f ms, exposed %.3f ms, hidden %.1f%%\n",
           p.copies, (double)p.bytes / 1e6, copy, exp_ms,
           copy > 0 ? 100.0 * (1.0 - exp_ms / copy) : 0.0);
    printf("  host losses %.1f ms/step (all steps); exchange exposed %.2f ms/step, %.1f MB/step\n",
           1e3 * hl / steps, 1e3 * exposed / timed, (double)bytes / 1e6 / timed);
    printf("RESULT train images_per_s=%.1f hidden_pct=%.2f\n", (double)timed * batch / secs,
           copy > 0 ? 100.0 * (1.0 - exp_ms / copy) : 0.0);
    for (int k = 0; k < NB; ++k) free_data(d[k]);
    sdnn_trainer_destroy(T);   /* frees the replicas it owns */
    return 0;
}

/* ---- comm sweep ---------------------------------------------------------------------- */

static int bench_comm(int argc, char **argv)
{
    const char *backend = opt(argc, argv, "-backend", "device");
    int W = atoi(opt(argc, argv, "-ranks", "2"));
    const char *cname = opt(argc, argv, "-codec", "none");
    size_t maxb = (size_t)atoi(opt(argc, argv, "-max", "256")) << 20;
    int json = flag(argc, argv, "-J");
    const sdnn_codec_ops *codec = sdnn_codec_find(cname);
    if (!codec) {
        fprintf(stderr, "codec %s (%s)\n", cname, sdnn_codec_names());
        return 2;
    }
    int nccl = !strcmp(backend, "nccl");
    if (nccl && W != 1) {
        fprintf(stderr, "nccl: one device here, so -ranks 1 (NCCL refuses two ranks on one GPU)\n");
        W = 1;
    }
    if (W < 1 || W > 8) return 2;
    sdnn_comm *c = NULL, *local = NULL;
    int devs[1] = {0};
    if (nccl ? sdnn_gpu_comm_open_nccl_local(devs, 1, &c) : sdnn_gpu_comm_open_device(0, &c))
        DIE("open %s", backend);
    if (sdnn_comm_open("local", &local)) DIE("local");
    sdnn_dctx_options o = SDNN_DCTX_OPTIONS_INIT;
    sdnn_dctx *ctx;
    if (sdnn_dctx_create(&o, &ctx)) DIE("device");
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    size_t maxn = maxb / 4;
    float *d[8], *h[8], *ref = malloc(maxn * 4), *got = malloc(maxn * 4), *hout[8];
    for (int r = 0; r < W; ++r) {
        h[r] = malloc(maxn * 4);
        hout[r] = malloc(maxn * 4);
        gt_seed(10 + (uint64_t)r);
        gt_fill(h[r], maxn, -1, 1);
        if (sdnn_dmalloc(ctx, maxn * 4, (void **)&d[r])) DIE("device buffers");
    }
    if (!json)
        printf("# allreduce-mean, backend %s, %d rank(s), codec %s\n%12s %12s %10s %10s %8s\n",
               backend, W, cname, "size(B)", "time(us)", "algbw", "busbw", "#wrong");
    else
        printf("[\n");
    int first = 1;
    long wrong_total = 0, checked = 0;
    double best_busbw = 0;
    for (size_t bytes = 4096; bytes <= maxb; bytes *= 4) {
        size_t n = bytes / 4;
        double t[7];
        long wrong = -1;
        for (int k = 0; k < 7; ++k) {
            for (int r = 0; r < W; ++r) sdnn_dcopy(ctx, 0, d[r], h[r], n * 4, 1);
            double t0 = now();
            sdnn_status s = codec == &sdnn_codec_none
                                ? c->ops->allreduce_mean(c, (const float *const *)d, W, d[0], n)
                                : c->ops->allreduce_mean_coded(c, codec, &p, 5,
                                                               (const float *const *)d, W, d, n,
                                                               NULL);
            t[k] = now() - t0;
            if (s) DIE("allreduce of %zu bytes", bytes);
        }
        if (n <= ((size_t)4 << 20)) {
            /* #wrong: elements that differ from the host reference */
            if (codec == &sdnn_codec_none) {
                sdnn_mean_buffers((const float *const *)h, W, ref, n);
            } else {
                local->ops->allreduce_mean_coded(local, codec, &p, 5, (const float *const *)h, W,
                                                 hout, n, NULL);
                memcpy(ref, hout[0], n * 4);
            }
            sdnn_dcopy(ctx, 0, got, d[0], n * 4, 1);
            wrong = 0;
            for (size_t i = 0; i < n; ++i) wrong += memcmp(&got[i], &ref[i], 4) != 0;
            wrong_total += wrong;
            ++checked;
        }
        double tm = median(t, 7), alg = (double)bytes / tm / 1e9;
        double bus = W > 1 ? alg * 2.0 * (W - 1) / W : alg;
        if (bus > best_busbw) best_busbw = bus;
        if (json)
            printf("%s  {\"backend\": \"%s\", \"ranks\": %d, \"codec\": \"%s\", \"size\": %zu, "
                   "\"time_us\": %.2f, \"algbw\": %.3f, \"busbw\": %.3f, \"wrong\": %ld}",
                   first ? "" : ",\n", backend, W, cname, bytes, tm * 1e6, alg, bus, wrong);
        else if (wrong >= 0)
            printf("%12zu %12.2f %10.3f %10.3f %8ld\n", bytes, tm * 1e6, alg, bus, wrong);
        else
            printf("%12zu %12.2f %10.3f %10.3f %8s\n", bytes, tm * 1e6, alg, bus, "-");
        first = 0;
    }
    if (json) printf("\n]\n");
    printf("RESULT comm backend=%s ranks=%d codec=%s wrong=%ld checked_sizes=%ld busbw_max=%.3f\n",
           backend, W, cname, wrong_total, checked, best_busbw);
    for (int r = 0; r < W; ++r) {
        sdnn_dfree(d[r]);
        free(h[r]);
        free(hout[r]);
    }
    free(ref);
    free(got);
    sdnn_comm_close(c);
    sdnn_comm_close(local);
    sdnn_dctx_destroy(ctx);
    if (!checked) {
        fprintf(stderr, "comm: no size was checked (-max below 4 KiB)\n");
        return 3;
    }
    return wrong_total ? 3 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "bench_gpu bandwidth|train|comm ...\n");
        return 2;
    }
    if (!strcmp(argv[1], "bandwidth")) return bench_bandwidth(argc, argv);
    if (!strcmp(argv[1], "train")) return bench_train(argc, argv);
    if (!strcmp(argv[1], "comm")) return bench_comm(argc, argv);
    fprintf(stderr, "bench_gpu: unknown %s\n", argv[1]);
    return 2;
}
