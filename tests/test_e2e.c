/*
 * End to end through the ./darknet binary (SDNN_DARKNET_BIN): generate a
 * small shapes set, train the shapes detector for a few iterations with
 * -gpus 0,1 in stock and in scalednn mode (loss finite and falling), run
 * `detector test` on the result, and check that bad input stops the
 * program with a clear message and a non-zero exit before anything is
 * written.
 *
 * tier: full (runs in `make test`, not in `make check`: many trainings).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include "trace.h"

#include <darknet.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "replicas.h"
#include "conv_dnnl.h"

static char g_dir[256];
static const char *g_bin;


static int setup(void **state)
{
    (void)state;
    g_bin = getenv("SDNN_DARKNET_BIN");
    if (!g_bin) g_bin = "./darknet";
    snprintf(g_dir, sizeof g_dir, "/tmp/sdnn-e2e-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (tu_run("%s scalednn gen-shapes %s/shapes -n 96 -valid 4 -seed 3 >%s/gen.log 2>&1", g_bin,
            g_dir, g_dir) != 0)
        return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/shapes.data", g_dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "classes=4\ntrain=%s/shapes/train.txt\nvalid=%s/shapes/valid.txt\n"
               "names=%s/shapes/shapes.names\nbackup=%s/backup/\n", g_dir, g_dir, g_dir, g_dir);
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (g_dir[0] && !getenv("SDNN_KEEP")) tu_run("rm -rf %s", g_dir);
    return 0;
}

typedef struct csv_stats {
    int rows;
    int finite;
    double first, last;     /* mean loss of the first and last 4 rows */
    double bytes;
    int iteration;
} csv_stats;

static csv_stats read_csv(const char *path)
{
    csv_stats s = {0};
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[1024];
    double loss[4096];
    assert_non_null(fgets(line, sizeof line, f));
    if (strncmp(line, "# label: ", 9) == 0) assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, SDNN_CSV_HEADER "\n");
    s.finite = 1;
    while (fgets(line, sizeof line, f) && s.rows < 4096) {
        int it;
        size_t images, bytes;
        float l, avg;
        assert_int_equal(sscanf(line, "%d,%zu,%f,%f,%*f,%*f,%*f,%*f,%zu", &it, &images, &l, &avg, &bytes), 5);
        if (!isfinite(l)) s.finite = 0;
        loss[s.rows++] = l;
        s.bytes += (double)bytes;
        s.iteration = it;
    }
    fclose(f);
    for (int i = 0; i < 4 && i < s.rows; ++i) {
        s.first += loss[i] / 4;
        s.last += loss[s.rows - 1 - i] / 4;
    }
    return s;
}

static void train_and_check(const char *cfg, const char *tag, int expect_bytes)
{
    int rc = tu_run("%s detector train %s/shapes.data %s -gpus 0,1 -max_batches 40 -seed 1 "
                 "-csv %s/%s.csv >%s/%s.log 2>&1",
                 g_bin, g_dir, cfg, g_dir, tag, g_dir, tag);
    if (rc != 0) tu_run("tail -20 %s/%s.log", g_dir, tag);
    assert_int_equal(rc, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/%s.csv", g_dir, tag);
    csv_stats s = read_csv(path);
    printf("%s: %d rows, iteration %d, loss %.3f -> %.3f, %.0f bytes exchanged\n", tag, s.rows,
           s.iteration, s.first, s.last, s.bytes);
    assert_true(s.rows >= 8);
    assert_true(s.finite);
    assert_true(s.iteration >= 40);
    assert_true(s.last < 0.8 * s.first);
    if (expect_bytes) assert_true(s.bytes > 0);
    snprintf(path, sizeof path, "%s/%s.log", g_dir, tag);
    char *log = tu_slurp(path);
    assert_non_null(log);
    assert_non_null(strstr(log, "engine cpu, 2 replicas"));
    assert_non_null(strstr(log, "CPU replica, a thread of its own"));
    assert_non_null(strstr(log, "img/s"));
    free(log);
}

/* Mean loss of the last `k` rows. */
static double tail_loss(const char *path, int k)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[1024];
    double loss[8192];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < 8192) {
        float l;
        if (line[0] >= '0' && line[0] <= '9' && sscanf(line, "%*d,%*d,%f", &l) == 1) loss[n++] = l;
    }
    fclose(f);
    assert_true(n >= k);
    double s = 0;
    for (int i = n - k; i < n; ++i) s += loss[i];
    return s / k;
}

