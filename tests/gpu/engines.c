/*
 * engines: the trainer (sdnn_trainer: the exchange, the scheduler, the
 * bucket layout) with engine=gpu (plugin/cuda/engine_gpu.c) against the
 * same trainer with engine=cpu (libdarknet's train_network with the
 * hooks) on the same batches.  On simulated devices (make GPU=sim) this
 * checks host logic, ordering and arithmetic and the CUDA kernels run as
 * themselves on the host executor, never a GPU or real NCCL.
 *
 *   shapes detector (cfg/shapes.cfg) and a yolov3-tiny-shaped cfg, STEPS
 *   (10) steps each (and cfg/shapes-v4tiny.cfg, shapes-v7tiny.cfg in the fork's
 *   dialect, 2 replicas, each in a child process of its own): 1, 2 and 4 replicas with overlap on, 4 with overlap off,
 *   bucket_mb fixed (several buckets) uncompressed; fp16, int8 and topk
 *   with error feedback; bucket_mb=auto (the planner re-plans after its
 *   profile); stock mode (Darknet's averaging every 4 iterations through
 *   pull/push):
 *     every parameter tensor within the error model below of the CPU's
 *     after each step, the loss within LOSS_TOL, and the device replicas
 *     bit-identical to each other after every step; the model must reject
 *     a state whose updates are half the GPU's (must fail);
 *   error feedback: every step the CPU exchange's .ef file is restored
 *   into the GPU one (the residuals then start equal, so one step's
 *   difference is bounded), and at the end the GPU's .ef restored into
 *   the CPU exchange saves byte for byte the same file;
 *   non-finite: a NaN in one replica's updates stops the step on both
 *   engines with the same message, and neither trainer saves;
 *   timeline: with timeline= the GPU trainer's trace holds device spans
 *   (forward, backward, each bucket's exchange) of every replica.
 *
 * Tolerance.  The device layers (layers.cu, bn.cu, conv.cu: blocks and
 * trees, OpenBLAS for cuBLAS on simulated devices) sum in their own order
 * and libdarknet in its own, so the two differ by rounding; free-running,
 * that drift grows until a YOLO threshold flips and the runs part.  As
 * tests/gpu/train.c does, every step therefore starts the GPU trainer's
 * replicas from the CPU trainer's state of that step (weights, momentum,
 * running statistics, seen, and the error-feedback residuals through .ef),
 * so the check bounds one step's difference.  A parameter tensor t passes
 * when ||t_gpu - t_cpu|| <= tol (||t_cpu|| + F_t), F_t the step's rate
 * times the norm of the per-channel sums of its gradient's terms'
 * magnitudes (biases and scales; see "the error model" below): the room
 * for rounding that tests/gpu/layers gives a per-channel sum, which a
 * wrong bucket, wrong mean, wrong residual or wrong learning rate (each
 * O(1) of the step on some layer) exceeds; tol is PARAM_TOL (1e-3) for
 * exact rows.  Lossy codecs round the fresh gradient,
 * and a rounding difference of 1e-6 can move an int8 value by one step
 * of its scale or swap two top-k entries of nearly equal magnitude: their
 * tol is LOSSY_TOL (3e-3), still far below a wrong mean (the mean of n
 * replicas is O(1) off) or a lost residual.
 * Each collective is held to its own reference: the CPU trainer's buckets
 * travel by collective.c's coded ring, so the lossy rows give the GPU
 * trainer's comm a link without latency, where the cost model prices the
 * coded ring (and fp16's native allreduce) below the all-gather at every
 * size (S* = 0; checked per bucket below); the all-gather, which the gpu
 * engine takes for small buckets on a real link, is held bit for bit to
 * its own host reference by tests/gpu/engine_ops and, through the whole
 * trainer, to the MPI path's losses by tests/gpu/cli_bytes.sh.
 * Stock mode has no exchange to reset state through, so the engine is
 * kept by a recording create, and there too each step starts from the
 * CPU's state (each device replica from its CPU twin's: stock replicas
 * train apart between syncs); the replicas are compared after each of
 * Darknet's syncs (every 4 steps), when the trainer brought them to the
 * host, against the mean over the replicas of the model's F_t: tol
 * STOCK_TOL (1e-3).  Free-running (no reset) the two engines part within
 * one interval once the learning rate is past burn-in: a rounding
 * difference grows through the steps (loss 3.6e-3 apart after 3 steps).
 * The loss is compared every step (LOSS_TOL, LOSSY_TOL, STOCK_TOL).
 * By hand: SDNN_ENGINES_ONLY=N runs only the shapes rows of N replicas
 * (=stock: the stock row),
 * SDNN_ENGINES_VERBOSE=1 prints every tensor above 0.3 of its bound.
 */
#include "config.h"
#include "dev.h"
#include "engine.h"
#include "gpu.h"
#include "gpu_comm.h"
#include "gpu_test.h"
#include "replicas.h"
#include "trainer.h"

#include <sys/wait.h>

#define LOSS_TOL 1e-3
#define PARAM_TOL 1e-3
#define LOSSY_TOL 3e-3
#define STOCK_TOL 1e-3
/* 10 steps a row (20 with the C twin): the layer kernels on the executor
 * cost about 2.7 times the twin's CPU time; 10 still pass burn-in (shapes:
 * 8 iterations) and bucket_mb=auto's profile (3 steps) and re-plan. */
#define STEPS 10
#define STOCK_STEPS 8
#define ROWS 8

