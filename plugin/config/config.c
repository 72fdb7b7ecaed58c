/*
 * config: the [scalednn] section of a Darknet cfg.  Owns reading the cfg
 * text, validating the section's keys into an sdnn_config (defaults for
 * absent keys), and producing the cfg without that section, both as text and
 * as a memfd that Darknet's parse_network_cfg() can open by path.
 *
 * Lines are classified the way Darknet classifies them: every whitespace
 * character is removed first; an empty line or one starting with '#' or ';'
 * is ignored, one starting with '[' is a section header, any other line is
 * key=value.  Lines outside our section are copied byte for byte.
 */
#include "config.h"
#include "costmodel.h"
#include "cfgcheck.h"
#include "cfgkeys.h"

#include "conv_dnnl.h"
#include "engine.h"
#include "codec.h"
#include "comm.h"
#include "readable.h"

#include <ctype.h>
#include <pthread.h>
#include <stddef.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SECTION_HEADER "[scalednn]"
#define SHOWN_MAX 200 /* longest key or value quoted in full in a message */

/* The key=value line being checked, for messages. */
typedef struct line_ref {
    const char *name;  /* file name */
    int lineno;        /* 1-based */
    const char *key;   /* whitespace-free */
    const char *value; /* whitespace-free; NULL when the line has no '=' */
} line_ref;

/* ---- messages ----------------------------------------------------------- */

/* Record "NAME:LINE: [scalednn] key=value: what" and return st. */
static sdnn_status line_error(const line_ref *lr, sdnn_status st,
                              const char *what)
{
    const char *key = lr->key;
    const char *val = lr->value;
    int key_cut = strlen(key) > SHOWN_MAX;
    if (val == NULL)
        return SDNN_ERROR(st, "%s:%d: [scalednn] %.*s%s: %s", lr->name,
                          lr->lineno, SHOWN_MAX, key, key_cut ? "..." : "",
                          what);
    int val_cut = strlen(val) > SHOWN_MAX;
    return SDNN_ERROR(st, "%s:%d: [scalednn] %.*s%s=%.*s%s: %s", lr->name,
                      lr->lineno, SHOWN_MAX, key, key_cut ? "..." : "",
                      SHOWN_MAX, val, val_cut ? "..." : "", what);
}

/* ---- the key table -------------------------------------------------------
 *
 * g_keys is the only list of the section's keys: parsing, the messages
 * (what a value may be, which keys exist), the combination checks (which
 * codec a key belongs to), sdnn_config_describe and `scalednn keys` all
 * read it.  Names of codecs, backends, engines and links come from their
 * registries through `names`.  Defaults are SDNN_CONFIG_INIT's, read
 * through `off`. */

typedef enum {
    KT_MODE,  /* mode=: sdnn_mode */
    KT_NAME,  /* char[size], checked by `check` */
    KT_BOOL,  /* int, exactly 0 or 1 */
    KT_INT,   /* int in [lo, hi] */
    KT_NUM,   /* double in lo..hi (lo_open/hi_open exclude the ends) */
    KT_PATH,  /* char[size] */
} key_type;

typedef struct key_spec key_spec;

/* KT_NAME: SDNN_OK when lr->value is allowed, else the message. */
typedef sdnn_status (*name_check)(const key_spec *k, const line_ref *lr);

struct key_spec {
    const char *key;
    key_type type;
    size_t off;                 /* offsetof(sdnn_config, field) */
    size_t size;                /* sizeof the field */
    double lo, hi;              /* KT_INT, KT_NUM */
    int lo_open, hi_open;       /* KT_NUM */
    int auto_zero;              /* KT_NUM: the value `auto` stores 0 */
    name_check check;           /* KT_NAME */
    const char *(*names)(void); /* the %s of `allowed`: a registry's names */
    const char *allowed;        /* what the value may be */
    const char *expect;         /* a bad value's "expected ..." when it says more */
    const char *codec;          /* the key belongs to compress=codec ("*": any
                                 * codec but none); NULL: to every setting */
    int shown;                  /* printed by sdnn_config_describe */
    sdnn_key_group group;       /* what every process must share (agree.c) */
    const char *def_text;       /* the default when the field's value does not say it */
    const char *help;           /* one line for `scalednn keys` */
};

enum {
    K_MODE, K_BACKEND, K_ENGINE, K_VIRTUAL, K_PRELOAD, K_SPLIT, K_COMM_TIMEOUT, K_FIX_1X1_DELTA, K_FIX_BN_DELTA,
    K_FIX_REGION_DELTA, K_FIX_1X1_STRIDE, K_CPU_CONV, K_BUCKET_MB, K_OVERLAP,
    K_INTERVAL, K_COMPRESS, K_CSV, K_TOPK_RATIO, K_TOPK_MOMENTUM, K_TOPK_WARMUP,
    K_INT8_CHUNK, K_STOCHASTIC, K_COMPRESS_ALLOW, K_ITER_FACTOR, K_ERROR_FEEDBACK, K_COMPRESS_MIN_KB,
    K_TIMELINE, K_LINK, K_LINK_GBPS, K_LINK_US, K_PROFILE_ITERS, K_REPLAN_DRIFT, N_KEYS
};

static const char *const g_modes[] = { [SDNN_MODE_SCALEDNN] = "scalednn",
                                       [SDNN_MODE_STOCK] = "stock" };

static const char *mode_names(void) { return "scalednn, stock"; }

/* The lossy codecs of the registry, "fp16, bf16, int8, topk". */
static char g_lossy[128];
static pthread_once_t g_lossy_once = PTHREAD_ONCE_INIT;

static void lossy_build(void)
{
    size_t at = 0;
    const char *p = sdnn_codec_names();
    while (*p) {
        const char *end = strstr(p, ", ");
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)len, p);
        const sdnn_codec_ops *c = sdnn_codec_find(name);
        if (c && c->lossy) {
            int w = snprintf(g_lossy + at, sizeof g_lossy - at, "%s%s", at ? ", " : "", name);
            if (w < 0 || (size_t)w >= sizeof g_lossy - at) break;
            at += (size_t)w;
        }
        if (!end) break;
        p = end + 2;
    }
}

static const char *lossy_names(void)
{
    pthread_once(&g_lossy_once, lossy_build);
    return g_lossy;
}

