/*
 * ring: collective.c's compressed allreduce-mean on devices.  Every local
 * rank plays its part in lockstep, hop by hop: all ranks encode, one
 * shift moves every rank's bytes to its right neighbour, all ranks decode.
 * The chunks, the hop order, the stochastic-rounding streams and every
 * rounding are the host ring's, and the device codecs write the host
 * codecs' bytes, so the results equal the host backends' bit for bit.
 *
 * Two transports:
 *   device  the ranks are virtual devices of one physical device; their
 *           buffers live in one address space and a shift is a device copy
 *           per rank.  Everything runs on the comm stream of rank 0's
 *           context, which the caller orders after every rank's backward.
 *   NCCL    one device per rank (a process may drive several); a shift is
 *           ncclSend/ncclRecv of every local rank inside one NCCL group,
 *           each on its own device's comm stream.
 *
 * Host C over dev.h (the NCCL calls included), so the simulated build
 * runs this very code.  Over NCCL a failed call aborts every communicator
 * of the ring (NCCL leaves the operations already queued unmatched, and a
 * synchronising destroy would hang on them), and the host wait is bounded
 * (sdnn_dring_sync): an exchange that stops making progress fails with
 * SDNN_ERR_COMM naming the rank and its peers instead of hanging.
 */
#include "clock.h"
#include "dev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collective.h"
#include "comm.h"
#include "costmodel.h"

typedef struct ring_rank {
    sdnn_dctx *ctx;         /* where this rank's kernels run */
    sdnn_dnccl *comm;       /* NCCL transport (not owned unless owns_comms) */
    sdnn_devent *done;      /* NCCL: marks the end of the queued exchange */
    int rank;               /* global */
    unsigned char *scratch; /* device */
    size_t bytes;
    /* per-call state */
    const float *in;
    float *out;
    float *acc;
    unsigned char *sbuf, *rbuf, *cscratch;
    size_t slen, rlen;      /* bytes of the current shift */
} ring_rank;

struct sdnn_dring {
    int nlocal, world, nccl;
    int owns_comms;         /* made by sdnn_dring_create_nccl_local */
    int failed;             /* a call failed: the communicators are aborted */
    double timeout_s;
    ring_rank *r;
};

static size_t round256(size_t x) { return (x + 255) & ~(size_t)255; }
static int mod(int a, int m) { return ((a % m) + m) % m; }

static double now_s(void) { return sdnn_now_s(); }

static double default_timeout(void)
{
    const char *e = getenv("SDNN_NCCL_TIMEOUT_S");
    double v = e && *e ? atof(e) : 0;
    return v > 0 ? v : SDNN_COMM_TIMEOUT_S;
}

sdnn_status sdnn_dring_create(sdnn_dctx *const *ctxs, int nlocal, sdnn_dnccl *const *ncomms,
                              int world, int first_rank, sdnn_dring **out)
{
    *out = NULL;
    if (nlocal < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "device ring: no ranks");
    if (!ncomms) {
        world = nlocal;
        first_rank = 0;
        for (int i = 1; i < nlocal; ++i)
            if (sdnn_dctx_device(ctxs[i]) != sdnn_dctx_device(ctxs[0]))
                return SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                                  "comm backend device: replicas on devices %d and %d; it moves "
                                  "data within one device (use nccl across devices)",
                                  sdnn_dctx_device(ctxs[0]), sdnn_dctx_device(ctxs[i]));
    }
    sdnn_dring *R = calloc(1, sizeof *R);
    if (!R) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a device ring");
    R->r = calloc((size_t)nlocal, sizeof *R->r);
    if (!R->r) {
        free(R);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for a device ring");
    }
    R->nlocal = nlocal;
    R->world = world;
    R->nccl = ncomms != NULL;
    R->timeout_s = default_timeout();
    for (int i = 0; i < nlocal; ++i) {
        R->r[i].ctx = ncomms ? ctxs[i] : ctxs[0];
        R->r[i].comm = ncomms ? ncomms[i] : NULL;
        R->r[i].rank = first_rank + i;
    }
    sdnn_status st = SDNN_OK;
    for (int i = 0; i < nlocal && R->nccl && st == SDNN_OK; ++i)
        st = sdnn_devent_create(R->r[i].ctx, 0, &R->r[i].done);
    if (st != SDNN_OK) {
        sdnn_dring_destroy(R);
        return st;
    }
    *out = R;
    return SDNN_OK;
}

