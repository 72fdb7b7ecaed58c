#!/bin/sh
# tests/gpu/cli_devices.sh BUILD — `-gpus` names devices: `./darknet detector
# train` with engine=gpu on 2 simulated devices (a make GPU=sim build in
# BUILD), called by tests/gpu/run_sim.sh.  Each case asserts the exit code
# and the message (or the start banner), and that a refused run saved
# nothing:
#   - -gpus 0,2: a device id past SDNN_SIM_DEVICES=2, named with the count,
#     refused before any image is read (exit 1);
#   - -gpus 0,0 without virtual=1: bad usage of -gpus (exit 2);
#   - -gpus 0,0 with virtual=1: 2 steps (-max_batches 4: a step of 2
#     replicas counts 2 iterations) with both replicas on simulated device 0,
#     as the banner says;
#   - -gpus 1,0: replica 0 on device 1 and replica 1 on device 0 (banner);
#   - -gpus 1: the engine's copies on device 1 (its memory in use > 0);
#   - -gpus 0,0,1 with virtual=1: a placement the engine does not run
#     (some devices shared, not all), refused naming why (exit 1);
#   - a [batchnorm] layer, which the device engine does not run
#     (sdnn_gpu_layer_support), named in the error (exit 1);
#   - engine=auto with -gpus 0,5: the cpu engine, saying why (device id 5);
#     engine=cpu with -gpus 7,9: CPU replicas, the ids only counting them.
# Prints one line per check; exits with the number of failed checks.
# On simulated devices this is the engine's host logic and its kernels on
# the host executor, never a GPU.
set -u
B=${1:-build-sim}
SLOW=${SLOW:-1}
checks=0
NAME=cli_devices NIMG=16
. tests/gpu/cli_common.sh

# cfg TAG KEYS...: cfg/shapes-scalednn.cfg ([scalednn] is its last section)
# with each KEY appended to that section, as W/TAG.cfg.
cfg() {
    tag=$1
    shift
    cp cfg/shapes-scalednn.cfg "$W/$tag.cfg"
    for k in "$@"; do echo "$k" >>"$W/$tag.cfg"; done
}

# train TAG GPUS ITERS: detector train W/TAG.cfg; the exit code in $rc, the
# output (stdout and stderr) in W/TAG.log.
train() {
    (cd "$W" && timeout $((120 * SLOW)) "$BIN" detector train s.data "$1.cfg" -gpus "$2" \
        -max_batches "$3" -seed 1 -csv "$1.csv") >"$W/$1.log" 2>&1
    rc=$?
}

# expect TAG WANT_RC TEXT...: the exit code and every TEXT in the log.
expect() {
    tag=$1 want=$2
    shift 2
    checks=$((checks + 1))
    if [ "$rc" -ne "$want" ]; then
        tail -5 "$W/$tag.log"
        bad "$tag: exit $rc, expected $want ($W/$tag.log)"
        return 1
    fi
    for text in "$@"; do
        if ! grep -qF -- "$text" "$W/$tag.log"; then
            tail -5 "$W/$tag.log"
            bad "$tag: the output lacks \"$text\" ($W/$tag.log)"
            return 1
        fi
    done
    return 0
}

# refused TAG: nothing saved and no CSV row written by a refused run.
refused() {
    if [ -e "$W/backup/$1_final.weights" ] || [ -s "$W/$1.csv" ]; then
        bad "$1: a refused run left weights or a CSV"
        return 1
    fi
    if grep -q "checked [0-9]* images" "$W/$1.log"; then
        bad "$1: refused only after reading the images"
        return 1
    fi
    return 0
}

# The CSV's data rows (iterations trained).
rows() { if [ -f "$W/$1.csv" ]; then awk '/^[0-9]/ { n++ } END { print n + 0 }' "$W/$1.csv"; else echo 0; fi; }

# A device id past the count.
cfg past engine=gpu
train past 0,2 2
expect past 1 "past.cfg: [scalednn] engine=gpu with -gpus 0,2: engine gpu cannot run 2 replicas here: 2 devices (ids 0..1), and replica 1 names device id 2" &&
    refused past && say "ok -gpus 0,2 on 2 simulated devices: exit $rc, device id 2 and the count named"

# An id twice without virtual=1: bad usage.
cfg dup engine=gpu
train dup 0,0 2
expect dup 2 "error: -gpus 0,0: id 0 is listed twice (replicas 0 and 1): each device once, or [scalednn] virtual=1 for several replicas on one device" &&
    refused dup && say "ok -gpus 0,0 without virtual=1: exit $rc, refused naming virtual=1"

