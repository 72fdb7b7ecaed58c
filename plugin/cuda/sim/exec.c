/*
 * sim/exec: runs the real kernels on a simulated device with CUDA's rules
 * (launch checks, block order, fibers switched at barriers, divergent
 * barriers, the shared-memory bookkeeping's errors).  See sim/exec.h for the
 * model; sim/cuda_shim.h is the C++ side the kernels compile against.
 *
 * Device memory outside an allocation: the runtime keeps a PROT_NONE guard
 * page after every allocation in the host view too (allocations end within
 * 255 bytes of it) and turns freed memory PROT_NONE, so a kernel's access
 * past the end or into freed memory faults; the SIGSEGV handler installed
 * here turns a fault inside a kernel into that launch's error (naming the
 * kernel, block, thread and what the address is) by jumping back to the
 * executor, which abandons the block: the stream's sticky error, reported
 * by the next sync.  A fault outside a kernel goes to the handler that was
 * there before (ASan's, or the default).  What it misses: an overrun
 * shorter than the allocation's padding to 256 bytes, and an index that
 * jumps over the guard page into the next allocation.
 */
#include "exec.h"

#include "sim.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

_Thread_local sdnn_ex_state sdnn_ex;

#define STACK_BYTES ((size_t)64 << 10)

/*
 * Fiber switches.  On x86-64 a switch is sdnn_ex_switch_ctx below: it saves
 * the callee-saved registers, MXCSR and the x87 control word on the old
 * stack and restores them from the new one, with no system call (glibc's
 * swapcontext saves and restores the signal mask with rt_sigprocmask at
 * every switch, which made barrier-heavy kernels cost ~300 ns a switch, 90%
 * of it in the kernel).  Other architectures keep ucontext.  Under
 * AddressSanitizer every switch is announced with the sanitizer's fiber
 * calls, so it knows which stack runs.
 */
#if defined(__x86_64__)
#define EX_ASM 1
#else
#define EX_ASM 0
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define EX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EX_ASAN 1
#endif
#endif
#ifndef EX_ASAN
#define EX_ASAN 0
#endif
#if EX_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if EX_ASM
/* sdnn_ex_switch_ctx(save, to): pushes rbp, rbx, r12-r15, stores rsp in
 * *save, loads `to` as rsp and pops the same registers; `ret` then returns
 * into the other context (or, the first time, into fiber_entry, which
 * fiber_init places there).  MXCSR and the x87 control word are not
 * switched: every fiber of a worker runs the same kernels with the same
 * floating-point environment, which none of them changes (loading them
 * at each switch cost a third of the switch). */
__attribute__((visibility("hidden"))) void sdnn_ex_switch_ctx(void **save, void *to);
__asm__(".text\n"
        ".globl sdnn_ex_switch_ctx\n"
        ".hidden sdnn_ex_switch_ctx\n"
        ".type sdnn_ex_switch_ctx,@function\n"
        ".p2align 4\n"
        "sdnn_ex_switch_ctx:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size sdnn_ex_switch_ctx, .-sdnn_ex_switch_ctx\n");
#endif

/* A fiber that reaches a barrier or returns hands the OS thread straight
 * to the next thread of the block that is ready (one switch, not two
 * through the worker's stack); the worker's stack runs again only when no
 * thread after it is ready.  Under ASan (whose fiber calls name the stack
 * switched from) and with ucontext every switch goes through the worker. */
#if EX_ASM && !EX_ASAN
#define EX_HANDON 1
#else
#define EX_HANDON 0
#endif

enum { F_READY, F_WAIT_BLOCK, F_WAIT_WARP, F_DONE, F_FAULT };

typedef struct ex_fiber {
#if EX_ASM
    void *sp;
#else
    ucontext_t uc;
#endif
    void *fake;                 /* ASan's fake stack of the fiber while switched out */
    int state;
} ex_fiber;

