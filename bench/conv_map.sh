#!/bin/sh
# Issue 27: does cpu_conv=onednn train the shapes detector to the same mAP in
# the same number of iterations as cpu_conv=darknet?  cfg/shapes.cfg (64x64,
# 4 classes, batch 8 per replica) + [scalednn] mode=scalednn cpu_conv=PATH,
# REPLICAS CPU replicas (one thread each), ITERS iterations, mAP@0.5 on
# data/shapes/valid.txt every EVERY iterations, for each seed both paths in
# turn (the same seed: the same data order and initial weights; the two
# differ only in the convolution's and batch norm's float arithmetic).
# Prints per evaluation the median (min-max) mAP of each path over the seeds
# and the largest |onednn - darknet| of one seed, and the iterations to
# TARGET.  Not a test: it shows what the paths train to; two float paths
# drift apart over hundreds of steps, so a seed's pair is compared as one
# of two draws, by the spread of each over the seeds.
#   sh bench/conv_map.sh     # SEEDS="1 2 3" ITERS=600 EVERY=100 REPLICAS=2 TARGET=0.20
set -eu
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-"1 2 3"}
ITERS=${ITERS:-600}
EVERY=${EVERY:-100}
REPLICAS=${REPLICAS:-2}
TARGET=${TARGET:-0.20}
OUT=${OUT:-runs/conv-map}
mkdir -p "$OUT"
[ -x ./darknet ] || make -j2 >/dev/null
[ -f data/shapes/train.txt ] || ./darknet scalednn gen-shapes data/shapes -n 512 -valid 64 -seed 1 >/dev/null
gpus=0
i=1
while [ "$i" -lt "$REPLICAS" ]; do gpus="$gpus,$i"; i=$((i + 1)); done
for p in darknet onednn; do
    { cat cfg/shapes.cfg; printf '\n[scalednn]\nmode=scalednn\ncpu_conv=%s\n' "$p"; } >"$OUT/$p.cfg"
done
export SDNN_BLAS_THREADS=1

if [ "${TABLE_ONLY:-0}" = 0 ]; then
    for seed in $SEEDS; do
        for p in darknet onednn; do
            tag=$p-s$seed
            sed "s#^backup=.*#backup=$OUT/backup-$tag#" cfg/shapes.data >"$OUT/$tag.data"
            mkdir -p "$OUT/backup-$tag"
            ./darknet detector train "$OUT/$tag.data" "$OUT/$p.cfg" -gpus "$gpus" -max_batches "$ITERS" \
                -seed "$seed" -map -map_every "$EVERY" -csv "$OUT/$tag.csv" >"$OUT/$tag.log" 2>&1 ||
                { tail -5 "$OUT/$tag.log" >&2; exit 1; }
            rm -rf "$OUT/backup-$tag"
            echo "conv_map: $tag done" >&2
        done
    done
fi

# "iteration map" of every evaluation in CSV $1
maps() {
    awk -F, '/^#/ { next } !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
             $c["map"] != "" { print $c["iteration"], $c["map"] }' "$1"
}
for seed in $SEEDS; do
    for p in darknet onednn; do
        [ -f "$OUT/$p-s$seed.csv" ] && maps "$OUT/$p-s$seed.csv" | sed "s/^/$seed $p /"
    done
done >"$OUT/maps.txt"

echo "cfg/shapes.cfg, $REPLICAS replicas, batch 8 each; mAP@0.5 on data/shapes/valid.txt; seeds: $SEEDS"
echo "| iteration | darknet median (min-max) | onednn median (min-max) | max over seeds of abs(onednn - darknet) |"
echo "|---:|---|---|---:|"
awk '
    function med(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { v[$3, $2, $1] = $4; its[$3] = 1; seeds[$1] = 1 }
    END {
        n = 0; for (it in its) { n++; order[n] = it + 0 }
        for (i = 2; i <= n; i++) for (j = i; j > 1 && order[j - 1] > order[j]; j--) { t = order[j]; order[j] = order[j - 1]; order[j - 1] = t }
        for (k = 1; k <= n; k++) {
            it = order[k]; line = "| " it
            dmax = -1
            for (s in seeds) if ((it, "darknet", s) in v && (it, "onednn", s) in v) {
                d = v[it, "onednn", s] - v[it, "darknet", s]; if (d < 0) d = -d; if (d > dmax) dmax = d }
            split("darknet onednn", ps, " ")
            for (q = 1; q <= 2; q++) {
                m = 0; lo = ""; hi = ""
                for (s in seeds) if ((it, ps[q], s) in v) {
                    x = v[it, ps[q], s]; m++; a[m] = x
                    if (lo == "" || x < lo) lo = x; if (hi == "" || x > hi) hi = x }
                line = line sprintf(" | %s", m ? sprintf("%.4f (%.4f-%.4f)", med(a, m), lo, hi) : "-")
            }
            print line sprintf(" | %s |", dmax >= 0 ? sprintf("%.4f", dmax) : "-")
        }
    }' "$OUT/maps.txt"
echo
echo "iterations to mAP@0.5 >= $TARGET per seed (darknet / onednn):"
for seed in $SEEDS; do
    r=""
    for p in darknet onednn; do
        it=$(awk -v s="$seed" -v p="$p" -v t="$TARGET" '$1 == s && $2 == p && $4 >= t { print $3; exit }' "$OUT/maps.txt")
        r="$r${r:+ / }${it:-not reached}"
    done
    echo "  seed $seed: $r"
done
