/*
 * timeline: a Chrome trace (JSON Trace Event Format, opened by Perfetto and
 * chrome://tracing) of a training run, the timeline= key.
 *
 * Every thread that records writes into a track of its own: a fixed ring of
 * fixed-size records with one producer (the track's thread) and one
 * consumer (the writer thread).  Recording is a few stores and never blocks
 * or allocates; a full ring drops the record and counts it.  The writer
 * thread wakes every period (or when a ring is half full), formats what the
 * rings hold as JSON with buffered stdio, and at close writes the end of
 * the document so the file is valid JSON, with the number of dropped
 * records in "otherData".
 *
 * Spans are "X" events (start and duration in one record), per-step values
 * are "C" counters, drops are "i" instants, and the tracks are named with
 * "M" metadata events.  Times are CLOCK_MONOTONIC (sdnn_now_s) relative to
 * the open, written in microseconds with nanosecond digits, so a span's
 * duration is exactly the difference of the two clock readings the caller
 * passed (to the nanosecond): the per-step counters of the CSV are sums of
 * the same readings.  pid is rank + 1 (Perfetto treats pid 0 as the
 * kernel's idle task).  Between processes each rank writes its own file
 * (the trainer names rank R's PATH.rankR and opens them all right after a
 * barrier, so their time origins agree to the barrier's skew); the files
 * differ in pid, so scripts/timeline_merge.sh can put their events into
 * one trace, a process per rank.
 *
 * Callers test their timeline pointer first: without timeline= the cost of
 * a hook is that one branch.
 */
#ifndef SDNN_TIMELINE_H
#define SDNN_TIMELINE_H

#include "scalednn.h"
#include <stddef.h>

typedef struct sdnn_timeline sdnn_timeline;

/* Tracks (one per recording thread): tid = track + 1. */
enum {
    SDNN_TL_TRACK_MAIN = 0,     /* the step, saves, data wait, counters */
    SDNN_TL_TRACK_LOADER = 1,   /* load_data in flight */
    SDNN_TL_TRACK_COMM = 2,     /* the collectives */
    SDNN_TL_TRACK_REPLICA0 = 3  /* replica r records on track 3 + r */
};

/* What a record is: its name, category, phase and argument names (the
 * table is in timeline.c). */
typedef enum sdnn_tl_kind {
    SDNN_TL_STEP,          /* main: the trainer step (iteration) */
    SDNN_TL_STOCK_SYNC,    /* main: stock mode's weight averaging (iteration) */
    SDNN_TL_SAVE,          /* main: a weights save */
    SDNN_TL_DATA_WAIT,     /* main: waiting for the loader (batch) */
    SDNN_TL_LOAD,          /* loader: load_data of one step's batch (batch, images) */
    SDNN_TL_TRAIN,         /* replica: its train_network (iteration) */
    SDNN_TL_SNAPSHOT,      /* replica: snapshot of the update buffers (iteration) */
    SDNN_TL_FORWARD,       /* replica: a layer's forward (iteration, layer, sub; type) */
    SDNN_TL_BACKWARD,      /* replica: a layer's backward (iteration, layer, sub; type) */
    SDNN_TL_PACK,          /* replica: fresh gradient into the bucket (iteration, layer, bucket) */
    SDNN_TL_ENCODE,        /* replica: error feedback + encode (iteration, bucket, floats; codec) */
    SDNN_TL_UPDATE,        /* replica: a layer's update, waits included (iteration, layer) */
    SDNN_TL_SYNC_WAIT,     /* replica: waiting for slower replicas (iteration, layer, bucket) */
    SDNN_TL_EXCHANGE_WAIT, /* replica: waiting for the collective (iteration, layer, bucket) */
    SDNN_TL_UNPACK,        /* replica: updates = snapshot + mean (iteration, layer, bucket) */
    SDNN_TL_ALLREDUCE,     /* comm: one bucket's collective (iteration, bucket, bytes; codec) */
    SDNN_TL_C_BYTES,       /* counter: bytes exchanged in the step */
    SDNN_TL_C_ITERATION,   /* counter: iteration after the step */
    SDNN_TL_C_LOSS,        /* counter: loss of the step */
    SDNN_TL_C_IMAGES_S,    /* counter: images per second of the step */
    SDNN_TL_NKINDS
} sdnn_tl_kind;

typedef struct sdnn_timeline_opts {
    size_t capacity;       /* records per track (rounded up to a power of 2) */
    int period_ms;         /* the writer drains the rings this often */
    int rank;              /* the process's rank: pid rank + 1, named "scalednn rank R" */
} sdnn_timeline_opts;

#define SDNN_TIMELINE_OPTS_INIT { .capacity = (size_t)1 << 15, .period_ms = 100, .rank = 0 }

/* What the open checks first, for callers that check before they start
 * anything: `path` is not a file other than a trace of ours, and its
 * folder takes a new file.  SDNN_ERR_INVALID / SDNN_ERR_IO naming the
 * timeline= key and the file or folder. */
sdnn_status sdnn_timeline_check(const char *path);

/* Start a trace for `path` and its writer.  The trace is written beside
 * `path` (sdnn_temp_create) and renamed over it at the close, so a run
 * that records nothing (refused as it starts) leaves the previous trace;
 * a device or pipe is written in place.  nreplicas sets the tracks; opts
 * may be NULL (defaults).  SDNN_ERR_IO names the file and the timeline=
 * key. */
sdnn_status sdnn_timeline_open(const char *path, int nreplicas, const sdnn_timeline_opts *opts,
                               sdnn_timeline **out);

/* Stop the writer, write what is left and the end of the document, close
 * the file, rename it over the path (unless it holds no record and the
 * path exists: then it is removed) and free tl (NULL is fine).
 * SDNN_ERR_IO when a write failed; the file is then incomplete. */
sdnn_status sdnn_timeline_close(sdnn_timeline *tl);

/* Async-signal-safe, for a SIGINT/SIGTERM handler: the open trace goes to
 * its path as it is (without its end, which Perfetto and chrome://tracing
 * tolerate) if it holds records, else its file is removed. */
void sdnn_timeline_interrupted(void);

/* A span [t0, t1] (sdnn_now_s readings) on `track`.  a0..a2 are the kind's
 * numeric arguments, s its string argument (a static string or NULL);
 * unused ones are ignored.  Only the track's own thread may record on it. */
void sdnn_timeline_span(sdnn_timeline *tl, int track, sdnn_tl_kind kind, double t0, double t1,
                        double a0, double a1, double a2, const char *s);

/* A counter value at time t, recorded on the main track. */
void sdnn_timeline_counter(sdnn_timeline *tl, sdnn_tl_kind kind, double t, double value);

/* Records dropped so far because a ring was full (all tracks). */
size_t sdnn_timeline_dropped(sdnn_timeline *tl);

/* The path the timeline writes. */
const char *sdnn_timeline_path(const sdnn_timeline *tl);

#endif
