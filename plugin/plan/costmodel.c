/*
 * costmodel: links, collectives, codecs and the event simulation of one
 * step (see costmodel.h for the model).
 *
 * The named links are typical values, not measurements of this machine
 * (`plan` measures the local backend instead).  beta is the sustained rate
 * one rank gets in one direction, alpha the per-message cost of the stack
 * that drives the link (driver, NCCL or MPI step, TCP):
 *
 *  pcie3   12 GB/s,  5 us  PCIe 3.0 x16: 8 GT/s x 16 lanes x 128/130 =
 *                          15.75 GB/s raw per direction; CUDA's
 *                          bandwidthTest reaches 12-13 GB/s pinned.
 *  pcie4   24 GB/s,  5 us  PCIe 4.0 x16: 31.5 GB/s raw; ~24-26 GB/s seen.
 *  pcie5   48 GB/s,  5 us  PCIe 5.0 x16: 63 GB/s raw; ~48-55 GB/s seen.
 *  nvlink2 150 GB/s, 3 us  V100 SXM2: 6 NVLink2 links x 25 GB/s per
 *                          direction (300 GB/s both directions together).
 *  nvlink3 300 GB/s, 3 us  A100 SXM: 12 NVLink3 links x 25 GB/s.
 *  nvlink4 450 GB/s, 3 us  H100 SXM: 18 NVLink4 links x 25 GB/s.
 *  eth1g   0.117 GB/s, 50 us  1 Gb/s = 125 MB/s; TCP over a 1500-byte MTU
 *                          delivers ~94% of it; a kernel TCP round of a
 *                          small message costs tens of microseconds.
 *  eth100m 0.0117 GB/s, 50 us the same at 100 Mb/s (the network lab's slow link).
 *  eth10g  1.17 GB/s, 20 us   the same at 10 Gb/s.
 *  eth100g 11.7 GB/s, 10 us   the same at 100 Gb/s (RoCE would be lower).
 *  ib_edr  12 GB/s,   3 us    InfiniBand EDR 4x: 100 Gb/s, 64b/66b coding.
 *  ib_hdr  24 GB/s,   3 us    InfiniBand HDR 4x: 200 Gb/s.
 * The NVLink rates assume a ring that uses every link of a GPU (NCCL runs
 * several rings at once); a machine whose topology gives a ring fewer
 * links is slower.
 */
#include "costmodel.h"
#include "collective.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sdnn_link links[] = {
    {"pcie3", 5e-6, 12e9},     {"pcie4", 5e-6, 24e9},     {"pcie5", 5e-6, 48e9},
    {"nvlink2", 3e-6, 150e9},  {"nvlink3", 3e-6, 300e9},  {"nvlink4", 3e-6, 450e9},
    {"eth100m", 50e-6, 0.0117e9}, {"eth1g", 50e-6, 0.117e9}, {"eth10g", 20e-6, 1.17e9}, {"eth100g", 10e-6, 11.7e9},
    {"ib_edr", 3e-6, 12e9},    {"ib_hdr", 3e-6, 24e9},
};
#define NLINKS ((int)(sizeof links / sizeof links[0]))

int sdnn_link_count(void) { return NLINKS; }

const sdnn_link *sdnn_link_at(int i)
{
    return i >= 0 && i < NLINKS ? &links[i] : NULL;
}

const char *sdnn_link_names(void)
{
    return "pcie3, pcie4, pcie5, nvlink2, nvlink3, nvlink4, eth100m, eth1g, eth10g, eth100g, "
           "ib_edr, ib_hdr";
}

sdnn_status sdnn_link_find(const char *name, sdnn_link *out)
{
    for (int i = 0; name && i < NLINKS; ++i)
        if (strcmp(name, links[i].name) == 0) {
            *out = links[i];
            return SDNN_OK;
        }
    return SDNN_ERROR(SDNN_ERR_INVALID, "link %s: unknown link (%s)", name ? name : "(null)",
                      sdnn_link_names());
}

sdnn_status sdnn_link_custom(double gbytes_per_s, double latency_us, sdnn_link *out)
{
    if (!(gbytes_per_s > 0) || !isfinite(gbytes_per_s))
        return SDNN_ERROR(SDNN_ERR_INVALID, "link bandwidth %g GB/s: expected a number > 0",
                          gbytes_per_s);
    if (!(latency_us >= 0) || !isfinite(latency_us))
        return SDNN_ERROR(SDNN_ERR_INVALID, "link latency %g us: expected a number >= 0",
                          latency_us);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "custom");
    out->alpha_s = latency_us * 1e-6;
    out->beta_Bps = gbytes_per_s * 1e9;
    return SDNN_OK;
}

