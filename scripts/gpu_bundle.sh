#!/bin/sh
# scripts/gpu_bundle.sh OUT — one folder with everything a GPU run needs that
# the lent GPU machine lacks (it has no Debian packages and reaches no
# registry).  Run from the repository root, where Debian's darknet is
# installed (scripts/setup.sh).  Then, on the GPU machine:
#
#     SDNN_BUNDLE=OUT sh tests/gpu/h200.sh        (build, suite, benchmarks)
#
# OUT/darknet/          DARKNET_HOME for `make GPU=1`: libdarknet.so and
#                       include/darknet.h; cfg/ holds Debian's cfgs
# OUT/lib/              always first on LD_LIBRARY_PATH there:
#   libopencv_{core,imgcodecs,highgui,videoio}.so.406
#                       empty stand-ins: libdarknet binds its OpenCV calls
#                       lazily, so it loads; Debian's real OpenCV closure
#                       (Qt, ffmpeg, ...) is over 300 MiB
#   libsdnn_imgload.so  preloaded: Darknet's image loading through its own
#                       stb_image (scripts/gpu_imgload.c), so real images
#                       load without OpenCV
#   libopenblas.so.0.gz OpenBLAS (the CPU references' gemm, BLAS=1; gzip:
#                       tests/gpu/env.sh unpacks it), libgfortran, ...: the
#                       rest of the dependency closure, which no machine
#                       with a C compiler and glibc is sure to have
# OUT/lib/fallback/     libraries of the closure a compiler's machine
#                       normally has (libstdc++, libgcc_s): h200.sh links in
#                       only those the machine lacks (a newer one there wins)
# OUT/include/          cblas.h, openblas_config.h (for BLAS=1)
# OUT/data/shapes/      the shapes set (./darknet scalednn gen-shapes), paths
#                       relative to the repository root (data/shapes/...)
# OUT/MANIFEST          every file, its size and where it came from
#
# What is left out: glibc's libraries (libc, libm, libmvec, libpthread, libdl,
# librt, ld-linux: every Linux machine has them) and CUDA's (cudart, cuBLAS,
# cuDNN, NCCL: the machine's CUDA install and Python wheels, found by
# tests/gpu/env.sh).  CMocka is not bundled: the GPU programs are
# self-checking (tests/gpu/gpu_test.h) and never link it.
#
# The folder must travel with the device tool's carry (64 MiB for the whole
# working tree and the carried paths): the script prints its size and fails
# if it is over SDNN_BUNDLE_MAX_MB (default 48, leaving room for the tree).
#
# Environment: SDNN_BUNDLE_SHAPES (images in the shapes set, default 256;
# 0 = none), SDNN_BUNDLE_BLAS=0 (leave OpenBLAS out), DARKNET_HOME.
set -u
OUTDIR=${1:-}
[ -n "$OUTDIR" ] || { echo "usage: sh scripts/gpu_bundle.sh OUT"; exit 2; }
[ -f Makefile ] && [ -d plugin ] || { echo "scripts/gpu_bundle.sh: run from the repository root"; exit 2; }
DN=${DARKNET_HOME:-/usr/lib/darknet}
CFGDIR=/usr/share/darknet/cfg
SHAPES=${SDNN_BUNDLE_SHAPES:-256}
WITH_BLAS=${SDNN_BUNDLE_BLAS:-1}
MAXMB=${SDNN_BUNDLE_MAX_MB:-48}
CC=${CC:-cc}

die() { echo "scripts/gpu_bundle.sh: $*" >&2; exit 1; }
[ -f "$DN/libdarknet.so" ] && [ -f "$DN/include/darknet.h" ] ||
    die "no Debian darknet under $DN (scripts/setup.sh installs it)"
[ -d "$CFGDIR" ] || die "no $CFGDIR (Debian's darknet cfgs)"

# Build into a fresh folder beside OUT, then swap it in: an interrupted run
# leaves the previous bundle whole.
TMP=$OUTDIR.tmp.$$
rm -rf "$TMP"
trap 'rm -rf "$TMP"' EXIT INT TERM
mkdir -p "$TMP/darknet/include" "$TMP/darknet/cfg" "$TMP/lib/fallback" "$TMP/include" "$TMP/data" ||
    die "cannot create $TMP"
MAN=$TMP/MANIFEST
{
    echo "# scalednn GPU bundle, made $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -m) by scripts/gpu_bundle.sh"
    echo "# path  bytes  source"
} >"$MAN"
add() {  # src dest-relative
    cp -L "$1" "$TMP/$2" || die "cannot copy $1"
    echo "$2  $(wc -c <"$TMP/$2")  $1" >>"$MAN"
}

