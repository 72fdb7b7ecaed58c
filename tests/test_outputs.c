/*
 * The files a training run writes, through ./darknet (SDNN_DARKNET_BIN) on
 * a tiny shapes set: no output may be another output of the same run or
 * one of its inputs, whatever the spelling (./, .., a folder link, a file
 * link, a hard link); every refusal comes before anything is written (the
 * previous run's CSV and trace stay byte for byte); temporary files never
 * take a user's file; an output folder that is missing or does not take a
 * file is refused at start, naming the flag and the folder; and the
 * advice for weights past max_batches stays within -max_batches' range.
 *
 * tier: full (runs in `make test`, not in `make check`: many trainings).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include "saveio.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[256];
static const char *g_bin;
static char *g_good;       /* weights of one training step (bytes) */
static long g_good_len;

/* "DIR/name" in a static ring of buffers. */
static const char *P(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *P(const char *fmt, ...)
{
    static char ring[16][1024];
    static int k;
    char *out = ring[k++ % 16];
    char tail[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tail, sizeof tail, fmt, ap);
    va_end(ap);
    snprintf(out, 1024, "%s/%s", g_dir, tail);
    return out;
}

static void put_file(const char *path, const void *data, size_t len)
{
    assert_int_equal(tu_put_file(path, data, len), 0);
}

static void put_text(const char *path, const char *text)
{
    put_file(path, text, strlen(text));
}

/* The file holds exactly `text`. */
static void assert_holds(const char *path, const char *text, long len)
{
    long n = -1;
    char *s = tu_slurp_len(path, &n);
    if (!s) print_error("%s is gone\n", path);
    assert_non_null(s);
    assert_int_equal(n, len);
    assert_memory_equal(s, text, (size_t)len);
    free(s);
}

/* TAG.data: the shapes lists, backup=DIR/TAG/. */
static const char *data_file(const char *tag)
{
    char text[2048];
    snprintf(text, sizeof text, "classes=4\ntrain=%s/shapes/train.txt\nvalid=%s/shapes/valid.txt\n"
             "names=%s/shapes/shapes.names\nbackup=%s/%s/\n", g_dir, g_dir, g_dir, g_dir, tag);
    const char *path = P("%s.data", tag);
    put_text(path, text);
    return path;
}

static int run_bin(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run_bin(char **out, const char *fmt, ...)
{
    char args[3072];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int rc = tu_run("%s %s >%s/run.log 2>&1", g_bin, args, g_dir);
    char *log = tu_slurp(P("run.log"));
    if (out) *out = log;
    else free(log);
    return rc;
}

static void assert_has(const char *text, const char *want)
{
    if (!text || !strstr(text, want)) {
        print_error("output was:\n%s\n(wanted: %s)\n", text ? text : "(none)", want);
        fail();
    }
}

/* The file is one of our CSVs. */
static void assert_is_csv(const char *path)
{
    char *csv = tu_slurp(path);
    assert_non_null(csv);
    assert_has(csv, "iteration,images");
    free(csv);
}

/* Names in DIR other than "." and ".." (0 when DIR is missing). */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) ++n;
    closedir(d);
    return n;
}

static int exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static int setup(void **state)
{
    (void)state;
    g_bin = getenv("SDNN_DARKNET_BIN");
    if (!g_bin) g_bin = "./darknet";
    snprintf(g_dir, sizeof g_dir, "/tmp/sdnn-outputs-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (tu_run("%s scalednn gen-shapes %s/shapes -n 8 -valid 2 -seed 5 >%s/gen.log 2>&1", g_bin,
               g_dir, g_dir) != 0)
        return -1;
    data_file("seed");
    if (tu_run("%s detector train %s/seed.data cfg/shapes.cfg -max_batches 1 -seed 1 "
               ">%s/seed.log 2>&1", g_bin, g_dir, g_dir) != 0)
        return -1;
    g_good = tu_slurp_len(P("seed/shapes_final.weights"), &g_good_len);
    return g_good && g_good_len > 1000 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (g_dir[0] && !getenv("SDNN_KEEP")) tu_run("rm -rf %s", g_dir);
    free(g_good);
    return 0;
}