/* The shapes detector with each codec for 200 iterations on 2 replicas
 * (fixed seed, one loader thread: the same images in the same order, so
 * runs are repeatable and differ only by the codec) ends with a loss within
 * 10% of the uncompressed run's; top-k with error feedback leaves its
 * residuals next to the weights and a resumed run restores them. */
static void test_train_every_codec(void **state)
{
    (void)state;
    static const char *const codecs[] = {"none", "fp16", "bf16", "int8", "topk"};
    double ref = 0;
    double bytes_none = 0;
    for (size_t c = 0; c < sizeof codecs / sizeof codecs[0]; ++c) {
        char cfg[512], csv[512];
        snprintf(cfg, sizeof cfg, "%s/shapes-%s.cfg", g_dir, codecs[c]);
        snprintf(csv, sizeof csv, "%s/%s.csv", g_dir, codecs[c]);
        assert_int_equal(tu_run("sed 's/^compress=none/compress=%s/' cfg/shapes-scalednn.cfg > %s",
                             codecs[c], cfg), 0);
        /* One loader thread: Darknet's loader threads share rand(), so with
         * several the images' order and augmentation differ run to run. */
        int rc = tu_run("%s detector train %s/shapes.data %s -gpus 0,1 -max_batches 200 -seed 1 "
                     "-threads 1 -csv %s >%s/%s.log 2>&1", g_bin, g_dir, cfg, csv, g_dir, codecs[c]);
        if (rc != 0) tu_run("tail -20 %s/%s.log", g_dir, codecs[c]);
        assert_int_equal(rc, 0);
        csv_stats s = read_csv(csv);
        double loss = tail_loss(csv, 10);
        if (c == 0) {
            ref = loss;
            bytes_none = s.bytes;
        }
        print_message("%-4s: loss of the last 10 steps %.3f (%+.1f%% of none), %.0f bytes "
                      "exchanged (%.3f of none)\n", codecs[c], loss, 100 * (loss / ref - 1),
                      s.bytes, s.bytes / bytes_none);
        assert_true(s.finite);
        assert_true(s.iteration >= 200);
        assert_true(fabs(loss - ref) <= 0.10 * ref);
        if (c > 0) assert_true(s.bytes < 0.55 * bytes_none);
        char *text = tu_slurp(csv);
        char label[64];
        snprintf(label, sizeof label, "# label: scalednn%s%s, 2 replicas\n",
                 c ? " " : "", c ? codecs[c] : "");
        assert_true(strncmp(text, label, strlen(label)) == 0);
        free(text);
    }
    char ef[512];
    snprintf(ef, sizeof ef, "%s/backup/shapes-topk_final.weights.ef", g_dir);
    struct stat sb;
    assert_int_equal(stat(ef, &sb), 0);
    int rc = tu_run("%s detector train %s/shapes.data %s/shapes-topk.cfg "
                 "%s/backup/shapes-topk_final.weights -gpus 0,1 -max_batches 204 -seed 2 "
                 "-csv %s/resume.csv >%s/resume.log 2>&1", g_bin, g_dir, g_dir, g_dir, g_dir, g_dir);
    assert_int_equal(rc, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/resume.log", g_dir);
    char *log = tu_slurp(path);
    assert_non_null(strstr(log, "error-feedback residuals restored from"));
    free(log);
    /* With another replica count the residuals do not fit: a warning, and
     * training goes on. */
    rc = tu_run("%s detector train %s/shapes.data %s/shapes-topk.cfg "
             "%s/backup/shapes-topk_final.weights -gpus 0,1,2 -max_batches 212 -seed 2 "
             "-csv %s/resume3.csv >%s/resume3.log 2>&1", g_bin, g_dir, g_dir, g_dir, g_dir, g_dir);
    assert_int_equal(rc, 0);
    snprintf(path, sizeof path, "%s/resume3.log", g_dir);
    log = tu_slurp(path);
    assert_non_null(strstr(log, "warning: error-feedback residuals not restored"));
    assert_non_null(strstr(log, "saved for 2 replicas"));
    free(log);
}

/* -map evaluates on valid= during training: the log has a line per
 * evaluation and the CSV's map column is filled on those rows only;
 * -target without -map is refused before training (-target itself: see
 * test_classifier_train). */
static void test_map_during_training(void **state)
{
    (void)state;
    int rc = tu_run("%s detector train %s/shapes.data cfg/shapes-scalednn.cfg -gpus 0,1 "
                 "-max_batches 40 -seed 1 -map -map_every 20 -csv %s/map.csv >%s/map.log 2>&1",
                 g_bin, g_dir, g_dir, g_dir);
    if (rc != 0) tu_run("tail -20 %s/map.log", g_dir);
    assert_int_equal(rc, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/map.log", g_dir);
    char *log = tu_slurp(path);
    assert_non_null(strstr(log, "mAP@0.50 at iteration 20: all-point "));
    assert_non_null(strstr(log, "mAP@0.50 at iteration 40: all-point "));
    free(log);
    snprintf(path, sizeof path, "%s/map.csv", g_dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[1024];
    int rows = 0, measured = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] < '0' || line[0] > '9') continue;
        rows++;
        line[strcspn(line, "\n")] = '\0';
        /* map is the 14th column (host_loss_bytes, host_loss_wait_s follow) */
        const char *last = line;
        for (int k = 0; k < 13 && last; ++k) last = strchr(last + (k > 0), ',');
        assert_non_null(last);
        int it = atoi(line);
        if (last[1] != ',' && last[1] != '\0') {
            measured++;
            double m = atof(last + 1);
            assert_true(m >= 0 && m <= 1);
            assert_true(it % 20 == 0);
        } else {
            assert_true(it % 20 != 0);
        }
    }
    fclose(f);
    assert_int_equal(rows, 20);
    assert_int_equal(measured, 2);

    rc = tu_run("%s detector train %s/shapes.data cfg/shapes-scalednn.cfg -gpus 0,1 -target 0.5 "
             ">%s/notarget.log 2>&1", g_bin, g_dir, g_dir);
    assert_int_equal(rc, 2); /* bad usage, as every flag that only matters with -map */
    snprintf(path, sizeof path, "%s/notarget.log", g_dir);
    log = tu_slurp(path);
    assert_non_null(strstr(log, "-target 0.5 needs -map"));
    free(log);
}

