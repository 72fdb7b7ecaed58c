/*
 * cfgkeys: which keys of a Darknet cfg section mean something, and the
 * nearest name to a misspelt one.
 *
 * Debian's libdarknet (parse_* in its parser.c) reads the keys it knows and
 * silently ignores every other one, so `mosiac=1` or `fliters=16` would
 * train a network other than the one the user wrote.  cfgcheck refuses
 * such keys; this table says which keys libdarknet reads per section type,
 * and which keys of the maintained fork (hank-ai/darknet) change nothing
 * in a run here (GPU streams and memory, charts, tracking at detection
 * time) and may pass with a note.  The fork's keys that are built here
 * (plugin/darknet/dialect.c, yolo_dialect.c, plugin/data/batch.c) and the
 * fork's keys that change the network and are refused by name are
 * cfgcheck's tables, next to their value checks.
 */
#ifndef SDNN_CFGKEYS_H
#define SDNN_CFGKEYS_H

#include <stddef.h>

/* The name in names[0 .. n) nearest to `word` by edit distance (insert,
 * delete, substitute, swap two neighbours: 1 each); ties go to the first.
 * NULL when n is 0.  *dist (may be NULL) receives the distance. */
const char *sdnn_nearest_name(const char *word, const char *const *names, size_t n,
                              int *dist);

/* The canonical name of a section type Debian's libdarknet knows (the
 * aliases: network -> net, conv -> convolutional, ...), or NULL. */
const char *sdnn_cfg_section_canonical(const char *type);

/* Does libdarknet read `key` in a section of canonical type `type`? */
int sdnn_cfg_key_read(const char *type, const char *key);

/* Is `key` a key of the maintained fork that changes nothing here in a
 * section of canonical type `type`? */
int sdnn_cfg_key_fork_noop(const char *type, const char *key);

/* Append the keys of both kinds above for `type` to names[*n .. max);
 * *n grows. */
void sdnn_cfg_key_names(const char *type, const char **names, size_t max, size_t *n);

/* Append every section type name libdarknet knows, with their aliases when
 * `aliases` is non-zero. */
void sdnn_cfg_section_names(const char **names, size_t max, size_t *n, int aliases);

#endif