/* A refused run: exit 1, the message has `want` (and want2), and the
 * backup folder TAG holds nothing (no lock, CSV, chart or weights). */
static void refused_clean(const char *tag, const char *args, const char *want, const char *want2)
{
    char *out;
    int rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 1 -seed 1 %s",
                     data_file(tag), args);
    if (rc != 1) print_error("rc %d for %s:\n%s\n", rc, args, out);
    assert_int_equal(rc, 1);
    assert_has(out, want);
    if (want2) assert_has(out, want2);
    if (entries(P("%s", tag)) != 0) {
        tu_run("ls -la %s/%s", g_dir, tag);
        print_error("%s: something was written for %s\n", tag, args);
    }
    assert_int_equal(entries(P("%s", tag)), 0);
    free(out);
}

/* ---- one output is another ---------------------------------------------------- */

static void test_chart_is_a_weights_save(void **state)
{
    (void)state;
    /* The weights saves and the CSV, each under three spellings of the
     * backup folder: plain, with ./, with a detour through "..". */
    static const char *const names[] = {"shapes_final.weights", "shapes_last.weights",
                                        "shapes.backup", "shapes.csv", "shapes_best.weights",
                                        "shapes_final.weights.ef"};
    static const char *const spell[] = {"o1/%s", "o1/./%s", "o1/../o1/%s"};
    char args[1400];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
        for (size_t k = 0; k < 3; ++k) {
            char rel[256];
            snprintf(rel, sizeof rel, spell[k], names[i]);
            snprintf(args, sizeof args, "-chart %s%s", P("%s", rel),
                     strstr(names[i], "best") ? " -map" : "");
            refused_clean("o1", args, "are the same file", "-chart");
        }
    /* A link to the backup folder, a link to where a save will be. */
    assert_int_equal(symlink(P("o1"), P("o1link")), 0);
    snprintf(args, sizeof args, "-chart %s", P("o1link/shapes_final.weights"));
    refused_clean("o1", args, "are the same file", "the final weights");
    assert_int_equal(symlink(P("o1/shapes_last.weights"), P("dangling.png")), 0);
    snprintf(args, sizeof args, "-chart %s", P("dangling.png"));
    refused_clean("o1", args, "are the same file", "the _last weights");
    /* The CSV and the chart are one file. */
    snprintf(args, sizeof args, "-chart %s -csv %s/o1/../o1x.csv", P("o1x.csv"), g_dir);
    refused_clean("o1", args, "-csv", "-chart");
    /* A periodic save's name. */
    snprintf(args, sizeof args, "-csv %s", P("o1/shapes_200.weights"));
    refused_clean("o1", args, "the weights saved during training", "-csv");
}

/* Existing files: a symbolic link and a hard link to the final weights
 * of a previous run are the same file. */
static void test_links_to_existing_outputs(void **state)
{
    (void)state;
    mkdir(P("o2"), 0755);
    put_file(P("o2/shapes_final.weights"), g_good, (size_t)g_good_len);
    assert_int_equal(symlink(P("o2/shapes_final.weights"), P("o2sym.png")), 0);
    assert_int_equal(link(P("o2/shapes_final.weights"), P("o2hard.png")), 0);
    char *out;
    const char *cases[] = {P("o2sym.png"), P("o2hard.png")};
    for (int i = 0; i < 2; ++i) {
        int rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 1 -seed 1 -chart %s",
                         data_file("o2"), cases[i]);
        assert_int_equal(rc, 1);
        assert_has(out, "are the same file");
        assert_has(out, cases[i]);
        free(out);
        rc = run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 1 -seed 1 -csv %s",
                     data_file("o2"), cases[i]);
        assert_int_equal(rc, 1);
        assert_has(out, "are the same file");
        free(out);
    }
    assert_holds(P("o2/shapes_final.weights"), g_good, g_good_len);
    assert_int_equal(entries(P("o2")), 1);
}

/* An output over an input: the data file, the cfg, the train list, a label
 * file, by name or through a link; all of them kept. */