void sdnn_dring_set_timeout(sdnn_dring *R, double seconds)
{
    if (seconds > 0) R->timeout_s = seconds;
}

int sdnn_dring_failed(const sdnn_dring *R) { return R->failed; }

/* After a failed NCCL call: cancel everything the ring queued (NCCL may
 * have queued part of a group), so that no stream waits for a peer
 * forever.  A ring over device copies has nothing to cancel. */
static void ring_abort_because(sdnn_dring *R, const char *why)
{
    if (!R->nccl || R->failed) return;
    R->failed = 1;
    for (int i = 0; i < R->nlocal; ++i) sdnn_dnccl_abort_because(R->r[i].comm, why);
}

static void ring_abort(sdnn_dring *R) { ring_abort_because(R, NULL); }

static sdnn_status refuse_failed(const sdnn_dring *R)
{
    if (R->failed)
        return SDNN_ERROR(SDNN_ERR_ABORTED,
                          "device ring: an earlier exchange failed and aborted its NCCL "
                          "communicators; make a new ring");
    return SDNN_OK;
}

/* The rank every local rank ends up waiting on: the first rank outside
 * this process to the left of the local block (data flows to the right, so
 * a stall travels right from the silent rank), or the left neighbour of
 * the first local rank still waiting when the world is this process. */
static int silent_rank(const sdnn_dring *R, int first_waiting)
{
    if (R->world > R->nlocal) return mod(R->r[0].rank - 1, R->world);
    return mod(first_waiting - 1, R->world);
}

/* The deadline passed: the backends' one message for a silent peer
 * (comm.h, sdnn_comm_silent_error), naming the rank and its process
 * (every process drives nlocal ranks), then each local rank still waiting. */
static sdnn_status silent_error(const sdnn_dring *R, double waited)
{
    char who[384] = "";
    size_t len = 0;
    int first = -1;
    for (int i = 0; i < R->nlocal; ++i) {
        if (sdnn_devent_done(R->r[i].done)) continue;
        int g = R->r[i].rank;
        if (first < 0) first = g;
        if (len < sizeof who)
            len += (size_t)snprintf(who + len, sizeof who - len, "%s%d (peers %d, %d)",
                                    len ? ", " : "", g, mod(g - 1, R->world),
                                    mod(g + 1, R->world));
    }
    if (first < 0) first = R->r[0].rank;
    const int peer = silent_rank(R, first);
    char note[64] = "", what[512], after[] = "; NCCL communicators aborted";
    if (R->world > R->nlocal)
        snprintf(note, sizeof note, " (process %d)", peer / R->nlocal);
    snprintf(what, sizeof what, "no progress on the NCCL exchange; waiting: rank %s", who);
    const sdnn_silent_peer e = {.backend = "nccl", .rank = first, .waited = waited, .peer = peer,
                                .peer_note = note, .what = what, .timeout = R->timeout_s,
                                .after = after};
    return sdnn_comm_silent_error(&e);
}

/* The bounded host wait of sdnn_dring_sync over NCCL. */
static sdnn_status nccl_wait(sdnn_dring *R)
{
    for (int i = 0; i < R->nlocal; ++i)
        SDNN_CHECK(sdnn_devent_record(R->r[i].done, R->r[i].ctx, SDNN_STREAM_COMM));
    /* The deadline counts from the last progress seen: the start, or a
     * local rank's stream passing its mark. */
    double t0 = now_s();
    long nap_us = 20;
    int ndone = 0;
    for (;;) {
        int all = 1, done = 0;
        for (int i = 0; i < R->nlocal; ++i) {
            ring_rank *k = &R->r[i];
            sdnn_status e = sdnn_dnccl_async_error(k->comm);
            if (e != SDNN_OK) {
                ring_abort(R);
                return SDNN_ERROR(SDNN_ERR_COMM,
                                  "NCCL ring: rank %d (peers %d and %d) failed: %s", k->rank,
                                  mod(k->rank - 1, R->world), mod(k->rank + 1, R->world),
                                  sdnn_last_error());
            }
            const int d = sdnn_devent_done(k->done);
            all &= d;
            done += d;
        }
        if (all) break;
        if (done > ndone) {
            ndone = done;
            t0 = now_s();
        }
        if (now_s() - t0 > R->timeout_s) {
            /* The message first (it reads which ranks still wait), then
             * the abort, which carries it to every cancelled operation. */
            sdnn_status st = silent_error(R, now_s() - t0);
            ring_abort_because(R, sdnn_last_error());
            return st;
        }
        struct timespec t = {0, nap_us * 1000L};
        nanosleep(&t, NULL);
        if (nap_us < 2000) nap_us *= 2;
    }
    /* Every stream passed its mark: report an operation that failed on it. */
    for (int i = 0; i < R->nlocal; ++i) {
        sdnn_status st = sdnn_dctx_sync_stream(R->r[i].ctx, SDNN_STREAM_COMM);
        if (st != SDNN_OK) {
            ring_abort(R);
            return st;
        }
    }
    return SDNN_OK;
}

