/*
 * cfgcheck: see cfgcheck.h.  Lines are classified as Darknet's read_cfg
 * classifies them after its strip() (which removes spaces, tabs and the
 * newline only): empty, '#' or ';' comment, '[' section header, otherwise
 * key=value.  The checker keeps a table of the sections and their keys,
 * then walks the layers with the channel count each one gives, which is
 * what a [yolo]/[region] head is asserted against inside libdarknet.
 */
#include "cfgcheck.h"
#include "cfgkeys.h"
#include "readable.h"

#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHOWN 120 /* longest key or value quoted in a message */
#define DIM_MAX 65536L

/* The maintained fork's layer types that Debian's libdarknet does not
 * know (it would crash on them); none is built here. */
static const char *const g_fork_types[] = {"scale_channels", "sam", "Gaussian_yolo",
                                           "local_avg", "local_avgpool", "reorg3d",
                                           "contrastive", "empty", "silence", "blank", NULL};

typedef struct kv {
    char *key;
    char *val;
    int line;
} kv;

typedef struct sec {
    char type[32]; /* without brackets, "" for an over-long name */
    int line;
    int kv0, nkv;  /* its keys: kvs[kv0 .. kv0+nkv) */
} sec;

typedef struct checker {
    const char *name;
    double max_floats; /* largest layer output allowed, batch included */
    long batch;
    char *buf;     /* the text, cut into lines in place */
    kv *kvs;
    int nkv, cap_kv;
    sec *secs;
    int nsec, cap_sec;
    long *chan_out; /* NULL, or [chan_max]: each layer's output channels */
    int chan_max, nlayers_out;
    int grouped;    /* a grouped route was seen */
    int quiet;      /* no notes on stderr (a second reading of the same text) */
} checker;

size_t sdnn_cfg_normalize_eol(char *text)
{
    if (!text) return 0;
    size_t changed = 0;
    char *w = text;
    for (const char *r = text; *r; ++r) {
        if (*r == '\r' && (r[1] == '\n' || r[1] == '\0')) {
            ++changed;
            continue;
        }
        *w++ = *r;
    }
    *w = '\0';
    return changed;
}

/* Darknet's strip(): drop ' ', '\t' and '\n'. */
static void dk_strip(char *s)
{
    char *w = s;
    for (char *r = s; *r; ++r)
        if (*r != ' ' && *r != '\t' && *r != '\n') *w++ = *r;
    *w = '\0';
}

static int grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

static int is_type(const char *t, const char *a, const char *b)
{
    return strcmp(t, a) == 0 || (b && strcmp(t, b) == 0);
}

/* ---- messages ------------------------------------------------------------ */

static sdnn_status key_error(const checker *c, const sec *s, const kv *k, const char *what)
{
    return SDNN_ERROR(SDNN_ERR_INVALID, "%s:%d: [%s] %.*s=%.*s: %s", c->name, k->line, s->type,
                      SHOWN, k->key, SHOWN, k->val, what);
}

static sdnn_status sec_error(const checker *c, const sec *s, const char *what)
{
    return SDNN_ERROR(SDNN_ERR_INVALID, "%s:%d: [%s]: %s", c->name, s->line, s->type, what);
}

/* "net, convolutional, ..., scalednn": the section types, from cfgkeys. */
static const char *type_names(char *buf, size_t cap)
{
    const char *names[64];
    size_t n = 0, o = 0;
    sdnn_cfg_section_names(names, 64, &n, 0);
    buf[0] = '\0';
    for (size_t i = 0; i < n && o < cap; ++i)
        o += (size_t)snprintf(buf + o, cap - o, "%s, ", names[i]);
    if (o < cap) snprintf(buf + o, cap - o, "scalednn");
    return buf;
}

/* ---- the table ------------------------------------------------------------ */

static const kv *find(const checker *c, const sec *s, const char *key)
{
    for (int i = 0; i < s->nkv; ++i)
        if (strcmp(c->kvs[s->kv0 + i].key, key) == 0) return &c->kvs[s->kv0 + i];
    return NULL;
}

static int parse_long(const char *v, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || errno == ERANGE) return 0;
    *out = x;
    return 1;
}

/* Whether a cfg value means `want`: the same text, or the same finite
 * number written another way (1.0 for 1), as libdarknet's atof reads it. */
static int same_value(const char *v, const char *want)
{
    if (strcmp(v, want) == 0) return 1;
    char *e1, *e2;
    const double a = strtod(v, &e1), b = strtod(want, &e2);
    return e1 != v && *e1 == '\0' && e2 != want && *e2 == '\0' && isfinite(a) && a == b;
}

/* An integer key in [lo, hi]; *out keeps `def` when the key is absent. */
static sdnn_status int_key(const checker *c, const sec *s, const char *key, long def, long lo,
                           long hi, long *out, const kv **where)
{
    const kv *k = find(c, s, key);
    *out = def;
    if (where) *where = k;
    if (!k) return SDNN_OK;
    long v;
    char what[160];
    if (!parse_long(k->val, &v) || v < lo || v > hi) {
        snprintf(what, sizeof what, "expected an integer >= %ld and <= %ld", lo, hi);
        return key_error(c, s, k, what);
    }
    *out = v;
    return SDNN_OK;
}

/* A comma-separated list of integers; its length in *n (0 when absent). */
static sdnn_status int_list(const checker *c, const sec *s, const kv *k, long *vals, int max,
                            int *n)
{
    *n = 0;
    if (!k) return SDNN_OK;
    const char *p = k->val;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno == ERANGE)
            return key_error(c, s, k, "expected a comma-separated list of integers");
        if (*n >= max) return key_error(c, s, k, "too many entries in the list");
        vals[(*n)++] = v;
        if (*end == '\0') return SDNN_OK;
        if (*end != ',') return key_error(c, s, k, "expected a comma-separated list of integers");
        p = end + 1;
    }
}

/* Entries of a comma-separated list, as Darknet counts them. */
static int count_entries(const char *v)
{
    int n = 1;
    for (; *v; ++v) n += *v == ',';
    return n;
}

/* ---- reading -------------------------------------------------------------- */

