/*
 * bench_allreduce: the local backend's average of N replica buffers against
 * a plain memcpy of the same bytes, side by side in one run, in the style
 * of nccl-tests (size sweep, warm-up, #wrong from a built-in check).
 *
 *   build/bench/bench_allreduce [-b 64K] [-e 256M] [-f 2] [-g 2] [-n 20] [-w 3] [-J FILE]
 *
 * size is the bytes of one replica's buffer; the average reads N*size
 * bytes and writes size bytes; "memcpy" copies the same N*size bytes.
 * algbw = N*size / time for both, so the ratio says how close averaging
 * runs to the machine's copy bandwidth.  Times are medians of -n runs.
 */
#include "comm.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

int main(int argc, char **argv)
{
    size_t lo = 64 * 1024, hi = 256u * 1024 * 1024;
    double factor = 2;
    int nrep = 2, iters = 20, warm = 3;
    const char *json = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-b")) lo = bench_parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-e")) hi = bench_parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-f")) factor = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "-g")) nrep = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-w")) warm = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-J")) json = argv[i + 1];
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 1;
        }
    }
    if (nrep < 1 || iters < 1 || factor <= 1 || lo < 4 || hi < lo) {
        fprintf(stderr, "bad options\n");
        return 1;
    }
    sdnn_comm *comm = NULL;
    if (sdnn_comm_open("local", &comm) != SDNN_OK) {
        fprintf(stderr, "error: %s\n", sdnn_last_error());
        return 1;
    }
    size_t maxn = hi / sizeof(float);
    float **in = calloc((size_t)nrep, sizeof *in);
    float *out = malloc(maxn * sizeof(float));
    float *src = malloc(maxn * sizeof(float) * (size_t)nrep);
    float *dst = malloc(maxn * sizeof(float) * (size_t)nrep);
    double *t = malloc((size_t)iters * sizeof *t);
    if (!in || !out || !src || !dst || !t) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    /* Random non-integer values of mixed magnitude, so that a different
     * summation order, reassociation or FMA shows up in #wrong. */
    uint64_t state = 0x5dd1e7u;
    for (int r = 0; r < nrep; ++r) {
        in[r] = malloc(maxn * sizeof(float));
        if (!in[r]) return 1;
        for (size_t i = 0; i < maxn; ++i) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(state >> 11) / 9007199254740992.0;
            int e = (int)((state >> 3) % 13) - 6;
            in[r][i] = (float)((u - 0.5) * ldexp(1.0, e));
        }
    }
    memset(src, 1, maxn * sizeof(float) * (size_t)nrep);
    memset(dst, 0, maxn * sizeof(float) * (size_t)nrep);
    memset(out, 0, maxn * sizeof(float));
    FILE *jf = json ? fopen(json, "w") : NULL;
    if (jf) fprintf(jf, "{\"bench\":\"allreduce-local\",\"replicas\":%d,\"results\":[", nrep);
    printf("# local-backend average of %d buffers vs memcpy of the same bytes (medians of %d)\n",
           nrep, iters);
    printf("#%12s %12s %10s %10s %10s %10s %8s %7s\n", "size(B)", "count", "avg(us)", "avg GB/s",
           "cpy(us)", "cpy GB/s", "ratio", "#wrong");
    int first = 1;
    long total_wrong = 0;
    for (size_t size = lo; size <= hi; size = (size_t)((double)size * factor)) {
        size_t n = size / sizeof(float);
        size_t bytes = n * sizeof(float) * (size_t)nrep;
        for (int w = 0; w < warm; ++w)
            sdnn_comm_allreduce_mean(comm, (const float *const *)in, nrep, out, n, NULL);
        for (int k = 0; k < iters; ++k) {
            double t0 = sdnn_now_s();
            sdnn_comm_allreduce_mean(comm, (const float *const *)in, nrep, out, n, NULL);
            t[k] = sdnn_now_s() - t0;
        }
        double tavg = bench_median(t, iters);
        long wrong = 0;
        for (size_t i = 0; i < n; ++i) {
            float s = in[0][i];
            for (int r = 1; r < nrep; ++r) s += in[r][i];
            s *= 1.0f / (float)nrep;
            if (s != out[i]) ++wrong;
        }
        total_wrong += wrong;
        for (int w = 0; w < warm; ++w) memcpy(dst, src, bytes);
        for (int k = 0; k < iters; ++k) {
            double t0 = sdnn_now_s();
            memcpy(dst, src, bytes);
            t[k] = sdnn_now_s() - t0;
        }
        double tcpy = bench_median(t, iters);
        double gavg = (double)bytes / tavg / 1e9, gcpy = (double)bytes / tcpy / 1e9;
        printf(" %12zu %12zu %10.1f %10.2f %10.1f %10.2f %8.2f %7ld\n", size, n, tavg * 1e6, gavg,
               tcpy * 1e6, gcpy, gavg / gcpy, wrong);
        if (jf)
            fprintf(jf, "%s{\"size\":%zu,\"avg_us\":%.2f,\"avg_gbs\":%.3f,\"memcpy_us\":%.2f,"
                        "\"memcpy_gbs\":%.3f,\"ratio\":%.3f,\"wrong\":%ld}",
                    first ? "" : ",", size, tavg * 1e6, gavg, tcpy * 1e6, gcpy, gavg / gcpy, wrong);
        first = 0;
        if ((double)size * factor > (double)hi && size != hi) break;
    }
    if (jf) {
        fprintf(jf, "]}\n");
        fclose(jf);
    }
    printf("# total #wrong: %ld\n", total_wrong);
    for (int r = 0; r < nrep; ++r) free(in[r]);
    free(in); free(out); free(src); free(dst); free(t);
    sdnn_comm_close(comm);
    return total_wrong ? 2 : 0;
}
