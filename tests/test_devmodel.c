/*
 * The device models of `scalednn simulate` (plugin/devmodel.c): the
 * registry, the work counted for each layer (by hand for a small net), the
 * roofline (compute-bound convolutions, bandwidth-bound pooling), a profile
 * laid out like the measured one, and the command: a GPU topology uses a
 * GPU model by default and says which, so stock Darknet no longer looks
 * 98% efficient on 8 PCIe GPUs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include "devmodel.h"
#include "profile.h"
#include "replicas.h"

#include <darknet.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *SMALL_CFG =
    "[net]\nbatch=2\nsubdivisions=1\nwidth=8\nheight=8\nchannels=3\n"
    "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[cost]\ntype=sse\n";

static void test_registry(void **state)
{
    (void)state;
    const char *names[] = {"v100", "v100-pcie", "t4", "rtx3090", "a100", "l4", "h100", "h200"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        const sdnn_device_model *d = sdnn_device_model_find(names[i]);
        assert_non_null(d);
        assert_string_equal(d->name, names[i]);
        assert_true(d->fp32_flops > 1e12 && d->mem_Bps > 1e11);
        assert_non_null(strstr(sdnn_device_model_names(), names[i]));
    }
    assert_null(sdnn_device_model_find("v200"));
    assert_null(sdnn_device_model_find(NULL));
    /* published figures of two of them */
    assert_true(fabs(sdnn_device_model_find("v100")->fp32_flops - 15.7e12) < 1e9);
    assert_true(fabs(sdnn_device_model_find("h200")->mem_Bps - 4.8e12) < 1e9);
}

/* The work of each layer of SMALL_CFG, counted by hand from its geometry. */
static void test_layer_work_by_hand(void **state)
{
    (void)state;
    network *net = tu_parse(SMALL_CFG);
    assert_non_null(net);
    sdnn_layer_work f, b, u;
    /* conv: 2 images of 8x8x3 -> 8x8x4, 3x3x3 = 27 multiply-adds per
     * output: x = 384, y = 512 values, 108 weights */
    sdnn_layer_work_of(net, 0, &f, &b, &u);
    assert_true(f.flops == 2.0 * 27 * 512);
    assert_true(f.bytes == 4.0 * (384 + 512 + 108) + 2 * 4.0 * 512 + 2 * 4.0 * 512);
    assert_int_equal(f.kernels, 3);
    /* layer 0 computes no input gradient: weight gradient only */
    assert_true(b.flops == 2.0 * 27 * 512);
    assert_int_equal(b.kernels, 3);
    /* update: 108 weights + 4 biases, read and write weight and update */
    assert_true(u.bytes == 16.0 * (108 + 4));
    assert_int_equal(u.kernels, 2);
    /* maxpool 2x2/2: 8x8x4 -> 4x4x4 per image: 4 comparisons per output */
    sdnn_layer_work_of(net, 1, &f, &b, &u);
    assert_true(f.flops == 2.0 * 64 * 4);
    assert_true(f.bytes == 4.0 * 2 * (256 + 2 * 64));
    assert_true(u.bytes == 0 && u.kernels == 0);
    /* connected 64 -> 5: input gradient too (not the first layer) */
    sdnn_layer_work_of(net, 2, &f, &b, &u);
    assert_true(f.flops == 2.0 * 64 * 10);
    assert_true(b.flops == 2 * 2.0 * 64 * 10);
    assert_int_equal(b.kernels, 4);
    assert_true(u.bytes == 16.0 * (320 + 5));

    /* the roofline with round numbers: 1 MFLOP/s, 10 kB/s, 1 ms a launch */
    sdnn_device_model d = {"test", "test", 1e6, 1e4, 1, 1.0, 1.0, 1e-3, 1e3};
    sdnn_layer_work w = {2000, 10, 0, 2};           /* compute-bound: 2 ms + 2 ms */
    assert_true(fabs(sdnn_device_model_time(&d, &w) - 4e-3) < 1e-12);
    w = (sdnn_layer_work){10, 100, 0, 1};           /* memory-bound: 10 ms + 1 ms */
    assert_true(fabs(sdnn_device_model_time(&d, &w) - 11e-3) < 1e-12);
    w = (sdnn_layer_work){0, 0, 500, 1};            /* host copies: 0.5 s + 1 ms */
    assert_true(fabs(sdnn_device_model_time(&d, &w) - 0.501) < 1e-12);
    w = (sdnn_layer_work){0, 0, 0, 0};
    assert_true(sdnn_device_model_time(&d, &w) == 0);
    /* codec rate: reads 4 bytes, writes 2 (fp16), one sweep; top-k thirds */
    assert_true(fabs(sdnn_device_model_codec_Bps(&d, 0.5, 1) - 1e4 * 4 / 6) < 1e-9);
    assert_true(fabs(sdnn_device_model_codec_Bps(&d, 0.5, 3) - 1e4 * 4 / 18) < 1e-9);
    sdnn_network_free(net);
}

