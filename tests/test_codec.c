/*
 * The codecs against independent references: fp16 and bf16 against the
 * rounding definition (nearest representable value, ties to even, checked
 * against both neighbours and at every rounding boundary), int8 against
 * nearbyintf/floorf of x/s and the error bounds of codec.h, topk against a
 * full sort, the vector paths against the scalar conversions bit for bit,
 * and error feedback against exact integer arithmetic and a DGC example
 * worked by hand.
 */
#include "splitmix.h"
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

/* ---- helpers ---------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    return sdnn_splitmix64_next(s);
}

/* Uniform in [0, 1) with 53 bits. */
static double rng_unit(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) * 0x1p-53;
}

/* Random sign, significand in [1, 2), exponent in [lo, hi]. */
static float rng_float(uint64_t *s, int lo, int hi)
{
    int e = lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1));
    float f = ldexpf((float)(1.0 + rng_unit(s)), e);
    return (rng_next(s) & 1) ? -f : f;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float *alloc_floats(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    return p;
}

/* Encodes with the size check every caller wants. */
static unsigned char *encode(const sdnn_codec_ops *c, const sdnn_codec_params *p,
                             const float *x, size_t n, uint64_t stream)
{
    size_t size = c->encoded_size(p, n);
    unsigned char *buf = malloc(size ? size : 1);
    assert_non_null(buf);
    assert_int_equal(c->encode(p, x, n, buf, stream), size);
    return buf;
}

/* ---- registry ---------------------------------------------------------------- */

static void test_registry(void **state)
{
    (void)state;
    const sdnn_codec_ops *all[] = {&sdnn_codec_none, &sdnn_codec_fp16, &sdnn_codec_bf16,
                                   &sdnn_codec_int8, &sdnn_codec_topk};
    const char *names[] = {"none", "fp16", "bf16", "int8", "topk"};
    for (int i = 0; i < 5; ++i) {
        assert_ptr_equal(sdnn_codec_find(names[i]), all[i]);
        assert_string_equal(all[i]->name, names[i]);
        assert_int_equal(all[i]->lossy, i != 0);
        assert_int_equal(all[i]->dense, i != 4);
        assert_non_null(strstr(sdnn_codec_names(), names[i]));
    }
    assert_string_equal(sdnn_codec_names(), "none, fp16, bf16, int8, topk");
    assert_null(sdnn_codec_find("fp12"));
    assert_null(sdnn_codec_find("FP16"));
    assert_null(sdnn_codec_find(""));
    assert_null(sdnn_codec_find(NULL));

    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    assert_int_equal(sdnn_codec_none.encoded_size(&p, 1000), 4000);
    assert_int_equal(sdnn_codec_fp16.encoded_size(&p, 1001), 2002);
    assert_int_equal(sdnn_codec_bf16.encoded_size(&p, 3), 6);
    assert_int_equal(sdnn_codec_int8.encoded_size(&p, 1000), 4 * 4 + 1000);
    assert_int_equal(sdnn_codec_int8.encoded_size(&p, 256), 4 + 256);
    assert_int_equal(sdnn_codec_int8.encoded_size(&p, 0), 0);
    assert_int_equal(sdnn_codec_int8.align(&p), 256);
    assert_int_equal(sdnn_codec_fp16.align(&p), 1);
    p.int8_chunk = 7;
    assert_int_equal(sdnn_codec_int8.encoded_size(&p, 15), 4 * 3 + 15);
    assert_int_equal(sdnn_codec_int8.encoded_size(&p, 14), 4 * 2 + 14);
    assert_int_equal(sdnn_codec_int8.align(&p), 7);
    assert_int_equal(sdnn_codec_topk.encoded_size(&p, 1000), 8 * 10);   /* k = 10 */
    p.topk_ratio = 1.0;
    assert_int_equal(sdnn_codec_topk.encoded_size(&p, 5), 8 * 5);

    assert_int_equal(sdnn_codec_topk_k(0.01, 1000), 10);
    assert_int_equal(sdnn_codec_topk_k(0.01, 1001), 11);
    assert_int_equal(sdnn_codec_topk_k(0.01, 1), 1);
    assert_int_equal(sdnn_codec_topk_k(0.01, 0), 0);
    assert_int_equal(sdnn_codec_topk_k(1.0, 77), 77);
    assert_int_equal(sdnn_codec_topk_k(0.0, 77), 1);
    assert_int_equal(sdnn_codec_topk_k(2.0, 77), 77);
    assert_int_equal(sdnn_codec_topk_k(0.011, 100), 2);
    /* 0.07 * 100 is 7.000000000000001 in double: still 7 entries. */
    assert_int_equal(sdnn_codec_topk_k(0.07, 100), 7);
    assert_int_equal(sdnn_codec_topk_k(0.29, 100), 29);
}

/* ---- fp16 -------------------------------------------------------------------- */

typedef struct {
    float x;
    uint16_t h;
} f16_case;

