/*
 * engine: the registry of engines (the only list of their names) and the
 * choice of engine=cpu|gpu|auto (see engine.h).
 */
#include "engine.h"
#include "bnfix.h"
#include "hooks.h"
#include "replicas.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sdnn_engine_ops *const registry[] = {
    &sdnn_engine_cpu,
    &sdnn_engine_gpu,
    NULL,
};

static char names[128];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void list_names(void)
{
    size_t used = 0;
    for (int i = 0; registry[i]; ++i) {
        int w = snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                         registry[i]->name);
        if (w < 0 || (size_t)w >= sizeof names - used) break;
        used += (size_t)w;
    }
}

const sdnn_engine_ops *const *sdnn_engine_list(void) { return registry; }

const sdnn_engine_ops *sdnn_engine_host(void) { return &sdnn_engine_cpu; }

const char *sdnn_engine_names(void)
{
    pthread_once(&names_once, list_names);
    return names;
}

const sdnn_engine_ops *sdnn_engine_find(const char *name)
{
    if (!name) return NULL;
    for (int i = 0; registry[i]; ++i)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

sdnn_status sdnn_engine_resolve(const char *name, int ndev, const sdnn_engine_ops **out,
                                char *why, size_t len)
{
    *out = NULL;
    if (why && len) why[0] = '\0';
    char reason[256] = "";
    if (name && strcmp(name, "auto") == 0) {
        const sdnn_engine_ops *gpu = sdnn_engine_find("gpu");
        const sdnn_engine_ops *cpu = sdnn_engine_find("cpu");
        if (gpu && gpu->available(ndev, reason, sizeof reason)) {
            *out = gpu;
            if (why) snprintf(why, len, "engine=auto: gpu (%d device%s)", ndev, ndev == 1 ? "" : "s");
        } else {
            *out = cpu;
            if (why) snprintf(why, len, "engine=auto: cpu (gpu: %s)", reason[0] ? reason : "unavailable");
        }
        return SDNN_OK;
    }
    const sdnn_engine_ops *e = sdnn_engine_find(name);
    if (!e)
        return SDNN_ERROR(SDNN_ERR_INVALID, "unknown engine '%s' (allowed: %s, auto)",
                          name ? name : "(null)", sdnn_engine_names());
    if (!e->available(ndev, reason, sizeof reason))
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "engine %s cannot run %d replica%s here: %s",
                          e->name, ndev, ndev == 1 ? "" : "s", reason[0] ? reason : "unavailable");
    *out = e;
    if (why) snprintf(why, len, "engine=%s", e->name);
    return SDNN_OK;
}

/* What engine e says about running n replicas on `devices` (NULL: 0..n-1). */
static int can_run(const sdnn_engine_ops *e, const int *devices, int n, char *why, size_t len)
{
    if (devices && e->available_on) return e->available_on(devices, n, why, len);
    return e->available(n, why, len);
}

/* "0,2,3" */
static void list_ids(const int *devices, int n, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int r = 0; r < n; ++r) {
        int w = snprintf(buf + at, len - at, "%s%d", r ? "," : "", devices ? devices[r] : r);
        if (w < 0 || (size_t)w >= len - at) break;
        at += (size_t)w;
    }
}

