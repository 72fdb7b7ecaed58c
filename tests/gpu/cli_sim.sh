#!/bin/sh
# tests/gpu/cli_sim.sh BUILD — `./darknet detector train ... -gpus 0,1` with
# engine=gpu on 2 simulated devices (a make GPU=sim build in BUILD), called
# by tests/gpu/run_sim.sh.  For cfg/shapes-scalednn.cfg in scalednn mode and
# in stock mode:
#   - engine=gpu trains a few iterations through the trainer and saves;
#   - Debian's darknet (darknet partial) loads the saved weights and writes
#     back the same parameters, byte for byte after the header;
#   - under mpirun, 2 processes x 2 devices with int8 train (the engine's
#     comm through the MPI backend), loss close to engine=cpu's there;
#   - -gpus 0,1,2 (more replicas than devices) is refused naming why;
#   - its loss is close to the same command's with engine=cpu: the mean
#     loss of the run within LOSS_TOL (relative).  Darknet's loader draws
#     its augmentations in its threads, so two runs of one command differ
#     by ~10% per iteration whatever the engine: the mean over the run is
#     compared, which a wrong exchange (replicas apart, a wrong mean or
#     learning rate) moves far more, or makes non-finite.
# Prints one line per check; exits with the number of failed checks.
# On simulated devices this is the engine's host logic, ordering and
# arithmetic with the CUDA kernels run as themselves on the host executor;
# never a GPU or real NCCL.
set -u
B=${1:-build-sim}
ITERS=${SDNN_CLI_ITERS:-8}
LOSS_TOL=0.2
DEBIAN=${SDNN_DEBIAN_DARKNET:-/usr/bin/darknet}
NAME=cli_sim NIMG=64
. tests/gpu/cli_common.sh

# The mean of the loss column of a CSV (rows after the header).
mean_loss() {
    awk -F, '/^[0-9]/ { s += $3; n++ } END { if (n) printf "%.6f", s / n; else print "none" }' "$1"
}

