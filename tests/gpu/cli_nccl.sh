#!/bin/sh
# tests/gpu/cli_nccl.sh — backend=nccl between processes on simulated devices
# (make GPU=sim), through ./darknet detector train under mpirun:
#   - 2 processes x 2 simulated devices with backend=nccl train and save,
#     the banner names one NCCL communicator of 4 ranks, Debian's darknet
#     loads the weights; backend=auto picks nccl there;
#   - 2 processes x 1 simulated device with backend=nccl train (one rank per
#     process); 2 processes x 2 replicas on device 0 (virtual=1) are refused
#     naming -gpus, virtual=1 and what is allowed;
#   - its mean loss is within LOSS_TOL (relative) of 1 process x 4 devices
#     (backend=local) and of backend=mpi's 2 x 2 (the hierarchical path).
#     Darknet's loader draws its augmentations in its threads, so two runs
#     of one command differ by ~10% per iteration: the mean over the run is
#     compared, which a wrong exchange (a wrong world, mean or learning
#     rate, replicas apart) moves far more, or makes non-finite;
#   - bucket_mb left out (auto), as users write it: backend=nccl in 1
#     process x 4 devices and over 2 x 2, backend=auto over 2 x 2, train and
#     plan from the link the step measured through the engine's device
#     buffers ("link probed nccl" in the plan; the planner once probed
#     it on host buffers, which the nccl bootstrap refuses);
#   - compress=fp16 and int8, 1 process x 4 devices: the banner names each
#     bucket's collective (coded ring, NCCL's native half allreduce or the
#     all-gather) with the model's times, the chosen never the dearer;
#   - a rank killed (kill -9) and a rank stopped (kill -STOP) after the
#     save at iteration 100: the run ends non-zero within comm_timeout_s +
#     MARGIN seconds of the signal, the silent rank is named (by the
#     survivors' deadline, or by mpirun for a killed one), and the last
#     saved weights are intact (the same bytes as before the signal, the
#     size of a complete run's, loadable by Debian's darknet).  Under
#     ASan (SLOW > 1) only the stopped rank, with MARGIN x SLOW.
# Prints one line per check; exits with the number of failed checks.
# On simulated devices the NCCL is sim/nccl.c's, between processes over
# shared memory: the host logic, ordering and arithmetic, never real NCCL.
set -u
B=${1:-build-sim}
ITERS=${SDNN_CLI_ITERS:-8}
LOSS_TOL=0.2
# comm_timeout_s of the fault runs: long enough that a process starved of
# the CPU for a few seconds (2 shared cores) is not taken for a silent one.
TIMEOUT_S=10
SLOW=${SLOW:-1}
MARGIN=$((30 * SLOW))
DEBIAN=${SDNN_DEBIAN_DARKNET:-/usr/bin/darknet}
NAME=cli_nccl NIMG=64
. tests/gpu/cli_common.sh

if ! command -v mpirun >/dev/null 2>&1; then
    say "not checked: no mpirun here for 2 processes x 2 simulated devices"
    exit 0
fi

mean_loss() {
    awk -F, '/^[0-9]/ { s += $3; n++ } END { if (n) printf "%.6f", s / n; else print "none" }' "$1"
}

# within A B: A within LOSS_TOL (relative) of B.
within() {
    [ "$1" != none ] && [ "$2" != none ] && awk -v g="$1" -v c="$2" -v t="$LOSS_TOL" \
        'BEGIN { d = g - c; if (d < 0) d = -d; exit !(c > 0 && d <= t * c) }'
}

