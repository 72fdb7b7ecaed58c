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

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SECTION_HEADER "[scalednn]"
#define KNOWN_KEYS                                                       \
    "mode, backend, bucket_mb, overlap, interval, compress, csv, "         \
    "compress_min_kb, topk_ratio, int8_chunk, error_feedback, "            \
    "stochastic_rounding, topk_momentum, topk_warmup, timeline, "          \
    "compress_allow, link, link_gbps, link_us, profile_iters, replan_drift, " \
    "comm_timeout_s, fix_1x1_delta"
#define BUCKET_MB_MAX 4096.0
#define INTERVAL_MAX 1000000L
#define SHOWN_MAX 200 /* longest key or value quoted in full in a message */

/* The key=value line being checked, for messages. */
typedef struct line_ref {
    const char *name;  /* file name */
    int lineno;        /* 1-based */
    const char *key;   /* whitespace-free */
    const char *value; /* whitespace-free; NULL when the line has no '=' */
} line_ref;

typedef sdnn_status (*value_parser)(const line_ref *lr, sdnn_config *cfg);

typedef struct key_spec {
    const char *key;
    value_parser parse;
    const char *allowed; /* what the value may be, for messages */
} key_spec;

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

/* "expected <allowed>" for a value that does not parse. */
static sdnn_status expected(const line_ref *lr, const char *allowed)
{
    char what[256];
    snprintf(what, sizeof what, "expected %s", allowed);
    return line_error(lr, SDNN_ERR_INVALID, what);
}

/* ---- value parsers ----------------------------------------------------- */

static int in_list(const char *s, const char *const *list)
{
    for (; *list != NULL; list++)
        if (strcmp(s, *list) == 0) return 1;
    return 0;
}

static sdnn_status parse_mode(const line_ref *lr, sdnn_config *cfg)
{
    if (strcmp(lr->value, "scalednn") == 0)
        cfg->mode = SDNN_MODE_SCALEDNN;
    else if (strcmp(lr->value, "stock") == 0)
        cfg->mode = SDNN_MODE_STOCK;
    else
        return line_error(lr, SDNN_ERR_INVALID,
                          "unknown mode (scalednn, stock)");
    return SDNN_OK;
}

/* Backends this build can name in a cfg.  "auto" is resolved when the
 * trainer opens its backend (sdnn_config_backend), not here: the same cfg
 * trains alone or under mpirun. */
#if SDNN_MPI
#define BACKENDS_HERE "local, mpi, auto"
#else
#define BACKENDS_HERE "local, auto"
#endif

static sdnn_status parse_backend(const line_ref *lr, sdnn_config *cfg)
{
    static const char *const here[] = { "local", "auto",
#if SDNN_MPI
                                        "mpi",
#endif
                                        NULL };
    static const char *const later[] = { "mpi", "nccl", NULL };
    if (in_list(lr->value, here)) {
        snprintf(cfg->backend, sizeof cfg->backend, "%s", lr->value);
        return SDNN_OK;
    }
    if (in_list(lr->value, later))
        return line_error(lr, SDNN_ERR_UNSUPPORTED,
                          "not available in this build (available: " BACKENDS_HERE ")");
    return line_error(lr, SDNN_ERR_INVALID,
                      "unknown backend (local, mpi, nccl, auto)");
}


static sdnn_status parse_compress(const line_ref *lr, sdnn_config *cfg)
{
    static const char *const codecs[] = { "none", "fp16", "bf16", "int8",
                                          "topk", NULL };
    static const char *const later[] = { NULL };
    if (in_list(lr->value, codecs) || strcmp(lr->value, "auto") == 0) {
        snprintf(cfg->compress, sizeof cfg->compress, "%s", lr->value);
        return SDNN_OK;
    }
    if (in_list(lr->value, later))
        return line_error(lr, SDNN_ERR_UNSUPPORTED,
                          "not available in this build (available: none, "
                          "fp16, bf16, int8, topk)");
    return line_error(lr, SDNN_ERR_INVALID,
                      "unknown codec (none, fp16, bf16, int8, topk, auto)");
}

