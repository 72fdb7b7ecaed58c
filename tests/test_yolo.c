/*
 * The maintained Darknet fork's [yolo] layer as built here:
 *  - box_ops.h's iou, giou, diou, ciou and DIoU-NMS values against
 *    references written here in double precision;
 *  - the fork's box deltas (sdnn_box_iou_delta) against central
 *    differences of those references, combined as the fork combines them
 *    (box_ops.h, top: the IoU part of w, h twice, the distance part as
 *    d/c, CIoU's aspect part with alpha held and w^2 + h^2 dropped);
 *  - the scale_x_y and new_coords codings and their inverses;
 *  - the layer's deltas and cost for a tiny hand-made head (one truth,
 *    2x2 cells), MSE with scale_x_y and the normalizers, CIoU with
 *    new_coords, objectness_smooth and max_delta, iou_thresh's extra
 *    anchors and their averaging, against a reference written here;
 *  - the NMS kinds on boxes that tell them apart;
 *  - parse, train a few iterations, save, reload, `detector map` for
 *    cfg/shapes-v4tiny.cfg and cfg/shapes-v7tiny.cfg (and their scalednn
 *    variants with -gpus 0,1) through the darknet binary.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "box_ops.h"
#include "cfgcheck.h"
#include "dialect.h"
#include "replicas.h"
#include "testutil.h"
#include "yolo_dialect.h"
#include "scalednn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- references ------------------------------------------------------------ */

typedef struct dbox {
    double x, y, w, h;
} dbox;

static double d_inter(dbox a, dbox b)
{
    double w = fmin(a.x + a.w / 2, b.x + b.w / 2) - fmax(a.x - a.w / 2, b.x - b.w / 2);
    double h = fmin(a.y + a.h / 2, b.y + b.h / 2) - fmax(a.y - a.h / 2, b.y - b.h / 2);
    return w < 0 || h < 0 ? 0 : w * h;
}

static double d_union(dbox a, dbox b) { return a.w * a.h + b.w * b.h - d_inter(a, b); }
static double d_iou(dbox a, dbox b) { return d_inter(a, b) / d_union(a, b); }

static void d_encl(dbox a, dbox b, double *w, double *h)
{
    *w = fmax(a.x + a.w / 2, b.x + b.w / 2) - fmin(a.x - a.w / 2, b.x - b.w / 2);
    *h = fmax(a.y + a.h / 2, b.y + b.h / 2) - fmin(a.y - a.h / 2, b.y - b.h / 2);
}

static double d_giou(dbox a, dbox b)
{
    double w, h;
    d_encl(a, b, &w, &h);
    return d_iou(a, b) - (w * h - d_union(a, b)) / (w * h);
}

/* d / c: squared centre distance over the squared enclosing diagonal. */
static double d_dist(dbox a, dbox b)
{
    double w, h;
    d_encl(a, b, &w, &h);
    return ((a.x - b.x) * (a.x - b.x) + (a.y - b.y) * (a.y - b.y)) / (w * w + h * h);
}

static double d_v(dbox p, dbox t)
{
    double da = atan(t.w / t.h) - atan(p.w / p.h);
    return 4 / (M_PI * M_PI) * da * da;
}

static double d_alpha(dbox p, dbox t)
{
    return d_v(p, t) / (1 - d_iou(p, t) + d_v(p, t) + 1e-6);
}

static double d_ciou(dbox a, dbox b) { return d_iou(a, b) - (d_dist(a, b) + d_alpha(a, b) * d_v(a, b)); }

static sdnn_box fbox(dbox b) { return (sdnn_box){(float)b.x, (float)b.y, (float)b.w, (float)b.h}; }

/* Central difference of f in component k of the prediction. */
static double partial(double (*f)(dbox, dbox), dbox p, dbox t, int k)
{
    const double h = 1e-6;
    dbox a = p, b = p;
    double *pa = k == 0 ? &a.x : k == 1 ? &a.y : k == 2 ? &a.w : &a.h;
    double *pb = k == 0 ? &b.x : k == 1 ? &b.y : k == 2 ? &b.w : &b.h;
    *pa += h;
    *pb -= h;
    return (f(a, t) - f(b, t)) / (2 * h);
}

static double sq_dist(dbox a, dbox b) { return (a.x - b.x) * (a.x - b.x) + (a.y - b.y) * (a.y - b.y); }

static double sq_diag(dbox a, dbox b)
{
    double w, h;
    d_encl(a, b, &w, &h);
    return w * w + h * h;
}
static double aspect_v(dbox a, dbox b) { return d_v(a, b); }