static sdnn_status check_backend(const key_spec *k, const line_ref *lr);
static sdnn_status check_engine(const key_spec *k, const line_ref *lr);
static sdnn_status check_compress(const key_spec *k, const line_ref *lr);
static sdnn_status check_compress_allow(const key_spec *k, const line_ref *lr);
static sdnn_status check_iter_factor(const key_spec *k, const line_ref *lr);
static sdnn_status check_link(const key_spec *k, const line_ref *lr);
static sdnn_status check_split(const key_spec *k, const line_ref *lr);
static const char *split_names(void) { return "cpu, device0"; }
static sdnn_status check_cpu_conv(const key_spec *k, const line_ref *lr);
static const char *cpu_conv_names(void) { return "darknet, onednn, auto"; }

#define F(field) offsetof(sdnn_config, field), sizeof ((sdnn_config *)0)->field

static const key_spec g_keys[N_KEYS] = {
    [K_MODE] = {
        .key = "mode", .type = KT_MODE, F(mode), .names = mode_names,
        .allowed = "scalednn or stock", .shown = 1,
        .help = "scalednn: gradients averaged every step; stock: Darknet's weight averaging",
        .group = SDNN_KEYS_MODE },
    [K_BACKEND] = {
        .key = "backend", .type = KT_NAME, F(backend), .check = check_backend,
        .names = sdnn_comm_built_names, .allowed = "a backend (available: %s, auto)", .shown = 1,
        .help = "local: replicas of one process; mpi: processes started by mpirun too "
            "(the gpu engine: each process's device mean, then mpi); nccl: engine=gpu, one "
            "NCCL communicator over every device of every process (the id through mpi); "
            "auto: under mpirun with more than one process nccl for the gpu engine where the "
            "build has NCCL, else mpi; local alone" },
    [K_ENGINE] = {
        .key = "engine", .type = KT_NAME, F(engine), .check = check_engine,
        .names = sdnn_engine_names, .allowed = "an engine (%s) or auto",
        .help = "what trains the replicas; auto: gpu when it can run them, else cpu" },
    [K_VIRTUAL] = {
        .key = "virtual", .type = KT_BOOL, F(virtual_devices), .allowed = "0 or 1",
        .expect = "0 (each -gpus id once, as Darknet) or 1 (an id may repeat)",
        .help = "1: -gpus may name a device more than once (-gpus 0,0: two replicas on "
            "device 0)" },
    [K_PRELOAD] = {
        .key = "preload", .type = KT_INT, F(preload), .lo = 1, .hi = 8,
        .allowed = "an integer >= 1 and <= 8", .shown = 1,
        .help = "engine=gpu: step batches copied to the devices ahead of training (1: none "
            "ahead); engine=cpu reads the host batch in place and holds 1" },
    [K_SPLIT] = {
        .key = "split", .type = KT_NAME, F(split), .check = check_split, .names = split_names,
        .allowed = "cpu or device0", .shown = 1,
        .help = "engine=gpu: cpu: the host sends each device its rows; device0: the batch "
            "goes to device 0 and is scattered device to device (engine=cpu: cpu only)" },
    [K_COMM_TIMEOUT] = {
        .key = "comm_timeout_s", .type = KT_NUM, F(comm_timeout_s), .lo = 0.0, .hi = 86400.0,
        .lo_open = 1, .allowed = "a number of seconds > 0 and <= 86400",
        .help = "mpi: seconds without progress from a peer before a step fails" },
    [K_FIX_1X1_DELTA] = {
        .key = "fix_1x1_delta", .type = KT_BOOL, F(fix_1x1_delta), .allowed = "0 or 1",
        .expect = "0 (Darknet's overwriting 1x1 backward) or 1 (adds, the default)",
        .help = "1: a 1x1 convolution's backward adds to its input's delta; "
            "0: Debian's libdarknet, which overwrites it" },
    [K_FIX_BN_DELTA] = {
        .key = "fix_bn_delta", .type = KT_BOOL, F(fix_bn_delta), .allowed = "0 or 1",
        .expect = "0 (Darknet's batch-norm backward, off by about 1/N) or 1 (exact, the default)",
        .help = "1: batch norm's backward is the exact derivative of its forward (variance "
            "over N-1); 0: Debian's libdarknet, which differentiates as if over N" },
    [K_FIX_REGION_DELTA] = {
        .key = "fix_region_delta", .type = KT_BOOL, F(fix_region_delta), .allowed = "0 or 1",
        .expect = "0 (Darknet's CPU [region] backward, which sends nothing) or 1 (its GPU "
            "build's, the default)",
        .help = "1: a [region] layer's backward passes its delta on (times the logistic's "
            "derivative on x, y and objectness), as Darknet's GPU build and the gpu engine do; "
            "0: Debian's libdarknet CPU build, whose backward is empty" },
    [K_FIX_1X1_STRIDE] = {
        .key = "fix_1x1_stride", .type = KT_BOOL, F(fix_1x1_stride), .allowed = "0 or 1",
        .expect = "0 (Darknet's 1x1 convolution on the unstrided input) or 1 (strided, the "
            "default)",
        .help = "1: a 1x1 convolution with stride > 1 or padding reads the strided input "
            "pixels, forward and backward; 0 (engine=cpu, cpu_conv=darknet only): Debian's "
            "libdarknet, which reads the input as if unstrided (the gpu engine and oneDNN are "
            "always right)" },
    [K_CPU_CONV] = {
        .key = "cpu_conv", .type = KT_NAME, F(cpu_conv), .check = check_cpu_conv,
        .names = cpu_conv_names, .allowed = "darknet, onednn or auto", .shown = 1,
        .help = "engine=cpu, scalednn and stock mode: darknet: libdarknet's im2col + gemm "
            "convolutions (bit for bit libdarknet's train_network); onednn: oneDNN's (builds "
            "with libdnnl-dev; mish/swish convolutions stay on libdarknet's, the start banner "
            "lists them); auto (the default): onednn where the build has it, else darknet" },
    [K_BUCKET_MB] = {
        .key = "bucket_mb", .type = KT_NUM, F(bucket_mb), .lo = 0.0, .hi = 4096.0, .lo_open = 1,
        .auto_zero = 1, .allowed = "auto or a number of MiB > 0 and <= 4096", .shown = 1,
        .help = "exchange bucket size; auto: planned from a profile of the first steps",
        .group = SDNN_KEYS_BUCKETS },
    [K_OVERLAP] = {
        .key = "overlap", .type = KT_BOOL, F(overlap), .allowed = "0 or 1", .shown = 1,
        .help = "1: a bucket's exchange starts as soon as its layers' backward is done",
        .group = SDNN_KEYS_BUCKETS },
    [K_INTERVAL] = {
        .key = "interval", .type = KT_INT, F(interval), .lo = 1, .hi = 1000000,
        .allowed = "an integer >= 1 and <= 1000000", .shown = 1,
        .help = "stock mode: iterations between weight averages", .group = SDNN_KEYS_MODE },
    [K_COMPRESS] = {
        .key = "compress", .type = KT_NAME, F(compress), .check = check_compress,
        .names = sdnn_codec_names, .allowed = "a codec (%s, auto)", .shown = 1,
        .help = "gradient codec; auto: the planner picks per bucket among compress_allow",
        .group = SDNN_KEYS_CODEC },
    [K_CSV] = {
        .key = "csv", .type = KT_PATH, F(csv), .allowed = "a file path", .shown = 1,
        .def_text = "BACKUP/CFG.csv", .help = "per-iteration CSV" },
    [K_TOPK_RATIO] = {
        .key = "topk_ratio", .type = KT_NUM, F(topk_ratio), .lo = 0.0, .hi = 1.0, .lo_open = 1,
        .allowed = "a fraction > 0 and <= 1 (e.g. 0.01)", .codec = "topk", .shown = 1,
        .help = "fraction of each bucket kept", .group = SDNN_KEYS_CODEC },
    [K_TOPK_MOMENTUM] = {
        .key = "topk_momentum", .type = KT_NUM, F(topk_momentum), .lo = 0.0, .hi = 1.0,
        .hi_open = 1, .allowed = "a number >= 0 and < 1 (e.g. 0.9)", .codec = "topk", .shown = 1,
        .help = "DGC momentum correction (needs error_feedback=1 and [net] momentum=0)",
        .group = SDNN_KEYS_CODEC },
    [K_TOPK_WARMUP] = {
        .key = "topk_warmup", .type = KT_INT, F(topk_warmup), .lo = 0, .hi = 100000000,
        .allowed = "an integer number of iterations >= 0 and <= 100000000", .codec = "topk",
        .shown = 1,
        .help = "iterations over which the kept fraction falls from 1 to topk_ratio",
        .group = SDNN_KEYS_CODEC },
    [K_INT8_CHUNK] = {
        .key = "int8_chunk", .type = KT_INT, F(int8_chunk), .lo = 1, .hi = 1048576,
        .allowed = "an integer >= 1 and <= 1048576", .codec = "int8", .shown = 1,
        .help = "elements per scale", .group = SDNN_KEYS_CODEC },
    [K_STOCHASTIC] = {
        .key = "stochastic_rounding", .type = KT_BOOL, F(stochastic_rounding),
        .allowed = "0 or 1", .codec = "int8", .shown = 1,
        .help = "1: stochastic rounding, 0: nearest even", .group = SDNN_KEYS_CODEC },
    [K_COMPRESS_ALLOW] = {
        .key = "compress_allow", .type = KT_NAME, F(compress_allow),
        .check = check_compress_allow, .names = sdnn_codec_names,
        .allowed = "a comma-separated list of codecs (%s) including none", .codec = "auto",
        .shown = 1, .help = "compress=auto: the codecs the planner may choose",
        .group = SDNN_KEYS_CODEC },
    [K_ITER_FACTOR] = {
        .key = "iter_factor", .type = KT_NAME, F(iter_factor), .check = check_iter_factor,
        .names = sdnn_codec_names,
        .allowed = "a comma-separated list of CODEC:FACTOR (codecs: %s; a factor > 0 and "
            "<= 100, none only 1), e.g. fp16:1.0,int8:1.2,topk:1.5", .codec = "auto",
        .def_text = "each codec's stated factor, listed by `scalednn plan`",
        .help = "compress=auto: iterations to the target with a codec / with none; the "
            "planner minimises step time x factor (codecs not listed keep their own)",
        .group = SDNN_KEYS_CODEC },
    [K_ERROR_FEEDBACK] = {
        .key = "error_feedback", .type = KT_BOOL, F(error_feedback), .allowed = "0 or 1",
        .codec = "*", .shown = 1, .def_text = "1 for topk, else 0",
        .help = "keep what a lossy codec did not send and add it to the next step",
        .group = SDNN_KEYS_CODEC },
    [K_COMPRESS_MIN_KB] = {
        .key = "compress_min_kb", .type = KT_NUM, F(compress_min_kb), .lo = 0.0, .hi = 4194304.0,
        .allowed = "a number of KiB >= 0 and <= 4194304", .codec = "*", .shown = 1,
        .help = "buckets smaller than this stay uncompressed", .group = SDNN_KEYS_CODEC },
    [K_TIMELINE] = {
        .key = "timeline", .type = KT_PATH, F(timeline),
        .allowed = "a file path (Chrome trace JSON)",
        .help = "Chrome trace of every step (ui.perfetto.dev, chrome://tracing)" },
    [K_LINK] = {
        .key = "link", .type = KT_NAME, F(link), .check = check_link, .names = sdnn_link_names,
        .allowed = "a link name (%s)", .def_text = "probe the backend",
        .help = "the link model of the planner (bucket_mb=auto) and of engine=gpu's "
                "collective per bucket over NCCL",
        .group = SDNN_KEYS_BUCKETS },
    [K_LINK_GBPS] = {
        .key = "link_gbps", .type = KT_NUM, F(link_gbps), .lo = 0.0, .hi = 1e6, .lo_open = 1,
        .allowed = "a bandwidth in Gbit/s > 0 and <= 1000000 (e.g. 1 for 1 Gbit Ethernet)",
        .def_text = "unset",
        .help = "an explicit link's bandwidth (as link=)", .group = SDNN_KEYS_BUCKETS },
    [K_LINK_US] = {
        .key = "link_us", .type = KT_NUM, F(link_us), .lo = 0.0, .hi = 1e7,
        .allowed = "a latency in microseconds >= 0 and <= 10000000",
        .help = "with link_gbps: the link's latency",
        .group = SDNN_KEYS_BUCKETS },
    [K_PROFILE_ITERS] = {
        .key = "profile_iters", .type = KT_INT, F(profile_iters), .lo = 1, .hi = 100000,
        .allowed = "an integer number of steps >= 1 and <= 100000",
        .help = "bucket_mb=auto: steps profiled before planning", .group = SDNN_KEYS_BUCKETS },
    [K_REPLAN_DRIFT] = {
        .key = "replan_drift", .type = KT_NUM, F(replan_drift), .lo = 0.0, .hi = 100.0,
        .lo_open = 1, .allowed = "a fraction > 0 and <= 100 (e.g. 0.25)",
        .help = "re-plan when the step drifts this fraction from the prediction",
        .group = SDNN_KEYS_BUCKETS },
};

