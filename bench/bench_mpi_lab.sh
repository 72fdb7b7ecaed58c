#!/bin/sh
# The shapes detector across P processes (1 replica each) in the network lab
# (scripts/netlab.sh: namespaces, tbf-shaped links): stock mode against
# scalednn with none, fp16, int8 and topk, at each RATE.  Per run: images/s
# over the steps after the first WARM, bytes exchanged per step and exposed
# communication per step, from rank 0's CSV.  Run as root.
#   sh bench/bench_mpi_lab.sh        # P=4 RATES="100mbit 1gbit" ITERS=80
set -eu
cd "$(dirname "$0")/.."
P=${P:-4}
RATES=${RATES:-"100mbit 1gbit"}
ITERS=${ITERS:-80}
WARM=${WARM:-3}
VARIANTS=${VARIANTS:-"stock none fp16 int8 topk"}
OUT=runs/bench-mpi-lab
mkdir -p "$OUT"
[ -x ./darknet ] || make -j2 >/dev/null
[ -f data/shapes/train.txt ] || ./darknet scalednn gen-shapes data/shapes -n 512 -valid 64 -seed 1 >/dev/null
sed "s#^backup=.*#backup=$OUT/backup#" cfg/shapes.data >"$OUT/shapes.data"
for v in $VARIANTS; do
    if [ "$v" = stock ]; then
        sed 's/^mode=scalednn/mode=stock/' cfg/shapes-scalednn.cfg >"$OUT/shapes-$v.cfg"
    else
        sed -e 's/^backend=local/backend=mpi/' -e "s/^compress=none/compress=$v/" \
            cfg/shapes-scalednn.cfg >"$OUT/shapes-$v.cfg"
    fi
    sed -i 's/^backend=local/backend=mpi/' "$OUT/shapes-$v.cfg"
done

stats() {
    awk -F, -v warm="$WARM" '
        /^#/ { next }
        !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
        { r++ }
        r == warm { im0 = $c["images"] }
        r > warm { n++; t += $c["seconds"]; b += $c["bytes_exchanged"]; ex += $c["exposed_comm_s"];
                   im = $c["images"] }
        END { printf "%.1f %.0f %.1f\n", (im - im0) / t, b / n, 1000 * ex / n }' "$1"
}

echo "| link | processes | variant | img/s | bytes/step | exposed ms/step | vs stock |"
echo "|---|---:|---|---:|---:|---:|---:|"
for rate in $RATES; do
    stock_ips=""
    for v in $VARIANTS; do
        csv="$OUT/$rate-$v.csv"
        sh scripts/netlab.sh -k "$P" -rate "$rate" -- ./darknet detector train "$OUT/shapes.data" \
            "$OUT/shapes-$v.cfg" -gpus 0 -max_batches "$ITERS" -seed 1 -csv "$csv" \
            >"$OUT/$rate-$v.log" 2>&1 || { tail -5 "$OUT/$rate-$v.log"; exit 1; }
        set -- $(stats "$csv")
        [ "$v" = stock ] && stock_ips=$1
        awk -v r="$rate" -v p="$P" -v v="$v" -v i="$1" -v b="$2" -v e="$3" -v s="$stock_ips" \
            'BEGIN { printf "| %s | %s | %s | %s | %s | %s | %.2f |\n", r, p, v, i, b, e, i / s }'
    done
done
