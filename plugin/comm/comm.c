/*
 * comm: backend registry and the reference averaging kernel.  A new backend
 * adds its ops table to `registry`; callers only ever see sdnn_comm_ops.
 */
#include "comm.h"
#include "collective.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sdnn_comm_ops *const registry[] = {
    &sdnn_comm_local_ops,
    &sdnn_comm_mpi_ops,
    &sdnn_comm_nccl_boot_ops,
};

static char available_names[128];
static pthread_once_t available_once = PTHREAD_ONCE_INIT;

static void list_available(void)
{
    size_t len = 0;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; ++i) {
        if (!registry[i]->available()) continue;
        int w = snprintf(available_names + len, sizeof available_names - len, "%s%s",
                         len ? ", " : "", registry[i]->name);
        if (w < 0 || (size_t)w >= sizeof available_names - len) break;
        len += (size_t)w;
    }
}

const char *sdnn_comm_available_names(void)
{
    pthread_once(&available_once, list_available);
    return available_names;
}

static char known_names[128];
static pthread_once_t known_once = PTHREAD_ONCE_INIT;

static void list_known(void)
{
    size_t len = 0;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; ++i) {
        const char *name = registry[i]->name;
        int w = snprintf(known_names + len, sizeof known_names - len, "%s%s", len ? ", " : "",
                         name);
        if (w < 0 || (size_t)w >= sizeof known_names - len) break;
        len += (size_t)w;
    }
}

static char built_names[128];
static pthread_once_t built_once = PTHREAD_ONCE_INIT;

static void list_built(void)
{
    size_t len = 0;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; ++i) {
        if (!registry[i]->built) continue;
        int w = snprintf(built_names + len, sizeof built_names - len, "%s%s", len ? ", " : "",
                         registry[i]->name);
        if (w < 0 || (size_t)w >= sizeof built_names - len) break;
        len += (size_t)w;
    }
}

const char *sdnn_comm_built_names(void)
{
    pthread_once(&built_once, list_built);
    return built_names;
}

const char *sdnn_comm_names(void)
{
    pthread_once(&known_once, list_known);
    return known_names;
}

int sdnn_comm_known(const char *name)
{
    if (!name) return -1;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; ++i)
        if (strcmp(registry[i]->name, name) == 0) return registry[i]->built ? 1 : 0;
    return -1;
}

const char *sdnn_comm_lacks(const char *name)
{
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; ++i)
        if (name && strcmp(registry[i]->name, name) == 0)
            return registry[i]->built || !registry[i]->unavailable_reason
                       ? NULL
                       : registry[i]->unavailable_reason();
    return NULL;
}

sdnn_status sdnn_comm_open(const char *name, sdnn_comm **out)
{
    const sdnn_comm_opts opts = SDNN_COMM_OPTS_INIT;
    return sdnn_comm_open_opts(name, &opts, out);
}

sdnn_status sdnn_comm_open_opts(const char *name, const sdnn_comm_opts *opts, sdnn_comm **out)
{
    *out = NULL;
    if (!(opts->timeout_s > 0))
        return SDNN_ERROR(SDNN_ERR_INVALID, "comm backend %s: timeout %g s: must be > 0", name,
                          opts->timeout_s);
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; ++i) {
        const sdnn_comm_ops *ops = registry[i];
        if (strcmp(ops->name, name) != 0) continue;
        if (!ops->available()) {
            const char *why = ops->unavailable_reason ? ops->unavailable_reason() : NULL;
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                              "comm backend %s is not available in this build%s%s (available: %s)",
                              name, why ? ": " : "", why ? why : "", sdnn_comm_available_names());
        }
        sdnn_comm *c = calloc(1, sizeof *c);
        if (!c) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for comm backend");
        c->ops = ops;
        c->rank = 0;
        c->size = 1;
        c->timeout_s = opts->timeout_s;
        sdnn_status st = ops->init(c);
        if (st != SDNN_OK) {
            free(c);
            return st;
        }
        *out = c;
        return SDNN_OK;
    }
    return SDNN_ERROR(SDNN_ERR_INVALID, "unknown comm backend %s (available: %s)", name,
                      sdnn_comm_available_names());
}

void sdnn_comm_close(sdnn_comm *c)
{
    if (!c) return;
    if (c->ops && c->ops->destroy) c->ops->destroy(c);
    free(c);
}

const char *sdnn_comm_name(const sdnn_comm *c) { return c->ops->name; }

int sdnn_comm_hierarchical(const sdnn_comm *c) { return c->ops->hierarchical; }

int sdnn_comm_has_coded(const sdnn_comm *c) { return c->ops->allreduce_mean_coded != NULL; }

unsigned sdnn_comm_offers(const sdnn_comm *c, const sdnn_codec_ops *codec)
{
    return c && codec && c->ops->offers ? c->ops->offers(c, codec) : 0;
}

void sdnn_comm_announce(sdnn_comm *c, const sdnn_codec_ops *const *codec, const size_t *n, int nb,
                        const sdnn_codec_params *p, int plan)
{
    if (c && c->ops->announce && nb > 0) c->ops->announce(c, codec, n, nb, p, plan);
}

sdnn_status sdnn_comm_set_link(sdnn_comm *c, const struct sdnn_link *link, const char *how)
{
    if (!c || !c->ops->set_link) return SDNN_OK;
    if (!link) return SDNN_ERROR(SDNN_ERR_INVALID, "comm %s: set_link without a link",
                                 sdnn_comm_name(c));
    return c->ops->set_link(c, link, how ? how : "given");
}

