/*
 * cuda_shim: what the .cu files of the engine need of CUDA to compile with the host
 * C++ compiler under make GPU=sim, written for this project and mapped onto
 * the simulated runtime (sim/runtime.c) and the kernel executor (sim/exec.c).
 *
 *  - qualifiers (__global__, __device__, __host__, __forceinline__) are
 *    empty; raw __shared__ is not defined: shared memory is declared with
 *    SDNN_SHARED / SDNN_SHARED_DYN (cuda_util.cuh), checked arrays here;
 *  - threadIdx, blockIdx, blockDim, gridDim are the executor's current
 *    thread; __syncthreads, __syncwarp, warp shuffles and votes (full
 *    32-lane masks only) switch fibers; atomics are plain read-modify-write
 *    (one block runs at a time, fibers switch only at barriers) made atomic
 *    against other streams' kernels;
 *  - __fmul_rn etc. are the plain operators: the .cu files compile with
 *    -ffp-contract=off as nvcc does with --fmad=false (mk/gpu.mk);
 *  - cudaStream_t is (context, stream index); cudaMemcpyAsync, cudaMemsetAsync
 *    (0 only), cudaStreamSynchronize and cudaGetLastError are the simulated
 *    runtime's calls;
 *  - SDNN_LAUNCH translates every pointer argument from a device address to
 *    the host view (checked: a host pointer or freed memory is a launch error
 *    naming kernel and argument); a struct argument must say which of its
 *    members are device pointers (SDNN_EX_STRUCT_POINTERS) or that it holds
 *    none (SDNN_EX_PLAIN_STRUCT), or the launch does not compile.
 */
#ifndef SDNN_CUDA_SIM_SHIM_H
#define SDNN_CUDA_SIM_SHIM_H

#include "dev.h"
#include "sim/exec.h"
#include "sim/sim.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

using std::isfinite;
using std::isinf;
using std::isnan;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef sdnn_ex_dim uint3;

#define threadIdx (sdnn_ex.tid)
#define blockIdx (sdnn_ex.bid)
#define blockDim (sdnn_ex.bdim)
#define gridDim (sdnn_ex.gdim)
#define warpSize 32

/* Thrown where the executor stops a thread; caught by the launch's thunk. */
struct sdnn_ex_fault {};

inline void sdnn_ex_trap(int rc)
{
    if (rc) throw sdnn_ex_fault();
}

inline void __syncthreads() { sdnn_ex_trap(sdnn_ex_barrier(SDNN_EX_BLOCK, "__syncthreads")); }

inline void sdnn_ex_full_mask(unsigned mask, const char *what)
{
    unsigned base = sdnn_ex.flat & ~31u;
    unsigned T = sdnn_ex.bdim.x * sdnn_ex.bdim.y * sdnn_ex.bdim.z;
    unsigned lanes = T - base < 32 ? T - base : 32;
    unsigned full = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1);
    if ((mask & full) != full)
        sdnn_ex_trap(sdnn_ex_fail("%s with mask 0x%08x: the executor runs full warps only "
                                  "(0x%08x)", what, mask, full));
}

inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    sdnn_ex_full_mask(mask, "__syncwarp");
    sdnn_ex.wmem[sdnn_ex.flat / 32] = 1;
    sdnn_ex_trap(sdnn_ex_barrier(SDNN_EX_WARP, "__syncwarp"));
}

/* A warp exchange: every lane posts v, then reads lane src's. */
template <class T> inline T sdnn_ex_exchange(T v, int src, const char *what)
{
    static_assert(sizeof(T) <= sizeof(uint64_t), "warp exchange of a wide type");
    uint64_t w = 0;
    std::memcpy(&w, &v, sizeof v);
    unsigned me = sdnn_ex.flat;
    sdnn_ex.xchg[me] = w;
    sdnn_ex_trap(sdnn_ex_barrier(SDNN_EX_WARP, what));
    T out = v;
    std::memcpy(&out, &sdnn_ex.xchg[(me & ~31u) + (unsigned)src], sizeof out);
    sdnn_ex_trap(sdnn_ex_barrier(SDNN_EX_WARP, what));
    return out;
}

