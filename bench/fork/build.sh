#!/bin/sh
# bench/fork/build.sh SOURCE [SRCDIR] [BUILDDIR]
#
# Clones the maintained Darknet fork (hank-ai/darknet) from SOURCE (a path or a URL of a
# git repository) into SRCDIR and builds it CPU-only (CMake, -DDARKNET_TRY_CUDA=OFF) in
# BUILDDIR, installing the library, headers and CLI under BUILDDIR/prefix. Both folders
# must lie outside this repository: none of the fork's files enter the project.
# Defaults: $FORK_SRC / $FORK_BUILD, else ${TMPDIR:-/tmp}/scalednn-fork/{src,build}.
# Re-runnable: an existing clone is reused (fetched again only when FORK_UPDATE=1), an
# existing build is only rebuilt. Prints the commit on the last line ("fork commit: HASH").
# Needs cmake, g++, libopencv-dev, libopenblas64-dev, protobuf-compiler, libprotobuf-dev
# (Debian packages; the fork's ONNX export needs the last two).
set -eu
if [ $# -lt 1 ]; then
    echo "usage: sh bench/fork/build.sh SOURCE [SRCDIR] [BUILDDIR]" >&2
    exit 2
fi
SOURCE=$1
TOP=${TMPDIR:-/tmp}/scalednn-fork
SRC=${2:-${FORK_SRC:-$TOP/src}}
BUILD=${3:-${FORK_BUILD:-$TOP/build}}
JOBS=${JOBS:-2}
REPO=$(cd "$(dirname "$0")/../.." && pwd)

outside() {
    mkdir -p "$1"
    d=$(cd "$1" && pwd)
    case "$d/" in
        "$REPO"/*) echo "build.sh: $1 lies inside the repository ($REPO); give a folder outside it" >&2
                   exit 2 ;;
    esac
    echo "$d"
}
SRC=$(outside "$SRC")
BUILD=$(outside "$BUILD")

for tool in git cmake g++; do
    command -v $tool >/dev/null 2>&1 || { echo "build.sh: $tool not found" >&2; exit 1; }
done

if [ -d "$SRC/.git" ]; then
    if [ "${FORK_UPDATE:-0}" = 1 ]; then
        git -C "$SRC" pull -q --ff-only
    fi
else
    rmdir "$SRC" 2>/dev/null || { echo "build.sh: $SRC exists and is not a git clone" >&2; exit 1; }
    git clone -q "$SOURCE" "$SRC"
fi
COMMIT=$(git -C "$SRC" rev-parse HEAD)

# The fork's CMake takes its version from `git describe` in the current folder.
cd "$SRC"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DDARKNET_TRY_CUDA=OFF \
        -DCMAKE_INSTALL_PREFIX="$BUILD/prefix" > "$BUILD/configure.log" 2>&1 ||
        { tail -30 "$BUILD/configure.log" >&2; echo "build.sh: cmake configure failed" >&2; exit 1; }
fi
cmake --build "$BUILD" -j "$JOBS" > "$BUILD/build.log" 2>&1 ||
    { tail -30 "$BUILD/build.log" >&2; echo "build.sh: build failed ($BUILD/build.log)" >&2; exit 1; }
cmake --install "$BUILD" > "$BUILD/install.log" 2>&1 ||
    { tail -30 "$BUILD/install.log" >&2; echo "build.sh: install failed" >&2; exit 1; }

CLI=$BUILD/prefix/bin/darknet
[ -x "$CLI" ] || CLI=$BUILD/src-cli/darknet
[ -x "$CLI" ] || { echo "build.sh: no darknet CLI under $BUILD" >&2; exit 1; }
LIB=$(find "$BUILD/prefix" "$BUILD/src-lib" -name 'libdarknet.so*' 2>/dev/null | head -1)
[ -n "$LIB" ] || { echo "build.sh: no libdarknet.so under $BUILD" >&2; exit 1; }
grep -q 'DARKNET_TRY_CUDA:BOOL=OFF' "$BUILD/CMakeCache.txt" ||
    { echo "build.sh: $BUILD was configured with CUDA; remove it" >&2; exit 1; }
echo "fork cli: $CLI"
echo "fork lib: $LIB"
echo "fork src: $SRC"
echo "fork commit: $COMMIT"
