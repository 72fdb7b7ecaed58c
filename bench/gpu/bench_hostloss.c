/*
 * bench_hostloss: what the gpu engine moves for its host-side losses and
 * the memory it holds against stock mode.
 *
 *   bench_hostloss bytes CFG [-batch 64] [-subdivisions 16] [-size 416] [-steps 1]
 *       one device net of CFG (Darknet's train_network on the device:
 *       sdnn_gpu_net_train) trains `steps` steps of `batch` images; per step
 *       the host-loss bytes by the formula (each [yolo]/[region] head:
 *       images x its inputs x 4 to the host, images x outputs x 4 back for
 *       the delta, again for the output where the device reads it later),
 *       by the net's counters and, on simulated devices, by the runtime's
 *       pinned copies (minus the slice's own inputs and truths); beside
 *       them the synchronous path it replaced (output and delta back, both
 *       through pageable memory).  #wrong: counters or copies that differ
 *       from the formula (exit 3).  The byte counts depend on the images a
 *       step and the heads' sizes, not on subdivisions (a pass of
 *       batch/subdivisions images moves that share).
 *   bench_hostloss memory CFG [-batch 8] [-subdivisions 2] [-size 416] [-replicas 2] [-steps 2]
 *       the trainer with engine=gpu in scalednn and in stock mode, each in
 *       a child process (tests/gpu/memstat.h): per replica the device
 *       peak, the bucket buffers and the host RSS; target: scalednn's peak
 *       <= stock's + the bucket buffers (snapshots included), #wrong the
 *       replicas over it (exit 3); the margin printed.  The device figure
 *       is the simulated runtime's (the sum of live allocations); the CUDA
 *       runtime keeps none, so there it says "not measured".
 *
 * One RESULT line (key=value) per run, for bench/gpu/run.sh.
 */
#include "gpu_test.h"
#include "replicas.h"

#include "memstat.h"

static int arg_int(int argc, char **argv, const char *name, int def)
{
    for (int i = 0; i + 1 < argc; ++i)
        if (!strcmp(argv[i], name)) return atoi(argv[i + 1]);
    return def;
}

static int bytes_cmd(const char *cfg, int argc, char **argv)
{
    int batch = arg_int(argc, argv, "-batch", 64), sub = arg_int(argc, argv, "-subdivisions", 16);
    int size = arg_int(argc, argv, "-size", 416), steps = arg_int(argc, argv, "-steps", 1);
    char set[128];
    snprintf(set, sizeof set, "batch=%d\nsubdivisions=%d\nwidth=%d\nheight=%d\n", batch, sub,
             size, size);
    network *net = gt_parse_file(cfg, set);
    if (!net) {
        fprintf(stderr, "bench_hostloss: cannot parse %s\n", cfg);
        return 2;
    }
    gt_randomize(net, 3);
    sdnn_gpu_options go = SDNN_GPU_OPTIONS_INIT;
    sdnn_gpu_vdev *vd = NULL;
    sdnn_gpu_net *g = NULL;
    if (sdnn_gpu_vdev_open(&go, &vd) != SDNN_OK || sdnn_gpu_net_create(net, vd, &g) != SDNN_OK) {
        fprintf(stderr, "bench_hostloss: %s\n", sdnn_last_error());
        return 2;
    }
    int images = net->batch * net->subdivisions, classes = 1;
    uint64_t fd2h = 0, fh2d = 0, sync_h2d = 0;
    printf("%s at %dx%d, %d images a step (%d passes of %d)\n", cfg, size, size, images,
           net->subdivisions, net->batch);
    printf("%-6s %-8s %12s %14s %14s\n", "layer", "type", "floats/img", "to host B/step",
           "back B/step");
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        if (!gt_is_host_loss(l)) continue;
        classes = l->classes;
        uint64_t in = (uint64_t)images * l->inputs * 4, out = (uint64_t)images * l->outputs * 4;
        uint64_t back = out * (gt_output_read_later(net, i) ? 2 : 1);
        fd2h += in;
        fh2d += back;
        sync_h2d += 2 * out;
        printf("%-6d %-8s %12d %14llu %14llu\n", i, l->type == YOLO ? "yolo" : "region",
               l->inputs, (unsigned long long)in, (unsigned long long)back);
    }
    sdnn_gpu_host_loss_stats h0, h1;
    sdnn_dev_stats s0, s1;
    int measured = sdnn_dev_stats_get(0, &s0) == SDNN_OK;
    sdnn_status st = sdnn_gpu_net_host_loss_stats(g, &h0);
    double t0 = sdnn_gpu_now();
    for (int k = 0; k < steps && st == SDNN_OK; ++k) {
        data d = gt_detection_data(images, net->w, net->h, net->c, net->truths, classes,
                                   50 + (uint64_t)k);
        float loss = 0;
        if (k == 0 && measured) sdnn_dev_stats_get(0, &s0);
        st = sdnn_gpu_net_train(g, d, &loss);
        free_data(d);
        if (st == SDNN_OK) st = sdnn_gpu_vdev_sync(vd);
    }
    double secs = sdnn_gpu_now() - t0;
    if (st == SDNN_OK) st = sdnn_gpu_net_host_loss_stats(g, &h1);
    if (st != SDNN_OK) {
        fprintf(stderr, "bench_hostloss: training: %s\n", sdnn_last_error());
        return 2;
    }
    if (measured) sdnn_dev_stats_get(0, &s1);
    uint64_t d2h = (h1.d2h_bytes - h0.d2h_bytes) / (uint64_t)steps;
    uint64_t h2d = (h1.h2d_bytes - h0.h2d_bytes) / (uint64_t)steps;
    uint64_t slice = (uint64_t)images * (net->inputs + net->truths) * 4;
    int wrong = (d2h != fd2h) + (h2d != fh2d);
    printf("per step: formula %llu B to the host, %llu back; counted %llu, %llu; the "
           "synchronous path moved %llu, %llu (back: output and delta)\n",
           (unsigned long long)fd2h, (unsigned long long)fh2d, (unsigned long long)d2h,
           (unsigned long long)h2d, (unsigned long long)fd2h, (unsigned long long)sync_h2d);
    uint64_t md2h = 0, mh2d = 0, pageable = 0;
    if (measured) {
        md2h = (s1.d2h_pinned_bytes - s0.d2h_pinned_bytes) / (uint64_t)steps;
        mh2d = (s1.h2d_pinned_bytes - s0.h2d_pinned_bytes) / (uint64_t)steps - slice;
        pageable = (s1.d2h_pageable_bytes - s0.d2h_pageable_bytes) / (uint64_t)steps;
        wrong += (md2h != fd2h) + (mh2d != fh2d);
        printf("measured (simulated runtime, pinned copies less the slice's %llu B): %llu to "
               "the host, %llu back; pageable to the host %llu (softmax/cost sums: %llu)\n",
               (unsigned long long)slice, (unsigned long long)md2h, (unsigned long long)mh2d,
               (unsigned long long)pageable,
               (unsigned long long)((h1.sum_bytes - h0.sum_bytes) / (uint64_t)steps));
    }
    double wait = (h1.wait_s - h0.wait_s) / steps, host = (h1.compute_s - h0.compute_s) / steps;
    printf("device wait on the host loss %.4f s a step, libdarknet's layers on the host %.4f "
           "s; step %.2f s\n", wait, host, secs / steps);
    printf("RESULT d2h=%llu h2d=%llu formula_d2h=%llu formula_h2d=%llu measured_d2h=%llu "
           "measured_h2d=%llu sync_h2d=%llu wait_s=%.4f compute_s=%.4f wrong=%d\n",
           (unsigned long long)d2h, (unsigned long long)h2d, (unsigned long long)fd2h,
           (unsigned long long)fh2d, (unsigned long long)md2h, (unsigned long long)mh2d,
           (unsigned long long)sync_h2d, wait, host, wrong);
    sdnn_gpu_net_destroy(g);
    sdnn_gpu_vdev_close(vd);
    sdnn_network_free(net);
    return wrong ? 3 : 0;
}