/* `scalednn plan` prints the automatic plan and its prediction next to the
 * cfg's; `scalednn simulate` writes a CSV with every variant; a bad
 * topology is refused with exit 2 naming it. */
static void test_plan_and_simulate(void **state)
{
    (void)state;
    int rc = tu_run("%s scalednn plan %s/shapes.data cfg/shapes-scalednn.cfg -gpus 0,1 -link eth1g "
                 "-compress_allow none,fp16,int8 >%s/plan.log 2>&1", g_bin, g_dir, g_dir);
    if (rc != 0) tu_run("tail -20 %s/plan.log", g_dir);
    assert_int_equal(rc, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/plan.log", g_dir);
    char *log = tu_slurp(path);
    assert_non_null(strstr(log, "automatic plan (bucket_mb=auto, compress=auto"));
    assert_non_null(strstr(log, "predicted: "));
    assert_non_null(strstr(log, "cfg plan (bucket_mb=0.25"));
    /* the factors used and time to accuracy beside each step */
    assert_non_null(strstr(log, "iteration factors (iterations to the target against none's, "
                                "the codecs' own, iter_factor= overrides): none 1, fp16 1, "
                                "int8 1;"));
    assert_non_null(strstr(log, "predicted: time to accuracy N x "));
    assert_non_null(strstr(log, "cfg plan (bucket_mb=0.25, compress=none): time to accuracy "
                                "N x 1 x step "));
    free(log);
    rc = tu_run("%s scalednn simulate cfg/shapes-scalednn.cfg -topology pcie -gpus 4 -iters 2 "
             "-csv %s/sim.csv >%s/sim.log 2>&1", g_bin, g_dir, g_dir);
    assert_int_equal(rc, 0);
    snprintf(path, sizeof path, "%s/sim.csv", g_dir);
    char *csv = tu_slurp(path);
    assert_non_null(csv);
    assert_non_null(strstr(csv, "topology,link,variant,"));
    const char *variants[] = {"stock", "no-overlap", "overlap", "planned"};
    for (int v = 0; v < 4; ++v) {
        char want[64];
        snprintf(want, sizeof want, "pcie,pcie3,%s,1,4,4,", variants[v]);
        assert_non_null(strstr(csv, want));
    }
    free(csv);
    rc = tu_run("%s scalednn simulate cfg/shapes-scalednn.cfg -topology torus >%s/sim2.log 2>&1",
             g_bin, g_dir);
    assert_int_equal(rc, 2);
    snprintf(path, sizeof path, "%s/sim2.log", g_dir);
    log = tu_slurp(path);
    assert_non_null(strstr(log, "-topology torus: unknown topology"));
    free(log);
}

static void test_train_stock(void **state)
{
    (void)state;
    train_and_check("cfg/shapes.cfg", "stock", 1);
    char path[512];
    snprintf(path, sizeof path, "%s/stock.log", g_dir);
    char *log = tu_slurp(path);
    assert_non_null(strstr(log, "no section, stock Darknet protocol"));
    assert_non_null(strstr(log, "weights averaged"));
    /* A cfg without a section trains with the defaults: oneDNN's
     * convolutions where the build has them, said in the banner. */
    assert_non_null(strstr(log, sdnn_conv_dnnl_built()
                                    ? "scalednn: cpu_conv=auto: 11 of 11 convolutional layers on oneDNN"
                                    : "scalednn: cpu_conv=auto: libdarknet's convolutions on all 11 "
                                      "convolutional layers because this build has no oneDNN"));
    free(log);
}

static void test_train_scalednn(void **state)
{
    (void)state;
    train_and_check("cfg/shapes-scalednn.cfg", "scalednn", 1);
    char path[512];
    snprintf(path, sizeof path, "%s/backup/shapes-scalednn_final.weights", g_dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    /* libdarknet loads it into the stock cfg and its weights are finite. */
    network *net = parse_network_cfg("cfg/shapes.cfg");
    load_weights(net, path);
    assert_true(*net->seen >= 40u * 8u);
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].type == CONVOLUTIONAL)
            for (int k = 0; k < net->layers[i].nweights; ++k)
                assert_true(isfinite(net->layers[i].weights[k]));
    sdnn_network_free(net);
    snprintf(path, sizeof path, "%s/backup/shapes-scalednn_final.weights", g_dir);
    int rc = tu_run("%s detector test %s/shapes.data cfg/shapes-scalednn.cfg %s "
                 "%s/shapes/images/valid/000001.png -thresh 0.05 -out %s/pred >%s/test.log 2>&1",
                 g_bin, g_dir, path, g_dir, g_dir, g_dir);
    assert_int_equal(rc, 0);
    snprintf(path, sizeof path, "%s/pred.jpg", g_dir);
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 0);

    /* A truncated weights file or a file that is no image: a clear error,
     * not a prediction from random weights or a blank picture. */
    rc = tu_run("head -c 1000 %s/backup/shapes-scalednn_final.weights > %s/trunc.weights && "
             "%s detector test %s/shapes.data cfg/shapes.cfg %s/trunc.weights "
             "%s/shapes/images/valid/000001.png -out %s/pred2 >%s/t2.log 2>&1",
             g_dir, g_dir, g_bin, g_dir, g_dir, g_dir, g_dir, g_dir);
    assert_true(rc != 0);
    snprintf(path, sizeof path, "%s/t2.log", g_dir);
    char *log = tu_slurp(path);
    assert_non_null(strstr(log, "does not fit this cfg"));
    free(log);
    rc = tu_run("%s detector test %s/shapes.data cfg/shapes.cfg %s/backup/shapes-scalednn_final.weights "
             "%s/shapes.data -out %s/pred3 >%s/t3.log 2>&1",
             g_bin, g_dir, g_dir, g_dir, g_dir, g_dir);
    assert_true(rc != 0);
    snprintf(path, sizeof path, "%s/t3.log", g_dir);
    log = tu_slurp(path);
    assert_non_null(strstr(log, "not a PNG, JPEG"));
    free(log);
}

