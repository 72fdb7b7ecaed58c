/*
 * gradcheck: see gradcheck.h.
 */
#include "gradcheck.h"
#include "config.h"
#include "engine.h"
#include "hooks.h"
#include "replicas.h"
#include "splitmix.h"
#include "trainer.h"

#include <darknet.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- engines ----------------------------------------------------------------- */

/* The engines are the registry's (plugin/engine/engine.c: the only list of
 * their names).  The check drives one through the trainer and reaches the
 * instance it made through a copy of its table whose create records it:
 * pull brings the step's gradient (the updates) to the host network, push
 * sends the zeroed updates before the step (a host engine does nothing). */
static const sdnn_engine_ops *g_base;
static sdnn_engine_ops g_wrapped;
static sdnn_engine *g_made;

static sdnn_status recording_create(sdnn_engine *e, const sdnn_engine_opts *o)
{
    sdnn_status st = g_base->create(e, o);
    if (st == SDNN_OK) g_made = e;
    return st;
}

const char *sdnn_gradcheck_engines(void) { return sdnn_engine_names(); }

/* ---- small helpers ----------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { return sdnn_splitmix64_next(s); }

static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void note(sdnn_gradcheck_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(sdnn_gradcheck_report *r, const char *fmt, ...)
{
    size_t used = strlen(r->notes);
    if (used + 1 >= sizeof r->notes) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->notes + used, sizeof r->notes - used, fmt, ap);
    va_end(ap);
    used = strlen(r->notes);
    if (used + 1 < sizeof r->notes) {
        r->notes[used] = '\n';
        r->notes[used + 1] = '\0';
    }
}

/* ---- heads --------------------------------------------------------------------- */

/* With every whitespace removed: -1 when the line is not a section header,
 * 1 when it is [name], 0 for another header. */
static int header_is(const char *line, size_t len, const char *name)
{
    char buf[64];
    size_t k = 0;
    for (size_t i = 0; i < len && k + 1 < sizeof buf; ++i)
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r' && line[i] != '\n') buf[k++] = line[i];
    buf[k] = '\0';
    if (buf[0] != '[') return -1;   /* not a header */
    char want[64];
    snprintf(want, sizeof want, "[%s]", name);
    return strcmp(buf, want) == 0;
}

/* Replace every [yolo] and [region] section (header and keys) by an sse
 * [cost] head; *count gets how many.  Layer indices stay as they were. */
static char *replace_heads(const char *text, int *count)
{
    size_t len = strlen(text);
    char *out = malloc(len + 1 + 64 * (len / 8 + 1));
    if (!out) return NULL;
    size_t o = 0;
    int skipping = 0;
    *count = 0;
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) + 1 : strlen(p);
        int yolo = header_is(p, n, "yolo"), region = header_is(p, n, "region");
        if (yolo >= 0) {   /* a header */
            skipping = yolo == 1 || region == 1;
            if (skipping) {
                o += (size_t)sprintf(out + o, "[cost]\ntype=sse\n");
                ++*count;
            }
        }
        if (!skipping) {
            memcpy(out + o, p, n);
            o += n;
        }
        p += n;
    }
    out[o] = '\0';
    return out;
}

typedef enum { HEAD_NONE, HEAD_SSE, HEAD_L1, HEAD_SMOOTH, HEAD_SOFTMAX } head_kind;

/* What layer i contributes to the objective, or an error for a layer
 * whose loss this check does not know. */
static sdnn_status head_of(const network *net, int i, head_kind *k)
{
    const layer *l = &net->layers[i];
    *k = HEAD_NONE;
    if (l->type == COST) {
        switch (l->cost_type) {
        case SSE:
        case MASKED: *k = HEAD_SSE; return SDNN_OK;
        case L1: *k = HEAD_L1; return SDNN_OK;
        case SMOOTH: *k = HEAD_SMOOTH; return SDNN_OK;
        default:
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradcheck: layer %d: cost type %d has no "
                              "objective gradcheck knows (sse, masked, l1, smooth)", i,
                              (int)l->cost_type);
        }
    }
    if (l->type == SOFTMAX) {
        if (l->noloss) return SDNN_OK;
        if (l->softmax_tree || l->temperature != 1.0f)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradcheck: layer %d: softmax with a tree "
                              "or temperature != 1 (its delta is not the gradient of the "
                              "cross-entropy it reports)", i);
        *k = HEAD_SOFTMAX;
        return SDNN_OK;
    }
    if (l->cost && l->type != COST && l->type != SOFTMAX)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradcheck: layer %d (%s) reports a cost whose "
                          "objective gradcheck does not know", i, sdnn_layer_type_name(l->type));
    return SDNN_OK;
}

