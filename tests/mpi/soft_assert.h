/*
 * SOFT_ASSERT for the MPI test programs (no CMocka under mpirun): an
 * assertion that does not stop the program.  A failed one prints "rank R: FAILED <condition>: <message>" and counts in
 * g_fail; each program exits non-zero when g_fail is not 0, and
 * tests/test_mpi.c also looks for "FAILED" in their output.
 */
#ifndef SDNN_MPI_SOFT_ASSERT_H
#define SDNN_MPI_SOFT_ASSERT_H

#include <stdio.h>

static int g_rank, g_fail, g_checks;

#define SOFT_ASSERT(cond, ...)                                     \
    do {                                                      \
        ++g_checks;                                           \
        if (!(cond)) {                                        \
            ++g_fail;                                         \
            printf("rank %d: FAILED %s: ", g_rank, #cond);    \
            printf(__VA_ARGS__);                              \
            printf("\n");                                     \
        }                                                     \
    } while (0)

#endif