static void test_fp16_special_values(void **state)
{
    (void)state;
    const f16_case cases[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {0.1f, 0x2e66},
        {1.0f + 0x1p-11f, 0x3c00},          /* tie, to even (down) */
        {1.0f + 3 * 0x1p-11f, 0x3c02},      /* tie, to even (up) */
        {65504.0f, 0x7bff},                 /* largest binary16 */
        {65519.0f, 0x7bff},
        {65519.996f, 0x7bff},
        {65520.0f, 0x7c00},                 /* tie with 2^16: infinity */
        {-65520.0f, 0xfc00},
        {1e10f, 0x7c00},
        {FLT_MAX, 0x7c00},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {0x1p-14f, 0x0400},                 /* smallest normal */
        {0x1p-24f, 0x0001},                 /* smallest subnormal */
        {-0x1p-24f, 0x8001},
        {1023 * 0x1p-24f, 0x03ff},          /* largest subnormal */
        {1023.5f * 0x1p-24f, 0x0400},       /* tie, to even: the smallest normal */
        {1.5f * 0x1p-24f, 0x0002},          /* tie between 1 and 2 */
        {2.5f * 0x1p-24f, 0x0002},          /* tie between 2 and 3 */
        {0x1p-25f, 0x0000},                 /* tie between 0 and 2^-24 */
        {-0x1p-25f, 0x8000},
        {0x1.000002p-25f, 0x0001},          /* just above the tie */
        {0x1p-26f, 0x0000},
        {1e-40f, 0x0000},                   /* float subnormals */
        {-1e-40f, 0x8000},
        {FLT_TRUE_MIN, 0x0000},
    };
    size_t nc = sizeof cases / sizeof cases[0];
    /* Through the codec with the cases repeated so the vector loop sees
     * them, and through the scalar conversion. */
    size_t n = nc * 5;
    float *x = alloc_floats(n);
    for (size_t i = 0; i < n; ++i) x[i] = cases[i % nc].x;
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    unsigned char *buf = encode(&sdnn_codec_fp16, &p, x, n, 0);
    for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        memcpy(&h, buf + 2 * i, 2);
        if (h != cases[i % nc].h)
            fail_msg("fp16(%a) = 0x%04x, expected 0x%04x", (double)x[i], h, cases[i % nc].h);
        assert_int_equal(sdnn_f32_to_f16(x[i]), cases[i % nc].h);
    }
    free(buf);
    free(x);

    assert_true(isinf(sdnn_f16_to_f32(0x7c00)) && sdnn_f16_to_f32(0x7c00) > 0);
    assert_true(isinf(sdnn_f16_to_f32(0xfc00)) && sdnn_f16_to_f32(0xfc00) < 0);
    assert_true(sdnn_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(sdnn_f16_to_f32(0x83ff) == -1023 * 0x1p-24f);
    assert_true(sdnn_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(sdnn_f16_to_f32(0x8000) == 0 && signbit(sdnn_f16_to_f32(0x8000)));

    /* NaN stays a quiet NaN with its sign, also a signalling one. */
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; ++i) {
        uint16_t h = sdnn_f32_to_f16(from_bits(nans[i]));
        assert_int_equal(h & 0x7c00, 0x7c00);
        assert_true(h & 0x0200);
        assert_int_equal(h >> 15, nans[i] >> 31);
        float back = sdnn_f16_to_f32(h);
        assert_true(isnan(back));
        assert_int_equal(bits(back) >> 31, nans[i] >> 31);
    }
    /* The vector path keeps the same NaN bits as the scalar one. */
    float xn[64];
    uint64_t seed = 3;
    for (int i = 0; i < 64; ++i)
        xn[i] = from_bits(0x7f800000u | (uint32_t)(rng_next(&seed) & 0x807fffffu) | (i == 0));
    unsigned char hn[128];
    sdnn_codec_fp16.encode(&p, xn, 64, hn, 0);
    for (int i = 0; i < 64; ++i) {
        uint16_t h;
        memcpy(&h, hn + 2 * i, 2);
        if (!isnan(xn[i])) continue;
        if (h != sdnn_f32_to_f16(xn[i]))
            fail_msg("fp16 NaN %08x: vector 0x%04x, scalar 0x%04x", bits(xn[i]), h,
                     sdnn_f32_to_f16(xn[i]));
    }
}

/* x - f16(x) against the next binary16 values on both sides: nothing is
 * closer, and at a tie the even one was chosen. */
static void check_f16_nearest(float x, uint16_t h)
{
    assert_int_equal(h >> 15, bits(x) >> 31);
    uint16_t mag = h & 0x7fff, sign = h & 0x8000;
    assert_true(mag < 0x7c00);
    double err = fabs((double)x - (double)sdnn_f16_to_f32(h));
    if (mag < 0x7bff) {
        double e = fabs((double)x - (double)sdnn_f16_to_f32((uint16_t)(sign | (mag + 1))));
        assert_true(err <= e);
        if (err == e) assert_int_equal(mag & 1, 0);
    }
    if (mag > 0) {
        double e = fabs((double)x - (double)sdnn_f16_to_f32((uint16_t)(sign | (mag - 1))));
        assert_true(err <= e);
        if (err == e) assert_int_equal(mag & 1, 0);
    }
    /* codec.h's bound: half an ulp of binary16 at x, 2^(e-11) for
     * 2^e <= |x| < 2^(e+1) (so <= 2^-11 |x|), 2^-25 below 2^-14. */
    double ax = fabs((double)x);
    int e2;
    frexp(ax, &e2);
    double bound = ax >= 0x1p-14 ? ldexp(1.0, e2 - 12) : 0x1p-25;
    assert_true(bound <= fmax(0x1p-11 * ax, 0x1p-25));
    if (err > bound) fail_msg("fp16 error %g at %a exceeds %g", err, (double)x, bound);
}

static void test_fp16_random_nearest(void **state)
{
    (void)state;
    const size_t n = 100003;   /* odd: the vector loop leaves a tail */
    uint64_t seed = 11;
    float *x = alloc_floats(n), *y = alloc_floats(n);
    for (size_t i = 0; i < n; ++i) {
        switch (i % 4) {
        case 0: x[i] = rng_float(&seed, -14, 14); break;          /* normal */
        case 1: x[i] = rng_float(&seed, -26, -15); break;         /* subnormal range */
        case 2: x[i] = rng_float(&seed, -40, 5); break;           /* anything */
        default: x[i] = (float)((rng_unit(&seed) - 0.5) * 131038.0); break; /* |x| < 65519 */
        }
    }
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    unsigned char *buf = encode(&sdnn_codec_fp16, &p, x, n, 0);
    sdnn_codec_fp16.decode(&p, buf, n, y);
    size_t subnormal = 0;
    for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        memcpy(&h, buf + 2 * i, 2);
        /* Vector path == scalar reference, both ways. */
        if (h != sdnn_f32_to_f16(x[i]))
            fail_msg("fp16 encode of %a: 0x%04x, scalar 0x%04x", (double)x[i], h,
                     sdnn_f32_to_f16(x[i]));
        assert_int_equal(bits(y[i]), bits(sdnn_f16_to_f32(h)));
        check_f16_nearest(x[i], h);
        subnormal += (h & 0x7c00) == 0 && (h & 0x3ff) != 0;
    }
    assert_true(subnormal > n / 8);
    free(buf);
    free(x);
    free(y);
}