template <class T> inline T __shfl_sync(unsigned mask, T v, int lane, int width = 32)
{
    sdnn_ex_full_mask(mask, "__shfl_sync");
    int me = (int)(sdnn_ex.flat & 31u), base = me / width * width;
    return sdnn_ex_exchange(v, base + (lane % width), "__shfl_sync");
}

template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    sdnn_ex_full_mask(mask, "__shfl_up_sync");
    int me = (int)(sdnn_ex.flat & 31u), in = me % width;
    return sdnn_ex_exchange(v, in >= (int)d ? me - (int)d : me, "__shfl_up_sync");
}

template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
    sdnn_ex_full_mask(mask, "__shfl_down_sync");
    int me = (int)(sdnn_ex.flat & 31u), in = me % width;
    return sdnn_ex_exchange(v, in + (int)d < width ? me + (int)d : me, "__shfl_down_sync");
}

template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int x, int width = 32)
{
    sdnn_ex_full_mask(mask, "__shfl_xor_sync");
    int me = (int)(sdnn_ex.flat & 31u), base = me / width * width;
    return sdnn_ex_exchange(v, base + (((me - base) ^ x) % width), "__shfl_xor_sync");
}

inline unsigned __ballot_sync(unsigned mask, int pred)
{
    sdnn_ex_full_mask(mask, "__ballot_sync");
    unsigned me = sdnn_ex.flat, base = me & ~31u;
    unsigned T = sdnn_ex.bdim.x * sdnn_ex.bdim.y * sdnn_ex.bdim.z;
    sdnn_ex.xchg[me] = pred != 0;
    sdnn_ex_trap(sdnn_ex_barrier(SDNN_EX_WARP, "__ballot_sync"));
    unsigned bits = 0;
    for (unsigned l = 0; l < 32 && base + l < T; ++l)
        if (sdnn_ex.xchg[base + l]) bits |= 1u << l;
    sdnn_ex_trap(sdnn_ex_barrier(SDNN_EX_WARP, "__ballot_sync"));
    return bits & mask;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __ffs(int x) { return __builtin_ffs(x); }

/* Rounding of the single operations: the host's IEEE float, no contraction. */
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, sizeof f); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, sizeof i); return i; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, sizeof i); return i; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, sizeof f); return f; }

/* ---- shared memory ----------------------------------------------------------------- */

/* Whether an access by this thread is ordered after one by thread `other`
 * made at warp-sync count `sync` in this barrier epoch: the same thread,
 * or a lane of the same warp with a __syncwarp released between. */
inline bool sdnn_ex_warp_ordered(unsigned other, unsigned sync)
{
    unsigned me = sdnn_ex.flat;
    return other == me || (other / 32 == me / 32 && sdnn_ex.wsync[me / 32] != sync);
}

inline void sdnn_ex_slot_read(sdnn_ex_slot *m, const char *name, size_t i)
{
    if (m->block != sdnn_ex.block)
        sdnn_ex_trap(sdnn_ex_fail("reads shared %s[%zu] before any thread of the block "
                                  "wrote it", name, i));
    if (m->epoch == sdnn_ex.epoch && !sdnn_ex_warp_ordered(m->writer, m->wsync))
        sdnn_ex_trap(sdnn_ex_fail("reads shared %s[%zu], which thread %u wrote with no "
                                  "__syncthreads between (a race)", name, i, m->writer));
    unsigned warp = sdnn_ex.flat / 32;
    if (m->rblock == sdnn_ex.block && m->repoch == sdnn_ex.epoch) {
        if (m->reader != sdnn_ex.flat) m->reader = ~0u;    /* several readers */
        if (m->rwarp != warp) m->rwarp = ~0u;
        m->rsync = sdnn_ex.wsync[warp];
        return;
    }
    m->rblock = sdnn_ex.block;
    m->reader = sdnn_ex.flat;
    m->repoch = sdnn_ex.epoch;
    m->rwarp = warp;
    m->rsync = sdnn_ex.wsync[warp];
}

