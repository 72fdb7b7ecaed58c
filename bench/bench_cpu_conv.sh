#!/bin/sh
# Issue 27's side by side on the CPU, for two nets (NETS):
#   tiny  the yolov3-tiny-shaped net (Debian's yolov3-tiny.cfg for the shapes
#         set: bench/tiny_cfg.sh), RES x RES, BATCH images per replica;
#   res   cfg/shapes-res.cfg (a Darknet-53-style residual detector: 23
#         convolutions, 6 [shortcut]s) at RES x RES, BATCH per replica;
# trained by scalednn with cpu_conv=darknet and cpu_conv=onednn, and by
# PyTorch DDP (gloo, one process per replica; bench/torch_ddp_cpu.py), on
# 1 and 2 replicas, one thread per replica, RUNS rounds in which every
# column runs once in turn (alternating), medians of images/s and of the
# peak resident memory per replica (scalednn: the process's peak / replicas,
# its replicas are threads of one process; PyTorch: the largest process's).
# scalednn's images/s: the CSV's step seconds after the first WARM steps.
#
# The maintained fork's column needs FORK_BUILD (bench/fork/build.sh's
# build folder; $FORK_BUILD/prefix/bin/darknet); without it the column is
# skipped with a note.  The fork's CPU build trains one network per process
# (its multi-GPU averaging exists only in its CUDA build), so its column on
# n cores is one process with n OpenMP/BLAS threads and batch n x BATCH (the
# same images a step as n replicas), the same cfg text otherwise; images/s
# from the times its iteration lines are printed (stamped as they arrive:
# the whole iteration, its image loading included), over the iterations
# after WARM; memory: its peak / n.  The fork reads labels next to the
# images, so it trains on a list of links to the images beside copies of
# their labels ($OUT/fork-shapes).
# Not a test: nothing here asserts a time.
#   sh bench/bench_cpu_conv.sh      # RUNS=3 ITERS=30 RES=128 BATCH=8 NETS="tiny res"
set -eu
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
ITERS=${ITERS:-30}
WARM=${WARM:-3}
RES=${RES:-128}
BATCH=${BATCH:-8}
NETS=${NETS:-"tiny res"}
OUT=${OUT:-runs/bench-cpu-conv}
mkdir -p "$OUT/backup"
OUTA=$(cd "$OUT" && pwd)
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
. bench/tiny_cfg.sh
for net in $NETS; do
    base=$OUT/$net-base.cfg
    case "$net" in
    tiny) tiny_cfg "$base" "$RES" "$BATCH" ||
              { echo "bench_cpu_conv: unexpected yolov3-tiny.cfg" >&2; exit 1; } ;;
    res) sed -e "s/^batch=.*/batch=$BATCH/" -e "s/^width=.*/width=$RES/" -e "s/^height=.*/height=$RES/" \
             cfg/shapes-res.cfg >"$base"
         grep -q "^width=$RES\$" "$base" && grep -q "^batch=$BATCH\$" "$base" ||
             { echo "bench_cpu_conv: unexpected cfg/shapes-res.cfg" >&2; exit 1; } ;;
    *) echo "bench_cpu_conv: unknown net $net (tiny, res)" >&2; exit 2 ;;
    esac
    for p in darknet onednn; do
        { cat "$base"; printf '\n[scalednn]\nmode=scalednn\ncpu_conv=%s\n' "$p"; } >"$OUT/$net-$p.cfg"
    done
done
export SDNN_BLAS_THREADS=1