/* A 416x416 yolov3-tiny-sized convolution is compute-bound on a V100
 * (its time within 2% of flops / achievable rate), a maxpool is bandwidth
 * bound. */
static void test_roofline_regimes(void **state)
{
    (void)state;
    network *net = tu_parse("[net]\nbatch=16\nwidth=104\nheight=104\nchannels=64\n"
                            "[convolutional]\nfilters=128\nsize=3\nstride=1\npad=1\n"
                            "activation=leaky\n"
                            "[maxpool]\nsize=2\nstride=2\n");
    assert_non_null(net);
    const sdnn_device_model *d = sdnn_device_model_find("v100");
    sdnn_layer_work f, b, u;
    sdnn_layer_work_of(net, 0, &f, &b, &u);
    double tc = f.flops / (d->fp32_flops * d->compute_eff);
    double t = sdnn_device_model_time(d, &f);
    assert_true(t >= tc && t < tc * 1.02);
    sdnn_layer_work_of(net, 1, &f, &b, &u);
    double tm = f.bytes / (d->mem_Bps * d->mem_eff);
    t = sdnn_device_model_time(d, &f);
    assert_true(fabs(t - (tm + d->launch_s)) < 1e-12);
    assert_true(f.flops / (d->fp32_flops * d->compute_eff) < tm);
    sdnn_network_free(net);
}

/* The modelled profile has the measured profile's layout: layers, types,
 * exchanged bytes, tensors, batch; nothing before a stopbackward runs
 * backward. */
static void test_profile_layout(void **state)
{
    (void)state;
    const char *cfg =
        "[net]\nbatch=2\nsubdivisions=2\nwidth=8\nheight=8\nchannels=3\n"
        "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
        "stopbackward=1\n"
        "[convolutional]\nbatch_normalize=1\nfilters=6\nsize=1\nstride=1\npad=0\n"
        "activation=leaky\n"
        "[connected]\noutput=5\nactivation=linear\n"
        "[cost]\ntype=sse\n";
    network *net = tu_parse(cfg);
    assert_non_null(net);
    sdnn_cost_profile m, p;
    assert_int_equal(sdnn_device_model_profile(net, sdnn_device_model_find("a100"), &m), SDNN_OK);
    sdnn_profile_opts o = SDNN_PROFILE_OPTS_INIT;
    o.iters = 1;
    o.warmup = 0;
    assert_int_equal(sdnn_profile_network(net, &o, &p), SDNN_OK);
    assert_int_equal(m.n, p.n);
    assert_int_equal(m.batch, p.batch);
    assert_int_equal(m.subdivisions, p.subdivisions);
    for (int i = 0; i < m.n; ++i) {
        assert_string_equal(m.layer[i].type, p.layer[i].type);
        assert_true(m.layer[i].bytes == p.layer[i].bytes);
        assert_int_equal(m.layer[i].tensors, p.layer[i].tensors);
        assert_true(m.layer[i].fwd_s > 0);
    }
    assert_true(m.layer[0].bwd_s == 0 && m.layer[0].bytes == 0);
    assert_true(m.layer[1].bwd_s > 0 && m.layer[2].bwd_s > 0);
    assert_true(m.layer[1].upd_s > 0);
    sdnn_cost_profile_free(&m);
    sdnn_cost_profile_free(&p);
    assert_int_equal(sdnn_device_model_profile(net, NULL, &m), SDNN_ERR_INVALID);
    sdnn_network_free(net);
}

/* Efficiency of `variant` at world `w` in a simulate CSV, or -1. */
static double csv_eff(const char *csv, const char *variant, int w)
{
    char want[64];
    snprintf(want, sizeof want, ",%s,1,%d,%d,", variant, w, w);
    const char *p = strstr(csv, want);
    if (!p) return -1;
    /* step_s,compute_s,exposed_s,comm_s,efficiency */
    p += strlen(want);
    for (int k = 0; k < 4; ++k) {
        p = strchr(p, ',');
        if (!p) return -1;
        ++p;
    }
    return atof(p);
}