/* Decimal notation only: strtod also reads "0x10" (as 16), "inf", "nan". */
static int decimal_text(const char *s)
{
    for (const char *p = s; *p; ++p)
        if (!strchr("0123456789+-.eE", *p)) return 0;
    return *s != '\0';
}

/* A finite number in [lo, hi] (hi_open: [lo, hi)). */
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

static sdnn_status parse_compress_min_kb(const line_ref *lr, sdnn_config *cfg)
{
    if (!parse_number(lr->value, 0.0, 4194304.0, 0, 0, &cfg->compress_min_kb))
        return expected(lr, "a number of KiB >= 0 and <= 4194304");
    return SDNN_OK;
}

static sdnn_status parse_topk_ratio(const line_ref *lr, sdnn_config *cfg)
{
    if (!parse_number(lr->value, 0.0, 1.0, 1, 0, &cfg->topk_ratio))
        return expected(lr, "a fraction > 0 and <= 1 (e.g. 0.01)");
    return SDNN_OK;
}

static sdnn_status parse_int8_chunk(const line_ref *lr, sdnn_config *cfg)
{
    long v;
    if (!parse_integer(lr->value, 1, 1048576, &v))
        return expected(lr, "an integer >= 1 and <= 1048576");
    cfg->int8_chunk = (int)v;
    return SDNN_OK;
}

static sdnn_status parse_error_feedback(const line_ref *lr, sdnn_config *cfg)
{
    long v;
    if (!parse_integer(lr->value, 0, 1, &v) || strlen(lr->value) != 1)
        return expected(lr, "0 or 1");
    cfg->error_feedback = (int)v;
    return SDNN_OK;
}

static sdnn_status parse_stochastic(const line_ref *lr, sdnn_config *cfg)
{
    long v;
    if (!parse_integer(lr->value, 0, 1, &v) || strlen(lr->value) != 1)
        return expected(lr, "0 or 1");
    cfg->stochastic_rounding = (int)v;
    return SDNN_OK;
}

static sdnn_status parse_topk_momentum(const line_ref *lr, sdnn_config *cfg)
{
    if (!parse_number(lr->value, 0.0, 1.0, 0, 1, &cfg->topk_momentum))
        return expected(lr, "a number >= 0 and < 1 (e.g. 0.9)");
    return SDNN_OK;
}

static sdnn_status parse_topk_warmup(const line_ref *lr, sdnn_config *cfg)
{
    long v;
    if (!parse_integer(lr->value, 0, 100000000L, &v))
        return expected(lr, "an integer number of iterations >= 0");
    cfg->topk_warmup = (int)v;
    return SDNN_OK;
}

static sdnn_status parse_bucket_mb(const line_ref *lr, sdnn_config *cfg)
{
    static const char allowed[] = "auto or a number of MiB > 0 and <= 4096";
    if (strcmp(lr->value, "auto") == 0) {
        cfg->bucket_mb = 0.0;
        return SDNN_OK;
    }
    char *end = NULL;
    errno = 0;
    double v = strtod(lr->value, &end);
    if (!decimal_text(lr->value) || end == lr->value || *end != '\0' || errno == ERANGE || !isfinite(v) ||
        !(v > 0.0) || v > BUCKET_MB_MAX)
        return expected(lr, allowed);
    cfg->bucket_mb = v;
    return SDNN_OK;
}

static sdnn_status parse_overlap(const line_ref *lr, sdnn_config *cfg)
{
    if (strcmp(lr->value, "0") == 0)
        cfg->overlap = 0;
    else if (strcmp(lr->value, "1") == 0)
        cfg->overlap = 1;
    else
        return expected(lr, "0 or 1");
    return SDNN_OK;
}

static sdnn_status parse_interval(const line_ref *lr, sdnn_config *cfg)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(lr->value, &end, 10);
    if (end == lr->value || *end != '\0' || errno == ERANGE || v < 1 ||
        v > INTERVAL_MAX)
        return expected(lr, "an integer >= 1 and <= 1000000");
    cfg->interval = (int)v;
    return SDNN_OK;
}

