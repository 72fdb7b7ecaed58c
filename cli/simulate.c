/*
 * ./darknet scalednn simulate (see plan_cmd.h; what it shares with plan is
 * plan_shared.c).  Front-end code: it measures, prints, and turns library
 * statuses into exit codes.
 *
 * Both commands profile the cfg on this machine with Darknet's own layers
 * (plugin/profile.c) unless given a profile file.  `plan` predicts this
 * machine's runs, so it profiles with the BLAS threads a training run of
 * that many replicas gets (trainer.c: one per replica when there are
 * several, every core for one; SDNN_BLAS_THREADS overrides) and measures
 * the comm backend.  `simulate` models a named GPU (plugin/devmodel.c,
 * --device, a default per topology) or, with --device cpu, treats one core
 * of this machine as one device; --speed scales either.
 */
#include "dialect.h"
#include "plan_cmd.h"
#include "plan_shared.h"
#include "flags.h"
#include "plan.h"
#include "blas.h"
#include "codec.h"
#include "comm.h"
#include "config.h"
#include "costmodel.h"
#include "devmodel.h"
#include "profile.h"
#include "replicas.h"
#include "saveio.h"
#include "train.h"

#include <darknet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- simulate -------------------------------------------------------------------- */

typedef enum { TOPO_PCIE, TOPO_NVLINK, TOPO_ETH, TOPO_IB } topo_kind;

typedef struct topology {
    topo_kind kind;
    const char *name;
    sdnn_link intra;     /* between GPUs of one host */
    sdnn_link inter;     /* between hosts (eth, ib) */
    sdnn_link host;      /* GPU <-> host memory, stock's averaging */
    int host_share_max;  /* GPUs behind one host link (0: all of a host) */
    const char *device;  /* the GPU model of this machine (devmodel.c) */
} topology;

/* Named machines.  pcie: N GPUs under one CPU, every stock transfer on the
 * one host link (the paper's PCIe case).  nvlink: a DGX-1-like box, NVLink
 * between GPUs, two GPUs per PCIe switch towards the host.  eth / ib: hosts
 * of -gpus GPUs on PCIe, joined by the network; a flat ring is as fast as
 * its slowest hop, the network.  Stock Darknet has no multi-host mode: its
 * multi-host number adds a ring allreduce of the host-averaged weights. */
static int find_topology(const char *cmd, const char *name, const char *linkname,
                         topology *t)
{
    memset(t, 0, sizeof *t);
    t->name = name;
    if (!name) {
        fprintf(stderr, "%s: -topology is required (pcie, nvlink, eth, ib)\n", cmd);
        return 1;
    }
    const char *intra = "pcie3", *inter = NULL;
    /* GPUs of the links' generation: PCIe 3 and NVLink 2 are V100's */
    t->device = "v100";
    if (strcmp(name, "pcie") == 0) {
        t->kind = TOPO_PCIE;
        t->device = "v100-pcie";
    } else if (strcmp(name, "nvlink") == 0) {
        t->kind = TOPO_NVLINK;
        intra = "nvlink2";
        t->host_share_max = 2;
    } else if (strcmp(name, "eth") == 0) {
        t->kind = TOPO_ETH;
        inter = "eth10g";
    } else if (strcmp(name, "ib") == 0) {
        t->kind = TOPO_IB;
        inter = "ib_edr";
    } else {
        fprintf(stderr, "%s: -topology %s: unknown topology (pcie, nvlink, eth, ib)\n", cmd,
                name);
        return 1;
    }
    if (linkname) {
        if (inter) inter = linkname;
        else intra = linkname;
    }
    if (sdnn_link_find(intra, &t->intra) != SDNN_OK ||
        (inter && sdnn_link_find(inter, &t->inter) != SDNN_OK) ||
        sdnn_link_find("pcie3", &t->host) != SDNN_OK)
        return sdnn_cli_fail(cmd);
    if (t->kind == TOPO_PCIE) t->host = t->intra;
    return 0;
}

enum { V_STOCK, V_NOOVERLAP, V_OVERLAP, V_CODEC, V_PLANNED, NVARIANTS };

