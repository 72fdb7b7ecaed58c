/*
 * ./darknet scalednn bench-comm [-b MIN] [-e MAX] [-f F] [-n ITERS] [-w WARM]
 *     [-g NREPLICAS] [-z CODEC[,CODEC...]] [-r RATIO] [-k CHUNK] [-s]
 *     [-c 0|1] [-J FILE] [-d BACKEND]
 *
 * Times a comm backend's allreduce-mean over a sweep of buffer sizes the
 * way nccl-tests times ncclAllReduce: per size, -w untimed calls, then -n
 * timed calls whose average is the row's time, then one more call whose
 * result is checked.  Each replica is one rank of the ring, with its own
 * input and output buffer.  Codec "none" takes the plain allreduce_mean;
 * every other codec, and "none-ring" (the identity codec on the ring, to
 * show what the ring itself costs), goes through allreduce_mean_coded.
 *
 * The check is what makes a row worth reading: a lossy codec is allowed
 * its documented rounding carried hop by hop round the ring (bc_bound_for
 * derives the bound), topk must equal the mean of the replicas' own top-k
 * selections bit for bit, and every replica must hold the same bits.
 *
 * Several processes (-d mpi under mpirun): every process regenerates every
 * rank's input from the seed (bc_fill_range is random access) to check its
 * own outputs; the ring's ranks are then the processes, each holding the
 * fp32 mean of its replicas (comm.h, `hierarchical`), which the bounds and
 * the topk reference follow.  Rank 0 prints and writes the JSON; the
 * #wrong counts are summed over the processes.
 */
#include "bench_comm.h"
#include "clock.h"
#include "codec.h"
#include "collective.h"
#include "comm.h"
#include "flags.h"
#include "saveio.h"
#include "splitmix.h"
#include "scalednn.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BC_MAX_CODECS 16
#define BC_MAX_REPLICAS 256
#define BC_MAX_SIZES 4096
#define BC_MAX_FACTOR 1024.0
/* topk carries uint32 indices: at most 2^32 floats. */
#define BC_MAX_BYTES ((size_t)1 << 34)
#define BC_MAX_CHUNK (1 << 30)
#define BC_INPUT_SEED 0x5ca1ed00d1ce5eedull
#define BC_ROUND_SEED 0x2545f4914f6cdd1dull
#define BC_CHECK_STREAM 0xc4ec4ull

typedef struct bc_codec {
    const char *label;           /* none, none-ring, fp16, bf16, int8, topk */
    const sdnn_codec_ops *ops;   /* NULL: the plain allreduce_mean */
} bc_codec;

typedef struct bc_opts {
    size_t minbytes, maxbytes;
    double factor;
    int iters, warmup, nrep, check;
    const char *json, *backend;
    sdnn_codec_params params;
    bc_codec codecs[BC_MAX_CODECS];
    int ncodecs;
} bc_opts;

typedef struct bc_row {
    const bc_codec *codec;
    size_t size, count, wire;
    double time_us, algbw, busbw, effbw;
    long long wrong;             /* -1: not checked */
    double maxerr;
} bc_row;

/* What the check allows: |out[i] - mean[i]| <= coef * mag / N + abs, with
 * mag the sum over ranks of |x_r[i]| (block 0) or of max |x_r| over the
 * element's int8 chunk (block = chunk). */
typedef struct bc_bound {
    double coef, abs;
    size_t block;
    int exact_topk;              /* topk: equal to the expected sparse mean */
} bc_bound;

/* Everything a row needs; buffers are sized for the largest row once. */
typedef struct bc_ctx {
    sdnn_comm *comm;
    int nrep, world;             /* world = processes x replicas = buffers */
    int ring;                    /* ranks of the ring: world, or the processes
                                  * of a hierarchical backend */
    int local;                   /* buffers a ring rank averages first (1 or nrep) */
    sdnn_codec_params params;
    float **in, **out;           /* nrep buffers each */
    float *ref;                  /* topk's expected result (check only) */
    size_t *hist;                /* radix-select counters (check only) */
    /* check with several processes: other processes' inputs regenerated */
    float **regen;               /* topk: `local` whole buffers */
    float *lmean;                /* topk: a ring rank's local mean */
    float *blkbuf;               /* dense: world blocks of blk floats */
    size_t blk;
    const float **ptrs, **optrs; /* world inputs, nrep outputs of a block */
    long long wire_mismatches;
} bc_ctx;

static const char *const bc_defs[][2] = {
    {"size", "bytes of one replica's fp32 buffer (count x 4)"},
    {"wire", "encoded bytes all ranks sent in one allreduce (codec none: 2(N-1) x size, "
             "what a ring would move)"},
    {"time", "average of the -n timed allreduces, microseconds (CLOCK_MONOTONIC)"},
    {"busbw", "wire / N / time: the bytes each rank pushes per second"},
    {"algbw", "busbw x N / (2(N-1)): nccl-tests' allreduce algbw of a message of the "
              "encoded size (size / time for none)"},
    {"effbw", "size / time: the algbw an uncompressed allreduce needs to be as fast"},
    {"#wrong", "elements of any replica outside the codec's bound of the exact mean, plus "
               "elements differing bitwise from replica 0"},
    {"maxerr", "max |out - exact mean| over replicas and elements (topk: against the "
               "expected sparse mean)"},
};

/* ---- options ------------------------------------------------------------ */

/* Bytes with an optional K, M or G suffix (powers of 1024).  0 ok, -1 not
 * a size, -2 too large. */
static int bc_parse_bytes(const char *s, size_t *out)
{
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE) return -2;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; ++end; break;
    case 'm': case 'M': shift = 20; ++end; break;
    case 'g': case 'G': shift = 30; ++end; break;
    default: break;
    }
    if (*end != '\0') return -1;
    if (v > (unsigned long long)(BC_MAX_BYTES >> shift)) return -2;
    *out = (size_t)v << shift;
    return 0;
}

