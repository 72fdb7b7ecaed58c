/*
 * collective: one rank's part of the compressed allreduce-mean (see
 * collective.h for the algorithm and why every rank ends bit-identical).
 */
#include "collective.h"
#include "splitmix.h"

#include <string.h>

uint64_t sdnn_stream_mix(uint64_t stream, uint64_t a, uint64_t b)
{
    return sdnn_splitmix64_mix(stream ^ (a * SDNN_SPLITMIX_GOLDEN) ^ (b * 0xc2b2ae3d27d4eb4full));
}

void sdnn_ring_chunk(size_t n, size_t align, int size, int chunk, size_t *lo, size_t *len)
{
    if (align < 1) align = 1;
    size_t units = (n + align - 1) / align;
    size_t per = (units + (size_t)size - 1) / (size_t)size * align;
    size_t a = (size_t)chunk * per;
    if (a > n) a = n;
    size_t b = a + per;
    if (b > n) b = n;
    *lo = a;
    *len = b - a;
}

static size_t round16(size_t x) { return (x + 15) & ~(size_t)15; }

size_t sdnn_coded_scratch_bytes(const sdnn_codec_ops *c, const sdnn_codec_params *p,
                                size_t n, int size)
{
    if (size < 1) size = 1;
    if (!c->dense) return (size_t)size * round16(c->encoded_size(p, n));
    size_t lo, maxlen;
    sdnn_ring_chunk(n, c->align(p), size, 0, &lo, &maxlen);
    return round16(maxlen * sizeof(float)) + 2 * round16(c->encoded_size(p, maxlen));
}

size_t sdnn_coded_wire_bytes(const sdnn_codec_ops *c, const sdnn_codec_params *p,
                             size_t n, int size)
{
    if (size <= 1) return 0;
    if (!c->dense) return (size_t)size * (size_t)(size - 1) * c->encoded_size(p, n);
    size_t total = 0;
    for (int k = 0; k < size; ++k) {
        size_t lo, len;
        sdnn_ring_chunk(n, c->align(p), size, k, &lo, &len);
        total += c->encoded_size(p, len);
    }
    return 2 * (size_t)(size - 1) * total;
}

double sdnn_wire_bytes(sdnn_wire_kind kind, int W, double S)
{
    if (W <= 1 || S <= 0) return 0;
    const double w = (double)W;
    switch (kind) {
    case SDNN_WIRE_ALLREDUCE: return 2.0 * (w - 1) / w * S;
    case SDNN_WIRE_REDUCE_SCATTER: return (w - 1) / w * S;
    case SDNN_WIRE_ALLGATHER: return (w - 1) * S;
    case SDNN_WIRE_BROADCAST: return (w - 1) / w * S;
    case SDNN_WIRE_CENTRAL: return 2.0 * (w - 1) / w * S;
    }
    return 0;
}

static int mod(int a, int m) { return ((a % m) + m) % m; }

static sdnn_status shift(sdnn_transport *t, const void *send, size_t slen, void *recv, size_t rlen)
{
    sdnn_status st = t->ops->shift(t, send, slen, recv, rlen);
    if (st == SDNN_OK) t->sent += slen;
    return st;
}