inline void sdnn_ex_slot_write(sdnn_ex_slot *m, const char *name, size_t i, int atomic)
{
    unsigned me = sdnn_ex.flat, warp = me / 32;
    if (!atomic && m->block == sdnn_ex.block && m->epoch == sdnn_ex.epoch &&
        !sdnn_ex_warp_ordered(m->writer, m->wsync))
        sdnn_ex_trap(sdnn_ex_fail("writes shared %s[%zu], which thread %u wrote with no "
                                  "__syncthreads between (a race)", name, i, m->writer));
    if (!atomic && m->rblock == sdnn_ex.block && m->repoch == sdnn_ex.epoch &&
        m->reader != me && !(m->rwarp == warp && sdnn_ex.wsync[warp] != m->rsync))
        sdnn_ex_trap(sdnn_ex_fail("writes shared %s[%zu], which %s read with no "
                                  "__syncthreads between (a race)", name, i,
                                  m->reader == ~0u ? "other threads" : "another thread"));
    m->block = sdnn_ex.block;
    m->writer = me;
    m->epoch = sdnn_ex.epoch;
    m->wsync = sdnn_ex.wsync[warp];
}

/* One element of a checked shared array: reads and writes go through the
 * slot's history; & gives an address the atomics accept. */
template <class T> struct sdnn_shared_ref;
template <class T> struct sdnn_shared_addr {
    T *v;
    sdnn_ex_slot *m;
    const char *name;
    size_t i;
};

template <class T> struct sdnn_shared_ref {
    T *v;
    sdnn_ex_slot *m;
    const char *name;
    size_t i;
    operator T() const
    {
        sdnn_ex_slot_read(m, name, i);
        return *v;
    }
    sdnn_shared_ref &operator=(T x)
    {
        sdnn_ex_slot_write(m, name, i, 0);
        *v = x;
        return *this;
    }
    sdnn_shared_ref &operator=(const sdnn_shared_ref &o) { return *this = (T)o; }
    sdnn_shared_ref &operator+=(T x) { return *this = (T)*this + x; }
    sdnn_shared_ref &operator-=(T x) { return *this = (T)*this - x; }
    sdnn_shared_ref &operator*=(T x) { return *this = (T)*this * x; }
    sdnn_shared_ref &operator|=(T x) { return *this = (T)*this | x; }
    sdnn_shared_addr<T> operator&() const { return {v, m, name, i}; }
};

template <class T, size_t N> struct sdnn_shared_array {
    T v[N];
    sdnn_ex_slot m[N];
    const char *name;
    uint64_t seen;      /* the block that last touched it (its bytes counted) */
    explicit sdnn_shared_array(const char *nm) : v(), m(), name(nm), seen(0) {}
    sdnn_shared_ref<T> operator[](size_t i)
    {
        if (seen != sdnn_ex.block) {
            seen = sdnn_ex.block;
            sdnn_ex_trap(sdnn_ex_static_shared(name, sizeof v));
        }
        if (i >= N)
            sdnn_ex_trap(sdnn_ex_fail("index %zu of shared %s[%zu]: out of bounds", i, name, N));
        return {&v[i], &m[i], name, i};
    }
};

template <class T> struct sdnn_shared_dyn {
    const char *name;
    explicit sdnn_shared_dyn(const char *nm) : name(nm) {}
    sdnn_shared_ref<T> operator[](size_t i) const
    {
        size_t n = sdnn_ex.dyn_bytes / sizeof(T);
        if (i >= n)
            sdnn_ex_trap(sdnn_ex_fail("index %zu of dynamic shared %s: out of bounds (the "
                                      "launch gave %zu bytes, %zu elements)",
                                      i, name, sdnn_ex.dyn_bytes, n));
        return {(T *)sdnn_ex.dyn + i, &sdnn_ex.dyn_meta[i * sizeof(T) / 4], name, i};
    }
};

/* ---- atomics ----------------------------------------------------------------------- */

