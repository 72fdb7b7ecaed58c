/*
 * Bad input never crashes libdarknet and never costs data.
 * Unit cases call the checkers directly; end-to-end cases run the ./darknet
 * binary (SDNN_DARKNET_BIN) on a small shapes set, assert the exit code and
 * the message, and for every case that could destroy something place a
 * known-good weights file (trained in setup) in the backup folder first and
 * compare it byte for byte afterwards.
 *
 * tier: full (runs in `make test`, not in `make check`: many trainings).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include "cfgcheck.h"
#include "cfgkeys.h"
#include "config.h"
#include "datacheck.h"
#include "saveio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

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
                "[region]\nclasses=2\nnum=5\nanchors=1,1,2,2,3,3,4,4,5,5\n",
                "x.cfg:9: [region] classes=2: 5 anchors x (2 classes + 5) = 35 channels expected",
                "gives 20");
    check_fails("[net]\nwidth=32\nheight=32\nchannels=3\n[convolutional]\nfilters=35\nsize=1\n"
                "[region]\nclasses=2\nnum=5\nanchors=1,1,2,2,3,3,4,4,5,5,6,6\n",
                "[region] anchors=1,1,2,2,3,3,4,4,5,5,6,6: 12 values, but num=5 anchors hold at most 10",
                NULL);
    assert_int_equal(sdnn_cfg_check_text("x.cfg",
                     "[net]\nwidth=32\nheight=32\nchannels=3\n[convolutional]\nfilters=35\n"
                     "size=1\n[region]\nclasses=2\nnum=5\nanchors=1,1,2,2,3,3,4,4,5,5\n"), SDNN_OK);
    /* Too few anchors: libdarknet made the missing ones 0.5. */
    check_fails("[net]\nwidth=32\nheight=32\nchannels=3\n[convolutional]\nfilters=35\n"
                "size=1\n[region]\nclasses=2\nnum=5\nanchors=1,1,2,2,3,3,4,4\n",
                "x.cfg:11: [region] anchors=1,1,2,2,3,3,4,4: 8 values, but num=5 anchors need 10",
                NULL);
    s = shapes_with("num=6", "num=7");
    check_fails(s, "[yolo] anchors=", "but num=7 anchors need 14");
    free(s);
}

/* The fork's keys libdarknet ignores though they change the network, and
 * [yolo] resize= out of the range the batch builder computes in. */
static void test_cfg_fork_geometry(void **state)
{
    (void)state;
    static const struct { const char *from, *to, *want1, *want2; } bad[] = {
        {"size=3\nstride=1", "size=3\nstride=1\nstride_x=2", "[convolutional] stride_x=2: the "
         "fork's per-axis stride is not built here", "allowed: stride_x=1"},
        {"size=3\nstride=1", "size=3\nstride=1\nstride_y=2", "stride_y=2", "allowed: stride_y=1"},
        {"size=3\nstride=1", "size=3\nstride=1\ndilation=2", "[convolutional] dilation=2: the "
         "fork's dilated convolution", "allowed: dilation=1"},
        {"size=3\nstride=1", "size=3\nstride=1\nstride_x=1.5", "[convolutional] stride_x=1.5",
         "allowed: stride_x=1"},
        {"size=2\nstride=2", "size=2\nstride=2\nstride_x=1", "[maxpool] stride_x=1",
         "allowed: stride_x=2"},
        {"size=2\nstride=2", "size=2\nstride=2\nstride_y=3", "[maxpool] stride_y=3", NULL},
        {"mask = 3,4,5", "mask = 3,4,5\nresize=1e9", "[yolo] resize=1e9",
         "expected a number >= 0.01 and <= 100"},
        {"mask = 3,4,5", "mask = 3,4,5\nresize=1e30", "[yolo] resize=1e30", "<= 100"},
        {"mask = 3,4,5", "mask = 3,4,5\nresize=1e-30", "[yolo] resize=1e-30", ">= 0.01"},
        {"mask = 3,4,5", "mask = 3,4,5\nmax_delta=1e-30", "[yolo] max_delta=1e-30", ">= 1e-06"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        char *s = shapes_with(bad[i].from, bad[i].to);
        check_fails(s, bad[i].want1, bad[i].want2);
        free(s);
    }
    /* The values libdarknet computes anyway pass. */
    static const char *const good[][2] = {
        {"size=3\nstride=1", "size=3\nstride=1\nstride_x=1\nstride_y=1\ndilation=1"},
        {"size=2\nstride=2", "size=2\nstride=2\nstride_x=2\nstride_y=2"},
        {"mask = 3,4,5", "mask = 3,4,5\nresize=1.5"},
        /* The same numbers written another way (libdarknet reads them with atoi/atof). */
        {"size=3\nstride=1", "size=3\nstride=1\nstride_x=1.0\nstride_y=1e0\ndilation=1.0"},
        {"size=2\nstride=2", "size=2\nstride=2\nstride_x=2.0\nstride_y=2"},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; ++i) {
        char *s = shapes_with(good[i][0], good[i][1]);
        sdnn_status st = sdnn_cfg_check_text("x.cfg", s);
        if (st != SDNN_OK) printf("%s\n", sdnn_last_error());
        assert_int_equal(st, SDNN_OK);
        free(s);
    }
}

/* Cfgs the fuzzer (make fuzz, fuzz_darknet) found crashing libdarknet's
 * parse_network_cfg after they had passed the first version of the
 * checker; each is now refused with a message. */
static void test_cfg_fuzzer_findings(void **state)
{
    (void)state;
    /* A downsample to nothing, then a reorg: "Layer before reorg layer must
     * output image", abort. */
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[convolutional]\nfilters=2\n"
                "[upsample]\nstride=-16\n[reorg]\nstride=2\n",
                "x.cfg:8: [upsample] stride=-16: on its 8x8 input the output would be empty", NULL);
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[maxpool]\nsize=16\nstride=1\npadding=0\n",
                "x.cfg:6: [maxpool] size=16: on its 8x8 input the output would be empty", NULL);
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[convolutional]\nfilters=2\nsize=9\n",
                "x.cfg:7: [convolutional] size=9: on its 8x8 input the output would be empty", NULL);
    /* [region] map= naming a missing file: read_map exit()s. */
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[convolutional]\nfilters=35\nsize=1\n"
                "[region]\nclasses=2\nnum=5\nmap=no/such/map.txt\n",
                "x.cfg:11: [region] map=no/such/map.txt: cannot read the file", NULL);
    /* A convolution after a softmax (a vector, not an image): abort. */
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[connected]\noutput=4\n[softmax]\n"
                "[convolutional]\nfilters=2\n",
                "x.cfg:8: [convolutional]: its input, the output of the layer before it, is 0x0x4", NULL);
    /* A [region] after an [rn n] (spaces inside the header are dropped, as
     * Darknet does): its outputs cannot match, assertion in parse_region. */
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[rn n]\n[region]\nclasses=2\nnum=1\n",
                "x.cfg:6: [region]: its input", NULL);
    /* Upsampling without end: outputs beyond an int, a calloc that fails. */
    check_fails("[net]\nwidth=64\nheight=64\nchannels=3\nbatch=8\n[convolutional]\nfilters=64\n"
                "[upsample]\nstride=64\n[upsample]\nstride=64\n",
                "x.cfg:8: [upsample]: its output, 4096x4096x64 for a batch of 8, exceeds", NULL);
    /* Found by reading Darknet's parser: policy=steps without scales=
     * aborts, and fewer scales than steps reads past the string. */
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\npolicy=steps\nsteps=10,20\n[softmax]\n",
                "x.cfg:5: [net] policy=steps: needs steps= and scales=", NULL);
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\npolicy=steps\nsteps=10,20\nscales=.1\n[softmax]\n",
                "x.cfg:7: [net] scales=.1: 2 steps but 1 scales", NULL);
    /* inputs= without height=: Darknet's height is 0, a convolution aborts. */
    check_fails("[net]\nwidth=8\ninputs=8\nchannels=3\n[convolutional]\nfilters=35\n",
                "[convolutional]: its input, the output of the layer before it, is 8x0x3", NULL);
    /* Found by reading the parser: a [detection] that does not fit its
     * input (assertion), groups that do not divide the channels, a
     * softmax with groups=0 (a division by zero in forward). */
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[connected]\noutput=100\n[detection]\nside=2\n"
                "classes=3\nnum=2\ncoords=4\n",
                "x.cfg:7: [detection]: side^2 x ((1 + coords) x num + classes) = 52 values expected, "
                "but the layer before it gives 1x1x100 = 100", NULL);
    assert_int_equal(sdnn_cfg_check_text("x.cfg", "[net]\nwidth=8\nheight=8\nchannels=3\n[connected]\n"
                                         "output=52\n[detection]\nside=2\nclasses=3\nnum=2\ncoords=4\n"),
                     SDNN_OK);
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[convolutional]\nfilters=4\ngroups=2\n",
                "x.cfg:7: [convolutional] groups=2: groups=2 must divide the input channels (3)", NULL);
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[softmax]\ngroups=0\n",
                "x.cfg:6: [softmax] groups=0: expected an integer >= 1", NULL);
    /* A [crop] (1x1 unless crop_width/crop_height say otherwise), then a
     * reorg that would make it empty: abort. */
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[crop]\n[reorg]\nstride=2\n",
                "x.cfg:7: [reorg] stride=2: on its 1x1 input the output would be empty", NULL);
    /* A [dropout] first: Darknet reads layers[-1], SEGV. */
    check_fails("[net]\nwidth=8\nheight=8\ninputs=8\n[dropout]\n",
                "x.cfg:5: [dropout]: a [dropout] works in place on the output of the layer before it", NULL);
    /* Routed layers of different sizes: Darknet makes the route 0x0x0. */
    check_fails("[net]\nwidth=8\nheight=8\nchannels=3\n[convolutional]\nfilters=2\n[maxpool]\nsize=2\n"
                "stride=2\n[route]\nlayers=-1,-2\n",
                "x.cfg:11: [route] layers=-1,-2: layer 1 is 4x4 but layer 0 is 8x8", NULL);
}