/* Least-squares slope of secs on bytes over the sizes ix[from..to) (the
 * indices sorted by size); *mean_bytes = their mean size.  0 when the
 * sizes do not differ. */
static double ols_slope(const double *bytes, const double *secs, const int *ix, int from, int to,
                        double *mean_bytes)
{
    double mx = 0, my = 0, sxx = 0, sxy = 0;
    int m = to - from;
    for (int k = from; k < to; ++k) {
        mx += bytes[ix[k]] / m;
        my += secs[ix[k]] / m;
    }
    for (int k = from; k < to; ++k) {
        double dx = bytes[ix[k]] - mx;
        sxx += dx * dx;
        sxy += dx * (secs[ix[k]] - my);
    }
    *mean_bytes = mx;
    return sxx > 1e-12 * mx * mx ? sxy / sxx : 0;
}

sdnn_status sdnn_link_fit(const double *bytes, const double *secs, int n, int world,
                          sdnn_link *out)
{
    enum { MAXN = 32 };
    if (n < 2) return SDNN_ERROR(SDNN_ERR_INVALID, "link fit: %d timings, need 2 or more", n);
    if (n > MAXN) return SDNN_ERROR(SDNN_ERR_INVALID, "link fit: %d timings, at most %d", n, MAXN);
    if (world < 2)
        return SDNN_ERROR(SDNN_ERR_INVALID, "link fit: a world of %d moves nothing", world);
    int ix[MAXN];
    for (int i = 0; i < n; ++i) {
        if (!(secs[i] > 0) || !isfinite(secs[i]) || !(bytes[i] >= 0) || !isfinite(bytes[i]))
            return SDNN_ERROR(SDNN_ERR_INVALID, "link fit: timing %d (%g s for %g bytes) is "
                              "not a positive time", i, secs[i], bytes[i]);
        int j = i;              /* insertion sort of the indices by size */
        for (; j > 0 && bytes[ix[j - 1]] > bytes[i]; --j) ix[j] = ix[j - 1];
        ix[j] = i;
    }
    /* The slope from the larger half of the sizes (at least 2): ordinary
     * least squares of time on size. */
    int nl = n - n / 2 < 2 ? 2 : n - n / 2, lo = n - nl;
    double mx, all_mx;
    double b = ols_slope(bytes, secs, ix, lo, n, &mx);
    if (bytes[ix[n - 1]] - bytes[ix[lo]] <= 1e-6 * mx)
        return SDNN_ERROR(SDNN_ERR_INVALID, "link fit: the %d largest timings have the same "
                          "size (%g bytes)", nl, mx);
    /* the larger sizes alone do not grow (a preempted timing on a busy
     * machine): the least-squares slope over every size */
    if (!(b > 0) && lo > 0) b = ols_slope(bytes, secs, ix, 0, n, &all_mx);
    if (!(b > 0))
        return SDNN_ERROR(SDNN_ERR_INVALID, "link fit: times do not grow with the size");
    /* The latency: what the smaller sizes (or the smallest, when every
     * size is in the larger half) took beyond the slope's time. */
    int ns = lo > 0 ? lo : 1;
    double a = 0;
    for (int k = 0; k < ns; ++k) a += (secs[ix[k]] - b * bytes[ix[k]]) / ns;
    if (a < 0) a = 0;            /* no measurable latency (or a shaper's burst) */
    double steps = 2.0 * (world - 1);
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "measured");
    out->alpha_s = a / steps;
    out->beta_Bps = steps / ((double)world * b);
    return SDNN_OK;
}

/* ---- collectives and codecs ------------------------------------------ */

double sdnn_cm_ring_allreduce_s(const sdnn_link *l, int world, double bytes)
{
    if (world <= 1) return 0;
    return 2.0 * (world - 1) * (l->alpha_s + bytes / ((double)world * l->beta_Bps));
}

double sdnn_cm_central_s(const sdnn_link *l, int world, double bytes)
{
    if (world <= 1) return 0;
    return 2.0 * l->alpha_s + (double)(world - 1) * bytes / l->beta_Bps;
}

double sdnn_cm_allgather_s(const sdnn_link *l, int world, double bytes_per_rank)
{
    if (world <= 1) return 0;
    return (double)(world - 1) * (l->alpha_s + bytes_per_rank / l->beta_Bps);
}

