# tests/gpu/env.sh — sourced by tests/gpu/run.sh and bench/gpu/run.sh.
#
# Finds what a GPU build needs on this machine and exports it:
#   SDNN_DARKNET_HOME  Debian's libdarknet (/usr/lib/darknet), or the bundle
#                      scripts/gpu_bundle.sh made where it is installed
#                      (SDNN_BUNDLE, or ./gpu-bundle when darknet is absent)
#   SDNN_CUDA_HOME, SDNN_CUDNN_HOME, SDNN_NCCL_HOME
#                      the toolkit; cuDNN and NCCL from it or, where they come
#                      only inside Python wheels (nvidia-cudnn-*, nvidia-nccl-*),
#                      from folders of links laid out as include/ + lib64/
#   SDNN_DEBIAN_CFG    Debian's cfg folder (yolov3-tiny, yolov2-tiny, cifar)
#   LD_LIBRARY_PATH    the stand-in OpenCV libraries and the wheels' libraries
#   SDNN_MAKE_ARGS     the make variables for `make GPU=1 ...`
#   SDNN_IMGLOAD       with a bundle: the library run.sh preloads into the
#                      programs so Darknet loads images without OpenCV
# With SDNN_BUNDLE=DIR (a folder made by scripts/gpu_bundle.sh) everything
# Darknet-side comes from it (sdnn_bundle_env), also where Debian's darknet
# is installed: that is how the lent machine's layout is checked here.
# On failure it prints why and returns 1.

sdnn_env_fail() { echo "tests/gpu/env.sh: $*" >&2; return 1; }

