#!/bin/sh
# Shapes detector, 2 replicas, scalednn mode, one run per codec in turn
# (none, fp16, bf16, int8, topk), repeated RUNS times (default 3) so the codecs
# are measured side by side; ITERS iterations each (default 120).
# Per codec: median images/s over the steps after the first WARM (default 3),
# bytes exchanged per step, the ratio to none, mean exposed communication and
# the final average loss.  Raw CSVs stay in runs/bench-compress/.
#   sh bench/bench_compress.sh            # from the repository root
set -eu
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
ITERS=${ITERS:-120}
WARM=${WARM:-3}
CODECS=${CODECS:-"none fp16 bf16 int8 topk"}
BIN=${BIN:-./darknet}
OUT=runs/bench-compress
mkdir -p "$OUT"
[ -x "$BIN" ] || make -j2 >/dev/null
[ -f data/shapes/train.txt ] || "$BIN" scalednn gen-shapes data/shapes -n 512 -valid 64 -seed 1 >/dev/null
sed "s#^backup=.*#backup=$OUT/backup#" cfg/shapes.data >"$OUT/shapes.data"
for z in $CODECS; do
    sed "s/^compress=none/compress=$z/" cfg/shapes-scalednn.cfg >"$OUT/shapes-$z.cfg"
    : >"$OUT/$z.runs"
done

# img/s, bytes/step, exposed ms/step, final avg loss of one CSV (columns by name)
run_stats() {
    awk -F, -v warm="$WARM" '
        /^#/ { next }
        !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
        { r++; if (r == 1) im0 = $c["images"] }
        r == warm { imw = $c["images"] }
        r > warm { n++; t += $c["seconds"]; b += $c["bytes_exchanged"]; ex += $c["exposed_comm_s"] * 1000;
                   last = $c["images"]; avg = $c["avg_loss"] }
        END { printf "%.2f %.0f %.4f %.4f\n", (last - imw) / t, b / n, ex / n, avg }' "$1"
}
median() { sort -g | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

for run in $(seq 1 "$RUNS"); do
    for z in $CODECS; do
        "$BIN" detector train "$OUT/shapes.data" "$OUT/shapes-$z.cfg" -gpus 0,1 \
            -max_batches "$ITERS" -seed 1 -csv "$OUT/$z-$run.csv" >"$OUT/$z-$run.log" 2>&1 ||
            { tail -5 "$OUT/$z-$run.log"; exit 1; }
        run_stats "$OUT/$z-$run.csv" >>"$OUT/$z.runs"
    done
done

none_bytes=$(awk '{ print $2 }' "$OUT/none.runs" | median)
printf '| codec | img/s (median of %s) | bytes/step | vs none | exposed ms/step | final avg loss |\n' "$RUNS"
printf '|---|---:|---:|---:|---:|---:|\n'
for z in $CODECS; do
    ips=$(awk '{ print $1 }' "$OUT/$z.runs" | median)
    bps=$(awk '{ print $2 }' "$OUT/$z.runs" | median)
    exm=$(awk '{ print $3 }' "$OUT/$z.runs" | median)
    avg=$(awk '{ print $4 }' "$OUT/$z.runs" | median)
    awk -v z="$z" -v i="$ips" -v b="$bps" -v n="$none_bytes" -v e="$exm" -v a="$avg" \
        'BEGIN { printf "| %s | %.1f | %.0f | %.3f | %.3f | %.3f |\n", z, i, b, b / n, e, a }'
done
