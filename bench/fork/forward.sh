#!/bin/sh
# bench/fork/forward.sh FORK_SOURCE [FORK_SRCDIR] [FORK_BUILDDIR]
#
# Forward equivalence with the maintained Darknet fork. Builds the fork CPU-only
# (build.sh), builds bench/fork/fwd_sdnn.c with the project's flags (make) and
# bench/fork/fwd_fork.cpp against the fork's headers and library, then for every cfg:
#   1. fwd_sdnn writes random weights (Darknet's format) and a random input image once;
#   2. this project (libscalednn + Debian's libdarknet) and the fork load the same file and
#      run the same input, batch 1, and dump every layer's output;
#   3. per layer, max |ours - fork| / max |fork| must stay under TOL (default 1e-4; see
#      bench/RESULTS.md for why), and the fork's save_weights of the loaded weights must be
#      the same size as ours (and byte-identical after the header).
# The cfgs: the project's cfg/shapes-v4tiny.cfg (and cfg/shapes-v7tiny.cfg,
# cfg/yolov4-tiny-dialect.cfg, cfg/yolov7-tiny-dialect.cfg when present),
# and the fork's own cfg/yolov4-tiny.cfg and cfg/yolov7-tiny.cfg adapted to 2 classes at
# 128x128 in a work folder outside the repository. When this project refuses a [net] or
# [yolo] key of the fork's cfg (a key it does not build yet), that line is removed from the
# copy both sides read (the keys are listed; none of them changes a layer's size or
# weights, only the YOLO loss/box coding) and the cfg is marked "stripped".
# The fork's inference maxpool (stride 1, AVX) leaves out part of the window near the left
# edge; fwd_fork checks each maxpool against its own input, counts those entries (listed in
# the results) and puts the window maximum there, so the later layers still compare.
# Exit 0 when every cfg is within TOL and every weights size agrees, 1 otherwise.
# Env: TOL, WORK (default ${TMPDIR:-/tmp}/scalednn-fork/forward), SEED (default 1),
# VARSCALE (default 1: batch-norm variances in [0.5, 2); 1e4 makes the two libraries'
# different batch-norm epsilons negligible, leaving gemm order, FMA and expf).
set -eu
[ $# -ge 1 ] || { echo "usage: sh bench/fork/forward.sh FORK_SOURCE [SRCDIR] [BUILDDIR]" >&2; exit 2; }
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
TOL=${TOL:-1e-4}
SEED=${SEED:-1}
VARSCALE=${VARSCALE:-1}
WORK=${WORK:-${TMPDIR:-/tmp}/scalednn-fork/forward}
mkdir -p "$WORK"

sh bench/fork/build.sh "$@" > "$WORK/build.out" || { cat "$WORK/build.out"; exit 1; }
FSRC=$(sed -n 's/^fork src: //p' "$WORK/build.out")
FLIB=$(sed -n 's/^fork lib: //p' "$WORK/build.out")
COMMIT=$(sed -n 's/^fork commit: //p' "$WORK/build.out")
FBUILD=$(dirname "$(dirname "$(sed -n 's/^fork cli: //p' "$WORK/build.out")")")
[ -f "$FBUILD/CMakeCache.txt" ] || FBUILD=$(dirname "$FBUILD")

make -s build/bench/fork/fwd_sdnn > "$WORK/make.out" 2>&1 || { cat "$WORK/make.out"; exit 1; }
OURS=$REPO/build/bench/fork/fwd_sdnn

# The fork's compile definitions and include folders, as its own build used them.
FLAGS=$(find "$FBUILD" -path '*darknetobjlib.dir/flags.make' | head -1)
DEFS=$(sed -n 's/^CXX_DEFINES = //p' "$FLAGS")
INCS=$(sed -n 's/^CXX_INCLUDES = //p' "$FLAGS")
VERH=$(find "$FBUILD" -name darknet_version.h | head -1)
FORKBIN=$WORK/fwd_fork
# shellcheck disable=SC2086
g++ -std=gnu++17 -O2 -fopenmp $DEFS $INCS -I"$(dirname "$VERH")" bench/fork/fwd_fork.cpp \
    -o "$FORKBIN" "$FLIB" -Wl,-rpath,"$(dirname "$FLIB")" $(pkg-config --libs opencv4) \
    > "$WORK/fwd_fork.out" 2>&1 || { cat "$WORK/fwd_fork.out"; exit 1; }

adapt() {   # the fork's cfg $1 at 2 classes, 128x128, batch 1 -> $2
    sed -e 's/^width *=.*/width=128/' -e 's/^height *=.*/height=128/' -e 's/^batch *=.*/batch=1/' \
        -e 's/^subdivisions *=.*/subdivisions=1/' \
        -e 's/^classes *=.*/classes=2/' -e 's/^filters *= *255/filters=21/' "$1" > "$2"
}

# Remove the [net]/[yolo] lines this project refuses, one at a time; the removed keys go to
# $1.stripped. Any other refusal is an error.
strip_refused() {
    : > "$1.stripped"
    i=0
    while ! "$OURS" random "$1" "$SEED" "$1.probe" > "$1.probe.out" 2>&1; do
        msg=$(grep '^fwd_sdnn: ' "$1.probe.out" | head -1)
        line=$(echo "$msg" | sed -n 's/^fwd_sdnn: [^:]*:\([0-9]*\): \[\(net\|yolo\)\] .*/\1/p')
        key=$(echo "$msg" | sed -n 's/^fwd_sdnn: [^:]*:[0-9]*: \[\(net\|yolo\)\] \([a-z_0-9]*\)=.*/\1 \2/p')
        if [ -z "$line" ] || [ $i -gt 60 ]; then
            echo "forward.sh: $1: refused, not by a [net]/[yolo] key: $msg" >&2
            return 1
        fi
        sed -i "${line}s/.*/# (removed for the comparison) &/" "$1"
        echo "$key" >> "$1.stripped"
        i=$((i + 1))
    done
    rm -f "$1.probe" "$1.probe.out"
}

fail=0
RES=$WORK/results.md
: > "$RES"
echo "fork commit: $COMMIT" | tee -a "$RES"
run_one() {   # name cfg
    name=$1
    cfg=$WORK/$name.cfg
    cp "$2" "$cfg"
    strip_refused "$cfg" || { fail=1; return 0; }
    stripped=$(sort "$cfg.stripped" | uniq -c | awk '{printf "%s%s x%s", (NR>1?", ":""), $2" "$3, $1}')
    "$OURS" random "$cfg" "$SEED" "$WORK/$name.weights" "$VARSCALE" > "$WORK/$name.log" 2>&1
    "$OURS" input "$cfg" "$SEED" "$WORK/$name.in" >> "$WORK/$name.log" 2>&1
    "$OURS" run "$cfg" "$WORK/$name.weights" "$WORK/$name.in" "$WORK/$name.ours.dump" \
        "$WORK/$name.ours.weights" >> "$WORK/$name.log" 2>&1 || { echo "$name: ours failed"; fail=1; return 0; }
    OMP_NUM_THREADS=1 "$FORKBIN" -plain-maxpool "$cfg" "$WORK/$name.weights" "$WORK/$name.in" "$WORK/$name.fork.dump" \
        "$WORK/$name.fork.weights" > "$WORK/$name.fork.log" 2>&1 || { echo "$name: fork failed"; tail -5 "$WORK/$name.fork.log"; fail=1; return 0; }
    {
        echo
        echo "### $name${stripped:+ (stripped: $stripped)}"
        echo
    } >> "$RES"
    grep '^fork maxpool defect' "$WORK/$name.fork.log" | sed 's/^/    /' >> "$RES" || true
    if ! "$OURS" compare "$WORK/$name.ours.dump" "$WORK/$name.fork.dump" "$TOL" >> "$RES"; then fail=1; fi
    so=$(wc -c < "$WORK/$name.weights"); sf=$(wc -c < "$WORK/$name.fork.weights")
    # The header (version ints and `seen`) may be written differently; the parameters not.
    if [ "$so" = "$sf" ] && cmp -s -i 20 "$WORK/$name.weights" "$WORK/$name.fork.weights"; then
        echo "weights: ours $so bytes, fork's save of them $sf bytes, parameters byte-identical" >> "$RES"
    else
        echo "weights: ours $so bytes, fork's save of them $sf bytes: DIFFER" >> "$RES"; fail=1
    fi
    grep -E '^(worst|weights)' "$RES" | tail -2 | sed "s/^/$name: /"
}

run_one shapes-v4tiny cfg/shapes-v4tiny.cfg
for c in shapes-v7tiny yolov4-tiny-dialect yolov7-tiny-dialect; do
    if [ -f cfg/$c.cfg ]; then run_one $c cfg/$c.cfg; fi
done
adapt "$FSRC/cfg/yolov4-tiny.cfg" "$WORK/fork-yolov4-tiny.src"
run_one fork-yolov4-tiny "$WORK/fork-yolov4-tiny.src"
adapt "$FSRC/cfg/yolov7-tiny.cfg" "$WORK/fork-yolov7-tiny.src"
run_one fork-yolov7-tiny "$WORK/fork-yolov7-tiny.src"
echo "tables: $RES"
if [ $fail -ne 0 ]; then echo "forward.sh: FAIL (tolerance $TOL)"; exit 1; fi
echo "forward.sh: all within $TOL"
