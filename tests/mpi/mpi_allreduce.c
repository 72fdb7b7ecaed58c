/*
 * mpi_allreduce: OpenMPI's own MPI_Allreduce (fp32 sum) timed like
 * bench-comm -d mpi, for comparison with the mpi backend's ring:
 *
 *   mpirun -np P mpi_allreduce [-b MIN] [-e MAX] [-f F] [-n ITERS] [-w WARMUP]
 *
 * Sizes are bytes per process (K, M, G suffixes).  Per size: WARMUP untimed
 * calls, a barrier, ITERS timed calls (their mean is the row's time), and
 * a check: inputs are small integers, so the sum is exact and every
 * element must equal it (#wrong).  busbw = size x 2(P-1)/P / time, the
 * bytes each process pushes per second (nccl-tests' definition).  Rank 0
 * prints; the exit status is 1 when any element was wrong.
 */
#include "soft_assert.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parse_bytes(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (size_t)v / sizeof(float) * sizeof(float);
}

int main(int argc, char **argv)
{
    size_t minb = 4 << 20, maxb = 64 << 20;
    double factor = 2;
    int iters = 10, warmup = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-b") == 0) minb = parse_bytes(argv[i + 1]);
        else if (strcmp(argv[i], "-e") == 0) maxb = parse_bytes(argv[i + 1]);
        else if (strcmp(argv[i], "-f") == 0) factor = atof(argv[i + 1]);
        else if (strcmp(argv[i], "-n") == 0) iters = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-w") == 0) warmup = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: mpi_allreduce [-b MIN] [-e MAX] [-f F] [-n ITERS] [-w WARMUP]\n");
            return 2;
        }
    }
    if (minb < sizeof(float) || maxb < minb || factor <= 1 || iters < 1 || warmup < 0) {
        fprintf(stderr, "mpi_allreduce: bad sizes or counts\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    int rank, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    const size_t maxn = maxb / sizeof(float);
    float *in = malloc(maxb), *out = malloc(maxb);
    if (!in || !out) {
        fprintf(stderr, "mpi_allreduce: no memory for %zu B\n", maxb);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < maxn; ++i) in[i] = (float)(i % 7 + (size_t)rank);
    if (rank == 0) {
        printf("# MPI_Allreduce (MPI_FLOAT, MPI_SUM), %d processes, %d warm-up + %d timed calls\n",
               P, warmup, iters);
        printf("#%12s %12s %10s %9s %9s %8s\n", "size", "count", "time", "algbw", "busbw", "#wrong");
        printf("#%12s %12s %10s %9s %9s %8s\n", "(B)", "(elems)", "(us)", "(GB/s)", "(GB/s)", "");
    }
    long long wrong_all = 0;
    for (size_t b = minb; b <= maxb;) {
        const size_t n = b / sizeof(float);
        for (int w = 0; w < warmup; ++w)
            MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int it = 0; it < iters; ++it)
            MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t = (MPI_Wtime() - t0) / iters, tmax = 0;
        MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        long long wrong = 0, sum = 0;
        const long long base = (long long)P * (P - 1) / 2;
        for (size_t i = 0; i < n; ++i)
            if (out[i] != (float)((long long)(i % 7) * P + base)) ++wrong;
        MPI_Reduce(&wrong, &sum, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            const double algbw = (double)b / tmax / 1e9;
            printf(" %12zu %12zu %10.1f %9.3f %9.3f %8lld\n", b, n, tmax * 1e6, algbw,
                   algbw * 2.0 * (P - 1) / P, sum);
            fflush(stdout);
            wrong_all += sum;
        }
        size_t next = (size_t)((double)b * factor) / sizeof(float) * sizeof(float);
        b = next > b ? next : b + sizeof(float);
    }
    free(in);
    free(out);
    g_rank = rank;
    if (rank == 0) SOFT_ASSERT(wrong_all == 0, "%lld elements differ from the exact sum", wrong_all);
    MPI_Finalize();
    return g_fail ? 1 : 0;
}
