/*
 * ./darknet scalednn gradcheck CFG [-engine cpu|gpu] [-samples N] [-seed S] [-eps E]
 *   checks the gradient training computes for CFG against central finite
 *   differences of the loss, layer by layer (plugin/gradcheck.h), and prints
 *   the table.  Exit code: 0 every layer within its threshold, 1 a layer
 *   above it or a failure, 2 bad usage or an engine this build cannot run.
 */
#ifndef SDNN_CLI_GRADCHECK_H
#define SDNN_CLI_GRADCHECK_H

/* argv[0] = "gradcheck" */
int sdnn_cmd_gradcheck(int argc, char **argv);

#endif
