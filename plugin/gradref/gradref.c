/*
 * gradref: see gradref.h.  Layout as Darknet's: image b, channel c, row y,
 * column x at b * outputs + (c * h + y) * w + x.
 */
#include "gradref.h"
#include "dialect.h"
#include "replicas.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { A_LINEAR, A_LOGISTIC, A_RELU, A_RELIE, A_RAMP, A_TANH, A_PLSE, A_LEAKY, A_ELU, A_LOGGY,
       A_HARDTAN, A_LHTAN, A_SELU, A_MISH, A_SWISH };

typedef struct ref_layer {
    LAYER_TYPE type;
    int act;
    int in;                 /* the layer whose output is the input, -1: the network's */
    int batch, c, h, w, oc, oh, ow, inputs, outputs;
    int size, stride, pad, groups, bn;
    int from;               /* shortcut: the added layer */
    float alpha, beta;      /* shortcut */
    int nroute, *route;     /* route: inputs; slice: src in route[0] */
    int slice, gid;
    float prob, dscale;     /* dropout */
    float scale;            /* cost scale, upsample scale */
    int cost;               /* cost type */
    int sm_groups;          /* softmax */
    int head;               /* 1: cost, 2: softmax, 3: yolo, 4: region */
    /* yolo: Darknet's layer (its anchors, mask, thresholds; the network
     * must outlive the reference), the network's input size, and per
     * subdivision the decisions as targets and weights (yolo_ref.c), and
     * the float forward's delta (sdnn_gradref_adopt) */
    const layer *yolo;
    /* region: Darknet's layer likewise (region_ref.c), the held decisions
     * in the same arrays, and per subdivision the images seen (the .01
     * anchor prior's condition) as the float forward saw them */
    const layer *region;
    int *rseen;
    int net_w, net_h;
    double **ytarget, **yscale, **yfloat, *ydelta;
    int *ydecided, *ynear;
    int *ybad;              /* elements with a delta on one side only (decided anew) */
    int np;
    double *par[SDNN_MAX_PARAMS_PER_LAYER], *grad[SDNN_MAX_PARAMS_PER_LAYER];
    /* per gradient element: the sum of its terms' squares during the
     * backward, its square root after it (sdnn_gradref_grad_spread) */
    double *gsq[SDNN_MAX_PARAMS_PER_LAYER];
    size_t pn[SDNN_MAX_PARAMS_PER_LAYER];
    double *W, *B, *S, *gW, *gB, *gS, *qW, *qB, *qS;
    /* per subdivision */
    double **out, **z, **xhat, **mean, **var;
    unsigned char **piece;  /* the activation's piece per value (held forwards) */
    size_t **arg;           /* maxpool: the input each output took */
    float **mask;
    double *d, *dz;         /* backward scratch: d objective / d out, / d z */
} ref_layer;

struct sdnn_gradref {
    int n, sub, batch, inputs, truths;
    int hold;               /* this forward holds the recorded pieces and maxpool choices */
    ref_layer *L;
    double **input;         /* per subdivision */
    float **truth;
    double *loss;           /* per subdivision */
    unsigned char *adopted; /* per subdivision: sdnn_gradref_adopt took its decisions */
    double *din;            /* scratch: gradient of the network's input (dropped) */
};

/* ---- activations --------------------------------------------------------------- */

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

static double softplus(double x) { return x > 20 ? x : x < -20 ? exp(x) : log1p(exp(x)); }

static double act_g(int a, double x);

/* Which piece of a piecewise activation x lies on (0 for a smooth one). */
static unsigned char act_piece(int a, double x)
{
    switch (a) {
    case A_RELU: case A_RELIE: case A_RAMP: case A_LEAKY: return x > 0;
    case A_ELU: case A_SELU: return x >= 0;
    case A_PLSE: return x < -4 ? 0 : x > 4 ? 2 : 1;
    case A_HARDTAN: return x < -1 ? 0 : x > 1 ? 2 : 1;
    case A_LHTAN: return x < 0 ? 0 : x > 1 ? 2 : 1;
    default: return 0;
    }
}

/* The activation's formula on piece p, continued past the piece's ends. */
static double act_on(int a, double x, unsigned char p)
{
    switch (a) {
    case A_LOGISTIC: return sigm(x);
    case A_RELU: return p ? x : 0;
    case A_RELIE: return p ? x : .01 * x;
    case A_RAMP: return (p ? x : 0) + .1 * x;
    case A_TANH: return tanh(x);
    case A_PLSE: return p == 0 ? .01 * (x + 4) : p == 2 ? .01 * (x - 4) + 1 : .125 * x + .5;
    case A_LEAKY: return p ? x : .1 * x;
    case A_ELU: return p ? x : exp(x) - 1;
    case A_LOGGY: return 2 * sigm(x) - 1;
    case A_HARDTAN: return p == 0 ? -1 : p == 2 ? 1 : x;
    case A_LHTAN: return p == 0 ? .001 * x : p == 2 ? .001 * (x - 1) + 1 : x;
    case A_SELU: return p ? 1.0507 * x : 1.0507 * 1.6732 * (exp(x) - 1);
    case A_MISH: return x * tanh(softplus(x));
    case A_SWISH: return x * sigm(x);
    default: return x;
    }
}

/* The piece an output y of activation a came from (y keeps the piece:
 * each piece maps to its own range). */
static unsigned char piece_of_output(int a, double y)
{
    switch (a) {
    case A_RELU: case A_RELIE: case A_RAMP: case A_LEAKY: return y > 0;
    case A_ELU: case A_SELU: return y >= 0;
    case A_PLSE: case A_LHTAN: return y < 0 ? 0 : y > 1 ? 2 : 1;
    case A_HARDTAN: return y <= -1 ? 0 : y >= 1 ? 2 : 1;
    default: return 0;
    }
}

/* The derivative of piece p's formula at x. */
static double act_g_on(int a, double x, unsigned char p)
{
    switch (a) {
    case A_RELU: return p ? 1 : 0;
    case A_RELIE: return p ? 1 : .01;
    case A_RAMP: return (p ? 1 : 0) + .1;
    case A_LEAKY: return p ? 1 : .1;
    case A_ELU: return p ? 1 : exp(x);
    case A_SELU: return p ? 1.0507 : 1.0507 * 1.6732 * exp(x);
    case A_PLSE: return p == 1 ? .125 : .01;
    case A_HARDTAN: return p == 1;
    case A_LHTAN: return p == 1 ? 1 : .001;
    default: return act_g(a, x);
    }
}

/* The activation at x; with `hold`, on the piece recorded in *piece (a
 * held forward), else recording it. */
static double act_f(int a, double x, unsigned char *piece, int hold)
{
    if (!hold) *piece = act_piece(a, x);
    return act_on(a, x, *piece);
}