#undef F

/* ">= 1 and <= 8", "> 0 and < 1": a numeric key's range as the table
 * holds it, both ends, open or closed. */
static void range_text(const key_spec *k, char *buf, size_t len)
{
    snprintf(buf, len, "%s %.15g and %s %.15g", k->lo_open ? ">" : ">=", k->lo,
             k->hi_open ? "<" : "<=", k->hi);
}

/* What key k's value may be, registry names filled in.  A numeric key's
 * text always states the range it is checked against: where the table's
 * words do not, the range is added from the bounds. */
static void allowed_text(const key_spec *k, char *buf, size_t len)
{
    if (k->names && strstr(k->allowed, "%s")) snprintf(buf, len, k->allowed, k->names());
    else snprintf(buf, len, "%s", k->allowed);
    if (k->type != KT_INT && k->type != KT_NUM) return;
    char range[96];
    range_text(k, range, sizeof range);
    size_t at = strlen(buf);
    if (!strstr(buf, range) && at < len)
        snprintf(buf + at, len - at, " (allowed: %s)", range);
}

int sdnn_config_key_range(size_t i, double *lo, double *hi, int *lo_open, int *hi_open)
{
    if (i >= N_KEYS || (g_keys[i].type != KT_INT && g_keys[i].type != KT_NUM)) return 0;
    *lo = g_keys[i].lo;
    *hi = g_keys[i].hi;
    *lo_open = g_keys[i].lo_open;
    *hi_open = g_keys[i].hi_open;
    return g_keys[i].type == KT_INT ? 1 : 2;
}

