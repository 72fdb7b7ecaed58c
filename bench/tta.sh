#!/bin/sh
# Time to accuracy: stock Darknet's protocol against scalednn variants, trained
# until the validation accuracy reaches a target that a 1-replica run reaches.
#
#   sh bench/tta.sh                       # from the repository root
#
# Settings (environment):
#   TASKS     "shapes fmnist"   shapes: detector, mAP@0.5 on data/shapes/valid.txt;
#                               fmnist: classifier, top-1 on data/fmnist/valid.txt
#   REPLICAS  "2 4"             -gpus 0,1 and 0,1,2,3 (CPU replicas, one thread each)
#   VARIANTS  "stock none fp16 int8 topk"
#   SEEDS     "1 2 3"           -seed of each run (data order and initial weights)
#   SHAPES_TARGET 0.30, FMNIST_TARGET 0.75   accuracy to reach
#   SHAPES_MAX 2000, FMNIST_MAX 2000         iteration cap (the cfgs' max_batches) (a run that does not reach
#                                            the target by then counts as "not reached")
#   SHAPES_EVERY 100, FMNIST_EVERY 50        iterations between evaluations
#
# Every run evaluates on the valid list every EVERY iterations (between steps;
# the evaluation time is not counted) and stops at the first evaluation at or
# above the target (-target).  Per task x replicas x variant, the medians over
# the seeds of: wall time to target, iterations to target, the accuracy at
# that evaluation, MB exchanged until then; and the saving against stock at
# the same replica count.  A 1-replica run (scalednn, no codec) per seed
# shows that the target is reachable.  CSVs and logs stay in runs/tta/.
set -eu
cd "$(dirname "$0")/.."
TASKS=${TASKS:-"shapes fmnist"}
REPLICAS=${REPLICAS:-"2 4"}
VARIANTS=${VARIANTS:-"stock none fp16 int8 topk"}
SEEDS=${SEEDS:-"1 2 3"}
SHAPES_TARGET=${SHAPES_TARGET:-0.30}
FMNIST_TARGET=${FMNIST_TARGET:-0.75}
SHAPES_MAX=${SHAPES_MAX:-2000}
FMNIST_MAX=${FMNIST_MAX:-2000}
SHAPES_EVERY=${SHAPES_EVERY:-100}
FMNIST_EVERY=${FMNIST_EVERY:-50}
BIN=${BIN:-./darknet}
OUT=runs/tta
mkdir -p "$OUT"
[ -x "$BIN" ] || make -j2 >/dev/null
[ -f data/shapes/train.txt ] || "$BIN" scalednn gen-shapes data/shapes -n 512 -valid 64 -seed 1 >/dev/null

gpus_of() { seq -s, 0 $(($1 - 1)); }

# cfg for TASK and VARIANT (stock: the plain cfg, Darknet's protocol)
make_cfg() {
    task=$1; variant=$2
    if [ "$variant" = stock ]; then
        echo "cfg/$task.cfg"
        return
    fi
    f="$OUT/$task-$variant.cfg"
    sed "s/^compress=none/compress=$variant/" "cfg/$task-scalednn.cfg" >"$f"
    echo "$f"
}

# "seconds iterations accuracy MB" at the first evaluation >= target, or "NA NA best MB"
tta_of() {
    awk -F, -v target="$2" '
        /^#/ { next }
        !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
        { mb += $c["bytes_exchanged"] / 1e6 }
        $c["map"] != "" {
            m = $c["map"] + 0
            if (m > best) best = m
            if (m >= target && !done) { printf "%.2f %d %.4f %.1f\n", $c["elapsed_s"], $c["iteration"], m, mb; done = 1; exit }
        }
        END { if (!done) printf "NA NA %.4f %.1f\n", best, mb }' "$1"
}

median() { grep -v '^NA$' | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "NA"; else print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

run_one() { # task variant replicas seed -> appends to $OUT/TASK-VARIANT-N.runs
    task=$1; variant=$2; n=$3; seed=$4
    eval target=\$$(echo "$task" | tr a-z A-Z)_TARGET
    eval max=\$$(echo "$task" | tr a-z A-Z)_MAX
    eval every=\$$(echo "$task" | tr a-z A-Z)_EVERY
    cfg=$(make_cfg "$task" "$variant")
    kind=detector; [ "$task" = fmnist ] && kind=classifier
    tag="$task-$variant-$n-s$seed"
    sed "s#^backup=.*#backup=$OUT/backup-$tag#" "cfg/$task.data" >"$OUT/$tag.data"
    "$BIN" $kind train "$OUT/$tag.data" "$cfg" -gpus "$(gpus_of "$n")" -max_batches "$max" \
        -seed "$seed" -map -map_every "$every" -target "$target" -csv "$OUT/$tag.csv" \
        >"$OUT/$tag.log" 2>&1 || { tail -5 "$OUT/$tag.log"; exit 1; }
    rm -rf "$OUT/backup-$tag"
    echo "$(tta_of "$OUT/$tag.csv" "$target")" >>"$OUT/$task-$variant-$n.runs"
}

for task in $TASKS; do
    if [ "$task" = fmnist ] && [ ! -f data/fmnist/train.txt ]; then
        "$BIN" scalednn fmnist data/fmnist >/dev/null
    fi
    rm -f "$OUT/$task"-*.runs
    for seed in $SEEDS; do
        run_one "$task" none 1 "$seed"
        for n in $REPLICAS; do
            for v in $VARIANTS; do run_one "$task" "$v" "$n" "$seed"; done
        done
    done
done

echo "| task | replicas | variant | reached | time to target (s) | iterations | accuracy | MB exchanged | time vs stock | saving |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
for task in $TASKS; do
    for n in 1 $REPLICAS; do
        for v in $VARIANTS; do
            f="$OUT/$task-$v-$n.runs"
            [ -f "$f" ] || continue
            runs=$(wc -l <"$f")
            reached=$(awk '$1 != "NA"' "$f" | wc -l)
            t=$(awk '{ print $1 }' "$f" | median)
            it=$(awk '{ print $2 }' "$f" | median)
            acc=$(awk '{ print $3 }' "$f" | median)
            mb=$(awk '{ print $4 }' "$f" | median)
            st=NA
            [ -f "$OUT/$task-stock-$n.runs" ] && st=$(awk '{ print $1 }' "$OUT/$task-stock-$n.runs" | median)
            awk -v task="$task" -v n="$n" -v v="$v" -v r="$reached/$runs" -v t="$t" -v it="$it" \
                -v acc="$acc" -v mb="$mb" -v st="$st" 'BEGIN {
                    ratio = (t != "NA" && st != "NA" && st > 0) ? sprintf("%.2f", t / st) : "-"
                    save = (t != "NA" && st != "NA" && st > 0) ? sprintf("%.1f%%", 100 * (1 - t / st)) : "-"
                    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", task, n, v, r, t, it, acc, mb, ratio, save }'
        done
    done
done
echo
echo "spread (min-max over seeds) of the time to target:"
for f in "$OUT"/*.runs; do
    awk -v f="$(basename "$f" .runs)" '$1 != "NA" { if (lo == "" || $1 < lo) lo = $1; if ($1 > hi) hi = $1 }
        END { printf "  %-24s %s-%s s\n", f, lo == "" ? "NA" : lo, hi == "" ? "NA" : hi }' "$f"
done
