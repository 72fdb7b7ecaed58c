/*
 * costmodel: what one training step costs on a given machine, predicted
 * from per-layer compute times, bucket sizes, codec rates and one link.
 *
 * It is a model of the step exactly as exchange.c runs it:
 *   - forward of every subdivision, then backward of the last one walks the
 *     layers in reverse; bucket k is ready when the backward of its lowest
 *     layer ends (overlap=1) or when the whole backward ends (overlap=0);
 *   - one comm thread/stream: exchanges run one at a time in ready order,
 *     each starting at max(ready, end of the previous one).  An exchange is
 *     the codec work and the collective together, because the comm thread
 *     encodes, runs the ring and decodes before it takes the next bucket;
 *   - Darknet's update then visits the layers in forward order and each
 *     layer's update waits for the end of its bucket's exchange.
 * step = end of the last update; compute = forward + backward + update;
 * exposed communication = step - compute.  A world of one exchanges
 * nothing, so step == compute.
 *
 * Collectives (per rank, W ranks, B bytes, link latency a, bandwidth b):
 *   ring allreduce (dense)       2(W-1) (a + B/(W b))
 *   all-gather of sparse lists   (W-1) (a + B_enc/b)
 * Stock Darknet (no per-step exchange): every `interval` steps all weights
 * cross the host link to the host and back; the GPUs that share one host
 * link (all N in a PCIe tree under one CPU) are served one after another.
 *
 * Everything here is pure arithmetic: no clocks, no threads, no Darknet.
 * Times are seconds, sizes bytes, rates bytes per second (GB = 1e9 B).
 */
#ifndef SDNN_COSTMODEL_H
#define SDNN_COSTMODEL_H

#include "codec.h"
#include "scalednn.h"
#include <stddef.h>

/* ---- links -------------------------------------------------------------- */

/* One link: a message of B bytes takes alpha_s + B / beta_Bps, where beta is
 * what one rank pushes in one direction while it receives as much. */
typedef struct sdnn_link {
    char name[24];
    double alpha_s;
    double beta_Bps;
} sdnn_link;

/* The named link `name` (pcie3, pcie4, pcie5, nvlink2, nvlink3, nvlink4,
 * eth1g, eth10g, eth100g, ib_edr, ib_hdr); SDNN_ERR_INVALID naming the
 * choices otherwise.  costmodel.c states where each number comes from. */
sdnn_status sdnn_link_find(const char *name, sdnn_link *out);
/* "pcie3, pcie4, ..." for messages. */
const char *sdnn_link_names(void);
/* The i-th named link (0 <= i < sdnn_link_count()). */
int sdnn_link_count(void);
const sdnn_link *sdnn_link_at(int i);
/* An explicit link ("custom"): GB/s (1e9 bytes/s) and microseconds. */
sdnn_status sdnn_link_custom(double gbytes_per_s, double latency_us, sdnn_link *out);

/* Fit of measured allreduce times to the ring formula
 * t(S) = 2(W-1) alpha + 2(W-1)/W * S/beta for a buffer of S bytes per rank
 * on W >= 2 ranks (n <= 32 timings, any order).  beta comes from the
 * larger half of the sizes (at least 2; least squares), where the buckets
 * the planner prices live; alpha from what the smaller half took beyond
 * that slope, clamped to 0.  Small transfers can run faster than the
 * link's sustained rate (a shaper's burst, as tc tbf's; a cache): a fit
 * over every size weighted by relative error let them set the slope and
 * read 0.37-0.53 GB/s on a 0.125 GB/s lab link.  When the larger
 * sizes alone do not grow (a preempted timing), the slope is the least-squares
 * one over every size.  SDNN_ERR_INVALID
 * when n < 2 or n > 32, W < 2, the largest sizes are all equal or the
 * times do not grow with the size. */
sdnn_status sdnn_link_fit(const double *bytes, const double *secs, int n, int world,
                          sdnn_link *out);

/* ---- collectives -------------------------------------------------------- */

