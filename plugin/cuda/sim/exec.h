/*
 * sim/exec: the kernel executor of the simulated device (make GPU=sim).
 *
 * The real kernels of the .cu files, compiled by the host C++ compiler
 * through sim/cuda_shim.h, run here with CUDA's rules.  A launch
 * (SDNN_LAUNCH in cuda_util.cuh) is checked as the CUDA runtime checks it
 * and queued on its stream with sdnn_sim_launch; on the stream's worker the
 * blocks run one after another in an order drawn from SDNN_SIM_JITTER
 * (forward, reversed or shuffled), and the threads of a block run
 * cooperatively on one OS thread:
 *  - thread 0 of every block starts on a fiber; when it returns without
 *    reaching a barrier the block has none, and its other threads run as a
 *    plain loop (a barrier or warp operation reached there is an error: a
 *    barrier thread 0 never reached);
 *  - otherwise every thread gets a fiber (a 64 KiB stack, the stacks
 *    allocated once per worker thread and reused) and fibers switch at each
 *    barrier, by a register switch of exec.c's own on x86-64 (no system
 *    call; ucontext elsewhere); a barrier that some threads reach while others have
 *    returned is an error naming the kernel, the block and both threads.
 * Shared memory is declared with SDNN_SHARED / SDNN_SHARED_DYN: each slot
 * records which thread wrote it last, in which block and between which
 * barriers, so a read of a slot another thread wrote with no barrier
 * between, a read before any write, and an index past the array are
 * errors naming kernel, block, thread and slot.
 *
 * This header is the C side that sim/cuda_shim.h (C++) calls into.
 */
#ifndef SDNN_CUDA_SIM_EXEC_H
#define SDNN_CUDA_SIM_EXEC_H

#include "dev.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sdnn_ex_dim {
    unsigned x, y, z;
} sdnn_ex_dim;

/* One shared-memory slot's history: the block (a serial unique per block
 * run on this OS thread; 0 = never written), the writing thread (flat
 * index) and the barrier epoch of the write; the same for the last read. */
typedef struct sdnn_ex_slot {
    uint64_t block;
    unsigned writer;
    unsigned epoch;
    uint64_t rblock;
    unsigned reader;
    unsigned repoch;
    unsigned wsync;     /* the writer's warp's __syncwarp count at the write */
    unsigned rsync;     /* the readers' warp's count at the last read */
    unsigned rwarp;     /* the warp of every reader since the epoch (~0u: several) */
} sdnn_ex_slot;

/* The thread the executor runs now on this OS thread (read by the shim's
 * threadIdx, blockIdx, blockDim, gridDim). */
typedef struct sdnn_ex_state {
    sdnn_ex_dim tid, bid, bdim, gdim;
    unsigned flat;              /* threadIdx as one index */
    const char *kernel;         /* NULL: no kernel runs on this thread */
    uint64_t block;             /* this block's serial */
    unsigned epoch;             /* block barriers passed in this block */
    int fibers;                 /* 1: the block runs on fibers */
    unsigned char *dyn;         /* dynamic shared memory of the block */
    size_t dyn_bytes;
    sdnn_ex_slot *dyn_meta;     /* one per 4 bytes of it */
    size_t static_shared;       /* bytes of static shared arrays the block touched */
    uint64_t *xchg;             /* one word per thread: warp shuffles and votes */
    /* Per warp of the block: __syncwarp releases passed (a write another
     * lane of the warp made before the last of them is ordered before a
     * read after it), and whether the wait now open is a __syncwarp. */
    unsigned wsync[32];
    unsigned char wmem[32];
} sdnn_ex_state;

#ifdef __cplusplus
extern __thread sdnn_ex_state sdnn_ex;
#else
extern _Thread_local sdnn_ex_state sdnn_ex;
#endif

/* Runs the current thread (sdnn_ex) of the kernel on `args`: 0 when it
 * returned, non-zero when the executor stopped it (the message is set). */
typedef int (*sdnn_ex_thread_fn)(void *args);

/* Check a launch as the CUDA runtime does (block of 1..1024 threads with
 * x, y <= 1024 and z <= 64; grid x in 1..2^31-1, y and z in 1..65535;
 * dynamic shared memory at most 48 KiB) and queue it on `stream` of c.
 * The argument block (device pointers already translated) is copied.
 * Returns the launch error, as cudaGetLastError would after <<<>>>. */
sdnn_status sdnn_ex_submit(sdnn_dctx *c, int stream, const char *kernel, sdnn_ex_dim grid,
                           sdnn_ex_dim block, size_t shmem, sdnn_ex_thread_fn run,
                           const void *args, size_t argsize);

/* Argument `index` of `kernel`: the host view of device pointer p (NULL
 * stays NULL); a host pointer, freed memory or another device's memory is
 * an error naming the kernel and the argument. */
sdnn_status sdnn_ex_dptr(sdnn_dctx *c, const void *p, const char *kernel, int index,
                         const char *member, void **host);

/* Barriers and warp operations reached by the current thread.  0: go on;
 * non-zero: the executor stops the thread (the message is set). */
enum { SDNN_EX_BLOCK = 0, SDNN_EX_WARP = 1 };
int sdnn_ex_barrier(int scope, const char *what);

/* A failure at the current thread: the message names kernel, block and
 * thread, then what (printf format).  Returns non-zero. */
int sdnn_ex_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A static shared array of `bytes` touched for the first time in this block:
 * non-zero when static + dynamic shared memory exceed the device's 48 KiB. */
int sdnn_ex_static_shared(const char *name, size_t bytes);

/* The launch error a failed SDNN_LAUNCH left (cudaGetLastError's), cleared. */
sdnn_status sdnn_ex_take_launch_error(void);
void sdnn_ex_set_launch_error(sdnn_status st);

/* Launches run since the process started (tests read it). */
uint64_t sdnn_ex_launches(void);

/* For tests: run every later launch's blocks forward (0), reversed (1) or
 * shuffled (2) whatever SDNN_SIM_JITTER says; -1 goes back to it. */
void sdnn_ex_force_order(int mode);

#define SDNN_EX_MAX_THREADS 1024
#define SDNN_EX_SHARED_LIMIT ((size_t)48 << 10)

#ifdef __cplusplus
}
#endif

#endif
