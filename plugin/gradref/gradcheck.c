/*
 * gradcheck: see gradcheck.h.
 */
#include "gradcheck.h"
#include "gradref.h"
#include "cfgcheck.h"
#include "config.h"
#include "engine.h"
#include "hooks.h"
#include "replicas.h"
#include "readable.h"
#include "splitmix.h"
#include "trainer.h"
#include "yolo_dialect.h"

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

/* The line starting at p with every whitespace removed, into line[cap];
 * returns the length of the line in p, its newline included. */
static size_t squeezed_line(const char *p, char *line, size_t cap)
{
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) + 1 : strlen(p);
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; ++i)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r' && p[i] != '\n') line[k++] = p[i];
    line[k] = '\0';
    return n;
}

/* Does the [yolo] section starting after `p` hold one of the maintained
 * fork's keys (yolo_dialect.h: scale_x_y, iou_loss, ...)?  Then its delta is
 * the fork's, which the reference does not compute. */
static int fork_yolo(const char *p)
{
    sdnn_yolo_opts opts;
    sdnn_yolo_opts_init(&opts);
    while (*p) {
        char line[256];
        size_t n = squeezed_line(p, line, sizeof line);
        if (line[0] == '[') return 0;   /* the next section */
        if (line[0] != '#' && line[0] != ';' && sdnn_yolo_opts_set(&opts, line)) return 1;
        p += n;
    }
    return 0;
}

/* Does the [region] section starting after `p` ask for what the
 * reference's region delta does not compute (region_ref.c: coords other
 * than 4, background, a softmax tree, a class map)? */
static int region_unsupported(const char *p)
{
    while (*p) {
        char line[256];
        size_t n = squeezed_line(p, line, sizeof line);
        if (line[0] == '[') return 0;   /* the next section */
        if (!strncmp(line, "tree=", 5) || !strncmp(line, "map=", 4)) return 1;
        if (!strncmp(line, "coords=", 7) && atoi(line + 7) != 4) return 1;
        if (!strncmp(line, "background=", 11) && atoi(line + 11) != 0) return 1;
        p += n;
    }
    return 0;
}

/* Replace every [yolo] section of the fork's dialect and every [region]
 * section the reference does not compute (header and keys) by an sse
 * [cost] head; *count gets how many.  Layer indices stay as they were.
 * Debian's [yolo] heads and the other [region] heads stay: the reference
 * computes their delta (yolo_ref.c, region_ref.c). */
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
        int region = header_is(p, n, "region"), yolo = header_is(p, n, "yolo");
        if (region >= 0) {   /* a header */
            skipping = (region == 1 && region_unsupported(p + n)) ||
                       (yolo == 1 && fork_yolo(p + n));
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

typedef enum { HEAD_NONE, HEAD_SSE, HEAD_L1, HEAD_SMOOTH, HEAD_SOFTMAX, HEAD_YOLO,
               HEAD_REGION } head_kind;

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
    if (l->type == YOLO) {
        *k = HEAD_YOLO;
        return SDNN_OK;
    }
    if (l->type == REGION) {
        *k = HEAD_REGION;
        return SDNN_OK;
    }
    if (l->cost && l->type != COST && l->type != SOFTMAX)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradcheck: layer %d (%s) reports a cost whose "
                          "objective gradcheck does not know", i, sdnn_layer_type_name(l->type));
    return SDNN_OK;
}

/* ---- the check ----------------------------------------------------------------- */

typedef struct gc_run {
    network *net;
    sdnn_gradref *ref;
    int sub;            /* subdivisions of the step */
    double base;        /* the reference's objective at the trained point */
} gc_run;

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

/* The error model's R for layer i (*red: every layer's forward sums, the
 * backward sums of the layers layer i's output reaches, i included, and the
 * weight gradient's own sum) and the smallest batch-norm N among the layers
 * it reaches (returned, 0: none).  `reach` is scratch of net->n flags. */
