#!/bin/sh
# The README's test command: installs what is missing, builds, and runs the
# CMocka suite, then the same suite under AddressSanitizer + UBSan.
set -eu
cd "$(dirname "$0")/.."
sh scripts/setup.sh
make -j2
make test
make asan
