/*
 * executor: the simulated device's kernel executor (plugin/cuda/sim/exec.c)
 * checked with kernels written to break one rule each, plus kernels.cu's
 * real kernels against ops.h's formulas at sizes that cross every block and
 * grid boundary, in each block order.  Simulated devices only (make
 * GPU=sim): what passes here is the executor's host logic, never a GPU's.
 *
 * Every error check asserts that the launch or the next sync fails and
 * that the message names the kernel, the block and the thread.
 */
#include "cuda_util.cuh"
#include "ops.h"
#include "clock.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static int g_failed, g_passed;

static void check(bool ok, int line, const char *what, const char *detail)
{
    if (ok) {
        ++g_passed;
        return;
    }
    ++g_failed;
    std::printf("  FAIL  tests/gpu/sim/executor.cu:%d: %s%s%s\n", line, what,
                detail && *detail ? ": " : "", detail ? detail : "");
}
#define CHECK(cond, what, detail) check((cond), __LINE__, (what), (detail))

static bool has(const char *s) { return std::strstr(sdnn_last_error(), s) != NULL; }

/* The status of what a launch queued: its launch error or the next sync's. */
static sdnn_status settle(sdnn_dctx *c)
{
    sdnn_status st = sdnn_ex_take_launch_error();
    sdnn_status sy = sdnn_dctx_sync(c);
    return st != SDNN_OK ? st : sy;
}

/* A fresh context per failing case: a kernel's error is sticky on its stream. */
static sdnn_dctx *fresh(void)
{
    sdnn_dctx_options o = SDNN_DCTX_OPTIONS_INIT;
    sdnn_dctx *c = NULL;
    if (sdnn_dctx_create(&o, &c) != SDNN_OK) {
        std::printf("  FAIL  cannot create a context: %s\n", sdnn_last_error());
        std::exit(1);
    }
    return c;
}

/* ---- kernels that break one rule each ------------------------------------------------- */

