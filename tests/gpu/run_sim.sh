#!/bin/sh
# tests/gpu/run_sim.sh — the GPU suite on simulated devices; called by
# `sh tests/gpu/run.sh --device sim [--asan] [--no-build]` (arguments: asan
# 0|1, build 0|1).  Every program of tests/gpu (tests/gpu/*.c) runs once per seed of
# SDNN_SIM_SEEDS ("none" = no jitter), SDNN_SIM_DEVICES=4, and prints one
# summary line; the exit status is the number of programs that failed.
#
# What passes here is the engine's host logic, ordering and arithmetic on
# simulated devices: the kernels of the .cu files mk/gpu.mk lists in
# GPU_SIM_CU run as themselves on the simulated executor (host arithmetic,
# CUDA's launch and barrier rules), the others as C stand-ins; never cuDNN
# or real NCCL, never a GPU's timing or memory model.
#
# From run.sh with SDNN_BUNDLE: SDNN_SIM_MAKE_EXTRA (DARKNET_HOME=bundle,
# BLAS=), SDNN_SIM_BUILD (build-sim-bundle), SDNN_IMGLOAD (preloaded into
# every program) and the bundle's LD_LIBRARY_PATH.  SDNN_GPU_FAIL="a b"
# replaces those programs by a deliberate failure; SDNN_GPU_ONLY="a b" runs
# only those.
set -u
ASAN=$1
BUILD_IT=$2
if [ "$ASAN" = 1 ]; then
    B=${SDNN_SIM_BUILD:-build-sim}-asan
    MAKE_ARGS="GPU=sim SAN=1 BUILD=$B ${SDNN_SIM_MAKE_EXTRA:-}"
    SEEDS=${SDNN_SIM_SEEDS:-17}
    ROOT=$(pwd)
    LSAN_OPTIONS="suppressions=$ROOT/tests/lsan.supp:print_suppressions=0"
    ASAN_OPTIONS="suppressions=$ROOT/tests/asan.supp"
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    export LSAN_OPTIONS ASAN_OPTIONS UBSAN_OPTIONS
    SLOW=4
else
    B=${SDNN_SIM_BUILD:-build-sim}
    MAKE_ARGS="GPU=sim BUILD=$B ${SDNN_SIM_MAKE_EXTRA:-}"
    SEEDS=${SDNN_SIM_SEEDS:-none 11 23}
    SLOW=1
fi
LOGS=${OUT:-$(pwd)/$B/logs}
mkdir -p "$LOGS"

if [ "$BUILD_IT" = 1 ]; then
    start=$(date +%s)
    # shellcheck disable=SC2086
    if ! make -j"${SDNN_JOBS:-2}" $MAKE_ARGS gpu-tests >"$LOGS/sim-build.log" 2>&1; then
        tail -40 "$LOGS/sim-build.log"
        echo "tests/gpu/run.sh --device sim: the build failed (log: $LOGS/sim-build.log)"
        exit 101
    fi
    echo "build ($MAKE_ARGS): $(( $(date +%s) - start )) s"
fi

if [ -n "${SDNN_DEBIAN_CFG:-}" ]; then :
elif [ -d /usr/share/darknet/cfg ]; then SDNN_DEBIAN_CFG=/usr/share/darknet/cfg
else SDNN_DEBIAN_CFG=$(pwd)/gpu-bundle/darknet/cfg; fi
export SDNN_DEBIAN_CFG
SDNN_SIM_DEVICES="${SDNN_SIM_DEVICES:-4}"
export SDNN_SIM_DEVICES