/* Every binary16 value: decode (vector) == scalar; every finite value
 * survives the round trip; around every boundary between neighbours the
 * midpoint goes to the even one and the floats beside it to their side. */
static void test_fp16_exhaustive(void **state)
{
    (void)state;
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    unsigned char codes[2 * 65536];
    float *y = alloc_floats(65536);
    for (uint32_t h = 0; h < 65536; ++h) {
        uint16_t v = (uint16_t)h;
        memcpy(codes + 2 * h, &v, 2);
    }
    sdnn_codec_fp16.decode(&p, codes, 65536, y);
    unsigned char *back = encode(&sdnn_codec_fp16, &p, y, 65536, 0);
    for (uint32_t h = 0; h < 65536; ++h) {
        float ref = sdnn_f16_to_f32((uint16_t)h);
        if (bits(y[h]) != bits(ref))
            fail_msg("decode 0x%04x: %08x, scalar %08x", h, bits(y[h]), bits(ref));
        uint16_t r;
        memcpy(&r, back + 2 * h, 2);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            assert_true(isnan(ref));
            assert_int_equal(r & 0x7c00, 0x7c00);
            assert_true(r & 0x3ff);
        } else {
            assert_int_equal(r, h);
        }
    }
    free(back);
    for (uint16_t h = 0; h < 0x7bff; ++h) {
        double lo = sdnn_f16_to_f32(h), hi = sdnn_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2);   /* exact: 12 significant bits */
        assert_true((double)mid == (lo + hi) / 2);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
        assert_int_equal(sdnn_f32_to_f16(mid), even);
        assert_int_equal(sdnn_f32_to_f16(nextafterf(mid, 0)), h);
        assert_int_equal(sdnn_f32_to_f16(nextafterf(mid, INFINITY)), h + 1);
        assert_int_equal(sdnn_f32_to_f16(-mid), 0x8000 | even);
    }
    free(y);
}

/* ---- bf16 -------------------------------------------------------------------- */

static void test_bf16_special_values(void **state)
{
    (void)state;
    const struct {
        uint32_t x;
        uint16_t h;
    } cases[] = {
        {0x00000000u, 0x0000},   /* 0 */
        {0x80000000u, 0x8000},   /* -0 */
        {0x3f800000u, 0x3f80},   /* 1 */
        {0x3f808000u, 0x3f80},   /* tie, to even (down) */
        {0x3f818000u, 0x3f82},   /* tie, to even (up) */
        {0x3f808001u, 0x3f81},
        {0x7f7f0000u, 0x7f7f},   /* largest bf16 */
        {0x7f7f7fffu, 0x7f7f},
        {0x7f7f8000u, 0x7f80},   /* tie with 2^128: infinity */
        {0x7f7fffffu, 0x7f80},   /* FLT_MAX overflows */
        {0xff7fffffu, 0xff80},
        {0x7f800000u, 0x7f80},   /* inf */
        {0xff800000u, 0xff80},
        {0x00000001u, 0x0000},   /* float subnormals round like the rest */
        {0x00008000u, 0x0000},   /* tie, to even 0 */
        {0x00008001u, 0x0001},
        {0x00018000u, 0x0002},   /* tie, to even 2 */
        {0x807fffffu, 0x8080},   /* largest subnormal rounds to -FLT_MIN */
    };
    size_t nc = sizeof cases / sizeof cases[0];
    size_t n = nc * 5;
    float *x = alloc_floats(n);
    for (size_t i = 0; i < n; ++i) x[i] = from_bits(cases[i % nc].x);
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    unsigned char *buf = encode(&sdnn_codec_bf16, &p, x, n, 0);
    for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        memcpy(&h, buf + 2 * i, 2);
        if (h != cases[i % nc].h)
            fail_msg("bf16(%08x) = 0x%04x, expected 0x%04x", cases[i % nc].x, h, cases[i % nc].h);
        assert_int_equal(sdnn_f32_to_bf16(x[i]), h);
    }
    free(buf);
    free(x);
    assert_true(sdnn_bf16_to_f32(0x7f7f) == from_bits(0x7f7f0000u));
    assert_true(isinf(sdnn_bf16_to_f32(0xff80)) && sdnn_bf16_to_f32(0xff80) < 0);
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; ++i) {
        uint16_t h = sdnn_f32_to_bf16(from_bits(nans[i]));
        assert_true(isnan(sdnn_bf16_to_f32(h)));
        assert_true(h & 0x0040);                      /* quiet */
        assert_int_equal(h >> 15, nans[i] >> 31);
    }
    /* The vector path: NaNs with any payload, low bits included (rounding
     * them like numbers would carry into infinity). */
    float xn[64];
    uint64_t seed = 4;
    for (int i = 0; i < 64; ++i)
        xn[i] = from_bits(0x7f800000u | (uint32_t)(rng_next(&seed) & 0x8000ffffu) | 1u);
    unsigned char hn[128];
    sdnn_codec_bf16.encode(&p, xn, 64, hn, 0);
    for (int i = 0; i < 64; ++i) {
        uint16_t h;
        memcpy(&h, hn + 2 * i, 2);
        assert_int_equal(h, sdnn_f32_to_bf16(xn[i]));
        assert_true(isnan(sdnn_bf16_to_f32(h)));
    }
}