sdnn_status sdnn_dring_sync(sdnn_dring *R)
{
    SDNN_CHECK(refuse_failed(R));
    if (R->nccl) return nccl_wait(R);
    for (int i = 0; i < R->nlocal; ++i)
        SDNN_CHECK(sdnn_dctx_sync_stream(R->r[i].ctx, SDNN_STREAM_COMM));
    return SDNN_OK;
}

void sdnn_dring_destroy(sdnn_dring *R)
{
    if (!R) return;
    /* A healthy ring finishes its work first; one that fails to (or failed
     * before) is aborted, never waited on without a bound. */
    if (R->nccl && !R->failed && nccl_wait(R) != SDNN_OK) ring_abort(R);
    for (int i = 0; i < R->nlocal; ++i) {
        ring_rank *k = &R->r[i];
        if (!R->nccl) (void)sdnn_dctx_sync_stream(k->ctx, SDNN_STREAM_COMM);
        if (k->scratch) sdnn_dfree(k->scratch);
        if (R->owns_comms && k->comm) sdnn_dnccl_destroy(k->comm);
        sdnn_devent_destroy(k->done);
    }
    free(R->r);
    free(R);
}

sdnn_status sdnn_dring_create_nccl_world(const unsigned char id[SDNN_NCCL_ID_BYTES], int world,
                                         int first_rank, sdnn_dctx *const *ctxs, int n,
                                         double timeout_s, sdnn_dring **out)
{
    *out = NULL;
    enum { MAXDEV = 64 };
    if (n < 1 || n > MAXDEV)
        return SDNN_ERROR(SDNN_ERR_INVALID, "nccl: %d local devices (1..%d)", n, (int)MAXDEV);
    sdnn_dnccl *comms[MAXDEV];
    SDNN_CHECK(sdnn_dnccl_init_ranks(id, world, first_rank, ctxs, n, timeout_s, comms));
    sdnn_status st = sdnn_dring_create(ctxs, n, comms, world, first_rank, out);
    if (st != SDNN_OK) {
        for (int i = 0; i < n; ++i) {
            sdnn_dnccl_abort(comms[i]);
            sdnn_dnccl_destroy(comms[i]);
        }
        return st;
    }
    (*out)->owns_comms = 1;
    sdnn_dring_set_timeout(*out, timeout_s);
    return SDNN_OK;
}

sdnn_status sdnn_dring_create_nccl_local(sdnn_dctx *const *ctxs, int n, sdnn_dring **out)
{
    *out = NULL;
    enum { MAXDEV = 64 };
    if (n < 1 || n > MAXDEV)
        return SDNN_ERROR(SDNN_ERR_INVALID, "nccl: %d local devices (1..%d)", n, (int)MAXDEV);
    sdnn_dnccl *comms[MAXDEV];
    SDNN_CHECK(sdnn_dnccl_init_all(ctxs, n, comms));
    sdnn_status st = sdnn_dring_create(ctxs, n, comms, n, 0, out);
    if (st != SDNN_OK) {
        for (int i = 0; i < n; ++i) sdnn_dnccl_destroy(comms[i]);
        return st;
    }
    (*out)->owns_comms = 1;
    return SDNN_OK;
}

static sdnn_status reserve(ring_rank *k, size_t bytes)
{
    if (bytes <= k->bytes) return SDNN_OK;
    SDNN_CHECK(sdnn_dctx_bind(k->ctx));
    if (k->scratch) {
        SDNN_CHECK(sdnn_dctx_sync_stream(k->ctx, SDNN_STREAM_COMM));
        sdnn_dfree(k->scratch);
        k->scratch = NULL;
        k->bytes = 0;
    }
    SDNN_CHECK(sdnn_dmalloc(k->ctx, bytes, (void **)&k->scratch));
    k->bytes = bytes;
    return SDNN_OK;
}