/* -b / -e (SDNN_FLAG_CUSTOM): bytes, whole floats, at most 16G. */
static int bc_parse_size_flag(const char *flag, const char *v, void *dst)
{
    size_t *out = dst;
    const char *why = NULL;
    int rc = bc_parse_bytes(v, out);
    if (rc == -1) why = "a size (bytes, optional K/M/G suffix, e.g. 64K)";
    else if (rc == -2) why = "a size of at most 16G";
    else if (*out < sizeof(float)) why = "at least 4 bytes (one float)";
    else if (*out % sizeof(float)) why = "a multiple of 4 bytes (whole floats)";
    if (!why) return 0;
    fprintf(stderr, "error: darknet scalednn bench-comm: %s %s: expected %s\n", flag, v, why);
    return -1;
}

static int bc_parse_codecs(bc_opts *o, const char *list)
{
    o->ncodecs = 0;
    for (const char *p = list;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char name[32];
        if (len == 0 || len >= sizeof name) {
            fprintf(stderr, "bench-comm: -z %s: empty or overlong codec name "
                            "(allowed: %s, none-ring, or a comma list of them)\n",
                    list, sdnn_codec_names());
            return 2;
        }
        memcpy(name, p, len);
        name[len] = '\0';
        bc_codec k;
        if (strcmp(name, "none") == 0) {
            k = (bc_codec){"none", NULL};
        } else if (strcmp(name, "none-ring") == 0) {
            k = (bc_codec){"none-ring", &sdnn_codec_none};
        } else {
            const sdnn_codec_ops *c = sdnn_codec_find(name);
            if (!c) {
                fprintf(stderr, "bench-comm: -z %s: unknown codec '%s' "
                                "(allowed: %s, none-ring, or a comma list of them)\n",
                        list, name, sdnn_codec_names());
                return 2;
            }
            k = (bc_codec){c->name, c};
        }
        if (o->ncodecs == BC_MAX_CODECS) {
            fprintf(stderr, "bench-comm: -z %s: more than %d codecs\n", list, BC_MAX_CODECS);
            return 2;
        }
        o->codecs[o->ncodecs++] = k;
        if (!comma) return 0;
        p = comma + 1;
    }
}

static size_t bc_next_size(size_t s, double factor)
{
    size_t n = (size_t)((double)s * factor) & ~(size_t)(sizeof(float) - 1);
    return n > s ? n : s + sizeof(float);
}

/* -1: parsed, go on; otherwise the exit code (0 after -h, 2 bad usage). */
static int bc_parse(bc_opts *o, int argc, char **argv)
{
    const char *zlist = "none";
    char zhelp[192], dhelp[160];
    snprintf(zhelp, sizeof zhelp, "codecs to sweep, comma-separated, from %s (none: the plain "
             "allreduce_mean) and none-ring (the identity codec on the compressed ring) (none)", sdnn_codec_names());
    snprintf(dhelp, sizeof dhelp, "comm backend: local, or mpi under mpirun -np P (usable here "
             "now: %s)", sdnn_comm_available_names());
    const sdnn_flag flags[] = {
        {.name = "-b", .kind = SDNN_FLAG_CUSTOM, .dst = &o->minbytes, .parse = bc_parse_size_flag,
         .meta = "MINBYTES", .help = "smallest buffer per replica; K, M, G suffixes (64K)"},
        {.name = "-e", .kind = SDNN_FLAG_CUSTOM, .dst = &o->maxbytes, .parse = bc_parse_size_flag,
         .meta = "MAXBYTES", .help = "largest buffer per replica, <= 16G (256M)"},
        {.name = "-f", .kind = SDNN_FLAG_DOUBLE, .dst = &o->factor, .lo = 1, .lo_open = 1,
         .hi = BC_MAX_FACTOR, .meta = "FACTOR", .help = "size multiplier from one row to the next (2)"},
        {.name = "-n", .kind = SDNN_FLAG_INT, .dst = &o->iters, .lo = 1, .hi = 1000000000,
         .meta = "ITERS", .help = "timed iterations per size (20)"},
        {.name = "-w", .kind = SDNN_FLAG_INT, .dst = &o->warmup, .lo = 0, .hi = 1000000000,
         .meta = "WARMUP", .help = "untimed iterations before them (5)"},
        {.name = "-g", .kind = SDNN_FLAG_INT, .dst = &o->nrep, .lo = 1, .hi = BC_MAX_REPLICAS,
         .meta = "NREPLICAS", .help = "replicas, each a rank with its own buffers (2)"},
        {.name = "-z", .kind = SDNN_FLAG_STR, .dst = &zlist, .meta = "CODECS", .help = zhelp},
        {.name = "-r", .kind = SDNN_FLAG_DOUBLE, .dst = &o->params.topk_ratio, .lo = 0,
         .lo_open = 1, .hi = 1, .meta = "RATIO", .help = "topk: fraction of entries kept (0.01)"},
        {.name = "-k", .kind = SDNN_FLAG_INT, .dst = &o->params.int8_chunk, .lo = 1,
         .hi = BC_MAX_CHUNK, .meta = "CHUNK", .help = "int8: elements per scale (256)"},
        {.name = "-s", .kind = SDNN_FLAG_SWITCH, .dst = &o->params.stochastic,
         .help = "int8: stochastic rounding (default nearest)"},
        {.name = "-c", .kind = SDNN_FLAG_INT, .dst = &o->check, .lo = 0, .hi = 1, .meta = "0|1",
         .help = "check every result (1)"},
        {.name = "-J", .kind = SDNN_FLAG_STR, .dst = &o->json, .meta = "FILE",
         .help = "also write the settings and rows as JSON (atomically)"},
        {.name = "-d", .kind = SDNN_FLAG_STR, .dst = &o->backend, .meta = "BACKEND", .help = dhelp},
    };
    const sdnn_command cmd = {
        .name = "scalednn bench-comm", .args = "", .min_pos = 0, .max_pos = 0, .flags = flags,
        .nflags = (int)(sizeof flags / sizeof flags[0]),
        .notes = "Exit status: 0 all checks passed, 1 a check or a collective failed,\n"
                 "2 bad usage.\n",
    };
    int np;
    int parsed = sdnn_args_parse(&cmd, argc, argv, 1, NULL, &np);
    if (parsed != SDNN_ARGS_OK) return parsed == SDNN_ARGS_HELP ? 0 : 2;
    if (bc_parse_codecs(o, zlist)) return 2;
    if (o->minbytes > o->maxbytes) {
        fprintf(stderr, "bench-comm: -b %zu is larger than -e %zu\n", o->minbytes, o->maxbytes);
        return 2;
    }
    int rows = 0;
    for (size_t s = o->minbytes; s <= o->maxbytes; s = bc_next_size(s, o->factor))
        if (++rows > BC_MAX_SIZES) {
            fprintf(stderr, "bench-comm: -f %g from %zu to %zu bytes gives more than %d "
                            "sizes; raise -f or narrow -b/-e\n",
                    o->factor, o->minbytes, o->maxbytes, BC_MAX_SIZES);
            return 2;
        }
    if (o->json) {
        /* Find out now, not after the whole sweep, that FILE cannot be
         * written (sdnn_write_file_atomic creates FILE.tmp.PID beside it). */
        char *copy = strdup(o->json);
        if (!copy) return 2;
        const char *dir = dirname(copy);
        int ok = access(dir, W_OK | X_OK) == 0;
        int e = errno;
        if (!ok)
            fprintf(stderr, "bench-comm: -J %s: cannot write in directory %s: %s\n", o->json,
                    dir, strerror(e));
        free(copy);
        if (!ok) return 2;
    }
    return -1;
}

