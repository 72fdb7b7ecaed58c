/*
 * gradcheck: the gradient training computes, checked against central finite
 * differences of the loss, layer by layer (issue 17).
 *
 * The network is built from the cfg as training builds it (the [scalednn]
 * section parsed, stripped and applied, fix_1x1_delta included), one replica
 * trains one step through the trainer (engine, hooks, the exchange path of a
 * world of one) on a random batch, and the *_updates Darknet accumulated
 * are read before they move a weight: the step runs with learning rate 0,
 * momentum 1 and decay 0, so the update leaves the weights as they were and
 * the updates holding the batch-summed negative gradient.  Then, for a
 * sample of the weights, biases and scales of every layer with parameters,
 * the loss is evaluated (in double, from the heads' float outputs) at
 * theta +- h and compared.
 *
 * The objective is the one each head's delta is the negative gradient of:
 * sse cost 1/2 * scale * sum (t - x)^2 (Darknet reports the sum without
 * the 1/2), l1 scale * sum |t - x|, smooth-l1 its half, softmax -sum t log p.
 * yolo and region heads report |delta|^2, which their delta is not the
 * gradient of: the check replaces each by an sse head and checks the body
 * (the report says so).  Dropout draws its mask with rand(): every forward
 * of the check (and the training step) starts from the same srand seed, so
 * every evaluation uses the same mask and the difference is meaningful.
 *
 * Errors per sample: |g - f| / max(|g|, |f|, 1e-3 * max |g| of the tensor);
 * a layer passes when the median of its samples is at most its threshold.
 * A sample whose +-h step crosses a leaky/ReLU kink or a maxpool tie has an
 * O(1) error that says nothing about the code: when its one-sided slopes
 * disagree (SDNN_GRADCHECK_KINK) it is left out and counted.  The
 * threshold is SDNN_GRADCHECK_TOL, plus 2/N for every batch-normalised
 * layer the layer's output reaches, itself included (the layers its gradient
 * comes back through; N = batch x out_h x out_w, the values one channel's
 * statistics are taken over): Darknet's forward pass divides the variance
 * by N - 1 and its backward pass by N, which makes the gradient behind each
 * such layer wrong by about 1/N (measured: N x error = 1.0-1.4 for
 * N = 16..256; see docs/ARCHITECTURE.md).
 */
#ifndef SDNN_GRADCHECK_H
#define SDNN_GRADCHECK_H

#include "scalednn.h"
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The median error a layer without batch norm in its gradient path may
 * reach: float forward passes give finite differences good to ~1e-4 at the
 * default step; a lost gradient share gives 0.1 and more. */
#define SDNN_GRADCHECK_TOL 1e-2
/* One-sided slopes (f(x+h)-f(x))/h and (f(x)-f(x-h))/h differing by more
 * than this fraction: the step crossed a kink; the sample is left out. */
#define SDNN_GRADCHECK_KINK 0.5

typedef struct sdnn_gradcheck_opts {
    const char *engine; /* "cpu" (default); "gpu" is SDNN_ERR_UNSUPPORTED in this build */
    int samples;        /* per tensor (weights, biases, scales), >= 1 */
    uint64_t seed;      /* weights (srand before parsing), batch, dropout draws */
    double eps;         /* finite-difference step, > 0 */
} sdnn_gradcheck_opts;

#define SDNN_GRADCHECK_OPTS_INIT { "cpu", 8, 1, 1e-3 }

typedef struct sdnn_gradcheck_layer {
    int index;
    char type[32];      /* "convolutional 1x1", "connected", ... */
    size_t size;        /* parameters of the layer */
    int samples;        /* samples compared */
    int kinks;          /* samples left out: the +-h step crossed a kink */
    double max_rel, median_rel;
    double threshold;
    int bn_n;           /* smallest batch-norm N the layer's output reaches, 0: none */
    int fixed;          /* the 1x1 delta fix runs on this layer */
    int ntensors;
    struct {
        const char *what;   /* "weights", "biases", "scales" */
        int samples;
        double median_rel;
        double norm_rel;    /* |g - f| / |f| over the tensor's samples (2-norms) */
    } tensor[3];
    int pass;
} sdnn_gradcheck_layer;

typedef struct sdnn_gradcheck_report {
    int nlayers;        /* rows in layer[] (layers with parameters and a backward) */
    sdnn_gradcheck_layer *layer;
    int failed;         /* rows above their threshold */
    int mode_stock;     /* the cfg trains in stock mode */
    int fix_1x1_delta;
    int fixed_layers;   /* layers the fix runs on */
    double loss;        /* the objective at the trained point */
    char notes[1024];   /* heads replaced, dropout, ... one per line */
} sdnn_gradcheck_report;

/* Check the cfg text (`name` for messages).  SDNN_ERR_UNSUPPORTED: the
 * engine, a head or a layer this check cannot handle (the message says
 * which); SDNN_ERR_INVALID: bad options or cfg.  A layer over its threshold
 * is not an error: see report->failed. */
sdnn_status sdnn_gradcheck_text(const char *name, const char *text,
                                const sdnn_gradcheck_opts *o, sdnn_gradcheck_report *out);
/* The same for a cfg file. */
sdnn_status sdnn_gradcheck_file(const char *path, const sdnn_gradcheck_opts *o,
                                sdnn_gradcheck_report *out);
void sdnn_gradcheck_report_free(sdnn_gradcheck_report *r);

/* The table: index, type, size, samples, max and median relative error,
 * threshold, verdict; the notes; the thresholds' reason. */
void sdnn_gradcheck_print(const sdnn_gradcheck_report *r, FILE *f);

/* The engines gradcheck knows (the only list of their names), and whether
 * `engine` can run here: SDNN_ERR_INVALID unknown, SDNN_ERR_UNSUPPORTED
 * known but not in this build (gpu: issue 13), with the reason. */
const char *sdnn_gradcheck_engines(void);
sdnn_status sdnn_gradcheck_engine_check(const char *engine);

#endif
