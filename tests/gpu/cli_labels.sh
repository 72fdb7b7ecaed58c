#!/bin/sh
# tests/gpu/cli_labels.sh BUILD — the label files libdarknet would mark or
# misread, on the gpu engine: `./darknet detector train` with
# engine=gpu on 2 simulated devices (a make GPU=sim build in BUILD), called
# by tests/gpu/run_sim.sh.  A train list of 3 shapes images, one of whose
# label files gets the case's lines:
#   - refused, exit 1, with the same file:line message as engine=cpu, and
#     no weights written: a box centred at x=y=0 (libdarknet's empty-slot
#     mark, which crashed its yolo layer), w or h under 0.001 inside the
#     image at x=0, y=1 (libdarknet drops it without a word), w > 1;
#   - trained, exit 0, weights saved, the loss of each iteration within
#     LOSS_TOL of engine=cpu's: boxes at x=1,y=1, at x=0 with y inside, and
#     w=h=1 (the limits, kept as written).  Tolerance: the error model of
#     tests/gpu/cli_engine.sh (-threads 1 and one -seed give both engines
#     the same batches; they differ only by summation order, ~2e-7 relative
#     per iteration), so 1e-3 catches a box dropped or moved on one engine;
#   - -skip_bad_labels with the x=y=0 box: dropped with a count, trained.
# Prints one line per check; exits with the number of failed checks.
# On simulated devices this is the engine's host logic, ordering and
# arithmetic with the CUDA kernels run as themselves on the host executor;
# never a GPU or real NCCL.
set -u
B=${1:-build-sim}
SLOW=${SLOW:-1}
LOSS_TOL=0.001
NAME=cli_labels NIMG=8
. tests/gpu/cli_common.sh
LIMIT=$((120 * SLOW))

# label_set TAG LINES: W/TAG/train.txt of images 1-3, LINES appended to
# image 2's label file.
label_set() {
    mkdir -p "$W/$1/images" "$W/$1/labels"
    : >"$W/$1/train.txt"
    for i in 1 2 3; do
        f=$(printf '%06d' "$i")
        cp "$W/shapes/images/train/$f.png" "$W/$1/images/$i.png"
        cp "$W/shapes/labels/train/$f.txt" "$W/$1/labels/$i.txt"
        echo "$W/$1/images/$i.png" >>"$W/$1/train.txt"
    done
    printf '%b' "$2" >>"$W/$1/labels/2.txt"
    printf 'classes=4\ntrain=%s/%s/train.txt\nnames=%s/shapes/shapes.names\nbackup=%s/%s/backup/\n' \
        "$W" "$1" "$W" "$W" "$1" >"$W/$1.data"
    mkdir -p "$W/$1/backup"
    for e in gpu cpu; do
        cp cfg/shapes-scalednn.cfg "$W/$1-$e.cfg"
        echo "engine=$e" >>"$W/$1-$e.cfg"
    done
}

# train TAG ENGINE [FLAGS...]: exit code of detector train, log in
# W/TAG-ENGINE.log, losses in W/TAG-ENGINE.csv (4 batches: 2 iterations of
# 2 replicas).
train() {
    ttag=$1 e=$2
    shift 2
    (cd "$W" && timeout "$LIMIT" "$BIN" detector train "$ttag.data" "$ttag-$e.cfg" -gpus 0,1 \
        -max_batches 4 -seed 1 -threads 1 -csv "$ttag-$e.csv" "$@") >"$W/$ttag-$e.log" 2>&1
}

# The label message of a log: the line naming W/TAG/labels/2.txt.
label_msg() { grep -o "$W/$1/labels/2.txt:[0-9]*: .*" "$W/$1-$2.log" | head -1; }

