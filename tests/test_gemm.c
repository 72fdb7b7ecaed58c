/*
 * test_gemm: our gemm (OpenBLAS when built with SDNN_BLAS=1, else Darknet's
 * own) against Darknet's reference gemm_cpu on seeded random matrices: the four
 * transpose cases, non-square shapes, padded leading dimensions whose padding
 * must stay untouched, several ALPHA/BETA, and K = 0.  Then checks that
 * Darknet's own layers really call the gemm of this build: through the dynamic
 * linker's symbol lookup, and through the output of a conv + connected network.
 */
#include "margin.h"
#include "splitmix.h"
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <darknet.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blas.h"
#include "replicas.h"

/* Darknet's reference implementation (exported by libdarknet, not in darknet.h). */
void gemm_cpu(int TA, int TB, int M, int N, int K, float ALPHA,
              float *A, int lda, float *B, int ldb, float BETA,
              float *C, int ldc);

#define REL_TOL 1e-5

/* ---- seeded PRNG (splitmix64) -------------------------------------------- */

static uint64_t g_rng = 0x5eed5eed12345678ULL;

static uint64_t rng_next(void)
{
    return sdnn_splitmix64_next(&g_rng);
}

/* Uniform in [-1, 1). */
static float rng_float(void)
{
    return (float)((double)(rng_next() >> 40) / (double)(1ULL << 23) - 1.0);
}

static void fill_random(float *x, size_t n)
{
    for (size_t i = 0; i < n; ++i) x[i] = rng_float();
}

static float *alloc_floats(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    return p;
}

/* ---- one comparison ------------------------------------------------------- */

typedef struct gemm_case {
    int TA, TB, M, N, K;
    float alpha, beta;
    int pad_a, pad_b, pad_c; /* extra columns beyond the minimum */
} gemm_case;

/* ||X - R||_F / ||R||_F over the M x N block (absolute when R is zero). */
static double rel_frobenius(int M, int N, const float *X, const float *R, int ldc)
{
    double diff = 0.0, ref = 0.0;
    for (int i = 0; i < M; ++i) {
        for (int j = 0; j < N; ++j) {
            double x = X[(size_t)i * ldc + j], r = R[(size_t)i * ldc + j];
            diff += (x - r) * (x - r);
            ref += r * r;
        }
    }
    return ref > 0.0 ? sqrt(diff) / sqrt(ref) : sqrt(diff);
}

/* Number of padding cells (columns N..ldc-1 of each row) that differ from orig. */
static int padding_changed(int M, int N, const float *C, const float *orig, int ldc)
{
    int bad = 0;
    for (int i = 0; i < M; ++i)
        for (int j = N; j < ldc; ++j)
            if (memcmp(&C[(size_t)i * ldc + j], &orig[(size_t)i * ldc + j],
                       sizeof(float)) != 0)
                ++bad;
    return bad;
}

static void run_case(const gemm_case *c)
{
    int rows_a = c->TA ? c->K : c->M, cols_a = c->TA ? c->M : c->K;
    int rows_b = c->TB ? c->N : c->K, cols_b = c->TB ? c->K : c->N;
    int lda = cols_a + c->pad_a, ldb = cols_b + c->pad_b, ldc = c->N + c->pad_c;
    size_t na = (size_t)rows_a * lda, nb = (size_t)rows_b * ldb;
    size_t nc = (size_t)c->M * ldc;

    float *A = alloc_floats(na), *A0 = alloc_floats(na);
    float *B = alloc_floats(nb), *B0 = alloc_floats(nb);
    float *C0 = alloc_floats(nc), *Cours = alloc_floats(nc), *Cref = alloc_floats(nc);
    fill_random(A, na);
    fill_random(B, nb);
    fill_random(C0, nc);
    memcpy(A0, A, na * sizeof(float));
    memcpy(B0, B, nb * sizeof(float));
    memcpy(Cours, C0, nc * sizeof(float));
    memcpy(Cref, C0, nc * sizeof(float));

    gemm(c->TA, c->TB, c->M, c->N, c->K, c->alpha, A, lda, B, ldb, c->beta, Cours, ldc);
    gemm_cpu(c->TA, c->TB, c->M, c->N, c->K, c->alpha, A0, lda, B0, ldb, c->beta,
             Cref, ldc);

    double err = rel_frobenius(c->M, c->N, Cours, Cref, ldc);
    int pad_bad = padding_changed(c->M, c->N, Cours, C0, ldc);
    int ab_changed = memcmp(A, A0, na * sizeof(float)) != 0 ||
                     memcmp(B, B0, nb * sizeof(float)) != 0;
    if (!(err < REL_TOL) || pad_bad || ab_changed)
        print_error("gemm TA=%d TB=%d M=%d N=%d K=%d alpha=%g beta=%g "
                    "lda=%d ldb=%d ldc=%d: rel. Frobenius error %.3e (tol %.0e), "
                    "%d padding cells changed, inputs changed: %d\n",
                    c->TA, c->TB, c->M, c->N, c->K, (double)c->alpha,
                    (double)c->beta, lda, ldb, ldc, err, REL_TOL, pad_bad, ab_changed);
    free(A); free(A0); free(B); free(B0); free(C0); free(Cours); free(Cref);
    tm_margin("test_gemm:cases", err, REL_TOL);
    assert_true(err < REL_TOL);
    assert_int_equal(pad_bad, 0);
    assert_int_equal(ab_changed, 0);
}

