/*
 * convpick: the rule by which conv.cu takes an entry of cuDNN's ranking of
 * convolution algorithms (plugin/cuda/convpick.h).  Host only: runs on any
 * machine.  (Which algorithms cuDNN ranks, and what they compute, only a
 * GPU shows.)
 *
 *   math types      without tf32: FMA and DEFAULT only; with tf32 also
 *                   TENSOR_OP (TF32), never TENSOR_OP_ALLOW_CONVERSION
 *                   (fp16 down-conversion) nor an unknown value
 *   the ranking     the first allowed entry wins; a faster entry with
 *                   down-conversion is passed over with tf32=1
 *   fallbacks       with determinism asked, the workspace limit is given up
 *                   before determinism (the same bits across replicas
 *                   outrank memory), and each pick says what it gave up;
 *                   failed entries and a ranking of refused math types
 *                   give -1
 *   descriptor      without tf32 the descriptor is set to FMA; with tf32 to
 *                   the math reported for the entry taken
 */
#include "convpick.h"
#include "gpu_test.h"

enum { FMA = SDNN_CONV_MATH_FMA, DEF = SDNN_CONV_MATH_DEFAULT, TOP = SDNN_CONV_MATH_TENSOR_OP,
       CONV = SDNN_CONV_MATH_CONVERT };

static sdnn_conv_algo A(int ok, size_t memory, int math, int det)
{
    sdnn_conv_algo a = {ok, memory, math, det};
    return a;
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    argv0_ = "convpick";
    static const struct { int math, tf32, allowed; } table[] = {
        {FMA, 0, 1}, {DEF, 0, 1}, {TOP, 0, 0}, {CONV, 0, 0}, {7, 0, 0}, {-1, 0, 0},
        {FMA, 1, 1}, {DEF, 1, 1}, {TOP, 1, 1}, {CONV, 1, 0}, {7, 1, 0}, {-1, 1, 0},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i)
        SOFT_ASSERT(sdnn_conv_math_allowed(table[i].math, table[i].tf32) == table[i].allowed,
                    "math %d with tf32=%d: %s", table[i].math, table[i].tf32,
                    table[i].allowed ? "allowed" : "refused");

    const size_t L = 1000;
    /* Fastest first: down-conversion, TF32, plain fp32. */
    sdnn_conv_algo r1[] = {A(1, 10, CONV, 1), A(1, 10, TOP, 1), A(1, 10, FMA, 1)};
    SOFT_ASSERT(sdnn_conv_pick(r1, 3, L, 1, 1) == 1,
                "tf32=1 passes over the fp16 down-conversion and takes TF32 (%d)",
                sdnn_conv_pick(r1, 3, L, 1, 1));
    SOFT_ASSERT(sdnn_conv_pick(r1, 3, L, 0, 1) == 2, "tf32=0 takes plain fp32 (%d)",
                sdnn_conv_pick(r1, 3, L, 0, 1));
    sdnn_conv_algo r2[] = {A(1, 10, CONV, 1), A(1, 10, CONV, 0)};
    SOFT_ASSERT(sdnn_conv_pick(r2, 2, L, 1, 1) == -1 && sdnn_conv_pick(r2, 2, L, 1, 0) == -1,
                "a ranking of down-conversions only: nothing, even with tf32=1 and no "
                "determinism asked");
    sdnn_conv_algo r3[] = {A(1, 10, DEF, 1)};
    SOFT_ASSERT(sdnn_conv_pick(r3, 1, L, 0, 1) == 0 && sdnn_conv_pick(r3, 1, L, 1, 1) == 0,
                "DEFAULT math is taken with and without tf32");
    SOFT_ASSERT(sdnn_conv_math_set(DEF, 0) == FMA && sdnn_conv_math_set(TOP, 1) == TOP &&
                    sdnn_conv_math_set(DEF, 1) == DEF && sdnn_conv_math_set(FMA, 1) == FMA,
                "descriptor math: FMA without tf32, the reported one with it");

    /* Determinism, then the limit, given up only when nothing else is left. */
    sdnn_conv_algo r4[] = {A(1, 10, FMA, 0), A(1, 10, FMA, 1)};
    SOFT_ASSERT(sdnn_conv_pick(r4, 2, L, 0, 1) == 1, "deterministic asked: the deterministic one");
    SOFT_ASSERT(sdnn_conv_pick(r4, 2, L, 0, 0) == 0, "not asked: the first");
    sdnn_conv_algo r5[] = {A(1, 10, FMA, 0), A(1, 2 * L, FMA, 1)};
    int gave = -1;
    SOFT_ASSERT(sdnn_conv_pick_why(r5, 2, L, 0, 1, &gave) == 1 && gave == SDNN_CONV_OVER_LIMIT,
                "determinism outranks the limit: the deterministic one over it, said (%d, gave %d)",
                sdnn_conv_pick(r5, 2, L, 0, 1), gave);
    SOFT_ASSERT(sdnn_conv_pick_why(r5, 2, L, 0, 0, &gave) == 0 && gave == 0,
                "not asked: the first within the limit, nothing given up (gave %d)", gave);
    sdnn_conv_algo r5b[] = {A(1, 2 * L, FMA, 0), A(1, 10, FMA, 0), A(0, 10, FMA, 1)};
    SOFT_ASSERT(sdnn_conv_pick_why(r5b, 3, L, 0, 1, &gave) == 1 &&
                    gave == SDNN_CONV_NONDETERMINISTIC,
                "no deterministic entry succeeded: the first within the limit, said (gave %d)",
                gave);
    sdnn_conv_algo r5c[] = {A(1, 2 * L, FMA, 0)};
    SOFT_ASSERT(sdnn_conv_pick_why(r5c, 1, L, 0, 1, &gave) == 0 &&
                    gave == (SDNN_CONV_NONDETERMINISTIC | SDNN_CONV_OVER_LIMIT),
                "only a non-deterministic entry over the limit: taken, both said (gave %d)", gave);
    SOFT_ASSERT(sdnn_conv_pick_why(r5c, 1, L, 0, 0, &gave) == 0 && gave == SDNN_CONV_OVER_LIMIT,
                "not asked for determinism: only the limit is said (gave %d)", gave);
    SOFT_ASSERT(sdnn_conv_pick_why(r4, 2, L, 0, 1, &gave) == 1 && gave == 0,
                "a deterministic entry within the limit gives up nothing (gave %d)", gave);
    sdnn_conv_algo r6[] = {A(1, 2 * L, FMA, 1), A(1, 3 * L, FMA, 1)};
    SOFT_ASSERT(sdnn_conv_pick(r6, 2, L, 0, 1) == 0, "none within the limit: the first anyway");
    sdnn_conv_algo r7[] = {A(0, 10, FMA, 1), A(1, 2 * L, CONV, 1), A(1, 10, TOP, 0),
                           A(1, 10, FMA, 0)};
    SOFT_ASSERT(sdnn_conv_pick(r7, 4, L, 0, 1) == 3,
                "tf32=0: the failed entry, the conversion and TF32 passed over (%d)",
                sdnn_conv_pick(r7, 4, L, 0, 1));
    SOFT_ASSERT(sdnn_conv_pick(r7, 4, L, 1, 1) == 2, "tf32=1: TF32 within the limit (%d)",
                sdnn_conv_pick(r7, 4, L, 1, 1));
    SOFT_ASSERT(sdnn_conv_pick(r7, 0, L, 1, 1) == -1, "an empty ranking: nothing");
    return gt_summary("convpick");
}
