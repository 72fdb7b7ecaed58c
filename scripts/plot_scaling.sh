#!/bin/sh
# Scaling chart of a `./darknet scalednn simulate ... -csv FILE` CSV:
# scaling efficiency (single-GPU step / step) against the number of GPUs,
# one line per variant (stock, no-overlap, overlap, overlap+CODEC, planned).
#
#   sh scripts/plot_scaling.sh [-o OUT.png] [-t TITLE] SIM.csv
#
# Writes OUT.png (default: SIM.csv with .png in place of .csv) and prints
# its path.  Columns are found by their header names (variant, world,
# efficiency; topology for the default title).
#
# Exit status: 0 chart written; 2 usage error or a CSV that does not
# exist; 1 a CSV without those columns or rows, gnuplot missing or failing,
# or an empty PNG.  Needs gnuplot (gnuplot-nox), awk; no network.
set -u

usage() {
    echo "usage: sh scripts/plot_scaling.sh [-o OUT.png] [-t TITLE] SIM.csv" >&2
    exit 2
}

die() {
    code=$1
    shift
    printf 'plot_scaling.sh: %s\n' "$*" >&2
    exit "$code"
}

out=""
title=""
while [ $# -gt 0 ]; do
    case "$1" in
        -o) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
        -t) [ $# -ge 2 ] || usage; title=$2; shift 2 ;;
        -h) usage ;;
        -*) usage ;;
        *) break ;;
    esac
done
[ $# -eq 1 ] || usage
csv=$1
[ -f "$csv" ] || die 2 "$csv: no such file"
[ -n "$out" ] || out="${csv%.csv}.png"
command -v gnuplot >/dev/null 2>&1 || die 1 "gnuplot is not installed (apt-get install gnuplot-nox)"

tmp=$(mktemp -d) || die 1 "cannot make a temporary directory"
trap 'rm -rf "$tmp"' EXIT INT TERM

# One data file per variant ("world efficiency" rows, in CSV order), the
# variants in order of first appearance, and the topology.
awk -F, -v dir="$tmp" '
NR == 1 {
    for (i = 1; i <= NF; ++i) col[$i] = i
    if (!("variant" in col) || !("world" in col) || !("efficiency" in col)) {
        print "missing column (need variant, world, efficiency)" > "/dev/stderr"
        bad = 1
        exit 1
    }
    next
}
{
    v = $col["variant"]
    if (!(v in seen)) {
        seen[v] = ++nv
        print v > (dir "/variants")
    }
    print $col["world"], $col["efficiency"] > (dir "/v" seen[v] ".dat")
    if ("topology" in col) topo = $col["topology"]
    ++rows
}
END {
    if (bad) exit 1
    if (rows == 0) {
        print "no rows" > "/dev/stderr"
        exit 1
    }
    print topo > (dir "/topology")
}' "$csv" || die 1 "$csv: not a simulate CSV"

[ -n "$title" ] || title="scaling efficiency, topology $(cat "$tmp/topology")"

plot=""
i=0
while IFS= read -r v; do
    i=$((i + 1))
    [ -n "$plot" ] && plot="$plot, "
    plot="$plot'$tmp/v$i.dat' using 1:2 with linespoints lw 2 pt 7 title '$v'"
done < "$tmp/variants"

gnuplot <<EOF || die 1 "gnuplot failed"
set terminal pngcairo size 900,560 enhanced font ',11'
set output '$out'
set title '$title' noenhanced
set xlabel 'GPUs'
set ylabel 'efficiency (1-GPU step / step)'
set logscale x 2
set xtics 2
set yrange [0:1.05]
set grid
set key bottom left
plot $plot
EOF
[ -s "$out" ] || die 1 "$out: empty PNG"
echo "$out"
