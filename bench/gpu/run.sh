#!/bin/sh
# bench/gpu/run.sh — the GPU benchmarks, for a machine with a CUDA device
# (build as tests/gpu/run.sh does; results to $OUT/bench-gpu.txt or
# build/gpu/logs).  Run from the repository root; about 4 minutes on an H200.
#
#   1. pinned vs pageable copy bandwidth
#   2. preload hidden fraction: shapes-size steps with preload 1 (copy
#      exposed) and 2 (copy under the previous step), target >= 95% hidden
#   3. yolov3-tiny 416x416 batch 64: 1 device (scalednn world of one =
#      Darknet's single-GPU path), 2 virtual replicas x 32 stock and
#      scalednn, fp32 and TF32; PyTorch reference, target >= 0.7x
#   4. allreduce sweeps: device backend 2 and 4 ranks, nccl world 1,
#      codecs none/fp16/int8/topk
set -u
. tests/gpu/env.sh
sdnn_gpu_env || exit 100
LOGS=${OUT:-$SDNN_ROOT/build/gpu/logs}
mkdir -p "$LOGS"
R=$LOGS/bench-gpu.txt
# shellcheck disable=SC2086
make -j"$(nproc)" $SDNN_MAKE_ARGS GPU_ARCH="$SDNN_ARCH" gpu-bench >"$LOGS/bench-build.log" 2>&1 ||
    { tail -30 "$LOGS/bench-build.log"; exit 101; }
B=build/gpu/bench/gpu/bench_gpu
Y=$SDNN_DEBIAN_CFG/yolov3-tiny.cfg
export SDNN_GPU_LOSS_THREADS=${SDNN_GPU_LOSS_THREADS:-$(nproc)}
{
    date -u +"# %Y-%m-%d %H:%M UTC"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
    echo "## 1. bandwidth";             timeout 60 $B bandwidth -mb 256
    echo "## 2. preload";
    timeout 90 $B train cfg/shapes.cfg -batch 256 -size 64 -steps 30 -preload 1
    timeout 90 $B train cfg/shapes.cfg -batch 256 -size 64 -steps 30 -preload 2 -async
    echo "## 3. yolov3-tiny 416 batch 64"
    timeout 120 $B train "$Y" -batch 64 -size 416 -steps 15 -preload 2 -async
    timeout 120 $B train "$Y" -batch 64 -size 416 -steps 15 -preload 2 -async -tf32
    timeout 120 $B train "$Y" -batch 64 -size 416 -steps 15 -replicas 2 -mode stock -async -tf32
    timeout 120 $B train "$Y" -batch 64 -size 416 -steps 15 -replicas 2 -mode scalednn -async -tf32
    timeout 120 python3 bench/gpu/torch_yolov3_tiny.py "$Y" --batch 64 --size 416 --steps 15 --no-tf32
    timeout 120 python3 bench/gpu/torch_yolov3_tiny.py "$Y" --batch 64 --size 416 --steps 15 --tf32
    echo "## 4. allreduce"
    for c in none fp16 int8 topk; do timeout 60 $B comm -backend device -ranks 2 -codec $c -max 64; done
    timeout 60 $B comm -backend device -ranks 4 -codec none -max 64
    timeout 60 $B comm -backend nccl -ranks 1 -codec none -max 256
} 2>&1 | grep -v "^Region\|^ *[0-9]* conv\|^ *[0-9]* max\|^layer \|^ *[0-9]* route\|^ *[0-9]* upsample\|^ *[0-9]* yolo" | tee "$R"