static void test_output_is_an_input(void **state)
{
    (void)state;
    mkdir(P("o3cfg"), 0755);
    assert_int_equal(tu_run("cp cfg/shapes.cfg %s/o3cfg/shapes.cfg", g_dir), 0);
    char *cfg = tu_slurp(P("o3cfg/shapes.cfg"));
    char *list = tu_slurp(P("shapes/train.txt"));
    assert_non_null(cfg);
    assert_non_null(list);
    char first[512];
    assert_int_equal(sscanf(list, "%511s", first), 1);
    char lbl[600];
    snprintf(lbl, sizeof lbl, "%s", first);
    char *dot = strrchr(lbl, '.');
    assert_non_null(dot);
    strcpy(dot, ".txt");
    char *slash = strstr(lbl, "/images/");   /* Darknet's label path: images -> labels */
    assert_non_null(slash);
    memcpy(slash, "/labels/", 8);
    char *label = tu_slurp(lbl);
    assert_non_null(label);
    assert_int_equal(symlink(P("shapes/train.txt"), P("o3list.png")), 0);
    const char *const flags[][2] = {
        {"-csv", P("o3.data")},           {"-chart", P("o3cfg/shapes.cfg")},
        {"-csv", P("shapes/train.txt")},  {"-chart", P("o3list.png")},
        {"-csv", lbl},                    {"-chart", P("shapes/../shapes/valid.txt")},
    };
    char args[sizeof flags / sizeof flags[0]][1400];   /* P's buffers are reused */
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i)
        snprintf(args[i], sizeof args[i], "%s %s", flags[i][0], flags[i][1]);
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i) {
        char *out;
        int rc = run_bin(&out, "detector train %s %s -max_batches 1 -seed 1 -map %s",
                         data_file("o3"), P("o3cfg/shapes.cfg"), args[i]);
        if (rc != 1) print_error("rc %d for %s:\n%s\n", rc, args[i], out);
        assert_int_equal(rc, 1);
        assert_has(out, "a run never writes over its inputs");
        assert_has(out, i % 2 ? "-chart" : "-csv");
        free(out);
        assert_int_equal(entries(P("o3")), 0);
    }
    char *now = tu_slurp(P("o3cfg/shapes.cfg"));
    assert_string_equal(now, cfg);
    free(now);
    now = tu_slurp(P("shapes/train.txt"));
    assert_string_equal(now, list);
    free(now);
    now = tu_slurp(lbl);
    assert_string_equal(now, label);
    free(now);
    free(cfg);
    free(list);
    free(label);
    /* The weights to start from may be a save of the run: resuming from
     * _last writes _last again. */
    mkdir(P("o3"), 0755);
    put_file(P("o3/shapes_last.weights"), g_good, (size_t)g_good_len);
    char *out;
    int rc = run_bin(&out, "detector train %s cfg/shapes.cfg %s -max_batches 2 -seed 1",
                     data_file("o3"), P("o3/shapes_last.weights"));
    if (rc) print_error("%s\n", out);
    assert_int_equal(rc, 0);
    free(out);
    /* ... but never the CSV. */
    put_file(P("o3start.weights"), g_good, (size_t)g_good_len);
    rc = run_bin(&out, "detector train %s cfg/shapes.cfg %s -max_batches 3 -seed 1 -csv %s",
                 data_file("o3"), P("o3start.weights"), P("o3start.weights"));
    assert_int_equal(rc, 1);
    assert_has(out, "a run never writes over its inputs");
    assert_has(out, "the weights file to start from");
    free(out);
    assert_holds(P("o3start.weights"), g_good, g_good_len);
}

/* ---- refusals come before anything is written ----------------------------------- */

