#!/bin/sh
# Time to accuracy at real size on P lab hosts: bench/lab_yolo.sh's
# yolov3-tiny (Debian's cfg for the shapes set, 8.7 M parameters, RES x RES,
# BATCH images per host), trained over scripts/netlab.sh's shaped links until
# mAP@0.5 on data/shapes/valid.txt reaches TARGET, as a user runs it:
#
#   sh scripts/netlab.sh -k P -rate RATE -- ./darknet detector train DATA CFG -gpus 0 \
#       -map -map_every EVERY -target TARGET -seed S -csv CSV
#
# Run as root from the repository root:
#
#   sh bench/tta_lab.sh     # P=2 RATES="100mbit 1gbit" SEEDS="1 2 3" TARGET=0.10 EVERY=50
#
# Variants ([scalednn] section at the end of the cfg, backend=mpi unless said):
#   stock     mode=stock interval=4: Darknet's central weight averaging
#   none fp16 int8 topk   mode=scalednn bucket_mb=4 overlap=1 compress=CODEC
#   auto      bucket_mb=auto compress=auto compress_allow=none,fp16,int8,topk
#   defaults  a [scalednn] section with no keys at all
#   measured  the defaults with iter_factor=int8:1,topk:1.3 written out (the
#             measured factors, the current defaults)
#   stated    the defaults with iter_factor=int8:1.25,topk:1.5 (the factors
#             stated first); measured and stated are not in the
#             default VARIANTS: VARIANTS="stated measured" compares the two
# For each seed, every (rate, variant) runs once before the next seed, so the
# variants alternate and share the machine's drift.  A run ends at the first
# evaluation at or above the highest target (TARGET, or TARGET2 when set), at
# MAX_ITERS, or after CAP_S seconds of wall clock (timeout; the CSV written until
# then still counts: a run that did not reach a target is "not reached" with
# the training time it had).  The time to a target is the CSV's elapsed_s at
# that evaluation (training time: the evaluations are not counted).  Iterations
# are Darknet's counter as the CSV has it: P per step in scalednn mode (seen
# counts every host's images); in stock mode 1 per local step and, at each
# weight average, P x the steps so far, so both count P x steps at a sync.
#
# Then the iteration factors of fp16, int8 and topk against none (median
# over seeds and links), and compress=auto's predicted time to accuracy
# against the measured one for the auto and defaults runs.
#
# Settings (environment): P=2 RES=128 BATCH=8 RATES VARIANTS SEEDS TARGET=0.10
# TARGET2 (empty: none) SKIP (RATE-VARIANT pairs not to run, e.g.
# "1gbit-topk 100mbit-fp16": a shorter sitting that still alternates)
# EVERY=50 MAX_ITERS=3000 CAP_S=900 APPEND=0 (1: keep the earlier runs in
# runs/tta-lab/runs.tsv and add to them) TABLE_ONLY=1 (only the table from
# runs.tsv).  The binary is copied to runs/tta-lab/darknet first, so a
# rebuild while the runs go on changes nothing.  CSVs and logs: runs/tta-lab/.
# Nothing here is timed inside a test; run it on a quiet machine.
set -eu
cd "$(dirname "$0")/.."
P=${P:-2}
RES=${RES:-128}
BATCH=${BATCH:-8}
RATES=${RATES:-"100mbit 1gbit"}
VARIANTS=${VARIANTS:-"stock none fp16 int8 topk auto defaults"}
SKIP=${SKIP:-}
SEEDS=${SEEDS:-"1 2 3"}
TARGET=${TARGET:-0.10}
TARGET2=${TARGET2:-}
EVERY=${EVERY:-50}
MAX_ITERS=${MAX_ITERS:-3000}
CAP_S=${CAP_S:-900}
export SDNN_BLAS_THREADS=${SDNN_BLAS_THREADS:-1}
OUT=${OUT:-runs/tta-lab}
RUNS=$OUT/runs.tsv
mkdir -p "$OUT"

if [ "${TABLE_ONLY:-0}" = 0 ]; then
    make -j2 >/dev/null
    cp ./darknet "$OUT/darknet"
    base=$OUT/yolov3-tiny-shapes.cfg
    . bench/tiny_cfg.sh
    lab_setup "$OUT" "$RES" "$BATCH" ||
        { echo "tta_lab: Debian's yolov3-tiny.cfg is not the expected one" >&2; exit 1; }
    for v in $VARIANTS; do
        { cat "$base"; printf '\n[scalednn]\n'
          case "$v" in
          defaults) ;;
          measured) printf 'iter_factor=int8:1,topk:1.3\n' ;;
          stated) printf 'iter_factor=int8:1.25,topk:1.5\n' ;;
          stock) printf 'mode=stock\nbackend=mpi\ninterval=4\n' ;;
          auto) printf 'mode=scalednn\nbackend=mpi\nbucket_mb=auto\noverlap=1\ncompress=auto\n'
                printf 'compress_allow=none,fp16,int8,topk\n' ;;
          *) printf 'mode=scalednn\nbackend=mpi\nbucket_mb=4\noverlap=1\ncompress=%s\n' "$v" ;;
          esac; } >"$OUT/y-$v.cfg"
    done
    [ "${APPEND:-0}" = 1 ] || : >"$RUNS"