# ---- darknet ------------------------------------------------------------------
add "$DN/libdarknet.so" darknet/libdarknet.so
add "$DN/include/darknet.h" darknet/include/darknet.h
for f in "$CFGDIR"/*; do
    [ -f "$f" ] && add "$f" "darknet/cfg/$(basename "$f")"
done

# ---- the stand-ins and the image loader ----------------------------------------
for m in core imgcodecs highgui videoio; do
    so=libopencv_$m.so.406
    echo 'void sdnn_opencv_stand_in(void){}' |
        $CC -shared -fPIC -x c - -Wl,-soname,$so -o "$TMP/lib/$so" || die "cannot build the stand-in $so"
    echo "lib/$so  $(wc -c <"$TMP/lib/$so")  stand-in (an empty library with the soname)" >>"$MAN"
done
$CC -std=c11 -O2 -Wall -Wextra -Werror -shared -fPIC -Wl,-z,lazy -I"$DN/include" scripts/gpu_imgload.c \
    -o "$TMP/lib/libsdnn_imgload.so" || die "cannot build libsdnn_imgload.so"
echo "lib/libsdnn_imgload.so  $(wc -c <"$TMP/lib/libsdnn_imgload.so")  scripts/gpu_imgload.c" >>"$MAN"

# ---- the dependency closure (readelf NEEDED, resolved like ldd) ------------------
# Libraries every target machine has: glibc's.  CUDA's come from its install.
skip_soname() {
    case "$1" in
    libc.so.*|libm.so.*|libmvec.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libresolv.so.*) return 0 ;;
    libcuda.so*|libcudart.so*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*) return 0 ;;
    esac
    return 1
}
fallback_soname() {  # on any machine with a C/C++ compiler
    case "$1" in libstdc++.so.*|libgcc_s.so.*) return 0 ;; esac
    return 1
}
resolve() {  # soname -> path on this machine
    "$(command -v ldconfig || echo /sbin/ldconfig)" -p | awk -v s="$1" '$1 == s && /x86-64|x86_64/ { print $NF; exit }'
}
ROOTS="$DN/libdarknet.so"
if [ "$WITH_BLAS" = 1 ]; then
    ob=$(resolve libopenblas.so.0)
    [ -n "$ob" ] || die "no libopenblas.so.0 here (install libopenblas-dev, or SDNN_BUNDLE_BLAS=0)"
    ROOTS="$ROOTS $ob"
    hdir=$(dirname "$(readlink -f "$ob")")
    hdir=/usr/include/x86_64-linux-gnu/$(basename "$hdir")
    [ -f "$hdir/cblas.h" ] || hdir=/usr/include/x86_64-linux-gnu
    for h in cblas.h openblas_config.h; do
        [ -f "$hdir/$h" ] || die "no $hdir/$h (libopenblas-dev)"
        add "$hdir/$h" "include/$h"
    done
    # Compressed (36 MiB -> 11): tests/gpu/env.sh unpacks it there.
    gzip -6 -c "$ob" >"$TMP/lib/libopenblas.so.0.gz" || die "cannot compress $ob"
    echo "lib/libopenblas.so.0.gz  $(wc -c <"$TMP/lib/libopenblas.so.0.gz")  $ob (gzip)" >>"$MAN"
fi
seen=" "
queue=$ROOTS
while [ -n "$queue" ]; do
    set -- $queue
    f=$1; shift; queue=$*
    for so in $(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
        case "$seen" in *" $so "*) continue ;; esac
        seen="$seen$so "
        case "$so" in libopencv_*) continue ;; esac     # the stand-ins above
        skip_soname "$so" && continue
        [ "$so" = libopenblas.so.0 ] && continue
        p=$(resolve "$so")
        [ -n "$p" ] || die "$so (needed by $f) not found here"
        if fallback_soname "$so"; then add "$p" "lib/fallback/$so"
        else add "$p" "lib/$so"; fi
        queue="$queue $p"
    done
done

# ---- the shapes set ------------------------------------------------------------
if [ "$SHAPES" -gt 0 ]; then
    if [ ! -x ./darknet ]; then
        make -j2 darknet >"$TMP/.make.log" 2>&1 || { tail -20 "$TMP/.make.log"; die "cannot build ./darknet"; }
        rm -f "$TMP/.make.log"
    fi
    # Generated from the repository root so the lists read data/shapes/...
    rm -rf "$TMP/gen" && mkdir -p "$TMP/gen/data"
    nvalid=$(( SHAPES / 8 > 0 ? SHAPES / 8 : 1 ))
    ( cd "$TMP/gen" && "$OLDPWD/darknet" scalednn gen-shapes data/shapes -n "$SHAPES" -valid "$nvalid" -seed 1 ) \
        >"$TMP/.gen.log" 2>&1 || { cat "$TMP/.gen.log"; die "gen-shapes failed"; }
    rm -f "$TMP/.gen.log"
    mv "$TMP/gen/data/shapes" "$TMP/data/shapes" && rm -rf "$TMP/gen"
    echo "data/shapes/  $(du -sb "$TMP/data/shapes" | cut -f1)  ./darknet scalednn gen-shapes data/shapes -n $SHAPES -valid $nvalid -seed 1" >>"$MAN"
fi

bytes=$(du -sb "$TMP" | cut -f1)
mb=$(( (bytes + 1048575) / 1048576 ))
echo "# total $bytes bytes ($mb MiB)" >>"$MAN"
[ "$mb" -le "$MAXMB" ] || die "the bundle is $mb MiB, over SDNN_BUNDLE_MAX_MB=$MAXMB (SDNN_BUNDLE_BLAS=0 or fewer SDNN_BUNDLE_SHAPES)"
rm -rf "$OUTDIR" && mv "$TMP" "$OUTDIR" || die "cannot move the bundle to $OUTDIR"
trap - EXIT INT TERM
echo "scripts/gpu_bundle.sh: $OUTDIR: $mb MiB ($bytes bytes), $(grep -c '^[a-z]' "$OUTDIR/MANIFEST") entries (MANIFEST)"
