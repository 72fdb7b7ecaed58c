#!/bin/sh
# bench/gpu/run.sh — the GPU benchmarks with their targets asserted.
#
#   sh bench/gpu/run.sh [--no-build]                 a CUDA device (build as
#                                                    tests/gpu/run.sh does)
#   sh bench/gpu/run.sh --device sim [--no-build]    simulated devices
#                                                    (make GPU=sim), small sizes
#
#   1. pinned vs pageable copy bandwidth
#   2. preload hidden fraction: shapes-size steps with preload 1 (copy
#      exposed) and 2 (copy under the previous step); target >= 95% hidden
#   3. yolov3-tiny 416x416 batch 64: 1 device (scalednn world of one =
#      Darknet's single-GPU path) fp32 and TF32, 2 virtual replicas x 32
#      stock and scalednn; PyTorch on the same GPU; target >= 0.7x PyTorch's
#      images/s (fp32 against fp32, TF32 against TF32)
#   4. allreduce sweeps: device backend 2 and 4 ranks, nccl world 1, codecs
#      none/fp16/int8/topk; target #wrong 0 (bench_gpu comm exits 3 if not)
#   5. host YOLO loss bytes a step (bench_hostloss bytes, yolov3-tiny at the
#      sizes of 3): #wrong 0 (counters and copies = the formula); memory of
#      scalednn vs stock mode on shapes (bench_hostloss memory): #wrong 0
#      (scalednn's device peak <= stock's + the bucket buffers; measured on
#      simulated devices, "not measured" on CUDA)
#
# Every step runs even after one fails.  One line per step (name, ok or
# FAILED, seconds, its key number) and one per target (value, target,
# ok/FAILED), then the count; the exit status is the number of failed steps
# and targets.  On simulated devices the time targets are printed, not
# asserted (a CPU's times say nothing of a GPU's), and PyTorch is skipped;
# every #wrong is asserted.  Results: $OUT/bench-gpu.txt (or the build's
# logs folder).
#
# Environment: SDNN_BUNDLE=DIR (as tests/gpu/run.sh), SDNN_GPU_BENCH_BUDGET_S
# (seconds for all steps, default 240: each step's timeout is its own limit
# or what is left, whichever is less), SDNN_GPU_FAIL="step ..." (deliberate
# failures, to check the reporting).
#
# Time on one H200 (estimate): the sizes below were chosen to fit 240 s —
# bandwidth 9 x 4 copies of 256 MiB (< 5 s); 2 x 30 shapes steps of batch
# 256 at 64x64 (< 30 s); 4 x 15 yolov3-tiny steps of batch 64 at 416 (each
# about 1 TFLOP of fp32 work a step, plus parsing and cuDNN's algorithm
# search: about 20 s each); 2 PyTorch runs (import and cudnn.benchmark:
# about 30 s each); 6 allreduce sweeps up to 64-256 MiB (a few seconds
# each).  The budget bounds it whatever the machine does.
set -u
. tests/gpu/env.sh

DEVICE=cuda
BUILD_IT=1
while [ $# -gt 0 ]; do
    case "$1" in
    --device) DEVICE=${2:-}; shift ;;
    --device=*) DEVICE=${1#--device=} ;;
    --no-build) BUILD_IT=0 ;;
    *) echo "bench/gpu/run.sh: unknown argument $1 (--device cuda|sim, --no-build)"; exit 100 ;;
    esac
    shift
done

if [ "$DEVICE" = sim ]; then
    if [ -n "${SDNN_BUNDLE:-}" ]; then
        sdnn_bundle_env || exit 100
        B=${SDNN_SIM_BUILD:-build-sim-bundle}
        MAKE_ARGS="GPU=sim BUILD=$B DARKNET_HOME=$SDNN_DARKNET_HOME $SDNN_BLAS_ARG"
    else
        B=${SDNN_SIM_BUILD:-build-sim}
        MAKE_ARGS="GPU=sim BUILD=$B"
        [ -d /usr/share/darknet/cfg ] && SDNN_DEBIAN_CFG=/usr/share/darknet/cfg
    fi
    SDNN_SIM_DEVICES=${SDNN_SIM_DEVICES:-4}
    export SDNN_SIM_DEVICES
    JOBS=${SDNN_JOBS:-2}
    LOGS=${OUT:-$(pwd)/$B/logs}
elif [ "$DEVICE" = cuda ]; then
    sdnn_gpu_env || exit 100
    B=build/gpu
    MAKE_ARGS="$SDNN_MAKE_ARGS"
    JOBS=$(nproc)
    LOGS=${OUT:-$SDNN_ROOT/build/gpu/logs}
else
    echo "bench/gpu/run.sh: --device $DEVICE: expected cuda or sim"; exit 100