/* The objective of one forward pass, in double from the heads' float
 * inputs and outputs (see gradcheck.h). */
static double objective(const network *net, const head_kind *heads)
{
    double sum = 0;
    for (int i = 0; i < net->n; ++i) {
        if (heads[i] == HEAD_NONE) continue;
        const layer *l = &net->layers[i];
        size_t n = (size_t)l->batch * (size_t)l->inputs;
        const float *t = net->truth;
        if (heads[i] == HEAD_SOFTMAX) {
            double s = 0;
            for (size_t k = 0; k < n; ++k)
                if (t[k] != 0) s -= (double)t[k] * log((double)l->output[k]);
            sum += s;
            continue;
        }
        const float *x = i > 0 ? net->layers[i - 1].output : net->input;
        double s = 0;
        for (size_t k = 0; k < n; ++k) {
            double d = (double)t[k] - (double)x[k];
            if (heads[i] == HEAD_SSE) s += 0.5 * d * d;
            else if (heads[i] == HEAD_L1) s += fabs(d);
            else s += fabs(d) < 1 ? 0.5 * d * d : fabs(d) - 0.5;
        }
        sum += (double)l->scale * s;
    }
    return sum;
}

/* ---- the check ----------------------------------------------------------------- */

typedef struct gc_run {
    network *net;
    head_kind *heads;
    data d;
    unsigned draws;   /* srand seed of every forward (dropout masks) */
    double base;      /* the loss at the trained point */
} gc_run;

/* The loss over the step's subdivisions, as train_network feeds them. */
static double loss_at(gc_run *g)
{
    network *net = g->net;
    int b = net->batch;
    int sub = g->d.X.rows / b;
    size_t in = (size_t)g->d.X.cols, tr = (size_t)g->d.y.cols;
    double sum = 0;
    srand(g->draws);
    for (int s = 0; s < sub; ++s) {
        for (int j = 0; j < b; ++j) {
            memcpy(net->input + (size_t)j * in, g->d.X.vals[s * b + j], in * sizeof(float));
            memcpy(net->truth + (size_t)j * tr, g->d.y.vals[s * b + j], tr * sizeof(float));
        }
        net->train = 1;
        forward_network(net);
        sum += objective(net, g->heads);
    }
    return sum;
}

/* Does layer j read layer k's output?  A route reads its layers, a
 * shortcut its input and its from= layer, every other layer its input. */
static int reads(const network *net, int j, int k)
{
    const layer *l = &net->layers[j];
    if (l->type == ROUTE) {
        for (int q = 0; l->input_layers && q < l->n; ++q)
            if (l->input_layers[q] == k) return 1;
        return 0;
    }
    if (l->type == SHORTCUT && l->index == k) return 1;
    return k == j - 1;
}

/* Over the batch-normalised layers that layer i's output reaches (i
 * included; N = batch x out_h x out_w): the smallest N, and the sum of 2/N
 * (*slack).  `reach` is scratch of net->n flags. */
static int bn_n_from(const network *net, int i, unsigned char *reach, double *slack)
{
    int best = 0;
    *slack = 0;
    memset(reach, 0, (size_t)net->n);
    reach[i] = 1;
    for (int j = i; j < net->n; ++j) {
        for (int k = i; k < j && !reach[j]; ++k)
            if (reach[k] && reads(net, j, k)) reach[j] = 1;
        if (!reach[j]) continue;
        const layer *l = &net->layers[j];
        int n = 0;
        if ((l->type == CONVOLUTIONAL || l->type == DECONVOLUTIONAL || l->type == CONNECTED) &&
            l->batch_normalize)
            n = l->batch * (l->type == CONNECTED ? 1 : l->out_h * l->out_w);
        else if (l->type == BATCHNORM)
            n = l->batch * l->out_h * l->out_w;
        if (n > 0) *slack += 2.0 / n;
        if (n > 0 && (best == 0 || n < best)) best = n;
    }
    return best;
}

