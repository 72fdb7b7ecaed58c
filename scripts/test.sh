#!/bin/sh
# The README's test command: installs what is missing, builds, and runs the
# CMocka suite and the GPU suite on simulated devices, then both under
# AddressSanitizer + UBSan.
set -eu
cd "$(dirname "$0")/.."
sh scripts/setup.sh
make -j2
make test
# The GPU engine's host logic on simulated devices (no GPU, no nvcc): every
# tests/gpu program with jitter seeds; `make asan` repeats it under ASan.
make test-sim
make asan
# The GPU engine must compile and link wherever the CUDA toolkit is (no GPU
# needed here); its host-only checks run now, the device checks on a GPU
# machine (sh tests/gpu/run.sh).
if [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
    make GPU=1 BUILD=build-gpu -j2 all gpu-tests
    build-gpu/tests/gpu/probe --expect-none
    build-gpu/tests/gpu/formulas
else
    echo "no nvcc under ${CUDA_HOME:-/usr/local/cuda}: GPU build skipped"
fi
