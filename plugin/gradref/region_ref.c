/*
 * region_ref: the [region] layer's delta in double, written from
 * the semantics of Debian's libdarknet forward_region_layer (2018,
 * yolov2-style): see gradref.h.  Layout as the layer's: image b, anchor n,
 * entry e (x, y, w, h, objectness, classes...), cell (j, i) at
 * b * outputs + (n * (5 + classes) + e) * w * h + j * w + i.
 */
#include "gradref.h"
#include "replicas.h"
#include "boxref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Darknet's region layer reads 30 truth boxes an image, whatever max= says. */
#define REGION_TRUTHS 30

static size_t idx(const layer *l, int b, int n, int e, int j, int i)
{
    size_t per = (size_t)l->coords + (size_t)l->classes + 1;
    return (size_t)b * l->outputs + ((size_t)n * per + (size_t)e) * l->w * l->h +
           (size_t)j * l->w + (size_t)i;
}

int sdnn_gradref_region_kind(const layer *l, size_t k)
{
    size_t wh = (size_t)l->w * l->h, per = (size_t)l->coords + (size_t)l->classes + 1;
    size_t e = (k % (size_t)l->outputs) / wh % per;
    if (e == 2 || e == 3) return SDNN_REGION_RAW;
    if (e < 5) return SDNN_REGION_LOGISTIC;
    return l->softmax ? SDNN_REGION_SOFTMAX : SDNN_REGION_CLASS;
}

/* The predicted box of slot n at cell (j, i): centre from the activated
 * x, y, size from the raw w, h times the anchor, relative to the grid. */
static sdnn_dbox predicted(const layer *l, const double *o, int b, int n, int j, int i)
{
    sdnn_dbox p;
    p.x = (i + o[idx(l, b, n, 0, j, i)]) / l->w;
    p.y = (j + o[idx(l, b, n, 1, j, i)]) / l->h;
    p.w = exp(o[idx(l, b, n, 2, j, i)]) * l->biases[2 * n] / l->w;
    p.h = exp(o[idx(l, b, n, 3, j, i)]) * l->biases[2 * n + 1] / l->h;
    return p;
}

/* Darknet's box terms with weight s: x, y pulled (on the activated value)
 * to the truth's offset in its cell, w, h (raw) to log(size / anchor) in
 * grid units.  Returns the IOU of the prediction with the truth. */
static double box_terms(const layer *l, const double *o, sdnn_dbox t, int b, int n, int j, int i,
                        double s, double *d, double *sc)
{
    sdnn_dbox p = predicted(l, o, b, n, j, i);
    double target[4] = { t.x * l->w - i, t.y * l->h - j, log(t.w * l->w / l->biases[2 * n]),
                         log(t.h * l->h / l->biases[2 * n + 1]) };
    for (int e = 0; e < 4; ++e) {
        size_t k = idx(l, b, n, e, j, i);
        d[k] = s * (target[e] - o[k]);
        if (sc) sc[k] = s;
    }
    return sdnn_dbox_iou(p, t);
}

/* Darknet's class term with weight s: one-hot over the classes; with
 * logistic classes (tag) a slot whose first class already has a term
 * only pulls this truth's class to 1. */
static void class_terms(const layer *l, const double *o, int cls, int b, int n, int j, int i,
                        double s, double *d, double *sc)
{
    int tag = !l->softmax;
    if (tag && d[idx(l, b, n, 5, j, i)] != 0) {
        size_t k = idx(l, b, n, 5 + cls, j, i);
        d[k] = s * (1 - o[k]);
        if (sc) sc[k] = s;
        return;
    }
    for (int c = 0; c < l->classes; ++c) {
        size_t k = idx(l, b, n, 5 + c, j, i);
        d[k] = s * ((c == cls) - o[k]);
        if (sc) sc[k] = s;
    }
}

static sdnn_dbox truth_at(const layer *l, const float *truth, int b, int t)
{
    const float *p = truth + (size_t)b * l->truths + (size_t)t * (l->coords + 1);
    sdnn_dbox r = { p[0], p[1], p[2], p[3] };
    return r;
}

sdnn_status sdnn_gradref_region_check(const layer *l)
{
    if (l->type != REGION)
        return SDNN_ERROR(SDNN_ERR_INVALID, "gradref: region delta of a %s layer",
                          sdnn_layer_type_name(l->type));
    if (l->coords != 4)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: a region layer with coords=%d (4 "
                          "is computed)", l->coords);
    if (l->background || l->softmax_tree || l->map)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: a region layer with background, "
                          "a tree or a class map");
    if (l->truths < REGION_TRUTHS * (l->coords + 1))
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: a region layer reading %d truth "
                          "values an image", l->truths);
    return SDNN_OK;
}