/* The yolov3-tiny-shaped detector (gpu_test.h) with batch=8. */
static const char *tiny_cfg = GT_TINY_CFG(8);

/* The gpu engine's table with a create that keeps the instance: stock
 * mode has no exchange to reach the engine through, and its sync moves
 * only what Darknet's does (weights, biases, scales), so the running
 * statistics are pulled here before a comparison. */
static sdnn_engine *g_recorded;
static sdnn_status recording_create(sdnn_engine *e, const sdnn_engine_opts *o)
{
    g_recorded = e;
    return sdnn_engine_gpu.create(e, o);
}

/* Bytes by which two replicas' parameters differ. */
static size_t replica_diff(network *a, network *b)
{
    size_t d = 0;
    for (int i = 0; i < a->n; ++i) {
        layer *x = &a->layers[i], *y = &b->layers[i];
        if (x->type != CONVOLUTIONAL && x->type != CONNECTED) continue;
        size_t nw = x->type == CONNECTED ? (size_t)x->inputs * x->outputs : (size_t)x->nweights;
        size_t nb = x->type == CONNECTED ? (size_t)x->outputs : (size_t)x->n;
        d += gt_bytes_differ(x->weights, y->weights, nw * 4);
        d += gt_bytes_differ(x->biases, y->biases, nb * 4);
        if (x->batch_normalize) d += gt_bytes_differ(x->scales, y->scales, nb * 4);
    }
    return d;
}

typedef struct tcase {
    int n, overlap;
    double bucket_mb;       /* 0: auto */
    const char *compress;
    int stock;
    int timeline;
} tcase;

static int file_equal(const char *a, const char *b)
{
    char *x = gt_read_file(a), *y = gt_read_file(b);
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    long la = -1, lb = -2;
    if (fa && fb) {
        fseek(fa, 0, SEEK_END);
        fseek(fb, 0, SEEK_END);
        la = ftell(fa);
        lb = ftell(fb);
    }
    int eq = x && y && la == lb && la > 0 && gt_bytes_differ(x, y, (size_t)la) == 0;
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    free(x);
    free(y);
    return eq;
}

/* Occurrences of `needle` in the file. */
static int count_in(const char *path, const char *needle)
{
    char *t = gt_read_file(path);
    int k = 0;
    for (const char *p = t; p && (p = strstr(p, needle)); p += strlen(needle)) ++k;
    free(t);
    return k;
}

/* ---- the error model of one step (or one stock interval) ------------------------
 *
 * Every step starts the GPU trainer from the CPU trainer's state (in stock
 * mode every sync interval), so the two differ only by what that step
 * rounds differently.  A parameter moves by rate x its gradient, and every
 * gradient element is a sum of terms (a bias: the activation-gradient
 * delta over images and positions; a scale: that delta times x_norm; a
 * weight: delta times the input); two engines summing in different orders
 * (libdarknet one after another, bn.cu's blocks and trees, OpenBLAS's
 * kernels) on inputs that already differ by rounding differ by a small
 * fraction of the sum of the terms' magnitudes, not of the sum, which may
 * cancel.  Where the parameter is large against its step that is within
 * tol of the parameter; a bias or a scale can move by as much as it is,
 * and a first layer's weight gradient cancels too (cfg/shapes.cfg's layer
 * 0 at one image a subdivision: positive pixels times a delta that batch
 * norm centred; under OPENBLAS_CORETYPE=Haswell its weights were 1.4 x
 * tol of themselves apart at step 5 without a floor).  So, as tests/gpu/layers holds a per-channel sum
 * to its terms, each tensor t passes when
 *     ||t_gpu - t_cpu|| <= tol (||t_cpu|| + F_t),
 *     F_t = sum over the steps since the reset of rate x ||T_t||,
 * T_t the per-channel sums of the terms' magnitudes of that step's
 * gradient (all subdivisions; biases and scales exactly; for the weights
 * the bound size x sum over images of ||delta_b|| ||x_b||, see
 * wrap_backward), taken from libdarknet's own values in double: each CPU replica's layers run a test wrapper around
 * their backward (the delta arriving, the activation's slope at the
 * output, x_norm) and update (the rate Darknet's update applies:
 * learning_rate x learning_rate_scale / batch); the mean over the
 * replicas (the exchange and the stock sync average them).  tol is the
 * row's (PARAM_TOL, LOSSY_TOL, STOCK_TOL): the same fraction that held
 * for the parameters before.  This holds for any summation order.  The
 * model must still see a wrong gradient: at the last step a state whose
 * every update since the reset is half the GPU's (a learning rate or a
 * mean off by 2) must fail it. */

#define MAX_TENSORS 512
#define MAX_WRAPPED 512

typedef void (*backward_fn)(layer, network);
typedef void (*update_fn)(layer, update_args);

/* One wrapped layer of one CPU replica: its originals, the terms of the
 * current step per channel and the floors since the reset. */
typedef struct wrapped {
    const float *delta;                 /* the key: the layer's own buffer */
    backward_fn backward;
    update_fn update;
    int C, S;
    int size;                           /* kernel size (1: connected) */
    double *tb, *ts;                    /* per channel: sum |terms| this step */
    double tw;                          /* the weights' terms' bound this step */
    double fb, fs, fw;                  /* F for the biases, scales and weights */
} wrapped;

static wrapped g_wrapped[MAX_WRAPPED];
static int g_nwrapped;

static wrapped *wrapped_of(const float *delta)
{
    for (int k = 0; k < g_nwrapped; ++k)
        if (g_wrapped[k].delta == delta) return &g_wrapped[k];
    return NULL;
}

