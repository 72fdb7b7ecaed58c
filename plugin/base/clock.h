/*
 * clock: monotonic seconds for the per-step counters (loader wait, step
 * time, exchange waits).  Darknet's what_time_is_it_now() follows the wall
 * clock, which can jump.
 */
#ifndef SDNN_CLOCK_H
#define SDNN_CLOCK_H

#include <time.h>

static inline double sdnn_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
