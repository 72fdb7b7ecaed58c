#!/bin/sh
# tests/gpu/run.sh — the GPU suite, on a machine with a CUDA device or on
# simulated devices (make GPU=sim, any machine).
#
#   sh tests/gpu/run.sh             build (make GPU=1 ... gpu-tests) and run
#   sh tests/gpu/run.sh --device sim [--asan] [--no-build]
#                                   build (make GPU=sim, BUILD=build-sim or,
#                                   with --asan, SAN=1 BUILD=build-sim-asan)
#                                   and run every program on simulated
#                                   devices, once per seed of SDNN_SIM_SEEDS
#                                   (default "none 11 23"; --asan: "17"):
#                                   "none" runs without SDNN_SIM_JITTER
#   sh tests/gpu/run.sh --prepare   where Debian's darknet is installed:
#                                   sh scripts/gpu_bundle.sh gpu-bundle (the
#                                   folder a GPU machine without Debian
#                                   packages needs; then SDNN_BUNDLE=gpu-bundle
#                                   there, or sh tests/gpu/h200.sh)
#   sh tests/gpu/run.sh --no-build  run what build/gpu already holds
#
# Run from the repository root.  Self-checking: every program counts its
# failed checks and exits non-zero on any; this script runs every program
# even after one fails, prints one line per program (name, ok or FAILED,
# seconds, its "N passed, M failed" count) and exits with the number of
# programs that failed (0 = all passed).  Logs go to $OUT (when set, as on
# the lent GPU machine) or build/gpu/logs (build-sim/logs).
#
# Environment:
#   SDNN_BUNDLE=DIR            the Darknet side from scripts/gpu_bundle.sh's
#                              folder (the lent machine; --device sim too)
#   SDNN_GPU_TEST_BUDGET_S     seconds for all programs together (default
#                              300): each program's timeout is its own limit
#                              below or what is left, whichever is less; a
#                              program with nothing left is FAILED, not run
#   SDNN_GPU_FAIL="a b"        programs replaced by a deliberate failure
#                              (checks this script's reporting)
#   SDNN_GPU_ONLY="a b"        run only these programs (and scripts)
#   SDNN_SIM_JOBS=N            --device sim: N programs/scripts at once
#                              (default: online CPUs, at most 4)
#
# Results on simulated devices show the engine's host logic, ordering and
# arithmetic, and its CUDA kernels (all 56) run as themselves on the host
# executor under CUDA's launch, barrier and shared-memory rules; never a
# GPU, cuBLAS (OpenBLAS stands in), cuDNN or real NCCL (sim/nccl.c).
#
#   probe     the engine loads, finds the device, every layer of the
#             shipped and Debian cfgs is one it runs
#   runtime   dev.h's runtime: copies, events, NCCL groups; on simulated
#             devices also faults, tagged-memory errors, sticky errors,
#             copy statistics, a deadlock outside an NCCL group
#   formulas  ops.h against libdarknet's CPU layers (host only)
#   codecs    device codecs = host codecs byte for byte, within bounds;
#             device ring = host local backend bit for bit (2..4 ranks)
#   comm      nccl (world 1) = device backend = local, plain and coded
#   layers    every device layer vs libdarknet, fwd + bwd, rel err < 1e-4,
#             and Darknet's update; zoo, shapes, fmnist, yolov3-tiny,
#             yolov2-tiny, cifar
#   train     20 steps of the shapes detector vs train_network, 10 of
#             fmnist; the trainer with 1 replica on the gpu engine (fed
#             batches) = the single net bit for bit
#   engines   the trainer with engine=gpu vs engine=cpu on the same batches:
#             shapes and yolov3-tiny-shaped, 1/2/4 replicas, overlap,
#             none/fp16/int8/topk with error feedback, bucket_mb auto,
#             stock mode, .ef across engines, timeline, a NaN's message;
#             shapes-v4tiny/v7tiny (fork dialect), 2 replicas
#   dialect   the fork's dialect on the device, layer by layer
#             vs the CPU: grouped routes, mish, swish (fwd + bwd)
#   autoplan_gpu bucket_mb=auto on the gpu engine: the profile from the
#             layers' device events, the plan's buckets = the exchange's
#   engine_ops the gpu engine's ops driven directly: snapshot, pack,
#             apply, the deferred finite check, ready/ready_wait ordering,
#             the engine's comm, device error feedback, train's callbacks,
#             resize
#   vrep      2 virtual replicas x batch 4 = 1 x batch 8 (rel < 1e-4),
#             overlap/split/codec/stock variants, through the trainer
#   multidev  4 devices: the NCCL ring over 2-4 devices = local; the
#             trainer on the gpu engine with subdivisions, batch norm,
#             int8/top-k, split=device0 across devices, a residual net,
#             and (simulated NCCL only) its error paths: a failed exchange
#             leaves the trainer failed (feed and save refused)
#   preload   the preload ring never overwrites a popped slot; feed limits
#   feed      the loader -> preload ring path through the trainer:
#             preload 1-3, split=cpu|device0 = the synchronous path bit
#             for bit, the copies of each feed, resize drops old batches
#   memory    no unused staging buffers; the workspace grows only between
#             steps
#   hostloss  the host YOLO/region loss's round trip: bytes = the formula
#             (and the runtime's pinned copies on simulated devices), the
#             delta = the synchronous path bit for bit, a slow host loss
#             shows as the device's wait; stock mode on the gpu engine moves
#             Darknet's sync bytes and matches the cpu engine; memory:
#             scalednn's device peak <= stock's + the bucket buffers
#   wide      a connected layer of 70,000 outputs (past gridDim.y 65,535)
#             against libdarknet
#   convpick  cuDNN algorithm choice: tf32=1 never accepts fp16
set -u
. tests/gpu/env.sh