/* n bytes from src to dst on k's comm stream (both on k's device). */
static sdnn_status dcopy(ring_rank *k, void *dst, const void *src, size_t n)
{
    return sdnn_dcopy(k->ctx, SDNN_STREAM_COMM, dst, src, n, 0);
}

/* Every local rank sends k->slen bytes of k->sbuf to its right neighbour
 * and receives k->rlen bytes into k->rbuf from its left. */
static sdnn_status shift_all(sdnn_dring *R, size_t *wire)
{
    if (R->world == 1) return SDNN_OK;
    if (!R->nccl) {
        for (int i = 0; i < R->nlocal; ++i) {
            ring_rank *a = &R->r[i], *b = &R->r[(i + 1) % R->nlocal];
            if (a->slen != b->rlen)
                return SDNN_ERROR(SDNN_ERR_INTERNAL, "device ring: rank %d sends %zu bytes, "
                                  "rank %d expects %zu", i, a->slen, (i + 1) % R->nlocal, b->rlen);
            if (a->slen) SDNN_CHECK(dcopy(a, b->rbuf, a->sbuf, a->slen));
            *wire += a->slen;
        }
        return SDNN_OK;
    }
    sdnn_status st = sdnn_dnccl_group_start();
    for (int i = 0; i < R->nlocal && st == SDNN_OK; ++i) {
        ring_rank *k = &R->r[i];
        st = sdnn_dnccl_send(k->comm, k->ctx, SDNN_STREAM_COMM, k->sbuf, k->slen,
                             mod(k->rank + 1, R->world));
        if (st == SDNN_OK)
            st = sdnn_dnccl_recv(k->comm, k->ctx, SDNN_STREAM_COMM, k->rbuf, k->rlen,
                                 mod(k->rank - 1, R->world));
        *wire += k->slen;
    }
    /* The group is always closed; after a failure what it queued is
     * unmatched, so the communicators are aborted. */
    sdnn_status e2 = sdnn_dnccl_group_end();
    if (st == SDNN_OK) st = e2;
    if (st != SDNN_OK) {
        ring_abort(R);
        return SDNN_ERROR(SDNN_ERR_COMM, "NCCL ring shift failed (communicators aborted): %s",
                          sdnn_last_error());
    }
    return SDNN_OK;
}

#define EACH(k) for (ring_rank *k = R->r; k < R->r + R->nlocal; ++k)

static sdnn_status bind(ring_rank *k) { return sdnn_dctx_bind(k->ctx); }

