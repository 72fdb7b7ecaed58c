/*
 * gpu_test: what the self-checking programs of tests/gpu/ share: a check
 * counter with file:line messages (the program's exit status is the
 * number of failed checks, so run.sh fails on any), networks parsed from
 * cfg text with the [net] keys a test needs, random parameters, relative
 * errors, and detection batches made in memory (the GPU machine has no
 * image files and no OpenCV).
 */
#ifndef SDNN_GPU_TEST_H
#define SDNN_GPU_TEST_H

#include "splitmix.h"
#include "scalednn.h"
#include "dialect.h"
#include <darknet.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Each program uses some of these. */
#include "../margin.h"

#define GT_FN static __attribute__((unused))

static int gt_failed, gt_passed;

GT_FN void gt_check(int ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
GT_FN void gt_check(int ok, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (ok) {
        ++gt_passed;
        if (getenv("GT_VERBOSE")) {
            printf("  ok    ");
            vprintf(fmt, ap);
            printf("\n");
        }
    } else {
        ++gt_failed;
        printf("  FAIL  %s:%d: ", file, line);
        vprintf(fmt, ap);
        printf("\n");
    }
    va_end(ap);
}

/* An assertion that does not stop the test: a failure prints FAIL and counts
 * in gt_failed; gt_summary makes the program exit non-zero. */
#define SOFT_ASSERT(cond, ...) gt_check(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
/* A library call that must succeed; on failure the test cannot go on. */
#define GT_OK(call)                                                                      \
    do {                                                                                 \
        sdnn_status gt_s_ = (call);                                                      \
        if (gt_s_ != SDNN_OK) {                                                          \
            gt_check(0, __FILE__, __LINE__, "%s: %s: %s", #call, sdnn_strerror(gt_s_),  \
                     sdnn_last_error());                                                 \
            return gt_summary(argv0_);                                                   \
        }                                                                                \
    } while (0)

static const char *argv0_ __attribute__((unused)) = "test";

GT_FN int gt_summary(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, gt_passed, gt_failed);
    return gt_failed ? 1 : 0;
}

/* ---- random numbers ---------------------------------------------------------- */

static uint64_t gt_rng_state = 0x9e3779b97f4a7c15ull;

GT_FN void gt_seed(uint64_t s) { gt_rng_state = s ? s : 1; }

GT_FN uint64_t gt_next(void)
{
    return sdnn_splitmix64_next(&gt_rng_state);
}

GT_FN float gt_unif(float lo, float hi)
{
    return lo + (hi - lo) * (float)((gt_next() >> 40) * 0x1p-24);
}

GT_FN void gt_fill(float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; ++i) x[i] = gt_unif(lo, hi);
}

/* ---- comparisons -------------------------------------------------------------- */

/* ||a - b|| / ||b||; with ||b|| == 0, ||a - b|| itself. */
GT_FN double gt_relerr(const float *a, const float *b, size_t n)
{
    double d = 0, r = 0;
    for (size_t i = 0; i < n; ++i) {
        double e = (double)a[i] - (double)b[i];
        d += e * e;
        r += (double)b[i] * (double)b[i];
    }
    if (r == 0) return sqrt(d);
    return sqrt(d / r);
}

/* The largest gt_relerr over the parameters (and batch-norm running
 * statistics) of every convolutional and connected layer of a against b;
 * *worst_layer gets that layer (-1 when none differ). */
GT_FN double gt_param_err(network *a, network *b, int *worst_layer)
{
    double worst = 0;
    *worst_layer = -1;
    for (int i = 0; i < a->n; ++i) {
        layer *x = &a->layers[i], *y = &b->layers[i];
        if (x->type != CONVOLUTIONAL && x->type != CONNECTED) continue;
        size_t nw = x->type == CONNECTED ? (size_t)x->inputs * x->outputs : (size_t)x->nweights;
        size_t nb = x->type == CONNECTED ? (size_t)x->outputs : (size_t)x->n;
        double e = gt_relerr(x->weights, y->weights, nw);
        double eb = gt_relerr(x->biases, y->biases, nb);
        if (eb > e) e = eb;
        if (x->batch_normalize) {
            double es = gt_relerr(x->scales, y->scales, nb);
            double em = gt_relerr(x->rolling_mean, y->rolling_mean, nb);
            double ev = gt_relerr(x->rolling_variance, y->rolling_variance, nb);
            if (es > e) e = es;
            if (em > e) e = em;
            if (ev > e) e = ev;
        }
        if (e > worst) worst = e, *worst_layer = i;
    }
    return worst;
}

