/*
 * Tests of the front-end's one argument parser (cli/flags.c) through
 * ./darknet: bad usage (an unknown flag, a flag without its value, a bad
 * number, a wrong count of positionals) exits 2 with a message naming the
 * flag and what is allowed, followed by the command's usage from its flag
 * table; -h prints that usage to stdout and exits 0; `--flag` is read only
 * where the command keeps the older syntax (simulate).  Nothing here needs
 * a data set: every case stops before a file is opened.
 */
#include <darknet.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static char g_dir[] = "/tmp/sdnn-cli-XXXXXX";
static const char *g_bin;

static int setup(void **state)
{
    (void)state;
    g_bin = getenv("SDNN_DARKNET_BIN");
    if (!g_bin) g_bin = "./darknet";
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tu_run("rm -rf %s", g_dir);
    return 0;
}

/* Run ./darknet ARGS; *out = its stdout, *err = its stderr (caller frees). */
static int run(char **out, char **err, const char *args)
{
    int rc = tu_run("%s %s >%s/out 2>%s/err", g_bin, args, g_dir, g_dir);
    char path[128];
    snprintf(path, sizeof path, "%s/out", g_dir);
    *out = tu_slurp(path);
    snprintf(path, sizeof path, "%s/err", g_dir);
    *err = tu_slurp(path);
    assert_non_null(*out);
    assert_non_null(*err);
    return rc;
}

static void has(const char *text, const char *needle)
{
    if (!strstr(text, needle)) print_error("\"%s\"\n  lacks \"%s\"\n", text, needle);
    assert_non_null(strstr(text, needle));
}

typedef struct usage_case {
    const char *args;
    const char *message; /* what stderr must say */
    const char *usage;   /* the usage line that must follow */
} usage_case;

