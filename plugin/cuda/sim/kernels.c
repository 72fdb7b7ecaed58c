/*
 * sim/kernels: the element kernels of dev.h (sdnn_k_*) on a simulated
 * device.  Each call translates its device pointers when it is launched
 * (so a host pointer, a freed buffer or another device's buffer is an
 * error naming the call) and queues a loop over the per-element formulas
 * of ops.h on the stream kernels.cu would use; the mean is the reference
 * kernel itself (sdnn_mean_buffers), so it is bit-identical to it by
 * construction.
 */
#include "sim.h"

#include "comm.h"
#include "ops.h"

#include <math.h>
#include <string.h>

#define F(n) ((n) * sizeof(float))

typedef struct k_arg {
    float *y;
    const float *a, *b;
    size_t n;
    float v;
    int act;
    size_t *bad;        /* count_nonfinite: the caller's result (host) */
} k_arg;

static sdnn_status run_fill(void *p)
{
    k_arg *k = p;
    for (size_t i = 0; i < k->n; ++i) k->y[i] = k->v;
    return SDNN_OK;
}

static sdnn_status run_copy(void *p)
{
    k_arg *k = p;
    memmove(k->y, k->a, F(k->n));
    return SDNN_OK;
}

static sdnn_status run_axpy(void *p)
{
    k_arg *k = p;
    for (size_t i = 0; i < k->n; ++i) k->y[i] = SDNN_ADD(k->y[i], SDNN_MUL(k->v, k->a[i]));
    return SDNN_OK;
}

static sdnn_status run_activate(void *p)
{
    k_arg *k = p;
    for (size_t i = 0; i < k->n; ++i) k->y[i] = sdnn_activate(k->y[i], k->act);
    return SDNN_OK;
}

static sdnn_status run_gradient(void *p)
{
    k_arg *k = p;
    for (size_t i = 0; i < k->n; ++i) k->y[i] *= sdnn_gradient(k->a[i], k->act);
    return SDNN_OK;
}

static sdnn_status run_sub(void *p)
{
    k_arg *k = p;
    for (size_t i = 0; i < k->n; ++i) k->y[i] = SDNN_SUB(k->a[i], k->b[i]);
    return SDNN_OK;
}

static sdnn_status run_add(void *p)
{
    k_arg *k = p;
    for (size_t i = 0; i < k->n; ++i) k->y[i] = SDNN_ADD(k->a[i], k->b[i]);
    return SDNN_OK;
}

static sdnn_status run_scale(void *p)
{
    k_arg *k = p;
    for (size_t i = 0; i < k->n; ++i) k->y[i] = SDNN_MUL(k->y[i], k->v);
    return SDNN_OK;
}

static sdnn_status run_nonfinite(void *p)
{
    k_arg *k = p;
    size_t bad = 0;
    for (size_t i = 0; i < k->n; ++i) bad += !isfinite(k->a[i]);
    *k->bad = bad;
    return SDNN_OK;
}

/* Translate a device pointer of c for call `name` (into a local void *). */
#define DPTR(c, p, bytes, name, out)                                                 \
    do {                                                                             \
        void *h_;                                                                    \
        SDNN_CHECK(sdnn_sim_dptr((c), (p), (bytes), (name), &h_));                    \
        (out) = h_;                                                                  \
    } while (0)

sdnn_status sdnn_k_fill(sdnn_dctx *c, float *x, size_t n, float v)
{
    if (!n) return SDNN_OK;
    k_arg k = {0};
    DPTR(c, x, F(n), "sdnn_k_fill", k.y);
    k.n = n;
    k.v = v;
    return sdnn_sim_launch(c, SDNN_STREAM_COMPUTE, "sdnn_k_fill", run_fill, &k, sizeof k);
}

sdnn_status sdnn_k_copy(sdnn_dctx *c, float *y, const float *x, size_t n)
{
    if (!n || x == y) return SDNN_OK;
    k_arg k = {0};
    DPTR(c, y, F(n), "sdnn_k_copy", k.y);
    DPTR(c, x, F(n), "sdnn_k_copy", k.a);
    k.n = n;
    return sdnn_sim_launch(c, SDNN_STREAM_COMPUTE, "sdnn_k_copy", run_copy, &k, sizeof k);
}

sdnn_status sdnn_k_axpy(sdnn_dctx *c, size_t n, float a, const float *x, float *y)
{
    if (!n) return SDNN_OK;
    k_arg k = {0};
    DPTR(c, y, F(n), "sdnn_k_axpy", k.y);
    DPTR(c, x, F(n), "sdnn_k_axpy", k.a);
    k.n = n;
    k.v = a;
    return sdnn_sim_launch(c, SDNN_STREAM_COMPUTE, "sdnn_k_axpy", run_axpy, &k, sizeof k);
}

sdnn_status sdnn_k_activate(sdnn_dctx *c, float *x, size_t n, int act)
{
    if (!n || act == SDNN_ACT_LINEAR) return SDNN_OK;
    k_arg k = {0};
    DPTR(c, x, F(n), "sdnn_k_activate", k.y);
    k.n = n;
    k.act = act;
    return sdnn_sim_launch(c, SDNN_STREAM_COMPUTE, "sdnn_k_activate", run_activate, &k, sizeof k);
}