template <class T> inline T sdnn_ex_atomic_rmw(T *p, T v, int op)
{
    T old;
    if constexpr (std::is_integral_v<T>) {
        if (op == 0) return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
        if (op == 3) return __atomic_exchange_n(p, v, __ATOMIC_RELAXED);
    }
    old = __atomic_load_n(p, __ATOMIC_RELAXED);
    for (;;) {
        T nv = op == 0 ? (T)(old + v) : op == 1 ? (v < old ? v : old)
             : op == 2 ? (v > old ? v : old) : v;
        if (__atomic_compare_exchange(p, &old, &nv, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return old;
    }
}

template <class T> inline T atomicAdd(T *p, T v) { return sdnn_ex_atomic_rmw(p, v, 0); }
template <class T> inline T atomicMin(T *p, T v) { return sdnn_ex_atomic_rmw(p, v, 1); }
template <class T> inline T atomicMax(T *p, T v) { return sdnn_ex_atomic_rmw(p, v, 2); }
template <class T> inline T atomicExch(T *p, T v) { return sdnn_ex_atomic_rmw(p, v, 3); }
template <class T> inline T atomicCAS(T *p, T cmp, T v)
{
    __atomic_compare_exchange(p, &cmp, &v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return cmp;
}

/* On shared memory: reads the slot (it must have been written in this
 * block), then writes it as an atomic (other threads' atomics in the same
 * interval are no race). */
template <class T> inline T sdnn_ex_shared_rmw(sdnn_shared_addr<T> a, T v, int op)
{
    if (a.m->block != sdnn_ex.block)
        sdnn_ex_trap(sdnn_ex_fail("atomic on shared %s[%zu] before any thread of the block "
                                  "wrote it", a.name, a.i));
    sdnn_ex_slot_write(a.m, a.name, a.i, 1);
    return sdnn_ex_atomic_rmw(a.v, v, op);
}
template <class T, class U> inline T atomicAdd(sdnn_shared_addr<T> a, U v)
{
    return sdnn_ex_shared_rmw(a, (T)v, 0);
}
template <class T, class U> inline T atomicMin(sdnn_shared_addr<T> a, U v)
{
    return sdnn_ex_shared_rmw(a, (T)v, 1);
}
template <class T, class U> inline T atomicMax(sdnn_shared_addr<T> a, U v)
{
    return sdnn_ex_shared_rmw(a, (T)v, 2);
}

/* ---- the runtime calls the host wrappers make ---------------------------------------- */

struct sdnn_sim_stream_ref {
    sdnn_dctx *c;
    int which;
};
typedef sdnn_sim_stream_ref cudaStream_t;

/* A failure carries the simulated runtime's status: cudaErrorSimulated + it. */
enum cudaError { cudaSuccess = 0, cudaErrorSimulated = 1000 };
typedef enum cudaError cudaError_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost,
    cudaMemcpyHostToDevice,
    cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice,
    cudaMemcpyDefault
};

inline cudaError_t sdnn_ex_status_error(sdnn_status st)
{
    return st == SDNN_OK ? cudaSuccess : (cudaError_t)(cudaErrorSimulated + (int)st);
}

inline cudaError_t sdnn_ex_cuda(sdnn_status st)
{
    if (st != SDNN_OK) sdnn_ex_set_launch_error(st);
    return sdnn_ex_status_error(st);
}

inline cudaError_t cudaGetLastError() { return sdnn_ex_status_error(sdnn_ex_take_launch_error()); }

inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind,
                                   cudaStream_t s)
{
    return sdnn_ex_cuda(sdnn_dcopy(s.c, s.which, dst, src, bytes, 0));
}

/* A pitched copy as one dev.h copy per row, queued in row order on the stream. */
inline cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                     size_t width, size_t height, cudaMemcpyKind,
                                     cudaStream_t s)
{
    if (width > dpitch || width > spitch)
        return sdnn_ex_cuda(SDNN_ERROR(SDNN_ERR_INVALID,
                                       "cudaMemcpy2DAsync: width %zu over a pitch (%zu, %zu)",
                                       width, dpitch, spitch));
    for (size_t r = 0; r < height; ++r) {
        sdnn_status st = sdnn_dcopy(s.c, s.which, (char *)dst + r * dpitch,
                                    (const char *)src + r * spitch, width, 0);
        if (st != SDNN_OK) return sdnn_ex_cuda(st);
    }
    return cudaSuccess;
}

