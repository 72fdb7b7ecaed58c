/*
 * libFuzzer target: the cfg reader.  Any bytes go through what every
 * command does with a cfg file before libdarknet sees it: the line-end
 * normalisation, the [scalednn] section parser and the structure check
 * (config.c, cfgcheck.c).  Neither may crash, leak or read out of bounds
 * (built with ASan + UBSan), and an accepted cfg must keep its [net]
 * first: that is checked again on the stripped text.
 */
#include "cfgcheck.h"
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    if (memchr(data, '\0', size) == NULL) {
        sdnn_cfg_normalize_eol(text);
        sdnn_config cfg;
        char *stripped = NULL;
        if (sdnn_config_parse_text("fuzz.cfg", text, &cfg, &stripped) == SDNN_OK &&
            sdnn_cfg_check_text("fuzz.cfg", text) == SDNN_OK) {
            /* What libdarknet receives passes the check too. */
            if (sdnn_cfg_check_text("stripped", stripped) != SDNN_OK) abort();
        }
        free(stripped);
    }
    free(text);
    return 0;
}
