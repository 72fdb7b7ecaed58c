#!/bin/sh
# The shapes detector across P processes (1 replica each) in the network lab
# (scripts/netlab.sh: namespaces, tbf-shaped links): stock mode (Darknet's
# central host: every `interval` steps all weights to rank 0 and back)
# against scalednn with none, fp16, int8 and topk, at each RATE.  Run as
# root.
#
#   sh bench/bench_mpi_lab.sh     # P=4 RATES="100mbit 1gbit 10gbit" ITERS=400 ROUNDS=3
#
# ROUNDS rounds; each round runs every (rate, variant) once, so the
# variants alternate and share the machine's drift.  Per run, from rank 0's
# CSV over the steps after the first WARM: images/s (images / summed step
# seconds), the median step time, bytes this process sent per step and
# exposed communication per step.  The table gives the median over the
# rounds of each, and "vs stock" = median img/s / stock's median img/s at
# the same rate (with the per-round ratios' range).
#
# The P lab hosts share this machine's cores, so each process gets one
# OpenBLAS thread (SDNN_BLAS_THREADS=1, both modes alike).  The 10gbit
# rows, where the link costs almost nothing, show the step time of the
# compute alone.
# Raw figures: runs/bench-mpi-lab/raw.tsv.
set -eu
cd "$(dirname "$0")/.."
P=${P:-4}
RATES=${RATES:-"100mbit 1gbit 10gbit"}
ITERS=${ITERS:-400}
WARM=${WARM:-5}
ROUNDS=${ROUNDS:-3}
VARIANTS=${VARIANTS:-"stock none fp16 int8 topk"}
export SDNN_BLAS_THREADS=${SDNN_BLAS_THREADS:-1}
OUT=runs/bench-mpi-lab
mkdir -p "$OUT"
RAW=$OUT/raw.tsv
: >"$RAW"
[ -x ./darknet ] || make -j2 >/dev/null
[ -f data/shapes/train.txt ] || ./darknet scalednn gen-shapes data/shapes -n 512 -valid 64 -seed 1 >/dev/null
sed "s#^backup=.*#backup=$OUT/backup#" cfg/shapes.data >"$OUT/shapes.data"
for v in $VARIANTS; do
    if [ "$v" = stock ]; then
        sed 's/^mode=scalednn/mode=stock/' cfg/shapes-scalednn.cfg >"$OUT/shapes-$v.cfg"
    else
        sed "s/^compress=none/compress=$v/" cfg/shapes-scalednn.cfg >"$OUT/shapes-$v.cfg"
    fi
    sed -i 's/^backend=local/backend=mpi/' "$OUT/shapes-$v.cfg"
done

. bench/lab_stats.sh

r=1
while [ "$r" -le "$ROUNDS" ]; do
    for rate in $RATES; do
        for v in $VARIANTS; do
            csv="$OUT/$rate-$v-$r.csv"
            sh scripts/netlab.sh -k "$P" -rate "$rate" -- ./darknet detector train "$OUT/shapes.data" \
                "$OUT/shapes-$v.cfg" -gpus 0 -max_batches "$ITERS" -seed 1 -csv "$csv" \
                >"$OUT/$rate-$v-$r.log" 2>&1 || { tail -5 "$OUT/$rate-$v-$r.log" >&2; exit 1; }
            printf '%s\t%s\t%s\t%s\n' "$r" "$rate" "$v" "$(lab_stats "$csv")" >>"$RAW"
        done
    done
    r=$((r + 1))
done

echo "| link | processes | variant | img/s | median step ms | bytes/step | exposed ms/step | vs stock (range) |"
echo "|---|---:|---|---:|---:|---:|---:|---:|"
for rate in $RATES; do
    for v in $VARIANTS; do
        awk -F '\t' -v rate="$rate" -v v="$v" -v p="$P" "$LAB_AWK_MED"'
            $2 == rate && $3 == "stock" { s[$1] = $4 }
            $2 == rate && $3 == v { n++; ips[n] = $4; st[n] = $5; by[n] = $6; ex[n] = $7; rd[n] = $1 }
            END {
                if (!n) exit
                for (i = 1; i <= n; i++) { q = s[rd[i]] ? ips[i] / s[rd[i]] : 0
                    if (i == 1 || q < lo) lo = q; if (i == 1 || q > hi) hi = q; sp[i] = s[rd[i]] }
                m = med(ips, n); ms = med(sp, n)
                printf "| %s | %s | %s | %.1f | %.1f | %.0f | %.1f | %.2f (%.2f-%.2f) |\n", rate, p, v, m,
                    med(st, n), med(by, n), med(ex, n), ms ? m / ms : 0, lo, hi
            }' "$RAW"
    done
done
