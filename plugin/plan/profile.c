/*
 * profile: layer timings, codec rates, profile files (see profile.h; the
 * link is measured by the step, plugin/step/measure.c).
 *
 * The layer loop follows what Darknet's forward_network, backward_network
 * and update_network do between layers (from their behaviour; no Darknet
 * code is copied): forward works on a copy of the network struct whose
 * `input` becomes each layer's output (and `truth` the output of a layer
 * that carries truth), with the layer's delta cleared first; backward walks
 * from the last layer down, stops at a stopbackward layer, and hands layer
 * i the output and delta of layer i-1 as input/delta (layer 0 gets the
 * network's own); `index` is the layer's index in both.
 */
#include "profile.h"
#include "clock.h"
#include "config.h"
#include "hooks.h"
#include "replicas.h"
#include "saveio.h"
#include "splitmix.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n-1] (sorts v). */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng_next(uint64_t *s) { return sdnn_splitmix64_next(s); }

static void fill_random(float *x, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; ++i)
        x[i] = (float)((rng_next(seed) >> 40) * (1.0 / 16777216.0));
}

/* ---- layers ------------------------------------------------------------------ */

/* One pass; t[3*i + 0/1/2] = forward/backward/update seconds of layer i. */
static void timed_pass(network *netp, int first, double *t)
{
    network net = *netp;
    for (int i = 0; i < net.n; ++i) {
        layer l = net.layers[i];
        net.index = i;
        double t0 = sdnn_now_s();
        if (l.delta) memset(l.delta, 0, (size_t)l.outputs * (size_t)l.batch * sizeof(float));
        l.forward(l, net);
        t[3 * i] = sdnn_now_s() - t0;
        net.input = l.output;
        if (l.truth) net.truth = l.output;
    }

    network orig = *netp, bnet = *netp;
    for (int i = netp->n - 1; i >= first; --i) {
        layer l = netp->layers[i];
        if (i == 0) {
            bnet = orig;
        } else {
            bnet.input = netp->layers[i - 1].output;
            bnet.delta = netp->layers[i - 1].delta;
        }
        bnet.index = i;
        double t0 = sdnn_now_s();
        l.backward(l, bnet);
        t[3 * i + 1] = sdnn_now_s() - t0;
    }

    /* Learning rate 0: the update does all its work and moves no weight. */
    update_args a;
    memset(&a, 0, sizeof a);
    a.batch = netp->batch * netp->subdivisions;
    a.learning_rate = 0;
    a.momentum = netp->momentum;
    a.decay = netp->decay;
    a.adam = netp->adam;
    a.B1 = netp->B1;
    a.B2 = netp->B2;
    a.eps = netp->eps;
    a.t = 1;
    for (int i = 0; i < netp->n; ++i) {
        layer l = netp->layers[i];
        if (!l.update) continue;
        double t0 = sdnn_now_s();
        l.update(l, a);
        t[3 * i + 2] = sdnn_now_s() - t0;
    }
}

