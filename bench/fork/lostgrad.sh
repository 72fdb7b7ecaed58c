#!/bin/sh
# bench/fork/lostgrad.sh FORK_SOURCE [SRCDIR] [BUILDDIR]
#
# How much of the fork's CPU training result its lost gradient explains (issues 17, 18):
# the fork's CPU col2im sets its destination (the previous layer's delta) to zero before
# adding, so every convolution's backward overwrites what a later [route]/[shortcut] had
# already added there. This clones the fork into SRCDIR (default
# ${TMPDIR:-/tmp}/scalednn-fork/src-accumulate), comments out that one zeroing call in
# src-lib/col2im.cpp (the deltas are zeroed at every forward anyway, so the sum is then
# the full gradient), checks the edit took, and runs bench/fork/train.sh with that build;
# compare its table with train.sh's on the unmodified fork. Nothing of the fork enters
# the repository. Same env as train.sh (WORK defaults to .../train-accumulate).
set -eu
[ $# -ge 1 ] || { echo "usage: sh bench/fork/lostgrad.sh FORK_SOURCE [SRCDIR] [BUILDDIR]" >&2; exit 2; }
REPO=$(cd "$(dirname "$0")/../.." && pwd)
TOP=${TMPDIR:-/tmp}/scalednn-fork
SRC=${2:-$TOP/src-accumulate}
BUILD=${3:-$TOP/build-accumulate}
case "$(mkdir -p "$SRC" && cd "$SRC" && pwd)/" in
    "$REPO"/*) echo "lostgrad.sh: $SRC lies inside the repository" >&2; exit 2 ;;
esac
if [ ! -d "$SRC/.git" ]; then
    rmdir "$SRC"
    git clone -q "$1" "$SRC"
fi
F=$SRC/src-lib/col2im.cpp
# The zeroing call of col2im_cpu_ext: the only caffe_set on data_im in the file.
sed -i 's|^\([[:space:]]*\)\(caffe_set(height \* width \* channels, 0.0F, data_im);\)|\1// scalednn lostgrad.sh: \2|' "$F"
n=$(grep -c 'scalednn lostgrad.sh: caffe_set' "$F" || true)
left=$(grep -c '^[[:space:]]*caffe_set([^)]*data_im)' "$F" || true)
if [ "$n" != 1 ] || [ "$left" != 0 ]; then
    echo "lostgrad.sh: $F: expected exactly one zeroing call of data_im to disable (found $n disabled, $left left)" >&2
    exit 1
fi
WORK=${WORK:-$TOP/train-accumulate} sh "$REPO/bench/fork/train.sh" "$1" "$SRC" "$BUILD"