sdnn_run() { # net path replicas round -> "img/s rss_mib_per_replica"
    gpus=0; [ "$3" -eq 2 ] && gpus=0,1
    log=$OUT/$1-$2-$3-$4
    /usr/bin/time -f "%M" -o "$log.rss" ./darknet detector train "$OUT/shapes.data" "$OUT/$1-$2.cfg" \
        -gpus "$gpus" -max_batches "$ITERS" -seed "$4" -csv "$log.csv" >"$log.log" 2>&1
    awk -F, -v imgs=$((BATCH * $3)) -v warm="$WARM" -v rss="$(tail -1 "$log.rss")" -v n="$3" '
        /^#/ { next } !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
        { r++ } r > warm { k++; t += $c["seconds"] }
        END { printf "%.2f %.0f\n", k * imgs / t, rss / 1024 / n }' "$log.csv"
}
torch_run() { # net replicas
    "$PY" bench/torch_ddp_cpu.py "$OUT/$1-base.cfg" --nproc "$2" --batch "$BATCH" --size "$RES" \
        --steps "$ITERS" --threads 1 2>"$OUT/$1-torch-$2.err" |
        sed -n 's/^RESULT torch images_per_s=\([0-9.]*\) rss_mib_per_replica=\([0-9]*\).*/\1 \2/p'
}
FORK=""
if [ -n "${FORK_BUILD:-}" ]; then
    FORK=$FORK_BUILD/prefix/bin/darknet
    [ -x "$FORK" ] || FORK=$FORK_BUILD/src-cli/darknet
    [ -x "$FORK" ] || { echo "bench_cpu_conv: no darknet CLI under FORK_BUILD=$FORK_BUILD" >&2; exit 1; }
    FORK=$(cd "$(dirname "$FORK")" && pwd)/darknet
    F=$OUT/fork-shapes
    if [ ! -s "$F/train.txt" ]; then
        mkdir -p "$F/img"
        while read -r img; do
            b=$(basename "$img" .png)
            lab=$(dirname "$img" | sed 's#/images/#/labels/#')/$b.txt
            ln -sf "$PWD/$img" "$F/img/$b.png"
            cp "$lab" "$F/img/$b.txt"
            echo "$OUTA/fork-shapes/img/$b.png"
        done <data/shapes/train.txt >"$F/train.txt"
    fi
    printf 'classes=4\ntrain=%s\nvalid=%s\nnames=%s\nbackup=%s\n' "$OUTA/fork-shapes/train.txt" \
        "$OUTA/fork-shapes/train.txt" "$PWD/data/shapes/shapes.names" "$OUTA/backup" >"$OUT/fork.data"
    for net in $NETS; do
        for n in 1 2; do
            sed -e "s/^batch *=.*/batch=$((BATCH * n))/" -e "s/^subdivisions *=.*/subdivisions=1/" \
                -e "s/^max_batches *=.*/max_batches=$ITERS/" "$OUT/$net-base.cfg" >"$OUT/$net-fork-$n.cfg"
            grep -q "^batch=$((BATCH * n))\$" "$OUT/$net-fork-$n.cfg" &&
                grep -q "^max_batches=$ITERS\$" "$OUT/$net-fork-$n.cfg" ||
                { echo "bench_cpu_conv: $OUT/$net-base.cfg lacks batch= or max_batches=" >&2; exit 1; }
        done
    done
fi
fork_run() { # net cores round -> "img/s rss_mib_per_core"
    log=$OUT/$1-fork-$2-$3
    # its CPU build asks before training ("yes"); it writes charts into the
    # current folder: run it in $OUT
    echo yes | (cd "$OUT" && OMP_NUM_THREADS=$2 OPENBLAS_NUM_THREADS=$2 exec /usr/bin/time -f "%M" \
        -o "$OUTA/$1-fork-$2-$3.rss" "$FORK" detector train "$OUTA/fork.data" "$OUTA/$1-fork-$2.cfg" \
        -dont_show -nocolor) 2>&1 |
        perl -MTime::HiRes=time -ne '$| = 1; printf "%.6f %s", time, $_' >"$log.log"
    awk -v imgs=$((BATCH * $2)) -v warm="$WARM" -v iters="$ITERS" -v rss="$(tail -1 "$log.rss")" -v n="$2" '
        $2 ~ /^[0-9]+:$/ && $3 ~ /^loss=/ { t[$2 + 0] = $1 }
        END { if (!(warm in t) || !(iters in t) || !(rss > 0)) { print "0 0"; exit }
              printf "%.2f %.0f\n", (iters - warm) * imgs / (t[iters] - t[warm]), rss / 1024 / n }' "$log.log"
}
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR) print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# TABLE_ONLY=1: print the tables of the runs already in $OUT again.
[ "${TABLE_ONLY:-0}" = 1 ] && RUNS=0
if [ "$RUNS" -gt 0 ]; then
    for net in $NETS; do
        for n in 1 2; do
            for col in darknet onednn torch fork; do : >"$OUT/$net-$col-$n.runs"; done
        done
    done
fi
r=1
while [ "$r" -le "$RUNS" ]; do
    for net in $NETS; do
        for n in 1 2; do
            sdnn_run "$net" darknet "$n" "$r" >>"$OUT/$net-darknet-$n.runs"
            sdnn_run "$net" onednn "$n" "$r" >>"$OUT/$net-onednn-$n.runs"
            torch_run "$net" "$n" >>"$OUT/$net-torch-$n.runs"
            [ -z "$FORK" ] || fork_run "$net" "$n" "$r" >>"$OUT/$net-fork-$n.runs"
        done
    done
    r=$((r + 1))