static sdnn_status read_lines(checker *c)
{
    int lineno = 0;
    int in_ours = 0; /* inside [scalednn]: config.c checks it */
    char *p = c->buf;
    while (*p) {
        char *nl = strchr(p, '\n');
        char *next = nl ? nl + 1 : p + strlen(p);
        if (nl) *nl = '\0';
        ++lineno;
        for (const unsigned char *q = (const unsigned char *)p; *q; ++q)
            if ((*q < 0x20 && *q != '\t') || *q == 0x7f)
                return SDNN_ERROR(SDNN_ERR_INVALID,
                                  "%s:%d: byte 0x%02x at column %d: a cfg is text (a binary "
                                  "file, or a stray control character?)",
                                  c->name, lineno, *q, (int)(q - (const unsigned char *)p) + 1);
        dk_strip(p);
        if (p[0] == '\0' || p[0] == '#' || p[0] == ';') {
            p = next;
            continue;
        }
        if (p[0] == '[') {
            size_t len = strlen(p);
            char types[600];
            if (len < 3 || p[len - 1] != ']')
                return SDNN_ERROR(SDNN_ERR_INVALID,
                                  "%s:%d: %.*s: a section header is [name] (sections: %s)",
                                  c->name, lineno, SHOWN, p, type_names(types, sizeof types));
            p[len - 1] = '\0';
            in_ours = strcmp(p + 1, "scalednn") == 0;
            if (!in_ours) {
                if (grow((void **)&c->secs, &c->cap_sec, c->nsec + 1, sizeof(sec)))
                    return SDNN_ERROR(SDNN_ERR_NOMEM, "%s: no memory to check the cfg", c->name);
                sec *s = &c->secs[c->nsec++];
                snprintf(s->type, sizeof s->type, "%s", strlen(p + 1) < sizeof s->type ? p + 1 : "");
                s->line = lineno;
                s->kv0 = c->nkv;
                s->nkv = 0;
                for (int t = 0; g_fork_types[t]; ++t)
                    if (strcmp(p + 1, g_fork_types[t]) == 0)
                        return SDNN_ERROR(SDNN_ERR_INVALID,
                                          "%s:%d: [%s]: a layer type of the maintained Darknet "
                                          "fork, not built here (libdarknet does not know it); "
                                          "sections: %s",
                                          c->name, lineno, p + 1, type_names(types, sizeof types));
                if (!sdnn_cfg_section_canonical(p + 1)) {
                    const char *names[64];
                    size_t n = 0;
                    sdnn_cfg_section_names(names, 64, &n, 1);
                    if (n < 64) names[n++] = "scalednn";
                    return SDNN_ERROR(SDNN_ERR_INVALID,
                                      "%s:%d: [%.*s]: unknown section type; nearest known "
                                      "section: [%s] (sections: %s)",
                                      c->name, lineno, SHOWN, p + 1,
                                      sdnn_nearest_name(p + 1, names, n, NULL),
                                      type_names(types, sizeof types));
                }
            }
            p = next;
            continue;
        }
        if (in_ours) {
            p = next;
            continue;
        }
        char *eq = strchr(p, '=');
        if (c->nsec == 0)
            return SDNN_ERROR(SDNN_ERR_INVALID,
                              "%s:%d: %.*s: a key before the first section (a cfg starts "
                              "with [net])",
                              c->name, lineno, SHOWN, p);
        sec *s = &c->secs[c->nsec - 1];
        if (!eq || eq == p || eq[1] == '\0')
            return SDNN_ERROR(SDNN_ERR_INVALID, "%s:%d: [%s] %.*s: expected key=value", c->name,
                              lineno, s->type, SHOWN, p);
        *eq = '\0';
        /* A repeated key is not an error: Debian's own cfgs (yolo9000,
         * yolov3-openimages) repeat batch=; Darknet uses the first. */
        if (grow((void **)&c->kvs, &c->cap_kv, c->nkv + 1, sizeof(kv)))
            return SDNN_ERROR(SDNN_ERR_NOMEM, "%s: no memory to check the cfg", c->name);
        c->kvs[c->nkv++] = (kv){p, eq + 1, lineno};
        s->nkv++;
        p = next;
    }
    return SDNN_OK;
}

/* ---- the maintained fork's dialect ----------------------------------------- */

/* The activations Debian's libdarknet knows (get_activation); any other
 * name it turns into relu with only a warning, so the network would
 * silently differ. */
static const char *const g_acts[] = {"logistic", "loggy", "relu", "elu", "selu", "relie",
                                     "plse", "hardtan", "lhtan", "linear", "ramp", "leaky",
                                     "tanh", "stair", NULL};
#define ACT_NAMES "logistic, loggy, relu, elu, selu, relie, plse, hardtan, lhtan, linear, " \
                  "ramp, leaky, tanh, stair"

/* Keys of the maintained fork (hank-ai/darknet) that Debian's libdarknet
 * does not parse: it would ignore them and build or train a different
 * network.  Each is refused by name with the reason, unless its value is
 * the one that leaves the result as libdarknet computes it (`neutral`,
 * NULL: none).  `section` NULL: any section. */
typedef struct dialect_key {
    const char *section;
    const char *key;
    const char *neutral;
    const char *why;
} dialect_key;

#define NOT_YET "is the maintained Darknet fork's and not built here yet"
static const dialect_key g_dialect[] = {
    {"yolo", "counters_per_class", NULL, "class-balanced loss weights " NOT_YET},
    {"yolo", "focal_loss", "0", "the focal class loss " NOT_YET},
    {"yolo", "delta_normalizer", "1", "the scaled delta of the fork's GPU build " NOT_YET},
    {"yolo", "embedding_layer", NULL, "the tracking embeddings " NOT_YET},
    {"net", "ema_alpha", NULL, "the exponential moving average of the weights " NOT_YET},
    {"net", "cutmix", "0", "cutmix augmentation " NOT_YET},
    {"net", "mixup", "0", "mixup augmentation " NOT_YET},
    {"net", "blur", "0", "blur augmentation " NOT_YET},
    {"net", "gaussian_noise", "0", "noise augmentation " NOT_YET},
    {"net", "adversarial_lr", "0", "adversarial augmentation " NOT_YET},
    {"net", "label_smooth_eps", "0", "label smoothing " NOT_YET},
    {"net", "dynamic_minibatch", "0", "the batch that grows with random resize " NOT_YET},
    {"net", "contrastive", "0", "contrastive training " NOT_YET},
    {"net", "sequential_subdivisions", NULL, "growing subdivisions " NOT_YET},
    {"net", "loss_scale", "1", "mixed-precision loss scaling " NOT_YET},
    {"convolutional", "antialiasing", "0", "anti-aliased striding " NOT_YET},
    {"convolutional", "assisted_excitation", "0", "assisted excitation " NOT_YET},
    {"convolutional", "coordconv", "0", "coordinate channels " NOT_YET},
    {"convolutional", "share_index", NULL, "weights shared with another layer " NOT_YET},
    {"convolutional", "deform", "0", "deformable convolution " NOT_YET},
    {"maxpool", "maxpool_depth", "0", "pooling across channels " NOT_YET},
    {"maxpool", "antialiasing", "0", "anti-aliased pooling " NOT_YET},
    {"shortcut", "weights_type", "none", "a weighted shortcut " NOT_YET},
    {"shortcut", "weights_normalization", "none", "a weighted shortcut " NOT_YET},
    {"net", "track", "0", "sequential batches for tracking " NOT_YET},
    {"net", "resize_step", "32", "a random-resize step other than 32 pixels " NOT_YET},
    {"net", "badlabels_rejection_percentage", "0", "the rejection of bad labels " NOT_YET},
    {"net", "num_sigmas_reject_badlabels", "0", "the rejection of bad labels " NOT_YET},
    {"convolutional", "cbn", "0", "cross-iteration batch normalisation " NOT_YET},
    {"convolutional", "bin_output", "0", "binary outputs " NOT_YET},
    {"convolutional", "sway", "0", "rotated weight sharing " NOT_YET},
    {"convolutional", "rotate", "0", "rotated weight sharing " NOT_YET},
    {"convolutional", "stretch", "0", "stretched weight sharing " NOT_YET},
    {"convolutional", "stretch_sway", "0", "stretched weight sharing " NOT_YET},
    {"convolutional", "grad_centr", "0", "gradient centralisation " NOT_YET},
    {"convolutional", "reverse", "0", "reversed weight sharing " NOT_YET},
    {"maxpool", "maxpool_zero_nonmax", "0", "zeroed non-maxima " NOT_YET},
    {"region", "focal_loss", "0", "the focal class loss " NOT_YET},
    {"region", "resize", "1", "the box resize of random resizing " NOT_YET},
    {"rnn", "logistic", NULL, "the fork's recurrent layer " NOT_YET},
    {"crnn", "output", NULL, "the fork's recurrent layer (libdarknet reads output_filters) " NOT_YET},
    {"crnn", "hidden", NULL, "the fork's recurrent layer (libdarknet reads hidden_filters) " NOT_YET},
    {"crnn", "size", NULL, "the fork's recurrent layer " NOT_YET},
    {"crnn", "stride", NULL, "the fork's recurrent layer " NOT_YET},
    {"crnn", "dilation", NULL, "the fork's recurrent layer " NOT_YET},
    {"crnn", "pad", NULL, "the fork's recurrent layer " NOT_YET},
    {"crnn", "padding", NULL, "the fork's recurrent layer " NOT_YET},
    {"crnn", "groups", NULL, "the fork's recurrent layer " NOT_YET},
    {"crnn", "xnor", NULL, "the fork's recurrent layer " NOT_YET},
    /* Any layer (NULL), except where libdarknet reads the key ([net] clip=). */
    {NULL, "clip", "0", "clipping " NOT_YET},
    {NULL, "dont_update", "0", "frozen layers " NOT_YET},
    {NULL, "burnin_update", "0", "layers updated only during burn-in " NOT_YET},
    {NULL, "train_only_bn", "0", "training only the batch-norm layers " NOT_YET},
    {NULL, NULL, NULL, NULL}};