static const int g_shapes[][3] = { /* M, N, K */
    {1, 1, 1}, {3, 5, 7}, {17, 9, 33}, {64, 48, 80}, {5, 130, 3},
    {100, 1, 50}, {1, 77, 64}, {129, 65, 257},
};
static const int g_pads[][3] = { /* pad_a, pad_b, pad_c */
    {0, 0, 0}, {3, 5, 2}, {1, 0, 7}, {0, 4, 1},
};
static const float g_alphas[] = {1.0f, -0.375f, 2.5f};
static const float g_betas[] = {0.0f, 1.0f, 0.5f};

static void run_transpose_case(int TA, int TB)
{
    size_t ns = sizeof g_shapes / sizeof g_shapes[0];
    size_t np = sizeof g_pads / sizeof g_pads[0];
    for (size_t s = 0; s < ns; ++s)
        for (size_t a = 0; a < sizeof g_alphas / sizeof g_alphas[0]; ++a)
            for (size_t b = 0; b < sizeof g_betas / sizeof g_betas[0]; ++b) {
                const int *pad = g_pads[(s + a + b) % np];
                gemm_case c = {TA, TB, g_shapes[s][0], g_shapes[s][1], g_shapes[s][2],
                               g_alphas[a], g_betas[b], pad[0], pad[1], pad[2]};
                run_case(&c);
            }
}

static void test_gemm_nn(void **state) { (void)state; run_transpose_case(0, 0); }
static void test_gemm_nt(void **state) { (void)state; run_transpose_case(0, 1); }
static void test_gemm_tn(void **state) { (void)state; run_transpose_case(1, 0); }
static void test_gemm_tt(void **state) { (void)state; run_transpose_case(1, 1); }

/* Big enough for OpenBLAS to split the product over its threads. */
static void test_gemm_large(void **state)
{
    (void)state;
    for (int t = 0; t < 4; ++t) {
        gemm_case c = {t >> 1, t & 1, 300, 257, 513, 0.7f, 0.5f, 2, 3, 1};
        run_case(&c);
    }
}

/* K = 0: C = BETA * C (A and B are not read); M or N = 0: nothing changes. */
static void test_gemm_degenerate(void **state)
{
    (void)state;
    for (int t = 0; t < 4; ++t)
        for (size_t b = 0; b < sizeof g_betas / sizeof g_betas[0]; ++b) {
            gemm_case c = {t >> 1, t & 1, 6, 9, 0, 1.5f, g_betas[b], 0, 0, 3};
            run_case(&c);
        }

    /* K = 0 checked directly as well: exactly BETA * C, padding unchanged. */
    float C[4 * 6], C0[4 * 6], dummy = 42.0f;
    fill_random(C0, 24);
    memcpy(C, C0, sizeof C);
    gemm(0, 0, 4, 5, 0, 1.0f, &dummy, 0, &dummy, 5, 0.5f, C, 6);
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 6; ++j)
            assert_true(C[i * 6 + j] == (j < 5 ? 0.5f * C0[i * 6 + j] : C0[i * 6 + j]));

    /* M = 0 and N = 0 leave C alone. */
    memcpy(C, C0, sizeof C);
    gemm(0, 0, 0, 5, 3, 1.0f, &dummy, 3, &dummy, 5, 0.0f, C, 6);
    gemm(1, 1, 4, 0, 3, 1.0f, &dummy, 4, &dummy, 3, 0.0f, C, 6);
    assert_memory_equal(C, C0, sizeof C);

    /* Leading dimensions below the row length (overlapping rows): cblas would
     * refuse them; Darknet's loops define a result, which ours must match. */
    float A[64], B[64], Cours[4 * 5], Cref[4 * 5];
    fill_random(A, 64);
    fill_random(B, 64);
    fill_random(Cref, 20);
    memcpy(Cours, Cref, sizeof Cref);
    gemm(0, 0, 4, 5, 6, 0.5f, A, 5, B, 4, 0.5f, Cours, 5);
    gemm_cpu(0, 0, 4, 5, 6, 0.5f, A, 5, B, 4, 0.5f, Cref, 5);
    assert_true(rel_frobenius(4, 5, Cours, Cref, 5) < REL_TOL);
}