typedef struct ex_worker {
#if EX_ASM
    void *main_sp;
#else
    ucontext_t main;
#endif
    void *main_fake;
    const void *main_bottom;    /* the worker's own stack (ASan's fiber calls) */
    size_t main_size;
    int on_fiber;               /* a fiber runs now (not the worker's stack) */
    ex_fiber f[SDNN_EX_MAX_THREADS];
    unsigned char *stacks;      /* SDNN_EX_MAX_THREADS stacks, reserved once */
    uint64_t xchg[SDNN_EX_MAX_THREADS];
    unsigned char *dyn;
    sdnn_ex_slot *dyn_meta;
    size_t dyn_cap;
    sdnn_ex_thread_fn run;
    void *args;
    unsigned cur;
    unsigned nthreads;          /* of the block running now */
    int faulted;                /* a fiber of the block stopped with an error */
    uint64_t serial;            /* blocks run on this thread */
    sigjmp_buf fault_jb;        /* where a fault in the block returns to */
    volatile int armed;
    char fault[512];
} ex_worker;

typedef struct ex_header {
    const char *kernel;
    sdnn_ex_dim grid, block;
    size_t shmem;
    sdnn_ex_thread_fn run;
    size_t argsize;
    uint64_t launch;
} ex_header;

#define HDR_BYTES ((sizeof(ex_header) + 63) / 64 * 64)

static _Thread_local ex_worker *g_w;
static _Thread_local sdnn_status g_launch_err;
static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static struct sigaction g_old_segv;
static atomic_ullong g_launches;

/* ASan's shadow of fiber t's stack, before the stack is reused or unmapped:
 * the frames that were live when the fiber last left it (its last switch
 * out, or all of it when it was abandoned mid-block) keep their poisoned
 * redzones; frames that returned are clean.  (ucontext: ASan's swapcontext
 * interceptor clears the stacks itself.) */
static void clean_stack(ex_worker *w, unsigned t)
{
#if EX_ASAN && EX_ASM
    ex_fiber *f = &w->f[t];
    unsigned char *lo = w->stacks + STACK_BYTES * t;
    if (f->sp) {
        int ended = f->state == F_DONE || f->state == F_FAULT;
        unsigned char *from = ended ? (unsigned char *)f->sp : lo;
        __asan_unpoison_memory_region(from, (size_t)(lo + STACK_BYTES - from));
        f->sp = NULL;
    }
#else
    (void)w;
    (void)t;
#endif
}

static void worker_free(void *p)
{
    ex_worker *w = p;
    if (!w) return;
    for (unsigned t = 0; w->stacks && t < SDNN_EX_MAX_THREADS; ++t) clean_stack(w, t);
    if (w->stacks) munmap(w->stacks, STACK_BYTES * SDNN_EX_MAX_THREADS);
    free(w->dyn);
    free(w->dyn_meta);
    free(w);
}

static void segv_handler(int sig, siginfo_t *si, void *uc)
{
    ex_worker *w = g_w;
    if (sdnn_ex.kernel && w && w->armed) {
        char where[256];
        sdnn_sim_describe_host(si->si_addr, where, sizeof where);
        snprintf(w->fault, sizeof w->fault, "device access at %p: %s", si->si_addr, where);
        w->armed = 0;
#if EX_ASAN
        if (w->on_fiber) __sanitizer_start_switch_fiber(NULL, w->main_bottom, w->main_size);
#endif
        siglongjmp(w->fault_jb, 1);
    }
    /* Not a kernel's: whoever handled it before (the access faults again). */
    (void)uc;
    sigaction(sig, &g_old_segv, NULL);
}

static void ex_init(void)
{
    pthread_key_create(&g_key, worker_free);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = segv_handler;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_old_segv);
}

static ex_worker *worker(void)
{
    if (g_w) return g_w;
    ex_worker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    void *s = mmap(NULL, STACK_BYTES * SDNN_EX_MAX_THREADS, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s == MAP_FAILED) {
        free(w);
        return NULL;
    }
    w->stacks = s;
    pthread_setspecific(g_key, w);
    return g_w = w;
}

/* ---- errors ------------------------------------------------------------------------- */

int sdnn_ex_fail(const char *fmt, ...)
{
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    sdnn_set_error(SDNN_ERR_INVALID, __FILE__, __LINE__,
                   "kernel %s, block (%u,%u,%u), thread (%u,%u,%u): %s",
                   sdnn_ex.kernel ? sdnn_ex.kernel : "?", sdnn_ex.bid.x, sdnn_ex.bid.y,
                   sdnn_ex.bid.z, sdnn_ex.tid.x, sdnn_ex.tid.y, sdnn_ex.tid.z, what);
    return 1;
}

