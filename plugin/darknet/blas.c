/*
 * blas: OpenBLAS behind Darknet's `gemm`.
 *
 * Why this exists: Darknet's gemm is a plain triple loop, and its convolutional
 * and connected layers spend nearly all their time in it.  Darknet calls gemm
 * through the PLT, so when the program (or a library linked before -ldarknet)
 * defines a global `gemm`, the dynamic linker binds Darknet's calls to that
 * definition instead of Darknet's own.  With SDNN_BLAS=1 this file provides one
 * that hands the product to OpenBLAS's cblas_sgemm (2.5-3x faster training in
 * our probe; results then differ from stock Darknet in the last digits).
 *
 * Threads: OpenBLAS runs each call on its own thread pool.  When several replica
 * threads train at once, each replica should get one OpenBLAS thread
 * (sdnn_blas_set_threads(1)), otherwise the pools oversubscribe the cores and
 * throughput drops by about half.
 *
 * Without SDNN_BLAS no gemm is defined here, and Darknet's own stays in use.
 */
#include "blas.h"

#ifdef SDNN_BLAS
#include <cblas.h>

/* cblas rejects leading dimensions below the matrix width (OpenBLAS then
 * prints a message and computes nothing); Darknet's loops accept them. */
static int ld_ok(int TA, int TB, int M, int N, int K, int lda, int ldb, int ldc)
{
    int need_a = TA ? M : K;
    int need_b = TB ? K : N;
    if (need_a < 1) need_a = 1;
    if (need_b < 1) need_b = 1;
    return lda >= need_a && ldb >= need_b && ldc >= (N < 1 ? 1 : N);
}

/* C *= BETA over the M x N block, padding columns untouched. */
static void scale_c(int M, int N, float BETA, float *C, int ldc)
{
    if (BETA == 1.0f) return;
    for (int i = 0; i < M; ++i) {
        float *row = C + (long)i * ldc;
        for (int j = 0; j < N; ++j) row[j] *= BETA;
    }
}

/* Straight loops for the calls cblas would refuse. */
static void gemm_loops(int TA, int TB, int M, int N, int K, float ALPHA,
                       const float *A, int lda, const float *B, int ldb,
                       float BETA, float *C, int ldc)
{
    scale_c(M, N, BETA, C, ldc);
    for (int i = 0; i < M; ++i) {
        for (int j = 0; j < N; ++j) {
            float sum = 0.0f;
            for (int k = 0; k < K; ++k) {
                float a = TA ? A[(long)k * lda + i] : A[(long)i * lda + k];
                float b = TB ? B[(long)j * ldb + k] : B[(long)k * ldb + j];
                sum += a * b;
            }
            C[(long)i * ldc + j] += ALPHA * sum;
        }
    }
}

void gemm(int TA, int TB, int M, int N, int K, float ALPHA,
          float *A, int lda, float *B, int ldb, float BETA,
          float *C, int ldc)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        scale_c(M, N, BETA, C, ldc);
        return;
    }
    if (!ld_ok(TA, TB, M, N, K, lda, ldb, ldc)) {
        gemm_loops(TA, TB, M, N, K, ALPHA, A, lda, B, ldb, BETA, C, ldc);
        return;
    }
    cblas_sgemm(CblasRowMajor, TA ? CblasTrans : CblasNoTrans,
                TB ? CblasTrans : CblasNoTrans, M, N, K, ALPHA, A, lda,
                B, ldb, BETA, C, ldc);
}

int sdnn_blas_enabled(void) { return 1; }

void sdnn_blas_set_threads(int n)
{
    openblas_set_num_threads(n < 1 ? 1 : n);
}

int sdnn_blas_get_threads(void) { return openblas_get_num_threads(); }

const char *sdnn_blas_name(void)
{
    const char *cfg = openblas_get_config();
    return cfg ? cfg : "OpenBLAS";
}

#else /* !SDNN_BLAS: Darknet's gemm stays */

int sdnn_blas_enabled(void) { return 0; }

void sdnn_blas_set_threads(int n) { (void)n; }

int sdnn_blas_get_threads(void) { return 1; }

const char *sdnn_blas_name(void) { return "darknet gemm"; }

#endif
