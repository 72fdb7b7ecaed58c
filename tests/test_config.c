/*
 * Tests of plugin/config.c: parsing and validating the [scalednn] section,
 * the cfg text without it (checked byte for byte), its error messages, and
 * the memfd copy that Darknet's own parse_network_cfg() must accept.
 */
#include <darknet.h> /* before cmocka.h, whose macros could clash with names */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec.h"
#include "comm.h"
#include "config.h"
#include "costmodel.h"
#include "replicas.h"

#define NAME "cfg/x.cfg"

/* ---- helpers ---------------------------------------------------------- */

/* Parse text that must be valid; return the stripped text (caller frees). */
static char *parse_ok(const char *text, sdnn_config *cfg)
{
    char *stripped = NULL;
    sdnn_clear_error();
    sdnn_status st = sdnn_config_parse_text(NAME, text, cfg, &stripped);
    if (st != SDNN_OK) print_error("unexpected error: %s\n", sdnn_last_error());
    assert_int_equal(st, SDNN_OK);
    assert_non_null(stripped);
    return stripped;
}

/* Parse text that must fail with `want`; check nothing was handed back. */
static void parse_fails(const char *text, sdnn_status want)
{
    sdnn_config cfg;
    char dummy = 0;
    char *stripped = &dummy;
    sdnn_clear_error();
    sdnn_status st = sdnn_config_parse_text(NAME, text, &cfg, &stripped);
    if (st != want) print_error("status %d, message: %s\n", st, sdnn_last_error());
    assert_int_equal(st, want);
    assert_null(stripped);
}

/* The last message contains `needle`. */
static void assert_msg_has(const char *needle)
{
    const char *msg = sdnn_last_error();
    if (strstr(msg, needle) == NULL)
        print_error("message \"%s\"\n  lacks \"%s\"\n", msg, needle);
    assert_non_null(strstr(msg, needle));
}

/* The last message starts with `prefix`. */
static void assert_msg_starts(const char *prefix)
{
    const char *msg = sdnn_last_error();
    if (strncmp(msg, prefix, strlen(prefix)) != 0)
        print_error("message \"%s\"\n  does not start with \"%s\"\n", msg,
                    prefix);
    assert_int_equal(strncmp(msg, prefix, strlen(prefix)), 0);
}

/* Parse a [scalednn] section holding only `line`; it must be valid. */
static void parse_line_ok(const char *line, sdnn_config *cfg)
{
    char text[2048];
    snprintf(text, sizeof text, "[net]\nbatch=1\n[scalednn]\n%s\n", line);
    char *stripped = parse_ok(text, cfg);
    assert_string_equal(stripped, "[net]\nbatch=1\n");
    free(stripped);
}

static void assert_defaults(const sdnn_config *cfg)
{
    assert_int_equal(cfg->present, 1);
    assert_int_equal(cfg->mode, SDNN_MODE_SCALEDNN);
    /* The defaults are the product: the backend and the codecs
     * chosen where the run starts, top-k among what the planner may pick. */
    assert_string_equal(cfg->backend, "auto");
    assert_true(cfg->bucket_mb == 0.0);   /* auto */
    assert_int_equal(cfg->overlap, 1);
    assert_int_equal(cfg->interval, 4);
    assert_string_equal(cfg->compress, "auto");
    assert_string_equal(cfg->compress_allow, "none,fp16,int8,topk");
    assert_int_equal(cfg->error_feedback, 0);   /* per bucket under auto (auto_ef) */
    assert_string_equal(cfg->csv, "");
}