/* The derivative at the activation's input x. */
static double act_g(int a, double x)
{
    switch (a) {
    case A_LOGISTIC: { double s = sigm(x); return s * (1 - s); }
    case A_RELU: return x > 0;
    case A_RELIE: return x > 0 ? 1 : .01;
    case A_RAMP: return (x > 0) + .1;
    case A_TANH: { double t = tanh(x); return 1 - t * t; }
    case A_PLSE: return x < -4 || x > 4 ? .01 : .125;
    case A_LEAKY: return x > 0 ? 1 : .1;
    case A_ELU: return x >= 0 ? 1 : exp(x);
    case A_LOGGY: { double s = sigm(x); return 2 * s * (1 - s); }
    case A_HARDTAN: return x > -1 && x < 1;
    case A_LHTAN: return x > 0 && x < 1 ? 1 : .001;
    case A_SELU: return x >= 0 ? 1.0507 : 1.0507 * 1.6732 * exp(x);
    case A_MISH: {
        double t = tanh(softplus(x));
        return t + x * sigm(x) * (1 - t * t);
    }
    case A_SWISH: { double s = sigm(x); return s + x * s * (1 - s); }
    default: return 1;
    }
}

static sdnn_status act_of(const network *net, int i, int *a)
{
    sdnn_dialect_layer_info info;
    sdnn_dialect_kind k = sdnn_dialect_layer(net, i, &info);
    if (k == SDNN_DIALECT_MISH) { *a = A_MISH; return SDNN_OK; }
    if (k == SDNN_DIALECT_SWISH) { *a = A_SWISH; return SDNN_OK; }
    switch (net->layers[i].activation) {
    case LINEAR: *a = A_LINEAR; break;
    case LOGISTIC: *a = A_LOGISTIC; break;
    case RELU: *a = A_RELU; break;
    case RELIE: *a = A_RELIE; break;
    case RAMP: *a = A_RAMP; break;
    case TANH: *a = A_TANH; break;
    case PLSE: *a = A_PLSE; break;
    case LEAKY: *a = A_LEAKY; break;
    case ELU: *a = A_ELU; break;
    case LOGGY: *a = A_LOGGY; break;
    case HARDTAN: *a = A_HARDTAN; break;
    case LHTAN: *a = A_LHTAN; break;
    case SELU: *a = A_SELU; break;
    default:
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: layer %d: activation %d has no "
                          "derivative the reference computes (stair's gradient is not one)", i,
                          (int)net->layers[i].activation);
    }
    return SDNN_OK;
}

/* ---- building ------------------------------------------------------------------ */

static double *dalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

static double **per_sub(int sub, size_t n)
{
    double **p = calloc((size_t)sub, sizeof *p);
    if (!p) return NULL;
    for (int s = 0; s < sub; ++s)
        if (!(p[s] = dalloc(n))) {
            for (int q = 0; q < s; ++q) free(p[q]);
            free(p);
            return NULL;
        }
    return p;
}

static void free_sub(double **p, int sub)
{
    if (!p) return;
    for (int s = 0; s < sub; ++s) free(p[s]);
    free(p);
}

void sdnn_gradref_destroy(sdnn_gradref *r)
{
    if (!r) return;
    for (int i = 0; r->L && i < r->n; ++i) {
        ref_layer *l = &r->L[i];
        for (int j = 0; j < SDNN_MAX_PARAMS_PER_LAYER; ++j) {
            free(l->par[j]);
            free(l->grad[j]);
            free(l->gsq[j]);
        }
        free_sub(l->out, r->sub);
        free_sub(l->z, r->sub);
        free_sub(l->xhat, r->sub);
        free_sub(l->mean, r->sub);
        free_sub(l->var, r->sub);
        if (l->mask) {
            for (int s = 0; s < r->sub; ++s) free(l->mask[s]);
            free(l->mask);
        }
        for (int s = 0; l->piece && s < r->sub; ++s) free(l->piece[s]);
        free(l->piece);
        for (int s = 0; l->arg && s < r->sub; ++s) free(l->arg[s]);
        free(l->arg);
        free(l->route);
        free(l->d);
        free(l->dz);
        free_sub(l->ytarget, r->sub);
        free_sub(l->yscale, r->sub);
        free_sub(l->yfloat, r->sub);
        free(l->ydelta);
        free(l->ydecided);
        free(l->ynear);
        free(l->rseen);
        free(l->ybad);
    }
    free(r->L);
    free_sub(r->input, r->sub);
    if (r->truth) {
        for (int s = 0; s < r->sub; ++s) free(r->truth[s]);
        free(r->truth);
    }
    free(r->loss);
    free(r->adopted);
    free(r->din);
    free(r);
}

#define NOMEM() SDNN_ERROR(SDNN_ERR_NOMEM, "gradref: no memory")