/* Keys Darknet does not read, and unknown sections:
 * refused naming the nearest known name; the fork's no-op keys pass. */
static void test_cfg_unknown_keys(void **state)
{
    (void)state;
    const char *names[] = {"mosaic", "mosaic_bound", "max_batches"};
    int d = -1;
    assert_string_equal(sdnn_nearest_name("mosiac", names, 3, &d), "mosaic");
    assert_int_equal(d, 1); /* a swap of neighbours is one edit */
    assert_string_equal(sdnn_nearest_name("mosaic_bund", names, 3, &d), "mosaic_bound");
    assert_int_equal(d, 1);
    assert_null(sdnn_nearest_name("x", names, 0, NULL));
#define NET8 "[net]\nwidth=8\nheight=8\nchannels=3\n"
    check_fails(NET8 "mosiac=1\n[softmax]\n", "x.cfg:5: [net] mosiac=1: unknown key",
                "nearest known key: mosaic");
    check_fails(NET8 "[convolutional]\nfliters=4\n", "x.cfg:6: [convolutional] fliters=4: unknown key",
                "nearest known key: filters");
    /* A key of another section is unknown where it stands. */
    check_fails(NET8 "[maxpool]\nsize=2\nfilters=4\n", "x.cfg:7: [maxpool] filters=4: unknown key",
                "nearest known key:");
    check_fails(NET8 "[convolutional]\nfilters=18\n[yolo]\nmask=0,1,2\nanchors=1,1,2,2,3,3\n"
                "classes=1\nnum=3\nignore_tresh=.7\n",
                "x.cfg:12: [yolo] ignore_tresh=.7: unknown key", "nearest known key: ignore_thresh");
    check_fails(NET8 "[convolutionl]\nfilters=2\n", "x.cfg:5: [convolutionl]: unknown section type",
                "nearest known section: [convolutional]");
    check_fails(NET8 "[sam]\nfrom=-1\n", "x.cfg:5: [sam]: a layer type of the maintained Darknet fork",
                NULL);
    /* The fork's keys that change the network are refused by name. */
    check_fails(NET8 "policy=sgdr\n[softmax]\n", "x.cfg:5: [net] policy=sgdr: the sgdr policy", NULL);
    check_fails(NET8 "policy=stpes\n[softmax]\n", "x.cfg:5: [net] policy=stpes: unknown policy", NULL);
    check_fails(NET8 "[convolutional]\nfilters=4\ncbn=1\n", "x.cfg:7: [convolutional] cbn=1",
                "only cbn=0");
    check_fails(NET8 "[convolutional]\nfilters=4\ntrain_only_bn=1\n",
                "x.cfg:7: [convolutional] train_only_bn=1", "only train_only_bn=0");
    check_fails(NET8 "[maxpool]\nmaxpool_zero_nonmax=1\n", "x.cfg:6: [maxpool] maxpool_zero_nonmax=1",
                NULL);
    check_fails("[net]\ninputs=8\n[rnn]\noutput=16\nhidden=32\n", "x.cfg:5: [rnn] hidden=32",
                "allowed: hidden=16");
    /* What libdarknet reads, the neutral values, and the no-op keys pass. */
    sdnn_clear_error();
    assert_int_equal(sdnn_cfg_check_text("x.cfg", NET8 "clip=0.5\nmax_chart_loss=20\npolicy=poly\n"
                                         "[convolutional]\nfilters=4\ncbn=0\nstream=1\nstopbackward=1\n"
                                         "[convolutional]\nfilters=4\nstream=2\n"),
                     SDNN_OK);
    assert_int_equal(sdnn_cfg_check_text("x.cfg", "[net]\ninputs=8\n[rnn]\noutput=16\nhidden=16\n"),
                     SDNN_OK);
#undef NET8
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
    rc = run_bin(&out, "scalednn simulate %s -topology pcie", P("empty.cfg"));
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

/* `text` with `add` inserted before the first `needle` (caller frees). */
static char *insert_before(const char *text, const char *needle, const char *add)
{
    const char *at = strstr(text, needle);
    assert_non_null(at);
    size_t n = strlen(text) + strlen(add) + 1;
    char *s = malloc(n);
    assert_non_null(s);
    snprintf(s, n, "%.*s%s%s", (int)(at - text), text, add, at);
    return s;
}

/* The line of the first occurrence of `needle` in `text` (1-based). */
static int line_of(const char *text, const char *needle)
{
    const char *at = strstr(text, needle);
    assert_non_null(at);
    int line = 1;
    for (const char *p = text; p < at; ++p) line += *p == '\n';
    return line;
}

/* Through the binary: a misspelt or unknown key, an
 * unknown section stop training with file:line:key and the nearest name,
 * exit 1, nothing written; the fork's no-op keys train, with one note. */
static void test_unknown_keys_through_binary(void **state)
{
    (void)state;
    static const struct { const char *from, *to, *mark, *want, *nearest; } cases[] = {
        {"width=64", "mosiac=1\nwidth=64", "mosiac=1", "[net] mosiac=1: unknown key",
         "nearest known key: mosaic"},
        {"filters=8", "fliters=8", "fliters=8", "[convolutional] fliters=8: unknown key",
         "nearest known key: filters"},
        {"ignore_thresh", "ignore_tresh", "ignore_tresh", "[yolo] ignore_tresh=", "nearest known key: ignore_thresh"},
        {"[upsample]", "[upsampel]", "[upsampel]", "[upsampel]: unknown section type",
         "nearest known section: [upsample]"},
        /* The [scalednn] section names its nearest key the same way. */
        {"[upsample]", "[scalednn]\ncompres=none\n[upsample]", "compres=none",
         "[scalednn] compres=none: unknown key", "nearest known key: compress"},
    };
    char data[512], csv[512];
    snprintf(data, sizeof data, "%s", data_file("k1", NULL));
    snprintf(csv, sizeof csv, "%s", P("k1/run.csv"));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        char *cfg = shapes_with(cases[i].from, cases[i].to);
        char where[600];
        snprintf(where, sizeof where, "%s:%d: %s", P("kbad.cfg"), line_of(cfg, cases[i].mark),
                 cases[i].want);
        put_text(P("kbad.cfg"), cfg);
        free(cfg);
        tu_run("rm -rf %s", P("k1"));
        place_good("k1", "kbad.backup");
        char *out;
        int rc = run_bin(&out, "detector train %s %s -max_batches 2 -csv %s", data, P("kbad.cfg"),
                         csv);
        assert_has(out, where);
        assert_has(out, cases[i].nearest);
        assert_int_equal(rc, 1);
        free(out);
        struct stat st;
        assert_int_equal(stat(csv, &st), -1);
        assert_int_equal(stat(P("k1/kbad_final.weights"), &st), -1);
        assert_good("k1", "kbad.backup");
    }
    /* The fork's no-op keys: trained, one note naming each key once
     * (stream= twice, in two convolutions). */
    char *c1 = insert_before(g_shapes_cfg, "width=64", "max_chart_loss=20\n");
    char *c2 = insert_before(c1, "filters=8", "stream=1\n");
    char *twice = insert_before(c2, "filters=16", "stream=2\n");
    free(c1);
    free(c2);
    put_text(P("knoop.cfg"), twice);
    free(twice);
    tu_run("rm -rf %s", P("k1"));
    char *out;
    int rc = run_bin(&out, "detector train %s %s -max_batches 1 -seed 1", data, P("knoop.cfg"));
    if (rc) printf("%s\n", out);
    assert_int_equal(rc, 0);
    assert_has(out, "knoop.cfg: keys that libdarknet ignores and that change nothing here");
    assert_has(out, "[net] max_chart_loss (line 12)");
    assert_has(out, "[convolutional] stream (line 33)");
    const char *first = strstr(out, "change nothing here");
    assert_null(strstr(first + 1, "change nothing here"));
    assert_null(strstr(out, "stream (line 48)"));
    free(out);
    struct stat st;
    assert_int_equal(stat(P("k1/knoop_final.weights"), &st), 0);
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


/* ---- class 2: labels ------------------------------------------------------------ */

typedef struct issues {
    int n;
    int line[16];
    char why[16][160];
} issues;

static void collect(void *ctx, const char *name, int line, const char *text, const char *why)
{
    issues *is = ctx;
    (void)name;
    (void)text;
    if (is->n < 16) {
        is->line[is->n] = line;
        snprintf(is->why[is->n], sizeof is->why[0], "%s", why);
    }
    ++is->n;
}

static void test_label_scan(void **state)
{
    (void)state;
    const char *text = "0 0.5 0.5 0.2 0.2\n"    /* 1 good */
                       "1 nan 0.5 0.2 0.2\n"    /* 2 */
                       "1 0.5 inf 0.2 0.2\n"    /* 3 */
                       "2 -0.1 0.5 0.2 0.2\n"   /* 4 */
                       "2 0.5 1.5 0.2 0.2\n"    /* 5 */
                       "3 0.5 0.5 0 0.2\n"      /* 6 */
                       "3 0.5 0.5 0.2 -0.3\n"   /* 7 */
                       "4 0.5 0.5 0.2 0.2\n"    /* 8 */
                       "-1 0.5 0.5 0.2 0.2\n"   /* 9 */
                       "1 0.5 0.5 0.2 0.2 7\n"  /* 10 */
                       "1 0.5 0.5 0.2\n"        /* 11 */
                       "\n"                      /* 12 blank: fine */
                       "1.5 0.5 0.5 0.2 0.2\n"  /* 13 */
                       "1 0.5 0.5 1.2 0.2\n"    /* 14 */
                       "3 0.1 0.9 0.05 0.05\n" /* 15 good */
                       "0 0 0 0.2 0.2\n"        /* 16: libdarknet's empty-slot mark */
                       "0 -0 0 0.2 0.2\n"       /* 17: the same */
                       "0 0 0.5 0.0009 0.2\n"   /* 18: under 0.001 inside */
                       "0 1 0.5 0.0019 0.2\n"   /* 19: under 0.001 inside */
                       "0 0.5 1 0.2 0.0005\n"   /* 20 */
                       "0 1 1 0.2 0.2\n"        /* 21 good: a corner box, cut */
                       "0 0 0.5 0.2 0.2\n"      /* 22 good: centre on the left edge */
                       "0 0.5 0.5 1 1";         /* 23 good, no newline */
    issues is = {0};
    char *clean = malloc(strlen(text) + 2);
    int boxes = -1;
    int bad = sdnn_label_scan("l.txt", text, 4, clean, &boxes, collect, &is);
    assert_int_equal(bad, 17);
    assert_int_equal(is.n, 17); /* counted; the first 16 kept */
    assert_int_equal(boxes, 5);
    static const int lines[16] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 16, 17, 18, 19};
    static const char *const want[16] = {
        "x=nan is not finite", "y=inf is not finite", "x=-0.1 is outside [0, 1]",
        "y=1.5 is outside [0, 1]", "w=0: a box needs a size > 0", "h=-0.3: a box needs a size > 0",
        "class 4 is outside 0 .. 3 (classes=4)", "class -1 is outside 0 .. 3",
        "6 columns, expected 5", "4 columns, expected 5", "class 1.5 is not an integer",
        "w=1.2 is > 1", "x=0 and y=0 together", "x=0 and y=0 together",
        "w=0.0009 at x=0: 0.00045 of it is inside the image", "libdarknet drops a box under 0.001"};
    for (int i = 0; i < 16; ++i) {
        assert_int_equal(is.line[i], lines[i]);
        if (!strstr(is.why[i], want[i])) printf("line %d: %s (wanted %s)\n", lines[i], is.why[i], want[i]);
        assert_non_null(strstr(is.why[i], want[i]));
    }
    assert_string_equal(clean, "0 0.5 0.5 0.2 0.2\n3 0.1 0.9 0.05 0.05\n0 1 1 0.2 0.2\n"
                               "0 0 0.5 0.2 0.2\n0 0.5 0.5 1 1\n");
    free(clean);
    assert_int_equal(sdnn_label_scan("l.txt", "", 4, NULL, &boxes, NULL, NULL), 0);
    assert_int_equal(boxes, 0);
}

