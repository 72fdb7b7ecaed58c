/*
 * measure: the planner's measurements and agreement (see measure.h).
 */
#include "measure.h"
#include "clock.h"
#include "profile.h"
#include "splitmix.h"

#include <math.h>
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

/* The probe's buffers: nin inputs and one mean, from the engine or the
 * host. */
typedef struct probe_bufs {
    sdnn_engine *e;
    int nin;
    float **in;
    float *out;
} probe_bufs;

static void bufs_free(probe_bufs *b)
{
    if (b->in)
        for (int r = 0; r < b->nin; ++r) {
            if (!b->in[r]) continue;
            if (b->e) b->e->ops->buf_free(b->e, r, b->in[r]);
            else free(b->in[r]);
        }
    if (b->out) {
        if (b->e) b->e->ops->buf_free(b->e, 0, b->out);
        else free(b->out);
    }
    free(b->in);
}

static sdnn_status bufs_alloc(probe_bufs *b, size_t n)
{
    b->in = calloc((size_t)b->nin, sizeof *b->in);
    if (!b->in) return SDNN_ERROR(SDNN_ERR_NOMEM, "link probe: no memory");
    if (b->e) {
        /* Zero-filled by buf_alloc: the values do not change the time. */
        for (int r = 0; r < b->nin; ++r) SDNN_CHECK(b->e->ops->buf_alloc(b->e, r, n, &b->in[r]));
        return b->e->ops->buf_alloc(b->e, 0, n, &b->out);
    }
    uint64_t seed = 7;
    for (int r = 0; r < b->nin; ++r) {
        if (!(b->in[r] = malloc(n * sizeof(float))))
            return SDNN_ERROR(SDNN_ERR_NOMEM, "link probe: no memory");
        for (size_t i = 0; i < n; ++i)
            b->in[r][i] = (float)((sdnn_splitmix64_next(&seed) >> 40) * (1.0 / 16777216.0));
    }
    if (!(b->out = malloc(n * sizeof(float))))
        return SDNN_ERROR(SDNN_ERR_NOMEM, "link probe: no memory");
    return SDNN_OK;
}

sdnn_status sdnn_probe_link_on(sdnn_engine *e, sdnn_comm *c, int nin, int world, int iters,
                               sdnn_link *out, double *rms)
{
    static const size_t sizes[] = {16u << 10, 256u << 10, 1u << 20, 4u << 20};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    if (nin < 1 || world < 2)
        return SDNN_ERROR(SDNN_ERR_INVALID, "link probe: a world of %d (%d buffers x %d "
                          "processes) moves nothing", world, nin, c->size);
    if (iters < 1) iters = 1;
    double *tt = malloc((size_t)iters * sizeof *tt);
    probe_bufs b = {.e = e, .nin = nin};
    sdnn_status st = tt ? bufs_alloc(&b, sizes[NS - 1] / sizeof(float))
                        : SDNN_ERROR(SDNN_ERR_NOMEM, "link probe: no memory");
    double x[NS], y[NS];
    for (int s = 0; st == SDNN_OK && s < NS; ++s) {
        size_t n = sizes[s] / sizeof(float);
        for (int it = -2; st == SDNN_OK && it < iters; ++it) {
            double t0 = sdnn_now_s();
            st = sdnn_comm_allreduce_mean(c, (const float *const *)b.in, nin, b.out, n, NULL);
            if (it >= 0) tt[it] = sdnn_now_s() - t0;
        }
        x[s] = (double)sizes[s];
        if (st == SDNN_OK) y[s] = median(tt, iters);
    }
    if (st == SDNN_OK) st = sdnn_link_fit(x, y, NS, world, out);
    if (st == SDNN_OK) {
        snprintf(out->name, sizeof out->name, "%s", sdnn_comm_name(c));
        if (rms) {
            double err = 0;
            for (int s = 0; s < NS; ++s) {
                double pred = sdnn_cm_ring_allreduce_s(out, world, x[s]);
                err += (pred - y[s]) * (pred - y[s]) / (y[s] * y[s]);
            }
            *rms = sqrt(err / NS);
        }
    }
    bufs_free(&b);
    free(tt);
    return st;
}

