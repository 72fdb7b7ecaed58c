/*
 * collective: the compressed allreduce-mean, written once as the part one
 * rank plays, over a transport that only shifts bytes around a ring.  Every
 * backend runs these same functions (local: one thread per replica, MPI:
 * one rank per process, NCCL's host fallback), so the arithmetic, and with
 * it every bit of the result, is the same whichever backend carries it.
 *
 * Dense codecs (fp16, bf16, int8, none): ring reduce-scatter then
 * all-gather on encoded chunks.  The buffer is cut into `size` chunks
 * (boundaries on the codec's alignment).  Chunk c starts on rank c as the
 * encoding of that rank's values; each hop decodes, adds its own fp32
 * values and encodes the partial sum again, so the sum of chunk c is
 * accumulated in the fixed order c, c+1, ..., c-1.  The owner (rank c-1)
 * scales the sum by 1/size, encodes the mean once, and the all-gather
 * passes that encoding around unchanged: every rank decodes the same
 * bytes, so every rank holds the bit-identical mean.
 *
 * Sparse codecs (topk): every rank encodes its selection, the lists go
 * around the ring (all-gather), and every rank sums the decoded lists in
 * rank order 0..size-1 into zeros and scales by 1/size: again the same
 * operations in the same order everywhere.
 *
 * Stochastic rounding streams are derived from the caller's stream, the
 * chunk and the hop, so reruns reproduce the same bytes.
 */
#ifndef SDNN_COLLECTIVE_H
#define SDNN_COLLECTIVE_H

#include "codec.h"
#include "scalednn.h"
#include <stddef.h>
#include <stdint.h>

typedef struct sdnn_transport sdnn_transport;

typedef struct sdnn_transport_ops {
    /* Send slen bytes to rank (rank+1) % size and receive rlen bytes from
     * rank (rank-1+size) % size; both are complete when it returns.  Every
     * rank calls shift the same number of times in the same order. */
    sdnn_status (*shift)(sdnn_transport *t, const void *send, size_t slen,
                         void *recv, size_t rlen);
} sdnn_transport_ops;

struct sdnn_transport {
    const sdnn_transport_ops *ops;
    int rank;
    int size;
    size_t sent;           /* bytes this rank has sent (the caller may reset) */
    void *impl;
};

/* Scratch bytes one rank needs for n floats at this world size. */
size_t sdnn_coded_scratch_bytes(const sdnn_codec_ops *c, const sdnn_codec_params *p,
                                size_t n, int size);

/* This rank's part: out = decoded mean over all ranks of their `in`.
 * in and out are n floats (out may alias in); scratch holds
 * sdnn_coded_scratch_bytes bytes. */
sdnn_status sdnn_coded_allreduce_mean(sdnn_transport *t, const sdnn_codec_ops *c,
                                      const sdnn_codec_params *p, uint64_t stream,
                                      const float *in, float *out, size_t n,
                                      void *scratch);

/* First element and length of ring chunk `chunk` of `size` for n floats
 * aligned to `align` (exposed for tests and other backends). */
void sdnn_ring_chunk(size_t n, size_t align, int size, int chunk, size_t *lo, size_t *len);

/* Bytes all ranks together send for one coded allreduce of n floats. */
size_t sdnn_coded_wire_bytes(const sdnn_codec_ops *c, const sdnn_codec_params *p,
                             size_t n, int size);

/*
 * The one definition of bytes on the wire: what EACH replica sends, on
 * average over the W replicas of the world (all replicas across all
 * processes: 1 process x 4 devices and 2 x 2 are both W = 4), for one
 * collective whose per-replica payload is S bytes.  Every figure the
 * product reports (CSV bytes_exchanged, progress line, timeline, main job,
 * `scalednn simulate`, the cost model) is a sum of these.
 *
 *   ALLREDUCE       ring all-reduce of S bytes: reduce-scatter then
 *                   all-gather, each chunk of S/W travels W-1 hops twice:
 *                   2(W-1)/W * S
 *   REDUCE_SCATTER  (W-1)/W * S
 *   ALLGATHER       every replica contributes S and receives all others':
 *                   (W-1) * S
 *   BROADCAST       S from one root along a ring (or tree): W-1 sends of S
 *                   in all, (W-1)/W * S each
 *   CENTRAL         gather S from every replica to a root, root sends the
 *                   result back (stock averaging): the root sends (W-1)*S,
 *                   every other replica S, 2(W-1)/W * S each
 *
 * A world of one sends nothing.  S is a double so a codec's fractional
 * ratio and a mean over replicas stay exact enough to compare with a
 * counter (see sdnn_coded_wire_bytes for the byte-exact coded ring).
 */
typedef enum sdnn_wire_kind {
    SDNN_WIRE_ALLREDUCE = 0,
    SDNN_WIRE_REDUCE_SCATTER,
    SDNN_WIRE_ALLGATHER,
    SDNN_WIRE_BROADCAST,
    SDNN_WIRE_CENTRAL
} sdnn_wire_kind;

double sdnn_wire_bytes(sdnn_wire_kind kind, int W, double S);

/* A 64-bit mix of a stream and two counters (for derived streams). */
uint64_t sdnn_stream_mix(uint64_t stream, uint64_t a, uint64_t b);

#endif
