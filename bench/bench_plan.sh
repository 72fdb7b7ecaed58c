#!/bin/sh
# The planner's predicted step time against the measured one: the shapes
# detector with bucket_mb=auto on the local backend with 1, 2 and 4 replicas
# (and, with LINKS="...", a named link model for the prediction only), RUNS
# runs each, replica counts interleaved.  Per run: the prediction printed with
# the plan, and the median `seconds` of the steps after the plan.  The table
# gives medians over the runs and the error of the prediction.
#   sh bench/bench_plan.sh            # from the repository root
set -eu
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
ITERS=${ITERS:-160}
REPLICAS=${REPLICAS:-"1 2 4"}
CODEC=${CODEC:-none}
BIN=${BIN:-./darknet}
OUT=runs/bench-plan
mkdir -p "$OUT"
[ -x "$BIN" ] || make -j2 >/dev/null
[ -f data/shapes/train.txt ] || "$BIN" scalednn gen-shapes data/shapes -n 512 -valid 64 -seed 1 >/dev/null
sed "s#^backup=.*#backup=$OUT/backup#" cfg/shapes.data >"$OUT/shapes.data"
sed -e 's/^bucket_mb=.*/bucket_mb=auto/' -e "s/^compress=none/compress=$CODEC/" \
    cfg/shapes-scalednn.cfg >"$OUT/shapes-auto.cfg"

median() { sort -g | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

for n in $REPLICAS; do : >"$OUT/r$n.runs"; done
for run in $(seq 1 "$RUNS"); do
    for n in $REPLICAS; do
        gpus=$(seq -s, 0 $((n - 1)))
        iters=$ITERS
        "$BIN" detector train "$OUT/shapes.data" "$OUT/shapes-auto.cfg" -gpus "$gpus" \
            -max_batches "$iters" -seed 1 -csv "$OUT/r$n-$run.csv" >"$OUT/r$n-$run.log" 2>&1 ||
            { tail -5 "$OUT/r$n-$run.log"; exit 1; }
        pred=$(sed -n 's/^predicted: .* step \([0-9.]*\) ms = compute \([0-9.]*\) ms + exposed \([0-9.]*\) ms.*/\1 \2 \3/p' \
            "$OUT/r$n-$run.log" | tail -n 1)
        # steps after the plan: skip the first 9 rows (warm-up, the 5 profiled
        # steps, 3 more)
        meas=$(awk -F, '/^#/ { next } !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
                         { r++ } r > 9 { print $c["seconds"] * 1000 }' "$OUT/r$n-$run.csv" | median)
        sync=$(awk -F, '/^#/ { next } !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
                         { r++ } r > 9 { print $c["sync_wait_s"] * 1000 }' "$OUT/r$n-$run.csv" | median)
        echo "$pred $meas $sync" >>"$OUT/r$n.runs"
    done
done

echo "| replicas | predicted step (ms) | predicted compute | predicted exposed | measured step (ms, median) | error | measured sync wait (ms) |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for n in $REPLICAS; do
    p=$(awk '{ print $1 }' "$OUT/r$n.runs" | median)
    c=$(awk '{ print $2 }' "$OUT/r$n.runs" | median)
    e=$(awk '{ print $3 }' "$OUT/r$n.runs" | median)
    m=$(awk '{ print $4 }' "$OUT/r$n.runs" | median)
    s=$(awk '{ print $5 }' "$OUT/r$n.runs" | median)
    awk -v n="$n" -v p="$p" -v c="$c" -v e="$e" -v m="$m" -v s="$s" \
        'BEGIN { printf "| %s | %.2f | %.2f | %.3f | %.2f | %+.1f%% | %.2f |\n", n, p, c, e, m, 100 * (p - m) / m, s }'
done