sdnn_status sdnn_gradref_region_delta(const layer *l, const double *x, const float *truth,
                                      int seen, double margin, double *out, double *delta,
                                      double *scale, int *near)
{
    SDNN_CHECK(sdnn_gradref_region_check(l));
    size_t no = (size_t)l->batch * l->outputs, wh = (size_t)l->w * l->h;
    *near = 0;
    /* The activated output: logistic on x, y and objectness; the classes
     * through a softmax over each slot's classes, or each its logistic. */
    for (size_t k = 0; k < no; ++k) {
        int kind = sdnn_gradref_region_kind(l, k);
        out[k] = kind == SDNN_REGION_RAW || kind == SDNN_REGION_SOFTMAX ? x[k] : sdnn_dlogistic(x[k]);
    }
    if (l->softmax)
        for (int b = 0; b < l->batch; ++b)
            for (int n = 0; n < l->n; ++n)
                for (size_t c = 0; c < wh; ++c) {
                    double *p = out + idx(l, b, n, 5, 0, 0) + c, mx = -HUGE_VAL, sum = 0;
                    for (int q = 0; q < l->classes; ++q) mx = fmax(mx, p[q * wh]);
                    for (int q = 0; q < l->classes; ++q) sum += (p[q * wh] = exp(p[q * wh] - mx));
                    for (int q = 0; q < l->classes; ++q) p[q * wh] /= sum;
                }
    memset(delta, 0, no * sizeof *delta);
    if (scale) memset(scale, 0, no * sizeof *scale);
    int stride = l->coords + 1;
    for (int b = 0; b < l->batch; ++b) {
        /* Every prediction: objectness to 0 (noobject_scale) unless its
         * best IOU with a truth passes thresh (then no term); while fewer
         * than 12800 images were seen, the box pulled to its anchor
         * centred in its cell with weight .01. */
        for (int j = 0; j < l->h; ++j)
            for (int i = 0; i < l->w; ++i)
                for (int n = 0; n < l->n; ++n) {
                    sdnn_dbox p = predicted(l, out, b, n, j, i);
                    double best = 0;
                    for (int t = 0; t < REGION_TRUTHS; ++t) {
                        sdnn_dbox tb = truth_at(l, truth, b, t);
                        if (tb.x == 0) break;
                        best = fmax(best, sdnn_dbox_iou(p, tb));
                    }
                    if (fabs(best - l->thresh) < margin) ++*near;
                    size_t k = idx(l, b, n, 4, j, i);
                    if (best > l->thresh) {
                        delta[k] = 0;
                        if (scale) scale[k] = 0;
                    } else {
                        delta[k] = l->noobject_scale * (0 - out[k]);
                        if (scale) scale[k] = l->noobject_scale;
                    }
                    if (seen < 12800) {
                        sdnn_dbox prior = { (i + .5) / l->w, (j + .5) / l->h,
                                       (double)l->biases[2 * n] / l->w,
                                       (double)l->biases[2 * n + 1] / l->h };
                        box_terms(l, out, prior, b, n, j, i, .01, delta, scale);
                    }
                }
        /* Every truth: in its cell, the slot whose box (its predicted size,
         * or with bias_match its anchor's) has the most similar shape gets
         * the box terms weighted coord_scale (2 - w h), objectness to 1
         * (rescore: to the IOU of its prediction) weighted object_scale, and
         * the class terms weighted class_scale. */
        for (int t = 0; t < REGION_TRUTHS; ++t) {
            sdnn_dbox tb = truth_at(l, truth, b, t);
            if (tb.x == 0) break;
            int i = (int)(tb.x * l->w), j = (int)(tb.y * l->h);
            sdnn_dbox shape = { 0, 0, tb.w, tb.h };
            double best = 0, second = 0;
            int best_n = 0;
            for (int n = 0; n < l->n; ++n) {
                sdnn_dbox p = predicted(l, out, b, n, j, i);
                if (l->bias_match) {
                    p.w = (double)l->biases[2 * n] / l->w;
                    p.h = (double)l->biases[2 * n + 1] / l->h;
                }
                p.x = p.y = 0;
                double v = sdnn_dbox_iou(p, shape);
                if (v > best) {
                    second = best;
                    best = v;
                    best_n = n;
                } else if (v > second) {
                    second = v;
                }
            }
            if (l->n > 1 && best - second < margin) ++*near;
            double iou = box_terms(l, out, tb, b, best_n, j, i, l->coord_scale * (2 - tb.w * tb.h),
                                   delta, scale);
            size_t k = idx(l, b, best_n, 4, j, i);
            delta[k] = l->object_scale * ((l->rescore ? iou : 1) - out[k]);
            if (scale) scale[k] = l->object_scale;
            int cls = (int)truth[(size_t)b * l->truths + (size_t)t * stride + l->coords];
            class_terms(l, out, cls, b, best_n, j, i, l->class_scale, delta, scale);
        }
    }
    return SDNN_OK;
}
