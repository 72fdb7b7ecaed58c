/*
 * The margin log of the tolerance tests: with SDNN_MARGIN_LOG=FILE
 * in the environment, every tolerance comparison appends one line
 * "NAME WORST THRESHOLD" (the worst error it measured and the bound it
 * asserts), and bench/margins.sh reads the lines back under each OpenBLAS
 * kernel to print the margins (threshold / worst). Without the variable
 * nothing is written. A test never sets OPENBLAS_CORETYPE itself.
 */
#ifndef SDNN_TEST_MARGIN_H
#define SDNN_TEST_MARGIN_H

#include <stdio.h>
#include <stdlib.h>

static inline __attribute__((unused)) void tm_margin(const char *name, double worst,
                                                     double threshold)
{
    const char *path = getenv("SDNN_MARGIN_LOG");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s %.6e %.6e\n", name, worst, threshold);
    fclose(f);
}

/* A gradcheck report (plugin/gradref/gradcheck.h, included first): its
 * layer with the smallest margin in stage 1 (median against its threshold)
 * and in stage 2 (the judged worst error against its threshold). */
#ifdef SDNN_GRADCHECK_H
static inline __attribute__((unused)) void tm_margin_gradcheck(const char *name,
                                                               const sdnn_gradcheck_report *r)
{
    double w1 = 0, t1 = 1, w2 = 0, t2 = 1, w3 = 0, t3 = 1;
    for (int k = 0; k < r->nlayers; ++k) {
        const double a = r->layer[k].ref_median_rel, ta = r->layer[k].ref_threshold;
        const double b = r->layer[k].max_rel, tb = r->layer[k].threshold;
        const double c = r->layer[k].dir_rel, tc = r->layer[k].dir_threshold;
        if (a * t1 > w1 * ta) w1 = a, t1 = ta;
        if (b * t2 > w2 * tb) w2 = b, t2 = tb;
        if (tc > 0 && c * t3 > w3 * tc) w3 = c, t3 = tc;
    }
    char n1[200], n2[200], n3[200];
    snprintf(n1, sizeof n1, "%s/stage1", name);
    snprintf(n2, sizeof n2, "%s/stage2", name);
    snprintf(n3, sizeof n3, "%s/dirs", name);
    tm_margin(n1, w1, t1);
    tm_margin(n2, w2, t2);
    tm_margin(n3, w3, t3);
}
#endif

#endif
