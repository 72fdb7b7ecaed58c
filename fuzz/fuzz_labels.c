/*
 * libFuzzer target: the label parser (datacheck.c sdnn_label_scan).  The
 * first byte picks the class count; the rest is a label file.  Besides not
 * crashing, the good lines it keeps must pass a second scan unchanged,
 * with no bad line, the same box count.
 */
#include "datacheck.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 16) return 0;
    int classes = 1 + data[0];
    size_t n = size - 1;
    char *text = malloc(n + 1);
    char *clean = malloc(n + 2);
    char *again = malloc(n + 2);
    if (!text || !clean || !again) abort();
    memcpy(text, data + 1, n);
    text[n] = '\0';
    for (size_t i = 0; i < n; ++i)
        if (text[i] == '\0') text[i] = ' ';
    int boxes = 0, boxes2 = -1;
    sdnn_label_scan("fuzz.txt", text, classes, clean, &boxes, NULL, NULL);
    if (sdnn_label_scan("clean.txt", clean, classes, again, &boxes2, NULL, NULL) != 0) abort();
    if (boxes2 != boxes || strcmp(clean, again) != 0) abort();
    free(text);
    free(clean);
    free(again);
    return 0;
}