fi

# "iteration elapsed_s map" at the first evaluation >= $2 in CSV $1, else
# "NA last_elapsed_s best_map"
tta_of() {
    awk -F, -v target="$2" '
        /^#/ { next }
        !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
        { last = $c["elapsed_s"] }
        $c["map"] != "" {
            m = $c["map"] + 0
            if (m > best) best = m
            if (m >= target) { printf "%d %.1f %.4f\n", $c["iteration"], $c["elapsed_s"], m; done = 1; exit }
        }
        END { if (!done) printf "NA %.1f %.4f\n", last, best }' "$1"
}

stop_at=$TARGET
[ -z "$TARGET2" ] || stop_at=$TARGET2
if [ "${TABLE_ONLY:-0}" = 0 ]; then
    for seed in $SEEDS; do
        for rate in $RATES; do
            for v in $VARIANTS; do
                tag="$rate-$v-s$seed"
                case " $SKIP " in *" $rate-$v "*) continue ;; esac
                t0=$(date +%s)
                rc=0
                timeout "$CAP_S" sh scripts/netlab.sh -k "$P" -rate "$rate" -- "$OUT/darknet" \
                    detector train "$OUT/shapes.data" "$OUT/y-$v.cfg" -gpus 0 \
                    -max_batches "$MAX_ITERS" -map -map_every "$EVERY" -target "$stop_at" \
                    -seed "$seed" -csv "$OUT/$tag.csv" >"$OUT/$tag.log" 2>&1 || rc=$?
                wall=$(($(date +%s) - t0))
                if [ "$rc" != 0 ] && [ "$rc" != 124 ]; then
                    tail -5 "$OUT/$tag.log" >&2
                    exit 1
                fi
                [ -s "$OUT/$tag.csv" ] || { echo "tta_lab: $tag wrote no CSV" >&2; exit 1; }
                r1=$(tta_of "$OUT/$tag.csv" "$TARGET")
                r2="- - -"
                [ -z "$TARGET2" ] || r2=$(tta_of "$OUT/$tag.csv" "$TARGET2")
                # the plan compress=auto ran (codec of each bucket, counted)
                plan=$(awk '/scalednn: plan [0-9]+ / { delete n; rows = 0 }
                    /^bucket +layers +bytes +codec/ { rows = 1; next }
                    rows && /^ *[0-9]+ / { n[$(NF - 4)]++; next }
                    { rows = 0 }
                    END { s = ""; for (k in n) s = s (s ? "," : "") k ":" n[k]; print s ? s : "-" }' \
                    "$OUT/$tag.log")
                printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$seed" "$rate" "$v" \
                    "$(echo "$r1" | tr ' ' '\t')" "$(echo "$r2" | tr ' ' '\t')" "$wall" "$rc" \
                    "$plan" >>"$RUNS"
                echo "seed $seed $rate $v: to $TARGET: $r1 (iteration, training s, mAP); wall ${wall}s rc $rc plan $plan" >&2
                rm -rf "$OUT/backup"/*
            done
        done
    done
fi

# runs.tsv: seed rate variant it1 s1 map1 it2 s2 map2 wall rc plan
table() { # column of the time (5 or 8), of the iterations (4 or 7), target
    col=$1; icol=$2; tgt=$3
    echo "time to mAP@0.5 >= $tgt on data/shapes/valid.txt (training seconds; evaluations not counted), $P lab hosts"
    echo "| link | variant | reached | median s | spread s | median iterations | vs stock | saving | auto's plan |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---|"
    for rate in $RATES; do
        for v in $VARIANTS; do
            awk -F '\t' -v rate="$rate" -v v="$v" -v col="$col" -v icol="$icol" '
                function med(a, n,   i, j, t) {
                    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
                    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
                }
                $2 == rate && $3 == "stock" && $icol != "NA" { sn++; s[sn] = $col }
                $2 == rate && $3 == v {
                    runs++
                    if ($icol == "NA") { capped = capped (capped ? "," : "") ">" $col; next }
                    n++; t[n] = $col; it[n] = $icol
                    if (lo == "" || $col < lo) lo = $col
                    if ($col > hi) hi = $col
                    if ($12 != "-") plan = plan (plan ? " " : "") "s" $1 ":" $12
                }
                END {
                    if (!runs) exit
                    m = n ? med(t, n) : 0; ms = sn ? med(s, sn) : 0
                    printf "| %s | %s | %d/%d | %s | %s | %s | %s | %s | %s |\n", rate, v, n, runs,
                        n ? sprintf("%.1f", m) : "-",
                        (n ? sprintf("%.1f-%.1f", lo, hi) : "") (capped ? " (not reached: " capped ")" : ""),
                        n ? sprintf("%d", med(it, n)) : "-",
                        n && ms ? sprintf("%.2f", m / ms) : "-",
                        n && ms ? sprintf("%.1f%%", 100 * (1 - m / ms)) : "-", plan ? plan : "-"
                }' "$RUNS"
        done
    done
}
echo "yolov3-tiny (Debian's cfg, 4 classes, ${RES}x${RES}, batch $BATCH per host), seeds: $(cut -f1 "$RUNS" | sort -u | tr '\n' ' ')"
table 5 4 "$TARGET"
[ -z "$TARGET2" ] || { echo; table 8 7 "$TARGET2"; }

# Iteration factors: iterations to TARGET with a codec / with none, per seed and
# link (separate trainings of the same seed), and their median over every
# (seed, link) pair where both reached it: what iter_factor= defaults are set
# from (plan.h).
echo
echo "iteration factors to $TARGET against none (iterations with the codec / with none)"
echo "| codec | per seed and link | median | n |"
echo "|---|---|---:|---:|"
for v in fp16 int8 topk; do
    awk -F '\t' -v v="$v" '
        $3 == "none" && $4 != "NA" { none[$1 " " $2] = $4 }
        $3 == v && $4 != "NA" { it[$1 " " $2] = $4 }
        END {
            n = 0; s = ""
            for (k in it) if (k in none) { n++; f[n] = it[k] / none[k]; s = s (s ? ", " : "") "s" k ": " sprintf("%.2f", f[n]) }
            if (!n) exit
            for (i = 2; i <= n; i++) for (j = i; j > 1 && f[j - 1] > f[j]; j--) { t = f[j]; f[j] = f[j - 1]; f[j - 1] = t }
            m = n % 2 ? f[(n + 1) / 2] : (f[n / 2] + f[n / 2 + 1]) / 2
            printf "| %s | %s | %.2f | %d |\n", v, s, m, n
        }' "$RUNS"
done

# The planner's prediction against the measurement, for the planned rows: each
# plan of the run's log (a drift re-plan makes another) with the iteration it
# took over at, its codecs, its "predicted: time to accuracy N x F x step S ms"
# (F the plan's iteration factor, S its predicted step); predicted time to
# accuracy N x F x S for the first plan and for the last, N = none's steps to
# TARGET on that link and seed (iterations / P); the measured step = the
# run's training time / its steps to TARGET.
echo
echo "compress=auto's prediction (N x factor x predicted step; N = none's steps to $TARGET, same seed and link) against the measurement"
echo "| seed | link | variant | plans (codec:buckets from iteration) | factor first/last | predicted step ms first/last | measured step ms | predicted s first/last | measured s |"
echo "|---|---|---|---|---:|---:|---:|---:|---:|"
for seed in $(cut -f1 "$RUNS" | sort -u); do
    for rate in $RATES; do
        for v in auto defaults measured stated; do
            log=$OUT/$rate-$v-s$seed.log
            [ -f "$log" ] || continue
            plans=$(awk '
                /scalednn: plan [0-9]+ / { k++; delete n; rows = 0; want = 1; next }
                /^bucket +layers +bytes +codec/ { rows = 1; next }
                rows && /^ *[0-9]+ / { n[$(NF - 4)]++; next }
                { rows = 0 }
                /^predicted: time to accuracy N x / { f[k] = $7; st[k] = $10
                    c = ""; for (x in n) c = c (c ? "," : "") x ":" n[x]; codecs[k] = c }
                want && /^[0-9]+: / { sub(":", "", $1); from[k] = $1; want = 0 }
                END { for (i = 1; i <= k; i++) if (i in f) printf "%s %s %s %s\n", codecs[i], from[i], f[i], st[i] }' "$log")
            [ -n "$plans" ] || continue
            echo "$plans" | awk -F '\t' -v seed="$seed" -v rate="$rate" -v v="$v" -v P="$P" -v runs="$RUNS" '
                { np++; split($0, q, " "); pc[np] = q[1]; pf[np] = q[2]; fa[np] = q[3]; stp[np] = q[4] }
                END {
                    while ((getline line < runs) > 0) {
                        split(line, r, "\t")
                        if (r[1] == seed && r[2] == rate && r[3] == "none" && r[4] != "NA") n = r[4] / P
                        if (r[1] == seed && r[2] == rate && r[3] == v) { it = r[4]; s = r[5] }
                    }
                    if (!n || it == "NA" || it == "") exit
                    h = ""; for (i = 1; i <= np; i++) if (i == 1 || pf[i] + 0 <= it + 0) h = h (h ? "; " : "") pc[i] " from " pf[i]
                    last = np; while (last > 1 && pf[last] + 0 > it + 0) last--
                    printf "| %s | %s | %s | %s | %.2f/%.2f | %.0f/%.0f | %.0f | %.1f/%.1f | %.1f |\n", seed, rate, v, h,
                        fa[1], fa[last], stp[1], stp[last], 1000 * s / (it / P),
                        n * fa[1] * stp[1] / 1000, n * fa[last] * stp[last] / 1000, s
                }'
        done
    done
done
