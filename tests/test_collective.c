/*
 * The compressed collectives (collective.c over comm_local's ring of
 * threads): with 2, 3, 4 and 5 replicas every replica's output is
 * bit-identical and within the codec's bound of the exact mean; top-k
 * equals the mean of each replica's own selection bit for bit; the bytes
 * sent are what the algorithm says; the ring's chunks tile the buffer.
 */
#include "splitmix.h"
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "codec.h"
#include "collective.h"
#include "comm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t next(uint64_t *s)
{
    return sdnn_splitmix64_next(s);
}

/* Uniform in [-1, 1), scaled per block so chunks differ in range. */
static void fill(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; ++i) {
        float scale = (i / 300) % 3 == 0 ? 1.0f : ((i / 300) % 3 == 1 ? 1e-3f : 20.0f);
        x[i] = scale * (float)((double)(next(&s) >> 40) / 8388608.0 - 1.0);
    }
}

typedef struct world {
    int W;
    size_t n;
    float **in, **out;
    double *exact;   /* mean in double */
    double *absum;   /* sum over replicas of |x| */
} world;

static world make_world(int W, size_t n, uint64_t seed)
{
    world w = {W, n, calloc((size_t)W, sizeof(float *)), calloc((size_t)W, sizeof(float *)),
               calloc(n, sizeof(double)), calloc(n, sizeof(double))};
    assert_non_null(w.in);
    assert_non_null(w.out);
    assert_non_null(w.exact);
    assert_non_null(w.absum);
    for (int r = 0; r < W; ++r) {
        w.in[r] = malloc(n * sizeof(float));
        w.out[r] = malloc(n * sizeof(float));
        assert_non_null(w.in[r]);
        assert_non_null(w.out[r]);
        fill(w.in[r], n, seed * 131 + (uint64_t)r);
        for (size_t i = 0; i < n; ++i) {
            w.exact[i] += w.in[r][i];
            w.absum[i] += fabs(w.in[r][i]);
        }
    }
    for (size_t i = 0; i < n; ++i) w.exact[i] /= W;
    return w;
}

static void free_world(world *w)
{
    for (int r = 0; r < w->W; ++r) {
        free(w->in[r]);
        free(w->out[r]);
    }
    free(w->in);
    free(w->out);
    free(w->exact);
    free(w->absum);
}

/* Max over the int8 chunk holding i of sum_r |x_r| (bounds each hop's scale). */
static double chunk_max_absum(const world *w, size_t i, size_t chunk)
{
    size_t lo = i / chunk * chunk, hi = lo + chunk < w->n ? lo + chunk : w->n;
    double m = 0;
    for (size_t j = lo; j < hi; ++j)
        if (w->absum[j] > m) m = w->absum[j];
    return m;
}

/* The bound each dense codec must meet against the exact mean (see codec.h
 * for one encode's error; the ring encodes W-1 partial sums, each no larger
 * than sum_r |x_r|, and the mean once more). */
static double bound(const char *codec, const sdnn_codec_params *p, const world *w, size_t i)
{
    const int W = w->W;
    double S = w->absum[i], m = fabs(w->exact[i]);
    double fadd = (W + 1) * ldexp(S, -23);   /* fp32 additions and the scale */
    if (strcmp(codec, "none") == 0) return fadd;
    if (strcmp(codec, "fp16") == 0 || strcmp(codec, "bf16") == 0) {
        double eps = strcmp(codec, "fp16") == 0 ? ldexp(1, -11) : ldexp(1, -8);
        double tiny = strcmp(codec, "fp16") == 0 ? ldexp(1, -24) : 0;
        return 1.01 * eps * ((W - 1) * S / W + m + eps * S) + W * tiny + fadd;
    }
    /* int8: each encode errs by at most s/2, s = max|v|/127 over the chunk;
     * stochastic rounding by less than s. */
    double M = chunk_max_absum(w, i, (size_t)p->int8_chunk);
    double per = (p->stochastic ? 1.0 : 0.5) * M / 127.0;
    return 1.01 * per * ((double)(W - 1) / W + 1.0 / W + 1e-3) + fadd;
}

static void run_dense(const char *name, int stochastic)
{
    const sdnn_codec_ops *c = sdnn_codec_find(name);
    assert_non_null(c);
    sdnn_comm *comm = NULL;
    assert_int_equal(sdnn_comm_open("local", &comm), SDNN_OK);
    const size_t sizes[] = {1, 7, 1000, 65537};
    for (int W = 2; W <= 5; ++W)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; ++si) {
            size_t n = sizes[si];
            world w = make_world(W, n, (uint64_t)(W * 10 + (int)si));
            sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
            p.int8_chunk = 64;
            p.stochastic = stochastic;
            p.seed = 7;
            size_t wire = 0;
            assert_int_equal(comm->ops->allreduce_mean_coded(comm, c, &p, 99,
                                                             (const float *const *)w.in, W,
                                                             w.out, n, &wire),
                             SDNN_OK);
            assert_int_equal(wire, sdnn_coded_wire_bytes(c, &p, n, W));
            for (int r = 1; r < W; ++r)
                assert_memory_equal(w.out[0], w.out[r], n * sizeof(float));
            double worst = 0;
            for (size_t i = 0; i < n; ++i) {
                double err = fabs((double)w.out[0][i] - w.exact[i]);
                double b = bound(name, &p, &w, i);
                if (err > b)
                    fail_msg("%s W=%d n=%zu: element %zu is %.9g, exact mean %.9g, error %.3g > "
                             "bound %.3g", name, W, n, i, w.out[0][i], w.exact[i], err, b);
                if (b > 0 && err / b > worst) worst = err / b;
            }
            if (n == 65537)
                print_message("%s%s W=%d: worst error %.2f of the bound, %zu bytes sent\n", name,
                              stochastic ? " (stochastic)" : "", W, worst, wire);
            free_world(&w);
        }
    sdnn_comm_close(comm);
}