/* The slope of Darknet's activation at its output y (leaky and linear
 * exactly; any other: 1.8, above every Darknet activation's slope). */
static double act_slope(ACTIVATION a, float y)
{
    if (a == LINEAR) return 1;
    if (a == LEAKY) return y > 0 ? 1 : 0.1;
    return 1.8;
}

static void wrap_backward(layer l, network net)
{
    wrapped *w = wrapped_of(l.delta);
    if (!w) return;     /* never: every wrapped layer is in the table */
    for (int c = 0; c < w->C; ++c) {
        double sb = 0, ss = 0;
        for (int b = 0; b < l.batch; ++b)
            for (int q = 0; q < w->S; ++q) {
                size_t e = ((size_t)b * w->C + c) * w->S + q;
                double t = fabs((double)l.delta[e] * act_slope(l.activation, l.output[e]));
                sb += t;
                if (l.batch_normalize) ss += t * fabs((double)l.x_norm[e]);
            }
        w->tb[c] += sb;
        w->ts[c] += ss;
    }
    w->backward(l, net);
    /* The weight gradient sums delta x input over positions (and images):
     * per image the terms' matrix T_b[f][k] = sum_p |delta_fp| |col_kp| has
     * ||T_b|| <= ||delta_b|| ||col_b|| (Cauchy-Schwarz) and every input
     * value sits in at most size^2 columns, so ||col_b|| <= size ||x_b||;
     * delta is the layer's after its own backward (batch norm's normalised
     * delta where it has one), the one its weight gradient took. */
    if (net.input) {
        size_t no = (size_t)l.outputs, ni = (size_t)l.inputs;
        for (int b = 0; b < l.batch; ++b) {
            double dd = 0, xx = 0;
            for (size_t e = 0; e < no; ++e) dd += (double)l.delta[b * no + e] * l.delta[b * no + e];
            for (size_t e = 0; e < ni; ++e) xx += (double)net.input[b * ni + e] * net.input[b * ni + e];
            w->tw += w->size * sqrt(dd) * sqrt(xx);
        }
    }
}

static void wrap_update(layer l, update_args a)
{
    wrapped *w = wrapped_of(l.delta);
    if (!w) return;
    double rate = (double)a.learning_rate * l.learning_rate_scale / a.batch, nb = 0, ns = 0;
    for (int c = 0; c < w->C; ++c) {
        nb += w->tb[c] * w->tb[c];
        ns += w->ts[c] * w->ts[c];
        w->tb[c] = w->ts[c] = 0;
    }
    w->fb += rate * sqrt(nb);
    w->fs += rate * sqrt(ns);
    w->fw += rate * w->tw;
    w->tw = 0;
    w->update(l, a);
}

/* Wrap every convolutional and connected layer of the CPU replicas (after
 * the trainer installed its hooks, which the wrappers call). */
static void wrap_nets(network **nets, int n)
{
    for (int r = 0; r < n; ++r)
        for (int i = 0; i < nets[r]->n && g_nwrapped < MAX_WRAPPED; ++i) {
            layer *l = &nets[r]->layers[i];
            if (l->type != CONVOLUTIONAL && l->type != CONNECTED) continue;
            if (!l->backward || !l->update) continue;
            wrapped *w = &g_wrapped[g_nwrapped++];
            memset(w, 0, sizeof *w);
            w->delta = l->delta;
            w->backward = l->backward;
            w->update = l->update;
            w->C = l->type == CONNECTED ? l->outputs : l->n;
            w->S = l->type == CONNECTED ? 1 : l->out_w * l->out_h;
            w->size = l->type == CONNECTED ? 1 : l->size;
            w->tb = calloc((size_t)w->C, sizeof(double));
            w->ts = calloc((size_t)w->C, sizeof(double));
            l->backward = wrap_backward;
            l->update = wrap_update;
        }
}

/* Before the nets go: unwrap (the trainer's uninstall finds its hooks). */
static void unwrap_nets(network **nets, int n)
{
    for (int r = 0; r < n; ++r)
        for (int i = 0; nets[r] && i < nets[r]->n; ++i) {
            layer *l = &nets[r]->layers[i];
            wrapped *w = wrapped_of(l->delta);
            if (!w || l->backward != wrap_backward) continue;
            l->backward = w->backward;
            l->update = w->update;
        }
    for (int k = 0; k < g_nwrapped; ++k) free(g_wrapped[k].tb), free(g_wrapped[k].ts);
    g_nwrapped = 0;
}

static void floors_reset(void)
{
    for (int k = 0; k < g_nwrapped; ++k) g_wrapped[k].fb = g_wrapped[k].fs = g_wrapped[k].fw = 0;
}

/* F of tensor `which` (0 weights, 1 biases, 2 scales) of layer i: the
 * mean over the n replicas' floors. */
static double floor_of(network **cpu, int n, int i, int which)
{
    double f = 0;
    for (int r = 0; r < n; ++r) {
        wrapped *w = wrapped_of(cpu[r]->layers[i].delta);
        if (w) f += which == 1 ? w->fb : which == 2 ? w->fs : w->fw;
    }
    return f / n;
}

typedef struct tensor_ref {
    int layer, which;                    /* which: 0 weights, 1 biases, 2 scales */
    size_t n;
} tensor_ref;

static float *tensor_of(layer *l, int which)
{
    return which == 0 ? l->weights : which == 1 ? l->biases : l->scales;
}