static void close_to(double got, double want, double tol, const char *what, int i)
{
    double err = fabs(got - want) / (fabs(want) > 1.0 ? fabs(want) : 1.0);
    if (err > tol) fail_msg("%s (case %d): %.9g, reference %.9g (error %.3g > %.3g)", what, i, got,
                            want, err, tol);
}

static dbox rand_box(uint64_t *s)
{
    return (dbox){tu_uniform(s, 0.3f, 0.7f), tu_uniform(s, 0.3f, 0.7f), tu_uniform(s, 0.1f, 0.5f),
                  tu_uniform(s, 0.1f, 0.5f)};
}

/* No edge of one box within `m` of an edge of the other (the min/max
 * kinks of the overlap and the enclosing box). */
static int edges_apart(dbox p, dbox t, double m)
{
    double pe[4] = {p.x - p.w / 2, p.x + p.w / 2, p.y - p.h / 2, p.y + p.h / 2};
    double te[4] = {t.x - t.w / 2, t.x + t.w / 2, t.y - t.h / 2, t.y + t.h / 2};
    for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b)
            if ((a < 2) == (b < 2) && fabs(pe[a] - te[b]) < m) return 0;
    return 1;
}

/* ---- the box formulas ---------------------------------------------------- */

static void test_box_values(void **state)
{
    (void)state;
    uint64_t s = 17;
    int overlapping = 0;
    for (int i = 0; i < 2000; ++i) {
        dbox a = rand_box(&s), b = rand_box(&s);
        sdnn_box fa = fbox(a), fb = fbox(b);
        a = (dbox){fa.x, fa.y, fa.w, fa.h};
        b = (dbox){fb.x, fb.y, fb.w, fb.h};
        overlapping += d_inter(a, b) > 0;
        close_to(sdnn_box_iou(fa, fb), d_iou(a, b), 2e-6, "iou", i);
        close_to(sdnn_box_giou(fa, fb), d_giou(a, b), 2e-6, "giou", i);
        close_to(sdnn_box_diou(fa, fb), d_iou(a, b) - pow(d_dist(a, b), 0.6), 2e-6, "diou", i);
        close_to(sdnn_box_diou_beta(fa, fb, 0.8f), d_iou(a, b) - pow(d_dist(a, b), 0.8), 2e-6,
                 "diounms", i);
        close_to(sdnn_box_ciou(fa, fb), d_ciou(a, b), 2e-6, "ciou", i);
        close_to(sdnn_box_iou_kind(fa, fb, SDNN_CIOU), d_ciou(a, b), 2e-6, "iou_kind", i);
    }
    assert_true(overlapping > 500 && overlapping < 1990); /* both kinds of pair seen */
    /* Known values: the same box; a box and its half; apart. */
    sdnn_box u = {0.5f, 0.5f, 0.2f, 0.2f}, half = {0.45f, 0.5f, 0.1f, 0.2f};
    assert_true(fabsf(sdnn_box_iou(u, u) - 1) < 1e-6f && fabsf(sdnn_box_ciou(u, u) - 1) < 1e-5f);
    close_to(sdnn_box_iou(u, half), 0.5, 1e-6, "iou half", 0);
    sdnn_box far = {0.1f, 0.1f, 0.1f, 0.1f};
    assert_true(sdnn_box_iou(u, far) == 0.0f && sdnn_box_giou(u, far) < 0);
}

