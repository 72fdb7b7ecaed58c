/*
 * datacheck: the training data checked before the first step.
 *
 * Images: libdarknet's loaders (OpenCV, stb) turn a file they cannot
 * decode into a blank image and train on it; sdnn_image_check walks the
 * file's structure itself, in this process, without decoding pixels: PNG
 * (signature, every chunk's CRC-32, IHDR first with a size > 0, an IDAT,
 * IEND), JPEG (SOI, every marker segment inside the file, a frame header
 * with a size > 0, the entropy-coded scans up to EOI), BMP (headers, pixel
 * data inside the file for uncompressed rows) and PNM (header, binary
 * raster inside the file).  A directory, a FIFO, a device (stat()ed,
 * never opened), an empty file and any other format are refused by name.
 *
 * Labels: Darknet reads "class x y w h" per line with fscanf and trains
 * on whatever it gets (a nan coordinate or a class >= classes crashes the
 * yolo layer later).  sdnn_label_scan checks every line.
 */
#ifndef SDNN_DATACHECK_H
#define SDNN_DATACHECK_H

#include "scalednn.h"
#include <stddef.h>

/* SDNN_OK, or SDNN_ERR_IO / SDNN_ERR_INVALID with "image PATH: reason". */
sdnn_status sdnn_image_check(const char *path);

/* Called for each bad line of a label file: its 1-based number and why. */
typedef void (*sdnn_label_issue_fn)(void *ctx, const char *name, int line, const char *text,
                                    const char *why);

/*
 * Check label text (one "class x y w h" box per line, blank lines allowed):
 * class an integer in [0, classes), x and y finite in [0, 1], w and h
 * finite in (0, 1], exactly five columns; not x = y = 0 (libdarknet's mark
 * of an empty slot, on which it crashes), and the part of the box inside
 * the image at least 0.001 wide and high (libdarknet drops smaller boxes).  Each bad line goes to `issue`
 * (may be NULL).  When clean != NULL it receives the good lines (it must
 * hold strlen(text) + 2 bytes).  Returns the number of bad lines; *boxes
 * (may be NULL) gets the number of good ones.
 */
int sdnn_label_scan(const char *name, const char *text, int classes, char *clean, int *boxes,
                    sdnn_label_issue_fn issue, void *ctx);

#endif
