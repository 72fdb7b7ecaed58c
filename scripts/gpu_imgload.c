/*
 * gpu_imgload.c — an image loader for libdarknet where OpenCV is absent
 * (the lent GPU machine: scripts/gpu_bundle.sh puts empty stand-ins for
 * Debian's four OpenCV sonames in the bundle, so libdarknet loads, but a
 * call into cv::imread would stop the program with "symbol lookup error").
 *
 * Debian's libdarknet is built with OpenCV: load_image() calls
 * load_image_cv() through the PLT.  This library defines load_image_cv and
 * hands the file to libdarknet's own stb_image path (load_image_stb, also
 * exported), which needs no other library.  Preloaded (LD_PRELOAD) it comes
 * first in the symbol search, so every image Darknet's loader threads open
 * (load_data -> load_image_color -> load_image) is read by stb_image.
 *
 * A file stb_image cannot read is reported on stderr and replaced by a
 * 10x10 image, as Debian's OpenCV path does (load_image_stb itself would
 * end the program with exit status 0).
 *
 * Built by scripts/gpu_bundle.sh:
 *   cc -shared -fPIC -I DARKNET/include gpu_imgload.c -o libsdnn_imgload.so
 * (no -ldarknet: the symbols resolve in the program that loads libdarknet).
 */
#include <darknet.h>

#include <stdio.h>

image load_image_stb(char *filename, int channels);
image load_image_cv(char *filename, int channels);
int stbi_info(char const *filename, int *x, int *y, int *comp);
const char *stbi_failure_reason(void);

image load_image_cv(char *filename, int channels)
{
    int w, h, c;
    if (!stbi_info(filename, &w, &h, &c)) {
        fprintf(stderr, "Cannot load image \"%s\" (stb_image: %s)\n", filename,
                stbi_failure_reason());
        return make_image(10, 10, 3);
    }
    return load_image_stb(filename, channels);
}