done

col() { awk -v k="$2" '{ print $k }' "$1" | median; }
for net in $NETS; do
    [ -s "$OUT/$net-darknet-1.runs" ] || continue
    case "$net" in
    tiny) echo "yolov3-tiny-shaped, ${RES}x${RES}" ;;
    res) echo "cfg/shapes-res.cfg (residual), ${RES}x${RES}" ;;
    esac
    echo "batch $BATCH per replica, 1 thread per replica, $(wc -l <"$OUT/$net-darknet-1.runs") alternating rounds of $ITERS iterations (first $WARM left out), medians"
    echo "| replicas | scalednn darknet img/s | scalednn onednn img/s | PyTorch DDP img/s | onednn / darknet | onednn / PyTorch | MiB per replica (darknet / onednn / PyTorch) |"
    echo "|---|---|---|---|---|---|---|"
    for n in 1 2; do
        awk -v n="$n" -v d="$(col "$OUT/$net-darknet-$n.runs" 1)" -v o="$(col "$OUT/$net-onednn-$n.runs" 1)" \
            -v t="$(col "$OUT/$net-torch-$n.runs" 1)" -v md="$(col "$OUT/$net-darknet-$n.runs" 2)" \
            -v mo="$(col "$OUT/$net-onednn-$n.runs" 2)" -v mt="$(col "$OUT/$net-torch-$n.runs" 2)" 'BEGIN {
            printf "| %d | %.1f | %.1f | %.1f | %.2f | %.2f | %s / %s / %s |\n", n, d, o, t,
                (d > 0 ? o / d : 0), (t > 0 ? o / t : 0), md, mo, mt }'
    done
    for n in 1 2; do
        echo "runs (img/s MiB), $n replica(s): darknet $(tr '\n' ';' <"$OUT/$net-darknet-$n.runs")" \
            "onednn $(tr '\n' ';' <"$OUT/$net-onednn-$n.runs") PyTorch $(tr '\n' ';' <"$OUT/$net-torch-$n.runs")"
    done
    # the machine's speed drifts between rounds (and within one): the ratio
    # of the two columns in each round, which ran minutes apart, and its median
    for n in 1 2; do
        paste -d' ' "$OUT/$net-onednn-$n.runs" "$OUT/$net-torch-$n.runs" | awk -v n="$n" '
            $3 > 0 { k++; r[k] = $1 / $3; s = s sprintf(" %.2f", r[k]) }
            END { if (!k) exit
                  for (i = 2; i <= k; i++) for (j = i; j > 1 && r[j - 1] > r[j]; j--) { t = r[j]; r[j] = r[j - 1]; r[j - 1] = t }
                  printf "onednn / PyTorch in each round, %d replica(s):%s; median %.2f (%.2f-%.2f)\n", n, s,
                      k % 2 ? r[(k + 1) / 2] : (r[k / 2] + r[k / 2 + 1]) / 2, r[1], r[k] }'
    done
    if [ -s "$OUT/$net-fork-1.runs" ]; then
        echo
        echo "the maintained fork, CPU build: one process, n OpenMP/BLAS threads, batch n x $BATCH"
        echo "| cores | fork img/s | scalednn onednn img/s (n replicas) | onednn / fork | MiB per core (fork / onednn) |"
        echo "|---|---|---|---|---|"
        for n in 1 2; do
            awk -v n="$n" -v f="$(col "$OUT/$net-fork-$n.runs" 1)" -v o="$(col "$OUT/$net-onednn-$n.runs" 1)" \
                -v mf="$(col "$OUT/$net-fork-$n.runs" 2)" -v mo="$(col "$OUT/$net-onednn-$n.runs" 2)" 'BEGIN {
                printf "| %d | %.1f | %.1f | %.2f | %s / %s |\n", n, f, o, (f > 0 ? o / f : 0), mf, mo }'
        done
        echo "fork runs (img/s MiB): $(tr '\n' ';' <"$OUT/$net-fork-1.runs") / $(tr '\n' ';' <"$OUT/$net-fork-2.runs")"
    else
        echo "fork column skipped: FORK_BUILD not given (bench/fork/build.sh's build folder)"
    fi
    echo
done
