/*
 * cfgcheck: the structure of a Darknet cfg, checked before libdarknet reads
 * it.  Debian's read_cfg/parse_network_cfg crash (SIGSEGV, SIGABRT, SIGFPE)
 * on a key before the first section, an empty file, an unknown section
 * type, a first section that is not [net], input sizes <= 0, a batch
 * smaller than its subdivisions, a [yolo]/[region] head that does not fit
 * the filters of the convolution before it, anchors beyond num, a route or
 * shortcut to a layer that does not exist.  Each becomes an error naming
 * the file, the line, the section and the key.
 *
 * CRLF files are not an error: sdnn_cfg_normalize_eol turns them into LF
 * text before anything else reads them.
 */
#ifndef SDNN_CFGCHECK_H
#define SDNN_CFGCHECK_H

#include "scalednn.h"
#include <stddef.h>

/* Rewrite "\r\n" as "\n" in place (and a '\r' ending the text); returns
 * the number of line ends changed. */
size_t sdnn_cfg_normalize_eol(char *text);

/*
 * Check cfg text (LF line ends; [scalednn] sections are skipped: config.c
 * owns them).  SDNN_OK or SDNN_ERR_INVALID with a message such as
 *   cfg/x.cfg:12: [net] subdivisions=16: batch=8 / subdivisions=16 is 0 ...
 * Nothing is allocated on success or failure that the caller must free.
 */
sdnn_status sdnn_cfg_check_text(const char *name, const char *text);

/* As above with a bound on every layer's output (values, batch included);
 * sdnn_cfg_check_text uses INT_MAX, what Darknet's int counts hold.  The
 * fuzzer passes a small bound to keep its memory in check. */
sdnn_status sdnn_cfg_check_text_max(const char *name, const char *text, double max_floats);

/* Read `path`, normalise line ends and check it as above. */
sdnn_status sdnn_cfg_check_file(const char *path);

/* The checks of sdnn_cfg_check_text, and each layer's output channels as
 * the checker computes them (a grouped route: the slice; -1 where not
 * followed) into chan[0 .. min(*n, max)); *n = the number of layers. */
sdnn_status sdnn_cfg_channels(const char *name, const char *text, long *chan, int max, int *n);

#endif