static int memory_cmd(const char *cfg, int argc, char **argv)
{
    int batch = arg_int(argc, argv, "-batch", 8), sub = arg_int(argc, argv, "-subdivisions", 2);
    int size = arg_int(argc, argv, "-size", 416), n = arg_int(argc, argv, "-replicas", 2);
    int steps = arg_int(argc, argv, "-steps", 2);
    if (n < 1 || n > GT_MEM_MAX) {
        fprintf(stderr, "bench_hostloss memory: -replicas 1..%d\n", GT_MEM_MAX);
        return 2;
    }
    char set[128];
    snprintf(set, sizeof set, "batch=%d\nsubdivisions=%d\nwidth=%d\nheight=%d\n", batch, sub,
             size, size);
    gt_mem sc, st;
    int a = gt_mem_measure(cfg, 1, set, n, 0, steps, &sc);
    int b = gt_mem_measure(cfg, 1, set, n, 1, steps, &st);
    if (!a || !b || !sc.ok || !st.ok) {
        fprintf(stderr, "bench_hostloss memory: a child failed: %s %s\n", sc.err, st.err);
        return 2;
    }
    printf("%s at %dx%d, batch %d, subdivisions %d, %d replicas, %d steps\n", cfg, size, size,
           batch, sub, n, steps);
    if (!sc.measured || !st.measured) {
        printf("device peak: not measured (the CUDA runtime keeps no allocation counter); "
               "bucket buffers %zu B per replica\n", sc.bucket[0]);
        printf("RESULT measured=0 bucket_bytes=%zu wrong=0\n", sc.bucket[0]);
        return 0;
    }
    size_t all = 0;
    for (int r = 0; r < n; ++r) all += sc.bucket[r];
    printf("%-8s %16s %16s %16s %14s %14s %14s\n", "replica", "scalednn peak B", "stock peak B",
           "bucket bufs B", "margin B", "RSS scalednn", "RSS stock");
    int wrong = 0;
    long worst = -1;
    for (int r = 0; r < n; ++r) {
        size_t buckets = sc.shared ? all : sc.bucket[r];
        long margin = (long)(st.dev_peak[r] + buckets) - (long)sc.dev_peak[r];
        if (margin < 0) ++wrong;
        if (worst < 0 || margin < worst) worst = margin;
        printf("%-8d %16zu %16zu %16zu %14ld %14zu %14zu\n", r, sc.dev_peak[r], st.dev_peak[r],
               buckets, margin, sc.rss_per_replica, st.rss_per_replica);
    }
    printf("RESULT measured=1 scalednn_peak=%zu stock_peak=%zu bucket_bytes=%zu margin=%ld "
           "rss_scalednn=%zu rss_stock=%zu wrong=%d\n", sc.dev_peak[0], st.dev_peak[0],
           sc.shared ? all : sc.bucket[0], worst, sc.rss_per_replica, st.rss_per_replica, wrong);
    return wrong ? 3 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "bytes") && strcmp(argv[1], "memory"))) {
        fprintf(stderr, "usage: bench_hostloss bytes|memory CFG [-batch N] [-subdivisions N] "
                        "[-size S] [-steps N] [-replicas N]\n");
        return 2;
    }
    if (!strcmp(argv[1], "bytes")) return bytes_cmd(argv[2], argc - 3, argv + 3);
    return memory_cmd(argv[2], argc - 3, argv + 3);
}
