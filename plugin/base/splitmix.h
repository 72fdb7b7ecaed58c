/*
 * splitmix: the project's one splitmix64 (Steele, Lea and Flood's
 * generator): the finaliser, a bijection that spreads every input bit, and
 * the sequential draw that adds the golden-ratio increment first.  Host C
 * and device code (.cu, where it is __host__ __device__) use these, so
 * every seeded stream in the project (stochastic rounding, dropout masks,
 * test inputs, gradcheck's points) comes from one formula.
 */
#ifndef SDNN_SPLITMIX_H
#define SDNN_SPLITMIX_H

#include <stdint.h>

#ifdef __CUDACC__
#define SDNN_SPLITMIX_FN static __host__ __device__ __forceinline__
#else
#define SDNN_SPLITMIX_FN static inline
#endif

#define SDNN_SPLITMIX_GOLDEN 0x9e3779b97f4a7c15ull

#ifdef __cplusplus
extern "C" {
#endif

/* splitmix64's finaliser. */
SDNN_SPLITMIX_FN uint64_t sdnn_splitmix64_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The next output of the generator whose state is *s. */
SDNN_SPLITMIX_FN uint64_t sdnn_splitmix64_next(uint64_t *s)
{
    return sdnn_splitmix64_mix(*s += SDNN_SPLITMIX_GOLDEN);
}

#ifdef __cplusplus
}
#endif

#endif