/* ---- inputs ------------------------------------------------------------- */

static uint64_t bc_mix(uint64_t z) { return sdnn_splitmix64_mix(z); }

/* Global rank `rank`'s input: splitmix64 from a per-rank state, each value
 * an odd multiple of 2^-24 in (-1, 1): never an integer, never 0, exact in
 * a float, so every reordering or lost rounding shows.  Magnitudes repeat
 * (2^23 of them), which exercises topk's tie rule on large buffers. */
static void bc_fill_range(float *x, size_t lo, size_t n, int rank)
{
    const uint64_t golden = SDNN_SPLITMIX_GOLDEN;
    uint64_t state = bc_mix(BC_INPUT_SEED ^ ((uint64_t)(rank + 1) * 0xd1b54a32d192ed03ull));
    state += golden * (uint64_t)lo;     /* element i is bc_mix(state0 + (i+1) golden) */
    for (size_t i = 0; i < n; ++i) {
        uint64_t k = bc_mix(state += golden) >> 40;
        x[i] = (float)((int32_t)(2 * k + 1) - (1 << 24)) * 0x1p-24f;
    }
}

static void bc_fill(float *x, size_t n, int rank) { bc_fill_range(x, 0, n, rank); }

/* ---- the check ---------------------------------------------------------- */

static uint32_t bc_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/*
 * Each hop of the ring decodes a partial sum exactly, adds its own fp32
 * value (relative error u = 2^-24) and encodes the sum again (relative
 * error e: 0 none, 2^-11 fp16, 2^-8 bf16 -- half an ulp of an 8-bit
 * significand -- and for int8 a fraction 1/254 (nearest) or 1/127
 * (stochastic) of the chunk's largest magnitude, so there mag is per
 * chunk -- the int8 chunks are global blocks of -k elements because ring
 * chunks start on multiples of the codec's alignment); the owner multiplies by 1/N (two roundings: 1/N and the product)
 * and encodes the mean once.  By induction the partial sum after j hops
 * stays within mag*(((1+e)(1+u))^j - 1) of the exact one, so the decoded
 * mean is within
 *         mag/N * ((1+e)^N (1+u)^(N+1) - 1)
 * of the exact mean.  The plain allreduce_mean sums in fp32 in index order
 * and scales: the same formula with e = 0.  int8's e carries 2^-8/127 more
 * for the float division and product inside the quantiser.  An encode can
 * also lose an absolute alpha in its subnormal range (fp16: 2^-25, bf16:
 * 2^-134, fp32: 2^-149); the ones before the owner are divided by N, so
 * all of them together stay below 2*alpha*(1+coef).
 *
 * A hierarchical backend first averages L > 1 local buffers per process in
 * fp32 (L-1 additions and two roundings for the scale: (1+u)^(L+1)), then
 * runs the ring over the R = N/L processes on those means, so the bound is
 *         mag/N * ((1+u)^(L+1) (1+e)^R (1+u)^(R+1) - 1)
 * (the local error adds to the ring's, whose magnitudes grow by the same
 * factor).
 */
static bc_bound bc_bound_for(const bc_codec *k, const sdnn_codec_params *p, int R, int L)
{
    bc_bound b = {0, 0, 0, 0};
    const char *name = k->ops ? k->ops->name : "none";
    double e = 0, alpha = 0x1p-149;
    if (strcmp(name, "topk") == 0) {
        b.exact_topk = 1;
        return b;
    } else if (strcmp(name, "fp16") == 0) {
        e = 0x1p-11;
        alpha = 0x1p-25;
    } else if (strcmp(name, "bf16") == 0) {
        e = 0x1p-8;
        alpha = 0x1p-134;
    } else if (strcmp(name, "int8") == 0) {
        e = ((p->stochastic ? 1.0 : 0.5) + 0x1p-8) / 127.0;
        b.block = (size_t)p->int8_chunk;
    } else if (strcmp(name, "none") != 0) {
        b.coef = INFINITY;      /* a codec added later: only identity is checked */
        return b;
    }
    const double u = 0x1p-24;
    double g = 1.0 + u;
    for (int j = 0; j < R; ++j) g *= (1.0 + e) * (1.0 + u);
    for (int j = 0; L > 1 && j < L + 1; ++j) g *= 1.0 + u;
    b.coef = g - 1.0;
    b.abs = 2.0 * alpha * g;
    return b;
}

typedef struct bc_tally {
    long long wrong;
    double maxerr;
    int nan;
} bc_tally;

static void bc_tally_err(bc_tally *t, double err)
{
    if (isnan(err)) t->nan = 1;
    else if (err > t->maxerr) t->maxerr = err;
}

/* Dense codecs and the plain path: every output within the bound of the
 * exact mean (in double), and identical to output 0. */
