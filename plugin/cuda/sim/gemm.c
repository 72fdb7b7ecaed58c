/*
 * sim/gemm: the stand-in for cuBLAS on the simulated device (make GPU=sim).
 *
 * layers.cu and conv.cu run as themselves on the kernel executor; the one
 * library call they make, cuBLAS's sgemm behind sdnn_gemm_rm (layers.cuh),
 * is OpenBLAS's cblas_sgemm here, queued on the context's compute stream
 * like a kernel: the three matrices are translated to host addresses by
 * sdnn_sim_dptr in the calling thread (a host pointer, freed memory or an
 * extent past an allocation fails at the call, naming it), the scalars are
 * copied, so the call captures its arguments as a cuBLAS call does.  What
 * this shows is the order of operations and an fp32 gemm's arithmetic,
 * never cuBLAS's own algorithms or rounding.
 */
#include "sim.h"

#include <cblas.h>

typedef struct gemm_args {
    int ta, tb, m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
} gemm_args;

static sdnn_status run_gemm(void *arg)
{
    const gemm_args *g = arg;
    cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans,
                g->m, g->n, g->k, g->alpha, g->a, g->lda, g->b, g->ldb, g->beta, g->c, g->ldc);
    return SDNN_OK;
}

/* The host address of a rows x ld matrix at device address p: the extent
 * a row-major gemm may touch (the last row only up to its used columns). */
static sdnn_status matrix(sdnn_dctx *c, const void *p, size_t rows, size_t cols, size_t ld,
                          const char *what, const void **host)
{
    void *h = NULL;
    size_t floats = rows ? (rows - 1) * ld + cols : 0;
    SDNN_CHECK(sdnn_sim_dptr(c, floats ? p : NULL, floats * sizeof(float), what, &h));
    *host = h;
    return SDNN_OK;
}

sdnn_status sdnn_gemm_rm(sdnn_dctx *c, int ta, int tb, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *cm,
                         int ldc)
{
    if (m < 0 || n < 0 || k < 0)
        return SDNN_ERROR(SDNN_ERR_INVALID, "sdnn_gemm_rm: negative extent (%d, %d, %d)", m, n,
                          k);
    if (m == 0 || n == 0) return SDNN_OK;
    gemm_args g = {ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, NULL, NULL, NULL};
    const void *h;
    /* op(A) is m x k: A is stored k x m when transposed; op(B) is k x n. */
    if (k > 0) {
        SDNN_CHECK(matrix(c, a, ta ? (size_t)k : (size_t)m, ta ? (size_t)m : (size_t)k,
                          (size_t)lda, "sdnn_gemm_rm (cuBLAS stand-in): A", &h));
        g.a = h;
        SDNN_CHECK(matrix(c, b, tb ? (size_t)n : (size_t)k, tb ? (size_t)k : (size_t)n,
                          (size_t)ldb, "sdnn_gemm_rm (cuBLAS stand-in): B", &h));
        g.b = h;
    }
    SDNN_CHECK(matrix(c, cm, (size_t)m, (size_t)n, (size_t)ldc,
                      "sdnn_gemm_rm (cuBLAS stand-in): C", &h));
    g.c = (float *)h;
    return sdnn_sim_launch(c, SDNN_STREAM_COMPUTE, "sdnn_gemm_rm (cuBLAS stand-in)", run_gemm, &g,
                           sizeof g);
}