/* The checks above can fail: a wrong element or a touched padding cell shows. */
static void test_checks_detect_errors(void **state)
{
    (void)state;
    enum { M = 8, N = 10, K = 12, LDC = 13 };
    float A[M * K], B[K * N], C0[M * LDC], C1[M * LDC], C2[M * LDC];
    fill_random(A, M * K);
    fill_random(B, K * N);
    fill_random(C0, M * LDC);
    memcpy(C1, C0, sizeof C0);
    memcpy(C2, C0, sizeof C0);
    gemm(0, 0, M, N, K, 1.0f, A, K, B, N, 1.0f, C1, LDC);
    gemm_cpu(0, 0, M, N, K, 1.0f, A, K, B, N, 1.0f, C2, LDC);
    assert_true(rel_frobenius(M, N, C1, C2, LDC) < REL_TOL);
    assert_int_equal(padding_changed(M, N, C1, C0, LDC), 0);

    C1[3 * LDC + 4] += 1e-2f;               /* one wrong element */
    assert_true(rel_frobenius(M, N, C1, C2, LDC) > REL_TOL);
    C1[5 * LDC + N + 1] = 7.0f;             /* one touched padding cell */
    assert_int_equal(padding_changed(M, N, C1, C0, LDC), 1);
}

static void test_blas_info(void **state)
{
    (void)state;
    const char *name = sdnn_blas_name();
    assert_non_null(name);
    int before = sdnn_blas_get_threads();
    assert_true(before >= 1);
    sdnn_blas_set_threads(1);
    assert_int_equal(sdnn_blas_get_threads(), 1);
    sdnn_blas_set_threads(0); /* clamped to 1 */
    assert_int_equal(sdnn_blas_get_threads(), 1);
    /* one thread per call still computes the same product */
    gemm_case c = {0, 1, 70, 90, 110, 1.0f, 0.5f, 1, 1, 1};
    run_case(&c);
    sdnn_blas_set_threads(before);
    assert_int_equal(sdnn_blas_get_threads(), before);
#ifdef SDNN_BLAS
    assert_int_equal(sdnn_blas_enabled(), 1);
    assert_true(strncmp(name, "OpenBLAS", 8) == 0);
#else
    assert_int_equal(sdnn_blas_enabled(), 0);
    assert_string_equal(name, "darknet gemm");
#endif
}

/* ---- which gemm does Darknet call? ---------------------------------------- */

/* The dynamic linker's view: Darknet's PLT calls bind to the global-scope
 * definition (dlsym(RTLD_DEFAULT)); libdarknet's own is what dlsym finds
 * through a handle on libdarknet.  With BLAS they must differ and the bound
 * one must be ours; without BLAS the bound one is Darknet's. */
static void test_gemm_symbol_binding(void **state)
{
    (void)state;
    Dl_info info;
    assert_true(dladdr((void *)gemm_cpu, &info) != 0);
    assert_non_null(info.dli_fname);
    void *dn = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    assert_non_null(dn);
    void *darknet_gemm = dlsym(dn, "gemm");
    void *bound_gemm = dlsym(RTLD_DEFAULT, "gemm");
    void *our_gemm = (void *)gemm;
    assert_non_null(darknet_gemm);
    assert_non_null(bound_gemm);
    assert_ptr_equal(bound_gemm, our_gemm);
#ifdef SDNN_BLAS
    assert_int_equal(sdnn_blas_enabled(), 1);
    assert_ptr_not_equal(bound_gemm, darknet_gemm);
#else
    assert_int_equal(sdnn_blas_enabled(), 0);
    assert_ptr_equal(bound_gemm, darknet_gemm);
#endif
    dlclose(dn);
}

static const char g_layer_cfg[] =
    "[net]\nbatch=3\nheight=6\nwidth=6\nchannels=20\n\n"
    "[convolutional]\nfilters=16\nsize=1\nstride=1\npad=0\nactivation=linear\n\n"
    "[connected]\noutput=40\nactivation=linear\n";

static network *parse_cfg_text(const char *text)
{
    char path[] = "/tmp/sdnn_test_gemm_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    network *net = parse_network_cfg(path);
    unlink(path);
    assert_non_null(net);
    return net;
}

/* Elements where a and b differ in any bit. */
static int count_diff(const float *a, const float *b, size_t n)
{
    int d = 0;
    for (size_t i = 0; i < n; ++i)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) ++d;
    return d;
}

typedef void (*gemm_fn)(int, int, int, int, int, float, float *, int, float *,
                        int, float, float *, int);

