/*
 * readable: the check every input file passes before anything opens it
 * (implemented in saveio.c).  Apart from saveio.h so that code that must
 * not see darknet.h (cfgcheck.c, whose names clash with it) can use it.
 */
#ifndef SDNN_READABLE_H
#define SDNN_READABLE_H

#include "scalednn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Check an input file (cfg, data file, list, image, label, weights, .ef,
 * profile) before anything opens it: it must exist, be a regular file (a
 * FIFO, a directory, a device such as /dev/zero or /dev/null, a socket are
 * refused without being opened: they would block or stream forever) and be
 * readable; SDNN_ERR_IO naming the file and what it is otherwise.  Every
 * path of the user's that reaches libdarknet's readers (read_cfg,
 * read_data_cfg, get_paths, load_image, load_weights: they exit() or hang
 * on such files) passes this check first. */
sdnn_status sdnn_check_readable(const char *path);

/* What a stat() st_mode is, for messages: "a regular file", "a directory",
 * "a named pipe (FIFO)", "a character device", "a block device", "a
 * socket". */
const char *sdnn_file_kind(unsigned mode);

#ifdef __cplusplus
}
#endif
#endif
