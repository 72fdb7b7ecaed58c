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

/* The prediction flags of map, valid and test: -nms (map and valid) and
 * -letter_box (sdnn_detector_input: letterboxed, or stretched without it). */
#define SDNN_DETECTOR_FLAG_NMS(var)                                                                \
    {.name = "-nms", .kind = SDNN_FLAG_FLOAT, .dst = (var), .lo = 0, .lo_open = 1, .hi = 1,      \
     .meta = "X", .help = "non-maximum suppression threshold (0.45)"}
#define SDNN_DETECTOR_FLAG_LETTER_BOX(var)                                                         \
    {.name = "-letter_box", .kind = SDNN_FLAG_SWITCH, .dst = (var),                              \
     .help = "letterbox each image (aspect kept, as Debian's darknet); stretched without it, "   \
             "as the fork"}

/* .flags and .nflags of an sdnn_command from a flag array. */
#define SDNN_CMD_FLAGS(table) .flags = (table), .nflags = (int)(sizeof(table) / sizeof((table)[0]))

/* sdnn_args_parse(cmd, argc, argv, 1, pos, npos), then the no-window note
 * when -dont_show or -show_imgs was given.  -1: go on; otherwise the exit
 * status of the command (0 after -h, 2 for bad usage, already printed). */
int sdnn_detector_args(const sdnn_command *cmd, int argc, char **argv, const char **pos, int *npos,
                       const int *dont_show, const int *show_imgs);

#endif