/* The parameter tensors (weights, biases, scales) of net's convolutional
 * and connected layers; returns how many (at most `max`). */
static int list_tensors(network *net, tensor_ref *t, int max)
{
    int k = 0;
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        if (l->type != CONVOLUTIONAL && l->type != CONNECTED) continue;
        size_t nw = l->type == CONNECTED ? (size_t)l->inputs * l->outputs : (size_t)l->nweights;
        size_t nb = l->type == CONNECTED ? (size_t)l->outputs : (size_t)l->n;
        for (int w = 0; w < (l->batch_normalize ? 3 : 2) && k < max; ++w) {
            t[k].layer = i;
            t[k].which = w;
            t[k].n = w == 0 ? nw : nb;
            ++k;
        }
    }
    return k;
}

/* Replica 0's parameters at the reset, for the must-fail check. */
typedef struct model {
    int nt;
    tensor_ref t[MAX_TENSORS];
    float *start[MAX_TENSORS];
} model;

static void model_free(model *m)
{
    for (int k = 0; k < m->nt; ++k) free(m->start[k]);
    memset(m, 0, sizeof *m);
}

/* Both engines start equal from the CPU's state now. */
static void model_reset(model *m, network *cpu0)
{
    if (!m->nt) {
        m->nt = list_tensors(cpu0, m->t, MAX_TENSORS);
        for (int k = 0; k < m->nt; ++k) m->start[k] = malloc(m->t[k].n * sizeof(float));
    }
    for (int k = 0; k < m->nt; ++k)
        memcpy(m->start[k], tensor_of(&cpu0->layers[m->t[k].layer], m->t[k].which),
               m->t[k].n * sizeof(float));
    floors_reset();
}

/* The worst ||t_gpu - t_cpu|| / (tol (||t_cpu|| + F_t)) over replica r's
 * tensors (pass: <= 1) and its running statistics (tol relative); *rel
 * the worst plain relative error, *worst_layer the layer of the worst. */
static double model_check(const model *m, network **cpu, int n, int r, double tol, network *dev,
                          double *rel, int *worst_layer)
{
    double worst = 0;
    *rel = 0;
    *worst_layer = -1;
    for (int k = 0; k < m->nt; ++k) {
        int i = m->t[k].layer;
        const float *c = tensor_of(&cpu[r]->layers[i], m->t[k].which);
        const float *g = tensor_of(&dev->layers[i], m->t[k].which);
        double d = 0, nr = 0;
        for (size_t e = 0; e < m->t[k].n; ++e) {
            double x = (double)g[e] - (double)c[e];
            d += x * x;
            nr += (double)c[e] * c[e];
        }
        d = sqrt(d);
        nr = sqrt(nr);
        double f = floor_of(cpu, n, i, m->t[k].which);
        double allowed = tol * (nr + f);
        double q = allowed > 0 ? d / allowed : d > 0 ? 1e30 : 0;
        if (q > worst) worst = q, *worst_layer = i;
        if (nr > 0 && d / nr > *rel) *rel = d / nr;
        if (getenv("SDNN_ENGINES_VERBOSE") && q > 0.3)
            printf("      replica %d layer %d %s: |d| %.3e, |t| %.3e, F %.3e: %.2f of allowed\n",
                   r, i, m->t[k].which == 0 ? "weights" : m->t[k].which == 1 ? "biases" : "scales",
                   d, nr, f, q);
    }
    for (int i = 0; i < cpu[r]->n; ++i) {
        layer *x = &cpu[r]->layers[i], *y = &dev->layers[i];
        if ((x->type != CONVOLUTIONAL && x->type != CONNECTED) || !x->batch_normalize) continue;
        size_t nb = x->type == CONNECTED ? (size_t)x->outputs : (size_t)x->n;
        double e = fmax(gt_relerr(y->rolling_mean, x->rolling_mean, nb),
                        gt_relerr(y->rolling_variance, x->rolling_variance, nb));
        if (e / tol > worst) worst = e / tol, *worst_layer = i;
        if (e > *rel) *rel = e;
    }
    return worst;
}

/* The must-fail check: replica 0's GPU parameters with every update since
 * the reset halved (t_start + (t_gpu - t_start) / 2) against the model;
 * returns model_check's ratio for that state (dev is restored). */
static double model_check_halved(const model *m, network **cpu, int n, double tol, network *dev)
{
    float *keep[MAX_TENSORS];
    for (int k = 0; k < m->nt; ++k) {
        float *g = tensor_of(&dev->layers[m->t[k].layer], m->t[k].which);
        keep[k] = malloc(m->t[k].n * sizeof(float));
        memcpy(keep[k], g, m->t[k].n * sizeof(float));
        for (size_t e = 0; e < m->t[k].n; ++e)
            g[e] = m->start[k][e] + (g[e] - m->start[k][e]) / 2;
    }
    double rel;
    int wl;
    double q = model_check(m, cpu, n, 0, tol, dev, &rel, &wl);
    for (int k = 0; k < m->nt; ++k) {
        memcpy(tensor_of(&dev->layers[m->t[k].layer], m->t[k].which), keep[k],
               m->t[k].n * sizeof(float));
        free(keep[k]);
    }
    return q;
}

/* One case: n replicas of `cfg` (text, or a file when is_file), ROWS rows
 * a step in all. */