/* "expected <allowed>" for a value that does not parse. */
static sdnn_status expected(const key_spec *k, const line_ref *lr)
{
    char allowed[256], what[300];
    if (k->expect) snprintf(allowed, sizeof allowed, "%s", k->expect);
    else allowed_text(k, allowed, sizeof allowed);
    snprintf(what, sizeof what, "expected %s", allowed);
    return line_error(lr, SDNN_ERR_INVALID, what);
}

/* "mode, backend, ..." in table order. */
static void key_names(char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < N_KEYS; ++k) {
        int w = snprintf(buf + at, len - at, "%s%s", k ? ", " : "", g_keys[k].key);
        if (w < 0 || (size_t)w >= len - at) break;
        at += (size_t)w;
    }
}

/* ---- the registry-named values ----------------------------------------- */

/* backend=: a name from the comm registry this build has, or auto (resolved
 * when the trainer opens its backend, sdnn_config_backend: the same cfg
 * trains alone or under mpirun). */
static sdnn_status check_backend(const key_spec *k, const line_ref *lr)
{
    char what[384], allowed[192];
    if (strcmp(lr->value, "auto") == 0) return SDNN_OK;
    int known = sdnn_comm_known(lr->value);
    if (known == 1) return SDNN_OK;
    if (known == 0) {
        allowed_text(k, allowed, sizeof allowed);
        const char *lacks = sdnn_comm_lacks(lr->value);
        snprintf(what, sizeof what, "not available in this build%s%s (available: %s, auto)",
                 lacks ? ": " : "", lacks ? lacks : "", sdnn_comm_built_names());
        return line_error(lr, SDNN_ERR_UNSUPPORTED, what);
    }
    snprintf(what, sizeof what, "unknown backend (%s, auto)", sdnn_comm_names());
    return line_error(lr, SDNN_ERR_INVALID, what);
}

/* engine=: a name from the engine registry (engine.c) or auto; what auto
 * becomes is decided when the trainer starts (it needs -gpus). */
static sdnn_status check_engine(const key_spec *k, const line_ref *lr)
{
    (void)k;
    if (strcmp(lr->value, "auto") == 0 || sdnn_engine_find(lr->value)) return SDNN_OK;
    char what[192];
    snprintf(what, sizeof what, "unknown engine (%s, auto)", sdnn_engine_names());
    return line_error(lr, SDNN_ERR_INVALID, what);
}

/* split=: cpu or device0 (the engine decides whether it can: engine.h). */
static sdnn_status check_split(const key_spec *k, const line_ref *lr)
{
    (void)k;
    if (strcmp(lr->value, "cpu") == 0 || strcmp(lr->value, "device0") == 0) return SDNN_OK;
    return line_error(lr, SDNN_ERR_INVALID, "unknown split (cpu, device0)");
}

/* cpu_conv=: darknet, onednn (only in a build with oneDNN) or auto. */
static sdnn_status check_cpu_conv(const key_spec *k, const line_ref *lr)
{
    (void)k;
    if (strcmp(lr->value, "darknet") == 0 || strcmp(lr->value, "auto") == 0) return SDNN_OK;
    if (strcmp(lr->value, "onednn") == 0) {
        if (sdnn_conv_dnnl_built()) return SDNN_OK;
        return line_error(lr, SDNN_ERR_UNSUPPORTED, "this build has no oneDNN (install "
                          "libdnnl-dev, scripts/setup.sh, and rebuild; or use darknet, auto)");
    }
    return line_error(lr, SDNN_ERR_INVALID, "unknown convolution path (darknet, onednn, auto)");
}

int sdnn_config_cpu_conv_onednn(const sdnn_config *c)
{
    if (strcmp(c->cpu_conv, "onednn") == 0) return 1;
    return strcmp(c->cpu_conv, "auto") == 0 && sdnn_conv_dnnl_built();
}

/* compress=: a codec of the registry (codec.c) or auto. */
static sdnn_status check_compress(const key_spec *k, const line_ref *lr)
{
    (void)k;
    if (strcmp(lr->value, "auto") == 0 || sdnn_codec_find(lr->value)) return SDNN_OK;
    char what[192];
    snprintf(what, sizeof what, "unknown codec (%s, auto)", sdnn_codec_names());
    return line_error(lr, SDNN_ERR_INVALID, what);
}

/* compress_allow=: codecs of the registry, comma-separated, none among them. */
static sdnn_status check_compress_allow(const key_spec *k, const line_ref *lr)
{
    if (strlen(lr->value) >= k->size) return expected(k, lr);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", lr->value);
    int lossless = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        const sdnn_codec_ops *c = sdnn_codec_find(tok);
        if (!c) {
            char what[192];
            snprintf(what, sizeof what, "unknown codec %.32s in the list (%s)", tok,
                     sdnn_codec_names());
            return line_error(lr, SDNN_ERR_INVALID, what);
        }
        lossless |= !c->lossy;
    }
    if (!lossless)
        return line_error(lr, SDNN_ERR_INVALID,
                          "the list must include none (small buckets stay uncompressed)");
    return SDNN_OK;
}

