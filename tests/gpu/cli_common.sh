# tests/gpu/cli_common.sh — sourced by the tests/gpu CLI scripts after they
# set NAME (the prefix of every line they print), B (the GPU=sim build) and
# NIMG (training images): say/bad, the build's darknet in BIN, a work folder
# W with a generated shapes set, W/s.data and W/backup, and 2 simulated
# devices.  Exits 1 when the build or the data is missing.
ROOT=$(pwd)
BIN=$ROOT/$B/darknet
W=$(mktemp -d "${TMPDIR:-/tmp}/sdnn-$NAME-XXXXXX")
failed=0
say() { echo "$NAME: $*"; }
bad() { say "FAIL $*"; failed=$((failed + 1)); }

if [ ! -x "$BIN" ]; then
    bad "no $BIN (make GPU=sim BUILD=$B first)"
    exit 1
fi
SDNN_SIM_DEVICES=2
export SDNN_SIM_DEVICES
"$BIN" scalednn gen-shapes "$W/shapes" -n "$NIMG" -valid 4 -seed 3 >"$W/gen.log" 2>&1 ||
    { bad "gen-shapes failed ($W/gen.log)"; exit 1; }
printf 'classes=4\ntrain=%s/shapes/train.txt\nvalid=%s/shapes/valid.txt\nnames=%s/shapes/shapes.names\nbackup=%s/backup/\n' \
    "$W" "$W" "$W" "$W" >"$W/s.data"
mkdir -p "$W/backup"