static void bc_check_bound(const bc_bound *b, const float *const *in, int nin,
                           const float *const *out, int nout, size_t n, bc_tally *t)
{
    const size_t step = b->block ? b->block : n;
    for (size_t lo = 0; lo < n; lo += step) {
        const size_t hi = n - lo < step ? n : lo + step;
        double chunkmag = 0;
        if (b->block)
            for (int r = 0; r < nin; ++r) {
                float mx = 0;
                for (size_t i = lo; i < hi; ++i) mx = fmaxf(mx, fabsf(in[r][i]));
                chunkmag += mx;
            }
        for (size_t i = lo; i < hi; ++i) {
            double sum = 0, mag = 0;
            for (int r = 0; r < nin; ++r) {
                double x = in[r][i];
                sum += x;
                mag += fabs(x);
            }
            const double mean = sum / nin;
            const double tol = isinf(b->coef) ? INFINITY
                               : b->coef * (b->block ? chunkmag : mag) / nin + b->abs;
            for (int r = 0; r < nout; ++r) {
                const double err = fabs((double)out[r][i] - mean);
                if (!(err <= tol)) ++t->wrong;
                bc_tally_err(t, err);
                if (r > 0 && bc_bits(out[r][i]) != bc_bits(out[0][i])) ++t->wrong;
            }
        }
    }
}

static uint32_t bc_key(float x) { return bc_bits(x) & 0x7fffffffu; }

/* ref += x's k entries of largest magnitude, lowest index first among
 * equal magnitudes at the threshold.  The threshold is found by a two-pass
 * radix select on the magnitude bits (ordered like the magnitudes for
 * finite floats), written apart from the codec's own selection on purpose. */
static void bc_topk_add(const float *x, size_t n, size_t k, float *ref, size_t *hist)
{
    size_t above = 0;
    memset(hist, 0, 65536 * sizeof *hist);
    for (size_t i = 0; i < n; ++i) hist[bc_key(x[i]) >> 16]++;
    uint32_t hi = 65535;
    while (hi > 0 && above + hist[hi] < k) above += hist[hi--];
    memset(hist, 0, 65536 * sizeof *hist);
    for (size_t i = 0; i < n; ++i)
        if (bc_key(x[i]) >> 16 == hi) hist[bc_key(x[i]) & 0xffffu]++;
    uint32_t lo = 65535;
    while (lo > 0 && above + hist[lo] < k) above += hist[lo--];
    const uint32_t thr = hi << 16 | lo;
    size_t ties = k - above;
    for (size_t i = 0; i < n; ++i) {
        const uint32_t key = bc_key(x[i]);
        int take = key > thr;
        if (key == thr && ties > 0) {
            take = 1;
            --ties;
        }
        if (take) ref[i] += x[i];
    }
}

/* Buffer g of the world (g = process x nrep + replica): this process's own
 * input, or regenerated from the seed into `spare` (elements [lo, lo+len)). */
static const float *bc_input(const bc_ctx *x, int g, size_t lo, size_t len, float *spare)
{
    if (g / x->nrep == x->comm->rank) return x->in[g % x->nrep] + lo;
    bc_fill_range(spare, lo, len, g);
    return spare;
}

/* topk: the collective is the mean of every ring rank's own selection,
 * summed in rank order into zeros and scaled by float(1/R): recompute it
 * and demand the same bits.  A ring rank of a hierarchical backend selects
 * from the fp32 mean of its process's buffers (sdnn_mean_buffers, the
 * backend's own definition of that mean). */
static void bc_check_topk(const bc_ctx *x, size_t n, bc_tally *t)
{
    const size_t k = sdnn_codec_topk_k(x->params.topk_ratio, n);
    memset(x->ref, 0, n * sizeof(float));
    for (int q = 0; q < x->ring; ++q) {
        const float *src[BC_MAX_REPLICAS] = {NULL};
        for (int j = 0; j < x->local; ++j)
            src[j] = bc_input(x, q * x->local + j, 0, n, x->regen ? x->regen[j] : NULL);
        const float *sel = src[0];
        if (x->local > 1) {
            sdnn_mean_buffers(src, x->local, x->lmean, n);
            sel = x->lmean;
        }
        bc_topk_add(sel, n, k, x->ref, x->hist);
    }
    const float inv = 1.0f / (float)x->ring;
    for (size_t i = 0; i < n; ++i) x->ref[i] *= inv;
    for (size_t i = 0; i < n; ++i)
        for (int r = 0; r < x->nrep; ++r) {
            const float y = x->out[r][i];
            if (bc_bits(y) != bc_bits(x->ref[i])) ++t->wrong;
            bc_tally_err(t, fabs((double)y - (double)x->ref[i]));
            if (r > 0 && bc_bits(y) != bc_bits(x->out[0][i])) ++t->wrong;
        }
}

/* Dense codecs and the plain path over every buffer of the world, in
 * blocks (multiples of the int8 chunk) so another process's inputs are
 * regenerated a block at a time. */
static void bc_check_world(const bc_ctx *x, const bc_bound *b, const float *const *out, int nout,
                           size_t n, bc_tally *t)
{
    if (x->comm->size == 1) {
        bc_check_bound(b, (const float *const *)x->in, x->nrep, out, nout, n, t);
        return;
    }
    for (size_t lo = 0; lo < n; lo += x->blk) {
        const size_t len = n - lo < x->blk ? n - lo : x->blk;
        for (int g = 0; g < x->world; ++g)
            x->ptrs[g] = bc_input(x, g, lo, len, x->blkbuf + (size_t)g * x->blk);
        for (int r = 0; r < nout; ++r) x->optrs[r] = out[r] + lo;
        bc_check_bound(b, x->ptrs, x->world, x->optrs, nout, len, t);
    }
}

/* This process's share of sdnn_coded_wire_bytes: the dense ring sends
 * chunk r-s in reduce-scatter hop s and chunk r+1-s in all-gather hop s;
 * the sparse all-gather sends R-1 lists. */
static size_t bc_own_wire(const sdnn_codec_ops *c, const sdnn_codec_params *p, size_t n, int R,
                          int r)
{
    if (R <= 1) return 0;
    if (!c->dense) return (size_t)(R - 1) * c->encoded_size(p, n);
    size_t total = 0;
    for (int s = 0; s < R - 1; ++s) {
        size_t lo, len;
        sdnn_ring_chunk(n, c->align(p), R, ((r - s) % R + R) % R, &lo, &len);
        total += c->encoded_size(p, len);
        sdnn_ring_chunk(n, c->align(p), R, ((r + 1 - s) % R + R) % R, &lo, &len);
        total += c->encoded_size(p, len);
    }
    return total;
}