/* sdnn_wire_bytes is the per-replica mean of what the ring really sends:
 * W of it is the total the local ring's transport counted, for the dense
 * ring (codec none: chunks tile the buffer, no headers) and the sparse
 * all-gather; a formula off by W, 2 or a codec ratio fails here. */
static void test_wire_bytes_definition(void **state)
{
    (void)state;
    assert_true(sdnn_wire_bytes(SDNN_WIRE_ALLREDUCE, 1, 1e6) == 0);
    assert_true(sdnn_wire_bytes(SDNN_WIRE_ALLREDUCE, 4, 400) == 600);
    assert_true(sdnn_wire_bytes(SDNN_WIRE_REDUCE_SCATTER, 4, 400) == 300);
    assert_true(sdnn_wire_bytes(SDNN_WIRE_ALLGATHER, 4, 400) == 1200);
    assert_true(sdnn_wire_bytes(SDNN_WIRE_BROADCAST, 4, 400) == 300);
    assert_true(sdnn_wire_bytes(SDNN_WIRE_CENTRAL, 4, 400) == 600);
    sdnn_comm *comm = NULL;
    assert_int_equal(sdnn_comm_open("local", &comm), SDNN_OK);
    const char *names[] = {"none", "topk"};
    for (int W = 2; W <= 5; ++W)
        for (int ci = 0; ci < 2; ++ci) {
            const sdnn_codec_ops *c = sdnn_codec_find(names[ci]);
            assert_non_null(c);
            const size_t n = 1000;
            world w = make_world(W, n, (uint64_t)(W * 7 + ci));
            sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
            size_t wire = 0;
            assert_int_equal(comm->ops->allreduce_mean_coded(comm, c, &p, 5,
                                                             (const float *const *)w.in, W,
                                                             w.out, n, &wire),
                             SDNN_OK);
            double per = c->dense
                             ? sdnn_wire_bytes(SDNN_WIRE_ALLREDUCE, W, (double)(n * sizeof(float)))
                             : sdnn_wire_bytes(SDNN_WIRE_ALLGATHER, W,
                                               (double)c->encoded_size(&p, n));
            if (fabs(per * W - (double)wire) > 0.5)
                fail_msg("%s W=%d: the ring sent %zu bytes in all, W x sdnn_wire_bytes = %.1f",
                         names[ci], W, wire, per * W);
            free_world(&w);
        }
    sdnn_comm_close(comm);
}

static void test_ring_none(void **state) { (void)state; run_dense("none", 0); }
static void test_ring_fp16(void **state) { (void)state; run_dense("fp16", 0); }
static void test_ring_bf16(void **state) { (void)state; run_dense("bf16", 0); }
static void test_ring_int8(void **state) { (void)state; run_dense("int8", 0); }
static void test_ring_int8_stochastic(void **state) { (void)state; run_dense("int8", 1); }

/* Indices of the k largest |x|, ties to the lower index (a full sort here:
 * the reference may be slow). */
static float *g_sort_x;
static int by_magnitude(const void *a, const void *b)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    float x = fabsf(g_sort_x[i]), y = fabsf(g_sort_x[j]);
    if (x != y) return x > y ? -1 : 1;
    return i < j ? -1 : 1;
}

static void test_topk_allgather(void **state)
{
    (void)state;
    sdnn_comm *comm = NULL;
    assert_int_equal(sdnn_comm_open("local", &comm), SDNN_OK);
    const size_t n = 20000;
    for (int W = 2; W <= 5; ++W) {
        world w = make_world(W, n, (uint64_t)W);
        /* A few equal magnitudes to exercise the tie rule. */
        for (int r = 0; r < W; ++r) w.in[r][10] = w.in[r][20] = -w.in[r][30];
        sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
        p.topk_ratio = 0.01;
        size_t wire = 0;
        assert_int_equal(comm->ops->allreduce_mean_coded(comm, &sdnn_codec_topk, &p, 5,
                                                         (const float *const *)w.in, W, w.out, n,
                                                         &wire),
                         SDNN_OK);
        assert_int_equal(wire, (size_t)W * (W - 1) * sdnn_codec_topk.encoded_size(&p, n));
        size_t k = sdnn_codec_topk_k(0.01, n);
        assert_int_equal(k, 200);
        float *expect = calloc(n, sizeof(float));
        size_t *idx = malloc(n * sizeof *idx);
        assert_non_null(expect);
        assert_non_null(idx);
        for (int r = 0; r < W; ++r) {
            for (size_t i = 0; i < n; ++i) idx[i] = i;
            g_sort_x = w.in[r];
            qsort(idx, n, sizeof *idx, by_magnitude);
            for (size_t j = 0; j < k; ++j) expect[idx[j]] += w.in[r][idx[j]];
        }
        const float inv = 1.0f / (float)W;
        for (size_t i = 0; i < n; ++i) expect[i] *= inv;
        for (int r = 0; r < W; ++r) assert_memory_equal(w.out[r], expect, n * sizeof(float));
        free(expect);
        free(idx);
        free_world(&w);
    }
    sdnn_comm_close(comm);
}

