/*
 * cfgkeys: see cfgkeys.h.  The key lists were read off Debian's libdarknet
 * (git 61c9d02e, src/parser.c: parse_net_options, each parse_<layer>, and
 * the keys parse_network_cfg reads on every layer) and the maintained
 * fork's src-lib/darknet_cfg.cpp (hank-ai/darknet, 2026).
 */
#include "cfgkeys.h"

#include <stdlib.h>
#include <string.h>

typedef struct section_keys {
    const char *type;          /* canonical */
    const char *const *aliases; /* other spellings libdarknet accepts */
    const char *const *read;   /* keys libdarknet reads */
    const char *const *noop;   /* the fork's keys that change nothing here */
} section_keys;

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NONE ((const char *const[]){NULL})

/* Read by parse_network_cfg on every section after [net]. */
static const char *const g_layer_common[] = {"truth",    "onlyforward", "stopbackward",
                                             "dontsave", "dontload",    "numload",
                                             "dontloadscales", "learning_rate", "smooth",
                                             NULL};

/* noop: keys libdarknet ignores that change nothing in a run here.  Mostly
 * the maintained fork's: GPU memory and CUDA graphs, NaN recovery of its GPU
 * build, the chart, a receptive-field print-out, tracking at detection time,
 * and keys only read together with a key refused here (policy=sgdr, track=1,
 * contrastive=1, sequential_subdivisions, maxpool_depth=1, sway=1). */
static const section_keys g_sections[] = {
    {"net", L("network"),
     L("batch", "learning_rate", "momentum", "decay", "subdivisions", "time_steps", "notruth",
       "random", "adam", "B1", "B2", "eps", "height", "width", "channels", "inputs", "max_crop",
       "min_crop", "max_ratio", "min_ratio", "center", "clip", "angle", "aspect", "saturation",
       "exposure", "hue", "policy", "burn_in", "power", "step", "scale", "steps", "scales",
       "gamma", "max_batches"),
     L("try_fix_nan", "weights_reject_freq", "use_cuda_graph", "optimized_memory",
       "workspace_size_limit_MB", "attention", "max_chart_loss", "show_receptive_field",
       "contrastive_jit_flip", "contrastive_color", "seq_scales", "learning_rate_min",
       "sgdr_cycle", "sgdr_mult", "augment_speed", "equidistant_point",
       /* Debian's own writing.cfg: a counter libdarknet keeps in the weights. */
       "seen")},
    {"convolutional", L("conv"),
     L("filters", "size", "stride", "pad", "padding", "groups", "activation", "batch_normalize",
       "binary", "xnor", "flipped", "dot"),
     /* CUDA streams; angle= is read only with sway/rotate/stretch (refused). */
     L("stream", "wait_stream", "angle")},
    {"deconvolutional", L("deconv"),
     L("filters", "size", "stride", "activation", "batch_normalize", "pad", "padding"), NONE},
    {"local", NONE, L("filters", "size", "stride", "pad", "activation"), NONE},
    {"connected", L("conn"), L("output", "activation", "batch_normalize"), NONE},
    /* out_channels= is read only with maxpool_depth=1 (refused). */
    {"maxpool", L("max"), L("stride", "size", "padding"), L("out_channels")},
    {"avgpool", L("avg"), NONE, NONE},
    {"route", NONE, L("layers"), L("stream", "wait_stream")},
    {"shortcut", NONE, L("from", "activation", "alpha", "beta"), NONE},
    {"upsample", NONE, L("stride", "scale"), NONE},
    /* Tracking and drawing at detection time. */
    {"yolo", NONE,
     L("classes", "num", "mask", "max", "jitter", "ignore_thresh", "truth_thresh", "random",
       "map", "anchors"),
     L("track_history_size", "sim_thresh", "dets_for_track", "dets_for_show",
       "track_ciou_norm")},
    {"region", NONE,
     L("coords", "classes", "num", "log", "sqrt", "softmax", "background", "max", "jitter",
       "rescore", "thresh", "classfix", "absolute", "random", "coord_scale", "object_scale",
       "noobject_scale", "mask_scale", "class_scale", "bias_match", "tree", "map", "anchors"),
     NONE},
    {"detection", NONE,
     L("coords", "classes", "rescore", "num", "side", "softmax", "sqrt", "max", "coord_scale",
       "forced", "object_scale", "noobject_scale", "class_scale", "jitter", "random", "reorg"),
     NONE},
    {"softmax", L("soft"), L("groups", "temperature", "tree", "spatial", "noloss"), NONE},
    {"dropout", NONE, L("probability"), NONE},
    {"cost", NONE, L("type", "scale", "ratio", "noobj", "thresh"), NONE},
    {"crop", NONE,
     L("crop_height", "crop_width", "flip", "angle", "saturation", "exposure", "noadjust",
       "shift"),
     NONE},
    {"reorg", NONE, L("stride", "reverse", "flatten", "extra"), NONE},
    {"activation", NONE, L("activation"), NONE},
    {"logistic", NONE, NONE, NONE},
    {"l2norm", NONE, NONE, NONE},
    {"batchnorm", NONE, NONE, NONE},
    {"normalization", L("lrn"), L("alpha", "beta", "kappa", "size"), NONE},
    {"rnn", NONE, L("output", "activation", "batch_normalize", "shortcut"), NONE},
    {"gru", NONE, L("output", "batch_normalize", "tanh"), NONE},
    {"lstm", NONE, L("output", "batch_normalize"), NONE},
    {"crnn", NONE,
     L("output_filters", "hidden_filters", "activation", "batch_normalize", "shortcut"), NONE},
    {"iseg", NONE, L("classes", "ids"), NONE},
    {NULL, NULL, NULL, NULL}};