/* Write text to a fresh temporary file whose name goes to path[64]. */
static void write_temp(const char *text, char path[64])
{
    snprintf(path, 64, "/tmp/sdnn-test-cfg-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    assert_int_equal(close(fd), 0);
}

/* Read all of `path` (malloc'd, NUL-terminated). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t cap = 1 << 16;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t n = fread(buf, 1, cap - 1, f);
    assert_false(ferror(f));
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* ---- sections and stripping ----------------------------------------------- */

static void test_no_section(void **state)
{
    (void)state;
    const char *text = "# a stock cfg\n[net]\nbatch=2\n\n[convolutional]\n"
                       "filters=4\n; end\n";
    sdnn_config cfg;
    char *stripped = parse_ok(text, &cfg);
    assert_int_equal(cfg.present, 0);
    assert_int_equal(cfg.mode, SDNN_MODE_STOCK);
    assert_string_equal(cfg.backend, "auto");
    assert_true(cfg.bucket_mb == 0.0);   /* auto */
    assert_int_equal(cfg.overlap, 1);
    assert_int_equal(cfg.interval, 4);
    /* stock mode averages weights uncompressed: compress=auto becomes none */
    assert_string_equal(cfg.compress, "none");
    assert_string_equal(cfg.csv, "");
    assert_string_equal(stripped, text);
    free(stripped);
}

static void test_empty_text(void **state)
{
    (void)state;
    sdnn_config cfg;
    char *stripped = parse_ok("", &cfg);
    assert_int_equal(cfg.present, 0);
    assert_int_equal(cfg.mode, SDNN_MODE_STOCK);
    assert_string_equal(stripped, "");
    free(stripped);
}

static void test_empty_section_defaults(void **state)
{
    (void)state;
    sdnn_config cfg;
    char *stripped = parse_ok("[net]\nbatch=2\n[scalednn]\n[softmax]\n", &cfg);
    assert_defaults(&cfg);
    assert_string_equal(stripped, "[net]\nbatch=2\n[softmax]\n");
    free(stripped);
}

static void test_section_first(void **state)
{
    (void)state;
    sdnn_config cfg;
    char *stripped = parse_ok("[scalednn]\n# settings\nmode = stock\n\n"
                              "bucket_mb=8\n[net]\nbatch=2\n"
                              "[convolutional]\nfilters=4\n",
                              &cfg);
    assert_int_equal(cfg.present, 1);
    assert_int_equal(cfg.mode, SDNN_MODE_STOCK);
    assert_true(cfg.bucket_mb == 8.0);
    assert_int_equal(cfg.interval, 4);
    assert_string_equal(stripped, "[net]\nbatch=2\n[convolutional]\nfilters=4\n");
    free(stripped);
}

static void test_section_middle(void **state)
{
    (void)state;
    sdnn_config cfg;
    char *stripped = parse_ok("# top comment\n[net]\nbatch=2\n\n"
                              "  [ scalednn ]  \n  overlap = 0\n; note\n\n"
                              "\tinterval=16\n[convolutional]\n  filters = 4 \n"
                              "mode=kept\n",
                              &cfg);
    assert_int_equal(cfg.present, 1);
    assert_int_equal(cfg.mode, SDNN_MODE_SCALEDNN);
    assert_int_equal(cfg.overlap, 0);
    assert_int_equal(cfg.interval, 16);
    assert_string_equal(stripped, "# top comment\n[net]\nbatch=2\n\n"
                                  "[convolutional]\n  filters = 4 \nmode=kept\n");
    free(stripped);
}

static void test_section_last_no_newline(void **state)
{
    (void)state;
    sdnn_config cfg;
    char *stripped = parse_ok("[net]\nbatch=2\n[softmax]\n[scalednn]\n"
                              "csv=/tmp/run.csv\ncompress=none",
                              &cfg);
    assert_int_equal(cfg.present, 1);
    assert_string_equal(cfg.csv, "/tmp/run.csv");
    assert_string_equal(cfg.compress, "none");
    assert_string_equal(stripped, "[net]\nbatch=2\n[softmax]\n");
    free(stripped);
}

static void test_kept_last_line_without_newline(void **state)
{
    (void)state;
    sdnn_config cfg;
    char *stripped = parse_ok("[scalednn]\nmode=stock\n[net]\nbatch=2", &cfg);
    assert_int_equal(cfg.mode, SDNN_MODE_STOCK);
    assert_string_equal(stripped, "[net]\nbatch=2");
    free(stripped);
}

static void test_crlf(void **state)
{
    (void)state;
    sdnn_config cfg;
    char *stripped = parse_ok("[net]\r\nbatch=2\r\n[scalednn]\r\nmode=stock\r\n"
                              "interval=8\r\n\r\n[convolutional]\r\n"
                              "filters=4\r\n",
                              &cfg);
    assert_int_equal(cfg.present, 1);
    assert_int_equal(cfg.mode, SDNN_MODE_STOCK);
    assert_int_equal(cfg.interval, 8);
    assert_string_equal(stripped,
                        "[net]\r\nbatch=2\r\n[convolutional]\r\nfilters=4\r\n");
    free(stripped);

    parse_fails("[scalednn]\r\noverlap=2\r\n", SDNN_ERR_INVALID);
    assert_msg_starts(NAME ":2: [scalednn] overlap=2: expected 0 or 1");
    assert_null(strchr(sdnn_last_error(), '\r'));
}

static void test_stripped_not_wanted(void **state)
{
    (void)state;
    sdnn_config cfg;
    assert_int_equal(sdnn_config_parse_text(NAME, "[scalednn]\ninterval=3\n",
                                            &cfg, NULL),
                     SDNN_OK);
    assert_int_equal(cfg.interval, 3);
}

/* ---- good values ---------------------------------------------------------- */

static void test_all_keys_good(void **state)
{
    (void)state;
    sdnn_config cfg;
    char *stripped = parse_ok("[net]\n[scalednn]\nmode=scalednn\nbackend=local\n"
                              "bucket_mb=0.25\noverlap=0\ninterval=1\n"
                              "compress=none\ncsv=out/run 1.csv\n[softmax]\n",
                              &cfg);
    assert_int_equal(cfg.present, 1);
    assert_int_equal(cfg.mode, SDNN_MODE_SCALEDNN);
    assert_string_equal(cfg.backend, "local");
    assert_true(cfg.bucket_mb == 0.25);
    assert_int_equal(cfg.overlap, 0);
    assert_int_equal(cfg.interval, 1);
    assert_string_equal(cfg.compress, "none");
    /* Darknet removes all whitespace, so does the parser. */
    assert_string_equal(cfg.csv, "out/run1.csv");
    assert_string_equal(stripped, "[net]\n[softmax]\n");
    free(stripped);
}

static void test_good_edge_values(void **state)
{
    (void)state;
    sdnn_config cfg;
    parse_line_ok("mode=stock", &cfg);
    assert_int_equal(cfg.mode, SDNN_MODE_STOCK);
    parse_line_ok("bucket_mb=4096", &cfg);
    assert_true(cfg.bucket_mb == 4096.0);
    parse_line_ok("bucket_mb=1e1", &cfg);
    assert_true(cfg.bucket_mb == 10.0);
    parse_line_ok("bucket_mb=0.001", &cfg);
    assert_true(cfg.bucket_mb == 0.001);
    parse_line_ok("overlap=1", &cfg);
    assert_int_equal(cfg.overlap, 1);
    parse_line_ok("interval=1000000", &cfg);
    assert_int_equal(cfg.interval, 1000000);
    parse_line_ok(" interval = 2 ", &cfg);
    assert_int_equal(cfg.interval, 2);

    char line[1100];
    memcpy(line, "csv=", 4);
    memset(line + 4, 'a', 1023);
    line[4 + 1023] = '\0';
    parse_line_ok(line, &cfg);
    assert_int_equal(strlen(cfg.csv), 1023);
}

/* ---- bad values: one test per case ---------------------------------------- */

/* Every numeric key of the table, a value past either end and one that is
 * no number: the message names the key and value and states both ends of
 * the range, each as open or closed as the table checks it. */
static void test_numeric_keys_state_both_bounds(void **state)
{
    (void)state;
    int numeric = 0;
    for (size_t i = 0; i < sdnn_config_key_count(); ++i) {
        double lo, hi;
        int lo_open, hi_open;
        int kind = sdnn_config_key_range(i, &lo, &hi, &lo_open, &hi_open);
        if (!kind) continue;
        ++numeric;
        char low[64], high[64], vals[3][64];
        snprintf(low, sizeof low, "%s %.15g", lo_open ? ">" : ">=", lo);
        snprintf(high, sizeof high, "%s %.15g", hi_open ? "<" : "<=", hi);
        snprintf(vals[0], sizeof vals[0], "%.15g", kind == 1 ? hi + 1 : hi_open ? hi : 2 * hi + 1);
        snprintf(vals[1], sizeof vals[1], "%.15g", kind == 1 || !lo_open ? lo - 1 : lo);
        snprintf(vals[2], sizeof vals[2], "x");
        for (int v = 0; v < 3; ++v) {
            char text[512], kv[300];
            snprintf(kv, sizeof kv, "%s=%s", sdnn_config_key_name(i), vals[v]);
            snprintf(text, sizeof text, "[scalednn]\n%s\n", kv);
            sdnn_config cfg;
            sdnn_clear_error();
            assert_int_equal(sdnn_config_parse_text(NAME, text, &cfg, NULL), SDNN_ERR_INVALID);
            const char *msg = sdnn_last_error();
            const char *need[] = {kv, low, high};
            for (size_t n = 0; n < 3; ++n) {
                if (!strstr(msg, need[n])) print_error("%s: lacks \"%s\"\n", msg, need[n]);
                assert_non_null(strstr(msg, need[n]));
            }
        }
    }
    assert_true(numeric >= 10);
}

typedef struct bad_case {
    const char *line;    /* the line inside the section (no whitespace) */
    sdnn_status status;
    const char *what;    /* what the message must say is wrong */
    const char *allowed; /* what the message must say is allowed */
} bad_case;

/* The key list the messages give: the table's names in table order, built
 * from sdnn_config_key_name (test_keys_match_readme checks the table itself
 * against README). */
#define KEYS "<the key table>"
static const char *key_list(void)
{
    static char buf[1024];
    size_t at = 0;
    for (size_t i = 0; i < sdnn_config_key_count(); ++i)
        at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%s", i ? ", " : "",
                               sdnn_config_key_name(i));
    return buf;
}
static const char *expand(const char *s) { return strcmp(s, KEYS) == 0 ? key_list() : s; }

#define BUCKET "> 0 and <= 4096"
#define INTERVAL ">= 1 and <= 1000000"
#define BACKENDS "(local, mpi, nccl, auto)"
#define CODECS "(none, fp16, bf16, int8, topk, auto)"
#define NOT_HERE "not available in this build"
/* What a CPU build says it lacks for backend=nccl (comm_nccl.c). */
#define NO_NCCL "a CPU build has no GPU engine and no NCCL (make GPU=1 with NCCL, or GPU=sim " \
                "for simulated devices)"
#if SDNN_MPI
#define AVAILABLE "(available: local, mpi, auto)"
#else
#define AVAILABLE "(available: local, auto)"
#endif
#define TIMEOUT "seconds > 0 and <= 86400"

