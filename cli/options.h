/*
 * options: Darknet's option lists (read_data_cfg's `key=value` lines) as
 * the front-end's commands use them.  Here, not in train.h, so evaluate.c
 * and train.c need no header of each other.
 */
#ifndef SDNN_OPTIONS_H
#define SDNN_OPTIONS_H

#include <darknet.h>

/* Darknet's key/value pair (not in darknet.h); the key owns the line. */
typedef struct kvp_ {
    char *key;
    char *val;
    int used;
} kvp_;

/* Frees a read_data_cfg list: every pair, its line, and the list. */
void sdnn_free_options(list *l);

#endif