sdnn_codec_model sdnn_codec_model_none(void)
{
    sdnn_codec_model m = {"none", 1.0, 0, 0, 1, 0, 0, 0};
    return m;
}

sdnn_codec_model sdnn_codec_model_of(const sdnn_codec_ops *c, const sdnn_codec_params *p,
                                     double enc_Bps, double dec_Bps)
{
    const size_t n = (size_t)1 << 20;
    sdnn_codec_model m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "%s", c->name);
    m.ratio = (double)c->encoded_size(p, n) / (double)(n * sizeof(float));
    m.enc_Bps = enc_Bps;
    m.dec_Bps = dec_Bps;
    m.dense = c->dense;
    m.lossy = c->lossy;
    return m;
}

/* ---- iterations to the target ------------------------------------------- */

/* The next item of an override list: [*p, end) up to ',' or the end. */
static const char *next_item(const char *p, const char **end)
{
    const char *c = strchr(p, ',');
    *end = c ? c : p + strlen(p);
    return p;
}

/* "NAME:X" in [p, end): the name (copied to name[0..len)) and X; 0, or -1
 * and why. */
static int parse_item(const char *p, const char *end, char *name, size_t len, double *x,
                      char *why, size_t wlen)
{
    size_t n = (size_t)(end - p);
    const char *colon = memchr(p, ':', n);
    if (n == 0) {
        snprintf(why, wlen, "an empty item (expected NAME:X, e.g. topk:1.5)");
        return -1;
    }
    if (!colon || colon == p || colon + 1 == end) {
        snprintf(why, wlen, "%.*s: expected NAME:X, e.g. topk:1.5", (int)(n > 40 ? 40 : n), p);
        return -1;
    }
    size_t nl = (size_t)(colon - p);
    if (nl >= len) nl = len - 1;
    memcpy(name, p, nl);
    name[nl] = '\0';
    const sdnn_codec_ops *c = sdnn_codec_find(name);
    if (!c) {
        snprintf(why, wlen, "unknown codec %s (%s)", name, sdnn_codec_names());
        return -1;
    }
    char num[32];
    size_t xl = (size_t)(end - colon - 1);
    int ok = xl < sizeof num;
    if (ok) {
        memcpy(num, colon + 1, xl);
        num[xl] = '\0';
        for (size_t i = 0; i < xl; ++i)
            if (!strchr("0123456789.eE+-", num[i])) ok = 0;
    }
    char *e = NULL;
    double v = ok ? strtod(num, &e) : 0;
    if (!ok || e == num || *e != '\0' || !isfinite(v) || !(v > 0) || v > SDNN_ITER_FACTOR_MAX) {
        snprintf(why, wlen, "%s:%.*s: expected a factor > 0 and <= %g (iterations to the "
                 "target against none's)", name, (int)(xl > 32 ? 32 : xl), colon + 1,
                 SDNN_ITER_FACTOR_MAX);
        return -1;
    }
    if (!c->lossy && v != 1.0) {
        snprintf(why, wlen, "%s:%.*s: %s is the reference, its factor is 1", name,
                 (int)(xl > 32 ? 32 : xl), colon + 1, name);
        return -1;
    }
    *x = v;
    return 0;
}

int sdnn_iter_factor_check(const char *spec, char *why, size_t len)
{
    if (!spec || !*spec) return 0;
    char seen[16][16];
    int nseen = 0;
    for (const char *p = spec;;) {
        const char *end;
        next_item(p, &end);
        char name[16];
        double x;
        if (parse_item(p, end, name, sizeof name, &x, why, len)) return -1;
        for (int k = 0; k < nseen; ++k)
            if (strcmp(seen[k], name) == 0) {
                snprintf(why, len, "%s is named twice", name);
                return -1;
            }
        if (nseen < 16) snprintf(seen[nseen++], sizeof seen[0], "%s", name);
        if (!*end) return 0;
        p = end + 1;
    }
}

double sdnn_iter_factor(const char *spec, const char *name)
{
    for (const char *p = spec && *spec ? spec : NULL; p;) {
        const char *end;
        next_item(p, &end);
        char item[16], why[8];
        double x;
        if (parse_item(p, end, item, sizeof item, &x, why, sizeof why) == 0 &&
            strcmp(item, name) == 0)
            return x;
        p = *end ? end + 1 : NULL;
    }
    const sdnn_codec_ops *c = sdnn_codec_find(name);
    return c && c->iter_factor > 0 ? c->iter_factor : 1.0;
}