static const bad_case g_bad[] = {
    { "speed=3", SDNN_ERR_INVALID, "unknown key", KEYS },
    { "=3", SDNN_ERR_INVALID, "unknown key", KEYS },
    { "overlap", SDNN_ERR_INVALID, "expected key=value", KEYS },
    { "mode=fast", SDNN_ERR_INVALID, "unknown mode", "(scalednn, stock)" },
    { "mode=", SDNN_ERR_INVALID, "empty value", "scalednn or stock" },
    { "backend=tcp", SDNN_ERR_INVALID, "unknown backend", BACKENDS },
#if !SDNN_MPI
    { "backend=mpi", SDNN_ERR_UNSUPPORTED, NOT_HERE, AVAILABLE },
#endif
#if !SDNN_GPU_ENGINE
    { "backend=nccl", SDNN_ERR_UNSUPPORTED, NOT_HERE ": " NO_NCCL, AVAILABLE },
#endif
    { "backend=", SDNN_ERR_INVALID, "empty value", AVAILABLE },
    { "fix_1x1_delta=2", SDNN_ERR_INVALID, "expected", "0 (Darknet's overwriting" },
    { "fix_1x1_delta=yes", SDNN_ERR_INVALID, "expected", "or 1 (adds, the default)" },
    { "fix_1x1_delta=01", SDNN_ERR_INVALID, "expected", "0 (Darknet's overwriting" },
    { "fix_1x1_delta=", SDNN_ERR_INVALID, "empty value", "0 or 1" },
    { "comm_timeout_s=0", SDNN_ERR_INVALID, "expected", TIMEOUT },
    { "comm_timeout_s=-5", SDNN_ERR_INVALID, "expected", TIMEOUT },
    { "comm_timeout_s=abc", SDNN_ERR_INVALID, "expected", TIMEOUT },
    { "comm_timeout_s=nan", SDNN_ERR_INVALID, "expected", TIMEOUT },
    { "comm_timeout_s=1e9", SDNN_ERR_INVALID, "expected", TIMEOUT },
    { "bucket_mb=abc", SDNN_ERR_INVALID, "expected", BUCKET },
    { "bucket_mb=-1", SDNN_ERR_INVALID, "expected", BUCKET },
    { "bucket_mb=0", SDNN_ERR_INVALID, "expected", BUCKET },
    { "bucket_mb=4x", SDNN_ERR_INVALID, "expected", BUCKET },
    { "bucket_mb=4097", SDNN_ERR_INVALID, "expected", BUCKET },
    { "bucket_mb=inf", SDNN_ERR_INVALID, "expected", BUCKET },
    { "bucket_mb=nan", SDNN_ERR_INVALID, "expected", BUCKET },
    { "bucket_mb=1e999", SDNN_ERR_INVALID, "expected", BUCKET },
    { "link=eth2g", SDNN_ERR_INVALID, "unknown link", "pcie3" },
    { "link_gbps=0", SDNN_ERR_INVALID, "expected", "Gbit/s > 0" },
    { "link_us=-1", SDNN_ERR_INVALID, "expected", "microseconds >= 0" },
    { "profile_iters=0", SDNN_ERR_INVALID, "expected", ">= 1" },
    { "replan_drift=0", SDNN_ERR_INVALID, "expected", "fraction > 0" },
    { "compress_allow=fp16,int8", SDNN_ERR_INVALID, "must include none", "none" },
    { "compress_allow=none,fp8", SDNN_ERR_INVALID, "unknown codec fp8", "none, fp16" },
    { "iter_factor=topk", SDNN_ERR_INVALID, "topk: expected NAME:X", "topk:1.5" },
    { "iter_factor=topk:", SDNN_ERR_INVALID, "expected NAME:X", "topk:1.5" },
    { "iter_factor=:1.5", SDNN_ERR_INVALID, "expected NAME:X", "topk:1.5" },
    { "iter_factor=topk:0", SDNN_ERR_INVALID, "topk:0: expected a factor", "> 0 and <= 100" },
    { "iter_factor=topk:-1", SDNN_ERR_INVALID, "expected a factor", "> 0 and <= 100" },
    { "iter_factor=topk:abc", SDNN_ERR_INVALID, "expected a factor", "> 0 and <= 100" },
    { "iter_factor=topk:nan", SDNN_ERR_INVALID, "expected a factor", "> 0 and <= 100" },
    { "iter_factor=topk:1e3", SDNN_ERR_INVALID, "expected a factor", "> 0 and <= 100" },
    { "iter_factor=topk:0x2", SDNN_ERR_INVALID, "expected a factor", "> 0 and <= 100" },
    { "iter_factor=fp12:1.2", SDNN_ERR_INVALID, "unknown codec fp12", "none, fp16, bf16" },
    { "iter_factor=none:1.5", SDNN_ERR_INVALID, "none is the reference", "its factor is 1" },
    { "iter_factor=topk:1.5,topk:1.2", SDNN_ERR_INVALID, "topk is named twice", "" },
    { "iter_factor=topk:1.5,", SDNN_ERR_INVALID, "an empty item", "NAME:X" },
    { "iter_factor=fp16:1,,int8:1.2", SDNN_ERR_INVALID, "an empty item", "NAME:X" },
    { "iter_factor=", SDNN_ERR_INVALID, "empty value", "CODEC:FACTOR" },
    { "bucket_mb=", SDNN_ERR_INVALID, "empty value", BUCKET },
    { "overlap=2", SDNN_ERR_INVALID, "expected", "0 or 1" },
    { "overlap=yes", SDNN_ERR_INVALID, "expected", "0 or 1" },
    { "overlap=-1", SDNN_ERR_INVALID, "expected", "0 or 1" },
    { "overlap=1x", SDNN_ERR_INVALID, "expected", "0 or 1" },
    { "overlap=", SDNN_ERR_INVALID, "empty value", "0 or 1" },
    { "interval=0", SDNN_ERR_INVALID, "expected", INTERVAL },
    { "interval=-3", SDNN_ERR_INVALID, "expected", INTERVAL },
    { "interval=abc", SDNN_ERR_INVALID, "expected", INTERVAL },
    { "interval=4x", SDNN_ERR_INVALID, "expected", INTERVAL },
    { "interval=2.5", SDNN_ERR_INVALID, "expected", INTERVAL },
    { "interval=1000001", SDNN_ERR_INVALID, "expected", INTERVAL },
    { "interval=99999999999999999999", SDNN_ERR_INVALID, "expected", INTERVAL },
    { "interval=", SDNN_ERR_INVALID, "empty value", INTERVAL },
    { "compress=fp12", SDNN_ERR_INVALID, "unknown codec", CODECS },
    { "compress=FP16", SDNN_ERR_INVALID, "unknown codec", CODECS },
    { "compress=", SDNN_ERR_INVALID, "empty value", "none, fp16, bf16, int8, topk" },
    { "compress_min_kb=-1", SDNN_ERR_INVALID, "expected", "KiB >= 0" },
    { "compress_min_kb=x", SDNN_ERR_INVALID, "expected", "KiB >= 0" },
    { "topk_ratio=0", SDNN_ERR_INVALID, "expected", "> 0 and <= 1" },
    { "topk_ratio=1.5", SDNN_ERR_INVALID, "expected", "> 0 and <= 1" },
    { "topk_ratio=nan", SDNN_ERR_INVALID, "expected", "> 0 and <= 1" },
    { "int8_chunk=0", SDNN_ERR_INVALID, "expected", ">= 1 and <= 1048576" },
    { "int8_chunk=12.5", SDNN_ERR_INVALID, "expected", ">= 1 and <= 1048576" },
    { "int8_chunk=2000000", SDNN_ERR_INVALID, "expected", ">= 1 and <= 1048576" },
    { "error_feedback=2", SDNN_ERR_INVALID, "expected", "0 or 1" },
    { "error_feedback=01", SDNN_ERR_INVALID, "expected", "0 or 1" },
    { "stochastic_rounding=yes", SDNN_ERR_INVALID, "expected", "0 or 1" },
    { "topk_momentum=1", SDNN_ERR_INVALID, "expected", ">= 0 and < 1" },
    { "topk_momentum=-0.1", SDNN_ERR_INVALID, "expected", ">= 0 and < 1" },
    { "topk_warmup=-5", SDNN_ERR_INVALID, "expected", ">= 0" },
    { "csv=", SDNN_ERR_INVALID, "empty value", "file path" },
    { "timeline=", SDNN_ERR_INVALID, "empty value", "Chrome trace" },
};
#define N_BAD (sizeof g_bad / sizeof g_bad[0])

