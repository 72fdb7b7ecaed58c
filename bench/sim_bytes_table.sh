#!/bin/sh
# bench/sim_bytes_table.sh — bytes a step per codec and layout on simulated devices (GPU=sim):
# bytes each replica sends a step as the progress line reports them ("MB exchanged"),
# for backend=nccl and backend=mpi, 1 process x 4 devices and 2 processes x 2 devices,
# every codec, bucket_mb=4 and auto, on the yolov3-tiny-shaped net (Debian's
# yolov3-tiny.cfg at 32x32, batch 2, random=0: 8,852,366 parameters, 35.41 MB fp32; the
# size does not depend on the input, and without multi-scale each step stays at 32x32),
# beside the cost model's figure (bucket_mb=4: `scalednn simulate`, W = 4; auto: the
# "predicted: X MB on the wire" line of each run's own plan), the ratio to none's of
# the same layout, backend and buckets, and what the
# planner picks on NCCL at 2 .. 64 ranks (`scalednn simulate ... -nccl 1`).
# Bytes, not speed: each run is one step (bucket_mb=4: 4 iterations of a world of 4)
# or three (auto: profile_iters=1, the plan after the 2nd step; the 3rd step's bytes).
# On simulated devices the NCCL is sim/nccl.c's: the host logic, the byte accounting and
# the collective chosen, never real NCCL, its protocols or its timing.
#
#   sh bench/sim_bytes_table.sh [BUILD]      (BUILD defaults to build-sim)
#
# Prints markdown tables on stdout; the runs' logs stay in the printed work folder.
set -u
B=${1:-build-sim}
ROOT=$(pwd)
BIN=$ROOT/$B/darknet
YOLO=${SDNN_YOLO_CFG:-/usr/share/darknet/cfg/yolov3-tiny.cfg}
W=$(mktemp -d "${TMPDIR:-/tmp}/sdnn-simbytes-XXXXXX")
CODECS="none fp16 bf16 int8 topk"
[ -x "$BIN" ] || { echo "no $BIN (make GPU=sim BUILD=$B first)" >&2; exit 1; }
[ -r "$YOLO" ] || { echo "no $YOLO (Debian's darknet package)" >&2; exit 1; }
command -v mpirun >/dev/null 2>&1 || { echo "no mpirun: the 2 x 2 layout needs it" >&2; exit 1; }

SDNN_SIM_DEVICES=2 "$BIN" scalednn gen-shapes "$W/shapes" -n 16 -valid 4 -seed 3 >"$W/gen.log" 2>&1 ||
    { echo "gen-shapes failed ($W/gen.log)" >&2; exit 1; }
printf 'classes=4\ntrain=%s/shapes/train.txt\nvalid=%s/shapes/valid.txt\nnames=%s/shapes/shapes.names\nbackup=%s/backup/\n' \
    "$W" "$W" "$W" "$W" >"$W/s.data"
mkdir -p "$W/backup"

# cfg TAG BACKEND CODEC BUCKETS
cfg() {
    sed -e 's/^width=.*/width=32/' -e 's/^height=.*/height=32/' -e 's/^batch=.*/batch=2/' \
        -e 's/^subdivisions=.*/subdivisions=1/' -e 's/^random=.*/random=0/' "$YOLO" >"$W/$1.cfg"
    printf '\n[scalednn]\nmode=scalednn\noverlap=1\nengine=gpu\nbackend=%s\ncompress=%s\n' \
        "$2" "$3" >>"$W/$1.cfg"
    if [ "$4" = auto ]; then echo "profile_iters=1" >>"$W/$1.cfg"; else echo "bucket_mb=$4" >>"$W/$1.cfg"; fi
    [ "$3" = topk ] && echo "topk_ratio=0.01" >>"$W/$1.cfg"
    return 0
}