static void test_late_refusal_keeps_csv(void **state)
{
    (void)state;
    char *out;
    char data[1024];
    snprintf(data, sizeof data, "%s", data_file("o4"));
    assert_int_equal(run_bin(&out, "detector train %s cfg/shapes.cfg -max_batches 3 -seed 1",
                             data), 0);
    free(out);
    long len = 0;
    char *csv = tu_slurp_len(P("o4/shapes.csv"), &len);
    assert_non_null(csv);
    assert_true(len > 100);
    put_text(P("o4notes.png"), "my notes");
    mkdir(P("o4m"), 0755);
    assert_int_equal(tu_run("sed 's/^hue=.1/hue=.1\\nmosaic=1/' cfg/shapes.cfg > "
                            "%s/o4m/shapes.cfg", g_dir), 0);
    /* Weights far past max_batches, resumed (the CSV is appended to). */
    char big[1024];
    snprintf(big, sizeof big, "%s", P("o4big.weights"));
    put_file(big, g_good, (size_t)g_good_len);
    FILE *f = fopen(big, "r+b");
    uint64_t seen = (uint64_t)1 << 62;
    assert_int_equal(fseek(f, 12, SEEK_SET), 0);
    assert_int_equal(fwrite(&seen, sizeof seen, 1, f), 1);
    fclose(f);
    /* A trace refused in the trainer's start (topk_momentum with [net]
     * momentum) keeps the previous trace. */
    mkdir(P("o4t"), 0755);
    assert_int_equal(tu_run("(cat cfg/shapes.cfg; printf '\\n[scalednn]\\ncompress=topk\\n"
                            "topk_momentum=0.9\\ntimeline=%s/o4t.json\\n') > %s/o4t/shapes.cfg",
                            g_dir, g_dir), 0);
    static const char old_trace[] = "{\"traceEvents\":[\n{\"name\":\"an older run\"}]}\n";
    put_text(P("o4t.json"), old_trace);
    const char *cmds[][2] = {
        {"cfg/shapes.cfg -chart", P("o4notes.png")},
        {P("o4m/shapes.cfg"), "-letter_box"},
        {"cfg/shapes.cfg -chart", P("o4missing/c.png")},
        {"cfg/shapes.cfg -chart", P("o4notes.png/c.png")},
        {"cfg/shapes.cfg", big},
        {P("o4t/shapes.cfg"), ""},
    };
    char args[sizeof cmds / sizeof cmds[0]][2100];   /* P's buffers are reused */
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; ++i)
        snprintf(args[i], sizeof args[i], "%s %s", cmds[i][0], cmds[i][1]);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; ++i) {
        int rc = run_bin(&out, "detector train %s %s -max_batches 1 -seed 1", data, args[i]);
        if (rc != 1) print_error("rc %d for %s:\n%s\n", rc, args[i], out);
        assert_int_equal(rc, 1);
        free(out);
        assert_holds(P("o4/shapes.csv"), csv, len);
    }
    assert_holds(P("o4notes.png"), "my notes", 8);
    assert_holds(P("o4t.json"), old_trace, (long)strlen(old_trace));
    /* No temporary file left beside them. */
    assert_int_equal(tu_run("ls -a %s/o4 %s | grep -q '[.]tmp[.]'", g_dir, g_dir), 1);
    free(csv);
}

/* ---- temporary files are never a user's -------------------------------------------- */

static void test_user_files_named_like_temps_survive(void **state)
{
    (void)state;
    const char *data = data_file("o5");
    mkdir(P("o5"), 0755);
    int go[2];
    assert_int_equal(pipe(go), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char x;
        close(go[1]);
        if (read(go[0], &x, 1) != 1) _exit(126);
        char args[2048];
        snprintf(args, sizeof args, "exec %s detector train %s cfg/shapes.cfg -max_batches 1 "
                 "-seed 1 -chart %s/o5c.png >%s/o5.log 2>&1", g_bin, data, g_dir, g_dir);
        execl("/bin/sh", "sh", "-c", args, (char *)NULL);
        _exit(127);
    }
    close(go[0]);
    /* The names this process's files had, or have first: the user's. */
    const char *mine[] = {
        P("o5c.png.drawing.png"),
        P("o5/chart.png.drawing.png"),
        P("o5c.png.tmp.%ld", (long)pid),
        P("o5/shapes_final.weights.tmp.%ld", (long)pid),
        P("o5/shapes.csv.tmp.%ld", (long)pid),
        P("o5/.scalednn-write-test.%ld", (long)pid),
        P("o5/.scalednn-write-test.tmp.%ld", (long)pid),
        P("o5/.scalednn-probe.tmp.%ld", (long)pid),
    };
    const int n = (int)(sizeof mine / sizeof mine[0]);
    for (int i = 0; i < n; ++i) put_text(mine[i], "a file of the user's");
    assert_int_equal(write(go[1], "g", 1), 1);
    close(go[1]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    char *log = tu_slurp(P("o5.log"));
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) print_error("%s\n", log);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    free(log);
    for (int i = 0; i < n; ++i) {
        if (!exists(mine[i])) print_error("%s was removed\n", mine[i]);
        assert_holds(mine[i], "a file of the user's", 20);
    }
    /* And the run's own files are whole. */
    long len = 0;
    char *w = tu_slurp_len(P("o5/shapes_final.weights"), &len);
    assert_non_null(w);
    assert_int_equal(len, g_good_len);
    free(w);
    char *png = tu_slurp(P("o5c.png"));
    assert_non_null(png);
    assert_memory_equal(png, "\x89PNG", 4);
    free(png);
    assert_is_csv(P("o5/shapes.csv"));
}