/* A train list of three copied shapes images whose label files we write. */
static void make_label_set(const char *tag, const char *bad_label)
{
    assert_int_equal(tu_run("mkdir -p %s/%s/images %s/%s/labels", g_dir, tag, g_dir, tag), 0);
    FILE *list = fopen(P("%s/train.txt", tag), "w");
    assert_non_null(list);
    for (int i = 1; i <= 3; ++i) {
        assert_int_equal(tu_run("cp %s/shapes/images/train/%06d.png %s/%s/images/%d.png && "
                                "cp %s/shapes/labels/train/%06d.txt %s/%s/labels/%d.txt",
                                g_dir, i, g_dir, tag, i, g_dir, i, g_dir, tag, i), 0);
        fprintf(list, "%s/%s/images/%d.png\n", g_dir, tag, i);
    }
    fclose(list);
    FILE *f = fopen(P("%s/labels/2.txt", tag), "a");
    fputs(bad_label, f);
    fclose(f);
}

static void test_labels_through_binary(void **state)
{
    (void)state;
    make_label_set("l2", "1 nan 0.5 0.2 0.2\n9 0.5 0.5 0.2 0.2\n");
    char extra[600], data[600];
    snprintf(extra, sizeof extra, "train=%s/l2/train.txt", g_dir);
    snprintf(data, sizeof data, "%s", data_file("l2b", extra));
    /* data_file's own train= line comes after ours: Darknet takes the first. */
    place_good("l2b", "shapes_final.weights");
    char *before = tu_slurp(P("l2/labels/2.txt"));
    char *out;
    int rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 2", data);
    assert_int_equal(rc, 1);
    char want[700];
    int first_bad = 0;
    {
        char *t = tu_slurp(P("shapes/labels/train/000002.txt"));
        for (char *p = t; *p; ++p) first_bad += *p == '\n';
        free(t);
    }
    snprintf(want, sizeof want, "%s/l2/labels/2.txt:%d: \"1 nan 0.5 0.2 0.2\": x=nan is not finite",
             g_dir, first_bad + 1);
    assert_has(out, want);
    snprintf(want, sizeof want, "%s/l2/labels/2.txt:%d: \"9 0.5 0.5 0.2 0.2\": class 9 is outside 0 .. 3",
             g_dir, first_bad + 2);
    assert_has(out, want);
    assert_has(out, "2 bad boxes in 1 of 3 label files");
    assert_has(out, "-skip_bad_labels");
    free(out);
    assert_good("l2b", "shapes_final.weights");
    /* -skip_bad_labels: trained without those two boxes; the user's label
     * file is unchanged and the staging folder is gone. */
    rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 2 -skip_bad_labels -seed 1",
                 data);
    if (rc != 0) printf("%s\n", out);
    assert_int_equal(rc, 0);
    assert_has(out, "dropped 2 bad boxes in 1 of 3 label files");
    const char *staged = strstr(out, "sdnn-labels-");
    assert_null(staged);
    free(out);
    char *after = tu_slurp(P("l2/labels/2.txt"));
    assert_string_equal(before, after);
    free(before);
    free(after);
    assert_int_equal(tu_run("ls -d ${TMPDIR:-/tmp}/sdnn-labels-* 2>/dev/null | grep -q ."), 1);
}

/* A box centred at (0,0) is libdarknet's empty-slot mark: it kept it and
 * its yolo layer read far outside its buffer (SIGSEGV, also with
 * -skip_bad_labels).  Refused by file and line; -skip_bad_labels drops it
 * and trains.  engine=gpu reads the same checked labels (the check runs
 * before any engine is built); tests/gpu/cli_labels.sh runs these cases with
 * engine=gpu in the GPU=sim build. */
static void test_corner_label_through_binary(void **state)
{
    (void)state;
    make_label_set("l3", "0 0 0 0.2 0.2\n");
    char extra[600], data[600];
    snprintf(extra, sizeof extra, "train=%s/l3/train.txt", g_dir);
    snprintf(data, sizeof data, "%s", data_file("l3b", extra));
    char *out;
    int rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 1 -seed 1", data);
    assert_int_equal(rc, 1);
    assert_has(out, "l3/labels/2.txt:");
    assert_has(out, "\"0 0 0 0.2 0.2\": x=0 and y=0 together");
    free(out);
    rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 1 -seed 1 -skip_bad_labels "
                 "-gpus 0,1", data);
    if (rc != 0) printf("%s\n", out);
    assert_int_equal(rc, 0);
    assert_has(out, "dropped 1 bad box in 1 of 3 label files");
    free(out);
}

