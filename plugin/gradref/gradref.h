/*
 * gradref: a reference network in double precision, the plain
 * CPU reference beside the engines' kernels.  Built from a parsed
 * libdarknet network (same cfg, the same weights copied to double), it runs
 * forward and backward in double for the layer types the engines train:
 * convolutional (any size, stride, pad, groups; batch_normalize),
 * connected (batch_normalize), every libdarknet activation but stair plus
 * the dialect's mish and swish, shortcut, route (the dialect's grouped
 * route included), maxpool, avgpool, upsample, dropout (the mask the engine
 * drew, handed in), softmax and the cost heads sse/masked, l1, smooth.
 *
 * Batch norm is Darknet's training-mode forward: per channel, over the N =
 * batch x out_h x out_w values, mean m, variance v = sum (x - m)^2 / (N - 1),
 * y = (x - m) / (sqrt(v) + 1e-6), then scale and bias; the backward is the
 * exact derivative of that forward (not Darknet's, which divides by N).
 *
 * The objective is the sum over the step's subdivisions of the heads'
 * losses: sse 1/2 scale sum (t - x)^2, l1 scale sum |t - x|, smooth-l1
 * scale sum (1/2 d^2 if |d| < 1, else |d| - 1/2), softmax -sum t log p.
 * The gradient is d objective / d parameter (Darknet's updates hold its
 * negative).  Forward passes keep every layer's activations, so a forward
 * from layer i reruns only layers i.. (a central difference on a
 * parameter of layer i costs what the net after i costs).
 */
#ifndef SDNN_GRADREF_H
#define SDNN_GRADREF_H

#include "scalednn.h"
#include <darknet.h>
#include <stddef.h>

typedef struct sdnn_gradref sdnn_gradref;

/* A reference of `net` (its layers, weights, and the dialect's additions)
 * for `subdivisions` batches of net->batch images.  SDNN_ERR_UNSUPPORTED
 * names a layer type or option the reference does not compute. */
sdnn_status sdnn_gradref_create(const network *net, int subdivisions, sdnn_gradref **out);
void sdnn_gradref_destroy(sdnn_gradref *r);

/* Subdivision s's input (batch x net->inputs floats) and truth (the flat
 * buffer the heads read, batch x net->truths floats); for each dropout
 * layer, its mask (layer->rand as the engine drew it for this
 * subdivision): masks[i] for layer i, NULL elsewhere or no masks at all. */
sdnn_status sdnn_gradref_set_batch(sdnn_gradref *r, int s, const float *input,
                                   const float *truth, const float *const *masks);

/* Take subdivision s's activation pieces and maxpool choices from `net`
 * (the network the reference was built from) after its float forward of
 * that subdivision: each piecewise activation's piece from the layer's
 * output (every piece maps to its own range), each maxpool's choice from
 * its indexes.  A held forward then takes the engine's side of every value
 * that float and double round to different sides of a corner or a tie.
 * *changed (may be NULL): how many pieces and maxpool choices differ from
 * those the previous adopt of subdivision s took (0 on the first): a second
 * adopt from another float forward of the same subdivision counts where
 * the two forwards decided otherwise. */
sdnn_status sdnn_gradref_adopt(sdnn_gradref *r, int s, const network *net, size_t *changed);

/* Forward every subdivision from layer `from` on (0: all), the layers
 * before it as the last forward left them; returns the objective.  A plain
 * forward (hold 0) records which piece of each piecewise activation
 * (leaky, relu, ... at their corners) every value lies on and which input
 * each maxpool output took; a held forward (hold 1) evaluates those same
 * pieces and choices (each piece's formula continued past its corners).
 * The held objective equals the plain one near the recorded point and has
 * the same derivative there, without the kinks: a central difference of
 * it crosses no corner however many values lie near one. */
double sdnn_gradref_forward(sdnn_gradref *r, int from, int hold);
/* Backward of the last full forward: the gradients below, summed over the
 * subdivisions. */
void sdnn_gradref_backward(sdnn_gradref *r);

/* Layer i's tensor j in sdnn_layer_params order (weights, biases, scales):
 * its values (writable: a perturbation) and its gradient; *n its length.
 * NULL when there is no such tensor. */
double *sdnn_gradref_param(sdnn_gradref *r, int i, int j, size_t *n);
const double *sdnn_gradref_grad(const sdnn_gradref *r, int i, int j, size_t *n);

/* Beside each element of that gradient: the root of the sum, over the
 * subdivisions, of the squares of the terms the element sums (weights:
 * dz x input over batch and output positions; biases: dz; scales:
 * dz x xhat), q_e = sqrt(sum t^2), computed in double.  Random-walk
 * rounding (gradcheck.h): float errors of the terms and of the partial
 * sums are independent and mean-zero, so the sum's error has a standard
 * deviation of about u sqrt(R) (|sum t| + q_e), however much the terms
 * cancel. */
const double *sdnn_gradref_grad_spread(const sdnn_gradref *r, int i, int j, size_t *n);

/* The [yolo] heads' decisions: the elements on which the reference's
 * (made in double by the first forward after sdnn_gradref_adopt or
 * set_batch, held by later held forwards) and the float forward's (the
 * delta adopt took) differ, a term on one side only; *near gets the
 * predictions whose best IOU lies within 1e-4 of ignore_thresh or
 * truth_thresh. */
