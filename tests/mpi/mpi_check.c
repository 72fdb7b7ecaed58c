/*
 * mpi_check: the mpi backend against references computed in this process,
 * run under mpirun (tests/mpi/run.sh; driven by tests/test_mpi.c).
 *
 *   mpi_check [-g NIN]     every codec and size below, broadcast, barrier
 *   mpi_check -mismatch    process 0 holds 2 buffers, the others 1: every
 *                          process must refuse, then go on with equal counts
 *
 * Every process regenerates every process's inputs from the seed, so each
 * can compute the references itself:
 *  - plain allreduce_mean == the fixed-order ring sum written out here
 *    (chunk c of sdnn_ring_chunk(n, 1, P, c) summed m_c + m_c+1 + ... in
 *    fp32, times 1.0f/P, m_p = process p's sdnn_mean_buffers) bit for bit,
 *    and == the local backend's "none" ring over P ranks holding m_p;
 *  - every codec's allreduce_mean_coded == the local backend's over P ranks
 *    holding m_p, bit for bit on every output buffer, with the same wire
 *    bytes summed over the processes;
 *  - central_mean (stock mode) == process 0's sum of the process means in
 *    rank order times (float)(1.0/P), bit for bit, with the bytes sent;
 *  - out aliasing in, a broadcast larger than the backend's bounce buffer.
 * Each process prints "rank R: PASS (K checks)" or the failures and
 * "rank R: FAIL"; the exit status is 0 only when every process passed.
 */
#include "splitmix.h"
#include "codec.h"
#include "collective.h"
#include "comm.h"
#include "scalednn.h"

#include <mpi.h>
#include <stdint.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "soft_assert.h"

static uint64_t mix(uint64_t z)
{
    return sdnn_splitmix64_mix(z);
}

/* Buffer g of a world for size n: values of several magnitudes so sums
 * round, never 0. */
static void fill(float *x, size_t n, int g)
{
    uint64_t s = mix(0x6d7069ull ^ ((uint64_t)g << 32) ^ n);
    for (size_t i = 0; i < n; ++i) {
        s += 0x9e3779b97f4a7c15ull;
        uint64_t k = mix(s);
        float scale = (k & 3) == 0 ? 1e-3f : ((k & 3) == 1 ? 30.0f : 1.0f);
        x[i] = scale * ((float)(k >> 40) * 0x1p-23f - 1.0f + 0x1p-24f);
    }
}

static size_t diff_at(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        if (memcmp(a + i, b + i, sizeof(float)) != 0) return i;
    return n;
}

typedef struct world {
    int P, nin;
    size_t n;
    float **all;        /* P x nin inputs */
    float **mean;       /* P process means */
    float **out;        /* nin outputs of this process */
    float *ref;
} world;

static float **alloc_bufs(int k, size_t n)
{
    float **b = calloc((size_t)k, sizeof *b);
    for (int i = 0; b && i < k; ++i) b[i] = malloc((n ? n : 1) * sizeof(float));
    return b;
}

static void free_bufs(float **b, int k)
{
    for (int i = 0; b && i < k; ++i) free(b[i]);
    free(b);
}

static void make_world(world *w, int P, int nin, size_t n)
{
    w->P = P;
    w->nin = nin;
    w->n = n;
    w->all = alloc_bufs(P * nin, n);
    w->mean = alloc_bufs(P, n);
    w->out = alloc_bufs(nin, n);
    w->ref = malloc((n ? n : 1) * sizeof(float));
    for (int g = 0; g < P * nin; ++g) fill(w->all[g], n, g);
    for (int p = 0; p < P; ++p)
        sdnn_mean_buffers((const float *const *)(w->all + p * nin), nin, w->mean[p], n);
}

static void free_world(world *w)
{
    free_bufs(w->all, w->P * w->nin);
    free_bufs(w->mean, w->P);
    free_bufs(w->out, w->nin);
    free(w->ref);
}

/* The fixed order, written out: chunk c summed c, c+1, ..., c-1. */
static void ring_reference(const world *w, float *ref)
{
    const int P = w->P;
    const float inv = 1.0f / (float)P;
    for (int c = 0; c < P; ++c) {
        size_t lo, len;
        sdnn_ring_chunk(w->n, 1, P, c, &lo, &len);
        for (size_t i = lo; i < lo + len; ++i) {
            float s = w->mean[c][i];
            for (int k = 1; k < P; ++k) s = s + w->mean[(c + k) % P][i];
            ref[i] = P > 1 ? s * inv : s;
        }
    }
}

