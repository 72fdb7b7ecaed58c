/*
 * nccl_world: one NCCL communicator across processes (backend=nccl's
 * world), the device ring over it, on simulated devices: two child
 * processes of 2 simulated devices each join a world of 4 ranks through
 * one id (sdnn_dring_create_nccl_world), as mpirun's processes do with the
 * id broadcast over MPI.
 *
 *   - the plain mean equals ((in0 + in1) + in2) + in3, x 1/4, bit for bit,
 *     and every coded mean equals the local backend's over the same 4
 *     buffers, bit for bit (the ring's arithmetic, now across processes);
 *     fp16 and bf16 by NCCL's native allreduce (sdnn_dring_exchange) give
 *     the simulated NCCL's stated 16-bit ring order, bit for bit;
 *   - a rank that goes silent (SDNN_SIM_NCCL_FAULT=silent:3:0, rank 3 in
 *     process 1): process 0's sdnn_dring_sync fails within its deadline
 *     with SDNN_ERR_COMM, naming "rank 3 (process 1), which did not
 *     answer", and its later calls are refused (aborted);
 *   - a process that never joins: init fails after its timeout naming the
 *     ranks that never came, and leaves no shared memory behind.
 * On a real GPU machine (one device: NCCL refuses two ranks on one GPU)
 * it checks nothing and says so.  What passes here is the host logic,
 * ordering and arithmetic over the simulated NCCL's shared-memory
 * transport, never real NCCL's behaviour.
 */
#include "codec.h"
#include "comm.h"
#include "dev.h"
#include "gpu_test.h"
#include "half_ref.h"

#include <dirent.h>
#include <sys/wait.h>
#include <time.h>

enum { NDEV = 2, NPROC = 2, W = NDEV * NPROC };
static const size_t N = 100003;

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Rank g's input, the same in every process. */
static void input(int g, float *h)
{
    gt_seed(1000 + (uint64_t)g);
    gt_fill(h, N, -2, 2);
}

/* The shared memory segments of the simulated NCCL now present. */
static int segments(void)
{
    int n = 0;
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strncmp(e->d_name, "sdnn-simnccl-", 13) == 0;
    closedir(d);
    return n;
}

typedef struct child {
    sdnn_dctx *ctx[NDEV];
    float *d_in[NDEV], *d_out[NDEV];
    float *h[W];
    sdnn_dring *R;
} child;

static int open_child(child *c, int proc, const unsigned char *id, double timeout)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NDEV; ++i) {
        sdnn_dctx_options o = SDNN_DCTX_OPTIONS_INIT;
        o.device = i;
        if (sdnn_dctx_create(&o, &c->ctx[i]) != SDNN_OK) return 0;
        if (sdnn_dmalloc(c->ctx[i], N * 4, (void **)&c->d_in[i]) != SDNN_OK ||
            sdnn_dmalloc(c->ctx[i], N * 4, (void **)&c->d_out[i]) != SDNN_OK)
            return 0;
    }
    for (int g = 0; g < W; ++g) {
        c->h[g] = malloc(N * 4);
        input(g, c->h[g]);
    }
    for (int i = 0; i < NDEV; ++i)
        sdnn_dcopy(c->ctx[i], 0, c->d_in[i], c->h[proc * NDEV + i], N * 4, 1);
    return sdnn_dring_create_nccl_world(id, W, proc * NDEV, c->ctx, NDEV, timeout, &c->R) ==
           SDNN_OK;
}

static void close_child(child *c)
{
    sdnn_dring_destroy(c->R);
    for (int i = 0; i < NDEV; ++i) {
        sdnn_dfree(c->d_in[i]);
        sdnn_dfree(c->d_out[i]);
        sdnn_dctx_destroy(c->ctx[i]);
    }
    for (int g = 0; g < W; ++g) free(c->h[g]);
}

