/* dialect: see dialect.h. */
#include "dialect.h"
#include "act_ops.h"
#include "layerfix.h"
#include "yolo_dialect.h"
#include "cfgcheck.h"
#include "readable.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { ACT_MISH = 1, ACT_SWISH = 2, ROUTE_SLICE = 3, YOLO_FORK = 4 };

/* One layer with a dialect activation.  Keyed by the layer's address in
 * its network's layers array (stable for the network's life; resize_network
 * reallocates outputs, not the array). */
typedef struct act_layer {
    const layer *key;
    int act;
    float *x;   /* the activation's input, batch x outputs */
    size_t n;
    void (*forward)(layer, network);
    void (*backward)(layer, network);
    int src;    /* ROUTE_SLICE: the routed layer */
    int gid;    /* ROUTE_SLICE: which slice */
    sdnn_yolo_opts yolo; /* YOLO_FORK: the head's keys */
} act_layer;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static act_layer **g_layers;
static int g_n, g_cap;

static act_layer *lookup(const layer *key)
{
    act_layer *a = NULL;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n && !a; ++i)
        if (g_layers[i]->key == key) a = g_layers[i];
    pthread_mutex_unlock(&g_mu);
    return a;
}

static void act_forward(layer l, network net)
{
    act_layer *a = lookup(net.layers + net.index);
    a->forward(l, net);
    size_t n = (size_t)l.outputs * (size_t)l.batch;
    if (a->n < n) {
        float *g = realloc(a->x, n * sizeof *g);
        if (!g) {
            /* Darknet's forward cannot return an error: record it and make
             * the output NaN, so the step's non-finite checks stop training
             * naming this layer (and backward below skips the activation). */
            SDNN_ERROR(SDNN_ERR_NOMEM, "layer %d: no memory for the %s activation's input "
                       "(%zu floats)", net.index, a->act == ACT_MISH ? "mish" : "swish", n);
            for (size_t i = 0; i < n; ++i) l.output[i] = NAN;
            return;
        }
        a->x = g;
        a->n = n;
    }
    memcpy(a->x, l.output, n * sizeof *a->x);
    if (a->act == ACT_MISH)
        for (size_t i = 0; i < n; ++i) l.output[i] = sdnn_mishf(a->x[i]);
    else
        for (size_t i = 0; i < n; ++i) l.output[i] = sdnn_swishf(a->x[i]);
}

/* delta (n values) times the activation's gradient at its kept input. */
static void act_grad(const act_layer *a, float *delta, size_t n)
{
    if (a->n < n) {   /* the forward could not keep its input (out of memory) */
        for (size_t i = 0; i < n; ++i) delta[i] = NAN;
    } else if (a->act == ACT_MISH)
        for (size_t i = 0; i < n; ++i) delta[i] *= sdnn_mish_gradf(a->x[i]);
    else
        for (size_t i = 0; i < n; ++i) delta[i] *= sdnn_swish_gradf(a->x[i]);
}

static void act_backward(layer l, network net)
{
    act_layer *a = lookup(net.layers + net.index);
    act_grad(a, l.delta, (size_t)l.outputs * (size_t)l.batch);
    a->backward(l, net);
}

/* For the batch-norm fix (bnfix.c), which must run between the dialect's
 * activation gradient and libdarknet's layer backward: apply layer i's mish
 * or swish gradient to `delta` and return libdarknet's own backward of the
 * layer; NULL (delta untouched) for a layer without a dialect activation. */
void (*sdnn_dialect_act_grad(const network *net, int i, float *delta))(layer, network)
{
    if (net->layers[i].backward == NULL) return NULL;
    act_layer *a = lookup(net->layers + i);
    if (!a || (a->act != ACT_MISH && a->act != ACT_SWISH)) return NULL;
    act_grad(a, delta, (size_t)net->layers[i].outputs * (size_t)net->layers[i].batch);
    return a->backward;
}

/* A grouped route: slice gid of the routed layer's channels (each image's
 * CHW output holds its channels one after another, so a slice is one
 * contiguous run per image). */
static void slice_forward(layer l, network net)
{
    act_layer *a = lookup(net.layers + net.index);
    const layer *src = &net.layers[a->src];
    for (int b = 0; b < l.batch; ++b)
        memcpy(l.output + (size_t)b * l.outputs,
               src->output + (size_t)b * src->outputs + (size_t)a->gid * l.outputs,
               (size_t)l.outputs * sizeof *l.output);
}