static sdnn_status build_layer(const network *net, int i, sdnn_gradref *r)
{
    const layer *dl = &net->layers[i];
    ref_layer *l = &r->L[i];
    int sub = r->sub;
    l->type = dl->type;
    l->in = i - 1;
    l->batch = dl->batch;
    l->c = dl->c; l->h = dl->h; l->w = dl->w;
    l->oc = dl->out_c; l->oh = dl->out_h; l->ow = dl->out_w;
    l->inputs = dl->inputs;
    l->outputs = dl->outputs;
    l->act = A_LINEAR;
    sdnn_dialect_layer_info info;
    switch (dl->type) {
    case CONVOLUTIONAL:
        if (dl->binary || dl->xnor)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: layer %d: binary/xnor "
                              "convolution", i);
        l->size = dl->size; l->stride = dl->stride; l->pad = dl->pad;
        l->groups = dl->groups > 0 ? dl->groups : 1;
        l->bn = dl->batch_normalize;
        SDNN_CHECK(act_of(net, i, &l->act));
        break;
    case CONNECTED:
        l->bn = dl->batch_normalize;
        l->c = dl->inputs; l->h = l->w = 1;
        l->oc = dl->outputs; l->oh = l->ow = 1;
        SDNN_CHECK(act_of(net, i, &l->act));
        break;
    case SHORTCUT:
        if (dl->w != dl->out_w || dl->h != dl->out_h ||
            net->layers[dl->index].out_w != dl->w || net->layers[dl->index].out_h != dl->h)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: layer %d: a shortcut between "
                              "layers of different sizes", i);
        l->from = dl->index;
        l->alpha = dl->alpha; l->beta = dl->beta;
        l->c = net->layers[dl->index].out_c;   /* the added layer's channels */
        SDNN_CHECK(act_of(net, i, &l->act));
        break;
    case ROUTE:
        if (sdnn_dialect_layer(net, i, &info) == SDNN_DIALECT_ROUTE_SLICE) {
            l->slice = 1;
            l->gid = info.gid;
            l->nroute = 1;
            l->route = malloc(sizeof *l->route);
            if (!l->route) return NOMEM();
            l->route[0] = info.src;
        } else {
            l->nroute = dl->n;
            l->route = malloc((size_t)(dl->n > 0 ? dl->n : 1) * sizeof *l->route);
            if (!l->route) return NOMEM();
            for (int q = 0; q < dl->n; ++q) l->route[q] = dl->input_layers[q];
        }
        break;
    case MAXPOOL:
        l->size = dl->size; l->stride = dl->stride; l->pad = dl->pad;
        break;
    case AVGPOOL:
        break;
    case UPSAMPLE:
        if (dl->reverse)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: layer %d: a reverse upsample "
                              "(stride < 0)", i);
        l->stride = dl->stride;
        l->scale = dl->scale;
        break;
    case DROPOUT:
        l->prob = dl->probability;
        l->dscale = dl->scale;
        l->mask = calloc((size_t)sub, sizeof *l->mask);
        if (!l->mask) return NOMEM();
        for (int s = 0; s < sub; ++s) {
            size_t n = (size_t)l->batch * (size_t)l->inputs;
            if (!(l->mask[s] = malloc(n * sizeof(float)))) return NOMEM();
            for (size_t k = 0; k < n; ++k) l->mask[s][k] = 1;   /* kept until a mask comes */
        }
        break;
    case SOFTMAX:
        if (dl->softmax_tree || dl->temperature != 1.0f)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: layer %d: softmax with a tree "
                              "or temperature != 1", i);
        l->sm_groups = dl->groups > 0 ? dl->groups : 1;
        l->head = dl->noloss ? 0 : 2;
        break;
    case YOLO:
        if (sdnn_dialect_layer(net, i, &info) == SDNN_DIALECT_YOLO)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: layer %d: the fork's [yolo] (its "
                              "keys change the delta the reference computes)", i);
        if (dl->map)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: layer %d: a yolo layer with a "
                              "class map", i);
        if (dl->truths != net->truths)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: layer %d: a yolo layer reading "
                              "truth rows of %d values in a network whose rows hold %d", i,
                              dl->truths, net->truths);
        l->yolo = dl;
        l->net_w = net->w;
        l->net_h = net->h;
        l->head = 3;
        {
            size_t n = (size_t)l->batch * (size_t)l->outputs;
            if (!(l->ytarget = per_sub(sub, n)) || !(l->yscale = per_sub(sub, n)) ||
                !(l->yfloat = per_sub(sub, n)) || !(l->ydelta = dalloc(n)) ||
                !(l->ydecided = calloc((size_t)sub, sizeof *l->ydecided)) ||
                !(l->ynear = calloc((size_t)sub, sizeof *l->ynear)) ||
                !(l->ybad = calloc((size_t)sub, sizeof *l->ybad)))
                return NOMEM();
        }
        break;
    case REGION:
        SDNN_CHECK(sdnn_gradref_region_check(dl));
        if (dl->truths != net->truths)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: layer %d: a region layer reading "
                              "truth rows of %d values in a network whose rows hold %d", i,
                              dl->truths, net->truths);
        l->region = dl;
        l->head = 4;
        {
            size_t n = (size_t)l->batch * (size_t)l->outputs;
            if (!(l->ytarget = per_sub(sub, n)) || !(l->yscale = per_sub(sub, n)) ||
                !(l->yfloat = per_sub(sub, n)) || !(l->ydelta = dalloc(n)) ||
                !(l->ydecided = calloc((size_t)sub, sizeof *l->ydecided)) ||
                !(l->ynear = calloc((size_t)sub, sizeof *l->ynear)) ||
                !(l->ybad = calloc((size_t)sub, sizeof *l->ybad)) ||
                !(l->rseen = calloc((size_t)sub, sizeof *l->rseen)))
                return NOMEM();
            for (int s = 0; s < sub; ++s) l->rseen[s] = net->seen ? (int)*net->seen : 0;
        }
        break;
    case COST:
        if (dl->cost_type != SSE && dl->cost_type != MASKED && dl->cost_type != L1 &&
            dl->cost_type != SMOOTH)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: layer %d: cost type %d (sse, "
                              "masked, l1, smooth are computed)", i, (int)dl->cost_type);
        l->cost = dl->cost_type;
        l->scale = dl->scale;
        l->head = 1;
        break;
    default:
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: layer %d: %s layers are not in the "
                          "reference", i, sdnn_layer_type_name(dl->type));
    }
    sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
    int np = sdnn_layer_params(dl, p);
    if (np < 0) return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradref: layer %d: parameters", i);
    l->np = np;
    for (int j = 0; j < np; ++j) {
        l->pn[j] = p[j].n;
        l->par[j] = dalloc(p[j].n);
        l->grad[j] = dalloc(p[j].n);
        l->gsq[j] = dalloc(p[j].n);
        if (!l->par[j] || !l->grad[j] || !l->gsq[j]) return NOMEM();
        for (size_t e = 0; e < p[j].n; ++e) l->par[j][e] = p[j].val[e];
        if (!strcmp(p[j].what, "weights")) { l->W = l->par[j]; l->gW = l->grad[j]; l->qW = l->gsq[j]; }
        else if (!strcmp(p[j].what, "biases")) { l->B = l->par[j]; l->gB = l->grad[j]; l->qB = l->gsq[j]; }
        else if (!strcmp(p[j].what, "scales")) { l->S = l->par[j]; l->gS = l->grad[j]; l->qS = l->gsq[j]; }
    }
    if ((l->type == CONVOLUTIONAL || l->type == CONNECTED) && (!l->W || !l->B || (l->bn && !l->S)))
        return SDNN_ERROR(SDNN_ERR_INTERNAL, "gradref: layer %d: missing parameters", i);
    size_t no = (size_t)l->batch * (size_t)l->outputs;
    if (!(l->out = per_sub(sub, no)) || !(l->d = dalloc(no)) || !(l->dz = dalloc(no)))
        return NOMEM();
    if (l->type == CONVOLUTIONAL || l->type == CONNECTED || l->type == SHORTCUT) {
        if (!(l->z = per_sub(sub, no))) return NOMEM();
        if (!(l->piece = calloc((size_t)sub, sizeof *l->piece))) return NOMEM();
        for (int s = 0; s < sub; ++s)
            if (!(l->piece[s] = calloc(no, 1))) return NOMEM();
    }
    if (l->type == MAXPOOL) {
        if (!(l->arg = calloc((size_t)sub, sizeof *l->arg))) return NOMEM();
        for (int s = 0; s < sub; ++s)
            if (!(l->arg[s] = calloc(no ? no : 1, sizeof **l->arg))) return NOMEM();
    }
    if (l->bn) {
        if (!(l->xhat = per_sub(sub, no)) || !(l->mean = per_sub(sub, (size_t)l->oc)) ||
            !(l->var = per_sub(sub, (size_t)l->oc)))
            return NOMEM();
    }
    return SDNN_OK;
}

