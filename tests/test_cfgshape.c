/*
 * Layer shapes libdarknet cannot run, refused by the cfg check before it
 * sees them: a [reorg] whose channels stride^2 does not divide (a division
 * by zero or writes past its output) or, without reverse, whose width or
 * height stride does not divide (writes past its output), and a network of
 * only [cost] layers (libdarknet takes the output from the last layer that
 * is not a cost and reads before its layer array).  Each case through the
 * checker (the message names the file, line, section and key) and through
 * the ./darknet binary (SDNN_DARKNET_BIN: exit 1, not a signal); the shapes
 * that do divide still pass.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cfgcheck.h"
#include "scalednn.h"

#define NET(w, h, c)                                                                       \
    "[net]\nbatch=2\nsubdivisions=1\nwidth=" #w "\nheight=" #h "\nchannels=" #c "\n\n"
#define REORG(stride, reverse) "[reorg]\nstride=" #stride "\nreverse=" #reverse "\n\n"
#define CONV1 "[convolutional]\nfilters=4\nsize=1\nstride=1\nactivation=linear\n\n"
#define COST "[cost]\n"

static const struct {
    const char *text;
    const char *want; /* NULL: passes */
} g_cases[] = {
    {NET(8, 8, 3) REORG(2, 0) CONV1 COST, "x.cfg:9: [reorg] stride=2: its input has 3 channels"},
    {NET(8, 8, 6) REORG(2, 0) CONV1 COST, "stride^2 = 4 does not divide"},
    {NET(8, 8, 8) REORG(2, 1) CONV1 COST, NULL},
    {NET(8, 8, 10) REORG(2, 1) CONV1 COST, "its input has 10 channels"},
    {NET(7, 8, 8) REORG(2, 0) CONV1 COST, "its input is 7x8, which stride 2 does not divide"},
    {NET(8, 9, 8) REORG(2, 0) CONV1 COST, "its input is 8x9"},
    {NET(7, 7, 8) REORG(2, 1) CONV1 COST, NULL},
    {NET(8, 8, 8) REORG(2, 0) CONV1 COST, NULL},
    {NET(12, 12, 9) REORG(3, 0) CONV1 COST, NULL},
    {NET(8, 8, 3) COST, "x.cfg:8: [cost]: every layer is a [cost]"},
    {NET(8, 8, 3) COST "\n" COST, "every layer is a [cost]"},
    {NET(8, 8, 3) CONV1 COST "\n" COST, NULL},
};

static void test_checker(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; ++i) {
        sdnn_status st = sdnn_cfg_check_text("x.cfg", g_cases[i].text);
        const char *err = st == SDNN_OK ? "" : sdnn_last_error();
        printf("case %zu: %s\n", i, st == SDNN_OK ? "passes" : err);
        if (!g_cases[i].want) {
            assert_int_equal(st, SDNN_OK);
        } else {
            assert_int_equal(st, SDNN_ERR_INVALID);
            assert_non_null(strstr(err, g_cases[i].want));
        }
    }
}

/* The binary stops with exit 1 and the message where libdarknet crashed
 * (SIGFPE, a heap abort, SIGSEGV). */
static void test_binary(void **state)
{
    (void)state;
    const char *bin = getenv("SDNN_DARKNET_BIN");
    if (!bin) bin = "./darknet";
    char dir[] = "/tmp/sdnn-cfgshape-XXXXXX";
    assert_non_null(mkdtemp(dir));
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; ++i) {
        if (!g_cases[i].want) continue;
        char path[256], log[256];
        snprintf(path, sizeof path, "%s/x.cfg", dir);
        snprintf(log, sizeof log, "%s/err.log", dir);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(g_cases[i].text, f);
        fclose(f);
        int rc = tu_run("%s scalednn gradcheck %s >/dev/null 2>%s", bin, path, log);
        char *err = tu_slurp(log);
        assert_non_null(err);
        printf("case %zu: rc %d\n", i, rc);
        assert_int_equal(rc, 1);
        assert_non_null(strstr(err, g_cases[i].want + (strncmp(g_cases[i].want, "x.cfg", 5) ? 0 : 6)));
        free(err);
        unlink(path);
        unlink(log);
    }
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checker),
        cmocka_unit_test(test_binary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
