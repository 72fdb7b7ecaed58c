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

/* Async-signal-safe: remove the temporary file of the save in progress,
 * if any (a SIGINT/SIGTERM handler calls it before the process ends, so no
 * NAME.tmp.PID is left behind). */
void sdnn_save_interrupted(void);

sdnn_status sdnn_mkdirs(const char *dir);

#ifdef __cplusplus
}
#endif
#endif
