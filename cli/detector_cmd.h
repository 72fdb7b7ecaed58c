/*
 * What the detector commands of the fork's workflow (map, valid, recall,
 * test, calc_anchors) share around the one argument parser: the end of their
 * flag tables and the parse with its once-only no-window note.
 */
#ifndef SDNN_CLI_DETECTOR_CMD_H
#define SDNN_CLI_DETECTOR_CMD_H

#include "flags.h"

/* The last entries of a detector command's flag table: the fork's window
 * flags (accepted, nothing shown) and its network flags (refused). */
#define SDNN_DETECTOR_FLAGS_TAIL(dont_show, show_imgs)                                             \
    SDNN_FLAGS_NO_WINDOW(dont_show, show_imgs), SDNN_FLAGS_FORK_REFUSED

/* .flags and .nflags of an sdnn_command from a flag array. */
#define SDNN_CMD_FLAGS(table) .flags = (table), .nflags = (int)(sizeof(table) / sizeof((table)[0]))

/* sdnn_args_parse(cmd, argc, argv, 1, pos, npos), then the no-window note
 * when -dont_show or -show_imgs was given.  -1: go on; otherwise the exit
 * status of the command (0 after -h, 2 for bad usage, already printed). */
int sdnn_detector_args(const sdnn_command *cmd, int argc, char **argv, const char **pos, int *npos,
                       const int *dont_show, const int *show_imgs);

#endif