# refused TAG LINES WANT: both engines exit 1 with the same message, which
# contains WANT; no weights written.
refused() {
    label_set "$1" "$2"
    train "$1" gpu
    rg=$?
    train "$1" cpu
    rc=$?
    mg=$(label_msg "$1" gpu) mc=$(label_msg "$1" cpu)
    if [ $rg -ne 1 ] || [ $rc -ne 1 ]; then
        bad "$1: exit codes engine=gpu $rg, engine=cpu $rc, expected 1 ($W/$1-gpu.log)"
    elif [ -z "$mg" ] || [ "$mg" != "$mc" ]; then
        bad "$1: engine=gpu said '$mg', engine=cpu '$mc'"
    elif ! echo "$mg" | grep -qF "$3"; then
        bad "$1: '$mg' does not say '$3'"
    elif [ -n "$(ls "$W/$1/backup")" ] || [ -e "$W/$1-gpu.csv" ]; then
        bad "$1: refused, but wrote $(ls "$W/$1/backup") $(ls "$W/$1-gpu.csv" 2>/dev/null)"
    else
        say "ok $1: refused on engine=gpu as on engine=cpu: ${mg#"$W/"}"
    fi
}

refused origin '0 0 0 0.2 0.2\n' 'x=0 and y=0 together'
refused thin '0 0 0.5 0.0009 0.2\n' 'w=0.0009 at x=0: 0.00045 of it is inside the image'
refused flat '0 0.5 1 0.2 0.0005\n' 'under 0.001'
refused wide '0 0.5 0.5 1.2 0.2\n' 'w=1.2 is > 1'

# The limits, trained on both engines; the losses agree.
label_set limits '0 1 1 0.2 0.2\n0 0 0.5 0.2 0.2\n1 0.5 0 0.3 0.3\n0 0.5 0.5 1 1\n'
if train limits gpu && train limits cpu && [ -s "$W/limits/backup/limits-gpu_final.weights" ]; then
    if out=$(awk -F, -v t="$LOSS_TOL" '
        FNR == 1 { f++ } /^[0-9]/ { if (f == 1) g[$1] = $3; else c[$1] = $3 }
        END {
            n = 0; worst = 0
            for (i in g) {
                if (!(i in c)) { print "iteration " i " only on engine=gpu"; exit 1 }
                d = g[i] - c[i]; if (d < 0) d = -d
                r = c[i] != 0 ? d / (c[i] < 0 ? -c[i] : c[i]) : d
                if (r > worst) worst = r
                if (r > t || g[i] != g[i]) { print "iteration " i ": " g[i] " vs " c[i]; exit 1 }
                n++
            }
            if (n != 2) { print n " iterations, expected 2"; exit 1 }
            printf "%d iterations, largest relative difference %.2g", n, worst
        }' "$W/limits-gpu.csv" "$W/limits-cpu.csv"); then
        say "ok limits: boxes at x=1 y=1, x=0, y=0 and w=h=1 trained on engine=gpu (2 simulated devices: host logic; every kernel as itself, cuBLAS, cuDNN and NCCL as stand-ins), loss within $LOSS_TOL of engine=cpu's ($out)"
    else
        bad "limits: loss apart from engine=cpu's ($out)"
    fi
else
    bad "limits: training failed or saved nothing ($W/limits-gpu.log, $W/limits-cpu.log)"
fi

# -skip_bad_labels: the x=y=0 box dropped with a count, then trained.
label_set skip '0 0 0 0.2 0.2\n'
if train skip gpu -skip_bad_labels && grep -q "dropped 1 bad box in 1 of 3 label files" "$W/skip-gpu.log" &&
    [ -s "$W/skip/backup/skip-gpu_final.weights" ]; then
    say "ok skip: -skip_bad_labels drops the x=y=0 box on engine=gpu (2 simulated devices) with a count and trains"
else
    bad "skip: -skip_bad_labels on engine=gpu ($W/skip-gpu.log)"
fi

if [ "$failed" -eq 0 ]; then rm -rf "$W"; else say "kept $W"; fi
exit "$failed"