static int reach_from(const gc_run *g, int i, unsigned char *reach, double *red)
{
    const network *net = g->net;
    int best = 0;
    *red = 0;
    memset(reach, 0, (size_t)net->n);
    reach[i] = 1;
    for (int j = i; j < net->n; ++j) {
        for (int k = i; k < j && !reach[j]; ++k)
            if (reach[k] && reads(net, j, k)) reach[j] = 1;
        if (!reach[j]) continue;
        double f, b;
        sdnn_gradref_reduction(g->ref, j, &f, &b);
        *red += b;
        const layer *l = &net->layers[j];
        int n = 0;
        if ((l->type == CONVOLUTIONAL || l->type == CONNECTED) && l->batch_normalize)
            n = l->batch * (l->type == CONNECTED ? 1 : l->out_h * l->out_w);
        if (n > 0 && (best == 0 || n < best)) best = n;
    }
    /* Every forward value feeds the loss and the deltas. */
    for (int j = 0; j < net->n; ++j) {
        double f, b;
        sdnn_gradref_reduction(g->ref, j, &f, &b);
        *red += f;
    }
    const layer *l = &net->layers[i];
    *red += (double)l->batch * g->sub * (l->type == CONVOLUTIONAL ? l->out_h * l->out_w : 1);
    return best;
}

static void type_label(const layer *l, char *out, size_t len)
{
    if (l->type == CONVOLUTIONAL)
        snprintf(out, len, "convolutional %dx%d%s%s%s", l->size, l->size,
                 l->stride > 1 ? " /2" : "", l->batch_normalize ? " bn" : "",
                 l->groups > 1 ? " groups" : "");
    else
        snprintf(out, len, "%s%s", sdnn_layer_type_name(l->type),
                 l->batch_normalize ? " bn" : "");
}