sdnn_status sdnn_gradref_create(const network *net, int subdivisions, sdnn_gradref **out)
{
    *out = NULL;
    if (subdivisions < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "gradref: subdivisions < 1");
    sdnn_gradref *r = calloc(1, sizeof *r);
    if (!r) return NOMEM();
    r->n = net->n;
    r->sub = subdivisions;
    r->batch = net->batch;
    r->inputs = net->inputs;
    r->truths = net->truths;
    r->L = calloc((size_t)(net->n > 0 ? net->n : 1), sizeof *r->L);
    r->input = per_sub(subdivisions, (size_t)net->batch * (size_t)net->inputs);
    r->truth = calloc((size_t)subdivisions, sizeof *r->truth);
    r->loss = calloc((size_t)subdivisions, sizeof *r->loss);
    r->adopted = calloc((size_t)subdivisions, 1);
    r->din = dalloc((size_t)net->batch * (size_t)net->inputs);
    if (!r->L || !r->input || !r->truth || !r->loss || !r->adopted || !r->din) {
        sdnn_gradref_destroy(r);
        return NOMEM();
    }
    for (int s = 0; s < subdivisions; ++s)
        if (!(r->truth[s] = calloc((size_t)net->batch * (size_t)net->truths + 1, sizeof(float)))) {
            sdnn_gradref_destroy(r);
            return NOMEM();
        }
    for (int i = 0; i < net->n; ++i) {
        sdnn_status st = build_layer(net, i, r);
        if (st != SDNN_OK) {
            sdnn_gradref_destroy(r);
            return st;
        }
    }
    *out = r;
    return SDNN_OK;
}

sdnn_status sdnn_gradref_set_batch(sdnn_gradref *r, int s, const float *input,
                                   const float *truth, const float *const *masks)
{
    if (s < 0 || s >= r->sub) return SDNN_ERROR(SDNN_ERR_INVALID, "gradref: subdivision %d", s);
    size_t ni = (size_t)r->batch * (size_t)r->inputs;
    if (input)
        for (size_t k = 0; k < ni; ++k) r->input[s][k] = input[k];
    if (truth) memcpy(r->truth[s], truth, (size_t)r->batch * (size_t)r->truths * sizeof(float));
    for (int i = 0; (input || truth) && i < r->n; ++i)
        if (r->L[i].ydecided) r->L[i].ydecided[s] = 0;   /* decided again by the next forward */
    for (int i = 0; masks && i < r->n; ++i) {
        ref_layer *l = &r->L[i];
        if (l->type != DROPOUT) continue;
        size_t n = (size_t)l->batch * (size_t)l->inputs;
        if (masks[i]) memcpy(l->mask[s], masks[i], n * sizeof(float));
        else for (size_t k = 0; k < n; ++k) l->mask[s][k] = 1;   /* above any probability */
    }
    return SDNN_OK;
}

sdnn_status sdnn_gradref_adopt(sdnn_gradref *r, int s, const network *net, size_t *changed)
{
    size_t diff = 0;
    if (s < 0 || s >= r->sub || net->n != r->n)
        return SDNN_ERROR(SDNN_ERR_INVALID, "gradref: adopt: subdivision %d of %d layers", s, net->n);
    for (int i = 0; i < r->n; ++i) {
        ref_layer *l = &r->L[i];
        const layer *dl = &net->layers[i];
        size_t n = (size_t)l->batch * (size_t)l->outputs;
        if (l->piece)
            for (size_t k = 0; k < n; ++k) {
                unsigned char p = piece_of_output(l->act, dl->output[k]);
                diff += l->piece[s][k] != p;
                l->piece[s][k] = p;
            }
        if (l->arg) {
            if (!dl->indexes)
                return SDNN_ERROR(SDNN_ERR_INTERNAL, "gradref: layer %d: a maxpool without "
                                  "indexes", i);
            for (size_t k = 0; k < n; ++k) {
                size_t a = dl->indexes[k] < 0 ? (size_t)-1 : (size_t)dl->indexes[k];
                diff += l->arg[s][k] != a;
                l->arg[s][k] = a;
            }
        }
        if (l->yolo || l->region) {
            if (!dl->delta)
                return SDNN_ERROR(SDNN_ERR_INTERNAL, "gradref: layer %d: a %s layer without "
                                  "a delta", i, l->yolo ? "yolo" : "region");
            for (size_t k = 0; k < n; ++k) l->yfloat[s][k] = dl->delta[k];
            l->ydecided[s] = 0;
            if (l->region) l->rseen[s] = net->seen ? (int)*net->seen : 0;
        }
    }
    if (changed) *changed = r->adopted[s] ? diff : 0;
    r->adopted[s] = 1;
    return SDNN_OK;
}

/* ---- forward ------------------------------------------------------------------- */

static const double *in_of(const sdnn_gradref *r, const ref_layer *l, int s)
{
    return l->in < 0 ? r->input[s] : r->L[l->in].out[s];
}

/* The outputs ox whose input column ox * stride + kx - pad is inside the
 * image: [*lo, *hi). */
static void ox_range(const ref_layer *l, int kx, int *lo, int *hi)
{
    int a = 0, b = l->ow;
    while (a < b && a * l->stride + kx - l->pad < 0) ++a;
    while (b > a && (b - 1) * l->stride + kx - l->pad >= l->w) --b;
    *lo = a;
    *hi = b;
}

static void conv_fwd(const ref_layer *l, const double *x, double *z)
{
    int cg = l->c / l->groups, ng = l->oc / l->groups, k = l->size;
    size_t hw = (size_t)l->oh * (size_t)l->ow;
    for (int b = 0; b < l->batch; ++b) {
        const double *xb = x + (size_t)b * (size_t)l->inputs;
        double *zb = z + (size_t)b * (size_t)l->outputs;
        memset(zb, 0, (size_t)l->outputs * sizeof *zb);
        for (int f = 0; f < l->oc; ++f) {
            int g = f / ng;
            double *zf = zb + (size_t)f * hw;
            for (int c = 0; c < cg; ++c) {
                const double *xc = xb + (size_t)(g * cg + c) * (size_t)l->h * (size_t)l->w;
                for (int ky = 0; ky < k; ++ky)
                    for (int kx = 0; kx < k; ++kx) {
                        double wv = l->W[(((size_t)f * cg + c) * k + ky) * k + kx];
                        int lo, hi;
                        ox_range(l, kx, &lo, &hi);
                        for (int oy = 0; oy < l->oh; ++oy) {
                            int y = oy * l->stride + ky - l->pad;
                            if (y < 0 || y >= l->h) continue;
                            double *zr = zf + (size_t)oy * l->ow;
                            const double *xr = xc + (size_t)y * l->w + kx - l->pad;
                            if (l->stride == 1)
                                for (int ox = lo; ox < hi; ++ox) zr[ox] += wv * xr[ox];
                            else
                                for (int ox = lo; ox < hi; ++ox) zr[ox] += wv * xr[ox * l->stride];
                        }
                    }
            }
        }
    }
}