/* The fork's [yolo] keys built here (plugin/darknet/yolo_dialect.c): their
 * values are checked.  names: the allowed words (NULL: a number in
 * [lo, hi]; integer: whole numbers only). */
typedef struct yolo_key {
    const char *key;
    const char *const *names;
    double lo, hi;
    int integer;
} yolo_key;

static const char *const g_iou_losses[] = {"mse", "iou", "giou", "diou", "ciou", NULL};
static const char *const g_iou_kinds[] = {"iou", "giou", "diou", "ciou", NULL};
static const char *const g_nms_kinds[] = {"default", "greedynms", "diounms", NULL};
static const yolo_key g_yolo_keys[] = {
    {"scale_x_y", NULL, 1, 4, 0},          {"iou_normalizer", NULL, 0, 100, 0},
    {"cls_normalizer", NULL, 0, 100, 0},   {"obj_normalizer", NULL, 0, 100, 0},
    {"max_delta", NULL, 1e-6, 1e30, 0},    {"iou_thresh", NULL, 0, 1, 0},
    {"label_smooth_eps", NULL, 0, 1, 0},   {"beta_nms", NULL, 0.01, 10, 0},
    {"new_coords", NULL, 0, 1, 1},         {"objectness_smooth", NULL, 0, 1, 1},
    {"iou_loss", g_iou_losses, 0, 0, 0},   {"iou_thresh_kind", g_iou_kinds, 0, 0, 0},
    {"nms_kind", g_nms_kinds, 0, 0, 0},    {"resize", NULL, 0.01, 100, 0},
    {NULL, NULL, 0, 0, 0}};

/* The fork's [net] augmentation keys built by plugin/data/batch.c (the
 * project's detection batch builder): 0 or 1 each. */
static const char *const g_net_aug_keys[] = {"mosaic", "mosaic_bound", "letter_box", "flip",
                                             NULL};

/* A built [yolo] key's value: NULL when allowed, else what is allowed. */
static const char *yolo_value(const yolo_key *y, const char *v, char *what, size_t cap)
{
    if (y->names) {
        for (int i = 0; y->names[i]; ++i)
            if (strcmp(v, y->names[i]) == 0) return NULL;
        size_t o = (size_t)snprintf(what, cap, "expected one of");
        for (int i = 0; y->names[i] && o < cap; ++i)
            o += (size_t)snprintf(what + o, cap - o, "%s %s", i ? "," : "", y->names[i]);
        return what;
    }
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    int ok = end != v && *end == '\0' && errno != ERANGE && x >= y->lo && x <= y->hi &&
             (!y->integer || x == (double)(long)x);
    if (ok) return NULL;
    if (y->integer)
        snprintf(what, cap, "expected %g or %g", y->lo, y->hi);
    else
        snprintf(what, cap, "expected a number >= %g and <= %g", y->lo, y->hi);
    return what;
}

static const char *canonical(const char *t)
{
    const char *c = sdnn_cfg_section_canonical(t);
    return c ? c : t;
}

/* A g_dialect entry for `key` in a section of type t (canonical). */
static const dialect_key *dialect_entry(const char *t, const char *key)
{
    for (int d = 0; g_dialect[d].key; ++d) {
        const dialect_key *dk = &g_dialect[d];
        if (strcmp(key, dk->key) != 0) continue;
        if (dk->section ? strcmp(t, dk->section) != 0 : sdnn_cfg_key_read(t, key)) continue;
        return dk;
    }
    return NULL;
}

/* The fork's keys built here for a section of type t (canonical): the
 * [yolo] head keys, the batch builder's [net] switches, the grouped route,
 * the per-axis strides and dilation (their values are checked above). */
static void built_keys(const char *t, const char **names, size_t max, size_t *n)
{
    if (strcmp(t, "yolo") == 0)
        for (int y = 0; g_yolo_keys[y].key && *n < max; ++y) names[(*n)++] = g_yolo_keys[y].key;
    if (strcmp(t, "net") == 0)
        for (int a = 0; g_net_aug_keys[a] && *n < max; ++a) names[(*n)++] = g_net_aug_keys[a];
    static const char *const route[] = {"groups", "group_id", NULL};
    static const char *const conv[] = {"stride_x", "stride_y", "dilation", NULL};
    static const char *const pool[] = {"stride_x", "stride_y", NULL};
    static const char *const rnn[] = {"hidden", NULL};
    const char *const *extra = strcmp(t, "route") == 0           ? route
                               : strcmp(t, "convolutional") == 0 ? conv
                               : strcmp(t, "maxpool") == 0       ? pool
                               : strcmp(t, "rnn") == 0           ? rnn
                                                                 : NULL;
    for (; extra && *extra && *n < max; ++extra) names[(*n)++] = *extra;
}

/* Every key that means something in a section of type t: read by
 * libdarknet, built here, or the fork's (refused or not). */
static size_t known_keys(const char *t, const char **names, size_t max)
{
    size_t n = 0;
    sdnn_cfg_key_names(t, names, max, &n);
    built_keys(t, names, max, &n);
    for (int d = 0; g_dialect[d].key && n < max; ++d)
        if (dialect_entry(t, g_dialect[d].key) == &g_dialect[d]) names[n++] = g_dialect[d].key;
    return n;
}

/* The fork's keys seen that change nothing here: each named once. */
typedef struct noop_seen {
    const kv *first[32];
    const sec *where[32];
    int n, more;
} noop_seen;

static void note_noop(noop_seen *seen, const sec *s, const kv *k)
{
    int dup = 0;
    for (int i = 0; i < seen->n && !dup; ++i) dup = strcmp(seen->first[i]->key, k->key) == 0;
    if (!dup && seen->n < 32) {
        seen->first[seen->n] = k;
        seen->where[seen->n++] = s;
    } else if (!dup) {
        seen->more = 1;
    }
}

/* Darknet reads only the keys it knows and ignores the rest without a
 * word: a key nobody reads (a misspelling, a key of another section) is
 * refused with the nearest known key; the fork's keys that change nothing
 * here are gathered in `seen` (one note per cfg, written by the caller). */