sdnn_status sdnn_ex_take_launch_error(void)
{
    sdnn_status s = g_launch_err;
    g_launch_err = SDNN_OK;
    return s;
}

void sdnn_ex_set_launch_error(sdnn_status st)
{
    if (g_launch_err == SDNN_OK) g_launch_err = st;
}

uint64_t sdnn_ex_launches(void) { return atomic_load(&g_launches); }

int sdnn_ex_static_shared(const char *name, size_t bytes)
{
    sdnn_ex.static_shared += bytes;
    if (sdnn_ex.static_shared + sdnn_ex.dyn_bytes > SDNN_EX_SHARED_LIMIT)
        return sdnn_ex_fail("static shared memory (%zu bytes with %s) plus dynamic (%zu) "
                            "exceeds the device's %zu bytes a block (no opt-in)",
                            sdnn_ex.static_shared, name, sdnn_ex.dyn_bytes,
                            SDNN_EX_SHARED_LIMIT);
    return 0;
}

/* ---- threads and barriers ---------------------------------------------------------- */

static void set_thread(unsigned t)
{
    sdnn_ex_dim b = sdnn_ex.bdim;
    sdnn_ex.flat = t;
    if (b.y == 1 && b.z == 1) {     /* most blocks: no division */
        sdnn_ex.tid.x = t;
        sdnn_ex.tid.y = sdnn_ex.tid.z = 0;
        return;
    }
    sdnn_ex.tid.x = t % b.x;
    sdnn_ex.tid.y = (t / b.x) % b.y;
    sdnn_ex.tid.z = t / (b.x * b.y);
}

/* The worker's stack to fiber t and back.  ASan hears of every switch: the
 * stack it goes to (start) and, once there, that it arrived (finish). */
static void to_fiber(ex_worker *w, unsigned t)
{
    ex_fiber *f = &w->f[t];
#if EX_ASAN
    __sanitizer_start_switch_fiber(&w->main_fake, w->stacks + STACK_BYTES * t, STACK_BYTES);
#endif
    w->on_fiber = 1;
#if EX_ASM
    sdnn_ex_switch_ctx(&w->main_sp, f->sp);
#else
    swapcontext(&w->main, &f->uc);
#endif
    w->on_fiber = 0;
#if EX_ASAN
    __sanitizer_finish_switch_fiber(w->main_fake, NULL, NULL);
#endif
}

/* Fiber me back to the worker's stack; `done`: it never resumes. */
static void to_main(ex_worker *w, unsigned me, int done)
{
    ex_fiber *f = &w->f[me];
    (void)done;
#if EX_ASAN
    __sanitizer_start_switch_fiber(done ? NULL : &f->fake, w->main_bottom, w->main_size);
#endif
#if EX_ASM
    sdnn_ex_switch_ctx(&f->sp, w->main_sp);
#else
    if (done) setcontext(&w->main);
    swapcontext(&f->uc, &w->main);
#endif
#if EX_ASAN
    __sanitizer_finish_switch_fiber(f->fake, &w->main_bottom, &w->main_size);
#endif
}

#if EX_HANDON
/* The next thread after `me` that is ready, or nthreads. */
static unsigned next_ready(const ex_worker *w, unsigned me)
{
    for (unsigned t = me + 1; t < w->nthreads; ++t)
        if (w->f[t].state == F_READY) return t;
    return w->nthreads;
}
#endif

/* Fiber me (its state set) leaves the OS thread: to the next ready thread
 * of the block, else to the worker's stack. */
static void leave(ex_worker *w, unsigned me, int done)
{
#if EX_HANDON
    unsigned t = w->faulted ? w->nthreads : next_ready(w, me);
    if (t < w->nthreads) {
        w->cur = t;
        set_thread(t);
        sdnn_ex_switch_ctx(&w->f[me].sp, w->f[t].sp);
        return;
    }
#endif
    to_main(w, me, done);
}

int sdnn_ex_barrier(int scope, const char *what)
{
    if (!sdnn_ex.fibers)
        return sdnn_ex_fail("reached %s, which thread 0 of the block returned without "
                            "reaching (a barrier not every thread of the block reaches)",
                            what);
    ex_worker *w = g_w;
    unsigned me = w->cur;
    w->f[me].state = scope == SDNN_EX_WARP ? F_WAIT_WARP : F_WAIT_BLOCK;
    leave(w, me, 0);
    /* Resumed (whoever switched here set this thread's indices): the
     * barrier is complete. */
    return 0;
}

