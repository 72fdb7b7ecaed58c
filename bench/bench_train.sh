#!/bin/sh
# Shapes-detector training throughput, measured side by side in one run:
#   1 and 2 replicas x stock and scalednn mode (and BLAS=1 vs BLAS=0 with
#   BENCH_BLAS=1), RUNS runs each (default 5), ITERS iterations each
#   (default 60, i.e. the same images for any replica count).
# Every run but the first uses one OpenBLAS thread per replica
# (SDNN_BLAS_THREADS=1); the first shows 1 replica with the default (every core).
# Per run: images/s over the steps after the first WARM (default 3),
# exchange bytes per step, and the mean per-step time the update waited
# on the exchange after its bucket was ready (exposed communication; in
# stock mode the weight averaging) and the mean time it waited for the
# slower replica (sync).  The table gives the medians
# over the runs.  Raw CSVs stay in runs/bench/.
#   sh bench/bench_train.sh            # from the repository root
set -eu
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
ITERS=${ITERS:-60}
WARM=${WARM:-3}
BIN=${BIN:-./darknet}
OUT=runs/bench
mkdir -p "$OUT"
[ -x "$BIN" ] || make -j2 >/dev/null
[ -f data/shapes/train.txt ] || "$BIN" scalednn gen-shapes data/shapes -n 512 -valid 64 -seed 1 >/dev/null

# per-run figures from one CSV: img/s, bytes/step, mean exposed ms/step,
# mean sync-wait ms/step (means, so stock's weight average every 4th step
# is spread over the steps it serves)
run_stats() {
    awk -F, -v imgs="$2" -v warm="$WARM" '
        /^#/ { next }
        !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
        { r++ }
        r > warm { n++; t += $c["seconds"]; b += $c["bytes_exchanged"];
                   ex += $c["exposed_comm_s"] * 1000; sy += $c["sync_wait_s"] * 1000 }
        END { printf "%.2f %.0f %.4f %.4f\n", n * imgs / t, b / n, ex / n, sy / n }' "$1"
}

median() { sort -g | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

bench_one() { # label bin cfg gpus
    label=$1; bin=$2; cfg=$3; gpus=$4
    n=$(echo "$gpus" | awk -F, '{ print NF }')
    imgs=$((8 * n))
    : >"$OUT/$label.runs"
    i=1
    while [ "$i" -le "$RUNS" ]; do
        "$bin" detector train cfg/shapes.data "$cfg" -gpus "$gpus" -max_batches "$ITERS" -seed "$i" \
            -csv "$OUT/$label.$i.csv" >"$OUT/$label.$i.log" 2>&1
        run_stats "$OUT/$label.$i.csv" "$imgs" >>"$OUT/$label.runs"
        i=$((i + 1))
    done
    ips=$(awk '{ print $1 }' "$OUT/$label.runs" | median)
    bps=$(awk '{ print $2 }' "$OUT/$label.runs" | median)
    exm=$(awk '{ print $3 }' "$OUT/$label.runs" | median)
    sym=$(awk '{ print $4 }' "$OUT/$label.runs" | median)
    spread=$(awk '{ print $1 }' "$OUT/$label.runs" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.1f-%.1f", lo, hi }')
    printf '| %-26s | %8s | %12s | %10.2f | %14.4f | %12.3f | %s |\n' "$label" "$gpus" "$ips" \
        "$(echo "$bps" | awk '{ print $1 / 1e6 }')" "$exm" "$sym" "$spread"
}

echo "shapes detector (cfg/shapes.cfg, 64x64, batch 8 per replica), $ITERS iterations, medians of $RUNS runs, $(nproc) cores"
echo
echo "| run                        | -gpus    | images/s     | MB/step    | exposed ms/step | sync ms/step | images/s range |"
echo "|----------------------------|----------|--------------|------------|----------------|--------------|----------------|"
bench_one stock-1-blas2threads "$BIN" cfg/shapes.cfg 0
export SDNN_BLAS_THREADS=1
bench_one stock-1 "$BIN" cfg/shapes.cfg 0
bench_one scalednn-1 "$BIN" cfg/shapes-scalednn.cfg 0
bench_one stock-2 "$BIN" cfg/shapes.cfg 0,1
bench_one scalednn-2 "$BIN" cfg/shapes-scalednn.cfg 0,1
(cat cfg/shapes.cfg; printf '\n[scalednn]\noverlap=0\nbucket_mb=1\n') >"$OUT/shapes-nooverlap.cfg"
bench_one scalednn-2-no-overlap "$BIN" "$OUT/shapes-nooverlap.cfg" 0,1

if [ "${BENCH_BLAS:-1}" = 1 ]; then
    make BUILD=build-noblas BLAS=0 build-noblas/darknet >/dev/null
    echo
    echo "BLAS=1 (OpenBLAS gemm) vs BLAS=0 (Darknet's gemm), scalednn mode:"
    echo
    echo "| run                        | -gpus    | images/s     | MB/step    | exposed ms/step | sync ms/step | images/s range |"
    echo "|----------------------------|----------|--------------|------------|----------------|--------------|----------------|"
    bench_one blas1-scalednn-1 "$BIN" cfg/shapes-scalednn.cfg 0
    bench_one blas0-scalednn-1 build-noblas/darknet cfg/shapes-scalednn.cfg 0
    bench_one blas1-scalednn-2 "$BIN" cfg/shapes-scalednn.cfg 0,1
    bench_one blas0-scalednn-2 build-noblas/darknet cfg/shapes-scalednn.cfg 0,1
fi