static sdnn_status check_key_known(const checker *c, const sec *s, const kv *k, const char *t,
                                   noop_seen *seen)
{
    const char *names[256];
    size_t n = 0;
    built_keys(t, names, 256, &n);
    for (size_t i = 0; i < n; ++i)
        if (strcmp(names[i], k->key) == 0) return SDNN_OK;
    if (sdnn_cfg_key_read(t, k->key) || dialect_entry(t, k->key)) return SDNN_OK;
    if (sdnn_cfg_key_fork_noop(t, k->key)) {
        note_noop(seen, s, k);
        return SDNN_OK;
    }
    n = known_keys(t, names, 256);
    char what[400];
    if (n == 0)
        snprintf(what, sizeof what, "unknown key: libdarknet reads no key in [%s] and would "
                 "ignore it; remove it", s->type);
    else
        snprintf(what, sizeof what, "unknown key: neither libdarknet nor this project reads it "
                 "in [%s] (Darknet would ignore it); nearest known key: %s", s->type,
                 sdnn_nearest_name(k->key, names, n, NULL));
    return key_error(c, s, k, what);
}

static sdnn_status check_dialect(const checker *c)
{
    noop_seen seen = {.n = 0};
    for (int si = 0; si < c->nsec; ++si) {
        const sec *s = &c->secs[si];
        const char *t = canonical(s->type);
        for (int i = 0; i < s->nkv; ++i) {
            const kv *k = &c->kvs[s->kv0 + i];
            if (strcmp(k->key, "activation") == 0) {
                int known = 0;
                for (int a = 0; g_acts[a]; ++a) known |= strcmp(k->val, g_acts[a]) == 0;
                int dialect_act = strcmp(k->val, "mish") == 0 || strcmp(k->val, "swish") == 0;
                /* Built by plugin/darknet/dialect.c on these layers. */
                if (dialect_act && (strcmp(t, "convolutional") == 0 ||
                                    strcmp(t, "connected") == 0 || strcmp(t, "conn") == 0 ||
                                    strcmp(t, "shortcut") == 0))
                    known = 1;
                if (!known) {
                    char what[400];
                    if (dialect_act)
                        snprintf(what, sizeof what, "the %s activation is the maintained "
                                 "Darknet fork's; it is built here on [convolutional], [connected] "
                                 "and [shortcut] only; allowed here: %s",
                                 k->val, ACT_NAMES);
                    else
                        snprintf(what, sizeof what, "unknown activation (libdarknet would train "
                                 "relu instead); allowed: %s", ACT_NAMES);
                    return key_error(c, s, k, what);
                }
            }
            if (strcmp(t, "yolo") == 0)
                for (int y = 0; g_yolo_keys[y].key; ++y) {
                    if (strcmp(k->key, g_yolo_keys[y].key) != 0) continue;
                    char what[200];
                    if (yolo_value(&g_yolo_keys[y], k->val, what, sizeof what))
                        return key_error(c, s, k, what);
                    /* The fork applies it only with counters_per_class (refused). */
                    if (strcmp(k->key, "cls_normalizer") == 0) note_noop(&seen, s, k);
                }
            if (strcmp(t, "net") == 0)
                for (int a = 0; g_net_aug_keys[a]; ++a) {
                    if (strcmp(k->key, g_net_aug_keys[a]) != 0) continue;
                    if (!same_value(k->val, "0") && !same_value(k->val, "1"))
                        return key_error(c, s, k, "expected 0 or 1 (the fork's augmentation "
                                         "switch, built by the project's batch builder)");
                }
            const dialect_key *dk = dialect_entry(t, k->key);
            if (dk && !(dk->neutral && same_value(k->val, dk->neutral))) {
                char what[400];
                if (dk->neutral)
                    snprintf(what, sizeof what, "%s (only %s=%s, what libdarknet does, is "
                             "accepted)", dk->why, dk->key, dk->neutral);
                else
                    snprintf(what, sizeof what, "%s (remove the key)", dk->why);
                return key_error(c, s, k, what);
            }
            if (strcmp(t, "net") == 0 && strcmp(k->key, "policy") == 0) {
                /* libdarknet's get_policy: any other name trains policy=constant. */
                static const char *const pol[] = {"constant", "step", "steps", "exp", "poly",
                                                  "sigmoid", "random", NULL};
                int ok = 0;
                for (int p = 0; pol[p]; ++p) ok |= strcmp(k->val, pol[p]) == 0;
                if (!ok)
                    return key_error(c, s, k, strcmp(k->val, "sgdr") == 0
                                     ? "the sgdr policy is the maintained Darknet fork's and not "
                                       "built here (libdarknet would train policy=constant); "
                                       "allowed: constant, step, steps, exp, poly, sigmoid, random"
                                     : "unknown policy (libdarknet would train policy=constant); "
                                       "allowed: constant, step, steps, exp, poly, sigmoid, random");
            }
            /* The fork's per-axis strides and dilation: libdarknet parses
             * none of them, so only the values it computes anyway pass. */
            int conv = strcmp(t, "convolutional") == 0, pool = strcmp(t, "maxpool") == 0;
            if ((conv || pool) && (!strcmp(k->key, "stride_x") || !strcmp(k->key, "stride_y"))) {
                const kv *ks = find(c, s, "stride");
                const char *st = ks ? ks->val : "1";
                if (!same_value(k->val, st)) {
                    char what[300];
                    snprintf(what, sizeof what, "the fork's per-axis stride is not built here "
                             "(libdarknet ignores it and strides by stride=%s); allowed: "
                             "%s=%s, or remove the key", st, k->key, st);
                    return key_error(c, s, k, what);
                }
            }
            /* Debian's rnn.cfg writes hidden= equal to output=, which is
             * what libdarknet's hidden state is; the fork reads it. */
            if (strcmp(t, "rnn") == 0 && !strcmp(k->key, "hidden")) {
                const kv *ko = find(c, s, "output");
                long h = 0, o = 1;
                if (!parse_long(k->val, &h) || !ko || !parse_long(ko->val, &o) || h != o) {
                    char what[300];
                    snprintf(what, sizeof what, "the fork's separate hidden size is not built "
                             "here (libdarknet's hidden state is output=%s); allowed: hidden=%s, "
                             "or remove the key", ko ? ko->val : "1", ko ? ko->val : "1");
                    return key_error(c, s, k, what);
                }
            }
            if (conv && !strcmp(k->key, "dilation") && !same_value(k->val, "1")) {
                const kv *kz = find(c, s, "size");
                if (!kz || !same_value(kz->val, "1"))
                    return key_error(c, s, k, "the fork's dilated convolution is not built here "
                                     "(libdarknet ignores it); allowed: dilation=1, or remove "
                                     "the key");
            }
            SDNN_CHECK(check_key_known(c, s, k, t, &seen));
        }
        if (strcmp(t, "net") == 0) {
            const kv *mo = find(c, s, "mosaic"), *lb = find(c, s, "letter_box");
            if (mo && lb && same_value(mo->val, "1") && same_value(lb->val, "1")) {
                char what[200];
                snprintf(what, sizeof what, "cannot be combined with mosaic=1 (line %d; the fork "
                         "refuses the pair too): set one of them to 0", mo->line);
                return key_error(c, s, lb, what);
            }
        }
    }
    if (seen.n && !c->quiet) {
        char line[2048];
        size_t o = 0;
        for (int i = 0; i < seen.n && o < sizeof line; ++i)
            o += (size_t)snprintf(line + o, sizeof line - o, "%s[%s] %.*s (line %d)",
                                  i ? ", " : "", seen.where[i]->type, 64, seen.first[i]->key,
                                  seen.first[i]->line);
        fprintf(stderr, "scalednn: note: %s: keys that libdarknet ignores and that change "
                "nothing here (the maintained fork's streams, memory, charts, tracking, its "
                "cls_normalizer without counters_per_class; old Darknet keys): %s%s\n", c->name, line, seen.more ? ", ..." : "");
    }
    return SDNN_OK;
}