/* Classifier: the labels file against classes=, the network's outputs, and
 * every image's label in its path (Darknet reads labels[0 .. classes) and
 * trains an image without one on an all-zero truth). */
static void test_classifier_labels_checked(void **state)
{
    (void)state;
    assert_int_equal(tu_run("mkdir -p %s/c2 && cp %s/shapes/images/train/000001.png %s/c2/a_circle.png && "
                            "cp %s/shapes/images/train/000002.png %s/c2/b_square.png && "
                            "cp %s/shapes/images/train/000003.png %s/c2/c_blob.png && "
                            "printf 'circle\\nsquare\\n' > %s/c2/names && printf 'circle\\n' > %s/c2/one",
                            g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir), 0);
    put_text(P("c2.cfg"), "[net]\nbatch=2\nwidth=64\nheight=64\nchannels=3\nmax_batches=2\n"
                          "learning_rate=0.01\n[convolutional]\nfilters=2\nsize=3\nstride=2\npad=1\n"
                          "activation=leaky\n[avgpool]\n[softmax]\n");
    char text[2000];
    const struct { const char *list, *labels; int classes; const char *want; } cases[] = {
        {"a_circle.png b_square.png", "one", 2, "classes=2 but labels="},
        {"a_circle.png b_square.png", "names", 3, "classes=3 but labels="},
        {"a_circle.png b_square.png c_blob.png", "names", 2, "c_blob.png: no label of"},
    };
    mkdir(P("c2b"), 0755);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        FILE *f = fopen(P("c2/train.txt"), "w");
        char names[200];
        snprintf(names, sizeof names, "%s", cases[i].list);
        for (char *t = strtok(names, " "); t; t = strtok(NULL, " ")) fprintf(f, "%s/c2/%s\n", g_dir, t);
        fclose(f);
        snprintf(text, sizeof text, "classes=%d\ntrain=%s/c2/train.txt\nlabels=%s/c2/%s\nbackup=%s/c2b/\n",
                 cases[i].classes, g_dir, g_dir, cases[i].labels, g_dir);
        put_text(P("c2.data"), text);
        place_good("c2b", "c2.weights");
        char *out;
        int rc = run_bin(&out, "classifier train %s %s", P("c2.data"), P("c2.cfg"));
        assert_int_equal(rc, 1);
        assert_has(out, cases[i].want);
        free(out);
        assert_good("c2b", "c2.weights");
    }
    /* classes=3 with three names: the network gives 2 outputs. */
    put_text(P("c2/three"), "circle\nsquare\nblob\n");
    snprintf(text, sizeof text, "classes=3\ntrain=%s/c2/train.txt\nlabels=%s/c2/three\nbackup=%s/c2b/\n",
             g_dir, g_dir, g_dir);
    put_text(P("c2.data"), text);
    char *out;
    assert_int_equal(run_bin(&out, "classifier train %s %s", P("c2.data"), P("c2.cfg")), 1);
    assert_has(out, "classes=3, but the network");
    assert_has(out, "gives 2 outputs");
    free(out);
    assert_good("c2b", "c2.weights");
    /* Right: it trains. */
    snprintf(text, sizeof text, "classes=2\ntrain=%s/c2/train.txt\nlabels=%s/c2/names\nbackup=%s/c2b/\n",
             g_dir, g_dir, g_dir);
    put_text(P("c2.data"), text);
    FILE *f = fopen(P("c2/train.txt"), "w");
    fprintf(f, "%s/c2/a_circle.png\n%s/c2/b_square.png\n", g_dir, g_dir);
    fclose(f);
    int rc = run_bin(&out, "classifier train %s %s -seed 1", P("c2.data"), P("c2.cfg"));
    if (rc) printf("%s\n", out);
    assert_int_equal(rc, 0);
    free(out);
}

/* ---- class 3: images ------------------------------------------------------------- */

static void expect_image_error(const char *path, const char *want)
{
    sdnn_clear_error();
    sdnn_status st = sdnn_image_check(path);
    if (st == SDNN_OK || !strstr(sdnn_last_error(), want))
        printf("%s: status %d, %s (wanted %s)\n", path, st, sdnn_last_error(), want);
    assert_true(st != SDNN_OK);
    assert_non_null(strstr(sdnn_last_error(), want));
    assert_non_null(strstr(sdnn_last_error(), path));
}

static void test_image_check(void **state)
{
    (void)state;
    char png[512];
    snprintf(png, sizeof png, "%s", P("shapes/images/train/000001.png"));
    assert_int_equal(sdnn_image_check(png), SDNN_OK);
    long n = 0;
    char *b = slurp_len(png, &n);
    put_file(P("trunc.png"), b, (size_t)n / 2);
    expect_image_error(P("trunc.png"), "truncated PNG");
    put_file(P("noiend.png"), b, (size_t)n - 12);
    expect_image_error(P("noiend.png"), "no IEND chunk");
    b[n / 2] ^= 0x55;
    put_file(P("flip.png"), b, (size_t)n);
    expect_image_error(P("flip.png"), "CRC mismatch");
    free(b);
    put_text(P("text.png"), "this is not an image\n");
    expect_image_error(P("text.png"), "not a PNG, JPEG, BMP or PPM/PGM file");
    put_text(P("empty.png"), "");
    expect_image_error(P("empty.png"), "empty file");
    mkdir(P("dir.png"), 0755);
    expect_image_error(P("dir.png"), "is a directory");
    expect_image_error(P("missing.png"), "No such file");
    /* JPEG through libdarknet's own writer, whole and cut. */
    image im = make_image(24, 16, 3);
    for (int i = 0; i < 24 * 16 * 3; ++i) im.data[i] = (float)(i % 7) / 7.f;
    char base[512];
    snprintf(base, sizeof base, "%s", P("j"));
    save_image(im, base);
    free_image(im);
    char jpg[520];
    snprintf(jpg, sizeof jpg, "%s.jpg", base);
    assert_int_equal(sdnn_image_check(jpg), SDNN_OK);
    b = slurp_len(jpg, &n);
    assert_true(n > 100);
    put_file(P("cut.jpg"), b, (size_t)n - 40);
    expect_image_error(P("cut.jpg"), "truncated JPEG");
    put_file(P("head.jpg"), b, 20);
    expect_image_error(P("head.jpg"), "JPEG");
    free(b);
    /* PPM: a 4x2 raster, whole and short. */
    char ppm[64];
    int hl = snprintf(ppm, sizeof ppm, "P6\n# c\n4 2\n255\n");
    memset(ppm + hl, 0x80, 24);
    put_file(P("a.ppm"), ppm, (size_t)hl + 24);
    assert_int_equal(sdnn_image_check(P("a.ppm")), SDNN_OK);
    put_file(P("b.ppm"), ppm, (size_t)hl + 10);
    expect_image_error(P("b.ppm"), "truncated PNM");
    put_text(P("c.ppm"), "P6\n0 2\n255\n");
    expect_image_error(P("c.ppm"), "PNM of 0x2 pixels");
    /* BMP: headers that promise more rows than the file has. */
    unsigned char bmp[70] = {'B', 'M'};
    bmp[10] = 54;
    bmp[14] = 40;
    bmp[18] = 4;  /* width */
    bmp[22] = 4;  /* height */
    bmp[26] = 1;
    bmp[28] = 24; /* bits */
    put_file(P("a.bmp"), (const char *)bmp, sizeof bmp);
    expect_image_error(P("a.bmp"), "truncated BMP");
}

/* The measured cost of checking the whole shapes train list (printed; the
 * decision to check every image is argued in docs/ARCHITECTURE.md). */
