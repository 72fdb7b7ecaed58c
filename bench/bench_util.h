/*
 * Helpers the benchmark programs share: sizes with K/M/G suffixes and the
 * median of a sample (the clock is plugin/clock.h's sdnn_now_s).
 */
#ifndef SDNN_BENCH_UTIL_H
#define SDNN_BENCH_UTIL_H

#include "clock.h"

#include <stdlib.h>

/* "64K", "256M", "1G" or a plain number of bytes. */
static inline size_t bench_parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (size_t)v;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (v is sorted in place). */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