int sdnn_gradref_yolo_disagree(const sdnn_gradref *r, int *near);

/* The number of additions behind one value of layer i's output in a
 * forward pass (*fwd: conv c/groups x size^2, connected inputs, batch norm
 * adds its mean's and variance's N twice, a cost head its sum) and behind
 * one value of its input gradient in a backward pass (*bwd: conv
 * filters/groups x size^2, connected outputs, batch norm 2N): the error
 * model's reduction lengths (gradcheck.h). */
void sdnn_gradref_reduction(const sdnn_gradref *r, int i, double *fwd, double *bwd);

/* libdarknet's [yolo] delta in double (plugin/gradref/yolo_ref.c): what Debian's forward_yolo_layer writes into l->delta for the
 * layer's input x (batch x outputs) and the truth rows (batch x
 * l->truths floats: x, y, w, h, class per box; a box with x == 0 ends the
 * list), the network's input size net_w x net_h.  out gets the activated
 * output (logistic on x, y, objectness and classes; w, h raw).  Its
 * decisions: a prediction's objectness is pulled to 0 unless its best IOU
 * with a truth exceeds ignore_thresh (then 0), past truth_thresh to 1 with
 * box and class terms; each truth's slot (the anchor of the most similar
 * shape, if this layer owns it) gets objectness 1, the box terms
 * (2 - w h) (t - out) on x, y and on log-size for w, h, and the class
 * terms.  *near counts predictions whose best IOU lies within `margin` of
 * either threshold, the ones a float forward may decide the other way.
 * `scale` (NULL: not wanted) gets each element's weight s in
 * delta = s (target - out): 2 - w h on a box term, 1 on an objectness or
 * class term, 0 where no term was set (an ignored objectness included).
 * With the decisions held, delta is the negative gradient, with respect to
 * the layer's input x, of
 *     sum_e s_e (softplus(x_e) - target_e x_e)   (logistic entries: x, y,
 *                                                 objectness, classes)
 *   + sum_e s_e (target_e - x_e)^2 / 2            (w, h),
 * the objective the reference's [yolo] head evaluates (gradref.c). */
sdnn_status sdnn_gradref_yolo_delta(const layer *l, int net_w, int net_h, const double *x,
                                    const float *truth, double margin, double *out,
                                    double *delta, double *scale, int *near);

/* libdarknet's [region] delta in double (plugin/gradref/region_ref.c):
 * what Debian's forward_region_layer (yolov2-style, 2018) writes into
 * l->delta for the layer's input x (batch x outputs) and the truth rows
 * (batch x l->truths floats, x, y, w, h, class per box, 30 boxes an
 * image; x == 0 ends the list), `seen` the network's images seen (Darknet
 * reads *net->seen).  out gets the activated output: logistic on x, y and
 * objectness, the classes through a softmax over each slot's classes
 * (softmax=1) or each through its logistic, w and h raw.  Its decisions:
 * every prediction's objectness pulled to 0 with noobject_scale unless its
 * best IOU with a truth exceeds thresh (then no term); while seen < 12800,
 * every prediction's box pulled with weight .01 to its anchor centred in
 * its cell; each truth's slot in its cell (the slot whose predicted size,
 * or with bias_match its anchor, has the most similar shape) gets the box
 * terms weighted coord_scale (2 - w h) (x, y on the logistic, w, h as
 * log(size / anchor) on the raw value), objectness to 1 (rescore: to the
 * IOU of its predicted box) weighted object_scale, and the class terms
 * weighted class_scale (with logistic classes, Darknet's early return
 * where the slot already has a class term).  *near counts predictions
 * whose best IOU lies within `margin` of thresh and truths whose two best
 * slots lie within `margin` of each other.  `scale` (NULL: not wanted)
 * gets each element's weight s in delta = s (target - out), 0 where no
 * term was set.  With the decisions and targets held, the engines'
 * gradient (Darknet's GPU backward: delta times the logistic's derivative
 * on x, y and objectness) is the negative gradient, with respect to x, of
 *     sum_e s_e (t_e - out_e)^2 / 2      x, y, objectness (SDNN_REGION_LOGISTIC)
 *                                        and w, h (SDNN_REGION_RAW: out = x)
 *   + sum_e s_e (softplus(x_e) - t_e x_e)   logistic classes (SDNN_REGION_CLASS)
 *   - sum_e s_e t_e log(out_e)            softmax classes (SDNN_REGION_SOFTMAX;
 *                                        its gradient s (out - t) needs one
 *                                        weight and sum t = 1 per slot, as
 *                                        Darknet's one-hot terms have),
 * the objective the reference's [region] head evaluates (gradref.c).
 * Refused: coords != 4, background, a softmax tree, a class map. */
enum { SDNN_REGION_LOGISTIC, SDNN_REGION_RAW, SDNN_REGION_CLASS, SDNN_REGION_SOFTMAX };
sdnn_status sdnn_gradref_region_check(const layer *l);
sdnn_status sdnn_gradref_region_delta(const layer *l, const double *x, const float *truth,
                                      int seen, double margin, double *out, double *delta,
                                      double *scale, int *near);
/* Element k's objective kind (SDNN_REGION_*) in a [region] layer's output. */
int sdnn_gradref_region_kind(const layer *l, size_t k);

#endif
