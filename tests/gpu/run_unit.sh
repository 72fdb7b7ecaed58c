#!/bin/sh
# tests/gpu/run_unit.sh KIND NAME [TIMEOUT ARGS...] — one unit of the GPU
# suite on simulated devices, called by tests/gpu/run_sim.sh (through
# xargs, several at once) with ASAN B SEEDS SLOW LOGS BIN UNITS in the
# environment.  KIND is "prog" (a program of tests/gpu, once per seed of
# SEEDS, each run bounded by TIMEOUT x SLOW seconds) or "script" (a script
# tests/gpu/NAME.sh).  Writes $UNITS/NAME.log (stdout), NAME.err (stderr)
# and NAME.rc (0 = passed), and prints the unit's summary line (and its
# FAIL lines) to stdout.  Always exits 0, so xargs runs every unit.
set -u
kind=$1
name=$2
shift 2
f=$UNITS/$(echo "$name" | tr / _)
log=$f.log
err=$f.err
cur=$f.cur
: >"$log"
: >"$err"
rm -f "$f.rc"

run_prog() {  # timeout program args...
    t=$1; p=$2; shift 2
    if [ "$p" = sdnn_injected_failure ]; then
        echo "$name: FAIL: a deliberate failure (SDNN_GPU_FAIL)"
        return 1
    fi
    timeout "$t" env ${SDNN_IMGLOAD:+LD_PRELOAD=$SDNN_IMGLOAD} "$p" "$@"
}

start=$(date +%s)
if [ "$kind" = prog ]; then
    limit=$(( $1 * SLOW )); shift
    bad=""
    last=""
    prog=$BIN/$name
    case " ${SDNN_GPU_FAIL:-} " in *" $name "*) prog=sdnn_injected_failure ;; esac
    for seed in $SEEDS; do
        echo "==== $name (jitter $seed)" >>"$log"
        echo "==== $name (jitter $seed)" >>"$err"
        if [ "$seed" = none ]; then
            ( unset SDNN_SIM_JITTER; run_prog "$limit" "$prog" "$@" ) >"$cur" 2>>"$err"
        else
            SDNN_SIM_JITTER=$seed run_prog "$limit" "$prog" "$@" >"$cur" 2>>"$err"
        fi
        rc=$?
        cat "$cur" >>"$log"
        if [ $rc -ne 0 ]; then
            grep -E "FAIL" "$cur" | head -20
            [ $rc -eq 124 ] && echo "$name (jitter $seed): timed out after $limit s"
            bad="$bad $seed:rc=$rc"
        fi
        last=$(grep -E "passed" "$cur" | tail -1)
    done
    rm -f "$cur"
    secs=$(( $(date +%s) - start ))
    if [ -n "$bad" ]; then
        line="$name: FAILED (simulated devices; jitter seeds:$bad; ${secs} s)"
        echo 1 >"$f.rc"
    else
        line="$name: ok on simulated devices (jitter seeds: $SEEDS; $last; ${secs} s)"
        echo 0 >"$f.rc.tmp"
    fi
else
    # Scripts write their temporaries under TMPDIR (mktemp), one per run.
    if SLOW=$SLOW sh "tests/gpu/$name.sh" "$B" >"$cur" 2>>"$err"; then
        line="$name: ok on simulated devices ($(grep -c "^$name: ok" "$cur") checks; $(( $(date +%s) - start )) s)"
        echo 0 >"$f.rc.tmp"
    else
        grep FAIL "$cur" | head -10
        line="$name: FAILED (simulated devices; $(( $(date +%s) - start )) s)"
        echo 1 >"$f.rc"
    fi
    cat "$cur" >>"$log"
    rm -f "$cur"
fi
# The summary line goes into the log as before: after a program's runs,
# before a script's output.
if [ "$kind" = prog ]; then
    echo "$line" >>"$log"
else
    { echo "$line"; cat "$log"; } >"$f.tmp" && mv "$f.tmp" "$log"
fi
[ -f "$f.rc.tmp" ] && mv "$f.rc.tmp" "$f.rc"
echo "$line"
exit 0
