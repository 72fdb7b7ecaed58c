/*
 * Bad input never crashes libdarknet and never costs data (issue 15).
 * Unit cases call the checkers directly; end-to-end cases run the ./darknet
 * binary (SDNN_DARKNET_BIN) on a small shapes set, assert the exit code and
 * the message, and for every case that could destroy something place a
 * known-good weights file (trained in setup) in the backup folder first and
 * compare it byte for byte afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include "cfgcheck.h"
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];
static const char *g_bin;
static char *g_shapes_cfg; /* cfg/shapes.cfg */
static char *g_good;       /* known-good weights (bytes) */
static long g_good_len;

/* ---- helpers ---------------------------------------------------------------- */

static char *slurp_len(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = '\0';
    fclose(f);
    if (len) *len = n;
    return s;
}

static void put_file(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    fclose(f);
}

static void put_text(const char *path, const char *text)
{
    put_file(path, text, strlen(text));
}

/* "DIR/name" in a static ring of buffers. */
static const char *P(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *P(const char *fmt, ...)
{
    static char ring[8][1024];
    static int k;
    char *out = ring[k++ % 8];
    char tail[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tail, sizeof tail, fmt, ap);
    va_end(ap);
    snprintf(out, 1024, "%s/%s", g_dir, tail);
    return out;
}

/* The data file TAG.data: the shapes lists, backup=DIR/TAG/ (plus extra
 * lines, e.g. another train=). */
static const char *data_file(const char *tag, const char *extra)
{
    char text[2048];
    snprintf(text, sizeof text, "classes=4\n%s%s%strain=%s/shapes/train.txt\n"
             "valid=%s/shapes/valid.txt\nnames=%s/shapes/shapes.names\nbackup=%s/%s/\n",
             extra ? extra : "", extra && *extra ? "\n" : "", "", g_dir, g_dir, g_dir, g_dir,
             tag);
    const char *path = P("%s.data", tag);
    put_text(path, text);
    return path;
}

/* Place the known-good weights as TAG/NAME (the backup folder). */
static void place_good(const char *tag, const char *name)
{
    mkdir(P("%s", tag), 0755);
    put_file(P("%s/%s", tag, name), g_good, (size_t)g_good_len);
}

/* The file is still the known-good weights, byte for byte. */
static void assert_good(const char *tag, const char *name)
{
    long n = 0;
    char *s = slurp_len(P("%s/%s", tag, name), &n);
    assert_non_null(s);
    assert_int_equal(n, g_good_len);
    assert_memory_equal(s, g_good, (size_t)n);
    free(s);
}

/* Run the binary with ARGS (a printf format), output to DIR/run.log; the
 * exit code, and the output in *out (caller frees). */
static int run_bin(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run_bin(char **out, const char *fmt, ...)
{
    char args[3072];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int rc = tu_run("%s %s >%s/run.log 2>&1", g_bin, args, g_dir);
    char path[512];
    snprintf(path, sizeof path, "%s/run.log", g_dir);
    char *log = tu_slurp(path);
    if (out) *out = log;
    else free(log);
    return rc;
}

static void assert_has(const char *text, const char *want)
{
    if (!text || !strstr(text, want)) {
        printf("output was:\n%s\n(wanted: %s)\n", text ? text : "(none)", want);
        fail();
    }
}

/* The shapes cfg with the first occurrence of `from` replaced by `to`. */
static char *shapes_with(const char *from, const char *to)
{
    const char *at = strstr(g_shapes_cfg, from);
    assert_non_null(at);
    size_t n = strlen(g_shapes_cfg) - strlen(from) + strlen(to) + 1;
    char *s = malloc(n);
    snprintf(s, n, "%.*s%s%s", (int)(at - g_shapes_cfg), g_shapes_cfg, to, at + strlen(from));
    return s;
}

/* sdnn_cfg_check_text fails with a message containing every `want`. */
static void check_fails(const char *text, const char *want1, const char *want2)
{
    sdnn_clear_error();
    sdnn_status st = sdnn_cfg_check_text("x.cfg", text);
    const char *msg = sdnn_last_error();
    if (st == SDNN_OK || !strstr(msg, want1) || (want2 && !strstr(msg, want2)))
        printf("status %d, message: %s\n(wanted: %s / %s)\n", st, msg, want1,
               want2 ? want2 : "-");
    assert_int_equal(st, SDNN_ERR_INVALID);
    assert_non_null(strstr(msg, want1));
    if (want2) assert_non_null(strstr(msg, want2));
}

static int setup(void **state)
{
    (void)state;
    g_bin = getenv("SDNN_DARKNET_BIN");
    if (!g_bin) g_bin = "./darknet";
    snprintf(g_dir, sizeof g_dir, "/tmp/sdnn-bad-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (tu_run("%s scalednn gen-shapes %s/shapes -n 24 -valid 4 -seed 5 >%s/gen.log 2>&1", g_bin,
               g_dir, g_dir) != 0)
        return -1;
    g_shapes_cfg = tu_slurp("cfg/shapes.cfg");
    if (!g_shapes_cfg) return -1;
    /* Known-good weights: one real training step of the shapes cfg. */
    data_file("seed", NULL);
    if (tu_run("%s detector train %s/seed.data cfg/shapes.cfg -max_batches 1 -seed 1 "
               ">%s/seed.log 2>&1",
               g_bin, g_dir, g_dir) != 0)
        return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/seed/shapes_final.weights", g_dir);
    g_good = slurp_len(path, &g_good_len);
    return g_good && g_good_len > 1000 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (g_dir[0] && !getenv("SDNN_KEEP")) tu_run("rm -rf %s", g_dir);
    free(g_shapes_cfg);
    free(g_good);
    return 0;
}

/* ---- class 1: the cfg's structure --------------------------------------------- */

static void test_cfg_crlf_normalised(void **state)
{
    (void)state;
    char s[] = "[net]\r\nbatch=1\r\nwidth=8\rx\r\n\r\n[softmax]\r";
    assert_int_equal(sdnn_cfg_normalize_eol(s), 5);
    assert_string_equal(s, "[net]\nbatch=1\nwidth=8\rx\n\n[softmax]");
    /* A '\r' inside a line is not a line end: named as a stray byte. */
    check_fails("[net]\nbatch=1\nwidth=8\rx\n", "x.cfg:3: byte 0x0d at column 8", NULL);
}

static void test_cfg_structure_errors(void **state)
{
    (void)state;
    check_fails("batch=1\n[net]\nwidth=8\nheight=8\nchannels=3\n[softmax]\n",
                "x.cfg:1: batch=1: a key before the first section", NULL);
    check_fails("", "x.cfg: no sections", NULL);
    check_fails("# only a comment\n\n; another\n", "x.cfg: no sections", NULL);
    check_fails("\x7f" "ELF\x02\x01\x01", "x.cfg:1: byte 0x7f at column 1", "a cfg is text");
    check_fails("[convolutional]\nfilters=3\n[net]\n", "x.cfg:1: [convolutional]: the first section must be [net]", NULL);
    check_fails("[net]\nwidth=0\nheight=8\nchannels=3\n[softmax]\n", "x.cfg:2: [net] width=0: expected an integer >= 1", NULL);
    check_fails("[net]\nwidth=8\nheight=-4\nchannels=3\n[softmax]\n", "x.cfg:3: [net] height=-4", NULL);
    check_fails("[net]\nwidth=8\nheight=8\nchannels=abc\n[softmax]\n", "x.cfg:4: [net] channels=abc", NULL);
    check_fails("[net]\nbatch=8\n[softmax]\n", "x.cfg:1: [net]: width, height and channels", NULL);
    check_fails("[net]\nbatch=2\nsubdivisions=4\nwidth=8\nheight=8\nchannels=3\n[softmax]\n",
                "x.cfg:3: [net] subdivisions=4: batch=2 / subdivisions=4 leaves 0", NULL);
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[convolution]\nfilters=2\n",
                "x.cfg:5: [convolution]: unknown section type", "convolutional");
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[conv\n", "x.cfg:5: [conv: a section header", NULL);
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[softmax]\ngroups\n",
                "x.cfg:6: [softmax] groups: expected key=value", NULL);
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n", "x.cfg:1: [net]: no layers follow [net]", NULL);
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[net]\nwidth=8\n[softmax]\n",
                "x.cfg:5: [net]: a second [net] section (the first is at line 1)", NULL);
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[convolutional]\nfilters=0\n",
                "x.cfg:6: [convolutional] filters=0", NULL);
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[convolutional]\nfilters=4\n[route]\nlayers=-2\n",
                "x.cfg:8: [route] layers=-2: layer -2 does not exist", NULL);
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[convolutional]\nfilters=4\n[shortcut]\nfrom=3\n",
                "x.cfg:8: [shortcut] from=3: layer 3 does not exist", NULL);
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[upsample]\nstride=0\n",
                "x.cfg:6: [upsample] stride=0", NULL);
}