DEVICE=cuda
ASAN=0
BUILD_IT=1
while [ $# -gt 0 ]; do
    case "$1" in
    --prepare) sdnn_gpu_prepare; exit $? ;;
    --device) DEVICE=${2:-}; shift ;;
    --device=*) DEVICE=${1#--device=} ;;
    --asan) ASAN=1 ;;
    --no-build) BUILD_IT=0 ;;
    *) echo "tests/gpu/run.sh: unknown argument $1 (--device cuda|sim, --asan, --no-build, --prepare)"; exit 100 ;;
    esac
    shift
done
case "$DEVICE" in
cuda|sim) ;;
*) echo "tests/gpu/run.sh: --device $DEVICE: expected cuda or sim"; exit 100 ;;
esac

if [ "$DEVICE" = sim ]; then
    if [ -n "${SDNN_BUNDLE:-}" ]; then
        # The lent machine's layout on simulated devices: libdarknet, the
        # OpenCV stand-ins, the image loader and OpenBLAS from the bundle.
        sdnn_bundle_env || exit 100
        SDNN_SIM_MAKE_EXTRA="DARKNET_HOME=$SDNN_DARKNET_HOME $SDNN_BLAS_ARG"
        SDNN_SIM_BUILD=${SDNN_SIM_BUILD:-build-sim-bundle}
        export SDNN_SIM_MAKE_EXTRA SDNN_SIM_BUILD
        if [ "$ASAN" = 1 ]; then
            # ASan's runtime must come first: no preload (the programs of
            # tests/gpu make their batches in memory and load no image).
            SDNN_IMGLOAD=
        else
            # Everything below (also ./darknet in the trainer's checks)
            # reads images through the bundle's stb_image loader.
            LD_PRELOAD=$SDNN_IMGLOAD
            export LD_PRELOAD
        fi
    fi
    exec sh tests/gpu/run_sim.sh "$ASAN" "$BUILD_IT"
fi

sdnn_gpu_env || exit 100
LOGS=${OUT:-$SDNN_ROOT/build/gpu/logs}
mkdir -p "$LOGS"
{
    echo "== machine"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
    "$SDNN_CUDA_HOME/bin/nvcc" --version | tail -2
    echo "darknet: $SDNN_DARKNET_HOME  cuDNN: $SDNN_CUDNN_HOME  NCCL: $SDNN_NCCL_HOME"
} 2>&1 | tee "$LOGS/gpu-env.txt"

