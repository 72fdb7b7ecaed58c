/*
 * mpi_train: a few training steps of a small network through the trainer,
 * alone or under mpirun (backend=auto), for tests/test_mpi.c.
 *
 *   mpi_train -n REPLICAS -s STEPS -o OUT.weights [-m stock] [-i INTERVAL]
 *             [-t TIMEOUT_S] [-k RANK:STEP] [-p RANK:STEP] [-a CODEC] [-l TRACE]
 *             [-c CPU_CONV]
 *
 * -c CPU_CONV: [scalednn] cpu_conv= (darknet, onednn, auto; default: the
 * config's default).
 * -a CODEC: bucket_mb=auto with compress=CODEC (none, ..., auto), 2
 * profiled steps; at the end every rank prints its plan count and buckets
 * ("rank R: PLAN ...") so the test can compare them across ranks.
 * -l TRACE: [scalednn] timeline=TRACE (rank R > 0 writes TRACE.rankR).
 *
 * Every step draws the world's batch (world = replicas x processes rows
 * of batch each) from a fixed generator keyed by the step, and this
 * process trains its contiguous share of it: process p gets the rows that
 * replicas [p*n, (p+1)*n) of a single process with the whole world would
 * get.  So P processes x 1 replica and 1 process x P replicas see the same
 * images on the same replica index, and their weights can be compared.
 *
 * After every step the weights are saved to OUT (rank 0 writes) and rank 0
 * then broadcasts a token, so a rank that passes that point knows the file
 * is complete.  -k RANK:STEP: that rank SIGKILLs itself before STEP (the
 * failure test); -p RANK:STEP: it SIGSTOPs itself instead (a hung peer:
 * mpirun does not notice, the others must time out).  Exit 0 after the last step; 1 with the error otherwise.
 */
#include "soft_assert.h"

#include "autoplan.h"
#include "comm.h"
#include "config.h"
#include "replicas.h"
#include "trainer.h"
#include "../testutil.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 4
#define INPUTS (8 * 8 * 3)
#define CLASSES 5

/* Batch norm (running statistics are averaged at saves) and a rate
 * schedule that changes within the run. */
static const char *CFG =
    "[net]\nbatch=%d\nsubdivisions=1\nwidth=8\nheight=8\nchannels=3\n"
    "momentum=0.9\ndecay=0.0005\nlearning_rate=0.05\nburn_in=3\npolicy=steps\n"
    "steps=6\nscales=.5\nmax_batches=1000\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[connected]\noutput=16\nactivation=leaky\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[softmax]\n";