typedef struct sim_row {
    int nodes, per_node, world;
    sdnn_cm_result r[NVARIANTS];
    int nb[NVARIANTS];
    char coll[NVARIANTS][192];   /* -nccl 1: the collective of each bucket */
    double wire[NVARIANTS];   /* bytes each replica sends per step (collective.h) */
    double factor[NVARIANTS]; /* iteration factor of each variant's plan (stock: 1) */
} sim_row;

/* "fp16: 3 nccl half all-reduce, 2 all-gather; none: 4" for plan pl. */
static void describe_colls(const sdnn_plan *pl, const sdnn_cm_env *e, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    for (int c = 0; c < e->ncodecs; ++c) {
        const sdnn_codec_model *m = &e->codecs[c];
        int cnt[SDNN_CM_NCOLL] = {0}, any = 0;
        for (int k = 0; k < pl->nb; ++k)
            if (pl->b[k].codec == c) {
                ++cnt[sdnn_cm_choose(e, m, pl->b[k].bytes, m->colls)];
                ++any;
            }
        if (!any || o >= len) continue;
        o += (size_t)snprintf(buf + o, len - o, "%s%s:", o ? "; " : "", m->name);
        const char *sep = " ";
        for (int k = 0; k < SDNN_CM_NCOLL && o < len; ++k) {
            if (!cnt[k]) continue;
            o += (size_t)snprintf(buf + o, len - o, "%s%d %s", sep, cnt[k],
                                  m->lossy ? sdnn_cm_coll_label((sdnn_cm_coll)k, m) : "plain");
            sep = ", ";
        }
    }
}

typedef struct sim_setup {
    const sdnn_cost_profile *prof;
    const topology *topo;
    double bucket_mb, compress_min_bytes;
    int interval;
    const sdnn_codec_model *codecs;    /* [0] none, [1] the --codec one */
    const sdnn_codec_model *allowed;
    int nallowed;
    const double *fixed_f;             /* iteration factors of codecs[0..1] */
    const double *allowed_f;           /* and of allowed[] */
} sim_setup;

/* Bytes each replica sends in a step of plan pl: the cost model's figure
 * per bucket, collective.h's one definition (what the trainer's CSV,
 * progress line and timeline report for the same buckets and codecs). */
static double plan_wire(const sdnn_cm_env *e, const sdnn_plan *pl)
{
    double sum = 0;
    for (int k = 0; k < pl->nb; ++k)
        sum += sdnn_cm_exchange_cost(e, &e->codecs[pl->b[k].codec], pl->b[k].bytes).wire_bytes;
    return sum;
}

static int simulate_world(const char *cmd, const sim_setup *s, int nodes, int per_node,
                          sim_row *row)
{
    memset(row, 0, sizeof *row);
    row->nodes = nodes;
    row->per_node = per_node;
    row->world = nodes * per_node;
    const topology *t = s->topo;
    sdnn_link ring = nodes > 1 ? t->inter : t->intra;

    /* stock: the iterations of none (bench/tta_lab.sh measured 400 for both
     * in one process; its averaging every `interval` steps is not a codec) */
    row->factor[V_STOCK] = 1.0;
    int share = t->host_share_max > 0 ? t->host_share_max : per_node;
    if (share > per_node) share = per_node;
    sdnn_cm_stock st = {t->host, per_node, share, s->interval, 10e9};
    if (sdnn_cm_stock_step(s->prof, &st, &row->r[V_STOCK]) != SDNN_OK) return sdnn_cli_fail(cmd);
    if (nodes > 1) {
        /* between hosts stock's average goes through one central host, as
         * mode=stock does over MPI (comm/mpi_central.c) */
        double extra = sdnn_cm_central_s(&t->inter, nodes, sdnn_cost_profile_bytes(s->prof));
        sdnn_cm_result *r = &row->r[V_STOCK];
        r->comm_s += extra / s->interval;
        r->step_s += extra / s->interval;
        r->exposed_s += extra / s->interval;
    }

    sdnn_cm_env base = {ring, row->world, 0, s->codecs, 2};
    sdnn_plan pl;
    for (int v = V_NOOVERLAP; v <= V_CODEC; ++v) {
        sdnn_cm_env e = base;
        e.overlap = v != V_NOOVERLAP;
        if (sdnn_plan_fixed(s->prof, &e, s->bucket_mb, v == V_CODEC ? 1 : 0,
                            s->compress_min_bytes, &pl) != SDNN_OK)
            return sdnn_cli_fail(cmd);
        row->r[v] = pl.pred;
        row->nb[v] = pl.nb;
        sdnn_plan_set_factor(&pl, s->fixed_f);
        /* a world of one codes nothing: none's iterations */
        row->factor[v] = row->world > 1 ? pl.iter_factor : 1.0;
        describe_colls(&pl, &e, row->coll[v], sizeof row->coll[v]);
        row->wire[v] = plan_wire(&e, &pl);
        sdnn_plan_free(&pl);
    }
    sdnn_cm_env e = {ring, row->world, 1, s->allowed, s->nallowed};
    sdnn_plan_opts po = SDNN_PLAN_OPTS_INIT;
    po.compress_min_bytes = s->compress_min_bytes;
    po.iter_factor = s->allowed_f;   /* the planner minimises time to accuracy */
    if (sdnn_plan_auto(s->prof, &e, &po, &pl) != SDNN_OK) return sdnn_cli_fail(cmd);
    row->factor[V_PLANNED] = pl.iter_factor;
    row->r[V_PLANNED] = pl.pred;
    row->nb[V_PLANNED] = pl.nb;
    describe_colls(&pl, &e, row->coll[V_PLANNED], sizeof row->coll[V_PLANNED]);
    row->wire[V_PLANNED] = plan_wire(&e, &pl);
    sdnn_plan_free(&pl);
    return 0;
}