static void test_box_deltas(void **state)
{
    (void)state;
    uint64_t s = 23;
    int checked[2] = {0, 0}; /* overlapping, apart */
    for (int i = 0; i < 4000 && (checked[0] < 300 || checked[1] < 100); ++i) {
        dbox p = rand_box(&s), t = rand_box(&s);
        if (i % 3 == 0) p.x += 0.45; /* push some pairs apart */
        sdnn_box fp = fbox(p), ft = fbox(t);
        p = (dbox){fp.x, fp.y, fp.w, fp.h};
        t = (dbox){ft.x, ft.y, ft.w, ft.h};
        if (!edges_apart(p, t, 1e-3)) continue;
        double Iw = fmin(p.x + p.w / 2, t.x + t.w / 2) - fmax(p.x - p.w / 2, t.x - t.w / 2);
        double Ih = fmin(p.y + p.h / 2, t.y + t.h / 2) - fmax(p.y - p.h / 2, t.y - t.h / 2);
        int apart = Iw <= 0 || Ih <= 0;
        if (apart && !(Iw < 0 && Ih < 0) && i % 2) continue;
        ++checked[apart];
        double gi[4], gg[4], gd[4], gv[4], S = sq_dist(p, t), C = sq_diag(p, t);
        for (int k = 0; k < 4; ++k) {
            gi[k] = apart ? 0 : partial(d_iou, p, t, k);
            gg[k] = partial(d_giou, p, t, k);
            gv[k] = partial(aspect_v, p, t, k);
            /* -d/c = -S/C differentiated, except that the fork's centre
             * components take the enclosing diagonal's part with the
             * opposite sign: (-S' C - S C') / C^2. */
            double gS = partial(sq_dist, p, t, k), gC = partial(sq_diag, p, t, k);
            gd[k] = k < 2 ? (-gS * C - S * gC) / (C * C) : (-gS * C + S * gC) / (C * C);
        }
        /* alpha as the fork's delta takes it: with I = Iw Ih, which is
         * not the overlap (0) when the boxes are apart. */
        double I = Iw * Ih, v = d_v(p, t);
        double a = v / (1 - I / (p.w * p.h + t.w * t.h - I) + v + 1e-6), r2 = p.w * p.w + p.h * p.h;
        double want_iou[4] = {gi[0], gi[1], 2 * gi[2], 2 * gi[3]};
        double want_giou[4] = {gg[0], gg[1], 2 * gg[2], 2 * gg[3]};
        double want_diou[4] = {gi[0] + gd[0], gi[1] + gd[1], 2 * gi[2] + gd[2], 2 * gi[3] + gd[3]};
        double want_ciou[4];
        for (int k = 0; k < 4; ++k)
            want_ciou[k] = want_diou[k] - (k >= 2 ? a * r2 * gv[k] : 0);
        float got[4];
        if (!apart) {
            /* The fork's IoU and GIoU deltas of a pair apart use the
             * overlap's (negative) extent, which is no gradient of
             * anything: only overlapping pairs. */
            sdnn_box_iou_delta(fp, ft, SDNN_IOU, got);
            for (int k = 0; k < 4; ++k) close_to(got[k], want_iou[k], 2e-3, "iou delta", i);
            sdnn_box_iou_delta(fp, ft, SDNN_GIOU, got);
            for (int k = 0; k < 4; ++k) close_to(got[k], want_giou[k], 2e-3, "giou delta", i);
        }
        sdnn_box_iou_delta(fp, ft, SDNN_DIOU, got);
        for (int k = 0; k < 4; ++k) close_to(got[k], want_diou[k], 2e-3, "diou delta", i);
        sdnn_box_iou_delta(fp, ft, SDNN_CIOU, got);
        for (int k = 0; k < 4; ++k) close_to(got[k], want_ciou[k], 2e-3, "ciou delta", i);
    }
    assert_true(checked[0] >= 300);
    assert_true(checked[1] >= 100);
}

static void test_coding_round_trip(void **state)
{
    (void)state;
    for (double v = -3; v <= 3; v += 0.125) {
        for (int s = 0; s < 3; ++s) {
            float scale = s == 0 ? 1.0f : s == 1 ? 1.05f : 2.0f;
            close_to(sdnn_yolo_xy((float)v, scale), scale * v - (scale - 1) / 2, 1e-6, "xy", s);
        }
        /* exponential coding: w = e^v anchor / net, and back */
        float w = sdnn_yolo_wh((float)v, 30, 416, 0);
        close_to(w, exp(v) * 30 / 416, 1e-6, "wh exp", 0);
        close_to(sdnn_yolo_wh_target(w, 30, 416, 0), v, 1e-5, "wh exp inverse", 0);
        assert_true(sdnn_yolo_wh_stored((float)v, 0) == (float)v);
        if (v <= 0) continue;
        /* new_coords: w = 4 v^2 anchor / net, and back; the stored value
         * decodes through exp to the same width */
        w = sdnn_yolo_wh((float)v, 30, 416, 1);
        close_to(w, 4 * v * v * 30 / 416, 1e-6, "wh new", 0);
        close_to(sdnn_yolo_wh_target(w, 30, 416, 1), v, 1e-5, "wh new inverse", 0);
        close_to(expf(sdnn_yolo_wh_stored((float)v, 1)) * 30 / 416, w, 1e-5, "wh stored", 0);
    }
    /* The centre of scale 2: v in [0, 1] reaches half a cell beyond each side. */
    assert_true(sdnn_yolo_xy(0.0f, 2.0f) == -0.5f && sdnn_yolo_xy(1.0f, 2.0f) == 1.5f);
    assert_true(sdnn_yolo_wh_chain(0.5f, 1) == 1.0f);
    close_to(sdnn_yolo_wh_chain(0.5f, 0), exp(0.5), 1e-6, "chain", 0);
}

/* ---- the layer ------------------------------------------------------------- */

static network *parse_text(const char *text)
{
    char path[] = "/tmp/sdnn-yolo-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    if (sdnn_cfg_check_file(path) != SDNN_OK) fail_msg("cfgcheck: %s", sdnn_last_error());
    network *net = sdnn_parse_network(path);
    unlink(path);
    assert_non_null(net);
    return net;
}