static sdnn_status dense_ring(sdnn_dring *R, int codec, const sdnn_codec_params *p,
                              uint64_t stream, size_t n, size_t *wire)
{
    const sdnn_codec_ops *hc = sdnn_dcodec_host(codec);
    const int W = R->world;
    const size_t align = hc->align(p);
    size_t lo0, maxlen;
    sdnn_ring_chunk(n, align, W, 0, &lo0, &maxlen);
    size_t enc_max = round256(hc->encoded_size(p, maxlen));
    size_t acc_bytes = round256(maxlen * sizeof(float));
    size_t cs = round256(sdnn_dcodec_scratch_bytes(codec, p, maxlen));
    EACH(k) {
        SDNN_CHECK(reserve(k, acc_bytes + 2 * enc_max + cs));
        k->acc = (float *)k->scratch;
        k->sbuf = k->scratch + acc_bytes;
        k->rbuf = k->sbuf + enc_max;
        k->cscratch = k->rbuf + enc_max;
    }
    /* Reduce-scatter: at hop s rank R sends chunk R-s and receives R-s-1. */
    if (W == 1) {
        EACH(k) {
            SDNN_CHECK(bind(k));
            SDNN_CHECK(dcopy(k, k->acc, k->in, n * sizeof(float)));
        }
    }
    for (int s = 0; s < W - 1; ++s) {
        EACH(k) {
            SDNN_CHECK(bind(k));
            int sc = mod(k->rank - s, W), rc = mod(k->rank - s - 1, W);
            size_t slo, slen, rlo, rlen;
            sdnn_ring_chunk(n, align, W, sc, &slo, &slen);
            sdnn_ring_chunk(n, align, W, rc, &rlo, &rlen);
            const float *src = s == 0 ? k->in + slo : k->acc;
            SDNN_CHECK(sdnn_dcodec_encode(k->ctx, SDNN_STREAM_COMM, codec, p, src, slen, k->sbuf,
                                          sdnn_stream_mix(stream, (uint64_t)sc, (uint64_t)s),
                                          k->cscratch));
            k->slen = hc->encoded_size(p, slen);
            k->rlen = hc->encoded_size(p, rlen);
        }
        SDNN_CHECK(shift_all(R, wire));
        EACH(k) {
            SDNN_CHECK(bind(k));
            int rc = mod(k->rank - s - 1, W);
            size_t rlo, rlen;
            sdnn_ring_chunk(n, align, W, rc, &rlo, &rlen);
            SDNN_CHECK(sdnn_dcodec_decode_add(k->ctx, SDNN_STREAM_COMM, codec, p, k->rbuf, rlen,
                                              k->in + rlo, k->acc));
        }
    }
    /* The owner's mean, encoded once. */
    const float inv = 1.0f / (float)W;
    EACH(k) {
        SDNN_CHECK(bind(k));
        int own = mod(k->rank + 1, W);
        size_t olo, olen;
        sdnn_ring_chunk(n, align, W, own, &olo, &olen);
        SDNN_CHECK(sdnn_k_scale(k->ctx, SDNN_STREAM_COMM, k->acc, olen, inv));
        SDNN_CHECK(sdnn_dcodec_encode(k->ctx, SDNN_STREAM_COMM, codec, p, k->acc, olen, k->sbuf,
                                      sdnn_stream_mix(stream, (uint64_t)own, (uint64_t)W),
                                      k->cscratch));
        SDNN_CHECK(sdnn_dcodec_decode(k->ctx, SDNN_STREAM_COMM, codec, p, k->sbuf, olen,
                                      k->out + olo));
        k->slen = hc->encoded_size(p, olen);
    }
    /* All-gather: each encoded mean passes on unchanged. */
    for (int s = 0; s < W - 1; ++s) {
        EACH(k) {
            int rc = mod(k->rank - s, W);
            size_t rlo, rlen;
            sdnn_ring_chunk(n, align, W, rc, &rlo, &rlen);
            k->rlen = hc->encoded_size(p, rlen);
        }
        SDNN_CHECK(shift_all(R, wire));
        EACH(k) {
            SDNN_CHECK(bind(k));
            int rc = mod(k->rank - s, W);
            size_t rlo, rlen;
            sdnn_ring_chunk(n, align, W, rc, &rlo, &rlen);
            SDNN_CHECK(sdnn_dcodec_decode(k->ctx, SDNN_STREAM_COMM, codec, p, k->rbuf, rlen,
                                          k->out + rlo));
            unsigned char *t = k->sbuf;
            k->sbuf = k->rbuf;
            k->rbuf = t;
            k->slen = k->rlen;
        }
    }
    return SDNN_OK;
}

/* Every rank's whole encoded bucket to every rank (W-1 shifts of the
 * ring), then each rank accumulates the W decoded lists in rank order and
 * scales: the same bits everywhere.  Sparse codecs always travel so; a
 * dense one (int8) when sdnn_dring_exchange is asked to. */
static sdnn_status allgather(sdnn_dring *R, int codec, const sdnn_codec_params *p,
                             uint64_t stream, size_t n, size_t *wire)
{
    const sdnn_codec_ops *hc = sdnn_dcodec_host(codec);
    const int W = R->world;
    const size_t enc = hc->encoded_size(p, n), stride = round256(enc);
    size_t cs = round256(sdnn_dcodec_scratch_bytes(codec, p, n));
    EACH(k) {
        SDNN_CHECK(reserve(k, (size_t)W * stride + cs));
        k->cscratch = k->scratch + (size_t)W * stride;
        SDNN_CHECK(bind(k));
        SDNN_CHECK(sdnn_dcodec_encode(k->ctx, SDNN_STREAM_COMM, codec, p, k->in, n,
                                      k->scratch + (size_t)k->rank * stride,
                                      sdnn_stream_mix(stream, (uint64_t)k->rank, 0), k->cscratch));
    }
    for (int s = 0; s < W - 1; ++s) {
        EACH(k) {
            int sc = mod(k->rank - s, W), rc = mod(k->rank - s - 1, W);
            k->sbuf = k->scratch + (size_t)sc * stride;
            k->rbuf = k->scratch + (size_t)rc * stride;
            k->slen = k->rlen = enc;
        }
        SDNN_CHECK(shift_all(R, wire));
    }
    const float inv = 1.0f / (float)W;
    EACH(k) {
        SDNN_CHECK(bind(k));
        SDNN_CHECK(sdnn_dzero(k->ctx, SDNN_STREAM_COMM, k->out, n * sizeof(float)));
        for (int q = 0; q < W; ++q)
            SDNN_CHECK(sdnn_dcodec_accumulate(k->ctx, SDNN_STREAM_COMM, codec, p,
                                              k->scratch + (size_t)q * stride, n, k->out));
        SDNN_CHECK(sdnn_k_scale(k->ctx, SDNN_STREAM_COMM, k->out, n, inv));
    }
    return SDNN_OK;
}

