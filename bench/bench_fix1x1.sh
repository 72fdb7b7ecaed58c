#!/bin/sh
# What the 1x1 delta fix costs: step time of cfg/shapes-res.cfg (6 fixed 1x1
# layers) trained with fix_1x1_delta=1 and =0, alternating in one run.
#
#   sh bench/bench_fix1x1.sh          # ROUNDS=3 ITERS=40 WARM=5 REPLICAS=1
#
# Each round trains ITERS iterations with each setting (stock mode, the
# same seed); per run the median of the CSV's per-step seconds after the
# first WARM steps; the table gives the medians over rounds and their ratio.
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-40}
WARM=${WARM:-5}
REPLICAS=${REPLICAS:-1}
BIN=${BIN:-./darknet}
OUT=runs/fix1x1
mkdir -p "$OUT"
[ -x "$BIN" ] || make -j2 >/dev/null
[ -f data/shapes/train.txt ] || "$BIN" scalednn gen-shapes data/shapes -n 512 -valid 64 -seed 1 >/dev/null
gpus=$(seq -s, 0 $((REPLICAS - 1)))
for fix in 0 1; do
    { cat cfg/shapes-res.cfg; printf '\n[scalednn]\nmode=stock\nfix_1x1_delta=%s\n' "$fix"; } >"$OUT/res-fix$fix.cfg"
done
sed "s#^backup=.*#backup=$OUT/backup#" cfg/shapes.data >"$OUT/shapes.data"
median() { sort -g | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
rm -f "$OUT"/fix*.runs
for r in $(seq 1 "$ROUNDS"); do
    for fix in 0 1; do
        csv="$OUT/fix$fix-r$r.csv"
        "$BIN" detector train "$OUT/shapes.data" "$OUT/res-fix$fix.cfg" -gpus "$gpus" \
            -max_batches "$ITERS" -seed 1 -csv "$csv" >"$OUT/fix$fix-r$r.log" 2>&1 ||
            { tail -5 "$OUT/fix$fix-r$r.log"; exit 1; }
        awk -F, -v warm="$WARM" '/^#/ { next } !h { for (i = 1; i <= NF; i++) c[$i] = i; h = 1; next }
            ++n > warm { print $c["seconds"] }' "$csv" | median >>"$OUT/fix$fix.runs"
    done
done
rm -rf "$OUT/backup"
off=$(median <"$OUT/fix0.runs")
on=$(median <"$OUT/fix1.runs")
echo "| fix_1x1_delta | step ms (median of $ROUNDS runs) |"
echo "|---:|---:|"
awk -v v="$off" 'BEGIN { printf "| 0 (Darknet) | %.2f |\n", 1000 * v }'
awk -v v="$on" -v o="$off" 'BEGIN { printf "| 1 (fixed) | %.2f |\n", 1000 * v; printf "\non/off = %.3f\n", v / o }'
