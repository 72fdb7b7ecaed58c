#!/bin/sh
# The README's main job: set-up, build, the small built-in dataset, then the
# shapes detector trained on 2 CPU replicas in stock Darknet mode and in
# scalednn mode on the same engine, and the comparison table.
#   ITERS=N  iterations per run (default 300; both runs see the same images)
set -eu
cd "$(dirname "$0")/.."
ITERS=${ITERS:-300}
sh scripts/setup.sh
make -j2
if [ ! -f data/shapes/train.txt ]; then
    ./darknet scalednn gen-shapes data/shapes -n 512 -valid 64 -seed 1
fi
mkdir -p runs
echo "== stock Darknet protocol (cfg/shapes.cfg, no [scalednn] section), -gpus 0,1"
./darknet detector train cfg/shapes.data cfg/shapes.cfg -gpus 0,1 -max_batches "$ITERS" \
    -seed 1 -csv runs/stock.csv >runs/stock.log 2>&1 || { tail -20 runs/stock.log; exit 1; }
tail -n 2 runs/stock.log
echo "== scalednn protocol (cfg/shapes-scalednn.cfg), -gpus 0,1"
./darknet detector train cfg/shapes.data cfg/shapes-scalednn.cfg -gpus 0,1 -max_batches "$ITERS" \
    -seed 1 -csv runs/scalednn.csv >runs/scalednn.log 2>&1 || { tail -20 runs/scalednn.log; exit 1; }
tail -n 2 runs/scalednn.log
echo
echo "== comparison (logs and CSVs in runs/, weights in backup/)"
sh scripts/compare.sh stock=runs/stock.csv scalednn=runs/scalednn.csv
echo
echo "== charts (loss vs time and iteration, images/s, exposed communication)"
sh scripts/plot.sh -o runs -t "shapes detector, 2 CPU replicas: stock vs scalednn" \
    runs/stock.csv runs/scalednn.csv
