#!/bin/sh
# The README's main job: set-up, build, the small built-in dataset, then the
# shapes detector trained on 2 CPU replicas to the same validation mAP in
# stock Darknet mode and in scalednn mode (as shipped, and with fp16
# gradients) on the same engine, and the time-to-accuracy comparison.
#   TARGET=T   validation mAP@0.5 every run trains to (default 0.30; a
#              1-replica run reaches it, bench/RESULTS.md)
#   MAX=N      iteration cap of every run (default 2000, the cfg's
#              max_batches): a run that does not reach TARGET by then is
#              reported as not reached, not hidden
#   EVERY=N    iterations between evaluations (default 100)
#   SEED=S     data order and initial weights (default 1)
# Evaluations run between steps and are not counted in the training time.
set -eu
cd "$(dirname "$0")/.."
TARGET=${TARGET:-0.30}
MAX=${MAX:-2000}
EVERY=${EVERY:-100}
SEED=${SEED:-1}
sh scripts/setup.sh
make -j2
if [ ! -f data/shapes/train.txt ]; then
    ./darknet scalednn gen-shapes data/shapes -n 512 -valid 64 -seed 1
fi
mkdir -p runs
sed 's/^compress=none/compress=fp16/' cfg/shapes-scalednn.cfg >runs/shapes-scalednn-fp16.cfg

run() { # label cfg
    rm -f "runs/$1.csv"
    echo "== $1 ($2), -gpus 0,1, until mAP@0.5 >= $TARGET (at most $MAX iterations)"
    ./darknet detector train cfg/shapes.data "$2" -gpus 0,1 -max_batches "$MAX" -seed "$SEED" \
        -map -map_every "$EVERY" -target "$TARGET" -csv "runs/$1.csv" >"runs/$1.log" 2>&1 ||
        { tail -20 "runs/$1.log"; exit 1; }
    grep -E "^scalednn: target|Saving|saved" "runs/$1.log" | tail -n 2 || true
}
run stock cfg/shapes.cfg
run scalednn cfg/shapes-scalednn.cfg
run scalednn-fp16 runs/shapes-scalednn-fp16.cfg
echo
echo "== time to mAP@0.5 >= $TARGET on 2 CPU replicas (logs and CSVs in runs/, weights in backup/)"
sh scripts/compare.sh -target "$TARGET" stock=runs/stock.csv scalednn=runs/scalednn.csv \
    scalednn-fp16=runs/scalednn-fp16.csv
echo "(time: training only, evaluations excluded; saving: against stock's time to the target;"
echo " MB/step: what each replica sends a step, collective.h's definition: stock's central"
echo " average 2(W-1)/W of the weights every interval, scalednn's ring 2(W-1)/W of the coded gradient)"
echo
echo "== throughput of the same runs"
sh scripts/compare.sh stock=runs/stock.csv scalednn=runs/scalednn.csv \
    scalednn-fp16=runs/scalednn-fp16.csv
echo
# What each run's weights draw (issue 26: the fork's default threshold 0.25).
# Only measured and printed here: the schedule is unchanged, so these runs
# stop at TARGET and are not expected to reach a recall of 0.8 at 0.25.
echo "== each run's final weights at the fork's threshold 0.25 on the validation set"
first=$(head -n 1 data/shapes/valid.txt)
second=$(sed -n 2p data/shapes/valid.txt)
for r in stock:cfg/shapes.cfg scalednn:cfg/shapes-scalednn.cfg \
    scalednn-fp16:runs/shapes-scalednn-fp16.cfg; do
    label=${r%%:*}
    cfg=${r#*:}
    w="backup/$(basename "$cfg" .cfg)_final.weights"
    printf '%-14s ' "$label"
    ./darknet detector map cfg/shapes.data "$cfg" "$w" -thresh 0.25 2>/dev/null |
        grep 'for conf_thresh' || echo "(no map: $w)"
    n=1
    for img in "$first" "$second"; do
        ./darknet detector test cfg/shapes.data "$cfg" "$w" "$img" -thresh 0.25 \
            -out "runs/pred-$label-$n" >/dev/null 2>&1 || echo "(detector test failed on $img)"
        n=$((n + 1))
    done
done
echo "(pictures with the boxes drawn at 0.25: runs/pred-RUN-1.jpg, runs/pred-RUN-2.jpg)"
echo
echo "== charts (mAP vs time, loss vs time and iteration, images/s, exposed communication)"
sh scripts/plot.sh -o runs -t "shapes detector, 2 CPU replicas: stock vs scalednn" \
    runs/stock.csv runs/scalednn.csv runs/scalednn-fp16.csv