static sdnn_status dense_ring(sdnn_transport *t, const sdnn_codec_ops *c,
                              const sdnn_codec_params *p, uint64_t stream,
                              const float *in, float *out, size_t n, unsigned char *scratch)
{
    const int W = t->size, r = t->rank;
    const size_t align = c->align(p);
    size_t lo0, maxlen;
    sdnn_ring_chunk(n, align, W, 0, &lo0, &maxlen);
    float *acc = (float *)scratch;
    unsigned char *sbuf = scratch + round16(maxlen * sizeof(float));
    unsigned char *rbuf = sbuf + round16(c->encoded_size(p, maxlen));

    /* Reduce-scatter: at hop s this rank sends chunk r-s and receives r-s-1. */
    int own = mod(r + 1, W);
    {
        size_t lo, len;
        sdnn_ring_chunk(n, align, W, own, &lo, &len);
        if (W == 1) memcpy(acc, in + lo, len * sizeof(float));
    }
    for (int s = 0; s < W - 1; ++s) {
        int sc = mod(r - s, W), rc = mod(r - s - 1, W);
        size_t slo, slen, rlo, rlen;
        sdnn_ring_chunk(n, align, W, sc, &slo, &slen);
        sdnn_ring_chunk(n, align, W, rc, &rlo, &rlen);
        const float *src = s == 0 ? in + slo : acc;
        size_t sbytes = c->encode(p, src, slen, sbuf, sdnn_stream_mix(stream, (uint64_t)sc, (uint64_t)s));
        SDNN_CHECK(shift(t, sbuf, sbytes, rbuf, c->encoded_size(p, rlen)));
        c->decode_add(p, rbuf, rlen, in + rlo, acc);
    }

    /* The owner's mean, encoded once. */
    size_t olo, olen;
    sdnn_ring_chunk(n, align, W, own, &olo, &olen);
    const float inv = 1.0f / (float)W;
    for (size_t i = 0; i < olen; ++i) acc[i] *= inv;
    size_t obytes = c->encode(p, acc, olen, sbuf, sdnn_stream_mix(stream, (uint64_t)own, (uint64_t)W));
    c->decode(p, sbuf, olen, out + olo);

    /* All-gather: pass each encoded mean on unchanged. */
    size_t sbytes = obytes;
    for (int s = 0; s < W - 1; ++s) {
        int rc = mod(r - s, W);
        size_t rlo, rlen;
        sdnn_ring_chunk(n, align, W, rc, &rlo, &rlen);
        size_t rbytes = c->encoded_size(p, rlen);
        SDNN_CHECK(shift(t, sbuf, sbytes, rbuf, rbytes));
        c->decode(p, rbuf, rlen, out + rlo);
        unsigned char *tmp = sbuf;
        sbuf = rbuf;
        rbuf = tmp;
        sbytes = rbytes;
    }
    return SDNN_OK;
}

static sdnn_status sparse_allgather(sdnn_transport *t, const sdnn_codec_ops *c,
                                    const sdnn_codec_params *p, uint64_t stream,
                                    const float *in, float *out, size_t n,
                                    unsigned char *scratch)
{
    const int W = t->size, r = t->rank;
    const size_t enc = c->encoded_size(p, n), stride = round16(enc);
    size_t got = c->encode(p, in, n, scratch + (size_t)r * stride,
                           sdnn_stream_mix(stream, (uint64_t)r, 0));
    if (got != enc)
        return SDNN_ERROR(SDNN_ERR_INTERNAL, "codec %s wrote %zu bytes, declared %zu",
                          c->name, got, enc);
    for (int s = 0; s < W - 1; ++s) {
        int sc = mod(r - s, W), rc = mod(r - s - 1, W);
        SDNN_CHECK(shift(t, scratch + (size_t)sc * stride, enc, scratch + (size_t)rc * stride, enc));
    }
    memset(out, 0, n * sizeof(float));
    for (int q = 0; q < W; ++q) c->accumulate(p, scratch + (size_t)q * stride, n, out);
    const float inv = 1.0f / (float)W;
    for (size_t i = 0; i < n; ++i) out[i] *= inv;
    return SDNN_OK;
}

sdnn_status sdnn_coded_allreduce_mean(sdnn_transport *t, const sdnn_codec_ops *c,
                                      const sdnn_codec_params *p, uint64_t stream,
                                      const float *in, float *out, size_t n,
                                      void *scratch)
{
    if (!t || !c || t->size < 1 || t->rank < 0 || t->rank >= t->size)
        return SDNN_ERROR(SDNN_ERR_INVALID, "coded allreduce: bad transport or codec");
    if (n == 0) return SDNN_OK;
    if (c->dense) return dense_ring(t, c, p, stream, in, out, n, scratch);
    return sparse_allgather(t, c, p, stream, in, out, n, scratch);
}