static void versus(const char *name, const char *cfg, int is_file, const tcase *tc)
{
    int n = tc->n;
    const char *only = getenv("SDNN_ENGINES_ONLY");
    if (only && (strcmp(only, "stock") == 0 ? !tc->stock
                                             : n != atoi(only) || strcmp(name, "shapes") != 0))
        return;
    double t_start = sdnn_gpu_now();
    char set[64], label[200];
    snprintf(set, sizeof set, "batch=%d\nsubdivisions=2\n", ROWS / n);
    snprintf(label, sizeof label, "%s, %d replica(s), %s, overlap=%d, bucket_mb=%s%g, %s", name,
             n, tc->stock ? "stock" : "scalednn", tc->overlap, tc->bucket_mb > 0 ? "" : "auto ",
             tc->bucket_mb, tc->compress);
    network *init = is_file ? gt_parse_file(cfg, set) : gt_parse_text(cfg, set);
    network *cpu[4] = {0}, *dev[4] = {0};
    int ok = init != NULL;
    for (int r = 0; r < n && ok; ++r) {
        cpu[r] = is_file ? gt_parse_file(cfg, set) : gt_parse_text(cfg, set);
        dev[r] = is_file ? gt_parse_file(cfg, set) : gt_parse_text(cfg, set);
        ok = cpu[r] && dev[r];
    }
    sdnn_trainer *T = NULL, *G = NULL;
    char tlpath[64] = "", efc[64], efg[64], efc2[64];
    snprintf(efc, sizeof efc, "/tmp/sdnn-engines-%d-c.ef", (int)getpid());
    snprintf(efg, sizeof efg, "/tmp/sdnn-engines-%d-g.ef", (int)getpid());
    snprintf(efc2, sizeof efc2, "/tmp/sdnn-engines-%d-c2.ef", (int)getpid());
    if (!ok) {
        SOFT_ASSERT(0, "%s: cannot parse the cfg", label);
        goto out;
    }
    gt_randomize(init, 31);
    for (int r = 0; r < n; ++r) gt_copy_net(cpu[r], init), gt_copy_net(dev[r], init);

    sdnn_config c = SDNN_CONFIG_INIT;
    c.present = 1;
    c.mode = tc->stock ? SDNN_MODE_STOCK : SDNN_MODE_SCALEDNN;
    c.bucket_mb = tc->bucket_mb;
    c.overlap = tc->overlap;
    snprintf(c.compress, sizeof c.compress, "%s", tc->compress);
    int lossy = strcmp(tc->compress, "none") != 0;
    c.error_feedback = lossy;
    c.compress_min_kb = 0;
    c.topk_ratio = 0.1;
    c.profile_iters = 3;
    snprintf(c.engine, sizeof c.engine, "cpu");
    sdnn_status s = sdnn_trainer_create(cpu, n, &c, 0, &T);
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "%s: cpu trainer: %s", label, sdnn_last_error());
        goto out;
    }
    snprintf(c.engine, sizeof c.engine, "gpu");
    if (tc->timeline) {
        snprintf(tlpath, sizeof tlpath, "/tmp/sdnn-engines-%d.json", (int)getpid());
        snprintf(c.timeline, sizeof c.timeline, "%s", tlpath);
    }
    sdnn_engine_ops recording = sdnn_engine_gpu;
    recording.create = recording_create;
    g_recorded = NULL;
    s = sdnn_trainer_create_with(&recording, dev, n, &c, 0, &G);
    if (s != SDNN_OK) {
        SOFT_ASSERT(0, "%s: gpu trainer: %s", label, sdnn_last_error());
        goto out;
    }

    if (lossy && n > 1) {
        /* the coded ring, the CPU trainer's collective (see the header) */
        const sdnn_exchange *gx = sdnn_trainer_exchange(G);
        sdnn_comm *gc = gx ? sdnn_exchange_comm(gx) : NULL;
        const sdnn_link flat = {"no-latency", 0, 450e9};
        s = gc ? sdnn_comm_set_link(gc, &flat, "test") : SDNN_ERR_INVALID;
        int ring = s == SDNN_OK, nb = gx ? sdnn_exchange_nbuckets(gx) : 0;
        for (int k = 0; k < nb && ring; ++k) {
            const sdnn_codec_ops *bc = sdnn_exchange_bucket_codec(gx, k);
            sdnn_codec_params bp = SDNN_CODEC_PARAMS_INIT;
            bp.topk_ratio = c.topk_ratio;
            sdnn_cm_env env;
            sdnn_codec_model m;
            unsigned offers;
            sdnn_cm_coll path;
            if (!bc->lossy) continue;
            if (sdnn_gpu_engine_comm_pricing(gc, bc, &bp, sdnn_exchange_bucket(gx, k, NULL, NULL),
                                             &env, &m, &offers, &path) != SDNN_OK)
                ring = 0;
            else if (bc->dense)
                ring = path == (sdnn_cm_coll_fits(&m, SDNN_CM_NATIVE) ? SDNN_CM_NATIVE
                                                                      : SDNN_CM_CODED_RING);
        }
        SOFT_ASSERT(ring, "%s: on a link without latency every dense bucket takes a ring (%s)",
                    label, s == SDNN_OK ? "ok" : sdnn_last_error());
        s = SDNN_OK;
    }
    double worst_loss = 0, worst_param = 0, worst_ratio = 0, halved = 1e30;
    int worst_step = -1, worst_layer = -1, replanned = 0, steps = tc->stock ? STOCK_STEPS : STEPS;
    size_t rdiff = 0;
    int classes = gt_yolo_classes(init);
    double tol = lossy && strcmp(tc->compress, "fp16") != 0 ? LOSSY_TOL : PARAM_TOL;
    if (tc->stock) tol = STOCK_TOL;
    static model ms;
    wrap_nets(cpu, n);
    for (int step = 0; step < steps; ++step) {
        const sdnn_exchange *gx = sdnn_trainer_exchange(G);
        /* the GPU trainer starts this step from the CPU's state (stock mode
         * reaches the engine through the recording create: its replicas,
         * apart between syncs, each start from their CPU twin's) */
        sdnn_engine *e0 = gx ? sdnn_exchange_engine(gx) : tc->stock ? g_recorded : NULL;
        if (e0) {
            for (int r = 0; r < n; ++r) gt_copy_net(dev[r], cpu[r]);
            s = e0->ops->push(e0, SDNN_ENGINE_ALL);
            if (s == SDNN_OK && gx && sdnn_trainer_has_ef(T)) {
                s = sdnn_exchange_ef_save(sdnn_trainer_exchange(T), efc, *cpu[0]->seen);
                if (s == SDNN_OK)
                    s = sdnn_exchange_ef_load((sdnn_exchange *)gx, efc, *dev[0]->seen);
            }
            model_reset(&ms, cpu[0]);
        } else if (tc->stock) {
            SOFT_ASSERT(0, "%s: stock mode: the engine was not recorded", label);
            break;
        }
        data d = gt_detection_data(ROWS, init->w, init->h, init->c, init->truths, classes,
                                   900 + (uint64_t)step);
        sdnn_step_stats cs, gs;
        if (s == SDNN_OK) s = sdnn_trainer_step(T, d, &cs);
        if (s == SDNN_OK) s = sdnn_trainer_step(G, d, &gs);
        free_data(d);
        if (s == SDNN_OK) {
            /* a re-plan replaces the exchange during the step */
            gx = sdnn_trainer_exchange(G);
            sdnn_engine *e = gx ? sdnn_exchange_engine(gx) : NULL;
            if (!e && tc->stock && gs.synced) e = g_recorded;
            if (e) s = e->ops->pull(e, SDNN_ENGINE_ALL);
        }
        if (s != SDNN_OK) {
            SOFT_ASSERT(0, "%s: step %d: %s", label, step, sdnn_last_error());
            break;
        }
        replanned += gs.replanned;
        double le = fabs((double)gs.loss - (double)cs.loss) / (fabs((double)cs.loss) + 1e-6);
        if (le > worst_loss) worst_loss = le;
        if (getenv("SDNN_ENGINES_VERBOSE"))
            printf("    step %d: loss %.6g vs %.6g (rel %.2e)%s\n", step, (double)gs.loss,
                   (double)cs.loss, le, gs.synced ? ", synced" : "");
        /* stock replicas train apart between syncs: compared after each sync,
         * when the trainer brought the device copies to the host */
        if (!tc->stock || gs.synced) {
            for (int r = 0; r < n; ++r) {
                int wl;
                double rel;
                double q = model_check(&ms, cpu, n, r, tol, dev[r], &rel, &wl);
                if (q > worst_ratio) worst_ratio = q, worst_step = step, worst_layer = wl;
                if (rel > worst_param) worst_param = rel;
            }
            if (step == steps - 1) halved = model_check_halved(&ms, cpu, n, tol, dev[0]);
            for (int r = 1; r < n; ++r) rdiff += replica_diff(dev[0], dev[r]);
        }
    }
    model_free(&ms);
    printf("    %-78s loss rel %.2e, params rel %.2e, %.2f of the model's bound (step %d, layer "
           "%d; updates halved: %.1f; %.1f s)\n", label, worst_loss, worst_param, worst_ratio,
           worst_step, worst_layer, halved, sdnn_gpu_now() - t_start);
    {
        char mname[240];
        snprintf(mname, sizeof mname, "gpu/engines:%s:loss", label);
        tm_margin(mname, worst_loss, tc->stock ? STOCK_TOL : lossy ? LOSSY_TOL : LOSS_TOL);
        snprintf(mname, sizeof mname, "gpu/engines:%s:params", label);
        tm_margin(mname, worst_ratio, 1.0);
    }
    SOFT_ASSERT(worst_loss <= (tc->stock ? STOCK_TOL : lossy ? LOSSY_TOL : LOSS_TOL),
                "%s: loss within tolerance of the CPU's (%.2e)", label, worst_loss);
    SOFT_ASSERT(worst_ratio <= 1, "%s: params within %g of the CPU's, relative to the "
                "parameter + the step's terms (%.2f of that, step %d, layer %d)", label, tol,
                worst_ratio, worst_step, worst_layer);
    SOFT_ASSERT(halved > 1, "%s: must fail: the GPU's updates halved at the last step exceed "
                "the model's bound (%.2f of it)", label, halved);
    SOFT_ASSERT(rdiff == 0, "%s: device replicas bit-identical after every step (%zu bytes)",
                label, rdiff);
    if (tc->bucket_mb <= 0)
        SOFT_ASSERT(replanned > 0, "%s: the planner re-planned the GPU trainer (%d)", label,
                    replanned);
    if (sdnn_trainer_has_ef(G)) {
        /* .ef saved by the gpu engine, restored by the cpu one, saved again */
        const sdnn_exchange *gx = sdnn_trainer_exchange(G);
        sdnn_exchange *cx = (sdnn_exchange *)sdnn_trainer_exchange(T);
        s = sdnn_exchange_ef_save(gx, efg, *dev[0]->seen);
        if (s == SDNN_OK) s = sdnn_exchange_ef_load(cx, efg, *dev[0]->seen);
        if (s == SDNN_OK) s = sdnn_exchange_ef_save(cx, efc2, *dev[0]->seen);
        SOFT_ASSERT(s == SDNN_OK && file_equal(efg, efc2),
                    "%s: .ef saved by engine=gpu, restored by engine=cpu, saves the same bytes "
                    "(%s)", label, s == SDNN_OK ? "ok" : sdnn_last_error());
    }
    if (tc->timeline) {
        s = sdnn_trainer_close_timeline(G);
        int fwd = count_in(tlpath, "\"device\"");
        char want[64];
        int all = 1;
        for (int r = 0; r < n; ++r) {
            /* every replica's track has device spans */
            snprintf(want, sizeof want, "\"tid\":%d", 4 + r);
            all &= count_in(tlpath, want) > 0;
        }
        SOFT_ASSERT(s == SDNN_OK && fwd >= 2 * n * STEPS && all,
                    "%s: the timeline holds device spans on every replica's track (%d)", label,
                    fwd);
        remove(tlpath);
    }