/* Give the network back its own buffers (the test pointed them at its
 * arrays), then free it. */
static void release(network *net, network saved)
{
    net->input = saved.input;
    net->truth = saved.truth;
    net->delta = saved.delta;
    sdnn_network_free(net);
}

static double sig(double x) { return 1 / (1 + exp(-x)); }

/* A 2x2 head of `nanch` anchors and one class on the network's input. */
#define HEAD_NET(ch) "[net]\nbatch=1\nwidth=2\nheight=2\nchannels=" #ch "\n"

/* One truth, one anchor, MSE: every delta and the cost against the
 * fork's rules written out here. */
static void test_layer_mse(void **state)
{
    (void)state;
    network *net = parse_text(HEAD_NET(6) "[yolo]\nmask=0\nanchors=1,1\nclasses=1\nnum=1\n"
                                          "ignore_thresh=.7\ntruth_thresh=1\nscale_x_y=1.2\n"
                                          "iou_normalizer=0.5\nobj_normalizer=2\n");
    layer *l = &net->layers[0];
    assert_non_null(sdnn_dialect_yolo(net, 0));
    assert_int_equal(l->outputs, 24);
    /* Entries: 6 planes (x, y, w, h, obj, class) of 4 cells each. */
    float in[24];
    uint64_t s = 41;
    for (int i = 0; i < 24; ++i) in[i] = tu_uniform(&s, -1.0f, 1.0f);
    float truth[5 * 90] = {0};
    const double tx = 0.3, ty = 0.6, tw = 0.4, th = 0.5; /* cell (0, 1) */
    truth[0] = (float)tx, truth[1] = (float)ty, truth[2] = (float)tw, truth[3] = (float)th;
    network saved = *net;
    net->input = in;
    net->truth = truth;
    net->train = 1;
    net->index = 0;
    l->forward(*l, *net);
    float cost = l->cost[0];
    double out[24], want[24];
    for (int c = 0; c < 4; ++c) {
        for (int e = 0; e < 6; ++e) out[e * 4 + c] = e == 2 || e == 3 ? in[e * 4 + c] : sig(in[e * 4 + c]);
        out[c] = 1.2 * out[c] - 0.1;
        out[4 + c] = 1.2 * out[4 + c] - 0.1;
    }
    for (int i = 0; i < 24; ++i) want[i] = 0;
    for (int c = 0; c < 4; ++c) {
        /* Objectness: pushed to 0 unless a prediction of a likely class
         * overlaps the truth by more than ignore_thresh. */
        dbox p = {(c % 2 + out[c]) / 2, (c / 2 + out[4 + c]) / 2, exp(out[8 + c]) / 2,
                  exp(out[12 + c]) / 2};
        double iou = d_iou(p, (dbox){tx, ty, tw, th});
        want[16 + c] = out[20 + c] > 0.25 && iou > 0.7 ? 0 : 2 * (0 - out[16 + c]);
    }
    int c = 2; /* the truth's cell: i = 0, j = 1 */
    double scale = 2 - tw * th;
    want[c] = scale * (tx * 2 - 0 - out[c]) * 0.5;
    want[4 + c] = scale * (ty * 2 - 1 - out[4 + c]) * 0.5;
    want[8 + c] = scale * (log(tw * 2 / 1) - out[8 + c]) * 0.5;
    want[12 + c] = scale * (log(th * 2 / 1) - out[12 + c]) * 0.5;
    want[16 + c] = 2 * (1 - out[16 + c]);
    want[20 + c] = 1 - out[20 + c];
    double sq = 0;
    for (int i = 0; i < 24; ++i) {
        close_to(l->output[i], out[i], 1e-6, "output", i);
        close_to(l->delta[i], want[i], 1e-5, "delta", i);
        sq += want[i] * want[i];
    }
    close_to(cost, sq, 1e-5, "cost (|delta|^2 for mse)", 0);
    /* Not training: the same output, no delta written. */
    memset(l->delta, 0, 24 * sizeof *l->delta);
    net->train = 0;
    l->forward(*l, *net);
    for (int i = 0; i < 24; ++i) {
        close_to(l->output[i], out[i], 1e-6, "predict output", i);
        assert_true(l->delta[i] == 0.0f);
    }
    /* Backward is libdarknet's: the delta added into the input's. */
    float d_in[24] = {0};
    net->delta = d_in;
    net->train = 1;
    l->forward(*l, *net);
    l->backward(*l, *net);
    for (int i = 0; i < 24; ++i) assert_true(d_in[i] == l->delta[i]);
    release(net, saved);
}

/* new_coords + CIoU + objectness_smooth + max_delta, and iou_thresh
 * taking a second anchor for the same truth (the box delta of a cell
 * with one truth is divided by one: unchanged). */
