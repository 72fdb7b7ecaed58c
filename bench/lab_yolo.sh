#!/bin/sh
# A real-size YOLO across P lab hosts: Debian's yolov3-tiny.cfg adapted to
# the shapes set (4 classes, filters=27, RES x RES input, anchors of the
# shapes set scaled to RES, random=0, burn_in and lr for a from-scratch
# run), 8.7 M parameters, 34.7 MB of gradients a step, whatever RES is.
# Stock (Darknet's central host: every `interval` steps all weights to rank 0
# and back) against scalednn none / fp16 / int8 / topk / compress=auto, at
# each RATE, and `scalednn simulate`'s prediction of each step time from a
# profile measured here at the start (the simulator against the lab).
# Run as root (scripts/netlab.sh makes the hosts):
#
#   sh bench/lab_yolo.sh     # P=4 RES=128 BATCH=8 RATES="1gbit 100mbit" STEPS=16 WARM=6 ROUNDS=1
#
# Each run trains WARM + STEPS steps of P x BATCH images (-max_batches
# counts P per step, as Darknet's multi-GPU iteration counter does), and the
# figures come from rank 0's CSV after the first WARM steps: images/s
# (images / summed step seconds), the mean step (P x BATCH / images/s: what
# the simulator predicts) and the median step, bytes rank 0 sent per
# step, exposed communication per step.  ROUNDS rounds; each round runs
# every (rate, variant) once, so the variants alternate and share the
# machine's drift; the table gives medians over the rounds.
#
# Predictions: `./darknet scalednn plan ... -save_profile` measures the
# per-layer profile once (one OpenBLAS thread, as in the runs), then
# `./darknet scalednn simulate CFG -topology eth -gpus 1 -nodes P -profile
# PROFILE -speed SPEED -link eth1g|eth100m -codec C` predicts each variant:
# stock -> its stock column, none -> overlap, fp16/int8/topk -> overlap+C,
# auto -> planned.  SPEED (default 2/P: the P hosts share this machine's
# 2 cores, each gets 2/P of a core) scales the profile's compute.
#
# PREDICT_ONLY=1 makes the table again from runs/lab-yolo/raw.tsv (the
# predictions again, the profile kept).  Raw figures and logs: runs/lab-yolo/.  Nothing here is timed inside a test.
set -eu
cd "$(dirname "$0")/.."
P=${P:-4}
RES=${RES:-128}
BATCH=${BATCH:-8}
RATES=${RATES:-"1gbit 100mbit"}
STEPS=${STEPS:-16}
WARM=${WARM:-6}
ROUNDS=${ROUNDS:-1}
VARIANTS=${VARIANTS:-"stock none fp16 int8 topk auto"}
SPEED=${SPEED:-$(awk -v p="$P" 'BEGIN { printf "%.4f", 2 / p }')}
NICE=${NICE:-0}
export SDNN_BLAS_THREADS=${SDNN_BLAS_THREADS:-1}
OUT=${OUT:-runs/lab-yolo}
mkdir -p "$OUT"
RAW=$OUT/raw.tsv
[ -x ./darknet ] || make -j2 >/dev/null
base=$OUT/yolov3-tiny-shapes.cfg
. bench/tiny_cfg.sh
lab_setup "$OUT" "$RES" "$BATCH" ||
    { echo "lab_yolo: Debian's yolov3-tiny.cfg is not the expected one" >&2; exit 1; }
for v in none $VARIANTS; do   # y-none.cfg: also the profile's and the simulator's
    mode=scalednn; codec=$v; bucket=4; allow=""
    [ "$v" = stock ] && { mode=stock; codec=none; }
    # compress=auto: buckets and codecs planned from the first profile_iters
    # steps and the link the backend probes (the lab's shaped link)
    [ "$v" = auto ] && { bucket=auto; allow="compress_allow=none,fp16,int8,topk"; }
    { cat "$base"
      printf '\n[scalednn]\nmode=%s\nbackend=mpi\nbucket_mb=%s\noverlap=1\ninterval=4\ncompress=%s\n' \
          "$mode" "$bucket" "$codec"
      [ -z "$allow" ] || echo "$allow"; } >"$OUT/y-$v.cfg"
done

. bench/lab_stats.sh