# cfg TAG BACKEND [EXTRA KEY]: W/TAG.cfg, the shapes cfg with engine=gpu.
cfg() {
    sed "s/^backend=local/backend=$2/" cfg/shapes-scalednn.cfg >"$W/$1.cfg"
    echo "engine=gpu" >>"$W/$1.cfg"
    [ $# -gt 2 ] && echo "$3" >>"$W/$1.cfg"
    return 0
}

# mpi_train TAG ITERS: 2 processes x 2 simulated devices, in W.
mpi_train() {
    (cd "$W" && SDNN_MPI_RUN_TIMEOUT=300 sh "$ROOT/tests/mpi/run.sh" 2 "$BIN" detector train \
        s.data "$1.cfg" -gpus 0,1 -max_batches "$2" -seed 1 -csv "$1.csv") >"$W/$1.log" 2>&1
}

# debian_loads WEIGHTS TAG: Debian's darknet reads every layer of it and
# writes the same parameters back (the 20-byte header has seen cleared).
debian_loads() {
    [ -x "$DEBIAN" ] || return 2
    (cd "$W" && "$DEBIAN" partial "$ROOT/cfg/shapes.cfg" "$1" "$W/$2-reload.weights" 100) \
        >"$W/$2-reload.log" 2>&1 && cmp -s -i 20 "$1" "$W/$2-reload.weights"
}

# ---- 2 x 2 over nccl, auto, mpi; 1 x 4 --------------------------------------------
for b in nccl auto mpi; do
    tag=n2x2-$b
    cfg "$tag" "$b"
    mpi_train "$tag" "$ITERS"
    rc=$?
    if [ $rc -ne 0 ] || [ ! -s "$W/backup/${tag}_final.weights" ]; then
        tail -5 "$W/$tag.log"
        bad "$tag: 2 processes x 2 simulated devices, backend=$b, exited $rc ($W/$tag.log)"
        rm -f "$W/$tag.csv"
        continue
    fi
    case $b in
    mpi) want="backend mpi: each process's device mean through pinned host memory" ;;
    *) want="backend nccl: one NCCL communicator of 4 ranks (2 processes x 2 devices)" ;;
    esac
    if grep -qF "$want" "$W/$tag.log" && grep -q "world of 4 (2 processes)" "$W/$tag.log"; then
        say "ok $tag: trained $ITERS iterations, banner: $want; mean loss $(mean_loss "$W/$tag.csv")"
    else
        bad "$tag: the banner does not say \"$want\" and a world of 4 ($W/$tag.log)"
    fi
done

# ---- one device per process; replicas sharing a device --------------------------------
# 2 processes x 1 simulated device: one NCCL rank per process trains (it was refused as
# if virtual=1 had put replicas on one device).  2 processes x 2 replicas on device 0
# (virtual=1): refused, the message naming what was set and what is allowed.
tag=n2x1-nccl
cfg "$tag" nccl
(cd "$W" && SDNN_MPI_RUN_TIMEOUT=300 sh "$ROOT/tests/mpi/run.sh" 2 "$BIN" detector train \
    s.data "$tag.cfg" -gpus 0 -max_batches 4 -seed 1 -csv "$tag.csv") >"$W/$tag.log" 2>&1
rc=$?
want="backend nccl: one NCCL communicator of 2 ranks (2 processes x 1 device)"
if [ $rc -eq 0 ] && grep -qF "$want" "$W/$tag.log" && [ -s "$W/backup/${tag}_final.weights" ]; then
    say "ok $tag: 2 processes x 1 simulated device trained and saved; banner: $want"
else
    tail -5 "$W/$tag.log"
    bad "$tag: 2 processes x 1 simulated device, backend=nccl, exited $rc, or no \"$want\" ($W/$tag.log)"
fi
tag=n2x2-virtual
cfg "$tag" nccl virtual=1
(cd "$W" && SDNN_MPI_RUN_TIMEOUT=300 sh "$ROOT/tests/mpi/run.sh" 2 "$BIN" detector train \
    s.data "$tag.cfg" -gpus 0,0 -max_batches 4 -seed 1 -csv "$tag.csv") >"$W/$tag.log" 2>&1
rc=$?
want="backend=nccl between 2 processes: the 2 replicas of process 0 all run on device 0 (-gpus repeats the id, which virtual=1 allows), and NCCL needs a device of its own per replica; list distinct devices (e.g. -gpus 0,1) or set backend=mpi"
if [ $rc -ne 0 ] && grep -qF "$want" "$W/$tag.log"; then
    say "ok $tag: -gpus 0,0 with virtual=1 over 2 processes refused, exit $rc, naming -gpus, virtual=1 and backend=mpi"
else
    tail -5 "$W/$tag.log"
    bad "$tag: -gpus 0,0 virtual=1, backend=nccl, 2 processes: exit $rc, message not \"$want\" ($W/$tag.log)"
fi

tag=n1x4
cfg "$tag" local
(cd "$W" && SDNN_SIM_DEVICES=4 timeout 300 "$BIN" detector train s.data "$tag.cfg" -gpus 0,1,2,3 \
    -max_batches "$ITERS" -seed 1 -csv "$tag.csv") >"$W/$tag.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    tail -5 "$W/$tag.log"
    bad "$tag: 1 process x 4 simulated devices exited $rc ($W/$tag.log)"
    rm -f "$W/$tag.csv"
fi

