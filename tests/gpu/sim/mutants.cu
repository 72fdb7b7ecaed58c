/*
 * mutants: real kernels with one defect put in must fail, and the same
 * checks must pass on the real kernels.  Simulated devices only (make
 * GPU=sim): this shows that the executor and these checks see the defects,
 * never how a GPU runs the kernels.
 *
 * Each mutant is a copy of one real .cu file of plugin/cuda with one exact
 * text replaced (tests/gpu/sim/mutate.sh lists them and why), built into
 * its own copy of this program (mk/gpu.mk: mutants.d/NAME), where the
 * mutated object stands in for the real one (the library's member of that
 * file is then never linked).  Every .cu file with kernels is in the
 * library on GPU=sim (mk/gpu.mk's GPU_SIM_CU), so the real program links
 * the library's members.
 *
 *   mutants              every check on the real kernels (each must pass),
 *                        then every mutant's program (each must report
 *                        the defect its check is there to catch)
 *   mutants --mutant M   (the program of mutant M) M's check, which must
 *                        fail: prints "detected: ..." and exits 0 when it
 *                        does, exits 1 when the defect went unseen
 */
#include "bn.cuh"
#include "codec.h"
#include "cuda_util.cuh"
#include "ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

/* One check's outcome: empty when it passed, else what went wrong. */
typedef std::string outcome;

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

static outcome err(const char *what)
{
    return std::string(what) + ": " + sdnn_last_error();
}

/* The status of what was queued: a launch error or the next sync's. */
static sdnn_status settle(sdnn_dctx *c, sdnn_status st)
{
    sdnn_status le = sdnn_ex_take_launch_error();
    sdnn_status sy = sdnn_dctx_sync(c);
    return st != SDNN_OK ? st : le != SDNN_OK ? le : sy;
}

static void *dalloc(sdnn_dctx *c, size_t bytes)
{
    void *p = NULL;
    if (sdnn_dmalloc(c, bytes, &p) != SDNN_OK) {
        std::printf("  FAIL  dmalloc %zu bytes: %s\n", bytes, sdnn_last_error());
        std::exit(1);
    }
    return p;
}

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float uniform(float lo, float hi)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return lo + (hi - lo) * (float)((g_rng >> 40) * (1.0 / 16777216.0));
}

/* ---- the checks ------------------------------------------------------------------------ */

/* int8 encode of 1000 floats (four 256-element chunks, the last partial):
 * the device bytes are the host codec's. */
static outcome check_int8(sdnn_dctx *c)
{
    const size_t n = 1000;
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    std::vector<float> x(n);
    for (auto &v : x) v = uniform(-3, 3);
    size_t eb = sdnn_codec_int8.encoded_size(&p, n);
    std::vector<unsigned char> want(eb), got(eb);
    sdnn_codec_int8.encode(&p, x.data(), n, want.data(), 7);
    float *dx = (float *)dalloc(c, n * sizeof(float));
    void *de = dalloc(c, eb);
    size_t cs = sdnn_dcodec_scratch_bytes(SDNN_DCODEC_INT8, &p, n);
    void *sc = cs ? dalloc(c, cs) : NULL;
    sdnn_dcopy(c, 0, dx, x.data(), n * sizeof(float), 1);
    sdnn_status st = settle(c, sdnn_dcodec_encode(c, 0, SDNN_DCODEC_INT8, &p, dx, n, de, 7, sc));
    outcome r;
    if (st != SDNN_OK) {
        r = err("int8 encode");
    } else {
        sdnn_dcopy(c, 0, got.data(), de, eb, 1);
        if (std::memcmp(got.data(), want.data(), eb) != 0)
            r = "int8 encode: the device bytes differ from the host codec's";
    }
    sdnn_dfree(sc);
    sdnn_dfree(de);
    sdnn_dfree(dx);
    return r;
}

/* sdnn_k_fill of 100 and of 257 floats: every element set. */
static outcome check_fill(sdnn_dctx *c)
{
    for (size_t n : {(size_t)100, (size_t)257}) {
        float *d = (float *)dalloc(c, n * sizeof(float));
        sdnn_status st = settle(c, sdnn_k_fill(c, d, n, 1.5f));
        if (st != SDNN_OK) {
            sdnn_dfree(d);
            return err(("fill of " + std::to_string(n)).c_str());
        }
        std::vector<float> h(n);
        sdnn_dcopy(c, 0, h.data(), d, n * sizeof(float), 1);
        sdnn_dfree(d);
        for (size_t i = 0; i < n; ++i)
            if (h[i] != 1.5f)
                return "fill of " + std::to_string(n) + ": element " + std::to_string(i) +
                       " not written";
    }
    return "";
}