static int die(int rank, const char *what)
{
    fprintf(stderr, "mpi_train rank %d: %s: %s\n", rank, what, sdnn_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    int n = 1, steps = 10, interval = 2, kill_rank = -1, kill_step = -1, stop_rank = -1,
        stop_step = -1;
    double timeout = 60;
    const char *out = NULL, *autoc = NULL, *trace = NULL, *conv = NULL;
    sdnn_mode mode = SDNN_MODE_SCALEDNN;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n")) n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-s")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-o")) out = argv[i + 1];
        else if (!strcmp(argv[i], "-i")) interval = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) timeout = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "-m")) mode = strcmp(argv[i + 1], "stock") ? mode : SDNN_MODE_STOCK;
        else if (!strcmp(argv[i], "-k")) sscanf(argv[i + 1], "%d:%d", &kill_rank, &kill_step);
        else if (!strcmp(argv[i], "-p")) sscanf(argv[i + 1], "%d:%d", &stop_rank, &stop_step);
        else if (!strcmp(argv[i], "-a")) autoc = argv[i + 1];
        else if (!strcmp(argv[i], "-l")) trace = argv[i + 1];
        else if (!strcmp(argv[i], "-c")) conv = argv[i + 1];
    }
    if (!out || n < 1 || steps < 1) {
        fprintf(stderr, "usage: mpi_train -n REPLICAS -s STEPS -o OUT [-m stock] [-i N] "
                        "[-t S] [-k RANK:STEP]\n");
        return 2;
    }

    char text[2048], path[] = "/tmp/sdnn-mpi-train-XXXXXX";
    snprintf(text, sizeof text, CFG, BATCH);
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) return 1;
    close(fd);
    srand(1);   /* rank 0's initial weights are everyone's */
    network **nets = NULL;
    sdnn_status st = sdnn_replicas_create(path, NULL, 1, n, &nets);
    unlink(path);
    if (st != SDNN_OK) return die(0, "replicas");

    sdnn_config cfg = SDNN_CONFIG_INIT;
    cfg.present = 1;
    cfg.mode = mode;
    cfg.interval = interval;
    cfg.bucket_mb = 0.002;   /* several buckets */
    cfg.comm_timeout_s = timeout;
    snprintf(cfg.backend, sizeof cfg.backend, "auto");
    if (trace) snprintf(cfg.timeline, sizeof cfg.timeline, "%s", trace);
    if (conv) snprintf(cfg.cpu_conv, sizeof cfg.cpu_conv, "%s", conv);
    if (autoc) {
        cfg.bucket_mb = 0;
        cfg.profile_iters = 2;
        snprintf(cfg.compress, sizeof cfg.compress, "%s", autoc);
        if (strcmp(autoc, "topk") == 0) cfg.error_feedback = 1;
    }
    sdnn_trainer *t = NULL;
    if (sdnn_trainer_create(nets, n, &cfg, 1, &t) != SDNN_OK) {
        sdnn_replicas_free(nets, n);
        return die(0, "trainer");
    }
    int rank = sdnn_trainer_rank(t), world = sdnn_trainer_world(t);
    int rc = 0;
    for (int s = 0; s < steps && rc == 0; ++s) {
        if (rank == kill_rank && s == kill_step) raise(SIGKILL);
        if (rank == stop_rank && s == stop_step) raise(SIGSTOP);
        uint64_t seed = 1000 + (uint64_t)s;
        data all = tu_batch(&seed, world * BATCH, INPUTS, CLASSES);
        data mine = all;
        mine.X.rows = mine.y.rows = n * BATCH;
        mine.X.vals += rank * n * BATCH;
        mine.y.vals += rank * n * BATCH;
        sdnn_step_stats ss;
        if (sdnn_trainer_step(t, mine, &ss) != SDNN_OK) rc = die(rank, "step");
        g_rank = rank;
        if (rc == 0) SOFT_ASSERT(isfinite(ss.loss), "step %d: loss %f", s, ss.loss);
        free_data(all);
        if (rc == 0 && sdnn_trainer_save(t, out) != SDNN_OK) rc = die(rank, "save");
        int token = s;
        if (rc == 0 && sdnn_trainer_broadcast_int(t, &token) != SDNN_OK) rc = die(rank, "sync");
        if (rc == 0 && rank == 0)
            printf("step %d: loss %f, iteration %zu, seen %zu\n", s, ss.loss,
                   sdnn_trainer_iteration(t), *sdnn_trainer_net(t, 0)->seen);
    }
    if (rc == 0 && autoc) {
        const sdnn_autoplan *ap = sdnn_trainer_autoplan(t);
        const sdnn_plan *pl = ap ? sdnn_autoplan_current(ap) : NULL;
        g_rank = rank;
        SOFT_ASSERT(pl != NULL, "bucket_mb=auto made no plan in %d steps", steps);
        if (pl) {
            char line[4096];
            int len = snprintf(line, sizeof line, "PLAN %d plans, %d buckets:",
                               sdnn_autoplan_count(ap), pl->nb);
            for (int k = 0; k < pl->nb && len < (int)sizeof line - 32; ++k)
                len += snprintf(line + len, sizeof line - (size_t)len, " %d-%d/%d", pl->b[k].lo,
                                pl->b[k].hi, pl->b[k].codec);
            printf("rank %d: %s\n", rank, line);
        }
    }
    if (rc == 0 && g_fail) rc = 1;
    if (rc == 0) printf("rank %d: DONE world %d\n", rank, world);
    fflush(stdout);
    sdnn_trainer_destroy(t);
    return rc;
}
