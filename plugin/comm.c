/*
 * comm: backend registry and the reference averaging kernel.  A new backend
 * adds its ops table to `registry`; callers only ever see sdnn_comm_ops.
 */
#include "comm.h"

#include <stdlib.h>
#include <string.h>

static const sdnn_comm_ops *const registry[] = {
    &sdnn_comm_local_ops,
};

/* Backends later issues bring: known names, so the message can say so. */
static const char *const planned[] = {"mpi", "nccl"};

const char *sdnn_comm_available_names(void)
{
    return "local";
}

sdnn_status sdnn_comm_open(const char *name, sdnn_comm **out)
{
    *out = NULL;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; ++i) {
        const sdnn_comm_ops *ops = registry[i];
        if (strcmp(ops->name, name) != 0) continue;
        if (!ops->available())
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "comm backend %s is not usable here", name);
        sdnn_comm *c = calloc(1, sizeof *c);
        if (!c) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for comm backend");
        c->ops = ops;
        c->rank = 0;
        c->size = 1;
        sdnn_status st = ops->init(c);
        if (st != SDNN_OK) {
            free(c);
            return st;
        }
        *out = c;
        return SDNN_OK;
    }
    for (size_t i = 0; i < sizeof planned / sizeof planned[0]; ++i)
        if (strcmp(planned[i], name) == 0)
            return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                              "comm backend %s is not available in this build (available: %s)",
                              name, sdnn_comm_available_names());
    return SDNN_ERROR(SDNN_ERR_INVALID, "unknown comm backend %s (available: %s)", name,
                      sdnn_comm_available_names());
}

void sdnn_comm_close(sdnn_comm *c)
{
    if (!c) return;
    if (c->ops && c->ops->destroy) c->ops->destroy(c);
    free(c);
}

/* Sums in blocks so each block of `out` stays in cache while the inputs
 * stream through it; the per-element order of additions is still in[0],
 * in[1], ... so the result does not depend on the block size. */
void sdnn_mean_buffers(const float *const *in, int nin, float *out, size_t n)
{
    enum { BLOCK = 4096 };
    if (nin == 1) {
        if (out != in[0]) memcpy(out, in[0], n * sizeof(float));
        return;
    }
    const float inv = 1.0f / (float)nin;
    for (size_t lo = 0; lo < n; lo += BLOCK) {
        size_t hi = lo + BLOCK < n ? lo + BLOCK : n;
        const float *a = in[0], *b = in[1];
        for (size_t i = lo; i < hi; ++i) out[i] = a[i] + b[i];
        for (int r = 2; r < nin; ++r) {
            const float *x = in[r];
            for (size_t i = lo; i < hi; ++i) out[i] += x[i];
        }
        for (size_t i = lo; i < hi; ++i) out[i] *= inv;
    }
}