/* d objective / d x and / d W from dz (the gradient of z). */
static void conv_bwd(const ref_layer *l, const double *x, const double *dz, double *dx)
{
    int cg = l->c / l->groups, ng = l->oc / l->groups, k = l->size;
    size_t hw = (size_t)l->oh * (size_t)l->ow;
    for (int b = 0; b < l->batch; ++b) {
        const double *xb = x + (size_t)b * (size_t)l->inputs;
        double *dxb = dx ? dx + (size_t)b * (size_t)l->inputs : NULL;
        const double *db = dz + (size_t)b * (size_t)l->outputs;
        for (int f = 0; f < l->oc; ++f) {
            int g = f / ng;
            const double *df = db + (size_t)f * hw;
            for (int c = 0; c < cg; ++c) {
                size_t co = (size_t)(g * cg + c) * (size_t)l->h * (size_t)l->w;
                for (int ky = 0; ky < k; ++ky)
                    for (int kx = 0; kx < k; ++kx) {
                        size_t wi = (((size_t)f * cg + c) * k + ky) * k + kx;
                        double wv = l->W[wi], gw = 0, qw = 0;
                        for (int oy = 0; oy < l->oh; ++oy) {
                            int y = oy * l->stride + ky - l->pad;
                            if (y < 0 || y >= l->h) continue;
                            for (int ox = 0; ox < l->ow; ++ox) {
                                int xx = ox * l->stride + kx - l->pad;
                                if (xx < 0 || xx >= l->w) continue;
                                double dv = df[(size_t)oy * l->ow + ox];
                                size_t xi = co + (size_t)y * l->w + xx;
                                double t = dv * xb[xi];
                                gw += t;
                                qw += t * t;
                                if (dxb) dxb[xi] += wv * dv;
                            }
                        }
                        l->gW[wi] += gw;
                        l->qW[wi] += qw;
                    }
            }
        }
    }
}

static void fc_fwd(const ref_layer *l, const double *x, double *z)
{
    for (int b = 0; b < l->batch; ++b)
        for (int o = 0; o < l->outputs; ++o) {
            const double *w = l->W + (size_t)o * (size_t)l->inputs;
            const double *xb = x + (size_t)b * (size_t)l->inputs;
            double s = 0;
            for (int k = 0; k < l->inputs; ++k) s += w[k] * xb[k];
            z[(size_t)b * (size_t)l->outputs + o] = s;
        }
}

static void fc_bwd(const ref_layer *l, const double *x, const double *dz, double *dx)
{
    for (int b = 0; b < l->batch; ++b)
        for (int o = 0; o < l->outputs; ++o) {
            double dv = dz[(size_t)b * (size_t)l->outputs + o];
            double *gw = l->gW + (size_t)o * (size_t)l->inputs;
            double *qw = l->qW + (size_t)o * (size_t)l->inputs;
            const double *w = l->W + (size_t)o * (size_t)l->inputs;
            const double *xb = x + (size_t)b * (size_t)l->inputs;
            double *dxb = dx ? dx + (size_t)b * (size_t)l->inputs : NULL;
            for (int k = 0; k < l->inputs; ++k) {
                double t = dv * xb[k];
                gw[k] += t;
                qw[k] += t * t;
                if (dxb) dxb[k] += dv * w[k];
            }
        }
}

/* z (the linear output) -> out: batch norm (or bias), then the activation. */
static void affine_act_fwd(ref_layer *l, int s, int hold)
{
    double *z = l->z[s], *o = l->out[s];
    size_t hw = (size_t)l->oh * (size_t)l->ow;
    if (l->bn) {
        double nv = (double)l->batch * (double)hw;
        for (int c = 0; c < l->oc; ++c) {
            double m = 0, v = 0;
            for (int b = 0; b < l->batch; ++b)
                for (size_t q = 0; q < hw; ++q) m += z[(size_t)b * l->outputs + c * hw + q];
            m /= nv;
            for (int b = 0; b < l->batch; ++b)
                for (size_t q = 0; q < hw; ++q) {
                    double d = z[(size_t)b * l->outputs + c * hw + q] - m;
                    v += d * d;
                }
            v /= nv - 1;
            l->mean[s][c] = m;
            l->var[s][c] = v;
            double den = sqrt(v) + 1e-6;
            for (int b = 0; b < l->batch; ++b)
                for (size_t q = 0; q < hw; ++q) {
                    size_t k = (size_t)b * l->outputs + c * hw + q;
                    l->xhat[s][k] = (z[k] - m) / den;
                    o[k] = l->S[c] * l->xhat[s][k] + l->B[c];
                }
        }
    } else {
        for (int b = 0; b < l->batch; ++b)
            for (int c = 0; c < l->oc; ++c)
                for (size_t q = 0; q < hw; ++q) {
                    size_t k = (size_t)b * l->outputs + c * hw + q;
                    o[k] = z[k] + l->B[c];
                }
    }
    size_t n = (size_t)l->batch * (size_t)l->outputs;
    /* Keep the activation's input in z (the normalised, scaled, biased value). */
    for (size_t k = 0; k < n; ++k) {
        z[k] = o[k];
        o[k] = act_f(l->act, z[k], &l->piece[s][k], hold);
    }
}

/* From d (gradient of out): the gradient of the linear output into l->dz,
 * the parameter gradients of batch norm and bias.  z holds the
 * activation's input. */
static void affine_act_bwd(ref_layer *l, int s)
{
    size_t hw = (size_t)l->oh * (size_t)l->ow, n = (size_t)l->batch * (size_t)l->outputs;
    double *g = l->dz;
    for (size_t k = 0; k < n; ++k) g[k] = l->d[k] * act_g_on(l->act, l->z[s][k], l->piece[s][k]);
    for (int c = 0; c < l->oc; ++c) {
        double sb = 0, ss = 0, qb = 0, qs = 0;
        for (int b = 0; b < l->batch; ++b)
            for (size_t q = 0; q < hw; ++q) {
                size_t k = (size_t)b * l->outputs + c * hw + q;
                sb += g[k];
                qb += g[k] * g[k];
                if (l->bn) {
                    double t = g[k] * l->xhat[s][k];
                    ss += t;
                    qs += t * t;
                }
            }
        l->gB[c] += sb;
        l->qB[c] += qb;
        if (!l->bn) continue;
        l->gS[c] += ss;
        l->qS[c] += qs;
        /* y = (x - m) / (sqrt(v) + eps), v = sum (x - m)^2 / (N - 1):
         * dx_i = gy_i / D - (sum gy) / (N D) - (x_i - m) (sum gy (x - m)) / (D^2 sqrt(v) (N - 1)),
         * gy = scale * g; the mean's term in dv vanishes (sum (x - m) = 0). */
        double nv = (double)l->batch * (double)hw, v = l->var[s][c];
        double sd = sqrt(v), D = sd + 1e-6;
        double sg = 0, sgx = 0;
        for (int b = 0; b < l->batch; ++b)
            for (size_t q = 0; q < hw; ++q) {
                size_t k = (size_t)b * l->outputs + c * hw + q;
                double gy = l->S[c] * g[k];
                sg += gy;
                sgx += gy * (l->xhat[s][k] * D);   /* x - m */
            }
        double cv = sd > 0 ? sgx / (D * D * sd * (nv - 1)) : 0;
        for (int b = 0; b < l->batch; ++b)
            for (size_t q = 0; q < hw; ++q) {
                size_t k = (size_t)b * l->outputs + c * hw + q;
                double gy = l->S[c] * g[k];
                g[k] = gy / D - sg / (nv * D) - l->xhat[s][k] * D * cv;
            }
    }
}