sdnn_status sdnn_profile_network(network *net, const sdnn_profile_opts *o,
                                 sdnn_cost_profile *out)
{
    memset(out, 0, sizeof *out);
    if (o->iters < 1 || o->warmup < 0)
        return SDNN_ERROR(SDNN_ERR_INVALID, "profile: iters=%d warmup=%d (expected >= 1, >= 0)",
                          o->iters, o->warmup);
    int n = net->n;
    /* Layers at or before the last stopbackward run no backward. */
    int first = 0;
    for (int i = 0; i < n; ++i)
        if (net->layers[i].stopbackward) first = i + 1;

    SDNN_CHECK(sdnn_cost_profile_alloc(n, out));
    out->batch = net->batch;
    out->subdivisions = net->subdivisions > 0 ? net->subdivisions : 1;
    for (int i = 0; i < n; ++i) {
        sdnn_param prm[SDNN_MAX_PARAMS_PER_LAYER];
        const layer *l = &net->layers[i];
        int np = sdnn_layer_params(l, prm);
        if (np < 0) {
            sdnn_cost_profile_free(out);
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "profile: layer %d (%s) has parameters "
                              "scalednn cannot view", i, sdnn_layer_type_name(l->type));
        }
        snprintf(out->layer[i].type, sizeof out->layer[i].type, "%s",
                 sdnn_layer_type_name(l->type));
        out->layer[i].tensors = np;
        if (i < first) continue;
        for (int j = 0; j < np; ++j) out->layer[i].bytes += (double)(prm[j].n * sizeof(float));
    }

    double *t = calloc((size_t)o->iters * (size_t)n * 3, sizeof *t);
    double *col = malloc((size_t)o->iters * sizeof *col);
    if (!t || !col) {
        free(t);
        free(col);
        sdnn_cost_profile_free(out);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "profile: no memory for %d layers", n);
    }
    /* Training (with the default fix_1x1_delta=1) runs the 1x1 delta fix's
     * wrapper on the layers that need it, its convolutions where cpu_conv=
     * puts them (oneDNN by default where built), and a first layer that
     * writes its input's delta gets a scratch; so does the profile, unless
     * the caller hooked the network itself. */
    sdnn_config conv = SDNN_CONFIG_INIT;
    if (o->cpu_conv) snprintf(conv.cpu_conv, sizeof conv.cpu_conv, "%s", o->cpu_conv);
    int onednn = sdnn_config_cpu_conv_onednn(&conv);
    int hook = (onednn || sdnn_fix_1x1_count(net) > 0 || sdnn_first_delta_needed(net)) &&
               !sdnn_hooks_installed(net);
    if (hook) {
        sdnn_status hs = sdnn_hooks_install(net, 0, SDNN_FIX_1X1 | (onednn ? SDNN_HOOK_ONEDNN : 0));
        if (hs != SDNN_OK) {
            free(t);
            free(col);
            sdnn_cost_profile_free(out);
            return hs;
        }
    }
    uint64_t seed = o->seed;
    int train = net->train;
    net->train = 1;
    for (int it = -o->warmup; it < o->iters; ++it) {
        size_t nin = (size_t)net->inputs * (size_t)net->batch;
        if (o->input) memcpy(net->input, o->input, nin * sizeof(float));
        else fill_random(net->input, nin, &seed);
        double *row = t + (size_t)(it < 0 ? 0 : it) * (size_t)n * 3;
        memset(row, 0, (size_t)n * 3 * sizeof *row);
        timed_pass(net, first, row);
    }
    net->train = train;
    if (hook) sdnn_hooks_uninstall(net);
    for (int i = 0; i < n; ++i) {
        double *dst[3] = {&out->layer[i].fwd_s, &out->layer[i].bwd_s, &out->layer[i].upd_s};
        for (int k = 0; k < 3; ++k) {
            for (int it = 0; it < o->iters; ++it)
                col[it] = t[((size_t)it * (size_t)n + (size_t)i) * 3 + (size_t)k];
            *dst[k] = median(col, o->iters);
        }
    }
    free(t);
    free(col);
    return SDNN_OK;
}

/* ---- codec rates ------------------------------------------------------------ */

sdnn_status sdnn_probe_codec(const sdnn_codec_ops *c, const sdnn_codec_params *p, size_t n,
                             int iters, sdnn_codec_model *out)
{
    if (c == &sdnn_codec_none || strcmp(c->name, "none") == 0) {
        *out = sdnn_codec_model_none();
        return SDNN_OK;
    }
    if (n < 1) n = 1;
    if (iters < 1) iters = 1;
    float *x = malloc(n * sizeof *x), *y = calloc(n, sizeof *y);
    size_t enc = c->encoded_size(p, n);
    void *buf = malloc(enc ? enc : 1);
    double *te = malloc((size_t)iters * sizeof *te), *td = malloc((size_t)iters * sizeof *td);
    if (!x || !y || !buf || !te || !td) {
        free(x), free(y), free(buf), free(te), free(td);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "codec probe: no memory for %zu floats", n);
    }
    uint64_t seed = 11;
    for (size_t i = 0; i < n; ++i)
        x[i] = (float)((double)(rng_next(&seed) >> 11) * 0x1p-53 - 0.5) * 1e-3f;
    for (int it = -1; it < iters; ++it) {
        double t0 = sdnn_now_s();
        c->encode(p, x, n, buf, (uint64_t)(it + 1));
        double t1 = sdnn_now_s();
        if (c->dense) c->decode(p, buf, n, y);
        else c->accumulate(p, buf, n, y);
        double t2 = sdnn_now_s();
        if (it >= 0) {
            te[it] = t1 - t0;
            td[it] = t2 - t1;
        }
    }
    double bytes = (double)(n * sizeof(float));
    double me = median(te, iters), md = median(td, iters);
    *out = sdnn_codec_model_of(c, p, me > 0 ? bytes / me : 0, md > 0 ? bytes / md : 0);
    free(x), free(y), free(buf), free(te), free(td);
    return SDNN_OK;
}

/* ---- files -------------------------------------------------------------------- */