/* Process `proc` of the exact case: its checks' failures are its status. */
static int exact_child(int proc, const unsigned char *id)
{
    child c;
    if (!open_child(&c, proc, id, 20)) {
        printf("  FAIL  process %d: the world of %d ranks: %s\n", proc, W, sdnn_last_error());
        return 1;
    }
    float *got = malloc(N * 4), *ref = malloc(N * 4);
    /* Plain: the simulated NCCL sums in rank order, the ring scales once. */
    for (size_t k = 0; k < N; ++k)
        ref[k] = (((c.h[0][k] + c.h[1][k]) + c.h[2][k]) + c.h[3][k]) * (1.0f / W);
    sdnn_status s = sdnn_dring_mean(c.R, (const float *const *)c.d_in, c.d_out, N, NULL);
    if (s == SDNN_OK) s = sdnn_dring_sync(c.R);
    for (int i = 0; i < NDEV; ++i) {
        sdnn_dcopy(c.ctx[i], 0, got, c.d_out[i], N * 4, 1);
        SOFT_ASSERT(s == SDNN_OK && gt_bytes_differ(got, ref, N * 4) == 0,
                    "process %d, rank %d: the plain mean over 2 processes x 2 devices = the sum "
                    "in rank order x 1/4, bit for bit (%s)",
                    proc, proc * NDEV + i, s ? sdnn_last_error() : "ok");
    }
    /* Coded: the local backend over the same 4 buffers. */
    sdnn_comm *local = NULL;
    if (sdnn_comm_open("local", &local) != SDNN_OK) return 1;
    static const char *const codecs[] = {"none", "fp16", "int8", "topk"};
    float *hout[W];
    for (int g = 0; g < W; ++g) hout[g] = malloc(N * 4);
    for (size_t k = 0; k < sizeof codecs / sizeof codecs[0]; ++k) {
        const sdnn_codec_ops *cd = sdnn_codec_find(codecs[k]);
        sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
        sdnn_status ls = sdnn_comm_allreduce_mean_coded(local, cd, &p, 7, (const float *const *)c.h,
                                                        W, hout, N, NULL);
        s = sdnn_dring_coded(c.R, cd, &p, 7, (const float *const *)c.d_in, c.d_out, N, NULL);
        if (s == SDNN_OK) s = sdnn_dring_sync(c.R);
        for (int i = 0; i < NDEV; ++i) {
            sdnn_dcopy(c.ctx[i], 0, got, c.d_out[i], N * 4, 1);
            SOFT_ASSERT(ls == SDNN_OK && s == SDNN_OK &&
                            gt_bytes_differ(got, hout[proc * NDEV + i], N * 4) == 0,
                        "process %d, rank %d: %s mean across processes = local's, bit for bit "
                        "(%s)",
                        proc, proc * NDEV + i, codecs[k], s ? sdnn_last_error() : "ok");
        }
    }
    /* NCCL's own half / bfloat16 allreduce across processes (the shared
     * memory transport): the simulated NCCL's stated order, bit for bit,
     * the same as in one process (half_ref.h's hr_ring16). */
    for (int t = HR_HALF; t <= HR_BF16; ++t) {
        const sdnn_codec_ops *cd = t == HR_HALF ? &sdnn_codec_fp16 : &sdnn_codec_bf16;
        sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
        hr_ring16(t, (const float *const *)c.h, W, N, ref);
        s = sdnn_dring_exchange(c.R, SDNN_CM_NATIVE, cd, &p, 7, (const float *const *)c.d_in,
                                c.d_out, N, NULL);
        if (s == SDNN_OK) s = sdnn_dring_sync(c.R);
        for (int i = 0; i < NDEV; ++i) {
            sdnn_dcopy(c.ctx[i], 0, got, c.d_out[i], N * 4, 1);
            SOFT_ASSERT(s == SDNN_OK && gt_bytes_differ(got, ref, N * 4) == 0,
                        "process %d, rank %d: %s by NCCL's native allreduce across processes = "
                        "the stated ring order, bit for bit (%s)",
                        proc, proc * NDEV + i, cd->name, s ? sdnn_last_error() : "ok");
        }
    }
    for (int g = 0; g < W; ++g) free(hout[g]);
    sdnn_comm_close(local);
    free(got);
    free(ref);
    close_child(&c);
    return gt_failed;
}

