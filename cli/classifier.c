/*
 * classifier: `./darknet classifier train DATA CFG [WEIGHTS] [-gpus LIST]`.
 */
#include "commands.h"
#include "train.h"

#include <stdio.h>
#include <string.h>

int sdnn_cmd_classifier(int argc, char **argv)
{
    if (argc >= 1 && strcmp(argv[0], "train") == 0)
        return sdnn_train_command(SDNN_TASK_CLASSIFIER, argc, argv);
    fprintf(stderr, "usage: darknet classifier train DATA CFG [WEIGHTS] [-gpus 0,1,...] [-clear]\n"
                    "                                [-max_batches N] [-csv FILE] [-seed S]\n");
    return 1;
}
