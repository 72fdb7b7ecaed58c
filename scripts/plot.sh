#!/bin/sh
# Charts of training CSVs (written by `./darknet detector train ... -csv FILE`
# or [scalednn] csv=FILE), one line per run, the same colour for a run in
# every chart.
#
#   sh scripts/plot.sh [-o OUTDIR] [-t TITLE] RUN1.csv [RUN2.csv ...]   (1 to 8 runs)
#
# Writes into OUTDIR (default: the directory of the first CSV) and prints the
# path of each PNG written:
#   loss_vs_time.png       average loss vs elapsed wall time (per-step loss light)
#   loss_vs_iteration.png  the same vs iteration
#   images_per_s.png       throughput vs iteration
#   exposed_comm.png       exposed communication per step (solid) and all
#                          communication per step (dashed) vs iteration, in ms
#   map_vs_time.png        mAP vs elapsed wall time, only when a CSV has map values
#
# A run is named by a leading comment line `# label: NAME`, else by the file's
# basename without .csv.  Columns are found by their header names; needed:
# iteration, loss, avg_loss, images_per_s, exposed_comm_s, comm_s and
# elapsed_s (older CSVs without elapsed_s: the running sum of `seconds`);
# map is optional.  Empty or non-numeric values (nan) are left out of the
# charts; a chart with no values at all is not written (said on stderr).
#
# Exit status: 0 charts written; 2 usage error or a CSV that does not exist;
# 1 a CSV that is not a training CSV or has no rows, gnuplot missing or
# failing, a PNG that came out empty, or nothing at all to plot.  Needs gnuplot (gnuplot-nox,
# installed by scripts/setup.sh), awk and sed; no network.
set -u

usage() {
    echo "usage: sh scripts/plot.sh [-o OUTDIR] [-t TITLE] RUN1.csv [RUN2.csv ...]  (1 to 8 CSVs)" >&2
    exit 2
}

die() {
    code=$1
    shift
    printf 'plot.sh: %s\n' "$*" >&2
    exit "$code"
}

# Text as the inside of a single-quoted gnuplot string.
gq() {
    printf '%s' "$1" | sed "s/'/''/g"
}

outdir=""
title=""
while getopts o:t:h opt; do
    case $opt in
        o) outdir=$OPTARG ;;
        t) title=$OPTARG ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