sdnn_status sdnn_dring_coded(sdnn_dring *R, const sdnn_codec_ops *codec,
                             const sdnn_codec_params *p, uint64_t stream, const float *const *in,
                             float *const *out, size_t n, size_t *wire)
{
    SDNN_CHECK(refuse_failed(R));
    int id = sdnn_dcodec_of(codec);
    if (id < 0)
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "codec %s has no device version",
                          codec ? codec->name : "(null)");
    size_t sent = 0;
    if (n == 0) return SDNN_OK;
    for (int i = 0; i < R->nlocal; ++i) {
        R->r[i].in = in[i];
        R->r[i].out = out[i];
    }
    sdnn_status st = codec->dense ? dense_ring(R, id, p, stream, n, &sent)
                                  : allgather(R, id, p, stream, n, &sent);
    if (wire) *wire += sent;
    /* Whatever failed, the ranks may be out of step now. */
    if (st != SDNN_OK) ring_abort(R);
    return st;
}

/* fp16 and bf16 through NCCL's own allreduce in that type: each rank
 * encodes its bucket once (the codec's kernel), NCCL sums the halves
 * (ncclSum, partial sums rounded to the type at every step of its ring),
 * each rank decodes the sum and scales it by 1/W in fp32.  A partial sum
 * past the type's range overflows to +-inf as the codec's own rule says
 * (fp16: |s| >= 65520), as the coded ring's re-encoded partial sums do. */
static sdnn_status native_allreduce(sdnn_dring *R, int codec, const sdnn_codec_params *p,
                                    uint64_t stream, size_t n, size_t *wire)
{
    const sdnn_codec_ops *hc = sdnn_dcodec_host(codec);
    const sdnn_dnccl_type t = codec == SDNN_DCODEC_FP16 ? SDNN_DNCCL_HALF : SDNN_DNCCL_BF16;
    const int W = R->world;
    const size_t enc = hc->encoded_size(p, n), stride = round256(enc);
    if (enc != n * sdnn_dnccl_type_bytes(t))
        return SDNN_ERROR(SDNN_ERR_INTERNAL, "native allreduce: codec %s encodes %zu elements "
                          "in %zu bytes, not one %zu-byte element each", hc->name, n, enc,
                          sdnn_dnccl_type_bytes(t));
    const size_t cs = round256(sdnn_dcodec_scratch_bytes(codec, p, n));
    EACH(k) {
        SDNN_CHECK(reserve(k, stride + cs));
        k->sbuf = k->scratch;
        k->cscratch = k->scratch + stride;
        SDNN_CHECK(bind(k));
        SDNN_CHECK(sdnn_dcodec_encode(k->ctx, SDNN_STREAM_COMM, codec, p, k->in, n, k->sbuf,
                                      sdnn_stream_mix(stream, (uint64_t)k->rank, 0), k->cscratch));
    }
    if (W > 1) {
        sdnn_status st = sdnn_dnccl_group_start();
        EACH(k) {
            if (st != SDNN_OK) break;
            st = sdnn_dnccl_allreduce_sum_typed(k->comm, k->ctx, SDNN_STREAM_COMM, k->sbuf,
                                                k->sbuf, n, t);
        }
        sdnn_status e2 = sdnn_dnccl_group_end();
        if (st == SDNN_OK) st = e2;
        if (st != SDNN_OK) {
            /* The reason rides on the abort into the operations it cancels
             * (a rank whose part was queued reports it from its stream). */
            char why[512];
            snprintf(why, sizeof why, "ncclAllReduce (%s) failed: %s", hc->name,
                     sdnn_last_error());
            ring_abort_because(R, why);
            return SDNN_ERROR(SDNN_ERR_COMM, "%s (communicators aborted)", why);
        }
        *wire += (size_t)R->nlocal * 2 * (size_t)(W - 1) * enc / (size_t)W;
    }
    const float inv = 1.0f / (float)W;
    EACH(k) {
        SDNN_CHECK(bind(k));
        SDNN_CHECK(sdnn_dcodec_decode(k->ctx, SDNN_STREAM_COMM, codec, p, k->sbuf, n, k->out));
        if (W > 1) SDNN_CHECK(sdnn_k_scale(k->ctx, SDNN_STREAM_COMM, k->out, n, inv));
    }
    return SDNN_OK;
}