if [ -s "$W/n2x2-nccl.csv" ]; then
    mn=$(mean_loss "$W/n2x2-nccl.csv")
    for ref in n1x4 n2x2-mpi; do
        [ -s "$W/$ref.csv" ] || continue
        mr=$(mean_loss "$W/$ref.csv")
        if within "$mn" "$mr"; then
            say "ok nccl 2x2 mean loss $mn within $LOSS_TOL of $ref's $mr"
        else
            bad "nccl 2x2 mean loss $mn, $ref's $mr (tolerance $LOSS_TOL relative)"
        fi
    done
    wts=$W/backup/n2x2-nccl_final.weights
    debian_loads "$wts" n2x2-nccl
    case $? in
    0) say "ok nccl: Debian's darknet loads the weights ($(wc -c <"$wts") bytes) and writes the same parameters back" ;;
    2) say "not checked: no Debian darknet at $DEBIAN to load the weights" ;;
    *) bad "nccl: Debian's darknet did not load $wts ($W/n2x2-nccl-reload.log)" ;;
    esac
fi

# ---- the collective per bucket -------------------------------------------------------
# 1 process x 4 devices with compress=fp16 and int8: the banner lists each bucket's
# collective as the cost model chose it ("scalednn:   bucket K (SIZE): CODEC via
# PATH: T ms predicted vs ALT T2 ms"); the chosen one is never the dearer of those
# offered, fp16 never takes the coded ring (NCCL's half allreduce sends its bytes with
# less codec work), and the run trains.
for codec in fp16 int8; do
    tag=c1x4-$codec
    sed -e "s/^compress=none/compress=$codec/" cfg/shapes-scalednn.cfg >"$W/$tag.cfg"
    echo "engine=gpu" >>"$W/$tag.cfg"
    (cd "$W" && SDNN_SIM_DEVICES=4 timeout 300 "$BIN" detector train s.data "$tag.cfg" \
        -gpus 0,1,2,3 -max_batches 4 -seed 1 -csv "$tag.csv") >"$W/$tag.log" 2>&1
    rc=$?
    lines=$(grep -c "^scalednn:   bucket [0-9]* (.*): $codec via " "$W/$tag.log")
    dear=$(awk '/^scalednn:   bucket [0-9]* \(/ && / ms predicted vs / {
                 a = ""; for (i = 1; i <= NF; ++i) { if ($i == "predicted") t = $(i - 2)
                     if ($i == "vs" && a == "") for (j = i + 1; j <= NF; ++j) if ($j ~ /^ms;?$/) { a = $(j - 1); break } }
                 if (t + 0 > a + 0) n++ } END { print n + 0 }' "$W/$tag.log")
    if [ $rc -ne 0 ]; then
        tail -5 "$W/$tag.log"
        bad "$tag: compress=$codec, 1 process x 4 devices, exited $rc ($W/$tag.log)"
    elif ! grep -q "^scalednn: collective per bucket over NCCL, .*(cost model: link: .*, world 4; simulated devices" "$W/$tag.log"; then
        bad "$tag: no banner header for the collective per bucket ($W/$tag.log)"
    elif [ "$lines" -lt 1 ] || [ "$dear" -ne 0 ]; then
        bad "$tag: $lines bucket lines for $codec, $dear choosing the dearer collective ($W/$tag.log)"
    elif [ "$codec" = fp16 ] && grep -q "^scalednn:   bucket .*: fp16 via coded ring" "$W/$tag.log"; then
        bad "$tag: fp16 took the coded ring where NCCL's half allreduce is cheaper ($W/$tag.log)"
    else
        say "ok $tag: trained; $lines buckets, each by the collective the model prices cheapest ($(grep -m1 "^scalednn:   bucket" "$W/$tag.log" | sed 's/^scalednn:   //'))"
    fi
done

# ---- bucket_mb=auto (left out) on nccl ------------------------------------------------

# auto_run TAG BACKEND NPROC: the shapes cfg without bucket_mb (auto), engine=gpu,
# 1 process x 4 devices or 2 x 2; checks that it trains and plans on the link the
# step measured.  An iteration is a batch per replica, so a step of a world of 4 is
# 4 iterations: AITERS = 4 steps, the plan comes after the 2nd (warm-up + 1 profiled).
AITERS=$((ITERS * 2))
auto_run() {
    sed -e "s/^backend=local/backend=$2/" -e '/^bucket_mb=/d' cfg/shapes-scalednn.cfg >"$W/$1.cfg"
    printf 'engine=gpu\nprofile_iters=1\n' >>"$W/$1.cfg"
    if [ "$3" = 1 ]; then
        (cd "$W" && SDNN_SIM_DEVICES=4 timeout 300 "$BIN" detector train s.data "$1.cfg" \
            -gpus 0,1,2,3 -max_batches "$AITERS" -seed 1 -csv "$1.csv") >"$W/$1.log" 2>&1
    else
        mpi_train "$1" "$AITERS"
    fi
    rc=$?
    if [ $rc -ne 0 ]; then
        tail -5 "$W/$1.log"
        bad "$1: bucket_mb=auto, backend=$2, $3 process(es), exited $rc ($W/$1.log)"
    elif ! grep -q "plan 1 (bucket_mb=auto), link probed nccl" "$W/$1.log"; then
        bad "$1: trained but no plan from the link probed on nccl ($W/$1.log)"
    else
        say "ok $1: bucket_mb=auto, backend=$2: trained $AITERS iterations and planned on the probed nccl link"
    fi
}
auto_run a1x4-nccl nccl 1
auto_run a2x2-nccl nccl 2
auto_run a2x2-auto auto 2