sdnn_status sdnn_k_gradient(sdnn_dctx *c, const float *y, size_t n, int act, float *delta)
{
    if (!n || act == SDNN_ACT_LINEAR) return SDNN_OK;
    k_arg k = {0};
    DPTR(c, delta, F(n), "sdnn_k_gradient", k.y);
    DPTR(c, y, F(n), "sdnn_k_gradient", k.a);
    k.n = n;
    k.act = act;
    return sdnn_sim_launch(c, SDNN_STREAM_COMPUTE, "sdnn_k_gradient", run_gradient, &k, sizeof k);
}

sdnn_status sdnn_k_sub(sdnn_dctx *c, int stream, float *y, const float *a, const float *b,
                       size_t n)
{
    if (!n) return SDNN_OK;
    k_arg k = {0};
    DPTR(c, y, F(n), "sdnn_k_sub", k.y);
    DPTR(c, a, F(n), "sdnn_k_sub", k.a);
    DPTR(c, b, F(n), "sdnn_k_sub", k.b);
    k.n = n;
    return sdnn_sim_launch(c, stream, "sdnn_k_sub", run_sub, &k, sizeof k);
}

sdnn_status sdnn_k_add(sdnn_dctx *c, int stream, float *y, const float *a, const float *b,
                       size_t n)
{
    if (!n) return SDNN_OK;
    k_arg k = {0};
    DPTR(c, y, F(n), "sdnn_k_add", k.y);
    DPTR(c, a, F(n), "sdnn_k_add", k.a);
    DPTR(c, b, F(n), "sdnn_k_add", k.b);
    k.n = n;
    return sdnn_sim_launch(c, stream, "sdnn_k_add", run_add, &k, sizeof k);
}

sdnn_status sdnn_k_scale(sdnn_dctx *c, int stream, float *x, size_t n, float s)
{
    if (!n) return SDNN_OK;
    k_arg k = {0};
    DPTR(c, x, F(n), "sdnn_k_scale", k.y);
    k.n = n;
    k.v = s;
    return sdnn_sim_launch(c, stream, "sdnn_k_scale", run_scale, &k, sizeof k);
}

typedef struct check_arg {
    float *y;
    const float *a, *b;
    size_t n;
    unsigned long long *first;
} check_arg;

static sdnn_status run_sub_check(void *p)
{
    check_arg *k = p;
    unsigned long long mine = ~0ull;
    for (size_t i = 0; i < k->n; ++i) {
        float v = k->b ? SDNN_SUB(k->a[i], k->b[i]) : k->a[i];
        if (k->y) k->y[i] = v;
        if (!isfinite(v) && mine == ~0ull) mine = (unsigned long long)i;
    }
    if (mine < *k->first) *k->first = mine;
    return SDNN_OK;
}

sdnn_status sdnn_k_sub_check(sdnn_dctx *c, int stream, float *y, const float *a, const float *b,
                             size_t n, unsigned long long *first)
{
    if (!n) return SDNN_OK;
    check_arg k = {0};
    if (y) DPTR(c, y, F(n), "sdnn_k_sub_check", k.y);
    DPTR(c, a, F(n), "sdnn_k_sub_check", k.a);
    if (b) DPTR(c, b, F(n), "sdnn_k_sub_check", k.b);
    DPTR(c, first, sizeof *first, "sdnn_k_sub_check", k.first);
    k.n = n;
    return sdnn_sim_launch(c, stream, "sdnn_k_sub_check", run_sub_check, &k, sizeof k);
}

sdnn_status sdnn_k_count_nonfinite(sdnn_dctx *c, int stream, const float *x, size_t n,
                                   size_t *bad)
{
    *bad = 0;
    if (!n) return SDNN_OK;
    k_arg k = {0};
    DPTR(c, x, F(n), "sdnn_k_count_nonfinite", k.a);
    k.n = n;
    size_t result = 0;
    k.bad = &result;
    SDNN_CHECK(sdnn_sim_launch_sync(c, stream, "sdnn_k_count_nonfinite", run_nonfinite, &k,
                                    sizeof k));
    *bad = result;
    return SDNN_OK;
}

#define SDNN_MEAN_MAX_IN 64

typedef struct mean_arg {
    const float *in[SDNN_MEAN_MAX_IN];
    int nin;
    float *out;
    size_t n;
} mean_arg;

static sdnn_status run_mean(void *p)
{
    mean_arg *m = p;
    sdnn_mean_buffers(m->in, m->nin, m->out, m->n);
    return SDNN_OK;
}

sdnn_status sdnn_k_mean(sdnn_dctx *c, int stream, const float *const *in, int nin, float *out,
                        size_t n)
{
    if (nin < 1 || nin > SDNN_MEAN_MAX_IN)
        return SDNN_ERROR(SDNN_ERR_INVALID, "device mean: %d inputs (1..%d)", nin,
                          SDNN_MEAN_MAX_IN);
    if (!n) return SDNN_OK;
    mean_arg m;
    memset(&m, 0, sizeof m);
    for (int r = 0; r < nin; ++r) DPTR(c, in[r], F(n), "sdnn_k_mean", m.in[r]);
    DPTR(c, out, F(n), "sdnn_k_mean", m.out);
    m.nin = nin;
    m.n = n;
    return sdnn_sim_launch(c, stream, "sdnn_k_mean", run_mean, &m, sizeof m);
}
