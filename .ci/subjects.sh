#!/bin/sh
# Fails when a commit made after the history was tidied has a subject over
# 72 characters: a subject is `area: what changed`, the why and the numbers
# go in the body (CONTRIBUTING.md). The older commits (up to BASE) are left
# as they were written. In a clone without BASE only HEAD is checked.
set -eu
cd "$(dirname "$0")/.."
BASE=05b2c10f
MAX=72
if git cat-file -e "$BASE^{commit}" 2>/dev/null; then
    range="$BASE..HEAD"
else
    range="-1 HEAD"
fi
bad=0
# shellcheck disable=SC2086
log=$(git log --format='%h %s' $range)
while IFS= read -r line; do
    subject=${line#* }
    n=$(printf '%s' "$subject" | wc -m)
    if [ "$n" -gt "$MAX" ]; then
        echo "commit ${line%% *}: subject of $n characters (at most $MAX): $subject" >&2
        bad=1
    fi
done <<EOF_LOG
$log
EOF_LOG
[ "$bad" -eq 0 ] && echo ".ci/subjects.sh: every subject since $BASE is at most $MAX characters"
exit "$bad"