/* Process `proc` with rank 3 silent: process 0 checks its own deadline. */
static int silent_child(int proc, const unsigned char *id)
{
    setenv("SDNN_SIM_NCCL_FAULT", "silent:3:0", 1);
    child c;
    if (!open_child(&c, proc, id, 20)) {
        printf("  FAIL  process %d: the world of %d ranks: %s\n", proc, W, sdnn_last_error());
        return 1;
    }
    sdnn_dring_set_timeout(c.R, 1.0);
    const double t0 = mono();
    sdnn_status s = sdnn_dring_mean(c.R, (const float *const *)c.d_in, c.d_out, N, NULL);
    if (s == SDNN_OK) s = sdnn_dring_sync(c.R);
    const double took = mono() - t0;
    if (proc == 0) {
        const char *m = sdnn_last_error();
        SOFT_ASSERT(s == SDNN_ERR_COMM && strstr(m, "nccl rank 0: waited") &&
                        strstr(m, "for rank 3 (process 1), which did not answer") &&
                        strstr(m, "timeout 1.0 s"),
                    "process 0: rank 3 silent: the exchange fails naming it (%s)", m);
        SOFT_ASSERT(took < 10, "... within the 1 s deadline and a margin (%.1f s)", took);
        s = sdnn_dring_mean(c.R, (const float *const *)c.d_in, c.d_out, N, NULL);
        SOFT_ASSERT(s == SDNN_ERR_ABORTED, "... and the ring refuses later calls (%s)",
                    sdnn_strerror(s));
    } else {
        /* Its own ranks wait on the silent one too: a bounded failure. */
        SOFT_ASSERT(s == SDNN_ERR_COMM && took < 10,
                    "process 1 (holding the silent rank): fails within its deadline too (%.1f "
                    "s, %s)", took, sdnn_strerror(s));
    }
    close_child(&c);
    return gt_failed;
}

/* Process 0 alone in a world of 4: init's own deadline. */
static int lonely_child(const unsigned char *id)
{
    child c;
    const double t0 = mono();
    int ok = open_child(&c, 0, id, 1.0);
    const double took = mono() - t0;
    const char *m = sdnn_last_error();
    SOFT_ASSERT(!ok && strstr(m, "2 of 4 ranks joined") && strstr(m, "rank 2, 3 never came") &&
                    took < 10,
                "process 1 never joins: init fails after its 1 s timeout naming ranks 2 and 3 "
                "(%.1f s: %s)", took, m);
    c.R = NULL;
    close_child(&c);
    return gt_failed;
}

typedef int (*child_fn)(int proc, const unsigned char *id);

/* Runs fn in NPROC children; 1 when every one exited 0. */
static int in_children(child_fn fn, const unsigned char *id, const char *what)
{
    pid_t pid[NPROC];
    fflush(stdout);
    for (int p = 0; p < NPROC; ++p) {
        pid[p] = fork();
        if (pid[p] == 0) {
            gt_failed = gt_passed = 0;
            int f = fn(p, id);
            fflush(stdout);
            _exit(f > 100 ? 100 : f);
        }
    }
    int all = 1;
    for (int p = 0; p < NPROC; ++p) {
        int ws = 0;
        all &= pid[p] > 0 && waitpid(pid[p], &ws, 0) == pid[p] && WIFEXITED(ws) &&
               WEXITSTATUS(ws) == 0;
    }
    SOFT_ASSERT(all, "%s: both processes pass", what);
    return all;
}

int main(void)
{
    argv0_ = "nccl_world";
    /* The runtime is started in the children only: a simulated device's
     * memory made before a fork would be shared by both processes. */
    fflush(stdout);
    pid_t probe = fork();
    if (probe == 0) {
        sdnn_dev_stats st;
        int ndev = 0;
        _exit(sdnn_dev_stats_get(0, &st) == SDNN_OK && sdnn_dev_count(&ndev) == SDNN_OK &&
              ndev >= NDEV ? 0 : 1);
    }
    int pst = 0;
    if (probe < 0 || waitpid(probe, &pst, 0) != probe || !WIFEXITED(pst) ||
        WEXITSTATUS(pst) != 0) {
        printf("nccl_world: not checked: needs %d simulated devices (make GPU=sim; a real GPU "
               "machine runs backend=nccl between processes with a device per rank)\n", NDEV);
        return 0;
    }
    unsigned char id[SDNN_NCCL_ID_BYTES];
    if (sdnn_dnccl_unique_id(id) != SDNN_OK) return 1;
    in_children(exact_child, id, "2 processes x 2 devices, plain and coded means");
    if (sdnn_dnccl_unique_id(id) != SDNN_OK) return 1;
    in_children(silent_child, id, "a silent rank");
    if (sdnn_dnccl_unique_id(id) != SDNN_OK) return 1;
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        gt_failed = gt_passed = 0;
        _exit(lonely_child(id) ? 1 : 0);
    }
    int ws = 0;
    SOFT_ASSERT(p > 0 && waitpid(p, &ws, 0) == p && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
                "a process that never joins: its peer's init times out");
    SOFT_ASSERT(segments() == 0, "no simulated NCCL segment is left in shared memory (%d)",
                segments());
    return gt_summary("nccl_world");
}