static void test_layer_ciou_new_coords(void **state)
{
    (void)state;
    network *net = parse_text(HEAD_NET(12) "[yolo]\nmask=0,1\nanchors=1,1, 1,1.2\nclasses=1\n"
                                           "num=2\nignore_thresh=.7\ntruth_thresh=1\n"
                                           "scale_x_y=2\nnew_coords=1\niou_loss=ciou\n"
                                           "iou_normalizer=0.05\nobj_normalizer=1.5\n"
                                           "objectness_smooth=1\nmax_delta=0.03\n"
                                           "iou_thresh=0.2\n");
    layer *l = &net->layers[0];
    const sdnn_yolo_opts *o = sdnn_dialect_yolo(net, 0);
    assert_non_null(o);
    assert_true(o->new_coords == 1 && o->iou_loss == SDNN_CIOU && o->objectness_smooth == 1);
    float in[48];
    uint64_t s = 43;
    for (int i = 0; i < 48; ++i) in[i] = tu_uniform(&s, 0.05f, 0.95f); /* logistic outputs */
    float truth[5 * 90] = {0};
    const dbox t = {0.7, 0.2, 0.45, 0.6}; /* cell (1, 0) */
    truth[0] = (float)t.x, truth[1] = (float)t.y, truth[2] = (float)t.w, truth[3] = (float)t.h;
    network saved = *net;
    net->input = in;
    net->truth = truth;
    net->train = 1;
    net->index = 0;
    l->forward(*l, *net);
    float cost = l->cost[0];
    double want[48] = {0};
    const double anchors[2][2] = {{1, 1}, {1, 1.2}};
    /* Anchor 1 (1 x 1.2) fits the truth better; anchor 0 has IoU
     * min(0.45,0.5) * min(0.55,0.5) / union with it, above 0.2. */
    dbox a0 = {0, 0, 0.5, 0.5}, a1 = {0, 0, 0.5, 0.6}, ts = {0, 0, t.w, t.h};
    assert_true(d_iou(a1, ts) > d_iou(a0, ts) && d_iou(a0, ts) > 0.2);
    int clipped = 0, unclipped = 0;
    for (int n = 0; n < 2; ++n) {
        const float *v = in + n * 24;
        for (int c = 0; c < 4; ++c) {
            dbox p = {(c % 2 + 2.0 * v[c] - 0.5) / 2, (c / 2 + 2.0 * v[4 + c] - 0.5) / 2,
                      4.0 * v[8 + c] * v[8 + c] * anchors[n][0] / 2,
                      4.0 * v[12 + c] * v[12 + c] * anchors[n][1] / 2};
            double iou = d_iou(p, t);
            double d = 1.5 * (0 - v[16 + c]);
            if (v[20 + c] > 0.25 && iou > 0.7 && 1.5 * (iou - v[16 + c]) > d) d = 1.5 * (iou - v[16 + c]);
            want[n * 24 + 16 + c] = d;
            if (c != 1) continue;
            /* The truth's cell, on both anchors: the box delta is the
             * fork's CIoU direction times the normalizer, clipped; the
             * objectness keeps its (nonzero) first-pass value, as the
             * fork's objectness_smooth does; the class goes to 1. */
            float g[4];
            sdnn_box_iou_delta(fbox(p), fbox(t), SDNN_CIOU, g);
            for (int k = 0; k < 4; ++k) {
                double x = g[k] * 0.05;
                if (fabs(x) > 0.03) {
                    x = x > 0 ? 0.03 : -0.03;
                    ++clipped;
                } else {
                    ++unclipped;
                }
                want[n * 24 + 4 * k + c] = x;
            }
            want[n * 24 + 20 + c] = 1 - v[20 + c];
        }
    }
    assert_true(clipped > 0 && unclipped > 0); /* max_delta matters here */
    for (int i = 0; i < 48; ++i) close_to(l->delta[i], want[i], 2e-5, "delta", i);
    /* The output: x, y scaled, w, h stored so that exp decodes 4 v^2. */
    for (int n = 0; n < 2; ++n)
        for (int c = 0; c < 4; ++c) {
            int b = n * 24;
            close_to(l->output[b + c], 2.0 * in[b + c] - 0.5, 1e-6, "x", c);
            close_to(exp(l->output[b + 8 + c]), 4.0 * in[b + 8 + c] * in[b + 8 + c], 1e-5, "w", c);
            assert_true(l->output[b + 16 + c] == in[b + 16 + c]); /* no logistic */
        }
    /* cost = iou_normalizer * mean(1 - iou) + obj_normalizer * |non-box delta|^2 */
    double mean = 0, nonbox = 0;
    for (int n = 0; n < 2; ++n) {
        const float *v = in + n * 24;
        dbox p = {(1 + 2.0 * v[1] - 0.5) / 2, (0 + 2.0 * v[5] - 0.5) / 2,
                  4.0 * v[9] * v[9] * anchors[n][0] / 2, 4.0 * v[13] * v[13] * anchors[n][1] / 2};
        mean += (1 - d_iou(p, t)) / 2;
        for (int c = 0; c < 4; ++c)
            nonbox += want[n * 24 + 16 + c] * want[n * 24 + 16 + c] +
                      want[n * 24 + 20 + c] * want[n * 24 + 20 + c];
    }
    close_to(cost, 0.05 * mean + 1.5 * nonbox, 1e-4, "cost", 0);
    release(net, saved);
}

