/*
 * What the 1x1 delta fix costs: step time (train_network: forward, backward,
 * update at learning rate 0) of a cfg with fixed layers, with the fix
 * (hooks, fix_1x1_delta=1) and without it (Darknet's own functions, what
 * stock mode with fix_1x1_delta=0 runs), interleaved step by step in one
 * process on the same batch, one BLAS thread.
 *
 *   make bench && build/bench/bench_fix1x1 [-cfg cfg/shapes-res.cfg] [-n 100] [-fix bn]
 *
 * -fix bn: the batch-norm fix instead, both networks hooked with
 * the 1x1 fix, one with fix_bn_delta=0 (Darknet's batch-norm backward), one
 * with fix_bn_delta=1 (bnfix.c).
 *
 * Prints the median and minimum step time of each and their ratio.
 */
#include "splitmix.h"
#include "bench_util.h"
#include "blas.h"
#include "bnfix.h"
#include "hooks.h"
#include "replicas.h"

#include <darknet.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static uint64_t next(uint64_t *s)
{
    return sdnn_splitmix64_next(s);
}

int main(int argc, char **argv)
{
    const char *cfg = "cfg/shapes-res.cfg";
    int n = 100, bn = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-cfg") == 0) cfg = argv[i + 1];
        else if (strcmp(argv[i], "-n") == 0) n = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-fix") == 0) bn = strcmp(argv[i + 1], "bn") == 0;
    }
    if (n < 1) n = 1;
    network *net[2];
    for (int k = 0; k < 2; ++k) {
        srand(1);
        net[k] = parse_network_cfg((char *)cfg);
        net[k]->learning_rate = 0;   /* the weights stay put: every step is the same work */
    }
    if ((bn && sdnn_hooks_install(net[0], 0, SDNN_FIX_1X1) != SDNN_OK) ||
        sdnn_hooks_install(net[1], 0, SDNN_FIX_1X1 | (bn ? SDNN_FIX_BN : 0)) != SDNN_OK) {
        fprintf(stderr, "bench_fix1x1: %s\n", sdnn_last_error());
        return 1;
    }
    sdnn_blas_set_threads(1);
    int fixed = bn ? sdnn_bn_fix_count(net[1]) : sdnn_fix_1x1_count(net[1]);
    data d = {0};
    d.X = make_matrix(net[0]->batch, net[0]->inputs);
    d.y = make_matrix(net[0]->batch, net[0]->truths);
    uint64_t s = 7;
    for (int r = 0; r < d.X.rows; ++r)
        for (int c = 0; c < d.X.cols; ++c) d.X.vals[r][c] = (float)((next(&s) >> 40) / 16777216.0);
    /* One box per image (class, x, y, w, h) for the yolo heads. */
    for (int r = 0; r < d.y.rows; ++r) {
        d.y.vals[r][0] = 0.4f;
        d.y.vals[r][1] = 0.5f;
        d.y.vals[r][2] = 0.3f;
        d.y.vals[r][3] = 0.3f;
        d.y.vals[r][4] = 1;
    }
    double *t[2] = { calloc((size_t)n, sizeof(double)), calloc((size_t)n, sizeof(double)) };
    /* The yolo layers print a line per step on stdout. */
    fflush(stdout);
    int saved = dup(STDOUT_FILENO), devnull = open("/dev/null", O_WRONLY);
    if (saved >= 0 && devnull >= 0) dup2(devnull, STDOUT_FILENO);
    for (int w = 0; w < 3; ++w)
        for (int k = 0; k < 2; ++k) train_network(net[k], d);
    for (int i = 0; i < n; ++i)
        for (int k0 = 0; k0 < 2; ++k0) {
            int k = (i + k0) % 2;   /* alternate which goes first */
            double t0 = sdnn_now_s();
            train_network(net[k], d);
            t[k][i] = sdnn_now_s() - t0;
        }
    fflush(stdout);
    if (saved >= 0 && devnull >= 0) dup2(saved, STDOUT_FILENO);
    if (saved >= 0) close(saved);
    if (devnull >= 0) close(devnull);
    double med[2], mn[2];
    for (int k = 0; k < 2; ++k) {
        mn[k] = t[k][0];
        for (int i = 1; i < n; ++i)
            if (t[k][i] < mn[k]) mn[k] = t[k][i];
        med[k] = bench_median(t[k], n);
    }
    printf("%s: batch %d, %d fixed %s layers, %d steps each, interleaved\n", cfg, net[0]->batch,
           fixed, bn ? "batch-norm" : "1x1", n);
    printf("| %s | median step ms | min step ms |\n|---:|---:|---:|\n",
           bn ? "fix_bn_delta" : "fix_1x1_delta");
    printf("| 0 (Darknet) | %.2f | %.2f |\n| 1 (fixed) | %.2f | %.2f |\n", 1e3 * med[0],
           1e3 * mn[0], 1e3 * med[1], 1e3 * mn[1]);
    printf("fixed / Darknet: median %.3f, min %.3f\n", med[1] / med[0], mn[1] / mn[0]);
    sdnn_hooks_uninstall(net[0]);
    sdnn_hooks_uninstall(net[1]);
    free(t[0]);
    free(t[1]);
    free_data(d);
    sdnn_network_free(net[0]);
    sdnn_network_free(net[1]);
    return 0;
}
