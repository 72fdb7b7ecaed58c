/*
 * bench_codec: encode and decode speed of every codec against memcpy of the
 * same buffer, measured in the same run, as a markdown table.
 *
 *   build/bench/bench_codec [-s 4M] [-s 64M] [-n 9]
 *
 * -s is the size of the float input (repeatable; default 4 MiB and 64 MiB),
 * -n the repetitions (each time is the median).  GB/s is bytes of float
 * input per second for encode, decode and the pair (encode then decode),
 * memcpy copies the input once; "vs memcpy" is the pair's GB/s over
 * memcpy's.  #wrong checks every decoded element against the codec's
 * definition (scalar conversion, int8 bound, topk count and values), in the
 * nccl-tests habit: a fast wrong codec does not get a clean row.
 */
#include "codec.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

typedef struct bench_case {
    const char *label;
    const sdnn_codec_ops *ops;
    sdnn_codec_params p;
} bench_case;

/* Elements whose decoded value breaks the codec's definition. */
static size_t count_wrong(const bench_case *bc, const float *x, const float *y, size_t n)
{
    size_t wrong = 0;
    const char *name = bc->ops->name;
    if (!strcmp(name, "none")) {
        for (size_t i = 0; i < n; ++i) wrong += memcmp(&x[i], &y[i], sizeof(float)) != 0;
    } else if (!strcmp(name, "fp16")) {
        for (size_t i = 0; i < n; ++i) wrong += y[i] != sdnn_f16_to_f32(sdnn_f32_to_f16(x[i]));
    } else if (!strcmp(name, "bf16")) {
        for (size_t i = 0; i < n; ++i) wrong += y[i] != sdnn_bf16_to_f32(sdnn_f32_to_bf16(x[i]));
    } else if (!strcmp(name, "int8")) {
        size_t chunk = (size_t)bc->p.int8_chunk;
        double limit = bc->p.stochastic ? 1.0 : 0.5;
        for (size_t lo = 0; lo < n; lo += chunk) {
            size_t hi = lo + chunk < n ? lo + chunk : n;
            float m = 0;
            for (size_t i = lo; i < hi; ++i) m = fmaxf(m, fabsf(x[i]));
            double s = m / 127.0f;
            for (size_t i = lo; i < hi; ++i)
                wrong += fabs((double)x[i] - (double)y[i]) > limit * s + 0x1p-22 * m;
        }
    } else {
        size_t k = sdnn_codec_topk_k(bc->p.topk_ratio, n), kept = 0;
        for (size_t i = 0; i < n; ++i) {
            if (y[i] == 0) continue;
            ++kept;
            wrong += y[i] != x[i];
        }
        wrong += kept > k ? kept - k : k - kept;
    }
    return wrong;
}