# run TAG LAYOUT BACKEND ITERS: the last progress line's MB exchanged ("fail" when none);
# with bucket_mb=auto also the cost model's bytes for the run's own last plan
# ("predicted: X MB on the wire each replica a step") into $W/TAG.pred.
run() {
    if [ "$2" = 2x2 ]; then
        (cd "$W" && SDNN_SIM_DEVICES=2 SDNN_MPI_RUN_TIMEOUT=600 sh "$ROOT/tests/mpi/run.sh" 2 \
            "$BIN" detector train s.data "$1.cfg" -gpus 0,1 -max_batches "$4" -seed 1 \
            -csv "$1.csv") >"$W/$1.log" 2>&1
    elif [ "$3" = mpi ]; then
        (cd "$W" && SDNN_SIM_DEVICES=4 SDNN_MPI_RUN_TIMEOUT=600 sh "$ROOT/tests/mpi/run.sh" 1 \
            "$BIN" detector train s.data "$1.cfg" -gpus 0,1,2,3 -max_batches "$4" -seed 1 \
            -csv "$1.csv") >"$W/$1.log" 2>&1
    else
        (cd "$W" && SDNN_SIM_DEVICES=4 timeout 600 "$BIN" detector train s.data "$1.cfg" \
            -gpus 0,1,2,3 -max_batches "$4" -seed 1 -csv "$1.csv") >"$W/$1.log" 2>&1
    fi
    mb=$(sed -n 's/.* \([0-9.]*\) MB exchanged.*/\1/p' "$W/$1.log" | tail -n 1)
    sed -n 's/^predicted: \([0-9.]*\) MB on the wire each replica a step.*/\1/p' "$W/$1.log" |
        tail -n 1 >"$W/$1.pred"
    echo "${mb:-fail}"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 == a && b + 0 > 0) printf "%.3f", a / b; else print "-" }'; }

# The cost model's MB a replica sends a step at W = 4 (simulate's table, the 4-GPU row):
# none, the codec (bucket_mb=4), the planned variant.
# (none: simulate wants a compressing codec; its none column is the same for any)
predict() {
    cfg "sim-$1" nccl "$1" 4
    c=$1
    [ "$c" = none ] && c=fp16
    "$BIN" scalednn simulate "$W/sim-$1.cfg" -topology pcie -gpus 4 -codec "$c" -bucket_mb 4 \
        -nccl 1 >"$W/sim-$1.log" 2>&1
    awk '$1 == 4 && $2 == 1 { s = $0; sub(/.*\| /, "", s); gsub(/,/, "", s); print s }' "$W/sim-$1.log"
}

echo "work folder: $W"
echo
for bk in 4 auto; do
    iters=4
    [ "$bk" = auto ] && iters=12
    echo "### bucket_mb=$bk (MB each replica sends a step, the progress line; ratio to none's)"
    echo
    echo "| codec | 1x4 nccl | 1x4 mpi | 2x2 nccl | 2x2 mpi | cost model (W = 4) | ratios 1x4 nccl / mpi, 2x2 nccl / mpi |"
    echo "|---|---:|---:|---:|---:|---:|---|"
    for c in $CODECS; do
        row="" rats=""
        for lay in 1x4 2x2; do
            for be in nccl mpi; do
                tag=$lay-$be-$c-$bk
                cfg "$tag" "$be" "$c" "$bk"
                m=$(run "$tag" "$lay" "$be" "$iters")
                eval "mb_${lay}_${be}_${c}=\$m"
                eval "n=\$mb_${lay}_${be}_none"
                row="$row | $m"
                rats="$rats $(ratio "$m" "$n")"
            done
        done
        set -- $(predict "$c")
        p=${2:-?}
        [ "$c" = none ] && p=${1:-?}
        if [ "$bk" = auto ]; then
            # The cost model's bytes for each run's own plan (its last plan table's
            # wire_KB summed); one figure where the four runs planned alike.
            p=$(for lay in 1x4 2x2; do for be in nccl mpi; do
                cat "$W/$lay-$be-$c-$bk.pred" 2>/dev/null || echo "?"; done; done |
                awk '{ v[NR] = ($0 == "" ? "?" : $0) } END { s = v[1]; d = 0
                       for (i = 2; i <= NR; ++i) { if (v[i] != v[1]) d = 1; s = s " / " v[i] }
                       print (d ? s : v[1]) " (the runs\047 plans)" }')
        fi
        echo "| $c$row | $p |$rats |"
    done
    echo
done

echo "### the collective per bucket the planner picks on NCCL (simulate -topology nvlink -nccl 1, modelled)"
echo
for c in fp16 bf16 int8 topk; do
    cfg "col-$c" nccl "$c" 4
    "$BIN" scalednn simulate "$W/col-$c.cfg" -topology nvlink -gpus 64 -codec "$c" -bucket_mb 1 \
        -nccl 1 >"$W/col-$c.log" 2>&1
    echo "$c:"
    awk '/^collective per bucket/ { on = 1; next } on && NF && ($1 == 2 || $1 == 4 || $1 == 8 || $1 == 16 || $1 == 64) { print "    " $0 }' \
        "$W/col-$c.log"
done