__attribute__((noreturn)) static void fiber_entry(void)
{
    ex_worker *w = g_w;
#if EX_ASAN
    __sanitizer_finish_switch_fiber(NULL, &w->main_bottom, &w->main_size);
#endif
    unsigned me = w->cur;
    int rc = w->run(w->args);
    w->f[me].state = rc ? F_FAULT : F_DONE;
    if (rc) w->faulted = 1;
    leave(w, me, 1);
    abort();    /* a finished fiber is never resumed */
}

#if !EX_ASM
static void fiber_main(void) { fiber_entry(); }
#endif

static void fiber_init(ex_worker *w, unsigned t)
{
    ex_fiber *f = &w->f[t];
    unsigned char *lo = w->stacks + STACK_BYTES * t;
#if EX_ASM
    clean_stack(w, t);
    /* The frame sdnn_ex_switch_ctx pops: six zero registers, then
     * fiber_entry as the return address, entered with rsp = 8 mod 16 as
     * after a call (a zero return address above it ends backtraces). */
    /* Each stack starts a different number of cache lines below its top:
     * tops 64 KiB apart would all fall in the same cache sets, and every
     * switch would miss. */
    uintptr_t colour = (uintptr_t)(t % 128) * 64;
    uint64_t *top = (uint64_t *)(((uintptr_t)(lo + STACK_BYTES) - colour) & ~(uintptr_t)15);
    top[-1] = 0;
    top[-2] = (uint64_t)(uintptr_t)fiber_entry;
    for (int r = 3; r <= 8; ++r) top[-r] = 0;
    f->sp = top - 8;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = lo;
    f->uc.uc_stack.ss_size = STACK_BYTES;
    f->uc.uc_link = &w->main;
    makecontext(&f->uc, fiber_main, 0);
#endif
    f->fake = NULL;
    f->state = F_READY;
}

static void resume(ex_worker *w, unsigned t)
{
    w->cur = t;
    set_thread(t);
    to_fiber(w, t);
}

/* Every thread on a fiber; thread 0 already waits at its first barrier. */
static sdnn_status run_fibers(ex_worker *w, unsigned T)
{
    for (unsigned t = 1; t < T; ++t) fiber_init(w, t);
    w->nthreads = T;
    for (;;) {
        for (unsigned t = 0; t < T; ++t)
            if (w->f[t].state == F_READY) {
                resume(w, t);
                if (w->faulted) return SDNN_ERR_INVALID;
            }
        unsigned done = 0, at_block = 0, first_done = T, first_block = T;
        for (unsigned t = 0; t < T; ++t) {
            int s = w->f[t].state;
            if (s == F_DONE) {
                ++done;
                if (first_done == T) first_done = t;
            } else if (s == F_WAIT_BLOCK) {
                ++at_block;
                if (first_block == T) first_block = t;
            }
        }
        if (done == T) return SDNN_OK;
        int released = 0;
        for (unsigned w0 = 0; w0 < T; w0 += 32) {
            unsigned end = w0 + 32 < T ? w0 + 32 : T, waiting = 0, lane_done = T, lane_block = T;
            for (unsigned t = w0; t < end; ++t) {
                if (w->f[t].state == F_WAIT_WARP) ++waiting;
                else if (w->f[t].state == F_DONE) lane_done = t;
                else if (w->f[t].state == F_WAIT_BLOCK) lane_block = t;
            }
            if (!waiting) continue;
            if (waiting == end - w0) {
                for (unsigned t = w0; t < end; ++t) w->f[t].state = F_READY;
                if (sdnn_ex.wmem[w0 / 32]) {   /* a __syncwarp: orders the warp's memory */
                    ++sdnn_ex.wsync[w0 / 32];
                    sdnn_ex.wmem[w0 / 32] = 0;
                }
                released = 1;
                continue;
            }
            unsigned t0 = w0;
            while (w->f[t0].state != F_WAIT_WARP) ++t0;
            set_thread(t0);
            if (lane_done < T) {
                sdnn_ex_fail("waits at a warp operation that lane %u of its warp never "
                             "reaches (that thread returned)", lane_done % 32);
            } else {
                sdnn_ex_fail("waits at a warp operation while lane %u of its warp waits "
                             "at __syncthreads (deadlock)", lane_block % 32);
            }
            return SDNN_ERR_INVALID;
        }
        if (released) continue;
        if (at_block == T - done) {
            if (done) {
                set_thread(first_block);
                sdnn_ex_fail("waits at __syncthreads, which thread (%u,%u,%u) of the block "
                             "never reaches (it returned): a divergent barrier",
                             first_done % sdnn_ex.bdim.x,
                             (first_done / sdnn_ex.bdim.x) % sdnn_ex.bdim.y,
                             first_done / (sdnn_ex.bdim.x * sdnn_ex.bdim.y));
                return SDNN_ERR_INVALID;
            }
            ++sdnn_ex.epoch;
            for (unsigned t = 0; t < T; ++t) w->f[t].state = F_READY;
            continue;
        }
        set_thread(first_block < T ? first_block : 0);
        sdnn_ex_fail("waits at a barrier the other threads cannot reach (deadlock)");
        return SDNN_ERR_INVALID;
    }
}

