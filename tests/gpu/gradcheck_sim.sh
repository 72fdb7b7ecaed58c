#!/bin/sh
# tests/gpu/gradcheck_sim.sh BUILD — `scalednn gradcheck CFG -engine gpu` on
# simulated devices (a make GPU=sim build in BUILD), called by
# tests/gpu/run_sim.sh: the device's gradient of one trainer step against
# central differences of the host network's loss, for cfg/shapes-res.cfg
# (residual shortcuts, the 1x1 fix) and cfg/shapes-v4tiny.cfg (the fork's
# dialect: grouped routes).  Each must pass (exit 0, "0 of N layers above
# their threshold"), its header must name the simulated device, and the
# same cfg with -engine cpu must pass too (the oracle is the same check).
# -samples 4 -seed 1: the check's thresholds are the CPU engine's; with
# other seeds (e.g. -samples 6 -seed 3) the 1x1 batch-normalised layers
# before the heads exceed them by ~20% on both engines alike (measured
# 2026-12-01), a property of the check, not of an engine.
# On simulated devices this is the engine's host logic and the C kernels'
# arithmetic, never the CUDA kernels.
# Prints one line per check; exits with the number of failed checks.
set -u
B=${1:-build-sim}
BIN=$(pwd)/$B/darknet
W=$(mktemp -d /tmp/sdnn-gradcheck-sim-XXXXXX)
failed=0
say() { echo "gradcheck_sim: $*"; }
# Under ASan (SLOW > 1, from run_sim.sh) the -engine cpu rows are left out:
# test_gradcheck checks the cpu engine, and each run is ~5x slower there.
ENGINES="gpu cpu"
[ "${SLOW:-1}" -gt 1 ] && ENGINES=gpu
for cfg in cfg/shapes-res.cfg cfg/shapes-v4tiny.cfg; do
    for engine in $ENGINES; do
        out=$W/out.txt
        SDNN_SIM_DEVICES=2 "$BIN" scalednn gradcheck "$cfg" -engine "$engine" -samples 4 -seed 1 \
            >"$out" 2>"$W/err.txt"
        rc=$?
        summary=$(grep "layers above their threshold" "$out")
        if [ $rc -ne 0 ] || ! echo "$summary" | grep -q "^0 of [1-9][0-9]* layers"; then
            say "FAIL $cfg -engine $engine: exit $rc, '$summary'"
            grep -E "FAIL|error" "$out" "$W/err.txt" | head -5
            failed=$((failed + 1))
        elif [ "$engine" = gpu ] && ! grep -q "^gradcheck .*engine gpu (.*simulated" "$out"; then
            say "FAIL $cfg -engine gpu: the header does not name the simulated device"
            failed=$((failed + 1))
        else
            on=""; [ "$engine" = gpu ] && on="; simulated devices"
            say "ok $cfg -engine $engine ($summary$on)"
        fi
    done
done
rm -rf "$W"
exit $failed