if [ "$BUILD_IT" = 1 ]; then
    start=$(date +%s)
    # shellcheck disable=SC2086
    if ! make -j"$(nproc)" $SDNN_MAKE_ARGS GPU_ARCH="$SDNN_ARCH" gpu-tests >"$LOGS/gpu-build.log" 2>&1; then
        tail -40 "$LOGS/gpu-build.log"
        echo "tests/gpu/run.sh: the GPU build failed (log: $LOGS/gpu-build.log)"
        exit 101
    fi
    echo "build: $(( $(date +%s) - start )) s"
fi

BIN=build/gpu/tests/gpu
failed=0
ran=" "
summary=""
total_start=$(date +%s)
DEADLINE=$(( total_start + ${SDNN_GPU_TEST_BUDGET_S:-300} ))
# At most a few files under $OUT (the lent machine returns 8): every
# program's output goes to one log, its stderr (Darknet's layer tables and
# YOLO status lines) to another.
LOG=$LOGS/gpu-tests.log
ERR=$LOGS/gpu-tests.err
: >"$LOG"
: >"$ERR"
run() {  # name timeout args...
    name=$1; limit=$2; shift 2
    case "$ran" in *" $name "*) return ;; esac
    ran="$ran$name "
    if [ -n "${SDNN_GPU_ONLY:-}" ]; then
        case " $SDNN_GPU_ONLY " in *" $name "*) ;; *) return ;; esac
    fi
    start=$(date +%s)
    left=$(( DEADLINE - start ))
    echo "==== $name" >>"$LOG"
    echo "==== $name" >>"$ERR"
    if [ "$left" -lt 1 ]; then
        rc=125
        echo "$name: not run: the budget of ${SDNN_GPU_TEST_BUDGET_S:-300} s is spent" >"$LOGS/.cur.log"
    else
        [ "$limit" -gt "$left" ] && limit=$left
        case " ${SDNN_GPU_FAIL:-} " in
        *" $name "*)
            sh -c 'echo "$1: FAIL: a deliberate failure (SDNN_GPU_FAIL)"; exit 1' sh "$name" >"$LOGS/.cur.log" 2>>"$ERR" ;;
        *)
            timeout "$limit" env ${SDNN_IMGLOAD:+LD_PRELOAD=$SDNN_IMGLOAD} "$BIN/$name" "$@" >"$LOGS/.cur.log" 2>>"$ERR" ;;
        esac
        rc=$?
    fi
    cat "$LOGS/.cur.log" >>"$LOG"
    secs=$(( $(date +%s) - start ))
    key=$(grep -E "passed" "$LOGS/.cur.log" | tail -1)
    if [ $rc -ne 0 ]; then
        grep -E "FAIL|not run" "$LOGS/.cur.log" | head -20
        failed=$((failed + 1))
        [ $rc -eq 124 ] && key="timed out after $limit s${key:+; $key}"
        [ $rc -eq 125 ] && key="not run: the budget is spent"
        line=$(printf '%-12s FAILED %4d s  rc=%d %s' "$name" "$secs" "$rc" "$key")
    else
        line=$(printf '%-12s ok     %4d s  %s' "$name" "$secs" "$key")
    fi
    echo "$line"
    summary="$summary$line
"
    rm -f "$LOGS/.cur.log"
}

export SDNN_DEBIAN_CFG
run probe 60 --expect-device
run runtime 60
run formulas 60
run codecs 240
run comm 120
run layers 300
run train 240
run engines 240
run dialect 60
run autoplan_gpu 120
run engine_ops 120
run vrep 180
run multidev 120
run preload 60
run feed 120
run memory 60
run hostloss 120
run wide 180
run convpick 30
# A program of tests/gpu that the list above does not name still runs.
for src in tests/gpu/*.c; do
    run "$(basename "$src" .c)" 120
done
{
    echo "== tests/gpu summary (device cuda)"
    printf '%s' "$summary"
    echo "tests/gpu: $failed program(s) failed, $(( $(date +%s) - total_start )) s"
} | tee -a "$LOG"
exit $failed