static sdnn_status run_block_body(ex_worker *w, unsigned T);

static sdnn_status run_block(ex_worker *w, unsigned T)
{
    /* No signal mask to save: the handler runs with SA_NODEFER and an empty
     * sa_mask, so the mask is unchanged when it jumps back here (saving it
     * would be a system call a block). */
    if (sigsetjmp(w->fault_jb, 0)) {
#if EX_ASAN
        if (w->on_fiber) __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
        w->on_fiber = 0;
        sdnn_ex_fail("%s", w->fault);
        return SDNN_ERR_INVALID;
    }
    w->armed = 1;
    sdnn_status st = run_block_body(w, T);
    w->armed = 0;
    return st;
}

static sdnn_status run_block_body(ex_worker *w, unsigned T)
{
    sdnn_ex.block = ++w->serial;
    sdnn_ex.epoch = 0;
    memset(sdnn_ex.wsync, 0, sizeof sdnn_ex.wsync);
    memset(sdnn_ex.wmem, 0, sizeof sdnn_ex.wmem);
    sdnn_ex.static_shared = 0;
    sdnn_ex.fibers = 1;
    w->nthreads = 1;    /* thread 0 alone until it reaches a barrier */
    w->faulted = 0;
    fiber_init(w, 0);
    resume(w, 0);
    if (w->f[0].state == F_FAULT) return SDNN_ERR_INVALID;
    if (w->f[0].state == F_DONE) {
        /* Thread 0 reached no barrier: neither may the others. */
        sdnn_ex.fibers = 0;
        for (unsigned t = 1; t < T; ++t) {
            set_thread(t);
            if (w->run(w->args)) return SDNN_ERR_INVALID;
        }
        return SDNN_OK;
    }
    return run_fibers(w, T);
}

/* ---- block order -------------------------------------------------------------------- */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

typedef struct order {
    int mode;           /* 0 forward, 1 reversed, 2 shuffled: k -> (a k + b) mod n */
    uint64_t a, b, n;
} order;

static atomic_int g_force = -1;

void sdnn_ex_force_order(int mode) { atomic_store(&g_force, mode); }

static order pick_order(uint64_t launch, uint64_t n)
{
    order o = {0, 1, 0, n};
    unsigned long long seed = 0;
    int force = atomic_load(&g_force);
    if (n < 2 || (force < 0 && !sdnn_sim_jitter_seed(&seed))) return o;
    uint64_t r = mix(seed ^ mix(launch));
    o.mode = force >= 0 ? force : (int)(r % 3);
    if (o.mode == 2) {
        o.a = mix(r) % n;
        if (o.a == 0) o.a = 1;
        while (gcd(o.a, n) != 1) o.a = o.a + 1 < n ? o.a + 1 : 1;
        o.b = mix(r + 1) % n;
    }
    return o;
}

static uint64_t order_at(const order *o, uint64_t k)
{
    if (o->mode == 1) return o->n - 1 - k;
    if (o->mode == 2) return (uint64_t)(((unsigned __int128)o->a * k + o->b) % o->n);
    return k;
}

/* ---- launches ----------------------------------------------------------------------- */

