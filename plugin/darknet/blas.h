/*
 * blas: OpenBLAS in place of Darknet's gemm.
 *
 * Darknet's convolutional and connected layers do nearly all their work in
 * `gemm`.  Built with SDNN_BLAS=1, libscalednn defines that symbol itself and
 * the dynamic linker binds Darknet's calls to it (see blas.c).  Without
 * SDNN_BLAS the symbol is Darknet's own and the functions below only report
 * that.
 */
#ifndef SDNN_BLAS_H
#define SDNN_BLAS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Darknet's gemm, row-major: C = ALPHA * op(A) * op(B) + BETA * C, where
 * op(X) is X, or X transposed when TA (TB) is nonzero; op(A) is M x K,
 * op(B) is K x N, C is M x N.  Ours when sdnn_blas_enabled(), else Darknet's. */
void gemm(int TA, int TB, int M, int N, int K, float ALPHA,
          float *A, int lda, float *B, int ldb, float BETA,
          float *C, int ldc);

/* 1 when this build replaces Darknet's gemm with OpenBLAS, else 0. */
int sdnn_blas_enabled(void);

/* Threads OpenBLAS may use per gemm call (n < 1 counts as 1).  Give it one
 * per replica when several replica threads train; no-op without BLAS. */
void sdnn_blas_set_threads(int n);

/* Threads OpenBLAS uses now; 1 without BLAS (Darknet's gemm is serial). */
int sdnn_blas_get_threads(void);

/* "OpenBLAS <version> <build options>" or "darknet gemm". */
const char *sdnn_blas_name(void);

#ifdef __cplusplus
}
#endif
#endif
