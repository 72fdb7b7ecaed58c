#!/bin/sh
# tests/gpu/run_sim.sh — the GPU suite on simulated devices; called by
# `sh tests/gpu/run.sh --device sim [--asan] [--no-build]` (arguments: asan
# 0|1, build 0|1).  Every program of tests/gpu (tests/gpu/*.c) runs once per seed of
# SDNN_SIM_SEEDS ("none" = no jitter), SDNN_SIM_DEVICES=4, and prints one
# summary line; the exit status is the number of programs that failed.
#
# What passes here is the engine's host logic, ordering and arithmetic on
# simulated devices: every kernel of the .cu files mk/gpu.mk lists in
# GPU_SIM_CU (all 56 of plugin/cuda/*.cu) runs as itself on the simulated
# executor (host arithmetic, CUDA's launch and barrier rules); cuBLAS's gemm
# (OpenBLAS, sim/gemm.c) and NCCL (sim/nccl.c) are stand-ins; never cuDNN
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
UNITS=$LOGS/units
SDNN_IMGLOAD=${SDNN_IMGLOAD:-}
export ASAN B SEEDS SLOW LOGS BIN UNITS SDNN_IMGLOAD
# The programs and scripts run SDNN_SIM_JOBS at a time (default: the
# number of online CPUs, at most 4; 1 = one after another): most keep one
# core busy, so on CI's 2 cores two at a time halve the wall time.  Each
# works in its own mktemp directory and its own log files (the simulated
# NCCL names its shared memory by process), so two never share a file;
# their timeouts are bounds for a machine doing two things at once.
jobs=${SDNN_SIM_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
case "$jobs" in ''|*[!0-9]*|0) jobs=1 ;; esac
[ "$jobs" -gt 4 ] && jobs=4
rm -rf "$UNITS"
mkdir -p "$UNITS"
: >"$LOG"
: >"$ERR"
total_start=$(date +%s)

# The list of units, one a line: "prog NAME TIMEOUT ARGS..." or "script
# NAME".  Every program of tests/gpu runs (a new one needs no line here);
# these need an argument or more time than the default 240 s.  The longest
# start first (an order only).
{
    for src in tests/gpu/*.c; do
        name=$(basename "$src" .c)
        case "$name" in
        probe) echo "prog probe 60 --expect-device" ;;
        # Under ASan codecs stops at 2^20 elements (its 3,000,017 case, a
        # third of its time there, runs in the three plain seeds).
        codecs) if [ "$ASAN" = 1 ]; then echo "prog codecs 300 --max-size 1048576"
                else echo "prog codecs 300"; fi ;;
        layers) echo "prog $name 300" ;;
        # engines trains every row on both engines with the layer
        # kernels on the executor (about 250 s of CPU a seed).
        engines) echo "prog $name 600" ;;
        *) echo "prog $name 240" ;;
        esac
    done
    # The executor's own programs (C++ against the CUDA shim, simulated
    # devices only): tests/gpu/sim/*.cu.
    for src in tests/gpu/sim/*.cu; do
        [ -e "$src" ] || continue
        echo "prog sim/$(basename "$src" .cu) 240"
    done
    # The scripts of tests/gpu (each prints "NAME: ok ..." per check, "FAIL"
    # on a failure, and exits non-zero on any):
    #   cli_sim      ./darknet detector train -gpus 0,1 with engine=gpu
    #   cli_nccl     backend=nccl under mpirun: 2 processes x 2 devices on
    #                one NCCL communicator against 1 x 4 and backend=mpi, 2 x 1,
    #                2 x (0,0) with virtual=1 refused, a killed and a stopped rank
    #   cli_bytes    bytes each replica sends against the simulated NCCL's
    #                counter; {1x4, 2x2} x codecs x {bucket_mb fixed, auto}
    #                x {nccl, auto}
    #   cli_engine   the loader -> preload ring path end to end: engine=gpu
    #                against engine=cpu per iteration
    #   cli_devices  -gpus names devices: ids past the count, virtual=1, the
    #                banner, a layer the engine does not run
    #   gradcheck_sim scalednn gradcheck -engine gpu
    #   cli_labels   label files libdarknet would mark or misread
    for s in cli_sim cli_nccl cli_bytes cli_engine cli_devices gradcheck_sim cli_labels; do
        echo "script $s"
    done
} >"$UNITS/all"
slow_first="engines cli_bytes gradcheck_sim cli_engine cli_nccl feed codecs train layers"
{
    for n in $slow_first; do grep -E "^[a-z]+ $n( |\$)" "$UNITS/all"; done
    for n in $slow_first; do echo "$n"; done >"$UNITS/slow"
    while read -r kind name rest; do
        grep -qx "$name" "$UNITS/slow" || echo "$kind $name${rest:+ $rest}"
    done <"$UNITS/all"
} >"$UNITS/order"
if [ -n "${SDNN_GPU_ONLY:-}" ]; then
    while read -r kind name rest; do
        case " $SDNN_GPU_ONLY " in *" $name "*) echo "$kind $name${rest:+ $rest}" ;; esac
    done <"$UNITS/order" >"$UNITS/only"
    mv "$UNITS/only" "$UNITS/order"
    while read -r kind name rest; do
        case " $SDNN_GPU_ONLY " in *" $name "*) echo "$kind $name${rest:+ $rest}" ;; esac
    done <"$UNITS/all" >"$UNITS/only"
    mv "$UNITS/only" "$UNITS/all"
fi
echo "$(wc -l <"$UNITS/order") programs and scripts, $jobs at a time"
# One unit a line with no trailing blank: xargs -L joins a line ending in a
# blank to the next one.
xargs -L 1 -P "$jobs" sh tests/gpu/run_unit.sh <"$UNITS/order"

# Logs and summary lines in the list's order; the count of failures.
failed=0
while read -r kind name rest; do
    f=$UNITS/$(echo "$name" | tr / _)
    [ -f "$f.log" ] && cat "$f.log" >>"$LOG"
    [ -f "$f.err" ] && cat "$f.err" >>"$ERR"
    if [ ! -f "$f.rc" ]; then
        echo "$name: FAILED (simulated devices; the runner did not finish)" | tee -a "$LOG"
        failed=$((failed + 1))
        continue
    fi
    [ "$(cat "$f.rc")" = 0 ] || failed=$((failed + 1))
done <"$UNITS/all"
echo "tests/gpu --device sim: $failed program(s) failed, $(( $(date +%s) - total_start )) s (simulated devices: host logic and ordering; all 56 kernels of plugin/cuda/*.cu ran as themselves on the executor; cuBLAS (OpenBLAS gemm), cuDNN (not built: im2col + gemm) and NCCL as stand-ins)" | tee -a "$LOG"
exit $failed