static sdnn_status parse_path(const line_ref *lr, char *dst, size_t size)
{
    if (strlen(lr->value) >= size) {
        char what[96];
        snprintf(what, sizeof what, "path too long (at most %zu characters)", size - 1);
        return line_error(lr, SDNN_ERR_INVALID, what);
    }
    snprintf(dst, size, "%s", lr->value);
    return SDNN_OK;
}

static sdnn_status parse_csv(const line_ref *lr, sdnn_config *cfg)
{
    return parse_path(lr, cfg->csv, sizeof cfg->csv);
}

static sdnn_status parse_timeline(const line_ref *lr, sdnn_config *cfg)
{
    return parse_path(lr, cfg->timeline, sizeof cfg->timeline);
}

static sdnn_status parse_compress_allow(const line_ref *lr, sdnn_config *cfg)
{
    static const char *const codecs[] = { "none", "fp16", "bf16", "int8",
                                          "topk", NULL };
    if (strlen(lr->value) >= sizeof cfg->compress_allow)
        return expected(lr, "a comma-separated list of codecs (none, fp16, bf16, int8, topk)");
    char buf[sizeof cfg->compress_allow];
    snprintf(buf, sizeof buf, "%s", lr->value);
    int lossless = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!in_list(tok, codecs)) {
            char what[160];
            snprintf(what, sizeof what, "unknown codec %.32s in the list (none, fp16, bf16, "
                     "int8, topk)", tok);
            return line_error(lr, SDNN_ERR_INVALID, what);
        }
        lossless |= strcmp(tok, "none") == 0;
    }
    if (!lossless)
        return line_error(lr, SDNN_ERR_INVALID,
                          "the list must include none (small buckets stay uncompressed)");
    snprintf(cfg->compress_allow, sizeof cfg->compress_allow, "%s", lr->value);
    return SDNN_OK;
}

static sdnn_status parse_link(const line_ref *lr, sdnn_config *cfg)
{
    sdnn_link l;
    if (strlen(lr->value) >= sizeof cfg->link || sdnn_link_find(lr->value, &l) != SDNN_OK) {
        char what[256];
        snprintf(what, sizeof what, "unknown link (%s)", sdnn_link_names());
        sdnn_clear_error();
        return line_error(lr, SDNN_ERR_INVALID, what);
    }
    snprintf(cfg->link, sizeof cfg->link, "%s", lr->value);
    return SDNN_OK;
}

static sdnn_status parse_link_gbps(const line_ref *lr, sdnn_config *cfg)
{
    if (!parse_number(lr->value, 0.0, 1e6, 1, 0, &cfg->link_gbps))
        return expected(lr, "a bandwidth in Gbit/s > 0 (e.g. 1 for 1 Gbit Ethernet)");
    return SDNN_OK;
}

static sdnn_status parse_link_us(const line_ref *lr, sdnn_config *cfg)
{
    if (!parse_number(lr->value, 0.0, 1e7, 0, 0, &cfg->link_us))
        return expected(lr, "a latency in microseconds >= 0");
    return SDNN_OK;
}

static sdnn_status parse_profile_iters(const line_ref *lr, sdnn_config *cfg)
{
    long v;
    if (!parse_integer(lr->value, 1, 100000, &v))
        return expected(lr, "an integer number of steps >= 1");
    cfg->profile_iters = (int)v;
    return SDNN_OK;
}

static sdnn_status parse_replan_drift(const line_ref *lr, sdnn_config *cfg)
{
    if (!parse_number(lr->value, 0.0, 100.0, 1, 0, &cfg->replan_drift))
        return expected(lr, "a fraction > 0 (e.g. 0.25)");
    return SDNN_OK;
}

static sdnn_status parse_comm_timeout(const line_ref *lr, sdnn_config *cfg)
{
    if (!parse_number(lr->value, 0.0, 86400.0, 1, 0, &cfg->comm_timeout_s))
        return expected(lr, "a number of seconds > 0 and <= 86400");
    return SDNN_OK;
}

static sdnn_status parse_fix_1x1_delta(const line_ref *lr, sdnn_config *cfg)
{
    if (strcmp(lr->value, "0") == 0)
        cfg->fix_1x1_delta = 0;
    else if (strcmp(lr->value, "1") == 0)
        cfg->fix_1x1_delta = 1;
    else
        return expected(lr, "0 (Darknet's overwriting 1x1 backward) or 1 (adds, the default)");
    return SDNN_OK;
}