sdnn_status sdnn_engine_resolve_on(const char *name, const int *devices, int n,
                                   const sdnn_engine_ops **out, char *why, size_t len)
{
    if (!devices) return sdnn_engine_resolve(name, n, out, why, len);
    *out = NULL;
    if (why && len) why[0] = '\0';
    if (n < 1) return SDNN_ERROR(SDNN_ERR_INVALID, "an engine needs at least one replica");
    char reason[256] = "", ids[128];
    list_ids(devices, n, ids, sizeof ids);
    if (name && strcmp(name, "auto") == 0) {
        const sdnn_engine_ops *gpu = sdnn_engine_find("gpu");
        const sdnn_engine_ops *cpu = sdnn_engine_find("cpu");
        if (gpu && can_run(gpu, devices, n, reason, sizeof reason)) {
            *out = gpu;
            if (why) snprintf(why, len, "engine=auto: gpu (device%s %s)", n == 1 ? "" : "s", ids);
        } else {
            *out = cpu;
            if (why) snprintf(why, len, "engine=auto: cpu (gpu: %s)", reason[0] ? reason : "unavailable");
        }
        return SDNN_OK;
    }
    const sdnn_engine_ops *e = sdnn_engine_find(name);
    if (!e)
        return SDNN_ERROR(SDNN_ERR_INVALID, "unknown engine '%s' (allowed: %s, auto)",
                          name ? name : "(null)", sdnn_engine_names());
    if (!can_run(e, devices, n, reason, sizeof reason))
        return SDNN_ERROR(SDNN_ERR_UNSUPPORTED, "engine %s cannot run %d replica%s here: %s",
                          e->name, n, n == 1 ? "" : "s", reason[0] ? reason : "unavailable");
    *out = e;
    if (why) snprintf(why, len, "engine=%s", e->name);
    return SDNN_OK;
}

void sdnn_engine_describe_device(const sdnn_engine_ops *engine, int dev, char *buf, size_t len)
{
    if (!buf || !len) return;
    if (engine && engine->describe_device) engine->describe_device(dev, buf, len);
    else snprintf(buf, len, "device %d", dev);
}

/* A [cost], a [softmax] with its loss and a [logistic] read batch x inputs
 * values of the truth in their training forward: the network's truth,
 * which libdarknet sizes for its last layer (or the output of an earlier
 * truth=1 layer).  One whose input is larger reads past it (SIGSEGV, or a
 * loss of garbage): refused before any training, naming the layer. */
static sdnn_status check_truth_reads(const network *net)
{
    long truths = net->truths;
    for (int i = 0; i < net->n; ++i) {
        const layer *l = &net->layers[i];
        int reads = l->type == COST || l->type == LOGXENT || (l->type == SOFTMAX && !l->noloss);
        if (reads && l->inputs > truths)
            return SDNN_ERROR(SDNN_ERR_INVALID,
                              "layer %d ([%s]) reads %d truth values an image as its loss, but "
                              "the network's truth has %ld (sized for its last layer): a loss "
                              "layer must be the last one (or a [softmax] before its [cost]; "
                              "noloss=1 on a [softmax] that is not a loss)",
                              i, l->type == LOGXENT ? "logistic" : sdnn_layer_type_name(l->type),
                              l->inputs, truths);
        if (l->truth) truths = l->outputs;
    }
    return SDNN_OK;
}

sdnn_status sdnn_engine_create(const sdnn_engine_ops *ops, network **nets, int n,
                               const sdnn_engine_opts *o, sdnn_engine **out)
{
    *out = NULL;
    if (!ops || !nets || n < 1)
        return SDNN_ERROR(SDNN_ERR_INVALID, "an engine needs an engine and replicas");
    SDNN_CHECK(check_truth_reads(nets[0]));
    sdnn_engine *e = calloc(1, sizeof *e);
    if (!e) return SDNN_ERROR(SDNN_ERR_NOMEM, "no memory for the %s engine", ops->name);
    e->ops = ops;
    e->nets = nets;
    e->n = n;
    e->preload = 1;
    sdnn_engine_opts def = SDNN_ENGINE_OPTS_INIT;
    sdnn_status st = ops->create(e, o ? o : &def);
    if (st != SDNN_OK) {
        free(e);
        return st;
    }
    *out = e;
    return SDNN_OK;
}

void sdnn_engine_destroy(sdnn_engine *e)
{
    if (!e) return;
    e->ops->destroy(e);
    free(e);
}

int sdnn_engine_fixes_needed(const sdnn_engine_opts *o, const network *net)
{
    return sdnn_first_delta_needed(net) || (o->fix_1x1_delta && sdnn_fix_1x1_count(net) > 0) ||
           (o->fix_bn_delta && sdnn_bn_fix_count(net) > 0) ||
           (o->fix_region_delta && sdnn_fix_region_count(net) > 0);
}
