/*
 * train: the training loop shared by `detector train` and `classifier
 * train`: files checked before anything starts, replicas, loader, the
 * per-iteration line, CSV, Darknet's save schedule with atomic saves.
 */
#ifndef SDNN_TRAIN_H
#define SDNN_TRAIN_H

typedef enum { SDNN_TASK_DETECTOR, SDNN_TASK_CLASSIFIER } sdnn_task;

typedef struct sdnn_train_job {
    sdnn_task task;
    const char *datacfg;
    const char *cfgfile;
    const char *weights;     /* NULL: fresh weights */
    int clear;
    int nreplicas;
    const int *devices;      /* the -gpus ids, one per replica (an id may repeat:
                              * virtual=1); NULL: 0..nreplicas-1 */
    const char *gpus;        /* the -gpus list as given, for the banner */
    int max_batches;         /* > 0 overrides [net] max_batches */
    const char *csv;         /* overrides [scalednn] csv= */
    long seed;               /* < 0: time-based, like Darknet */
    int loader_threads;      /* <= 0: default */
    int skip_bad_labels;     /* -skip_bad_labels: drop bad boxes (counted) instead of stopping */
    int map_every;           /* -map: accuracy on the valid list every N iterations; 0 = off
                              * (detector: mAP@0.5, classifier: top-1) */
    double target;           /* -target: stop once that accuracy is reached; 0 = off */
    /* The fork's flags (detector train): */
    int points;              /* -points: the mAP -map reports, keeps _best by and stops at
                              * -target by: 0 all-point, 11, 101 */
    float iou_thresh;        /* -iou_thresh: -map's matching IoU (0.5) */
    float conf_thresh;       /* -thresh: -map's precision/recall line (0.25) */
    const char *chart;       /* -chart FILE: the picture redrawn while training; NULL:
                              * BACKUP/CFG_chart.png ... see train.c */
    int no_chart;            /* gnuplot missing: no chart */
    int benchmark_layers;    /* -benchmark_layers: per-layer forward/backward times first */
    long time_limit_s;       /* -time_limit_sec: stop (and save _final) after this much
                              * training; 0 = off */
    int letter_box;          /* -letter_box: train on letterboxed images ([net] letter_box=1) */
} sdnn_train_job;

/* Returns the process exit code. */
int sdnn_train(const sdnn_train_job *job);

/* `detector train` / `classifier train` with argv[0] == "train". */
int sdnn_train_command(sdnn_task task, int argc, char **argv);


#endif