sdnn_status sdnn_probe_link(sdnn_comm *c, int nin, int iters, sdnn_link *out, double *rms)
{
    return sdnn_probe_link_on(NULL, c, nin, nin * c->size, iters, out, rms);
}

/* v[0..n) on every process = process 0's, through floats (process 0 keeps
 * the rounded values too). */
static sdnn_status agree_rank0(sdnn_comm *host, double *v, size_t n)
{
    if (!host || host->size < 2) return SDNN_OK;
    float f[8];
    if (n > sizeof f / sizeof f[0]) return SDNN_ERROR(SDNN_ERR_INTERNAL, "agree: %zu values", n);
    for (size_t i = 0; i < n; ++i) f[i] = (float)v[i];
    SDNN_CHECK(sdnn_comm_broadcast(host, f, n));
    for (size_t i = 0; i < n; ++i) v[i] = (double)f[i];
    return SDNN_OK;
}

sdnn_status sdnn_measure_for_plan(sdnn_engine *e, sdnn_comm *dev, sdnn_comm *host, int nrep,
                                  int world, const sdnn_config *cfg, sdnn_plan_measured *out)
{
    memset(out, 0, sizeof *out);
    char list[sizeof cfg->compress_allow + sizeof cfg->compress];
    const char *names[SDNN_PLAN_MAX_CODECS];
    int ef[SDNN_PLAN_MAX_CODECS], n = 0;
    SDNN_CHECK(sdnn_autoplan_codec_names(cfg, list, sizeof list, names, ef,
                                         SDNN_PLAN_MAX_CODECS, &n));
    for (int i = 0; i < n; ++i) {
        const sdnn_codec_ops *c = sdnn_codec_find(names[i]);
        if (!c) return SDNN_ERROR(SDNN_ERR_INVALID, "unknown codec %s", names[i]);
        sdnn_codec_model m;
        if (c == &sdnn_codec_none) {
            m = sdnn_codec_model_none();
        } else {
            sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
            p.int8_chunk = cfg->int8_chunk;
            p.stochastic = cfg->stochastic_rounding;
            p.topk_ratio = cfg->topk_ratio;
            SDNN_CHECK(sdnn_probe_codec(c, &p, (size_t)1 << 18, 3, &m));
            m.ef = ef[i];
            /* The collectives the exchange's comm runs this codec by
             * besides collective.c's way (an engine's comm over NCCL: the
             * native half / bf16 allreduce), so the plan prices what runs. */
            m.colls = sdnn_comm_offers(dev, c);
            double v[3] = {m.ratio, m.enc_Bps, m.dec_Bps};
            SDNN_CHECK(agree_rank0(host, v, 3));
            m.ratio = v[0];
            m.enc_Bps = v[1];
            m.dec_Bps = v[2];
        }
        out->ops[i] = c;
        out->models[i] = m;
    }
    out->ncodecs = n;
    if (!sdnn_autoplan_needs_link(cfg, world)) return SDNN_OK;
    double rms = 0;
    SDNN_CHECK(sdnn_probe_link_on(e, dev, nrep, world, 5, &out->link, &rms));
    snprintf(out->link.name, sizeof out->link.name, "probed %s", sdnn_comm_name(host ? host : dev));
    double v[2] = {out->link.alpha_s, out->link.beta_Bps};
    SDNN_CHECK(agree_rank0(host, v, 2));
    out->link.alpha_s = v[0];
    out->link.beta_Bps = v[1];
    out->have_link = 1;
    return SDNN_OK;
}

static sdnn_status agree_broadcast(void *ctx, float *buf, size_t n)
{
    return sdnn_comm_broadcast(ctx, buf, n);
}

static sdnn_status agree_mean(void *ctx, float *buf, size_t n)
{
    const float *in = buf;
    return sdnn_comm_allreduce_mean(ctx, &in, 1, buf, n, NULL);
}

sdnn_plan_agree sdnn_plan_agree_over(sdnn_comm *c)
{
    sdnn_plan_agree a = {.procs = c ? c->size : 1, .rank = c ? c->rank : 0, .ctx = c,
                         .broadcast = agree_broadcast, .mean = agree_mean};
    return a;
}