/* ---- output folders checked at start --------------------------------------------- */

static void test_output_folder_refused_at_start(void **state)
{
    (void)state;
    put_text(P("o6file"), "a regular file");
    char args[1200];
    /* A missing folder, and a "folder" that is a regular file (root gets
     * past access(W_OK) checks, not past these). */
    snprintf(args, sizeof args, "-chart %s", P("o6missing/c.png"));
    refused_clean("o6", args, "-chart", P("o6missing"));
    snprintf(args, sizeof args, "-chart %s", P("o6file/c.png"));
    refused_clean("o6", args, "-chart", P("o6file"));
    snprintf(args, sizeof args, "-csv %s", P("o6missing/x.csv"));
    refused_clean("o6", args, "-csv", P("o6missing"));
    snprintf(args, sizeof args, "-csv %s", P("o6file/x.csv"));
    refused_clean("o6", args, "-csv", P("o6file"));
    /* A folder that exists and takes no file, even for root. */
    struct stat sb;
    if (stat("/proc/self", &sb) == 0 && S_ISDIR(sb.st_mode)) {
        refused_clean("o6", "-chart /proc/self/c.png", "-chart", "/proc/self");
        refused_clean("o6", "-csv /proc/self/x.csv", "-csv", "/proc/self");
    }
    /* The trace's folder ([scalednn] timeline=). */
    mkdir(P("o6t"), 0755);
    assert_int_equal(tu_run("(cat cfg/shapes.cfg; printf '\\n[scalednn]\\nmode=stock\\n"
                            "timeline=%s/o6missing/t.json\\n') > %s/o6t/shapes.cfg", g_dir, g_dir),
                     0);
    char *out;
    int rc = run_bin(&out, "detector train %s %s -max_batches 1 -seed 1", data_file("o6"),
                     P("o6t/shapes.cfg"));
    assert_int_equal(rc, 1);
    assert_has(out, "timeline=");
    assert_has(out, P("o6missing"));
    free(out);
    assert_int_equal(entries(P("o6")), 0);
}

/* ---- the iteration counter past max_batches ---------------------------------------- */

/* Every number after "-max_batches" or "N from"/"N >" in text is one the
 * flag takes (1 .. INT_MAX); the count of them. */
static int suggested_in_range(const char *text, long long *first)
{
    int n = 0;
    static const char *const marks[] = {"-max_batches ", "N from ", "N > ", " to "};
    for (size_t m = 0; m < sizeof marks / sizeof marks[0]; ++m)
        for (const char *p = text; (p = strstr(p, marks[m])); ++p) {
            const char *q = p + strlen(marks[m]);
            if (*q < '0' || *q > '9') continue;
            unsigned long long v = strtoull(q, NULL, 10);
            if (v > (unsigned long long)INT_MAX) print_error("suggests %llu:\n%s\n", v, text);
            assert_true(v <= (unsigned long long)INT_MAX);
            if (n++ == 0 && first) *first = (long long)v;
        }
    return n;
}

static void put_weights_at(const char *path, uint64_t seen)
{
    put_file(path, g_good, (size_t)g_good_len);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 12, SEEK_SET), 0);
    assert_int_equal(fwrite(&seen, sizeof seen, 1, f), 1);
    fclose(f);
}