GT_FN size_t gt_bytes_differ(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) k += x[i] != y[i];
    return k;
}

/* ---- networks ------------------------------------------------------------------ */

/* Parse cfg text; in its [net] section the keys given in `set` (lines
 * "key=value\n") replace the file's. */
GT_FN network *gt_parse_text(const char *text, const char *set)
{
    char path[] = "/tmp/sdnn-gpu-test-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "w");
    const char *p = text;
    int in_net = 0;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[1024];
        if (len >= sizeof line) len = sizeof line - 1;
        memcpy(line, p, len);
        line[len] = 0;
        int skip = 0;
        if (line[0] == '[') {
            if (in_net && set) fputs(set, f);
            in_net = strncmp(line, "[net]", 5) == 0 || strncmp(line, "[network]", 9) == 0;
        } else if (in_net && set) {
            const char *eq = strchr(line, '=');
            if (eq) {
                char key[128];
                size_t kl = (size_t)(eq - line);
                while (kl && (line[kl - 1] == ' ' || line[kl - 1] == '\t')) --kl;
                if (kl < sizeof key) {
                    memcpy(key, line, kl);
                    key[kl] = 0;
                    char pat[160];
                    snprintf(pat, sizeof pat, "%s=", key);
                    const char *q = set;
                    while ((q = strstr(q, pat)) != NULL) {
                        if (q == set || q[-1] == '\n') {
                            skip = 1;
                            break;
                        }
                        ++q;
                    }
                }
            }
        }
        if (!skip) fprintf(f, "%s\n", line);
        p = e ? e + 1 : p + len;
    }
    if (in_net && set) fputs(set, f);
    fclose(f);
    /* the project's parser: a cfg in the fork's dialect builds its network;
     * one in Debian's goes to parse_network_cfg untouched */
    network *net = sdnn_parse_network(path);
    unlink(path);
    return net;
}

GT_FN char *gt_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

GT_FN network *gt_parse_file(const char *path, const char *set)
{
    char *t = gt_read_file(path);
    if (!t) return NULL;
    network *n = gt_parse_text(t, set);
    free(t);
    return n;
}

/* Random parameters a trained network could have: weights as Darknet
 * initialises them but from our generator, non-trivial scales, biases and
 * running statistics. */
GT_FN void gt_randomize(network *net, uint64_t seed)
{
    gt_seed(seed);
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        int nw = l->type == CONNECTED ? l->inputs * l->outputs : l->nweights;
        int nb = l->type == CONNECTED ? l->outputs : l->n;
        if (l->type != CONVOLUTIONAL && l->type != CONNECTED) continue;
        float fan = l->type == CONNECTED ? (float)l->inputs
                                         : (float)(l->size * l->size * l->c / (l->groups > 0 ? l->groups : 1));
        float s = sqrtf(2.0f / fan);
        gt_fill(l->weights, (size_t)nw, -s, s);
        gt_fill(l->biases, (size_t)nb, -0.1f, 0.1f);
        if (l->batch_normalize) {
            gt_fill(l->scales, (size_t)nb, 0.5f, 1.5f);
            gt_fill(l->rolling_mean, (size_t)nb, -0.1f, 0.1f);
            gt_fill(l->rolling_variance, (size_t)nb, 0.5f, 1.5f);
        }
    }
}

/* Copy every parameter, running statistic and update buffer of src into
 * dst (same cfg), and the counters. */