static double head_loss(const sdnn_gradref *r, const ref_layer *l, int s)
{
    const double *x = in_of(r, l, s);
    const float *t = r->truth[s];
    size_t n = (size_t)l->batch * (size_t)l->inputs;
    double sum = 0;
    if (l->head == 3) {
        /* The held decisions' objective (gradref.h, sdnn_gradref_yolo_delta). */
        int hw = l->yolo->w * l->yolo->h, per = 5 + l->yolo->classes;
        for (size_t k = 0; k < n; ++k) {
            double sc = l->yscale[s][k], tg = l->ytarget[s][k];
            if (sc == 0) continue;
            int e = (int)((k % (size_t)l->outputs) / (size_t)hw) % per;
            if (e == 2 || e == 3) sum += 0.5 * sc * (tg - x[k]) * (tg - x[k]);
            else sum += sc * (softplus(x[k]) - tg * x[k]);
        }
        return sum;
    }
    if (l->head == 4) {
        /* The held decisions' objective (gradref.h, sdnn_gradref_region_delta). */
        const double *o = l->out[s];
        for (size_t k = 0; k < n; ++k) {
            double sc = l->yscale[s][k], tg = l->ytarget[s][k];
            if (sc == 0) continue;
            switch (sdnn_gradref_region_kind(l->region, k)) {
            case SDNN_REGION_LOGISTIC: sum += 0.5 * sc * (tg - o[k]) * (tg - o[k]); break;
            case SDNN_REGION_RAW: sum += 0.5 * sc * (tg - x[k]) * (tg - x[k]); break;
            case SDNN_REGION_CLASS: sum += sc * (softplus(x[k]) - tg * x[k]); break;
            default: sum -= sc * tg * log(o[k]); break;
            }
        }
        return sum;
    }
    if (l->head == 2) {
        for (size_t k = 0; k < n; ++k)
            if (t[k] != 0) sum -= (double)t[k] * log(l->out[s][k]);
        return sum;
    }
    for (size_t k = 0; k < n; ++k) {
        double d = (double)t[k] - x[k];
        if (l->cost == L1) sum += fabs(d);
        else if (l->cost == SMOOTH) sum += fabs(d) < 1 ? 0.5 * d * d : fabs(d) - 0.5;
        else sum += 0.5 * d * d;
    }
    return (double)l->scale * sum;
}

static void fwd_layer(sdnn_gradref *r, int i, int s)
{
    ref_layer *l = &r->L[i];
    const double *x = in_of(r, l, s);
    double *o = l->out[s];
    size_t n = (size_t)l->batch * (size_t)l->outputs;
    switch (l->type) {
    case CONVOLUTIONAL:
        conv_fwd(l, x, l->z[s]);
        affine_act_fwd(l, s, r->hold);
        break;
    case CONNECTED:
        fc_fwd(l, x, l->z[s]);
        affine_act_fwd(l, s, r->hold);
        break;
    case SHORTCUT: {
        const double *a = r->L[l->from].out[s];
        size_t hw = (size_t)l->oh * (size_t)l->ow;
        int minc = l->c < l->oc ? l->c : l->oc;
        for (int b = 0; b < l->batch; ++b)
            for (int c = 0; c < l->oc; ++c)
                for (size_t q = 0; q < hw; ++q) {
                    size_t k = (size_t)b * l->outputs + c * hw + q;
                    double v = x[k];
                    if (c < minc)
                        v = l->alpha * v + l->beta * a[(size_t)b * r->L[l->from].outputs + c * hw + q];
                    l->z[s][k] = v;
                    o[k] = act_f(l->act, v, &l->piece[s][k], r->hold);
                }
        break;
    }
    case ROUTE:
        for (int b = 0; b < l->batch; ++b) {
            size_t off = 0;
            for (int q = 0; q < l->nroute; ++q) {
                const ref_layer *src = &r->L[l->route[q]];
                size_t len = l->slice ? (size_t)l->outputs : (size_t)src->outputs;
                size_t from = (size_t)b * src->outputs + (l->slice ? (size_t)l->gid * l->outputs : 0);
                memcpy(o + (size_t)b * l->outputs + off, src->out[s] + from, len * sizeof *o);
                off += len;
            }
        }
        break;
    case MAXPOOL:
        for (int b = 0; b < l->batch; ++b)
            for (int c = 0; c < l->c; ++c)
                for (int oy = 0; oy < l->oh; ++oy)
                    for (int ox = 0; ox < l->ow; ++ox) {
                        size_t oi = (size_t)b * l->outputs + ((size_t)c * l->oh + oy) * l->ow + ox;
                        if (r->hold) {   /* the recorded choice: no tie to cross */
                            o[oi] = l->arg[s][oi] == (size_t)-1 ? -HUGE_VAL : x[l->arg[s][oi]];
                            continue;
                        }
                        double best = -HUGE_VAL;
                        size_t at = (size_t)-1;
                        for (int ky = 0; ky < l->size; ++ky)
                            for (int kx = 0; kx < l->size; ++kx) {
                                int y = oy * l->stride + ky - l->pad / 2;
                                int xx = ox * l->stride + kx - l->pad / 2;
                                if (y < 0 || y >= l->h || xx < 0 || xx >= l->w) continue;
                                size_t xi = (size_t)b * l->inputs + ((size_t)c * l->h + y) * l->w + xx;
                                if (x[xi] > best) { best = x[xi]; at = xi; }
                            }
                        o[oi] = best;
                        l->arg[s][oi] = at;
                    }
        break;
    case AVGPOOL:
        for (int b = 0; b < l->batch; ++b)
            for (int c = 0; c < l->c; ++c) {
                double sum = 0;
                size_t hw = (size_t)l->h * (size_t)l->w;
                for (size_t q = 0; q < hw; ++q) sum += x[(size_t)b * l->inputs + c * hw + q];
                o[(size_t)b * l->outputs + c] = sum / (double)hw;
            }
        break;
    case UPSAMPLE:
        for (int b = 0; b < l->batch; ++b)
            for (int c = 0; c < l->c; ++c)
                for (int y = 0; y < l->oh; ++y)
                    for (int xx = 0; xx < l->ow; ++xx)
                        o[(size_t)b * l->outputs + ((size_t)c * l->oh + y) * l->ow + xx] =
                            l->scale * x[(size_t)b * l->inputs +
                                         ((size_t)c * l->h + y / l->stride) * l->w + xx / l->stride];
        break;
    case DROPOUT:
        for (size_t k = 0; k < n; ++k) o[k] = l->mask[s][k] < l->prob ? 0 : x[k] * l->dscale;
        break;
    case SOFTMAX: {
        int per = l->inputs / l->sm_groups;
        for (int b = 0; b < l->batch; ++b)
            for (int g = 0; g < l->sm_groups; ++g) {
                const double *xg = x + (size_t)b * l->inputs + (size_t)g * per;
                double *og = o + (size_t)b * l->outputs + (size_t)g * per;
                double mx = -HUGE_VAL, sum = 0;
                for (int k = 0; k < per; ++k) if (xg[k] > mx) mx = xg[k];
                for (int k = 0; k < per; ++k) sum += (og[k] = exp(xg[k] - mx));
                for (int k = 0; k < per; ++k) og[k] /= sum;
            }
        break;
    }
    case YOLO: {
        /* The activated output, and the decisions (yolo_ref.c) as targets
         * and weights: a plain forward decides anew, a held one keeps the
         * decisions the first forward of this batch made. */
        int near = 0;
        sdnn_gradref_yolo_delta(l->yolo, l->net_w, l->net_h, x, r->truth[s], 1e-4, o,
                                l->ydelta, r->hold && l->ydecided[s] ? NULL : l->yscale[s], &near);
        if (r->hold && l->ydecided[s]) break;
        l->ybad[s] = 0;
        for (size_t k = 0; k < n; ++k) {
            double sc = l->yscale[s][k];
            l->ytarget[s][k] = sc != 0 ? o[k] + l->ydelta[k] / sc : 0;
            /* A term on one side only: the float forward decided otherwise
             * (a term whose value is exactly 0 on both sides agrees). */
            l->ybad[s] += (l->ydelta[k] != 0) != (l->yfloat[s][k] != 0);
        }
        l->ydecided[s] = 1;
        l->ynear[s] = near;
        break;
    }
    case REGION: {
        /* As the yolo head: the activated output, the decisions held. */
        int near = 0;
        int keep = r->hold && l->ydecided[s];
        sdnn_gradref_region_delta(l->region, x, r->truth[s], l->rseen[s], 1e-4, o, l->ydelta,
                                  keep ? NULL : l->yscale[s], &near);
        if (keep) break;
        l->ybad[s] = 0;
        for (size_t k = 0; k < n; ++k) {
            double sc = l->yscale[s][k];
            l->ytarget[s][k] = sc != 0 ? o[k] + l->ydelta[k] / sc : 0;
            /* A term on one side only: the float forward decided otherwise
             * (a term whose value is exactly 0 on both sides agrees). */
            l->ybad[s] += (l->ydelta[k] != 0) != (l->yfloat[s][k] != 0);
        }
        l->ydecided[s] = 1;
        l->ynear[s] = near;
        break;
    }
    case COST:
        /* Darknet's cost output is per-element error: nothing reads it. */
        memset(o, 0, n * sizeof *o);
        break;
    default:
        break;
    }
}