/* The world's replicas: every process holds nin (the layout agrees). */
static int world_replicas(const sdnn_comm *c, int nin)
{
    return (c->size > 0 ? c->size : 1) * (nin > 0 ? nin : 1);
}

/* Bytes each replica sends (collective.h's one definition), rounded to a
 * byte: the mean over this process's nin replicas of what they sent. */
static size_t per_replica(size_t raw, int nin)
{
    const size_t k = (size_t)(nin > 0 ? nin : 1);
    return (raw + k / 2) / k;
}

sdnn_status sdnn_comm_allreduce_mean(sdnn_comm *c, const float *const *in, int nin,
                                     float *out, size_t n, size_t *wire)
{
    if (wire) *wire = 0;
    SDNN_CHECK(c->ops->allreduce_mean(c, in, nin, out, n));
    if (wire)
        *wire = (size_t)(sdnn_wire_bytes(SDNN_WIRE_ALLREDUCE, world_replicas(c, nin),
                                         (double)(n * sizeof(float))) + 0.5);
    return SDNN_OK;
}

sdnn_status sdnn_comm_allreduce_mean_coded(sdnn_comm *c, const sdnn_codec_ops *codec,
                                           const sdnn_codec_params *p, uint64_t stream,
                                           const float *const *in, int nin,
                                           float *const *out, size_t n, size_t *wire)
{
    if (wire) *wire = 0;
    if (!c->ops->allreduce_mean_coded)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "backend %s has no compressed allreduce",
                          c->ops->name);
    size_t raw = 0;
    SDNN_CHECK(c->ops->allreduce_mean_coded(c, codec, p, stream, in, nin, out, n, &raw));
    if (!wire) return SDNN_OK;
    const int W = world_replicas(c, nin);
    if (c->ops->hierarchical && nin > 1) {
        /* The local stage is a memory mean: count the flat world's coded
         * collective so that every layout of W replicas reports one figure
         * (the processes themselves sent `raw`, 2(P-1)/P of the coded mean). */
        size_t all = sdnn_coded_wire_bytes(codec, p, n, W);
        *wire = per_replica(all, W);
    } else {
        *wire = per_replica(raw, nin);
    }
    return SDNN_OK;
}

sdnn_status sdnn_comm_broadcast(sdnn_comm *c, float *buf, size_t n)
{
    return c->ops->broadcast(c, buf, n);
}

sdnn_status sdnn_comm_central_mean(sdnn_comm *c, float *buf, size_t n, size_t *wire)
{
    if (wire) *wire = 0;
    if (!c->ops->central_mean)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "backend %s has no central mean", c->ops->name);
    size_t raw = 0;
    SDNN_CHECK(c->ops->central_mean(c, buf, n, &raw));
    /* Each process's mean over the processes (process 0 sends size-1 times
     * what the others send). */
    if (wire)
        *wire = (size_t)(sdnn_wire_bytes(SDNN_WIRE_CENTRAL, c->size,
                                         (double)(n * sizeof(float))) + 0.5);
    return SDNN_OK;
}

sdnn_status sdnn_comm_barrier(sdnn_comm *c) { return c->ops->barrier(c); }

/* Element kernels: restrict lets the compiler vectorise them, and the
 * clones pick AVX2 where the processor has it (no FMA: the results must not
 * depend on the machine). */
#define SDNN_KERNEL __attribute__((target_clones("avx2", "default")))
SDNN_KERNEL static void k_add(float *restrict o, const float *restrict a, const float *restrict b, size_t n)
{
    for (size_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
}

SDNN_KERNEL static void k_add_scale(float *restrict o, const float *restrict a, const float *restrict b,
                        float s, size_t n)
{
    for (size_t i = 0; i < n; ++i) o[i] = (a[i] + b[i]) * s;
}

SDNN_KERNEL static void k_acc(float *restrict o, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; ++i) o[i] += x[i];
}

SDNN_KERNEL static void k_acc_scale(float *restrict o, const float *restrict x, float s, size_t n)
{
    for (size_t i = 0; i < n; ++i) o[i] = (o[i] + x[i]) * s;
}

/* Sums in blocks so each block of `out` stays in cache while the inputs
 * stream through it.  Per element the additions run in[0] + in[1], then
 * in[2], ... and the scale comes last, so the result does not depend on the
 * block size or on out aliasing in[0]. */
void sdnn_mean_buffers(const float *const *in, int nin, float *out, size_t n)
{
    enum { BLOCK = 2048 };
    if (nin == 1) {
        if (out != in[0]) memcpy(out, in[0], n * sizeof(float));
        return;
    }
    const float inv = 1.0f / (float)nin;
    const int alias = out == in[0];
    for (size_t lo = 0; lo < n; lo += BLOCK) {
        size_t len = lo + BLOCK < n ? BLOCK : n - lo;
        float *o = out + lo;
        if (nin == 2) {
            if (alias) k_acc_scale(o, in[1] + lo, inv, len);
            else k_add_scale(o, in[0] + lo, in[1] + lo, inv, len);
            continue;
        }
        if (alias) k_acc(o, in[1] + lo, len);
        else k_add(o, in[0] + lo, in[1] + lo, len);
        for (int r = 2; r < nin - 1; ++r) k_acc(o, in[r] + lo, len);
        k_acc_scale(o, in[nin - 1] + lo, inv, len);
    }
}
