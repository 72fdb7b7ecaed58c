/*
 * memstat: what tests/gpu/hostloss.c and bench/gpu/bench_memory.c share to
 * measure the gpu engine's memory: n replicas of a cfg trained
 * for a few steps through the trainer (engine=gpu, scalednn or stock mode)
 * in a child process of its own, so that every figure starts from nothing:
 *
 *   device peak   per replica's device, the simulated runtime's peak of
 *                 live allocations (dev.h sdnn_dev_stats; replica r on
 *                 device r, or all on device 0 where there are fewer
 *                 devices than replicas); the CUDA runtime keeps no such counter, so
 *                 there `measured` is 0 and only the engine's own figures
 *                 come back
 *   bucket bytes  per replica, what the exchange allocated on its device
 *                 (snapshots, packs, means) and the comm's mirrors there
 *                 (gpu.h sdnn_gpu_engine_replica_stats)
 *   host RSS      the child's peak resident set (getrusage), divided by
 *                 the replicas; on simulated devices it includes the
 *                 simulated device memory, which is host memory there
 *
 * The parent must not have touched a device before (the child inherits no
 * runtime threads across fork).  Include after gpu_test.h.
 */
#ifndef SDNN_GPU_MEMSTAT_H
#define SDNN_GPU_MEMSTAT_H

#include "config.h"
#include "dev.h"
#include "engine.h"
#include "gpu.h"
#include "trainer.h"

#include <sys/resource.h>
#include <sys/wait.h>

#define GT_MEM_MAX 4

typedef struct gt_mem {
    int ok, measured, n;
    int shared;                      /* every replica on device 0: dev_peak[r] is that
                                      * device's, for all of them */
    size_t dev_peak[GT_MEM_MAX];     /* bytes */
    size_t bucket[GT_MEM_MAX];       /* bytes */
    size_t rss_per_replica;          /* bytes */
    double loss;
    char err[256];
} gt_mem;

static sdnn_engine *gt_mem_engine;
static sdnn_status gt_mem_create(sdnn_engine *e, const sdnn_engine_opts *o)
{
    gt_mem_engine = e;
    return sdnn_engine_gpu.create(e, o);
}

static int gt_mem_classes(network *net)
{
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].type == YOLO || net->layers[i].type == REGION)
            return net->layers[i].classes;
    return 1;
}

/* Replica r on device r when there are enough devices (simulated: 4),
 * else every replica on device 0 as virtual devices (one GPU); 1 when
 * they share one. */
static int gt_mem_devices(int n, int *devs)
{
    int have = 0;
    if (sdnn_gpu_device_count(&have) != SDNN_OK) have = 0;
    for (int r = 0; r < n; ++r) devs[r] = have >= n ? r : 0;
    return have < n;
}

/* The child's side: everything into *m. */
static void gt_mem_child(const char *cfg, int is_file, const char *set, int n, int stock,
                         int steps, gt_mem *m)
{
    network *nets[GT_MEM_MAX] = {0};
    sdnn_trainer *T = NULL;
    m->n = n;
    for (int r = 0; r < n; ++r) {
        nets[r] = is_file ? gt_parse_file(cfg, set) : gt_parse_text(cfg, set);
        if (!nets[r]) {
            snprintf(m->err, sizeof m->err, "cannot parse %s", is_file ? cfg : "the cfg text");
            goto out;
        }
    }
    gt_randomize(nets[0], 5);
    for (int r = 1; r < n; ++r) gt_copy_net(nets[r], nets[0]);
    sdnn_config c = SDNN_CONFIG_INIT;
    c.present = 1;
    c.mode = stock ? SDNN_MODE_STOCK : SDNN_MODE_SCALEDNN;
    c.bucket_mb = 0.05;
    snprintf(c.engine, sizeof c.engine, "gpu");
    sdnn_engine_ops rec = sdnn_engine_gpu;
    rec.create = gt_mem_create;
    gt_mem_engine = NULL;
    int devs[GT_MEM_MAX];
    c.virtual_devices = m->shared = gt_mem_devices(n, devs);
    sdnn_trainer_opts to = SDNN_TRAINER_OPTS_INIT;
    to.engine = &rec;
    to.devices = devs;
    if (sdnn_trainer_create_opts(nets, n, &c, &to, 0, &T) != SDNN_OK || !gt_mem_engine) {
        snprintf(m->err, sizeof m->err, "trainer: %s", sdnn_last_error());
        goto out;
    }
    network *n0 = nets[0];
    int rows = n0->batch * n0->subdivisions * n;
    for (int s = 0; s < steps; ++s) {
        data d = gt_detection_data(rows, n0->w, n0->h, n0->c, n0->truths, gt_mem_classes(n0),
                                   700 + (uint64_t)s);
        sdnn_step_stats st;
        sdnn_status rc = sdnn_trainer_step(T, d, &st);
        free_data(d);
        if (rc != SDNN_OK) {
            snprintf(m->err, sizeof m->err, "step %d: %s", s, sdnn_last_error());
            goto out;
        }
        m->loss = st.loss;
    }
    m->measured = 1;
    for (int r = 0; r < n; ++r) {
        sdnn_gpu_engine_stats es;
        if (sdnn_gpu_engine_replica_stats(gt_mem_engine, r, &es) != SDNN_OK) {
            snprintf(m->err, sizeof m->err, "engine stats: %s", sdnn_last_error());
            goto out;
        }
        m->bucket[r] = es.bucket_bytes + es.codec_bytes;
        sdnn_dev_stats ds;
        if (sdnn_dev_stats_get(devs[r], &ds) == SDNN_OK) m->dev_peak[r] = ds.mem_peak;
        else m->measured = 0;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    m->rss_per_replica = (size_t)ru.ru_maxrss * 1024 / (size_t)n;
    m->ok = 1;
out:
    sdnn_trainer_destroy(T);
    for (int r = 0; r < n; ++r)
        if (nets[r]) sdnn_network_free(nets[r]);
}

/* gt_mem_child in a child process; 1 when it reported. */
static int gt_mem_measure(const char *cfg, int is_file, const char *set, int n, int stock,
                          int steps, gt_mem *m)
{
    memset(m, 0, sizeof *m);
    if (n < 1 || n > GT_MEM_MAX) return 0;
    int fd[2];
    if (pipe(fd) != 0) return 0;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 0;
    if (pid == 0) {
        close(fd[0]);
        gt_mem r;
        memset(&r, 0, sizeof r);
        gt_mem_child(cfg, is_file, set, n, stock, steps, &r);
        ssize_t w = write(fd[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    ssize_t got = 0;
    while (got < (ssize_t)sizeof *m) {
        ssize_t k = read(fd[0], (char *)m + got, sizeof *m - (size_t)got);
        if (k <= 0) break;
        got += k;
    }
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return got == (ssize_t)sizeof *m && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

#endif