static const char *variant_name(int v, const char *codec)
{
    static char buf[32];
    switch (v) {
    case V_STOCK: return "stock";
    case V_NOOVERLAP: return "no-overlap";
    case V_OVERLAP: return "overlap";
    case V_CODEC: snprintf(buf, sizeof buf, "overlap+%s", codec); return buf;
    default: return "planned";
    }
}

static int write_csv(const char *cmd, const char *path, const sim_row *rows, int nrows,
                     const topology *t, const sdnn_cost_profile *prof, const char *codec)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        fprintf(stderr, "%s: no memory for the CSV\n", cmd);
        return 1;
    }
    fprintf(f, "topology,link,variant,nodes,gpus_per_node,world,step_s,compute_s,exposed_s,"
               "comm_s,efficiency,images_per_s,buckets,wire_bytes_per_replica\n");
    double one = rows[0].r[V_OVERLAP].compute_s;
    double images = (double)prof->batch * prof->subdivisions;
    for (int i = 0; i < nrows; ++i) {
        const sim_row *row = &rows[i];
        const sdnn_link *l = row->nodes > 1 ? &t->inter : &t->intra;
        for (int v = 0; v < NVARIANTS; ++v) {
            const sdnn_cm_result *r = &row->r[v];
            fprintf(f, "%s,%s,%s,%d,%d,%d,%.9g,%.9g,%.9g,%.9g,%.6f,%.3f,%d,%.0f\n", t->name,
                    l->name, variant_name(v, codec), row->nodes, row->per_node, row->world,
                    r->step_s, r->compute_s, r->exposed_s, r->comm_s, one / r->step_s,
                    row->world * images / r->step_s, v == V_STOCK ? 0 : row->nb[v],
                    v == V_STOCK ? 0 : row->wire[v]);
        }
    }
    if (fclose(f) != 0) {
        free(text);
        fprintf(stderr, "%s: no memory for the CSV\n", cmd);
        return 1;
    }
    sdnn_status st = sdnn_write_file_atomic(path, text, len);
    free(text);
    return st == SDNN_OK ? 0 : sdnn_cli_fail(cmd);
}

/* 1, 2, 4, ... below n, then n. */
static int sweep(int n, int *out)
{
    int k = 0;
    for (int v = 1; v < n; v *= 2) out[k++] = v;
    out[k++] = n;
    return k;
}