static void slice_backward(layer l, network net)
{
    act_layer *a = lookup(net.layers + net.index);
    const layer *src = &net.layers[a->src];
    if (!src->delta) return;
    for (int b = 0; b < l.batch; ++b) {
        float *d = src->delta + (size_t)b * src->outputs + (size_t)a->gid * l.outputs;
        const float *g = l.delta + (size_t)b * l.outputs;
        for (int i = 0; i < l.outputs; ++i) d[i] += g[i];
    }
}

/* One forward and one backward for every layer of a type that has a
 * dialect layer in the network: hooks.c keeps one original function per
 * layer type, so all layers of that type must share the pointer.  act 0:
 * Darknet's own function. */
static void dialect_forward(layer l, network net)
{
    act_layer *a = lookup(net.layers + net.index);
    if (a->act == ROUTE_SLICE) slice_forward(l, net);
    else if (a->act == YOLO_FORK) sdnn_yolo_forward(l, net, &a->yolo);
    else if (a->act) act_forward(l, net);
    else a->forward(l, net);
}

static void dialect_backward(layer l, network net)
{
    act_layer *a = lookup(net.layers + net.index);
    if (a->act == ROUTE_SLICE) slice_backward(l, net);
    else if (a->act == YOLO_FORK) a->backward(l, net); /* libdarknet's: delta into the input's */
    else if (a->act) act_backward(l, net);
    else a->backward(l, net);
}

int sdnn_dialect_layers(const network *net)
{
    int k = 0;
    for (int i = 0; i < net->n; ++i)
        k += net->layers[i].forward == dialect_forward && lookup(net->layers + i)->act != 0;
    return k;
}

void sdnn_dialect_forget(const network *net)
{
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n;) {
        if (g_layers[i]->key >= net->layers && g_layers[i]->key < net->layers + net->n) {
            free(g_layers[i]->x);
            free(g_layers[i]);
            g_layers[i] = g_layers[--g_n];
        } else {
            ++i;
        }
    }
    pthread_mutex_unlock(&g_mu);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (cap - len < 2) {
            char *g = realloc(buf, cap * 2);
            if (!g) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = g;
            cap *= 2;
        }
        size_t r = fread(buf + len, 1, cap - len - 1, f);
        if (r == 0) break;
        len += r;
    }
    fclose(f);
    if (buf) buf[len] = '\0';
    return buf;
}

/* `text` with mish/swish written as linear into *out; acts[k] = the
 * dialect activation of layer k (0: none).  Lines are classified as
 * Darknet's read_cfg does after removing spaces and tabs. */
typedef struct route_info {
    int is_route, groups, gid;
    long ref; /* layers= */
} route_info;

/* The grouped routes of the text: info[k] for layer k (pass 1). */
static void scan_routes(const char *text, route_info *info, int max)
{
    int layer_no = -2, in_ours = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        const char *end = nl ? nl : p + strlen(p);
        char line[128];
        size_t k = 0;
        for (const char *q = p; q < end && k + 1 < sizeof line; ++q)
            if (*q != ' ' && *q != '\t' && *q != '\r') line[k++] = *q;
        line[k] = '\0';
        if (line[0] == '[') {
            in_ours = strcmp(line, "[scalednn]") == 0;
            if (!in_ours) ++layer_no;
            if (layer_no >= 0 && layer_no < max) {
                info[layer_no] = (route_info){strcmp(line, "[route]") == 0, 1, 0, 0};
            }
        } else if (!in_ours && layer_no >= 0 && layer_no < max && info[layer_no].is_route) {
            if (strncmp(line, "groups=", 7) == 0) info[layer_no].groups = atoi(line + 7);
            if (strncmp(line, "group_id=", 9) == 0) info[layer_no].gid = atoi(line + 9);
            if (strncmp(line, "layers=", 7) == 0) info[layer_no].ref = atol(line + 7);
        }
        p = nl ? nl + 1 : end;
    }
}