fi
mkdir -p "$LOGS"
R=$LOGS/bench-gpu.txt
: >"$R"

if [ "$BUILD_IT" = 1 ]; then
    start=$(date +%s)
    # shellcheck disable=SC2086
    if ! make -j"$JOBS" $MAKE_ARGS ${SDNN_ARCH:+GPU_ARCH="$SDNN_ARCH"} gpu-bench >"$LOGS/bench-build.log" 2>&1; then
        tail -30 "$LOGS/bench-build.log"
        echo "bench/gpu/run.sh: the build failed (log: $LOGS/bench-build.log)"
        exit 101
    fi
    echo "build ($MAKE_ARGS): $(( $(date +%s) - start )) s"
fi
BG=$B/bench/gpu/bench_gpu
Y=${SDNN_DEBIAN_CFG:-/usr/share/darknet/cfg}/yolov3-tiny.cfg
export SDNN_GPU_LOSS_THREADS=${SDNN_GPU_LOSS_THREADS:-$(nproc)}

failed=0
summary=""
total_start=$(date +%s)
DEADLINE=$(( total_start + ${SDNN_GPU_BENCH_BUDGET_S:-240} ))
say() {  # a summary line: printed now and again at the end
    echo "$1"
    summary="$summary$1
"
}
# A step's RESULT line, for val().
res_set() { eval "RES_$1=\$2"; }
val() {  # step key -> the value of key= in the step's RESULT line
    eval "r=\${RES_$1:-}"
    printf '%s\n' "$r" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}
step() {  # name timeout key command...  (key: the RESULT field shown)
    name=$1; limit=$2; key=$3; shift 3
    start=$(date +%s)
    left=$(( DEADLINE - start ))
    echo "#### $name: $*" >>"$R"
    if [ "$left" -lt 1 ]; then
        rc=125
        echo "not run: the budget of ${SDNN_GPU_BENCH_BUDGET_S:-240} s is spent" >"$LOGS/.step.log"
    else
        [ "$limit" -gt "$left" ] && limit=$left
        case " ${SDNN_GPU_FAIL:-} $1" in
        *" $name "*) echo "FAIL: a deliberate failure (SDNN_GPU_FAIL)" >"$LOGS/.step.log"; rc=1 ;;
        *" python3") timeout "$limit" "$@" >"$LOGS/.step.log" 2>&1; rc=$? ;;
        *) timeout "$limit" env ${SDNN_IMGLOAD:+LD_PRELOAD=$SDNN_IMGLOAD} "$@" >"$LOGS/.step.log" 2>&1; rc=$? ;;
        esac
    fi
    # Darknet's layer table is noise here.
    grep -v "^Region\|^ *[0-9]* conv\|^ *[0-9]* max\|^layer \|^ *[0-9]* route\|^ *[0-9]* upsample\|^ *[0-9]* yolo" \
        "$LOGS/.step.log" >>"$R"
    res_set "$name" "$(grep '^RESULT ' "$LOGS/.step.log" | tail -1)"
    rm -f "$LOGS/.step.log"
    secs=$(( $(date +%s) - start ))
    v=$(val "$name" "$key")
    if [ "$rc" -ne 0 ]; then
        failed=$((failed + 1))
        [ "$rc" -eq 124 ] && v="timed out after $limit s"
        [ "$rc" -eq 3 ] && v="#wrong $(val "$name" wrong)"
        say "$(printf '%-22s FAILED %4d s  rc=%d %s' "$name" "$secs" "$rc" "${v:+$key=$v}")"
    elif [ -z "$v" ]; then
        failed=$((failed + 1))
        say "$(printf '%-22s FAILED %4d s  no RESULT %s' "$name" "$secs" "$key")"
    else
        say "$(printf '%-22s ok     %4d s  %s=%s' "$name" "$secs" "$key" "$v")"
    fi
}
# target what value op bound [asserted=1|0]: value op bound (op ge|le|eq)
target() {
    what=$1; v=$2; op=$3; bound=$4; assert=${5:-1}
    if [ -z "$v" ] || [ -z "$bound" ]; then
        ok=0; shown="missing (${v:-?} $op ${bound:-?})"
    else
        ok=$(awk -v a="$v" -v b="$bound" -v op="$op" 'BEGIN {
            if (op == "ge") print (a + 0 >= b + 0); else if (op == "le") print (a + 0 <= b + 0);
            else print (a + 0 == b + 0) }')
        shown="$v $op $bound"
    fi
    if [ "$assert" = 0 ]; then
        say "$(printf 'target %-36s %-24s not asserted (simulated devices)' "$what" "$shown")"
    elif [ "$ok" = 1 ]; then
        say "$(printf 'target %-36s %-24s ok' "$what" "$shown")"
    else
        failed=$((failed + 1))
        say "$(printf 'target %-36s %-24s FAILED' "$what" "$shown")"
    fi
}
scaled() {  # product of a value and a factor, for the ratio targets
    [ -n "$1" ] && awk -v a="$1" -v f="$2" 'BEGIN { printf "%.1f", a * f }'
}