int sdnn_dring_offers(const sdnn_dring *R, const sdnn_codec_ops *codec, sdnn_cm_coll path)
{
    const int id = sdnn_dcodec_of(codec);
    if (id < 0) return 0;
    switch (path) {
    case SDNN_CM_CODED_RING: return codec->dense;
    case SDNN_CM_NATIVE: return R->nccl && (id == SDNN_DCODEC_FP16 || id == SDNN_DCODEC_BF16);
    case SDNN_CM_ALLGATHER: return 1;
    default: return 0;
    }
}

sdnn_status sdnn_dring_exchange(sdnn_dring *R, sdnn_cm_coll path, const sdnn_codec_ops *codec,
                                const sdnn_codec_params *p, uint64_t stream,
                                const float *const *in, float *const *out, size_t n, size_t *wire)
{
    SDNN_CHECK(refuse_failed(R));
    if (!sdnn_dring_offers(R, codec, path))
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "device ring: codec %s cannot travel by %s%s",
                          codec ? codec->name : "(null)", sdnn_cm_coll_name(path),
                          path == SDNN_CM_NATIVE && !R->nccl ? " (it needs NCCL)" : "");
    if (path == SDNN_CM_CODED_RING || (path == SDNN_CM_ALLGATHER && !codec->dense))
        return sdnn_dring_coded(R, codec, p, stream, in, out, n, wire);
    if (n == 0) return SDNN_OK;
    const int id = sdnn_dcodec_of(codec);
    for (int i = 0; i < R->nlocal; ++i) {
        R->r[i].in = in[i];
        R->r[i].out = out[i];
    }
    size_t sent = 0;
    sdnn_status st = path == SDNN_CM_NATIVE ? native_allreduce(R, id, p, stream, n, &sent)
                                            : allgather(R, id, p, stream, n, &sent);
    if (wire) *wire += sent;
    if (st != SDNN_OK) ring_abort(R);
    return st;
}

sdnn_status sdnn_dring_mean(sdnn_dring *R, const float *const *in, float *const *out, size_t n,
                            size_t *wire)
{
    SDNN_CHECK(refuse_failed(R));
    if (n == 0) return SDNN_OK;
    const int W = R->world;
    if (wire && W > 1) *wire += (size_t)R->nlocal * 2 * (size_t)(W - 1) * n * sizeof(float) / W;
    if (!R->nccl) {
        ring_rank *k = &R->r[0];
        SDNN_CHECK(bind(k));
        SDNN_CHECK(sdnn_k_mean(k->ctx, SDNN_STREAM_COMM, in, R->nlocal, out[0], n));
        for (int i = 1; i < R->nlocal; ++i)
            if (out[i] != out[0])
                SDNN_CHECK(dcopy(k, out[i], out[0], n * sizeof(float)));
        return SDNN_OK;
    }
    sdnn_status st = sdnn_dnccl_group_start();
    EACH(k) {
        if (st != SDNN_OK) break;
        int i = (int)(k - R->r);
        st = sdnn_dnccl_allreduce_sum(k->comm, k->ctx, SDNN_STREAM_COMM, in[i], out[i], n);
    }
    sdnn_status e2 = sdnn_dnccl_group_end();
    if (st == SDNN_OK) st = e2;
    if (st != SDNN_OK) {
        ring_abort(R);
        return SDNN_ERROR(SDNN_ERR_COMM, "ncclAllReduce failed (communicators aborted): %s",
                          sdnn_last_error());
    }
    if (W > 1) {
        EACH(k) {
            SDNN_CHECK(bind(k));
            SDNN_CHECK(sdnn_k_scale(k->ctx, SDNN_STREAM_COMM, out[k - R->r], n,
                                    1.0f / (float)W));
        }
    }
    return SDNN_OK;
}