static sdnn_status rewrite(const char *text, char **out, int **acts, int *nlayers,
                           const route_info *info, const long *chan, int nchan,
                           sdnn_yolo_opts *yopts, int maxl)
{
    int cap = 64, layer_no = -2; /* -2: before [net], -1: in [net] */
    int in_ours = 0, in_yolo = 0;
    size_t len = strlen(text), o = 0;
    *out = malloc(len * 2 + 128 * (size_t)(nchan + 1)); /* "mish" -> "linear", route -> 1x1 */
    *acts = calloc((size_t)cap, sizeof **acts);
    if (!*out || !*acts) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory to read the cfg");
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        const char *end = nl ? nl : p + strlen(p);
        char line[64];
        size_t k = 0;
        for (const char *q = p; q < end && k + 1 < sizeof line; ++q)
            if (*q != ' ' && *q != '\t' && *q != '\r') line[k++] = *q;
        line[k] = '\0';
        int act = 0, drop = 0, yolo_key = 0;
        if (line[0] == '[') {
            in_ours = strcmp(line, "[scalednn]") == 0;
            in_yolo = strcmp(line, "[yolo]") == 0;
            if (!in_ours) ++layer_no;
            if (in_yolo && layer_no >= 0 && layer_no < maxl) sdnn_yolo_opts_init(&yopts[layer_no]);
            if (!in_ours && layer_no >= 0 && layer_no < nchan && info[layer_no].is_route &&
                info[layer_no].groups > 1) {
                /* A 1x1 layer on the layer before it with the slice's
                 * channels: every later layer is built on the right size. */
                o += (size_t)sprintf(*out + o, "[convolutional]\nfilters=%ld\nsize=1\nstride=1\n"
                                     "pad=0\nactivation=linear\n", chan[layer_no]);
                drop = 1;
            }
            if (layer_no >= cap) {
                int *g = realloc(*acts, (size_t)cap * 2 * sizeof *g);
                if (!g) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory to read the cfg");
                memset(g + cap, 0, (size_t)cap * sizeof *g);
                *acts = g;
                cap *= 2;
            }
        } else if (!in_ours && layer_no >= 0 && layer_no < nchan && info[layer_no].is_route &&
                   info[layer_no].groups > 1) {
            drop = 1;
        } else if (in_yolo && layer_no >= 0 && layer_no < maxl) {
            /* The fork's keys leave the text (libdarknet would only warn
             * of them); their values go to the head's options. */
            yolo_key = sdnn_yolo_opts_set(&yopts[layer_no], line);
        } else if (!in_ours && layer_no >= 0) {
            act = strcmp(line, "activation=mish") == 0    ? ACT_MISH
                  : strcmp(line, "activation=swish") == 0 ? ACT_SWISH
                                                          : 0;
        }
        if (yolo_key) {
            (*acts)[layer_no] = YOLO_FORK;
        } else if (drop) {
            if (layer_no >= 0) (*acts)[layer_no] = ROUTE_SLICE;
        } else if (act) {
            (*acts)[layer_no] = act;
            memcpy(*out + o, "activation=linear\n", 18);
            o += 18;
        } else {
            size_t n = (size_t)(end - p);
            memcpy(*out + o, p, n);
            o += n;
            (*out)[o++] = '\n';
        }
        p = nl ? nl + 1 : end;
    }
    (*out)[o] = '\0';
    *nlayers = layer_no + 1;
    return SDNN_OK;
}

static sdnn_status add_layer(layer *l, int act);

/* Layer i, parsed as a 1x1 convolution of the slice's size, becomes the
 * grouped route: a ROUTE of one input with no parameters (Darknet's
 * weights files, the parameter views and the update skip it). */
static sdnn_status add_slice(network *net, int i, int src, int gid)
{
    layer *l = &net->layers[i];
    int *in = malloc(sizeof *in), *sz = malloc(sizeof *sz);
    if (!in || !sz) {
        free(in);
        free(sz);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a grouped route");
    }
    in[0] = src;
    sz[0] = net->layers[src].outputs;
    sdnn_status st = add_layer(l, ROUTE_SLICE);
    if (st != SDNN_OK) {
        free(in);
        free(sz);
        return st;
    }
    act_layer *a = lookup(l);
    a->src = src;
    a->gid = gid;
    l->type = ROUTE;
    l->n = 1;
    l->input_layers = in;
    l->input_sizes = sz;
    l->nweights = 0;
    l->nbiases = 0;
    l->batch_normalize = 0;
    l->update = NULL;
    return SDNN_OK;
}

