#!/bin/sh
# Runs each CMocka test binary given on the command line and ends with one
# summary line.  A binary's exit code is its number of failed tests (CMocka's
# convention); a crash counts as a failure too.  The log of each binary goes
# to $SDNN_TEST_BUILD/tests/NAME.log.
#
# SDNN_TEST_JOBS binaries run at once (default: the number of online CPUs,
# at most 4; 1 = one after another).  Most binaries keep one core busy, so on
# CI's 2 cores two at a time halve the wall time.  Every binary works in its
# own mkstemp/mkdtemp directory, so two never share a file.  The binaries
# known to take longest start first (an order only; any binary may be
# anywhere in the list).  Logs are printed whole, in the order given, once
# all have ended; a line per binary is printed as it ends.
set -u
B=${SDNN_TEST_BUILD:-build}
jobs=${SDNN_TEST_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
case "$jobs" in ''|*[!0-9]*|0) jobs=1 ;; esac
[ "$jobs" -gt 4 ] && jobs=4
mkdir -p "$B/tests"

# One binary: its log, then "rc seconds" in NAME.rc.
if [ "${1:-}" = --one ]; then
    bin=$2
    name=$(basename "$bin")
    log="$B/tests/$name.log"
    start=$(date +%s)
    "$bin" >"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    echo "$rc $secs" >"$B/tests/$name.rc"
    echo "--- $name: rc=$rc, ${secs}s"
    exit 0
fi

slow_first="test_mpi test_e2e test_badinput test_forkcli"
order=""
for s in $slow_first; do
    for bin in "$@"; do
        [ "$(basename "$bin")" = "$s" ] && order="$order $bin"
    done
done
for bin in "$@"; do
    case " $slow_first " in *" $(basename "$bin") "*) ;; *) order="$order $bin" ;; esac
done
for bin in "$@"; do rm -f "$B/tests/$(basename "$bin").rc"; done

echo "tests/run.sh: $# binaries, $jobs at a time"
# shellcheck disable=SC2086
printf '%s\n' $order | SDNN_TEST_BUILD=$B xargs -n 1 -P "$jobs" sh "$0" --one

passed=0
failed=0
failed_bins=""
for bin in "$@"; do
    name=$(basename "$bin")
    log="$B/tests/$name.log"
    echo "=== $name"
    [ -f "$log" ] && cat "$log"
    if [ -f "$B/tests/$name.rc" ]; then
        read -r rc secs <"$B/tests/$name.rc"
    else
        rc=127; secs=0   # the runner itself did not finish
    fi
    n_pass=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" 2>/dev/null | tail -n 1)
    n_fail=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" 2>/dev/null | tail -n 1)
    passed=$((passed + ${n_pass:-0}))
    if [ "$rc" -ne 0 ]; then
        if [ -z "$n_fail" ] || [ "$n_fail" -eq 0 ]; then n_fail=1; fi
        failed=$((failed + n_fail))
        failed_bins="$failed_bins $name(rc=$rc)"
    fi
    echo "=== $name: rc=$rc, ${secs}s"
done
if [ -n "$failed_bins" ]; then
    echo "failing:$failed_bins"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