static void test_simulate_command(void **state)
{
    (void)state;
    const char *bin = getenv("SDNN_DARKNET_BIN");
    if (!bin) bin = "./darknet";
    char dir[] = "/tmp/sdnn-devmodel-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    /* default on pcie: the V100 PCIe model, named with its figures */
    int rc = tu_run("%s scalednn simulate cfg/shapes-scalednn.cfg -topology pcie -gpus 8 "
                    "-csv %s/gpu.csv >%s/gpu.log 2>&1", bin, dir, dir);
    if (rc) tu_run("tail -5 %s/gpu.log", dir);
    assert_int_equal(rc, 0);
    snprintf(path, sizeof path, "%s/gpu.log", dir);
    char *log = tu_slurp(path);
    assert_non_null(log);
    assert_non_null(strstr(log, "device: v100-pcie, NVIDIA Tesla V100 PCIe: 14.0 TFLOP/s fp32"));
    assert_non_null(strstr(log, "compute per GPU step:"));
    free(log);
    snprintf(path, sizeof path, "%s/gpu.csv", dir);
    char *csv = tu_slurp(path);
    assert_non_null(csv);
    double stock_gpu = csv_eff(csv, "stock", 8), overlap_gpu = csv_eff(csv, "overlap", 8);
    free(csv);
    /* --device cpu: this machine's profile, as before */
    rc = tu_run("%s scalednn simulate cfg/shapes-scalednn.cfg -topology pcie -gpus 8 "
                "-device cpu -iters 2 -csv %s/cpu.csv >%s/cpu.log 2>&1", bin, dir, dir);
    assert_int_equal(rc, 0);
    snprintf(path, sizeof path, "%s/cpu.log", dir);
    log = tu_slurp(path);
    assert_non_null(strstr(log, "device: cpu (this machine's measured profile"));
    free(log);
    snprintf(path, sizeof path, "%s/cpu.csv", dir);
    csv = tu_slurp(path);
    double stock_cpu = csv_eff(csv, "stock", 8);
    free(csv);
    print_message("stock efficiency on 8 PCIe GPUs: v100-pcie model %.3f, this CPU's "
                  "profile %.3f; overlap (model) %.3f\n", stock_gpu, stock_cpu, overlap_gpu);
    assert_true(stock_gpu > 0 && stock_cpu > 0);
    /* a GPU computes a step ~100x faster than one core here, so the same
     * weight averaging costs far more of it */
    assert_true(stock_gpu < stock_cpu - 0.1);
    assert_true(overlap_gpu > stock_gpu);
    /* bad devices */
    rc = tu_run("%s scalednn simulate cfg/shapes-scalednn.cfg -topology pcie -device v200 "
                ">%s/bad.log 2>&1", bin, dir);
    assert_int_equal(rc, 2);
    snprintf(path, sizeof path, "%s/bad.log", dir);
    log = tu_slurp(path);
    assert_non_null(strstr(log, "-device v200: unknown device (v100, "));
    free(log);
    rc = tu_run("%s scalednn simulate cfg/shapes-scalednn.cfg -topology pcie -device v100 "
                "-profile %s/none.prof >%s/bad2.log 2>&1", bin, dir, dir);
    assert_int_equal(rc, 2);
    snprintf(path, sizeof path, "%s/bad2.log", dir);
    log = tu_slurp(path);
    assert_non_null(strstr(log, "-device and -profile are alternatives"));
    free(log);
    /* a cfg without [scalednn] (bucket_mb=auto) simulates too */
    rc = tu_run("%s scalednn simulate cfg/shapes.cfg -topology nvlink -gpus 4 >%s/auto.log "
                "2>&1", bin, dir);
    assert_int_equal(rc, 0);
    snprintf(path, sizeof path, "%s/auto.log", dir);
    log = tu_slurp(path);
    assert_non_null(strstr(log, "device: v100, NVIDIA Tesla V100 SXM2"));
    assert_non_null(strstr(log, "bucket_mb=auto starts with 1 MiB buckets"));
    free(log);
    tu_run("rm -rf %s", dir);
}

