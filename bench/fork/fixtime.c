/*
 * fixtime.c: an LD_PRELOAD stand-in for time(2) that returns $FIXTIME
 * (seconds), so that a program seeding rand() from the clock (the fork's
 * srand(time(nullptr)) at start-up) draws the same numbers on every run
 * with the same FIXTIME.  Used by compare_cmds.sh on the fork's
 * calc_anchors, whose k-means starts at boxes drawn with rand().
 * Build: cc -shared -fPIC -o fixtime.so fixtime.c
 */
#include <stdlib.h>
#include <time.h>

time_t time(time_t *out)
{
    const char *s = getenv("FIXTIME");
    time_t t = s ? (time_t)strtoll(s, NULL, 10) : 0;
    if (out) *out = t;
    return t;
}