static void test_bf16_random_nearest(void **state)
{
    (void)state;
    const size_t n = 100003;
    uint64_t seed = 12;
    float *x = alloc_floats(n), *y = alloc_floats(n);
    for (size_t i = 0; i < n; ++i) {
        if (i % 8 == 7) x[i] = from_bits((uint32_t)(rng_next(&seed) & 0x807fffffu)); /* subnormal */
        else x[i] = rng_float(&seed, -126, 126);
    }
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    unsigned char *buf = encode(&sdnn_codec_bf16, &p, x, n, 0);
    sdnn_codec_bf16.decode(&p, buf, n, y);
    for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        memcpy(&h, buf + 2 * i, 2);
        assert_int_equal(h, sdnn_f32_to_bf16(x[i]));
        assert_int_equal(bits(y[i]), (uint32_t)h << 16);
        assert_int_equal(h >> 15, bits(x[i]) >> 31);
        uint16_t mag = h & 0x7fff, sign = h & 0x8000;
        double err = fabs((double)x[i] - (double)y[i]);
        for (int d = -1; d <= 1; d += 2) {
            if ((d < 0 && mag == 0) || (d > 0 && mag >= 0x7f7f)) continue;
            double e = fabs((double)x[i] -
                            (double)sdnn_bf16_to_f32((uint16_t)(sign | (uint16_t)(mag + d))));
            assert_true(err <= e);
            if (err == e) assert_int_equal(mag & 1, 0);
        }
        /* Half an ulp of the 8-bit significand: 2^(e-8) for 2^e <= |x| <
         * 2^(e+1), so at most 2^-8 |x|.  (codec.h says 2^-9 |x|, which
         * round to nearest cannot keep: 1.0670 * 2^-88 is 0.42 ulp, i.e.
         * 3.07e-3 |x|, from its nearest bf16.)  In the float subnormal
         * range the spacing is 2^-133, so half of it. */
        int e2;
        frexp(fabs((double)x[i]), &e2);
        double bound = fabs(x[i]) >= FLT_MIN ? ldexp(1.0, e2 - 9) : 0x1p-134;
        assert_true(bound <= 0x1p-8 * fabs((double)x[i]) || fabs(x[i]) < FLT_MIN);
        if (err > bound) fail_msg("bf16 error %g at %a exceeds %g", err, (double)x[i], bound);
    }
    free(buf);
    free(x);
    free(y);
}

static void test_bf16_exhaustive(void **state)
{
    (void)state;
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    unsigned char codes[2 * 65536];
    float *y = alloc_floats(65536);
    for (uint32_t h = 0; h < 65536; ++h) {
        uint16_t v = (uint16_t)h;
        memcpy(codes + 2 * h, &v, 2);
    }
    sdnn_codec_bf16.decode(&p, codes, 65536, y);
    for (uint32_t h = 0; h < 65536; ++h) assert_int_equal(bits(y[h]), h << 16);
    for (uint32_t h = 0; h < 0x7f7f; ++h) {
        uint32_t mid = (h << 16) | 0x8000u;
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        assert_int_equal(sdnn_f32_to_bf16(from_bits(mid)), even);
        assert_int_equal(sdnn_f32_to_bf16(from_bits(mid - 1)), h);
        assert_int_equal(sdnn_f32_to_bf16(from_bits(mid + 1)), h + 1);
        assert_int_equal(sdnn_f32_to_bf16(from_bits(mid | 0x80000000u)), 0x8000 | even);
    }
    free(y);
}

/* ---- int8 -------------------------------------------------------------------- */

static float chunk_scale(const unsigned char *buf, size_t c)
{
    float s;
    memcpy(&s, buf + 4 * c, 4);
    return s;
}

/* Chunks 1, 7 and 256 over n = 1000 (ragged last chunk for 7 and 256), one
 * chunk of zeros and one of -0: scale = max|x|/127, q = nearbyint(x/s), and
 * |x - y| <= s/2 + 2^-22 max|x| (the slack covers the rounding of x/s and
 * of s*q, each at most half a float ulp). */
static void test_int8_nearest_bound(void **state)
{
    (void)state;
    const size_t n = 1000;
    const int chunks[] = {1, 7, 256};
    uint64_t seed = 21;
    float *x = alloc_floats(n), *y = alloc_floats(n);
    for (int ci = 0; ci < 3; ++ci) {
        size_t chunk = (size_t)chunks[ci], nch = (n + chunk - 1) / chunk;
        for (size_t i = 0; i < n; ++i) {
            /* Magnitudes change per chunk so every scale differs. */
            int e = (int)((i / chunk) % 40) - 30;
            x[i] = rng_float(&seed, e - 8, e);
        }
        size_t zero_chunk = nch / 2, mzero_chunk = nch / 3;
        for (size_t i = zero_chunk * chunk; i < (zero_chunk + 1) * chunk && i < n; ++i) x[i] = 0;
        for (size_t i = mzero_chunk * chunk; i < (mzero_chunk + 1) * chunk && i < n; ++i)
            x[i] = -0.0f;
        sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
        p.int8_chunk = chunks[ci];
        unsigned char *buf = encode(&sdnn_codec_int8, &p, x, n, 0);
        assert_int_equal(sdnn_codec_int8.encoded_size(&p, n), 4 * nch + n);
        sdnn_codec_int8.decode(&p, buf, n, y);
        const int8_t *q = (const int8_t *)(buf + 4 * nch);
        for (size_t c = 0; c < nch; ++c) {
            size_t lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
            float m = 0;
            for (size_t i = lo; i < hi; ++i) m = fmaxf(m, fabsf(x[i]));
            float s = chunk_scale(buf, c);
            assert_true(s == m / 127.0f);
            if (c == zero_chunk || c == mzero_chunk) assert_true(s == 0);
            for (size_t i = lo; i < hi; ++i) {
                float ref = s > 0 ? nearbyintf(x[i] * (127.0f / m)) : 0;
                ref = fminf(fmaxf(ref, -127), 127);
                assert_int_equal(q[i], (int)ref);
                double err = fabs((double)x[i] - (double)y[i]);
                double bound = 0.5 * s + 0x1p-22 * m;
                if (err > bound)
                    fail_msg("int8 chunk %zu: |%a - %a| > s/2 (s = %a)", chunk, (double)x[i],
                             (double)y[i], (double)s);
                if (s == 0) assert_true(y[i] == 0);
            }
        }
        free(buf);
    }
    free(x);
    free(y);
}