static sdnn_status ex_run(void *p)
{
    ex_header *h = p;
    ex_worker *w = worker();
    if (!w) return SDNN_ERROR(SDNN_ERR_NOMEM, "kernel %s: no memory for its fibers", h->kernel);
    if (h->shmem > w->dyn_cap) {
        unsigned char *d = realloc(w->dyn, h->shmem);
        if (d) w->dyn = d;
        sdnn_ex_slot *m = realloc(w->dyn_meta, (h->shmem / 4 + 1) * sizeof *m);
        if (m) w->dyn_meta = m;
        if (!d || !m) return SDNN_ERROR(SDNN_ERR_NOMEM, "kernel %s: no memory for %zu bytes "
                                        "of dynamic shared memory", h->kernel, h->shmem);
        w->dyn_cap = h->shmem;
    }
    w->run = h->run;
    w->args = (unsigned char *)p + HDR_BYTES;
    sdnn_ex.kernel = h->kernel;
    sdnn_ex.gdim = h->grid;
    sdnn_ex.bdim = h->block;
    sdnn_ex.dyn = w->dyn;
    sdnn_ex.dyn_bytes = h->shmem;
    sdnn_ex.dyn_meta = w->dyn_meta;
    sdnn_ex.xchg = w->xchg;
    unsigned T = h->block.x * h->block.y * h->block.z;
    uint64_t gx = h->grid.x, gxy = gx * h->grid.y, n = gxy * h->grid.z;
    order o = pick_order(h->launch, n);
    sdnn_status st = SDNN_OK;
    for (uint64_t k = 0; k < n && st == SDNN_OK; ++k) {
        uint64_t b = order_at(&o, k);
        sdnn_ex.bid.x = (unsigned)(b % gx);
        sdnn_ex.bid.y = (unsigned)((b / gx) % h->grid.y);
        sdnn_ex.bid.z = (unsigned)(b / gxy);
        st = run_block(w, T);
    }
    sdnn_ex.kernel = NULL;
    return st;
}

sdnn_status sdnn_ex_submit(sdnn_dctx *c, int stream, const char *kernel, sdnn_ex_dim grid,
                           sdnn_ex_dim block, size_t shmem, sdnn_ex_thread_fn run,
                           const void *args, size_t argsize)
{
    pthread_once(&g_once, ex_init);
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (!block.x || !block.y || !block.z || threads > SDNN_EX_MAX_THREADS || block.x > 1024 ||
        block.y > 1024 || block.z > 64)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "launch of kernel %s: a block of (%u,%u,%u) threads; a GPU takes "
                          "1..1024 threads a block, x and y at most 1024, z at most 64",
                          kernel, block.x, block.y, block.z);
    if (!grid.x || !grid.y || !grid.z || grid.x > 0x7fffffffu || grid.y > 65535u ||
        grid.z > 65535u)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "launch of kernel %s: a grid of (%u,%u,%u) blocks; a GPU takes x in "
                          "1..2^31-1, y and z in 1..65535",
                          kernel, grid.x, grid.y, grid.z);
    if (shmem > SDNN_EX_SHARED_LIMIT)
        return SDNN_ERROR(SDNN_ERR_INVALID,
                          "launch of kernel %s: %zu bytes of dynamic shared memory; a block "
                          "gets at most %zu without opt-in",
                          kernel, shmem, SDNN_EX_SHARED_LIMIT);
    size_t total = HDR_BYTES + argsize;
    unsigned char *buf = malloc(total);
    if (!buf) return SDNN_ERROR(SDNN_ERR_NOMEM, "launch of kernel %s: no memory", kernel);
    ex_header h = {kernel, grid, block, shmem, run, argsize,
                   atomic_fetch_add(&g_launches, 1) + 1};
    memcpy(buf, &h, sizeof h);
    memcpy(buf + HDR_BYTES, args, argsize);
    sdnn_status st = sdnn_sim_launch(c, stream, kernel, ex_run, buf, total);
    free(buf);
    return st;
}

sdnn_status sdnn_ex_dptr(sdnn_dctx *c, const void *p, const char *kernel, int index,
                         const char *member, void **host)
{
    *host = NULL;
    if (!p) return SDNN_OK;
    char call[256];
    snprintf(call, sizeof call, "launch of kernel %s, argument %d%s%s", kernel, index,
             member ? " " : "", member ? member : "");
    return sdnn_sim_dptr(c, p, 0, call, host);
}
