#!/bin/sh
# tests/gpu/h200.sh [--device cuda|sim] — the whole GPU run in one command,
# for the lent GPU machine (one H200, no Debian packages).  Run from the
# repository root with the bundle made here by `sh scripts/gpu_bundle.sh
# gpu-bundle` travelling beside the tree (carry: gpu-bundle):
#
#     sh tests/gpu/h200.sh                 on the GPU machine
#     sh tests/gpu/h200.sh --device sim    the same flow on simulated devices
#                                          (make GPU=sim), on any machine
#
#   1. build: make GPU=1 (sm_90) from the bundle's paths — DARKNET_HOME,
#      OpenBLAS, the OpenCV stand-ins — once, for the suite and the benchmarks
#   2. sh tests/gpu/run.sh --no-build     every program of tests/gpu
#   3. sh bench/gpu/run.sh --no-build     benchmarks, targets asserted
#   4. e2e: ./darknet detector train on the bundle's shapes set (real PNG
#      files, read by libdarknet's stb_image through the preloaded
#      libsdnn_imgload.so: the machine has no OpenCV), a few iterations on
#      device 0, weights saved
#   5. (CUDA, if compute-sanitizer is there and time is left) the preload
#      and vrep programs under compute-sanitizer memcheck
# Every step runs even after one fails.  Logs go to $OUT (the device tool
# brings back 8 files: gpu-env.txt, gpu-build.log, gpu-tests.log,
# gpu-tests.err, bench-gpu.txt, extra.log (the machine, e2e, memcheck),
# summary.txt; on simulated devices sim-tests.log/.err) or build/h200-logs;
# the summary (one line per program, step and target) is printed last and
# the exit status is the number of failures.
#
# Time: the whole run is bounded by SDNN_H200_BUDGET_S (default 470 s, so
# that it ends inside 8 minutes and a 10-minute device command leaves room):
# after the build, the suite gets 35% of what is left, the benchmarks 50%,
# e2e and the sanitizer the rest; inside each, every program's timeout is
# its own limit or what is left, whichever is less.  Estimate for one H200
# (16 cores): build 30-60 s (63 s here on 2 shared cores, sm_90 only);
# suite 60-100 s of its ~145 s (52 s for one seed on simulated devices
# here, CPU references with OpenBLAS, plus CUDA/cuDNN start-up per
# program); benchmarks ~200 s of their ~205 s (bench/gpu/run.sh's header);
# e2e ~10 s; memcheck what is left (each program at most 90 s, none under
# 20 s left).  The budget bounds the total whatever the machine does.
# Environment: SDNN_BUNDLE (default gpu-bundle), SDNN_H200_BUDGET_S,
# SDNN_GPU_FAIL (deliberate failures, see tests/gpu/run.sh), SDNN_SIM_SEEDS.
set -u
DEVICE=cuda
while [ $# -gt 0 ]; do
    case "$1" in
    --device) DEVICE=${2:-}; shift ;;
    --device=*) DEVICE=${1#--device=} ;;
    *) echo "tests/gpu/h200.sh: unknown argument $1 (--device cuda|sim)"; exit 100 ;;
    esac
    shift
done
case "$DEVICE" in cuda|sim) ;; *) echo "tests/gpu/h200.sh: --device $DEVICE: expected cuda or sim"; exit 100 ;; esac
[ -f Makefile ] && [ -d tests/gpu ] || { echo "tests/gpu/h200.sh: run from the repository root"; exit 100; }

SDNN_BUNDLE=${SDNN_BUNDLE:-gpu-bundle}
export SDNN_BUNDLE
OUT=${OUT:-$(pwd)/build/h200-logs}
mkdir -p "$OUT" || exit 100
export OUT
S=$OUT/summary.txt
X=$OUT/extra.log
: >"$S"
: >"$X"
t0=$(date +%s)
BUDGET=${SDNN_H200_BUDGET_S:-470}
[ "$DEVICE" = sim ] && BUDGET=${SDNN_H200_BUDGET_S:-3600}
DEADLINE=$(( t0 + BUDGET ))
fails=0
note() { echo "$1" | tee -a "$S"; }