static void type_label(const layer *l, char *out, size_t len)
{
    if (l->type == CONVOLUTIONAL)
        snprintf(out, len, "convolutional %dx%d%s%s", l->size, l->size,
                 l->batch_normalize ? " bn" : "", l->groups > 1 ? " groups" : "");
    else
        snprintf(out, len, "%s%s", sdnn_layer_type_name(l->type),
                 l->batch_normalize ? " bn" : "");
}

/* Check one layer: `samples` elements of each tensor. */
static sdnn_status check_layer(gc_run *g, int i, const sdnn_gradcheck_opts *o, uint64_t *rs,
                               sdnn_gradcheck_layer *row)
{
    network *net = g->net;
    sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
    int np = sdnn_layer_params(&net->layers[i], p);
    size_t total = 0;
    for (int j = 0; j < np; ++j) total += p[j].n;
    double *err = malloc(((size_t)o->samples * (size_t)np + 1) * sizeof *err);
    size_t *pick = malloc(((size_t)o->samples + 1) * sizeof *pick);
    if (!err || !pick) {
        free(err);
        free(pick);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "gradcheck: no memory");
    }
    int ne = 0;
    row->ntensors = np;
    for (int j = 0; j < np; ++j) {
        size_t n = p[j].n;
        row->tensor[j].what = p[j].what;
        if (n == 0) continue;
        int first = ne;
        double dnum = 0, dden = 0;
        float gmax = 0;
        for (size_t e = 0; e < n; ++e)
            if (fabsf(p[j].upd[e]) > gmax) gmax = fabsf(p[j].upd[e]);
        /* Distinct indices: all of a small tensor, else drawn. */
        int k = 0;
        while ((size_t)k < n && k < o->samples) {
            size_t c = n <= (size_t)o->samples ? (size_t)k : (size_t)(rng_next(rs) % n);
            int dup = 0;
            for (int q = 0; q < k; ++q) dup |= pick[q] == c;
            if (!dup) pick[k++] = c;
        }
        for (int q = 0; q < k; ++q) {
            size_t e = pick[q];
            float v = p[j].val[e];
            float hi = (float)((double)v + o->eps), lo = (float)((double)v - o->eps);
            p[j].val[e] = hi;
            double lp = loss_at(g);
            p[j].val[e] = lo;
            double lm = loss_at(g);
            p[j].val[e] = v;
            double dp = (double)hi - (double)v, dm = (double)v - (double)lo;
            double fd = (lp - lm) / (dp + dm);
            double an = -(double)p[j].upd[e];   /* updates hold the negative gradient */
            double floor = 1e-3 * (double)gmax;
            /* A kink (leaky/ReLU at 0, a maxpool tie, a piecewise
             * activation's corner) between theta-h and theta+h makes the
             * one-sided slopes disagree: the central difference is then no
             * derivative at all, and the sample is left out (counted). */
            double right = (lp - g->base) / dp, left = (g->base - lm) / dm;
            if (fabs(right - left) > SDNN_GRADCHECK_KINK * fmax(fmax(fabs(right), fabs(left)), floor)) {
                row->kinks++;
                continue;
            }
            double den = fmax(fmax(fabs(an), fabs(fd)), floor);
            err[ne++] = den > 0 ? fabs(an - fd) / den : 0;
            dnum += (an - fd) * (an - fd);
            dden += fd * fd;
        }
        int k2 = ne - first;
        row->tensor[j].samples = k2;
        row->tensor[j].norm_rel = dden > 0 ? sqrt(dnum / dden) : sqrt(dnum);
        if (k2 > 0) {
            double *tmp = malloc((size_t)k2 * sizeof *tmp);
            if (tmp) {
                memcpy(tmp, err + first, (size_t)k2 * sizeof *tmp);
                qsort(tmp, (size_t)k2, sizeof *tmp, cmp_double);
                row->tensor[j].median_rel =
                    k2 % 2 ? tmp[k2 / 2] : 0.5 * (tmp[k2 / 2 - 1] + tmp[k2 / 2]);
                free(tmp);
            }
        }
    }
    row->samples = ne;
    row->size = total;
    if (ne > 0) {
        qsort(err, (size_t)ne, sizeof *err, cmp_double);
        row->max_rel = err[ne - 1];
        row->median_rel = ne % 2 ? err[ne / 2] : 0.5 * (err[ne / 2 - 1] + err[ne / 2]);
    }
    free(err);
    free(pick);
    return SDNN_OK;
}