sdnn_gpu_env() {
    SDNN_ROOT=$(pwd)
    SDNN_WORK=${SDNN_WORK:-$SDNN_ROOT/build/gpu-env}
    mkdir -p "$SDNN_WORK" || return 1

    # ---- darknet --------------------------------------------------------
    SDNN_IMGLOAD=
    SDNN_BLAS_ARG=
    if [ -z "${SDNN_BUNDLE:-}" ] && [ ! -f /usr/lib/darknet/libdarknet.so ] && [ -f gpu-bundle/MANIFEST ]; then
        SDNN_BUNDLE=gpu-bundle
        export SDNN_BUNDLE
    fi
    if [ -n "${SDNN_BUNDLE:-}" ]; then
        sdnn_bundle_env || return 1
    elif [ -f /usr/lib/darknet/libdarknet.so ] && [ -f /usr/lib/darknet/include/darknet.h ]; then
        SDNN_DARKNET_HOME=/usr/lib/darknet
        SDNN_DEBIAN_CFG=/usr/share/darknet/cfg
    else
        sdnn_env_fail "no libdarknet: install Debian's darknet, or run 'sh scripts/gpu_bundle.sh gpu-bundle' where it is installed and bring gpu-bundle along (SDNN_BUNDLE=gpu-bundle)"
        return 1
    fi

    # libdarknet needs four OpenCV sonames; its OpenCV calls are bound
    # lazily and the tests never load images, so empty stand-ins let it load.
    STUB=$SDNN_WORK/opencv-stub
    if [ -z "${SDNN_BUNDLE:-}" ] && ldd "$SDNN_DARKNET_HOME/libdarknet.so" 2>/dev/null | grep -q "not found"; then
        mkdir -p "$STUB"
        for m in core imgcodecs highgui videoio; do
            so=libopencv_$m.so.406
            [ -f "$STUB/$so" ] || echo 'void sdnn_opencv_stand_in(void){}' |
                cc -shared -fPIC -x c - -Wl,-soname,$so -o "$STUB/$so" ||
                { sdnn_env_fail "cannot build the stand-in $so"; return 1; }
        done
        LD_LIBRARY_PATH=$STUB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        # Linking against libdarknet must not insist on the OpenCV symbols.
        LDFLAGS="-Wl,--allow-shlib-undefined -Wl,-rpath-link,$STUB"
        export LDFLAGS
    fi

    # ---- CUDA -------------------------------------------------------------
    if [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then SDNN_CUDA_HOME=$CUDA_HOME
    elif [ -x /usr/local/cuda/bin/nvcc ]; then SDNN_CUDA_HOME=/usr/local/cuda
    elif command -v nvcc >/dev/null 2>&1; then SDNN_CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
    else sdnn_env_fail "no nvcc (set CUDA_HOME)"; return 1; fi
    [ -d "$SDNN_CUDA_HOME/lib64" ] || sdnn_env_fail "no $SDNN_CUDA_HOME/lib64" || return 1

    PY=$(command -v python3 || true)
    # A library from the toolkit, or else from a wheel: prints a home with
    # include/ and lib64/ (links), and adds the wheel's lib to LD_LIBRARY_PATH.
    sdnn_find_lib() {  # name header soname wheel-module
        if [ -f "$SDNN_CUDA_HOME/include/$2" ] && ls "$SDNN_CUDA_HOME/lib64/lib$1.so" >/dev/null 2>&1; then
            echo "$SDNN_CUDA_HOME"; return 0
        fi
        [ -n "$PY" ] || return 1
        dir=$("$PY" -c "import os, $4 as m; print(os.path.dirname(m.__file__) if getattr(m, '__file__', None) else list(m.__path__)[0])" 2>/dev/null) || dir=
        if [ -z "$dir" ] || [ ! -f "$dir/include/$2" ]; then
            # Wheels lay their files out differently: look for the header.
            for sp in $("$PY" -c "import site; print(' '.join(site.getsitepackages()))" 2>/dev/null); do
                hdr=$(find "$sp/nvidia" -maxdepth 4 -name "$2" -path "*include*" 2>/dev/null | head -1)
                [ -n "$hdr" ] && { dir=$(dirname "$(dirname "$hdr")"); break; }
            done
        fi
        [ -n "$dir" ] || return 1
        [ -f "$dir/include/$2" ] || return 1
        home=$SDNN_WORK/$1-home
        mkdir -p "$home/lib64"
        ln -sfn "$dir/include" "$home/include"
        for f in "$dir"/lib/lib*.so* "$dir"/lib64/lib*.so*; do
            [ -e "$f" ] && ln -sfn "$f" "$home/lib64/$(basename "$f")"
        done
        [ -e "$home/lib64/lib$1.so" ] || ln -sfn "$home/lib64/$3" "$home/lib64/lib$1.so"
        [ -e "$home/lib64/lib$1.so" ] || return 1
        echo "$home"
    }
    SDNN_CUDNN_HOME=$(sdnn_find_lib cudnn cudnn.h libcudnn.so.9 nvidia.cudnn) ||
        { sdnn_env_fail "cuDNN not found (toolkit or the nvidia-cudnn wheel)"; return 1; }
    SDNN_NCCL_HOME=$(sdnn_find_lib nccl nccl.h libnccl.so.2 nvidia.nccl) ||
        { sdnn_env_fail "NCCL not found (toolkit or the nvidia-nccl wheel)"; return 1; }
    for h in "$SDNN_CUDNN_HOME" "$SDNN_NCCL_HOME"; do
        case ":${LD_LIBRARY_PATH:-}:" in *":$h/lib64:"*) ;; *) LD_LIBRARY_PATH=$h/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;; esac
    done
    export LD_LIBRARY_PATH SDNN_DARKNET_HOME SDNN_DEBIAN_CFG SDNN_CUDA_HOME SDNN_CUDNN_HOME SDNN_NCCL_HOME

    # sm_90 only on the H200 (a third of the build time of the default targets).
    SDNN_ARCH=${SDNN_ARCH:--gencode arch=compute_90,code=sm_90}
    SDNN_MAKE_ARGS="GPU=1 MPI=0 BUILD=build/gpu DARKNET_HOME=$SDNN_DARKNET_HOME CUDA_HOME=$SDNN_CUDA_HOME CUDNN_HOME=$SDNN_CUDNN_HOME NCCL_HOME=$SDNN_NCCL_HOME${SDNN_BLAS_ARG:+ $SDNN_BLAS_ARG}"
    export SDNN_MAKE_ARGS SDNN_ARCH SDNN_IMGLOAD
    return 0
}