{
    date -u +"# %Y-%m-%d %H:%M UTC"
    if [ "$DEVICE" = cuda ]; then nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
    else echo "simulated devices: $SDNN_SIM_DEVICES (host logic; all 56 kernels as themselves on the executor, cuBLAS, cuDNN and NCCL as stand-ins)"; fi
} >>"$R"

if [ "$DEVICE" = cuda ]; then
    MB=256 SB=256 SS=30 YB=64 YS=416 YN=15 CMAX=64 NMAX=256 ASSERT_TIME=1
else
    MB=16 SB=32 SS=8 YB=8 YS=128 YN=4 CMAX=4 NMAX=4 ASSERT_TIME=0
fi
step bandwidth 60 pinned_h2d $BG bandwidth -mb $MB
step preload1 90 hidden_pct $BG train cfg/shapes.cfg -batch $SB -size 64 -steps $SS -preload 1
step preload2 90 hidden_pct $BG train cfg/shapes.cfg -batch $SB -size 64 -steps $SS -preload 2
# The quick correctness sweeps before the long training runs.
for c in none fp16 int8 topk; do
    step "comm_device2_$c" 60 wrong $BG comm -backend device -ranks 2 -codec $c -max $CMAX
done
step comm_device4_none 60 wrong $BG comm -backend device -ranks 4 -codec none -max $CMAX
step comm_nccl1_none 60 wrong $BG comm -backend nccl -ranks 1 -codec none -max $NMAX
step yolo_1dev_fp32 120 images_per_s $BG train "$Y" -batch $YB -size $YS -steps $YN -preload 2
step yolo_1dev_tf32 120 images_per_s $BG train "$Y" -batch $YB -size $YS -steps $YN -preload 2 -tf32
step yolo_2vrep_stock 120 images_per_s $BG train "$Y" -batch $YB -size $YS -steps $YN -replicas 2 -mode stock -tf32
step yolo_2vrep_scalednn 120 images_per_s $BG train "$Y" -batch $YB -size $YS -steps $YN -replicas 2 -mode scalednn -tf32
BH=$B/bench/gpu/bench_hostloss
# The host YOLO loss's bytes a step (the formula, the net's counters and, on
# simulated devices, the runtime's copies) and the memory bound against
# stock mode (simulated devices measure the device peak; CUDA: not measured).
step hostloss_bytes 120 d2h $BH bytes "$Y" -batch $YB -subdivisions $(( YB / 4 )) -size $YS
step memory_shapes 120 wrong $BH memory cfg/shapes.cfg -batch 8 -subdivisions 2 -size 64 -replicas 2 -steps 3
if [ "$DEVICE" = cuda ]; then
    step torch_fp32 120 images_per_s python3 bench/gpu/torch_yolov3_tiny.py "$Y" --batch $YB --size $YS --steps $YN --no-tf32
    step torch_tf32 120 images_per_s python3 bench/gpu/torch_yolov3_tiny.py "$Y" --batch $YB --size $YS --steps $YN --tf32
fi

# ---- the stated targets -------------------------------------------------------
target "preload 2 hides the copies (%)" "$(val preload2 hidden_pct)" ge 95 $ASSERT_TIME
if [ "$DEVICE" = cuda ]; then
    target "1 device fp32 >= 0.7 x torch fp32" "$(val yolo_1dev_fp32 images_per_s)" ge "$(scaled "$(val torch_fp32 images_per_s)" 0.7)"
    target "1 device tf32 >= 0.7 x torch tf32" "$(val yolo_1dev_tf32 images_per_s)" ge "$(scaled "$(val torch_tf32 images_per_s)" 0.7)"
else
    say "target 0.7 x PyTorch: not run (PyTorch runs on the CUDA device only)"
fi
# #wrong 0 is each comm step's own exit status (3 when not); shown again here.
for s in comm_device2_none comm_device2_fp16 comm_device2_int8 comm_device2_topk comm_device4_none comm_nccl1_none hostloss_bytes memory_shapes; do
    target "$s #wrong" "$(val "$s" wrong)" eq 0
done

{
    echo "== bench/gpu summary (device $DEVICE)"
    printf '%s' "$summary"
    echo "bench/gpu: $failed step(s) or target(s) failed, $(( $(date +%s) - total_start )) s"
} | tee -a "$R"
exit $failed