/* 2(W-1)(alpha + B/(W beta)); 0 for W <= 1. */
double sdnn_cm_ring_allreduce_s(const sdnn_link *l, int world, double bytes);
/* (W-1)(alpha + B/beta) for B bytes contributed by every rank; 0 for W <= 1. */
/* Stock mode's central host between processes (comm/mpi_central.c): every
 * other process streams its `bytes` to process 0, which streams the average
 * back while later segments still arrive, so process 0's link carries
 * (world-1) x bytes in each direction at once: 2 latencies + that over the
 * link's rate. */
double sdnn_cm_central_s(const sdnn_link *l, int world, double bytes);
double sdnn_cm_allgather_s(const sdnn_link *l, int world, double bytes_per_rank);

/* ---- codecs ------------------------------------------------------------- */

/* How a codec changes an exchange: bytes on the wire per fp32 byte, and
 * how fast it runs, in fp32 bytes per second of the bucket (0: free).
 * dec_Bps of a sparse codec is the rate of accumulating one rank's list
 * into the bucket. */
typedef struct sdnn_codec_model {
    char name[16];
    double ratio;      /* encoded bytes / fp32 bytes */
    double enc_Bps;
    double dec_Bps;
    int dense;         /* 1: ring (re-encoded hop by hop), 0: all-gather */
    int lossy;
    /* 1: error feedback (error_feedback=1, always for topk): each replica
     * encodes and decodes its part of a bucket once more in its own thread
     * when the part is complete (exchange.c, sdnn_codec_ef_step), which
     * delays the bucket and the backward of every layer below it. */
    int ef;
    /* The collectives the backend offers this codec besides collective.c's
     * way (SDNN_CM_OFFERS bits of sdnn_cm_coll, below; 0: only that way):
     * SDNN_CM_OFFERS_GPU_ENGINE on the gpu engine's NCCL ring.  The exchange is
     * priced by the cheapest (sdnn_cm_choose). */
    unsigned colls;
} sdnn_codec_model;

/* The identity codec: ratio 1, free, dense, lossless, no error feedback. */
sdnn_codec_model sdnn_codec_model_none(void);
/* A model of codec `c` with its wire ratio taken from c->encoded_size at a
 * large size and the given measured rates; ef = 0 (the caller sets it). */
sdnn_codec_model sdnn_codec_model_of(const sdnn_codec_ops *c, const sdnn_codec_params *p,
                                     double enc_Bps, double dec_Bps);

/* ---- iterations to the target ------------------------------------------- */

/*
 * What a user waits for is time to accuracy = iterations to the target x
 * step time.  A lossy codec may need more iterations than none; its
 * iteration factor is that ratio (none: 1, by definition).  Each codec
 * states its default (sdnn_codec_ops.iter_factor; docs/ARCHITECTURE.md
 * says which runs each number comes from); [scalednn]
 * iter_factor=NAME:X[,NAME:X...] overrides the codecs it names and leaves
 * the others at their own.  A plan whose buckets mix codecs costs its
 * codecs' factors weighted by their buckets' bytes (plan.h,
 * sdnn_plan.iter_factor).
 */
#define SDNN_ITER_FACTOR_MAX 100.0

/* 0 when spec is a valid override list: NAME:X items, comma-separated,
 * NAME a codec of the registry named once, X a decimal number > 0 and
 * <= SDNN_ITER_FACTOR_MAX, none only at 1 (the reference); "" is valid
 * (no overrides).  Else -1 and, in why[0..len), what is wrong. */
int sdnn_iter_factor_check(const char *spec, char *why, size_t len);
/* Codec `name`'s factor under spec (one sdnn_iter_factor_check accepts;
 * NULL or "": no overrides): the override, else the codec's stated one,
 * else 1 (a name outside the registry). */
double sdnn_iter_factor(const char *spec, const char *name);

/* ---- profiles ----------------------------------------------------------- */

/* One layer of one replica, for one mini-batch (net->batch images). */
typedef struct sdnn_layer_cost {
    double fwd_s;
    double bwd_s;      /* 0 for layers at or before a stopbackward */
    double upd_s;      /* Darknet's update of the layer (once per step) */
    double bytes;      /* fp32 bytes exchanged (0: nothing to exchange) */
    int tensors;       /* parameter tensors (weights, biases, scales) */
    char type[16];     /* Darknet layer type, for tables */
} sdnn_layer_cost;