static void test_iteration_advice_in_flag_range(void **state)
{
    (void)state;
    char *out;
    char data[1024];
    snprintf(data, sizeof data, "%s", data_file("o7"));
    /* 2^62 images of batch 8: iteration 2^59, past any -max_batches. */
    put_weights_at(P("o7far.weights"), (uint64_t)1 << 62);
    int rc = run_bin(&out, "detector train %s cfg/shapes.cfg %s -max_batches 1", data,
                     P("o7far.weights"));
    assert_int_equal(rc, 1);
    assert_has(out, "576460752303423488");
    assert_has(out, "-clear");
    suggested_in_range(out, NULL);
    free(out);
    /* The way out it names works. */
    rc = run_bin(&out, "detector train %s cfg/shapes.cfg %s -max_batches 1 -clear -seed 1", data,
                 P("o7far.weights"));
    if (rc) print_error("%s\n", out);
    assert_int_equal(rc, 0);
    free(out);
    /* Iteration 100 with max_batches 1: the value suggested trains. */
    put_weights_at(P("o7near.weights"), 100 * 8);
    rc = run_bin(&out, "detector train %s cfg/shapes.cfg %s -max_batches 1", data,
                 P("o7near.weights"));
    assert_int_equal(rc, 1);
    long long n = 0;
    assert_true(suggested_in_range(out, &n) >= 1);
    free(out);
    assert_int_equal(n, 101);
    rc = run_bin(&out, "detector train %s cfg/shapes.cfg %s -max_batches %lld -seed 1", data,
                 P("o7near.weights"), n);
    if (rc) print_error("%s\n", out);
    assert_int_equal(rc, 0);
    free(out);
}

/* classifier train: its own saves (CFG.weights at the end, CFG_N.weights
 * per epoch, CFG.backup). */
static void test_classifier_outputs(void **state)
{
    (void)state;
    assert_int_equal(tu_run("mkdir -p %s/c8 && cp %s/shapes/images/train/000001.png "
                            "%s/c8/a_circle.png && cp %s/shapes/images/train/000002.png "
                            "%s/c8/b_square.png && printf 'circle\\nsquare\\n' > %s/c8/names && "
                            "printf '%s/c8/a_circle.png\\n%s/c8/b_square.png\\n' > %s/c8/train.txt",
                            g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir), 0);
    put_text(P("c8.cfg"), "[net]\nbatch=2\nwidth=64\nheight=64\nchannels=3\nmax_batches=2\n"
                          "learning_rate=0.01\n[convolutional]\nfilters=2\nsize=3\nstride=2\n"
                          "pad=1\nactivation=leaky\n[avgpool]\n[softmax]\n");
    char text[1200];
    snprintf(text, sizeof text, "classes=2\ntrain=%s/c8/train.txt\nlabels=%s/c8/names\n"
             "backup=%s/c8b/\n", g_dir, g_dir, g_dir);
    put_text(P("c8.data"), text);
    static const char *const clash[] = {"c8b/c8.weights", "c8b/./c8.backup", "c8b/c8_7.weights",
                                        "c8/names", "c8/train.txt"};
    for (size_t i = 0; i < sizeof clash / sizeof clash[0]; ++i) {
        char *out;
        char csv[1024];
        snprintf(csv, sizeof csv, "%s", P("%s", clash[i]));
        int rc = run_bin(&out, "classifier train %s %s -csv %s", P("c8.data"), P("c8.cfg"), csv);
        if (rc != 1) print_error("rc %d for -csv %s:\n%s\n", rc, csv, out);
        assert_int_equal(rc, 1);
        assert_has(out, "-csv");
        assert_has(out, i < 3 ? "no output of a run may be another" : "never writes over its inputs");
        free(out);
        assert_int_equal(entries(P("c8b")), 0);
    }
    char *out;
    int rc = run_bin(&out, "classifier train %s %s -csv %s", P("c8.data"), P("c8.cfg"),
                     P("c8.csv"));
    if (rc) print_error("%s\n", out);
    assert_int_equal(rc, 0);
    free(out);
    assert_true(exists(P("c8b/c8.weights")));
    assert_is_csv(P("c8.csv"));
}

/* The stale temporary files of dead saves are recognised under the names
 * sdnn_temp_create gives when the first is taken (NAME.tmp.PID.HEX); a
 * user's file of that shape that is not a save's stays. */