/* Threads below `cut` return, the others wait at a barrier. */
__global__ void k_barrier_low_return(float *out, unsigned cut)
{
    if (threadIdx.x < cut) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

/* Threads at or above `cut` return, the others wait at a barrier. */
__global__ void k_barrier_high_return(float *out, unsigned cut)
{
    if (threadIdx.x >= cut) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

/* A block sum: shared tree reduction with a barrier per level (`sync_each`
 * 0 drops the barrier inside the loop: the race the executor must see). */
__global__ void k_block_sum(const float *x, size_t n, float *out, int sync_each)
{
    SDNN_SHARED(float, sh, 256);
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    sh[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        if (sync_each) __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = sh[0];
}

/* Reads a neighbour's slot with no barrier (a race). */
__global__ void k_shared_race(float *out)
{
    SDNN_SHARED(float, sh, 64);
    sh[threadIdx.x] = (float)threadIdx.x;
    out[threadIdx.x] = sh[threadIdx.x ? threadIdx.x - 1 : 0];
}

/* Only the first half writes, then everybody reads its own slot. */
__global__ void k_shared_uninit(float *out)
{
    SDNN_SHARED(float, sh, 64);
    if (threadIdx.x < 32) sh[threadIdx.x] = 1;
    __syncthreads();
    out[threadIdx.x] = sh[threadIdx.x];
}

/* A shared array one slot short of the block. */
__global__ void k_shared_short(float *out)
{
    SDNN_SHARED(float, sh, 255);
    sh[threadIdx.x] = 1;
    __syncthreads();
    out[threadIdx.x] = sh[threadIdx.x];
}

/* 40 KiB static shared memory (plus what the launch adds dynamically). */
__global__ void k_shared_big(float *out)
{
    SDNN_SHARED(float, sh, 10240);
    sh[threadIdx.x] = 1;
    out[threadIdx.x] = sh[threadIdx.x];
}

/* Dynamic shared memory: a reversal through it. */
__global__ void k_dyn_reverse(const float *x, float *out)
{
    SDNN_SHARED_DYN(float, sh);
    sh[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = sh[blockDim.x - 1 - threadIdx.x];
}

/* An off-by-one bounds check: writes x[n]. */
__global__ void k_off_by_one(float *x, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i <= n) x[i] = 1;
}

/* One element a thread, no grid-stride loop: needs ceil(n/256) blocks. */
__global__ void k_one_each(float *x, size_t n, float v)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}

__global__ void k_nothing(float *) {}

/* A warp sum with shuffles; lanes at or above `live` return first. */
__global__ void k_warp_sum(const float *x, float *out, unsigned live)
{
    if (threadIdx.x >= live) return;
    float v = x[threadIdx.x];
    for (unsigned d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
    if ((threadIdx.x & 31) == 0) out[threadIdx.x / 32] = v;
}

/* Each thread writes its slot, then (with `sync`) __syncwarp, then reads
 * the slot of thread t ^ 1 (the same warp) or, with `across`, of thread
 * (t + 32) mod blockDim.x (another warp). */
__global__ void k_warp_shared(float *out, int sync, int across)
{
    SDNN_SHARED(float, sh, 64);
    unsigned t = threadIdx.x;
    sh[t] = (float)t;
    if (sync) __syncwarp();
    unsigned from = across ? (t + 32) % blockDim.x : t ^ 1u;
    out[t] = sh[from];
}

/* Writes blockIdx.x into slot k of a visit log, in the order blocks run. */
__global__ void k_visit(unsigned *log, unsigned *next)
{
    if (threadIdx.x == 0) log[atomicAdd(next, 1u)] = blockIdx.x;
}

/* Barrier-heavy, as codec.cu's block scans: `rounds` times a warp scan by
 * shuffles (10 warp exchanges) and a block total through shared memory (2
 * barriers).  out[thread] = sum over rounds of (inclusive warp scan + block
 * total) of x + round. */
__global__ void k_scan_heavy(const unsigned *x, unsigned *out, int rounds)
{
    SDNN_SHARED(unsigned, ws, 32);
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31;
    unsigned acc = 0, warps = (blockDim.x + 31) / 32;
    for (int r = 0; r < rounds; ++r) {
        unsigned v = x[i] + (unsigned)r;
        for (unsigned d = 1; d < 32; d <<= 1) {
            unsigned t = __shfl_up_sync(0xffffffffu, v, d);
            if (lane >= d) v += t;
        }
        if (lane == 31) ws[threadIdx.x >> 5] = v;
        __syncthreads();
        unsigned tot = 0;
        for (unsigned w = 0; w < warps; ++w) tot += ws[w];
        __syncthreads();
        acc += v + tot;
    }
    out[i] = acc;
}

/* ---- helpers -------------------------------------------------------------------------- */

static float *dalloc(sdnn_dctx *c, size_t n)
{
    void *p = NULL;
    if (sdnn_dmalloc(c, n * sizeof(float), &p) != SDNN_OK) {
        std::printf("  FAIL  dmalloc %zu floats: %s\n", n, sdnn_last_error());
        std::exit(1);
    }
    return (float *)p;
}

static void put(sdnn_dctx *c, float *d, const std::vector<float> &h)
{
    sdnn_dcopy(c, 0, d, h.data(), h.size() * sizeof(float), 1);
}

static std::vector<float> get(sdnn_dctx *c, const float *d, size_t n)
{
    std::vector<float> h(n);
    sdnn_dcopy(c, 0, h.data(), d, n * sizeof(float), 1);
    return h;
}

static const char *order_name(int o) { return o == 0 ? "forward" : o == 1 ? "reversed" : "shuffled"; }

/* ---- the checks ----------------------------------------------------------------------- */

static void barriers(void)
{
    {
        sdnn_dctx *c = fresh();
        float *o = dalloc(c, 64);
        SDNN_LAUNCH(k_barrier_low_return, 1, 64, 0, sdnn_stream(c, 0), o, 16u);
        sdnn_status st = settle(c);
        CHECK(st == SDNN_ERR_INVALID && has("k_barrier_low_return") && has("block (0,0,0)") &&
                  has("thread (16,0,0)") && has("thread 0 of the block returned"),
              "a barrier thread 0 skips is found in loop mode", sdnn_last_error());
        sdnn_dfree(o);
        sdnn_dctx_destroy(c);
    }
    {
        sdnn_dctx *c = fresh();
        float *o = dalloc(c, 64);
        SDNN_LAUNCH(k_barrier_high_return, 2, 64, 0, sdnn_stream(c, 0), o, 40u);
        sdnn_status st = settle(c);
        CHECK(st == SDNN_ERR_INVALID && has("k_barrier_high_return") && has("block (") &&
                  has("thread (0,0,0)") && has("thread (40,0,0)") && has("divergent barrier"),
              "a barrier some threads return before is found on fibers", sdnn_last_error());
        sdnn_dfree(o);
        sdnn_dctx_destroy(c);
    }
    {
        sdnn_dctx *c = fresh();
        float *o = dalloc(c, 64);
        SDNN_LAUNCH(k_barrier_high_return, 1, 64, 0, sdnn_stream(c, 0), o, 64u);
        CHECK(settle(c) == SDNN_OK && get(c, o, 64)[63] == 1.0f,
              "a barrier every thread reaches passes", sdnn_last_error());
        sdnn_dfree(o);
        sdnn_dctx_destroy(c);
    }
}

static void shared_memory(void)
{
    const size_t n = 1000;
    std::vector<float> h(n);
    double want_total = 0;
    for (size_t i = 0; i < n; ++i) want_total += (double)(h[i] = (float)(i % 7));
    for (int order = 0; order < 3; ++order) {
        sdnn_ex_force_order(order);
        sdnn_dctx *c = fresh();
        float *x = dalloc(c, n), *o = dalloc(c, 4);
        put(c, x, h);
        SDNN_LAUNCH(k_block_sum, 4, 256, 0, sdnn_stream(c, 0), x, n, o, 1);
        sdnn_status st = settle(c);
        std::vector<float> r = get(c, o, 4);
        char d[256];
        std::snprintf(d, sizeof d, "%s order: %s; sum %g (want %g)", order_name(order),
                      st ? sdnn_last_error() : "ok", (double)(r[0] + r[1] + r[2] + r[3]),
                      want_total);
        CHECK(st == SDNN_OK && (double)(r[0] + r[1] + r[2] + r[3]) == want_total,
              "a shared-memory tree reduction with its barriers is right", d);
        /* The same kernel without the barrier inside the loop. */
        SDNN_LAUNCH(k_block_sum, 4, 256, 0, sdnn_stream(c, 0), x, n, o, 0);
        st = settle(c);
        CHECK(st == SDNN_ERR_INVALID && has("k_block_sum") && has("sh[") && has("a race"),
              "a reduction missing a __syncthreads is a race", sdnn_last_error());
        sdnn_dfree(x);
        sdnn_dfree(o);
        sdnn_dctx_destroy(c);
    }
    sdnn_ex_force_order(-1);
    struct {
        void (*k)(float *);
        const char *name, *want;
        unsigned threads;
    } cases[] = {
        {k_shared_race, "k_shared_race", "a race", 64},
        {k_shared_uninit, "k_shared_uninit", "before any thread of the block wrote it", 64},
        {k_shared_short, "k_shared_short", "out of bounds", 256},
    };
    for (auto &k : cases) {
        sdnn_dctx *c = fresh();
        float *o = dalloc(c, 256);
        sdnn_ex_launch(k.name, k.k, dim3(1), dim3(k.threads), 0, sdnn_stream(c, 0), o);
        sdnn_status st = settle(c);
        CHECK(st == SDNN_ERR_INVALID && has(k.name) && has("block (0,0,0), thread (") &&
                  has(k.want),
              k.name, sdnn_last_error());
        sdnn_dfree(o);
        sdnn_dctx_destroy(c);
    }
    {
        sdnn_dctx *c = fresh();
        float *x = dalloc(c, 128), *o = dalloc(c, 128);
        std::vector<float> v(128);
        for (int i = 0; i < 128; ++i) v[i] = (float)i;
        put(c, x, v);
        SDNN_LAUNCH(k_dyn_reverse, 1, 128, 128 * sizeof(float), sdnn_stream(c, 0), x, o);
        sdnn_status st = settle(c);
        std::vector<float> r = get(c, o, 128);
        CHECK(st == SDNN_OK && r[0] == 127 && r[127] == 0, "dynamic shared memory",
              sdnn_last_error());
        SDNN_LAUNCH(k_dyn_reverse, 1, 128, 127 * sizeof(float), sdnn_stream(c, 0), x, o);
        st = settle(c);
        CHECK(st == SDNN_ERR_INVALID && has("k_dyn_reverse") && has("thread (127,0,0)") &&
                  has("dynamic shared"),
              "dynamic shared memory one element short", sdnn_last_error());
        sdnn_dfree(x);
        sdnn_dfree(o);
        sdnn_dctx_destroy(c);
    }
}

static void launch_limits(void)
{
    struct {
        dim3 g, b;
        size_t shmem;
        const char *want;
    } cases[] = {
        {dim3(1), dim3(1025), 0, "a block of (1025,1,1)"},
        {dim3(1), dim3(1, 1, 65), 0, "a block of (1,1,65)"},
        {dim3(1, 65536), dim3(32), 0, "a grid of (1,65536,1)"},
        {dim3(1, 1, 65536), dim3(32), 0, "a grid of (1,1,65536)"},
        {dim3(0), dim3(32), 0, "a grid of (0,1,1)"},
        {dim3(0x80000000u), dim3(32), 0, "a grid of (2147483648,1,1)"},
        {dim3(1), dim3(32), (48 << 10) + 4, "dynamic shared memory"},
    };
    sdnn_dctx *c = fresh();
    float *o = dalloc(c, 64);
    for (auto &k : cases) {
        SDNN_LAUNCH(k_nothing, k.g, k.b, k.shmem, sdnn_stream(c, 0), o);
        sdnn_status st = sdnn_ex_take_launch_error();
        CHECK(st == SDNN_ERR_INVALID && has("k_nothing") && has(k.want), k.want,
              sdnn_last_error());
    }
    SDNN_LAUNCH(k_nothing, dim3(1, 65535), dim3(1), 0, sdnn_stream(c, 0), o);
    CHECK(settle(c) == SDNN_OK, "a grid of 65535 blocks along y is accepted", sdnn_last_error());
    sdnn_dfree(o);
    sdnn_dctx_destroy(c);
    c = fresh();
    o = dalloc(c, 64);
    SDNN_LAUNCH(k_shared_big, 1, 32, 9 << 10, sdnn_stream(c, 0), o);
    sdnn_status st = settle(c);
    CHECK(st == SDNN_ERR_INVALID && has("k_shared_big") && has("static shared memory"),
          "static + dynamic shared memory over 48 KiB", sdnn_last_error());
    sdnn_dfree(o);
    sdnn_dctx_destroy(c);
    c = fresh();
    o = dalloc(c, 64);
    SDNN_LAUNCH(k_shared_big, 1, 32, 7 << 10, sdnn_stream(c, 0), o);
    CHECK(settle(c) == SDNN_OK, "static + dynamic shared memory within 48 KiB",
          sdnn_last_error());
    sdnn_dfree(o);
    sdnn_dctx_destroy(c);
}

static void device_memory(void)
{
    sdnn_dctx *c = fresh();
    float *x = dalloc(c, 1024);     /* 4096 bytes: it ends at its guard page */
    SDNN_LAUNCH(k_off_by_one, 5, 256, 0, sdnn_stream(c, 0), x, (size_t)1024);
    sdnn_status st = settle(c);
    CHECK(st == SDNN_ERR_INVALID && has("k_off_by_one") && has("block (4,0,0)") &&
              has("thread (0,0,0)") && has("past the end of an allocation of 4096 bytes"),
          "an off-by-one bounds check (i <= n) reaches the guard page", sdnn_last_error());
    sdnn_dctx_destroy(c);
    c = fresh();
    float *y = dalloc(c, 256);
    sdnn_dfree(y);
    float host[4] = {0};
    SDNN_LAUNCH(k_nothing, 1, 1, 0, sdnn_stream(c, 0), y);
    CHECK(sdnn_ex_take_launch_error() == SDNN_ERR_INVALID && has("k_nothing") &&
              has("argument 0") && has("freed memory"),
          "freed memory as a kernel argument", sdnn_last_error());
    SDNN_LAUNCH(k_nothing, 1, 1, 0, sdnn_stream(c, 0), host);
    CHECK(sdnn_ex_take_launch_error() == SDNN_ERR_INVALID && has("k_nothing") &&
              has("argument 0") && has("host memory"),
          "a host pointer as a kernel argument", sdnn_last_error());
    sdnn_dfree(x);
    sdnn_dctx_destroy(c);
}

static void grid_geometry(void)
{
    const size_t n = 1000;
    sdnn_dctx *c = fresh();
    float *x = dalloc(c, n);
    SDNN_LAUNCH(k_one_each, (unsigned)(n / 256), 256, 0, sdnn_stream(c, 0), x, n, 3.0f);
    sdnn_status st = settle(c);
    std::vector<float> r = get(c, x, n);
    size_t unset = 0;
    for (size_t i = 0; i < n; ++i) unset += r[i] != 3.0f;
    char d[128];
    std::snprintf(d, sizeof d, "%zu of %zu elements unset", unset, n);
    CHECK(st == SDNN_OK && unset == n - (n / 256) * 256,
          "a grid of n/256 blocks leaves the tail unwritten (the result check sees it)", d);
    SDNN_LAUNCH(k_one_each, (unsigned)((n + 255) / 256), 256, 0, sdnn_stream(c, 0), x, n, 4.0f);
    st = settle(c);
    r = get(c, x, n);
    unset = 0;
    for (size_t i = 0; i < n; ++i) unset += r[i] != 4.0f;
    CHECK(st == SDNN_OK && unset == 0, "a grid of ceil(n/256) blocks covers n", sdnn_last_error());
    sdnn_dfree(x);
    sdnn_dctx_destroy(c);
}

static void block_orders(void)
{
    const unsigned nb = 97;
    for (int order = 0; order < 3; ++order) {
        sdnn_ex_force_order(order);
        sdnn_dctx *c = fresh();
        void *lp = NULL, *np = NULL;
        sdnn_dmalloc(c, nb * sizeof(unsigned), &lp);
        sdnn_dmalloc(c, sizeof(unsigned), &np);
        sdnn_dzero(c, 0, np, sizeof(unsigned));
        SDNN_LAUNCH(k_visit, nb, 32, 0, sdnn_stream(c, 0), (unsigned *)lp, (unsigned *)np);
        sdnn_status st = settle(c);
        std::vector<unsigned> log(nb);
        sdnn_dcopy(c, 0, log.data(), lp, nb * sizeof(unsigned), 1);
        std::vector<int> seen(nb, 0);
        int perm = 1, fwd = 1, rev = 1;
        for (unsigned k = 0; k < nb; ++k) {
            if (log[k] >= nb || seen[log[k]]++) perm = 0;
            fwd &= log[k] == k;
            rev &= log[k] == nb - 1 - k;
        }
        bool ok = st == SDNN_OK && perm &&
                  (order == 0 ? fwd : order == 1 ? rev : (!fwd && !rev));
        CHECK(ok, order_name(order), "blocks run once each, in the order asked");
        sdnn_dfree(lp);
        sdnn_dfree(np);
        sdnn_dctx_destroy(c);
    }
    sdnn_ex_force_order(-1);
}

static void warps(void)
{
    sdnn_dctx *c = fresh();
    float *x = dalloc(c, 64), *o = dalloc(c, 2);
    std::vector<float> h(64);
    for (int i = 0; i < 64; ++i) h[i] = (float)i;
    put(c, x, h);
    SDNN_LAUNCH(k_warp_sum, 1, 64, 0, sdnn_stream(c, 0), x, o, 64u);
    sdnn_status st = settle(c);
    std::vector<float> r = get(c, o, 2);
    CHECK(st == SDNN_OK && r[0] == 496 && r[1] == 1520, "a warp sum with __shfl_down_sync",
          sdnn_last_error());
    sdnn_dctx_destroy(c);
    c = fresh();
    SDNN_LAUNCH(k_warp_sum, 1, 64, 0, sdnn_stream(c, 0), x, o, 48u);
    st = settle(c);
    CHECK(st == SDNN_ERR_INVALID && has("k_warp_sum") && has("warp operation") &&
              has("never reaches"),
          "a shuffle some lanes of the warp never reach", sdnn_last_error());
    sdnn_dfree(x);
    sdnn_dfree(o);
    sdnn_dctx_destroy(c);
    /* __syncwarp orders shared memory within its warp, and only there */
    struct {
        int sync, across;
        bool ok;
        const char *what;
    } ws[] = {
        {1, 0, true, "a lane reads its warp neighbour's shared slot after __syncwarp"},
        {0, 0, false, "a lane reads its warp neighbour's shared slot with no __syncwarp"},
        {1, 1, false, "a thread reads another warp's shared slot after only __syncwarp"},
    };
    for (auto &k : ws) {
        c = fresh();
        o = dalloc(c, 64);
        SDNN_LAUNCH(k_warp_shared, 1, 64, 0, sdnn_stream(c, 0), o, k.sync, k.across);
        st = settle(c);
        if (k.ok) {
            std::vector<float> r = get(c, o, 64);
            bool right = st == SDNN_OK;
            for (unsigned t = 0; right && t < 64; ++t) right = r[t] == (float)(t ^ 1u);
            CHECK(right, k.what, sdnn_last_error());
        } else {
            /* with no barrier at all thread 0 runs first and reads a slot
             * nobody wrote yet: the same race, seen one step earlier */
            CHECK(st == SDNN_ERR_INVALID && has("k_warp_shared") &&
                      (has("a race") || (!k.sync && has("before any thread of the block"))),
                  k.what, sdnn_last_error());
        }
        sdnn_dfree(o);
        sdnn_dctx_destroy(c);
    }
}

/* The barrier-heavy kernel against the same sums on the host; with `bench`
 * launches it `bench` times and prints launches and fiber switches a second. */
static void scan_heavy(int bench)
{
    const unsigned blocks = 4, threads = 256, T = blocks * threads;
    const int rounds = 3;
    sdnn_dctx *c = fresh();
    void *xp = NULL, *op = NULL;
    sdnn_dmalloc(c, T * sizeof(unsigned), &xp);
    sdnn_dmalloc(c, T * sizeof(unsigned), &op);
    std::vector<unsigned> x(T), want(T), got(T);
    for (unsigned i = 0; i < T; ++i) x[i] = i * 2654435761u >> 20;
    for (unsigned b = 0; b < blocks; ++b)
        for (int r = 0; r < rounds; ++r) {
            unsigned tot = 0;
            for (unsigned t = 0; t < threads; ++t) tot += x[b * threads + t] + (unsigned)r;
            for (unsigned t = 0; t < threads; ++t) {
                unsigned inc = 0;
                for (unsigned u = t & ~31u; u <= t; ++u) inc += x[b * threads + u] + (unsigned)r;
                want[b * threads + t] += inc + tot;
            }
        }
    sdnn_dcopy(c, 0, xp, x.data(), T * sizeof(unsigned), 1);
    int launches = bench > 0 ? bench : 1;
    double t0 = sdnn_now_s();
    for (int k = 0; k < launches; ++k)
        SDNN_LAUNCH(k_scan_heavy, blocks, threads, 0, sdnn_stream(c, 0), (const unsigned *)xp,
                    (unsigned *)op, rounds);
    sdnn_status st = settle(c);
    double secs = sdnn_now_s() - t0;
    sdnn_dcopy(c, 0, got.data(), op, T * sizeof(unsigned), 1);
    size_t wrong = 0;
    for (unsigned i = 0; i < T; ++i) wrong += got[i] != want[i];
    char d[200];
    std::snprintf(d, sizeof d, "%zu of %u wrong; %s", wrong, T, st ? sdnn_last_error() : "ok");
    CHECK(st == SDNN_OK && wrong == 0, "a barrier-heavy scan (shuffles, __syncthreads)", d);
    if (bench > 0) {
        /* per launch: blocks * threads fibers, each switching out and back at
         * 12 barriers a round (10 warp exchanges, 2 __syncthreads) */
        double sw = (double)launches * T * rounds * 12 * 2;
        std::printf("k_scan_heavy: %d launches of %u x %u threads, %d rounds: %.3f s, "
                    "%.1f launches/s, %.3g fiber switches/s (simulated devices: the "
                    "executor's host cost, not a GPU's)\n",
                    launches, blocks, threads, rounds, secs, launches / secs, sw / secs);
    }
    sdnn_dfree(xp);
    sdnn_dfree(op);
    sdnn_dctx_destroy(c);
}

/* kernels.cu's and codec.cu's kernels, through dev.h, against ops.h's formulas. */
static void formulas(void)
{
    const size_t sizes[] = {1, 31, 32, 33, 255, 256, 257, 65537, (1u << 24) + 3};
    for (int order = 0; order < 3; ++order) {
        sdnn_ex_force_order(order);
        sdnn_dctx *c = fresh();
        for (size_t n : sizes) {
            if (n > 70000 && order != 2) continue;   /* the big size once: shuffled */
            std::vector<float> a(n), b(n);
            for (size_t i = 0; i < n; ++i) {
                a[i] = (float)((int)(i * 2654435761u % 2001) - 1000) / 37.0f;
                b[i] = (float)((int)(i * 40503u % 1999) - 999) / 53.0f;
            }
            float *da = dalloc(c, n), *db = dalloc(c, n), *dy = dalloc(c, n);
            put(c, da, a);
            put(c, db, b);
            sdnn_status st = sdnn_k_sub(c, 0, dy, da, db, n);
            std::vector<float> y = get(c, dy, n);
            size_t wrong = 0;
            for (size_t i = 0; i < n; ++i) wrong += y[i] != SDNN_SUB(a[i], b[i]);
            st = st ? st : sdnn_k_axpy(c, n, 0.75f, da, db);
            y = get(c, db, n);
            for (size_t i = 0; i < n; ++i) wrong += y[i] != SDNN_ADD(b[i], SDNN_MUL(0.75f, a[i]));
            st = st ? st : sdnn_k_activate(c, da, n, SDNN_ACT_LEAKY);
            y = get(c, da, n);
            for (size_t i = 0; i < n; ++i) wrong += y[i] != sdnn_activate(a[i], SDNN_ACT_LEAKY);
            const float *in[3] = {da, db, dy};
            st = st ? st : sdnn_k_mean(c, 0, in, 3, dy, n);
            std::vector<float> m = get(c, dy, n), ya = get(c, da, n), yb = get(c, db, n);
            std::vector<float> sub(n);
            for (size_t i = 0; i < n; ++i) sub[i] = SDNN_SUB(a[i], b[i]);
            for (size_t i = 0; i < n; ++i)
                wrong += m[i] != SDNN_MUL(SDNN_ADD(SDNN_ADD(ya[i], yb[i]), sub[i]), 1.0f / 3);
            size_t bad = 0;
            st = st ? st : sdnn_k_count_nonfinite(c, 2, da, n, &bad);
            char d[160];
            std::snprintf(d, sizeof d, "n = %zu, %s blocks: %zu wrong, %zu non-finite; %s", n,
                          order_name(order), wrong, bad, st ? sdnn_last_error() : "ok");
            CHECK(st == SDNN_OK && wrong == 0 && bad == 0,
                  "sub, axpy, activate, mean, count_nonfinite against ops.h", d);
            sdnn_dfree(da);
            sdnn_dfree(db);
            sdnn_dfree(dy);
        }
        sdnn_dctx_destroy(c);
    }
    sdnn_ex_force_order(-1);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !std::strcmp(argv[1], "--bench")) {
        scan_heavy(std::atoi(argv[2]));
        return g_failed ? 1 : 0;
    }
    barriers();
    shared_memory();
    launch_limits();
    device_memory();
    grid_geometry();
    block_orders();
    warps();
    scan_heavy(0);
    formulas();
    std::printf("executor: %d passed, %d failed (simulated devices: the executor's host logic, "
                "not a GPU)\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
