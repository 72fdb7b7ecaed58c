/*
 * Input files that are not regular files: a FIFO, a directory, /dev/zero
 * and /dev/null given as every file ./darknet reads (the data file, the
 * cfg, the weights, the train and valid lists, the names file, labels=, an
 * image of a list, a label file, the `.ef` error-feedback state next to the
 * weights, a -profile file, gradcheck's and simulate's cfg, a file the cfg
 * names with map=).  Opening a FIFO blocks until a writer comes and a
 * device streams forever, so each run has a deadline: a hang is killed and
 * fails the case instead of hanging the suite.  Every run must end within
 * the deadline, refuse the file by name and say that a regular file is
 * needed (the `.ef` state is optional: the run goes on without it, with a
 * warning naming it).
 * tier: full (runs in `make test`, not in `make check`: about a hundred
 * runs of ./darknet, a few of them training a step).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE_S 20 /* a refusal takes well under a second */

static char g_dir[256];
static const char *g_bin;
static char g_img[512]; /* one good image of the shapes set */

typedef struct hostile {
    const char *name;
    char path[300];
    const char *kind; /* what the message must call it */
} hostile;

static hostile g_bad[4];
enum { N_BAD = sizeof g_bad / sizeof g_bad[0] };

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

static void put_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* A data file NAME.data: the extra lines, then the shapes set's keys that
 * they do not set (readers differ on which of two equal keys wins). */
static const char *data_file(const char *name, const char *extra)
{
    const char *keys[][2] = {{"classes", "4"},
                             {"train", P("shapes/train.txt")},
                             {"valid", P("shapes/valid.txt")},
                             {"names", P("shapes/shapes.names")},
                             {"backup", P("bk-%s/", name)}};
    char text[3072];
    size_t at = (size_t)snprintf(text, sizeof text, "%s", extra ? extra : "");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; ++i) {
        char key[32];
        snprintf(key, sizeof key, "%s=", keys[i][0]);
        if (extra && (strncmp(extra, key, strlen(key)) == 0 ||
                      (strstr(extra, key) && strstr(extra, key)[-1] == '\n')))
            continue;
        at += (size_t)snprintf(text + at, sizeof text - at, "%s%s\n", key, keys[i][1]);
    }
    static char ring[4][1024]; /* apart from P's: callers keep the name across P calls */
    static int k;
    char *path = ring[k++ % 4];
    snprintf(path, 1024, "%s/%s.data", g_dir, name);
    put_text(path, text);
    return path;
}

/* Run `sh -c CMD` in its own process group with output to DIR/run.log and
 * stdin from /dev/null; its exit code, or -1 when it did not end within the
 * deadline (the group is killed then).  *log gets the output. */
static int run_deadline(char **log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run_deadline(char **log, const char *fmt, ...)
{
    char args[3072], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "exec %s %s </dev/null >%s/run.log 2>&1", g_bin, args, g_dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setpgid(0, 0);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int st = 0, rc = -1;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
            break;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec >= DEADLINE_S) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            break;
        }
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    *log = tu_slurp(P("run.log"));
    assert_non_null(*log);
    if (rc == -1) print_error("hung (killed after %d s): %s\n%s\n", DEADLINE_S, args, *log);
    return rc;
}

static void has(const char *text, const char *needle)
{
    if (!strstr(text, needle)) print_error("output lacks \"%s\":\n%s\n", needle, text);
    assert_non_null(strstr(text, needle));
}

/* The run ends within the deadline, non-zero, and its output names every
 * needle (NULL-terminated). */
