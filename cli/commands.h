/*
 * The ./darknet front-end's commands.  Each returns the process exit code
 * (0 on success); only main() calls exit.
 */
#ifndef SDNN_COMMANDS_H
#define SDNN_COMMANDS_H

/* ./darknet detector train|test ... */
int sdnn_cmd_detector(int argc, char **argv);
/* ./darknet detector calc_anchors DATA -num_of_clusters N -width W -height H (anchors.c) */
int sdnn_cmd_detector_calc_anchors(int argc, char **argv);
/* ./darknet detector valid|recall DATA CFG WEIGHTS (evaluate.c) */
int sdnn_cmd_detector_valid(int argc, char **argv);
int sdnn_cmd_detector_recall(int argc, char **argv);
/* ./darknet classifier train ... */
int sdnn_cmd_classifier(int argc, char **argv);
/* ./darknet scalednn gen-shapes OUTDIR [-n N] [-valid N] [-seed S] [-size PX] */
int sdnn_cmd_gen_shapes(int argc, char **argv);
/* ./darknet scalednn fmnist OUTDIR [-n N] [-valid N] */
int sdnn_cmd_fmnist(int argc, char **argv);

#endif