/* A learning rate that blows up: a clear non-finite message, exit 1, and
 * the weights saved before stay as they were.  With Darknet's batch-norm
 * backward (fix_bn_delta=0) a replica's gradient turns non-finite first;
 * with the exact one the loss goes inf first (its own message). */
static void test_nan_stops_training(void **state)
{
    (void)state;
    int rc = tu_run("sed 's/^learning_rate=.*/learning_rate=100000000/; s/^burn_in=.*/burn_in=0/' "
                 "cfg/shapes-scalednn.cfg > %s/nan.cfg && echo fix_bn_delta=0 >> %s/nan.cfg && "
                 "mkdir -p %s/nanbk && "
                 "echo 'previous weights' > %s/nanbk/nan.backup && "
                 "sed 's#backup=.*#backup=%s/nanbk/#' %s/shapes.data > %s/nan.data",
                 g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir);
    assert_int_equal(rc, 0);
    rc = tu_run("%s detector train %s/nan.data %s/nan.cfg -gpus 0,1 -max_batches 200 -seed 1 "
             ">%s/nan.log 2>&1", g_bin, g_dir, g_dir, g_dir);
    assert_int_equal(rc, 1);
    char path[512];
    snprintf(path, sizeof path, "%s/nan.log", g_dir);
    char *log = tu_slurp(path);
    assert_non_null(strstr(log, "non-finite"));
    assert_non_null(strstr(log, "replica"));
    assert_non_null(strstr(log, "nothing was saved"));
    free(log);
    snprintf(path, sizeof path, "%s/nanbk/nan.backup", g_dir);
    char *kept = tu_slurp(path);
    assert_string_equal(kept, "previous weights\n");
    free(kept);
}