/* ---- checks ---------------------------------------------------------------- */

static sdnn_status check_net(checker *c, const sec *s, long *channels, long *width,
                             long *height)
{
    long batch, subdiv, w, h, ch, inputs, mb;
    const kv *kb, *ks, *kw, *kh, *kc, *ki;
    SDNN_CHECK(int_key(c, s, "batch", 1, 1, INT_MAX, &batch, &kb));
    SDNN_CHECK(int_key(c, s, "subdivisions", 1, 1, INT_MAX, &subdiv, &ks));
    SDNN_CHECK(int_key(c, s, "width", 0, 1, DIM_MAX, &w, &kw));
    SDNN_CHECK(int_key(c, s, "height", 0, 1, DIM_MAX, &h, &kh));
    SDNN_CHECK(int_key(c, s, "channels", 0, 1, 4096, &ch, &kc));
    SDNN_CHECK(int_key(c, s, "inputs", 0, 1, INT_MAX, &inputs, &ki));
    SDNN_CHECK(int_key(c, s, "max_batches", 0, 0, INT_MAX, &mb, NULL));
    SDNN_CHECK(int_key(c, s, "time_steps", 1, 1, 1000000, &mb, NULL));
    if (batch / subdiv < 1) {
        char what[200];
        snprintf(what, sizeof what,
                 "batch=%ld / subdivisions=%ld leaves 0 images per subdivision "
                 "(subdivisions must be <= batch)",
                 batch, subdiv);
        return key_error(c, s, ks ? ks : kb, what);
    }
    if (!ki && !(kw && kh && kc))
        return sec_error(c, s,
                         "width, height and channels (each >= 1) are required, or inputs= "
                         "for a network without images");
    if (kw && kh && kc && (double)w * (double)h * (double)ch * (double)batch > (double)INT_MAX)
        return key_error(c, s, kw, "width x height x channels x batch exceeds 2^31 floats");
    /* Darknet's defaults: an absent width, height or channels is 0 (a
     * network fed by inputs= alone has no image). */
    *channels = kc ? ch : 0;
    c->batch = batch / subdiv;
    *width = kw ? w : 0;
    *height = kh ? h : 0;
    /* policy=steps: Darknet aborts without steps= and scales=, and reads
     * past the end of scales= when it has fewer entries than steps=. */
    const kv *kp = find(c, s, "policy");
    if (kp && strcmp(kp->val, "steps") == 0) {
        const kv *kst = find(c, s, "steps"), *ksc = find(c, s, "scales");
        if (!kst || !ksc)
            return key_error(c, s, kp, "needs steps= and scales= (e.g. steps=400,450 scales=.1,.1)");
        if (count_entries(kst->val) != count_entries(ksc->val)) {
            char what[160];
            snprintf(what, sizeof what, "%d steps but %d scales; give one scale per step",
                     count_entries(kst->val), count_entries(ksc->val));
            return key_error(c, s, ksc, what);
        }
    }
    return SDNN_OK;
}

/* Layers whose output has their input's channel count. */
static int keeps_channels(const char *t)
{
    static const char *const same[] = {"maxpool", "max", "avgpool", "avg", "shortcut",
                                       "upsample", "dropout", "activation", "logistic",
                                       "l2norm", "batchnorm", "normalization", "lrn",
                                       "softmax", "soft", "cost", "yolo", "region", NULL};
    for (int i = 0; same[i]; ++i)
        if (strcmp(t, same[i]) == 0) return 1;
    return 0;
}

/* Layers whose parse needs an image (w, h, c > 0) from the layer before. */
static int needs_image(const char *t)
{
    static const char *const img[] = {"convolutional", "conv", "deconvolutional", "deconv",
                                      "local", "maxpool", "max", "avgpool", "avg", "reorg",
                                      "upsample", "crop", "yolo", "region", NULL};
    for (int i = 0; img[i]; ++i)
        if (strcmp(t, img[i]) == 0) return 1;
    return 0;
}

static sdnn_status shrink_error(const checker *c, const sec *s, const kv *k, long w, long h)
{
    char what[200];
    snprintf(what, sizeof what, "on its %ldx%ld input the output would be empty (less than "
             "1x1); use a smaller size/stride, or padding", w, h);
    return k ? key_error(c, s, k, what) : sec_error(c, s, what);
}

/* A route/shortcut index relative to layer `at` (negative: from the end). */
static sdnn_status layer_ref(const checker *c, const sec *s, const kv *k, long v, int at,
                             int *idx)
{
    long i = v < 0 ? at + v : v;
    if (i < 0 || i >= at) {
        char what[200];
        snprintf(what, sizeof what,
                 "layer %ld does not exist before this one (layer %d; use -1 .. -%d or 0 .. %d)",
                 v, at, at, at - 1);
        return key_error(c, s, k, what);
    }
    *idx = (int)i;
    return SDNN_OK;
}

/* Every entry of anchors= a finite number > 0 as libdarknet stores it (atof
 * into a float): it multiplies exp(tw) into the box size, so an anchor of 0
 * (an empty entry reads as 0), a negative one, nan, or one that underflows
 * or overflows the float trains a predictor that never matches a truth. */
static sdnn_status anchor_values(const checker *c, const sec *s, const kv *k, int yolo)
{
    const char *p = k->val;
    for (int i = 1;; ++i) {
        size_t len = strcspn(p, ",");
        char *end = (char *)p;
        const float v = len ? (float)strtod(p, &end) : 0;
        if (!len || end != p + len || !isfinite(v) || !(v > 0)) {
            char what[320];
            snprintf(what, sizeof what,
                     "entry %d (\"%.*s\"): each anchor is a %s, a finite number > 0 (an anchor "
                     "of 0 or below is a predictor that never matches a box; `darknet detector "
                     "calc_anchors` computes them from the labels)",
                     i, (int)(len < 40 ? len : 40), p,
                     yolo ? "width or height in pixels of the network's input"
                          : "width or height in grid cells of the layer's output");
            return key_error(c, s, k, what);
        }
        if (p[len] == '\0') return SDNN_OK;
        p += len + 1;
    }
}