/* The bad line sits on line 5, inside a section that is in the middle. */
static void test_bad_value(void **state)
{
    const bad_case *c = *state;
    char text[512];
    snprintf(text, sizeof text,
             "[net]\nbatch=1\n[scalednn]\n# comment\n%s\n"
             "[convolutional]\nfilters=1\n",
             c->line);
    parse_fails(text, c->status);
    char prefix[256];
    snprintf(prefix, sizeof prefix, NAME ":5: [scalednn] %s: ", c->line);
    assert_msg_starts(prefix);
    assert_msg_has(NAME);
    assert_msg_has(c->line); /* key and value */
    assert_msg_has(c->what);
    assert_msg_has(expand(c->allowed));
}

static void test_message_examples(void **state)
{
    (void)state;
    const char *head = "[net]\nbatch=1\n[convolutional]\nfilters=1\nsize=3\n"
                       "stride=1\npad=1\nactivation=leaky\n[scalednn]\n";
    char text[512];
    snprintf(text, sizeof text, "%soverlap=2\n", head);
    parse_fails(text, SDNN_ERR_INVALID);
    assert_msg_starts(NAME ":10: [scalednn] overlap=2: expected 0 or 1");

    snprintf(text, sizeof text, "%smode=stock\ncompress=fp12\n", head);
    parse_fails(text, SDNN_ERR_INVALID);
    assert_msg_starts(NAME ":11: [scalednn] compress=fp12: unknown codec "
                      "(none, fp16, bf16, int8, topk, auto)");
}

/* Keys that clash with the codec or mode: the message names the key's line
 * and what it needs. */
