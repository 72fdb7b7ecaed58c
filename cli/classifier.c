/*
 * classifier: `./darknet classifier train DATA CFG [WEIGHTS] [-gpus LIST]`
 * and `./darknet classifier valid DATA CFG WEIGHTS` (in evaluate.c).
 */
#include "commands.h"
#include "evaluate.h"
#include "train.h"

#include <stdio.h>
#include <string.h>

int sdnn_cmd_classifier(int argc, char **argv)
{
    if (argc >= 1 && strcmp(argv[0], "train") == 0)
        return sdnn_train_command(SDNN_TASK_CLASSIFIER, argc, argv);
    if (argc >= 1 && strcmp(argv[0], "valid") == 0) return sdnn_cmd_classifier_valid(argc, argv);
    fprintf(stderr, "usage: darknet classifier train|valid ... (-h after the command lists its "
                    "flags)\n");
    return 2;
}