. tests/gpu/env.sh
# ---- 1. environment and build ---------------------------------------------------
if [ "$DEVICE" = cuda ]; then
    sdnn_gpu_env >>"$X" 2>&1 || { cat "$X"; echo "tests/gpu/h200.sh: no build environment"; exit 100; }
    B=build/gpu
    MAKE_ARGS="$SDNN_MAKE_ARGS"
    JOBS=$(nproc)
    {
        echo "== machine"
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -9
        "$SDNN_CUDA_HOME/bin/nvcc" --version | tail -2
        echo "cuDNN: $SDNN_CUDNN_HOME  NCCL: $SDNN_NCCL_HOME"
    } >>"$X" 2>&1
else
    sdnn_bundle_env >>"$X" 2>&1 || { cat "$X"; exit 100; }
    B=${SDNN_SIM_BUILD:-build-sim-bundle}
    SDNN_SIM_BUILD=$B
    SDNN_SIM_MAKE_EXTRA="DARKNET_HOME=$SDNN_DARKNET_HOME $SDNN_BLAS_ARG"
    MAKE_ARGS="GPU=sim BUILD=$B $SDNN_SIM_MAKE_EXTRA"
    SDNN_SIM_SEEDS=${SDNN_SIM_SEEDS:-none}
    export SDNN_SIM_BUILD SDNN_SIM_MAKE_EXTRA SDNN_SIM_SEEDS
    JOBS=${SDNN_JOBS:-2}
fi
echo "bundle: $SDNN_BUNDLE ($(tail -1 "$SDNN_BUNDLE/MANIFEST"))  darknet: $SDNN_DARKNET_HOME  blas: $SDNN_BLAS_ARG" >>"$X"
start=$(date +%s)
# shellcheck disable=SC2086
timeout 300 make -j"$JOBS" $MAKE_ARGS ${SDNN_ARCH:+GPU_ARCH="$SDNN_ARCH"} gpu-tests gpu-bench >"$OUT/gpu-build.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    tail -30 "$OUT/gpu-build.log"
    note "build ($DEVICE)          FAILED $(( $(date +%s) - start )) s  rc=$rc (gpu-build.log)"
    exit 101
fi
note "build ($DEVICE)          ok     $(( $(date +%s) - start )) s  $MAKE_ARGS"

left() { echo $(( DEADLINE - $(date +%s) )); }
L=$(left)

# ---- 2. the suite ------------------------------------------------------------------
SDNN_GPU_TEST_BUDGET_S=$(( L * 35 / 100 ))
export SDNN_GPU_TEST_BUDGET_S
sh tests/gpu/run.sh --device "$DEVICE" --no-build
rc=$?
[ $rc -ne 0 ] && fails=$((fails + rc))

# ---- 3. the benchmarks --------------------------------------------------------------
L2=$(left)
SDNN_GPU_BENCH_BUDGET_S=$(( L * 50 / 100 ))
[ "$SDNN_GPU_BENCH_BUDGET_S" -gt "$L2" ] && SDNN_GPU_BENCH_BUDGET_S=$L2
export SDNN_GPU_BENCH_BUDGET_S
sh bench/gpu/run.sh --device "$DEVICE" --no-build
rc=$?
[ $rc -ne 0 ] && fails=$((fails + rc))