static void check_plain(sdnn_comm *c, sdnn_comm *local, world *w)
{
    const int r = c->rank;
    const float *const *in = (const float *const *)(w->all + r * w->nin);
    for (size_t i = 0; i < w->n; ++i) w->out[0][i] = -1.0f;
    sdnn_status st = c->ops->allreduce_mean(c, in, w->nin, w->out[0], w->n);
    SOFT_ASSERT(st == SDNN_OK, "n=%zu: %s", w->n, sdnn_last_error());
    ring_reference(w, w->ref);
    size_t at = diff_at(w->out[0], w->ref, w->n);
    SOFT_ASSERT(at == w->n, "plain n=%zu P=%d nin=%d: element %zu is %a, the fixed-order ring gives %a",
           w->n, w->P, w->nin, at, at < w->n ? w->out[0][at] : 0.0, at < w->n ? w->ref[at] : 0.0);

    /* == the local backend's identity-codec ring over the P means */
    float **lo = alloc_bufs(w->P, w->n);
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    st = local->ops->allreduce_mean_coded(local, &sdnn_codec_none, &p, 1,
                                          (const float *const *)w->mean, w->P, lo, w->n, NULL);
    SOFT_ASSERT(st == SDNN_OK, "local none ring: %s", sdnn_last_error());
    at = diff_at(w->out[0], lo[0], w->n);
    SOFT_ASSERT(at == w->n, "plain n=%zu: element %zu differs from the local none ring", w->n, at);
    free_bufs(lo, w->P);

    /* out aliasing in[0] */
    float **copy = alloc_bufs(w->nin, w->n);
    for (int k = 0; k < w->nin; ++k) memcpy(copy[k], in[k], w->n * sizeof(float));
    st = c->ops->allreduce_mean(c, (const float *const *)copy, w->nin, copy[0], w->n);
    SOFT_ASSERT(st == SDNN_OK && diff_at(copy[0], w->ref, w->n) == w->n,
           "plain n=%zu with out == in[0] differs", w->n);
    free_bufs(copy, w->nin);
}

typedef struct codec_case {
    const char *label;
    const sdnn_codec_ops *ops;
    int stochastic;
} codec_case;

static void check_coded(sdnn_comm *c, sdnn_comm *local, world *w, const codec_case *k,
                        int alias)
{
    const int r = c->rank;
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    p.int8_chunk = 100;
    p.stochastic = k->stochastic;
    p.seed = 0xfeedull;
    p.topk_ratio = 0.05;
    const uint64_t stream = 0x5eedull + w->n;
    float **out = w->out;
    float **copy = NULL;
    const float *const *in = (const float *const *)(w->all + r * w->nin);
    if (alias) {
        copy = alloc_bufs(w->nin, w->n);
        for (int j = 0; j < w->nin; ++j) memcpy(copy[j], in[j], w->n * sizeof(float));
        in = (const float *const *)copy;
        out = copy;
    } else {
        for (int j = 0; j < w->nin; ++j) memset(out[j], 0xff, w->n * sizeof(float));
    }
    size_t wire = 0, lwire = 0;
    sdnn_status st = c->ops->allreduce_mean_coded(c, k->ops, &p, stream, in, w->nin, out, w->n,
                                                  &wire);
    SOFT_ASSERT(st == SDNN_OK, "%s n=%zu: %s", k->label, w->n, sdnn_last_error());

    float **lo = alloc_bufs(w->P, w->n);
    st = local->ops->allreduce_mean_coded(local, k->ops, &p, stream,
                                          (const float *const *)w->mean, w->P, lo, w->n, &lwire);
    SOFT_ASSERT(st == SDNN_OK, "local %s: %s", k->label, sdnn_last_error());
    for (int j = 0; j < w->nin; ++j) {
        size_t at = diff_at(out[j], lo[0], w->n);
        SOFT_ASSERT(at == w->n,
               "%s%s n=%zu P=%d nin=%d: output %d element %zu is %a, the local ring over the "
               "process means gives %a",
               k->label, alias ? " (out == in)" : "", w->n, w->P, w->nin, j, at,
               at < w->n ? out[j][at] : 0.0, at < w->n ? lo[0][at] : 0.0);
    }
    unsigned long long mine = wire, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    SOFT_ASSERT(sum == lwire, "%s n=%zu: the processes sent %llu B, the local ring %zu B", k->label,
           w->n, sum, lwire);
    free_bufs(lo, w->P);
    free_bufs(copy, w->nin);
}

/* Stock mode's central host: process 0 sums the processes' buffers in rank
 * order and scales by (float)(1.0/P), as Darknet's sync_nets over P
 * devices; every process gets those bits, and the bytes each sent. */
static void check_central(sdnn_comm *c, world *w)
{
    const int P = w->P, r = c->rank;
    const float scale = (float)(1.0 / P);
    for (size_t i = 0; i < w->n; ++i) {
        float s = w->mean[0][i];
        for (int p = 1; p < P; ++p) s += w->mean[p][i];
        w->ref[i] = s * scale;
    }
    float *buf = malloc((w->n ? w->n : 1) * sizeof(float));
    memcpy(buf, w->mean[r], w->n * sizeof(float));
    size_t wire = 12345;
    sdnn_status st = c->ops->central_mean(c, buf, w->n, &wire);
    SOFT_ASSERT(st == SDNN_OK, "central n=%zu: %s", w->n, sdnn_last_error());
    const size_t at = diff_at(buf, w->ref, w->n);
    SOFT_ASSERT(at == w->n, "central n=%zu P=%d: element %zu is %a, process 0's rank-order sum gives %a",
           w->n, P, at, at < w->n ? buf[at] : 0.0f, at < w->n ? w->ref[at] : 0.0f);
    const size_t want = (r == 0 ? (size_t)(P - 1) : (P > 1 ? 1u : 0u)) * w->n * sizeof(float);
    SOFT_ASSERT(wire == want, "central n=%zu: rank %d reports %zu B sent, expected %zu", w->n, r, wire,
           want);
    free(buf);
}

