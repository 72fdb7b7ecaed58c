#!/bin/sh
# bench/fork/train.sh FORK_SOURCE [FORK_SRCDIR] [FORK_BUILDDIR]
#
# Training side by side with the maintained Darknet fork, and weights both ways.
# Builds the fork CPU-only (build.sh) and ./darknet, generates the shapes set (gen-shapes,
# labels also copied next to the images, where the fork looks for them), then per seed
# trains the same cfg text (CFG, default cfg/shapes-v4tiny.cfg, max_batches=ITERS) with
#   ours: ./darknet detector train DATA CFG -seed S          (stock mode, one replica)
#   fork: its detector train -dont_show -nocolor -saveweights EVERY ("yes" on stdin: its
#         CPU build asks before training; it seeds from the clock, so S only names the run)
# one BLAS/OpenMP thread each, both runs of a seed at the same time. Every snapshot of both
# (each EVERY iterations, and the final weights) is then scored by both `detector map`s on
# the same validation list: ours (mAP@0.5 all-point) and the fork's (mAP@0.50,
# area under the curve at each unique recall), both on the cfg as written, so both with the
# NMS of its last [yolo] head's nms_kind/beta_nms (ours through sdnn_dialect_nms). Weights
# trained by the fork must score within TOL_MAP (0.01) in both, and so must ours: exit 1
# otherwise (or when a run fails). The fork's map is also run on a copy of the cfg with
# nms_kind=default (plain IoU NMS); |fork - fork with nms_kind=default| is printed, not
# checked: what the NMS kind alone moves the mAP, the size of the miss the TOL_MAP check
# would see if ours ignored nms_kind (as it did before sdnn_dialect_nms: up to 0.0133).
# Prints the per-snapshot table and the medians over seeds of mAP vs iterations.
# SKIP_TRAIN=1 scores the snapshots already in WORK again without training.
# FORK_CFG=NAME trains the fork's own cfg/NAME.cfg (e.g. yolov4-tiny, its [yolo] resize=1.5
# kept) instead of CFG, adapted to the shapes set and a short run and nothing else: classes=4
# and the heads' filters=255 -> 27, width=height=SIZE, batch=BATCH (default the cfg's),
# subdivisions=1, max_batches=ITERS, steps at 80% and 90% of ITERS, burn_in=ITERS/5 when the
# cfg's is longer (its 1000 would leave a short run in the warm-up).
# Env: ITERS (1000), EVERY (100), SEEDS ("1 2 3"), LR (the cfg's), CFG, TOL_MAP (0.01),
#      WORK (${TMPDIR:-/tmp}/scalednn-fork/train), NTRAIN (512), NVALID (64), SIZE (64: the images' width
#      and height, to be the cfg's).
set -eu
[ $# -ge 1 ] || { echo "usage: sh bench/fork/train.sh FORK_SOURCE [SRCDIR] [BUILDDIR]" >&2; exit 2; }
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
ITERS=${ITERS:-1000}
EVERY=${EVERY:-100}
SEEDS=${SEEDS:-"1 2 3"}
CFG=${CFG:-cfg/shapes-v4tiny.cfg}
TOL_MAP=${TOL_MAP:-0.01}
NTRAIN=${NTRAIN:-512}
NVALID=${NVALID:-64}
SIZE=${SIZE:-64}
WORK=${WORK:-${TMPDIR:-/tmp}/scalednn-fork/train}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

sh bench/fork/build.sh "$@" > "$WORK/build.out" || { cat "$WORK/build.out"; exit 1; }
FORK=$(sed -n 's/^fork cli: //p' "$WORK/build.out")
COMMIT=$(sed -n 's/^fork commit: //p' "$WORK/build.out")
make -s -j2 darknet > "$WORK/make.out" 2>&1 || { cat "$WORK/make.out"; exit 1; }
OURS=$REPO/darknet

D=$WORK/shapes
if [ ! -f "$D/valid.txt" ]; then
    "$OURS" scalednn gen-shapes "$D" -n "$NTRAIN" -valid "$NVALID" -seed 1 -size "$SIZE" > "$WORK/gen.out"
    for s in train valid; do
        for f in "$D"/labels/$s/*.txt; do cp "$f" "$D/images/$s/"; done
    done
fi

name=sbs
cfg=$WORK/$name.cfg
if [ -n "${FORK_CFG:-}" ]; then
    FSRC=$(sed -n 's/^fork src: //p' "$WORK/build.out")
    CFG=$FSRC/cfg/$FORK_CFG.cfg
    [ -f "$CFG" ] || { echo "train.sh: $CFG not found in the fork's source" >&2; exit 1; }
    burn=$(sed -n 's/^burn_in *= *\([0-9]*\).*/\1/p' "$CFG" | head -1)
    [ -n "$burn" ] && [ "$burn" -gt $((ITERS / 5)) ] && burn=$((ITERS / 5))
    sed -e 's/^classes *=.*/classes=4/' -e 's/^filters *= *255 *$/filters=27/' \
        -e "s/^width *=.*/width=$SIZE/" -e "s/^height *=.*/height=$SIZE/" \
        -e "s/^subdivisions *=.*/subdivisions=1/" \
        -e "s/^steps *=.*/steps=$((ITERS * 8 / 10)),$((ITERS * 9 / 10))/" \
        ${burn:+-e "s/^burn_in *=.*/burn_in=$burn/"} ${BATCH:+-e "s/^batch *=.*/batch=$BATCH/"} \
        "$CFG" > "$WORK/fork-adapted.cfg"
    CFG=$WORK/fork-adapted.cfg
fi
sed "s/^max_batches *=.*/max_batches=$ITERS/" "$CFG" > "$cfg"
[ -n "${LR:-}" ] && sed -i "s/^learning_rate *=.*/learning_rate=$LR/" "$cfg"
grep -q "^max_batches=$ITERS\$" "$cfg" || { echo "train.sh: $CFG has no max_batches= line" >&2; exit 1; }
sed 's/^nms_kind *=.*/nms_kind=default/' "$cfg" > "$WORK/$name-defaultnms.cfg"

datafile() {   # $1 = backup folder
    printf 'classes=4\ntrain=%s\nvalid=%s\nnames=%s\nbackup=%s\n' "$D/train.txt" "$D/valid.txt" \
        "$D/shapes.names" "$1"
}

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 SDNN_BLAS_THREADS=1
for s in $SEEDS; do
    [ "${SKIP_TRAIN:-0}" = 1 ] && continue
    for who in ours fork; do
        rm -rf "$WORK/backup-$who-$s"; mkdir -p "$WORK/backup-$who-$s"
        datafile "$WORK/backup-$who-$s" > "$WORK/$who-$s.data"
    done
    t0=$(date +%s)
    "$OURS" detector train "$WORK/ours-$s.data" "$cfg" -seed "$s" > "$WORK/ours-$s.log" 2>&1 &
    p_ours=$!
    # The fork writes chart PNGs into the current folder: run it in WORK.
    echo yes | (cd "$WORK" && exec "$FORK" detector train "$WORK/fork-$s.data" "$cfg" -dont_show -nocolor \
        -saveweights "$EVERY") > "$WORK/fork-$s.log" 2>&1 &
    p_fork=$!
    rc=0
    wait $p_ours || { echo "train.sh: ours, seed $s failed:"; tail -5 "$WORK/ours-$s.log"; rc=1; }
    wait $p_fork || { echo "train.sh: fork, seed $s failed:"; tail -5 "$WORK/fork-$s.log"; rc=1; }
    [ $rc -eq 0 ] || exit 1
    nan=$(grep -m1 -n 'loss=nan' "$WORK/fork-$s.log" | sed 's/^[0-9]*:[ ]*\([0-9]*\):.*/\1/' || true)
    echo "seed $s: trained in $(( $(date +%s) - t0 )) s${nan:+ (the fork's loss is nan from iteration $nan)}"
done

map_ours() { "$OURS" detector map "$2" "$cfg" "$1" 2>/dev/null | sed -n 's/^mAP@0.50: all-point \([0-9.]*\),.*/\1/p'; }
map_fork() {   # weights data [cfg]
    (cd "$WORK" && "$FORK" detector map "$2" "${3:-$cfg}" "$1" -dont_show -nocolor 2>/dev/null) |
        sed -n 's/.*mean average precision (mAP@0.50)=\([0-9.]*\)%.*/\1/p' | awk '{ printf "%.4f\n", $1 / 100 }'
}

TAB=$WORK/maps.csv
echo "seed,trainer,iteration,map_ours,map_fork,diff,map_fork_defaultnms,diff_nms_kind" > "$TAB"
fail=0
for s in $SEEDS; do
    for who in ours fork; do
        i=$EVERY
        while [ $i -le "$ITERS" ]; do
            w=$WORK/backup-$who-$s/${name}_$i.weights
            [ $i -eq "$ITERS" ] && w=$WORK/backup-$who-$s/${name}_final.weights
            if [ ! -f "$w" ]; then echo "train.sh: $w missing"; fail=1; i=$((i + EVERY)); continue; fi
            mo=$(map_ours "$w" "$WORK/$who-$s.data"); mf=$(map_fork "$w" "$WORK/$who-$s.data")
            md=$(map_fork "$w" "$WORK/$who-$s.data" "$WORK/$name-defaultnms.cfg")
            if [ -z "$mo" ] || [ -z "$mf" ] || [ -z "$md" ]; then
                echo "train.sh: $w: no mAP (ours '$mo', fork '$mf', fork default NMS '$md')"; fail=1
            else
                d=$(awk -v a="$mo" -v b="$mf" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.4f", d }')
                d2=$(awk -v a="$mf" -v b="$md" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.4f", d }')
                echo "$s,$who,$i,$mo,$mf,$d,$md,$d2" >> "$TAB"
                awk -v d="$d" -v t="$TOL_MAP" 'BEGIN { exit !(d > t) }' && {
                    echo "train.sh: $w: ours $mo vs the fork's $mf: over $TOL_MAP"; fail=1; }
            fi
            i=$((i + EVERY))
        done
    done
done

echo "fork commit: $COMMIT; cfg: $CFG, max_batches=$ITERS${LR:+, learning_rate=$LR}; seeds: $SEEDS"
echo
echo "| trainer | iteration | mAP (our map), median | min-max | the fork's map, median | max abs diff | the fork's map, cfg's NMS vs nms_kind=default: max abs diff |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for who in ours fork; do
    i=$EVERY
    while [ $i -le "$ITERS" ]; do
        awk -F, -v w="$who" -v it="$i" '
            NR > 1 && $2 == w && $3 == it { n++; a[n] = $4; b[n] = $5; if ($6 > md) md = $6; if ($8 > md2) md2 = $8 }
            function med(x, n,   i, j, t) {
                for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
                return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }
            END { if (n) { lo = a[1]; hi = a[1]; for (i = 2; i <= n; i++) { if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }
                  printf "| %s | %d | %.4f | %.4f-%.4f | %.4f | %.4f | %.4f |\n", w, it, med(a, n), lo, hi, med(b, n), md, md2 } }' "$TAB"
        i=$((i + EVERY))
    done
done
echo "per snapshot: $TAB"
if [ $fail -ne 0 ]; then echo "train.sh: FAIL"; exit 1; fi
echo "train.sh: every snapshot's two mAPs within $TOL_MAP"
