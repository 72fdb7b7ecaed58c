/*
 * yolo_ref: the [yolo] layer's delta in double, written
 * from the semantics of Debian's libdarknet forward_yolo_layer (2018):
 * see gradref.h.  Layout: image b, anchor slot n, entry e (x, y, w, h,
 * objectness, classes...), cell (j, i) at
 * b * outputs + (n * (5 + classes) + e) * w * h + j * w + i.
 */
#include "gradref.h"
#include "replicas.h"
#include "boxref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t at(const layer *l, int b, int n, int e, int j, int i)
{
    return (size_t)b * l->outputs + ((size_t)n * (5 + l->classes) + e) * l->w * l->h +
           (size_t)j * l->w + i;
}

static sdnn_dbox pred_box(const layer *l, const double *o, int b, int n, int j, int i, int anchor,
                     int net_w, int net_h)
{
    sdnn_dbox p;
    p.x = (i + o[at(l, b, n, 0, j, i)]) / l->w;
    p.y = (j + o[at(l, b, n, 1, j, i)]) / l->h;
    p.w = exp(o[at(l, b, n, 2, j, i)]) * l->biases[2 * anchor] / net_w;
    p.h = exp(o[at(l, b, n, 3, j, i)]) * l->biases[2 * anchor + 1] / net_h;
    return p;
}

/* The box terms: x, y against the cell offset of the truth (on the
 * logistic output), w, h against log(size / anchor) (on the raw input),
 * each times scale = 2 - w h of the truth. */
static void box_delta(const layer *l, const double *o, sdnn_dbox t, int b, int n, int j, int i,
                      int anchor, int net_w, int net_h, double *d, double *sc)
{
    double s = 2 - t.w * t.h;
    if (sc)
        for (int e = 0; e < 4; ++e) sc[at(l, b, n, e, j, i)] = s;
    d[at(l, b, n, 0, j, i)] = s * (t.x * l->w - i - o[at(l, b, n, 0, j, i)]);
    d[at(l, b, n, 1, j, i)] = s * (t.y * l->h - j - o[at(l, b, n, 1, j, i)]);
    d[at(l, b, n, 2, j, i)] = s * (log(t.w * net_w / l->biases[2 * anchor]) - o[at(l, b, n, 2, j, i)]);
    d[at(l, b, n, 3, j, i)] = s * (log(t.h * net_h / l->biases[2 * anchor + 1]) - o[at(l, b, n, 3, j, i)]);
}

/* Darknet's class term: when the slot's first class delta is already set
 * (a second truth in the same slot), only the truth's class is pulled to
 * 1; otherwise every class to its one-hot target. */
static void class_delta(const layer *l, const double *o, int cls, int b, int n, int j, int i,
                        double *d, double *sc)
{
    if (d[at(l, b, n, 5, j, i)] != 0) {
        d[at(l, b, n, 5 + cls, j, i)] = 1 - o[at(l, b, n, 5 + cls, j, i)];
        if (sc) sc[at(l, b, n, 5 + cls, j, i)] = 1;
        return;
    }
    for (int c = 0; c < l->classes; ++c) {
        d[at(l, b, n, 5 + c, j, i)] = (c == cls) - o[at(l, b, n, 5 + c, j, i)];
        if (sc) sc[at(l, b, n, 5 + c, j, i)] = 1;
    }
}

static sdnn_dbox truth_box(const layer *l, const float *truth, int b, int t)
{
    const float *p = truth + (size_t)b * l->truths + (size_t)t * 5;
    sdnn_dbox r = { p[0], p[1], p[2], p[3] };
    return r;
}

