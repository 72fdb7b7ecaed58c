#!/bin/sh
# Prints the stock-vs-scalednn comparison of training CSVs (written by
# `./darknet detector train ... -csv FILE` or [scalednn] csv=FILE).
#   scripts/compare.sh LABEL=FILE.csv [LABEL=FILE.csv ...]
#   scripts/compare.sh -target T LABEL=FILE.csv [LABEL=FILE.csv ...]
# Per run: steps, iterations reached, images, wall time of the steps,
# images/s, median step time, final average loss, bytes exchanged per step,
# the mean exposed communication per step (stock: its weight averaging spread
# over the steps), and the mean time a step waited for the slower replica
# (scalednn mode).
# With -target (runs trained with -map): time to accuracy instead, up to the
# first evaluation at or above T (elapsed_s, which excludes the evaluations):
# whether and where the target was reached, the training time to it, the
# iterations, images/s, MB exchanged per step, exposed communication per step,
# and the saving against the first run.  A run that never reached T says so
# with its best accuracy; it gets no saving.
set -eu
target=""
if [ "${1:-}" = "-target" ]; then
    target=${2:?-target needs a value}
    shift 2
fi
if [ -z "$target" ]; then
    printf '%-22s %6s %6s %7s %8s %8s %9s %9s %10s %11s %11s\n' run steps iters images "time(s)" \
        "img/s" "step(ms)" "avg loss" "MB/step" "exposed(ms)" "sync(ms)"
    for arg in "$@"; do
        label=${arg%%=*}
        file=${arg#*=}
        awk -F, -v label="$label" '
            /^#/ { next }
            !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
            { n++; s = $c["seconds"]; t += s; st[n] = s * 1000; ex += $c["exposed_comm_s"] * 1000;
              sy += $c["sync_wait_s"] * 1000; bytes += $c["bytes_exchanged"];
              iters = $c["iteration"]; images = $c["images"]; avg = $c["avg_loss"] }
            function median(a, n,    i, j, tmp) {
                for (i = 2; i <= n; i++) { tmp = a[i]; j = i - 1;
                    while (j > 0 && a[j] > tmp) { a[j + 1] = a[j]; j-- } a[j + 1] = tmp }
                return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
            END {
                if (n == 0) { printf "%-22s (no rows)\n", label; exit }
                printf "%-22s %6d %6d %7d %8.2f %8.1f %9.2f %9.4f %10.3f %11.3f %11.3f\n", label, n,
                       iters, images, t, images / t, median(st, n), avg, bytes / n / 1e6, ex / n,
                       sy / n }' "$file"
    done
    exit 0
fi

printf '%-22s %-18s %9s %6s %8s %9s %11s %8s\n' run "mAP>=$target" "time(s)" iters "img/s" \
    "MB/step" "exposed(ms)" saving
base=""
for arg in "$@"; do
    label=${arg%%=*}
    file=${arg#*=}
    line=$(awk -F, -v target="$target" '
        /^#/ { next }
        !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
        done { next }
        { n++; ex += $c["exposed_comm_s"] * 1000; bytes += $c["bytes_exchanged"];
          iters = $c["iteration"]; images = $c["images"]; el = $c["elapsed_s"] }
        $c["map"] != "" {
            m = $c["map"] + 0; evals++
            if (m > best) best = m
            if (m >= target) { done = 1 }
        }
        END {
            if (n == 0) { print "norows"; exit }
            printf "%s %.4f %.2f %d %d %.6f %.6f %d\n", done ? "yes" : "no", done ? m : best, el,
                   iters, images, bytes / n / 1e6, ex / n, evals }' "$file")
    set -- $line
    if [ "$1" = norows ]; then
        printf '%-22s (no rows)\n' "$label"
        continue
    fi
    reached=$1 acc=$2 secs=$3 iters=$4 images=$5 mb=$6 ex=$7 evals=$8
    if [ "$evals" -eq 0 ]; then
        printf '%-22s (no evaluation in the CSV: train with -map)\n' "$label"
        continue
    fi
    if [ "$reached" = yes ]; then
        what="yes ($acc)"
        if [ -z "$base" ]; then
            base=$secs
            saving="-"
        elif [ "$base" = NA ]; then
            # the first run trained $base_lb s without reaching T: its time to
            # T is longer than that, so the saving is at least this
            saving=$(awk -v b="$base_lb" -v t="$secs" 'BEGIN { printf ">%.1f%%", 100 * (1 - t / b) }')
        else
            saving=$(awk -v b="$base" -v t="$secs" 'BEGIN { printf "%.1f%%", 100 * (1 - t / b) }')
        fi
    else
        what="NO (best $acc)"
        saving="n/a"
        if [ -z "$base" ]; then
            base=NA
            base_lb=$secs
        fi
    fi
    awk -v l="$label" -v w="$what" -v s="$secs" -v it="$iters" -v im="$images" -v mb="$mb" \
        -v ex="$ex" -v sv="$saving" 'BEGIN {
        printf "%-22s %-18s %9.2f %6d %8.1f %9.3f %11.3f %8s\n", l, w, s, it, (s > 0 ? im / s : 0),
               mb, ex, sv }'
done