static sdnn_status check_head(const checker *c, const sec *s, int at, long in_ch,
                              const sec *producer)
{
    int yolo = strcmp(s->type, "yolo") == 0;
    long classes, num, coords;
    const kv *kcl, *knum;
    SDNN_CHECK(int_key(c, s, "classes", 20, 1, 100000, &classes, &kcl));
    SDNN_CHECK(int_key(c, s, "num", 1, 1, 10000, &num, &knum));
    SDNN_CHECK(int_key(c, s, "coords", 4, 1, 100, &coords, NULL));
    long used = num;
    char what[320];
    if (yolo) {
        long mask[1024];
        int nmask = 0;
        const kv *km = find(c, s, "mask");
        SDNN_CHECK(int_list(c, s, km, mask, 1024, &nmask));
        for (int i = 0; i < nmask; ++i)
            if (mask[i] < 0 || mask[i] >= num) {
                snprintf(what, sizeof what,
                         "mask entry %ld names no anchor (num=%ld: entries 0 .. %ld)", mask[i],
                         num, num - 1);
                return key_error(c, s, km, what);
            }
        if (km) used = nmask;
        coords = 4;
    }
    const kv *ka = find(c, s, "anchors");
    if (ka && count_entries(ka->val) < 2 * num) {
        snprintf(what, sizeof what,
                 "%d values, but num=%ld anchors need %ld (a width and a height each; "
                 "libdarknet would make the missing ones 0.5)",
                 count_entries(ka->val), num, 2 * num);
        return key_error(c, s, ka, what);
    }
    if (ka && count_entries(ka->val) > 2 * num) {
        snprintf(what, sizeof what,
                 "%d values, but num=%ld anchors hold at most %ld (a width and a height each)",
                 count_entries(ka->val), num, 2 * num);
        return key_error(c, s, ka, what);
    }
    if (ka) SDNN_CHECK(anchor_values(c, s, ka, yolo));
    long want = used * (classes + coords + 1);
    if (in_ch > 0 && producer && in_ch != want) {
        snprintf(what, sizeof what,
                 "%ld %s x (%ld classes + %ld) = %ld channels expected, but the [%s] at line %d "
                 "before it gives %ld (layer %d; set its filters=%ld, or fix %s)",
                 used, yolo ? "masks" : "anchors", classes, coords + 1, want, producer->type,
                 producer->line, in_ch, at - 1, want, yolo ? "mask/classes" : "num/classes");
        if (kcl || knum) return key_error(c, s, kcl ? kcl : knum, what);
        return sec_error(c, s, what);
    }
    return SDNN_OK;
}