GT_FN void gt_copy_net(network *dst, const network *src)
{
    for (int i = 0; i < src->n; ++i) {
        const layer *a = &src->layers[i];
        layer *b = &dst->layers[i];
        if (a->type != CONVOLUTIONAL && a->type != CONNECTED) continue;
        size_t nw = a->type == CONNECTED ? (size_t)a->inputs * a->outputs : (size_t)a->nweights;
        size_t nb = a->type == CONNECTED ? (size_t)a->outputs : (size_t)a->n;
        memcpy(b->weights, a->weights, nw * 4);
        memcpy(b->weight_updates, a->weight_updates, nw * 4);
        memcpy(b->biases, a->biases, nb * 4);
        memcpy(b->bias_updates, a->bias_updates, nb * 4);
        if (a->batch_normalize) {
            memcpy(b->scales, a->scales, nb * 4);
            memcpy(b->scale_updates, a->scale_updates, nb * 4);
            memcpy(b->rolling_mean, a->rolling_mean, nb * 4);
            memcpy(b->rolling_variance, a->rolling_variance, nb * 4);
        }
    }
    *dst->seen = *src->seen;
    *dst->t = *src->t;
}

/* ---- data made in memory ---------------------------------------------------------- */

/* A detection batch like the shapes set: a textured background and 1..3
 * filled squares or discs of random colour per image; the truth rows hold
 * (x, y, w, h, class) per object, relative to the image, then zeros. */
GT_FN data gt_detection_data(int rows, int w, int h, int c, int truths, int classes,
                              uint64_t seed)
{
    gt_seed(seed);
    data d;
    memset(&d, 0, sizeof d);
    d.X = make_matrix(rows, w * h * c);
    d.y = make_matrix(rows, truths);
    for (int r = 0; r < rows; ++r) {
        float *im = d.X.vals[r];
        for (int k = 0; k < c; ++k) {
            float base = gt_unif(0.2f, 0.8f);
            for (int i = 0; i < w * h; ++i) im[k * w * h + i] = base + gt_unif(-0.05f, 0.05f);
        }
        int nobj = 1 + (int)(gt_next() % 3);
        for (int o = 0; o < nobj && (o + 1) * 5 <= truths; ++o) {
            int cls = (int)(gt_next() % (uint64_t)classes);
            float bw = gt_unif(0.15f, 0.4f), bh = cls % 2 ? bw : gt_unif(0.15f, 0.4f);
            float cx = gt_unif(bw / 2, 1 - bw / 2), cy = gt_unif(bh / 2, 1 - bh / 2);
            float col[3] = {gt_unif(0, 1), gt_unif(0, 1), gt_unif(0, 1)};
            for (int y = 0; y < h; ++y) {
                for (int x = 0; x < w; ++x) {
                    float u = ((x + 0.5f) / w - cx) / (bw / 2), v = ((y + 0.5f) / h - cy) / (bh / 2);
                    int in = cls % 2 ? (u * u + v * v <= 1) : (fabsf(u) <= 1 && fabsf(v) <= 1);
                    if (!in) continue;
                    for (int k = 0; k < c; ++k) im[k * w * h + y * w + x] = col[k % 3];
                }
            }
            float *t = d.y.vals[r] + o * 5;
            t[0] = cx;
            t[1] = cy;
            t[2] = bw;
            t[3] = bh;
            t[4] = (float)cls;
        }
    }
    return d;
}

/* Classification rows: random inputs, one-hot truths. */
GT_FN data gt_class_data(int rows, int inputs, int classes, uint64_t seed)
{
    gt_seed(seed);
    data d;
    memset(&d, 0, sizeof d);
    d.X = make_matrix(rows, inputs);
    d.y = make_matrix(rows, classes);
    for (int r = 0; r < rows; ++r) {
        gt_fill(d.X.vals[r], (size_t)inputs, 0, 1);
        d.y.vals[r][gt_next() % (uint64_t)classes] = 1;
    }
    return d;
}

/* Rows [lo, lo + n) of d as a shallow view. */
GT_FN data gt_rows(data d, int lo, int n)
{
    data s = d;
    s.shallow = 1;
    s.X.rows = n;
    s.X.vals = d.X.vals + lo;
    s.y.rows = n;
    s.y.vals = d.y.vals + lo;
    return s;
}

/* The classes of net's first [yolo] head (1 where it has none): the truth
 * rows gt_detection_data makes for it. */