static void test_images_through_binary(void **state)
{
    (void)state;
    assert_int_equal(tu_run("mkdir -p %s/i3/images && cp %s/shapes/images/train/000001.png %s/i3/images/ok.png && "
                            "cp %s/shapes/labels/train/000001.txt %s/i3/ok.txt && mkdir -p %s/i3/labels && "
                            "cp %s/i3/ok.txt %s/i3/labels/ok.txt && head -c 300 %s/i3/images/ok.png > %s/i3/images/cut.png && "
                            "echo hello > %s/i3/images/text.png && : > %s/i3/images/empty.png && "
                            "mkdir -p %s/i3/images/dir.png && for f in cut text empty dir; do cp %s/i3/ok.txt %s/i3/labels/$f.txt; done",
                            g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir,
                            g_dir, g_dir, g_dir), 0);
    FILE *list = fopen(P("i3/train.txt"), "w");
    fprintf(list, "%s/i3/images/ok.png\n%s/i3/images/text.png\n%s/i3/images/cut.png\n"
                  "%s/i3/images/empty.png\n%s/i3/images/dir.png\n", g_dir, g_dir, g_dir, g_dir, g_dir);
    fclose(list);
    char extra[600], data[600];
    snprintf(extra, sizeof extra, "train=%s/i3/train.txt", g_dir);
    snprintf(data, sizeof data, "%s", data_file("i3b", extra));
    place_good("i3b", "shapes_final.weights");
    char *out;
    int rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 2", data);
    assert_int_equal(rc, 1);
    char want[700];
    snprintf(want, sizeof want, "i3/train.txt:2: image %s/i3/images/text.png: not a PNG", g_dir);
    assert_has(out, want);
    snprintf(want, sizeof want, "i3/train.txt:3: image %s/i3/images/cut.png: truncated PNG", g_dir);
    assert_has(out, want);
    snprintf(want, sizeof want, "i3/train.txt:4: image %s/i3/images/empty.png: empty file", g_dir);
    assert_has(out, want);
    snprintf(want, sizeof want, "i3/train.txt:5: image %s/i3/images/dir.png: is a directory", g_dir);
    assert_has(out, want);
    assert_has(out, "4 of 5 images or label files cannot be used");
    free(out);
    assert_good("i3b", "shapes_final.weights");
    /* detector test on a truncated PNG fails and names it. */
    rc = run_bin(&out, "detector test %s cfg/shapes.cfg %s/i3b/shapes_final.weights %s/i3/images/cut.png -out %s/pred",
                 data, g_dir, g_dir, g_dir);
    assert_int_equal(rc, 1);
    snprintf(want, sizeof want, "image %s/i3/images/cut.png: truncated PNG", g_dir);
    assert_has(out, want);
    free(out);
    /* The whole shapes list is checked at start, and how long it took is said. */
    rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 1 -seed 1", data_file("i3c", NULL));
    assert_int_equal(rc, 0);
    const char *t = strstr(out, "scalednn: checked 24 images and their label files in ");
    assert_non_null(t);
    printf("%.*s\n", (int)strcspn(t, "\n"), t);
    free(out);
}

/* ---- class 4: outputs ---------------------------------------------------------- */

static void test_outputs_never_overwrite(void **state)
{
    (void)state;
    char data[600];
    snprintf(data, sizeof data, "%s", data_file("o4", NULL));
    place_good("o4", "keep.weights");
    char w[600];
    snprintf(w, sizeof w, "%s", P("o4/keep.weights"));
    char *out;
    /* -csv naming a weights file. */
    int rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 2 -csv %s", data, w);
    assert_int_equal(rc, 1);
    assert_has(out, "refusing to overwrite a Darknet weights file");
    assert_has(out, w);
    free(out);
    assert_good("o4", "keep.weights");
    /* csv= naming some other file: refused, the file as it was. */
    put_text(P("o4/notes.txt"), "my notes\n");
    char *cfg = malloc(strlen(g_shapes_cfg) + 1200);
    sprintf(cfg, "[scalednn]\nmode=stock\ncsv=%s\n%s", P("o4/notes.txt"), g_shapes_cfg);
    put_text(P("o4c.cfg"), cfg);
    rc = run_bin(&out, "detector train %s %s -max_batches 2", data, P("o4c.cfg"));
    assert_int_equal(rc, 1);
    assert_has(out, "refusing to overwrite a file that is not one of ours");
    assert_has(out, "\"my notes.\"");
    free(out);
    char *notes = tu_slurp(P("o4/notes.txt"));
    assert_string_equal(notes, "my notes\n");
    free(notes);
    /* timeline= naming a weights file. */
    sprintf(cfg, "[scalednn]\ntimeline=%s\n%s", w, g_shapes_cfg);
    put_text(P("o4t.cfg"), cfg);
    free(cfg);
    rc = run_bin(&out, "detector train %s %s -max_batches 2 -csv %s", data, P("o4t.cfg"), P("o4/t.csv"));
    assert_int_equal(rc, 1);
    assert_has(out, "timeline=");
    assert_has(out, "refusing to overwrite a Darknet weights file");
    free(out);
    assert_good("o4", "keep.weights");
}

/* A resume appends to the previous run's CSV; a fresh run replaces it. */
static void test_resume_appends_csv(void **state)
{
    (void)state;
    char data[600], csv[600];
    snprintf(data, sizeof data, "%s", data_file("o5", NULL));
    snprintf(csv, sizeof csv, "%s", P("o5/run.csv"));
    mkdir(P("o5"), 0755);
    char *out;
    assert_int_equal(run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 3 -seed 1 -csv %s",
                             data, csv), 0);
    free(out);
    int rc = run_bin(&out, "detector train %s cfg/shapes.cfg %s -max_batches 5 -seed 1 -csv %s", data,
                     P("o5/shapes_final.weights"), csv);
    if (rc) printf("%s\n", out);
    assert_int_equal(rc, 0);
    free(out);
    char *text = tu_slurp(csv);
    assert_non_null(text);
    int headers = 0, rows = 0, last = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "iteration,", 10) == 0) ++headers;
        else if (line[0] >= '0' && line[0] <= '9') {
            ++rows;
            assert_int_equal(atoi(line), last + 1);
            last = atoi(line);
        }
    }
    free(text);
    assert_int_equal(headers, 1);
    assert_int_equal(rows, 5);
    /* -clear starts a new run: the CSV is rewritten. */
    assert_int_equal(run_bin(&out, "detector train %s cfg/shapes.cfg %s -clear -max_batches 2 -seed 1 "
                             "-csv %s", data, P("o5/shapes_final.weights"), csv), 0);
    free(out);
    text = tu_slurp(csv);
    rows = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) rows += line[0] >= '0' && line[0] <= '9';
    free(text);
    assert_int_equal(rows, 2);
}

/* ---- class 5: one run per backup folder ------------------------------------------ */

static void test_backup_folder_lock(void **state)
{
    (void)state;
    char data[600];
    snprintf(data, sizeof data, "%s", data_file("k5", NULL));
    place_good("k5", "shapes_final.weights");
    place_good("k5", "shapes.backup");
    int fd = -1;
    assert_int_equal(sdnn_lock_dir(P("k5"), &fd), SDNN_OK);
    assert_true(fd >= 0);
    char *out;
    int rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 2", data);
    assert_int_equal(rc, 1);
    char want[128];
    snprintf(want, sizeof want, "is in use by another run (pid %ld, command: ", (long)getpid());
    assert_has(out, want);
    assert_has(out, "test_badinput");
    assert_has(out, "one run per backup folder");
    free(out);
    assert_good("k5", "shapes_final.weights");
    /* The second run opens nothing: the first run's trace stays as it was. */
    const char *trace = "{\"traceEvents\":[\n{\"name\":\"the first run\"}";
    put_text(P("k5/t.json"), trace);
    char *cfg = malloc(strlen(g_shapes_cfg) + 1200);
    sprintf(cfg, "[scalednn]\nmode=stock\ntimeline=%s\n%s", P("k5/t.json"), g_shapes_cfg);
    put_text(P("k5t.cfg"), cfg);
    free(cfg);
    rc = run_bin(&out, "detector train %s %s -max_batches 2", data, P("k5t.cfg"));
    assert_int_equal(rc, 1);
    assert_has(out, "is in use by another run");
    free(out);
    char *kept = tu_slurp(P("k5/t.json"));
    assert_string_equal(kept, trace);
    free(kept);
    assert_good("k5", "shapes.backup");
    /* A second lock in this process's own file table is refused too. */
    int fd2 = -1;
    assert_int_equal(sdnn_lock_dir(P("k5"), &fd2), SDNN_ERR_INVALID);
    assert_int_equal(fd2, -1);
    close(fd);
    rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 1 -clear -seed 1", data);
    if (rc) printf("%s\n", out);
    assert_int_equal(rc, 0);
    free(out);
}

static int have_mpirun(void)
{
#if SDNN_MPI
    return tu_run("command -v mpirun >/dev/null 2>&1") == 0;
#else
    return 0;
#endif
}

static void test_mpirun_local_backend_and_stock(void **state)
{
    (void)state;
    if (!have_mpirun()) {
        print_message("built without MPI or no mpirun: skipped\n");
        skip();
    }
    char data[600];
    snprintf(data, sizeof data, "%s", data_file("m5", NULL));
    place_good("m5", "shapes-scalednn_final.weights");
    char *out;
    /* An explicit local backend: each process would train alone. */
    int rc = tu_run("sh tests/mpi/run.sh 2 %s detector train %s cfg/shapes-scalednn.cfg -max_batches 2 "
                ">%s/mpi.log 2>&1", g_bin, data, g_dir);
    out = tu_slurp(P("mpi.log"));
    assert_true(rc != 0);
    assert_has(out, "[scalednn] backend=local");
    assert_has(out, "is one of 2 started by mpirun");
    free(out);
    assert_good("m5", "shapes-scalednn_final.weights");
    /* No [scalednn] section: Darknet's protocol across the processes. */
    rc = tu_run("sh tests/mpi/run.sh 2 %s detector train %s cfg/shapes.cfg -max_batches 4 -seed 1 "
                ">%s/mpi.log 2>&1", g_bin, data, g_dir);
    out = tu_slurp(P("mpi.log"));
    if (rc) printf("%s\n", out);
    assert_int_equal(rc, 0);
    assert_has(out, "(weights averaged)");
    assert_has(out, "2 replicas, mode=stock");
    free(out);
    /* A bare [scalednn] section: the defaults train across the processes
     * (backend=auto is mpi under mpirun) and compress=auto plans over the
     * link after the profiled steps, saying what it chose. */
    rc = tu_run("(sed '/^\\[scalednn\\]/,$d' cfg/shapes-scalednn.cfg; echo '[scalednn]') "
                ">%s/bare.cfg && sh tests/mpi/run.sh 2 %s detector train %s %s/bare.cfg "
                "-max_batches 24 -seed 1 >%s/mpi.log 2>&1", g_dir, g_bin, data, g_dir, g_dir);
    out = tu_slurp(P("mpi.log"));
    if (rc) printf("%s\n", out);
    assert_int_equal(rc, 0);
    assert_has(out, "backend=auto is mpi (2 processes under mpirun");
    assert_has(out, "compress=auto csv=");
    assert_has(out, "scalednn: plan 1 (bucket_mb=auto), link probed mpi");
    assert_has(out, "scalednn: compress=auto chose ");
    assert_has(out, "2 replicas, mode=scalednn");
    free(out);
}