static sdnn_status check_layers(checker *c)
{
    const sec *net = NULL;
    int first = c->nsec > 0 ? 0 : -1;
    if (first < 0)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "%s: no sections: the file is empty or only comments (a cfg starts "
                          "with [net], then its layers)",
                          c->name);
    net = &c->secs[first];
    if (!is_type(net->type, "net", "network"))
        return sec_error(c, net, "the first section must be [net] (or [network])");
    long in_ch = 0, in_w = -1, in_h = -1;
    SDNN_CHECK(check_net(c, net, &in_ch, &in_w, &in_h));
    int nlayers = c->nsec - first - 1;
    if (nlayers == 0)
        return sec_error(c, net, "no layers follow [net]: there is nothing to train or run");
    /* libdarknet takes the network's output from its last layer that is not
     * a [cost]: with only [cost] layers it reads before the layer array. */
    int costs = 0;
    for (int L = 0; L < nlayers; ++L) costs += is_type(c->secs[first + 1 + L].type, "cost", NULL);
    if (costs == nlayers)
        return sec_error(c, &c->secs[first + 1], "every layer is a [cost]: a network needs at "
                         "least one layer that computes an output for its [cost] to judge");
    long *chan = calloc((size_t)nlayers, sizeof *chan);
    long *W = calloc((size_t)nlayers, sizeof *W), *H = calloc((size_t)nlayers, sizeof *H);
    int *from = calloc((size_t)nlayers, sizeof *from); /* section giving the channels */
    if (!chan || !from || !W || !H) {
        free(chan);
        free(W);
        free(H);
        free(from);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "%s: no memory to check the cfg", c->name);
    }
    sdnn_status st = SDNN_OK;
    for (int L = 0; L < nlayers && st == SDNN_OK; ++L) {
        const sec *s = &c->secs[first + 1 + L];
        const char *t = s->type;
        long prev = L ? chan[L - 1] : in_ch;
        long pw = L ? W[L - 1] : in_w, ph = L ? H[L - 1] : in_h;
        int prev_from = L ? from[L - 1] : first;
        const sec *producer = &c->secs[prev_from];
        long v;
        chan[L] = -1;
        W[L] = pw;
        H[L] = ph;
        from[L] = first + 1 + L;
        /* Files a layer reads (a class map, a hierarchy): Darknet ends the process
         * inside parse_network_cfg when one cannot be opened. */
        static const char *const files[] = {"map", "tree", NULL};
        for (int f = 0; files[f] && st == SDNN_OK; ++f) {
            const kv *k = find(c, s, files[f]);
            struct stat sb;
            if (k && stat(k->val, &sb) == 0 && !S_ISREG(sb.st_mode)) {
                /* A FIFO would block Darknet's reader, /dev/zero never ends. */
                char what[200];
                snprintf(what, sizeof what, "cannot read the file: it is %s, and a regular file "
                         "is needed", sdnn_file_kind((unsigned)sb.st_mode));
                st = key_error(c, s, k, what);
            } else if (k && access(k->val, R_OK) != 0) {
                char what[200];
                snprintf(what, sizeof what, "cannot read the file: %s", strerror(errno));
                st = key_error(c, s, k, what);
            }
        }
        if (st != SDNN_OK) break;
        if (L == 0 && is_type(t, "dropout", NULL)) {
            /* Darknet's parser points a dropout's output at the layer
             * before it: layers[-1] for the first layer. */
            st = sec_error(c, s, "a [dropout] works in place on the output of the layer before "
                           "it, so it cannot be the first layer");
            break;
        }
        if (needs_image(t) && (pw == 0 || ph == 0 || prev == 0)) {
            char what[200];
            snprintf(what, sizeof what, "its input, the output of the layer before it, is "
                     "%ldx%ldx%ld: this layer needs an image of at least 1x1x1", pw, ph, prev);
            st = sec_error(c, s, what);
            break;
        }
        if (is_type(t, "net", "network")) {
            st = SDNN_ERROR(SDNN_ERR_INVALID, "%s:%d: [%s]: a second [net] section (the first "
                            "is at line %d); only the first section may be [net]",
                            c->name, s->line, t, net->line);
        } else if (is_type(t, "convolutional", "conv") || is_type(t, "deconvolutional", "deconv") ||
                   is_type(t, "local", NULL)) {
            long size, stride, groups;
            if ((st = int_key(c, s, "filters", 1, 1, 1 << 20, &v, NULL)) != SDNN_OK) break;
            if ((st = int_key(c, s, "size", 1, 1, 4096, &size, NULL)) != SDNN_OK) break;
            if ((st = int_key(c, s, "stride", 1, 1, 4096, &stride, NULL)) != SDNN_OK) break;
            if ((st = int_key(c, s, "groups", 1, 1, 1 << 20, &groups, NULL)) != SDNN_OK) break;
            chan[L] = v;
            if (groups > 1 && ((prev > 0 && prev % groups) || v % groups)) {
                char what[200];
                snprintf(what, sizeof what, "groups=%ld must divide the input channels (%ld) and "
                         "filters=%ld", groups, prev, v);
                st = key_error(c, s, find(c, s, "groups"), what);
                break;
            }
            long pad, padding;
            if ((st = int_key(c, s, "pad", 0, 0, 1, &pad, NULL)) != SDNN_OK) break;
            if ((st = int_key(c, s, "padding", 0, 0, 4096, &padding, NULL)) != SDNN_OK) break;
            if (pad) padding = size / 2;
            int deconv = is_type(t, "deconvolutional", "deconv");
            if (deconv) {
                W[L] = pw < 0 ? -1 : (pw - 1) * stride + size - 2 * padding;
                H[L] = ph < 0 ? -1 : (ph - 1) * stride + size - 2 * padding;
            } else {
                W[L] = pw < 0 ? -1 : (pw + 2 * padding - size) / stride + 1;
                H[L] = ph < 0 ? -1 : (ph + 2 * padding - size) / stride + 1;
            }
            if ((W[L] >= 0 && W[L] < 1) || (H[L] >= 0 && H[L] < 1) ||
                (pw >= 0 && !deconv && pw + 2 * padding < size) ||
                (ph >= 0 && !deconv && ph + 2 * padding < size)) {
                st = shrink_error(c, s, find(c, s, "size"), pw, ph);
                break;
            }
        } else if (is_type(t, "connected", "conn")) {
            if ((st = int_key(c, s, "output", 1, 1, INT_MAX, &v, NULL)) != SDNN_OK) break;
            chan[L] = v;
            W[L] = H[L] = 1;
        } else if (is_type(t, "maxpool", "max")) {
            long size, stride;
            if ((st = int_key(c, s, "stride", 1, 1, 4096, &stride, NULL)) != SDNN_OK) break;
            if ((st = int_key(c, s, "size", stride, 1, 4096, &size, NULL)) != SDNN_OK) break;
            long padding;
            if ((st = int_key(c, s, "padding", size - 1, 0, 4096, &padding, NULL)) != SDNN_OK) break;
            W[L] = pw < 0 ? -1 : (pw + padding - size) / stride + 1;
            H[L] = ph < 0 ? -1 : (ph + padding - size) / stride + 1;
            if ((pw >= 0 && (pw + padding < size || W[L] < 1)) ||
                (ph >= 0 && (ph + padding < size || H[L] < 1))) {
                st = shrink_error(c, s, find(c, s, "size"), pw, ph);
                break;
            }
            chan[L] = prev;
            from[L] = prev_from;
        } else if (is_type(t, "upsample", NULL)) {
            if ((st = int_key(c, s, "stride", 2, -4096, 4096, &v, NULL)) != SDNN_OK) break;
            if (v == 0) {
                st = key_error(c, s, find(c, s, "stride"),
                               "expected a non-zero integer (negative: downsample)");
                break;
            }
            W[L] = pw < 0 ? -1 : (v > 0 ? pw * v : pw / -v);
            H[L] = ph < 0 ? -1 : (v > 0 ? ph * v : ph / -v);
            if ((W[L] >= 0 && W[L] < 1) || (H[L] >= 0 && H[L] < 1)) {
                st = shrink_error(c, s, find(c, s, "stride"), pw, ph);
                break;
            }
            chan[L] = prev;
            from[L] = prev_from;
        } else if (is_type(t, "route", NULL)) {
            const kv *k = find(c, s, "layers");
            if (!k) {
                st = sec_error(c, s, "layers= is required (e.g. layers = -1, 8)");
                break;
            }
            long refs[64];
            int n = 0;
            if ((st = int_list(c, s, k, refs, 64, &n)) != SDNN_OK) break;
            long sum = 0;
            int first_idx = -1;
            for (int j = 0; j < n && st == SDNN_OK; ++j) {
                int idx = 0;
                st = layer_ref(c, s, k, refs[j], L, &idx);
                if (st != SDNN_OK) break;
                sum = (sum < 0 || chan[idx] < 0) ? -1 : sum + chan[idx];
                if (first_idx < 0) {
                    first_idx = idx;
                    W[L] = W[idx];
                    H[L] = H[idx];
                } else if (W[idx] >= 0 && W[first_idx] >= 0 &&
                           (W[idx] != W[first_idx] || H[idx] != H[first_idx])) {
                    char what[200];
                    snprintf(what, sizeof what, "layer %d is %ldx%ld but layer %d is %ldx%ld: "
                             "routed layers must have the same width and height",
                             first_idx, W[first_idx], H[first_idx], idx, W[idx], H[idx]);
                    st = key_error(c, s, k, what);
                }
            }
            if (st != SDNN_OK) break;
            long groups = 1, gid = 0;
            const kv *kg = NULL;
            if ((st = int_key(c, s, "groups", 1, 1, 1 << 20, &groups, &kg)) != SDNN_OK) break;
            if ((st = int_key(c, s, "group_id", 0, 0, groups - 1, &gid, NULL)) != SDNN_OK) break;
            if (groups > 1) {
                /* Built by plugin/darknet/dialect.c as a 1x1 layer on the
                 * layer before it, then made a channel slice: one routed
                 * layer, the size of the layer before the route. */
                if (n != 1) {
                    st = key_error(c, s, kg, "a grouped route is built here for one routed "
                                   "layer only (layers=N)");
                    break;
                }
                if (first_idx != L - 1 && (W[first_idx] != pw || H[first_idx] != ph)) {
                    char what[240];
                    snprintf(what, sizeof what, "a grouped route is built here only from a layer "
                             "the size of the layer before it (%ldx%ld; layer %d is %ldx%ld)",
                             pw, ph, first_idx, W[first_idx], H[first_idx]);
                    st = key_error(c, s, kg, what);
                    break;
                }
                if (sum <= 0 || sum % groups) {
                    char what[200];
                    snprintf(what, sizeof what, "groups=%ld must divide the routed channels (%ld)",
                             groups, sum);
                    st = key_error(c, s, kg, what);
                    break;
                }
                sum /= groups;
                c->grouped = 1;
            }
            chan[L] = sum;
        } else if (is_type(t, "shortcut", NULL)) {
            const kv *k = find(c, s, "from");
            if (!k) {
                st = sec_error(c, s, "from= is required (e.g. from = -3)");
                break;
            }
            int idx = 0;
            if (!parse_long(k->val, &v)) {
                st = key_error(c, s, k, "expected a layer index (e.g. -3)");
                break;
            }
            if ((st = layer_ref(c, s, k, v, L, &idx)) != SDNN_OK) break;
            chan[L] = prev;
            from[L] = prev_from;
        } else if (is_type(t, "yolo", NULL) || is_type(t, "region", NULL)) {
            /* Checked where the channels are known: from a layer that
             * states them (a convolution, a route of known layers, [net]). */
            st = check_head(c, s, L, prev, producer);
            chan[L] = prev;
            from[L] = prev_from;
        } else if (is_type(t, "reorg", NULL)) {
            long stride;
            if ((st = int_key(c, s, "stride", 1, 1, 64, &stride, NULL)) != SDNN_OK) break;
            long rev;
            if ((st = int_key(c, s, "reverse", 0, 0, 1, &rev, NULL)) != SDNN_OK) break;
            long s2 = stride * stride;
            chan[L] = prev < 0 ? -1 : (rev ? prev / s2 : prev * s2);
            W[L] = pw < 0 ? -1 : (rev ? pw * stride : pw / stride);
            H[L] = ph < 0 ? -1 : (rev ? ph * stride : ph / stride);
            if ((W[L] >= 0 && W[L] < 1) || (H[L] >= 0 && H[L] < 1) || chan[L] == 0) {
                st = shrink_error(c, s, find(c, s, "stride"), pw, ph);
                break;
            }
            /* libdarknet's reorg_cpu moves every input value to an index
             * it computes with channels / stride^2 as a divisor and the
             * output as width/stride x height/stride: channels that stride^2
             * does not divide are a division by zero (fewer) or writes past
             * the output (more), and so is a width or height that stride
             * does not divide. */
            if (prev > 0 && prev % s2 != 0) {
                char what[240];
                snprintf(what, sizeof what, "its input has %ld channels, which stride^2 = %ld "
                         "does not divide: libdarknet's reorg needs channels that are a multiple "
                         "of stride^2", prev, s2);
                st = key_error(c, s, find(c, s, "stride"), what);
                break;
            }
            if (!rev && ((pw > 0 && pw % stride != 0) || (ph > 0 && ph % stride != 0))) {
                char what[240];
                snprintf(what, sizeof what, "its input is %ldx%ld, which stride %ld does not "
                         "divide: libdarknet's reorg needs a width and height that are "
                         "multiples of stride", pw, ph, stride);
                st = key_error(c, s, find(c, s, "stride"), what);
                break;
            }
        } else if (is_type(t, "detection", NULL)) {
            /* Darknet asserts side^2 x ((1 + coords) x num + classes) == inputs. */
            long side, classes, coords, num;
            if ((st = int_key(c, s, "side", 7, 1, 4096, &side, NULL)) != SDNN_OK) break;
            if ((st = int_key(c, s, "classes", 20, 1, 100000, &classes, NULL)) != SDNN_OK) break;
            if ((st = int_key(c, s, "coords", 1, 1, 100, &coords, NULL)) != SDNN_OK) break;
            if ((st = int_key(c, s, "num", 1, 1, 10000, &num, NULL)) != SDNN_OK) break;
            double want = (double)side * side * ((1 + coords) * num + classes);
            if (pw >= 0 && ph >= 0 && prev >= 0 && want != (double)pw * ph * prev) {
                char what[240];
                snprintf(what, sizeof what, "side^2 x ((1 + coords) x num + classes) = %.0f values "
                         "expected, but the layer before it gives %ldx%ldx%ld = %ld",
                         want, pw, ph, prev, pw * ph * prev);
                st = sec_error(c, s, what);
                break;
            }
        } else if (is_type(t, "softmax", "soft")) {
            if ((st = int_key(c, s, "groups", 1, 1, 1 << 20, &v, NULL)) != SDNN_OK) break;
            chan[L] = prev;
            from[L] = prev_from;
        } else if (is_type(t, "crop", NULL)) {
            /* Darknet's crop gives crop_width x crop_height (default 1x1). */
            long cw, ch;
            if ((st = int_key(c, s, "crop_width", 1, 1, DIM_MAX, &cw, NULL)) != SDNN_OK) break;
            if ((st = int_key(c, s, "crop_height", 1, 1, DIM_MAX, &ch, NULL)) != SDNN_OK) break;
            W[L] = cw;
            H[L] = ch;
            chan[L] = prev;
            from[L] = prev_from;
        } else if (is_type(t, "avgpool", "avg")) {
            chan[L] = prev;
            from[L] = prev_from;
            W[L] = H[L] = 1;
        } else if (keeps_channels(t)) {
            chan[L] = prev;
            from[L] = prev_from;
        } else {
            W[L] = H[L] = -1; /* not followed */
        }
        /* These give a vector, not an image: Darknet leaves their output
         * width and height 0, and a layer that needs an image aborts. */
        static const char *const flat[] = {"softmax", "soft", "cost", "detection", "rnn", "gru",
                                           "lstm", NULL};
        for (int f = 0; flat[f]; ++f)
            if (strcmp(t, flat[f]) == 0) W[L] = H[L] = 0;
        if (st == SDNN_OK && W[L] > 0 && H[L] > 0 && chan[L] > 0 &&
            (double)W[L] * (double)H[L] * (double)chan[L] * (double)c->batch > c->max_floats) {
            char what[240];
            snprintf(what, sizeof what, "its output, %ldx%ldx%ld for a batch of %ld, exceeds %.0f "
                     "values (Darknet counts them in an int)", W[L], H[L], chan[L], c->batch,
                     c->max_floats);
            st = sec_error(c, s, what);
        }
    }
    if (st == SDNN_OK && c->chan_out) {
        c->nlayers_out = nlayers;
        for (int L = 0; L < nlayers && L < c->chan_max; ++L) c->chan_out[L] = chan[L];
    }
    /* Darknet's random resize would resize the slice as a route of all
     * the channels: refused until the slice resizes itself. */
    for (int L = 0; st == SDNN_OK && c->grouped && L < nlayers; ++L) {
        const sec *s = &c->secs[first + 1 + L];
        const kv *k = find(c, s, "random");
        long r;
        if (is_type(s->type, "yolo", "region") && k && (!parse_long(k->val, &r) || r != 0))
            st = key_error(c, s, k, "random resizing is not built for a cfg with a grouped "
                           "route: use random=0");
    }
    free(W);
    free(H);
    free(chan);
    free(from);
    return st;
}

