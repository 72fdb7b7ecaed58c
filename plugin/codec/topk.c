/*
 * topk: the k = ceil(ratio n) largest magnitudes, O(n) selection, ties to
 * the lower index, sent as uint32 indices + float values.
 */
#include "codec_impl.h"

/* ---- topk ------------------------------------------------------------------ */

size_t sdnn_codec_topk_k(double ratio, size_t n)
{
    if (n == 0) return 0;
    double want = ratio * (double)n;
    if (!(want > 1)) return 1;            /* also NaN */
    if (want >= (double)n) return n;
    /* A decimal ratio is not exact in binary (0.07 * 100 = 7.000000000000001):
     * a product within a few ulps above an integer counts as that integer. */
    double f = floor(want);
    size_t k = (size_t)(want - f <= want * 0x1p-50 ? f : ceil(want));
    return k < 1 ? 1 : k > n ? n : k;
}

/*
 * Selection by radix on the magnitude bits (|x| orders like its bit pattern
 * with the sign cleared): a histogram of the top 11 bits finds the bin that
 * holds the k-th largest, a second pass refines inside that bin on the next
 * 11 bits, a third on the last 9.  At most three counting passes and one
 * emitting pass over x, O(n) always, no allocation.  Where a bin boundary
 * falls exactly on k the later passes are skipped.
 *
 * The result is a cut: every key >= gt is kept, plus the first `budget`
 * keys (lowest indices) equal to eq.  Counts and indices are 32-bit, as
 * the format's indices are: n must stay below 2^32.
 */
typedef struct topk_cut {
    uint32_t gt, eq;
    size_t budget;
} topk_cut;

#define TOPK_NO_KEY 0xffffffffu   /* above every magnitude key (< 2^31) */

static void topk_histogram(const float *restrict x, size_t n, uint32_t *restrict hist)
{
    /* Four sub-histograms: neighbours that fall in the same bin (common:
     * gradients cluster in a few exponents) do not wait on each other's
     * increments. */
    uint32_t h[4][2048];
    memset(h, 0, sizeof h);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        ++h[0][(f32_bits(x[i]) >> 20) & 0x7ffu];
        ++h[1][(f32_bits(x[i + 1]) >> 20) & 0x7ffu];
        ++h[2][(f32_bits(x[i + 2]) >> 20) & 0x7ffu];
        ++h[3][(f32_bits(x[i + 3]) >> 20) & 0x7ffu];
    }
    for (; i < n; ++i) ++h[0][(f32_bits(x[i]) >> 20) & 0x7ffu];
    for (int b = 0; b < 2048; ++b) hist[b] = h[0][b] + h[1][b] + h[2][b] + h[3][b];
}

/* Keys in [lo, lo + span] are rare in the later passes (one bin of the
 * previous level, the kept entries): a vector test of 16 keys at a time
 * skips the blocks without any. */
#define TOPK_BLOCK 16

SDNN_INLINE int topk_in_range(uint32_t key, uint32_t lo, uint32_t span)
{
    return key - lo <= span;
}

SDNN_INLINE int topk_block_hits(const float *restrict x, uint32_t lo, uint32_t span)
{
    int any = 0;
    for (int j = 0; j < TOPK_BLOCK; ++j)
        any |= topk_in_range(f32_bits(x[j]) & 0x7fffffffu, lo, span);
    return any;
}

SDNN_KERNEL static void topk_histogram_in(const float *restrict x, size_t n, uint32_t lo,
                                          uint32_t span, int shift, uint32_t mask,
                                          uint32_t *restrict hist)
{
    memset(hist, 0, 2048 * sizeof *hist);
    for (size_t i = 0; i < n; i += TOPK_BLOCK) {
        size_t end = n - i < TOPK_BLOCK ? n : i + TOPK_BLOCK;
        if (end - i == TOPK_BLOCK && !topk_block_hits(x + i, lo, span)) continue;
        for (size_t j = i; j < end; ++j) {
            uint32_t key = f32_bits(x[j]) & 0x7fffffffu;
            if (topk_in_range(key, lo, span)) ++hist[(key >> shift) & mask];
        }
    }
}

static topk_cut topk_select(const float *x, size_t n, size_t k)
{
    static const int shifts[3] = {20, 9, 0}, widths[3] = {11, 11, 9};
    uint32_t hist[2048];
    uint32_t prefix = 0;
    size_t need = k;   /* still to take among keys whose high bits == prefix */
    for (int level = 0; level < 3; ++level) {
        int shift = shifts[level];
        uint32_t mask = (1u << widths[level]) - 1u;
        if (level == 0) topk_histogram(x, n, hist);
        else {
            int above = shift + widths[level];
            topk_histogram_in(x, n, prefix << above, (1u << above) - 1u, shift, mask, hist);
        }
        uint32_t b = mask;
        while (hist[b] < need) need -= hist[b--];
        prefix = (prefix << widths[level]) | b;
        if (hist[b] == need) return (topk_cut){prefix << shift, TOPK_NO_KEY, 0};
    }
    return (topk_cut){prefix + 1, prefix, need};
}