/* Batch-norm forward (training) of batch 2 x C channels x 9 positions with
 * C = 64 (the mean and variance buffers end at a page's guard) and C = 200
 * (two 128-thread blocks of the finishing kernels, the second partial), and
 * one channel of 2^24 + 3 values (64 parts, a float index past 2^24): each
 * channel's mean and variance against a double-precision sum.  Error model
 * (Higham, Accuracy and Stability, 4.2): a sum computed as a tree in which
 * no value passes through more than d additions errs by at most
 * gamma_d = d u / (1 - d u) times the sum of the magnitudes (u = 2^-24).
 * d <= m in any order; bn.cu's reduction has d <= ceil(m / (parts x 32))
 * (the values a thread adds in turn, blocks of at least 32 threads)
 * + 8 (a tree of at most 256) + parts (the finishing thread), parts =
 * min(64, ceil(m / 4096)); d is the smaller.  The variance's terms also
 * carry the mean's error, 2 |x - mean| e_mean each.  A channel left
 * unwritten (NaN) or summed wrong is O(1) off. */
static outcome check_bn_forward(sdnn_dctx *c)
{
    const double u = std::ldexp(1.0, -24);
    struct shape { int batch, S, C; };
    for (shape sh : {shape{2, 9, 64}, shape{2, 9, 200}, shape{1, (1 << 24) + 3, 1}}) {
        const int batch = sh.batch, S = sh.S, C = sh.C;
        const size_t m = (size_t)batch * S;
        size_t parts = std::min<size_t>(64, (m + 4095) / 4096);
        size_t d = std::min(m, (m + parts * 32 - 1) / (parts * 32) + 8 + parts);
        const double gm = d * u / (1 - d * u);
        size_t n = m * C;
        std::vector<float> x(n);
        for (auto &v : x) v = uniform(-2, 5);
        std::vector<float *> buf;
        auto dnew = [&](size_t floats) {
            float *p = (float *)dalloc(c, floats * sizeof(float));
            buf.push_back(p);
            return p;
        };
        sdnn_bn_args a;
        std::memset(&a, 0, sizeof a);
        a.batch = batch;
        a.channels = C;
        a.spatial = S;
        a.exact = 1;
        a.out = dnew(n);
        a.x = dnew(n);
        a.x_norm = dnew(n);
        a.mean = dnew(C);
        a.var = dnew(C);
        a.rolling_mean = dnew(C);
        a.rolling_var = dnew(C);
        a.scales = dnew(C);
        a.biases = dnew(C);
        a.partial = dnew(sdnn_bn_partial_floats(C));
        sdnn_dcopy(c, 0, a.out, x.data(), n * sizeof(float), 1);
        sdnn_k_fill(c, a.mean, C, NAN);
        sdnn_k_fill(c, a.var, C, NAN);
        sdnn_k_fill(c, a.scales, C, 1.0f);
        sdnn_status st = settle(c, sdnn_bn_forward(c, &a, 1));
        outcome r;
        if (st != SDNN_OK) r = err(("bn forward, " + std::to_string(C) + " channels").c_str());
        std::vector<float> mean(C), var(C);
        if (r.empty()) {
            sdnn_dcopy(c, 0, mean.data(), a.mean, C * sizeof(float), 1);
            sdnn_dcopy(c, 0, var.data(), a.var, C * sizeof(float), 1);
        }
        for (int ch = 0; r.empty() && ch < C; ++ch) {
            double s = 0, sa = 0;
            for (int b = 0; b < batch; ++b)
                for (int k = 0; k < S; ++k) {
                    double v = x[((size_t)b * C + ch) * S + k];
                    s += v;
                    sa += std::fabs(v);
                }
            double mu = s / m, e_mu = gm * sa / m + u * std::fabs(mu);
            double q = 0, qa = 0;
            for (int b = 0; b < batch; ++b)
                for (int k = 0; k < S; ++k) {
                    double d = x[((size_t)b * C + ch) * S + k] - mu;
                    q += d * d;
                    qa += d * d + 2 * std::fabs(d) * e_mu;
                }
            double vr = q / (m - 1), e_v = (gm + 2 * u) * qa / (m - 1);
            if (!(std::fabs(mean[ch] - mu) <= e_mu) || !(std::fabs(var[ch] - vr) <= e_v)) {
                char msg[256];
                std::snprintf(msg, sizeof msg,
                              "bn forward, %d channels: channel %d mean %.9g (want %.9g +- %.2g), "
                              "variance %.9g (want %.9g +- %.2g)",
                              C, ch, mean[ch], mu, e_mu, var[ch], vr, e_v);
                r = msg;
            }
        }
        for (float *p : buf) sdnn_dfree(p);
        if (!r.empty()) return r;
    }
    return "";
}

/* The bias gradient of a connected layer with 70,000 outputs (more blocks
 * than gridDim.y may hold): bias_updates += delta, exactly (one term each). */