static void test_bad_usage_exits_2(void **state)
{
    (void)state;
    static const usage_case cases[] = {
        {"detector train a.data b.cfg -bogus 1", "unknown flag -bogus",
         "usage: darknet detector train DATA CFG [WEIGHTS]"},
        {"detector train a.data b.cfg -max_batches", "-max_batches needs a value (N)",
         "[-max_batches N]"},
        {"detector train a.data b.cfg -max_batches 0",
         "-max_batches 0: expected an integer >= 1 and <= 2147483647", "[-gpus LIST]"},
        {"detector train a.data b.cfg --max_batches 3", "unknown flag --max_batches",
         "usage: darknet detector train"},
        {"detector train a.data", "expected DATA CFG [WEIGHTS]", "usage: darknet detector train"},
        {"detector train a b c d", "unexpected argument d", "usage: darknet detector train"},
        {"classifier train a.data b.cfg -gpus 1,x", "-gpus 1,x: expected a comma-separated list",
         "usage: darknet classifier train"},
        {"detector train a.data b.cfg -gpus ''", "-gpus needs a value (LIST)",
         "usage: darknet detector train"},
        {"detector train a.data b.cfg -gpus -1", "-gpus -1: -1 is negative: ids are devices 0, 1",
         "usage: darknet detector train"},
        {"detector train a.data b.cfg -gpus 2,-3", "-gpus 2,-3: -3 is negative",
         "usage: darknet detector train"},
        {"detector train a.data b.cfg -gpus gpu0", "-gpus gpu0: expected a comma-separated list",
         "usage: darknet detector train"},
        {"detector train a.data b.cfg -gpus 0,,1", "-gpus 0,,1: expected a comma-separated list",
         "usage: darknet detector train"},
        {"detector train a.data b.cfg -gpus 0,", "-gpus 0,: expected a comma-separated list",
         "usage: darknet detector train"},
        {"detector train a.data b.cfg -gpus ,0", "-gpus ,0: expected a comma-separated list",
         "usage: darknet detector train"},
        {"detector train a.data b.cfg -gpus '0, 1'", "-gpus 0, 1: expected a comma-separated list",
         "usage: darknet detector train"},
        {"detector train a.data b.cfg -gpus 1.5", "-gpus 1.5: expected a comma-separated list",
         "usage: darknet detector train"},
        {"detector train a.data b.cfg -gpus 0,1024", "-gpus 0,1024: id 1024 is past 1023",
         "usage: darknet detector train"},
        {"classifier train a.data b.cfg -gpus 99999999999999999999",
         "id 99999999999999999999 is past 1023", "usage: darknet classifier train"},
        {"scalednn plan a b -gpus 0,0", "-gpus 0,0: id 0 is listed twice",
         "usage: darknet scalednn plan DATA CFG"},
        {"detector test a b c d -thresh 2", "-thresh 2: expected a number >= 0 and <= 1",
         "usage: darknet detector test DATA CFG WEIGHTS IMAGE"},
        {"detector map a b c -iou 0", "-iou 0: expected a number > 0 and <= 1",
         "usage: darknet detector map DATA CFG WEIGHTS"},
        {"classifier valid a b c -x", "unknown flag -x", "usage: darknet classifier valid"},
        {"scalednn gen-shapes out -n x", "-n x: expected an integer >= 1",
         "usage: darknet scalednn gen-shapes OUTDIR"},
        {"scalednn fmnist out -valid", "-valid needs a value", "usage: darknet scalednn fmnist"},
        {"scalednn plan a b -iters 0", "-iters 0: expected an integer >= 1 and <= 1000",
         "usage: darknet scalednn plan DATA CFG"},
        {"scalednn plan a b -link_us 5", "-link_us", "usage: darknet scalednn plan"},
        {"scalednn simulate c.cfg -topology pcie -gpus", "-gpus needs a value",
         "usage: darknet scalednn simulate CFG"},
        {"scalednn simulate c.cfg -topology pcie -codec none", "-codec none: expected a compressing codec",
         "usage: darknet scalednn simulate"},
        {"scalednn simulate c.cfg --bogus 1", "unknown flag --bogus", "usage: darknet scalednn simulate"},
        {"scalednn bench-comm -b 3", "-b 3: expected at least 4 bytes",
         "usage: darknet scalednn bench-comm [-b MINBYTES]"},
        {"scalednn bench-comm -g 0", "-g 0: expected an integer >= 1 and <= 256",
         "usage: darknet scalednn bench-comm"},
        {"scalednn bench-comm extra", "unexpected argument extra", "usage: darknet scalednn bench-comm"},
        {"scalednn gradcheck c.cfg -samples x", "-samples x: expected an integer",
         "usage: darknet scalednn gradcheck CFG"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        char *out, *err;
        int rc = run(&out, &err, cases[i].args);
        if (rc != 2) print_error("%s: exit %d\n%s\n", cases[i].args, rc, err);
        assert_int_equal(rc, 2);
        has(err, cases[i].message);
        has(err, cases[i].usage);
        assert_true(strstr(err, cases[i].message) < strstr(err, "usage: "));
        assert_string_equal(out, "");
        free(out);
        free(err);
    }
}

/* -h: the usage from the table on stdout, every flag with its help line. */
static void test_help_lists_the_table(void **state)
{
    (void)state;
    char *out, *err;
    assert_int_equal(run(&out, &err, "detector train -h"), 0);
    const char *flags[] = {"-gpus LIST", "-clear", "-max_batches N", "-csv FILE", "-seed S",
                           "-threads N", "-skip_bad_labels", "-map", "-map_every N", "-target MAP"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i) {
        char line[64];
        snprintf(line, sizeof line, "\n  %s ", flags[i]);
        has(out, line);
    }
    assert_string_equal(err, "");
    free(out);
    free(err);
    assert_int_equal(run(&out, &err, "scalednn simulate --help"), 0);
    has(out, "usage: darknet scalednn simulate CFG");
    has(out, "\n  -topology pcie|nvlink|eth|ib ");
    free(out);
    free(err);
    /* the codec list of simulate's help is the registry's */
    assert_int_equal(run(&out, &err, "scalednn simulate -h"), 0);
    has(out, "none, fp16, bf16, int8, topk");
    free(out);
    free(err);
}

/* simulate keeps reading `--flag` (older scripts): the alias reaches the
 * same check as the single-dash flag. */
static void test_simulate_double_dash_alias(void **state)
{
    (void)state;
    char *out, *err;
    assert_int_equal(run(&out, &err, "scalednn simulate c.cfg --topology torus"), 2);
    has(err, "-topology torus: unknown topology");
    free(out);
    free(err);
    assert_int_equal(run(&out, &err, "scalednn simulate c.cfg -topology torus"), 2);
    has(err, "-topology torus: unknown topology");
    free(out);
    free(err);
}

/* No command, or an unknown one: the list of commands, exit 2. */
/* A repeated -gpus id is not bad usage to the parser of detector/classifier
 * train: the cfg's virtual= decides (test_badinput), so the run goes on to
 * its files (none here: exit 1 naming the data file). */
static void test_gpus_repeat_left_to_the_cfg(void **state)
{
    (void)state;
    char *out, *err;
    char args[256];
    snprintf(args, sizeof args, "detector train %s/none.data %s/none.cfg -gpus 0,0", g_dir, g_dir);
    int rc = run(&out, &err, args);
    assert_int_equal(rc, 1);
    has(err, "error: data file: ");
    has(err, "none.data");
    assert_null(strstr(err, "listed twice"));
    assert_null(strstr(err, "usage: "));
    free(out);
    free(err);
}

static void test_unknown_command(void **state)
{
    (void)state;
    char *out, *err;
    assert_int_equal(run(&out, &err, "scalednn frobnicate"), 2);
    has(err, "scalednn gen-shapes|fmnist|bench-comm|plan|simulate|gradcheck");
    free(out);
    free(err);
    assert_int_equal(run(&out, &err, "detector"), 2);
    has(err, "darknet detector train|test|map");
    free(out);
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_usage_exits_2),
        cmocka_unit_test(test_help_lists_the_table),
        cmocka_unit_test(test_simulate_double_dash_alias),
        cmocka_unit_test(test_gpus_repeat_left_to_the_cfg),
        cmocka_unit_test(test_unknown_command),
    };
    return cmocka_run_group_tests_name("cli", tests, setup, teardown);
}