static double median_of(double *v, int n)
{
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Both stages for layer i (see gradcheck.h).  The reference's activations
 * before layer i are those of the unperturbed point: the layers are
 * checked from the last to the first, and each forward reruns layers i.. */
static sdnn_status check_layer(gc_run *g, int i, const sdnn_gradcheck_opts *o, uint64_t *rs,
                               sdnn_gradcheck_layer *row)
{
    network *net = g->net;
    sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
    int np = sdnn_layer_params(&net->layers[i], p);
    size_t total = 0;
    for (int j = 0; j < np; ++j) total += p[j].n;
    size_t cap = (size_t)o->samples + 1;
    double *e1 = malloc(cap * sizeof *e1), *e2 = malloc(cap * sizeof *e2);
    double *e3 = malloc(cap * sizeof *e3);
    double *all1 = malloc((cap * (size_t)np + 1) * sizeof *all1);
    size_t *pick = malloc(cap * sizeof *pick);
    if (!e1 || !e2 || !e3 || !all1 || !pick) {
        free(e1); free(e2); free(e3); free(all1); free(pick);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "gradcheck: no memory");
    }
    int n1 = 0;
    const double base = row->threshold;   /* C x 2^-24 x sqrt(R): a sum without cancellation */
    double worst_ratio = -1;
    row->ntensors = np;
    row->max_rel = 0;
    row->median_rel = 0;
    row->cond = 1;
    for (int j = 0; j < np; ++j) {
        size_t n;
        double *val = sdnn_gradref_param(g->ref, i, j, &n);
        const double *gr = sdnn_gradref_grad(g->ref, i, j, &n);
        size_t na_n = 0;
        const double *gq = sdnn_gradref_grad_spread(g->ref, i, j, &na_n);
        row->tensor[j].what = p[j].what;
        if (!val || !gr || !gq || n != p[j].n || na_n != n || n == 0) continue;
        /* Stage 2 on the whole tensor: the engine's gradient is -updates. */
        double gmax = 0, nr = 0, nd = 0, nabs = 0;
        for (size_t e = 0; e < n; ++e) {
            double d = -(double)p[j].upd[e] - gr[e];
            if (fabs(gr[e]) > gmax) gmax = fabs(gr[e]);
            nr += gr[e] * gr[e];
            nd += d * d;
            double a = fabs(gr[e]) + gq[e];   /* E_e: the element's error scale */
            nabs += a * a;
        }
        nr = sqrt(nr);
        nd = sqrt(nd);
        nabs = sqrt(nabs);
        /* The tensor's condition: ||E|| / ||gradient||, E_e = |g_e| +
         * sqrt(sum t^2) (>= 1; about 1 when no element's terms cancel). */
        double cond = nr > 0 && nabs > nr ? nabs / nr : 1;
        double norm_rel = nr > 0 ? nd / nr : nd > 0 ? HUGE_VAL : 0, dir_rel = 0;
        for (int q = 0; q < SDNN_GRADCHECK_DIRS; ++q) {
            double dot = 0;
            uint64_t bits = 0;
            for (size_t e = 0; e < n; ++e) {
                if (e % 64 == 0) bits = rng_next(rs);
                double d = -(double)p[j].upd[e] - gr[e];
                dot += (bits >> (e % 64)) & 1 ? d : -d;
            }
            double rel = nr > 0 ? fabs(dot) / nr : fabs(dot) > 0 ? HUGE_VAL : 0;
            if (rel > dir_rel) dir_rel = rel;
        }
        /* Distinct indices: all of a small tensor, else drawn. */
        int k = 0;
        while ((size_t)k < n && k < o->samples) {
            size_t c = n <= (size_t)o->samples ? (size_t)k : (size_t)(rng_next(rs) % n);
            int dup = 0;
            for (int q = 0; q < k; ++q) dup |= pick[q] == c;
            if (!dup) pick[k++] = c;
        }
        int k1 = 0, k2 = 0, k3 = 0;
        double efloor = nr / sqrt((double)n), afloor = nabs / sqrt((double)n);
        for (int q = 0; q < k; ++q) {
            size_t e = pick[q];
            double an = gr[e], eng = -(double)p[j].upd[e];
            double den2 = fmax(fabs(an), efloor);
            e2[k2++] = den2 > 0 ? fabs(eng - an) / den2 : fabs(eng - an) > 0 ? HUGE_VAL : 0;
            /* The element against its own bound base x E_e: in units of
             * base (the floor keeps an element whose terms are all ~0 from
             * dividing by nothing). */
            double den3 = fmax(fabs(an) + gq[e], afloor);
            e3[k3++] = den3 > 0 ? fabs(eng - an) / den3 : fabs(eng - an) > 0 ? HUGE_VAL : 0;
            /* Stage 1: the reference's objective at theta +- eps. */
            double v = val[e];
            val[e] = v + o->eps;
            double lp = sdnn_gradref_forward(g->ref, i, 1);
            val[e] = v - o->eps;
            double lm = sdnn_gradref_forward(g->ref, i, 1);
            val[e] = v;
            double fd = (lp - lm) / (2 * o->eps);
            double floor = 1e-3 * gmax;
            /* A kink (leaky/ReLU at 0, a maxpool tie, a piecewise
             * activation's corner) between theta-eps and theta+eps makes
             * the one-sided slopes disagree: the central difference is then
             * no derivative at all, and the sample is left out (counted). */
            double right = (lp - g->base) / o->eps, left = (g->base - lm) / o->eps;
            if (fabs(right - left) > SDNN_GRADCHECK_KINK * fmax(fmax(fabs(right), fabs(left)), floor)) {
                row->kinks++;
                continue;
            }
            double den = fmax(fmax(fabs(an), fabs(fd)), floor);
            e1[k1++] = den > 0 ? fabs(an - fd) / den : 0;
        }
        memcpy(all1 + n1, e1, (size_t)k1 * sizeof *e1);
        n1 += k1;
        row->tensor[j].samples = k1;
        row->tensor[j].ref_median_rel = median_of(e1, k1);
        row->tensor[j].median_rel = median_of(e2, k2);
        row->tensor[j].norm_rel = norm_rel;
        row->tensor[j].dir_rel = dir_rel;
        row->tensor[j].cond = cond;
        /* Judged against base x cond: the normwise error, and the sampled
         * elements' median against their own bounds (scaled to the same
         * threshold).  The row keeps the tensor with the smallest margin. */
        double worst = fmax(norm_rel, median_of(e3, k3) * cond);
        double ratio = worst / (base * cond);
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            row->max_rel = worst;
            row->threshold = base * cond;
            row->cond = cond;
        }
        /* The directions, judged: the one nearest its bound is kept. */
        double dir_bound = SDNN_GRADCHECK_DIR_T * base * cond;
        if (row->dir_threshold == 0 || dir_rel * row->dir_threshold > row->dir_rel * dir_bound) {
            row->dir_rel = dir_rel;
            row->dir_threshold = dir_bound;
        }
        if (row->tensor[j].median_rel > row->median_rel) row->median_rel = row->tensor[j].median_rel;
    }
    row->samples = n1;
    row->size = total;
    row->ref_median_rel = median_of(all1, n1);
    row->ref_max_rel = n1 > 0 ? all1[n1 - 1] : 0;
    free(e1); free(e2); free(e3); free(all1); free(pick);
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

    /* The structure first, as training checks it: Debian's read_cfg aborts
     * on an empty file, a key before the first section, CRLF, ... */
    SDNN_CHECK(sdnn_cfg_check_text(name, text));
    sdnn_config cfg;
    char *stripped = NULL, *body = NULL;
    SDNN_CHECK(sdnn_config_parse_text(name, text, &cfg, &stripped));
    int replaced = 0;
    body = replace_heads(stripped, &replaced);
    free(stripped);
    if (!body) return SDNN_ERROR(SDNN_ERR_NOMEM, "gradcheck: no memory");
    if (replaced)
        note(out, "%d region/fork-yolo head%s checked as sse [cost] layers: the reference has "
                  "no delta of the fork's [yolo] keys nor of a [region] with coords != 4, "
                  "background, tree or map; the body before each head is what is checked",
             replaced, replaced > 1 ? "s" : "");

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
    sdnn_gradref *ref = NULL;
    float **masks = NULL;
    size_t engine_changed = 0;
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
    int nheads = 0, softmax = -1, yolo = -1, classes = 0, truths = net->truths, nregion = 0;
    for (int i = 0; i < net->n; ++i) {
        SDNN_CHECKGOTO(head_of(net, i, &heads[i]), st, done);
        if (heads[i] == HEAD_NONE) continue;
        ++nheads;
        if (heads[i] == HEAD_SOFTMAX) softmax = i;
        if (heads[i] == HEAD_YOLO || heads[i] == HEAD_REGION) {
            /* Boxes in rows of l->truths values: the network's rows. */
            int c = net->layers[i].classes;
            if (yolo < 0 || c < classes) classes = c;
            yolo = i;
            nregion += heads[i] == HEAD_REGION;
            continue;
        }
        if (net->layers[i].inputs > truths) truths = net->layers[i].inputs;
    }
    if (yolo >= 0 && truths > net->truths) {
        st = SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "gradcheck: %s: a [yolo]/[region] head (layer %d) reads "
                        "truth rows of %d values, another head reads %d", name, yolo,
                        net->truths, truths);
        goto done;
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
        } else if (yolo >= 0) {
            /* 2 to 4 boxes an image: centre in [.05, .95), size in
             * [.05, .6), a class the yolo heads all have. */
            int boxes = 2 + (int)(rng_next(&rs) % 3);
            for (int b = 0; b < boxes && (b + 1) * 5 <= net->truths; ++b) {
                float *p = d.y.vals[r] + b * 5;
                p[0] = (float)(.05 + .9 * rng_uniform(&rs));
                p[1] = (float)(.05 + .9 * rng_uniform(&rs));
                p[2] = (float)(.05 + .55 * rng_uniform(&rs));
                p[3] = (float)(.05 + .55 * rng_uniform(&rs));
                p[4] = (float)(classes > 0 ? rng_next(&rs) % (uint64_t)classes : 0);
            }
        } else {
            for (int k = 0; k < net->truths; ++k) d.y.vals[r][k] = (float)rng_uniform(&rs);
        }
    }
    unsigned draws = (unsigned)(o->seed * 2654435761u + 17u);
    srand(draws);
    sdnn_step_stats ss;
    SDNN_CHECKGOTO(sdnn_trainer_step(t, d, &ss), st, done);
    /* The engine's gradient into the host network. */
    SDNN_CHECKGOTO(g_made->ops->pull(g_made, SDNN_ENGINE_ALL), st, done);
    if (o->test_layer >= 0 && o->test_layer < net->n) {
        sdnn_param p[SDNN_MAX_PARAMS_PER_LAYER];
        if (sdnn_layer_params(&net->layers[o->test_layer], p) > 0) {
            for (size_t e = 0; e < p[0].n; ++e) p[0].upd[e] = (float)(p[0].upd[e] * o->test_factor);
            note(out, "test hook: layer %d's %s updates multiplied by %g", o->test_layer,
                 p[0].what, o->test_factor);
        }
    }

    /* The reference: the same weights, the step's batch, the dropout masks
     * a host forward from the step's srand seed draws, and that forward's
     * activation pieces and maxpool choices (its float decisions at corners
     * and ties); every forward of the reference holds them.  A device
     * engine decided in its own float arithmetic (another summation order:
     * a pre-activation within rounding of 0 may land on the other side):
     * the decisions of its last forward replace the host's (pull
     * SDNN_ENGINE_FORWARD), so the reference differentiates the piece the
     * engine took.  It keeps only its last forward: with subdivisions > 1
     * the earlier ones are the host forward's decisions (said in a note). */
    int sub = rows / net->batch;
    SDNN_CHECKGOTO(sdnn_gradref_create(net, sub, &ref), st, done);
    masks = calloc((size_t)net->n, sizeof *masks);
    if (!masks) {
        st = SDNN_ERROR(SDNN_ERR_NOMEM, "gradcheck: no memory");
        goto done;
    }
    srand(draws);
    {
        size_t in = (size_t)d.X.cols, tr = (size_t)d.y.cols;
        for (int s = 0; s < sub; ++s) {
            for (int j = 0; j < net->batch; ++j) {
                memcpy(net->input + (size_t)j * in, d.X.vals[s * net->batch + j], in * sizeof(float));
                memcpy(net->truth + (size_t)j * tr, d.y.vals[s * net->batch + j], tr * sizeof(float));
            }
            SDNN_CHECKGOTO(sdnn_gradref_set_batch(ref, s, net->input, net->truth, NULL), st, done);
            net->train = 1;
            forward_network(net);
            SDNN_CHECKGOTO(sdnn_gradref_adopt(ref, s, net, NULL), st, done);
            if (s == sub - 1) {
                /* The engine's own forward of this subdivision: where it
                 * decided otherwise than the host's, its decision. */
                SDNN_CHECKGOTO(g_made->ops->pull(g_made, SDNN_ENGINE_FORWARD), st, done);
                SDNN_CHECKGOTO(sdnn_gradref_adopt(ref, s, net, &engine_changed), st, done);
            }
            for (int i = 0; i < net->n; ++i)
                masks[i] = net->layers[i].type == DROPOUT ? net->layers[i].rand : NULL;
            SDNN_CHECKGOTO(sdnn_gradref_set_batch(ref, s, NULL, NULL, (const float *const *)masks),
                           st, done);
        }
    }
    out->engine_decided_otherwise = (long)engine_changed;
    if (g_made->ops->mem(g_made) == SDNN_ENGINE_MEM_DEVICE)
        note(out, "the %s engine's own forward decided %zu activation piece%s and maxpool "
                  "choice%s otherwise than the host's float forward (values within rounding of "
                  "a kink or a tie): the reference differentiates the engine's",
             o->engine, engine_changed, engine_changed == 1 ? "" : "s",
             engine_changed == 1 ? "" : "s");
    if (sub > 1 && g_made->ops->mem(g_made) == SDNN_ENGINE_MEM_DEVICE)
        note(out, "the %s engine keeps its last forward only: subdivision %d's activation "
                  "pieces, maxpool choices, head decisions and dropout draws are its own, "
                  "subdivisions 1 to %d the host forward's (a pre-activation within rounding "
                  "of a kink may be differentiated on the other piece there)",
             o->engine, sub, sub - 1);
    gc_run g = { net, ref, sub, 0 };
    out->loss = g.base = sdnn_gradref_forward(ref, 0, 1);
    sdnn_gradref_backward(ref);
    if (yolo >= 0) {
        int near = 0, bad = sdnn_gradref_yolo_disagree(ref, &near);
        out->yolo_disagree = bad;
        int nyolo = 0;
        for (int i = 0; i < net->n; ++i) nyolo += heads[i] == HEAD_YOLO;
        note(out, "%s checked with their own loss (the reference's delta in double, "
                  "the float forward's decisions%s): %d element%s decided otherwise in double, "
                  "%d decision%s within 1e-4 of a threshold (ignore_thresh, truth_thresh, "
                  "thresh) or a tie of two slots",
             nyolo && nregion ? "[yolo] and [region] heads" : nregion ? "[region] heads"
                                                                       : "[yolo] heads",
             bad ? "; decided otherwise, a gradient differs by that term" : " agree", bad,
             bad == 1 ? "" : "s", near, near == 1 ? "" : "s");
    }

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
        out->layer[out->nlayers++].index = i;
    }
    /* From the last layer to the first: each central difference reruns
     * the layers from the perturbed one on, the earlier ones as they are. */
    for (int k = out->nlayers - 1; k >= 0; --k) {
        sdnn_gradcheck_layer *row = &out->layer[k];
        int i = row->index;
        type_label(&net->layers[i], row->type, sizeof row->type);
        row->fixed = cfg.fix_1x1_delta && sdnn_fix_1x1_needed(net, i);
        row->bn_n = reach_from(&g, i, reach, &row->reduction);
        row->threshold = SDNN_GRADCHECK_C * 0x1p-24 * sqrt(row->reduction);
        row->ref_threshold = SDNN_GRADCHECK_REF_TOL;
        SDNN_CHECKGOTO(check_layer(&g, i, o, &rs, row), st, done);
        row->pass = row->max_rel <= row->threshold && row->dir_rel <= row->dir_threshold &&
                    (row->samples == 0 || row->ref_median_rel <= row->ref_threshold);
        out->failed += !row->pass;
    }