static void test_clean_temps_second_names(void **state)
{
    (void)state;
    pid_t dead = fork();
    assert_true(dead >= 0);
    if (dead == 0) _exit(0);
    assert_int_equal(waitpid(dead, NULL, 0), dead);
    mkdir(P("c9"), 0755);
    const int32_t head[3] = {0, 2, 0};
    char ours[1024], theirs[1024], odd[1024];
    snprintf(ours, sizeof ours, "%s", P("c9/shapes_last.weights.tmp.%ld.0123456789abcdef", (long)dead));
    snprintf(theirs, sizeof theirs, "%s", P("c9/notes.txt.tmp.%ld.0123456789abcdef", (long)dead));
    snprintf(odd, sizeof odd, "%s", P("c9/shapes_last.weights.tmp.%ld.xyz", (long)dead));
    put_file(ours, head, sizeof head);
    put_file(theirs, head, sizeof head);
    put_file(odd, head, sizeof head);
    int cleaned = -1;
    assert_int_equal(sdnn_clean_temps(P("c9"), "shapes", &cleaned), SDNN_OK);
    assert_int_equal(cleaned, 1);
    assert_false(exists(ours));
    assert_true(exists(theirs));
    assert_true(exists(odd));
}

/* Under mpirun: rank 1's trace (PATH.rank1) named as rank 0's CSV, and
 * the chart over the final weights: every rank refuses, nothing written. */
static void test_mpirun_outputs(void **state)
{
    (void)state;
#if SDNN_MPI
    int have = tu_run("command -v mpirun >/dev/null 2>&1") == 0;
#else
    int have = 0;
#endif
    if (!have) {
        print_message("built without MPI or no mpirun: skipped\n");
        skip();
    }
    mkdir(P("m10cfg"), 0755);
    assert_int_equal(tu_run("(cat cfg/shapes.cfg; printf '\n[scalednn]\ntimeline=%s/m10t\n') "
                            "> %s/m10cfg/shapes.cfg", g_dir, g_dir), 0);
    char data[1024], cfg[1024], log[1024];
    snprintf(data, sizeof data, "%s", data_file("m10"));
    snprintf(cfg, sizeof cfg, "%s", P("m10cfg/shapes.cfg"));
    snprintf(log, sizeof log, "%s", P("m10.log"));
    const char *const flags[][2] = {{"-csv", "m10t.rank1"}, {"-chart", "m10/shapes_final.weights"}};
    for (int i = 0; i < 2; ++i) {
        char path[1024];
        snprintf(path, sizeof path, "%s", P("%s", flags[i][1]));
        int rc = tu_run("sh tests/mpi/run.sh 2 %s detector train %s %s -max_batches 1 -seed 1 "
                        "%s %s >%s 2>&1", g_bin, data, cfg, flags[i][0], path, log);
        char *out = tu_slurp(log);
        assert_true(rc != 0);
        assert_has(out, "are the same file");
        assert_has(out, flags[i][0]);
        free(out);
        assert_int_equal(entries(P("m10")), 0);
        assert_false(exists(P("m10t.rank1")));
    }
}

/* ---- an output that exists and is not a regular file -------------------------------- */

/* `timeout` keeps a regression (a write blocking on a FIFO) from hanging
 * the suite: 124 is then the exit code. */
static int run_deadline(char **out, const char *args)
{
    int rc = tu_run("timeout 60 %s %s >%s/run.log 2>&1", g_bin, args, g_dir);
    *out = tu_slurp(P("run.log"));
    return rc;
}

/* A FIFO or a folder where a run writes (the CSV, a weights save, valid's
 * result file, test's picture) is refused at start by name and kind; the
 * folder holds only what was put there.  A character device may take the
 * CSV (/dev/null). */
