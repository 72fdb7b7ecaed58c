#!/bin/sh
# Issue 27's side by side on the CPU: the yolov3-tiny-shaped net (Debian's
# yolov3-tiny.cfg for the shapes set, RES x RES, BATCH images per replica)
# trained by scalednn with cpu_conv=darknet and cpu_conv=onednn, and by
# PyTorch DDP (gloo, one process per replica; bench/torch_ddp_cpu.py), on
# 1 and 2 replicas, one thread per replica, RUNS rounds in which every
# column runs once in turn (alternating), medians of images/s and of the
# peak resident memory per replica (scalednn: the process's peak / replicas,
# its replicas are threads of one process; PyTorch: the largest process's).
# The maintained fork's column needs FORK_BUILD (bench/fork/build.sh's
# build folder; $FORK_BUILD/prefix/bin/darknet); without it the column is
# skipped with a note.  Not a test: nothing here asserts a time.
#   sh bench/bench_cpu_conv.sh      # RUNS=3 ITERS=30 RES=128 BATCH=8
set -eu
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
ITERS=${ITERS:-30}
WARM=${WARM:-3}
RES=${RES:-128}
BATCH=${BATCH:-8}
OUT=${OUT:-runs/bench-cpu-conv}
mkdir -p "$OUT/backup"
[ -x ./darknet ] || make -j2 >/dev/null
[ -f data/shapes/train.txt ] || ./darknet scalednn gen-shapes data/shapes -n 512 -valid 64 -seed 1 >/dev/null
# Debian's PyTorch is the system interpreter's (a python3 earlier in PATH,
# e.g. pyenv's, does not see it): PYTHON, else the first that imports torch.
pick_python() {
    for py in ${PYTHON:-} python3 /usr/bin/python3; do
        "$py" -c "import torch" 2>/dev/null && { echo "$py"; return; }
    done
}
PY=$(pick_python || true)   # set -e: none found is not the end, install it below
if [ -z "$PY" ]; then
    echo "bench_cpu_conv: installing python3-torch (Debian's PyTorch)" >&2
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q python3-torch >/dev/null
    PY=$(pick_python || true)
fi
[ -n "$PY" ] || { echo "bench_cpu_conv: no python3 with torch" >&2; exit 1; }
sed "s#^backup=.*#backup=$OUT/backup#" cfg/shapes.data >"$OUT/shapes.data"
base=$OUT/yolov3-tiny-shapes.cfg
. bench/tiny_cfg.sh
tiny_cfg "$base" "$RES" "$BATCH" || { echo "bench_cpu_conv: unexpected yolov3-tiny.cfg" >&2; exit 1; }
for p in darknet onednn; do
    { cat "$base"; printf '\n[scalednn]\nmode=scalednn\ncpu_conv=%s\n' "$p"; } >"$OUT/y-$p.cfg"
done
export SDNN_BLAS_THREADS=1

sdnn_run() { # path replicas round -> "img/s rss_mib_per_replica"
    gpus=0; [ "$2" -eq 2 ] && gpus=0,1
    log=$OUT/$1-$2-$3
    /usr/bin/time -f "%M" -o "$log.rss" ./darknet detector train "$OUT/shapes.data" "$OUT/y-$1.cfg" \
        -gpus "$gpus" -max_batches "$ITERS" -seed "$3" -csv "$log.csv" >"$log.log" 2>&1
    awk -F, -v imgs=$((BATCH * $2)) -v warm="$WARM" -v rss="$(tail -1 "$log.rss")" -v n="$2" '
        /^#/ { next } !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
        { r++ } r > warm { k++; t += $c["seconds"] }
        END { printf "%.2f %.0f\n", k * imgs / t, rss / 1024 / n }' "$log.csv"
}
torch_run() { # replicas
    "$PY" bench/torch_ddp_cpu.py "$base" --nproc "$1" --batch "$BATCH" --size "$RES" \
        --steps "$ITERS" --threads 1 2>"$OUT/torch-$1.err" |
        sed -n 's/^RESULT torch images_per_s=\([0-9.]*\) rss_mib_per_replica=\([0-9]*\).*/\1 \2/p'
}
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR) print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# TABLE_ONLY=1: print the table of the runs already in $OUT again.
[ "${TABLE_ONLY:-0}" = 1 ] && RUNS=0
if [ "$RUNS" -gt 0 ]; then
    for n in 1 2; do
        : >"$OUT/darknet-$n.runs"; : >"$OUT/onednn-$n.runs"; : >"$OUT/torch-$n.runs"
    done
fi
r=1
while [ "$r" -le "$RUNS" ]; do
    for n in 1 2; do
        sdnn_run darknet "$n" "$r" >>"$OUT/darknet-$n.runs"
        sdnn_run onednn "$n" "$r" >>"$OUT/onednn-$n.runs"
        torch_run "$n" >>"$OUT/torch-$n.runs"
    done
    r=$((r + 1))
done

echo "yolov3-tiny-shaped, ${RES}x${RES}, batch $BATCH per replica, 1 thread per replica, $(wc -l <"$OUT/darknet-1.runs") alternating rounds of $ITERS iterations (first $WARM left out), medians"
echo "| replicas | scalednn darknet img/s | scalednn onednn img/s | PyTorch DDP img/s | onednn / darknet | onednn / PyTorch | MiB per replica (darknet / onednn / PyTorch) |"
echo "|---|---|---|---|---|---|---|"
for n in 1 2; do
    d=$(awk '{ print $1 }' "$OUT/darknet-$n.runs" | median)
    o=$(awk '{ print $1 }' "$OUT/onednn-$n.runs" | median)
    t=$(awk '{ print $1 }' "$OUT/torch-$n.runs" | median)
    md=$(awk '{ print $2 }' "$OUT/darknet-$n.runs" | median)
    mo=$(awk '{ print $2 }' "$OUT/onednn-$n.runs" | median)
    mt=$(awk '{ print $2 }' "$OUT/torch-$n.runs" | median)
    awk -v n="$n" -v d="${d:-0}" -v o="${o:-0}" -v t="${t:-0}" -v md="$md" -v mo="$mo" -v mt="$mt" 'BEGIN {
        printf "| %d | %.1f | %.1f | %.1f | %.2f | %.2f | %s / %s / %s |\n", n, d, o, t,
            (d > 0 ? o / d : 0), (t > 0 ? o / t : 0), md, mo, mt }'
done
if [ -n "${FORK_BUILD:-}" ] && [ -x "$FORK_BUILD/prefix/bin/darknet" ]; then
    echo "fork: FORK_BUILD is set, but this script does not run the fork yet (see bench/fork/train.sh for its CLI)"
else
    echo "fork column skipped: FORK_BUILD not given (bench/fork/build.sh's build folder)"
fi