done:
    if (st != SDNN_OK) sdnn_gradcheck_report_free(out);
    free_data(d);
    free(heads);
    free(reach);
    free(masks);
    sdnn_gradref_destroy(ref);
    if (t) sdnn_trainer_destroy(t);
    if (nets) sdnn_replicas_free(nets, 1);
    return st;
}

sdnn_status sdnn_gradcheck_file(const char *path, const sdnn_gradcheck_opts *o,
                                sdnn_gradcheck_report *out)
{
    memset(out, 0, sizeof *out);
    SDNN_CHECK(sdnn_check_readable(path)); /* a FIFO or a device: refused unopened */
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
    fprintf(f, "mode %s, fix_1x1_delta=%d (%d layer%s fixed), loss %.6g (reference, double)\n",
            r->mode_stock ? "stock" : "scalednn", r->fix_1x1_delta, r->fixed_layers,
            r->fixed_layers == 1 ? "" : "s", r->loss);
    fprintf(f, "%5s  %-30s %9s %7s %5s | %10s %9s | %10s %9s %9s %8s  %s\n", "layer", "type",
            "size", "samples", "kinks", "1: ref fd", "threshold", "2: engine", "threshold",
            "dirs", "cond", "verdict");
    for (int k = 0; k < r->nlayers; ++k) {
        const sdnn_gradcheck_layer *l = &r->layer[k];
        char type[48];
        snprintf(type, sizeof type, "%s%s", l->type, l->fixed ? " (fixed)" : "");
        fprintf(f, "%5d  %-30s %9zu %7d %5d | %10.2e %9.1e | %10.2e %9.2e %9.2e %8.3g  %s\n",
                l->index, type, l->size, l->samples, l->kinks, l->ref_median_rel,
                l->ref_threshold, l->max_rel, l->threshold, l->dir_rel, l->cond,
                l->pass ? "ok" : "FAIL");
    }
    if (r->notes[0]) fprintf(f, "%s", r->notes);
    fprintf(f, "Stage 1 (1: ref fd): the double reference's backward against its own central "
               "differences, the median relative error of the samples, threshold %.0e; samples "
               "whose one-sided slopes differ by more than %.0f%% straddle a kink (leaky/ReLU, "
               "maxpool ties) and are left out (kinks column).\n",
            SDNN_GRADCHECK_REF_TOL, 100 * SDNN_GRADCHECK_KINK);
    fprintf(f, "Stage 2 (2: engine): the engine's float gradient against the reference's, the "
               "worst over the layer's tensors of ||g - g_ref||/||g_ref|| and the sampled "
               "elements' median (dirs: the worst of %d random +-1 directions "
               "|<g - g_ref, d>|/||g_ref||, judged against %g x its tensor's threshold: "
               "Hoeffding, P(|<e,d>| > %g ||e||) <= 2 exp(-%g^2/2)); "
               "threshold %g x 2^-24 x sqrt(R) x cond, R the reduction lengths along the "
               "gradient's path, cond the tensor's ||E||/||g_ref||, E_e = |g_e| + "
               "sqrt(sum t^2) over the terms element e sums (the reference's; random-walk "
               "rounding: a float sum errs by ~u sqrt(R) E_e); the row shows "
               "the tensor with the smallest margin (float accumulation; no allowance for "
               "batch norm).\n",
            SDNN_GRADCHECK_DIRS, SDNN_GRADCHECK_DIR_T, SDNN_GRADCHECK_DIR_T,
            SDNN_GRADCHECK_DIR_T, SDNN_GRADCHECK_C);
    fprintf(f, "%d of %d layers above their threshold\n", r->failed, r->nlayers);
}