static void test_cfg_heads(void **state)
{
    (void)state;
    char *s = shapes_with("classes=4", "classes=5");
    check_fails(s, "[yolo] classes=5: 3 masks x (5 classes + 5) = 30 channels expected",
                "[convolutional] at line 113 before it gives 27");
    free(s);
    s = shapes_with("mask = 3,4,5", "mask = 3,4");
    check_fails(s, "[yolo] classes=4: 2 masks x (4 classes + 5) = 18 channels expected", NULL);
    free(s);
    s = shapes_with("mask = 3,4,5", "mask = 3,4,6");
    check_fails(s, "[yolo] mask=3,4,6: mask entry 6 names no anchor (num=6", NULL);
    free(s);
    s = shapes_with("num=6", "num=2");
    check_fails(s, "[yolo] mask=3,4,5: mask entry 3 names no anchor (num=2", NULL);
    free(s);
    /* The fine head: its filters come after a route, a conv. */
    const char *fine = strstr(g_shapes_cfg, "# 18:");
    assert_non_null(fine);
    size_t n = strlen(g_shapes_cfg) + 8;
    s = malloc(n);
    size_t off = (size_t)(fine - g_shapes_cfg);
    snprintf(s, n, "%s", g_shapes_cfg);
    char *f27 = strstr(s + off, "filters=27");
    assert_non_null(f27);
    memcpy(f27, "filters=28", 10);
    check_fails(s, "[yolo] classes=4: 3 masks x (4 classes + 5) = 27 channels expected", "gives 28");
    free(s);
    /* Region: num x (classes + coords + 1) channels. */
    check_fails("[net]\nwidth=32\nheight=32\nchannels=3\n[convolutional]\nfilters=20\nsize=1\n"
                "[region]\nclasses=2\nnum=5\nanchors=1,1,2,2\n",
                "x.cfg:9: [region] classes=2: 5 anchors x (2 classes + 5) = 35 channels expected",
                "gives 20");
    check_fails("[net]\nwidth=32\nheight=32\nchannels=3\n[convolutional]\nfilters=35\nsize=1\n"
                "[region]\nclasses=2\nnum=5\nanchors=1,1,2,2,3,3,4,4,5,5,6,6\n",
                "[region] anchors=1,1,2,2,3,3,4,4,5,5,6,6: 12 values, but num=5 anchors hold at most 10",
                NULL);
    assert_int_equal(sdnn_cfg_check_text("x.cfg",
                     "[net]\nwidth=32\nheight=32\nchannels=3\n[convolutional]\nfilters=35\n"
                     "size=1\n[region]\nclasses=2\nnum=5\nanchors=1,1,2,2,3,3,4,4,5,5\n"), SDNN_OK);
}