# With virtual=1: two replicas on simulated device 0, 2 steps.
cfg virt engine=gpu virtual=1
train virt 0,0 4
if expect virt 0 "scalednn: engine gpu, 2 replicas (-gpus 0,0)" \
    "scalednn:   replicas 0..1 (-gpus ids 0,0): simulated device 0 (" \
    "world of 2 (1 process)"; then
    n=$(rows virt)
    if [ "$n" -eq 2 ] && [ -s "$W/backup/virt_final.weights" ] &&
        ! grep -q "simulated device 1" "$W/virt.log"; then
        say "ok -gpus 0,0 with virtual=1: 2 replicas on simulated device 0 trained $n steps, saved"
    else
        bad "virt: $n CSV rows (2 expected) ($W/virt.log)"
    fi
fi

# Replica 0 on device 1.
cfg swap engine=gpu
train swap 1,0 2
expect swap 0 "scalednn:   replica 0 (-gpus id 1): simulated device 1 (" \
    "scalednn:   replica 1 (-gpus id 0): simulated device 0 (" "MiB in use" &&
    [ -s "$W/backup/swap_final.weights" ] &&
    say "ok -gpus 1,0: replica 0 on simulated device 1, replica 1 on device 0 (banner), trained and saved"

# One replica on device 1: the engine's copies are there (the banner,
# written after the engine is made, shows the device's memory in use), not
# on device 0.
cfg one engine=gpu
train one 1 2
if expect one 0 "scalednn:   replica 0 (-gpus id 1): simulated device 1 ("; then
    mib=$(sed -n 's/.*replica 0 (-gpus id 1): simulated device 1 (.*), \([0-9.]*\) MiB in use.*/\1/p' "$W/one.log")
    if [ -n "$mib" ] && awk -v m="$mib" 'BEGIN { exit !(m > 0) }' && [ -s "$W/backup/one_final.weights" ]; then
        say "ok -gpus 1: replica 0 on simulated device 1 ($mib MiB in use there), trained and saved"
    else
        bad "one: device 1 holds '$mib' MiB after the engine was made ($W/one.log)"
    fi
fi

# Some devices shared, not all.
cfg mixed engine=gpu virtual=1
train mixed 0,0,1 3
expect mixed 1 "engine gpu cannot run 3 replicas here: replicas share some devices but not all" &&
    refused mixed && say "ok -gpus 0,0,1 with virtual=1: exit $rc, the placement refused naming why"

# A layer type the device engine does not run: [batchnorm] before the
# first [maxpool].
awk 'BEGIN { d = 0 } /^\[maxpool\]/ && !d { print "[batchnorm]\n"; d = 1 } { print }' \
    cfg/shapes-scalednn.cfg >"$W/unsup.cfg"
echo engine=gpu >>"$W/unsup.cfg"
train unsup 0,1 2
if expect unsup 1 "unsup.cfg (engine=gpu, -gpus 0,1): layer 1: batchnorm layers are not run on the GPU (supported: "; then
    if [ -e "$W/backup/unsup_final.weights" ] || [ -s "$W/unsup.csv" ]; then
        bad "unsup: the refused run left weights or a CSV"
    else
        say "ok [batchnorm] under engine=gpu: exit $rc, layer 1 and its type named"
    fi
fi

# engine=auto falls back to the cpu engine for an id past the count, saying why.
cfg auto engine=auto
train auto 0,5 2
expect auto 0 "engine=auto: cpu (gpu: 2 devices (ids 0..1), and replica 1 names device id 5)" \
    "scalednn: engine cpu, 2 replicas (-gpus 0,5)" "(-gpus ids 0,5): CPU replica" &&
    say "ok engine=auto with -gpus 0,5: the cpu engine, saying why"

# engine=cpu: the ids only count CPU replicas, in any build.
cfg cpu engine=cpu
train cpu 7,9 2
expect cpu 0 "scalednn: engine cpu, 2 replicas (-gpus 7,9)" \
    "replicas 0..1 (-gpus ids 7,9): CPU replica, a thread of its own (a -gpus id only counts replicas)" &&
    [ -s "$W/backup/cpu_final.weights" ] &&
    say "ok engine=cpu with -gpus 7,9: 2 CPU replicas, the ids only counting them"

if [ $failed -eq 0 ] && [ -z "${SDNN_KEEP:-}" ]; then rm -rf "$W"; fi
say "$failed of $checks check(s) failed (simulated devices: host logic and ordering; all 56 kernels of plugin/cuda/*.cu ran as themselves on the executor; cuBLAS (OpenBLAS gemm), cuDNN (not built: im2col + gemm) and NCCL as stand-ins)"
exit $failed
