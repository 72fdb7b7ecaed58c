/*
 * config: the [scalednn] section of a Darknet cfg.
 *
 * Darknet crashes on sections it does not know, so the section is parsed here
 * and removed before Darknet sees the file: the rest of the cfg is written
 * unchanged to an anonymous memory file (memfd) whose /proc/self/fd path is
 * handed to parse_network_cfg().
 */
#ifndef SDNN_CONFIG_H
#define SDNN_CONFIG_H

#include "scalednn.h"
#include <stddef.h>
#include <stdio.h>

typedef enum { SDNN_MODE_SCALEDNN = 0, SDNN_MODE_STOCK = 1 } sdnn_mode;

/* Which settings every process of a run must share (agree.c compares them
 * at start); the key table gives each key its group. */
typedef enum {
    SDNN_KEYS_OWN = 0,   /* may differ between processes (paths, backend, timeouts) */
    SDNN_KEYS_MODE,      /* mode and its interval */
    SDNN_KEYS_CODEC,     /* the codec and its options */
    SDNN_KEYS_BUCKETS,   /* buckets and the planner */
} sdnn_key_group;

typedef struct sdnn_config {
    int present;        /* 1 when the cfg had a [scalednn] section */
    sdnn_mode mode;     /* mode=scalednn|stock; stock when no section */
    char backend[16];   /* backend=: a name of the comm registry (comm.c) or auto
                         * (the default); see sdnn_config_backend for what auto
                         * becomes */
    double bucket_mb;   /* bucket_mb=<float > 0>: target bucket size in MiB;
                         * 0 = auto (planned from the profile, the default) */
    int overlap;        /* overlap=0|1 */
    int interval;       /* interval=<int >= 1>: stock-mode sync period */
    char compress[16];  /* compress=: a codec of the registry (codec.c) or auto
                         * (the default; after parsing none in stock mode, which
                         * averages weights uncompressed) */
    char csv[1024];     /* csv=<path>: per-iteration CSV, "" = none */
    double compress_min_kb; /* buckets below this many KiB stay uncompressed */
    double topk_ratio;  /* topk: fraction kept, (0, 1] */
    int int8_chunk;     /* int8: elements per scale, 1..1048576 */
    int error_feedback; /* 0|1; after parsing: 1 for topk, 0 otherwise unless set */
    int stochastic_rounding; /* int8: 0|1 */
    double topk_momentum;    /* topk + error feedback: DGC momentum correction, [0, 1) */
    int topk_warmup;    /* topk: iterations over which the ratio falls from 1 */
    char timeline[1024]; /* timeline=<path>: Chrome trace JSON, "" = none */
    char compress_allow[64]; /* compress=auto: codecs the planner may use */
    char iter_factor[128]; /* compress=auto: NAME:X overrides of the codecs'
                            * iteration factors ("" = their own; costmodel.h,
                            * sdnn_iter_factor) */
    char link[24];      /* link=<name>: link model; "" = probe the backend */
    double link_gbps;   /* link_gbps=<Gbit/s>: explicit link (0 = unset) */
    double link_us;     /* link_us=<latency us> with link_gbps */
    int profile_iters;  /* bucket_mb=auto: steps profiled before planning */
    double replan_drift; /* re-plan when the step drifts this fraction from the prediction */
    double comm_timeout_s; /* comm_timeout_s=<seconds > 0>: longest wait for a peer
                            * process before a step fails (sdnn_comm_opts) */
    int fix_1x1_delta;  /* fix_1x1_delta=0|1: a 1x1 convolution's backward adds to
                         * its input's delta (1, the default) or overwrites it as
                         * Debian's libdarknet does (0); see hooks.h */
    int fix_bn_delta;   /* fix_bn_delta=0|1: batch norm's backward exact for its
                         * forward (1, the default) or Darknet's (0); see bnfix.h */
    int fix_region_delta; /* fix_region_delta=0|1: a [region] layer's backward on the
                           * cpu engine passes its delta on as Darknet's GPU build
                           * does (1, the default) or sends nothing as Debian's CPU
                           * build does (0); see hooks.h */
    int fix_1x1_stride; /* fix_1x1_stride=0|1: a strided or padded 1x1 convolution
                         * reads the strided input (1, the default) or, on the cpu
                         * engine's darknet path, the unstrided one as Debian's
                         * libdarknet does (0); see conv1x1.h */
    char engine[16];    /* engine=: a name of engine.c's registry or auto;
                         * auto: gpu when it can run the replicas, else cpu */
    int virtual_devices; /* virtual=0|1: 1 lets -gpus name a device more than
                          * once (several replicas on one device) */
    int preload;        /* preload=K (1..8): step batches a device engine
                         * holds on the devices ahead of training */
    char split[16];     /* split=cpu|device0: the host splits each batch to
                         * the devices, or device 0 gets it and scatters */
    char cpu_conv[16];  /* cpu_conv=darknet|onednn|auto: the cpu engine's
                         * convolutions (conv_dnnl.h), in stock mode too;
                         * auto (the default): oneDNN where built; see
                         * sdnn_config_cpu_conv_onednn */
} sdnn_config;