for mode in scalednn stock; do
    for engine in gpu cpu; do
        tag=$mode-$engine
        # [scalednn] is the cfg's last section: the keys append to it.
        sed "s/^mode=scalednn/mode=$mode/" cfg/shapes-scalednn.cfg >"$W/$tag.cfg"
        echo "engine=$engine" >>"$W/$tag.cfg"
        (cd "$W" && timeout 300 "$BIN" detector train s.data "$tag.cfg" -gpus 0,1 \
            -max_batches "$ITERS" -seed 1 -csv "$tag.csv") >"$W/$tag.log" 2>&1
        rc=$?
        if [ $rc -ne 0 ]; then
            tail -5 "$W/$tag.log"
            bad "$tag: detector train exited $rc ($W/$tag.log)"
            rm -f "$W/$tag.csv"
            continue
        fi
        wts=$W/backup/${tag}_final.weights
        if [ ! -s "$wts" ]; then bad "$tag: no $wts"; continue; fi
        say "ok $tag: trained $ITERS iterations on 2 simulated devices, mean loss $(mean_loss "$W/$tag.csv")"
        # The CSV's host_loss_bytes: per step, each of the 2
        # replicas' 8 images of shapes.cfg's two [yolo] heads at 64x64
        # (432 and 1728 inputs an image, each followed by no device reader
        # of its output) go to the host and their deltas come back:
        # 2 x 8 x (432 + 1728) x 4 x 2 = 276480 bytes; 0 on the cpu engine.
        want=0
        [ "$engine" = gpu ] && want=276480
        got=$(awk -F, '/^iteration,/ { for (i = 1; i <= NF; i++) if ($i == "host_loss_bytes") c = i; next }
            /^[0-9]/ { if (!c) { print "no column"; exit } if ($c != w) bad = $c; n++ }
            END { if (!n) print "no rows"; else if (bad != "") print bad; else print "ok" }' w="$want" "$W/$tag.csv")
        if [ "$got" = ok ]; then
            say "ok $tag: every CSV row's host_loss_bytes is $want"
        else
            bad "$tag: host_loss_bytes $got, expected $want on every row ($W/$tag.csv)"
        fi
    done
    g=$W/$mode-gpu.csv c=$W/$mode-cpu.csv
    if [ -s "$g" ] && [ -s "$c" ]; then
        mg=$(mean_loss "$g") mc=$(mean_loss "$c")
        if [ "$mg" != none ] && [ "$mc" != none ] && awk -v g="$mg" -v c="$mc" -v t="$LOSS_TOL" \
            'BEGIN { d = g - c; if (d < 0) d = -d; exit !(c > 0 && d <= t * c) }'; then
            say "ok $mode: engine=gpu mean loss $mg within $LOSS_TOL of engine=cpu's $mc"
        else
            bad "$mode: engine=gpu mean loss $mg, engine=cpu $mc (tolerance $LOSS_TOL relative)"
        fi
    fi
    wts=$W/backup/$mode-gpu_final.weights
    [ -s "$wts" ] || continue
    if [ ! -x "$DEBIAN" ]; then
        say "not checked ($mode): no Debian darknet at $DEBIAN to load the weights"
        continue
    fi
    # partial: load_network (every layer) and save_weights_upto; the header
    # (version and seen, 20 bytes) is rewritten with seen cleared.
    if (cd "$W" && "$DEBIAN" partial "$ROOT/cfg/shapes.cfg" "$wts" "$W/$mode-reload.weights" 100) \
        >"$W/$mode-reload.log" 2>&1 && cmp -s -i 20 "$wts" "$W/$mode-reload.weights"; then
        say "ok $mode: Debian's darknet loads the engine=gpu weights ($(wc -c <"$wts") bytes) and writes the same parameters back"
    else
        bad "$mode: Debian's darknet did not load $wts into cfg/shapes.cfg ($W/$mode-reload.log)"
    fi
done
# Between processes: 2 processes x 2 simulated devices, backend=mpi, int8;
# the engine's comm takes the local buffers through pinned host memory to
# the MPI backend and back.  Compared with engine=cpu under the same mpirun.
if command -v mpirun >/dev/null 2>&1; then
    for engine in gpu cpu; do
        tag=mpi-$engine
        sed "s/^backend=local/backend=mpi/; s/^compress=none/compress=int8/" \
            cfg/shapes-scalednn.cfg >"$W/$tag.cfg"
        echo "engine=$engine" >>"$W/$tag.cfg"
        (cd "$W" && SDNN_MPI_RUN_TIMEOUT=300 sh "$ROOT/tests/mpi/run.sh" 2 "$BIN" detector train \
            s.data "$tag.cfg" -gpus 0,1 -max_batches "$ITERS" -seed 1 -csv "$tag.csv") \
            >"$W/$tag.log" 2>&1
        rc=$?
        if [ $rc -ne 0 ] || [ ! -s "$W/backup/${tag}_final.weights" ]; then
            tail -5 "$W/$tag.log"
            bad "$tag: 2 processes x 2 simulated devices exited $rc ($W/$tag.log)"
            rm -f "$W/$tag.csv"
        fi
    done
    if [ -s "$W/mpi-gpu.csv" ] && [ -s "$W/mpi-cpu.csv" ]; then
        mg=$(mean_loss "$W/mpi-gpu.csv") mc=$(mean_loss "$W/mpi-cpu.csv")
        if grep -q "world of 4 (2 processes)" "$W/mpi-gpu.log" && [ "$mg" != none ] &&
            [ "$mc" != none ] && awk -v g="$mg" -v c="$mc" -v t="$LOSS_TOL" \
            'BEGIN { d = g - c; if (d < 0) d = -d; exit !(c > 0 && d <= t * c) }'; then
            say "ok mpi: 2 processes x 2 simulated devices, int8, engine=gpu mean loss $mg within $LOSS_TOL of engine=cpu's $mc"
        else
            bad "mpi: engine=gpu mean loss $mg, engine=cpu $mc (world of 4 expected; tolerance $LOSS_TOL)"
        fi
    fi
else
    say "not checked: no mpirun here for 2 processes x 2 simulated devices"
fi

# More replicas than simulated devices: a clear error, non-zero, nothing saved.
cp cfg/shapes-scalednn.cfg "$W/bad.cfg"
echo "engine=gpu" >>"$W/bad.cfg"
(cd "$W" && timeout 120 "$BIN" detector train s.data bad.cfg -gpus 0,1,2 -max_batches 2) \
    >"$W/bad.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "engine gpu cannot run 3 replicas here: 2 devices" "$W/bad.log" &&
    [ ! -e "$W/backup/bad_final.weights" ]; then
    say "ok -gpus 0,1,2 with engine=gpu on 2 simulated devices: exit $rc, $(grep -o 'engine gpu cannot run[^(]*' "$W/bad.log")"
else
    bad "-gpus 0,1,2 with engine=gpu on 2 devices: exit $rc ($W/bad.log)"
fi
if [ $failed -eq 0 ] && [ -z "${SDNN_KEEP:-}" ]; then rm -rf "$W"; fi
say "$failed check(s) failed (simulated devices: host logic and ordering; all 56 kernels of plugin/cuda/*.cu ran as themselves on the executor; cuBLAS (OpenBLAS gemm), cuDNN (not built: im2col + gemm) and NCCL as stand-ins)"
exit $failed
