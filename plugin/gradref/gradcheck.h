/*
 * gradcheck: the gradient training computes, checked in two stages against
 * a reference network in double precision (gradref.h; issues 17, 25).
 *
 * The network is built from the cfg as training builds it (the [scalednn]
 * section parsed, stripped and applied, its fixes included), one replica
 * trains one step through the trainer (engine, hooks, the exchange path of
 * a world of one) on a random batch, and the *_updates Darknet accumulated
 * are read before they move a weight (an engine's are pulled to the host):
 * the step runs with learning rate 0, momentum 1 and decay 0, so the
 * updates hold the batch-summed negative gradient.  The reference is built
 * from the same network (weights copied to double), fed the same batch and
 * the dropout masks the step drew.
 *
 * Stage 1 (the reference against its own objective): for a sample of the
 * weights, biases and scales of every layer with parameters, a central
 * difference of the reference's double objective at theta +- eps against
 * the reference's analytic gradient; error per sample
 * |g - f| / max(|g|, |f|, 1e-3 max |g| of the tensor); the layer's median
 * must be at most SDNN_GRADCHECK_REF_TOL.  A sample whose one-sided slopes
 * disagree by more than SDNN_GRADCHECK_KINK crossed a kink (leaky/ReLU at
 * 0, a maxpool tie) and is left out and counted.
 *
 * Stage 2 (the engine against the reference): every tensor whole: its
 * normwise error ||g - g_ref|| / ||g_ref||, its error along
 * SDNN_GRADCHECK_DIRS random +-1 directions d, |<g - g_ref, d>| / ||g_ref||,
 * and the median over stage 1's sampled elements of
 * |g_e - g_ref,e| / max(|g_ref,e|, ||g_ref|| / sqrt(n)).  The worst
 * normwise or element error over the layer's tensors must stay within the
 * error model of float accumulation, and each direction within
 * SDNN_GRADCHECK_DIR_T times its tensor's threshold: for d of independent
 * random signs, <e, d> = sum e_k d_k has variance ||e||^2 whatever e is,
 * and Hoeffding's inequality gives P(|<e, d>| > t ||e||) <= 2 exp(-t^2 / 2),
 * 2.5e-14 at t = 8, so an error within the normwise bound passes every
 * direction, and a gradient wrong along a whole tensor (a lost term, a
 * factor) fails along it:
 *
 *     threshold = SDNN_GRADCHECK_C x 2^-24 x sqrt(R) x cond,
 *     R = the reduction lengths along the gradient's path: the forward
 *         sums of every layer (each forward value feeds the loss and the
 *         deltas), the backward sums of every layer the layer's output
 *         reaches (itself included), plus the weight gradient's own sum
 *         over batch x subdivisions x out_h x out_w (sdnn_gradref_reduction;
 *         batch norm's mean and variance count as sums over their N).
 *
 *     cond = ||E|| / ||g_ref||, E_e = |g_ref,e| + q_e, q_e = sqrt(sum t^2)
 *         over the terms t that gradient element e sums
 *         (sdnn_gradref_grad_spread: dz x input, dz, dz x xhat), computed
 *         by the reference in double.
 *
 * The error model is a random walk: every rounding is an independent,
 * mean-zero error of at most u = 2^-24 relative to the value rounded.
 * Element e sums n terms t_k; each term arrives with the errors of its
 * path (relative standard deviation <= u sqrt(R_path), R_path the forward
 * and backward sums behind it), and each partial sum s_m of the final
 * accumulation is rounded once.  Independent errors add in variance:
 *
 *     sigma_e^2 <~ u^2 (R_path sum t_k^2 + sum_m s_m^2),
 *     sum_m s_m^2 <= n max |s_m|^2,  max |s_m| <~ |g_e| + q_e
 *
 * (the partial sums run from 0 to g_e along a walk whose steps have root
 * sum of squares q_e), so sigma_e <~ u sqrt(R) (|g_e| + q_e) with R =
 * R_path + n.  A sum without cancellation (n like terms) has q_e =
 * |g_e| / sqrt(n) and cond ~ 1; where terms cancel (a batch-normalised
 * layer's bias and scale gradients sum 8192 values of both signs at 64x64)
 * cond grows with q_e / |g_e|, the random walk's size against the result,
 * not with sum|t| / |g_e| (sqrt(n) larger: the worst case, every rounding
 * the same sign).  A common error shared by a channel's terms (batch norm's
 * mean and variance terms in dz) is a sum over that channel's N values,
 * and R holds 2N for each batch norm.  C = 16 = 2 x 8: up to 4 roundings
 * per counted addition (its product, the activation's derivative, batch
 * norm's steps: variance x 4, sigma x 2) and a confidence factor of 8
 * standard deviations (a Gaussian passes 8 sigma with probability ~1e-15;
 * over a tensor's norm the elements' errors average, so there it is
 * looser).  The sampled elements are judged each against its own bound
 * (|g_e - g_ref,e| / max(E_e, ||E|| / sqrt(n)), scaled by cond to the
 * tensor's threshold).  There is no allowance per batch norm: Darknet's N
 * vs N-1 mismatch (fix_bn_delta=0) is a ~1/N error and fails.
 *
 * The objective is the one each head's delta is the negative gradient of
 * (gradref.h).  A [yolo] head is checked with its own loss: the reference
 * computes Darknet's yolo delta in double (yolo_ref.c), its decisions
 * (ignore, truth_thresh, the anchor slots) made once from the double
 * forward of the batch and held, which makes the delta the negative
 * gradient of a smooth objective (gradref.h); the batch's truth is 2 to 4
 * random boxes an image; the report counts the elements the float forward
 * decided otherwise.  A [region] head likewise (region_ref.c: coords 4,
 * no background, tree or map; its decisions, targets (rescore's IOU
 * included) and the images seen held); the CPU engine passes its delta on
 * only with fix_region_delta (Debian's CPU backward is empty).  A
 * [region] the reference does not compute and the fork's [yolo] are
 * replaced by sse heads, the body checked (the report says so).
 * Dropout draws its mask with rand(): the
 * step and the host forward that captures the masks start from the same
 * srand seed.
 */