double sdnn_gradref_forward(sdnn_gradref *r, int from, int hold)
{
    double sum = 0;
    r->hold = hold;
    for (int s = 0; s < r->sub; ++s) {
        for (int i = from > 0 ? from : 0; i < r->n; ++i) fwd_layer(r, i, s);
        double ls = 0;
        for (int i = 0; i < r->n; ++i)
            if (r->L[i].head) ls += head_loss(r, &r->L[i], s);
        r->loss[s] = ls;
        sum += ls;
    }
    return sum;
}

/* ---- backward ------------------------------------------------------------------ */

static double *din_of(sdnn_gradref *r, const ref_layer *l)
{
    return l->in < 0 ? r->din : r->L[l->in].d;
}

static void bwd_layer(sdnn_gradref *r, int i, int s)
{
    ref_layer *l = &r->L[i];
    const double *x = in_of(r, l, s);
    double *dx = din_of(r, l);
    size_t n = (size_t)l->batch * (size_t)l->outputs;
    switch (l->type) {
    case CONVOLUTIONAL:
        affine_act_bwd(l, s);
        conv_bwd(l, x, l->dz, dx);
        break;
    case CONNECTED:
        affine_act_bwd(l, s);
        fc_bwd(l, x, l->dz, dx);
        break;
    case SHORTCUT: {
        double *da = r->L[l->from].d;
        size_t hw = (size_t)l->oh * (size_t)l->ow;
        int minc = l->c < l->oc ? l->c : l->oc;
        for (int b = 0; b < l->batch; ++b)
            for (int c = 0; c < l->oc; ++c)
                for (size_t q = 0; q < hw; ++q) {
                    size_t k = (size_t)b * l->outputs + c * hw + q;
                    double g = l->d[k] * act_g_on(l->act, l->z[s][k], l->piece[s][k]);
                    if (c < minc) {
                        dx[k] += l->alpha * g;
                        da[(size_t)b * r->L[l->from].outputs + c * hw + q] += l->beta * g;
                    } else {
                        dx[k] += g;
                    }
                }
        break;
    }
    case ROUTE:
        for (int b = 0; b < l->batch; ++b) {
            size_t off = 0;
            for (int q = 0; q < l->nroute; ++q) {
                ref_layer *src = &r->L[l->route[q]];
                size_t len = l->slice ? (size_t)l->outputs : (size_t)src->outputs;
                size_t from = (size_t)b * src->outputs + (l->slice ? (size_t)l->gid * l->outputs : 0);
                for (size_t k = 0; k < len; ++k) src->d[from + k] += l->d[(size_t)b * l->outputs + off + k];
                off += len;
            }
        }
        break;
    case MAXPOOL:
        /* To the input each output took in the last plain forward. */
        for (size_t k = 0; k < n; ++k)
            if (l->arg[s][k] != (size_t)-1) dx[l->arg[s][k]] += l->d[k];
        break;
    case AVGPOOL:
        for (int b = 0; b < l->batch; ++b)
            for (int c = 0; c < l->c; ++c) {
                size_t hw = (size_t)l->h * (size_t)l->w;
                double g = l->d[(size_t)b * l->outputs + c] / (double)hw;
                for (size_t q = 0; q < hw; ++q) dx[(size_t)b * l->inputs + c * hw + q] += g;
            }
        break;
    case UPSAMPLE:
        for (int b = 0; b < l->batch; ++b)
            for (int c = 0; c < l->c; ++c)
                for (int y = 0; y < l->oh; ++y)
                    for (int xx = 0; xx < l->ow; ++xx)
                        dx[(size_t)b * l->inputs + ((size_t)c * l->h + y / l->stride) * l->w + xx / l->stride] +=
                            l->scale * l->d[(size_t)b * l->outputs + ((size_t)c * l->oh + y) * l->ow + xx];
        break;
    case DROPOUT:
        for (size_t k = 0; k < n; ++k) dx[k] += l->mask[s][k] < l->prob ? 0 : l->d[k] * l->dscale;
        break;
    case SOFTMAX: {
        /* The loss's gradient (a head) plus what consumers of p sent back. */
        int per = l->inputs / l->sm_groups;
        const float *t = r->truth[s];
        for (int b = 0; b < l->batch; ++b)
            for (int g = 0; g < l->sm_groups; ++g) {
                size_t base = (size_t)b * l->inputs + (size_t)g * per;
                const double *p = l->out[s] + base;
                double *dp = l->d + base;
                if (l->head)
                    for (int k = 0; k < per; ++k)
                        if (t[base + k] != 0) dp[k] -= (double)t[base + k] / p[k];
                double dot = 0;
                for (int k = 0; k < per; ++k) dot += dp[k] * p[k];
                for (int k = 0; k < per; ++k) dx[base + k] += p[k] * (dp[k] - dot);
            }
        break;
    }
    case YOLO: {
        /* -delta at x with the held targets: s (logistic(x) - target) on
         * the logistic entries, s (x - target) on w, h. */
        int hw = l->yolo->w * l->yolo->h, per = 5 + l->yolo->classes;
        for (size_t k = 0; k < n; ++k) {
            double sc = l->yscale[s][k];
            if (sc == 0) continue;
            int e = (int)((k % (size_t)l->outputs) / (size_t)hw) % per;
            double o = e == 2 || e == 3 ? x[k] : sigm(x[k]);
            dx[k] += sc * (o - l->ytarget[s][k]);
        }
        break;
    }
    case REGION: {
        /* The held objective's gradient: s (o - t) o (1 - o) on x, y and
         * objectness, s (x - t) on w, h, s (o - t) on logistic classes; on
         * a slot's softmax classes p_k sum_c s_c t_c - s_k t_k. */
        const layer *rl = l->region;
        const double *o = l->out[s], *sc = l->yscale[s], *tg = l->ytarget[s];
        size_t wh = (size_t)rl->w * rl->h;
        for (size_t k = 0; k < n; ++k) {
            if (sc[k] == 0) continue;
            switch (sdnn_gradref_region_kind(rl, k)) {
            case SDNN_REGION_LOGISTIC: dx[k] += sc[k] * (o[k] - tg[k]) * o[k] * (1 - o[k]); break;
            case SDNN_REGION_RAW: dx[k] += sc[k] * (x[k] - tg[k]); break;
            case SDNN_REGION_CLASS: dx[k] += sc[k] * (o[k] - tg[k]); break;
            default: break;
            }
        }
        if (rl->softmax) {
            size_t per = (size_t)rl->coords + (size_t)rl->classes + 1;
            for (int b = 0; b < l->batch; ++b)
                for (int a = 0; a < rl->n; ++a)
                    for (size_t c = 0; c < wh; ++c) {
                        size_t k0 = (size_t)b * l->outputs + ((size_t)a * per + 5) * wh + c;
                        double st = 0;
                        for (int q = 0; q < rl->classes; ++q) st += sc[k0 + q * wh] * tg[k0 + q * wh];
                        for (int q = 0; q < rl->classes; ++q) {
                            size_t k = k0 + q * wh;
                            dx[k] += o[k] * st - sc[k] * tg[k];
                        }
                    }
        }
        break;
    }
    case COST: {
        const float *t = r->truth[s];
        size_t ni = (size_t)l->batch * (size_t)l->inputs;
        for (size_t k = 0; k < ni; ++k) {
            double d = x[k] - (double)t[k];
            double g = l->cost == L1 ? (d > 0) - (d < 0)
                     : l->cost == SMOOTH ? (fabs(d) < 1 ? d : (d > 0) - (d < 0)) : d;
            dx[k] += (double)l->scale * g;
        }
        break;
    }
    default:
        break;
    }
}

