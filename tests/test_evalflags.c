/*
 * Tests of what the evaluation commands and their flags refuse or print,
 * where a wrong input used to pass with exit 0: anchors that are not
 * finite numbers > 0 (the cfg check), calc_anchors' rounding and its
 * never-0 anchors, train's flags that only matter with -map given without
 * it, duplicate class names (nothing written before the refusal), and
 * thresholds printed as given.  Through the functions and the ./darknet
 * binary (SDNN_DARKNET_BIN) on a tiny generated shapes set with random
 * weights; a few seconds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <darknet.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cfgcheck.h"
#include "evaluate.h"
#include "flags.h"
#include "saveio.h"

static char g_dir[256];
static const char *g_bin;

/* Runs the binary with args, stdout into g_dir/out.log and stderr into
 * g_dir/err.log; the exit code, both texts in *out and *err (caller
 * frees; err may be NULL to fold it into out). */
static int run2(char **out, char **err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int run2(char **out, char **err, const char *fmt, ...)
{
    char args[3000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int rc = err ? tu_run("%s %s >%s/out.log 2>%s/err.log", g_bin, args, g_dir, g_dir)
                 : tu_run("%s %s >%s/out.log 2>&1", g_bin, args, g_dir);
    char path[512];
    snprintf(path, sizeof path, "%s/out.log", g_dir);
    *out = tu_slurp(path);
    assert_non_null(*out);
    if (err) {
        snprintf(path, sizeof path, "%s/err.log", g_dir);
        *err = tu_slurp(path);
        assert_non_null(*err);
    }
    if (getenv("SDNN_VERBOSE")) printf("$ darknet %s\n%s%s\n", args, *out, err ? *err : "");
    return rc;
}

static void assert_has(const char *text, const char *what)
{
    if (!strstr(text, what)) printf("expected \"%s\" in:\n%s\n", what, text);
    assert_non_null(strstr(text, what));
}

static void assert_lacks(const char *text, const char *what)
{
    if (strstr(text, what)) printf("did not expect \"%s\" in:\n%s\n", what, text);
    assert_null(strstr(text, what));
}

static int setup(void **state)
{
    (void)state;
    g_bin = getenv("SDNN_DARKNET_BIN");
    if (!g_bin) g_bin = "./darknet";
    snprintf(g_dir, sizeof g_dir, "/tmp/sdnn-evalflags-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (tu_run("%s scalednn gen-shapes %s/shapes -n 4 -valid 2 -seed 5 >%s/gen.log 2>&1", g_bin,
               g_dir, g_dir) != 0)
        return -1;
    network *net = parse_network_cfg("cfg/shapes.cfg");
    if (!net) return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/shapes.weights", g_dir);
    sdnn_status st = sdnn_save_weights_atomic(net, path);
    sdnn_network_free(net);
    if (st != SDNN_OK) return -1;
    return tu_run("printf 'classes=4\\ntrain=%s/shapes/train.txt\\nvalid=%s/shapes/valid.txt\\n"
                  "names=%s/shapes/shapes.names\\nresults=%s/results\\nbackup=%s/backup\\n' "
                  "> %s/shapes.data",
                  g_dir, g_dir, g_dir, g_dir, g_dir, g_dir);
}

static int teardown(void **state)
{
    (void)state;
    if (g_dir[0] && !getenv("SDNN_KEEP")) tu_run("rm -rf %s", g_dir);
    return 0;
}

/* ---- anchors: every entry a finite number > 0 -------------------------------- */

/* cfg/shapes.cfg with the first [yolo]'s anchors= (line 123) replaced. */
static char *shapes_with_anchors(const char *anchors)
{
    char *text = tu_slurp("cfg/shapes.cfg");
    assert_non_null(text);
    const char *old = "anchors = 12,12, 14,14, 17,17, 20,20, 23,23, 27,27";
    char *at = strstr(text, old);
    assert_non_null(at);
    size_t head = (size_t)(at - text), olen = strlen(old), alen = strlen(anchors);
    char *out = malloc(strlen(text) - olen + alen + 16);
    assert_non_null(out);
    memcpy(out, text, head);
    sprintf(out + head, "anchors=%s%s", anchors, at + olen);
    free(text);
    return out;
}

static void expect_anchor_refused(const char *anchors, int entry, const char *shown)
{
    char *cfg = shapes_with_anchors(anchors);
    sdnn_status st = sdnn_cfg_check_text("x.cfg", cfg);
    if (st != SDNN_ERR_INVALID) printf("anchors=%s: status %d, %s\n", anchors, st, sdnn_last_error());
    assert_int_equal(st, SDNN_ERR_INVALID);
    const char *e = sdnn_last_error();
    char want[160];
    /* file:line, the section, the key, the entry and what is allowed. */
    assert_has(e, "x.cfg:123: [yolo] anchors=");
    snprintf(want, sizeof want, "entry %d (\"%s\")", entry, shown);
    assert_has(e, want);
    assert_has(e, "pixels of the network's input, a finite number > 0");
    free(cfg);
}

static void test_anchors_refused(void **state)
{
    (void)state;
    char *good = shapes_with_anchors("12,12,14,14,17,17,20,20,23,23,27,27");
    assert_int_equal(sdnn_cfg_check_text("x.cfg", good), SDNN_OK);
    free(good);
    expect_anchor_refused("0,0,14,14,17,17,20,20,23,23,27,27", 1, "0");
    expect_anchor_refused("12,12,14,-14,17,17,20,20,23,23,27,27", 4, "-14");
    expect_anchor_refused("12,12,14,14,nan,17,20,20,23,23,27,27", 5, "nan");
    expect_anchor_refused("12,12,14,14,17,17,20,20,23,23,27,inf", 12, "inf");
    expect_anchor_refused("12,12,14,14,17,17,,20,23,23,27,27", 7, "");
    expect_anchor_refused("12,12,14,14,17,17,20,20,23,23,27,", 12, "");
    expect_anchor_refused("12,12,14,14,17,17,20,20,23,23,27,abc", 12, "abc");
    expect_anchor_refused("12,12,14,14,17,17,20,20,23,23,27,1e-60", 12, "1e-60"); /* 0 as a float */
    expect_anchor_refused("12,12,14,14,17,17,20,20,23,23,27,1e60", 12, "1e60");   /* inf as a float */
    expect_anchor_refused("12,12,14,14,17,17,20,20,23,23,27,12x", 12, "12x");
    /* An odd count is one value short (or over) of num=6's 12. */
    char *odd = shapes_with_anchors("12,12,14,14,17,17,20,20,23,23,27");
    assert_int_equal(sdnn_cfg_check_text("x.cfg", odd), SDNN_ERR_INVALID);
    assert_has(sdnn_last_error(), "11 values, but num=6 anchors need 12");
    free(odd);

    /* [region]: anchors in grid cells, the same rule. */
    const char *region = "[net]\nbatch=1\nsubdivisions=1\nwidth=32\nheight=32\nchannels=3\n\n"
                         "[convolutional]\nfilters=12\nsize=1\nstride=1\nactivation=linear\n\n"
                         "[region]\nanchors=%s\nclasses=1\nnum=2\ncoords=4\n";
    char text[1024];
    snprintf(text, sizeof text, region, "0.5,0.75,2,3");
    assert_int_equal(sdnn_cfg_check_text("r.cfg", text), SDNN_OK);
    snprintf(text, sizeof text, region, "0.5,0,2,3");
    assert_int_equal(sdnn_cfg_check_text("r.cfg", text), SDNN_ERR_INVALID);
    assert_has(sdnn_last_error(), "r.cfg:15: [region] anchors=0.5,0,2,3: entry 2 (\"0\")");
    assert_has(sdnn_last_error(), "grid cells of the layer's output, a finite number > 0");

    /* Through the binary: training stops before it starts (it trained dead
     * predictors with exit 0). */
    char *cfg = shapes_with_anchors("0,0,14,14,17,17,20,20,23,23,27,27");
    char path[512];
    snprintf(path, sizeof path, "%s/zero-anchor.cfg", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(cfg, f);
    fclose(f);
    free(cfg);
    char *out;
    int rc = run2(&out, NULL, "detector train %s/shapes.data %s -max_batches 1 -seed 1", g_dir,
                  path);
    assert_int_not_equal(rc, 0);
    assert_has(out, "zero-anchor.cfg:123: [yolo] anchors=0,0,");
    assert_has(out, "entry 1 (\"0\")");
    free(out);
}

/* ---- calc_anchors: rounded, never 0 --------------------------------------------- */

/* Writes one label file (text) for the list's one image, in g_dir/ka. */
static void anchor_labels(const char *text)
{
    assert_int_equal(tu_run("mkdir -p %s/ka/images %s/ka/labels && printf '%s' > %s/ka/labels/a.txt "
                            "&& printf '%s/ka/images/a.png\\n' > %s/ka/train.txt && "
                            "printf 'train=%s/ka/train.txt\\n' > %s/ka.data",
                            g_dir, g_dir, text, g_dir, g_dir, g_dir, g_dir, g_dir),
                     0);
}

/* The values of the "anchors = " line; their count. */
static int printed_anchors(const char *out, double *v, int max)
{
    const char *p = strstr(out, "\nanchors = ");
    if (!p) p = strncmp(out, "anchors = ", 10) == 0 ? out - 1 : NULL;
    assert_non_null(p);
    p += strlen("\nanchors = ");
    int n = 0;
    while (n < max && *p && *p != '\n') {
        char *end;
        v[n++] = strtod(p, &end);
        assert_true(end != p);
        p = end;
        while (*p == ',' || *p == ' ') ++p;
    }
    return n;
}

static void test_calc_anchors_rounding(void **state)
{
    (void)state;
    /* At 100 x 100 pixels: two 11.7 px boxes (rounded 12, truncated 11), one
     * of 0.2 x 0.3 px (sub-pixel: 0 either way), one 60 x 57. */
    anchor_labels("0 0.5 0.5 0.117 0.117\\n0 0.5 0.5 0.117 0.117\\n0 0.5 0.5 0.002 0.003\\n"
                  "0 0.5 0.5 0.6 0.57\\n");
    char *out, *err;
    int rc = run2(&out, &err, "detector calc_anchors %s/ka.data -num_of_clusters 3 -width 100 "
                  "-height 100", g_dir);
    assert_int_equal(rc, 0);
    assert_has(out, "anchors = 1,1, 12,12, 60,57\n");
    assert_has(out, "anchors (unrounded) = 0.2000,0.3000, 11.7000,11.7000, 60.0000,57.0000\n");
    assert_has(err, "warning: calc_anchors: cluster 1 of 3 (1 box) is 0.2 x 0.3");
    assert_has(err, "printed as 1");
    assert_has(err, "a larger -width/-height");
    assert_has(err, "fewer -num_of_clusters");
    double v[16];
    int n = printed_anchors(out, v, 16);
    assert_int_equal(n, 6);
    for (int i = 0; i < n; ++i) assert_true(v[i] > 0);
    free(out);
    free(err);
    /* No warning where nothing is sub-pixel. */
    anchor_labels("0 0.5 0.5 0.117 0.117\\n0 0.5 0.5 0.6 0.57\\n");
    rc = run2(&out, &err, "detector calc_anchors %s/ka.data -num_of_clusters 2 -width 100 "
              "-height 100", g_dir);
    assert_int_equal(rc, 0);
    assert_has(out, "anchors = 12,12, 60,57\n");
    assert_lacks(err, "warning");
    free(out);
    free(err);

    /* Grid cells (-width 13: 4 decimals): a 1.3e-5 cell box prints 0.0001,
     * and the printed line is one the cfg check takes as [region] anchors. */
    anchor_labels("0 0.5 0.5 0.000001 0.000001\\n0 0.5 0.5 0.6 0.6\\n");
    rc = run2(&out, &err, "detector calc_anchors %s/ka.data -num_of_clusters 2 -width 13 "
              "-height 13", g_dir);
    assert_int_equal(rc, 0);
    assert_has(out, "anchors = 0.0001,0.0001, 7.8000,7.8000\n");
    assert_has(err, "printed as 0.0001");
    const char *un = strstr(out, "anchors (unrounded) = ");
    assert_non_null(un);
    assert_lacks(un, "0.0000,");
    char line[256], text[1024];
    const char *p = strstr(out, "\nanchors = ");
    assert_non_null(p);
    p += strlen("\nanchors = ");
    size_t len = strcspn(p, "\n");
    snprintf(line, sizeof line, "%.*s", (int)len, p);
    snprintf(text, sizeof text,
             "[net]\nbatch=1\nsubdivisions=1\nwidth=32\nheight=32\nchannels=3\n\n"
             "[convolutional]\nfilters=12\nsize=1\nstride=1\nactivation=linear\n\n"
             "[region]\nanchors=%s\nclasses=1\nnum=2\ncoords=4\n", line);
    for (char *q = text; *q; ++q) /* Darknet strips the spaces */
        if (*q == ' ') memmove(q, q + 1, strlen(q)), --q;
    sdnn_status st = sdnn_cfg_check_text("pasted.cfg", text);
    if (st != SDNN_OK) printf("%s\n", sdnn_last_error());
    assert_int_equal(st, SDNN_OK);
    free(out);
    free(err);
}

/* ---- flags that only matter with another ------------------------------------------ */

static void test_needs_in_parser(void **state)
{
    (void)state;
    int a = 0, b = 0;
    long n = 0;
    const sdnn_flag flags[] = {
        {.name = "-b", .kind = SDNN_FLAG_SWITCH, .dst = &b},
        {.name = "-n", .kind = SDNN_FLAG_LONG, .dst = &n, .lo = 0, .hi = 9, .meta = "N",
         .needs = "-b", .needs_why = "only -b reads it"},
        {.name = "-a", .kind = SDNN_FLAG_SWITCH, .dst = &a, .needs = "-b"},
    };
    const sdnn_command cmd = {.name = "t", .args = "", .flags = flags, .nflags = 3};
    const char *pos[1];
    int np;
    char *v1[] = {"t", "-n", "3"};
    assert_int_equal(sdnn_args_parse(&cmd, 3, v1, 1, pos, &np), SDNN_ARGS_BAD);
    char *v2[] = {"t", "-n", "3", "-b"};
    assert_int_equal(sdnn_args_parse(&cmd, 4, v2, 1, pos, &np), SDNN_ARGS_OK);
    char *v3[] = {"t", "-b", "-a"};
    assert_int_equal(sdnn_args_parse(&cmd, 3, v3, 1, pos, &np), SDNN_ARGS_OK);
    char *v4[] = {"t", "-a"};
    assert_int_equal(sdnn_args_parse(&cmd, 2, v4, 1, pos, &np), SDNN_ARGS_BAD);
    char *v5[] = {"t", "-b"};
    assert_int_equal(sdnn_args_parse(&cmd, 2, v5, 1, pos, &np), SDNN_ARGS_OK);
}

static void test_eval_flags_need_map(void **state)
{
    (void)state;
    static const char *const detector[] = {"-points 11", "-iou_thresh 0.6", "-thresh 0.3",
                                           "-map_every 5", "-target 0.5"};
    static const char *const classifier[] = {"-map_every 5", "-target 0.5"};
    const struct {
        const char *cmd;
        const char *const *flags;
        int n;
    } cases[] = {{"detector train", detector, 5}, {"classifier train", classifier, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c)
        for (int i = 0; i < cases[c].n; ++i) {
            char *out, want[160];
            /* Refused at the command line, before any file is read. */
            int rc = run2(&out, NULL, "%s %s/nothere.data cfg/shapes.cfg %s -max_batches 1",
                          cases[c].cmd, g_dir, cases[c].flags[i]);
            if (rc != 2) printf("%s %s: rc %d\n%s\n", cases[c].cmd, cases[c].flags[i], rc, out);
            assert_int_equal(rc, 2);
            snprintf(want, sizeof want, "error: darknet %s: %s needs -map (", cases[c].cmd,
                     cases[c].flags[i]);
            assert_has(out, want);
            free(out);
            /* With -map the flag is taken: the run goes on to the data file. */
            rc = run2(&out, NULL, "%s %s/nothere.data cfg/shapes.cfg -map %s -max_batches 1",
                      cases[c].cmd, g_dir, cases[c].flags[i]);
            assert_int_not_equal(rc, 2);
            assert_int_not_equal(rc, 0);
            assert_lacks(out, "needs -map");
            assert_has(out, "nothere.data");
            free(out);
        }
}

/* ---- duplicate class names -------------------------------------------------------- */

static int dir_entries(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* g_dir/NAME.data over the valid set with the names file `names` (printf
 * text) and results= g_dir/NAME-results. */
static void names_data(const char *name, const char *names)
{
    assert_int_equal(tu_run("printf '%s' > %s/%s.names && printf 'classes=4\\nvalid=%s/shapes/"
                            "valid.txt\\nnames=%s/%s.names\\nresults=%s/%s-results\\n' > %s/%s.data",
                            names, g_dir, name, g_dir, g_dir, name, g_dir, name, g_dir, name),
                     0);
}

static void test_duplicate_names_refused(void **state)
{
    (void)state;
    char *out, res[512];
    names_data("dup", "circle\\nsquare\\ncircle\\ncross\\n");
    snprintf(res, sizeof res, "%s/dup-results", g_dir);
    for (int pass = 0; pass < 2; ++pass) {
        /* First without the results folder, then with it (empty). */
        static const char *const cmds[] = {"valid", "map", "test"};
        for (int c = 0; c < 3; ++c) {
            int rc = c < 2 ? run2(&out, NULL, "detector %s %s/dup.data cfg/shapes.cfg "
                                  "%s/shapes.weights", cmds[c], g_dir, g_dir)
                           : run2(&out, NULL, "detector test %s/dup.data cfg/shapes.cfg "
                                  "%s/shapes.weights %s/shapes/images/valid/000001.png -out %s/p",
                                  g_dir, g_dir, g_dir, g_dir);
            assert_int_equal(rc, 1);
            assert_has(out, "dup.names:1 and line 3: class name \"circle\" twice");
            free(out);
            if (pass == 0) assert_int_equal(dir_entries(res), -1);
            else assert_int_equal(dir_entries(res), 0);
        }
        if (pass == 0) assert_int_equal(mkdir(res, 0755), 0);
    }
    /* A '/' would put valid's file elsewhere; map only prints the name. */
    names_data("slash", "circle\\nsq/uare\\ntriangle\\ncross\\n");
    int rc = run2(&out, NULL, "detector valid %s/slash.data cfg/shapes.cfg %s/shapes.weights",
                  g_dir, g_dir);
    assert_int_equal(rc, 1);
    assert_has(out, "slash.names:2: class name \"sq/uare\" contains '/'");
    free(out);
    snprintf(res, sizeof res, "%s/slash-results", g_dir);
    assert_int_equal(dir_entries(res), -1);
    rc = run2(&out, NULL, "detector map %s/slash.data cfg/shapes.cfg %s/shapes.weights", g_dir,
              g_dir);
    assert_int_equal(rc, 0);
    free(out);
    /* A blank line, and names equal once a CRLF file's '\r' is dropped. */
    names_data("blank", "circle\\n  \\ntriangle\\ncross\\n");
    rc = run2(&out, NULL, "detector map %s/blank.data cfg/shapes.cfg %s/shapes.weights", g_dir,
              g_dir);
    assert_int_equal(rc, 1);
    assert_has(out, "blank.names:2: the name is empty");
    free(out);
    names_data("crlf", "circle\\r\\nsquare\\r\\ntriangle\\r\\ncircle\\n");
    rc = run2(&out, NULL, "detector valid %s/crlf.data cfg/shapes.cfg %s/shapes.weights", g_dir,
              g_dir);
    assert_int_equal(rc, 1);
    assert_has(out, "crlf.names:1 and line 4: class name \"circle\" twice");
    free(out);
    /* Distinct names: valid writes and counts each class's file. */
    names_data("ok", "circle\\nsquare\\ntriangle\\ncross\\n");
    rc = run2(&out, NULL, "detector valid %s/ok.data cfg/shapes.cfg %s/shapes.weights", g_dir,
              g_dir);
    assert_int_equal(rc, 0);
    assert_has(out, " into 4 files ");
    free(out);
    snprintf(res, sizeof res, "%s/ok-results", g_dir);
    assert_int_equal(dir_entries(res), 4);
    /* detector test read a name per class past a short names file. */
    names_data("short", "circle\\nsquare\\n");
    rc = run2(&out, NULL, "detector test %s/short.data cfg/shapes.cfg %s/shapes.weights "
              "%s/shapes/images/valid/000001.png -out %s/p", g_dir, g_dir, g_dir, g_dir);
    assert_int_equal(rc, 1);
    assert_has(out, "has 2 names for 4 classes");
    free(out);
}

/* The function itself: the first pair by name, with both lines. */
static void test_read_class_names(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/fn.names", g_dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("b\na\nc\nA\nd\nc\n", f);
    fclose(f);
    list *l = NULL;
    assert_null(sdnn_read_class_names("x.data", "names", path, NULL, &l));
    assert_null(l);
    f = fopen(path, "w");
    fputs("b\na\nc\nA\n", f); /* case differs: two names */
    fclose(f);
    char **names = sdnn_read_class_names("x.data", "names", path, "p_", &l);
    assert_non_null(names);
    assert_int_equal(l->size, 4);
    assert_string_equal(names[3], "A");
    free_ptrs((void **)names, l->size);
    free_list(l);
}

/* ---- thresholds printed as given -------------------------------------------------- */

static void test_fmt_float(void **state)
{
    (void)state;
    char b[SDNN_FMT_FLOAT_LEN];
    assert_string_equal(sdnn_fmt_float(b, 0.999f, 2), "0.999");
    assert_string_equal(sdnn_fmt_float(b, 0.5f, 2), "0.50");
    assert_string_equal(sdnn_fmt_float(b, 1.0f, 2), "1.00");
    assert_string_equal(sdnn_fmt_float(b, 0.125f, 2), "0.125");
    assert_string_equal(sdnn_fmt_float(b, 0.005f, 0), "0.005");
    assert_string_equal(sdnn_fmt_float(b, 0.0f, 0), "0");
    assert_string_equal(sdnn_fmt_float(b, 1e-12f, 0), "1e-12");
    /* Every value in (0, 1] on a grid reads back as itself. */
    uint64_t seed = 11;
    for (int i = 0; i < 20000; ++i) {
        float v = i < 1000 ? (float)(i + 1) / 1000 : tu_uniform(&seed, 0.f, 1.f);
        sdnn_fmt_float(b, v, 2);
        if (strtof(b, NULL) != v) printf("%.9g printed as %s\n", (double)v, b);
        assert_true(strtof(b, NULL) == v);
    }
}

static void test_thresholds_printed(void **state)
{
    (void)state;
    char *out;
    int rc = run2(&out, NULL, "detector map %s/shapes.data cfg/shapes.cfg %s/shapes.weights "
                  "-iou_thresh 0.999 -thresh 0.125 -nms 0.333", g_dir, g_dir);
    assert_int_equal(rc, 0);
    assert_has(out, "IoU >= 0.999, detections: probability > 0.005 after NMS 0.333");
    assert_has(out, " for conf_thresh = 0.125, ");
    assert_has(out, "mAP@0.999: all-point ");
    assert_has(out, "(mAP@0.999) = ");
    assert_lacks(out, "1.00");
    free(out);
    /* The fork's two decimals stay where they are exact. */
    rc = run2(&out, NULL, "detector map %s/shapes.data cfg/shapes.cfg %s/shapes.weights", g_dir,
              g_dir);
    assert_int_equal(rc, 0);
    assert_has(out, "mAP@0.50: all-point ");
    assert_has(out, " for conf_thresh = 0.25, ");
    free(out);
    rc = run2(&out, NULL, "detector recall %s/shapes.data cfg/shapes.cfg %s/shapes.weights "
              "-iou_thresh 0.999 -thresh 0.0005", g_dir, g_dir);
    assert_int_equal(rc, 0);
    assert_has(out, "(IoU > 0.999, objectness > 0.0005)");
    free(out);
    rc = run2(&out, NULL, "detector valid %s/shapes.data cfg/shapes.cfg %s/shapes.weights "
              "-thresh 0.0005", g_dir, g_dir);
    assert_int_equal(rc, 0);
    assert_has(out, " boxes above 0.0005 into 4 files ");
    free(out);
}

/* Training's -map prints its thresholds as given too, and -thresh 0 is a
 * threshold of 0 (it was turned into the default 0.25). */
static void test_train_map_thresholds(void **state)
{
    (void)state;
    char *out;
    int rc = run2(&out, NULL, "detector train %s/shapes.data cfg/shapes.cfg -max_batches 1 -map "
                  "-map_every 1 -iou_thresh 0.999 -thresh 0 -seed 1 -csv %s/t.csv", g_dir, g_dir);
    if (rc != 0) printf("%s\n", out);
    assert_int_equal(rc, 0);
    assert_has(out, "mAP@0.999 at iteration ");
    assert_has(out, " for conf_thresh = 0.00, ");
    free(out);
}

/* classifier train: a labels file naming a class twice is refused (the
 * loader gives an image the first name found in its path, so the second
 * class would never be trained), naming both lines. */
static void test_classifier_duplicate_labels(void **state)
{
    (void)state;
    assert_int_equal(tu_run("printf 'circle\\nsquare\\ncircle\\n' >%s/dup.labels && "
                            "printf 'classes=3\\ntrain=%s/shapes/train.txt\\nlabels=%s/dup.labels\\n"
                            "backup=%s/cbackup\\n' >%s/cls.data && mkdir -p %s/cbackup",
                            g_dir, g_dir, g_dir, g_dir, g_dir, g_dir),
                     0);
    char *out;
    int rc = run2(&out, NULL, "classifier train %s/cls.data cfg/fmnist.cfg -max_batches 1", g_dir);
    assert_int_equal(rc, 1);
    assert_has(out, "dup.labels:1 and line 3: class name \"circle\" twice");
    free(out);
    char path[512];
    snprintf(path, sizeof path, "%s/cbackup/fmnist.csv", g_dir);
    assert_int_not_equal(access(path, F_OK), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_anchors_refused),
        cmocka_unit_test(test_calc_anchors_rounding),
        cmocka_unit_test(test_needs_in_parser),
        cmocka_unit_test(test_eval_flags_need_map),
        cmocka_unit_test(test_duplicate_names_refused),
        cmocka_unit_test(test_read_class_names),
        cmocka_unit_test(test_fmt_float),
        cmocka_unit_test(test_thresholds_printed),
        cmocka_unit_test(test_train_map_thresholds),
        cmocka_unit_test(test_classifier_duplicate_labels),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