/* What sdnn_comm_allreduce_mean_coded reports (comm.h: the bytes each
 * replica sends, collective.h's one definition over the world's W = processes
 * x replicas), from the ring's own chunking: a process's ring rank sends
 * bc_own_wire, shared by its replicas; a single process's local ring sends
 * sdnn_coded_wire_bytes over its replicas; a hierarchical backend (a memory
 * mean first) reports the flat world's coded collective per replica.  Each
 * is rounded to a byte as the comm rounds it. */
static size_t bc_reported_wire(const bc_ctx *x, const bc_codec *k, size_t n, const char **what)
{
    const size_t W = (size_t)x->comm->size * (size_t)x->nrep;
    if (x->comm->size > 1 && x->local > 1) {
        *what = "the flat world's sdnn_coded_wire_bytes per replica";
        return (sdnn_coded_wire_bytes(k->ops, &x->params, n, (int)W) + W / 2) / W;
    }
    const size_t nin = (size_t)(x->nrep > 0 ? x->nrep : 1);
    if (x->comm->size > 1) {
        *what = "its ring rank's share of sdnn_coded_wire_bytes per replica";
        return (bc_own_wire(k->ops, &x->params, n, x->ring, x->comm->rank) + nin / 2) / nin;
    }
    *what = "sdnn_coded_wire_bytes per replica";
    return (sdnn_coded_wire_bytes(k->ops, &x->params, n, x->ring) + nin / 2) / nin;
}

/* Sums non-negative counts (< 2^48) over the processes.  The comm interface
 * only averages floats, so each count travels as six 8-bit digits: a digit's
 * sum over at most 2^16 processes is an integer below 2^24, and rounding
 * mean x P recovers it exactly. */
static sdnn_status bc_sum_counts(bc_ctx *x, long long *v, int k)
{
    enum { DIGITS = 6, MAXK = 4 };
    if (x->comm->size == 1) return SDNN_OK;
    float d[MAXK * DIGITS];
    const float *in[BC_MAX_REPLICAS];
    for (int i = 0; i < k * DIGITS; ++i)
        d[i] = (float)((v[i / DIGITS] >> (8 * (i % DIGITS))) & 0xff);
    for (int r = 0; r < x->nrep; ++r) in[r] = d;   /* every local buffer the same */
    SDNN_CHECK(sdnn_comm_allreduce_mean(x->comm, in, x->nrep, d, (size_t)(k * DIGITS), NULL));
    for (int j = 0; j < k; ++j) {
        long long sum = 0;
        for (int i = DIGITS - 1; i >= 0; --i)
            sum = sum * 256 + llround((double)d[j * DIGITS + i] * x->comm->size);
        v[j] = sum;
    }
    return SDNN_OK;
}

/* ---- one row ------------------------------------------------------------ */

static sdnn_status bc_call(bc_ctx *x, const bc_codec *k, uint64_t stream, size_t n,
                           size_t *wire)
{
    const float *const *in = (const float *const *)x->in;
    if (!k->ops) {
        *wire = 2 * (size_t)(x->ring - 1) * n * sizeof(float);
        return sdnn_comm_allreduce_mean(x->comm, in, x->nrep, x->out[0], n, NULL);
    }
    return sdnn_comm_allreduce_mean_coded(x->comm, k->ops, &x->params, stream, in, x->nrep,
                                              x->out, n, wire);
}

static sdnn_status bc_run_row(bc_ctx *x, const bc_opts *o, const bc_codec *k, size_t n,
                              bc_row *row)
{
    size_t wire = 0;
    for (int w = 0; w < o->warmup; ++w) SDNN_CHECK(bc_call(x, k, (uint64_t)w, n, &wire));
    if (x->comm->size > 1) SDNN_CHECK(sdnn_comm_barrier(x->comm));
    const double t0 = sdnn_now_s();
    for (int it = 0; it < o->iters; ++it)
        SDNN_CHECK(bc_call(x, k, (uint64_t)o->warmup + (uint64_t)it, n, &wire));
    const double t = (sdnn_now_s() - t0) / o->iters;

    const double size = (double)n * sizeof(float), N = x->ring;
    /* Several processes report their own bytes; the row shows all of them. */
    const size_t timed_wire = wire;
    if (k->ops && x->comm->size > 1) wire = sdnn_coded_wire_bytes(k->ops, &x->params, n, x->ring);
    row->codec = k;
    row->size = n * sizeof(float);
    row->count = n;
    row->wire = wire;
    row->time_us = t * 1e6;
    row->busbw = x->ring > 1 && t > 0 ? (double)wire / N / t / 1e9 : 0;
    row->algbw = x->ring > 1 ? row->busbw * N / (2 * (N - 1)) : 0;
    row->effbw = t > 0 ? size / t / 1e9 : 0;
    row->wrong = -1;
    row->maxerr = 0;
    if (!o->check) return SDNN_OK;

    /* A fresh call into poisoned (NaN) outputs, so stale results cannot pass. */
    const int nout = k->ops ? x->nrep : 1;
    for (int r = 0; r < nout; ++r) memset(x->out[r], 0xff, n * sizeof(float));
    SDNN_CHECK(bc_call(x, k, BC_CHECK_STREAM, n, &wire));
    long long counts[2] = {0, 0};     /* #wrong, wire mismatches */
    if (k->ops) {
        const char *what;
        const size_t want = bc_reported_wire(x, k, n, &what);
        if (wire != want || wire != timed_wire) {
            fprintf(x->comm->rank ? stderr : stdout,
                    "# wire mismatch: %s, %zu B: rank %d's backend reported %zu B (timed: %zu B), "
                    "%s says %zu B\n",
                    k->label, row->size, x->comm->rank, wire, timed_wire, what, want);
            counts[1] = 1;
        }
    }
    bc_tally t2 = {0, 0, 0};
    const bc_bound b = bc_bound_for(k, &x->params, x->ring, x->local);
    if (b.exact_topk) {
        bc_check_topk(x, n, &t2);
    } else {
        bc_check_world(x, &b, (const float *const *)x->out, nout, n, &t2);
    }
    counts[0] = t2.wrong;
    SDNN_CHECK(bc_sum_counts(x, counts, 2));
    x->wire_mismatches += counts[1];
    row->wrong = counts[0];
    row->maxerr = t2.nan ? NAN : t2.maxerr;
    return SDNN_OK;
}