/* A step whose gradients are finite but whose update overflows the weights
 * (a learning rate of 3e38) right before the iteration-100 backup: the save
 * is refused, exit 1, and the backup on disk stays as it was. */
static void test_nonfinite_weights_never_saved(void **state)
{
    (void)state;
    int rc = tu_run("sed 's#backup=.*#backup=%s/infbk/#' %s/shapes.data > %s/inf.data && "
                 "%s detector train %s/inf.data cfg/shapes-scalednn.cfg -gpus 0,1 -max_batches 98 "
                 "-seed 4 >%s/inf98.log 2>&1",
                 g_dir, g_dir, g_dir, g_bin, g_dir, g_dir);
    assert_int_equal(rc, 0);
    rc = tu_run("sed 's/^learning_rate=.*/learning_rate=3e38/' cfg/shapes-scalednn.cfg > %s/inf.cfg && "
             "echo 'previous weights' > %s/infbk/inf.backup", g_dir, g_dir);
    assert_int_equal(rc, 0);
    rc = tu_run("%s detector train %s/inf.data %s/inf.cfg %s/infbk/shapes-scalednn_final.weights "
             "-gpus 0,1 -max_batches 110 -seed 4 >%s/inf.log 2>&1",
             g_bin, g_dir, g_dir, g_dir, g_dir);
    char path[512];
    snprintf(path, sizeof path, "%s/inf.log", g_dir);
    char *log = tu_slurp(path);
    if (rc != 1) printf("%s\n", log);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(log, "\n100: "));
    assert_non_null(strstr(log, "not saving"));
    free(log);
    snprintf(path, sizeof path, "%s/infbk/inf.backup", g_dir);
    char *kept = tu_slurp(path);
    assert_string_equal(kept, "previous weights\n");
    free(kept);
}