static void test_outputs_not_regular(void **state)
{
    (void)state;
    static const struct {
        const char *name;   /* made in the backup folder o7 */
        int fifo;
        const char *extra;  /* more train flags; %s: g_dir */
        const char *want;
    } cases[] = {
        {"x.csv", 1, "-csv %s/o7/x.csv", "-csv "},
        {"shapes_final.weights", 1, "", "the final weights "},
        {"shapes_final.weights", 0, "", "is a directory"},
        {"shapes_last.weights", 0, "", "the _last weights "},
        {"shapes.backup", 1, "", "the .backup weights "},
        {".scalednn.lock", 1, "", "lock file "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        tu_run("rm -rf %s/o7 && mkdir -p %s/o7", g_dir, g_dir);
        const char *path = P("o7/%s", cases[i].name);
        assert_int_equal(cases[i].fifo ? mkfifo(path, 0644) : mkdir(path, 0755), 0);
        char extra[600], args[2000];
        snprintf(extra, sizeof extra, cases[i].extra, g_dir);
        snprintf(args, sizeof args, "detector train %s cfg/shapes.cfg -max_batches 1 -seed 1 %s",
                 data_file("o7"), extra);
        char *out;
        int rc = run_deadline(&out, args);
        printf("%s (%s): rc %d\n", cases[i].name, cases[i].fifo ? "FIFO" : "folder", rc);
        if (rc != 1) print_error("%s\n", out);
        assert_int_equal(rc, 1);
        assert_has(out, cases[i].fifo ? "is a named pipe (FIFO)" : "is a directory");
        assert_has(out, cases[i].want);
        assert_has(out, "an output of a run is a regular file");
        assert_int_equal(entries(P("o7")), 1);
        free(out);
    }
    char args[2000], *out;
    tu_run("rm -rf %s/o7 && mkdir -p %s/o7", g_dir, g_dir);
    snprintf(args, sizeof args, "detector train %s cfg/shapes.cfg -max_batches 1 -seed 1 -csv "
             "/dev/null", data_file("o7"));
    assert_int_equal(run_deadline(&out, args), 0);
    free(out);
    /* detector valid's result files and detector test's picture. */
    tu_run("rm -rf %s/o7r && mkdir -p %s/o7r", g_dir, g_dir);
    put_text(P("o7r.data"), "");
    char text[2048];
    snprintf(text, sizeof text, "classes=4\nvalid=%s/shapes/valid.txt\nnames=%s/shapes/shapes.names\n"
             "results=%s/o7r\nbackup=%s/o7/\n", g_dir, g_dir, g_dir, g_dir);
    put_text(P("o7r.data"), text);
    char *names = tu_slurp(P("shapes/shapes.names"));
    assert_non_null(names);
    names[strcspn(names, "\n")] = '\0';
    assert_int_equal(mkfifo(P("o7r/comp4_det_test_%s.txt", names), 0644), 0);
    free(names);
    snprintf(args, sizeof args, "detector valid %s cfg/shapes.cfg %s", P("o7r.data"),
             P("seed/shapes_final.weights"));
    int rc = run_deadline(&out, args);
    assert_int_equal(rc, 1);
    assert_has(out, "the result file of class 0");
    assert_has(out, "is a named pipe (FIFO)");
    free(out);
    char *list = tu_slurp(P("shapes/valid.txt"));
    assert_non_null(list);
    list[strcspn(list, "\n")] = '\0';
    assert_int_equal(mkfifo(P("o7r/pic.jpg"), 0644), 0);
    snprintf(args, sizeof args, "detector test %s cfg/shapes.cfg %s %s -out %s", P("o7r.data"),
             P("seed/shapes_final.weights"), list, P("o7r/pic"));
    free(list);
    rc = run_deadline(&out, args);
    assert_int_equal(rc, 1);
    assert_has(out, "-out ");
    assert_has(out, "pic.jpg is a named pipe (FIFO)");
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chart_is_a_weights_save),
        cmocka_unit_test(test_links_to_existing_outputs),
        cmocka_unit_test(test_output_is_an_input),
        cmocka_unit_test(test_late_refusal_keeps_csv),
        cmocka_unit_test(test_user_files_named_like_temps_survive),
        cmocka_unit_test(test_output_folder_refused_at_start),
        cmocka_unit_test(test_iteration_advice_in_flag_range),
        cmocka_unit_test(test_classifier_outputs),
        cmocka_unit_test(test_clean_temps_second_names),
        cmocka_unit_test(test_mpirun_outputs),
        cmocka_unit_test(test_outputs_not_regular),
    };
    /* SDNN_TEST_FILTER=test_clean_temps_second_names runs the tests whose name matches. */
    const char *filter = getenv("SDNN_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, setup, teardown);
}
