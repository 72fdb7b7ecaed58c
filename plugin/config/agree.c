/*
 * agree: see agree.h.  The texts travel as floats (one character each,
 * exact in fp32) through the backend's broadcast; a flag per rank is then
 * averaged so that every rank, rank 0 included, knows whether any differs.
 */
#include "agree.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replicas.h"

enum { F_NET, F_RATE, F_MODE, F_CODEC, F_BUCKETS, F_MAX_BATCHES, F_REPLICAS, F_WEIGHTS, NF };
#define TEXT 384

static const char *const g_names[NF] = {
    "the network", "the learning rate", "the mode", "the codec", "the buckets",
    "max_batches", "the replicas per process (-gpus)", "the weights' iteration"};

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void describe(network *const *nets, int n, const sdnn_config *c, char out[NF][TEXT])
{
    network *net = nets[0];
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < net->n; ++i) {
        const layer *l = &net->layers[i];
        int shape[6] = {(int)l->type, l->outputs, l->inputs, l->n, l->size, l->stride};
        h = fnv(h, shape, sizeof shape);
    }
    snprintf(out[F_NET], TEXT, "%d layers, %zu parameters, input %dx%dx%d, batch %d x %d, shape %016llx",
             net->n, sdnn_network_param_count(net), net->w, net->h, net->c, net->batch,
             net->subdivisions, (unsigned long long)h);
    snprintf(out[F_RATE], TEXT, "learning_rate=%g momentum=%g decay=%g policy=%d burn_in=%d",
             net->learning_rate, net->momentum, net->decay, (int)net->policy, net->burn_in);
    /* the [scalednn] keys every process must share: the key table's groups */
    sdnn_config_describe_group(c, SDNN_KEYS_MODE, out[F_MODE], TEXT);
    sdnn_config_describe_group(c, SDNN_KEYS_CODEC, out[F_CODEC], TEXT);
    sdnn_config_describe_group(c, SDNN_KEYS_BUCKETS, out[F_BUCKETS], TEXT);
    snprintf(out[F_MAX_BATCHES], TEXT, "max_batches=%d", net->max_batches);
    snprintf(out[F_REPLICAS], TEXT, "%d replica%s", n, n == 1 ? "" : "s");
    size_t per = (size_t)net->batch * (size_t)net->subdivisions;
    snprintf(out[F_WEIGHTS], TEXT, "iteration %zu", per ? *net->seen / per : 0);
}

sdnn_status sdnn_agree_check(sdnn_comm *comm, network *const *nets, int n, const sdnn_config *cfg)
{
    if (!comm || comm->size <= 1) return SDNN_OK;
    char mine[NF][TEXT];
    memset(mine, 0, sizeof mine);
    describe(nets, n, cfg, mine);
    float *buf = malloc(sizeof(float) * NF * TEXT);
    if (!buf) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory to compare the settings");
    for (int f = 0; f < NF; ++f)
        for (int k = 0; k < TEXT; ++k) buf[f * TEXT + k] = (float)(unsigned char)mine[f][k];
    sdnn_status st = sdnn_comm_broadcast(comm, buf, (size_t)NF * TEXT);
    if (st != SDNN_OK) {
        free(buf);
        return st;
    }
    char theirs[NF][TEXT];
    for (int f = 0; f < NF; ++f) {
        for (int k = 0; k < TEXT; ++k) theirs[f][k] = (char)(unsigned char)buf[f * TEXT + k];
        theirs[f][TEXT - 1] = '\0';
    }
    free(buf);
    char msg[1600] = "";
    size_t used = 0;
    int differ = 0;
    for (int f = 0; f < NF; ++f) {
        if (strcmp(mine[f], theirs[f]) == 0) continue;
        ++differ;
        int w = snprintf(msg + used, sizeof msg - used, "%s%s: %s here, %s on rank 0",
                         differ > 1 ? "; " : "", g_names[f], mine[f], theirs[f]);
        if (w > 0) used += (size_t)w < sizeof msg - used ? (size_t)w : sizeof msg - used - 1;
    }
    float flag = differ ? 1.f : 0.f, mean = 0.f;
    const float *in[1] = {&flag};
    st = sdnn_comm_allreduce_mean(comm, in, 1, &mean, 1, NULL);
    if (st != SDNN_OK) return st;
    if (differ)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "rank %d: its settings differ from rank 0's (every process must train "
                          "the same cfg with the same flags): %s",
                          comm->rank, msg);
    if (mean > 0.f)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "rank %d: %.0f of %d processes have settings that differ from rank 0's "
                          "(their messages name them); every process must train the same cfg "
                          "with the same flags",
                          comm->rank, (double)mean * comm->size, comm->size);
    return SDNN_OK;
}