static sdnn_status memfd_path(const char *text, int *fd, char *path, size_t len)
{
    *fd = memfd_create("sdnn-gradcheck", MFD_CLOEXEC);
    if (*fd < 0) return SDNN_ERROR(SDNN_ERR_SYSTEM, "gradcheck: memfd_create: %s", strerror(errno));
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t w = write(*fd, text + off, n - off);
        if (w <= 0) {
            close(*fd);
            *fd = -1;
            return SDNN_ERROR(SDNN_ERR_SYSTEM, "gradcheck: writing the cfg: %s", strerror(errno));
        }
        off += (size_t)w;
    }
    snprintf(path, len, "/proc/self/fd/%d", *fd);
    return SDNN_OK;
}

void sdnn_gradcheck_report_free(sdnn_gradcheck_report *r)
{
    if (!r) return;
    free(r->layer);
    r->layer = NULL;
    r->nlayers = 0;
}

sdnn_status sdnn_gradcheck_engine_check(const char *engine)
{
    const sdnn_engine_ops *ops = engine ? sdnn_engine_find(engine) : NULL;
    if (!ops)
        return SDNN_ERROR(SDNN_ERR_INVALID, "gradcheck: -engine %s: unknown engine (%s)",
                          engine ? engine : "(none)", sdnn_engine_names());
    char why[256] = "";
    if (!ops->available(1, why, sizeof why))
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradcheck: -engine %s: %s", ops->name,
                          why[0] ? why : "not available in this build");
    return SDNN_OK;
}

