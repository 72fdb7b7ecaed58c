/*
 * Compressed exchange in training: with every codec the replicas stay bit
 * for bit in lockstep; lossy codecs land close to the uncompressed run;
 * error-feedback residuals are saved next to the weights and restored (and
 * refused, with the reason, when they do not fit); small buckets stay
 * uncompressed; the top-k warm-up schedule; invalid combinations.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "config.h"
#include "exchange.h"
#include "replicas.h"
#include "trainer.h"
#include "testutil.h"

#include <sys/stat.h>

static const char *CFG =
    "[net]\nbatch=4\nsubdivisions=1\nwidth=8\nheight=8\nchannels=3\n"
    "momentum=%s\ndecay=0.0005\nlearning_rate=0.02\npolicy=constant\nmax_batches=100\n"
    "[convolutional]\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nbatch_normalize=1\nfilters=6\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[connected]\noutput=16\nactivation=leaky\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[softmax]\n";

#define INPUTS (8 * 8 * 3)

static network **replicas(int n, const char *momentum)
{
    char text[2048];
    snprintf(text, sizeof text, CFG, momentum);
    network **nets = calloc((size_t)n, sizeof *nets);
    assert_non_null(nets);
    srand(1234);   /* Darknet draws initial weights from rand(): same start every time */
    for (int r = 0; r < n; ++r) {
        nets[r] = tu_parse(text);
        assert_non_null(nets[r]);
    }
    assert_int_equal(sdnn_replicas_broadcast(nets, n), SDNN_OK);
    return nets;
}

static sdnn_config section(const char *keys)
{
    char text[1024];
    snprintf(text, sizeof text, "[scalednn]\n%s%s", strstr(keys, "bucket_mb") ? "" : "bucket_mb=0.002\n",
             keys);
    sdnn_config cfg;
    if (sdnn_config_parse_text("test.cfg", text, &cfg, NULL) != SDNN_OK)
        fail_msg("%s", sdnn_last_error());
    return cfg;
}

static sdnn_trainer *trainer(int n, const char *keys, const char *momentum)
{
    network **nets = replicas(n, momentum);
    sdnn_config cfg = section(keys);
    sdnn_trainer *t = NULL;
    if (sdnn_trainer_create(nets, n, &cfg, 1, &t) != SDNN_OK) fail_msg("%s", sdnn_last_error());
    return t;
}

static void steps(sdnn_trainer *t, int count, uint64_t seed)
{
    int n = sdnn_trainer_replicas(t);
    for (int s = 0; s < count; ++s) {
        data d = tu_batch(&seed, 4 * n, INPUTS, 5);
        sdnn_step_stats st;
        if (sdnn_trainer_step(t, d, &st) != SDNN_OK) fail_msg("%s", sdnn_last_error());
        assert_true(st.bytes > 0);
        free_data(d);
    }
}


static void test_lockstep_every_codec(void **state)
{
    (void)state;
    const char *keys[] = {"compress=fp16\n", "compress=bf16\n", "compress=int8\nint8_chunk=32\n",
                          "compress=int8\nstochastic_rounding=1\n",
                          "compress=topk\ntopk_ratio=0.05\n", "compress=fp16\nerror_feedback=1\n"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; ++k)
        for (int n = 2; n <= 3; ++n) {
            sdnn_trainer *t = trainer(n, keys[k], "0.9");
            steps(t, 4, 11);
            for (int r = 1; r < n; ++r)
                if (!tu_params_equal(sdnn_trainer_net(t, 0), sdnn_trainer_net(t, r)))
                    fail_msg("%s%d replicas: replica %d left lockstep", keys[k], n, r);
            sdnn_trainer_destroy(t);
        }
}

/* Lossy codecs follow the uncompressed run; the bytes moved shrink by the
 * codec's ratio. */
static void test_close_to_uncompressed(void **state)
{
    (void)state;
    static const struct { const char *keys; double max_rel; double max_bytes; } c[] = {
        {"compress=fp16\n", 2e-3, 0.51}, {"compress=bf16\n", 1e-2, 0.51},
        {"compress=int8\n", 2e-2, 0.27},
    };
    sdnn_trainer *ref = trainer(2, "", "0.9");
    steps(ref, 6, 3);
    uint64_t seed = 3;
    data d = tu_batch(&seed, 8, INPUTS, 5);
    sdnn_step_stats rs;
    assert_int_equal(sdnn_trainer_step(ref, d, &rs), SDNN_OK);
    for (size_t k = 0; k < sizeof c / sizeof c[0]; ++k) {
        sdnn_trainer *t = trainer(2, c[k].keys, "0.9");
        steps(t, 6, 3);
        sdnn_step_stats st;
        assert_int_equal(sdnn_trainer_step(t, d, &st), SDNN_OK);
        double rel = tu_rel_diff(sdnn_trainer_net(t, 0), sdnn_trainer_net(ref, 0));
        double ratio = (double)st.bytes / (double)rs.bytes;
        print_message("%.*s: weights differ by %.2e (relative), %zu of %zu bytes (%.3f)\n",
                      (int)strcspn(c[k].keys, "\n"), c[k].keys, rel, st.bytes, rs.bytes, ratio);
        assert_true(rel > 0);
        assert_true(rel < c[k].max_rel);
        assert_true(ratio < c[k].max_bytes);
        sdnn_trainer_destroy(t);
    }
    free_data(d);
    sdnn_trainer_destroy(ref);
}