/* iter_factor=: NAME:X overrides of the codecs' iteration factors
 * (costmodel.c, sdnn_iter_factor_check says what is wrong). */
static sdnn_status check_iter_factor(const key_spec *k, const line_ref *lr)
{
    if (!lr->value[0]) return expected(k, lr);
    if (strlen(lr->value) >= k->size) {
        char what[96];
        snprintf(what, sizeof what, "too long (at most %zu characters)", k->size - 1);
        return line_error(lr, SDNN_ERR_INVALID, what);
    }
    char why[256];
    if (sdnn_iter_factor_check(lr->value, why, sizeof why) == 0) return SDNN_OK;
    return line_error(lr, SDNN_ERR_INVALID, why);
}

/* link=: a named link of the cost model (costmodel.c). */
static sdnn_status check_link(const key_spec *k, const line_ref *lr)
{
    sdnn_link l;
    if (strlen(lr->value) < k->size && sdnn_link_find(lr->value, &l) == SDNN_OK) return SDNN_OK;
    sdnn_clear_error();
    char what[256];
    snprintf(what, sizeof what, "unknown link (%s)", sdnn_link_names());
    return line_error(lr, SDNN_ERR_INVALID, what);
}

/* ---- numbers --------------------------------------------------------------- */

/* Decimal notation only: strtod also reads "0x10" (as 16), "inf", "nan". */
static int decimal_text(const char *s)
{
    for (const char *p = s; *p; ++p)
        if (!strchr("0123456789+-.eE", *p)) return 0;
    return *s != '\0';
}

/* A finite number in [lo, hi] (lo_open: > lo, hi_open: < hi). */
static int parse_number(const char *text, double lo, double hi, int lo_open,
                        int hi_open, double *out)
{
    if (!decimal_text(text)) return 0;
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v))
        return 0;
    if (lo_open ? !(v > lo) : !(v >= lo)) return 0;
    if (hi_open ? !(v < hi) : !(v <= hi)) return 0;
    *out = v;
    return 1;
}

static int parse_integer(const char *text, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

/* Store lr->value into key k's field of cfg, or say what is wrong. */
static sdnn_status parse_value(const key_spec *k, const line_ref *lr, sdnn_config *cfg)
{
    char *field = (char *)cfg + k->off;
    const char *v = lr->value;
    long l;
    double d;
    switch (k->type) {
    case KT_MODE:
        for (size_t m = 0; m < sizeof g_modes / sizeof g_modes[0]; ++m)
            if (strcmp(v, g_modes[m]) == 0) {
                *(sdnn_mode *)(void *)field = (sdnn_mode)m;
                return SDNN_OK;
            }
        return line_error(lr, SDNN_ERR_INVALID, "unknown mode (scalednn, stock)");
    case KT_NAME:
        SDNN_CHECK(k->check(k, lr));
        if (strlen(v) >= k->size) return expected(k, lr);
        snprintf(field, k->size, "%s", v);
        return SDNN_OK;
    case KT_PATH:
        if (strlen(v) >= k->size) {
            char what[96];
            snprintf(what, sizeof what, "path too long (at most %zu characters)", k->size - 1);
            return line_error(lr, SDNN_ERR_INVALID, what);
        }
        snprintf(field, k->size, "%s", v);
        return SDNN_OK;
    case KT_BOOL:
        if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0) return expected(k, lr);
        *(int *)(void *)field = v[0] == '1';
        return SDNN_OK;
    case KT_INT:
        if (!parse_integer(v, (long)k->lo, (long)k->hi, &l)) return expected(k, lr);
        *(int *)(void *)field = (int)l;
        return SDNN_OK;
    case KT_NUM:
        if (k->auto_zero && strcmp(v, "auto") == 0) d = 0.0;
        else if (!parse_number(v, k->lo, k->hi, k->lo_open, k->hi_open, &d))
            return expected(k, lr);
        *(double *)(void *)field = d;
        return SDNN_OK;
    }
    return expected(k, lr);
}

/* Key k's value in cfg as a cfg would write it ("-" for an empty path). */
static void format_value(const key_spec *k, const sdnn_config *cfg, char *buf, size_t len)
{
    const char *field = (const char *)cfg + k->off;
    /* Under compress=auto error feedback is each bucket's codec's (on for
     * topk), not a setting. */
    if (k == &g_keys[K_ERROR_FEEDBACK] && strcmp(cfg->compress, "auto") == 0) {
        snprintf(buf, len, "auto");
        return;
    }
    switch (k->type) {
    case KT_MODE: {
        int m = *(const int *)(const void *)field;
        snprintf(buf, len, "%s", m >= 0 && m < (int)(sizeof g_modes / sizeof g_modes[0])
                                     ? g_modes[m] : "?");
        return;
    }
    case KT_NAME:
    case KT_PATH:
        snprintf(buf, len, "%s", field[0] ? field : "-");
        return;
    case KT_BOOL:
    case KT_INT:
        snprintf(buf, len, "%d", *(const int *)(const void *)field);
        return;
    case KT_NUM: {
        double d = *(const double *)(const void *)field;
        if (k->auto_zero && d == 0.0) snprintf(buf, len, "auto");
        else snprintf(buf, len, "%g", d);
        return;
    }
    }
    snprintf(buf, len, "?");
}

