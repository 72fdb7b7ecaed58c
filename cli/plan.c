/*
 * ./darknet scalednn plan | simulate (see plan.h).  Front-end code: it
 * measures, prints, and turns library statuses into exit codes.
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

#define MAX_CODECS 8
#define CODEC_PROBE_FLOATS ((size_t)1 << 20)

/* ---- arguments ---------------------------------------------------------------- */

typedef struct flag {
    const char *name;
    const char **value;   /* NULL: a switch, counted in *count */
    int *count;
} flag;

/* Positional arguments go to pos[] (at most maxpos); every other argument
 * must be a known flag.  Returns the number of positionals, or -1 after a
 * message. */
static int parse_args(const char *cmd, int argc, char **argv, const flag *flags, int nflags,
                      const char **pos, int maxpos)
{
    int np = 0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] == '\0') {
            if (np == maxpos) {
                fprintf(stderr, "%s: unexpected argument %s\n", cmd, a);
                return -1;
            }
            pos[np++] = a;
            continue;
        }
        int k = 0;
        while (k < nflags && strcmp(a, flags[k].name) != 0) ++k;
        if (k == nflags) {
            fprintf(stderr, "%s: unknown option %s\n", cmd, a);
            return -1;
        }
        if (!flags[k].value) {
            ++*flags[k].count;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value\n", cmd, a);
            return -1;
        }
        *flags[k].value = argv[++i];
    }
    return np;
}

static int parse_double(const char *cmd, const char *opt, const char *s, double lo, double *out)
{
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo) {
        fprintf(stderr, "%s: %s %s: expected a number >= %g\n", cmd, opt, s, lo);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out)
{
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s %s: expected an integer in %d..%d\n", cmd, opt, s, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* ---- measuring ----------------------------------------------------------------- */

static int fail_status(const char *cmd)
{
    fprintf(stderr, "%s: %s\n", cmd, sdnn_last_error());
    return 1;
}

/* Darknet's yolo and region layers print a line per forward pass to
 * stdout; the profile's passes are not training, so their lines go to
 * /dev/null.  Returns the saved descriptor (-1: nothing redirected). */
static int stdout_off(void)
{
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    int null = open("/dev/null", O_WRONLY);
    if (saved < 0 || null < 0 || dup2(null, STDOUT_FILENO) < 0) {
        if (saved >= 0) close(saved);
        if (null >= 0) close(null);
        return -1;
    }
    close(null);
    return saved;
}

static void stdout_on(int saved)
{
    if (saved < 0) return;
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
}

/* Profile the Darknet part of a cfg (the memfd without [scalednn]). */
static int profile_cfg(const char *cmd, const char *stripped_path, int iters,
                       sdnn_cost_profile *out)
{
    network *net = sdnn_parse_network(stripped_path);
    if (!net) {
        fprintf(stderr, "%s: Darknet could not parse the cfg\n", cmd);
        return 1;
    }
    sdnn_profile_opts o = SDNN_PROFILE_OPTS_INIT;
    o.iters = iters;
    o.warmup = 2;
    int saved = stdout_off();
    sdnn_status st = sdnn_profile_network(net, &o, out);
    stdout_on(saved);
    sdnn_network_free(net);
    return st == SDNN_OK ? 0 : fail_status(cmd);
}

/* The profile from a file or measured; 0 on success. */
static int get_profile(const char *cmd, const char *file, const char *stripped_path, int iters,
                       const char *save, sdnn_cost_profile *out)
{
    if (file) {
        if (sdnn_profile_load(file, out) != SDNN_OK) return fail_status(cmd);
    } else if (profile_cfg(cmd, stripped_path, iters, out)) {
        return 1;
    }
    if (save && sdnn_profile_save(out, save) != SDNN_OK) {
        sdnn_cost_profile_free(out);
        return fail_status(cmd);
    }
    return 0;
}

static int profile_matches(const char *cmd, const sdnn_cost_profile *p, const char *stripped)
{
    network *net = sdnn_parse_network(stripped);
    if (!net) return 1;
    int n = net->n;
    sdnn_network_free(net);
    if (n != p->n) {
        fprintf(stderr, "%s: the profile has %d layers, the cfg %d\n", cmd, p->n, n);
        return 1;
    }
    return 0;
}

/* The codec models of a comma list ("none,fp16"), rates measured here and
 * multiplied by `speed`; "none" first when listed. */
static int codec_models(const char *cmd, const char *list, const sdnn_config *conf,
                        double speed, sdnn_codec_model *out, int *n)
{
    sdnn_codec_params p = SDNN_CODEC_PARAMS_INIT;
    p.int8_chunk = conf->int8_chunk;
    p.stochastic = conf->stochastic_rounding;
    p.topk_ratio = conf->topk_ratio;
    *n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        const sdnn_codec_ops *c = sdnn_codec_find(tok);
        if (!c) {
            fprintf(stderr, "%s: codec %s: unknown codec (%s)\n", cmd, tok, sdnn_codec_names());
            return 1;
        }
        int dup = 0;
        for (int k = 0; k < *n; ++k) dup |= strcmp(out[k].name, c->name) == 0;
        if (dup) continue;
        if (*n == MAX_CODECS) {
            fprintf(stderr, "%s: at most %d codecs\n", cmd, MAX_CODECS);
            return 1;
        }
        sdnn_codec_model m;
        if (sdnn_probe_codec(c, &p, CODEC_PROBE_FLOATS, 5, &m) != SDNN_OK) return fail_status(cmd);
        m.enc_Bps *= speed;
        m.dec_Bps *= speed;
        /* config.c turns error feedback on for topk, else error_feedback= */
        m.ef = m.lossy && (strcmp(c->name, "topk") == 0 || conf->error_feedback > 0);
        if (strcmp(c->name, "none") == 0) {
            memmove(out + 1, out, (size_t)*n * sizeof *out);
            out[0] = m;
        } else {
            out[*n] = m;
        }
        ++*n;
    }
    if (*n == 0) {
        fprintf(stderr, "%s: no codec in \"%s\"\n", cmd, list);
        return 1;
    }
    return 0;
}