/* Defaults: the values a [scalednn] section without keys gets (the key
 * table in config.c reads them for `scalednn keys`). */
#define SDNN_CONFIG_INIT                                                       \
    { .present = 0, .mode = SDNN_MODE_SCALEDNN, .backend = "auto", .bucket_mb = 0.0, \
      .overlap = 1, .interval = 4, .compress = "auto", .csv = "",               \
      .compress_min_kb = 0.0, .topk_ratio = 0.01, .int8_chunk = 256,            \
      .error_feedback = -1, .stochastic_rounding = 0, .topk_momentum = 0.0,     \
      .topk_warmup = 0, .timeline = "", .compress_allow = "none,fp16,int8,topk", \
      .iter_factor = "",                                                        \
      .link = "", .link_gbps = 0.0, .link_us = 0.0, .profile_iters = 5,         \
      .replan_drift = 0.25, .comm_timeout_s = 60.0, .fix_1x1_delta = 1, .fix_bn_delta = 1, .fix_region_delta = 1, \
      .fix_1x1_stride = 1, \
      .engine = "cpu", .virtual_devices = 0, .preload = 2, .split = "cpu", \
      .cpu_conv = "auto" }

/* The cfg without its [scalednn] section, as a file Darknet can open. */
typedef struct sdnn_stripped_cfg {
    int fd;             /* memfd, -1 when closed */
    char path[64];      /* "/proc/self/fd/N" */
} sdnn_stripped_cfg;

/*
 * Parse cfg text.  `name` is the file name used in messages.  On success
 * *cfg holds the section's values (defaults for absent keys; mode=stock and
 * present=0 when there is no section) and, if stripped != NULL, *stripped is
 * a malloc'd copy of the text with the [scalednn] section (header, keys,
 * comments inside it) removed and every other line kept byte for byte.
 * Errors (SDNN_ERR_INVALID / SDNN_ERR_UNSUPPORTED) name the file, the line,
 * the key, the value and what is allowed, e.g.
 *   cfg/x.cfg:12: [scalednn] overlap=2: expected 0 or 1
 */
sdnn_status sdnn_config_parse_text(const char *name, const char *text,
                                   sdnn_config *cfg, char **stripped);

/* Read `path`, parse it as above and write the stripped text to a memfd. */
sdnn_status sdnn_config_load(const char *path, sdnn_config *cfg,
                             sdnn_stripped_cfg *out);

void sdnn_stripped_cfg_close(sdnn_stripped_cfg *s);

/* The backend to open: cfg->backend, with "auto" (the default) resolved,
 * when this process was started by mpirun in a world of more than one
 * process (OMPI_COMM_WORLD_SIZE > 1), to "nccl" for the gpu engine in a
 * build with NCCL and to "mpi" otherwise, and to "local" in one process. */
const char *sdnn_config_backend(const sdnn_config *cfg);
/* The same, and for backend=auto why (e.g. "2 processes under mpirun") in
 * why (empty for a backend the cfg names). */
const char *sdnn_config_backend_why(const sdnn_config *cfg, char *why, size_t len);

/* The device ids of -gpus against virtual=: SDNN_OK, or SDNN_ERR_INVALID
 * naming the first id listed twice when virtual=0 (each device once, as in
 * Darknet; virtual=1 runs several replicas on one device). */
sdnn_status sdnn_config_check_devices(const sdnn_config *cfg, const int *devices, int n);

/* One line describing the settings, for the start-of-training banner:
 * the key table's shown keys that apply to cfg's codec, "key=value ...". */
void sdnn_config_describe(const sdnn_config *cfg, char *buf, size_t len);

/* 1 when the cpu engine's convolutions run on oneDNN: cpu_conv=onednn, or
 * auto in a build with oneDNN (conv_dnnl.h). */
int sdnn_config_cpu_conv_onednn(const sdnn_config *c);

/* The key table (config.c), the only list of the section's keys: how many,
 * the i-th name (NULL past the end), and every key with what it may be, its
 * default and one line of help (`./darknet scalednn keys`). */
size_t sdnn_config_key_count(void);
const char *sdnn_config_key_name(size_t i);
void sdnn_config_print_keys(FILE *f);
/* The i-th key's range when it takes a number: 1 for an integer key, 2 for
 * a real one (lo_open / hi_open: the end is excluded); 0 for other keys.
 * Every message about such a key's value states both ends. */
int sdnn_config_key_range(size_t i, double *lo, double *hi, int *lo_open, int *hi_open);

/* "key=value ..." of every key of `group`, in table order. */
void sdnn_config_describe_group(const sdnn_config *cfg, sdnn_key_group group, char *buf,
                                size_t len);

#endif