/* 1 when the comma-separated list has `name` as one of its items. */
static int list_has(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return 1;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

/* Does key k mean something for cfg's compress=?  A codec's own keys
 * (topk_ratio, int8_chunk, ...) also under compress=auto when the codec is
 * one the planner may choose (compress_allow). */
static int key_applies(const key_spec *k, const sdnn_config *cfg)
{
    if (!k->codec) return 1;
    if (strcmp(k->codec, "*") == 0) return strcmp(cfg->compress, "none") != 0;
    if (strcmp(k->codec, cfg->compress) == 0) return 1;
    return strcmp(k->codec, "auto") != 0 && strcmp(cfg->compress, "auto") == 0 &&
           list_has(cfg->compress_allow, k->codec);
}

/* Stock mode averages weights, uncompressed, as Darknet does: compress=auto
 * (the default) has nothing to choose there and becomes none. */
static void resolve_stock_compress(sdnn_config *c)
{
    if (c->mode == SDNN_MODE_STOCK && strcmp(c->compress, "auto") == 0)
        snprintf(c->compress, sizeof c->compress, "none");
}

void sdnn_config_describe_group(const sdnn_config *cfg, sdnn_key_group group, char *buf,
                                size_t len)
{
    if (buf == NULL || len == 0) return;
    buf[0] = '\0';
    size_t at = 0;
    for (size_t i = 0; i < N_KEYS && at + 1 < len; ++i) {
        const key_spec *k = &g_keys[i];
        if (k->group != group) continue;
        char v[1100];
        format_value(k, cfg, v, sizeof v);
        int w = snprintf(buf + at, len - at, "%s%s=%s", at ? " " : "", k->key, v);
        if (w < 0) break;
        at += (size_t)w < len - at ? (size_t)w : len - at - 1;
    }
}

size_t sdnn_config_key_count(void) { return N_KEYS; }

const char *sdnn_config_key_name(size_t i) { return i < N_KEYS ? g_keys[i].key : NULL; }

void sdnn_config_print_keys(FILE *f)
{
    const sdnn_config def = SDNN_CONFIG_INIT;
    fprintf(f, "[scalednn] keys (key=value lines of the cfg's [scalednn] section):\n");
    for (size_t i = 0; i < N_KEYS; ++i) {
        const key_spec *k = &g_keys[i];
        char allowed[256], dv[64];
        allowed_text(k, allowed, sizeof allowed);
        if (k->def_text) snprintf(dv, sizeof dv, "%s", k->def_text);
        else format_value(k, &def, dv, sizeof dv);
        fprintf(f, "  %-20s %s (default %s)", k->key, allowed, dv);
        if (k->codec && strcmp(k->codec, "*") == 0) fprintf(f, "; with a codec");
        else if (k->codec) fprintf(f, "; compress=%s only", k->codec);
        fprintf(f, "\n  %-20s %s\n", "", k->help);
    }
}

/* ---- the line loop ------------------------------------------------------- */

typedef struct parse_state {
    const char *name;
    sdnn_config *cfg;
    char *line;             /* scratch: the current line without whitespace */
    char *out;              /* stripped text being built, NULL if not wanted */
    size_t out_len;
    int in_section;         /* inside [scalednn] */
    int section_line;       /* line of the [scalednn] header, 0 = not seen */
    int key_line[N_KEYS];   /* line where each key was set, 0 = not set */
} parse_state;

/* Copy src[0..len) into dst without any whitespace.  Darknet's reader drops
 * spaces, tabs and the line end; '\r' and the rest go too, for CRLF files. */
static void strip_whitespace(const char *src, size_t len, char *dst)
{
    for (size_t i = 0; i < len; i++)
        if (!isspace((unsigned char)src[i])) *dst++ = src[i];
    *dst = '\0';
}

static sdnn_status on_header(parse_state *ps, int lineno)
{
    if (strcmp(ps->line, SECTION_HEADER) != 0) {
        ps->in_section = 0;
        return SDNN_OK;
    }
    if (ps->section_line != 0)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "%s:%d: [scalednn]: second [scalednn] section "
                          "(first at line %d); only one is allowed",
                          ps->name, lineno, ps->section_line);
    ps->section_line = lineno;
    ps->in_section = 1;
    ps->cfg->present = 1;
    return SDNN_OK;
}

static sdnn_status on_key_value(parse_state *ps, int lineno)
{
    line_ref lr = { ps->name, lineno, ps->line, NULL };
    char keys[512], what[800];
    key_names(keys, sizeof keys);
    char *eq = strchr(ps->line, '=');
    if (eq == NULL) {
        snprintf(what, sizeof what, "expected key=value (keys: %s)", keys);
        return line_error(&lr, SDNN_ERR_INVALID, what);
    }
    *eq = '\0';
    lr.value = eq + 1;
    for (size_t k = 0; k < N_KEYS; k++) {
        if (strcmp(lr.key, g_keys[k].key) != 0) continue;
        if (ps->key_line[k] != 0) {
            snprintf(what, sizeof what,
                     "repeated key (first at line %d); each key may appear once",
                     ps->key_line[k]);
            return line_error(&lr, SDNN_ERR_INVALID, what);
        }
        ps->key_line[k] = lineno;
        if (lr.value[0] == '\0') {
            char allowed[256];
            allowed_text(&g_keys[k], allowed, sizeof allowed);
            snprintf(what, sizeof what, "empty value; expected %s", allowed);
            return line_error(&lr, SDNN_ERR_INVALID, what);
        }
        return parse_value(&g_keys[k], &lr, ps->cfg);
    }
    const char *names[N_KEYS];
    for (size_t k = 0; k < N_KEYS; k++) names[k] = g_keys[k].key;
    char near[160];
    snprintf(near, sizeof near, "%s", lr.key[0] ? sdnn_nearest_name(lr.key, names, N_KEYS, NULL) : "");
    snprintf(what, sizeof what, "unknown key (%s)%s%s", keys, near[0] ? "; nearest known key: " : "",
             near);
    return line_error(&lr, SDNN_ERR_INVALID, what);
}

/* Handle one line; `text` has `len` bytes, `full` counting its newline. */
static sdnn_status on_line(parse_state *ps, const char *text, size_t len,
                           size_t full, int lineno)
{
    strip_whitespace(text, len, ps->line);
    int drop = 0;
    if (ps->line[0] == '[') {
        SDNN_CHECK(on_header(ps, lineno));
        drop = ps->in_section;
    } else if (ps->in_section) {
        drop = 1;
        char c = ps->line[0];
        if (c != '\0' && c != '#' && c != ';')
            SDNN_CHECK(on_key_value(ps, lineno));
    }
    if (!drop && ps->out != NULL) {
        memcpy(ps->out + ps->out_len, text, full);
        ps->out_len += full;
    }
    return SDNN_OK;
}

static sdnn_status parse_lines(parse_state *ps, const char *text)
{
    int lineno = 0;
    const char *p = text;
    while (*p != '\0') {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        size_t full = nl ? len + 1 : len;
        SDNN_CHECK(on_line(ps, p, len, full, ++lineno));
        p += full;
    }
    return SDNN_OK;
}

/* "NAME:LINE: [scalednn] key: what" for a key that clashes with another. */
static sdnn_status combination_error(const parse_state *ps, int k, const char *what)
{
    return SDNN_ERROR(SDNN_ERR_INVALID, "%s:%d: [scalednn] %s: %s", ps->name,
                      ps->key_line[k], g_keys[k].key, what);
}