[ $# -le 8 ] || die 2 "at most 8 CSV files, got $#"

for f in "$@"; do
    if [ ! -e "$f" ]; then
        die 2 "$f: no such file"
    elif [ ! -f "$f" ]; then
        die 2 "$f: not a regular file"
    elif [ ! -r "$f" ]; then
        die 2 "$f: not readable"
    fi
done

if [ -z "$outdir" ]; then
    case $1 in
        */*) outdir=${1%/*} ;;
        *) outdir=. ;;
    esac
    [ -n "$outdir" ] || outdir=/
fi

command -v gnuplot >/dev/null 2>&1 ||
    die 1 "gnuplot not found: install gnuplot-nox (scripts/setup.sh does)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sdnn-plot.XXXXXX") || die 1 "cannot create a temporary directory"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# One awk pass per CSV (read from stdin, so a name with '=' stays a file):
# checks the header, writes runN.dat (iteration, elapsed_s, loss, avg_loss,
# images_per_s, exposed ms, comm ms; NaN where a value is missing or not a
# number) and runN.map (iteration, elapsed_s, map; measured rows only), and
# prints "ROWS N_LOSS N_AVG N_IPS N_EXPOSED N_COMM N_MAP LOSSMIN LOSSMAX
# NONPOSITIVE LABEL" (N_*: how many values each series has).
# shellcheck disable=SC2016
extract='
function trim(s) { gsub(/^[ \t"]+|[ \t"]+$/, "", s); return s }
function isnum(s) {
    return s ~ /^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$/
}
function val(name,    s) {
    if (!(name in col)) return "NaN"
    s = trim($(col[name]))
    return isnum(s) ? sprintf("%.10g", s + 0) : "NaN"
}
function loss_range(s) {
    if (s == "NaN") return 0
    s += 0
    if (s <= 0) nonpos = 1
    else {
        if (lmin == "" || s < lmin) lmin = s
        if (lmax == "" || s > lmax) lmax = s
    }
    return 1
}
BEGIN { FS = ","; file = ENVIRON["PLOT_CSV"]; dat = ENVIRON["PLOT_DAT"]
        mapf = ENVIRON["PLOT_MAP"]; label = ""; header = 0; rows = 0; elapsed = 0
        nl = na = ni = ne = nc = nm = 0; lmin = ""; lmax = ""; nonpos = 0; bad = 0 }
{ sub(/\r$/, "") }
/^[ \t]*#/ {
    if (!header && label == "" && match($0, /^[ \t]*#[ \t]*label[ \t]*:/)) {
        label = substr($0, RLENGTH + 1)
        gsub(/^[ \t]+|[ \t]+$/, "", label)
    }
    next
}
/^[ \t]*$/ { next }
!header {
    header = 1
    for (i = 1; i <= NF; i++) { n = trim($i); if (n != "" && !(n in col)) col[n] = i }
    missing = ""
    nreq = split("iteration loss avg_loss images_per_s exposed_comm_s comm_s", req, " ")
    for (k = 1; k <= nreq; k++)
        if (!(req[k] in col)) missing = missing (missing == "" ? "" : ", ") req[k]
    if (!("elapsed_s" in col) && !("seconds" in col))
        missing = missing (missing == "" ? "" : ", ") "elapsed_s"
    if (missing != "") {
        printf "plot.sh: %s: not a training CSV: missing column(s) %s\n", file, missing > "/dev/stderr"
        bad = 1
        exit 1
    }
    next
}
{
    it = val("iteration")
    if (it == "NaN") next
    if ("elapsed_s" in col) {
        el = val("elapsed_s")
    } else {
        s = val("seconds")
        if (s != "NaN") elapsed += s
        el = sprintf("%.10g", elapsed)
    }
    loss = val("loss"); avg = val("avg_loss"); ips = val("images_per_s")
    ex = val("exposed_comm_s"); cm = val("comm_s")
    if (el != "NaN") { nl += loss_range(loss); na += loss_range(avg) }
    if (ips != "NaN") ni++
    if (ex != "NaN") { ex = sprintf("%.10g", ex * 1000); ne++ }
    if (cm != "NaN") { cm = sprintf("%.10g", cm * 1000); nc++ }
    print it, el, loss, avg, ips, ex, cm > dat
    rows++
    m = val("map")
    if (m != "NaN" && el != "NaN") { print it, el, m > mapf; nm++ }
}
END {
    if (bad) exit 1
    if (!header) {
        printf "plot.sh: %s: empty (no header line)\n", file > "/dev/stderr"
        exit 1
    }
    if (rows == 0) {
        printf "plot.sh: %s: no data rows (header only)\n", file > "/dev/stderr"
        exit 1
    }
    close(dat)
    if (nm) close(mapf)
    printf "%d %d %d %d %d %d %d %s %s %d %s\n", rows, nl, na, ni, ne, nc, nm,
           lmin == "" ? "-" : lmin, lmax == "" ? "-" : lmax, nonpos, label
}'

# Run colours (and their light versions for per-step loss), run i in every chart.
colours="#1f77b4 #d62728 #2ca02c #ff7f0e #9467bd #8c564b #e377c2 #17becf"
lights="#b1cfe5 #f1b3b4 #b5deb5 #ffd2ab #dacae8 #d7c4c0 #f5cfea #aee8ee"

nth() {
    # nth N WORDS...: the Nth of the words
    n=$1
    shift
    shift $((n - 1))
    printf '%s' "$1"
}

# style COUNT LINESPEC: lines for a series of 2+ values, a dot for a single one.
style() {
    if [ "$1" -gt 1 ]; then
        printf 'with lines %s' "$2"
    else
        printf 'with points pt 7 ps 1.2'
    fi
}

i=0
lmin_all=-
lmax_all=-
nonpos_all=0
p_raw_t=""; p_avg_t=""; p_raw_i=""; p_avg_i=""; p_ips=""; p_comm=""; p_ex=""; p_map=""
for f in "$@"; do
    i=$((i + 1))
    PLOT_CSV=$f PLOT_DAT="$tmp/run$i.dat" PLOT_MAP="$tmp/run$i.map" \
        awk "$extract" <"$f" >"$tmp/sum$i" || exit 1
    read -r _rows nl na ni ne nc nm lmin lmax nonpos label <"$tmp/sum$i"
    if [ -z "$label" ]; then
        label=${f##*/}
        label=${label%.csv}
    fi
    [ "$nonpos" -eq 1 ] && nonpos_all=1
    if [ "$lmin" != - ]; then
        lmin_all=$(awk -v a="$lmin_all" -v b="$lmin" 'BEGIN { print (a == "-" || b + 0 < a + 0) ? b : a }')
        lmax_all=$(awk -v a="$lmax_all" -v b="$lmax" 'BEGIN { print (a == "-" || b + 0 > a + 0) ? b : a }')
    fi

    # shellcheck disable=SC2086
    c="lc rgb '$(nth "$i" $colours)'"
    # shellcheck disable=SC2086
    l="lc rgb '$(nth "$i" $lights)'"
    t="title '$(gq "$label")'"
    d="'run$i.dat'"
    if [ "$nl" -gt 0 ]; then
        p_raw_t="$p_raw_t$d using 2:3 $(style "$nl" 'lw 1') $l notitle, "
        p_raw_i="$p_raw_i$d using 1:3 $(style "$nl" 'lw 1') $l notitle, "
    fi
    if [ "$na" -gt 0 ]; then
        p_avg_t="$p_avg_t$d using 2:4 $(style "$na" 'lw 2') $c $t, "
        p_avg_i="$p_avg_i$d using 1:4 $(style "$na" 'lw 2') $c $t, "
    fi
    [ "$ni" -gt 0 ] && p_ips="$p_ips$d using 1:5 $(style "$ni" 'lw 1.5') $c $t, "
    [ "$nc" -gt 0 ] && p_comm="$p_comm$d using 1:7 $(style "$nc" 'lw 1 dt (6,4)') $c notitle, "
    [ "$ne" -gt 0 ] && p_ex="$p_ex$d using 1:6 $(style "$ne" 'lw 1.5') $c $t, "
    [ "$nm" -gt 0 ] &&
        p_map="$p_map'run$i.map' using 2:3 with linespoints lw 2 pt 7 ps 1 $c $t, "