/* -map under mpirun decides on process 0's figure everywhere.  In stock mode
 * the processes' weights differ between averages (interval=1000: none in
 * this run), so each process evaluating its own weights reached different
 * "new best" and -target decisions, and the best-weights save (a
 * collective) or the stop left the others waiting on it: a run of the
 * lab's hung there.  Evaluated every iteration, a classifier's top-1 over
 * its chance level differs between the processes within a few
 * evaluations. */
static void test_mpirun_map_decides_alike(void **state)
{
    (void)state;
    struct stat sb;
    if (!have_mpirun() || stat("/usr/share/datasets/fashion-mnist", &sb) != 0) {
        print_message("no mpirun or no fashion-mnist: skipped\n");
        skip();
    }
    assert_int_equal(tu_run("%s scalednn fmnist %s/fm -n 128 -valid 32 >%s/fm.log 2>&1", g_bin,
                            g_dir, g_dir), 0);
    char text[2048];
    snprintf(text, sizeof text, "classes=10\ntrain=%s/fm/train.txt\nvalid=%s/fm/valid.txt\n"
             "labels=%s/fm/fmnist.names\nbackup=%s/fmb/\n", g_dir, g_dir, g_dir, g_dir);
    put_text(P("fm.data"), text);
    mkdir(P("fmb"), 0755);
    int rc = tu_run("(cat cfg/fmnist.cfg; printf '[scalednn]\\nmode=stock\\nbackend=mpi\\n"
                    "interval=1000\\ncomm_timeout_s=20\\n') >%s/fm-stock.cfg && "
                    "sh tests/mpi/run.sh 2 %s classifier train %s/fm.data %s/fm-stock.cfg "
                    "-max_batches 30 -map -map_every 1 -target 0.3 -seed 1 >%s/mpi-map.log 2>&1",
                    g_dir, g_bin, g_dir, g_dir, g_dir);
    char *out = tu_slurp(P("mpi-map.log"));
    if (rc) printf("%s\n", out);
    assert_int_equal(rc, 0);
    assert_has(out, "accuracy at iteration 1: top-1 ");
    free(out);
}

/* ---- class 6: found early, never half-written ---------------------------------------- */

/* No NAME.tmp.PID left in DIR/TAG. */
static int temp_files(const char *tag)
{
    return tu_run("ls %s/%s | grep -q '\\.tmp\\.'", g_dir, tag) == 0;
}

static void test_backup_unwritable_found_at_start(void **state)
{
    (void)state;
    char extra[600], data[600];
    snprintf(extra, sizeof extra, "backup=/proc/");
    snprintf(data, sizeof data, "%s", data_file("u6", extra));
    char *out;
    int rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 2", data);
    assert_int_equal(rc, 1);
    assert_has(out, "backup folder /proc/ is not writable");
    assert_has(out, "checked at start, before training");
    /* Found before the first step: no progress line was printed. */
    assert_null(strstr(out, " img/s, "));
    free(out);
    if (geteuid() != 0) {
        /* Where permissions bind (not as root): a read-only folder. */
        place_good("u6b", "shapes_final.weights");
        snprintf(data, sizeof data, "%s", data_file("u6b", NULL));
        chmod(P("u6b"), 0555);
        rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 2", data);
        chmod(P("u6b"), 0755);
        assert_int_equal(rc, 1);
        assert_has(out, "is not writable");
        free(out);
        assert_good("u6b", "shapes_final.weights");
    }
}

static void test_file_size_limit_during_save(void **state)
{
    (void)state;
    char data[600];
    snprintf(data, sizeof data, "%s", data_file("x6", NULL));
    place_good("x6", "shapes_final.weights");
    /* 128 blocks (64 or 128 KiB, by shell) hold the CSV, not the weights. */
    int rc = tu_run("ulimit -f 128 && exec %s detector train %s cfg/shapes.cfg -max_batches 2 -seed 1 "
                    ">%s/x6.log 2>&1", g_bin, data, g_dir);
    char *out = tu_slurp(P("x6.log"));
    assert_int_equal(rc, 1);
    assert_has(out, "shapes_final.weights");
    assert_has(out, "file size limit");
    free(out);
    assert_good("x6", "shapes_final.weights");
    assert_false(temp_files("x6"));
}

static void test_stale_temp_files_cleaned(void **state)
{
    (void)state;
    char data[600];
    snprintf(data, sizeof data, "%s", data_file("t6", NULL));
    place_good("t6", "shapes_final.weights");
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    /* Half a save: the start of Darknet's header (major 0, minor 2). */
    static const int head[2] = {0, 2};
    put_file(P("t6/shapes_final.weights.tmp.%ld", (long)dead), (const char *)head, sizeof head);
    put_text(P("t6/shapes.backup.tmp.%ld", (long)getpid()), "a save in progress");
    /* Not ours, though named NAME.tmp.PID with a dead pid: kept. */
    put_text(P("t6/report.tmp.%ld", (long)dead), "a user's report");
    put_text(P("t6/shapes_notes.tmp.%ld", (long)dead), "the cfg's name, not our output");
    put_text(P("t6/shapes_7.weights.tmp.%ld", (long)dead), "our name, not our content");
    struct stat sb;
    char *out;
    /* A run refused before training removes nothing. */
    int rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 0 -seed 1", data);
    assert_int_not_equal(rc, 0);
    assert_null(strstr(out, "removed"));
    free(out);
    assert_int_equal(stat(P("t6/shapes_final.weights.tmp.%ld", (long)dead), &sb), 0);
    rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 1 -seed 1", data);
    assert_int_equal(rc, 0);
    assert_has(out, "removed 1 stale temporary file of interrupted saves");
    free(out);
    assert_int_equal(stat(P("t6/shapes_final.weights.tmp.%ld", (long)dead), &sb), -1);
    assert_int_equal(stat(P("t6/shapes.backup.tmp.%ld", (long)getpid()), &sb), 0);
    assert_int_equal(stat(P("t6/report.tmp.%ld", (long)dead), &sb), 0);
    assert_int_equal(stat(P("t6/shapes_notes.tmp.%ld", (long)dead), &sb), 0);
    assert_int_equal(stat(P("t6/shapes_7.weights.tmp.%ld", (long)dead), &sb), 0);
    unlink(P("t6/shapes.backup.tmp.%ld", (long)getpid()));
    unlink(P("t6/report.tmp.%ld", (long)dead));
    unlink(P("t6/shapes_notes.tmp.%ld", (long)dead));
    unlink(P("t6/shapes_7.weights.tmp.%ld", (long)dead));
}

/* SIGTERM while the final save is being written: the temporary file is
 * removed by the handler and the previous final weights stay. The cfg has
 * a wide layer so that the save (about 19 MB) takes long enough to be
 * caught; a run whose save finished first is retried. */