static void run_size(size_t bytes, int reps, const bench_case *cases, int ncases, long *total_wrong)
{
    size_t n = bytes / sizeof(float);
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    float *cpy = malloc(n * sizeof(float));
    unsigned char *enc = malloc(n * sizeof(float) + 64);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!x || !y || !cpy || !enc || !t) {
        fprintf(stderr, "error: out of memory for %zu bytes\n", bytes);
        exit(1);
    }
    /* Gradient-like values: sums of uniforms (roughly normal), a scale per
     * block of 4096 spanning four decades, no exact zeros. */
    uint64_t state = 0x5dd1e7u;
    for (size_t i = 0; i < n; ++i) {
        double v = 0;
        for (int j = 0; j < 3; ++j) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            v += (double)(state >> 11) / 9007199254740992.0;
        }
        double scale = pow(10.0, -(double)((i / 4096) % 4) - 2);
        x[i] = (float)((v - 1.5 + 1e-9) * scale);
    }
    memset(y, 0, n * sizeof(float));
    memset(cpy, 0, n * sizeof(float));
    memset(enc, 0, n * sizeof(float) + 64);

    memcpy(cpy, x, n * sizeof(float));
    for (int r = 0; r < reps; ++r) {
        double t0 = sdnn_now_s();
        memcpy(cpy, x, n * sizeof(float));
        t[r] = sdnn_now_s() - t0;
    }
    double gb = (double)bytes / 1e9;
    double memcpy_gbs = gb / bench_median(t, reps);

    for (int c = 0; c < ncases; ++c) {
        const bench_case *bc = &cases[c];
        const sdnn_codec_ops *ops = bc->ops;
        size_t out = ops->encoded_size(&bc->p, n);
        ops->encode(&bc->p, x, n, enc, 0);
        ops->decode(&bc->p, enc, n, y);
        long wrong = (long)count_wrong(bc, x, y, n);
        *total_wrong += wrong;
        for (int r = 0; r < reps; ++r) {
            double t0 = sdnn_now_s();
            ops->encode(&bc->p, x, n, enc, (uint64_t)r);
            t[r] = sdnn_now_s() - t0;
        }
        double enc_gbs = gb / bench_median(t, reps);
        for (int r = 0; r < reps; ++r) {
            double t0 = sdnn_now_s();
            ops->decode(&bc->p, enc, n, y);
            t[r] = sdnn_now_s() - t0;
        }
        double dec_gbs = gb / bench_median(t, reps);
        for (int r = 0; r < reps; ++r) {
            double t0 = sdnn_now_s();
            ops->encode(&bc->p, x, n, enc, (uint64_t)r);
            ops->decode(&bc->p, enc, n, y);
            t[r] = sdnn_now_s() - t0;
        }
        double pair_gbs = gb / bench_median(t, reps);
        printf("| %4zu MiB | %-16s | %9.3f | %9.2f | %9.2f | %9.2f | %9.2f | %9.2f | %6ld |\n",
               bytes >> 20, bc->label, (double)out / (double)bytes, enc_gbs, dec_gbs, pair_gbs,
               memcpy_gbs, pair_gbs / memcpy_gbs, wrong);
        fflush(stdout);
    }
    free(x); free(y); free(cpy); free(enc); free(t);
}

int main(int argc, char **argv)
{
    size_t sizes[8];
    int nsizes = 0, reps = 9;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-s") && nsizes < 8) sizes[nsizes++] = bench_parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [-s SIZE]... [-n REPS]\n", argv[0]);
            return 1;
        }
    }
    if (argc % 2 == 0) {
        fprintf(stderr, "usage: %s [-s SIZE]... [-n REPS]\n", argv[0]);
        return 1;
    }
    if (nsizes == 0) {
        sizes[nsizes++] = 4u << 20;
        sizes[nsizes++] = 64u << 20;
    }
    if (reps < 1) {
        fprintf(stderr, "-n must be >= 1\n");
        return 1;
    }
    for (int i = 0; i < nsizes; ++i)
        if (sizes[i] < 4 * sizeof(float)) {
            fprintf(stderr, "-s must be at least 16 bytes\n");
            return 1;
        }

    sdnn_codec_params base = SDNN_CODEC_PARAMS_INIT;
    bench_case cases[6];
    for (int c = 0; c < 6; ++c) cases[c].p = base;
    cases[0].label = "none (memcpy)";
    cases[0].ops = &sdnn_codec_none;
    cases[1].label = "fp16";
    cases[1].ops = &sdnn_codec_fp16;
    cases[2].label = "bf16";
    cases[2].ops = &sdnn_codec_bf16;
    cases[3].label = "int8";
    cases[3].ops = &sdnn_codec_int8;
    cases[4].label = "int8 stochastic";
    cases[4].ops = &sdnn_codec_int8;
    cases[4].p.stochastic = 1;
    cases[4].p.seed = 42;
    cases[5].label = "topk 0.01";
    cases[5].ops = &sdnn_codec_topk;
    cases[5].p.topk_ratio = 0.01;

    printf("codec speed, GB/s of float input, median of %d (int8 chunk %d)\n\n", reps,
           base.int8_chunk);
    printf("| input | codec | out/in | encode | decode | enc+dec | memcpy | enc+dec/memcpy | #wrong |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    long total_wrong = 0;
    for (int i = 0; i < nsizes; ++i) run_size(sizes[i], reps, cases, 6, &total_wrong);
    printf("\ntotal #wrong: %ld\n", total_wrong);
    return total_wrong ? 2 : 0;
}