static void check_broadcast(sdnn_comm *c)
{
    const size_t n = 3 * ((size_t)1 << 20) + 5;     /* more than the bounce buffer */
    float *b = malloc(n * sizeof(float)), *want = malloc(n * sizeof(float));
    fill(want, n, 9999);
    if (c->rank == 0) memcpy(b, want, n * sizeof(float));
    else memset(b, 0xff, n * sizeof(float));
    sdnn_status st = c->ops->broadcast(c, b, n);
    SOFT_ASSERT(st == SDNN_OK, "broadcast: %s", sdnn_last_error());
    SOFT_ASSERT(diff_at(b, want, n) == n, "broadcast: element %zu differs", diff_at(b, want, n));
    free(b);
    free(want);
}

static int run_checks(sdnn_comm *c, int nin)
{
    sdnn_comm *local = NULL;
    if (sdnn_comm_open("local", &local) != SDNN_OK) {
        printf("rank %d: cannot open the local backend: %s\n", g_rank, sdnn_last_error());
        return 1;
    }
    static const size_t sizes[] = {1, 2, 3, 17, 1000, 4099, 70001, 300007};
    const codec_case codecs[] = {
        {"none-ring", &sdnn_codec_none, 0}, {"fp16", &sdnn_codec_fp16, 0},
        {"bf16", &sdnn_codec_bf16, 0},      {"int8", &sdnn_codec_int8, 0},
        {"int8-sr", &sdnn_codec_int8, 1},   {"topk", &sdnn_codec_topk, 0},
    };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
        world w;
        make_world(&w, c->size, nin, sizes[s]);
        check_plain(c, local, &w);
        check_central(c, &w);
        for (size_t k = 0; k < sizeof codecs / sizeof codecs[0]; ++k)
            check_coded(c, local, &w, &codecs[k], s == 4);
        free_world(&w);
    }
    check_broadcast(c);
    sdnn_status st = c->ops->barrier(c);
    SOFT_ASSERT(st == SDNN_OK, "barrier: %s", sdnn_last_error());
    sdnn_comm_close(local);
    return 0;
}

/* Process 0 passes 2 buffers, the others 1: all refuse with the counts. */
static void run_mismatch(sdnn_comm *c)
{
    enum { N = 1000 };
    if (c->size < 2) {
        printf("rank 0: -mismatch needs 2 or more processes\n");
        ++g_fail;
        return;
    }
    float *b[2] = {malloc(N * sizeof(float)), malloc(N * sizeof(float))};
    float *out = malloc(N * sizeof(float));
    fill(b[0], N, 1);
    fill(b[1], N, 2);
    const int nin = c->rank == 0 ? 2 : 1;
    sdnn_status st = c->ops->allreduce_mean(c, (const float *const *)b, nin, out, N);
    SOFT_ASSERT(st == SDNN_ERR_INVALID, "mismatched buffer counts: status %s", sdnn_strerror(st));
    SOFT_ASSERT(strstr(sdnn_last_error(), "between 1 and 2 local buffers") != NULL, "message: %s",
           sdnn_last_error());
    /* The handle is still good: a call with equal counts works. */
    st = c->ops->allreduce_mean(c, (const float *const *)b, 1, out, N);
    SOFT_ASSERT(st == SDNN_OK, "after the refusal: %s", sdnn_last_error());
    free(b[0]);
    free(b[1]);
    free(out);
}

int main(int argc, char **argv)
{
    int nin = 1, mismatch = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "-g") == 0 && i + 1 < argc) nin = atoi(argv[++i]);
        else if (strcmp(argv[i], "-mismatch") == 0) mismatch = 1;
        else {
            fprintf(stderr, "usage: mpi_check [-g NIN] [-mismatch]\n");
            return 2;
        }
    }
    sdnn_comm *c = NULL;
    if (sdnn_comm_open("mpi", &c) != SDNN_OK) {
        printf("rank ?: FAIL: cannot open the mpi backend: %s\n", sdnn_last_error());
        return 1;
    }
    g_rank = c->rank;
    if (mismatch) run_mismatch(c);
    else if (run_checks(c, nin)) ++g_fail;
    sdnn_comm_close(c);
    int mine = g_fail, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (g_fail) printf("rank %d: FAIL (%d of %d checks)\n", g_rank, g_fail, g_checks);
    else printf("rank %d: PASS (%d checks)\n", g_rank, g_checks);
    fflush(stdout);
    return any ? 1 : 0;
}