/* Pinned host memory: the simulated runtime's (its copies are then truly
 * asynchronous, as cudaMallocHost's). */
inline cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    return sdnn_ex_cuda(sdnn_hmalloc_pinned(bytes, p));
}

inline cudaError_t cudaFreeHost(void *p)
{
    sdnn_hfree_pinned(p);
    return cudaSuccess;
}

inline cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s)
{
    if (v != 0)
        return sdnn_ex_cuda(SDNN_ERROR(SDNN_ERR_UNSUPPORTED,
                                       "cudaMemsetAsync: value %d (the simulated runtime "
                                       "zeroes only)", v));
    return sdnn_ex_cuda(sdnn_dzero(s.c, s.which, p, bytes));
}

inline cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    return sdnn_ex_cuda(sdnn_sim_stream_sync(s.c, s.which, "cudaStreamSynchronize"));
}

/* ---- launches ---------------------------------------------------------------------- */

/* Argument i of a launch: a pointer is translated, a scalar copied, a struct
 * translated by its declared members (or refused at compile time). */
template <class T> inline int sdnn_ex_fix(sdnn_dctx *c, const char *k, int i, T &v)
{
    if constexpr (std::is_pointer_v<T>) {
        void *h = NULL;
        if (sdnn_ex_dptr(c, (const void *)v, k, i, NULL, &h) != SDNN_OK) return 1;
        v = (T)h;
        return 0;
    } else if constexpr (std::is_class_v<T>) {
        return sdnn_ex_struct_arg(c, k, i, v);
    } else {
        static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>, "a kernel argument type "
                      "the executor cannot copy");
        return 0;
    }
}

/* A struct argument whose member array `arr` (of n entries) holds device
 * pointers (NULL entries stay NULL). */
#define SDNN_EX_STRUCT_POINTERS(type, arr, n)                                       \
    inline int sdnn_ex_struct_arg(sdnn_dctx *c, const char *k, int i, type &v)        \
    {                                                                                 \
        for (int j = 0; j < (n); ++j) {                                               \
            void *h = NULL;                                                           \
            char member[48];                                                          \
            snprintf(member, sizeof member, "(." #arr "[%d])", j);                      \
            if (sdnn_ex_dptr(c, (const void *)v.arr[j], k, i, member, &h) != SDNN_OK)  \
                return 1;                                                             \
            v.arr[j] = (decltype(v.arr[j]))h;                                         \
        }                                                                             \
        return 0;                                                                     \
    }
#define SDNN_EX_PLAIN_STRUCT(type) \
    inline int sdnn_ex_struct_arg(sdnn_dctx *, const char *, int, type &) { return 0; }

template <class... P> struct sdnn_ex_pack {
    void (*k)(P...);
    std::tuple<P...> a;
};

template <class... P> int sdnn_ex_thread(void *p)
{
    sdnn_ex_pack<P...> *pk = (sdnn_ex_pack<P...> *)p;
    try {
        std::apply(pk->k, pk->a);
    } catch (const sdnn_ex_fault &) {
        return 1;
    }
    return 0;
}

template <class... P, class... A>
void sdnn_ex_launch(const char *name, void (*k)(P...), dim3 g, dim3 b, size_t shmem,
                    cudaStream_t s, A &&...a)
{
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with a wrong argument count");
    static_assert((std::is_trivially_copyable_v<P> && ...), "kernel arguments are copied");
    sdnn_ex_pack<P...> pk{k, std::tuple<P...>(static_cast<P>(a)...)};
    int bad = 0, i = 0;
    std::apply([&](auto &...v) { ((bad = bad ? bad : sdnn_ex_fix(s.c, name, i++, v)), ...); },
               pk.a);
    if (bad) {
        sdnn_ex_set_launch_error(SDNN_ERR_INVALID);
        return;
    }
    sdnn_ex_cuda(sdnn_ex_submit(s.c, s.which, name, {g.x, g.y, g.z}, {b.x, b.y, b.z}, shmem,
                                sdnn_ex_thread<P...>, &pk, sizeof pk));
}

#endif