/* Every cfg Debian ships and every cfg of ours passes the checker. */
static void test_cfg_real_cfgs_pass(void **state)
{
    (void)state;
    const char *dirs[] = {"/usr/share/darknet/cfg", "cfg"};
    int checked = 0;
    for (int d = 0; d < 2; ++d) {
        DIR *dir = opendir(dirs[d]);
        if (!dir) continue;
        struct dirent *e;
        while ((e = readdir(dir))) {
            size_t len = strlen(e->d_name);
            if (len < 5 || strcmp(e->d_name + len - 4, ".cfg") != 0) continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dirs[d], e->d_name);
            sdnn_status st = sdnn_cfg_check_file(path);
            if (st != SDNN_OK) printf("%s\n", sdnn_last_error());
            assert_int_equal(st, SDNN_OK);
            ++checked;
        }
        closedir(dir);
    }
    printf("%d cfgs pass the structure check\n", checked);
    assert_true(checked >= 4);
}

/* Through the binary: every command stops with exit 1 and file:line before
 * libdarknet sees the cfg; the backup folder's weights stay as they were. */
static void test_cfg_errors_through_binary(void **state)
{
    (void)state;
    static const struct { const char *from, *to, *want; } cases[] = {
        {"[net]", "batch=4\n[net]", "bad.cfg:9: batch=4: a key before the first section"},
        {"width=64", "width=0", "[net] width=0: expected an integer >= 1"},
        {"subdivisions=1", "subdivisions=16", "[net] subdivisions=16: batch=8 / subdivisions=16"},
        {"classes=4", "classes=7", "[yolo] classes=7: 3 masks x (7 classes + 5) = 36 channels"},
        {"[upsample]", "[upsampling]", "[upsampling]: unknown section type"},
        {"[net]", "[convolutional]\nfilters=2\n[net]", "[convolutional]: the first section must be [net]"},
    };
    char data[512];
    snprintf(data, sizeof data, "%s", data_file("c1", NULL));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        char *cfg = shapes_with(cases[i].from, cases[i].to);
        put_text(P("bad.cfg"), cfg);
        free(cfg);
        place_good("c1", "bad_final.weights");
        place_good("c1", "bad.backup");
        char *out;
        int rc = run_bin(&out, "detector train %s %s -max_batches 2", data, P("bad.cfg"));
        assert_has(out, cases[i].want);
        assert_has(out, P("bad.cfg"));
        assert_int_equal(rc, 1);
        free(out);
        assert_good("c1", "bad_final.weights");
        assert_good("c1", "bad.backup");
    }
    /* The other commands read the cfg through the same check. */
    put_text(P("empty.cfg"), "");
    place_good("c1", "w.weights");
    char w[512], img[512];
    snprintf(w, sizeof w, "%s", P("c1/w.weights"));
    snprintf(img, sizeof img, "%s", P("shapes/images/train/000001.png"));
    char *out;
    assert_int_equal(run_bin(&out, "detector test %s %s %s %s -out %s", data, P("empty.cfg"), w, img,
                             P("pred")), 1);
    assert_has(out, "empty.cfg: no sections");
    free(out);
    assert_int_equal(run_bin(&out, "detector map %s %s %s", data, P("empty.cfg"), w), 1);
    assert_has(out, "empty.cfg: no sections");
    free(out);
    assert_int_equal(run_bin(&out, "classifier valid %s %s %s", data, P("empty.cfg"), w), 1);
    assert_has(out, "empty.cfg: no sections");
    free(out);
    int rc = run_bin(&out, "scalednn plan %s %s", data, P("empty.cfg"));
    assert_true(rc != 0);
    assert_has(out, "empty.cfg: no sections");
    free(out);
    rc = run_bin(&out, "scalednn simulate %s --topology pcie", P("empty.cfg"));
    assert_true(rc != 0);
    assert_has(out, "empty.cfg: no sections");
    free(out);
    assert_good("c1", "w.weights");
    /* Only [net]: a degenerate network, refused, the final weights kept. */
    put_text(P("bad.cfg"), "[net]\nbatch=8\nwidth=64\nheight=64\nchannels=3\nmax_batches=10\n");
    place_good("c1", "bad_final.weights");
    rc = run_bin(&out, "detector train %s %s", data, P("bad.cfg"));
    assert_int_equal(rc, 1);
    assert_has(out, "bad.cfg:1: [net]: no layers follow [net]");
    free(out);
    assert_good("c1", "bad_final.weights");
}