static int in_list(const char *const *list, const char *s)
{
    for (; list && *list; ++list)
        if (strcmp(*list, s) == 0) return 1;
    return 0;
}

static const section_keys *section(const char *type)
{
    for (const section_keys *s = g_sections; s->type; ++s)
        if (strcmp(s->type, type) == 0 || in_list(s->aliases, type)) return s;
    return NULL;
}

const char *sdnn_cfg_section_canonical(const char *type)
{
    const section_keys *s = type ? section(type) : NULL;
    return s ? s->type : NULL;
}

int sdnn_cfg_key_read(const char *type, const char *key)
{
    const section_keys *s = section(type);
    if (!s) return 0;
    if (in_list(s->read, key)) return 1;
    return strcmp(s->type, "net") != 0 && in_list(g_layer_common, key);
}

int sdnn_cfg_key_fork_noop(const char *type, const char *key)
{
    const section_keys *s = section(type);
    return s && in_list(s->noop, key);
}

static void append(const char *const *list, const char **names, size_t max, size_t *n)
{
    for (; list && *list && *n < max; ++list) names[(*n)++] = *list;
}

void sdnn_cfg_key_names(const char *type, const char **names, size_t max, size_t *n)
{
    const section_keys *s = section(type);
    if (!s) return;
    append(s->read, names, max, n);
    if (strcmp(s->type, "net") != 0) append(g_layer_common, names, max, n);
    append(s->noop, names, max, n);
}

void sdnn_cfg_section_names(const char **names, size_t max, size_t *n, int aliases)
{
    for (const section_keys *s = g_sections; s->type && *n < max; ++s) {
        names[(*n)++] = s->type;
        if (aliases) append(s->aliases, names, max, n);
    }
}

/* Optimal string alignment distance: Levenshtein plus the swap of two
 * neighbouring letters (mosiac -> mosaic is 1).  Words longer than 63
 * bytes are compared on their first 63. */
static int osa_distance(const char *a, const char *b)
{
    enum { M = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la > M - 1) la = M - 1;
    if (lb > M - 1) lb = M - 1;
    static _Thread_local int d[M][M];
    for (size_t i = 0; i <= la; ++i) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; ++j) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; ++i)
        for (size_t j = 1; j <= lb; ++j) {
            int cost = a[i - 1] != b[j - 1];
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

const char *sdnn_nearest_name(const char *word, const char *const *names, size_t n, int *dist)
{
    const char *best = NULL;
    int bd = 0;
    for (size_t i = 0; i < n; ++i) {
        int dd = osa_distance(word, names[i]);
        if (!best || dd < bd) {
            best = names[i];
            bd = dd;
        }
    }
    if (dist) *dist = bd;
    return best;
}