/* An image without its label file stops training before it starts
 * (Darknet's loader thread would exit() mid-training). */
static void test_missing_label_file(void **state)
{
    (void)state;
    int rc = tu_run("mkdir -p %s/nl/images && cp %s/shapes/images/train/000001.png %s/nl/images/a.png && "
                 "echo %s/nl/images/a.png > %s/nl/train.txt && "
                 "printf 'classes=4\ntrain=%s/nl/train.txt\nbackup=%s/nlb/\n' > %s/nl.data",
                 g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir);
    assert_int_equal(rc, 0);
    rc = tu_run("%s detector train %s/nl.data cfg/shapes.cfg -max_batches 2 >%s/nl.log 2>&1", g_bin,
             g_dir, g_dir);
    assert_true(rc != 0);
    char path[512];
    snprintf(path, sizeof path, "%s/nl.log", g_dir);
    char *log = tu_slurp(path);
    assert_non_null(strstr(log, "nl/labels/a.txt"));
    free(log);
}

/* Runs the binary on a cfg and checks the exit code and message; the
 * backup directory must be untouched. */
static void expect_failure(const char *section, const char *args, const char *want)
{
    char cfg[512], path[512], log[512];
    snprintf(cfg, sizeof cfg, "%s/bad.cfg", g_dir);
    snprintf(log, sizeof log, "%s/bad.log", g_dir);
    char *base = tu_slurp("cfg/shapes.cfg");
    assert_non_null(base);
    FILE *f = fopen(cfg, "w");
    fprintf(f, "%s\n%s", section, base);
    fclose(f);
    free(base);
    snprintf(path, sizeof path, "%s/keep", g_dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/keep/bad.backup", g_dir);
    f = fopen(path, "w");
    fputs("previous weights", f);
    fclose(f);
    int rc = tu_run("sed 's#backup=.*#backup=%s/keep/#' %s/shapes.data > %s/bad.data", g_dir, g_dir,
                 g_dir);
    assert_int_equal(rc, 0);
    rc = tu_run("%s detector train %s/bad.data %s %s -max_batches 4 >%s 2>&1", g_bin, g_dir, cfg, args,
             log);
    char *out = tu_slurp(log);
    if (!strstr(out, want)) printf("output was:\n%s\n(wanted: %s)\n", out, want);
    assert_true(rc != 0);
    assert_non_null(strstr(out, want));
    free(out);
    char *kept = tu_slurp(path);
    assert_string_equal(kept, "previous weights");
    free(kept);
    tu_run("rm -f %s/keep/bad.backup", g_dir);
}

/* `scalednn plan` on a cfg without a [scalednn] section plans with the
 * section's defaults (bucket_mb=auto used to fail with "bucket_mb=0:
 * expected a number > 0"), and compress=auto plans over compress_allow. */
static void test_plan_defaults(void **state)
{
    (void)state;
    int rc = tu_run("%s scalednn plan %s/shapes.data cfg/shapes.cfg -gpus 0,1 -link eth1g "
                    ">%s/plan0.log 2>&1", g_bin, g_dir, g_dir);
    if (rc != 0) tu_run("tail -20 %s/plan0.log", g_dir);
    assert_int_equal(rc, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/plan0.log", g_dir);
    char *log = tu_slurp(path);
    assert_non_null(strstr(log, "has no [scalednn] section"));
    assert_non_null(strstr(log, "automatic plan (bucket_mb=auto"));
    /* a bare section's defaults: compress=auto, top-k allowed */
    assert_non_null(strstr(log, "section's defaults (bucket_mb=auto, compress=auto, "));
    assert_non_null(strstr(log, "cfg plan (bucket_mb=auto, compress=auto): "));
    free(log);
    rc = tu_run("(cat cfg/shapes.cfg; printf '[scalednn]\\ncompress=auto\\n') >%s/auto.cfg && "
                "%s scalednn plan %s/shapes.data %s/auto.cfg -gpus 0,1 -link eth1g "
                ">%s/plan1.log 2>&1", g_dir, g_bin, g_dir, g_dir, g_dir);
    if (rc != 0) tu_run("tail -20 %s/plan1.log", g_dir);
    assert_int_equal(rc, 0);
    snprintf(path, sizeof path, "%s/plan1.log", g_dir);
    log = tu_slurp(path);
    assert_null(strstr(log, "has no [scalednn] section"));
    assert_non_null(strstr(log, "cfg plan (bucket_mb=auto, compress=auto): "));
    free(log);
    /* iter_factor= over the codecs' own, in the factors line and the plans */
    rc = tu_run("(cat cfg/shapes.cfg; printf '[scalednn]\\ncompress=auto\\niter_factor=fp16:40,"
                "int8:40,topk:40\\n') >%s/tta.cfg && %s scalednn plan %s/shapes.data %s/tta.cfg -gpus 0,1 "
                "-link eth1g >%s/plan2.log 2>&1", g_dir, g_bin, g_dir, g_dir, g_dir);
    if (rc != 0) tu_run("tail -20 %s/plan2.log", g_dir);
    assert_int_equal(rc, 0);
    snprintf(path, sizeof path, "%s/plan2.log", g_dir);
    log = tu_slurp(path);
    assert_non_null(strstr(log, "the cfg's iter_factor= over the codecs' own): none 1, fp16 40, "
                                "int8 40, topk 40;"));
    /* no step gain pays 40 times the iterations: every bucket uncompressed */
    assert_non_null(strstr(log, "predicted: time to accuracy N x 1 x step "));
    assert_null(strstr(log, "  fp16  "));
    assert_null(strstr(log, "  int8  "));
    assert_null(strstr(log, "  topk  "));
    free(log);
}

static void test_bad_input_exits(void **state)
{
    (void)state;
    expect_failure("[scalednn]\ncompress=fp12", "-gpus 0,1", "bad.cfg:2: [scalednn] compress=fp12: unknown codec");
#if SDNN_MPI
    /* Accepted by the config; outside mpirun the backend cannot open. */
    expect_failure("[scalednn]\nbackend=mpi", "", "not started by mpirun");
#else
    expect_failure("[scalednn]\nbackend=mpi", "", "backend=mpi: not available in this build");
#endif
    expect_failure("[scalednn]\nbackend=nccl", "", "backend=nccl: not available in this build");
    expect_failure("[scalednn]\ncolour=blue", "", "colour=blue");
    expect_failure("[scalednn]\noverlap=1\noverlap=0", "", "overlap=0");
    expect_failure("[scalednn]\n[scalednn]", "", "second [scalednn] section");
    expect_failure("", "-gpus 0,,1", "-gpus 0,,1");
    expect_failure("", "/nonexistent/x.weights", "/nonexistent/x.weights");
    /* A missing cfg: Darknet itself would exit 0 here. */
    int rc = tu_run("%s detector train %s/shapes.data /nonexistent.cfg >%s/m.log 2>&1", g_bin, g_dir,
                 g_dir);
    assert_true(rc != 0);
}

static void test_classifier_train(void **state)
{
    (void)state;
    struct stat st;
    if (stat("/usr/share/datasets/fashion-mnist", &st) != 0) skip();
    assert_int_equal(tu_run("%s scalednn fmnist %s/fm -n 256 -valid 64 >%s/fm.log 2>&1", g_bin, g_dir,
                         g_dir), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/fm.data", g_dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "classes=10\ntrain=%s/fm/train.txt\nvalid=%s/fm/valid.txt\n"
               "labels=%s/fm/fmnist.names\nbackup=%s/fmbackup/\n", g_dir, g_dir, g_dir, g_dir);
    fclose(f);
    int rc = tu_run("%s classifier train %s/fm.data cfg/fmnist-scalednn.cfg -gpus 0,1 -max_batches 12 "
                 "-seed 2 -csv %s/fm.csv >%s/fmtrain.log 2>&1", g_bin, g_dir, g_dir, g_dir);
    if (rc != 0) tu_run("tail -20 %s/fmtrain.log", g_dir);
    assert_int_equal(rc, 0);
    snprintf(path, sizeof path, "%s/fm.csv", g_dir);
    csv_stats s = read_csv(path);
    printf("classifier: %d rows, iteration %d, loss %.3f -> %.3f\n", s.rows, s.iteration, s.first,
           s.last);
    assert_true(s.finite);
    assert_int_equal(s.iteration, 12);
    assert_true(s.bytes > 0);
    /* An epoch is 256 images; 12 iterations of batch 32 are 384 images. */
    snprintf(path, sizeof path, "%s/fmbackup/fmnist-scalednn_1.weights", g_dir);
    assert_int_equal(stat(path, &st), 0);
    snprintf(path, sizeof path, "%s/fmbackup/fmnist-scalednn.weights", g_dir);
    assert_int_equal(stat(path, &st), 0);

    /* -map on a classifier measures top-1 on valid=; -target stops at the
     * first evaluation at or above it (one loader thread: repeatable). */
    rc = tu_run("%s classifier train %s/fm.data cfg/fmnist-scalednn.cfg -gpus 0,1 -max_batches 48 "
             "-seed 2 -threads 1 -map -map_every 4 -target 0.000001 -csv %s/fmt.csv "
             ">%s/fmt.log 2>&1", g_bin, g_dir, g_dir, g_dir);
    if (rc != 0) tu_run("tail -20 %s/fmt.log", g_dir);
    assert_int_equal(rc, 0);
    snprintf(path, sizeof path, "%s/fmt.log", g_dir);
    char *log = tu_slurp(path);
    assert_non_null(strstr(log, "accuracy at iteration 4: top-1 "));
    const char *hit = strstr(log, "target 0.0000 reached at iteration ");
    assert_non_null(hit);
    int at = atoi(hit + strlen("target 0.0000 reached at iteration "));
    free(log);
    snprintf(path, sizeof path, "%s/fmt.csv", g_dir);
    s = read_csv(path);
    assert_int_equal(s.iteration, at);   /* the run ended at that evaluation */
    assert_true(at < 48 && at % 4 == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_stock),
        cmocka_unit_test(test_train_scalednn),
        cmocka_unit_test(test_train_every_codec),
        cmocka_unit_test(test_map_during_training),
        cmocka_unit_test(test_plan_and_simulate),
        cmocka_unit_test(test_plan_defaults),
        cmocka_unit_test(test_bad_input_exits),
        cmocka_unit_test(test_missing_label_file),
        cmocka_unit_test(test_nan_stops_training),
        cmocka_unit_test(test_nonfinite_weights_never_saved),
        cmocka_unit_test(test_classifier_train),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