typedef struct sdnn_cost_profile {
    int n;                  /* layers */
    sdnn_layer_cost *layer; /* [n] */
    int batch;              /* images per mini-batch of one replica */
    int subdivisions;       /* mini-batches per step */
} sdnn_cost_profile;

/* A profile of n zeroed layers (batch 1, 1 subdivision). */
sdnn_status sdnn_cost_profile_alloc(int n, sdnn_cost_profile *out);
void sdnn_cost_profile_free(sdnn_cost_profile *p);
/* A copy with every time divided by `speed` (> 0): the same network on a
 * device `speed` times faster. */
sdnn_status sdnn_cost_profile_scaled(const sdnn_cost_profile *p, double speed,
                                     sdnn_cost_profile *out);
/* Totals per step: forward and backward of every subdivision + updates. */
double sdnn_cost_profile_compute_s(const sdnn_cost_profile *p);
double sdnn_cost_profile_bytes(const sdnn_cost_profile *p);

/* ---- one step ----------------------------------------------------------- */

/* A bucket: layers [lo, hi] (the exchanged ones among them), travelling
 * with codec index `codec` of the environment.  Buckets are listed in
 * exchange order: bucket 0 holds the last layers.  The simulation fills in
 * the predicted times (seconds from the start of the step). */
typedef struct sdnn_cm_bucket {
    int lo, hi;
    double bytes;      /* fp32 bytes (filled by sdnn_cm_bucket_bytes or a plan) */
    int codec;
    double ready_s, start_s, end_s;
} sdnn_cm_bucket;

typedef struct sdnn_cm_env {
    sdnn_link link;
    int world;                       /* ranks of the collective */
    int overlap;                     /* 1: a bucket leaves when it is ready */
    const sdnn_codec_model *codecs;  /* codec indices of buckets point here */
    int ncodecs;
} sdnn_cm_env;

/* Parts of one bucket's exchange on the comm thread. */
typedef struct sdnn_cm_exchange {
    double codec_s;    /* encoding and decoding work */
    double wire_s;     /* the collective */
    double total_s;    /* codec_s + wire_s */
    double wire_bytes; /* bytes one rank sends */
} sdnn_cm_exchange;

/* Cost of exchanging `bytes` fp32 bytes with codec model m, by the cheapest
 * of the collectives m->colls offers (sdnn_cm_choose). */
sdnn_cm_exchange sdnn_cm_exchange_cost(const sdnn_cm_env *env, const sdnn_codec_model *m,
                                       double bytes);
/* ---- which collective carries a coded bucket ----------------------------- */

/*
 * The ways a backend can move a coded bucket; sdnn_cm_exchange_cost prices
 * collective.c's default (the coded ring for a dense codec, the all-gather
 * for a sparse one); the device ring runs all three (plugin/cuda/ring.c),
 * the gpu engine offers SDNN_CM_OFFERS_GPU_ENGINE of them and takes the
 * cheapest (sdnn_cm_choose).  Per rank,
 * S fp32 bytes, S_c = ratio x S coded, enc = S/enc_Bps, dec = S/dec_Bps:
 *
 *   coded ring  2(W-1)(a + S_c/(W b)) + enc + (2W-1)/W dec   (dense codecs:
 *               the partial sums decoded, added, re-encoded at every hop)
 *   native      2(W-1)(a + S_c/(W b)) + enc + dec            (fp16, bf16:
 *               NCCL's own half / bfloat16 allreduce, encode and decode
 *               once, the sums inside NCCL)
 *   all-gather  (W-1)(a + S_c/b) + enc + W dec               (any codec; the
 *               only way of a sparse one)
 *
 * The native allreduce sends the coded ring's bytes with less codec work,
 * so wherever it exists it is the cheaper of the two (by (W-1)/W dec).
 * The all-gather beats the coded ring when
 *     (W-1) a > (W-1)(W-2)/W S_c/b + (W-1)^2/W dec,
 * i.e. for buckets below S* = a W / ((W-2) ratio / b + (W-1) / dec_Bps)
 * fp32 bytes (with free codecs, S_c* = a b W/(W-2): always at W = 2, 2ab
 * at W = 4, 4ab/3 at 8, 8ab/7 at 16, 32ab/31 at 64): it trades half of
 * the ring's latencies for W/2 times its bytes.
 */
