/*
 * efstate: the `.ef` file of error-feedback state (residuals, and
 * velocities under momentum correction), per replica and compressed
 * bucket, saved next to a weights file as WEIGHTS.ef.
 *
 * Format (host byte order): a header (magic "SDNNEF01", replicas, buckets,
 * whether velocities follow, the codec's name, the weights' seen counter),
 * each bucket's number of floats (0: the bucket keeps no state), then for
 * every replica and every bucket with state its residual (and velocity),
 * and an FNV-1a checksum of everything before it.
 *
 * The state itself stays where its owner keeps it (engine memory): the
 * owner describes it with an sdnn_ef_view whose read/write move one
 * buffer to or from host memory.  sdnn_ef_save writes the file atomically;
 * sdnn_ef_load checks the whole file (header against the view and `seen`,
 * sizes, checksum) before it writes any buffer, so a file that does not
 * match leaves the state as it was (SDNN_ERR_IO: no file; SDNN_ERR_INVALID
 * naming what differs).
 */
#ifndef SDNN_EFSTATE_H
#define SDNN_EFSTATE_H

#include "scalednn.h"
#include <stddef.h>
#include <stdint.h>

enum { SDNN_EF_RESIDUAL = 0, SDNN_EF_VELOCITY = 1 };

typedef struct sdnn_ef_view {
    int nrep;
    int nbuckets;
    int velocity;              /* 1: a velocity follows each residual */
    const char *codec;         /* the run's compress= name */
    const size_t *count;       /* [nbuckets] floats of state, 0: none */
    void *user;
    /* Buffer `which` (SDNN_EF_*) of replica r, bucket b, to / from host. */
    sdnn_status (*read)(void *user, int r, int b, int which, float *host, size_t n);
    sdnn_status (*write)(void *user, int r, int b, int which, const float *host, size_t n);
} sdnn_ef_view;

sdnn_status sdnn_ef_save(const sdnn_ef_view *v, const char *path, uint64_t seen);
sdnn_status sdnn_ef_load(const sdnn_ef_view *v, const char *path, uint64_t seen);

#endif