/* Every check of `text` on a checker set up by the caller; frees what the
 * checks allocate (the caller's output fields stay). */
static sdnn_status run_checker(checker *c, const char *text)
{
    c->buf = strdup(text);
    if (!c->buf) return SDNN_ERROR(SDNN_ERR_NOMEM, "%s: no memory to check the cfg", c->name);
    sdnn_status st = read_lines(c);
    if (st == SDNN_OK) st = check_dialect(c);
    if (st == SDNN_OK) st = check_layers(c);
    free(c->buf);
    free(c->kvs);
    free(c->secs);
    return st;
}

sdnn_status sdnn_cfg_check_text(const char *name, const char *text)
{
    return sdnn_cfg_check_text_max(name, text, (double)INT_MAX);
}

sdnn_status sdnn_cfg_check_text_max(const char *name, const char *text, double max_floats)
{
    if (!name || !text) return SDNN_ERROR(SDNN_ERR_INVALID, "sdnn_cfg_check_text: no text");
    checker c = {.name = name, .max_floats = max_floats, .batch = 1};
    return run_checker(&c, text);
}

sdnn_status sdnn_cfg_channels(const char *name, const char *text, long *chan, int max, int *n)
{
    if (!name || !text) return SDNN_ERROR(SDNN_ERR_INVALID, "sdnn_cfg_channels: no text");
    checker c = {.name = name, .max_floats = (double)INT_MAX, .batch = 1, .chan_out = chan,
                 .chan_max = max, .quiet = 1};
    sdnn_status st = run_checker(&c, text);
    *n = c.nlayers_out;
    return st;
}

sdnn_status sdnn_cfg_check_file(const char *path)
{
    SDNN_CHECK(sdnn_check_readable(path)); /* a FIFO or a device: refused unopened */
    FILE *f = fopen(path, "rb");
    if (!f) return SDNN_ERROR(SDNN_ERR_IO, "%s: cannot open cfg: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (cap - len < 2) {
            char *g = realloc(buf, cap * 2);
            if (!g) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = g;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        if (n == 0) break;
        len += n;
    }
    fclose(f);
    if (!buf) return SDNN_ERROR(SDNN_ERR_NOMEM, "%s: no memory to read the cfg", path);
    buf[len] = '\0';
    if (memchr(buf, '\0', len)) {
        free(buf);
        return SDNN_ERROR(SDNN_ERR_INVALID, "%s: contains a NUL byte; a cfg must be text", path);
    }
    sdnn_cfg_normalize_eol(buf);
    sdnn_status st = sdnn_cfg_check_text(path, buf);
    free(buf);
    return st;
}