typedef enum sdnn_cm_coll {
    SDNN_CM_CODED_RING = 0,
    SDNN_CM_NATIVE,
    SDNN_CM_ALLGATHER,
    SDNN_CM_NCOLL
} sdnn_cm_coll;

/* Bit of collective c in an `offers` mask. */
#define SDNN_CM_OFFERS(c) (1u << (unsigned)(c))
/* Every collective (what the gpu engine's NCCL ring runs). */
#define SDNN_CM_OFFERS_ALL (SDNN_CM_OFFERS(SDNN_CM_CODED_RING) | SDNN_CM_OFFERS(SDNN_CM_NATIVE) | \
                            SDNN_CM_OFFERS(SDNN_CM_ALLGATHER))

/* With this bit in `offers`, a collective that sends more bytes per rank
 * than collective.c's way for the codec (sdnn_wire_bytes at env->world) is
 * no candidate: compression never sends more than the host backends do
 * (the host backends' ring is the cap).  The dense all-gather sends (W-1) S_c against the ring's
 * 2(W-1)/W S_c: the same bytes at W = 2, more from W = 3 on. */
#define SDNN_CM_OFFERS_BYTE_CAP (1u << 8)

/* What the gpu engine's NCCL ring offers a lossy codec: every collective
 * (the coded ring, NCCL's native half / bf16 allreduce, the all-gather of
 * any codec) within the byte cap, the cheapest taken per bucket: a dense
 * codec's all-gather below S* at W = 2.  Where the all-gather carries a
 * dense codec its result is the mean of every rank's decoded encoding,
 * summed in rank order, not the coded ring's (whose partial sums are
 * re-encoded at every hop): tests/gpu/engine_ops holds each collective to
 * its own host reference bit for bit. */
#define SDNN_CM_OFFERS_GPU_ENGINE (SDNN_CM_OFFERS_ALL | SDNN_CM_OFFERS_BYTE_CAP)

/* "coded ring", "nccl half all-reduce" ... ("native" names the type for
 * the codec: sdnn_cm_coll_label). */
const char *sdnn_cm_coll_name(sdnn_cm_coll c);
/* The collective as the banner says it for codec model m ("nccl half
 * all-reduce" for fp16, "nccl bf16 all-reduce" for bf16). */
const char *sdnn_cm_coll_label(sdnn_cm_coll c, const sdnn_codec_model *m);
/* 1 when codec model m can travel by c: the coded ring needs a dense
 * codec, the native allreduce fp16 or bf16 (the encodings NCCL reduces in
 * their own type, ncclHalf and ncclBfloat16), the all-gather takes any. */
int sdnn_cm_coll_fits(const sdnn_codec_model *m, sdnn_cm_coll c);
/* collective.c's way for m: the coded ring (dense) or the all-gather. */
sdnn_cm_coll sdnn_cm_coll_default(const sdnn_codec_model *m);
/* Cost of exchanging `bytes` fp32 bytes with m by collective c (the
 * formulas above; total_s = +inf where c does not fit m). */
sdnn_cm_exchange sdnn_cm_exchange_via(const sdnn_cm_env *env, const sdnn_codec_model *m,
                                      double bytes, sdnn_cm_coll c);
/* The cheapest collective among `offers` (SDNN_CM_OFFERS bits) that fits
 * m (and, with SDNN_CM_OFFERS_BYTE_CAP, sends no more than the default);
 * the default one wins ties and is always among the candidates.  A
 * lossless codec (none) keeps the default: its mean is exact. */
sdnn_cm_coll sdnn_cm_choose(const sdnn_cm_env *env, const sdnn_codec_model *m, double bytes,
                            unsigned offers);
/* One banner line for a bucket: "bucket K (X MB): CODEC via LABEL: T ms
 * predicted vs ALT T2 ms" (ALT the cheapest other offered collective that
 * fits, or "(the only way)"), then "; LABEL T3 ms not offered" for a
 * cheaper collective that fits but is not offered; no newline. */
void sdnn_cm_choice_line(const sdnn_cm_env *env, const sdnn_codec_model *m, double bytes,
                         unsigned offers, int bucket, char *buf, size_t len);