/* One value per draw is not enough to see bias, many streams are: the error
 * e = s*q - x of one draw lies in (-s, s) and has standard deviation at most
 * s/2 (a two-point distribution one s apart), so the mean of N independent
 * draws is within 5 s / (2 sqrt N) of its expectation 0 except with
 * probability below 1e-6; the generator's 24-bit u adds a bias below
 * 2^-24 s.  Nearest rounding of the same values fails that bound. */
static void test_int8_stochastic_unbiased(void **state)
{
    (void)state;
    enum { N = 20000, M = 8 };
    const float x[M] = {1.0f, 0.3f, -0.77f, 0.001f, -0.5f, 0.25f, 1e-4f, -0.999f};
    const float s = 1.0f / 127.0f;
    double sum_err[M] = {0}, sum_near[M] = {0};
    float y[M];
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    p.int8_chunk = 256;
    p.stochastic = 1;
    p.seed = 1234;
    sdnn_codec_params pn = p;
    pn.stochastic = 0;
    unsigned char buf[4 + M];
    for (uint64_t stream = 0; stream < N; ++stream) {
        assert_int_equal(sdnn_codec_int8.encode(&p, x, M, buf, stream), sizeof buf);
        assert_true(chunk_scale(buf, 0) == s);
        sdnn_codec_int8.decode(&p, buf, M, y);
        for (int i = 0; i < M; ++i) {
            double e = (double)y[i] - (double)x[i];
            assert_true(fabs(e) < s * (1 + 1e-6));
            sum_err[i] += e;
        }
        sdnn_codec_int8.encode(&pn, x, M, buf, stream);
        sdnn_codec_int8.decode(&pn, buf, M, y);
        for (int i = 0; i < M; ++i) sum_near[i] += (double)y[i] - (double)x[i];
    }
    double bound = 5.0 * s / (2.0 * sqrt((double)N)) + 1e-6 * s;
    int near_fails = 0;
    for (int i = 0; i < M; ++i) {
        double mean = sum_err[i] / N;
        if (fabs(mean) > bound)
            fail_msg("stochastic int8 of %g: mean error %g over %d draws, bound %g", (double)x[i],
                     mean, N, bound);
        near_fails += fabs(sum_near[i] / N) > bound;
    }
    assert_true(near_fails >= 4);   /* the bound can tell a biased rounding */
}

/* q == floor(x/s + u(seed, stream, i)) with the public generator; same
 * seed and stream give the same bytes, other streams or seeds others. */
static void test_int8_stochastic_reproducible(void **state)
{
    (void)state;
    const size_t n = 5000;
    uint64_t seed = 22;
    float *x = alloc_floats(n), *y = alloc_floats(n);
    for (size_t i = 0; i < n; ++i) x[i] = rng_float(&seed, -12, 3);
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    p.int8_chunk = 100;
    p.stochastic = 1;
    p.seed = 99;
    size_t nch = n / 100;
    unsigned char *a = encode(&sdnn_codec_int8, &p, x, n, 7);
    unsigned char *b = encode(&sdnn_codec_int8, &p, x, n, 7);
    unsigned char *c = encode(&sdnn_codec_int8, &p, x, n, 8);
    assert_memory_equal(a, b, sdnn_codec_int8.encoded_size(&p, n));
    assert_memory_not_equal(a + 4 * nch, c + 4 * nch, n);
    p.seed = 100;
    unsigned char *d = encode(&sdnn_codec_int8, &p, x, n, 7);
    assert_memory_not_equal(a + 4 * nch, d + 4 * nch, n);
    p.seed = 99;
    sdnn_codec_int8.decode(&p, a, n, y);
    const int8_t *q = (const int8_t *)(a + 4 * nch);
    for (size_t i = 0; i < n; ++i) {
        float s = chunk_scale(a, i / 100);
        float m = 0;
        for (size_t j = i / 100 * 100; j < i / 100 * 100 + 100 && j < n; ++j) m = fmaxf(m, fabsf(x[j]));
        float u = sdnn_codec_uniform(99, 7, i);
        assert_true(u >= 0 && u < 1);
        float ref = fminf(fmaxf(floorf(x[i] * (127.0f / m) + u), -127), 127);
        assert_int_equal(q[i], (int)ref);
        assert_true(fabs((double)x[i] - (double)y[i]) < s * (1 + 1e-6));
    }
    /* The generator: a pure function, roughly uniform. */
    double sum = 0;
    for (uint64_t i = 0; i < 100000; ++i) {
        float u = sdnn_codec_uniform(5, 6, i);
        assert_true(u >= 0 && u < 1);
        sum += u;
    }
    assert_true(fabs(sum / 100000 - 0.5) < 0.005);
    assert_true(sdnn_codec_uniform(5, 6, 7) == sdnn_codec_uniform(5, 6, 7));
    assert_true(sdnn_codec_uniform(5, 6, 7) != sdnn_codec_uniform(5, 7, 7));
    free(a); free(b); free(c); free(d);
    free(x);
    free(y);
}

/* A chunk holding inf or NaN decodes to NaN; the other chunks are exact as usual. */
static void test_int8_nonfinite_chunk(void **state)
{
    (void)state;
    float x[12] = {1, 2, 3, INFINITY, 1, 2, 3, 4, NAN, 1, 1, 1};
    float y[12];
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    p.int8_chunk = 4;
    for (int st = 0; st < 2; ++st) {
        p.stochastic = st;
        unsigned char *buf = encode(&sdnn_codec_int8, &p, x, 12, 3);
        sdnn_codec_int8.decode(&p, buf, 12, y);
        for (int i = 0; i < 4; ++i) assert_true(isnan(y[i]));
        for (int i = 8; i < 12; ++i) assert_true(isnan(y[i]));
        for (int i = 4; i < 8; ++i) assert_true(fabsf(y[i] - x[i]) <= 4.0f / 127 * 1.000001f);
        free(buf);
    }
}

/* ---- topk -------------------------------------------------------------------- */

typedef struct {
    float mag;
    uint32_t idx;
} mag_idx;