#ifndef SDNN_GRADCHECK_H
#define SDNN_GRADCHECK_H

#include "scalednn.h"
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Stage 1: the median error of double central differences against the
 * reference's backward: truncation eps^2 |f'''| / 6 plus rounding
 * 2^-53 |L| / eps, ~1e-7 at the default eps 1e-5 (a wrong derivative
 * gives 1e-2 and more). */
#define SDNN_GRADCHECK_REF_TOL 1e-5
/* One-sided slopes (f(x+h)-f(x))/h and (f(x)-f(x-h))/h differing by more
 * than this fraction: the step crossed a kink; the sample is left out. */
#define SDNN_GRADCHECK_KINK 0.5
/* Stage 2's constant (see above) and the random directions per tensor. */
#define SDNN_GRADCHECK_C 16.0
#define SDNN_GRADCHECK_DIRS 4
/* A direction's bound in units of its tensor's threshold (Hoeffding, above). */
#define SDNN_GRADCHECK_DIR_T 8.0

typedef struct sdnn_gradcheck_opts {
    const char *engine; /* "cpu" (default); "gpu" is SDNN_ERR_UNSUPPORTED in this build */
    int samples;        /* per tensor (weights, biases, scales), >= 1 */
    uint64_t seed;      /* weights (srand before parsing), batch, dropout draws */
    double eps;         /* stage 1's finite-difference step (double), > 0 */
    /* A test hook: the updates of layer test_layer (its first tensor) are
     * multiplied by test_factor after the step (-1: none), a wrong engine
     * gradient stage 2 must catch. */
    int test_layer;
    double test_factor;
} sdnn_gradcheck_opts;

#define SDNN_GRADCHECK_OPTS_INIT { "cpu", 8, 1, 1e-5, -1, 1.0 }

typedef struct sdnn_gradcheck_layer {
    int index;
    char type[32];      /* "convolutional 1x1", "connected", ... */
    size_t size;        /* parameters of the layer */
    int samples;        /* stage 1: samples compared */
    int kinks;          /* stage 1: samples left out: the +-h step crossed a kink */
    double ref_max_rel, ref_median_rel;   /* stage 1 */
    double ref_threshold;                 /* SDNN_GRADCHECK_REF_TOL */
    double max_rel;     /* stage 2: the worst normwise or element error over the tensors */
    double dir_rel;     /* stage 2: the random direction nearest its bound */
    double dir_threshold; /* stage 2: its bound, SDNN_GRADCHECK_DIR_T x its tensor's threshold */
    double median_rel;  /* stage 2: the worst tensor's sampled elements' median */
    double threshold;   /* stage 2: the error model's bound (of the row's tensor) */
    double cond;        /* stage 2: that tensor's condition (>= 1) */
    double reduction;   /* R of the error model */
    int bn_n;           /* smallest batch-norm N the layer's output reaches, 0: none */
    int fixed;          /* the 1x1 delta fix runs on this layer */
    int ntensors;
    struct {
        const char *what;   /* "weights", "biases", "scales" */
        int samples;
        double ref_median_rel;  /* stage 1 */
        double median_rel;      /* stage 2: sampled elements */
        double norm_rel;        /* stage 2: ||g - g_ref|| / ||g_ref||, the whole tensor */
        double dir_rel;         /* stage 2: the worst random direction */
        double cond;            /* ||E|| / ||g_ref||, E_e = |g_e| + sqrt(sum t^2) */
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
    int yolo_disagree;  /* [yolo] elements the reference decided otherwise than the float forward */
    long engine_decided_otherwise;  /* a device engine: activation pieces and maxpool choices its
                                     * own forward made otherwise than the host forward (adopted) */
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

/* The table: index, type, size, samples, kinks, stage 1's median and
 * threshold, stage 2's worst error and threshold, verdict; the notes; the
 * error model. */
void sdnn_gradcheck_print(const sdnn_gradcheck_report *r, FILE *f);

/* The engines gradcheck knows (the only list of their names), and whether
 * `engine` can run here: SDNN_ERR_INVALID unknown, SDNN_ERR_UNSUPPORTED
 * known but not in this build (gpu: GPU=1 only), with the reason. */
const char *sdnn_gradcheck_engines(void);
sdnn_status sdnn_gradcheck_engine_check(const char *engine);

#endif