/* The bucket size (fp32 bytes) below which collective a is cheaper than
 * b for codec model m in env (both times are affine in the size): 0 when
 * a is never the cheaper below some size (or a does not fit m), HUGE_VAL
 * when it is at every size (or b does not fit m; e.g. the all-gather
 * against the coded ring at W = 2 with free codecs), the sizes where the
 * two tie otherwise.  For a = the all-gather, b = the coded ring it is the
 * S* above. */
double sdnn_cm_crossover(const sdnn_cm_env *env, const sdnn_codec_model *m, sdnn_cm_coll a,
                         sdnn_cm_coll b);
/* One banner line for buckets that share a codec and a collective (the
 * start banner's "one line per choice"): sdnn_cm_choice_line of the
 * closest call among them (the bucket whose chosen and next-cheapest
 * prices are nearest, i.e. the one nearest the crossover), then how many
 * buckets of which sizes travel so and, where the all-gather and a ring
 * (coded or native) both are candidates, the size below which the
 * all-gather is the cheaper.  bytes[i] and ids[i] are the n buckets'
 * fp32 bytes and indices; every one of them must choose the same way. */
void sdnn_cm_group_line(const sdnn_cm_env *env, const sdnn_codec_model *m, const double *bytes,
                        const int *ids, int n, unsigned offers, char *buf, size_t len);

/* Time the error-feedback pass of such a bucket takes on a replica thread:
 * one encode and one decode of the bucket for a lossy codec with m->ef in
 * a world of two or more, else 0. */
double sdnn_cm_ef_s(const sdnn_cm_env *env, const sdnn_codec_model *m, double bytes);

typedef struct sdnn_cm_result {
    double step_s;
    double compute_s;        /* forward, backward, update: no exchange work */
    double exposed_s;        /* step - compute */
    double backward_end_s;   /* end of the last backward of the step, with
                              * the error-feedback passes it waited for */
    double last_end_s;       /* end of the last exchange (0 when none) */
    double comm_s;           /* sum of exchange durations, hidden or not */
    double ef_s;             /* sum of error-feedback passes (replica threads) */
} sdnn_cm_result;

/* Bytes of each bucket from the profile. */
void sdnn_cm_bucket_bytes(const sdnn_cost_profile *p, sdnn_cm_bucket *b, int nb);

/* Simulate one step.  Buckets must be contiguous, in reverse layer order
 * and not overlap; SDNN_ERR_INVALID (naming the bucket) otherwise or for a
 * codec index outside env.  Fills b[k].ready_s/start_s/end_s.  Bucket k is
 * ready at sdnn_cm_ready_s(lo_k) + the error-feedback passes of buckets
 * 0..k (each pushes the rest of the backward back). */
sdnn_status sdnn_cm_simulate(const sdnn_cost_profile *p, const sdnn_cm_env *env,
                             sdnn_cm_bucket *b, int nb, sdnn_cm_result *r);

/* Ready time of a bucket whose lowest layer is `lo`: the end of that
 * layer's backward in the last subdivision (overlap), or of the whole
 * backward (overlap=0).  The simulation and the planner both use it, so
 * they agree to the last bit. */
double sdnn_cm_ready_s(const sdnn_cost_profile *p, int overlap, int lo);

/* ---- stock Darknet ------------------------------------------------------ */

typedef struct sdnn_cm_stock {
    sdnn_link host;          /* the link between a device and the host */
    int world;               /* devices */
    int share;               /* devices served one after another on one host
                              * link (N for a PCIe tree under one CPU) */
    int interval;            /* steps between weight averages (4) */
    double host_reduce_Bps;  /* host averaging rate, fp32 bytes/s (0: free) */
} sdnn_cm_stock;

/* Time of one weight average: share x (pull + push of every weight) over
 * the host link, one latency per pull and per push, plus the host's sum of
 * the N copies.  0 for a world of one. */
double sdnn_cm_stock_sync_s(const sdnn_cm_stock *s, double bytes);
/* Step time of stock mode: compute + the average amortised over interval. */
sdnn_status sdnn_cm_stock_step(const sdnn_cost_profile *p, const sdnn_cm_stock *s,
                               sdnn_cm_result *r);

#endif
