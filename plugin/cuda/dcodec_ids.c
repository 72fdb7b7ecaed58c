/*
 * dcodec_ids: the device codec ids of dev.h mapped onto the host codec
 * registry (codec.h), used by codec.cu in both builds (nvcc, and the
 * host compiler under GPU=sim): host C, no kernels.
 */
#include "dev.h"

#include <string.h>

static const sdnn_codec_ops *const host_codecs[SDNN_DCODEC_COUNT] = {
    &sdnn_codec_none, &sdnn_codec_fp16, &sdnn_codec_bf16, &sdnn_codec_int8, &sdnn_codec_topk};

int sdnn_dcodec_of(const sdnn_codec_ops *c)
{
    for (int i = 0; i < SDNN_DCODEC_COUNT; ++i)
        if (c == host_codecs[i] || (c && strcmp(c->name, host_codecs[i]->name) == 0)) return i;
    return -1;
}

const sdnn_codec_ops *sdnn_dcodec_host(int codec)
{
    return codec >= 0 && codec < SDNN_DCODEC_COUNT ? host_codecs[codec] : NULL;
}

size_t sdnn_dcodec_size(int codec, const sdnn_codec_params *p, size_t n)
{
    return host_codecs[codec]->encoded_size(p, n);
}
