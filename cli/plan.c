/*
 * ./darknet scalednn plan (see plan_cmd.h; simulate is simulate.c, what
 * both measure is plan_shared.c).  Front-end code: it measures, prints,
 * and turns library statuses into exit codes.
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
#include "measure.h"
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

/* ---- plan -------------------------------------------------------------------------- */

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
    const char *gpus = "0", *linkname = NULL, *allow = NULL, *pos[2] = {0};
    const char *profile_in = NULL, *profile_out = NULL;
    int verbose = 0, iters = 10, gbps_seen = 0, us_seen = 0;
    double gbps = 0, us = 0;
    char link_help[256];
    snprintf(link_help, sizeof link_help, "a named link (%s) instead of measuring the cfg's "
             "backend", sdnn_link_names());
    const sdnn_flag flags[] = {
        {.name = "-gpus", .kind = SDNN_FLAG_CUSTOM, .dst = &gpus, .parse = sdnn_flag_parse_gpus,
         .meta = "LIST", .help = "replicas, as for training (0)"},
        {.name = "-link", .kind = SDNN_FLAG_STR, .dst = &linkname, .meta = "NAME",
         .help = link_help},
        {.name = "-link_GBps", .kind = SDNN_FLAG_DOUBLE, .dst = &gbps, .lo = 0, .lo_open = 1,
         .hi = 1e6, .meta = "X", .seen = &gbps_seen,
         .help = "an explicit link: X GB/s (1e9 bytes/s)"},
        {.name = "-link_us", .kind = SDNN_FLAG_DOUBLE, .dst = &us, .lo = 0, .hi = 1e7,
         .meta = "Y", .seen = &us_seen, .help = "with -link_GBps: its latency in us (0)"},
        {.name = "-compress_allow", .kind = SDNN_FLAG_STR, .dst = &allow, .meta = "LIST",
         .help = "codecs the plan may choose per bucket (none and the cfg's compress=)"},
        {.name = "-iters", .kind = SDNN_FLAG_INT, .dst = &iters, .lo = 1, .hi = 1000, .meta = "N",
         .help = "profiling passes, median per layer (10)"},
        {.name = "-profile", .kind = SDNN_FLAG_STR, .dst = &profile_in, .meta = "FILE",
         .help = "per-layer times from FILE instead of profiling here"},
        {.name = "-save_profile", .kind = SDNN_FLAG_STR, .dst = &profile_out, .meta = "FILE",
         .help = "write the profile used to FILE"},
        {.name = "-v", .kind = SDNN_FLAG_SWITCH, .dst = &verbose,
         .help = "also print the per-layer profile"},
    };
    const sdnn_command usage = {
        .name = "scalednn plan", .args = "DATA CFG", .min_pos = 2, .max_pos = 2, .flags = flags,
        .nflags = (int)(sizeof flags / sizeof flags[0]),
    };
    int np;
    int parsed = sdnn_args_parse(&usage, argc, argv, 1, pos, &np);
    if (parsed != SDNN_ARGS_OK) return parsed == SDNN_ARGS_HELP ? 0 : 2;
    int nrep = sdnn_flag_gpus(gpus);
    if (linkname && gbps_seen)
        return sdnn_args_bad(&usage, "-link_GBps", "", "either -link or -link_GBps, not both");
    if (us_seen && !gbps_seen)
        return sdnn_args_bad(&usage, "-link_us", "", "-link_GBps with it (the bandwidth)");
    for (int i = 0; i < 2; ++i)
        if (sdnn_check_readable(pos[i]) != SDNN_OK) return sdnn_cli_fail(cmd);

    sdnn_config conf;
    sdnn_stripped_cfg stripped = {-1, ""};
    if (sdnn_config_load(pos[1], &conf, &stripped) != SDNN_OK) return sdnn_cli_fail(cmd);
    if (!conf.present) {
        /* No section: plan for mode=scalednn with a bare section's defaults
         * (stock mode's compress is none; a bare section's is auto). */
        const sdnn_config bare = SDNN_CONFIG_INIT;
        snprintf(conf.compress, sizeof conf.compress, "%s", bare.compress);
    }

    int rc = 1;
    sdnn_cost_profile prof = {0};
    sdnn_plan autop = {0}, cfgp = {0};
    sdnn_comm *comm = NULL;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    sdnn_blas_set_threads(nrep > 1 || cores < 1 ? 1 : (int)cores);
    const char *bt = getenv("SDNN_BLAS_THREADS");
    if (bt && atoi(bt) > 0) sdnn_blas_set_threads(atoi(bt));

    if (sdnn_cli_get_profile(cmd, profile_in, stripped.path, conf.cpu_conv, iters, profile_out,
                             &prof)) goto done;
    if (profile_in && sdnn_cli_profile_matches(cmd, &prof, stripped.path)) goto done;

    /* the link */
    sdnn_link link = {"none", 0, 1};
    double rms = -1;
    if (linkname) {
        if (sdnn_link_find(linkname, &link) != SDNN_OK) {
            sdnn_cli_fail(cmd);
            goto done;
        }
    } else if (gbps_seen) {
        if (sdnn_link_custom(gbps, us, &link) != SDNN_OK) {
            sdnn_cli_fail(cmd);
            goto done;
        }
    } else {
        if (sdnn_comm_open(sdnn_config_backend(&conf), &comm) != SDNN_OK ||
            sdnn_probe_link(comm, nrep > 1 ? nrep : 2, 9, &link, &rms) != SDNN_OK) {
            sdnn_cli_fail(cmd);
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
    if (sdnn_cli_codec_models(cmd, allow ? allow : cfg_codecs, &conf, 1.0, allowed, &nallowed) ||
        sdnn_cli_codec_models(cmd, cfg_codecs, &conf, 1.0, cfgc, &ncfg))
        goto done;

    int world = nrep * (comm ? comm->size : 1);
    sdnn_cm_env env = {link, world, conf.overlap, allowed, nallowed};
    sdnn_cm_env envc = {link, world, conf.overlap, cfgc, ncfg};
    /* Iteration factors: each plan minimises time to accuracy, step x its
     * factor (plan.h); the codecs' own, or the cfg's iter_factor=. */
    double fa[MAX_CODECS], fc[MAX_CODECS];
    for (int c = 0; c < nallowed; ++c) fa[c] = sdnn_iter_factor(conf.iter_factor, allowed[c].name);
    for (int c = 0; c < ncfg; ++c) fc[c] = sdnn_iter_factor(conf.iter_factor, cfgc[c].name);
    sdnn_plan_opts po = SDNN_PLAN_OPTS_INIT;
    po.compress_min_bytes = conf.compress_min_kb * 1024.0;
    sdnn_plan_opts poc = po;
    po.iter_factor = fa;
    poc.iter_factor = fc;
    /* The cfg's own plan: with bucket_mb=auto training replaces its first
     * 1 MiB buckets by the planner's over the cfg's codecs, so that plan is
     * what the cfg trains with; with a fixed size, exchange.c's partition. */
    sdnn_status pst = sdnn_plan_auto(&prof, &env, &po, &autop);
    if (pst == SDNN_OK)
        pst = cfg_auto_buckets
                  ? sdnn_plan_auto(&prof, &envc, &poc, &cfgp)
                  : sdnn_plan_fixed(&prof, &envc, conf.bucket_mb,
                                    !cfg_auto_codec && ncfg > 1 ? 1 : 0, po.compress_min_bytes,
                                    &cfgp);
    if (pst == SDNN_OK) sdnn_plan_set_factor(&cfgp, fc);
    if (pst != SDNN_OK) {
        sdnn_cli_fail(cmd);
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
    sdnn_cli_describe_codecs(allowed, nallowed, desc, sizeof desc);
    printf("codecs allowed: %s\n", desc);
    sdnn_plan_describe_factors(&env, fa, desc, sizeof desc);
    printf("iteration factors (iterations to the target against none's, %s): %s; the plans "
           "minimise time to accuracy = step x factor (a plan's: its buckets' weighted by bytes)\n",
           conf.iter_factor[0] ? "the cfg's iter_factor= over the codecs' own"
                               : "the codecs' own, iter_factor= overrides",
           desc);
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
    sdnn_plan_print_wire(stdout, "predicted", &autop, &env);
    sdnn_plan_print_tta(stdout, "predicted", &autop, &env, fa);
    char what[128];
    char bucket[32];
    if (cfg_auto_buckets) snprintf(bucket, sizeof bucket, "auto");
    else snprintf(bucket, sizeof bucket, "%g", conf.bucket_mb);
    snprintf(what, sizeof what, "cfg plan (bucket_mb=%s, compress=%s)", bucket, conf.compress);
    sdnn_plan_print_prediction(stdout, what, &cfgp);
    sdnn_plan_print_wire(stdout, what, &cfgp, &envc);
    sdnn_plan_print_tta(stdout, what, &cfgp, &envc, fc);
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