/* Keys that only mean something with certain other values. */
static sdnn_status check_combinations(parse_state *ps)
{
    sdnn_config *c = ps->cfg;
    const int *set = ps->key_line;
    char what[400];
    int stock_auto = c->mode == SDNN_MODE_STOCK && strcmp(c->compress, "auto") == 0;
    resolve_stock_compress(c);
    /* compress=auto chooses the codecs with the buckets (the planner of
     * bucket_mb=auto): with a fixed bucket_mb the default is none, and an
     * explicit compress=auto is a contradiction said so. */
    int fixed_auto = 0;
    if (strcmp(c->compress, "auto") == 0 && c->bucket_mb > 0) {
        if (set[K_COMPRESS]) {
            snprintf(what, sizeof what, "compress=auto plans the codecs together with the "
                     "buckets: it needs bucket_mb=auto (bucket_mb=%g on line %d); name a codec "
                     "(%s) to use it with fixed buckets", c->bucket_mb, set[K_BUCKET_MB],
                     lossy_names());
            return combination_error(ps, K_COMPRESS, what);
        }
        snprintf(c->compress, sizeof c->compress, "none");
        fixed_auto = 1;
    }
    int none = strcmp(c->compress, "none") == 0;
    int autoc = strcmp(c->compress, "auto") == 0;
    if (c->mode == SDNN_MODE_STOCK && !none)
        return combination_error(ps, K_COMPRESS,
                                 "compression needs mode=scalednn (stock mode "
                                 "averages weights, uncompressed, as Darknet does)");
    /* The keys of one codec (the table's `codec`). */
    for (int k = 0; k < N_KEYS; k++) {
        const char *only = g_keys[k].codec;
        if (!set[k] || !only || strcmp(only, "*") == 0 || key_applies(&g_keys[k], c)) continue;
        if (stock_auto)
            snprintf(what, sizeof what, "applies to compress=%s only (mode=stock averages "
                     "weights uncompressed)", only);
        else if (fixed_auto)
            snprintf(what, sizeof what, "applies to compress=%s only (the default, compress=auto, "
                     "is none with a fixed bucket_mb=%g: auto plans codecs with bucket_mb=auto)",
                     only, c->bucket_mb);
        else if (autoc)
            snprintf(what, sizeof what, "applies to compress=%s only, or to compress=auto "
                     "with %s in compress_allow (compress=auto%s, compress_allow=%s)", only, only,
                     set[K_COMPRESS] ? "" : ", the default", c->compress_allow);
        else
            snprintf(what, sizeof what, "applies to compress=%s only (compress=%s%s)", only,
                     c->compress, set[K_COMPRESS] ? "" : ", the default");
        return combination_error(ps, k, what);
    }
    if (none && set[K_COMPRESS_MIN_KB]) {
        snprintf(what, sizeof what, "needs a codec (compress=%s)", lossy_names());
        return combination_error(ps, K_COMPRESS_MIN_KB, what);
    }
    if (none && c->error_feedback == 1) {
        snprintf(what, sizeof what, "needs a lossy codec (compress=%s); compress=none loses "
                 "nothing", lossy_names());
        return combination_error(ps, K_ERROR_FEEDBACK, what);
    }
    if (c->error_feedback < 0) {
        /* Default: on for a sparse codec (topk), whose residual is most of
         * the gradient; off for the dense ones. */
        const sdnn_codec_ops *codec = sdnn_codec_find(c->compress);
        c->error_feedback = codec && !codec->dense;
    }
    if (autoc && c->topk_momentum > 0)
        return combination_error(ps, K_TOPK_MOMENTUM,
                                 "momentum correction needs compress=topk (under compress=auto "
                                 "error feedback follows each bucket's codec)");
    if (c->topk_momentum > 0 && !c->error_feedback)
        return combination_error(ps, K_TOPK_MOMENTUM,
                                 "momentum correction accumulates in the error-"
                                 "feedback residual; it needs error_feedback=1");
    if (autoc && set[K_ERROR_FEEDBACK] && c->error_feedback) {
        snprintf(what, sizeof what, "with compress=auto%s error feedback follows the codec "
                 "chosen for each bucket (on for topk, off otherwise); set compress= to a codec "
                 "to choose it yourself", set[K_COMPRESS] ? "" : " (the default)");
        return combination_error(ps, K_ERROR_FEEDBACK, what);
    }
    if (set[K_LINK] && (set[K_LINK_GBPS] || set[K_LINK_US]))
        return combination_error(ps, set[K_LINK_GBPS] ? K_LINK_GBPS : K_LINK_US,
                                 "give either link= or link_gbps=/link_us=, not both");
    if (set[K_LINK_US] && !set[K_LINK_GBPS])
        return combination_error(ps, K_LINK_US, "needs link_gbps= (the bandwidth)");
    return SDNN_OK;
}

sdnn_status sdnn_config_parse_text(const char *name, const char *text,
                                   sdnn_config *cfg, char **stripped)
{
    if (stripped != NULL) *stripped = NULL;
    if (name == NULL || text == NULL || cfg == NULL)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "sdnn_config_parse_text: name, text and cfg "
                          "are required");
    const sdnn_config defaults = SDNN_CONFIG_INIT;
    *cfg = defaults;

    size_t size = strlen(text) + 1;
    parse_state ps = { .name = name, .cfg = cfg };
    ps.line = malloc(size);
    if (stripped != NULL) ps.out = malloc(size);
    if (ps.line == NULL || (stripped != NULL && ps.out == NULL)) {
        free(ps.line);
        free(ps.out);
        return SDNN_ERROR(SDNN_ERR_NOMEM, "%s: no memory for a %zu-byte cfg",
                          name, size - 1);
    }
    sdnn_status st = parse_lines(&ps, text);
    if (st == SDNN_OK) st = check_combinations(&ps);
    free(ps.line);
    if (st != SDNN_OK) {
        free(ps.out);
        return st;
    }
    if (!cfg->present) {
        cfg->mode = SDNN_MODE_STOCK;
        resolve_stock_compress(cfg);
    }
    if (stripped != NULL) {
        ps.out[ps.out_len] = '\0';
        *stripped = ps.out;
    }
    return SDNN_OK;
}

/* ---- files --------------------------------------------------------------- */

