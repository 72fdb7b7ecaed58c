/*
 * codec: the gradient codecs of codec.h on the device, writing the same
 * bytes as the host encoders (the tests compare them bit for bit):
 *
 *  fp16, bf16  integer rounding to nearest even on the float's bits, by the
 *              host's own scalar functions (codec_scalar.h; no __float2half, whose
 *              NaN payloads differ).
 *  int8        one block per chunk: max |x| on the bits, scale m/127 and
 *              127/m, nearest (the magic-number rounding) or stochastic
 *              rounding with the host's counter-based generator; every
 *              product and sum rounded as the host rounds it (no FMA).
 *  topk        the host's radix cut (11, 11, 9 bits of |x|, keep every key
 *              above the cut and the lowest-indexed keys equal to it), then
 *              an order-preserving compaction: k (index, value) pairs with
 *              ascending indices.  The selection state never leaves the
 *              device, so an encode needs no host synchronisation.
 *
 * Error feedback (sdnn_dcodec_ef_step) follows sdnn_codec_ef_step step by
 * step.
 */
#include "cuda_util.cuh"
#include "ops.h"
#include "codec_scalar.h"

#include <float.h>
#include <string.h>

/* ---- the host codecs' scalar arithmetic: codec_scalar.h, shared with codec.c ------ */

__device__ static inline uint16_t f32_to_bf16(float x)
{
    return sdnn_cs_bf16_round(__float_as_uint(x));
}

/* ---- codec ids: dcodec_ids.c (shared with the simulated build) --------------------- */

static size_t chunk_of(const sdnn_codec_params *p) { return p->int8_chunk >= 1 ? (size_t)p->int8_chunk : 256; }
static size_t chunks_of(size_t n, size_t chunk) { return n / chunk + (n % chunk != 0); }

/* ---- dense kernels ------------------------------------------------------------------ */

__global__ void k_f16_enc(const float *x, size_t n, uint16_t *o)
{
    SDNN_FOR(i, n) o[i] = sdnn_cs_f32_to_f16(x[i]);
}
__global__ void k_bf16_enc(const float *x, size_t n, uint16_t *o) { SDNN_FOR(i, n) o[i] = f32_to_bf16(x[i]); }

/* mode 0: y = d; 1: y = d + a (a may be y: each element read before written) */
template <int FMT>
__device__ static inline float load_dense(const void *in, size_t i)
{
    if (FMT == SDNN_DCODEC_FP16) return sdnn_cs_f16_to_f32(((const uint16_t *)in)[i]);
    if (FMT == SDNN_DCODEC_BF16) return sdnn_cs_bf16_to_f32(((const uint16_t *)in)[i]);
    return ((const float *)in)[i];
}

template <int FMT>
__global__ void k_dense_dec(const void *in, size_t n, const float *add, float *y)
{
    SDNN_FOR(i, n) {
        float d = load_dense<FMT>(in, i);
        y[i] = add ? __fadd_rn(d, add[i]) : d;
    }
}

/* int8: one block per chunk. */
__global__ void k_int8_enc(const float *x, size_t n, size_t chunk, int stochastic, uint64_t key,
                           float *scales, int8_t *q)
{
    SDNN_SHARED(uint32_t, red, SDNN_THREADS);
    size_t c = blockIdx.x, lo = c * chunk;
    size_t len = n - lo < chunk ? n - lo : chunk;
    uint32_t m = 0;
    for (size_t i = threadIdx.x; i < len; i += blockDim.x) {
        uint32_t a = __float_as_uint(x[lo + i]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    red[threadIdx.x] = m;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w && red[threadIdx.x + w] > red[threadIdx.x])
            red[threadIdx.x] = red[threadIdx.x + w];
        __syncthreads();
    }
    float mf = __uint_as_float(red[0]);
    float s = __fdiv_rn(mf, 127.0f), inv = __fdiv_rn(127.0f, mf);
    if (threadIdx.x == 0) scales[c] = s;
    int fast = s >= FLT_MIN && s <= FLT_MAX;
    int usable = s > 0 && s <= FLT_MAX && inv > 0 && inv <= FLT_MAX;
    const float magic = 12582912.0f;
    for (size_t i = threadIdx.x; i < len; i += blockDim.x) {
        size_t e = lo + i;
        float xv = x[e];
        int32_t t;
        if (fast && !stochastic) {
            t = (int32_t)__fsub_rn(__fadd_rn(__fmul_rn(xv, inv), magic), magic);
        } else if (fast) {
            float r = __fadd_rn(__fmul_rn(xv, inv), sdnn_cs_key_uniform(key, e));
            t = (int32_t)r;
            t -= (float)t > r;
        } else {
            float r = 0;
            if (usable) {
                r = __fmul_rn(xv, inv);
                r = stochastic ? floorf(__fadd_rn(r, sdnn_cs_key_uniform(key, e))) : rintf(r);
                r = fminf(fmaxf(r, -127.0f), 127.0f);
            }
            t = (int32_t)r;
        }
        t = t < 127 ? t : 127;
        t = t > -127 ? t : -127;
        q[e] = (int8_t)t;
    }
}