/*
 * Codec work of one rank, after collective.c.  Dense ring: the rank
 * encodes its chunk, re-encodes a chunk after each of the W-1 reduce-scatter
 * hops (W chunk encodings, B in all), decodes a chunk at each of those hops
 * ((W-1)/W B) and decodes every chunk of the all-gather (B).  Sparse: one
 * selection over the bucket, W lists accumulated.
 */
sdnn_cm_exchange sdnn_cm_exchange_cost(const sdnn_cm_env *env, const sdnn_codec_model *m,
                                       double bytes)
{
    return sdnn_cm_exchange_via(env, m, bytes, sdnn_cm_choose(env, m, bytes, m->colls));
}

/* ---- which collective ----------------------------------------------------- */

static const char *const coll_names[SDNN_CM_NCOLL] = {"coded ring", "nccl native all-reduce",
                                                      "all-gather"};

const char *sdnn_cm_coll_name(sdnn_cm_coll c)
{
    return c >= 0 && c < SDNN_CM_NCOLL ? coll_names[c] : "(no collective)";
}

/* The encodings NCCL reduces in their own type, and its name for each. */
static const char *native_type(const sdnn_codec_model *m)
{
    if (!strcmp(m->name, "fp16")) return "half";
    if (!strcmp(m->name, "bf16")) return "bf16";
    return NULL;
}

const char *sdnn_cm_coll_label(sdnn_cm_coll c, const sdnn_codec_model *m)
{
    if (c != SDNN_CM_NATIVE) return sdnn_cm_coll_name(c);
    const char *t = native_type(m);
    if (!t) return sdnn_cm_coll_name(c);
    return !strcmp(t, "half") ? "nccl half all-reduce" : "nccl bf16 all-reduce";
}

int sdnn_cm_coll_fits(const sdnn_codec_model *m, sdnn_cm_coll c)
{
    switch (c) {
    case SDNN_CM_CODED_RING: return m->dense;
    case SDNN_CM_NATIVE: return native_type(m) != NULL;
    case SDNN_CM_ALLGATHER: return 1;
    default: return 0;
    }
}

sdnn_cm_coll sdnn_cm_coll_default(const sdnn_codec_model *m)
{
    return m->dense ? SDNN_CM_CODED_RING : SDNN_CM_ALLGATHER;
}

sdnn_cm_exchange sdnn_cm_exchange_via(const sdnn_cm_env *env, const sdnn_codec_model *m,
                                      double bytes, sdnn_cm_coll c)
{
    sdnn_cm_exchange x = {0, 0, 0, 0};
    if (!sdnn_cm_coll_fits(m, c)) {
        x.total_s = x.wire_s = HUGE_VAL;
        return x;
    }
    int w = env->world;
    if (w <= 1 || !(bytes > 0)) return x;
    double enc = m->enc_Bps > 0 ? bytes / m->enc_Bps : 0;
    double dec = m->dec_Bps > 0 ? bytes / m->dec_Bps : 0;
    double coded = bytes * m->ratio;
    if (c == SDNN_CM_ALLGATHER) {
        x.wire_s = sdnn_cm_allgather_s(&env->link, w, coded);
        x.wire_bytes = sdnn_wire_bytes(SDNN_WIRE_ALLGATHER, w, coded);
        x.codec_s = enc + (double)w * dec;
    } else {
        x.wire_s = sdnn_cm_ring_allreduce_s(&env->link, w, coded);
        x.wire_bytes = sdnn_wire_bytes(SDNN_WIRE_ALLREDUCE, w, coded);
        x.codec_s = c == SDNN_CM_NATIVE ? enc + dec : enc + (2.0 * w - 1.0) / w * dec;
    }
    x.total_s = x.codec_s + x.wire_s;
    return x;
}

/* Why collective k is no candidate for a bucket of `bytes` (NULL: it is
 * one): it does not fit m, is not offered, or sends more than the default
 * under the byte cap. */