out:
    unwrap_nets(cpu, n);
    sdnn_trainer_destroy(G);
    sdnn_trainer_destroy(T);
    remove(efc);
    remove(efg);
    remove(efc2);
    for (int r = 0; r < n; ++r) {
        if (cpu[r]) sdnn_network_free(cpu[r]);
        if (dev[r]) sdnn_network_free(dev[r]);
    }
    if (init) sdnn_network_free(init);
}

/* A NaN in replica 1's update buffer of the last convolution: the step
 * fails on both engines with the same message (iteration, layer, tensor,
 * element, replica), found on the device by the deferred check, and the
 * trainer refuses to save. */
static void nonfinite(void)
{
    const char *set = "batch=4\nsubdivisions=2\n";
    network *nets[2][2] = {{0}};
    char msg[2][512] = {"", ""};
    sdnn_status st[2] = {SDNN_OK, SDNN_OK}, sv[2] = {SDNN_OK, SDNN_OK};
    for (int k = 0; k < 2; ++k) {
        for (int r = 0; r < 2; ++r) nets[k][r] = gt_parse_file("cfg/shapes.cfg", set);
        if (!nets[k][0] || !nets[k][1]) {
            SOFT_ASSERT(0, "cannot parse cfg/shapes.cfg");
            goto out;
        }
        gt_randomize(nets[k][0], 7);
        gt_copy_net(nets[k][1], nets[k][0]);
    }
    int L = -1;
    for (int i = nets[0][0]->n - 1; i >= 0 && L < 0; --i)
        if (nets[0][0]->layers[i].type == CONVOLUTIONAL) L = i;
    for (int k = 0; k < 2; ++k) {
        sdnn_config c = SDNN_CONFIG_INIT;
        c.present = 1;
        c.bucket_mb = 0.05;
        snprintf(c.engine, sizeof c.engine, "%s", k ? "gpu" : "cpu");
        sdnn_trainer *T = NULL;
        if (sdnn_trainer_create(nets[k], 2, &c, 0, &T) != SDNN_OK) {
            SOFT_ASSERT(0, "%s trainer: %s", c.engine, sdnn_last_error());
            continue;
        }
        nets[k][1]->layers[L].weight_updates[5] = NAN;
        const sdnn_exchange *x = sdnn_trainer_exchange(T);
        sdnn_engine *e = x ? sdnn_exchange_engine(x) : NULL;
        if (e) (void)e->ops->push(e, SDNN_ENGINE_UPDATES);
        data d = gt_detection_data(8, nets[k][0]->w, nets[k][0]->h, nets[k][0]->c,
                                   nets[k][0]->truths, 4, 77);
        sdnn_step_stats ss;
        st[k] = sdnn_trainer_step(T, d, &ss);
        snprintf(msg[k], sizeof msg[k], "%s", sdnn_last_error());
        free_data(d);
        char path[64];
        snprintf(path, sizeof path, "/tmp/sdnn-engines-%d-nan.weights", (int)getpid());
        sv[k] = sdnn_trainer_save(T, path);
        SOFT_ASSERT(access(path, F_OK) != 0, "%s: nothing saved after the failed step", c.engine);
        remove(path);
        sdnn_trainer_destroy(T);
    }
    char want[160];
    snprintf(want, sizeof want, "layer %d (convolutional) weights[5] on replica 1", L);
    SOFT_ASSERT(st[1] == SDNN_ERR_NONFINITE && strstr(msg[1], want) &&
                strcmp(msg[0], msg[1]) == 0,
                "a NaN on replica 1: engine=gpu stops the step as engine=cpu does (cpu: %s; "
                "gpu: %s)", msg[0], msg[1]);
    SOFT_ASSERT(sv[0] == SDNN_ERR_ABORTED && sv[1] == SDNN_ERR_ABORTED,
                "after it both trainers refuse to save (%s, %s)", sdnn_strerror(sv[0]),
                sdnn_strerror(sv[1]));
out:
    for (int k = 0; k < 2; ++k)
        for (int r = 0; r < 2; ++r)
            if (nets[k][r]) sdnn_network_free(nets[k][r]);
}

