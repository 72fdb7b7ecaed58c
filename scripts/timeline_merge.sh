#!/bin/sh
# timeline_merge: one Chrome trace from the per-rank traces of a run across
# processes ([scalednn] timeline=PATH under mpirun: rank 0 writes PATH,
# rank R writes PATH.rankR, each with pid R + 1 and the same time origin).
#
#   sh scripts/timeline_merge.sh OUT PATH [PATH.rank1 ...]
#   sh scripts/timeline_merge.sh OUT PATH          # PATH and every PATH.rank*
#
# The events are copied as they are, file after file; the footer counts the
# records and dropped records of all of them.  OUT is written next to
# itself and renamed into place, so a failed merge leaves no half file.
# Exit 1 when an input is not a finished scalednn trace.
set -eu
if [ $# -lt 2 ]; then
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
out=$1
shift
if [ $# -eq 1 ]; then
    base=$1
    set -- "$base"
    for f in "$base".rank*; do
        [ -e "$f" ] && set -- "$@" "$f"
    done
fi
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
awk '
    function bad(f, why) { printf "timeline_merge: %s %s\n", f, why > "/dev/stderr"; err = 1; exit 1 }
    FNR == 1 {
        if (started && !done) bad(prev, "ends before its footer (an unfinished trace)")
        if ($0 != "{\"traceEvents\":[") bad(FILENAME, "does not start like a scalednn trace")
        started = 1; done = 0; events = 0; prev = FILENAME
        if (NR == 1) print
        next
    }
    done { next }
    $0 == "]," { done = 1; next }
    {
        if (!events && printed) print ","
        print; events = 1; printed = 1
    }
    END {
        if (err) exit 1
        if (!done) bad(prev, "ends before its footer (an unfinished trace)")
    }
' "$@" >"$tmp" || exit 1
# the footers' counts, summed
counts=$(grep -h -o '"records":[0-9]*,"dropped_records":[0-9]*' "$@" |
    awk -F '[:,]' '{ r += $2; d += $4; n++ } END { printf "%d %d %d", r, d, n }')
set -- $counts
if [ "$3" -lt 1 ]; then
    echo "timeline_merge: no footer with record counts in the inputs" >&2
    exit 1
fi
printf '\n],\n"displayTimeUnit":"ms",\n"otherData":{"generator":"scalednn timeline_merge","records":%s,"dropped_records":%s,"files":%s}}\n' \
    "$1" "$2" "$3" >>"$tmp"
mv "$tmp" "$out"
trap - EXIT