__global__ void k_int8_dec(const float *scales, const int8_t *q, size_t n, size_t chunk,
                           const float *add, float *y)
{
    SDNN_FOR(i, n) {
        float d = __fmul_rn((float)q[i], scales[i / chunk]);
        y[i] = add ? __fadd_rn(d, add[i]) : d;
    }
}

/* ---- top-k ---------------------------------------------------------------------------- */

#define TOPK_BINS 2048
#define TOPK_NO_KEY 0xffffffffu
#define TOPK_PER_THREAD 8
#define TOPK_TILE (SDNN_THREADS * TOPK_PER_THREAD)

struct topk_state {
    uint32_t prefix;
    uint32_t need;
    uint32_t done;
    uint32_t gt, eq, budget;
    uint32_t hist[TOPK_BINS];
};

static size_t topk_tiles(size_t n) { return (n + TOPK_TILE - 1) / TOPK_TILE; }

__global__ void k_topk_init(topk_state *s, uint32_t k, int all)
{
    s->prefix = 0;
    s->need = k;
    s->done = all;
    s->gt = 0;
    s->eq = TOPK_NO_KEY;
    s->budget = 0;
}

__global__ void k_topk_clear(topk_state *s)
{
    for (int b = threadIdx.x; b < TOPK_BINS; b += blockDim.x) s->hist[b] = 0;
}