/* ---- output ------------------------------------------------------------- */

static void bc_print_codec(const bc_codec *k, const sdnn_codec_params *p, const sdnn_comm *c)
{
    const char *name = k->ops ? k->ops->name : "none";
    printf("#   %-10s ", k->label);
    if (!k->ops && c->size > 1)
        printf("plain allreduce_mean: %s's own fp32 ring (chunk c summed c, c+1, ...), nothing "
               "encoded\n", sdnn_comm_name(c));
    else if (!k->ops)
        printf("plain allreduce_mean: fp32 sum in replica order, no ring, nothing encoded\n");
    else if (strcmp(k->label, "none-ring") == 0) printf("identity codec on the compressed ring\n");
    else if (strcmp(name, "fp16") == 0) printf("IEEE binary16, round to nearest even, ring\n");
    else if (strcmp(name, "bf16") == 0) printf("bfloat16, round to nearest even, ring\n");
    else if (strcmp(name, "int8") == 0)
        printf("scale per %d elements, %s rounding (seed 0x%016" PRIx64 "), ring\n",
               p->int8_chunk, p->stochastic ? "stochastic" : "nearest", p->seed);
    else if (strcmp(name, "topk") == 0)
        printf("ratio %g, k = clamp(ceil(ratio x count), 1, count), all-gather\n",
               p->topk_ratio);
    else printf("ring or all-gather as the codec declares\n");
}

static void bc_print_bound(const bc_codec *k, const sdnn_codec_params *p, int R, int L)
{
    const bc_bound b = bc_bound_for(k, p, R, L);
    printf("#   %-10s ", k->label);
    if (b.exact_topk)
        printf("out == the mean of every rank's own top-k (lowest index wins ties), bit for "
               "bit\n");
    else if (isinf(b.coef))
        printf("no bound known: only identical replicas are checked\n");
    else
        printf("|out - mean| <= %.3e x %s / N + %.1e\n", b.coef,
               b.block ? "sum_r max|x_r| over the int8 chunk" : "sum_r |x_r|", b.abs);
}

static void bc_print_header(const bc_opts *o, const bc_ctx *x, int argc, char **argv)
{
    printf("# scalednn bench-comm: allreduce-mean of one buffer per rank\n#\n");
    printf("# command  : darknet scalednn");
    for (int i = 0; i < argc; ++i) printf(" %s", argv[i]);
    if (sdnn_comm_hierarchical(x->comm))
        printf("\n# backend  : %s, %d process%s x %d replica%s; each process averages its "
               "replicas, then N = %d rank%s (one per process) form the ring\n",
               o->backend, x->comm->size, x->comm->size == 1 ? "" : "es", x->nrep,
               x->nrep == 1 ? "" : "s", x->ring, x->ring == 1 ? "" : "s");
    else
        printf("\n# backend  : %s, %d process%s x %d replica%s = N = %d rank%s\n", o->backend,
               x->comm->size, x->comm->size == 1 ? "" : "es", x->nrep, x->nrep == 1 ? "" : "s",
               x->world, x->world == 1 ? "" : "s");
    printf("# sizes    : %zu .. %zu B per replica, factor %g; %d warm-up + %d timed "
           "iterations per size\n",
           o->minbytes, o->maxbytes, o->factor, o->warmup, o->iters);
    printf("# inputs   : uniform in (-1, 1), odd multiples of 2^-24, splitmix64 seed "
           "0x%016" PRIx64 ", one stream per rank\n",
           (uint64_t)BC_INPUT_SEED);
    printf("# codecs   :\n");
    for (int c = 0; c < o->ncodecs; ++c) bc_print_codec(&o->codecs[c], &x->params, x->comm);
    if (o->check) {
        printf("# check    : one more call per size into NaN-poisoned outputs; bounds "
               "(mean in double):\n");
        for (int c = 0; c < o->ncodecs; ++c)
            bc_print_bound(&o->codecs[c], &x->params, x->ring, x->local);
    } else {
        printf("# check    : off (-c 0)\n");
    }
    printf("# columns  :\n");
    for (size_t i = 0; i < sizeof bc_defs / sizeof bc_defs[0]; ++i)
        printf("#   %-7s %s\n", bc_defs[i][0], bc_defs[i][1]);
    printf("#   (N = 1: nothing crosses a link, wire = algbw = busbw = 0; GB/s = 1e9 B/s)\n#\n");
    printf("#%12s %12s %10s %14s %10s %9s %9s %9s %8s %9s\n", "size", "count", "codec", "wire",
           "time", "algbw", "busbw", "effbw", "#wrong", "maxerr");
    printf("#%12s %12s %10s %14s %10s %9s %9s %9s %8s %9s\n", "(B)", "(elems)", "", "(B)", "(us)",
           "(GB/s)", "(GB/s)", "(GB/s)", "", "");
    fflush(stdout);
}

static void bc_print_row(const bc_row *r)
{
    printf(" %12zu %12zu %10s %14zu %10.1f %9.3f %9.3f %9.3f", r->size, r->count,
           r->codec->label, r->wire, r->time_us, r->algbw, r->busbw, r->effbw);
    if (r->wrong < 0) printf(" %8s %9s\n", "N/A", "N/A");
    else printf(" %8lld %9.2e\n", r->wrong, r->maxerr);
    fflush(stdout);
}

static void bc_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; ++p) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static void bc_json_num(FILE *f, double v)
{
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fputs("null", f);
}