static void test_bad_combinations(void **state)
{
    (void)state;
    static const struct {
        const char *lines;   /* lines 3.. of the section */
        int line;            /* line the message names */
        const char *key;
        const char *what;
    } cases[] = {
        { "compress=fp16\ntopk_ratio=0.1\n", 4, "topk_ratio", "applies to compress=topk only (compress=fp16)" },
        { "compress=none\ntopk_warmup=10\n", 4, "topk_warmup", "applies to compress=topk only (compress=none)" },
        { "compress_allow=none,fp16\ntopk_warmup=10\n", 4, "topk_warmup",
          "applies to compress=topk only, or to compress=auto with topk in compress_allow "
          "(compress=auto, the default, compress_allow=none,fp16)" },
        { "topk_momentum=0.9\n", 3, "topk_momentum", "momentum correction needs compress=topk" },
        { "bucket_mb=4\ncompress=auto\n", 4, "compress",
          "compress=auto plans the codecs together with the buckets: it needs bucket_mb=auto "
          "(bucket_mb=4 on line 3)" },
        { "bucket_mb=2\ntopk_ratio=0.1\n", 4, "topk_ratio",
          "(the default, compress=auto, is none with a fixed bucket_mb=2: auto plans codecs "
          "with bucket_mb=auto)" },
        { "mode=stock\ncompress_allow=none,fp16\n", 4, "compress_allow",
          "applies to compress=auto only (mode=stock averages weights uncompressed)" },
        { "compress=topk\nint8_chunk=64\n", 4, "int8_chunk", "applies to compress=int8 only" },
        { "compress=bf16\nstochastic_rounding=1\n", 4, "stochastic_rounding", "compress=int8 only" },
        { "compress=none\ncompress_min_kb=64\n", 4, "compress_min_kb", "needs a codec" },
        { "compress=none\nerror_feedback=1\n", 4, "error_feedback", "needs a lossy codec" },
        { "error_feedback=1\n", 3, "error_feedback", "with compress=auto (the default) error "
          "feedback follows the codec" },
        { "compress=topk\nerror_feedback=0\ntopk_momentum=0.9\n", 5, "topk_momentum", "needs error_feedback=1" },
        { "mode=stock\ncompress=int8\n", 4, "compress", "needs mode=scalednn" },
        { "compress=fp16\ncompress_allow=none,int8\n", 4, "compress_allow", "compress=auto only" },
        { "link=eth1g\nlink_gbps=1\n", 4, "link_gbps", "either link= or link_gbps=" },
        { "link_us=5\n", 3, "link_us", "needs link_gbps=" },
        { "compress=auto\nerror_feedback=1\n", 4, "error_feedback", "follows the codec" },
    { "compress=topk\niter_factor=topk:1.2\n", 4, "iter_factor", "applies to compress=auto only" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        char text[512], prefix[256];
        snprintf(text, sizeof text, "[net]\n[scalednn]\n%s[convolutional]\n", cases[i].lines);
        parse_fails(text, SDNN_ERR_INVALID);
        snprintf(prefix, sizeof prefix, NAME ":%d: [scalednn] %s: ", cases[i].line, cases[i].key);
        assert_msg_starts(prefix);
        assert_msg_has(cases[i].what);
    }
}

/* Every codec parses with its keys; error feedback defaults on for topk
 * only. */
static void test_codec_keys(void **state)
{
    (void)state;
    sdnn_config cfg;
    const char *text = "[scalednn]\ncompress=topk\ntopk_ratio=0.05\ntopk_momentum=0.9\n"
                       "topk_warmup=100\ncompress_min_kb=16\n";
    assert_int_equal(sdnn_config_parse_text(NAME, text, &cfg, NULL), SDNN_OK);
    assert_string_equal(cfg.compress, "topk");
    assert_true(cfg.topk_ratio == 0.05);
    assert_true(cfg.topk_momentum == 0.9);
    assert_int_equal(cfg.topk_warmup, 100);
    assert_true(cfg.compress_min_kb == 16);
    assert_int_equal(cfg.error_feedback, 1);
    text = "[scalednn]\ncompress=int8\nint8_chunk=64\nstochastic_rounding=1\n";
    assert_int_equal(sdnn_config_parse_text(NAME, text, &cfg, NULL), SDNN_OK);
    assert_int_equal(cfg.int8_chunk, 64);
    assert_int_equal(cfg.stochastic_rounding, 1);
    assert_int_equal(cfg.error_feedback, 0);
    text = "[scalednn]\ncompress=fp16\nerror_feedback=1\n";
    assert_int_equal(sdnn_config_parse_text(NAME, text, &cfg, NULL), SDNN_OK);
    assert_int_equal(cfg.error_feedback, 1);
    text = "[scalednn]\ncompress=bf16\n";
    assert_int_equal(sdnn_config_parse_text(NAME, text, &cfg, NULL), SDNN_OK);
    assert_string_equal(cfg.compress, "bf16");
    assert_int_equal(cfg.error_feedback, 0);
    char desc[512];
    sdnn_config_describe(&cfg, desc, sizeof desc);
    assert_non_null(strstr(desc, "compress=bf16 csv=- error_feedback=0 compress_min_kb=0"));
}

/* bucket_mb=auto and compress=auto with their keys. */
static void test_auto_keys(void **state)
{
    (void)state;
    sdnn_config cfg;
    const char *text = "[scalednn]\nbucket_mb=auto\ncompress=auto\ncompress_allow=none,bf16,topk\n"
                       "link_gbps=10\nlink_us=20\nprofile_iters=3\nreplan_drift=0.5\n";
    assert_int_equal(sdnn_config_parse_text(NAME, text, &cfg, NULL), SDNN_OK);
    assert_true(cfg.bucket_mb == 0.0);
    assert_string_equal(cfg.compress, "auto");
    assert_string_equal(cfg.compress_allow, "none,bf16,topk");
    assert_true(cfg.link_gbps == 10.0 && cfg.link_us == 20.0);
    assert_int_equal(cfg.profile_iters, 3);
    assert_true(cfg.replan_drift == 0.5);
    /* iter_factor: the codecs it names take its numbers, the others keep
     * their own (the registry's stated factors); none is the reference. */
    assert_string_equal(cfg.iter_factor, "");
    text = "[scalednn]\ncompress=auto\niter_factor=int8:1.1,topk:2\n";
    assert_int_equal(sdnn_config_parse_text(NAME, text, &cfg, NULL), SDNN_OK);
    assert_string_equal(cfg.iter_factor, "int8:1.1,topk:2");
    assert_true(sdnn_iter_factor(cfg.iter_factor, "int8") == 1.1);
    assert_true(sdnn_iter_factor(cfg.iter_factor, "topk") == 2.0);
    assert_true(sdnn_iter_factor(cfg.iter_factor, "fp16") == sdnn_codec_fp16.iter_factor);
    assert_true(sdnn_iter_factor(cfg.iter_factor, "none") == 1.0);
    assert_true(sdnn_iter_factor("", "topk") == sdnn_codec_topk.iter_factor);
    assert_true(sdnn_iter_factor(NULL, "int8") == sdnn_codec_int8.iter_factor);
    assert_true(sdnn_iter_factor("none:1,fp16:0.8", "fp16") == 0.8);
    /* every codec of the registry states a factor, none's is 1 */
    assert_true(sdnn_codec_none.iter_factor == 1.0);
    const sdnn_codec_ops *all[] = {&sdnn_codec_fp16, &sdnn_codec_bf16, &sdnn_codec_int8,
                                   &sdnn_codec_topk};
    for (int i = 0; i < 4; ++i) assert_true(all[i]->iter_factor >= 1.0);
    text = "[scalednn]\nlink=nvlink3\nbucket_mb=2\n";
    assert_int_equal(sdnn_config_parse_text(NAME, text, &cfg, NULL), SDNN_OK);
    assert_string_equal(cfg.link, "nvlink3");
    assert_true(cfg.bucket_mb == 2.0);
    char desc[512];
    sdnn_config_describe(&cfg, desc, sizeof desc);
    assert_non_null(strstr(desc, "bucket_mb=2 "));
    assert_int_equal(sdnn_config_parse_text(NAME, "[scalednn]\n", &cfg, NULL), SDNN_OK);
    sdnn_config_describe(&cfg, desc, sizeof desc);
    assert_non_null(strstr(desc, "bucket_mb=auto "));
}

static void test_csv_too_long(void **state)
{
    (void)state;
    char text[1200];
    int n = snprintf(text, sizeof text, "[scalednn]\ncsv=");
    memset(text + n, 'a', 1024);
    strcpy(text + n + 1024, "\n");
    parse_fails(text, SDNN_ERR_INVALID);
    assert_msg_starts(NAME ":2: [scalednn] csv=aaaa");
    assert_msg_has("path too long");
    assert_msg_has("at most 1023 characters");
}

static void test_repeated_key(void **state)
{
    (void)state;
    parse_fails("[net]\n[scalednn]\noverlap=1\nmode=stock\n\n overlap = 0\n",
                SDNN_ERR_INVALID);
    assert_msg_starts(NAME ":6: [scalednn] overlap=0: repeated key");
    assert_msg_has("(first at line 3)");
}

static void test_two_sections(void **state)
{
    (void)state;
    parse_fails("[net]\nbatch=1\n[scalednn]\nmode=stock\n[convolutional]\n"
                "filters=1\n[scalednn]\n",
                SDNN_ERR_INVALID);
    assert_msg_starts(NAME ":7: [scalednn]: second [scalednn] section "
                      "(first at line 3); only one is allowed");
}

static void test_long_unknown_key_is_shortened(void **state)
{
    (void)state;
    char text[4200];
    int n = snprintf(text, sizeof text, "[scalednn]\n");
    memset(text + n, 'k', 4000);
    strcpy(text + n + 4000, "=1\n");
    parse_fails(text, SDNN_ERR_INVALID);
    assert_msg_starts(NAME ":2: [scalednn] kkkk");
    char want[1100];
    snprintf(want, sizeof want, "...=1: unknown key (%s)", key_list());
    assert_msg_has(want);
}

/* ---- backends across processes ------------------------------------------- */

static void test_backend_keys(void **state)
{
    (void)state;
    sdnn_config cfg;
    free(parse_ok("[scalednn]\n", &cfg));
    assert_true(cfg.comm_timeout_s == 60.0);
    free(parse_ok("[scalednn]\nbackend=auto\ncomm_timeout_s=2.5\n", &cfg));
    assert_string_equal(cfg.backend, "auto");
    assert_true(cfg.comm_timeout_s == 2.5);
#if SDNN_MPI
    free(parse_ok("[scalednn]\nbackend=mpi\n", &cfg));
    assert_string_equal(cfg.backend, "mpi");
    assert_string_equal(sdnn_config_backend(&cfg), "mpi");
#endif
    /* auto: mpi only for a world of more than one process under mpirun. */
    free(parse_ok("[scalednn]\nbackend=auto\n", &cfg));
    char *saved = getenv("OMPI_COMM_WORLD_SIZE");
    char keep[32] = "";
    if (saved) snprintf(keep, sizeof keep, "%s", saved);
    unsetenv("OMPI_COMM_WORLD_SIZE");
    assert_string_equal(sdnn_config_backend(&cfg), "local");
    setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
    assert_string_equal(sdnn_config_backend(&cfg), "local");
    setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    assert_string_equal(sdnn_config_backend(&cfg), "mpi");
    /* The gpu engine between processes: nccl where the build has it (a
     * GPU=sim build or GPU=1 with NCCL); the cpu engine keeps mpi. */
    free(parse_ok("[scalednn]\nbackend=auto\nengine=gpu\n", &cfg));
    assert_string_equal(sdnn_config_backend(&cfg), sdnn_comm_known("nccl") == 1 ? "nccl" : "mpi");
    free(parse_ok("[scalednn]\nbackend=auto\nengine=cpu\n", &cfg));
    assert_string_equal(sdnn_config_backend(&cfg), "mpi");
    setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
    free(parse_ok("[scalednn]\nbackend=auto\nengine=gpu\n", &cfg));
    assert_string_equal(sdnn_config_backend(&cfg), "local");
    if (saved) setenv("OMPI_COMM_WORLD_SIZE", keep, 1);
    else unsetenv("OMPI_COMM_WORLD_SIZE");
    free(parse_ok("[scalednn]\nbackend=local\n", &cfg));
    assert_string_equal(sdnn_config_backend(&cfg), "local");
    /* One list of names: the comm registry's, nccl in it whatever the build. */
    assert_string_equal(sdnn_comm_names(), "local, mpi, nccl");
#if !SDNN_GPU_ENGINE
    /* A CPU build knows the name and says what it lacks, at the cfg (above)
     * and when the backend is opened. */
    assert_int_equal(sdnn_comm_known("nccl"), 0);
    sdnn_comm *c = (sdnn_comm *)&cfg;
    assert_int_equal(sdnn_comm_open("nccl", &c), SDNN_ERR_UNSUPPORTED);
    assert_null(c);
    assert_non_null(strstr(sdnn_last_error(), "comm backend nccl is not available in this build: "
                                              NO_NCCL));
#endif
}

/* ---- the 1x1 delta fix ----------------------------------------------------- */

static void test_engine_key(void **state)
{
    (void)state;
    sdnn_config cfg;
    free(parse_ok("[scalednn]\n", &cfg));
    assert_string_equal(cfg.engine, "cpu");
    free(parse_ok("[scalednn]\nengine=gpu\n", &cfg));
    assert_string_equal(cfg.engine, "gpu");
    free(parse_ok("[scalednn]\nengine=auto\n", &cfg));
    assert_string_equal(cfg.engine, "auto");
    parse_fails("[scalednn]\nengine=tpu\n", SDNN_ERR_INVALID);
    assert_msg_starts(NAME ":2: [scalednn] engine=tpu");
    assert_msg_has("unknown engine (cpu, gpu, auto)");
}

/* preload=1..8 (2 by default) and split=cpu|device0 (cpu by default). */
static void test_preload_split_keys(void **state)
{
    (void)state;
    sdnn_config cfg;
    free(parse_ok("[scalednn]\n", &cfg));
    assert_int_equal(cfg.preload, 2);
    assert_string_equal(cfg.split, "cpu");
    free(parse_ok("[scalednn]\npreload=1\nsplit=device0\n", &cfg));
    assert_int_equal(cfg.preload, 1);
    assert_string_equal(cfg.split, "device0");
    free(parse_ok("[scalednn]\npreload=8\nsplit=cpu\n", &cfg));
    assert_int_equal(cfg.preload, 8);
    parse_fails("[scalednn]\npreload=0\n", SDNN_ERR_INVALID);
    assert_msg_starts(NAME ":2: [scalednn] preload=0");
    assert_msg_has("an integer >= 1 and <= 8");
    parse_fails("[scalednn]\nmode=scalednn\npreload=9\n", SDNN_ERR_INVALID);
    assert_msg_starts(NAME ":3: [scalednn] preload=9");
    parse_fails("[scalednn]\nsplit=device1\n", SDNN_ERR_INVALID);
    assert_msg_starts(NAME ":2: [scalednn] split=device1");
    assert_msg_has("unknown split (cpu, device0)");
    char desc[512];
    free(parse_ok("[scalednn]\npreload=3\nsplit=device0\n", &cfg));
    sdnn_config_describe(&cfg, desc, sizeof desc);
    assert_non_null(strstr(desc, " preload=3 split=device0 "));
}

/* virtual=0|1 (0 by default) and what it allows of the -gpus ids. */
static void test_virtual_key(void **state)
{
    (void)state;
    sdnn_config cfg;
    free(parse_ok("[net]\nbatch=1\n", &cfg));
    assert_int_equal(cfg.virtual_devices, 0);
    free(parse_ok("[scalednn]\nengine=gpu\n", &cfg));
    assert_int_equal(cfg.virtual_devices, 0);
    const int twice[] = {1, 0, 1}, once[] = {2, 0, 1};
    assert_int_equal(sdnn_config_check_devices(&cfg, once, 3), SDNN_OK);
    assert_int_equal(sdnn_config_check_devices(&cfg, NULL, 3), SDNN_OK);
    assert_int_equal(sdnn_config_check_devices(&cfg, twice, 2), SDNN_OK);
    assert_int_equal(sdnn_config_check_devices(&cfg, twice, 3), SDNN_ERR_INVALID);
    assert_msg_has("id 1 is listed twice (replicas 0 and 2)");
    assert_msg_has("[scalednn] virtual=1");
    free(parse_ok("[scalednn]\nvirtual=1\n", &cfg));
    assert_int_equal(cfg.virtual_devices, 1);
    assert_int_equal(sdnn_config_check_devices(&cfg, twice, 3), SDNN_OK);
    parse_fails("[scalednn]\nvirtual=2\n", SDNN_ERR_INVALID);
    assert_msg_starts(NAME ":2: [scalednn] virtual=2");
    assert_msg_has("expected 0 (each -gpus id once, as Darknet) or 1 (an id may repeat)");
    parse_fails("[scalednn]\nvirtual=\n", SDNN_ERR_INVALID);
}

static void test_fix_1x1_delta_key(void **state)
{
    (void)state;
    sdnn_config cfg;
    /* On by default, with or without a section (stock mode fixes too). */
    free(parse_ok("[net]\nbatch=1\n", &cfg));
    assert_int_equal(cfg.fix_1x1_delta, 1);
    free(parse_ok("[scalednn]\n", &cfg));
    assert_int_equal(cfg.fix_1x1_delta, 1);
    free(parse_ok("[scalednn]\nfix_1x1_delta=0\n", &cfg));
    assert_int_equal(cfg.fix_1x1_delta, 0);
    free(parse_ok("[scalednn]\nmode=stock\nfix_1x1_delta=0\n", &cfg));
    assert_int_equal(cfg.fix_1x1_delta, 0);
    assert_int_equal(cfg.mode, SDNN_MODE_STOCK);
    free(parse_ok("[scalednn]\nfix_1x1_delta = 1\n", &cfg));
    assert_int_equal(cfg.fix_1x1_delta, 1);
}

/* ---- describe --------------------------------------------------------------- */

static void test_describe(void **state)
{
    (void)state;
    sdnn_config cfg = SDNN_CONFIG_INIT;
    char buf[512];
    sdnn_config_describe(&cfg, buf, sizeof buf);
    /* compress=auto (the default): the keys of the codecs it may choose,
     * error feedback per codec, no topk_momentum (compress=topk only) */
    assert_string_equal(buf, "mode=scalednn backend=auto preload=2 split=cpu cpu_conv=auto bucket_mb=auto overlap=1 "
                             "interval=4 compress=auto csv=- topk_ratio=0.01 topk_warmup=0 "
                             "int8_chunk=256 stochastic_rounding=0 compress_allow=none,fp16,int8,topk "
                             "error_feedback=auto compress_min_kb=0");
    snprintf(cfg.backend, sizeof cfg.backend, "local");
    snprintf(cfg.compress, sizeof cfg.compress, "none");   /* as stock mode parses */
    cfg.mode = SDNN_MODE_STOCK;
    cfg.bucket_mb = 0.5;
    cfg.overlap = 0;
    cfg.interval = 16;
    snprintf(cfg.csv, sizeof cfg.csv, "/tmp/a.csv");
    sdnn_config_describe(&cfg, buf, sizeof buf);
    assert_string_equal(buf, "mode=stock backend=local preload=2 split=cpu cpu_conv=auto bucket_mb=0.5 overlap=0 "
                             "interval=16 compress=none csv=/tmp/a.csv");
    sdnn_config_describe(&cfg, buf, 10);
    assert_string_equal(buf, "mode=stoc");
}

/* ---- the key table is the only list ------------------------------------------ */

static int table_has(const char *key)
{
    for (size_t i = 0; i < sdnn_config_key_count(); ++i)
        if (strcmp(sdnn_config_key_name(i), key) == 0) return 1;
    return 0;
}

/* README's [scalednn] example names every key of the table (as `key=` or
 * `#key=`), and nothing else. */
static void test_keys_match_readme(void **state)
{
    (void)state;
    FILE *f = fopen("README.md", "r");
    if (!f) print_error("README.md: %s (run from the repository root)\n", strerror(errno));
    assert_non_null(f);
    char line[512];
    int in = 0, nread = 0;
    char seen[64][32];
    while (fgets(line, sizeof line, f)) {
        if (!in) {
            in = strcmp(line, "    [scalednn]\n") == 0;
            continue;
        }
        if (line[0] != ' ' && line[0] != '\n') break;
        const char *p = line;
        while (*p == ' ') ++p;
        if (*p == '#') ++p;
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (n == 0 || p[n] != '=') continue;
        char key[32];
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        if (!table_has(key)) print_error("README names %s, which is not a key\n", key);
        assert_true(table_has(key));
        assert_true(nread < 64);
        snprintf(seen[nread++], sizeof seen[0], "%s", key);
    }
    fclose(f);
    assert_true(in);
    for (size_t i = 0; i < sdnn_config_key_count(); ++i) {
        int found = 0;
        for (int j = 0; j < nread; ++j) found |= strcmp(seen[j], sdnn_config_key_name(i)) == 0;
        if (!found) print_error("key %s is not in README's [scalednn] example\n",
                                sdnn_config_key_name(i));
        assert_true(found);
    }
    assert_int_equal(sdnn_config_key_name(sdnn_config_key_count()), NULL);
}

/* Every codec of the registry is accepted by compress= and compress_allow=,
 * and a bad name's message lists each of them; `scalednn keys` names them
 * and every key. */
static void test_codecs_from_registry(void **state)
{
    (void)state;
    char names[256];
    snprintf(names, sizeof names, "%s", sdnn_codec_names());
    int count = 0;
    for (char *save = NULL, *tok = strtok_r(names, ", ", &save); tok;
         tok = strtok_r(NULL, ", ", &save), ++count) {
        char text[256];
        sdnn_config cfg;
        snprintf(text, sizeof text, "[scalednn]\ncompress=%s\n", tok);
        free(parse_ok(text, &cfg));
        assert_string_equal(cfg.compress, tok);
        snprintf(text, sizeof text, "[scalednn]\ncompress=auto\ncompress_allow=none,%s\n", tok);
        free(parse_ok(text, &cfg));
        parse_fails("[scalednn]\ncompress=fp12\n", SDNN_ERR_INVALID);
        assert_msg_has(tok);
        parse_fails("[scalednn]\ncompress=auto\ncompress_allow=none,fp12\n", SDNN_ERR_INVALID);
        assert_msg_has(tok);
    }
    assert_true(count >= 5);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    sdnn_config_print_keys(f);
    fclose(f);
    for (size_t i = 0; i < sdnn_config_key_count(); ++i) {
        char want[64];
        snprintf(want, sizeof want, "\n  %s ", sdnn_config_key_name(i));
        assert_non_null(strstr(text, want));
    }
    const char *line = strstr(text, "\n  compress ");
    assert_non_null(line);
    char want[300];
    snprintf(want, sizeof want, "a codec (%s, auto) (default auto)", sdnn_codec_names());
    assert_non_null(strstr(line, want));
    assert_non_null(strstr(text, "interval             an integer >= 1 and <= 1000000 (default 4)"));
    free(text);
}

/* The printed settings follow the table: a codec's own keys only with it. */
static void test_describe_codec_keys(void **state)
{
    (void)state;
    sdnn_config cfg;
    char desc[512];
    free(parse_ok("[scalednn]\ncompress=topk\ntopk_ratio=0.05\ntopk_momentum=0.9\n"
                  "topk_warmup=100\ncompress_min_kb=16\n", &cfg));
    sdnn_config_describe(&cfg, desc, sizeof desc);
    assert_string_equal(desc, "mode=scalednn backend=auto preload=2 split=cpu cpu_conv=auto bucket_mb=auto overlap=1 interval=4 "
                              "compress=topk csv=- topk_ratio=0.05 topk_momentum=0.9 "
                              "topk_warmup=100 error_feedback=1 compress_min_kb=16");
    free(parse_ok("[scalednn]\ncompress=int8\nint8_chunk=64\n", &cfg));
    sdnn_config_describe(&cfg, desc, sizeof desc);
    assert_non_null(strstr(desc, "compress=int8 csv=- int8_chunk=64 stochastic_rounding=0 "
                                 "error_feedback=0 compress_min_kb=0"));
    free(parse_ok("[scalednn]\ncompress=auto\ncompress_allow=none,fp16,int8\n", &cfg));
    sdnn_config_describe(&cfg, desc, sizeof desc);
    assert_non_null(strstr(desc, "compress=auto csv=- int8_chunk=256 stochastic_rounding=0 "
                                 "compress_allow=none,fp16,int8 error_feedback=auto"));
    assert_null(strstr(desc, "topk"));
    /* the default section: top-k's keys apply (the planner may choose it) */
    free(parse_ok("[scalednn]\ntopk_ratio=0.05\ntopk_warmup=20\n", &cfg));
    sdnn_config_describe(&cfg, desc, sizeof desc);
    assert_non_null(strstr(desc, "compress=auto csv=- topk_ratio=0.05 topk_warmup=20 "));
    /* fixed buckets: the default compress=auto is none (auto plans codecs
     * with the buckets); a codec named keeps its keys */
    free(parse_ok("[scalednn]\nbucket_mb=4\n", &cfg));
    assert_string_equal(cfg.compress, "none");
    free(parse_ok("[scalednn]\nbucket_mb=4\ncompress=topk\ntopk_ratio=0.1\n", &cfg));
    assert_string_equal(cfg.compress, "topk");
    /* stock mode: compress=auto (default or said) is none */
    free(parse_ok("[scalednn]\nmode=stock\ncompress=auto\n", &cfg));
    assert_string_equal(cfg.compress, "none");
    free(parse_ok("[scalednn]\nmode=stock\n", &cfg));
    assert_string_equal(cfg.compress, "none");
}

/* What every process must share comes from the table's groups (agree.c). */
static void test_describe_groups(void **state)
{
    (void)state;
    sdnn_config cfg;
    char buf[512];
    free(parse_ok("[scalednn]\nmode=stock\ninterval=8\nbucket_mb=2\nlink=eth1g\n", &cfg));
    sdnn_config_describe_group(&cfg, SDNN_KEYS_MODE, buf, sizeof buf);
    assert_string_equal(buf, "mode=stock interval=8");
    sdnn_config_describe_group(&cfg, SDNN_KEYS_BUCKETS, buf, sizeof buf);
    assert_string_equal(buf, "bucket_mb=2 overlap=1 link=eth1g link_gbps=0 link_us=0 "
                             "profile_iters=5 replan_drift=0.25");
    sdnn_config_describe_group(&cfg, SDNN_KEYS_CODEC, buf, sizeof buf);
    assert_string_equal(buf, "compress=none topk_ratio=0.01 topk_momentum=0 topk_warmup=0 "
                             "int8_chunk=256 stochastic_rounding=0 compress_allow=none,fp16,int8,topk "
                             "iter_factor=- error_feedback=0 compress_min_kb=0");
    /* paths and per-process settings are no group's */
    sdnn_config_describe_group(&cfg, SDNN_KEYS_OWN, buf, sizeof buf);
    assert_non_null(strstr(buf, "csv=-"));
    assert_null(strstr(buf, "compress="));
    sdnn_config_describe_group(&cfg, SDNN_KEYS_MODE, buf, 6);
    assert_string_equal(buf, "mode=");
}

/* ---- load: files, memfd and Darknet --------------------------------------- */

static const char g_tiny_cfg[] =
    "[net]\nbatch=2\nsubdivisions=1\nwidth=8\nheight=8\nchannels=3\n"
    "[scalednn]\nmode=stock\n"
    "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[connected]\noutput=3\nactivation=linear\n"
    "[softmax]\n";

static const char g_tiny_stripped[] =
    "[net]\nbatch=2\nsubdivisions=1\nwidth=8\nheight=8\nchannels=3\n"
    "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[connected]\noutput=3\nactivation=linear\n"
    "[softmax]\n";

static void test_load_darknet_accepts(void **state)
{
    (void)state;
    char path[64];
    write_temp(g_tiny_cfg, path);
    sdnn_config cfg;
    sdnn_stripped_cfg out;
    sdnn_status st = sdnn_config_load(path, &cfg, &out);
    unlink(path);
    if (st != SDNN_OK) print_error("%s\n", sdnn_last_error());
    assert_int_equal(st, SDNN_OK);
    assert_int_equal(cfg.present, 1);
    assert_int_equal(cfg.mode, SDNN_MODE_STOCK);
    assert_true(out.fd >= 0);
    char want_path[64];
    snprintf(want_path, sizeof want_path, "/proc/self/fd/%d", out.fd);
    assert_string_equal(out.path, want_path);
    assert_int_equal(lseek(out.fd, 0, SEEK_CUR), 0);
    assert_true(fcntl(out.fd, F_GETFD) & FD_CLOEXEC);

    char *back = slurp(out.path);
    assert_string_equal(back, g_tiny_stripped);
    free(back);

    network *net = parse_network_cfg(out.path);
    assert_non_null(net);
    assert_int_equal(net->n, 3);
    assert_int_equal(net->batch, 2);
    assert_int_equal(net->layers[0].type, CONVOLUTIONAL);
    assert_int_equal(net->layers[1].type, CONNECTED);
    assert_int_equal(net->layers[2].type, SOFTMAX);
    sdnn_network_free(net);

    int fd = out.fd;
    sdnn_stripped_cfg_close(&out);
    assert_int_equal(out.fd, -1);
    assert_int_equal(fcntl(fd, F_GETFD), -1);
    sdnn_stripped_cfg_close(&out); /* twice is harmless */
    assert_int_equal(out.fd, -1);
}

static void test_load_no_section(void **state)
{
    (void)state;
    char path[64];
    write_temp(g_tiny_stripped, path);
    sdnn_config cfg;
    sdnn_stripped_cfg out;
    assert_int_equal(sdnn_config_load(path, &cfg, &out), SDNN_OK);
    unlink(path);
    assert_int_equal(cfg.present, 0);
    assert_int_equal(cfg.mode, SDNN_MODE_STOCK);
    char *back = slurp(out.path);
    assert_string_equal(back, g_tiny_stripped);
    free(back);
    sdnn_stripped_cfg_close(&out);
}

static void test_load_missing_file(void **state)
{
    (void)state;
    const char *path = "/tmp/sdnn-no-such-dir/missing.cfg";
    sdnn_config cfg;
    sdnn_stripped_cfg out = { .fd = 42 };
    sdnn_clear_error();
    assert_int_equal(sdnn_config_load(path, &cfg, &out), SDNN_ERR_IO);
    assert_int_equal(out.fd, -1);
    assert_msg_has(path);
    assert_msg_has(strerror(ENOENT));
    sdnn_stripped_cfg_close(&out);
}

static void test_load_directory(void **state)
{
    (void)state;
    sdnn_config cfg;
    sdnn_stripped_cfg out;
    sdnn_clear_error();
    assert_int_equal(sdnn_config_load("/tmp", &cfg, &out), SDNN_ERR_IO);
    assert_int_equal(out.fd, -1);
    assert_msg_has("/tmp");
    assert_msg_has("a directory, and a regular file is needed");
}

static void test_load_bad_section(void **state)
{
    (void)state;
    char path[64];
    write_temp("[net]\nbatch=1\n[scalednn]\nbackend=nccl\n", path);
    sdnn_config cfg;
    sdnn_stripped_cfg out;
    sdnn_clear_error();
    sdnn_status st = sdnn_config_load(path, &cfg, &out);
    unlink(path);
    assert_int_equal(st, SDNN_ERR_UNSUPPORTED);
    assert_int_equal(out.fd, -1);
    char prefix[256];
    snprintf(prefix, sizeof prefix,
             "%s:4: [scalednn] backend=nccl: " NOT_HERE ": " NO_NCCL " " AVAILABLE,
             path);
    assert_msg_starts(prefix);
}

/* ---- runner --------------------------------------------------------------- */

int main(void)
{
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_no_section),
        cmocka_unit_test(test_preload_split_keys),
        cmocka_unit_test(test_empty_text),
        cmocka_unit_test(test_empty_section_defaults),
        cmocka_unit_test(test_section_first),
        cmocka_unit_test(test_section_middle),
        cmocka_unit_test(test_section_last_no_newline),
        cmocka_unit_test(test_kept_last_line_without_newline),
        cmocka_unit_test(test_crlf),
        cmocka_unit_test(test_stripped_not_wanted),
        cmocka_unit_test(test_all_keys_good),
        cmocka_unit_test(test_good_edge_values),
        cmocka_unit_test(test_message_examples),
        cmocka_unit_test(test_csv_too_long),
        cmocka_unit_test(test_bad_combinations),
        cmocka_unit_test(test_codec_keys),
        cmocka_unit_test(test_auto_keys),
        cmocka_unit_test(test_repeated_key),
        cmocka_unit_test(test_two_sections),
        cmocka_unit_test(test_long_unknown_key_is_shortened),
        cmocka_unit_test(test_backend_keys),
        cmocka_unit_test(test_virtual_key),
        cmocka_unit_test(test_fix_1x1_delta_key),
        cmocka_unit_test(test_engine_key),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_keys_match_readme),
        cmocka_unit_test(test_codecs_from_registry),
        cmocka_unit_test(test_describe_codec_keys),
        cmocka_unit_test(test_describe_groups),
        cmocka_unit_test(test_load_darknet_accepts),
        cmocka_unit_test(test_load_no_section),
        cmocka_unit_test(test_numeric_keys_state_both_bounds),
        cmocka_unit_test(test_load_missing_file),
        cmocka_unit_test(test_load_directory),
        cmocka_unit_test(test_load_bad_section),
    };
    enum { N_FIXED = sizeof fixed / sizeof fixed[0] };
    static struct CMUnitTest tests[N_FIXED + N_BAD];
    static char names[N_BAD][80];
    memcpy(tests, fixed, sizeof fixed);
    for (size_t i = 0; i < N_BAD; i++) {
        snprintf(names[i], sizeof names[i], "test_bad_value(%s)", g_bad[i].line);
        tests[N_FIXED + i] = (struct CMUnitTest){
            .name = names[i],
            .test_func = test_bad_value,
            .initial_state = (void *)&g_bad[i],
        };
    }
    return _cmocka_run_group_tests("config", tests, N_FIXED + N_BAD, NULL, NULL);
}