/* Histogram of the keys inside the current prefix range at one level. */
__global__ void k_topk_hist(const float *x, size_t n, topk_state *s, int above, int shift,
                            uint32_t mask, int level)
{
    if (s->done) return;
    SDNN_SHARED(uint32_t, h, TOPK_BINS);
    for (int b = threadIdx.x; b < TOPK_BINS; b += blockDim.x) h[b] = 0;
    __syncthreads();
    uint32_t prefix = s->prefix;
    SDNN_FOR(i, n) {
        uint32_t key = __float_as_uint(x[i]) & 0x7fffffffu;
        if (level == 0 || (key >> above) == prefix) atomicAdd(&h[(key >> shift) & mask], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < TOPK_BINS; b += blockDim.x) {
        uint32_t hb = h[b];
        if (hb) atomicAdd(&s->hist[b], hb);
    }
}

/* Exclusive scan over the block (SDNN_THREADS threads); returns the total. */
__device__ static uint32_t block_scan(uint32_t v, uint32_t *excl)
{
    SDNN_SHARED(uint32_t, warp_sum, SDNN_THREADS / 32);
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    uint32_t inc = v;
    for (int d = 1; d < 32; d <<= 1) {
        uint32_t t = __shfl_up_sync(0xffffffffu, inc, d);
        if (lane >= d) inc += t;
    }
    if (lane == 31) warp_sum[wid] = inc;
    __syncthreads();
    uint32_t before = 0, total = 0;
    for (int w = 0; w < SDNN_THREADS / 32; ++w) {
        if (w < wid) before += warp_sum[w];
        total += warp_sum[w];
    }
    __syncthreads();
    *excl = before + inc - v;
    return total;
}

/* The host's bin walk (from the top bin down, stop at the first bin whose
 * count reaches what is still needed), by one block: thread t holds the
 * bins mask - 8t .. mask - 8t - 7, a scan gives each thread the count of
 * the bins above its own, and the one thread whose bins cross `need` finds
 * the bin.  The inclusive count from the top grows with every bin, so
 * exactly one bin is the first to reach `need` (the histogram holds at
 * least `need` keys by construction); the result is the loop's. */
#define TOPK_WALK_PER_THREAD (TOPK_BINS / SDNN_THREADS)
static_assert(TOPK_BINS % SDNN_THREADS == 0, "topk walk: whole bins per thread");

__global__ void k_topk_walk(topk_state *s, int width, int shift, int last)
{
    SDNN_SHARED(uint32_t, found, 2);   /* the bin, what it still needs */
    if (s->done) return;
    uint32_t mask = (1u << width) - 1u, need = s->need;
    uint32_t r0 = threadIdx.x * TOPK_WALK_PER_THREAD, mine = 0;
    for (uint32_t j = 0; j < TOPK_WALK_PER_THREAD; ++j)
        if (r0 + j <= mask) mine += s->hist[mask - (r0 + j)];
    if (threadIdx.x == 0) found[0] = TOPK_NO_KEY;
    uint32_t above;
    block_scan(mine, &above);
    for (uint32_t j = 0; j < TOPK_WALK_PER_THREAD && r0 + j <= mask; ++j) {
        uint32_t b = mask - (r0 + j), h = s->hist[b];
        if (above < need && h >= need - above) {
            found[0] = b;
            found[1] = need - above;
        }
        above += h;
    }
    __syncthreads();
    if (threadIdx.x != 0 || found[0] == TOPK_NO_KEY) return;
    uint32_t b = found[0];
    need = found[1];
    uint32_t prefix = (s->prefix << width) | b;
    s->prefix = prefix;
    s->need = need;
    if (s->hist[b] == need) {
        s->gt = prefix << shift;
        s->eq = TOPK_NO_KEY;
        s->budget = 0;
        s->done = 1;
    } else if (last) {
        s->gt = prefix + 1;
        s->eq = prefix;
        s->budget = need;
        s->done = 1;
    }
}

__device__ static inline int topk_is_gt(uint32_t key, const topk_state *s) { return key >= s->gt; }
__device__ static inline int topk_is_eq(uint32_t key, const topk_state *s)
{
    return s->budget && key == s->eq && key < s->gt;
}

/* Per tile: keys above the cut and keys equal to it. */
__global__ void k_topk_count(const float *x, size_t n, const topk_state *s, uint32_t *gt_cnt,
                             uint32_t *eq_cnt)
{
    size_t base = (size_t)blockIdx.x * TOPK_TILE + (size_t)threadIdx.x * TOPK_PER_THREAD;
    uint32_t g = 0, e = 0;
    for (int j = 0; j < TOPK_PER_THREAD; ++j) {
        size_t i = base + j;
        if (i >= n) break;
        uint32_t key = __float_as_uint(x[i]) & 0x7fffffffu;
        g += topk_is_gt(key, s);
        e += topk_is_eq(key, s);
    }
    uint32_t ex;
    uint32_t tg = block_scan(g, &ex);
    uint32_t te = block_scan(e, &ex);
    if (threadIdx.x == 0) {
        gt_cnt[blockIdx.x] = tg;
        eq_cnt[blockIdx.x] = te;
    }
}

/* Tile offsets: equal keys before each tile (an exclusive scan of eq_cnt)
 * and output position.  Tiles take equal keys in index order until the
 * budget is spent, so the equal keys all tiles before t took come to
 * min(eq_off[t], budget), and out_off[t] = (keys above the cut before t) +
 * that.  One block scans SDNN_THREADS tiles a round, carrying the totals. */
__global__ void k_topk_offsets(const topk_state *s, size_t tiles, const uint32_t *gt_cnt,
                               const uint32_t *eq_cnt, uint32_t *eq_off, uint32_t *out_off)
{
    uint32_t budget = s->budget, eq_carry = 0, gt_carry = 0;
    for (size_t base = 0; base < tiles; base += SDNN_THREADS) {
        size_t t = base + threadIdx.x;
        uint32_t e = t < tiles ? eq_cnt[t] : 0, g = t < tiles ? gt_cnt[t] : 0;
        uint32_t e_before, g_before;
        uint32_t e_total = block_scan(e, &e_before);
        uint32_t g_total = block_scan(g, &g_before);
        if (t < tiles) {
            uint32_t eqs = eq_carry + e_before;
            eq_off[t] = eqs;
            out_off[t] = gt_carry + g_before + (eqs < budget ? eqs : budget);
        }
        eq_carry += e_total;
        gt_carry += g_total;
    }
}

__global__ void k_topk_emit(const float *x, size_t n, const topk_state *s, const uint32_t *eq_off,
                            const uint32_t *out_off, uint32_t *idx, float *val)
{
    size_t base = (size_t)blockIdx.x * TOPK_TILE + (size_t)threadIdx.x * TOPK_PER_THREAD;
    uint32_t keys[TOPK_PER_THREAD];
    uint32_t e = 0;
    for (int j = 0; j < TOPK_PER_THREAD; ++j) {
        size_t i = base + j;
        keys[j] = i < n ? (__float_as_uint(x[i]) & 0x7fffffffu) : 0u;
        if (i < n) e += topk_is_eq(keys[j], s);
    }
    uint32_t eq_before;
    block_scan(e, &eq_before);
    uint32_t rank = eq_off[blockIdx.x] + eq_before, sel = 0;
    unsigned take = 0;
    for (int j = 0; j < TOPK_PER_THREAD; ++j) {
        size_t i = base + j;
        if (i >= n) break;
        int keep = topk_is_gt(keys[j], s);
        if (topk_is_eq(keys[j], s)) keep = rank++ < s->budget;
        if (keep) {
            take |= 1u << j;
            ++sel;
        }
    }
    uint32_t pos;
    block_scan(sel, &pos);
    pos += out_off[blockIdx.x];
    for (int j = 0; j < TOPK_PER_THREAD; ++j) {
        if (!(take & (1u << j))) continue;
        size_t i = base + j;
        idx[pos] = (uint32_t)i;
        val[pos] = x[i];
        ++pos;
    }
}

__global__ void k_topk_scatter(const uint32_t *idx, const float *val, size_t k, size_t n,
                               float *y, int add)
{
    SDNN_FOR(j, k) {
        uint32_t i = idx[j];
        if (i < n) y[i] = add ? __fadd_rn(val[j], y[i]) : val[j];
    }
}

/* y[idx[j]] = val[j] + a[idx[j]], y and a apart (decode_add after k_add_zero). */
__global__ void k_topk_scatter_add(const uint32_t *idx, const float *val, size_t k, size_t n,
                                   const float *a, float *y)
{
    SDNN_FOR(j, k) {
        uint32_t i = idx[j];
        if (i < n) y[i] = __fadd_rn(val[j], a[i]);
    }
}

/* decode_add in place (y == a): each element finds its entry, if any, by a
 * binary search of the ascending indices (the first of equal ones, as the
 * host's pass in index order keeps), so every element is read and written
 * by one thread and no scratch is needed. */
__global__ void k_topk_merge_add(const uint32_t *idx, const float *val, size_t k, size_t n,
                                 float *y)
{
    SDNN_FOR(i, n) {
        size_t lo = 0, hi = k;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (idx[mid] < i) lo = mid + 1;
            else hi = mid;
        }
        float d = lo < k && idx[lo] == i ? val[lo] : 0.0f;
        y[i] = __fadd_rn(d, y[i]);
    }
}