/* Register layer `l`; an entry left by a freed network at the same
 * address is replaced. */
static sdnn_status add_layer(layer *l, int act)
{
    act_layer *a = calloc(1, sizeof *a);
    size_t n = (size_t)l->outputs * (size_t)l->batch;
    int keeps = act == ACT_MISH || act == ACT_SWISH;
    float *x = keeps ? malloc((n ? n : 1) * sizeof *x) : NULL;
    if (!a || (keeps && !x)) {
        free(a);
        free(x);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a dialect layer");
    }
    *a = (act_layer){.key = l, .act = act, .x = x, .n = keeps ? n : 0, .forward = l->forward,
                     .backward = l->backward};
    pthread_mutex_lock(&g_mu);
    int at = g_n;
    for (int i = 0; i < g_n; ++i)
        if (g_layers[i]->key == l) at = i;
    if (at == g_n && g_n == g_cap) {
        int cap = g_cap ? 2 * g_cap : 16;
        act_layer **g = realloc(g_layers, (size_t)cap * sizeof *g);
        if (!g) {
            pthread_mutex_unlock(&g_mu);
            free(a);
            free(x);
            return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a dialect layer");
        }
        g_layers = g;
        g_cap = cap;
    }
    if (at < g_n) {
        free(g_layers[at]->x);
        free(g_layers[at]);
    } else {
        ++g_n;
    }
    g_layers[at] = a;
    pthread_mutex_unlock(&g_mu);
    l->forward = dialect_forward;
    l->backward = dialect_backward;
    return SDNN_OK;
}

network *sdnn_parse_network(const char *path)
{
    if (sdnn_check_readable(path) != SDNN_OK) return NULL; /* a FIFO or a device: unopened */
    char *text = read_text(path);
    if (!text) {
        SDNN_ERROR(SDNN_ERR_IO, "%s: cannot read the cfg: %s", path, strerror(errno));
        return NULL;
    }
    char *out = NULL;
    int *acts = NULL, nl = 0, nchan = 0;
    /* Layer count bound: one per '[' in the text. */
    int maxl = 1;
    for (const char *q = text; *q; ++q) maxl += *q == '[';
    long *chan = calloc((size_t)maxl, sizeof *chan);
    route_info *info = calloc((size_t)maxl, sizeof *info);
    sdnn_yolo_opts *yopts = calloc((size_t)maxl, sizeof *yopts);
    sdnn_status st = chan && info && yopts ? SDNN_OK
                                           : SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the cfg");
    int grouped = 0;
    if (st == SDNN_OK) {
        scan_routes(text, info, maxl);
        for (int i = 0; i < maxl; ++i) grouped |= info[i].is_route && info[i].groups > 1;
    }
    /* The slice's channels come from the checker's walk of the layers,
     * needed only for a grouped route (a cfg in Debian's dialect is not
     * checked again here). */
    if (st == SDNN_OK && grouped) st = sdnn_cfg_channels(path, text, chan, maxl, &nchan);
    if (st == SDNN_OK)
        st = rewrite(text, &out, &acts, &nl, info, chan, nchan < maxl ? nchan : maxl, yopts,
                     maxl);
    free(text);
    free(chan);
    int any = 0;
    for (int i = 0; st == SDNN_OK && i < nl; ++i) any |= acts[i] != 0;
    network *net = NULL;
    if (st == SDNN_OK && !any) {
        net = parse_network_cfg((char *)path); /* Debian's dialect: untouched */
    } else if (st == SDNN_OK) {
        int fd = memfd_create("sdnn-dialect", MFD_CLOEXEC);
        size_t len = strlen(out);
        if (fd >= 0 && write(fd, out, len) == (ssize_t)len) {
            char p[64];
            snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
            net = parse_network_cfg(p);
        } else {
            SDNN_ERROR(SDNN_ERR_SYSTEM, "%s: writing the rewritten cfg: %s", path,
                       strerror(errno));
        }
        if (fd >= 0) close(fd);
    }
    /* Before the dialect wraps a layer: what it wraps is then repaired
     * (layerfix.h: the strided 1x1 convolution, [batchnorm]'s buffers). */
    if (net && sdnn_layerfix_apply(net) != SDNN_OK) {
        free_network(net); /* the error is recorded */
        net = NULL;
    }
    free(out);
    for (int i = 0; net && i < nl && i < net->n; ++i) {
        if (!acts[i]) continue;
        if (acts[i] == ROUTE_SLICE) {
            long ref = info[i].ref < 0 ? i + info[i].ref : info[i].ref;
            if (add_slice(net, i, (int)ref, info[i].gid) != SDNN_OK) {
                free_network(net);
                net = NULL;
            }
            continue;
        }
        if (acts[i] == YOLO_FORK && net->layers[i].type != YOLO) {
            SDNN_ERROR(SDNN_ERR_INVALID, "%s: layer %d: the fork's [yolo] keys on a layer "
                       "libdarknet did not build as [yolo]", path, i);
            free_network(net);
            net = NULL;
            break;
        }
        if (add_layer(&net->layers[i], acts[i]) != SDNN_OK) {
            free_network(net); /* the error is recorded */
            net = NULL;
            break;
        }
        if (acts[i] == YOLO_FORK) lookup(&net->layers[i])->yolo = yopts[i];
    }
    if (net) {
        int types[4], nt = 0;
        for (int i = 0; i < net->n; ++i) {
            if (net->layers[i].forward != dialect_forward) continue;
            int t = (int)net->layers[i].type, seen = 0;
            for (int k = 0; k < nt; ++k) seen |= types[k] == t;
            if (!seen && nt < 4) types[nt++] = t;
        }
        for (int i = 0; net && i < net->n; ++i) {
            layer *l = &net->layers[i];
            int same = 0;
            for (int k = 0; k < nt; ++k) same |= types[k] == (int)l->type;
            if (same && l->forward != dialect_forward && add_layer(l, 0) != SDNN_OK) {
                free_network(net);
                net = NULL;
            }
        }
    }
    free(acts);
    free(info);
    free(yopts);
    return net;
}

