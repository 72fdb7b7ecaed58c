/*
 * Helpers shared by the CMocka tests: networks from cfg text, random batches
 * from a seeded generator (never rand(), which Darknet's threads share),
 * and comparisons of every trainable tensor.
 */
#ifndef SDNN_TESTUTIL_H
#define SDNN_TESTUTIL_H

#include "splitmix.h"
#include <darknet.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "replicas.h"

static inline uint64_t tu_next(uint64_t *s)
{
    return sdnn_splitmix64_next(s);
}

static inline float tu_uniform(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)((tu_next(s) >> 40) * (1.0 / 16777216.0));
}

/* Parse cfg text through a temporary file; the file is removed again. */
static inline network *tu_parse(const char *text)
{
    char path[] = "/tmp/sdnn-test-cfg-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return NULL;
    size_t len = strlen(text);
    if (write(fd, text, len) != (ssize_t)len) {
        close(fd);
        unlink(path);
        return NULL;
    }
    close(fd);
    network *net = parse_network_cfg(path);
    unlink(path);
    return net;
}

/* A classification batch: rows x (w*h*c) inputs in [0,1), one-hot labels. */
static inline data tu_batch(uint64_t *seed, int rows, int inputs, int classes)
{
    data d = {0};
    d.X = make_matrix(rows, inputs);
    d.y = make_matrix(rows, classes);
    for (int i = 0; i < rows; ++i) {
        for (int j = 0; j < inputs; ++j) d.X.vals[i][j] = tu_uniform(seed, 0.f, 1.f);
        d.y.vals[i][tu_next(seed) % (uint64_t)classes] = 1.f;
    }
    return d;
}

/* Copy src's parameters, updates and running statistics into dst. */
static inline void tu_copy_params(network *src, network *dst)
{
    network *pair[2] = {src, dst};
    size_t seen = *dst->seen;
    sdnn_replicas_broadcast(pair, 2);
    *dst->seen = seen;
}

/* Relative Frobenius difference of all trainable tensors of a and b. */
static inline double tu_rel_diff(network *a, network *b)
{
    double num = 0, den = 0;
    for (int i = 0; i < a->n; ++i) {
        sdnn_param pa[SDNN_MAX_PARAMS_PER_LAYER], pb[SDNN_MAX_PARAMS_PER_LAYER];
        int k = sdnn_layer_params(&a->layers[i], pa);
        sdnn_layer_params(&b->layers[i], pb);
        for (int j = 0; j < k; ++j)
            for (size_t e = 0; e < pa[j].n; ++e) {
                double d = (double)pa[j].val[e] - (double)pb[j].val[e];
                num += d * d;
                den += (double)pa[j].val[e] * (double)pa[j].val[e];
            }
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* 1 when every tensor, update buffer and running statistic is equal bit
 * for bit; prints the first difference otherwise. */
static inline int tu_bitwise_equal(network *a, network *b)
{
    for (int i = 0; i < a->n; ++i) {
        layer *la = &a->layers[i], *lb = &b->layers[i];
        sdnn_param pa[SDNN_MAX_PARAMS_PER_LAYER], pb[SDNN_MAX_PARAMS_PER_LAYER];
        int k = sdnn_layer_params(la, pa);
        sdnn_layer_params(lb, pb);
        for (int j = 0; j < k; ++j) {
            if (memcmp(pa[j].val, pb[j].val, pa[j].n * sizeof(float))) {
                fprintf(stderr, "layer %d %s differ\n", i, pa[j].what);
                return 0;
            }
            if (memcmp(pa[j].upd, pb[j].upd, pa[j].n * sizeof(float))) {
                fprintf(stderr, "layer %d %s updates differ\n", i, pa[j].what);
                return 0;
            }
        }
        if (la->batch_normalize && la->rolling_mean && la->type == CONVOLUTIONAL) {
            if (memcmp(la->rolling_mean, lb->rolling_mean, (size_t)la->n * sizeof(float)) ||
                memcmp(la->rolling_variance, lb->rolling_variance, (size_t)la->n * sizeof(float))) {
                fprintf(stderr, "layer %d rolling statistics differ\n", i);
                return 0;
            }
        }
    }
    return 1;
}

/* Run a shell command built like printf: its exit status, or -1 when it
 * did not exit normally. */
static inline int tu_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int tu_run(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

/* The whole of a file as a malloc'd NUL-terminated string, or NULL; *len
 * (may be NULL) gets its size in bytes (it may hold NULs). */
static inline char *tu_slurp_len(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s) {
        fclose(f);
        return NULL;
    }
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    fclose(f);
    if (len) *len = (long)got;
    return s;
}

static inline char *tu_slurp(const char *path)
{
    return tu_slurp_len(path, NULL);
}

/* Write len bytes to path (created or truncated); 0, or -1. */
static inline int tu_put_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t put = fwrite(data, 1, len, f);
    return fclose(f) == 0 && put == len ? 0 : -1;
}

/* 1 when every parameter tensor and update buffer is equal bit for bit
 * (running statistics are not compared: they are per replica until a save
 * averages them); names the first difference on stderr otherwise. */
static inline int tu_params_equal(network *a, network *b)
{
    for (int i = 0; i < a->n; ++i) {
        sdnn_param pa[SDNN_MAX_PARAMS_PER_LAYER], pb[SDNN_MAX_PARAMS_PER_LAYER];
        int k = sdnn_layer_params(&a->layers[i], pa);
        sdnn_layer_params(&b->layers[i], pb);
        for (int j = 0; j < k; ++j)
            if (memcmp(pa[j].val, pb[j].val, pa[j].n * sizeof(float)) ||
                memcmp(pa[j].upd, pb[j].upd, pa[j].n * sizeof(float))) {
                fprintf(stderr, "layer %d %s differs\n", i, pa[j].what);
                return 0;
            }
    }
    return 1;
}

#endif