/* Read the whole of `path` into a malloc'd, NUL-terminated string. */
static sdnn_status read_whole_file(const char *path, char **text)
{
    *text = NULL;
    SDNN_CHECK(sdnn_check_readable(path)); /* a FIFO or a device: refused unopened */
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return SDNN_ERROR(SDNN_ERR_IO, "%s: cannot open cfg: %s", path,
                          strerror(errno));
    sdnn_status st = SDNN_OK;
    size_t cap = 0, len = 0;
    char *buf = NULL;
    for (;;) {
        if (cap - len < 2) {
            size_t grown_cap = cap ? cap * 2 : 4096;
            char *grown = realloc(buf, grown_cap);
            if (grown == NULL) {
                st = SDNN_ERROR(SDNN_ERR_NOMEM, "%s: no memory to read the cfg",
                                path);
                break;
            }
            buf = grown;
            cap = grown_cap;
        }
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n > 0) continue;
        if (ferror(f))
            st = SDNN_ERROR(SDNN_ERR_IO, "%s: cannot read cfg: %s", path,
                            strerror(errno));
        break;
    }
    fclose(f);
    if (st != SDNN_OK) {
        free(buf);
        return st;
    }
    buf[len] = '\0';
    if (memchr(buf, '\0', len) != NULL) {
        free(buf);
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "%s: contains a NUL byte; a cfg must be text", path);
    }
    *text = buf;
    return SDNN_OK;
}

/* Write all of buf to fd, resuming after short writes and EINTR. */
static sdnn_status write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return SDNN_ERROR(SDNN_ERR_SYSTEM,
                              "writing the stripped cfg to a memfd: %s",
                              n < 0 ? strerror(errno) : "wrote nothing");
        buf += n;
        len -= (size_t)n;
    }
    return SDNN_OK;
}

/* Put `text` in a fresh memfd positioned at 0; out->fd stays -1 on failure. */
static sdnn_status make_memfd(const char *text, sdnn_stripped_cfg *out)
{
    int fd = memfd_create("sdnn-cfg", MFD_CLOEXEC);
    if (fd < 0)
        return SDNN_ERROR(SDNN_ERR_SYSTEM,
                          "memfd_create for the stripped cfg: %s",
                          strerror(errno));
    sdnn_status st = write_all(fd, text, strlen(text));
    if (st == SDNN_OK && lseek(fd, 0, SEEK_SET) != 0)
        st = SDNN_ERROR(SDNN_ERR_SYSTEM, "lseek on the stripped cfg memfd: %s",
                        strerror(errno));
    if (st != SDNN_OK) {
        close(fd);
        return st;
    }
    out->fd = fd;
    snprintf(out->path, sizeof out->path, "/proc/self/fd/%d", fd);
    return SDNN_OK;
}

sdnn_status sdnn_config_load(const char *path, sdnn_config *cfg,
                             sdnn_stripped_cfg *out)
{
    if (out != NULL) {
        out->fd = -1;
        out->path[0] = '\0';
    }
    if (path == NULL || cfg == NULL || out == NULL)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "sdnn_config_load: path, cfg and out are required");
    char *text = NULL;
    SDNN_CHECK(read_whole_file(path, &text));
    /* Windows line ends work: Darknet's read_cfg would keep the '\r'. */
    sdnn_cfg_normalize_eol(text);
    char *stripped = NULL;
    sdnn_status st = sdnn_config_parse_text(path, text, cfg, &stripped);
    /* The structure of the rest, before libdarknet sees it (cfgcheck.h). */
    if (st == SDNN_OK) st = sdnn_cfg_check_text(path, text);
    free(text);
    if (st != SDNN_OK) {
        free(stripped);
        return st;
    }
    st = make_memfd(stripped, out);
    free(stripped);
    return st;
}

void sdnn_stripped_cfg_close(sdnn_stripped_cfg *s)
{
    if (s == NULL || s->fd < 0) return;
    close(s->fd);
    s->fd = -1;
}

void sdnn_config_describe(const sdnn_config *cfg, char *buf, size_t len)
{
    if (buf == NULL || len == 0) return;
    buf[0] = '\0';
    if (cfg == NULL) return;
    size_t at = 0;
    int autoc = strcmp(cfg->compress, "auto") == 0;
    for (size_t i = 0; i < N_KEYS && at + 1 < len; ++i) {
        const key_spec *k = &g_keys[i];
        if (!k->shown || !key_applies(k, cfg)) continue;
        if (autoc && i == K_TOPK_MOMENTUM) continue;   /* needs compress=topk */
        char v[1100];
        format_value(k, cfg, v, sizeof v);
        int w = snprintf(buf + at, len - at, "%s%s=%s", at ? " " : "", k->key, v);
        if (w < 0) break;
        at += (size_t)w < len - at ? (size_t)w : len - at - 1;
    }
}

const char *sdnn_config_backend_why(const sdnn_config *cfg, char *why, size_t len)
{
    if (why && len) why[0] = '\0';
    if (strcmp(cfg->backend, "auto") != 0) return cfg->backend;
    /* mpirun (OpenMPI) tells every process the size of its world. */
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    int procs = ws ? atoi(ws) : 0;
    if (procs <= 1) {
        if (why && len) snprintf(why, len, "one process: its replicas exchange through memory");
        return "local";
    }
    /* Between processes the gpu engine's buckets go device to device over
     * one NCCL communicator where the build has NCCL; else (and for the cpu
     * engine) the hierarchical mpi backend. */
    const sdnn_engine_ops *e = NULL;
    if (sdnn_comm_known("nccl") == 1 &&
        sdnn_engine_resolve(cfg->engine, 1, &e, NULL, 0) == SDNN_OK && e &&
        strcmp(e->name, "gpu") == 0) {
        if (why && len)
            snprintf(why, len, "%d processes under mpirun, the gpu engine, a build with NCCL",
                     procs);
        return "nccl";
    }
    if (why && len)
        snprintf(why, len, "%d processes under mpirun%s", procs,
                 sdnn_comm_known("nccl") == 1 ? ", not the gpu engine" : "");
    return "mpi";
}

const char *sdnn_config_backend(const sdnn_config *cfg)
{
    return sdnn_config_backend_why(cfg, NULL, 0);
}

sdnn_status sdnn_config_check_devices(const sdnn_config *cfg, const int *devices, int n)
{
    if (!devices || cfg->virtual_devices) return SDNN_OK;
    for (int r = 1; r < n; ++r)
        for (int q = 0; q < r; ++q)
            if (devices[q] == devices[r])
                return SDNN_ERROR(SDNN_ERR_INVALID,
                                  "id %d is listed twice (replicas %d and %d): each device "
                                  "once, or [scalednn] virtual=1 for several replicas on one "
                                  "device", devices[r], q, r);
    return SDNN_OK;
}