done

# Loss on a log scale when it spans more than a factor of 20 and stays positive.
logloss=0
if [ "$nonpos_all" -eq 0 ] && [ "$lmin_all" != - ]; then
    logloss=$(awk -v a="$lmin_all" -v b="$lmax_all" 'BEGIN { print (b / a > 20) ? 1 : 0 }')
fi

if gnuplot -e "set terminal" 2>&1 | grep -q pngcairo; then
    term="set terminal pngcairo size 1100,650 font 'Sans,11' noenhanced"
else
    term="set terminal png size 1100,650 noenhanced"
fi

if [ -n "$title" ]; then
    prefix="$(gq "$title") - "
else
    prefix=""
fi

# A chart whose series are all empty (say, every loss non-finite) is left out.
charts=""
skip() {
    printf 'plot.sh: %s.png: no values to plot, not written\n' "$1" >&2
}
{
    echo "$term"
    echo "set encoding utf8"
    echo "set termoption noenhanced"
    echo "set datafile missing 'NaN'"
    echo "set grid lc rgb '#dddddd'"
    echo "set key below horizontal height 1"
    echo "set border lc rgb '#444444'"
    if [ "$logloss" -eq 1 ]; then echo "set logscale y"; fi
    echo "set ylabel 'loss (average: solid, per step: light)'"
    lkey="keyentry with lines lw 1 lc rgb '#bbbbbb' title 'per-step loss (light)'"
    if [ -n "$p_raw_t$p_avg_t" ]; then
        charts="$charts loss_vs_time loss_vs_iteration"
        echo "set output 'loss_vs_time.png'"
        echo "set title '${prefix}Average loss vs wall time'"
        echo "set xlabel 'wall time since start of training (s)'"
        echo "plot $p_raw_t$p_avg_t$lkey"

        echo "set output 'loss_vs_iteration.png'"
        echo "set title '${prefix}Average loss vs iteration'"
        echo "set xlabel 'iteration'"
        echo "plot $p_raw_i$p_avg_i$lkey"
    else
        skip loss_vs_time
        skip loss_vs_iteration
    fi
    echo "unset logscale y"

    if [ -n "$p_ips" ]; then
        charts="$charts images_per_s"
        echo "set output 'images_per_s.png'"
        echo "set title '${prefix}Throughput'"
        echo "set xlabel 'iteration'"
        echo "set ylabel 'images per second (images/s)'"
        echo "set yrange [0:*]"
        echo "plot ${p_ips%, }"
        echo "set yrange [*:*]"
    else
        skip images_per_s
    fi

    if [ -n "$p_ex$p_comm" ]; then
        charts="$charts exposed_comm"
        echo "set output 'exposed_comm.png'"
        echo "set title '${prefix}Communication per step'"
        echo "set xlabel 'iteration'"
        echo "set ylabel 'time per step (ms)'"
        echo "plot $p_comm$p_ex keyentry with lines lw 1.5 lc rgb '#444444' title 'exposed (solid)', keyentry with lines lw 1 dt (6,4) lc rgb '#444444' title 'total comm (dashed)'"
    else
        skip exposed_comm
    fi

    if [ -n "$p_map" ]; then
        charts="$charts map_vs_time"
        echo "set output 'map_vs_time.png'"
        echo "set title '${prefix}mAP vs wall time'"
        echo "set xlabel 'wall time since start of training (s)'"
        echo "set ylabel 'mAP (0 to 1)'"
        echo "set yrange [0:1]"
        echo "plot ${p_map%, }"
    fi
    echo "unset output"
} >"$tmp/plot.gp"
[ -n "$charts" ] || die 1 "no values to plot in: $*"

# gnuplot's notes on one-value ranges (a run of one row) are left out of its messages.
(cd "$tmp" && gnuplot plot.gp) 2>"$tmp/gnuplot.err"
gp_rc=$?
sed '/^Warning: empty [xy]2\{0,1\} range \[.*\], adjusting to/d' "$tmp/gnuplot.err" >&2
[ "$gp_rc" -eq 0 ] || die 1 "gnuplot failed (exit $gp_rc)"

for chart in $charts; do
    png="$tmp/$chart.png"
    [ -s "$png" ] || die 1 "$chart.png: gnuplot wrote no image"
    sig=$(od -An -tx1 -N8 "$png" | tr -d ' \n')
    [ "$sig" = 89504e470d0a1a0a ] || die 1 "$chart.png: not a PNG file"
done

mkdir -p "$outdir" || die 1 "$outdir: cannot create the output directory"
for chart in $charts; do
    mv -f "$tmp/$chart.png" "$outdir/$chart.png" || die 1 "$outdir/$chart.png: cannot write"
    printf '%s\n' "$outdir/$chart.png"
done