void sdnn_gradref_backward(sdnn_gradref *r)
{
    for (int i = 0; i < r->n; ++i)
        for (int j = 0; j < r->L[i].np; ++j) {
            memset(r->L[i].grad[j], 0, r->L[i].pn[j] * sizeof(double));
            memset(r->L[i].gsq[j], 0, r->L[i].pn[j] * sizeof(double));
        }
    for (int s = 0; s < r->sub; ++s) {
        /* The activations of subdivision s are those its forward kept. */
        for (int i = 0; i < r->n; ++i)
            memset(r->L[i].d, 0, (size_t)r->L[i].batch * (size_t)r->L[i].outputs * sizeof(double));
        memset(r->din, 0, (size_t)r->batch * (size_t)r->inputs * sizeof(double));
        for (int i = r->n - 1; i >= 0; --i) bwd_layer(r, i, s);
    }
    /* The terms' squares summed over every subdivision: their root. */
    for (int i = 0; i < r->n; ++i)
        for (int j = 0; j < r->L[i].np; ++j)
            for (size_t e = 0; e < r->L[i].pn[j]; ++e) r->L[i].gsq[j][e] = sqrt(r->L[i].gsq[j][e]);
}

double *sdnn_gradref_param(sdnn_gradref *r, int i, int j, size_t *n)
{
    if (i < 0 || i >= r->n || j < 0 || j >= r->L[i].np) return NULL;
    *n = r->L[i].pn[j];
    return r->L[i].par[j];
}

const double *sdnn_gradref_grad(const sdnn_gradref *r, int i, int j, size_t *n)
{
    if (i < 0 || i >= r->n || j < 0 || j >= r->L[i].np) return NULL;
    *n = r->L[i].pn[j];
    return r->L[i].grad[j];
}

const double *sdnn_gradref_grad_spread(const sdnn_gradref *r, int i, int j, size_t *n)
{
    if (i < 0 || i >= r->n || j < 0 || j >= r->L[i].np) return NULL;
    *n = r->L[i].pn[j];
    return r->L[i].gsq[j];
}

int sdnn_gradref_yolo_disagree(const sdnn_gradref *r, int *near)
{
    int bad = 0;
    *near = 0;
    for (int i = 0; i < r->n; ++i) {
        const ref_layer *l = &r->L[i];
        if (!l->yolo && !l->region) continue;
        for (int s = 0; s < r->sub; ++s) {
            if (!l->ydecided[s]) continue;
            *near += l->ynear[s];
            bad += l->ybad[s];
        }
    }
    return bad;
}

void sdnn_gradref_reduction(const sdnn_gradref *r, int i, double *fwd, double *bwd)
{
    const ref_layer *l = &r->L[i];
    double f = 1, b = 1;
    switch (l->type) {
    case CONVOLUTIONAL:
        f = (double)(l->c / l->groups) * l->size * l->size;
        b = (double)(l->oc / l->groups) * l->size * l->size;
        break;
    case CONNECTED: f = l->inputs; b = l->outputs; break;
    case AVGPOOL: f = (double)l->h * l->w; break;
    case SOFTMAX: f = b = (double)l->inputs / l->sm_groups; break;
    case COST: f = (double)l->batch * l->inputs; break;   /* the loss's own sum */
    default: break;
    }
    if (l->bn) {
        f += 2.0 * l->batch * l->oh * l->ow;   /* mean and variance */
        b += 2.0 * l->batch * l->oh * l->ow;   /* their gradients */
    }
    *fwd = f;
    *bwd = b;
}