static sdnn_status bc_write_json(const bc_opts *o, const bc_ctx *x, const bc_row *rows,
                                 int nrows, long long wrong, double avg_busbw, int argc,
                                 char **argv)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return SDNN_ERROR(SDNN_ERR_NOMEM, "-J %s: cannot build the JSON text", o->json);
    fputs("{\n  \"bench\": \"bench-comm\",\n  \"command\": ", f);
    {
        size_t clen = 64;
        for (int i = 0; i < argc; ++i) clen += strlen(argv[i]) + 1;
        char *cmd = malloc(clen);
        if (cmd) {
            strcpy(cmd, "darknet scalednn");
            for (int i = 0; i < argc; ++i) strcat(strcat(cmd, " "), argv[i]);
            bc_json_str(f, cmd);
            free(cmd);
        } else {
            fputs("null", f);
        }
    }
    fputs(",\n  \"backend\": ", f);
    bc_json_str(f, o->backend);
    fprintf(f, ",\n  \"processes\": %d,\n  \"replicas\": %d,\n  \"ranks\": %d,\n  \"ring\": %d,\n",
            x->comm->size, x->nrep, x->world, x->ring);
    fprintf(f, "  \"minbytes\": %zu,\n  \"maxbytes\": %zu,\n  \"factor\": ", o->minbytes,
            o->maxbytes);
    bc_json_num(f, o->factor);
    fprintf(f, ",\n  \"iters\": %d,\n  \"warmup\": %d,\n  \"check\": %d,\n  \"codecs\": [",
            o->iters, o->warmup, o->check);
    for (int c = 0; c < o->ncodecs; ++c) {
        fputs(c ? ", " : "", f);
        bc_json_str(f, o->codecs[c].label);
    }
    fprintf(f, "],\n  \"params\": {\"int8_chunk\": %d, \"stochastic\": %d, "
               "\"seed\": \"0x%016" PRIx64 "\", \"topk_ratio\": ",
            x->params.int8_chunk, x->params.stochastic, x->params.seed);
    bc_json_num(f, x->params.topk_ratio);
    fprintf(f, "},\n  \"input_seed\": \"0x%016" PRIx64 "\",\n  \"definitions\": {",
            (uint64_t)BC_INPUT_SEED);
    for (size_t i = 0; i < sizeof bc_defs / sizeof bc_defs[0]; ++i) {
        fputs(i ? ",\n    " : "\n    ", f);
        bc_json_str(f, bc_defs[i][0]);
        fputs(": ", f);
        bc_json_str(f, bc_defs[i][1]);
    }
    fputs("\n  },\n  \"bounds\": {", f);
    for (int c = 0; c < o->ncodecs; ++c) {
        const bc_bound b = bc_bound_for(&o->codecs[c], &x->params, x->ring, x->local);
        fputs(c ? ",\n    " : "\n    ", f);
        bc_json_str(f, o->codecs[c].label);
        if (b.exact_topk) {
            fputs(": {\"rule\": \"bit-identical to the mean of each rank's top-k\"}", f);
            continue;
        }
        fputs(": {\"rule\": \"|out - mean| <= coef * mag / N + abs\", \"mag\": ", f);
        bc_json_str(f, b.block ? "sum_r max|x_r| over the int8 chunk" : "sum_r |x_r|");
        fputs(", \"coef\": ", f);
        bc_json_num(f, b.coef);
        fputs(", \"abs\": ", f);
        bc_json_num(f, b.abs);
        fputs("}", f);
    }
    fputs("\n  },\n  \"results\": [", f);
    for (int i = 0; i < nrows; ++i) {
        const bc_row *r = &rows[i];
        fputs(i ? ",\n    {\"codec\": " : "\n    {\"codec\": ", f);
        bc_json_str(f, r->codec->label);
        fprintf(f, ", \"size\": %zu, \"count\": %zu, \"wire\": %zu, \"time_us\": ", r->size,
                r->count, r->wire);
        bc_json_num(f, r->time_us);
        fputs(", \"algbw_gbs\": ", f);
        bc_json_num(f, r->algbw);
        fputs(", \"busbw_gbs\": ", f);
        bc_json_num(f, r->busbw);
        fputs(", \"effbw_gbs\": ", f);
        bc_json_num(f, r->effbw);
        if (r->wrong < 0) {
            fputs(", \"wrong\": null, \"maxerr\": null}", f);
        } else {
            fprintf(f, ", \"wrong\": %lld, \"maxerr\": ", r->wrong);
            bc_json_num(f, r->maxerr);
            fputs("}", f);
        }
    }
    fputs("\n  ],\n  \"out_of_bounds\": ", f);
    if (o->check) fprintf(f, "%lld", wrong);
    else fputs("null", f);
    fprintf(f, ",\n  \"wire_mismatches\": %lld,\n  \"avg_busbw_gbs\": ", x->wire_mismatches);
    bc_json_num(f, avg_busbw);
    fputs("\n}\n", f);
    const int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        free(buf);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "-J %s: cannot build the JSON text", o->json);
    }
    sdnn_status st = sdnn_write_file_atomic(o->json, buf, len);
    free(buf);
    return st;
}

/* ---- the command -------------------------------------------------------- */

static void bc_free(bc_ctx *x)
{
    for (int r = 0; r < x->nrep; ++r) {
        if (x->in) free(x->in[r]);
        if (x->out) free(x->out[r]);
    }
    free(x->in);
    free(x->out);
    free(x->ref);
    free(x->hist);
    for (int j = 0; x->regen && j < x->local; ++j) free(x->regen[j]);
    free(x->regen);
    free(x->lmean);
    free(x->blkbuf);
    free(x->ptrs);
    free(x->optrs);
    sdnn_comm_close(x->comm);
}