/* The registry in a GPU build: gpu is engine_gpu.c's entry, available when
 * the runtime has the devices (auto then resolves to it), else refused
 * naming the device count (auto: cpu, saying why). */
static void registry(int ndev)
{
    const sdnn_engine_ops *gpu = sdnn_engine_find("gpu"), *got = NULL;
    SOFT_ASSERT(gpu != NULL && sdnn_engine_find("cpu") != NULL, "registry lists cpu and gpu (%s)",
                sdnn_engine_names());
    if (!gpu) return;
    char why[256] = "";
    sdnn_status s;
    if (ndev >= 2) {
        SOFT_ASSERT(gpu->available(2, why, sizeof why), "gpu engine available for 2 replicas "
                    "(%s)", why);
        s = sdnn_engine_resolve("auto", 2, &got, why, sizeof why);
        SOFT_ASSERT(s == SDNN_OK && got == gpu && strstr(why, "engine=auto: gpu"),
                    "engine=auto resolves to gpu, saying so (%s)", why);
    } else {
        s = sdnn_engine_resolve("auto", 2, &got, why, sizeof why);
        SOFT_ASSERT(s == SDNN_OK && got == sdnn_engine_find("cpu") && strstr(why, "cpu (gpu: "),
                    "%d device(s): engine=auto resolves to cpu, saying why (%s)", ndev, why);
    }
    s = sdnn_engine_resolve("gpu", 64, &got, why, sizeof why);
    SOFT_ASSERT(s == SDNN_ERR_UNSUPPORTED && got == NULL &&
                strstr(sdnn_last_error(), "engine gpu cannot run 64 replicas") &&
                strstr(sdnn_last_error(), " for 64 replicas"),
                "engine=gpu for more replicas than devices refused naming the reason (%s)",
                sdnn_last_error());
}