static const char *not_candidate(const sdnn_cm_env *env, const sdnn_codec_model *m, double bytes,
                                 unsigned offers, int k)
{
    const sdnn_cm_coll d = sdnn_cm_coll_default(m);
    if (!sdnn_cm_coll_fits(m, (sdnn_cm_coll)k)) return "does not fit";
    if (k == (int)d) return NULL;
    if (!(offers & SDNN_CM_OFFERS(k))) return "not offered";
    if ((offers & SDNN_CM_OFFERS_BYTE_CAP) &&
        sdnn_cm_exchange_via(env, m, bytes, (sdnn_cm_coll)k).wire_bytes >
            sdnn_cm_exchange_via(env, m, bytes, d).wire_bytes * (1 + 1e-12))
        return "not taken: it sends more bytes";
    return NULL;
}

sdnn_cm_coll sdnn_cm_choose(const sdnn_cm_env *env, const sdnn_codec_model *m, double bytes,
                            unsigned offers)
{
    sdnn_cm_coll best = sdnn_cm_coll_default(m);
    if (!m->lossy) return best;
    double t = sdnn_cm_exchange_via(env, m, bytes, best).total_s;
    for (int c = 0; c < SDNN_CM_NCOLL; ++c) {
        if (not_candidate(env, m, bytes, offers, c)) continue;
        double tc = sdnn_cm_exchange_via(env, m, bytes, (sdnn_cm_coll)c).total_s;
        if (tc < t) {
            t = tc;
            best = (sdnn_cm_coll)c;
        }
    }
    return best;
}

/* The cheapest candidate other than c, -1 when there is none; its time in
 * *t. */
static int next_cheapest(const sdnn_cm_env *env, const sdnn_codec_model *m, double bytes,
                         unsigned offers, sdnn_cm_coll c, double *t)
{
    int alt = -1;
    *t = HUGE_VAL;
    for (int k = 0; k < SDNN_CM_NCOLL; ++k) {
        if (k == (int)c || not_candidate(env, m, bytes, offers, k)) continue;
        double tk = sdnn_cm_exchange_via(env, m, bytes, (sdnn_cm_coll)k).total_s;
        if (tk < *t) {
            *t = tk;
            alt = k;
        }
    }
    return alt;
}

static void size_text(double bytes, char *buf, size_t len)
{
    if (bytes >= 1e5) snprintf(buf, len, "%.2f MB", bytes / 1e6);
    else snprintf(buf, len, "%.1f KB", bytes / 1e3);
}

void sdnn_cm_choice_line(const sdnn_cm_env *env, const sdnn_codec_model *m, double bytes,
                         unsigned offers, int bucket, char *buf, size_t len)
{
    const sdnn_cm_coll c = sdnn_cm_choose(env, m, bytes, offers);
    const double t = sdnn_cm_exchange_via(env, m, bytes, c).total_s;
    double ta;
    const int alt = next_cheapest(env, m, bytes, offers, c, &ta);
    char size[32];
    size_text(bytes, size, sizeof size);
    int o = snprintf(buf, len, "bucket %d (%s): %s via %s: %.3f ms predicted", bucket, size,
                     m->name, sdnn_cm_coll_label(c, m), t * 1e3);
    if (o < 0 || (size_t)o >= len) return;
    int o2 = alt >= 0 ? snprintf(buf + o, len - (size_t)o, " vs %s %.3f ms",
                                 sdnn_cm_coll_label((sdnn_cm_coll)alt, m), ta * 1e3)
                      : snprintf(buf + o, len - (size_t)o, " (the only way)");
    if (o2 < 0 || (size_t)(o + o2) >= len) return;
    o += o2;
    for (int k = 0; k < SDNN_CM_NCOLL; ++k) {
        const char *why = not_candidate(env, m, bytes, offers, k);
        if (k == (int)c || !why || !sdnn_cm_coll_fits(m, (sdnn_cm_coll)k)) continue;
        double tk = sdnn_cm_exchange_via(env, m, bytes, (sdnn_cm_coll)k).total_s;
        if (tk < t && (size_t)o < len) {
            int o3 = snprintf(buf + o, len - (size_t)o, "; %s %.3f ms %s",
                              sdnn_cm_coll_label((sdnn_cm_coll)k, m), tk * 1e3, why);
            if (o3 < 0) return;
            o += o3;
        }
    }
}