static int bc_alloc(bc_ctx *x, const bc_opts *o)
{
    int topk = 0;
    for (int c = 0; c < o->ncodecs; ++c)
        topk |= o->codecs[c].ops && !o->codecs[c].ops->dense;
    topk &= o->check;
    const size_t bytes = o->maxbytes;
    const int topk_bufs = topk ? 1 + (x->local > 1) + (x->comm->size > 1) * x->local : 0;
    const double need = (double)bytes * (2.0 * x->nrep + topk_bufs);
    const double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (phys > 0 && need > phys) {
        /* malloc would succeed and the first touch would be killed. */
        fprintf(stderr,
                "bench-comm: %d replicas x input and output of %zu B%s need %.2f GiB, more "
                "than this machine's %.2f GiB; lower -e or -g\n",
                x->nrep, bytes, topk ? ", plus the topk check's reference," : "",
                need / (1 << 30), phys / (1 << 30));
        return 1;
    }
    x->in = calloc((size_t)x->nrep, sizeof *x->in);
    x->out = calloc((size_t)x->nrep, sizeof *x->out);
    int ok = x->in && x->out;
    for (int r = 0; ok && r < x->nrep; ++r) {
        x->in[r] = malloc(bytes);
        x->out[r] = malloc(bytes);
        ok = x->in[r] && x->out[r];
    }
    if (ok && topk) {
        x->ref = malloc(bytes);
        x->hist = malloc(65536 * sizeof *x->hist);
        ok = x->ref && x->hist;
        if (ok && x->local > 1) ok = (x->lmean = malloc(bytes)) != NULL;
        if (ok && x->comm->size > 1) {
            ok = (x->regen = calloc((size_t)x->local, sizeof *x->regen)) != NULL;
            for (int j = 0; ok && j < x->local; ++j) ok = (x->regen[j] = malloc(bytes)) != NULL;
        }
    }
    if (ok && o->check && x->comm->size > 1) {
        /* blocks of 64 Ki floats, whole int8 chunks */
        size_t blk = 65536, chunk = (size_t)x->params.int8_chunk;
        blk = (blk + chunk - 1) / chunk * chunk;
        if (blk > bytes / sizeof(float)) blk = bytes / sizeof(float);
        x->blk = blk;
        x->blkbuf = malloc((size_t)x->world * blk * sizeof(float));
        x->ptrs = calloc((size_t)x->world, sizeof *x->ptrs);
        x->optrs = calloc((size_t)x->nrep, sizeof *x->optrs);
        ok = x->blkbuf && x->ptrs && x->optrs;
    }
    if (!ok) {
        fprintf(stderr,
                "bench-comm: cannot allocate %.2f GiB (%d replicas x input and output of %zu B%s); "
                "lower -e or -g\n",
                need / (1 << 30), x->nrep, bytes, topk ? ", plus the topk check's reference" : "");
        return 1;
    }
    const size_t n = bytes / sizeof(float);
    for (int r = 0; r < x->nrep; ++r) {
        bc_fill(x->in[r], n, x->comm->rank * x->nrep + r);
        memset(x->out[r], 0xff, bytes);     /* NaN, and the pages are touched */
    }
    return 0;
}

int sdnn_cmd_bench_comm(int argc, char **argv)
{
    bc_opts o = {
        .minbytes = 64 * 1024,
        .maxbytes = 256 * 1024 * 1024,
        .factor = 2,
        .iters = 20,
        .warmup = 5,
        .nrep = 2,
        .check = 1,
        .backend = "local",
        .params = SDNN_CODEC_PARAMS_INIT,
    };
    o.params.seed = BC_ROUND_SEED;
    int rc = bc_parse(&o, argc, argv);
    if (rc >= 0) return rc;

    bc_ctx x = {.nrep = o.nrep, .params = o.params};
    sdnn_status st = sdnn_comm_open(o.backend, &x.comm);
    if (st != SDNN_OK) {
        fprintf(stderr, "bench-comm: -d %s: %s\n", o.backend, sdnn_last_error());
        return st == SDNN_ERR_INVALID || st == SDNN_ERR_UNSUPPORTED ? 2 : 1;
    }
    x.world = x.comm->size * o.nrep;
    x.ring = sdnn_comm_hierarchical(x.comm) ? x.comm->size : x.world;
    x.local = sdnn_comm_hierarchical(x.comm) ? o.nrep : 1;
    if (bc_alloc(&x, &o)) {
        bc_free(&x);
        return 1;
    }
    const int quiet = x.comm->rank != 0;
    if (!quiet) bc_print_header(&o, &x, argc, argv);

    int nsizes = 0;
    for (size_t s = o.minbytes; s <= o.maxbytes; s = bc_next_size(s, o.factor)) ++nsizes;
    bc_row *rows = calloc((size_t)nsizes * (size_t)o.ncodecs, sizeof *rows);
    if (!rows) {
        fprintf(stderr, "bench-comm: out of memory for %d rows\n", nsizes * o.ncodecs);
        bc_free(&x);
        return 1;
    }
    int nrows = 0;
    long long wrong = 0;
    double bus_sum = 0;
    for (int c = 0; c < o.ncodecs && st == SDNN_OK; ++c) {
        for (size_t s = o.minbytes; s <= o.maxbytes; s = bc_next_size(s, o.factor)) {
            bc_row *row = &rows[nrows];
            st = bc_run_row(&x, &o, &o.codecs[c], s / sizeof(float), row);
            if (st != SDNN_OK) {
                fprintf(stderr, "bench-comm: allreduce of %zu B with codec %s failed: %s: %s\n",
                        s, o.codecs[c].label, sdnn_strerror(st), sdnn_last_error());
                break;
            }
            ++nrows;
            if (row->wrong > 0) wrong += row->wrong;
            bus_sum += row->busbw;
            if (!quiet) bc_print_row(row);
        }
    }
    const double avg_busbw = nrows ? bus_sum / nrows : 0;
    if (!quiet && st == SDNN_OK) {
        if (o.ncodecs > 1)
            for (int c = 0; c < o.ncodecs; ++c) {
                double sum = 0;
                int cnt = 0;
                for (int i = 0; i < nrows; ++i)
                    if (rows[i].codec == &o.codecs[c]) {
                        sum += rows[i].busbw;
                        ++cnt;
                    }
                printf("# Avg bus bandwidth %-10s: %g GB/s\n", o.codecs[c].label,
                       cnt ? sum / cnt : 0.0);
            }
        if (!o.check) printf("# Out of bounds values : N/A (-c 0)\n");
        else printf("# Out of bounds values : %lld %s\n", wrong, wrong ? "FAILED" : "OK");
        if (x.wire_mismatches)
            printf("# Wire byte mismatches : %lld FAILED\n", x.wire_mismatches);
        printf("# Avg bus bandwidth    : %g GB/s\n", avg_busbw);
        fflush(stdout);
    }
    int ret = st != SDNN_OK || wrong > 0 || x.wire_mismatches > 0 ? 1 : 0;
    if (o.json && st == SDNN_OK && !quiet) {
        sdnn_status js = bc_write_json(&o, &x, rows, nrows, wrong, avg_busbw, argc, argv);
        if (js != SDNN_OK) {
            fprintf(stderr, "bench-comm: -J %s: %s\n", o.json, sdnn_last_error());
            ret = 1;
        }
    }
    free(rows);
    bc_free(&x);
    return ret;
}