sdnn_status sdnn_profile_save(const sdnn_cost_profile *p, const char *path)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return SDNN_ERROR(SDNN_ERR_NOMEM, "profile %s: no memory", path);
    fprintf(f, "# scalednn profile batch=%d subdivisions=%d\n", p->batch, p->subdivisions);
    fprintf(f, "layer,type,fwd_s,bwd_s,upd_s,bytes,tensors\n");
    for (int i = 0; i < p->n; ++i) {
        const sdnn_layer_cost *l = &p->layer[i];
        fprintf(f, "%d,%s,%.9g,%.9g,%.9g,%.0f,%d\n", i, l->type[0] ? l->type : "-", l->fwd_s,
                l->bwd_s, l->upd_s, l->bytes, l->tensors);
    }
    if (fclose(f) != 0) {
        free(text);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "profile %s: no memory", path);
    }
    sdnn_status st = sdnn_write_file_atomic(path, text, len);
    free(text);
    return st;
}

static int is_time(double v) { return v >= 0 && isfinite(v); }

sdnn_status sdnn_profile_load(const char *path, sdnn_cost_profile *out)
{
    memset(out, 0, sizeof *out);
    if (sdnn_check_readable(path) != SDNN_OK)
        return SDNN_ERROR(SDNN_ERR_IO, "profile: %s", sdnn_last_error());
    FILE *f = fopen(path, "r");
    if (!f) return SDNN_ERROR(SDNN_ERR_IO, "profile %s: %s", path, strerror(errno));
    char line[512];
    int batch = 0, subdiv = 0, lineno = 0, cap = 0, n = 0, header = 0;
    sdnn_layer_cost *layers = NULL;
    sdnn_status st = SDNN_OK;
    while (fgets(line, sizeof line, f)) {
        ++lineno;
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '\0') continue;
        if (line[0] == '#') {   /* comments; one of them may carry the header values */
            sscanf(line, "# scalednn profile batch=%d subdivisions=%d", &batch, &subdiv);
            continue;
        }
        if (!header) {
            if (strcmp(line, "layer,type,fwd_s,bwd_s,upd_s,bytes,tensors") != 0) {
                st = SDNN_ERROR(SDNN_ERR_INVALID, "%s:%d: expected the header "
                                "layer,type,fwd_s,bwd_s,upd_s,bytes,tensors", path, lineno);
                goto done;
            }
            header = 1;
            continue;
        }
        sdnn_layer_cost c;
        memset(&c, 0, sizeof c);
        int idx, used = 0;
        if (sscanf(line, "%d,%15[^,],%lf,%lf,%lf,%lf,%d%n", &idx, c.type, &c.fwd_s, &c.bwd_s,
                   &c.upd_s, &c.bytes, &c.tensors, &used) != 7 || line[used] != '\0') {
            st = SDNN_ERROR(SDNN_ERR_INVALID, "%s:%d: expected layer,type,fwd_s,bwd_s,upd_s,"
                            "bytes,tensors", path, lineno);
            goto done;
        }
        if (idx != n) {
            st = SDNN_ERROR(SDNN_ERR_INVALID, "%s:%d: layer %d where layer %d was expected",
                            path, lineno, idx, n);
            goto done;
        }
        if (!is_time(c.fwd_s) || !is_time(c.bwd_s) || !is_time(c.upd_s) || !is_time(c.bytes) ||
            c.bytes != floor(c.bytes) || c.tensors < 0) {
            st = SDNN_ERROR(SDNN_ERR_INVALID, "%s:%d: times and bytes must be >= 0 (bytes a "
                            "whole number)", path, lineno);
            goto done;
        }
        if (n == cap) {
            int ncap = cap ? 2 * cap : 64;
            sdnn_layer_cost *nl = realloc(layers, (size_t)ncap * sizeof *nl);
            if (!nl) {
                st = SDNN_ERROR(SDNN_ERR_NOMEM, "profile %s: no memory", path);
                goto done;
            }
            layers = nl;
            cap = ncap;
        }
        layers[n++] = c;
    }
    if (ferror(f)) {
        st = SDNN_ERROR(SDNN_ERR_IO, "profile %s: read error", path);
        goto done;
    }
    if (batch < 1 || subdiv < 1) {
        st = SDNN_ERROR(SDNN_ERR_INVALID, "%s: no line \"# scalednn profile batch=B "
                        "subdivisions=S\" (B, S >= 1)", path);
        goto done;
    }
    if (n == 0) {
        st = SDNN_ERROR(SDNN_ERR_INVALID, "%s: no layers", path);
        goto done;
    }
    SDNN_CHECKGOTO(sdnn_cost_profile_alloc(n, out), st, done);
    memcpy(out->layer, layers, (size_t)n * sizeof *layers);
    out->batch = batch;
    out->subdivisions = subdiv;
done:
    free(layers);
    fclose(f);
    return st;
}
