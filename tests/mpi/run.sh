#!/bin/sh
# Runs a program (tests/mpi/*, ./darknet, ...) under mpirun on this machine,
# the way tests/test_mpi.c and the benchmarks need it:
#
#   sh tests/mpi/run.sh NP PROGRAM [ARGS...]
#
# - as root too (CI runs as root): --allow-run-as-root and OpenMPI's two
#   OMPI_ALLOW_RUN_AS_ROOT variables;
# - more ranks than cores (CI has 2): --oversubscribe;
# - shared memory between the ranks (btl self,vader, pml ob1: no network
#   device is probed), without the single-copy mechanism, which needs ptrace
#   rights that containers often withhold (override any of these by setting
#   the OMPI_MCA_* variable before);
# - bounded: the whole run is killed after SDNN_MPI_RUN_TIMEOUT seconds (60).
# The exit status is mpirun's (124 after the time limit).
set -u
if [ $# -lt 2 ]; then
    echo "usage: sh tests/mpi/run.sh NP PROGRAM [ARGS...]" >&2
    exit 2
fi
np=$1
shift
if ! command -v mpirun >/dev/null 2>&1; then
    echo "run.sh: mpirun not found (apt-get install openmpi-bin)" >&2
    exit 127
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader}"
export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}"
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
exec timeout -k 5 "${SDNN_MPI_RUN_TIMEOUT:-60}" \
    mpirun --allow-run-as-root --oversubscribe --stdin none -np "$np" "$@"
