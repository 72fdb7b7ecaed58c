/*
 * plan_shared: what `scalednn plan` (plan.c) and `scalednn simulate`
 * (simulate.c) share: profiling a cfg with Darknet's own layers (or loading
 * a profile), and measuring the codecs of a comma list.  See plan_shared.h.
 */
#include "plan_shared.h"
#include "dialect.h"
#include "profile.h"
#include "replicas.h"

#include <darknet.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CODEC_PROBE_FLOATS ((size_t)1 << 20)

int sdnn_cli_fail(const char *cmd)
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
static int profile_cfg(const char *cmd, const char *stripped_path, const char *cpu_conv,
                       int iters, sdnn_cost_profile *out)
{
    network *net = sdnn_parse_network(stripped_path);
    if (!net) {
        fprintf(stderr, "%s: Darknet could not parse the cfg\n", cmd);
        return 1;
    }
    sdnn_profile_opts o = SDNN_PROFILE_OPTS_INIT;
    o.iters = iters;
    o.warmup = 2;
    o.cpu_conv = cpu_conv;
    int saved = stdout_off();
    sdnn_status st = sdnn_profile_network(net, &o, out);
    stdout_on(saved);
    sdnn_network_free(net);
    return st == SDNN_OK ? 0 : sdnn_cli_fail(cmd);
}

/* The profile from a file or measured; 0 on success. */
int sdnn_cli_get_profile(const char *cmd, const char *file, const char *stripped_path,
                         const char *cpu_conv, int iters,
                       const char *save, sdnn_cost_profile *out)
{
    if (file) {
        if (sdnn_profile_load(file, out) != SDNN_OK) return sdnn_cli_fail(cmd);
    } else if (profile_cfg(cmd, stripped_path, cpu_conv, iters, out)) {
        return 1;
    }
    if (save && sdnn_profile_save(out, save) != SDNN_OK) {
        sdnn_cost_profile_free(out);
        return sdnn_cli_fail(cmd);
    }
    return 0;
}

int sdnn_cli_profile_matches(const char *cmd, const sdnn_cost_profile *p, const char *stripped)
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
 * multiplied by `speed`; the lossless one (none) first when listed. */
int sdnn_cli_codec_models(const char *cmd, const char *list, const sdnn_config *conf,
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
        if (sdnn_probe_codec(c, &p, CODEC_PROBE_FLOATS, 5, &m) != SDNN_OK) return sdnn_cli_fail(cmd);
        m.enc_Bps *= speed;
        m.dec_Bps *= speed;
        /* config.c turns error feedback on for a sparse codec (topk), else
         * error_feedback= */
        m.ef = m.lossy && (!c->dense || conf->error_feedback > 0);
        if (!c->lossy) {
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

void sdnn_cli_describe_codecs(const sdnn_codec_model *m, int n, char *buf, size_t len)
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