__global__ void k_add_zero(const float *a, size_t n, float *y)
{
    SDNN_FOR(i, n) y[i] = __fadd_rn(0.0f, a[i]);
}

__global__ void k_zero_at(const uint32_t *idx, size_t k, size_t n, float *v)
{
    SDNN_FOR(j, k) {
        uint32_t i = idx[j];
        if (i < n) v[i] = 0;
    }
}

/* ---- error feedback element steps ------------------------------------------------ */

__global__ void k_ef_add(float *residual, const float *g, size_t n)
{
    SDNN_FOR(i, n) residual[i] = __fadd_rn(g[i], residual[i]);
}

__global__ void k_ef_momentum(float *u, float *v, const float *g, float m, size_t n)
{
    SDNN_FOR(i, n) {
        float ui = __fadd_rn(__fmul_rn(m, u[i]), g[i]);
        u[i] = ui;
        v[i] = __fadd_rn(v[i], ui);
    }
}

__global__ void k_ef_sub(float *residual, const float *sent, size_t n)
{
    SDNN_FOR(i, n) residual[i] = __fsub_rn(residual[i], sent[i]);
}

/* ---- entry points ------------------------------------------------------------------ */

extern "C" size_t sdnn_dcodec_scratch_bytes(int codec, const sdnn_codec_params *p, size_t n)
{
    (void)p;
    if (codec != SDNN_DCODEC_TOPK) return 0;
    size_t tiles = topk_tiles(n);
    return sizeof(topk_state) + 4 * tiles * sizeof(uint32_t) + 256;
}