# ---- 4. e2e: detector train on real images --------------------------------------------
e2e() {
    W=$(pwd)/build/h200-e2e
    rm -rf "$W" && mkdir -p "$W/data" "$W/backup" || return 1
    [ -f "$SDNN_BUNDLE/data/shapes/train.txt" ] || { echo "no shapes set in the bundle"; return 1; }
    case "$SDNN_BUNDLE" in /*) sb=$SDNN_BUNDLE ;; *) sb=$(pwd)/$SDNN_BUNDLE ;; esac
    ln -s "$sb/data/shapes" "$W/data/shapes"
    sed 's|^backup=.*|backup=backup/|' cfg/shapes.data >"$W/s.data"
    cp cfg/shapes-scalednn.cfg "$W/s.cfg"
    echo "engine=auto" >>"$W/s.cfg"
    lim=$(left); [ "$lim" -gt 120 ] && lim=120
    [ "$lim" -lt 1 ] && { echo "not run: the budget is spent"; return 1; }
    [ "$DEVICE" = sim ] && export SDNN_SIM_DEVICES=1
    (cd "$W" && timeout "$lim" env LD_PRELOAD="$SDNN_IMGLOAD" "$OLDPWD/$B/darknet" detector train s.data s.cfg \
        -gpus 0 -max_batches 20 -seed 1 -csv train.csv) >"$W/train.log" 2>&1
    rc=$?
    grep -i "engine\|device\|cannot load\|error" "$W/train.log" | head -12
    tail -3 "$W/train.log"
    [ $rc -eq 0 ] || { echo "detector train: rc=$rc"; return 1; }
    grep -qi "cannot load image" "$W/train.log" && { echo "an image did not load"; return 1; }
    ls "$W"/backup/*.weights >/dev/null 2>&1 || { echo "no weights saved"; return 1; }
    rows=$(grep -c '^[0-9]' "$W/train.csv" 2>/dev/null || echo 0)
    eng=$(sed -n 's/^scalednn: engine=[a-z]*: //p' "$W/train.log" | head -1 | cut -c1-40)
    echo "e2e: $rows iterations, engine ${eng:-?}, weights: $(ls "$W"/backup/ | tr '\n' ' ')"
    [ "$rows" -ge 1 ]
}
start=$(date +%s)
echo "==== e2e (build/h200-e2e/train.log)" >>"$X"
if e2e >>"$X" 2>&1; then r=ok; else r=FAILED; fails=$((fails + 1)); fi
note "$(printf '%-22s %-6s %4d s  %s' "e2e train (real PNGs)" "$r" "$(( $(date +%s) - start ))" "$(grep '^e2e:' "$X" | tail -1)")"

# ---- 5. compute-sanitizer ---------------------------------------------------------------
if [ "$DEVICE" = cuda ]; then
    CS=$(command -v compute-sanitizer || ls "$SDNN_CUDA_HOME"/bin/compute-sanitizer 2>/dev/null || true)
    for p in preload vrep; do
        start=$(date +%s)
        lim=$(left); [ "$lim" -gt 90 ] && lim=90
        if [ -z "$CS" ]; then note "sanitizer $p: not run (no compute-sanitizer)"; continue; fi
        if [ "$lim" -lt 20 ]; then note "sanitizer $p: not run (budget spent)"; continue; fi
        echo "==== compute-sanitizer memcheck $p" >>"$X"
        timeout "$lim" "$CS" --tool memcheck --error-exitcode 9 "$B/tests/gpu/$p" >>"$X" 2>&1
        rc=$?
        if [ $rc -eq 0 ]; then r=ok; else r=FAILED; fails=$((fails + 1)); fi
        note "$(printf '%-22s %-6s %4d s  rc=%d %s' "memcheck $p" "$r" "$(( $(date +%s) - start ))" "$rc" "$(grep 'ERROR SUMMARY' "$X" | tail -1)")"
    done
fi

# ---- summary ---------------------------------------------------------------------------
{
    echo "==== h200.sh summary (device $DEVICE, bundle $SDNN_BUNDLE)"
    if [ "$DEVICE" = cuda ]; then
        sed -n '/^== tests\/gpu summary/,$p' "$OUT/gpu-tests.log" 2>/dev/null
    else
        grep -E "^[a-z_0-9]+: (ok on simulated|FAILED)|^tests/gpu --device sim" "$OUT/sim-tests.log" 2>/dev/null
    fi
    sed -n '/^== bench\/gpu summary/,$p' "$OUT/bench-gpu.txt" 2>/dev/null
    echo "== h200.sh steps"
    cat "$S"
    echo "h200.sh: $fails failure(s), $(( $(date +%s) - t0 )) s of a budget of $BUDGET s"
} >"$S.new"
mv "$S.new" "$S"
cat "$S"
[ $fails -gt 255 ] && fails=255
exit $fails