static void test_sigterm_during_save(void **state)
{
    (void)state;
    char *cfg = shapes_with("# 10: -> 4x4x128\n[convolutional]\nbatch_normalize=1\nfilters=128",
                            "# 10: wide\n[convolutional]\nbatch_normalize=1\nfilters=8192");
    char *b1 = strstr(cfg, "batch=8");
    assert_non_null(b1);
    memcpy(b1, "batch=1", 7);
    put_text(P("wide.cfg"), cfg);
    free(cfg);
    char data[600];
    snprintf(data, sizeof data, "%s", data_file("s6", NULL));
    int caught = 0;
    for (int attempt = 0; attempt < 8 && !caught; ++attempt) {
        place_good("s6", "wide_final.weights");
        pid_t pid = fork();
        if (pid == 0) {
            char args[1200];
            snprintf(args, sizeof args, "exec %s detector train %s %s -max_batches 1 -seed 1 "
                     ">%s/s6.log 2>&1", g_bin, data, P("wide.cfg"), g_dir);
            execl("/bin/sh", "sh", "-c", args, (char *)NULL);
            _exit(127);
        }
        char tmp[700];
        snprintf(tmp, sizeof tmp, "%s", P("s6/wide_final.weights.tmp.%ld", (long)pid));
        int status = 0, seen = 0;
        struct timespec nap = {0, 100000};
        for (;;) {
            if (access(tmp, F_OK) == 0) {
                seen = 1;
                kill(pid, SIGTERM);
                break;
            }
            if (waitpid(pid, &status, WNOHANG) == pid) break;
            nanosleep(&nap, NULL);
        }
        if (seen) waitpid(pid, &status, 0);
        if (!seen) continue;
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGTERM);
        struct stat sb;
        assert_int_equal(stat(tmp, &sb), -1);
        assert_false(temp_files("s6"));
        long n = 0;
        char *now = slurp_len(P("s6/wide_final.weights"), &n);
        int same = now && n == g_good_len && memcmp(now, g_good, (size_t)n) == 0;
        free(now);
        if (same) caught = 1; /* else the rename won the race: try again */
    }
    printf("SIGTERM caught inside a save: %s\n", caught ? "yes" : "no");
    assert_true(caught);
}

/* ---- class 7: degenerate runs -------------------------------------------------------- */

static void test_degenerate_runs_keep_final(void **state)
{
    (void)state;
    char data[600];
    snprintf(data, sizeof data, "%s", data_file("d7", NULL));
    char *out;
    /* max_batches=0 in the cfg. */
    char *cfg = shapes_with("max_batches=2000", "max_batches=0");
    put_text(P("d7.cfg"), cfg);
    free(cfg);
    place_good("d7", "d7_final.weights");
    int rc = run_bin(&out, "detector train %s %s", data, P("d7.cfg"));
    assert_int_equal(rc, 1);
    assert_has(out, "max_batches=0: nothing to train");
    free(out);
    assert_good("d7", "d7_final.weights");
    /* Resuming from weights already at max_batches (the good weights are at
     * iteration 1). */
    place_good("d7", "shapes_final.weights");
    place_good("d7", "from.weights");
    rc = run_bin(&out, "detector train %s cfg/shapes.cfg %s -max_batches 1", data, P("d7/from.weights"));
    assert_int_equal(rc, 1);
    assert_has(out, "is at iteration 1, and max_batches is 1: nothing to train");
    free(out);
    assert_good("d7", "shapes_final.weights");
    /* A network without a layer that computes a loss (the loss would be nan). */
    put_text(P("nocost.cfg"), "[net]\nbatch=2\nwidth=64\nheight=64\nchannels=3\nmax_batches=5\n"
                              "[convolutional]\nfilters=4\nsize=3\nactivation=leaky\n");
    place_good("d7", "nocost_final.weights");
    rc = run_bin(&out, "detector train %s %s", data, P("nocost.cfg"));
    assert_int_equal(rc, 1);
    assert_has(out, "no layer computes a loss");
    free(out);
    assert_good("d7", "nocost_final.weights");
}

/* ---- class 7b: -gpus names devices ---------------------------------------------------- */

/* TAG.cfg: cfg/shapes.cfg with a [scalednn] section of `keys` first. */
static const char *cfg_with_keys(const char *tag, const char *keys)
{
    char *cfg = malloc(strlen(g_shapes_cfg) + strlen(keys) + 32);
    assert_non_null(cfg);
    sprintf(cfg, "[scalednn]\n%s\n%s", keys, g_shapes_cfg);
    const char *path = P("%s.cfg", tag);
    put_text(path, cfg);
    free(cfg);
    return path;
}

/* An id listed twice needs virtual=1 (bad usage otherwise: exit 2);
 * engine=gpu in a CPU build is refused naming the build and how to get
 * one, whatever the ids; engine=cpu and auto keep CPU replicas, the ids
 * only counting them, as the banner says.  Nothing is written by a
 * refused run. */
static void test_gpus_devices(void **state)
{
    (void)state;
    char data[600];
    snprintf(data, sizeof data, "%s", data_file("g7", NULL));
    char *out;
    char cfg[1100];
    /* -gpus 0,0 without virtual=1, under engine=gpu or cpu: refused before
     * the engine is looked at. */
    static const char *const engines[] = {"engine=gpu", "engine=cpu", "mode=scalednn"};
    for (size_t i = 0; i < 3; ++i) {
        snprintf(cfg, sizeof cfg, "%s", cfg_with_keys("g7dup", engines[i]));
        place_good("g7", "g7dup_final.weights");
        int rc = run_bin(&out, "detector train %s %s -gpus 1,0,1 -max_batches 1", data, cfg);
        if (rc != 2) printf("%s: exit %d\n%s\n", engines[i], rc, out);
        assert_int_equal(rc, 2);
        assert_has(out, "-gpus 1,0,1: id 1 is listed twice (replicas 0 and 2)");
        assert_has(out, "[scalednn] virtual=1 for several replicas on one device");
        assert_has(out, "g7dup.cfg");
        free(out);
        assert_good("g7", "g7dup_final.weights");
    }
    /* engine=gpu in this CPU build: with virtual=1 and a repeated id, and
     * with distinct ids. */
    static const char *const gpu_keys[] = {"engine=gpu\nvirtual=1", "engine=gpu\nvirtual=0"};
    static const char *const gpu_ids[] = {"0,0", "0,1"};
    for (size_t i = 0; i < 2; ++i) {
        snprintf(cfg, sizeof cfg, "%s", cfg_with_keys("g7gpu", gpu_keys[i]));
        place_good("g7", "g7gpu_final.weights");
        int rc = run_bin(&out, "detector train %s %s -gpus %s -max_batches 1", data, cfg, gpu_ids[i]);
        if (rc != 1) printf("%s: exit %d\n%s\n", gpu_keys[i], rc, out);
        assert_int_equal(rc, 1);
        assert_has(out, "g7gpu.cfg: [scalednn] engine=gpu with -gpus ");
        assert_has(out, "engine gpu cannot run 2 replicas here: this is a CPU build");
        assert_has(out, "make GPU=1 (CUDA) or make GPU=sim (simulated devices)");
        /* Refused before any image is checked. */
        assert_null(strstr(out, "checked 16 images"));
        free(out);
        assert_good("g7", "g7gpu_final.weights");
    }
    /* engine=cpu with virtual=1: -gpus 0,0 is 2 CPU replicas. */
    snprintf(cfg, sizeof cfg, "%s", cfg_with_keys("g7cpu", "engine=cpu\nvirtual=1"));
    int rc = run_bin(&out, "detector train %s %s -gpus 0,0 -max_batches 1", data, cfg);
    if (rc != 0) printf("exit %d\n%s\n", rc, out);
    assert_int_equal(rc, 0);
    assert_has(out, "scalednn: engine cpu, 2 replicas (-gpus 0,0)");
    assert_has(out, "replicas 0..1 (-gpus ids 0,0): CPU replica, a thread of its own (a -gpus id "
                    "only counts replicas); gemm: ");
    free(out);
    /* engine=auto in a CPU build: the cpu engine, saying why, whatever ids. */
    snprintf(cfg, sizeof cfg, "%s", cfg_with_keys("g7auto", "engine=auto"));
    rc = run_bin(&out, "detector train %s %s -gpus 7,3 -max_batches 1", data, cfg);
    if (rc != 0) printf("exit %d\n%s\n", rc, out);
    assert_int_equal(rc, 0);
    assert_has(out, "engine=auto: cpu (gpu: this is a CPU build");
    assert_has(out, "scalednn: engine cpu, 2 replicas (-gpus 7,3)");
    assert_has(out, "replicas 0..1 (-gpus ids 7,3): CPU replica");
    free(out);
    /* virtual= takes 0 or 1, named with its line. */
    snprintf(cfg, sizeof cfg, "%s", cfg_with_keys("g7v", "virtual=yes"));
    rc = run_bin(&out, "detector train %s %s -gpus 0,0 -max_batches 1", data, cfg);
    assert_int_equal(rc, 1);
    assert_has(out, "g7v.cfg:2: [scalednn] virtual=yes: expected 0 (each -gpus id once, as "
                    "Darknet) or 1 (an id may repeat)");
    free(out);
}

/* ---- class 8: nothing silently coerced --------------------------------------------- */

/* want_rc: 2 for bad usage (a flag or its value, cli/flags.h), 1 for bad
 * input files. */
static void expect_exit(const char *data, const char *cfg, const char *args, int want_rc,
                        const char *want)
{
    place_good("e8", "shapes_final.weights");
    place_good("e8", "shapes.backup");
    char *out;
    int rc = run_bin(&out, "detector train %s %s %s", data, cfg, args);
    if (rc != want_rc) printf("exit %d for %s\n", rc, args);
    assert_int_equal(rc, want_rc);
    assert_has(out, want);
    free(out);
    assert_good("e8", "shapes_final.weights");
    assert_good("e8", "shapes.backup");
}

