#!/bin/sh
# bench-comm over MPI (the mpi backend's own ring) against OpenMPI's
# MPI_Allreduce (tests/mpi/mpi_allreduce) and PyTorch's gloo allreduce
# (tests/mpi/gloo_allreduce.py), run back to back on the same links:
#
#   loopback  P processes on this machine, TCP over lo (OMPI btl self,tcp),
#             unshaped: busbw in GB/s
#   lab       scripts/netlab.sh: P namespaces, every link shaped by tbf to
#             RATE, at each MTU: busbw as % of RATE
#
# Each round runs every (link, P, MTU) case with the three programs in
# turn; the table gives, per size, the median busbw over ROUNDS rounds.
# busbw = size x 2(P-1)/P / time (nccl-tests' definition) for all three.
# Run as root (network namespaces).
#
#   sh bench/bench_mpi_comm.sh
#   PS="2 4" RATES="1gbit 100mbit" MTUS="1500 9000" ROUNDS=3 LOOPBACK=1 \
#   PY=python3 sh bench/bench_mpi_comm.sh
#
# PY must import torch for the gloo column (pip install torch in a venv;
# not a dependency of scalednn); without it the column says n/a.
# Raw figures: runs/bench-mpi-comm/raw.tsv (round, link, P, MTU, program,
# size, busbw GB/s); the logs stay in runs/bench-mpi-comm/, and REPARSE=1
# rebuilds the table from them without running anything.
set -eu
cd "$(dirname "$0")/.."
PS=${PS:-"2 4"}
RATES=${RATES:-"1gbit 100mbit"}
MTUS=${MTUS:-"1500 9000"}
ROUNDS=${ROUNDS:-3}
LOOPBACK=${LOOPBACK:-1}
PY=${PY:-python3}
OUT=runs/bench-mpi-comm
mkdir -p "$OUT"
RAW=$OUT/raw.tsv
: >"$RAW"
if [ "${REPARSE:-0}" != 1 ] && { [ ! -x ./darknet ] || [ ! -x build/tests/mpi/mpi_allreduce ]; }; then
    make -j2 all tests >/dev/null
fi
GLOO=1
"$PY" -c "import torch.distributed" 2>/dev/null || GLOO=0

# sizes and iterations per link: a 100 Mbit/s link takes 5 s per 64 MiB
sizes() {
    case "$1" in
    100mbit) echo "-b 4M -e 16M -f 4 -n 3 -w 1" ;;
    *) echo "-b 4M -e 64M -f 4 -n 5 -w 1" ;;
    esac
}

# run LINK P MTU PROGRAM: one program's rows into raw.tsv
run() {
    link=$1 p=$2 mtu=$3 prog=$4 round=$5
    case "$prog" in
    ring) cmd="./darknet scalednn bench-comm -d mpi -g 1 -c 0" ;;
    mpi) cmd="build/tests/mpi/mpi_allreduce" ;;
    gloo) cmd="$PY tests/mpi/gloo_allreduce.py" ;;
    esac
    log=$OUT/$link-$p-$mtu-$prog-$round.log
    if [ "${REPARSE:-0}" = 1 ]; then
        [ -f "$log" ] || return 0
    elif [ "$link" = loopback ]; then
        OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo \
            SDNN_MPI_RUN_TIMEOUT=600 sh tests/mpi/run.sh "$p" $cmd $(sizes 1gbit) >"$log" 2>&1 || true
    else
        sh scripts/netlab.sh -k "$p" -rate "$link" -mtu "$mtu" -- $cmd $(sizes "$link") \
            >"$log" 2>&1 || true
    fi
    # busbw from the size and the time (us) columns, to more digits than
    # the programs print: bench-comm's time is column 5, the others' 3
    case "$prog" in ring) col=5 ;; *) col=3 ;; esac
    n=$(awk -v c="$col" -v r="$round" -v l="$link" -v p="$p" -v m="$mtu" -v g="$prog" '
        /^ *[0-9]/ && NF >= c && $c > 0 {
            printf "%s\t%s\t%s\t%s\t%s\t%s\t%.6f\n", r, l, p, m, g, $1,
                $1 * 2 * (p - 1) / p / ($c * 1e-6) / 1e9; n++ }
        END { print n + 0 > "/dev/stderr" }' "$log" 2>&1 >>"$RAW")
    [ "$n" -gt 0 ] || echo "bench_mpi_comm: $link P=$p MTU $mtu $prog gave no rows (see $log)" >&2
}

r=1
while [ "$r" -le "$ROUNDS" ]; do
    for p in $PS; do
        if [ "$LOOPBACK" = 1 ]; then
            for prog in ring mpi gloo; do
                [ "$prog" = gloo ] && [ "$GLOO" = 0 ] && continue
                run loopback "$p" - "$prog" "$r"
            done
        fi
        for link in $RATES; do
            for mtu in $MTUS; do
                for prog in ring mpi gloo; do
                    [ "$prog" = gloo ] && [ "$GLOO" = 0 ] && continue
                    run "$link" "$p" "$mtu" "$prog" "$r"
                done
            done
        done
    done
    r=$((r + 1))
done

# Medians over the rounds; the lab's as % of the shaped rate.
echo "| link | MTU | P | size | our ring | MPI_Allreduce | gloo |"
echo "|---|---:|---:|---:|---:|---:|---:|"
sort -t "$(printf '\t')" -k2,2 -k4,4 -k3,3n -k6,6n -k5,5 -k7,7g "$RAW" | awk -F '\t' -v gloo="$GLOO" '
    function rate(l) {
        if (l ~ /gbit$/) return substr(l, 1, length(l) - 4) * 1e9 / 8
        if (l ~ /mbit$/) return substr(l, 1, length(l) - 4) * 1e6 / 8
        return 0
    }
    function med(k,   n) {
        n = cnt[k]
        if (!n) return ""
        if (n % 2) return v[k, (n + 1) / 2]
        return (v[k, n / 2] + v[k, n / 2 + 1]) / 2
    }
    function fmt(x, l) {
        if (x == "") return "n/a"
        if (rate(l)) return sprintf("%.1f%%", 100 * x * 1e9 / rate(l))
        return sprintf("%.3f GB/s", x)
    }
    { k = $2 SUBSEP $4 SUBSEP $3 SUBSEP $6 SUBSEP $5; v[k, ++cnt[k]] = $7
      c = $2 SUBSEP $4 SUBSEP $3 SUBSEP $6; if (!(c in seen)) { seen[c] = 1; order[++nc] = c } }
    END {
        for (i = 1; i <= nc; i++) {
            split(order[i], f, SUBSEP)
            printf "| %s | %s | %s | %d MiB | %s | %s | %s |\n", f[1], f[2], f[3], f[4] / 1048576,
                fmt(med(order[i] SUBSEP "ring"), f[1]), fmt(med(order[i] SUBSEP "mpi"), f[1]),
                gloo ? fmt(med(order[i] SUBSEP "gloo"), f[1]) : "n/a"
        }
    }'