/* iou_thresh: a cell whose anchor takes two truths gets their mean box
 * delta (the fork's averages_yolo_deltas, counting classes with a
 * positive delta); without iou_thresh the sum would stay. */
static void test_layer_iou_thresh_average(void **state)
{
    (void)state;
    const char *cfg = HEAD_NET(7) "[yolo]\nmask=0\nanchors=1,1\nclasses=2\nnum=1\n"
                                  "ignore_thresh=1\ntruth_thresh=1\niou_loss=mse\n"
                                  "iou_normalizer=1\niou_thresh=0.5\n";
    network *net = parse_text(cfg);
    layer *l = &net->layers[0];
    float in[28];
    for (int i = 0; i < 28; ++i) in[i] = 0.1f * (float)(i % 5) - 0.2f;
    float truth[5 * 90] = {0};
    /* Two truths in cell (0, 0), classes 0 and 1. */
    const float t[2][5] = {{0.2f, 0.2f, 0.4f, 0.4f, 0}, {0.3f, 0.25f, 0.6f, 0.5f, 1}};
    memcpy(truth, t, sizeof t);
    network saved = *net;
    net->input = in;
    net->truth = truth;
    net->train = 1;
    net->index = 0;
    l->forward(*l, *net);
    /* Each truth adds its MSE box delta; two classes end with a positive
     * delta, so the sum is halved. */
    double sum[4] = {0};
    for (int k = 0; k < 2; ++k) {
        double scale = 2 - (double)t[k][2] * t[k][3];
        double x = sig(in[0]), y = sig(in[4]);
        sum[0] += scale * (t[k][0] * 2 - x);
        sum[1] += scale * (t[k][1] * 2 - y);
        sum[2] += scale * (log(t[k][2] * 2) - in[8]);
        sum[3] += scale * (log(t[k][3] * 2) - in[12]);
    }
    for (int k = 0; k < 4; ++k) close_to(l->delta[4 * k], sum[k] / 2, 1e-5, "mean box delta", k);
    close_to(l->delta[16], 1 - sig(in[16]), 1e-6, "objectness", 0);
    release(net, saved);
}

/* ---- NMS ------------------------------------------------------------------ */

static void nms_case(sdnn_nms_kind kind, float beta, int *kept)
{
    /* A (0.9) and B (0.8): IoU 0.5 with centres apart; C (0.7) far away. */
    box bx[3] = {{0.5f, 0.5f, 0.2f, 0.2f}, {0.5f + 0.2f / 3, 0.5f, 0.2f, 0.2f}, {0.1f, 0.1f, 0.1f, 0.1f}};
    float probs[3] = {0.9f, 0.8f, 0.7f};
    float p[3][1];
    detection d[3];
    for (int i = 0; i < 3; ++i) {
        p[i][0] = probs[i];
        d[i] = (detection){.bbox = bx[i], .classes = 1, .prob = p[i], .objectness = probs[i]};
    }
    sdnn_yolo_nms(d, 3, 1, 0.45f, kind, beta);
    for (int i = 0; i < 3; ++i) kept[i] = 0;
    for (int i = 0; i < 3; ++i) {
        int who = d[i].prob == p[0] ? 0 : d[i].prob == p[1] ? 1 : 2;
        kept[who] = d[i].prob[0] > 0;
    }
}

static void test_nms_kinds(void **state)
{
    (void)state;
    dbox a = {0.5, 0.5, 0.2, 0.2}, b = {0.5 + 0.2 / 3, 0.5, 0.2, 0.2};
    close_to(d_iou(a, b), 0.5, 1e-6, "iou", 0);
    double greedy = d_iou(a, b) - pow(d_dist(a, b), 0.6), dn = d_iou(a, b) - pow(d_dist(a, b), 2);
    assert_true(greedy < 0.45 && dn > 0.45); /* the kinds disagree on B */
    int kept[3];
    nms_case(SDNN_NMS_DEFAULT, 0.6f, kept); /* IoU 0.5 > 0.45: B suppressed */
    assert_true(kept[0] && !kept[1] && kept[2]);
    nms_case(SDNN_NMS_GREEDY, 0.6f, kept); /* diou below 0.45: B kept */
    assert_true(kept[0] && kept[1] && kept[2]);
    nms_case(SDNN_NMS_DIOU, 2.0f, kept); /* beta 2: the penalty is small, B suppressed */
    assert_true(kept[0] && !kept[1] && kept[2]);
    nms_case(SDNN_NMS_DIOU, 0.6f, kept); /* beta 0.6 is greedynms's overlap */
    assert_true(kept[0] && kept[1] && kept[2]);
}

