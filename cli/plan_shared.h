/*
 * plan_shared: the measuring that `scalednn plan` and `scalednn simulate`
 * share.  Each returns 0, or 1 after a message on stderr that starts with
 * `cmd`.
 */
#ifndef SDNN_CLI_PLAN_SHARED_H
#define SDNN_CLI_PLAN_SHARED_H

#include "config.h"
#include "costmodel.h"

#include <stddef.h>

#define MAX_CODECS 8

/* "CMD: <the library's last error>" on stderr; returns 1. */
int sdnn_cli_fail(const char *cmd);

/* The per-layer profile from `file`, or measured on the stripped cfg at
 * `stripped_path` (`iters` passes, Darknet's per-pass prints silenced,
 * the convolutions on what `cpu_conv` names, as training runs them);
 * saved to `save` when not NULL. */
int sdnn_cli_get_profile(const char *cmd, const char *file, const char *stripped_path,
                         const char *cpu_conv, int iters,
                         const char *save, sdnn_cost_profile *out);

/* 1 (with a message) when the profile's layer count is not the cfg's. */
int sdnn_cli_profile_matches(const char *cmd, const sdnn_cost_profile *p, const char *stripped);

/* The codec models of a comma list of registry names ("none,fp16"),
 * rates measured here and multiplied by `speed`; the lossless codec first
 * when listed; at most MAX_CODECS. */
int sdnn_cli_codec_models(const char *cmd, const char *list, const sdnn_config *conf,
                          double speed, sdnn_codec_model *out, int *n);

/* "none, fp16 (x0.500, enc ... GB/s, dec ... GB/s), ..." */
void sdnn_cli_describe_codecs(const sdnn_codec_model *m, int n, char *buf, size_t len);

#endif