int sdnn_cmd_simulate(int argc, char **argv)
{
    const char *cmd = "simulate";
    const char *topo_s = NULL, *profile_in = NULL, *csv = NULL, *linkname = NULL;
    const char *codec = "fp16", *allow = NULL, *device_s = NULL, *pos[1] = {0};
    int gpus = 0, nodes = 0, iters = 10, interval = 0, nodes_s = 0, nccl = 0;
    double speed = 1, bucket_mb = 0, codec_rate = 0;
    char device_help[256], link_help[256], codec_help[160];
    snprintf(device_help, sizeof device_help, "the modelled GPU: %s, or cpu (this machine's "
             "per-core profile); default v100-pcie for pcie, v100 otherwise",
             sdnn_device_model_names());
    snprintf(link_help, sizeof link_help, "replace the topology's GPU (pcie, nvlink) or network "
             "(eth, ib) link: %s", sdnn_link_names());
    snprintf(codec_help, sizeof codec_help, "the codec of the overlap+codec variant: %s (fp16)",
             sdnn_codec_names());
    const sdnn_flag flags[] = {
        {.name = "-topology", .kind = SDNN_FLAG_STR, .dst = &topo_s, .meta = "pcie|nvlink|eth|ib",
         .help = "pcie: N GPUs under one CPU; nvlink: ring on nvlink2; eth / ib: M hosts of N "
                 "GPUs (required)"},
        {.name = "-gpus", .kind = SDNN_FLAG_INT, .dst = &gpus, .lo = 1, .hi = 4096, .meta = "N",
         .help = "GPUs (per host for eth/ib), swept 1, 2, 4, ... N (8; 4 for eth/ib)"},
        {.name = "-nodes", .kind = SDNN_FLAG_INT, .dst = &nodes, .lo = 1, .hi = 4096, .meta = "M",
         .seen = &nodes_s, .help = "hosts for eth/ib, swept 1, 2, 4, ... M (4)"},
        {.name = "-device", .kind = SDNN_FLAG_STR, .dst = &device_s, .meta = "NAME",
         .help = device_help},
        {.name = "-speed", .kind = SDNN_FLAG_DOUBLE, .dst = &speed, .lo = 1e-6, .hi = 1e6,
         .meta = "F", .help = "times divided and codec rates multiplied by F (1)"},
        {.name = "-profile", .kind = SDNN_FLAG_STR, .dst = &profile_in, .meta = "FILE",
         .help = "per-layer times measured elsewhere (e.g. on a GPU)"},
        {.name = "-csv", .kind = SDNN_FLAG_STR, .dst = &csv, .meta = "FILE",
         .help = "also write every row as CSV (scripts/plot_scaling.sh)"},
        {.name = "-link", .kind = SDNN_FLAG_STR, .dst = &linkname, .meta = "NAME",
         .help = link_help},
        {.name = "-codec", .kind = SDNN_FLAG_STR, .dst = &codec, .meta = "NAME",
         .help = codec_help},
        {.name = "-compress_allow", .kind = SDNN_FLAG_STR, .dst = &allow, .meta = "LIST",
         .help = "codecs of the planned variant (none,CODEC)"},
        {.name = "-bucket_mb", .kind = SDNN_FLAG_DOUBLE, .dst = &bucket_mb, .lo = 1e-9,
         .hi = 4096, .meta = "X", .help = "fixed bucket size of the other variants (the cfg's)"},
        {.name = "-interval", .kind = SDNN_FLAG_INT, .dst = &interval, .lo = 1, .hi = 1000000,
         .meta = "K", .help = "stock averaging interval (the cfg's, 4)"},
        {.name = "-iters", .kind = SDNN_FLAG_INT, .dst = &iters, .lo = 1, .hi = 1000,
         .meta = "N", .help = "profiling passes (10)"},
        {.name = "-codec_GBps", .kind = SDNN_FLAG_DOUBLE, .dst = &codec_rate, .lo = 1e-6,
         .hi = 1e6, .meta = "X",
         .help = "encode and decode rate of every lossy codec, GB/s of fp32 input"},
        {.name = "-nccl", .kind = SDNN_FLAG_INT, .dst = &nccl, .lo = 0, .hi = 2, .meta = "0|1|2",
         .help = "1: lossy codecs travel as the gpu engine's NCCL ring moves them, by the "
                 "cheapest of the coded ring, NCCL's native half/bf16 allreduce and the "
                 "all-gather that sends no more bytes than the ring (a dense codec's at 2 "
                 "ranks); 2: every all-gather the time model prefers, whatever its bytes; the "
                 "collective of each bucket is listed (0)"},
    };
    /* --flag: the syntax of earlier versions, still in older scripts. */
    const sdnn_command usage = {
        .name = "scalednn simulate", .args = "CFG", .min_pos = 1, .max_pos = 1, .flags = flags,
        .nflags = (int)(sizeof flags / sizeof flags[0]), .dashdash = 1,
    };
    int np;
    int parsed = sdnn_args_parse(&usage, argc, argv, 1, pos, &np);
    if (parsed != SDNN_ARGS_OK) return parsed == SDNN_ARGS_HELP ? 0 : 2;
    topology topo;
    if (find_topology(cmd, topo_s, linkname, &topo)) return 2;
    int multi = topo.kind == TOPO_ETH || topo.kind == TOPO_IB;
    if (!gpus) gpus = multi ? 4 : 8;
    if (!nodes) nodes = multi ? 4 : 1;
    if (nodes_s && !multi) {
        fprintf(stderr, "%s: -nodes goes with -topology eth or ib\n", cmd);
        return 2;
    }
    const sdnn_codec_ops *codec_ops = sdnn_codec_find(codec);
    if (!codec_ops || !codec_ops->lossy) {
        char what[192];
        snprintf(what, sizeof what, "a compressing codec (%s but none)", sdnn_codec_names());
        return sdnn_args_bad(&usage, "-codec", codec, what);
    }
    if (device_s && profile_in) {
        fprintf(stderr, "%s: -device and -profile are alternatives (a profile measured on a "
                "device replaces the model)\n", cmd);
        return 2;
    }
    const sdnn_device_model *dev = NULL;
    if (!profile_in) {
        const char *dn = device_s ? device_s : topo.device;
        if (strcmp(dn, "cpu") != 0 && !(dev = sdnn_device_model_find(dn))) {
            fprintf(stderr, "%s: -device %s: unknown device (%s, cpu)\n", cmd, dn,
                    sdnn_device_model_names());
            return 2;
        }
    }
    if (sdnn_check_readable(pos[0]) != SDNN_OK) return sdnn_cli_fail(cmd);
    sdnn_config conf;
    sdnn_stripped_cfg stripped = {-1, ""};
    if (sdnn_config_load(pos[0], &conf, &stripped) != SDNN_OK) return sdnn_cli_fail(cmd);
    /* bucket_mb=auto: the fixed-size variants use training's buckets before
     * its first plan (the planned variant is what auto becomes). */
    int bucket_auto = bucket_mb <= 0 && !(conf.bucket_mb > 0);
    if (bucket_mb <= 0) bucket_mb = bucket_auto ? 1.0 : conf.bucket_mb;
    if (interval <= 0) interval = conf.interval;

    int rc = 1;
    sdnn_cost_profile here = {0}, prof = {0};
    sim_row *rows = NULL;
    sdnn_blas_set_threads(1);   /* one core stands for one device */
    if (dev) {
        network *net = sdnn_parse_network(stripped.path);
        if (!net) {
            fprintf(stderr, "%s: Darknet could not parse the cfg\n", cmd);
            goto done;
        }
        sdnn_status dst = sdnn_device_model_profile(net, dev, &here);
        sdnn_network_free(net);
        if (dst != SDNN_OK) {
            sdnn_cli_fail(cmd);
            goto done;
        }
    } else {
        if (sdnn_cli_get_profile(cmd, profile_in, stripped.path, conf.cpu_conv, iters, NULL,
                                 &here)) goto done;
        if (profile_in && sdnn_cli_profile_matches(cmd, &here, stripped.path)) goto done;
    }
    if (sdnn_cost_profile_scaled(&here, speed, &prof) != SDNN_OK) {
        sdnn_cli_fail(cmd);
        goto done;
    }

    char fixed_list[64], allow_default[64];
    snprintf(fixed_list, sizeof fixed_list, "none,%s", codec);
    snprintf(allow_default, sizeof allow_default, "none,%s", codec);
    sdnn_codec_model fixed[MAX_CODECS], allowed[MAX_CODECS];
    int nfixed = 0, nallowed = 0;
    /* codec rates: this machine's, scaled like the compute, or given */
    if (sdnn_cli_codec_models(cmd, fixed_list, &conf, speed, fixed, &nfixed) ||
        sdnn_cli_codec_models(cmd, allow ? allow : allow_default, &conf, speed, allowed, &nallowed))
        goto done;
    if (dev && codec_rate <= 0) {
        /* the codecs as element kernels on the device (top-k: a selection of
         * about three sweeps), at the model's speed */
        sdnn_codec_model *sets[2] = {fixed, allowed};
        int counts[2] = {nfixed, nallowed};
        for (int s2 = 0; s2 < 2; ++s2)
            for (int k = 0; k < counts[s2]; ++k) {
                sdnn_codec_model *m = &sets[s2][k];
                if (!m->lossy) continue;
                int passes = strcmp(m->name, "topk") == 0 ? 3 : 1;
                m->enc_Bps = m->dec_Bps =
                    sdnn_device_model_codec_Bps(dev, m->ratio, passes) * speed;
            }
    }
    if (codec_rate > 0) {
        for (int k = 0; k < nfixed; ++k)
            if (fixed[k].lossy) fixed[k].enc_Bps = fixed[k].dec_Bps = codec_rate * 1e9;
        for (int k = 0; k < nallowed; ++k)
            if (allowed[k].lossy) allowed[k].enc_Bps = allowed[k].dec_Bps = codec_rate * 1e9;
    }

    if (nccl) {
        const unsigned colls = nccl == 2 ? SDNN_CM_OFFERS_ALL : SDNN_CM_OFFERS_GPU_ENGINE;
        for (int k = 0; k < nfixed; ++k)
            if (fixed[k].lossy) fixed[k].colls = colls;
        for (int k = 0; k < nallowed; ++k)
            if (allowed[k].lossy) allowed[k].colls = colls;
    }

    int sw[32], nsw = sweep(multi ? nodes : gpus, sw);
    rows = calloc((size_t)nsw, sizeof *rows);
    if (!rows) {
        fprintf(stderr, "%s: no memory\n", cmd);
        goto done;
    }
    double fixed_f[MAX_CODECS], allowed_f[MAX_CODECS];
    for (int k = 0; k < nfixed; ++k) fixed_f[k] = sdnn_iter_factor(conf.iter_factor, fixed[k].name);
    for (int k = 0; k < nallowed; ++k)
        allowed_f[k] = sdnn_iter_factor(conf.iter_factor, allowed[k].name);
    sim_setup s = {&prof, &topo, bucket_mb, conf.compress_min_kb * 1024.0, interval, fixed,
                   allowed, nallowed, fixed_f, allowed_f};
    for (int i = 0; i < nsw; ++i)
        if (simulate_world(cmd, &s, multi ? sw[i] : 1, multi ? gpus : sw[i], &rows[i]))
            goto done;

    double one = rows[0].r[V_OVERLAP].compute_s;
    printf("scalednn simulate: %s on %s", pos[0], topo.name);
    if (multi)
        printf(" (hosts of %d GPUs on %s: %.1f us, %.3f GB/s; %s inside a host)\n", gpus,
               topo.inter.name, topo.inter.alpha_s * 1e6, topo.inter.beta_Bps / 1e9,
               topo.intra.name);
    else
        printf(" (ring on %s: %.1f us, %.1f GB/s; stock through %s shared by %s)\n",
               topo.intra.name, topo.intra.alpha_s * 1e6, topo.intra.beta_Bps / 1e9,
               topo.host.name, topo.host_share_max ? "2 GPUs" : "every GPU");
    if (dev)
        printf("device: %s, %s: %.1f TFLOP/s fp32, %.0f GB/s, %.0f GiB (published); model: "
               "%.0f%% of the peak in convolutions and gemms, %.0f%% of the bandwidth in "
               "element kernels, %.0f us a kernel launch, %.0f GB/s to the host "
               "(-device cpu: this machine's measured profile)\n",
               dev->name, dev->desc, dev->fp32_flops / 1e12, dev->mem_Bps / 1e9, dev->mem_gib,
               dev->compute_eff * 100, dev->mem_eff * 100, dev->launch_s * 1e6,
               dev->host_Bps / 1e9);
    else if (!profile_in)
        printf("device: cpu (this machine's measured profile, one core per device)\n");
    printf("compute per GPU step: %.3f ms (%s / speed %g), batch %d x %d, %.0f bytes of "
           "gradients\n",
           one * 1e3,
           profile_in ? profile_in
                      : dev ? "the device model" : "this machine's profile, 1 core",
           speed, prof.batch, prof.subdivisions, sdnn_cost_profile_bytes(&prof));
    char desc[512];
    sdnn_cli_describe_codecs(allowed, nallowed, desc, sizeof desc);
    printf("variants: stock (interval %d); scalednn with bucket_mb=%g%s: no-overlap, overlap, "
           "overlap+%s; planned (auto buckets, codecs: %s)\n\n",
           interval, bucket_mb,
           bucket_auto ? " (the cfg's bucket_mb=auto starts with 1 MiB buckets)" : "", codec,
           desc);
    printf("%5s %5s", "gpus", "hosts");
    for (int v = 0; v < NVARIANTS; ++v) printf(" | %-17s", variant_name(v, codec));
    printf("\n%11s", "");
    for (int v = 0; v < NVARIANTS; ++v) printf(" | %9s %7s", "step_ms", "eff");
    printf(" | MB each replica sends a step: none, %s, planned\n", codec);
    for (int i = 0; i < nsw; ++i) {
        printf("%5d %5d", rows[i].world, rows[i].nodes);
        for (int v = 0; v < NVARIANTS; ++v)
            printf(" | %9.3f %7.3f", rows[i].r[v].step_s * 1e3, one / rows[i].r[v].step_s);
        printf(" | %.3f, %.3f, %.3f\n", rows[i].wire[V_OVERLAP] / 1e6, rows[i].wire[V_CODEC] / 1e6,
               rows[i].wire[V_PLANNED] / 1e6);
    }
    printf("(eff = single-GPU step / step: scaling efficiency at a fixed per-GPU batch)\n");
    /* Time to accuracy beside the step: iterations x step, relative to
     * none's iterations N (the iteration factors, costmodel.h). */
    sdnn_cm_env fe = {topo.intra, 1, 1, allowed, nallowed};
    char fl[256];
    sdnn_plan_describe_factors(&fe, allowed_f, fl, sizeof fl);
    printf("\ntime to accuracy = N x factor x step (N: none's iterations to the target); "
           "iteration factors (%s): %s; stock and none 1; overlap+%s: %.3g; planned: the "
           "largest of its buckets' codecs\n",
           conf.iter_factor[0] ? "the cfg's iter_factor= over the codecs' own"
                               : "the codecs' own, iter_factor= overrides",
           fl, codec, fixed_f[nfixed > 1 ? 1 : 0]);
    printf("%5s %5s", "gpus", "hosts");
    for (int v = 0; v < NVARIANTS; ++v) printf(" | %-17s", variant_name(v, codec));
    printf("\n%11s", "");
    for (int v = 0; v < NVARIANTS; ++v) printf(" | %6s %10s", "factor", "tta_ms/N");
    printf("\n");
    for (int i = 0; i < nsw; ++i) {
        printf("%5d %5d", rows[i].world, rows[i].nodes);
        for (int v = 0; v < NVARIANTS; ++v)
            printf(" | %6.3g %10.3f", rows[i].factor[v],
                   rows[i].factor[v] * rows[i].r[v].step_s * 1e3);
        printf("\n");
    }
    printf("(tta_ms/N = factor x step_ms: milliseconds of training per iteration none needs; "
           "the planned variant minimises it)\n");
    if (nccl) {
        printf("\ncollective per bucket (-nccl %d; modelled, not measured):\n", nccl);
        for (int i = 0; i < nsw; ++i)
            if (rows[i].world > 1)
                printf("%5d  overlap+%s: %s | planned: %s\n", rows[i].world, codec,
                       rows[i].coll[V_CODEC], rows[i].coll[V_PLANNED]);
    }
    if (csv) {
        if (write_csv(cmd, csv, rows, nsw, &topo, &prof, codec)) goto done;
        printf("CSV: %s\n", csv);
    }
    rc = 0;
done:
    free(rows);
    sdnn_cost_profile_free(&here);
    sdnn_cost_profile_free(&prof);
    sdnn_stripped_cfg_close(&stripped);
    return rc;
}