# The profile, once, before the lab runs: two profiling processes at once,
# so that both of this machine's vCPUs are busy as they are in the lab (the
# 2 vCPUs share caches and memory bandwidth, and a profile taken beside an
# idle vCPU overstates the lab's speed); profile.txt is the first one's.
prof=$OUT/profile.txt
profile() {
    nice -n "$NICE" ./darknet scalednn plan "$OUT/shapes.data" "$OUT/y-none.cfg" -gpus 0 -link eth1g \
        -iters 10 -save_profile "$1" >"$2" 2>&1
}
if [ "${PREDICT_ONLY:-0}" = 0 ] || [ ! -f "$prof" ]; then
    profile "$prof" "$OUT/plan.log" & p1=$!
    profile "$OUT/profile-twin.txt" "$OUT/plan-twin.log" & p2=$!
    wait "$p1" || { tail -5 "$OUT/plan.log" >&2; exit 1; }
    wait "$p2" || { tail -5 "$OUT/plan-twin.log" >&2; exit 1; }
fi

link_of() { case "$1" in 1gbit) echo eth1g ;; 100mbit) echo eth100m ;; 10gbit) echo eth10g ;; *) echo "lab_yolo: no simulator link for $1" >&2; exit 1 ;; esac; }

# predicted step ms of variant $2 at rate $1 (simulate measures the codecs'
# rates here: a twin run beside it keeps the other vCPU busy, as above)
predict() {
    rate=$1; v=$2; codec=fp16; col=overlap
    case "$v" in stock) col=stock ;; none) col=overlap ;; auto) col=planned ;; *) codec=$v; col="overlap+$v" ;; esac
    csv=$OUT/sim-$rate-$v.csv
    for twin in "" -twin; do
        nice -n "$NICE" ./darknet scalednn simulate "$OUT/y-none.cfg" -topology eth -gpus 1 -nodes "$P" \
            -profile "$prof" -speed "$SPEED" -link "$(link_of "$rate")" -codec "$codec" \
            -compress_allow none,fp16,int8,topk -csv "$OUT/sim-$rate-$v$twin.csv" \
            >"$OUT/sim-$rate-$v$twin.log" 2>&1 &
    done
    wait
    [ -s "$csv" ] || { tail -3 "$OUT/sim-$rate-$v.log" >&2; exit 1; }
    awk -F, -v col="$col" -v p="$P" 'NR > 1 && $3 == col && $4 == p { printf "%.1f", 1000 * $7 }' "$csv"
}

r=1
[ "${PREDICT_ONLY:-0}" = 0 ] || r=$((ROUNDS + 1))   # PREDICT_ONLY=1: the table from raw.tsv
[ "$r" -gt "$ROUNDS" ] || : >"$RAW"
while [ "$r" -le "$ROUNDS" ]; do
    for rate in $RATES; do
        for v in $VARIANTS; do
            csv="$OUT/$rate-$v-$r.csv"
            nice -n "$NICE" sh scripts/netlab.sh -k "$P" -rate "$rate" -- ./darknet detector train \
                "$OUT/shapes.data" "$OUT/y-$v.cfg" -gpus 0 -max_batches $(((WARM + STEPS) * P)) \
                -seed "$r" -csv "$csv" >"$OUT/$rate-$v-$r.log" 2>&1 ||
                { tail -5 "$OUT/$rate-$v-$r.log" >&2; exit 1; }
            printf '%s\t%s\t%s\t%s\n' "$r" "$rate" "$v" "$(lab_stats "$csv")" >>"$RAW"
            echo "round $r $rate $v: $(tail -1 "$RAW" | cut -f4-)" >&2
        done
    done
    r=$((r + 1))
done

echo "yolov3-tiny (Debian's cfg, 4 classes, ${RES}x${RES}, batch $BATCH per host), $P lab hosts on this machine's 2 cores, $ROUNDS round(s) of $STEPS steps after $WARM"
echo "| link | variant | img/s | mean step ms | median step ms | predicted ms | error | bytes/step | exposed ms/step | img/s vs stock |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for rate in $RATES; do
    for v in $VARIANTS; do
        pred=$(predict "$rate" "$v")
        awk -F '\t' -v rate="$rate" -v v="$v" -v pred="$pred" -v imgs=$((P * BATCH)) "$LAB_AWK_MED"'
            $2 == rate && $3 == "stock" { sn++; s[sn] = $4 }
            $2 == rate && $3 == v { n++; ips[n] = $4; st[n] = $5; by[n] = $6; ex[n] = $7 }
            END {
                if (!n) exit
                m = med(ips, n); ms = sn ? med(s, sn) : 0; mean = 1000 * imgs / m
                printf "| %s | %s | %.2f | %.0f | %.0f | %s | %+.0f%% | %.0f | %.0f | %.2f |\n", rate, v, m, mean,
                    med(st, n), pred, pred != "" ? 100 * (pred - mean) / mean : 0, med(by, n), med(ex, n),
                    ms ? m / ms : 0
            }' "$RAW"
    done
done
