#!/bin/sh
# Runs each CMocka test binary given on the command line, one after another,
# and ends with one summary line.  A binary's exit code is its number of
# failed tests (CMocka's convention); a crash counts as a failure too.
# The log of each binary goes to $SDNN_TEST_BUILD/tests/NAME.log as well.
passed=0
failed=0
failed_bins=""
for bin in "$@"; do
    name=$(basename "$bin")
    log="${SDNN_TEST_BUILD:-build}/tests/$name.log"
    echo "=== $name"
    start=$(date +%s)
    "$bin" >"$log" 2>&1
    rc=$?
    cat "$log"
    n_pass=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
    n_fail=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
    passed=$((passed + ${n_pass:-0}))
    if [ "$rc" -ne 0 ]; then
        if [ -z "$n_fail" ] || [ "$n_fail" -eq 0 ]; then n_fail=1; fi
        failed=$((failed + n_fail))
        failed_bins="$failed_bins $name(rc=$rc)"
    fi
    echo "=== $name: rc=$rc, $(( $(date +%s) - start ))s"
done
if [ -n "$failed_bins" ]; then
    echo "failing:$failed_bins"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