static void describe_codecs(const sdnn_codec_model *m, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; k < n && used < len; ++k) {
        int w;
        if (m[k].enc_Bps > 0)
            w = snprintf(buf + used, len - used, "%s%s (x%.3f, enc %.2f GB/s, dec %.2f GB/s)",
                         k ? ", " : "", m[k].name, m[k].ratio, m[k].enc_Bps / 1e9,
                         m[k].dec_Bps / 1e9);
        else
            w = snprintf(buf + used, len - used, "%s%s", k ? ", " : "", m[k].name);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* ---- plan -------------------------------------------------------------------------- */

static int plan_usage(void)
{
    fprintf(stderr,
            "usage: darknet scalednn plan DATA CFG [-gpus LIST] [-link NAME | -link_GBps X "
            "[-link_us Y]]\n"
            "                             [-compress_allow none,fp16,...] [-iters N]\n"
            "                             [-profile FILE] [-save_profile FILE] [-v]\n"
            "  -gpus LIST        replicas, as for training (0)\n"
            "  -link NAME        a named link (%s)\n"
            "                    instead of measuring the cfg's comm backend\n"
            "  -link_GBps X      an explicit link: X GB/s (1e9 bytes/s), -link_us latency (0)\n"
            "  -compress_allow L codecs the plan may choose per bucket (none and the cfg's\n"
            "                    compress=)\n"
            "  -iters N          profiling passes, median per layer (10)\n"
            "  -profile FILE     per-layer times from FILE instead of profiling here\n"
            "  -save_profile F   write the profile used to F\n"
            "  -v                also print the per-layer profile\n",
            sdnn_link_names());
    return 2;
}

static void print_layers(const sdnn_cost_profile *p)
{
    printf("\nlayer  type           fwd_ms   bwd_ms   upd_ms      bytes\n");
    for (int i = 0; i < p->n; ++i) {
        const sdnn_layer_cost *l = &p->layer[i];
        printf("%5d  %-12s %8.3f %8.3f %8.3f %10.0f\n", i, l->type, l->fwd_s * 1e3,
               l->bwd_s * 1e3, l->upd_s * 1e3, l->bytes);
    }
}

int sdnn_cmd_plan(int argc, char **argv)
{
    const char *cmd = "plan";
    const char *gpus = "0", *linkname = NULL, *gbps = NULL, *us = NULL, *allow = NULL;
    const char *iters_s = NULL, *profile_in = NULL, *profile_out = NULL, *pos[2] = {0};
    int verbose = 0, help = 0;
    const flag flags[] = {
        {"-gpus", &gpus, NULL},         {"-link", &linkname, NULL},
        {"-link_GBps", &gbps, NULL},    {"-link_us", &us, NULL},
        {"-compress_allow", &allow, NULL}, {"-iters", &iters_s, NULL},
        {"-profile", &profile_in, NULL}, {"-save_profile", &profile_out, NULL},
        {"-v", NULL, &verbose},         {"-h", NULL, &help},
    };
    int np = parse_args(cmd, argc, argv, flags, (int)(sizeof flags / sizeof flags[0]), pos, 2);
    if (help) {
        plan_usage();
        return 0;
    }
    if (np != 2) return plan_usage();
    int nrep = sdnn_parse_gpus(gpus);
    if (nrep < 1) {
        fprintf(stderr, "%s: -gpus %s: expected a comma-separated list of ids, e.g. 0,1\n", cmd,
                gpus);
        return 2;
    }
    int iters = 10;
    if (iters_s && parse_int(cmd, "-iters", iters_s, 1, 1000, &iters)) return 2;
    if (linkname && gbps) {
        fprintf(stderr, "%s: -link and -link_GBps are alternatives\n", cmd);
        return 2;
    }
    if (us && !gbps) {
        fprintf(stderr, "%s: -link_us goes with -link_GBps\n", cmd);
        return 2;
    }
    for (int i = 0; i < 2; ++i)
        if (sdnn_check_readable(pos[i]) != SDNN_OK) return fail_status(cmd);

    sdnn_config conf;
    sdnn_stripped_cfg stripped = {-1, ""};
    if (sdnn_config_load(pos[1], &conf, &stripped) != SDNN_OK) return fail_status(cmd);

    int rc = 1;
    sdnn_cost_profile prof = {0};
    sdnn_plan autop = {0}, cfgp = {0};
    sdnn_comm *comm = NULL;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    sdnn_blas_set_threads(nrep > 1 || cores < 1 ? 1 : (int)cores);
    const char *bt = getenv("SDNN_BLAS_THREADS");
    if (bt && atoi(bt) > 0) sdnn_blas_set_threads(atoi(bt));

    if (get_profile(cmd, profile_in, stripped.path, iters, profile_out, &prof)) goto done;
    if (profile_in && profile_matches(cmd, &prof, stripped.path)) goto done;

    /* the link */
    sdnn_link link = {"none", 0, 1};
    double rms = -1;
    if (linkname) {
        if (sdnn_link_find(linkname, &link) != SDNN_OK) {
            fail_status(cmd);
            goto done;
        }
    } else if (gbps) {
        double g, u = 0;
        if (parse_double(cmd, "-link_GBps", gbps, 0, &g) ||
            (us && parse_double(cmd, "-link_us", us, 0, &u)))
            goto done;
        if (sdnn_link_custom(g, u, &link) != SDNN_OK) {
            fail_status(cmd);
            goto done;
        }
    } else {
        if (sdnn_comm_open(conf.backend, &comm) != SDNN_OK ||
            sdnn_probe_link(comm, nrep > 1 ? nrep : 2, 9, &link, &rms) != SDNN_OK) {
            fail_status(cmd);
            goto done;
        }
    }

    /* codecs: what the plan may choose, and what training with this cfg
     * uses.  compress=auto lets the planner pick among compress_allow when
     * bucket_mb=auto; with fixed buckets nothing plans, so every bucket
     * stays uncompressed (exchange.c). */
    int cfg_auto_codec = strcmp(conf.compress, "auto") == 0;
    int cfg_auto_buckets = !(conf.bucket_mb > 0);
    char cfg_codecs[sizeof conf.compress_allow + 8];
    if (cfg_auto_codec)
        snprintf(cfg_codecs, sizeof cfg_codecs, "%s",
                 cfg_auto_buckets ? conf.compress_allow : "none");
    else
        snprintf(cfg_codecs, sizeof cfg_codecs, "none%s%s",
                 strcmp(conf.compress, "none") ? "," : "",
                 strcmp(conf.compress, "none") ? conf.compress : "");
    sdnn_codec_model allowed[MAX_CODECS], cfgc[MAX_CODECS];
    int nallowed = 0, ncfg = 0;
    if (codec_models(cmd, allow ? allow : cfg_codecs, &conf, 1.0, allowed, &nallowed) ||
        codec_models(cmd, cfg_codecs, &conf, 1.0, cfgc, &ncfg))
        goto done;

    int world = nrep * (comm ? comm->size : 1);
    sdnn_cm_env env = {link, world, conf.overlap, allowed, nallowed};
    sdnn_cm_env envc = {link, world, conf.overlap, cfgc, ncfg};
    sdnn_plan_opts po = SDNN_PLAN_OPTS_INIT;
    po.compress_min_bytes = conf.compress_min_kb * 1024.0;
    /* The cfg's own plan: with bucket_mb=auto training replaces its first
     * 1 MiB buckets by the planner's over the cfg's codecs, so that plan is
     * what the cfg trains with; with a fixed size, exchange.c's partition. */
    sdnn_status pst = sdnn_plan_auto(&prof, &env, &po, &autop);
    if (pst == SDNN_OK)
        pst = cfg_auto_buckets
                  ? sdnn_plan_auto(&prof, &envc, &po, &cfgp)
                  : sdnn_plan_fixed(&prof, &envc, conf.bucket_mb,
                                    !cfg_auto_codec && ncfg > 1 ? 1 : 0, po.compress_min_bytes,
                                    &cfgp);
    if (pst != SDNN_OK) {
        fail_status(cmd);
        goto done;
    }

    double f = 0, b = 0, u = 0;
    for (int i = 0; i < prof.n; ++i) {
        f += prof.layer[i].fwd_s;
        b += prof.layer[i].bwd_s;
        u += prof.layer[i].upd_s;
    }
    printf("scalednn plan: %s, %d replica%s (world %d), batch %d x %d subdivision%s per "
           "replica\n",
           pos[1], nrep, nrep == 1 ? "" : "s", world, prof.batch, prof.subdivisions,
           prof.subdivisions == 1 ? "" : "s");
    if (profile_in)
        printf("profile: %s\n", profile_in);
    else
        printf("profile: this machine, median of %d passes, %d BLAS thread%s\n", iters,
               sdnn_blas_get_threads(), sdnn_blas_get_threads() == 1 ? "" : "s");
    printf("compute per step: forward %.3f ms, backward %.3f ms (x %d), update %.3f ms; "
           "%.0f bytes of gradients\n",
           f * 1e3, b * 1e3, prof.subdivisions, u * 1e3, sdnn_cost_profile_bytes(&prof));
    if (rms >= 0)
        printf("link: backend %s measured: alpha %.2f us, beta %.2f GB/s (fit error %.1f%%)\n",
               link.name, link.alpha_s * 1e6, link.beta_Bps / 1e9, rms * 100);
    else
        printf("link: %s: alpha %.2f us, beta %.3f GB/s\n", link.name, link.alpha_s * 1e6,
               link.beta_Bps / 1e9);
    char desc[512];
    describe_codecs(allowed, nallowed, desc, sizeof desc);
    printf("codecs allowed: %s\n", desc);
    if (!conf.present)
        printf("note: %s has no [scalednn] section, so it trains in stock mode; the plans "
               "below are for mode=scalednn with the section's defaults (bucket_mb=auto, "
               "compress=%s, overlap=%d)\n",
               pos[1], conf.compress, conf.overlap);
    else if (conf.mode == SDNN_MODE_STOCK)
        printf("note: the cfg trains in stock mode; the plans below are for mode=scalednn\n");
    if (world == 1) printf("note: a world of one exchanges nothing: step == compute\n");
    if (verbose) print_layers(&prof);

    printf("\nautomatic plan (bucket_mb=auto, compress=auto, overlap=%d):\n", conf.overlap);
    sdnn_plan_print(stdout, &autop, &env);
    sdnn_plan_print_prediction(stdout, "predicted", &autop);
    char what[128];
    char bucket[32];
    if (cfg_auto_buckets) snprintf(bucket, sizeof bucket, "auto");
    else snprintf(bucket, sizeof bucket, "%g", conf.bucket_mb);
    snprintf(what, sizeof what, "cfg plan (bucket_mb=%s, compress=%s)", bucket, conf.compress);
    sdnn_plan_print_prediction(stdout, what, &cfgp);
    if (verbose) {
        printf("\n%s:\n", what);
        sdnn_plan_print(stdout, &cfgp, &envc);
    }
    rc = 0;
done:
    sdnn_plan_free(&autop);
    sdnn_plan_free(&cfgp);
    sdnn_cost_profile_free(&prof);
    if (comm) sdnn_comm_close(comm);
    sdnn_stripped_cfg_close(&stripped);
    return rc;
}

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
 * of --gpus GPUs on PCIe, joined by the network; a flat ring is as fast as
 * its slowest hop, the network.  Stock Darknet has no multi-host mode: its
 * multi-host number adds a ring allreduce of the host-averaged weights. */
static int find_topology(const char *cmd, const char *name, const char *linkname,
                         topology *t)
{
    memset(t, 0, sizeof *t);
    t->name = name;
    if (!name) {
        fprintf(stderr, "%s: --topology is required (pcie, nvlink, eth, ib)\n", cmd);
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
        fprintf(stderr, "%s: --topology %s: unknown topology (pcie, nvlink, eth, ib)\n", cmd,
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
        return fail_status(cmd);
    if (t->kind == TOPO_PCIE) t->host = t->intra;
    return 0;
}

enum { V_STOCK, V_NOOVERLAP, V_OVERLAP, V_CODEC, V_PLANNED, NVARIANTS };

typedef struct sim_row {
    int nodes, per_node, world;
    sdnn_cm_result r[NVARIANTS];
    int nb[NVARIANTS];
} sim_row;

typedef struct sim_setup {
    const sdnn_cost_profile *prof;
    const topology *topo;
    double bucket_mb, compress_min_bytes;
    int interval;
    const sdnn_codec_model *codecs;    /* [0] none, [1] the --codec one */
    const sdnn_codec_model *allowed;
    int nallowed;
} sim_setup;

static int simulate_world(const char *cmd, const sim_setup *s, int nodes, int per_node,
                          sim_row *row)
{
    memset(row, 0, sizeof *row);
    row->nodes = nodes;
    row->per_node = per_node;
    row->world = nodes * per_node;
    const topology *t = s->topo;
    sdnn_link ring = nodes > 1 ? t->inter : t->intra;

    /* stock */
    int share = t->host_share_max > 0 ? t->host_share_max : per_node;
    if (share > per_node) share = per_node;
    sdnn_cm_stock st = {t->host, per_node, share, s->interval, 10e9};
    if (sdnn_cm_stock_step(s->prof, &st, &row->r[V_STOCK]) != SDNN_OK) return fail_status(cmd);
    if (nodes > 1) {
        double extra = sdnn_cm_ring_allreduce_s(&t->inter, nodes, sdnn_cost_profile_bytes(s->prof));
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
            return fail_status(cmd);
        row->r[v] = pl.pred;
        row->nb[v] = pl.nb;
        sdnn_plan_free(&pl);
    }
    sdnn_cm_env e = {ring, row->world, 1, s->allowed, s->nallowed};
    sdnn_plan_opts po = SDNN_PLAN_OPTS_INIT;
    po.compress_min_bytes = s->compress_min_bytes;
    if (sdnn_plan_auto(s->prof, &e, &po, &pl) != SDNN_OK) return fail_status(cmd);
    row->r[V_PLANNED] = pl.pred;
    row->nb[V_PLANNED] = pl.nb;
    sdnn_plan_free(&pl);
    return 0;
}

static int sim_usage(void)
{
    fprintf(stderr,
            "usage: darknet scalednn simulate CFG --topology pcie|nvlink|eth|ib [--gpus N]\n"
            "                                 [--nodes M] [--device NAME|cpu] [--speed F]\n"
            "                                 [--profile FILE]\n"
            "                                 [--csv FILE] [--link NAME] [--codec NAME]\n"
            "                                 [--compress_allow LIST] [--bucket_mb X]\n"
            "                                 [--interval K] [--iters N] [--codec_GBps X]\n"
            "  --topology   pcie: N GPUs under one CPU (ring on pcie3; stock through the\n"
            "               one host link); nvlink: ring on nvlink2, 2 GPUs per host link;\n"
            "               eth / ib: M hosts of N GPUs on eth10g / ib_edr\n"
            "  --gpus N     GPUs (per host for eth/ib); the table sweeps 1, 2, 4, ... N\n"
            "               (8; 4 per host for eth/ib)\n"
            "  --nodes M    hosts for eth/ib, swept 1, 2, 4, ... M (4)\n"
            "  --device D   the GPU whose layer times are modelled from its published\n"
            "               fp32 rate and memory bandwidth: %s\n"
            "               (default: v100-pcie for pcie, v100 otherwise); cpu: this\n"
            "               machine's measured per-core profile and codec rates\n"
            "  --speed F    times divided and codec rates multiplied by F (1)\n"
            "  --profile F  per-layer times measured elsewhere (e.g. on a GPU)\n"
            "  --csv FILE   also write every row as CSV (scripts/plot_scaling.sh)\n"
            "  --link NAME  replace the topology's GPU (pcie, nvlink) or network (eth, ib)\n"
            "               link: %s\n"
            "  --codec C    the codec of the overlap+codec variant (fp16)\n"
            "  --compress_allow L  codecs of the planned variant (none,C)\n"
            "  --bucket_mb X  fixed bucket size of the other variants (the cfg's)\n"
            "  --interval K stock averaging interval (the cfg's, 4)\n"
            "  --iters N    profiling passes (10)\n"
            "  --codec_GBps X  encode and decode rate of every lossy codec on the device,\n"
            "               GB/s of fp32 input (the device model's, or with --device cpu\n"
            "               this machine's rates x --speed)\n",
            sdnn_device_model_names(), sdnn_link_names());
    return 2;
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
               "comm_s,efficiency,images_per_s,buckets\n");
    double one = rows[0].r[V_OVERLAP].compute_s;
    double images = (double)prof->batch * prof->subdivisions;
    for (int i = 0; i < nrows; ++i) {
        const sim_row *row = &rows[i];
        const sdnn_link *l = row->nodes > 1 ? &t->inter : &t->intra;
        for (int v = 0; v < NVARIANTS; ++v) {
            const sdnn_cm_result *r = &row->r[v];
            fprintf(f, "%s,%s,%s,%d,%d,%d,%.9g,%.9g,%.9g,%.9g,%.6f,%.3f,%d\n", t->name, l->name,
                    variant_name(v, codec), row->nodes, row->per_node, row->world, r->step_s,
                    r->compute_s, r->exposed_s, r->comm_s, one / r->step_s,
                    row->world * images / r->step_s, v == V_STOCK ? 0 : row->nb[v]);
        }
    }
    if (fclose(f) != 0) {
        free(text);
        fprintf(stderr, "%s: no memory for the CSV\n", cmd);
        return 1;
    }
    sdnn_status st = sdnn_write_file_atomic(path, text, len);
    free(text);
    return st == SDNN_OK ? 0 : fail_status(cmd);
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
    const char *topo_s = NULL, *gpus_s = NULL, *nodes_s = NULL, *speed_s = NULL;
    const char *profile_in = NULL, *csv = NULL, *linkname = NULL, *codec = "fp16";
    const char *allow = NULL, *bucket_s = NULL, *interval_s = NULL, *iters_s = NULL;
    const char *codec_rate_s = NULL, *device_s = NULL, *pos[1] = {0};
    int help = 0;
    const flag flags[] = {
        {"--topology", &topo_s, NULL}, {"--gpus", &gpus_s, NULL},
        {"--nodes", &nodes_s, NULL},   {"--speed", &speed_s, NULL},
        {"--profile", &profile_in, NULL}, {"--csv", &csv, NULL},
        {"--link", &linkname, NULL},   {"--codec", &codec, NULL},
        {"--compress_allow", &allow, NULL}, {"--bucket_mb", &bucket_s, NULL},
        {"--interval", &interval_s, NULL}, {"--iters", &iters_s, NULL},
        {"--codec_GBps", &codec_rate_s, NULL}, {"--device", &device_s, NULL},
        {"-h", NULL, &help},           {"--help", NULL, &help},
    };
    int np = parse_args(cmd, argc, argv, flags, (int)(sizeof flags / sizeof flags[0]), pos, 1);
    if (help) {
        sim_usage();
        return 0;
    }
    if (np != 1) return sim_usage();
    topology topo;
    if (find_topology(cmd, topo_s, linkname, &topo)) return 2;
    int multi = topo.kind == TOPO_ETH || topo.kind == TOPO_IB;
    int gpus = multi ? 4 : 8, nodes = multi ? 4 : 1, iters = 10, interval = 0;
    double speed = 1, bucket_mb = 0, codec_rate = 0;
    if ((gpus_s && parse_int(cmd, "--gpus", gpus_s, 1, 4096, &gpus)) ||
        (nodes_s && parse_int(cmd, "--nodes", nodes_s, 1, 4096, &nodes)) ||
        (speed_s && parse_double(cmd, "--speed", speed_s, 1e-6, &speed)) ||
        (bucket_s && parse_double(cmd, "--bucket_mb", bucket_s, 1e-9, &bucket_mb)) ||
        (interval_s && parse_int(cmd, "--interval", interval_s, 1, 1000000, &interval)) ||
        (iters_s && parse_int(cmd, "--iters", iters_s, 1, 1000, &iters)) ||
        (codec_rate_s && parse_double(cmd, "--codec_GBps", codec_rate_s, 1e-6, &codec_rate)))
        return 2;
    if (nodes_s && !multi) {
        fprintf(stderr, "%s: --nodes goes with --topology eth or ib\n", cmd);
        return 2;
    }
    if (strcmp(codec, "none") == 0 || !sdnn_codec_find(codec)) {
        fprintf(stderr, "%s: --codec %s: expected a compressing codec (fp16, bf16, int8, "
                "topk)\n", cmd, codec);
        return 2;
    }
    if (device_s && profile_in) {
        fprintf(stderr, "%s: --device and --profile are alternatives (a profile measured on a "
                "device replaces the model)\n", cmd);
        return 2;
    }
    const sdnn_device_model *dev = NULL;
    if (!profile_in) {
        const char *dn = device_s ? device_s : topo.device;
        if (strcmp(dn, "cpu") != 0 && !(dev = sdnn_device_model_find(dn))) {
            fprintf(stderr, "%s: --device %s: unknown device (%s, cpu)\n", cmd, dn,
                    sdnn_device_model_names());
            return 2;
        }
    }
    if (sdnn_check_readable(pos[0]) != SDNN_OK) return fail_status(cmd);
    sdnn_config conf;
    sdnn_stripped_cfg stripped = {-1, ""};
    if (sdnn_config_load(pos[0], &conf, &stripped) != SDNN_OK) return fail_status(cmd);
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
            fail_status(cmd);
            goto done;
        }
    } else {
        if (get_profile(cmd, profile_in, stripped.path, iters, NULL, &here)) goto done;
        if (profile_in && profile_matches(cmd, &here, stripped.path)) goto done;
    }
    if (sdnn_cost_profile_scaled(&here, speed, &prof) != SDNN_OK) {
        fail_status(cmd);
        goto done;
    }

    char fixed_list[64], allow_default[64];
    snprintf(fixed_list, sizeof fixed_list, "none,%s", codec);
    snprintf(allow_default, sizeof allow_default, "none,%s", codec);
    sdnn_codec_model fixed[MAX_CODECS], allowed[MAX_CODECS];
    int nfixed = 0, nallowed = 0;
    /* codec rates: this machine's, scaled like the compute, or given */
    if (codec_models(cmd, fixed_list, &conf, speed, fixed, &nfixed) ||
        codec_models(cmd, allow ? allow : allow_default, &conf, speed, allowed, &nallowed))
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

    int sw[32], nsw = sweep(multi ? nodes : gpus, sw);
    rows = calloc((size_t)nsw, sizeof *rows);
    if (!rows) {
        fprintf(stderr, "%s: no memory\n", cmd);
        goto done;
    }
    sim_setup s = {&prof, &topo, bucket_mb, conf.compress_min_kb * 1024.0, interval, fixed,
                   allowed, nallowed};
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
               "(--device cpu: this machine's measured profile)\n",
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
    describe_codecs(allowed, nallowed, desc, sizeof desc);
    printf("variants: stock (interval %d); scalednn with bucket_mb=%g%s: no-overlap, overlap, "
           "overlap+%s; planned (auto buckets, codecs: %s)\n\n",
           interval, bucket_mb,
           bucket_auto ? " (the cfg's bucket_mb=auto starts with 1 MiB buckets)" : "", codec,
           desc);
    printf("%5s %5s", "gpus", "hosts");
    for (int v = 0; v < NVARIANTS; ++v) printf(" | %-17s", variant_name(v, codec));
    printf("\n%11s", "");
    for (int v = 0; v < NVARIANTS; ++v) printf(" | %9s %7s", "step_ms", "eff");
    printf("\n");
    for (int i = 0; i < nsw; ++i) {
        printf("%5d %5d", rows[i].world, rows[i].nodes);
        for (int v = 0; v < NVARIANTS; ++v)
            printf(" | %9.3f %7.3f", rows[i].r[v].step_s * 1e3, one / rows[i].r[v].step_s);
        printf("\n");
    }
    printf("(eff = single-GPU step / step: scaling efficiency at a fixed per-GPU batch)\n");
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