double sdnn_cm_crossover(const sdnn_cm_env *env, const sdnn_codec_model *m, sdnn_cm_coll a,
                         sdnn_cm_coll b)
{
    if (!sdnn_cm_coll_fits(m, a)) return 0;
    if (!sdnn_cm_coll_fits(m, b)) return HUGE_VAL;
    /* t(S) = t0 + S t1 for each: read off at two sizes (the model is exact
     * affine in S for S > 0). */
    const double s1 = 1e6, s2 = 2e6;
    const double a1 = sdnn_cm_exchange_via(env, m, s1, a).total_s;
    const double a2 = sdnn_cm_exchange_via(env, m, s2, a).total_s;
    const double b1 = sdnn_cm_exchange_via(env, m, s1, b).total_s;
    const double b2 = sdnn_cm_exchange_via(env, m, s2, b).total_s;
    const double sa = (a2 - a1) / (s2 - s1), sb = (b2 - b1) / (s2 - s1);
    const double ia = a1 - sa * s1, ib = b1 - sb * s1;
    /* a cheaper at S: ia + sa S < ib + sb S, i.e. gap > slope S */
    const double gap = ib - ia, slope = sa - sb;
    const double eps = 1e-12 * (fabs(a2) + fabs(b2));
    if (fabs(slope) * s2 <= eps) return gap > eps ? HUGE_VAL : 0;   /* parallel */
    if (slope < 0) return gap > 0 ? HUGE_VAL : 0;   /* a gains with size: not "below" */
    return gap > 0 ? gap / slope : 0;
}

void sdnn_cm_group_line(const sdnn_cm_env *env, const sdnn_codec_model *m, const double *bytes,
                        const int *ids, int n, unsigned offers, char *buf, size_t len)
{
    if (len) buf[0] = '\0';
    if (n < 1 || !len) return;
    const sdnn_cm_coll c = sdnn_cm_choose(env, m, bytes[0], offers);
    int close = 0;
    double best = HUGE_VAL, lo = bytes[0], hi = bytes[0];
    for (int i = 0; i < n; ++i) {
        double ta, tc = sdnn_cm_exchange_via(env, m, bytes[i], c).total_s;
        (void)next_cheapest(env, m, bytes[i], offers, c, &ta);
        double margin = isfinite(ta) && tc > 0 ? (ta - tc) / tc : HUGE_VAL;
        if (margin < best) best = margin, close = i;
        if (bytes[i] < lo) lo = bytes[i];
        if (bytes[i] > hi) hi = bytes[i];
    }
    sdnn_cm_choice_line(env, m, bytes[close], offers, ids[close], buf, len);
    size_t o = strlen(buf);
    char a[32], b[32];
    size_text(lo, a, sizeof a);
    size_text(hi, b, sizeof b);
    if (n > 1 && o < len)
        o += (size_t)snprintf(buf + o, len - o, "; %d buckets of %s%s%s so (the closest call "
                              "shown)", n, a, lo < hi ? " to " : "", lo < hi ? b : "");
    else if (o < len)
        o += (size_t)snprintf(buf + o, len - o, "; 1 bucket");
    /* where the all-gather meets the cheapest ring the codec can take */
    const int ag_cand = (offers & SDNN_CM_OFFERS(SDNN_CM_ALLGATHER)) ||
                        sdnn_cm_coll_default(m) == SDNN_CM_ALLGATHER;
    sdnn_cm_coll ring = SDNN_CM_NCOLL;
    if (sdnn_cm_coll_fits(m, SDNN_CM_NATIVE) && (offers & SDNN_CM_OFFERS(SDNN_CM_NATIVE)))
        ring = SDNN_CM_NATIVE;
    else if (sdnn_cm_coll_fits(m, SDNN_CM_CODED_RING))
        ring = SDNN_CM_CODED_RING;
    if (ag_cand && ring != SDNN_CM_NCOLL && m->lossy && o < len) {
        double sx = sdnn_cm_crossover(env, m, SDNN_CM_ALLGATHER, ring);
        char x[32];
        size_text(sx, x, sizeof x);
        const int cap = not_candidate(env, m, lo, offers, SDNN_CM_ALLGATHER) != NULL;
        if (cap && sx > 0 && sdnn_cm_coll_default(m) != SDNN_CM_ALLGATHER)
            snprintf(buf + o, len - o, "; the all-gather would be cheaper %s%s at world %d, "
                     "at %.1f x the ring's bytes", isinf(sx) ? "at every size" : "below ",
                     isinf(sx) ? "" : x, env->world, env->world / 2.0);
        else if (isinf(sx))
            snprintf(buf + o, len - o, "; the all-gather is cheaper than the %s at every size "
                     "at world %d", sdnn_cm_coll_label(ring, m), env->world);
        else if (sx > 0)
            snprintf(buf + o, len - o, "; the all-gather is cheaper than the %s below %s at "
                     "world %d", sdnn_cm_coll_label(ring, m), x, env->world);
        else
            snprintf(buf + o, len - o, "; the %s is cheaper than the all-gather at every size "
                     "at world %d", sdnn_cm_coll_label(ring, m), env->world);
    }
}