static outcome check_bias_wide(sdnn_dctx *c)
{
    const int C = 70000;
    std::vector<float> d(C), u0(C);
    for (int i = 0; i < C; ++i) {
        d[i] = uniform(-1, 1);
        u0[i] = uniform(-1, 1);
    }
    float *dd = (float *)dalloc(c, C * sizeof(float)), *du = (float *)dalloc(c, C * sizeof(float));
    float *part = (float *)dalloc(c, sdnn_bn_partial_floats(C) * sizeof(float));
    sdnn_dcopy(c, 0, dd, d.data(), C * sizeof(float), 1);
    sdnn_dcopy(c, 0, du, u0.data(), C * sizeof(float), 1);
    sdnn_status st = settle(c, sdnn_bias_backward(c, du, dd, 1, C, 1, part));
    outcome r;
    if (st != SDNN_OK) {
        r = err("bias gradient of 70000 outputs");
    } else {
        std::vector<float> h(C);
        sdnn_dcopy(c, 0, h.data(), du, C * sizeof(float), 1);
        for (int i = 0; r.empty() && i < C; ++i)
            if (h[i] != u0[i] + d[i])
                r = "bias gradient of 70000 outputs: output " + std::to_string(i) + " wrong";
    }
    sdnn_dfree(part);
    sdnn_dfree(du);
    sdnn_dfree(dd);
    return r;
}

/* ---- the mutants and what each must be caught by --------------------------------------- */

typedef outcome (*check_fn)(sdnn_dctx *);

static const struct {
    const char *name;
    check_fn check;
    const char *want;   /* in the failure's text */
} mutants[] = {
    {"codec-int8-nosync", check_int8, "a race"},
    {"codec-int8-short", check_int8, "out of bounds"},
    {"kernels-fill-floor", check_fill, "a grid of (0,1,1) blocks"},
    {"bn-nosync", check_bn_forward, "a race"},
    {"bn-finish-floor", check_bn_forward, "channel 128 mean nan"},
    {"bn-bound", check_bn_forward, "past the end of an allocation of 256 bytes"},
    {"bn-grid-y", check_bias_wide, "a grid of (1,70000,1) blocks"},
};

static const struct {
    const char *name;
    check_fn check;
} checks[] = {
    {"int8 encode", check_int8},
    {"fill", check_fill},
    {"bn forward", check_bn_forward},
    {"bias gradient, 70000 outputs", check_bias_wide},
};

static int run_mutant(const char *name)
{
    for (const auto &mu : mutants) {
        if (std::strcmp(mu.name, name) != 0) continue;
        sdnn_dctx *c = fresh();
        outcome r = mu.check(c);
        sdnn_dctx_destroy(c);
        if (r.empty()) {
            std::printf("undetected: mutant %s passed its check\n", name);
            return 1;
        }
        if (r.find(mu.want) == std::string::npos) {
            std::printf("wrong failure: mutant %s failed with \"%s\", not \"%s\"\n", name,
                        r.c_str(), mu.want);
            return 1;
        }
        std::printf("detected: %s\n", r.c_str());
        return 0;
    }
    std::printf("no mutant named %s\n", name);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc == 3 && std::strcmp(argv[1], "--mutant") == 0) return run_mutant(argv[2]);
    int failed = 0, passed = 0;
    for (const auto &k : checks) {
        sdnn_dctx *c = fresh();
        outcome r = k.check(c);
        sdnn_dctx_destroy(c);
        if (r.empty()) {
            ++passed;
        } else {
            ++failed;
            std::printf("  FAIL  tests/gpu/sim/mutants.cu: the real kernels, %s: %s\n", k.name,
                        r.c_str());
        }
    }
    /* The mutants' programs lie in mutants.d beside this one. */
    std::string dir(argv[0]);
    size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? std::string(".") : dir.substr(0, slash);
    for (const auto &mu : mutants) {
        std::string cmd = dir + "/mutants.d/" + mu.name + " --mutant " + mu.name + " 2>&1";
        FILE *f = popen(cmd.c_str(), "r");
        std::string out;
        char line[1024];
        while (f && std::fgets(line, sizeof line, f)) out += line;
        int rc = f ? pclose(f) : -1;
        if (rc == 0 && out.compare(0, 9, "detected:") == 0) {
            ++passed;
            std::printf("  ok    mutant %s %s", mu.name, out.c_str() + 9);
        } else {
            ++failed;
            std::printf("  FAIL  tests/gpu/sim/mutants.cu: mutant %s (exit %d): %s\n", mu.name,
                        rc, out.empty() ? "no output (is the program built?)" : out.c_str());
        }
    }
    std::printf("mutants: %d passed, %d failed (simulated devices: the executor's checks on "
                "kernels.cu's, codec.cu's and bn.cu's real kernels and on mutated copies, "
                "not a GPU)\n",
                passed, failed);
    return failed != 0;
}