static int max_abs_nonzero(const float *x, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        if (x[i] != 0) return 1;
    return 0;
}

static void tmpdir(char *dir)
{
    strcpy(dir, "/tmp/sdnn-compress-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void test_residuals_saved_and_restored(void **state)
{
    (void)state;
    const char *keys = "compress=topk\ntopk_ratio=0.02\ntopk_momentum=0.9\n";
    sdnn_trainer *t = trainer(2, keys, "0");
    assert_true(sdnn_trainer_has_ef(t));
    steps(t, 3, 5);
    sdnn_exchange *ex = (sdnn_exchange *)sdnn_trainer_exchange(t);
    int nb = sdnn_exchange_nbuckets(ex), any = 0;
    for (int b = 0; b < nb; ++b) {
        float *vel, *res = sdnn_exchange_ef_residual(ex, 1, b, &vel);
        if (!res) continue;
        assert_non_null(vel);
        any |= max_abs_nonzero(res, sdnn_exchange_bucket(ex, b, NULL, NULL));
    }
    assert_true(any);

    char dir[64], path[128], ef[160];
    tmpdir(dir);
    snprintf(path, sizeof path, "%s/run.weights", dir);
    snprintf(ef, sizeof ef, "%s.ef", path);
    assert_int_equal(sdnn_trainer_save(t, path), SDNN_OK);
    struct stat sb;
    assert_int_equal(stat(ef, &sb), 0);

    /* A second trainer from those weights gets the same state back. */
    sdnn_trainer *u = trainer(2, keys, "0");
    for (int r = 0; r < 2; ++r) load_weights(sdnn_trainer_net(u, r), path);
    assert_int_equal(sdnn_trainer_load_ef(u, path), SDNN_OK);
    sdnn_exchange *ux = (sdnn_exchange *)sdnn_trainer_exchange(u);
    for (int r = 0; r < 2; ++r)
        for (int b = 0; b < nb; ++b) {
            float *v1, *v2;
            float *a = sdnn_exchange_ef_residual(ex, r, b, &v1);
            float *c = sdnn_exchange_ef_residual(ux, r, b, &v2);
            if (!a) {
                assert_null(c);
                continue;
            }
            size_t n = sdnn_exchange_bucket(ex, b, NULL, NULL);
            assert_memory_equal(a, c, n * sizeof(float));
            assert_memory_equal(v1, v2, n * sizeof(float));
        }
    /* Both continue identically. */
    steps(t, 2, 9);
    steps(u, 2, 9);
    assert_true(tu_bitwise_equal(sdnn_trainer_net(t, 0), sdnn_trainer_net(u, 0)));
    sdnn_trainer_destroy(u);

    /* Refused, with the reason: other replica count, other seen, damage,
     * no file. */
    sdnn_trainer *three = trainer(3, keys, "0");
    sdnn_clear_error();
    assert_int_equal(sdnn_trainer_load_ef(three, path), SDNN_ERR_INVALID);
    assert_non_null(strstr(sdnn_last_error(), "saved for 2 replicas"));
    sdnn_trainer_destroy(three);

    sdnn_trainer *v = trainer(2, keys, "0");
    assert_int_equal(sdnn_trainer_load_ef(v, path), SDNN_ERR_INVALID);   /* seen 0 != saved */
    assert_non_null(strstr(sdnn_last_error(), "images seen"));
    for (int r = 0; r < 2; ++r) load_weights(sdnn_trainer_net(v, r), path);
    FILE *f = fopen(ef, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)sb.st_size / 2, SEEK_SET), 0);
    int ch = fgetc(f);
    assert_int_equal(fseek(f, (long)sb.st_size / 2, SEEK_SET), 0);
    fputc(ch ^ 0x40, f);
    fclose(f);
    assert_int_equal(sdnn_trainer_load_ef(v, path), SDNN_ERR_INVALID);
    assert_non_null(strstr(sdnn_last_error(), "checksum"));
    unlink(ef);
    assert_int_equal(sdnn_trainer_load_ef(v, path), SDNN_ERR_IO);
    sdnn_trainer_destroy(v);
    sdnn_trainer_destroy(t);
    unlink(path);
    rmdir(dir);
}

