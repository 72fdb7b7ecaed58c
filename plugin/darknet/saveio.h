/*
 * saveio: crash-safe weights files.
 *
 * A checkpoint must survive a crash or a kill at any moment: Darknet's
 * save_weights writes the target in place, so a kill half-way through leaves
 * a torn file.  Here the weights go to a temporary file in the same directory
 * that is synced and then renamed over the target.  Darknet's file functions
 * end the process when fopen fails; these check first and return a status
 * instead.
 */
#ifndef SDNN_SAVEIO_H
#define SDNN_SAVEIO_H

#include "scalednn.h"
#include "readable.h"
#include <darknet.h>

#include <stdatomic.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Save net's weights in Darknet's format to `path` atomically: write to a
 * temporary file in the same directory (sdnn_temp_create), fsync it, rename
 * it over `path`, fsync the directory.  A crash at any moment leaves either the
 * old complete file or the new complete file at `path`.  Errors (directory
 * missing, not writable, disk full: the file written is shorter than the
 * network's weights) return SDNN_ERR_IO naming the path and strerror, remove
 * the temporary file, and leave `path` untouched.  Saves within one process
 * are serialised; a file already under a temporary name (a user's, or a
 * crashed process's that had the same pid) is left alone. */
sdnn_status sdnn_save_weights_atomic(network *net, const char *path);

/* Write len bytes of buf to `path` the same crash-safe way (temporary file,
 * fsync, rename, directory fsync); SDNN_ERR_IO naming the path otherwise,
 * and `path` is left as it was. */
sdnn_status sdnn_write_file_atomic(const char *path, const void *buf, size_t len);

/* A new temporary file for `dest`, in dest's folder (so a rename over
 * dest is atomic): DEST.tmp.PID, or DEST.tmp.PID.HEX (16 hex digits of a
 * counter and the clock) when that name is taken, created with
 * O_CREAT|O_EXCL so it is never a file that existed (a user's, another
 * process's).  The name goes to out (len bytes), the descriptor (write
 * only) to *fd.  SDNN_ERR_IO naming the file otherwise. */
sdnn_status sdnn_temp_create(const char *dest, char *out, size_t len, int *fd);

/* A temporary file that a SIGINT/SIGTERM handler may have to remove.
 * sdnn_temp_create_guarded makes it (as sdnn_temp_create) with those two
 * signals blocked in the calling thread and the guard marked "being
 * made", so there is no moment when the file exists and a handler cannot
 * know it: a handler in another thread waits that moment out in
 * sdnn_temp_guard_owned.  Static storage (zero: no file); one file at a
 * time per guard. */
typedef struct sdnn_temp_guard {
    char path[4200];
    atomic_int state;   /* 0 no file, 1 path is ours, 2 being made, 3 opened by name */
    atomic_long opener; /* the thread id of the opener in state 3 */
} sdnn_temp_guard;

sdnn_status sdnn_temp_create_guarded(sdnn_temp_guard *g, const char *dest, char *out, size_t len,
                                     int *fd);

/* on: the calling thread is about to open the guarded file by name (a
 * library that takes a file name); off: it has it open.  Meanwhile only
 * that thread may remove it (sdnn_temp_guard_forward). */
void sdnn_temp_guard_by_name(sdnn_temp_guard *g, int on);

/* For a signal handler: 1 when the guarded file is being opened by name by
 * another thread, after handing that thread the signal `sig` (its handler
 * removes the file; the calling one returns); 0 otherwise. */
int sdnn_temp_guard_forward(sdnn_temp_guard *g, int sig);

/* The guarded file was renamed into place or removed: the handler leaves
 * it alone from now on. */
void sdnn_temp_guard_release(sdnn_temp_guard *g);

/* For a signal handler (async-signal-safe): the guarded file's name when
 * it exists and is ours, else NULL. */
const char *sdnn_temp_guard_owned(sdnn_temp_guard *g);

/* The folder `path` would be written in exists and takes a new file now
 * (one is created with sdnn_temp_create and removed: access(W_OK) answers
 * yes to root on a read-only folder).  SDNN_ERR_IO "its folder DIR ..."
 * otherwise, for the caller to prefix with the flag or key. */
sdnn_status sdnn_check_dir_writable(const char *path);

/* An output file the command is about to write: `path` either does not
 * exist or is a regular file (a FIFO would block the write until something
 * reads it, a directory or a device would fail it or be replaced); and its
 * folder takes a new file (sdnn_check_dir_writable).  SDNN_ERR_IO naming
 * the file and what it is otherwise, for the caller to prefix with the flag
 * or role. */
sdnn_status sdnn_check_output_file(const char *path);

/* Check the weights file at `path` fits `net` before Darknet's load_weights
 * (which reads whatever is there and exits on a missing file): the header
 * must be readable and the size must end exactly at a layer boundary of
 * net's saved layout.  With require_full the file must hold every layer;
 * without it a prefix is fine (Darknet's partial pretrained files such as
 * darknet53.conv.74).  *layers gets the number of leading layers the file
 * covers.  SDNN_ERR_IO / SDNN_ERR_INVALID naming the file otherwise. */
sdnn_status sdnn_check_weights_file(const network *net, const char *path, int require_full,
                                    int *layers);

/* Create a directory (and its parents) if missing, mode 0755; SDNN_ERR_IO on
 * failure (also when the path exists and is not a directory). */
/* Before an output the user named is written (CSV, trace): SDNN_OK when
 * `path` does not exist, is empty, or starts with one of `ours` (a
 * NULL-terminated list of prefixes); otherwise SDNN_ERR_INVALID naming
 * `what` (e.g. "-csv"), the file and what it looks like (a Darknet weights
 * file, or its first bytes), so nothing foreign is overwritten. */
sdnn_status sdnn_check_overwrite(const char *path, const char *what, const char *const *ours);

/* One run per backup folder: an exclusive flock on DIR/.scalednn.lock,
 * held while *fd stays open (close it to release; the file stays).  The
 * holder writes its pid and command line into the file; a second run gets
 * SDNN_ERR_INVALID naming them. */
#define SDNN_LOCK_NAME ".scalednn.lock"
sdnn_status sdnn_lock_dir(const char *dir, int *fd);

/* The backup folder is writable now (a new file, sdnn_temp_create,
 * written, synced and removed in it).  Nothing else in it is removed. */
sdnn_status sdnn_prepare_dir(const char *dir);

/* Remove the temporary files that saves of the cfg BASE left in DIR when
 * their process died: only names BASE{.backup,_final.weights,_N.weights,
 * _last.weights,_best.weights}[.ef].tmp.PID[.HEX] whose pid no longer runs, and
 * only when the content is what such a save writes first (empty, or the
 * start of a Darknet weights header, or of the .ef magic).  Any other file,
 * a user's report.tmp.2024 included, is left alone.  Call it once the run
 * is past its refusals.  *cleaned (may be NULL) gets how many. */
sdnn_status sdnn_clean_temps(const char *dir, const char *base, int *cleaned);

/* Async-signal-safe, for a SIGINT/SIGTERM handler: remove the temporary
 * file of the save in progress, if any, so no NAME.tmp.PID is left behind;
 * 0.  While Darknet's save_weights opens that file by name, removing it from
 * another thread would let the open make it again: then the signal `sig` is
 * handed to the saving thread, whose handler does the work, and 1 says the
 * calling handler should return and do nothing else. */
int sdnn_save_interrupted(int sig);

sdnn_status sdnn_mkdirs(const char *dir);

#ifdef __cplusplus
}
#endif
#endif