static size_t topk_k(const sdnn_codec_params *p, size_t n) { return sdnn_codec_topk_k(p->topk_ratio, n); }

static sdnn_status topk_encode(sdnn_dctx *c, cudaStream_t st, const sdnn_codec_params *p,
                               const float *x, size_t n, void *out, void *scratch)
{
    size_t k = topk_k(p, n);
    if (k == 0) return SDNN_OK;
    if (n >= 0xffffffffu)
        return SDNN_ERROR(SDNN_ERR_INVALID, "topk: %zu elements, indices are 32-bit", n);
    topk_state *s = (topk_state *)scratch;
    size_t tiles = topk_tiles(n);
    uint32_t *gt_cnt = (uint32_t *)(s + 1), *eq_cnt = gt_cnt + tiles;
    uint32_t *eq_off = eq_cnt + tiles, *out_off = eq_off + tiles;
    SDNN_LAUNCH(k_topk_init, 1, 1, 0, st, s, (uint32_t)k, k == n);
    SDNN_LAUNCHED("topk init");
    if (k < n) {
        static const int shifts[3] = {20, 9, 0}, widths[3] = {11, 11, 9};
        for (int level = 0; level < 3; ++level) {
            SDNN_LAUNCH(k_topk_clear, 1, SDNN_THREADS, 0, st, s);
            SDNN_LAUNCHED("topk clear");
            int above = shifts[level] + widths[level];
            unsigned grid = sdnn_grid(n) < 1024 ? sdnn_grid(n) : 1024;
            SDNN_LAUNCH(k_topk_hist, grid, SDNN_THREADS, 0, st, x, n, s, above, shifts[level],
                (1u << widths[level]) - 1u, level);
            SDNN_LAUNCHED("topk histogram");
            SDNN_LAUNCH(k_topk_walk, 1, SDNN_THREADS, 0, st, s, widths[level], shifts[level],
                level == 2);
            SDNN_LAUNCHED("topk walk");
        }
    }
    SDNN_LAUNCH(k_topk_count, (unsigned)tiles, SDNN_THREADS, 0, st, x, n, s, gt_cnt, eq_cnt);
    SDNN_LAUNCHED("topk count");
    SDNN_LAUNCH(k_topk_offsets, 1, SDNN_THREADS, 0, st, s, tiles, gt_cnt, eq_cnt, eq_off, out_off);
    SDNN_LAUNCHED("topk offsets");
    uint32_t *idx = (uint32_t *)out;
    float *val = (float *)(idx + k);
    SDNN_LAUNCH(k_topk_emit, (unsigned)tiles, SDNN_THREADS, 0, st, x, n, s, eq_off, out_off, idx,
        val);
    SDNN_LAUNCHED("topk emit");
    (void)c;
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dcodec_encode(sdnn_dctx *c, int stream, int codec,
                                          const sdnn_codec_params *p, const float *x, size_t n,
                                          void *out, uint64_t rstream, void *scratch)
{
    if (n == 0) return SDNN_OK;
    cudaStream_t st = sdnn_stream(c, stream);
    switch (codec) {
    case SDNN_DCODEC_NONE:
        SDNN_CU(cudaMemcpyAsync(out, x, n * sizeof(float), cudaMemcpyDeviceToDevice, st));
        return SDNN_OK;
    case SDNN_DCODEC_FP16:
        SDNN_LAUNCH(k_f16_enc, sdnn_grid(n), SDNN_THREADS, 0, st, x, n, (uint16_t *)out);
        SDNN_LAUNCHED("fp16 encode");
        return SDNN_OK;
    case SDNN_DCODEC_BF16:
        SDNN_LAUNCH(k_bf16_enc, sdnn_grid(n), SDNN_THREADS, 0, st, x, n, (uint16_t *)out);
        SDNN_LAUNCHED("bf16 encode");
        return SDNN_OK;
    case SDNN_DCODEC_INT8: {
        size_t chunk = chunk_of(p), nch = chunks_of(n, chunk);
        if (nch > 0x7fffffffu) return SDNN_ERROR(SDNN_ERR_INVALID, "int8: too many chunks");
        float *scales = (float *)out;
        SDNN_LAUNCH(k_int8_enc, (unsigned)nch, SDNN_THREADS, 0, st, x, n, chunk, p->stochastic,
            sdnn_cs_stream_key(p->seed, rstream), scales, (int8_t *)(scales + nch));
        SDNN_LAUNCHED("int8 encode");
        return SDNN_OK;
    }
    case SDNN_DCODEC_TOPK: return topk_encode(c, st, p, x, n, out, scratch);
    default: return SDNN_ERROR(SDNN_ERR_INVALID, "device codec %d unknown", codec);
    }
}

static sdnn_status dense_decode(cudaStream_t st, int codec, const sdnn_codec_params *p,
                                const void *in, size_t n, const float *add, float *y)
{
    switch (codec) {
    case SDNN_DCODEC_NONE:
        if (!add) {
            SDNN_CU(cudaMemcpyAsync(y, in, n * sizeof(float), cudaMemcpyDeviceToDevice, st));
            return SDNN_OK;
        }
        SDNN_LAUNCH(k_dense_dec<SDNN_DCODEC_NONE>, sdnn_grid(n), SDNN_THREADS, 0, st, in, n, add,
            y);
        break;
    case SDNN_DCODEC_FP16:
        SDNN_LAUNCH(k_dense_dec<SDNN_DCODEC_FP16>, sdnn_grid(n), SDNN_THREADS, 0, st, in, n, add,
            y);
        break;
    case SDNN_DCODEC_BF16:
        SDNN_LAUNCH(k_dense_dec<SDNN_DCODEC_BF16>, sdnn_grid(n), SDNN_THREADS, 0, st, in, n, add,
            y);
        break;
    case SDNN_DCODEC_INT8: {
        size_t chunk = chunk_of(p), nch = chunks_of(n, chunk);
        const float *scales = (const float *)in;
        SDNN_LAUNCH(k_int8_dec, sdnn_grid(n), SDNN_THREADS, 0, st, scales,
            (const int8_t *)(scales + nch), n, chunk, add, y);
        break;
    }
    default: return SDNN_ERROR(SDNN_ERR_INVALID, "device codec %d is not dense", codec);
    }
    SDNN_LAUNCHED("decode");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dcodec_decode(sdnn_dctx *c, int stream, int codec,
                                          const sdnn_codec_params *p, const void *in, size_t n,
                                          float *y)
{
    if (n == 0) return SDNN_OK;
    cudaStream_t st = sdnn_stream(c, stream);
    if (codec != SDNN_DCODEC_TOPK) return dense_decode(st, codec, p, in, n, NULL, y);
    size_t k = topk_k(p, n);
    SDNN_CU(cudaMemsetAsync(y, 0, n * sizeof(float), st));
    const uint32_t *idx = (const uint32_t *)in;
    SDNN_LAUNCH(k_topk_scatter, sdnn_grid(k), SDNN_THREADS, 0, st, idx, (const float *)(idx + k), k,
        n, y, 0);
    SDNN_LAUNCHED("topk decode");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dcodec_decode_add(sdnn_dctx *c, int stream, int codec,
                                              const sdnn_codec_params *p, const void *in,
                                              size_t n, const float *add, float *y)
{
    if (n == 0) return SDNN_OK;
    cudaStream_t st = sdnn_stream(c, stream);
    if (codec != SDNN_DCODEC_TOPK) return dense_decode(st, codec, p, in, n, add, y);
    size_t k = topk_k(p, n);
    const uint32_t *idx = (const uint32_t *)in;
    const float *val = (const float *)(idx + k);
    /* The kept entries are val + add, the gaps 0 + add, as the host's one
     * pass in index order; no allocation on this path (it runs once per
     * ring hop). */
    if (y == add) {
        SDNN_LAUNCH(k_topk_merge_add, sdnn_grid(n), SDNN_THREADS, 0, st, idx, val, k, n, y);
        SDNN_LAUNCHED("topk decode_add in place");
        return SDNN_OK;
    }
    SDNN_LAUNCH(k_add_zero, sdnn_grid(n), SDNN_THREADS, 0, st, add, n, y);
    SDNN_LAUNCHED("topk decode_add gaps");
    SDNN_LAUNCH(k_topk_scatter_add, sdnn_grid(k), SDNN_THREADS, 0, st, idx, val, k, n, add, y);
    SDNN_LAUNCHED("topk decode_add entries");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dcodec_accumulate(sdnn_dctx *c, int stream, int codec,
                                              const sdnn_codec_params *p, const void *in,
                                              size_t n, float *y)
{
    if (n == 0) return SDNN_OK;
    cudaStream_t st = sdnn_stream(c, stream);
    if (codec != SDNN_DCODEC_TOPK) return dense_decode(st, codec, p, in, n, y, y);
    size_t k = topk_k(p, n);
    const uint32_t *idx = (const uint32_t *)in;
    SDNN_LAUNCH(k_topk_scatter, sdnn_grid(k), SDNN_THREADS, 0, st, idx, (const float *)(idx + k), k,
        n, y, 1);
    SDNN_LAUNCHED("topk accumulate");
    return SDNN_OK;
}

extern "C" sdnn_status sdnn_dcodec_ef_step(sdnn_dctx *c, int stream, int codec,
                                           const sdnn_codec_params *p, float *g, float *residual,
                                           float *velocity, float momentum, size_t n, void *enc,
                                           void *scratch, uint64_t rstream)
{
    if (n == 0) return SDNN_OK;
    cudaStream_t st = sdnn_stream(c, stream);
    if (codec == SDNN_DCODEC_NONE) {
        if (residual) SDNN_CU(cudaMemsetAsync(residual, 0, n * sizeof(float), st));
        return SDNN_OK;
    }
    if (velocity)
        SDNN_LAUNCH(k_ef_momentum, sdnn_grid(n), SDNN_THREADS, 0, st, velocity, residual, g,
            momentum, n);
    else
        SDNN_LAUNCH(k_ef_add, sdnn_grid(n), SDNN_THREADS, 0, st, residual, g, n);
    SDNN_LAUNCHED("ef accumulate");
    SDNN_CHECK(sdnn_dcodec_encode(c, stream, codec, p, residual, n, enc, rstream, scratch));
    SDNN_CHECK(sdnn_dcodec_decode(c, stream, codec, p, enc, n, g));
    SDNN_LAUNCH(k_ef_sub, sdnn_grid(n), SDNN_THREADS, 0, st, residual, g, n);
    SDNN_LAUNCHED("ef residual");
    if (velocity && codec == SDNN_DCODEC_TOPK) {
        size_t k = topk_k(p, n);
        SDNN_LAUNCH(k_zero_at, sdnn_grid(k), SDNN_THREADS, 0, st, (const uint32_t *)enc, k, n,
            velocity);
        SDNN_LAUNCHED("ef velocity mask");
    }
    return SDNN_OK;
}