BIN=$B/tests/gpu
LOG=$LOGS/sim-tests.log
ERR=$LOGS/sim-tests.err
: >"$LOG"
: >"$ERR"
failed=0
total_start=$(date +%s)
sdnn_run_prog() {  # timeout program args...
    t=$1; p=$2; shift 2
    if [ "$p" = sdnn_injected_failure ]; then
        echo "$name: FAIL: a deliberate failure (SDNN_GPU_FAIL)"
        return 1
    fi
    timeout "$t" env ${SDNN_IMGLOAD:+LD_PRELOAD=$SDNN_IMGLOAD} "$p" "$@"
}
run() {  # name timeout args...
    name=$1; limit=$(( $2 * SLOW )); shift 2
    if [ -n "${SDNN_GPU_ONLY:-}" ]; then
        case " $SDNN_GPU_ONLY " in *" $name "*) ;; *) return ;; esac
    fi
    start=$(date +%s)
    bad=""
    prog=$BIN/$name
    case " ${SDNN_GPU_FAIL:-} " in *" $name "*) prog=sdnn_injected_failure ;; esac
    for seed in $SEEDS; do
        echo "==== $name (jitter $seed)" >>"$LOG"
        echo "==== $name (jitter $seed)" >>"$ERR"
        if [ "$seed" = none ]; then
            ( unset SDNN_SIM_JITTER; sdnn_run_prog "$limit" "$prog" "$@" ) >"$LOGS/.cur.log" 2>>"$ERR"
        else
            SDNN_SIM_JITTER=$seed sdnn_run_prog "$limit" "$prog" "$@" >"$LOGS/.cur.log" 2>>"$ERR"
        fi
        rc=$?
        cat "$LOGS/.cur.log" >>"$LOG"
        if [ $rc -ne 0 ]; then
            grep -E "FAIL" "$LOGS/.cur.log" | head -20
            [ $rc -eq 124 ] && echo "$name (jitter $seed): timed out after $limit s"
            bad="$bad $seed:rc=$rc"
        fi
        last=$(grep -E "passed" "$LOGS/.cur.log" | tail -1)
    done
    rm -f "$LOGS/.cur.log"
    secs=$(( $(date +%s) - start ))
    if [ -n "$bad" ]; then
        failed=$((failed + 1))
        echo "$name: FAILED (simulated devices; jitter seeds:$bad; ${secs} s)" | tee -a "$LOG"
    else
        echo "$name: ok on simulated devices (jitter seeds: $SEEDS; $last; ${secs} s)" | tee -a "$LOG"
    fi
}

# Every program of tests/gpu runs (a new one needs no line here); these
# need an argument or more time than the default 240 s.
for src in tests/gpu/*.c; do
    name=$(basename "$src" .c)
    case "$name" in
    probe) run probe 60 --expect-device ;;
    codecs|layers) run "$name" 300 ;;
    *) run "$name" 240 ;;
    esac
done
# The executor's own programs (C++ against the CUDA shim, simulated
# devices only): tests/gpu/sim/*.cu.
for src in tests/gpu/sim/*.cu; do
    [ -e "$src" ] || continue
    run "sim/$(basename "$src" .cu)" 240
done
# The scripts of tests/gpu (each prints "NAME: ok ..." per check, "FAIL" on
# a failure, and exits non-zero on any).
run_script() {
    name=$1
    start=$(date +%s)
    if SLOW=$SLOW sh "tests/gpu/$name.sh" "$B" >"$LOGS/.cur.log" 2>>"$ERR"; then
        echo "$name: ok on simulated devices ($(grep -c "^$name: ok" "$LOGS/.cur.log") checks; $(( $(date +%s) - start )) s)" | tee -a "$LOG"
    else
        grep FAIL "$LOGS/.cur.log" | head -10
        failed=$((failed + 1))
        echo "$name: FAILED (simulated devices; $(( $(date +%s) - start )) s)" | tee -a "$LOG"
    fi
    cat "$LOGS/.cur.log" >>"$LOG"
    rm -f "$LOGS/.cur.log"
}
# ./darknet detector train -gpus 0,1 with engine=gpu through the trainer.
run_script cli_sim
# backend=nccl under mpirun: 2 processes x 2 devices on one NCCL communicator
# against 1 x 4 and backend=mpi, a killed and a stopped rank.
run_script cli_nccl
# Bytes each replica sends against the simulated NCCL's counter, and the
# matrix {1x4, 2x2} x codecs x {bucket_mb fixed, auto} x {nccl, auto} (issue 24).
run_script cli_bytes
# The loader -> preload ring path end to end: engine=gpu against engine=cpu
# per iteration (preload 1-3, split=device0, subdivisions, stock, -map,
# resume, random=1).
run_script cli_engine
# -gpus names devices: ids past the count, virtual=1, the banner, a layer
# the engine does not run.
run_script cli_devices
# scalednn gradcheck -engine gpu (the device's gradient vs central differences).
run_script gradcheck_sim
# Label files libdarknet would mark or misread, with engine=gpu: refused as
# on engine=cpu, or trained as there (issue 28).
run_script cli_labels
echo "tests/gpu --device sim: $failed program(s) failed, $(( $(date +%s) - total_start )) s (simulated devices: host logic and ordering; kernels.cu's kernels ran as themselves on the executor, the other kernels, cuBLAS, cuDNN and NCCL as stand-ins)" | tee -a "$LOG"
exit $failed
