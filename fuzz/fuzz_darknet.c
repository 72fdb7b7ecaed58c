/*
 * libFuzzer target: what the checks accept, libdarknet must parse.  A cfg
 * that passes the [scalednn] parser and the structure check (cfgcheck.c)
 * is stripped and handed to Debian's parse_network_cfg, as every command
 * does; a crash or abort there is a cfg the checker should have refused.
 * To keep the fuzzer's memory bounded, inputs with a number above 64 are
 * skipped and layer outputs are bounded to 2^22 values (sizes, filters and
 * counts stay small; the structure is what is explored).
 */
#include "cfgcheck.h"
#include "config.h"
#include "replicas.h"

#include <ctype.h>
#include <darknet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* libdarknet prints every layer; keep the fuzzer's output readable. */
    if (!freopen("/dev/null", "w", stdout)) return 0;
    return 0;
}

static int small_numbers(const char *s)
{
    long v = 0;
    int in = 0;
    for (const char *p = s;; ++p) {
        if (isdigit((unsigned char)*p)) {
            v = in ? v * 10 + (*p - '0') : *p - '0';
            in = 1;
            if (v > 64) return 0;
        } else {
            in = 0;
        }
        if (!*p) return 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096 || memchr(data, '\0', size)) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    sdnn_cfg_normalize_eol(text);
    sdnn_config cfg;
    char *stripped = NULL;
    if (small_numbers(text) && sdnn_config_parse_text("fuzz.cfg", text, &cfg, &stripped) == SDNN_OK &&
        sdnn_cfg_check_text_max("fuzz.cfg", text, (double)(1 << 22)) == SDNN_OK) {
        char path[] = "/tmp/sdnn-fuzz-cfg-XXXXXX";
        int fd = mkstemp(path);
        if (fd >= 0) {
            size_t len = strlen(stripped);
            if (write(fd, stripped, len) == (ssize_t)len) {
                close(fd);
                network *net = parse_network_cfg(path);
                if (net) sdnn_network_free(net);
            } else {
                close(fd);
            }
            unlink(path);
        }
    }
    free(stripped);
    free(text);
    return 0;
}