static size_t topk_size(const sdnn_codec_params *p, size_t n)
{
    return 2 * sizeof(uint32_t) * sdnn_codec_topk_k(p->topk_ratio, n);
}

SDNN_KERNEL static void topk_emit(const float *restrict x, size_t n, topk_cut cut,
                                  unsigned char *restrict idx, unsigned char *restrict val)
{
    uint32_t lo = cut.budget ? cut.eq : cut.gt;   /* eq == gt - 1 when budget */
    uint32_t span = 0x7fffffffu - lo;
    size_t j = 0;
    for (size_t i = 0; i < n; i += TOPK_BLOCK) {
        size_t end = n - i < TOPK_BLOCK ? n : i + TOPK_BLOCK;
        if (end - i == TOPK_BLOCK && !topk_block_hits(x + i, lo, span)) continue;
        for (size_t e = i; e < end; ++e) {
            uint32_t key = f32_bits(x[e]) & 0x7fffffffu;
            if (key >= cut.gt || (key == cut.eq && cut.budget)) {
                if (key < cut.gt) --cut.budget;
                st32(idx, j, (uint32_t)e);
                stf(val, j, x[e]);
                ++j;
            }
        }
    }
}

static size_t topk_encode(const sdnn_codec_params *p, const float *x, size_t n, void *out,
                          uint64_t stream)
{
    (void)stream;
    size_t k = sdnn_codec_topk_k(p->topk_ratio, n);
    if (k == 0) return 0;
    topk_cut cut = k == n ? (topk_cut){0, TOPK_NO_KEY, 0} : topk_select(x, n, k);
    unsigned char *idx = out;
    topk_emit(x, n, cut, idx, idx + sizeof(uint32_t) * k);
    return 2 * sizeof(uint32_t) * k;
}

/* Indices outside [0, n) (a corrupt buffer) are skipped rather than written. */
static void topk_decode(const sdnn_codec_params *p, const void *in, size_t n, float *y)
{
    size_t k = sdnn_codec_topk_k(p->topk_ratio, n);
    const unsigned char *idx = in, *val = idx + sizeof(uint32_t) * k;
    if (n) memset(y, 0, n * sizeof(float));
    for (size_t j = 0; j < k; ++j) {
        uint32_t i = ld32(idx, j);
        if (i < n) y[i] = ldf(val, j);
    }
}

static void topk_accumulate(const sdnn_codec_params *p, const void *in, size_t n, float *y)
{
    size_t k = sdnn_codec_topk_k(p->topk_ratio, n);
    const unsigned char *idx = in, *val = idx + sizeof(uint32_t) * k;
    for (size_t j = 0; j < k; ++j) {
        uint32_t i = ld32(idx, j);
        if (i < n) y[i] = ldf(val, j) + y[i];
    }
}

/* The gaps between topk entries decode to 0, so decode_add gives them
 * 0 + add, which is add except that -0 becomes +0 (as for the dense codecs). */
SDNN_KERNEL static void add_zero(const float *restrict a, size_t n, float *restrict y)
{
    for (size_t i = 0; i < n; ++i) y[i] = 0.0f + a[i];
}

SDNN_KERNEL static void add_zero_inplace(float *restrict y, size_t n)
{
    for (size_t i = 0; i < n; ++i) y[i] = 0.0f + y[i];
}

static void topk_fill_gap(const float *add, float *y, size_t lo, size_t hi)
{
    if (y == add) add_zero_inplace(y + lo, hi - lo);
    else add_zero(add + lo, hi - lo, y + lo);
}

/* One pass in index order, so y may alias add. */
static void topk_decode_add(const sdnn_codec_params *p, const void *in, size_t n,
                            const float *add, float *y)
{
    size_t k = sdnn_codec_topk_k(p->topk_ratio, n);
    const unsigned char *idx = in, *val = idx + sizeof(uint32_t) * k;
    size_t done = 0;
    for (size_t j = 0; j < k; ++j) {
        size_t i = ld32(idx, j);
        if (i < done || i >= n) continue;
        topk_fill_gap(add, y, done, i);
        y[i] = ldf(val, j) + add[i];
        done = i + 1;
    }
    topk_fill_gap(add, y, done, n);
}

const sdnn_codec_ops sdnn_codec_topk = {
    .name = "topk",
    /* Measured (bench/tta_lab.sh: yolov3-tiny 128x128 to mAP@0.5
     * 0.10 on 2 lab hosts, 3 seeds x 2 links, +-50 iterations): 1.11 to
     * 1.71 x none's iterations, median 1.31 (the first default, 1.5, came
     * from one seed at +-100). */
    .iter_factor = 1.3,
    .lossy = 1,
    .dense = 0,
    .encoded_size = topk_size,
    .align = align_one,
    .encode = topk_encode,
    .decode = topk_decode,
    .decode_add = topk_decode_add,
    .accumulate = topk_accumulate,
};