/* The network's last layer picks the kind, as in the fork's detector. */
static void test_dialect_nms_uses_last_head(void **state)
{
    (void)state;
    network *net = parse_text(HEAD_NET(6) "[yolo]\nmask=0\nanchors=1,1\nclasses=1\nnum=1\n"
                                          "nms_kind=greedynms\n");
    box bx[2] = {{0.5f, 0.5f, 0.2f, 0.2f}, {0.5f + 0.2f / 3, 0.5f, 0.2f, 0.2f}};
    float p[2][1] = {{0.9f}, {0.8f}};
    detection d[2];
    for (int i = 0; i < 2; ++i)
        d[i] = (detection){.bbox = bx[i], .classes = 1, .prob = p[i], .objectness = p[i][0]};
    sdnn_dialect_nms(net, d, 2, 1, 0.45f);
    assert_true(p[0][0] > 0 && p[1][0] > 0); /* greedynms keeps B */
    sdnn_network_free(net);
    net = parse_text(HEAD_NET(6) "[yolo]\nmask=0\nanchors=1,1\nclasses=1\nnum=1\n");
    assert_null(sdnn_dialect_yolo(net, 0)); /* a plain head is libdarknet's */
    for (int i = 0; i < 2; ++i)
        d[i] = (detection){.bbox = bx[i], .classes = 1, .prob = p[i], .objectness = p[i][0]};
    sdnn_dialect_nms(net, d, 2, 1, 0.45f);
    assert_true((p[0][0] > 0) != (p[1][0] > 0)); /* do_nms_sort drops one */
    sdnn_network_free(net);
}

/* ---- through the binary ------------------------------------------------------ */

static const char *g_bin;
static char g_dir[64];

static int setup(void **state)
{
    (void)state;
    g_bin = getenv("SDNN_DARKNET_BIN");
    if (!g_bin) g_bin = "./darknet";
    snprintf(g_dir, sizeof g_dir, "/tmp/sdnn-yolo-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (tu_run("%s scalednn gen-shapes %s/shapes -n 24 -valid 6 -seed 5 >%s/gen.log 2>&1", g_bin,
               g_dir, g_dir) != 0)
        return -1;
    return tu_run("printf 'classes=4\\ntrain=%s/shapes/train.txt\\nvalid=%s/shapes/valid.txt\\n"
                  "names=%s/shapes/shapes.names\\nbackup=%s/backup/\\n' > %s/s.data && "
                  "mkdir -p %s/backup",
                  g_dir, g_dir, g_dir, g_dir, g_dir, g_dir);
}

static int teardown(void **state)
{
    (void)state;
    if (g_dir[0] && !getenv("SDNN_KEEP")) tu_run("rm -rf %s", g_dir);
    return 0;
}

/* Train `cfg` 3 iterations, reload its weights twice (same outputs),
 * and run detector map on them. */
static void train_reload_map(const char *name, const char *base, const char *extra)
{
    char cfg[128], bcfg[128];
    snprintf(cfg, sizeof cfg, "cfg/%s.cfg", name);
    snprintf(bcfg, sizeof bcfg, "cfg/%s.cfg", base); /* the net without [scalednn] */
    int rc = tu_run("%s detector train %s/s.data %s -max_batches 3 -seed 1 %s >%s/%s.log 2>&1",
                    g_bin, g_dir, cfg, extra, g_dir, name);
    if (rc != 0) fail_msg("%s: detector train exit %d (see %s/%s.log)", name, rc, g_dir, name);
    char w[256];
    snprintf(w, sizeof w, "%s/backup/%s_final.weights", g_dir, name);
    assert_int_equal(access(w, R_OK), 0);
    network *a = sdnn_parse_network(bcfg), *b = sdnn_parse_network(bcfg);
    assert_non_null(a);
    assert_non_null(b);
    load_weights(a, w);
    load_weights(b, w);
    set_batch_network(a, 1);
    set_batch_network(b, 1);
    static float in[64 * 64 * 3];
    uint64_t s = 3;
    for (size_t i = 0; i < sizeof in / sizeof in[0]; ++i) in[i] = tu_uniform(&s, 0.0f, 1.0f);
    network_predict(a, in);
    network_predict(b, in);
    int heads = 0;
    for (int L = 0; L < a->n; ++L) {
        heads += sdnn_dialect_yolo(a, L) != NULL;
        for (int i = 0; i < a->layers[L].outputs; ++i)
            if (!(a->layers[L].output[i] == b->layers[L].output[i]) || isnan(a->layers[L].output[i]))
                fail_msg("%s layer %d value %d: %g / %g", name, L, i, a->layers[L].output[i],
                         b->layers[L].output[i]);
    }
    assert_int_equal(heads, 2);
    sdnn_network_free(a);
    sdnn_network_free(b);
    rc = tu_run("%s detector map %s/s.data %s %s >%s/%s.map 2>&1 && grep -q 'mAP@0.50: all-point' "
                "%s/%s.map",
                g_bin, g_dir, cfg, w, g_dir, name, g_dir, name);
    if (rc != 0) fail_msg("%s: detector map exit %d (see %s/%s.map)", name, rc, g_dir, name);
}

