#!/bin/sh
# Installs the Debian packages scalednn needs on a fresh machine.
# Idempotent: when everything is present it only checks and returns.
set -eu
PKGS="build-essential darknet libcmocka-dev libopenblas-dev libopenmpi-dev openmpi-bin \
dataset-fashion-mnist gnuplot-nox iproute2 gzip libdnnl-dev"
missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -z "$missing" ]; then
    echo "setup: all packages present"
    exit 0
fi
echo "setup: installing:$missing"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q $missing