const sdnn_yolo_opts *sdnn_dialect_yolo(const network *net, int i)
{
    if (i < 0 || i >= net->n || net->layers[i].forward != dialect_forward) return NULL;
    act_layer *a = lookup(net->layers + i);
    return a && a->act == YOLO_FORK ? &a->yolo : NULL;
}

sdnn_dialect_kind sdnn_dialect_layer(const network *net, int i, sdnn_dialect_layer_info *info)
{
    *info = (sdnn_dialect_layer_info){.kind = SDNN_DIALECT_NONE};
    if (i < 0 || i >= net->n) return SDNN_DIALECT_NONE;
    const layer *l = &net->layers[i];
    act_layer *a = lookup(l);
    if (!a) return SDNN_DIALECT_NONE;
    /* An entry left at this address by a network freed without
     * sdnn_network_free must not count: each kind checks the layer is
     * still what the dialect made of it. */
    switch (a->act) {
    case ACT_MISH:
    case ACT_SWISH:
        if (l->activation == LINEAR &&
            (l->type == CONVOLUTIONAL || l->type == CONNECTED || l->type == SHORTCUT))
            info->kind = a->act == ACT_MISH ? SDNN_DIALECT_MISH : SDNN_DIALECT_SWISH;
        break;
    case ROUTE_SLICE:
        if (l->type == ROUTE && l->n == 1 && l->input_layers && l->input_layers[0] == a->src) {
            info->kind = SDNN_DIALECT_ROUTE_SLICE;
            info->src = a->src;
            info->gid = a->gid;
        }
        break;
    case YOLO_FORK:
        if (l->type == YOLO) {
            info->kind = SDNN_DIALECT_YOLO;
            info->yolo = &a->yolo;
        }
        break;
    default: break;
    }
    return info->kind;
}

void sdnn_dialect_nms(const network *net, detection *dets, int n, int classes, float thresh)
{
    /* As the fork's detector: the kind of the network's last layer. */
    const sdnn_yolo_opts *o = sdnn_dialect_yolo(net, net->n - 1);
    if (o)
        sdnn_yolo_nms(dets, n, classes, thresh, o->nms_kind, o->beta_nms);
    else
        do_nms_sort(dets, n, classes, thresh);
}