static void test_v4tiny_train_map(void **state)
{
    (void)state;
    train_reload_map("shapes-v4tiny", "shapes-v4tiny", "");
    train_reload_map("shapes-v4tiny-scalednn", "shapes-v4tiny", "-gpus 0,1");
}

static void test_v7tiny_train_map(void **state)
{
    (void)state;
    assert_int_equal(sdnn_cfg_check_file("cfg/shapes-v7tiny.cfg"), SDNN_OK);
    network *n = sdnn_parse_network("cfg/shapes-v7tiny.cfg");
    assert_non_null(n);
    assert_int_equal(n->n, 51);
    assert_int_equal(n->layers[46].out_w, 8);
    assert_int_equal(n->layers[50].out_w, 4);
    assert_int_equal(n->layers[31].out_c, 192); /* the pyramid's concatenation */
    const sdnn_yolo_opts *o = sdnn_dialect_yolo(n, 50);
    assert_non_null(o);
    assert_true(o->new_coords == 1 && o->nms_kind == SDNN_NMS_DIOU && o->scale_x_y == 2.0f);
    assert_true(o->iou_thresh == 0.2f && o->max_delta == 2.0f && o->objectness_smooth == 1);
    sdnn_network_free(n);
    train_reload_map("shapes-v7tiny", "shapes-v7tiny", "");
    train_reload_map("shapes-v7tiny-scalednn", "shapes-v7tiny", "-gpus 0,1");
}

/* The real-size cfgs: checked (every key of the fork's yolov4-tiny and
 * yolov7-tiny built or refused by name; the heads' channels against
 * masks x (classes + 5)), and their layer walk without building the
 * networks (416x416 at batch 8 is large for CI). */
static void test_real_size_cfgs(void **state)
{
    (void)state;
    static const struct {
        const char *path;
        int layers, heads[3];
    } cfgs[] = {{"cfg/yolov4-tiny-dialect.cfg", 38, {29, 36, -1}},
                {"cfg/yolov4-tiny-dialect-scalednn.cfg", 38, {29, 36, -1}},
                {"cfg/yolov7-tiny-dialect.cfg", 99, {89, 93, 97}},
                {"cfg/yolov7-tiny-dialect-scalednn.cfg", 99, {89, 93, 97}}};
    for (int c = 0; c < 4; ++c) {
        if (sdnn_cfg_check_file(cfgs[c].path) != SDNN_OK)
            fail_msg("%s: %s", cfgs[c].path, sdnn_last_error());
        char *text = tu_slurp(cfgs[c].path);
        assert_non_null(text);
        long chan[128];
        int n = 0;
        assert_int_equal(sdnn_cfg_channels(cfgs[c].path, text, chan, 128, &n), SDNN_OK);
        free(text);
        assert_int_equal(n, cfgs[c].layers);
        for (int h = 0; h < 3 && cfgs[c].heads[h] >= 0; ++h) {
            assert_int_equal(chan[cfgs[c].heads[h]], 255); /* 3 x (80 + 5) */
            assert_int_equal(chan[cfgs[c].heads[h] + 1], 255);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_box_values),
        cmocka_unit_test(test_box_deltas),
        cmocka_unit_test(test_coding_round_trip),
        cmocka_unit_test(test_layer_mse),
        cmocka_unit_test(test_layer_ciou_new_coords),
        cmocka_unit_test(test_layer_iou_thresh_average),
        cmocka_unit_test(test_nms_kinds),
        cmocka_unit_test(test_dialect_nms_uses_last_head),
        cmocka_unit_test(test_real_size_cfgs),
        cmocka_unit_test(test_v4tiny_train_map),
        cmocka_unit_test(test_v7tiny_train_map),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