/* The outputs of the network's 1x1 conv (M=16, N=36, K=20 per image) and its
 * connected layer (M=3, N=40, K=576) as computed with `g`, bias added. */
static void reference_outputs(network *net, const float *input, gemm_fn g,
                              float *conv_out, float *fc_out)
{
    layer *cv = &net->layers[0], *fc = &net->layers[1];
    int m = cv->n, n = cv->out_w * cv->out_h, k = cv->c;
    memset(conv_out, 0, (size_t)cv->outputs * cv->batch * sizeof(float));
    for (int b = 0; b < cv->batch; ++b) {
        float *out = conv_out + (size_t)b * m * n;
        g(0, 0, m, n, k, 1.0f, cv->weights, k, (float *)input + (size_t)b * k * n, n,
          1.0f, out, n);
        for (int f = 0; f < m; ++f)
            for (int p = 0; p < n; ++p) out[f * n + p] += cv->biases[f];
    }
    memset(fc_out, 0, (size_t)fc->outputs * fc->batch * sizeof(float));
    g(0, 1, fc->batch, fc->outputs, fc->inputs, 1.0f, conv_out, fc->inputs,
      fc->weights, fc->inputs, 1.0f, fc_out, fc->outputs);
    for (int b = 0; b < fc->batch; ++b)
        for (int o = 0; o < fc->outputs; ++o) fc_out[b * fc->outputs + o] += fc->biases[o];
}

/* Darknet's own forward pass must give, bit for bit, what this build's gemm
 * gives; with BLAS that differs from gemm_cpu's result in the last digits, so
 * the check tells the two apart. */
static void test_layers_use_this_gemm(void **state)
{
    (void)state;
    network *net = parse_cfg_text(g_layer_cfg);
    assert_int_equal(net->n, 2);
    layer *cv = &net->layers[0], *fc = &net->layers[1];
    assert_int_equal(cv->type, CONVOLUTIONAL);
    assert_int_equal(fc->type, CONNECTED);
    assert_int_equal(fc->inputs, 16 * 36);
    fill_random(cv->weights, (size_t)cv->nweights);
    fill_random(cv->biases, (size_t)cv->n);
    fill_random(fc->weights, (size_t)fc->inputs * fc->outputs);
    fill_random(fc->biases, (size_t)fc->outputs);

    size_t n_in = (size_t)net->inputs * net->batch;
    size_t n_cv = (size_t)cv->outputs * cv->batch, n_fc = (size_t)fc->outputs * fc->batch;
    float *input = alloc_floats(n_in);
    float *cv_ours = alloc_floats(n_cv), *fc_ours = alloc_floats(n_fc);
    float *cv_ref = alloc_floats(n_cv), *fc_ref = alloc_floats(n_fc);
    fill_random(input, n_in);

    network_predict(net, input);
    reference_outputs(net, input, gemm, cv_ours, fc_ours);
    reference_outputs(net, input, gemm_cpu, cv_ref, fc_ref);

    int conv_vs_ours = count_diff(cv->output, cv_ours, n_cv);
    int fc_vs_ours = count_diff(fc->output, fc_ours, n_fc);
    int ours_vs_ref = count_diff(cv_ours, cv_ref, n_cv) + count_diff(fc_ours, fc_ref, n_fc);
    double fc_err = rel_frobenius(1, (int)n_fc, fc_ours, fc_ref, (int)n_fc);
    print_message("layers: conv differs from this build's gemm in %d of %zu, connected "
                  "in %d of %zu; this build's gemm differs from gemm_cpu in %d "
                  "elements (connected rel. error %.2e)\n",
                  conv_vs_ours, n_cv, fc_vs_ours, n_fc, ours_vs_ref, fc_err);

    assert_int_equal(conv_vs_ours, 0);
    assert_int_equal(fc_vs_ours, 0);
    tm_margin("test_gemm:layers", fc_err, REL_TOL);
    assert_true(fc_err < REL_TOL);
#ifdef SDNN_BLAS
    assert_true(ours_vs_ref > 0); /* else this test could not tell them apart */
#else
    assert_int_equal(ours_vs_ref, 0);
#endif
    free(input); free(cv_ours); free(fc_ours); free(cv_ref); free(fc_ref);
    sdnn_network_free(net);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_nn),
        cmocka_unit_test(test_gemm_nt),
        cmocka_unit_test(test_gemm_tn),
        cmocka_unit_test(test_gemm_tt),
        cmocka_unit_test(test_gemm_large),
        cmocka_unit_test(test_gemm_degenerate),
        cmocka_unit_test(test_checks_detect_errors),
        cmocka_unit_test(test_blas_info),
        cmocka_unit_test(test_gemm_symbol_binding),
        cmocka_unit_test(test_layers_use_this_gemm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
