#!/bin/sh
# Scaling chart of `./darknet scalednn simulate ... -csv FILE` CSVs:
# scaling efficiency (single-GPU step / step) against the number of GPUs,
# one line per variant (stock, no-overlap, overlap, overlap+CODEC, planned).
#
#   sh scripts/plot_scaling.sh [-o OUT.png] [-t TITLE] [-v LIST] SIM.csv [SIM.csv ...]
#
#   -v LIST  only these variants (comma-separated, e.g. stock,planned)
#
# Writes OUT.png (default: the first SIM.csv with .png in place of .csv)
# and prints its path.  Columns are found by their header names (variant,
# world, efficiency; topology for the default title and, when the CSVs
# hold more than one topology, for each line's name: "pcie planned").
#
# Exit status: 0 chart written; 2 usage error or a CSV that does not
# exist; 1 a CSV without those columns or rows, gnuplot missing or failing,
# or an empty PNG.  Needs gnuplot (gnuplot-nox), awk; no network.
set -u

usage() {
    echo "usage: sh scripts/plot_scaling.sh [-o OUT.png] [-t TITLE] [-v LIST] SIM.csv [SIM.csv ...]" >&2
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
only=""
while [ $# -gt 0 ]; do
    case "$1" in
        -o) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
        -t) [ $# -ge 2 ] || usage; title=$2; shift 2 ;;
        -v) [ $# -ge 2 ] || usage; only=$2; shift 2 ;;
        -h) usage ;;
        -*) usage ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || usage
for csv in "$@"; do
    [ -f "$csv" ] || die 2 "$csv: no such file"
done
[ -n "$out" ] || out="${1%.csv}.png"
command -v gnuplot >/dev/null 2>&1 || die 1 "gnuplot is not installed (apt-get install gnuplot-nox)"

tmp=$(mktemp -d) || die 1 "cannot make a temporary directory"
trap 'rm -rf "$tmp"' EXIT INT TERM

# One data file per (topology, variant) ("world efficiency" rows, in CSV
# order), the lines in order of first appearance, and the topologies.
for csv in "$@"; do
    awk -F, -v only="$only" '
    FNR == 1 {
        delete col
        for (i = 1; i <= NF; ++i) col[$i] = i
        if (!("variant" in col) || !("world" in col) || !("efficiency" in col)) {
            print FILENAME ": missing column (need variant, world, efficiency)" > "/dev/stderr"
            exit 1
        }
        next
    }
    only == "" || index("," only ",", "," $col["variant"] ",") {
        print ("topology" in col ? $col["topology"] : "-"), $col["variant"], $col["world"],
              $col["efficiency"]
    }' "$csv" || die 1 "$csv: not a simulate CSV"
done >"$tmp/rows"
awk -v dir="$tmp" '
{
    k = $1 " " $2
    if (!(k in seen)) {
        seen[k] = ++nv
        name[nv] = k
        vname[nv] = $2
    }
    if (!($1 in topos)) { topos[$1] = 1; ntopo++; tlist = tlist (tlist ? ", " : "") $1 }
    print $3, $4 > (dir "/v" seen[k] ".dat")
    ++rows
}
END {
    if (rows == 0) {
        print "no rows" > "/dev/stderr"
        exit 1
    }
    for (i = 1; i <= nv; ++i) print (ntopo > 1 ? name[i] : vname[i]) > (dir "/variants")
    print tlist > (dir "/topology")
}' "$tmp/rows" || die 1 "no rows to plot in $*"

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