static int by_mag_desc_idx_asc(const void *a, const void *b)
{
    const mag_idx *x = a, *y = b;
    if (x->mag != y->mag) return x->mag < y->mag ? 1 : -1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static int by_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Encodes, then compares with a full sort: exactly k entries, indices
 * ascending and unique, the k largest magnitudes with ties to the lowest
 * indices, exact values; decode puts them back and zeros elsewhere. */
static void check_topk(const float *x, size_t n, double ratio)
{
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    p.topk_ratio = ratio;
    size_t k = sdnn_codec_topk_k(ratio, n);
    assert_true(k >= 1 && k <= n);
    unsigned char *buf = encode(&sdnn_codec_topk, &p, x, n, 0);
    assert_int_equal(sdnn_codec_topk.encoded_size(&p, n), 8 * k);
    mag_idx *ref = malloc(n * sizeof *ref);
    uint32_t *want = malloc(k * sizeof *want);
    float *y = alloc_floats(n);
    assert_non_null(ref);
    assert_non_null(want);
    for (size_t i = 0; i < n; ++i) ref[i] = (mag_idx){fabsf(x[i]), (uint32_t)i};
    qsort(ref, n, sizeof *ref, by_mag_desc_idx_asc);
    for (size_t j = 0; j < k; ++j) want[j] = ref[j].idx;
    qsort(want, k, sizeof *want, by_u32);
    for (size_t j = 0; j < k; ++j) {
        uint32_t idx;
        float v;
        memcpy(&idx, buf + 4 * j, 4);
        memcpy(&v, buf + 4 * k + 4 * j, 4);
        if (j) assert_true(idx > want[j - 1]);
        if (idx != want[j])
            fail_msg("topk n=%zu k=%zu entry %zu: index %u, expected %u", n, k, j, idx, want[j]);
        assert_int_equal(bits(v), bits(x[idx]));
    }
    sdnn_codec_topk.decode(&p, buf, n, y);
    size_t j = 0;
    for (size_t i = 0; i < n; ++i) {
        if (j < k && want[j] == i) {
            assert_int_equal(bits(y[i]), bits(x[i]));
            ++j;
        } else {
            assert_int_equal(bits(y[i]), 0);
        }
    }
    free(y);
    free(want);
    free(ref);
    free(buf);
}

static void test_topk_selection(void **state)
{
    (void)state;
    const size_t n = 10007;
    uint64_t seed = 31;
    float *x = alloc_floats(n);
    /* Distinct magnitudes over a wide range, zeros and subnormals. */
    for (size_t i = 0; i < n; ++i) x[i] = rng_float(&seed, -140, 20);
    for (size_t i = 0; i < n; i += 97) x[i] = (i & 1) ? -0.0f : 0.0f;
    const double ratios[] = {0.0001, 0.001, 0.01, 0.1, 0.5, 0.999, 1.0};
    for (size_t r = 0; r < sizeof ratios / sizeof ratios[0]; ++r) check_topk(x, n, ratios[r]);
    /* Gaussian-like values of one scale, the usual gradient. */
    for (size_t i = 0; i < n; ++i)
        x[i] = (float)((rng_unit(&seed) + rng_unit(&seed) + rng_unit(&seed) - 1.5) * 0.01);
    for (size_t r = 0; r < sizeof ratios / sizeof ratios[0]; ++r) check_topk(x, n, ratios[r]);
    /* Many ties: small integers with signs, the threshold falls inside a
     * run of equal magnitudes. */
    for (size_t i = 0; i < n; ++i) x[i] = (float)((int)(rng_next(&seed) % 9) - 4);
    for (size_t r = 0; r < sizeof ratios / sizeof ratios[0]; ++r) check_topk(x, n, ratios[r]);
    /* All equal: the first k indices. */
    for (size_t i = 0; i < n; ++i) x[i] = (i & 1) ? 2.5f : -2.5f;
    check_topk(x, n, 0.01);
    /* Magnitudes equal in their top bits, different in the last few: the
     * selection must reach the last level. */
    for (size_t i = 0; i < n; ++i) x[i] = from_bits(0x3f800000u | (uint32_t)(rng_next(&seed) & 0x1ffu));
    check_topk(x, n, 0.01);
    check_topk(x, n, 0.3);
    /* Tiny sizes. */
    float one = -3.0f;
    check_topk(&one, 1, 0.01);
    float two[2] = {1.0f, -1.0f};
    check_topk(two, 2, 0.01);
    check_topk(two, 2, 1.0);
    float three[3] = {0.0f, -0.0f, 0.0f};
    check_topk(three, 3, 0.5);
    free(x);
}

/* ---- decode_add / accumulate, all codecs -------------------------------------- */

/* decode_add == decoded + add bit for bit (also in place), accumulate ==
 * decoded + y, and unaligned encoded buffers give the same bytes. */
static void test_decode_add_accumulate(void **state)
{
    (void)state;
    const size_t n = 3001;
    uint64_t seed = 41;
    float *x = alloc_floats(n), *a = alloc_floats(n), *d = alloc_floats(n);
    float *y = alloc_floats(n), *z = alloc_floats(n);
    for (size_t i = 0; i < n; ++i) {
        x[i] = rng_float(&seed, -10, 2);
        a[i] = rng_float(&seed, -10, 2);
    }
    const sdnn_codec_ops *all[] = {&sdnn_codec_none, &sdnn_codec_fp16, &sdnn_codec_bf16,
                                   &sdnn_codec_int8, &sdnn_codec_topk};
    for (int c = 0; c < 5; ++c) {
        for (int stochastic = 0; stochastic < 2; ++stochastic) {
            sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
            p.int8_chunk = 100;
            p.stochastic = stochastic;
            p.topk_ratio = 0.05;
            const sdnn_codec_ops *ops = all[c];
            size_t size = ops->encoded_size(&p, n);
            unsigned char *buf = encode(ops, &p, x, n, 5);
            all[c]->decode(&p, buf, n, d);
            if (c == 0) assert_memory_equal(d, x, n * sizeof(float));
            ops->decode_add(&p, buf, n, a, y);
            for (size_t i = 0; i < n; ++i) assert_int_equal(bits(y[i]), bits(d[i] + a[i]));
            memcpy(z, a, n * sizeof(float));
            ops->decode_add(&p, buf, n, z, z);
            assert_memory_equal(z, y, n * sizeof(float));
            memcpy(z, a, n * sizeof(float));
            ops->accumulate(&p, buf, n, z);
            assert_memory_equal(z, y, n * sizeof(float));
            /* Unaligned encoded buffer. */
            unsigned char *odd = malloc(size + 1);
            assert_non_null(odd);
            assert_int_equal(ops->encode(&p, x, n, odd + 1, 5), size);
            assert_memory_equal(odd + 1, buf, size);
            ops->decode(&p, odd + 1, n, z);
            assert_memory_equal(z, d, n * sizeof(float));
            ops->decode_add(&p, odd + 1, n, a, z);
            assert_memory_equal(z, y, n * sizeof(float));
            free(odd);
            free(buf);
        }
    }
    free(x); free(a); free(d); free(y); free(z);
}

/* ---- error feedback ---------------------------------------------------------- */

/* Integer gradients keep every float sum exact, so the invariants hold bit
 * for bit: sent + residual == g + previous residual at every step, and over
 * the run sum(sent) + final residual == sum(g). */
static void test_ef_topk_exact(void **state)
{
    (void)state;
    const size_t n = 1000;
    uint64_t seed = 51;
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    p.topk_ratio = 0.05;
    size_t k = sdnn_codec_topk_k(p.topk_ratio, n);
    float *g = alloc_floats(n), *r = alloc_floats(n), *gin = alloc_floats(n), *rin = alloc_floats(n);
    double *sum_in = calloc(n, sizeof *sum_in), *sum_sent = calloc(n, sizeof *sum_sent);
    assert_non_null(sum_in);
    assert_non_null(sum_sent);
    unsigned char *scratch = malloc(sdnn_codec_topk.encoded_size(&p, n));
    assert_non_null(scratch);
    memset(r, 0, n * sizeof(float));
    for (int step = 0; step < 100; ++step) {
        for (size_t i = 0; i < n; ++i) {
            g[i] = (float)((int)(rng_next(&seed) % 101) - 50);
            sum_in[i] += g[i];
        }
        memcpy(gin, g, n * sizeof(float));
        memcpy(rin, r, n * sizeof(float));
        sdnn_codec_ef_step(&sdnn_codec_topk, &p, g, r, NULL, 0, n, scratch, (uint64_t)step);
        size_t sent = 0;
        for (size_t i = 0; i < n; ++i) {
            float want = gin[i] + rin[i], got = g[i] + r[i];
            if (bits(got) != bits(want))
                fail_msg("step %d element %zu: sent %g + residual %g != %g", step, i,
                         (double)g[i], (double)r[i], (double)want);
            sum_sent[i] += g[i];
        }
        /* The entries sent are the ones in scratch, their residual is 0. */
        for (size_t j = 0; j < k; ++j) {
            uint32_t idx;
            memcpy(&idx, scratch + 4 * j, 4);
            assert_true(idx < n);
            assert_true(r[idx] == 0);
            assert_int_equal(bits(g[idx]), bits(gin[idx] + rin[idx]));
            ++sent;
        }
        size_t nonzero = 0;
        for (size_t i = 0; i < n; ++i) nonzero += g[i] != 0;
        assert_true(nonzero <= k);
        assert_int_equal(sent, k);
    }
    for (size_t i = 0; i < n; ++i) assert_true(sum_sent[i] + r[i] == sum_in[i]);
    free(g); free(r); free(gin); free(rin); free(sum_in); free(sum_sent); free(scratch);
}

/* A gradient every step that the codec rounds the same way (fp16: 1 + 2^-12
 * rounds to 1; int8: 0.3 in a chunk of scale 1 rounds to 0).  Without error
 * feedback the total sent drifts by 100 roundings; with it the total stays
 * within one codec rounding (plus float sums) of the true total, at every
 * step. */
static void run_ef_dense(const sdnn_codec_ops *c, const sdnn_codec_params *p, const float *g0,
                         size_t n, double bound)
{
    float *g = alloc_floats(n), *r = alloc_floats(n), *plain = alloc_floats(n);
    double *sum_in = calloc(n, sizeof *sum_in), *sum_ef = calloc(n, sizeof *sum_ef);
    double *sum_plain = calloc(n, sizeof *sum_plain);
    unsigned char *scratch = malloc(c->encoded_size(p, n));
    assert_non_null(sum_in);
    assert_non_null(sum_ef);
    assert_non_null(sum_plain);
    assert_non_null(scratch);
    memset(r, 0, n * sizeof(float));
    double worst_ef = 0, worst_plain = 0;
    for (int step = 0; step < 100; ++step) {
        memcpy(g, g0, n * sizeof(float));
        sdnn_codec_ef_step(c, p, g, r, NULL, 0, n, scratch, (uint64_t)step);
        c->encode(p, g0, n, scratch, (uint64_t)step);
        c->decode(p, scratch, n, plain);
        for (size_t i = 0; i < n; ++i) {
            sum_in[i] += g0[i];
            sum_ef[i] += g[i];
            sum_plain[i] += plain[i];
            double e = fabs(sum_ef[i] + r[i] - sum_in[i]);
            if (e > bound) fail_msg("%s step %d: EF total off by %g", c->name, step, e);
            worst_ef = fmax(worst_ef, fabs(sum_ef[i] - sum_in[i]));
        }
    }
    for (size_t i = 0; i < n; ++i) worst_plain = fmax(worst_plain, fabs(sum_plain[i] - sum_in[i]));
    /* The sent total alone, without the residual still held back, is
     * within one codec step (the residual's size) with EF. */
    if (!(worst_ef * 4 < worst_plain))
        fail_msg("%s: EF drift %g not below plain drift %g / 4", c->name, worst_ef, worst_plain);
    free(g); free(r); free(plain); free(sum_in); free(sum_ef); free(sum_plain); free(scratch);
}

static void test_ef_dense_bounded(void **state)
{
    (void)state;
    enum { N = 300 };
    float g0[N];
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    /* fp16: 1 + 2^-12 (and its negative) rounds to 1; drift 100 * 2^-12. */
    for (int i = 0; i < N; ++i) g0[i] = (i & 1) ? -(1.0f + 0x1p-12f) : 1.0f + 0x1p-12f;
    run_ef_dense(&sdnn_codec_fp16, &p, g0, N, 1e-4);
    run_ef_dense(&sdnn_codec_bf16, &p, g0, N, 1e-4);
    /* int8 with scale 1 (one 127 per chunk): 0.3 rounds to 0; drift 30. */
    for (int i = 0; i < N; ++i) g0[i] = (i % 100 == 0) ? 127.0f : (i & 1) ? 0.3f : -0.3f;
    p.int8_chunk = 100;
    run_ef_dense(&sdnn_codec_int8, &p, g0, N, 1e-3);
}

/* The identity codec: nothing held back. */
static void test_ef_none(void **state)
{
    (void)state;
    float g[5] = {1, -2, 3.5f, 1e-30f, 0}, g0[5], r[5] = {9, 9, 9, 9, 9};
    memcpy(g0, g, sizeof g);
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    unsigned char scratch[20];
    sdnn_codec_ef_step(&sdnn_codec_none, &p, g, r, NULL, 0, 5, scratch, 0);
    assert_memory_equal(g, g0, sizeof g);
    for (int i = 0; i < 5; ++i) assert_true(r[i] == 0);
}

/* DGC momentum correction, n = 4, k = 1, momentum 0.5, worked by hand
 * (all values are short binary fractions, so the floats are exact):
 *   step 1  g = [1, -2, .5, .25]  u = v = g            send v[1] = -2
 *           v = [1, 0, .5, .25]   u = [1, 0, .5, .25]
 *   step 2  g = [1, 1, 0, 0]      u = [1.5, 1, .25, .125]
 *           v = [2.5, 1, .75, .375]                    send v[0] = 2.5
 *           v = [0, 1, .75, .375] u = [0, 1, .25, .125]
 *   step 3  g = [0, 0, 2, -1]     u = [0, .5, 2.125, -.9375]
 *           v = [0, 1.5, 2.875, -.5625]                send v[2] = 2.875
 *           v = [0, 1.5, 0, -.5625] u = [0, .5, 0, -.9375] */
static void test_ef_dgc_by_hand(void **state)
{
    (void)state;
    const float gin[3][4] = {{1, -2, .5f, .25f}, {1, 1, 0, 0}, {0, 0, 2, -1}};
    const float sent[3][4] = {{0, -2, 0, 0}, {2.5f, 0, 0, 0}, {0, 0, 2.875f, 0}};
    const float v_after[3][4] = {{1, 0, .5f, .25f}, {0, 1, .75f, .375f}, {0, 1.5f, 0, -.5625f}};
    const float u_after[3][4] = {{1, 0, .5f, .25f}, {0, 1, .25f, .125f}, {0, .5f, 0, -.9375f}};
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    p.topk_ratio = 0.25;
    assert_int_equal(sdnn_codec_topk_k(p.topk_ratio, 4), 1);
    float v[4] = {0}, u[4] = {0}, g[4];
    unsigned char scratch[8];
    for (int s = 0; s < 3; ++s) {
        memcpy(g, gin[s], sizeof g);
        sdnn_codec_ef_step(&sdnn_codec_topk, &p, g, v, u, 0.5f, 4, scratch, 0);
        for (int i = 0; i < 4; ++i) {
            if (g[i] != sent[s][i] || v[i] != v_after[s][i] || u[i] != u_after[s][i])
                fail_msg("DGC step %d element %d: sent %g v %g u %g, expected %g %g %g", s + 1, i,
                         (double)g[i], (double)v[i], (double)u[i], (double)sent[s][i],
                         (double)v_after[s][i], (double)u_after[s][i]);
        }
    }
    /* A dense codec keeps the momentum: u = g, v = g - fp16(g). */
    float gd[4] = {1 + 0x1p-12f, 3, -0.1f, 0}, vd[4] = {0}, ud[4] = {0};
    const float g0[4] = {1 + 0x1p-12f, 3, -0.1f, 0};
    unsigned char sd[8];
    sdnn_codec_ef_step(&sdnn_codec_fp16, &p, gd, vd, ud, 0.5f, 4, sd, 0);
    for (int i = 0; i < 4; ++i) {
        float q = sdnn_f16_to_f32(sdnn_f32_to_f16(g0[i]));
        assert_true(gd[i] == q);
        assert_true(vd[i] == g0[i] - q);
        assert_true(ud[i] == g0[i]);
    }
}

int main(void)
{
#if defined(__x86_64__) || defined(__i386__)
    /* The checks below do IEEE arithmetic on subnormal floats.  Linked with
     * libdarknet and OpenBLAS under the sanitizers, the process starts with
     * flush-to-zero / denormals-are-zero set in MXCSR, which would turn
     * those inputs into 0 in the checker (the codecs themselves work on
     * the bits and do not care). */
    _mm_setcsr(_mm_getcsr() & ~(0x8000u | 0x0040u));
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_fp16_special_values),
        cmocka_unit_test(test_fp16_random_nearest),
        cmocka_unit_test(test_fp16_exhaustive),
        cmocka_unit_test(test_bf16_special_values),
        cmocka_unit_test(test_bf16_random_nearest),
        cmocka_unit_test(test_bf16_exhaustive),
        cmocka_unit_test(test_int8_nearest_bound),
        cmocka_unit_test(test_int8_stochastic_unbiased),
        cmocka_unit_test(test_int8_stochastic_reproducible),
        cmocka_unit_test(test_int8_nonfinite_chunk),
        cmocka_unit_test(test_topk_selection),
        cmocka_unit_test(test_decode_add_accumulate),
        cmocka_unit_test(test_ef_topk_exact),
        cmocka_unit_test(test_ef_dense_bounded),
        cmocka_unit_test(test_ef_none),
        cmocka_unit_test(test_ef_dgc_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