static void expect_refused(const char *const *needles, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void expect_refused(const char *const *needles, const char *fmt, ...)
{
    char args[3072];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char *log = NULL;
    int rc = run_deadline(&log, "%s", args);
    if (rc == 0) print_error("exit 0: %s\n%s\n", args, log);
    assert_int_not_equal(rc, -1);
    assert_int_not_equal(rc, 0);
    for (int i = 0; needles[i]; ++i) has(log, needles[i]);
    free(log);
}

/* ---- setup ---------------------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    g_bin = getenv("SDNN_DARKNET_BIN");
    if (!g_bin) g_bin = "./darknet";
    snprintf(g_dir, sizeof g_dir, "/tmp/sdnn-inputs-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (tu_run("%s scalednn gen-shapes %s/shapes -n 6 -valid 2 -seed 3 >%s/gen.log 2>&1", g_bin,
               g_dir, g_dir) != 0)
        return -1;
    snprintf(g_img, sizeof g_img, "%s/shapes/images/train/000001.png", g_dir);
    g_bad[0] = (hostile){"fifo", "", "named pipe (FIFO)"};
    snprintf(g_bad[0].path, sizeof g_bad[0].path, "%s/fifo", g_dir);
    g_bad[1] = (hostile){"directory", "", "a directory"};
    snprintf(g_bad[1].path, sizeof g_bad[1].path, "%s/adir", g_dir);
    g_bad[2] = (hostile){"zero", "/dev/zero", "a character device"};
    g_bad[3] = (hostile){"null", "/dev/null", "a character device"};
    if (mkfifo(g_bad[0].path, 0644) != 0 || mkdir(g_bad[1].path, 0755) != 0) return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (g_dir[0] && !getenv("SDNN_KEEP")) tu_run("rm -rf %s", g_dir);
    return 0;
}

/* ---- the files named on the command line --------------------------------------------- */

static void test_positional_files(void **state)
{
    (void)state;
    const char *good = data_file("good", NULL);
    for (int i = 0; i < N_BAD; ++i) {
        const hostile *h = &g_bad[i];
        const char *data[] = {"data file", h->path, h->kind, "regular file", NULL};
        expect_refused(data, "detector train %s cfg/shapes.cfg -max_batches 1", h->path);
        const char *cfg[] = {"cfg file", h->path, h->kind, "regular file", NULL};
        expect_refused(cfg, "detector train %s %s -max_batches 1", good, h->path);
        const char *weights[] = {"weights file", h->path, h->kind, "regular file", NULL};
        expect_refused(weights, "detector train %s cfg/shapes.cfg %s -max_batches 1", good,
                       h->path);
        /* The same checks on the evaluation side. */
        expect_refused(weights, "detector map %s cfg/shapes.cfg %s", good, h->path);
        const char *image[] = {"image", h->path, h->kind, NULL};
        expect_refused(image, "detector test %s cfg/shapes.cfg cfg/shapes.cfg %s", good,
                       h->path);
        const char *gc[] = {h->path, h->kind, "regular file", NULL};
        expect_refused(gc, "scalednn gradcheck %s", h->path);
        expect_refused(gc, "scalednn simulate %s -topology pcie", h->path);
        /* A profile to plan from (-profile FILE). */
        const char *prof[] = {"profile", h->path, h->kind, "regular file", NULL};
        expect_refused(prof, "scalednn plan %s cfg/shapes.cfg -profile %s", good, h->path);
    }
}

/* ---- a file a cfg names ([region]/[yolo] map=, tree=) ----------------------------------- */

static void test_cfg_named_files(void **state)
{
    (void)state;
    const char *good = data_file("good", NULL);
    char *shapes = tu_slurp("cfg/shapes.cfg");
    assert_non_null(shapes);
    for (int i = 0; i < N_BAD; ++i) {
        const hostile *h = &g_bad[i];
        size_t n = strlen(shapes) + 400;
        char *text = malloc(n), key[400], cfg[600];
        assert_non_null(text);
        /* The last section of shapes.cfg is a [yolo]: Darknet reads its map=. */
        snprintf(text, n, "%s\nmap=%s\n", shapes, h->path);
        snprintf(cfg, sizeof cfg, "%s", P("map-%s.cfg", h->name));
        put_text(cfg, text);
        free(text);
        snprintf(key, sizeof key, "map=%s", h->path);
        const char *map[] = {cfg, key, h->kind, "regular file", NULL};
        expect_refused(map, "detector train %s %s -max_batches 1", good, cfg);
    }
    free(shapes);
}

/* ---- the files a data file names ------------------------------------------------------ */

static void test_data_file_keys(void **state)
{
    (void)state;
    for (int i = 0; i < N_BAD; ++i) {
        const hostile *h = &g_bad[i];
        char line[512], key[512];
        snprintf(line, sizeof line, "train=%s\n", h->path);
        snprintf(key, sizeof key, "train=%s", h->path);
        const char *train[] = {key, h->kind, "regular file", NULL};
        expect_refused(train, "detector train %s cfg/shapes.cfg -max_batches 1",
                       data_file("train", line));
        snprintf(line, sizeof line, "valid=%s\n", h->path);
        snprintf(key, sizeof key, "valid=%s", h->path);
        const char *valid[] = {key, h->kind, "regular file", NULL};
        expect_refused(valid, "detector map %s cfg/shapes.cfg cfg/shapes.cfg",
                       data_file("valid", line));
        snprintf(line, sizeof line, "names=%s\n", h->path);
        snprintf(key, sizeof key, "names=%s", h->path);
        const char *names[] = {key, h->kind, "regular file", NULL};
        expect_refused(names, "detector test %s cfg/shapes.cfg cfg/shapes.cfg %s",
                       data_file("names", line), g_img);
        snprintf(line, sizeof line, "labels=%s\n", h->path);
        snprintf(key, sizeof key, "%s", h->path);
        const char *labels[] = {"labels file", key, h->kind, "regular file", NULL};
        expect_refused(labels, "classifier train %s cfg/shapes.cfg -max_batches 1",
                       data_file("labels", line));
    }
}

/* ---- the files a list names ------------------------------------------------------------ */

/* A data file whose train and valid lists hold one image, DIR/lb-NAME/images/a.png,
 * whose label file DIR/lb-NAME/labels/a.txt is a link to h's file (Darknet
 * finds the label by the image's path). */
static const char *label_data(const hostile *h)
{
    assert_int_equal(tu_run("mkdir -p %s/lb-%s/images %s/lb-%s/labels && "
                            "cp %s %s/lb-%s/images/a.png && ln -sf %s %s/lb-%s/labels/a.txt",
                            g_dir, h->name, g_dir, h->name, g_img, g_dir, h->name, h->path, g_dir,
                            h->name),
                     0);
    char text[600], line[1300];
    snprintf(text, sizeof text, "%s\n", P("lb-%s/images/a.png", h->name));
    put_text(P("lbl-%s.txt", h->name), text);
    snprintf(line, sizeof line, "train=%s\nvalid=%s\n", P("lbl-%s.txt", h->name),
             P("lbl-%s.txt", h->name));
    return data_file("lbl", line);
}

static void test_list_entries(void **state)
{
    (void)state;
    for (int i = 0; i < N_BAD; ++i) {
        const hostile *h = &g_bad[i];
        /* An image of the train list: the list's line names it. */
        char text[1024], line[600], key[600];
        snprintf(text, sizeof text, "%s\n%s\n", g_img, h->path);
        put_text(P("list-%s.txt", h->name), text);
        snprintf(line, sizeof line, "train=%s\n", P("list-%s.txt", h->name));
        snprintf(key, sizeof key, "%s:2", P("list-%s.txt", h->name));
        const char *image[] = {key, h->path, h->kind, "regular file", NULL};
        expect_refused(image, "detector train %s cfg/shapes.cfg -max_batches 1",
                       data_file("img", line));

        const char *data = label_data(h);
        snprintf(key, sizeof key, "%s", P("lb-%s/labels/a.txt", h->name));
        const char *label[] = {key, "label file of", NULL};
        expect_refused(label, "detector train %s cfg/shapes.cfg -max_batches 1", data);
        expect_refused(label, "detector calc_anchors %s -num_of_clusters 2 -width 64 -height 64",
                       data);
    }
}

/* ---- the error-feedback state next to the weights ------------------------------------- */

static void test_ef_state(void **state)
{
    (void)state;
    /* Weights with their .ef from one step of two replicas with int8 and
     * error feedback. */
    char *shapes = tu_slurp("cfg/shapes.cfg");
    assert_non_null(shapes);
    size_t n = strlen(shapes) + 128;
    char *cfg = malloc(n);
    assert_non_null(cfg);
    snprintf(cfg, n, "%s\n[scalednn]\ncompress=int8\nerror_feedback=1\n", shapes);
    put_text(P("ef.cfg"), cfg);
    free(cfg);
    free(shapes);
    char data[1024];
    snprintf(data, sizeof data, "%s", data_file("ef", NULL));
    assert_int_equal(tu_run("%s detector train %s %s -max_batches 1 -seed 1 -gpus 0,1 "
                            ">%s/ef-seed.log 2>&1",
                            g_bin, data, P("ef.cfg"), g_dir),
                     0);
    struct stat sb;
    assert_int_equal(stat(P("bk-ef/ef_final.weights.ef"), &sb), 0);
    /* Each run below saves into bk-ef/ again: the seed is kept apart. */
    assert_int_equal(tu_run("cp %s/bk-ef/ef_final.weights %s/ef-seed.weights", g_dir, g_dir), 0);
    for (int i = 0; i < N_BAD; ++i) {
        /* mAP reads the label files of valid= (these weights fit ef.cfg). */
        const hostile *h = &g_bad[i];
        char lbl[600];
        snprintf(lbl, sizeof lbl, "%s", P("lb-%s/labels/a.txt", h->name));
        const char *label[] = {lbl, h->kind, "regular file", NULL};
        const char *ldata = label_data(h); /* before P's ring is used again */
        expect_refused(label, "detector map %s %s/ef.cfg %s/ef-seed.weights", ldata, g_dir,
                       g_dir);
        const char *w = P("ef-%s.weights", h->name);
        assert_int_equal(tu_run("cp %s/ef-seed.weights %s && ln -sf %s %s.ef", g_dir, w,
                                h->path, w),
                         0);
        char *log = NULL;
        int rc = run_deadline(&log, "detector train %s %s %s -max_batches 4 -seed 1 -gpus 0,1",
                              data, P("ef.cfg"), w);
        assert_int_not_equal(rc, -1);
        /* Optional state: the run goes on from zero residuals, and says why. */
        if (rc != 0) print_error("exit %d with %s.ef a link to %s:\n%s\n", rc, w, h->path, log);
        assert_int_equal(rc, 0);
        char ef[600];
        snprintf(ef, sizeof ef, "%s.ef", w);
        has(log, "residuals not restored");
        has(log, ef);
        has(log, h->kind);
        free(log);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_positional_files),
        cmocka_unit_test(test_cfg_named_files),
        cmocka_unit_test(test_data_file_keys),
        cmocka_unit_test(test_list_entries),
        cmocka_unit_test(test_ef_state),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