sdnn_status sdnn_gradcheck_text(const char *name, const char *text,
                                const sdnn_gradcheck_opts *o, sdnn_gradcheck_report *out)
{
    memset(out, 0, sizeof *out);
    SDNN_CHECK(sdnn_gradcheck_engine_check(o->engine));
    if (o->samples < 1 || o->samples > 1000000)
        return SDNN_ERROR(SDNN_ERR_INVALID, "gradcheck: -samples %d: expected 1..1000000",
                          o->samples);
    if (!(o->eps > 0) || !(o->eps < 1))
        return SDNN_ERROR(SDNN_ERR_INVALID, "gradcheck: -eps %g: expected a step > 0 and < 1",
                          o->eps);

    sdnn_config cfg;
    char *stripped = NULL, *body = NULL;
    SDNN_CHECK(sdnn_config_parse_text(name, text, &cfg, &stripped));
    int replaced = 0;
    body = replace_heads(stripped, &replaced);
    free(stripped);
    if (!body) return SDNN_ERROR(SDNN_ERR_NOMEM, "gradcheck: no memory");
    if (replaced)
        note(out, "%d yolo/region head%s checked as sse [cost] layers: Darknet's yolo and region "
                  "report |delta|^2, not the objective their delta is the gradient of; the "
                  "body before each head is what is checked", replaced, replaced > 1 ? "s" : "");

    int fd = -1;
    char path[64];
    sdnn_status st = memfd_path(body, &fd, path, sizeof path);
    free(body);
    if (st != SDNN_OK) return st;

    /* The trainer's path for a world of one, nothing written to disk. */
    snprintf(cfg.backend, sizeof cfg.backend, "local");
    snprintf(cfg.engine, sizeof cfg.engine, "%s", o->engine);
    cfg.timeline[0] = '\0';
    cfg.csv[0] = '\0';
    out->mode_stock = cfg.mode == SDNN_MODE_STOCK;
    out->fix_1x1_delta = cfg.fix_1x1_delta;

    network **nets = NULL;
    sdnn_trainer *t = NULL;
    head_kind *heads = NULL;
    unsigned char *reach = NULL;
    data d = {0};
    srand((unsigned)o->seed);
    st = sdnn_replicas_create(path, NULL, 1, 1, &nets);
    close(fd);
    if (st != SDNN_OK) return st;
    network *net = nets[0];

    /* Heads and the truth they read. */
    heads = calloc((size_t)net->n, sizeof *heads);
    if (!heads) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM, "gradcheck: no memory");
        goto done;
    }
    int nheads = 0, softmax = -1, truths = net->truths;
    for (int i = 0; i < net->n; ++i) {
        SDNN_CHECKGOTO(head_of(net, i, &heads[i]), st, done);
        if (heads[i] == HEAD_NONE) continue;
        ++nheads;
        if (heads[i] == HEAD_SOFTMAX) softmax = i;
        if (net->layers[i].inputs > truths) truths = net->layers[i].inputs;
    }
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].type == DROPOUT) {
            note(out, "dropout (layer %d): every forward of the check and the training step "
                      "start from srand(%u), so each uses the same mask", i,
                 (unsigned)(o->seed * 2654435761u + 17u));
            break;
        }
    if (nheads == 0) {
        st = SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradcheck: %s has no loss layer (cost, softmax, "
                        "yolo, region)", name);
        goto done;
    }
    if (softmax >= 0 && nheads > 1) {
        st = SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradcheck: a softmax head (layer %d) with other "
                        "heads: they would read one truth", softmax);
        goto done;
    }
    if (truths > net->truths) {
        /* Every head reads batch x inputs truth values from the start. */
        float *tr = calloc((size_t)truths * (size_t)net->batch, sizeof *tr);
        if (!tr) {
            st = SDNN_ERROR(SDNN_ERR_NOMEM, "gradcheck: no memory");
            goto done;
        }
        free(net->truth);
        net->truth = tr;
        net->truths = truths;
    }

    g_base = sdnn_engine_find(o->engine);
    g_wrapped = *g_base;
    g_wrapped.create = recording_create;
    g_made = NULL;
    SDNN_CHECKGOTO(sdnn_trainer_create_with(&g_wrapped, nets, 1, &cfg, 1, &t), st, done);
    nets = NULL;   /* the trainer owns it */
    net = sdnn_trainer_net(t, 0);
    out->fixed_layers = cfg.fix_1x1_delta ? sdnn_fix_1x1_count(net) : 0;
    /* The update moves nothing and keeps the gradient in the updates. */
    net->learning_rate = 0;
    net->momentum = 1;
    net->decay = 0;
    net->adam = 0;
    for (int i = 0; i < net->n; ++i) {
        sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
        int np = sdnn_layer_params(&net->layers[i], p);
        if (np < 0) {
            st = SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradcheck: layer %d (%s) has parameters "
                            "scalednn cannot view", i, sdnn_layer_type_name(net->layers[i].type));
            goto done;
        }
        for (int j = 0; j < np; ++j) memset(p[j].upd, 0, p[j].n * sizeof(float));
    }
    if (!g_made) {
        st = SDNN_ERROR(SDNN_ERR_INTERNAL, "gradcheck: the trainer made no %s engine", o->engine);
        goto done;
    }
    SDNN_CHECKGOTO(g_made->ops->push(g_made, SDNN_ENGINE_ALL), st, done);

    /* A random step batch: inputs uniform in [0, 1), sse targets uniform
     * in [0, 1), a softmax head one class per row and group. */
    int rows = net->batch * net->subdivisions;
    d.X = make_matrix(rows, net->inputs);
    d.y = make_matrix(rows, net->truths);
    uint64_t rs = o->seed ^ 0x5d4e3c2b1a09f8e7ull;
    for (int r = 0; r < rows; ++r) {
        for (int k = 0; k < net->inputs; ++k) d.X.vals[r][k] = (float)rng_uniform(&rs);
        if (softmax >= 0) {
            const layer *l = &net->layers[softmax];
            int groups = l->groups > 0 ? l->groups : 1, per = l->inputs / groups;
            for (int q = 0; q < groups; ++q)
                d.y.vals[r][q * per + (int)(rng_next(&rs) % (uint64_t)per)] = 1;
        } else {
            for (int k = 0; k < net->truths; ++k) d.y.vals[r][k] = (float)rng_uniform(&rs);
        }
    }
    gc_run g = { net, heads, d, (unsigned)(o->seed * 2654435761u + 17u), 0 };
    srand(g.draws);
    sdnn_step_stats ss;
    SDNN_CHECKGOTO(sdnn_trainer_step(t, d, &ss), st, done);
    /* The engine's gradient into the host network the differences run on. */
    SDNN_CHECKGOTO(g_made->ops->pull(g_made, SDNN_ENGINE_ALL), st, done);
    out->loss = g.base = loss_at(&g);

    int first = 0;
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].stopbackward) first = i + 1;
    out->layer = calloc(net->n > 0 ? (size_t)net->n : 1, sizeof *out->layer);
    reach = malloc(net->n > 0 ? (size_t)net->n : 1);
    if (!out->layer || !reach) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM, "gradcheck: no memory");
        goto done;
    }
    for (int i = first; i < net->n; ++i) {
        sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
        if (sdnn_layer_params(&net->layers[i], p) <= 0) continue;
        sdnn_gradcheck_layer *row = &out->layer[out->nlayers];
        row->index = i;
        type_label(&net->layers[i], row->type, sizeof row->type);
        row->fixed = cfg.fix_1x1_delta && sdnn_fix_1x1_needed(net, i);
        double slack;
        row->bn_n = bn_n_from(net, i, reach, &slack);
        row->threshold = SDNN_GRADCHECK_TOL + slack;
        SDNN_CHECKGOTO(check_layer(&g, i, o, &rs, row), st, done);
        row->pass = row->median_rel <= row->threshold;
        out->failed += !row->pass;
        out->nlayers++;
    }