/* The fork's dialect: grouped routes and the fork's [yolo] keys
 * (v4tiny: CIoU, scale_x_y; v7tiny: new_coords, no logistic) on the
 * device, 2 replicas, the tolerances above; one cfg a process. */
static int dialect_case(const char *cfg)
{
    static const tcase dialect = {2, 1, 0.05, "none", 0, 0};
    char name[128], desc[256] = "";
    sdnn_dev_describe(0, desc, sizeof desc);
    printf("    %s on device 0: %s%s\n", cfg, desc,
           strstr(desc, "simulated") ? " (host logic and kernels on the host executor; no GPU)" : "");
    snprintf(name, sizeof name, "%s (fork dialect)", cfg);
    versus(name, cfg, 1, &dialect);
    return gt_summary("engines (fork dialect)");
}

int main(int argc, char **argv)
{
    argv0_ = "engines";
    setenv("SDNN_SIM_DEVICES", "4", 0);   /* read by the simulated runtime only */
    if (argc > 2 && strcmp(argv[1], "dialect") == 0) return dialect_case(argv[2]);
    int ndev = 0;
    char desc[256] = "";
    if (sdnn_dev_count(&ndev) == SDNN_OK) sdnn_dev_describe(0, desc, sizeof desc);
    printf("    device 0: %s%s\n", desc,
           strstr(desc, "simulated") ? " (host logic and kernels on the host executor; no GPU)" : "");
    registry(ndev);
    if (ndev < 1) {
        printf("    no device: the trainer comparisons need one (not run)\n");
        return gt_summary("engines");
    }
    /* Few rows: each costs STEPS CPU and STEPS simulated steps, and the suite
     * runs 3 times in CI and once under ASan. */
    static const tcase both[] = {
        {1, 1, 0.05, "none", 0, 0}, {2, 1, 0.05, "none", 0, 1}, {4, 1, 0.05, "none", 0, 0},
        {2, 1, 0.05, "int8", 0, 0},
    };
    static const tcase shapes_only[] = {
        {4, 0, 0.05, "none", 0, 0}, {2, 1, 0.05, "fp16", 0, 0}, {4, 1, 0.05, "topk", 0, 0},
        {2, 1, 0, "none", 0, 0},    {2, 1, 0.05, "none", 1, 0},
    };
    for (size_t k = 0; k < sizeof both / sizeof both[0]; ++k) {
        versus("shapes", "cfg/shapes.cfg", 1, &both[k]);
        tcase t = both[k];
        t.bucket_mb = t.bucket_mb > 0 ? 0.005 : 0;
        t.timeline = 0;
        versus("yolov3-tiny-shaped", tiny_cfg, 0, &t);
    }
    for (size_t k = 0; k < sizeof shapes_only / sizeof shapes_only[0]; ++k)
        versus("shapes", "cfg/shapes.cfg", 1, &shapes_only[k]);
    nonfinite();
    /* The fork's dialect, each cfg in a fresh process: hooks.c keeps one
     * original function per layer type for the whole process, and the
     * dialect gives a cfg's routes and heads their own (dialect.c), so a
     * process trains cfgs of one kind, as ./darknet does. */
    static const char *const dialect_cfgs[] = {"cfg/shapes-v4tiny.cfg", "cfg/shapes-v7tiny.cfg"};
    for (size_t k = 0; k < sizeof dialect_cfgs / sizeof dialect_cfgs[0]; ++k) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            execl("/proc/self/exe", "engines", "dialect", dialect_cfgs[k], (char *)NULL);
            _exit(127);
        }
        int wst = 0;
        SOFT_ASSERT(pid > 0 && waitpid(pid, &wst, 0) == pid && WIFEXITED(wst) &&
                        WEXITSTATUS(wst) == 0,
                    "%s (fork dialect, a child process) passes (status %d)", dialect_cfgs[k], wst);
    }
    return gt_summary("engines");
}