/* CRLF simply works: a CRLF copy of the shapes cfg trains and saves. */
static void test_cfg_crlf_trains(void **state)
{
    (void)state;
    size_t n = strlen(g_shapes_cfg);
    char *crlf = malloc(2 * n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) {
        if (g_shapes_cfg[i] == '\n') crlf[k++] = '\r';
        crlf[k++] = g_shapes_cfg[i];
    }
    crlf[k] = '\0';
    put_text(P("crlf.cfg"), crlf);
    free(crlf);
    const char *data = data_file("crlf", NULL);
    char *out;
    int rc = run_bin(&out, "detector train %s %s -max_batches 2 -seed 1", data, P("crlf.cfg"));
    if (rc != 0) printf("%s\n", out);
    assert_int_equal(rc, 0);
    free(out);
    struct stat sb;
    assert_int_equal(stat(P("crlf/crlf_final.weights"), &sb), 0);
    assert_int_equal(sb.st_size, g_good_len);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cfg_crlf_normalised),
        cmocka_unit_test(test_cfg_structure_errors),
        cmocka_unit_test(test_cfg_heads),
        cmocka_unit_test(test_cfg_real_cfgs_pass),
        cmocka_unit_test(test_cfg_errors_through_binary),
        cmocka_unit_test(test_cfg_crlf_trains),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