static const key_spec g_keys[] = {
    { "mode", parse_mode, "scalednn or stock" },
    { "backend", parse_backend, "a backend (available: " BACKENDS_HERE ")" },
    { "bucket_mb", parse_bucket_mb, "auto or a number of MiB > 0 and <= 4096" },
    { "overlap", parse_overlap, "0 or 1" },
    { "interval", parse_interval, "an integer >= 1 and <= 1000000" },
    { "compress", parse_compress, "a codec (none, fp16, bf16, int8, topk, auto)" },
    { "csv", parse_csv, "a file path" },
    { "compress_min_kb", parse_compress_min_kb, "a number of KiB >= 0" },
    { "topk_ratio", parse_topk_ratio, "a fraction > 0 and <= 1" },
    { "int8_chunk", parse_int8_chunk, "an integer >= 1 and <= 1048576" },
    { "error_feedback", parse_error_feedback, "0 or 1" },
    { "stochastic_rounding", parse_stochastic, "0 or 1" },
    { "topk_momentum", parse_topk_momentum, "a number >= 0 and < 1" },
    { "topk_warmup", parse_topk_warmup, "an integer >= 0" },
    { "timeline", parse_timeline, "a file path (Chrome trace JSON)" },
    { "compress_allow", parse_compress_allow, "a list of codecs including none" },
    { "link", parse_link, "a link name" },
    { "link_gbps", parse_link_gbps, "a bandwidth in Gbit/s" },
    { "link_us", parse_link_us, "a latency in microseconds" },
    { "profile_iters", parse_profile_iters, "an integer >= 1" },
    { "replan_drift", parse_replan_drift, "a fraction > 0" },
    { "comm_timeout_s", parse_comm_timeout, "a number of seconds > 0" },
    { "fix_1x1_delta", parse_fix_1x1_delta, "0 or 1" },
};
enum { K_MODE, K_BACKEND, K_BUCKET_MB, K_OVERLAP, K_INTERVAL, K_COMPRESS, K_CSV,
       K_COMPRESS_MIN_KB, K_TOPK_RATIO, K_INT8_CHUNK, K_ERROR_FEEDBACK,
       K_STOCHASTIC, K_TOPK_MOMENTUM, K_TOPK_WARMUP, K_TIMELINE, K_COMPRESS_ALLOW,
       K_LINK, K_LINK_GBPS, K_LINK_US, K_PROFILE_ITERS, K_REPLAN_DRIFT, K_COMM_TIMEOUT,
       K_FIX_1X1_DELTA };