/* out may alias in: the result is the same as with separate buffers. */
static void test_in_place(void **state)
{
    (void)state;
    sdnn_comm *comm = NULL;
    assert_int_equal(sdnn_comm_open("local", &comm), SDNN_OK);
    const char *names[] = {"fp16", "int8", "topk"};
    for (int c = 0; c < 3; ++c) {
        const sdnn_codec_ops *codec = sdnn_codec_find(names[c]);
        world w = make_world(3, 5000, 77);
        sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
        assert_int_equal(comm->ops->allreduce_mean_coded(comm, codec, &p, 1,
                                                         (const float *const *)w.in, 3, w.out,
                                                         w.n, NULL),
                         SDNN_OK);
        assert_int_equal(comm->ops->allreduce_mean_coded(comm, codec, &p, 1,
                                                         (const float *const *)w.in, 3, w.in,
                                                         w.n, NULL),
                         SDNN_OK);
        for (int r = 0; r < 3; ++r) assert_memory_equal(w.in[r], w.out[0], w.n * sizeof(float));
        free_world(&w);
    }
    sdnn_comm_close(comm);
}

/* The same inputs and stream give the same bits run after run, also after
 * the pool changed size in between. */
static void test_reproducible(void **state)
{
    (void)state;
    sdnn_comm *comm = NULL;
    assert_int_equal(sdnn_comm_open("local", &comm), SDNN_OK);
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    p.stochastic = 1;
    world a = make_world(4, 3000, 5), b = make_world(3, 100, 6);
    float *first = malloc(a.n * sizeof(float));
    assert_non_null(first);
    assert_int_equal(comm->ops->allreduce_mean_coded(comm, &sdnn_codec_int8, &p, 42,
                                                     (const float *const *)a.in, 4, a.out, a.n,
                                                     NULL), SDNN_OK);
    memcpy(first, a.out[0], a.n * sizeof(float));
    assert_int_equal(comm->ops->allreduce_mean_coded(comm, &sdnn_codec_int8, &p, 42,
                                                     (const float *const *)b.in, 3, b.out, b.n,
                                                     NULL), SDNN_OK);
    assert_int_equal(comm->ops->allreduce_mean_coded(comm, &sdnn_codec_int8, &p, 42,
                                                     (const float *const *)a.in, 4, a.out, a.n,
                                                     NULL), SDNN_OK);
    assert_memory_equal(first, a.out[0], a.n * sizeof(float));
    /* Another stream rounds differently somewhere. */
    assert_int_equal(comm->ops->allreduce_mean_coded(comm, &sdnn_codec_int8, &p, 43,
                                                     (const float *const *)a.in, 4, a.out, a.n,
                                                     NULL), SDNN_OK);
    assert_true(memcmp(first, a.out[0], a.n * sizeof(float)) != 0);
    free(first);
    free_world(&a);
    free_world(&b);
    sdnn_comm_close(comm);
}

static void test_ring_chunks_tile(void **state)
{
    (void)state;
    const size_t ns[] = {0, 1, 5, 256, 257, 1000, 4099};
    const size_t aligns[] = {1, 4, 256};
    for (size_t a = 0; a < 3; ++a)
        for (size_t t = 0; t < sizeof ns / sizeof ns[0]; ++t)
            for (int W = 1; W <= 6; ++W) {
                size_t next_lo = 0;
                for (int c = 0; c < W; ++c) {
                    size_t lo, len;
                    sdnn_ring_chunk(ns[t], aligns[a], W, c, &lo, &len);
                    assert_int_equal(lo, next_lo);
                    if (lo < ns[t]) assert_int_equal(lo % aligns[a], 0);
                    next_lo = lo + len;
                }
                assert_int_equal(next_lo, ns[t]);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_chunks_tile),
        cmocka_unit_test(test_wire_bytes_definition),
        cmocka_unit_test(test_ring_none),
        cmocka_unit_test(test_ring_fp16),
        cmocka_unit_test(test_ring_bf16),
        cmocka_unit_test(test_ring_int8),
        cmocka_unit_test(test_ring_int8_stochastic),
        cmocka_unit_test(test_topk_allgather),
        cmocka_unit_test(test_in_place),
        cmocka_unit_test(test_reproducible),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