double sdnn_cm_ef_s(const sdnn_cm_env *env, const sdnn_codec_model *m, double bytes)
{
    if (!m->ef || !m->lossy || env->world <= 1 || !(bytes > 0)) return 0;
    return (m->enc_Bps > 0 ? bytes / m->enc_Bps : 0) + (m->dec_Bps > 0 ? bytes / m->dec_Bps : 0);
}

/* ---- profiles ------------------------------------------------------------ */

sdnn_status sdnn_cost_profile_alloc(int n, sdnn_cost_profile *out)
{
    memset(out, 0, sizeof *out);
    if (n < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "a profile needs at least one layer, got %d", n);
    out->layer = calloc((size_t)n, sizeof *out->layer);
    if (!out->layer) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a %d-layer profile", n);
    out->n = n;
    out->batch = 1;
    out->subdivisions = 1;
    return SDNN_OK;
}

void sdnn_cost_profile_free(sdnn_cost_profile *p)
{
    if (!p) return;
    free(p->layer);
    memset(p, 0, sizeof *p);
}

sdnn_status sdnn_cost_profile_scaled(const sdnn_cost_profile *p, double speed,
                                     sdnn_cost_profile *out)
{
    if (!(speed > 0) || !isfinite(speed))
        return SDNN_ERROR(SDNN_ERR_INVALID, "speed factor %g: expected a number > 0", speed);
    SDNN_CHECK(sdnn_cost_profile_alloc(p->n, out));
    out->batch = p->batch;
    out->subdivisions = p->subdivisions;
    for (int i = 0; i < p->n; ++i) {
        out->layer[i] = p->layer[i];
        out->layer[i].fwd_s /= speed;
        out->layer[i].bwd_s /= speed;
        out->layer[i].upd_s /= speed;
    }
    return SDNN_OK;
}

/* Start of the last subdivision's backward. */
static double last_backward_start(const sdnn_cost_profile *p)
{
    double f = 0, b = 0;
    for (int i = 0; i < p->n; ++i) {
        f += p->layer[i].fwd_s;
        b += p->layer[i].bwd_s;
    }
    int s = p->subdivisions > 0 ? p->subdivisions : 1;
    return (double)(s - 1) * (f + b) + f;
}

static double backward_end(const sdnn_cost_profile *p)
{
    return sdnn_cm_ready_s(p, 1, 0);
}

double sdnn_cm_ready_s(const sdnn_cost_profile *p, int overlap, int lo)
{
    if (!overlap) lo = 0;
    double t = last_backward_start(p);
    for (int j = p->n - 1; j >= lo; --j) t += p->layer[j].bwd_s;
    return t;
}

double sdnn_cost_profile_compute_s(const sdnn_cost_profile *p)
{
    double t = backward_end(p);
    for (int i = 0; i < p->n; ++i) t += p->layer[i].upd_s;
    return t;
}

double sdnn_cost_profile_bytes(const sdnn_cost_profile *p)
{
    double s = 0;
    for (int i = 0; i < p->n; ++i) s += p->layer[i].bytes;
    return s;
}

/* ---- one step ------------------------------------------------------------ */

void sdnn_cm_bucket_bytes(const sdnn_cost_profile *p, sdnn_cm_bucket *b, int nb)
{
    for (int k = 0; k < nb; ++k) {
        double s = 0;
        for (int i = b[k].lo; i <= b[k].hi && i < p->n; ++i)
            if (i >= 0) s += p->layer[i].bytes;
        b[k].bytes = s;
    }
}