sdnn_status sdnn_gradref_yolo_delta(const layer *l, int net_w, int net_h, const double *x,
                                    const float *truth, double margin, double *out,
                                    double *delta, double *scale, int *near)
{
    if (l->type != YOLO)
        return SDNN_ERROR(SDNN_ERR_INVALID, "gradref: yolo delta of a %s layer",
                          sdnn_layer_type_name(l->type));
    if (l->map)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: a yolo layer with a class map");
    size_t no = (size_t)l->batch * l->outputs;
    int hw = l->w * l->h;
    *near = 0;
    memcpy(out, x, no * sizeof *out);
    for (int b = 0; b < l->batch; ++b)
        for (int n = 0; n < l->n; ++n) {
            for (int e = 0; e < 5 + l->classes; ++e) {
                if (e == 2 || e == 3) continue;   /* w, h stay raw */
                double *p = out + at(l, b, n, e, 0, 0);
                for (int k = 0; k < hw; ++k) p[k] = sdnn_dlogistic(p[k]);
            }
        }
    memset(delta, 0, no * sizeof *delta);
    if (scale) memset(scale, 0, no * sizeof *scale);
    for (int b = 0; b < l->batch; ++b) {
        /* Every prediction: objectness to 0 unless its best IOU with a
         * truth passes ignore_thresh; past truth_thresh, to 1 with its
         * box and class terms. */
        for (int j = 0; j < l->h; ++j)
            for (int i = 0; i < l->w; ++i)
                for (int n = 0; n < l->n; ++n) {
                    sdnn_dbox p = pred_box(l, out, b, n, j, i, l->mask[n], net_w, net_h);
                    double best = 0;
                    int best_t = 0;
                    for (int t = 0; t < l->max_boxes; ++t) {
                        sdnn_dbox tb = truth_box(l, truth, b, t);
                        if (tb.x == 0) break;
                        double v = sdnn_dbox_iou(p, tb);
                        if (v > best) best = v, best_t = t;
                    }
                    if (fabs(best - l->ignore_thresh) < margin || fabs(best - l->truth_thresh) < margin)
                        ++*near;
                    size_t oi = at(l, b, n, 4, j, i);
                    delta[oi] = 0 - out[oi];
                    if (scale) scale[oi] = 1;
                    if (best > l->ignore_thresh) {
                        delta[oi] = 0;
                        if (scale) scale[oi] = 0;   /* ignored: no term */
                    }
                    if (best > l->truth_thresh) {
                        delta[oi] = 1 - out[oi];
                        if (scale) scale[oi] = 1;
                        int cls = (int)truth[(size_t)b * l->truths + (size_t)best_t * 5 + 4];
                        class_delta(l, out, cls, b, n, j, i, delta, scale);
                        box_delta(l, out, truth_box(l, truth, b, best_t), b, n, j, i, l->mask[n],
                                  net_w, net_h, delta, scale);
                    }
                }
        /* Every truth: the anchor of the most similar shape (centres
         * aligned) over all the layer's anchors; when this layer owns it,
         * that slot of the truth's cell gets objectness 1, the box and the
         * class terms. */
        for (int t = 0; t < l->max_boxes; ++t) {
            sdnn_dbox tb = truth_box(l, truth, b, t);
            if (tb.x == 0) break;
            int i = (int)(tb.x * l->w), j = (int)(tb.y * l->h);
            sdnn_dbox shape = { 0, 0, tb.w, tb.h };
            double best = 0;
            int best_n = 0;
            for (int a = 0; a < l->total; ++a) {
                sdnn_dbox ab = { 0, 0, l->biases[2 * a] / net_w, l->biases[2 * a + 1] / net_h };
                double v = sdnn_dbox_iou(ab, shape);
                if (v > best) best = v, best_n = a;
            }
            int slot = -1;
            for (int n = 0; n < l->n; ++n)
                if (l->mask[n] == best_n) slot = n;
            if (slot < 0) continue;
            box_delta(l, out, tb, b, slot, j, i, best_n, net_w, net_h, delta, scale);
            size_t oi = at(l, b, slot, 4, j, i);
            delta[oi] = 1 - out[oi];
            if (scale) scale[oi] = 1;
            int cls = (int)truth[(size_t)b * l->truths + (size_t)t * 5 + 4];
            class_delta(l, out, cls, b, slot, j, i, delta, scale);
        }
    }
    return SDNN_OK;
}