# `tests/gpu/run.sh --prepare`: the bundle for a machine without Debian's
# packages (scripts/gpu_bundle.sh; use it with SDNN_BUNDLE=gpu-bundle).
sdnn_gpu_prepare() {
    sh scripts/gpu_bundle.sh gpu-bundle
}

# The Darknet side from a bundle (scripts/gpu_bundle.sh): sets and exports
# SDNN_DARKNET_HOME, SDNN_DEBIAN_CFG, SDNN_IMGLOAD, LD_LIBRARY_PATH,
# LIBRARY_PATH and CPATH (OpenBLAS for BLAS=1), LDFLAGS, SDNN_BLAS_ARG.
# The bundle's lib/ is laid out in $SDNN_WORK/bundle-lib (OpenBLAS unpacked),
# with each library of lib/fallback/ added only where this machine has no
# library of that soname (a newer libstdc++ there must win).
sdnn_bundle_env() {
    SDNN_ROOT=${SDNN_ROOT:-$(pwd)}
    SDNN_WORK=${SDNN_WORK:-$SDNN_ROOT/build/gpu-env}
    b=$SDNN_BUNDLE
    case "$b" in /*) ;; *) b=$SDNN_ROOT/$b ;; esac
    [ -f "$b/MANIFEST" ] && [ -f "$b/darknet/libdarknet.so" ] && [ -f "$b/darknet/include/darknet.h" ] ||
        { sdnn_env_fail "SDNN_BUNDLE=$SDNN_BUNDLE: not a bundle (make one with sh scripts/gpu_bundle.sh DIR where Debian's darknet is installed)"; return 1; }
    SDNN_DARKNET_HOME=$b/darknet
    SDNN_DEBIAN_CFG=$b/darknet/cfg
    L=$SDNN_WORK/bundle-lib
    rm -rf "$L" && mkdir -p "$L" || return 1
    for f in "$b"/lib/*; do
        [ -f "$f" ] || continue
        case "$f" in
        *.gz)
            so=$(basename "$f" .gz)
            if command -v gzip >/dev/null 2>&1; then gzip -dc "$f" >"$L/$so"
            else python3 -c "import gzip,shutil,sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$f" "$L/$so"
            fi || { sdnn_env_fail "cannot unpack $f"; return 1; }
            ;;
        *) ln -sfn "$f" "$L/$(basename "$f")" ;;
        esac
    done
    added=
    for f in "$b"/lib/fallback/*; do
        [ -f "$f" ] || continue
        so=$(basename "$f")
        if ! { "$(command -v ldconfig || echo /sbin/ldconfig)" -p 2>/dev/null | awk -v s="$so" '$1 == s { found = 1 } END { exit !found }'; }; then
            ln -sfn "$f" "$L/$so"
            added="$added $so"
        fi
    done
    [ -n "$added" ] && echo "tests/gpu/env.sh: this machine lacks$added: the bundle's copies are used"
    if [ -f "$L/libopenblas.so.0" ]; then
        ln -sfn libopenblas.so.0 "$L/libopenblas.so"
        SDNN_BLAS_ARG=BLAS=1
        LIBRARY_PATH=$L${LIBRARY_PATH:+:$LIBRARY_PATH}
        CPATH=$b/include${CPATH:+:$CPATH}
        export LIBRARY_PATH CPATH
    else
        SDNN_BLAS_ARG=BLAS=0
    fi
    SDNN_IMGLOAD=$L/libsdnn_imgload.so
    [ -f "$SDNN_IMGLOAD" ] || { sdnn_env_fail "$b/lib has no libsdnn_imgload.so"; return 1; }
    LD_LIBRARY_PATH=$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # Linking against libdarknet must not insist on the OpenCV symbols.
    LDFLAGS="-Wl,--allow-shlib-undefined -Wl,-rpath-link,$L"
    export LD_LIBRARY_PATH LDFLAGS SDNN_DARKNET_HOME SDNN_DEBIAN_CFG SDNN_IMGLOAD SDNN_BLAS_ARG
    return 0
}