static void expect_train_error(const char *data, const char *cfg, const char *args, const char *want)
{
    expect_exit(data, cfg, args, 1, want);
}

static void expect_usage_error(const char *data, const char *cfg, const char *args, const char *want)
{
    expect_exit(data, cfg, args, 2, want);
}

static void test_no_silent_coercions(void **state)
{
    (void)state;
    char data[600];
    snprintf(data, sizeof data, "%s", data_file("e8", NULL));
    expect_usage_error(data, "cfg/shapes.cfg", "-max_batches -5", "-max_batches -5: expected an integer >= 1");
    expect_usage_error(data, "cfg/shapes.cfg", "-max_batches 99999999999",
                       "-max_batches 99999999999: expected an integer >= 1 and <= 2147483647");
    expect_usage_error(data, "cfg/shapes.cfg", "-max_batches 4x", "-max_batches 4x");
    expect_usage_error(data, "cfg/shapes.cfg", "-seed abc", "-seed abc: expected an integer");
    expect_usage_error(data, "cfg/shapes.cfg", "-max_batches 2 -gpus", "-gpus needs a value");
    expect_usage_error(data, "cfg/shapes.cfg", "-max_batches 2 -gpus 0,0", "-gpus 0,0: id 0 is listed twice");
    expect_usage_error(data, "cfg/shapes.cfg", "-max_batches 2 -target 1.5", "-target 1.5");
    expect_usage_error(data, "cfg/shapes.cfg", "-max_batches 2 -map_every 0", "-map_every 0");
    char *cfg = malloc(strlen(g_shapes_cfg) + 64);
    sprintf(cfg, "[scalednn]\nbucket_mb=0x10\n%s", g_shapes_cfg);
    put_text(P("e8.cfg"), cfg);
    expect_train_error(data, P("e8.cfg"), "-max_batches 2", "e8.cfg:2: [scalednn] bucket_mb=0x10: expected");
    sprintf(cfg, "[scalednn]\ntopk_ratio=inf\ncompress=topk\n%s", g_shapes_cfg);
    put_text(P("e8.cfg"), cfg);
    expect_train_error(data, P("e8.cfg"), "-max_batches 2", "[scalednn] topk_ratio=inf: expected");
    free(cfg);
    /* No backup= in the .data: Darknet would write to /backup/. */
    char nob[600];
    snprintf(nob, sizeof nob, "%s", P("nob.data"));
    char text[3000];
    snprintf(text, sizeof text, "classes=4\ntrain=%s/shapes/train.txt\nnames=%s/shapes/shapes.names\n",
             g_dir, g_dir);
    put_text(nob, text);
    expect_train_error(nob, "cfg/shapes.cfg", "-max_batches 2", "no backup= key");
    /* A backup= longer than the name buffer would be cut to another folder. */
    char longb[1400];
    int k = snprintf(longb, sizeof longb, "backup=%s/", g_dir);
    while (k < 1150) longb[k++] = 'b';
    longb[k] = '\0';
    snprintf(text, sizeof text, "classes=4\ntrain=%s/shapes/train.txt\n%s\n", g_dir, longb);
    put_text(nob, text);
    expect_train_error(nob, "cfg/shapes.cfg", "-max_batches 2", "characters, at most");
    /* detector test: a threshold outside [0, 1]. */
    char *out;
    int rc = run_bin(&out, "detector test %s cfg/shapes.cfg %s %s -thresh 7", data, P("e8/shapes_final.weights"),
                     P("shapes/images/train/000001.png"));
    assert_int_equal(rc, 2);
    assert_has(out, "-thresh 7: expected a number >= 0 and <= 1");
    free(out);
    assert_good("e8", "shapes_final.weights");
}

/* ---- class 9: every rank the same settings ---------------------------------------------- */

/* Two processes of one mpirun (MPMD: rank 0 with A, rank 1 with B); exit
 * status, output in *out. */
static int mpmd(char **out, const char *data, const char *cfg_a, const char *args_a,
                const char *cfg_b, const char *args_b)
{
    int rc = tu_run("SDNN_MPI_RUN_TIMEOUT=40 sh tests/mpi/run.sh 1 %s detector train %s %s %s : "
                    "-np 1 %s detector train %s %s %s >%s/mpmd.log 2>&1",
                    g_bin, data, cfg_a, args_a, g_bin, data, cfg_b, args_b, g_dir);
    *out = tu_slurp(P("mpmd.log"));
    return rc;
}

static void test_mpi_ranks_must_agree(void **state)
{
    (void)state;
    if (!have_mpirun()) {
        print_message("built without MPI or no mpirun: skipped\n");
        skip();
    }
    char *base = tu_slurp("cfg/shapes-scalednn.cfg");
    assert_non_null(base);
    char *a = strstr(base, "backend=local");
    assert_non_null(a);
    memcpy(a, "backend=mpi  ", 13);
    put_text(P("ra.cfg"), base);
    char *b = strstr(base, "bucket_mb=0.25");
    assert_non_null(b);
    memcpy(b, "bucket_mb=0.50", 14);
    put_text(P("rb.cfg"), base);
    free(base);
    char *w = shapes_with("width=64", "width=96");
    put_text(P("rw.cfg"), w);
    free(w);
    char data[600];
    snprintf(data, sizeof data, "%s", data_file("g9", NULL));
    place_good("g9", "ra_final.weights");
    char *out;
    time_t t0 = time(NULL);
    int rc = mpmd(&out, data, P("ra.cfg"), "-max_batches 4", P("rb.cfg"), "-max_batches 4");
    assert_true(rc != 0 && rc != 124);
    assert_has(out, "rank 1: its settings differ from rank 0's");
    assert_has(out, "the buckets: bucket_mb=0.5 overlap=1");
    assert_has(out, "bucket_mb=0.25 overlap=1");
    assert_has(out, "rank 0: 1 of 2 processes have settings that differ");
    free(out);
    rc = mpmd(&out, data, P("ra.cfg"), "-max_batches 4", P("ra.cfg"), "-max_batches 6");
    assert_true(rc != 0 && rc != 124);
    assert_has(out, "max_batches: max_batches=6 here, max_batches=4 on rank 0");
    free(out);
    rc = mpmd(&out, data, P("ra.cfg"), "-max_batches 4", P("ra.cfg"), "-max_batches 4 -gpus 0,1");
    assert_true(rc != 0 && rc != 124);
    assert_has(out, "the replicas per process (-gpus): 2 replicas here, 1 replica on rank 0");
    free(out);
    /* Another network (no [scalednn] section: stock mode across the two). */
    rc = mpmd(&out, data, "cfg/shapes.cfg", "-max_batches 4", P("rw.cfg"), "-max_batches 4");
    assert_true(rc != 0 && rc != 124);
    assert_has(out, "the network: 20 layers");
    assert_has(out, "input 96x64x3");
    free(out);
    /* Found at start, within seconds, not by a timeout. */
    assert_true(time(NULL) - t0 < 40);
    assert_good("g9", "ra_final.weights");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cfg_crlf_normalised),
        cmocka_unit_test(test_cfg_structure_errors),
        cmocka_unit_test(test_cfg_heads),
        cmocka_unit_test(test_cfg_fork_geometry),
        cmocka_unit_test(test_cfg_fuzzer_findings),
        cmocka_unit_test(test_cfg_unknown_keys),
        cmocka_unit_test(test_cfg_real_cfgs_pass),
        cmocka_unit_test(test_cfg_errors_through_binary),
        cmocka_unit_test(test_unknown_keys_through_binary),
        cmocka_unit_test(test_cfg_crlf_trains),
        cmocka_unit_test(test_label_scan),
        cmocka_unit_test(test_labels_through_binary),
        cmocka_unit_test(test_corner_label_through_binary),
        cmocka_unit_test(test_classifier_labels_checked),
        cmocka_unit_test(test_image_check),
        cmocka_unit_test(test_images_through_binary),
        cmocka_unit_test(test_outputs_never_overwrite),
        cmocka_unit_test(test_resume_appends_csv),
        cmocka_unit_test(test_backup_folder_lock),
        cmocka_unit_test(test_mpirun_local_backend_and_stock),
        cmocka_unit_test(test_mpirun_map_decides_alike),
        cmocka_unit_test(test_backup_unwritable_found_at_start),
        cmocka_unit_test(test_file_size_limit_during_save),
        cmocka_unit_test(test_stale_temp_files_cleaned),
        cmocka_unit_test(test_sigterm_during_save),
        cmocka_unit_test(test_degenerate_runs_keep_final),
        cmocka_unit_test(test_gpus_devices),
        cmocka_unit_test(test_no_silent_coercions),
        cmocka_unit_test(test_mpi_ranks_must_agree),
    };
    /* SDNN_TEST_FILTER=test_gpus_devices runs the tests whose name matches. */
    const char *filter = getenv("SDNN_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, setup, teardown);
}