static sdnn_status check_buckets(const sdnn_cost_profile *p, const sdnn_cm_env *env,
                                 const sdnn_cm_bucket *b, int nb)
{
    int above = p->n;   /* every layer of the next bucket lies below this */
    for (int k = 0; k < nb; ++k) {
        if (b[k].lo < 0 || b[k].hi < b[k].lo || b[k].hi >= above)
            return SDNN_ERROR(SDNN_ERR_INVALID, "bucket %d: layers %d..%d are not a range below "
                              "layer %d (buckets go from the last layer down)",
                              k, b[k].lo, b[k].hi, above);
        if (b[k].codec < 0 || b[k].codec >= env->ncodecs)
            return SDNN_ERROR(SDNN_ERR_INVALID, "bucket %d: codec %d of %d", k, b[k].codec,
                              env->ncodecs);
        double bytes = 0;
        for (int i = b[k].lo; i <= b[k].hi; ++i) bytes += p->layer[i].bytes;
        if (!(bytes > 0))
            return SDNN_ERROR(SDNN_ERR_INVALID, "bucket %d: layers %d..%d have nothing to "
                              "exchange", k, b[k].lo, b[k].hi);
        for (int i = b[k].hi + 1; i < above; ++i)
            if (p->layer[i].bytes > 0)
                return SDNN_ERROR(SDNN_ERR_INVALID, "layer %d has parameters but no bucket", i);
        above = b[k].lo;
    }
    for (int i = 0; i < above; ++i)
        if (p->layer[i].bytes > 0)
            return SDNN_ERROR(SDNN_ERR_INVALID, "layer %d has parameters but no bucket", i);
    return SDNN_OK;
}

sdnn_status sdnn_cm_simulate(const sdnn_cost_profile *p, const sdnn_cm_env *env,
                             sdnn_cm_bucket *b, int nb, sdnn_cm_result *r)
{
    memset(r, 0, sizeof *r);
    SDNN_CHECK(check_buckets(p, env, b, nb));

    /* The error-feedback passes run on the replica threads in bucket
     * order; without overlap every bucket waits for the whole backward,
     * passes included. */
    double shift = 0;
    if (!env->overlap)
        for (int k = 0; k < nb; ++k) shift += sdnn_cm_ef_s(env, &env->codecs[b[k].codec], b[k].bytes);
    double prev_end = 0;
    for (int k = 0; k < nb; ++k) {
        const sdnn_codec_model *m = &env->codecs[b[k].codec];
        sdnn_cm_exchange x = sdnn_cm_exchange_cost(env, m, b[k].bytes);
        if (env->overlap) shift += sdnn_cm_ef_s(env, m, b[k].bytes);
        b[k].ready_s = sdnn_cm_ready_s(p, env->overlap, b[k].lo) + shift;
        b[k].start_s = b[k].ready_s > prev_end ? b[k].ready_s : prev_end;
        b[k].end_s = b[k].start_s + x.total_s;
        prev_end = b[k].end_s;
        r->comm_s += x.total_s;
    }
    r->last_end_s = nb > 0 ? prev_end : 0;
    r->ef_s = shift;
    r->backward_end_s = backward_end(p) + shift;

    /* Darknet's update: forward order, each layer after its bucket. */
    double t = r->backward_end_s, compute = backward_end(p);
    int k = nb - 1;
    for (int i = 0; i < p->n; ++i) {
        while (k >= 0 && b[k].hi < i) --k;
        if (k >= 0 && b[k].lo <= i && p->layer[i].bytes > 0 && b[k].end_s > t) t = b[k].end_s;
        t += p->layer[i].upd_s;
        compute += p->layer[i].upd_s;
    }
    r->step_s = t;
    r->compute_s = compute;
    r->exposed_s = t - compute;
    return SDNN_OK;
}

/* ---- stock Darknet --------------------------------------------------------- */

double sdnn_cm_stock_sync_s(const sdnn_cm_stock *s, double bytes)
{
    if (s->world <= 1) return 0;
    int share = s->share < 1 ? 1 : s->share > s->world ? s->world : s->share;
    double t = share * (2.0 * bytes / s->host.beta_Bps + 2.0 * s->host.alpha_s);
    if (s->host_reduce_Bps > 0) t += (double)s->world * bytes / s->host_reduce_Bps;
    return t;
}

sdnn_status sdnn_cm_stock_step(const sdnn_cost_profile *p, const sdnn_cm_stock *s,
                               sdnn_cm_result *r)
{
    memset(r, 0, sizeof *r);
    if (s->interval < 1)
        return SDNN_ERROR(SDNN_ERR_INVALID, "stock interval %d: expected >= 1", s->interval);
    r->backward_end_s = backward_end(p);
    r->compute_s = sdnn_cost_profile_compute_s(p);
    r->comm_s = sdnn_cm_stock_sync_s(s, sdnn_cost_profile_bytes(p)) / s->interval;
    r->step_s = r->compute_s + r->comm_s;
    r->exposed_s = r->comm_s;
    return SDNN_OK;
}