# ---- a killed and a stopped rank ------------------------------------------------------

# rank_pid TAG RANK: the pid of that rank's darknet training TAG.cfg.
rank_pid() {
    for p in $(pgrep -f "detector train s.data $1.cfg"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" &&
            { echo "$p"; return 0; }
    done
    return 1
}

REF=$W/backup/n2x2-nccl_final.weights
# fault TAG SIGNAL RANK: train, wait for the save at iteration 100, send
# SIGNAL to RANK, check the end (see the header).
fault() {
    tag=$1 sig=$2 rank=$3
    cfg "$tag" nccl "comm_timeout_s=$TIMEOUT_S"
    (cd "$W" && SDNN_MPI_RUN_TIMEOUT=400 sh "$ROOT/tests/mpi/run.sh" 2 "$BIN" detector train \
        s.data "$tag.cfg" -gpus 0,1 -max_batches 100000 -seed 1 -csv "$tag.csv") \
        >"$W/$tag.log" 2>&1 &
    job=$!
    saved=$W/backup/${tag}_100.weights
    t=0
    while [ ! -s "$saved" ] && [ $t -lt 300 ] && kill -0 "$job" 2>/dev/null; do
        sleep 1
        t=$((t + 1))
    done
    # The save is atomic (a rename), and the next save is 100 iterations away.
    pid=$(rank_pid "$tag" "$rank")
    if [ ! -s "$saved" ] || [ -z "$pid" ]; then
        bad "$tag: no save at iteration 100 after ${t} s, or no rank $rank ($W/$tag.log)"
        kill "$job" 2>/dev/null
        wait "$job" 2>/dev/null
        return
    fi
    before=$(cksum <"$saved")
    start=$(date +%s)
    kill "-$sig" "$pid"
    wait "$job"
    rc=$?
    secs=$(($(date +%s) - start))
    [ "$sig" = STOP ] && kill -KILL "$pid" 2>/dev/null
    peer=$((1 - rank))
    named=0
    grep -qE "for rank $rank, which did not answer|for rank [0-9]+ \(process $rank\), which did not answer|rank $rank .*(exited on signal|killed)" \
        "$W/$tag.log" && named=1
    if [ $rc -eq 0 ] || [ $named -ne 1 ] || [ $secs -gt $((TIMEOUT_S + MARGIN)) ]; then
        tail -8 "$W/$tag.log"
        bad "$tag: kill -$sig rank $rank: exit $rc after $secs s, rank named $named (within $((TIMEOUT_S + MARGIN)) s expected; $W/$tag.log)"
    else
        say "ok $tag: kill -$sig rank $rank after iteration 100: exit $rc after $secs s (comm_timeout_s=$TIMEOUT_S), rank $rank named by rank $peer or mpirun: $(grep -oE "(nccl|mpi) rank [0-9]+: waited [0-9.]+ s for rank [0-9]+( \(process [0-9]+\))?|process rank $rank [^ ]* [^ ]*" "$W/$tag.log" | head -1)"
    fi
    after=$(cksum <"$saved")
    if [ "$before" != "$after" ]; then
        bad "$tag: $saved changed after the signal"
    elif [ -s "$REF" ] && [ "$(wc -c <"$saved")" -ne "$(wc -c <"$REF")" ]; then
        bad "$tag: $saved has $(wc -c <"$saved") bytes, a complete run's $(wc -c <"$REF")"
    else
        debian_loads "$saved" "$tag"
        case $? in
        0) say "ok $tag: the weights saved at iteration 100 are intact ($(wc -c <"$saved") bytes, unchanged, loaded by Debian's darknet)" ;;
        2) say "ok $tag: the weights saved at iteration 100 are intact ($(wc -c <"$saved") bytes, unchanged; no Debian darknet to load them)" ;;
        *) bad "$tag: Debian's darknet did not load $saved ($W/$tag-reload.log)" ;;
        esac
    fi
}

# Under ASan (SLOW > 1) only the stopped rank, the survivors' own deadline
# and abort path (a killed one is ended by mpirun).
[ "$SLOW" -gt 1 ] || fault killed KILL 1
fault stopped STOP 1

if [ $failed -eq 0 ]; then rm -rf "$W"; fi
exit $failed