/* Without error feedback nothing is kept and no .ef file is written. */
static void test_no_ef_no_file(void **state)
{
    (void)state;
    sdnn_trainer *t = trainer(2, "compress=int8\n", "0.9");
    assert_false(sdnn_trainer_has_ef(t));
    steps(t, 1, 1);
    char dir[64], path[128], ef[160];
    tmpdir(dir);
    snprintf(path, sizeof path, "%s/a.weights", dir);
    snprintf(ef, sizeof ef, "%s.ef", path);
    assert_int_equal(sdnn_trainer_save(t, path), SDNN_OK);
    struct stat sb;
    assert_int_equal(stat(ef, &sb), -1);
    sdnn_trainer_destroy(t);
    unlink(path);
    rmdir(dir);
}

static void test_small_buckets_uncompressed(void **state)
{
    (void)state;
    /* One layer per bucket: 0.9, 1.7, 6.1 and 0.3 KiB. */
    sdnn_trainer *t = trainer(2, "bucket_mb=0.00001\ncompress=fp16\ncompress_min_kb=1\n", "0.9");
    const sdnn_exchange *ex = sdnn_trainer_exchange(t);
    int plain = 0, coded = 0;
    for (int b = 0; b < sdnn_exchange_nbuckets(ex); ++b) {
        size_t n = sdnn_exchange_bucket(ex, b, NULL, NULL);
        const sdnn_codec_ops *c = sdnn_exchange_bucket_codec(ex, b);
        if (n * sizeof(float) < 1024) {
            assert_ptr_equal(c, &sdnn_codec_none);
            plain++;
        } else {
            assert_ptr_equal(c, &sdnn_codec_fp16);
            coded++;
        }
    }
    assert_true(plain > 0 && coded > 0);
    steps(t, 2, 4);
    assert_true(tu_params_equal(sdnn_trainer_net(t, 0), sdnn_trainer_net(t, 1)));
    sdnn_trainer_destroy(t);
}

static void test_topk_warmup(void **state)
{
    (void)state;
    sdnn_trainer *t = trainer(2, "compress=topk\ntopk_ratio=0.01\ntopk_warmup=100\n", "0.9");
    const sdnn_exchange *ex = sdnn_trainer_exchange(t);
    assert_true(sdnn_exchange_topk_ratio(ex, 0) == 1.0);
    assert_true(fabs(sdnn_exchange_topk_ratio(ex, 50) - 0.1) < 1e-12);
    assert_true(sdnn_exchange_topk_ratio(ex, 100) == 0.01);
    assert_true(sdnn_exchange_topk_ratio(ex, 5000) == 0.01);
    double prev = 2;
    for (int i = 0; i <= 100; ++i) {
        double r = sdnn_exchange_topk_ratio(ex, i);
        assert_true(r < prev);
        prev = r;
    }
    /* During warm-up more crosses than after it. */
    uint64_t seed = 1;
    data d = tu_batch(&seed, 8, INPUTS, 5);
    sdnn_step_stats early, late;
    assert_int_equal(sdnn_trainer_step(t, d, &early), SDNN_OK);
    for (int r = 0; r < 2; ++r) *sdnn_trainer_net(t, r)->seen = 400 * 4;
    assert_int_equal(sdnn_trainer_step(t, d, &late), SDNN_OK);
    assert_true(early.bytes > 20 * late.bytes);
    free_data(d);
    sdnn_trainer_destroy(t);
}

static void test_momentum_correction_needs_zero_momentum(void **state)
{
    (void)state;
    network **nets = replicas(2, "0.9");
    sdnn_config cfg = section("compress=topk\ntopk_momentum=0.9\n");
    sdnn_trainer *t = NULL;
    sdnn_clear_error();
    assert_int_equal(sdnn_trainer_create(nets, 2, &cfg, 1, &t), SDNN_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(sdnn_last_error(), "set [net] momentum=0"));
    sdnn_replicas_free(nets, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lockstep_every_codec),
        cmocka_unit_test(test_close_to_uncompressed),
        cmocka_unit_test(test_residuals_saved_and_restored),
        cmocka_unit_test(test_no_ef_no_file),
        cmocka_unit_test(test_small_buckets_uncompressed),
        cmocka_unit_test(test_topk_warmup),
        cmocka_unit_test(test_momentum_correction_needs_zero_momentum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