done:
    if (st != SDNN_OK) sdnn_gradcheck_report_free(out);
    free_data(d);
    free(heads);
    free(reach);
    if (t) sdnn_trainer_destroy(t);
    if (nets) sdnn_replicas_free(nets, 1);
    return st;
}

sdnn_status sdnn_gradcheck_file(const char *path, const sdnn_gradcheck_opts *o,
                                sdnn_gradcheck_report *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return SDNN_ERROR(SDNN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 65536;
            char *b = realloc(text, cap);
            if (!b) {
                free(text);
                fclose(f);
                return SDNN_ERROR(SDNN_ERR_NOMEM, "%s: no memory", path);
            }
            text = b;
        }
        size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(text);
        return SDNN_ERROR(SDNN_ERR_IO, "%s: read error", path);
    }
    text[len] = '\0';
    sdnn_status st = sdnn_gradcheck_text(path, text, o, out);
    free(text);
    return st;
}

void sdnn_gradcheck_print(const sdnn_gradcheck_report *r, FILE *f)
{
    fprintf(f, "mode %s, fix_1x1_delta=%d (%d layer%s fixed), loss %.6g\n",
            r->mode_stock ? "stock" : "scalednn", r->fix_1x1_delta, r->fixed_layers,
            r->fixed_layers == 1 ? "" : "s", r->loss);
    fprintf(f, "%5s  %-28s %10s %7s %5s %10s %10s %10s  %s\n", "layer", "type", "size",
            "samples", "kinks", "max rel", "median rel", "threshold", "verdict");
    for (int k = 0; k < r->nlayers; ++k) {
        const sdnn_gradcheck_layer *l = &r->layer[k];
        char type[40];
        snprintf(type, sizeof type, "%s%s", l->type, l->fixed ? " (fixed)" : "");
        fprintf(f, "%5d  %-28s %10zu %7d %5d %10.2e %10.2e %10.2e  %s\n", l->index, type,
                l->size, l->samples, l->kinks, l->max_rel, l->median_rel, l->threshold,
                l->samples == 0 ? "no sample" : l->pass ? "ok" : "FAIL");
    }
    if (r->notes[0]) fprintf(f, "%s", r->notes);
    fprintf(f, "A layer fails when the median of its samples' relative errors exceeds its "
               "threshold: %.0e (float forward passes), plus 2/N for each batch-normalised "
               "layer its output reaches that normalises over N values (Darknet's forward divides "
               "the variance by N-1, its backward by N: an error of about 1/N per such layer). The max shows kinks (leaky/ReLU, maxpool ties) crossed "
               "by the +-eps step; samples whose one-sided slopes differ by more than %.0f%% straddle a "
               "kink and are left out (kinks column).\n",
            SDNN_GRADCHECK_TOL, 100 * SDNN_GRADCHECK_KINK);
    fprintf(f, "%d of %d layers above their threshold\n", r->failed, r->nlayers);
}