#define N_KEYS (sizeof g_keys / sizeof g_keys[0])

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
    char *eq = strchr(ps->line, '=');
    if (eq == NULL)
        return line_error(&lr, SDNN_ERR_INVALID,
                          "expected key=value (keys: " KNOWN_KEYS ")");
    *eq = '\0';
    lr.value = eq + 1;
    for (size_t k = 0; k < N_KEYS; k++) {
        if (strcmp(lr.key, g_keys[k].key) != 0) continue;
        if (ps->key_line[k] != 0) {
            char what[128];
            snprintf(what, sizeof what,
                     "repeated key (first at line %d); "
                     "each key may appear once",
                     ps->key_line[k]);
            return line_error(&lr, SDNN_ERR_INVALID, what);
        }
        ps->key_line[k] = lineno;
        if (lr.value[0] == '\0') {
            char what[160];
            snprintf(what, sizeof what, "empty value; expected %s",
                     g_keys[k].allowed);
            return line_error(&lr, SDNN_ERR_INVALID, what);
        }
        return g_keys[k].parse(&lr, ps->cfg);
    }
    return line_error(&lr, SDNN_ERR_INVALID, "unknown key (" KNOWN_KEYS ")");
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
    char what[256];
    int none = strcmp(c->compress, "none") == 0;
    int topk = strcmp(c->compress, "topk") == 0;
    int int8 = strcmp(c->compress, "int8") == 0;
    if (c->mode == SDNN_MODE_STOCK && !none)
        return combination_error(ps, K_COMPRESS,
                                 "compression needs mode=scalednn (stock mode "
                                 "averages weights, uncompressed, as Darknet does)");
    static const struct { int key; const char *codec; } only[] = {
        { K_TOPK_RATIO, "topk" }, { K_TOPK_MOMENTUM, "topk" },
        { K_TOPK_WARMUP, "topk" }, { K_INT8_CHUNK, "int8" },
        { K_STOCHASTIC, "int8" },
    };
    for (size_t i = 0; i < sizeof only / sizeof only[0]; i++) {
        if (!set[only[i].key] || strcmp(c->compress, only[i].codec) == 0) continue;
        snprintf(what, sizeof what, "applies to compress=%s only (compress=%s%s)",
                 only[i].codec, c->compress, set[K_COMPRESS] ? "" : ", the default");
        return combination_error(ps, only[i].key, what);
    }
    if (none && set[K_COMPRESS_MIN_KB])
        return combination_error(ps, K_COMPRESS_MIN_KB,
                                 "needs a codec (compress=fp16, bf16, int8 or topk)");
    if (none && c->error_feedback == 1)
        return combination_error(ps, K_ERROR_FEEDBACK,
                                 "needs a lossy codec (compress=fp16, bf16, int8 "
                                 "or topk); compress=none loses nothing");
    if (c->error_feedback < 0) c->error_feedback = topk;
    if (c->topk_momentum > 0 && !c->error_feedback)
        return combination_error(ps, K_TOPK_MOMENTUM,
                                 "momentum correction accumulates in the error-"
                                 "feedback residual; it needs error_feedback=1");
    (void)int8;
    int autoc = strcmp(c->compress, "auto") == 0;
    if (set[K_COMPRESS_ALLOW] && !autoc)
        return combination_error(ps, K_COMPRESS_ALLOW, "applies to compress=auto only");
    if (autoc && set[K_ERROR_FEEDBACK] && c->error_feedback)
        return combination_error(ps, K_ERROR_FEEDBACK,
                                 "with compress=auto error feedback follows the codec chosen "
                                 "for each bucket (on for topk, off otherwise)");
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
    if (!cfg->present) cfg->mode = SDNN_MODE_STOCK;
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
    if (cfg == NULL) {
        buf[0] = '\0';
        return;
    }
    char bucket[32];
    if (cfg->bucket_mb > 0) snprintf(bucket, sizeof bucket, "%g", cfg->bucket_mb);
    else snprintf(bucket, sizeof bucket, "auto");
    snprintf(buf, len,
             "mode=%s backend=%s bucket_mb=%s overlap=%d interval=%d "
             "compress=%s csv=%s",
             cfg->mode == SDNN_MODE_STOCK ? "stock" : "scalednn", cfg->backend,
             bucket, cfg->overlap, cfg->interval, cfg->compress,
             cfg->csv[0] != '\0' ? cfg->csv : "-");
    size_t used = strlen(buf);
    if (strcmp(cfg->compress, "none") == 0 || used + 1 >= len) return;
    char extra[256];
    if (strcmp(cfg->compress, "topk") == 0)
        snprintf(extra, sizeof extra, " topk_ratio=%g topk_momentum=%g topk_warmup=%d",
                 cfg->topk_ratio, cfg->topk_momentum, cfg->topk_warmup);
    else if (strcmp(cfg->compress, "int8") == 0)
        snprintf(extra, sizeof extra, " int8_chunk=%d stochastic_rounding=%d",
                 cfg->int8_chunk, cfg->stochastic_rounding);
    else if (strcmp(cfg->compress, "auto") == 0)
        snprintf(extra, sizeof extra, " compress_allow=%s", cfg->compress_allow);
    else
        extra[0] = '\0';
    snprintf(buf + used, len - used, "%s error_feedback=%d compress_min_kb=%g", extra,
             cfg->error_feedback, cfg->compress_min_kb);
}

const char *sdnn_config_backend(const sdnn_config *cfg)
{
    if (strcmp(cfg->backend, "auto") != 0) return cfg->backend;
    /* mpirun (OpenMPI) tells every process the size of its world. */
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    return ws && atoi(ws) > 1 ? "mpi" : "local";
}