GT_FN int gt_yolo_classes(network *net)
{
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].type == YOLO) return net->layers[i].classes;
    return 1;
}

/* A layer whose loss the gpu engine computes on the host ([yolo], [region]). */
GT_FN int gt_is_host_loss(const layer *l) { return l->type == YOLO || l->type == REGION; }

/* Written out from the cfg, not from plugin/cuda/net.c (the host-loss
 * formula of hostloss.c and bench_hostloss.c): a later device pass reads
 * head i's output (region's own backward, a next layer that takes it as its
 * input, a route or shortcut that names it). */
GT_FN int gt_output_read_later(const network *net, int i)
{
    if (net->layers[i].type == REGION) return 1;
    if (i + 1 < net->n && net->layers[i + 1].type != ROUTE) return 1;
    for (int j = i + 1; j < net->n; ++j) {
        const layer *l = &net->layers[j];
        if (l->type == SHORTCUT && l->index == i) return 1;
        for (int k = 0; l->type == ROUTE && k < l->n; ++k)
            if (l->input_layers[k] == i) return 1;
    }
    return 0;
}

/* The yolov3-tiny-shaped detector of hostloss.c and engines.c at 32x32, with
 * batch= as given: the stride-2 maxpools, the stride-1 maxpool, the 1x1
 * bottleneck, two YOLO heads joined by route, upsample and route, as in
 * Darknet's yolov3-tiny.cfg, narrowed. */
#define GT_TINY_CFG(batch) \
    "[net]\nbatch=" #batch "\nsubdivisions=2\nwidth=32\nheight=32\nchannels=3\n"                  \
    "momentum=0.9\ndecay=0.0005\nlearning_rate=0.001\nburn_in=0\nmax_batches=100\n"               \
    "policy=steps\nsteps=80\nscales=.1\n"                                                         \
    "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n"  \
    "[maxpool]\nsize=2\nstride=2\n"                                                               \
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"  \
    "[maxpool]\nsize=2\nstride=2\n"                                                               \
    "[convolutional]\nbatch_normalize=1\nfilters=16\nsize=3\nstride=1\npad=1\nactivation=leaky\n" \
    "[maxpool]\nsize=2\nstride=2\n"                                                               \
    "[convolutional]\nbatch_normalize=1\nfilters=16\nsize=3\nstride=1\npad=1\nactivation=leaky\n" \
    "[maxpool]\nsize=2\nstride=1\n"                                                               \
    "[convolutional]\nbatch_normalize=1\nfilters=32\nsize=3\nstride=1\npad=1\nactivation=leaky\n" \
    "[convolutional]\nbatch_normalize=1\nfilters=16\nsize=1\nstride=1\npad=1\nactivation=leaky\n" \
    "[convolutional]\nbatch_normalize=1\nfilters=32\nsize=3\nstride=1\npad=1\nactivation=leaky\n" \
    "[convolutional]\nsize=1\nstride=1\npad=1\nfilters=24\nactivation=linear\n"                   \
    "[yolo]\nmask=3,4,5\nanchors=6,6, 10,10, 14,14, 20,20, 28,28, 40,40\nclasses=3\nnum=6\n"      \
    "jitter=.3\nignore_thresh=.7\ntruth_thresh=1\nrandom=0\n"                                     \
    "[route]\nlayers=-4\n"                                                                        \
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=1\nstride=1\npad=1\nactivation=leaky\n"  \
    "[upsample]\nstride=2\n"                                                                      \
    "[route]\nlayers=-1,4\n"                                                                      \
    "[convolutional]\nbatch_normalize=1\nfilters=16\nsize=3\nstride=1\npad=1\nactivation=leaky\n" \
    "[convolutional]\nsize=1\nstride=1\npad=1\nfilters=24\nactivation=linear\n"                   \
    "[yolo]\nmask=0,1,2\nanchors=6,6, 10,10, 14,14, 20,20, 28,28, 40,40\nclasses=3\nnum=6\n"      \
    "jitter=.3\nignore_thresh=.7\ntruth_thresh=1\nrandom=0\n"

#endif