/* The rows of simulate's table `lines` lines below the one with `head`:
 * per row, world and the NVARIANTS (a, b) pairs (step_ms and eff, or
 * factor and tta_ms/N); the number of rows. */
enum { SIM_VARIANTS = 5 };
typedef struct sim_line {
    int world;
    double a[SIM_VARIANTS], b[SIM_VARIANTS];
} sim_line;

static int sim_rows(const char *log, const char *head, int lines, sim_line *out, int max)
{
    const char *p = strstr(log, head);
    if (!p) return -1;
    for (int skip = 0; skip < lines && p; ++skip) p = strchr(p + 1, '\n');   /* head's lines */
    int n = 0;
    while (p && n < max) {
        ++p;
        int w, h, used;
        if (sscanf(p, "%d %d%n", &w, &h, &used) != 2) break;
        const char *q = p + used;
        out[n].world = w;
        for (int v = 0; v < SIM_VARIANTS; ++v) {
            if (sscanf(q, " | %lf %lf%n", &out[n].a[v], &out[n].b[v], &used) != 2) return -1;
            q += used;
        }
        ++n;
        p = strchr(p, '\n');
    }
    return n;
}

/* simulate prints time to accuracy beside the step: for every variant
 * factor x step (stock and none 1, the codec's factor where it codes, the
 * plan's largest for the planned variant), and the planned variant, which
 * minimises it, leaves a codec out whose factor no step gain pays. */
static void test_simulate_time_to_accuracy(void **state)
{
    (void)state;
    const char *bin = getenv("SDNN_DARKNET_BIN");
    if (!bin) bin = "./darknet";
    char dir[] = "/tmp/sdnn-devmodel-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *factors[] = {"topk:2", "topk:100"};
    for (int fi = 0; fi < 2; ++fi) {
        int rc = tu_run("(cat cfg/shapes.cfg; printf '[scalednn]\\ncompress=auto\\n"
                        "iter_factor=%s\\n') >%s/tta.cfg && %s scalednn simulate %s/tta.cfg "
                        "-topology eth -gpus 1 -nodes 4 -codec topk -compress_allow none,topk "
                        ">%s/tta.log 2>&1", factors[fi], dir, bin, dir, dir);
        if (rc) tu_run("tail -5 %s/tta.log", dir);
        assert_int_equal(rc, 0);
        char path[256];
        snprintf(path, sizeof path, "%s/tta.log", dir);
        char *log = tu_slurp(path);
        assert_non_null(log);
        char want[128];
        snprintf(want, sizeof want, "iteration factors (the cfg's iter_factor= over the codecs' "
                 "own): none 1, topk %s;", factors[fi] + 5);
        assert_non_null(strstr(log, want));
        sim_line step[8], tta[8];
        int ns = sim_rows(log, " gpus hosts | stock", 2, step, 8);
        int nt = sim_rows(log, "time to accuracy = N x factor x step", 3, tta, 8);
        assert_int_equal(ns, 3);   /* worlds 1, 2, 4 */
        assert_int_equal(nt, ns);
        double topk = atof(factors[fi] + 5);
        for (int i = 0; i < nt; ++i) {
            assert_int_equal(tta[i].world, step[i].world);
            for (int v = 0; v < SIM_VARIANTS; ++v) {
                double f = tta[i].a[v], t = tta[i].b[v], s = step[i].a[v];
                /* both printed to 0.0005 ms, the factors exactly */
                if (fabs(t - f * s) > 0.0005 * (1 + f))
                    fail_msg("world %d variant %d: tta %.3f, factor %g x step %.3f", tta[i].world,
                             v, t, f, s);
                if (v < 3) assert_true(f == 1.0);   /* stock, no-overlap, overlap */
            }
            /* overlap+topk codes every bucket from world 2 on */
            assert_true(tta[i].a[3] == (tta[i].world > 1 ? topk : 1.0));
            /* planned: none's 1 or top-k's factor; at 100 top-k never pays */
            assert_true(tta[i].a[4] == 1.0 || tta[i].a[4] == topk);
            if (topk == 100) assert_true(tta[i].a[4] == 1.0);
        }
        free(log);
    }
    tu_run("rm -rf %s", dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_layer_work_by_hand),
        cmocka_unit_test(test_roofline_regimes),
        cmocka_unit_test(test_profile_layout),
        cmocka_unit_test(test_simulate_command),
        cmocka_unit_test(test_simulate_time_to_accuracy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
