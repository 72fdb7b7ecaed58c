/*
 * libFuzzer target: the image structure walks (datacheck.c
 * sdnn_image_check: PNG chunks and CRCs, JPEG markers, BMP and PNM
 * headers).  The bytes are put in a memfd and checked by its path.
 */
#include "datacheck.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 20) return 0;
    int fd = memfd_create("fuzz-image", MFD_CLOEXEC);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    (void)sdnn_image_check(path);
    close(fd);
    return 0;
}
